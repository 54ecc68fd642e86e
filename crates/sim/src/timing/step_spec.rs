//! The `[step_time]` table of a continuous-batching pool as written, its checks, and the
//! roofline's resolution of presets, model config files and explicit keys into a model with its
//! memory facts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::hardware::{self, Accelerator, ComputeDtype, Hardware, MissingFigure, UnknownHardware};
use super::model_config::{self, ModelConfig, ModelConfigError};
use super::roofline::{ModelShape, Roofline, dtype_bytes};
use super::step_profile::StepProfileError;
use super::step_time::{LinearStepTime, StepTime};
use crate::quantity::SizeBytes;
use crate::quantity::{QuantityError, parse_duration_ns_f64};

/// How a pool's step time is modelled: the `[step_time]` table of a continuous-batching pool.
///
/// ```toml
/// [step_time]
/// kind = "roofline"          # or "linear", "profile", "operators"
/// model = "llama-3-8b"
/// hardware = "h200"          # every kind takes it: the GPU the deployment runs on
/// ```
///
/// `hardware` names an entry of the [`hardware`] catalogue in every kind: the roofline takes
/// its figures; a profile or an operator table must have been measured on it; a linear model
/// records it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum StepTimeSpec {
    /// `base + per_prefill_token * prefill_tokens + per_prefill_attention_token2 *
    /// prefill_attention_tokens2 + per_prefill_seq * prefill_seqs + per_decode_seq *
    /// decode_seqs + per_kv_token * decode_kv_tokens`, every coefficient a duration (`"0.1ms"`,
    /// `"30ns"`; fractions of a nanosecond are kept). Deterministic: every step of one
    /// composition takes the same time.
    Linear {
        /// Fixed time of every step.
        #[serde(default)]
        base: FineDurationNs,
        /// Time per prefill token.
        #[serde(default)]
        per_prefill_token: FineDurationNs,
        /// Time per unit of `prefill_attention_tokens2` (attention's quadratic term).
        #[serde(default)]
        per_prefill_attention_token2: FineDurationNs,
        /// Time per sequence with a prefill chunk in the step, beyond its tokens (a new
        /// request's setup in the engine: vLLM adds it to the input batch and samples its first
        /// token).
        #[serde(default)]
        per_prefill_seq: FineDurationNs,
        /// Time per decoding sequence.
        #[serde(default)]
        per_decode_seq: FineDurationNs,
        /// Time per KV-cache token read by decodes.
        #[serde(default)]
        per_kv_token: FineDurationNs,
        /// The GPU the coefficients describe (a [`hardware`] catalogue name): checked and
        /// reported, not used by the model.
        hardware: Option<String>,
    },
    /// The analytic roofline of [`super::roofline`], from a model and a GPU.
    Roofline(Box<RooflineSpec>),
    /// Drawn from a decoder step profile written by `capsim calibrate --decoder` (see
    /// [`super::step_profile`]); a relative path is relative to the scenario file's folder.
    Profile {
        /// The step profile (JSON).
        path: PathBuf,
        /// The GPU the deployment runs on (a [`hardware`] catalogue name): the profile must
        /// have been measured on it (its `environment`, checked by the build step).
        hardware: Option<String>,
    },
    /// Composed from measured per-operator GPU times (see [`super::operators::step`]).
    Operators(Box<OperatorsSpec>),
}

/// The `kind = "operators"` table: a measured operator table, the model it composes steps for,
/// and the parallelism. Paths are relative to the scenario file's folder; the build step reads
/// them.
///
/// ```toml
/// [step_time]
/// kind = "operators"
/// profile = "profiles/RTX4090/meta-llama/Llama-3.1-8B/bf16"   # an LLMServingSim bundle
/// model = "llama-3.1-8b"                                      # a preset or a config.json
/// tensor_parallel = 1
/// ```
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OperatorsSpec {
    /// The measured table: an LLMServingSim profiler bundle (the folder holding `meta.yaml` and
    /// `tpN/`) or a folder holding Vidur's `mlp.csv`.
    pub profile: PathBuf,
    /// The model: a preset name or a Hugging Face `config.json` (its layers, hidden size and
    /// experts multiply the table's one-layer times).
    pub model: String,
    /// GPUs the model is split over; the table's `tpN` of this degree is read. Default 1.
    pub tensor_parallel: Option<u32>,
    /// A measured all-reduce table (Vidur's `all_reduce.csv` columns; the rows of
    /// `tensor_parallel` workers are read), needed when `tensor_parallel > 1` and the table has
    /// none.
    pub all_reduce: Option<PathBuf>,
    /// Ranks a mixture of experts' experts are spread over. Default 1.
    pub expert_parallel: Option<u32>,
    /// The GPU the deployment runs on (a [`hardware`] catalogue name): the table must have
    /// been measured on it (a bundle's `meta.yaml` `gpu`, Vidur's `compute/<gpu>/` folder;
    /// checked by the build step).
    pub hardware: Option<String>,
}

impl OperatorsSpec {
    /// `tensor_parallel`, 1 when not given.
    pub fn tensor_parallel(&self) -> u32 {
        self.tensor_parallel.unwrap_or(1)
    }

    /// The model's source: a preset or a config file (read by the build step).
    pub fn model_source(&self) -> Result<ModelSource<'_>, StepTimeError> {
        model_source(&self.model)
    }

    /// What can be checked without reading a file.
    fn check(&self) -> Result<(), StepTimeError> {
        self.model_source()?;
        for (key, value) in [
            ("tensor_parallel", self.tensor_parallel),
            ("expert_parallel", self.expert_parallel),
        ] {
            if value == Some(0) {
                return Err(StepTimeError::Invalid {
                    key,
                    value: "0".into(),
                    fix: "write a positive integer".into(),
                });
            }
        }
        Ok(())
    }
}

/// A duration that keeps fractions of a nanosecond (`"0.25ns"`, `"30ns"`, `"0.1ms"`), for
/// per-token coefficients far below a nanosecond's resolution when summed over many tokens.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FineDurationNs(pub f64);

impl FineDurationNs {
    /// Parses a non-negative duration with a unit (see [`parse_duration_ns_f64`]), or a bare `0`.
    pub fn parse(text: &str) -> Result<FineDurationNs, QuantityError> {
        parse_duration_ns_f64(text).map(FineDurationNs)
    }
}

impl<'de> Deserialize<'de> for FineDurationNs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
            Float(f64),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Text(t) => t,
            Raw::Int(0) => "0".to_string(),
            Raw::Int(n) => return Err(bare_number::<D>(&n.to_string())),
            Raw::Float(x) => {
                if x != 0.0 {
                    return Err(bare_number::<D>(&x.to_string()));
                }
                "0".to_string()
            }
        };
        FineDurationNs::parse(&text).map_err(<D::Error as serde::de::Error>::custom)
    }
}

fn bare_number<'de, D: serde::Deserializer<'de>>(n: &str) -> D::Error {
    <D::Error as serde::de::Error>::custom(format!(
        "duration {n} has no unit: write it as a string with one, for example \"{n}ns\""
    ))
}

