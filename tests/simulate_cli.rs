//! End-to-end tests of `capsim simulate`.

mod common;

use std::path::Path;
use std::process::Output;

use common::{capsim, repo};

fn simulate(out: &Path, extra: &[&str]) -> Output {
    let scenario = repo("scenarios/bert-dynamic-batching.toml");
    let trace = repo("traces/azure-conv.parquet");
    let mut args = vec![
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--limit",
        "3000",
        "--rate-scale",
        "20",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    capsim(&args)
}

#[test]
fn simulate_writes_summary_requests_and_timeseries_with_counts_that_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let result = simulate(
        &out,
        &[
            "--seed",
            "3",
            "--warmup",
            "500",
            "--set",
            "queue.max_queue_size=8",
        ],
    );
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        result.status.success(),
        "stdout {stdout}\nstderr {}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(
        stdout.contains("requests 3000") && stdout.contains("HdrHistogram"),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let count = |k: &str| summary["requests"][k].as_u64().unwrap();
    assert_eq!(count("total"), 3000);
    assert_eq!(
        count("completed") + count("rejected") + count("timed_out"),
        3000,
        "{summary}"
    );
    // The 500 given, and the drain of the steady-state window (docs/report.md).
    let excluded = summary["warmup_excluded"].as_u64().unwrap();
    assert!(excluded > 500, "{summary}");
    assert_eq!(summary["measured"]["total"].as_u64(), Some(3000 - excluded));
    assert_eq!(summary["steady_window"]["warmup_rule"], "warmup");
    assert_eq!(summary["seed"].as_u64(), Some(3));
    for stage in [
        "end_to_end",
        "queue",
        "execution",
        "preprocess",
        "network_in",
    ] {
        let p99 = summary["latency_ms"][stage]["p99_ms"].as_f64().unwrap();
        assert!(p99 > 0.0, "{stage} p99 {p99}");
    }
    assert!(out.join("requests.parquet").metadata().unwrap().len() > 1000);
    assert!(out.join("timeseries.parquet").metadata().unwrap().len() > 100);
}

#[test]
fn simulate_is_deterministic_and_no_requests_skips_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    assert!(simulate(&a, &["--seed", "9"]).status.success());
    assert!(simulate(&b, &["--seed", "9"]).status.success());
    for file in ["requests.parquet", "summary.json", "timeseries.parquet"] {
        assert!(
            std::fs::read(a.join(file)).unwrap() == std::fs::read(b.join(file)).unwrap(),
            "{file} differs between two runs with the same seed"
        );
    }
    assert!(
        simulate(&c, &["--seed", "9", "--no-requests"])
            .status
            .success()
    );
    assert!(!c.join("requests.parquet").exists());
    assert!(
        std::fs::read(a.join("summary.json")).unwrap()
            == std::fs::read(c.join("summary.json")).unwrap(),
        "--no-requests must not change the summary"
    );
}

#[test]
fn bad_scenario_key_or_value_exits_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[batcher]\nmax_batchsize = 4\n[service]\nkind = \"constant\"\ntime = \"5ms\"\n",
    )
    .unwrap();
    let trace = repo("traces/azure-conv.parquet");
    let out = dir.path().join("out");
    let args = [
        "simulate",
        "--scenario",
        bad.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    let result = capsim(&args);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("max_batchsize") && stderr.contains("bad.toml"),
        "{stderr}"
    );

    let result = simulate(&out, &["--set", "batcher.max_queue_delay=5 parsecs"]);
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"5 parsecs\"") && stderr.contains("max_queue_delay"),
        "{stderr}"
    );

    let result = simulate(&out, &["--warmup", "ten"]);
    assert_eq!(result.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&result.stderr).contains("--warmup"));
}

