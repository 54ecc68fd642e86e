//! The dynamic batcher, reproducing Triton Inference Server's rule.
//!
//! A batch is formed only when a model instance of the server is free. Then, with `n` requests
//! queued and `preferred` the `preferred_batch_size` list (or `[max_batch_size]` when the list is
//! empty):
//!
//! 1. if `max_queue_delay` is set and the oldest queued request has waited at least that long,
//!    everything queued is sent, up to `max_batch_size`, whether or not it is a preferred size;
//! 2. otherwise, if some preferred size fits (`p <= min(n, max_batch_size)`), the largest such
//!    size is sent at once;
//! 3. otherwise, with no `max_queue_delay`, everything queued is sent (up to `max_batch_size`);
//! 4. otherwise nothing is sent, and the batcher wakes again when the oldest request's delay runs
//!    out (or earlier, when a request arrives or an instance frees up).
//!
//! The order of 1 and 2 is Triton's (`DynamicBatchScheduler::GetDynamicBatch`: a preferred batch
//! is sent "if the queue delay hasn't been exceeded", else whatever is pending), and a real Triton
//! shows it: with `max_batch_size = 8`, `preferred_batch_size = [4, 8]` and a 2 ms delay under
//! load, it runs batches of 5, 6 and 7 that preferred-first would never form
//! (`scripts/triton_check.py`, docs/validation.md).
//!
//! `max_batch_size = 1` is no batching: every request is sent alone as soon as an instance is
//! free. `max_queue_delay = 0` sends whatever is queued whenever an instance is free.
//!
//! # Timeline example
//!
//! `max_batch_size = 8`, `preferred_batch_size = [4]`, `max_queue_delay = 2ms`, one instance,
//! every batch takes 10 ms; requests arrive at 0, 1, 2, 3, 4, 5 and 15 ms:
//!
//! ```text
//! t=0    r0 queued (n=1): no preferred size fits, r0 has waited 0 < 2ms -> wake at 2ms
//! t=1    r1 queued (n=2): still waiting
//! t=2    delay of r0 runs out: send [r0 r1] (n=2 < 4, delay expired) -> runs 2..12ms
//! t=3..5 r2 r3 r4 r5 queued; the instance is busy, nothing is formed
//! t=12   instance free, n=4, r2 has waited 10ms >= 2ms -> send [r2 r3 r4 r5], runs 12..22
//! t=15   r6 queued, instance busy
//! t=22   instance free, n=1, r6 has waited 7ms >= 2ms -> send [r6] at once, runs 22..32
//! ```
//!
//! The engine's golden tests replay this timeline and others like it.

use crate::scenario::BatcherSpec;

/// What the batcher decides when an instance is free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Send a batch of this many requests (the oldest first) now.
    Send(u32),
    /// Send nothing; look again at this time (ns) unless something changes before.
    WaitUntil(u64),
    /// The queue is empty.
    Idle,
}

/// The batcher's parameters, ready for decisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batcher {
    /// Largest batch.
    pub max_batch_size: u32,
    /// Preferred sizes, ascending; `[max_batch_size]` when none were given.
    preferred_ascending: Vec<u32>,
    /// Maximum wait of the oldest request, in nanoseconds.
    pub max_queue_delay_ns: u64,
}

impl Batcher {
    /// Builds a batcher from a validated scenario section.
    pub fn new(spec: &BatcherSpec) -> Batcher {
        let mut preferred = spec.preferred_batch_size.clone();
        if preferred.is_empty() {
            preferred.push(spec.max_batch_size);
        }
        preferred.sort_unstable();
        Batcher {
            max_batch_size: spec.max_batch_size,
            preferred_ascending: preferred,
            max_queue_delay_ns: spec.max_queue_delay.0,
        }
    }

    /// Applies Triton's rule at time `now_ns` with `queued` requests; `oldest_queued_ns` gives
    /// the queue time of the oldest (asked only when `max_queue_delay` is set). Call only when an
    /// instance is free.
    #[inline]
    pub fn decide(
        &self,
        now_ns: u64,
        queued: u32,
        oldest_queued_ns: impl FnOnce() -> u64,
    ) -> Decision {
        if queued == 0 {
            return Decision::Idle;
        }
        let fits = queued.min(self.max_batch_size);
        if self.max_queue_delay_ns == 0 {
            let preferred = self.preferred_ascending.iter().rev().find(|&&p| p <= fits);
            return Decision::Send(preferred.copied().unwrap_or(fits));
        }
        let deadline_ns = oldest_queued_ns().saturating_add(self.max_queue_delay_ns);
        if now_ns >= deadline_ns {
            return Decision::Send(fits);
        }
        match self.preferred_ascending.iter().rev().find(|&&p| p <= fits) {
            Some(&size) => Decision::Send(size),
            None => Decision::WaitUntil(deadline_ns),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::DurationNs;

    fn batcher(max: u32, preferred: &[u32], delay_ns: u64) -> Batcher {
        Batcher::new(&BatcherSpec {
            max_batch_size: max,
            preferred_batch_size: preferred.to_vec(),
            max_queue_delay: DurationNs(delay_ns),
            ..BatcherSpec::default()
        })
    }

    #[test]
    fn no_batching_sends_each_request_at_once() {
        let b = batcher(1, &[], 1_000);
        assert_eq!(b.decide(0, 5, || 0), Decision::Send(1));
        assert_eq!(b.decide(0, 0, || 0), Decision::Idle);
    }

    #[test]
    fn largest_fitting_preferred_size_is_sent_at_once() {
        let b = batcher(16, &[4, 8], 1_000);
        assert_eq!(b.decide(0, 5, || 0), Decision::Send(4));
        assert_eq!(b.decide(0, 8, || 0), Decision::Send(8));
        assert_eq!(
            b.decide(0, 20, || 0),
            Decision::Send(8),
            "preferred sizes win over max"
        );
    }

    #[test]
    fn once_the_delay_has_run_out_everything_queued_is_sent_not_a_preferred_size() {
        let b = batcher(8, &[4, 8], 2_000);
        // Six queued, the oldest 1 us in: the largest preferred size that fits.
        assert_eq!(b.decide(1_000, 6, || 0), Decision::Send(4));
        // The oldest has waited its 2 us: all six (Triton's GetDynamicBatch).
        assert_eq!(b.decide(2_000, 6, || 0), Decision::Send(6));
        assert_eq!(
            b.decide(2_000, 9, || 0),
            Decision::Send(8),
            "never past the maximum"
        );
    }

    #[test]
    fn without_preferred_sizes_a_full_batch_is_sent_at_once() {
        let b = batcher(8, &[], 1_000);
        assert_eq!(b.decide(0, 9, || 0), Decision::Send(8));
        assert_eq!(b.decide(10, 7, || 5), Decision::WaitUntil(1_005));
    }

    #[test]
    fn after_the_delay_everything_queued_is_sent_up_to_max() {
        let b = batcher(8, &[4], 1_000);
        assert_eq!(b.decide(999, 3, || 0), Decision::WaitUntil(1_000));
        assert_eq!(b.decide(1_000, 3, || 0), Decision::Send(3));
        let zero_delay = batcher(8, &[4], 0);
        assert_eq!(zero_delay.decide(7, 3, || 7), Decision::Send(3));
    }
}
