//! Step-time models: how long one iteration of a continuous batcher takes, from what is in it.
//! The `[step_time]` table that chooses one is in [`super::step_spec`].

use std::sync::Arc;

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
    /// Sum over the step's prefill chunks of the tokens already computed before the chunk (the
    /// KV history it attends to besides itself). With `prefill_tokens` and `prefill_seqs` it
    /// gives the mean chunk and mean history a measured attention table is read at.
    pub prefill_history_tokens: u64,
    /// Sequences with a prefill chunk in this step.
    pub prefill_seqs: u32,
    /// Sequences decoding one token in this step. A step padded to a FULL CUDA graph
    /// ([`super::step_spread::CudaGraphs::pad`]) counts its padded entries here: they have no
    /// context, so `decode_kv_tokens` and `decode_kv_max` count none for them.
    pub decode_seqs: u32,
    /// KV-cache tokens read by the step's decodes (sum of their context lengths).
    pub decode_kv_tokens: u64,
    /// The longest context among the step's decodes (0 without decodes): how uneven the decode
    /// contexts are, which attention kernels feel.
    pub decode_kv_max: u64,
    /// Tokens a PIECEWISE CUDA graph computes beyond the step's real ones
    /// ([`super::step_spread::CudaGraphs::pad`]): they pass through the token-linear layers
    /// (GEMMs, norms, activations, all-reduces) and attend to nothing, read no KV and write none.
    /// 0 for the batch the scheduler plans.
    pub padding_tokens: u64,
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

    /// Tokens the token-linear layers compute: the batched tokens plus `padding_tokens`.
    pub fn computed_tokens(&self) -> u64 {
        self.batched_tokens() + self.padding_tokens
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

    /// Whether [`StepTime::is_extrapolated`] can ever be true. The engine asks once per pool and
    /// skips the per-step question when it is false. Default: true (ask every step); models that
    /// never extrapolate return false.
    fn may_extrapolate(&self) -> bool {
        true
    }
}

/// The `kind = "linear"` model, built: every coefficient in (fractional) nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinearStepTime {
    /// Fixed time of every step, ns.
    pub base_ns: f64,
    /// Per prefill token, ns; also what a CUDA graph's padding token costs (`padding_tokens`:
    /// the token-linear share of a token, with no attention to pay).
    pub per_prefill_token_ns: f64,
    /// Per unit of `prefill_attention_tokens2`, ns.
    pub per_prefill_attention_token2_ns: f64,
    /// Per sequence with a prefill chunk in the step, ns.
    pub per_prefill_seq_ns: f64,
    /// Per decoding sequence, ns.
    pub per_decode_seq_ns: f64,
    /// Per KV token read by decodes, ns.
    pub per_kv_token_ns: f64,
}

impl StepTime for LinearStepTime {
    fn sample_ns(&self, step: &StepBatch, _rng: &mut SimRng) -> u64 {
        self.mean_ns(step).round().max(1.0) as u64
    }

    fn mean_ns(&self, step: &StepBatch) -> f64 {
        self.base_ns
            + self.per_prefill_token_ns * (step.prefill_tokens + step.padding_tokens) as f64
            + self.per_prefill_attention_token2_ns * step.prefill_attention_tokens2 as f64
            + self.per_prefill_seq_ns * f64::from(step.prefill_seqs)
            + self.per_decode_seq_ns * f64::from(step.decode_seqs)
            + self.per_kv_token_ns * step.decode_kv_tokens as f64
    }

    fn may_extrapolate(&self) -> bool {
        false
    }
}

/// Another model's step GPU times multiplied by a constant factor (`execution.time_scale`); the
/// scheduler's CPU overhead per step is not scaled.
#[derive(Debug)]
pub struct ScaledStepTime {
    inner: Arc<dyn StepTime>,
    /// The factor (finite, above 0).
    scale: f64,
}

impl ScaledStepTime {
    /// `inner`'s times times `scale` (finite and above 0; the scenario checks it).
    pub fn new(inner: Arc<dyn StepTime>, scale: f64) -> ScaledStepTime {
        debug_assert!(scale.is_finite() && scale > 0.0, "scale {scale}");
        ScaledStepTime { inner, scale }
    }
}

impl StepTime for ScaledStepTime {
    fn sample_ns(&self, step: &StepBatch, rng: &mut SimRng) -> u64 {
        crate::time::round_ns(self.inner.sample_ns(step, rng) as f64 * self.scale)
    }

    fn mean_ns(&self, step: &StepBatch) -> f64 {
        self.inner.mean_ns(step) * self.scale
    }

    fn is_extrapolated(&self, step: &StepBatch) -> bool {
        self.inner.is_extrapolated(step)
    }

    fn may_extrapolate(&self) -> bool {
        self.inner.may_extrapolate()
    }
}
