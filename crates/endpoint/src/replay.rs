//! The load generator: sends a trace's requests to a server in the trace's time (open loop) or
//! from a fixed number of clients (closed loop), and records when each was meant to go, went,
//! and was answered.
//!
//! Open loop, each request is sent at its trace arrival whatever the server is doing, and its
//! latency is measured from that intended time, so a server that falls behind is not excused by
//! a client that waited for it (no coordinated omission). A thread of its own keeps the schedule;
//! a request's body is built just before its time (within [`PREPARE_AHEAD`]), so building it
//! does not delay the send.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Uri;
use tokio::sync::{mpsc, oneshot};

use capsim_sim::record::{FailReason, NONE, Outcome, RequestRecord};
use capsim_trace::Trace;

use crate::http::{HttpClient, Response};
use crate::kserve::ModelMetadata;
use crate::{EndpointError, EndpointOptions, LoadMode, Protocol};
use crate::{metrics, openai};

/// How long before its intended send time a request's task is started to build its body.
pub const PREPARE_AHEAD: Duration = Duration::from_millis(20);

/// A request as measured.
#[derive(Debug, Clone)]
pub struct Measured {
    /// Its record, on the trace's timeline: `arrival_ns` is the intended send time;
    /// `response_ns` when the answer (or the failure) came; with streaming, `first_token_ns`
    /// and `exec_end_ns` the first and last token's arrival.
    pub record: RequestRecord,
    /// Actual minus intended send time, in nanoseconds.
    pub schedule_delay_ns: u64,
    /// When it was actually sent, in nanoseconds on the trace's timeline.
    pub sent_ns: u64,
    /// Gaps between streamed tokens, in nanoseconds.
    pub token_gaps_ns: Vec<u64>,
}

/// What a replay measured.
#[derive(Debug, Clone)]
pub struct Replayed {
    /// Every request sent, in trace order.
    pub requests: Vec<Measured>,
    /// Trace requests not sent (the run was interrupted).
    pub not_sent: u64,
    /// The last answer's time on the trace's timeline, in nanoseconds.
    pub end_ns: u64,
    /// The server's metrics, scraped through the run (empty without a metrics URL).
    pub scrapes: Vec<metrics::Scrape>,
    /// What the reader of the run's numbers should know (for example, approximate input
    /// lengths).
    pub warnings: Vec<String>,
}

/// What the protocol needs to build and read requests, fetched once before the run.
enum Prepared {
    Kserve {
        metadata: ModelMetadata,
        infer: Uri,
    },
    Openai {
        completions: Uri,
        prompt: openai::PromptForm,
        /// Why the run's numbers need a caveat, if they do.
        warning: Option<String>,
    },
}

