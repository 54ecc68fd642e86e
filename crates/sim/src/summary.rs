// Over 800 lines: the summary's schema and its streaming builder are one format, kept together; 180 of them are tests.
//! The run summary (`summary.json`): counts by outcome, rates, latency statistics of the whole
//! path and of each stage, batch sizes and utilization. It is accumulated while the run goes
//! (HdrHistograms, exact sums and maxima), so its memory does not grow with the request count.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::compat::{Compat, Figures};
pub use crate::latency::LatencyStats;
use crate::record::{FailReason, NONE, Outcome, RejectReason, RequestRecord};

/// How percentiles are computed; written into the summary.
pub const PERCENTILE_METHOD: &str =
    "HdrHistogram, 3 significant digits (percentiles); mean and max are exact";

/// Values the histograms hold slots for from the start (up to about 17 s); a longer value grows
/// them to its slot, so their size follows the longest latency observed, never a configured
/// bound, and no value is clamped.
const HISTOGRAM_INITIAL_MAX_NS: u64 = (1 << 34) - 1;

/// Request attempts by outcome. `completed + rejected + timed_out + failed == total` always;
/// without client retries every attempt is one trace request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Request attempts.
    pub total: u64,
    /// Answered.
    pub completed: u64,
    /// Of `completed`, answered by the cache.
    pub cache_hits: u64,
    /// Refused (any reason).
    pub rejected: u64,
    /// Refused, by reason (`rate_limited`, `max_in_flight`, `queue_full`).
    pub rejected_by_reason: BTreeMap<String, u64>,
    /// Timed out in a queue (`queue.timeout`; a client's own timeout is a failure, `failed`).
    pub timed_out: u64,
    /// Not answered: a real server's failures, or (simulated) attempts whose client gave up at
    /// `load.client_timeout`; absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: u64,
    /// Failed, by class ([`crate::record::FailReason::CLASSES`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed_by_reason: BTreeMap<String, u64>,
    /// Of `total`, attempts that were client retries (attempt 2 and later).
    #[serde(default)]
    pub retries: u64,
    /// Of `total`, attempts whose input was cut to their pool's `max_input_tokens` (any
    /// outcome after pre-processing); absent when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub truncated_input: u64,
    /// Of `total`, attempts whose output was cut to their pool's `max_output_tokens`; absent
    /// when none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub truncated_output: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Counts {
    /// True when every request is accounted for.
    pub fn adds_up(&self) -> bool {
        self.completed + self.rejected + self.timed_out + self.failed == self.total
            && self.rejected_by_reason.values().sum::<u64>() == self.rejected
            && self.failed_by_reason.values().sum::<u64>() == self.failed
    }
}

/// [`Counts`] while a run goes: fixed-size fields, so counting a request touches no map.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    total: u64,
    completed: u64,
    cache_hits: u64,
    timed_out: u64,
    retries: u64,
    truncated_input: u64,
    truncated_output: u64,
    /// Indexed like [`RejectReason::ALL`].
    rejected_by_reason: [u64; RejectReason::ALL.len()],
    /// Indexed like [`FailReason::CLASSES`].
    failed_by_reason: [u64; FailReason::CLASSES.len()],
}

impl Tally {
    #[inline]
    fn add(&mut self, r: &RequestRecord) {
        self.total += 1;
        self.retries += u64::from(r.attempt > 1);
        self.truncated_input += u64::from(r.input_truncated);
        self.truncated_output += u64::from(r.output_truncated);
        match r.outcome {
            Outcome::Completed => {
                self.completed += 1;
                self.cache_hits += u64::from(r.cache_hit);
            }
            Outcome::Rejected(reason) => self.rejected_by_reason[reason as usize] += 1,
            Outcome::TimedOut => self.timed_out += 1,
            Outcome::Failed(reason) => self.failed_by_reason[reason.class_index()] += 1,
        }
    }

    fn plus(&self, other: &Tally) -> Tally {
        Tally {
            total: self.total + other.total,
            completed: self.completed + other.completed,
            cache_hits: self.cache_hits + other.cache_hits,
            timed_out: self.timed_out + other.timed_out,
            retries: self.retries + other.retries,
            truncated_input: self.truncated_input + other.truncated_input,
            truncated_output: self.truncated_output + other.truncated_output,
            rejected_by_reason: std::array::from_fn(|i| {
                self.rejected_by_reason[i] + other.rejected_by_reason[i]
            }),
            failed_by_reason: std::array::from_fn(|i| {
                self.failed_by_reason[i] + other.failed_by_reason[i]
            }),
        }
    }

    fn counts(&self) -> Counts {
        let by_reason = RejectReason::ALL
            .iter()
            .zip(self.rejected_by_reason)
            .filter(|&(_, n)| n > 0);
        Counts {
            total: self.total,
            completed: self.completed,
            cache_hits: self.cache_hits,
            rejected: self.rejected_by_reason.iter().sum(),
            rejected_by_reason: by_reason
                .map(|(reason, n)| (reason.as_str().to_string(), n))
                .collect(),
            timed_out: self.timed_out,
            failed: self.failed_by_reason.iter().sum(),
            failed_by_reason: FailReason::CLASSES
                .iter()
                .zip(self.failed_by_reason)
                .filter(|&(_, n)| n > 0)
                .map(|(class, n)| (class.to_string(), n))
                .collect(),
            retries: self.retries,
            truncated_input: self.truncated_input,
            truncated_output: self.truncated_output,
        }
    }
}

/// Nanoseconds to milliseconds, rounded to the nanosecond so JSON shows no binary noise.
fn ns_to_ms(ns: f64) -> f64 {
    ns.round() / 1e6
}

