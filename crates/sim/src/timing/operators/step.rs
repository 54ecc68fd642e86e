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
//! top, and CUDA graphs, which the profilers' eager runs do not use, are not modelled.

use std::sync::Arc;

use super::curve::Curve;
use super::table::OperatorTable;
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
}

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
        let attention = table.attention.as_ref().ok_or_else(|| {
            OperatorStepError::Incomplete(format!(
                "{source} has no attention times (attention.csv): compose steps from an \
                 LLMServingSim bundle, which measures them"
            ))
        })?;
        let attention_launch_ns = attention
            .rows()
            .iter()
            .map(|&(_, t)| t)
            .fold(f64::INFINITY, f64::min);
        let all_reduce = all_reduce.or_else(|| table.all_reduce.clone());
        if table.tensor_parallel > 1 && all_reduce.is_none() {
            return Err(OperatorStepError::Incomplete(format!(
                "{source} is measured at tensor_parallel {} but nothing gives the all-reduce \
                 time: give step_time.all_reduce = \"PATH/all_reduce.csv\" (Vidur's format, \
                 measured by nccl-tests or a profiler on this interconnect)",
                table.tensor_parallel
            )));
        }
        let moe = match &model.moe {
            None => None,
            Some(shape) => {
                if table.moe.is_none() {
                    return Err(OperatorStepError::Incomplete(format!(
                        "{} is a mixture of experts but {source} has no moe.csv: profile the \
                         model's MoE block",
                        model.name
                    )));
                }
                Some(MoeRouting {
                    experts: f64::from(shape.num_experts),
                    experts_per_token: f64::from(shape.experts_per_token),
                    expert_parallel: f64::from(expert_parallel.max(1)),
                })
            }
        };
        Ok(OperatorStepTime {
            layers: f64::from(model.layers),
            moe_layers: model.moe.as_ref().map_or(0.0, |m| f64::from(m.moe_layers)),
            hidden_bytes: f64::from(model.hidden_size) * ACTIVATION_BYTES,
            all_reduce: if table.tensor_parallel > 1 {
                all_reduce
            } else {
                None
            },
            moe,
            attention_launch_ns: if attention_launch_ns.is_finite() {
                attention_launch_ns
            } else {
                0.0
            },
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
        let tokens = step.batched_tokens();
        let layer = self.table.layer_dense_ns(tokens)
            + self.attention_ns(step)
            + self.all_reduce_ns(tokens);
        self.table.per_step_ns(tokens)
            + self.layers * layer
            + self.moe_layers * self.moe_ns(tokens)
            + self.table.per_sequence_ns(u64::from(step.seqs()))
    }

    fn may_extrapolate(&self) -> bool {
        false
    }
}
