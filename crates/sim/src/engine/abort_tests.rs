//! Client timeouts (`load.client_timeout`): the attempt fails as `timeout` at its send plus the
//! timeout, wherever it is, and the server lets go of it (vLLM's abort frees its KV blocks).

use super::*;
use crate::build::scenario_runs::simulate_with_requests;
use crate::record::{NONE, RequestRecord};
use crate::scenario::Scenario;
use capsim_trace::Columns;

const MS: u64 = 1_000_000;

/// A trace of requests sent at `arrivals_ms`, with these input and output tokens.
fn trace(arrivals_ms: &[u64], input_tokens: &[u32], output_tokens: &[u32]) -> Trace {
    Trace::from_columns(Columns {
        arrival_ns: arrivals_ms.iter().map(|a| a * MS).collect(),
        input_tokens: input_tokens.to_vec(),
        output_tokens: Some(output_tokens.to_vec()),
        ..Columns::default()
    })
    .unwrap()
}

fn run(scenario: &str, trace: &Trace) -> (Run, Vec<RequestRecord>) {
    let scenario = Scenario::from_toml_str(scenario).unwrap();
    let (run, log) = simulate_with_requests(&scenario, trace, &RunOptions::default()).unwrap();
    (run, log.records().to_vec())
}

fn ms(ns: u64) -> Option<u64> {
    (ns != NONE).then_some(ns / MS)
}

const FAILED_TIMEOUT: Outcome = Outcome::Failed(FailReason::Timeout);

/// One continuous instance of 4 KV blocks of 16 tokens, a 10 ms step, timeseries every 1 ms.
/// A (sent at 0, prompt 16, 48 output tokens) fills all 4 blocks from its 33rd token on and
/// would finish at 480 ms; B (sent at 400 ms, prompt 32, 1 token) needs 2 blocks, so it waits
/// for A's. A's client gives up at 455 ms, inside the step of 450-460 ms.
const KV_BOUND: &str = "[load]\nclient_timeout = \"455ms\"\n\
     [batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 4\nblock_size = 16\n\
     [step_time]\nkind = \"linear\"\nbase = \"10ms\"\n[timeseries]\ninterval = \"1ms\"\n";

#[test]
fn a_request_timing_out_mid_decode_frees_its_kv_at_once_and_a_waiting_request_gets_in_sooner() {
    let t = trace(&[0, 400], &[16, 32], &[48, 1]);
    let (with, records) = run(KV_BOUND, &t);
    let (a, b) = (&records[0], &records[1]);
    assert_eq!(a.outcome, FAILED_TIMEOUT, "{a:?}");
    assert_eq!(
        ms(a.response_ns),
        Some(455),
        "A fails at its send + the timeout"
    );
    assert_eq!(ms(a.first_token_ns), Some(10), "A was decoding");
    assert_eq!(a.exec_end_ns, NONE, "A never got its last token");
    // The step running at the timeout ends at 460 ms and the next one admits B.
    assert_eq!(b.outcome, Outcome::Completed);
    assert_eq!(
        ms(b.exec_start_ns),
        Some(460),
        "B admitted at the step after the abort"
    );

    // Without the timeout B waits for A's last token, at 480 ms.
    let no_timeout = KV_BOUND.replace("client_timeout = \"455ms\"\n", "");
    let (_, records) = run(&no_timeout, &t);
    assert_eq!(records[0].outcome, Outcome::Completed);
    assert_eq!(ms(records[1].exec_start_ns), Some(480));

    // The KV blocks in use drop from all 4 to none at the timeout, not at the step's end.
    let ts = &with.timeseries;
    let kv_at = |at_ms: u64| {
        let row = ts.time_ns.iter().position(|&t| t == at_ms * MS).unwrap();
        ts.kv_utilization[row]
    };
    assert_eq!(
        (kv_at(454), kv_at(456)),
        (1.0, 0.0),
        "KV in use just before and after the timeout"
    );

    let counts = &with.summary.requests;
    assert_eq!(counts.failed, 1, "{counts:?}");
    assert_eq!(
        counts.failed_by_reason.get("timeout"),
        Some(&1),
        "{counts:?}"
    );
    assert_eq!(counts.completed + counts.failed, counts.total);
    assert_eq!(counts.total, 2);
    assert!(counts.adds_up());
    let llm = with.summary.llm.as_ref().unwrap();
    // A sampled 45 tokens (10 ms to 450 ms) before it was aborted, B one.
    assert_eq!(
        llm.output_tokens,
        45 + 1,
        "tokens sampled, the aborted ones' included"
    );
}

/// When the last request in the system is aborted in the middle of a step, the run ends at its
/// timeout: the step, which computes for no one now, samples nothing.
#[test]
fn a_run_whose_last_request_is_aborted_mid_step_ends_at_the_timeout() {
    let (run, r) = run(KV_BOUND, &trace(&[0], &[16], &[48]));
    assert_eq!(
        (r[0].outcome, ms(r[0].response_ns)),
        (FAILED_TIMEOUT, Some(455))
    );
    assert_eq!(run.summary.llm.as_ref().unwrap().output_tokens, 45);
    let last_row_ns = *run.timeseries.time_ns.last().unwrap();
    assert!(last_row_ns <= 455 * MS, "the run ended at {last_row_ns} ns");
}

