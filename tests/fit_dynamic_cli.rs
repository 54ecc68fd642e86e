//! End-to-end tests of `capsim fit` on a dynamic batcher: a simulated affine service time comes
//! back from its requests.parquet, and the logs that cannot give one are refused by name.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use capsim_sim::Scenario;
use capsim_sim::scenario::{LatencySpec, ServiceSpec};
use common::{assert_user_error, capsim, text};

/// A known affine service time: a = 2 ms, b = 0.5 ms, c = 1 us, no residuals; one instance,
/// batches of up to 16 after at most 2 ms.
const KNOWN: &str = r#"
name = "known-affine"
instances = 1

[batcher]
max_batch_size = 16
max_queue_delay = "2ms"

[service]
kind = "affine"
a = "2ms"
b = "0.5ms"
c = "1us"
"#;

fn write_known(dir: &Path) -> PathBuf {
    let path = dir.join("known.toml");
    std::fs::write(&path, KNOWN).expect("scenario written");
    path
}

/// Simulates the shipped demo trace through `scenario` (with `extra` flags) into `dir/sim` and
/// returns its requests.parquet.
fn simulate(scenario: &Path, dir: &Path, extra: &[&str]) -> PathBuf {
    let out = dir.join("sim");
    let mut args = vec![
        "simulate",
        "--scenario",
        scenario.to_str().expect("utf-8"),
        "traces/demo.parquet",
        "-o",
        out.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let run = capsim(&args);
    assert!(run.status.success(), "simulate failed: {}", text(&run));
    out.join("requests.parquet")
}

fn fit_args<'a>(scenario: &'a Path, log: &'a Path, fitted: &'a Path) -> Vec<&'a str> {
    vec![
        "fit",
        "--scenario",
        scenario.to_str().expect("utf-8"),
        "--log",
        log.to_str().expect("utf-8"),
        "-o",
        fitted.to_str().expect("utf-8"),
    ]
}

fn relative_error(got: f64, want: f64) -> f64 {
    (got - want).abs() / want
}

#[test]
fn a_simulated_affine_service_time_is_recovered_within_two_percent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = write_known(dir.path());
    // 8x the demo's rate: batches of 1 to 16 with inputs of many lengths.
    let log = simulate(&scenario, dir.path(), &["--rate-scale", "8", "--seed", "1"]);
    let fitted = dir.path().join("fitted.toml");
    let report = dir.path().join("report");
    let mut args = fit_args(&scenario, &log, &fitted);
    args.extend_from_slice(&["--report", report.to_str().expect("utf-8")]);
    let out = capsim(&args);
    assert!(out.status.success(), "capsim fit failed: {}", text(&out));

    let s = Scenario::from_path(&fitted).expect("the fitted scenario loads");
    let Some(ServiceSpec::Affine {
        a, b, c, residuals, ..
    }) = &s.pools()[0].service_spec
    else {
        panic!(
            "the fitted [service] is not affine: {:?}",
            s.pools()[0].service_spec
        );
    };
    for (name, got, want) in [
        ("a", a.0, 2_000_000),
        ("b", b.0, 500_000),
        ("c", c.0, 1_000),
    ] {
        let err = relative_error(got as f64, want as f64);
        assert!(
            err <= 0.02,
            "{name}: expected {want} ns, fitted {got} ns ({:.2}% off)",
            err * 100.0
        );
    }
    let residuals = residuals.as_ref().expect("residuals written");
    assert!(
        !residuals.is_empty() && residuals.len() <= 1000,
        "{} residuals",
        residuals.len()
    );
    assert!(
        residuals.iter().all(|r| (r - 1.0).abs() < 1e-3),
        "exact data: every residual is 1"
    );

    // Same seed, exact parameters: the replay matches the log on every figure.
    let report = std::fs::read_to_string(report.join("fit.txt")).expect("fit.txt written");
    for metric in ["e2e.mean", "e2e.p90", "queue.mean", "queue.p90"] {
        let error = error_percent(&report, metric);
        assert!(error.abs() <= 1.0, "{metric}: {error}% off; {report}");
    }
}

