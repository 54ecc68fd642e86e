//! capsim's side that talks to real servers: replays a trace against an HTTP endpoint in the
//! trace's time and measures every request, writing what `capsim simulate` writes.
//!
//! [`replay`] checks the endpoint and the model, sends each request of the trace at its arrival
//! (open loop, latency from the intended send time) or from a fixed number of clients (closed
//! loop), and returns the per-request records, the summary (with a [`LoadSummary`] of how well
//! the generator kept to its schedule) and the timeseries, in the simulator's types, so the
//! report, the notebooks and `validate` read a measured run and a simulated one alike. Two
//! protocols: KServe v2 / Triton HTTP (`kserve.rs`) and OpenAI-compatible streamed completions
//! (`openai.rs`). Every request sent is accounted for: completed, or failed with its reason
//! (connection, timeout, HTTP status, cut stream).
//!
//! The validation wing (`capsim validate`) lives here too, in one private module tree whose
//! face is re-exported below: against a running server, [`EndpointScenario`] checks and builds
//! the scenario, and a [`Validation`] runs each load against the server and its simulations
//! (the scenario's service model; the compute times the server reported, [`triton`]'s
//! statistics made a service model by [`measured_service::MeasuredService`]; the run's own
//! timeline from Triton's trace) into a [`LoadValidation`] with its table, and an
//! [`EndpointValidation`] in the end; against capsim's own live server (ONNX Runtime, which this
//! crate does not load: the command implements [`LiveServer`] and [`MachineSpeed`] for it), a
//! [`LiveValidation`] runs each load into a [`LiveLoad`] with its figures, batches and level
//! ([`figure_rows`], [`BatchReport`], [`Leveled`]).
//!
//! ```no_run
//! use capsim_endpoint::{EndpointOptions, Protocol, Reporting, replay};
//! let (trace, _) = capsim_trace::read_trace(&["traces/demo.parquet".into()], &Default::default())?;
//! let options = EndpointOptions::new("http://127.0.0.1:8000", Protocol::Kserve, "text_classifier");
//! let run = replay(&trace, &options, &Reporting::default())?;
//! println!("{} completed", run.summary.requests.completed);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

pub mod batch_spread;
pub mod host_cpu;
mod http;
mod kserve;
pub mod measured_service;
pub mod metrics;
pub mod missed_release;
mod openai;
mod replay;
mod through_server;
mod validation;

use std::time::Duration;

use capsim_sim::record::RequestRecord;
use capsim_sim::summary::{LoadSummary, Summary, SummaryBuilder};
use capsim_sim::timeseries::{DEFAULT_MAX_ROWS, Timeseries, interval_for, sample_records};
use capsim_sim::{Scenario, Warmup};
use capsim_trace::{Trace, percentile_sorted};

pub use replay::{Measured, PREPARE_AHEAD, Replayed};
pub use through_server::{
    ClosedLoopRun, LIGHT_RUN_NS, LightRun, MAX_FAILED_SHARE, OPEN_FRACTIONS,
    OPEN_LOOP_MIN_REQUESTS, OpenRun, SPEED_WINDOW, ServerCalibration, WARMUP_REQUESTS,
    calibrate_through_server, default_concurrencies,
};
pub use validation::{
    BatchReport, BatchShares, CalibratedCapacity, ComputeDrift, EndpointRun, EndpointScenario,
    EndpointValidation, FigureRow, Figures, Leveled, LiveError, LiveInputs, LiveLoad, LiveRecords,
    LiveServer, LiveValidation, LoadValidation, MachineSpeed, Measured as MeasuredFigures,
    MeasuredPath, ReferenceShape, RunService, SeedSpread, ServerBatchTime, ServerTimelineReport,
    ServiceModel, Simulated, SpeedChange, SpeedWindow, Validation, ValidationError, check_loads,
    figure_rows, figures_header, figures_text, measurement_mismatch, scaled_trace, served_lengths,
    triton,
};

/// The protocol a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// KServe v2 / Triton HTTP: `GET /v2/models/NAME`, `POST /v2/models/NAME/infer`.
    Kserve,
    /// OpenAI-compatible streamed completions: `GET /v1/models`, `POST /v1/completions`.
    Openai,
}

/// When requests are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadMode {
    /// Each at its trace arrival, whatever the server is doing.
    Open,
    /// `concurrency` clients each send the next request when their previous one is answered,
    /// after `think_time` (the scenario's `[load]` closed loop).
    Closed {
        /// Clients.
        concurrency: u32,
        /// Pause between an answer and the client's next request.
        think_time: Duration,
    },
}

