//! A fit pooled over several measured runs: coefficients that describe the kernels are shared by
//! every run, overheads that describe a deployment (its host, model and parallelism) take one
//! value per deployment, and all are fitted together by minimising the summed loss of the runs
//! (each run's loss as in [`super::fit`]: squared log-ratios of its nine figures). A deployment
//! is one scenario: runs given the same scenario share their per-deployment values.
//!
//! Which keys are shared is the one table [`KEY_SCOPES`]:
//!
//! | key | scope | why |
//! |---|---|---|
//! | `step_time.compute_efficiency` | shared | a fraction of the GPU's datasheet peak: how well the GEMM kernels use it, similar across GPUs of a generation |
//! | `step_time.bandwidth_efficiency` | shared | a fraction of the datasheet bandwidth: how well the decode kernels stream memory |
//! | `batcher.step_overhead` | per deployment | the engine's CPU time per step: host CPU, model size, tensor parallelism |
//! | `step_time.per_prefill_token`, `per_decode_seq`, `per_kv_token` | per deployment | times of one GPU and model: nothing transfers to another |
//!
//! So a `linear` pool shares nothing between deployments and is refused unless every run is of
//! one deployment (the same scenario at different loads). An `operators` pool (each run's GPU
//! time composed from its card's measured operator table) fits only the step overhead, per
//! deployment: the kernels' times are each card's measurement, and what a run held out gets from
//! the others is the engine's overhead.
//!
//! [`leave_one_run_out`] checks what transfers: each run is predicted from a pooled fit of the
//! others, with the shared values of that fit and, for its per-deployment values, those its
//! deployment got in that fit when another run of it was there, else the geometric mean of the
//! other deployments' values (a value known without the run; the fit is in log space).

use std::collections::BTreeMap;

use super::{
    Descent, FitConfig, FitError, LatencyMetrics, METRIC_NAMES, MeasuredLog, Parameter, Replay,
    START_OFFSETS, StepModel, comparison_table, descend, on_bound, parameter_unit, to_values,
};
use argmin::core::CostFunction;
use capsim_sim::Scenario;
use rayon::prelude::*;

/// Whether a fitted key takes one value for every run or one per deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One value for all runs: a property of the kernels, which transfers between GPUs.
    Shared,
    /// One value per deployment (scenario): a property of one host, model and parallelism.
    PerDeployment,
}

/// The scope of every key a fit varies (the module docs say why each).
pub const KEY_SCOPES: [(&str, Scope); 6] = [
    ("batcher.step_overhead", Scope::PerDeployment),
    ("step_time.per_prefill_token", Scope::PerDeployment),
    ("step_time.per_decode_seq", Scope::PerDeployment),
    ("step_time.per_kv_token", Scope::PerDeployment),
    ("step_time.compute_efficiency", Scope::Shared),
    ("step_time.bandwidth_efficiency", Scope::Shared),
];

/// The scope of `key`; a key missing from [`KEY_SCOPES`] is per deployment, which shares
/// nothing (a unit test keeps every fitted key listed).
pub fn scope_of(key: &str) -> Scope {
    KEY_SCOPES
        .iter()
        .find(|(k, _)| *k == key)
        .map_or(Scope::PerDeployment, |&(_, s)| s)
}

/// One measured run of a pooled fit.
#[derive(Debug, Clone)]
pub struct PooledRun {
    /// How the report names the run (for example its log's folder).
    pub label: String,
    /// The deployment it ran on: runs with the same deployment share its per-deployment values.
    pub deployment: String,
    /// The scenario replaying it (engine limits and KV cache as the run had them).
    pub scenario: Scenario,
    /// Its measured requests.
    pub log: MeasuredLog,
}

/// One fitted value of a pooled fit.
#[derive(Debug, Clone, PartialEq)]
pub struct PooledParameter {
    /// Scenario key.
    pub key: &'static str,
    /// The deployment it belongs to; `None` for a shared key.
    pub deployment: Option<String>,
    /// Fitted value: nanoseconds for a time, a fraction for an efficiency.
    pub value: f64,
    /// Bounds of the search, in the value's unit.
    pub bounds: (f64, f64),
    /// Whether the value ended within 1% (in log space) of a bound.
    pub at_bound: bool,
}

