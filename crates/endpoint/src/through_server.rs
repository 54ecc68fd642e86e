//! Measuring a served model through its server (`capsim calibrate --endpoint`): closed-loop runs
//! at a few concurrencies, so that batches of several sizes run, and the model's statistics
//! over them: the server's compute per batch size and its time per request outside the queue
//! and the model, and the client's path outside the server (at one client). What the server does around the model is in these times, which a profile
//! measured in-process leaves out; no timing of a later compared run is used.

use std::path::PathBuf;
use std::time::Duration;

use capsim_sim::RequestRecord;
use capsim_trace::Trace;

use crate::batch_spread::{IsolatedBatches, SpreadPlan, isolated_batches, pooled_ratios};
use crate::host_cpu::{HostCpu, RunCpu, ServerProcess, fit_host_cpu, own_cpu_ns};
use crate::missed_release::{OpenLoopRecords, fit_missed_release, set_share};
use crate::validation::scaled_trace;
use crate::validation::speed_windows::{StatsPoller, speed_windows};
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
/// the closed loops' highest throughput, so that batches form as an open loop forms them, with
/// requests arriving while a batch runs.
#[derive(Debug, Clone)]
pub struct OpenRun {
    /// The fraction of the closed loops' highest throughput offered.
    pub fraction: f64,
    /// The offered rate, requests per second.
    pub rate_rps: f64,
    /// What it sent and measured, request by request.
    pub measured: OpenLoopRecords,
    /// The model's statistics read every [`SPEED_WINDOW`] while it ran (and once at its end),
    /// each at its time since the run's start, ns: the machine's speed window by window
    /// ([`ServerCalibration::apply_speed_levels`]).
    pub speed_samples: Vec<(u64, ModelStats)>,
}

impl OpenRun {
    /// Requests sent.
    pub fn requests(&self) -> u64 {
        self.measured.records.len() as u64
    }

    /// Of them, those that failed (as [`ClosedLoopRun::failed`]).
    pub fn failed(&self) -> u64 {
        failed(&self.measured.records)
    }
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
    /// The host CPU per request fitted to [`Self::cpu_runs`] ([`fit_host_cpu`]); none where the
    /// server is not a process of this machine or the runs cannot tell its terms apart.
    pub host: Option<HostCpu>,
    /// Each run's CPU (closed loops, open loops, the light loop) where the server's processes
    /// could be read.
    pub cpu_runs: Vec<RunCpu>,
    /// The batches run each alone at the calibration's end, by size:
    /// the compute's spread from batch to batch ([`Self::apply_residuals`]).
    pub spread: Vec<IsolatedBatches>,
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

    /// Models the host's CPU in `scenario` from the calibration's [host fit](Self::host)
    /// (`[host]`): its cores; the CPU each request costs outside the model's compute, the
    /// server's and the load generator's (which runs on the same host), less the server's time
    /// outside queue and model that `postprocess.base` already puts on the cores, half on the
    /// way in (`host.request`) and half on the way out (`host.response`), for lack of a
    /// measure of where it falls; and the cores the model's compute keeps busy while it runs
    /// (`host.compute_cores`, rounded). At light load a request's jobs take their CPU time, so
    /// `network.latency` gives up as much of each way as the jobs take: the calibrated end to
    /// end stays what the light loop measured, and under load the jobs queue for the cores.
    /// Returns the line that says so; `Ok(None)` (the scenario untouched) without a fit or a
    /// client path.
    pub fn apply_host(
        &self,
        scenario: &mut capsim_sim::Scenario,
    ) -> Result<Option<String>, capsim_sim::ScenarioError> {
        let (Some(host), Some((path, _))) = (&self.host, self.client_path()) else {
            return Ok(None);
        };
        let post_ns = path.outside_ns() as f64;
        let per_request_ns = host.server_per_request_ns + host.client_per_request_ns;
        let job_ns = ((per_request_ns - post_ns).max(0.0) / 2.0).round() as u64;
        let one_way_ns = path.one_way_ns().saturating_sub(job_ns);
        let compute_cores = (host.compute_cores.round() as u32).min(host.cores);
        scenario.set_all(&[
            (
                "network.latency",
                &format!("{{ kind = \"constant\", one_way = \"{one_way_ns}ns\" }}"),
            ),
            (
                "host",
                &format!(
                    "{{ cores = {}, request = \"{job_ns}ns\", response = \"{job_ns}ns\", \
                     compute_cores = {compute_cores} }}",
                    host.cores
                ),
            ),
        ])?;
        Ok(Some(format!(
            "[host] cores {} (the server's affinity), request and response {:.1} us each: the \
             CPU per request outside the model, {:.1} us the server's and {:.1} us the load \
             generator's, less postprocess.base {:.1} us, halved; compute_cores {compute_cores} \
             ({:.2} fitted: the model's CPU time over its compute); network.latency.one_way \
             {:.1} us (the jobs' time taken out); from {} runs' CPU accounting",
            host.cores,
            job_ns as f64 / 1e3,
            host.server_per_request_ns / 1e3,
            host.client_per_request_ns / 1e3,
            post_ns / 1e3,
            host.compute_cores,
            one_way_ns as f64 / 1e3,
            host.runs,
        )))
    }

