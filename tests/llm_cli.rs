//! End-to-end tests of continuous batching through the command: `capsim simulate` writes the
//! token metrics, and `capsim plan` sizes an LLM fleet under TTFT and TPOT objectives.

mod common;

use common::{assert_user_error, capsim, repo, text};

#[test]
fn simulate_llm_writes_token_metrics_and_llm_columns() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let scenario = repo("scenarios/llm-8b-h200.toml");
    let trace = repo("traces/azure-code.parquet");
    let result = capsim(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--set",
        "kv_cache.num_gpu_blocks=40000",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(result.status.success(), "{}", text(&result));
    let stdout = String::from_utf8_lossy(&result.stdout);
    assert!(
        stdout.contains("ttft ms") && stdout.contains("steps "),
        "{stdout}"
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    for key in ["ttft", "tpot", "itl", "normalized"] {
        assert!(
            summary["latency_ms"][key]["p99_ms"].as_f64().is_some(),
            "latency_ms.{key}: {summary}"
        );
    }
    assert_eq!(summary["llm"]["kv_blocks_total"], 40000);
    assert!(
        summary["goodput_rps"].as_f64().is_some(),
        "joint SLO goodput"
    );
    assert_eq!(summary["requests"]["completed"], 8819);
    let requests = std::fs::read(out.join("requests.parquet")).unwrap();
    let timeseries = std::fs::read(out.join("timeseries.parquet")).unwrap();
    for column in ["first_token_ns", "ttft_ns", "tpot_ns"] {
        assert!(
            requests
                .windows(column.len())
                .any(|w| w == column.as_bytes()),
            "requests.parquet has {column}"
        );
    }
    for column in ["running", "waiting", "kv_utilization"] {
        assert!(
            timeseries
                .windows(column.len())
                .any(|w| w == column.as_bytes()),
            "timeseries.parquet has {column}"
        );
    }
}

#[test]
fn plan_sizes_h200_replicas_for_azure_code_under_ttft_and_tpot_objectives() {
    let scenario = repo("scenarios/llm-8b-h200.toml");
    let trace = repo("traces/azure-code.parquet");
    let output = capsim(&[
        "plan",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        "ttft.p99<=2s,tpot.p99<=100ms",
        "--grid",
        "instances=3..5",
    ]);
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Azure code's bursts (60 s peak 12 req/s of 2k-token prompts) need 4 replicas at 1x.
    assert!(stdout.contains("plan: instances=4"), "{}", text(&output));
}

#[test]
fn continuous_scenario_with_a_service_table_is_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    let text_in = std::fs::read_to_string(repo("scenarios/llm-8b-h200.toml")).unwrap()
        + "\n[service]\nkind = \"constant\"\ntime = \"5ms\"\n";
    std::fs::write(&path, text_in).unwrap();
    let trace = repo("traces/azure-code.parquet");
    let output = capsim(&[
        "simulate",
        "--scenario",
        path.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--limit",
        "10",
        "-o",
        dir.path().join("out").to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`service`"), "{stderr}");
}

#[test]
fn live_replay_and_validate_refuse_a_continuous_pool_and_say_what_to_use() {
    let scenario = repo("scenarios/llm-8b-h200.toml");
    let trace = repo("traces/azure-conv.parquet");
    let model = repo("traces/models/text_classifier.onnx");
    let common = [
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
    ];
    let mut replay = vec!["replay", "--live", "-o", "/nonexistent/never-written"];
    replay.extend(common);
    let mut validate = vec!["validate", "--profile", "/nonexistent/profile.json"];
    validate.extend(common);
    for args in [replay, validate] {
        let output = capsim(&args);
        assert_user_error(
            &output,
            &["batcher.kind = \"continuous\"", "capsim simulate"],
        );
    }
}

/// Simulates 300 requests of the Azure code trace through a Mixtral-8x7B roofline on two H200s
/// whose model is `model` (a preset or a path relative to the scenario, with the shipped config
/// copied beside it), in `dir`; returns the run's summary.
fn simulate_mixtral(dir: &std::path::Path, model: &str) -> serde_json::Value {
    let config = "models/mistralai/Mixtral-8x7B-v0.1.json";
    std::fs::create_dir_all(dir.join("models/mistralai")).unwrap();
    std::fs::copy(repo(config), dir.join(config)).unwrap();
    let scenario = dir.join("moe.toml");
    std::fs::write(
        &scenario,
        format!(
            "name = \"moe\"\n[batcher]\nkind = \"continuous\"\nstep_overhead = \"2ms\"\n\
             [step_time]\nkind = \"roofline\"\nmodel = \"{model}\"\nhardware = \"h200\"\n\
             tensor_parallel = 2\n"
        ),
    )
    .unwrap();
    let out = dir.join("out");
    let result = capsim(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        repo("traces/azure-code.parquet").to_str().unwrap(),
        "--limit",
        "300",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(result.status.success(), "{}", text(&result));
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn a_model_config_path_simulates_as_its_preset_and_a_bad_one_exits_2_naming_key_and_file() {
    let by_path_dir = tempfile::tempdir().unwrap();
    let by_name_dir = tempfile::tempdir().unwrap();
    let by_path = simulate_mixtral(
        by_path_dir.path(),
        "models/mistralai/Mixtral-8x7B-v0.1.json",
    );
    let by_name = simulate_mixtral(by_name_dir.path(), "mixtral-8x7b");
    assert_eq!(by_path["requests"]["completed"], 300, "{by_path}");
    for key in ["latency_ms", "llm"] {
        assert_eq!(by_path[key], by_name[key], "{key}");
    }
    assert!(
        by_path["llm"]["kv_blocks_total"].as_u64().unwrap() > 10_000,
        "the KV cache is sized from the config: {by_path}"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.json"),
        "{\"num_hidden_layers\": 32, \"hidden_size\": 4096}",
    )
    .unwrap();
    let scenario = dir.path().join("bad.toml");
    std::fs::write(
        &scenario,
        "[batcher]\nkind = \"continuous\"\n[step_time]\nkind = \"roofline\"\n\
         model = \"bad.json\"\nhardware = \"h200\"\n",
    )
    .unwrap();
    let output = capsim(&[
        "simulate",
        "--scenario",
        scenario.to_str().unwrap(),
        "--trace",
        repo("traces/azure-code.parquet").to_str().unwrap(),
        "--limit",
        "10",
        "-o",
        dir.path().join("out").to_str().unwrap(),
    ]);
    assert_user_error(
        &output,
        &[
            "step_time.model",
            "bad.json",
            "\"intermediate_size\" is missing",
        ],
    );
}
