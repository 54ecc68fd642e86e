//! Scenarios: the serving system to simulate, written in TOML.
//!
//! A scenario describes the path of a request (client network, gateway, pre-processing, instance
//! queue, dynamic batcher, model execution, post-processing) and how load is offered. Durations,
//! rates, bandwidths and sizes are human strings with units (`"5ms"`, `"120rps"`, `"10Gbps"`,
//! `"4KiB"`), parsed once when the scenario is read. Every key, its unit and its default is
//! documented in `docs/scenario.md`.
//!
//! ```
//! use capsim_sim::Scenario;
//! let mut s = Scenario::from_toml_str(r#"
//!     instances = 2
//!     [batcher]
//!     max_batch_size = 8
//!     max_queue_delay = "2ms"
//!     [service]
//!     kind = "constant"
//!     time = "5ms"
//! "#).unwrap();
//! s.set("batcher.max_batch_size", "16").unwrap();
//! assert_eq!(s.pools()[0].batcher.max_batch_size, 16);
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::llm::scheduler::Scheduling;
use crate::llm::spec::{BatcherKind, ContinuousKeys, KvCacheSpec, LlmPool, build_llm_pool};
use crate::quantity::{BandwidthBytesPerS, DurationNs, RateRps, SizeBytes};
use crate::timeseries::{DEFAULT_MAX_ROWS, MAX_ROWS_LIMIT};
use crate::timing::profile::ProfileServiceTime;
use crate::timing::service::{
    AffineService, ConstantService, ExponentialService, Residuals, ScaledService, ServiceTime,
};
use crate::timing::step_time::{ScaledStepTime, StepTimeSpec};

/// Why a scenario could not be read or changed. Messages name the file or key and quote the value.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The TOML is malformed, has an unknown key, or a value of the wrong type or unit.
    #[error("invalid scenario{}: {message}", origin.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Parse {
        /// The file, when read from one.
        origin: Option<PathBuf>,
        /// The TOML parser's message, which shows the line and key.
        message: String,
    },
    /// A value parsed but is out of range or inconsistent with another.
    #[error("invalid scenario: key `{key}`: {message}")]
    Invalid {
        /// Dotted path of the offending key.
        key: String,
        /// What is wrong and what would fix it.
        message: String,
    },
    /// An override (`key=value`) could not be applied.
    #[error("cannot set `{key}` to {value:?}: {message}")]
    Override {
        /// Dotted path given.
        key: String,
        /// Value given.
        value: String,
        /// What is wrong.
        message: String,
    },
}

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
}

