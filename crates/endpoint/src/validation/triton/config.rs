//! The model's configuration as Triton serves it (`GET /v2/models/NAME/config`): the dynamic
//! batcher's settings, its queue and the instance groups, and where a scenario's pool differs
//! from them.

use serde::Deserialize;

use capsim_sim::scenario::{Pool, QueueSpec, TimeoutAction};

use super::get;
use crate::EndpointError;

/// The part of a model's configuration that the simulation must match: the dynamic batcher's
/// settings and how many model instances run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatcherConfig {
    /// `max_batch_size` (0: the model does not batch).
    pub max_batch_size: u32,
    /// `dynamic_batching.preferred_batch_size` (empty when unset).
    pub preferred_batch_size: Vec<u32>,
    /// `dynamic_batching.max_queue_delay_microseconds`, in nanoseconds; `None` without dynamic
    /// batching.
    pub max_queue_delay_ns: Option<u64>,
    /// Model instances: the instance groups' counts summed.
    pub instances: u32,
    /// The dynamic batcher's queue (the default when there is no dynamic batching).
    pub queue: ServerQueue,
}

/// Triton's queue: `dynamic_batching.priority_levels` and `default_queue_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ServerQueue {
    /// Priority levels (0 and 1 both mean one queue).
    pub priority_levels: u32,
    /// Requests the queue holds before rejecting new ones; 0 is unbounded.
    pub max_queue_size: u32,
    /// `default_timeout_microseconds`, in nanoseconds; 0 is none.
    pub timeout_ns: u64,
    /// `timeout_action = DELAY` (else REJECT).
    pub timeout_delays: bool,
    /// Requests may set their own timeout (`allow_timeout_override`).
    pub timeout_override: bool,
}

impl ServerQueue {
    /// Whether Triton forms payloads ahead of a free model instance with this queue: only
    /// without a policy, as capsim's [`QueueSpec::allows_prefetch`](capsim_sim::scenario::QueueSpec::allows_prefetch).
    pub fn allows_prefetch(&self) -> bool {
        self.timeout_ns == 0
            && !self.timeout_override
            && self.max_queue_size == 0
            && self.priority_levels <= 1
    }
}

/// `name` and `max_batch_size` are always in Triton's answer: requiring them tells another
/// server's JSON from it.
#[derive(Deserialize)]
struct ConfigResponse {
    #[serde(rename = "name")]
    _name: String,
    max_batch_size: u32,
    #[serde(default)]
    dynamic_batching: Option<DynamicBatching>,
    #[serde(default)]
    instance_group: Vec<InstanceGroup>,
}

#[derive(Deserialize)]
struct DynamicBatching {
    #[serde(default)]
    preferred_batch_size: Vec<u32>,
    #[serde(default)]
    max_queue_delay_microseconds: u64,
    #[serde(default)]
    priority_levels: u32,
    #[serde(default)]
    default_queue_policy: QueuePolicy,
}

#[derive(Deserialize, Default)]
struct QueuePolicy {
    #[serde(default)]
    timeout_action: String,
    #[serde(default)]
    default_timeout_microseconds: u64,
    #[serde(default)]
    allow_timeout_override: bool,
    #[serde(default)]
    max_queue_size: u32,
}

#[derive(Deserialize)]
struct InstanceGroup {
    #[serde(default)]
    count: u32,
    #[serde(default)]
    gpus: Vec<u32>,
}

impl BatcherConfig {
    /// Parses the JSON of `GET /v2/models/NAME/config`; `url` names it in errors. A GPU
    /// instance group listing GPUs runs `count` instances on each.
    pub fn parse(json: &[u8], url: &str) -> Result<BatcherConfig, EndpointError> {
        let config: ConfigResponse =
            serde_json::from_slice(json).map_err(|e| EndpointError::Protocol {
                url: url.to_string(),
                message: format!("the model configuration is not Triton's JSON ({e})"),
            })?;
        let instances = config
            .instance_group
            .iter()
            .map(|g| g.count * (g.gpus.len() as u32).max(1))
            .sum::<u32>()
            .max(1);
        Ok(BatcherConfig {
            max_batch_size: config.max_batch_size,
            preferred_batch_size: config
                .dynamic_batching
                .as_ref()
                .map(|d| d.preferred_batch_size.clone())
                .unwrap_or_default(),
            max_queue_delay_ns: config
                .dynamic_batching
                .as_ref()
                .map(|d| d.max_queue_delay_microseconds * 1_000),
            instances,
            queue: config
                .dynamic_batching
                .as_ref()
                .map(|d| {
                    let policy = &d.default_queue_policy;
                    ServerQueue {
                        priority_levels: d.priority_levels,
                        max_queue_size: policy.max_queue_size,
                        timeout_ns: policy.default_timeout_microseconds.saturating_mul(1_000),
                        timeout_delays: policy.timeout_action.eq_ignore_ascii_case("DELAY"),
                        timeout_override: policy.allow_timeout_override,
                    }
                })
                .unwrap_or_default(),
        })
    }
}

