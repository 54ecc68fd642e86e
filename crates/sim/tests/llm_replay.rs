//! Replays of the shared LLM traces (Azure conversation and code, Mooncake) through continuous
//! batching: every request accounted for, every output token generated exactly once, TTFT never
//! above end-to-end latency, and prefix caching on Mooncake lowering TTFT.

use std::path::PathBuf;

use capsim_sim::build::{BuiltScenario, Profiles, build};
use capsim_sim::{Outcome, RunOptions, Scenario, Summary, simulate, simulate_with_requests};
use capsim_trace::{IngestOptions, Trace, Transforms};

/// `scenario` with its models built (it names no profile file).
fn built(scenario: &Scenario) -> BuiltScenario {
    build(scenario, &mut Profiles::default()).expect("the scenario builds")
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn trace(name: &str) -> Trace {
    trace_with(name, &Transforms::default())
}

fn trace_with(name: &str, transforms: &Transforms) -> Trace {
    let path = repo_root().join("traces").join(name);
    let (trace, _) = capsim_trace::load(&[path], &IngestOptions::default(), transforms)
        .unwrap_or_else(|e| panic!("traces/{name} loads: {e}"));
    trace
}

fn llm_scenario() -> Scenario {
    Scenario::from_path(&repo_root().join("scenarios/llm-8b-h200.toml"))
        .expect("scenarios/llm-8b-h200.toml parses")
}

fn options() -> RunOptions {
    RunOptions {
        seed: 7,
        ..RunOptions::default()
    }
}

/// Checks the accounting every continuous-batching run must satisfy, from its records.
fn check_replay(scenario: &Scenario, trace: &Trace) -> Summary {
    let (run, log) = simulate_with_requests(&built(scenario), trace, &options()).expect("runs");
    let s = &run.summary;
    assert_eq!(
        s.requests.total,
        trace.len() as u64,
        "one attempt per request"
    );
    assert!(s.requests.adds_up(), "{:?}", s.requests);
    assert_eq!(log.len(), trace.len());
    let mut completed_tokens = 0u64;
    for r in log.records() {
        if r.outcome != Outcome::Completed {
            continue;
        }
        completed_tokens += u64::from(r.output_tokens.max(1));
        assert!(r.first_token_ns != capsim_sim::record::NONE, "{r:?}");
        assert!(
            r.first_token_ns <= r.exec_end_ns && r.exec_end_ns <= r.response_ns,
            "first token before the last, last before the response: {r:?}"
        );
    }
    let llm = s.llm.as_ref().expect("an llm section");
    assert_eq!(
        llm.output_tokens, completed_tokens,
        "every output token of every completed request generated exactly once"
    );
    for key in ["ttft", "tpot", "itl", "normalized"] {
        assert!(s.latency_ms.contains_key(key), "latency_ms has {key}");
    }
    let (ttft, e2e) = (&s.latency_ms["ttft"], &s.latency_ms["end_to_end"]);
    assert!(ttft.max_ms <= e2e.max_ms && ttft.p50_ms <= e2e.p50_ms);
    assert!(llm.kv_utilization_max <= 1.0 && llm.kv_utilization_mean <= llm.kv_utilization_max);
    run.summary
}

#[test]
fn azure_conv_replay_accounts_for_every_request_and_token() {
    let s = check_replay(&llm_scenario(), &trace("azure-conv.parquet"));
    assert_eq!(s.requests.completed, 19_366, "one H200 serves conv at 1x");
    let llm = s.llm.unwrap();
    assert!(llm.mean_seqs_per_step > 1.0, "{llm:?}");
}

#[test]
fn azure_code_replay_accounts_for_every_request_and_token() {
    let s = check_replay(&llm_scenario(), &trace("azure-code.parquet"));
    assert_eq!(s.requests.completed, 8_819);
}

/// Mooncake's first 4000 requests (about 20 minutes) on four H200 replicas, prefix caching off
/// and on. The GPU cache (about 850k tokens a replica) keeps only recent prefixes, and the
/// balancer spreads a conversation's turns over replicas, so the hit rate is far below the 37%
/// an unbounded cache on one replica reaches on the whole trace; it still lowers TTFT.
#[test]
fn mooncake_prefix_caching_hits_and_lowers_ttft() {
    let trace = trace_with(
        "mooncake-conversation.parquet",
        &Transforms {
            limit: Some(4000),
            ..Transforms::default()
        },
    );
    let mut off = llm_scenario();
    off.set("instances", "4").unwrap();
    let mut on = off.clone();
    on.set("kv_cache.enable_prefix_caching", "true").unwrap();
    let s_off = check_replay(&off, &trace);
    let s_on = check_replay(&on, &trace);
    let (hit_off, hit_on) = (
        s_off.llm.as_ref().unwrap().prefix_cache_hit_rate,
        s_on.llm.as_ref().unwrap().prefix_cache_hit_rate,
    );
    let (ttft_off, ttft_on) = (&s_off.latency_ms["ttft"], &s_on.latency_ms["ttft"]);
    eprintln!(
        "mooncake 4000 requests, 4 x H200: hit rate off {hit_off:.3} on {hit_on:.3}; TTFT mean {:.1} -> {:.1} ms, p50 {:.1} -> {:.1} ms, p99 {:.1} -> {:.1} ms",
        ttft_off.mean_ms,
        ttft_on.mean_ms,
        ttft_off.p50_ms,
        ttft_on.p50_ms,
        ttft_off.p99_ms,
        ttft_on.p99_ms
    );
    assert_eq!(hit_off, 0.0);
    assert!(hit_on > 0.0, "Mooncake shares prefixes");
    assert!(
        ttft_on.mean_ms < ttft_off.mean_ms,
        "caching lowers TTFT: {} vs {}",
        ttft_on.mean_ms,
        ttft_off.mean_ms
    );
}

#[test]
fn same_seed_gives_identical_llm_summary() {
    let trace = trace("azure-code.parquet");
    let scenario = llm_scenario();
    let a =
        serde_json::to_string(&simulate(&built(&scenario), &trace, &options()).unwrap()).unwrap();
    let b =
        serde_json::to_string(&simulate(&built(&scenario), &trace, &options()).unwrap()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn trace_without_output_tokens_is_an_error_naming_the_column() {
    let t = trace("azure-code.parquet");
    let mut cols = t.into_columns();
    cols.output_tokens = None;
    let t = Trace::from_columns(cols).unwrap();
    let err = simulate(&built(&llm_scenario()), &t, &options()).unwrap_err();
    assert!(err.to_string().contains("output_tokens"), "{err}");
}

#[test]
fn tight_kv_cache_preempts_and_still_generates_every_token_once() {
    let mut scenario = llm_scenario();
    // 2000 blocks of 16 tokens: 32k tokens, far below what conv keeps running at 3x its rate.
    scenario.set("kv_cache.num_gpu_blocks", "2000").unwrap();
    let t = trace_with(
        "azure-conv.parquet",
        &Transforms {
            rate_scale: Some(3.0),
            limit: Some(3000),
            ..Transforms::default()
        },
    );
    let s = check_replay(&scenario, &t);
    let llm = s.llm.unwrap();
    assert!(llm.preemptions > 0, "{llm:?}");
    assert!(llm.recomputed_tokens > 0, "{llm:?}");
}
