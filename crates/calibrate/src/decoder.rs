//! Decoder calibration: measures the step times of a generative (decoder-only) ONNX model with
//! KV-cache inputs, and writes a [`StepProfile`] that the simulator's
//! [`ProfileStepTime`](capsim_sim::timing::step_profile::ProfileStepTime) samples from.
//!
//! A decoder is recognised by its inputs: one integer token input `[batch, seq]` and pairs of
//! float past key/value inputs `[batch, kv_heads, past_len, head_dim]` whose names start with
//! `past` (`past_key_0`, `past_key_values.0.key`, ...). An `attention_mask` (`[batch, past_len +
//! seq]`, all ones) and `position_ids` (`[batch, seq]`, `past_len..past_len + seq`) are filled
//! when present. Two kinds of step are measured:
//!
//! - prefill: one sequence of `N` prompt tokens with an empty past, for each `--prefill N`;
//! - decode: `B` sequences each feeding one token against a past of `C` tokens, for each
//!   (`--decode-batch B`, `--context C`).
//!
//! Each point is measured as the batch calibration does: warm-up runs, then timed runs until p50
//! and p99 settle (`convergence_tolerance`) or the iteration cap. Inputs are built once per
//! point (token ids uniform below the vocabulary, past keys and values standard normal) and
//! reused by every run: a server's KV cache also sits in memory between steps.

use std::path::PathBuf;
use std::time::Instant;

use capsim_sim::rng::SimRng;
use capsim_sim::timing::profile::QUANTILE_LEVELS;
use capsim_sim::timing::step_profile::{
    DecodePoint, DecoderDescription, PrefillPoint, STEP_PROFILE_FORMAT_VERSION, STEP_PROFILE_KIND,
    StepCalibrationSettings, StepProfile,
};
use ort::session::Session;
use ort::value::{DynValue, Tensor, ValueType};
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use crate::model::{Dim, ElementType, InputSpec};
use crate::{CalibrateError, ProviderChoice, ProviderDecision, Runtime, measure};

/// What to measure and how.
#[derive(Debug, Clone, PartialEq)]
pub struct DecoderConfig {
    /// The ONNX decoder.
    pub model: PathBuf,
    /// Execution provider.
    pub provider: ProviderChoice,
    /// Prompt lengths of the prefill points (each >= 1).
    pub prefill_tokens: Vec<u32>,
    /// Batch sizes of the decode points (each >= 1).
    pub decode_batches: Vec<u32>,
    /// Past lengths of the decode points (each >= 1).
    pub contexts: Vec<u32>,
    /// Untimed runs before each point.
    pub warmup_iters: u32,
    /// Most timed runs per point.
    pub max_iters: u32,
    /// Fewest timed runs before a point may stop early.
    pub min_iters: u32,
    /// Early stop when p50 and p99 move by less than this fraction between checks.
    pub convergence_tolerance: f64,
    /// Intra-op threads; 0 for ONNX Runtime's default.
    pub intra_threads: u32,
    /// Token ids are drawn below this and below the model's vocabulary (the last dimension of
    /// its `logits` output, when fixed); `None`: below the model's vocabulary, which must then
    /// be known.
    pub vocab: Option<u64>,
    /// Seed of the input data.
    pub seed: u64,
    /// Idle wait before every run, ns (0: back to back).
    pub idle_gap_ns: u64,
}

impl DecoderConfig {
    /// Defaults: prefill 16, 64, 256; decode batches 1, 4, 16 at contexts 64, 256; the batch
    /// calibration's warm-up, iteration and tolerance defaults; vocabulary from the model.
    pub fn new(model: PathBuf) -> DecoderConfig {
        DecoderConfig {
            model,
            provider: ProviderChoice::Auto,
            prefill_tokens: vec![16, 64, 256],
            decode_batches: vec![1, 4, 16],
            contexts: vec![64, 256],
            warmup_iters: 10,
            max_iters: 200,
            min_iters: 60,
            convergence_tolerance: 0.03,
            intra_threads: 0,
            vocab: None,
            seed: 1,
            idle_gap_ns: 0,
        }
    }

    fn check(&self) -> Result<(), CalibrateError> {
        let bad = |m: &str| Err(CalibrateError::Settings(m.to_string()));
        for (values, flag, example) in [
            (&self.prefill_tokens, "--prefill", "16,64,256"),
            (&self.decode_batches, "--decode-batch", "1,4,16"),
            (&self.contexts, "--context", "64,256"),
        ] {
            if values.is_empty() || values.contains(&0) {
                return bad(&format!(
                    "{flag} needs one or more values >= 1, for example {flag} {example}"
                ));
            }
        }
        if self.max_iters == 0 {
            return bad("--iters must be >= 1");
        }
        if self.vocab == Some(0) {
            return bad("--vocab must be >= 1");
        }
        if self.convergence_tolerance.is_nan() || self.convergence_tolerance < 0.0 {
            return bad("the convergence tolerance must be >= 0");
        }
        Ok(())
    }
}

