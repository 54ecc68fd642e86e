//! AIPerf's per-record export, `profile_export.jsonl` (ai-dynamo/aiperf; one
//! `MetricRecordInfo` of `src/aiperf/common/models/record_models.py` a line):
//!
//! ```text
//! {"metadata": {"session_num": 45, "request_start_ns": 1759813207532900363,
//!               "request_end_ns": 1759813207838764604, "benchmark_phase": "profiling", ...},
//!  "metrics": {"input_sequence_length": {"value": 550, "unit": "tokens"},
//!              "time_to_first_token": {"value": 255.9, "unit": "ms"},
//!              "request_latency": {"value": 297.5, "unit": "ms"},
//!              "output_sequence_length": {"value": 9, "unit": "tokens"}, ...},
//!  "error": null}
//! ```
//!
//! The arrival is `metadata.request_start_ns` (wall clock, `time.time_ns()`; from the first
//! request's). TTFT and end-to-end are AIPerf's own durations from the request's start,
//! `metrics.time_to_first_token` and `metrics.request_latency` (to the last response), measured
//! on `perf_counter_ns` and converted by their `unit` (`ns`, `us`, `ms`, `sec` or `s`); so no two
//! clocks are mixed within a request. Input tokens are `metrics.input_sequence_length`, output
//! tokens `metrics.output_sequence_length` (reasoning included: every token the engine
//! decoded), else `metrics.output_token_count`. Records whose `error` is set (failed or
//! cancelled requests) and records of the `warmup` phase are left out and counted.

use std::path::Path;

use capsim_trace::Format;
use serde_json::Value;

use super::log::{Excluded, LogError, MeasuredLog, Row, exclude, into_log, read_text, token_count};

/// Reads AIPerf's `profile_export.jsonl` (see the module docs).
pub fn read_aiperf(path: &Path) -> Result<MeasuredLog, LogError> {
    let text = read_text(path)?;
    let mut rows = Vec::new();
    let mut excluded: Vec<Excluded> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row_err = |message: String| LogError::Row {
            path: path.to_path_buf(),
            row: i + 1,
            message,
        };
        let record: Value =
            serde_json::from_str(line).map_err(|e| row_err(format!("not a JSON object ({e})")))?;
        if record.get("error").is_some_and(|e| !e.is_null()) {
            exclude(&mut excluded, "failed (error set)");
            continue;
        }
        if record
            .pointer("/metadata/benchmark_phase")
            .and_then(Value::as_str)
            == Some("warmup")
        {
            exclude(&mut excluded, "warmup");
            continue;
        }
        rows.push(read_record(&record).map_err(row_err)?);
    }
    Ok(into_log(rows, Format::Aiperf.describe(), excluded))
}

/// Nanoseconds in one `unit` of an AIPerf time metric.
fn unit_ns(unit: &str) -> Option<f64> {
    match unit {
        "ns" => Some(1.0),
        "us" => Some(1e3),
        "ms" => Some(1e6),
        "s" | "sec" => Some(1e9),
        _ => None,
    }
}

