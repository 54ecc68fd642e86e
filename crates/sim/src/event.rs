//! The future-event list, ordered by (time, sequence number), so events at the same instant run
//! in the order they were scheduled and every run replays identically.
//!
//! Two structures hold pending events, and [`EventQueue::pop_until`] merges them by that one
//! order:
//! - a 4-ary min-heap of small `Copy` events (half the depth of a binary heap, and the four
//!   children of a node share a cache line or two), for events whose delay varies;
//! - FIFO *lanes*, for events whose delay is a constant of their stage (a fixed gateway
//!   overhead, a constant post-processing time, a queue timeout): scheduled at `now + constant`
//!   with `now` never going backwards, they arrive in time order, so a ring buffer keeps them
//!   sorted at O(1) per event. A lane accepts an event only when it is not earlier than the
//!   lane's last one; anything else goes to the heap, so the order stays exact whatever the
//!   caller pushes.
//!
//! Trace arrivals do not pass through either: they are already sorted, and the engine merges
//! them with this queue.

use std::collections::VecDeque;

/// What happens at an event. The `target` of an [`Event`] is a ticket, an instance or a model
/// instance, depending on the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A request reaches the gateway (target: ticket; `aux`: its generation).
    GatewayArrival,
    /// The gateway has processed a request and routes it (target: ticket; `aux`: its
    /// generation).
    GatewayDone,
    /// A cache hit is answered (target: ticket; `aux`: its generation).
    CacheAnswered,
    /// A request finished pre-processing (target: ticket; `aux`: its generation).
    PreprocessDone,
    /// A request's queue timeout runs out (target: ticket; `aux`: its generation).
    QueueTimeout,
    /// The batcher's `max_queue_delay` of an instance's oldest request runs out (target: instance).
    BatcherTimer,
    /// The batcher thread's 500 ms poll of an instance, when it sleeps with a request it was not
    /// woken for (target: instance).
    BatcherPoll,
    /// A model instance finished its batch (target: model instance).
    BatchDone,
    /// A model instance finished loading (target: model instance).
    ModelInstanceReady,
    /// A request finished post-processing (target: ticket; `aux`: its generation).
    PostprocessDone,
    /// A core of an instance's host (`[host]`) finished a response's way-out job (target:
    /// ticket; `aux`: its generation, stale when its client gave up meanwhile: the core is
    /// free all the same).
    HostResponseDone,
    /// A response reaches its client (target: ticket; `aux`: its generation).
    ResponseDelivered,
    /// A client's `load.client_timeout` runs out (target: ticket; `aux`: its generation).
    ClientTimeout,
    /// A closed-loop client sends its next request (target: client).
    ClientSend,
    /// A client retries a rejected or timed-out request after its backoff (target: ticket).
    RetrySend,
}

/// One scheduled event; 32 bytes, no heap data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// The order key: time in nanoseconds (high 64 bits), then the sequence number.
    key: u128,
    /// Ticket, instance, model instance or client, per [`EventKind`].
    pub target: u32,
    /// Extra data (a generation), per [`EventKind`].
    pub aux: u32,
    /// What happens.
    pub kind: EventKind,
}

impl Event {
    /// When it happens, in nanoseconds.
    #[inline(always)]
    pub fn time_ns(&self) -> u64 {
        (self.key >> 64) as u64
    }

    /// Pads the heap's last node: later than any event, never popped.
    const SENTINEL: Event = Event {
        key: u128::MAX,
        target: 0,
        aux: 0,
        kind: EventKind::BatchDone,
    };
}

/// Lanes an [`EventQueue`] can hold (bits of its non-empty mask).
pub const MAX_LANES: usize = 32;

/// Children of one heap node.
const ARITY: usize = 4;

/// The pending events of a run.
#[derive(Debug, Default)]
pub struct EventQueue {
    /// 4-ary min-heap by key in `heap[..heap_len]`: the children of `i` are `4i + 1 ..= 4i + 4`.
    /// At least [`ARITY`] sentinels follow the last event, so a node's four children can be
    /// compared without bounds checks or branches.
    heap: Vec<Event>,
    heap_len: usize,
    lanes: Vec<VecDeque<Event>>,
    /// Bit `l` set when lane `l` holds an event.
    nonempty_lanes: u32,
    next_seq: u64,
}

