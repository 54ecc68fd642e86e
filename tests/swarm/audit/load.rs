//! Load: open loop, first attempts are sent at the trace's arrival; closed loop, at most
//! `concurrency` clients, a client's requests never overlap and are `think_time` apart, trace
//! rows are sent in order, and no more than `concurrency` requests are ever in flight.

use std::collections::BTreeMap;

use super::{Run, check, peak_overlap};
use crate::records::present;

/// A row's span from its first send to its last answer, and its row.
type Span = (u64, u64, u64);

/// Each row's span, in row order.
fn spans(run: &Run) -> Vec<Span> {
    run.by_request
        .iter()
        .map(|(&request, attempts)| {
            let start = attempts.iter().map(|r| r.arrival_ns).min().unwrap_or(0);
            let end = attempts.iter().map(|r| r.response_ns).max().unwrap_or(0);
            (start, end, request)
        })
        .collect()
}

/// Each closed-loop client's rows' spans, sorted.
fn spans_by_client(run: &Run) -> BTreeMap<u64, Vec<Span>> {
    let mut by_client: BTreeMap<u64, Vec<Span>> = BTreeMap::new();
    for span in spans(run) {
        by_client
            .entry(run.by_request[&span.2][0].client)
            .or_default()
            .push(span);
    }
    for requests in by_client.values_mut() {
        requests.sort_unstable();
    }
    by_client
}

/// Open loop: a row's first attempt is sent at its trace arrival, by no client.
pub fn open_loop_sends_at_the_trace_arrival(run: &Run) -> Vec<String> {
    if run.case.spec.closed.is_some() {
        return Vec::new();
    }
    run.by_request
        .iter()
        .filter_map(|(&request, attempts)| {
            let sent = run.case.trace.arrival_ns[request as usize];
            check(
                attempts[0].arrival_ns == sent && !present(attempts[0].client),
                || {
                    format!(
                        "request {request} sent at {} ns, the trace says {sent} ns",
                        attempts[0].arrival_ns
                    )
                },
            )
        })
        .collect()
}

pub fn clients_within_concurrency(run: &Run) -> Vec<String> {
    let Some((concurrency, _)) = run.case.spec.closed else {
        return Vec::new();
    };
    let by_client = spans_by_client(run);
    check(
        by_client.keys().all(|&c| c < u64::from(concurrency)),
        || {
            format!(
                "clients {:?} of a concurrency of {concurrency}",
                by_client.keys().collect::<Vec<_>>()
            )
        },
    )
    .into_iter()
    .collect()
}

/// Closed loop: rows are first sent in trace order.
pub fn rows_sent_in_order(run: &Run) -> Vec<String> {
    if run.case.spec.closed.is_none() {
        return Vec::new();
    }
    let first_sends: Vec<u64> = spans(run).iter().map(|s| s.0).collect();
    check(first_sends.windows(2).all(|w| w[0] <= w[1]), || {
        "a closed loop sent trace rows out of order".to_string()
    })
    .into_iter()
    .collect()
}

/// Closed loop: a client sends its next row at least `think_time` after its last one's answer.
pub fn think_time_between_requests(run: &Run) -> Vec<String> {
    let Some((_, think_ns)) = run.case.spec.closed else {
        return Vec::new();
    };
    let mut broken = Vec::new();
    for (client, requests) in &spans_by_client(run) {
        for w in requests.windows(2) {
            broken.extend(check(w[1].0 >= w[0].1 + think_ns, || {
                format!(
                    "client {client} sent request {} at {} ns, request {} answered at {} ns, think time {think_ns} ns",
                    w[1].2, w[1].0, w[0].2, w[0].1
                )
            }));
        }
    }
    broken
}

pub fn in_flight_within_concurrency(run: &Run) -> Vec<String> {
    let Some((concurrency, _)) = run.case.spec.closed else {
        return Vec::new();
    };
    let (peak, at) = peak_overlap(spans(run).into_iter().map(|(start, end, _)| (start, end)));
    check(peak <= concurrency as usize, || {
        format!("{peak} requests in flight at {at} ns with a concurrency of {concurrency}")
    })
    .into_iter()
    .collect()
}
