//! One run of a configuration at one load, and its verdict against an SLO.
//!
//! This is where the report crate meets the simulator: a [`Configuration`] is applied to the base
//! scenario by dotted key, a load value is applied to the trace (rate multiplier or target rate)
//! or to the scenario (closed-loop concurrency), [`capsim_sim::run_with_sink`] runs it, and the
//! summary and the queue-depth timeseries become an [`Outcome`].

use std::borrow::Cow;

use capsim_sim::record::NoRecords;
use capsim_sim::summary::{LatencyStats, Summary};
use capsim_sim::{Profiles, RunOptions, Scenario, Warmup};
use capsim_trace::{IngestReport, Trace, Transforms};

use crate::capacity::{Outcome, QueueGrowth};
use crate::error::ConfigurationError;
use crate::grid::{Configuration, Grid};
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
    /// The warm-up given (`--warmup`); [`Warmup::None`] lets each run derive its own
    /// steady-state window ([`capsim_sim::steady`]).
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

    /// The trace and scenario that run `scenario` at `load`: the trace rescaled for a rate, the
    /// scenario set to closed loop for a concurrency.
    pub(crate) fn at_load<'s>(
        &self,
        scenario: &'s Scenario,
        load: f64,
    ) -> Result<(Cow<'a, Trace>, Cow<'s, Scenario>), RunError> {
        let factor = match self.load_kind {
            LoadKind::RateScale => Some(load),
            LoadKind::TargetRate => Some(load / self.trace_rate_rps.ok_or(RunError::NoTraceRate)?),
            LoadKind::Concurrency => None,
        };
        if let Some(factor) = factor {
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
            return Ok((Cow::Owned(scaled), Cow::Borrowed(scenario)));
        }
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
        Ok((Cow::Borrowed(self.trace), Cow::Owned(closed)))
    }

    /// The run options of a run with `seed`: the warm-up given.
    pub(crate) fn options(&self, seed: u64) -> RunOptions {
        RunOptions {
            seed,
            warmup: self.warmup,
            ..RunOptions::default()
        }
    }

    /// Runs `scenario` at `load` with `seed`, its models built from `profiles` (which must hold
    /// the profiles it names: see [`Profiles::load`]), measured over its steady-state window.
    pub fn run(
        &self,
        scenario: &Scenario,
        profiles: &Profiles,
        load: f64,
        seed: u64,
    ) -> Result<RunResult, RunError> {
        let (trace, scenario) = self.at_load(scenario, load)?;
        let run = capsim_sim::steady::run(
            &profiles.build(&scenario)?,
            &trace,
            &self.options(seed),
            &mut NoRecords,
        )?;
        // Open loop: the arrivals end at the trace's last; closed loop: the run's own sends.
        let arrivals_end_ns = match self.load_kind {
            LoadKind::Concurrency => u64::MAX,
            _ => trace.arrival_ns().last().copied().unwrap_or(0),
        };
        // Only samples after the warm-up (filling an empty system is not growth) and while
        // requests still arrive (after the last arrival the queue drains, and the drain would
        // hide growth).
        let warmup_end_ns = run
            .summary
            .steady_window
            .as_ref()
            .map_or(0, |w| (w.from_s * 1e9) as u64);
        let ts = &run.timeseries;
        let depths: Vec<f64> = (0..ts.len())
            .filter(|&i| (warmup_end_ns..=arrivals_end_ns).contains(&ts.time_ns[i]))
            .map(|i| f64::from(ts.queued[i]) + f64::from(ts.preprocess_waiting[i]))
            .collect();
        Ok(RunResult {
            queue_growth: QueueGrowth::from_samples(&depths),
            summary: run.summary,
        })
    }

    /// Whether the trace is long enough to measure `scenario` (labelled `configuration`) at
    /// `load` in a steady state; `None` when it is, else why not and how long it needs to be.
    /// Costs one run. Closed-loop loads are not checked (their clients set the pace, not the
    /// trace's arrivals).
    pub fn check_length(
        &self,
        scenario: &Scenario,
        profiles: &Profiles,
        configuration: &str,
        load: f64,
        seed: u64,
    ) -> Result<Option<ShortTrace>, RunError> {
        if self.load_kind == LoadKind::Concurrency {
            return Ok(None);
        }
        let (trace, scenario) = self.at_load(scenario, load)?;
        let window =
            capsim_sim::steady::window(&profiles.build(&scenario)?, &trace, &self.options(seed))?;
        let Some(needs_run_s) = window.too_short_needs_s else {
            return Ok(None);
        };
        let rows = self.trace.len() as u64;
        let run_span_s = window.last_send_s;
        let needs_rows = if run_span_s > 0.0 {
            (rows as f64 * needs_run_s / run_span_s).ceil() as u64
        } else {
            rows.saturating_mul(10)
        }
        .max(rows + 1);
        Ok(Some(ShortTrace {
            configuration: configuration.to_string(),
            load,
            load_kind: self.load_kind,
            lifetime_s: window.lifetime_s,
            run_span_s,
            needs_run_s,
            rows,
            needs_rows,
            needs_trace_s: self.trace_rate_rps.map(|r| needs_rows as f64 / r),
        }))
    }
}