/// One run's figures under a fit.
#[derive(Debug, Clone)]
pub struct RunFigures {
    /// The run's label.
    pub label: String,
    /// Its deployment.
    pub deployment: String,
    /// The log's figures.
    pub measured: LatencyMetrics,
    /// The figures of its scenario with the fitted (or predicted) values.
    pub simulated: LatencyMetrics,
    /// Requests the simulation did not complete.
    pub not_completed: usize,
}

/// What a pooled fit found.
#[derive(Debug, Clone)]
pub struct PooledFit {
    /// Shared values first, then each deployment's, in the order deployments first appear.
    pub parameters: Vec<PooledParameter>,
    /// Each run's nine figures, fitted against measured (class: replay).
    pub runs: Vec<RunFigures>,
    /// Each deployment and its scenario with the fitted values set (its first run's scenario).
    pub scenarios: Vec<(String, Scenario)>,
    /// Summed loss over the runs.
    pub loss: f64,
    /// Nelder-Mead iterations of the best start.
    pub iterations: u64,
    /// Whether the best start converged.
    pub converged: bool,
}

impl PooledFit {
    /// The value of `key` for `deployment` (its own, or the shared one).
    pub fn value(&self, key: &str, deployment: &str) -> Option<f64> {
        self.parameters
            .iter()
            .find(|p| p.key == key && p.deployment.as_deref().is_none_or(|d| d == deployment))
            .map(|p| p.value)
    }

    /// The parameters, then each run's nine figures fitted against measured.
    pub fn table(&self) -> String {
        let mut out = String::from("shared (one value for every run):\n");
        for p in self.parameters.iter().filter(|p| p.deployment.is_none()) {
            out.push_str(&parameter_line(p));
        }
        let mut current: Option<&str> = None;
        for p in self.parameters.iter().filter(|p| p.deployment.is_some()) {
            let d = p.deployment.as_deref().unwrap_or_default();
            if current != Some(d) {
                out.push_str(&format!("per deployment, {d}:\n"));
                current = Some(d);
            }
            out.push_str(&parameter_line(p));
        }
        for run in &self.runs {
            out.push_str(&format!(
                "run {} (class: replay, fitted with this run among the others):\n",
                run.label
            ));
            if run.not_completed > 0 {
                out.push_str(&format!(
                    "{} requests did not complete in the simulation\n",
                    run.not_completed
                ));
            }
            out.push_str(&comparison_table(&run.measured, &run.simulated));
        }
        out
    }
}

fn parameter_line(p: &PooledParameter) -> String {
    format!(
        "  {:<32} {:>14.4} {:<2}{}\n",
        p.key,
        p.value,
        parameter_unit(p.key),
        if p.at_bound {
            format!(
                "   AT A BOUND ({:e}..{:e}): the runs cannot place it",
                p.bounds.0, p.bounds.1
            )
        } else {
            String::new()
        }
    )
}

/// Where a held-out run's per-deployment values came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldOutSource {
    /// Another run of its deployment was in the fit: that deployment's fitted values.
    OwnDeployment,
    /// No other run of its deployment: the geometric mean of the other deployments' values.
    MeanOfOtherDeployments,
}

