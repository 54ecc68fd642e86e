//! The analytic step-time model: a roofline over one step's FLOPs and HBM bytes, for planners
//! with no GPU at hand.
//!
//! A step takes `max(compute, memory)` where (per GPU, tensor parallelism splitting both evenly)
//!
//! ```text
//! compute_s = (2 * params * batched_tokens
//!              + 4 * layers * hidden_size * (prefill_attention_tokens2 + decode_kv_tokens))
//!             / (tensor_parallel * flops * compute_efficiency)
//! memory_s  = (params * dtype_bytes
//!              + kv_bytes_per_token * (decode_kv_tokens + prefill_tokens + batched_tokens))
//!             / (tensor_parallel * memory_bandwidth * bandwidth_efficiency)
//! kv_bytes_per_token = 2 * layers * num_kv_heads * head_dim * kv_dtype_bytes
//! ```
//!
//! The first compute term is two FLOPs (a multiply and an add) per parameter per token; the
//! second is attention's `Q K^T` and `P V` products, `2 * head_dim` FLOPs each per head per
//! (query, key) pair, with `num_heads * head_dim = hidden_size`. The memory term reads every
//! weight once per step, reads each decode's context from the KV cache, reads each prefill
//! chunk's own keys and values back, and writes one KV entry per computed token. Activations,
//! tensor-parallel all-reduces and kernel launch gaps are not modelled (see docs/step-time.md).

use super::hardware::Hardware;
use super::step_time::{StepBatch, StepTime};
use crate::rng::SimRng;

/// The shape of a decoder-only transformer, as the roofline and the KV-cache sizing need it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelShape {
    /// Parameters (weights), all layers and embeddings included.
    pub params: f64,
    /// Transformer layers.
    pub layers: u32,
    /// Model (residual stream) width; also `num_heads * head_dim`.
    pub hidden_size: u32,
    /// Key/value heads (fewer than query heads under grouped-query attention).
    pub num_kv_heads: u32,
    /// Width of one attention head.
    pub head_dim: u32,
}

/// Llama 3 8B: 8.03 B parameters, 32 layers, hidden 4096, 32 query heads and 8 KV heads of
/// width 128 (Meta's `config.json` for meta-llama/Meta-Llama-3-8B).
pub const LLAMA_3_8B: ModelShape = ModelShape {
    params: 8.03e9,
    layers: 32,
    hidden_size: 4096,
    num_kv_heads: 8,
    head_dim: 128,
};

/// Llama 3 70B: 70.6 B parameters, 80 layers, hidden 8192, 64 query heads and 8 KV heads of
/// width 128 (Meta's `config.json` for meta-llama/Meta-Llama-3-70B).
pub const LLAMA_3_70B: ModelShape = ModelShape {
    params: 70.6e9,
    layers: 80,
    hidden_size: 8192,
    num_kv_heads: 8,
    head_dim: 128,
};

/// The model preset names a scenario may give as `model = "..."`.
pub const MODEL_PRESET_NAMES: &[&str] = &["llama-3-8b", "llama-3-70b"];

/// The model preset called `name` (case-insensitive; `llama3-8b` is accepted too), or `None`.
pub fn model_preset(name: &str) -> Option<ModelShape> {
    match name.to_ascii_lowercase().as_str() {
        "llama-3-8b" | "llama3-8b" | "llama-3.1-8b" | "llama3.1-8b" => Some(LLAMA_3_8B),
        "llama-3-70b" | "llama3-70b" | "llama-3.1-70b" | "llama3.1-70b" => Some(LLAMA_3_70B),
        _ => None,
    }
}

/// Bytes per element of a data type name (`bf16`, `fp16`, `fp8`, `int8`, `fp32`, ...).
pub fn dtype_bytes(name: &str) -> Option<f64> {
    match name.to_ascii_lowercase().as_str() {
        "fp32" | "float32" | "f32" => Some(4.0),
        "bf16" | "bfloat16" | "fp16" | "float16" | "f16" | "half" => Some(2.0),
        "fp8" | "fp8_e4m3" | "fp8_e5m2" | "int8" | "i8" => Some(1.0),
        "int4" | "fp4" => Some(0.5),
        _ => None,
    }
}