/// One model instance without batching, 100 ms a request, clients giving up after 150 ms:
/// r0 completes at 100 ms; r1 runs from 100 ms and its client gives up at 151 ms, but the
/// batch runs on to 200 ms; r2 is still queued at 152 ms and leaves the queue; r3, sent at
/// 160 ms, gets the model instance only when r1's batch is over.
#[test]
fn a_request_timing_out_in_the_queue_leaves_it_and_a_computing_batch_runs_on() {
    let s = "[load]\nclient_timeout = \"150ms\"\n[batcher]\nmax_batch_size = 1\n\
             [service]\nkind = \"constant\"\ntime = \"100ms\"\n";
    let t = trace(&[0, 1, 2, 160], &[10; 4], &[1; 4]);
    let (run, r) = run(s, &t);
    let outcomes: Vec<Outcome> = r.iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        vec![
            Outcome::Completed,
            FAILED_TIMEOUT,
            FAILED_TIMEOUT,
            Outcome::Completed
        ]
    );
    assert_eq!(ms(r[1].exec_start_ns), Some(100));
    assert_eq!(
        (ms(r[1].exec_end_ns), ms(r[1].response_ns)),
        (None, Some(151))
    );
    assert_eq!(
        (ms(r[2].batch_formed_ns), ms(r[2].response_ns)),
        (None, Some(152))
    );
    assert_eq!(ms(r[3].exec_start_ns), Some(200), "r1's batch was not cut");
    assert_eq!(ms(r[3].response_ns), Some(300));
    let counts = &run.summary.requests;
    assert_eq!((counts.completed, counts.failed, counts.total), (2, 2, 4));
    assert!(counts.adds_up());
}

/// A 100 ms one-way network and a 50 ms client timeout: r0 fails at 50 ms on its way in. Its
/// ticket is free then and r1, sent at 60 ms, takes it: r0's arrival at the gateway at 100 ms
/// is stale and must not move r1 there (r1 fails on its way in too, at 110 ms).
#[test]
fn a_request_timing_out_on_its_way_in_fails_then_and_its_late_arrival_is_stale() {
    let s = "[load]\nclient_timeout = \"50ms\"\n\
             [network]\nlatency = { kind = \"constant\", one_way = \"100ms\" }\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let t = trace(&[0, 60], &[10; 2], &[1; 2]);
    let (run, r) = run(s, &t);
    assert_eq!(r[0].outcome, FAILED_TIMEOUT);
    assert_eq!((r[0].gateway_ns, ms(r[0].response_ns)), (NONE, Some(50)));
    assert_eq!(r[1].outcome, FAILED_TIMEOUT);
    assert_eq!((r[1].gateway_ns, ms(r[1].response_ns)), (NONE, Some(110)));
    assert_eq!(run.summary.requests.failed, 2);
    assert_eq!(run.summary.batches, 0, "no request reached a model");
}

/// With a 150 ms timeout the same request is computed (100-110 ms) and its response is on its
/// way back when the client gives up.
#[test]
fn a_request_timing_out_on_its_way_back_fails_at_its_timeout() {
    let s = "[load]\nclient_timeout = \"150ms\"\n\
             [network]\nlatency = { kind = \"constant\", one_way = \"100ms\" }\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let (run, r) = run(s, &trace(&[0], &[10], &[1]));
    assert_eq!(r[0].outcome, FAILED_TIMEOUT);
    assert_eq!(
        (
            ms(r[0].exec_end_ns),
            ms(r[0].postprocessed_ns),
            ms(r[0].response_ns)
        ),
        (Some(110), Some(110), Some(150))
    );
    assert_eq!(
        run.summary.requests.failed_by_reason.get("timeout"),
        Some(&1)
    );
}

/// A request whose response reached its client before the timeout is unaffected: the run
/// gives the same records with the timeout as without.
#[test]
fn a_timeout_after_the_response_is_complete_changes_nothing() {
    let s = "[network]\nlatency = { kind = \"constant\", one_way = \"5ms\" }\n\
             [postprocess]\nbase = \"3ms\"\n\
             [batcher]\nmax_batch_size = 4\nprefetch = false\nmax_queue_delay = \"2ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let t = trace(&[0, 1, 3, 20, 21], &[10; 5], &[1; 5]);
    let (_, without) = run(s, &t);
    let (_, with) = run(&format!("[load]\nclient_timeout = \"1s\"\n{s}"), &t);
    assert!(without.iter().all(|r| r.outcome == Outcome::Completed));
    assert_eq!(with, without);
}

