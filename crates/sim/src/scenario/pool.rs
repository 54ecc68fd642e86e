//! One pool of instances: its tables validated, each key checked against the others.

use std::sync::Arc;

use crate::llm::scheduler::{SchedulerConfig, Scheduling};
use crate::timing::service::Residuals;
use crate::timing::slowdown::{Pauses, SlowdownWindow, Slowdowns, SpeedProcess};
use crate::timing::step_spec::StepTimeSpec;
use crate::timing::step_spread::{CudaGraphs, StepResiduals};

use super::file::{BatcherKind, ContinuousKeys, KvCacheSpec, PoolFile};
use super::replay::ReplayInputs;
use super::{
    BatcherSpec, DurationNs, ExecutionSpec, HostSpec, PostprocessSpec, PreprocessSpec, QueueSpec,
    ScenarioError, ServiceSpec, StandbySpec, invalid,
};

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
    /// The host CPU of each instance, if modelled: its cores run every request's CPU work, the
    /// pre- and post-processing included (a dynamic-batcher pool only).
    pub host: Option<HostSpec>,
    /// Queue policy.
    pub queue: QueueSpec,
    /// Dynamic batcher, with `preferred_batch_size` sorted ascending.
    pub batcher: BatcherSpec,
    /// Execution resources.
    pub execution: ExecutionSpec,
    /// The replay inputs given with [`super::Scenario::set_replay`] (none by default): timings
    /// measured from the run being replayed, never written in a scenario file.
    pub replay: ReplayInputs,
    /// `replay.slowdowns`, validated, or else the speed process of `execution.speed_levels`.
    pub slowdowns: Slowdowns,
    /// `replay.pauses`, validated.
    pub pauses: Pauses,
    /// The service-time model as written (dynamic batcher; `None` with a continuous batcher).
    pub service_spec: Option<ServiceSpec>,
    /// The continuous batcher's settings and step-time model as written, when `batcher.kind` is
    /// `continuous`.
    pub llm: Option<LlmPool>,
    /// Post-processing.
    pub postprocess: PostprocessSpec,
}

/// A continuous-batching pool's settings, validated (its step-time model is built by
/// [`crate::build`]).
#[derive(Debug, Clone)]
pub struct LlmPool {
    /// The scheduler of each instance.
    pub scheduler: SchedulerConfig,
    /// Waiting-line order.
    pub scheduling: Scheduling,
    /// The step-time model as written.
    pub step_time_spec: StepTimeSpec,
    /// Whether the build step derives `scheduler.num_gpu_blocks` (0 until then) from the model
    /// config file the step time names: true when `kv_cache.num_gpu_blocks` is not given and
    /// `step_time.model` is a path.
    pub num_gpu_blocks_from_model: bool,
    /// Steps the engine schedules ahead of the running one (`batcher.schedule_ahead_steps`):
    /// a request that joins during a step waits this many more step boundaries, unless the
    /// engine would otherwise go idle.
    pub schedule_ahead_steps: u32,
    /// The CUDA graphs each step is padded to for its time (`batcher.cuda_graph_sizes`).
    pub cuda_graphs: Arc<CudaGraphs>,
    /// The measured spread of the step time (`batcher.step_residuals`); `None`: none.
    pub step_residuals: Option<Arc<StepResiduals>>,
}

/// KV blocks of `block_size` tokens in `tokens` of KV capacity; an error at `key` when not even
/// one fits.
pub(crate) fn kv_blocks_of(key: &str, tokens: u64, block_size: u32) -> Result<u32, ScenarioError> {
    let blocks = tokens / u64::from(block_size);
    if blocks == 0 {
        return Err(invalid(
            key,
            "the step-time model's GPU memory leaves no room for one KV block after the weights: \
             use a larger GPU, more tensor_parallel, or set `kv_cache.num_gpu_blocks`",
        ));
    }
    Ok(u32::try_from(blocks).unwrap_or(u32::MAX))
}

