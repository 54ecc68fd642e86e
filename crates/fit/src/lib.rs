//! Fits a continuous-batching scenario's step time to a measured per-request log.
//!
//! The log's arrivals and sizes are replayed through [`capsim_sim::simulate_with_requests`] with
//! candidate parameters, and Nelder-Mead (argmin) minimises the sum of squared log-ratios of the
//! nine figures of [`LatencyMetrics`] (TTFT, TPOT and end-to-end, each mean, p50 and p90),
//! simulated against measured, from several starts in parallel (rayon). What varies depends on
//! the scenario's `[step_time]`:
//!
//! | step time | keys fitted |
//! |---|---|
//! | `linear` (or `profile`, replaced by `linear`) | `batcher.step_overhead`, `step_time.per_prefill_token`, `step_time.per_decode_seq`, `step_time.per_kv_token` |
//! | `roofline` (model and GPU kept) | `batcher.step_overhead`, `step_time.compute_efficiency`, `step_time.bandwidth_efficiency` |
//!
//! With `linear`, the step's fixed time lives in `step_overhead` alone (`step_time.base` is set to
//! 0, since the two are indistinguishable), and `step_overhead_per_seq` is not fitted: per
//! sequence, it only differs from `per_decode_seq` on the few steps that carry a prefill. Every
//! parameter is searched in log space, within bounds; one that ends within 1% of a bound is
//! reported.
//!
//! Several runs are fitted together by [`pooled`]: the efficiencies shared by every run, the
//! overheads one per deployment, and each run predicted from a fit of the others.
//!
//! ```no_run
//! use capsim_fit::{FitConfig, fit, read_log};
//! use capsim_sim::Scenario;
//!
//! let scenario = Scenario::from_path("scenario.toml".as_ref())?;
//! let log = read_log("requests.jsonl".as_ref(), None)?;
//! let result = fit(&scenario, &log, &FitConfig::default())?;
//! println!("{}", result.table());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod aiperf;
pub mod batch_means;
mod describe;
pub mod dynamic;
pub mod format;
pub mod inference_perf;
pub mod log;
pub mod mapped;
pub mod meta;
pub mod metrics;
pub mod pooled;

use argmin::core::{CostFunction, Executor, State, TerminationReason, TerminationStatus};
use argmin::solver::neldermead::NelderMead;
use capsim_sim::rng::{SimRng, splitmix64};
use capsim_sim::timing::step_spec::{
    DEFAULT_BANDWIDTH_EFFICIENCY, DEFAULT_COMPUTE_EFFICIENCY, StepTimeSpec,
};
use capsim_sim::{Outcome, Profiles, RunOptions, Scenario};
use capsim_trace::{Columns, Trace};
use rand::{RngExt, SeedableRng};
use rayon::prelude::*;
use std::sync::Arc;

pub use describe::{describe_intervals, untrusted};
pub use format::{detect_format, parse_log_format, read_log, read_log_as};
pub use log::{Excluded, LogError, MeasuredLog};
pub use mapped::LogMap;
pub use metrics::{Figures, LatencyMetrics, METRIC_NAMES};

/// How a fit runs.
#[derive(Debug, Clone)]
pub struct FitConfig {
    /// Seed of the simulations (the linear step time is deterministic; the seed fixes the rest).
    pub seed: u64,
    /// Most Nelder-Mead iterations.
    pub max_iterations: u64,
    /// Stop when the simplex's losses have a standard deviation below this.
    pub loss_tolerance: f64,
    /// Nelder-Mead descents from different starts (1 to 8), run in parallel; the best is kept.
    pub starts: usize,
}

impl Default for FitConfig {
    fn default() -> Self {
        FitConfig {
            seed: 1,
            max_iterations: 400,
            loss_tolerance: 1e-7,
            starts: 8,
        }
    }
}

/// One fitted parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct FittedParameter {
    /// Scenario key (`batcher.step_overhead`, `step_time.per_prefill_token`, ...).
    pub key: &'static str,
    /// Fitted value: nanoseconds for a time, a fraction for an efficiency.
    pub value: f64,
    /// Lower and upper bound of the search, in the value's unit.
    pub bounds: (f64, f64),
    /// Whether the value ended within 1% (in log space) of a bound.
    pub at_bound: bool,
}

