// Over 800 lines: reading the batches, the weighted fit and the fit by simulation share one batch table; 160 of them are tests.
//! Fits a dynamic batcher's affine service time to the execution times a log measured.
//!
//! capsim's own `requests.parquet` (from `simulate` or `replay --live`) says, per request, which
//! batch ran it (`batch_id`, `batch_size`) and when that batch ran (`exec_start_ns`,
//! `exec_end_ns`). Grouped into batches, these give one measured execution time per batch, and
//! the affine model `a + b*size + c*size*max_input_tokens` is a least-squares fit of them, each
//! coefficient held at or above 0. `c` is fitted only when the batches' longest inputs vary (else
//! it is 0 and `b` carries it); a log whose batches all have one size cannot tell `a` from `b`
//! and is refused. The ratios of each batch's measured time to the fitted one become the
//! scenario's `residuals`, so the simulation keeps the measured spread and tails.
//!
//! The fitted scenario then replays the log's arrivals, and the end-to-end and queue figures
//! (mean, p50, p90) are compared with the measured ones.
//!
//! ```no_run
//! use capsim_fit::FitConfig;
//! use capsim_fit::dynamic::{fit_dynamic, read_batch_log};
//! use capsim_sim::Scenario;
//!
//! let scenario = Scenario::from_path("scenario.toml".as_ref())?;
//! let log = read_batch_log("requests.parquet".as_ref())?;
//! let result = fit_dynamic(&scenario, &log, &FitConfig::default())?;
//! println!("a = {} ns", result.affine.a_ns);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::{Array, RecordBatch};
use capsim_sim::rng::{SimRng, splitmix64};
use capsim_sim::timing::{least_squares, non_negative_least_squares};
use capsim_sim::{Outcome, RunOptions, Scenario};
use capsim_trace::{Columns, Trace};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rand::{RngExt, SeedableRng};

use super::log::{LogError, MIN_REQUESTS, RequestColumns};
use super::metrics::{Figures, quantile_sorted};
use super::{Descent, FitConfig, FitError, Interval, NEAR_BEST_LOSS, START_OFFSETS, descend};
use rayon::prelude::*;

/// Fewest batches a fit of three coefficients needs.
pub const MIN_BATCHES: usize = 10;

/// Most residual ratios written into a fitted scenario; longer lists are cut to this many
/// evenly spaced quantiles.
pub const MAX_RESIDUALS: usize = 1000;

/// The columns a log needs for a fit from execution times.
const EXECUTION_COLUMNS: [&str; 4] = ["batch_id", "batch_size", "exec_start_ns", "exec_end_ns"];

/// The executed batches of a log, as columns: one entry per batch, in batch-id order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batches {
    /// Requests in the batch.
    pub size: Vec<u32>,
    /// Longest input of the batch, in tokens (inputs are padded to it).
    pub max_input_tokens: Vec<u32>,
    /// Measured execution time, `exec_end_ns - exec_start_ns`.
    pub exec_ns: Vec<u64>,
}

impl Batches {
    /// Batches held.
    pub fn len(&self) -> usize {
        self.size.len()
    }

    /// Whether no batch is held.
    pub fn is_empty(&self) -> bool {
        self.size.is_empty()
    }
}

/// A log of a dynamic-batching run: the requests (to replay and compare) and its batches (to
/// fit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchLog {
    /// Arrival of each request (first attempts only: `attempt` 1), from the first (0), in
    /// arrival order.
    pub arrival_ns: Vec<u64>,
    /// Input tokens of each request.
    pub input_tokens: Vec<u32>,
    /// Output tokens of each request.
    pub output_tokens: Vec<u32>,
    /// End-to-end latency of each completed request (`latency_ns`), in no particular order.
    pub e2e_ns: Vec<f64>,
    /// Queue wait (`exec_start_ns - queued_ns`) of each completed request that has both.
    pub queue_ns: Vec<f64>,
    /// The executed batches; empty when the log has no execution times.
    pub batches: Batches,
    /// Why the log has no batches (the execution columns missing or null), when it has none.
    pub missing_execution: Option<String>,
}

