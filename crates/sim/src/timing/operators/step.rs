//! A continuous-batching step composed from an [`OperatorTable`]: the `kind = "operators"`
//! step time.
//!
//! A step of `T` batched tokens over `S` sequences, on a model of `L` layers, takes
//!
//! ```text
//! per_step(T) + L * (layer_dense(T) + attention + moe(T)) + per_sequence(S)
//!   + 2 * L * all_reduce(T * hidden_size * activation_bytes)       (tensor_parallel > 1)
//! ```
//!
//! - `layer_dense(T)`: every per-layer operator of the table at `T` tokens, times its calls per
//!   layer (the two RMSNorms of a layer are both charged); `per_step(T)`: the embedding and
//!   the final RMSNorm; `per_sequence(S)`: the LM head and the sampler over every scheduled
//!   sequence (LLMServingSim's convention: partial prefill chunks are counted too).
//! - Attention, one lookup per layer for the whole step: `P` prefill chunks of mean length
//!   `c = prefill_tokens / P` and mean history `h = prefill_history_tokens / P`, with the
//!   step's `n` decodes at their mean context `k`, are read at `(c, h, n, k)`; each further
//!   chunk adds `attention(c, h, 0, 0) - launch`, `launch` being the table's smallest
//!   measured time (one kernel covers the whole step, so the launch is paid once). Summing
//!   the chunks into one long chunk, as a single lookup must, would charge five 300-token
//!   prompts the quadratic cost of one 1500-token prompt.
//! - Uneven decode contexts: `t = t(k) + alpha * (t(k_max) - t(k))` with the bundle's
//!   `alpha` for this tensor-parallel degree (its skew measurement), 0 when it has none: the
//!   kernel's time then follows the KV bytes it reads, which the mean carries.
//! - Mixtures of experts: the table's MoE block at the tokens on one rank and the expected
//!   distinct experts they activate there, `E_r * (1 - (1 - k/E)^T)` for `E` experts, `k` per
//!   token and `E_r = E / expert_parallel` on the rank (uniform routing); a token is on a rank
//!   when one of its `k` experts is, `T * (1 - (1 - 1/expert_parallel)^k)` tokens. Charged on
//!   the model's MoE layers. All-to-all dispatch time is not modelled.
//! - The all-reduces after the attention output and the MLP down projection, one each per
//!   layer, from a measured all-reduce table of this tensor-parallel degree.
//!
//! Kernel times only: the scheduler's CPU time per step (`batcher.step_overhead`) is added on
//! top. A step padded to a CUDA graph (`batcher.cuda_graph_sizes`) is composed at its padded
//! size: `T` counts a PIECEWISE graph's padding tokens in the dense, MoE and all-reduce terms,
//! and a FULL decode graph's padded sequences are decodes of no context (so the attention's mean
//! context falls, its KV read stays). They are also charged the LM head, which vLLM runs on the
//! real sequences only: at decode sizes the head reads its weights once whatever the count, so
//! the error is small. The launch overhead a graph saves over the profilers' eager runs is not
//! modelled.

use std::sync::Arc;

use super::curve::Curve;
use super::table::{OperatorScope, OperatorTable};
use crate::rng::SimRng;
use crate::timing::model_config::ModelConfig;
use crate::timing::step_time::{StepBatch, StepTime};

/// Bytes of one activation element moved by the all-reduces (BF16/FP16).
pub const ACTIVATION_BYTES: f64 = 2.0;

/// The `kind = "operators"` step time, built.
#[derive(Debug, Clone)]
pub struct OperatorStepTime {
    table: Arc<OperatorTable>,
    layers: f64,
    /// Layers with a mixture-of-experts block.
    moe_layers: f64,
    /// Bytes of one token's hidden state, what each all-reduce moves per token.
    hidden_bytes: f64,
    /// One all-reduce by bytes, for `tensor_parallel > 1`.
    all_reduce: Option<Curve>,
    moe: Option<MoeRouting>,
    /// The attention kernel's fixed cost, paid once per step however many chunks.
    attention_launch_ns: f64,
    skew_alpha: f64,
    /// `per_step(T) + layers * layer_dense(T)` for `T` up to the largest measured token count
    /// (a step asks for one of these ~10^5 times a run; the curves are searched once here).
    dense_by_tokens: Vec<f64>,
    /// `per_sequence(S)` for `S` up to the largest measured sequence count.
    head_by_seqs: Vec<f64>,
}

