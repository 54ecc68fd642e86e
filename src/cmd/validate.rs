//! `capsim validate`: the simulator against a live replay of the same arrivals, at 30%, 60% and
//! 85% of the profile's calibrated capacity; with `--endpoint URL`, against a running server
//! ([`endpoint`]).

mod endpoint;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use capsim_calibrate::Runtime;
use capsim_calibrate::check_model_file;
use capsim_calibrate::live::{LiveConfig, LiveRequest, replay};
use capsim_calibrate::probe::SpeedProbe;
use capsim_endpoint::{
    BatchReport, CalibratedCapacity, Leveled, ValidationError, check_loads, figure_rows,
    figures_header, figures_text, measurement_mismatch, scaled_trace, served_lengths,
};
use capsim_sim::output::write_requests_parquet;
use capsim_sim::quantity::parse_duration_ns;
use capsim_sim::timing::profile::{Profile, ProfileServiceTime};
use capsim_sim::timing::service::ScaledService;
use capsim_sim::{
    BuiltScenario, RunOptions, Scenario, ServiceTime, Summary, simulate, simulate_with_requests,
};
use capsim_trace::Trace;
use clap::Args;

use super::BadInput;
use super::shared::runtime::{cpu_wait_share, load_runtime, user_facing};
use super::shared::server::{ProtocolArg, ServerArgs, live_summary};

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The live server; its scenario's default pool is also simulated, with the profile's times.
    #[command(flatten)]
    pub server: ServerArgs,
    /// Validate against a running server at this URL (`http://HOST:PORT`) instead of the
    /// in-process live server: the trace is sent to it in its time (open loop), and the
    /// simulation is also run with the service times the server reported (Triton's statistics).
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// With --endpoint: the server's protocol (the server's own service times need Triton's
    /// statistics, so `openai` gets the scenario-driven simulation only).
    #[arg(long, value_enum, default_value = "kserve")]
    pub protocol: ProtocolArg,
    /// The model's calibration profile (from `capsim calibrate`), used by the simulation
    /// (required without --endpoint; with it, the scenario's `[service]` is used when absent).
    #[arg(
        long,
        value_name = "PROFILE.json",
        required_unless_present = "endpoint"
    )]
    pub profile: Option<PathBuf>,
    /// Override a scenario key, e.g. `instances=1` (repeatable); the server and the
    /// simulations see the overridden scenario.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,
    /// Loads as fractions of the calibrated capacity.
    #[arg(long, value_delimiter = ',', default_value = "0.3,0.6,0.85")]
    pub loads: Vec<f64>,
    /// Wall time of each live run.
    #[arg(long, default_value = "20s", value_name = "DURATION")]
    pub duration: String,
    /// With --endpoint, a Triton on this machine tracing every request at level TIMESTAMPS
    /// (`--trace-config triton,file=PATH --trace-config level=TIMESTAMPS --trace-config rate=1
    /// --trace-config triton,log-frequency=1000`; `scripts/triton.py start --trace` does):
    /// after each load its trace is written out and read, and a third simulation (trace-sim)
    /// runs on the run's own timeline: requests arriving when Triton queued them, batch times
    /// fitted to its batches and stretched where they ran slow, its hand-over between batches
    /// and its stalled dispatches. What is left to differ is the queue and the batcher.
    #[arg(long, requires = "endpoint")]
    pub server_trace: bool,
    /// Longest input; longer trace inputs are cut to it in every run (default: 64; with
    /// --endpoint 512, as `replay --endpoint`).
    #[arg(long, value_name = "TOKENS")]
    pub max_length: Option<u32>,
    /// Seed of the simulation and of the live input data.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also write both runs' per-request records, `DIR/load-30/{simulated,measured}.parquet`
    /// (same columns as `capsim simulate`'s requests.parquet), to compare them request by
    /// request. With --endpoint also the run-driven simulation's (`simulated-run.parquet`) and
    /// `validation.json` with every figure printed (default: output/validate-endpoint).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// The library's error as the command reports it: bad input (exit code 2) as [`BadInput`], a
/// simulator's error as itself (so its exit code is the simulator's), the rest with its context.
fn failed(e: ValidationError) -> anyhow::Error {
    match e {
        ValidationError::BadInput(message) => BadInput(message).into(),
        ValidationError::OutDir { dir, source } => BadInput(format!(
            "--out: cannot create the folder {} ({source}); pass a path in a folder you can write",
            dir.display()
        ))
        .into(),
        ValidationError::Sim(e) => e.into(),
        ValidationError::Output(e) => e.into(),
        e @ ValidationError::Context { .. } => e.into(),
    }
}