/// What a fit found.
#[derive(Debug, Clone)]
pub struct FitResult {
    /// The input scenario with the fitted keys set.
    pub scenario: Scenario,
    /// The fitted parameters.
    pub parameters: Vec<FittedParameter>,
    /// The log's figures.
    pub measured: LatencyMetrics,
    /// The figures of the fitted scenario replaying the log.
    pub simulated: LatencyMetrics,
    /// The final loss (sum of squared log-ratios).
    pub loss: f64,
    /// Nelder-Mead iterations run.
    pub iterations: u64,
    /// Whether the best start's simplex converged (rather than running out of iterations).
    pub converged: bool,
    /// Per parameter (in [`FitResult::parameters`] order), max over min of its value among the
    /// starts that reached a loss within [`NEAR_BEST_LOSS`] of the best: near 1 when the log pins
    /// it down.
    pub start_spread: Vec<f64>,
    /// Each request's measured latencies, in the log's order.
    pub measured_requests: RequestLatencies,
    /// Each request's latencies in the fitted scenario's replay, in the same order.
    pub simulated_requests: RequestLatencies,
}

impl FitResult {
    /// Largest absolute relative error over the nine figures.
    pub fn worst_error(&self) -> f64 {
        self.simulated.worst_error(&self.measured)
    }

    /// A plain-text table: each figure, measured, simulated and the relative error.
    pub fn table(&self) -> String {
        comparison_table(&self.measured, &self.simulated)
    }
}

/// A plain-text table: each figure, measured, simulated and the relative error.
fn comparison_table(measured: &LatencyMetrics, simulated: &LatencyMetrics) -> String {
    let meas = measured.values();
    let sim = simulated.values();
    let err = simulated.relative_errors(measured);
    let mut out = format!(
        "{:<10} {:>14} {:>14} {:>8}\n",
        "metric", "measured_ms", "simulated_ms", "error"
    );
    for k in 0..METRIC_NAMES.len() {
        out.push_str(&format!(
            "{:<10} {:>14.1} {:>14.1} {:>+7.1}%\n",
            METRIC_NAMES[k],
            meas[k],
            sim[k],
            err[k] * 100.0
        ));
    }
    out
}

/// A scenario replaying a measured log as it is, nothing fitted: a prediction of the log when
/// none of the scenario's parameters came from it.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// The log's figures.
    pub measured: LatencyMetrics,
    /// The scenario's figures replaying the log's arrivals and sizes.
    pub simulated: LatencyMetrics,
    /// Requests the simulation did not complete (each counts as a miss, never dropped).
    pub not_completed: usize,
}

impl Comparison {
    /// Largest absolute relative error over the nine figures.
    pub fn worst_error(&self) -> f64 {
        self.simulated.worst_error(&self.measured)
    }

    /// A plain-text table: each figure, measured, simulated and the relative error.
    pub fn table(&self) -> String {
        comparison_table(&self.measured, &self.simulated)
    }
}

/// Replays `log`'s arrivals and sizes through `scenario` as given (one continuous-batching
/// pool) and compares the figures, fitting nothing.
pub fn compare(scenario: &Scenario, log: &MeasuredLog, seed: u64) -> Result<Comparison, FitError> {
    let replay = Replay::new(scenario, log, seed)?;
    let (simulated, not_completed) = replay.simulate(scenario)?;
    Ok(Comparison {
        measured: replay.measured,
        simulated,
        not_completed,
    })
}

/// Why a fit could not run or could not be trusted.
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    /// The scenario is not one this fit handles.
    #[error("scenario: {0}")]
    Scenario(String),
    /// The log's batches cannot pin down the service time (dynamic batching).
    #[error("the log's batches: {0}")]
    Batches(String),
    /// The simulation refused the replayed log.
    #[error("simulating the log: {0}")]
    Simulation(String),
    /// The optimizer failed.
    #[error("the optimizer failed: {0}")]
    Optimizer(String),
}

/// The unit a fitted key's values are in: `"ns"` for a time, `""` for an efficiency.
pub fn parameter_unit(key: &str) -> &'static str {
    if key.ends_with("_efficiency") {
        ""
    } else {
        "ns"
    }
}

