//! The engine settings a measured LLM run was served with, from the `meta.json` written beside its
//! per-request log (as the ground-truth vLLM runs have it): the limits and the KV cache a fit must
//! replay with, because step-time parameters fitted under other limits fit the wrong engine.
//!
//! Read keys: `engine_kwargs.max_num_seqs`, `engine_kwargs.max_num_batched_tokens`,
//! `kv_cache.num_gpu_blocks` and `kv_cache.block_size`, each optional. Prefix caching is not
//! taken from it: whether a run's cache hit depends on prompt contents the log does not record.

use std::path::{Path, PathBuf};

use capsim_sim::Scenario;

/// One engine setting of the run: its scenario key and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunSetting {
    /// The scenario key it sets (`batcher.max_num_seqs`, ...).
    pub key: &'static str,
    /// The run's value.
    pub value: u64,
}

/// The engine settings of a run, read from its `meta.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunMeta {
    /// The file read.
    pub path: PathBuf,
    /// The settings it holds (those present and not null), always in this order:
    /// `max_num_seqs`, `max_num_batched_tokens`, `num_gpu_blocks`, `block_size`.
    pub settings: Vec<RunSetting>,
}

/// What a changed scenario key was and became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The scenario key.
    pub key: &'static str,
    /// The run's value, now the scenario's.
    pub value: u64,
    /// The scenario's value before (its TOML text; `None` when unset).
    pub was: Option<String>,
}

/// Where each setting sits in `meta.json` and which scenario key it fills.
const KEYS: [(&str, &str, &str); 4] = [
    ("engine_kwargs", "max_num_seqs", "batcher.max_num_seqs"),
    (
        "engine_kwargs",
        "max_num_batched_tokens",
        "batcher.max_num_batched_tokens",
    ),
    ("kv_cache", "num_gpu_blocks", "kv_cache.num_gpu_blocks"),
    ("kv_cache", "block_size", "kv_cache.block_size"),
];

/// Why a `meta.json` could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MetaError {
    /// Not JSON, or not an object.
    #[error("{}: not a JSON object ({message}); fix the file or move it away from the log", .path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A setting is present but not a positive integer.
    #[error("{}: {section}.{key} is {value}, not a positive integer; fix it or remove the key", .path.display())]
    Value {
        /// The file.
        path: PathBuf,
        /// Its section.
        section: &'static str,
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
    },
    /// The scenario refused a value.
    #[error("{}: {key} = {value}: {message}", .path.display())]
    Scenario {
        /// The file.
        path: PathBuf,
        /// The scenario key.
        key: &'static str,
        /// The value.
        value: u64,
        /// The scenario's message.
        message: String,
    },
}

/// The `meta.json` in the directory of `log`; `None` when there is none. A key absent or null is
/// left out; one of another type is an error naming it.
pub fn read_run_meta(log: &Path) -> Result<Option<RunMeta>, MetaError> {
    let path = log.with_file_name("meta.json");
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(None);
    };
    let json: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| MetaError::Json {
        path: path.clone(),
        message: e.to_string(),
    })?;
    if !json.is_object() {
        return Err(MetaError::Json {
            path,
            message: "the top level is not an object".into(),
        });
    }
    let mut settings = Vec::new();
    for (section, key, scenario_key) in KEYS {
        let Some(value) = json.get(section).and_then(|s| s.get(key)) else {
            continue;
        };
        if value.is_null() {
            continue;
        }
        match value.as_u64() {
            Some(v) if v > 0 => settings.push(RunSetting {
                key: scenario_key,
                value: v,
            }),
            _ => {
                return Err(MetaError::Value {
                    path,
                    section,
                    key,
                    value: value.to_string(),
                });
            }
        }
    }
    Ok(Some(RunMeta { path, settings }))
}

impl RunMeta {
    /// Sets every setting on `scenario`, returning those whose value changed.
    pub fn apply(&self, scenario: &mut Scenario) -> Result<Vec<Applied>, MetaError> {
        let mut applied = Vec::new();
        for s in &self.settings {
            let was = scenario.get(s.key).map(|v| v.to_string());
            if was.as_deref() == Some(s.value.to_string().as_str()) {
                continue;
            }
            scenario
                .set(s.key, &s.value.to_string())
                .map_err(|e| MetaError::Scenario {
                    path: self.path.clone(),
                    key: s.key,
                    value: s.value,
                    message: e.to_string(),
                })?;
            applied.push(Applied {
                key: s.key,
                value: s.value,
                was,
            });
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCENARIO: &str = r#"
[batcher]
kind = "continuous"
max_num_seqs = 64

[kv_cache]
block_size = 16
num_gpu_blocks = 1000

[step_time]
kind = "linear"
per_prefill_token = "100us"
"#;

    fn write(dir: &Path, meta: &str) -> PathBuf {
        std::fs::write(dir.join("meta.json"), meta).unwrap();
        dir.join("requests.jsonl")
    }

    #[test]
    fn the_runs_limits_replace_the_scenarios_and_unchanged_ones_are_not_reported() {
        let dir = tempfile::tempdir().unwrap();
        let log = write(
            dir.path(),
            r#"{"engine_kwargs": {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
                "kv_cache": {"num_gpu_blocks": 2588, "block_size": 16, "num_cpu_blocks": null}}"#,
        );
        let meta = read_run_meta(&log)
            .unwrap()
            .expect("meta.json beside the log");
        assert_eq!(meta.settings.len(), 4);
        let mut scenario = Scenario::from_toml_str(SCENARIO).unwrap();
        let applied = meta.apply(&mut scenario).unwrap();
        let keys: Vec<&str> = applied.iter().map(|a| a.key).collect();
        assert_eq!(
            keys,
            [
                "batcher.max_num_seqs",
                "batcher.max_num_batched_tokens",
                "kv_cache.num_gpu_blocks"
            ],
            "block_size already agreed"
        );
        assert_eq!(applied[0].was.as_deref(), Some("64"));
        assert_eq!(applied[1].was, None);
        assert_eq!(
            scenario.get("batcher.max_num_seqs").unwrap().to_string(),
            "256"
        );
    }

    #[test]
    fn no_meta_is_none_and_a_bad_value_names_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            read_run_meta(&dir.path().join("requests.jsonl"))
                .unwrap()
                .is_none()
        );
        let log = write(dir.path(), r#"{"engine_kwargs": {"max_num_seqs": "many"}}"#);
        let err = read_run_meta(&log).unwrap_err().to_string();
        assert!(
            err.contains("meta.json") && err.contains("engine_kwargs.max_num_seqs"),
            "{err}"
        );
    }
}
