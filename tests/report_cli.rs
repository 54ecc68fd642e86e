//! End-to-end tests of `capsim sweep`, `capsim merge`, `capsim report` and `capsim plan`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{capsim, repo, text};

/// A small affine-service scenario written into `dir`.
fn scenario(dir: &Path) -> PathBuf {
    let path = dir.join("scenario.toml");
    std::fs::write(
        &path,
        "name = \"cli-test\"\n[timeseries]\ninterval = \"5s\"\n[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"2ms\"\n[service]\nkind = \"affine\"\na = \"20ms\"\nb = \"5ms\"\n",
    )
    .unwrap();
    path
}

const SLO: &str = "e2e.p99<=400ms";

fn sweep(dir: &Path, out: &str, slo: &str, extra: &[&str]) -> Output {
    let scenario = scenario(dir);
    let trace = repo("traces/demo.parquet");
    let out = dir.join(out);
    let mut args = vec![
        "sweep",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--load",
        "0.5..6x:6",
        "--grid",
        "batcher.max_batch_size=1,8",
        "--grid",
        "instances=1..2",
        "--slo",
        slo,
        "--seeds",
        "2",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    capsim(&args)
}

#[test]
fn sweep_writes_curves_capacities_and_report_and_shards_merge_to_the_same_capacities() {
    let dir = tempfile::tempdir().unwrap();
    let whole = sweep(dir.path(), "whole", SLO, &[]);
    assert!(whole.status.success(), "{}", text(&whole));
    let out = dir.path().join("whole");
    for name in [
        "curves.parquet",
        "capacity.csv",
        "capacity.json",
        "sweep.json",
        "report.md",
        "throughput_latency.png",
        "latency_cdf.png",
        "stage_breakdown.png",
        "timeseries.png",
        "capacity_heatmap.png",
    ] {
        let len = std::fs::metadata(out.join(name))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 0, "{name} missing or empty\n{}", text(&whole));
    }
    let csv = std::fs::read_to_string(out.join("capacity.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + 4,
        "header + 4 configurations:\n{csv}"
    );

    for i in 0..2 {
        let shard = format!("{i}/2");
        let output = sweep(
            dir.path(),
            &format!("shard{i}"),
            SLO,
            &["--shard", &shard, "--no-report"],
        );
        assert!(output.status.success(), "{}", text(&output));
    }
    let merged = dir.path().join("merged");
    let output = capsim(&[
        "merge",
        dir.path().join("shard0").to_str().unwrap(),
        dir.path().join("shard1").to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        std::fs::read_to_string(merged.join("capacity.csv")).unwrap(),
        csv,
        "merged shards must give the unsharded capacity.csv"
    );

    std::fs::remove_file(out.join("report.md")).unwrap();
    let report = capsim(&["report", out.to_str().unwrap()]);
    assert!(report.status.success(), "{}", text(&report));
    assert!(out.join("report.md").exists());
}

#[test]
fn plan_names_the_fewest_instances_that_carry_the_growth() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let trace = repo("traces/demo.parquet");
    let output = capsim(&[
        "plan",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        "e2e.p99<=400ms",
        "--growth",
        "3x",
        "--grid",
        "batcher.max_batch_size=1,8",
        "--grid",
        "instances=1..4",
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("plan: "), "{}", text(&output));
    assert!(stdout.contains("headroom"), "{}", text(&output));
}

#[test]
fn bad_flags_exit_2_and_quote_the_value() {
    let dir = tempfile::tempdir().unwrap();
    for (slo, flag, value) in [
        ("e2e.p99<=fast", "--max-lost", "0.001"),
        (SLO, "--shard", "2/2"),
        (SLO, "--grid", "instances=8..1"),
    ] {
        let output = sweep(dir.path(), "bad", slo, &[flag, value]);
        let value = if slo == SLO { value } else { slo };
        assert_eq!(
            output.status.code(),
            Some(2),
            "{flag} {value}: {}",
            text(&output)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(value),
            "{flag}: stderr should quote `{value}`: {stderr}"
        );
    }
}

#[test]
fn detail_load_chooses_the_load_of_the_cdf_and_time_series() {
    let dir = tempfile::tempdir().unwrap();
    let output = sweep(
        dir.path(),
        "detail",
        SLO,
        &["--detail-load", "2x", "--no-report"],
    );
    assert!(output.status.success(), "{}", text(&output));
    let sweep_json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("detail/sweep.json")).unwrap(),
    )
    .unwrap();
    let details = sweep_json["details"].as_array().expect("details");
    assert!(!details.is_empty(), "no detail runs in {sweep_json}");
    for detail in details {
        assert_eq!(detail["load"].as_f64(), Some(2.0), "detail run: {detail}");
    }

    let bad = sweep(dir.path(), "bad", SLO, &["--detail-load", "0x"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("`0x`"), "{}", text(&bad));
}

#[test]
fn plan_with_a_profile_rests_on_it_and_says_the_answer_is_for_the_profiles_machine() {
    let trace = repo("traces/demo.parquet");
    let scenario = repo("scenarios/bert-dynamic-batching.toml");
    let output = capsim(&[
        "plan",
        "--scenario",
        scenario.to_str().unwrap(),
        "--profile",
        "traces/profiles/text_classifier.cpu.json",
        "--trace",
        trace.to_str().unwrap(),
        "--limit",
        "3000",
        "--slo",
        "e2e.p99<=100ms",
        "--grid",
        "instances=1..2",
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "measured service times (calibrated profile ",
        "traces/profiles/text_classifier.cpu.json, measured on cpu (AMD EPYC, 2 logical CPUs) through ONNX Runtime 1.31.1 on 2026-12-01",
        "the scenario describes other hardware (GPU, T4) than the profile was measured on",
    ] {
        assert!(
            stdout.contains(needle),
            "lacks {needle:?}: {}",
            text(&output)
        );
    }
    assert!(!stdout.contains("UNMEASURED"), "{}", text(&output));
}
