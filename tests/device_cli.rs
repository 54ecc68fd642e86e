//! The GPU device script's CPU dry run (`scripts/device/measure_operators.py --dry-run`) writes
//! operator bundles that `capsim calibrate --operators DIR --model M` and a `[step_time] kind =
//! "operators"` scenario accept: a dense model and a mixture of experts, at two tensor-parallel
//! degrees. Its plan for an H200 (`--plan`, no PyTorch needed) covers every shipped config.
//!
//! The dry run needs PyTorch, which CI's `.venv` does not hold (the wheel and its CUDA libraries
//! are gigabytes). The test runs it with `$CAPSIM_TORCH_PYTHON` when set, else the project's
//! `.venv/bin/python`, and is skipped, saying so on stderr, only when that Python cannot import
//! torch. The check that what the device call carries fits and reaches for no registry is
//! `scripts/device/check.py`, which CI runs.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{capsim, repo, text};

/// A small dense model (grouped KV heads, as Llama's) and a small mixture of experts (Qwen3's
/// layout: q/k norms, 8 experts, 2 per token), widths divisible by 2.
const TINY_MODELS: [(&str, &str); 2] = [
    (
        "tiny-llama",
        r#"{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
            "vocab_size": 256, "num_hidden_layers": 2, "rms_norm_eps": 1e-5}"#,
    ),
    (
        "tiny-moe",
        r#"{"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128,
            "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
            "vocab_size": 256, "num_hidden_layers": 2}"#,
    ),
];