impl EventQueue {
    /// An empty queue with room for `capacity` pending heap events and `lanes` FIFO lanes
    /// (at most [`MAX_LANES`]; more are clamped).
    pub fn new(capacity: usize, lanes: usize) -> EventQueue {
        let lanes = lanes.min(MAX_LANES);
        EventQueue {
            heap: vec![Event::SENTINEL; capacity.max(1) + ARITY],
            heap_len: 0,
            lanes: (0..lanes).map(|_| VecDeque::with_capacity(64)).collect(),
            nonempty_lanes: 0,
            next_seq: 0,
        }
    }

    /// An empty queue with room for `capacity` pending events and no lanes.
    #[cfg(test)]
    pub fn with_capacity(capacity: usize) -> EventQueue {
        EventQueue::new(capacity, 0)
    }

    #[inline(always)]
    fn event(&mut self, time_ns: u64, kind: EventKind, target: u32, aux: u32) -> Event {
        let seq = self.next_seq;
        self.next_seq += 1;
        Event {
            key: (u128::from(time_ns) << 64) | u128::from(seq),
            target,
            aux,
            kind,
        }
    }

    /// Schedules an event.
    #[inline]
    pub fn push(&mut self, time_ns: u64, kind: EventKind, target: u32, aux: u32) {
        let event = self.event(time_ns, kind, target, aux);
        self.heap_push(event);
    }

    /// Schedules an event through FIFO lane `lane`, meant for events whose delay is constant
    /// for their stage. When the event is earlier than the lane's last one (or the lane does
    /// not exist) it goes to the heap instead; the pop order is the same either way.
    #[inline]
    pub fn push_in_order(
        &mut self,
        lane: usize,
        time_ns: u64,
        kind: EventKind,
        target: u32,
        aux: u32,
    ) {
        let event = self.event(time_ns, kind, target, aux);
        let Some(fifo) = self.lanes.get_mut(lane) else {
            self.heap_push(event);
            return;
        };
        if fifo.back().is_some_and(|last| last.key > event.key) {
            self.heap_push(event);
            return;
        }
        fifo.push_back(event);
        self.nonempty_lanes |= 1 << lane;
    }

    /// Removes and returns the earliest pending event (ties: the first scheduled) if it happens
    /// at or before `limit_ns`; otherwise leaves the queue as it is.
    #[inline(always)]
    pub fn pop_until(&mut self, limit_ns: u64) -> Option<Event> {
        // Checked here, inlined into the caller: in an open-loop run the next trace arrival
        // often comes first, and the full merge below is not needed to say so.
        if self.nonempty_lanes == 0 && (self.heap[0].key >> 64) as u64 > limit_ns {
            return None;
        }
        self.pop_until_merged(limit_ns)
    }

    /// [`EventQueue::pop_until`] over the heap and the lanes.
    #[inline(never)]
    fn pop_until_merged(&mut self, limit_ns: u64) -> Option<Event> {
        // The heap's root is a sentinel when the heap is empty.
        let mut best_key = self.heap[0].key;
        let mut best_lane = usize::MAX;
        let mut mask = self.nonempty_lanes;
        while mask != 0 {
            let lane = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            if let Some(front) = self.lanes[lane].front()
                && front.key < best_key
            {
                best_key = front.key;
                best_lane = lane;
            }
        }
        if best_key == u128::MAX || (best_key >> 64) as u64 > limit_ns {
            return None;
        }
        if best_lane == usize::MAX {
            return Some(self.heap_pop());
        }
        let fifo = &mut self.lanes[best_lane];
        let event = fifo.pop_front();
        if fifo.is_empty() {
            self.nonempty_lanes &= !(1 << best_lane);
        }
        event
    }

    /// Removes and returns the earliest pending event (ties: the first scheduled).
    #[cfg(test)]
    pub fn pop(&mut self) -> Option<Event> {
        self.pop_until(u64::MAX)
    }

    /// Time of the earliest pending event.
    #[cfg(test)]
    pub fn peek_time_ns(&self) -> Option<u64> {
        let lanes = self.lanes.iter().filter_map(|l| l.front());
        self.heap[..self.heap_len]
            .first()
            .into_iter()
            .chain(lanes)
            .min_by_key(|e| e.key)
            .map(Event::time_ns)
    }

