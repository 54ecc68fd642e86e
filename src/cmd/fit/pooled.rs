//! `capsim fit --log A --log B ...`: several measured runs fitted together, the efficiencies
//! shared and the overheads per deployment (one scenario, one deployment), and each run
//! predicted from a fit of the others (`capsim_fit::pooled`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use capsim_fit::meta::read_run_meta;
use capsim_fit::pooled::{
    HeldOut, PooledFit, PooledRun, fit_pooled, held_out_table, leave_one_run_out,
};
use capsim_fit::untrusted;
use capsim_sim::Scenario;

use super::{FitArgs, read_measured_log};
use crate::cmd::{BadInput, create_out_dir};

/// Runs a pooled fit of `args.logs`, each with its scenario.
pub fn run(args: &FitArgs) -> Result<()> {
    let pairs = pair_runs(&args.scenarios, &args.logs)?;
    if args.predict {
        return Err(BadInput(
            "--predict compares one log with its scenario; with several --log, run it once per \
             log"
            .into(),
        )
        .into());
    }
    if args.bootstrap > 0 {
        return Err(BadInput(
            "--bootstrap resamples the requests of one log; with several --log, leave it out \
             (the leave-one-run-out table says how well the fit transfers)"
                .into(),
        )
        .into());
    }
    let mut text = String::new();
    let mut runs = Vec::new();
    for (scenario, log) in &pairs {
        let (run, notes) = read_run(args, scenario, log)?;
        text.push_str(&notes);
        runs.push(run);
    }
    let config = args.config();
    let fit = fit_pooled(&runs, &config).map_err(|e| BadInput(e.to_string()))?;
    let held = leave_one_run_out(&runs, &config).map_err(|e| BadInput(e.to_string()))?;
    text.push_str(&describe(&fit, &held, &runs));
    print!("{text}");
    for warning in warnings(&fit) {
        eprintln!("warning: {warning}");
    }
    write_outputs(args, &fit, &pairs, &text)
}

/// Each log with its scenario: `--scenario` once for all logs, or once per log in the same
/// order; any other count is refused.
fn pair_runs(scenarios: &[PathBuf], logs: &[PathBuf]) -> Result<Vec<(PathBuf, PathBuf)>> {
    let (s, l) = (scenarios.len(), logs.len());
    if l < 2 || (s != 1 && s != l) {
        return Err(BadInput(format!(
            "{l} --log and {s} --scenario: a pooled fit takes two or more --log, with one \
             --scenario for all of them (one deployment) or one --scenario per --log, in the \
             same order"
        ))
        .into());
    }
    Ok(logs
        .iter()
        .enumerate()
        .map(|(k, log)| (scenarios[if s == 1 { 0 } else { k }].clone(), log.clone()))
        .collect())
}

/// One run: its scenario with the engine limits of the `meta.json` beside its log, and the
/// log; and the lines saying what `meta.json` changed.
fn read_run(args: &FitArgs, scenario_path: &Path, log_path: &Path) -> Result<(PooledRun, String)> {
    let mut scenario = Scenario::from_path(scenario_path).map_err(|e| BadInput(e.to_string()))?;
    if scenario.pools().len() == 1 && scenario.pools()[0].service_spec.is_some() {
        return Err(BadInput(format!(
            "{}: a pooled fit fits continuous-batching step times; this scenario has a dynamic \
             batcher's [service], fitted from one log at a time",
            scenario_path.display()
        ))
        .into());
    }
    let log = read_measured_log(args, log_path)?;
    let mut notes = format!(
        "run {}: {} requests ({}), scenario {}\n",
        label(log_path),
        log.len(),
        log.format,
        scenario_path.display()
    );
    if let Some(excluded) = log.excluded_summary() {
        notes.push_str(&format!("  left out of the log: {excluded}\n"));
    }
    if let Some(meta) = read_run_meta(log_path).map_err(|e| BadInput(e.to_string()))? {
        for a in meta
            .apply(&mut scenario)
            .map_err(|e| BadInput(e.to_string()))?
        {
            notes.push_str(&format!(
                "  from {}: {} = {} (the scenario had {})\n",
                meta.path.display(),
                a.key,
                a.value,
                a.was.as_deref().unwrap_or("the default")
            ));
        }
    }
    let run = PooledRun {
        label: label(log_path),
        deployment: scenario_path.display().to_string(),
        scenario,
        log,
    };
    Ok((run, notes))
}