impl Default for LoadSpec {
    fn default() -> Self {
        LoadSpec {
            mode: LoadMode::Open,
            concurrency: 1,
            think_time: DurationNs(0),
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
    /// Workers per instance (>= 1). Default 1.
    #[serde(default = "one_u32")]
    pub workers: u32,
    /// Fixed time per request. Default 0.
    #[serde(default)]
    pub base: DurationNs,
    /// Time per input token. Default 0.
    #[serde(default)]
    pub per_input_token: DurationNs,
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
/// [`crate::batcher`]) or vLLM's continuous batcher (`kind = "continuous"`; see
/// [`crate::llm::scheduler`]). Each kind's keys are rejected under the other.
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
    /// no timeout, no `max_queue_size` and one priority level (see [`crate::batcher`]); `false`
    /// forms a batch only when a model instance frees up. Default true.
    pub prefetch: Option<bool>,
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
            max_num_seqs: None,
            max_num_batched_tokens: None,
            enable_chunked_prefill: None,
            scheduling: None,
            step_overhead: None,
            step_overhead_per_seq: None,
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
    /// `a + b*batch + c*batch*max_input_tokens` (times a residual factor).
    Affine {
        /// Fixed cost per batch.
        a: DurationNs,
        /// Cost per request in the batch.
        #[serde(default)]
        b: DurationNs,
        /// Cost per padded input token.
        #[serde(default)]
        c: DurationNs,
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
    /// Which outcomes are retried. Default both.
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
    /// The most rows timeseries.parquet keeps (2 to [`MAX_ROWS_LIMIT`], default
    /// [`DEFAULT_MAX_ROWS`]): a run whose simulated time needs more doubles the interval as
    /// often as it takes (the summary's `timeseries_interval_s` says what was used).
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

fn one_u32() -> u32 {
    1
}

fn one_second() -> DurationNs {
    DurationNs(1_000_000_000)
}

/// The TOML file as written: the default pool's keys at top level, named extra pools under
/// `[pools.NAME]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScenarioFile {
    name: Option<String>,
    description: Option<String>,
    #[serde(default)]
    load: LoadSpec,
    #[serde(default)]
    network: NetworkSpec,
    #[serde(default)]
    gateway: GatewaySpec,
    #[serde(default)]
    cache: CacheSpec,
    #[serde(default)]
    retry: RetrySpec,
    slo: Option<SloSpec>,
    #[serde(default)]
    timeseries: TimeseriesSpec,
    #[serde(default = "one_u32")]
    instances: u32,
    max_input_tokens: Option<u32>,
    max_output_tokens: Option<u32>,
    #[serde(default)]
    standby: StandbySpec,
    preprocess: Option<PreprocessSpec>,
    #[serde(default)]
    queue: QueueSpec,
    #[serde(default)]
    batcher: BatcherSpec,
    #[serde(default)]
    execution: ExecutionSpec,
    service: Option<ServiceSpec>,
    kv_cache: Option<KvCacheSpec>,
    step_time: Option<StepTimeSpec>,
    #[serde(default)]
    postprocess: PostprocessSpec,
    #[serde(default)]
    pools: BTreeMap<String, PoolFile>,
}

/// One pool of instances, validated.
#[derive(Debug, Clone)]
pub struct Pool {
    /// `default` for the top-level pool, else the `[pools.NAME]` name.
    pub name: String,
    /// Trace models routed here (empty for the default pool).
    pub models: Vec<String>,
    /// Trace classes routed here.
    pub classes: Vec<u32>,
    /// Instances (servers) behind the gateway, active from the start.
    pub instances: u32,
    /// Longest input the model takes, in tokens (at least 1): a longer request is truncated to
    /// it after pre-processing, as a tokenizer's `max_length` does. `None`: no limit.
    pub max_input_tokens: Option<u32>,
    /// Most output tokens a response has, at least 1 (vLLM's `max_tokens`): a longer request's
    /// output is truncated to it after pre-processing. `None`: no limit.
    pub max_output_tokens: Option<u32>,
    /// Standby instances.
    pub standby: StandbySpec,
    /// Pre-processing workers, if any.
    pub preprocess: Option<PreprocessSpec>,
    /// Queue policy.
    pub queue: QueueSpec,
    /// Dynamic batcher, with `preferred_batch_size` sorted ascending.
    pub batcher: BatcherSpec,
    /// Execution resources.
    pub execution: ExecutionSpec,
    /// The service-time model as written (dynamic batcher).
    pub service_spec: Option<ServiceSpec>,
    /// The service-time model, built (dynamic batcher; `None` with a continuous batcher).
    pub service: Option<Arc<dyn ServiceTime>>,
    /// The continuous batcher's settings and step-time model, when `batcher.kind` is
    /// `continuous`.
    pub llm: Option<LlmPool>,
    /// Post-processing.
    pub postprocess: PostprocessSpec,
}

/// A validated scenario. Build with [`Scenario::from_toml_str`] or [`Scenario::from_path`]; change
/// one key with [`Scenario::set`].
#[derive(Debug, Clone)]
pub struct Scenario {
    raw: toml::Table,
    origin: Option<PathBuf>,
    /// Scenario name (the file stem when not given).
    pub name: String,
    /// Free text.
    pub description: Option<String>,
    /// How load is offered.
    pub load: LoadSpec,
    /// Client network.
    pub network: NetworkSpec,
    /// Gateway.
    pub gateway: GatewaySpec,
    /// Result cache.
    pub cache: CacheSpec,
    /// Client retries.
    pub retry: RetrySpec,
    /// Service-level objective.
    pub slo: Option<SloSpec>,
    /// Timeseries sampling.
    pub timeseries: TimeseriesSpec,
    pools: Vec<Pool>,
}

impl Scenario {
    /// Parses and validates a scenario from TOML text.
    pub fn from_toml_str(text: &str) -> Result<Scenario, ScenarioError> {
        let raw: toml::Table = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            origin: None,
            message: e.to_string(),
        })?;
        Scenario::from_table(raw, None)
    }

    /// Reads, parses and validates a scenario file.
    pub fn from_path(path: &Path) -> Result<Scenario, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let raw: toml::Table = toml::from_str(&text).map_err(|e| ScenarioError::Parse {
            origin: Some(path.to_path_buf()),
            message: e.to_string(),
        })?;
        let mut s = Scenario::from_table(raw, Some(path.to_path_buf()))?;
        if s.raw.get("name").is_none()
            && let Some(stem) = path.file_stem()
        {
            s.name = stem.to_string_lossy().into_owned();
        }
        Ok(s)
    }

