//! End-to-end tests of `capsim fit`: the two real vLLM runs of `../shared/ground-truth` (or
//! `$CAPSIM_GROUND_TRUTH`) fitted within 5% on TTFT, TPOT and end-to-end mean, p50 and p90 (the
//! acceptance of issue 16); a fit of capsim's own requests.parquet; and the bad-input cases.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_user_error, capsim, text};
use serde_json::Value;

/// The acceptance bound on every figure's relative error.
const MAX_RELATIVE_ERROR: f64 = 0.05;

fn ground_truth(run: &str) -> PathBuf {
    let root = std::env::var("CAPSIM_GROUND_TRUTH")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/ground-truth").into());
    let log = Path::new(&root).join(run).join("requests.jsonl");
    assert!(
        log.is_file(),
        "{} missing; set CAPSIM_GROUND_TRUTH",
        log.display()
    );
    log
}

/// Runs `capsim fit` and returns the fit.txt it wrote, after checking the fitted scenario exists
/// and names the fitted keys.
fn fit(scenario: &str, log: &Path, dir: &Path) -> String {
    fit_with(scenario, log, dir, &[])
}

/// [`fit`] with `extra` flags.
fn fit_with(scenario: &str, log: &Path, dir: &Path, extra: &[&str]) -> String {
    let fitted = dir.join("fitted.toml");
    let report = dir.join("report");
    let mut args = vec![
        "fit",
        "--scenario",
        scenario,
        "--log",
        log.to_str().expect("utf-8"),
        "-o",
        fitted.to_str().expect("utf-8"),
        "--report",
        report.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let out = capsim(&args);
    assert!(out.status.success(), "capsim fit failed: {}", text(&out));
    let toml = std::fs::read_to_string(&fitted).expect("fitted scenario written");
    let keys: &[&str] = if scenario.contains("roofline") {
        &[
            "step_overhead",
            "compute_efficiency",
            "bandwidth_efficiency",
        ]
    } else {
        &[
            "step_overhead",
            "per_prefill_token",
            "per_decode_seq",
            "per_kv_token",
        ]
    };
    for key in keys {
        assert!(toml.contains(key), "fitted scenario lacks {key}:\n{toml}");
    }
    for png in ["ttft_cdf.png", "tpot_cdf.png", "e2e_cdf.png"] {
        let bytes = std::fs::read(report.join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
    std::fs::read_to_string(report.join("fit.txt")).expect("fit.txt written")
}

/// The (metric, relative error) rows of a fit's table.
fn errors(report: &str) -> Vec<(String, f64)> {
    report
        .lines()
        .filter(|l| l.ends_with('%') && !l.starts_with("fit:"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let pct: f64 = cols[3].trim_end_matches('%').parse().expect("a percentage");
            (cols[0].to_string(), pct / 100.0)
        })
        .collect()
}

fn assert_within_bound(report: &str) {
    assert!(
        report.contains("converged") && !report.contains("NOT converged"),
        "{report}"
    );
    assert!(!report.contains("AT A BOUND"), "{report}");
    let rows = errors(report);
    assert_eq!(rows.len(), 9, "nine figures expected:\n{report}");
    for (metric, err) in rows {
        assert!(
            err.abs() <= MAX_RELATIVE_ERROR,
            "{metric}: error {:+.1}% exceeds {:.0}%:\n{report}",
            err * 100.0,
            MAX_RELATIVE_ERROR * 100.0
        );
    }
}

#[test]
fn rtx4090_llama_8b_run_fits_within_5_percent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let report = fit("scenarios/vllm-rtx4090-llama-3.1-8b.toml", &log, dir.path());
    assert_within_bound(&report);
}

#[test]
fn rtxpro6000_qwen_32b_run_fits_within_5_percent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtxpro6000-qwen3-32b");
    let report = fit("scenarios/vllm-rtxpro6000-qwen3-32b.toml", &log, dir.path());
    assert_within_bound(&report);
}

#[test]
fn rtx4090_roofline_fits_its_efficiencies_within_5_percent_and_names_the_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let scenario = "scenarios/vllm-rtx4090-llama-3.1-8b-roofline.toml";
    let report = fit(scenario, &log, dir.path());
    let fitted = std::fs::read_to_string(dir.path().join("fitted.toml")).expect("fitted");
    assert!(
        fitted.contains("compute_efficiency") && fitted.contains("llama-3.1-8b"),
        "the roofline's model and efficiencies are kept:\n{fitted}"
    );
    // The one figure this run does not allow: decodes as fast as the datasheet's bandwidth.
    assert!(
        report.contains("step_time.bandwidth_efficiency") && report.contains("AT A BOUND"),
        "{report}"
    );
    let rows = errors(&report);
    assert_eq!(rows.len(), 9, "{report}");
    for (metric, err) in rows {
        assert!(
            err.abs() <= MAX_RELATIVE_ERROR,
            "{metric}: {err:+.3}:\n{report}"
        );
    }
}