/// A fitted key: its scenario path and the bounds of its search (nanoseconds for a time, a
/// plain number for an efficiency).
type Parameter = (&'static str, f64, f64);

/// The linear model's keys.
const LINEAR: [Parameter; 4] = [
    ("batcher.step_overhead", 1e3, 1e9),
    ("step_time.per_prefill_token", 1.0, 1e7),
    ("step_time.per_decode_seq", 1.0, 1e8),
    ("step_time.per_kv_token", 1e-3, 1e5),
];

/// The roofline's keys: the step overhead and the two efficiencies.
const ROOFLINE: [Parameter; 3] = [
    ("batcher.step_overhead", 1e3, 1e9),
    ("step_time.compute_efficiency", 0.01, 1.0),
    ("step_time.bandwidth_efficiency", 0.01, 1.0),
];

/// With measured operator times (`kind = "operators"`) the GPU's time of a step is the card's
/// own micro-benchmarks; what is left to fit is the engine's: its CPU time per step that the GPU
/// does not hide.
const OPERATORS: [Parameter; 1] = [("batcher.step_overhead", 1e3, 1e9)];

/// Which step-time model a fit varies, from the scenario's `[step_time]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepModel {
    /// `kind = "linear"` (or `profile`, replaced): [`LINEAR`]'s keys.
    Linear,
    /// `kind = "roofline"`: [`ROOFLINE`]'s keys, the model and GPU kept.
    Roofline,
    /// `kind = "operators"`: [`OPERATORS`]' key, the operator table, model and GPU kept.
    Operators,
}

impl StepModel {
    fn parameters(self) -> &'static [Parameter] {
        match self {
            StepModel::Linear => &LINEAR,
            StepModel::Roofline => &ROOFLINE,
            StepModel::Operators => &OPERATORS,
        }
    }

    /// The name of its `[step_time]` kind.
    fn name(self) -> &'static str {
        match self {
            StepModel::Linear => "linear",
            StepModel::Roofline => "roofline",
            StepModel::Operators => "operators",
        }
    }
}

/// The replay: the scenario to vary, the log as a trace, and the measured figures.
#[derive(Clone)]
struct Replay {
    base: Scenario,
    model: StepModel,
    trace: Trace,
    measured: LatencyMetrics,
    seed: u64,
    /// Rows whose latencies count (with repeats), for a bootstrap replica; all rows when `None`.
    sample: Option<Vec<u32>>,
    /// The files the scenario names (a model's config.json, an operator table), read once for
    /// every candidate.
    profiles: Arc<Profiles>,
}

/// Per-request latencies in nanoseconds, one entry per request of the log in its order (NaN where
/// undefined: TPOT of a one-token request, any latency of a request the simulation did not
/// complete).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestLatencies {
    /// Time to first token.
    pub ttft_ns: Vec<f64>,
    /// Time per output token after the first.
    pub tpot_ns: Vec<f64>,
    /// End-to-end.
    pub e2e_ns: Vec<f64>,
}

impl RequestLatencies {
    /// The log's measured latencies.
    pub fn of_log(log: &MeasuredLog) -> RequestLatencies {
        RequestLatencies {
            ttft_ns: log.ttft_ns.iter().map(|&t| t as f64).collect(),
            tpot_ns: log.tpot_ns(),
            e2e_ns: log.e2e_ns.iter().map(|&t| t as f64).collect(),
        }
    }

    /// The figures over `sample`'s rows (repeats count again), or over all rows.
    pub fn metrics(&self, sample: Option<&[u32]>) -> LatencyMetrics {
        let pick = |v: &[f64]| -> Vec<f64> {
            match sample {
                Some(rows) => rows.iter().map(|&r| v[r as usize]).collect(),
                None => v.to_vec(),
            }
        };
        LatencyMetrics {
            ttft: Figures::of_ns(&pick(&self.ttft_ns)),
            tpot: Figures::of_ns(&pick(&self.tpot_ns)),
            e2e: Figures::of_ns(&pick(&self.e2e_ns)),
        }
    }
}

