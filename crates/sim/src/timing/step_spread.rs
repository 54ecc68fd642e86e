//! Why two steps of the same composition take different times on a real engine: the CUDA graph
//! a step is padded to ([`CudaGraphs`], `batcher.cuda_graph_sizes`) and a measured residual
//! spread ([`StepResiduals`], `batcher.step_residuals`).
//!
//! vLLM V1 (`cudagraph_mode = FULL_AND_PIECEWISE`, its default) captures CUDA graphs at a list
//! of token counts and replays the smallest captured graph that holds a step:
//!
//! - a pure-decode step of `n` sequences, when a captured size `N >= n` is at most
//!   `max_num_seqs`, runs the FULL graph of `N` (vllm/v1/cudagraph_dispatcher.py: full decode
//!   keys only for sizes up to `max_num_seqs`): `N - n` padded entries go through every layer,
//!   attention included, with a sequence length of 0 (vllm/v1/worker/gpu_model_runner.py,
//!   `_prepare_inputs`: "Fill unused with 0 for full cuda graph mode"), so they read no KV;
//! - any other step of `T` batched tokens, when a captured size `N >= T` exists, runs the
//!   PIECEWISE graphs of `N` tokens: the `N - T` padded tokens go through the token-linear layers
//!   (GEMMs, norms, activations, all-reduces) while attention runs eagerly on the real tokens;
//! - a step above the largest captured size runs eagerly, unpadded.
//!
//! Padding changes only the time drawn for a step, never what the scheduler put in it.

use rand::RngExt;

use super::step_time::StepBatch;
use crate::rng::SimRng;

/// vLLM's largest default capture size (`_set_cudagraph_sizes` in vllm/config/vllm.py, 0.19; a
/// data-center Blackwell GPU gets 1024 in later releases).
pub const VLLM_MAX_DEFAULT_CAPTURE_SIZE: u32 = 512;

/// The CUDA graphs an engine captured, and how a step is padded to them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaGraphs {
    /// Captured sizes in tokens, strictly increasing; empty: every step runs eagerly.
    sizes: Vec<u32>,
    /// Largest pure-decode batch that runs a FULL graph (vLLM: `max_num_seqs`).
    full_decode_max_seqs: u32,
}

impl CudaGraphs {
    /// Graphs of `sizes` (strictly increasing, each above 0: the scenario checks them), FULL
    /// decode graphs up to `max_num_seqs` sequences.
    pub fn new(sizes: Vec<u32>, max_num_seqs: u32) -> CudaGraphs {
        debug_assert!(
            sizes.windows(2).all(|w| w[0] < w[1]) && sizes.first().is_none_or(|&s| s > 0),
            "capture sizes {sizes:?}"
        );
        CudaGraphs {
            sizes,
            full_decode_max_seqs: max_num_seqs,
        }
    }

    /// No graphs: every step runs eagerly, unpadded (`cuda_graph_sizes = []`, vLLM's
    /// `enforce_eager`).
    pub fn eager() -> CudaGraphs {
        CudaGraphs::new(Vec::new(), 0)
    }

    /// vLLM's default graphs for these engine limits (vllm/config/vllm.py,
    /// `VllmConfig._set_cudagraph_sizes`, without speculative decoding): the largest size is
    /// `min(max_num_seqs * 2, 512, max_num_batched_tokens)`; the sizes are 1, 2, 4, the
    /// multiples of 8 below 256 and the multiples of 16 from 256, up to it, plus
    /// `max_num_batched_tokens` when it is at most that largest size.
    pub fn vllm_default(max_num_seqs: u32, max_num_batched_tokens: u32) -> CudaGraphs {
        CudaGraphs::new(
            vllm_default_sizes(max_num_seqs, max_num_batched_tokens),
            max_num_seqs,
        )
    }

    /// The captured sizes, increasing.
    pub fn sizes(&self) -> &[u32] {
        &self.sizes
    }

    /// The smallest captured size at least `tokens`; `None` above the largest (eager).
    pub fn graph_for(&self, tokens: u64) -> Option<u32> {
        let at = self.sizes.partition_point(|&s| u64::from(s) < tokens);
        self.sizes.get(at).copied()
    }

    /// `step` as the GPU computes it: padded to its graph (see the module documentation). A
    /// pure-decode step in a FULL graph gains decode sequences of context 0 (`decode_kv_tokens`
    /// and `decode_kv_max` unchanged); a step in PIECEWISE graphs gains `padding_tokens`; an
    /// eager step, or one that fills its graph exactly, is returned as it is.
    pub fn pad(&self, step: &StepBatch) -> StepBatch {
        let tokens = step.batched_tokens();
        let Some(graph) = self.graph_for(tokens) else {
            return *step;
        };
        let pad = u64::from(graph) - tokens;
        let mut padded = *step;
        if step.prefill_seqs == 0 && graph <= self.full_decode_max_seqs {
            // `pad` < `graph` <= `full_decode_max_seqs`, a u32.
            padded.decode_seqs += pad as u32;
        } else {
            padded.padding_tokens += pad;
        }
        padded
    }
}

