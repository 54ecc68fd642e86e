//! The dynamic batcher, reproducing Triton Inference Server's rule.
//!
//! A batch is formed only when a model instance of the server is free. Then, with `n` requests
//! queued and `preferred` the `preferred_batch_size` list (or `[max_batch_size]` when the list is
//! empty):
//!
//! 1. if some preferred size fits (`p <= min(n, max_batch_size)`), the largest such size is sent
//!    at once;
//! 2. otherwise, if the oldest queued request has waited at least `max_queue_delay`, everything
//!    queued is sent, up to `max_batch_size`;
//! 3. otherwise nothing is sent, and the batcher wakes again when the oldest request's delay runs
//!    out (or earlier, when a request arrives or an instance frees up).
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
//! t=12   instance free, n=4: preferred size 4 fits -> send [r2 r3 r4 r5] at once, runs 12..22
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
    /// the queue time of the oldest (asked only when no preferred size fits). Call only when an
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
        if let Some(&size) = self.preferred_ascending.iter().rev().find(|&&p| p <= fits) {
            return Decision::Send(size);
        }
        let deadline_ns = oldest_queued_ns().saturating_add(self.max_queue_delay_ns);
        if now_ns >= deadline_ns {
            Decision::Send(fits)
        } else {
            Decision::WaitUntil(deadline_ns)
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
