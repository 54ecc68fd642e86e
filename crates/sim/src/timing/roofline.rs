//! The analytic step-time model: a roofline over one step's FLOPs and HBM bytes, for planners
//! with no GPU at hand.
//!
//! A step takes `max(compute, memory)` where (per GPU, tensor parallelism splitting both evenly)
//!
//! ```text
//! compute_s = (2 * active_params * batched_tokens
//!              + 4 * layers * num_attention_heads * head_dim
//!                  * (prefill_attention_tokens2 + decode_kv_tokens))
//!             / (tensor_parallel * flops * compute_efficiency)
//! memory_s  = (weights_read(batched_tokens) * dtype_bytes
//!              + kv_bytes_per_token * (decode_kv_tokens + prefill_tokens + batched_tokens))
//!             / (tensor_parallel * memory_bandwidth * bandwidth_efficiency)
//! kv_bytes_per_token = 2 * layers * num_kv_heads * head_dim * kv_dtype_bytes
//! ```
//!
//! The first compute term is two FLOPs (a multiply and an add) per active parameter per token
//! (for a mixture of experts, only the experts a token goes through); the second is attention's
//! `Q K^T` and `P V` products, `2 * head_dim` FLOPs each per query head per (query, key) pair.
//! The memory term reads the weights the step touches once, reads each decode's context from the
//! KV cache, reads each prefill chunk's own keys and values back, and writes one KV entry per
//! computed token. A dense model's step touches every weight. A mixture of experts' step touches
//! every weight outside the routed experts, and in each MoE layer the experts its tokens were
//! routed to: with `n = batched_tokens` tokens each picking `k` of `E` experts uniformly, the
//! expected number of distinct experts touched is `E * (1 - (1 - k/E)^n)` ([`ExpertWeights`]):
//! `k` for one token, all `E` for a large batch. Activations and kernel launch gaps are not
//! modelled (see docs/step-time.md); tensor parallelism's all-reduces are when a measured
//! all-reduce curve is given ([`TensorParallelRoofline`]).

use super::hardware::Hardware;
use super::model_config::{self, ModelConfig};
use super::operators::Curve;
use super::operators::step::ACTIVATION_BYTES;
use super::step_time::{StepBatch, StepTime};
use crate::rng::SimRng;

/// The shape of a decoder-only transformer, as the roofline and the KV-cache sizing need it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelShape {
    /// All parameters (weights), embeddings and every expert included: what the GPUs hold.
    pub params: f64,
    /// Parameters one token multiplies: `params` for a dense model, less the routed experts a
    /// token skips for a mixture of experts. Drives the compute term.
    pub active_params: f64,
    /// Transformer layers.
    pub layers: u32,
    /// Model (residual stream) width.
    pub hidden_size: u32,
    /// Query heads; `num_attention_heads * head_dim` is attention's width, which need not be
    /// `hidden_size` (Qwen3-32B: 64 x 128 on a 5120 residual).
    pub num_attention_heads: u32,
    /// Key/value heads (fewer than query heads under grouped-query attention).
    pub num_kv_heads: u32,
    /// Width of one attention head.
    pub head_dim: u32,
    /// The routed experts, for a mixture of experts; `None` for a dense model.
    pub experts: Option<ExpertWeights>,
}

/// The routed experts of a mixture of experts, as the roofline's weight reads need them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertWeights {
    /// Layers with routed experts.
    pub moe_layers: u32,
    /// Routed experts per MoE layer.
    pub num_experts: u32,
    /// Routed experts each token goes through.
    pub experts_per_token: u32,
    /// Parameters of one routed expert of one layer.
    pub expert_params: f64,
}

impl ExpertWeights {
    /// Parameters of all routed experts of all layers.
    pub fn routed_params(&self) -> f64 {
        f64::from(self.moe_layers) * f64::from(self.num_experts) * self.expert_params
    }

    /// Parameters of the routed experts one token skips, over all layers.
    pub fn skipped_params_per_token(&self) -> f64 {
        let skipped = f64::from(self.num_experts - self.experts_per_token);
        f64::from(self.moe_layers) * skipped * self.expert_params
    }

    /// Expected distinct experts of one MoE layer that `tokens` tokens go through, each picking
    /// `experts_per_token` of `num_experts` uniformly and independently of the others:
    /// `E * (1 - (1 - k/E)^tokens)`. 0 for no token, `k` for one, towards `E` as tokens grow.
    pub fn experts_touched(&self, tokens: u64) -> f64 {
        let e = f64::from(self.num_experts);
        let missed_by_one = 1.0 - f64::from(self.experts_per_token) / e;
        e * (1.0 - missed_by_one.powf(tokens as f64))
    }
}

