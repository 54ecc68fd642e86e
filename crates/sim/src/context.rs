//! The narrow context through which the serving stages talk to the engine's kernel: the clock,
//! the event queue, the in-flight requests' tickets and the run's counters. Each stage owns its
//! own state and gets this as `&mut`; no stage sees another stage's state.

use std::ops::{Index, IndexMut};

use crate::event::{Event, EventQueue};
use crate::record::RequestRecord;
use crate::summary::SummaryBuilder;
use crate::time::SimTime;
use crate::timeseries::{IntervalCounters, LlmState};

// FIFO lanes of the event queue: stages whose delay is a constant of the stage, so their events
// are scheduled in time order (see `crate::event`). Were a delay to vary after all (two pools
// with different constants), the queue sends the out-of-order event to its heap: the order of
// events never depends on the lane chosen, only the speed does.
pub(crate) const LANE_GATEWAY: usize = 0;
pub(crate) const LANE_CACHE: usize = 1;
pub(crate) const LANE_POSTPROCESS: usize = 2;
pub(crate) const LANE_TIMEOUT: usize = 3;
pub(crate) const LANE_CLIENT: usize = 4;
pub(crate) const LANE_UPLINK: usize = 5;
pub(crate) const LANE_DOWNLINK: usize = 6;
pub(crate) const LANE_CLIENT_TIMEOUT: usize = 7;
pub(crate) const LANES: usize = 8;
/// A lane index that does not exist: the event goes to the heap.
pub(crate) const NO_LANE: usize = usize::MAX;

// Events stay small and `Copy`: the heap moves them on every push and pop.
const _: () = assert!(std::mem::size_of::<Event>() == 32);

/// A trace row: the request every attempt of it belongs to.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestId(pub u32);

/// A closed-loop client, by its number; [`ClientId::OPEN_LOOP`] for an open-loop request.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientId(pub u32);

impl ClientId {
    /// The client of an open-loop request: no client waits for its answer.
    pub const OPEN_LOOP: ClientId = ClientId(u32::MAX);
}

/// A pool, by its index in the scenario.
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolId(pub u16);

impl PoolId {
    /// Its index in tables by pool.
    #[inline(always)]
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// An instance, by its index in the fleet (every pool's instances, pool after pool).
#[repr(transparent)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InstanceId(pub u32);

impl InstanceId {
    /// Its index in tables by instance.
    #[inline(always)]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where an in-flight request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    Free,
    NetworkIn,
    Gateway,
    /// Waiting for a pre-processing worker.
    PreprocessWaiting,
    /// A pre-processing worker is busy with it.
    Preprocess,
    Queued,
    Delayed,
    Executing,
    Postprocess,
    /// Its response waits for a core of its instance's host (`[host]`).
    HostResponseWaiting,
    /// A core of its instance's host runs its response's way-out job (`[host]`).
    HostResponse,
    NetworkOut,
    Backoff,
}

/// The in-flight state of one request's attempt.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ticket {
    pub record: RequestRecord,
    pub place: Place,
    /// Bumped each time the ticket is finished, so events and queue entries of an earlier
    /// use are recognised as stale.
    pub generation: u32,
    pub level: u32,
    pub measured: bool,
    /// Holds a place in the gateway's admission (released once, at the response or the end).
    pub admitted: bool,
    /// Continuous batching: when its latest output token was sampled.
    pub last_token_ns: u64,
    /// Continuous batching: the steps its instance had started when it joined the instance
    /// queue (how many boundaries it has waited decides when it may be scheduled).
    pub steps_at_join: u64,
}

/// The table of reusable tickets: the engine's memory is bounded by the requests in flight.
pub(crate) struct Tickets {
    slots: Vec<Ticket>,
    free: Vec<u32>,
}

impl Tickets {
    pub fn with_capacity(capacity: usize) -> Tickets {
        Tickets {
            slots: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
        }
    }

    /// A ticket for a new request's first attempt, on its way to the gateway.
    #[inline]
    pub fn take(&mut self, record: RequestRecord, level: u32, measured: bool) -> u32 {
        let ticket = Ticket {
            record,
            place: Place::NetworkIn,
            generation: 0,
            level,
            measured,
            admitted: false,
            last_token_ns: 0,
            steps_at_join: 0,
        };
        match self.free.pop() {
            Some(t) => {
                let generation = self.slots[t as usize].generation;
                self.slots[t as usize] = Ticket {
                    generation,
                    ..ticket
                };
                t
            }
            None => {
                self.slots.push(ticket);
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// `ticket` is free for reuse.
    #[inline]
    pub fn release(&mut self, ticket: u32) {
        self.slots[ticket as usize].place = Place::Free;
        self.free.push(ticket);
    }
}

impl Index<u32> for Tickets {
    type Output = Ticket;

    #[inline(always)]
    fn index(&self, ticket: u32) -> &Ticket {
        &self.slots[ticket as usize]
    }
}

impl IndexMut<u32> for Tickets {
    #[inline(always)]
    fn index_mut(&mut self, ticket: u32) -> &mut Ticket {
        &mut self.slots[ticket as usize]
    }
}

/// Counts of the run's requests, for the end-of-run checks and the timeseries.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Attempts sent.
    pub sent: u64,
    /// Attempts finished (completed, rejected, timed out or failed).
    pub finished: u64,
    /// Attempts sent and not finished.
    pub in_system: u32,
    /// Requests in instance queues.
    pub queued: u32,
    /// Requests waiting for a pre-processing worker (with `[host]`, for a core on their way in).
    pub preprocess_waiting: u32,
    /// Model instances running a batch or step.
    pub busy_model_instances: u32,
    /// Identity of the next batch started.
    pub next_batch_id: u64,
}

/// What every stage may touch: the clock (read only by convention: only the kernel advances
/// it), the event queue, the tickets and the counters.
pub(crate) struct Ctx {
    pub now: SimTime,
    pub events: EventQueue,
    pub tickets: Tickets,
    pub counters: Counters,
    /// Counters of the current timeseries interval.
    pub interval: IntervalCounters,
    /// The streaming summary of finished requests and batches.
    pub summary: SummaryBuilder,
    /// The continuous batchers' state summed over their instances, for the timeseries:
    /// updated where it changes (requests queued or taken, steps planned or completed).
    pub llm_state: LlmState,
}
