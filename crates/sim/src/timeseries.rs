//! The run sampled over time (`timeseries.parquet`): one row per interval with the state at its
//! end (queue depths, requests in the system) and what happened during it (arrivals,
//! completions, batches, utilization). Its size grows with simulated time over the interval,
//! never with the number of requests.

/// Columns of the sampled run; row `i` covers `(time_ns[i] - interval, time_ns[i]]`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Timeseries {
    /// End of the interval, in nanoseconds since the origin.
    pub time_ns: Vec<u64>,
    /// Requests in instance queues at the end of the interval.
    pub queued: Vec<u32>,
    /// Requests waiting for a pre-processing worker.
    pub preprocess_waiting: Vec<u32>,
    /// Requests sent and not yet answered.
    pub in_system: Vec<u32>,
    /// Model instances executing a batch.
    pub busy_model_instances: Vec<u32>,
    /// Mean fraction of model instances busy during the interval.
    pub utilization: Vec<f64>,
    /// Requests sent during the interval.
    pub arrivals: Vec<u32>,
    /// Requests finished (any outcome) during the interval.
    pub finished: Vec<u32>,
    /// Batches started during the interval.
    pub batches: Vec<u32>,
    /// Mean size of those batches (0 when none).
    pub batch_size_mean: Vec<f64>,
    /// Continuous batching only (empty otherwise): sequences running at the end of the interval.
    pub running: Vec<u32>,
    /// Continuous batching only: requests waiting (instance queues plus preempted or taken
    /// requests not yet running) at the end of the interval.
    pub waiting: Vec<u32>,
    /// Continuous batching only: KV blocks in use over all KV blocks, at the end of the interval.
    pub kv_utilization: Vec<f64>,
}

impl Timeseries {
    /// Rows.
    pub fn len(&self) -> usize {
        self.time_ns.len()
    }

    /// True when no row was sampled.
    pub fn is_empty(&self) -> bool {
        self.time_ns.is_empty()
    }
}

/// What the engine counts between two samples.
#[derive(Debug, Clone, Copy, Default)]
pub struct IntervalCounters {
    /// Requests sent.
    pub arrivals: u32,
    /// Requests finished.
    pub finished: u32,
    /// Batches started.
    pub batches: u32,
    /// Requests in those batches.
    pub batched: u64,
    /// Integral of busy model instances over time, in instance-nanoseconds.
    pub busy_area: u128,
}

/// The instantaneous state the engine reports at a sample.
#[derive(Debug, Clone, Copy, Default)]
pub struct State {
    /// Requests in instance queues.
    pub queued: u32,
    /// Requests waiting for a pre-processing worker.
    pub preprocess_waiting: u32,
    /// Requests in the system.
    pub in_system: u32,
    /// Busy model instances.
    pub busy_model_instances: u32,
}

impl Timeseries {
    /// Appends the row for the interval ending at `time_ns`, lasting `interval_ns`, with
    /// `model_instances` in all.
    pub fn push(
        &mut self,
        time_ns: u64,
        interval_ns: u64,
        model_instances: u32,
        state: State,
        c: &IntervalCounters,
    ) {
        self.time_ns.push(time_ns);
        self.queued.push(state.queued);
        self.preprocess_waiting.push(state.preprocess_waiting);
        self.in_system.push(state.in_system);
        self.busy_model_instances.push(state.busy_model_instances);
        let capacity = interval_ns as f64 * f64::from(model_instances.max(1));
        self.utilization.push(c.busy_area as f64 / capacity);
        self.arrivals.push(c.arrivals);
        self.finished.push(c.finished);
        self.batches.push(c.batches);
        self.batch_size_mean.push(if c.batches == 0 {
            0.0
        } else {
            c.batched as f64 / f64::from(c.batches)
        });
    }

    /// Appends the continuous-batching columns of the row just pushed.
    pub fn push_llm(&mut self, llm: LlmState) {
        self.running.push(llm.running);
        self.waiting.push(llm.waiting);
        self.kv_utilization.push(if llm.kv_blocks_total == 0 {
            0.0
        } else {
            f64::from(llm.kv_blocks_in_use) / f64::from(llm.kv_blocks_total)
        });
    }
}

/// The continuous batchers' state at a sample, summed over their instances.
#[derive(Debug, Clone, Copy, Default)]
pub struct LlmState {
    /// Sequences running.
    pub running: u32,
    /// Requests waiting (queued, preempted, or taken and not yet admitted).
    pub waiting: u32,
    /// KV blocks in use.
    pub kv_blocks_in_use: u32,
    /// KV blocks in all.
    pub kv_blocks_total: u32,
}
