//! `capsim validate --endpoint URL`: the simulator against a running server. At each load (a
//! fraction of the scenario's calibrated capacity) the trace, scaled to that rate, is sent to
//! the server (open loop) and simulated: with the scenario's (or the profile's) service model
//! (sim, the prediction), with the compute time per batch size the server itself reported for
//! that run (Triton's statistics, read before and after it: run-sim), and with the model's
//! compute brought to the server's speed over the run and window by window (its statistics
//! read every 2 s: the two sims at the server's speed, which tell the machine's drift from the
//! model's error). The command prints one table per load and
//! writes `validation.json`; the per-request records are written here, under the load's folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use capsim_sim::output::write_requests_parquet;
use capsim_sim::quantity::DurationNs;
use capsim_sim::record::RequestLog;
use capsim_sim::scenario::{BatcherKind, Pool, ReplayInputs, SlowdownSpec};
use capsim_sim::timing::profile::{Profile, ProfileServiceTime};
use capsim_sim::timing::service::ScaledService;
use capsim_sim::{
    BuiltScenario, Profiles, RequestRecord, Run, RunOptions, Scenario, ServiceTime, Summary,
    round_ns, simulate, simulate_with_requests,
};
use capsim_trace::{Columns, Trace};

use super::comparison::{
    BatchShares, CalibratedCapacity, ComputeDrift, EndpointValidation, Figures, LoadValidation,
    Measured, MeasuredPath, RunService, SeedSpread, ServerBatchTime, ServerTimelineReport,
    Simulated, SpeedWindow,
};
use super::loads::{scaled_trace, served_lengths};
use super::speed_windows::{StatsPoller, WINDOW, speed_windows};
use super::trace_sim::{TraceSimInputs, flushed_trace_files, trace_sim};
use super::triton::trace::{self, TraceSetting};
use super::triton::{self, ModelStats, ServerOverheads};
use super::{ValidationError, build_scenario};
use crate::measured_service::{LeveledService, MeasuredService};
use crate::{EndpointError, EndpointOptions, LoadMode, MeasuredRun, Protocol, Reporting};

/// The seeds `sim`'s figures and batch shares are averaged over. Each draws again whatever the
/// scenario draws (the compute's spread, speed windows, batch ends slept through); near a tipping
/// point their p99s differ severalfold, and 16 keeps the mean's own error to about a quarter of
/// one draw's spread.
const SIM_SEEDS: u32 = 16;

/// Requests sent one at a time before the first load, so that the server's first runs (lazy
/// initialization, cold caches) fall in no measurement; the statistics are read after them.
const WARMUP_REQUESTS: usize = 16;

/// A request not answered this long after its send fails as `timeout`.
const TIMEOUT: Duration = Duration::from_secs(60);

/// The scenario a server is compared with: its one pool, with the dynamic batcher and a service
/// model, built.
pub struct EndpointScenario {
    scenario: Scenario,
    pool: Pool,
    /// One cache for every build of this run (the scenario's, and each load's on the measured
    /// path), so a profile file is read once.
    profiles: Profiles,
    built: BuiltScenario,
}

/// The service model of the scenario-driven simulation, with how the output names it.
pub struct ServiceModel {
    service: Arc<dyn ServiceTime>,
    /// `profile PATH` or `scenario`.
    pub name: String,
    /// `profile's` or `scenario's`.
    pub label: String,
}

impl EndpointScenario {
    /// Checks that `scenario` (read from `path`, which errors name) can be compared with a
    /// server, and builds it.
    pub fn new(scenario: Scenario, path: &Path) -> Result<EndpointScenario, ValidationError> {
        let pool = batched_pool(&scenario, path)?.clone();
        let mut profiles = Profiles::default();
        let built = build_scenario(&scenario, &mut profiles)?;
        Ok(EndpointScenario {
            scenario,
            pool,
            profiles,
            built,
        })
    }

