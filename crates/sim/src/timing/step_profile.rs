//! Decoder step profiles and the step-time model fitted to them.
//!
//! `capsim calibrate --decoder` measures a decoder ONNX model with KV-cache inputs through ONNX
//! Runtime: prefill steps (one sequence, no past, over prompt lengths) and decode steps (a batch
//! of sequences each decoding one token against a past of the same length, over batch sizes and
//! context lengths). It writes a [`StepProfile`] (JSON). [`ProfileStepTime`] turns one into a
//! [`StepTime`]:
//!
//! - the prefill part of a step is read off the prefill points at the step's prefill tokens;
//! - the decode part off the decode grid at (decode sequences, mean context = decode KV tokens /
//!   decode sequences), interpolated bilinearly;
//! - a mixed step takes `prefill + decode - shared`, where `shared` is the per-step cost both
//!   parts measured on their own (the intercept of a least-squares line through the prefill
//!   means, clamped to `[0, min(smallest prefill mean, smallest decode mean)]`): one forward pass
//!   pays it once.
//!
//! Times are drawn from the measured quantiles: one uniform `u` per step, every neighbouring
//! point's quantile function read at `u` and interpolated, both parts at the same `u`
//! (comonotone: a slow step is slow in both parts), so tails survive. Quantile vectors are made
//! monotone at load time over levels and over every axis. Below the grid a step takes the
//! smallest point's time (as if padded up to it); above it time grows at least in proportion to
//! the coordinate and at least as fast as over the last grid interval, and
//! [`StepTime::is_extrapolated`] says so.

use std::path::{Path, PathBuf};

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::step_time::{StepBatch, StepTime};
use crate::rng::SimRng;
use crate::timing::profile::{
    Axis, AxisPosition, Environment, JsonFileError, ModelDescription, read_json, write_json,
};

/// The step-profile format this build reads and writes.
pub const STEP_PROFILE_FORMAT_VERSION: u32 = 1;

/// The `kind` of a decoder step profile (a batch profile has no `kind`).
pub const STEP_PROFILE_KIND: &str = "decoder_steps";

/// A decoder step profile: what was measured, where, and the measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepProfile {
    /// [`STEP_PROFILE_FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// Always [`STEP_PROFILE_KIND`].
    pub kind: String,
    /// The model file that was measured.
    pub model: ModelDescription,
    /// The decoder's KV-cache layout, as calibration read it from the model's inputs.
    pub decoder: DecoderDescription,
    /// The machine and runtime it was measured on.
    pub environment: Environment,
    /// How it was measured.
    pub settings: StepCalibrationSettings,
    /// The levels (in `[0, 1]`, increasing, from 0 to 1) of every point's quantile vectors.
    pub quantile_levels: Vec<f64>,
    /// Prefill steps, by prompt length (increasing).
    pub prefill: Vec<PrefillPoint>,
    /// Decode steps: every (batch, context) of the grid, batch varying fastest.
    pub decode: Vec<DecodePoint>,
}

/// How a decoder was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepCalibrationSettings {
    /// Untimed runs before measuring each point.
    pub warmup_iters: u32,
    /// Most timed runs per point.
    pub max_iters: u32,
    /// Fewest timed runs before a point may stop early.
    pub min_iters: u32,
    /// A point stops early when p50 and p99 change by less than this fraction between checks.
    pub convergence_tolerance: f64,
    /// Token ids were drawn below this.
    pub vocab: u64,
    /// Seed of the random input data.
    pub seed: u64,
    /// Idle wait before every timed run, ns (0: back to back).
    pub idle_gap_ns: u64,
}

/// A decoder's KV-cache layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecoderDescription {
    /// The token-id input (`[batch, seq]`).
    pub token_input: String,
    /// Layers (pairs of past key and value inputs).
    pub layers: u32,
    /// Key/value heads per layer.
    pub kv_heads: u32,
    /// Width of one head.
    pub head_dim: u32,
    /// Bytes per KV element.
    pub kv_element_bytes: u32,
}

impl DecoderDescription {
    /// KV-cache bytes of one token: `2 * layers * kv_heads * head_dim * kv_element_bytes`.
    pub fn kv_bytes_per_token(&self) -> u64 {
        2 * u64::from(self.layers)
            * u64::from(self.kv_heads)
            * u64::from(self.head_dim)
            * u64::from(self.kv_element_bytes)
    }
}

