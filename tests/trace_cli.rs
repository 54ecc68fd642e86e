//! End-to-end tests of `capsim trace ...`: the built binary on shipped and shared traces, and
//! on bad inputs (message and exit code).
//!
//! The shared public traces are read from `../shared/traces` (beside the checkout) or `$CAPSIM_SHARED_TRACES`.

mod common;

use std::path::Path;

use common::{assert_user_error, capsim, stderr};
use serde_json::Value;

fn ok(args: &[&str]) -> String {
    let out = capsim(args);
    assert!(
        out.status.success(),
        "capsim {args:?} failed ({:?}):\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Runs a command that must fail with exit code 2 and one `error:` line containing `needles`.
fn bad_input(args: &[&str], needles: &[&str]) {
    let out = capsim(args);
    assert_user_error(&out, needles);
    let stderr = stderr(&out);
    assert!(
        stderr.starts_with("error: "),
        "stderr should start with `error: `:\n{stderr}"
    );
}

fn inspect_json(args: &[&str]) -> Value {
    let mut all = vec!["trace", "inspect", "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&ok(&all)).expect("inspect --json prints JSON")
}

fn shared(rel: &str) -> String {
    // CI lays shared/ beside the checkout; CAPSIM_SHARED_TRACES points elsewhere.
    let root = std::env::var("CAPSIM_SHARED_TRACES")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/traces").into());
    let p = Path::new(&root).join(rel);
    assert!(
        p.exists(),
        "shared trace {} is missing (set CAPSIM_SHARED_TRACES)",
        p.display()
    );
    p.display().to_string()
}

fn num(v: &Value, path: &str) -> f64 {
    let mut cur = v;
    for key in path.split('.') {
        cur = &cur[key];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number in {v}"))
}

fn close(v: &Value, path: &str, want: f64, tol: f64) {
    let got = num(v, path);
    assert!(
        (got - want).abs() <= tol,
        "{path}: got {got}, want {want} ± {tol}"
    );
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

// ---- figures agree with the shared README ----

#[test]
fn shipped_azure_conv_matches_published_summary() {
    let s = &inspect_json(&["traces/azure-conv.parquet"])["summary"];
    assert_eq!(num(s, "rows"), 19366.0);
    close(s, "mean_rate_rps", 5.53, 0.005);
    close(s, "interarrival_cv", 1.09, 0.005);
    close(s, "input_tokens.mean", 1155.0, 0.5);
    close(s, "input_tokens.p50", 1020.0, 0.5);
    close(s, "input_tokens.p99", 4142.0, 0.5);
    close(s, "output_tokens.mean", 211.0, 0.5);
    close(s, "output_tokens.p50", 129.0, 0.5);
    close(s, "output_tokens.p99", 601.0, 0.5);
    assert!(
        num(s, "dispersion_60s") > 1.0,
        "conv is over-dispersed per minute: {s}"
    );
}

#[test]
fn shipped_azure_code_matches_published_summary() {
    let s = &inspect_json(&["traces/azure-code.parquet"])["summary"];
    assert_eq!(num(s, "rows"), 8819.0);
    close(s, "mean_rate_rps", 2.57, 0.005);
    close(s, "interarrival_cv", 13.2, 0.05);
    close(s, "input_tokens.mean", 2048.0, 0.5);
    close(s, "input_tokens.p50", 1469.0, 0.5);
    close(s, "input_tokens.p99", 7436.0, 0.5);
    close(s, "output_tokens.mean", 28.0, 0.5);
    close(s, "output_tokens.p50", 13.0, 0.5);
    close(s, "output_tokens.p99", 251.0, 0.5);
}

#[test]
fn shipped_mooncake_matches_published_summary() {
    let s = &inspect_json(&["traces/mooncake-conversation.parquet"])["summary"];
    assert_eq!(num(s, "rows"), 12031.0);
    close(s, "mean_rate_rps", 3.40, 0.005);
    close(s, "zero_gap_fraction", 0.90, 0.005);
    close(s, "input_tokens.mean", 12035.0, 0.5);
    close(s, "input_tokens.p50", 6909.0, 0.5);
    close(s, "input_tokens.p99", 85400.0, 0.5);
    close(s, "output_tokens.mean", 343.0, 0.5);
    close(s, "output_tokens.p50", 350.0, 0.5);
    close(s, "output_tokens.p99", 1119.0, 0.5);
    assert!(num(s, "prefix_blocks_mean") > 1.0);
}

#[test]
fn shared_csv_and_jsonl_read_with_detected_presets() {
    let s = &inspect_json(&[&shared(
        "azure-llm-2023-code/AzureLLMInferenceTrace_code.csv",
    )])["summary"];
    close(s, "mean_rate_rps", 2.57, 0.005);
    close(s, "interarrival_cv", 13.2, 0.05);
    let m = &inspect_json(&[&shared("mooncake-conversation/conversation_trace.jsonl")])["summary"];
    close(m, "mean_rate_rps", 3.40, 0.005);
}

#[test]
fn azure_conv_csv_and_its_parquet_conversion_inspect_identically() {
    let dir = tmp();
    let csv = shared("azure-llm-2023-conv/AzureLLMInferenceTrace_conv.csv");
    let out = dir.path().join("conv.parquet");
    ok(&["trace", "convert", &csv, "-o", out.to_str().unwrap()]);
    let a = inspect_json(&[&csv]);
    let b = inspect_json(&[out.to_str().unwrap()]);
    assert_eq!(a["summary"], b["summary"], "summaries differ");
    // The text report agrees line for line, except the path.
    let ta = ok(&["trace", "inspect", &csv]);
    let tb = ok(&["trace", "inspect", out.to_str().unwrap()]);
    assert_eq!(
        ta.lines().skip(1).collect::<Vec<_>>(),
        tb.lines().skip(1).collect::<Vec<_>>()
    );
    // And the shipped conversion is what `convert` makes now.
    let shipped =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/azure-conv.parquet"))
            .unwrap();
    assert_eq!(
        std::fs::read(&out).unwrap(),
        shipped,
        "traces/azure-conv.parquet is stale"
    );
}

#[test]
fn burstgpt_failed_rows_are_kept_flagged_and_counted() {
    let j = inspect_json(&[&shared("burstgpt1-slice400/burstgpt_slice.csv")]);
    assert_eq!(num(&j["summary"], "rows"), 400.0, "no row dropped");
    assert_eq!(
        num(&j["summary"], "failed"),
        17.0,
        "17 rows have 0 response tokens"
    );
    assert_eq!(num(&j["ingest"], "failed"), 17.0);
    let j3 = inspect_json(&[&shared("burstgpt3-slice400/burstgpt3_slice.csv")]);
    assert_eq!(num(&j3["summary"], "failed"), 1.0);
    let text = ok(&[
        "trace",
        "inspect",
        &shared("burstgpt1-slice400/burstgpt_slice.csv"),
    ]);
    assert!(text.contains("17 flagged failed"), "{text}");
}

#[test]
fn inspect_text_is_short_and_names_the_figures() {
    let text = ok(&["trace", "inspect", "traces/azure-conv.parquet"]);
    assert!(
        text.lines().count() <= 12,
        "too long to read in ten seconds:\n{text}"
    );
    for needle in [
        "mean 5.53 req/s",
        "CV 1.09",
        "p50 1020",
        "p99 4142",
        "19366 requests",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

// ---- several files, sorting, transforms ----

#[test]
fn directory_of_parquet_files_reads_as_one_trace() {
    let dir = tmp();
    let parts = dir.path().join("parts");
    for (i, w) in ["..20m", "20m..40m", "40m.."].iter().enumerate() {
        let out = parts.join(format!("part{i}.parquet"));
        ok(&[
            "trace",
            "convert",
            "traces/azure-conv.parquet",
            "--window",
            w,
            "-o",
            out.to_str().unwrap(),
        ]);
    }
    let whole = inspect_json(&["traces/azure-conv.parquet"]);
    let merged = inspect_json(&[parts.to_str().unwrap()]);
    assert_eq!(num(&merged["summary"], "rows"), 19366.0);
    assert_eq!(
        merged["summary"]["input_tokens"],
        whole["summary"]["input_tokens"]
    );
    close(
        &merged["summary"],
        "mean_rate_rps",
        num(&whole["summary"], "mean_rate_rps"),
        1e-9,
    );
}

#[test]
fn unsorted_rows_are_sorted_and_counted() {
    let dir = tmp();
    let p = write(
        dir.path(),
        "u.csv",
        "arrival,input_tokens\n3000,1\n1000,2\n2000,3\n4000,4\n",
    );
    let j = inspect_json(&["--map", "arrival=arrival:ms", &p]);
    assert_eq!(num(&j["ingest"], "out_of_order"), 2.0);
    close(&j["summary"], "span_s", 3.0, 1e-9);
}

#[test]
fn transforms_rescale_window_sample_and_limit() {
    let base = inspect_json(&["traces/azure-conv.parquet"]);
    let rate = num(&base["summary"], "mean_rate_rps");
    let j = inspect_json(&["traces/azure-conv.parquet", "--rate-scale", "2"]);
    close(&j["summary"], "mean_rate_rps", 2.0 * rate, 0.01);
    let j = inspect_json(&["traces/azure-conv.parquet", "--window", "10m..20m"]);
    assert!(num(&j["summary"], "span_s") <= 600.0);
    assert!(num(&j["ingest"], "dropped_by_window") > 0.0);
    let j = inspect_json(&[
        "traces/azure-conv.parquet",
        "--sample",
        "0.5",
        "--sample-seed",
        "3",
    ]);
    let kept = num(&j["summary"], "rows");
    assert!((kept / 19366.0 - 0.5).abs() < 0.02, "sampled {kept}");
    assert_eq!(
        num(&j["ingest"], "dropped_by_sample") + kept,
        19366.0,
        "rows add up"
    );
    let j = inspect_json(&["traces/azure-conv.parquet", "--limit", "100"]);
    assert_eq!(num(&j["summary"], "rows"), 100.0);
    bad_input(
        &[
            "trace",
            "inspect",
            "traces/azure-conv.parquet",
            "--window",
            "20m..10m",
        ],
        &["--window", "END must be after START"],
    );
    bad_input(
        &[
            "trace",
            "inspect",
            "traces/azure-conv.parquet",
            "--rate-scale",
            "0",
        ],
        &["--rate-scale", "> 0"],
    );
    bad_input(
        &[
            "trace",
            "inspect",
            "traces/azure-conv.parquet",
            "--window",
            "2h..",
        ],
        &["window selects no request"],
    );
}

#[test]
fn generic_mapping_reads_any_column_names() {
    let dir = tmp();
    let p = write(
        dir.path(),
        "m.jsonl",
        "{\"t\": 1.5, \"p\": 10, \"c\": 3, \"lat\": 12.5}\n{\"t\": 2.0, \"p\": 20, \"c\": 4, \"lat\": 30}\n",
    );
    let j = inspect_json(&[
        "--map",
        "arrival=t:s,input_tokens=p,output_tokens=c,e2e_ms=lat",
        &p,
    ]);
    close(&j["summary"], "span_s", 0.5, 1e-9);
    close(&j["summary"], "output_tokens.max", 4.0, 0.0);
    close(&j["summary"], "observed_ms.e2e_ms.max", 30.0, 1e-9);
}

// ---- synth ----

#[test]
fn synth_is_byte_identical_per_seed() {
    let dir = tmp();
    let a = dir.path().join("a.parquet");
    let b = dir.path().join("b.parquet");
    let c = dir.path().join("c.parquet");
    let args = |out: &Path, seed: &str| {
        vec![
            "trace".to_string(),
            "synth".into(),
            "-o".into(),
            out.display().to_string(),
            "--arrivals".into(),
            "bursty:ratio=8,on=5s,off=20s".into(),
            "--rate".into(),
            "20".into(),
            "--duration".into(),
            "2m".into(),
            "--seed".into(),
            seed.into(),
        ]
    };
    for (out, seed) in [(&a, "7"), (&b, "7"), (&c, "8")] {
        let v = args(out, seed);
        ok(&v.iter().map(String::as_str).collect::<Vec<_>>());
    }
    let (ba, bb, bc) = (
        std::fs::read(&a).unwrap(),
        std::fs::read(&b).unwrap(),
        std::fs::read(&c).unwrap(),
    );
    assert_eq!(ba, bb, "same seed, different bytes");
    assert_ne!(ba, bc, "different seeds, same bytes");
}

#[test]
fn synth_processes_and_size_sources_all_work() {
    let dir = tmp();
    for (i, arrivals) in [
        "poisson",
        "gamma:cv=3",
        "constant",
        "diurnal:period=60s,amplitude=0.9",
        "bursty:ratio=4,on=2s,off=4s",
    ]
    .iter()
    .enumerate()
    {
        let out = dir.path().join(format!("s{i}.parquet"));
        let o = out.to_str().unwrap();
        ok(&[
            "trace",
            "synth",
            "-o",
            o,
            "--arrivals",
            arrivals,
            "--rate",
            "40rps",
            "--duration",
            "5m",
        ]);
        let s = &inspect_json(&[o])["summary"];
        close(s, "mean_rate_rps", 40.0, 4.0);
    }
    let out = dir.path().join("r.parquet");
    let o = out.to_str().unwrap();
    ok(&[
        "trace",
        "synth",
        "-o",
        o,
        "--count",
        "5000",
        "--rate",
        "5",
        "--sizes-from",
        "traces/azure-conv.parquet",
    ]);
    let s = &inspect_json(&[o])["summary"];
    assert_eq!(num(s, "rows"), 5000.0);
    close(s, "input_tokens.p50", 1020.0, 40.0);
    bad_input(
        &[
            "trace",
            "synth",
            "-o",
            o,
            "--arrivals",
            "weibull",
            "--count",
            "5",
        ],
        &["--arrivals", "weibull"],
    );
    bad_input(&["trace", "synth", "-o", o], &["give a duration"]);
}

#[test]
fn shipped_demo_trace_is_reproduced_by_its_documented_command() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/README.md"))
            .unwrap();
    let line = readme
        .lines()
        .find(|l| {
            l.trim_start().starts_with("capsim trace synth") && l.contains("traces/demo.parquet")
        })
        .expect("traces/README.md documents the demo command");
    let dir = tmp();
    let out = dir.path().join("demo.parquet");
    let args: Vec<String> = line
        .split_whitespace()
        .skip(1)
        .map(|a| {
            if a == "traces/demo.parquet" {
                out.display().to_string()
            } else {
                a.to_string()
            }
        })
        .collect();
    ok(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let shipped =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/demo.parquet")).unwrap();
    assert_eq!(
        std::fs::read(&out).unwrap(),
        shipped,
        "traces/demo.parquet differs from its command's output"
    );
}

// ---- bad input: one clear message, exit code 2 ----

#[test]
fn missing_column_names_it_lists_columns_and_suggests_map() {
    let dir = tmp();
    let p = write(dir.path(), "x.csv", "time,prompt\n1,2\n");
    bad_input(
        &["trace", "inspect", &p],
        &[
            "no column `arrival`",
            "time, prompt",
            "--map arrival=COL:UNIT",
        ],
    );
}

#[test]
fn unparseable_timestamp_names_file_line_column_value() {
    let dir = tmp();
    let p = write(
        dir.path(),
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 25:99:00.0,1,2\n",
    );
    bad_input(
        &["trace", "inspect", &p],
        &[
            "a.csv: line 3, column `TIMESTAMP`: unparseable timestamp",
            "2023-11-16 25:99:00.0",
        ],
    );
}

#[test]
fn unparseable_number_negative_and_nan_sizes_are_refused() {
    let dir = tmp();
    let head = "arrival,input_tokens,output_tokens\n1,10,5\n";
    let p = write(dir.path(), "n.csv", &format!("{head}2,ten,5\n"));
    bad_input(
        &["trace", "inspect", &p],
        &["line 3, column `input_tokens`: not a number: \"ten\""],
    );
    let p = write(dir.path(), "neg.csv", &format!("{head}2,10,-5\n"));
    bad_input(
        &["trace", "inspect", &p],
        &[
            "line 3, column `output_tokens`: negative value \"-5\"",
            "--skip-invalid",
        ],
    );
    let p = write(dir.path(), "nan.csv", &format!("{head}2,NaN,5\n"));
    bad_input(
        &["trace", "inspect", &p],
        &["line 3, column `input_tokens`: NaN or infinite value"],
    );
    let p = write(
        dir.path(),
        "neg.jsonl",
        "{\"arrival\": 1, \"input_tokens\": -3}\n",
    );
    bad_input(
        &["trace", "inspect", &p],
        &["line 1, column `input_tokens`: negative value \"-3\""],
    );
}

#[test]
fn skip_invalid_counts_rows_instead_of_failing() {
    let dir = tmp();
    let p = write(
        dir.path(),
        "s.csv",
        "arrival,input_tokens\n1,10\n2,-1\n3,x\n4,7\n",
    );
    let j = inspect_json(&["--skip-invalid", &p]);
    assert_eq!(num(&j["summary"], "rows"), 2.0);
    assert_eq!(num(&j["ingest"], "rows_skipped"), 2.0);
    assert_eq!(num(&j["ingest"], "skipped_by_reason.negative"), 1.0);
    assert_eq!(num(&j["ingest"], "skipped_by_reason.bad_number"), 1.0);
    let text = ok(&["trace", "inspect", "--skip-invalid", &p]);
    assert!(text.contains("2 invalid rows skipped"), "{text}");
}

#[test]
fn empty_trace_is_an_error() {
    let dir = tmp();
    let p = write(dir.path(), "e.csv", "arrival,input_tokens\n");
    bad_input(&["trace", "inspect", &p], &["e.csv: trace is empty"]);
    let p = write(dir.path(), "all_bad.csv", "arrival,input_tokens\n1,-1\n");
    bad_input(
        &["trace", "inspect", "--skip-invalid", &p],
        &["trace is empty", "all 1 rows were invalid"],
    );
}

#[test]
fn truncated_and_corrupt_parquet_are_errors() {
    let dir = tmp();
    let good =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/azure-conv.parquet"))
            .unwrap();
    let t = dir.path().join("trunc.parquet");
    std::fs::write(&t, &good[..good.len() / 2]).unwrap();
    bad_input(
        &["trace", "inspect", t.to_str().unwrap()],
        &["trunc.parquet: not a readable Parquet file"],
    );
    let c = dir.path().join("junk.parquet");
    std::fs::write(&c, b"PAR1 this is not parquet at all PAR1").unwrap();
    bad_input(
        &["trace", "inspect", c.to_str().unwrap()],
        &["junk.parquet: not a readable Parquet file"],
    );
    let mut flipped = good.clone();
    let mid = flipped.len() / 3;
    for b in &mut flipped[mid..mid + 64] {
        *b ^= 0xA5;
    }
    let f = dir.path().join("flipped.parquet");
    std::fs::write(&f, &flipped).unwrap();
    let out = capsim(&["trace", "inspect", f.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        out.status.code() == Some(2) || out.status.success(),
        "{stderr}"
    );
}

#[test]
fn directory_without_traces_and_missing_files_are_errors() {
    let dir = tmp();
    write(dir.path(), "notes.txt", "hello");
    bad_input(
        &["trace", "inspect", dir.path().to_str().unwrap()],
        &["directory has no trace files"],
    );
    bad_input(
        &["trace", "inspect", "no/such/trace.csv"],
        &["no/such/trace.csv: no such file"],
    );
    bad_input(&["trace", "inspect"], &["no trace file given"]);
}

#[test]
fn bad_map_and_format_are_errors() {
    bad_input(
        &[
            "trace",
            "inspect",
            "traces/demo.parquet",
            "--map",
            "arival=x",
        ],
        &["bad --map", "unknown key \"arival\""],
    );
    bad_input(
        &[
            "trace",
            "inspect",
            "traces/demo.parquet",
            "--map",
            "arrival=x:hours",
        ],
        &["unknown time unit"],
    );
    bad_input(
        &["trace", "inspect", "traces/demo.parquet", "--format", "xml"],
        &["--format", "xml"],
    );
    bad_input(
        &[
            "trace",
            "inspect",
            "traces/demo.parquet",
            "--map",
            "arrival=when",
        ],
        &["no column `when`", "arrival, input_tokens"],
    );
}

#[test]
fn convert_refuses_wrong_types_with_a_clear_message() {
    let dir = tmp();
    let p = write(
        dir.path(),
        "b.csv",
        "arrival,input_tokens,failed\n1,2,maybe\n",
    );
    bad_input(
        &["trace", "inspect", &p],
        &["line 2, column `failed`: not true/false/1/0: \"maybe\""],
    );
}

#[test]
fn parquet_column_of_the_wrong_type_is_named() {
    bad_input(
        &[
            "trace",
            "inspect",
            "traces/mooncake-conversation.parquet",
            "--map",
            "input_tokens=prefix_blocks",
        ],
        &[
            "column `prefix_blocks` has type List",
            "expected a non-negative integer",
        ],
    );
    bad_input(
        &[
            "trace",
            "inspect",
            "traces/demo.parquet",
            "--map",
            "arrival=input_tokens:datetime",
        ],
        &[
            "column `input_tokens` has type UInt32",
            "a timestamp, or datetime text",
        ],
    );
}

#[test]
fn files_with_different_time_bases_are_not_merged() {
    let dir = tmp();
    let p = write(
        dir.path(),
        "offsets.csv",
        "arrival,input_tokens,output_tokens\n5,1,1\n",
    );
    bad_input(
        &["trace", "inspect", "traces/azure-conv.parquet", &p],
        &[
            "offsets.csv: arrivals are offsets from trace start",
            "wall-clock datetimes",
        ],
    );
}

// ---- inputs that cannot mislead (issue 30) ----

/// Three requests of a vLLM-style log: Unix-seconds arrivals under vLLM's key names.
fn vllm_log(dir: &Path) -> String {
    write(
        dir,
        "requests.jsonl",
        "{\"request_id\": \"a\", \"input_toks\": 2358, \"output_toks\": 531, \"arrival_time\": 1787267980.0827403}\n\
         {\"request_id\": \"b\", \"input_toks\": 1034, \"output_toks\": 769, \"arrival_time\": 1787267980.3478317}\n\
         {\"request_id\": \"c\", \"input_toks\": 1320, \"output_toks\": 700, \"arrival_time\": 1787268009.1}\n",
    )
}

#[test]
fn unix_seconds_mapped_without_a_unit_are_read_as_seconds_with_a_note() {
    let dir = tmp();
    let log = vllm_log(dir.path());
    let map = "arrival=arrival_time,input_tokens=input_toks,output_tokens=output_toks";
    let out = capsim(&["trace", "inspect", &log, "--map", map]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("span        29.017s"), "{text}");
    assert!(
        text.contains(
            "read as Unix seconds by their magnitude (state it: --map arrival=arrival_time:s)"
        ),
        "{text}"
    );
    let s = &inspect_json(&[&log, "--map", map])["summary"];
    close(s, "span_s", 29.017, 0.001);
}

#[test]
fn a_unitless_arrival_column_too_dense_for_nanoseconds_is_refused_with_exit_2() {
    let dir = tmp();
    let mut text = "t,n\n".to_string();
    for i in 0..200 {
        text.push_str(&format!("{},1\n", i * 10));
    }
    let path = write(dir.path(), "offsets.csv", &text);
    bad_input(
        &[
            "trace",
            "inspect",
            &path,
            "--map",
            "arrival=t,input_tokens=n",
        ],
        &[
            "offsets.csv: arrival column `t` has no unit",
            "as seconds they span 1990.0 s",
            "--map arrival=t:s",
        ],
    );
}

#[test]
fn synth_sizes_from_takes_the_map_and_format_of_the_other_trace_commands() {
    let dir = tmp();
    let log = vllm_log(dir.path());
    let out = dir.path().join("s.parquet");
    let o = out.to_str().unwrap();
    let synth = |extra: &[&str]| {
        let mut args = vec![
            "trace",
            "synth",
            "-o",
            o,
            "--count",
            "50",
            "--rate",
            "5",
            "--sizes-from",
            &log,
        ];
        args.extend_from_slice(extra);
        capsim(&args)
    };
    let unmapped = synth(&[]);
    assert_user_error(&unmapped, &["no column `arrival`", "--map"]);
    let mapped = synth(&[
        "--format",
        "jsonl",
        "--map",
        "arrival=arrival_time:s,input_tokens=input_toks,output_tokens=output_toks",
    ]);
    assert!(mapped.status.success(), "{}", stderr(&mapped));
    let s = &inspect_json(&[o])["summary"];
    assert_eq!(num(s, "rows"), 50.0);
    let max_in = num(s, "input_tokens.max");
    assert!([2358.0, 1034.0, 1320.0].contains(&max_in), "{s}");
    let stray = capsim(&[
        "trace",
        "synth",
        "-o",
        o,
        "--count",
        "5",
        "--map",
        "arrival=t",
    ]);
    assert_user_error(&stray, &["--sizes-from"]);
}

#[test]
fn a_mistyped_map_column_suggests_the_closest_one() {
    let dir = tmp();
    let log = vllm_log(dir.path());
    bad_input(
        &[
            "trace",
            "inspect",
            &log,
            "--map",
            "arrival=arrival_time:s,input_tokens=input_tok",
        ],
        &[
            "requests.jsonl: line 1: no column `input_tok`",
            "did you mean `input_toks`?",
        ],
    );
}

#[test]
fn an_output_folder_that_cannot_be_made_is_a_usage_error() {
    let dir = tmp();
    let blocker = write(dir.path(), "file", "not a folder");
    let out = format!("{blocker}/sub/x.parquet");
    bad_input(
        &["trace", "synth", "-o", &out, "--count", "5"],
        &[
            "--out: cannot create the folder",
            "pass a path in a folder you can write",
        ],
    );
    bad_input(
        &["trace", "convert", "traces/demo.parquet", "-o", &out],
        &["--out: cannot create the folder"],
    );
}
