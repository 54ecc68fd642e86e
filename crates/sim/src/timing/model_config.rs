//! A model's architecture read from its Hugging Face `config.json`: the shapes a step-time model
//! needs (layers, widths, heads, vocabulary, experts) and the parameter counts derived from them.
//!
//! Every model read here is a decoder-only transformer with grouped-query attention and a gated
//! SiLU MLP (Llama, Qwen3, Mixtral, Phi-MoE and their kin). Per layer it counts the q, k, v and o
//! projections (`2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim`), the MLP
//! (`3 * hidden * intermediate`, gate, up and down), two RMSNorm weights (plus the per-head q/k
//! norms of Qwen3), and in a mixture-of-experts layer every expert's MLP, the shared experts' and
//! the router (`hidden * num_experts`); then the embeddings, the final norm and the LM head unless
//! it is tied to the embeddings. Biases are not counted (Phi-mini-MoE's attention and LM-head
//! biases are 0.4 M of 7.6 B).
//!
//! The six configs shipped in the repository's `models/` folder are compiled in as presets
//! ([`ModelConfig::preset`]), so the binary needs no file to use them.
//!
//! ```
//! use capsim_sim::timing::model_config::ModelConfig;
//! let mixtral = ModelConfig::preset("mixtral-8x7b").unwrap();
//! assert!((mixtral.total_params() / 1e9 - 46.7).abs() < 0.1);
//! assert!((mixtral.active_params() / 1e9 - 12.9).abs() < 0.1);
//! ```

use std::path::Path;

use serde_json::{Map, Value};

/// A decoder-only transformer's architecture, as its Hugging Face `config.json` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// `_name_or_path` when the file has it, else the file's stem (`Llama-3.1-8B`).
    pub name: String,
    /// `model_type` (`llama`, `qwen3`, `qwen3_moe`, `mixtral`, `phimoe`, ...); empty when absent.
    pub model_type: String,
    /// Transformer layers (`num_hidden_layers`).
    pub layers: u32,
    /// Residual-stream width (`hidden_size`).
    pub hidden_size: u32,
    /// Width of the dense MLP (`intermediate_size`); for a mixture of experts, as written (the
    /// dense layers' width, or the experts' when the config has no `moe_intermediate_size`).
    pub intermediate_size: u32,
    /// Query heads (`num_attention_heads`).
    pub num_attention_heads: u32,
    /// Key/value heads (`num_key_value_heads`; `num_attention_heads` when absent).
    pub num_kv_heads: u32,
    /// Width of one attention head (`head_dim`; `hidden_size / num_attention_heads` when absent).
    pub head_dim: u32,
    /// Vocabulary (`vocab_size`).
    pub vocab_size: u32,
    /// Whether the LM head shares the embedding matrix (`tie_word_embeddings`, default false).
    pub tie_word_embeddings: bool,
    /// Whether each layer has per-head q/k RMSNorms (`model_type` `qwen3` and `qwen3_moe`).
    pub qk_norm: bool,
    /// The experts, for a mixture of experts; `None` for a dense model.
    pub moe: Option<MoeShape>,
}

/// The experts of a mixture-of-experts model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MoeShape {
    /// Routed experts per MoE layer (`num_local_experts`, `num_experts` or `n_routed_experts`).
    pub num_experts: u32,
    /// Routed experts each token goes through (`num_experts_per_tok`).
    pub experts_per_token: u32,
    /// MLP width of one routed expert (`moe_intermediate_size`, else `intermediate_size`).
    pub expert_intermediate_size: u32,
    /// Shared experts every token goes through: `n_shared_experts`, else 1 when
    /// `shared_expert_intermediate_size` is above 0; 0 when none.
    pub shared_experts: u32,
    /// MLP width of one shared expert: `shared_expert_intermediate_size`, else the routed
    /// experts' width when `n_shared_experts` is given; 0 when there are none.
    pub shared_intermediate_size: u32,
    /// Layers with experts: all, less the first `first_k_dense_replace`, those off the
    /// `decoder_sparse_step` and those in `mlp_only_layers` (these have a dense MLP of
    /// `intermediate_size`).
    pub moe_layers: u32,
}