/// HdrHistogram's bucketing for a lowest discernible value of 1 and 3 significant digits:
/// 2048 sub-buckets, of which buckets after the first use the upper half (1024). A value's slot
/// is the index HdrHistogram itself would count it under, so feeding the slots' counts into an
/// HdrHistogram at the end gives exactly the percentiles of recording every value into it.
const SUB_BUCKET_HALF_MAGNITUDE: u32 = 10;
const SUB_BUCKET_HALF: u64 = 1 << SUB_BUCKET_HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = 2 * SUB_BUCKET_HALF - 1;
const LEADING_ZERO_BASE: u32 = 64 - (SUB_BUCKET_HALF_MAGNITUDE + 1);

/// The HdrHistogram counts index of `ns` (3 significant digits, lowest value 1).
#[inline]
fn slot_of(ns: u64) -> usize {
    let bucket = LEADING_ZERO_BASE - (ns | SUB_BUCKET_MASK).leading_zeros();
    ((u64::from(bucket + 1) << SUB_BUCKET_HALF_MAGNITUDE) + (ns >> bucket) - SUB_BUCKET_HALF)
        as usize
}

/// The lowest value counted in `slot` (the inverse of [`slot_of`]).
fn slot_value(slot: usize) -> u64 {
    let slot = slot as u64;
    let bucket = (slot >> SUB_BUCKET_HALF_MAGNITUDE).saturating_sub(1);
    let sub = if slot < SUB_BUCKET_HALF {
        slot
    } else {
        (slot & (SUB_BUCKET_HALF - 1)) + SUB_BUCKET_HALF
    };
    sub << bucket
}

/// An empty histogram with the accumulators' bucketing that holds values up to `max_ns`.
fn empty_histogram(max_ns: u64) -> Histogram<u32> {
    Histogram::new_with_bounds(1, max_ns.max(2), 3).expect("bounds of at least 2 are valid")
}

/// Accumulates one latency distribution. Values are counted in a flat array indexed like an
/// HdrHistogram's (one shift and one add per value, no range checks beyond the array's end);
/// the HdrHistogram is built from the counts only when the statistics are asked for.
#[derive(Debug, Clone)]
struct LatencyAccumulator {
    /// Counts per slot, modulo 256: one byte a slot keeps the slots a run touches in the L1
    /// cache (a stage's latencies span a few thousand slots), which the per-request adds need.
    slot_counts: Vec<u8>,
    /// Per slot, the counts carried out of `slot_counts` (multiples of 256); touched once every
    /// 256 adds to a slot.
    slot_carries: Vec<u64>,
    sum_ns: u128,
    /// Sum of squares, for the standard deviation; saturates (see [`LatencyAccumulator::std_ns`]).
    sum_sq_ns: u128,
    max_ns: u64,
    min_ns: u64,
}

impl LatencyAccumulator {
    /// An accumulator; `allocated` false leaves it empty and unusable (a stage not modeled).
    fn new(allocated: bool) -> LatencyAccumulator {
        let slots = if allocated {
            slot_of(HISTOGRAM_INITIAL_MAX_NS) + 1
        } else {
            0
        };
        LatencyAccumulator {
            slot_counts: vec![0; slots],
            slot_carries: vec![0; slots],
            sum_ns: 0,
            sum_sq_ns: 0,
            max_ns: 0,
            min_ns: u64::MAX,
        }
    }

    #[inline]
    fn add(&mut self, ns: u64) {
        let slot = slot_of(ns);
        if slot >= self.slot_counts.len() {
            self.grow_to(slot);
        }
        let low = &mut self.slot_counts[slot];
        if *low == u8::MAX {
            *low = 0;
            self.slot_carries[slot] += 256;
        } else {
            *low += 1;
        }
        self.sum_ns += u128::from(ns);
        // A square of a u64 fits a u128; only the sum can overflow, after 2^64 values of 2^32 s.
        self.sum_sq_ns = self
            .sum_sq_ns
            .saturating_add(u128::from(ns) * u128::from(ns));
        self.max_ns = self.max_ns.max(ns);
        self.min_ns = self.min_ns.min(ns);
    }

    /// The population standard deviation of `count` values, in nanoseconds: exact integer
    /// arithmetic (`n * sum_sq - sum^2 = n^2 var`) while it fits 128 bits, else `f64`.
    fn std_ns(&self, count: u64) -> f64 {
        let n = u128::from(count);
        let exact = (self.sum_sq_ns < u128::MAX)
            .then(|| n.checked_mul(self.sum_sq_ns))
            .flatten()
            .zip(self.sum_ns.checked_mul(self.sum_ns));
        match exact {
            Some((n_sum_sq, sum_sq)) => {
                (n_sum_sq.saturating_sub(sum_sq) as f64).sqrt() / count as f64
            }
            None => {
                let mean = self.sum_ns as f64 / count as f64;
                (self.sum_sq_ns as f64 / count as f64 - mean * mean)
                    .max(0.0)
                    .sqrt()
            }
        }
    }

    /// Makes room for slots up to `slot`, at least doubling the arrays so that a run of rising
    /// values grows them a logarithmic number of times.
    #[cold]
    #[inline(never)]
    fn grow_to(&mut self, slot: usize) {
        let slots = (slot + 1)
            .max(2 * self.slot_counts.len())
            .min(slot_of(u64::MAX) + 1);
        self.slot_counts.resize(slots, 0);
        self.slot_carries.resize(slots, 0);
    }

    /// The values counted in `slot`.
    fn slot_count(&self, slot: usize) -> u64 {
        self.slot_carries[slot] + u64::from(self.slot_counts[slot])
    }

    fn histogram(&self) -> Histogram<u32> {
        let mut histogram = empty_histogram(self.max_ns);
        for slot in 0..self.slot_counts.len() {
            let n = self.slot_count(slot);
            if n > 0 {
                // A slot saturates at `u32::MAX`, as recording into a `Histogram<u32>` does.
                let n = u32::try_from(n).unwrap_or(u32::MAX);
                histogram.saturating_record_n(slot_value(slot), n);
            }
        }
        histogram
    }

