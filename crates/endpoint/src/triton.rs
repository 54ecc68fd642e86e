//! Triton's extensions to KServe v2 that `capsim validate --endpoint` reads: the model's
//! statistics (`GET /v2/models/NAME/stats`: counts and cumulative nanoseconds of queue and
//! compute time, per request and per batch size) and its configuration
//! (`GET /v2/models/NAME/config`: the dynamic batcher's settings and the instance groups).
//!
//! Triton's counters only grow, so what one run did is the difference of two snapshots taken
//! before and after it ([`ModelStats::since`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use hyper::Uri;
use serde::Deserialize;

use capsim_sim::scenario::{Pool, QueueSpec, TimeoutAction};
use capsim_sim::{Scenario, ScenarioError};

use crate::EndpointError;
use crate::http::HttpClient;
use crate::measured_service::BatchTime;

/// A count and the nanoseconds summed over it (Triton's `StatisticDuration`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct Duration {
    /// How many (requests or executions).
    #[serde(default)]
    pub count: u64,
    /// Their time summed, in nanoseconds.
    #[serde(default)]
    pub ns: u64,
}

impl Duration {
    /// The mean, in nanoseconds; `None` when the count is 0.
    pub fn mean_ns(&self) -> Option<f64> {
        (self.count > 0).then(|| self.ns as f64 / self.count as f64)
    }

    /// `self - earlier`, each field saturating at 0 (a server restarted in between starts
    /// again from 0).
    fn since(&self, earlier: &Duration) -> Duration {
        Duration {
            count: self.count.saturating_sub(earlier.count),
            ns: self.ns.saturating_sub(earlier.ns),
        }
    }
}

/// Per-request figures: every request counts once in each (a batch of 4 adds 4 to `queue`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct InferenceStats {
    /// Requests answered, with their time inside the server.
    #[serde(default)]
    pub success: Duration,
    /// Requests failed.
    #[serde(default)]
    pub fail: Duration,
    /// Time in the scheduler's queue, until the request's batch started.
    #[serde(default)]
    pub queue: Duration,
    /// Copying the inputs into the model's tensors.
    #[serde(default)]
    pub compute_input: Duration,
    /// Running the model.
    #[serde(default)]
    pub compute_infer: Duration,
    /// Copying the outputs out.
    #[serde(default)]
    pub compute_output: Duration,
}

/// Per-batch figures for one batch size: each count is the executions of batches of that size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
pub struct BatchStats {
    /// Requests per batch.
    pub batch_size: u32,
    /// Copying the inputs into the model's tensors.
    #[serde(default)]
    pub compute_input: Duration,
    /// Running the model.
    #[serde(default)]
    pub compute_infer: Duration,
    /// Copying the outputs out.
    #[serde(default)]
    pub compute_output: Duration,
}

impl BatchStats {
    /// Executions of batches of this size.
    pub fn executions(&self) -> u64 {
        self.compute_infer.count
    }

    /// Input, inference and output time summed, in nanoseconds.
    pub fn compute_ns(&self) -> u64 {
        self.compute_input.ns + self.compute_infer.ns + self.compute_output.ns
    }
}

/// One model's statistics, cumulative since the server loaded it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ModelStats {
    /// Model name.
    pub name: String,
    /// Model version.
    #[serde(default)]
    pub version: String,
    /// Requests run (a batch of 4 counts 4).
    #[serde(default)]
    pub inference_count: u64,
    /// Batches run.
    #[serde(default)]
    pub execution_count: u64,
    /// Per-request figures.
    #[serde(default)]
    pub inference_stats: InferenceStats,
    /// Per-batch figures by batch size (sizes never run are absent).
    #[serde(default)]
    pub batch_stats: Vec<BatchStats>,
}

#[derive(Deserialize)]
struct StatsResponse {
    model_stats: Vec<ModelStats>,
}

impl ModelStats {
    /// Parses the JSON of `GET /v2/models/NAME/stats` (its first `model_stats` entry, the one
    /// version a model normally serves); `url` names it in errors.
    pub fn parse(json: &[u8], url: &str) -> Result<ModelStats, EndpointError> {
        let protocol = |message: String| EndpointError::Protocol {
            url: url.to_string(),
            message,
        };
        let response: StatsResponse = serde_json::from_slice(json)
            .map_err(|e| protocol(format!("the statistics are not Triton's JSON ({e})")))?;
        response
            .model_stats
            .into_iter()
            .next()
            .ok_or_else(|| protocol("the statistics list no model".to_string()))
    }