/// Why a `config.json` could not be used. Each names the file; key errors name the key and say
/// what to write.
#[derive(Debug, thiserror::Error)]
pub enum ModelConfigError {
    /// The file could not be read.
    #[error("cannot read model config {file}: {source}")]
    Io {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not JSON, or not a JSON object.
    #[error("model config {file} is not a JSON object (line {line}, column {column}): {message}")]
    Syntax {
        /// The file.
        file: String,
        /// Line of the error, from 1.
        line: usize,
        /// Column of the error, from 1.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// A key the model needs is absent.
    #[error("model config {file}: key \"{key}\" is missing: {fix}")]
    Missing {
        /// The file.
        file: String,
        /// The key.
        key: &'static str,
        /// What to write.
        fix: String,
    },
    /// A key's value is out of range or of the wrong type, or keys disagree.
    #[error("model config {file}: \"{key}\" = {value} is not valid: {fix}")]
    Invalid {
        /// The file.
        file: String,
        /// The key.
        key: &'static str,
        /// The value as written in the file.
        value: String,
        /// What would be accepted.
        fix: String,
    },
}

/// A shipped config: the names it answers to, its path under the repository, its text.
struct Preset {
    names: &'static [&'static str],
    file: &'static str,
    json: &'static str,
}

const PRESETS: &[Preset] = &[
    Preset {
        names: &["llama-3.1-8b", "llama-3-8b", "llama3.1-8b", "llama3-8b"],
        file: "models/meta-llama/Llama-3.1-8B.json",
        json: include_str!("../../../../models/meta-llama/Llama-3.1-8B.json"),
    },
    Preset {
        names: &["llama-3.1-70b", "llama-3-70b", "llama3.1-70b", "llama3-70b"],
        file: "models/meta-llama/Llama-3.1-70B.json",
        json: include_str!("../../../../models/meta-llama/Llama-3.1-70B.json"),
    },
    Preset {
        names: &["qwen3-32b"],
        file: "models/Qwen/Qwen3-32B.json",
        json: include_str!("../../../../models/Qwen/Qwen3-32B.json"),
    },
    Preset {
        names: &["qwen3-30b-a3b"],
        file: "models/Qwen/Qwen3-30B-A3B-Instruct-2507.json",
        json: include_str!("../../../../models/Qwen/Qwen3-30B-A3B-Instruct-2507.json"),
    },
    Preset {
        names: &["mixtral-8x7b"],
        file: "models/mistralai/Mixtral-8x7B-v0.1.json",
        json: include_str!("../../../../models/mistralai/Mixtral-8x7B-v0.1.json"),
    },
    Preset {
        names: &["phi-mini-moe"],
        file: "models/microsoft/Phi-mini-MoE-instruct.json",
        json: include_str!("../../../../models/microsoft/Phi-mini-MoE-instruct.json"),
    },
];

/// The preset names a scenario may give as `model = "..."` (one per shipped config; the
/// `llama3-8b`-style spellings without the dash are accepted too).
pub const PRESET_NAMES: &[&str] = &[
    "llama-3.1-8b",
    "llama-3-8b",
    "llama-3.1-70b",
    "llama-3-70b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "mixtral-8x7b",
    "phi-mini-moe",
];

impl ModelConfig {
    /// Reads a `config.json` from its text; `file` names it in errors and gives the name when the
    /// text has no `_name_or_path`.
    pub fn from_json(text: &str, file: &str) -> Result<ModelConfig, ModelConfigError> {
        let value: Value = serde_json::from_str(text).map_err(|e| ModelConfigError::Syntax {
            file: file.to_string(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })?;
        let Value::Object(object) = value else {
            return Err(ModelConfigError::Syntax {
                file: file.to_string(),
                line: 1,
                column: 1,
                message: "the top level is not an object ({...})".into(),
            });
        };
        Keys { file, object }.model()
    }

    /// Reads a `config.json` file.
    pub fn load(path: &Path) -> Result<ModelConfig, ModelConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ModelConfigError::Io {
            file: file.clone(),
            source,
        })?;
        ModelConfig::from_json(&text, &file)
    }

