//! The scenario file's tables as written: every key, its type with units, and its default.
//! [`super::Scenario`] validates them; nothing here reads a file or builds a model.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::llm::scheduler::Scheduling;
use crate::quantity::{BandwidthBytesPerS, DurationNs, RateRps, SizeBytes};
use crate::timeseries::DEFAULT_MAX_ROWS;
use crate::timing::step_spec::StepTimeSpec;

/// How load is offered.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LoadSpec {
    /// `open`: requests arrive at the trace's times. `closed`: `concurrency` clients each send
    /// their next request (sizes from the trace, in order) when the previous one returns, after
    /// `think_time` (perf_analyzer's concurrency mode).
    #[serde(default)]
    pub mode: LoadMode,
    /// Closed loop: number of concurrent clients. Default 1.
    #[serde(default = "one_u32")]
    pub concurrency: u32,
    /// Closed loop: pause between a response and the client's next request. Default 0.
    #[serde(default)]
    pub think_time: DurationNs,
    /// How long a client waits for its whole response, from the attempt's send, before it
    /// gives up: the attempt fails as `timeout` and the server drops the request wherever it
    /// is (vLLM aborts a request whose HTTP client disconnects and frees its KV blocks).
    /// Default: none (the client waits forever).
    pub client_timeout: Option<DurationNs>,
}

impl Default for LoadSpec {
    fn default() -> Self {
        LoadSpec {
            mode: LoadMode::Open,
            concurrency: 1,
            think_time: DurationNs(0),
            client_timeout: None,
        }
    }
}

/// Open or closed loop.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LoadMode {
    /// Trace arrival times.
    #[default]
    Open,
    /// N concurrent clients.
    Closed,
}

/// One-way network latency model.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LatencySpec {
    /// Always `one_way`.
    Constant {
        /// Latency each way.
        one_way: DurationNs,
    },
    /// Lognormal with the given median and 99th percentile.
    Lognormal {
        /// Median one-way latency.
        median: DurationNs,
        /// 99th percentile one-way latency (must exceed the median).
        p99: DurationNs,
    },
    /// Drawn uniformly from measured samples.
    Empirical {
        /// Measured one-way latencies.
        samples: Vec<DurationNs>,
    },
}

/// Client network.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// One-way latency model, applied on the way in and again on the way out. Default: none.
    pub latency: Option<LatencySpec>,
    /// Link bandwidth for payload transfer time. Default: none (transfers take no time).
    pub bandwidth: Option<BandwidthBytesPerS>,
    /// Request payload: fixed part. Default 0.
    #[serde(default)]
    pub request_bytes: SizeBytes,
    /// Request payload: bytes per input token. Default 0.
    #[serde(default)]
    pub request_bytes_per_input_token: u64,
    /// Response payload: fixed part. Default 0.
    #[serde(default)]
    pub response_bytes: SizeBytes,
    /// Response payload: bytes per output token. Default 0.
    #[serde(default)]
    pub response_bytes_per_output_token: u64,
}

/// Gateway admission and load balancing.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct GatewaySpec {
    /// Fixed gateway processing time per request. Default 0.
    #[serde(default)]
    pub overhead: DurationNs,
    /// Token-bucket rate limit. Default: none.
    pub rate_limit: Option<RateRps>,
    /// Token-bucket depth in requests. Default: one second of `rate_limit`, at least 1.
    pub burst: Option<u32>,
    /// Maximum requests admitted and not yet answered. Default: unlimited.
    pub max_in_flight: Option<u32>,
    /// How a pool's instances are chosen. Default `round_robin`.
    #[serde(default)]
    pub load_balancing: LoadBalancing,
}

/// Load-balancing policy across a pool's instances.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum LoadBalancing {
    /// Cycle through instances.
    #[default]
    RoundRobin,
    /// Uniformly at random.
    Random,
    /// Fewest requests routed and not yet finished.
    LeastOutstanding,
    /// Fewest requests waiting (pre-processing wait plus instance queue).
    JoinShortestQueue,
    /// Two random instances, the one with fewer outstanding requests.
    PowerOfTwo,
}