/// Checks the endpoint and the model (a clear error when either is wrong), then replays.
pub(crate) async fn run(
    trace: &Trace,
    options: &EndpointOptions,
    scrape_every: Duration,
) -> Result<Replayed, EndpointError> {
    let client = HttpClient::default();
    let prepared = Arc::new(prepare(&client, options).await?);
    let warnings = match &*prepared {
        Prepared::Openai {
            warning: Some(w), ..
        } => vec![w.clone()],
        _ => Vec::new(),
    };
    let metrics_uri = metrics_uri(&client, options).await?;
    let origin = Instant::now() + PREPARE_AHEAD;
    let first_arrival_ns = trace.arrival_ns().first().copied().unwrap_or(0);
    let context = Arc::new(Context {
        client,
        prepared,
        options: options.clone(),
        origin,
        first_arrival_ns,
    });
    let requests = Arc::new(Rows::of(trace));
    let (results, mut received) = mpsc::unbounded_channel::<Measured>();
    let stop = stop_on_ctrl_c();
    let scheduler = match options.mode {
        LoadMode::Open => {
            let (context, requests, stop) = (context.clone(), requests.clone(), stop.clone());
            let runtime = tokio::runtime::Handle::current();
            Some(std::thread::spawn(move || {
                schedule_open(&context, &requests, &runtime, &stop, &results);
            }))
        }
        LoadMode::Closed {
            concurrency,
            think_time,
        } => {
            let next = Arc::new(AtomicUsize::new(0));
            for _ in 0..concurrency.min(requests.len().max(1) as u32) {
                let (context, requests, next) = (context.clone(), requests.clone(), next.clone());
                let (results, stop) = (results.clone(), stop.clone());
                tokio::spawn(async move {
                    client_loop(&context, &requests, &next, think_time, &stop, &results).await;
                });
            }
            drop(results);
            None
        }
    };
    let (finished, finished_rx) = tokio::sync::watch::channel(false);
    let scraper = metrics_uri.map(|uri| {
        let context = context.clone();
        tokio::spawn(async move { scrape_loop(&context, &uri, scrape_every, finished_rx).await })
    });
    // Every sender is gone once the scheduler and every request are done.
    let mut measured = Vec::with_capacity(requests.len());
    let mut timeouts = 0;
    while let Some(m) = received.recv().await {
        if m.record.outcome == Outcome::Failed(FailReason::Timeout) {
            timeouts += 1;
            if options.stop_after_timeouts.is_some_and(|n| timeouts >= n) {
                stop.store(true, Ordering::Relaxed);
            }
        }
        measured.push(m);
    }
    let _ = finished.send(true);
    let scrapes = match scraper {
        Some(task) => task.await.expect("the scraper never panics"),
        None => Vec::new(),
    };
    if let Some(scheduler) = scheduler {
        scheduler.join().expect("the scheduler thread never panics");
    }
    measured.sort_by_key(|m| m.record.request);
    let end_ns = measured
        .iter()
        .map(|m| m.record.response_ns)
        .max()
        .unwrap_or(first_arrival_ns);
    Ok(Replayed {
        not_sent: (requests.len() - measured.len()) as u64,
        requests: measured,
        end_ns,
        scrapes,
        warnings,
    })
}

/// The server's metrics URL, checked before the run (a wrong URL is an error, not an empty
/// column); `None` when none is scraped.
async fn metrics_uri(
    client: &HttpClient,
    options: &EndpointOptions,
) -> Result<Option<Uri>, EndpointError> {
    match &options.metrics_url {
        Some(url) => {
            let uri: Uri = url
                .parse()
                .map_err(|_| EndpointError::BadUrl { url: url.clone() })?;
            scrape(client, &uri, &options.model).await?;
            Ok(Some(uri))
        }
        None => Ok(None),
    }
}

/// The flag that stops new sends, set by Ctrl-C; the requests in flight get their timeout to
/// finish, and what was measured is written.
fn stop_on_ctrl_c() -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, Ordering::Relaxed);
        }
    });
    stop
}

/// The trace's columns a request needs.
struct Rows {
    arrival_ns: Vec<u64>,
    input_tokens: Vec<u32>,
    output_tokens: Option<Vec<u32>>,
    prefix_blocks: Option<capsim_trace::ListColumn>,
}

impl Rows {
    fn of(trace: &Trace) -> Rows {
        Rows {
            arrival_ns: trace.arrival_ns().to_vec(),
            input_tokens: trace.input_tokens().to_vec(),
            output_tokens: trace.output_tokens().map(<[u32]>::to_vec),
            prefix_blocks: trace.prefix_blocks().cloned(),
        }
    }

    fn len(&self) -> usize {
        self.arrival_ns.len()
    }
}

/// What every request task shares.
struct Context {
    client: HttpClient,
    prepared: Arc<Prepared>,
    options: EndpointOptions,
    /// The instant of the trace's first arrival.
    origin: Instant,
    first_arrival_ns: u64,
}

impl Context {
    /// Nanoseconds on the trace's timeline of `instant`.
    fn trace_ns(&self, instant: Instant) -> u64 {
        let since = instant.saturating_duration_since(self.origin).as_nanos() as u64;
        self.first_arrival_ns + since
    }
}

