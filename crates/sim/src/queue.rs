//! The instance queue: FCFS, or one FIFO per priority level (level 0 served first), with Triton's
//! queue policy (`max_queue_size`, per-request timeout with `timeout_action` REJECT or DELAY).
//!
//! Requests that leave the queue early (timed out) are not searched for and removed; their
//! entries stay as tombstones and are skipped when they reach the front, so every operation is
//! O(1) amortised. The engine says which entries are still live through a predicate.

use crate::context::{Ctx, LANE_TIMEOUT, Place, Tickets};
use crate::event::EventKind;
use crate::record::RequestRecord;
use crate::scenario::TimeoutAction;
use std::collections::VecDeque;

/// One queued request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The request's in-flight ticket.
    pub ticket: u32,
    /// The ticket's generation when queued (tickets are reused).
    pub generation: u32,
    /// When it was queued, in nanoseconds.
    pub queued_ns: u64,
}

/// Which part of the queue an entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Waiting normally.
    Main,
    /// Timed out under `timeout_action = delay`: served after every request that has not.
    Delayed,
}

/// The queue of one instance.
#[derive(Debug, Clone)]
pub struct InstanceQueue {
    main: Vec<VecDeque<Entry>>,
    delayed: Vec<VecDeque<Entry>>,
    live: u32,
}

impl InstanceQueue {
    /// An empty queue with `levels` priority levels (>= 1).
    pub fn new(levels: u32) -> InstanceQueue {
        let levels = levels.max(1) as usize;
        InstanceQueue {
            main: vec![VecDeque::new(); levels],
            delayed: vec![VecDeque::new(); levels],
            live: 0,
        }
    }

    /// Live requests queued (tombstones excluded).
    #[inline]
    pub fn len(&self) -> u32 {
        self.live
    }

    /// True when no live request is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Queues a request at `level` (clamped to the last level).
    #[inline]
    pub fn push(&mut self, level: u32, entry: Entry, part: Part) {
        let level = (level as usize).min(self.main.len() - 1);
        match part {
            Part::Main => self.main[level].push_back(entry),
            Part::Delayed => self.delayed[level].push_back(entry),
        }
        self.live += 1;
    }

    /// Records that one live entry left without being popped (it is now a tombstone).
    #[inline]
    pub fn forget_one(&mut self) {
        debug_assert!(self.live > 0);
        self.live -= 1;
    }

