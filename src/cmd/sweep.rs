//! `capsim sweep` (curves, capacities and the report of a grid of configurations) and
//! `capsim merge` (join the outputs of `--shard` runs).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use capsim_report::experiment::Workload;
use capsim_report::experiment::check_configurations;
use capsim_report::grid::{Grid, GridAxis};
use capsim_report::load::{LoadAxis, LoadKind};
use capsim_report::output::{merge, read_sweep, write_sweep_outputs};
use capsim_report::plot::PlotSize;
use capsim_report::report::write_report;
use capsim_report::review::{Basis, Question, Review, sensitivity_of, shard_sensitivities};
use capsim_report::shard::Shard;
use capsim_report::slo::Slo;
use capsim_report::sweep::{SweepResult, SweepSpec, job_count, run_sweep};
use capsim_sim::quantity::parse_duration_ns;
use capsim_sim::{Profiles, Scenario, Warmup};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::BadInput;
use crate::input::TraceInput;

/// The flags `sweep` and `plan` share: scenario, trace, grid, SLO, seeds.
#[derive(Debug, Args)]
pub struct GridArgs {
    /// The scenario every configuration starts from (TOML).
    #[arg(long, value_name = "S.toml")]
    pub scenario: PathBuf,

    #[command(flatten)]
    pub input: TraceInput,

    /// Serve the model with the service times of this profile (`capsim calibrate`'s output):
    /// replaces the scenario's `[service]` with `kind = "profile"`; the review names the file and
    /// the machine it was measured on.
    #[arg(long, value_name = "P.json")]
    pub profile: Option<PathBuf>,

    /// Override a scenario key before the grid applies, e.g. `batcher.max_queue_delay=2ms`
    /// (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,

    /// A grid axis over any scenario key: `batcher.max_batch_size=1,4,8`, `instances=1..8`,
    /// `batcher.max_queue_delay=0ms,2ms` (repeatable; the grid is their product).
    #[arg(long = "grid", value_name = "KEY=VALUES")]
    pub grids: Vec<String>,

    /// The service-level objective, e.g. `e2e.p99<=800ms` (several joined by `,`; `<=` is
    /// inclusive, `<` strict), on a metric the scenario reports.
    #[arg(long, value_name = "SLO")]
    pub slo: String,

    /// Seeds per point; capacities get a 95% interval across them.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub seeds: u32,

    /// The first seed (seed i is SEED + i).
    #[arg(long, default_value_t = 0, value_name = "SEED")]
    pub seed: u64,

    /// Largest fraction of requests rejected or timed out at a sustainable load.
    #[arg(long, default_value_t = 0.001, value_name = "FRACTION")]
    pub max_lost: f64,

    /// Exclude a warm-up from each run's statistics: a duration (`30s`) or a request count.
    #[arg(long, value_name = "DUR|COUNT")]
    pub warmup: Option<String>,

    /// Cost of one instance for one hour, for cost per million requests.
    #[arg(long, value_name = "COST")]
    pub cost_per_instance_hour: Option<f64>,

    /// Traffic growth to plan for, e.g. `3x` (the trace replayed at 3 times its rate): the
    /// answer is the fewest instances that carry it.
    #[arg(long, default_value = "1x", value_name = "K")]
    pub growth: String,
}

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
    #[arg(long, default_value_t = capsim_report::knee::DEFAULT_SENSITIVITY, value_name = "S")]
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

fn bad(e: impl std::fmt::Display) -> anyhow::Error {
    BadInput(e.to_string()).into()
}

/// Parses `--warmup`: a bare integer is a request count, anything else a duration.
pub fn parse_warmup(text: Option<&str>) -> Result<Warmup> {
    let Some(text) = text else {
        return Ok(Warmup::None);
    };
    if let Ok(count) = text.trim().parse::<u64>() {
        return Ok(Warmup::Count(count));
    }
    parse_duration_ns(text)
        .map(Warmup::DurationNs)
        .map_err(|e| bad(format!("--warmup: {e}, or a request count such as 1000")))
}

/// The scenario (with `--set` applied and the profiles it names, read), the grid and the SLO of
/// `args`, checked: every configuration is set up and the SLO checked against it before the
/// trace is read. Notes of settings that resolved a conflict are printed once on stderr.
pub fn parse_grid_args(
    args: &GridArgs,
    extra_axes: Vec<GridAxis>,
) -> Result<(Scenario, Profiles, Grid, Slo)> {
    let mut scenario = Scenario::from_path(&args.scenario).map_err(bad)?;
    super::apply_profile(&mut scenario, args.profile.as_deref())?;
    super::apply_sets(&mut scenario, &args.sets)?;
    let mut profiles = Profiles::default();
    profiles.load(&scenario).map_err(bad)?;
    let mut axes: Vec<GridAxis> = args
        .grids
        .iter()
        .map(|g| {
            g.parse::<GridAxis>()
                .map_err(|e| bad(format!("--grid: {e}")))
        })
        .collect::<Result<_>>()?;
    axes.extend(extra_axes);
    let grid = Grid::new(axes).map_err(bad)?;
    let slo: Slo = args.slo.parse().map_err(|e| bad(format!("--slo: {e}")))?;
    let grid_notes = check_configurations(&scenario, &grid, &slo).map_err(|e| match e {
        capsim_report::ConfigurationError::Slo { .. } => bad(format!("--slo: {e}")),
        _ => bad(format!("--grid: {e}")),
    })?;
    for note in scenario.notes().iter().chain(&grid_notes) {
        eprintln!("note: {note}");
    }
    if args.seeds == 0 {
        return Err(bad("--seeds must be at least 1"));
    }
    if !(0.0..=1.0).contains(&args.max_lost) {
        return Err(bad(format!(
            "--max-lost {} is not a fraction in [0, 1]",
            args.max_lost
        )));
    }
    Ok((scenario, profiles, grid, slo))
}