/// A run's name in the report: its log's folder and file (`vllm-rtx4090-llama-3.1-8b/requests.jsonl`).
fn label(log: &Path) -> String {
    let file = log.file_name().map(|f| f.to_string_lossy().into_owned());
    let folder = log
        .parent()
        .and_then(|p| p.file_name())
        .map(|f| f.to_string_lossy().into_owned());
    match (folder, file) {
        (Some(d), Some(f)) => format!("{d}/{f}"),
        _ => log.display().to_string(),
    }
}

fn describe(fit: &PooledFit, held: &[HeldOut], runs: &[PooledRun]) -> String {
    let deployments = fit.scenarios.len();
    let mut out = format!(
        "pooled fit: {} runs, {} deployment{}; {} iterations, summed loss {:.3e}, {}\n",
        runs.len(),
        deployments,
        if deployments == 1 { "" } else { "s" },
        fit.iterations,
        fit.loss,
        if fit.converged {
            "converged"
        } else {
            "NOT converged (ran out of iterations): do not trust the parameters"
        }
    );
    out.push_str(&fit.table());
    out.push_str(&held_out_table(held));
    out
}

/// What makes the pooled fit untrustworthy: no convergence, values on a bound.
fn warnings(fit: &PooledFit) -> Vec<String> {
    untrusted(
        "the pooled fit",
        "the runs",
        fit.converged,
        fit.iterations,
        fit.parameters.iter().filter(|p| p.at_bound).map(|p| {
            let deployment = p
                .deployment
                .as_ref()
                .map_or(String::new(), |d| format!(" ({d})"));
            let value = format!("{:.4}", p.value);
            (format!("{}{deployment}", p.key), value, p.key, p.bounds)
        }),
    )
}

/// Writes one fitted scenario per deployment into the `-o` folder and, with `--report DIR`,
/// the text into `DIR/fit.txt`.
fn write_outputs(
    args: &FitArgs,
    fit: &PooledFit,
    pairs: &[(PathBuf, PathBuf)],
    text: &str,
) -> Result<()> {
    let dir = args
        .output
        .as_ref()
        .ok_or_else(|| BadInput("-o DIR is required to write the fitted scenarios".into()))?;
    create_out_dir(dir, "-o")?;
    let logs: Vec<String> = pairs.iter().map(|(_, l)| l.display().to_string()).collect();
    let mut names: Vec<String> = Vec::new();
    for (deployment, scenario) in &fit.scenarios {
        let stem = Path::new(deployment)
            .file_stem()
            .map_or("scenario".into(), |s| s.to_string_lossy().into_owned());
        let name = if names.contains(&stem) {
            format!("{stem}-{}", names.len() + 1)
        } else {
            stem
        };
        names.push(name.clone());
        let path = dir.join(format!("{name}.toml"));
        let header = format!(
            "# Fitted by `capsim fit` pooled over {} (seed {}): the shared keys from all runs,\n\
             # the per-deployment keys of this deployment ({deployment}) from its own runs.\n",
            logs.join(", "),
            args.seed
        );
        let mut warnings_text = String::new();
        for warning in warnings(fit) {
            warnings_text.push_str(&format!("# WARNING: {warning}\n"));
        }
        let toml = capsim_sim::build::toml_for_folder(scenario, dir)?;
        std::fs::write(&path, header + &warnings_text + &toml)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(report) = &args.report {
        create_out_dir(report, "--report")?;
        let path = report.join("fit.txt");
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
