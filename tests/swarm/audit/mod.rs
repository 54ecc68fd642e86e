//! The auditor: one function per rule, named after it, in a module per rule group (the groups
//! of the header of `main.rs`). A rule returns what broke it (the request or row, and the values);
//! [`audit`] only calls the rules in order and names each violation by its rule's path.
//!
//! Record rules are functions of one record (`fn(&Case, &Rec)`), as a `RecordSink` would call
//! them; they read the written `requests.parquet` instead, since the swarm tests the `capsim`
//! binary end to end and an in-process run per case would only rebuild the same rows at the cost
//! of a second run. Run rules need every record (peaks, batches, attempts, summary.json).

mod accounting;
mod batches;
mod continuous;
mod determinism;
mod gateway;
mod load;
mod order;
mod queues;
mod retries;
mod routing;

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use crate::case::{Batching, Case, Dynamic, Pool};
use crate::records::{Rec, present};

/// A broken rule: the rule's path (`group::rule`) and the request or row and values that broke it.
pub struct Violation {
    pub rule: &'static str,
    pub what: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule, self.what)
    }
}

/// A rule of one record: what broke it, if the record breaks it.
type RecordRule = fn(&Case, &Rec) -> Option<String>;

/// A rule of the whole run: everything that broke it.
type RunRule = fn(&Run) -> Vec<String>;

/// Each rule with its path as written, so a violation names the function that found it.
macro_rules! rules {
    ($($rule:path),* $(,)?) => { &[$((stringify!($rule), $rule)),*] };
}

/// The rules of one record, in the order they are checked on each record.
const RECORD_RULES: &[(&str, RecordRule)] = rules![
    order::stages_in_order,
    order::arrival_and_response_present,
    order::latency_is_response_minus_arrival,
    order::cache_hit_skips_the_pool,
    order::completion_went_through_every_stage,
    order::rejection_stages_fit_the_reason,
    order::timeout_left_from_the_queue,
    order::outcome_is_known,
    order::first_token_only_in_llm_pools,
    order::ttft_follows_from_the_times,
    order::tpot_follows_from_the_times,
    order::uplink_takes_the_network_latency,
    order::downlink_takes_the_network_latency,
    accounting::sizes_are_the_row_cut_to_the_limits,
    gateway::cache_latency_is_exact,
    gateway::overhead_is_exact,
    gateway::rejections_name_set_limits,
    routing::instance_exists,
    routing::model_instance_exists,
    routing::pool_follows_model_then_class,
    batches::no_start_before_the_cold_start,
    batches::preprocess_takes_at_least_its_time,
    batches::postprocess_takes_its_time,
    batches::not_formed_in_a_pause,
    batches::computes_after_forming,
    continuous::no_batch_id,
    continuous::completed_with_a_first_token,
    continuous::completed_within_the_kv_cache,
    continuous::completed_within_the_token_budget,
    queues::timed_out_after_exactly_the_timeout,
    queues::batched_within_the_timeout,
];

/// The rules of the whole run, in the order they are checked.
const RUN_RULES: &[(&str, RunRule)] = rules![
    accounting::every_row_has_records,
    accounting::attempts_are_contiguous,
    accounting::only_retryable_attempts_retried,
    accounting::gave_up_only_when_done,
    retries::at_most_max_attempts,
    retries::backoff_is_exact,
    retries::client_kept_across_attempts,
    load::open_loop_sends_at_the_trace_arrival,
    load::clients_within_concurrency,
    load::rows_sent_in_order,
    load::think_time_between_requests,
    load::in_flight_within_concurrency,
    gateway::in_flight_within_max_in_flight,
    gateway::token_bucket_never_beaten,
    queues::within_max_queue_size,
    queues::delay_never_times_out,
    batches::only_in_dynamic_pools,
    batches::size_matches_members,
    batches::within_max_batch_size,
    batches::members_share_place_and_times,
    batches::deterministic_time_is_exact,
    batches::first_batch_waits_the_dispatch_latency,
    batches::no_overlap_on_a_model_instance,
    batches::computes_after_dispatch_or_at_release,
    accounting::summary_counts_match,
    accounting::summary_reasons_match,
    accounting::summary_end_to_end_count,
    accounting::summary_end_to_end_max,
    accounting::summary_end_s,
    accounting::summary_batch_sizes,
    accounting::summary_batches,
    accounting::summary_batches_per_model_instance,
    accounting::summary_llm_output_tokens,
    continuous::steps_within_max_num_seqs,
    continuous::mean_step_tokens_within_budget,
];

