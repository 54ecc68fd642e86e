//! End-to-end tests of `capsim calibrate`: a CI-sized calibration of the shipped classifier on
//! the CPU provider, and each user error with its fix. They need ONNX Runtime's library, which
//! `scripts/setup.sh` installs into the project's `.venv` (CI runs it before the tests).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use capsim_sim::timing::profile::{Profile, ProfileServiceTime};
use capsim_sim::{BatchShape, ServiceTime};
use common::{assert_user_error, capsim, stderr};

const CAPSIM: &str = env!("CARGO_BIN_EXE_capsim");

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn model(name: &str) -> PathBuf {
    root().join("traces/models").join(name)
}

#[test]
fn cpu_calibration_of_the_shipped_classifier_writes_a_valid_profile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("profile.json");
    let out_arg = out.to_str().expect("utf-8 path");
    let classifier = model("text_classifier.onnx");
    let output = capsim(&[
        "calibrate",
        "--model",
        classifier.to_str().expect("utf-8 path"),
        "--ep",
        "cpu",
        "--batch",
        "1,4",
        "--dim",
        "seq=16,64",
        "--warmup",
        "3",
        "--iters",
        "40",
        "--min-iters",
        "20",
        "--threads",
        "1",
        "-o",
        out_arg,
    ]);
    assert!(
        output.status.success(),
        "calibrate failed: {}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains("execution provider: cpu"),
        "{}",
        stderr(&output)
    );

    let profile = Profile::read(&out).expect("the profile reads back and validates");
    let fit_png = dir.path().join("profile.fit.png");
    let png = std::fs::read(&fit_png).expect("the fit plot is drawn beside the profile");
    assert!(
        png.len() > 1000 && png.starts_with(b"\x89PNG"),
        "{} is not a PNG of a plot ({} bytes)",
        fit_png.display(),
        png.len()
    );
    assert_eq!(profile.environment.execution_provider, "cpu");
    assert!(
        profile.environment.ort_version.starts_with("1.31"),
        "{}",
        profile.environment.ort_version
    );
    assert_eq!(profile.environment.intra_threads, 1);
    assert_eq!(profile.grid.length_dim.as_deref(), Some("seq"));
    assert_eq!(profile.grid.batch_sizes, vec![1, 4]);
    assert_eq!(profile.grid.lengths, vec![16, 64]);
    assert_eq!(profile.points.len(), 4);
    for point in &profile.points {
        assert!((20..=40).contains(&point.iterations), "{point:?}");
        assert!(
            point.latency_ns[0] > 0 && point.input_build_mean_ns > 0.0,
            "{point:?}"
        );
    }
    let at = |batch: u32, length: u32| {
        profile
            .points
            .iter()
            .find(|p| p.batch_size == batch && p.length == Some(length))
            .map(|p| p.latency_ns[7]) // the median
            .expect("grid point")
    };
    // Sixteen times the tokens must take longer than one short request.
    assert!(
        at(4, 64) > at(1, 16),
        "p50 at (4, 64) = {} <= p50 at (1, 16) = {}",
        at(4, 64),
        at(1, 16)
    );

    // The idle slowdown, measured at the smallest and largest batch after each default wait.
    let idle = profile
        .idle_slowdown
        .as_ref()
        .expect("calibrate measures the idle slowdown by default");
    assert_eq!(
        idle.gaps_ns,
        vec![
            0, 500_000, 1_000_000, 2_000_000, 4_000_000, 8_000_000, 16_000_000
        ]
    );
    let measured_at: Vec<(u32, Option<u32>)> = idle
        .points
        .iter()
        .map(|p| (p.batch_size, p.length))
        .collect();
    assert_eq!(measured_at, vec![(1, Some(64)), (4, Some(64))], "{idle:?}");
    assert!(
        idle.points
            .iter()
            .all(|p| p.median_ns.len() == 7 && p.median_ns.iter().all(|t| *t > 0.0)),
        "{idle:?}"
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("run time after an idle wait, batch 4"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );

    let model = ProfileServiceTime::new(&profile);
    let shape = |size, max_input_tokens| BatchShape {
        size,
        max_input_tokens,
        total_input_tokens: u64::from(size * max_input_tokens),
        idle_ns: 0,
    };
    assert!(model.mean_ns(&shape(2, 40)) <= model.mean_ns(&shape(3, 40)));
    assert!(
        model.mean_ns(&shape(4, 64)) < model.mean_ns(&shape(8, 64)),
        "beyond the grid must grow"
    );
}

