//! Load generators' per-request exports, read for their arrivals and sizes: inference-perf's
//! `per_request_lifecycle_metrics.json` (one JSON array, an entry per request) and AIPerf's
//! `profile_export.jsonl` (one record a line, with `metadata` and `metrics` objects).
//!
//! Each record holds its arrival and its two sizes at nested keys, some with older spellings
//! tried after the current one (`format.rs`'s `Fields`). A failed record (its `error` set) and an AIPerf
//! record of the `warmup` phase are left out and counted by reason, as `capsim fit` leaves them
//! out; an unusable value is an error naming the file, the entry (inference-perf) or line
//! (AIPerf) and the key, or with `--skip-invalid` a counted row. The keys and units are in
//! `docs/trace-format.md`; `capsim fit` reads the same files for their latencies.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::Value;

use super::jsonl::{arrival_value, size_value};
use super::{Builder, Issues, Part, Presence, ReadOptions, RowBuf, TimeBase};
use crate::format::{AIPERF, Fields, INFERENCE_PERF, dotted};
use crate::{InvalidReason, TraceError};

/// Reads inference-perf's JSON array; a record is named by its 1-based entry number.
pub(crate) fn read_inference_perf(path: &Path, opts: &ReadOptions<'_>) -> Result<Part, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let entries: Vec<Value> =
        serde_json::from_str(&text).map_err(|e| TraceError::InvalidValue {
            path: path.to_path_buf(),
            at: "line",
            line: e.line() as u64,
            column: "(record)".into(),
            value: String::new(),
            reason: InvalidReason::BadRecord,
            hint: format!(
                "not a JSON array of per-request entries ({e}); inference-perf writes one as \
                 per_request_lifecycle_metrics.json"
            ),
        })?;
    let mut records = Records::new(path, opts, &INFERENCE_PERF, "entry");
    for (k, entry) in entries.iter().enumerate() {
        records.read(k as u64 + 1, entry)?;
    }
    Ok(records.finish())
}

/// Reads AIPerf's JSON lines; a record is named by its line.
pub(crate) fn read_aiperf(path: &Path, opts: &ReadOptions<'_>) -> Result<Part, TraceError> {
    let io_err = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = BufReader::new(File::open(path).map_err(io_err)?);
    let mut records = Records::new(path, opts, &AIPERF, "line");
    let mut line = Vec::new();
    let mut line_no = 0u64;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io_err)? == 0 {
            break;
        }
        line_no += 1;
        let text = line.trim_ascii();
        if text.is_empty() {
            continue;
        }
        match serde_json::from_slice::<Value>(text) {
            Ok(record) => records.read(line_no, &record)?,
            Err(_) => records.bad_record(line_no, text)?,
        }
    }
    Ok(records.finish())
}

/// The records of one file on their way into a [`Part`].
struct Records<'a> {
    path: &'a Path,
    fields: &'static Fields,
    issues: Issues<'a>,
    cols: Builder,
    row: RowBuf,
    rows_read: u64,
    left_out: BTreeMap<&'static str, u64>,
}