fn parquet_err(path: &Path, e: impl std::fmt::Display) -> LogError {
    LogError::Parquet {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Reads capsim's `requests.parquet`. A log without execution times (`replay --endpoint` writes
/// none) comes back with no batches and [`BatchLog::missing_execution`] saying what is missing.
pub fn read_batch_log(path: &Path) -> Result<BatchLog, LogError> {
    let file = std::fs::File::open(path).map_err(|source| LogError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let builder =
        ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| parquet_err(path, e))?;
    let missing: Vec<&str> = EXECUTION_COLUMNS
        .iter()
        .copied()
        .filter(|c| builder.schema().field_with_name(c).is_err())
        .collect();
    let reader = builder.build().map_err(|e| parquet_err(path, e))?;
    let mut acc = Accumulator::default();
    if !missing.is_empty() {
        acc.missing_execution = Some(format!("no column {}", missing.join(", ")));
    }
    let mut base_row = 0;
    for batch in reader {
        let batch = batch.map_err(|e| parquet_err(path, e))?;
        acc.add(path, &batch, base_row)?;
        base_row += batch.num_rows();
    }
    acc.finish(path)
}

/// One batch while its rows are read: (size, longest input, start, end).
type BatchRow = (u32, u32, u64, u64);

#[derive(Default)]
struct Accumulator {
    /// (arrival, input, output) of first attempts.
    requests: Vec<(i64, u32, u32)>,
    e2e_ns: Vec<f64>,
    queue_ns: Vec<f64>,
    batches: BTreeMap<u64, BatchRow>,
    missing_execution: Option<String>,
    /// Whether a completed request has a first-token time (a continuous-batching run).
    token_times: bool,
}

impl Accumulator {
    fn add(&mut self, path: &Path, batch: &RecordBatch, base_row: usize) -> Result<(), LogError> {
        let columns = RequestColumns { path, batch };
        let arrival = columns.i64("arrival_ns")?;
        let latency = columns.i64("latency_ns")?;
        // Execution columns: absent from a log of what a client saw.
        let queued = columns.opt_i64("queued_ns")?;
        let start = columns.opt_i64("exec_start_ns")?;
        let end = columns.opt_i64("exec_end_ns")?;
        let batch_id = columns.opt_i64("batch_id")?;
        let batch_size = columns.opt_u32("batch_size")?;
        let input = columns.u32("input_tokens")?;
        let output = columns.u32("output_tokens")?;
        let attempt = batch
            .column_by_name("attempt")
            .and_then(|c| c.as_primitive_opt::<UInt32Type>());
        let outcome = columns.string("outcome")?;
        let value = |a: &arrow_array::Int64Array, i: usize| (!a.is_null(i)).then(|| a.value(i));
        let opt = |a: Option<&arrow_array::Int64Array>, i: usize| a.and_then(|a| value(a, i));
        let first_token = columns.opt_i64("first_token_ns")?;
        for i in 0..batch.num_rows() {
            let row = base_row + i;
            let row_err = |message: String| LogError::Row {
                path: path.to_path_buf(),
                row,
                message,
            };
            let first_attempt = attempt.is_none_or(|a| a.is_null(i) || a.value(i) <= 1);
            if first_attempt {
                let a = value(arrival, i)
                    .filter(|&a| a >= 0)
                    .ok_or_else(|| row_err("`arrival_ns` is null or negative".into()))?;
                self.requests.push((a, input.value(i), output.value(i)));
            }
            if outcome.is_null(i) || outcome.value(i) != "completed" {
                continue;
            }
            self.e2e_ns.push(latency.value(i) as f64);
            self.token_times |= opt(first_token, i).is_some();
            if let (Some(q), Some(s)) = (opt(queued, i), opt(start, i))
                && s >= q
            {
                self.queue_ns.push((s - q) as f64);
            }
            let (Some(id), Some(s), Some(e), Some(sizes)) =
                (opt(batch_id, i), opt(start, i), opt(end, i), batch_size)
            else {
                continue;
            };
            if e < s || s < 0 {
                return Err(row_err(format!(
                    "exec_end_ns {e} is before exec_start_ns {s}"
                )));
            }
            let size = sizes.value(i);
            let entry = self
                .batches
                .entry(id as u64)
                .or_insert((size, 0, s as u64, e as u64));
            if entry.0 != size || entry.2 != s as u64 || entry.3 != e as u64 {
                return Err(row_err(format!(
                    "batch {id} has rows with different batch_size or execution times; each row \
                     of a batch must carry the batch's own"
                )));
            }
            entry.1 = entry.1.max(input.value(i));
        }
        Ok(())
    }

    fn finish(mut self, path: &Path) -> Result<BatchLog, LogError> {
        if self.e2e_ns.len() < MIN_REQUESTS {
            return Err(LogError::TooFewRequests {
                path: path.to_path_buf(),
                count: self.e2e_ns.len(),
            });
        }
        if self.batches.is_empty() && self.token_times {
            return Err(LogError::TokenLog {
                path: path.to_path_buf(),
            });
        }
        if self.batches.is_empty() && self.missing_execution.is_none() {
            self.missing_execution = Some(
                "batch_id, exec_start_ns and exec_end_ns are null on every completed request"
                    .into(),
            );
        }
        self.requests.sort_by_key(|r| r.0);
        let t0 = self.requests.first().map_or(0, |r| r.0);
        let mut batches = Batches::default();
        for (size, max_input, start, end) in self.batches.into_values() {
            batches.size.push(size);
            batches.max_input_tokens.push(max_input);
            batches.exec_ns.push(end - start);
        }
        Ok(BatchLog {
            arrival_ns: self.requests.iter().map(|r| (r.0 - t0) as u64).collect(),
            input_tokens: self.requests.iter().map(|r| r.1).collect(),
            output_tokens: self.requests.iter().map(|r| r.2).collect(),
            e2e_ns: self.e2e_ns,
            queue_ns: self.queue_ns,
            batches,
            missing_execution: self.missing_execution,
        })
    }
}

/// A fitted affine service time.
#[derive(Debug, Clone, PartialEq)]
pub struct AffineFit {
    /// Fixed time per batch, ns.
    pub a_ns: f64,
    /// Time per request of the batch, ns.
    pub b_ns: f64,
    /// Time per padded input token (size times the longest input), ns; 0 when not fitted.
    pub c_ns: f64,
    /// Whether `c` was fitted (the batches' longest inputs vary); when not, `b` carries it.
    pub c_fitted: bool,
    /// Per batch, measured over fitted execution time, in batch order.
    pub ratios: Vec<f64>,
}

impl AffineFit {
    /// The fitted mean execution time of a batch, ns.
    pub fn mean_ns(&self, size: u32, max_input_tokens: u32) -> f64 {
        let s = f64::from(size);
        self.a_ns + self.b_ns * s + self.c_ns * s * f64::from(max_input_tokens)
    }

    /// The ratios cut to at most [`MAX_RESIDUALS`] evenly spaced quantiles (all of them, sorted,
    /// when fewer), rounded to 4 decimals.
    pub fn residuals(&self) -> Vec<f64> {
        let mut sorted = self.ratios.clone();
        sorted.sort_by(f64::total_cmp);
        let picked: Vec<f64> = if sorted.len() <= MAX_RESIDUALS {
            sorted
        } else {
            (0..MAX_RESIDUALS)
                .map(|k| quantile_sorted(&sorted, (k as f64 + 0.5) / MAX_RESIDUALS as f64))
                .collect()
        };
        picked
            .iter()
            .map(|r| ((r * 1e4).round() / 1e4).max(1e-4))
            .collect()
    }
}

/// Least squares of each batch's execution time on `(1, size, size*max_input_tokens)`, every
/// coefficient held at or above 0 (the best of the non-negative fits over the subsets of the
/// coefficients). Refuses fewer than [`MIN_BATCHES`] batches and a log whose batches all have
/// one size.
pub fn fit_affine(batches: &Batches) -> Result<AffineFit, FitError> {
    if batches.len() < MIN_BATCHES {
        return Err(FitError::Batches(format!(
            "the log holds {} executed batches; an affine fit needs at least {MIN_BATCHES}",
            batches.len()
        )));
    }
    let first_size = batches.size[0];
    if batches.size.iter().all(|&s| s == first_size) {
        return Err(FitError::Batches(format!(
            "every one of the log's {} batches has size {first_size}, so the time per request \
             (b) cannot be told apart from the time per batch (a); fit a log with batches of several sizes (a higher \
             load, or a longer batcher.max_queue_delay)",
            batches.len()
        )));
    }
    let first_len = batches.max_input_tokens[0];
    let c_fitted = batches.max_input_tokens.iter().any(|&l| l != first_len);
    let rows: Vec<[f64; 3]> = (0..batches.len())
        .map(|k| {
            let s = f64::from(batches.size[k]);
            [1.0, s, s * f64::from(batches.max_input_tokens[k])]
        })
        .collect();
    let y: Vec<f64> = batches.exec_ns.iter().map(|&t| t as f64).collect();
    let columns = if c_fitted { 3 } else { 2 };
    let ones = vec![1.0; rows.len()];
    let all: Vec<usize> = (0..columns).collect();
    let coefficients = least_squares(&rows, &y, &ones, &all)
        .and_then(|_| non_negative_least_squares(&rows, &y, &ones, columns))
        .ok_or_else(|| {
            FitError::Batches(
                "the batches' sizes and input lengths do not pin down a, b and c (they move \
                 together); fit a log with more varied batches"
                    .into(),
            )
        })?;
    let mut fit = AffineFit {
        a_ns: coefficients[0],
        b_ns: coefficients[1],
        c_ns: coefficients[2],
        c_fitted,
        ratios: Vec::new(),
    };
    fit.ratios = (0..batches.len())
        .map(|k| {
            y[k] / fit
                .mean_ns(batches.size[k], batches.max_input_tokens[k])
                .max(1.0)
        })
        .collect();
    Ok(fit)
}

/// The scenario with its `[service]` replaced by `fit` (an `affine` table, with residuals when
/// `fit` has ratios). The scenario must have one pool with a dynamic batcher.
pub fn with_affine_service(scenario: &Scenario, fit: &AffineFit) -> Result<Scenario, FitError> {
    if scenario.pools().len() != 1 || scenario.pools()[0].service_spec.is_none() {
        return Err(FitError::Scenario(
            "a dynamic-batching fit needs one pool with a [service] (named pools are not fitted \
             yet)"
                .into(),
        ));
    }
    let mut fitted = scenario.clone();
    fitted
        .set("service", &service_toml(fit))
        .map_err(|e| FitError::Scenario(e.to_string()))?;
    Ok(fitted)
}

/// Keys of the fitted coefficients, in `a, b, c` order.
pub const AFFINE_KEYS: [&str; 3] = ["service.a", "service.b", "service.c"];

/// Bootstrap over batches: `replicas` times, draws the batches with replacement and refits.
/// Returns the 5th and 95th percentiles of `a`, `b` and `c` (ns); replicas whose draw cannot be
/// fitted (one size only) are skipped. Deterministic for `seed`; empty for `replicas = 0`.
pub fn bootstrap_affine(batches: &Batches, replicas: usize, seed: u64) -> Vec<Interval> {
    if replicas == 0 {
        return Vec::new();
    }
    let n = batches.len();
    let fits: Vec<[f64; 3]> = (0..replicas)
        .filter_map(|replica| {
            let mut rng = SimRng::seed_from_u64(splitmix64(seed ^ (replica as u64 + 1)));
            let mut drawn = Batches::default();
            for _ in 0..n {
                let k = rng.random_range(0..n);
                drawn.size.push(batches.size[k]);
                drawn.max_input_tokens.push(batches.max_input_tokens[k]);
                drawn.exec_ns.push(batches.exec_ns[k]);
            }
            fit_affine(&drawn).ok().map(|f| [f.a_ns, f.b_ns, f.c_ns])
        })
        .collect();
    if fits.is_empty() {
        return Vec::new();
    }
    AFFINE_KEYS
        .iter()
        .enumerate()
        .map(|(k, key)| {
            let mut v: Vec<f64> = fits.iter().map(|f| f[k]).collect();
            v.sort_by(f64::total_cmp);
            Interval {
                key,
                p5: quantile_sorted(&v, 0.05),
                p95: quantile_sorted(&v, 0.95),
            }
        })
        .collect()
}

/// End-to-end and queue figures of a run.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StageMetrics {
    /// End-to-end latency.
    pub e2e: Figures,
    /// Queue wait, from entering the instance queue to the batch's start.
    pub queue: Figures,
}

/// Names of the six figures, in [`StageMetrics::values`] order.
pub const STAGE_METRIC_NAMES: [&str; 6] = [
    "e2e.mean",
    "e2e.p50",
    "e2e.p90",
    "queue.mean",
    "queue.p50",
    "queue.p90",
];

impl StageMetrics {
    /// The six figures in milliseconds, in [`STAGE_METRIC_NAMES`] order.
    pub fn values(&self) -> [f64; 6] {
        let [a, b, c] = self.e2e.as_array();
        let [d, e, f] = self.queue.as_array();
        [a, b, c, d, e, f]
    }

    /// Relative error of each figure against `measured`.
    pub fn relative_errors(&self, measured: &StageMetrics) -> [f64; 6] {
        let (s, m) = (self.values(), measured.values());
        std::array::from_fn(|k| (s[k] - m[k]) / m[k])
    }
}

impl DynamicFitResult {
    /// A plain-text table: each figure the log has, measured, simulated and the relative error.
    pub fn table(&self) -> String {
        let (meas, sim) = (self.measured.values(), self.simulated.values());
        let err = self.simulated.relative_errors(&self.measured);
        let mut out = format!(
            "{:<10} {:>14} {:>14} {:>8}\n",
            "metric", "measured_ms", "simulated_ms", "error"
        );
        // A figure the log lacks (queue times of a client's log) is left out.
        for k in (0..STAGE_METRIC_NAMES.len()).filter(|&k| !meas[k].is_nan()) {
            out.push_str(&format!(
                "{:<10} {:>14.3} {:>14.3} {:>+7.1}%\n",
                STAGE_METRIC_NAMES[k],
                meas[k],
                sim[k],
                err[k] * 100.0
            ));
        }
        out
    }

    /// The fit's text: what was fitted and how, each coefficient (with its bootstrap 5%..95%
    /// interval over `replicas` when `intervals` has one, and its start spread when fitted by
    /// simulation), the residuals, and [`table`](Self::table). `log` names the log and `requests`
    /// counts its completed requests.
    pub fn describe(
        &self,
        intervals: &[Interval],
        replicas: usize,
        log: &Path,
        requests: usize,
    ) -> String {
        let mut out = self.headline(log, requests);
        out.push_str(&format!(
            "  {:<12} {:>14} {:>32}\n",
            "parameter",
            "value",
            if intervals.is_empty() {
                String::new()
            } else {
                format!("bootstrap 5%..95% ({replicas})")
            }
        ));
        let f = &self.affine;
        for (k, (key, value)) in AFFINE_KEYS.iter().zip([f.a_ns, f.b_ns, f.c_ns]).enumerate() {
            let interval = intervals
                .get(k)
                .map_or(String::new(), |i| format!("{:.1} .. {:.1} ns", i.p5, i.p95));
            let spread = self.by_simulation.as_ref().map_or(String::new(), |s| {
                format!("start spread {:.2}x", s.start_spread[k])
            });
            out.push_str(&format!(
                "  {key:<12} {value:>11.1} ns {interval:>32}{spread}\n"
            ));
        }
        if !f.c_fitted {
            out.push_str(
                "  service.c is not fitted: every batch's longest input has the same length, so b \
                 carries the per-token cost at that length\n",
            );
        }
        out.push_str(&residuals_line(f));
        out.push_str("the fitted scenario replaying the log's arrivals:\n");
        out.push_str(&self.table());
        out
    }

    /// The first line of [`describe`](Self::describe): the log, and how the coefficients were
    /// found.
    fn headline(&self, log: &Path, requests: usize) -> String {
        match &self.by_simulation {
            None => format!(
                "fit: {} batches ({} completed requests) of {}; affine service time by least squares\n",
                self.batches,
                requests,
                log.display()
            ),
            Some(sim) => format!(
                "fit: {} completed requests of {}; {}: affine service time by simulation from the \
                 end-to-end{} figures; {} iterations, loss {:.3e}, {}\n",
                requests,
                log.display(),
                sim.reason,
                if self.measured.queue.mean_ms.is_nan() {
                    ""
                } else {
                    " and queue"
                },
                sim.iterations,
                sim.loss,
                if sim.converged {
                    "converged"
                } else {
                    "NOT converged"
                }
            ),
        }
    }

    /// What makes a fit by simulation untrustworthy: no convergence, a coefficient the starts
    /// disagree on. Empty for a fit by least squares.
    pub fn warnings(&self) -> Vec<String> {
        let Some(sim) = &self.by_simulation else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if !sim.converged {
            out.push(format!(
                "the fit did not converge in {} iterations; raise --max-iterations",
                sim.iterations
            ));
        }
        for (key, spread) in AFFINE_KEYS.iter().zip(sim.start_spread) {
            if spread > 1.5 {
                out.push(format!(
                    "{key} differs {spread:.1}x between starts that match the log equally well: \
                     end-to-end latencies alone do not pin it down (a log with execution times does)"
                ));
            }
        }
        out
    }
}

/// The residuals' line of [`DynamicFitResult::describe`]: their p1, p50 and p99; empty without
/// ratios.
fn residuals_line(fit: &AffineFit) -> String {
    let mut ratios = fit.ratios.clone();
    ratios.sort_by(f64::total_cmp);
    if ratios.is_empty() {
        return String::new();
    }
    let q = |p: f64| ratios[((ratios.len() - 1) as f64 * p).round() as usize];
    format!(
        "  residuals (measured / fitted): p1 {:.3}, p50 {:.3}, p99 {:.3}; {} kept in the \
         fitted scenario\n",
        q(0.01),
        q(0.5),
        q(0.99),
        fit.residuals().len()
    )
}

/// The `[service]` table of a fitted affine model, as an inline TOML table: `a`, `b` and `c`
/// rounded to whole nanoseconds (the scenario's resolution) and the residuals, when there are
/// ratios.
fn service_toml(fit: &AffineFit) -> String {
    let residuals = if fit.ratios.is_empty() {
        String::new()
    } else {
        let r: Vec<String> = fit.residuals().iter().map(|r| format!("{r}")).collect();
        format!(", residuals = [{}]", r.join(", "))
    };
    format!(
        "{{ kind = \"affine\", a = \"{}ns\", b = \"{}ns\", c = \"{}ns\"{residuals} }}",
        fit.a_ns.round() as u64,
        fit.b_ns.round() as u64,
        fit.c_ns.round() as u64,
    )
}

/// How the coefficients were found when the log has no execution times.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulationFit {
    /// Why: the execution columns missing or null.
    pub reason: String,
    /// The final loss (sum of squared log-ratios of the figures matched).
    pub loss: f64,
    /// Nelder-Mead iterations of the best start.
    pub iterations: u64,
    /// Whether the best start converged.
    pub converged: bool,
    /// Per coefficient (`a`, `b`, `c`), max over min among the starts within
    /// [`super::NEAR_BEST_LOSS`] of the best: near 1 when the log pins it down, large when the
    /// end-to-end figures cannot tell it from the others.
    pub start_spread: [f64; 3],
}