#[test]
fn a_log_of_one_batch_size_is_refused_saying_b_and_a_cannot_be_told_apart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = write_known(dir.path());
    let log = simulate(
        &scenario,
        dir.path(),
        &["--set", "batcher.max_batch_size=1"],
    );
    let fitted = dir.path().join("fitted.toml");
    let out = capsim(&fit_args(&scenario, &log, &fitted));
    assert_user_error(
        &out,
        &["has size 1", "cannot be told apart", "several sizes"],
    );
    assert!(!fitted.exists(), "no fitted scenario on a refused fit");
}

#[test]
fn a_log_without_execution_columns_is_fitted_by_simulation_from_its_end_to_end_latencies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = write_known(dir.path());
    let simulated = simulate(&scenario, dir.path(), &["--rate-scale", "8", "--seed", "1"]);
    let log = dir.path().join("client.parquet");
    write_client_only_parquet(&simulated, &log);
    let fitted = dir.path().join("fitted.toml");
    let report = dir.path().join("report");
    let mut args = fit_args(&scenario, &log, &fitted);
    args.extend_from_slice(&["--report", report.to_str().expect("utf-8")]);
    let out = capsim(&args);
    assert!(out.status.success(), "capsim fit failed: {}", text(&out));
    let report = std::fs::read_to_string(report.join("fit.txt")).expect("fit.txt written");
    assert!(
        report.contains("no column batch_id, batch_size, exec_start_ns, exec_end_ns")
            && report.contains("by simulation"),
        "{report}"
    );
    for metric in ["e2e.mean", "e2e.p50", "e2e.p90"] {
        let error = error_percent(&report, metric);
        assert!(error.abs() <= 2.0, "{metric}: {error}% off; {report}");
    }
    let s = Scenario::from_path(&fitted).expect("the fitted scenario loads");
    assert!(
        matches!(
            &s.pools()[0].service_spec,
            Some(ServiceSpec::Affine {
                residuals: None,
                ..
            })
        ),
        "an affine [service] without residuals: {:?}",
        s.pools()[0].service_spec
    );
}

/// The relative error, in percent, on `metric`'s line of a fit.txt.
fn error_percent(report: &str, metric: &str) -> f64 {
    let line = report
        .lines()
        .find(|l| l.starts_with(metric))
        .unwrap_or_else(|| panic!("fit.txt lacks {metric}: {report}"));
    line.split_whitespace()
        .last()
        .and_then(|e| e.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("no error in {line:?}"))
}

#[test]
fn a_continuous_batching_log_is_refused_naming_the_fit_it_belongs_to() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().join("llm");
    let run = capsim(&[
        "simulate",
        "--scenario",
        "scenarios/llm-8b-h200.toml",
        "traces/azure-conv.parquet",
        "--limit",
        "100",
        "-o",
        out_dir.to_str().expect("utf-8"),
    ]);
    assert!(run.status.success(), "simulate failed: {}", text(&run));
    let scenario = write_known(dir.path());
    let out = capsim(&fit_args(
        &scenario,
        &out_dir.join("requests.parquet"),
        &dir.path().join("fitted.toml"),
    ));
    assert_user_error(
        &out,
        &["a continuous-batching log", "batcher.kind = \"continuous\""],
    );
}

/// The count and mean end-to-end latency (us) of the completed requests of `requests` (capsim's
/// requests.parquet).
fn completed_mean_latency_us(requests: &Path) -> (f64, f64) {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;

    let reader = SerializedFileReader::new(std::fs::File::open(requests).expect("open"))
        .expect("requests.parquet");
    let (mut count, mut sum_ns) = (0u64, 0i64);
    for row in reader.get_row_iter(None).expect("rows") {
        let (mut latency, mut completed) = (0, false);
        for (name, field) in row.expect("row").get_column_iter() {
            match (name.as_str(), field) {
                ("latency_ns", Field::Long(v)) => latency = *v,
                ("outcome", Field::Str(v)) => completed = v == "completed",
                _ => {}
            }
        }
        if completed {
            count += 1;
            sum_ns += latency;
        }
    }
    assert!(count > 0, "no completed request in {}", requests.display());
    (count as f64, sum_ns as f64 / count as f64 * 1e-3)
}

