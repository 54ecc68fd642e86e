//! End-to-end tests of `capsim fit` pooled over several logs: the two real vLLM runs of
//! `../shared/ground-truth` (or `$CAPSIM_GROUND_TRUTH`) fitted together, with measured operator
//! times (each run's step overhead its own) and with roofline step times (the efficiencies
//! shared), and each run predicted from a fit of the other alone (issue 32); and the refusals.

mod common;

use common::{assert_user_error, capsim, ground_truth, text};

const RTX4090: &str = "vllm-rtx4090-llama-3.1-8b";
const RTXPRO6000: &str = "vllm-rtxpro6000-qwen3-32b";

/// The (run, metric, relative error) rows of the report's leave-one-run-out table.
fn held_out_errors(report: &str) -> Vec<(String, String, f64)> {
    let table = report
        .split("leave one run out")
        .nth(1)
        .unwrap_or_else(|| panic!("no leave-one-run-out table:\n{report}"));
    let mut run = String::new();
    let mut rows = Vec::new();
    for line in table.lines() {
        if let Some(rest) = line.strip_prefix("run ") {
            run = rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
        } else if line.starts_with("  ") && line.ends_with('%') {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let pct: f64 = cols[3].trim_end_matches('%').parse().expect("a percentage");
            rows.push((run.clone(), cols[0].to_string(), pct / 100.0));
        }
    }
    rows
}

/// Fits the two shared runs together with `scenarios/<run>-<kind>.toml` (fewer starts and
/// iterations than the command's defaults, to keep it under a minute on two cores), checks that
/// each fitted scenario holds `fitted_key`, and returns the report.
fn pooled_fit_of_both_runs(kind: &str, fitted_key: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (ground_truth(RTX4090), ground_truth(RTXPRO6000));
    let fitted = dir.path().join("fitted");
    let report = dir.path().join("report");
    let scenario = |run: &str| format!("scenarios/{run}-{kind}.toml");
    let out = capsim(&[
        "fit",
        "--scenario",
        &scenario(RTX4090),
        "--log",
        a.to_str().expect("utf-8"),
        "--scenario",
        &scenario(RTXPRO6000),
        "--log",
        b.to_str().expect("utf-8"),
        "-o",
        fitted.to_str().expect("utf-8"),
        "--report",
        report.to_str().expect("utf-8"),
        "--starts",
        "2",
        "--max-iterations",
        "150",
    ]);
    assert!(out.status.success(), "pooled fit failed: {}", text(&out));
    let text = std::fs::read_to_string(report.join("fit.txt")).expect("fit.txt written");
    for run in [RTX4090, RTXPRO6000] {
        let name = format!("{run}-{kind}.toml");
        let toml = std::fs::read_to_string(fitted.join(&name))
            .unwrap_or_else(|e| panic!("{name} not written: {e}"));
        assert!(
            toml.contains(fitted_key) && toml.contains(&format!("kind = \"{kind}\"")),
            "{name}:\n{toml}"
        );
        // Written elsewhere, the scenario still finds its operator table or all-reduce file.
        let sim = capsim(&[
            "simulate",
            "--scenario",
            fitted.join(&name).to_str().expect("utf-8"),
            "traces/azure-conv.parquet",
            "--limit",
            "20",
            "-o",
            dir.path()
                .join(format!("sim-{name}"))
                .to_str()
                .expect("utf-8"),
        ]);
        assert!(
            sim.status.success(),
            "{name} does not simulate: {}",
            common::text(&sim)
        );
    }
    assert!(
        text.contains("shared (one value for every run)")
            && text.contains("class: prediction, calibrated on the other runs"),
        "{text}"
    );
    text
}

/// Every fitted (replay) figure within `fitted_bound`, every leave-one-run-out (prediction)
/// figure within `held_out_bound`.
fn assert_errors_within(text: &str, fitted_bound: f64, held_out_bound: f64) {
    let fitted = fitted_errors(text);
    assert_eq!(
        fitted.len(),
        18,
        "nine fitted figures of two runs expected:\n{text}"
    );
    for (metric, err) in fitted {
        assert!(
            err.abs() <= fitted_bound,
            "fitted {metric}: error {:+.1}%, bound {:.0}%:\n{text}",
            err * 100.0,
            fitted_bound * 100.0
        );
    }
    let rows = held_out_errors(text);
    assert_eq!(rows.len(), 12, "six figures of two runs expected:\n{text}");
    for (run, metric, err) in rows {
        assert!(
            err.abs() <= held_out_bound,
            "{run} {metric}: predicted from the other run with error {:+.1}%, bound {:.0}%:\n{text}",
            err * 100.0,
            held_out_bound * 100.0
        );
    }
}

