//! `capsim replay --endpoint` against a real Triton Inference Server on 127.0.0.1 (installed by
//! `scripts/setup.sh` into `.triton/`, started and stopped by PID with `scripts/triton.py`),
//! serving a fixed-time model with dynamic batching. The checks are counts both sides keep, not
//! times: every request the load generator sent is one Triton counted, and Triton batched them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{capsim, repo, text};
use serde_json::Value;

/// The project's Python, which `scripts/triton.py` needs (for `tomllib` and its paths).
fn python() -> PathBuf {
    repo(".venv/bin/python")
}

/// A Triton started for a scenario, stopped (by its PID) when dropped.
struct Triton {
    dir: PathBuf,
}

impl Triton {
    fn start(scenario: &Path, dir: &Path) -> Triton {
        let output = Command::new(python())
            .arg(repo("scripts/triton.py"))
            .args(["start", "--model", "fixed", "--a", "2ms", "--b", "0.5ms"])
            .arg("--scenario")
            .arg(scenario)
            .arg("--dir")
            .arg(dir)
            .output()
            .expect("scripts/triton.py runs (scripts/setup.sh installs .venv and .triton)");
        let triton = Triton {
            dir: dir.to_path_buf(),
        };
        assert!(
            output.status.success(),
            "Triton did not start: {}",
            text(&output)
        );
        triton
    }

    fn url(&self, port: &str) -> String {
        let ports: Value = serde_json::from_str(
            &std::fs::read_to_string(self.dir.join("ports.json")).expect("ports.json"),
        )
        .expect("JSON");
        format!("http://127.0.0.1:{}", ports[port])
    }

    fn stats(&self) -> Value {
        let output = Command::new(python())
            .arg(repo("scripts/triton.py"))
            .args(["stats", "--dir"])
            .arg(&self.dir)
            .output()
            .expect("scripts/triton.py stats runs");
        assert!(output.status.success(), "{}", text(&output));
        serde_json::from_slice(&output.stdout).expect("statistics JSON")
    }
}

impl Drop for Triton {
    fn drop(&mut self) {
        let _ = Command::new(python())
            .arg(repo("scripts/triton.py"))
            .args(["stop", "--dir"])
            .arg(&self.dir)
            .status();
    }
}

#[test]
fn every_request_replayed_against_triton_is_one_triton_counted_and_batched() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("s.toml");
    std::fs::write(
        &scenario,
        "name = \"triton-fixed\"\n[batcher]\nmax_batch_size = 8\npreferred_batch_size = [4, 8]\n\
         max_queue_delay = \"2ms\"\n[service]\nkind = \"affine\"\na = \"2ms\"\nb = \"0.5ms\"\n",
    )
    .expect("write scenario");
    let triton = Triton::start(&scenario, dir.path());
    let out = dir.path().join("measured");
    let output = capsim(&[
        "replay",
        "--endpoint",
        &triton.url("http"),
        "--metrics-url",
        &format!("{}/metrics", triton.url("metrics")),
        "--model",
        "fixed",
        "--scenario",
        scenario.to_str().expect("utf-8"),
        "--trace",
        "traces/demo.parquet",
        "--limit",
        "400",
        "--rate-scale",
        "40",
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("summary.json"),
    )
    .expect("JSON");
    assert_eq!(summary["requests"]["completed"], 400, "{summary}");
    let stats = triton.stats();
    assert_eq!(stats["inference_count"], 400, "Triton's count: {stats}");
    let executions = stats["execution_count"].as_u64().expect("execution_count");
    assert!(
        executions < 400,
        "450 req/s against a 2.5 ms model: Triton must batch, ran {executions} batches"
    );
    let batched: u64 = stats["batch_stats"]
        .as_array()
        .expect("batch_stats")
        .iter()
        .map(|b| b["batch_size"].as_u64().unwrap() * b["compute_infer"]["count"].as_u64().unwrap())
        .sum();
    assert_eq!(batched, 400, "batch sizes add up to the requests: {stats}");
    // Triton's own counters, scraped through the run: the increase from the first scrape (at
    // the first send) to the last (after the last answer).
    let scraped = &summary["server_metrics"];
    let counted = scraped["nv_inference_count"]
        .as_f64()
        .expect("nv_inference_count");
    assert!(
        (1.0..=400.0).contains(&counted),
        "{counted} inferences counted between the first and last scrape: {scraped}"
    );
    assert!(
        scraped["nv_inference_exec_count"].as_f64().is_some(),
        "{scraped}"
    );
}
