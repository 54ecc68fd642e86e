//! Measured per-request LLM logs, read into typed columns: when each request reached the server,
//! its sizes, and the latencies the server measured for it.
//!
//! Formats, told apart by content ([`super::format::detect_format`], the trace crate's detector; `--format` overrides):
//! - vLLM per-request records as JSON lines (`bench/examples/*/*/vllm/requests.jsonl` of
//!   casys-kaist/LLMServingSim):
//!   `input_toks`, `output_toks`, the client's `arrival_time` (Unix seconds) and vLLM's monotonic
//!   `queued_ts`, `first_token_ts`, `last_token_ts` (seconds). The two clocks are aligned by the
//!   first request (its `queued_ts` is taken to be its `arrival_time`, as the ground truth's README
//!   says). Latencies count from `queued_ts`, as vLLM and the README define them: TTFT =
//!   `first_token_ts - queued_ts`, end-to-end = `last_token_ts - queued_ts`.
//! - capsim's own `requests.parquet` (from `simulate`, `replay --endpoint` or `replay --live`):
//!   `arrival_ns`, `input_tokens`, `output_tokens`, `latency_ns`, `ttft_ns`; completed requests
//!   only (`outcome = "completed"`; the others are counted by outcome). Latencies count from
//!   `arrival_ns`.
//! - inference-perf's `per_request_lifecycle_metrics.json` ([`super::inference_perf`]).
//! - AIPerf's `profile_export.jsonl` ([`super::aiperf`]).
//! - any CSV, JSON-lines or Parquet log through a `--map` of its columns ([`super::mapped`]).
//!
//! Records a reader leaves out (failed requests, warmup, other outcomes) are counted in
//! [`MeasuredLog::excluded`], never dropped silently. Either way TPOT =
//! `(e2e - TTFT) / (output_tokens - 1)`, undefined (NaN) for one output token.

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, UInt32Type};
use arrow_array::{Array, RecordBatch};
use capsim_trace::Format;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

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
    /// What the log was read as (`vLLM per-request records`, ...), for the fit's output.
    pub format: String,
    /// Records the reader left out, by reason, in the order first seen (empty: none).
    pub excluded: Vec<Excluded>,
}

/// Records of one kind that a reader left out of a [`MeasuredLog`].
#[derive(Debug, Clone, PartialEq)]
pub struct Excluded {
    /// Why, as a noun phrase: `failed (error set)`, `warmup`, `rejected`.
    pub reason: String,
    /// How many records.
    pub count: usize,
}

/// Counts one more record left out for `reason`.
pub(crate) fn exclude(excluded: &mut Vec<Excluded>, reason: &str) {
    match excluded.iter_mut().find(|e| e.reason == reason) {
        Some(e) => e.count += 1,
        None => excluded.push(Excluded {
            reason: reason.to_string(),
            count: 1,
        }),
    }
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

    /// The left-out records in words (`3 failed (error set), 10 warmup`); `None` when none was.
    pub fn excluded_summary(&self) -> Option<String> {
        if self.excluded.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .excluded
            .iter()
            .map(|e| format!("{} {}", e.count, e.reason))
            .collect();
        Some(parts.join(", "))
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
    /// The content matches no format this reader knows.
    #[error(
        "{}: unknown log format; capsim fit reads vLLM per-request records (JSON lines), capsim's \
         requests.parquet, inference-perf's per_request_lifecycle_metrics.json and AIPerf's \
         profile_export.jsonl, or any CSV, JSON-lines or Parquet log with --map",
        .path.display()
    )]
    UnknownFormat {
        /// The log.
        path: PathBuf,
    },
    /// A `--format` this reader does not know, or one given with `--map`.
    #[error("--format {given:?}: {message}")]
    Format {
        /// The value as given.
        given: String,
        /// What is wrong and what to give instead.
        message: String,
    },
    /// An entry of a JSON array (inference-perf's report) is malformed or lacks a key.
    #[error("{}: entry {entry} (line {line}): {message}", .path.display())]
    Entry {
        /// The log.
        path: PathBuf,
        /// 1-based index of the entry in the array.
        entry: usize,
        /// 1-based line where the entry starts.
        line: usize,
        /// What is wrong and how to fix it.
        message: String,
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
    /// Too few completed requests once failed (or warmup, ...) records are left out.
    #[error(
        "{}: {count} completed requests (left out: {excluded}); a fit needs at least {min} \
         (a log of a longer run, or of a server that fails fewer requests)",
        .path.display(), min = MIN_REQUESTS
    )]
    TooFewKept {
        /// The log.
        path: PathBuf,
        /// Requests kept.
        count: usize,
        /// The records left out, in words ([`MeasuredLog::excluded_summary`]).
        excluded: String,
    },
}

/// Parquet files start (and end) with these four bytes.
pub(crate) const PARQUET_MAGIC: &[u8; 4] = b"PAR1";