/// What a dynamic-batching fit found.
#[derive(Debug, Clone)]
pub struct DynamicFitResult {
    /// The input scenario with `[service]` replaced by the fitted affine one.
    pub scenario: Scenario,
    /// The fitted coefficients and ratios (no ratios when fitted by simulation).
    pub affine: AffineFit,
    /// Batches fitted (0 when fitted by simulation).
    pub batches: usize,
    /// The log's figures.
    pub measured: StageMetrics,
    /// The figures of the fitted scenario replaying the log's arrivals.
    pub simulated: StageMetrics,
    /// Set when the log had no execution times and the coefficients were fitted by simulation.
    pub by_simulation: Option<SimulationFit>,
}

/// Fits `scenario`'s service time to `log` and replays the log's arrivals through the fitted
/// scenario (seed `config.seed`): by least squares of the batches' execution times when the log
/// has them ([`fit_affine`]), else by simulation from the end-to-end (and queue, when logged)
/// figures ([`SimulationFit`]). The scenario must have one pool with a dynamic batcher; its
/// `[service]` becomes the fitted `affine` one, everything else is kept.
pub fn fit_dynamic(
    scenario: &Scenario,
    log: &BatchLog,
    config: &FitConfig,
) -> Result<DynamicFitResult, FitError> {
    if scenario.pools().len() != 1 || scenario.pools()[0].service_spec.is_none() {
        return Err(FitError::Scenario(
            "a dynamic-batching fit needs one pool with a [service] (named pools are not fitted \
             yet)"
                .into(),
        ));
    }
    let measured = log.metrics();
    let (affine, by_simulation) = if log.batches.is_empty() {
        let (affine, sim) = fit_by_simulation(scenario, log, config)?;
        (affine, Some(sim))
    } else {
        (fit_affine(&log.batches)?, None)
    };
    let fitted = with_affine_service(scenario, &affine)?;
    let (simulated, _) = replay(&fitted, log, config.seed)?;
    Ok(DynamicFitResult {
        scenario: fitted,
        affine,
        batches: log.batches.len(),
        measured,
        simulated,
        by_simulation,
    })
}

