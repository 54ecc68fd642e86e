//! The future-event list: a binary heap of small `Copy` events ordered by (time, sequence
//! number), so events at the same instant run in the order they were scheduled and every run
//! replays identically. Trace arrivals do not pass through it: they are already sorted, and the
//! engine merges them with the heap.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What happens at an event. The `target` of an [`Event`] is a ticket, an instance or a model
/// instance, depending on the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A request reaches the gateway (target: ticket).
    GatewayArrival,
    /// The gateway has processed a request and routes it (target: ticket).
    GatewayDone,
    /// A cache hit is answered (target: ticket).
    CacheAnswered,
    /// A request finished pre-processing (target: ticket).
    PreprocessDone,
    /// A request's queue timeout runs out (target: ticket; `aux`: its generation).
    QueueTimeout,
    /// The batcher's `max_queue_delay` of an instance's oldest request runs out (target: instance).
    BatcherTimer,
    /// A model instance finished its batch (target: model instance).
    BatchDone,
    /// A model instance finished loading (target: model instance).
    ModelInstanceReady,
    /// A request finished post-processing (target: ticket).
    PostprocessDone,
    /// A response reaches its client (target: ticket).
    ResponseDelivered,
    /// A closed-loop client sends its next request (target: client).
    ClientSend,
    /// A client retries a rejected or timed-out request after its backoff (target: ticket).
    RetrySend,
}

/// One scheduled event; 32 bytes, no heap data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// When it happens, in nanoseconds.
    pub time_ns: u64,
    seq: u64,
    /// Ticket, instance, model instance or client, per [`EventKind`].
    pub target: u32,
    /// Extra data (a generation), per [`EventKind`].
    pub aux: u32,
    /// What happens.
    pub kind: EventKind,
}

impl Ord for Event {
    #[inline]
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest event first.
        other
            .time_ns
            .cmp(&self.time_ns)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

impl PartialOrd for Event {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The pending events of a run.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Event>,
    next_seq: u64,
}

impl EventQueue {
    /// An empty queue with room for `capacity` pending events.
    pub fn with_capacity(capacity: usize) -> EventQueue {
        EventQueue {
            heap: BinaryHeap::with_capacity(capacity),
            next_seq: 0,
        }
    }

    /// Schedules an event.
    #[inline]
    pub fn push(&mut self, time_ns: u64, kind: EventKind, target: u32, aux: u32) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.heap.push(Event {
            time_ns,
            seq,
            target,
            aux,
            kind,
        });
    }

    /// Time of the earliest pending event.
    #[inline]
    pub fn peek_time_ns(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.time_ns)
    }

    /// Removes and returns the earliest pending event (ties: the first scheduled).
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        self.heap.pop()
    }

    /// Pending events.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
