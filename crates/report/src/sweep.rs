// Over 800 lines: the sweep's jobs, its capacity searches and the rows they add up to share one job table and its results.
//! The sweep: every (configuration, load, seed) run of a grid, a capacity search for every
//! (configuration, seed), and what they add up to per configuration.
//!
//! Runs are independent and deterministic (each seed is `base_seed + seed index`, whatever the
//! shard or the thread), so a sharded sweep merged gives the same rows as one unsharded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use capsim_sim::record::{Outcome as RecordOutcome, RecordSink, RequestRecord};
use capsim_sim::summary::{LatencyStats, STAGES};
use capsim_sim::{Profiles, Scenario, run_with_sink};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::capacity::{Bracket, Limit, Outcome, SearchOptions, search_capacity};
use crate::experiment::{RunError, Workload, configure, latency_ms};
use crate::grid::{Configuration, Grid};
use crate::interval::{Estimate, mean_with_95_interval};
use crate::knee::kneedle_convex_increasing;
use crate::load::{LoadAxis, LoadKind};
use crate::shard::Shard;
use crate::slo::{Metric, Slo};

/// What to sweep.
#[derive(Debug, Clone)]
pub struct SweepSpec {
    /// The scenario every configuration starts from.
    pub base: Scenario,
    /// Profiles already read (the base scenario's, when the caller built it); the sweep reads
    /// the rest its configurations name, each file once, before any run.
    pub profiles: Profiles,
    /// Configurations.
    pub grid: Grid,
    /// Loads each configuration's curve is run at.
    pub load: LoadAxis,
    /// Seeds per point (at least 1); seed `i` is `base_seed + i`.
    pub seeds: u32,
    /// The first seed.
    pub base_seed: u64,
    /// The objective.
    pub slo: Slo,
    /// Largest fraction of requests rejected or timed out at a sustainable load.
    pub max_lost_fraction: f64,
    /// Which configurations this process runs.
    pub shard: Shard,
    /// Cost of one instance for an hour, for cost per million requests.
    pub cost_per_instance_hour: Option<f64>,
    /// Kneedle's sensitivity `S`.
    pub knee_sensitivity: f64,
    /// The load of the detail runs (latency CDF, stage breakdown, time series), in the load axis'
    /// unit; `None` runs them at the middle value of the axis.
    pub detail_load: Option<f64>,
    /// Whether to run the curves (every load of the axis) and the detail runs; `false` runs only
    /// the capacity searches (for `capsim plan`).
    pub curves: bool,
}

/// One run of a curve: a row of `curves.parquet`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurveRow {
    /// Index of the configuration in the whole grid.
    pub config_index: usize,
    /// The configuration, `key=value ...`.
    pub configuration: String,
    /// Grid values by key.
    pub settings: Vec<(String, String)>,
    /// What `load` means.
    pub load_kind: LoadKind,
    /// The load value.
    pub load: f64,
    /// The run's seed.
    pub seed: u64,
    /// Measured offered rate, requests per second.
    pub offered_rps: f64,
    /// Achieved throughput, requests per second.
    pub throughput_rps: f64,
    /// Completions within the scenario's SLO per second, when the scenario sets one.
    pub goodput_rps: Option<f64>,
    /// Measured requests.
    pub total: u64,
    /// Completed.
    pub completed: u64,
    /// Rejected.
    pub rejected: u64,
    /// Timed out.
    pub timed_out: u64,
    /// Whether the sweep's SLO held.
    pub slo_met: bool,
    /// Whether the queue grew without bound.
    pub queue_grows: bool,
    /// Latency statistics by stage, as in `summary.json`.
    pub latency_ms: BTreeMap<String, LatencyStats>,
}

/// A point of a curve named by a knee.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KneePoint {
    /// The load value.
    pub load: f64,
    /// Mean achieved throughput there, requests per second.
    pub throughput_rps: f64,
    /// Mean of the SLO's statistic there, milliseconds.
    pub latency_ms: f64,
}

