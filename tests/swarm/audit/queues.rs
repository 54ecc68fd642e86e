//! Queues: a queue never holds more than `max_queue_size`; with `timeout_action = reject` a
//! timed-out request waited exactly its timeout and a batched one at most it; with `delay`
//! nothing times out.

use super::{Run, check, id, peak_overlap, pool_of};
use crate::case::Case;
use crate::records::{Rec, present};

pub fn timed_out_after_exactly_the_timeout(case: &Case, r: &Rec) -> Option<String> {
    if r.outcome != "timed_out" {
        return None;
    }
    let timeout =
        pool_of(case, r).and_then(|p| (!p.timeout_delay).then_some(p.timeout_ns).flatten());
    let waited_ns = r.response_ns.wrapping_sub(r.queued_ns);
    check(timeout.is_some_and(|t| waited_ns == t), || {
        format!(
            "{}: timed out after {waited_ns} ns in the queue; the timeout is {timeout:?} ns",
            id(r)
        )
    })
}

pub fn batched_within_the_timeout(case: &Case, r: &Rec) -> Option<String> {
    let p = pool_of(case, r)?;
    let timeout_ns = p.timeout_ns?;
    if p.timeout_delay || !present(r.batch_formed_ns) {
        return None;
    }
    let waited_ns = r.batch_formed_ns.wrapping_sub(r.queued_ns);
    check(waited_ns <= timeout_ns, || {
        format!(
            "{}: batched after {waited_ns} ns in the queue, past the {timeout_ns} ns timeout",
            id(r)
        )
    })
}

/// No instance's queue holds more than `max_queue_size` at once (queued until batched or
/// answered).
pub fn within_max_queue_size(run: &Run) -> Vec<String> {
    let mut broken = Vec::new();
    for (p, pool) in run.case.spec.pools.iter().enumerate() {
        if pool.max_queue_size == 0 {
            continue;
        }
        let servers = pool.instances + pool.standby;
        for instance in 0..u64::from(servers) {
            let (peak, at) = peak_overlap(
                run.records
                    .iter()
                    .filter(|r| {
                        r.pool.as_deref() == Some(pool.name.as_str())
                            && r.instance == instance
                            && present(r.queued_ns)
                    })
                    .map(|r| {
                        let left = if present(r.batch_formed_ns) {
                            r.batch_formed_ns
                        } else {
                            r.response_ns
                        };
                        (r.queued_ns, left)
                    }),
            );
            broken.extend(check(peak <= pool.max_queue_size as usize, || {
                format!(
                    "pool {p} instance {instance} held {peak} at {at} ns, max_queue_size {}",
                    pool.max_queue_size
                )
            }));
        }
    }
    broken
}

/// Requests time out (in summary.json) only where a pool rejects on its queue timeout.
pub fn delay_never_times_out(run: &Run) -> Vec<String> {
    let rejecting = run
        .case
        .spec
        .pools
        .iter()
        .any(|p| p.timeout_ns.is_some() && !p.timeout_delay);
    check(
        rejecting || run.summary["requests"]["timed_out"].as_u64() == Some(0),
        || "requests timed out without a rejecting timeout".to_string(),
    )
    .into_iter()
    .collect()
}
