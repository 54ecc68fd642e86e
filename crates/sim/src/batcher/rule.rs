//! Triton's batching rule and its batcher thread's payloads, free of the engine: what
//! [`Batcher::decide_payload`] sends, and when a thread wakes.

use std::collections::VecDeque;

use crate::rng::SimRng;
use crate::scenario::{BatcherSpec, ReplayInputs};
use crate::timing::service::Residuals;

/// How long Triton's batcher thread sleeps when nothing waits (`default_wait_microseconds`).
pub const IDLE_POLL_NS: u64 = 500_000_000;

/// What the batcher decides about the requests waiting behind the current payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Move this many waiting requests (the oldest first) into the payload now; 0 moves none
    /// (the payload is full and saturated).
    Send(u32),
    /// Move nothing; look again at this time (ns) unless woken before.
    WaitUntil(u64),
    /// Nothing waits.
    Idle,
}

/// The batcher's parameters, ready for decisions.
#[derive(Debug, Clone, PartialEq)]
pub struct Batcher {
    /// Largest batch.
    pub max_batch_size: u32,
    /// Preferred sizes, ascending; `[max_batch_size]` when none were given.
    preferred_ascending: Vec<u32>,
    /// Maximum wait of the oldest request, in nanoseconds.
    pub max_queue_delay_ns: u64,
    /// Whether payloads may be formed ahead of a free model instance (`batcher.prefetch`).
    pub prefetch: bool,
    /// From an idle model instance taking a batch to its compute start
    /// (`batcher.dispatch_latency`); 0 for a batch taken at the instance's release.
    pub dispatch_latency_ns: u64,
    /// The spread of the dispatch latency (the replay's `dispatch_residuals`): each dispatch is
    /// `dispatch_latency_ns` times a factor drawn from it. `None`: exactly `dispatch_latency_ns`.
    pub dispatch_residuals: Option<Residuals>,
    /// From a batch's compute end to its model instance being free (`batcher.release_latency`),
    /// before the per-request part.
    pub release_latency_ns: u64,
    /// Added to the release for each request of the batch (the replay's
    /// `release_latency_per_request`).
    pub release_latency_per_request_ns: u64,
    /// Share of batch ends at which the thread runs before the freed instance takes a payload
    /// (the replay's `thread_first_fraction`), 0 to 1.
    pub thread_first_fraction: f64,
    /// Share of the wake-ups at a batch's end, with requests waiting, that the thread sleeps
    /// through (`batcher.missed_release`), 0 to 1.
    pub missed_release: f64,
}

/// Where the thread is in Triton's payload life cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Current {
    /// No request yet (`UNINITIALIZED`).
    Empty,
    /// The tail of the scheduled payloads, still growing (`SCHEDULED`).
    Scheduled,
    /// Taken by a model instance (`EXECUTING`): the next requests start a new payload.
    Taken,
}

/// A payload waiting for a model instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payload {
    /// Requests in it.
    pub size: u32,
    /// Queue time of its oldest request, in nanoseconds.
    pub oldest_queued_ns: u64,
}

/// One server's batcher thread and payload queue. Payloads hold the oldest requests of the
/// server's queue, in order: the engine keeps requests in its queue until a model instance takes
/// them, and this struct says how many of the front ones are spoken for.
#[derive(Debug, Clone)]
pub struct BatcherThread {
    /// Payloads formed and waiting for a model instance, oldest first.
    scheduled: VecDeque<Payload>,
    /// Requests in `scheduled`.
    in_payloads: u32,
    current: Current,
    /// Triton's `payload_saturated_`: the current payload takes no more requests.
    saturated: bool,
    /// Triton's `next_preferred_batch_size_`: waiting requests that wake the thread on an
    /// arrival.
    next_preferred: u32,
}

impl Default for BatcherThread {
    fn default() -> Self {
        BatcherThread {
            scheduled: VecDeque::new(),
            in_payloads: 0,
            current: Current::Empty,
            saturated: false,
            next_preferred: 0,
        }
    }
}

