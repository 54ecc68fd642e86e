//! Measured per-request LLM logs, read into typed columns: when each request reached the server,
//! its sizes, and the latencies the server measured for it.
//!
//! Two formats:
//! - vLLM per-request records as JSON lines (`../shared/ground-truth/*/requests.jsonl`):
//!   `input_toks`, `output_toks`, the client's `arrival_time` (Unix seconds) and vLLM's monotonic
//!   `queued_ts`, `first_token_ts`, `last_token_ts` (seconds). The two clocks are aligned by the
//!   first request (its `queued_ts` is taken to be its `arrival_time`, as the ground truth's README
//!   says). Latencies count from `queued_ts`, as vLLM and the README define them: TTFT =
//!   `first_token_ts - queued_ts`, end-to-end = `last_token_ts - queued_ts`.
//! - capsim's own `requests.parquet` (from `simulate`, `replay --endpoint` or `replay --live`):
//!   `arrival_ns`, `input_tokens`, `output_tokens`, `latency_ns`, `ttft_ns`; completed requests
//!   only (`outcome = "completed"`). Latencies count from `arrival_ns`.
//!
//! Either way TPOT = `(e2e - TTFT) / (output_tokens - 1)`, undefined (NaN) for one output token.

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt32Type};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::mapped::{LogMap, read_mapped};

/// Fewest requests a log must hold for its percentiles to mean anything.
pub const MIN_REQUESTS: usize = 20;

/// A measured log: one entry per completed request, in arrival order, times in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MeasuredLog {
    /// When each request reached the server, from the first request's arrival (0).
    pub arrival_ns: Vec<u64>,
    /// Prompt tokens.
    pub input_tokens: Vec<u32>,
    /// Output tokens (at least 1).
    pub output_tokens: Vec<u32>,
    /// Time to first token, from the arrival.
    pub ttft_ns: Vec<u64>,
    /// End-to-end latency: last token, from the arrival.
    pub e2e_ns: Vec<u64>,
    /// vLLM only: the client's submission delay (`queued_ts` minus the aligned `arrival_time`);
    /// empty for logs without a client clock.
    pub submit_delay_ns: Vec<i64>,
}

impl MeasuredLog {
    /// Requests in the log.
    pub fn len(&self) -> usize {
        self.arrival_ns.len()
    }

    /// Whether the log holds no request.
    pub fn is_empty(&self) -> bool {
        self.arrival_ns.is_empty()
    }

    /// Time per output token after the first, in nanoseconds, per request; NaN for a request
    /// with one output token.
    pub fn tpot_ns(&self) -> Vec<f64> {
        (0..self.len())
            .map(|i| tpot_ns(self.ttft_ns[i], self.e2e_ns[i], self.output_tokens[i]))
            .collect()
    }
}

/// `(e2e - ttft) / (output - 1)`, NaN for one output token.
pub fn tpot_ns(ttft_ns: u64, e2e_ns: u64, output_tokens: u32) -> f64 {
    if output_tokens < 2 {
        return f64::NAN;
    }
    (e2e_ns - ttft_ns) as f64 / f64::from(output_tokens - 1)
}

