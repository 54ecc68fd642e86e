//! Writers for a run's files: `summary.json`, `requests.parquet` and `timeseries.parquet`.
//! Outputs are deterministic: the same records give byte-identical files.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, UInt32Array,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::record::{NONE, Outcome, RequestRecord};
use crate::summary::Summary;
use crate::timeseries::Timeseries;

/// Why an output file could not be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// Creating or writing the file failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Encoding Parquet failed.
    #[error("cannot write {path}: {message}")]
    Encode {
        /// The file.
        path: PathBuf,
        /// The encoder's message.
        message: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> OutputError + '_ {
    move |source| OutputError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes the summary as pretty-printed JSON.
pub fn write_summary_json(path: &Path, summary: &Summary) -> Result<(), OutputError> {
    let text = serde_json::to_string_pretty(summary).map_err(|e| OutputError::Encode {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let mut file = File::create(path).map_err(io_err(path))?;
    file.write_all(text.as_bytes()).map_err(io_err(path))?;
    file.write_all(b"\n").map_err(io_err(path))
}

fn write_batch(path: &Path, columns: Vec<(&str, ArrayRef)>) -> Result<(), OutputError> {
    let encode = |message: String| OutputError::Encode {
        path: path.to_path_buf(),
        message,
    };
    let fields: Vec<Field> = columns
        .iter()
        .map(|(name, array)| {
            Field::new(
                *name,
                array.data_type().clone(),
                array.null_count() > 0 || matches!(array.data_type(), DataType::Utf8),
            )
        })
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(
        schema.clone(),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .map_err(|e| encode(e.to_string()))?;
    let file = File::create(path).map_err(io_err(path))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_created_by(format!("capsim {}", env!("CARGO_PKG_VERSION")))
        .build();
    let mut writer =
        ArrowWriter::try_new(file, schema, Some(props)).map_err(|e| encode(e.to_string()))?;
    writer.write(&batch).map_err(|e| encode(e.to_string()))?;
    writer.close().map_err(|e| encode(e.to_string()))?;
    Ok(())
}

fn time_column(records: &[RequestRecord], get: impl Fn(&RequestRecord) -> u64) -> ArrayRef {
    Arc::new(Int64Array::from_iter(records.iter().map(|r| {
        let v = get(r);
        (v != NONE).then_some(v as i64)
    })))
}

fn index_column(records: &[RequestRecord], get: impl Fn(&RequestRecord) -> u32) -> ArrayRef {
    Arc::new(UInt32Array::from_iter(records.iter().map(|r| {
        let v = get(r);
        (v != u32::MAX).then_some(v)
    })))
}

/// Writes per-request records; `pool_names[i]` names pool `i`. Times are nanoseconds since the
/// origin (null where the request never reached the stage); `latency_ns` is from the intended
/// arrival.
pub fn write_requests_parquet(
    path: &Path,
    records: &[RequestRecord],
    pool_names: &[String],
) -> Result<(), OutputError> {
    let mut columns = request_columns(records, pool_names);
    columns.extend(stage_time_columns(records));
    columns.extend(outcome_columns(records));
    if records.iter().any(|r| r.first_token_ns != NONE) {
        columns.extend(token_columns(records));
    }
    write_batch(path, columns)
}

/// Who each record is: the request, its attempt, where it ran and its token counts.
fn request_columns(
    records: &[RequestRecord],
    pool_names: &[String],
) -> Vec<(&'static str, ArrayRef)> {
    vec![
        (
            "request",
            Arc::new(UInt32Array::from_iter_values(
                records.iter().map(|r| r.request),
            )),
        ),
        (
            "attempt",
            Arc::new(UInt32Array::from_iter_values(
                records.iter().map(|r| u32::from(r.attempt)),
            )),
        ),
        (
            "pool",
            Arc::new(StringArray::from_iter(
                records
                    .iter()
                    .map(|r| pool_names.get(r.pool as usize).map(String::as_str)),
            )),
        ),
        ("instance", index_column(records, |r| r.instance)),
        (
            "model_instance",
            index_column(records, |r| r.model_instance),
        ),
        ("client", index_column(records, |r| r.client)),
        (
            "input_tokens",
            Arc::new(UInt32Array::from_iter_values(
                records.iter().map(|r| r.input_tokens),
            )),
        ),
        (
            "output_tokens",
            Arc::new(UInt32Array::from_iter_values(
                records.iter().map(|r| r.output_tokens),
            )),
        ),
    ]
}

/// When each record reached each stage, its latency, and its batch.
fn stage_time_columns(records: &[RequestRecord]) -> Vec<(&'static str, ArrayRef)> {
    vec![
        ("arrival_ns", time_column(records, |r| r.arrival_ns)),
        ("gateway_ns", time_column(records, |r| r.gateway_ns)),
        ("admitted_ns", time_column(records, |r| r.admitted_ns)),
        ("queued_ns", time_column(records, |r| r.queued_ns)),
        (
            "batch_formed_ns",
            time_column(records, |r| r.batch_formed_ns),
        ),
        ("exec_start_ns", time_column(records, |r| r.exec_start_ns)),
        ("exec_end_ns", time_column(records, |r| r.exec_end_ns)),
        (
            "postprocessed_ns",
            time_column(records, |r| r.postprocessed_ns),
        ),
        ("response_ns", time_column(records, |r| r.response_ns)),
        (
            "latency_ns",
            Arc::new(Int64Array::from_iter_values(
                records.iter().map(|r| r.latency_ns() as i64),
            )),
        ),
        ("batch_id", time_column(records, |r| r.batch_id)),
        (
            "batch_size",
            Arc::new(UInt32Array::from_iter_values(
                records.iter().map(|r| r.batch_size),
            )),
        ),
    ]
}

/// How each record ended: its outcome, the reason of a rejection or failure, a cache hit.
fn outcome_columns(records: &[RequestRecord]) -> Vec<(&'static str, ArrayRef)> {
    vec![
        (
            "outcome",
            Arc::new(StringArray::from_iter_values(
                records.iter().map(|r| r.outcome.as_str()),
            )),
        ),
        (
            "reject_reason",
            Arc::new(StringArray::from_iter(records.iter().map(
                |r| match r.outcome {
                    Outcome::Rejected(reason) => Some(reason.as_str()),
                    _ => None,
                },
            ))),
        ),
        (
            "fail_reason",
            Arc::new(StringArray::from_iter(records.iter().map(
                |r| match r.outcome {
                    Outcome::Failed(reason) => Some(reason.label()),
                    _ => None,
                },
            ))),
        ),
        (
            "cache_hit",
            Arc::new(BooleanArray::from_iter(
                records.iter().map(|r| Some(r.cache_hit)),
            )),
        ),
    ]
}

/// The token times of a continuous batcher: the first token, and the TTFT and TPOT of each
/// request completed with tokens (null for the others).
fn token_columns(records: &[RequestRecord]) -> Vec<(&'static str, ArrayRef)> {
    let mut columns: Vec<(&'static str, ArrayRef)> = Vec::new();
    let completed_with_tokens =
        |r: &RequestRecord| r.outcome == Outcome::Completed && r.first_token_ns != NONE;
    columns.push(("first_token_ns", time_column(records, |r| r.first_token_ns)));
    columns.push((
        "ttft_ns",
        Arc::new(Int64Array::from_iter(
            records
                .iter()
                .map(|r| completed_with_tokens(r).then(|| r.ttft_ns() as i64)),
        )),
    ));
    columns.push((
        "tpot_ns",
        Arc::new(Int64Array::from_iter(records.iter().map(|r| {
            if completed_with_tokens(r) {
                r.tpot_ns().map(|t| t as i64)
            } else {
                None
            }
        }))),
    ));
    columns
}

/// Writes the sampled timeseries.
pub fn write_timeseries_parquet(path: &Path, ts: &Timeseries) -> Result<(), OutputError> {
    let u32s = |v: &[u32]| -> ArrayRef { Arc::new(UInt32Array::from(v.to_vec())) };
    let f64s = |v: &[f64]| -> ArrayRef { Arc::new(Float64Array::from(v.to_vec())) };
    let mut columns: Vec<(&str, ArrayRef)> = vec![
        (
            "time_ns",
            Arc::new(Int64Array::from_iter_values(
                ts.time_ns.iter().map(|&t| t as i64),
            )),
        ),
        ("queued", u32s(&ts.queued)),
        ("preprocess_waiting", u32s(&ts.preprocess_waiting)),
        ("in_system", u32s(&ts.in_system)),
        ("busy_model_instances", u32s(&ts.busy_model_instances)),
        ("utilization", f64s(&ts.utilization)),
        ("arrivals", u32s(&ts.arrivals)),
        ("finished", u32s(&ts.finished)),
        ("batches", u32s(&ts.batches)),
        ("batch_size_mean", f64s(&ts.batch_size_mean)),
    ];
    if !ts.running.is_empty() {
        columns.push(("running", u32s(&ts.running)));
        columns.push(("waiting", u32s(&ts.waiting)));
        columns.push(("kv_utilization", f64s(&ts.kv_utilization)));
    }
    let server: Vec<(String, ArrayRef)> = ts
        .server_metrics
        .iter()
        .map(|(name, values)| (format!("server:{name}"), f64s(values)))
        .collect();
    columns.extend(
        server
            .iter()
            .map(|(name, array)| (name.as_str(), array.clone())),
    );
    write_batch(path, columns)
}