#[test]
fn auto_without_a_gpu_says_it_uses_the_cpu_and_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("p.json");
    let output = capsim(&[
        "calibrate",
        "--model",
        model("image_cnn.onnx").to_str().expect("utf-8"),
        "--ep",
        "auto",
        "--batch",
        "1,2",
        "--warmup",
        "1",
        "--iters",
        "10",
        "--min-iters",
        "10",
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let message = stderr(&output);
    assert!(
        message.contains("execution provider: cpu (CUDA not used: "),
        "{message}"
    );
    let profile = Profile::read(&out).expect("profile");
    assert_eq!(
        profile.grid.length_dim, None,
        "the CNN has no length dimension"
    );
    assert_eq!(profile.points.len(), 2);
}

#[test]
fn cuda_requested_without_a_usable_cuda_provider_fails_with_the_fix() {
    let output = capsim(&[
        "calibrate",
        "--model",
        model("text_classifier.onnx").to_str().expect("utf-8"),
        "--ep",
        "cuda",
        "--dim",
        "seq=16",
        "-o",
        "/dev/null",
    ]);
    assert_user_error(
        &output,
        &[
            "--ep cuda",
            "CUDA provider",
            "onnxruntime-gpu==1.31.1",
            "--ep cpu",
        ],
    );
}

#[test]
fn a_missing_model_file_is_named_with_the_fix() {
    let output = capsim(&[
        "calibrate",
        "--model",
        "traces/models/absent.onnx",
        "-o",
        "/dev/null",
    ]);
    assert_user_error(
        &output,
        &["traces/models/absent.onnx does not exist", "traces/models/"],
    );
}

#[test]
fn a_model_without_a_dynamic_batch_dimension_is_refused_with_the_fix() {
    let output = capsim(&[
        "calibrate",
        "--model",
        "traces/models/static_batch.onnx",
        "-o",
        "/dev/null",
    ]);
    assert_user_error(
        &output,
        &[
            "input `features` has shape [1, 8]",
            "dynamic batch dimension",
        ],
    );
}

#[test]
fn a_wrong_dim_name_lists_the_models_dimensions() {
    let output = capsim(&[
        "calibrate",
        "--model",
        "traces/models/text_classifier.onnx",
        "--dim",
        "sequence=16,32",
        "-o",
        "/dev/null",
    ]);
    assert_user_error(
        &output,
        &[
            "--dim sequence",
            "no dynamic dimension named `sequence`",
            "are: seq",
        ],
    );
}

#[test]
fn a_missing_library_says_how_to_install_one() {
    // A copy of the binary outside the project, with no Python on PATH: nothing to find.
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("capsim");
    if std::fs::hard_link(CAPSIM, &exe).is_err() {
        std::fs::copy(CAPSIM, &exe).expect("copy capsim");
    }
    let empty_path = dir.path().join("empty-bin");
    std::fs::create_dir(&empty_path).expect("mkdir");
    let output = Command::new(&exe)
        .args(["calibrate", "--model"])
        .arg(model("text_classifier.onnx"))
        .args(["--dim", "seq=16", "-o", "/dev/null"])
        .current_dir(dir.path())
        .env_remove("ORT_DYLIB_PATH")
        .env("PATH", &empty_path)
        .output()
        .expect("capsim runs");
    assert_user_error(
        &output,
        &[
            "shared library was not found",
            "scripts/setup.sh",
            "pip install onnxruntime==1.31.1",
            "--ort-lib",
        ],
    );

    let named = Command::new(&exe)
        .args(["calibrate", "--model"])
        .arg(model("text_classifier.onnx"))
        .args(["-o", "/dev/null"])
        .current_dir(dir.path())
        .env(
            "ORT_DYLIB_PATH",
            Path::new("/nonexistent/libonnxruntime.so.1.31.1"),
        )
        .output()
        .expect("capsim runs");
    assert_user_error(
        &named,
        &["/nonexistent/libonnxruntime.so.1.31.1", "ORT_DYLIB_PATH"],
    );
}

#[test]
fn simulate_replays_the_azure_conv_trace_through_a_calibrated_profile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let profile = dir.path().join("classifier.json");
    let calibrated = capsim(&[
        "calibrate",
        "--model",
        model("text_classifier.onnx").to_str().expect("utf-8"),
        "--ep",
        "cpu",
        "--batch",
        "1,4",
        "--dim",
        "seq=16,64",
        "--warmup",
        "2",
        "--iters",
        "20",
        "--min-iters",
        "20",
        "--threads",
        "1",
        "-o",
        profile.to_str().expect("utf-8"),
    ]);
    assert!(calibrated.status.success(), "{}", stderr(&calibrated));
    // A batched scenario whose service times come from the profile (path relative to it).
    let scenario = dir.path().join("scenario.toml");
    std::fs::write(
        &scenario,
        "instances = 1\n[batcher]\nmax_batch_size = 4\nmax_queue_delay = \"2ms\"\n\
         [service]\nkind = \"profile\"\npath = \"classifier.json\"\n",
    )
    .expect("write scenario");
    let out = dir.path().join("out");
    let simulated = capsim(&[
        "simulate",
        "--scenario",
        scenario.to_str().expect("utf-8"),
        "traces/azure-conv.parquet",
        "--limit",
        "2000",
        "--seed",
        "3",
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(
        simulated.status.success(),
        "simulate failed: {}",
        stderr(&simulated)
    );
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("summary.json"),
    )
    .expect("summary is JSON");
    assert_eq!(summary["requests"]["total"], 2000, "{summary}");
    assert_eq!(
        summary["requests"]["completed"], 2000,
        "every request completes: {summary}"
    );
    assert!(
        summary["batches"].as_u64().is_some_and(|b| b > 0),
        "{summary}"
    );
}

#[test]
fn live_replay_answers_every_request_and_writes_the_simulators_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = dir.path().join("live.toml");
    std::fs::write(
        &scenario,
        "instances = 1\n[execution]\ninstance_count = 2\n[batcher]\nmax_batch_size = 4\n\
         max_queue_delay = \"1ms\"\n[service]\nkind = \"constant\"\ntime = \"1ms\"\n",
    )
    .expect("write scenario");
    let out = dir.path().join("live");
    let output = capsim(&[
        "replay",
        "--live",
        "--scenario",
        scenario.to_str().expect("utf-8"),
        "traces/azure-conv.parquet",
        "--limit",
        "150",
        "--rate-scale",
        "40",
        "--model",
        "traces/models/text_classifier.onnx",
        "--max-length",
        "32",
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(
        output.status.success(),
        "replay failed: {}",
        stderr(&output)
    );
    for file in ["summary.json", "requests.parquet", "timeseries.parquet"] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary"))
            .expect("JSON");
    assert_eq!(summary["requests"]["total"], 150, "{summary}");
    assert_eq!(summary["requests"]["completed"], 150, "{summary}");
    let sizes = summary["batch_size_counts"]
        .as_array()
        .expect("batch sizes");
    assert!(
        sizes.len() <= 5,
        "a batch exceeded max_batch_size 4: {sizes:?}"
    );
    let utilization = summary["utilization"].as_array().expect("utilization");
    assert_eq!(
        utilization.len(),
        2,
        "one entry per model instance: {utilization:?}"
    );
}

#[test]
fn replay_without_live_says_it_is_the_only_mode() {
    let output = capsim(&[
        "replay",
        "--scenario",
        "x.toml",
        "traces/azure-conv.parquet",
        "--model",
        "m.onnx",
        "-o",
        "/dev/null",
    ]);
    assert_user_error(&output, &["--live"]);
}

#[test]
fn validate_compares_simulated_and_measured_figures_at_each_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (profile, scenario) = common::quick_profile_and_scenario(dir.path());
    let output = common::validate_quick(
        &scenario,
        &profile,
        &["traces/azure-conv.parquet"],
        &dir.path().join("validation"),
    );
    assert!(
        output.status.success(),
        "validate failed: {}",
        stderr(&output)
    );
    // Calibrated back to back without the idle slowdown, served behind a 1 ms
    // max_queue_delay: the command says so.
    assert!(
        stderr(&output).contains("without --idle-curve none")
            && stderr(&output).contains("--idle-gap 1000us"),
        "no idle-gap warning: {}",
        stderr(&output)
    );
    for run in ["simulated", "measured"] {
        let file = dir.path().join(format!("validation/load-30/{run}.parquet"));
        assert!(file.is_file(), "{} missing", file.display());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("calibrated capacity: "), "{text}");
    // The machine's speed around the live run, against the calibration's.
    assert!(
        text.contains("30% machine speed: the reference batch (batch ")
            && text.contains("x its calibrated median time before the live run and "),
        "{text}"
    );
    // The diagnostic run: the profile's times at the level the live batches ran at.
    assert!(
        text.contains("30% with the profile's times x")
            && text.contains("the errors would be: end_to_end p50 "),
        "{text}"
    );
    // The live batches' run times against the profile's, by batch size.
    assert!(
        text.contains("30% median batch run time, live/profile ms, by batch size: ")
            && text.contains(" batches)"),
        "{text}"
    );
    // How many live batches ran in (or past) the profile's tail.
    assert!(
        text.contains("30% live batches in the profile's tail for their shape: ")
            && text.contains("% above its p99 (the simulation: 1%), "),
        "{text}"
    );
    for metric in [
        "throughput rps",
        "end_to_end p50 ms",
        "end_to_end p99 ms",
        "queue p90 ms",
    ] {
        assert!(
            text.contains(&format!("30% {metric}")),
            "no {metric} row: {text}"
        );
    }
    // Both runs carry the same arrivals, so their throughputs agree closely.
    let line = text
        .lines()
        .find(|l| l.contains("throughput rps"))
        .expect("throughput row");
    let error_pct: f64 = line
        .split_whitespace()
        .last()
        .and_then(|e| e.trim_end_matches('%').parse().ok())
        .expect("error column");
    assert!(
        error_pct.abs() < 15.0,
        "throughput error {error_pct}%: {text}"
    );
}

#[test]
fn calibrate_waits_the_idle_gap_before_each_run_and_records_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("gap.json");
    let run = |gap: &str| {
        capsim(&[
            "calibrate",
            "--model",
            "traces/models/text_classifier.onnx",
            "--ep",
            "cpu",
            "--batch",
            "1",
            "--dim",
            "seq=16",
            "--warmup",
            "1",
            "--iters",
            "10",
            "--min-iters",
            "10",
            "--threads",
            "1",
            "--idle-gap",
            gap,
            "-o",
            out.to_str().expect("utf-8"),
        ])
    };
    let output = run("1ms");
    assert!(output.status.success(), "{}", stderr(&output));
    let profile = Profile::read(&out).expect("profile");
    assert_eq!(
        profile.settings.idle_gap_ns, 1_000_000,
        "{:?}",
        profile.settings
    );
    if cfg!(target_os = "linux") {
        // Linux says how long other processes kept the measuring thread off the CPU.
        assert!(
            profile.points.iter().all(|p| p.cpu_wait_mean_ns.is_some()),
            "{:?}",
            profile.points
        );
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(text.contains("waited for a CPU"), "{text}");
    }

    let output = run("5");
    assert_user_error(&output, &["--idle-gap", "5"]);
}

