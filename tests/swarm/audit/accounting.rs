//! Accounting: every trace row appears, attempts 1..n contiguous, only the last may complete,
//! every earlier one ended in an outcome `retry.on` retries, a last failed attempt was not
//! retryable or used up `max_attempts`, each attempt holds its row's sizes (cut to its pool's
//! token limits once routed); `summary.json`'s totals, outcomes, reasons, retries, cache hits,
//! truncations, batches (per size and per model instance), LLM output tokens, end-to-end count
//! and maximum, and `end_s` match the records.

use std::collections::BTreeMap;

use super::{Run, check, id, sizes_seen};
use crate::case::Case;
use crate::records::{Rec, present};

pub fn sizes_are_the_row_cut_to_the_limits(case: &Case, r: &Rec) -> Option<String> {
    let (input, output) = sizes_seen(case, r);
    check(r.input_tokens == input && r.output_tokens == output, || {
        format!(
            "{} has {} and {} tokens, its row and pool's limits {input} and {output}",
            id(r),
            r.input_tokens,
            r.output_tokens
        )
    })
}

/// Each trace row has records, and no record names a row past the trace.
pub fn every_row_has_records(run: &Run) -> Vec<String> {
    let rows = run.case.trace.arrival_ns.len() as u64;
    let by_request = &run.by_request;
    check(
        by_request.len() as u64 == rows
            && by_request.keys().next_back().is_none_or(|&k| k == rows - 1),
        || format!("{} of {rows} trace rows have records", by_request.len()),
    )
    .into_iter()
    .collect()
}

/// A row's attempts are numbered 1..n.
pub fn attempts_are_contiguous(run: &Run) -> Vec<String> {
    run.by_request
        .iter()
        .filter_map(|(request, attempts)| {
            let numbers: Vec<u64> = attempts.iter().map(|r| r.attempt).collect();
            check(numbers.iter().copied().eq(1..=numbers.len() as u64), || {
                format!("request {request} has attempts {numbers:?}")
            })
        })
        .collect()
}

/// Every attempt but the last ended in an outcome the scenario retries.
pub fn only_retryable_attempts_retried(run: &Run) -> Vec<String> {
    let mut broken = Vec::new();
    for (request, attempts) in &run.by_request {
        for last in &attempts[..attempts.len() - 1] {
            broken.extend(check(run.retryable(last), || {
                format!(
                    "request {request} attempt {} ({}) was retried",
                    last.attempt, last.outcome
                )
            }));
        }
    }
    broken
}

/// A row's last attempt completed, was not retryable, or used up `max_attempts`.
pub fn gave_up_only_when_done(run: &Run) -> Vec<String> {
    let max_attempts = run.max_attempts();
    run.by_request
        .iter()
        .filter_map(|(request, attempts)| {
            let last = attempts[attempts.len() - 1];
            check(
                last.outcome == "completed" || !run.retryable(last) || last.attempt == max_attempts,
                || {
                    format!(
                        "request {request} gave up after attempt {} ({})",
                        last.attempt, last.outcome
                    )
                },
            )
        })
        .collect()
}

/// summary.json's request counts: total, outcomes, cache hits, retries, truncations.
pub fn summary_counts_match(run: &Run) -> Vec<String> {
    let (records, trace) = (run.records, &run.case.trace);
    let counts = &run.summary["requests"];
    let count = |pred: &dyn Fn(&Rec) -> bool| records.iter().filter(|r| pred(r)).count() as u64;
    let expect = [
        ("total", records.len() as u64),
        ("completed", count(&|r| r.outcome == "completed")),
        ("cache_hits", count(&|r| r.cache_hit)),
        ("rejected", count(&|r| r.outcome == "rejected")),
        ("timed_out", count(&|r| r.outcome == "timed_out")),
        ("retries", count(&|r| r.attempt > 1)),
        (
            "truncated_input",
            count(&|r| {
                sizes_seen(run.case, r).0 < u64::from(trace.input_tokens[r.request as usize])
            }),
        ),
        (
            "truncated_output",
            count(&|r| {
                sizes_seen(run.case, r).1 < u64::from(trace.output_tokens[r.request as usize])
            }),
        ),
    ];
    expect
        .into_iter()
        .filter_map(|(key, value)| {
            // Counts of none may be left out.
            let written = counts[key].as_u64().or((value == 0).then_some(0));
            check(written == Some(value), || {
                format!(
                    "requests.{key} is {}, the records count {value}",
                    counts[key]
                )
            })
        })
        .collect()
}

