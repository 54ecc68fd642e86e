//! End-to-end tests of `capsim fit` pooled over several logs: the two real vLLM runs of
//! `../shared/ground-truth` (or `$CAPSIM_GROUND_TRUTH`) fitted together with roofline step
//! times, the efficiencies shared and each run's step overhead its own, and each run predicted
//! from a fit of the other alone (issue 32); and the refusals.

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

/// Issue 32's acceptance, as far as it is reached: both runs fitted together within 5% on every
/// figure (replay), and each shared run predicted from a pooled roofline fit of the other run
/// alone (the efficiencies from that run, the step overhead the other deployment's), TTFT, TPOT
/// and end-to-end mean and p50 within 100% only (prediction): the 10% of the issue is NOT
/// reached (docs/llm.md says what does not transfer). Fewer starts and iterations than the
/// command's defaults keep it under a minute on two cores.
#[test]
fn pooled_roofline_fits_both_runs_within_5_percent_but_predicts_each_from_the_other_only_within_100_percent()
 {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (ground_truth(RTX4090), ground_truth(RTXPRO6000));
    let fitted = dir.path().join("fitted");
    let report = dir.path().join("report");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b-roofline.toml",
        "--log",
        a.to_str().expect("utf-8"),
        "--scenario",
        "scenarios/vllm-rtxpro6000-qwen3-32b-roofline.toml",
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
    for name in [
        "vllm-rtx4090-llama-3.1-8b-roofline.toml",
        "vllm-rtxpro6000-qwen3-32b-roofline.toml",
    ] {
        let toml = std::fs::read_to_string(fitted.join(name))
            .unwrap_or_else(|e| panic!("{name} not written: {e}"));
        assert!(toml.contains("compute_efficiency"), "{name}:\n{toml}");
    }
    assert!(
        text.contains("shared (one value for every run)")
            && text.contains("class: prediction, calibrated on the other runs"),
        "{text}"
    );
    let fitted = fitted_errors(&text);
    assert_eq!(
        fitted.len(),
        18,
        "nine fitted figures of two runs expected:\n{text}"
    );
    for (metric, err) in fitted {
        assert!(
            err.abs() <= MAX_FITTED_ERROR,
            "fitted {metric}: error {:+.1}%, bound {:.0}%:\n{text}",
            err * 100.0,
            MAX_FITTED_ERROR * 100.0
        );
    }
    let rows = held_out_errors(&text);
    assert_eq!(rows.len(), 12, "six figures of two runs expected:\n{text}");
    for (run, metric, err) in rows {
        assert!(
            err.abs() <= MAX_HELD_OUT_ERROR,
            "{run} {metric}: predicted from the other run with error {:+.1}%, bound {:.0}%:\n{text}",
            err * 100.0,
            MAX_HELD_OUT_ERROR * 100.0
        );
    }
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
