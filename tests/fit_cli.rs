//! End-to-end tests of `capsim fit`: the two real vLLM runs of `../shared/ground-truth` (or
//! `$CAPSIM_GROUND_TRUTH`) fitted within 5% on TTFT, TPOT and end-to-end mean, p50 and p90 (the
//! acceptance of issue 16); both runs predicted from their operator bundles alone, nothing
//! fitted (`--predict`, issue 31); a fit of capsim's own requests.parquet; and the bad-input
//! cases.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_user_error, capsim, ground_truth, repo, stderr, text};
use serde_json::Value;

/// The acceptance bound on every figure's relative error.
const MAX_RELATIVE_ERROR: f64 = 0.05;

/// Runs `capsim fit` and returns the fit.txt it wrote, after checking the fitted scenario exists
/// and names the fitted keys.
fn fit(scenario: &str, log: &Path, dir: &Path) -> String {
    fit_with(scenario, log, dir, &[])
}

/// [`fit`] with `extra` flags.
fn fit_with(scenario: &str, log: &Path, dir: &Path, extra: &[&str]) -> String {
    let fitted = dir.join("fitted.toml");
    let report = dir.join("report");
    let mut args = vec![
        "fit",
        "--scenario",
        scenario,
        "--log",
        log.to_str().expect("utf-8"),
        "-o",
        fitted.to_str().expect("utf-8"),
        "--report",
        report.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let out = capsim(&args);
    assert!(out.status.success(), "capsim fit failed: {}", text(&out));
    let toml = std::fs::read_to_string(&fitted).expect("fitted scenario written");
    let keys: &[&str] = if scenario.contains("roofline") {
        &[
            "step_overhead",
            "compute_efficiency",
            "bandwidth_efficiency",
        ]
    } else {
        &[
            "step_overhead",
            "per_prefill_token",
            "per_decode_seq",
            "per_kv_token",
        ]
    };
    for key in keys {
        assert!(toml.contains(key), "fitted scenario lacks {key}:\n{toml}");
    }
    for png in ["ttft_cdf.png", "tpot_cdf.png", "e2e_cdf.png"] {
        let bytes = std::fs::read(report.join(png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{png} is not a PNG");
    }
    std::fs::read_to_string(report.join("fit.txt")).expect("fit.txt written")
}

/// The (metric, relative error) rows of a fit's table.
fn errors(report: &str) -> Vec<(String, f64)> {
    report
        .lines()
        .filter(|l| l.ends_with('%') && !l.starts_with("fit:"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let pct: f64 = cols[3].trim_end_matches('%').parse().expect("a percentage");
            (cols[0].to_string(), pct / 100.0)
        })
        .collect()
}

fn assert_within_bound(report: &str) {
    assert!(
        report.contains("converged") && !report.contains("NOT converged"),
        "{report}"
    );
    assert!(!report.contains("AT A BOUND"), "{report}");
    assert_figures_within_bound(report, |_| true);
}

/// The report's table has nine figures, and each one `checked` names is within the bound.
fn assert_figures_within_bound(report: &str, checked: impl Fn(&str) -> bool) {
    let rows = errors(report);
    assert_eq!(rows.len(), 9, "nine figures expected:\n{report}");
    for (metric, err) in rows.into_iter().filter(|(m, _)| checked(m)) {
        assert!(
            err.abs() <= MAX_RELATIVE_ERROR,
            "{metric}: error {:+.1}% exceeds {:.0}%:\n{report}",
            err * 100.0,
            MAX_RELATIVE_ERROR * 100.0
        );
    }
}

#[test]
fn rtx4090_llama_8b_run_fits_within_5_percent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let report = fit("scenarios/vllm-rtx4090-llama-3.1-8b.toml", &log, dir.path());
    assert_within_bound(&report);
}

#[test]
fn rtxpro6000_qwen_32b_run_fits_within_5_percent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtxpro6000-qwen3-32b");
    let report = fit("scenarios/vllm-rtxpro6000-qwen3-32b.toml", &log, dir.path());
    assert_within_bound(&report);
}

#[test]
fn rtx4090_roofline_fits_its_efficiencies_within_5_percent_and_names_the_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let scenario = "scenarios/vllm-rtx4090-llama-3.1-8b-roofline.toml";
    let report = fit(scenario, &log, dir.path());
    let fitted = std::fs::read_to_string(dir.path().join("fitted.toml")).expect("fitted");
    assert!(
        fitted.contains("compute_efficiency") && fitted.contains("llama-3.1-8b"),
        "the roofline's model and efficiencies are kept:\n{fitted}"
    );
    // The one figure this run does not allow: decodes as fast as the datasheet's bandwidth.
    assert!(
        report.contains("step_time.bandwidth_efficiency") && report.contains("AT A BOUND"),
        "{report}"
    );
    let rows = errors(&report);
    assert_eq!(rows.len(), 9, "{report}");
    for (metric, err) in rows {
        assert!(
            err.abs() <= MAX_RELATIVE_ERROR,
            "{metric}: {err:+.3}:\n{report}"
        );
    }
}