/// A Python that imports torch, or `None` (the reason printed) when there is none.
fn torch_python() -> Option<PathBuf> {
    let python = std::env::var_os("CAPSIM_TORCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo(".venv/bin/python"));
    let imports = Command::new(&python)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !imports {
        eprintln!(
            "SKIPPED: {} cannot import torch (CI's .venv has none); set CAPSIM_TORCH_PYTHON to a \
             Python with PyTorch to run the device script's dry run",
            python.display()
        );
        return None;
    }
    Some(python)
}

/// Runs the dry run for the tiny models into `dir/out`; returns each model's config and bundle.
fn dry_run(python: &Path, dir: &Path) -> Vec<(PathBuf, PathBuf)> {
    let mut args = vec![
        repo("scripts/device/measure_operators.py")
            .to_string_lossy()
            .into_owned(),
        "--dry-run".into(),
        "--out".into(),
        dir.join("out").to_string_lossy().into_owned(),
    ];
    let mut models = Vec::new();
    for (name, json) in TINY_MODELS {
        let config = dir.join(format!("{name}.json"));
        std::fs::write(&config, json).unwrap();
        args.extend(["--model".into(), config.to_string_lossy().into_owned()]);
        let bundle = dir.join("out/CPU").join(name).join("fp32-dry-run");
        models.push((config, bundle));
    }
    let run = Command::new(python).args(&args).output().unwrap();
    assert!(run.status.success(), "dry run failed: {}", text(&run));
    models
}

fn path(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[test]
fn dry_run_bundles_are_read_by_calibrate_and_by_an_operators_scenario() {
    let Some(python) = torch_python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let models = dry_run(&python, dir.path());
    for (config, bundle) in &models {
        for file in ["meta.yaml", "tp1/dense.csv", "tp2/attention.csv"] {
            assert!(
                bundle.join(file).is_file(),
                "{} lacks {file}",
                bundle.display()
            );
        }
        for tp in ["1", "2"] {
            let calibrated = capsim(&[
                "calibrate",
                "--operators",
                path(bundle),
                "--model",
                path(config),
                "--tensor-parallel",
                tp,
                "--hardware",
                "h100",
            ]);
            assert!(calibrated.status.success(), "tp{tp}: {}", text(&calibrated));
            let stdout = String::from_utf8_lossy(&calibrated.stdout);
            assert!(
                stdout.contains("calibrated the per-operator roofline"),
                "{stdout}"
            );
        }
        simulate_with(bundle, config, dir.path());
    }
    let (_, moe_bundle) = &models[1];
    assert!(moe_bundle.join("tp2/moe.csv").is_file(), "no moe.csv");
    let environment = std::fs::read_to_string(dir.path().join("out/CPU/environment.json")).unwrap();
    for key in ["\"torch\"", "\"device_name\"", "\"bundles\""] {
        assert!(environment.contains(key), "environment.json lacks {key}");
    }
}

/// A continuous-batching scenario whose steps are composed from `bundle` at two ranks serves
/// five requests of the shipped trace; every one completes. Two ranks need an all-reduce table:
/// the shipped RTX PRO 6000 pair's stands in (this checks that the bundle is read, not its
/// times).
fn simulate_with(bundle: &Path, config: &Path, dir: &Path) {
    let name = bundle
        .parent()
        .unwrap()
        .file_name()
        .unwrap()
        .to_string_lossy();
    let scenario = dir.join(format!("{name}.toml"));
    std::fs::write(
        &scenario,
        format!(
            "name = \"dry-run-operators\"\ninstances = 1\n\n[batcher]\nkind = \"continuous\"\n\
             max_num_seqs = 4\nmax_num_batched_tokens = 8\nenable_chunked_prefill = true\n\n\
             [kv_cache]\nblock_size = 16\nnum_gpu_blocks = 4000\n\n[step_time]\n\
             kind = \"operators\"\nprofile = {:?}\nmodel = {:?}\ntensor_parallel = 2\n\
             all_reduce = {:?}\n",
            path(bundle),
            path(config),
            path(&repo("traces/profiles/rtxpro6000-2gpu-pcie.all_reduce.csv"))
        ),
    )
    .unwrap();
    let out = dir.join(format!("{name}-run"));
    let run = capsim(&[
        "simulate",
        "--scenario",
        path(&scenario),
        "--trace",
        path(&repo("traces/azure-code.parquet")),
        "--limit",
        "5",
        "-o",
        path(&out),
    ]);
    assert!(run.status.success(), "{name}: {}", text(&run));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(
        summary["requests"]["completed"], 5,
        "{name}: expected 5 completed, summary: {}",
        summary["requests"]
    );
}

/// The shipped configs, as scripts/device/run.sh measures them.
const SHIPPED_CONFIGS: [&str; 6] = [
    "models/meta-llama/Llama-3.1-8B.json",
    "models/Qwen/Qwen3-32B.json",
    "models/mistralai/Mixtral-8x7B-v0.1.json",
    "models/Qwen/Qwen3-30B-A3B-Instruct-2507.json",
    "models/microsoft/Phi-mini-MoE-instruct.json",
    "models/meta-llama/Llama-3.1-70B.json",
];

/// A Python for the parts of the script that need no PyTorch: the project's `.venv`, else
/// `python3`.
fn any_python() -> PathBuf {
    let venv = repo(".venv/bin/python");
    if venv.exists() {
        venv
    } else {
        "python3".into()
    }
}

#[test]
fn plan_on_an_h200_measures_every_shipped_config_at_its_smallest_fitting_degree_and_twice_it() {
    let mut args = vec![
        path(&repo("scripts/device/measure_operators.py")).to_string(),
        "--plan".into(),
        "139".into(),
        "--out".into(),
        "unused".into(),
    ];
    for config in SHIPPED_CONFIGS {
        args.extend(["--model".into(), path(&repo(config)).to_string()]);
    }
    let run = Command::new(any_python()).args(&args).output().unwrap();
    assert!(run.status.success(), "{}", text(&run));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&run.stdout).unwrap();
    let measured: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["model"].as_str().unwrap().to_string(),
                r["tp"].as_u64().unwrap(),
            )
        })
        .collect();
    // BF16 weights within 80% of 139 GiB: 70B (141 GB) needs two ranks, every other model one.
    let expected: Vec<(String, u64)> = [1, 2]
        .iter()
        .flat_map(|&k| {
            SHIPPED_CONFIGS.iter().map(move |c| {
                let id = c.trim_start_matches("models/").trim_end_matches(".json");
                (id.to_string(), if id.ends_with("70B") { 2 * k } else { k })
            })
        })
        .collect();
    assert_eq!(measured, expected, "expected (model, tp) order vs actual");
    for row in &rows {
        let attention = row["attention_points"].as_u64().unwrap();
        assert!(attention >= 1000, "a thin attention grid: {row}");
        let moe = row["moe_points"].as_u64().unwrap();
        let is_moe = ["Mixtral", "A3B", "MoE"]
            .iter()
            .any(|m| row["model"].as_str().unwrap().contains(m));
        assert_eq!(
            moe > 0,
            is_moe,
            "moe.csv points only for a mixture of experts: {row}"
        );
    }
}