    fn stats(&self) -> LatencyStats {
        // Counted from the slots: one add fewer per value on the hot path.
        let count: u64 = (0..self.slot_counts.len())
            .map(|slot| self.slot_count(slot))
            .sum();
        if count == 0 {
            return LatencyStats::default();
        }
        let histogram = self.histogram();
        let q = |p: f64| ns_to_ms(histogram.value_at_quantile(p).min(self.max_ns) as f64);
        LatencyStats {
            count,
            mean_ms: ns_to_ms(self.sum_ns as f64 / count as f64),
            p50_ms: q(0.50),
            p90_ms: q(0.90),
            p95_ms: q(0.95),
            p99_ms: q(0.99),
            p999_ms: q(0.999),
            max_ms: ns_to_ms(self.max_ns as f64),
            min_ms: ns_to_ms(self.min_ns as f64),
            std_ms: ns_to_ms(self.std_ns(count)),
        }
    }
}

/// The stages reported, in order; keys of [`Summary::latency_ms`].
pub const STAGES: [&str; 8] = [
    "end_to_end",
    "network_in",
    "gateway",
    "preprocess",
    "queue",
    "execution",
    "postprocess",
    "network_out",
];

/// Token latencies of continuous batching, keys of [`Summary::latency_ms`] next to the stages:
/// time to first token, time per output token, inter-token latency (every gap), and end-to-end
/// latency over output tokens (`normalized`, in ms per token). See docs/llm.md.
pub const TOKEN_METRICS: [&str; 4] = ["ttft", "tpot", "itl", "normalized"];

/// The continuous batchers of a run (summed over their instances).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LlmSummary {
    /// Scheduler steps run.
    pub steps: u64,
    /// Mean sequences per step.
    pub mean_seqs_per_step: f64,
    /// Mean tokens computed per step (prefill tokens plus one per decode).
    pub mean_tokens_per_step: f64,
    /// Preemptions (a request preempted twice counts twice).
    pub preemptions: u64,
    /// Tokens computed again after preemptions (prefix-cache hits excluded).
    pub recomputed_tokens: u64,
    /// Output tokens sampled (each exactly once per completed request).
    pub output_tokens: u64,
    /// Prompt tokens of admitted requests.
    pub prompt_tokens: u64,
    /// Of those, tokens taken from the prefix cache.
    pub cached_prompt_tokens: u64,
    /// `cached_prompt_tokens / prompt_tokens` (0 when none).
    pub prefix_cache_hit_rate: f64,
    /// KV blocks over all continuous-batching instances.
    pub kv_blocks_total: u64,
    /// Time-weighted mean of KV blocks in use over `kv_blocks_total`, from 0 to the last event.
    pub kv_utilization_mean: f64,
    /// Highest fraction of one instance's KV blocks in use.
    pub kv_utilization_max: f64,
}

/// Utilization of one model instance over the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceUtilization {
    /// Pool name.
    pub pool: String,
    /// Instance (server) within the pool.
    pub instance: u32,
    /// Model instance within the server.
    pub model_instance: u32,
    /// Batches executed.
    pub batches: u64,
    /// Time executing, in seconds.
    pub busy_s: f64,
    /// `busy_s` over the run's length (origin to last response).
    pub utilization: f64,
}

/// The requests a run's statistics describe, and why (`summary.json`'s `steady_window`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteadyWindow {
    /// First send time measured, seconds from the run's origin.
    pub from_s: f64,
    /// Sends from here on are not measured, seconds from the run's origin.
    pub to_s: f64,
    /// The run's last send, seconds from its origin.
    pub last_send_s: f64,
    /// Mean end-to-end latency of the run's completed requests, seconds.
    pub lifetime_s: f64,
    /// How the window's start was chosen: `mser-5`, `warmup` (given) or `window` (given).
    pub warmup_rule: String,
    /// The rule in a sentence, with this run's figures.
    pub why: String,
    /// Set when the trace is too short for this load: the send span, in seconds, that would
    /// hold a window of [`crate::steady::SHORT_LIFETIMES`] lifetimes after the warm-up and before the drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub too_short_needs_s: Option<f64>,
}

impl SteadyWindow {
    /// Whether the trace is too short for the load it was run at.
    pub fn too_short(&self) -> bool {
        self.too_short_needs_s.is_some()
    }
}