    /// The service model of the scenario-driven simulation: the profile at `profile`, or the
    /// pool's own.
    pub fn service(&self, profile: Option<&Path>) -> Result<ServiceModel, ValidationError> {
        match profile {
            Some(path) => {
                let profile =
                    Profile::read(path).map_err(|e| ValidationError::BadInput(e.to_string()))?;
                Ok(ServiceModel {
                    service: Arc::new(ProfileServiceTime::new(&profile)),
                    name: format!("profile {}", path.display()),
                    label: "profile's".to_string(),
                })
            }
            None => Ok(ServiceModel {
                service: self.built.pools[0]
                    .service
                    .clone()
                    .expect("checked by batched_pool"),
                name: "scenario".to_string(),
                label: "scenario's".to_string(),
            }),
        }
    }
}

/// The scenario's default pool, when the comparison can be made with it: one pool, with the
/// dynamic batcher and a service model.
fn batched_pool<'a>(scenario: &'a Scenario, path: &Path) -> Result<&'a Pool, ValidationError> {
    let bad =
        |why: String| ValidationError::BadInput(format!("scenario {}: {why}", path.display()));
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

/// The server and how the loads are sent to it.
#[derive(Debug, Clone)]
pub struct EndpointRun {
    /// `http://HOST:PORT`.
    pub url: String,
    /// The server's protocol.
    pub protocol: Protocol,
    /// The model's name on the server.
    pub model: String,
    /// KServe: longer trace inputs are cut to this many tokens (an OpenAI prompt is sent as it
    /// is).
    pub max_length: u32,
    /// Seed of the simulations and of the request data.
    pub seed: u64,
    /// Wall time of each load's run, in nanoseconds.
    pub duration_ns: u64,
    /// Read a Triton's per-request trace after each load and simulate on its timeline.
    pub server_trace: bool,
}

/// A validation against a server under way: the trace at the served lengths, the calibrated
/// capacity, and, once [`Validation::connect`] has checked the server, each load's result.
pub struct Validation<'a> {
    target: &'a mut EndpointScenario,
    service: &'a ServiceModel,
    trace: &'a Trace,
    lengths: Vec<u32>,
    options: EndpointOptions,
    seed: u64,
    duration_ns: u64,
    /// Whether to read the server's trace; its setting once [`Validation::connect`] read it.
    want_server_trace: bool,
    server_trace: Option<TraceSetting>,
    report: EndpointValidation,
}