/// One run predicted from a fit of the others (class: prediction, calibrated on other runs).
#[derive(Debug, Clone)]
pub struct HeldOut {
    /// The run's figures, predicted against measured.
    pub figures: RunFigures,
    /// The values it was predicted with, in its step-time kind's key order.
    pub values: Vec<(&'static str, f64)>,
    /// Where its per-deployment values came from.
    pub source: HeldOutSource,
}

/// The figures of the leave-one-run-out table: means and medians (p90 is in the fitted table).
const HELD_OUT_FIGURES: [usize; 6] = [0, 1, 3, 4, 6, 7];

/// A plain-text leave-one-run-out table: per run the values it was predicted with, then TTFT,
/// TPOT and end-to-end mean and p50, measured, predicted and the relative error.
pub fn held_out_table(held: &[HeldOut]) -> String {
    let mut out =
        String::from("leave one run out (class: prediction, calibrated on the other runs):\n");
    for h in held {
        let source = match h.source {
            HeldOutSource::OwnDeployment => "its deployment's values from the other runs",
            HeldOutSource::MeanOfOtherDeployments => {
                "per-deployment values: geometric mean of the other deployments'"
            }
        };
        let values: Vec<String> = h
            .values
            .iter()
            .map(|(k, v)| format!("{k} = {v:.4}{}", parameter_unit(k)))
            .collect();
        out.push_str(&format!(
            "run {} ({source}): {}\n",
            h.figures.label,
            values.join(", ")
        ));
        if h.figures.not_completed > 0 {
            out.push_str(&format!(
                "{} requests did not complete in the simulation\n",
                h.figures.not_completed
            ));
        }
        out.push_str(&format!(
            "  {:<10} {:>14} {:>14} {:>8}\n",
            "metric", "measured_ms", "predicted_ms", "error"
        ));
        let (meas, pred) = (h.figures.measured.values(), h.figures.simulated.values());
        let err = h.figures.simulated.relative_errors(&h.figures.measured);
        for k in HELD_OUT_FIGURES {
            out.push_str(&format!(
                "  {:<10} {:>14.1} {:>14.1} {:>+7.1}%\n",
                METRIC_NAMES[k],
                meas[k],
                pred[k],
                err[k] * 100.0
            ));
        }
    }
    out.push_str(&format!(
        "worst leave-one-out error over TTFT, TPOT and E2E mean and p50: {:.1}%\n",
        held_out_worst_error(held) * 100.0
    ));
    out
}

/// The largest absolute relative error of the held-out runs' means and medians.
pub fn held_out_worst_error(held: &[HeldOut]) -> f64 {
    held.iter()
        .flat_map(|h| {
            let err = h.figures.simulated.relative_errors(&h.figures.measured);
            HELD_OUT_FIGURES.map(|k| err[k].abs())
        })
        .fold(0.0, f64::max)
}

/// Where each run's parameters sit in the pooled vector: shared keys first, then each
/// deployment's own.
#[derive(Debug, Clone)]
struct Layout {
    /// Each pooled entry's key and bounds.
    params: Vec<Parameter>,
    /// Each pooled entry's deployment (index into `deployments`); `None` when shared.
    owners: Vec<Option<usize>>,
    /// Per run, the pooled index of each key of its step-time kind, in the kind's order.
    runs: Vec<Vec<usize>>,
    /// Deployment names, in the order they first appear.
    deployments: Vec<String>,
}

impl Layout {
    fn new(model: StepModel, run_deployments: &[&str]) -> Layout {
        let kind = model.parameters();
        let mut deployments: Vec<String> = Vec::new();
        for d in run_deployments {
            if !deployments.iter().any(|x| x == d) {
                deployments.push((*d).to_string());
            }
        }
        let mut params = Vec::new();
        let mut owners = Vec::new();
        let mut index: BTreeMap<(usize, Option<usize>), usize> = BTreeMap::new();
        for (k, p) in kind.iter().enumerate() {
            if scope_of(p.0) == Scope::Shared {
                index.insert((k, None), params.len());
                params.push(*p);
                owners.push(None);
            }
        }
        for d in 0..deployments.len() {
            for (k, p) in kind.iter().enumerate() {
                if scope_of(p.0) == Scope::PerDeployment {
                    index.insert((k, Some(d)), params.len());
                    params.push(*p);
                    owners.push(Some(d));
                }
            }
        }
        let runs = run_deployments
            .iter()
            .map(|name| {
                let d = deployments.iter().position(|x| x == name);
                (0..kind.len())
                    .map(|k| {
                        let owner = (scope_of(kind[k].0) == Scope::PerDeployment).then_some(d);
                        index[&(k, owner.flatten())]
                    })
                    .collect()
            })
            .collect();
        Layout {
            params,
            owners,
            runs,
            deployments,
        }
    }
}

/// The runs' replays and how the pooled vector maps onto each.
#[derive(Clone)]
struct PooledReplay {
    replays: Vec<Replay>,
    layout: Layout,
}

impl PooledReplay {
    fn new(runs: &[PooledRun], seed: u64) -> Result<PooledReplay, FitError> {
        let first = runs
            .first()
            .ok_or_else(|| FitError::Scenario("a pooled fit needs at least one run".into()))?;
        let replays: Vec<Replay> = runs
            .iter()
            .map(|r| Replay::new(&r.scenario, &r.log, seed))
            .collect::<Result<_, _>>()?;
        let model = replays[0].model;
        if let Some((r, x)) = runs.iter().zip(&replays).find(|(_, x)| x.model != model) {
            return Err(FitError::Scenario(format!(
                "run {} has a {} step time and run {} a {}: a pooled fit shares the \
                 coefficients of one step-time model, so give every run's scenario the same \
                 [step_time] kind",
                r.label,
                x.model.name(),
                first.label,
                model.name()
            )));
        }
        let names: Vec<&str> = runs.iter().map(|r| r.deployment.as_str()).collect();
        let layout = Layout::new(model, &names);
        if model == StepModel::Linear && layout.deployments.len() > 1 {
            return Err(FitError::Scenario(format!(
                "the runs have a linear step time and {} deployments ({}): its coefficients are \
                 times of one GPU and model, so nothing is shared between deployments; pool runs \
                 of one deployment (one --scenario for every --log), or give the runs \
                 kind = \"operators\" step times (each GPU's measured operator table, the \
                 engine's overhead fitted) or kind = \"roofline\" ones (the efficiencies \
                 shared)",
                layout.deployments.len(),
                layout.deployments.join(", ")
            )));
        }
        Ok(PooledReplay { replays, layout })
    }