#[test]
fn a_mapped_log_reads_the_same_timestamps_as_the_vllm_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let map = "arrival=queued_ts:s,first_token=first_token_ts:s,last_token=last_token_ts:s,\
               input_tokens=input_toks,output_tokens=output_toks";
    let report = fit_with(
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        &log,
        dir.path(),
        &["--map", map],
    );
    assert_within_bound(&report);
    // The measured column must be the vLLM reader's (summary.txt's) figures.
    assert!(
        report.contains("65456.6") && report.contains("83413.3"),
        "measured TTFT mean and e2e p50 of the run:\n{report}"
    );
}

#[test]
fn capsims_own_requests_parquet_fits_back_within_5_percent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = dir.path().join("sim");
    let log = ground_truth("vllm-rtxpro6000-qwen3-32b");
    let out = capsim(&[
        "simulate",
        "--scenario",
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        "--map",
        "arrival=arrival_time:s,input_tokens=input_toks,output_tokens=output_toks",
        log.to_str().expect("utf-8"),
        "-o",
        sim.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "simulate failed: {}", text(&out));
    let report = fit(
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        &sim.join("requests.parquet"),
        dir.path(),
    );
    assert_within_bound(&report);
}

#[test]
fn a_scenario_without_continuous_batching_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/bert-dynamic-batching.toml",
        "--log",
        log.to_str().unwrap(),
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["batcher.kind = \"continuous\""]);
}

#[test]
fn a_log_without_timestamps_is_refused_naming_the_file_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        "traces/demo.parquet",
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["traces/demo.parquet", "no column"]);
    let jsonl = dir.path().join("sizes.jsonl");
    std::fs::write(
        &jsonl,
        "{\"input_toks\": 10, \"output_toks\": 5, \"arrival_time\": 1.0}\n",
    )
    .unwrap();
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        jsonl.to_str().unwrap(),
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["sizes.jsonl: row 1", "queued_ts"]);
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        jsonl.to_str().unwrap(),
        "--map",
        "arrival=arrival_time:s,ttft=ttft:s,input_tokens=input_toks,output_tokens=output_toks",
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["--map", "one pair"]);
}

#[test]
fn a_fit_that_runs_out_of_iterations_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fitted = dir.path().join("f.toml");
    let log = ground_truth("vllm-rtxpro6000-qwen3-32b");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        "--log",
        log.to_str().unwrap(),
        "--max-iterations",
        "2",
        "-o",
        fitted.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("NOT converged")
            && common::stderr(&out).contains("did not converge in 2 iterations"),
        "{}",
        text(&out)
    );
    let toml = std::fs::read_to_string(&fitted).expect("fitted scenario written");
    assert!(
        toml.contains("# WARNING: the fit did not converge"),
        "{toml}"
    );
}

#[test]
fn bootstrap_gives_an_ordered_interval_for_every_parameter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtxpro6000-qwen3-32b");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        "--log",
        log.to_str().unwrap(),
        "--bootstrap",
        "3",
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let section = stdout
        .split("bootstrap over requests (3 replicas)")
        .nth(1)
        .unwrap_or_else(|| panic!("no bootstrap section:\n{stdout}"));
    let rows: Vec<(f64, f64)> = section
        .lines()
        .filter(|l| l.contains("..") && l.ends_with(" ns"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[1].parse().unwrap(), cols[3].parse().unwrap())
        })
        .collect();
    assert_eq!(rows.len(), 4, "four parameters:\n{stdout}");
    for (p5, p95) in rows {
        assert!(0.0 < p5 && p5 <= p95, "interval {p5}..{p95}:\n{stdout}");
    }
}

/// The first `n` records of the 4090 run, written to `dir/name`, with `edit` applied to the last.
fn ground_truth_head(dir: &Path, name: &str, n: usize, edit: impl Fn(&mut Value)) -> PathBuf {
    let text = std::fs::read_to_string(ground_truth("vllm-rtx4090-llama-3.1-8b")).expect("log");
    let mut rows: Vec<Value> = text
        .lines()
        .take(n)
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    edit(rows.last_mut().expect("a row"));
    let path = dir.join(name);
    let lines: Vec<String> = rows.iter().map(Value::to_string).collect();
    std::fs::write(&path, lines.join("\n") + "\n").expect("write log");
    path
}

#[test]
fn a_log_of_too_few_requests_is_refused_saying_how_many_a_fit_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth_head(dir.path(), "short.jsonl", 12, |_| {});
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        log.to_str().unwrap(),
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(
        &out,
        &["short.jsonl", "12 completed requests", "at least 20"],
    );
}

#[test]
fn a_log_whose_times_go_backwards_is_refused_naming_the_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Row 30's last token before its first.
    let log = ground_truth_head(dir.path(), "backwards.jsonl", 30, |row| {
        let first = row["first_token_ts"].as_f64().expect("first_token_ts");
        row["last_token_ts"] = Value::from(first - 1.0);
    });
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        log.to_str().unwrap(),
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["backwards.jsonl: row 30", "backwards"]);
}
