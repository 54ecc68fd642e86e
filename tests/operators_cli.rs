//! End-to-end tests of `capsim calibrate --operators`: the per-operator roofline calibrated on
//! Vidur's H100 Llama-2-7B table (`../shared/gpu-profiles/vidur/`, or under
//! `$CAPSIM_GPU_PROFILES`) predicts its CodeLlama-34B and Llama-2-70B tables (the transfer
//! acceptance of issue 31), and the bad-input cases.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_user_error, capsim, text};

/// The acceptance bound on a prediction's median relative error.
const TRANSFER_MEDIAN_PERCENT: f64 = 10.0;

/// A model folder of Vidur's H100 compute tables.
fn vidur_h100(model: &str) -> PathBuf {
    let root = std::env::var("CAPSIM_GPU_PROFILES")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/gpu-profiles").into());
    let dir = Path::new(&root).join("vidur/compute/h100").join(model);
    assert!(
        dir.join("mlp.csv").is_file(),
        "{} missing; set CAPSIM_GPU_PROFILES",
        dir.display()
    );
    dir
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The median (%) on the `all` line that follows the first line starting with `heading` in
/// `stdout`.
fn median_after(stdout: &str, heading: &str) -> f64 {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with(heading));
    assert!(lines.next().is_some(), "no {heading:?} in:\n{stdout}");
    let all = lines
        .find(|l| l.trim_start().starts_with("all "))
        .unwrap_or_else(|| panic!("no all line after {heading:?}:\n{stdout}"));
    let fields: Vec<&str> = all.split_whitespace().collect();
    fields[2]
        .trim_end_matches('%')
        .parse()
        .unwrap_or_else(|_| panic!("median in {all:?}"))
}

#[test]
fn calibrated_on_h100_llama_2_7b_the_roofline_predicts_34b_and_70b_within_10_percent_median() {
    let source = vidur_h100("meta-llama/Llama-2-7b-hf");
    let targets = [
        (
            "codellama/CodeLlama-34b-Instruct-hf",
            vidur_h100("codellama/CodeLlama-34b-Instruct-hf"),
        ),
        (
            "meta-llama/Llama-2-70b-hf",
            vidur_h100("meta-llama/Llama-2-70b-hf"),
        ),
    ];
    let out = capsim(&[
        "calibrate",
        "--operators",
        path(&source),
        "--check",
        path(&targets[0].1),
        "--check",
        path(&targets[1].1),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(stdout.contains("GEMM: launch"), "{stdout}");
    for (model, _) in targets {
        let every_tp = median_after(&stdout, &format!("error predicting h100 {model}, every tp"));
        assert!(
            every_tp <= TRANSFER_MEDIAN_PERCENT,
            "{model}, every tp: median {every_tp}% > {TRANSFER_MEDIAN_PERCENT}%"
        );
        // tp 8 alone lands near 11% (docs/step-time.md); the lower degrees each within 10%.
        for tp in [1, 2, 4] {
            let median = median_after(&stdout, &format!("error predicting h100 {model} tp{tp} "));
            assert!(
                median <= TRANSFER_MEDIAN_PERCENT,
                "{model} tp{tp}: median {median}% > {TRANSFER_MEDIAN_PERCENT}%"
            );
        }
    }
}

#[test]
fn a_folder_without_an_operator_table_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = capsim(&["calibrate", "--operators", path(dir.path())]);
    assert_user_error(&out, &["mlp.csv", "not an operator table"]);
}

#[test]
fn a_tensor_parallel_degree_the_table_lacks_is_refused_listing_those_it_has() {
    let source = vidur_h100("meta-llama/Llama-2-7b-hf");
    let out = capsim(&[
        "calibrate",
        "--operators",
        path(&source),
        "--tensor-parallel",
        "3",
    ]);
    assert_user_error(
        &out,
        &["mlp.csv", "num_tensor_parallel_workers = 3", "1, 2, 4, 8"],
    );
}

#[test]
fn an_unknown_hardware_name_is_refused_listing_the_presets() {
    let source = vidur_h100("meta-llama/Llama-2-7b-hf");
    let out = capsim(&[
        "calibrate",
        "--operators",
        path(&source),
        "--hardware",
        "v100",
    ]);
    assert_user_error(&out, &["\"v100\"", "h100, h200, a100"]);
}

#[test]
fn without_operators_an_onnx_calibration_still_needs_its_out_file() {
    let out = capsim(&["calibrate", "--model", "traces/models/text_classifier.onnx"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let message = common::stderr(&out);
    assert!(message.contains("--out"), "{message}");
}

#[test]
fn an_out_file_with_operators_is_refused_since_nothing_is_written() {
    let source = vidur_h100("meta-llama/Llama-2-7b-hf");
    let out = capsim(&["calibrate", "--operators", path(&source), "-o", "c.json"]);
    assert_user_error(
        &out,
        &["--out c.json with --operators", "nothing is written"],
    );
}

#[test]
fn a_model_config_with_operators_is_refused_until_it_is_read() {
    let source = vidur_h100("meta-llama/Llama-2-7b-hf");
    let out = capsim(&[
        "calibrate",
        "--operators",
        path(&source),
        "--model",
        "config.json",
    ]);
    assert_user_error(&out, &["--model with --operators", "leave --model out"]);
}