/// One step shape being measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepShape {
    /// One sequence of `tokens` prompt tokens, empty past.
    Prefill {
        /// Prompt tokens.
        tokens: u32,
    },
    /// `batch` sequences decoding one token each against `context` past tokens.
    Decode {
        /// Sequences.
        batch: u32,
        /// Past tokens per sequence.
        context: u32,
    },
}

impl StepShape {
    fn dims(self) -> (u32, u32, u32) {
        match self {
            StepShape::Prefill { tokens } => (1, tokens, 0),
            StepShape::Decode { batch, context } => (batch, 1, context),
        }
    }
}

impl std::fmt::Display for StepShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StepShape::Prefill { tokens } => write!(f, "prefill {tokens} tokens"),
            StepShape::Decode { batch, context } => {
                write!(f, "decode batch {batch}, context {context}")
            }
        }
    }
}

/// What [`calibrate_decoder`] reports as it goes.
#[derive(Debug)]
pub enum DecoderProgress<'a> {
    /// The session is open; `points` points follow.
    Started {
        /// Points to measure.
        points: usize,
        /// Provider in use, and why not CUDA under `auto`.
        decision: &'a ProviderDecision,
    },
    /// A point starts.
    PointStarted(StepShape),
    /// A point is done: its timed runs and whether it converged early.
    PointFinished {
        /// The point.
        shape: StepShape,
        /// Timed runs.
        iterations: u32,
        /// Whether p50 and p99 settled before the cap.
        converged: bool,
    },
}

/// How a decoder's inputs are filled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecoderLayout {
    /// The token-id input and its element type (int64 or int32).
    pub token_input: (String, ElementType),
    /// Past key/value inputs, in the model's order.
    pub kv_inputs: Vec<String>,
    /// Key/value heads.
    pub kv_heads: u32,
    /// Head width.
    pub head_dim: u32,
    /// `attention_mask` input, if any, and its element type.
    pub attention_mask: Option<(String, ElementType)>,
    /// `position_ids` input, if any, and its element type.
    pub position_ids: Option<(String, ElementType)>,
}

/// Whether the model's inputs look like a decoder with a KV cache: some 4-dimensional input
/// whose name starts with `past`.
pub fn is_decoder(inputs: &[InputSpec]) -> bool {
    inputs
        .iter()
        .any(|i| i.name.starts_with("past") && i.dims.len() == 4)
}

fn unsupported(model: &std::path::Path, input: &str, reason: String) -> CalibrateError {
    CalibrateError::UnsupportedInput {
        model: model.to_path_buf(),
        input: input.to_string(),
        reason,
    }
}