    /// Run `run`'s values, in its kind's key order, from the pooled `values`.
    fn run_values(&self, values: &[f64], run: usize) -> Vec<f64> {
        self.layout.runs[run].iter().map(|&i| values[i]).collect()
    }

    /// The summed loss of the runs, each simulated in parallel and summed in run order.
    fn loss(&self, values: &[f64]) -> Result<f64, FitError> {
        let losses: Vec<f64> = (0..self.replays.len())
            .into_par_iter()
            .map(|r| self.replays[r].loss(&self.run_values(values, r)))
            .collect::<Result<_, _>>()?;
        Ok(losses.iter().sum())
    }

    /// The starting point: each run's own start ([`Replay::initial`]); a shared key takes the first
    /// run's, a per-deployment key its deployment's first run's.
    fn initial(&self, runs: &[PooledRun]) -> Vec<f64> {
        let starts: Vec<Vec<f64>> = self
            .replays
            .iter()
            .zip(runs)
            .map(|(replay, run)| replay.initial(&run.log))
            .collect();
        (0..self.layout.params.len())
            .map(|i| {
                let (r, k) = self
                    .layout
                    .runs
                    .iter()
                    .enumerate()
                    .find_map(|(r, idx)| idx.iter().position(|&x| x == i).map(|k| (r, k)))
                    .unwrap_or((0, 0));
                starts[r][k]
            })
            .collect()
    }
}

impl CostFunction for PooledReplay {
    type Param = Vec<f64>;
    type Output = f64;