/// The `kind = "roofline"` table: a model (preset, Hugging Face `config.json` or explicit
/// shape), a GPU (preset or explicit figures), tensor parallelism and efficiency factors.
/// Explicit keys override the preset's or the config's values.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct RooflineSpec {
    /// A model preset (`"llama-3-8b"`, `"qwen3-32b"`, `"mixtral-8x7b"`, ... see
    /// [`model_config::PRESET_NAMES`]) or the path of a Hugging Face `config.json` (relative to
    /// the scenario file's folder; a value with a `/` or ending in `.json` is a path).
    pub model: Option<String>,
    /// Parameter count (all weights): a number (`8.03e9`) or a string with a suffix (`"8.03B"`,
    /// `"125M"`).
    pub params: Option<ParamCount>,
    /// Parameters one token multiplies (compute). Default: the config's active count, else
    /// `params` less the routed experts a token skips (`params` for a dense model).
    pub active_params: Option<ParamCount>,
    /// Transformer layers.
    pub layers: Option<u32>,
    /// Hidden size (the residual stream's width).
    pub hidden_size: Option<u32>,
    /// Query heads. Default: the config's, else `hidden_size / head_dim`.
    pub num_attention_heads: Option<u32>,
    /// Key/value heads.
    pub num_kv_heads: Option<u32>,
    /// Width of one attention head.
    pub head_dim: Option<u32>,
    /// Weight data type (`"bf16"`, `"fp16"`, `"fp8"`, `"int8"`, `"fp32"`). Default `"bf16"`.
    pub dtype: Option<String>,
    /// KV-cache data type, vLLM's `kv_cache_dtype`. Default: `dtype`.
    pub kv_cache_dtype: Option<String>,
    /// The GPU: a [`hardware`] catalogue name (`"h200"`, `"rtx-pro-6000"`, ...); its dense
    /// BF16 figure, or its FP8 figure when `dtype = "fp8"`.
    pub hardware: Option<String>,
    /// Dense FLOP/s of one GPU (`"989TFLOPS"`).
    pub flops: Option<String>,
    /// HBM bandwidth of one GPU (`"4.8TB/s"`).
    pub memory_bandwidth: Option<String>,
    /// HBM capacity of one GPU (`"141GB"`).
    pub memory: Option<SizeBytes>,
    /// GPUs the model is split over. Default 1.
    pub tensor_parallel: Option<u32>,
    /// Fraction of peak FLOP/s reached, in (0, 1]. Default [`DEFAULT_COMPUTE_EFFICIENCY`].
    pub compute_efficiency: Option<f64>,
    /// Fraction of peak HBM bandwidth reached, in (0, 1]. Default
    /// [`DEFAULT_BANDWIDTH_EFFICIENCY`].
    pub bandwidth_efficiency: Option<f64>,
    /// Fraction of each GPU's memory the server may use, vLLM's `gpu_memory_utilization`, in
    /// (0, 1]. Default 0.9 (vLLM's default).
    pub gpu_memory_utilization: Option<f64>,
    /// Memory per GPU kept for activations, CUDA graphs and the runtime, outside the KV
    /// cache. Default [`DEFAULT_ACTIVATION_RESERVE_BYTES`].
    pub activation_reserve: Option<SizeBytes>,
    /// A measured all-reduce table of the GPUs (Vidur's `all_reduce.csv` columns; the rows of
    /// `tensor_parallel` workers are read), relative to the scenario file's folder: with
    /// `tensor_parallel > 1` each step adds its layers' two all-reduces of the hidden states
    /// ([`super::roofline::TensorParallelRoofline`]). Read by the build step; without it a
    /// tensor-parallel roofline leaves the communication out.
    pub all_reduce: Option<PathBuf>,
}

/// Default `compute_efficiency`: large prefill GEMMs on Hopper reach about half to two thirds
/// of dense peak in vLLM and TensorRT-LLM (model FLOPs utilisation); 0.6 sits in that range.
pub const DEFAULT_COMPUTE_EFFICIENCY: f64 = 0.6;
/// Default `bandwidth_efficiency`: memory-bound decode kernels sustain about 70-90% of peak
/// HBM bandwidth (model bandwidth utilisation); 0.8 sits in that range.
pub const DEFAULT_BANDWIDTH_EFFICIENCY: f64 = 0.8;
/// Default `gpu_memory_utilization`, vLLM's default.
pub const DEFAULT_GPU_MEMORY_UTILIZATION: f64 = 0.9;
/// Default `activation_reserve` per GPU: 2 GiB, a round allowance for the activations of one
/// step of a few thousand tokens, CUDA graphs and the CUDA context (vLLM measures this with a
/// profiling forward pass; we cannot, so it is a stated parameter).
pub const DEFAULT_ACTIVATION_RESERVE_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// A parameter count read from a number or a string with a `K`, `M`, `B` or `T` suffix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamCount(pub f64);

impl ParamCount {
    /// Parses `8.03B`, `125M`, `7e9` or `8030000000`.
    pub fn parse(text: &str) -> Option<ParamCount> {
        let text = text.trim();
        let (number, scale) = match text.char_indices().last() {
            Some((i, 'K' | 'k')) => (&text[..i], 1e3),
            Some((i, 'M')) => (&text[..i], 1e6),
            Some((i, 'B' | 'G')) => (&text[..i], 1e9),
            Some((i, 'T')) => (&text[..i], 1e12),
            _ => (text, 1.0),
        };
        let value: f64 = number.trim().parse().ok()?;
        (value.is_finite() && value > 0.0).then_some(ParamCount(value * scale))
    }
}

impl<'de> Deserialize<'de> for ParamCount {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Int(i64),
            Float(f64),
        }
        let text = match Raw::deserialize(d)? {
            Raw::Text(t) => t,
            Raw::Int(n) => n.to_string(),
            Raw::Float(x) => x.to_string(),
        };
        ParamCount::parse(&text).ok_or_else(|| {
            <D::Error as serde::de::Error>::custom(format!(
                "params {text:?} is not a parameter count: write a positive number, optionally \
                 with K, M, B or T (for example \"8.03B\" or 8.03e9)"
            ))
        })
    }
}