/// Pre-processing CPU workers of each instance.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PreprocessSpec {
    /// Workers per instance (>= 1); absent: 1. Refused with `[host]`, whose cores run the
    /// pre-processing instead.
    pub workers: Option<u32>,
    /// Fixed time per request. Default 0.
    #[serde(default)]
    pub base: DurationNs,
    /// Time per input token. Default 0.
    #[serde(default)]
    pub per_input_token: DurationNs,
}

/// The host CPU of each instance (`[host]`): `cores` shared, first come first served, by every
/// request's CPU work on its way in (this, and its pre-processing) and its response's on the
/// way out (this, and its post-processing).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// CPU cores per instance (>= 1; required, 0 when not written, which validation refuses).
    #[serde(default)]
    pub cores: u32,
    /// CPU time per request on its way in (HTTP, deserialising the payload). Default 0.
    #[serde(default)]
    pub request: DurationNs,
    /// CPU time per input token on its way in (the payload grows with the prompt). Default 0.
    #[serde(default)]
    pub request_per_input_token: DurationNs,
    /// CPU time per response on its way out (serialising, HTTP send). Default 0.
    #[serde(default)]
    pub response: DurationNs,
    /// Cores each model instance's compute keeps busy while a batch runs (from its dispatch to
    /// the end of its compute): its threads on a model served on the CPU (ONNX Runtime's
    /// intra-op threads), 0 for a GPU's (at most `cores`). Default 0.
    #[serde(default)]
    pub compute_cores: u32,
}

/// Instance queue policy (Triton's `dynamic_batching.default_queue_policy`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct QueueSpec {
    /// Priority levels; 1 is FCFS. With more, a request's trace class is its level (0 first;
    /// classes beyond the last level use the last). Default 1.
    #[serde(default = "one_u32")]
    pub priority_levels: u32,
    /// Requests the queue holds before rejecting new ones; 0 is unbounded. Default 0.
    #[serde(default)]
    pub max_queue_size: u32,
    /// How long a request may wait in the queue. Default: forever.
    pub timeout: Option<DurationNs>,
    /// What happens at the timeout. Default `reject`.
    #[serde(default)]
    pub timeout_action: TimeoutAction,
}

impl QueueSpec {
    /// Whether the dynamic batcher may form payloads ahead of a free model instance: Triton
    /// prefetches only when the queue has no policy (no timeout, no bound, one priority level).
    pub fn allows_prefetch(&self) -> bool {
        self.timeout.is_none() && self.max_queue_size == 0 && self.priority_levels == 1
    }
}

impl Default for QueueSpec {
    fn default() -> Self {
        QueueSpec {
            priority_levels: 1,
            max_queue_size: 0,
            timeout: None,
            timeout_action: TimeoutAction::Reject,
        }
    }
}

/// Triton's `timeout_action`.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
pub enum TimeoutAction {
    /// The request leaves the queue, timed out.
    #[default]
    #[serde(alias = "REJECT", rename = "reject")]
    Reject,
    /// The request stays, behind every request that has not timed out.
    #[serde(alias = "DELAY", rename = "delay")]
    Delay,
}

