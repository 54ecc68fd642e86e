//! Continuous batching: no batch ids; a completion had a first token and fit the KV cache and
//! (without chunked prefill) the token budget; the steps' sizes (summary.json) stay within
//! `max_num_seqs` and their mean tokens within the budget.

use super::{Run, check, id, pool_of};
use crate::case::{Batching, Case, Continuous};
use crate::records::{Rec, present};

/// The continuous batcher of a record's pool, if that is its pool's batcher.
fn continuous_of<'a>(case: &'a Case, r: &Rec) -> Option<&'a Continuous> {
    pool_of(case, r)?.continuous()
}

/// A continuous request belongs to no batch.
pub fn no_batch_id(case: &Case, r: &Rec) -> Option<String> {
    continuous_of(case, r)?;
    check(!present(r.batch_id) && r.batch_size == 0, || {
        format!("{}: a continuous request with batch {}", id(r), r.batch_id)
    })
}

pub fn completed_with_a_first_token(case: &Case, r: &Rec) -> Option<String> {
    continuous_of(case, r)?;
    check(
        r.outcome != "completed" || present(r.first_token_ns),
        || format!("{}: completed without a first token", id(r)),
    )
}

/// A completion's prompt and output fit the KV cache's blocks.
pub fn completed_within_the_kv_cache(case: &Case, r: &Rec) -> Option<String> {
    let c = continuous_of(case, r)?;
    if r.outcome != "completed" {
        return None;
    }
    let kv_blocks =
        (r.input_tokens.max(1) + r.output_tokens.max(1) - 1).div_ceil(u64::from(c.block_size));
    check(kv_blocks <= u64::from(c.num_gpu_blocks), || {
        format!(
            "{}: completed needing {kv_blocks} KV blocks of {}",
            id(r),
            c.num_gpu_blocks
        )
    })
}

/// Without chunked prefill, a completion's prompt fits one step's token budget.
pub fn completed_within_the_token_budget(case: &Case, r: &Rec) -> Option<String> {
    let c = continuous_of(case, r)?;
    if r.outcome != "completed" {
        return None;
    }
    check(
        c.chunked_prefill || r.input_tokens <= u64::from(c.max_num_batched_tokens),
        || {
            format!(
                "{}: a prompt of {} tokens completed without chunked prefill",
                id(r),
                r.input_tokens
            )
        },
    )
}

/// The largest step or batch (summary.json's `batch_size_counts`) within the largest pool's
/// `max_num_seqs` or `max_batch_size`.
pub fn steps_within_max_num_seqs(run: &Run) -> Vec<String> {
    if !run.has_continuous_pool() {
        return Vec::new();
    }
    let largest = run
        .case
        .spec
        .pools
        .iter()
        .map(|p| match &p.batching {
            Batching::Dynamic(d) => d.max_batch_size,
            Batching::Continuous(c) => c.max_num_seqs,
        })
        .max()
        .unwrap_or(1) as usize;
    let sizes = run.summary["batch_size_counts"]
        .as_array()
        .map_or(0, Vec::len);
    check(sizes <= largest + 1, || {
        format!(
            "a step or batch of {} sequences, the limit is {largest}",
            sizes - 1
        )
    })
    .into_iter()
    .collect()
}

/// summary.json's mean tokens per step within the largest `max_num_batched_tokens`.
pub fn mean_step_tokens_within_budget(run: &Run) -> Vec<String> {
    if !run.has_continuous_pool() {
        return Vec::new();
    }
    let budget = run
        .case
        .spec
        .pools
        .iter()
        .filter_map(|p| p.continuous())
        .map(|c| c.max_num_batched_tokens)
        .max()
        .unwrap_or(0);
    let mean_tokens = run.summary["llm"]["mean_tokens_per_step"]
        .as_f64()
        .unwrap_or(0.0);
    check(mean_tokens <= f64::from(budget) + 1e-9, || {
        format!("{mean_tokens} tokens per step on average, the budget is {budget}")
    })
    .into_iter()
    .collect()
}