impl BatcherConfig {
    /// Where `pool` (the scenario's default pool, as simulated) differs from this server's
    /// batcher, one sentence each: model instances (the scenario's instances x GPUs x
    /// instance count), `max_batch_size`, `preferred_batch_size`, `max_queue_delay`, the queue
    /// (priority levels, `max_queue_size`, `timeout`, `timeout_action`) and, when those decide it
    /// differently, whether batches are formed ahead of a free model instance. Empty when they
    /// agree.
    pub fn differences(&self, pool: &Pool) -> Vec<String> {
        let mut out = Vec::new();
        let simulated = pool.instances * pool.execution.gpus * pool.execution.instance_count;
        if simulated != self.instances {
            out.push(format!(
                "the scenario simulates {simulated} model instances (instances {} x gpus {} x \
                 instance_count {}) where the server runs {} (its instance_group)",
                pool.instances, pool.execution.gpus, pool.execution.instance_count, self.instances
            ));
        }
        let batcher = &pool.batcher;
        if batcher.max_batch_size != self.max_batch_size.max(1) {
            out.push(format!(
                "the scenario's max_batch_size is {} where the server's is {}",
                batcher.max_batch_size, self.max_batch_size
            ));
        }
        if batcher.preferred_batch_size != self.preferred_batch_size {
            out.push(format!(
                "the scenario's preferred_batch_size is {:?} where the server's is {:?}",
                batcher.preferred_batch_size, self.preferred_batch_size
            ));
        }
        let delay_ns = self.max_queue_delay_ns.unwrap_or(0);
        // Triton's setting is in whole microseconds.
        if batcher.max_queue_delay.0.abs_diff(delay_ns) >= 1_000 {
            out.push(format!(
                "the scenario's max_queue_delay is {} us where the server's is {} us",
                batcher.max_queue_delay.0 as f64 / 1e3,
                delay_ns as f64 / 1e3
            ));
        }
        out.extend(self.queue_differences(&pool.queue));
        out
    }

    fn queue_differences(&self, queue: &QueueSpec) -> Vec<String> {
        let server = &self.queue;
        let mut out = Vec::new();
        if queue.priority_levels != server.priority_levels.max(1) {
            out.push(format!(
                "the scenario's queue.priority_levels is {} where the server's is {}",
                queue.priority_levels,
                server.priority_levels.max(1)
            ));
        }
        if queue.max_queue_size != server.max_queue_size {
            out.push(format!(
                "the scenario's queue.max_queue_size is {} where the server's is {} (0: unbounded)",
                queue.max_queue_size, server.max_queue_size
            ));
        }
        let timeout_ns = queue.timeout.map_or(0, |t| t.0);
        if timeout_ns.abs_diff(server.timeout_ns) >= 1_000 {
            out.push(format!(
                "the scenario's queue.timeout is {} us where the server's default_timeout_microseconds is {} (0: none)",
                timeout_ns as f64 / 1e3,
                server.timeout_ns / 1_000
            ));
        } else if timeout_ns > 0
            && (queue.timeout_action == TimeoutAction::Delay) != server.timeout_delays
        {
            out.push(format!(
                "the scenario's queue.timeout_action is {} where the server's is {}",
                if queue.timeout_action == TimeoutAction::Delay {
                    "delay"
                } else {
                    "reject"
                },
                if server.timeout_delays {
                    "DELAY"
                } else {
                    "REJECT"
                }
            ));
        }
        if queue.allows_prefetch() != server.allows_prefetch() {
            let (ahead, at_free) = (
                "forms batches ahead of a free model instance",
                "forms a batch only when a model instance is free",
            );
            let (scenario, server_does) = if queue.allows_prefetch() {
                (ahead, at_free)
            } else {
                (at_free, ahead)
            };
            out.push(format!(
                "so the simulation {scenario} where the server {server_does} (Triton prefetches only when its queue has no policy: no timeout, no max_queue_size, one priority level)"
            ));
        }
        out
    }
}