/// The batcher: Triton's dynamic batcher (`kind = "dynamic"`, the default; see
/// [`crate::Batcher`]) or vLLM's continuous batcher (`kind = "continuous"`; see
/// [`crate::SchedulerConfig`]). Each kind's keys are rejected under the other.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BatcherSpec {
    /// `dynamic` or `continuous`. Default `dynamic`.
    #[serde(default)]
    pub kind: BatcherKind,
    /// Largest batch; 1 means no batching. Default 1.
    #[serde(default = "one_u32")]
    pub max_batch_size: u32,
    /// Batch sizes sent as soon as they can be formed. Default: none.
    #[serde(default)]
    pub preferred_batch_size: Vec<u32>,
    /// How long the oldest request may wait for a fuller batch. Default 0.
    #[serde(default)]
    pub max_queue_delay: DurationNs,
    /// Dynamic: form batches ahead of a free model instance, as Triton does when the queue has
    /// no timeout, no `max_queue_size` and one priority level (see [`crate::Batcher`]); `false`
    /// forms a batch only when a model instance frees up. Default true.
    pub prefetch: Option<bool>,
    /// Dynamic: time from a model instance taking a batch to the batch's compute start (Triton
    /// waking the backend's instance thread with the payload; for the Python backend, the call
    /// into its stub process). The model instance is held through it, and it counts as queue
    /// time, as in Triton's statistics and traces. Paid by a batch taken by an idle model
    /// instance; one taken as the instance's previous batch ends is taken by its running thread
    /// and computes when that batch's release is over. Default 0.
    #[serde(default)]
    pub dispatch_latency: DurationNs,
    /// Dynamic: time from a batch's compute end until its model instance can compute the next
    /// one (Triton: the backend returning, the instance released). With prefetching, a payload
    /// ready at compute end is taken then (it grows no more) and computes after the release;
    /// otherwise the instance is free when the release is over, and without prefetching its
    /// next batch is formed only then and pays `dispatch_latency`. The batch's requests go on at
    /// compute end; only the instance waits. Default 0.
    #[serde(default)]
    pub release_latency: DurationNs,
    /// Dynamic: the share of the wake-ups at a batch's end, with requests waiting, that the
    /// batcher sleeps through, 0 to 1: the waiting requests start only when the next request
    /// arrives, or at the batcher's 500 ms poll; its queue-delay timer does not wake it.
    /// Triton 2.51 did so at 8% of such batch ends serving the classifier on a 2-core VM
    /// (its trace); `capsim calibrate --endpoint` measures it from its open loops. Default 0.
    #[serde(default)]
    pub missed_release: f64,
    /// Continuous: most sequences running at once. Default 256.
    pub max_num_seqs: Option<u32>,
    /// Continuous: most tokens computed in one step. Default 8192.
    pub max_num_batched_tokens: Option<u32>,
    /// Continuous: split long prompts across steps. Default true.
    pub enable_chunked_prefill: Option<bool>,
    /// Continuous: `fcfs` or `priority` (by request class). Default `fcfs`.
    pub scheduling: Option<Scheduling>,
    /// Continuous: CPU time of every step (scheduling, sampling, detokenization). Default 0.
    pub step_overhead: Option<DurationNs>,
    /// Continuous: CPU time per sequence in a step. Default 0.
    pub step_overhead_per_seq: Option<DurationNs>,
    /// Continuous: admit a waiting prompt only when KV blocks for all of it are free, not
    /// only for its first chunk (vLLM's `scheduler_reserve_full_isl`). Default false.
    pub reserve_full_isl: Option<bool>,
    /// Continuous: steps the engine schedules ahead of the one running (vLLM V1's batch queue
    /// with `async_scheduling`: 1). A request that joins while a step runs is first scheduled
    /// this many step boundaries later than a synchronous engine would take it, unless the
    /// engine would otherwise go idle. 0: synchronous (llama.cpp; vLLM without async
    /// scheduling). Default 1.
    pub schedule_ahead_steps: Option<u32>,
    /// Continuous: the token counts the engine captured CUDA graphs at (vLLM's
    /// `cudagraph_capture_sizes`), strictly increasing; each step's time is drawn for the step
    /// padded to its graph (see [`crate::timing::step_spread`]); `[]` runs every step eagerly.
    /// Default: vLLM's default list for `max_num_seqs` and `max_num_batched_tokens`
    /// ([`crate::timing::step_spread::vllm_default_sizes`]).
    pub cuda_graph_sizes: Option<Vec<u32>>,
    /// Continuous: measured factors of the step time (a step's measured GPU time over the
    /// model's), each step's time multiplied by one drawn at random (not rescaled). Default:
    /// none, every step takes the model's time.
    pub step_residuals: Option<Vec<f64>>,
}

impl BatcherSpec {
    /// The continuous batcher's keys.
    pub fn continuous_keys(&self) -> ContinuousKeys {
        ContinuousKeys {
            max_num_seqs: self.max_num_seqs,
            max_num_batched_tokens: self.max_num_batched_tokens,
            enable_chunked_prefill: self.enable_chunked_prefill,
            scheduling: self.scheduling,
            step_overhead: self.step_overhead,
            step_overhead_per_seq: self.step_overhead_per_seq,
            reserve_full_isl: self.reserve_full_isl,
            schedule_ahead_steps: self.schedule_ahead_steps,
            cuda_graph_sizes: self.cuda_graph_sizes.clone(),
            step_residuals: self.step_residuals.clone(),
        }
    }
}