/// What to replay against, and how.
#[derive(Debug, Clone)]
pub struct EndpointOptions {
    /// `http://HOST:PORT` (plain HTTP).
    pub base_url: String,
    /// The server's protocol.
    pub protocol: Protocol,
    /// The model's name on the server.
    pub model: String,
    /// Open or closed loop.
    pub mode: LoadMode,
    /// A request not answered this long after its send fails as `timeout`.
    pub timeout: Duration,
    /// Seed of the request data.
    pub seed: u64,
    /// Integer inputs and prompt token ids are drawn below this.
    pub vocab: u64,
    /// KServe: longest sequence a model takes; longer trace inputs are cut to it (as a
    /// tokenizer's max length does). Unlimited by default.
    pub max_input_tokens: u32,
    /// The server's Prometheus metrics (`http://HOST:PORT/metrics`), scraped every timeseries
    /// interval while the run goes, and once more at its end.
    pub metrics_url: Option<String>,
    /// Once this many requests have timed out, no more are sent (a closed loop's client may
    /// send one more before it sees the stop; those not sent are counted as not sent): a hung
    /// server ends a run in a few timeouts instead of one per request.
    /// `None`: every request is sent.
    pub stop_after_timeouts: Option<u64>,
}

impl EndpointOptions {
    /// Open loop, a 60 s timeout, seed 0 and ids below 1000.
    pub fn new(base_url: &str, protocol: Protocol, model: &str) -> EndpointOptions {
        EndpointOptions {
            base_url: base_url.to_string(),
            protocol,
            model: model.to_string(),
            mode: LoadMode::Open,
            timeout: Duration::from_secs(60),
            seed: 0,
            vocab: 1000,
            max_input_tokens: u32::MAX,
            metrics_url: None,
            stop_after_timeouts: None,
        }
    }
}

/// How the measured run is summarized (from the scenario, when one is given).
#[derive(Debug, Clone)]
pub struct Reporting {
    /// Name written into the summary.
    pub name: String,
    /// End-to-end SLO, in nanoseconds, for goodput.
    pub slo_latency_ns: Option<u64>,
    /// Time-to-first-token SLO (streamed protocols).
    pub slo_ttft_ns: Option<u64>,
    /// Time-per-output-token SLO (streamed protocols).
    pub slo_tpot_ns: Option<u64>,
    /// Timeseries interval before any widening, in nanoseconds.
    pub interval_ns: u64,
    /// Most timeseries rows.
    pub max_rows: u32,
    /// Requests left out of the summary's statistics (still sent, recorded and counted), as
    /// `capsim simulate --warmup` leaves them out of a simulation's.
    pub warmup: Warmup,
}

impl Reporting {
    /// How a measured run against an endpoint is summarized: the scenario's name, SLOs and
    /// timeseries.
    pub fn of(scenario: &Scenario) -> Reporting {
        let slo = scenario.slo.as_ref();
        Reporting {
            name: scenario.name.clone(),
            slo_latency_ns: slo.and_then(|s| s.latency).map(|d| d.0),
            slo_ttft_ns: slo.and_then(|s| s.ttft).map(|d| d.0),
            slo_tpot_ns: slo.and_then(|s| s.tpot).map(|d| d.0),
            interval_ns: scenario.timeseries.interval.0,
            max_rows: scenario.timeseries.max_rows,
            warmup: Warmup::None,
        }
    }
}

impl Default for Reporting {
    fn default() -> Reporting {
        Reporting {
            name: "endpoint".to_string(),
            slo_latency_ns: None,
            slo_ttft_ns: None,
            slo_tpot_ns: None,
            interval_ns: 1_000_000_000,
            max_rows: DEFAULT_MAX_ROWS,
            warmup: Warmup::None,
        }
    }
}

/// A measured run in the simulator's output types.
#[derive(Debug, Clone)]
pub struct MeasuredRun {
    /// One record per request sent, in trace order.
    pub records: Vec<RequestRecord>,
    /// The summary, with its `load` section.
    pub summary: Summary,
    /// Arrivals, finishes and requests in the system per interval.
    pub timeseries: Timeseries,
    /// What the reader of the run's numbers should know (for example, that a server refused
    /// token ids and the prompts' lengths are approximate).
    pub warnings: Vec<String>,
}

