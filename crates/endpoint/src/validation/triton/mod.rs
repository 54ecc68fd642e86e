//! Triton's extensions to KServe v2 that `capsim validate --endpoint` reads: the model's
//! statistics (`GET /v2/models/NAME/stats`: counts and cumulative nanoseconds of queue and
//! compute time, per request and per batch size) and its configuration
//! (`GET /v2/models/NAME/config`: the dynamic batcher's settings and the instance groups); and,
//! from a Triton on the same machine, its per-request trace ([`trace`]) and the run's timeline
//! made of it ([`timeline`]).
//!
//! Triton's counters only grow, so what one run did is the difference of two snapshots taken
//! before and after it ([`ModelStats::since`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use hyper::Uri;
use serde::Deserialize;

use capsim_sim::{Outcome, RequestRecord, Scenario, ScenarioError};

use crate::EndpointError;
use crate::http::HttpClient;
use crate::measured_service::BatchTime;

mod config;
pub mod timeline;
pub mod trace;

pub use config::{BatcherConfig, ServerQueue, batcher_config};

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

    /// Requests computed in batches of this size (executions times size).
    pub fn requests(&self) -> u64 {
        self.executions() * u64::from(self.batch_size)
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

    /// These statistics with each batch size's figures taken from `preferred` where they hold
    /// at least `min_requests` requests of that size (executions times size); the per-request
    /// figures and counts stay these. A size only `preferred` holds is left out: the sizes are
    /// these statistics'.
    pub fn preferring(&self, preferred: &ModelStats, min_requests: u64) -> ModelStats {
        let batch_stats = self
            .batch_stats
            .iter()
            .map(|b| {
                preferred
                    .batch_stats
                    .iter()
                    .find(|p| p.batch_size == b.batch_size && p.requests() >= min_requests)
                    .unwrap_or(b)
                    .to_owned()
            })
            .collect();
        ModelStats {
            batch_stats,
            ..self.clone()
        }
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
        self.batch_stats.iter().map(BatchStats::requests).sum()
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

    /// The path outside the server in a run: its completed `records`' end to end against the
    /// server's mean time per request over the same run (`stats`, Triton's statistics); `None`
    /// without statistics or completed requests. `source` names the run in [`Self::describe`].
    pub fn of_run(
        stats: Option<&ModelStats>,
        records: &[RequestRecord],
        source: PathBuf,
    ) -> Option<ServerOverheads> {
        let times = stats?.request_times()?;
        let e2e_ns: Vec<f64> = records
            .iter()
            .filter(|r| r.outcome == Outcome::Completed)
            .map(|r| r.latency_ns() as f64)
            .collect();
        ServerOverheads::new(&e2e_ns, times, source)
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

    /// Makes `scenario`'s path between the client and the server the measured one: a constant
    /// one-way `network.latency` and no transfer time (the whole `[network]` table), no gateway
    /// overhead, no pre-processing and no `[host]` (what the client's time beyond the server's
    /// holds is all in the one way). `[postprocess]` is kept.
    pub fn apply_client_path(&self, scenario: &mut Scenario) -> Result<(), ScenarioError> {
        scenario.drop_table("host")?;
        scenario.set(
            "network",
            &format!(
                "{{ latency = {{ kind = \"constant\", one_way = \"{}ns\" }} }}",
                self.one_way_ns()
            ),
        )?;
        scenario.set("gateway.overhead", "\"0ns\"")?;
        scenario.set("preprocess", "{}")
    }

    /// Makes `scenario`'s path outside the server the measured one: a constant one-way
    /// `network.latency` and no transfer time (the whole `[network]` table), no gateway overhead
    /// and no pre-processing, and the server's time outside queue and model as
    /// `postprocess.base`. What is left to simulate is the server's queue, batcher and model,
    /// between the client and the server as they were in the run.
    pub fn apply_as_path(&self, scenario: &mut Scenario) -> Result<(), ScenarioError> {
        self.apply_client_path(scenario)?;
        scenario.set(
            "postprocess",
            &format!("{{ base = \"{}ns\" }}", self.outside_ns()),
        )
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

/// Reads the model's statistics from the server at `base_url` (`http://HOST:PORT`). Errors:
/// [`EndpointError::Unreachable`] when nothing answers, [`EndpointError::Protocol`] when the
/// server answers with another status than 200 (no such model, or not a Triton) or with
/// something else than Triton's statistics.
pub fn model_stats(base_url: &str, model: &str) -> Result<ModelStats, EndpointError> {
    let (url, body) = get(base_url, &format!("/v2/models/{model}/stats"), "statistics")?;
    ModelStats::parse(&body, &url)
}

/// `GET base_url + path`, answered with 200: the URL and the body.
fn get(base_url: &str, path: &str, what: &str) -> Result<(String, bytes::Bytes), EndpointError> {
    call(base_url, path, None, what)
}

/// `POST base_url + path` with a JSON `body`, answered with 200: the URL and the body.
fn post(
    base_url: &str,
    path: &str,
    body: String,
    what: &str,
) -> Result<(String, bytes::Bytes), EndpointError> {
    call(base_url, path, Some(body), what)
}

/// `GET` (no body) or `POST` (a JSON body) `base_url + path`, answered with 200: the URL and
/// the body.
fn call(
    base_url: &str,
    path: &str,
    body: Option<String>,
    what: &str,
) -> Result<(String, bytes::Bytes), EndpointError> {
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
            let answer = async {
                match body {
                    Some(body) => client.post_json(&uri, body.into(), |_| {}).await,
                    None => client.get(&uri).await,
                }
            };
            tokio::time::timeout(std::time::Duration::from_secs(30), answer).await
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
    const BEFORE: &str = include_str!("../../../testdata/triton_stats_before.json");
    const AFTER: &str = include_str!("../../../testdata/triton_stats_after.json");

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
    fn as_the_path_the_overheads_replace_every_stage_outside_the_server() {
        // 0.2 ms each way and 0.1 ms in the server outside queue and compute, as above.
        let o = ServerOverheads::new(&[7.2e6, 7.6e6], times(2.0), "s.json".into()).expect("a log");
        let mut scenario = Scenario::from_toml_str(
            "instances = 1\n[network]\nbandwidth = \"1Mbps\"\nrequest_bytes = \"1KB\"\n\
             [network.latency]\nkind = \"lognormal\"\nmedian = \"1ms\"\np99 = \"5ms\"\n\
             [gateway]\noverhead = \"1ms\"\n[preprocess]\nbase = \"1ms\"\n\
             [postprocess]\nper_output_token = \"1ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"1ms\"\n",
        )
        .expect("scenario");
        o.apply_as_path(&mut scenario).expect("keys exist");
        let built = capsim_sim::build::build(&scenario, &mut capsim_sim::Profiles::default())
            .expect("builds");
        let trace = capsim_trace::Trace::from_columns(capsim_trace::Columns {
            arrival_ns: vec![0],
            input_tokens: vec![100],
            output_tokens: Some(vec![10]),
            ..capsim_trace::Columns::default()
        })
        .expect("trace");
        let summary =
            capsim_sim::simulate(&built, &trace, &capsim_sim::RunOptions::default()).expect("runs");
        // 0.2 in, 1 ms of compute, 0.1 outside it in the server, 0.2 out: 1.5 ms.
        let e2e_ms = summary.latency_ms["end_to_end"].mean_ms;
        assert!((e2e_ms - 1.5).abs() < 1e-9, "{e2e_ms}");
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
    fn preferred_statistics_replace_only_the_sizes_they_ran_often_enough() {
        let before = ModelStats::parse(BEFORE.as_bytes(), "u").unwrap();
        let after = ModelStats::parse(AFTER.as_bytes(), "u").unwrap();
        let all = after.since(&before);
        let sizes = |s: &ModelStats| -> Vec<(u32, u64)> {
            s.batch_stats
                .iter()
                .map(|b| (b.batch_size, b.executions()))
                .collect()
        };
        assert_eq!(sizes(&all), [(1, 6), (2, 6), (4, 4), (6, 1)]);
        // The preferred run: 10 batches of 2 (20 requests), 3 of 4 (12), 40 of 8 (absent from
        // `all`).
        let batch = |batch_size: u32, count: u64| BatchStats {
            batch_size,
            compute_infer: Duration {
                count,
                ns: count * 1_000_000,
            },
            ..BatchStats::default()
        };
        let preferred = ModelStats {
            batch_stats: vec![batch(2, 10), batch(4, 3), batch(8, 40)],
            ..ModelStats::default()
        };
        let merged = all.preferring(&preferred, 20);
        assert_eq!(sizes(&merged), [(1, 6), (2, 10), (4, 4), (6, 1)]);
        assert_eq!(merged.batch_stats[1], batch(2, 10));
        assert_eq!(
            merged.batch_stats[2], all.batch_stats[2],
            "12 requests are too few"
        );
        assert_eq!(
            (merged.inference_count, &merged.inference_stats),
            (all.inference_count, &all.inference_stats)
        );
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