impl BatchLog {
    /// The log's end-to-end and queue figures.
    pub fn metrics(&self) -> StageMetrics {
        StageMetrics {
            e2e: Figures::of_ns(&self.e2e_ns),
            queue: Figures::of_ns(&self.queue_ns),
        }
    }
}

/// The coefficients searched by simulation: key, lower and upper bound (ns).
const SEARCH: [(&str, f64, f64); 3] = [
    ("service.a", 1e3, 1e10),
    ("service.b", 1.0, 1e9),
    ("service.c", 1.0, 1e7),
];

/// The replay a fit by simulation varies.
#[derive(Clone)]
struct E2eReplay {
    base: Scenario,
    log: BatchLog,
    measured: StageMetrics,
    /// Whether `c` is searched (the inputs' lengths vary).
    fit_c: bool,
    seed: u64,
}

impl E2eReplay {
    /// The coefficients at log-space point `x`, clamped to [`SEARCH`]'s bounds.
    fn affine(&self, x: &[f64]) -> AffineFit {
        let v: Vec<f64> = x
            .iter()
            .zip(&SEARCH)
            .map(|(x, (_, lo, hi))| x.clamp(lo.ln(), hi.ln()).exp())
            .collect();
        AffineFit {
            a_ns: v[0],
            b_ns: v[1],
            c_ns: if self.fit_c { v[2] } else { 0.0 },
            c_fitted: self.fit_c,
            ratios: Vec::new(),
        }
    }