/// Most entries of a precomputed lookup: token counts beyond it are computed when asked.
const MAX_PRECOMPUTED: u64 = 1 << 16;

/// How tokens spread over the experts of one rank.
#[derive(Debug, Clone, Copy, PartialEq)]
struct MoeRouting {
    experts: f64,
    experts_per_token: f64,
    expert_parallel: f64,
}

/// Why an operator step time cannot be built from what was given.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum OperatorStepError {
    /// The table lacks a part the model needs.
    #[error("{0}")]
    Incomplete(String),
    /// The table was measured for another model than the one named.
    #[error(
        "{table} was measured for {measured} but step_time.model is {named}: the table's \
         one-layer times hold only for its own model's shapes; give that model's config, or a \
         table measured for {named}"
    )]
    OtherModel {
        /// The table's folder.
        table: String,
        /// The model the table records.
        measured: String,
        /// The model config's name.
        named: String,
    },
}

/// Whether the table's recorded model (`"Qwen/Qwen3-32B"`) and a config's name (`"Qwen3-32B"`)
/// can be the same model: one's last path segment begins with the other's, case aside. A
/// config without a telling name (`config.json`'s stem, `config`) or a table without a model
/// name is not judged.
fn same_model(measured: &str, named: &str) -> bool {
    let last = |s: &str| s.rsplit('/').next().unwrap_or(s).to_ascii_lowercase();
    let (a, b) = (last(measured), last(named));
    a.is_empty() || b.is_empty() || b == "config" || a.starts_with(&b) || b.starts_with(&a)
}

/// The attention kernel's launch: the table's smallest attention time. An error when the table
/// measures no attention.
fn attention_launch_ns(table: &OperatorTable) -> Result<f64, OperatorStepError> {
    let attention = table.attention.as_ref().ok_or_else(|| {
        OperatorStepError::Incomplete(format!(
            "{} has no attention times (attention.csv): compose steps from an LLMServingSim \
             bundle, which measures them",
            table.source.display()
        ))
    })?;
    let launch = attention
        .rows()
        .iter()
        .map(|&(_, t)| t)
        .fold(f64::INFINITY, f64::min);
    Ok(if launch.is_finite() { launch } else { 0.0 })
}

/// How `model`'s tokens reach its experts, `None` for a dense model; an error when `table` has
/// no MoE block to time them with.
fn moe_routing(
    table: &OperatorTable,
    model: &ModelConfig,
    expert_parallel: u32,
) -> Result<Option<MoeRouting>, OperatorStepError> {
    let Some(shape) = &model.moe else {
        return Ok(None);
    };
    if table.moe.is_none() {
        return Err(OperatorStepError::Incomplete(format!(
            "{} is a mixture of experts but {} has no moe.csv: profile the model's MoE block",
            model.name,
            table.source.display()
        )));
    }
    Ok(Some(MoeRouting {
        experts: f64::from(shape.num_experts),
        experts_per_token: f64::from(shape.experts_per_token),
        expert_parallel: f64::from(expert_parallel.max(1)),
    }))
}

/// The largest size measured among the operators of the scopes `keep` accepts, capped at
/// [`MAX_PRECOMPUTED`].
fn measured_max(table: &OperatorTable, keep: fn(OperatorScope) -> bool) -> u64 {
    table
        .operators
        .iter()
        .filter(|(op, _)| keep(op.scope()))
        .map(|(_, c)| c.max_x() as u64)
        .max()
        .unwrap_or(0)
        .min(MAX_PRECOMPUTED)
}