/// Why a log could not be read. Each message names the file, the row or key, and the fix.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file could not be opened or read.
    #[error("{}: cannot read the log ({source}); check the path given to --log", .path.display())]
    Io {
        /// The log.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The extension names no format this reader knows.
    #[error(
        "{}: unknown log format; give vLLM per-request records as .jsonl, capsim's requests.parquet, \
         or a .csv/.jsonl with --map",
        .path.display()
    )]
    UnknownFormat {
        /// The log.
        path: PathBuf,
    },
    /// A line or row is malformed or lacks a key the fit needs.
    #[error("{}: row {row}: {message}", .path.display())]
    Row {
        /// The log.
        path: PathBuf,
        /// Row (1-based line for JSON lines, 0-based row for Parquet).
        row: usize,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A column the fit needs is missing from a Parquet log.
    #[error(
        "{}: no column `{column}`; a fit needs arrival_ns, input_tokens, output_tokens, latency_ns and \
         ttft_ns (capsim writes them for continuous-batching runs)",
        .path.display()
    )]
    MissingColumn {
        /// The log.
        path: PathBuf,
        /// The column.
        column: String,
    },
    /// A `--map` that cannot be used.
    #[error("--map {map:?}: {message}")]
    Map {
        /// The map as given.
        map: String,
        /// What is wrong with it.
        message: String,
    },
    /// The Parquet file itself is unreadable.
    #[error("{}: not a readable Parquet file ({message})", .path.display())]
    Parquet {
        /// The log.
        path: PathBuf,
        /// The cause.
        message: String,
    },
    /// A continuous-batching log given to a dynamic-batching fit.
    #[error(
        "{}: a continuous-batching log (first-token times, no batch execution times); fit it \
         with a scenario whose batcher.kind = \"continuous\"",
        .path.display()
    )]
    TokenLog {
        /// The log.
        path: PathBuf,
    },
    /// Too few completed requests to fit anything.
    #[error(
        "{}: {count} completed requests; a fit needs at least {min} (a log of a longer run)",
        .path.display(), min = MIN_REQUESTS
    )]
    TooFewRequests {
        /// The log.
        path: PathBuf,
        /// Requests found.
        count: usize,
    },
}

/// Reads a measured log: through `map` when given (CSV or JSON lines, see [`super::mapped`]),
/// else by extension (`.jsonl`/`.json` for vLLM records, `.parquet` for capsim's). Requests come
/// back sorted by arrival.
pub fn read_log(path: &Path, map: Option<&LogMap>) -> Result<MeasuredLog, LogError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let log = match (map, ext.as_str()) {
        (Some(map), _) => read_mapped(path, map)?,
        (None, "jsonl" | "json") => read_vllm_jsonl(path)?,
        (None, "parquet") => read_capsim_parquet(path)?,
        _ => {
            return Err(LogError::UnknownFormat {
                path: path.to_path_buf(),
            });
        }
    };
    if log.len() < MIN_REQUESTS {
        return Err(LogError::TooFewRequests {
            path: path.to_path_buf(),
            count: log.len(),
        });
    }
    Ok(log)
}

/// One request on its way into a [`MeasuredLog`], times in (possibly negative) nanoseconds on
/// the server's clock.
pub(crate) struct Row {
    pub(crate) arrival_ns: i64,
    pub(crate) input_tokens: u32,
    pub(crate) output_tokens: u32,
    pub(crate) ttft_ns: u64,
    pub(crate) e2e_ns: u64,
    pub(crate) submit_delay_ns: Option<i64>,
}

/// Sorts rows by arrival and shifts arrivals to start at 0.
pub(crate) fn into_log(mut rows: Vec<Row>) -> MeasuredLog {
    rows.sort_by_key(|r| r.arrival_ns);
    let start = rows.first().map_or(0, |r| r.arrival_ns);
    let mut log = MeasuredLog::default();
    for r in &rows {
        log.arrival_ns.push((r.arrival_ns - start) as u64);
        log.input_tokens.push(r.input_tokens);
        log.output_tokens.push(r.output_tokens);
        log.ttft_ns.push(r.ttft_ns);
        log.e2e_ns.push(r.e2e_ns);
        if let Some(d) = r.submit_delay_ns {
            log.submit_delay_ns.push(d);
        }
    }
    log
}

fn seconds_to_ns(s: f64) -> i64 {
    (s * 1e9).round() as i64
}