async fn prepare(
    client: &HttpClient,
    options: &EndpointOptions,
) -> Result<Prepared, EndpointError> {
    let base = options.base_url.trim_end_matches('/');
    let uri = |path: String| -> Result<Uri, EndpointError> {
        let url = format!("{base}{path}");
        url.parse().map_err(|_| EndpointError::BadUrl { url })
    };
    match options.protocol {
        Protocol::Kserve => {
            let model_uri = uri(format!("/v2/models/{}", options.model))?;
            let response = get_ok(client, &model_uri).await?;
            let metadata = ModelMetadata::parse(&response.body, &model_uri.to_string())?;
            Ok(Prepared::Kserve {
                metadata,
                infer: uri(format!("/v2/models/{}/infer", options.model))?,
            })
        }
        Protocol::Openai => {
            let models = uri("/v1/models".to_string())?;
            let response = get_ok(client, &models).await?;
            openai::check_model(&response, &models.to_string(), &options.model)?;
            let completions = uri("/v1/completions".to_string())?;
            let (prompt, warning) = prompt_form(client, &completions, options).await?;
            Ok(Prepared::Openai {
                completions,
                prompt,
                warning,
            })
        }
    }
}

/// Asks the server for a one-token completion of a one-token prompt given as token ids, and,
/// if it refuses, as text: the first form it takes (with text, the warning that the run's
/// input lengths are approximate); both refused is an error with the server's
/// word.
async fn prompt_form(
    client: &HttpClient,
    completions: &Uri,
    options: &EndpointOptions,
) -> Result<(openai::PromptForm, Option<String>), EndpointError> {
    use openai::PromptForm;
    let url = completions.to_string();
    let mut refusals = Vec::new();
    for form in [PromptForm::TokenIds, PromptForm::Text] {
        let body = openai::completion_body(&options.model, 1, 1, &[], options.vocab, 0, form);
        let answer =
            tokio::time::timeout(options.timeout, client.post_json(completions, body, |_| {}))
                .await
                .map_err(|_| FailReason::Timeout)
                .and_then(|r| r);
        let response = answer.map_err(|reason| EndpointError::Unreachable {
            url: url.clone(),
            reason: reason.label(),
        })?;
        if (200..300).contains(&response.status) {
            let warning = (form == PromptForm::Text).then(|| {
                format!(
                    "{url} refuses a prompt of token ids ({}); text prompts of one one-letter \
                     word per input token were sent instead, so input lengths are exact only \
                     where each word is one token of the server's tokenizer",
                    refusals[0]
                )
            });
            return Ok((form, warning));
        }
        let said: String = String::from_utf8_lossy(&response.body)
            .chars()
            .take(120)
            .collect();
        refusals.push(format!("HTTP {}: {said}", response.status));
    }
    Err(EndpointError::Protocol {
        url,
        message: format!(
            "the server refuses a one-token completion with the prompt as token ids ({}) and as \
             text ({})",
            refusals[0], refusals[1]
        ),
    })
}

/// Scrapes the server's metrics at every multiple of `every` from the run's origin, and once
/// more when the run has finished. A scrape that fails mid-run is skipped (the column shows
/// the previous value).
async fn scrape_loop(
    context: &Context,
    uri: &Uri,
    every: Duration,
    mut finished: tokio::sync::watch::Receiver<bool>,
) -> Vec<metrics::Scrape> {
    let mut scrapes = Vec::new();
    let mut next = context.origin;
    loop {
        let last = tokio::select! {
            () = tokio::time::sleep_until(next.into()) => false,
            _ = finished.changed() => true,
        };
        if let Ok(values) = scrape(&context.client, uri, &context.options.model).await {
            scrapes.push(metrics::Scrape {
                at_ns: context.trace_ns(Instant::now()),
                values,
            });
        }
        if last {
            return scrapes;
        }
        next += every;
    }
}