impl<'a> Validation<'a> {
    /// Sizes the loads: the trace's inputs as the server sees them, and the capacity of the
    /// pool with `service`. `trace` has at least 2 requests.
    pub fn new(
        target: &'a mut EndpointScenario,
        service: &'a ServiceModel,
        run: &EndpointRun,
        trace: &'a Trace,
    ) -> Result<Validation<'a>, ValidationError> {
        let options = EndpointOptions {
            mode: LoadMode::Open,
            timeout: TIMEOUT,
            seed: run.seed,
            max_input_tokens: if run.protocol == Protocol::Kserve {
                run.max_length
            } else {
                u32::MAX
            },
            ..EndpointOptions::new(&run.url, run.protocol, &run.model)
        };
        // What the server sees: KServe inputs cut to --max-length; an OpenAI prompt as it is.
        let lengths = served_lengths(trace, options.max_input_tokens);
        let capacity = CalibratedCapacity::of(&target.pool, service.service.as_ref(), &lengths)
            .ok_or_else(|| {
                ValidationError::BadInput(format!(
                    "the {} times a full batch at 0 ns: no capacity to scale the loads to",
                    service.name
                ))
            })?;
        let report = EndpointValidation {
            endpoint: run.url.clone(),
            protocol: match run.protocol {
                Protocol::Kserve => "kserve",
                Protocol::Openai => "openai",
            }
            .to_string(),
            model: run.model.clone(),
            scenario: target.scenario.name.clone(),
            service_model: service.name.clone(),
            capacity,
            batcher_differences: Vec::new(),
            loads: Vec::new(),
        };
        Ok(Validation {
            target,
            service,
            trace,
            lengths,
            options,
            seed: run.seed,
            duration_ns: run.duration_ns,
            want_server_trace: run.server_trace,
            server_trace: None,
            report,
        })
    }

    /// The calibrated capacity the loads are fractions of.
    pub fn capacity(&self) -> &CalibratedCapacity {
        &self.report.capacity
    }

    /// Checks the server before any load (reachable, serving the model, and, for a Triton,
    /// whether its batcher is the scenario's; with a server trace, that it traces every
    /// request) and warms it up. `warn` gets each line for the user.
    pub fn connect(&mut self, warn: &mut dyn FnMut(String)) -> Result<(), ValidationError> {
        self.report.batcher_differences = check_server(&self.options, &self.target.pool, warn)?;
        if self.want_server_trace {
            self.server_trace = Some(server_trace_setting(&self.options)?);
        }
        crate::replay(
            &warmup_trace(
                self.trace,
                &self.lengths,
                self.options.protocol == Protocol::Openai,
            )?,
            &EndpointOptions {
                mode: LoadMode::Closed {
                    concurrency: 1,
                    think_time: Duration::ZERO,
                },
                ..self.options.clone()
            },
            &Reporting::of(&self.target.scenario),
        )
        .map_err(|e| ValidationError::BadInput(e.to_string()))?;
        Ok(())
    }

    /// sim's options: the run's seed, the service model validated.
    fn sim_options(&self) -> RunOptions {
        RunOptions {
            seed: self.seed,
            service_override: Some(self.service.service.clone()),
            ..RunOptions::default()
        }
    }

    /// sim's figures and batch shares against the run's: the mean of [`SIM_SEEDS`] draws, the
    /// first seed's run (`first`) among them, what it predicts (the server's run is one draw
    /// too); with their p99s' spread.
    fn predicted(
        &self,
        built: &BuiltScenario,
        scaled: &Trace,
        sim_options: &RunOptions,
        first: &Summary,
        measured: &Figures,
        server_shares: &BatchShares,
    ) -> Result<(Simulated, Option<SeedSpread>), ValidationError> {
        let mut draws = vec![Figures::of(first)];
        let mut shares = vec![BatchShares::of(first)];
        for k in 1..u64::from(SIM_SEEDS) {
            let seeded = RunOptions {
                seed: self.seed.wrapping_add(k),
                ..sim_options.clone()
            };
            // Its summary alone: no request log is kept of the seeds after the first.
            let summary = simulate(built, scaled, &seeded)?;
            draws.push(Figures::of(&summary));
            shares.push(BatchShares::of(&summary));
        }
        let sim = Simulated::with_figures(
            first,
            Figures::mean(&draws).expect("one draw at least"),
            BatchShares::mean(&shares),
            measured,
            server_shares,
        );
        Ok((sim, SeedSpread::of(&draws, measured)))
    }

    /// sim again with every batch's compute multiplied by `level`, the server's over the run
    /// against the scenario's (`None` where `level` is no factor): the calibrated model at the
    /// machine's speed during the run, which tells the machine's drift from the model's error.
    fn at_speed(&self, level: f64, on: &Again) -> Result<Option<Simulated>, ValidationError> {
        let Some(service) = ScaledService::new(self.service.service.clone(), level) else {
            return Ok(None);
        };
        let options = RunOptions {
            service_override: Some(Arc::new(service)),
            ..on.options.clone()
        };
        self.again(&self.target.built, &options, on).map(Some)
    }

    /// sim's figures and batch shares (as [`Validation::predicted`]) of `built` with `options`,
    /// for a simulation at the server's measured speed.
    fn again(
        &self,
        built: &BuiltScenario,
        options: &RunOptions,
        on: &Again,
    ) -> Result<Simulated, ValidationError> {
        let first = simulate(built, on.scaled, options)?;
        let (sim, _) = self.predicted(
            built,
            on.scaled,
            options,
            &first,
            on.measured,
            on.server_shares,
        )?;
        Ok(sim)
    }

    /// sim again with each of `windows` (the server's speed window by window over the run) a
    /// slowdown of its execution: the calibrated model at the machine's speed as the run
    /// measured it, window by window. `None` without a window.
    fn by_window(
        &mut self,
        windows: &[SpeedWindow],
        on: &Again,
    ) -> Result<Option<Simulated>, ValidationError> {
        if windows.is_empty() {
            return Ok(None);
        }
        let ns = |s: f64| DurationNs(round_ns(s * 1e9));
        let slowdowns = windows
            .iter()
            .map(|w| SlowdownSpec {
                from: ns(w.from_s),
                to: ns(w.to_s),
                factor: w.level,
            })
            .collect();
        let mut scenario = self.target.scenario.clone();
        scenario
            .set_replay(ReplayInputs {
                slowdowns,
                ..ReplayInputs::default()
            })
            .map_err(ValidationError::context(
                "setting the server's speed window by window",
            ))?;
        let built = build_scenario(&scenario, &mut self.target.profiles)?;
        self.again(&built, on.options, on).map(Some)
    }

    /// The records of sim's simulation of `scaled` with the scenario's speed held at its model's
    /// (`execution.speed_levels` set to one level) where the scenario makes it wander; `None`
    /// where it does not (sim's own records time the batches then).
    fn at_model_speed(
        &mut self,
        scaled: &Trace,
        options: &RunOptions,
    ) -> Result<Option<Vec<RequestRecord>>, ValidationError> {
        if self.target.pool.slowdowns.process().is_none() {
            return Ok(None);
        }
        let mut scenario = self.target.scenario.clone();
        scenario
            .set("execution.speed_levels", "[1.0]")
            .map_err(ValidationError::context(
                "holding the scenario's speed at its model's",
            ))?;
        let built = build_scenario(&scenario, &mut self.target.profiles)?;
        let (_, log) = simulate_with_requests(&built, scaled, options)?;
        Ok(Some(log.records().to_vec()))
    }

    /// trace-sim of the load just run (with `--server-trace`; `traced_before`, the trace files
    /// flushed before it), what the trace said, or why there is none.
    fn traced(
        &mut self,
        traced_before: Option<&Vec<PathBuf>>,
        run: &ServerRun,
        on: &Again,
        dir: &Path,
    ) -> Result<TraceSimResult, ValidationError> {
        let (Some(setting), Some(before)) = (&self.server_trace, traced_before) else {
            return Ok((None, None, None));
        };
        let inputs = TraceSimInputs {
            url: &self.options.base_url,
            setting,
            before,
            scaled: on.scaled,
            run: &run.measured,
            scenario: &self.target.scenario,
            pool: &self.target.pool,
            seed: self.seed,
            figures: on.measured,
            server_shares: on.server_shares,
        };
        Ok(match trace_sim(&inputs, &mut self.target.profiles, dir)? {
            Ok((sim, timeline)) => (Some(sim), Some(timeline), None),
            Err(why) => (None, None, Some(why)),
        })
    }

    /// Runs the load `load` (a fraction of the capacity) against the server and its
    /// simulations, writes its records under `out/load-30` (for 0.3), and returns its
    /// comparison (also kept for [`Validation::finish`]). `warn` gets each line for the user.
    pub fn run_load(
        &mut self,
        load: f64,
        out: &Path,
        warn: &mut dyn FnMut(String),
    ) -> Result<&LoadValidation, ValidationError> {
        let dir = &out.join(format!("load-{:.0}", load * 100.0));
        let rate_rps = load * self.report.capacity.rate_rps;
        let openai = self.options.protocol == Protocol::Openai;
        let scaled = scaled_trace(
            self.trace,
            &self.lengths,
            rate_rps,
            self.duration_ns,
            openai,
        )?;
        let traced_before = match &self.server_trace {
            Some(setting) => Some(flushed_trace_files(&self.options.base_url, setting)?),
            None => None,
        };
        let run = measure(&scaled, &self.options, &self.target.scenario, warn)?;
        let sim_options = self.sim_options();
        let (sim_run, sim_log) = simulate_with_requests(&self.target.built, &scaled, &sim_options)?;
        let stats = run.stats.as_ref();
        let (figures, server_shares) = run.figures();
        let (sim, sim_spread) = self.predicted(
            &self.target.built,
            &scaled,
            &sim_options,
            &sim_run.summary,
            &figures,
            &server_shares,
        )?;
        // The scenario's time of each batch at its model's speed: a wandering speed
        // (`execution.speed_levels`) drawn into sim's windows would pass for the server's.
        let steady = self.at_model_speed(&scaled, &sim_options)?;
        let timing = steady.as_deref().unwrap_or(sim_log.records());
        let compute_by_batch_size = drift(stats, timing);
        let compute_level = ComputeDrift::overall_level(&compute_by_batch_size);
        let on = Again {
            scaled: &scaled,
            options: &sim_options,
            measured: &figures,
            server_shares: &server_shares,
        };
        let sim_at_server_speed = match compute_level {
            Some(level) => self.at_speed(level, &on)?,
            None => None,
        };
        let speed_windows = speed_windows(&run.speed_samples, timing);
        let sim_by_window = self.by_window(&speed_windows, &on)?;
        let run_sim = self.run_sim(&run, &scaled, &sim_options, &compute_by_batch_size, dir)?;
        std::fs::create_dir_all(dir).map_err(|source| ValidationError::OutDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        write_records(dir, &self.target.pool, &run, &sim_log, run_sim.log.as_ref())?;
        let (trace_sim, server_timeline, trace_sim_missing) =
            self.traced(traced_before.as_ref(), &run, &on, dir)?;
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
            sim_seeds: SIM_SEEDS,
            sim_spread,
            run_sim: run_sim
                .run
                .as_ref()
                .map(|r| Simulated::new(&r.summary, &figures, &server_shares)),
            run_sim_missing: run_sim.service.is_none().then(|| {
                run.stats_missing
                    .clone()
                    .unwrap_or_else(|| "the server reported no batch for this run".to_string())
            }),
            run_service: run_sim.service,
            compute_level,
            sim_at_server_speed,
            speed_windows,
            sim_by_window,
            compute_by_batch_size,
            server_batch_shares: server_shares,
            trace_sim,
            server_timeline,
            trace_sim_missing,
        };
        self.report.loads.push(result);
        Ok(self.report.loads.last().expect("just pushed"))
    }

    /// The run-driven simulation of one load (none without the server's batch times): the
    /// service model brought to the server's level for each batch size (or the server's means
    /// alone), between the client and the server as they were.
    fn run_sim(
        &mut self,
        run: &ServerRun,
        scaled: &Trace,
        sim_options: &RunOptions,
        compute_by_batch_size: &[ComputeDrift],
        dir: &Path,
    ) -> Result<RunSim, ValidationError> {
        let stats = run.stats.as_ref();
        let run_service = stats.and_then(|s| MeasuredService::new(&s.batch_times()));
        // The model's own times (their dependence on the inputs, their spread) brought to the
        // server's level for each batch size; the server's means alone where the model ran no
        // batch of a size the server did.
        let levels: Vec<(u32, f64)> = compute_by_batch_size
            .iter()
            .filter_map(|d| d.level().map(|level| (d.batch_size, level)))
            .collect();
        let leveled = LeveledService::new(self.service.service.clone(), &levels);
        let run_sim_service: Option<Arc<dyn ServiceTime>> = match (&leveled, &run_service) {
            (Some(leveled), _) => Some(Arc::new(leveled.clone())),
            (None, Some(measured)) => Some(Arc::new(measured.clone())),
            (None, None) => None,
        };
        // The run-sim runs between the client and the server as they were: the path outside
        // the server as measured, in place of the scenario's network, gateway and processing.
        let overheads =
            ServerOverheads::of_run(stats, &run.measured.records, dir.join("measured.parquet"));
        let simulated = match &run_sim_service {
            Some(service) => {
                let options = RunOptions {
                    service_override: Some(service.clone()),
                    ..sim_options.clone()
                };
                let on_path = match &overheads {
                    Some(o) => {
                        let mut on_path = self.target.scenario.clone();
                        o.apply_as_path(&mut on_path)
                            .map_err(ValidationError::context(
                                "setting the measured path in the scenario",
                            ))?;
                        Some(build_scenario(&on_path, &mut self.target.profiles)?)
                    }
                    None => None,
                };
                let run_built = on_path.as_ref().unwrap_or(&self.target.built);
                Some(simulate_with_requests(run_built, scaled, &options)?)
            }
            None => None,
        };
        let (run, log) = simulated.map_or((None, None), |(r, l)| (Some(r), Some(l)));
        Ok(RunSim {
            run,
            log,
            service: run_service.as_ref().map(|s| RunService {
                batch_sizes: s.sizes().to_vec(),
                fit_a_ms: s.fit().a_ns * 1e-6,
                fit_b_ms: s.fit().b_ns * 1e-6,
                leveled: leveled.is_some(),
                path: overheads.as_ref().map(|o| MeasuredPath {
                    one_way_ms: o.one_way_ns() as f64 * 1e-6,
                    server_outside_ms: o.outside_ns() as f64 * 1e-6,
                }),
            }),
        })
    }

    /// The whole validation, every load run so far in order.
    pub fn finish(self) -> EndpointValidation {
        self.report
    }
}

