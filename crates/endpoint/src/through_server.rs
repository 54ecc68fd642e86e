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
use crate::{EndpointError, EndpointOptions, LoadMode, MeasuredRun, Reporting, replay};

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
    /// Requests completed per second (the run's summary's throughput).
    pub throughput_rps: f64,
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

/// One open-loop run of a calibration: the trace's arrivals, scaled, and sizes at a fraction of
/// the deepest closed loop's throughput, so that batches form as an open loop forms them, with
/// requests arriving while a batch runs.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenRun {
    /// The fraction of the deepest closed loop's throughput offered.
    pub fraction: f64,
    /// The offered rate, requests per second.
    pub rate_rps: f64,
    /// Requests sent.
    pub requests: u64,
    /// Of them, those that failed (as [`ClosedLoopRun::failed`]).
    pub failed: u64,
}

/// What a calibration through the server measured.
#[derive(Debug, Clone)]
pub struct ServerCalibration {
    /// The model's statistics over the calibration's closed-loop and open-loop runs (the
    /// server's counters after them less those before; the light open loop is not in them),
    /// each batch size's compute the open loops' alone where they ran at least
    /// [`OPEN_LOOP_MIN_REQUESTS`] requests of it ([`ModelStats::preferring`]).
    pub stats: ModelStats,
    /// The batch sizes whose compute in [`Self::stats`] is the open loops' alone, ascending.
    pub open_sizes: Vec<u32>,
    /// Each closed-loop run.
    pub runs: Vec<ClosedLoopRun>,
    /// Each open-loop run ([`OPEN_FRACTIONS`]), after the closed loops.
    pub open: Vec<OpenRun>,
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
/// `max_batch_size` on `model_instances` instances: powers of two from one client (batches of
/// one) to one and a half times what all instances hold at once (full batches back to back, half
/// a batch waiting behind them). Twice (a full batch queued behind each) outwaited the
/// classifier's 500 ms queue timeout in 2 of 3 calibrations when long inputs met (batches of 32
/// padded to 512 tokens took 234 ms): 64 and 144 of 400 requests failed. The
/// small levels run the small batches an open loop at 30-60% load forms, which three levels (1,
/// half a batch, two batches) left out: the classifier's closed loops at 1, 16 and 64 clients
/// ran no batch of 2 to 6, and the line through 1, 16 and 32 missed the open loop's sizes 2-8
/// by +12% to +53%.
pub fn default_concurrencies(max_batch_size: u32, model_instances: u32) -> Vec<u32> {
    let full = max_batch_size.max(1) * model_instances.max(1);
    let top = full + full.div_ceil(2);
    let mut levels: Vec<u32> = std::iter::successors(Some(1u32), |&c| c.checked_mul(2))
        .take_while(|&c| c < top)
        .collect();
    levels.push(top);
    levels
}

/// The share of a calibration run's requests that may fail before the run is an error: the
/// deepest closed loop can outwait the server's queue timeout now and then (the classifier's
/// 500 ms at 64 clients: 32 of 400 once), which leaves the compute of the batches that ran as
/// it was.
pub const MAX_FAILED_SHARE: f64 = 0.1;

/// The open-loop runs of a calibration, as fractions of the deepest closed loop's throughput.
/// A batch's compute on a server whose host is busy with arriving requests (their HTTP, the
/// load generator's sends) is slower than back to back in a closed loop, where nothing arrives
/// while a batch runs: the classifier's batches of 4 took 4.9 ms in a closed loop and 7.1 ms in
/// an open loop at 60% on the 2-core VM. These runs put such batches in the fit.
pub const OPEN_FRACTIONS: [f64; 3] = [0.2, 0.5, 0.8];

/// The fewest requests of a batch size (batches times size) the open loops must have run for
/// their mean compute at that size to stand for it alone. Open loops run a size as the compared
/// runs do, a batch at a time as requests arrive on a server that idles between them; a closed
/// loop runs its batches back to back, faster: on the 2-core VM the classifier's batches of one
/// took 0.87-0.98 ms in calibrations over closed and open loops together and 1.02-1.09 ms in the
/// open-loop runs predicted from them minutes later.
pub const OPEN_LOOP_MIN_REQUESTS: u64 = 100;

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
    let deepest = runs.iter().max_by_key(|r| r.concurrency);
    let open = open_runs(trace, options, deepest.map_or(0.0, |r| r.throughput_rps))?;
    let now = model_stats(&options.base_url, &options.model)?;
    // A tenth of the rate one client sent back to back (its mean end to end).
    let one_client = runs
        .iter()
        .min_by_key(|r| r.concurrency)
        .and_then(|r| r.path.as_ref())
        .map(|p| p.client_ns);
    // The compute per batch size is the open loops' where they ran enough of that size, else
    // the closed and open loops' together (the light open loop gives the client's path only).
    let open_stats = now.since(&last);
    let stats = now
        .since(&before)
        .preferring(&open_stats, OPEN_LOOP_MIN_REQUESTS);
    let open_sizes = open_stats
        .batch_stats
        .iter()
        .filter(|b| b.requests() >= OPEN_LOOP_MIN_REQUESTS)
        .map(|b| b.batch_size)
        .collect();
    let last = now;
    let mut light = None;
    if let Some(client_ns) = one_client.filter(|&ns| ns > 0.0 && trace.len() >= 2) {
        let rate_rps = 0.1e9 / client_ns;
        let open = paced(trace, options, rate_rps, LIGHT_RUN_NS, "the light-load run")?;
        let records =
            checked_run(&open, options, LoadMode::Open, "an open loop at light load")?.records;
        let now = model_stats(&options.base_url, &options.model)?;
        light = Some(LightRun {
            rate_rps,
            requests: records.len() as u64,
            failed: failed(&records),
            path: path_of(&now, &last, &records, "in the light open loop"),
        });
    }
    Ok(ServerCalibration {
        stats,
        open_sizes,
        runs,
        open,
        light,
    })
}

