//! End-to-end tests of `capsim calibrate --decoder`: a CI-sized calibration of the shipped tiny
//! GPT-style decoder on the CPU provider, loaded back as a `[step_time] kind = "profile"`, and
//! the errors a user meets. They need ONNX Runtime's library, which `scripts/setup.sh` installs
//! into the project's `.venv` (CI runs it before the tests).

mod common;

use std::path::PathBuf;
use std::process::Command;

use capsim_sim::rng::{Component, stream};
use capsim_sim::timing::step_profile::{ProfileStepTime, StepProfile};
use capsim_sim::timing::step_time::{StepBatch, StepTime};
use common::{assert_user_error, capsim};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tiny_gpt() -> String {
    root()
        .join("traces/models/tiny_gpt.onnx")
        .to_str()
        .expect("utf-8 path")
        .to_string()
}

const SHORT: [&str; 10] = [
    "--ep",
    "cpu",
    "--threads",
    "1",
    "--warmup",
    "2",
    "--iters",
    "30",
    "--min-iters",
    "20",
];

#[test]
fn decoder_calibration_of_the_tiny_gpt_loads_as_a_step_time_profile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("profiles/tiny_gpt.cpu.json");
    let model = tiny_gpt();
    let mut args = vec![
        "calibrate",
        "--model",
        &model,
        "--decoder",
        "--prefill",
        "16,64",
        "--decode-batch",
        "1,4",
        "--context",
        "32,128",
        "-o",
        out.to_str().expect("utf-8 path"),
    ];
    args.extend(SHORT);
    let output = capsim(&args);
    assert!(
        output.status.success(),
        "calibrate --decoder failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    let profile = StepProfile::read(&out).expect("a valid step profile");
    assert_eq!(
        profile.prefill.iter().map(|p| p.tokens).collect::<Vec<_>>(),
        [16, 64]
    );
    let decode: Vec<(u32, u32)> = profile
        .decode
        .iter()
        .map(|p| (p.batch, p.context))
        .collect();
    assert_eq!(decode, [(1, 32), (4, 32), (1, 128), (4, 128)]);
    assert_eq!(
        (
            profile.decoder.layers,
            profile.decoder.kv_heads,
            profile.decoder.head_dim
        ),
        (2, 4, 16)
    );
    assert_eq!(
        profile.settings.vocab, 512,
        "token ids below the model's vocabulary"
    );
    assert_eq!(profile.environment.execution_provider, "cpu");
    for p in &profile.prefill {
        assert!(p.iterations >= 20 && p.latency_mean_ns > 0.0, "{p:?}");
    }

    let model = ProfileStepTime::from_file(&dir.path().join("profiles/tiny_gpt.cpu.json"))
        .expect("the profile builds a step-time model");
    let decode_step = StepBatch {
        decode_seqs: 4,
        decode_kv_tokens: 4 * 128,
        ..StepBatch::default()
    };
    let measured = profile.decode[3].latency_mean_ns;
    let mean = model.mean_ns(&decode_step);
    assert!(
        (mean - measured).abs() <= 1e-6 * measured || mean >= measured,
        "grid point mean {mean} below its measurement {measured}"
    );
    assert!(!model.is_extrapolated(&decode_step));
    let long = StepBatch {
        prefill_tokens: 1000,
        prefill_attention_tokens2: 1_000_000,
        prefill_seqs: 1,
        ..StepBatch::default()
    };
    assert!(model.is_extrapolated(&long));
    let mut rng = stream(3, Component::Execution, 0);
    let draws: Vec<u64> = (0..200)
        .map(|_| model.sample_ns(&decode_step, &mut rng))
        .collect();
    let (lo, hi) = (
        *draws.iter().min().expect("draws"),
        *draws.iter().max().expect("draws"),
    );
    // Quantiles are made monotone over batch and context, so the largest point's draws lie
    // between its own measured minimum and the largest maximum of the points below it.
    let floor = profile.decode[3].latency_ns[0];
    let ceiling = profile
        .decode
        .iter()
        .filter_map(|p| p.latency_ns.last().copied())
        .max()
        .expect("points");
    assert!(
        lo >= floor && hi <= ceiling,
        "draws {lo}..{hi} outside the measured {floor}..{ceiling}"
    );
}

#[test]
fn decoder_calibration_of_a_model_without_a_kv_cache_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("p.json");
    let classifier = root().join("traces/models/text_classifier.onnx");
    let mut args = vec![
        "calibrate",
        "--model",
        classifier.to_str().expect("utf-8 path"),
        "--decoder",
        "-o",
        out.to_str().expect("utf-8 path"),
    ];
    args.extend(SHORT);
    assert_user_error(
        &capsim(&args),
        &["not a decoder with a KV cache", "without --decoder"],
    );
    assert!(!out.exists());
}

#[test]
fn decoder_calibration_refuses_a_zero_context() {
    let out = root().join("target/never-written.json");
    let model = tiny_gpt();
    let mut args = vec![
        "calibrate",
        "--model",
        &model,
        "--decoder",
        "--context",
        "0,64",
        "-o",
        out.to_str().expect("utf-8 path"),
    ];
    args.extend(SHORT);
    assert_user_error(&capsim(&args), &["--context"]);
}

#[test]
fn make_models_rebuilds_the_shipped_models_byte_identically_and_checks_the_kv_cache() {
    let python = root().join(".venv/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: run scripts/setup.sh",
        python.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(&python)
        .arg(root().join("scripts/make_models.py"))
        .arg("--out")
        .arg(dir.path())
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "make_models.py failed (the tiny_gpt KV-cache check included): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("prefill 24 + 1 decode step == prefill 25"),
        "{stdout}"
    );
    for name in [
        "text_classifier.onnx",
        "image_cnn.onnx",
        "static_batch.onnx",
        "tiny_gpt.onnx",
    ] {
        let rebuilt = std::fs::read(dir.path().join(name)).expect("rebuilt model");
        let shipped = std::fs::read(root().join("traces/models").join(name)).expect("shipped");
        assert!(
            rebuilt == shipped,
            "{name}: rebuilt {} bytes differ from the shipped {} bytes",
            rebuilt.len(),
            shipped.len()
        );
    }
}

#[test]
fn batch_calibration_of_a_decoder_points_to_the_decoder_flag() {
    let out = root().join("target/never-written.json");
    let model = tiny_gpt();
    let mut args = vec![
        "calibrate",
        "--model",
        &model,
        "--dim",
        "seq=16,32",
        "-o",
        out.to_str().expect("utf-8 path"),
    ];
    args.extend(SHORT);
    assert_user_error(&capsim(&args), &["--decoder"]);
}

#[test]
fn the_shipped_cpu_step_profile_loads_and_covers_its_grid() {
    let model = ProfileStepTime::from_file(&root().join("traces/profiles/tiny_gpt.cpu.json"))
        .expect("the shipped step profile builds");
    let profile =
        StepProfile::read(&root().join("traces/profiles/tiny_gpt.cpu.json")).expect("valid");
    assert_eq!(profile.decoder.kv_bytes_per_token(), 2 * 2 * 4 * 16 * 4);
    let inside = StepBatch {
        prefill_tokens: 500,
        prefill_attention_tokens2: 250_000,
        prefill_seqs: 1,
        decode_seqs: 32,
        decode_kv_tokens: 32 * 500,
        ..StepBatch::default()
    };
    assert!(!model.is_extrapolated(&inside));
    assert!(model.mean_ns(&inside) > 0.0);
}
