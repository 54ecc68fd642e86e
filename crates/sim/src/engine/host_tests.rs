//! The host's cores (`[host]`) in closed form: one FIFO of jobs per instance, shared by requests
//! on their way in and responses on their way out; client timeouts while a job waits for a
//! core (it leaves a tombstone) and while a core runs it (the core finishes it first).

use super::*;
use crate::build::scenario_runs::simulate_with_requests;
use crate::record::{NONE, RequestRecord};
use crate::scenario::Scenario;
use capsim_trace::Columns;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

const FAILED_TIMEOUT: Outcome = Outcome::Failed(FailReason::Timeout);

/// A trace of requests sent at `sends_ns`, with these input and output tokens.
fn trace(sends_ns: &[u64], input_tokens: &[u32], output_tokens: &[u32]) -> Trace {
    Trace::from_columns(Columns {
        arrival_ns: sends_ns.to_vec(),
        input_tokens: input_tokens.to_vec(),
        output_tokens: Some(output_tokens.to_vec()),
        ..Columns::default()
    })
    .expect("a valid trace")
}

/// The run and its records, by trace row; the engine has checked that every request is
/// accounted for once.
fn run(scenario: &str, trace: &Trace) -> (Run, Vec<RequestRecord>) {
    let scenario = Scenario::from_toml_str(scenario).expect("a valid scenario");
    let (run, log) = simulate_with_requests(&scenario, trace, &RunOptions::default())
        .expect("the run completes");
    assert!(run.summary.requests.adds_up(), "{:?}", run.summary.requests);
    assert_eq!(run.summary.requests.total, trace.len() as u64);
    (run, log.records().to_vec())
}

/// One core. A request's way-in job is 0.5 ms of the host's work, 0.1 ms per input token and
/// 0.5 ms of pre-processing: 2 ms with 10 tokens. A response's way-out job is 2 ms of the host's
/// work and 1 ms of post-processing: 3 ms. A batch (of one) takes 1 ms.
const SHARED: &str = "[host]\ncores = 1\nrequest = \"0.5ms\"\nrequest_per_input_token = \"100us\"\n\
     response = \"2ms\"\n\
     [preprocess]\nbase = \"0.5ms\"\n\
     [service]\nkind = \"constant\"\ntime = \"1ms\"\n\
     [postprocess]\nbase = \"1ms\"\n";

/// r0 (sent at 0) takes the core 0-2 ms, computes 2-3 ms, and its response waits behind r1's
/// way-in job (2-4 ms), then runs 4-7 ms. r2, sent at 4.5 ms, waits behind r0's response and
/// runs its way in 7-9 ms, ahead of r1's response, which joined the line at 5 ms and runs
/// 9-12 ms; r2's response runs 12-15 ms.
#[test]
fn a_response_waits_behind_request_jobs_on_one_core_and_e2e_is_the_timeline() {
    let t = trace(&[0, MS, 4_500 * US], &[10; 3], &[1; 3]);
    let (_, r) = run(SHARED, &t);
    let timeline: Vec<[u64; 5]> = r
        .iter()
        .map(|r| {
            [
                r.queued_ns,
                r.exec_start_ns,
                r.exec_end_ns,
                r.postprocessed_ns,
                r.latency_ns(),
            ]
        })
        .collect();
    assert_eq!(
        timeline,
        vec![
            [2 * MS, 2 * MS, 3 * MS, 7 * MS, 7 * MS],
            [4 * MS, 4 * MS, 5 * MS, 12 * MS, 11 * MS],
            [9 * MS, 9 * MS, 10 * MS, 15 * MS, 10_500 * US],
        ],
        "[queued, exec start, exec end, post-processed, e2e] of each request"
    );
    assert!(r.iter().all(|r| r.outcome == Outcome::Completed));
}

/// The same costs without `[host]` (a pre-processing worker, post-processing in parallel): no
/// response waits for a core, so nothing waits behind one either.
#[test]
fn without_a_host_the_same_costs_do_not_share_a_queue() {
    let s = "[preprocess]\nworkers = 1\nbase = \"1ms\"\nper_input_token = \"100us\"\n\
             [service]\nkind = \"constant\"\ntime = \"1ms\"\n\
             [postprocess]\nbase = \"3ms\"\n";
    let t = trace(&[0, MS, 4_500 * US], &[10; 3], &[1; 3]);
    let (_, r) = run(s, &t);
    let e2e: Vec<u64> = r.iter().map(RequestRecord::latency_ns).collect();
    assert_eq!(e2e, vec![6 * MS, 7 * MS, 6 * MS]);
}