    fn from_table(raw: toml::Table, origin: Option<PathBuf>) -> Result<Scenario, ScenarioError> {
        let file: ScenarioFile =
            raw.clone()
                .try_into()
                .map_err(|e: toml::de::Error| ScenarioError::Parse {
                    origin: origin.clone(),
                    message: e.to_string(),
                })?;
        let default_pool = PoolFile {
            models: Vec::new(),
            classes: Vec::new(),
            instances: file.instances,
            max_input_tokens: file.max_input_tokens,
            max_output_tokens: file.max_output_tokens,
            standby: file.standby,
            preprocess: file.preprocess,
            queue: file.queue,
            batcher: file.batcher,
            execution: file.execution,
            service: file.service,
            kv_cache: file.kv_cache,
            step_time: file.step_time,
            postprocess: file.postprocess,
        };
        let base = origin.as_deref().and_then(Path::parent);
        let mut pools = vec![build_pool("default", "", default_pool, base)?];
        for (name, pool) in file.pools {
            let prefix = format!("pools.{name}.");
            pools.push(build_pool(&name, &prefix, pool, base)?);
        }
        check_size(&pools)?;
        validate_network(&file.network)?;
        if let Some(rate) = file.gateway.rate_limit
            && rate.0 <= 0.0
        {
            return Err(invalid("gateway.rate_limit", "must be above 0rps"));
        }
        if file.gateway.burst == Some(0) {
            return Err(invalid("gateway.burst", "must be at least 1"));
        }
        if file.gateway.max_in_flight == Some(0) {
            return Err(invalid("gateway.max_in_flight", "must be at least 1"));
        }
        if !(0.0..=1.0).contains(&file.cache.hit_probability) {
            return Err(invalid(
                "cache.hit_probability",
                format!(
                    "{} is not a probability in [0, 1]",
                    file.cache.hit_probability
                ),
            ));
        }
        if file.retry.max_attempts == 0 || file.retry.max_attempts > 100 {
            return Err(invalid("retry.max_attempts", "must be between 1 and 100"));
        }
        if !(file.retry.backoff_multiplier.is_finite() && file.retry.backoff_multiplier >= 1.0) {
            return Err(invalid(
                "retry.backoff_multiplier",
                format!("{} must be a number >= 1", file.retry.backoff_multiplier),
            ));
        }
        if file.load.concurrency == 0 {
            return Err(invalid("load.concurrency", "must be at least 1"));
        }
        if let Some(slo) = &file.slo
            && slo.latency.is_none()
            && slo.ttft.is_none()
            && slo.tpot.is_none()
        {
            return Err(invalid(
                "slo",
                "sets no bound: give `latency`, `ttft` or `tpot` (or drop [slo])",
            ));
        }
        let continuous = pools.iter().any(|p| p.llm.is_some());
        if let Some(slo) = &file.slo
            && !continuous
            && (slo.ttft.is_some() || slo.tpot.is_some())
        {
            return Err(invalid(
                "slo",
                "`ttft` and `tpot` bound token latencies, which only a continuous batcher (`batcher.kind = \"continuous\"`) produces",
            ));
        }
        if file.timeseries.interval.0 == 0 {
            return Err(invalid("timeseries.interval", "must be above 0"));
        }
        if !(2..=MAX_ROWS_LIMIT).contains(&file.timeseries.max_rows) {
            return Err(invalid(
                "timeseries.max_rows",
                format!(
                    "must be between 2 and {MAX_ROWS_LIMIT} (the interval doubles as needed to stay within it)"
                ),
            ));
        }
        Ok(Scenario {
            raw,
            origin,
            name: file.name.unwrap_or_else(|| "scenario".to_string()),
            description: file.description,
            load: file.load,
            network: file.network,
            gateway: file.gateway,
            cache: file.cache,
            retry: file.retry,
            slo: file.slo,
            timeseries: file.timeseries,
            pools,
        })
    }

    /// The pools: `pools()[0]` is the default (top-level) pool, then named pools in name order.
    pub fn pools(&self) -> &[Pool] {
        &self.pools
    }

