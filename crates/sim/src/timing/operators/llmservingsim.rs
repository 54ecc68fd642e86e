//! Reads an LLMServingSim profiler bundle into an [`OperatorTable`].
//!
//! A bundle is a folder holding `meta.yaml` and one `tpN/` folder per profiled tensor-parallel
//! degree, each with `dense.csv` (`layer,tokens,time_us`), `per_sequence.csv`
//! (`layer,sequences,time_us`), `attention.csv`
//! (`prefill_chunk,kv_prefill,n_decode,kv_decode,time_us`) and, for mixtures of experts,
//! `moe.csv` (`tokens,activated_experts,time_us`). Times there are microseconds; the table keeps
//! nanoseconds. From `meta.yaml` the reader takes `gpu`, `model`, `tp_degrees`, and the decode
//! skew coefficient `skew_fit.per_tp.<tp>.alpha_default` when `skew_fit.enabled` is true;
//! [`check_model`] compares a model config with `engine_effective.hf_overrides`, the one rank's
//! shape the profiler ran (a bundle records no other trace of the model's shape).

mod meta;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{AttentionGrid, Curve, MoeGrid, Operator, OperatorScope, OperatorTable};
use super::{OperatorTableError, TableFormat};
use crate::timing::model_config::ModelConfig;
use meta::Meta;

/// Reads the bundle in `dir` (the folder holding `meta.yaml` and `tpN/`) for `tensor_parallel`
/// ranks. `dense.csv`, `per_sequence.csv` and `attention.csv` are required; `moe.csv` is read
/// when present. A degree the bundle did not profile is refused, listing those it did.
pub fn read(dir: &Path, tensor_parallel: u32) -> Result<OperatorTable, OperatorTableError> {
    let meta = Meta::read(&dir.join("meta.yaml"))?;
    let degrees = meta.whole_numbers("tp_degrees")?;
    if !degrees.contains(&tensor_parallel) {
        let listed: Vec<String> = degrees.iter().map(u32::to_string).collect();
        return Err(OperatorTableError::Missing {
            path: dir.to_path_buf(),
            what: format!(
                "no profile at tensor_parallel = {tensor_parallel} (tp_degrees: {})",
                listed.join(", ")
            ),
            fix: "set tensor_parallel to one of those, or profile that degree".into(),
        });
    }
    let tp_dir = dir.join(format!("tp{tensor_parallel}"));
    let mut operators = read_dense(&required(&tp_dir, "dense.csv")?)?;
    operators.extend(read_per_sequence(&required(&tp_dir, "per_sequence.csv")?)?);
    let attention = read_attention(&required(&tp_dir, "attention.csv")?)?;
    let moe_file = tp_dir.join("moe.csv");
    let moe = if moe_file.is_file() {
        Some(read_moe(&moe_file)?)
    } else {
        None
    };
    Ok(OperatorTable {
        source: dir.to_path_buf(),
        format: TableFormat::LlmServingSim,
        gpu: meta.string("gpu")?,
        model: meta.string("model")?,
        tensor_parallel,
        operators,
        attention: Some(attention),
        moe,
        decode_skew_alpha: decode_skew_alpha(&meta, tensor_parallel)?,
        all_reduce: None,
    })
}

/// The tensor-parallel degrees the bundle in `dir` profiled (`meta.yaml`'s `tp_degrees`), in
/// the order written.
pub fn tensor_parallel_degrees(dir: &Path) -> Result<Vec<u32>, OperatorTableError> {
    Meta::read(&dir.join("meta.yaml"))?.whole_numbers("tp_degrees")
}

/// The `engine_effective.hf_overrides` keys a profiler divides by the tensor-parallel degree to
/// run one rank's shape on one GPU.
const RANK_OVERRIDES: [&str; 4] = [
    "intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
];

