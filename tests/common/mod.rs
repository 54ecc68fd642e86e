//! Helpers shared by the end-to-end tests of the `capsim` command (each test file uses a subset).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A path inside the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
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
