//! Measuring a served model through its server (`capsim calibrate --endpoint`): closed-loop runs
//! at a few concurrencies, so that batches of several sizes run, and the model's statistics
//! over them: the server's compute per batch size and its time per request outside the queue
//! and the model, and the client's path outside the server (at one client). What the server does around the model is in these times, which a profile
//! measured in-process leaves out; no timing of a later compared run is used.

use std::path::PathBuf;
use std::time::Duration;

use capsim_sim::RequestRecord;
use capsim_trace::Trace;

use crate::validation::triton::{ModelStats, ServerOverheads, model_stats};
use crate::{EndpointError, EndpointOptions, LoadMode, Reporting, replay};

/// One closed-loop run of a calibration.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedLoopRun {
    /// Clients, each sending its next request when its last is answered.
    pub concurrency: u32,
    /// Requests sent, every one answered (a run with a failure is an error).
    pub requests: u64,
    /// The path outside the server in this run: the client's mean end to end against the
    /// server's mean time per request over this run alone. `None` when the server's statistics
    /// hold no request times.
    pub path: Option<ServerOverheads>,
}

/// What a calibration through the server measured.
#[derive(Debug, Clone)]
pub struct ServerCalibration {
    /// The model's statistics over the calibration's runs alone (the server's counters after
    /// them less those before).
    pub stats: ModelStats,
    /// Each run.
    pub runs: Vec<ClosedLoopRun>,
}

impl ServerCalibration {
    /// The client's path outside the server, from the run with the fewest clients (one, by
    /// default), where nothing queues in the client or the server's front end and the client's
    /// time beyond the server's is the network's and the HTTP stacks'. `None` without request
    /// statistics.
    pub fn client_path(&self) -> Option<&ServerOverheads> {
        self.runs
            .iter()
            .min_by_key(|r| r.concurrency)
            .and_then(|r| r.path.as_ref())
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
        let Some(path) = self.client_path() else {
            return Ok(None);
        };
        path.apply_client_path(scenario)?;
        let clients = self.runs.iter().map(|r| r.concurrency).min().unwrap_or(1);
        Ok(Some(format!(
            "network.latency.one_way {:.1} us: half the client's mean end to end ({:.3} ms) less \
             the server's mean time per request ({:.3} ms) at {clients} client{}; the scenario's \
             transfer time, gateway overhead and pre-processing are in it",
            path.one_way_ns() as f64 / 1e3,
            path.client_ns / 1e6,
            path.server.request_ns / 1e6,
            if clients == 1 { "" } else { "s" }
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

/// Requests of a warm-up run (one client, before the statistics are first read) that a few
/// requests make: the server's first requests after a start run slow.
pub const WARMUP_REQUESTS: usize = 8;

/// Sends every request of `trace` (their sizes; a closed loop ignores arrivals) to the server
/// once per concurrency in `concurrencies`, one run after the other, and returns the model's
/// statistics over them (Triton's, `GET /v2/models/NAME/stats`). `warmup` (for example the
/// trace's first [`WARMUP_REQUESTS`]) goes first from one client, outside the statistics; it
/// also checks the server and the model ([`EndpointError::UnknownModel`] says to check
/// --model). A run in which a request failed is an error: a calibration is taken on a server
/// that answers.
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
    for &concurrency in concurrencies {
        let (run, records) = closed_loop(trace, options, concurrency)?;
        let now = model_stats(&options.base_url, &options.model)?;
        let source = PathBuf::from(format!(
            "{}/v2/models/{}/stats at {concurrency} clients",
            options.base_url, options.model
        ));
        runs.push(ClosedLoopRun {
            path: ServerOverheads::of_run(Some(&now.since(&last)), &records, source),
            ..run
        });
        last = now;
    }
    Ok(ServerCalibration {
        stats: last.since(&before),
        runs,
    })
}

/// One closed-loop run of `trace` from `concurrency` clients and its records (no path yet); an
/// error when a request failed.
fn closed_loop(
    trace: &Trace,
    options: &EndpointOptions,
    concurrency: u32,
) -> Result<(ClosedLoopRun, Vec<RequestRecord>), EndpointError> {
    let closed = EndpointOptions {
        mode: LoadMode::Closed {
            concurrency,
            think_time: Duration::ZERO,
        },
        ..options.clone()
    };
    let run = replay(trace, &closed, &Reporting::default())?;
    let totals = &run.summary.requests;
    if totals.completed < totals.total {
        return Err(EndpointError::Protocol {
            url: options.base_url.clone(),
            message: format!(
                "{} of {} requests failed in the calibration's run at concurrency \
                 {concurrency} ({:?}): calibrate a server that answers every request",
                totals.total - totals.completed,
                totals.total,
                totals.failed_by_reason
            ),
        });
    }
    Ok((
        ClosedLoopRun {
            concurrency,
            requests: totals.total,
            path: None,
        },
        run.records,
    ))
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
