//! Retries: a row makes at most `max_attempts`, from one client, each sent exactly
//! `backoff * multiplier^(k-1)` after attempt k's answer.

use super::{Run, check};

pub fn at_most_max_attempts(run: &Run) -> Vec<String> {
    let max_attempts = run.max_attempts();
    run.by_request
        .iter()
        .filter_map(|(request, attempts)| {
            check(attempts.len() as u64 <= max_attempts, || {
                format!(
                    "request {request} made {} attempts of {max_attempts}",
                    attempts.len()
                )
            })
        })
        .collect()
}

pub fn backoff_is_exact(run: &Run) -> Vec<String> {
    let Some(retry) = &run.case.spec.retry else {
        return Vec::new();
    };
    let mut broken = Vec::new();
    for (request, attempts) in &run.by_request {
        for pair in attempts.windows(2) {
            let (last, next) = (pair[0], pair[1]);
            let backoff_ns = (retry.backoff_ns as f64
                * retry.multiplier.powi(last.attempt as i32 - 1))
            .round() as u64;
            broken.extend(check(next.arrival_ns == last.response_ns + backoff_ns, || {
                format!(
                    "request {request} attempt {} sent {} ns after attempt {}'s answer; backoff {backoff_ns} ns",
                    next.attempt,
                    next.arrival_ns as i128 - last.response_ns as i128,
                    last.attempt
                )
            }));
        }
    }
    broken
}

pub fn client_kept_across_attempts(run: &Run) -> Vec<String> {
    let mut broken = Vec::new();
    for (request, attempts) in &run.by_request {
        for pair in attempts.windows(2) {
            broken.extend(check(pair[1].client == pair[0].client, || {
                format!("request {request} changed client")
            }));
        }
    }
    broken
}