/// One configuration's capacity: a row of `capacity.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityRow {
    /// Index of the configuration in the whole grid.
    pub config_index: usize,
    /// The configuration, `key=value ...`.
    pub configuration: String,
    /// Grid values by key.
    pub settings: Vec<(String, String)>,
    /// Instances in all pools.
    pub instances: u32,
    /// Sustainable rate per seed, requests per second (0 when even the lowest load failed).
    pub capacity_rps_by_seed: Vec<f64>,
    /// Where each seed's capacity lay relative to the searched range.
    pub bracket_by_seed: Vec<Bracket>,
    /// What ended each seed's curve: the conditions that failed at the lowest load its capacity
    /// search found unsustainable (empty when the capacity is above the searched range).
    #[serde(default)]
    pub limited_by_by_seed: Vec<Vec<Limit>>,
    /// Mean and 95% interval across seeds, requests per second. A capacity is never negative,
    /// so the interval's low end is clamped at 0 (few seeds with a wide spread would otherwise
    /// give a negative Student-t bound).
    pub capacity_rps: Option<Estimate>,
    /// Mean capacity per instance, requests per second.
    pub capacity_per_instance_rps: Option<f64>,
    /// The SLO's statistic at capacity, milliseconds: the mean over seeds of the capacity
    /// search's own run at each seed's capacity.
    pub latency_at_capacity_ms: Option<f64>,
    /// The highest curve load at which the SLO held for every seed.
    pub slo_knee: Option<KneePoint>,
    /// The Kneedle knee of the mean curve of the SLO's statistic.
    pub kneedle_knee: Option<KneePoint>,
    /// Kneedle's warnings (few points, no knee).
    pub knee_warnings: Vec<String>,
    /// Cost per million requests at capacity, in the currency of the instance-hour cost.
    pub cost_per_million_requests: Option<f64>,
}

impl CapacityRow {
    /// What ended the curve, over every seed: each [`Limit`] some seed's search met at its
    /// lowest unsustainable load, in [`Limit`]'s order.
    pub fn limited_by(&self) -> Vec<Limit> {
        let mut limits: Vec<Limit> = self.limited_by_by_seed.iter().flatten().copied().collect();
        limits.sort();
        limits.dedup();
        limits
    }
}

/// One configuration in detail at one load: the e2e latency distribution and the timeseries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigDetail {
    /// Index of the configuration in the whole grid.
    pub config_index: usize,
    /// The load value of the detail run.
    pub load: f64,
    /// End-to-end latency quantiles of completed requests at 0.5%, 1.0%, ..., 99.5%, and the
    /// maximum, milliseconds.
    pub e2e_quantiles_ms: Vec<f64>,
    /// Sample times, seconds since the run's origin.
    pub time_s: Vec<f64>,
    /// Requests queued (instance queues and pre-processing) at each sample.
    pub queued: Vec<f64>,
    /// Mean batch size in each interval.
    pub batch_size_mean: Vec<f64>,
    /// Fraction of model instances busy in each interval.
    pub utilization: Vec<f64>,
}

/// Everything a sweep (or a shard of one) produced: `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepResult {
    /// The SLO, as written.
    pub slo: String,
    /// What load values mean.
    pub load_kind: LoadKind,
    /// Grid keys, in axis order.
    pub grid_keys: Vec<String>,
    /// Grid values per key, in axis order.
    pub grid_values: Vec<Vec<String>>,
    /// The shard this result covers (`0/1` when whole or merged).
    pub shard: Shard,
    /// Whether every run finished (false after an interruption).
    pub complete: bool,
    /// Curve runs, ordered by configuration, load, seed.
    pub curves: Vec<CurveRow>,
    /// Capacities, ordered by configuration.
    pub capacities: Vec<CapacityRow>,
    /// Detail runs, ordered by configuration.
    pub details: Vec<ConfigDetail>,
    /// The question, the provenance and the sensitivity run that `report.md` states; set by the
    /// command that knows the trace and the scenario file (absent in older sweep.json files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub review: Option<crate::basis::Review>,
    /// A shard's sensitivity runs, one per configuration it ran
    /// ([`crate::review::shard_sensitivities`]); the merge moves the answer's into `review` and
    /// empties this. Empty (and absent from `sweep.json`) for a whole sweep.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shard_sensitivities: Vec<crate::basis::Sensitivity>,
}

