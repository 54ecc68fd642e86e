//! Step-time models: how long one iteration of a continuous batcher takes, from what is in it.

use crate::rng::SimRng;

/// The composition of one scheduler step, as a step-time model sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepBatch {
    /// Prompt tokens computed this step (new prefill tokens, after prefix-cache hits, summed over
    /// the prefill chunks of the step).
    pub prefill_tokens: u64,
    /// Sum over the step's prefill chunks of chunk length times the context it attends to
    /// (chunk length squared for a chunk that starts at position 0): attention's quadratic term.
    pub prefill_attention_tokens2: u64,
    /// Sequences with a prefill chunk in this step.
    pub prefill_seqs: u32,
    /// Sequences decoding one token in this step.
    pub decode_seqs: u32,
    /// KV-cache tokens read by the step's decodes (sum of their context lengths).
    pub decode_kv_tokens: u64,
}

impl StepBatch {
    /// Sequences in the step.
    pub fn seqs(&self) -> u32 {
        self.prefill_seqs + self.decode_seqs
    }

    /// Tokens computed in the step (prefill tokens plus one per decode): what
    /// `max_num_batched_tokens` bounds.
    pub fn batched_tokens(&self) -> u64 {
        self.prefill_tokens + u64::from(self.decode_seqs)
    }
}

/// A model of step execution time. Implementations are immutable and shared between instances;
/// all randomness comes from the caller's generator so runs stay deterministic.
pub trait StepTime: Send + Sync + std::fmt::Debug {
    /// Draws the GPU time of one step, in nanoseconds (per-step CPU overhead excluded: the
    /// scheduler adds it).
    fn sample_ns(&self, step: &StepBatch, rng: &mut SimRng) -> u64;

    /// The mean GPU time of such a step, in nanoseconds.
    fn mean_ns(&self, step: &StepBatch) -> f64;

    /// Whether this step lies outside the measurements the model was fitted to.
    fn is_extrapolated(&self, _step: &StepBatch) -> bool {
        false
    }
}