#[test]
fn a_bad_idle_curve_is_refused_with_the_flag_and_an_example() {
    let output = capsim(&[
        "calibrate",
        "--model",
        "traces/models/text_classifier.onnx",
        "--ep",
        "cpu",
        "--idle-curve",
        "0,2ms,fast",
        "-o",
        "/dev/null",
    ]);
    assert_user_error(&output, &["--idle-curve", "fast", "0,1ms,4ms"]);
}

/// `calibrate --endpoint --pool`: an earlier calibration of another deployment, or a file that
/// holds no fitted share, is refused before anything is sent (the URL here answers nothing), with
/// the file named; a file that does not parse names itself too.
#[test]
fn endpoint_pool_refuses_another_deployments_calibration_before_measuring() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = root().join("scenarios/bert-dynamic-batching.toml");
    let base = std::fs::read_to_string(&scenario).expect("the shipped scenario");
    let write = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    // Another batcher (a 5 ms delay), with a share; the same batcher without one; not TOML.
    let other = write(
        "other.toml",
        base.replace("max_queue_delay = \"2ms\"", "max_queue_delay = \"5ms\"")
            .replace("[batcher]", "[batcher]\nmissed_release = 0.1"),
    );
    let bare = write("bare.toml", base.clone());
    let broken = write("broken.toml", "[batcher\n".to_string());
    let out = dir.path().join("fitted.toml");
    let calibrate = |pool: &Path| {
        capsim(&[
            "calibrate",
            "--endpoint",
            "http://127.0.0.1:9",
            "--model",
            "text_classifier",
            "--scenario",
            scenario.to_str().expect("utf-8"),
            "--trace",
            root().join("traces/demo.parquet").to_str().expect("utf-8"),
            "-o",
            out.to_str().expect("utf-8"),
            "--pool",
            pool.to_str().expect("utf-8"),
        ])
    };
    assert_user_error(
        &calibrate(&other),
        &[
            "cannot pool the calibration",
            "other.toml",
            "same deployment",
        ],
    );
    assert_user_error(
        &calibrate(&bare),
        &["bare.toml", "holds no batcher.missed_release"],
    );
    assert_user_error(&calibrate(&broken), &["broken.toml"]);
    assert!(!out.exists(), "nothing written");
}