/// Measurements of prefill steps of one prompt length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefillPoint {
    /// Prompt tokens (one sequence, empty past).
    pub tokens: u32,
    /// Timed runs.
    pub iterations: u32,
    /// Whether the point stopped early because p50 and p99 converged.
    pub converged: bool,
    /// Quantiles of one step, ns, at the profile's levels.
    pub latency_ns: Vec<u64>,
    /// Mean of one step, ns.
    pub latency_mean_ns: f64,
}

/// Measurements of decode steps of one (batch, context).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecodePoint {
    /// Sequences decoding one token each.
    pub batch: u32,
    /// Past tokens of every sequence.
    pub context: u32,
    /// Timed runs.
    pub iterations: u32,
    /// Whether the point stopped early because p50 and p99 converged.
    pub converged: bool,
    /// Quantiles of one step, ns, at the profile's levels.
    pub latency_ns: Vec<u64>,
    /// Mean of one step, ns.
    pub latency_mean_ns: f64,
}

/// A problem with a step-profile file.
#[derive(Debug, thiserror::Error)]
pub enum StepProfileError {
    /// The file could not be read or written.
    #[error("step profile {}: {source}", .path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a step profile in JSON.
    #[error("step profile {}: not a capsim decoder step profile ({source}); write one with `capsim calibrate --decoder`", .path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// The profile parses but breaks one of its rules.
    #[error("step profile{}: {reason}", .path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Invalid {
        /// The file, when the profile came from one.
        path: Option<PathBuf>,
        /// What is wrong and where.
        reason: String,
    },
}

impl StepProfile {
    /// Reads and validates a step-profile file.
    pub fn read(path: &Path) -> Result<StepProfile, StepProfileError> {
        let path_buf = || path.to_path_buf();
        read_json(path, StepProfile::validate).map_err(|e| match e {
            JsonFileError::Io(source) => StepProfileError::Io {
                path: path_buf(),
                source,
            },
            JsonFileError::Json(source) => StepProfileError::Json {
                path: path_buf(),
                source,
            },
            JsonFileError::Invalid(reason) => StepProfileError::Invalid {
                path: Some(path_buf()),
                reason,
            },
        })
    }

