//! inference-perf's per-request report, `per_request_lifecycle_metrics.json` (kubernetes-sigs/
//! inference-perf, written by `inference_perf/reportgen/base.py` when the report config asks for
//! `request_lifecycle.per_request`): one JSON array, an entry per request.
//!
//! ```text
//! [{"start_time": 1234.5, "end_time": 1236.9,
//!   "info": {"request_metrics": {"text": {"input_tokens": 550}},
//!            "response_metrics": {"output_tokens": 120, "server_usage": {"completion_tokens": 120},
//!                                 "output_token_times": [1234.8, ...]},
//!            "input_tokens": 550},
//!   "error": null}, ...]
//! ```
//!
//! `start_time`, `end_time` and `output_token_times` are seconds of the load generator's
//! `time.perf_counter()` (one clock, arbitrary origin: `inference_perf/client/modelserver/
//! openai_client.py` and `inference_perf/apis/streaming_parser.py`). The arrival is `start_time`
//! (from the first request's), TTFT = first output token time - `start_time`, end-to-end = last
//! output token time - `start_time` (inference-perf's own `request_latency` runs to `end_time`,
//! after the response's last bytes). Input tokens come from `info.request_metrics.text.input_tokens`
//! (the server's `usage.prompt_tokens` when it reported one), or the older top-level
//! `info.input_tokens`; output tokens from the server's `usage.completion_tokens` when reported,
//! else inference-perf's own count `output_tokens` (under `info.response_metrics`, or `info` in
//! older reports). Entries whose `error` is set are left out and counted.

use std::path::Path;

use capsim_trace::Format;
use serde_json::Value;

use super::log::{
    Excluded, LogError, MeasuredLog, Row, exclude, into_log, read_text, seconds_to_ns, token_count,
};

/// Reads inference-perf's `per_request_lifecycle_metrics.json` (see the module docs).
pub fn read_inference_perf(path: &Path) -> Result<MeasuredLog, LogError> {
    let text = read_text(path)?;
    let entries: Vec<Value> = serde_json::from_str(&text).map_err(|e| LogError::Row {
        path: path.to_path_buf(),
        row: e.line(),
        message: format!(
            "not a JSON array of per-request entries ({e}); inference-perf writes one as \
             per_request_lifecycle_metrics.json"
        ),
    })?;
    let lines = entry_lines(&text);
    let mut rows = Vec::with_capacity(entries.len());
    let mut excluded: Vec<Excluded> = Vec::new();
    for (k, entry) in entries.iter().enumerate() {
        if entry.get("error").is_some_and(|e| !e.is_null()) {
            exclude(&mut excluded, "failed (error set)");
            continue;
        }
        let row = read_entry(entry).map_err(|message| LogError::Entry {
            path: path.to_path_buf(),
            entry: k + 1,
            line: lines.get(k).copied().unwrap_or(1),
            message,
        })?;
        rows.push(row);
    }
    Ok(into_log(rows, Format::InferencePerf.describe(), excluded))
}

/// The first of `paths` (JSON pointers) that holds a value.
fn first_of<'a>(entry: &'a Value, paths: &[&str]) -> Option<&'a Value> {
    paths
        .iter()
        .find_map(|p| entry.pointer(p).filter(|v| !v.is_null()))
}

/// `/info/output_tokens` as `info.output_tokens`.
fn key(pointer: &str) -> String {
    pointer.trim_start_matches('/').replace('/', ".")
}

/// One successful entry as a row; the error message names the key.
fn read_entry(entry: &Value) -> Result<Row, String> {
    if !entry.is_object() {
        return Err("not a JSON object".into());
    }
    let seconds = |pointer: &str| -> Result<f64, String> {
        entry
            .pointer(pointer)
            .and_then(Value::as_f64)
            .ok_or_else(|| {
                format!(
                    "no number `{}`; each entry needs start_time and end_time (seconds)",
                    key(pointer)
                )
            })
    };
    let start = seconds("/start_time")?;
    let end = seconds("/end_time")?;
    const INPUT: [&str; 2] = [
        "/info/request_metrics/text/input_tokens",
        "/info/input_tokens",
    ];
    let input = first_of(entry, &INPUT)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("no number `{}` (nor `{}`)", key(INPUT[0]), key(INPUT[1])))?;
    let input_tokens =
        token_count(input).ok_or_else(|| format!("input tokens = {input} is not a token count"))?;
    const OUTPUT: [&str; 3] = [
        "/info/response_metrics/server_usage/completion_tokens",
        "/info/response_metrics/output_tokens",
        "/info/output_tokens",
    ];
    let output = first_of(entry, &OUTPUT)
        .and_then(Value::as_f64)
        .ok_or_else(|| format!("no number `{}` (nor `{}`)", key(OUTPUT[1]), key(OUTPUT[2])))?;
    let output_tokens = token_count(output)
        .ok_or_else(|| format!("output tokens = {output} is not a token count"))?;
    if output_tokens == 0 {
        return Err(
            "0 output tokens: a request that produced no token has no TTFT; drop it".into(),
        );
    }
    const TIMES: [&str; 2] = [
        "/info/response_metrics/output_token_times",
        "/info/output_token_times",
    ];
    let times = first_of(entry, &TIMES)
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            format!(
                "no `{}` (nor `{}`): without streamed token times there is no TTFT; run \
                 inference-perf with api.streaming: true",
                key(TIMES[0]),
                key(TIMES[1])
            )
        })?;
    let time = |v: &Value| {
        v.as_f64()
            .ok_or_else(|| format!("`{}` holds {v}, not a number of seconds", key(TIMES[0])))
    };
    let first = time(&times[0])?;
    let last = time(&times[times.len() - 1])?;
    if !(start <= first && first <= last && last <= end) {
        return Err(format!(
            "times go backwards (start_time {start:.6} s, first token {first:.6} s, last token \
             {last:.6} s, end_time {end:.6} s); each must be at or after the one before"
        ));
    }
    let start_ns = seconds_to_ns(start);
    Ok(Row {
        arrival_ns: start_ns,
        input_tokens,
        output_tokens,
        ttft_ns: (seconds_to_ns(first) - start_ns) as u64,
        e2e_ns: (seconds_to_ns(last) - start_ns) as u64,
        submit_delay_ns: None,
    })
}

