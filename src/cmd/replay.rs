//! `capsim replay --live`: run a trace in wall time through a real in-process server (arrival
//! timer, queue, dynamic batcher, ONNX Runtime sessions) and write the same files as
//! `capsim simulate`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use capsim_calibrate::check_model_file;
use capsim_calibrate::live::{
    LiveConfig, LiveRequest, LiveRun, check_servable, live_interval_ns, replay, timeseries_of,
};
use capsim_sim::Scenario;
use capsim_sim::output::{write_requests_parquet, write_summary_json, write_timeseries_parquet};
use capsim_sim::summary::SummaryBuilder;
use clap::Args;

use super::BadInput;
use super::calibrate::{Ep, load_runtime, user_facing};
use crate::input::TraceInput;

/// The live server's flags, shared by `replay --live` and `validate`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The scenario: its default pool's instances, execution and batcher are served live.
    #[arg(long, value_name = "S.toml")]
    pub scenario: PathBuf,
    #[command(flatten)]
    pub input: TraceInput,
    /// The ONNX model each model instance runs.
    #[arg(long, value_name = "MODEL.onnx")]
    pub model: PathBuf,
    /// Execution provider.
    #[arg(long, value_enum, default_value = "cpu")]
    pub ep: Ep,
    /// ONNX Runtime intra-op threads per model instance (0: its default; validate: use what the
    /// profile was measured with).
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub threads: u32,
    /// The model's input-length dimension (default: its only dynamic one besides the batch).
    #[arg(long, value_name = "NAME")]
    pub length_dim: Option<String>,
    /// ONNX Runtime shared library (see `capsim calibrate --help`).
    #[arg(long, value_name = "libonnxruntime.so")]
    pub ort_lib: Option<PathBuf>,
}

impl ServerArgs {
    /// Reads the scenario and checks that the live server can serve it: one pool, with the
    /// dynamic batcher.
    pub(super) fn served_scenario(&self) -> Result<Scenario> {
        let scenario = Scenario::from_path(&self.scenario).map_err(|e| BadInput(e.to_string()))?;
        if scenario.pools().len() > 1 {
            return Err(BadInput(format!(
                "scenario {}: the live replay serves the default pool only; remove the [pools.*] sections",
                self.scenario.display()
            ))
            .into());
        }
        check_servable(&scenario.pools()[0]).map_err(user_facing)?;
        Ok(scenario)
    }

    /// The live server's settings for these flags.
    pub(super) fn live_config(&self, max_length: u32, vocab: u64, seed: u64) -> LiveConfig {
        LiveConfig {
            model: self.model.clone(),
            provider: self.ep.into(),
            intra_threads: self.threads,
            length_dim: self.length_dim.clone(),
            max_length,
            vocab,
            seed,
        }
    }
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Run in wall time through a real server (the only mode).
    #[arg(long)]
    pub live: bool,
    #[command(flatten)]
    pub server: ServerArgs,
    /// Longest input the model takes; longer trace inputs are cut to it (and counted).
    #[arg(long, default_value_t = 512, value_name = "TOKENS")]
    pub max_length: u32,
    /// Integer (token id) inputs are drawn below this.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub vocab: u64,
    /// Seed of the input data (recorded in the summary).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output directory (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: PathBuf,
}

pub fn run(args: ReplayArgs) -> Result<()> {
    if !args.live {
        return Err(BadInput(
            "capsim replay needs --live (the only mode: a real in-process server)".into(),
        )
        .into());
    }
    let server = &args.server;
    let scenario = server.served_scenario()?;
    let pool = &scenario.pools()[0];
    check_model_file(&server.model).map_err(user_facing)?;
    let loaded = server.input.load()?;
    eprintln!("{}", loaded.report_line());
    let trace = &loaded.trace;
    let outputs = trace.output_tokens();
    let requests: Vec<LiveRequest> = (0..trace.len())
        .map(|i| LiveRequest {
            arrival_ns: trace.arrival_ns()[i],
            input_tokens: trace.input_tokens()[i],
            output_tokens: outputs.map_or(0, |o| o[i]),
        })
        .collect();
    let runtime = load_runtime(server.ort_lib.as_deref())?;
    let config = server.live_config(args.max_length.max(1), args.vocab, args.seed);
    let span_s = requests.last().map_or(0.0, |r| r.arrival_ns as f64 * 1e-9);
    eprintln!(
        "replay: {} requests over {span_s:.1}s of wall time; queue, batcher and execution are live, \
         the scenario's network, gateway, pre- and post-processing are not reproduced",
        requests.len()
    );
    let live = replay(&runtime, pool, &requests, &config).map_err(user_facing)?;
    if live.truncated_inputs > 0 {
        eprintln!(
            "replay: {} inputs longer than --max-length {} were cut to it",
            live.truncated_inputs, config.max_length
        );
    }

    let summary = live_summary(&scenario, args.seed, &live);
    let model_instances = live.utilization.len() as u32;
    let timeseries = timeseries_of(
        &live,
        (summary.timeseries_interval_s * 1e9).round() as u64,
        model_instances,
    );
    if let Some(note) = summary.timeseries_note() {
        eprintln!("note: {note}");
    }

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create output directory {}", args.out.display()))?;
    write_requests_parquet(
        &args.out.join("requests.parquet"),
        &live.records,
        std::slice::from_ref(&pool.name),
    )?;
    write_summary_json(&args.out.join("summary.json"), &summary)?;
    write_timeseries_parquet(&args.out.join("timeseries.parquet"), &timeseries)?;
    print!("{}", summary.human());
    println!("wrote {}", args.out.display());
    Ok(())
}

/// The simulator's summary of a live run (stages the live server does not reproduce are left out).
pub fn live_summary(scenario: &Scenario, seed: u64, live: &LiveRun) -> capsim_sim::Summary {
    let mut summary = SummaryBuilder::new(
        scenario.slo.as_ref().and_then(|s| s.latency).map(|d| d.0),
        [false; 8],
    );
    for &size in &live.batch_sizes {
        summary.add_batch(size);
    }
    for record in &live.records {
        summary.add(record, true);
    }
    let in_system_area: u128 = live
        .records
        .iter()
        .map(|r| u128::from(r.latency_ns()))
        .sum();
    let mean_in_system = if live.end_ns == 0 {
        0.0
    } else {
        in_system_area as f64 / live.end_ns as f64
    };
    let mut summary = summary.finish(
        &scenario.name,
        seed,
        live.utilization.clone(),
        mean_in_system,
        live.end_ns,
    );
    let interval_ns = live_interval_ns(
        live.end_ns,
        scenario.timeseries.interval.0,
        scenario.timeseries.max_rows,
    );
    summary.timeseries_interval_s = interval_ns as f64 * 1e-9;
    summary.timeseries_coarsened = interval_ns != scenario.timeseries.interval.0;
    summary
}