    fn cost(&self, x: &Vec<f64>) -> Result<f64, argmin::core::Error> {
        self.loss(&to_values(&self.layout.params, x))
            .map_err(argmin::core::Error::from)
    }
}

/// The starts of a multi-start fit of `dim` log-space parameters: [`START_OFFSETS`]' pattern,
/// repeated every four parameters.
fn start_offsets(dim: usize, starts: usize) -> Vec<Vec<f64>> {
    START_OFFSETS
        .iter()
        .take(starts.clamp(1, START_OFFSETS.len()))
        .map(|row| (0..dim).map(|j| row[j % row.len()]).collect())
        .collect()
}

/// Fits `runs` together (see the module docs): shared keys once, per-deployment keys once per
/// deployment, by Nelder-Mead from `config.starts` starts in parallel. Refuses runs of different
/// step-time kinds, and `linear` runs of more than one deployment.
pub fn fit_pooled(runs: &[PooledRun], config: &FitConfig) -> Result<PooledFit, FitError> {
    let pooled = PooledReplay::new(runs, config.seed)?;
    let params = &pooled.layout.params;
    let x0: Vec<f64> = pooled
        .initial(runs)
        .iter()
        .zip(params)
        .map(|(v, (_, lo, hi))| v.clamp(*lo, *hi).ln())
        .collect();
    let descents: Vec<Descent> = start_offsets(x0.len(), config.starts)
        .into_par_iter()
        .map(|offsets| {
            let x: Vec<f64> = x0.iter().zip(&offsets).map(|(x, o)| x + o).collect();
            descend(&pooled, x, config)
        })
        .collect::<Result<_, _>>()?;
    // Lowest loss; ties go to the earlier start, whatever the threads' timing.
    let best = descents
        .iter()
        .min_by(|a, b| a.loss.total_cmp(&b.loss))
        .ok_or_else(|| FitError::Optimizer("no start was run".into()))?;
    let values = to_values(params, &best.x);
    let parameters = params
        .iter()
        .zip(&pooled.layout.owners)
        .zip(&values)
        .map(|((&(key, lo, hi), owner), &value)| PooledParameter {
            key,
            deployment: owner.map(|d| pooled.layout.deployments[d].clone()),
            value,
            bounds: (lo, hi),
            at_bound: on_bound(value, lo, hi),
        })
        .collect();
    let figures = run_figures(&pooled, runs, &values)?;
    let scenarios = pooled
        .layout
        .deployments
        .iter()
        .map(|d| {
            let r = runs
                .iter()
                .position(|run| &run.deployment == d)
                .unwrap_or(0);
            let scenario = pooled.replays[r].scenario(&pooled.run_values(&values, r))?;
            Ok((d.clone(), scenario))
        })
        .collect::<Result<_, FitError>>()?;
    Ok(PooledFit {
        parameters,
        runs: figures,
        scenarios,
        loss: pooled.loss(&values)?,
        iterations: best.iterations,
        converged: best.converged,
    })
}

/// Each run's figures with the pooled `values`.
fn run_figures(
    pooled: &PooledReplay,
    runs: &[PooledRun],
    values: &[f64],
) -> Result<Vec<RunFigures>, FitError> {
    (0..runs.len())
        .into_par_iter()
        .map(|r| {
            let replay = &pooled.replays[r];
            let scenario = replay.scenario(&pooled.run_values(values, r))?;
            let (simulated, not_completed) = replay.simulate(&scenario)?;
            Ok(RunFigures {
                label: runs[r].label.clone(),
                deployment: runs[r].deployment.clone(),
                measured: replay.measured,
                simulated,
                not_completed,
            })
        })
        .collect()
}

/// Each run predicted from a pooled fit of the other runs (see the module docs for the values
/// it takes), the held-out fits run in parallel. Needs at least two runs.
pub fn leave_one_run_out(runs: &[PooledRun], config: &FitConfig) -> Result<Vec<HeldOut>, FitError> {
    if runs.len() < 2 {
        return Err(FitError::Scenario(format!(
            "leaving one run out needs at least two runs; {} given",
            runs.len()
        )));
    }
    // The whole pool's checks (kinds, deployments) hold for every subset of it.
    PooledReplay::new(runs, config.seed)?;
    (0..runs.len())
        .into_par_iter()
        .map(|i| {
            let others: Vec<PooledRun> = runs
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, r)| r.clone())
                .collect();
            let fit = fit_pooled(&others, config)?;
            predict_held_out(&runs[i], &fit, config.seed)
        })
        .collect()
}