/// The summary of one run (`summary.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Scenario name.
    pub scenario: String,
    /// Run seed.
    pub seed: u64,
    /// How percentiles were computed.
    pub percentile_method: String,
    /// Every request attempt of the run, by outcome.
    pub requests: Counts,
    /// Attempts after the warm-up (the ones every rate and latency below describes).
    pub measured: Counts,
    /// Attempts excluded as warm-up (or, with a steady-state window, sent outside it).
    pub warmup_excluded: u64,
    /// The window of send times measured and why, when the run was measured over its steady
    /// state ([`crate::steady::run`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steady_window: Option<SteadyWindow>,
    /// From the first measured arrival to the last measured response, in seconds.
    pub measured_span_s: f64,
    /// Measured attempts over the span of their arrivals, per second.
    pub offered_rate_rps: f64,
    /// Measured completions over `measured_span_s`, per second.
    pub throughput_rps: f64,
    /// The end-to-end SLO, in milliseconds, when the scenario sets one.
    pub slo_latency_ms: Option<f64>,
    /// The time-to-first-token SLO, in milliseconds, when the scenario sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_ttft_ms: Option<f64>,
    /// The time-per-output-token SLO, in milliseconds, when the scenario sets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_tpot_ms: Option<f64>,
    /// Measured completions within every SLO set (each request's own e2e, TTFT and TPOT; see
    /// docs/llm.md) over `measured_span_s`, per second.
    pub goodput_rps: Option<f64>,
    /// Latency statistics: `end_to_end` for completed requests, and each stage (`network_in`,
    /// `gateway`, `preprocess`, `queue`, `execution`, `postprocess`, `network_out`) for those
    /// that went through it. Stages the scenario does not model are left out. With continuous
    /// batching, also [`TOKEN_METRICS`] (`normalized` in ms per output token).
    pub latency_ms: BTreeMap<String, LatencyStats>,
    /// Continuous batching, when a pool uses it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<LlmSummary>,
    /// Batches executed (whole run).
    pub batches: u64,
    /// Mean requests per batch.
    pub batch_size_mean: f64,
    /// Batches by size: `batch_size_counts[s]` batches held `s` requests (index 0 unused).
    pub batch_size_counts: Vec<u64>,
    /// Batches (whole run) whose shape lies outside the grid the service-time model was
    /// calibrated on, so their execution time is extrapolated (see
    /// [`crate::timing::service::ServiceTime::is_extrapolated`]); 0 with analytic models.
    #[serde(default)]
    pub extrapolated_batches: u64,
    /// [`Summary::extrapolated_batches`] by pool name; pools without any are left out.
    #[serde(default)]
    pub extrapolated_batches_by_pool: BTreeMap<String, u64>,
    /// Per model instance.
    pub utilization: Vec<InstanceUtilization>,
    /// Time-average number of requests in the system (sent, not yet answered), whole run.
    pub mean_in_system: f64,
    /// Time of the last response, in seconds since the origin.
    pub end_s: f64,
    /// Interval between timeseries.parquet's rows, in seconds: the scenario's
    /// `timeseries.interval`, or a power-of-two multiple of it when the run was too long for
    /// `timeseries.max_rows` rows at that interval (see [`Summary::timeseries_coarsened`]).
    #[serde(default)]
    pub timeseries_interval_s: f64,
    /// True when the timeseries interval was widened to keep within `timeseries.max_rows`.
    #[serde(default)]
    pub timeseries_coarsened: bool,
    /// A run measured against a real server: how well the load generator kept to the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadSummary>,
    /// A run measured against a scraped server: each counter's increase over the run and each
    /// gauge's mean over the scrapes, by metric name (Triton's `nv_inference_*`, vLLM's
    /// `vllm:*`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub server_metrics: BTreeMap<String, f64>,
    /// The measured figures above under the names other benchmark tools write: `vllm` (vLLM's
    /// `vllm bench serve` result keys, ms) and `inference_perf` (inference-perf's
    /// `summary_lifecycle_metrics.json`, s); see [`Compat`].
    #[serde(default)]
    pub compat: Compat,
}

/// How a load generator kept to its schedule (inference-perf's `load_summary`): a run whose
/// sends lag their intended times measures the client as much as the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    /// Requests sent.
    pub sent: u64,
    /// Requests of the trace not sent (the run was interrupted).
    pub not_sent: u64,
    /// The trace's rate over the sends' intended span, per second.
    pub requested_rate_rps: f64,
    /// Requests sent over the span of their actual sends, per second.
    pub achieved_rate_rps: f64,
    /// Actual minus intended send time, median, in milliseconds.
    pub schedule_delay_p50_ms: f64,
    /// Its 99th percentile.
    pub schedule_delay_p99_ms: f64,
    /// Its maximum.
    pub schedule_delay_max_ms: f64,
}

/// Builds a [`Summary`] from finished requests, streaming.
#[derive(Debug, Clone)]
pub struct SummaryBuilder {
    /// Warm-up attempts (the others are in `measured`).
    warmup: Tally,
    measured: Tally,
    stages: Vec<LatencyAccumulator>,
    modeled: [bool; STAGES.len()],
    /// Bit `s` set when stage `s` (1..=7, the span between two of a record's timestamps) is
    /// modeled: the stages [`SummaryBuilder::add`] accumulates besides the end to end.
    modeled_spans: u8,
    slo_ns: Option<u64>,
    slo_ttft_ns: Option<u64>,
    slo_tpot_ns: Option<u64>,
    within_slo: u64,
    /// [`TOKEN_METRICS`] accumulators, when continuous batching is on.
    tokens: Option<Box<[LatencyAccumulator; 4]>>,
    llm: Option<LlmSummary>,
    first_arrival_ns: u64,
    last_arrival_ns: u64,
    last_response_ns: u64,
    batch_size_counts: Vec<u64>,
    extrapolated_batches_by_pool: BTreeMap<String, u64>,
    /// Input tokens of measured completed requests.
    completed_input_tokens: u64,
    /// Output tokens of measured completed requests.
    completed_output_tokens: u64,
}

impl SummaryBuilder {
    /// An empty builder; `slo_ns` is the end-to-end latency objective, if any. `modeled[i]` says
    /// whether the scenario models stage [`STAGES`]`[i]`; stages it does not model take no time,
    /// are not accumulated, and are left out of the summary (`end_to_end`, `queue` and
    /// `execution` are always reported).
    pub fn new(slo_ns: Option<u64>, modeled: [bool; STAGES.len()]) -> SummaryBuilder {
        let mut modeled = modeled;
        for always in [0, 4, 5] {
            modeled[always] = true;
        }
        SummaryBuilder {
            warmup: Tally::default(),
            measured: Tally::default(),
            stages: modeled
                .iter()
                .map(|&m| LatencyAccumulator::new(m))
                .collect(),
            modeled,
            modeled_spans: (1..STAGES.len())
                .filter(|&s| modeled[s])
                .fold(0, |bits, s| bits | 1 << s),
            slo_ns,
            slo_ttft_ns: None,
            slo_tpot_ns: None,
            within_slo: 0,
            tokens: None,
            llm: None,
            first_arrival_ns: u64::MAX,
            last_arrival_ns: 0,
            last_response_ns: 0,
            batch_size_counts: vec![0],
            extrapolated_batches_by_pool: BTreeMap::new(),
            completed_input_tokens: 0,
            completed_output_tokens: 0,
        }
    }