impl Replay {
    /// The replay of `log` through `scenario`, every row counted. The scenario must have one
    /// continuous-batching pool.
    fn new(scenario: &Scenario, log: &MeasuredLog, seed: u64) -> Result<Replay, FitError> {
        if scenario.pools().len() != 1 || scenario.pools()[0].llm.is_none() {
            return Err(FitError::Scenario(
                "a fit or comparison with an LLM log needs one pool with batcher.kind = \
                 \"continuous\" (named pools are not fitted yet)"
                    .into(),
            ));
        }
        let trace = Trace::from_columns(Columns {
            arrival_ns: log.arrival_ns.clone(),
            input_tokens: log.input_tokens.clone(),
            output_tokens: Some(log.output_tokens.clone()),
            ..Columns::default()
        })
        .map_err(|e| FitError::Simulation(e.to_string()))?;
        let model = match scenario.pools().first().and_then(|p| p.llm.as_ref()) {
            Some(llm) if matches!(llm.step_time_spec, StepTimeSpec::Roofline(_)) => {
                StepModel::Roofline
            }
            Some(llm) if matches!(llm.step_time_spec, StepTimeSpec::Operators(_)) => {
                StepModel::Operators
            }
            _ => StepModel::Linear,
        };
        // The files the kept step time names (a model's config.json, an operator table), read
        // once; a linear fit replaces the step time, so a profile it named is never read.
        let mut profiles = Profiles::default();
        if model != StepModel::Linear {
            profiles
                .load(scenario)
                .map_err(|e| FitError::Scenario(e.to_string()))?;
        }
        Ok(Replay {
            base: scenario.clone(),
            model,
            trace,
            measured: RequestLatencies::of_log(log).metrics(None),
            seed,
            sample: None,
            profiles: Arc::new(profiles),
        })
    }

    /// The starting values of a fit of `log`, in the model's parameter order.
    fn initial(&self, log: &MeasuredLog) -> Vec<f64> {
        match self.model {
            StepModel::Linear => initial_linear(log, &self.measured).to_vec(),
            // A fifth of a median TPOT fixed; the efficiencies at the roofline's defaults.
            StepModel::Roofline => vec![
                0.2 * self.measured.tpot.p50_ms * 1e6,
                DEFAULT_COMPUTE_EFFICIENCY,
                DEFAULT_BANDWIDTH_EFFICIENCY,
            ],
            // The operators time the GPU: a twentieth of a median TPOT left to the engine.
            StepModel::Operators => vec![0.05 * self.measured.tpot.p50_ms * 1e6],
        }
    }

    /// The scenario with `values` (in the model's parameter order) set.
    fn scenario(&self, values: &[f64]) -> Result<Scenario, FitError> {
        let mut s = self.base.clone();
        let set = |s: &mut Scenario, key: &str, value: &str| {
            s.set(key, value)
                .map_err(|e| FitError::Scenario(e.to_string()))
        };
        // step_overhead is an integer duration; the coefficients keep fractions of a nanosecond.
        set(
            &mut s,
            "batcher.step_overhead",
            &format!("\"{}ns\"", values[0].round() as u64),
        )?;
        if self.model == StepModel::Operators {
            return Ok(s);
        }
        if self.model == StepModel::Roofline {
            set(
                &mut s,
                "step_time.compute_efficiency",
                &format!("{:.5}", values[1]),
            )?;
            set(
                &mut s,
                "step_time.bandwidth_efficiency",
                &format!("{:.5}", values[2]),
            )?;
            return Ok(s);
        }
        let values_ns = values;
        let step_time = format!(
            "{{ kind = \"linear\", base = \"0ns\", per_prefill_token = \"{:.3}ns\", \
             per_decode_seq = \"{:.3}ns\", per_kv_token = \"{:.4}ns\" }}",
            values_ns[1], values_ns[2], values_ns[3]
        );
        s.set("step_time", &step_time)
            .map_err(|e| FitError::Scenario(e.to_string()))?;
        Ok(s)
    }

    /// The figures of one simulation (over [`Replay::sample`] when set), and how many requests
    /// did not complete.
    fn simulate(&self, scenario: &Scenario) -> Result<(LatencyMetrics, usize), FitError> {
        let (latencies, lost) = self.simulate_requests(scenario)?;
        Ok((latencies.metrics(self.sample.as_deref()), lost))
    }

    /// Each request's simulated latencies, and how many requests did not complete.
    fn simulate_requests(
        &self,
        scenario: &Scenario,
    ) -> Result<(RequestLatencies, usize), FitError> {
        let options = RunOptions {
            seed: self.seed,
            ..RunOptions::default()
        };
        // Every file the candidate names was read by `Replay::new`.
        let built = self
            .profiles
            .build(scenario)
            .map_err(|e| FitError::Scenario(e.to_string()))?;
        let (_, records) = capsim_sim::simulate_with_requests(&built, &self.trace, &options)
            .map_err(|e| FitError::Simulation(e.to_string()))?;
        // Per trace row; NaN where the request did not complete.
        let rows = self.trace.len();
        let mut latencies = RequestLatencies {
            ttft_ns: vec![f64::NAN; rows],
            tpot_ns: vec![f64::NAN; rows],
            e2e_ns: vec![f64::NAN; rows],
        };
        let mut lost = 0;
        for r in records.records() {
            if r.outcome != Outcome::Completed {
                lost += 1;
                continue;
            }
            let (t, e) = (r.ttft_ns(), r.latency_ns());
            let row = r.request as usize;
            latencies.ttft_ns[row] = t as f64;
            latencies.e2e_ns[row] = e as f64;
            latencies.tpot_ns[row] = log::tpot_ns(t, e, r.output_tokens);
        }
        Ok((latencies, lost))
    }