impl Default for BatcherSpec {
    fn default() -> Self {
        BatcherSpec {
            kind: BatcherKind::Dynamic,
            max_batch_size: 1,
            preferred_batch_size: Vec::new(),
            max_queue_delay: DurationNs(0),
            prefetch: None,
            dispatch_latency: DurationNs(0),
            release_latency: DurationNs(0),
            missed_release: 0.0,
            max_num_seqs: None,
            max_num_batched_tokens: None,
            enable_chunked_prefill: None,
            scheduling: None,
            step_overhead: None,
            step_overhead_per_seq: None,
            reserve_full_isl: None,
            schedule_ahead_steps: None,
            cuda_graph_sizes: None,
            step_residuals: None,
        }
    }
}

/// Model execution resources of each instance.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExecutionSpec {
    /// GPUs per instance. Default 1.
    #[serde(default = "one_u32")]
    pub gpus: u32,
    /// Model instances per GPU (Triton's `instance_group.count`). Default 1.
    #[serde(default = "one_u32")]
    pub instance_count: u32,
    /// Load time before a model instance runs its first batch. Default 0.
    #[serde(default)]
    pub cold_start: DurationNs,
    /// Multiplies every batch execution time and every LLM step's GPU time (not the step's CPU
    /// overhead), whatever the service model: 1.2 asks "what if the model ran 20% slower".
    /// Finite, above 0 and at most 1000. Default 1 (times as the model gives them).
    #[serde(default = "one_f64")]
    pub time_scale: f64,
    /// The machine's speed from window to window ([`crate::timing::slowdown::SpeedProcess`]):
    /// each `speed_window` of simulated time runs every batch and step at a factor drawn from
    /// these (seeded; rescaled to mean 1), as a shared host's or a throttled GPU's speed wanders.
    /// `capsim calibrate --endpoint` measures them from the server's statistics over its open
    /// loops. Default: none (every window at the model's speed).
    #[serde(default)]
    pub speed_levels: Option<Vec<f64>>,
    /// How long each window of `speed_levels` lasts. Default 2 s.
    #[serde(default)]
    pub speed_window: Option<DurationNs>,
}

/// One window of a replay's `pauses` as written ([`super::ReplayInputs::pauses`]).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PauseSpec {
    /// Start of the pause, from the start of the simulation.
    pub from: DurationNs,
    /// End of the pause (exclusive).
    pub to: DurationNs,
}

/// One window of a replay's `slowdowns` as written ([`super::ReplayInputs::slowdowns`]).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SlowdownSpec {
    /// Start of the window, from the start of the simulation.
    pub from: DurationNs,
    /// End of the window (exclusive).
    pub to: DurationNs,
    /// How many times longer execution takes inside the window (2: half speed).
    pub factor: f64,
}

fn one_f64() -> f64 {
    1.0
}

impl Default for ExecutionSpec {
    fn default() -> Self {
        ExecutionSpec {
            gpus: 1,
            instance_count: 1,
            cold_start: DurationNs(0),
            time_scale: 1.0,
            speed_levels: None,
            speed_window: None,
        }
    }
}

