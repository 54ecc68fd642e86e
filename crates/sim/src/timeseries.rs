//! The run sampled over time (`timeseries.parquet`): one row per interval with the state at its
//! end (queue depths, requests in the system) and what happened during it (arrivals,
//! completions, batches, utilization). Its size is bounded: a run whose simulated time would
//! need more than `timeseries.max_rows` rows at the scenario's interval doubles the interval
//! (merging rows in pairs) as often as it takes, so memory never grows with simulated time.

use crate::record::{NONE, RequestRecord};

/// Rows a timeseries keeps at most unless the scenario says otherwise (`timeseries.max_rows`):
/// a day at one row a second, 68 bytes a row.
pub const DEFAULT_MAX_ROWS: u32 = 100_000;

/// The most rows `timeseries.max_rows` may ask for: about 68 MB of columns.
pub const MAX_ROWS_LIMIT: u32 = 1_000_000;

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
    /// Measured runs with a scraped server (`replay --endpoint --metrics-url`): each metric's
    /// latest scraped value at the end of the interval (counters as the server counts them,
    /// cumulative), by metric name; `NaN` before the first scrape. Empty otherwise.
    pub server_metrics: std::collections::BTreeMap<String, Vec<f64>>,
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

    /// Merges rows in pairs (`0+1`, `2+3`, ...), halving the row count; an odd last row is kept
    /// as it is. A merged row ends where its second row ends: states at the end are the second
    /// row's, counts add, utilization is the length-weighted mean, and the batch size mean is
    /// weighted by batches. With rows of equal length `L` ending at multiples of `L` and an even
    /// row count, the result is the series sampled every `2L`.
    pub fn merge_pairs(&mut self) {
        let rows = self.len();
        let llm = !self.running.is_empty();
        let mut start_ns = 0u64;
        for pair in 0..rows.div_ceil(2) {
            let a = 2 * pair;
            let b = a + 1;
            if b == rows {
                self.move_row(a, pair, llm);
                break;
            }
            let length_a = (self.time_ns[a] - start_ns) as f64;
            let length_b = (self.time_ns[b] - self.time_ns[a]) as f64;
            let utilization = if length_a + length_b > 0.0 {
                (self.utilization[a] * length_a + self.utilization[b] * length_b)
                    / (length_a + length_b)
            } else {
                self.utilization[b]
            };
            let batches = u64::from(self.batches[a]) + u64::from(self.batches[b]);
            let batch_size_mean = if batches == 0 {
                0.0
            } else {
                (self.batch_size_mean[a] * f64::from(self.batches[a])
                    + self.batch_size_mean[b] * f64::from(self.batches[b]))
                    / batches as f64
            };
            let arrivals = self.arrivals[a].saturating_add(self.arrivals[b]);
            let finished = self.finished[a].saturating_add(self.finished[b]);
            start_ns = self.time_ns[b];
            self.move_row(b, pair, llm);
            self.utilization[pair] = utilization;
            self.arrivals[pair] = arrivals;
            self.finished[pair] = finished;
            self.batches[pair] = u32::try_from(batches).unwrap_or(u32::MAX);
            self.batch_size_mean[pair] = batch_size_mean;
        }
        let kept = rows.div_ceil(2);
        self.truncate(kept, llm);
    }

    /// Copies row `from` over row `to` (`to <= from`).
    fn move_row(&mut self, from: usize, to: usize, llm: bool) {
        self.time_ns[to] = self.time_ns[from];
        self.queued[to] = self.queued[from];
        self.preprocess_waiting[to] = self.preprocess_waiting[from];
        self.in_system[to] = self.in_system[from];
        self.busy_model_instances[to] = self.busy_model_instances[from];
        self.utilization[to] = self.utilization[from];
        self.arrivals[to] = self.arrivals[from];
        self.finished[to] = self.finished[from];
        self.batches[to] = self.batches[from];
        self.batch_size_mean[to] = self.batch_size_mean[from];
        if llm {
            self.running[to] = self.running[from];
            self.waiting[to] = self.waiting[from];
            self.kv_utilization[to] = self.kv_utilization[from];
        }
    }

    fn truncate(&mut self, rows: usize, llm: bool) {
        self.time_ns.truncate(rows);
        self.queued.truncate(rows);
        self.preprocess_waiting.truncate(rows);
        self.in_system.truncate(rows);
        self.busy_model_instances.truncate(rows);
        self.utilization.truncate(rows);
        self.arrivals.truncate(rows);
        self.finished.truncate(rows);
        self.batches.truncate(rows);
        self.batch_size_mean.truncate(rows);
        if llm {
            self.running.truncate(rows);
            self.waiting.truncate(rows);
            self.kv_utilization.truncate(rows);
        }
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
            llm.kv_blocks_in_use as f64 / llm.kv_blocks_total as f64
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
    pub kv_blocks_in_use: u64,
    /// KV blocks in all.
    pub kv_blocks_total: u64,
}

/// The interval a run lasting `end_ns` is sampled at after it ended: `interval_ns`, doubled as
/// often as it takes to keep within `max_rows` rows (as the engine does while it runs).
pub fn interval_for(end_ns: u64, interval_ns: u64, max_rows: u32) -> u64 {
    let mut interval_ns = interval_ns.max(1);
    while end_ns.div_ceil(interval_ns) > u64::from(max_rows.max(1)) {
        interval_ns = interval_ns.saturating_mul(2);
    }
    interval_ns
}

/// Samples a finished run every `interval_ns` up to `end_ns` from its records alone: the state
/// at each interval's end (queued, in the system, busy model instances) and what happened
/// during it (arrivals, finishes, batches, busy time). For runs measured outside the engine (a
/// live replay, a real server); records without batch times (`batch_id == NONE`) count for
/// arrivals, finishes and the requests in the system only. Costs rows times records, so the
/// caller keeps the rows bounded (an interval from `timeseries.max_rows`).
pub fn sample_records(
    records: &[RequestRecord],
    end_ns: u64,
    interval_ns: u64,
    model_instances: u32,
) -> Timeseries {
    let mut series = Timeseries::default();
    let interval_ns = interval_ns.max(1);
    // One entry per batch: (start, end, size).
    let mut batches: Vec<(u64, u64, u32)> = records
        .iter()
        .filter(|r| r.batch_id != NONE)
        .map(|r| (r.batch_id, (r.exec_start_ns, r.exec_end_ns, r.batch_size)))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_values()
        .collect();
    batches.sort_unstable();
    let mut end = interval_ns;
    loop {
        let begin = end - interval_ns;
        let mut state = State::default();
        let mut counters = IntervalCounters::default();
        // Rows cover (begin, end], the first one [0, end], as the engine's do.
        let within = |t: u64| t <= end && (begin < t || begin == 0);
        for r in records {
            let live_at = |from: u64, to: u64| from <= end && end < to;
            state.queued += u32::from(live_at(r.queued_ns, r.exec_start_ns));
            state.in_system += u32::from(live_at(r.arrival_ns, r.response_ns));
            counters.arrivals += u32::from(within(r.arrival_ns));
            counters.finished += u32::from(within(r.response_ns));
        }
        for &(start, stop, size) in &batches {
            state.busy_model_instances += u32::from(start <= end && end < stop);
            if within(start) {
                counters.batches += 1;
                counters.batched += u64::from(size);
            }
            let overlap = stop.min(end).saturating_sub(start.max(begin));
            counters.busy_area += u128::from(overlap);
        }
        series.push(end, interval_ns, model_instances, state, &counters);
        if end >= end_ns {
            return series;
        }
        end = end.saturating_add(interval_ns);
    }
}