    /// Records that `batches` batches of pool `pool` had extrapolated execution times (counted
    /// by the engine); zero counts are not recorded.
    pub fn add_extrapolated_batches(&mut self, pool: &str, batches: u64) {
        if batches > 0 {
            *self
                .extrapolated_batches_by_pool
                .entry(pool.to_string())
                .or_default() += batches;
        }
    }

    /// Reports the token latencies of continuous batching ([`TOKEN_METRICS`]), with optional
    /// per-request TTFT and TPOT bounds for goodput, in nanoseconds.
    pub fn with_token_metrics(
        mut self,
        slo_ttft_ns: Option<u64>,
        slo_tpot_ns: Option<u64>,
    ) -> Self {
        self.tokens = Some(Box::new(std::array::from_fn(|_| {
            LatencyAccumulator::new(true)
        })));
        self.slo_ttft_ns = slo_ttft_ns;
        self.slo_tpot_ns = slo_tpot_ns;
        self
    }

    /// Counts one inter-token gap of a measured request, in nanoseconds.
    #[inline]
    pub fn add_inter_token_ns(&mut self, gap_ns: u64) {
        if let Some(tokens) = self.tokens.as_mut() {
            tokens[2].add(gap_ns);
        }
    }

    /// Sets the continuous batchers' section.
    pub fn set_llm(&mut self, llm: LlmSummary) {
        self.llm = Some(llm);
    }

    /// Counts a batch of `size` requests.
    #[inline]
    pub fn add_batch(&mut self, size: u32) {
        let size = size as usize;
        if self.batch_size_counts.len() <= size {
            self.batch_size_counts.resize(size + 1, 0);
        }
        self.batch_size_counts[size] += 1;
    }

    /// Adds a finished request; `measured` is false for warm-up requests, which only count.
    #[inline(always)]
    pub fn add(&mut self, r: &RequestRecord, measured: bool) {
        if !measured {
            self.warmup.add(r);
            return;
        }
        self.measured.add(r);
        self.first_arrival_ns = self.first_arrival_ns.min(r.arrival_ns);
        self.last_arrival_ns = self.last_arrival_ns.max(r.arrival_ns);
        self.last_response_ns = self.last_response_ns.max(r.response_ns);
        if r.outcome != Outcome::Completed {
            return;
        }
        self.completed_input_tokens += u64::from(r.input_tokens);
        self.completed_output_tokens += u64::from(r.output_tokens);
        let e2e_ns = r.latency_ns();
        self.stages[0].add(e2e_ns);
        let mut good = self.slo_ns.is_none_or(|slo| e2e_ns <= slo);
        if let Some(tokens) = self.tokens.as_mut()
            && r.first_token_ns != NONE
        {
            let ttft_ns = r.ttft_ns();
            tokens[0].add(ttft_ns);
            let tpot_ns = r.tpot_ns();
            if let Some(tpot_ns) = tpot_ns {
                tokens[1].add(tpot_ns);
            }
            tokens[3].add(e2e_ns / u64::from(r.output_tokens.max(1)));
            good &= self.slo_ttft_ns.is_none_or(|slo| ttft_ns <= slo);
            good &= self
                .slo_tpot_ns
                .is_none_or(|slo| tpot_ns.is_none_or(|t| t <= slo));
        }
        let any_slo =
            self.slo_ns.is_some() || self.slo_ttft_ns.is_some() || self.slo_tpot_ns.is_some();
        if any_slo && good {
            self.within_slo += 1;
        }
        // Stage `s` (1..=7) spans from `edges[s - 1]` to `edges[s]`; only the modeled stages
        // are visited (most scenarios model three or four of the seven).
        let edges = [
            r.arrival_ns,
            r.gateway_ns,
            r.admitted_ns,
            r.queued_ns,
            r.exec_start_ns,
            r.exec_end_ns,
            r.postprocessed_ns,
            r.response_ns,
        ];
        let mut spans = self.modeled_spans;
        while spans != 0 {
            let stage = spans.trailing_zeros() as usize;
            spans &= spans - 1;
            let (from, to) = (edges[stage - 1], edges[stage]);
            if from != NONE && to != NONE {
                self.stages[stage].add(to - from);
            }
        }
    }

    /// Counts of every request added so far.
    pub fn counts(&self) -> Counts {
        self.measured.plus(&self.warmup).counts()
    }