/// The run-driven simulation of one load and the service it ran with.
struct RunSim {
    run: Option<Run>,
    log: Option<RequestLog>,
    service: Option<RunService>,
}

/// Writes a load's records: the measured run's, the scenario-driven simulation's and the
/// run-driven one's.
fn write_records(
    dir: &Path,
    pool: &Pool,
    run: &ServerRun,
    sim_log: &RequestLog,
    run_sim_log: Option<&RequestLog>,
) -> Result<(), ValidationError> {
    let pools = std::slice::from_ref(&pool.name);
    write_requests_parquet(
        &dir.join("measured.parquet"),
        &run.measured.records,
        &["endpoint".to_string()],
    )?;
    write_requests_parquet(&dir.join("simulated.parquet"), sim_log.records(), pools)?;
    if let Some(log) = run_sim_log {
        write_requests_parquet(&dir.join("simulated-run.parquet"), log.records(), pools)?;
    }
    Ok(())
}

/// How far the server's compute over a run may stray from the service model's, either way,
/// before validate warns that the machine's speed moved since the calibration.
pub const SPEED_WARNING_LEVEL: f64 = 0.10;

impl LoadValidation {
    /// The warning for a load whose generator sent 1% of its requests more than a millisecond
    /// late: the measured latencies include the client's delay.
    pub fn late_sends_warning(&self) -> Option<String> {
        let delay_ms = self.measured.schedule_delay_p99_ms.filter(|&d| d > 1.0)?;
        Some(format!(
            "validate: warning: at {:.0}% load the load generator sent 1% of its requests more than {delay_ms:.1} ms late: the measured latencies include the client's delay",
            self.load * 100.0
        ))
    }