    /// The shipped config called `name` (case-insensitive, see [`PRESET_NAMES`]), or `None`.
    pub fn preset(name: &str) -> Option<ModelConfig> {
        let name = name.to_ascii_lowercase();
        let preset = PRESETS.iter().find(|p| p.names.contains(&name.as_str()))?;
        // The shipped files are tested to load (`every_shipped_config_loads_...`).
        Some(
            ModelConfig::from_json(preset.json, preset.file)
                .unwrap_or_else(|e| panic!("shipped model config: {e}")),
        )
    }

    /// Every weight: embeddings, every layer with all its experts, the final norm, and the LM
    /// head unless tied.
    pub fn total_params(&self) -> f64 {
        let hidden = f64::from(self.hidden_size);
        let embeddings = f64::from(self.vocab_size) * hidden;
        let lm_head = if self.tie_word_embeddings {
            0.0
        } else {
            embeddings
        };
        let moe_layers = self.moe.map_or(0, |m| m.moe_layers);
        let dense_layers = self.layers - moe_layers;
        let layer_base = self.attention_params() + self.norm_params();
        let dense_mlp = 3.0 * hidden * f64::from(self.intermediate_size);
        embeddings
            + lm_head
            + hidden
            + f64::from(self.layers) * layer_base
            + f64::from(dense_layers) * dense_mlp
            + f64::from(moe_layers) * self.moe_mlp_params()
    }

    /// The weights one token multiplies: [`ModelConfig::total_params`] less, in every MoE layer,
    /// the routed experts it does not go through (`num_experts - experts_per_token` of them).
    /// Equal to the total for a dense model.
    pub fn active_params(&self) -> f64 {
        match self.moe {
            None => self.total_params(),
            Some(m) => {
                let idle = f64::from(m.num_experts - m.experts_per_token);
                self.total_params() - f64::from(m.moe_layers) * idle * self.expert_params()
            }
        }
    }

    /// Weights of one routed expert of one layer (`3 * hidden * expert_intermediate_size`); 0
    /// for a dense model.
    pub fn expert_params(&self) -> f64 {
        self.moe.map_or(0.0, |m| {
            3.0 * f64::from(self.hidden_size) * f64::from(m.expert_intermediate_size)
        })
    }

    /// KV-cache bytes of one token over all layers: `2 * layers * num_kv_heads * head_dim *
    /// kv_bytes_per_element` (keys and values).
    pub fn kv_bytes_per_token(&self, kv_bytes_per_element: f64) -> f64 {
        2.0 * f64::from(self.layers)
            * f64::from(self.num_kv_heads)
            * f64::from(self.head_dim)
            * kv_bytes_per_element
    }

    /// q, k, v and o projections of one layer.
    fn attention_params(&self) -> f64 {
        let hidden = f64::from(self.hidden_size);
        let head_dim = f64::from(self.head_dim);
        2.0 * hidden * f64::from(self.num_attention_heads) * head_dim
            + 2.0 * hidden * f64::from(self.num_kv_heads) * head_dim
    }

    /// The RMSNorm weights of one layer: before attention and before the MLP, and the per-head
    /// q/k norms when the model has them.
    fn norm_params(&self) -> f64 {
        let qk = if self.qk_norm {
            2.0 * f64::from(self.head_dim)
        } else {
            0.0
        };
        2.0 * f64::from(self.hidden_size) + qk
    }

    /// The MLP side of one MoE layer: every routed expert, the shared experts and the router.
    fn moe_mlp_params(&self) -> f64 {
        let Some(m) = self.moe else { return 0.0 };
        let hidden = f64::from(self.hidden_size);
        let shared =
            f64::from(m.shared_experts) * 3.0 * hidden * f64::from(m.shared_intermediate_size);
        f64::from(m.num_experts) * self.expert_params() + shared + hidden * f64::from(m.num_experts)
    }
}

/// The top-level object of one file, read key by key with errors that name the file and key.
struct Keys<'a> {
    file: &'a str,
    object: Map<String, Value>,
}

