//! End-to-end tests of `capsim sweep`, `capsim merge`, `capsim report` and `capsim plan`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{capsim, repo, text};

/// A small affine-service scenario written into `dir`.
fn scenario(dir: &Path) -> PathBuf {
    let path = dir.join("scenario.toml");
    std::fs::write(
        &path,
        "name = \"cli-test\"\n[timeseries]\ninterval = \"5s\"\n[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"2ms\"\n[service]\nkind = \"affine\"\na = \"20ms\"\nb = \"5ms\"\n",
    )
    .unwrap();
    path
}

const SLO: &str = "e2e.p99<=400ms";

fn sweep(dir: &Path, out: &str, slo: &str, extra: &[&str]) -> Output {
    let scenario = scenario(dir);
    let trace = repo("traces/demo.parquet");
    let out = dir.join(out);
    let mut args = vec![
        "sweep",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--load",
        "0.5..6x:6",
        "--grid",
        "batcher.max_batch_size=1,8",
        "--grid",
        "instances=1..2",
        "--slo",
        slo,
        "--seeds",
        "2",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    capsim(&args)
}

#[test]
fn sweep_writes_curves_capacities_and_report_and_shards_merge_to_the_same_capacities() {
    let dir = tempfile::tempdir().unwrap();
    let whole = sweep(dir.path(), "whole", SLO, &[]);
    assert!(whole.status.success(), "{}", text(&whole));
    let out = dir.path().join("whole");
    for name in [
        "curves.parquet",
        "capacity.csv",
        "capacity.json",
        "sweep.json",
        "report.md",
        "throughput_latency.png",
        "latency_cdf.png",
        "stage_breakdown.png",
        "timeseries.png",
        "capacity_heatmap.png",
    ] {
        let len = std::fs::metadata(out.join(name))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 0, "{name} missing or empty\n{}", text(&whole));
    }
    let csv = std::fs::read_to_string(out.join("capacity.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        1 + 4,
        "header + 4 configurations:\n{csv}"
    );
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let column = header
        .iter()
        .position(|h| *h == "limited_by")
        .unwrap_or_else(|| panic!("no limited_by column:\n{csv}"));
    for line in csv.lines().skip(1) {
        let ends = line.split(',').nth(column).unwrap();
        for seed in ends.split(';') {
            assert!(
                seed.split('+').all(|l| [
                    "slo",
                    "losses",
                    "queue_growth",
                    "achieved_below_offered",
                    "none"
                ]
                .contains(&l)),
                "limited_by {ends:?} in {line}"
            );
        }
    }

    for i in 0..2 {
        let shard = format!("{i}/2");
        let output = sweep(
            dir.path(),
            &format!("shard{i}"),
            SLO,
            &["--shard", &shard, "--no-report"],
        );
        assert!(output.status.success(), "{}", text(&output));
    }
    let merged = dir.path().join("merged");
    let output = capsim(&[
        "merge",
        dir.path().join("shard0").to_str().unwrap(),
        dir.path().join("shard1").to_str().unwrap(),
        "-o",
        merged.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(
        std::fs::read_to_string(merged.join("capacity.csv")).unwrap(),
        csv,
        "merged shards must give the unsharded capacity.csv"
    );

    std::fs::remove_file(out.join("report.md")).unwrap();
    let report = capsim(&["report", out.to_str().unwrap()]);
    assert!(report.status.success(), "{}", text(&report));
    assert!(out.join("report.md").exists());
}

#[test]
fn plan_names_the_fewest_instances_that_carry_the_growth() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    let trace = repo("traces/demo.parquet");
    let output = capsim(&[
        "plan",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        "e2e.p99<=400ms",
        "--growth",
        "3x",
        "--grid",
        "batcher.max_batch_size=1,8",
        "--grid",
        "instances=1..4",
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("plan: "), "{}", text(&output));
    assert!(stdout.contains("headroom"), "{}", text(&output));
}

/// Runs `capsim` on the BERT example's 4 instances with no queue delay, 3 seeds, growth 4x.
fn bert(command: &str, extra: &[&str]) -> Output {
    let scenario = repo("scenarios/bert-dynamic-batching.toml");
    let trace = repo("traces/demo.parquet");
    let mut args = vec![
        command,
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--grid",
        "instances=4",
        "--grid",
        "batcher.max_queue_delay=0ms",
        "--slo",
        "e2e.p99<=100ms",
        "--seeds",
        "3",
        "--growth",
        "4x",
    ];
    args.extend_from_slice(extra);
    let output = capsim(&args);
    assert!(output.status.success(), "{}", text(&output));
    output
}

fn answer_line(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find(|l| l.starts_with("Answer:"))
        .unwrap_or_else(|| panic!("no answer:\n{}", text(output)))
        .to_string()
}

/// `capacity.csv`'s `capacity_rps_ci95_low` of its one configuration.
fn capacity_low(dir: &Path) -> String {
    let csv = std::fs::read_to_string(dir.join("capacity.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let column = header
        .iter()
        .position(|h| *h == "capacity_rps_ci95_low")
        .unwrap();
    lines
        .next()
        .unwrap()
        .split(',')
        .nth(column)
        .unwrap()
        .to_string()
}

#[test]
fn plan_and_sweep_give_a_configuration_the_same_capacity_whatever_the_load_axis() {
    let dir = tempfile::tempdir().unwrap();
    let (by_multiple, by_rate) = (dir.path().join("x"), dir.path().join("rps"));
    let sweep = bert(
        "sweep",
        &[
            "--load",
            "0.25..32x:log13",
            "--no-report",
            "-o",
            by_multiple.to_str().unwrap(),
        ],
    );
    let other_axis = bert(
        "sweep",
        &[
            "--rate",
            "100..3000rps:log5",
            "--no-report",
            "-o",
            by_rate.to_str().unwrap(),
        ],
    );
    let plan = bert("plan", &[]);
    assert_eq!(
        capacity_low(&by_multiple),
        capacity_low(&by_rate),
        "the capacity must not depend on the sweep's load axis"
    );
    let low: f64 = capacity_low(&by_multiple).parse().unwrap();
    let plan_out = String::from_utf8_lossy(&plan.stdout);
    assert!(
        plan_out.contains(&format!("({low:.1} req/s at the trace's mean")),
        "plan must carry the sweep's {low:.1} req/s:\n{plan_out}"
    );
    assert_eq!(
        answer_line(&sweep),
        answer_line(&plan),
        "sweep and plan must give the same answer"
    );
    assert_eq!(answer_line(&other_axis), answer_line(&plan));
}

#[test]
fn bad_flags_exit_2_and_quote_the_value() {
    let dir = tempfile::tempdir().unwrap();
    for (slo, flag, value) in [
        ("e2e.p99<=fast", "--max-lost", "0.001"),
        (SLO, "--shard", "2/2"),
        (SLO, "--grid", "instances=8..1"),
    ] {
        let output = sweep(dir.path(), "bad", slo, &[flag, value]);
        let value = if slo == SLO { value } else { slo };
        assert_eq!(
            output.status.code(),
            Some(2),
            "{flag} {value}: {}",
            text(&output)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(value),
            "{flag}: stderr should quote `{value}`: {stderr}"
        );
    }
}

#[test]
fn detail_load_chooses_the_load_of_the_cdf_and_time_series() {
    let dir = tempfile::tempdir().unwrap();
    let output = sweep(
        dir.path(),
        "detail",
        SLO,
        &["--detail-load", "2x", "--no-report"],
    );
    assert!(output.status.success(), "{}", text(&output));
    let sweep_json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("detail/sweep.json")).unwrap(),
    )
    .unwrap();
    let details = sweep_json["details"].as_array().expect("details");
    assert!(!details.is_empty(), "no detail runs in {sweep_json}");
    for detail in details {
        assert_eq!(detail["load"].as_f64(), Some(2.0), "detail run: {detail}");
    }

    let bad = sweep(dir.path(), "bad", SLO, &["--detail-load", "0x"]);
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    assert!(text(&bad).contains("`0x`"), "{}", text(&bad));
}

#[test]
fn plan_with_a_profile_rests_on_it_and_says_the_answer_is_for_the_profiles_machine() {
    let trace = repo("traces/demo.parquet");
    let scenario = repo("scenarios/bert-dynamic-batching.toml");
    let output = capsim(&[
        "plan",
        "--scenario",
        scenario.to_str().unwrap(),
        "--profile",
        "traces/profiles/text_classifier.cpu.json",
        "--trace",
        trace.to_str().unwrap(),
        "--limit",
        "3000",
        "--slo",
        "e2e.p99<=100ms",
        "--grid",
        "instances=1..2",
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for needle in [
        "measured service times (calibrated profile ",
        "traces/profiles/text_classifier.cpu.json, measured on cpu (AMD EPYC, 2 logical CPUs) through ONNX Runtime 1.31.1 on 2026-12-01",
        "the scenario describes other hardware (GPU, T4) than the profile was measured on",
    ] {
        assert!(
            stdout.contains(needle),
            "lacks {needle:?}: {}",
            text(&output)
        );
    }
    assert!(!stdout.contains("UNMEASURED"), "{}", text(&output));
}

/// `capsim plan` on the BERT example and the demo trace, with `extra` flags.
fn plan_bert(slo: &str, extra: &[&str]) -> Output {
    let scenario = repo("scenarios/bert-dynamic-batching.toml");
    let trace = repo("traces/demo.parquet");
    let mut args = vec![
        "plan",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        slo,
    ];
    args.extend_from_slice(extra);
    capsim(&args)
}

#[test]
fn misleading_slos_grids_sets_and_flags_exit_2_before_any_run_with_the_fix() {
    let cases: [(&str, &[&str], &[&str]); 7] = [
        (
            "ttft.p99<=2s",
            &["--grid", "instances=2"],
            &["reports no `ttft`", "continuous batcher", "e2e, end_to_end"],
        ),
        (
            "e2e.p99<=100ms;ttft.p99<=1s",
            &[],
            &["join objectives with `,`"],
        ),
        ("ttf.p99<=1s", &[], &["did you mean `ttft`?"]),
        (
            "e2e.p99<=100ms",
            &["--grid", "instance=1,2"],
            &["--grid", "did you mean `instances`?"],
        ),
        (
            "e2e.p99<=100ms",
            &["--set", "batcher.max_batch_sze=4"],
            &["did you mean `batcher.max_batch_size`?"],
        ),
        (
            "e2e.p99<=100ms",
            &["--grid", "gateway.load_balancing=least_outstandin"],
            &["did you mean `least_outstanding`?"],
        ),
        ("e2e.p99<=100ms", &["--growht", "2x"], &["--growth"]),
    ];
    for (slo, extra, needles) in cases {
        let output = plan_bert(slo, extra);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{slo} {extra:?}: {}",
            text(&output)
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{slo} {extra:?}: stderr should say `{needle}`: {stderr}"
            );
        }
        assert!(
            !stderr.contains("rows read"),
            "{slo} {extra:?}: refused only after reading the trace: {stderr}"
        );
    }
}

#[test]
fn a_grid_max_batch_size_below_the_preferred_sizes_runs_with_one_note() {
    let output = plan_bert(
        "e2e.p99<=100ms",
        &[
            "--grid",
            "batcher.max_batch_size=4",
            "--grid",
            "instances=1,2",
        ],
    );
    assert!(output.status.success(), "{}", text(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let notes: Vec<&str> = stderr.lines().filter(|l| l.starts_with("note:")).collect();
    assert_eq!(
        notes,
        [
            "note: `batcher.max_batch_size` = 4 is below `batcher.preferred_batch_size` [8, 16, 32]: dropped [8, 16, 32], leaving []"
        ],
        "{}",
        text(&output)
    );
}

#[test]
fn plan_set_changes_the_base_scenario_before_the_grid_and_a_strict_slo_prints_back_strict() {
    let slower = plan_bert(
        "e2e.p99<100ms",
        &["--set", "service.a=500ms", "--grid", "instances=1,2"],
    );
    assert!(slower.status.success(), "{}", text(&slower));
    let stdout = String::from_utf8_lossy(&slower.stdout);
    assert!(
        stdout.contains("SLO e2e.p99<100ms;"),
        "a strict bound prints back as `<`: {}",
        text(&slower)
    );
    assert!(
        stdout.contains("no configuration of the grid carries 1x")
            && stdout.contains("ends by SLO crossed"),
        "a 500 ms batch cannot meet 100 ms: {}",
        text(&slower)
    );
    let as_written = plan_bert("e2e.p99<100ms", &["--grid", "instances=1,2"]);
    assert!(as_written.status.success(), "{}", text(&as_written));
    assert!(
        String::from_utf8_lossy(&as_written.stdout).contains("plan: "),
        "{}",
        text(&as_written)
    );
}

#[test]
fn report_and_merge_of_a_folder_without_a_sweep_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().to_str().unwrap();
    let report = capsim(&["report", empty]);
    assert_eq!(report.status.code(), Some(2), "{}", text(&report));
    let out = dir.path().join("out");
    let merge = capsim(&["merge", empty, "-o", out.to_str().unwrap()]);
    assert_eq!(merge.status.code(), Some(2), "{}", text(&merge));
}

#[test]
fn report_with_a_plot_size_out_of_range_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let output = sweep(dir.path(), "small", SLO, &["--no-report"]);
    assert!(output.status.success(), "{}", text(&output));
    let out = dir.path().join("small");
    let report = capsim(&["report", out.to_str().unwrap(), "--width", "50"]);
    assert_eq!(report.status.code(), Some(2), "{}", text(&report));
    assert!(text(&report).contains("50x800"), "{}", text(&report));
}