pub fn run(args: ValidateArgs) -> Result<()> {
    if let Some(url) = &args.endpoint {
        return endpoint::run(&args, url);
    }
    let mut live = LiveValidation::prepare(&args)?;
    print!("{}", figures_header());
    for &load in &args.loads {
        live.run_load(&args, load)?;
    }
    Ok(())
}

/// A validation against capsim's own live server: the scenario built, the profile's times, the
/// trace at the served lengths and the capacity the loads are fractions of, with the runtime
/// and the machine-speed probe.
struct LiveValidation {
    scenario: Scenario,
    built: BuiltScenario,
    service: Arc<ProfileServiceTime>,
    /// The calibration's share of execution time spent waiting for a CPU, as printed.
    calibration_wait: String,
    trace: Trace,
    lengths: Vec<u32>,
    max_length: u32,
    duration_ns: u64,
    capacity_rps: f64,
    runtime: Runtime,
    config: LiveConfig,
    probe: SpeedProbe,
}

impl LiveValidation {
    /// Checks the flags, the scenario, the model and the profile, reads the trace and prints
    /// the calibrated capacity; loads ONNX Runtime and the probe.
    fn prepare(args: &ValidateArgs) -> Result<LiveValidation> {
        let server = &args.server;
        let mut scenario = server.served_scenario()?;
        super::apply_sets(&mut scenario, &args.sets)?;
        // capsim's own live server forms a batch when a model instance frees up: no payloads ahead.
        scenario.set("batcher.prefetch", "false")?;
        let built = super::build_scenario(&scenario, &mut capsim_sim::Profiles::default())?;
        check_loads(&args.loads).map_err(failed)?;
        let duration_ns =
            parse_duration_ns(&args.duration).map_err(|e| BadInput(format!("--duration: {e}")))?;
        check_model_file(&server.model).map_err(user_facing)?;
        let profile_path = args
            .profile
            .as_ref()
            .ok_or_else(|| BadInput("--profile is required without --endpoint".into()))?;
        let profile = Profile::read(profile_path).map_err(|e| BadInput(e.to_string()))?;
        if let Some(warning) = measurement_mismatch(&profile, &scenario, server.threads) {
            eprintln!("validate: warning: {warning}");
        }
        let service = Arc::new(ProfileServiceTime::new(&profile));
        let calibration_wait = cpu_wait_share(&profile).map_or_else(
            || "not recorded".to_string(),
            |s| format!("{:.1}%", 100.0 * s),
        );
        let loaded = server.input.load()?;
        eprintln!("{}", loaded.report_line());
        let trace = loaded.trace;
        if trace.len() < 2 {
            return Err(
                BadInput("capsim validate needs a trace of at least 2 requests".into()).into(),
            );
        }
        let max_length = args.max_length.unwrap_or(64).max(1);
        let lengths = served_lengths(&trace, max_length);

        // Calibrated capacity: every model instance running full batches of a typical (mean) length.
        let capacity = CalibratedCapacity::of(&scenario.pools()[0], service.as_ref(), &lengths)
            .ok_or_else(|| BadInput("the profile times a full batch at 0 ns".into()))?;
        println!(
            "calibrated capacity: {:.1} rps ({} model instances, batches of {} padded to {} tokens on average, inputs {} tokens on average)",
            capacity.rate_rps,
            capacity.model_instances,
            capacity.max_batch_size,
            capacity.padded_input_tokens,
            capacity.mean_input_tokens
        );

        let runtime = load_runtime(server.ort_lib.as_deref())?;
        // The token ids the profile was measured with (their values do not change the time).
        let config = server.live_config(max_length, profile.settings.vocab, args.seed);
        let probe = SpeedProbe::new(
            &runtime,
            &server.model,
            config.provider,
            config.intra_threads,
            &profile,
        )
        .map_err(user_facing)?;
        Ok(LiveValidation {
            scenario,
            built,
            service,
            calibration_wait,
            trace,
            lengths,
            max_length,
            duration_ns,
            capacity_rps: capacity.rate_rps,
            runtime,
            config,
            probe,
        })
    }

