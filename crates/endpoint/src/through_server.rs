//! Measuring a served model through its server (`capsim calibrate --endpoint`): closed-loop runs
//! at a few concurrencies, so that batches of several sizes run, and the model's statistics
//! over them: the server's compute per batch size and its time per request outside the queue
//! and the model, and the client's path outside the server (at one client). What the server does around the model is in these times, which a profile
//! measured in-process leaves out; no timing of a later compared run is used.

use std::path::PathBuf;
use std::time::Duration;

use capsim_sim::RequestRecord;
use capsim_trace::Trace;

use crate::validation::scaled_trace;
use crate::validation::triton::{ModelStats, ServerOverheads, model_stats};
use crate::{EndpointError, EndpointOptions, LoadMode, Reporting, replay};

/// One closed-loop run of a calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedLoopRun {
    /// Clients, each sending its next request when its last is answered.
    pub concurrency: u32,
    /// Requests sent.
    pub requests: u64,
    /// Of them, those that failed (at most [`MAX_FAILED_SHARE`] of them: a server's queue
    /// timeout, say); the statistics and the path are the answered ones'.
    pub failed: u64,
    /// The path outside the server in this run: the client's mean end to end against the
    /// server's mean time per request over this run alone. `None` when the server's statistics
    /// hold no request times.
    pub path: Option<ServerOverheads>,
}

/// The open-loop run at light load that ends a calibration: arrivals spread as in the runs a
/// calibration predicts (the server's and the client's threads idle between requests), where
/// nothing queues.
#[derive(Debug, Clone, PartialEq)]
pub struct LightRun {
    /// The offered rate, requests per second: a tenth of what one client sent back to back.
    pub rate_rps: f64,
    /// Requests sent.
    pub requests: u64,
    /// Of them, those that failed (as [`ClosedLoopRun::failed`]).
    pub failed: u64,
    /// The path outside the server in this run (as [`ClosedLoopRun::path`]).
    pub path: Option<ServerOverheads>,
}

/// What a calibration through the server measured.
#[derive(Debug, Clone)]
pub struct ServerCalibration {
    /// The model's statistics over the calibration's closed-loop runs alone (the server's
    /// counters after them less those before; the light open loop is not in them).
    pub stats: ModelStats,
    /// Each closed-loop run.
    pub runs: Vec<ClosedLoopRun>,
    /// The open-loop run at light load, after them (none where the closed loops' statistics
    /// held no request times to pace it by).
    pub light: Option<LightRun>,
}

impl ServerCalibration {
    /// The client's path outside the server and where it was measured: from the open-loop run
    /// at light load, where the client's and the server's threads wake for each request as in
    /// the open-loop runs a calibration predicts (a closed loop's back-to-back requests find
    /// them awake: 0.09 against 0.18 ms each way on the 2-core VM); without it, from the
    /// closed-loop run with the fewest clients. `None` without request statistics.
    pub fn client_path(&self) -> Option<(&ServerOverheads, String)> {
        if let Some(light) = &self.light
            && let Some(path) = &light.path
        {
            return Some((
                path,
                format!(
                    "in an open loop at {:.1} req/s (light load)",
                    light.rate_rps
                ),
            ));
        }
        let run = self.runs.iter().min_by_key(|r| r.concurrency)?;
        let clients = run.concurrency;
        Some((
            run.path.as_ref()?,
            format!(
                "at {clients} client{} (closed loop)",
                if clients == 1 { "" } else { "s" }
            ),
        ))
    }

    /// Makes `scenario`'s path between the client and the server the [client
    /// path](Self::client_path) measured ([`ServerOverheads::apply_client_path`]: a constant one
    /// way, no transfer time, no gateway overhead, no pre-processing: the scenario's own would
    /// count twice) and returns the line that says so, for the printout and the fitted file's
    /// header; `Ok(None)` (the scenario untouched) without one.
    pub fn apply_client_path(
        &self,
        scenario: &mut capsim_sim::Scenario,
    ) -> Result<Option<String>, capsim_sim::ScenarioError> {
        let Some((path, measured)) = self.client_path() else {
            return Ok(None);
        };
        path.apply_client_path(scenario)?;
        Ok(Some(format!(
            "network.latency.one_way {:.1} us: half the client's mean end to end ({:.3} ms) less \
             the server's mean time per request ({:.3} ms) {measured}; the scenario's transfer \
             time, gateway overhead and pre-processing are in it",
            path.one_way_ns() as f64 / 1e3,
            path.client_ns / 1e6,
            path.server.request_ns / 1e6,
        )))
    }
}

/// The closed-loop levels of a calibration of a model instance group that batches up to
/// `max_batch_size` on `model_instances` instances: one client (batches of one), half a batch,
/// and twice what all instances hold at once (full batches queued behind full batches).
pub fn default_concurrencies(max_batch_size: u32, model_instances: u32) -> Vec<u32> {
    let mut levels = vec![
        1,
        (max_batch_size / 2).max(1),
        2 * max_batch_size.max(1) * model_instances.max(1),
    ];
    levels.sort_unstable();
    levels.dedup();
    levels
}

/// The share of a calibration run's requests that may fail before the run is an error: the
/// deepest closed loop can outwait the server's queue timeout now and then (the classifier's
/// 500 ms at 64 clients: 32 of 400 once), which leaves the compute of the batches that ran as
/// it was.
pub const MAX_FAILED_SHARE: f64 = 0.1;

/// How long the light-load run lasts at most, ns: its requests are the trace's first that fit.
pub const LIGHT_RUN_NS: u64 = 10_000_000_000;