impl<'a> Records<'a> {
    fn new(
        path: &'a Path,
        opts: &ReadOptions<'_>,
        fields: &'static Fields,
        at: &'static str,
    ) -> Records<'a> {
        let mut issues = Issues::new(path, opts.skip_invalid);
        issues.at = at;
        let presence = Presence {
            output_tokens: true,
            ..Presence::default()
        };
        Records {
            path,
            fields,
            issues,
            cols: Builder::new(presence, 1024),
            row: RowBuf::default(),
            rows_read: 0,
            left_out: BTreeMap::new(),
        }
    }

    /// A record that is not JSON: an error, or a counted row with `--skip-invalid`.
    fn bad_record(&mut self, at: u64, text: &[u8]) -> Result<(), TraceError> {
        self.rows_read += 1;
        self.issues
            .bad(at, "(record)", text, InvalidReason::BadRecord)
    }

    /// Reads one record (`at`: its entry or line number): kept, left out, or an issue.
    fn read(&mut self, at: u64, record: &Value) -> Result<(), TraceError> {
        self.rows_read += 1;
        if !record.is_object() {
            let shown = record.to_string();
            return self
                .issues
                .bad(at, "(record)", shown.as_bytes(), InvalidReason::BadRecord);
        }
        if record.get("error").is_some_and(|e| !e.is_null()) {
            *self.left_out.entry("failed (error set)").or_insert(0) += 1;
            return Ok(());
        }
        let phase = record.pointer("/metadata/benchmark_phase");
        if self.fields.skip_warmup && phase.and_then(Value::as_str) == Some("warmup") {
            *self.left_out.entry("warmup").or_insert(0) += 1;
            return Ok(());
        }
        let fields = self.fields;
        let arrival = record.pointer(fields.arrival).unwrap_or(&Value::Null);
        self.row.arrival = match arrival_value(arrival, fields.arrival_unit) {
            Ok(ns) => ns,
            Err(reason) => return self.bad(at, &[fields.arrival], Some(arrival), reason),
        };
        let input = first_of(record, fields.input);
        self.row.input = match size_value(input) {
            Ok(n) => n,
            Err(reason) => return self.bad(at, fields.input, input, reason),
        };
        let output = first_of(record, fields.output);
        self.row.output = match size_value(output) {
            Ok(n) => n,
            Err(reason) => return self.bad(at, fields.output, output, reason),
        };
        self.cols.push(&self.row);
        Ok(())
    }

    /// An unusable value at `keys` (each spelling named, the first tried first).
    fn bad(
        &mut self,
        at: u64,
        keys: &[&str],
        value: Option<&Value>,
        reason: InvalidReason,
    ) -> Result<(), TraceError> {
        let column = keys
            .iter()
            .map(|k| dotted(k))
            .collect::<Vec<_>>()
            .join(" or ");
        let shown = value.map(Value::to_string).unwrap_or_default();
        self.issues.bad(at, &column, shown.as_bytes(), reason)
    }

    fn finish(self) -> Part {
        Part {
            path: self.path.to_path_buf(),
            cols: self.cols,
            base: TimeBase::Offset,
            arrival_unstated: false,
            rows_read: self.rows_read,
            skipped: self.issues.counts,
            left_out: self.left_out,
        }
    }
}

