//! `capsim validate`: the simulator against a live replay of the same arrivals, at 30%, 60% and
//! 85% of the profile's calibrated capacity; with `--endpoint URL`, against a running server
//! ([`endpoint`]).

mod endpoint;

use std::path::PathBuf;

use anyhow::Result;
use capsim_calibrate::live::{LiveConfig, LiveRequest, replay};
use capsim_calibrate::probe::SpeedProbe;
use capsim_calibrate::{CalibrateError, Runtime, check_model_file};
use capsim_endpoint::{
    LiveError, LiveInputs, LiveRecords, LiveServer, LiveValidation, MachineSpeed, ReferenceShape,
    ValidationError, check_loads, figures_header, measurement_mismatch,
};
use capsim_sim::Scenario;
use capsim_sim::quantity::parse_duration_ns;
use capsim_sim::timing::profile::Profile;
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
        // The live server's and the probe's errors are calibrate's, reported as it reports them.
        ValidationError::Live(e) => match e.downcast::<CalibrateError>() {
            Ok(e) => user_facing(*e),
            Err(e) => anyhow::anyhow!(e),
        },
        e @ ValidationError::Context { .. } => e.into(),
    }
}

pub fn run(args: ValidateArgs) -> Result<()> {
    if let Some(url) = &args.endpoint {
        return endpoint::run(&args, url);
    }
    let (validation, mut server, mut probe) = prepare(&args)?;
    print!("{}", figures_header());
    for &load in &args.loads {
        let result = validation
            .run_load(load, &mut server, &mut probe)
            .map_err(failed)?;
        print!("{}", result.text());
        if let Some(warning) = result.speed_warning() {
            eprintln!("validate: warning: {warning}");
        }
    }
    Ok(())
}

/// Checks the flags, the scenario, the model and the profile, reads the trace and prints the
/// calibrated capacity; loads ONNX Runtime, the live server and the machine-speed probe.
fn prepare(args: &ValidateArgs) -> Result<(LiveValidation, OwnServer, Probe)> {
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
    let loaded = server.input.load()?;
    eprintln!("{}", loaded.report_line());
    let max_length = args.max_length.unwrap_or(64).max(1);
    // The token ids the profile was measured with (their values do not change the time).
    let config = server.live_config(max_length, profile.settings.vocab, args.seed);
    let validation = LiveValidation::new(LiveInputs {
        scenario: scenario.clone(),
        built,
        calibration_cpu_wait: cpu_wait_share(&profile),
        profile: profile.clone(),
        trace: loaded.trace,
        max_length,
        duration_ns,
        seed: args.seed,
        out: args.out.clone(),
    })
    .map_err(failed)?;
    print!("{}", validation.capacity_text());

    let runtime = load_runtime(server.ort_lib.as_deref())?;
    let probe = SpeedProbe::new(
        &runtime,
        &server.model,
        config.provider,
        config.intra_threads,
        &profile,
    )
    .map_err(user_facing)?;
    let own = OwnServer {
        runtime,
        scenario,
        config,
        seed: args.seed,
    };
    Ok((validation, own, Probe(probe)))
}

/// capsim's own live server (`capsim_calibrate`'s replay), serving the scenario's default pool.
struct OwnServer {
    runtime: Runtime,
    scenario: Scenario,
    config: LiveConfig,
    seed: u64,
}

impl LiveServer for OwnServer {
    fn serve(&mut self, requests: &Trace) -> Result<LiveRecords, LiveError> {
        let requests: Vec<LiveRequest> = requests
            .arrival_ns()
            .iter()
            .zip(requests.input_tokens())
            .map(|(&arrival_ns, &input_tokens)| LiveRequest {
                arrival_ns,
                input_tokens,
                output_tokens: 0,
            })
            .collect();
        let pool = &self.scenario.pools()[0];
        let live = replay(&self.runtime, pool, &requests, &self.config)?;
        let summary = live_summary(&self.scenario, self.seed, &live, capsim_sim::Warmup::None);
        Ok(LiveRecords {
            summary,
            cpu_wait_ns: live.cpu_wait_ns,
            busy_ns: live.busy_ns(),
            records: live.records,
        })
    }
}

/// `capsim_calibrate`'s probe of the machine's speed.
struct Probe(SpeedProbe);

impl MachineSpeed for Probe {
    fn slowdown(&mut self, runs: u32) -> Result<f64, LiveError> {
        Ok(self.0.slowdown(runs)?)
    }

    fn reference(&self) -> ReferenceShape {
        let reference = self.0.reference();
        ReferenceShape {
            batch_size: reference.batch_size,
            length: reference.length,
        }
    }
}