    /// The warning for a load whose server computed its batches more than
    /// `SPEED_WARNING_LEVEL` (10%) faster or slower than the service model times them: the machine
    /// ran at another speed than the one calibrated, and the prediction is for the calibrated.
    pub fn speed_warning(&self) -> Option<String> {
        let level = self.compute_level?;
        ((level - 1.0).abs() > SPEED_WARNING_LEVEL).then(|| {
            format!(
                "validate: warning: at {:.0}% load the server's batches took {level:.2}x the compute the scenario gives them (its own statistics over the run): the machine ran {} than calibrated, and the simulation predicts the calibrated speed; calibrate again closer to the run, or on a quieter machine",
                self.load * 100.0,
                if level < 1.0 { "faster" } else { "slower" }
            )
        })
    }
}

/// The server's trace setting, when it can give a run's per-request timestamps (else why not).
fn server_trace_setting(options: &EndpointOptions) -> Result<TraceSetting, ValidationError> {
    if options.protocol != Protocol::Kserve {
        return Err(ValidationError::BadInput(
            "--server-trace reads Triton's trace: it needs --protocol kserve".into(),
        ));
    }
    let setting = trace::trace_setting(&options.base_url).map_err(|e| {
        ValidationError::BadInput(format!(
            "--server-trace: the server gives no Triton trace setting ({e})"
        ))
    })?;
    if let Some(problem) = setting.problem() {
        return Err(ValidationError::BadInput(format!(
            "--server-trace: the server at {} cannot give every request's timestamps: {problem}",
            options.base_url
        )));
    }
    Ok(setting)
}