impl Batcher {
    /// Builds a batcher from a validated scenario section and the pool's replay inputs (empty
    /// unless a run is replayed). `prefetch` is Triton's rule (asked of the pool's queue policy)
    /// unless `batcher.prefetch = false` turns it off.
    pub fn new(spec: &BatcherSpec, replay: &ReplayInputs, queue_allows_prefetch: bool) -> Batcher {
        let mut preferred = spec.preferred_batch_size.clone();
        if preferred.is_empty() {
            preferred.push(spec.max_batch_size);
        }
        preferred.sort_unstable();
        preferred.dedup();
        Batcher {
            max_batch_size: spec.max_batch_size,
            preferred_ascending: preferred,
            max_queue_delay_ns: spec.max_queue_delay.0,
            prefetch: queue_allows_prefetch && spec.prefetch.unwrap_or(true),
            dispatch_latency_ns: spec.dispatch_latency.0,
            // Validated with the scenario: `None` only where none were given.
            dispatch_residuals: replay
                .dispatch_residuals
                .as_deref()
                .and_then(Residuals::from_ratios),
            release_latency_ns: spec.release_latency.0,
            release_latency_per_request_ns: replay.release_latency_per_request.0,
            thread_first_fraction: replay.thread_first_fraction,
            missed_release: spec.missed_release,
        }
    }

    /// From an idle model instance taking a batch to its compute start, in ns: the dispatch
    /// latency, times a factor drawn from `rng` when it has residuals (`rng` untouched
    /// otherwise).
    #[inline]
    pub fn draw_dispatch_ns(&self, rng: &mut SimRng) -> u64 {
        match &self.dispatch_residuals {
            None => self.dispatch_latency_ns,
            Some(r) => crate::time::round_ns(self.dispatch_latency_ns as f64 * r.draw(rng)),
        }
    }

    fn is_preferred(&self, size: u32) -> bool {
        self.preferred_ascending.binary_search(&size).is_ok()
    }

    fn max_preferred(&self) -> u32 {
        *self
            .preferred_ascending
            .last()
            .expect("at least one preferred size")
    }

    /// Applies the rule to a model instance that is free, with `queued` requests waiting and no
    /// payload: the batch to run now, or when to look again. `oldest_queued_ns` gives the oldest
    /// request's queue time.
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
        self.decide_payload(
            &mut BatcherThread::default(),
            now_ns,
            queued,
            oldest_queued_ns(),
        )
    }

    /// Triton's `GetDynamicBatch`: what to do with the `waiting` requests (at least one) behind
    /// `thread`'s current payload, the oldest queued at `oldest_waiting_ns`. Updates the
    /// thread's saturation and its next preferred size.
    pub fn decide_payload(
        &self,
        thread: &mut BatcherThread,
        now_ns: u64,
        waiting: u32,
        oldest_waiting_ns: u64,
    ) -> Decision {
        debug_assert!(waiting > 0);
        let payload = thread.current_size();
        let max_preferred = self.max_preferred();
        // The scan over the waiting requests, oldest first (each of batch size 1); it stops at
        // `max_batch_size`, so it is bounded by it.
        let (mut pending, mut best, mut send_now) = (0u32, 0u32, false);
        for _ in 0..waiting {
            if payload + pending != 0 {
                if payload + pending + 1 > max_preferred && best == 0 {
                    best = pending;
                    thread.saturated = true;
                }
                if payload + pending + 1 > self.max_batch_size {
                    send_now = true;
                    break;
                }
            }
            pending += 1;
            if self.is_preferred(payload + pending) {
                best = pending;
            }
        }
        let delay_ns = self.max_queue_delay_ns;
        let waited_ns = now_ns.saturating_sub(oldest_waiting_ns);
        let delay_exceeded = delay_ns != 0 && waited_ns >= delay_ns;
        if best != 0 && !delay_exceeded {
            if delay_ns == 0 {
                thread.saturated = true;
            }
            return Decision::Send(best);
        }
        if pending == 0 {
            return Decision::Send(0);
        }
        if send_now || payload + pending >= max_preferred {
            thread.saturated = true;
            return Decision::Send(pending);
        }
        if delay_exceeded || delay_ns == 0 {
            return Decision::Send(pending);
        }
        let next = self
            .preferred_ascending
            .iter()
            .copied()
            .find(|&p| p > pending + payload)
            .unwrap_or(self.preferred_ascending[0]);
        // Triton subtracts in an unsigned type: below the payload, no arrival reaches it.
        thread.next_preferred = next.checked_sub(payload).unwrap_or(u32::MAX);
        if !thread.saturated && payload != 0 && !self.is_preferred(payload) {
            return Decision::Send(pending);
        }
        // Triton sleeps in whole microseconds; under one, it sends now.
        let wait_us = (delay_ns - waited_ns) / 1_000;
        if wait_us == 0 {
            return Decision::Send(pending);
        }
        Decision::WaitUntil(now_ns + wait_us * 1_000)
    }
}