    fn loss(&self, values_ns: &[f64]) -> Result<f64, FitError> {
        let scenario = self.scenario(values_ns)?;
        let (sim, lost) = self.simulate(&scenario)?;
        let meas = self.measured.values();
        let loss: f64 = sim
            .values()
            .iter()
            .zip(meas)
            .map(|(s, m)| (s / m).ln().powi(2))
            .sum();
        // A request the candidate cannot complete is a wrong candidate, never a silent drop.
        let loss = loss + lost as f64;
        Ok(if loss.is_finite() { loss } else { 1e12 })
    }
}

/// Log-space parameters, clamped to `parameters`' bounds.
fn to_values(parameters: &[Parameter], x: &[f64]) -> Vec<f64> {
    x.iter()
        .zip(parameters)
        .map(|(x, (_, lo, hi))| x.clamp(lo.ln(), hi.ln()).exp())
        .collect()
}

impl CostFunction for Replay {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        self.loss(&to_values(self.model.parameters(), x))
            .map_err(argmin::core::Error::from)
    }
}

/// The starting point, from the log: a step of a median TPOT, half of it fixed, a quarter per
/// decoding sequence (at a guessed 32 of them) and a quarter for their KV reads (at 1000 tokens
/// each); a prompt token at a tenth of the first request's TTFT per prompt token.
fn initial_linear(log: &MeasuredLog, measured: &LatencyMetrics) -> [f64; 4] {
    let tpot_ns = measured.tpot.p50_ms * 1e6;
    let first_prefill_ns = log.ttft_ns[0] as f64 / f64::from(log.input_tokens[0].max(1));
    [
        0.5 * tpot_ns,
        0.1 * first_prefill_ns,
        0.25 * tpot_ns / 32.0,
        0.25 * tpot_ns / 32_000.0,
    ]
}

/// Fits `scenario`'s step time to `log` (see the module docs). The scenario must have one pool,
/// with `batcher.kind = "continuous"`; its `[step_time]` is replaced by a `linear` one.
pub fn fit(
    scenario: &Scenario,
    log: &MeasuredLog,
    config: &FitConfig,
) -> Result<FitResult, FitError> {
    let replay = Replay::new(scenario, log, config.seed)?;
    let measured = replay.measured;
    let params = replay.model.parameters();
    let initial = replay.initial(log);
    let x0: Vec<f64> = initial
        .iter()
        .zip(params)
        .map(|(v, (_, lo, hi))| v.clamp(*lo, *hi).ln())
        .collect();
    let starts: Vec<Vec<f64>> = START_OFFSETS
        .iter()
        .take(config.starts.clamp(1, START_OFFSETS.len()))
        .map(|offsets| {
            x0.iter()
                .zip(offsets)
                .map(|(x, o)| x + o)
                .collect::<Vec<f64>>()
        })
        .collect();
    let runs: Vec<Descent> = starts
        .into_par_iter()
        .map(|x| descend(&replay, x, config))
        .collect::<Result<_, _>>()?;
    // Lowest loss; ties go to the earlier start, so the choice does not depend on thread timing.
    let best_run = runs
        .iter()
        .min_by(|a, b| a.loss.total_cmp(&b.loss))
        .ok_or_else(|| FitError::Optimizer("no start was run".into()))?;
    let (best, iterations, converged) =
        (best_run.x.clone(), best_run.iterations, best_run.converged);
    let start_spread = spread(params, &runs, best_run.loss);
    let values_ns = to_values(params, &best);
    let fitted = replay.scenario(&values_ns)?;
    let (simulated_requests, _) = replay.simulate_requests(&fitted)?;
    let simulated = simulated_requests.metrics(None);
    let loss = replay.loss(&values_ns)?;
    let parameters = params
        .iter()
        .zip(&values_ns)
        .map(|(&(key, lo, hi), &value)| FittedParameter {
            key,
            value,
            bounds: (lo, hi),
            at_bound: on_bound(value, lo, hi),
        })
        .collect();
    Ok(FitResult {
        scenario: fitted,
        parameters,
        measured,
        simulated,
        loss,
        iterations,
        converged,
        start_spread,
        measured_requests: RequestLatencies::of_log(log),
        simulated_requests,
    })
}