pub fn summary_reasons_match(run: &Run) -> Vec<String> {
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for r in run.records {
        if let Some(reason) = &r.reject_reason {
            *reasons.entry(reason.clone()).or_default() += 1;
        }
    }
    let summary_reasons: BTreeMap<String, u64> = run.summary["requests"]["rejected_by_reason"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    check(summary_reasons == reasons, || {
        format!("rejected_by_reason {summary_reasons:?}, the records {reasons:?}")
    })
    .into_iter()
    .collect()
}

/// The completions summary.json's latencies describe: those whose first attempt was sent in
/// the run's steady window when the summary states one, all of them otherwise.
fn measured_completions<'a>(run: &Run<'a>) -> Vec<&'a Rec> {
    let window_ns = run.summary["steady_window"].as_object().map(|w| {
        let ns = |key: &str| (w[key].as_f64().unwrap_or(f64::NAN) * 1e9).round() as u64;
        ns("from_s")..ns("to_s")
    });
    let first_sends: BTreeMap<u64, u64> = run
        .records
        .iter()
        .filter(|r| r.attempt == 1)
        .map(|r| (r.request, r.arrival_ns))
        .collect();
    let measured = |r: &Rec| {
        window_ns.as_ref().is_none_or(|window| {
            first_sends
                .get(&r.request)
                .is_some_and(|sent| window.contains(sent))
        })
    };
    run.records
        .iter()
        .filter(|r| r.outcome == "completed" && measured(r))
        .collect()
}

pub fn summary_end_to_end_count(run: &Run) -> Vec<String> {
    let e2e = &run.summary["latency_ms"]["end_to_end"];
    let completed = measured_completions(run).len() as u64;
    check(e2e["count"].as_u64().unwrap_or(0) == completed, || {
        format!(
            "end_to_end.count {} for {completed} completions",
            e2e["count"]
        )
    })
    .into_iter()
    .collect()
}

pub fn summary_end_to_end_max(run: &Run) -> Vec<String> {
    let Some(max_ns) = measured_completions(run).iter().map(|r| r.latency_ns).max() else {
        return Vec::new();
    };
    let max_ms = run.summary["latency_ms"]["end_to_end"]["max_ms"]
        .as_f64()
        .unwrap_or(f64::NAN);
    check(
        (max_ms - max_ns as f64 / 1e6).abs() <= 1e-9 * max_ms.abs().max(1.0),
        || format!("end_to_end.max_ms {max_ms}, the records {max_ns} ns"),
    )
    .into_iter()
    .collect()
}

/// `end_s` is the last response.
pub fn summary_end_s(run: &Run) -> Vec<String> {
    let Some(last_ns) = run.records.iter().map(|r| r.response_ns).max() else {
        return Vec::new();
    };
    let end_s = run.summary["end_s"].as_f64().unwrap_or(f64::NAN);
    check(
        (end_s - last_ns as f64 / 1e9).abs() <= 1e-9 * end_s.max(1.0),
        || format!("end_s {end_s}, the last response at {last_ns} ns"),
    )
    .into_iter()
    .collect()
}

/// Without continuous pools, `batch_size_counts` counts the dynamic batches of each size.
pub fn summary_batch_sizes(run: &Run) -> Vec<String> {
    if run.has_continuous_pool() {
        return Vec::new();
    }
    let mut size_counts: Vec<u64> = vec![0];
    for (_, members, _) in run.dynamic_batches() {
        let size = members.len();
        if size_counts.len() <= size {
            size_counts.resize(size + 1, 0);
        }
        size_counts[size] += 1;
    }
    let summary_sizes: Vec<u64> = run.summary["batch_size_counts"]
        .as_array()
        .map(|v| v.iter().map(|c| c.as_u64().unwrap_or(0)).collect())
        .unwrap_or_default();
    check(summary_sizes == size_counts, || {
        format!("batch_size_counts {summary_sizes:?}, the records {size_counts:?}")
    })
    .into_iter()
    .collect()
}

/// Without continuous pools, `batches` counts the records' batch ids.
pub fn summary_batches(run: &Run) -> Vec<String> {
    if run.has_continuous_pool() {
        return Vec::new();
    }
    let batches = run.batches.len() as u64;
    check(run.summary["batches"].as_u64() == Some(batches), || {
        format!("batches {}, the records {batches}", run.summary["batches"])
    })
    .into_iter()
    .collect()
}

/// Without continuous pools, each model instance's `utilization` counts its batches.
pub fn summary_batches_per_model_instance(run: &Run) -> Vec<String> {
    if run.has_continuous_pool() {
        return Vec::new();
    }
    let utilization = run.summary["utilization"].as_array().into_iter().flatten();
    utilization
        .filter_map(|u| {
            let key = (
                u["pool"].as_str().unwrap_or("").to_string(),
                u["instance"].as_u64().unwrap_or(0),
                u["model_instance"].as_u64().unwrap_or(0),
            );
            let from_records = run.per_model_instance.get(&key).map_or(0, Vec::len) as u64;
            check(u["batches"].as_u64() == Some(from_records), || {
                format!(
                    "utilization of {key:?} counts {} batches, the records {from_records}",
                    u["batches"]
                )
            })
        })
        .collect()
}

/// With continuous pools, `llm.output_tokens` counts the completions' output tokens.
pub fn summary_llm_output_tokens(run: &Run) -> Vec<String> {
    if !run.has_continuous_pool() {
        return Vec::new();
    }
    let tokens: u64 = run
        .records
        .iter()
        .filter(|r| r.outcome == "completed" && present(r.first_token_ns))
        .map(|r| r.output_tokens.max(1))
        .sum();
    let written = &run.summary["llm"]["output_tokens"];
    check(written.as_u64() == Some(tokens), || {
        format!("llm output_tokens {written}, the completed requests {tokens}")
    })
    .into_iter()
    .collect()
}