/// The 1-based line on which each element of `text`'s top-level JSON array starts. `text` must
/// be valid JSON; strings (and the brackets inside them) are skipped.
fn entry_lines(text: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let (mut line, mut depth) = (1, 0usize);
    let (mut in_string, mut escaped, mut expect_element) = (false, false, false);
    for b in text.bytes() {
        if b == b'\n' {
            line += 1;
        }
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if expect_element && !b.is_ascii_whitespace() && b != b']' {
            lines.push(line);
            expect_element = false;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth == 1 {
                    expect_element = true;
                }
            }
            b']' | b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    expect_element = false;
                }
            }
            b',' if depth == 1 => expect_element = true,
            _ => {}
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry as inference-perf's `build_per_request_lifecycle_entry` writes it (current
    /// layout: `info.request_metrics`, `info.response_metrics`), times in seconds.
    fn entry(start: f64, first: f64, last: f64, error: bool) -> String {
        let error = if error {
            r#"{"error_type": "HTTP Error 503", "error_msg": "overloaded"}"#
        } else {
            "null"
        };
        format!(
            r#"{{
    "start_time": {start},
    "end_time": {end},
    "request": "{{\"prompt\": \"[a] {{b}}\"}}",
    "info": {{
      "request_metrics": {{"text": {{"input_tokens": 100}}}},
      "response_metrics": {{
        "output_tokens": 10,
        "server_usage": {{"prompt_tokens": 100, "completion_tokens": 11}},
        "chunk_times": [{first}, {last}],
        "output_token_times": [{first}, {last}]
      }},
      "input_tokens": 100
    }},
    "error": {error}
  }}"#,
            end = last + 0.001
        )
    }

    fn report(entries: &[String]) -> String {
        format!("[\n  {}\n]\n", entries.join(",\n  "))
    }

    fn good(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| {
                let t = 5000.0 + 0.1 * i as f64;
                entry(t, t + 0.25, t + 1.25, false)
            })
            .collect()
    }

    #[test]
    fn entries_count_latency_from_start_time_and_prefer_the_servers_output_count() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("per_request_lifecycle_metrics.json");
        let mut entries = good(3);
        entries.insert(1, entry(5000.05, 5000.06, 5000.07, true));
        std::fs::write(&path, report(&entries)).unwrap();
        let log = read_inference_perf(&path).unwrap();
        assert_eq!(log.arrival_ns, vec![0, 100_000_000, 200_000_000]);
        assert_eq!(log.ttft_ns[1], 250_000_000);
        assert_eq!(
            log.e2e_ns[1], 1_250_000_000,
            "to the last token, not end_time"
        );
        assert_eq!(log.input_tokens[1], 100);
        assert_eq!(
            log.output_tokens[1], 11,
            "usage.completion_tokens over output_tokens"
        );
        assert_eq!(
            log.excluded_summary().as_deref(),
            Some("1 failed (error set)")
        );
    }

    #[test]
    fn the_older_flat_info_layout_reads_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        std::fs::write(
            &path,
            r#"[{"start_time": 1.0, "end_time": 2.1, "request": "x", "response": "y",
                "info": {"input_tokens": 7, "output_tokens": 3, "output_token_times": [1.5, 1.7, 2.0]},
                "error": null}]"#,
        )
        .unwrap();
        let log = read_inference_perf(&path).unwrap();
        assert_eq!((log.input_tokens[0], log.output_tokens[0]), (7, 3), "sizes");
        assert_eq!(
            (log.ttft_ns[0], log.e2e_ns[0]),
            (500_000_000, 1_000_000_000)
        );
    }

    #[test]
    fn a_missing_key_names_the_file_entry_line_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("per_request_lifecycle_metrics.json");
        let mut entries = good(3);
        entries[2] = entries[2].replace("\"output_token_times\"", "\"token_times\"");
        entries[2] = entries[2].replace("\"chunk_times\"", "\"chunks\"");
        std::fs::write(&path, report(&entries)).unwrap();
        let err = read_inference_perf(&path).unwrap_err().to_string();
        // The array opens on line 1 and each entry spans 16 lines: entry k starts on 2 + 16 (k - 1).
        assert!(
            err.contains("per_request_lifecycle_metrics.json: entry 3 (line 34)")
                && err.contains("info.response_metrics.output_token_times")
                && err.contains("streaming"),
            "{err}"
        );
        let mut entries = good(2);
        entries[1] = entries[1].replace("\"start_time\"", "\"started\"");
        std::fs::write(&path, report(&entries)).unwrap();
        let err = read_inference_perf(&path).unwrap_err().to_string();
        assert!(
            err.contains("entry 2 (line 18)") && err.contains("`start_time`"),
            "{err}"
        );
    }

    #[test]
    fn entry_lines_skip_brackets_inside_strings() {
        let text = "[\n {\"a\": \"],[{\"},\n {\"b\": [1, 2]}, 3\n]";
        assert_eq!(entry_lines(text), vec![2, 3, 3]);
    }
}