/// Parses `--growth`: a positive multiplier, `3x` or `3`.
pub fn parse_growth(text: &str) -> Result<f64> {
    text.trim()
        .trim_end_matches('x')
        .parse()
        .ok()
        .filter(|g: &f64| *g > 0.0 && g.is_finite())
        .ok_or_else(|| {
            bad(format!(
                "--growth {text:?}: write a positive multiplier such as 3x"
            ))
        })
}

/// What `report.md` states beyond the runs: the trace's figures and the growth, the scenario's
/// provenance, and the answer's configuration (else the best-ranked) run again with slower
/// service times ([`sensitivity_of`]). A sharded run has no answer yet: its part of the
/// sensitivity run is [`shard_sensitivities`], which the merge reads.
pub fn review_of(
    args: &GridArgs,
    spec: &SweepSpec,
    workload: &Workload<'_>,
    result: &SweepResult,
    growth: f64,
) -> Result<Review> {
    let summary = capsim_trace::Summary::of(workload.trace);
    let names: Vec<String> = args
        .input
        .paths
        .iter()
        .chain(&args.input.trace)
        .map(|p| p.display().to_string())
        .collect();
    let mut trace = names.join(", ");
    if let Some(duration) = &args.input.extend_to {
        trace += &format!(
            " extended to {duration} by --extend-to (a block bootstrap of its own gaps and sizes, seed {})",
            args.input.extend_seed
        );
    }
    let question = Question::of(trace, &summary, growth);
    let basis = Basis::of(
        &spec.base,
        &args.scenario,
        spec.seeds,
        spec.base_seed,
        spec.max_lost_fraction,
    );
    let sensitivity = sensitivity_of(spec, workload, result, question.mean_rate_rps, growth)?;
    Ok(Review {
        question,
        basis,
        sensitivity,
    })
}

/// Runs `spec` with a progress bar on stderr.
pub fn run_with_progress(spec: &SweepSpec, workload: &Workload<'_>) -> Result<SweepResult> {
    let bar = ProgressBar::new(job_count(spec) as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {pos}/{len} runs, {elapsed} elapsed, ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    interrupt::install();
    let result = run_sweep(spec, workload, &|| bar.inc(1), &INTERRUPTED);
    bar.finish_and_clear();
    if INTERRUPTED.load(Ordering::SeqCst) {
        eprintln!("interrupted: keeping the runs that finished");
    }
    Ok(result?)
}

/// Set by the first Ctrl-C: the sweep starts no new run and keeps what finished.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// A SIGINT handler that only sets [`INTERRUPTED`] (async-signal-safe) and restores the default
/// action, so a second Ctrl-C ends the process at once. Declared against the C library directly:
/// the dependency set has no signal-handling crate.
mod interrupt {
    #[cfg(unix)]
    pub fn install() {
        const SIGINT: i32 = 2;
        const SIG_DFL: usize = 0;
        unsafe extern "C" {
            fn signal(signum: i32, handler: usize) -> usize;
        }
        extern "C" fn on_sigint(_signum: i32) {
            super::INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
            // SAFETY: `signal` is async-signal-safe; SIG_DFL is a valid disposition.
            unsafe { signal(SIGINT, SIG_DFL) };
        }
        // SAFETY: `on_sigint` has the C signature a handler needs and touches only an atomic.
        unsafe { signal(SIGINT, on_sigint as extern "C" fn(i32) as usize) };
    }

    #[cfg(not(unix))]
    pub fn install() {}
}

pub fn run(args: SweepArgs) -> Result<()> {
    let (scenario, profiles, grid, slo) = parse_grid_args(&args.grid, Vec::new())?;
    let load = match (&args.load, &args.rate, &args.concurrency) {
        (_, Some(rate), _) => LoadAxis::parse(rate, LoadKind::TargetRate),
        (_, _, Some(concurrency)) => LoadAxis::parse(concurrency, LoadKind::Concurrency),
        (Some(load), _, _) => LoadAxis::parse(load, LoadKind::RateScale),
        (None, None, None) => LoadAxis::parse("0.25..2x:8", LoadKind::RateScale),
    }
    .map_err(bad)?;
    let shard: Shard = match &args.shard {
        Some(text) => text.parse().map_err(|e| bad(format!("--shard: {e}")))?,
        None => Shard::WHOLE,
    };
    let warmup = parse_warmup(args.grid.warmup.as_deref())?;
    let loaded = args.grid.input.load()?;
    eprintln!("{}", loaded.report_line());
    let workload = Workload::new(&loaded.trace, load.kind, warmup);
    if load.kind == LoadKind::TargetRate && workload.trace_rate_rps.is_none() {
        return Err(bad(
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
    super::steady::refuse_short_trace(&spec, &workload, &result.capacities, None)?;
    if workload.trace_rate_rps.is_some() {
        result.review = Some(review_of(&args.grid, &spec, &workload, &result, growth)?);
        result.shard_sensitivities = shard_sensitivities(&spec, &workload, &result)?;
    }
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
        .map(|dir| read_sweep(&dir.join("sweep.json")).map_err(bad))
        .collect::<Result<Vec<_>>>()?;
    let merged = merge(shards).map_err(bad)?;
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
        println!(
            "\n{}",
            capsim_report::review::answer_sentence(result, review)
        );
    }
}

fn print_capacities(result: &SweepResult) {
    for row in capsim_report::report::ranked(result) {
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