    /// Measures the machine's speed window by window over the open loops and sets
    /// `execution.speed_levels` of `scenario` (calibrated otherwise: compute, path, host) to it:
    /// in each [`SPEED_WINDOW`] of each loop, the server's compute over the scenario's for as
    /// many batches of each size, timed by `scenario`'s simulation of the same loop (as
    /// validate's windows are). On a shared machine the compute's speed
    /// wanders from second to second (the classifier's on the 2-core VM, 0.85-1.66 in 2 s
    /// windows of one run on 2026-12-07), and a slow spell that meets a burst makes a backlog
    /// that one mean speed does not. Returns the line that says so; `Ok(None)` (the scenario
    /// untouched) under `MIN_SPEED_WINDOWS` windows.
    pub fn apply_speed_levels(
        &self,
        scenario: &mut capsim_sim::Scenario,
    ) -> Result<Option<String>, EndpointError> {
        let sim_error = |e: String| EndpointError::Protocol {
            url: "the calibrated scenario".to_string(),
            message: format!("timing the open loops' speed windows: {e}"),
        };
        let built = capsim_sim::build::build(scenario, &mut capsim_sim::Profiles::default())
            .map_err(|e| sim_error(e.to_string()))?;
        let mut levels = Vec::new();
        for run in &self.open {
            let (_, log) = capsim_sim::simulate_with_requests(
                &built,
                &run.measured.trace,
                &capsim_sim::RunOptions::default(),
            )
            .map_err(|e| sim_error(e.to_string()))?;
            let windows = speed_windows(&run.speed_samples, log.records());
            levels.extend(windows.iter().map(|w| w.level));
        }
        if levels.len() < MIN_SPEED_WINDOWS {
            return Ok(None);
        }
        let written: Vec<String> = levels.iter().map(|l| format!("{l:.3}")).collect();
        scenario
            .set(
                "execution.speed_levels",
                &format!("[{}]", written.join(", ")),
            )
            .and_then(|_| {
                scenario.set(
                    "execution.speed_window",
                    &format!("\"{}s\"", SPEED_WINDOW.as_secs_f64()),
                )
            })
            .map_err(|e| sim_error(e.to_string()))?;
        let (low, high) = levels
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &l| (lo.min(l), hi.max(l)));
        Ok(Some(format!(
            "execution.speed_levels: {} windows of {} s of the {} open loops, the server's \
             compute over the calibrated model's at {low:.2}-{high:.2}x (Triton's statistics read \
             every {} s; the simulation draws one level per window, rescaled to mean 1)",
            levels.len(),
            SPEED_WINDOW.as_secs_f64(),
            self.open.len(),
            SPEED_WINDOW.as_secs_f64(),
        )))
    }

    /// Sets `service.residuals` of `scenario` to the compute's spread from batch to batch: each
    /// batch run alone ([`Self::spread`]) over its size's mean, pooled over the sizes with at
    /// least [`MIN_BATCHES_PER_SIZE`](crate::batch_spread::MIN_BATCHES_PER_SIZE) of them, so
    /// that the simulation draws each batch's time from the server's own spread around the
    /// fitted mean. Returns the line that says so;
    /// `Ok(None)` (the scenario untouched) without such batches.
    pub fn apply_residuals(
        &self,
        scenario: &mut capsim_sim::Scenario,
    ) -> Result<Option<String>, EndpointError> {
        let ratios = pooled_ratios(&self.spread);
        if ratios.is_empty() {
            return Ok(None);
        }
        let written: Vec<String> = ratios.iter().map(|r| format!("{r:.4}")).collect();
        scenario
            .set("service.residuals", &format!("[{}]", written.join(", ")))
            .map_err(|e| EndpointError::Protocol {
                url: "the calibrated scenario".to_string(),
                message: format!("setting the compute's spread: {e}"),
            })?;
        let at = |q: f64| capsim_trace::percentile_sorted(&ratios, q);
        let counted: Vec<String> = self
            .spread
            .iter()
            .filter(|b| b.counts())
            .map(|b| format!("{} of {} at {}", b.compute_ns.len(), b.rounds, b.size))
            .collect();
        Ok(Some(format!(
            "service.residuals: {} batches, each alone on the server (rounds that ran as one \
             batch: {}), each one's compute over its size's mean: p10 {:.2}, p50 {:.2}, p90 \
             {:.2}, p99 {:.2}, max {:.2} (Triton's statistics before and after each batch)",
            ratios.len(),
            counted.join(", "),
            at(0.10),
            at(0.50),
            at(0.90),
            at(0.99),
            ratios[ratios.len() - 1],
        )))
    }

    /// Fits `batcher.missed_release` of `scenario` (calibrated otherwise: compute, path, host)
    /// to the open loops at up to `MISSED_RELEASE_MAX_FRACTION` of capacity
    /// ([`fit_missed_release`]), counting requests late by over twice the light loop's mean end
    /// to end (a request that waited for the next arrival), and sets it.
    /// Returns the line that says so; `Ok(None)` (the scenario untouched) without batching,
    /// open loops or a client path.
    pub fn apply_missed_release(
        &self,
        scenario: &mut capsim_sim::Scenario,
    ) -> Result<Option<String>, EndpointError> {
        let Some((path, _)) = self.client_path() else {
            return Ok(None);
        };
        let threshold_ns = (2.0 * path.client_ns).round() as u64;
        let loops: Vec<&OpenLoopRecords> = self
            .open
            .iter()
            .filter(|run| run.fraction <= MISSED_RELEASE_MAX_FRACTION)
            .map(|run| &run.measured)
            .collect();
        let Some(fit) = fit_missed_release(scenario, &loops, threshold_ns)? else {
            return Ok(None);
        };
        set_share(scenario, fit.share)?;
        Ok(Some(fit.describe()))
    }
}