    /// What happened between the snapshot `earlier` and this one: every counter's increase.
    /// Batch sizes that ran no batch in between are left out.
    pub fn since(&self, earlier: &ModelStats) -> ModelStats {
        let before: BTreeMap<u32, &BatchStats> = earlier
            .batch_stats
            .iter()
            .map(|b| (b.batch_size, b))
            .collect();
        let none = BatchStats::default();
        let mut batch_stats: Vec<BatchStats> = self
            .batch_stats
            .iter()
            .map(|b| {
                let e = before.get(&b.batch_size).copied().unwrap_or(&none);
                BatchStats {
                    batch_size: b.batch_size,
                    compute_input: b.compute_input.since(&e.compute_input),
                    compute_infer: b.compute_infer.since(&e.compute_infer),
                    compute_output: b.compute_output.since(&e.compute_output),
                }
            })
            .filter(|b| b.executions() > 0)
            .collect();
        batch_stats.sort_by_key(|b| b.batch_size);
        let (now, then) = (&self.inference_stats, &earlier.inference_stats);
        ModelStats {
            name: self.name.clone(),
            version: self.version.clone(),
            inference_count: self.inference_count.saturating_sub(earlier.inference_count),
            execution_count: self.execution_count.saturating_sub(earlier.execution_count),
            inference_stats: InferenceStats {
                success: now.success.since(&then.success),
                fail: now.fail.since(&then.fail),
                queue: now.queue.since(&then.queue),
                compute_input: now.compute_input.since(&then.compute_input),
                compute_infer: now.compute_infer.since(&then.compute_infer),
                compute_output: now.compute_output.since(&then.compute_output),
            },
            batch_stats,
        }
    }

    /// The mean time a request waited in Triton's queue, in nanoseconds; `None` without
    /// requests.
    pub fn queue_mean_ns(&self) -> Option<f64> {
        self.inference_stats.queue.mean_ns()
    }

    /// The per-request means of the successful requests (time in the server, in the queue and
    /// computing), as [`ServerRequestTimes`] gives them from the Prometheus counters; `None`
    /// without successes or without any of those figures.
    pub fn request_times(&self) -> Option<ServerRequestTimes> {
        let s = &self.inference_stats;
        Some(ServerRequestTimes {
            requests: s.success.count as f64,
            request_ns: s.success.mean_ns()?,
            queue_ns: s.queue.mean_ns()?,
            compute_ns: s.compute_input.mean_ns()?
                + s.compute_infer.mean_ns()?
                + s.compute_output.mean_ns()?,
        })
    }

    /// The mean compute time (input, inference and output) of a batch of each size that ran,
    /// in batch-size order.
    pub fn batch_times(&self) -> Vec<BatchTime> {
        let mut times: Vec<BatchTime> = self
            .batch_stats
            .iter()
            .filter(|b| b.executions() > 0)
            .map(|b| BatchTime {
                batch_size: b.batch_size,
                batches: b.executions(),
                mean_ns: b.compute_ns() as f64 / b.executions() as f64,
            })
            .collect();
        times.sort_by_key(|t| t.batch_size);
        times
    }

    /// Requests run in batches, summed over batch sizes (size x executions); equals
    /// `inference_count` when every batch is counted.
    pub fn batched_requests(&self) -> u64 {
        self.batch_stats
            .iter()
            .map(|b| u64::from(b.batch_size) * b.executions())
            .sum()
    }
}

/// What Triton spent on a run's requests, per request, from its Prometheus counters as a replay
/// with `--metrics-url` summarises them (each counter's increase over the run, the
/// `server_metrics` of summary.json).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerRequestTimes {
    /// Requests the counters cover (`nv_inference_request_success` plus
    /// `nv_inference_request_failure`).
    pub requests: f64,
    /// Mean time from receiving a request to answering it, in nanoseconds
    /// (`nv_inference_request_duration_us`).
    pub request_ns: f64,
    /// Mean time in the queue, in nanoseconds (`nv_inference_queue_duration_us`).
    pub queue_ns: f64,
    /// Mean compute time (input, inference and output), in nanoseconds.
    pub compute_ns: f64,
}