/// The first of `pointers` that holds a non-null value.
fn first_of<'v>(record: &'v Value, pointers: &[&str]) -> Option<&'v Value> {
    pointers
        .iter()
        .find_map(|p| record.pointer(p).filter(|v| !v.is_null()))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::{Format, IngestOptions, IngestReport, Trace, TraceError, read_trace};

    fn read(
        text: &str,
        name: &str,
        format: Format,
        skip: bool,
    ) -> Result<(Trace, IngestReport), TraceError> {
        let dir = tempfile::tempdir().unwrap();
        let path: PathBuf = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let opts = IngestOptions {
            format: Some(format),
            skip_invalid: skip,
            ..IngestOptions::default()
        };
        read_trace(&[path], &opts)
    }

    /// An inference-perf entry in the current layout (`request_metrics`, `response_metrics`).
    fn entry(start: f64, input: &str, completion: &str, error: &str) -> String {
        format!(
            r#"{{"start_time": {start}, "end_time": {end}, "request": "[x]",
  "info": {{"request_metrics": {{"text": {{"input_tokens": {input}}}}},
           "response_metrics": {{"output_tokens": 9, "server_usage": {{"completion_tokens": {completion}}}}}}},
  "error": {error}}}"#,
            end = start + 1.0
        )
    }

    #[test]
    fn inference_perf_reads_start_time_and_the_servers_counts_and_leaves_failed_entries_out() {
        let older = r#"{"start_time": 12.25, "info": {"input_tokens": 7, "output_tokens": 3}, "error": null}"#;
        let text = format!(
            "[\n{},\n{},\n{},\n{older}\n]\n",
            entry(10.5, "100", "11", "null"),
            entry(11.0, "5", "5", r#"{"error_type": "HTTP Error 503"}"#),
            entry(12.0, "200", "null", "null"),
        );
        let (trace, report) = read(&text, "r.json", Format::InferencePerf, false).unwrap();
        assert_eq!(
            trace.arrival_ns(),
            &[0, 1_500_000_000, 1_750_000_000],
            "perf_counter seconds, rebased to the first request"
        );
        assert_eq!(trace.input_tokens(), &[100, 200, 7]);
        assert_eq!(
            trace.output_tokens().unwrap(),
            &[11, 9, 3],
            "usage first, then own count"
        );
        assert_eq!((report.rows_read, report.rows_left_out), (4, 1));
        assert_eq!(
            report.left_out_by_reason.get("failed (error set)"),
            Some(&1)
        );
        assert!(report.adds_up(), "{report:?}");
    }

    #[test]
    fn a_bad_inference_perf_entry_names_the_file_entry_and_key() {
        let text = format!(
            "[{}, {}]",
            entry(1.0, "3", "4", "null"),
            entry(2.0, "-3", "4", "null")
        );
        let err = read(&text, "r.json", Format::InferencePerf, false)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "r.json: entry 2, column `info.request_metrics.text.input_tokens or \
                          info.input_tokens`: negative value \"-3\""
            ),
            "{err}"
        );
        let (trace, report) = read(&text, "r.json", Format::InferencePerf, true).unwrap();
        assert_eq!((trace.len(), report.rows_skipped), (1, 1));
        let err = read(
            "{\"start_time\": 1}",
            "r.json",
            Format::InferencePerf,
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("r.json: line 1") && err.contains("not a JSON array"),
            "{err}"
        );
    }

    fn record(start_ns: u64, phase: &str, error: &str) -> String {
        format!(
            r#"{{"metadata": {{"request_start_ns": {start_ns}, "benchmark_phase": "{phase}"}}, "metrics": {{"input_sequence_length": {{"value": 550, "unit": "tokens"}}, "output_token_count": {{"value": 8, "unit": "tokens"}}, "output_sequence_length": {{"value": 9, "unit": "tokens"}}}}, "error": {error}}}"#
        )
    }

    #[test]
    fn aiperf_reads_unix_nanoseconds_and_leaves_failed_and_warmup_records_out() {
        let t0 = 1_759_813_207_532_900_363u64;
        let text = [
            record(t0 - 5, "warmup", "null"),
            record(t0, "profiling", "null"),
            record(t0 + 7, "profiling", r#"{"code": 499}"#),
            record(t0 + 100, "profiling", "null"),
        ]
        .join("\n");
        let (trace, report) = read(&text, "p.jsonl", Format::Aiperf, false).unwrap();
        assert_eq!(
            trace.arrival_ns(),
            &[0, 100],
            "rebased to the first kept request"
        );
        assert_eq!(trace.start_unix_ns(), Some(t0 as i64));
        assert_eq!(trace.output_tokens().unwrap(), &[9, 9]);
        assert_eq!(report.rows_left_out, 2);
        assert_eq!(report.left_out_by_reason.get("warmup"), Some(&1));
        assert!(report.adds_up(), "{report:?}");
        let bad = record(t0, "profiling", "null").replace("request_start_ns", "start_ns");
        let err = read(
            &format!("{}\n\n{bad}\n", record(t0, "profiling", "null")),
            "p.jsonl",
            Format::Aiperf,
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("p.jsonl: line 3, column `metadata.request_start_ns`: missing value"),
            "{err}"
        );
    }

    #[test]
    fn a_map_is_refused_and_a_log_of_left_out_records_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.jsonl");
        std::fs::write(&path, record(1, "profiling", "null")).unwrap();
        let opts = IngestOptions {
            format: Some(Format::Aiperf),
            maps: vec!["arrival=t:s".into()],
            ..IngestOptions::default()
        };
        let err = read_trace(&[path], &opts).unwrap_err().to_string();
        assert!(err.contains("--format aiperf reads its own keys"), "{err}");
        let err = read(
            &record(1, "warmup", "null"),
            "w.jsonl",
            Format::Aiperf,
            false,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(
                "w.jsonl: trace is empty (no requests); all 1 records were left out by \
                          the format (warmup: 1)"
            ),
            "{err}"
        );
    }
}