/// The analytic step-time model, resolved: every quantity in SI units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    /// The model.
    pub model: ModelShape,
    /// One GPU.
    pub hardware: Hardware,
    /// Bytes per weight.
    pub weight_bytes_per_param: f64,
    /// Bytes per KV-cache element.
    pub kv_bytes_per_element: f64,
    /// GPUs the model is split over (weights, KV heads and FLOPs evenly).
    pub tensor_parallel: u32,
    /// Fraction of peak FLOP/s the kernels reach, in (0, 1].
    pub compute_efficiency: f64,
    /// Fraction of peak HBM bandwidth the kernels reach, in (0, 1].
    pub bandwidth_efficiency: f64,
}

impl Roofline {
    /// KV-cache bytes of one token over all layers: `2 * layers * num_kv_heads * head_dim *
    /// kv_bytes_per_element` (keys and values).
    pub fn kv_bytes_per_token(&self) -> f64 {
        2.0 * f64::from(self.model.layers)
            * f64::from(self.model.num_kv_heads)
            * f64::from(self.model.head_dim)
            * self.kv_bytes_per_element
    }

    /// Bytes of all weights (over all GPUs).
    pub fn weight_bytes(&self) -> f64 {
        self.model.params * self.weight_bytes_per_param
    }

    /// FLOPs of the step (over all GPUs).
    pub fn step_flops(&self, step: &StepBatch) -> f64 {
        let dense = 2.0 * self.model.params * step.batched_tokens() as f64;
        let pairs = step.prefill_attention_tokens2 as f64 + step.decode_kv_tokens as f64;
        let attention =
            4.0 * f64::from(self.model.layers) * f64::from(self.model.hidden_size) * pairs;
        dense + attention
    }

    /// HBM bytes the step moves (over all GPUs).
    pub fn step_bytes(&self, step: &StepBatch) -> f64 {
        let kv_tokens = step.decode_kv_tokens as f64
            + step.prefill_tokens as f64
            + step.batched_tokens() as f64;
        self.weight_bytes() + self.kv_bytes_per_token() * kv_tokens
    }

    /// Compute-bound time of the step, seconds.
    pub fn compute_s(&self, step: &StepBatch) -> f64 {
        let gpus = f64::from(self.tensor_parallel);
        self.step_flops(step) / (gpus * self.hardware.flops_per_s * self.compute_efficiency)
    }

    /// Memory-bound time of the step, seconds.
    pub fn memory_s(&self, step: &StepBatch) -> f64 {
        let gpus = f64::from(self.tensor_parallel);
        self.step_bytes(step)
            / (gpus * self.hardware.memory_bandwidth_bytes_per_s * self.bandwidth_efficiency)
    }
}

impl StepTime for Roofline {
    fn sample_ns(&self, step: &StepBatch, _rng: &mut SimRng) -> u64 {
        self.mean_ns(step).round().max(1.0) as u64
    }

    fn mean_ns(&self, step: &StepBatch) -> f64 {
        self.compute_s(step).max(self.memory_s(step)) * 1e9
    }