/// The trace's first [`WARMUP_REQUESTS`] requests, with the served lengths, 1 ms apart (sent one
/// at a time, so their times do not matter).
fn warmup_trace(
    trace: &Trace,
    lengths: &[u32],
    keep_output_tokens: bool,
) -> Result<Trace, ValidationError> {
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
    Trace::from_columns(columns).map_err(ValidationError::context("building the warm-up trace"))
}

/// Checks the server before any load: reachable, serving the model (else the error), and, for
/// a Triton, whether its batcher is the scenario's (each difference given to `warn` and
/// returned).
fn check_server(
    options: &EndpointOptions,
    pool: &Pool,
    warn: &mut dyn FnMut(String),
) -> Result<Vec<String>, ValidationError> {
    if options.protocol != Protocol::Kserve {
        warn(
            "validate: the run-driven simulation needs the server's compute time per batch size, which only Triton's statistics give: with --protocol openai only the scenario-driven one runs".to_string(),
        );
        return Ok(Vec::new());
    }
    let differences = match triton::batcher_config(&options.base_url, &options.model) {
        Ok(config) => config.differences(pool),
        Err(e @ (EndpointError::Unreachable { .. } | EndpointError::BadUrl { .. })) => {
            return Err(ValidationError::BadInput(e.to_string()));
        }
        // Not a Triton, or no such model: the replay's own check names which.
        Err(_) => Vec::new(),
    };
    for difference in &differences {
        warn(format!(
            "validate: warning: {difference}; the comparison measures that difference too (fix the scenario or --set it)"
        ));
    }
    Ok(differences)
}

