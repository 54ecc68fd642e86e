//! The scenario keys of a continuous-batching pool, and their validation into a
//! [`SchedulerConfig`] plus a built step-time model.
//!
//! ```toml
//! [batcher]
//! kind = "continuous"
//! max_num_seqs = 256
//! max_num_batched_tokens = 8192
//! step_overhead = "3ms"
//! [kv_cache]
//! block_size = 16
//! enable_prefix_caching = true
//! [step_time]
//! kind = "roofline"
//! model = "llama-3-8b"
//! hardware = "h200"
//! ```

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;

use super::scheduler::{SchedulerConfig, Scheduling};
use crate::quantity::DurationNs;
use crate::scenario::ScenarioError;
use crate::timing::step_time::{StepTime, StepTimeSpec};

/// Which batcher a pool runs.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum BatcherKind {
    /// Triton's dynamic batcher: whole requests in batches (see [`crate::batcher`]).
    #[default]
    Dynamic,
    /// vLLM's iteration-level batcher (see [`super::scheduler`]).
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

/// A continuous-batching pool's settings, validated, with its step-time model built.
#[derive(Debug, Clone)]
pub struct LlmPool {
    /// The scheduler of each instance.
    pub scheduler: SchedulerConfig,
    /// Waiting-line order.
    pub scheduling: Scheduling,
    /// The step-time model as written.
    pub step_time_spec: StepTimeSpec,
    /// The step-time model, built.
    pub step_time: Arc<dyn StepTime>,
}

fn invalid(key: String, message: impl Into<String>) -> ScenarioError {
    ScenarioError::Invalid {
        key,
        message: message.into(),
    }
}

/// Validates a continuous pool's keys. `prefix` is the pool's key prefix (`""` or
/// `"pools.NAME."`), `model_instances` its `gpus * instance_count`, `priority_levels` its queue's,
/// and `base` the scenario file's folder.
pub fn build_llm_pool(
    prefix: &str,
    keys: &ContinuousKeys,
    kv_cache: &KvCacheSpec,
    step_time: &StepTimeSpec,
    model_instances: u64,
    priority_levels: u32,
    base: Option<&Path>,
) -> Result<LlmPool, ScenarioError> {
    let key = |k: &str| format!("{prefix}{k}");
    if model_instances != 1 {
        return Err(invalid(
            key("execution"),
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
            key("batcher.max_num_seqs"),
            format!("{max_num_seqs} is not between 1 and 65536"),
        ));
    }
    let max_num_batched_tokens = keys.max_num_batched_tokens.unwrap_or(8192);
    if max_num_batched_tokens == 0 {
        return Err(invalid(
            key("batcher.max_num_batched_tokens"),
            "must be at least 1",
        ));
    }
    let scheduling = keys.scheduling.unwrap_or_default();
    match (scheduling, priority_levels) {
        (Scheduling::Priority, 1) => {
            return Err(invalid(
                key("batcher.scheduling"),
                "\"priority\" orders the waiting line by request class through the instance \
                 queue: also set `queue.priority_levels` (2 to 64)",
            ));
        }
        (Scheduling::Fcfs, levels) if levels > 1 => {
            return Err(invalid(
                key("queue.priority_levels"),
                format!(
                    "{levels} levels with `batcher.scheduling = \"fcfs\"`: set \
                     `batcher.scheduling = \"priority\"` to order by class, or drop the levels"
                ),
            ));
        }
        _ => {}
    }
    let block_size = kv_cache.block_size;
    if !(1..=4096).contains(&block_size) {
        return Err(invalid(
            key("kv_cache.block_size"),
            format!("{block_size} is not between 1 and 4096"),
        ));
    }
    let prefix_block_tokens = kv_cache.prefix_block_tokens;
    if prefix_block_tokens == 0 || !prefix_block_tokens.is_multiple_of(block_size) {
        return Err(invalid(
            key("kv_cache.prefix_block_tokens"),
            format!(
                "{prefix_block_tokens} is not a positive multiple of block_size ({block_size})"
            ),
        ));
    }
    let num_gpu_blocks = match kv_cache.num_gpu_blocks {
        Some(0) => {
            return Err(invalid(
                key("kv_cache.num_gpu_blocks"),
                "must be at least 1",
            ));
        }
        Some(n) => n,
        None => match step_time.kv_capacity_tokens() {
            Some(tokens) => {
                let blocks = tokens / u64::from(block_size);
                if blocks == 0 {
                    return Err(invalid(
                        key("kv_cache.num_gpu_blocks"),
                        "the step-time model's GPU memory leaves no room for one KV block after \
                         the weights: use a larger GPU, more tensor_parallel, or set \
                         `kv_cache.num_gpu_blocks`",
                    ));
                }
                u32::try_from(blocks).unwrap_or(u32::MAX)
            }
            None => {
                return Err(invalid(
                    key("kv_cache.num_gpu_blocks"),
                    "is needed: this `step_time` does not know the GPU memory and the model, so \
                     the KV capacity cannot be derived; set `kv_cache.num_gpu_blocks` (blocks \
                     of block_size tokens per instance) or use `step_time.kind = \"roofline\"`",
                ));
            }
        },
    };
    let dir = base.unwrap_or_else(|| Path::new("."));
    let model = step_time
        .build(dir)
        .map_err(|e| invalid(key("step_time"), e.to_string()))?;
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
        },
        scheduling,
        step_time_spec: step_time.clone(),
        step_time: model,
    })
}
