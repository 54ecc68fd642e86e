//! `capsim replay --endpoint --protocol openai` against a real OpenAI-compatible server on
//! 127.0.0.1: llama.cpp through llama-cpp-python's server (installed by `scripts/setup.sh`,
//! started and stopped by PID with `scripts/llama_server.py`), serving a tiny random-weight
//! model that the script writes. The model makes `</s>` the likeliest token at every step, so a
//! completion reaches the trace's length only if the server honours what capsim asks
//! (`min_tokens`; this server ignores `ignore_eos`). The checks are on counts and on the order of
//! times, not on speed.

mod common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{capsim, repo, stderr, text};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use serde_json::Value;

/// Requests in the test's trace.
const REQUESTS: usize = 40;

/// The project's Python, where `scripts/setup.sh` installs llama-cpp-python.
fn python() -> PathBuf {
    repo(".venv/bin/python")
}

/// A llama-cpp-python server for the script's tiny model, stopped (by its PID) when dropped.
struct LlamaServer {
    dir: PathBuf,
    port: u16,
}

impl LlamaServer {
    fn start(dir: &Path) -> LlamaServer {
        let output = Command::new(python())
            .arg(repo("scripts/llama_server.py"))
            .args(["start", "--name", "tiny", "--dir"])
            .arg(dir)
            .output()
            .expect("scripts/llama_server.py runs (scripts/setup.sh installs .venv)");
        // Stopped by `drop` from here on, whatever happens.
        let mut server = LlamaServer {
            dir: dir.to_path_buf(),
            port: 0,
        };
        assert!(
            output.status.success(),
            "the llama.cpp server did not start: {}",
            text(&output)
        );
        let ports: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("ports.json")).expect("ports.json"),
        )
        .expect("JSON");
        server.port = ports["http"].as_u64().expect("http port") as u16;
        server
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A whole (not streamed) completion, over a plain socket: the server's JSON answer.
    fn complete(&self, body: &Value) -> Value {
        let body = body.to_string();
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(120)))
            .expect("timeout");
        write!(
            stream,
            "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .expect("send");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("answer");
        let json = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{e}: {answer}"))
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = Command::new(python())
            .arg(repo("scripts/llama_server.py"))
            .args(["stop", "--dir"])
            .arg(&self.dir)
            .status();
    }
}

/// The trace: a request every 50 ms, 1 to 1,500 input tokens, 1 to 64 output tokens (the first
/// three 1, 2 and 64), within the model's 2,048-token context.
fn write_trace(path: &Path) -> Vec<u32> {
    let mut csv = String::from("arrival,input_tokens,output_tokens\n");
    let mut outputs = Vec::with_capacity(REQUESTS);
    for i in 0..REQUESTS {
        let output = match i {
            0 => 1,
            1 => 2,
            2 => 64,
            _ => 1 + (i as u32 * 37) % 64,
        };
        let input = 1 + (i as u32 * 211) % 1_500;
        csv.push_str(&format!("{},{input},{output}\n", i as u64 * 50_000_000));
        outputs.push(output);
    }
    std::fs::write(path, csv).expect("write trace");
    outputs
}

/// The named columns of requests.parquet, each as one `i64` (or `None` for null) per row.
fn columns(path: &Path, names: &[&str]) -> Vec<Vec<Option<i64>>> {
    let file = std::fs::File::open(path).expect("requests.parquet");
    let reader = SerializedFileReader::new(file).expect("Parquet");
    let mut out = vec![Vec::new(); names.len()];
    for row in reader.get_row_iter(None).expect("rows") {
        let row = row.expect("row");
        for (name, field) in row.get_column_iter() {
            if let Some(k) = names.iter().position(|n| n == name) {
                out[k].push(match field {
                    Field::Null => None,
                    Field::Long(v) => Some(*v),
                    Field::UInt(v) => Some(i64::from(*v)),
                    Field::Int(v) => Some(i64::from(*v)),
                    other => panic!("column {name}: unexpected {other:?}"),
                });
            }
        }
    }
    out
}