/// Why a sweep failed.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// A run could not be made.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A capacity search failed.
    #[error("configuration `{configuration}` seed {seed}: {message}")]
    Search {
        /// The configuration's label (`key=value,...`).
        configuration: String,
        /// The seed of the search's runs.
        seed: u64,
        /// The failed run's error with its causes, joined into one line.
        message: String,
    },
    /// The spec is inconsistent.
    #[error("sweep: {0}")]
    Spec(String),
}

/// One seed's capacity search result.
#[derive(Debug, Clone)]
struct SeedCapacity {
    seed: u64,
    /// The sustainable rate, requests per second (0 when even the lowest load failed).
    capacity_rps: f64,
    /// Where the capacity lay relative to the searched range.
    bracket: Bracket,
    /// The SLO's primary statistic at capacity, milliseconds.
    latency_ms: Option<f64>,
    /// What failed at the lowest unsustainable load.
    limited_by: Vec<Limit>,
}

/// A run already made: its verdict, achieved throughput (rps) and the SLO's primary statistic
/// (ms).
#[derive(Debug, Clone, Copy)]
struct Seen {
    outcome: Outcome,
    throughput_rps: f64,
    latency_ms: Option<f64>,
}

/// One configuration run with one seed: what a capacity search shares with its curve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct RunKey {
    /// Index of the configuration in the whole grid.
    config_index: usize,
    seed: u64,
}

/// The curve runs of each (configuration, seed), by [`run_load_key`]: a capacity search reuses a
/// curve run only when it is the very same run.
type SeenByRun = BTreeMap<RunKey, BTreeMap<u64, Seen>>;

/// What makes two runs of one (configuration, seed) the same run: the rate multiplier applied to
/// the trace (its bits), or the whole number of closed-loop clients. `None` for a target rate
/// without a trace rate (such a run fails anyway).
fn run_load_key(kind: LoadKind, load: f64, trace_rate_rps: Option<f64>) -> Option<u64> {
    match kind {
        LoadKind::RateScale => Some(load.to_bits()),
        LoadKind::TargetRate => trace_rate_rps.map(|rate| (load / rate).to_bits()),
        LoadKind::Concurrency => Some(load.round().to_bits()),
    }
}

/// A configuration of the grid that this shard runs, with its scenario.
struct Configured {
    /// Index of the configuration in the whole grid.
    index: usize,
    configuration: Configuration,
    scenario: Scenario,
}

enum Job {
    Search {
        config: usize,
        seed: u64,
    },
    Point {
        config: usize,
        load: usize,
        seed: u64,
    },
    Detail {
        config: usize,
    },
}

enum JobOutput {
    Search {
        config: usize,
        capacity: SeedCapacity,
    },
    Point(Box<CurveRow>, Option<u64>, Seen),
    Detail(Box<ConfigDetail>),
}

/// How many jobs [`run_sweep`] will run (for a progress bar).
pub fn job_count(spec: &SweepSpec) -> usize {
    let configs = (0..spec.grid.configurations().len())
        .filter(|&i| spec.shard.contains(i))
        .count();
    let per_config = if spec.curves {
        spec.seeds as usize * (1 + spec.load.values.len()) + 1
    } else {
        spec.seeds as usize
    };
    configs * per_config
}