/// Reads the decoder's layout from its inputs; the error names the input that does not fit.
pub fn layout(
    inputs: &[InputSpec],
    model: &std::path::Path,
) -> Result<DecoderLayout, CalibrateError> {
    let mut token_input = None;
    let mut kv_inputs = Vec::new();
    let mut kv_shape: Option<(u64, u64)> = None;
    let mut attention_mask = None;
    let mut position_ids = None;
    let integer = |t: ElementType| matches!(t, ElementType::Int64 | ElementType::Int32);
    for input in inputs {
        let name = input.name.as_str();
        if name.starts_with("past") {
            if input.element_type != ElementType::Float32 {
                return Err(unsupported(
                    model,
                    name,
                    format!(
                        "past key/value inputs must be float32, not {}",
                        input.element_type.name()
                    ),
                ));
            }
            let shape = match input.dims.as_slice() {
                [
                    Dim::Dynamic(_),
                    Dim::Fixed(heads),
                    Dim::Dynamic(_),
                    Dim::Fixed(width),
                ] => (*heads, *width),
                _ => {
                    return Err(unsupported(
                        model,
                        name,
                        format!(
                            "past key/value inputs must have shape [batch, kv_heads, past_len, head_dim] with fixed heads and head width, not [{}]",
                            input.shape_strings().join(", ")
                        ),
                    ));
                }
            };
            if kv_shape.is_some_and(|s| s != shape) {
                return Err(unsupported(
                    model,
                    name,
                    "past key/value inputs differ in heads or head width".into(),
                ));
            }
            kv_shape = Some(shape);
            kv_inputs.push(input.name.clone());
        } else if name == "attention_mask" && integer(input.element_type) && input.dims.len() == 2 {
            attention_mask = Some((input.name.clone(), input.element_type));
        } else if name == "position_ids" && integer(input.element_type) && input.dims.len() == 2 {
            position_ids = Some((input.name.clone(), input.element_type));
        } else if integer(input.element_type) && input.dims.len() == 2 && token_input.is_none() {
            token_input = Some((input.name.clone(), input.element_type));
        } else {
            return Err(unsupported(
                model,
                name,
                "a decoder calibration fills one token-id input [batch, seq], past key/value inputs \
                 (names starting with `past`), attention_mask and position_ids; this input is none of those"
                    .into(),
            ));
        }
    }
    let Some((heads, width)) = kv_shape else {
        return Err(CalibrateError::Settings(format!(
            "model {} has no past key/value inputs (4-dimensional inputs named past...), so it is not a decoder with a KV cache; calibrate it without --decoder",
            model.display()
        )));
    };
    if kv_inputs.len() % 2 != 0 {
        return Err(CalibrateError::Settings(format!(
            "model {} has {} past key/value inputs, not pairs of one key and one value per layer",
            model.display(),
            kv_inputs.len()
        )));
    }
    let Some(token_input) = token_input else {
        return Err(CalibrateError::Settings(format!(
            "model {} has no integer token-id input [batch, seq]",
            model.display()
        )));
    };
    Ok(DecoderLayout {
        token_input,
        kv_inputs,
        kv_heads: heads as u32,
        head_dim: width as u32,
        attention_mask,
        position_ids,
    })
}

/// The last dimension of a `logits` output, when it is fixed: the vocabulary.
fn vocabulary_of(session: &Session) -> Option<u64> {
    session.outputs().iter().find_map(|outlet| {
        if outlet.name() != "logits" {
            return None;
        }
        match outlet.dtype() {
            ValueType::Tensor { shape, .. } => shape.last().copied().filter(|&d| d > 0),
            _ => None,
        }
        .map(|d| d as u64)
    })
}

fn integer_tensor(
    element_type: ElementType,
    shape: Vec<i64>,
    values: Vec<i64>,
) -> ort::Result<DynValue> {
    Ok(match element_type {
        ElementType::Int32 => {
            let data: Vec<i32> = values.into_iter().map(|v| v as i32).collect();
            Tensor::from_array((shape, data))?.into_dyn()
        }
        _ => Tensor::from_array((shape, values))?.into_dyn(),
    })
}

/// Builds the inputs of one step shape.
fn build_step(
    layout: &DecoderLayout,
    shape: StepShape,
    vocab: u64,
    rng: &mut SimRng,
) -> ort::Result<Vec<(String, DynValue)>> {
    let (batch, seq, past) = shape.dims();
    let (b, s, p) = (i64::from(batch), i64::from(seq), i64::from(past));
    let mut values = Vec::with_capacity(layout.kv_inputs.len() + 3);
    let ids: Vec<i64> = (0..b * s)
        .map(|_| rng.random_range(0..vocab) as i64)
        .collect();
    let (name, ty) = &layout.token_input;
    values.push((name.clone(), integer_tensor(*ty, vec![b, s], ids)?));
    let kv_shape = vec![b, i64::from(layout.kv_heads), p, i64::from(layout.head_dim)];
    let kv_count = (b * p) as usize * (layout.kv_heads * layout.head_dim) as usize;
    for name in &layout.kv_inputs {
        let data: Vec<f32> = (0..kv_count).map(|_| StandardNormal.sample(rng)).collect();
        values.push((
            name.clone(),
            Tensor::from_array((kv_shape.clone(), data))?.into_dyn(),
        ));
    }
    if let Some((name, ty)) = &layout.attention_mask {
        let ones = vec![1; (b * (p + s)) as usize];
        values.push((name.clone(), integer_tensor(*ty, vec![b, p + s], ones)?));
    }
    if let Some((name, ty)) = &layout.position_ids {
        let positions: Vec<i64> = (0..b).flat_map(|_| p..p + s).collect();
        values.push((name.clone(), integer_tensor(*ty, vec![b, s], positions)?));
    }
    Ok(values)
}