/// One successful record as a row; the error message names the key.
fn read_record(record: &Value) -> Result<Row, String> {
    let start = record.pointer("/metadata/request_start_ns");
    let arrival_ns = start
        .and_then(Value::as_i64)
        .or_else(|| start.and_then(Value::as_f64).map(|f| f.round() as i64))
        .ok_or_else(|| {
            "no integer `metadata.request_start_ns` (the request's start, ns)".to_string()
        })?;
    let metric = |name: &str| -> Result<(f64, &str), String> {
        let m = record
            .pointer(&format!("/metrics/{name}"))
            .filter(|m| !m.is_null());
        let value = m.and_then(|m| m.get("value")).and_then(Value::as_f64);
        let unit = m.and_then(|m| m.get("unit")).and_then(Value::as_str);
        match (value, unit) {
            (Some(v), Some(u)) => Ok((v, u)),
            _ => Err(format!(
                "no `metrics.{name}` with a number `value` and a `unit`{}",
                if name == "time_to_first_token" {
                    "; AIPerf records TTFT for streamed requests only: profile with --streaming"
                } else {
                    ""
                }
            )),
        }
    };
    let duration_ns = |name: &str| -> Result<i64, String> {
        let (value, unit) = metric(name)?;
        let scale = unit_ns(unit).ok_or_else(|| {
            format!("`metrics.{name}.unit` = {unit:?}: not a time unit (ns, us, ms, sec)")
        })?;
        Ok((value * scale).round() as i64)
    };
    let tokens = |name: &str| -> Result<u32, String> {
        let (value, _) = metric(name)?;
        token_count(value).ok_or_else(|| format!("`metrics.{name}` = {value} is not a token count"))
    };
    let input_tokens = tokens("input_sequence_length")?;
    let output_tokens = tokens("output_sequence_length").or_else(|e| {
        let has_count = record.pointer("/metrics/output_token_count").is_some();
        if has_count {
            tokens("output_token_count")
        } else {
            Err(e)
        }
    })?;
    if output_tokens == 0 {
        return Err(
            "0 output tokens: a request that produced no token has no TTFT; drop it".into(),
        );
    }
    let ttft = duration_ns("time_to_first_token")?;
    let e2e = duration_ns("request_latency")?;
    if !(0 <= ttft && ttft <= e2e) {
        return Err(format!(
            "time_to_first_token {:.6} s and request_latency {:.6} s: times go backwards (the \
             first token must come at or after the start, the last at or after the first)",
            ttft as f64 / 1e9,
            e2e as f64 / 1e9
        ));
    }
    Ok(Row {
        arrival_ns,
        input_tokens,
        output_tokens,
        ttft_ns: ttft as u64,
        e2e_ns: e2e as u64,
        submit_delay_ns: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as AIPerf writes it (docs/tutorials/working-with-profile-exports.md of
    /// ai-dynamo/aiperf), start in ns, latencies in ms.
    fn record(i: usize, start_ns: u64, ttft_ms: f64, latency_ms: f64) -> String {
        format!(
            r#"{{"metadata": {{"session_num": {i}, "x_request_id": "r{i}", "turn_index": 0, "request_start_ns": {start_ns}, "request_ack_ns": {start_ns}, "request_end_ns": {end}, "worker_id": "worker_1", "record_processor_id": "rp_1", "benchmark_phase": "profiling", "was_cancelled": false, "cancellation_time_ns": null}}, "metrics": {{"input_sequence_length": {{"value": 550, "unit": "tokens"}}, "time_to_first_token": {{"value": {ttft_ms}, "unit": "ms"}}, "request_latency": {{"value": {latency_ms}, "unit": "ms"}}, "output_token_count": {{"value": 9, "unit": "tokens"}}, "output_sequence_length": {{"value": 9, "unit": "tokens"}}, "inter_token_latency": {{"value": 5.2, "unit": "ms"}}}}, "error": null}}"#,
            end = start_ns + (latency_ms * 1e6) as u64
        )
    }

    const FAILED: &str = r#"{"metadata": {"session_num": 80, "request_start_ns": 1759879161119147826, "request_ack_ns": null, "request_end_ns": 1759879161119772754, "worker_id": "w", "record_processor_id": "rp", "benchmark_phase": "profiling", "was_cancelled": true, "cancellation_time_ns": 1759879161119772754}, "metrics": {"error_isl": {"value": 550, "unit": "tokens"}}, "error": {"code": 499, "type": "RequestCancellationError", "message": "Request was cancelled after 0.000 seconds"}}"#;

    #[test]
    fn records_take_aiperfs_durations_and_count_failed_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile_export.jsonl");
        let t0 = 1_759_813_207_532_900_363u64;
        let lines = [
            record(0, t0, 255.5, 297.5),
            FAILED.to_string(),
            record(1, t0 + 100_000_000, 10.0, 50.0),
        ];
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        let log = read_aiperf(&path).unwrap();
        assert_eq!(log.arrival_ns, vec![0, 100_000_000]);
        assert_eq!(log.ttft_ns, vec![255_500_000, 10_000_000]);
        assert_eq!(log.e2e_ns, vec![297_500_000, 50_000_000]);
        assert_eq!((log.input_tokens[0], log.output_tokens[0]), (550, 9));
        assert_eq!(
            log.excluded_summary().as_deref(),
            Some("1 failed (error set)")
        );
    }

    #[test]
    fn a_missing_metric_names_the_file_line_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile_export.jsonl");
        let bad = record(1, 2_000, 10.0, 50.0).replace("time_to_first_token", "ttft");
        std::fs::write(&path, format!("{}\n{bad}\n", record(0, 1_000, 10.0, 50.0))).unwrap();
        let err = read_aiperf(&path).unwrap_err().to_string();
        assert!(
            err.contains("profile_export.jsonl: row 2")
                && err.contains("`metrics.time_to_first_token`")
                && err.contains("--streaming"),
            "{err}"
        );
        let bad = record(1, 2_000, 10.0, 50.0).replace("\"unit\": \"ms\"", "\"unit\": \"min\"");
        std::fs::write(&path, format!("{bad}\n")).unwrap();
        let err = read_aiperf(&path).unwrap_err().to_string();
        assert!(err.contains("row 1") && err.contains("\"min\""), "{err}");
    }
}
