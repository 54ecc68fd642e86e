//! Batches (dynamic) and the fixed-time stages around them: members of one `batch_id` share
//! pool, instance, model instance and times, number `batch_size`, within `max_batch_size`; no
//! batcher forms a batch inside a pause; compute starts exactly the dispatch latency after the
//! batch formed, or, for a batch its model instance took as the batch before ended, exactly at
//! that release, either moved to the end of the pause that holds it; batches of one model
//! instance never overlap, none starts before the cold start; constant and affine batch times
//! are exactly the model's; post-processing takes exactly its time (at least with a host), pre-processing at least its.

use super::{Run, check, dynamic_of, id, pool_of};
use crate::case::{Batching, Case};
use crate::records::{Rec, present};

pub fn no_start_before_the_cold_start(case: &Case, r: &Rec) -> Option<String> {
    let p = pool_of(case, r)?;
    check(
        !present(r.exec_start_ns) || r.exec_start_ns >= p.cold_start_ns,
        || {
            format!(
                "{}: executing at {} ns, before the cold start",
                id(r),
                r.exec_start_ns
            )
        },
    )
}

/// A request that reached the queue spent at least its pre-processing time after admission
/// (with `[host]`, its whole job on a core).
pub fn preprocess_takes_at_least_its_time(case: &Case, r: &Rec) -> Option<String> {
    let p = pool_of(case, r)?;
    if !present(r.queued_ns) || r.cache_hit {
        return None;
    }
    let pre_ns = p
        .preprocess
        .map_or(0, |(_, base, per)| base + per * r.input_tokens)
        + p.host
            .map_or(0, |(_, request, per, _)| request + per * r.input_tokens);
    let took_ns = r.queued_ns.wrapping_sub(r.admitted_ns);
    check(took_ns >= pre_ns, || {
        format!(
            "{}: queued {took_ns} ns after admission, pre-processing takes {pre_ns} ns",
            id(r)
        )
    })
}

/// Post-processing after execution takes exactly its time: a streamed (continuous) response
/// has only its last token's detokenization left, then the close; a whole response every token's.
/// With `[host]`, the response's job (the host's work per response and the post-processing)
/// takes at least its time on a core.
pub fn postprocess_takes_its_time(case: &Case, r: &Rec) -> Option<String> {
    let p = pool_of(case, r)?;
    if !present(r.exec_end_ns) {
        return None;
    }
    let tokens_left = if p.continuous().is_some() {
        1
    } else {
        r.output_tokens
    };
    let post_ns = p
        .postprocess
        .map_or(0, |(base, per)| base + per * tokens_left);
    let took_ns = r.postprocessed_ns.wrapping_sub(r.exec_end_ns);
    match p.host {
        // On the host's cores the response's job may wait for one.
        Some((_, _, _, response_ns)) => check(took_ns >= post_ns + response_ns, || {
            format!(
                "{}: took {took_ns} ns, its job on a host core takes {} ns",
                id(r),
                post_ns + response_ns
            )
        }),
        None => check(took_ns == post_ns, || {
            format!("{}: took {took_ns} ns, configured {post_ns} ns", id(r))
        }),
    }
}

pub fn not_formed_in_a_pause(case: &Case, r: &Rec) -> Option<String> {
    let d = dynamic_of(case, r)?;
    check(
        !present(r.exec_start_ns) || !d.formed_in_pause(r.batch_formed_ns),
        || {
            format!(
                "{}: batch {} formed at {} ns, inside a pause {:?}",
                id(r),
                r.batch_id,
                r.batch_formed_ns,
                d.pauses
            )
        },
    )
}

/// An executed request has a batch and computed after it formed (when exactly: per model
/// instance, `computes_after_dispatch_or_at_release`).
pub fn computes_after_forming(case: &Case, r: &Rec) -> Option<String> {
    let d = dynamic_of(case, r)?;
    check(
        !present(r.exec_start_ns) || (r.exec_start_ns >= r.batch_formed_ns && present(r.batch_id)),
        || {
            format!(
                "{}: batch {} formed at {} ns, started at {} ns, dispatch latency {} ns, pauses {:?}",
                id(r),
                r.batch_id,
                r.batch_formed_ns,
                r.exec_start_ns,
                d.dispatch_latency_ns,
                d.pauses
            )
        },
    )
}

pub fn only_in_dynamic_pools(run: &Run) -> Vec<String> {
    run.batches
        .iter()
        .filter(|(_, members)| dynamic_of(run.case, members[0]).is_none())
        .map(|(batch, _)| format!("batch {batch} outside a dynamic pool"))
        .collect()
}

