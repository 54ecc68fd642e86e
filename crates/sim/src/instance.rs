//! Instances and model execution. An *instance* is one server behind the gateway (Triton
//! process): its own pre-processing workers, instance queue and dynamic batcher, and
//! `gpus * instance_count` *model instances*, each running one batch at a time. A model instance
//! that starts cold runs nothing until its load time has passed.

use crate::batcher::BatcherThread;
use crate::preprocess::WorkerPool;
use crate::queue::InstanceQueue;
use crate::time::SimTime;

/// One server of a pool.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Pool index.
    pub pool: u16,
    /// Index within the pool.
    pub index_in_pool: u32,
    /// Queue in front of the batcher.
    pub queue: InstanceQueue,
    /// Pre-processing workers, if the pool has any.
    pub workers: Option<WorkerPool>,
    /// First model instance (index into the engine's model-instance table).
    pub first_model_instance: u32,
    /// Model instances of this server.
    pub model_instances: u32,
    /// Of those, the ones ready and not running a batch (kept by the engine, so the batcher is
    /// not asked to form a batch no model instance could take, and the lowest free one is
    /// found without a scan).
    pub free: FreeSet,
    /// Requests routed here and not yet done executing.
    pub outstanding: u32,
    /// Time of the pending batcher wake-up, or [`SimTime::NEVER`].
    pub timer_at: SimTime,
    /// The dynamic batcher's thread and payloads (unused by a continuous batcher).
    pub batcher: BatcherThread,
    /// When the batcher thread went to sleep with nothing waiting, if it is asleep so.
    pub batcher_idle_since: Option<SimTime>,
    /// When the sleeping batcher thread polls (500 ms after it went idle, asked for by an
    /// arrival it was not woken for), or [`SimTime::NEVER`].
    pub poll_at: SimTime,
    /// Time of the one poll event this instance has queued, or [`SimTime::NEVER`].
    pub poll_event_at: SimTime,
}

impl Instance {
    /// Requests waiting here and not executing (pre-processing wait plus queue).
    #[inline]
    pub fn waiting(&self) -> u32 {
        self.queue.len() + self.workers.as_ref().map_or(0, WorkerPool::waiting)
    }
}

/// One model instance: runs one batch at a time.
#[derive(Debug, Clone)]
pub struct ModelInstance {
    /// The server it belongs to.
    pub instance: u32,
    /// Index within its server.
    pub index_in_instance: u32,
    /// Loaded and able to run batches.
    pub ready: bool,
    /// Running a batch.
    pub busy: bool,
    /// When the current batch started.
    pub batch_start: SimTime,
    /// When it last became idle: its previous batch ended, or it became ready.
    pub idle_since: SimTime,
    /// Tickets of the current batch (capacity kept between batches).
    pub members: Vec<u32>,
    /// Total time spent executing, in nanoseconds.
    pub busy_ns: u64,
    /// Batches executed.
    pub batches: u64,
}

impl ModelInstance {
    /// A model instance of server `instance`; `ready` is false when it starts cold.
    pub fn new(
        instance: u32,
        index_in_instance: u32,
        ready: bool,
        max_batch_size: u32,
    ) -> ModelInstance {
        ModelInstance {
            instance,
            index_in_instance,
            ready,
            busy: false,
            batch_start: SimTime::ZERO,
            idle_since: SimTime::ZERO,
            // Grows to the largest batch run, which a large `max_batch_size` may never reach.
            members: Vec::with_capacity(max_batch_size.min(8) as usize),
            busy_ns: 0,
            batches: 0,
        }
    }

    /// True when it can start a batch now.
    #[inline]
    pub fn is_free(&self) -> bool {
        self.ready && !self.busy
    }
}

/// A set of model-instance indices within one server (0-based), as bits: the engine keeps the
/// free ones here and starts each batch on the lowest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeSet {
    words: Vec<u64>,
}

impl FreeSet {
    /// A set over `n` indices, holding all of them when `full`, else none.
    pub fn new(n: u32, full: bool) -> FreeSet {
        let mut set = FreeSet {
            words: vec![0; (n as usize).div_ceil(64).max(1)],
        };
        if full {
            (0..n).for_each(|i| set.insert(i));
        }
        set
    }

    /// Adds index `i`.
    #[inline]
    pub fn insert(&mut self, i: u32) {
        self.words[i as usize / 64] |= 1 << (i % 64);
    }

    /// Removes index `i`.
    #[inline]
    pub fn remove(&mut self, i: u32) {
        self.words[i as usize / 64] &= !(1 << (i % 64));
    }

    /// How many indices it holds.
    #[inline]
    pub fn len(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    /// The lowest index held, if any.
    #[inline]
    pub fn first(&self) -> Option<u32> {
        // Nearly always one word: a server rarely has more than 64 model instances.
        let (w, word) = self.words.iter().enumerate().find(|(_, w)| **w != 0)?;
        Some(w as u32 * 64 + word.trailing_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_set_yields_the_lowest_index_across_words() {
        let mut set = FreeSet::new(130, false);
        assert_eq!(set.first(), None);
        for i in [129, 64, 70] {
            set.insert(i);
        }
        assert_eq!(set.first(), Some(64));
        set.remove(64);
        assert_eq!(set.first(), Some(70));
        set.remove(70);
        assert_eq!(set.first(), Some(129));
        set.insert(3);
        assert_eq!(set.first(), Some(3));
        assert_eq!(FreeSet::new(3, true).first(), Some(0));
        let mut full = FreeSet::new(65, true);
        (0..64).for_each(|i| full.remove(i));
        assert_eq!(full.first(), Some(64));
    }
}
