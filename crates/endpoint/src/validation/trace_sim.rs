//! `validate --endpoint --server-trace`'s third simulation of a load, trace-sim: the run's own
//! timeline as a Triton on the same machine traced it (requests arriving when Triton queued
//! them, batch times fitted to its batches and stretched where they ran slow, its hand-over
//! between batches and its stalled dispatches), so that what is left to differ is the queue and
//! the batcher.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use capsim_sim::output::write_requests_parquet;
use capsim_sim::scenario::Pool;
use capsim_sim::{
    BuiltScenario, Outcome, Profiles, RequestLog, Run, RunOptions, Scenario, simulate_with_requests,
};
use capsim_trace::{Distribution, Trace};

use super::comparison::{BatchShares, Figures, ServerTimelineReport, Simulated};
use super::triton::timeline::{
    LeftBehind, Readiness, ServerTimeline, executed_requests, measure_thread_first,
};
use super::triton::trace::{self, TraceSetting, TracedRequest};
use super::{ValidationError, build_scenario};
use crate::MeasuredRun;

/// What the trace-driven simulation of one load needs.
pub(super) struct TraceSimInputs<'a> {
    pub url: &'a str,
    pub setting: &'a TraceSetting,
    /// The trace files there were before the load.
    pub before: &'a [PathBuf],
    pub scaled: &'a Trace,
    pub run: &'a MeasuredRun,
    pub scenario: &'a Scenario,
    pub pool: &'a Pool,
    pub seed: u64,
    pub figures: &'a Figures,
    pub server_shares: &'a BatchShares,
}

/// A load's trace files and the requests traced in them.
type LoadTraces = (Vec<PathBuf>, Vec<TracedRequest>);

/// The seeds trace-sim's figures and batch shares are averaged over when it draws anything (the
/// batcher thread's race, the dispatch's spread): the spread of the mean of 8 draws is about a
/// third of one draw's.
const SEEDS: u32 = 8;

/// How long the server may take to write out a load's traces after the flush.
const TRACE_WRITE_WAIT: Duration = Duration::from_secs(5);

/// Has the server write out the traces it holds and returns the trace files there are then.
pub(super) fn flushed_trace_files(
    url: &str,
    setting: &TraceSetting,
) -> Result<Vec<PathBuf>, ValidationError> {
    trace::flush(url, setting)
        .map_err(|e| ValidationError::BadInput(format!("--server-trace: {e}")))?;
    Ok(setting.files())
}

/// The trace files the server wrote for one load (flushed now) and their requests; `Ok(Err(why))`
/// when it wrote none, or none that reads, within [`TRACE_WRITE_WAIT`] (a file is read again
/// while it may still be being written).
fn load_traces(t: &TraceSimInputs) -> Result<Result<LoadTraces, String>, ValidationError> {
    let after = flushed_trace_files(t.url, t.setting)?;
    let started = std::time::Instant::now();
    let mut files = after;
    loop {
        let new: Vec<PathBuf> = files
            .iter()
            .filter(|f| !t.before.contains(f))
            .cloned()
            .collect();
        let why = if new.is_empty() {
            format!(
                "the server wrote no trace file for this load next to {}",
                t.setting.trace_file
            )
        } else {
            match trace::read_requests(&new) {
                Ok(traced) => return Ok(Ok((new, traced))),
                Err(e) => e.to_string(),
            }
        };
        if started.elapsed() > TRACE_WRITE_WAIT {
            return Ok(Err(why));
        }
        std::thread::sleep(Duration::from_millis(100));
        files = t.setting.files();
    }
}