/// Why a step-time spec could not be built. Each names the key and quotes the value.
#[derive(Debug, thiserror::Error)]
pub enum StepTimeError {
    /// A `hardware` name the catalogue does not hold.
    #[error("step_time.hardware = {source}")]
    UnknownHardware {
        /// The name, the catalogue's names and the closest.
        source: UnknownHardware,
    },
    /// The named part has no figure for what the spec needs.
    #[error("step_time.hardware = {name:?}: {source}; {fix}")]
    HardwareFigure {
        /// The name as given.
        name: String,
        /// What is missing.
        source: MissingFigure,
        /// What to write instead.
        fix: &'static str,
    },
    /// A profile or operator table measured on another device than `hardware` names.
    #[error(
        "step_time.hardware = {named:?} ({model}), but {file} was measured on {measured}: its times hold for that device only; name the device it was measured on, or give a profile measured on the {named}"
    )]
    MeasuredElsewhere {
        /// The catalogue name given.
        named: String,
        /// The product it names.
        model: &'static str,
        /// The profile or table.
        file: String,
        /// The device it records.
        measured: String,
    },
    /// A `model` that is neither a preset nor a path.
    #[error(
        "step_time.model = {value:?} is not a known preset; use one of {known}, the path of a Hugging Face config.json (for example \"models/mistralai/Mixtral-8x7B-v0.1.json\"), or give the explicit keys instead"
    )]
    UnknownModel {
        /// The name as given.
        value: String,
        /// The presets, comma-separated.
        known: String,
    },
    /// The model's config file could not be read or is not valid.
    #[error("step_time.model: {source}")]
    ModelConfig {
        /// Why (names the file).
        source: ModelConfigError,
    },
    /// The model names a config file, which only the build step reads.
    #[error(
        "step_time.model = {path:?} is a config file, read by the build step (capsim_sim::build::Profiles::load), not here"
    )]
    ModelFileNotRead {
        /// The path as written.
        path: PathBuf,
    },
    /// A key neither given nor supplied by a preset.
    #[error("step_time.{key} is missing: {fix}")]
    Missing {
        /// The key.
        key: &'static str,
        /// What to write.
        fix: &'static str,
    },
    /// A value out of its range or not parseable.
    #[error("step_time.{key} = {value} is not valid: {fix}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// The value as given (quoted when a string).
        value: String,
        /// What would be accepted.
        fix: String,
    },
    /// The step profile could not be read or is not valid.
    #[error("step_time.path = {path:?}: {source}")]
    Profile {
        /// The path as resolved.
        path: PathBuf,
        /// Why.
        source: StepProfileError,
    },
    /// The weights and reserve leave no room for the KV cache.
    #[error(
        "step_time: the weights ({weights_gb:.1} GB over {gpus} GPU(s)) and activation_reserve leave no KV-cache room in {usable_gb:.1} GB usable (memory x gpu_memory_utilization x tensor_parallel); raise tensor_parallel or gpu_memory_utilization, or pick a larger GPU"
    )]
    DoesNotFit {
        /// Weight bytes, GB.
        weights_gb: f64,
        /// Usable bytes over all GPUs, GB.
        usable_gb: f64,
        /// `tensor_parallel`.
        gpus: u32,
    },
}

impl StepTimeSpec {
    /// Builds a `linear` or `roofline` model, which needs no file; `None` for `profile`, whose
    /// file only the build step (`crate::build`) reads. The scenario calls this to validate.
    pub fn analytic(&self) -> Result<Option<Arc<dyn StepTime>>, StepTimeError> {
        match self {
            StepTimeSpec::Linear {
                base,
                per_prefill_token,
                per_prefill_attention_token2,
                per_prefill_seq,
                per_decode_seq,
                per_kv_token,
                hardware,
            } => {
                hardware.as_deref().map(lookup_hardware).transpose()?;
                let model = LinearStepTime {
                    base_ns: base.0,
                    per_prefill_token_ns: per_prefill_token.0,
                    per_prefill_attention_token2_ns: per_prefill_attention_token2.0,
                    per_prefill_seq_ns: per_prefill_seq.0,
                    per_decode_seq_ns: per_decode_seq.0,
                    per_kv_token_ns: per_kv_token.0,
                };
                // Steps that take no time would let the simulated server serve any load.
                let coefficients = [
                    model.base_ns,
                    model.per_prefill_token_ns,
                    model.per_prefill_attention_token2_ns,
                    model.per_prefill_seq_ns,
                    model.per_decode_seq_ns,
                    model.per_kv_token_ns,
                ];
                if coefficients.iter().all(|&c| c == 0.0) {
                    return Err(StepTimeError::Missing {
                        key: "base",
                        fix: "a linear step time needs base or a per-token coefficient above 0 \
                              (for example base = \"5ms\", per_decode_seq = \"50us\")",
                    });
                }
                Ok(Some(Arc::new(model)))
            }
            StepTimeSpec::Roofline(spec) => {
                if spec.model_file().is_some() {
                    // The config is read by the build step; check what can be checked without it.
                    spec.check_without_model()?;
                    return Ok(None);
                }
                let sized = spec.resolve()?.fitting()?;
                if spec.all_reduce.is_some() {
                    // The all-reduce table is read by the build step.
                    return Ok(None);
                }
                Ok(Some(Arc::new(sized.roofline)))
            }
            StepTimeSpec::Profile { .. } => {
                // The profile is read by the build step, which checks where it was measured.
                self.accelerator()?;
                Ok(None)
            }
            StepTimeSpec::Operators(spec) => {
                // The table and the model are read by the build step.
                spec.check()?;
                self.accelerator()?;
                Ok(None)
            }
        }
    }

    /// The `hardware` name the spec gives, in any kind.
    pub fn hardware_name(&self) -> Option<&str> {
        match self {
            StepTimeSpec::Linear { hardware, .. } | StepTimeSpec::Profile { hardware, .. } => {
                hardware.as_deref()
            }
            StepTimeSpec::Roofline(spec) => spec.hardware.as_deref(),
            StepTimeSpec::Operators(spec) => spec.hardware.as_deref(),
        }
    }

    /// The catalogue entry `hardware` names, `None` when the spec names none; a name the
    /// catalogue does not hold is an error listing its names.
    pub fn accelerator(&self) -> Result<Option<&'static Accelerator>, StepTimeError> {
        self.hardware_name().map(lookup_hardware).transpose()
    }

    /// Checks that `file`, a profile or operator table measured on the device called
    /// `measured` (as it records it: `NVIDIA H200`, `h100`), was measured on the GPU `hardware`
    /// names. Nothing to check without `hardware`.
    pub fn check_measured_on(&self, measured: &str, file: &Path) -> Result<(), StepTimeError> {
        let Some(named) = self.accelerator()? else {
            return Ok(());
        };
        if named.answers_to(measured) {
            return Ok(());
        }
        let measured = match hardware::find(measured) {
            Some(other) => format!("{measured} (the catalogue's {:?})", other.name),
            None => measured.to_string(),
        };
        Err(StepTimeError::MeasuredElsewhere {
            named: named.name.to_string(),
            model: named.model,
            file: file.display().to_string(),
            measured,
        })
    }

    /// The model config file this spec names (`roofline` or `operators` with `model = "PATH"`),
    /// as written: the build step reads it (relative to the scenario file's folder). `None`
    /// otherwise.
    pub fn model_file(&self) -> Option<&Path> {
        match self {
            StepTimeSpec::Roofline(spec) => spec.model_file(),
            StepTimeSpec::Operators(spec) => match spec.model_source() {
                Ok(ModelSource::File(path)) => Some(path),
                _ => None,
            },
            StepTimeSpec::Linear { .. } | StepTimeSpec::Profile { .. } => None,
        }
    }

    /// The model config file from which the build step sizes the KV cache: a roofline's, which
    /// knows the GPU memory. `None` for every other kind, which knows no memory even when it
    /// names a model file (`operators`).
    pub fn kv_sizing_model_file(&self) -> Option<&Path> {
        match self {
            StepTimeSpec::Roofline(spec) => spec.model_file(),
            _ => None,
        }
    }

    /// How many tokens of KV cache fit on the instance (all its GPUs together), or `None` when
    /// the spec does not know the model and the hardware (`linear`, `profile`), names a model
    /// config file (read by the build step: [`SizedRoofline::kv_capacity_tokens`]) or does not
    /// resolve. Zero when the weights and reserve fill the memory.
    pub fn kv_capacity_tokens(&self) -> Option<u64> {
        match self {
            StepTimeSpec::Linear { .. }
            | StepTimeSpec::Profile { .. }
            | StepTimeSpec::Operators(_) => None,
            StepTimeSpec::Roofline(spec) => spec.resolve().ok().map(|s| s.kv_capacity_tokens()),
        }
    }
}

