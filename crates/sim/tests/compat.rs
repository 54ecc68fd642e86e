//! `summary.json`'s `compat` section: vLLM's and inference-perf's names for the summary's own
//! figures, on a simulated LLM run and a simulated classifier run.

use std::path::PathBuf;

use capsim_sim::build::{BuiltScenario, Profiles, build};
use capsim_sim::summary::LatencyStats;
use capsim_sim::{RunOptions, Scenario, Summary, simulate};
use capsim_trace::{IngestOptions, Trace, Transforms};
use serde_json::Value;

/// `scenario` with its models built (it names no profile file).
fn built(scenario: &Scenario) -> BuiltScenario {
    build(scenario, &mut Profiles::default()).expect("the scenario builds")
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(scenario: &str, trace: &str, limit: usize) -> Summary {
    let scenario = Scenario::from_path(&repo_root().join("scenarios").join(scenario))
        .expect("scenario parses");
    let transforms = Transforms {
        limit: Some(limit),
        ..Transforms::default()
    };
    let (trace, _): (Trace, _) = capsim_trace::load(
        &[repo_root().join("traces").join(trace)],
        &IngestOptions::default(),
        &transforms,
    )
    .expect("trace loads");
    let options = RunOptions {
        seed: 3,
        ..RunOptions::default()
    };
    simulate(&built(&scenario), &trace, &options).expect("runs")
}

fn num(object: &serde_json::Map<String, Value>, key: &str) -> f64 {
    object
        .get(key)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{key} is a number in {object:?}"))
}

/// Each vLLM key of `name` equals the native statistic it renames.
fn assert_vllm_metric(vllm: &serde_json::Map<String, Value>, name: &str, native: &LatencyStats) {
    let pairs = [
        ("mean", native.mean_ms),
        ("median", native.p50_ms),
        ("std", native.std_ms),
        ("p90", native.p90_ms),
        ("p95", native.p95_ms),
        ("p99", native.p99_ms),
        ("p99.9", native.p999_ms),
    ];
    for (stat, expected) in pairs {
        let key = format!("{stat}_{name}_ms");
        assert_eq!(num(vllm, &key), expected, "{key}: expected {expected}");
    }
}

/// inference-perf's summary of a metric equals the native statistics, in seconds.
fn assert_inference_perf_metric(latency: &Value, name: &str, native: &LatencyStats) {
    let stats = latency[name]
        .as_object()
        .unwrap_or_else(|| panic!("{name} is an object: {latency}"));
    let pairs = [
        ("mean", native.mean_ms),
        ("min", native.min_ms),
        ("max", native.max_ms),
        ("median", native.p50_ms),
        ("p90", native.p90_ms),
        ("p99", native.p99_ms),
        ("p99.9", native.p999_ms),
    ];
    for (stat, expected_ms) in pairs {
        let got_s = num(stats, stat);
        assert!(
            (got_s * 1e3 - expected_ms).abs() < 1e-9,
            "{name}.{stat}: expected {expected_ms} ms, got {got_s} s"
        );
    }
}

#[test]
fn llm_run_aliases_equal_the_native_figures_they_rename() {
    let s = run("llm-8b-h200.toml", "azure-conv.parquet", 600);
    let vllm = &s.compat.vllm;
    for (name, key) in [
        ("ttft", "ttft"),
        ("tpot", "tpot"),
        ("itl", "itl"),
        ("e2el", "end_to_end"),
    ] {
        assert_vllm_metric(vllm, name, &s.latency_ms[key]);
    }
    assert_eq!(num(vllm, "request_throughput"), s.throughput_rps);
    assert_eq!(Some(num(vllm, "request_goodput")), s.goodput_rps);
    assert_eq!(num(vllm, "duration"), s.measured_span_s);
    assert_eq!(num(vllm, "completed"), s.measured.completed as f64);
    let llm = s.llm.as_ref().expect("an llm section");
    // Without warm-up and with every request completed, the completed requests' output tokens
    // are every token the batchers sampled.
    assert_eq!(s.measured.completed, s.requests.total);
    assert_eq!(num(vllm, "total_output_tokens"), llm.output_tokens as f64);
    let output_throughput = llm.output_tokens as f64 / s.measured_span_s;
    assert!((num(vllm, "output_throughput") - output_throughput).abs() < 1e-9);
    assert!(num(vllm, "total_token_throughput") > output_throughput);
    let e2e = &s.latency_ms["end_to_end"];
    assert!(e2e.std_ms > 0.0 && e2e.min_ms <= e2e.p50_ms && e2e.p50_ms <= e2e.max_ms);

    let latency = &s.compat.inference_perf["successes"]["latency"];
    for (name, key) in [
        ("request_latency", "end_to_end"),
        ("time_to_first_token", "ttft"),
        ("time_per_output_token", "tpot"),
        ("inter_token_latency", "itl"),
        ("normalized_time_per_output_token", "normalized"),
    ] {
        assert_inference_perf_metric(latency, name, &s.latency_ms[key]);
    }
    let successes = &s.compat.inference_perf["successes"];
    assert_eq!(
        successes["throughput"]["requests_per_sec"].as_f64(),
        Some(s.throughput_rps)
    );
    assert_eq!(
        successes["goodput_metrics"]["request_goodput"].as_f64(),
        s.goodput_rps
    );
}

#[test]
fn classifier_run_writes_e2el_and_request_rates_only() {
    let s = run("bert-dynamic-batching.toml", "demo.parquet", 600);
    let vllm = &s.compat.vllm;
    assert_vllm_metric(vllm, "e2el", &s.latency_ms["end_to_end"]);
    for absent in [
        "mean_ttft_ms",
        "mean_tpot_ms",
        "mean_itl_ms",
        "output_throughput",
    ] {
        assert!(!vllm.contains_key(absent), "{absent} in a classifier run");
    }
    assert_eq!(num(vllm, "request_throughput"), s.throughput_rps);
    assert_eq!(Some(num(vllm, "request_goodput")), s.goodput_rps);
    let latency = &s.compat.inference_perf["successes"]["latency"];
    assert_inference_perf_metric(latency, "request_latency", &s.latency_ms["end_to_end"]);
    for absent in [
        "time_to_first_token",
        "time_per_output_token",
        "inter_token_latency",
    ] {
        assert!(latency[absent].is_null(), "{absent} is null: {latency}");
    }
    let throughput = &s.compat.inference_perf["successes"]["throughput"];
    assert_eq!(throughput["output_tokens_per_sec"], 0.0, "{throughput}");
    assert_eq!(
        throughput["total_tokens_per_sec"].as_f64(),
        vllm["total_token_throughput"].as_f64(),
        "both tools count the same tokens"
    );
}

#[test]
fn compat_section_serializes_the_same_bytes_per_seed() {
    let a = serde_json::to_string(&run("llm-8b-h200.toml", "azure-conv.parquet", 200)).unwrap();
    let b = serde_json::to_string(&run("llm-8b-h200.toml", "azure-conv.parquet", 200)).unwrap();
    assert!(a.contains("\"compat\":{\"vllm\":"), "{a}");
    assert_eq!(a, b);
}