/// Checks that `config` is the model the bundle in `dir` profiled, by the per-rank shape its
/// profiler ran with: `meta.yaml`'s `engine_effective.hf_overrides` (intermediate size, heads,
/// KV heads, vocabulary of one rank; the meta keeps one degree's) must be `config`'s values
/// divided by one of `tp_degrees`. A bundle that records no overrides is not checked. The error
/// names the line and key, the bundle's values and the model's.
pub fn check_model(dir: &Path, config: &ModelConfig) -> Result<(), OperatorTableError> {
    let meta = Meta::read(&dir.join("meta.yaml"))?;
    let mut recorded = Vec::new();
    for key in RANK_OVERRIDES {
        let path = format!("engine_effective.hf_overrides.{key}");
        if let Some((value, line)) = meta.optional_number(&path)? {
            recorded.push((key, path, value, line));
        }
    }
    let Some((_, path, _, line)) = recorded.first().cloned() else {
        return Ok(());
    };
    let degrees = meta.whole_numbers("tp_degrees")?;
    let per_rank = |key: &str, tp: u32| f64::from(model_value(config, key)) / f64::from(tp);
    let fits = |tp: u32| recorded.iter().all(|(k, _, v, _)| per_rank(k, tp) == *v);
    if degrees.iter().any(|&tp| fits(tp)) {
        return Ok(());
    }
    let bundle: Vec<String> = recorded
        .iter()
        .map(|(k, _, v, _)| format!("{k} {v}"))
        .collect();
    let model: Vec<String> = recorded
        .iter()
        .map(|(k, ..)| format!("{k} {}", model_value(config, k)))
        .collect();
    let listed: Vec<String> = degrees.iter().map(u32::to_string).collect();
    Err(meta.bad(
        line,
        &path,
        format!(
            "the bundle was profiled with one rank of {} ({}), which {} ({}) divided by none of \
             its tp_degrees ({}) gives; give the model the bundle profiled ({})",
            meta.string("model").unwrap_or_default(),
            bundle.join(", "),
            config.name,
            model.join(", "),
            listed.join(", "),
            meta.string("model").unwrap_or_default(),
        ),
    ))
}

/// The value of one of [`RANK_OVERRIDES`] in `config`.
fn model_value(config: &ModelConfig, key: &str) -> u32 {
    match key {
        "intermediate_size" => config.intermediate_size,
        "num_attention_heads" => config.num_attention_heads,
        "num_key_value_heads" => config.num_kv_heads,
        _ => config.vocab_size,
    }
}

/// `skew_fit.per_tp.<tp>.alpha_default` when `skew_fit.enabled` is true; `None` when skew was
/// not fitted (the key false or absent).
fn decode_skew_alpha(meta: &Meta, tensor_parallel: u32) -> Result<Option<f64>, OperatorTableError> {
    if meta.flag("skew_fit.enabled")? != Some(true) {
        return Ok(None);
    }
    let key = format!("skew_fit.per_tp.{tensor_parallel}.alpha_default");
    meta.number(&key).map(Some)
}

/// `dir/name`, or `Missing` saying the bundle lacks it.
fn required(dir: &Path, name: &str) -> Result<PathBuf, OperatorTableError> {
    let file = dir.join(name);
    if file.is_file() {
        return Ok(file);
    }
    Err(OperatorTableError::Missing {
        path: file,
        what: "not found".into(),
        fix: format!(
            "a profiler bundle's tpN/ holds dense.csv, per_sequence.csv and attention.csv; \
             re-run the profiler for this degree or copy the whole tp{} folder",
            dir.file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix("tp"))
                .unwrap_or("N")
        ),
    })
}

/// The rows of a CSV file whose header names `columns` (any order, other columns ignored).
struct Rows {
    path: PathBuf,
    /// `(line, the fields named by columns, in that order)`.
    rows: Vec<(usize, Vec<String>)>,
}