/// Copies `requests` (capsim's requests.parquet) into `path` keeping what a client sees of each
/// request: arrival, sizes, end-to-end latency and outcome. Written with parquet's own reader
/// and writer.
fn write_client_only_parquet(requests: &Path, path: &Path) {
    use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
    use parquet::file::properties::WriterProperties;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::file::writer::SerializedFileWriter;
    use parquet::record::Field;
    use parquet::schema::parser::parse_message_type;

    let (mut arrival, mut latency, mut input, mut output, mut outcome) =
        (vec![], vec![], vec![], vec![], vec![]);
    let reader = SerializedFileReader::new(std::fs::File::open(requests).expect("open"))
        .expect("requests.parquet");
    for row in reader.get_row_iter(None).expect("rows") {
        for (name, field) in row.expect("row").get_column_iter() {
            match (name.as_str(), field) {
                ("arrival_ns", Field::Long(v)) => arrival.push(*v),
                ("latency_ns", Field::Long(v)) => latency.push(*v),
                ("input_tokens", Field::UInt(v)) => input.push(*v as i32),
                ("output_tokens", Field::UInt(v)) => output.push(*v as i32),
                ("outcome", Field::Str(v)) => outcome.push(ByteArray::from(v.as_str())),
                _ => {}
            }
        }
    }
    assert!(!arrival.is_empty() && arrival.len() == outcome.len());
    let schema = Arc::new(
        parse_message_type(
            "message requests { REQUIRED INT64 arrival_ns; REQUIRED INT64 latency_ns; \
             REQUIRED INT32 input_tokens (INTEGER(32,false)); \
             REQUIRED INT32 output_tokens (INTEGER(32,false)); REQUIRED BYTE_ARRAY outcome (UTF8); }",
        )
        .expect("schema"),
    );
    let file = std::fs::File::create(path).expect("create");
    let mut writer =
        SerializedFileWriter::new(file, schema, Arc::new(WriterProperties::new())).expect("writer");
    let mut group = writer.next_row_group().expect("row group");
    for values in [&arrival, &latency] {
        let mut column = group.next_column().expect("column").expect("a column left");
        column
            .typed::<Int64Type>()
            .write_batch(values, None, None)
            .expect("write");
        column.close().expect("close column");
    }
    for values in [&input, &output] {
        let mut column = group.next_column().expect("column").expect("a column left");
        column
            .typed::<Int32Type>()
            .write_batch(values, None, None)
            .expect("write");
        column.close().expect("close column");
    }
    let mut column = group.next_column().expect("column").expect("a column left");
    column
        .typed::<ByteArrayType>()
        .write_batch(&outcome, None, None)
        .expect("write");
    column.close().expect("close column");
    group.close().expect("close row group");
    writer.close().expect("close file");
}

/// Per-request times: 100 requests, each 4.15 ms in the server (success), 1 ms of it queued and
/// 0.3 + 2.4 + 0.3 ms computing.
const INFERENCE_STATS: &str = r#""inference_stats": {"success": {"count": 100, "ns": 415000000}, "queue": {"count": 100, "ns": 100000000}, "compute_input": {"count": 100, "ns": 30000000}, "compute_infer": {"count": 100, "ns": 240000000}, "compute_output": {"count": 100, "ns": 30000000}}"#;

/// Triton's `GET /v2/models/NAME/stats` for a model whose batch of `size` takes
/// `2 ms + 0.5 ms x size`, split over input, inference and output as 10%, 80% and 10%; `sizes`
/// ran `3 + size` batches each. Per request (100 of them), 1 ms in the queue, 3 ms of compute
/// and 150 us elsewhere in the server.
fn triton_stats(sizes: &[u32]) -> String {
    let batch_stats: Vec<String> = sizes
        .iter()
        .map(|&size| {
            let batches = 3 + u64::from(size);
            let total_ns = batches * (2_000_000 + 500_000 * u64::from(size));
            let part = |share: u64| {
                format!(
                    r#"{{"count": {batches}, "ns": {}}}"#,
                    total_ns * share / 10
                )
            };
            format!(
                r#"{{"batch_size": {size}, "compute_input": {}, "compute_infer": {}, "compute_output": {}}}"#,
                part(1),
                part(8),
                part(1)
            )
        })
        .collect();
    format!(
        r#"{{"model_stats": [{{"name": "classifier", "version": "1", "inference_count": 0, "execution_count": 0, {INFERENCE_STATS}, "batch_stats": [{}]}}]}}"#,
        batch_stats.join(", ")
    )
}

