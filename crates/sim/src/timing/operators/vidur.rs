//! Vidur's profiling tables (github.com/microsoft/vidur, `data/profiling/`) read into an
//! [`OperatorTable`].
//!
//! `compute/<gpu>/<org>/<model>/mlp.csv` holds one layer's non-attention operators, one row per
//! `(num_tokens, num_tensor_parallel_workers)`, each operator's times in milliseconds as
//! `time_stats.<op>.{min,max,mean,median,std}`, and the model's shape in the columns `n_head`,
//! `n_kv_head`, `n_embd`, `n_expanded_embd`, `vocab_size`. `network/<gpu>_<topology>/
//! all_reduce.csv` holds NCCL all-reduce times by message `size` (bytes) and `num_workers`.
//!
//! The median column is read (the kernel's typical time, not pulled by the odd slow run), in
//! nanoseconds. Vidur times the two RMSNorms of a layer apart (`input_layernorm`,
//! `post_attention_layernorm`); [`Operator::Layernorm`] runs twice per layer, so its curve is the
//! mean of the two, row by row. Vidur's embedding (`emb`), timed per layer in `mlp.csv`, is kept
//! as [`Operator::Embedding`] (once per step). There is no `lm_head`, sampler or attention here.

use std::collections::BTreeSet;
use std::path::Path;

use super::curve::Curve;
use super::roofline::LayerShape;
use super::table::{Operator, OperatorTable, OperatorTableError, TableFormat};

/// The compute table's file name inside a Vidur model folder.
pub const MLP_FILE: &str = "mlp.csv";

/// Vidur's operator names and the canonical operator each becomes. The two layernorms both map
/// to [`Operator::Layernorm`] and are averaged.
const OPERATORS: &[(&str, Operator)] = &[
    ("emb", Operator::Embedding),
    ("input_layernorm", Operator::Layernorm),
    ("post_attention_layernorm", Operator::Layernorm),
    ("attn_pre_proj", Operator::QkvProj),
    ("attn_rope", Operator::RotaryEmb),
    ("attn_post_proj", Operator::OProj),
    ("mlp_up_proj", Operator::GateUpProj),
    ("mlp_act", Operator::ActFn),
    ("mlp_down_proj", Operator::DownProj),
    ("add", Operator::Add),
];

const TENSOR_PARALLEL_COLUMN: &str = "num_tensor_parallel_workers";
const TOKENS_COLUMN: &str = "num_tokens";

/// Reads the Vidur model folder `dir` (holding `mlp.csv`) at `tensor_parallel` ranks, and when
/// `all_reduce` names Vidur's `all_reduce.csv`, its rows for `tensor_parallel` workers (message
/// bytes on the x axis). At `tensor_parallel` 1 there is nothing to reduce and `all_reduce` is
/// not read. The GPU is the folder under `compute/` (`h100`), the model the folders below it
/// (`meta-llama/Llama-2-7b-hf`).
///
/// Errors name the file, row and column: a missing column, a value that is not a number, a
/// tensor-parallel degree the file has no rows for (listing those it has).
pub fn read(
    dir: &Path,
    tensor_parallel: u32,
    all_reduce: Option<&Path>,
) -> Result<OperatorTable, OperatorTableError> {
    let mlp = MlpRows::read(dir, tensor_parallel)?;
    let mut operators = std::collections::BTreeMap::new();
    for &(_, op) in OPERATORS {
        if operators.contains_key(&op) {
            continue;
        }
        let names: Vec<&str> = OPERATORS
            .iter()
            .filter(|(_, o)| *o == op)
            .map(|(name, _)| *name)
            .collect();
        operators.insert(op, mlp.mean_curve(&names)?);
    }
    let all_reduce = match all_reduce {
        Some(path) if tensor_parallel > 1 => Some(read_all_reduce(path, tensor_parallel)?),
        _ => None,
    };
    let (gpu, model) = gpu_and_model(dir);
    Ok(OperatorTable {
        source: dir.to_path_buf(),
        format: TableFormat::Vidur,
        gpu,
        model,
        tensor_parallel,
        operators,
        attention: None,
        moe: None,
        decode_skew_alpha: None,
        all_reduce,
    })
}

