//! The serving pipeline around a continuous batcher's steps, in closed form: where a request
//! joins the steps, how many steps it waits for (`batcher.schedule_ahead_steps`), and what the
//! costs outside the GPU add to TTFT, TPOT and e2e.
//!
//! Every test runs a linear step time with no spread: a step is 10 ms, plus 10 us per prefill
//! token. The network is 1 ms each way, tokenization 20 us per input token (one worker), and
//! each token's detokenization 500 us; closing a stream takes 3 ms. A background request
//! (100 prompt tokens) keeps the engine busy: sent at 0, it joins the queue at 1 + 2 = 3 ms, its
//! prefill runs 3-14 ms, then its decode steps 14-24, 24-34, 34-44 ms, and so on.

use super::*;
use crate::build::scenario_runs::simulate_with_requests;
use crate::record::RequestRecord;
use crate::scenario::Scenario;
use capsim_trace::Columns;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// One decode step (10 ms) and the prefill step of a 100-token prompt (10 ms + 100 * 10 us).
const DECODE_STEP_NS: u64 = 10 * MS;
const PREFILL_STEP_NS: u64 = 11 * MS;
/// The network both ways, the prompt's tokenization (100 * 20 us) and one token's
/// detokenization: what a request pays outside the GPU before its first token is at the client.
const COSTS_NS: u64 = 2 * MS + 2 * MS + 500 * US;
/// The background request's decode step that the probes join during: 24-34 ms.
const STEP_END_NS: u64 = 34 * MS;

/// The scenario, scheduling `ahead` steps ahead; eager (no CUDA graphs), so that no step is
/// padded and each step's time is the closed form's.
fn scenario(ahead: u32) -> Scenario {
    Scenario::from_toml_str(&format!(
        "[network]\nlatency = {{ kind = \"constant\", one_way = \"1ms\" }}\n\
         [preprocess]\nworkers = 1\nper_input_token = \"20us\"\n\
         [batcher]\nkind = \"continuous\"\nschedule_ahead_steps = {ahead}\ncuda_graph_sizes = []\n\
         [kv_cache]\nnum_gpu_blocks = 1000\n\
         [step_time]\nkind = \"linear\"\nbase = \"10ms\"\nper_prefill_token = \"10us\"\n\
         [postprocess]\nbase = \"3ms\"\nper_output_token = \"500us\"\n"
    ))
    .expect("the pipeline scenario is valid")
}

/// Requests of 100 prompt tokens sent at `sends_ns` with `outputs` tokens each.
fn trace(sends_ns: &[u64], outputs: &[u32]) -> Trace {
    Trace::from_columns(Columns {
        arrival_ns: sends_ns.to_vec(),
        input_tokens: vec![100; sends_ns.len()],
        output_tokens: Some(outputs.to_vec()),
        ..Columns::default()
    })
    .expect("a valid trace")
}

/// The records of a run of `trace` through `scenario`, by trace row; the engine has checked
/// that every request is accounted for.
fn records(scenario: &Scenario, trace: &Trace) -> Vec<RequestRecord> {
    let (run, log) =
        simulate_with_requests(scenario, trace, &RunOptions::default()).expect("the run completes");
    assert_eq!(run.summary.requests.completed, trace.len() as u64);
    log.records().to_vec()
}

/// The TTFT of a one-token probe that joins the queue `join_ns` (3 ms after its send), behind
/// a background request of `background_tokens` output tokens, scheduling `ahead` steps ahead.
fn probe_ttft_ns(ahead: u32, background_tokens: u32, join_ns: u64) -> u64 {
    let sends = [0, join_ns - 3 * MS];
    let got = records(&scenario(ahead), &trace(&sends, &[background_tokens, 1]));
    assert_eq!(got[1].queued_ns, join_ns, "the probe joins when planned");
    got[1].ttft_ns()
}

#[test]
fn a_request_joining_a_busy_engine_waits_the_residual_the_step_scheduled_ahead_and_its_prefill() {
    for offset_ns in [MS, 5 * MS, 9_500 * US] {
        let join_ns = 24 * MS + offset_ns;
        let expected_ns = (STEP_END_NS - join_ns) + DECODE_STEP_NS + PREFILL_STEP_NS + COSTS_NS;
        let got_ns = probe_ttft_ns(1, 1000, join_ns);
        assert_eq!(
            got_ns, expected_ns,
            "joining {offset_ns} ns into a step: TTFT = residual + one step + prefill + costs; \
             expected {expected_ns} ns, got {got_ns} ns"
        );
    }
}

