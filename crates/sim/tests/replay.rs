//! Replays of real traces: determinism of the written outputs, and the shared Azure
//! conversation trace through a multi-instance scenario with every request accounted for.

use std::path::PathBuf;

use capsim_sim::build::{BuiltScenario, Profiles, build};
use capsim_sim::output::{write_requests_parquet, write_summary_json};
use capsim_sim::{RunOptions, Scenario, simulate_with_requests};
use capsim_trace::{IngestOptions, Trace, Transforms};

/// `scenario` with its models built (it names no profile file).
fn built(scenario: &Scenario) -> BuiltScenario {
    build(scenario, &mut Profiles::default()).expect("the scenario builds")
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn azure_conv() -> Trace {
    let path = repo_root().join("traces/azure-conv.parquet");
    let (trace, _) = capsim_trace::load(&[path], &IngestOptions::default(), &Transforms::default())
        .expect("traces/azure-conv.parquet loads");
    trace
}

fn example_scenario(name: &str) -> Scenario {
    Scenario::from_path(&repo_root().join("scenarios").join(name)).expect("example scenario parses")
}

#[test]
fn same_seed_gives_byte_identical_requests_parquet() {
    let trace = azure_conv();
    let mut scenario = example_scenario("bert-dynamic-batching.toml");
    // Ten times the load, so batches, queues and timeouts all come into play.
    scenario.set("instances", "1").unwrap();
    let trace = {
        let mut cols = trace.into_columns();
        for a in &mut cols.arrival_ns {
            *a /= 10;
        }
        Trace::from_columns(cols).unwrap()
    };
    let dir = tempfile::tempdir().unwrap();
    let options = RunOptions {
        seed: 42,
        ..RunOptions::default()
    };
    let mut bytes = Vec::new();
    for run in 0..2 {
        let (result, log) = simulate_with_requests(&built(&scenario), &trace, &options).unwrap();
        let requests = dir.path().join(format!("requests-{run}.parquet"));
        let summary = dir.path().join(format!("summary-{run}.json"));
        write_requests_parquet(&requests, log.records(), &["default".to_string()]).unwrap();
        write_summary_json(&summary, &result.summary).unwrap();
        bytes.push((
            std::fs::read(&requests).unwrap(),
            std::fs::read(&summary).unwrap(),
        ));
        assert!(
            result.summary.batch_size_mean > 1.1,
            "the run should batch: {}",
            result.summary.batch_size_mean
        );
    }
    assert!(
        bytes[0].0 == bytes[1].0,
        "requests.parquet differs between two runs with the same seed"
    );
    assert!(
        bytes[0].1 == bytes[1].1,
        "summary.json differs between two runs with the same seed"
    );
    let (other, _) = simulate_with_requests(
        &built(&scenario),
        &trace,
        &RunOptions {
            seed: 43,
            ..options
        },
    )
    .unwrap();
    let first: capsim_sim::Summary = serde_json::from_slice(&bytes[0].1).unwrap();
    assert_ne!(
        other.summary.latency_ms, first.latency_ms,
        "a different seed should change latencies"
    );
}

#[test]
fn azure_conv_through_a_multi_instance_scenario_accounts_for_every_request() {
    let trace = azure_conv();
    let rows = trace.len() as u64;
    assert_eq!(rows, 19_366);
    // 20x the load on 3 small instances with a bounded queue, a timeout and a rate limit, so
    // every outcome occurs.
    let cols = {
        let mut c = trace.into_columns();
        for a in &mut c.arrival_ns {
            *a /= 20;
        }
        c
    };
    let trace = Trace::from_columns(cols).unwrap();
    let mut scenario = example_scenario("bert-dynamic-batching.toml");
    // The LLM trace's long inputs, uncut (the scenario cuts at BERT's 512 tokens), keep the
    // instances slow enough that requests also time out.
    for (key, value) in [
        ("max_input_tokens", "100000"),
        ("instances", "3"),
        ("execution.instance_count", "1"),
        ("queue.max_queue_size", "16"),
        ("queue.timeout", "40ms"),
        ("gateway.rate_limit", "100rps"),
        ("gateway.burst", "20"),
    ] {
        scenario.set(key, value).unwrap();
    }
    let (run, log) =
        simulate_with_requests(&built(&scenario), &trace, &RunOptions::default()).unwrap();
    let c = &run.summary.requests;
    assert_eq!(c.total, rows);
    assert_eq!(log.len() as u64, rows);
    assert_eq!(c.completed + c.rejected + c.timed_out, c.total, "{c:?}");
    assert!(
        c.completed > 0 && c.rejected > 0 && c.timed_out > 0,
        "every outcome should occur: {c:?}"
    );
    let used: std::collections::BTreeSet<u32> = log
        .records()
        .iter()
        .map(|r| r.instance)
        .filter(|&i| i != u32::MAX)
        .collect();
    assert_eq!(used.len(), 3, "all three instances should serve requests");
    let mut rows_seen: Vec<u32> = log.records().iter().map(|r| r.request).collect();
    rows_seen.dedup();
    assert_eq!(
        rows_seen.len() as u64,
        rows,
        "each trace row appears exactly once"
    );
}