/// Why a replay could not run. Failures of single requests are not errors: they are counted.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The URL does not parse.
    #[error("endpoint URL {url:?} is not valid: write it as http://HOST:PORT")]
    BadUrl {
        /// As given (with the path appended).
        url: String,
    },
    /// Nothing answered.
    #[error(
        "cannot reach {url} ({reason}): is the server running and listening there? check --endpoint"
    )]
    Unreachable {
        /// What was asked.
        url: String,
        /// How it failed.
        reason: String,
    },
    /// The server answered, but not for this model.
    #[error(
        "{url} answered HTTP {status} ({body}): check --model and that the server has loaded it"
    )]
    UnknownModel {
        /// What was asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of its body.
        body: String,
    },
    /// The server's answer is not what the protocol says.
    #[error("{url}: {message}")]
    Protocol {
        /// What was asked.
        url: String,
        /// What is wrong.
        message: String,
    },
    /// A server's trace file cannot be read.
    #[error("cannot read the server's trace {}: {message}", path.display())]
    ServerTrace {
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An earlier calibration cannot be pooled with this one (`calibrate --endpoint --pool`).
    #[error("cannot pool the calibration {}: {message}", path.display())]
    Pool {
        /// The earlier calibration's file.
        path: std::path::PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The async runtime could not start.
    #[error("cannot start the load generator's runtime: {0}")]
    Runtime(#[from] std::io::Error),
}

/// Replays `trace` against the endpoint of `options` and summarizes the run with `reporting`.
/// Blocks until every request sent is answered or has failed (or, after Ctrl-C, until those in
/// flight are).
pub fn replay(
    trace: &Trace,
    options: &EndpointOptions,
    reporting: &Reporting,
) -> Result<MeasuredRun, EndpointError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let scrape_every = Duration::from_nanos(reporting.interval_ns.max(1_000_000));
    let replayed = runtime.block_on(replay::run(trace, options, scrape_every))?;
    Ok(measure(replayed, options, reporting))
}

/// Turns what was measured into the simulator's outputs.
fn measure(replayed: Replayed, options: &EndpointOptions, reporting: &Reporting) -> MeasuredRun {
    let mut builder = SummaryBuilder::new(reporting.slo_latency_ns, [false; 8]);
    if options.protocol == Protocol::Openai {
        builder = builder.with_token_metrics(reporting.slo_ttft_ns, reporting.slo_tpot_ns);
    }
    let mut in_system_area_ns = 0u128;
    for m in &replayed.requests {
        let measured = reporting
            .warmup
            .measures(u64::from(m.record.request), m.record.arrival_ns);
        builder.add(&m.record, measured);
        if measured {
            for &gap in &m.token_gaps_ns {
                builder.add_inter_token_ns(gap);
            }
        }
        in_system_area_ns += u128::from(m.record.latency_ns());
    }
    let end_ns = replayed.end_ns;
    let mean_in_system = if end_ns == 0 {
        0.0
    } else {
        in_system_area_ns as f64 / end_ns as f64
    };
    let mut summary = builder.finish(
        &reporting.name,
        options.seed,
        Vec::new(),
        mean_in_system,
        end_ns,
    );
    let records: Vec<RequestRecord> = replayed.requests.iter().map(|m| m.record).collect();
    let interval_ns = interval_for(end_ns, reporting.interval_ns, reporting.max_rows);
    summary.set_timeseries_interval(interval_ns, reporting.interval_ns);
    summary.load = Some(load_summary(&replayed));
    summary.server_metrics = metrics::summarize(&replayed.scrapes);
    let mut timeseries = sample_records(&records, end_ns, interval_ns, 0);
    timeseries.server_metrics = metrics::columns(&replayed.scrapes, &timeseries.time_ns);
    MeasuredRun {
        records,
        summary,
        timeseries,
        warnings: replayed.warnings,
    }
}

/// How well the sends kept to their schedule.
fn load_summary(replayed: &Replayed) -> LoadSummary {
    let mut delays_ms: Vec<f64> = replayed
        .requests
        .iter()
        .map(|m| m.schedule_delay_ns as f64 * 1e-6)
        .collect();
    delays_ms.sort_by(f64::total_cmp);
    let delay_ms = |q: f64| {
        if delays_ms.is_empty() {
            0.0
        } else {
            percentile_sorted(&delays_ms, q)
        }
    };
    LoadSummary {
        sent: replayed.requests.len() as u64,
        not_sent: replayed.not_sent,
        requested_rate_rps: rate_rps(replayed.requests.iter().map(|m| m.record.arrival_ns)),
        achieved_rate_rps: rate_rps(replayed.requests.iter().map(|m| m.sent_ns)),
        schedule_delay_p50_ms: delay_ms(0.5),
        schedule_delay_p99_ms: delay_ms(0.99),
        schedule_delay_max_ms: delay_ms(1.0),
    }
}

/// Events per second over the span of `times_ns` (the gaps between the first and the last): 0
/// for fewer than two distinct times.
fn rate_rps(times_ns: impl Iterator<Item = u64>) -> f64 {
    let (count, first, last) = times_ns.fold((0u64, u64::MAX, 0u64), |(n, lo, hi), t| {
        (n + 1, lo.min(t), hi.max(t))
    });
    if count < 2 || last == first {
        0.0
    } else {
        (count - 1) as f64 / ((last - first) as f64 * 1e-9)
    }
}