/// The open-loop runs at [`OPEN_FRACTIONS`] of `capacity_rps`: the trace's own arrivals scaled
/// to the rate, with its sizes, as `validate --endpoint` paces a compared run, so that the loops
/// are as bursty as the traffic predicted: a batch runs slower when requests arrive while it
/// runs. Calibrated on Poisson loops of the same sizes, the classifier's predictions of the demo
/// trace (gamma arrivals, CV 2) ran 12-19% under the server's end-to-end p50 (4 of 4 runs at 30%
/// and 60%); on the trace's own arrivals, -16% to +3% (median -7%, 13 of 20 runs within 10%,
/// 7 calibrations), and a Poisson trace stayed within 9% either way. None where the capacity is
/// unknown.
fn open_runs(
    trace: &Trace,
    options: &EndpointOptions,
    capacity_rps: f64,
) -> Result<Vec<OpenRun>, EndpointError> {
    if capacity_rps.is_nan() || capacity_rps <= 0.0 {
        return Ok(Vec::new());
    }
    let mut runs = Vec::with_capacity(OPEN_FRACTIONS.len());
    for fraction in OPEN_FRACTIONS {
        let rate_rps = fraction * capacity_rps;
        let what = format!(
            "an open loop at {:.0}% of capacity ({rate_rps:.1} req/s)",
            fraction * 100.0
        );
        let open = paced(trace, options, rate_rps, u64::MAX, &what)?;
        let records = checked_run(&open, options, LoadMode::Open, &what)?.records;
        runs.push(OpenRun {
            fraction,
            rate_rps,
            requests: records.len() as u64,
            failed: failed(&records),
        });
    }
    Ok(runs)
}

/// `trace`'s arrivals scaled to `rate_rps`, with its sizes, for at most `duration_ns`; an error
/// names `what` was being paced.
fn paced(
    trace: &Trace,
    options: &EndpointOptions,
    rate_rps: f64,
    duration_ns: u64,
    what: &str,
) -> Result<Trace, EndpointError> {
    scaled_trace(trace, trace.input_tokens(), rate_rps, duration_ns, false).map_err(|e| {
        EndpointError::Protocol {
            url: options.base_url.clone(),
            message: format!("pacing {what}: {e}"),
        }
    })
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
    let run = checked_run(trace, options, mode, &format!("concurrency {concurrency}"))?;
    Ok((
        ClosedLoopRun {
            concurrency,
            requests: run.records.len() as u64,
            failed: failed(&run.records),
            throughput_rps: run.summary.throughput_rps,
            path: None,
        },
        run.records,
    ))
}

/// One run of `trace` in `mode` (`what` names it in the error), measured; an error when
/// a request failed.
fn checked_run(
    trace: &Trace,
    options: &EndpointOptions,
    mode: LoadMode,
    what: &str,
) -> Result<MeasuredRun, EndpointError> {
    let run = replay(
        trace,
        &EndpointOptions {
            mode,
            ..options.clone()
        },
        &Reporting::default(),
    )?;
    let totals = &run.summary.requests;
    let not_sent = run.summary.load.as_ref().map_or(0, |l| l.not_sent);
    if not_sent > 0 {
        return Err(EndpointError::Protocol {
            url: options.base_url.clone(),
            message: format!(
                "the calibration's run at {what} stopped after {} requests ({:?}), {not_sent} \
                 not sent: the server did not answer within {:?}; check that it is alive",
                totals.total, totals.failed_by_reason, options.timeout
            ),
        });
    }
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
    Ok(run)
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
    fn the_levels_double_from_one_client_to_one_and_a_half_full_batches_per_instance() {
        assert_eq!(default_concurrencies(8, 1), vec![1, 2, 4, 8, 12]);
        assert_eq!(
            default_concurrencies(32, 2),
            vec![1, 2, 4, 8, 16, 32, 64, 96]
        );
        assert_eq!(default_concurrencies(6, 1), vec![1, 2, 4, 8, 9]);
        assert_eq!(default_concurrencies(1, 1), vec![1, 2]);
        assert_eq!(default_concurrencies(0, 0), vec![1, 2]);
    }
}