impl Rows {
    fn read(path: &Path, columns: &[&str]) -> Result<Rows, OperatorTableError> {
        let io = |source| OperatorTableError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_path(path)
            .map_err(|e| io(std::io::Error::other(e)))?;
        let header = reader
            .headers()
            .map_err(|e| io(std::io::Error::other(e)))?
            .clone();
        let index: Vec<usize> = columns
            .iter()
            .map(|c| {
                header
                    .iter()
                    .position(|h| h == *c)
                    .ok_or_else(|| OperatorTableError::Missing {
                        path: path.to_path_buf(),
                        what: format!("no column {c:?} in the header"),
                        fix: format!("the header must name {}", columns.join(",")),
                    })
            })
            .collect::<Result<_, _>>()?;
        let mut rows = Vec::new();
        for record in reader.records() {
            let record = record.map_err(|e| OperatorTableError::Value {
                path: path.to_path_buf(),
                row: e.position().map_or(0, |p| p.line() as usize),
                column: String::new(),
                reason: format!("{e}; each row needs {} fields", header.len()),
            })?;
            let line = record.position().map_or(0, |p| p.line() as usize);
            let fields = index
                .iter()
                .map(|&i| record.get(i).unwrap_or("").to_string());
            rows.push((line, fields.collect()));
        }
        if rows.is_empty() {
            return Err(OperatorTableError::Missing {
                path: path.to_path_buf(),
                what: "no rows".into(),
                fix: "the profiler writes one row per measured shot".into(),
            });
        }
        Ok(Rows {
            path: path.to_path_buf(),
            rows,
        })
    }

    fn bad(&self, line: usize, column: &str, reason: String) -> OperatorTableError {
        OperatorTableError::Value {
            path: self.path.clone(),
            row: line,
            column: column.to_string(),
            reason,
        }
    }

    /// A whole number in `column`.
    fn count(&self, line: usize, column: &str, text: &str) -> Result<u64, OperatorTableError> {
        text.parse::<u64>().map_err(|_| {
            self.bad(
                line,
                column,
                format!("{text:?} is not a whole number of 0 or more"),
            )
        })
    }

    /// A time in microseconds in `column`, as nanoseconds.
    fn time_ns(&self, line: usize, column: &str, text: &str) -> Result<f64, OperatorTableError> {
        match text.parse::<f64>() {
            Ok(us) if us.is_finite() && us >= 0.0 => Ok(us * 1000.0),
            _ => Err(self.bad(
                line,
                column,
                format!("{text:?} is not a time in microseconds (a number of 0 or more)"),
            )),
        }
    }

    /// The operator named in `column`, which must have a scope `allowed` accepts.
    fn operator(
        &self,
        line: usize,
        text: &str,
        allowed: impl Fn(OperatorScope) -> bool,
    ) -> Result<Operator, OperatorTableError> {
        match Operator::from_name(text).filter(|op| allowed(op.scope())) {
            Some(op) => Ok(op),
            None => {
                let known: Vec<&str> = Operator::ALL
                    .into_iter()
                    .filter(|op| allowed(op.scope()))
                    .map(Operator::name)
                    .collect();
                let elsewhere = match Operator::from_name(text) {
                    Some(op) if op.scope() == OperatorScope::PerSequence => {
                        " (it is timed by sequences, in per_sequence.csv)"
                    }
                    Some(_) => " (it is timed by tokens, in dense.csv)",
                    None => "",
                };
                Err(self.bad(
                    line,
                    "layer",
                    format!(
                        "layer {text:?} does not belong in this file{elsewhere}; the layers \
                         here are: {}",
                        known.join(", ")
                    ),
                ))
            }
        }
    }
}