/// One scrape of `uri`, parsed.
async fn scrape(
    client: &HttpClient,
    uri: &Uri,
    model: &str,
) -> Result<std::collections::BTreeMap<String, (metrics::Kind, f64)>, EndpointError> {
    let response = client
        .get(uri)
        .await
        .map_err(|reason| EndpointError::Unreachable {
            url: format!("{uri} (--metrics-url)"),
            reason: reason.label(),
        })?;
    if response.status != 200 {
        return Err(EndpointError::Protocol {
            url: uri.to_string(),
            message: format!("--metrics-url answered HTTP {}", response.status),
        });
    }
    metrics::parse(&String::from_utf8_lossy(&response.body), model).map_err(|message| {
        EndpointError::Protocol {
            url: uri.to_string(),
            message: format!("not Prometheus text: {message}"),
        }
    })
}

/// `GET uri`, answered with 200: else [`EndpointError::Unreachable`] (no answer) or
/// [`EndpointError::UnknownModel`] (another status, with the start of its body).
async fn get_ok(client: &HttpClient, uri: &Uri) -> Result<Response, EndpointError> {
    let url = uri.to_string();
    let response = client
        .get(uri)
        .await
        .map_err(|reason| EndpointError::Unreachable {
            url: url.clone(),
            reason: reason.label(),
        })?;
    if response.status != 200 {
        return Err(EndpointError::UnknownModel {
            url,
            status: response.status,
            body: String::from_utf8_lossy(&response.body)
                .chars()
                .take(300)
                .collect(),
        });
    }
    Ok(response)
}

/// Open loop, on a thread of its own: the runtime's timer ticks in milliseconds, a thread's
/// sleep is good to tens of microseconds. Each request's task is started [`PREPARE_AHEAD`]
/// before its time, to build its body, and released at its time.
fn schedule_open(
    context: &Arc<Context>,
    rows: &Arc<Rows>,
    runtime: &tokio::runtime::Handle,
    stop: &AtomicBool,
    results: &mpsc::UnboundedSender<Measured>,
) {
    let intended = |row: usize| {
        context.origin + Duration::from_nanos(rows.arrival_ns[row] - context.first_arrival_ns)
    };
    let n = rows.len();
    let mut waiting: VecDeque<oneshot::Sender<()>> = VecDeque::new();
    let (mut prepared, mut released) = (0, 0);
    while released < n && !stop.load(Ordering::Relaxed) {
        // The next thing to do: start the next task, or release the oldest started one.
        if prepared < n && intended(prepared) - PREPARE_AHEAD <= intended(released) {
            sleep_until(intended(prepared) - PREPARE_AHEAD);
            let (go, ready) = oneshot::channel();
            let (context, rows, results) = (context.clone(), rows.clone(), results.clone());
            let (row, at) = (prepared, intended(prepared));
            runtime.spawn(async move {
                if let Some(m) = send(&context, &rows, row, at, Start::On(ready)).await {
                    let _ = results.send(m);
                }
            });
            waiting.push_back(go);
            prepared += 1;
        } else {
            sleep_until(intended(released));
            let go = waiting
                .pop_front()
                .expect("a request is started before its time");
            let _ = go.send(());
            released += 1;
        }
    }
}

/// Sleeps the thread until `deadline`: the kernel's sleep while more than 200 µs remain, then
/// short yields.
fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        let left = deadline - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::thread::yield_now();
        }
    }
}

/// A closed-loop client: takes the next request, sends it when ready, waits for the answer and
/// its think time, and so on until the trace is used up (or Ctrl-C).
async fn client_loop(
    context: &Context,
    rows: &Rows,
    next: &AtomicUsize,
    think_time: Duration,
    stop: &AtomicBool,
    results: &mpsc::UnboundedSender<Measured>,
) {
    let mut ready = Instant::now().max(context.origin);
    while !stop.load(Ordering::Relaxed) {
        let row = next.fetch_add(1, Ordering::Relaxed);
        if row >= rows.len() {
            return;
        }
        let Some(done) = send(context, rows, row, ready, Start::At).await else {
            return;
        };
        ready = context.origin
            + Duration::from_nanos(done.record.response_ns - context.first_arrival_ns)
            + think_time;
        let _ = results.send(done);
    }
}