/// What a simulation of a load beside its run is fed and compared with: the scaled trace, sim's
/// options, the measured figures and the server's batch shares.
struct Again<'t> {
    scaled: &'t Trace,
    options: &'t RunOptions,
    measured: &'t Figures,
    server_shares: &'t BatchShares,
}

/// trace-sim's comparison, what the server's trace said, and why there is none.
type TraceSimResult = (
    Option<Simulated>,
    Option<ServerTimelineReport>,
    Option<String>,
);

/// A measured run with the server's statistics for it.
struct ServerRun {
    measured: MeasuredRun,
    /// What the server counted during the run (Triton only).
    stats: Option<ModelStats>,
    /// Why `stats` is missing.
    stats_missing: Option<String>,
    /// The statistics read every [`WINDOW`](super::speed_windows::WINDOW) during the run, each
    /// with its time since the run's start in ns, the last read after it (none without
    /// statistics).
    speed_samples: Vec<(u64, ModelStats)>,
}

impl ServerRun {
    /// The run's measured figures (the queue's mean from the server's statistics) and the
    /// server's batch shares (none without statistics).
    fn figures(&self) -> (Figures, BatchShares) {
        let stats = self.stats.as_ref();
        let server_shares = stats.map_or_else(BatchShares::default, |s| {
            BatchShares::from_counts(s.batch_stats.iter().map(|b| (b.batch_size, b.executions())))
        });
        let mut figures = Figures::of(&self.measured.summary);
        figures.queue_mean_ms = stats
            .and_then(ModelStats::queue_mean_ns)
            .map(|ns| ns * 1e-6);
        (figures, server_shares)
    }
}

/// Replays `trace` against the server, reading its statistics before and after.
fn measure(
    trace: &Trace,
    options: &EndpointOptions,
    scenario: &Scenario,
    warn: &mut dyn FnMut(String),
) -> Result<ServerRun, ValidationError> {
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
    // Read every 2 s during the run too, for the server's speed window by window.
    let poller = before
        .is_ok()
        .then(|| StatsPoller::start(&options.base_url, &options.model, WINDOW));
    let measured = crate::replay(trace, options, &Reporting::of(scenario));
    let after = snapshot();
    let speed_samples = poller.map_or_else(Vec::new, |p| p.finish(after.as_ref().ok()));
    let measured = measured.map_err(|e| ValidationError::BadInput(e.to_string()))?;
    let (stats, stats_missing) = match (before, after) {
        (Ok(before), Ok(after)) => (Some(after.since(&before)), None),
        (Err(why), _) | (_, Err(why)) => (None, Some(why)),
    };
    if let Some(stats) = &stats {
        // Triton counts every request it ran; more than were sent means other traffic.
        let sent = measured.records.len() as u64;
        if stats.inference_count > sent {
            warn(format!(
                "validate: warning: the server ran {} requests during a run that sent {sent}: other clients' requests are in its statistics",
                stats.inference_count
            ));
        }
    }
    Ok(ServerRun {
        measured,
        stats,
        stats_missing,
        speed_samples,
    })
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