/// Reads vLLM per-request records (JSON lines; see the module docs).
pub fn read_vllm_jsonl(path: &Path) -> Result<MeasuredLog, LogError> {
    let text = std::fs::read_to_string(path).map_err(|source| LogError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let row_err = |row: usize, message: String| LogError::Row {
        path: path.to_path_buf(),
        row,
        message,
    };
    let mut rows = Vec::new();
    // (queued_ts, arrival_time) of the first request, in ns: the clocks' offset.
    let mut clock: Option<(i64, i64)> = None;
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| row_err(line_no, format!("not a JSON object ({e})")))?;
        let number = |key: &str| -> Result<f64, LogError> {
            value.get(key).and_then(serde_json::Value::as_f64).ok_or_else(|| {
                row_err(
                    line_no,
                    format!(
                        "no number `{key}`; vLLM per-request records need input_toks, output_toks, \
                         arrival_time, queued_ts, first_token_ts and last_token_ts"
                    ),
                )
            })
        };
        let tokens = |key: &str| -> Result<u32, LogError> {
            let n = number(key)?;
            if n < 0.0 || n.fract() != 0.0 || n > f64::from(u32::MAX) {
                return Err(row_err(
                    line_no,
                    format!("`{key}` = {n} is not a token count"),
                ));
            }
            Ok(n as u32)
        };
        let input_tokens = tokens("input_toks")?;
        let output_tokens = tokens("output_toks")?;
        if output_tokens == 0 {
            return Err(row_err(
                line_no,
                "`output_toks` = 0: a request that produced no token has no TTFT; drop it".into(),
            ));
        }
        let arrival = seconds_to_ns(number("arrival_time")?);
        let queued = seconds_to_ns(number("queued_ts")?);
        let first = seconds_to_ns(number("first_token_ts")?);
        let last = seconds_to_ns(number("last_token_ts")?);
        if !(queued <= first && first <= last) {
            return Err(row_err(
                line_no,
                format!(
                    "times go backwards (queued_ts {:.6} s, first_token_ts {:.6} s, last_token_ts {:.6} s); \
                     each must be at or after the one before",
                    queued as f64 / 1e9,
                    first as f64 / 1e9,
                    last as f64 / 1e9
                ),
            ));
        }
        let (queued0, arrival0) = *clock.get_or_insert((queued, arrival));
        rows.push(Row {
            arrival_ns: queued,
            input_tokens,
            output_tokens,
            ttft_ns: (first - queued) as u64,
            e2e_ns: (last - queued) as u64,
            submit_delay_ns: Some((queued - queued0) - (arrival - arrival0)),
        });
    }
    Ok(into_log(rows))
}

