//! The live-server flags `replay` and `validate` share (the scenario it serves, the model, the
//! execution provider), `--protocol`, and how a live or endpoint run is summarized.

use std::path::PathBuf;

use anyhow::Result;
use capsim_calibrate::live::{LiveConfig, LiveRun, check_servable};
use capsim_sim::summary::SummaryBuilder;
use capsim_sim::{Scenario, Warmup};
use clap::Args;

use super::runtime::{Ep, user_facing};
use crate::cmd::BadInput;
use crate::input::TraceInput;

/// The live server's flags, shared by `replay --live` and `validate`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    /// The scenario: its default pool's instances, execution and batcher are served live
    /// (required, but with --endpoint, where it only names the run and sets its SLOs,
    /// timeseries and `[load]`).
    #[arg(long, value_name = "S.toml")]
    pub scenario: Option<PathBuf>,
    #[command(flatten)]
    pub input: TraceInput,
    /// The ONNX model each model instance runs (with --endpoint: the model's name on the server).
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
    pub fn served_scenario(&self) -> Result<Scenario> {
        let Some(path) = &self.scenario else {
            return Err(BadInput(
                "--scenario is required: the live server serves its default pool".to_string(),
            )
            .into());
        };
        let scenario = Scenario::from_path(path).map_err(|e| BadInput(e.to_string()))?;
        if scenario.pools().len() > 1 {
            return Err(BadInput(format!(
                "scenario {}: the live replay serves the default pool only; remove the [pools.*] sections",
                path.display()
            ))
            .into());
        }
        check_servable(&scenario.pools()[0]).map_err(user_facing)?;
        Ok(scenario)
    }

    /// The live server's settings for these flags.
    pub fn live_config(&self, max_length: u32, vocab: u64, seed: u64) -> LiveConfig {
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

/// `--protocol`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum ProtocolArg {
    /// KServe v2 / Triton HTTP.
    Kserve,
    /// OpenAI-compatible streamed completions.
    Openai,
}

/// The simulator's summary of a live run (stages the live server does not reproduce are left out;
/// `warmup`'s requests are left out of the statistics).
pub fn live_summary(
    scenario: &Scenario,
    seed: u64,
    live: &LiveRun,
    warmup: Warmup,
) -> capsim_sim::Summary {
    let mut summary = SummaryBuilder::new(
        scenario.slo.as_ref().and_then(|s| s.latency).map(|d| d.0),
        [false; 8],
    );
    for &size in &live.batch_sizes {
        summary.add_batch(size);
    }
    for record in &live.records {
        summary.add(
            record,
            warmup.measures(u64::from(record.request), record.arrival_ns),
        );
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
    summary.set_timeseries_interval(
        live_interval_ns(scenario, live),
        scenario.timeseries.interval.0,
    );
    summary
}

/// The interval a live run's timeseries is sampled at: the scenario's, widened to keep within
/// its `timeseries.max_rows`.
pub fn live_interval_ns(scenario: &Scenario, live: &LiveRun) -> u64 {
    capsim_sim::timeseries::interval_for(
        live.end_ns,
        scenario.timeseries.interval.0,
        scenario.timeseries.max_rows,
    )
}