/// The residual factors written at `key`, validated.
pub(crate) fn residuals_of(
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

/// The affine service's levels per batch size (`service.size_factors`): empty without any;
/// each given one must be finite and above 0, and there must be at least one.
pub(crate) fn size_factors_of(
    key: &str,
    factors: &Option<Vec<f64>>,
) -> Result<Vec<f64>, ScenarioError> {
    match factors {
        None => Ok(Vec::new()),
        Some(f) if f.is_empty() => Err(invalid(
            key,
            "is empty; list each batch size's level from size 1, or leave the key out",
        )),
        Some(f) => match f.iter().position(|x| !(x.is_finite() && *x > 0.0)) {
            Some(i) => Err(invalid(
                key,
                format!(
                    "entry {} (batch size {}) is {}; each level must be finite and above 0",
                    i,
                    i + 1,
                    f[i]
                ),
            )),
            None => Ok(f.clone()),
        },
    }
}

/// Checks the replay inputs `inputs` against `pool` and stores them, validated, in it. Errors
/// name the input as `replay.KEY`; on error the pool is unchanged (it is written only after
/// every check).
pub(super) fn apply_replay(pool: &mut Pool, inputs: &ReplayInputs) -> Result<(), ScenarioError> {
    let key = |k: &str| format!("replay.{k}");
    if pool.llm.is_some() {
        let dynamic_only = [
            ("dispatch_residuals", inputs.dispatch_residuals.is_some()),
            (
                "release_latency_per_request",
                inputs.release_latency_per_request.0 != 0,
            ),
            ("thread_first_fraction", inputs.thread_first_fraction != 0.0),
            ("pauses", !inputs.pauses.is_empty()),
        ];
        if let Some((k, _)) = dynamic_only.iter().find(|(_, set)| *set) {
            return Err(invalid(
                &key(k),
                "is a dynamic batcher's; this pool's batcher is continuous (it takes `slowdowns`)",
            ));
        }
    }
    let fraction = inputs.thread_first_fraction;
    if !(0.0..=1.0).contains(&fraction) {
        return Err(invalid(
            &key("thread_first_fraction"),
            format!("is {fraction}; it must be between 0 (the instance first) and 1"),
        ));
    }
    residuals_of(&key("dispatch_residuals"), &inputs.dispatch_residuals)?;
    if inputs.dispatch_residuals.is_some() && pool.batcher.dispatch_latency.0 == 0 {
        return Err(invalid(
            &key("dispatch_residuals"),
            "spread `batcher.dispatch_latency`, which is 0: set it in the scenario (the mean dispatch) or drop the residuals",
        ));
    }
    let windows: Vec<SlowdownWindow> = inputs
        .slowdowns
        .iter()
        .map(|w| SlowdownWindow {
            from_ns: w.from.0,
            to_ns: w.to.0,
            factor: w.factor,
        })
        .collect();
    let slowdowns = Slowdowns::new(&windows)
        .map_err(|e| invalid(&key(&format!("slowdowns[{}]", e.index)), e.message))?;
    let spans: Vec<(u64, u64)> = inputs.pauses.iter().map(|w| (w.from.0, w.to.0)).collect();
    let pauses = Pauses::new(&spans)
        .map_err(|e| invalid(&key(&format!("pauses[{}]", e.index)), e.message))?;
    pool.replay = inputs.clone();
    // A run's measured windows are its speed: they stand for the scenario's modelled one
    // (`execution.speed_levels`), which stays where the replay gives none.
    if !slowdowns.is_empty() || pool.slowdowns.process().is_none() {
        pool.slowdowns = slowdowns;
    }
    pool.pauses = pauses;
    Ok(())
}

/// The default speed window of `execution.speed_levels`: the 2 s over which `capsim calibrate
/// --endpoint` reads the server's statistics.
pub const DEFAULT_SPEED_WINDOW_NS: u64 = 2_000_000_000;

/// `execution.speed_levels` and `speed_window` as a speed process; `None` without levels.
fn speed_process(
    key: &dyn Fn(&str) -> String,
    p: &PoolFile,
) -> Result<Option<SpeedProcess>, ScenarioError> {
    let Some(levels) = &p.execution.speed_levels else {
        if p.execution.speed_window.is_some() {
            return Err(invalid(
                &key("execution.speed_window"),
                "is the window of `execution.speed_levels`, which is not set: set both or neither",
            ));
        }
        return Ok(None);
    };
    let window_ns = p
        .execution
        .speed_window
        .map_or(DEFAULT_SPEED_WINDOW_NS, |w| w.0);
    SpeedProcess::new(levels, window_ns)
        .map(Some)
        .map_err(|message| invalid(&key("execution.speed_levels"), message))
}

/// The most servers (`instances` plus `standby.instances`, over all pools) a scenario may have:
/// each costs memory and, with load balancing that compares servers, time per request.
pub const MAX_SERVERS: u32 = 100_000;

/// The most model instances (servers times `gpus * instance_count`, over all pools).
pub const MAX_MODEL_INSTANCES: u64 = 1_000_000;

/// Checks the whole scenario's size against [`MAX_SERVERS`] and [`MAX_MODEL_INSTANCES`], before
/// anything is allocated for it.
pub(super) fn check_size(pools: &[Pool]) -> Result<(), ScenarioError> {
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

/// Validates one pool's tables. `prefix` is the pool's key prefix (`""` or `"pools.NAME."`).
pub(super) fn validate_pool(name: &str, prefix: &str, p: PoolFile) -> Result<Pool, ScenarioError> {
    let key = |k: &str| format!("{prefix}{k}");
    check_pool_limits(&key, &p)?;
    let mut batcher = p.batcher.clone();
    let llm = match batcher.kind {
        BatcherKind::Dynamic => {
            refuse_continuous_keys(&key, &p)?;
            None
        }
        BatcherKind::Continuous => Some(continuous_pool(prefix, &key, &p)?),
    };
    check_batcher_and_execution(&key, &mut batcher, &p)?;
    let slowdowns = speed_process(&key, &p)?.map_or_else(Slowdowns::default, Slowdowns::varying);
    check_host(name, &key, &p, llm.is_some())?;
    match (&p.service, &llm) {
        (_, Some(_)) => {}
        (None, None) => {
            return Err(invalid(
                &key("service"),
                "is required: add a [service] table (for example `kind = \"constant\"`, `time = \"5ms\"`)",
            ));
        }
        (Some(spec), None) => validate_service(&key, spec)?,
    }
    Ok(Pool {
        name: name.to_string(),
        models: p.models,
        classes: p.classes,
        instances: p.instances,
        max_input_tokens: p.max_input_tokens,
        max_output_tokens: p.max_output_tokens,
        standby: p.standby,
        preprocess: p.preprocess,
        host: p.host,
        queue: p.queue,
        batcher,
        execution: p.execution,
        replay: ReplayInputs::default(),
        slowdowns,
        pauses: Pauses::default(),
        service_spec: if llm.is_some() { None } else { p.service },
        llm,
        postprocess: p.postprocess,
    })
}

/// Checks a pool's instance counts, token limits, pre-processing workers and queue.
fn check_pool_limits(key: &dyn Fn(&str) -> String, p: &PoolFile) -> Result<(), ScenarioError> {
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
        && pre.workers == Some(0)
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
    Ok(())
}

/// Checks pool `name`'s `[host]`: at least one core, no `preprocess.workers` beside it (the
/// cores run the pre-processing), and a dynamic batcher (`continuous` is false).
fn check_host(
    name: &str,
    key: &dyn Fn(&str) -> String,
    p: &PoolFile,
    continuous: bool,
) -> Result<(), ScenarioError> {
    let Some(host) = &p.host else {
        return Ok(());
    };
    if continuous {
        return Err(invalid(
            &key("host"),
            format!(
                "pool `{name}` batches continuously, and [host] is modelled for dynamic-batcher \
                 pools only (a streamed response's per-token post-processing does not run on the \
                 host's cores yet): drop [host] from this pool"
            ),
        ));
    }
    if host.cores == 0 {
        return Err(invalid(
            &key("host.cores"),
            "is required and must be at least 1: the CPU cores of each instance's host that \
             the serving path's per-request work shares (for example `cores = 4`); omit [host] \
             to leave the host's CPU out",
        ));
    }
    if host.compute_cores > host.cores {
        return Err(invalid(
            &key("host.compute_cores"),
            format!(
                "is {} but the host has {} core{}: a model instance's compute keeps at most \
                 every core busy; set it to the threads the model computes on (at most `{}`)",
                host.compute_cores,
                host.cores,
                if host.cores == 1 { "" } else { "s" },
                key("host.cores")
            ),
        ));
    }
    if p.preprocess
        .as_ref()
        .is_some_and(|pre| pre.workers.is_some())
    {
        return Err(invalid(
            &key("preprocess.workers"),
            format!(
                "is set beside [host]: pre-processing runs on the host's cores, and \
                 `{}` ({}) is the limit; drop `preprocess.workers`",
                key("host.cores"),
                host.cores
            ),
        ));
    }
    Ok(())
}

/// Refuses, for a dynamic batcher, the keys and tables that belong to a continuous one.
fn refuse_continuous_keys(key: &dyn Fn(&str) -> String, p: &PoolFile) -> Result<(), ScenarioError> {
    let batcher = &p.batcher;
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
    Ok(())
}

/// A continuous pool's settings, after refusing the dynamic batcher's keys and requiring
/// `[step_time]` instead of `[service]`.
fn continuous_pool(
    prefix: &str,
    key: &dyn Fn(&str) -> String,
    p: &PoolFile,
) -> Result<LlmPool, ScenarioError> {
    let batcher = &p.batcher;
    let dynamic_keys = [
        ("max_batch_size", batcher.max_batch_size != 1),
        (
            "preferred_batch_size",
            !batcher.preferred_batch_size.is_empty(),
        ),
        ("max_queue_delay", batcher.max_queue_delay.0 != 0),
        ("prefetch", batcher.prefetch.is_some()),
        ("dispatch_latency", batcher.dispatch_latency.0 != 0),
        ("release_latency", batcher.release_latency.0 != 0),
        ("missed_release", batcher.missed_release != 0.0),
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
    validate_llm_pool(
        prefix,
        &batcher.continuous_keys(),
        &p.kv_cache.clone().unwrap_or_default(),
        step_time,
        slots,
        p.queue.priority_levels,
    )
}

/// Checks the batcher's batch sizes (sorting and deduplicating the preferred ones) and the
/// execution's slots and time scale.
fn check_batcher_and_execution(
    key: &dyn Fn(&str) -> String,
    batcher: &mut BatcherSpec,
    p: &PoolFile,
) -> Result<(), ScenarioError> {
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
    let missed = batcher.missed_release;
    if !(0.0..=1.0).contains(&missed) {
        return Err(invalid(
            &key("batcher.missed_release"),
            format!("is {missed}; it must be between 0 (no wake-up missed) and 1"),
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
    Ok(())
}

/// Checks a service model's values; a `profile` is checked when its file is read, by the build
/// step.
fn validate_service(key: &dyn Fn(&str) -> String, spec: &ServiceSpec) -> Result<(), ScenarioError> {
    match spec {
        ServiceSpec::Constant { residuals, .. } => {
            residuals_of(&key("service.residuals"), residuals).map(|_| ())
        }
        ServiceSpec::Affine {
            residuals,
            size_factors,
            ..
        } => {
            size_factors_of(&key("service.size_factors"), size_factors)?;
            residuals_of(&key("service.residuals"), residuals).map(|_| ())
        }
        ServiceSpec::Exponential { mean } if mean.0 == 0 => {
            Err(invalid(&key("service.mean"), "must be above 0"))
        }
        ServiceSpec::Exponential { .. } | ServiceSpec::Profile { .. } => Ok(()),
    }
}

/// The most steps a continuous batcher may schedule ahead (a pipeline of 16 stages).
const MAX_SCHEDULE_AHEAD_STEPS: u32 = 16;

/// Validates a continuous pool's keys. `prefix` is the pool's key prefix (`""` or
/// `"pools.NAME."`), `model_instances` its `gpus * instance_count`, `priority_levels` its queue's.
fn validate_llm_pool(
    prefix: &str,
    keys: &ContinuousKeys,
    kv_cache: &KvCacheSpec,
    step_time: &StepTimeSpec,
    model_instances: u64,
    priority_levels: u32,
) -> Result<LlmPool, ScenarioError> {
    let key = |k: &str| format!("{prefix}{k}");
    if model_instances != 1 {
        return Err(invalid(
            &key("execution"),
            format!(
                "a continuous batcher runs one model replica per instance (vLLM's engine), but \
                 gpus * instance_count is {model_instances}; use `instances` for more replicas \
                 and `step_time.tensor_parallel` for GPUs per replica"
            ),
        ));
    }
    let max_num_seqs = keys.max_num_seqs.unwrap_or(256);
    if !(1..=65_536).contains(&max_num_seqs) {
        return Err(invalid(
            &key("batcher.max_num_seqs"),
            format!("{max_num_seqs} is not between 1 and 65536"),
        ));
    }
    let max_num_batched_tokens = keys.max_num_batched_tokens.unwrap_or(8192);
    if max_num_batched_tokens == 0 {
        return Err(invalid(
            &key("batcher.max_num_batched_tokens"),
            "must be at least 1",
        ));
    }
    let schedule_ahead_steps = keys.schedule_ahead_steps.unwrap_or(1);
    if schedule_ahead_steps > MAX_SCHEDULE_AHEAD_STEPS {
        return Err(invalid(
            &key("batcher.schedule_ahead_steps"),
            format!(
                "{schedule_ahead_steps} is above {MAX_SCHEDULE_AHEAD_STEPS}: vLLM schedules at \
                 most one step ahead per pipeline stage (1 with async scheduling, 0 without)"
            ),
        ));
    }
    let scheduling = keys.scheduling.unwrap_or_default();
    check_scheduling(&key, scheduling, priority_levels)?;
    check_block_sizes(&key, kv_cache)?;
    let (block_size, prefix_block_tokens) = (kv_cache.block_size, kv_cache.prefix_block_tokens);
    // A `profile` step time is checked when its file is read, by the build step; so is a
    // roofline's model config file.
    step_time
        .analytic()
        .map_err(|e| invalid(&key("step_time"), e.to_string()))?;
    let num_gpu_blocks_from_model =
        kv_cache.num_gpu_blocks.is_none() && step_time.kv_sizing_model_file().is_some();
    let num_gpu_blocks = num_gpu_blocks_of(
        &key("kv_cache.num_gpu_blocks"),
        kv_cache,
        step_time,
        block_size,
        num_gpu_blocks_from_model,
    )?;
    let cuda_graphs = cuda_graphs_of(
        &key("batcher.cuda_graph_sizes"),
        keys.cuda_graph_sizes.as_deref(),
        max_num_seqs,
        max_num_batched_tokens,
    )?;
    let step_residuals = step_residuals_of(
        &key("batcher.step_residuals"),
        keys.step_residuals.as_deref(),
    )?;
    Ok(LlmPool {
        scheduler: SchedulerConfig {
            max_num_seqs,
            max_num_batched_tokens,
            enable_chunked_prefill: keys.enable_chunked_prefill.unwrap_or(true),
            block_size,
            num_gpu_blocks,
            enable_prefix_caching: kv_cache.enable_prefix_caching,
            prefix_block_tokens,
            step_overhead_ns: keys.step_overhead.map_or(0, |d| d.0),
            step_overhead_per_seq_ns: keys.step_overhead_per_seq.map_or(0, |d| d.0),
            reserve_full_isl: keys.reserve_full_isl.unwrap_or(false),
        },
        scheduling,
        step_time_spec: step_time.clone(),
        num_gpu_blocks_from_model,
        schedule_ahead_steps,
        cuda_graphs: Arc::new(cuda_graphs),
        step_residuals,
    })
}

/// Checks the KV cache's block size, and that a prefix block is a whole number of blocks.
fn check_block_sizes(
    key: &dyn Fn(&str) -> String,
    kv_cache: &KvCacheSpec,
) -> Result<(), ScenarioError> {
    let block_size = kv_cache.block_size;
    if !(1..=4096).contains(&block_size) {
        return Err(invalid(
            &key("kv_cache.block_size"),
            format!("{block_size} is not between 1 and 4096"),
        ));
    }
    let prefix_block_tokens = kv_cache.prefix_block_tokens;
    if prefix_block_tokens == 0 || !prefix_block_tokens.is_multiple_of(block_size) {
        return Err(invalid(
            &key("kv_cache.prefix_block_tokens"),
            format!(
                "{prefix_block_tokens} is not a positive multiple of block_size ({block_size})"
            ),
        ));
    }
    Ok(())
}

/// Refuses a scheduling policy its queue's `priority_levels` cannot serve: priority without
/// levels, or first-come-first-served with them.
fn check_scheduling(
    key: &dyn Fn(&str) -> String,
    scheduling: Scheduling,
    priority_levels: u32,
) -> Result<(), ScenarioError> {
    match (scheduling, priority_levels) {
        (Scheduling::Priority, 1) => Err(invalid(
            &key("batcher.scheduling"),
            "\"priority\" orders the waiting line by request class through the instance \
             queue: also set `queue.priority_levels` (2 to 64)",
        )),
        (Scheduling::Fcfs, levels) if levels > 1 => Err(invalid(
            &key("queue.priority_levels"),
            format!(
                "{levels} levels with `batcher.scheduling = \"fcfs\"`: set \
                 `batcher.scheduling = \"priority\"` to order by class, or drop the levels"
            ),
        )),
        _ => Ok(()),
    }
}

/// The KV cache's blocks per instance, written at `key`: as set; 0 when the build step sizes
/// them from the model's config file (`from_model`); else from the step time's KV capacity.
fn num_gpu_blocks_of(
    key: &str,
    kv_cache: &KvCacheSpec,
    step_time: &StepTimeSpec,
    block_size: u32,
    from_model: bool,
) -> Result<u32, ScenarioError> {
    match kv_cache.num_gpu_blocks {
        Some(0) => Err(invalid(key, "must be at least 1")),
        Some(n) => Ok(n),
        None if from_model => Ok(0),
        None => match step_time.kv_capacity_tokens() {
            Some(tokens) => kv_blocks_of(key, tokens, block_size),
            None => Err(invalid(
                key,
                "is needed: this `step_time` does not know the GPU memory and the model, so \
                 the KV capacity cannot be derived; set `kv_cache.num_gpu_blocks` (blocks \
                 of block_size tokens per instance) or use `step_time.kind = \"roofline\"`",
            )),
        },
    }
}

/// The CUDA graphs written at `key` (`None`: vLLM's default for the limits), validated.
fn cuda_graphs_of(
    key: &str,
    sizes: Option<&[u32]>,
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
) -> Result<CudaGraphs, ScenarioError> {
    let Some(sizes) = sizes else {
        return Ok(CudaGraphs::vllm_default(
            max_num_seqs,
            max_num_batched_tokens,
        ));
    };
    if sizes.first() == Some(&0) {
        return Err(invalid(
            key,
            "holds 0: captured sizes are token counts of at least 1 (`[]` runs every step eagerly)",
        ));
    }
    if let Some(w) = sizes.windows(2).find(|w| w[0] >= w[1]) {
        return Err(invalid(
            key,
            format!(
                "must be strictly increasing, but {} is followed by {}: list each captured size once, smallest first",
                w[0], w[1]
            ),
        ));
    }
    Ok(CudaGraphs::new(sizes.to_vec(), max_num_seqs))
}

/// The step-time factors written at `key`, validated.
fn step_residuals_of(
    key: &str,
    factors: Option<&[f64]>,
) -> Result<Option<Arc<StepResiduals>>, ScenarioError> {
    match factors {
        None => Ok(None),
        Some(f) => StepResiduals::new(f).map(|r| Some(Arc::new(r))).ok_or_else(|| {
            invalid(
                key,
                "needs at least one factor, each finite and above 0 (a step's measured GPU time over the model's)",
            )
        }),
    }
}