#[test]
fn a_mapped_log_reads_the_same_timestamps_as_the_vllm_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let map = "arrival=queued_ts:s,first_token=first_token_ts:s,last_token=last_token_ts:s,\
               input_tokens=input_toks,output_tokens=output_toks";
    let report = fit_with(
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        &log,
        dir.path(),
        &["--map", map],
    );
    assert_within_bound(&report);
    // The measured column must be the vLLM reader's (summary.txt's) figures.
    assert!(
        report.contains("65456.6") && report.contains("83413.3"),
        "measured TTFT mean and e2e p50 of the run:\n{report}"
    );
}

#[test]
fn capsims_own_requests_parquet_fits_back_within_5_percent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sim = dir.path().join("sim");
    let log = ground_truth("vllm-rtxpro6000-qwen3-32b");
    let out = capsim(&[
        "simulate",
        "--scenario",
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        "--map",
        "arrival=arrival_time:s,input_tokens=input_toks,output_tokens=output_toks",
        log.to_str().expect("utf-8"),
        "-o",
        sim.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "simulate failed: {}", text(&out));
    let report = fit(
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        &sim.join("requests.parquet"),
        dir.path(),
    );
    assert_within_bound(&report);
}

#[test]
fn a_scenario_without_continuous_batching_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/bert-dynamic-batching.toml",
        "--log",
        log.to_str().unwrap(),
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["batcher.kind = \"continuous\""]);
}

#[test]
fn a_log_without_timestamps_is_refused_naming_the_file_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        "traces/demo.parquet",
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["traces/demo.parquet", "no column"]);
    let jsonl = dir.path().join("sizes.jsonl");
    std::fs::write(
        &jsonl,
        "{\"input_toks\": 10, \"output_toks\": 5, \"arrival_time\": 1.0}\n",
    )
    .unwrap();
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        jsonl.to_str().unwrap(),
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["sizes.jsonl: row 1", "queued_ts"]);
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        jsonl.to_str().unwrap(),
        "--map",
        "arrival=arrival_time:s,ttft=ttft:s,input_tokens=input_toks,output_tokens=output_toks",
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["--map", "one pair"]);
}

#[test]
fn a_fit_that_runs_out_of_iterations_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fitted = dir.path().join("f.toml");
    let log = ground_truth("vllm-rtxpro6000-qwen3-32b");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        "--log",
        log.to_str().unwrap(),
        "--max-iterations",
        "2",
        "-o",
        fitted.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("NOT converged")
            && common::stderr(&out).contains("did not converge in 2 iterations"),
        "{}",
        text(&out)
    );
    let toml = std::fs::read_to_string(&fitted).expect("fitted scenario written");
    assert!(
        toml.contains("# WARNING: the fit did not converge"),
        "{toml}"
    );
}