impl OperatorStepTime {
    /// Composes `model`'s steps from `table`, measured at `table.tensor_parallel`.
    /// `all_reduce` overrides the table's own all-reduce measurement; one of the two is needed
    /// when `tensor_parallel > 1`. `expert_parallel` (at least 1) spreads a mixture of experts'
    /// experts over that many ranks.
    pub fn new(
        table: Arc<OperatorTable>,
        model: &ModelConfig,
        all_reduce: Option<Curve>,
        expert_parallel: u32,
    ) -> Result<OperatorStepTime, OperatorStepError> {
        let source = table.source.display().to_string();
        if !same_model(&table.model, &model.name) {
            return Err(OperatorStepError::OtherModel {
                table: source,
                measured: table.model.clone(),
                named: model.name.clone(),
            });
        }
        let attention_launch_ns = attention_launch_ns(&table)?;
        let all_reduce = all_reduce.or_else(|| table.all_reduce.clone());
        if table.tensor_parallel > 1 && all_reduce.is_none() {
            return Err(OperatorStepError::Incomplete(format!(
                "{source} is measured at tensor_parallel {} but nothing gives the all-reduce \
                 time: give step_time.all_reduce = \"PATH/all_reduce.csv\" (Vidur's format, \
                 measured by nccl-tests or a profiler on this interconnect)",
                table.tensor_parallel
            )));
        }
        let moe = moe_routing(&table, model, expert_parallel)?;
        let layers = f64::from(model.layers);
        let max_tokens = measured_max(&table, |s| !matches!(s, OperatorScope::PerSequence));
        let dense_by_tokens = (0..=max_tokens)
            .map(|t| table.per_step_ns(t) + layers * table.layer_dense_ns(t))
            .collect();
        let max_seqs = measured_max(&table, |s| matches!(s, OperatorScope::PerSequence));
        let head_by_seqs = (0..=max_seqs).map(|s| table.per_sequence_ns(s)).collect();
        Ok(OperatorStepTime {
            dense_by_tokens,
            head_by_seqs,
            layers,
            moe_layers: model.moe.as_ref().map_or(0.0, |m| f64::from(m.moe_layers)),
            hidden_bytes: f64::from(model.hidden_size) * ACTIVATION_BYTES,
            all_reduce: all_reduce.filter(|_| table.tensor_parallel > 1),
            moe,
            attention_launch_ns,
            skew_alpha: table.decode_skew_alpha.unwrap_or(0.0),
            table,
        })
    }

    /// The attention of one layer, ns (see the module's rule).
    fn attention_ns(&self, step: &StepBatch) -> f64 {
        let Some(grid) = self.table.attention.as_ref() else {
            return 0.0;
        };
        let chunks = u64::from(step.prefill_seqs);
        let (chunk, history) = if chunks == 0 {
            (0, 0)
        } else {
            (
                step.prefill_tokens.div_ceil(chunks),
                step.prefill_history_tokens / chunks,
            )
        };
        let n = u64::from(step.decode_seqs);
        let mean_kv = if n == 0 {
            0
        } else {
            step.decode_kv_tokens.div_ceil(n)
        };
        let mut t = grid.at(chunk, history, n, mean_kv);
        if self.skew_alpha != 0.0 && n > 1 && step.decode_kv_max > mean_kv {
            let t_max = grid.at(chunk, history, n, step.decode_kv_max);
            if t_max > t {
                t += self.skew_alpha * (t_max - t);
            }
        }
        if chunks > 1 {
            let extra = (grid.at(chunk, history, 0, 0) - self.attention_launch_ns).max(0.0);
            t += (chunks - 1) as f64 * extra;
        }
        t
    }

    /// The mixture-of-experts block of one layer, ns.
    fn moe_ns(&self, tokens: u64) -> f64 {
        let (Some(routing), Some(grid)) = (self.moe, self.table.moe.as_ref()) else {
            return 0.0;
        };
        let t = tokens as f64;
        let (k, ep) = (routing.experts_per_token, routing.expert_parallel);
        let on_rank = routing.experts / ep;
        let untouched = (1.0 - k / routing.experts).max(0.0);
        let activated = on_rank * (1.0 - untouched.powf(t));
        // A token is on this rank when at least one of its k experts is.
        let local_tokens = t * (1.0 - (1.0 - 1.0 / ep).powf(k));
        grid.at(
            local_tokens.round() as u64,
            activated.round().max(1.0) as u64,
        )
    }