/// Every rule broken by a run's records and `summary.json`: the record rules on each record in
/// turn, then the run rules.
pub fn audit(case: &Case, records: &[Rec], summary: &serde_json::Value) -> Vec<Violation> {
    let mut broken = Vec::new();
    for r in records {
        for &(rule, check) in RECORD_RULES {
            if let Some(what) = check(case, r) {
                broken.push(Violation { rule, what });
            }
        }
    }
    let run = Run::new(case, records, summary);
    for &(rule, check) in RUN_RULES {
        broken.extend(check(&run).into_iter().map(|what| Violation { rule, what }));
    }
    broken
}

/// Whether a rerun wrote the same bytes as the first run (the determinism rule).
pub fn audit_rerun(first: &Path, again: &Path) -> Vec<Violation> {
    determinism::rerun_is_byte_identical(first, again)
        .into_iter()
        .map(|what| Violation {
            rule: "determinism::rerun_is_byte_identical",
            what,
        })
        .collect()
}

/// `what()` when `ok` is false.
fn check(ok: bool, what: impl FnOnce() -> String) -> Option<String> {
    (!ok).then(what)
}

/// The record's name in a violation.
fn id(r: &Rec) -> String {
    format!("request {} attempt {}", r.request, r.attempt)
}

/// The pool a record went to, if it reached one.
fn pool_of<'a>(case: &'a Case, r: &Rec) -> Option<&'a Pool> {
    let name = r.pool.as_deref()?;
    case.spec.pools.iter().find(|p| p.name == name)
}

/// The dynamic batcher of a record's pool, if that is its pool's batcher.
fn dynamic_of<'a>(case: &'a Case, r: &Rec) -> Option<&'a Dynamic> {
    match &pool_of(case, r)?.batching {
        Batching::Dynamic(d) => Some(d),
        Batching::Continuous(_) => None,
    }
}

/// The input and output tokens a record should hold: its trace row's, cut to its pool's limits
/// once it reached the pool (routed, not answered by the cache).
fn sizes_seen(case: &Case, r: &Rec) -> (u64, u64) {
    let row = r.request as usize;
    let (input, output) = (case.trace.input_tokens[row], case.trace.output_tokens[row]);
    match pool_of(case, r) {
        Some(p) if !r.cache_hit => (
            u64::from(input.min(p.max_input_tokens.unwrap_or(u32::MAX))),
            u64::from(output.min(p.max_output_tokens.unwrap_or(u32::MAX))),
        ),
        _ => (u64::from(input), u64::from(output)),
    }
}

/// The most intervals `[start, end)` open at once (ends before starts at equal times).
fn peak_overlap(intervals: impl Iterator<Item = (u64, u64)>) -> (usize, u64) {
    let mut edges: Vec<(u64, i8)> = Vec::new();
    for (start, end) in intervals {
        edges.push((start, 1));
        edges.push((end, -1));
    }
    edges.sort_unstable();
    let (mut open, mut peak, mut at) = (0i64, 0i64, 0u64);
    for (t, d) in edges {
        open += i64::from(d);
        if open > peak {
            (peak, at) = (open, t);
        }
    }
    (peak as usize, at)
}

/// Pool, instance, model instance.
type ModelInstanceKey = (String, u64, u64);

/// One dynamic batch on its model instance (ordered by compute start, then the rest).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct BatchRun {
    start_ns: u64,
    formed_ns: u64,
    end_ns: u64,
    /// When its model instance is free again (compute end plus the release latency).
    release_ns: u64,
    batch: u64,
    /// Whether it started other than the dispatch latency after its formation.
    skipped_dispatch: bool,
}