/// `run` predicted with `fit`'s shared values and its deployment's values from `fit`, or the
/// geometric mean of `fit`'s deployments' values when its deployment was not in it.
fn predict_held_out(run: &PooledRun, fit: &PooledFit, seed: u64) -> Result<HeldOut, FitError> {
    let replay = Replay::new(&run.scenario, &run.log, seed)?;
    let own = fit
        .parameters
        .iter()
        .any(|p| p.deployment.as_deref() == Some(run.deployment.as_str()));
    let values: Vec<(&'static str, f64)> = replay
        .model
        .parameters()
        .iter()
        .map(|&(key, _, _)| {
            let value = if own || scope_of(key) == Scope::Shared {
                fit.value(key, &run.deployment)
            } else {
                geometric_mean(
                    fit.parameters
                        .iter()
                        .filter(|p| p.key == key)
                        .map(|p| p.value),
                )
            };
            value.map(|v| (key, v)).ok_or_else(|| {
                FitError::Scenario(format!("the fit of the other runs has no {key}"))
            })
        })
        .collect::<Result<_, _>>()?;
    let numbers: Vec<f64> = values.iter().map(|&(_, v)| v).collect();
    let (simulated, not_completed) = replay.simulate(&replay.scenario(&numbers)?)?;
    Ok(HeldOut {
        figures: RunFigures {
            label: run.label.clone(),
            deployment: run.deployment.clone(),
            measured: replay.measured,
            simulated,
            not_completed,
        },
        values,
        source: if own {
            HeldOutSource::OwnDeployment
        } else {
            HeldOutSource::MeanOfOtherDeployments
        },
    })
}

/// The geometric mean of positive `values`; `None` when there are none.
fn geometric_mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v.ln(), n + 1));
    (n > 0).then(|| (sum / n as f64).exp())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LINEAR, ROOFLINE};

    #[test]
    fn every_fitted_key_has_a_scope_and_only_efficiencies_are_shared() {
        for (key, _, _) in LINEAR.iter().chain(ROOFLINE.iter()) {
            let listed = KEY_SCOPES.iter().find(|(k, _)| k == key);
            assert!(
                listed.is_some(),
                "{key} is fitted but missing from KEY_SCOPES"
            );
            let expected = if key.ends_with("_efficiency") {
                Scope::Shared
            } else {
                Scope::PerDeployment
            };
            assert_eq!(scope_of(key), expected, "{key}");
        }
    }

    #[test]
    fn a_roofline_layout_shares_the_efficiencies_and_gives_each_deployment_its_overhead() {
        let layout = Layout::new(StepModel::Roofline, &["a", "b", "a"]);
        let keys: Vec<&str> = layout.params.iter().map(|p| p.0).collect();
        assert_eq!(
            keys,
            [
                "step_time.compute_efficiency",
                "step_time.bandwidth_efficiency",
                "batcher.step_overhead",
                "batcher.step_overhead"
            ]
        );
        assert_eq!(layout.owners, [None, None, Some(0), Some(1)]);
        // ROOFLINE's order is overhead, compute, bandwidth.
        assert_eq!(layout.runs, [vec![2, 0, 1], vec![3, 0, 1], vec![2, 0, 1]]);
    }

    #[test]
    fn start_offsets_repeat_the_pattern_every_four_parameters() {
        let starts = start_offsets(6, 3);
        assert_eq!(starts.len(), 3);
        for (s, row) in starts.iter().enumerate() {
            assert_eq!(row[4], START_OFFSETS[s][0]);
            assert_eq!(row[5], START_OFFSETS[s][1]);
        }
    }

    #[test]
    fn geometric_mean_of_a_value_and_four_times_it_is_twice_it() {
        let got = geometric_mean([1.0e6, 4.0e6].into_iter()).expect("two values");
        assert!((got - 2.0e6).abs() < 1e-3, "expected 2e6, got {got}");
        assert_eq!(geometric_mean(std::iter::empty()), None);
    }
}