/// A worker busy pre-processing a request whose client gave up stays busy until it is done
/// (tokenization is not interruptible); a request that gave up while waiting for the worker
/// is skipped. One worker, 20 ms per input token: r0 (10 tokens) holds it 0-200 ms and gives
/// up at 150 ms; r1 gives up waiting at 160 ms; r2 (1 token, sent at 170 ms) gets the worker at
/// 200 ms and is queued at 220 ms.
#[test]
fn an_abandoned_pre_processing_keeps_its_worker_to_the_end_and_a_waiting_one_is_skipped() {
    let s = "[load]\nclient_timeout = \"150ms\"\n\
             [preprocess]\nworkers = 1\nper_input_token = \"20ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let t = trace(&[0, 10, 170], &[10, 10, 1], &[1; 3]);
    let (run, r) = run(s, &t);
    assert_eq!(
        (r[0].outcome, ms(r[0].response_ns), r[0].queued_ns),
        (FAILED_TIMEOUT, Some(150), NONE)
    );
    assert_eq!(
        (r[1].outcome, ms(r[1].response_ns), r[1].queued_ns),
        (FAILED_TIMEOUT, Some(160), NONE)
    );
    assert_eq!(r[2].outcome, Outcome::Completed);
    assert_eq!(
        ms(r[2].queued_ns),
        Some(220),
        "the worker was busy until 200 ms"
    );
    assert!(run.summary.requests.adds_up());
}

/// `retry.on = ["client_timeout"]` sends a timed-out attempt again; the default list does not.
#[test]
fn a_client_timeout_is_retried_only_when_retry_on_lists_it() {
    let s = "[load]\nclient_timeout = \"50ms\"\n\
             [network]\nlatency = { kind = \"constant\", one_way = \"100ms\" }\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n\
             [retry]\nmax_attempts = 2\nbackoff = \"10ms\"\n";
    let t = trace(&[0], &[10], &[1]);
    let (_, default_on) = run(s, &t);
    assert_eq!(default_on.len(), 1, "{default_on:?}");
    let (run, listed) = run(&format!("{s}on = [\"client_timeout\"]\n"), &t);
    let attempts: Vec<(u16, Option<u64>, Option<u64>)> = listed
        .iter()
        .map(|r| (r.attempt, ms(r.arrival_ns), ms(r.response_ns)))
        .collect();
    // The retry is sent 10 ms after the first attempt failed, and times out 50 ms later.
    assert_eq!(
        attempts,
        vec![(1, Some(0), Some(50)), (2, Some(60), Some(110))]
    );
    assert_eq!(run.summary.requests.retries, 1);
}

/// Overloaded continuous batching with client timeouts: two runs from the same seed give the
/// same records, byte for byte in requests.parquet, and every request is accounted for.
#[test]
fn runs_with_client_timeouts_are_deterministic_and_account_for_every_request() {
    let s = "[load]\nclient_timeout = \"300ms\"\n\
             [network]\nlatency = { kind = \"lognormal\", median = \"2ms\", p99 = \"20ms\" }\n\
             [preprocess]\nworkers = 2\nper_input_token = \"10us\"\n\
             [batcher]\nkind = \"continuous\"\nmax_num_seqs = 8\n\
             [kv_cache]\nnum_gpu_blocks = 64\nenable_prefix_caching = true\n\
             [step_time]\nkind = \"linear\"\nbase = \"5ms\"\nper_prefill_token = \"20us\"\n\
             [postprocess]\nbase = \"1ms\"\n";
    let n = 300usize;
    let arrivals: Vec<u64> = (0..n as u64).map(|i| i * 3).collect();
    let inputs: Vec<u32> = (0..n as u32).map(|i| 50 + (i * 37) % 300).collect();
    let outputs: Vec<u32> = (0..n as u32).map(|i| 5 + (i * 53) % 120).collect();
    let t = trace(&arrivals, &inputs, &outputs);
    let scenario = Scenario::from_toml_str(s).unwrap();
    let options = RunOptions {
        seed: 11,
        ..RunOptions::default()
    };
    let dir = std::env::temp_dir().join(format!("capsim-abort-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for k in 0..2 {
        let (run, log) = simulate_with_requests(&scenario, &t, &options).unwrap();
        let counts = &run.summary.requests;
        assert!(
            counts.failed > 0,
            "the load makes clients give up: {counts:?}"
        );
        assert!(counts.completed > 0, "{counts:?}");
        assert!(counts.adds_up() && counts.total == n as u64, "{counts:?}");
        for r in log.records() {
            if r.outcome == FAILED_TIMEOUT {
                assert_eq!(r.response_ns - r.arrival_ns, 300 * MS, "{r:?}");
            } else {
                assert!(r.response_ns - r.arrival_ns < 300 * MS, "{r:?}");
            }
        }
        let path = dir.join(format!("requests-{k}.parquet"));
        crate::output::write_requests_parquet(&path, log.records(), &["default".to_string()])
            .unwrap();
        files.push(std::fs::read(&path).unwrap());
    }
    std::fs::remove_dir_all(&dir).ok();
    assert!(
        files[0] == files[1],
        "requests.parquet differs between two runs of one seed"
    );
}
