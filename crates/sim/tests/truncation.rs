//! A pool's `max_input_tokens` and `max_output_tokens`: a trace with sizes above the limits runs
//! exactly as the same trace cut to them beforehand, and the summary counts the cut requests.

use capsim_sim::build::{BuiltScenario, Profiles, build};
use capsim_sim::{RequestRecord, RunOptions, Scenario, Summary, simulate_with_requests};
use capsim_trace::{Columns, Trace};

const MS: u64 = 1_000_000;

/// `scenario` with its models built (it names no profile file).
fn built(scenario: &Scenario) -> BuiltScenario {
    build(scenario, &mut Profiles::default()).expect("the scenario builds")
}

/// 400 requests every 2 ms whose inputs cycle through 40..=1000 tokens (every third above 512)
/// and outputs through 3..=300.
fn sizes() -> (Vec<u32>, Vec<u32>) {
    let inputs = (0..400u32).map(|i| 40 + (i * 337) % 961).collect();
    let outputs = (0..400u32).map(|i| 3 + (i * 131) % 298).collect();
    (inputs, outputs)
}

fn trace(inputs: Vec<u32>, outputs: Vec<u32>) -> Trace {
    Trace::from_columns(Columns {
        arrival_ns: (0..inputs.len() as u64).map(|i| i * 2 * MS).collect(),
        input_tokens: inputs,
        output_tokens: Some(outputs),
        ..Columns::default()
    })
    .expect("a valid trace")
}

fn run(scenario: &str, trace: &Trace) -> (Summary, Vec<RequestRecord>) {
    let scenario = Scenario::from_toml_str(scenario).expect("scenario parses");
    let options = RunOptions {
        seed: 11,
        ..RunOptions::default()
    };
    let (run, mut log) = simulate_with_requests(&built(&scenario), trace, &options).expect("runs");
    log.sort_by_request();
    (run.summary, log.records().to_vec())
}

/// Every request's times, batch and sizes agree between the two runs.
fn assert_same_requests(limited: &[RequestRecord], cut: &[RequestRecord]) {
    assert_eq!(limited.len(), cut.len());
    for (a, b) in limited.iter().zip(cut) {
        let times = |r: &RequestRecord| {
            (
                r.input_tokens,
                r.output_tokens,
                r.batch_id,
                r.exec_start_ns,
                r.first_token_ns,
                r.exec_end_ns,
                r.response_ns,
            )
        };
        assert_eq!(
            times(a),
            times(b),
            "request {}: with the limit (left) and pre-truncated (right)",
            a.request
        );
    }
}

const DYNAMIC: &str = r#"
[batcher]
max_batch_size = 8
max_queue_delay = "1ms"
[service]
kind = "affine"
a = "1.5ms"
b = "0.1ms"
c = "2us"
"#;

#[test]
fn dynamic_batcher_with_max_input_tokens_matches_the_pre_truncated_trace() {
    let (inputs, outputs) = sizes();
    let long = inputs.iter().filter(|&&n| n > 512).count() as u64;
    assert!(long > 100, "the trace has inputs above the limit: {long}");
    let cut: Vec<u32> = inputs.iter().map(|&n| n.min(512)).collect();
    let limited_scenario = format!("max_input_tokens = 512\n{DYNAMIC}");
    let (limited, limited_log) = run(&limited_scenario, &trace(inputs.clone(), outputs.clone()));
    let (pre_cut, cut_log) = run(DYNAMIC, &trace(cut, outputs.clone()));
    let (unlimited, _) = run(DYNAMIC, &trace(inputs, outputs));
    assert_ne!(
        unlimited.latency_ms["execution"], limited.latency_ms["execution"],
        "the limit changes the padded batches' execution times"
    );
    assert_same_requests(&limited_log, &cut_log);
    assert_eq!(limited.latency_ms, pre_cut.latency_ms);
    assert_eq!(limited.requests.truncated_input, long);
    assert_eq!(limited.requests.truncated_output, 0);
    let text = limited.human();
    assert!(
        text.contains(&format!("truncated to the pool's limit: {long} inputs")),
        "{text}"
    );
    assert!(!pre_cut.human().contains("truncated"));
    assert_eq!(pre_cut.requests.truncated_input, 0);
    let json = serde_json::to_value(&limited).unwrap();
    assert_eq!(json["requests"]["truncated_input"], long);
    assert!(
        serde_json::to_value(&pre_cut).unwrap()["requests"]
            .get("truncated_input")
            .is_none(),
        "absent when nothing was cut"
    );
}

const CONTINUOUS: &str = r#"
[batcher]
kind = "continuous"
max_num_seqs = 16
max_num_batched_tokens = 2048
[kv_cache]
block_size = 16
num_gpu_blocks = 2000
[step_time]
kind = "linear"
base = "5ms"
per_prefill_token = "20us"
per_decode_seq = "50us"
"#;

#[test]
fn continuous_batcher_with_both_limits_matches_the_pre_truncated_trace() {
    let (inputs, outputs) = sizes();
    let long_in = inputs.iter().filter(|&&n| n > 512).count() as u64;
    let long_out = outputs.iter().filter(|&&n| n > 128).count() as u64;
    let cut_in: Vec<u32> = inputs.iter().map(|&n| n.min(512)).collect();
    let cut_out: Vec<u32> = outputs.iter().map(|&n| n.min(128)).collect();
    let limited_scenario = format!("max_input_tokens = 512\nmax_output_tokens = 128\n{CONTINUOUS}");
    let (limited, limited_log) = run(&limited_scenario, &trace(inputs.clone(), outputs.clone()));
    let (pre_cut, cut_log) = run(CONTINUOUS, &trace(cut_in, cut_out));
    let (unlimited, _) = run(CONTINUOUS, &trace(inputs, outputs));
    assert_ne!(
        unlimited.latency_ms["ttft"], limited.latency_ms["ttft"],
        "the limits change the steps' times"
    );
    assert!(unlimited.llm.unwrap().output_tokens > limited.llm.as_ref().unwrap().output_tokens);
    assert_same_requests(&limited_log, &cut_log);
    assert_eq!(limited.latency_ms, pre_cut.latency_ms);
    assert_eq!(limited.llm, pre_cut.llm);
    assert_eq!(limited.requests.truncated_input, long_in);
    assert_eq!(limited.requests.truncated_output, long_out);
}

#[test]
fn limits_of_zero_are_refused_naming_the_key() {
    for (text, key) in [
        (
            format!("max_input_tokens = 0\n{DYNAMIC}"),
            "max_input_tokens",
        ),
        (
            format!("max_output_tokens = 0\n{DYNAMIC}"),
            "max_output_tokens",
        ),
        (
            format!(
                "{DYNAMIC}[pools.short]\nmodels = [\"m\"]\nmax_input_tokens = 0\n[pools.short.service]\nkind = \"constant\"\ntime = \"1ms\"\n"
            ),
            "pools.short.max_input_tokens",
        ),
    ] {
        let err = Scenario::from_toml_str(&text)
            .expect_err("a limit of 0 is refused")
            .to_string();
        assert!(
            err.contains(key) && err.contains("at least 1"),
            "expected an error naming `{key}`, got: {err}"
        );
    }
}
