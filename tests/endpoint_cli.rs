//! End-to-end tests of `capsim replay --endpoint` against a real HTTP server on 127.0.0.1:
//! `scripts/kserve_fixed_time.py`, a KServe v2 model that answers after a fixed time, started
//! and stopped (by PID) by the test.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{assert_user_error, capsim, repo, text};
use serde_json::Value;

/// Each answer takes this long on the server, in milliseconds.
const SERVICE_MS: f64 = 5.0;

/// The fixed-time server, stopped when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(dir: &Path) -> Server {
        let port_file = dir.join("port");
        let child = Command::new("python3")
            .arg(repo("scripts/kserve_fixed_time.py"))
            .args(["--model", "fixed", "--time-ms", &SERVICE_MS.to_string()])
            .arg("--port-file")
            .arg(&port_file)
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 runs scripts/kserve_fixed_time.py");
        // Stopped by `drop` from here on, whatever happens.
        let mut server = Server {
            child,
            url: String::new(),
        };
        let started = Instant::now();
        loop {
            if let Ok(port) = std::fs::read_to_string(&port_file)
                && !port.is_empty()
            {
                server.url = format!("http://127.0.0.1:{}", port.trim());
                return server;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the server did not start within 30 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `capsim replay` of the demo trace's first `limit` requests against the fixed-time server,
/// written to `out`.
fn replay_args<'a>(url: &'a str, limit: &'a str, out: &'a Path) -> Vec<&'a str> {
    vec![
        "replay",
        "--endpoint",
        url,
        "--model",
        "fixed",
        "--scenario",
        "scenarios/no-batching.toml",
        "--trace",
        "traces/demo.parquet",
        "--limit",
        limit,
        "-o",
        out.to_str().expect("utf-8"),
    ]
}

#[test]
fn replay_endpoint_writes_what_simulate_writes_with_every_request_accounted_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let out = dir.path().join("measured");
    let output = capsim(&replay_args(&server.url, "60", &out));
    assert!(output.status.success(), "{}", text(&output));
    for file in ["summary.json", "requests.parquet", "timeseries.parquet"] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("summary.json"),
    )
    .expect("JSON");
    assert_eq!(summary["requests"]["total"], 60, "{summary}");
    assert_eq!(summary["requests"]["completed"], 60, "{summary}");
    assert_eq!(summary["load"]["sent"], 60);
    assert_eq!(summary["scenario"], "no-batching");
    // The server sleeps 5 ms for each: no answer can come sooner.
    let p50 = summary["latency_ms"]["end_to_end"]["p50_ms"]
        .as_f64()
        .expect("p50");
    assert!(
        p50 >= SERVICE_MS,
        "p50 {p50} ms below the server's {SERVICE_MS} ms"
    );
    assert!(
        common::stderr(&output).contains("load: 60 sent (0 not sent)"),
        "{}",
        text(&output)
    );
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let requests = std::fs::File::open(out.join("requests.parquet")).expect("requests.parquet");
    let rows = SerializedFileReader::new(requests)
        .expect("Parquet")
        .metadata()
        .file_metadata()
        .num_rows();
    assert_eq!(rows, 60, "one row per request sent");
}

#[test]
fn replay_endpoint_warmup_is_sent_but_left_out_of_the_statistics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let out = dir.path().join("measured");
    let mut args = replay_args(&server.url, "30", &out);
    args.extend(["--warmup", "10"]);
    let output = capsim(&args);
    assert!(output.status.success(), "{}", text(&output));
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("summary.json"),
    )
    .expect("JSON");
    assert_eq!(summary["requests"]["total"], 30, "{summary}");
    assert_eq!(summary["warmup_excluded"], 10, "{summary}");
    assert_eq!(summary["measured"]["total"], 20, "{summary}");
    assert_eq!(
        summary["latency_ms"]["end_to_end"]["count"], 20,
        "{summary}"
    );

    let mut args = replay_args(&server.url, "5", &out);
    args.extend(["--warmup", "ten"]);
    let output = capsim(&args);
    assert!(!output.status.success());
    assert!(
        common::stderr(&output).contains("--warmup") && common::stderr(&output).contains("1000"),
        "{}",
        text(&output)
    );
}

#[test]
fn replay_endpoint_refuses_an_unknown_model_and_an_unreachable_server() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let common_args = ["--trace", "traces/demo.parquet", "--limit", "3", "-o"];
    let out = dir.path().join("o");
    let mut args = vec!["replay", "--endpoint", &server.url, "--model", "missing"];
    args.extend(common_args);
    args.push(out.to_str().expect("utf-8"));
    assert_user_error(
        &capsim(&args),
        &["HTTP 404", "--model", "/v2/models/missing"],
    );

    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}", closed.local_addr().expect("address"));
    drop(closed);
    let mut args = vec!["replay", "--endpoint", &url, "--model", "fixed"];
    args.extend(common_args);
    args.push(out.to_str().expect("utf-8"));
    assert_user_error(&capsim(&args), &["cannot reach", "--endpoint"]);
}

#[test]
fn ctrl_c_stops_the_replay_and_writes_what_was_measured_with_every_request_accounted_for() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Server::start(dir.path());
    let out = dir.path().join("measured");
    // The demo trace's first 2,000 requests take minutes to send at its rate.
    let mut child = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(replay_args(&server.url, "2000", &out))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("capsim runs");
    std::thread::sleep(Duration::from_millis(2_500));
    let interrupt = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupt.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("capsim replay did not stop within 60 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = child.wait_with_output().expect("output");
    assert!(status.success(), "{status}: {}", text(&output));
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("summary.json written"),
    )
    .expect("JSON");
    let sent = summary["load"]["sent"].as_u64().expect("sent");
    let not_sent = summary["load"]["not_sent"].as_u64().expect("not_sent");
    assert!(sent > 0 && not_sent > 0, "{sent} sent, {not_sent} not sent");
    assert_eq!(sent + not_sent, 2000, "{summary}");
    let requests = &summary["requests"];
    assert_eq!(requests["total"].as_u64(), Some(sent), "{summary}");
    let ended: u64 = ["completed", "rejected", "timed_out", "failed"]
        .iter()
        .map(|k| requests[*k].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(ended, sent, "every request sent ended somehow: {summary}");
    for file in ["requests.parquet", "timeseries.parquet"] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
}