#[test]
fn replay_against_llama_cpp_streams_every_requested_token_with_ttft_before_the_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = LlamaServer::start(dir.path());

    // The premises, asked directly: without min_tokens the model ends at once, and a text prompt
    // of capsim's form is one token a word with this tokenizer.
    let plain = server.complete(&serde_json::json!({
        "model": "tiny", "prompt": "q d k z a", "max_tokens": 8, "temperature": 0,
        "ignore_eos": true,
    }));
    assert_eq!(
        (
            &plain["usage"]["prompt_tokens"],
            &plain["usage"]["completion_tokens"]
        ),
        (&5.into(), &0.into()),
        "five words, and </s> first even with ignore_eos: {plain}"
    );

    let trace = dir.path().join("trace.csv");
    let outputs = write_trace(&trace);
    let out = dir.path().join("measured");
    let run = capsim(&[
        "replay",
        "--endpoint",
        &server.url(),
        "--protocol",
        "openai",
        "--model",
        "tiny",
        "--vocab",
        "512",
        "--timeout",
        "300s",
        "--trace",
        trace.to_str().expect("utf-8"),
        "-o",
        out.to_str().expect("utf-8"),
    ]);
    assert!(run.status.success(), "{}", text(&run));
    assert!(
        stderr(&run).contains("refuses a prompt of token ids"),
        "llama-cpp-python takes text prompts only; capsim says it sends text: {}",
        text(&run)
    );

    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("summary.json"),
    )
    .expect("JSON");
    let counts = &summary["requests"];
    assert_eq!(
        (&counts["total"], &counts["completed"]),
        (&REQUESTS.into(), &REQUESTS.into()),
        "{counts}"
    );
    assert_eq!(summary["load"]["sent"], REQUESTS, "{summary}");
    // One inter-token gap between each two streamed tokens of a request.
    let gaps: u64 = outputs.iter().map(|&o| u64::from(o) - 1).sum();
    assert_eq!(
        summary["latency_ms"]["itl"]["count"], gaps,
        "{}",
        summary["latency_ms"]
    );

    let [
        request,
        output_tokens,
        first_token,
        response,
        latency,
        ttft,
        tpot,
    ] = &columns(
        &out.join("requests.parquet"),
        &[
            "request",
            "output_tokens",
            "first_token_ns",
            "response_ns",
            "latency_ns",
            "ttft_ns",
            "tpot_ns",
        ],
    )[..]
    else {
        panic!("seven columns")
    };
    assert_eq!(request.len(), REQUESTS, "one row per request");
    let mut streamed_apart = 0;
    for i in 0..REQUESTS {
        let row = request[i].expect("request") as usize;
        let want = i64::from(outputs[row]);
        assert_eq!(
            output_tokens[i],
            Some(want),
            "request {row}: tokens streamed vs the trace's"
        );
        let (ttft, latency) = (ttft[i].expect("ttft"), latency[i].expect("latency"));
        assert!(
            0 < ttft && ttft <= latency,
            "request {row}: TTFT {ttft} ns, latency {latency} ns"
        );
        let (first, last) = (first_token[i].expect("first"), response[i].expect("end"));
        assert!(
            first <= last,
            "request {row}: first token {first}, end {last}"
        );
        assert_eq!(
            tpot[i].is_some(),
            want >= 2,
            "request {row}: TPOT {:?} for {want} tokens",
            tpot[i]
        );
        if want >= 2 && first < last {
            streamed_apart += 1;
        }
    }
    // A server that answered whole would put every token at the end; a few chunks read
    // together on a busy machine may do so too.
    let multi = outputs.iter().filter(|&&o| o >= 2).count();
    assert!(
        streamed_apart * 4 >= multi * 3,
        "only {streamed_apart} of {multi} multi-token answers had their first token before \
         their end: not streamed"
    );
}