/// Whether `path` starts with Parquet's magic bytes.
pub(crate) fn is_parquet(path: &Path) -> Result<bool, LogError> {
    use std::io::Read;
    let mut head = [0u8; 4];
    let mut file = std::fs::File::open(path).map_err(|source| LogError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let n = file.read(&mut head).map_err(|source| LogError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(n == 4 && &head == PARQUET_MAGIC)
}

/// The whole of `path` as text.
pub(crate) fn read_text(path: &Path) -> Result<String, LogError> {
    std::fs::read_to_string(path).map_err(|source| LogError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// A token count read as a JSON or CSV number: a whole number from 0 to `u32::MAX`.
pub(crate) fn token_count(n: f64) -> Option<u32> {
    (n >= 0.0 && n.fract() == 0.0 && n <= f64::from(u32::MAX)).then_some(n as u32)
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

/// Sorts rows by arrival and shifts arrivals to start at 0; `format` and `excluded` are the
/// reader's.
pub(crate) fn into_log(mut rows: Vec<Row>, format: &str, excluded: Vec<Excluded>) -> MeasuredLog {
    rows.sort_by_key(|r| r.arrival_ns);
    let start = rows.first().map_or(0, |r| r.arrival_ns);
    let mut log = MeasuredLog {
        format: format.to_string(),
        excluded,
        ..MeasuredLog::default()
    };
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

/// Typed access to the columns of one record batch of capsim's `requests.parquet`; a missing
/// column or one of another type is an error naming the file and the column.
pub(crate) struct RequestColumns<'a> {
    /// The file, for errors.
    pub(crate) path: &'a Path,
    /// One record batch of it.
    pub(crate) batch: &'a RecordBatch,
}

impl<'a> RequestColumns<'a> {
    fn column(&self, name: &str) -> Result<&'a arrow_array::ArrayRef, LogError> {
        self.batch
            .column_by_name(name)
            .ok_or_else(|| LogError::MissingColumn {
                path: self.path.to_path_buf(),
                column: name.to_string(),
            })
    }

    fn wrong_type(&self, name: &str, want: &str) -> LogError {
        LogError::Parquet {
            path: self.path.to_path_buf(),
            message: format!("column `{name}` is not {want}"),
        }
    }

    /// The int64 column `name`.
    pub(crate) fn i64(&self, name: &str) -> Result<&'a arrow_array::Int64Array, LogError> {
        self.column(name)?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(|| self.wrong_type(name, "int64"))
    }

    /// The uint32 column `name`.
    pub(crate) fn u32(&self, name: &str) -> Result<&'a arrow_array::UInt32Array, LogError> {
        self.column(name)?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| self.wrong_type(name, "uint32"))
    }

    /// The int64 column `name`, `None` when the file has no such column.
    pub(crate) fn opt_i64(
        &self,
        name: &str,
    ) -> Result<Option<&'a arrow_array::Int64Array>, LogError> {
        self.batch
            .column_by_name(name)
            .map(|_| self.i64(name))
            .transpose()
    }

    /// The uint32 column `name`, `None` when the file has no such column.
    pub(crate) fn opt_u32(
        &self,
        name: &str,
    ) -> Result<Option<&'a arrow_array::UInt32Array>, LogError> {
        self.batch
            .column_by_name(name)
            .map(|_| self.u32(name))
            .transpose()
    }

    /// The string column `name`.
    pub(crate) fn string(&self, name: &str) -> Result<&'a arrow_array::StringArray, LogError> {
        self.column(name)?
            .as_string_opt::<i32>()
            .ok_or_else(|| self.wrong_type(name, "a string"))
    }
}

pub(crate) fn seconds_to_ns(s: f64) -> i64 {
    (s * 1e9).round() as i64
}