#[test]
fn bootstrap_gives_an_ordered_interval_for_every_parameter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtxpro6000-qwen3-32b");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtxpro6000-qwen3-32b.toml",
        "--log",
        log.to_str().unwrap(),
        "--bootstrap",
        "3",
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let section = stdout
        .split("bootstrap over requests (3 replicas)")
        .nth(1)
        .unwrap_or_else(|| panic!("no bootstrap section:\n{stdout}"));
    let rows: Vec<(f64, f64)> = section
        .lines()
        .filter(|l| l.contains("..") && l.ends_with(" ns"))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols[1].parse().unwrap(), cols[3].parse().unwrap())
        })
        .collect();
    assert_eq!(rows.len(), 4, "four parameters:\n{stdout}");
    for (p5, p95) in rows {
        assert!(0.0 < p5 && p5 <= p95, "interval {p5}..{p95}:\n{stdout}");
    }
}

/// The first `n` records of the 4090 run, written to `dir/name`, with `edit` applied to the last.
fn ground_truth_head(dir: &Path, name: &str, n: usize, edit: impl Fn(&mut Value)) -> PathBuf {
    let text = std::fs::read_to_string(ground_truth("vllm-rtx4090-llama-3.1-8b")).expect("log");
    let mut rows: Vec<Value> = text
        .lines()
        .take(n)
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    edit(rows.last_mut().expect("a row"));
    let path = dir.join(name);
    let lines: Vec<String> = rows.iter().map(Value::to_string).collect();
    std::fs::write(&path, lines.join("\n") + "\n").expect("write log");
    path
}

#[test]
fn a_log_of_too_few_requests_is_refused_saying_how_many_a_fit_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth_head(dir.path(), "short.jsonl", 12, |_| {});
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        log.to_str().unwrap(),
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(
        &out,
        &["short.jsonl", "12 completed requests", "at least 20"],
    );
}

#[test]
fn a_log_whose_times_go_backwards_is_refused_naming_the_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Row 30's last token before its first.
    let log = ground_truth_head(dir.path(), "backwards.jsonl", 30, |row| {
        let first = row["first_token_ts"].as_f64().expect("first_token_ts");
        row["last_token_ts"] = Value::from(first - 1.0);
    });
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        log.to_str().unwrap(),
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["backwards.jsonl: row 30", "backwards"]);
}

/// The 4090 run's vLLM records, parsed.
fn ground_truth_rows() -> Vec<Value> {
    let text = std::fs::read_to_string(ground_truth("vllm-rtx4090-llama-3.1-8b")).expect("log");
    text.lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

/// `key` of a vLLM record as f64.
fn f(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} in {row}"))
}

