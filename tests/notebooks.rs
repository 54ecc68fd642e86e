//! The notebooks in `notebooks/` run top to bottom against the built binary, and are committed
//! without outputs. Both run `notebooks/run_all.py` in the project's `.venv` (made by
//! `scripts/setup.sh`, which installs `notebooks/requirements.txt`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The project's Python; a missing `.venv` is a failure, not a skip.
fn python() -> PathBuf {
    let python = root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/setup.sh to create .venv with notebooks/requirements.txt",
        python.display()
    );
    python
}

fn run_all(args: &[&str]) -> Output {
    let python = python();
    match Command::new(&python)
        .arg(root().join("notebooks/run_all.py"))
        .args(args)
        .env("CAPSIM_BIN", env!("CARGO_BIN_EXE_capsim"))
        .current_dir(root())
        .output()
    {
        Ok(output) => output,
        Err(err) => panic!(
            "could not run {} notebooks/run_all.py: {err}",
            python.display()
        ),
    }
}

fn assert_succeeded(output: &Output, what: &str) {
    assert!(
        output.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn committed_notebooks_have_no_outputs() {
    let output = run_all(&["--check-stripped"]);
    assert_succeeded(&output, "notebooks/run_all.py --check-stripped");
}

#[test]
fn every_notebook_runs_top_to_bottom_without_a_cell_error() {
    let output = run_all(&[]);
    assert_succeeded(&output, "notebooks/run_all.py");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let notebooks = std::fs::read_dir(root().join("notebooks"))
        .expect("notebooks/ is readable")
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".ipynb"))
        .collect::<Vec<_>>();
    assert!(!notebooks.is_empty(), "no notebooks in notebooks/");
    for name in notebooks {
        assert!(
            stdout.contains(&format!("ok {name}:")),
            "{name} was not reported as run:\n{stdout}"
        );
    }
}
