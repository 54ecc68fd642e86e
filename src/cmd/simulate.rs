//! `capsim simulate`: replay a trace through a scenario and write summary.json,
//! requests.parquet and timeseries.parquet (and, with `--timeline`, a Chrome trace of the run).

use std::path::PathBuf;

use anyhow::{Context, Result};
use capsim_sim::output::{write_requests_parquet, write_summary_json, write_timeseries_parquet};
use capsim_sim::quantity::parse_duration_ns;
use capsim_sim::scenario::ReplayInputs;
use capsim_sim::{RequestLog, RunOptions, Scenario};
use capsim_sim::{TimelineWindow, write_timeline_json};
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

    /// Serve the model with the service times of this profile (`capsim calibrate`'s output):
    /// replaces the scenario's `[service]` with `kind = "profile"`, before any `--set`.
    #[arg(long, value_name = "P.json")]
    pub profile: Option<PathBuf>,

    /// Override a scenario key, e.g. `batcher.max_batch_size=8` or `instances=4` (repeatable);
    /// a table's new `kind` drops the old kind's keys: `--set service.kind=profile
    /// --set service.path=P` (the path relative to the scenario's folder).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub sets: Vec<String>,

    /// Replay a measured run: timings only that run gives (its dispatch spread, hand-over per
    /// request, batcher race, slow and stalled windows), from a replay-inputs file that `capsim
    /// validate --endpoint --server-trace` writes (docs/scenario.md, "Replay inputs"). They apply
    /// to the default pool; the result is a replay, not a prediction.
    #[arg(long, value_name = "R.toml")]
    pub replay_inputs: Option<PathBuf>,

    /// Seed of every random stream of the run.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub seed: u64,

    /// Exclude a warm-up from the statistics: a duration (`30s`) or a request count (`1000`).
    #[arg(long, value_name = "DUR|COUNT")]
    pub warmup: Option<String>,

    /// Do not write requests.parquet (memory then stays bounded by requests in flight).
    #[arg(long)]
    pub no_requests: bool,

    /// Also write the run's timeline (Chrome trace event JSON; open it in Perfetto): batches per
    /// model instance and queue waits per instance.
    #[arg(long, value_name = "FILE.json")]
    pub timeline: Option<PathBuf>,

    /// Part of the run the timeline shows, in simulated time: `START..END`, e.g. `5s..15s`.
    #[arg(long, value_name = "START..END", default_value = "0s..10s")]
    pub timeline_window: String,

    /// Output directory (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: PathBuf,
}

/// Parses `--timeline-window START..END` (durations, END after START).
fn parse_timeline_window(text: &str) -> Result<TimelineWindow> {
    let bad = |why: String| BadInput(format!("--timeline-window {text:?}: {why}"));
    let (start, end) = text
        .split_once("..")
        .ok_or_else(|| bad("write it as START..END, e.g. 0s..10s".to_string()))?;
    let start_ns = parse_duration_ns(start.trim()).map_err(|e| bad(e.to_string()))?;
    let end_ns = parse_duration_ns(end.trim()).map_err(|e| bad(e.to_string()))?;
    if end_ns <= start_ns {
        return Err(bad("END must be after START".to_string()).into());
    }
    Ok(TimelineWindow { start_ns, end_ns })
}

pub fn run(args: SimulateArgs) -> Result<()> {
    let mut scenario = Scenario::from_path(&args.scenario).map_err(|e| BadInput(e.to_string()))?;
    super::apply_profile(&mut scenario, args.profile.as_deref())?;
    super::apply_sets(&mut scenario, &args.sets)?;
    if let Some(path) = &args.replay_inputs {
        let inputs = ReplayInputs::from_path(path).map_err(|e| BadInput(e.to_string()))?;
        scenario
            .set_replay(inputs)
            .map_err(|e| BadInput(format!("replay inputs {}: {e}", path.display())))?;
    }
    for note in scenario.notes() {
        eprintln!("note: {note}");
    }
    let built = super::build_scenario(&scenario, &mut capsim_sim::Profiles::default())?;
    let warmup = super::shared::grid::parse_warmup(args.warmup.as_deref())?;
    let loaded = args.input.load()?;
    eprintln!("{}", loaded.report_line());
    let options = RunOptions {
        seed: args.seed,
        warmup,
        ..RunOptions::default()
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create output directory {}", args.out.display()))?;
    let window = parse_timeline_window(&args.timeline_window)?;
    let run = if args.no_requests && args.timeline.is_none() {
        capsim_sim::steady::run(
            &built,
            &loaded.trace,
            &options,
            &mut capsim_sim::record::NoRecords,
        )?
    } else {
        let mut log = RequestLog::with_capacity(loaded.trace.len());
        let run = capsim_sim::steady::run(&built, &loaded.trace, &options, &mut log)?;
        log.sort_by_request();
        let pool_names: Vec<String> = scenario.pools().iter().map(|p| p.name.clone()).collect();
        if !args.no_requests {
            write_requests_parquet(
                &args.out.join("requests.parquet"),
                log.records(),
                &pool_names,
            )?;
        }
        if let Some(path) = &args.timeline {
            write_timeline_json(path, log.records(), &pool_names, window)?;
        }
        run
    };
    if let Some(note) = super::shared::steady::short_trace_note(&run.summary) {
        eprintln!("note: {note}");
    }
    if let Some(note) = run.summary.timeseries_note() {
        eprintln!("note: {note}");
    }
    write_summary_json(&args.out.join("summary.json"), &run.summary)?;
    write_timeseries_parquet(&args.out.join("timeseries.parquet"), &run.timeseries)?;
    print!("{}", run.summary.human());
    println!("wrote {}", args.out.display());
    Ok(())
}
