//! Instances and model execution. An *instance* is one server behind the gateway (Triton
//! process): its own pre-processing workers, instance queue and batcher, and
//! `gpus * instance_count` *model instances*, each running one batch at a time. A model instance
//! that starts cold runs nothing until its load time has passed.

use std::sync::Arc;

use crate::context::{Ctx, InstanceId, PoolId};
use crate::event::EventKind;
use crate::preprocess::WorkerPool;
use crate::queue::InstanceQueue;
use crate::rng::SimRng;
use crate::time::SimTime;
use crate::timing::service::ServiceTime;
use crate::timing::slowdown::{Pauses, Slowdowns};
use crate::timing::step_time::StepTime;

/// One server of a pool.
#[derive(Debug, Clone)]
pub struct Instance {
    /// Its pool.
    pub pool: PoolId,
    /// Index within the pool.
    pub index_in_pool: u32,
    /// Queue in front of the batcher.
    pub queue: InstanceQueue,
    /// Pre-processing workers, if the pool has any; with `[host]`, the host's cores (which
    /// run responses too).
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
}

impl Instance {
    /// Requests waiting here and not executing (pre-processing wait plus queue; with
    /// `[host]`, responses waiting for a core too).
    #[inline]
    pub fn waiting(&self) -> u32 {
        self.queue.len() + self.workers.as_ref().map_or(0, WorkerPool::waiting)
    }
}

/// Every instance and model instance of the run.
pub(crate) struct Fleet {
    pub instances: Vec<Instance>,
    pub model_instances: Vec<ModelInstance>,
}

/// Where a batcher runs: its instance, the run's model instances and its pool's execution.
pub(crate) struct Site<'s> {
    /// The instance.
    pub index: InstanceId,
    pub instance: &'s mut Instance,
    pub model_instances: &'s mut [ModelInstance],
    pub execution: &'s mut Execution,
}

/// How a pool's batches (or steps) execute: the time model and its random stream.
pub(crate) struct Execution {
    /// Dynamic batcher's model (`None` for a continuous pool).
    pub service: Option<Arc<dyn ServiceTime>>,
    /// Continuous batcher's step-time model.
    pub step_time: Option<Arc<dyn StepTime>>,
    /// Whether `service` or `step_time` can ever extrapolate (asked once, so analytic models
    /// cost nothing).
    pub may_extrapolate: bool,
    /// Batches started whose execution time the model extrapolated.
    pub extrapolated_batches: u64,
    /// The replay input `slowdowns` (empty: none).
    pub slowdowns: Slowdowns,
    /// The replay input `pauses` (empty: none).
    pub pauses: Pauses,
    pub rng: SimRng,
}

/// Marks model instance `mi_index` (of `instance`) busy with a batch (or step) of `size`
/// requests until `done_ns`, and counts the batch.
#[inline]
pub(crate) fn begin_execution(
    ctx: &mut Ctx,
    instance: &mut Instance,
    mi: &mut ModelInstance,
    mi_index: u32,
    size: u32,
    done_ns: u64,
) {
    mi.busy = true;
    mi.batch_start = ctx.now;
    mi.batches += 1;
    instance.free.remove(mi.index_in_instance);
    ctx.counters.busy_model_instances += 1;
    ctx.interval.batches += 1;
    ctx.interval.batched += u64::from(size);
    ctx.summary.add_batch(size);
    ctx.events.push(done_ns, EventKind::BatchDone, mi_index, 0);
}

/// Marks model instance `mi_index` free again, its batch (or step) over now.
#[inline]
pub(crate) fn end_execution(ctx: &mut Ctx, fleet: &mut Fleet, mi_index: u32) {
    let now = ctx.now;
    let mi = &mut fleet.model_instances[mi_index as usize];
    mi.busy = false;
    mi.busy_ns += now - mi.batch_start;
    mi.idle_since = now;
    fleet.instances[mi.instance.index()]
        .free
        .insert(mi.index_in_instance);
    ctx.counters.busy_model_instances -= 1;
}

/// Takes model instance `mi_index` back right after [`end_execution`]: busy with no batch (its
/// release), until an event frees it.
#[inline]
pub(crate) fn hold_execution(ctx: &mut Ctx, fleet: &mut Fleet, mi_index: u32) {
    let now = ctx.now;
    let mi = &mut fleet.model_instances[mi_index as usize];
    mi.busy = true;
    mi.batch_start = now;
    fleet.instances[mi.instance.index()]
        .free
        .remove(mi.index_in_instance);
    ctx.counters.busy_model_instances += 1;
}

/// One model instance: runs one batch at a time.
#[derive(Debug, Clone)]
pub struct ModelInstance {
    /// The server it belongs to.
    pub instance: InstanceId,
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
    /// Tickets of the current batch (capacity kept between batches); a request whose client
    /// gave up while it computed is marked in place (the engine's `ABANDONED`).
    pub members: Vec<u32>,
    /// Total time spent executing, in nanoseconds.
    pub busy_ns: u64,
    /// Batches executed.
    pub batches: u64,
}

impl ModelInstance {
    /// A model instance of server `instance`; `ready` is false when it starts cold.
    pub fn new(
        instance: InstanceId,
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