    fn may_extrapolate(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::hardware::{H100_SXM, H200_SXM};

    fn llama8b_on(hardware: Hardware) -> Roofline {
        Roofline {
            model: LLAMA_3_8B,
            hardware,
            weight_bytes_per_param: 2.0,
            kv_bytes_per_element: 2.0,
            tensor_parallel: 1,
            compute_efficiency: 1.0,
            bandwidth_efficiency: 1.0,
        }
    }

    fn decode(seqs: u32, context: u64) -> StepBatch {
        StepBatch {
            decode_seqs: seqs,
            decode_kv_tokens: u64::from(seqs) * context,
            ..StepBatch::default()
        }
    }

    fn prefill(tokens: u64) -> StepBatch {
        StepBatch {
            prefill_tokens: tokens,
            prefill_attention_tokens2: tokens * tokens,
            prefill_seqs: 1,
            ..StepBatch::default()
        }
    }

    #[test]
    fn small_decode_is_memory_bound_at_weights_over_bandwidth() {
        let r = llama8b_on(H200_SXM);
        let step = decode(4, 1000);
        assert!(r.memory_s(&step) > 10.0 * r.compute_s(&step));
        // 16.06 GB of weights at 4.8 TB/s is 3.35 ms; 4,000 KV tokens read and 4 written add 0.5 GB.
        let expected_ms = (16.06e9 + 131_072.0 * 4004.0) / 4.8e12 * 1e3;
        let got_ms = r.mean_ns(&step) / 1e6;
        assert!(
            (got_ms - expected_ms).abs() < 1e-6,
            "expected {expected_ms} ms, got {got_ms}"
        );
        assert!((3.3..3.6).contains(&got_ms), "got {got_ms} ms");
    }

    #[test]
    fn long_prefill_is_compute_bound() {
        let r = llama8b_on(H200_SXM);
        let step = prefill(4096);
        assert!(r.compute_s(&step) > 5.0 * r.memory_s(&step));
        // 2 * 8.03e9 * 4096 + 4 * 32 * 4096 * 4096^2 FLOPs at 989 TFLOPS.
        let expected_ms =
            (2.0 * 8.03e9 * 4096.0 + 4.0 * 32.0 * 4096.0 * 4096.0f64.powi(2)) / 989e12 * 1e3;
        let got_ms = r.mean_ns(&step) / 1e6;
        assert!(
            (got_ms - expected_ms).abs() < 1e-6,
            "expected {expected_ms} ms, got {got_ms}"
        );
    }

    #[test]
    fn preset_8b_h200_step_times_match_the_documented_table() {
        // docs/step-time.md, "What the 8B / H200 preset gives", with the default efficiencies.
        let r = Roofline {
            compute_efficiency: 0.6,
            bandwidth_efficiency: 0.8,
            ..llama8b_on(H200_SXM)
        };
        let mixed = StepBatch {
            decode_seqs: 64,
            decode_kv_tokens: 64_000,
            ..prefill(2048)
        };
        let table = [
            (decode(1, 1000), 4.22),
            (decode(64, 1000), 6.37),
            (decode(256, 2000), 21.67),
            (prefill(512), 14.09),
            (prefill(2048), 59.13),
            (prefill(8192), 281.00),
            (mixed, 60.92),
        ];
        for (step, expected_ms) in table {
            let got_ms = r.mean_ns(&step) / 1e6;
            assert!(
                (got_ms - expected_ms).abs() < 0.006,
                "{step:?}: documented {expected_ms} ms, model gives {got_ms:.3} ms"
            );
        }
    }

    #[test]
    fn kv_bytes_per_token_of_llama3_8b_is_128_kib() {
        assert_eq!(llama8b_on(H100_SXM).kv_bytes_per_token(), 131_072.0);
    }

    #[test]
    fn step_time_never_decreases_in_any_input() {
        let r = llama8b_on(H100_SXM);
        let base = StepBatch {
            prefill_tokens: 512,
            prefill_attention_tokens2: 512 * 700,
            prefill_seqs: 2,
            decode_seqs: 64,
            decode_kv_tokens: 64 * 900,
            ..StepBatch::default()
        };
        let t0 = r.mean_ns(&base);
        for factor in [1u64, 2, 10, 100] {
            let grown = [
                StepBatch {
                    prefill_tokens: base.prefill_tokens * factor,
                    ..base
                },
                StepBatch {
                    prefill_attention_tokens2: base.prefill_attention_tokens2 * factor,
                    ..base
                },
                StepBatch {
                    decode_seqs: base.decode_seqs * factor as u32,
                    ..base
                },
                StepBatch {
                    decode_kv_tokens: base.decode_kv_tokens * factor,
                    ..base
                },
            ];
            for step in grown {
                assert!(r.mean_ns(&step) >= t0, "{step:?} took less than {base:?}");
            }
        }
        let slower = Roofline {
            hardware: Hardware {
                flops_per_s: 1e14,
                ..H100_SXM
            },
            ..r
        };
        let narrower = Roofline {
            hardware: Hardware {
                memory_bandwidth_bytes_per_s: 1e12,
                ..H100_SXM
            },
            ..r
        };
        let bigger = Roofline {
            model: LLAMA_3_70B,
            ..r
        };
        let less_efficient = Roofline {
            compute_efficiency: 0.5,
            bandwidth_efficiency: 0.5,
            ..r
        };
        for other in [slower, narrower, bigger, less_efficient] {
            assert!(
                other.mean_ns(&base) >= t0,
                "{other:?} faster than the baseline"
            );
        }
        let split = Roofline {
            tensor_parallel: 2,
            ..r
        };
        assert!(split.mean_ns(&base) < t0, "two GPUs not faster than one");
    }
}