/// The run's timeline made of this load's traced requests, with the scenario set on it and the
/// trace of its queue starts; `Ok(Err(why))` when the trace gave nothing to simulate.
fn timeline_of(
    t: &TraceSimInputs,
) -> Result<Result<(ServerTimeline, Scenario, Trace), String>, ValidationError> {
    let (new, traced) = match load_traces(t)? {
        Ok(read) => read,
        Err(why) => return Ok(Err(why)),
    };
    let model_instances = (t.pool.execution.gpus * t.pool.execution.instance_count) as usize;
    let Some(timeline) = ServerTimeline::new(
        &traced,
        t.scaled.input_tokens(),
        model_instances,
        &Readiness::of(&t.pool.batcher),
    ) else {
        return Ok(Err(format!(
            "none of the {} requests traced in {} is this load's",
            traced.len(),
            new.iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    };
    let mut on_timeline = t.scenario.clone();
    timeline
        .apply(&mut on_timeline)
        .map_err(ValidationError::context(
            "setting the run's timeline in the scenario",
        ))?;
    let sim_trace = timeline.trace().map_err(ValidationError::context(
        "building the trace of the server's queue starts",
    ))?;
    Ok(Ok((timeline, on_timeline, sim_trace)))
}

/// The scenario on the timeline with the batcher thread first in `fraction` of the races, built.
fn built_at(
    on_timeline: &Scenario,
    fraction: f64,
    profiles: &mut Profiles,
) -> Result<BuiltScenario, ValidationError> {
    let mut scenario = on_timeline.clone();
    let mut inputs = scenario.replay().clone();
    inputs.thread_first_fraction = fraction;
    scenario
        .set_replay(inputs)
        .map_err(ValidationError::context(
            "setting the batcher thread's share of the race",
        ))?;
    build_scenario(&scenario, profiles)
}

/// The race at a batch's end, measured by the batches that left requests behind: the batcher
/// thread's share of the races that makes the simulation leave as many behind as the server
/// (`None` when the share cannot see it), written with the rest of what was replayed to
/// `dir/replay-inputs.toml`, for `capsim simulate --replay-inputs`.
fn thread_first(
    timeline: &ServerTimeline,
    on_timeline: &Scenario,
    sim_trace: &Trace,
    options: &RunOptions,
    max_batch_size: u32,
    profiles: &mut Profiles,
    dir: &Path,
) -> Result<Option<f64>, ValidationError> {
    let server_left = timeline.left_behind(max_batch_size);
    let thread_first = measure_thread_first(server_left, |fraction| {
        let built = built_at(on_timeline, fraction, profiles)?;
        let (_, log) = simulate_with_requests(&built, sim_trace, options)?;
        Ok::<_, ValidationError>(
            LeftBehind::of(&executed_requests(log.records()), max_batch_size).share(),
        )
    })?;
    let fraction = thread_first.unwrap_or(0.0);
    // What was replayed, for `capsim simulate --replay-inputs` (the run's timings, not a
    // scenario's keys).
    let replay_inputs = format!(
        "{}thread_first_fraction = {fraction}\n",
        timeline.replay_inputs_toml()
    );
    std::fs::write(dir.join("replay-inputs.toml"), replay_inputs).map_err(
        ValidationError::context(format!(
            "writing {}",
            dir.join("replay-inputs.toml").display()
        )),
    )?;
    Ok(thread_first)
}

/// The trace-driven simulation of one load (`Ok(Err(why))` when the trace gave nothing to
/// simulate), its records written to `dir/simulated-trace.parquet` and what it replayed to
/// `dir/replay-inputs.toml`.
pub(super) fn trace_sim(
    t: &TraceSimInputs,
    profiles: &mut Profiles,
    dir: &Path,
) -> Result<Result<(Simulated, ServerTimelineReport), String>, ValidationError> {
    let (timeline, on_timeline, sim_trace) = match timeline_of(t)? {
        Ok(made) => made,
        Err(why) => return Ok(Err(why)),
    };
    let options = RunOptions {
        seed: t.seed,
        ..RunOptions::default()
    };
    let max_batch_size = t.pool.batcher.max_batch_size;
    let thread_first = thread_first(
        &timeline,
        &on_timeline,
        &sim_trace,
        &options,
        max_batch_size,
        profiles,
        dir,
    )?;
    let fraction = thread_first.unwrap_or(0.0);
    // The final scenario, built once for its run and its seeds' draws.
    let built = built_at(&on_timeline, fraction, profiles)?;
    let (sim_run, log) = simulate_with_requests(&built, &sim_trace, &options)?;
    write_requests_parquet(
        &dir.join("simulated-trace.parquet"),
        log.records(),
        std::slice::from_ref(&t.pool.name),
    )?;
    let latency: HashMap<u64, u64> = t
        .run
        .records
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .map(|r| (u64::from(r.request), r.latency_ns()))
        .collect();
    let joined = timeline.join(|id| latency.get(&id).copied(), log.records());
    // The queues hold every request completed in the simulation, end to end only those also
    // completed in the run: with any end to end, neither queue is empty.
    let (Some(e2e), Some(server_queue), Some(sim_queue)) = (
        Distribution::of(joined.e2e_ms),
        Distribution::of(joined.queue_server_ms),
        Distribution::of(joined.queue_sim_ms),
    ) else {
        return Ok(Err(
            "no traced request completed both in the run and in the simulation".into(),
        ));
    };
    // With the race or the dispatch's spread replayed each seed is one draw: the figures and
    // shares compared are the mean of SEEDS draws, what the model predicts (the server's run is
    // one draw too).
    let drawn = fraction > 0.0 || !timeline.handover.dispatch_residuals.is_empty();
    let seeds = if drawn { SEEDS } else { 1 };
    let mut draws = Draws {
        shares: vec![BatchShares::of(&sim_run.summary)],
        e2e_queue: vec![(e2e, sim_queue)],
    };
    for k in 1..u64::from(seeds) {
        let seeded = RunOptions {
            seed: t.seed.wrapping_add(k),
            ..RunOptions::default()
        };
        let (run, log) = simulate_with_requests(&built, &sim_trace, &seeded)?;
        draws.add(&timeline, &latency, &run, &log);
    }
    let sim_left = LeftBehind::of(&executed_requests(log.records()), max_batch_size);
    let report = Seen {
        timeline: &timeline,
        e2e_count: e2e.count,
        server_queue: &server_queue,
        thread_first,
        server_left: timeline.left_behind(max_batch_size),
        sim_left,
        seeds,
    }
    .report(&draws);
    Ok(Ok((
        Simulated::with_figures(
            &sim_run.summary,
            draws.figures(&sim_run),
            BatchShares::mean(&draws.shares),
            t.figures,
            t.server_shares,
        ),
        report,
    )))
}

/// The seeds' draws of trace-sim: batch shares, and the joined requests' end to end and
/// simulated queue.
struct Draws {
    shares: Vec<BatchShares>,
    e2e_queue: Vec<(Distribution, Distribution)>,
}

impl Draws {
    /// Adds one seed's run (its log joined with the timeline and the run's latencies).
    fn add(
        &mut self,
        timeline: &ServerTimeline,
        latency: &HashMap<u64, u64>,
        run: &Run,
        log: &RequestLog,
    ) {
        self.shares.push(BatchShares::of(&run.summary));
        let joined = timeline.join(|id| latency.get(&id).copied(), log.records());
        if let (Some(e2e), Some(queue)) = (
            Distribution::of(joined.e2e_ms),
            Distribution::of(joined.queue_sim_ms),
        ) {
            self.e2e_queue.push((e2e, queue));
        }
    }

    /// The mean over the draws of `f`.
    fn mean(&self, f: &dyn Fn(&(Distribution, Distribution)) -> f64) -> f64 {
        self.e2e_queue.iter().map(f).sum::<f64>() / self.e2e_queue.len() as f64
    }

    /// The figures compared: the first run's throughput, the draws' mean percentiles.
    fn figures(&self, first: &Run) -> Figures {
        Figures {
            throughput_rps: Figures::of(&first.summary).throughput_rps,
            e2e_p50_ms: self.mean(&|d| d.0.p50),
            e2e_p90_ms: self.mean(&|d| d.0.p90),
            e2e_p99_ms: self.mean(&|d| d.0.p99),
            queue_mean_ms: Some(self.mean(&|d| d.1.mean)),
        }
    }
}

/// What trace-sim saw of the server's timeline and of its own first run.
struct Seen<'a> {
    timeline: &'a ServerTimeline,
    /// Requests joined (completed in both).
    e2e_count: u64,
    server_queue: &'a Distribution,
    thread_first: Option<f64>,
    server_left: LeftBehind,
    sim_left: LeftBehind,
    seeds: u32,
}

impl Seen<'_> {
    /// The timeline's report, the simulated queue the mean of `draws`.
    fn report(&self, draws: &Draws) -> ServerTimelineReport {
        let timeline = self.timeline;
        let stalls: Vec<&(u64, u64, f64)> = timeline
            .windows
            .slowdowns
            .iter()
            .filter(|w| w.2 > 3.0)
            .collect();
        let (fit, handover) = (timeline.fit, &timeline.handover);
        ServerTimelineReport {
            requests_traced: timeline.requests() as u64,
            requests_joined: self.e2e_count,
            batches: timeline.batches as u64,
            fit_a_ms: fit.a_ns * 1e-6,
            fit_b_ms: fit.b_ns * 1e-6,
            fit_c_us: fit.c_ns * 1e-3,
            batches_fitted: fit.kept as u64,
            turnaround_us: handover.turnaround_ns * 1e-3,
            dispatch_us: handover.dispatch_ns * 1e-3,
            release_us: handover.release_ns * 1e-3,
            release_per_request_us: handover.release_per_request_ns * 1e-3,
            stalls: stalls.len() as u64,
            stall_ms: stalls
                .iter()
                .fold(0.0, |ms, w| ms + (w.1 - w.0) as f64 * 1e-6),
            pauses: timeline.windows.pauses.len() as u64,
            pause_ms: timeline
                .windows
                .pauses
                .iter()
                .fold(0.0, |ms, p| ms + (p.1 - p.0) as f64 * 1e-6),
            left_waiting: handover.left_waiting as u64,
            left_waiting_ms: handover.left_waiting_ns as f64 * 1e-6,
            server_queue_p50_ms: self.server_queue.p50,
            sim_queue_p50_ms: draws.mean(&|d| d.1.p50),
            server_queue_p99_ms: self.server_queue.p99,
            sim_queue_p99_ms: draws.mean(&|d| d.1.p99),
            thread_first_fraction: self.thread_first,
            released_batches: self.server_left.taken as u64,
            server_left_behind: self.server_left.share(),
            sim_left_behind: self.sim_left.share(),
            seeds: self.seeds,
        }
    }
}