impl ModelShape {
    /// The shape of `config`: its layers, widths and heads, total and active parameter counts,
    /// and its routed experts.
    pub fn from_config(config: &ModelConfig) -> ModelShape {
        ModelShape {
            params: config.total_params(),
            active_params: config.active_params(),
            layers: config.layers,
            hidden_size: config.hidden_size,
            num_attention_heads: config.num_attention_heads,
            num_kv_heads: config.num_kv_heads,
            head_dim: config.head_dim,
            experts: config.moe.map(|m| ExpertWeights {
                moe_layers: m.moe_layers,
                num_experts: m.num_experts,
                experts_per_token: m.experts_per_token,
                expert_params: config.expert_params(),
            }),
        }
    }

    /// Parameters a step of `batched_tokens` tokens reads: all of a dense model's; for a mixture
    /// of experts everything but the routed experts, plus the experts the tokens are expected to
    /// touch in each MoE layer ([`ExpertWeights::experts_touched`]).
    pub fn params_read(&self, batched_tokens: u64) -> f64 {
        match self.experts {
            None => self.params,
            Some(x) => {
                let touched =
                    f64::from(x.moe_layers) * x.experts_touched(batched_tokens) * x.expert_params;
                self.params - x.routed_params() + touched
            }
        }
    }

    /// Attention's width: `num_attention_heads * head_dim`.
    pub fn attention_width(&self) -> f64 {
        f64::from(self.num_attention_heads) * f64::from(self.head_dim)
    }
}

/// The model preset names a scenario may give as `model = "..."`: the shipped configs of
/// [`model_config::PRESET_NAMES`].
pub const MODEL_PRESET_NAMES: &[&str] = model_config::PRESET_NAMES;