fn parquet_err(path: &Path, e: impl std::fmt::Display) -> LogError {
    LogError::Parquet {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Reads capsim's `requests.parquet`: its completed requests (see the module docs).
pub fn read_capsim_parquet(path: &Path) -> Result<MeasuredLog, LogError> {
    let file = std::fs::File::open(path).map_err(|source| LogError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| parquet_err(path, e))?
        .build()
        .map_err(|e| parquet_err(path, e))?;
    let mut rows = Vec::new();
    let mut base_row = 0;
    for batch in reader {
        let batch = batch.map_err(|e| parquet_err(path, e))?;
        read_batch(path, &batch, base_row, &mut rows)?;
        base_row += batch.num_rows();
    }
    Ok(into_log(rows))
}

fn read_batch(
    path: &Path,
    batch: &RecordBatch,
    base_row: usize,
    rows: &mut Vec<Row>,
) -> Result<(), LogError> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| LogError::MissingColumn {
                path: path.to_path_buf(),
                column: name.to_string(),
            })
    };
    let wrong_type = |name: &str, want: &str| LogError::Parquet {
        path: path.to_path_buf(),
        message: format!("column `{name}` is not {want}"),
    };
    let i64_col = |name: &str| {
        column(name)?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| wrong_type(name, "int64"))
    };
    let u32_col = |name: &str| {
        column(name)?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| wrong_type(name, "uint32"))
    };
    let arrival = i64_col("arrival_ns")?;
    let latency = i64_col("latency_ns")?;
    let ttft = i64_col("ttft_ns")?;
    let input = u32_col("input_tokens")?;
    let output = u32_col("output_tokens")?;
    let outcome = column("outcome")?
        .as_string_opt::<i32>()
        .ok_or_else(|| wrong_type("outcome", "a string"))?;
    for i in 0..batch.num_rows() {
        if outcome.is_null(i) || outcome.value(i) != "completed" {
            continue;
        }
        let row = base_row + i;
        let missing = |name: &str| LogError::Row {
            path: path.to_path_buf(),
            row,
            message: format!(
                "`{name}` is null for a completed request; the log comes from a run without \
                 continuous batching (no first-token times), which this fit cannot use"
            ),
        };
        if arrival.is_null(i) || arrival.value(i) < 0 {
            return Err(missing("arrival_ns"));
        }
        if ttft.is_null(i) {
            return Err(missing("ttft_ns"));
        }
        let (ttft_ns, e2e_ns) = (ttft.value(i), latency.value(i));
        if ttft_ns < 0 || e2e_ns < ttft_ns {
            return Err(LogError::Row {
                path: path.to_path_buf(),
                row,
                message: format!(
                    "ttft_ns {ttft_ns} and latency_ns {e2e_ns}: TTFT must be at least 0 and at most the latency"
                ),
            });
        }
        rows.push(Row {
            arrival_ns: arrival.value(i),
            input_tokens: input.value(i),
            output_tokens: output.value(i).max(1),
            ttft_ns: ttft_ns as u64,
            e2e_ns: e2e_ns as u64,
            submit_delay_ns: None,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: usize, queued: f64, first: f64, last: f64) -> String {
        format!(
            "{{\"request_id\": \"r{i}\", \"input_toks\": 100, \"output_toks\": 11, \
             \"arrival_time\": {}, \"queued_ts\": {queued}, \"first_token_ts\": {first}, \
             \"last_token_ts\": {last}}}\n",
            1.7e9 + queued - 500.0 - 0.001 * (i as f64)
        )
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn good_log(n: usize) -> String {
        (0..n)
            .map(|i| {
                let q = 500.0 + 0.1 * i as f64;
                record(i, q, q + 0.2, q + 1.2)
            })
            .collect()
    }

    #[test]
    fn vllm_records_count_latency_from_queued_and_align_clocks_by_the_first_request() {
        let dir = tempfile::tempdir().unwrap();
        let log = read_log(&write(dir.path(), "r.jsonl", &good_log(25)), None).unwrap();
        assert_eq!(log.len(), 25);
        assert_eq!(log.arrival_ns[0], 0);
        assert_eq!(log.arrival_ns[3], 300_000_000);
        assert_eq!(log.ttft_ns[3], 200_000_000);
        assert_eq!(log.e2e_ns[3], 1_200_000_000);
        assert_eq!(
            log.tpot_ns()[3],
            100_000_000.0,
            "(1.2 s - 0.2 s) / (11 - 1)"
        );
        assert_eq!(
            log.submit_delay_ns[0], 0,
            "the first request defines the offset"
        );
        let d = log.submit_delay_ns[3];
        assert!(
            (2_999_000..=3_001_000).contains(&d),
            "submission delay of row 3: {d} ns"
        );
    }

    #[test]
    fn a_missing_timestamp_names_the_line_and_the_keys() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = good_log(25);
        text.push_str(
            "{\"input_toks\": 5, \"output_toks\": 2, \"arrival_time\": 1, \"queued_ts\": 1}\n",
        );
        let err = read_log(&write(dir.path(), "r.jsonl", &text), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("r.jsonl: row 26") && err.contains("first_token_ts"),
            "{err}"
        );
    }

    #[test]
    fn times_going_backwards_are_refused_with_the_row() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = good_log(25);
        text.push_str(&record(25, 600.0, 599.0, 601.0));
        let err = read_log(&write(dir.path(), "r.jsonl", &text), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("row 26") && err.contains("backwards"), "{err}");
    }

    #[test]
    fn too_few_requests_are_refused_with_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_log(&write(dir.path(), "r.jsonl", &good_log(5)), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("5 completed requests") && err.contains("at least 20"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_file_and_an_unknown_format_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_log(&dir.path().join("none.jsonl"), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("none.jsonl") && err.contains("--log"), "{err}");
        let err = read_log(&write(dir.path(), "r.txt", "x"), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("r.txt") && err.contains("unknown log format"),
            "{err}"
        );
    }
}