/// `(layer, size, time)` rows into one curve per operator, the operator's scope limited by
/// `allowed`.
fn curves(
    rows: &Rows,
    size_column: &str,
    allowed: impl Fn(OperatorScope) -> bool + Copy,
) -> Result<BTreeMap<Operator, Curve>, OperatorTableError> {
    let mut points: BTreeMap<Operator, Vec<(f64, f64)>> = BTreeMap::new();
    for (line, f) in &rows.rows {
        let op = rows.operator(*line, &f[0], allowed)?;
        let size = rows.count(*line, size_column, &f[1])?;
        let time_ns = rows.time_ns(*line, "time_us", &f[2])?;
        points.entry(op).or_default().push((size as f64, time_ns));
    }
    points
        .into_iter()
        .map(|(op, p)| {
            Curve::new(p)
                .map(|c| (op, c))
                .ok_or_else(|| rows.bad(0, op.name(), "no valid points for this layer".into()))
        })
        .collect()
}

/// `dense.csv`: the per-layer and per-step operators by tokens.
fn read_dense(path: &Path) -> Result<BTreeMap<Operator, Curve>, OperatorTableError> {
    let rows = Rows::read(path, &["layer", "tokens", "time_us"])?;
    curves(&rows, "tokens", |scope| scope != OperatorScope::PerSequence)
}

/// `per_sequence.csv`: lm_head and sampler by sequences; both required.
fn read_per_sequence(path: &Path) -> Result<BTreeMap<Operator, Curve>, OperatorTableError> {
    let rows = Rows::read(path, &["layer", "sequences", "time_us"])?;
    let read = curves(&rows, "sequences", |scope| {
        scope == OperatorScope::PerSequence
    })?;
    for op in [Operator::LmHead, Operator::Sampler] {
        if !read.contains_key(&op) {
            return Err(OperatorTableError::Missing {
                path: path.to_path_buf(),
                what: format!("no {} rows", op.name()),
                fix: "the profiler measures lm_head and sampler by sequences; re-run it".into(),
            });
        }
    }
    Ok(read)
}

/// `attention.csv`: the 4-D attention grid.
fn read_attention(path: &Path) -> Result<AttentionGrid, OperatorTableError> {
    const COLUMNS: [&str; 5] = [
        "prefill_chunk",
        "kv_prefill",
        "n_decode",
        "kv_decode",
        "time_us",
    ];
    let rows = Rows::read(path, &COLUMNS)?;
    let mut points = Vec::with_capacity(rows.rows.len());
    for (line, f) in &rows.rows {
        let mut key = [0u64; 4];
        for (axis, slot) in key.iter_mut().enumerate() {
            *slot = rows.count(*line, COLUMNS[axis], &f[axis])?;
        }
        points.push((key, rows.time_ns(*line, "time_us", &f[4])?));
    }
    AttentionGrid::new(points).map_err(|e| grid_error(&rows, e))
}

/// `moe.csv`: the mixture-of-experts block by tokens and activated experts.
fn read_moe(path: &Path) -> Result<MoeGrid, OperatorTableError> {
    let rows = Rows::read(path, &["tokens", "activated_experts", "time_us"])?;
    let mut points = Vec::with_capacity(rows.rows.len());
    for (line, f) in &rows.rows {
        let key = [
            rows.count(*line, "tokens", &f[0])?,
            rows.count(*line, "activated_experts", &f[1])?,
        ];
        points.push((key, rows.time_ns(*line, "time_us", &f[2])?));
    }
    MoeGrid::new(points).map_err(|e| grid_error(&rows, e))
}

/// A grid's complaint about row indices, as one about file lines.
fn grid_error(rows: &Rows, e: super::GridError) -> OperatorTableError {
    let line = |i: usize| rows.rows.get(i).map_or(0, |r| r.0);
    match e {
        super::GridError::Duplicate { first, second } => rows.bad(
            line(second),
            "",
            format!("repeats the point of row {}; keep one", line(first)),
        ),
        super::GridError::BadTime { index, time_ns } => rows.bad(
            line(index),
            "time_us",
            format!("{time_ns} ns is not a finite, non-negative time"),
        ),
    }
}

#[cfg(test)]
mod tests;
