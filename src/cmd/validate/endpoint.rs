//! `capsim validate --endpoint URL`: the simulator against a running server. At each load (a
//! fraction of the scenario's calibrated capacity) the trace, scaled to that rate, is sent to
//! the server (open loop) and simulated twice: with the scenario's (or the profile's) service
//! model, and with the compute time per batch size the server itself reported for that run
//! (Triton's statistics, read before and after it). Prints one table per load and writes
//! `validation.json` and the per-request records under `-o DIR`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use capsim_endpoint::measured_service::{LeveledService, MeasuredService};
use capsim_endpoint::triton::timeline::{
    LeftBehind, Readiness, ServerTimeline, executed_requests, measure_thread_first,
};
use capsim_endpoint::triton::trace::{self, TraceSetting};
use capsim_endpoint::triton::{self, ModelStats, ServerOverheads};
use capsim_endpoint::{EndpointError, EndpointOptions, LoadMode, MeasuredRun, Protocol};
use capsim_endpoint::validation::comparison::{
    BatchShares, CalibratedCapacity, ComputeDrift, EndpointValidation, Figures, LoadValidation,
    Measured, MeasuredPath, RunService, ServerBatchTime, ServerTimelineReport, Simulated,
};
use capsim_sim::output::write_requests_parquet;
use capsim_sim::quantity::parse_duration_ns;
use capsim_sim::scenario::BatcherKind;
use capsim_sim::scenario::Pool;
use capsim_sim::timing::profile::{Profile, ProfileServiceTime};
use capsim_sim::{
    BuiltScenario, Outcome, RequestRecord, RunOptions, Scenario, ServiceTime,
    simulate_with_requests,
};
use capsim_trace::{Columns, Distribution, Trace};

use super::{ValidateArgs, check_loads, scaled_trace, served_lengths};
use crate::cmd::BadInput;
use crate::cmd::shared::server::{ProtocolArg, reporting_of};

/// Where `-o` defaults to.
const DEFAULT_OUT: &str = "output/validate-endpoint";

/// Requests sent one at a time before the first load, so that the server's first runs (lazy
/// initialization, cold caches) fall in no measurement; the statistics are read after them.
const WARMUP_REQUESTS: usize = 16;

/// A request not answered this long after its send fails as `timeout`.
const TIMEOUT: Duration = Duration::from_secs(60);