/// A roofline with the memory facts KV-cache sizing needs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizedRoofline {
    /// The step-time model.
    pub roofline: Roofline,
    /// `gpu_memory_utilization`.
    pub gpu_memory_utilization: f64,
    /// `activation_reserve`, bytes per GPU.
    pub activation_reserve_bytes: u64,
}

impl SizedRoofline {
    /// `self`, or [`StepTimeError::DoesNotFit`] when the weights and reserve leave no KV-cache
    /// room.
    pub fn fitting(self) -> Result<SizedRoofline, StepTimeError> {
        if self.kv_capacity_tokens() > 0 {
            return Ok(self);
        }
        let r = &self.roofline;
        Err(StepTimeError::DoesNotFit {
            weights_gb: r.weight_bytes() / 1e9,
            usable_gb: self.usable_bytes() / 1e9,
            gpus: r.tensor_parallel,
        })
    }

    /// Memory the server may use over all GPUs, bytes: `tensor_parallel * memory *
    /// gpu_memory_utilization`.
    pub fn usable_bytes(&self) -> f64 {
        let r = &self.roofline;
        f64::from(r.tensor_parallel) * r.hardware.memory_bytes as f64 * self.gpu_memory_utilization
    }

    /// KV tokens that fit: `(usable - weights - tensor_parallel * activation_reserve) /
    /// kv_bytes_per_token`, rounded down, 0 when negative.
    pub fn kv_capacity_tokens(&self) -> u64 {
        let r = &self.roofline;
        let reserve = f64::from(r.tensor_parallel) * self.activation_reserve_bytes as f64;
        let free = self.usable_bytes() - r.weight_bytes() - reserve;
        (free.max(0.0) / r.kv_bytes_per_token()).floor() as u64
    }
}

fn fraction(key: &'static str, value: Option<f64>, default: f64) -> Result<f64, StepTimeError> {
    let v = value.unwrap_or(default);
    if v.is_finite() && v > 0.0 && v <= 1.0 {
        Ok(v)
    } else {
        Err(StepTimeError::Invalid {
            key,
            value: v.to_string(),
            fix: "write a fraction in (0, 1], for example 0.8".into(),
        })
    }
}

fn positive(
    key: &'static str,
    value: Option<u32>,
    preset: Option<u32>,
    fix: &'static str,
) -> Result<u32, StepTimeError> {
    match value.or(preset) {
        None => Err(StepTimeError::Missing { key, fix }),
        Some(0) => Err(StepTimeError::Invalid {
            key,
            value: "0".into(),
            fix: "write a positive integer".into(),
        }),
        Some(v) => Ok(v),
    }
}

fn dtype(key: &'static str, name: &str) -> Result<f64, StepTimeError> {
    dtype_bytes(name).ok_or_else(|| StepTimeError::Invalid {
        key,
        value: format!("{name:?}"),
        fix: "write one of \"bf16\", \"fp16\", \"fp8\", \"int8\", \"int4\", \"fp32\"".into(),
    })
}

/// Where a roofline's model comes from: a shipped preset or a config file the build step reads.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelSource<'a> {
    /// A shipped config ([`ModelConfig::preset`]).
    Preset(Box<ModelConfig>),
    /// A `config.json` path, as written.
    File(&'a Path),
}

/// The source `name` (a `model` key) names: a preset, else a config file when it looks like a
/// path; an unknown name that is not a path is an error listing the presets.
pub fn model_source(name: &str) -> Result<ModelSource<'_>, StepTimeError> {
    if let Some(config) = ModelConfig::preset(name) {
        return Ok(ModelSource::Preset(Box::new(config)));
    }
    if is_model_path(name) {
        return Ok(ModelSource::File(Path::new(name)));
    }
    Err(StepTimeError::UnknownModel {
        value: name.to_string(),
        known: model_config::PRESET_NAMES.join(", "),
    })
}

/// Everything of a roofline but the model: the GPU, data types, parallelism, efficiencies and
/// memory settings.
#[derive(Debug, Clone, Copy)]
struct Machine {
    hardware: Hardware,
    weight_bytes_per_param: f64,
    kv_bytes_per_element: f64,
    tensor_parallel: u32,
    compute_efficiency: f64,
    bandwidth_efficiency: f64,
    gpu_memory_utilization: f64,
    activation_reserve_bytes: u64,
}

const MODEL_FIX: &str =
    "give model = \"llama-3-8b\" (a preset) or the path of a config.json, or this key";
const HARDWARE_FIX: &str = "give hardware = \"h200\" (a hardware catalogue name) or this key";

/// The catalogue entry `name` names, or [`StepTimeError::UnknownHardware`].
fn lookup_hardware(name: &str) -> Result<&'static Accelerator, StepTimeError> {
    hardware::lookup(name).map_err(|source| StepTimeError::UnknownHardware { source })
}

/// What a roofline's GEMMs compute in for weights of `dtype`: FP8 weights run W8A8 FP8 GEMMs;
/// every other type computes in BF16/FP16 (weight-only quantized weights are dequantized).
fn compute_dtype(dtype: &str) -> ComputeDtype {
    if dtype.to_ascii_lowercase().starts_with("fp8") {
        ComputeDtype::Fp8
    } else {
        ComputeDtype::Bf16
    }
}

/// Whether a `model` value names a file rather than a preset: it has a path separator or ends
/// in `.json`.
fn is_model_path(model: &str) -> bool {
    model.contains('/') || model.contains('\\') || model.to_ascii_lowercase().ends_with(".json")
}