    /// Sets the key at dotted `path` (for example `batcher.max_batch_size` or `instances`) to
    /// `value`, written as in TOML (`8`, `"5ms"`, `[4, 8]`); a value that is not valid TOML is
    /// taken as a string, so `5ms` works unquoted. The whole scenario is validated again.
    pub fn set(&mut self, path: &str, value: &str) -> Result<(), ScenarioError> {
        let override_err = |message: String| ScenarioError::Override {
            key: path.to_string(),
            value: value.to_string(),
            message,
        };
        let parsed = match toml::from_str::<toml::Table>(&format!("v = {value}")) {
            Ok(mut t) => t
                .remove("v")
                .unwrap_or(toml::Value::String(value.to_string())),
            Err(_) => toml::Value::String(value.to_string()),
        };
        let parts: Vec<&str> = path.split('.').collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(override_err("the key path has an empty part".to_string()));
        }
        let mut raw = self.raw.clone();
        let mut table = &mut raw;
        for part in &parts[..parts.len() - 1] {
            let entry = table
                .entry(part.to_string())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            table = entry
                .as_table_mut()
                .ok_or_else(|| override_err(format!("`{part}` is not a table")))?;
        }
        table.insert(parts[parts.len() - 1].to_string(), parsed);
        let mut next = Scenario::from_table(raw, self.origin.clone())
            .map_err(|e| override_err(e.to_string()))?;
        if self.raw.get("name").is_none() && path != "name" {
            next.name = self.name.clone();
        }
        *self = next;
        Ok(())
    }

    /// The value written at dotted `path` (the file as read, with overrides applied); `None`
    /// when the file does not set it (a default applies).
    pub fn get(&self, path: &str) -> Option<&toml::Value> {
        let (last, tables) = path
            .split('.')
            .collect::<Vec<_>>()
            .split_last()
            .map(|(l, t)| (*l, t.to_vec()))?;
        let mut table = &self.raw;
        for part in tables {
            table = table.get(part)?.as_table()?;
        }
        table.get(last)
    }

    /// The scenario as TOML (the file as read, with overrides applied).
    pub fn to_toml_string(&self) -> String {
        toml::to_string(&self.raw).unwrap_or_default()
    }
}

fn invalid(key: &str, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        key: key.to_string(),
        message: message.into(),
    }
}

fn validate_network(n: &NetworkSpec) -> Result<(), ScenarioError> {
    match &n.latency {
        Some(LatencySpec::Lognormal { median, p99 }) if p99.0 <= median.0 || median.0 == 0 => Err(
            invalid("network.latency.p99", "must exceed a median above 0"),
        ),
        Some(LatencySpec::Empirical { samples }) if samples.is_empty() => Err(invalid(
            "network.latency.samples",
            "needs at least one sample",
        )),
        _ => Ok(()),
    }
}

fn build_residuals(
    key: &str,
    ratios: &Option<Vec<f64>>,
) -> Result<Option<Residuals>, ScenarioError> {
    match ratios {
        None => Ok(None),
        Some(r) => Residuals::from_ratios(r)
            .map(Some)
            .ok_or_else(|| invalid(key, "needs at least one ratio, each finite and above 0")),
    }
}

/// The most servers (`instances` plus `standby.instances`, over all pools) a scenario may have:
/// each costs memory and, with load balancing that compares servers, time per request.
pub const MAX_SERVERS: u32 = 100_000;

/// The most model instances (servers times `gpus * instance_count`, over all pools).
pub const MAX_MODEL_INSTANCES: u64 = 1_000_000;

/// Checks the whole scenario's size against [`MAX_SERVERS`] and [`MAX_MODEL_INSTANCES`], before
/// anything is allocated for it.
fn check_size(pools: &[Pool]) -> Result<(), ScenarioError> {
    let servers = |p: &Pool| u64::from(p.instances) + u64::from(p.standby.instances);
    let total_servers: u64 = pools.iter().map(servers).sum();
    if total_servers > u64::from(MAX_SERVERS) {
        return Err(invalid(
            "instances",
            format!(
                "the pools have {total_servers} servers (instances plus standby instances) in all; at most {MAX_SERVERS} are simulated"
            ),
        ));
    }
    let model_instances: u64 = pools
        .iter()
        .map(|p| servers(p) * u64::from(p.execution.gpus) * u64::from(p.execution.instance_count))
        .sum();
    if model_instances > MAX_MODEL_INSTANCES {
        return Err(invalid(
            "execution",
            format!(
                "the pools have {model_instances} model instances (servers x gpus x instance_count) in all; at most {MAX_MODEL_INSTANCES} are simulated"
            ),
        ));
    }
    Ok(())
}

