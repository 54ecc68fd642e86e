//! One run of a configuration at one load, and its verdict against an SLO.
//!
//! This is where the report crate meets the simulator: a [`Configuration`] is applied to the base
//! scenario by dotted key, a load value is applied to the trace (rate multiplier or target rate)
//! or to the scenario (closed-loop concurrency), [`capsim_sim::run_with_sink`] runs it, and the
//! summary and the queue-depth timeseries become an [`Outcome`].

use capsim_sim::record::NoRecords;
use capsim_sim::summary::{LatencyStats, Summary};
use capsim_sim::{Profiles, RunOptions, Scenario, Warmup, run_with_sink};
use capsim_trace::{IngestReport, Trace, Transforms};

use crate::capacity::{Outcome, QueueGrowth};
use crate::grid::Configuration;
use crate::load::LoadKind;
use crate::slo::{LatencyStat, Metric, Slo};

impl From<capsim_sim::ScenarioError> for RunError {
    fn from(source: capsim_sim::ScenarioError) -> RunError {
        RunError::Build(Box::new(source))
    }
}

/// Why a run could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A grid value or load was refused by the scenario.
    #[error("configuration `{configuration}`")]
    Configure {
        /// The configuration's label (`key=value,...`), or the one `key=value` the load set.
        configuration: String,
        /// Why the scenario refused it.
        #[source]
        source: Box<capsim_sim::ScenarioError>,
    },
    /// The trace could not be rescaled.
    #[error("rescaling the trace by {factor}")]
    Rescale {
        /// The rate multiplier asked for (2 doubles the load).
        factor: f64,
        /// Why the trace refused it.
        #[source]
        source: Box<capsim_trace::TraceError>,
    },
    /// A target rate was asked of a trace with no measurable rate.
    #[error("a target rate needs a trace with at least two requests over a nonzero span")]
    NoTraceRate,
    /// The scenario could not be built (a profile it names was not loaded).
    #[error(transparent)]
    Build(Box<capsim_sim::ScenarioError>),
    /// The simulator refused the run.
    #[error(transparent)]
    Sim(#[from] capsim_sim::SimError),
}

/// The base scenario with `configuration`'s settings applied.
pub fn configure(base: &Scenario, configuration: &Configuration) -> Result<Scenario, RunError> {
    let mut scenario = base.clone();
    for (key, value) in &configuration.settings {
        scenario
            .set(key, value)
            .map_err(|source| RunError::Configure {
                configuration: configuration.to_string(),
                source: Box::new(source),
            })?;
    }
    Ok(scenario)
}

/// A trace and the facts about it the load axis needs.
#[derive(Debug, Clone)]
pub struct Workload<'a> {
    /// The trace as read.
    pub trace: &'a Trace,
    /// Its mean arrival rate, requests per second, when it has one.
    pub trace_rate_rps: Option<f64>,
    /// What load values mean.
    pub load_kind: LoadKind,
    /// Requests excluded from statistics at the start of each run.
    pub warmup: Warmup,
}