/// Reads the model's batcher configuration from the server at `base_url`; errors as
/// [`model_stats`](super::model_stats).
pub fn batcher_config(base_url: &str, model: &str) -> Result<BatcherConfig, EndpointError> {
    let (url, body) = get(
        base_url,
        &format!("/v2/models/{model}/config"),
        "configuration",
    )?;
    BatcherConfig::parse(&body, &url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_gives_the_batcher_and_the_instance_count() {
        let json = br#"{"name":"fixed","max_batch_size":8,
            "dynamic_batching":{"preferred_batch_size":[4,8],"max_queue_delay_microseconds":2000},
            "instance_group":[{"name":"a","kind":"KIND_CPU","count":2,"gpus":[]},
                              {"name":"b","kind":"KIND_GPU","count":1,"gpus":[0,1]}]}"#;
        let config = BatcherConfig::parse(json, "u").unwrap();
        assert_eq!(
            config,
            BatcherConfig {
                max_batch_size: 8,
                preferred_batch_size: vec![4, 8],
                max_queue_delay_ns: Some(2_000_000),
                instances: 4,
                queue: ServerQueue::default(),
            }
        );
        let policy = br#"{"name":"m","max_batch_size":8,"dynamic_batching":{
            "priority_levels":0,"default_queue_policy":{"timeout_action":"DELAY",
            "default_timeout_microseconds":500000,"allow_timeout_override":false,
            "max_queue_size":512}}}"#;
        let queue = BatcherConfig::parse(policy, "u").unwrap().queue;
        assert_eq!(
            queue,
            ServerQueue {
                priority_levels: 0,
                max_queue_size: 512,
                timeout_ns: 500_000_000,
                timeout_delays: true,
                timeout_override: false,
            }
        );
        assert!(!queue.allows_prefetch());
        let plain = BatcherConfig::parse(br#"{"name":"m","max_batch_size":0}"#, "u").unwrap();
        assert_eq!((plain.max_queue_delay_ns, plain.instances), (None, 1));
        let other = BatcherConfig::parse(br#"{"outputs":[]}"#, "u").unwrap_err();
        assert!(other.to_string().contains("not Triton's JSON"), "{other}");
    }

    #[test]
    fn a_scenario_that_differs_from_the_servers_batcher_is_named_key_by_key() {
        let config = BatcherConfig {
            max_batch_size: 8,
            preferred_batch_size: vec![4, 8],
            max_queue_delay_ns: Some(2_000_000),
            instances: 2,
            queue: ServerQueue::default(),
        };
        let scenario = |text: &str| capsim_sim::Scenario::from_toml_str(text).unwrap();
        let same = scenario(
            "[batcher]\nmax_batch_size = 8\npreferred_batch_size = [4, 8]\n\
             max_queue_delay = \"2ms\"\n[execution]\ninstance_count = 2\n\
             [service]\nkind = \"affine\"\na = \"1ms\"\n",
        );
        assert!(config.differences(&same.pools()[0]).is_empty());
        let other = scenario(
            "instances = 2\n[batcher]\nmax_batch_size = 16\nmax_queue_delay = \"5ms\"\n\
             [execution]\ninstance_count = 2\n[service]\nkind = \"affine\"\na = \"1ms\"\n",
        );
        let differences = config.differences(&other.pools()[0]);
        assert_eq!(differences.len(), 4, "{differences:?}");
        assert!(
            differences[0].contains("4 model instances"),
            "{differences:?}"
        );
        assert!(differences[0].contains("server runs 2"), "{differences:?}");
        assert!(differences[3].contains("5000 us"), "{differences:?}");
        // A queue policy the server lacks: named, and what it does to the batcher.
        let bounded = scenario(
            "[queue]\nmax_queue_size = 64\n[batcher]\nmax_batch_size = 8\n\
             preferred_batch_size = [4, 8]\nmax_queue_delay = \"2ms\"\n\
             [execution]\ninstance_count = 2\n[service]\nkind = \"affine\"\na = \"1ms\"\n",
        );
        let differences = config.differences(&bounded.pools()[0]);
        assert_eq!(differences.len(), 2, "{differences:?}");
        assert!(
            differences[0].contains("max_queue_size is 64 where the server's is 0"),
            "{differences:?}"
        );
        assert!(
            differences[1].contains("simulation forms a batch only when a model instance is free where the server forms batches ahead"),
            "{differences:?}"
        );
    }
}