/// Timed runs of one step shape: its latencies (ns) and whether they converged.
fn measure_step(
    session: &mut Session,
    values: &[(String, DynValue)],
    config: &DecoderConfig,
    shape: StepShape,
) -> Result<(Vec<u64>, bool), CalibrateError> {
    let run_error =
        |reason: String| CalibrateError::Settings(format!("running {shape} failed: {reason}"));
    let check_every = (config.min_iters / 2).max(10);
    let mut convergence =
        measure::Convergence::new(config.min_iters, check_every, config.convergence_tolerance);
    let mut latency_ns = Vec::with_capacity(config.max_iters as usize);
    for iteration in 0..config.warmup_iters + config.max_iters {
        if config.idle_gap_ns > 0 {
            std::thread::sleep(std::time::Duration::from_nanos(config.idle_gap_ns));
        }
        let inputs: Vec<(&str, &DynValue)> = values.iter().map(|(n, v)| (n.as_str(), v)).collect();
        let start = Instant::now();
        let outputs = session.run(inputs).map_err(|e| run_error(e.to_string()))?;
        let ran = start.elapsed();
        drop(outputs);
        if iteration < config.warmup_iters {
            continue;
        }
        latency_ns.push(ran.as_nanos() as u64);
        if convergence.converged(&latency_ns) {
            return Ok((latency_ns, true));
        }
    }
    Ok((latency_ns, false))
}