/// Runs the sweep in parallel (rayon). `on_job_done` is called after each job; once `cancel`
/// is set no new job starts, and the result holds what finished, marked incomplete.
pub fn run_sweep(
    spec: &SweepSpec,
    workload: &Workload<'_>,
    on_job_done: &(dyn Fn() + Sync),
    cancel: &AtomicBool,
) -> Result<SweepResult, SweepError> {
    check_spec(spec, workload)?;
    let configurations = configure_shard(spec)?;
    let profiles = load_profiles(spec, &configurations)?;
    let by_index: BTreeMap<usize, usize> = configurations
        .iter()
        .enumerate()
        .map(|(position, c)| (c.index, position))
        .collect();
    let seeds: Vec<u64> = (0..u64::from(spec.seeds))
        .map(|i| spec.base_seed + i)
        .collect();
    let context = JobContext {
        spec,
        workload,
        configurations: &configurations,
        profiles: &profiles,
        by_index: &by_index,
    };
    let run_jobs = |jobs: &[Job], seen: &SeenByRun| -> Vec<Option<Result<JobOutput, SweepError>>> {
        jobs.par_iter()
            .map(|job| {
                if cancel.load(Ordering::Relaxed) {
                    return None;
                }
                let result = run_job(job, &context, seen);
                on_job_done();
                Some(result)
            })
            .collect()
    };
    // The curves run first; each capacity search then reuses a curve run of its own
    // (configuration, seed) where it asks for the very same load, which saves a run and cannot
    // change its result (the search's path depends only on the outcomes).
    let mut outputs = run_jobs(
        &curve_jobs(spec, &configurations, &seeds),
        &SeenByRun::new(),
    );
    // A failed curve run fails the sweep; no search is started after it.
    if let Some(failed) = outputs.iter().position(|o| matches!(o, Some(Err(_))))
        && let Some(Err(error)) = outputs.swap_remove(failed)
    {
        return Err(error);
    }
    let seen = seen_on_curves(&outputs);
    let search_jobs: Vec<Job> = configurations
        .iter()
        .flat_map(|configured| {
            seeds.iter().map(|&seed| Job::Search {
                config: configured.index,
                seed,
            })
        })
        .collect();
    outputs.extend(run_jobs(&search_jobs, &seen));
    sweep_result(spec, &configurations, seeds.len(), outputs)
}

/// Refuses a spec without seeds, or whose load axis is not the workload's.
fn check_spec(spec: &SweepSpec, workload: &Workload<'_>) -> Result<(), SweepError> {
    if spec.seeds == 0 {
        return Err(SweepError::Spec("--seeds must be at least 1".into()));
    }
    if spec.load.kind != workload.load_kind {
        return Err(SweepError::Spec(format!(
            "the load axis is a {} axis but the workload is driven by {}",
            spec.load.kind, workload.load_kind
        )));
    }
    Ok(())
}

/// The configurations of the grid this shard runs, each applied to the base scenario.
fn configure_shard(spec: &SweepSpec) -> Result<Vec<Configured>, SweepError> {
    Ok(spec
        .grid
        .configurations()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| spec.shard.contains(*i))
        .map(|(index, configuration)| {
            configure(&spec.base, &configuration).map(|scenario| Configured {
                index,
                configuration,
                scenario,
            })
        })
        .collect::<Result<Vec<_>, _>>()?)
}

/// The spec's profiles with every profile the `configurations` name read, each file once.
fn load_profiles(spec: &SweepSpec, configurations: &[Configured]) -> Result<Profiles, SweepError> {
    let mut profiles = spec.profiles.clone();
    for Configured {
        configuration,
        scenario,
        ..
    } in configurations
    {
        profiles
            .load(scenario)
            .map_err(|source| RunError::Configure {
                configuration: configuration.to_string(),
                source: Box::new(source),
            })?;
    }
    Ok(profiles)
}

/// The curve jobs (every load and seed of each configuration, then its detail run); none when
/// the spec runs no curves.
fn curve_jobs(spec: &SweepSpec, configurations: &[Configured], seeds: &[u64]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for configured in configurations.iter().filter(|_| spec.curves) {
        let config = configured.index;
        for load in 0..spec.load.values.len() {
            for &seed in seeds {
                jobs.push(Job::Point { config, load, seed });
            }
        }
        jobs.push(Job::Detail { config });
    }
    jobs
}