    fn loss(&self, x: &[f64]) -> Result<f64, FitError> {
        let mut s = self.base.clone();
        s.set("service", &service_toml(&self.affine(x)))
            .map_err(|e| FitError::Scenario(e.to_string()))?;
        let (sim, completed) = replay(&s, &self.log, self.seed)?;
        let (sim, meas) = (sim.values(), self.measured.values());
        // Queue figures count when the log has them (NaN otherwise, skipped).
        let loss: f64 = sim
            .iter()
            .zip(meas)
            .filter(|(_, m)| m.is_finite() && *m > 0.0)
            .map(|(s, m)| (s / m).ln().powi(2))
            .sum();
        // A candidate that completes fewer requests than the log did is wrong, not a good fit.
        let lost = self.log.e2e_ns.len().saturating_sub(completed) as f64;
        let loss = loss + lost / self.log.e2e_ns.len() as f64;
        Ok(if loss.is_finite() { loss } else { 1e12 })
    }
}

impl argmin::core::CostFunction for E2eReplay {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        self.loss(x).map_err(argmin::core::Error::from)
    }
}

/// Fits `a`, `b` and `c` (only `a` and `b` when every input has one length) by Nelder-Mead from
/// several starts, so that the log's arrivals replayed through the scenario match its
/// end-to-end (and queue) mean, p50 and p90.
fn fit_by_simulation(
    scenario: &Scenario,
    log: &BatchLog,
    config: &FitConfig,
) -> Result<(AffineFit, SimulationFit), FitError> {
    let fit_c = log.input_tokens.iter().any(|&l| l != log.input_tokens[0]);
    let replay = E2eReplay {
        base: scenario.clone(),
        log: log.clone(),
        measured: log.metrics(),
        fit_c,
        seed: config.seed,
    };
    // A start: a batch of one takes a third of the median end-to-end latency, split evenly
    // between a, b and c at the mean input length.
    let e2e_p50_ns = replay.measured.e2e.p50_ms * 1e6;
    let mean_len = log.input_tokens.iter().map(|&l| f64::from(l)).sum::<f64>()
        / log.input_tokens.len().max(1) as f64;
    let third = e2e_p50_ns / 9.0;
    let initial = [third, third, third / mean_len.max(1.0)];
    let dims = if fit_c { 3 } else { 2 };
    let x0: Vec<f64> = initial
        .iter()
        .zip(&SEARCH)
        .take(dims)
        .map(|(v, (_, lo, hi))| v.clamp(*lo, *hi).ln())
        .collect();
    let starts: Vec<Vec<f64>> = START_OFFSETS
        .iter()
        .take(config.starts.clamp(1, START_OFFSETS.len()))
        .map(|o| x0.iter().zip(o).map(|(x, o)| x + o).collect())
        .collect();
    let runs: Vec<Descent> = starts
        .into_par_iter()
        .map(|x| descend(&replay, x, config))
        .collect::<Result<_, _>>()?;
    let best = runs
        .iter()
        .min_by(|a, b| a.loss.total_cmp(&b.loss))
        .ok_or_else(|| FitError::Optimizer("no start was run".into()))?;
    let mut start_spread = [1.0; 3];
    let near: Vec<AffineFit> = runs
        .iter()
        .filter(|r| r.loss <= best.loss + NEAR_BEST_LOSS)
        .map(|r| replay.affine(&r.x))
        .collect();
    for (k, spread) in start_spread.iter_mut().enumerate().take(dims) {
        let values = near.iter().map(|f| [f.a_ns, f.b_ns, f.c_ns][k]);
        let (lo, hi) = values.fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        *spread = hi / lo;
    }
    Ok((
        replay.affine(&best.x),
        SimulationFit {
            reason: log.missing_execution.clone().unwrap_or_default(),
            loss: best.loss,
            iterations: best.iterations,
            converged: best.converged,
            start_spread,
        },
    ))
}