    fn parts_mut<'q>(
        main: &'q mut [VecDeque<Entry>],
        delayed: &'q mut [VecDeque<Entry>],
    ) -> impl Iterator<Item = (Part, &'q mut VecDeque<Entry>)> {
        main.iter_mut()
            .map(|q| (Part::Main, q))
            .chain(delayed.iter_mut().map(|q| (Part::Delayed, q)))
    }

    /// Removes and returns the next request to serve: the oldest live one of the most urgent
    /// level, then the delayed ones. `live(entry, part)` says whether an entry is still queued.
    #[inline]
    pub fn pop(&mut self, mut live: impl FnMut(Entry, Part) -> bool) -> Option<Entry> {
        if self.live == 0 {
            return None;
        }
        // Fast path: the most urgent level's front entry is live (no tombstones, no delay).
        if let Some(q) = self.main.first_mut()
            && let Some(&e) = q.front()
            && live(e, Part::Main)
        {
            q.pop_front();
            self.live -= 1;
            return Some(e);
        }
        for (part, q) in Self::parts_mut(&mut self.main, &mut self.delayed) {
            while let Some(e) = q.pop_front() {
                if live(e, part) {
                    self.live -= 1;
                    return Some(e);
                }
            }
        }
        debug_assert!(false, "live count says {} but no live entry", self.live);
        None
    }

    /// Removes and returns the next request to serve that `eligible` accepts, in the order of
    /// [`InstanceQueue::pop`]. Within a level and part, entries joined in order and `eligible`
    /// must accept a prefix of them (it accepts those that joined early enough): a live entry
    /// it refuses holds back the rest of its level, and the next level is tried.
    #[inline]
    pub fn pop_eligible(
        &mut self,
        mut live: impl FnMut(Entry, Part) -> bool,
        mut eligible: impl FnMut(Entry) -> bool,
    ) -> Option<Entry> {
        if self.live == 0 {
            return None;
        }
        for (part, q) in Self::parts_mut(&mut self.main, &mut self.delayed) {
            while let Some(&e) = q.front() {
                if !live(e, part) {
                    q.pop_front();
                    continue;
                }
                if !eligible(e) {
                    break;
                }
                q.pop_front();
                self.live -= 1;
                return Some(e);
            }
        }
        None
    }

    /// Queue time of the request `index` places behind the front, for a queue of one priority
    /// level with no tombstones and nothing delayed (a queue without timeouts); `None` past the
    /// end.
    #[inline]
    pub fn queued_ns_at(&self, index: u32) -> Option<u64> {
        debug_assert!(
            self.main.len() == 1
                && self.delayed[0].is_empty()
                && self.main[0].len() == self.live as usize,
            "queued_ns_at needs a single FIFO without tombstones"
        );
        self.main[0].get(index as usize).map(|e| e.queued_ns)
    }

    /// The earliest queue time of any live request, dropping tombstones found at the fronts.
    pub fn oldest_queued_ns(&mut self, mut live: impl FnMut(Entry, Part) -> bool) -> Option<u64> {
        if self.live == 0 {
            return None;
        }
        let mut oldest = None::<u64>;
        for (part, q) in Self::parts_mut(&mut self.main, &mut self.delayed) {
            while let Some(&e) = q.front() {
                if live(e, part) {
                    oldest = Some(oldest.map_or(e.queued_ns, |o| o.min(e.queued_ns)));
                    break;
                }
                q.pop_front();
            }
        }
        oldest
    }
}

/// Whether a queue entry still stands for its ticket: the ticket was not reused since (same
/// generation) and is still waiting in that part of the queue (not timed out or taken).
#[inline]
pub(crate) fn is_live(tickets: &Tickets, e: Entry, part: Part) -> bool {
    let t = &tickets[e.ticket];
    t.generation == e.generation
        && match part {
            Part::Main => t.place == Place::Queued,
            Part::Delayed => t.place == Place::Delayed,
        }
}

/// A pool's queue policy and token limits.
pub(crate) struct QueuePolicy {
    /// `max_input_tokens`, or `u32::MAX` for none.
    pub max_input_tokens: u32,
    /// `max_output_tokens`, or `u32::MAX` for none.
    pub max_output_tokens: u32,
    pub max_queue_size: u32,
    pub timeout_ns: Option<u64>,
    pub timeout_action: TimeoutAction,
    pub levels: u32,
}

impl QueuePolicy {
    /// Cuts a request's sizes to the model's limits. They apply to what pre-processing hands on
    /// (a tokenizer reads the whole input and truncates its output), and to everything after it.
    #[inline]
    pub fn cut(&self, record: &mut RequestRecord) {
        if record.input_tokens > self.max_input_tokens {
            record.input_tokens = self.max_input_tokens;
            record.input_truncated = true;
        }
        if record.output_tokens > self.max_output_tokens {
            record.output_tokens = self.max_output_tokens;
            record.output_truncated = true;
        }
    }

    /// True when `queue` holds `max_queue_size` requests: the next is rejected.
    #[inline]
    pub fn is_full(&self, queue: &InstanceQueue) -> bool {
        self.max_queue_size > 0 && queue.len() >= self.max_queue_size
    }

    /// The request on `ticket` enters `queue` now, at its priority level, with its timeout.
    #[inline]
    pub fn push(&self, ctx: &mut Ctx, queue: &mut InstanceQueue, ticket: u32) {
        let now = ctx.now.ns();
        let t = &mut ctx.tickets[ticket];
        t.level = t.level.min(self.levels - 1);
        t.record.queued_ns = now;
        t.place = Place::Queued;
        let entry = Entry {
            ticket,
            generation: t.generation,
            queued_ns: now,
        };
        queue.push(t.level, entry, Part::Main);
        ctx.counters.queued += 1;
        if let Some(timeout_ns) = self.timeout_ns {
            ctx.events.push_in_order(
                LANE_TIMEOUT,
                now.saturating_add(timeout_ns),
                EventKind::QueueTimeout,
                ticket,
                t.generation,
            );
        }
    }