/// How much more loss than the best a start may reach and still count as near it: 1e-3, about 1%
/// more root-mean-square error per figure over the nine figures.
pub const NEAR_BEST_LOSS: f64 = 1e-3;

/// A fitted parameter's spread over bootstrap replicas.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    /// Scenario key, as in [`FittedParameter::key`].
    pub key: &'static str,
    /// 5th percentile over the replicas, in the parameter's unit ([`parameter_unit`]).
    pub p5: f64,
    /// 95th percentile over the replicas, in the parameter's unit.
    pub p95: f64,
}

/// Bootstrap over requests: `replicas` times, draws the log's requests with replacement and
/// refits (one Nelder-Mead start, from `result`'s parameters) to the figures of the drawn
/// requests only. The replay keeps the whole log as its load: the arrivals are what the server
/// saw; only which requests' latencies count is resampled. Returns, per parameter, the 5th and
/// 95th percentiles of the refitted values. Deterministic for `config.seed`; `replicas = 0`
/// returns an empty list.
pub fn bootstrap(
    scenario: &Scenario,
    log: &MeasuredLog,
    result: &FitResult,
    config: &FitConfig,
    replicas: usize,
) -> Result<Vec<Interval>, FitError> {
    if replicas == 0 {
        return Ok(Vec::new());
    }
    let replay = Replay::new(scenario, log, config.seed)?;
    let rows = RequestLatencies::of_log(log);
    let params = replay.model.parameters();
    let x_best: Vec<f64> = result.parameters.iter().map(|p| p.value.ln()).collect();
    let fits: Vec<Vec<f64>> = (0..replicas)
        .into_par_iter()
        .map(|replica| {
            let mut rng = SimRng::seed_from_u64(splitmix64(config.seed ^ (replica as u64 + 1)));
            let n = log.len() as u32;
            let sample: Vec<u32> = (0..n).map(|_| rng.random_range(0..n)).collect();
            let mut replay = replay.clone();
            replay.measured = rows.metrics(Some(&sample));
            replay.sample = Some(sample);
            descend(&replay, x_best.clone(), config).map(|d| to_values(params, &d.x))
        })
        .collect::<Result<_, _>>()?;
    Ok(params
        .iter()
        .enumerate()
        .map(|(k, (key, _, _))| {
            let mut values: Vec<f64> = fits.iter().map(|v| v[k]).collect();
            values.sort_by(f64::total_cmp);
            Interval {
                key,
                p5: metrics::quantile_sorted(&values, 0.05),
                p95: metrics::quantile_sorted(&values, 0.95),
            }
        })
        .collect())
}

/// Offsets, in log space, of the starts of a multi-start fit from the log's initial guess:
/// the guess itself, then each parameter 4x up or down in a fixed pattern.
pub(crate) const START_OFFSETS: [[f64; 4]; 8] = {
    const U: f64 = std::f64::consts::LN_2 * 2.0;
    [
        [0.0, 0.0, 0.0, 0.0],
        [U, -U, U, -U],
        [-U, U, -U, U],
        [-U, -U, U, U],
        [U, U, -U, -U],
        [U, -U, -U, U],
        [-U, U, U, -U],
        [U, U, U, U],
    ]
};

/// One Nelder-Mead descent.
#[derive(Debug, Clone)]
pub(crate) struct Descent {
    pub(crate) x: Vec<f64>,
    pub(crate) loss: f64,
    pub(crate) iterations: u64,
    pub(crate) converged: bool,
}