/// The figures of `scenario` replaying `log`'s arrivals and sizes, and how many requests
/// completed.
fn replay(
    scenario: &Scenario,
    log: &BatchLog,
    seed: u64,
) -> Result<(StageMetrics, usize), FitError> {
    let trace = Trace::from_columns(Columns {
        arrival_ns: log.arrival_ns.clone(),
        input_tokens: log.input_tokens.clone(),
        output_tokens: Some(log.output_tokens.clone()),
        ..Columns::default()
    })
    .map_err(|e| FitError::Simulation(e.to_string()))?;
    let options = RunOptions {
        seed,
        ..RunOptions::default()
    };
    // The fitted service or step time is affine, linear or a roofline: no profile is read.
    let built = capsim_sim::build::build(scenario, &mut capsim_sim::Profiles::default())
        .map_err(|e| FitError::Scenario(e.to_string()))?;
    let (_, records) = capsim_sim::simulate_with_requests(&built, &trace, &options)
        .map_err(|e| FitError::Simulation(e.to_string()))?;
    let none = capsim_sim::record::NONE;
    let mut e2e = Vec::new();
    let mut queue = Vec::new();
    for r in records.records() {
        if r.outcome != Outcome::Completed {
            continue;
        }
        e2e.push(r.latency_ns() as f64);
        if r.queued_ns != none && r.exec_start_ns != none {
            queue.push((r.exec_start_ns - r.queued_ns) as f64);
        }
    }
    let completed = e2e.len();
    Ok((
        StageMetrics {
            e2e: Figures::of_ns(&e2e),
            queue: Figures::of_ns(&queue),
        },
        completed,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batches(shapes: &[(u32, u32)], mut time: impl FnMut(u32, u32) -> f64) -> Batches {
        let mut b = Batches::default();
        for &(s, l) in shapes {
            b.size.push(s);
            b.max_input_tokens.push(l);
            b.exec_ns.push(time(s, l).round() as u64);
        }
        b
    }

    fn shapes() -> Vec<(u32, u32)> {
        (0..60).map(|k| (1 + k % 8, 16 + 37 * (k % 7))).collect()
    }

    #[test]
    fn exact_affine_times_give_back_their_coefficients() {
        let b = batches(&shapes(), |s, l| {
            2e6 + 5e5 * f64::from(s) + 1e3 * f64::from(s) * f64::from(l)
        });
        let fit = fit_affine(&b).unwrap();
        assert!(fit.c_fitted);
        for (name, got, want) in [
            ("a", fit.a_ns, 2e6),
            ("b", fit.b_ns, 5e5),
            ("c", fit.c_ns, 1e3),
        ] {
            assert!(
                (got / want - 1.0).abs() < 1e-6,
                "{name}: expected {want}, got {got}"
            );
        }
        assert!(fit.ratios.iter().all(|r| (r - 1.0).abs() < 1e-6));
    }

    #[test]
    fn a_negative_length_cost_is_held_at_zero() {
        // Time falls with length: unconstrained least squares would give c < 0.
        let b = batches(&shapes(), |s, l| {
            3e6 + 4e5 * f64::from(s) - 50.0 * f64::from(s) * f64::from(l)
        });
        let fit = fit_affine(&b).unwrap();
        assert_eq!(fit.c_ns, 0.0);
        assert!(fit.a_ns >= 0.0 && fit.b_ns >= 0.0, "{fit:?}");
    }

    #[test]
    fn one_batch_size_is_refused_naming_a_and_b() {
        let shapes: Vec<(u32, u32)> = (0..30).map(|k| (4, 16 + k)).collect();
        let err = fit_affine(&batches(&shapes, |_, _| 1e6))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("size 4") && err.contains("cannot be told apart"),
            "{err}"
        );
    }

    #[test]
    fn one_input_length_leaves_c_at_zero_and_b_carries_it() {
        let shapes: Vec<(u32, u32)> = (0..30).map(|k| (1 + k % 5, 64)).collect();
        let fit = fit_affine(&batches(&shapes, |s, l| {
            1e6 + 1e5 * f64::from(s) + 10.0 * f64::from(s * l)
        }))
        .unwrap();
        assert!(!fit.c_fitted);
        assert_eq!(fit.c_ns, 0.0);
        assert!((fit.b_ns - (1e5 + 640.0)).abs() < 1e-3, "b = {}", fit.b_ns);
    }

    #[test]
    fn residuals_are_cut_to_evenly_spaced_quantiles() {
        let fit = AffineFit {
            a_ns: 1.0,
            b_ns: 0.0,
            c_ns: 0.0,
            c_fitted: false,
            ratios: (0..5000).rev().map(|k| 0.5 + k as f64 / 5000.0).collect(),
        };
        let r = fit.residuals();
        assert_eq!(r.len(), MAX_RESIDUALS);
        assert!(r.windows(2).all(|w| w[0] <= w[1]), "sorted");
        // Quantiles 0.05% and 99.95% of 0.5, 0.5002, ..., 1.4998.
        assert_eq!(r[0], 0.5005);
        assert_eq!(r[MAX_RESIDUALS - 1], 1.4993);
    }

    #[test]
    fn the_bootstrap_brackets_noisy_coefficients() {
        let mut rng = SimRng::seed_from_u64(7);
        let b = batches(&shapes(), |s, l| {
            let noise: f64 = rng.random_range(0.9..1.1);
            (2e6 + 5e5 * f64::from(s) + 1e3 * f64::from(s) * f64::from(l)) * noise
        });
        let intervals = bootstrap_affine(&b, 200, 1);
        assert_eq!(intervals.len(), 3);
        let a = &intervals[0];
        assert!(a.p5 < a.p95, "{a:?}");
        assert!(a.p5 < 2.5e6 && a.p95 > 1.5e6, "a's interval {a:?}");
    }
    /// A log of `KNOWN` serving 2000 requests at about 400 per second, inputs of 16 to 511
    /// tokens, with no execution times: what a client of the server sees.
    fn client_log() -> BatchLog {
        let scenario = Scenario::from_toml_str(KNOWN).unwrap();
        let mut rng = SimRng::seed_from_u64(3);
        let mut t = 0u64;
        let mut arrival_ns = Vec::new();
        let mut input_tokens = Vec::new();
        for _ in 0..2000 {
            t += rng.random_range(0..5_000_000u64);
            arrival_ns.push(t);
            input_tokens.push(rng.random_range(16..512u32));
        }
        let mut log = BatchLog {
            arrival_ns,
            output_tokens: vec![1; input_tokens.len()],
            input_tokens,
            ..BatchLog::default()
        };
        let trace = Trace::from_columns(Columns {
            arrival_ns: log.arrival_ns.clone(),
            input_tokens: log.input_tokens.clone(),
            output_tokens: Some(log.output_tokens.clone()),
            ..Columns::default()
        })
        .unwrap();
        let built =
            capsim_sim::build::build(&scenario, &mut capsim_sim::Profiles::default()).unwrap();
        let (_, records) =
            capsim_sim::simulate_with_requests(&built, &trace, &RunOptions::default()).unwrap();
        log.e2e_ns = records
            .records()
            .iter()
            .map(|r| r.latency_ns() as f64)
            .collect();
        log.missing_execution = Some("no column exec_start_ns".into());
        log
    }

    const KNOWN: &str = "instances = 1\n[batcher]\nmax_batch_size = 16\nmax_queue_delay = \"2ms\"\n\
                         [service]\nkind = \"affine\"\na = \"2ms\"\nb = \"0.5ms\"\nc = \"1us\"\n";

    #[test]
    fn without_execution_times_the_fit_by_simulation_matches_the_end_to_end_figures_loosely_pinned()
    {
        let log = client_log();
        let scenario = Scenario::from_toml_str(KNOWN).unwrap();
        let result = fit_dynamic(&scenario, &log, &FitConfig::default()).unwrap();
        let sim = result.by_simulation.as_ref().expect("fitted by simulation");
        let errors = result.simulated.relative_errors(&result.measured);
        for (name, e) in STAGE_METRIC_NAMES.iter().zip(errors).take(3) {
            assert!(e.abs() < 0.02, "{name}: {:.2}% off", e * 100.0);
        }
        // Three figures of one latency do not pin three coefficients: starts that match equally
        // well disagree, and the spread says so.
        assert!(
            sim.start_spread.iter().any(|&s| s > 1.5),
            "spread {:?}",
            sim.start_spread
        );
    }
}
