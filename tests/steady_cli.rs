//! End-to-end tests of the steady-state window (docs/report.md, "Steady state") and
//! `--extend-to` (docs/trace-format.md): the acceptance of issue 30's first point. The 300
//! requests over 29 s of the vLLM log in `../shared/ground-truth` (or `$CAPSIM_GROUND_TRUTH`),
//! planned at 3x, once answered 9 instances because with 9 the whole trace is in flight at once;
//! a 10-minute trace of its sizes at 3 times its rate needs about 19.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_user_error, capsim, summary, text};
use serde_json::Value;

const SCENARIO: &str = "scenarios/vllm-rtx4090-llama-3.1-8b.toml";
const SLO: &str = "ttft.p99<=2s,tpot.p99<=100ms";
const MAP: &str = "arrival=arrival_time:s,input_tokens=input_toks,output_tokens=output_toks";
/// Instances the two plans below choose among: both answers lie inside, with room either side.
const GRID: &str = "instances=17..21";

fn vllm_log() -> PathBuf {
    let root = std::env::var("CAPSIM_GROUND_TRUTH")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/ground-truth").into());
    let log = Path::new(&root)
        .join("vllm-rtx4090-llama-3.1-8b")
        .join("requests.jsonl");
    assert!(
        log.is_file(),
        "{} missing; set CAPSIM_GROUND_TRUTH",
        log.display()
    );
    log
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The instance count of the answer plan prints ("plan: instances=N ...").
fn planned_instances(stdout: &str) -> u32 {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("plan: "))
        .unwrap_or_else(|| panic!("no plan line in:\n{stdout}"));
    line.split_whitespace()
        .find_map(|word| word.strip_prefix("instances=")?.parse().ok())
        .unwrap_or_else(|| panic!("no instance count in {line:?}"))
}

#[test]
fn a_29_second_log_planned_at_3x_is_refused_with_the_length_it_needs_and_how_to_get_it() {
    let log = vllm_log();
    let output = capsim(&[
        "plan",
        "--scenario",
        SCENARIO,
        path(&log),
        "--map",
        MAP,
        "--slo",
        SLO,
        "--growth",
        "3x",
    ]);
    assert_user_error(
        &output,
        &[
            "the trace is too short",
            "lifetimes",
            "the trace's span is",
            "Use a trace of at least",
            "--extend-to",
        ],
    );
}

#[test]
fn the_log_extended_to_10m_plans_within_15_percent_of_a_synthesized_10_minute_trace() {
    let dir = tempfile::tempdir().unwrap();
    let log = vllm_log();
    let canonical = dir.path().join("log.parquet");
    let converted = capsim(&[
        "trace",
        "convert",
        path(&log),
        "--map",
        MAP,
        "-o",
        path(&canonical),
    ]);
    assert!(converted.status.success(), "{}", text(&converted));
    let inspected = capsim(&["trace", "inspect", path(&canonical), "--json"]);
    assert!(inspected.status.success(), "{}", text(&inspected));
    let facts: Value = serde_json::from_slice(&inspected.stdout).unwrap();
    let rate_rps = facts["summary"]["mean_rate_rps"].as_f64().unwrap();
    let synthesized = dir.path().join("synth.parquet");
    let synth = capsim(&[
        "trace",
        "synth",
        "--sizes-from",
        path(&canonical),
        "--rate",
        &format!("{}", 3.0 * rate_rps),
        "--duration",
        "10m",
        "--seed",
        "1",
        "-o",
        path(&synthesized),
    ]);
    assert!(synth.status.success(), "{}", text(&synth));

    let (extended, reference) = std::thread::scope(|scope| {
        let extended = scope.spawn(|| {
            capsim(&[
                "plan",
                "--scenario",
                SCENARIO,
                path(&log),
                "--map",
                MAP,
                "--extend-to",
                "10m",
                "--slo",
                SLO,
                "--growth",
                "3x",
                "--grid",
                GRID,
            ])
        });
        let reference = scope.spawn(|| {
            capsim(&[
                "plan",
                "--scenario",
                SCENARIO,
                path(&synthesized),
                "--slo",
                SLO,
                "--growth",
                "1x",
                "--grid",
                GRID,
            ])
        });
        (extended.join().unwrap(), reference.join().unwrap())
    });
    assert!(extended.status.success(), "{}", text(&extended));
    assert!(reference.status.success(), "{}", text(&reference));
    assert!(
        String::from_utf8_lossy(&extended.stderr).contains("added by --extend-to"),
        "the extension is said: {}",
        text(&extended)
    );
    let got = planned_instances(&String::from_utf8_lossy(&extended.stdout));
    let want = planned_instances(&String::from_utf8_lossy(&reference.stdout));
    let error = (f64::from(got) - f64::from(want)).abs() / f64::from(want);
    assert!(
        error <= 0.15,
        "extended log: {got} instances, synthesized 10-minute trace: {want} ({:.0}% apart)\n{}\n{}",
        error * 100.0,
        text(&extended),
        text(&reference)
    );
}