/// The window of `execution.speed_levels` that a calibration reads: Triton's statistics every
/// second through its open loops. The machine's slow spells last about a second (the
/// classifier's on the 2-core VM, 2026-12-07), and a longer window averages them away: three
/// calibrations on one server minutes apart read 0.91-1.19 in 2 s windows, 0.81-1.38 in 1 s
/// and 0.74-1.45 in 0.5 s. Finer, a window's level is a few dozen batches' mean, and their own
/// spread, which `service.residuals` draws already
/// ([`ServerCalibration::apply_residuals`]), would read as the machine's speed. validate's
/// windows stay at 2 s.
pub const SPEED_WINDOW: Duration = Duration::from_secs(1);

/// The fewest windows of the open loops that `execution.speed_levels` is measured from: fewer
/// say too little of how the machine's speed wanders to draw from.
pub const MIN_SPEED_WINDOWS: usize = 4;

/// The highest open loop (a fraction of the closed loops' highest throughput) that
/// `batcher.missed_release` is fitted to. Nearer capacity the queue's own error outweighs it:
/// on 2026-12-07 the classifier's loop at 80% had 225 of 330 requests late by over 10 ms where
/// the 20% and 50% loops had 2 of 390 and 12 of 370, and on another server the 50% loop had 48
/// of 277 (a long input joining a batch formed behind a long one, a backlog the simulation at
/// share 0 did not have) where the 20% loop had 2 of 366. The 50% loop was tried again beside
/// the 20% one later that day, for its larger count: six calibrations in a row on one server
/// fitted 0.170-0.230 to both against 0.120-0.296 to the 20% loop alone, but over 24 more its
/// backlogs, which the simulation at the largest share also makes there and so are not left
/// out as slow spells (155 late in one stretch of 1,252), put the share at 0.30-0.39 four times,
/// and six runs at 30% paired on the same calibrations were within 20% at p99 in 4 with either
/// fit, the mean error 21.4% with both loops and 13.1% with the 20% loop alone.
pub const MISSED_RELEASE_MAX_FRACTION: f64 = 0.2;

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

/// The share of a calibration run's requests that may fail before the run is an error. Failed
/// requests leave the compute of the batches that ran as it was, and a closed loop on Triton
/// 2.51 loses some: the deepest can outwait the server's queue timeout now and then (the
/// classifier's 500 ms at 64 clients: 32 of 400 once), and now and then Triton leaves a ready
/// batch for its batcher's 500 ms poll, which a closed loop sends nothing to cut short, so all
/// its requests in flight time out at once (the classifier at 16 clients on 2026-12-07: 54,
/// 32 and 62 of 400 in three calibrations, 8 at a time; 10% failed two of them).
pub const MAX_FAILED_SHARE: f64 = 0.25;