    /// `per_step(tokens) + layers * layer_dense(tokens)`, ns.
    fn dense_ns(&self, tokens: u64) -> f64 {
        match self.dense_by_tokens.get(tokens as usize) {
            Some(&t) => t,
            None => {
                self.table.per_step_ns(tokens) + self.layers * self.table.layer_dense_ns(tokens)
            }
        }
    }

    /// The LM head and sampler over `seqs` sequences, ns.
    fn head_ns(&self, seqs: u64) -> f64 {
        match self.head_by_seqs.get(seqs as usize) {
            Some(&t) => t,
            None => self.table.per_sequence_ns(seqs),
        }
    }

    /// The all-reduces of one layer, ns.
    fn all_reduce_ns(&self, tokens: u64) -> f64 {
        self.all_reduce
            .as_ref()
            .map_or(0.0, |c| 2.0 * c.at(tokens as f64 * self.hidden_bytes))
    }
}

impl StepTime for OperatorStepTime {
    fn sample_ns(&self, step: &StepBatch, _rng: &mut SimRng) -> u64 {
        self.mean_ns(step).round().max(1.0) as u64
    }

    fn mean_ns(&self, step: &StepBatch) -> f64 {
        // The token-linear operators see a PIECEWISE graph's padding tokens; attention and the
        // LM head do not.
        let tokens = step.computed_tokens();
        self.dense_ns(tokens)
            + self.layers * (self.attention_ns(step) + self.all_reduce_ns(tokens))
            + self.moe_layers * self.moe_ns(tokens)
            + self.head_ns(u64::from(step.seqs()))
    }