/// A run under audit: the case, its records and summary, and the records indexed by row and
/// by batch.
struct Run<'a> {
    case: &'a Case,
    records: &'a [Rec],
    summary: &'a serde_json::Value,
    /// Each trace row's attempts, by attempt number.
    by_request: BTreeMap<u64, Vec<&'a Rec>>,
    /// Each batch's members, by batch id.
    batches: BTreeMap<u64, Vec<&'a Rec>>,
    /// The batches of each model instance of a dynamic pool, in order.
    per_model_instance: BTreeMap<ModelInstanceKey, Vec<BatchRun>>,
}

impl<'a> Run<'a> {
    fn new(case: &'a Case, records: &'a [Rec], summary: &'a serde_json::Value) -> Self {
        let mut by_request: BTreeMap<u64, Vec<&Rec>> = BTreeMap::new();
        for r in records {
            by_request.entry(r.request).or_default().push(r);
        }
        for attempts in by_request.values_mut() {
            attempts.sort_by_key(|r| r.attempt);
        }
        let mut batches: BTreeMap<u64, Vec<&Rec>> = BTreeMap::new();
        for r in records.iter().filter(|r| present(r.batch_id)) {
            batches.entry(r.batch_id).or_default().push(r);
        }
        let mut run = Run {
            case,
            records,
            summary,
            by_request,
            batches,
            per_model_instance: BTreeMap::new(),
        };
        run.per_model_instance = run.model_instance_runs();
        run
    }

    /// Each dynamic batch with its members and its pool's batcher, by batch id.
    fn dynamic_batches(&self) -> impl Iterator<Item = (u64, &[&'a Rec], &'a Dynamic)> + '_ {
        self.batches.iter().filter_map(|(&batch, members)| {
            let d = dynamic_of(self.case, members[0])?;
            Some((batch, members.as_slice(), d))
        })
    }

    /// The dynamic batches of each model instance, sorted.
    fn model_instance_runs(&self) -> BTreeMap<ModelInstanceKey, Vec<BatchRun>> {
        let mut runs: BTreeMap<ModelInstanceKey, Vec<BatchRun>> = BTreeMap::new();
        for (batch, members, d) in self.dynamic_batches() {
            let first = members[0];
            let size = members.len() as u64;
            let key = (
                first.pool.clone().unwrap_or_default(),
                first.instance,
                first.model_instance,
            );
            // The model instance is held from the batch's formation (its dispatch latency) to
            // its release; a batch that skipped the dispatch latency must have been taken at
            // the release of the one before.
            runs.entry(key).or_default().push(BatchRun {
                start_ns: first.exec_start_ns,
                formed_ns: first.batch_formed_ns,
                end_ns: first.exec_end_ns,
                release_ns: first.exec_end_ns.saturating_add(d.release_ns(size)),
                batch,
                skipped_dispatch: first.exec_start_ns
                    != d.compute_start_ns(first.batch_formed_ns, false),
            });
        }
        for batch_runs in runs.values_mut() {
            batch_runs.sort_unstable();
        }
        runs
    }

    /// Whether the scenario retries a record's outcome.
    fn retryable(&self, r: &Rec) -> bool {
        self.case
            .spec
            .retry
            .as_ref()
            .is_some_and(|retry| match r.outcome.as_str() {
                "rejected" => retry.on_rejected,
                "timed_out" => retry.on_timed_out,
                _ => false,
            })
    }

    /// The most attempts a row may make.
    fn max_attempts(&self) -> u64 {
        self.case
            .spec
            .retry
            .as_ref()
            .map_or(1, |r| u64::from(r.max_attempts))
    }

    /// Whether a pool of the scenario batches continuously.
    fn has_continuous_pool(&self) -> bool {
        self.case
            .spec
            .pools
            .iter()
            .any(|p| p.continuous().is_some())
    }
}