/// The share of an open loop's requests that may fail before the run is an error. The closed
/// loops' highest throughput, which paces the open loops, can be well above what the server
/// serves open loop, where the batches grow to the largest: the classifier served 945-1,237
/// requests a second at 8 clients (batches of about 8) and about 600 open loop (batches of 32,
/// each padded to a longer input), so its loop at 80% ran past capacity and lost 11-31% of
/// 2,000 requests to the 500 ms queue timeout (2026-12-07). The batches that ran are the full
/// ones the capacity is made of, and their compute is as it was.
pub const OPEN_MAX_FAILED_SHARE: f64 = 0.5;

/// The open-loop runs of a calibration, as fractions of the closed loops' highest throughput.
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
/// calibration is taken on a server that answers. Last, batches run each alone as `spread`
/// plans them ([`isolated_batches`]): the compute's spread from batch to batch.
pub fn calibrate_through_server(
    trace: &Trace,
    open_trace: &Trace,
    warmup: &Trace,
    options: &EndpointOptions,
    concurrencies: &[u32],
    spread: &SpreadPlan,
) -> Result<ServerCalibration, EndpointError> {
    closed_loop(warmup, options, 1).map_err(EndpointError::from)?;
    let mut readings = Readings::new(options)?;
    let before = readings.last.stats.clone();
    let path_of = |since: &ModelStats, records: &[RequestRecord], at: &str| {
        let source = PathBuf::from(format!(
            "{}/v2/models/{}/stats {at}",
            options.base_url, options.model
        ));
        ServerOverheads::of_run(Some(since), records, source)
    };
    let mut runs = Vec::with_capacity(concurrencies.len());
    for &concurrency in concurrencies {
        let (run, records) = match closed_loop(trace, options, concurrency) {
            // Once more, from a fresh reading: Triton 2.51's batcher left waiting for its poll
            // can fail a run's requests in flights of `concurrency` (MAX_FAILED_SHARE).
            Err(TooManyFailed(_)) => {
                readings.skip()?;
                closed_loop(trace, options, concurrency).map_err(EndpointError::from)?
            }
            other => other?,
        };
        let since = readings.next()?;
        let at = format!("at {concurrency} clients");
        runs.push(ClosedLoopRun {
            path: path_of(&since, &records, &at),
            ..run
        });
    }
    let after_closed = readings.last.stats.clone();
    // The closed loops' highest throughput: the deepest's, unless a stall (Triton's batcher
    // left for its 500 ms poll, MAX_FAILED_SHARE) cost it half a second: the classifier's
    // loop at 48 clients served 120 requests a second after three, where 8 clients served
    // 850 (2026-12-07).
    let capacity_rps = runs.iter().map(|r| r.throughput_rps).fold(0.0, f64::max);
    let open = open_runs(open_trace, options, capacity_rps, &mut readings)?;
    // The compute per batch size is the open loops' where they ran enough of that size, else
    // the closed and open loops' together (the light open loop gives the client's path only).
    let open_stats = readings.last.stats.since(&after_closed);
    let stats = readings
        .last
        .stats
        .since(&before)
        .preferring(&open_stats, OPEN_LOOP_MIN_REQUESTS);
    let open_sizes = open_stats
        .batch_stats
        .iter()
        .filter(|b| b.requests() >= OPEN_LOOP_MIN_REQUESTS)
        .map(|b| b.batch_size)
        .collect();
    // A tenth of the rate one client sent back to back (its mean end to end).
    let one_client = runs
        .iter()
        .min_by_key(|r| r.concurrency)
        .and_then(|r| r.path.as_ref())
        .map(|p| p.client_ns);
    let mut light = None;
    if let Some(client_ns) = one_client.filter(|&ns| ns > 0.0 && trace.len() >= 2) {
        let rate_rps = 0.1e9 / client_ns;
        let paced_light = paced(trace, options, rate_rps, LIGHT_RUN_NS, "the light-load run")?;
        let what = "an open loop at light load";
        let records = checked_run(
            &paced_light,
            options,
            LoadMode::Open,
            what,
            MAX_FAILED_SHARE,
        )?
        .records;
        let since = readings.next()?;
        light = Some(LightRun {
            rate_rps,
            requests: records.len() as u64,
            failed: failed(&records),
            path: path_of(&since, &records, "in the light open loop"),
        });
    }
    let spread = isolated_batches(trace, options, spread)?;
    let host = readings.meter.server.as_ref();
    Ok(ServerCalibration {
        stats,
        open_sizes,
        runs,
        open,
        light,
        host: host.and_then(|s| fit_host_cpu(s.cores, &readings.cpu_runs)),
        cpu_runs: readings.cpu_runs,
        spread,
    })
}

/// The server's statistics and the CPU clocks read at one moment.
struct Reading {
    stats: ModelStats,
    cpu: CpuRead,
}