    /// Writes the profile as pretty-printed JSON.
    pub fn write(&self, path: &Path) -> Result<(), StepProfileError> {
        write_json(path, self).map_err(|source| StepProfileError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// The decode grid's batch sizes and contexts, each increasing and deduplicated.
    pub fn decode_axes(&self) -> (Vec<u32>, Vec<u32>) {
        let mut batches: Vec<u32> = self.decode.iter().map(|p| p.batch).collect();
        let mut contexts: Vec<u32> = self.decode.iter().map(|p| p.context).collect();
        for axis in [&mut batches, &mut contexts] {
            axis.sort_unstable();
            axis.dedup();
        }
        (batches, contexts)
    }

    /// Checks the profile's rules; the error names the offending field or point.
    pub fn validate(&self) -> Result<(), String> {
        if self.format_version != STEP_PROFILE_FORMAT_VERSION {
            return Err(format!(
                "format_version {} is not supported (this capsim reads {STEP_PROFILE_FORMAT_VERSION}); re-run `capsim calibrate --decoder`",
                self.format_version
            ));
        }
        if self.kind != STEP_PROFILE_KIND {
            return Err(format!(
                "kind {:?} is not {STEP_PROFILE_KIND:?}; a batch profile (from `capsim calibrate` without --decoder) belongs in a service table, not a step_time table",
                self.kind
            ));
        }
        let levels = &self.quantile_levels;
        if levels.len() < 2
            || levels.first() != Some(&0.0)
            || levels.last() != Some(&1.0)
            || !levels.windows(2).all(|w| w[0] < w[1])
        {
            return Err("quantile_levels must increase strictly from 0 to 1".into());
        }
        if self.prefill.is_empty() {
            return Err("prefill has no points; calibrate with --prefill 16,64,256".into());
        }
        if !self.prefill.windows(2).all(|w| w[0].tokens < w[1].tokens)
            || self.prefill[0].tokens == 0
        {
            return Err("prefill points must have increasing tokens, each >= 1".into());
        }
        if self.decode.is_empty() {
            return Err(
                "decode has no points; calibrate with --decode-batch 1,4,16 --context 64,256"
                    .into(),
            );
        }
        let (batches, contexts) = self.decode_axes();
        if batches[0] == 0 {
            return Err("decode batch sizes must be >= 1".into());
        }
        if self.decode.len() != batches.len() * contexts.len() {
            return Err(format!(
                "decode has {} points, not one per (batch, context) of {} batch sizes x {} contexts",
                self.decode.len(),
                batches.len(),
                contexts.len()
            ));
        }
        for (index, point) in self.decode.iter().enumerate() {
            let expected = (
                batches[index % batches.len()],
                contexts[index / batches.len()],
            );
            if (point.batch, point.context) != expected {
                return Err(format!(
                    "decode[{index}] is (batch {}, context {}), expected (batch {}, context {}): points go batch fastest, context slowest",
                    point.batch, point.context, expected.0, expected.1
                ));
            }
        }
        let prefill = self.prefill.iter().map(|p| {
            (
                format!("prefill tokens {}", p.tokens),
                &p.latency_ns,
                p.latency_mean_ns,
            )
        });
        let decode = self.decode.iter().map(|p| {
            (
                format!("decode batch {} context {}", p.batch, p.context),
                &p.latency_ns,
                p.latency_mean_ns,
            )
        });
        for (at, quantiles, mean) in prefill.chain(decode) {
            if quantiles.len() != levels.len() {
                return Err(format!(
                    "{at}: latency_ns has {} values for {} quantile levels",
                    quantiles.len(),
                    levels.len()
                ));
            }
            if !quantiles.windows(2).all(|w| w[0] <= w[1]) {
                return Err(format!("{at}: latency_ns must not decrease"));
            }
            if !(mean.is_finite() && mean > 0.0) {
                return Err(format!("{at}: latency_mean_ns {mean} must be positive"));
            }
        }
        Ok(())
    }
}

/// A [`StepTime`] drawn from a decoder step profile (see the module documentation).
#[derive(Debug, Clone)]
pub struct ProfileStepTime {
    levels: Vec<f64>,
    prefill_axis: Axis,
    /// Monotone quantiles, ns, `[point * levels + level]`.
    prefill_quantiles_ns: Vec<f64>,
    prefill_means_ns: Vec<f64>,
    batch_axis: Axis,
    context_axis: Axis,
    /// Monotone quantiles, ns, `[(context_index * batches + batch_index) * levels + level]`.
    decode_quantiles_ns: Vec<f64>,
    decode_means_ns: Vec<f64>,
    shared_ns: f64,
    decoder: DecoderDescription,
    /// Where the profile was measured (a `hardware = "..."` of the step time is checked
    /// against it).
    environment: Environment,
}

/// Running maximum of `values[cell * nq + q]` over `q`.
fn monotone_levels(values: &mut [f64], nq: usize) {
    for cell in values.chunks_mut(nq) {
        for q in 1..cell.len() {
            cell[q] = cell[q].max(cell[q - 1]);
        }
    }
}

impl ProfileStepTime {
    /// Reads a step-profile file and builds the model.
    pub fn from_file(path: &Path) -> Result<ProfileStepTime, StepProfileError> {
        Ok(ProfileStepTime::new(&StepProfile::read(path)?))
    }

    /// Builds the model from a profile that passed [`StepProfile::validate`].
    pub fn new(profile: &StepProfile) -> ProfileStepTime {
        let nq = profile.quantile_levels.len();
        let mut prefill_quantiles_ns: Vec<f64> = profile
            .prefill
            .iter()
            .flat_map(|p| p.latency_ns.iter().map(|&v| v as f64))
            .collect();
        let mut prefill_means_ns: Vec<f64> =
            profile.prefill.iter().map(|p| p.latency_mean_ns).collect();
        monotone_levels(&mut prefill_quantiles_ns, nq);
        for i in 1..profile.prefill.len() {
            prefill_means_ns[i] = prefill_means_ns[i].max(prefill_means_ns[i - 1]);
            for q in 0..nq {
                let previous = prefill_quantiles_ns[(i - 1) * nq + q];
                let cell = &mut prefill_quantiles_ns[i * nq + q];
                *cell = cell.max(previous);
            }
        }

        let (batches, contexts) = profile.decode_axes();
        let nb = batches.len();
        // Validated order: batch fastest, context slowest, so point index = cell index.
        let mut decode_quantiles_ns: Vec<f64> = profile
            .decode
            .iter()
            .flat_map(|p| p.latency_ns.iter().map(|&v| v as f64))
            .collect();
        let mut decode_means_ns: Vec<f64> =
            profile.decode.iter().map(|p| p.latency_mean_ns).collect();
        monotone_levels(&mut decode_quantiles_ns, nq);
        for (ci, bi) in (0..contexts.len()).flat_map(|c| (0..nb).map(move |b| (c, b))) {
            let cell = ci * nb + bi;
            let mut before = Vec::with_capacity(2);
            if bi > 0 {
                before.push(cell - 1);
            }
            if ci > 0 {
                before.push(cell - nb);
            }
            for previous in before {
                decode_means_ns[cell] = decode_means_ns[cell].max(decode_means_ns[previous]);
                for q in 0..nq {
                    let p = decode_quantiles_ns[previous * nq + q];
                    let v = &mut decode_quantiles_ns[cell * nq + q];
                    *v = v.max(p);
                }
            }
        }

        let shared_ns = shared_step_ns(profile, &prefill_means_ns, &decode_means_ns);
        ProfileStepTime {
            levels: profile.quantile_levels.clone(),
            prefill_axis: Axis {
                values: profile
                    .prefill
                    .iter()
                    .map(|p| f64::from(p.tokens))
                    .collect(),
            },
            prefill_quantiles_ns,
            prefill_means_ns,
            batch_axis: Axis {
                values: batches.iter().map(|&b| f64::from(b)).collect(),
            },
            context_axis: Axis {
                values: contexts.iter().map(|&c| f64::from(c)).collect(),
            },
            decode_quantiles_ns,
            decode_means_ns,
            shared_ns,
            decoder: profile.decoder.clone(),
            environment: profile.environment.clone(),
        }
    }

    /// The machine and runtime the profile was measured on.
    pub fn environment(&self) -> &Environment {
        &self.environment
    }

    /// The device the profile was measured on, in words a hardware catalogue name can match:
    /// the GPU's name for CUDA (`NVIDIA H200`), else `the CPU (<model>)`, which matches none.
    pub fn measured_device(&self) -> String {
        let env = &self.environment;
        if env.execution_provider.eq_ignore_ascii_case("cuda") {
            env.device_name.clone()
        } else {
            format!("the CPU ({})", env.device_name)
        }
    }

    /// The decoder's KV-cache layout, from the profile.
    pub fn decoder(&self) -> &DecoderDescription {
        &self.decoder
    }

    /// The per-step cost a mixed step pays once, ns (see the module documentation).
    pub fn shared_ns(&self) -> f64 {
        self.shared_ns
    }

    fn prefill_value(&self, tokens: u64, cell_value: impl Fn(usize) -> f64) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        let position = self.prefill_axis.locate(tokens as f64);
        self.prefill_axis.value(position, cell_value)
    }

    fn decode_value(&self, step: &StepBatch, cell_value: impl Fn(usize) -> f64) -> f64 {
        if step.decode_seqs == 0 {
            return 0.0;
        }
        let nb = self.batch_axis.values.len();
        let seqs = f64::from(step.decode_seqs);
        let batch_position = self.batch_axis.locate(seqs);
        let context_position = self
            .context_axis
            .locate(step.decode_kv_tokens as f64 / seqs);
        self.batch_axis.value(batch_position, |bi| {
            self.context_axis
                .value(context_position, |ci| cell_value(ci * nb + bi))
        })
    }

    /// Prefill plus decode minus the shared per-step cost (when the step has both parts).
    fn combine(&self, step: &StepBatch, prefill_ns: f64, decode_ns: f64) -> f64 {
        let shared = if prefill_tokens(step) > 0 && step.decode_seqs > 0 {
            self.shared_ns
        } else {
            0.0
        };
        (prefill_ns + decode_ns - shared).max(prefill_ns.max(decode_ns))
    }

    /// The `u`-quantile (`u` in `[0, 1]`) of the step's time, ns.
    pub fn quantile_ns(&self, step: &StepBatch, u: f64) -> f64 {
        let nq = self.levels.len();
        let k = self
            .levels
            .partition_point(|&level| level <= u)
            .clamp(1, nq - 1)
            - 1;
        let w = ((u - self.levels[k]) / (self.levels[k + 1] - self.levels[k])).clamp(0.0, 1.0);
        let read = |table: &[f64], cell: usize| {
            let lo = table[cell * nq + k];
            lo + w * (table[cell * nq + k + 1] - lo)
        };
        let prefill = self.prefill_value(prefill_tokens(step), |i| {
            read(&self.prefill_quantiles_ns, i)
        });
        let decode = self.decode_value(step, |cell| read(&self.decode_quantiles_ns, cell));
        self.combine(step, prefill, decode)
    }
}

/// The tokens the prefill part is read at: the prefill tokens plus a PIECEWISE CUDA graph's
/// padding tokens. A profile's prefill points hold attention and the token-linear layers
/// together, so the padding is charged at the prefill curve's slope there, its attention share
/// included: an overestimate by that share.
fn prefill_tokens(step: &StepBatch) -> u64 {
    step.prefill_tokens + step.padding_tokens
}

/// The intercept of the least-squares line of prefill mean over tokens, clamped to `[0,
/// min(smallest prefill mean, smallest decode mean)]`; 0 with a single prefill point.
fn shared_step_ns(profile: &StepProfile, prefill_means_ns: &[f64], decode_means_ns: &[f64]) -> f64 {
    let n = prefill_means_ns.len() as f64;
    let ceiling = prefill_means_ns[0].min(decode_means_ns[0]).max(0.0);
    if prefill_means_ns.len() < 2 {
        return 0.0;
    }
    let xs: Vec<f64> = profile
        .prefill
        .iter()
        .map(|p| f64::from(p.tokens))
        .collect();
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = prefill_means_ns.iter().sum::<f64>() / n;
    let sxx: f64 = xs.iter().map(|x| (x - mean_x).powi(2)).sum();
    let sxy: f64 = xs
        .iter()
        .zip(prefill_means_ns)
        .map(|(x, y)| (x - mean_x) * (y - mean_y))
        .sum();
    let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
    (mean_y - slope * mean_x).clamp(0.0, ceiling)
}

impl StepTime for ProfileStepTime {
    fn sample_ns(&self, step: &StepBatch, rng: &mut SimRng) -> u64 {
        let u: f64 = rng.random();
        self.quantile_ns(step, u).round().max(1.0) as u64
    }

