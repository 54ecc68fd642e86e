//! The one internal form of a measured operator table, whichever profiler wrote it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::curve::Curve;
use super::grid::{AttentionGrid, MoeGrid};

/// A canonical operator of a decoder layer, named as vLLM's attributes are (LLMServingSim's
/// names; Vidur's map onto them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operator {
    /// Token embedding lookup (once per step).
    Embedding,
    /// RMSNorm of the residual stream (twice per layer: before attention and before the MLP).
    Layernorm,
    /// The fused query/key/value projection.
    QkvProj,
    /// Per-head RMSNorm of queries and keys (Qwen3).
    QkNorm,
    /// Rotary position embedding.
    RotaryEmb,
    /// The attention output projection.
    OProj,
    /// The fused gate and up projection of the MLP.
    GateUpProj,
    /// The MLP's activation (SiLU and multiply).
    ActFn,
    /// The MLP's down projection.
    DownProj,
    /// A residual add (twice per layer) where the profiler times it apart (Vidur).
    Add,
    /// The final RMSNorm (once per step).
    FinalLayernorm,
    /// Logits of the sampled positions (once per step, by sequences).
    LmHead,
    /// Sampling (once per step, by sequences).
    Sampler,
}

/// How often an operator runs in a step, and what its size axis counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperatorScope {
    /// Once per step, over the step's tokens.
    PerStep,
    /// `calls` times per layer, over the step's tokens.
    PerLayer {
        /// Calls per layer.
        calls: u32,
    },
    /// Once per step, over the step's sequences.
    PerSequence,
}

impl Operator {
    /// Every operator, in the order a layer runs them.
    pub const ALL: [Operator; 13] = [
        Operator::Embedding,
        Operator::Layernorm,
        Operator::QkvProj,
        Operator::QkNorm,
        Operator::RotaryEmb,
        Operator::OProj,
        Operator::GateUpProj,
        Operator::ActFn,
        Operator::DownProj,
        Operator::Add,
        Operator::FinalLayernorm,
        Operator::LmHead,
        Operator::Sampler,
    ];

    /// The canonical name (LLMServingSim's `layer` column).
    pub fn name(self) -> &'static str {
        match self {
            Operator::Embedding => "embedding",
            Operator::Layernorm => "layernorm",
            Operator::QkvProj => "qkv_proj",
            Operator::QkNorm => "qk_norm",
            Operator::RotaryEmb => "rotary_emb",
            Operator::OProj => "o_proj",
            Operator::GateUpProj => "gate_up_proj",
            Operator::ActFn => "act_fn",
            Operator::DownProj => "down_proj",
            Operator::Add => "add",
            Operator::FinalLayernorm => "final_layernorm",
            Operator::LmHead => "lm_head",
            Operator::Sampler => "sampler",
        }
    }

    /// The operator with canonical name `name`, or `None`.
    pub fn from_name(name: &str) -> Option<Operator> {
        Operator::ALL.into_iter().find(|op| op.name() == name)
    }

    /// How often it runs in a step.
    pub fn scope(self) -> OperatorScope {
        match self {
            Operator::Embedding | Operator::FinalLayernorm => OperatorScope::PerStep,
            Operator::LmHead | Operator::Sampler => OperatorScope::PerSequence,
            Operator::Layernorm | Operator::Add => OperatorScope::PerLayer { calls: 2 },
            _ => OperatorScope::PerLayer { calls: 1 },
        }
    }
}

/// Which profiler wrote a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableFormat {
    /// An LLMServingSim profiler bundle (`meta.yaml`, `tpN/*.csv`).
    LlmServingSim,
    /// Vidur's profiling tables (`mlp.csv`, `all_reduce.csv`).
    Vidur,
}

/// Measured per-operator times of one model on one GPU at one tensor-parallel degree (the times
/// of one rank), whichever profiler measured them. Times are nanoseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorTable {
    /// The folder (or file) read.
    pub source: PathBuf,
    /// Which profiler wrote it.
    pub format: TableFormat,
    /// The GPU, as the profiler recorded it (`"NVIDIA GeForce RTX 4090"`; Vidur's folder name).
    pub gpu: String,
    /// The model, as the profiler recorded it (`"meta-llama/Llama-3.1-8B"`).
    pub model: String,
    /// The tensor-parallel degree these times are for.
    pub tensor_parallel: u32,
    /// The non-attention operators measured, by tokens (by sequences for
    /// [`OperatorScope::PerSequence`]).
    pub operators: BTreeMap<Operator, Curve>,
    /// The attention kernel, when measured.
    pub attention: Option<AttentionGrid>,
    /// The mixture-of-experts block, when measured.
    pub moe: Option<MoeGrid>,
    /// Where a decode batch of mixed context lengths falls between the time at its mean context
    /// and at its longest: `t = t(mean) + alpha * (t(max) - t(mean))`, when the bundle measured
    /// it.
    pub decode_skew_alpha: Option<f64>,
    /// One all-reduce across this table's `tensor_parallel` ranks, by message bytes, when
    /// measured.
    pub all_reduce: Option<Curve>,
}

impl OperatorTable {
    /// One decoder layer's operators other than attention (and a mixture of experts' block) at
    /// `tokens` tokens, ns: each [`OperatorScope::PerLayer`] operator's time times its calls per
    /// layer, summed. 0 when none is measured.
    pub fn layer_dense_ns(&self, tokens: u64) -> f64 {
        self.sum_scope(tokens, |scope| match scope {
            OperatorScope::PerLayer { calls } => calls,
            _ => 0,
        })
    }

    /// The once-per-step operators over the step's `tokens` (embedding and final layernorm), ns.
    pub fn per_step_ns(&self, tokens: u64) -> f64 {
        self.sum_scope(tokens, |scope| u32::from(scope == OperatorScope::PerStep))
    }

    /// The per-sequence operators over the step's `sequences` (lm_head and sampler), ns.
    pub fn per_sequence_ns(&self, sequences: u64) -> f64 {
        self.sum_scope(sequences, |scope| {
            u32::from(scope == OperatorScope::PerSequence)
        })
    }

    /// Sum over the operators of `calls(scope) x time at size`, ns.
    fn sum_scope(&self, size: u64, calls: impl Fn(OperatorScope) -> u32) -> f64 {
        self.operators
            .iter()
            .filter_map(|(op, curve)| match calls(op.scope()) {
                0 => None,
                n => Some(f64::from(n) * curve.at(size as f64)),
            })
            .sum()
    }
}

/// `dir` holds neither kind of table.
/// Why an operator table could not be read. Each names the file, and the row and column where
/// there is one, and says what would fix it.
#[derive(Debug, thiserror::Error)]
pub enum OperatorTableError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A value in a file is not valid.
    #[error("{path}: row {row}, column {column:?}: {reason}")]
    Value {
        /// The file.
        path: PathBuf,
        /// The 1-based line number (the header is line 1).
        row: usize,
        /// The column or key.
        column: String,
        /// What is wrong and what would fix it.
        reason: String,
    },
    /// Something the table needs is not there.
    #[error("{path}: {what}; {fix}")]
    Missing {
        /// The file or folder.
        path: PathBuf,
        /// What is missing.
        what: String,
        /// What would fix it.
        fix: String,
    },
}
