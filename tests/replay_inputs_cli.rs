//! Replay inputs (`capsim simulate --replay-inputs`): the timings only a measured run gives,
//! which left the scenario. `tests/fixtures/replay-inputs/summary-before.json` is the summary
//! `capsim simulate` wrote for the same run when the five were scenario keys
//! (`batcher.dispatch_residuals`, `release_latency_per_request`, `thread_first_fraction`,
//! `execution.slowdowns`, `execution.pauses`; commit e84f63d): the replay through its new input
//! must give it byte for byte.

mod common;

use std::path::Path;
use std::process::Output;

use common::{assert_user_error, capsim, repo, text};

fn simulate(scenario: &Path, replay: Option<&Path>, out: &Path) -> Output {
    let trace = repo("traces/demo.parquet");
    let mut args = vec![
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--window",
        "..32s",
        "--rate-scale",
        "4",
        "-o",
        out.to_str().unwrap(),
    ];
    if let Some(replay) = replay {
        args.extend(["--replay-inputs", replay.to_str().unwrap()]);
    }
    capsim(&args)
}

#[test]
fn a_replay_through_its_inputs_file_gives_the_summary_it_gave_when_they_were_scenario_keys() {
    let fixtures = repo("tests/fixtures/replay-inputs");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("replayed");
    let run = simulate(
        &fixtures.join("scenario.toml"),
        Some(&fixtures.join("replay.toml")),
        &out,
    );
    assert!(run.status.success(), "{}", text(&run));
    let got = std::fs::read_to_string(out.join("summary.json")).unwrap();
    let before = std::fs::read_to_string(fixtures.join("summary-before.json")).unwrap();
    assert!(
        got == before,
        "the replay's summary moved:\n--- before\n{before}\n--- now\n{got}"
    );
    // Without its inputs the same scenario is another run: each input is felt.
    let plain = dir.path().join("plain");
    let run = simulate(&fixtures.join("scenario.toml"), None, &plain);
    assert!(run.status.success(), "{}", text(&run));
    let without = std::fs::read_to_string(plain.join("summary.json")).unwrap();
    assert_ne!(without, before, "the replay inputs changed nothing");
}

#[test]
fn a_replay_input_in_a_scenario_file_is_refused_pointing_to_the_replay_inputs_file() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.toml");
    let text = std::fs::read_to_string(repo("tests/fixtures/replay-inputs/scenario.toml"))
        .unwrap()
        .replace("[execution]\n", "[execution]\npauses = []\n");
    std::fs::write(&scenario, text).unwrap();
    let run = simulate(&scenario, None, &dir.path().join("out"));
    assert_user_error(
        &run,
        &["execution.pauses", "replay input", "--replay-inputs"],
    );
}

#[test]
fn a_bad_replay_inputs_file_is_refused_naming_the_file_and_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = repo("tests/fixtures/replay-inputs");
    let replay = dir.path().join("bad.toml");
    std::fs::write(&replay, "thread_first_fraction = 1.5\n").unwrap();
    let run = simulate(
        &fixtures.join("scenario.toml"),
        Some(&replay),
        &dir.path().join("out"),
    );
    assert_user_error(
        &run,
        &["bad.toml", "replay.thread_first_fraction", "between 0"],
    );
    std::fs::write(&replay, "batch_time = \"5ms\"\n").unwrap();
    let run = simulate(
        &fixtures.join("scenario.toml"),
        Some(&replay),
        &dir.path().join("out"),
    );
    assert_user_error(&run, &["bad.toml", "batch_time", "thread_first_fraction"]);
}
