//! End-to-end tests of runs whose simulated time is long or starts late: logs with Unix-time
//! arrivals, durations of years, a timeseries forced to a microsecond interval, a trace slowed a
//! million times. Each runs under an address-space limit of a few hundred MB and must complete
//! (or exit 2 with its reason). The real vLLM logs of `../shared/ground-truth` (or
//! `$CAPSIM_GROUND_TRUTH`) go through simulate, sweep, plan and validate with `--map`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_user_error, capsim, text};
use serde_json::Value;

/// The address-space limit of every run here, in KiB (`ulimit -v`): 400 MiB.
const ADDRESS_SPACE_KIB: u64 = 400 * 1024;

/// Runs `capsim` in the repository root under [`ADDRESS_SPACE_KIB`].
fn capsim_limited(args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_capsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("ORT_DYLIB_PATH")
        .output()
        .expect("sh runs")
}

/// `capsim simulate` of the BERT scenario on the demo trace into `out`, with `extra` flags,
/// under [`ADDRESS_SPACE_KIB`].
fn simulate_demo(out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "simulate",
        "--scenario",
        "scenarios/bert-dynamic-batching.toml",
        "traces/demo.parquet",
        "-o",
        out.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    capsim_limited(&args)
}

fn assert_ok(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what}: expected exit 0, got {:?}\n{}",
        output.status,
        text(output)
    );
}

fn summary(dir: &Path) -> Value {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} unreadable: {e}", path.display()));
    serde_json::from_str(&text).expect("summary.json is JSON")
}

fn timeseries_rows(dir: &Path) -> i64 {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let file = std::fs::File::open(dir.join("timeseries.parquet")).expect("timeseries.parquet");
    SerializedFileReader::new(file)
        .expect("a Parquet file")
        .metadata()
        .file_metadata()
        .num_rows()
}

/// The vLLM runs with per-request timestamps, one folder each.
fn ground_truth_runs() -> Vec<PathBuf> {
    let root = std::env::var("CAPSIM_GROUND_TRUTH")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/ground-truth").into());
    let mut runs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("ground truth {root} unreadable ({e}); set CAPSIM_GROUND_TRUTH"))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("requests.jsonl").is_file())
        .collect();
    runs.sort();
    assert!(!runs.is_empty(), "no */requests.jsonl under {root}");
    runs
}

const GROUND_TRUTH_MAP: &str =
    "arrival=arrival_time:s,input_tokens=input_toks,output_tokens=output_toks";

#[test]
fn unix_second_arrivals_start_at_the_first_request_unless_offsets_are_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let trace = dir.path().join("two.csv");
    std::fs::write(&trace, "t,i,o\n1777142838.3,10,5\n1777142839.5,10,5\n").expect("write");
    let trace = trace.to_str().expect("utf-8");
    let map = "arrival=t:s,input_tokens=i,output_tokens=o";
    let simulate = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "simulate",
            "--scenario",
            "scenarios/llm-8b-h200.toml",
            "--map",
            map,
            trace,
            "-o",
            out.to_str().expect("utf-8"),
        ];
        args.extend_from_slice(extra);
        capsim_limited(&args)
    };
    let out = dir.path().join("rebased");
    let output = simulate(&out, &[]);
    assert_ok(&output, "Unix seconds, rebased");
    assert!(
        common::stderr(&output).contains("arrivals read as Unix times, rebased"),
        "{}",
        text(&output)
    );
    let s = summary(&out);
    assert_eq!(s["requests"]["completed"], 2, "{s}");
    let end_s = s["end_s"].as_f64().expect("end_s");
    assert!(
        (1.2..60.0).contains(&end_s),
        "the run lasts from the first arrival (0) to the last response, got {end_s} s"
    );
    assert_eq!(s["timeseries_coarsened"], false);

    let inspect = capsim(&["trace", "inspect", "--map", map, trace]);
    assert_ok(&inspect, "trace inspect");
    let stdout = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        stdout.contains("time 0      arrivals are Unix times, rebased to the first arrival")
            && stdout.contains("from 2026-04-25T"),
        "{stdout}"
    );

    let kept = dir.path().join("kept");
    let output = simulate(&kept, &["--keep-offsets"]);
    assert_ok(&output, "Unix seconds, kept as offsets");
    assert!(
        common::stderr(&output).contains("note: timeseries.parquet: the run lasted"),
        "{}",
        text(&output)
    );
    let s = summary(&kept);
    let end_s = s["end_s"].as_f64().expect("end_s");
    assert!(
        end_s > 1_777_142_839.5,
        "56 years of simulated time, got {end_s} s"
    );
    assert_eq!(s["timeseries_coarsened"], true);
    assert!(timeseries_rows(&kept) <= 100_000);
}

