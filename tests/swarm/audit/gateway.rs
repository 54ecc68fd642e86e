//! Gateway: the overhead and the cache latency are exact, rejections name only limits the
//! scenario sets, admitted requests in flight never exceed `max_in_flight`, and admissions never
//! beat the token bucket.

use super::{Run, check, id, peak_overlap, pool_of};
use crate::case::Case;
use crate::records::{Rec, present};

/// A cache hit is answered exactly the cache's latency after its admission.
pub fn cache_latency_is_exact(case: &Case, r: &Rec) -> Option<String> {
    let (_, latency_ns) = case.spec.cache?;
    if r.outcome != "completed" || !r.cache_hit {
        return None;
    }
    let took_ns = r.postprocessed_ns.wrapping_sub(r.admitted_ns);
    check(took_ns == latency_ns, || {
        format!(
            "{}: cache answered after {took_ns} ns, latency is {latency_ns} ns",
            id(r)
        )
    })
}

/// A request that reached a pool's queue was admitted exactly the overhead after the gateway.
pub fn overhead_is_exact(case: &Case, r: &Rec) -> Option<String> {
    pool_of(case, r)?;
    if !present(r.queued_ns) || r.cache_hit {
        return None;
    }
    let took_ns = r.admitted_ns.wrapping_sub(r.gateway_ns);
    check(took_ns == case.spec.overhead_ns, || {
        format!(
            "{}: overhead {took_ns} ns, configured {} ns",
            id(r),
            case.spec.overhead_ns
        )
    })
}

/// A rejection's reason is one the scenario can give: a limit it sets, or a prompt its
/// continuous pool cannot hold.
pub fn rejections_name_set_limits(case: &Case, r: &Rec) -> Option<String> {
    if r.outcome != "rejected" {
        return None;
    }
    let spec = &case.spec;
    let pool = pool_of(case, r);
    let reason = r.reject_reason.as_deref().unwrap_or("none");
    let allowed = match reason {
        "rate_limited" => spec.rate_limit.is_some(),
        "max_in_flight" => spec.max_in_flight.is_some(),
        "queue_full" => pool.is_some_and(|p| p.max_queue_size > 0),
        "kv_capacity" => pool.is_some_and(|p| {
            p.continuous().is_some_and(|c| {
                (r.input_tokens.max(1) + r.output_tokens.max(1) - 1)
                    .div_ceil(u64::from(c.block_size))
                    > u64::from(c.num_gpu_blocks)
            })
        }),
        "prompt_too_long" => pool.is_some_and(|p| {
            p.continuous().is_some_and(|c| {
                !c.chunked_prefill && r.input_tokens > u64::from(c.max_num_batched_tokens)
            })
        }),
        _ => false,
    };
    check(allowed, || {
        format!(
            "{}: rejected for {reason}, which this scenario cannot give",
            id(r)
        )
    })
}

/// Whether a record went past the gateway's limits (took a token, counted in flight).
fn passed_the_limits(r: &&Rec) -> bool {
    !matches!(
        r.reject_reason.as_deref(),
        Some("rate_limited" | "max_in_flight")
    )
}

/// Requests in flight from the gateway to their release never exceed `max_in_flight`.
pub fn in_flight_within_max_in_flight(run: &Run) -> Vec<String> {
    let Some(limit) = run.case.spec.max_in_flight else {
        return Vec::new();
    };
    let (peak, at) = peak_overlap(run.records.iter().filter(passed_the_limits).map(|r| {
        let released = if present(r.postprocessed_ns) {
            r.postprocessed_ns
        } else {
            r.response_ns
        };
        (r.gateway_ns, released)
    }));
    check(peak <= limit as usize, || {
        format!("{peak} admitted requests in flight at {at} ns, max_in_flight {limit}")
    })
    .into_iter()
    .collect()
}

/// Admissions `i..=j` take `j - i + 1` tokens: at most `burst + rate * (t_j - t_i)`.
pub fn token_bucket_never_beaten(run: &Run) -> Vec<String> {
    let Some((rate, burst)) = run.case.spec.rate_limit else {
        return Vec::new();
    };
    let mut admitted: Vec<u64> = run
        .records
        .iter()
        .filter(passed_the_limits)
        .map(|r| r.gateway_ns)
        .collect();
    admitted.sort_unstable();
    let mut broken = Vec::new();
    let mut lowest = f64::INFINITY;
    for (j, &t) in admitted.iter().enumerate() {
        let key = j as f64 - rate * t as f64 * 1e-9;
        lowest = lowest.min(key);
        broken.extend(check(key - lowest + 1.0 <= f64::from(burst) + 1e-6, || {
            format!(
                "{} admissions up to {t} ns beat a bucket of {burst} at {rate} rps",
                j + 1
            )
        }));
    }
    broken
}