/// Measures the decoder's prefill and decode steps and returns the step profile.
pub fn calibrate_decoder(
    runtime: &Runtime,
    config: &DecoderConfig,
    progress: &mut dyn FnMut(DecoderProgress<'_>),
) -> Result<StepProfile, CalibrateError> {
    config.check()?;
    let date = jiff::Timestamp::now().to_string();
    let (mut session, decision) =
        runtime.open_session(&config.model, config.provider, config.intra_threads)?;
    let inputs = crate::model::inputs_of(&session, &config.model)?;
    let layout = layout(&inputs, &config.model)?;
    let vocab = vocabulary(config, &session)?;
    let shapes = step_shapes(config);
    progress(DecoderProgress::Started {
        points: shapes.len(),
        decision: &decision,
    });
    let (prefill, decode) = measure_steps(&mut session, &layout, shapes, config, vocab, progress)?;
    let profile = StepProfile {
        format_version: STEP_PROFILE_FORMAT_VERSION,
        kind: STEP_PROFILE_KIND.to_string(),
        model: crate::model_description(&config.model, &inputs),
        decoder: DecoderDescription {
            token_input: layout.token_input.0.clone(),
            layers: (layout.kv_inputs.len() / 2) as u32,
            kv_heads: layout.kv_heads,
            head_dim: layout.head_dim,
            kv_element_bytes: 4,
        },
        environment: crate::environment(runtime, decision.provider, config.intra_threads, date),
        settings: StepCalibrationSettings {
            warmup_iters: config.warmup_iters,
            max_iters: config.max_iters,
            min_iters: config.min_iters,
            convergence_tolerance: config.convergence_tolerance,
            vocab,
            seed: config.seed,
            idle_gap_ns: config.idle_gap_ns,
        },
        quantile_levels: QUANTILE_LEVELS.to_vec(),
        prefill,
        decode,
    };
    profile.validate().map_err(|reason| {
        CalibrateError::Settings(format!(
            "internal error: decoder calibration produced an invalid step profile: {reason}"
        ))
    })?;
    Ok(profile)
}

/// The vocabulary token ids are drawn below: the smaller of `--vocab` and the model's `logits`
/// dimension, whichever is known; an error when neither is.
fn vocabulary(config: &DecoderConfig, session: &Session) -> Result<u64, CalibrateError> {
    match (config.vocab, vocabulary_of(session)) {
        (Some(given), Some(model)) => Ok(given.min(model)),
        (Some(v), None) | (None, Some(v)) => Ok(v),
        (None, None) => Err(CalibrateError::Settings(format!(
            "model {} has no `logits` output with a fixed vocabulary dimension; give --vocab N (token ids are drawn below N)",
            config.model.display()
        ))),
    }
}

/// The steps to measure, in order: each prefill size, then each decode batch at each context
/// (every list sorted, without repeats).
fn step_shapes(config: &DecoderConfig) -> Vec<StepShape> {
    let sorted = |values: &[u32]| {
        let mut v = values.to_vec();
        v.sort_unstable();
        v.dedup();
        v
    };
    let batches = sorted(&config.decode_batches);
    let mut shapes: Vec<StepShape> = sorted(&config.prefill_tokens)
        .iter()
        .map(|&tokens| StepShape::Prefill { tokens })
        .collect();
    for &context in &sorted(&config.contexts) {
        for &batch in &batches {
            shapes.push(StepShape::Decode { batch, context });
        }
    }
    shapes
}

/// Measures each of `shapes` in order (inputs drawn with the config's seed), reporting each to
/// `progress`: the prefill points and the decode points.
fn measure_steps(
    session: &mut Session,
    layout: &DecoderLayout,
    shapes: Vec<StepShape>,
    config: &DecoderConfig,
    vocab: u64,
    progress: &mut dyn FnMut(DecoderProgress<'_>),
) -> Result<(Vec<PrefillPoint>, Vec<DecodePoint>), CalibrateError> {
    let mut rng = SimRng::seed_from_u64(config.seed);
    let mut prefill = Vec::new();
    let mut decode = Vec::new();
    for shape in shapes {
        progress(DecoderProgress::PointStarted(shape));
        let values = build_step(layout, shape, vocab, &mut rng).map_err(|e| {
            CalibrateError::Settings(format!("building the inputs of {shape} failed: {e}"))
        })?;
        let (latency_ns, converged) = measure_step(session, &values, config, shape)?;
        let iterations = latency_ns.len() as u32;
        progress(DecoderProgress::PointFinished {
            shape,
            iterations,
            converged,
        });
        let quantiles = measure::profile_quantiles(&latency_ns);
        let mean = measure::mean(&latency_ns);
        match shape {
            StepShape::Prefill { tokens } => prefill.push(PrefillPoint {
                tokens,
                iterations,
                converged,
                latency_ns: quantiles,
                latency_mean_ns: mean,
            }),
            StepShape::Decode { batch, context } => decode.push(DecodePoint {
                batch,
                context,
                iterations,
                converged,
                latency_ns: quantiles,
                latency_mean_ns: mean,
            }),
        }
    }
    Ok((prefill, decode))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, element_type: ElementType, dims: Vec<Dim>) -> InputSpec {
        InputSpec {
            name: name.into(),
            element_type,
            dims,
        }
    }

    fn kv(name: &str, heads: u64) -> InputSpec {
        input(
            name,
            ElementType::Float32,
            vec![
                Dim::Dynamic(Some("batch".into())),
                Dim::Fixed(heads),
                Dim::Dynamic(Some("past_len".into())),
                Dim::Fixed(16),
            ],
        )
    }

    fn ids(name: &str) -> InputSpec {
        input(
            name,
            ElementType::Int64,
            vec![
                Dim::Dynamic(Some("batch".into())),
                Dim::Dynamic(Some("seq".into())),
            ],
        )
    }

    #[test]
    fn a_gpt_style_input_list_reads_as_a_decoder_layout() {
        let inputs = vec![
            ids("input_ids"),
            kv("past_key_0", 4),
            kv("past_value_0", 4),
            ids("attention_mask"),
        ];
        assert!(is_decoder(&inputs));
        let l = layout(&inputs, "m.onnx".as_ref()).unwrap();
        assert_eq!(l.token_input.0, "input_ids");
        assert_eq!(l.kv_inputs.len(), 2);
        assert_eq!((l.kv_heads, l.head_dim), (4, 16));
        assert_eq!(l.attention_mask.map(|m| m.0), Some("attention_mask".into()));
        assert!(!is_decoder(&[ids("input_ids")]));
    }

    #[test]
    fn inputs_that_cannot_be_filled_are_named() {
        let odd = vec![ids("input_ids"), kv("past_key_0", 4), kv("past_value_0", 8)];
        let e = layout(&odd, "m.onnx".as_ref()).unwrap_err().to_string();
        assert!(e.contains("past_value_0") && e.contains("differ"), "{e}");
        let extra = vec![
            ids("input_ids"),
            kv("past_key_0", 4),
            kv("past_value_0", 4),
            input(
                "pixel_values",
                ElementType::Float32,
                vec![Dim::Dynamic(None)],
            ),
        ];
        let e = layout(&extra, "m.onnx".as_ref()).unwrap_err().to_string();
        assert!(e.contains("pixel_values"), "{e}");
        let e = layout(&[ids("input_ids")], "m.onnx".as_ref())
            .unwrap_err()
            .to_string();
        assert!(e.contains("without --decoder"), "{e}");
    }

    #[test]
    fn bad_grids_are_refused_with_the_flag_named() {
        let mut c = DecoderConfig::new("m.onnx".into());
        c.contexts = vec![64, 0];
        let e = c.check().unwrap_err().to_string();
        assert!(e.contains("--context"), "{e}");
        c.contexts.clear();
        assert!(c.check().is_err());
        assert!(DecoderConfig::new("m.onnx".into()).check().is_ok());
    }
}