    fn may_extrapolate(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::PathBuf;

    use super::*;
    use crate::timing::model_config::MoeShape;
    use crate::timing::operators::{AttentionGrid, MoeGrid, Operator, TableFormat};

    /// A line through (0, `at0`) and (4096, `at0 + 4096 * slope`).
    fn line(at0: f64, slope: f64) -> Curve {
        Curve::new(vec![(0.0, at0), (4096.0, at0 + 4096.0 * slope)]).unwrap()
    }

    /// A made-up table whose times are easy to add by hand: every per-layer operator 10 ns +
    /// 1 ns per token, the embedding and final norm 5 ns each, the head 100 ns + 2 ns per
    /// sequence; attention on a small grid; times in ns.
    fn table(tensor_parallel: u32) -> OperatorTable {
        let mut operators = BTreeMap::new();
        for op in [Operator::QkvProj, Operator::OProj, Operator::Layernorm] {
            operators.insert(op, line(10.0, 1.0));
        }
        operators.insert(Operator::Embedding, line(5.0, 0.0));
        operators.insert(Operator::FinalLayernorm, line(5.0, 0.0));
        operators.insert(Operator::LmHead, line(100.0, 2.0));
        let mut rows = Vec::new();
        for chunk in [0, 16, 64] {
            for kv_prefill in [0, 64] {
                for n in [0, 1, 8] {
                    for kv in [0, 16, 1024] {
                        if (chunk == 0 && kv_prefill > 0) || (n == 0) != (kv == 0) {
                            continue;
                        }
                        if chunk == 0 && n == 0 {
                            continue;
                        }
                        // A launch of 3 ns plus the work: chunk x (history + chunk) and n x kv.
                        let work = chunk * (kv_prefill + chunk) + n * kv;
                        rows.push(([chunk, kv_prefill, n, kv], 3.0 + work as f64 / 100.0));
                    }
                }
            }
        }
        OperatorTable {
            source: PathBuf::from("made-up"),
            format: TableFormat::LlmServingSim,
            gpu: "made-up".into(),
            model: String::new(),
            tensor_parallel,
            operators,
            attention: Some(AttentionGrid::new(rows).unwrap()),
            moe: None,
            decode_skew_alpha: None,
            all_reduce: None,
        }
    }

    fn model(layers: u32) -> ModelConfig {
        ModelConfig {
            layers,
            hidden_size: 1024,
            ..ModelConfig::preset("llama-3.1-8b").unwrap()
        }
    }

    fn decode(n: u32, kv: u64) -> StepBatch {
        StepBatch {
            decode_seqs: n,
            decode_kv_tokens: u64::from(n) * kv,
            decode_kv_max: kv,
            ..StepBatch::default()
        }
    }

    #[test]
    fn a_step_is_the_per_step_operators_plus_layers_times_a_layer_plus_the_head() {
        let m = OperatorStepTime::new(Arc::new(table(1)), &model(4), None, 1).unwrap();
        // 8 decodes at context 1024: 8 tokens; the layer's qkv, o and two norms at 8 tokens.
        let layer_dense = 2.0 * 18.0 + 2.0 * 18.0;
        let attention = 3.0 + 8.0 * 1024.0 / 100.0;
        let head = 100.0 + 2.0 * 8.0;
        let expected = 10.0 + 4.0 * (layer_dense + attention) + head;
        let got = m.mean_ns(&decode(8, 1024));
        assert!(
            (got - expected).abs() < 1e-9,
            "expected {expected}, got {got}"
        );
        assert_eq!(
            m.sample_ns(&decode(8, 1024), &mut rand::SeedableRng::seed_from_u64(1)),
            got.round() as u64
        );
    }

    #[test]
    fn a_mixed_steps_graph_padding_pays_the_dense_operators_only() {
        let m = OperatorStepTime::new(Arc::new(table(1)), &model(4), None, 1).unwrap();
        let real = StepBatch {
            prefill_tokens: 16,
            prefill_attention_tokens2: 16 * 16,
            prefill_seqs: 1,
            ..decode(8, 16)
        };
        let padded = StepBatch {
            padding_tokens: 8,
            ..real
        };
        assert_eq!(m.attention_ns(&padded), m.attention_ns(&real), "attention");
        // Eight more tokens through the layer's qkv, o and two norms (1 ns each per token);
        // the embedding, final norm and head do not grow.
        let expected = 4.0 * 4.0 * 8.0;
        let got = m.mean_ns(&padded) - m.mean_ns(&real);
        assert!(
            (got - expected).abs() < 1e-9,
            "expected {expected} ns more, got {got}"
        );
    }

    #[test]
    fn further_prefill_chunks_pay_their_attention_but_not_the_launch_again() {
        let m = OperatorStepTime::new(Arc::new(table(1)), &model(1), None, 1).unwrap();
        let chunks = |n: u32| StepBatch {
            prefill_tokens: 64 * u64::from(n),
            prefill_attention_tokens2: 64 * 64 * u64::from(n),
            prefill_seqs: n,
            ..StepBatch::default()
        };
        let attention = |n: u32| {
            let s = chunks(n);
            m.attention_ns(&s)
        };
        let one = 3.0 + 64.0 * 64.0 / 100.0;
        assert!((attention(1) - one).abs() < 1e-9, "{}", attention(1));
        // The launch is the table's smallest time: one decode at context 16.
        let launch = 3.0 + 16.0 / 100.0;
        let three = one + 2.0 * (one - launch);
        assert!(
            (attention(3) - three).abs() < 1e-9,
            "three chunks of 64: expected {three}, got {}; one chunk of 192 would cost {}",
            attention(3),
            3.0 + 192.0 * 192.0 / 100.0
        );
    }

    #[test]
    fn uneven_decode_contexts_move_toward_the_longest_by_the_bundles_alpha() {
        let mut t = table(1);
        let uneven = StepBatch {
            decode_seqs: 8,
            decode_kv_tokens: 8 * 16,
            decode_kv_max: 1024,
            ..StepBatch::default()
        };
        let even = OperatorStepTime::new(Arc::new(t.clone()), &model(1), None, 1).unwrap();
        t.decode_skew_alpha = Some(0.25);
        let skewed = OperatorStepTime::new(Arc::new(t), &model(1), None, 1).unwrap();
        let (at_mean, at_max) = (3.0 + 8.0 * 16.0 / 100.0, 3.0 + 8.0 * 1024.0 / 100.0);
        assert!((even.attention_ns(&uneven) - at_mean).abs() < 1e-9);
        let expected = at_mean + 0.25 * (at_max - at_mean);
        assert!((skewed.attention_ns(&uneven) - expected).abs() < 1e-9);
    }

    #[test]
    fn tensor_parallelism_adds_two_all_reduces_of_the_hidden_state_per_layer() {
        let e = OperatorStepTime::new(Arc::new(table(2)), &model(4), None, 1).unwrap_err();
        assert!(e.to_string().contains("step_time.all_reduce"), "{e}");
        // 1 us + 1 ns per byte; 8 tokens x 1024 x 2 bytes = 16 KiB per all-reduce.
        let all_reduce = Curve::new(vec![(0.0, 1000.0), (1e6, 1000.0 + 1e6)]).unwrap();
        let tp1 = OperatorStepTime::new(Arc::new(table(1)), &model(4), Some(all_reduce.clone()), 1)
            .unwrap();
        let tp2 =
            OperatorStepTime::new(Arc::new(table(2)), &model(4), Some(all_reduce), 1).unwrap();
        let step = decode(8, 1024);
        let extra = 4.0 * 2.0 * (1000.0 + 8.0 * 1024.0 * 2.0);
        assert!((tp2.mean_ns(&step) - tp1.mean_ns(&step) - extra).abs() < 1e-6);
    }

    #[test]
    fn a_mixture_of_experts_needs_the_moe_table_and_charges_its_moe_layers() {
        let moe_model = ModelConfig {
            moe: Some(MoeShape {
                num_experts: 8,
                experts_per_token: 2,
                expert_intermediate_size: 1024,
                shared_experts: 0,
                shared_intermediate_size: 0,
                moe_layers: 3,
            }),
            ..model(4)
        };
        let e = OperatorStepTime::new(Arc::new(table(1)), &moe_model, None, 1).unwrap_err();
        assert!(e.to_string().contains("moe.csv"), "{e}");
        let mut t = table(1);
        // 1000 ns per activated expert plus 1 ns per token on the rank.
        let rows = [1u64, 8, 64]
            .iter()
            .flat_map(|&tok| [1u64, 8].map(|e| ([tok, e], 1000.0 * e as f64 + tok as f64)))
            .collect();
        t.moe = Some(MoeGrid::new(rows).unwrap());
        let dense = OperatorStepTime::new(Arc::new(table(1)), &model(4), None, 1).unwrap();
        let m = OperatorStepTime::new(Arc::new(t), &moe_model, None, 1).unwrap();
        // One decode: one token, 2 of 8 experts touched, on the one rank.
        let one = m.mean_ns(&decode(1, 16)) - dense.mean_ns(&decode(1, 16));
        assert!((one - 3.0 * (2000.0 + 1.0)).abs() < 1e-6, "{one}");
        // 64 tokens touch nearly all 8 experts: 8 * (1 - (3/4)^64).
        let many = m.mean_ns(&decode(64, 16)) - dense.mean_ns(&decode(64, 16));
        assert!((many - 3.0 * (8000.0 + 64.0)).abs() < 1e-6, "{many}");
    }

    #[test]
    fn a_table_of_another_model_is_refused_naming_both() {
        let mut t = table(1);
        t.model = "Qwen/Qwen3-32B".into();
        let e = OperatorStepTime::new(Arc::new(t.clone()), &model(4), None, 1).unwrap_err();
        assert!(
            e.to_string().contains("Qwen/Qwen3-32B") && e.to_string().contains("Llama-3.1-8B"),
            "{e}"
        );
        let qwen = ModelConfig::preset("qwen3-32b").unwrap();
        assert!(OperatorStepTime::new(Arc::new(t), &qwen, None, 1).is_ok());
        assert!(same_model(
            "microsoft/Phi-mini-MoE-instruct",
            "Phi-mini-MoE"
        ));
        assert!(same_model("meta-llama/Llama-3.1-8B", "config"));
    }

    #[test]
    fn precomputed_dense_times_equal_the_tables_sums() {
        let t = Arc::new(table(1));
        let m = OperatorStepTime::new(Arc::clone(&t), &model(4), None, 1).unwrap();
        for tokens in [0u64, 1, 17, 4096, 5000] {
            let direct = t.per_step_ns(tokens) + 4.0 * t.layer_dense_ns(tokens);
            assert!(
                (m.dense_ns(tokens) - direct).abs() < 1e-9,
                "{tokens} tokens"
            );
        }
    }
}