    /// The queue timeout of the request on `ticket` (of that `generation`) runs out; true when
    /// it is rejected (it left the queue), false when it waits on behind the others.
    pub fn time_out(
        &self,
        ctx: &mut Ctx,
        queue: &mut InstanceQueue,
        ticket: u32,
        generation: u32,
    ) -> bool {
        let t = &mut ctx.tickets[ticket];
        // `run` drops stale timeouts before they get here (`is_stale_timeout`).
        debug_assert!(t.generation == generation && t.place == Place::Queued);
        queue.forget_one();
        match self.timeout_action {
            TimeoutAction::Reject => {
                ctx.counters.queued -= 1;
                true
            }
            TimeoutAction::Delay => {
                t.place = Place::Delayed;
                let entry = Entry {
                    ticket,
                    generation,
                    queued_ns: t.record.queued_ns,
                };
                queue.push(t.level, entry, Part::Delayed);
                false
            }
        }
    }
}

/// True for a queue timeout whose request has moved on (taken, or its ticket reused): its
/// handler would do nothing.
#[inline]
pub(crate) fn is_stale_timeout(tickets: &Tickets, ticket: u32, generation: u32) -> bool {
    let t = &tickets[ticket];
    t.generation != generation || t.place != Place::Queued
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(ticket: u32, t: u64) -> Entry {
        Entry {
            ticket,
            generation: 0,
            queued_ns: t,
        }
    }

    #[test]
    fn higher_priority_levels_are_served_first_then_delayed() {
        let mut q = InstanceQueue::new(2);
        q.push(1, e(1, 0), Part::Main);
        q.push(0, e(2, 5), Part::Main);
        q.push(0, e(3, 1), Part::Delayed);
        q.push(7, e(4, 6), Part::Main);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop(|_, _| true).map(|e| e.ticket)).collect();
        assert_eq!(order, vec![2, 1, 4, 3]);
        assert!(q.is_empty());
    }

    #[test]
    fn tombstones_are_skipped_and_not_counted() {
        let mut q = InstanceQueue::new(1);
        q.push(0, e(1, 0), Part::Main);
        q.push(0, e(2, 3), Part::Main);
        q.forget_one();
        assert_eq!(q.len(), 1);
        assert_eq!(q.oldest_queued_ns(|e, _| e.ticket != 1), Some(3));
        assert_eq!(q.pop(|e, _| e.ticket != 1).map(|e| e.ticket), Some(2));
        assert_eq!(q.pop(|_, _| true), None);
    }

    #[test]
    fn an_ineligible_front_holds_back_its_level_but_not_the_next() {
        let mut q = InstanceQueue::new(2);
        q.push(0, e(1, 10), Part::Main);
        q.push(0, e(2, 20), Part::Main);
        q.push(1, e(3, 5), Part::Main);
        q.push(1, e(4, 30), Part::Main);
        // Eligible: queued by 9 ns. Level 0's front (10 ns) holds back level 0; level 1's
        // front (5 ns) goes, then its next (30 ns) holds back the rest.
        let early = |e: Entry| e.queued_ns <= 9;
        assert_eq!(
            q.pop_eligible(|_, _| true, early).map(|e| e.ticket),
            Some(3)
        );
        assert_eq!(q.pop_eligible(|_, _| true, early), None);
        assert_eq!(q.len(), 3, "nothing ineligible left the queue");
        // A tombstone at the front is dropped on the way, and the order is pop's.
        q.forget_one();
        let order: Vec<u32> = std::iter::from_fn(|| {
            q.pop_eligible(|e, _| e.ticket != 1, |_| true)
                .map(|e| e.ticket)
        })
        .collect();
        assert_eq!(
            order,
            vec![2, 4],
            "expected tickets 2 then 4, got {order:?}"
        );
    }
}