#[test]
fn each_step_scheduled_ahead_adds_one_step_to_ttft_on_a_busy_engine() {
    let join_ns = 29 * MS;
    for ahead in [0, 1, 2] {
        let expected_ns = (STEP_END_NS - join_ns)
            + u64::from(ahead) * DECODE_STEP_NS
            + PREFILL_STEP_NS
            + COSTS_NS;
        let got_ns = probe_ttft_ns(ahead, 1000, join_ns);
        assert_eq!(
            got_ns, expected_ns,
            "schedule_ahead_steps = {ahead}: expected {expected_ns} ns, got {got_ns} ns"
        );
    }
}

#[test]
fn a_request_reaching_an_idle_engine_pays_only_its_prefill_and_the_costs() {
    for ahead in [0, 1, 2] {
        let got = records(&scenario(ahead), &trace(&[0], &[1]));
        let expected_ns = PREFILL_STEP_NS + COSTS_NS;
        assert_eq!(
            got[0].ttft_ns(),
            expected_ns,
            "schedule_ahead_steps = {ahead}: expected {expected_ns} ns, got {} ns",
            got[0].ttft_ns()
        );
    }
}

#[test]
fn a_request_held_back_is_scheduled_at_once_when_the_engine_would_otherwise_go_idle() {
    // The background's third and last token is sampled at 34 ms: the plan then would be empty.
    let join_ns = 29 * MS;
    let expected_ns = (STEP_END_NS - join_ns) + PREFILL_STEP_NS + COSTS_NS;
    let got_ns = probe_ttft_ns(1, 3, join_ns);
    assert_eq!(
        got_ns, expected_ns,
        "expected {expected_ns} ns (no step ahead), got {got_ns} ns"
    );
}

#[test]
fn a_request_reaching_a_busy_engine_joins_at_the_end_of_the_running_step() {
    for ahead in [0, 1] {
        let sends = [0, 26 * MS];
        let got = records(&scenario(ahead), &trace(&sends, &[1000, 1]));
        let expected_ns = STEP_END_NS + u64::from(ahead) * DECODE_STEP_NS;
        assert_eq!(
            got[1].exec_start_ns, expected_ns,
            "schedule_ahead_steps = {ahead}: joined at 29 ms, expected its prefill to start \
             at {expected_ns} ns, got {} ns",
            got[1].exec_start_ns
        );
    }
}

#[test]
fn detokenization_leaves_tpot_alone_and_e2e_pays_it_once_after_the_last_token_with_the_close() {
    let bare = Scenario::from_toml_str(
        "[network]\nlatency = { kind = \"constant\", one_way = \"1ms\" }\n\
         [preprocess]\nworkers = 1\nper_input_token = \"20us\"\n\
         [batcher]\nkind = \"continuous\"\ncuda_graph_sizes = []\n[kv_cache]\nnum_gpu_blocks = 1000\n\
         [step_time]\nkind = \"linear\"\nbase = \"10ms\"\nper_prefill_token = \"10us\"\n",
    )
    .expect("valid");
    let one = trace(&[0], &[5]);
    let (with, without) = (records(&scenario(1), &one)[0], records(&bare, &one)[0]);
    assert_eq!(
        (with.tpot_ns(), without.tpot_ns()),
        (Some(DECODE_STEP_NS), Some(DECODE_STEP_NS)),
        "TPOT is the decode step, with and without detokenization"
    );
    // Five tokens sampled at 14, 24, ..., 54 ms; the last leaves 500 us later, the stream
    // closes 3 ms after that, and the response is at the client 1 ms later.
    let last_token_ns = 54 * MS;
    assert_eq!(with.exec_end_ns, last_token_ns);
    let expected_e2e_ns = last_token_ns + 500 * US + 3 * MS + MS;
    assert_eq!(
        with.latency_ns(),
        expected_e2e_ns,
        "e2e = last token + one detokenization + the close + the downlink; expected \
         {expected_e2e_ns} ns, got {} ns",
        with.latency_ns()
    );
    assert_eq!(
        with.latency_ns() - without.latency_ns(),
        500 * US + 3 * MS,
        "detokenization and the close add once to e2e"
    );
    assert_eq!(
        with.ttft_ns() - without.ttft_ns(),
        500 * US,
        "the first token pays one detokenization, not the close"
    );
}

#[test]
fn runs_of_the_pipeline_are_deterministic() {
    let sends: Vec<u64> = (0..40).map(|i| i * 7_300 * US).collect();
    let outputs: Vec<u32> = (0..40).map(|i| 1 + (i * 13) % 37).collect();
    let t = trace(&sends, &outputs);
    assert_eq!(records(&scenario(1), &t), records(&scenario(1), &t));
}