impl ServerRequestTimes {
    /// The figures from `server_metrics`; `None` when it lacks any of Triton's request, queue and
    /// compute duration counters or counts no request.
    pub fn from_metrics(server_metrics: &BTreeMap<String, f64>) -> Option<ServerRequestTimes> {
        let get = |name: &str| server_metrics.get(name).copied();
        let requests = get("nv_inference_request_success")?
            + get("nv_inference_request_failure").unwrap_or(0.0);
        if requests.is_nan() || requests <= 0.0 {
            return None;
        }
        let per_request_ns = |name: &str| get(name).map(|us| us * 1e3 / requests);
        Some(ServerRequestTimes {
            requests,
            request_ns: per_request_ns("nv_inference_request_duration_us")?,
            queue_ns: per_request_ns("nv_inference_queue_duration_us")?,
            compute_ns: per_request_ns("nv_inference_compute_input_duration_us")?
                + per_request_ns("nv_inference_compute_infer_duration_us")?
                + per_request_ns("nv_inference_compute_output_duration_us")?,
        })
    }

    /// The mean time a request spent in the server outside the queue and the model, in
    /// nanoseconds (0 when the counters' rounding makes it negative).
    pub fn outside_ns(&self) -> f64 {
        (self.request_ns - self.queue_ns - self.compute_ns).max(0.0)
    }
}

/// The overheads nobody measures directly, as constants, from a run that has both client and
/// server times: the client's mean end-to-end latency against Triton's mean time per request
/// ([`ServerRequestTimes`], from the `server_metrics` of the run's summary.json).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerOverheads {
    /// The client's mean end-to-end latency, in nanoseconds.
    pub client_ns: f64,
    /// The server's per-request means.
    pub server: ServerRequestTimes,
    /// Requests the client's log completed.
    pub completed: usize,
    /// Where the server's counters were read (named in [`ServerOverheads::describe`]).
    pub summary: PathBuf,
}

impl ServerOverheads {
    /// The overheads of a log whose completed requests took `client_e2e_ns` (end to end, ns)
    /// against the server's counters read from `summary`; `None` when the log completed none.
    pub fn new(
        client_e2e_ns: &[f64],
        server: ServerRequestTimes,
        summary: PathBuf,
    ) -> Option<ServerOverheads> {
        if client_e2e_ns.is_empty() {
            return None;
        }
        Some(ServerOverheads {
            client_ns: client_e2e_ns.iter().sum::<f64>() / client_e2e_ns.len() as f64,
            server,
            completed: client_e2e_ns.len(),
            summary,
        })
    }

    /// Half the client's time outside the server: the one-way network latency, in ns (0 when
    /// the server's mean exceeds the client's).
    pub fn one_way_ns(&self) -> u64 {
        ((self.client_ns - self.server.request_ns).max(0.0) / 2.0).round() as u64
    }

    /// The server's time outside queue and model, in ns.
    pub fn outside_ns(&self) -> u64 {
        self.server.outside_ns().round() as u64
    }

    /// Sets them in `scenario`: a constant one-way `network.latency` and `postprocess.base`.
    pub fn apply(&self, scenario: &mut Scenario) -> Result<(), ScenarioError> {
        scenario.set(
            "network.latency",
            &format!(
                "{{ kind = \"constant\", one_way = \"{}ns\" }}",
                self.one_way_ns()
            ),
        )?;
        scenario.set("postprocess.base", &format!("\"{}ns\"", self.outside_ns()))
    }

    /// What was fitted and from what, for `fit.txt`; ends with a warning line when the server's
    /// counters cover more than 1% more or fewer requests than the log completed.
    pub fn describe(&self) -> String {
        let mut text = format!(
            "overheads, from the client's mean end-to-end {:.3} ms and Triton's mean {:.3} ms a \
             request ({}: {:.0} requests; queue {:.3} ms, compute {:.3} ms):\n  \
             network.latency.one_way {:>9.1} us  half the client's time outside the server\n  \
             postprocess.base        {:>9.1} us  the server's time outside queue and model\n",
            self.client_ns / 1e6,
            self.server.request_ns / 1e6,
            self.summary.display(),
            self.server.requests,
            self.server.queue_ns / 1e6,
            self.server.compute_ns / 1e6,
            self.one_way_ns() as f64 / 1e3,
            self.outside_ns() as f64 / 1e3,
        );
        let completed = self.completed as f64;
        if (self.server.requests - completed).abs() > 0.01 * completed {
            text.push_str(&format!(
                "warning: the server's counters cover {:.0} requests and the log completed {}: \
                 the scrapes did not bracket the run (or other clients used the model), so \
                 these means are not of the same requests\n",
                self.server.requests, self.completed
            ));
        }
        text
    }
}

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