    fn mean_ns(&self, step: &StepBatch) -> f64 {
        let prefill = self.prefill_value(prefill_tokens(step), |i| self.prefill_means_ns[i]);
        let decode = self.decode_value(step, |cell| self.decode_means_ns[cell]);
        self.combine(step, prefill, decode)
    }

    fn is_extrapolated(&self, step: &StepBatch) -> bool {
        let above = |axis: &Axis, x: f64| matches!(axis.locate(x), AxisPosition::Above { .. });
        let prefill =
            step.prefill_tokens > 0 && above(&self.prefill_axis, step.prefill_tokens as f64);
        let decode = step.decode_seqs > 0 && {
            let seqs = f64::from(step.decode_seqs);
            above(&self.batch_axis, seqs)
                || above(&self.context_axis, step.decode_kv_tokens as f64 / seqs)
        };
        prefill || decode
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::timing::profile::QUANTILE_LEVELS;
    use rand::SeedableRng;

    fn quantiles(mean_ns: f64) -> Vec<u64> {
        // Spread +-20% around the mean, linear in the level.
        QUANTILE_LEVELS
            .iter()
            .map(|&l| (mean_ns * (0.8 + 0.4 * l)).round() as u64)
            .collect()
    }

    /// A profile with prefill time `1ms + 10us * tokens` and decode time `2ms + 100us * batch +
    /// 1ns * batch * context`.
    pub(crate) fn synthetic() -> StepProfile {
        let prefill = [16u32, 64, 256]
            .iter()
            .map(|&tokens| {
                let mean = 1e6 + 1e4 * f64::from(tokens);
                PrefillPoint {
                    tokens,
                    iterations: 60,
                    converged: true,
                    latency_ns: quantiles(mean),
                    latency_mean_ns: mean,
                }
            })
            .collect();
        let mut decode = Vec::new();
        for context in [64u32, 256] {
            for batch in [1u32, 4, 16] {
                let mean = 2e6 + 1e5 * f64::from(batch) + f64::from(batch * context);
                decode.push(DecodePoint {
                    batch,
                    context,
                    iterations: 60,
                    converged: true,
                    latency_ns: quantiles(mean),
                    latency_mean_ns: mean,
                });
            }
        }
        StepProfile {
            format_version: STEP_PROFILE_FORMAT_VERSION,
            kind: STEP_PROFILE_KIND.into(),
            model: ModelDescription {
                path: "tiny_gpt.onnx".into(),
                file_bytes: 1,
                inputs: Vec::new(),
            },
            decoder: DecoderDescription {
                token_input: "input_ids".into(),
                layers: 2,
                kv_heads: 4,
                head_dim: 16,
                kv_element_bytes: 4,
            },
            environment: Environment {
                execution_provider: "cpu".into(),
                device_name: "test".into(),
                ort_version: "1.31.1".into(),
                ort_library: "none".into(),
                intra_threads: 1,
                cpu_model: "test".into(),
                logical_cpus: 1,
                os: "linux".into(),
                date: "2026-01-01T00:00:00Z".into(),
                capsim_version: "0".into(),
            },
            settings: StepCalibrationSettings {
                warmup_iters: 1,
                max_iters: 60,
                min_iters: 60,
                convergence_tolerance: 0.03,
                vocab: 512,
                seed: 1,
                idle_gap_ns: 0,
            },
            quantile_levels: QUANTILE_LEVELS.to_vec(),
            prefill,
            decode,
        }
    }

    fn prefill_step(tokens: u64) -> StepBatch {
        StepBatch {
            prefill_tokens: tokens,
            prefill_attention_tokens2: tokens * tokens,
            prefill_seqs: 1,
            ..StepBatch::default()
        }
    }

    fn decode_step(seqs: u32, context: u64) -> StepBatch {
        StepBatch {
            decode_seqs: seqs,
            decode_kv_tokens: u64::from(seqs) * context,
            ..StepBatch::default()
        }
    }

    #[test]
    fn grid_points_reproduce_their_means_and_quantiles() {
        let model = ProfileStepTime::new(&synthetic());
        assert_eq!(model.mean_ns(&prefill_step(64)), 1e6 + 64e4);
        assert_eq!(model.mean_ns(&decode_step(4, 256)), 2e6 + 4e5 + 1024.0);
        let p = &synthetic().prefill[1];
        for (&level, &expected) in QUANTILE_LEVELS.iter().zip(&p.latency_ns) {
            let got = model.quantile_ns(&prefill_step(64), level);
            assert_eq!(got, expected as f64, "level {level}");
        }
    }

    #[test]
    fn between_points_prefill_and_decode_interpolate_linearly() {
        let model = ProfileStepTime::new(&synthetic());
        // Halfway between 64 and 256 tokens.
        assert_eq!(model.mean_ns(&prefill_step(160)), 1e6 + 160e4);
        // Batch 10 (halfway 4..16) at context 160 (halfway 64..256): bilinear of a bilinear
        // function is exact.
        let expected = 2e6 + 1e5 * 10.0 + 10.0 * 160.0;
        let got = model.mean_ns(&decode_step(10, 160));
        assert!(
            (got - expected).abs() < 1e-6,
            "expected {expected}, got {got}"
        );
    }

    #[test]
    fn mixed_steps_pay_the_shared_step_cost_once() {
        let model = ProfileStepTime::new(&synthetic());
        // The prefill line's intercept is exactly 1 ms, below both smallest means.
        assert!(
            (model.shared_ns() - 1e6).abs() < 1e-3,
            "{}",
            model.shared_ns()
        );
        let mixed = StepBatch {
            decode_seqs: 4,
            decode_kv_tokens: 4 * 64,
            ..prefill_step(64)
        };
        let expected = (1e6 + 64e4) + (2e6 + 4e5 + 256.0) - 1e6;
        assert!((model.mean_ns(&mixed) - expected).abs() < 1e-3);
        assert!(model.mean_ns(&mixed) >= model.mean_ns(&decode_step(4, 64)));
        assert!(model.mean_ns(&mixed) >= model.mean_ns(&prefill_step(64)));
    }

    #[test]
    fn samples_stay_within_the_measured_range_and_keep_the_tail() {
        let model = ProfileStepTime::new(&synthetic());
        let mut rng = SimRng::seed_from_u64(11);
        let step = decode_step(4, 64);
        let mean = 2e6 + 4e5 + 256.0;
        let draws: Vec<u64> = (0..20_000)
            .map(|_| model.sample_ns(&step, &mut rng))
            .collect();
        let (lo, hi) = (*draws.iter().min().unwrap(), *draws.iter().max().unwrap());
        assert!(
            lo as f64 >= 0.8 * mean - 1.0 && hi as f64 <= 1.2 * mean + 1.0,
            "{lo}..{hi}"
        );
        assert!(hi as f64 > 1.19 * mean, "tail lost: max {hi}");
        let avg = draws.iter().sum::<u64>() as f64 / draws.len() as f64;
        assert!((avg - mean).abs() / mean < 0.01, "mean {avg} vs {mean}");
    }

    #[test]
    fn only_steps_beyond_the_grid_are_extrapolated_and_they_grow() {
        let model = ProfileStepTime::new(&synthetic());
        assert!(!model.is_extrapolated(&prefill_step(200)));
        assert!(!model.is_extrapolated(&prefill_step(4)));
        assert!(model.is_extrapolated(&prefill_step(512)));
        assert!(model.is_extrapolated(&decode_step(32, 64)));
        assert!(model.is_extrapolated(&decode_step(4, 1024)));
        assert!(!model.is_extrapolated(&decode_step(2, 100)));
        assert!(model.mean_ns(&prefill_step(512)) >= 2.0 * model.mean_ns(&prefill_step(256)) - 1.0);
        assert!(model.mean_ns(&decode_step(32, 256)) > model.mean_ns(&decode_step(16, 256)));
    }

    #[test]
    fn step_time_never_decreases_with_tokens_seqs_or_context() {
        let mut profile = synthetic();
        // A noisy measurement: batch 4 measured faster than batch 1.
        profile.decode[1].latency_mean_ns = 1e6;
        profile.decode[1].latency_ns = quantiles(1e6);
        let model = ProfileStepTime::new(&profile);
        for u in [0.0, 0.5, 0.99, 1.0] {
            let mut last = 0.0;
            for seqs in 1..40 {
                let t = model.quantile_ns(&decode_step(seqs, 100), u);
                assert!(t >= last, "u {u}: batch {seqs} took {t} < {last}");
                last = t;
            }
            let mut last = 0.0;
            for tokens in (1..600).step_by(7) {
                let t = model.quantile_ns(&prefill_step(tokens), u);
                assert!(t >= last, "u {u}: {tokens} tokens took {t} < {last}");
                last = t;
            }
        }
    }

    #[test]
    fn broken_profiles_are_rejected_with_the_point_named() {
        let mut p = synthetic();
        p.decode.pop();
        assert!(
            p.validate()
                .unwrap_err()
                .contains("one per (batch, context)")
        );
        let mut p = synthetic();
        p.decode.swap(0, 1);
        assert!(p.validate().unwrap_err().contains("decode[0]"));
        let mut p = synthetic();
        p.prefill[2].latency_ns.pop();
        assert!(p.validate().unwrap_err().contains("prefill tokens 256"));
        let mut p = synthetic();
        p.kind = "batch".into();
        assert!(p.validate().unwrap_err().contains("kind \"batch\""));
        assert!(synthetic().validate().is_ok());
    }

    #[test]
    fn a_written_profile_reads_back_equal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steps.json");
        synthetic().write(&path).unwrap();
        assert_eq!(StepProfile::read(&path).unwrap(), synthetic());
        std::fs::write(&path, "{}").unwrap();
        let e = StepProfile::read(&path).unwrap_err().to_string();
        assert!(e.contains("calibrate --decoder"), "{e}");
    }
}