    /// Finishes the summary. `end_ns` is the run's last event; the rest describes the run.
    pub fn finish(
        self,
        scenario: &str,
        seed: u64,
        utilization: Vec<InstanceUtilization>,
        mean_in_system: f64,
        end_ns: u64,
    ) -> Summary {
        let measured_any = self.measured.total > 0;
        let span_ns = if measured_any {
            self.last_response_ns.saturating_sub(self.first_arrival_ns)
        } else {
            0
        };
        let arrival_span_ns = if measured_any {
            self.last_arrival_ns - self.first_arrival_ns
        } else {
            0
        };
        let per_s = |n: u64, ns: u64| {
            if ns == 0 {
                0.0
            } else {
                n as f64 / (ns as f64 * 1e-9)
            }
        };
        let batches: u64 = self.batch_size_counts.iter().sum();
        let batched: u64 = self
            .batch_size_counts
            .iter()
            .enumerate()
            .map(|(s, &c)| s as u64 * c)
            .sum();
        let any_slo =
            self.slo_ns.is_some() || self.slo_ttft_ns.is_some() || self.slo_tpot_ns.is_some();
        let mut summary = Summary {
            scenario: scenario.to_string(),
            seed,
            percentile_method: PERCENTILE_METHOD.to_string(),
            warmup_excluded: self.warmup.total,
            steady_window: None,
            requests: self.measured.plus(&self.warmup).counts(),
            measured_span_s: span_ns as f64 * 1e-9,
            offered_rate_rps: per_s(self.measured.total, arrival_span_ns),
            throughput_rps: per_s(self.measured.completed, span_ns),
            slo_latency_ms: self.slo_ns.map(|ns| ns as f64 * 1e-6),
            slo_ttft_ms: self.slo_ttft_ns.map(|ns| ns as f64 * 1e-6),
            slo_tpot_ms: self.slo_tpot_ns.map(|ns| ns as f64 * 1e-6),
            goodput_rps: any_slo.then(|| per_s(self.within_slo, span_ns)),
            measured: self.measured.counts(),
            latency_ms: STAGES
                .iter()
                .zip(&self.stages)
                .zip(self.modeled)
                .filter(|(_, modeled)| *modeled)
                .map(|((name, acc), _)| (name.to_string(), acc.stats()))
                .chain(self.tokens.iter().flat_map(|t| {
                    TOKEN_METRICS
                        .iter()
                        .zip(t.iter())
                        .map(|(name, acc)| (name.to_string(), acc.stats()))
                }))
                .collect(),
            llm: self.llm,
            batches,
            batch_size_mean: if batches == 0 {
                0.0
            } else {
                batched as f64 / batches as f64
            },
            batch_size_counts: self.batch_size_counts,
            extrapolated_batches: self.extrapolated_batches_by_pool.values().sum(),
            extrapolated_batches_by_pool: self.extrapolated_batches_by_pool,
            utilization,
            mean_in_system,
            end_s: end_ns as f64 * 1e-9,
            timeseries_interval_s: 0.0,
            timeseries_coarsened: false,
            load: None,
            server_metrics: BTreeMap::new(),
            compat: Compat::default(),
        };
        summary.compat = Compat::of(&Figures {
            latency_ms: &summary.latency_ms,
            span_s: summary.measured_span_s,
            total: summary.measured.total,
            completed: summary.measured.completed,
            input_tokens: self.completed_input_tokens,
            output_tokens: self.completed_output_tokens,
            good: any_slo.then_some(self.within_slo),
        });
        summary
    }
}

impl Summary {
    /// Records the timeseries interval used, `used_ns`, and whether it was widened from the
    /// scenario's `configured_ns` to keep within `timeseries.max_rows`.
    pub fn set_timeseries_interval(&mut self, used_ns: u64, configured_ns: u64) {
        self.timeseries_interval_s = used_ns as f64 * 1e-9;
        self.timeseries_coarsened = used_ns != configured_ns;
    }

    /// A one-line note for stderr when the timeseries interval was widened, saying to what and
    /// how to keep the finer one; `None` otherwise.
    pub fn timeseries_note(&self) -> Option<String> {
        self.timeseries_coarsened.then(|| {
            format!(
                "timeseries.parquet: the run lasted {} of simulated time, too long for \
                 `timeseries.max_rows` rows at `timeseries.interval`; it is sampled every {} \
                 instead (raise timeseries.max_rows, up to {}, to keep a finer interval)",
                human_seconds(self.end_s),
                human_seconds(self.timeseries_interval_s),
                crate::timeseries::MAX_ROWS_LIMIT
            )
        })
    }

    /// Rejections of one reason among measured requests.
    pub fn rejected(&self, reason: RejectReason) -> u64 {
        self.measured
            .rejected_by_reason
            .get(reason.as_str())
            .copied()
            .unwrap_or(0)
    }

    /// A few lines for a terminal.
    pub fn human(&self) -> String {
        let mut out = self.human_counts();
        out += &self.human_latencies();
        out += &self.human_batches();
        out
    }

    /// The scenario, the requests by outcome, the rates and what cut them: the first lines of
    /// [`Self::human`].
    fn human_counts(&self) -> String {
        let failed = if self.requests.failed > 0 {
            let classes: Vec<String> = self
                .requests
                .failed_by_reason
                .iter()
                .map(|(class, n)| format!("{class} {n}"))
                .collect();
            format!(", failed {} ({})", self.requests.failed, classes.join(", "))
        } else {
            String::new()
        };
        let mut out = format!(
            "scenario {} (seed {})\n\
             requests {}: completed {}, rejected {}, timed out {}{failed} (warm-up excluded {})\n\
             offered {:.2} rps, throughput {:.2} rps",
            self.scenario,
            self.seed,
            self.requests.total,
            self.requests.completed,
            self.requests.rejected,
            self.requests.timed_out,
            self.warmup_excluded,
            self.offered_rate_rps,
            self.throughput_rps,
        );
        if let Some(window) = &self.steady_window {
            out += &format!("\nsteady state: {}", window.why);
        }
        if let Some(goodput) = self.goodput_rps {
            let bounds: Vec<String> = [
                ("e2e", self.slo_latency_ms),
                ("ttft", self.slo_ttft_ms),
                ("tpot", self.slo_tpot_ms),
            ]
            .iter()
            .filter_map(|(k, v)| v.map(|ms| format!("{k} <= {ms} ms")))
            .collect();
            out += &format!(", goodput {goodput:.2} rps (SLO {})", bounds.join(", "));
        }
        let (cut_in, cut_out) = (
            self.requests.truncated_input,
            self.requests.truncated_output,
        );
        if cut_in + cut_out > 0 {
            out += &format!(
                "\ntruncated to the pool's limit: {cut_in} inputs (max_input_tokens), \
                 {cut_out} outputs (max_output_tokens)"
            );
        }
        out
    }

