//! The dynamic batcher: Triton Inference Server's batcher thread and the payload queue between it
//! and the model instances.
//!
//! Triton (2.x: `DynamicBatchScheduler` and its rate limiter's `InstanceQueue`) does not wait for
//! a free model instance to form a batch. Its batcher thread moves queued requests into a
//! *payload* as soon as its rule allows and puts the payload on a queue that model instances take
//! from; while the payload waits there, the thread keeps adding requests to it. capsim runs the
//! same state machine ([`BatcherThread`]):
//!
//! - **The rule** ([`Batcher::decide_payload`], Triton's `GetDynamicBatch`), with `p` requests in
//!   the current payload and the waiting requests behind it, preferred sizes `P` (or
//!   `[max_batch_size]` when none are given):
//!   1. if a size in `P` can be reached (`p + k` for some `k` waiting) and the oldest waiting
//!      request has not waited `max_queue_delay`, the `k` of the largest such size move into the
//!      payload;
//!   2. otherwise, when the delay has run out, when there is no delay, when the payload would pass
//!      the largest preferred size, or when the payload is not empty and not at a preferred size,
//!      every waiting request moves in (up to `max_batch_size`);
//!   3. otherwise the thread sleeps until the oldest request's delay runs out.
//!
//!   A payload that reaches the largest preferred size (or, with no delay, any preferred size) is
//!   *saturated*: the next requests start a new payload.
//! - **Slots.** With Triton's prefetching (its default: on when the queue has no timeout, no
//!   `max_queue_size` and one priority level) the thread fills payloads while fewer than
//!   `2 x model instances` of them wait; without it (or with `batcher.prefetch = false`), only
//!   while a model instance is free, which is forming a batch when an instance frees up.
//! - **Taking.** A free model instance takes the oldest payload. With `max_queue_delay` set, it
//!   also takes the payloads behind it, while they fit in `max_batch_size` and the oldest request
//!   of each has waited longer than the delay (Triton merges them). The first one behind that
//!   has waited longer but does not fit grows no more: Triton's `InstanceQueue::Dequeue` marks
//!   it executing before it checks the size, so the batcher thread takes it for taken and starts
//!   a new payload, while it stays queued at its size. Under a long queue this cuts payloads
//!   short (a payload of 4 behind a full one stays 4), and the next ones too, until two fit.
//! - **Wake-ups.** The thread runs when a payload is taken, when a batch finishes, when its own
//!   timer runs out, and on an arrival only if a slot is free and the payload is saturated or
//!   taken or the waiting requests reach the next preferred size: a request that arrives behind a
//!   growing payload of a non-preferred size can wait for the next wake-up instead of joining it.
//!   With nothing waiting, the thread polls every 500 ms.
//! - **Batch ends slept through** (`batcher.missed_release`, default 0). Triton 2.51's thread
//!   sometimes does not wake when a batch ends with requests waiting: they start only when the
//!   next request arrives (or at its 500 ms poll), and its queue-delay timer does not wake it
//!   meanwhile. capsim sleeps through that share of the batch ends with requests waiting,
//!   drawn from the run's seed; `capsim calibrate --endpoint` fits it to its open loops.
//! - **The race at a batch's end.** When a batch completes, Triton wakes the thread and the
//!   model instance takes the next payload at once; either may run first. When the thread is
//!   first, the requests waiting behind a growing payload join it before it leaves. capsim lets
//!   the thread run first in the replay input `thread_first_fraction` of batch ends, drawn from the
//!   run's seed, and the instance otherwise (the default, 0: Triton's instance won most runs of
//!   the timeline below on a 2-core machine, `tests/triton_cli.rs`). The fraction is the
//!   server's thread scheduling, not its rule: `capsim validate --endpoint --server-trace`
//!   measures it from Triton's trace, by the share of batches taken at a batch's end that leave
//!   requests queued before them behind.
//!
//! `max_batch_size = 1` is no batching: every request is a payload of its own.
//!
//! # Timeline example
//!
//! `max_batch_size = 8`, `preferred_batch_size = [4]`, `max_queue_delay = 2ms`, one model
//! instance, every batch takes 10 ms; requests arrive at 0, 1, 2.5, 3, 4, 5 and 15 ms:
//!
//! ```text
//! t=0    r0 waits (1 < 4): the thread sleeps until r0's delay, 2 ms; the next preferred size is 4
//! t=1    r1 waits; 2 < 4 waiting, the thread is not woken
//! t=2    r0's delay: [r0 r1] move into payload A; the instance takes it (2..12)
//! t=2.5  r2 starts a new payload's wait: the thread sleeps until 4.5 ms
//! t=3,4  r3, r4 wait (3 < 4)
//! t=4.5  r2's delay: [r2 r3 r4] move into payload B, which waits for the busy instance
//! t=5    r5 arrives: 1 < 4 waiting, the thread is not woken, r5 does not join B
//! t=12   A done; the instance takes B (12..22); the thread wakes: r5 has waited 7 ms, so [r5]
//!        forms payload C at once
//! t=15   r6 arrives: C (size 1) is not at a preferred size, r6 joins it at once
//! t=22   B done; the instance takes C = [r5 r6] (22..32)
//! ```
//!
//! Forming batches only when the instance frees up would have run `[r2 r3 r4 r5]` at 12 ms and
//! `[r6]` at 22 ms. The engine's golden tests replay this timeline and others like it;
//! `tests/triton_cli.rs` replays it (sixteen times slower) against a real Triton, which runs these
//! batches; `scripts/triton_check.py` compares loads.

pub(crate) mod instance;
mod rule;

pub use rule::{Batcher, BatcherThread, Decision, IDLE_POLL_NS};