/// Runs Nelder-Mead on `replay`'s cost from `x0` (log space).
pub(crate) fn descend<C>(replay: &C, x0: Vec<f64>, config: &FitConfig) -> Result<Descent, FitError>
where
    C: CostFunction<Param = Vec<f64>, Output = f64> + Clone,
{
    // The simplex: the start and one vertex a factor e^0.7 (about 2x) along each parameter.
    let mut simplex = vec![x0.clone()];
    for k in 0..x0.len() {
        let mut v = x0.clone();
        v[k] += 0.7;
        simplex.push(v);
    }
    // argmin's Nelder-Mead panics on a vertex whose first cost is an error (a candidate the
    // build refuses): they are costed here first, so that becomes the fit's error.
    for vertex in &simplex {
        replay
            .cost(vertex)
            .map_err(|e| FitError::Simulation(format!("at the fit's starting simplex: {e}")))?;
    }
    let solver = NelderMead::new(simplex)
        .with_sd_tolerance(config.loss_tolerance)
        .map_err(|e| FitError::Optimizer(e.to_string()))?;
    let res = Executor::new(replay.clone(), solver)
        .configure(|state| state.max_iters(config.max_iterations))
        .run()
        .map_err(|e| FitError::Optimizer(e.to_string()))?;
    let state = res.state();
    let x = state
        .get_best_param()
        .cloned()
        .ok_or_else(|| FitError::Optimizer("no parameter was evaluated".into()))?;
    Ok(Descent {
        loss: state.get_best_cost(),
        x,
        iterations: state.get_iter(),
        converged: matches!(
            state.get_termination_status(),
            TerminationStatus::Terminated(TerminationReason::SolverConverged)
        ),
    })
}

/// Per parameter, the ratio of the largest to the smallest value among the descents whose loss
/// is within [`NEAR_BEST_LOSS`] of the best (1 when only the best is): how well the log pins each
/// parameter.
fn spread(params: &[Parameter], runs: &[Descent], best_loss: f64) -> Vec<f64> {
    let near: Vec<Vec<f64>> = runs
        .iter()
        .filter(|r| r.loss <= best_loss + NEAR_BEST_LOSS)
        .map(|r| to_values(params, &r.x))
        .collect();
    (0..params.len())
        .map(|k| {
            let (lo, hi) = near.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
                (lo.min(v[k]), hi.max(v[k]))
            });
            hi / lo
        })
        .collect()
}

/// Whether `value` lies within 1% (of the span, in log space) of `lo` or `hi`.
fn on_bound(value: f64, lo: f64, hi: f64) -> bool {
    let span = hi.ln() - lo.ln();
    value.ln() - lo.ln() < 0.01 * span || hi.ln() - value.ln() < 0.01 * span
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cost that fails once its first parameter passes 1 (a candidate the build refuses).
    #[derive(Clone)]
    struct RefusesAboveOne;

    impl CostFunction for RefusesAboveOne {
        type Param = Vec<f64>;
        type Output = f64;

        fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
            if x[0] > 1.0 {
                return Err(FitError::Scenario(format!("refused at {}", x[0])).into());
            }
            Ok(x[0] * x[0])
        }
    }

    #[test]
    fn a_start_whose_simplex_the_cost_refuses_is_an_error_not_a_panic() {
        // The simplex's second vertex is the start plus 0.7: refused.
        let err = descend(&RefusesAboveOne, vec![0.5], &FitConfig::default()).unwrap_err();
        assert!(
            err.to_string().contains("starting simplex") && err.to_string().contains("refused"),
            "{err}"
        );
        let ok = descend(&RefusesAboveOne, vec![-0.5], &FitConfig::default()).expect("fits");
        assert!(ok.loss < 1e-3, "{}", ok.loss);
    }

    #[test]
    fn values_within_one_percent_of_a_bound_in_log_space_are_on_it() {
        // Bounds 1..1e4: the span is 4 decades, 1% of it 0.04 decade (a factor 1.096).
        assert!(on_bound(1.0, 1.0, 1e4));
        assert!(on_bound(1.09, 1.0, 1e4));
        assert!(!on_bound(1.2, 1.0, 1e4));
        assert!(on_bound(9200.0, 1.0, 1e4));
        assert!(!on_bound(100.0, 1.0, 1e4));
    }

    #[test]
    fn parameters_are_clamped_to_their_bounds() {
        const PARAMETERS: [Parameter; 4] = LINEAR;
        let ns = to_values(&PARAMETERS, &[0.0, 100.0, f64::NEG_INFINITY, 1.0]);
        assert!(
            (ns[0] - PARAMETERS[0].1).abs() < 1e-9,
            "below the lower bound: {}",
            ns[0]
        );
        assert!((ns[1] - PARAMETERS[1].2).abs() < 1e-6 * PARAMETERS[1].2);
        assert!((ns[2] - PARAMETERS[2].1).abs() < 1e-9);
        assert!((ns[3] - std::f64::consts::E).abs() < 1e-12);
    }
}