/// The curve runs that finished, by (configuration, seed) and load, for the searches to reuse.
fn seen_on_curves(outputs: &[Option<Result<JobOutput, SweepError>>]) -> SeenByRun {
    let mut seen = SeenByRun::new();
    for output in outputs.iter().flatten() {
        if let Ok(JobOutput::Point(row, Some(load_key), point)) = output {
            let key = RunKey {
                config_index: row.config_index,
                seed: row.seed,
            };
            seen.entry(key).or_default().insert(*load_key, *point);
        }
    }
    seen
}

/// The result the jobs' `outputs` add up to (`None` for a job cancelled before it started): the
/// curve rows, the detail runs, and the capacity of each configuration whose search finished
/// for all its `seed_count` seeds. The first failed job's error fails it.
fn sweep_result(
    spec: &SweepSpec,
    configurations: &[Configured],
    seed_count: usize,
    outputs: Vec<Option<Result<JobOutput, SweepError>>>,
) -> Result<SweepResult, SweepError> {
    let complete = outputs.iter().all(Option::is_some);
    let mut curves = Vec::new();
    let mut searches: BTreeMap<usize, Vec<SeedCapacity>> = BTreeMap::new();
    let mut details = Vec::new();
    for output in outputs.into_iter().flatten() {
        match output? {
            JobOutput::Point(row, ..) => curves.push(*row),
            JobOutput::Search { config, capacity } => {
                searches.entry(config).or_default().push(capacity);
            }
            JobOutput::Detail(detail) => details.push(*detail),
        }
    }
    let capacities = configurations
        .iter()
        .filter_map(|configured| {
            let found = searches.get(&configured.index)?;
            if found.len() != seed_count {
                return None;
            }
            let rows: Vec<&CurveRow> = curves
                .iter()
                .filter(|r| r.config_index == configured.index)
                .collect();
            Some(capacity_row(spec, configured, found, &rows))
        })
        .collect();
    Ok(SweepResult {
        slo: spec.slo.to_string(),
        load_kind: spec.load.kind,
        grid_keys: spec.grid.axes().iter().map(|a| a.key.clone()).collect(),
        grid_values: spec.grid.axes().iter().map(|a| a.values.clone()).collect(),
        shard: spec.shard,
        complete,
        curves,
        capacities,
        details,
        review: None,
        shard_sensitivities: Vec::new(),
    })
}

/// The canonical search ([`SearchOptions::canonical`]): over multiples of the trace's rate for
/// an open load, whatever the axis, over client counts for a closed one.
fn search_options(spec: &SweepSpec) -> SearchOptions {
    match spec.load.kind {
        LoadKind::Concurrency => SearchOptions::canonical_concurrency(spec.max_lost_fraction),
        _ => SearchOptions::canonical(spec.max_lost_fraction),
    }
}

/// The workload a capacity search runs: an open load is searched as a multiple of the trace's
/// rate, so that a search at a target-rate axis makes the same runs as one at a multiplier axis.
fn search_workload<'a>(workload: &Workload<'a>) -> Workload<'a> {
    match workload.load_kind {
        LoadKind::Concurrency => workload.clone(),
        _ => Workload {
            load_kind: LoadKind::RateScale,
            ..workload.clone()
        },
    }
}

/// What every job of a sweep reads: the spec, the workload, and this shard's configurations
/// (`by_index` maps a configuration's index in the grid to its position there) and profiles.
struct JobContext<'a, 'w> {
    spec: &'a SweepSpec,
    workload: &'a Workload<'w>,
    configurations: &'a [Configured],
    profiles: &'a Profiles,
    by_index: &'a BTreeMap<usize, usize>,
}

impl JobContext<'_, '_> {
    fn entry(&self, config: usize) -> &Configured {
        &self.configurations[self.by_index[&config]]
    }
}

fn run_job(
    job: &Job,
    context: &JobContext<'_, '_>,
    seen_by_run: &SeenByRun,
) -> Result<JobOutput, SweepError> {
    let spec = context.spec;
    match *job {
        Job::Point { config, load, seed } => point_job(context, config, load, seed),
        Job::Search { config, seed } => search_job(context, config, seed, seen_by_run),
        Job::Detail { config } => {
            let Configured {
                index, scenario, ..
            } = context.entry(config);
            let load = spec
                .detail_load
                .unwrap_or(spec.load.values[spec.load.values.len() / 2]);
            detail_run(
                spec,
                context.workload,
                *index,
                scenario,
                context.profiles,
                load,
            )
            .map(|d| JobOutput::Detail(Box::new(d)))
        }
    }
}