/// A job that takes no CPU time takes no core: with only a response cost, requests go straight
/// to the queue, and a host with no cost at all changes nothing.
#[test]
fn a_job_of_no_cpu_time_takes_no_core() {
    let t = trace(&[0, MS, 4_500 * US], &[10; 3], &[1; 3]);
    let bare = "[service]\nkind = \"constant\"\ntime = \"1ms\"\n";
    let (_, without) = run(bare, &t);
    let (_, idle_host) = run(&format!("[host]\ncores = 1\n{bare}"), &t);
    assert_eq!(idle_host, without, "a host without costs changes nothing");
    let (_, r) = run(
        &format!("[host]\ncores = 1\nresponse = \"2ms\"\n{bare}"),
        &t,
    );
    let queued: Vec<u64> = r.iter().map(|r| r.queued_ns).collect();
    assert_eq!(queued, vec![0, MS, 4_500 * US], "no way-in job");
    let post: Vec<u64> = r.iter().map(|r| r.postprocessed_ns).collect();
    assert_eq!(post, vec![3 * MS, 5 * MS, 7_500 * US]);
}

/// Way out, one core, 50 ms per response, 10 ms batches, clients giving up after 100 ms. r0
/// computes 0-10 ms and its response runs 10-60 ms. r1 computes 10-20 ms; its response gets the
/// core at 60 ms and its client gives up at 105 ms: the core finishes it, to 110 ms. r2's
/// response waits from 30 ms and its client gives up at 108 ms: it leaves the line. r3's
/// response, waiting from 80 ms, gets the core at 110 ms (after r2's tombstone) and completes at
/// 160 ms. Had the core been freed at 105 ms, r2 would have taken it and r3 failed.
#[test]
fn a_response_abandoned_on_a_core_holds_it_to_the_end_and_one_abandoned_waiting_is_skipped() {
    let s = "[load]\nclient_timeout = \"100ms\"\n\
             [host]\ncores = 1\nresponse = \"50ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let t = trace(&[0, 5 * MS, 8 * MS, 70 * MS], &[10; 4], &[1; 4]);
    let (run, r) = run(s, &t);
    let ends: Vec<(Outcome, u64, u64)> = r
        .iter()
        .map(|r| (r.outcome, r.exec_end_ns, r.response_ns))
        .collect();
    assert_eq!(
        ends,
        vec![
            (Outcome::Completed, 10 * MS, 60 * MS),
            (FAILED_TIMEOUT, 20 * MS, 105 * MS),
            (FAILED_TIMEOUT, 30 * MS, 108 * MS),
            (Outcome::Completed, 80 * MS, 160 * MS),
        ],
        "(outcome, exec end, response) of each request"
    );
    let counts = &run.summary.requests;
    assert_eq!((counts.completed, counts.failed), (2, 2), "{counts:?}");
}

/// Way in, one core, 50 ms per request, clients giving up after 90 ms. r0 runs 0-50 ms and
/// completes at 60 ms. r1 gets the core at 50 ms and its client gives up at 91 ms: the core
/// finishes its job, to 100 ms. r2, waiting, gives up at 92 ms and leaves the line. r3 (sent at
/// 95 ms) gets the core at 100 ms, is queued at 150 ms and completes at 160 ms.
#[test]
fn a_request_abandoned_on_a_core_holds_it_to_the_end_and_one_abandoned_waiting_is_skipped() {
    let s = "[load]\nclient_timeout = \"90ms\"\n\
             [host]\ncores = 1\nrequest = \"50ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let t = trace(&[0, MS, 2 * MS, 95 * MS], &[10; 4], &[1; 4]);
    let (run, r) = run(s, &t);
    let ends: Vec<(Outcome, u64, u64)> = r
        .iter()
        .map(|r| (r.outcome, r.queued_ns, r.response_ns))
        .collect();
    assert_eq!(
        ends,
        vec![
            (Outcome::Completed, 50 * MS, 60 * MS),
            (FAILED_TIMEOUT, NONE, 91 * MS),
            (FAILED_TIMEOUT, NONE, 92 * MS),
            (Outcome::Completed, 150 * MS, 160 * MS),
        ],
        "(outcome, queued, response) of each request"
    );
    assert_eq!(run.summary.requests.failed, 2);
}