fn build_pool(
    name: &str,
    prefix: &str,
    p: PoolFile,
    base: Option<&Path>,
) -> Result<Pool, ScenarioError> {
    let key = |k: &str| format!("{prefix}{k}");
    if p.instances == 0 {
        return Err(invalid(&key("instances"), "must be at least 1"));
    }
    if p.standby.activate_at_outstanding == 0 {
        return Err(invalid(
            &key("standby.activate_at_outstanding"),
            "must be at least 1",
        ));
    }
    for (limit, value) in [
        ("max_input_tokens", p.max_input_tokens),
        ("max_output_tokens", p.max_output_tokens),
    ] {
        if value == Some(0) {
            return Err(invalid(
                &key(limit),
                "must be at least 1 token (omit it for no limit)",
            ));
        }
    }
    if p.instances > MAX_SERVERS {
        return Err(invalid(
            &key("instances"),
            format!("must be at most {MAX_SERVERS}"),
        ));
    }
    if u64::from(p.instances) + u64::from(p.standby.instances) > u64::from(MAX_SERVERS) {
        return Err(invalid(
            &key("standby.instances"),
            format!("instances plus standby instances must be at most {MAX_SERVERS}"),
        ));
    }
    if let Some(pre) = &p.preprocess
        && pre.workers == 0
    {
        return Err(invalid(
            &key("preprocess.workers"),
            "must be at least 1 (omit [preprocess] for none)",
        ));
    }
    if p.queue.priority_levels == 0 || p.queue.priority_levels > 64 {
        return Err(invalid(
            &key("queue.priority_levels"),
            "must be between 1 and 64",
        ));
    }
    if p.queue.timeout == Some(DurationNs(0)) {
        return Err(invalid(
            &key("queue.timeout"),
            "must be above 0 (omit it for no timeout)",
        ));
    }
    let mut batcher = p.batcher;
    let llm = match batcher.kind {
        BatcherKind::Dynamic => {
            if let Some(k) = batcher.continuous_keys().set_keys().next() {
                return Err(invalid(
                    &key(&format!("batcher.{k}")),
                    "is a continuous-batcher key: set `batcher.kind = \"continuous\"` or drop it",
                ));
            }
            for (table, set) in [
                ("kv_cache", p.kv_cache.is_some()),
                ("step_time", p.step_time.is_some()),
            ] {
                if set {
                    return Err(invalid(
                        &key(table),
                        format!(
                            "[{table}] belongs to a continuous batcher: set `batcher.kind = \"continuous\"` or drop it"
                        ),
                    ));
                }
            }
            None
        }
        BatcherKind::Continuous => {
            let dynamic_keys = [
                ("max_batch_size", batcher.max_batch_size != 1),
                (
                    "preferred_batch_size",
                    !batcher.preferred_batch_size.is_empty(),
                ),
                ("max_queue_delay", batcher.max_queue_delay.0 != 0),
                ("prefetch", batcher.prefetch.is_some()),
            ];
            if let Some((k, _)) = dynamic_keys.iter().find(|(_, set)| *set) {
                return Err(invalid(
                    &key(&format!("batcher.{k}")),
                    "is a dynamic-batcher key; a continuous batcher uses max_num_seqs and max_num_batched_tokens",
                ));
            }
            let step_time = match (&p.service, &p.step_time) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        &key("service"),
                        "a continuous batcher takes its time from [step_time]; drop [service]",
                    ));
                }
                (Some(_), None) => {
                    return Err(invalid(
                        &key("step_time"),
                        "is required with a continuous batcher (instead of [service]): for example `kind = \"roofline\"`, `model = \"llama-3-8b\"`, `hardware = \"h200\"`",
                    ));
                }
                (None, None) => {
                    return Err(invalid(
                        &key("step_time"),
                        "is required with a continuous batcher: for example `kind = \"roofline\"`, `model = \"llama-3-8b\"`, `hardware = \"h200\"`",
                    ));
                }
                (None, Some(st)) => st,
            };
            let slots = u64::from(p.execution.gpus) * u64::from(p.execution.instance_count);
            Some(build_llm_pool(
                prefix,
                &batcher.continuous_keys(),
                &p.kv_cache.clone().unwrap_or_default(),
                step_time,
                slots,
                p.queue.priority_levels,
                base,
            )?)
        }
    };
    if batcher.max_batch_size == 0 || batcher.max_batch_size > 65_536 {
        return Err(invalid(
            &key("batcher.max_batch_size"),
            "must be between 1 and 65536",
        ));
    }
    batcher.preferred_batch_size.sort_unstable();
    batcher.preferred_batch_size.dedup();
    if let Some(bad) = batcher
        .preferred_batch_size
        .iter()
        .find(|&&s| s == 0 || s > batcher.max_batch_size)
    {
        return Err(invalid(
            &key("batcher.preferred_batch_size"),
            format!(
                "{bad} is not between 1 and max_batch_size ({})",
                batcher.max_batch_size
            ),
        ));
    }
    let slots = u64::from(p.execution.gpus) * u64::from(p.execution.instance_count);
    if slots == 0 || slots > 4096 {
        return Err(invalid(
            &key("execution"),
            "gpus * instance_count must be between 1 and 4096",
        ));
    }
    let scale = p.execution.time_scale;
    if !(scale.is_finite() && scale > 0.0 && scale <= 1000.0) {
        return Err(invalid(
            &key("execution.time_scale"),
            format!("is {scale}; it must be above 0 and at most 1000 (1 leaves times as they are)"),
        ));
    }
    let llm = llm.map(|mut pool| {
        if scale != 1.0 {
            pool.step_time = Arc::new(ScaledStepTime::new(pool.step_time, scale));
        }
        pool
    });
    let service = match (&p.service, &llm) {
        (_, Some(_)) => None,
        (None, None) => {
            return Err(invalid(
                &key("service"),
                "is required: add a [service] table (for example `kind = \"constant\"`, `time = \"5ms\"`)",
            ));
        }
        (Some(spec), None) => {
            let service = build_service(&key, spec, base)?;
            if scale == 1.0 {
                Some(service)
            } else {
                let scaled = ScaledService::new(service, scale)
                    .ok_or_else(|| invalid(&key("execution.time_scale"), "must be above 0"))?;
                Some(Arc::new(scaled) as Arc<dyn ServiceTime>)
            }
        }
    };
    Ok(Pool {
        name: name.to_string(),
        models: p.models,
        classes: p.classes,
        instances: p.instances,
        max_input_tokens: p.max_input_tokens,
        max_output_tokens: p.max_output_tokens,
        standby: p.standby,
        preprocess: p.preprocess,
        queue: p.queue,
        batcher,
        execution: p.execution,
        service_spec: p.service.clone(),
        service,
        llm,
        postprocess: p.postprocess,
    })
}