/// Reads the model's statistics from the server at `base_url` (`http://HOST:PORT`). Errors:
/// [`EndpointError::Unreachable`] when nothing answers, [`EndpointError::Protocol`] when the
/// server answers with another status than 200 (no such model, or not a Triton) or with
/// something else than Triton's statistics.
pub fn model_stats(base_url: &str, model: &str) -> Result<ModelStats, EndpointError> {
    let (url, body) = get(base_url, &format!("/v2/models/{model}/stats"), "statistics")?;
    ModelStats::parse(&body, &url)
}

/// Reads the model's batcher configuration from the server at `base_url`; errors as
/// [`model_stats`].
pub fn batcher_config(base_url: &str, model: &str) -> Result<BatcherConfig, EndpointError> {
    let (url, body) = get(
        base_url,
        &format!("/v2/models/{model}/config"),
        "configuration",
    )?;
    BatcherConfig::parse(&body, &url)
}

/// `GET base_url + path`, answered with 200: the URL and the body.
fn get(base_url: &str, path: &str, what: &str) -> Result<(String, bytes::Bytes), EndpointError> {
    let url = format!("{}{path}", base_url.trim_end_matches('/'));
    let uri: Uri = url
        .parse()
        .map_err(|_| EndpointError::BadUrl { url: url.clone() })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = HttpClient::default();
    let response = runtime
        .block_on(async {
            tokio::time::timeout(std::time::Duration::from_secs(30), client.get(&uri)).await
        })
        .map_err(|_| EndpointError::Unreachable {
            url: url.clone(),
            reason: "no answer within 30 s".to_string(),
        })?
        .map_err(|reason| EndpointError::Unreachable {
            url: url.clone(),
            reason: reason.label(),
        })?;
    if response.status != 200 {
        let body: String = String::from_utf8_lossy(&response.body)
            .chars()
            .take(300)
            .collect();
        return Err(EndpointError::Protocol {
            url,
            message: format!(
                "HTTP {} ({body}): the server gives no Triton {what} for this model",
                response.status
            ),
        });
    }
    Ok((url, response.body))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Two snapshots of a real Triton 2.51 (scripts/triton.py, the fixed-time model a = 2 ms,
    // b = 0.5 ms, max batch 8, preferred 4 and 8, 2 ms delay) around a replay of 40 requests.
    const BEFORE: &str = include_str!("../testdata/triton_stats_before.json");
    const AFTER: &str = include_str!("../testdata/triton_stats_after.json");

    fn times(requests: f64) -> ServerRequestTimes {
        ServerRequestTimes {
            requests,
            request_ns: 7_000_000.0,
            queue_ns: 1_000_000.0,
            compute_ns: 5_900_000.0,
        }
    }

    #[test]
    fn overheads_are_half_the_clients_excess_one_way_and_the_servers_time_outside_its_stages() {
        // The client 0.4 ms above the server, the server 0.1 ms outside queue and compute.
        let client = [7.2e6, 7.6e6];
        let o = ServerOverheads::new(&client, times(2.0), "s.json".into()).expect("a log");
        assert_eq!((o.one_way_ns(), o.outside_ns()), (200_000, 100_000));
        let text = o.describe();
        assert!(
            text.contains("200.0 us") && text.contains("100.0 us"),
            "{text}"
        );
        assert!(!text.contains("warning"), "{text}");
        let mut scenario = Scenario::from_toml_str(
            "instances = 1\n[service]\nkind = \"constant\"\ntime = \"1ms\"\n",
        )
        .expect("scenario");
        o.apply(&mut scenario).expect("keys exist");
        assert_eq!(scenario.pools()[0].postprocess.base.0, 100_000);
        assert_eq!(ServerOverheads::new(&[], times(2.0), "s.json".into()), None);
    }

    #[test]
    fn overheads_warn_when_the_counters_cover_other_requests_than_the_log() {
        let o = ServerOverheads::new(&[7.4e6; 100], times(150.0), "s.json".into()).expect("a log");
        let text = o.describe();
        assert!(
            text.contains("cover 150 requests and the log completed 100"),
            "{text}"
        );
    }

    #[test]
    fn the_difference_of_two_snapshots_counts_only_the_run_between_them() {
        let before = ModelStats::parse(BEFORE.as_bytes(), "u").unwrap();
        let after = ModelStats::parse(AFTER.as_bytes(), "u").unwrap();
        let run = after.since(&before);
        assert_eq!(run.name, "fixed");
        assert_eq!((run.inference_count, run.execution_count), (40, 17));
        assert_eq!(run.batched_requests(), 40, "{:?}", run.batch_stats);
        let executions: u64 = run.batch_stats.iter().map(BatchStats::executions).sum();
        assert_eq!(executions, 17);
        // Sizes that ran in the first snapshot only are left out of the difference.
        let sizes: Vec<u32> = run.batch_stats.iter().map(|b| b.batch_size).collect();
        assert_eq!(sizes, [1, 2, 4, 6]);
        assert_eq!(run.inference_stats.queue.count, 40);
        let queue_ms = run.queue_mean_ns().unwrap() * 1e-6;
        assert!((0.0..20.0).contains(&queue_ms), "{queue_ms}");
    }

    #[test]
    fn batch_times_are_the_mean_compute_per_batch_of_each_size_near_the_models_a_plus_b_n() {
        let before = ModelStats::parse(BEFORE.as_bytes(), "u").unwrap();
        let after = ModelStats::parse(AFTER.as_bytes(), "u").unwrap();
        let times = after.since(&before).batch_times();
        assert_eq!(times.len(), 4);
        for t in &times {
            let model_ms = 2.0 + 0.5 * f64::from(t.batch_size);
            let ms = t.mean_ns * 1e-6;
            assert!(
                ms >= model_ms && ms < model_ms + 1.0,
                "batch {}: {ms} ms, the model sleeps {model_ms} ms",
                t.batch_size
            );
        }
        let one = times[0];
        assert_eq!((one.batch_size, one.batches), (1, 6));
    }

    #[test]
    fn a_snapshot_difference_saturates_when_the_server_restarted() {
        let before = ModelStats::parse(AFTER.as_bytes(), "u").unwrap();
        let restarted = ModelStats {
            name: "fixed".to_string(),
            ..ModelStats::default()
        };
        let run = restarted.since(&before);
        assert_eq!((run.inference_count, run.execution_count), (0, 0));
        assert!(run.batch_stats.is_empty());
        assert_eq!(run.queue_mean_ns(), None);
    }

    #[test]
    fn statistics_that_are_not_tritons_are_refused_naming_the_url() {
        let err = ModelStats::parse(br#"{"model_stats":[]}"#, "http://x/v2/models/m/stats")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("no model") && err.contains("http://x"),
            "{err}"
        );
        let err = ModelStats::parse(b"<html>", "u").unwrap_err().to_string();
        assert!(err.contains("not Triton's JSON"), "{err}");
    }

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
    #[test]
    fn request_times_from_counters_are_per_request_means_and_need_every_counter() {
        let metrics: BTreeMap<String, f64> = [
            ("nv_inference_request_success", 90.0),
            ("nv_inference_request_failure", 10.0),
            ("nv_inference_request_duration_us", 500_000.0),
            ("nv_inference_queue_duration_us", 100_000.0),
            ("nv_inference_compute_input_duration_us", 20_000.0),
            ("nv_inference_compute_infer_duration_us", 300_000.0),
            ("nv_inference_compute_output_duration_us", 30_000.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let times = ServerRequestTimes::from_metrics(&metrics).expect("all counters");
        assert_eq!(times.requests, 100.0);
        assert_eq!(times.request_ns, 5e6);
        assert_eq!(times.queue_ns, 1e6);
        assert_eq!(times.compute_ns, 3.5e6);
        assert_eq!(times.outside_ns(), 0.5e6);
        let mut partial = metrics.clone();
        partial.remove("nv_inference_queue_duration_us");
        assert_eq!(ServerRequestTimes::from_metrics(&partial), None);
    }
}