/// Runs `capsim fit` on the 4090 scenario for one iteration (the measured figures do not depend
/// on the fit) and returns its standard output.
fn measured_only(log: &Path, dir: &Path, extra: &[&str]) -> String {
    let fitted = dir.join("f.toml");
    let mut args = vec![
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        log.to_str().expect("utf-8"),
        "--max-iterations",
        "1",
        "-o",
        fitted.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let out = capsim(&args);
    assert!(out.status.success(), "capsim fit failed: {}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The 4090 run's measured TTFT mean and end-to-end p50 as the vLLM reader prints them.
fn assert_vllm_figures(report: &str) {
    assert!(
        report.contains("65456.6") && report.contains("83413.3"),
        "measured TTFT mean and e2e p50 of the run:\n{report}"
    );
}

/// The 4090 run as inference-perf's `per_request_lifecycle_metrics.json`, the layout
/// `build_per_request_lifecycle_entry` in inference_perf/reportgen/base.py
/// (kubernetes-sigs/inference-perf) writes: a JSON array of {start_time, end_time, info, error},
/// times in seconds of time.perf_counter(), here vLLM's monotonic clock; plus one failed entry.
fn inference_perf_report(dir: &Path) -> PathBuf {
    let mut entries: Vec<Value> = ground_truth_rows()
        .iter()
        .map(|r| {
            let (start, first, last) = (f(r, "queued_ts"), f(r, "first_token_ts"), f(r, "last_token_ts"));
            serde_json::json!({
                "start_time": start,
                "end_time": last + 0.002,
                "request": "{\"model\": \"m\", \"prompt\": \"...\"}",
                "response": "",
                "info": {
                    "request_metrics": {"text": {"input_tokens": r["input_toks"]}},
                    "response_metrics": {
                        "output_tokens": r["output_toks"],
                        "server_usage": {"prompt_tokens": r["input_toks"], "completion_tokens": r["output_toks"]},
                        "chunk_times": [first, (first + last) / 2.0, last],
                        "output_token_times": [first, (first + last) / 2.0, last]
                    },
                    "extra_info": {},
                    "lora_adapter": null,
                    "input_tokens": r["input_toks"]
                },
                "error": null
            })
        })
        .collect();
    let mut failed = entries[7].clone();
    failed["error"] = serde_json::json!({"error_type": "HTTP Error 503", "error_msg": "busy"});
    failed["info"]["response_metrics"] = Value::Null;
    entries.insert(8, failed);
    let path = dir.join("per_request_lifecycle_metrics.json");
    std::fs::write(&path, serde_json::to_string_pretty(&entries).expect("JSON")).expect("write");
    path
}

/// The 4090 run as AIPerf's `profile_export.jsonl`: one `MetricRecordInfo`
/// (src/aiperf/common/models/record_models.py of ai-dynamo/aiperf) a line, `request_start_ns` on
/// a wall clock, TTFT and request latency in ms; plus one failed and one warmup record.
fn aiperf_export(dir: &Path) -> PathBuf {
    // Any wall-clock origin: AIPerf's latencies are durations, not timestamps.
    const WALL_NS: i64 = 1_759_813_000_000_000_000;
    let record = |i: usize, r: &Value, phase: &str| {
        let (queued, first, last) = (
            f(r, "queued_ts"),
            f(r, "first_token_ts"),
            f(r, "last_token_ts"),
        );
        let start_ns = WALL_NS + (queued * 1e9).round() as i64;
        serde_json::json!({
            "metadata": {
                "session_num": i,
                "x_request_id": format!("req-{i}"),
                "x_correlation_id": format!("corr-{i}"),
                "conversation_id": format!("conv-{i}"),
                "turn_index": 0,
                "request_start_ns": start_ns,
                "request_ack_ns": start_ns + 1_000_000,
                "request_end_ns": start_ns + ((last - queued) * 1e9).round() as i64,
                "worker_id": "worker_359d423a",
                "record_processor_id": "record_processor_1fa47cd7",
                "benchmark_phase": phase,
                "was_cancelled": false,
                "cancellation_time_ns": null
            },
            "metrics": {
                "input_sequence_length": {"value": r["input_toks"], "unit": "tokens"},
                "time_to_first_token": {"value": (first - queued) * 1e3, "unit": "ms"},
                "request_latency": {"value": (last - queued) * 1e3, "unit": "ms"},
                "output_token_count": {"value": r["output_toks"], "unit": "tokens"},
                "output_sequence_length": {"value": r["output_toks"], "unit": "tokens"}
            },
            "error": null
        })
    };
    let rows = ground_truth_rows();
    let mut lines: Vec<String> = vec![record(0, &rows[0], "warmup").to_string()];
    for (i, r) in rows.iter().enumerate() {
        lines.push(record(i, r, "profiling").to_string());
    }
    let mut failed = record(9, &rows[9], "profiling");
    failed["metrics"] = serde_json::json!({"error_isl": {"value": 550, "unit": "tokens"}});
    failed["error"] = serde_json::json!({"code": 499, "type": "RequestCancellationError",
                                         "message": "Request was cancelled after 0.000 seconds"});
    lines.insert(10, failed.to_string());
    let path = dir.join("profile_export.jsonl");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    path
}

#[test]
fn inference_perf_and_aiperf_logs_read_the_same_latencies_as_the_vllm_reader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = measured_only(&inference_perf_report(dir.path()), dir.path(), &[]);
    assert_vllm_figures(&report);
    assert!(
        report.contains("inference-perf per-request lifecycle metrics")
            && report.contains("left out of the log: 1 failed (error set)"),
        "{report}"
    );
    let report = measured_only(&aiperf_export(dir.path()), dir.path(), &[]);
    assert_vllm_figures(&report);
    assert!(
        report.contains("AIPerf per-record export")
            && report.contains("left out of the log: 1 warmup, 1 failed (error set)"),
        "{report}"
    );
}

#[test]
fn a_parquet_log_through_a_map_reads_the_same_latencies_as_the_vllm_reader() {
    use std::sync::Arc;

    use parquet::data_type::{DoubleType, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;

    let dir = tempfile::tempdir().expect("tempdir");
    let rows = ground_truth_rows();
    let times: Vec<Vec<f64>> = ["queued_ts", "first_token_ts", "last_token_ts"]
        .iter()
        .map(|k| rows.iter().map(|r| f(r, k)).collect())
        .collect();
    let sizes: Vec<Vec<i64>> = ["input_toks", "output_toks"]
        .iter()
        .map(|k| rows.iter().map(|r| f(r, k) as i64).collect())
        .collect();
    let schema = parse_message_type(
        "message log { required double queued; required double first; required double last; \
         required int64 prompt; required int64 completion; }",
    )
    .expect("schema");
    let path = dir.path().join("log.parquet");
    let file = std::fs::File::create(&path).expect("create");
    let mut writer =
        SerializedFileWriter::new(file, Arc::new(schema), Arc::new(WriterProperties::new()))
            .expect("writer");
    let mut group = writer.next_row_group().expect("row group");
    for values in &times {
        let mut column = group.next_column().expect("column").expect("a column left");
        column
            .typed::<DoubleType>()
            .write_batch(values, None, None)
            .expect("write");
        column.close().expect("close column");
    }
    for values in &sizes {
        let mut column = group.next_column().expect("column").expect("a column left");
        column
            .typed::<Int64Type>()
            .write_batch(values, None, None)
            .expect("write");
        column.close().expect("close column");
    }
    group.close().expect("close row group");
    writer.close().expect("close file");
    let map = "arrival=queued:s,first_token=first:s,last_token=last:s,\
               input_tokens=prompt,output_tokens=completion";
    let report = measured_only(&path, dir.path(), &["--map", map]);
    assert_vllm_figures(&report);
    assert!(report.contains("Parquet through --map"), "{report}");
}

#[test]
fn inference_perf_and_aiperf_logs_missing_a_key_are_refused_naming_file_line_and_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |log: &Path, extra: &[&str]| {
        let fitted = dir.path().join("f.toml");
        let mut args = vec![
            "fit",
            "--scenario",
            "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
            "--log",
            log.to_str().expect("utf-8"),
            "-o",
            fitted.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        capsim(&args)
    };
    // A non-streamed run has no token times.
    let path = inference_perf_report(dir.path());
    let mut entries: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("JSON");
    entries[2]["info"]["response_metrics"]
        .as_object_mut()
        .expect("response_metrics")
        .remove("output_token_times");
    let text = serde_json::to_string_pretty(&entries).expect("JSON");
    // Pretty-printed, each entry opens with a line of its own.
    let line = 1 + text
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == "  {")
        .nth(2)
        .expect("entry 3")
        .0;
    std::fs::write(&path, &text).expect("write");
    let out = run(&path, &[]);
    assert_user_error(
        &out,
        &[
            &format!("per_request_lifecycle_metrics.json: entry 3 (line {line})"),
            "info.response_metrics.output_token_times",
            "api.streaming: true",
        ],
    );
    // A record without its TTFT.
    let path = aiperf_export(dir.path());
    let text = std::fs::read_to_string(&path).expect("read");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[4] = lines[4].replace("time_to_first_token", "ttft");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write");
    let out = run(&path, &[]);
    assert_user_error(
        &out,
        &[
            "profile_export.jsonl: row 5",
            "metrics.time_to_first_token",
            "--streaming",
        ],
    );
    // --format overrides what the content shows, and says which keys that format needs.
    let out = run(&path, &["--format", "vllm"]);
    assert_user_error(&out, &["profile_export.jsonl: row 1", "queued_ts"]);
    let out = run(&path, &["--format", "genai-perf"]);
    assert_user_error(&out, &["--format \"genai-perf\"", "inference-perf, aiperf"]);
}

#[test]
fn the_runs_meta_json_sets_the_engine_limits_the_fit_replays_with() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let log = dir.path().join("requests.jsonl");
    std::fs::copy(&run, &log).expect("log copied");
    std::fs::copy(
        run.with_file_name("meta.json"),
        dir.path().join("meta.json"),
    )
    .expect("meta.json copied");
    // A scenario that disagrees with the run's engine on two limits.
    let shipped = std::fs::read_to_string(repo("scenarios/vllm-rtx4090-llama-3.1-8b.toml"))
        .expect("shipped scenario");
    let scenario = dir.path().join("scenario.toml");
    std::fs::write(
        &scenario,
        shipped
            .replace("max_num_seqs = 256", "max_num_seqs = 64")
            .replace("num_gpu_blocks = 2588", "num_gpu_blocks = 900"),
    )
    .expect("scenario written");
    let report = fit_with(
        scenario.to_str().expect("utf-8"),
        &log,
        dir.path(),
        &["--max-iterations", "40"],
    );
    for line in [
        "meta.json: batcher.max_num_seqs = 256 (the scenario had 64)",
        "meta.json: kv_cache.num_gpu_blocks = 2588 (the scenario had 900)",
    ] {
        assert!(report.contains(line), "expected {line:?} in:\n{report}");
    }
    assert!(
        !report.contains("max_num_batched_tokens ="),
        "an agreeing limit is not reported:\n{report}"
    );
    let fitted = std::fs::read_to_string(dir.path().join("fitted.toml")).expect("fitted");
    assert!(
        fitted.contains("max_num_seqs = 256") && fitted.contains("num_gpu_blocks = 2588"),
        "{fitted}"
    );
}

#[test]
fn a_mistyped_map_column_names_the_row_the_columns_and_the_closest_with_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        log.to_str().unwrap(),
        "--map",
        "arrival=queued_ts:s,first_token=first_token_ts:s,last_token=last_token_ts:s,\
         input_tokens=input_toks,output_tokens=output_tok",
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
    ]);
    assert_user_error(
        &out,
        &[
            "requests.jsonl: row 1: no column `output_tok`",
            "arrival_time, first_token_ts",
            "did you mean `output_toks`?",
        ],
    );
}