impl RooflineSpec {
    /// The model's source: `None` without `model`; an unknown name that is not a path is an
    /// error listing the presets.
    pub fn model_source(&self) -> Result<Option<ModelSource<'_>>, StepTimeError> {
        self.model.as_deref().map(model_source).transpose()
    }

    /// The config file `model` names, as written; `None` for a preset or no model.
    pub fn model_file(&self) -> Option<&Path> {
        match self.model_source() {
            Ok(Some(ModelSource::File(path))) => Some(path),
            _ => None,
        }
    }

    /// Resolves presets and explicit keys into a roofline with its memory facts. A model config
    /// file is [`StepTimeError::ModelFileNotRead`]: use [`RooflineSpec::resolve_with`] with the
    /// file's config.
    pub fn resolve(&self) -> Result<SizedRoofline, StepTimeError> {
        let config = match self.model_source()? {
            None => None,
            Some(ModelSource::Preset(config)) => Some(config),
            Some(ModelSource::File(path)) => {
                return Err(StepTimeError::ModelFileNotRead {
                    path: path.to_path_buf(),
                });
            }
        };
        let model = self.shape(config.as_deref())?;
        Ok(self.machine()?.with(model))
    }

    /// Resolves the spec with `config`, the config file its `model` names, read (explicit keys
    /// override its values).
    pub fn resolve_with(&self, config: &ModelConfig) -> Result<SizedRoofline, StepTimeError> {
        let model = self.shape(Some(config))?;
        Ok(self.machine()?.with(model))
    }

    /// Checks every key that does not need the model's config file: the GPU, data types,
    /// parallelism, efficiencies, and that explicit model keys are positive.
    pub fn check_without_model(&self) -> Result<(), StepTimeError> {
        self.machine()?;
        let explicit = [
            ("layers", self.layers),
            ("hidden_size", self.hidden_size),
            ("num_attention_heads", self.num_attention_heads),
            ("num_kv_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
        ];
        for (key, value) in explicit {
            if value.is_some() {
                positive(key, value, None, MODEL_FIX)?;
            }
        }
        Ok(())
    }

    /// The model: explicit keys over `config`'s values.
    fn shape(&self, config: Option<&ModelConfig>) -> Result<ModelShape, StepTimeError> {
        let from = config.map(ModelShape::from_config);
        let params = match (self.params, from) {
            (Some(p), _) => p.0,
            (None, Some(m)) => m.params,
            (None, None) => {
                return Err(StepTimeError::Missing {
                    key: "params",
                    fix: MODEL_FIX,
                });
            }
        };
        let layers = positive("layers", self.layers, from.map(|m| m.layers), MODEL_FIX)?;
        let hidden_size = positive(
            "hidden_size",
            self.hidden_size,
            from.map(|m| m.hidden_size),
            MODEL_FIX,
        )?;
        let num_kv_heads = positive(
            "num_kv_heads",
            self.num_kv_heads,
            from.map(|m| m.num_kv_heads),
            MODEL_FIX,
        )?;
        let head_dim = positive(
            "head_dim",
            self.head_dim,
            from.map(|m| m.head_dim),
            MODEL_FIX,
        )?;
        let derived_heads = hidden_size
            .is_multiple_of(head_dim)
            .then_some(hidden_size / head_dim);
        let num_attention_heads = positive(
            "num_attention_heads",
            self.num_attention_heads,
            from.map(|m| m.num_attention_heads).or(derived_heads),
            "hidden_size is not a multiple of head_dim: give num_attention_heads",
        )?;
        let experts = from.and_then(|m| m.experts);
        let routed = experts.map_or(0.0, |x| x.routed_params());
        if params <= routed {
            return Err(StepTimeError::Invalid {
                key: "params",
                value: format!("{params:e}"),
                fix: format!(
                    "the config's routed experts alone hold {routed:e} parameters; give a larger \
                     count or drop params"
                ),
            });
        }
        let active_params = match self.active_params {
            Some(a) => a.0,
            None => params - experts.map_or(0.0, |x| x.skipped_params_per_token()),
        };
        if active_params > params {
            return Err(StepTimeError::Invalid {
                key: "active_params",
                value: format!("{active_params:e}"),
                fix: format!("it cannot exceed params ({params:e})"),
            });
        }
        Ok(ModelShape {
            params,
            active_params,
            layers,
            hidden_size,
            num_attention_heads,
            num_kv_heads,
            head_dim,
            experts,
        })
    }

    /// Dense FLOP/s of one GPU: `flops` when given, else the catalogue part's figure for
    /// `compute` (an error naming the part when it has none).
    fn flops_per_s(
        &self,
        accelerator: Option<&Accelerator>,
        compute: ComputeDtype,
    ) -> Result<f64, StepTimeError> {
        match (&self.flops, accelerator) {
            (Some(text), _) => {
                hardware::parse_flops_per_s(text).ok_or_else(|| StepTimeError::Invalid {
                    key: "flops",
                    value: format!("{text:?}"),
                    fix: "write a positive number with FLOPS, GFLOPS, TFLOPS or PFLOPS, for \
                          example \"989TFLOPS\""
                        .into(),
                })
            }
            (None, Some(a)) => {
                a.flops_per_s(compute)
                    .map_err(|source| StepTimeError::HardwareFigure {
                        name: a.name.to_string(),
                        source,
                        fix: match compute {
                            ComputeDtype::Fp8 => {
                                "write dtype = \"bf16\" (an FP8 checkpoint on such a part runs \
                                 weight-only, computing in BF16) or give flops = \"...TFLOPS\""
                            }
                            ComputeDtype::Bf16 => {
                                "give flops = \"...TFLOPS\" from a source you trust"
                            }
                        },
                    })
            }
            (None, None) => Err(StepTimeError::Missing {
                key: "flops",
                fix: HARDWARE_FIX,
            }),
        }
    }

    /// Everything but the model, presets and explicit keys resolved.
    fn machine(&self) -> Result<Machine, StepTimeError> {
        let accelerator = self.hardware.as_deref().map(lookup_hardware).transpose()?;
        let weight_dtype = self.dtype.as_deref().unwrap_or("bf16");
        let weight_bytes_per_param = dtype("dtype", weight_dtype)?;
        let kv_bytes_per_element = match &self.kv_cache_dtype {
            Some(name) => dtype("kv_cache_dtype", name)?,
            None => weight_bytes_per_param,
        };
        let flops_per_s = self.flops_per_s(accelerator, compute_dtype(weight_dtype))?;
        let memory_bandwidth_bytes_per_s = match (&self.memory_bandwidth, accelerator) {
            (Some(text), _) => {
                hardware::parse_memory_bandwidth_bytes_per_s(text).ok_or_else(|| {
                    StepTimeError::Invalid {
                        key: "memory_bandwidth",
                        value: format!("{text:?}"),
                        fix: "write a positive number with GB/s or TB/s, for example \"4.8TB/s\""
                            .into(),
                    }
                })?
            }
            (None, Some(h)) => h.memory_bandwidth_bytes_per_s,
            (None, None) => {
                return Err(StepTimeError::Missing {
                    key: "memory_bandwidth",
                    fix: HARDWARE_FIX,
                });
            }
        };
        let memory_bytes = match (self.memory, accelerator) {
            (Some(SizeBytes(0)), _) => {
                return Err(StepTimeError::Invalid {
                    key: "memory",
                    value: "0".into(),
                    fix: "write a positive size, for example \"141GB\"".into(),
                });
            }
            (Some(m), _) => m.0,
            (None, Some(h)) => h.memory_bytes,
            (None, None) => {
                return Err(StepTimeError::Missing {
                    key: "memory",
                    fix: HARDWARE_FIX,
                });
            }
        };
        Ok(Machine {
            hardware: Hardware {
                flops_per_s,
                memory_bandwidth_bytes_per_s,
                memory_bytes,
            },
            weight_bytes_per_param,
            kv_bytes_per_element,
            tensor_parallel: positive("tensor_parallel", self.tensor_parallel, Some(1), "")?,
            compute_efficiency: fraction(
                "compute_efficiency",
                self.compute_efficiency,
                DEFAULT_COMPUTE_EFFICIENCY,
            )?,
            bandwidth_efficiency: fraction(
                "bandwidth_efficiency",
                self.bandwidth_efficiency,
                DEFAULT_BANDWIDTH_EFFICIENCY,
            )?,
            gpu_memory_utilization: fraction(
                "gpu_memory_utilization",
                self.gpu_memory_utilization,
                DEFAULT_GPU_MEMORY_UTILIZATION,
            )?,
            activation_reserve_bytes: self
                .activation_reserve
                .map_or(DEFAULT_ACTIVATION_RESERVE_BYTES, |s| s.0),
        })
    }
}