/// The shape of the shipped config called `name` (see [`ModelConfig::preset`]), or `None`.
pub fn model_preset(name: &str) -> Option<ModelShape> {
    ModelConfig::preset(name).map(|c| ModelShape::from_config(&c))
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

    /// Bytes of all weights (over all GPUs): what the GPUs hold.
    pub fn weight_bytes(&self) -> f64 {
        self.model.params * self.weight_bytes_per_param
    }

    /// FLOPs of the step (over all GPUs). A CUDA graph's padding tokens pay the dense part only.
    pub fn step_flops(&self, step: &StepBatch) -> f64 {
        let dense = 2.0 * self.model.active_params * step.computed_tokens() as f64;
        let pairs = step.prefill_attention_tokens2 as f64 + step.decode_kv_tokens as f64;
        let attention = 4.0 * f64::from(self.model.layers) * self.model.attention_width() * pairs;
        dense + attention
    }

    /// HBM bytes the step moves (over all GPUs): the weights it touches, then the KV cache. A
    /// CUDA graph's padding tokens may route to more experts, and write no KV.
    pub fn step_bytes(&self, step: &StepBatch) -> f64 {
        let kv_tokens = step.decode_kv_tokens as f64
            + step.prefill_tokens as f64
            + step.batched_tokens() as f64;
        let weights = self.model.params_read(step.computed_tokens()) * self.weight_bytes_per_param;
        weights + self.kv_bytes_per_token() * kv_tokens
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

/// A roofline over GPUs joined by tensor parallelism, with their communication: each layer
/// all-reduces the step's hidden states twice (after attention and after the MLP), each
/// all-reduce timed from a curve measured on those GPUs (NCCL, time by message bytes), and the
/// step takes the roofline's time plus `2 * layers * all_reduce(batched_tokens * hidden_size *
/// 2 bytes)`: vLLM runs the all-reduces between a layer's kernels, not beside them. Over PCIe
/// they are as long as the kernels (docs/step-time.md), and no datasheet gives them: the host's
/// topology, ACS and IOMMU settings change them twofold.
#[derive(Debug, Clone)]
pub struct TensorParallelRoofline {
    /// The GPUs' kernels.
    pub roofline: Roofline,
    /// One all-reduce among the `tensor_parallel` GPUs: time (ns) by message bytes.
    pub all_reduce: Curve,
}

impl TensorParallelRoofline {
    /// The step's all-reduces, ns.
    pub fn all_reduce_ns(&self, step: &StepBatch) -> f64 {
        let model = &self.roofline.model;
        let bytes = step.batched_tokens() as f64 * f64::from(model.hidden_size) * ACTIVATION_BYTES;
        2.0 * f64::from(model.layers) * self.all_reduce.at(bytes)
    }
}

impl StepTime for TensorParallelRoofline {
    fn sample_ns(&self, step: &StepBatch, _rng: &mut SimRng) -> u64 {
        self.mean_ns(step).round().max(1.0) as u64
    }

    fn mean_ns(&self, step: &StepBatch) -> f64 {
        self.roofline.mean_ns(step) + self.all_reduce_ns(step)
    }

    fn may_extrapolate(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::hardware::{ComputeDtype, catalogue};

    const BF16: ComputeDtype = ComputeDtype::Bf16;
    fn h100_sxm() -> Hardware {
        catalogue::H100_SXM.hardware(BF16).unwrap()
    }
    fn h200_sxm() -> Hardware {
        catalogue::H200_SXM.hardware(BF16).unwrap()
    }

    /// Llama-3.1-8B's exact parameter count (its config's, and its safetensors').
    const LLAMA_8B_PARAMS: f64 = 8_030_261_248.0;

    fn preset(name: &str) -> ModelShape {
        model_preset(name).unwrap_or_else(|| panic!("no preset {name}"))
    }

    fn llama8b_on(hardware: Hardware) -> Roofline {
        Roofline {
            model: preset("llama-3-8b"),
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
        let r = llama8b_on(h200_sxm());
        let step = decode(4, 1000);
        assert!(r.memory_s(&step) > 10.0 * r.compute_s(&step));
        // 16.06 GB of weights at 4.8 TB/s is 3.35 ms; 4,000 KV tokens read and 4 written add 0.5 GB.
        let expected_ms = (2.0 * LLAMA_8B_PARAMS + 131_072.0 * 4004.0) / 4.8e12 * 1e3;
        let got_ms = r.mean_ns(&step) / 1e6;
        assert!(
            (got_ms - expected_ms).abs() < 1e-6,
            "expected {expected_ms} ms, got {got_ms}"
        );
        assert!((3.3..3.6).contains(&got_ms), "got {got_ms} ms");
    }

    #[test]
    fn long_prefill_is_compute_bound() {
        let r = llama8b_on(h200_sxm());
        let step = prefill(4096);
        assert!(r.compute_s(&step) > 5.0 * r.memory_s(&step));
        // 2 * 8.03e9 * 4096 + 4 * 32 * (32 * 128) * 4096^2 FLOPs at 989 TFLOPS.
        let expected_ms =
            (2.0 * LLAMA_8B_PARAMS * 4096.0 + 4.0 * 32.0 * 4096.0 * 4096.0f64.powi(2)) / 989e12
                * 1e3;
        let got_ms = r.mean_ns(&step) / 1e6;
        assert!(
            (got_ms - expected_ms).abs() < 1e-6,
            "expected {expected_ms} ms, got {got_ms}"
        );
    }

    #[test]
    fn preset_8b_h200_step_times_match_the_documented_table() {
        // docs/step-time.md, "What the 8B / H200 preset gives", with the default efficiencies
        // (Llama-3.1-8B's exact 8,030,261,248 parameters: 8192 tokens take 281.01 ms, 7 us more
        // than the 8.03e9 the preset said before it was read from the config).
        let r = Roofline {
            compute_efficiency: 0.6,
            bandwidth_efficiency: 0.8,
            ..llama8b_on(h200_sxm())
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
            (prefill(8192), 281.01),
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
    fn tensor_parallel_roofline_adds_two_all_reduces_of_the_hidden_states_per_layer() {
        let roofline = Roofline {
            model: preset("qwen3-32b"),
            tensor_parallel: 2,
            ..llama8b_on(h100_sxm())
        };
        // 1 MB in 50 us, 2 MB in 100 us: a 128-sequence decode moves 128 x 5120 x 2 bytes.
        let all_reduce = Curve::new(vec![(1e6, 50_000.0), (2e6, 100_000.0)]).expect("a curve");
        let tp = TensorParallelRoofline {
            roofline,
            all_reduce,
        };
        let step = decode(128, 1000);
        let one_ns = 50_000.0 + (1_310_720.0 - 1e6) / 1e6 * 50_000.0;
        let expected_ns = roofline.mean_ns(&step) + 2.0 * 64.0 * one_ns;
        let got_ns = tp.mean_ns(&step);
        assert!(
            (got_ns - expected_ns).abs() < 1e-6 * expected_ns,
            "expected {expected_ns} ns, got {got_ns}"
        );
    }

    #[test]
    fn kv_bytes_per_token_of_llama3_8b_is_128_kib() {
        assert_eq!(llama8b_on(h100_sxm()).kv_bytes_per_token(), 131_072.0);
    }

    #[test]
    fn step_time_never_decreases_in_any_input() {
        let r = llama8b_on(h100_sxm());
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
                ..h100_sxm()
            },
            ..r
        };
        let narrower = Roofline {
            hardware: Hardware {
                memory_bandwidth_bytes_per_s: 1e12,
                ..h100_sxm()
            },
            ..r
        };
        let bigger = Roofline {
            model: preset("llama-3-70b"),
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

    fn on_h200(model: ModelShape) -> Roofline {
        Roofline {
            model,
            ..llama8b_on(h200_sxm())
        }
    }

    /// A dense model of `params` parameters with `like`'s attention and layers.
    fn dense_like(like: ModelShape, params: f64) -> ModelShape {
        ModelShape {
            params,
            active_params: params,
            experts: None,
            ..like
        }
    }

    #[test]
    fn qwen3_32b_attention_flops_use_64_heads_of_128_not_hidden_size() {
        let qwen = preset("qwen3-32b");
        assert_eq!(qwen.hidden_size, 5120);
        let r = on_h200(qwen);
        let step = prefill(1000);
        let attention = r.step_flops(&step) - 2.0 * qwen.active_params * 1000.0;
        let expected = 4.0 * 64.0 * (64.0 * 128.0) * 1e6;
        assert!(
            (attention / expected - 1.0).abs() < 1e-12,
            "attention FLOPs {attention:e}, expected {expected:e}"
        );
        // KV bytes per token from 8 KV heads of 128 over 64 layers.
        assert_eq!(r.kv_bytes_per_token(), 2.0 * 64.0 * 8.0 * 128.0 * 2.0);
    }

    #[test]
    fn moe_compute_uses_active_and_weights_use_total_parameters() {
        // (preset, total B, active B) as counted from the configs.
        for (name, total_b, active_b) in [
            ("mixtral-8x7b", 46.70, 12.88),
            ("qwen3-30b-a3b", 30.53, 3.35),
        ] {
            let model = preset(name);
            let r = on_h200(model);
            assert!(
                (r.weight_bytes() / 2e9 - total_b).abs() < 0.01,
                "{name}: {} GB of weights",
                r.weight_bytes() / 1e9
            );
            let step = decode(32, 0);
            let flops = r.step_flops(&step);
            assert!(
                (flops / (2.0 * 32.0 * 1e9) - active_b).abs() < 0.01,
                "{name}: {flops:e} FLOPs for 32 tokens"
            );
            // A large batch touches every expert: the whole model is read.
            let big = decode(4096, 0);
            let weights_read = r.step_bytes(&big) - r.kv_bytes_per_token() * 4096.0;
            assert!(
                (weights_read / r.weight_bytes() - 1.0).abs() < 1e-6,
                "{name}: reads {weights_read:e} of {:e}",
                r.weight_bytes()
            );
        }
    }

    #[test]
    fn mixtral_decode_costs_between_dense_models_of_its_active_and_total_size() {
        let mixtral = preset("mixtral-8x7b");
        let moe = on_h200(mixtral);
        let active = on_h200(dense_like(mixtral, mixtral.active_params));
        let total = on_h200(dense_like(mixtral, mixtral.params));
        for seqs in [2, 4, 16, 64] {
            let step = decode(seqs, 1000);
            let (a, m, t) = (
                active.mean_ns(&step),
                moe.mean_ns(&step),
                total.mean_ns(&step),
            );
            assert!(
                a < m && m < t,
                "{seqs} decodes: active {a}, moe {m}, total {t} ns"
            );
        }
        // One token reads exactly its two experts: the active model's weights.
        let one = decode(1, 1000);
        assert!((moe.mean_ns(&one) / active.mean_ns(&one) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn experts_touched_match_uniform_routing_by_simulation() {
        use rand::SeedableRng;
        let x = ExpertWeights {
            moe_layers: 1,
            num_experts: 8,
            experts_per_token: 2,
            expert_params: 1.0,
        };
        assert_eq!(x.experts_touched(0), 0.0);
        assert!((x.experts_touched(1) - 2.0).abs() < 1e-12);
        assert!((x.experts_touched(10_000) - 8.0).abs() < 1e-9);
        let mut rng = SimRng::seed_from_u64(11);
        for tokens in [2u64, 3, 5, 12] {
            let trials = 20_000;
            let mut distinct = 0usize;
            for _ in 0..trials {
                let mut touched = [false; 8];
                for _ in 0..tokens {
                    for e in rand::seq::index::sample(&mut rng, 8, 2) {
                        touched[e] = true;
                    }
                }
                distinct += touched.iter().filter(|&&t| t).count();
            }
            let simulated = distinct as f64 / trials as f64;
            let rule = x.experts_touched(tokens);
            assert!(
                (simulated / rule - 1.0).abs() < 0.01,
                "{tokens} tokens: rule {rule}, simulated {simulated}"
            );
        }
    }
}