/// Every member's `batch_size` is the number of records in its batch.
pub fn size_matches_members(run: &Run) -> Vec<String> {
    run.dynamic_batches()
        .filter_map(|(batch, members, _)| {
            let size = members.len() as u64;
            check(members.iter().all(|r| r.batch_size == size), || {
                format!(
                    "batch {batch} has {size} records, batch_size {}",
                    members[0].batch_size
                )
            })
        })
        .collect()
}

pub fn within_max_batch_size(run: &Run) -> Vec<String> {
    run.dynamic_batches()
        .filter_map(|(batch, members, d)| {
            let size = members.len() as u64;
            check(size >= 1 && size <= u64::from(d.max_batch_size), || {
                format!(
                    "batch {batch} of {size} requests, max_batch_size {}",
                    d.max_batch_size
                )
            })
        })
        .collect()
}

pub fn members_share_place_and_times(run: &Run) -> Vec<String> {
    let place_and_times = |r: &Rec| {
        (
            r.pool.clone(),
            r.instance,
            r.model_instance,
            r.batch_formed_ns,
            r.exec_start_ns,
            r.exec_end_ns,
        )
    };
    run.dynamic_batches()
        .filter_map(|(batch, members, _)| {
            let first = place_and_times(members[0]);
            check(members.iter().all(|&r| place_and_times(r) == first), || {
                format!("members of batch {batch} disagree on where or when it ran")
            })
        })
        .collect()
}

/// A constant or affine service time is exactly the model's for the batch's size and longest
/// input.
pub fn deterministic_time_is_exact(run: &Run) -> Vec<String> {
    run.dynamic_batches()
        .filter_map(|(batch, members, d)| {
            let size = members.len() as u64;
            let max_input = members.iter().map(|r| r.input_tokens).max().unwrap_or(0);
            let exact_ns = d.service.exact_ns(size, max_input)?;
            let took_ns = members[0].exec_end_ns.wrapping_sub(members[0].exec_start_ns);
            check(took_ns == exact_ns, || {
                format!("batch {batch} of {size} (longest input {max_input}) ran {took_ns} ns, the model says {exact_ns} ns")
            })
        })
        .collect()
}

/// A model instance's first batch had no batch before to be taken at the release of.
pub fn first_batch_waits_the_dispatch_latency(run: &Run) -> Vec<String> {
    run.per_model_instance
        .iter()
        .filter_map(|((pool, instance, mi), runs)| {
            let first = runs.first().filter(|b| b.skipped_dispatch)?;
            Some(format!(
                "batch {}, the first on pool {pool} instance {instance} model instance {mi}, skipped the dispatch latency",
                first.batch
            ))
        })
        .collect()
}

/// A model instance holds one batch from its formation to its release.
pub fn no_overlap_on_a_model_instance(run: &Run) -> Vec<String> {
    let mut broken = Vec::new();
    for ((pool, instance, mi), runs) in &run.per_model_instance {
        for w in runs.windows(2) {
            let (before, next) = (w[0], w[1]);
            broken.extend(check(
                next.start_ns >= before.release_ns && next.formed_ns >= before.end_ns,
                || {
                    format!(
                        "batches {} and {} overlap on pool {pool} instance {instance} model instance {mi}",
                        before.batch, next.batch
                    )
                },
            ));
        }
    }
    broken
}

/// A batch that did not start the dispatch latency after its formation formed between the
/// batch before's compute end and its release, and started at that release (or the end of the
/// pause that holds it).
pub fn computes_after_dispatch_or_at_release(run: &Run) -> Vec<String> {
    let mut broken = Vec::new();
    for ((pool, instance, mi), runs) in &run.per_model_instance {
        let Some(d) = run
            .case
            .spec
            .pools
            .iter()
            .find(|p| &p.name == pool)
            .and_then(|p| match &p.batching {
                Batching::Dynamic(d) => Some(d),
                Batching::Continuous(_) => None,
            })
        else {
            continue;
        };
        for w in runs.windows(2) {
            let (before, next) = (w[0], w[1]);
            let at_release = (before.end_ns..=before.release_ns).contains(&next.formed_ns)
                && next.start_ns == d.resume_ns(before.release_ns);
            broken.extend(check(!next.skipped_dispatch || at_release, || {
                format!(
                    "batch {} formed at {} ns started at {} ns: neither after the dispatch latency nor at the release of batch {} (compute end {} ns, release {} ns) on pool {pool} instance {instance} model instance {mi}",
                    next.batch, next.formed_ns, next.start_ns, before.batch, before.end_ns, before.release_ns
                )
            }));
        }
    }
    broken
}
