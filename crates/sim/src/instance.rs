//! Instances and model execution. An *instance* is one server behind the gateway (Triton
//! process): its own pre-processing workers, instance queue and dynamic batcher, and
//! `gpus * instance_count` *model instances*, each running one batch at a time. A model instance
//! that starts cold runs nothing until its load time has passed.

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
    /// Of those, how many are ready and not running a batch (kept by the engine, so the batcher
    /// is not asked to form a batch no model instance could take).
    pub free_model_instances: u32,
    /// Requests routed here and not yet done executing.
    pub outstanding: u32,
    /// Time of the pending batcher wake-up, or [`SimTime::NEVER`].
    pub timer_at: SimTime,
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
            members: Vec::with_capacity(max_batch_size as usize),
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
