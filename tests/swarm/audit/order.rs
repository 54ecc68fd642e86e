//! Order: the stages a record reached come in order and fit its outcome, and the times it
//! reports (`latency_ns`, `ttft_ns`, `tpot_ns`, the network's legs) follow from its stages.

use super::{check, id, pool_of};
use crate::case::{Batching, Case};
use crate::records::{NONE, Rec, present};

/// The stages a record reached, in path order, with their times.
fn reached(r: &Rec) -> Vec<(&'static str, u64)> {
    [
        ("arrival", r.arrival_ns),
        ("gateway", r.gateway_ns),
        ("admitted", r.admitted_ns),
        ("queued", r.queued_ns),
        ("batch_formed", r.batch_formed_ns),
        ("exec_start", r.exec_start_ns),
        ("first_token", r.first_token_ns),
        ("exec_end", r.exec_end_ns),
        ("postprocessed", r.postprocessed_ns),
        ("response", r.response_ns),
    ]
    .into_iter()
    .filter(|&(_, t)| present(t))
    .collect()
}

/// `arrival <= gateway <= ... <= response` over the stages reached.
pub fn stages_in_order(_: &Case, r: &Rec) -> Option<String> {
    let stages = reached(r);
    let pair = stages.windows(2).find(|pair| pair[0].1 > pair[1].1)?;
    Some(format!(
        "{}: {}_ns {} after {}_ns {}",
        id(r),
        pair[0].0,
        pair[0].1,
        pair[1].0,
        pair[1].1
    ))
}

pub fn arrival_and_response_present(_: &Case, r: &Rec) -> Option<String> {
    check(present(r.arrival_ns) && present(r.response_ns), || {
        format!("{}: no arrival or response", id(r))
    })
}

pub fn latency_is_response_minus_arrival(_: &Case, r: &Rec) -> Option<String> {
    check(
        r.latency_ns == r.response_ns.wrapping_sub(r.arrival_ns),
        || {
            format!(
                "{}: latency_ns {} is not response_ns {} - arrival_ns {}",
                id(r),
                r.latency_ns,
                r.response_ns,
                r.arrival_ns
            )
        },
    )
}

/// A cache hit (the scenario has a cache) was answered at the gateway: never queued or executed.
pub fn cache_hit_skips_the_pool(case: &Case, r: &Rec) -> Option<String> {
    if r.outcome != "completed" || !r.cache_hit {
        return None;
    }
    check(
        case.spec.cache.is_some()
            && !present(r.queued_ns)
            && !present(r.exec_start_ns)
            && present(r.postprocessed_ns),
        || format!("{}: a cache hit with stages {:?}", id(r), reached(r)),
    )
}

/// A completion not from the cache reached a pool and every stage but the first token.
pub fn completion_went_through_every_stage(case: &Case, r: &Rec) -> Option<String> {
    if r.outcome != "completed" || r.cache_hit {
        return None;
    }
    let stages = reached(r);
    check(stages.len() >= 9 && pool_of(case, r).is_some(), || {
        format!(
            "{}: completed with stages {stages:?} in pool {:?}",
            id(r),
            r.pool
        )
    })
}

/// A rejection was never queued; one at the gateway was never admitted and answered there, any
/// other was admitted.
pub fn rejection_stages_fit_the_reason(_: &Case, r: &Rec) -> Option<String> {
    if r.outcome != "rejected" {
        return None;
    }
    let reason = r.reject_reason.as_deref().unwrap_or("none");
    let at_gateway = matches!(reason, "rate_limited" | "max_in_flight");
    check(
        !present(r.queued_ns)
            && present(r.gateway_ns)
            && present(r.admitted_ns) != at_gateway
            && (!at_gateway || r.response_ns == r.gateway_ns),
        || {
            format!(
                "{}: rejected ({reason}) with stages {:?}",
                id(r),
                reached(r)
            )
        },
    )
}

/// A timed-out request was queued and never batched.
pub fn timeout_left_from_the_queue(_: &Case, r: &Rec) -> Option<String> {
    if r.outcome != "timed_out" {
        return None;
    }
    check(present(r.queued_ns) && !present(r.batch_formed_ns), || {
        format!("{}: timed out with stages {:?}", id(r), reached(r))
    })
}

pub fn outcome_is_known(_: &Case, r: &Rec) -> Option<String> {
    check(
        matches!(r.outcome.as_str(), "completed" | "rejected" | "timed_out"),
        || format!("{}: outcome {}", id(r), r.outcome),
    )
}

pub fn first_token_only_in_llm_pools(case: &Case, r: &Rec) -> Option<String> {
    let Batching::Dynamic(_) = &pool_of(case, r)?.batching else {
        return None;
    };
    check(!present(r.first_token_ns), || {
        format!("{}: a first token outside an LLM pool", id(r))
    })
}

/// A continuous completion's `ttft_ns`: its first token's path to the client is the last one's
/// without the stream's close (`postprocess.base`).
pub fn ttft_follows_from_the_times(case: &Case, r: &Rec) -> Option<String> {
    let p = pool_of(case, r)?;
    if p.continuous().is_none() || r.outcome != "completed" {
        return None;
    }
    let close_ns = p.postprocess.map_or(0, |(base, _)| base);
    let ttft_ns = r
        .first_token_ns
        .wrapping_add(r.response_ns.wrapping_sub(r.exec_end_ns))
        .wrapping_sub(close_ns)
        .wrapping_sub(r.arrival_ns);
    check(r.ttft_ns == ttft_ns, || {
        format!("{}: ttft_ns {} for {ttft_ns}", id(r), r.ttft_ns)
    })
}

/// A continuous completion's `tpot_ns`: its decode time over its output tokens after the first.
pub fn tpot_follows_from_the_times(case: &Case, r: &Rec) -> Option<String> {
    let p = pool_of(case, r)?;
    if p.continuous().is_none() || r.outcome != "completed" {
        return None;
    }
    let tpot_ns = if r.output_tokens >= 2 {
        (r.exec_end_ns.wrapping_sub(r.first_token_ns)) / (r.output_tokens - 1)
    } else {
        NONE
    };
    check(r.tpot_ns == tpot_ns, || {
        format!("{}: tpot_ns {} for {tpot_ns}", id(r), r.tpot_ns)
    })
}

pub fn uplink_takes_the_network_latency(case: &Case, r: &Rec) -> Option<String> {
    if !present(r.gateway_ns) {
        return None;
    }
    let took_ns = r.gateway_ns.wrapping_sub(r.arrival_ns);
    check(took_ns >= case.spec.one_way_ns, || {
        format!("{}: reached the gateway {took_ns} ns after sending", id(r))
    })
}

pub fn downlink_takes_the_network_latency(case: &Case, r: &Rec) -> Option<String> {
    if !present(r.postprocessed_ns) {
        return None;
    }
    let took_ns = r.response_ns.wrapping_sub(r.postprocessed_ns);
    check(took_ns >= case.spec.one_way_ns, || {
        format!("{}: answered {took_ns} ns after leaving", id(r))
    })
}