#[test]
fn a_report_folder_that_cannot_be_made_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "not a folder").unwrap();
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        log.to_str().unwrap(),
        "--max-iterations",
        "1",
        "-o",
        dir.path().join("f.toml").to_str().unwrap(),
        "--report",
        blocker.join("report").to_str().unwrap(),
    ]);
    assert_user_error(&out, &["--report: cannot create the folder"]);
}

/// `capsim fit --predict` of `scenario` against `run`'s log: its standard output.
fn predict(scenario: &str, run: &str) -> String {
    let log = ground_truth(run);
    let out = capsim(&[
        "fit",
        "--predict",
        "--scenario",
        scenario,
        "--log",
        log.to_str().expect("utf-8"),
    ]);
    assert!(
        out.status.success(),
        "capsim fit --predict failed: {}",
        text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Issue 31's acceptance: from its operator bundle alone (engine limits and KV from the run's
/// configuration, the step overhead at its stated default of 0, nothing fitted to the run) each
/// run's TTFT, TPOT and end-to-end mean and p50 are within 5%.
#[test]
fn operator_bundles_predict_both_runs_within_5_percent_on_means_and_medians() {
    for (scenario, run) in [
        (
            "scenarios/vllm-rtx4090-llama-3.1-8b-operators.toml",
            "vllm-rtx4090-llama-3.1-8b",
        ),
        (
            "scenarios/vllm-rtxpro6000-qwen3-32b-operators.toml",
            "vllm-rtxpro6000-qwen3-32b",
        ),
    ] {
        let report = predict(scenario, run);
        assert!(
            report.contains("nothing fitted") && report.contains(run),
            "{report}"
        );
        assert_figures_within_bound(&report, |metric| !metric.ends_with(".p90"));
    }
}

#[test]
fn predict_refuses_a_dynamic_scenario_and_a_fit_needs_its_output_file() {
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let log = log.to_str().expect("utf-8");
    let out = capsim(&[
        "fit",
        "--predict",
        "--scenario",
        "scenarios/bert-dynamic-batching.toml",
        "--log",
        log,
    ]);
    assert_user_error(&out, &["continuous-batching scenario"]);
    let out = capsim(&[
        "fit",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--log",
        log,
    ]);
    assert!(
        !out.status.success(),
        "a fit without -o ran: {}",
        text(&out)
    );
    assert!(text(&out).contains("--output"), "{}", text(&out));
}

#[test]
fn simulate_format_vllm_and_capsim_read_the_arrivals_and_sizes_fit_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    assert_simulate_reads_what_fit_reads(&log, "vllm", dir.path());
    // capsim's own requests.parquet is a preset of both commands too.
    let simulated = dir.path().join("sim-vllm").join("requests.parquet");
    assert_simulate_reads_what_fit_reads(&simulated, "capsim", dir.path());
}

/// Runs `capsim simulate` of the shipped vLLM scenario on `log` with `extra` flags into `out`
/// and returns its three output files' bytes.
fn simulate_outputs(log: &Path, out: &Path, extra: &[&str]) -> Vec<(&'static str, Vec<u8>)> {
    let mut args = vec![
        "simulate",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        log.to_str().expect("utf-8"),
        "-o",
        out.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let run = capsim(&args);
    assert!(
        run.status.success(),
        "capsim simulate {extra:?} failed: {}",
        text(&run)
    );
    ["summary.json", "requests.parquet", "timeseries.parquet"]
        .into_iter()
        .map(|file| {
            let bytes = std::fs::read(out.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
            (file, bytes)
        })
        .collect()
}

#[test]
fn a_vllm_log_without_format_is_read_by_simulate_and_fit_as_with_format_vllm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let detected = simulate_outputs(&log, &dir.path().join("detected"), &[]);
    let named = simulate_outputs(&log, &dir.path().join("named"), &["--format", "vllm"]);
    for ((file, detected), (_, named)) in detected.iter().zip(&named) {
        assert!(
            detected == named,
            "simulate's {file}: {} bytes without --format, {} with --format vllm, and they differ",
            detected.len(),
            named.len()
        );
    }
    let (detected_dir, named_dir) = (
        dir.path().join("fit-detected"),
        dir.path().join("fit-named"),
    );
    for d in [&detected_dir, &named_dir] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let scenario = "scenarios/vllm-rtx4090-llama-3.1-8b.toml";
    let detected = fit_with(scenario, &log, &detected_dir, &[]);
    let named = fit_with(scenario, &log, &named_dir, &["--format", "vllm"]);
    assert_eq!(
        detected, named,
        "fit.txt without --format vs with --format vllm"
    );
    let fitted = |d: &Path| std::fs::read_to_string(d.join("fitted.toml")).expect("fitted");
    assert_eq!(
        fitted(&detected_dir),
        fitted(&named_dir),
        "fitted.toml without --format vs with --format vllm"
    );
}

#[test]
fn simulate_format_inference_perf_and_aiperf_read_the_arrivals_and_sizes_fit_reads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = inference_perf_report(dir.path());
    let out = assert_simulate_reads_what_fit_reads(&report, "inference-perf", dir.path());
    assert!(
        stderr(&out).contains("1 left out by the format (1 failed (error set))"),
        "{}",
        text(&out)
    );
    let export = aiperf_export(dir.path());
    let out = assert_simulate_reads_what_fit_reads(&export, "aiperf", dir.path());
    assert!(
        stderr(&out).contains("2 left out by the format (1 failed (error set), 1 warmup)"),
        "{}",
        text(&out)
    );
    // Told from their content, as fit tells them.
    let out_dir = dir.path().join("detected");
    let out = capsim(&[
        "simulate",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        export.to_str().expect("utf-8"),
        "-o",
        out_dir.to_str().expect("utf-8"),
    ]);
    assert!(out.status.success(), "{}", text(&out));
}

/// `capsim simulate --format FORMAT LOG` simulates the requests `capsim fit` reads from `log`:
/// the same number, arrivals (from the first) and sizes, in the simulation's requests.parquet.
/// Returns the simulate run.
fn assert_simulate_reads_what_fit_reads(
    log: &Path,
    format: &str,
    dir: &Path,
) -> std::process::Output {
    let out_dir = dir.join(format!("sim-{format}"));
    let out = capsim(&[
        "simulate",
        "--scenario",
        "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
        "--format",
        format,
        log.to_str().expect("utf-8"),
        "-o",
        out_dir.to_str().expect("utf-8"),
    ]);
    assert!(
        out.status.success(),
        "capsim simulate --format {format} failed: {}",
        text(&out)
    );
    let fit = capsim_fit::read_log(log, None).expect("fit reads the log");
    let simulated = capsim_fit::read_log(&out_dir.join("requests.parquet"), None)
        .expect("fit reads the simulation's requests.parquet");
    assert_eq!(
        simulated.len(),
        fit.len(),
        "{format}: requests simulated vs in the log"
    );
    assert_eq!(simulated.arrival_ns, fit.arrival_ns, "{format}: arrivals");
    assert_eq!(
        simulated.input_tokens, fit.input_tokens,
        "{format}: input tokens"
    );
    assert_eq!(
        simulated.output_tokens, fit.output_tokens,
        "{format}: output tokens"
    );
    out
}

#[test]
fn simulate_format_vllm_rebases_the_servers_clock_and_keeps_every_latency() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = ground_truth("vllm-rtx4090-llama-3.1-8b");
    let simulate = |name: &str, extra: &[&str]| {
        let out_dir = dir.path().join(name);
        let mut args = vec![
            "simulate",
            "--scenario",
            "scenarios/vllm-rtx4090-llama-3.1-8b.toml",
            "--format",
            "vllm",
            log.to_str().expect("utf-8"),
            "-o",
            out_dir.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        let out = capsim(&args);
        assert!(out.status.success(), "{}", text(&out));
        out_dir.join("requests.parquet")
    };
    let rebased = simulate("rebased", &[]);
    // --keep-offsets keeps queued_ts as it is: the run before the clock was rebased.
    let kept = simulate("kept", &["--keep-offsets"]);
    let arrivals = |path: &Path| {
        let opts = capsim_trace::IngestOptions {
            format: Some(capsim_trace::Format::Capsim),
            keep_offsets: true,
            ..capsim_trace::IngestOptions::default()
        };
        let (trace, _) = capsim_trace::read_trace(&[path.to_path_buf()], &opts).expect("read");
        trace.arrival_ns().to_vec()
    };
    let first_queued_ns = ground_truth_rows()
        .iter()
        .map(|r| (f(r, "queued_ts") * 1e9).round() as u64)
        .min()
        .expect("a request");
    assert!(
        first_queued_ns > 1_000_000_000,
        "the log's clock starts late"
    );
    let (rebased_ns, kept_ns) = (arrivals(&rebased), arrivals(&kept));
    assert_eq!(rebased_ns[0], 0, "the first request arrives at 0");
    assert_eq!(kept_ns[0], first_queued_ns, "kept: at its queued_ts");
    let shifted: Vec<u64> = kept_ns.iter().map(|a| a - first_queued_ns).collect();
    assert_eq!(rebased_ns, shifted, "the same arrivals, shifted");
    let (rebased, kept) = (
        capsim_fit::read_log(&rebased, None).expect("rebased run"),
        capsim_fit::read_log(&kept, None).expect("kept run"),
    );
    assert_eq!(rebased.ttft_ns, kept.ttft_ns, "TTFT");
    assert_eq!(rebased.e2e_ns, kept.e2e_ns, "end-to-end latency");
    assert_eq!(rebased.output_tokens, kept.output_tokens, "output tokens");
}