impl Reading {
    fn now(options: &EndpointOptions, meter: &CpuMeter) -> Result<Reading, EndpointError> {
        Ok(Reading {
            stats: model_stats(&options.base_url, &options.model)?,
            cpu: meter.read(),
        })
    }
}

/// Reads the server's statistics and the CPU clocks between a calibration's runs, and keeps
/// each run's CPU.
struct Readings<'o> {
    options: &'o EndpointOptions,
    meter: CpuMeter,
    last: Reading,
    cpu_runs: Vec<RunCpu>,
}

impl<'o> Readings<'o> {
    fn new(options: &'o EndpointOptions) -> Result<Readings<'o>, EndpointError> {
        let meter = CpuMeter::new(options);
        Ok(Readings {
            last: Reading::now(options, &meter)?,
            options,
            meter,
            cpu_runs: Vec::new(),
        })
    }

    fn read(&self) -> Result<Reading, EndpointError> {
        Reading::now(self.options, &self.meter)
    }

    /// A run just ended: its CPU is kept, and the server's statistics over it returned.
    fn next(&mut self) -> Result<ModelStats, EndpointError> {
        let now = self.read()?;
        let since = now.stats.since(&self.last.stats);
        self.cpu_runs
            .extend(run_cpu(&since, self.last.cpu, now.cpu));
        self.last = now;
        Ok(since)
    }

    /// A run just ended that is not taken: the next one is read from now.
    fn skip(&mut self) -> Result<(), EndpointError> {
        self.last = self.read()?;
        Ok(())
    }
}

/// The server's processes, when they run on this machine, and the load generator's own CPU
/// clock.
struct CpuMeter {
    server: Option<ServerProcess>,
}

/// CPU times read at one moment, ns: the server's processes' and the load generator's.
type CpuRead = Option<(u64, u64)>;

impl CpuMeter {
    /// The meter of the server behind `options`' URL: found by its port where the host is
    /// this machine's loopback (`127.0.0.1`, `localhost`, `[::1]`); none elsewhere.
    fn new(options: &EndpointOptions) -> CpuMeter {
        let server = loopback_port(&options.base_url).and_then(ServerProcess::listening_on);
        CpuMeter { server }
    }