impl BatcherThread {
    /// Requests in the payloads (the front of the server's queue, in order).
    #[inline]
    pub fn in_payloads(&self) -> u32 {
        self.in_payloads
    }

    /// Payloads waiting for a model instance.
    #[inline]
    pub fn scheduled(&self) -> usize {
        self.scheduled.len()
    }

    fn current_size(&self) -> u32 {
        match self.current {
            Current::Scheduled => self.scheduled.back().map_or(0, |p| p.size),
            Current::Empty | Current::Taken => 0,
        }
    }

    /// The top of Triton's batcher loop: a saturated or taken payload is replaced by a new,
    /// empty one.
    pub fn refresh(&mut self) {
        if self.saturated || self.current == Current::Taken {
            self.current = Current::Empty;
            self.saturated = false;
            self.next_preferred = 0;
        }
    }

    /// Whether the thread may fill a payload now: with prefetching, while fewer than two per
    /// model instance wait; without, while a free model instance has no payload to take.
    #[inline]
    pub fn slot_available(&self, batcher: &Batcher, model_instances: u32, free: u32) -> bool {
        if batcher.prefetch {
            self.scheduled.len() < 2 * model_instances as usize
        } else {
            self.scheduled.len() < free as usize
        }
    }

    /// Whether an arrival that leaves `waiting` requests behind the payloads wakes the thread
    /// (Triton's `Enqueue`), given whether a slot is free.
    #[inline]
    pub fn woken_by_arrival(&self, waiting: u32, slot_available: bool) -> bool {
        slot_available
            && (self.saturated || self.current == Current::Taken || waiting >= self.next_preferred)
    }

    /// Moves the `n` oldest waiting requests (the oldest queued at `oldest_queued_ns`) into the
    /// current payload, scheduling it if it was empty.
    pub fn add(&mut self, n: u32, oldest_queued_ns: u64) {
        debug_assert!(n > 0 && self.current != Current::Taken);
        match self.current {
            Current::Scheduled => {
                let tail = self.scheduled.back_mut().expect("a scheduled payload");
                tail.size += n;
            }
            Current::Empty | Current::Taken => {
                self.scheduled.push_back(Payload {
                    size: n,
                    oldest_queued_ns,
                });
                self.current = Current::Scheduled;
            }
        }
        self.in_payloads += n;
    }