impl<'a> Workload<'a> {
    /// A workload over `trace`, whose load values are of `load_kind`.
    pub fn new(trace: &'a Trace, load_kind: LoadKind, warmup: Warmup) -> Workload<'a> {
        let trace_rate_rps = capsim_trace::Summary::of(trace).mean_rate_rps;
        Workload {
            trace,
            trace_rate_rps,
            load_kind,
            warmup,
        }
    }

    /// The mean offered rate a load value asks for, requests per second, when it is known
    /// before running (not for concurrency).
    pub fn nominal_rate_rps(&self, load: f64) -> Option<f64> {
        match self.load_kind {
            LoadKind::RateScale => self.trace_rate_rps.map(|r| r * load),
            LoadKind::TargetRate => Some(load),
            LoadKind::Concurrency => None,
        }
    }

    /// Runs `scenario` at `load` with `seed`, its models built from `profiles` (which must hold
    /// the profiles it names: see [`Profiles::load`]).
    pub fn run(
        &self,
        scenario: &Scenario,
        profiles: &Profiles,
        load: f64,
        seed: u64,
    ) -> Result<RunResult, RunError> {
        let options = RunOptions {
            seed,
            warmup: self.warmup,
            ..RunOptions::default()
        };
        let factor = match self.load_kind {
            LoadKind::RateScale => Some(load),
            LoadKind::TargetRate => Some(load / self.trace_rate_rps.ok_or(RunError::NoTraceRate)?),
            LoadKind::Concurrency => None,
        };
        let mut arrivals_end_ns = u64::MAX;
        let run = match factor {
            Some(factor) => {
                let transforms = Transforms {
                    rate_scale: Some(factor),
                    ..Transforms::default()
                };
                let scaled = transforms
                    .apply(self.trace.clone(), &mut IngestReport::default())
                    .map_err(|source| RunError::Rescale {
                        factor,
                        source: Box::new(source),
                    })?;
                arrivals_end_ns = scaled.arrival_ns().last().copied().unwrap_or(0);
                run_with_sink(
                    &profiles.build(scenario)?,
                    &scaled,
                    &options,
                    &mut NoRecords,
                )?
            }
            None => {
                let mut closed = scenario.clone();
                let set = |s: &mut Scenario, key: &str, value: String| {
                    s.set(key, &value).map_err(|source| RunError::Configure {
                        configuration: format!("{key}={value}"),
                        source: Box::new(source),
                    })
                };
                set(&mut closed, "load.mode", "\"closed\"".into())?;
                set(
                    &mut closed,
                    "load.concurrency",
                    format!("{}", load.round() as u64),
                )?;
                run_with_sink(
                    &profiles.build(&closed)?,
                    self.trace,
                    &options,
                    &mut NoRecords,
                )?
            }
        };
        // Only samples while requests still arrive: after the last arrival the queue drains, and
        // the drain would hide growth.
        let ts = &run.timeseries;
        let depths: Vec<f64> = (0..ts.len())
            .filter(|&i| ts.time_ns[i] <= arrivals_end_ns)
            .map(|i| f64::from(ts.queued[i]) + f64::from(ts.preprocess_waiting[i]))
            .collect();
        Ok(RunResult {
            queue_growth: QueueGrowth::from_samples(&depths),
            summary: run.summary,
        })
    }
}

/// What one run produced that the sweep keeps.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The run summary.
    pub summary: Summary,
    /// The queue-growth test over the run's sampled queue depths.
    pub queue_growth: QueueGrowth,
}

impl RunResult {
    /// The verdict of this run against `slo`.
    pub fn outcome(&self, slo: &Slo) -> Outcome {
        let measured = &self.summary.measured;
        let lost = measured.rejected + measured.timed_out;
        let lost_fraction = if measured.total == 0 {
            1.0
        } else {
            lost as f64 / measured.total as f64
        };
        Outcome {
            slo_met: slo
                .holds(|metric, stat| latency_ms(&self.summary, metric, stat).map(|ms| ms * 1e6)),
            lost_fraction,
            queue_grows: self.queue_growth.grows,
            achieved_fraction: achieved_fraction(&self.summary),
        }
    }
}

/// Achieved throughput over offered rate; 1 when nothing was offered.
fn achieved_fraction(summary: &Summary) -> f64 {
    if summary.offered_rate_rps > 0.0 {
        summary.throughput_rps / summary.offered_rate_rps
    } else {
        1.0
    }
}

/// The summary's value of `stat` for `metric`, in milliseconds; `None` when the summary has no
/// such stage or no request went through it.
pub fn latency_ms(summary: &Summary, metric: Metric, stat: LatencyStat) -> Option<f64> {
    let stats = summary.latency_ms.get(metric.summary_key())?;
    if stats.count == 0 {
        return None;
    }
    stat_of(stats, stat)
}

/// The value of `stat` in `stats`, milliseconds; `None` for a percentile the summary does not
/// report.
pub fn stat_of(stats: &LatencyStats, stat: LatencyStat) -> Option<f64> {
    match stat {
        LatencyStat::Mean => Some(stats.mean_ms),
        LatencyStat::Max => Some(stats.max_ms),
        LatencyStat::Percentile(p) => [
            (50.0, stats.p50_ms),
            (90.0, stats.p90_ms),
            (95.0, stats.p95_ms),
            (99.0, stats.p99_ms),
            (99.9, stats.p999_ms),
        ]
        .into_iter()
        .find(|(reported, _)| *reported == p)
        .map(|(_, value)| value),
    }
}