/// One run of configuration `config`'s curve at the `load`-th load of the axis with `seed`: its
/// row, and what a capacity search may reuse of it.
fn point_job(
    context: &JobContext<'_, '_>,
    config: usize,
    load: usize,
    seed: u64,
) -> Result<JobOutput, SweepError> {
    let (spec, workload) = (context.spec, context.workload);
    let primary = spec.slo.primary();
    let Configured {
        index,
        configuration,
        scenario,
    } = context.entry(config);
    let load = spec.load.values[load];
    let run = workload.run(scenario, context.profiles, load, seed)?;
    let outcome = run.outcome(&spec.slo);
    let s = &run.summary;
    let seen = Seen {
        outcome,
        throughput_rps: s.throughput_rps,
        latency_ms: latency_ms(s, primary.metric, primary.stat),
    };
    let row = CurveRow {
        config_index: *index,
        configuration: configuration.to_string(),
        settings: configuration.settings.clone(),
        load_kind: spec.load.kind,
        load,
        seed,
        offered_rps: s.offered_rate_rps,
        throughput_rps: s.throughput_rps,
        goodput_rps: s.goodput_rps,
        total: s.measured.total,
        completed: s.measured.completed,
        rejected: s.measured.rejected,
        timed_out: s.measured.timed_out,
        slo_met: outcome.slo_met,
        queue_grows: outcome.queue_grows,
        latency_ms: s.latency_ms.clone(),
    };
    let load_key = run_load_key(spec.load.kind, load, workload.trace_rate_rps);
    Ok(JobOutput::Point(Box::new(row), load_key, seen))
}