impl Keys<'_> {
    fn model(&self) -> Result<ModelConfig, ModelConfigError> {
        if self
            .object
            .get("kv_lora_rank")
            .is_some_and(|v| !v.is_null())
        {
            return Err(self.invalid(
                "kv_lora_rank",
                "multi-head latent attention (DeepSeek-V2/V3) is not modelled; only grouped-query \
                 attention configs are read",
            ));
        }
        let layers = self.required("num_hidden_layers")?;
        let hidden_size = self.required("hidden_size")?;
        let intermediate_size = self.required("intermediate_size")?;
        let num_attention_heads = self.required("num_attention_heads")?;
        let num_kv_heads = self
            .positive("num_key_value_heads")?
            .unwrap_or(num_attention_heads);
        if !num_attention_heads.is_multiple_of(num_kv_heads) {
            return Err(self.invalid(
                "num_key_value_heads",
                &format!(
                    "it must divide num_attention_heads ({num_attention_heads}): each key/value \
                     head serves a whole group of query heads"
                ),
            ));
        }
        let head_dim = match self.positive("head_dim")? {
            Some(d) => d,
            None if hidden_size.is_multiple_of(num_attention_heads) => {
                hidden_size / num_attention_heads
            }
            None => {
                return Err(self.missing(
                    "head_dim",
                    &format!(
                        "hidden_size ({hidden_size}) is not a multiple of num_attention_heads \
                         ({num_attention_heads}), so the head width cannot be derived; write it"
                    ),
                ));
            }
        };
        let model_type = self.text("model_type")?.unwrap_or_default();
        Ok(ModelConfig {
            name: self.name()?,
            qk_norm: matches!(model_type.as_str(), "qwen3" | "qwen3_moe"),
            model_type,
            layers,
            hidden_size,
            intermediate_size,
            num_attention_heads,
            num_kv_heads,
            head_dim,
            vocab_size: self.required("vocab_size")?,
            tie_word_embeddings: self.flag("tie_word_embeddings")?.unwrap_or(false),
            moe: self.moe(layers, intermediate_size)?,
        })
    }

    /// `_name_or_path`, else the file's stem.
    fn name(&self) -> Result<String, ModelConfigError> {
        match self.text("_name_or_path")? {
            Some(name) if !name.is_empty() => Ok(name),
            _ => Ok(Path::new(self.file).file_stem().map_or_else(
                || self.file.to_string(),
                |s| s.to_string_lossy().into_owned(),
            )),
        }
    }

    /// The experts, when the config has a positive expert count.
    fn moe(
        &self,
        layers: u32,
        intermediate_size: u32,
    ) -> Result<Option<MoeShape>, ModelConfigError> {
        let mut num_experts = None;
        for key in ["num_local_experts", "num_experts", "n_routed_experts"] {
            if let Some(n) = self.count(key)? {
                num_experts = Some((key, n));
                break;
            }
        }
        let Some((experts_key, num_experts)) = num_experts.filter(|&(_, n)| n > 0) else {
            return Ok(None);
        };
        let experts_per_token = self.positive("num_experts_per_tok")?.ok_or_else(|| {
            self.missing(
                "num_experts_per_tok",
                &format!("{experts_key} = {num_experts} makes this a mixture of experts; write how many experts each token goes through"),
            )
        })?;
        if experts_per_token > num_experts {
            return Err(self.invalid(
                "num_experts_per_tok",
                &format!("it cannot exceed {experts_key} ({num_experts})"),
            ));
        }
        let expert_intermediate_size = self
            .positive("moe_intermediate_size")?
            .unwrap_or(intermediate_size);
        let (shared_experts, shared_intermediate_size) =
            self.shared_experts(expert_intermediate_size)?;
        Ok(Some(MoeShape {
            num_experts,
            experts_per_token,
            expert_intermediate_size,
            shared_experts,
            shared_intermediate_size,
            moe_layers: self.moe_layers(layers)?,
        }))
    }

    /// (shared experts, width of each): `n_shared_experts` of the routed width, or one of
    /// `shared_expert_intermediate_size`, or none.
    fn shared_experts(&self, expert_width: u32) -> Result<(u32, u32), ModelConfigError> {
        let count = self.count("n_shared_experts")?.unwrap_or(0);
        let width = self.count("shared_expert_intermediate_size")?.unwrap_or(0);
        Ok(match (count, width) {
            (0, 0) => (0, 0),
            (0, w) => (1, w),
            (n, 0) => (n, expert_width),
            (n, w) => (n, w),
        })
    }

    /// Layers with experts (see [`MoeShape::moe_layers`]).
    fn moe_layers(&self, layers: u32) -> Result<u32, ModelConfigError> {
        let step = self.positive("decoder_sparse_step")?.unwrap_or(1);
        let first_dense = self.count("first_k_dense_replace")?.unwrap_or(0);
        let mlp_only = self.layer_list("mlp_only_layers", layers)?;
        let sparse = (0..layers)
            .filter(|&i| i >= first_dense && (i + 1).is_multiple_of(step) && !mlp_only.contains(&i))
            .count() as u32;
        if sparse == 0 {
            return Err(self.invalid(
                "decoder_sparse_step",
                "with mlp_only_layers and first_k_dense_replace it leaves no layer with experts; \
                 drop the expert keys for a dense model",
            ));
        }
        Ok(sparse)
    }

    /// A list of layer indices below `layers`; empty when absent.
    fn layer_list(&self, key: &'static str, layers: u32) -> Result<Vec<u32>, ModelConfigError> {
        let Some(value) = self.object.get(key).filter(|v| !v.is_null()) else {
            return Ok(Vec::new());
        };
        let fix = format!("write a list of layer indices from 0 to {}", layers - 1);
        let items = value.as_array().ok_or_else(|| self.invalid(key, &fix))?;
        items
            .iter()
            .map(|v| {
                v.as_u64()
                    .filter(|&i| i < u64::from(layers))
                    .map(|i| i as u32)
                    .ok_or_else(|| self.invalid(key, &fix))
            })
            .collect()
    }

    /// A non-negative integer, `None` when absent or null.
    fn count(&self, key: &'static str) -> Result<Option<u32>, ModelConfigError> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| self.invalid(key, "write a whole number of at least 0")),
        }
    }

    /// A positive integer, `None` when absent or null.
    fn positive(&self, key: &'static str) -> Result<Option<u32>, ModelConfigError> {
        match self.count(key) {
            Ok(Some(0)) | Err(_) => Err(self.invalid(key, "write a positive whole number")),
            other => other,
        }
    }

    /// A positive integer the model cannot do without.
    fn required(&self, key: &'static str) -> Result<u32, ModelConfigError> {
        self.positive(key)?.ok_or_else(|| {
            self.missing(
                key,
                "a Hugging Face config.json of a decoder-only transformer has it; write it as a \
                 positive whole number",
            )
        })
    }

    fn text(&self, key: &'static str) -> Result<Option<String>, ModelConfigError> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(self.invalid(key, "write a string")),
        }
    }

    fn flag(&self, key: &'static str) -> Result<Option<bool>, ModelConfigError> {
        match self.object.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.invalid(key, "write true or false")),
        }
    }

    fn missing(&self, key: &'static str, fix: &str) -> ModelConfigError {
        ModelConfigError::Missing {
            file: self.file.to_string(),
            key,
            fix: fix.to_string(),
        }
    }

    fn invalid(&self, key: &'static str, fix: &str) -> ModelConfigError {
        ModelConfigError::Invalid {
            file: self.file.to_string(),
            key,
            value: self
                .object
                .get(key)
                .map_or_else(|| "(absent)".to_string(), Value::to_string),
            fix: fix.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn models_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models")
    }

    fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                json_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "json") {
                out.push(path);
            }
        }
    }

    /// A small dense config with `extra` keys added (or replaced).
    fn small(extra: &str) -> String {
        let mut base: Map<String, Value> = serde_json::from_str(
            r#"{"num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 512,
                "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000}"#,
        )
        .unwrap();
        let extra: Map<String, Value> = serde_json::from_str(&format!("{{{extra}}}")).unwrap();
        base.extend(extra);
        Value::Object(base).to_string()
    }

    fn error_of(text: &str) -> String {
        ModelConfig::from_json(text, "cfg/bad.json")
            .map(|c| format!("no error: {c:?}"))
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn every_shipped_config_loads_and_every_preset_is_a_shipped_file() {
        let mut files = Vec::new();
        json_files(&models_dir(), &mut files);
        assert_eq!(files.len(), PRESETS.len(), "{files:?}");
        for path in &files {
            let config = ModelConfig::load(path).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                config.total_params() >= config.active_params(),
                "{config:?}"
            );
        }
        for preset in PRESETS {
            let on_disk =
                std::fs::read_to_string(models_dir().join(&preset.file["models/".len()..]))
                    .unwrap_or_else(|e| panic!("{}: {e}", preset.file));
            assert_eq!(on_disk, preset.json, "{}", preset.file);
            for name in preset.names {
                assert!(ModelConfig::preset(name).is_some(), "{name}");
            }
        }
        for name in PRESET_NAMES {
            assert!(ModelConfig::preset(name).is_some(), "{name}");
        }
        assert_eq!(
            ModelConfig::preset("Llama-3-8B").unwrap().name,
            "Llama-3.1-8B"
        );
        assert!(ModelConfig::preset("gpt-9").is_none());
    }

    #[test]
    fn parameter_counts_match_the_model_cards_within_2_percent() {
        // (preset, total B, active B) as the model cards state them.
        let cards = [
            ("llama-3.1-8b", 8.03, 8.03),
            ("llama-3.1-70b", 70.6, 70.6),
            ("qwen3-32b", 32.8, 32.8),
            ("mixtral-8x7b", 46.7, 12.9),
            ("qwen3-30b-a3b", 30.5, 3.3),
            ("phi-mini-moe", 7.6, 2.4),
        ];
        for (name, total_b, active_b) in cards {
            let c = ModelConfig::preset(name).unwrap();
            for (what, card, counted) in [
                ("total", total_b, c.total_params() / 1e9),
                ("active", active_b, c.active_params() / 1e9),
            ] {
                let error = counted / card - 1.0;
                assert!(
                    error.abs() <= 0.02,
                    "{name} {what}: card {card} B, counted {counted:.3} B ({:+.2}%)",
                    error * 100.0
                );
            }
        }
        // Exact for Llama-3.1-8B: the count of its published safetensors.
        assert_eq!(
            ModelConfig::preset("llama-3.1-8b").unwrap().total_params(),
            8_030_261_248.0
        );
    }

    #[test]
    fn shapes_are_read_as_written_with_defaults_where_absent() {
        let qwen = ModelConfig::preset("qwen3-32b").unwrap();
        assert_eq!(
            (qwen.hidden_size, qwen.num_attention_heads, qwen.head_dim),
            (5120, 64, 128)
        );
        assert!(qwen.qk_norm && qwen.moe.is_none());
        let llama = ModelConfig::preset("llama-3-8b").unwrap();
        assert_eq!(
            (llama.head_dim, llama.num_kv_heads),
            (128, 8),
            "4096 / 32 heads"
        );
        assert_eq!(llama.kv_bytes_per_token(2.0), 131_072.0);
        assert!(!llama.qk_norm && !llama.tie_word_embeddings);
        let mixtral = ModelConfig::preset("mixtral-8x7b").unwrap().moe.unwrap();
        assert_eq!(
            (
                mixtral.num_experts,
                mixtral.experts_per_token,
                mixtral.expert_intermediate_size
            ),
            (8, 2, 14336)
        );
        assert_eq!((mixtral.moe_layers, mixtral.shared_experts), (32, 0));
        let a3b = ModelConfig::preset("qwen3-30b-a3b").unwrap().moe.unwrap();
        assert_eq!(
            (
                a3b.num_experts,
                a3b.experts_per_token,
                a3b.expert_intermediate_size,
                a3b.moe_layers
            ),
            (128, 8, 768, 48)
        );
        let c = ModelConfig::from_json(&small(""), "dir/tiny.json").unwrap();
        assert_eq!(
            (c.name.as_str(), c.head_dim, c.num_kv_heads),
            ("tiny", 32, 2)
        );
        let named = small(r#""_name_or_path": "org/tiny", "num_key_value_heads": null"#);
        let c = ModelConfig::from_json(&named, "dir/tiny.json").unwrap();
        assert_eq!((c.name.as_str(), c.num_kv_heads), ("org/tiny", 8));
    }

    #[test]
    fn tied_embeddings_drop_the_lm_head_from_the_count() {
        let untied = ModelConfig::from_json(&small(""), "t.json").unwrap();
        let tied =
            ModelConfig::from_json(&small(r#""tie_word_embeddings": true"#), "t.json").unwrap();
        assert_eq!(untied.total_params() - tied.total_params(), 1000.0 * 256.0);
    }

    #[test]
    fn moe_layers_follow_the_sparse_step_the_dense_list_and_shared_experts_count() {
        let text = small(
            r#""num_experts": 4, "num_experts_per_tok": 1, "moe_intermediate_size": 64,
               "decoder_sparse_step": 2, "mlp_only_layers": [3], "shared_expert_intermediate_size": 128"#,
        );
        let c = ModelConfig::from_json(&text, "m.json").unwrap();
        let moe = c.moe.unwrap();
        // Layers 1 and 3 are on the step; 3 is dense by mlp_only_layers.
        assert_eq!(moe.moe_layers, 1);
        assert_eq!((moe.shared_experts, moe.shared_intermediate_size), (1, 128));
        let h = 256.0;
        let attention = 2.0 * h * 8.0 * 32.0 + 2.0 * h * 2.0 * 32.0;
        let norms = 2.0 * h;
        let dense_mlp = 3.0 * h * 512.0;
        let moe_mlp = 4.0 * 3.0 * h * 64.0 + 3.0 * h * 128.0 + h * 4.0;
        let expected = 2.0 * 1000.0 * h + h + 4.0 * (attention + norms) + 3.0 * dense_mlp + moe_mlp;
        assert_eq!(c.total_params(), expected);
        assert_eq!(c.active_params(), expected - 3.0 * 3.0 * h * 64.0);
        let deepseek_like = small(
            r#""n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
               "n_shared_experts": 2, "first_k_dense_replace": 1"#,
        );
        let moe = ModelConfig::from_json(&deepseek_like, "d.json")
            .unwrap()
            .moe
            .unwrap();
        assert_eq!(
            (
                moe.moe_layers,
                moe.shared_experts,
                moe.shared_intermediate_size
            ),
            (3, 2, 64)
        );
        let dense = ModelConfig::from_json(&small(r#""num_experts": 0"#), "z.json").unwrap();
        assert!(dense.moe.is_none());
    }

    #[test]
    fn bad_configs_name_the_file_the_key_and_the_fix() {
        let cases = [
            (
                r#"{"hidden_size": 256}"#.to_string(),
                vec!["cfg/bad.json", "\"num_hidden_layers\" is missing"],
            ),
            (
                small(r#""hidden_size": 0"#),
                vec![
                    "cfg/bad.json",
                    "\"hidden_size\" = 0",
                    "positive whole number",
                ],
            ),
            (
                small(r#""num_attention_heads": -8"#),
                vec!["\"num_attention_heads\" = -8", "positive"],
            ),
            (
                small(r#""num_key_value_heads": 3"#),
                vec![
                    "\"num_key_value_heads\" = 3",
                    "must divide num_attention_heads (8)",
                ],
            ),
            (
                small(r#""num_attention_heads": 6"#),
                vec![
                    "\"head_dim\" is missing",
                    "not a multiple",
                    "num_attention_heads (6)",
                ],
            ),
            (
                small(r#""num_local_experts": 8"#),
                vec![
                    "\"num_experts_per_tok\" is missing",
                    "num_local_experts = 8",
                ],
            ),
            (
                small(r#""num_local_experts": 8, "num_experts_per_tok": 9"#),
                vec![
                    "\"num_experts_per_tok\" = 9",
                    "cannot exceed num_local_experts (8)",
                ],
            ),
            (
                small(r#""num_experts": 8, "num_experts_per_tok": 2, "mlp_only_layers": [0, 7]"#),
                vec!["\"mlp_only_layers\" = [0,7]", "from 0 to 3"],
            ),
            (
                small(r#""kv_lora_rank": 512"#),
                vec!["\"kv_lora_rank\" = 512", "multi-head latent attention"],
            ),
            (
                small(r#""tie_word_embeddings": "yes""#),
                vec!["\"tie_word_embeddings\" = \"yes\"", "true or false"],
            ),
            (
                "{\n  \"hidden_size\": 256,\n  \"layers\" 4\n}".to_string(),
                vec!["cfg/bad.json", "line 3, column 12"],
            ),
            ("[1, 2]".to_string(), vec!["not a JSON object"]),
        ];
        for (text, expected) in cases {
            let e = error_of(&text);
            for part in expected {
                assert!(e.contains(part), "for {text}: expected {part:?} in {e:?}");
            }
        }
        let e = ModelConfig::load(Path::new("no/such/config.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no/such/config.json"), "{e}");
    }
}