/// Service-time model of a batch.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ServiceSpec {
    /// Every batch takes `time` (times a residual factor when `residuals` is given).
    Constant {
        /// Batch time.
        time: DurationNs,
        /// Observed ratios of measured to mean time.
        residuals: Option<Vec<f64>>,
    },
    /// Exponentially distributed with mean `mean`.
    Exponential {
        /// Mean batch time.
        mean: DurationNs,
    },
    /// `a + b*batch + c*batch*max_input_tokens + d*batch*max_input_tokens^2` (times a residual
    /// factor).
    Affine {
        /// Fixed cost per batch.
        a: DurationNs,
        /// Cost per request in the batch.
        #[serde(default)]
        b: DurationNs,
        /// Cost per padded input token.
        #[serde(default)]
        c: DurationNs,
        /// Cost per padded input token per token of its padded sequence (attention).
        #[serde(default)]
        d: DurationNs,
        /// Each batch size's level over the line, from size 1 (sizes beyond the list take the
        /// last): what a calibration through a server measured where the line misses.
        size_factors: Option<Vec<f64>>,
        /// Observed ratios of measured to mean time.
        residuals: Option<Vec<f64>>,
    },
    /// Drawn from a calibration profile written by `capsim calibrate` (a relative path is
    /// relative to the scenario file's directory); inputs are padded to the batch's longest.
    Profile {
        /// The profile (JSON).
        path: PathBuf,
    },
}

/// Post-processing: a delay per request, run in parallel (no worker limit).
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct PostprocessSpec {
    /// Fixed time per request. Default 0.
    #[serde(default)]
    pub base: DurationNs,
    /// Time per output token. Default 0.
    #[serde(default)]
    pub per_output_token: DurationNs,
}

/// Standby instances: servers kept out of rotation until the gateway needs them. When every
/// active instance of the pool has at least `activate_at_outstanding` requests outstanding, the
/// next standby instance is activated: it joins the rotation at once and its model instances
/// load for `execution.cold_start` before running their first batch. Activated instances stay
/// active (an autoscaler that also scales down would extend this).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StandbySpec {
    /// Standby instances (beyond `instances`). Default 0.
    #[serde(default)]
    pub instances: u32,
    /// Outstanding requests on every active instance that trigger an activation. Default 1.
    #[serde(default = "one_u32")]
    pub activate_at_outstanding: u32,
}

impl Default for StandbySpec {
    fn default() -> Self {
        StandbySpec {
            instances: 0,
            activate_at_outstanding: 1,
        }
    }
}

/// A named pool of instances serving some models or classes.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PoolFile {
    /// Trace `model` values routed here.
    #[serde(default)]
    pub models: Vec<String>,
    /// Trace classes routed here.
    #[serde(default)]
    pub classes: Vec<u32>,
    /// Instances (servers) in the pool. Default 1.
    #[serde(default = "one_u32")]
    pub instances: u32,
    /// The model's input limit in tokens: longer inputs are cut to it, as a tokenizer's
    /// `max_length` with truncation does. Absent: no limit.
    pub max_input_tokens: Option<u32>,
    /// The most output tokens a response has (vLLM's `max_tokens`): longer outputs are cut to
    /// it. Absent: no limit.
    pub max_output_tokens: Option<u32>,
    /// Standby instances.
    #[serde(default)]
    pub standby: StandbySpec,
    /// Pre-processing; absent means none.
    pub preprocess: Option<PreprocessSpec>,
    /// The host CPU as a resource that queues; absent means none.
    pub host: Option<HostSpec>,
    /// Queue policy.
    #[serde(default)]
    pub queue: QueueSpec,
    /// Dynamic batcher.
    #[serde(default)]
    pub batcher: BatcherSpec,
    /// Execution resources.
    #[serde(default)]
    pub execution: ExecutionSpec,
    /// Service-time model (required with the dynamic batcher).
    pub service: Option<ServiceSpec>,
    /// KV cache (continuous batcher only).
    pub kv_cache: Option<KvCacheSpec>,
    /// Step-time model (required with the continuous batcher).
    pub step_time: Option<StepTimeSpec>,
    /// Post-processing.
    #[serde(default)]
    pub postprocess: PostprocessSpec,
}

/// Result cache at the gateway.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    /// Probability a request is answered from the cache. Default 0.
    #[serde(default)]
    pub hit_probability: f64,
    /// Time to answer a hit at the gateway. Default 0.
    #[serde(default)]
    pub latency: DurationNs,
}