pub(super) fn run(args: &ValidateArgs, url: &str) -> Result<()> {
    let server = &args.server;
    let scenario_path = server.scenario.as_ref().ok_or_else(|| {
        BadInput("--scenario is required: the simulations run its default pool".into())
    })?;
    let mut scenario = Scenario::from_path(scenario_path).map_err(|e| BadInput(e.to_string()))?;
    crate::cmd::apply_sets(&mut scenario, &args.sets)?;
    let pool = batched_pool(&scenario, scenario_path)?.clone();
    // One cache for every build of this run (the scenario's, and each load's on the measured
    // path), so a profile file is read once.
    let mut profiles = capsim_sim::Profiles::default();
    let built = crate::cmd::build_scenario(&scenario, &mut profiles)?;
    check_loads(&args.loads)?;
    let duration_ns =
        parse_duration_ns(&args.duration).map_err(|e| BadInput(format!("--duration: {e}")))?;
    let (service, service_model, model_label) = service_of(args, &built)?;
    let model = server.model.to_string_lossy().into_owned();
    let protocol = match args.protocol {
        ProtocolArg::Kserve => Protocol::Kserve,
        ProtocolArg::Openai => Protocol::Openai,
    };
    let max_length = args.max_length.unwrap_or(512).max(1);
    let options = EndpointOptions {
        mode: LoadMode::Open,
        timeout: TIMEOUT,
        seed: args.seed,
        max_input_tokens: if protocol == Protocol::Kserve {
            max_length
        } else {
            u32::MAX
        },
        ..EndpointOptions::new(url, protocol, &model)
    };

    let loaded = server.input.load()?;
    eprintln!("{}", loaded.report_line());
    let trace = &loaded.trace;
    if trace.len() < 2 {
        return Err(BadInput("capsim validate needs a trace of at least 2 requests".into()).into());
    }
    // What the server sees: KServe inputs cut to --max-length; an OpenAI prompt as it is.
    let lengths = served_lengths(trace, options.max_input_tokens);
    let capacity = CalibratedCapacity::of(&pool, service.as_ref(), &lengths).ok_or_else(|| {
        BadInput(format!(
            "the {service_model} times a full batch at 0 ns: no capacity to scale the loads to"
        ))
    })?;
    println!(
        "calibrated capacity: {:.1} rps ({} model instances, batches of {} padded to {} tokens on average (inputs {} on average) taking {:.3} ms with the {model_label} service model)",
        capacity.rate_rps,
        capacity.model_instances,
        capacity.max_batch_size,
        capacity.padded_input_tokens,
        capacity.mean_input_tokens,
        capacity.full_batch_ms
    );

    let batcher_differences = check_server(&options, &pool)?;
    let server_trace = if args.server_trace {
        Some(server_trace_setting(&options)?)
    } else {
        None
    };
    capsim_endpoint::replay(
        &warmup_trace(trace, &lengths, protocol == Protocol::Openai)?,
        &EndpointOptions {
            mode: LoadMode::Closed {
                concurrency: 1,
                think_time: Duration::ZERO,
            },
            ..options.clone()
        },
        &reporting_of(&scenario),
    )
    .map_err(|e| BadInput(e.to_string()))?;

    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_OUT));
    crate::cmd::create_out_dir(&out, "--out")?;
    let mut report = EndpointValidation {
        endpoint: url.to_string(),
        protocol: match protocol {
            Protocol::Kserve => "kserve",
            Protocol::Openai => "openai",
        }
        .to_string(),
        model: model.clone(),
        scenario: scenario.name.clone(),
        service_model: service_model.clone(),
        capacity,
        batcher_differences,
        loads: Vec::new(),
    };
    for &load in &args.loads {
        let rate_rps = load * capacity.rate_rps;
        let scaled = scaled_trace(
            trace,
            &lengths,
            rate_rps,
            duration_ns,
            protocol == Protocol::Openai,
        )?;
        let traced_before = match &server_trace {
            Some(setting) => Some(flushed_trace_files(url, setting)?),
            None => None,
        };
        let run = measure(&scaled, &options, &scenario)?;
        let sim_options = RunOptions {
            seed: args.seed,
            service_override: Some(service.clone()),
            ..RunOptions::default()
        };
        let (sim_run, sim_log) = simulate_with_requests(&built, &scaled, &sim_options)?;
        let stats = run.stats.as_ref();
        let server_shares = stats.map_or_else(BatchShares::default, |s| {
            BatchShares::from_counts(s.batch_stats.iter().map(|b| (b.batch_size, b.executions())))
        });
        let mut figures = Figures::of(&run.measured.summary);
        figures.queue_mean_ms = stats
            .and_then(ModelStats::queue_mean_ns)
            .map(|ns| ns * 1e-6);
        let sim = Simulated::new(&sim_run.summary, &figures, &server_shares);
        let compute_by_batch_size = drift(stats, sim_log.records());
        let run_service = stats.and_then(|s| MeasuredService::new(&s.batch_times()));
        // The model's own times (their dependence on the inputs, their spread) brought to the
        // server's level for each batch size; the server's means alone where the model ran no
        // batch of a size the server did.
        let levels: Vec<(u32, f64)> = compute_by_batch_size
            .iter()
            .filter_map(|d| d.level().map(|level| (d.batch_size, level)))
            .collect();
        let leveled = LeveledService::new(service.clone(), &levels);
        let run_sim_service: Option<Arc<dyn ServiceTime>> = match (&leveled, &run_service) {
            (Some(leveled), _) => Some(Arc::new(leveled.clone())),
            (None, Some(measured)) => Some(Arc::new(measured.clone())),
            (None, None) => None,
        };
        let dir = out.join(format!("load-{:.0}", load * 100.0));
        // The run-sim runs between the client and the server as they were: the path outside
        // the server as measured, in place of the scenario's network, gateway and processing.
        let overheads = measured_path(stats, &run.measured.records, &dir);
        let run_sim = match &run_sim_service {
            Some(service) => {
                let options = RunOptions {
                    service_override: Some(service.clone()),
                    ..sim_options.clone()
                };
                let on_path = match &overheads {
                    Some(o) => {
                        let mut on_path = scenario.clone();
                        o.apply_as_path(&mut on_path)
                            .context("setting the measured path in the scenario")?;
                        Some(crate::cmd::build_scenario(&on_path, &mut profiles)?)
                    }
                    None => None,
                };
                let run_built = on_path.as_ref().unwrap_or(&built);
                Some(simulate_with_requests(run_built, &scaled, &options)?)
            }
            None => None,
        };
        crate::cmd::create_out_dir(&dir, "--out")?;
        let pools = std::slice::from_ref(&pool.name);
        write_requests_parquet(
            &dir.join("measured.parquet"),
            &run.measured.records,
            &["endpoint".to_string()],
        )?;
        write_requests_parquet(&dir.join("simulated.parquet"), sim_log.records(), pools)?;
        if let Some((_, log)) = &run_sim {
            write_requests_parquet(&dir.join("simulated-run.parquet"), log.records(), pools)?;
        }
        let (trace_sim, server_timeline, trace_sim_missing) = match (&server_trace, &traced_before)
        {
            (Some(setting), Some(before)) => {
                match trace_sim(
                    &TraceSimInputs {
                        url,
                        setting,
                        before,
                        scaled: &scaled,
                        run: &run,
                        scenario: &scenario,
                        pool: &pool,
                        seed: args.seed,
                        figures: &figures,
                        server_shares: &server_shares,
                    },
                    &mut profiles,
                    &dir,
                )? {
                    Ok((sim, timeline)) => (Some(sim), Some(timeline), None),
                    Err(why) => (None, None, Some(why)),
                }
            }
            _ => (None, None, None),
        };
        let summary = &run.measured.summary;
        let result = LoadValidation {
            load,
            rate_rps,
            requests: scaled.len() as u64,
            measured: Measured {
                figures,
                sent: summary.load.as_ref().map_or(0, |l| l.sent),
                completed: summary.requests.completed,
                failed: summary.requests.failed,
                schedule_delay_p99_ms: summary.load.as_ref().map(|l| l.schedule_delay_p99_ms),
            },
            sim,
            run_sim: run_sim
                .as_ref()
                .map(|(r, _)| Simulated::new(&r.summary, &figures, &server_shares)),
            run_sim_missing: run_service.is_none().then(|| {
                run.stats_missing
                    .clone()
                    .unwrap_or_else(|| "the server reported no batch for this run".to_string())
            }),
            run_service: run_service.as_ref().map(|s| RunService {
                batch_sizes: s.sizes().to_vec(),
                fit_a_ms: s.fit().a_ns * 1e-6,
                fit_b_ms: s.fit().b_ns * 1e-6,
                leveled: leveled.is_some(),
                path: overheads.as_ref().map(|o| MeasuredPath {
                    one_way_ms: o.one_way_ns() as f64 * 1e-6,
                    server_outside_ms: o.outside_ns() as f64 * 1e-6,
                }),
            }),
            compute_by_batch_size,
            server_batch_shares: server_shares,
            trace_sim,
            server_timeline,
            trace_sim_missing,
        };
        print!("{}", result.human(&model_label, "server's"));
        if let Some(delay_ms) = result.measured.schedule_delay_p99_ms.filter(|&d| d > 1.0) {
            eprintln!(
                "validate: warning: at {:.0}% load the load generator sent 1% of its requests more than {delay_ms:.1} ms late: the measured latencies include the client's delay",
                load * 100.0
            );
        }
        report.loads.push(result);
    }
    let json = out.join("validation.json");
    let text = report.to_json().context("serializing the validation")?;
    std::fs::write(&json, text).with_context(|| format!("cannot write {}", json.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}

/// The server's trace setting, when it can give a run's per-request timestamps (else why not).
fn server_trace_setting(options: &EndpointOptions) -> Result<TraceSetting> {
    if options.protocol != Protocol::Kserve {
        return Err(BadInput(
            "--server-trace reads Triton's trace: it needs --protocol kserve".into(),
        )
        .into());
    }
    let setting = trace::trace_setting(&options.base_url).map_err(|e| {
        BadInput(format!(
            "--server-trace: the server gives no Triton trace setting ({e})"
        ))
    })?;
    if let Some(problem) = setting.problem() {
        return Err(BadInput(format!(
            "--server-trace: the server at {} cannot give every request's timestamps: {problem}",
            options.base_url
        ))
        .into());
    }
    Ok(setting)
}

/// Has the server write out the traces it holds and returns the trace files there are then.
fn flushed_trace_files(url: &str, setting: &TraceSetting) -> Result<Vec<PathBuf>> {
    trace::flush(url, setting).map_err(|e| BadInput(format!("--server-trace: {e}")))?;
    Ok(setting.files())
}

/// What the trace-driven simulation of one load needs.
struct TraceSimInputs<'a> {
    url: &'a str,
    setting: &'a TraceSetting,
    /// The trace files there were before the load.
    before: &'a [PathBuf],
    scaled: &'a Trace,
    run: &'a Run,
    scenario: &'a Scenario,
    pool: &'a Pool,
    seed: u64,
    figures: &'a Figures,
    server_shares: &'a BatchShares,
}