    /// One load: the simulation, the live run between two probes of the machine's speed, the
    /// records under `--out`, and what they add up to, printed.
    fn run_load(&mut self, args: &ValidateArgs, load: f64) -> Result<()> {
        let pool = &self.scenario.pools()[0];
        // Compress (or stretch) the trace's gaps to the target rate; keep `duration` of it.
        let scaled = scaled_trace(
            &self.trace,
            &self.lengths,
            load * self.capacity_rps,
            self.duration_ns,
            false,
        )
        .map_err(failed)?;
        let requests: Vec<LiveRequest> = scaled
            .arrival_ns()
            .iter()
            .zip(scaled.input_tokens())
            .map(|(&arrival_ns, &input_tokens)| LiveRequest {
                arrival_ns,
                input_tokens,
                output_tokens: 0,
            })
            .collect();
        let mut options = RunOptions {
            seed: args.seed,
            service_override: Some(self.service.clone() as Arc<dyn ServiceTime>),
            ..RunOptions::default()
        };
        let (simulated_run, simulated_log) =
            simulate_with_requests(&self.built, &scaled, &options)?;
        let simulated: Summary = simulated_run.summary;
        let before = self.probe.slowdown(PROBE_RUNS).map_err(user_facing)?;
        let live = replay(&self.runtime, pool, &requests, &self.config).map_err(user_facing)?;
        let after = self.probe.slowdown(PROBE_RUNS).map_err(user_facing)?;
        let measured = live_summary(&self.scenario, args.seed, &live, capsim_sim::Warmup::None);
        if let Some(out) = &args.out {
            let dir = out.join(format!("load-{:.0}", load * 100.0));
            super::create_out_dir(&dir, "--out")?;
            let pools = std::slice::from_ref(&pool.name);
            write_requests_parquet(
                &dir.join("simulated.parquet"),
                simulated_log.records(),
                pools,
            )?;
            write_requests_parquet(&dir.join("measured.parquet"), &live.records, pools)?;
        }
        print!(
            "{}",
            figures_text(load, &figure_rows(&simulated, &measured))
        );
        if let Some(wait_ns) = live.cpu_wait_ns {
            println!(
                "{:>4.0}% live model instances waited for a CPU (held by other threads or \
                 processes) {:.1}% of their execution time; the calibration: {}",
                load * 100.0,
                100.0 * wait_ns as f64 / live.busy_ns().max(1) as f64,
                self.calibration_wait
            );
        }
        let batches = BatchReport::of(&live.records, &self.service, self.max_length);
        print!("{}", batches.text(load));
        if let Some(level) = batches.level {
            // A diagnostic, not the validation: the simulation again, with the profile's times
            // brought to the level the live batches ran at, leaves the serving model's own error.
            let leveled = ScaledService::new(self.service.clone(), level)
                .context("the live batches' level of the profile's times")?;
            options.service_override = Some(Arc::new(leveled));
            let leveled_summary = simulate(&self.built, &scaled, &options)?;
            print!(
                "{}",
                Leveled::of(level, &leveled_summary, &measured).text(load)
            );
        }
        print_machine_speed(load, &self.probe, before, after);
        Ok(())
    }
}

/// Timed runs of the reference batch before and after each live run.
const PROBE_RUNS: u32 = 30;

/// Beyond this change of the machine's speed since the calibration (either way), the errors
/// above say more about the machine than about the simulator.
const SPEED_CHANGE_WARNING: f64 = 0.10;

fn print_machine_speed(load: f64, probe: &SpeedProbe, before: f64, after: f64) {
    let reference = probe.reference();
    let at = match reference.length {
        Some(length) => format!("batch {}, length {length}", reference.batch_size),
        None => format!("batch {}", reference.batch_size),
    };
    println!(
        "{:>4.0}% machine speed: the reference batch ({at}) took {before:.2}x its calibrated \
             median time before the live run and {after:.2}x after",
        load * 100.0
    );
    let worst = if (before - 1.0).abs() > (after - 1.0).abs() {
        before
    } else {
        after
    };
    if (worst - 1.0).abs() > SPEED_CHANGE_WARNING {
        eprintln!(
            "validate: warning: at {:.0}% load the machine ran the reference batch at {worst:.2}x \
             its calibrated time, so these errors mostly measure the machine's change of speed: \
             calibrate and validate on a quiet machine, one right after the other",
            load * 100.0
        );
    }
}