    fn read(&self) -> CpuRead {
        Some((self.server.as_ref()?.tree_cpu_ns()?, own_cpu_ns()?))
    }
}

/// One run's CPU from the server's statistics over it and the CPU clocks before and after.
fn run_cpu(since: &ModelStats, before: CpuRead, after: CpuRead) -> Option<RunCpu> {
    let ((s0, c0), (s1, c1)) = (before?, after?);
    Some(RunCpu {
        requests: since.inference_count as f64,
        compute_ns: since
            .batch_stats
            .iter()
            .map(|b| b.compute_ns() as f64)
            .sum(),
        server_ns: s1.saturating_sub(s0) as f64,
        client_ns: c1.saturating_sub(c0) as f64,
    })
}

/// The port of `url` when its host is this machine's loopback.
fn loopback_port(url: &str) -> Option<u16> {
    let uri: hyper::Uri = url.parse().ok()?;
    matches!(uri.host()?, "127.0.0.1" | "localhost" | "[::1]")
        .then(|| uri.port_u16())
        .flatten()
}

/// The open-loop runs at [`OPEN_FRACTIONS`] of `capacity_rps` (none without a capacity), each
/// followed by a reading of the server's statistics.
fn open_runs(
    open_trace: &Trace,
    options: &EndpointOptions,
    capacity_rps: f64,
    readings: &mut Readings<'_>,
) -> Result<Vec<OpenRun>, EndpointError> {
    let mut open = Vec::with_capacity(OPEN_FRACTIONS.len());
    if capacity_rps.is_finite() && capacity_rps > 0.0 {
        for fraction in OPEN_FRACTIONS {
            open.push(open_run(
                open_trace,
                options,
                fraction,
                fraction * capacity_rps,
            )?);
            readings.next()?;
        }
    }
    Ok(open)
}

/// One open-loop run at `fraction` ([`OPEN_FRACTIONS`]) of the closed loops' highest throughput
/// (`rate_rps`): the trace's own arrivals scaled to the rate, with its sizes, as `validate
/// --endpoint` paces a compared run, so that the loops are as bursty as the traffic predicted:
/// a batch runs slower when requests arrive while it runs. Calibrated on Poisson loops of the
/// same sizes, the classifier's predictions of the demo trace (gamma arrivals, CV 2) ran 12-19%
/// under the server's end-to-end p50 (4 of 4 runs at 30% and 60%); on the trace's own
/// arrivals, -16% to +3% (median -7%, 13 of 20 runs within 10%, 7 calibrations), and a Poisson
/// trace stayed within 9% either way.
fn open_run(
    trace: &Trace,
    options: &EndpointOptions,
    fraction: f64,
    rate_rps: f64,
) -> Result<OpenRun, EndpointError> {
    let what = format!(
        "an open loop at {:.0}% of capacity ({rate_rps:.1} req/s)",
        fraction * 100.0
    );
    let open = paced(trace, options, rate_rps, u64::MAX, &what)?;
    let poller = StatsPoller::start(&options.base_url, &options.model, SPEED_WINDOW);
    let run = checked_run(&open, options, LoadMode::Open, &what, OPEN_MAX_FAILED_SHARE);
    let last = model_stats(&options.base_url, &options.model).ok();
    let speed_samples = poller.finish(last.as_ref());
    Ok(OpenRun {
        fraction,
        rate_rps,
        measured: OpenLoopRecords {
            trace: open,
            records: run?.records,
        },
        speed_samples,
    })
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
) -> Result<(ClosedLoopRun, Vec<RequestRecord>), RunError> {
    let mode = LoadMode::Closed {
        concurrency,
        think_time: Duration::ZERO,
    };
    let what = format!("concurrency {concurrency}");
    let run = measured_run(trace, options, mode, &what, MAX_FAILED_SHARE)?;
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

/// Why a calibration's run is not taken: the server's error, or more than
/// [`MAX_FAILED_SHARE`] of its requests failed.
enum RunError {
    Endpoint(EndpointError),
    TooManyFailed(EndpointError),
}
use RunError::TooManyFailed;

impl From<EndpointError> for RunError {
    fn from(e: EndpointError) -> RunError {
        RunError::Endpoint(e)
    }
}

impl From<RunError> for EndpointError {
    fn from(e: RunError) -> EndpointError {
        match e {
            RunError::Endpoint(e) | TooManyFailed(e) => e,
        }
    }
}

/// [`measured_run`], with either error the server's.
fn checked_run(
    trace: &Trace,
    options: &EndpointOptions,
    mode: LoadMode,
    what: &str,
    max_failed: f64,
) -> Result<MeasuredRun, EndpointError> {
    measured_run(trace, options, mode, what, max_failed).map_err(EndpointError::from)
}

/// One run of `trace` in `mode` (`what` names it in the error), measured; an error when
/// the server stopped answering or more than `max_failed` of the requests failed.
fn measured_run(
    trace: &Trace,
    options: &EndpointOptions,
    mode: LoadMode,
    what: &str,
    max_failed: f64,
) -> Result<MeasuredRun, RunError> {
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
        return Err(RunError::Endpoint(EndpointError::Protocol {
            url: options.base_url.clone(),
            message: format!(
                "the calibration's run at {what} stopped after {} requests ({:?}), {not_sent} \
                 not sent: the server did not answer within {:?}; check that it is alive",
                totals.total, totals.failed_by_reason, options.timeout
            ),
        }));
    }
    if (totals.total - totals.completed) as f64 > max_failed * totals.total as f64 {
        return Err(TooManyFailed(EndpointError::Protocol {
            url: options.base_url.clone(),
            message: format!(
                "{} of {} requests failed in the calibration's run at {what} ({:?}), more than \
                 {:.0}%: calibrate a server that answers its requests",
                totals.total - totals.completed,
                totals.total,
                totals.failed_by_reason,
                max_failed * 100.0
            ),
        }));
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
    use crate::validation::triton::ServerRequestTimes;

    /// A calibration whose light loop measured 3 ms at the client and 2.5 ms in the server (2 ms
    /// of compute, 0.1 ms outside queue and model), with the given host fit.
    fn calibration(host: Option<HostCpu>) -> ServerCalibration {
        let server = ServerRequestTimes {
            requests: 100.0,
            request_ns: 2.5e6,
            queue_ns: 0.4e6,
            compute_ns: 2.0e6,
        };
        ServerCalibration {
            stats: ModelStats::parse(br#"{"model_stats":[{"name":"m"}]}"#, "test").unwrap(),
            open_sizes: Vec::new(),
            runs: Vec::new(),
            open: Vec::new(),
            light: Some(LightRun {
                rate_rps: 10.0,
                requests: 100,
                failed: 0,
                path: ServerOverheads::new(&[3.0e6; 100], server, PathBuf::from("light")),
            }),
            host,
            cpu_runs: Vec::new(),
            spread: Vec::new(),
        }
    }

    #[test]
    fn only_a_loopback_url_names_a_local_port() {
        assert_eq!(loopback_port("http://127.0.0.1:8000"), Some(8000));
        assert_eq!(loopback_port("http://localhost:8001/v2"), Some(8001));
        assert_eq!(loopback_port("http://[::1]:8002"), Some(8002));
        assert_eq!(loopback_port("http://10.0.0.7:8000"), None);
        assert_eq!(loopback_port("http://127.0.0.1"), None, "no port written");
    }

    #[test]
    fn the_host_takes_the_cpu_outside_the_model_and_the_network_gives_it_up() {
        let host = HostCpu {
            cores: 2,
            server_per_request_ns: 150e3,
            compute_cores: 0.94,
            client_per_request_ns: 50e3,
            runs: 11,
        };
        let cal = calibration(Some(host));
        let mut scenario = capsim_sim::Scenario::from_toml_str(
            "[service]\nkind = \"constant\"\ntime = \"1ms\"\n[postprocess]\nbase = \"100us\"\n",
        )
        .unwrap();
        cal.apply_client_path(&mut scenario).unwrap();
        let line = cal.apply_host(&mut scenario).unwrap().unwrap();
        // 200 us of CPU a request less the 100 us postprocess.base, halved: 50 us each way;
        // the 250 us one way of the light loop gives them up.
        let get = |key: &str| scenario.get(key).map(ToString::to_string);
        assert_eq!(get("host.cores").as_deref(), Some("2"));
        assert_eq!(get("host.compute_cores").as_deref(), Some("1"));
        assert_eq!(get("host.request").as_deref(), Some("\"50000ns\""));
        assert_eq!(get("host.response").as_deref(), Some("\"50000ns\""));
        assert_eq!(
            get("network.latency.one_way").as_deref(),
            Some("\"200000ns\"")
        );
        assert!(line.contains("compute_cores 1 (0.94 fitted"), "{line}");
        // Without a host fit nothing changes.
        let mut untouched = scenario.clone();
        assert_eq!(calibration(None).apply_host(&mut untouched).unwrap(), None);
        assert_eq!(untouched.to_toml_string(), scenario.to_toml_string());
    }

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

    #[test]
    fn the_share_is_fitted_to_the_open_loop_at_20_percent_alone() {
        use crate::missed_release::tests::{loops_measured_at, scenario};
        // Loops at 150 and 300 req/s of a server that sleeps through 30% of batch ends: the
        // first offered as the 20% loop; the second, as the 50% and 80% loops, is left out.
        let loops = loops_measured_at(0.3);
        let mut cal = calibration(None);
        cal.open = [(0.2, &loops[0]), (0.5, &loops[1]), (0.8, &loops[1])]
            .into_iter()
            .map(|(fraction, measured)| OpenRun {
                fraction,
                rate_rps: 0.0,
                measured: measured.clone(),
                speed_samples: Vec::new(),
            })
            .collect();
        let mut scenario = scenario();
        let line = cal.apply_missed_release(&mut scenario).unwrap().unwrap();
        let by_loop = line.split("parentheses: ").nth(1).unwrap_or_default();
        assert_eq!(by_loop.matches(" of ").count(), 1, "one loop: {line}");
        let share: f64 = scenario
            .get("batcher.missed_release")
            .unwrap()
            .to_string()
            .parse()
            .unwrap();
        assert!((share - 0.3).abs() <= 0.1, "fitted {share}: {line}");
    }

    /// Cumulative statistics of a server whose batches are those of `simulated`, each of its
    /// compute times `level(window)` times the simulation's: read at the start and every [`SPEED_WINDOW`].
    fn statistics_at_levels(
        simulated: &[RequestRecord],
        level: impl Fn(u64) -> f64,
    ) -> Vec<(u64, ModelStats)> {
        use std::collections::{BTreeMap, BTreeSet};
        let window_ns = SPEED_WINDOW.as_nanos() as u64;
        let mut seen = BTreeSet::new();
        let batches: Vec<&RequestRecord> = simulated
            .iter()
            .filter(|r| seen.insert(r.batch_id))
            .collect();
        let end = batches.iter().map(|b| b.exec_end_ns).max().unwrap_or(0);
        let mut samples = Vec::new();
        for k in 0..=end / window_ns + 1 {
            let at = k * window_ns;
            let mut by_size: BTreeMap<u32, (u64, f64)> = BTreeMap::new();
            for b in batches.iter().filter(|b| b.exec_end_ns < at) {
                let e = by_size.entry(b.batch_size).or_default();
                e.0 += 1;
                e.1 += (b.exec_end_ns - b.exec_start_ns) as f64 * level(b.exec_end_ns / window_ns);
            }
            let sizes: Vec<String> = by_size
                .iter()
                .map(|(size, (n, ns))| {
                    format!(
                        r#"{{"batch_size": {size}, "compute_input": {{"count": {n}, "ns": 0}},
                        "compute_infer": {{"count": {n}, "ns": {:.0}}},
                        "compute_output": {{"count": {n}, "ns": 0}}}}"#,
                        ns
                    )
                })
                .collect();
            let json = format!(
                r#"{{"model_stats": [{{"name": "m", "batch_stats": [{}]}}]}}"#,
                sizes.join(",")
            );
            samples.push((at, ModelStats::parse(json.as_bytes(), "test").unwrap()));
        }
        samples
    }

    /// The list of numbers the scenario holds at `key`, and as written.
    fn numbers_at(scenario: &capsim_sim::Scenario, key: &str) -> (Vec<f64>, String) {
        let written = scenario.get(key).unwrap().to_string();
        let numbers = written
            .trim_matches(['[', ']'])
            .split(',')
            .map(|l| l.trim().parse().unwrap())
            .collect();
        (numbers, written)
    }

    #[test]
    fn the_speed_levels_are_the_open_loops_compute_window_by_window() {
        use crate::missed_release::tests::{loops_measured_at, scenario};
        let mut scenario = scenario();
        let built =
            capsim_sim::build::build(&scenario, &mut capsim_sim::Profiles::default()).unwrap();
        let mut cal = calibration(None);
        // A server as the scenario, but every other window at 1.5 times its compute.
        let level = |window: u64| if window % 2 == 1 { 1.5 } else { 1.0 };
        cal.open = loops_measured_at(0.0)
            .into_iter()
            .map(|measured| {
                let (_, log) = capsim_sim::simulate_with_requests(
                    &built,
                    &measured.trace,
                    &capsim_sim::RunOptions::default(),
                )
                .unwrap();
                OpenRun {
                    fraction: 0.2,
                    rate_rps: 0.0,
                    speed_samples: statistics_at_levels(log.records(), level),
                    measured,
                }
            })
            .collect();
        let line = cal.apply_speed_levels(&mut scenario).unwrap().unwrap();
        assert!(line.contains("1.00-1.50x"), "{line}");
        let (levels, written) = numbers_at(&scenario, "execution.speed_levels");
        // The loops (3,000 requests at 150 and 300 req/s) span 20 and 10 windows of 1 s; the last
        // of each may hold too few batches to say.
        assert!(levels.len() >= 24, "{written}");
        let slow = levels.iter().filter(|&&l| (l - 1.5).abs() < 1e-3).count();
        let normal = levels.iter().filter(|&&l| (l - 1.0).abs() < 1e-3).count();
        assert_eq!(slow + normal, levels.len(), "{written}");
        assert!(slow >= 5 && normal >= 5, "{written}");
        assert!(scenario.pools()[0].slowdowns.process().is_some());
        // Without the statistics read during the loops, nothing to say.
        let mut bare = calibration(None);
        bare.open = cal.open.clone();
        for run in &mut bare.open {
            run.speed_samples.clear();
        }
        let mut untouched = super::super::missed_release::tests::scenario();
        assert!(bare.apply_speed_levels(&mut untouched).unwrap().is_none());
        assert!(untouched.pools()[0].slowdowns.process().is_none());
    }

    #[test]
    fn the_residuals_are_the_lone_batches_over_their_sizes_means() {
        use crate::missed_release::tests::scenario;
        let mut cal = calibration(None);
        let batches = |size: u32, ms: &[u64]| IsolatedBatches {
            size,
            rounds: 12,
            compute_ns: ms.iter().map(|m| m * 1_000_000).collect(),
        };
        // Sizes 1 and 8 at 1 ms and 4 ms, each with one batch twice its size's usual; size 32
        // too thin to count.
        cal.spread = vec![
            batches(1, &[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]),
            batches(8, &[4, 4, 4, 4, 4, 4, 4, 4, 4, 8]),
            batches(32, &[50, 90]),
        ];
        let mut scenario = scenario();
        let line = cal.apply_residuals(&mut scenario).unwrap().unwrap();
        assert!(line.contains("21 batches"), "{line}");
        assert!(line.contains("11 of 12 at 1, 10 of 12 at 8)"), "{line}");
        let (ratios, _) = numbers_at(&scenario, "service.residuals");
        assert_eq!(ratios.len(), 21);
        // 1/(12/11) and 2/(12/11) at size 1, 4/4.4 and 8/4.4 at size 8.
        assert_eq!(ratios[0], 0.9091);
        assert_eq!(ratios[20], 1.8333);
        assert!(ratios.contains(&1.8182));
        // No lone batches, nothing to say.
        let mut untouched = crate::missed_release::tests::scenario();
        assert!(
            calibration(None)
                .apply_residuals(&mut untouched)
                .unwrap()
                .is_none()
        );
        assert!(untouched.get("service.residuals").is_none());
    }
}