/// Requests of a warm-up run (one client, before the statistics are first read) that a few
/// requests make: the server's first requests after a start run slow.
pub const WARMUP_REQUESTS: usize = 8;

/// Sends every request of `trace` (their sizes; a closed loop ignores arrivals) to the server
/// once per concurrency in `concurrencies`, one run after the other, then once more open loop at
/// light load ([`LightRun`]: a tenth of the rate one client sent back to back, for at most
/// [`LIGHT_RUN_NS`]: the client's path), and returns the model's statistics over the closed
/// loops (Triton's, `GET /v2/models/NAME/stats`). `warmup` (for example the
/// trace's first [`WARMUP_REQUESTS`]) goes first from one client, outside the statistics; it
/// also checks the server and the model ([`EndpointError::UnknownModel`] says to check
/// --model). A run in which more than [`MAX_FAILED_SHARE`] of the requests failed is an error: a
/// calibration is taken on a server that answers.
pub fn calibrate_through_server(
    trace: &Trace,
    warmup: &Trace,
    options: &EndpointOptions,
    concurrencies: &[u32],
) -> Result<ServerCalibration, EndpointError> {
    closed_loop(warmup, options, 1)?;
    let before = model_stats(&options.base_url, &options.model)?;
    let mut runs = Vec::with_capacity(concurrencies.len());
    let mut last = before.clone();
    let path_of = |now: &ModelStats, last: &ModelStats, records: &[RequestRecord], at: &str| {
        let source = PathBuf::from(format!(
            "{}/v2/models/{}/stats {at}",
            options.base_url, options.model
        ));
        ServerOverheads::of_run(Some(&now.since(last)), records, source)
    };
    for &concurrency in concurrencies {
        let (run, records) = closed_loop(trace, options, concurrency)?;
        let now = model_stats(&options.base_url, &options.model)?;
        let at = format!("at {concurrency} clients");
        runs.push(ClosedLoopRun {
            path: path_of(&now, &last, &records, &at),
            ..run
        });
        last = now;
    }
    // A tenth of the rate one client sent back to back (its mean end to end).
    let one_client = runs
        .iter()
        .min_by_key(|r| r.concurrency)
        .and_then(|r| r.path.as_ref())
        .map(|p| p.client_ns);
    // The compute per batch size is the closed loops' (back to back, as a loaded server runs
    // them); the light open loop gives the client's path only.
    let stats = last.since(&before);
    let mut light = None;
    if let Some(client_ns) = one_client.filter(|&ns| ns > 0.0 && trace.len() >= 2) {
        let rate_rps = 0.1e9 / client_ns;
        let open = scaled_trace(trace, trace.input_tokens(), rate_rps, LIGHT_RUN_NS, false)
            .map_err(|e| EndpointError::Protocol {
                url: options.base_url.clone(),
                message: format!("pacing the light-load run: {e}"),
            })?;
        let records = checked_run(&open, options, LoadMode::Open, "an open loop at light load")?;
        let now = model_stats(&options.base_url, &options.model)?;
        light = Some(LightRun {
            rate_rps,
            requests: records.len() as u64,
            failed: failed(&records),
            path: path_of(&now, &last, &records, "in the light open loop"),
        });
    }
    Ok(ServerCalibration { stats, runs, light })
}

/// One closed-loop run of `trace` from `concurrency` clients and its records (no path yet); an
/// error when a request failed.
fn closed_loop(
    trace: &Trace,
    options: &EndpointOptions,
    concurrency: u32,
) -> Result<(ClosedLoopRun, Vec<RequestRecord>), EndpointError> {
    let mode = LoadMode::Closed {
        concurrency,
        think_time: Duration::ZERO,
    };
    let records = checked_run(trace, options, mode, &format!("concurrency {concurrency}"))?;
    Ok((
        ClosedLoopRun {
            concurrency,
            requests: records.len() as u64,
            failed: failed(&records),
            path: None,
        },
        records,
    ))
}

/// One run of `trace` in `mode` (`what` names it in the error) and its records; an error when
/// a request failed.
fn checked_run(
    trace: &Trace,
    options: &EndpointOptions,
    mode: LoadMode,
    what: &str,
) -> Result<Vec<RequestRecord>, EndpointError> {
    let run = replay(
        trace,
        &EndpointOptions {
            mode,
            ..options.clone()
        },
        &Reporting::default(),
    )?;
    let totals = &run.summary.requests;
    if (totals.total - totals.completed) as f64 > MAX_FAILED_SHARE * totals.total as f64 {
        return Err(EndpointError::Protocol {
            url: options.base_url.clone(),
            message: format!(
                "{} of {} requests failed in the calibration's run at {what} ({:?}), more than \
                 {:.0}%: calibrate a server that answers its requests",
                totals.total - totals.completed,
                totals.total,
                totals.failed_by_reason,
                MAX_FAILED_SHARE * 100.0
            ),
        });
    }
    Ok(run.records)
}

/// Requests of `records` that did not complete.
fn failed(records: &[RequestRecord]) -> u64 {
    records
        .iter()
        .filter(|r| r.outcome != capsim_sim::Outcome::Completed)
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_levels_run_batches_of_one_half_and_full_queued_batches() {
        assert_eq!(default_concurrencies(8, 1), vec![1, 4, 16]);
        assert_eq!(default_concurrencies(32, 2), vec![1, 16, 128]);
        assert_eq!(default_concurrencies(1, 1), vec![1, 2]);
        assert_eq!(default_concurrencies(0, 0), vec![1, 2]);
    }
}