#[test]
fn settings_that_make_simulated_time_long_complete_in_bounded_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: [&[&str]; 5] = [
        &["--set", "queue.timeout=1000d"],
        &["--set", "execution.cold_start=1000d"],
        &["--set", "batcher.max_queue_delay=1000d"],
        &["--set", "timeseries.interval=1us"],
        &["--rate-scale", "0.000001"],
    ];
    for (i, extra) in cases.iter().enumerate() {
        let out = dir.path().join(format!("case{i}"));
        let output = simulate_demo(&out, extra);
        assert_ok(&output, &extra.join(" "));
        let s = summary(&out);
        let counts = &s["requests"];
        assert_eq!(counts["total"], 29926, "{extra:?}: {s}");
        let rows = timeseries_rows(&out);
        assert!(
            (1..=100_000).contains(&rows),
            "{extra:?}: {rows} timeseries rows"
        );
        if s["timeseries_coarsened"] == true {
            assert!(
                common::stderr(&output).contains("note: timeseries.parquet"),
                "{extra:?}: coarsened without a note: {}",
                text(&output)
            );
        }
    }
}

#[test]
fn a_cold_start_of_1000_days_reports_latencies_of_1000_days() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("cold");
    let output = simulate_demo(
        &out,
        &[
            "--limit",
            "100",
            "--set",
            "execution.cold_start=1000d",
            "--set",
            "queue.timeout=2000d",
        ],
    );
    assert_ok(&output, "cold start 1000 d");
    let s = summary(&out);
    let p50_days = s["latency_ms"]["end_to_end"]["p50_ms"]
        .as_f64()
        .expect("p50")
        / 86_400_000.0;
    assert!(
        (999.0..1001.0).contains(&p50_days),
        "p50 {p50_days} days, expected 1000"
    );
}

#[test]
fn a_run_past_292_years_exits_2_naming_the_keys_to_shorten() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = simulate_demo(&dir.path().join("o"), &["--set", "service.c=50000d"]);
    assert_user_error(&output, &["292 years", "`[service]`"]);
}

#[test]
fn a_scenario_too_large_to_simulate_is_refused_before_allocating() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = simulate_demo(
        &dir.path().join("o"),
        &[
            "--set",
            "instances=90000",
            "--set",
            "execution.instance_count=100",
        ],
    );
    assert_user_error(&output, &["`execution`", "1000000"]);
}

#[test]
fn ground_truth_logs_run_through_simulate_sweep_and_plan() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, run) in ground_truth_runs().iter().enumerate() {
        let log = run.join("requests.jsonl");
        let log = log.to_str().expect("utf-8");
        let out = dir.path().join(format!("sim{i}"));
        let output = capsim_limited(&[
            "simulate",
            "--scenario",
            "scenarios/llm-8b-h200.toml",
            "--map",
            GROUND_TRUTH_MAP,
            log,
            "-o",
            out.to_str().expect("utf-8"),
        ]);
        assert_ok(&output, &format!("simulate {log}"));
        let s = summary(&out);
        let end_s = s["end_s"].as_f64().expect("end_s");
        assert!(end_s < 86_400.0, "{log}: a run of {end_s} s");
        assert_eq!(s["timeseries_coarsened"], false, "{log}");

        let output = capsim_limited(&[
            "sweep",
            "--scenario",
            "scenarios/llm-8b-h200.toml",
            "--map",
            GROUND_TRUTH_MAP,
            log,
            "--load",
            "1..4x:3",
            "--grid",
            "instances=1,2",
            "--slo",
            "ttft.p99<=2s",
            "-o",
            dir.path()
                .join(format!("sweep{i}"))
                .to_str()
                .expect("utf-8"),
        ]);
        assert_ok(&output, &format!("sweep {log}"));

        let output = capsim_limited(&[
            "plan",
            "--scenario",
            "scenarios/llm-8b-h200.toml",
            "--map",
            GROUND_TRUTH_MAP,
            "--trace",
            log,
            "--slo",
            "ttft.p99<=2s,tpot.p99<=100ms",
            "--grid",
            "instances=1..3",
            // 29 s of requests that live seconds each is too short for plan's steady window
            // (tests/steady_cli.rs); extended, the Unix times still go through.
            "--extend-to",
            "2m",
        ]);
        assert_ok(&output, &format!("plan {log}"));
    }
}

#[test]
fn ground_truth_log_runs_through_validate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (profile, scenario) = common::quick_profile_and_scenario(dir.path());
    let log = ground_truth_runs()[0].join("requests.jsonl");
    let output = common::validate_quick(
        &scenario,
        &profile,
        &["--map", GROUND_TRUTH_MAP, log.to_str().expect("utf-8")],
        &dir.path().join("validation"),
    );
    assert_ok(&output, "validate");
    assert!(
        common::stderr(&output).contains("arrivals read as Unix times"),
        "{}",
        text(&output)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("30% throughput rps"), "{stdout}");
}
