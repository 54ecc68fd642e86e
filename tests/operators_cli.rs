//! End-to-end tests of `capsim calibrate --operators`: the per-operator roofline calibrated on
//! Vidur's H100 Llama-2-7B table (`../shared/gpu-profiles/vidur/`, or under
//! `$CAPSIM_GPU_PROFILES`) predicts its CodeLlama-34B and Llama-2-70B tables (the transfer
//! acceptance of issue 31); calibrated on the shipped RTX PRO 6000 Qwen3-32B bundle's tp1 with
//! `--model`, it predicts its tp2; and the bad-input cases.

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
    assert_user_error(&out, &["mlp.csv", "no operator table here"]);
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
fn an_unknown_hardware_name_is_refused_listing_the_catalogue() {
    let source = vidur_h100("meta-llama/Llama-2-7b-hf");
    let out = capsim(&[
        "calibrate",
        "--operators",
        path(&source),
        "--hardware",
        "v100",
    ]);
    assert_user_error(
        &out,
        &[
            "\"v100\"",
            "not in the hardware catalogue",
            "h100-sxm, h100-pcie, h200",
        ],
    );
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

/// The shipped LLMServingSim bundle of Qwen3-32B on the RTX PRO 6000 (tp 1 and 2).
const QWEN_BUNDLE: &str = "traces/profiles/llmservingsim/RTXPRO6000/Qwen/Qwen3-32B/bf16";

/// The shipped LLMServingSim bundle of Llama-3.1-8B on the RTX 4090 (tp 1).
const LLAMA_BUNDLE: &str = "traces/profiles/llmservingsim/RTX4090/meta-llama/Llama-3.1-8B/bf16";

#[test]
fn calibrated_on_qwen3_32b_tp1_with_its_model_the_roofline_predicts_its_tp2_within_10_percent_median()
 {
    let out = capsim(&[
        "calibrate",
        "--operators",
        QWEN_BUNDLE,
        "--model",
        "qwen3-32b",
        "--check",
        QWEN_BUNDLE,
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(stdout.contains("with the shape of Qwen3-32B"), "{stdout}");
    assert!(stdout.contains("rotary_emb"), "{stdout}");
    let name = "error predicting NVIDIA RTX PRO 6000 Blackwell Server Edition Qwen/Qwen3-32B";
    assert!(stdout.contains(&format!("{name} tp1 (fitted)")), "{stdout}");
    let tp2 = median_after(&stdout, &format!("{name} tp2 (prediction)"));
    assert!(
        tp2 <= TRANSFER_MEDIAN_PERCENT,
        "tp2: median {tp2}% > {TRANSFER_MEDIAN_PERCENT}%"
    );
}

#[test]
fn a_model_config_path_gives_the_same_calibration_as_its_preset_name() {
    let by_name = capsim(&[
        "calibrate",
        "--operators",
        LLAMA_BUNDLE,
        "--model",
        "llama-3.1-8b",
    ]);
    let by_path = capsim(&[
        "calibrate",
        "--operators",
        LLAMA_BUNDLE,
        "--model",
        "models/meta-llama/Llama-3.1-8B.json",
        "--hardware",
        "rtx4090",
    ]);
    assert!(by_name.status.success(), "{}", text(&by_name));
    assert!(by_path.status.success(), "{}", text(&by_path));
    assert_eq!(
        String::from_utf8_lossy(&by_name.stdout),
        String::from_utf8_lossy(&by_path.stdout)
    );
}

#[test]
fn a_bundle_without_a_model_is_refused_asking_for_one() {
    let out = capsim(&["calibrate", "--operators", QWEN_BUNDLE]);
    assert_user_error(
        &out,
        &[
            "Qwen3-32B/bf16",
            "does not record it",
            "give --model",
            "qwen3-32b",
        ],
    );
}

#[test]
fn a_model_other_than_the_bundles_is_refused_naming_the_bundles_model() {
    let out = capsim(&[
        "calibrate",
        "--operators",
        QWEN_BUNDLE,
        "--model",
        "llama-3.1-8b",
    ]);
    assert_user_error(
        &out,
        &[
            "meta.yaml: row 25",
            "hf_overrides.intermediate_size",
            "Llama-3.1-8B (intermediate_size 14336",
            "give the model the bundle profiled (Qwen/Qwen3-32B)",
        ],
    );
}

#[test]
fn an_unknown_model_name_is_refused_listing_the_presets() {
    let out = capsim(&["calibrate", "--operators", QWEN_BUNDLE, "--model", "gpt-9"]);
    assert_user_error(&out, &["--model \"gpt-9\"", "qwen3-32b", "config.json"]);
    let out = capsim(&[
        "calibrate",
        "--operators",
        QWEN_BUNDLE,
        "--model",
        "no/such.json",
    ]);
    assert_user_error(&out, &["no/such.json"]);
}

#[test]
fn checking_a_bundle_of_another_model_is_refused_before_calibrating() {
    let out = capsim(&[
        "calibrate",
        "--operators",
        QWEN_BUNDLE,
        "--model",
        "qwen3-32b",
        "--check",
        LLAMA_BUNDLE,
    ]);
    assert_user_error(
        &out,
        &[
            "--check",
            "meta-llama/Llama-3.1-8B",
            "Qwen/Qwen3-32B",
            "same model",
        ],
    );
    assert!(out.stdout.is_empty(), "{}", text(&out));
}

#[test]
fn a_model_that_disagrees_with_a_vidur_tables_shape_is_refused_and_one_that_agrees_is_used() {
    let source = vidur_h100("meta-llama/Llama-2-7b-hf");
    let out = capsim(&[
        "calibrate",
        "--operators",
        path(&source),
        "--model",
        "qwen3-32b",
    ]);
    assert_user_error(
        &out,
        &[
            "--model Qwen3-32B",
            "hidden 5120",
            "hidden 4096",
            "leave --model out",
        ],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("llama-2-7b.json");
    std::fs::write(
        &config,
        r#"{"num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 11008,
            "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32768,
            "model_type": "llama"}"#,
    )
    .expect("write config");
    let agreed = capsim(&[
        "calibrate",
        "--operators",
        path(&source),
        "--model",
        path(&config),
    ]);
    let alone = capsim(&["calibrate", "--operators", path(&source)]);
    assert!(agreed.status.success(), "{}", text(&agreed));
    let agreed = String::from_utf8_lossy(&agreed.stdout);
    let alone = String::from_utf8_lossy(&alone.stdout);
    assert_eq!(
        agreed.lines().skip(1).collect::<Vec<_>>(),
        alone.lines().skip(1).collect::<Vec<_>>(),
        "the table's own shape is used either way"
    );
}