/// A load's trace files and the requests traced in them.
type LoadTraces = (Vec<PathBuf>, Vec<trace::TracedRequest>);

/// The seeds trace-sim's figures and batch shares are averaged over when it draws anything (the
/// batcher thread's race, the dispatch's spread): the spread of the mean of 8 draws is about a
/// third of one draw's.
const SEEDS: u32 = 8;

/// How long the server may take to write out a load's traces after the flush.
const TRACE_WRITE_WAIT: Duration = Duration::from_secs(5);

/// The trace files the server wrote for one load (flushed now) and their requests; `Ok(Err(why))`
/// when it wrote none, or none that reads, within [`TRACE_WRITE_WAIT`] (a file is read again
/// while it may still be being written).
fn load_traces(t: &TraceSimInputs) -> Result<std::result::Result<LoadTraces, String>> {
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

/// The trace-driven simulation of one load (`Ok(Err(why))` when the trace gave nothing to
/// simulate), its records written to `dir/simulated-trace.parquet` and what it replayed to
/// `dir/replay-inputs.toml`.
fn trace_sim(
    t: &TraceSimInputs,
    profiles: &mut capsim_sim::Profiles,
    dir: &Path,
) -> Result<std::result::Result<(Simulated, ServerTimelineReport), String>> {
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
        .context("setting the run's timeline in the scenario")?;
    let sim_trace = timeline
        .trace()
        .context("building the trace of the server's queue starts")?;
    let options = RunOptions {
        seed: t.seed,
        ..RunOptions::default()
    };
    let mut built_at = |fraction: f64| -> Result<BuiltScenario> {
        let mut scenario = on_timeline.clone();
        let mut inputs = scenario.replay().clone();
        inputs.thread_first_fraction = fraction;
        scenario
            .set_replay(inputs)
            .context("setting the batcher thread's share of the race")?;
        crate::cmd::build_scenario(&scenario, profiles)
    };
    let mut simulate_at = |fraction: f64| -> Result<_> {
        Ok(simulate_with_requests(
            &built_at(fraction)?,
            &sim_trace,
            &options,
        )?)
    };
    // The race at a batch's end, measured by the batches that left requests behind.
    let max_batch_size = t.pool.batcher.max_batch_size;
    let server_left = timeline.left_behind(max_batch_size);
    let thread_first = measure_thread_first(server_left, |fraction| {
        let (_, log) = simulate_at(fraction)?;
        Ok::<_, anyhow::Error>(
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
    std::fs::write(dir.join("replay-inputs.toml"), replay_inputs)
        .with_context(|| format!("writing {}", dir.join("replay-inputs.toml").display()))?;
    // The final scenario, built once for its run and its seeds' draws.
    let built = built_at(fraction)?;
    let (sim_run, log) = simulate_with_requests(&built, &sim_trace, &options)?;
    let sim_left = LeftBehind::of(&executed_requests(log.records()), max_batch_size);
    write_requests_parquet(
        &dir.join("simulated-trace.parquet"),
        log.records(),
        std::slice::from_ref(&t.pool.name),
    )?;
    let latency: std::collections::HashMap<u64, u64> = t
        .run
        .measured
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
    let mut shares = vec![BatchShares::of(&sim_run.summary)];
    let mut draws = vec![(e2e, sim_queue)];
    for k in 1..u64::from(seeds) {
        let seeded = RunOptions {
            seed: t.seed.wrapping_add(k),
            ..RunOptions::default()
        };
        let (run, log) = simulate_with_requests(&built, &sim_trace, &seeded)?;
        shares.push(BatchShares::of(&run.summary));
        let joined = timeline.join(|id| latency.get(&id).copied(), log.records());
        if let (Some(e2e), Some(queue)) = (
            Distribution::of(joined.e2e_ms),
            Distribution::of(joined.queue_sim_ms),
        ) {
            draws.push((e2e, queue));
        }
    }
    let mean = |f: &dyn Fn(&(Distribution, Distribution)) -> f64| {
        draws.iter().map(f).sum::<f64>() / draws.len() as f64
    };
    let figures = Figures {
        throughput_rps: Figures::of(&sim_run.summary).throughput_rps,
        e2e_p50_ms: mean(&|d| d.0.p50),
        e2e_p90_ms: mean(&|d| d.0.p90),
        e2e_p99_ms: mean(&|d| d.0.p99),
        queue_mean_ms: Some(mean(&|d| d.1.mean)),
    };
    let stalls: Vec<&(u64, u64, f64)> = timeline
        .windows
        .slowdowns
        .iter()
        .filter(|w| w.2 > 3.0)
        .collect();
    let (fit, handover) = (timeline.fit, &timeline.handover);
    let report = ServerTimelineReport {
        requests_traced: timeline.requests() as u64,
        requests_joined: e2e.count,
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
        server_queue_p50_ms: server_queue.p50,
        sim_queue_p50_ms: mean(&|d| d.1.p50),
        server_queue_p99_ms: server_queue.p99,
        sim_queue_p99_ms: mean(&|d| d.1.p99),
        thread_first_fraction: thread_first,
        released_batches: server_left.taken as u64,
        server_left_behind: server_left.share(),
        sim_left_behind: sim_left.share(),
        seeds,
    };
    Ok(Ok((
        Simulated::with_figures(
            &sim_run.summary,
            figures,
            BatchShares::mean(&shares),
            t.figures,
            t.server_shares,
        ),
        report,
    )))
}

/// The trace's first [`WARMUP_REQUESTS`] requests, with the served lengths, 1 ms apart (sent one
/// at a time, so their times do not matter).
fn warmup_trace(trace: &Trace, lengths: &[u32], keep_output_tokens: bool) -> Result<Trace> {
    let n = WARMUP_REQUESTS.min(trace.len());
    let columns = Columns {
        arrival_ns: (0..n as u64).map(|i| i * 1_000_000).collect(),
        input_tokens: lengths[..n].to_vec(),
        output_tokens: trace
            .output_tokens()
            .filter(|_| keep_output_tokens)
            .map(|o| o[..n].to_vec()),
        ..Columns::default()
    };
    Trace::from_columns(columns).context("building the warm-up trace")
}

/// The scenario's default pool, when the comparison can be made with it: one pool, with the
/// dynamic batcher and a service model.
fn batched_pool<'a>(scenario: &'a Scenario, path: &Path) -> Result<&'a Pool> {
    let bad = |why: String| -> anyhow::Error {
        BadInput(format!("scenario {}: {why}", path.display())).into()
    };
    let pools = scenario.pools();
    if pools.len() > 1 {
        return Err(bad(
            "validate --endpoint compares one server's model with the default pool; remove the [pools.*] sections".into(),
        ));
    }
    let pool = &pools[0];
    if matches!(pool.batcher.kind, BatcherKind::Continuous) {
        return Err(bad(format!(
            "pool {:?} has batcher.kind = \"continuous\": validate --endpoint compares a dynamic batcher (Triton's) only",
            pool.name
        )));
    }
    if pool.service_spec.is_none() {
        return Err(bad(format!("pool {:?} has no [service] model", pool.name)));
    }
    Ok(pool)
}

/// The service model of the scenario-driven simulation: the profile's (`--profile`) or the
/// pool's own; with how the output names it.
fn service_of(
    args: &ValidateArgs,
    built: &BuiltScenario,
) -> Result<(Arc<dyn ServiceTime>, String, String)> {
    match &args.profile {
        Some(path) => {
            let profile = Profile::read(path).map_err(|e| BadInput(e.to_string()))?;
            Ok((
                Arc::new(ProfileServiceTime::new(&profile)),
                format!("profile {}", path.display()),
                "profile's".to_string(),
            ))
        }
        None => Ok((
            built.pools[0]
                .service
                .clone()
                .expect("checked by batched_pool"),
            "scenario".to_string(),
            "scenario's".to_string(),
        )),
    }
}

/// Checks the server before any load: reachable, serving the model (else the error), and, for
/// a Triton, whether its batcher is the scenario's (each difference printed as a warning and
/// returned).
fn check_server(options: &EndpointOptions, pool: &Pool) -> Result<Vec<String>> {
    if options.protocol != Protocol::Kserve {
        eprintln!(
            "validate: the run-driven simulation needs the server's compute time per batch size, which only Triton's statistics give: with --protocol openai only the scenario-driven one runs"
        );
        return Ok(Vec::new());
    }
    let differences = match triton::batcher_config(&options.base_url, &options.model) {
        Ok(config) => config.differences(pool),
        Err(e @ (EndpointError::Unreachable { .. } | EndpointError::BadUrl { .. })) => {
            return Err(BadInput(e.to_string()).into());
        }
        // Not a Triton, or no such model: the replay's own check names which.
        Err(_) => Vec::new(),
    };
    for difference in &differences {
        eprintln!(
            "validate: warning: {difference}; the comparison measures that difference too (fix the scenario or --set it)"
        );
    }
    Ok(differences)
}

/// A measured run with the server's statistics for it.
struct Run {
    measured: MeasuredRun,
    /// What the server counted during the run (Triton only).
    stats: Option<ModelStats>,
    /// Why `stats` is missing.
    stats_missing: Option<String>,
}

/// Replays `trace` against the server, reading its statistics before and after.
fn measure(trace: &Trace, options: &EndpointOptions, scenario: &Scenario) -> Result<Run> {
    let snapshot = || {
        match options.protocol {
        Protocol::Kserve => triton::model_stats(&options.base_url, &options.model)
            .map_err(|e| format!("the server gave no Triton statistics ({e})")),
        Protocol::Openai => Err(
            "the OpenAI protocol reports no compute time per batch size (Triton's statistics only, for now)"
                .to_string(),
        ),
    }
    };
    let before = snapshot();
    let measured = capsim_endpoint::replay(trace, options, &reporting_of(scenario))
        .map_err(|e| BadInput(e.to_string()))?;
    let after = snapshot();
    let (stats, stats_missing) = match (before, after) {
        (Ok(before), Ok(after)) => (Some(after.since(&before)), None),
        (Err(why), _) | (_, Err(why)) => (None, Some(why)),
    };
    if let Some(stats) = &stats {
        // Triton counts every request it ran; more than were sent means other traffic.
        let sent = measured.records.len() as u64;
        if stats.inference_count > sent {
            eprintln!(
                "validate: warning: the server ran {} requests during a run that sent {sent}: other clients' requests are in its statistics",
                stats.inference_count
            );
        }
    }
    Ok(Run {
        measured,
        stats,
        stats_missing,
    })
}

/// The path outside the server in a run: the client's completed requests' end to end against
/// the server's mean time per request (Triton's statistics); `None` without statistics or
/// completed requests. `dir` names the run in [`ServerOverheads::describe`].
fn measured_path(
    stats: Option<&ModelStats>,
    records: &[RequestRecord],
    dir: &Path,
) -> Option<ServerOverheads> {
    let times = stats?.request_times()?;
    let e2e_ns: Vec<f64> = records
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .map(|r| r.latency_ns() as f64)
        .collect();
    ServerOverheads::new(&e2e_ns, times, dir.join("measured.parquet"))
}

/// The server's mean compute per batch size beside the simulation's mean execution of its
/// batches of that size (the service model on the same trace); empty without statistics.
fn drift(stats: Option<&ModelStats>, simulated: &[RequestRecord]) -> Vec<ComputeDrift> {
    let Some(stats) = stats else {
        return Vec::new();
    };
    let server = stats.batch_times().into_iter().map(|t| ServerBatchTime {
        batch_size: t.batch_size,
        batches: t.batches,
        mean_ns: t.mean_ns,
    });
    ComputeDrift::by_batch_size(server, simulated)
}