/// vLLM's default capture sizes (see [`CudaGraphs::vllm_default`]).
pub fn vllm_default_sizes(max_num_seqs: u32, max_num_batched_tokens: u32) -> Vec<u32> {
    let largest = max_num_seqs
        .saturating_mul(2)
        .min(VLLM_MAX_DEFAULT_CAPTURE_SIZE)
        .min(max_num_batched_tokens);
    let mut sizes: Vec<u32> = [1, 2, 4].into_iter().filter(|&s| s <= largest).collect();
    sizes.extend((8..256).step_by(8).filter(|&s| s <= largest));
    sizes.extend((256..=largest).step_by(16));
    if max_num_batched_tokens <= largest && !sizes.contains(&max_num_batched_tokens) {
        sizes.push(max_num_batched_tokens);
        sizes.sort_unstable();
    }
    sizes
}

/// Measured step-time factors (`batcher.step_residuals`): each step's GPU time is multiplied
/// by one of them, drawn uniformly. They are not rescaled: a list whose mean is not 1 also moves
/// the mean step time by that mean.
#[derive(Debug, Clone, PartialEq)]
pub struct StepResiduals {
    factors: Vec<f64>,
}

impl StepResiduals {
    /// The factors, when they are usable: `None` when `factors` is empty or holds a value that
    /// is not finite and above 0 (the scenario refuses those, naming the key).
    pub fn new(factors: &[f64]) -> Option<StepResiduals> {
        if factors.is_empty() || factors.iter().any(|f| !f.is_finite() || *f <= 0.0) {
            return None;
        }
        Some(StepResiduals {
            factors: factors.to_vec(),
        })
    }