/// Issue 32's acceptance with measured operator times (`kind = "operators"`: each run's GPU
/// time composed from the operator table LLMServingSim's profiler measured on its card and
/// model, micro-benchmarks separate from the runs): both runs fitted together within 5% on
/// every figure (replay), and each run predicted from a fit of the other alone (its step
/// overhead the other deployment's) with TTFT, TPOT and end-to-end mean and p50 within 10%
/// (prediction, calibrated on the other run and the card's operator table).
#[test]
fn pooled_operators_fit_predicts_each_run_from_the_other_within_10_percent() {
    let text = pooled_fit_of_both_runs("operators", "step_overhead");
    assert_errors_within(&text, MAX_FITTED_ERROR, 0.10);
}

/// The same with roofline step times (datasheet peaks and shared efficiencies): fitted
/// together within 5% (replay), but each run predicted from the other only within 100%
/// (prediction): the roofline's datasheet path does not reach the 10% (docs/llm.md
/// says what does not transfer).
#[test]
fn pooled_roofline_fits_both_runs_within_5_percent_but_predicts_each_from_the_other_only_within_100_percent()
 {
    let text = pooled_fit_of_both_runs("roofline", "compute_efficiency");
    assert_errors_within(&text, MAX_FITTED_ERROR, MAX_HELD_OUT_ERROR);
}

/// The bound the leave-one-run-out figures reach (worst 88.8%, the 4090 run's E2E p50; see
/// docs/llm.md, "Fits pooled over runs"): far from the 10%.
const MAX_HELD_OUT_ERROR: f64 = 1.0;

/// The bound on every fitted (replay) figure of the pooled fit.
const MAX_FITTED_ERROR: f64 = 0.05;

/// The (metric, relative error) rows of the fitted tables, before the leave-one-run-out table.
fn fitted_errors(report: &str) -> Vec<(String, f64)> {
    let fitted = report.split("leave one run out").next().unwrap_or_default();
    fitted
        .lines()
        .filter(|l| l.ends_with('%') && !l.starts_with(' '))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let pct: f64 = cols[3].trim_end_matches('%').parse().expect("a percentage");
            (cols[0].to_string(), pct / 100.0)
        })
        .collect()
}

#[test]
fn a_scenario_count_matching_neither_one_nor_each_log_is_refused() {
    let (a, b) = (ground_truth(RTX4090), ground_truth(RTXPRO6000));
    let (a, b) = (a.to_str().expect("utf-8"), b.to_str().expect("utf-8"));
    let s = "scenarios/vllm-rtx4090-llama-3.1-8b-roofline.toml";
    let out = capsim(&[
        "fit",
        "--scenario",
        s,
        "--scenario",
        s,
        "--scenario",
        s,
        "--log",
        a,
        "--log",
        b,
        "-o",
        "unused",
    ]);
    assert_user_error(
        &out,
        &["2 --log and 3 --scenario", "one --scenario per --log"],
    );
    let out = capsim(&[
        "fit",
        "--scenario",
        s,
        "--scenario",
        s,
        "--log",
        a,
        "-o",
        "unused",
    ]);
    assert_user_error(&out, &["1 --log and 2 --scenario"]);
}

#[test]
fn a_linear_pool_of_two_deployments_and_a_pool_of_two_kinds_are_refused() {
    let (a, b) = (ground_truth(RTX4090), ground_truth(RTXPRO6000));
    let (a, b) = (a.to_str().expect("utf-8"), b.to_str().expect("utf-8"));
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        a,
        "--scenario",
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        "--log",
        b,
        "-o",
        "unused",
    ]);
    assert_user_error(
        &out,
        &["linear step time and 2 deployments", "nothing is shared"],
    );
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b-roofline.toml",
        "--log",
        a,
        "--scenario",
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        "--log",
        b,
        "-o",
        "unused",
    ]);
    assert_user_error(&out, &["same [step_time] kind"]);
}