#[test]
fn simulate_states_its_steady_window_and_a_given_warmup_still_wins() {
    let dir = tempfile::tempdir().unwrap();
    let derived = dir.path().join("derived");
    let given = dir.path().join("given");
    let common_args = [
        "simulate",
        "--scenario",
        "scenarios/bert-dynamic-batching.toml",
        "traces/demo.parquet",
        "--limit",
        "3000",
        "--no-requests",
    ];
    let run = |out: &Path, extra: &[&str]| {
        let mut args = common_args.to_vec();
        args.extend_from_slice(extra);
        args.extend_from_slice(&["-o", path(out)]);
        let output = capsim(&args);
        assert!(output.status.success(), "{}", text(&output));
        output
    };
    let output = run(&derived, &[]);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("steady state: requests sent in"),
        "{}",
        text(&output)
    );
    let window = &summary(&derived)["steady_window"];
    assert_eq!(window["warmup_rule"], "mser-5", "{window}");
    let (from_s, to_s, last_s) = (
        window["from_s"].as_f64().unwrap(),
        window["to_s"].as_f64().unwrap(),
        window["last_send_s"].as_f64().unwrap(),
    );
    assert!(from_s < to_s && to_s <= last_s, "{window}");
    assert!(
        window["why"].as_str().unwrap().contains("lifetime"),
        "{window}"
    );
    assert!(window.get("too_short_needs_s").is_none(), "{window}");
    let measured = summary(&derived)["measured"]["total"].as_u64().unwrap();
    let excluded = summary(&derived)["warmup_excluded"].as_u64().unwrap();
    assert_eq!(measured + excluded, 3000);
    assert!(excluded > 0, "the drain at least is left out");

    run(&given, &["--warmup", "10s"]);
    let window = &summary(&given)["steady_window"];
    assert_eq!(window["warmup_rule"], "warmup", "{window}");
    assert_eq!(window["from_s"].as_f64().unwrap(), 10.0, "{window}");
}

#[test]
fn extend_to_lengthens_any_commands_trace_and_says_so() {
    let log = vllm_log();
    let output = capsim(&[
        "trace",
        "inspect",
        path(&log),
        "--map",
        MAP,
        "--extend-to",
        "10m",
        "--json",
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let facts: Value = serde_json::from_slice(&output.stdout).unwrap();
    let added = facts["ingest"]["added_by_extend"].as_u64().unwrap();
    let span_s = facts["summary"]["span_s"].as_f64().unwrap();
    assert!(added > 5000, "about 10 min at 10 req/s: {added} added");
    assert!((590.0..=600.0).contains(&span_s), "span {span_s} s");
    let peak = facts["summary"]["peak_rate_60s_rps"].as_f64().unwrap();
    let mean = facts["summary"]["mean_rate_rps"].as_f64().unwrap();
    assert!(peak >= mean, "60 s peak {peak} below the mean {mean}");

    let bad = capsim(&[
        "trace",
        "inspect",
        path(&log),
        "--map",
        MAP,
        "--extend-to",
        "ten",
    ]);
    assert_user_error(&bad, &["--extend-to", "10m"]);
}