    /// `gpu_ns` times a factor drawn from `rng`.
    #[inline]
    pub fn apply(&self, gpu_ns: u64, rng: &mut SimRng) -> u64 {
        let factor = self.factors[rng.random_range(0..self.factors.len())];
        crate::time::round_ns(gpu_ns as f64 * factor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::hardware::catalogue;
    use crate::timing::roofline::{Roofline, model_preset};
    use crate::timing::step_profile::{self, ProfileStepTime};
    use crate::timing::step_time::{LinearStepTime, StepTime};

    fn decode(seqs: u32, context: u64) -> StepBatch {
        StepBatch {
            decode_seqs: seqs,
            decode_kv_tokens: u64::from(seqs) * context,
            decode_kv_max: context,
            ..StepBatch::default()
        }
    }

    #[test]
    fn vllm_default_sizes_match_the_rtx4090_runs_resolved_config() {
        // /work/shared/ground-truth/vllm-rtx4090-llama-3.1-8b/meta.json,
        // resolved_config.compilation_config.cudagraph_capture_sizes (max_num_seqs 256,
        // max_num_batched_tokens 2048).
        let mut expected = vec![1, 2, 4];
        expected.extend((8..=256).step_by(8));
        expected.extend((272..=512).step_by(16));
        assert_eq!(vllm_default_sizes(256, 2048), expected);
        assert_eq!(expected.len(), 51);
    }

    #[test]
    fn vllm_default_sizes_stop_at_twice_max_num_seqs_and_at_the_token_budget() {
        let mut qwen = vec![1, 2, 4];
        qwen.extend((8..=256).step_by(8));
        assert_eq!(vllm_default_sizes(128, 2048), qwen, "max_num_seqs 128");
        assert_eq!(vllm_default_sizes(3, 2048), vec![1, 2, 4], "max_num_seqs 3");
        assert_eq!(
            vllm_default_sizes(256, 100),
            vec![1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 100],
            "max_num_batched_tokens 100 is captured as the largest size"
        );
    }

    #[test]
    fn a_decode_of_17_pads_to_24_sequences_of_no_context_and_24_stays_24() {
        let graphs = CudaGraphs::vllm_default(256, 2048);
        let padded = graphs.pad(&decode(17, 1000));
        assert_eq!(
            padded,
            StepBatch {
                decode_seqs: 24,
                ..decode(17, 1000)
            }
        );
        assert_eq!(graphs.pad(&decode(24, 1000)), decode(24, 1000));
    }

    #[test]
    fn above_the_largest_size_or_without_graphs_nothing_is_padded() {
        let graphs = CudaGraphs::new(vec![1, 2, 4, 8, 512], 1024);
        assert_eq!(graphs.pad(&decode(600, 10)), decode(600, 10));
        assert_eq!(CudaGraphs::eager().pad(&decode(17, 10)), decode(17, 10));
    }

    #[test]
    fn a_mixed_step_pads_tokens_not_sequences_or_attention() {
        let graphs = CudaGraphs::vllm_default(256, 2048);
        let mixed = StepBatch {
            prefill_tokens: 90,
            prefill_attention_tokens2: 90 * 90,
            prefill_seqs: 1,
            ..decode(10, 500)
        };
        // 100 batched tokens run the graph of 104.
        assert_eq!(
            graphs.pad(&mixed),
            StepBatch {
                padding_tokens: 4,
                ..mixed
            }
        );
    }

    #[test]
    fn a_decode_whose_graph_exceeds_max_num_seqs_runs_piecewise_padded_tokens() {
        // max_num_seqs 100: captured up to 200, FULL decode graphs only up to 100 sequences.
        let graphs = CudaGraphs::vllm_default(100, 8192);
        assert_eq!(graphs.graph_for(97), Some(104));
        assert_eq!(
            graphs.pad(&decode(97, 10)),
            StepBatch {
                padding_tokens: 7,
                ..decode(97, 10)
            }
        );
    }

    fn linear() -> LinearStepTime {
        LinearStepTime {
            base_ns: 5e6,
            per_prefill_token_ns: 100e3,
            per_prefill_attention_token2_ns: 0.5,
            per_decode_seq_ns: 150e3,
            per_kv_token_ns: 200.0,
            per_prefill_seq_ns: 0.0,
        }
    }

    fn llama8b_roofline() -> Roofline {
        Roofline {
            model: model_preset("llama-3-8b").expect("preset"),
            hardware: catalogue::H100_SXM
                .hardware(crate::timing::hardware::ComputeDtype::Bf16)
                .expect("the H100 SXM has a BF16 figure"),
            weight_bytes_per_param: 2.0,
            kv_bytes_per_element: 2.0,
            tensor_parallel: 1,
            compute_efficiency: 0.5,
            bandwidth_efficiency: 0.8,
        }
    }

    /// Every step-time kind the test checks, by name.
    fn kinds() -> Vec<(&'static str, Box<dyn StepTime>)> {
        vec![
            ("linear", Box::new(linear())),
            ("roofline", Box::new(llama8b_roofline())),
            (
                "profile",
                Box::new(ProfileStepTime::new(&step_profile::tests::synthetic())),
            ),
        ]
    }

    #[test]
    fn a_decode_of_17_costs_what_the_captured_24_costs_in_every_kind() {
        let graphs = CudaGraphs::vllm_default(256, 2048);
        // The 24-sequence graph, its 7 padded entries reading no KV.
        let graph_of_24 = StepBatch {
            decode_seqs: 24,
            ..decode(17, 100)
        };
        for (name, kind) in kinds() {
            let padded = kind.mean_ns(&graphs.pad(&decode(17, 100)));
            let expected = kind.mean_ns(&graph_of_24);
            assert_eq!(padded, expected, "{name}: decode of 17 vs the graph of 24");
            assert!(
                padded > kind.mean_ns(&decode(17, 100)),
                "{name}: padding costs something ({padded} ns padded)"
            );
            let full = kind.mean_ns(&decode(24, 100));
            assert_eq!(
                kind.mean_ns(&graphs.pad(&decode(24, 100))),
                full,
                "{name}: 24 is a captured size"
            );
        }
    }

    #[test]
    fn beyond_512_or_with_no_graphs_every_kind_costs_the_real_step() {
        let wide = CudaGraphs::vllm_default(1024, 8192);
        assert_eq!(wide.sizes().last(), Some(&512));
        for (name, kind) in kinds() {
            for (graphs, step) in [
                (&wide, decode(600, 100)),
                (&CudaGraphs::eager(), decode(17, 1000)),
            ] {
                assert_eq!(
                    kind.mean_ns(&graphs.pad(&step)),
                    kind.mean_ns(&step),
                    "{name}: {} decodes, sizes {:?}",
                    step.decode_seqs,
                    graphs.sizes()
                );
            }
        }
    }

    #[test]
    fn a_mixed_steps_padding_costs_the_token_linear_part_only() {
        let graphs = CudaGraphs::vllm_default(256, 2048);
        let real = StepBatch {
            prefill_tokens: 90,
            prefill_attention_tokens2: 90 * 400,
            prefill_history_tokens: 310,
            prefill_seqs: 1,
            ..decode(10, 500)
        };
        let padded = graphs.pad(&real);
        assert_eq!(
            padded.padding_tokens, 4,
            "100 batched tokens run the graph of 104"
        );
        let lin = linear();
        let got = lin.mean_ns(&padded) - lin.mean_ns(&real);
        let expected = 4.0 * lin.per_prefill_token_ns;
        assert!(
            (got - expected).abs() < 1e-6,
            "linear: expected {expected} ns more, got {got}"
        );
        let roof = llama8b_roofline();
        let flops = roof.step_flops(&padded) - roof.step_flops(&real);
        let dense = 2.0 * roof.model.active_params * 4.0;
        assert!(
            (flops - dense).abs() <= 1e-9 * dense,
            "roofline: expected {dense} more FLOPs (dense only), got {flops}"
        );
        assert_eq!(
            roof.step_bytes(&padded),
            roof.step_bytes(&real),
            "roofline: a dense model's padding reads no more weights and no KV"
        );
    }

    #[test]
    fn residuals_refuse_empty_and_non_positive_factors() {
        assert!(StepResiduals::new(&[]).is_none());
        assert!(StepResiduals::new(&[1.0, 0.0]).is_none());
        assert!(StepResiduals::new(&[1.0, f64::NAN]).is_none());
        assert!(StepResiduals::new(&[0.5, 2.0]).is_some());
    }
}
