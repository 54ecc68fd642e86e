//! Helpers shared by the end-to-end tests of the `capsim` command (each test file uses a subset).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A path inside the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The `requests.jsonl` of the shared ground-truth run `run` (`../shared/ground-truth`, or
/// `CAPSIM_GROUND_TRUTH`); fails naming the path when it is missing.
pub fn ground_truth(run: &str) -> PathBuf {
    let root = std::env::var("CAPSIM_GROUND_TRUTH")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/ground-truth").into());
    let log = Path::new(&root).join(run).join("requests.jsonl");
    assert!(
        log.is_file(),
        "{} missing; set CAPSIM_GROUND_TRUTH",
        log.display()
    );
    log
}

/// Runs the built `capsim` in the repository root. `ORT_DYLIB_PATH` is removed so that the
/// tests find ONNX Runtime the way a user's first run does (the project's `.venv`).
pub fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("ORT_DYLIB_PATH")
        .output()
        .expect("capsim runs")
}

/// Both output streams of a run, for assertion messages.
pub fn text(output: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The run's standard error as text.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts a failed run exited 2 (bad input) and its message contains every `needle`.
pub fn assert_user_error(output: &Output, needles: &[&str]) {
    let message = stderr(output);
    assert_eq!(
        output.status.code(),
        Some(2),
        "expected exit 2, got {:?}; stderr: {message}",
        output.status
    );
    assert!(!message.contains("panicked"), "panic: {message}");
    for needle in needles {
        assert!(
            message.contains(needle),
            "stderr lacks {needle:?}: {message}"
        );
    }
}

/// Calibrates the shipped classifier quickly on the CPU (batches 1 and 4, lengths 16 and 32, no
/// idle curve) into `dir/p.json`, and writes beside it a scenario that serves it with one
/// instance, batches of up to 4 and a 1 ms queue delay (`dir/s.toml`): what `validate` needs.
/// Returns (profile, scenario).
pub fn quick_profile_and_scenario(dir: &Path) -> (PathBuf, PathBuf) {
    let profile = dir.join("p.json");
    let calibrated = capsim(&[
        "calibrate",
        "--model",
        "traces/models/text_classifier.onnx",
        "--ep",
        "cpu",
        "--batch",
        "1,4",
        "--dim",
        "seq=16,32",
        "--warmup",
        "2",
        "--iters",
        "20",
        "--min-iters",
        "20",
        "--threads",
        "1",
        "--idle-curve",
        "none",
        "-o",
        profile.to_str().expect("utf-8"),
    ]);
    assert!(calibrated.status.success(), "{}", stderr(&calibrated));
    let scenario = dir.join("s.toml");
    std::fs::write(
        &scenario,
        "instances = 1\n[batcher]\nmax_batch_size = 4\nmax_queue_delay = \"1ms\"\n\
         [service]\nkind = \"constant\"\ntime = \"1ms\"\n",
    )
    .expect("write scenario");
    (profile, scenario)
}

/// `capsim validate` of `scenario` and `profile` (from [`quick_profile_and_scenario`]) at 30%
/// load for 1 s of the trace that `trace_args` name, into `out`.
pub fn validate_quick(scenario: &Path, profile: &Path, trace_args: &[&str], out: &Path) -> Output {
    let mut args = vec![
        "validate",
        "--scenario",
        scenario.to_str().expect("utf-8"),
        "--model",
        "traces/models/text_classifier.onnx",
        "--profile",
        profile.to_str().expect("utf-8"),
        "--loads",
        "0.3",
        "--duration",
        "1s",
        "--max-length",
        "32",
        "-o",
        out.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(trace_args);
    capsim(&args)
}

/// The `summary.json` a run wrote in `out`, parsed.
pub fn summary(out: &Path) -> serde_json::Value {
    let path = out.join("summary.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} unreadable: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// Runs `case` on every seed on a few worker threads (as many as the machine has, at most 4):
/// worker `w` takes seeds `w`, `w + workers`, ... in order. Returns the first worker's results,
/// then the second's, and so on; a panicking case fails the caller.
pub fn on_workers<R: Send>(seeds: &[u64], case: impl Fn(u64) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    let case = &case;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                scope.spawn(move || {
                    seeds
                        .iter()
                        .skip(w)
                        .step_by(workers)
                        .map(|&seed| case(seed))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("worker"))
            .collect()
    })
}