impl Machine {
    /// The roofline of `model` on this machine.
    fn with(self, model: ModelShape) -> SizedRoofline {
        SizedRoofline {
            roofline: Roofline {
                model,
                hardware: self.hardware,
                weight_bytes_per_param: self.weight_bytes_per_param,
                kv_bytes_per_element: self.kv_bytes_per_element,
                tensor_parallel: self.tensor_parallel,
                compute_efficiency: self.compute_efficiency,
                bandwidth_efficiency: self.bandwidth_efficiency,
            },
            gpu_memory_utilization: self.gpu_memory_utilization,
            activation_reserve_bytes: self.activation_reserve_bytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SimRng;
    use crate::timing::step_time::StepBatch;
    use rand::SeedableRng;

    fn spec(text: &str) -> Result<StepTimeSpec, toml::de::Error> {
        toml::from_str(text)
    }

    fn rng() -> SimRng {
        SimRng::seed_from_u64(7)
    }

    #[test]
    fn linear_spec_adds_its_terms_exactly() {
        let s = spec(
            "kind = \"linear\"\nbase = \"5ms\"\nper_prefill_token = \"0.1ms\"\n\
             per_decode_seq = \"50us\"\nper_kv_token = \"2.5ns\"\nper_prefill_attention_token2 = \"0.5ns\"",
        )
        .unwrap();
        let model = s.analytic().map(|m| m.expect("an analytic spec")).unwrap();
        let step = StepBatch {
            prefill_tokens: 100,
            prefill_attention_tokens2: 10_000,
            prefill_seqs: 1,
            decode_seqs: 4,
            decode_kv_tokens: 400,
            ..StepBatch::default()
        };
        let expected = 5e6 + 100.0 * 1e5 + 10_000.0 * 0.5 + 4.0 * 5e4 + 400.0 * 2.5;
        assert_eq!(model.mean_ns(&step), expected);
        assert_eq!(model.sample_ns(&step, &mut rng()), expected as u64);
        assert_eq!(s.kv_capacity_tokens(), None);
    }

    #[test]
    fn linear_per_prefill_seq_is_paid_once_per_sequence_with_a_prefill_chunk() {
        let s = spec("kind = \"linear\"\nbase = \"20ms\"\nper_prefill_seq = \"1.5ms\"").unwrap();
        let model = s.analytic().map(|m| m.expect("an analytic spec")).unwrap();
        let decodes_only = StepBatch {
            decode_seqs: 4,
            decode_kv_tokens: 400,
            ..StepBatch::default()
        };
        let two_prefills = StepBatch {
            prefill_tokens: 64,
            prefill_seqs: 2,
            ..decodes_only
        };
        assert_eq!(
            model.mean_ns(&decodes_only),
            20e6,
            "decodes pay no per_prefill_seq"
        );
        assert_eq!(
            model.mean_ns(&two_prefills),
            20e6 + 2.0 * 1.5e6,
            "expected base + 2 * per_prefill_seq, got {}",
            model.mean_ns(&two_prefills)
        );
    }

    #[test]
    fn durations_without_units_and_unknown_keys_are_rejected_with_the_key() {
        let e = spec("kind = \"linear\"\nbase = 5").unwrap_err().to_string();
        assert!(e.contains("no unit") && e.contains("\"5ns\""), "{e}");
        let e = spec("kind = \"linear\"\nbase = \"5 parsecs\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("5 parsecs"), "{e}");
        let e = spec("kind = \"linear\"\nbsae = \"5ms\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bsae"), "{e}");
        let e = spec("kind = \"roofline\"\nmodle = \"llama-3-8b\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("modle"), "{e}");
        let e = spec("kind = \"cubic\"").unwrap_err().to_string();
        assert!(e.contains("cubic"), "{e}");
        let free = spec("kind = \"linear\"\nbase = \"0ms\"").unwrap();
        let e = free
            .analytic()
            .map(|m| m.expect("an analytic spec"))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("step_time.base is missing"), "{e}");
    }

    #[test]
    fn roofline_preset_8b_on_h200_decodes_in_weights_over_bandwidth() {
        let s = spec("kind = \"roofline\"\nmodel = \"llama-3-8b\"\nhardware = \"h200\"").unwrap();
        let model = s.analytic().map(|m| m.expect("an analytic spec")).unwrap();
        let step = StepBatch {
            decode_seqs: 1,
            decode_kv_tokens: 100,
            ..StepBatch::default()
        };
        let expected_ms = 16.06e9 / (4.8e12 * DEFAULT_BANDWIDTH_EFFICIENCY) * 1e3;
        let got_ms = model.mean_ns(&step) / 1e6;
        assert!(
            (got_ms - expected_ms).abs() / expected_ms < 0.01,
            "expected ~{expected_ms} ms, got {got_ms}"
        );
    }

    #[test]
    fn kv_capacity_of_8b_on_h200_is_usable_memory_over_128_kib() {
        let s = spec("kind = \"roofline\"\nmodel = \"llama-3-8b\"\nhardware = \"h200\"").unwrap();
        let weights = 2.0 * 8_030_261_248.0;
        let expected = ((141e9 * 0.9 - weights - 2.0 * 1024f64.powi(3)) / 131_072.0).floor() as u64;
        assert_eq!(s.kv_capacity_tokens(), Some(expected));
        assert_eq!(expected, 829_254, "docs/step-time.md quotes this figure");
        let tp2 = spec(
            "kind = \"roofline\"\nmodel = \"llama-3-8b\"\nhardware = \"h200\"\ntensor_parallel = 2",
        )
        .unwrap();
        assert!(tp2.kv_capacity_tokens().unwrap() > 2 * expected);
    }

    #[test]
    fn explicit_keys_override_the_presets() {
        let s = spec(
            "kind = \"roofline\"\nmodel = \"llama-3-8b\"\nhardware = \"h100\"\nmemory = \"141GB\"\n\
             memory_bandwidth = \"4.8TB/s\"\ndtype = \"fp8\"",
        )
        .unwrap();
        let StepTimeSpec::Roofline(r) = &s else {
            panic!("not a roofline: {s:?}")
        };
        let sized = r.resolve().unwrap();
        // FP8 weights compute at the H100's FP8 figure; the explicit memory keys override it.
        let expected = Hardware {
            flops_per_s: 1979e12,
            memory_bandwidth_bytes_per_s: 4.8e12,
            memory_bytes: 141_000_000_000,
        };
        assert_eq!(sized.roofline.hardware, expected);
        assert_eq!(sized.roofline.weight_bytes(), 8_030_261_248.0);
        let explicit = spec(
            "kind = \"roofline\"\nparams = \"1.5B\"\nlayers = 28\nhidden_size = 1536\nnum_kv_heads = 2\n\
             head_dim = 128\nflops = \"100TFLOPS\"\nmemory_bandwidth = \"1000GB/s\"\nmemory = \"24GB\"",
        )
        .unwrap();
        assert!(
            explicit
                .analytic()
                .map(|m| m.expect("an analytic spec"))
                .is_ok()
        );
        assert!(explicit.kv_capacity_tokens().unwrap() > 0);
    }

    #[test]
    fn bad_roofline_values_name_the_key_and_quote_the_value() {
        let cases = [
            (
                "model = \"gpt-9\"\nhardware = \"h200\"",
                "step_time.model = \"gpt-9\"",
            ),
            (
                "model = \"llama-3-8b\"\nhardware = \"tpu\"",
                "step_time.hardware = \"tpu\"",
            ),
            ("model = \"llama-3-8b\"", "step_time.flops is missing"),
            ("hardware = \"h200\"", "step_time.params is missing"),
            (
                "model = \"llama-3-8b\"\nhardware = \"h200\"\ncompute_efficiency = 1.5",
                "compute_efficiency = 1.5",
            ),
            (
                "model = \"llama-3-8b\"\nhardware = \"h200\"\ndtype = \"fp12\"",
                "step_time.dtype = \"fp12\"",
            ),
            (
                "model = \"llama-3-8b\"\nhardware = \"h200\"\nflops = \"lots\"",
                "step_time.flops = \"lots\"",
            ),
            (
                "model = \"llama-3-8b\"\nhardware = \"h200\"\ntensor_parallel = 0",
                "tensor_parallel = 0",
            ),
            (
                "model = \"llama-3-70b\"\nhardware = \"h100\"",
                "leave no KV-cache room",
            ),
        ];
        for (body, expected) in cases {
            let s = spec(&format!("kind = \"roofline\"\n{body}")).unwrap();
            let e = s
                .analytic()
                .map(|m| m.expect("an analytic spec"))
                .map(|_| ())
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(expected),
                "for {body:?}: expected {expected:?} in {e:?}"
            );
        }
        let e = spec("kind = \"roofline\"\nparams = \"lots\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"lots\""), "{e}");
    }