fn build_service(
    key: &dyn Fn(&str) -> String,
    service_spec: &ServiceSpec,
    base: Option<&Path>,
) -> Result<Arc<dyn ServiceTime>, ScenarioError> {
    let service: Arc<dyn ServiceTime> = match service_spec {
        ServiceSpec::Constant { time, residuals } => Arc::new(ConstantService {
            time_ns: time.0,
            residuals: build_residuals(&key("service.residuals"), residuals)?,
        }),
        ServiceSpec::Exponential { mean } => {
            if mean.0 == 0 {
                return Err(invalid(&key("service.mean"), "must be above 0"));
            }
            Arc::new(ExponentialService {
                mean_ns: mean.0 as f64,
            })
        }
        ServiceSpec::Affine { a, b, c, residuals } => Arc::new(AffineService {
            a_ns: a.0 as f64,
            b_ns: b.0 as f64,
            c_ns: c.0 as f64,
            residuals: build_residuals(&key("service.residuals"), residuals)?,
        }),
        ServiceSpec::Profile { path } => {
            let path = base.map_or_else(|| path.clone(), |dir| dir.join(path));
            let model = ProfileServiceTime::from_file(&path)
                .map_err(|e| invalid(&key("service.path"), e.to_string()))?;
            Arc::new(model)
        }
    };
    Ok(service)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[service]\nkind = \"constant\"\ntime = \"5ms\"\n";

    #[test]
    fn minimal_scenario_gets_documented_defaults() {
        let s = Scenario::from_toml_str(MINIMAL).unwrap();
        let p = &s.pools()[0];
        assert_eq!(p.instances, 1);
        assert_eq!(p.batcher.max_batch_size, 1);
        assert_eq!(p.execution.gpus * p.execution.instance_count, 1);
        assert_eq!(p.queue, QueueSpec::default());
        assert_eq!(s.load.mode, LoadMode::Open);
        assert_eq!(s.timeseries.interval, DurationNs(1_000_000_000));
        assert_eq!(
            p.service.as_ref().expect("a dynamic pool").mean_ns(
                &crate::timing::service::BatchShape {
                    size: 1,
                    max_input_tokens: 1,
                    total_input_tokens: 1,
                    idle_ns: 0,
                }
            ),
            5e6
        );
    }

    #[test]
    fn unknown_key_is_rejected_naming_it() {
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\nmax_batchsize = 4\n"))
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("max_batchsize"), "{msg}");
        let err = Scenario::from_toml_str(&format!("instancez = 3\n{MINIMAL}")).unwrap_err();
        assert!(err.to_string().contains("instancez"), "{err}");
    }

    #[test]
    fn bad_duration_is_rejected_quoting_value_and_key() {
        let err = Scenario::from_toml_str(&format!(
            "{MINIMAL}[batcher]\nmax_queue_delay = \"5 fortnights\"\n"
        ))
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("\"5 fortnights\"") && msg.contains("max_queue_delay"),
            "{msg}"
        );
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\nmax_queue_delay = 5\n"))
            .unwrap_err();
        assert!(err.to_string().contains("has no unit"), "{err}");
    }

    #[test]
    fn out_of_range_values_name_the_key() {
        let err = Scenario::from_toml_str(&format!(
            "{MINIMAL}[batcher]\nmax_batch_size = 4\npreferred_batch_size = [2, 8]\n"
        ))
        .unwrap_err();
        assert!(
            err.to_string().contains("batcher.preferred_batch_size"),
            "{err}"
        );
        let err = Scenario::from_toml_str(&format!("instances = 0\n{MINIMAL}")).unwrap_err();
        assert!(err.to_string().contains("`instances`"), "{err}");
    }

    #[test]
    fn set_changes_one_key_by_dotted_path() {
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        s.set("instances", "4").unwrap();
        s.set("batcher.max_batch_size", "8").unwrap();
        s.set("batcher.max_queue_delay", "2ms").unwrap();
        s.set("gateway.load_balancing", "power_of_two").unwrap();
        s.set("batcher.preferred_batch_size", "[4, 8]").unwrap();
        assert_eq!(
            s.get("batcher.max_batch_size").and_then(|v| v.as_integer()),
            Some(8)
        );
        assert_eq!(s.get("batcher.no_such_key"), None);
        let p = &s.pools()[0];
        assert_eq!(p.instances, 4);
        assert_eq!(p.batcher.max_batch_size, 8);
        assert_eq!(p.batcher.max_queue_delay, DurationNs(2_000_000));
        assert_eq!(p.batcher.preferred_batch_size, vec![4, 8]);
        assert_eq!(s.gateway.load_balancing, LoadBalancing::PowerOfTwo);
        let err = s.set("batcher.max_batch", "8").unwrap_err();
        assert!(err.to_string().contains("batcher.max_batch"), "{err}");
        assert_eq!(
            s.pools()[0].batcher.max_batch_size,
            8,
            "a failed set leaves the scenario unchanged"
        );
    }

    const CONTINUOUS: &str = "[batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 1000\n[step_time]\nkind = \"linear\"\nbase = \"5ms\"\n";

    #[test]
    fn time_scale_multiplies_batch_and_step_times_and_bad_values_are_refused_naming_the_key() {
        use crate::rng::SimRng;
        use crate::timing::step_time::StepBatch;
        use rand::SeedableRng;
        let shape = crate::BatchShape {
            size: 1,
            max_input_tokens: 16,
            total_input_tokens: 16,
            idle_ns: 0,
        };
        let mut s = Scenario::from_toml_str(MINIMAL).unwrap();
        s.set("execution.time_scale", "1.2").unwrap();
        let service = s.pools()[0].service.as_ref().unwrap();
        let mut rng = SimRng::seed_from_u64(1);
        assert_eq!(service.sample_ns(&shape, &mut rng), 6_000_000, "5 ms x 1.2");
        assert_eq!(service.mean_ns(&shape), 6e6);

        let mut c = Scenario::from_toml_str(CONTINUOUS).unwrap();
        c.set("execution.time_scale", "0.5").unwrap();
        let step = StepBatch {
            decode_seqs: 1,
            ..StepBatch::default()
        };
        let llm = c.pools()[0].llm.as_ref().unwrap();
        assert_eq!(
            llm.step_time.sample_ns(&step, &mut rng),
            2_500_000,
            "5 ms x 0.5"
        );

        for bad in ["0", "-1", "1001", "nan"] {
            let err = s.set("execution.time_scale", bad).unwrap_err().to_string();
            assert!(err.contains("execution.time_scale"), "{bad}: {err}");
        }
    }

    #[test]
    fn continuous_keys_under_the_dynamic_batcher_are_rejected_naming_the_key() {
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\nmax_num_seqs = 8\n"))
            .unwrap_err();
        assert!(err.to_string().contains("batcher.max_num_seqs"), "{err}");
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[kv_cache]\nblock_size = 16\n"))
            .unwrap_err();
        assert!(err.to_string().contains("`kv_cache`"), "{err}");
    }

    #[test]
    fn continuous_pool_needs_step_time_instead_of_service() {
        let both = format!("{MINIMAL}{CONTINUOUS}");
        let err = Scenario::from_toml_str(&both).unwrap_err();
        assert!(err.to_string().contains("`service`"), "{err}");
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[batcher]\nkind = \"continuous\"\n"))
            .unwrap_err();
        assert!(err.to_string().contains("`step_time`"), "{err}");
        let err = Scenario::from_toml_str("[batcher]\nkind = \"continuous\"\n").unwrap_err();
        assert!(err.to_string().contains("`step_time`"), "{err}");
        let err = Scenario::from_toml_str(&format!(
            "{CONTINUOUS}[batcher]\nkind = \"continuous\"\nmax_batch_size = 4\n"
        ));
        assert!(err.is_err(), "a duplicate [batcher] table is a TOML error");
    }

    #[test]
    fn continuous_pool_without_kv_capacity_names_num_gpu_blocks() {
        let text =
            "[batcher]\nkind = \"continuous\"\n[step_time]\nkind = \"linear\"\nbase = \"5ms\"\n";
        let err = Scenario::from_toml_str(text).unwrap_err();
        assert!(err.to_string().contains("kv_cache.num_gpu_blocks"), "{err}");
    }

    #[test]
    fn continuous_pool_rejects_several_model_instances_and_dynamic_keys() {
        let err =
            Scenario::from_toml_str(&format!("{CONTINUOUS}[execution]\ngpus = 2\n")).unwrap_err();
        assert!(err.to_string().contains("`execution`"), "{err}");
        let text = CONTINUOUS.replace(
            "kind = \"continuous\"\n",
            "kind = \"continuous\"\nmax_queue_delay = \"1ms\"\n",
        );
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(err.to_string().contains("batcher.max_queue_delay"), "{err}");
        let text = CONTINUOUS.replace("[kv_cache]\n", "[kv_cache]\nprefix_block_tokens = 500\n");
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(
            err.to_string().contains("kv_cache.prefix_block_tokens"),
            "{err}"
        );
        let text = CONTINUOUS.replace(
            "kind = \"continuous\"\n",
            "kind = \"continuous\"\nscheduling = \"priority\"\n",
        );
        let err = Scenario::from_toml_str(&text).unwrap_err();
        assert!(err.to_string().contains("batcher.scheduling"), "{err}");
    }

    #[test]
    fn continuous_pool_gets_vllm_defaults_and_set_changes_its_keys() {
        let mut s = Scenario::from_toml_str(CONTINUOUS).unwrap();
        let pool = &s.pools()[0];
        assert!(pool.service.is_none());
        let c = &pool.llm.as_ref().expect("a continuous pool").scheduler;
        assert_eq!(
            (
                c.max_num_seqs,
                c.max_num_batched_tokens,
                c.enable_chunked_prefill
            ),
            (256, 8192, true)
        );
        assert_eq!(
            (c.block_size, c.num_gpu_blocks, c.prefix_block_tokens),
            (16, 1000, 512)
        );
        assert!(!c.enable_prefix_caching);
        s.set("batcher.max_num_seqs", "32").unwrap();
        s.set("batcher.step_overhead", "3ms").unwrap();
        s.set("kv_cache.enable_prefix_caching", "true").unwrap();
        s.set("kv_cache.num_gpu_blocks", "500").unwrap();
        let c = &s.pools()[0].llm.as_ref().unwrap().scheduler;
        assert_eq!(
            (c.max_num_seqs, c.step_overhead_ns, c.num_gpu_blocks),
            (32, 3_000_000, 500)
        );
        assert!(c.enable_prefix_caching);
    }

    #[test]
    fn roofline_step_time_sizes_the_kv_cache_from_gpu_memory() {
        let s = Scenario::from_toml_str(
            "[batcher]\nkind = \"continuous\"\n[step_time]\nkind = \"roofline\"\nmodel = \"llama-3-8b\"\nhardware = \"h200\"\n",
        )
        .unwrap();
        let llm = s.pools()[0].llm.as_ref().unwrap();
        let tokens = llm
            .step_time_spec
            .kv_capacity_tokens()
            .expect("roofline knows memory");
        assert_eq!(u64::from(llm.scheduler.num_gpu_blocks), tokens / 16);
        assert!(
            llm.scheduler.num_gpu_blocks > 10_000,
            "{}",
            llm.scheduler.num_gpu_blocks
        );
    }

    #[test]
    fn slo_needs_a_bound_and_token_bounds_need_a_continuous_pool() {
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[slo]\n")).unwrap_err();
        assert!(err.to_string().contains("`slo`"), "{err}");
        let err = Scenario::from_toml_str(&format!("{MINIMAL}[slo]\nttft = \"2s\"\n")).unwrap_err();
        assert!(err.to_string().contains("continuous"), "{err}");
        let s = Scenario::from_toml_str(&format!(
            "{CONTINUOUS}[slo]\nttft = \"2s\"\ntpot = \"100ms\"\n"
        ))
        .unwrap();
        let slo = s.slo.unwrap();
        assert_eq!(
            (slo.latency, slo.ttft, slo.tpot),
            (
                None,
                Some(DurationNs(2_000_000_000)),
                Some(DurationNs(100_000_000))
            )
        );
    }

    #[test]
    fn named_pools_are_parsed_after_the_default_pool() {
        let s = Scenario::from_toml_str(&format!(
            "{MINIMAL}[pools.large]\nmodels = [\"llama\"]\ninstances = 2\n[pools.large.service]\nkind = \"exponential\"\nmean = \"10ms\"\n"
        ))
        .unwrap();
        assert_eq!(s.pools().len(), 2);
        assert_eq!(s.pools()[1].name, "large");
        assert_eq!(s.pools()[1].models, vec!["llama".to_string()]);
    }
}