/// Client retries of failed attempts. Each attempt is a request of its own to the server
/// (recorded, counted, and new load); its latency is measured from its own send.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// Attempts per request, the first included; 1 means no retries. Default 1.
    #[serde(default = "one_u32")]
    pub max_attempts: u32,
    /// Wait before the second attempt. Default 100ms.
    #[serde(default = "hundred_ms")]
    pub backoff: DurationNs,
    /// Each further wait is the previous one times this (>= 1). Default 2.
    #[serde(default = "two")]
    pub backoff_multiplier: f64,
    /// Which outcomes are retried. Default `rejected` and `timed_out` (a client timeout is
    /// retried only when `client_timeout` is listed).
    #[serde(default = "retry_on_all")]
    pub on: Vec<RetryOn>,
}

impl Default for RetrySpec {
    fn default() -> Self {
        RetrySpec {
            max_attempts: 1,
            backoff: hundred_ms(),
            backoff_multiplier: 2.0,
            on: retry_on_all(),
        }
    }
}

/// An outcome a client retries.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum RetryOn {
    /// Any rejection (rate limit, in-flight limit, full queue).
    Rejected,
    /// A queue timeout.
    TimedOut,
    /// The client's own timeout (`load.client_timeout`): the attempt failed as `timeout`.
    ClientTimeout,
}

fn hundred_ms() -> DurationNs {
    DurationNs(100_000_000)
}

fn two() -> f64 {
    2.0
}

fn retry_on_all() -> Vec<RetryOn> {
    vec![RetryOn::Rejected, RetryOn::TimedOut]
}

/// Service-level objective: a completed request counts as goodput when it meets every bound
/// that is set (DistServe's joint SLO; at least one must be).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SloSpec {
    /// End-to-end latency bound.
    pub latency: Option<DurationNs>,
    /// Time-to-first-token bound (continuous batching).
    pub ttft: Option<DurationNs>,
    /// Time-per-output-token bound (continuous batching; requests with one output token have
    /// no TPOT and meet it).
    pub tpot: Option<DurationNs>,
}

/// Output sampling.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TimeseriesSpec {
    /// Sampling interval of timeseries.parquet. Default 1s.
    #[serde(default = "one_second")]
    pub interval: DurationNs,
    /// The most rows timeseries.parquet keeps (2 to
    /// [`MAX_ROWS_LIMIT`](crate::timeseries::MAX_ROWS_LIMIT), default [`DEFAULT_MAX_ROWS`]): a
    /// run whose simulated time needs more doubles the interval as often as it takes (the
    /// summary's `timeseries_interval_s` says what was used).
    #[serde(default = "default_max_rows")]
    pub max_rows: u32,
}

impl Default for TimeseriesSpec {
    fn default() -> Self {
        TimeseriesSpec {
            interval: one_second(),
            max_rows: DEFAULT_MAX_ROWS,
        }
    }
}

fn default_max_rows() -> u32 {
    DEFAULT_MAX_ROWS
}

pub(super) fn one_u32() -> u32 {
    1
}

fn one_second() -> DurationNs {
    DurationNs(1_000_000_000)
}

/// The TOML file as written: the default pool's keys at top level, named extra pools under
/// `[pools.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ScenarioFile {
    pub(super) name: Option<String>,
    pub(super) description: Option<String>,
    #[serde(default)]
    pub(super) load: LoadSpec,
    #[serde(default)]
    pub(super) network: NetworkSpec,
    #[serde(default)]
    pub(super) gateway: GatewaySpec,
    #[serde(default)]
    pub(super) cache: CacheSpec,
    #[serde(default)]
    pub(super) retry: RetrySpec,
    pub(super) slo: Option<SloSpec>,
    #[serde(default)]
    pub(super) timeseries: TimeseriesSpec,
    #[serde(default = "one_u32")]
    pub(super) instances: u32,
    pub(super) max_input_tokens: Option<u32>,
    pub(super) max_output_tokens: Option<u32>,
    #[serde(default)]
    pub(super) standby: StandbySpec,
    pub(super) preprocess: Option<PreprocessSpec>,
    pub(super) host: Option<HostSpec>,
    #[serde(default)]
    pub(super) queue: QueueSpec,
    #[serde(default)]
    pub(super) batcher: BatcherSpec,
    #[serde(default)]
    pub(super) execution: ExecutionSpec,
    pub(super) service: Option<ServiceSpec>,
    pub(super) kv_cache: Option<KvCacheSpec>,
    pub(super) step_time: Option<StepTimeSpec>,
    #[serde(default)]
    pub(super) postprocess: PostprocessSpec,
    #[serde(default)]
    pub(super) pools: BTreeMap<String, PoolFile>,
}

