//! The load generator against a small server on 127.0.0.1 that this test starts: a fixed-time
//! KServe model, models that fail in each way a real server can, and a streamed OpenAI-style
//! completion (and one that, like llama-cpp-python's server, takes text prompts only and sends
//! no token counts). Server-side facts (how long each request took, how many were in flight at once)
//! are what the assertions lean on, not the client's wall clock.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use capsim_endpoint::{
    EndpointError, EndpointOptions, LoadMode, MeasuredRun, Protocol, Reporting, replay,
};
use capsim_sim::Warmup;
use capsim_sim::record::{FailReason, Outcome};
use capsim_trace::{Columns, Trace};
use hyper::body::{Body, Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

/// Each fixed-time inference takes this long on the server.
const SERVICE: Duration = Duration::from_millis(20);

/// What the server saw.
#[derive(Default)]
struct Seen {
    infers: AtomicUsize,
    succeeded: AtomicUsize,
    in_flight: AtomicU32,
    max_in_flight: AtomicU32,
    /// Words in each text prompt, in the order received.
    prompt_words: std::sync::Mutex<Vec<usize>>,
}

/// A body fed from a channel, for streamed responses.
struct Streamed(mpsc::Receiver<Bytes>);

impl Body for Streamed {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

fn whole(status: u16, body: &str) -> Response<Streamed> {
    let (tx, rx) = mpsc::channel(1);
    tx.try_send(Bytes::from(body.to_string()))
        .expect("room for one chunk");
    Response::builder()
        .status(status)
        .body(Streamed(rx))
        .expect("a response")
}

const METADATA: &str =
    r#"{"name":"m","inputs":[{"name":"input_ids","datatype":"INT64","shape":[-1,-1]}]}"#;

async fn handle(
    request: Request<Incoming>,
    seen: Arc<Seen>,
) -> Result<Response<Streamed>, Infallible> {
    let path = request.uri().path().to_string();
    let response = match path.as_str() {
        "/v2/models/fixed" | "/v2/models/flaky" | "/v2/models/stall" => whole(200, METADATA),
        "/v2/models/fixed/infer" => {
            let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.max_in_flight.fetch_max(now, Ordering::SeqCst);
            seen.infers.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(SERVICE).await;
            seen.in_flight.fetch_sub(1, Ordering::SeqCst);
            seen.succeeded.fetch_add(1, Ordering::SeqCst);
            whole(200, r#"{"outputs":[]}"#)
        }
        "/v2/models/flaky/infer" => {
            let n = seen.infers.fetch_add(1, Ordering::SeqCst);
            if n.is_multiple_of(2) {
                whole(503, "overloaded")
            } else {
                whole(200, r#"{"outputs":[]}"#)
            }
        }
        "/v2/models/stall/infer" => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            whole(200, "{}")
        }
        "/v1/models" => whole(
            200,
            r#"{"data":[{"id":"tiny"},{"id":"cut"},{"id":"text"}]}"#,
        ),
        "/metrics" => whole(
            200,
            &format!(
                "# TYPE nv_inference_request_success counter\n\
                 nv_inference_request_success{{model=\"fixed\",version=\"1\"}} {}\n\
                 nv_inference_request_success{{model=\"flaky\",version=\"1\"}} 99\n",
                seen.succeeded.load(Ordering::SeqCst)
            ),
        ),
        "/v1/completions" => {
            use http_body_util::BodyExt;
            let body = request
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON body");
            let mut tokens = v["max_tokens"].as_u64().expect("max_tokens");
            assert_eq!(v["min_tokens"], v["max_tokens"]);
            assert_eq!(v["ignore_eos"], true);
            let cut = v["model"] == "cut";
            let text_only = v["model"] == "text";
            if text_only {
                let Some(prompt) = v["prompt"].as_str() else {
                    return Ok(whole(500, "prompt: Input should be a valid string"));
                };
                let words = prompt.split(' ').count();
                seen.prompt_words.lock().expect("lock").push(words);
                // It stops one token short, so a length taken from the trace would show.
                tokens -= 1;
            }
            let (tx, rx) = mpsc::channel(4);
            tokio::spawn(async move {
                for i in 0..tokens {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    let event = format!("data: {{\"choices\":[{{\"text\":\"t{i}\"}}]}}\n\n");
                    if tx.send(Bytes::from(event)).await.is_err() {
                        return;
                    }
                    if cut && i == 1 {
                        return;
                    }
                }
                let usage = if text_only {
                    "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n"
                        .to_string()
                } else {
                    format!(
                        "data: {{\"choices\":[],\"usage\":{{\"completion_tokens\":{tokens}}}}}\n\ndata: [DONE]\n\n"
                    )
                };
                let _ = tx.send(Bytes::from(usage)).await;
            });
            Response::new(Streamed(rx))
        }
        _ => whole(404, "no such model"),
    };
    Ok(response)
}

/// Starts the server on a free loopback port, in its own thread and runtime (the replay runs
/// its own); it stops with the test process.
fn start_server() -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = listener.local_addr().expect("its address");
    listener.set_nonblocking(true).expect("nonblocking");
    let served = seen.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            loop {
                let (stream, _) = listener.accept().await.expect("accept");
                let seen = served.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |r| handle(r, seen.clone()));
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    (addr, seen)
}

/// `n` requests `gap_ms` apart, 8 input and `output` output tokens each.
fn trace(n: u64, gap_ms: u64, output: u32) -> Trace {
    Trace::from_columns(Columns {
        arrival_ns: (0..n).map(|i| i * gap_ms * 1_000_000).collect(),
        input_tokens: vec![8; n as usize],
        output_tokens: Some(vec![output; n as usize]),
        ..Columns::default()
    })
    .expect("a valid trace")
}

fn options(addr: SocketAddr, protocol: Protocol, model: &str) -> EndpointOptions {
    EndpointOptions::new(&format!("http://{addr}"), protocol, model)
}

fn measure(trace: &Trace, options: &EndpointOptions) -> MeasuredRun {
    replay(trace, options, &Reporting::default()).expect("the replay runs")
}

#[test]
fn open_loop_measures_every_request_from_its_intended_send() {
    let (addr, seen) = start_server();
    let run = measure(&trace(40, 10, 1), &options(addr, Protocol::Kserve, "fixed"));
    let counts = &run.summary.requests;
    assert_eq!((counts.total, counts.completed), (40, 40), "{counts:?}");
    assert_eq!(seen.infers.load(Ordering::SeqCst), 40);
    for r in &run.records {
        assert_eq!(
            r.arrival_ns,
            u64::from(r.request) * 10_000_000,
            "intended times"
        );
        assert!(
            r.latency_ns() >= SERVICE.as_nanos() as u64,
            "request {} answered in {} ns, before the server's {SERVICE:?}",
            r.request,
            r.latency_ns()
        );
    }
    let load = run.summary.load.as_ref().expect("a load summary");
    assert_eq!((load.sent, load.not_sent), (40, 0));
    assert!((load.requested_rate_rps - 100.0).abs() < 1e-6, "{load:?}");
    assert!(load.schedule_delay_max_ms >= load.schedule_delay_p99_ms);
    assert!(run.timeseries.arrivals.iter().sum::<u32>() == 40);
}

#[test]
fn a_warm_up_is_sent_and_recorded_but_left_out_of_the_statistics() {
    let (addr, seen) = start_server();
    let o = options(addr, Protocol::Kserve, "fixed");
    for (warmup, excluded) in [
        (Warmup::Count(10), 10),
        (Warmup::DurationNs(195_000_000), 20),
    ] {
        let reporting = Reporting {
            warmup,
            ..Reporting::default()
        };
        let before = seen.infers.load(Ordering::SeqCst);
        let run = replay(&trace(40, 10, 1), &o, &reporting).expect("the replay runs");
        assert_eq!(seen.infers.load(Ordering::SeqCst) - before, 40, "all sent");
        assert_eq!(run.records.len(), 40, "all recorded");
        let s = &run.summary;
        assert_eq!(
            (s.requests.total, s.requests.completed),
            (40, 40),
            "{warmup:?}"
        );
        assert_eq!(s.warmup_excluded, excluded, "{warmup:?}");
        assert_eq!(s.measured.total, 40 - excluded, "{warmup:?}");
        assert_eq!(
            s.latency_ms["end_to_end"].count,
            40 - excluded,
            "{warmup:?}"
        );
    }
}

#[test]
fn the_servers_metrics_are_scraped_through_the_run_into_summary_and_timeseries() {
    let (addr, _) = start_server();
    let mut o = options(addr, Protocol::Kserve, "fixed");
    o.metrics_url = Some(format!("http://{addr}/metrics"));
    let reporting = Reporting {
        interval_ns: 100_000_000,
        ..Reporting::default()
    };
    let run = replay(&trace(30, 10, 1), &o, &reporting).expect("the replay runs");
    let column = &run.timeseries.server_metrics["nv_inference_request_success"];
    assert_eq!(column.len(), run.timeseries.len());
    assert_eq!(
        column.last().copied(),
        Some(30.0),
        "the last scrape, after every answer, counts all 30 (not the other model's 99)"
    );
    let increase = run.summary.server_metrics["nv_inference_request_success"];
    assert!((1.0..=30.0).contains(&increase), "{increase}");

    o.metrics_url = Some(format!("http://{addr}/nothing"));
    let err = replay(&trace(1, 1, 1), &o, &reporting)
        .unwrap_err()
        .to_string();
    assert!(err.contains("--metrics-url answered HTTP 404"), "{err}");
}

#[test]
fn closed_loop_keeps_at_most_its_clients_in_flight() {
    let (addr, seen) = start_server();
    let mut o = options(addr, Protocol::Kserve, "fixed");
    o.mode = LoadMode::Closed {
        concurrency: 2,
        think_time: Duration::ZERO,
    };
    let run = measure(&trace(20, 0, 1), &o);
    assert_eq!(run.summary.requests.completed, 20);
    assert_eq!(seen.max_in_flight.load(Ordering::SeqCst), 2);
}

#[test]
fn server_errors_and_stalls_are_counted_failures_with_their_reasons() {
    let (addr, _) = start_server();
    let run = measure(&trace(10, 5, 1), &options(addr, Protocol::Kserve, "flaky"));
    let counts = &run.summary.requests;
    assert_eq!(
        (counts.total, counts.completed, counts.failed),
        (10, 5, 5),
        "{counts:?}"
    );
    assert_eq!(counts.failed_by_reason.get("http_5xx"), Some(&5));
    assert!(counts.adds_up());
    assert!(
        run.records
            .iter()
            .any(|r| r.outcome == Outcome::Failed(FailReason::Http(503)))
    );

    let mut o = options(addr, Protocol::Kserve, "stall");
    o.timeout = Duration::from_millis(200);
    let run = measure(&trace(3, 1, 1), &o);
    let counts = &run.summary.requests;
    assert_eq!((counts.total, counts.failed), (3, 3), "{counts:?}");
    assert_eq!(counts.failed_by_reason.get("timeout"), Some(&3));

    // A hung server: after two timeouts no more is sent (the one client may have sent its
    // next before the stop reached it), and what was not is counted.
    o.stop_after_timeouts = Some(2);
    o.mode = LoadMode::Closed {
        concurrency: 1,
        think_time: Duration::ZERO,
    };
    let run = measure(&trace(50, 1, 1), &o);
    let counts = &run.summary.requests;
    assert!(
        (2..=3).contains(&counts.total) && counts.failed == counts.total,
        "{counts:?}"
    );
    let not_sent = run.summary.load.as_ref().map(|l| l.not_sent);
    assert_eq!(not_sent, Some(50 - counts.total), "{counts:?}");
}

#[test]
fn an_unreachable_endpoint_or_unknown_model_is_a_clear_error() {
    let (addr, _) = start_server();
    let err = replay(
        &trace(1, 1, 1),
        &options(addr, Protocol::Kserve, "nope"),
        &Reporting::default(),
    )
    .unwrap_err();
    assert!(
        matches!(err, EndpointError::UnknownModel { status: 404, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("/v2/models/nope"), "{err}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let free = closed.local_addr().expect("address");
    drop(closed);
    let err = replay(
        &trace(1, 1, 1),
        &options(free, Protocol::Kserve, "fixed"),
        &Reporting::default(),
    )
    .unwrap_err();
    assert!(matches!(err, EndpointError::Unreachable { .. }), "{err}");
    assert!(err.to_string().contains("--endpoint"), "{err}");

    let err = replay(
        &trace(1, 1, 1),
        &options(addr, Protocol::Openai, "llama"),
        &Reporting::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("does not list model \"llama\"") && err.contains("tiny, cut"),
        "{err}"
    );
}

#[test]
fn streamed_completions_give_ttft_tpot_and_token_counts() {
    let (addr, _) = start_server();
    let run = measure(&trace(4, 20, 6), &options(addr, Protocol::Openai, "tiny"));
    assert_eq!(run.summary.requests.completed, 4);
    for r in &run.records {
        assert_eq!(r.output_tokens, 6, "from usage");
        let ttft = r.ttft_ns();
        // The server sends the first token 5 ms after the request, the last one 25 ms later.
        assert!(ttft >= 5_000_000, "{r:?}");
        let tpot = r.tpot_ns().expect("six tokens");
        assert!(ttft + 5 * tpot <= r.latency_ns(), "{r:?}");
        assert!(r.latency_ns() >= 30_000_000, "{r:?}");
    }
    let itl = &run.summary.latency_ms["itl"];
    assert_eq!(itl.count, 4 * 5, "five gaps a request");

    let run = run_cut(addr);
    assert_eq!(
        run.summary.requests.failed_by_reason.get("stream"),
        Some(&2)
    );
}

#[test]
fn a_server_taking_only_text_gets_a_word_a_token_and_lengths_from_its_stream() {
    let (addr, seen) = start_server();
    let run = measure(&trace(3, 5, 6), &options(addr, Protocol::Openai, "text"));
    assert_eq!(run.summary.requests.completed, 3);
    assert_eq!(
        *seen.prompt_words.lock().expect("lock"),
        [1, 8, 8, 8],
        "the one-token probe, then the trace's 8 input tokens as 8 words"
    );
    for r in &run.records {
        assert_eq!(r.output_tokens, 5, "streamed, not the trace's 6: {r:?}");
        assert!(
            r.tpot_ns().is_some() && r.first_token_ns < r.response_ns,
            "{r:?}"
        );
    }
}

fn run_cut(addr: SocketAddr) -> MeasuredRun {
    measure(&trace(2, 5, 6), &options(addr, Protocol::Openai, "cut"))
}