#[test]
fn timeline_has_one_complete_event_per_batch_in_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let events_of = |file: &Path| -> Vec<serde_json::Value> {
        let value: serde_json::Value =
            serde_json::from_slice(&std::fs::read(file).unwrap()).expect("timeline is JSON");
        value["traceEvents"]
            .as_array()
            .expect("traceEvents")
            .clone()
    };
    // The whole run: every batch of the summary is one complete event.
    let whole = dir.path().join("whole.json");
    let result = simulate(
        &out,
        &[
            "--no-requests",
            "--timeline",
            whole.to_str().unwrap(),
            "--timeline-window",
            "0s..100000s",
        ],
    );
    assert!(
        result.status.success(),
        "{}",
        String::from_utf8_lossy(&result.stderr)
    );
    assert!(!out.join("requests.parquet").exists());
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let events = events_of(&whole);
    let batches: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(batches.len() as u64, summary["batches"].as_u64().unwrap());
    for batch in &batches {
        let size = batch["args"]["size"].as_u64().unwrap();
        assert_eq!(
            batch["args"]["requests"].as_array().unwrap().len() as u64,
            size
        );
        assert!(batch["dur"].as_f64().unwrap() > 0.0);
    }
    let begins = events.iter().filter(|e| e["ph"] == "b").count();
    assert_eq!(begins, events.iter().filter(|e| e["ph"] == "e").count());
    assert!(begins > 0);

    // A window holds exactly the batches that start in it.
    let part = dir.path().join("part.json");
    let result = simulate(
        &out,
        &[
            "--timeline",
            part.to_str().unwrap(),
            "--timeline-window",
            "1s..2s",
        ],
    );
    assert!(result.status.success());
    let in_window: Vec<u64> = batches
        .iter()
        .filter(|b| (1e6..2e6).contains(&b["ts"].as_f64().unwrap()))
        .map(|b| b["args"]["batch_id"].as_u64().unwrap())
        .collect();
    let part_ids: Vec<u64> = events_of(&part)
        .iter()
        .filter(|e| e["ph"] == "X")
        .map(|b| b["args"]["batch_id"].as_u64().unwrap())
        .collect();
    assert!(!in_window.is_empty());
    assert_eq!(part_ids, in_window);

    let result = simulate(&out, &["--timeline", "t.json", "--timeline-window", "5s"]);
    assert_eq!(result.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&result.stderr).contains("--timeline-window"));
}

/// The end-to-end latency percentiles of a run's summary.json.
fn end_to_end_ms(out: &Path) -> serde_json::Value {
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    summary["latency_ms"]["end_to_end"].clone()
}

#[test]
fn set_switches_the_affine_service_to_a_profile_and_profile_flag_runs_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let (affine, by_set, by_flag) = (
        dir.path().join("affine"),
        dir.path().join("set"),
        dir.path().join("flag"),
    );
    assert!(simulate(&affine, &[]).status.success());
    let switched = simulate(
        &by_set,
        &[
            "--set",
            "service.kind=profile",
            "--set",
            "service.path=../traces/profiles/text_classifier.cpu.json",
        ],
    );
    assert!(switched.status.success(), "{}", common::text(&switched));
    assert!(
        common::stderr(&switched)
            .contains("`service.kind` changed from \"affine\" to \"profile\": dropped the old kind's `a`, `b`, `c`"),
        "{}",
        common::text(&switched)
    );
    let flagged = simulate(
        &by_flag,
        &["--profile", "traces/profiles/text_classifier.cpu.json"],
    );
    assert!(flagged.status.success(), "{}", common::text(&flagged));
    assert_eq!(
        end_to_end_ms(&by_set),
        end_to_end_ms(&by_flag),
        "--profile P and --set service.kind=profile --set service.path=P serve the same times"
    );
    assert_ne!(
        end_to_end_ms(&by_set),
        end_to_end_ms(&affine),
        "the profile's times replace the affine guess"
    );
}

#[test]
fn a_service_kind_set_without_its_keys_exits_2_naming_the_missing_key() {
    let dir = tempfile::tempdir().unwrap();
    let output = simulate(&dir.path().join("run"), &["--set", "service.kind=profile"]);
    common::assert_user_error(&output, &["`path`", "dropped the old kind's `a`, `b`, `c`"]);
    let output = simulate(
        &dir.path().join("run"),
        &["--profile", "traces/profiles/no-such-profile.json"],
    );
    common::assert_user_error(&output, &["no-such-profile.json"]);
}

#[test]
fn set_below_the_preferred_sizes_runs_with_a_note_and_a_misspelt_key_gets_a_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let output = simulate(
        &dir.path().join("a"),
        &["--no-requests", "--set", "batcher.max_batch_size=4"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "note: `batcher.max_batch_size` = 4 is below `batcher.preferred_batch_size` [8, 16, 32]"
        ),
        "{stderr}"
    );
    let output = simulate(&dir.path().join("b"), &["--set", "instance=4"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("did you mean `instances`?"), "{stderr}");
}