    #[test]
    fn a_profile_spec_is_not_analytic_and_knows_no_kv_capacity() {
        let s = spec("kind = \"profile\"\npath = \"steps.json\"").unwrap();
        assert!(s.analytic().unwrap().is_none());
        assert_eq!(s.kv_capacity_tokens(), None);
    }

    #[test]
    fn param_counts_read_suffixes() {
        let p = ParamCount::parse("8.03B").unwrap().0;
        assert!((p - 8.03e9).abs() < 1.0, "8.03B read as {p}");
        assert_eq!(ParamCount::parse("125M"), Some(ParamCount(125e6)));
        assert_eq!(ParamCount::parse("7e9"), Some(ParamCount(7e9)));
        assert_eq!(ParamCount::parse("-1B"), None);
    }

    fn roofline(text: &str) -> RooflineSpec {
        match spec(&format!("kind = \"roofline\"\n{text}")).unwrap() {
            StepTimeSpec::Roofline(r) => *r,
            other => panic!("not a roofline: {other:?}"),
        }
    }

    #[test]
    fn a_model_path_is_left_to_the_build_step_and_the_other_keys_are_still_checked() {
        let text = "kind = \"roofline\"\nmodel = \"models/mistralai/Mixtral-8x7B-v0.1.json\"\nhardware = \"h200\"";
        let s = spec(text).unwrap();
        assert_eq!(
            s.model_file(),
            Some(Path::new("models/mistralai/Mixtral-8x7B-v0.1.json"))
        );
        assert!(s.analytic().unwrap().is_none(), "the file is not read here");
        assert_eq!(s.kv_capacity_tokens(), None);
        let StepTimeSpec::Roofline(r) = &s else {
            panic!("not a roofline")
        };
        let e = r.resolve().unwrap_err().to_string();
        assert!(e.contains("read by the build step"), "{e}");
        for (extra, expected) in [
            ("hardware = \"tpu\"", "step_time.hardware = \"tpu\""),
            (
                "flops = \"1PFLOPS\"",
                "step_time.memory_bandwidth is missing",
            ),
            (
                "hardware = \"h200\"\ncompute_efficiency = 2.0",
                "compute_efficiency = 2",
            ),
            ("hardware = \"h200\"\nlayers = 0", "step_time.layers = 0"),
        ] {
            let bad = spec(&format!(
                "kind = \"roofline\"\nmodel = \"my/config.json\"\n{extra}"
            ))
            .unwrap();
            let e = bad.analytic().map(|_| ()).unwrap_err().to_string();
            assert!(e.contains(expected), "for {extra}: {e}");
        }
        assert_eq!(
            roofline("model = \"config.json\"").model_file(),
            Some(Path::new("config.json"))
        );
        assert_eq!(roofline("model = \"Mixtral-8x7B\"").model_file(), None);
    }

    #[test]
    fn an_unknown_model_name_lists_the_presets_and_says_a_config_path_works() {
        let e = roofline("model = \"gpt-9\"\nhardware = \"h200\"")
            .resolve()
            .unwrap_err()
            .to_string();
        for part in ["\"gpt-9\"", "qwen3-30b-a3b", "mixtral-8x7b", "config.json"] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
    }

    #[test]
    fn a_config_resolves_with_explicit_keys_overriding_it() {
        let mixtral = ModelConfig::preset("mixtral-8x7b").unwrap();
        let by_file =
            roofline("model = \"m/config.json\"\nhardware = \"h200\"\ntensor_parallel = 2")
                .resolve_with(&mixtral)
                .unwrap();
        let by_name =
            roofline("model = \"mixtral-8x7b\"\nhardware = \"h200\"\ntensor_parallel = 2")
                .resolve()
                .unwrap();
        assert_eq!(by_file, by_name);
        let m = by_file.roofline.model;
        assert_eq!(
            (m.params, m.active_params),
            (mixtral.total_params(), mixtral.active_params())
        );
        let layered = roofline(
            "model = \"m/config.json\"\nhardware = \"h200\"\nlayers = 16\nactive_params = \"20B\"",
        )
        .resolve_with(&mixtral)
        .unwrap()
        .roofline
        .model;
        assert_eq!((layered.layers, layered.active_params), (16, 20e9));
        // An explicit total keeps the experts' size: the rest shrinks, the skipped experts stay.
        let smaller = roofline("model = \"mixtral-8x7b\"\nhardware = \"h200\"\nparams = \"46B\"")
            .resolve()
            .unwrap()
            .roofline
            .model;
        let skipped = mixtral.total_params() - mixtral.active_params();
        assert!((smaller.active_params - (46e9 - skipped)).abs() < 1.0);
        for (extra, expected) in [
            ("params = \"40B\"", "routed experts alone hold"),
            ("active_params = \"50B\"", "cannot exceed params"),
        ] {
            let e = roofline(&format!(
                "model = \"mixtral-8x7b\"\nhardware = \"h200\"\n{extra}"
            ))
            .resolve()
            .unwrap_err()
            .to_string();
            assert!(e.contains(expected), "for {extra}: {e}");
        }
    }

