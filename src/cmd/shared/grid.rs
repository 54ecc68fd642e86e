//! The grid flags `sweep` and `plan` share, and the steps both take with them: parsing
//! (`--warmup`, `--growth`, the grid and the SLO), running the sweep with a progress bar, and the
//! trace's name in the review that `report.md` states beyond the runs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use capsim_report::{
    Grid, GridAxis, Slo, SweepResult, SweepSpec, Workload, check_configurations, job_count,
    run_sweep,
};
use capsim_sim::quantity::parse_duration_ns;
use capsim_sim::{Profiles, Scenario, Warmup};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use crate::cmd::bad_input;
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
        .map_err(|e| bad_input(format!("--warmup: {e}, or a request count such as 1000")))
}

/// The scenario (with `--set` applied and the profiles it names, read), the grid and the SLO of
/// `args`, checked: every configuration is set up and the SLO checked against it before the
/// trace is read. Notes of settings that resolved a conflict are printed once on stderr.
pub fn parse_grid_args(
    args: &GridArgs,
    extra_axes: Vec<GridAxis>,
) -> Result<(Scenario, Profiles, Grid, Slo)> {
    let mut scenario = Scenario::from_path(&args.scenario).map_err(bad_input)?;
    crate::cmd::apply_profile(&mut scenario, args.profile.as_deref())?;
    crate::cmd::apply_sets(&mut scenario, &args.sets)?;
    let mut profiles = Profiles::default();
    profiles.load(&scenario).map_err(bad_input)?;
    let mut axes: Vec<GridAxis> = args
        .grids
        .iter()
        .map(|g| {
            g.parse::<GridAxis>()
                .map_err(|e| bad_input(format!("--grid: {e}")))
        })
        .collect::<Result<_>>()?;
    axes.extend(extra_axes);
    let grid = Grid::new(axes).map_err(bad_input)?;
    let slo: Slo = args
        .slo
        .parse()
        .map_err(|e| bad_input(format!("--slo: {e}")))?;
    let grid_notes = check_configurations(&scenario, &grid, &slo).map_err(|e| match e {
        capsim_report::ConfigurationError::Slo { .. } => bad_input(format!("--slo: {e}")),
        _ => bad_input(format!("--grid: {e}")),
    })?;
    for note in scenario.notes().iter().chain(&grid_notes) {
        eprintln!("note: {note}");
    }
    if args.seeds == 0 {
        return Err(bad_input("--seeds must be at least 1"));
    }
    if !(0.0..=1.0).contains(&args.max_lost) {
        return Err(bad_input(format!(
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
            bad_input(format!(
                "--growth {text:?}: write a positive multiplier such as 3x"
            ))
        })
}

/// The trace as the review names it: its files, and the `--extend-to` that stretched it.
pub fn trace_label(args: &GridArgs) -> String {
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
    trace
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