    /// A free model instance takes the oldest payload, and with a queue delay the ones behind
    /// it that fit and whose oldest request has waited longer than the delay (Triton's
    /// `InstanceQueue::Dequeue`); the first that has waited longer but does not fit, if it is
    /// the growing payload, grows no more. Returns the batch size, or `None` with no payload
    /// waiting.
    pub fn take(&mut self, batcher: &Batcher, now_ns: u64) -> Option<u32> {
        let head = self.scheduled.pop_front()?;
        let mut size = head.size;
        if batcher.max_queue_delay_ns > 0 && batcher.max_batch_size > 1 {
            while let Some(next) = self.scheduled.front()
                && now_ns.saturating_sub(next.oldest_queued_ns) > batcher.max_queue_delay_ns
            {
                if size + next.size > batcher.max_batch_size {
                    // Triton marks it executing before it checks the size: it stays queued
                    // at its size, and the thread starts a new payload.
                    if self.scheduled.len() == 1 && self.current == Current::Scheduled {
                        self.current = Current::Taken;
                    }
                    break;
                }
                size += next.size;
                self.scheduled.pop_front();
            }
        }
        if self.scheduled.is_empty() && self.current == Current::Scheduled {
            self.current = Current::Taken;
        }
        self.in_payloads -= size;
        Some(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::DurationNs;

    const MS: u64 = 1_000_000;

    fn batcher(max: u32, preferred: &[u32], delay_ns: u64) -> Batcher {
        Batcher::new(
            &BatcherSpec {
                max_batch_size: max,
                preferred_batch_size: preferred.to_vec(),
                max_queue_delay: DurationNs(delay_ns),
                ..BatcherSpec::default()
            },
            &ReplayInputs::default(),
            true,
        )
    }

    #[test]
    fn no_batching_sends_each_request_at_once() {
        let b = batcher(1, &[], MS);
        assert_eq!(b.decide(0, 5, || 0), Decision::Send(1));
        assert_eq!(b.decide(0, 0, || 0), Decision::Idle);
    }

    #[test]
    fn largest_fitting_preferred_size_is_sent_at_once() {
        let b = batcher(16, &[4, 8], MS);
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
        let b = batcher(8, &[4, 8], 2 * MS);
        // Six queued, the oldest 1 ms in: the largest preferred size that fits.
        assert_eq!(b.decide(MS, 6, || 0), Decision::Send(4));
        // The oldest has waited its 2 ms: all six (Triton's GetDynamicBatch).
        assert_eq!(b.decide(2 * MS, 6, || 0), Decision::Send(6));
        assert_eq!(
            b.decide(2 * MS, 9, || 0),
            Decision::Send(8),
            "never past the maximum"
        );
    }

    #[test]
    fn without_preferred_sizes_a_full_batch_is_sent_at_once() {
        let b = batcher(8, &[], MS);
        assert_eq!(b.decide(0, 9, || 0), Decision::Send(8));
        assert_eq!(
            b.decide(10_000, 7, || 5_000),
            Decision::WaitUntil(MS + 5_000)
        );
    }

    #[test]
    fn after_the_delay_everything_queued_is_sent_up_to_max() {
        let b = batcher(8, &[4], MS);
        assert_eq!(b.decide(MS - 2_000, 3, || 0), Decision::WaitUntil(MS));
        assert_eq!(b.decide(MS, 3, || 0), Decision::Send(3));
        let zero_delay = batcher(8, &[4], 0);
        assert_eq!(zero_delay.decide(7, 3, || 7), Decision::Send(3));
    }

    #[test]
    fn the_wait_is_whole_microseconds_and_under_one_sends_now() {
        let b = batcher(8, &[4], MS);
        // 1.5 us left: Triton sleeps 1 us, then finds 0.5 us left and sends.
        assert_eq!(b.decide(MS - 1_500, 2, || 0), Decision::WaitUntil(MS - 500));
        assert_eq!(b.decide(MS - 500, 2, || 0), Decision::Send(2));
    }

    #[test]
    fn a_payload_at_a_non_preferred_size_takes_new_requests_at_once() {
        let b = batcher(8, &[4, 8], 2 * MS);
        let mut thread = BatcherThread::default();
        // The delay ran out with three waiting: they move into a payload.
        assert_eq!(
            b.decide_payload(&mut thread, 2 * MS, 3, 0),
            Decision::Send(3)
        );
        thread.add(3, 0);
        thread.refresh();
        assert_eq!(
            thread.current_size(),
            3,
            "not saturated: the payload stays current"
        );
        // A new request joins at once: 3 is not a preferred size.
        assert_eq!(
            b.decide_payload(&mut thread, 2 * MS + 10, 1, 2 * MS + 10),
            Decision::Send(1)
        );
        thread.add(1, 2 * MS + 10);
        // At 4 (preferred) the next one waits for 8 or its delay.
        assert!(matches!(
            b.decide_payload(&mut thread, 2 * MS + 20, 1, 2 * MS + 20),
            Decision::WaitUntil(_)
        ));
        assert_eq!(thread.next_preferred, 4, "8 - the payload's 4");
    }

    #[test]
    fn an_arrival_below_the_next_preferred_size_does_not_wake_the_thread() {
        let b = batcher(8, &[4], 2 * MS);
        let mut thread = BatcherThread::default();
        assert!(
            thread.woken_by_arrival(1, true),
            "a new payload: any arrival"
        );
        assert_eq!(
            b.decide_payload(&mut thread, 0, 1, 0),
            Decision::WaitUntil(2 * MS)
        );
        assert!(!thread.woken_by_arrival(3, true));
        assert!(thread.woken_by_arrival(4, true));
        assert!(!thread.woken_by_arrival(4, false), "no slot, no wake-up");
    }

    #[test]
    fn reaching_the_largest_preferred_size_saturates_the_payload() {
        let b = batcher(8, &[4, 8], 0);
        let mut thread = BatcherThread::default();
        assert_eq!(b.decide_payload(&mut thread, 0, 5, 0), Decision::Send(4));
        thread.add(4, 0);
        thread.refresh();
        assert_eq!(
            thread.current_size(),
            0,
            "with no delay any preferred size saturates"
        );
        let b = batcher(8, &[4, 8], MS);
        let mut thread = BatcherThread::default();
        assert_eq!(b.decide_payload(&mut thread, 0, 9, 0), Decision::Send(8));
        thread.add(8, 0);
        thread.refresh();
        assert_eq!(thread.current_size(), 8);
        // The ninth request finds the payload full: it saturates, nothing moves.
        assert_eq!(b.decide_payload(&mut thread, 0, 1, 0), Decision::Send(0));
        thread.refresh();
        assert_eq!(thread.current_size(), 0);
    }

    #[test]
    fn slots_are_two_per_model_instance_with_prefetching_else_the_free_ones() {
        let b = batcher(8, &[], 0);
        let mut thread = BatcherThread::default();
        for at in 0..4 {
            assert!(thread.slot_available(&b, 2, 0));
            thread.refresh();
            thread.add(8, at);
            thread.saturated = true;
        }
        assert!(!thread.slot_available(&b, 2, 0));
        let no_prefetch = Batcher {
            prefetch: false,
            ..b.clone()
        };
        assert!(!BatcherThread::default().slot_available(&no_prefetch, 2, 0));
        assert!(BatcherThread::default().slot_available(&no_prefetch, 2, 1));
    }

    #[test]
    fn a_model_instance_takes_the_payloads_behind_that_fit_and_waited_past_the_delay() {
        let b = batcher(8, &[4, 8], 2 * MS);
        let mut thread = BatcherThread::default();
        for (size, oldest) in [(4, 0), (2, MS), (2, 5 * MS), (3, 0)] {
            thread.refresh();
            thread.add(size, oldest);
            thread.saturated = true;
        }
        assert_eq!(thread.in_payloads(), 11);
        // At 4 ms: the 2 queued at 1 ms has waited 3 ms > 2 ms; the next, 2 queued at 5 ms
        // (in the future of this check), has not.
        assert_eq!(thread.take(&b, 4 * MS), Some(6));
        assert_eq!(thread.take(&b, 8 * MS), Some(5), "2 + 3 fit in 8");
        assert_eq!(thread.take(&b, 8 * MS), None);
        assert_eq!(thread.in_payloads(), 0);
        let no_delay = batcher(8, &[4, 8], 0);
        let mut thread = BatcherThread::default();
        thread.add(2, 0);
        thread.refresh();
        thread.saturated = true;
        thread.refresh();
        thread.add(2, 0);
        assert_eq!(thread.take(&no_delay, MS), Some(2), "no delay, no merging");
        assert_eq!(thread.current, Current::Scheduled);
        assert_eq!(thread.take(&no_delay, MS), Some(2));
        assert_eq!(thread.current, Current::Taken);
    }

    #[test]
    fn a_payload_behind_that_waited_past_the_delay_but_does_not_fit_grows_no_more() {
        let b = batcher(8, &[4, 8], 8 * MS);
        // A full payload queued at 10 ms, and behind it a growing one of 4 queued at `since`.
        let four_behind_eight = |since: u64| {
            let mut thread = BatcherThread::default();
            thread.add(8, 10 * MS);
            thread.saturated = true;
            thread.refresh();
            thread.add(4, since);
            thread
        };
        let mut thread = four_behind_eight(20 * MS);
        // At 48 ms the 8 are taken; the 4 behind, queued since 20 ms, are examined for the
        // merge (Triton marks them executing) but do not fit: they stay queued as they are,
        // and the next requests start a new payload.
        assert_eq!(thread.take(&b, 48 * MS), Some(8));
        assert_eq!(thread.current, Current::Taken);
        thread.refresh();
        thread.add(5, 47 * MS);
        assert_eq!(thread.scheduled(), 2);
        // At 88 ms the 4 are taken; the 5 behind have waited 41 ms but 4 + 5 > 8.
        assert_eq!(thread.take(&b, 88 * MS), Some(4));
        assert_eq!(thread.current, Current::Taken);
        // A payload behind that has not waited past the delay is not examined: it grows on.
        let mut thread = four_behind_eight(45 * MS);
        assert_eq!(thread.take(&b, 48 * MS), Some(8));
        assert_eq!(thread.current, Current::Scheduled);
    }
}