/// Which batcher a pool runs.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum BatcherKind {
    /// Triton's dynamic batcher: whole requests in batches (see [`crate::Batcher`]).
    #[default]
    Dynamic,
    /// vLLM's iteration-level batcher (see [`crate::SchedulerConfig`]).
    Continuous,
}

/// The continuous batcher's keys of `[batcher]`, as written (all optional).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ContinuousKeys {
    /// `max_num_seqs`. Default 256.
    pub max_num_seqs: Option<u32>,
    /// `max_num_batched_tokens`. Default 8192.
    pub max_num_batched_tokens: Option<u32>,
    /// `enable_chunked_prefill`. Default true.
    pub enable_chunked_prefill: Option<bool>,
    /// `scheduling`. Default `fcfs`.
    pub scheduling: Option<Scheduling>,
    /// `step_overhead`: CPU time per step. Default 0.
    pub step_overhead: Option<DurationNs>,
    /// `step_overhead_per_seq`: CPU time per sequence in the step. Default 0.
    pub step_overhead_per_seq: Option<DurationNs>,
    /// `reserve_full_isl`: admit a prompt only when blocks for all of it are free. Default
    /// false.
    pub reserve_full_isl: Option<bool>,
    /// `schedule_ahead_steps`: steps scheduled ahead of the running one. Default 1.
    pub schedule_ahead_steps: Option<u32>,
    /// `cuda_graph_sizes`: captured CUDA-graph sizes. Default vLLM's list for the limits.
    pub cuda_graph_sizes: Option<Vec<u32>>,
    /// `step_residuals`: measured step-time factors. Default none.
    pub step_residuals: Option<Vec<f64>>,
}

impl ContinuousKeys {
    /// The key names that are set, for "only with a continuous batcher" errors.
    pub fn set_keys(&self) -> impl Iterator<Item = &'static str> {
        [
            ("max_num_seqs", self.max_num_seqs.is_some()),
            (
                "max_num_batched_tokens",
                self.max_num_batched_tokens.is_some(),
            ),
            (
                "enable_chunked_prefill",
                self.enable_chunked_prefill.is_some(),
            ),
            ("scheduling", self.scheduling.is_some()),
            ("step_overhead", self.step_overhead.is_some()),
            (
                "step_overhead_per_seq",
                self.step_overhead_per_seq.is_some(),
            ),
            ("reserve_full_isl", self.reserve_full_isl.is_some()),
            ("schedule_ahead_steps", self.schedule_ahead_steps.is_some()),
            ("cuda_graph_sizes", self.cuda_graph_sizes.is_some()),
            ("step_residuals", self.step_residuals.is_some()),
        ]
        .into_iter()
        .filter(|&(_, set)| set)
        .map(|(k, _)| k)
    }
}

/// `[kv_cache]` of a continuous-batching pool.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KvCacheSpec {
    /// Tokens per KV block. Default 16 (vLLM's).
    #[serde(default = "sixteen")]
    pub block_size: u32,
    /// KV blocks per instance. Default: the step-time model's KV capacity over `block_size`.
    pub num_gpu_blocks: Option<u32>,
    /// Keep computed prompt blocks for reuse by later requests with the same prefix. Default
    /// false.
    #[serde(default)]
    pub enable_prefix_caching: bool,
    /// Tokens per trace prefix block (`prefix_blocks` ids; Mooncake's `hash_ids` are 512), a
    /// multiple of `block_size`. Default 512.
    #[serde(default = "five_hundred_twelve")]
    pub prefix_block_tokens: u32,
}

impl Default for KvCacheSpec {
    fn default() -> Self {
        KvCacheSpec {
            block_size: sixteen(),
            num_gpu_blocks: None,
            enable_prefix_caching: false,
            prefix_block_tokens: five_hundred_twelve(),
        }
    }
}

fn sixteen() -> u32 {
    16
}

fn five_hundred_twelve() -> u32 {
    512
}