/// Reads vLLM per-request records (JSON lines; see the module docs).
pub fn read_vllm_jsonl(path: &Path) -> Result<MeasuredLog, LogError> {
    let text = read_text(path)?;
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
                         arrival_time, queued_ts, first_token_ts and last_token_ts (a log of \
                         another layout needs --map, or --format if it is a tool's own)"
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
    Ok(into_log(rows, Format::Vllm.describe(), Vec::new()))
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
    let mut excluded = Vec::new();
    let mut base_row = 0;
    for batch in reader {
        let batch = batch.map_err(|e| parquet_err(path, e))?;
        read_batch(path, &batch, base_row, &mut rows, &mut excluded)?;
        base_row += batch.num_rows();
    }
    Ok(into_log(rows, Format::Capsim.describe(), excluded))
}

fn read_batch(
    path: &Path,
    batch: &RecordBatch,
    base_row: usize,
    rows: &mut Vec<Row>,
    excluded: &mut Vec<Excluded>,
) -> Result<(), LogError> {
    let columns = RequestColumns { path, batch };
    let arrival = columns.i64("arrival_ns")?;
    let latency = columns.i64("latency_ns")?;
    let ttft = columns.i64("ttft_ns")?;
    let input = columns.u32("input_tokens")?;
    let output = columns.u32("output_tokens")?;
    let outcome = columns.string("outcome")?;
    for i in 0..batch.num_rows() {
        if outcome.is_null(i) {
            exclude(excluded, "without an outcome");
            continue;
        }
        if outcome.value(i) != "completed" {
            exclude(excluded, outcome.value(i));
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
    use crate::format::{detect_format, parse_log_format, read_log, read_log_as};
    use crate::mapped::LogMap;
    use capsim_trace::Format;

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

    #[test]
    fn the_format_is_told_by_content_not_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let vllm = write(dir.path(), "a.log", &good_log(1));
        assert_eq!(detect_format(&vllm).unwrap(), Format::Vllm);
        let aiperf = write(
            dir.path(),
            "b.jsonl",
            "{\"metadata\": {\"request_start_ns\": 1}, \"metrics\": {}, \"error\": null}\n",
        );
        assert_eq!(detect_format(&aiperf).unwrap(), Format::Aiperf);
        let ip = write(dir.path(), "c.json", "  [\n {\"start_time\": 1}]");
        assert_eq!(detect_format(&ip).unwrap(), Format::InferencePerf);
        let pq = write(dir.path(), "d.jsonl", "PAR1 and more");
        assert_eq!(detect_format(&pq).unwrap(), Format::Capsim);
        let err = detect_format(&write(dir.path(), "e.csv", "a,b\n1,2\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("e.csv") && err.contains("--map"), "{err}");
    }

    #[test]
    fn a_format_with_a_map_or_an_unknown_one_is_refused() {
        let err = parse_log_format("genai-perf").unwrap_err().to_string();
        assert!(
            err.contains("vllm, capsim, inference-perf, aiperf"),
            "{err}"
        );
        let err = parse_log_format("azure").unwrap_err().to_string();
        assert!(
            err.contains("--format \"azure\": a trace of arrivals and sizes")
                && err.contains("vllm, capsim, inference-perf, aiperf"),
            "{err}"
        );
        assert_eq!(
            parse_log_format("Inference_Perf").unwrap(),
            Format::InferencePerf
        );
        let dir = tempfile::tempdir().unwrap();
        let map = LogMap::parse("arrival=a,ttft=b,e2e=c,input_tokens=i,output_tokens=o").unwrap();
        let path = write(dir.path(), "r.jsonl", &good_log(25));
        let err = read_log_as(&path, Some(&map), Some(Format::Aiperf))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--format \"aiperf\"") && err.contains("drop --format"),
            "{err}"
        );
    }

    #[test]
    fn too_few_requests_after_failures_says_how_many_were_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let ok = "{\"metadata\": {\"request_start_ns\": 1}, \"metrics\": {\"input_sequence_length\": {\"value\": 5, \"unit\": \"tokens\"}, \"output_sequence_length\": {\"value\": 5, \"unit\": \"tokens\"}, \"time_to_first_token\": {\"value\": 1, \"unit\": \"ms\"}, \"request_latency\": {\"value\": 2, \"unit\": \"ms\"}}, \"error\": null}\n";
        let failed = "{\"metadata\": {\"request_start_ns\": 1}, \"metrics\": null, \"error\": {\"code\": 500}}\n";
        let text = ok.repeat(19) + &failed.repeat(4);
        let err = read_log(&write(dir.path(), "p.jsonl", &text), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("19 completed requests (left out: 4 failed (error set))"),
            "{err}"
        );
    }

    #[test]
    fn capsims_parquet_counts_the_requests_it_leaves_out_by_outcome() {
        use std::sync::Arc;

        use arrow_array::{ArrayRef, Int64Array, StringArray, UInt32Array};
        let outcomes = [
            "completed",
            "rejected",
            "completed",
            "timed_out",
            "rejected",
        ];
        let n = outcomes.len();
        let ns = |v: Vec<i64>| Arc::new(Int64Array::from(v)) as ArrayRef;
        let batch = RecordBatch::try_from_iter([
            ("arrival_ns", ns((0..n as i64).map(|i| i * 1_000).collect())),
            ("latency_ns", ns(vec![500; n])),
            ("ttft_ns", ns(vec![100; n])),
            (
                "input_tokens",
                Arc::new(UInt32Array::from(vec![8; n])) as ArrayRef,
            ),
            (
                "output_tokens",
                Arc::new(UInt32Array::from(vec![4; n])) as ArrayRef,
            ),
            (
                "outcome",
                Arc::new(StringArray::from(outcomes.to_vec())) as ArrayRef,
            ),
        ])
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.parquet");
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let log = read_capsim_parquet(&path).unwrap();
        assert_eq!(log.arrival_ns, vec![0, 2_000]);
        assert_eq!(
            log.excluded_summary().as_deref(),
            Some("2 rejected, 1 timed_out")
        );
    }
}