    /// The end-to-end latency, the token metrics and a continuous batcher's steps, a line each.
    fn human_latencies(&self) -> String {
        let e2e = self
            .latency_ms
            .get("end_to_end")
            .cloned()
            .unwrap_or_default();
        let mut out = String::new();
        out += &format!(
            "\nlatency ms: mean {:.3}, p50 {:.3}, p90 {:.3}, p99 {:.3}, p99.9 {:.3}, max {:.3}\n",
            e2e.mean_ms, e2e.p50_ms, e2e.p90_ms, e2e.p99_ms, e2e.p999_ms, e2e.max_ms
        );
        for key in TOKEN_METRICS {
            if let Some(t) = self.latency_ms.get(key) {
                let unit = if key == "normalized" {
                    "ms/token"
                } else {
                    "ms"
                };
                out += &format!(
                    "{key} {unit}: mean {:.3}, p50 {:.3}, p90 {:.3}, p99 {:.3}, max {:.3}\n",
                    t.mean_ms, t.p50_ms, t.p90_ms, t.p99_ms, t.max_ms
                );
            }
        }
        if let Some(llm) = &self.llm {
            out += &format!(
                "steps {}, mean {:.1} seqs/step; preemptions {} ({} tokens recomputed); prefix-cache hit rate {:.1}%; KV utilization mean {:.1}% max {:.1}%\n",
                llm.steps,
                llm.mean_seqs_per_step,
                llm.preemptions,
                llm.recomputed_tokens,
                llm.prefix_cache_hit_rate * 100.0,
                llm.kv_utilization_mean * 100.0,
                llm.kv_utilization_max * 100.0
            );
        }
        out
    }

    /// The batches, the mean utilization and the percentile method, and a warning for batches
    /// extrapolated past the calibrated grid.
    fn human_batches(&self) -> String {
        let util = if self.utilization.is_empty() {
            0.0
        } else {
            self.utilization.iter().map(|u| u.utilization).sum::<f64>()
                / self.utilization.len() as f64
        };
        let mut out = String::new();
        out += &format!(
            "batches {}, mean size {:.2}; mean utilization {:.1}%\npercentiles: {}\n",
            self.batches,
            self.batch_size_mean,
            util * 100.0,
            self.percentile_method
        );
        if self.extrapolated_batches > 0 {
            out += &format!(
                "warning: {} of {} batches outside the calibrated grid; their times are \
                 extrapolated\n",
                self.extrapolated_batches, self.batches
            );
        }
        out
    }
}