/// When a request's task sends it.
enum Start {
    /// At its intended time, by the runtime's timer.
    At,
    /// When the scheduler says so (dropped: never).
    On(oneshot::Receiver<()>),
}

/// Waits until `intended`, if it is still ahead. A closed loop's next request is due when the
/// last answer came (with no think time): already past, and the runtime's timer, which ticks by
/// the millisecond, would hold it up to a millisecond more (measured: 1.3 ms over the server's
/// time at one client, against 0.3 ms open loop).
async fn wait_until(intended: Instant) {
    if intended > Instant::now() {
        tokio::time::sleep_until(intended.into()).await;
    }
}

/// Sends trace row `row` at `intended` (or when `start` releases it) and measures it; `None`
/// when the run stopped before its time.
async fn send(
    context: &Context,
    rows: &Rows,
    row: usize,
    intended: Instant,
    start: Start,
) -> Option<Measured> {
    let options = &context.options;
    let input_tokens = rows.input_tokens[row];
    let output_tokens = rows.output_tokens.as_ref().map_or(0, |o| o[row]);
    let seed = options.seed ^ (row as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let (uri, body) = match context.prepared.as_ref() {
        Prepared::Kserve { metadata, infer } => (
            infer,
            metadata.infer_body(
                row as u64,
                input_tokens.min(options.max_input_tokens),
                options.vocab,
                seed,
            ),
        ),
        Prepared::Openai {
            completions,
            prompt,
            ..
        } => {
            let prefix = rows.prefix_blocks.as_ref().map_or(&[][..], |p| p.get(row));
            (
                completions,
                openai::completion_body(
                    &options.model,
                    input_tokens,
                    output_tokens,
                    prefix,
                    options.vocab,
                    seed,
                    *prompt,
                ),
            )
        }
    };
    match start {
        Start::At => wait_until(intended).await,
        Start::On(go) => go.await.ok()?,
    }
    let sent = Instant::now();
    let mut record = RequestRecord::new(row as u32, 1, context.trace_ns(intended));
    record.input_tokens = input_tokens;
    record.output_tokens = output_tokens;
    let mut token_times: Vec<Instant> = Vec::new();
    let streaming = matches!(context.prepared.as_ref(), Prepared::Openai { .. });
    let mut events = openai::EventSplitter::default();
    let exchange = context
        .client
        .post_json(uri, body.clone(), |chunk: &Bytes| {
            if streaming {
                let now = Instant::now();
                for _ in 0..events.tokens_in(chunk) {
                    token_times.push(now);
                }
            }
        });
    let outcome = match tokio::time::timeout(options.timeout, exchange).await {
        Err(_) => Err(FailReason::Timeout),
        Ok(Err(reason)) => Err(reason),
        Ok(Ok(response)) if !(200..300).contains(&response.status) => {
            Err(FailReason::Http(response.status))
        }
        Ok(Ok(_)) if streaming => events.finish().map(|tokens| {
            record.output_tokens = tokens;
        }),
        Ok(Ok(_)) => Ok(()),
    };
    let done = Instant::now();
    record.response_ns = context.trace_ns(done);
    let mut token_gaps_ns = Vec::new();
    match outcome {
        Ok(()) => {
            record.outcome = Outcome::Completed;
            if let (Some(first), Some(last)) = (token_times.first(), token_times.last()) {
                record.first_token_ns = context.trace_ns(*first);
                record.exec_end_ns = context.trace_ns(*last);
                record.response_ns = record.exec_end_ns;
                token_gaps_ns = token_times
                    .windows(2)
                    .map(|w| (w[1] - w[0]).as_nanos() as u64)
                    .collect();
            }
        }
        Err(reason) => record.outcome = Outcome::Failed(reason),
    }
    debug_assert!(record.first_token_ns == NONE || record.first_token_ns <= record.response_ns);
    Some(Measured {
        schedule_delay_ns: sent.saturating_duration_since(intended).as_nanos() as u64,
        sent_ns: context.trace_ns(sent),
        record,
        token_gaps_ns,
    })
}