#[test]
fn tritons_per_batch_size_statistics_give_back_a_and_b() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = write_known(dir.path());
    let stats = dir.path().join("stats.json");
    std::fs::write(&stats, triton_stats(&[1, 2, 4, 8])).expect("stats written");
    let fitted = dir.path().join("fitted.toml");
    let out = capsim(&fit_args(&scenario, &stats, &fitted));
    assert!(out.status.success(), "capsim fit failed: {}", text(&out));
    assert!(text(&out).contains("Triton's statistics"), "{}", text(&out));

    let s = Scenario::from_path(&fitted).expect("the fitted scenario loads");
    let Some(ServiceSpec::Affine {
        a, b, c, residuals, ..
    }) = &s.pools()[0].service_spec
    else {
        panic!(
            "the fitted [service] is not affine: {:?}",
            s.pools()[0].service_spec
        );
    };
    assert_eq!((a.0, b.0, c.0), (2_000_000, 500_000, 0), "a, b, c in ns");
    assert!(residuals.is_none(), "means only: no residuals");
    assert_eq!(
        s.pools()[0].postprocess.base.0,
        150_000,
        "the server's time outside queue and compute, in ns"
    );
}

#[test]
fn tritons_statistics_of_one_batch_size_are_refused_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = write_known(dir.path());
    let stats = dir.path().join("stats.json");
    std::fs::write(&stats, triton_stats(&[4])).expect("stats written");
    let fitted = dir.path().join("fitted.toml");
    let out = capsim(&fit_args(&scenario, &stats, &fitted));
    assert_user_error(
        &out,
        &[
            "stats.json",
            "\"classifier\"",
            "1 size (4)",
            "cannot be told apart",
        ],
    );
    assert!(!fitted.exists(), "no fitted scenario on a refused fit");
}

#[test]
fn a_run_with_the_servers_counters_fits_network_and_server_overheads_as_constants() {
    let dir = tempfile::tempdir().expect("tempdir");
    let scenario = write_known(dir.path());
    let log = simulate(&scenario, dir.path(), &["--rate-scale", "4"]);
    // As `replay --endpoint --metrics-url` would write it: Triton's counters over the run, the
    // server taking the client's mean less 0.4 ms per request, 0.1 ms of it outside queue and
    // compute.
    let summary_path = log.with_file_name("summary.json");
    let mut summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary_path).expect("summary.json"))
            .expect("summary is JSON");
    // A replay's summary describes every request; a simulation's, its steady window: the
    // counters are made from the log's own completed requests, as a replay's would be.
    let (n, client_us) = completed_mean_latency_us(&log);
    let server_us = client_us - 400.0;
    summary["server_metrics"] = serde_json::json!({
        "nv_inference_request_success": n,
        "nv_inference_request_duration_us": n * server_us,
        "nv_inference_queue_duration_us": n * 1000.0,
        "nv_inference_compute_input_duration_us": 0.0,
        "nv_inference_compute_infer_duration_us": n * (server_us - 1100.0),
        "nv_inference_compute_output_duration_us": 0.0,
    });
    std::fs::write(&summary_path, summary.to_string()).expect("summary written");

    let fitted = dir.path().join("fitted.toml");
    let out = capsim(&fit_args(&scenario, &log, &fitted));
    assert!(out.status.success(), "capsim fit failed: {}", text(&out));
    let s = Scenario::from_path(&fitted).expect("the fitted scenario loads");
    let pool = &s.pools()[0];
    // summary.json rounds the mean to 1 ns; the fit reads the log's own mean.
    let outside_ns = pool.postprocess.base.0 as f64;
    assert!(
        (outside_ns - 100_000.0).abs() <= 2.0,
        "postprocess.base: expected 100 us, fitted {outside_ns} ns"
    );
    let Some(LatencySpec::Constant { one_way }) = &s.network.latency else {
        panic!(
            "network latency: expected a constant, got {:?}",
            s.network.latency
        );
    };
    assert!(
        (one_way.0 as f64 - 200_000.0).abs() <= 2.0,
        "network latency: expected 200 us one way, fitted {} ns",
        one_way.0
    );
    assert!(
        !text(&out).contains("did not bracket"),
        "the counters cover the log's requests: {}",
        text(&out)
    );
}