/// The model's per-layer shape at `tensor_parallel` ranks, from `mlp.csv`'s shape columns
/// (`n_head`, `n_kv_head`, `n_embd`, `n_expanded_embd`, `vocab_size`; the head size is
/// `n_embd / n_head`). Every row must agree.
pub fn layer_shape(dir: &Path, tensor_parallel: u32) -> Result<LayerShape, OperatorTableError> {
    let mlp = MlpRows::read(dir, tensor_parallel)?;
    let heads = mlp.constant("n_head")?;
    let hidden = mlp.constant("n_embd")?;
    if heads == 0 || hidden % heads != 0 {
        return Err(mlp.value_error(
            1,
            "n_head",
            format!("n_embd {hidden} is not a multiple of n_head {heads}"),
        ));
    }
    Ok(LayerShape {
        hidden,
        heads,
        kv_heads: mlp.constant("n_kv_head")?,
        head_dim: hidden / heads,
        intermediate: mlp.constant("n_expanded_embd")?,
        vocab: mlp.constant("vocab_size")?,
        tensor_parallel: u64::from(tensor_parallel),
        qk_norm: false,
    })
}

/// The tensor-parallel degrees `dir`'s `mlp.csv` has rows for, smallest first.
pub fn tensor_parallel_degrees(dir: &Path) -> Result<Vec<u32>, OperatorTableError> {
    let path = dir.join(MLP_FILE);
    let (headers, all) = read_csv(&path)?;
    let tp_column = column(&path, &headers, TENSOR_PARALLEL_COLUMN)?;
    let mut degrees = BTreeSet::new();
    for (line, record) in &all {
        let tp = number(&path, *line, &headers, record, tp_column)?;
        if tp < 1.0 || tp.fract() != 0.0 || tp > f64::from(u32::MAX) {
            return Err(OperatorTableError::Value {
                path,
                row: *line,
                column: TENSOR_PARALLEL_COLUMN.into(),
                reason: format!("{tp} is not a positive whole number of ranks"),
            });
        }
        degrees.insert(tp as u32);
    }
    Ok(degrees.into_iter().collect())
}

/// `mlp.csv`'s rows for one tensor-parallel degree, with their line numbers.
struct MlpRows {
    path: std::path::PathBuf,
    headers: csv::StringRecord,
    /// `(1-based line, record)`.
    rows: Vec<(usize, csv::StringRecord)>,
}

impl MlpRows {
    fn read(dir: &Path, tensor_parallel: u32) -> Result<MlpRows, OperatorTableError> {
        let path = dir.join(MLP_FILE);
        let (headers, all) = read_csv(&path)?;
        let tp_column = column(&path, &headers, TENSOR_PARALLEL_COLUMN)?;
        let mut present = BTreeSet::new();
        let mut rows = Vec::new();
        for (line, record) in all {
            let tp = number(&path, line, &headers, &record, tp_column)?;
            present.insert(tp as u64);
            if tp == f64::from(tensor_parallel) {
                rows.push((line, record));
            }
        }
        if rows.is_empty() {
            let listed: Vec<String> = present.iter().map(u64::to_string).collect();
            return Err(OperatorTableError::Missing {
                path,
                what: format!("no rows with {TENSOR_PARALLEL_COLUMN} = {tensor_parallel}"),
                fix: format!(
                    "pick a tensor-parallel degree it has: {}",
                    listed.join(", ")
                ),
            });
        }
        Ok(MlpRows {
            path,
            headers,
            rows,
        })
    }