    /// Pending events.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.heap_len + self.lanes.iter().map(VecDeque::len).sum::<usize>()
    }

    /// True when nothing is pending.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn heap_push(&mut self, event: Event) {
        if self.heap_len + ARITY >= self.heap.len() {
            let grown = self.heap.len() * 2;
            self.heap.resize(grown, Event::SENTINEL);
        }
        let mut hole = self.heap_len;
        self.heap_len += 1;
        while hole > 0 {
            let parent = (hole - 1) / ARITY;
            if self.heap[parent].key <= event.key {
                break;
            }
            self.heap[hole] = self.heap[parent];
            hole = parent;
        }
        self.heap[hole] = event;
    }

    /// Pops the root of a non-empty heap.
    #[inline]
    fn heap_pop(&mut self) -> Event {
        debug_assert!(self.heap_len > 0);
        let top = self.heap[0];
        self.heap_len -= 1;
        let len = self.heap_len;
        let last = self.heap[len];
        self.heap[len] = Event::SENTINEL;
        if len == 0 {
            return top;
        }
        let heap = &mut self.heap[..];
        let mut hole = 0;
        loop {
            let first = ARITY * hole + 1;
            if first >= len {
                break;
            }
            // The smallest of the four children, without data-dependent branches (sentinels
            // stand in for missing children); one bounds check for the four.
            let kids: &[Event; ARITY] = heap[first..first + ARITY]
                .try_into()
                .expect("a node has four child slots");
            let a = usize::from(kids[1].key < kids[0].key);
            let b = 2 + usize::from(kids[3].key < kids[2].key);
            let smallest = if kids[b].key < kids[a].key { b } else { a };
            let child = kids[smallest];
            if last.key <= child.key {
                break;
            }
            heap[hole] = child;
            hole = first + smallest;
        }
        heap[hole] = last;
        top
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    #[test]
    fn events_pop_by_time_then_scheduling_order() {
        let mut q = EventQueue::with_capacity(8);
        q.push(5, EventKind::BatchDone, 1, 0);
        q.push(3, EventKind::BatchDone, 2, 0);
        q.push(5, EventKind::BatchDone, 3, 0);
        q.push(5, EventKind::BatchDone, 4, 0);
        q.push(1, EventKind::BatchDone, 5, 0);
        let order: Vec<u32> = std::iter::from_fn(|| q.pop().map(|e| e.target)).collect();
        assert_eq!(order, vec![5, 2, 1, 3, 4]);
    }

    #[test]
    fn lanes_and_heap_merge_in_time_then_scheduling_order() {
        let mut q = EventQueue::new(8, 2);
        q.push_in_order(0, 5, EventKind::GatewayDone, 1, 0);
        q.push(5, EventKind::BatchDone, 2, 0);
        q.push_in_order(1, 5, EventKind::PostprocessDone, 3, 0);
        q.push_in_order(0, 4, EventKind::GatewayDone, 4, 0); // earlier than the lane's last: heap
        q.push_in_order(7, 2, EventKind::GatewayDone, 5, 0); // no such lane: heap
        q.push_in_order(0, 9, EventKind::GatewayDone, 6, 0);
        assert_eq!(q.len(), 6);
        assert_eq!(q.peek_time_ns(), Some(2));
        assert_eq!(q.pop_until(1), None, "nothing is due at 1");
        let order: Vec<u32> = std::iter::from_fn(|| q.pop().map(|e| e.target)).collect();
        assert_eq!(order, vec![5, 4, 1, 2, 3, 6]);
        assert!(q.is_empty());
    }

    /// The queue against a sorted reference, with random pushes to lanes and heap interleaved
    /// with pops, as the engine does (times never before the last popped one).
    #[test]
    fn random_schedules_pop_in_the_same_order_as_a_sorted_reference() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let mut q = EventQueue::new(16, 3);
        let mut reference: Vec<(u64, u64, u32)> = Vec::new();
        let mut seq = 0u64;
        let mut now = 0u64;
        let mut popped = 0;
        for step in 0..20_000u32 {
            if rng.random_bool(0.55) {
                let lane = rng.random_range(0..5usize);
                let delay = if lane < 3 {
                    [10, 250, 0][lane]
                } else {
                    rng.random_range(0..300)
                };
                let time = now + delay;
                q.push_in_order(lane, time, EventKind::BatchDone, step, 0);
                reference.push((time, seq, step));
                seq += 1;
            } else if !reference.is_empty() {
                reference.sort_unstable();
                let (time, _, target) = reference.remove(0);
                let e = q.pop().expect("the reference says an event is pending");
                assert_eq!((e.time_ns(), e.target), (time, target), "pop {popped}");
                now = time;
                popped += 1;
            }
        }
        reference.sort_unstable();
        let rest: Vec<u32> = std::iter::from_fn(|| q.pop().map(|e| e.target)).collect();
        let expected: Vec<u32> = reference.iter().map(|r| r.2).collect();
        assert_eq!(rest, expected);
        assert!(popped > 1_000);
    }
}
