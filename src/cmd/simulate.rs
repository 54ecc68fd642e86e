//! `capsim simulate`: replay a trace through a scenario and write summary.json,
//! requests.parquet and timeseries.parquet.

use std::path::PathBuf;

use anyhow::{Context, Result};
use capsim_sim::output::{write_requests_parquet, write_summary_json, write_timeseries_parquet};
use capsim_sim::quantity::parse_duration_ns;
use capsim_sim::{RunOptions, Scenario, Warmup, run_with_sink, simulate_with_requests};
use clap::Args;

use super::BadInput;
use crate::input::TraceInput;

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// The scenario (TOML; see docs/scenario.md).
    #[arg(long, value_name = "S.toml")]
    pub scenario: PathBuf,

    #[command(flatten)]
    pub input: TraceInput,

    /// Override a scenario key, e.g. `batcher.max_batch_size=8` or `instances=4` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,

    /// Seed of every random stream of the run.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,

    /// Exclude a warm-up from the statistics: a duration (`30s`) or a request count (`1000`).
    #[arg(long, value_name = "DUR|COUNT")]
    pub warmup: Option<String>,

    /// Do not write requests.parquet (memory then stays bounded by requests in flight).
    #[arg(long)]
    pub no_requests: bool,

    /// Output directory (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: PathBuf,
}

/// Parses `--warmup`: a bare integer is a request count, anything else a duration.
fn parse_warmup(text: &str) -> Result<Warmup> {
    if let Ok(count) = text.trim().parse::<u64>() {
        return Ok(Warmup::Count(count));
    }
    parse_duration_ns(text)
        .map(Warmup::DurationNs)
        .map_err(|e| BadInput(format!("--warmup: {e}, or a request count such as 1000")).into())
}

pub fn run(args: SimulateArgs) -> Result<()> {
    let mut scenario = Scenario::from_path(&args.scenario).map_err(|e| BadInput(e.to_string()))?;
    for set in &args.sets {
        let (key, value) = set.split_once('=').ok_or_else(|| {
            BadInput(format!(
                "--set {set:?}: write it as KEY=VALUE, e.g. instances=4"
            ))
        })?;
        scenario
            .set(key.trim(), value.trim())
            .map_err(|e| BadInput(e.to_string()))?;
    }
    let warmup = args
        .warmup
        .as_deref()
        .map(parse_warmup)
        .transpose()?
        .unwrap_or_default();
    let loaded = args.input.load()?;
    eprintln!("{}", loaded.report_line());
    let options = RunOptions {
        seed: args.seed,
        warmup,
        ..RunOptions::default()
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create output directory {}", args.out.display()))?;
    let run = if args.no_requests {
        run_with_sink(
            &scenario,
            &loaded.trace,
            &options,
            &mut capsim_sim::record::NoRecords,
        )?
    } else {
        let (run, log) = simulate_with_requests(&scenario, &loaded.trace, &options)?;
        let pool_names: Vec<String> = scenario.pools().iter().map(|p| p.name.clone()).collect();
        write_requests_parquet(
            &args.out.join("requests.parquet"),
            log.records(),
            &pool_names,
        )?;
        run
    };
    write_summary_json(&args.out.join("summary.json"), &run.summary)?;
    write_timeseries_parquet(&args.out.join("timeseries.parquet"), &run.timeseries)?;
    print!("{}", run.summary.human());
    println!("wrote {}", args.out.display());
    Ok(())
}