/// An overloaded host with client timeouts, several instances and batches: every request is
/// accounted for once, each failure at exactly its timeout, and two runs give the same records.
#[test]
fn an_overloaded_host_with_client_timeouts_accounts_for_every_request_deterministically() {
    let s = "instances = 2\n[load]\nclient_timeout = \"40ms\"\n\
             [gateway]\nload_balancing = \"join_shortest_queue\"\n\
             [host]\ncores = 2\nrequest = \"1ms\"\nrequest_per_input_token = \"10us\"\n\
             response = \"500us\"\n\
             [preprocess]\nper_input_token = \"5us\"\n\
             [batcher]\nmax_batch_size = 4\nprefetch = false\nmax_queue_delay = \"1ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"2ms\"\n\
             [postprocess]\nper_output_token = \"20us\"\n";
    let n = 2_000usize;
    let sends: Vec<u64> = (0..n as u64).map(|i| i * 400 * US).collect();
    let inputs: Vec<u32> = (0..n as u32).map(|i| 20 + (i * 37) % 300).collect();
    let outputs: Vec<u32> = (0..n as u32).map(|i| 1 + (i * 53) % 100).collect();
    let t = trace(&sends, &inputs, &outputs);
    let (first, records) = run(s, &t);
    let counts = &first.summary.requests;
    assert!(counts.failed > 0 && counts.completed > 0, "{counts:?}");
    for r in &records {
        let latency_ns = r.response_ns - r.arrival_ns;
        if r.outcome == FAILED_TIMEOUT {
            assert_eq!(latency_ns, 40 * MS, "{r:?}");
        } else {
            assert!(latency_ns < 40 * MS, "{r:?}");
        }
    }
    let (_, again) = run(s, &t);
    assert_eq!(records, again);
}

/// Compute that holds a core (`compute_cores`): one core, a way-in job of 1 ms, a batch (of
/// one) of 10 ms. r0 (sent at 0) runs its job 0-1 ms and computes 1-11 ms on the core; r1, sent
/// at 2 ms, waits for the core until r0's compute ends, runs its job 11-12 ms and computes
/// 12-22 ms. Without `compute_cores` its job runs 2-3 ms beside the compute and it waits in the
/// queue instead, computing 11-21 ms. With two cores the compute leaves one to the jobs.
#[test]
fn compute_that_holds_the_only_core_makes_a_requests_job_wait_for_it() {
    let t = trace(&[0, 2 * MS], &[10; 2], &[1; 2]);
    let costs = "request = \"1ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let e2e = |host: &str| -> Vec<[u64; 3]> {
        run(&format!("[host]\n{host}\n{costs}"), &t)
            .1
            .iter()
            .map(|r| [r.queued_ns, r.exec_start_ns, r.latency_ns()])
            .collect()
    };
    assert_eq!(
        e2e("cores = 1\ncompute_cores = 1"),
        vec![[MS, MS, 11 * MS], [12 * MS, 12 * MS, 20 * MS]],
        "[queued, exec start, e2e]: r1's job waits for the compute's core"
    );
    assert_eq!(
        e2e("cores = 1"),
        vec![[MS, MS, 11 * MS], [3 * MS, 11 * MS, 19 * MS]],
        "without compute_cores the job runs beside the compute"
    );
    assert_eq!(
        e2e("cores = 2\ncompute_cores = 1"),
        e2e("cores = 2"),
        "two cores: the compute holds one, the jobs run on the other"
    );
}

/// Jobs that waited for the compute's cores all start when it ends, as many as cores free up,
/// in the order they came: two cores, both held by compute (`compute_cores = 2`); r1 and r2
/// arrive during r0's compute (1-11 ms) and run their jobs side by side at 11-12 ms.
#[test]
fn the_cores_compute_frees_take_the_waiting_jobs_in_order() {
    let t = trace(&[0, 2 * MS, 3 * MS], &[10; 3], &[1; 3]);
    let s = "[host]\ncores = 2\ncompute_cores = 2\nrequest = \"1ms\"\n\
             [batcher]\nmax_batch_size = 4\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let (_, r) = run(s, &t);
    let queued: Vec<u64> = r.iter().map(|r| r.queued_ns).collect();
    assert_eq!(queued, vec![MS, 12 * MS, 12 * MS]);
    let starts: Vec<u64> = r.iter().map(|r| r.exec_start_ns).collect();
    assert_eq!(
        starts,
        vec![MS, 12 * MS, 22 * MS],
        "no queue delay: r1 computes as it is queued, r2 after it"
    );
}

/// More compute cores than the host has is refused with the key and the limit.
#[test]
fn compute_cores_above_the_hosts_cores_is_refused() {
    let err = Scenario::from_toml_str(
        "[host]\ncores = 2\ncompute_cores = 3\n[service]\nkind = \"constant\"\ntime = \"1ms\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("host.compute_cores") && err.contains("2 cores"),
        "{err}"
    );
}