/// A trace too short for the load it drives: at that load its requests do not turn over often
/// enough for a steady-state window (docs/report.md, "Steady state").
#[derive(Debug, Clone, PartialEq)]
pub struct ShortTrace {
    /// The configuration checked (`key=value,...`).
    pub configuration: String,
    /// The load it was checked at, in `load_kind`'s unit.
    pub load: f64,
    /// What `load` means.
    pub load_kind: LoadKind,
    /// Mean end-to-end latency of a request at that load, seconds.
    pub lifetime_s: f64,
    /// The run's last send, seconds: the span of its arrivals at that load.
    pub run_span_s: f64,
    /// The span of arrivals a steady window needs at that load, seconds.
    pub needs_run_s: f64,
    /// Requests in the trace.
    pub rows: u64,
    /// Requests a trace as dense needs.
    pub needs_rows: u64,
    /// How long such a trace lasts at the trace's own rate, seconds, when it has one.
    pub needs_trace_s: Option<f64>,
}

impl std::fmt::Display for ShortTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let load = match self.load_kind {
            LoadKind::RateScale => format!("{:.2}x the trace's rate", self.load),
            LoadKind::TargetRate => format!("{:.1} req/s", self.load),
            LoadKind::Concurrency => format!("{} clients", self.load),
        };
        write!(
            f,
            "the trace is too short to measure `{}` at {load}: there a request lives {:.1} s on average, and a steady-state window needs {} lifetimes after the warm-up and before the drain, arrivals over at least {:.1} s, but the trace's span is {:.1} s ({} requests). ",
            self.configuration,
            self.lifetime_s,
            capsim_sim::steady::SHORT_LIFETIMES,
            self.needs_run_s,
            self.run_span_s,
            self.rows,
        )?;
        match self.needs_trace_s {
            Some(trace_s) => {
                let minutes = (trace_s / 60.0).ceil().max(1.0);
                write!(
                    f,
                    "Use a trace of at least {} requests ({:.0} s at its own rate): a longer log, or this one extended with `--extend-to {minutes:.0}m` (a seeded block bootstrap of its own gaps and sizes; docs/trace-format.md)",
                    self.needs_rows, trace_s
                )
            }
            None => write!(f, "Use a trace of at least {} requests", self.needs_rows),
        }
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
        // A request whose client gave up (`load.client_timeout`) is lost like a timed-out one.
        let lost = measured.rejected + measured.timed_out + measured.failed;
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

/// Configures every configuration of `grid` on `base` and checks `slo` against each, before
/// anything runs, so that a misspelt key, a refused value or an SLO on a metric a configuration
/// cannot report fails at once, as the user's input. Returns the notes of the settings that
/// resolved a conflict ([`Scenario::notes`]: preferred batch sizes above a new maximum dropped),
/// each once, in grid order.
pub fn check_configurations(
    base: &Scenario,
    grid: &Grid,
    slo: &Slo,
) -> Result<Vec<String>, ConfigurationError> {
    let mut notes: Vec<String> = Vec::new();
    for configuration in grid.configurations() {
        let scenario = configure(base, &configuration).map_err(|e| match e {
            RunError::Configure { source, .. } => ConfigurationError::Scenario {
                configuration: configuration.to_string(),
                source,
            },
            other => ConfigurationError::Other(other.to_string()),
        })?;
        slo.check_against(&scenario)
            .map_err(|source| ConfigurationError::Slo {
                configuration: configuration.to_string(),
                source,
            })?;
        for note in &scenario.notes()[base.notes().len()..] {
            if !notes.contains(note) {
                notes.push(note.clone());
            }
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BERT_LIKE: &str = "[batcher]\nmax_batch_size = 32\npreferred_batch_size = [8, 16, 32]\n[service]\nkind = \"constant\"\ntime = \"5ms\"\n";

    fn check(axes: &[&str], slo: &str) -> Result<Vec<String>, ConfigurationError> {
        let base = Scenario::from_toml_str(BERT_LIKE).unwrap();
        let grid = Grid::new(axes.iter().map(|a| a.parse().unwrap()).collect()).unwrap();
        check_configurations(&base, &grid, &slo.parse().unwrap())
    }

    #[test]
    fn a_grid_max_batch_size_below_preferred_sizes_runs_with_one_note_per_value() {
        let notes = check(
            &["batcher.max_batch_size=4,12,32", "instances=1..3"],
            "e2e.p99<=1s",
        )
        .unwrap();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("= 4 ") && notes[0].contains("dropped [8, 16, 32]"));
        assert!(notes[1].contains("= 12 ") && notes[1].contains("leaving [8]"));
    }

    #[test]
    fn a_misspelt_grid_key_fails_before_any_run_with_a_suggestion() {
        let err = check(&["instance=1,2"], "e2e.p99<=1s")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("configuration `instance=1`") && err.contains("did you mean `instances`?"),
            "{err}"
        );
    }

    #[test]
    fn an_slo_no_configuration_can_report_fails_before_any_run() {
        let err = check(&["instances=1,2"], "ttft.p99<=2s")
            .unwrap_err()
            .to_string();
        assert!(err.contains("reports no `ttft`"), "{err}");
    }
}