/// Seconds written with the largest unit that keeps the number at or above 1 (`250 ms`,
/// `3.5 h`, `1000 d`), chosen after rounding to 3 decimals so that 59.9996 s is `1 min`, not
/// `60.000 s`.
fn human_seconds(s: f64) -> String {
    const UNITS: [(f64, &str); 6] = [
        (86_400.0, "d"),
        (3_600.0, "h"),
        (60.0, "min"),
        (1.0, "s"),
        (1e-3, "ms"),
        (1e-6, "us"),
    ];
    let unit_of = |s: f64| {
        UNITS
            .iter()
            .copied()
            .find(|&(scale, _)| s >= scale)
            .unwrap_or((1e-9, "ns"))
    };
    let (scale, _) = unit_of(s);
    let rounded = (s / scale * 1e3).round() / 1e3 * scale;
    let (scale, unit) = unit_of(rounded);
    let v = rounded / scale;
    if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0} {unit}")
    } else {
        format!("{v:.3} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_seconds_that_round_up_to_the_next_unit_take_it() {
        assert_eq!(human_seconds(59.9996), "1 min");
        assert_eq!(human_seconds(3599.9999), "1 h");
        assert_eq!(human_seconds(0.25), "250 ms");
        assert_eq!(human_seconds(5400.0), "1.500 h");
    }
    use rand::{RngExt, SeedableRng};

    #[test]
    fn tally_counts_each_reject_reason_under_its_own_name() {
        let mut tally = Tally::default();
        for (i, &reason) in RejectReason::ALL.iter().enumerate() {
            let mut r = RequestRecord::new(0, 1, 0);
            r.outcome = Outcome::Rejected(reason);
            for _ in 0..=i {
                tally.add(&r);
            }
        }
        let counts = tally.counts();
        for (i, reason) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(
                counts.rejected_by_reason.get(reason.as_str()),
                Some(&(i as u64 + 1)),
                "{reason:?} in {:?}",
                counts.rejected_by_reason
            );
        }
        assert_eq!(counts.rejected, 15);
        assert!(counts.adds_up());
    }

    #[test]
    fn slot_counts_give_the_same_percentiles_as_recording_into_hdrhistogram() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut direct = empty_histogram(u64::MAX);
        let mut acc = LatencyAccumulator::new(true);
        let mut values: Vec<u64> = vec![
            0,
            1,
            2047,
            2048,
            2049,
            HISTOGRAM_INITIAL_MAX_NS,
            HISTOGRAM_INITIAL_MAX_NS + 1,
            u64::MAX,
        ];
        for _ in 0..20_000 {
            let magnitude = rng.random_range(0..64u32);
            values.push(rng.random_range(0..=u64::MAX >> (63 - magnitude)));
        }
        // Slots counted past one byte: carried once, many times, and one short of a carry.
        values.extend(std::iter::repeat_n(12_345, 256));
        values.extend(std::iter::repeat_n(0, 70_000));
        values.extend(std::iter::repeat_n(5_000_000, 511));
        for &v in &values {
            direct.saturating_record(v);
            acc.add(v);
        }
        let rebuilt = acc.histogram();
        assert_eq!(rebuilt.len(), direct.len());
        for q in [0.0, 0.001, 0.1, 0.5, 0.9, 0.95, 0.99, 0.999, 0.9999, 1.0] {
            assert_eq!(
                rebuilt.value_at_quantile(q),
                direct.value_at_quantile(q),
                "q {q}"
            );
        }
        for &v in &values {
            assert_eq!(rebuilt.count_at(v), direct.count_at(v), "value {v}");
        }
    }

    #[test]
    fn latencies_of_years_are_counted_where_they_fall_not_clamped() {
        let mut acc = LatencyAccumulator::new(true);
        let initial_slots = acc.slot_counts.len();
        let day_ns = 86_400_000_000_000u64;
        for days in [1_000, 1_000, 1_000, 2_000] {
            acc.add(days * day_ns);
        }
        let stats = acc.stats();
        let p50_days = stats.p50_ms / 86_400_000.0;
        assert!(
            (p50_days - 1_000.0).abs() < 1.0,
            "p50 of three 1000 d and one 2000 d latencies: expected 1000 d, got {p50_days} d"
        );
        assert!(
            acc.slot_counts.len() > initial_slots,
            "the slots grew to the value"
        );
        assert!(acc.slot_counts.len() <= slot_of(u64::MAX) + 1);
    }

    /// A completed request from `arrival_ms` with its first token at `ttft_ms` and its response
    /// at `e2e_ms`, of `output_tokens` tokens.
    fn completed(request: u32, arrival_ms: u64, ttft_ms: u64, e2e_ms: u64) -> RequestRecord {
        const MS: u64 = 1_000_000;
        let mut r = RequestRecord::new(request, 1, arrival_ms * MS);
        r.input_tokens = 100;
        r.output_tokens = 11;
        r.first_token_ns = (arrival_ms + ttft_ms) * MS;
        r.exec_end_ns = (arrival_ms + e2e_ms) * MS;
        r.response_ns = r.exec_end_ns;
        r
    }

    #[test]
    fn goodput_counts_only_requests_within_every_slo_bound() {
        let mut builder = SummaryBuilder::new(Some(100_000_000), [false; STAGES.len()])
            .with_token_metrics(Some(30_000_000), None);
        // Good: e2e 50 and 100 ms with TTFT 10 ms. Not good: e2e 150 ms; TTFT 40 ms; rejected.
        builder.add(&completed(0, 0, 10, 50), true);
        builder.add(&completed(1, 0, 10, 100), true);
        builder.add(&completed(2, 0, 10, 150), true);
        builder.add(&completed(3, 0, 40, 60), true);
        let mut rejected = RequestRecord::new(4, 1, 0);
        rejected.outcome = Outcome::Rejected(RejectReason::QueueFull);
        rejected.response_ns = 0;
        builder.add(&rejected, true);
        let s = builder.finish("hand-made", 0, Vec::new(), 0.0, 150_000_000);
        // Span: first arrival (0) to last response (150 ms).
        let expected_rps = 2.0 / 0.15;
        let vllm = &s.compat.vllm;
        let goodput = vllm["request_goodput"].as_f64().unwrap();
        assert!(
            (goodput - expected_rps).abs() < 1e-9,
            "vLLM goodput {goodput}, expected {expected_rps}"
        );
        assert_eq!(s.goodput_rps, Some(goodput));
        assert_eq!(vllm["completed"], 4);
        assert_eq!(vllm["failed"], 1);
        assert_eq!(vllm["total_input_tokens"], 400);
        assert_eq!(vllm["total_output_tokens"], 44);
        let metrics = &s.compat.inference_perf["successes"]["goodput_metrics"];
        assert_eq!(metrics["good_requests"], 2, "{metrics}");
        assert_eq!(metrics["total_requests"], 4, "{metrics}");
        assert_eq!(metrics["goodput_percentage"], 50.0, "{metrics}");
        assert_eq!(s.compat.inference_perf["failures"]["count"], 1);
        // e2e 50, 60, 100, 150 ms: mean 90, population std sqrt(1550) ms.
        let e2e = &s.latency_ms["end_to_end"];
        assert_eq!(e2e.mean_ms, 90.0);
        assert_eq!(e2e.min_ms, 50.0);
        assert!(
            (e2e.std_ms - 1550f64.sqrt()).abs() < 1e-6,
            "std {}",
            e2e.std_ms
        );
        assert_eq!(vllm["std_e2el_ms"].as_f64(), Some(e2e.std_ms));
    }

    #[test]
    fn without_an_slo_goodput_is_null_and_absent() {
        let mut builder = SummaryBuilder::new(None, [false; STAGES.len()]);
        builder.add(&completed(0, 0, 10, 50), true);
        let s = builder.finish("no-slo", 0, Vec::new(), 0.0, 50_000_000);
        assert_eq!(s.compat.vllm["request_goodput"], serde_json::Value::Null);
        assert!(
            !s.compat.vllm.contains_key("mean_ttft_ms"),
            "no token metrics"
        );
        assert!(
            s.compat.inference_perf["successes"]
                .get("goodput_metrics")
                .is_none()
        );
    }

    #[test]
    fn standard_deviation_is_exact_for_large_values() {
        let mut acc = LatencyAccumulator::new(true);
        // 1 h +- 1 ns: the squares' sum would lose the spread in f64.
        let hour_ns = 3_600_000_000_000u64;
        for v in [hour_ns - 1, hour_ns + 1] {
            acc.add(v);
        }
        assert_eq!(acc.std_ns(2), 1.0);
    }

    #[test]
    fn slot_value_is_the_lowest_value_of_its_slot() {
        for slot in 0..empty_histogram(u64::MAX).distinct_values() {
            let v = slot_value(slot);
            assert_eq!(slot_of(v), slot);
            assert!(v == 0 || slot_of(v - 1) == slot - 1, "slot {slot}");
        }
    }
}