/// The capacity search of configuration `config` with `seed`, reusing the curve runs of the
/// same (configuration, seed) in `seen_by_run`.
fn search_job(
    context: &JobContext<'_, '_>,
    config: usize,
    seed: u64,
    seen_by_run: &SeenByRun,
) -> Result<JobOutput, SweepError> {
    let spec = context.spec;
    let primary = spec.slo.primary();
    let Configured {
        configuration,
        scenario,
        ..
    } = context.entry(config);
    let key = RunKey {
        config_index: config,
        seed,
    };
    let mut seen: BTreeMap<u64, Seen> = seen_by_run.get(&key).cloned().unwrap_or_default();
    let searched = search_workload(context.workload);
    let load_key = |load: f64| run_load_key(searched.load_kind, load, None);
    let capacity = search_capacity(&search_options(spec), |load| {
        if let Some(known) = load_key(load).and_then(|k| seen.get(&k)) {
            return Ok(known.outcome);
        }
        let run = searched.run(scenario, context.profiles, load, seed)?;
        let outcome = run.outcome(&spec.slo);
        if let Some(k) = load_key(load) {
            seen.insert(
                k,
                Seen {
                    outcome,
                    throughput_rps: run.summary.throughput_rps,
                    latency_ms: latency_ms(&run.summary, primary.metric, primary.stat),
                },
            );
        }
        Ok::<_, RunError>(outcome)
    })
    .map_err(|e| SweepError::Search {
        configuration: configuration.to_string(),
        seed,
        message: error_chain(&e),
    })?;
    let at_capacity = load_key(capacity.sustainable_load).and_then(|k| seen.get(&k));
    let capacity_rps = match (
        capacity.bracket,
        searched.nominal_rate_rps(capacity.sustainable_load),
    ) {
        (Bracket::BelowRange, _) => 0.0,
        (_, Some(rate)) => rate,
        (_, None) => at_capacity.map_or(0.0, |p| p.throughput_rps),
    };
    Ok(JobOutput::Search {
        config,
        capacity: SeedCapacity {
            seed,
            capacity_rps,
            bracket: capacity.bracket,
            latency_ms: at_capacity.and_then(|p| p.latency_ms),
            limited_by: capacity.limited_by,
        },
    })
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// Collects end-to-end latencies of completed requests.
struct LatencySink(Vec<u64>);

impl RecordSink for LatencySink {
    fn record(&mut self, record: &RequestRecord) {
        if record.outcome == RecordOutcome::Completed {
            self.0.push(record.latency_ns());
        }
    }
}

fn detail_run(
    spec: &SweepSpec,
    workload: &Workload<'_>,
    config_index: usize,
    scenario: &Scenario,
    profiles: &Profiles,
    load: f64,
) -> Result<ConfigDetail, SweepError> {
    let mut sink = LatencySink(Vec::with_capacity(workload.trace.len()));
    let (trace, scenario) = workload.at_load(scenario, load)?;
    let built = profiles.build(&scenario).map_err(RunError::from)?;
    let run = run_with_sink(&built, &trace, &workload.options(spec.base_seed), &mut sink)
        .map_err(RunError::from)?;
    let mut latencies = sink.0;
    latencies.sort_unstable();
    let e2e_quantiles_ms = if latencies.is_empty() {
        Vec::new()
    } else {
        (1..=200)
            .map(|i| {
                let rank = ((i as f64 / 200.0) * latencies.len() as f64).ceil() as usize;
                latencies[rank.clamp(1, latencies.len()) - 1] as f64 * 1e-6
            })
            .collect()
    };
    let ts = &run.timeseries;
    Ok(ConfigDetail {
        config_index,
        load,
        e2e_quantiles_ms,
        time_s: ts.time_ns.iter().map(|&t| t as f64 * 1e-9).collect(),
        queued: ts
            .queued
            .iter()
            .zip(&ts.preprocess_waiting)
            .map(|(&q, &p)| f64::from(q) + f64::from(p))
            .collect(),
        batch_size_mean: ts.batch_size_mean.clone(),
        utilization: ts.utilization.clone(),
    })
}

fn capacity_row(
    spec: &SweepSpec,
    configured: &Configured,
    found: &[SeedCapacity],
    rows: &[&CurveRow],
) -> CapacityRow {
    let Configured {
        index: config_index,
        configuration,
        scenario,
    } = configured;
    let mut found = found.to_vec();
    found.sort_by_key(|f| f.seed);
    let capacity_rps_by_seed: Vec<f64> = found.iter().map(|f| f.capacity_rps).collect();
    let capacity_rps = mean_with_95_interval(&capacity_rps_by_seed).map(|c| c.floored_at(0.0));
    let instances: u32 = scenario.pools().iter().map(|p| p.instances).sum();
    let latencies: Vec<f64> = found.iter().filter_map(|f| f.latency_ms).collect();
    let latency_at_capacity_ms =
        (!latencies.is_empty()).then(|| latencies.iter().sum::<f64>() / latencies.len() as f64);
    let Knees {
        slo_knee,
        kneedle_knee,
        warnings: knee_warnings,
    } = knees(spec, rows);
    let capacity_per_instance_rps = capacity_rps.map(|c| c.mean / f64::from(instances.max(1)));
    let cost_per_million_requests = match (spec.cost_per_instance_hour, capacity_rps) {
        (Some(cost), Some(c)) if c.mean > 0.0 => {
            Some(cost * f64::from(instances) / (c.mean * 3600.0) * 1e6)
        }
        _ => None,
    };
    CapacityRow {
        config_index: *config_index,
        configuration: configuration.to_string(),
        settings: configuration.settings.clone(),
        instances,
        capacity_rps_by_seed,
        bracket_by_seed: found.iter().map(|f| f.bracket).collect(),
        limited_by_by_seed: found.iter().map(|f| f.limited_by.clone()).collect(),
        capacity_rps,
        capacity_per_instance_rps,
        latency_at_capacity_ms,
        slo_knee,
        kneedle_knee,
        knee_warnings,
        cost_per_million_requests,
    }
}

/// One load of a configuration's mean curve: means over its seeds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeanPoint {
    /// The load value.
    pub load: f64,
    /// Mean achieved throughput, requests per second.
    pub throughput_rps: f64,
    /// Mean of the SLO's primary statistic, milliseconds; `None` when some seed has no value.
    pub latency_ms: Option<f64>,
    /// Whether the SLO held for every seed.
    pub slo_met: bool,
}

