//! The `capsim` command: wires flags to the library crates.
//!
//! Every error prints as one `error: ...` line (with its context chain) and exits non-zero:
//! 2 when the input was bad (a file, flag or value the user can fix), 1 otherwise. Usage errors
//! from clap also exit with 2.

mod cmd;
mod input;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Marks an error as caused by the user's input (exit code 2), for commands whose libraries do
/// not already say so. Wrap the message: `return Err(BadInput(msg).into())`.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BadInput {}

/// Trace-replay simulator and capacity planner for online inference services.
#[derive(Debug, Parser)]
#[command(name = "capsim", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Inspect, convert and synthesize request traces.
    #[command(subcommand)]
    Trace(cmd::trace::TraceCommand),
    /// Measure an ONNX model's batch latencies through ONNX Runtime and write a profile.
    Calibrate(cmd::calibrate::CalibrateArgs),
    /// Run a trace in wall time through a real in-process server (`--live`) with ONNX Runtime.
    Replay(cmd::replay::ReplayArgs),
    /// Compare the simulation with a live replay at 30/60/85% of the calibrated capacity.
    Validate(cmd::validate::ValidateArgs),
    /// Fit a continuous-batching scenario's step time to a measured per-request log.
    Fit(cmd::fit::FitArgs),
    /// Replay a trace through a serving scenario (discrete-event simulation).
    Simulate(cmd::simulate::SimulateArgs),
    /// Sweep a grid of configurations over a load axis: curves, capacities, knees and a report.
    Sweep(cmd::sweep::SweepArgs),
    /// Join the outputs of `capsim sweep --shard` runs.
    Merge(cmd::sweep::MergeArgs),
    /// The fewest instances (and best setting of the grid) that meet the SLO at peak x growth.
    Plan(cmd::plan::PlanArgs),
    /// Draw the PNGs and report.md from a sweep's output directory.
    Report(cmd::report::ReportArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Trace(c) => cmd::trace::run(c),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::Replay(a) => cmd::replay::run(a),
        Command::Validate(a) => cmd::validate::run(a),
        Command::Fit(a) => cmd::fit::run(a),
        Command::Simulate(a) => cmd::simulate::run(a),
        Command::Sweep(a) => cmd::sweep::run(a),
        Command::Merge(a) => cmd::sweep::merge_run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::Report(a) => cmd::report::run(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(cmd::exit_code(&err))
        }
    }
}
