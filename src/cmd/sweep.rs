//! `capsim sweep` (curves, capacities and the report of a grid of configurations) and
//! `capsim merge` (join the outputs of `--shard` runs).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use capsim_report::plot::PlotSize;
use capsim_report::{
    LoadAxis, LoadKind, Shard, SweepResult, SweepSpec, Workload, merge, read_sweep, review_sweep,
    write_report, write_sweep_outputs,
};
use clap::Args;

use super::bad_input;
use super::shared::grid::{
    GridArgs, parse_grid_args, parse_growth, parse_warmup, run_with_progress, trace_label,
};
use super::shared::steady;

#[derive(Debug, Args)]
pub struct SweepArgs {
    #[command(flatten)]
    pub grid: GridArgs,

    /// Load axis as trace-rate multipliers, e.g. `0.25..4x:16` (linear) or `0.5..8x:log9`.
    #[arg(long, value_name = "AXIS", conflicts_with_all = ["rate", "concurrency"])]
    pub load: Option<String>,

    /// Load axis as target mean rates, e.g. `10..2000rps:log12`.
    #[arg(long, value_name = "AXIS", conflicts_with = "concurrency")]
    pub rate: Option<String>,

    /// Load axis as closed-loop client counts, e.g. `1..256:log9`.
    #[arg(long, value_name = "AXIS")]
    pub concurrency: Option<String>,

    /// Run only shard I of N (0-based): configurations k with k % N == I. Join with `capsim merge`.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,

    /// Kneedle sensitivity S (larger is more conservative).
    #[arg(long, default_value_t = capsim_report::DEFAULT_KNEE_SENSITIVITY, value_name = "S")]
    pub knee_sensitivity: f64,

    /// The load at which each configuration is run once in detail for the latency CDF, stage
    /// breakdown and time series, in the load axis' unit (`2x`, `150rps`, or a client count);
    /// the middle of the axis when omitted.
    #[arg(long, value_name = "LOAD", value_parser = parse_detail_load)]
    pub detail_load: Option<f64>,

    /// Do not draw the report at the end.
    #[arg(long)]
    pub no_report: bool,

    /// Output directory (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Output directories of the shards (each holding sweep.json).
    #[arg(required = true, value_name = "SHARD_DIR")]
    pub shards: Vec<PathBuf>,

    /// Directory for the merged outputs and report.
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: PathBuf,

    /// Do not draw the report.
    #[arg(long)]
    pub no_report: bool,
}

pub fn run(args: SweepArgs) -> Result<()> {
    let (scenario, profiles, grid, slo) = parse_grid_args(&args.grid, Vec::new())?;
    let load = match (&args.load, &args.rate, &args.concurrency) {
        (_, Some(rate), _) => LoadAxis::parse(rate, LoadKind::TargetRate),
        (_, _, Some(concurrency)) => LoadAxis::parse(concurrency, LoadKind::Concurrency),
        (Some(load), _, _) => LoadAxis::parse(load, LoadKind::RateScale),
        (None, None, None) => LoadAxis::parse("0.25..2x:8", LoadKind::RateScale),
    }
    .map_err(bad_input)?;
    let shard: Shard = match &args.shard {
        Some(text) => text
            .parse()
            .map_err(|e| bad_input(format!("--shard: {e}")))?,
        None => Shard::WHOLE,
    };
    let warmup = parse_warmup(args.grid.warmup.as_deref())?;
    let loaded = args.grid.input.load()?;
    eprintln!("{}", loaded.report_line());
    let workload = Workload::new(&loaded.trace, load.kind, warmup);
    if load.kind == LoadKind::TargetRate && workload.trace_rate_rps.is_none() {
        return Err(bad_input(
            "--rate needs a trace with at least two requests over a nonzero span",
        ));
    }
    let spec = SweepSpec {
        base: scenario,
        profiles,
        grid,
        load,
        seeds: args.grid.seeds,
        base_seed: args.grid.seed,
        slo,
        max_lost_fraction: args.grid.max_lost,
        shard,
        cost_per_instance_hour: args.grid.cost_per_instance_hour,
        knee_sensitivity: args.knee_sensitivity,
        detail_load: args.detail_load,
        curves: true,
    };
    let growth = parse_growth(&args.grid.growth)?;
    let started = std::time::Instant::now();
    let mut result = run_with_progress(&spec, &workload)?;
    steady::refuse_short_trace(&spec, &workload, &result.capacities, None)?;
    review_sweep(
        &mut result,
        &spec,
        &workload,
        trace_label(&args.grid),
        &args.grid.scenario,
        growth,
    )?;
    let elapsed_s = started.elapsed().as_secs_f64();
    write_outputs(&args.out, &result, args.no_report)?;
    eprintln!(
        "{} configurations, {} curve runs in {elapsed_s:.1} s; wrote {}",
        result.capacities.len(),
        result.curves.len(),
        args.out.display()
    );
    print_capacities(&result);
    print_answer(&result);
    Ok(())
}

pub fn merge_run(args: MergeArgs) -> Result<()> {
    let shards = args
        .shards
        .iter()
        .map(|dir| read_sweep(&dir.join("sweep.json")).map_err(bad_input))
        .collect::<Result<Vec<_>>>()?;
    let merged = merge(shards).map_err(bad_input)?;
    if !merged.complete {
        eprintln!("warning: the shards do not cover the whole sweep, or one was interrupted");
    }
    write_outputs(&args.out, &merged, args.no_report)?;
    print_capacities(&merged);
    print_answer(&merged);
    Ok(())
}

fn write_outputs(dir: &Path, result: &SweepResult, no_report: bool) -> Result<()> {
    write_sweep_outputs(dir, result)
        .with_context(|| format!("writing outputs to {}", dir.display()))?;
    if !no_report && !result.capacities.is_empty() {
        write_report(dir, result, PlotSize::DEFAULT).context("drawing the report")?;
    }
    if !result.complete {
        eprintln!("warning: the sweep did not finish; the outputs hold the runs that did");
    }
    Ok(())
}

/// The answer in one sentence, when the sweep recorded its question.
pub fn print_answer(result: &SweepResult) {
    if let Some(review) = &result.review
        && result.shard == Shard::WHOLE
    {
        println!("\n{}", capsim_report::answer_sentence(result, review));
    }
}

fn print_capacities(result: &SweepResult) {
    for row in capsim_report::ranked(result) {
        let capacity = row.capacity_rps.map_or("none".to_string(), |c| {
            format!("{:.1} req/s [{:.1}, {:.1}]", c.mean, c.low, c.high)
        });
        let limits = row.limited_by();
        let ends = if limits.is_empty() {
            String::new()
        } else {
            let words: Vec<&str> = limits.iter().map(|l| l.words()).collect();
            format!(", ends: {}", words.join(", "))
        };
        println!("{:<60} capacity {capacity}{ends}", row.configuration);
    }
}

/// Parses `--detail-load`: a positive number, optionally ending in `x` or `rps`.
fn parse_detail_load(text: &str) -> Result<f64, String> {
    let number = text
        .trim()
        .trim_end_matches("rps")
        .trim_end_matches('x')
        .trim();
    match number.parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 => Ok(value),
        _ => Err(format!(
            "`{text}` is not a positive load (write e.g. `2x`, `150rps` or `16`)"
        )),
    }
}