/// The mean curve of one configuration: one [`MeanPoint`] per load, by increasing load.
pub fn mean_curve(slo: &Slo, rows: &[&CurveRow]) -> Vec<MeanPoint> {
    let primary = slo.primary();
    let mut by_load: BTreeMap<u64, Vec<&CurveRow>> = BTreeMap::new();
    for row in rows {
        by_load.entry(row.load.to_bits()).or_default().push(row);
    }
    let mut curve: Vec<MeanPoint> = by_load
        .values()
        .map(|runs| {
            let n = runs.len() as f64;
            let throughput = runs.iter().map(|r| r.throughput_rps).sum::<f64>() / n;
            let values: Vec<f64> = runs
                .iter()
                .filter_map(|r| stage_stat(r, primary.metric, primary.stat))
                .collect();
            let latency = (values.len() == runs.len()).then(|| values.iter().sum::<f64>() / n);
            MeanPoint {
                load: runs[0].load,
                throughput_rps: throughput,
                latency_ms: latency,
                slo_met: runs.iter().all(|r| r.slo_met),
            }
        })
        .collect();
    curve.sort_by(|a, b| a.load.total_cmp(&b.load));
    curve
}

/// A row's value of `stat` for `metric`, milliseconds; `None` when the row has no such stage or
/// no request went through it.
pub fn stage_stat(row: &CurveRow, metric: Metric, stat: crate::slo::LatencyStat) -> Option<f64> {
    let stats = row.latency_ms.get(metric.summary_key())?;
    if stats.count == 0 {
        return None;
    }
    crate::experiment::stat_of(stats, stat)
}

/// A configuration's two knees and Kneedle's warnings.
struct Knees {
    /// The highest load at which the SLO held for every seed.
    slo_knee: Option<KneePoint>,
    /// The Kneedle knee of the mean curve of the SLO's statistic.
    kneedle_knee: Option<KneePoint>,
    warnings: Vec<String>,
}

fn knees(spec: &SweepSpec, rows: &[&CurveRow]) -> Knees {
    let curve = mean_curve(&spec.slo, rows);
    let knee_point = |p: &MeanPoint| {
        p.latency_ms.map(|latency_ms| KneePoint {
            load: p.load,
            throughput_rps: p.throughput_rps,
            latency_ms,
        })
    };
    let points: Vec<KneePoint> = curve.iter().filter_map(knee_point).collect();
    let slo_knee = curve
        .iter()
        .take_while(|p| p.slo_met)
        .last()
        .and_then(knee_point);
    let x: Vec<f64> = points.iter().map(|p| p.load).collect();
    let y: Vec<f64> = points.iter().map(|p| p.latency_ms).collect();
    match kneedle_convex_increasing(&x, &y, spec.knee_sensitivity) {
        Ok(analysis) => Knees {
            slo_knee,
            kneedle_knee: analysis.knee.map(|k| points[k.index]),
            warnings: analysis.warnings,
        },
        Err(e) => Knees {
            slo_knee,
            kneedle_knee: None,
            warnings: vec![e.to_string()],
        },
    }
}

/// Every stage name of the summary, in path order.
pub fn stages() -> &'static [&'static str] {
    &STAGES
}

/// Configurations ranked by mean capacity per instance, best first (ties by index).
pub fn ranked(result: &SweepResult) -> Vec<&CapacityRow> {
    let mut rows: Vec<&CapacityRow> = result.capacities.iter().collect();
    rows.sort_by(|a, b| {
        let key = |r: &CapacityRow| r.capacity_per_instance_rps.unwrap_or(0.0);
        key(b)
            .total_cmp(&key(a))
            .then(a.config_index.cmp(&b.config_index))
    });
    rows
}