    /// The curve of the mean of Vidur's operators `names` (median column, ms -> ns) by tokens.
    fn mean_curve(&self, names: &[&str]) -> Result<Curve, OperatorTableError> {
        let tokens = column(&self.path, &self.headers, TOKENS_COLUMN)?;
        let columns = names
            .iter()
            .map(|name| {
                column(
                    &self.path,
                    &self.headers,
                    &format!("time_stats.{name}.median"),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut points = Vec::with_capacity(self.rows.len());
        for (line, record) in &self.rows {
            let x = number(&self.path, *line, &self.headers, record, tokens)?;
            let mut sum_ms = 0.0;
            for &c in &columns {
                sum_ms += number(&self.path, *line, &self.headers, record, c)?;
            }
            points.push((x, sum_ms / columns.len() as f64 * 1e6));
        }
        Curve::new(points).ok_or_else(|| OperatorTableError::Missing {
            path: self.path.clone(),
            what: format!("no usable rows for {}", names.join(" and ")),
            fix: "give a table with timed rows".into(),
        })
    }

    /// The one value of the shape column `name` that every row holds, as a positive integer.
    fn constant(&self, name: &str) -> Result<u64, OperatorTableError> {
        let c = column(&self.path, &self.headers, name)?;
        let mut value = None;
        for (line, record) in &self.rows {
            let v = number(&self.path, *line, &self.headers, record, c)?;
            if v < 1.0 || v.fract() != 0.0 {
                return Err(self.value_error(
                    *line,
                    name,
                    format!("{v} is not a positive integer"),
                ));
            }
            match value {
                None => value = Some(v),
                Some(first) if first != v => {
                    return Err(self.value_error(
                        *line,
                        name,
                        format!(
                            "{v} differs from the {first} of the rows above; one model per file"
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(value.unwrap_or(0.0) as u64)
    }

    fn value_error(&self, row: usize, column: &str, reason: String) -> OperatorTableError {
        OperatorTableError::Value {
            path: self.path.clone(),
            row,
            column: column.into(),
            reason,
        }
    }
}

/// Vidur's `all_reduce.csv` rows for `workers`, as a curve of time (ns) by message bytes.
pub fn read_all_reduce(path: &Path, workers: u32) -> Result<Curve, OperatorTableError> {
    let (headers, all) = read_csv(path)?;
    let workers_column = column(path, &headers, "num_workers")?;
    let size = column(path, &headers, "size")?;
    let time = column(path, &headers, "time_stats.all_reduce.median")?;
    let mut present = BTreeSet::new();
    let mut points = Vec::new();
    for (line, record) in &all {
        let w = number(path, *line, &headers, record, workers_column)?;
        present.insert(w as u64);
        if w == f64::from(workers) {
            let bytes = number(path, *line, &headers, record, size)?;
            points.push((bytes, number(path, *line, &headers, record, time)? * 1e6));
        }
    }
    Curve::new(points).ok_or_else(|| {
        let listed: Vec<String> = present.iter().map(u64::to_string).collect();
        OperatorTableError::Missing {
            path: path.to_path_buf(),
            what: format!("no all-reduce rows with num_workers = {workers}"),
            fix: format!(
                "pick a tensor-parallel degree it has: {}",
                listed.join(", ")
            ),
        }
    })
}

/// The header and the records of the CSV file `path`, each record with its 1-based line.
#[allow(clippy::type_complexity)]
fn read_csv(
    path: &Path,
) -> Result<(csv::StringRecord, Vec<(usize, csv::StringRecord)>), OperatorTableError> {
    let io = |e: csv::Error| match e.into_kind() {
        csv::ErrorKind::Io(source) => OperatorTableError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => OperatorTableError::Value {
            path: path.to_path_buf(),
            row: 0,
            column: String::new(),
            reason: format!("not a readable CSV file: {other:?}"),
        },
    };
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(path)
        .map_err(io)?;
    let headers = reader.headers().map_err(io)?.clone();
    let mut rows = Vec::new();
    for (i, record) in reader.records().enumerate() {
        let record = record.map_err(|e| {
            let row = e.position().map_or(i + 2, |p| p.line() as usize);
            OperatorTableError::Value {
                path: path.to_path_buf(),
                row,
                column: String::new(),
                reason: format!("{e}; every row needs as many fields as the header"),
            }
        })?;
        let line = record.position().map_or(i + 2, |p| p.line() as usize);
        rows.push((line, record));
    }
    Ok((headers, rows))
}

/// The index of the column `name`, or an error naming it.
fn column(
    path: &Path,
    headers: &csv::StringRecord,
    name: &str,
) -> Result<usize, OperatorTableError> {
    headers
        .iter()
        .position(|h| h.trim() == name)
        .ok_or_else(|| OperatorTableError::Missing {
            path: path.to_path_buf(),
            what: format!("no column {name:?}"),
            fix: "give Vidur's profiling table as its profiler wrote it".into(),
        })
}

/// The finite, non-negative number in column `c` of `record`.
fn number(
    path: &Path,
    line: usize,
    headers: &csv::StringRecord,
    record: &csv::StringRecord,
    c: usize,
) -> Result<f64, OperatorTableError> {
    let text = record.get(c).unwrap_or("").trim();
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| OperatorTableError::Value {
            path: path.to_path_buf(),
            row: line,
            column: headers.get(c).unwrap_or("").to_string(),
            reason: format!("{text:?} is not a non-negative number"),
        })
}

/// The GPU and model named by Vidur's folder layout `.../compute/<gpu>/<org>/<model>`: the
/// folder under `compute` and the path below it; without a `compute` folder, the grandparent
/// folder and the last two folders.
fn gpu_and_model(dir: &Path) -> (String, String) {
    let parts: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .filter(|c| c != "." && !c.is_empty())
        .collect();
    let gpu_at = match parts.iter().rposition(|p| p == "compute") {
        Some(i) if i + 1 < parts.len() => i + 1,
        _ => parts.len().saturating_sub(3),
    };
    let gpu = parts.get(gpu_at).cloned().unwrap_or_default();
    let model = parts
        .get(gpu_at + 1..)
        .map(|p| p.join("/"))
        .unwrap_or_default();
    (gpu, model)
}

/// The shared data's Vidur folder for `relative` (`../shared/gpu-profiles/vidur/` beside the
/// repository, or under `$CAPSIM_GPU_PROFILES`), for tests.
#[cfg(test)]
pub(crate) fn shared(relative: &str) -> std::path::PathBuf {
    let root = std::env::var("CAPSIM_GPU_PROFILES").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/gpu-profiles").into()
    });
    let path = Path::new(&root).join("vidur").join(relative);
    assert!(
        path.exists(),
        "{} missing; set CAPSIM_GPU_PROFILES",
        path.display()
    );
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    /// A two-row mlp.csv of a made-up model with `time` ms for every operator, `tp` ranks.
    fn tiny_mlp(time: &str, tp: &str) -> String {
        let mut header: Vec<String> = OPERATORS
            .iter()
            .map(|(name, _)| format!("time_stats.{name}.median"))
            .collect();
        header.extend(
            [
                "n_head",
                "n_kv_head",
                "n_embd",
                "n_expanded_embd",
                "vocab_size",
                TOKENS_COLUMN,
                TENSOR_PARALLEL_COLUMN,
            ]
            .map(String::from),
        );
        let row = |tokens: &str, t: &str| {
            let mut fields = vec![t.to_string(); OPERATORS.len()];
            fields.extend(["4", "2", "64", "256", "1000", tokens, tp].map(String::from));
            fields.join(",")
        };
        format!(
            "{}\n{}\n{}\n",
            header.join(","),
            row("1", "0.002"),
            row("8", time)
        )
    }

    #[test]
    fn vidur_h100_7b_reads_every_dense_operator_in_ns_by_tokens() {
        let table = read(&shared("compute/h100/meta-llama/Llama-2-7b-hf"), 1, None).expect("read");
        assert_eq!(table.gpu, "h100");
        assert_eq!(table.model, "meta-llama/Llama-2-7b-hf");
        assert_eq!(table.format, TableFormat::Vidur);
        assert_eq!(table.operators.len(), 9, "{:?}", table.operators.keys());
        assert!(table.attention.is_none() && table.all_reduce.is_none());
        // First row of the file: tp 1, 4096 tokens, attn_pre_proj median 0.584 ms; the file has
        // a second 4096-token row (0.593 ms) and the curve averages repeated points.
        let qkv = &table.operators[&Operator::QkvProj];
        assert!(
            (qkv.at(4096.0) - 588_500.0).abs() < 1.0,
            "{}",
            qkv.at(4096.0)
        );
        assert_eq!(qkv.points().len(), 259);
        // Layernorm: the mean of input_layernorm (0.0665) and post_attention_layernorm (0.067)
        // in the first row, averaged with the second 4096 row (0.0665, 0.067).
        let norm = table.operators[&Operator::Layernorm].at(4096.0);
        assert!((norm - 66_750.0).abs() < 1.0, "{norm}");
    }

    #[test]
    fn vidur_shape_comes_from_its_columns() {
        let shape =
            layer_shape(&shared("compute/h100/meta-llama/Llama-2-70b-hf"), 4).expect("shape");
        assert_eq!(
            shape,
            LayerShape {
                hidden: 8192,
                heads: 64,
                kv_heads: 8,
                head_dim: 128,
                intermediate: 28672,
                vocab: 32768,
                tensor_parallel: 4,
                qk_norm: false,
            }
        );
    }

    #[test]
    fn all_reduce_rows_of_the_table_degree_become_a_curve_by_bytes() {
        let path = shared("network/h100_dgx/all_reduce.csv");
        let table = read(
            &shared("compute/h100/meta-llama/Llama-2-7b-hf"),
            2,
            Some(&path),
        )
        .expect("read");
        let curve = table.all_reduce.expect("all-reduce read at tp 2");
        assert!(curve.points().len() > 100, "{}", curve.points().len());
        assert!(curve.at(1e8) > curve.at(1e6), "more bytes take longer");
        let err = read(
            &shared("compute/h100/meta-llama/Llama-2-7b-hf"),
            16,
            Some(&path),
        )
        .expect_err("no tp 16 rows");
        assert!(err.to_string().contains("1, 2, 4, 8"), "{err}");
    }

    #[test]
    fn a_tensor_parallel_degree_not_in_the_file_is_refused_listing_those_present() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), MLP_FILE, &tiny_mlp("0.01", "2"));
        let err = read(dir.path(), 4, None).expect_err("no tp 4");
        let text = err.to_string();
        assert!(
            text.contains("mlp.csv") && text.contains("= 4") && text.contains(": 2"),
            "{text}"
        );
    }

    #[test]
    fn the_degrees_of_a_table_are_listed_once_each() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut text = tiny_mlp("0.01", "2");
        text.push_str(tiny_mlp("0.01", "1").lines().nth(1).expect("a row"));
        write(dir.path(), MLP_FILE, &text);
        assert_eq!(
            tensor_parallel_degrees(dir.path()).expect("degrees"),
            vec![1, 2]
        );
    }

    #[test]
    fn a_bad_number_is_refused_naming_file_row_and_column() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), MLP_FILE, &tiny_mlp("fast", "1"));
        let text = read(dir.path(), 1, None)
            .expect_err("bad value")
            .to_string();
        assert!(
            text.contains("mlp.csv")
                && text.contains("row 3")
                && text.contains("time_stats.emb.median")
                && text.contains("\"fast\""),
            "{text}"
        );
    }

    #[test]
    fn a_missing_column_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text =
            tiny_mlp("0.01", "1").replace("time_stats.mlp_act.median", "time_stats.other.median");
        write(dir.path(), MLP_FILE, &text);
        let err = read(dir.path(), 1, None)
            .expect_err("missing column")
            .to_string();
        assert!(err.contains("time_stats.mlp_act.median"), "{err}");
    }

    #[test]
    fn the_tiny_table_converts_ms_to_ns_and_reads_its_shape() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), MLP_FILE, &tiny_mlp("0.01", "1"));
        let table = read(dir.path(), 1, None).expect("read");
        assert_eq!(
            table.operators[&Operator::Add].points(),
            &[(1.0, 2000.0), (8.0, 10_000.0)]
        );
        let shape = layer_shape(dir.path(), 1).expect("shape");
        assert_eq!(
            (shape.head_dim, shape.kv_heads, shape.intermediate),
            (16, 2, 256)
        );
    }

    #[test]
    fn gpu_and_model_follow_vidurs_folders() {
        assert_eq!(
            gpu_and_model(Path::new("/d/vidur/compute/a100/codellama/CodeLlama-34b")),
            ("a100".to_string(), "codellama/CodeLlama-34b".to_string())
        );
        assert_eq!(
            gpu_and_model(Path::new("x/h100/org/model")),
            ("h100".to_string(), "org/model".to_string())
        );
    }
}