    #[test]
    fn explicit_shapes_derive_query_heads_from_hidden_size_or_take_them() {
        let base =
            "params = \"1.5B\"\nlayers = 28\nnum_kv_heads = 2\nhead_dim = 128\nhardware = \"h100\"";
        let derived = roofline(&format!("{base}\nhidden_size = 1536"))
            .resolve()
            .unwrap();
        assert_eq!(derived.roofline.model.num_attention_heads, 12);
        let given = roofline(&format!(
            "{base}\nhidden_size = 1536\nnum_attention_heads = 16"
        ))
        .resolve()
        .unwrap();
        assert_eq!(given.roofline.model.attention_width(), 2048.0);
        let e = roofline(&format!("{base}\nhidden_size = 1500"))
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_attention_heads is missing"), "{e}");
    }

    /// A spec of `kind` naming `hardware`, with the keys that kind needs.
    fn spec_of_kind(kind: &str, hardware: &str) -> StepTimeSpec {
        let body = match kind {
            "linear" => "base = \"5ms\"",
            "profile" => "path = \"steps.json\"",
            "roofline" => "model = \"llama-3-8b\"",
            "operators" => "profile = \"bundle\"\nmodel = \"qwen3-32b\"",
            other => panic!("no kind {other}"),
        };
        spec(&format!(
            "kind = \"{kind}\"\n{body}\nhardware = \"{hardware}\""
        ))
        .unwrap()
    }

    #[test]
    fn every_catalogue_name_works_in_every_step_time_kind() {
        for entry in hardware::CATALOGUE {
            for kind in ["linear", "profile", "roofline", "operators"] {
                let s = spec_of_kind(kind, entry.name);
                assert_eq!(s.hardware_name(), Some(entry.name), "{kind}");
                assert_eq!(s.accelerator().unwrap().map(|a| a.name), Some(entry.name));
                let built = s.analytic();
                if kind == "roofline" && entry.dense_bf16_flops_per_s.is_none() {
                    // No published compute figure: the error says so and `flops` fixes it.
                    let e = built.map(|_| ()).unwrap_err().to_string();
                    assert!(e.contains(entry.name) && e.contains("flops"), "{e}");
                    let StepTimeSpec::Roofline(mut r) = s else {
                        unreachable!()
                    };
                    r.flops = Some("70TFLOPS".into());
                    let sized = r.resolve().unwrap().fitting().unwrap();
                    assert_eq!(sized.roofline.hardware.memory_bytes, entry.memory_bytes);
                    continue;
                }
                let model = built.unwrap_or_else(|e| panic!("{kind} on {}: {e}", entry.name));
                assert_eq!(
                    model.is_some(),
                    matches!(kind, "linear" | "roofline"),
                    "{kind}"
                );
                // A profile or table measured on the part itself passes the build's check.
                for alias in entry.aliases {
                    s.check_measured_on(alias, Path::new("t")).unwrap();
                }
            }
        }
    }

    #[test]
    fn a_roofline_on_a_catalogue_part_takes_its_bf16_figures() {
        for entry in hardware::CATALOGUE {
            let StepTimeSpec::Roofline(r) = spec_of_kind("roofline", entry.name) else {
                unreachable!()
            };
            let Ok(sized) = r.resolve() else {
                assert!(entry.dense_bf16_flops_per_s.is_none(), "{}", entry.name);
                continue;
            };
            let expected = entry.hardware(ComputeDtype::Bf16).unwrap();
            assert_eq!(sized.roofline.hardware, expected, "{}", entry.name);
        }
    }

    #[test]
    fn fp8_weights_take_the_fp8_figure_and_a_part_without_fp8_is_refused_by_name() {
        let on = |hw: &str, extra: &str| {
            roofline(&format!(
                "model = \"llama-3-8b\"\nhardware = \"{hw}\"\n{extra}"
            ))
            .resolve()
        };
        let fp8 = on("h100", "dtype = \"fp8\"").unwrap().roofline;
        let bf16 = on("h100", "").unwrap().roofline;
        assert_eq!(fp8.hardware.flops_per_s, 1979e12);
        assert_eq!(bf16.hardware.flops_per_s, 989e12);
        assert_eq!(
            on("l40s", "dtype = \"FP8_E4M3\"")
                .unwrap()
                .roofline
                .hardware
                .flops_per_s,
            733e12
        );
        // Weight-only int4 dequantizes to BF16.
        assert_eq!(
            on("h100", "dtype = \"int4\"")
                .unwrap()
                .roofline
                .hardware
                .flops_per_s,
            989e12
        );
        for part in ["a100", "a100-40gb"] {
            let e = on(part, "dtype = \"fp8\"").unwrap_err().to_string();
            assert!(
                e.contains("has no FP8 Tensor Cores") && e.contains("dtype = \"bf16\""),
                "{e}"
            );
            assert!(e.contains("A100 SXM4"), "the part is named: {e}");
        }
        let given = on("a100", "dtype = \"fp8\"\nflops = \"312TFLOPS\"").unwrap();
        assert_eq!(given.roofline.hardware.flops_per_s, 312e12);
    }

    #[test]
    fn an_unknown_hardware_name_is_refused_in_every_kind_with_the_closest_name() {
        for kind in ["linear", "profile", "roofline", "operators"] {
            let e = spec_of_kind(kind, "rtx-pro-600")
                .analytic()
                .map(|_| ())
                .unwrap_err()
                .to_string();
            for part in [
                "step_time.hardware = \"rtx-pro-600\"",
                "did you mean \"rtx-pro-6000\"",
                "h100-sxm, h100-pcie",
            ] {
                assert!(e.contains(part), "{kind}: {part:?} not in {e}");
            }
        }
    }

    #[test]
    fn a_file_measured_on_another_device_is_refused_naming_both() {
        let s = spec_of_kind("operators", "h100");
        s.check_measured_on("NVIDIA H100 80GB HBM3", Path::new("b"))
            .unwrap();
        let e = s
            .check_measured_on(
                "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                Path::new("b/x"),
            )
            .unwrap_err()
            .to_string();
        for part in [
            "\"h100-sxm\"",
            "NVIDIA H100 SXM5",
            "b/x",
            "RTX PRO 6000",
            "\"rtx-pro-6000\"",
        ] {
            assert!(e.contains(part), "{part:?} not in {e}");
        }
        let cpu = s
            .check_measured_on("the CPU (AMD EPYC)", Path::new("p.json"))
            .unwrap_err();
        assert!(
            cpu.to_string().contains("measured on the CPU (AMD EPYC)"),
            "{cpu}"
        );
        let unnamed = spec("kind = \"profile\"\npath = \"p.json\"").unwrap();
        unnamed
            .check_measured_on("the CPU (AMD EPYC)", Path::new("p.json"))
            .unwrap();
    }
}
