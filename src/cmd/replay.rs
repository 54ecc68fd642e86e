//! `capsim replay --live`: run a trace in wall time through a real in-process server (arrival
//! timer, queue, dynamic batcher, ONNX Runtime sessions); `capsim replay --endpoint URL`: send it
//! to a real server over HTTP (`capsim_endpoint`). Both write the same files as
//! `capsim simulate`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use capsim_calibrate::check_model_file;
use capsim_calibrate::live::{LiveRequest, replay, timeseries_of};
use capsim_endpoint::{EndpointOptions, LoadMode, Protocol, Reporting};
use capsim_sim::Scenario;
use capsim_sim::output::{write_requests_parquet, write_summary_json, write_timeseries_parquet};
use capsim_sim::quantity::parse_duration_ns;
use clap::Args;

use super::BadInput;
use super::shared::grid::parse_warmup;
use super::shared::runtime::{load_runtime, user_facing};
use super::shared::server::{ProtocolArg, ServerArgs, live_interval_ns, live_summary};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// Run in wall time through a real in-process server (ONNX Runtime).
    #[arg(long, conflicts_with = "endpoint")]
    pub live: bool,
    /// Send the trace to a running server at this URL (`http://HOST:PORT`), in the trace's time.
    #[arg(long, value_name = "URL")]
    pub endpoint: Option<String>,
    /// With --endpoint: the server's protocol.
    #[arg(long, value_enum, default_value = "kserve")]
    pub protocol: ProtocolArg,
    /// With --endpoint: closed loop with this many clients (default: the scenario's `[load]`,
    /// else open loop, each request at its trace arrival).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u32>,
    /// With --concurrency: pause between an answer and the client's next request.
    #[arg(long, value_name = "DURATION", default_value = "0s")]
    pub think_time: String,
    /// With --endpoint: the server's Prometheus metrics (e.g. Triton's
    /// `http://127.0.0.1:8002/metrics`), scraped every timeseries interval into
    /// timeseries.parquet (`server:NAME` columns) and the summary (`server_metrics`).
    #[arg(long, value_name = "URL")]
    pub metrics_url: Option<String>,
    /// With --endpoint: a request not answered this long after its send fails as `timeout`.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub timeout: String,
    #[command(flatten)]
    pub server: ServerArgs,
    /// Longest input the model takes; longer trace inputs are cut to it (and counted). With
    /// --endpoint, for the KServe protocol only.
    #[arg(long, default_value_t = 512, value_name = "TOKENS")]
    pub max_length: u32,
    /// Integer (token id) inputs are drawn below this.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub vocab: u64,
    /// Seed of the input data (recorded in the summary).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Exclude a warm-up from the statistics, as `simulate --warmup` does: a duration of the
    /// trace (`2s`) or a request count (`1000`). Those requests are still sent, written to
    /// requests.parquet and counted.
    #[arg(long, value_name = "DURATION|COUNT")]
    pub warmup: Option<String>,
    /// Output directory (created if missing).
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: PathBuf,
}

impl ReplayArgs {
    fn protocol_is_kserve(&self) -> bool {
        matches!(self.protocol, ProtocolArg::Kserve)
    }
}

pub fn run(args: ReplayArgs) -> Result<()> {
    if let Some(url) = &args.endpoint {
        return run_endpoint(&args, url);
    }
    if !args.live {
        return Err(BadInput(
            "capsim replay needs --live (a real in-process server) or --endpoint URL (a running server)"
                .into(),
        )
        .into());
    }
    let server = &args.server;
    let warmup = parse_warmup(args.warmup.as_deref())?;
    let scenario = server.served_scenario()?;
    let pool = &scenario.pools()[0];
    check_model_file(&server.model).map_err(user_facing)?;
    let loaded = server.input.load()?;
    eprintln!("{}", loaded.report_line());
    let trace = &loaded.trace;
    let outputs = trace.output_tokens();
    let requests: Vec<LiveRequest> = (0..trace.len())
        .map(|i| LiveRequest {
            arrival_ns: trace.arrival_ns()[i],
            input_tokens: trace.input_tokens()[i],
            output_tokens: outputs.map_or(0, |o| o[i]),
        })
        .collect();
    let runtime = load_runtime(server.ort_lib.as_deref())?;
    let config = server.live_config(args.max_length.max(1), args.vocab, args.seed);
    let span_s = requests.last().map_or(0.0, |r| r.arrival_ns as f64 * 1e-9);
    eprintln!(
        "replay: {} requests over {span_s:.1}s of wall time; queue, batcher and execution are live, \
         the scenario's network, gateway, pre- and post-processing are not reproduced",
        requests.len()
    );
    let live = replay(&runtime, pool, &requests, &config).map_err(user_facing)?;
    if live.truncated_inputs > 0 {
        eprintln!(
            "replay: {} inputs longer than --max-length {} were cut to it",
            live.truncated_inputs, config.max_length
        );
    }

    let summary = live_summary(&scenario, args.seed, &live, warmup);
    let model_instances = live.utilization.len() as u32;
    let timeseries = timeseries_of(&live, live_interval_ns(&scenario, &live), model_instances);
    if let Some(note) = summary.timeseries_note() {
        eprintln!("note: {note}");
    }

    super::create_out_dir(&args.out, "--out")?;
    write_requests_parquet(
        &args.out.join("requests.parquet"),
        &live.records,
        std::slice::from_ref(&pool.name),
    )?;
    write_summary_json(&args.out.join("summary.json"), &summary)?;
    write_timeseries_parquet(&args.out.join("timeseries.parquet"), &timeseries)?;
    print!("{}", summary.human());
    println!("wrote {}", args.out.display());
    Ok(())
}

/// `replay --endpoint`: the trace against a running server.
fn run_endpoint(args: &ReplayArgs, url: &str) -> Result<()> {
    let server = &args.server;
    let scenario = server
        .scenario
        .as_ref()
        .map(|path| Scenario::from_path(path).map_err(|e| BadInput(e.to_string())))
        .transpose()?;
    let duration = |flag: &str, text: &str| {
        parse_duration_ns(text)
            .map(Duration::from_nanos)
            .map_err(|e| BadInput(format!("{flag}: {e}")))
    };
    let think_time = duration("--think-time", &args.think_time)?;
    let mode = match (args.concurrency, &scenario) {
        (Some(0), _) => return Err(BadInput("--concurrency must be at least 1".into()).into()),
        (Some(concurrency), _) => LoadMode::Closed {
            concurrency,
            think_time,
        },
        (None, Some(s)) if s.load.mode == capsim_sim::scenario::LoadMode::Closed => {
            LoadMode::Closed {
                concurrency: s.load.concurrency,
                think_time: Duration::from_nanos(s.load.think_time.0),
            }
        }
        (None, _) => LoadMode::Open,
    };
    let options = EndpointOptions {
        base_url: url.to_string(),
        protocol: match args.protocol {
            ProtocolArg::Kserve => Protocol::Kserve,
            ProtocolArg::Openai => Protocol::Openai,
        },
        model: server.model.to_string_lossy().into_owned(),
        mode,
        timeout: duration("--timeout", &args.timeout)?,
        seed: args.seed,
        vocab: args.vocab,
        max_input_tokens: if args.protocol_is_kserve() {
            args.max_length.max(1)
        } else {
            u32::MAX
        },
        metrics_url: args.metrics_url.clone(),
        stop_after_timeouts: None,
    };
    let reporting = Reporting {
        warmup: parse_warmup(args.warmup.as_deref())?,
        ..scenario
            .as_ref()
            .map_or_else(Reporting::default, Reporting::of)
    };
    let loaded = server.input.load()?;
    eprintln!("{}", loaded.report_line());
    let cut = loaded
        .trace
        .input_tokens()
        .iter()
        .filter(|&&t| t > options.max_input_tokens)
        .count();
    if cut > 0 {
        eprintln!(
            "replay: {cut} inputs longer than --max-length {} are cut to it",
            options.max_input_tokens
        );
    }
    let run = capsim_endpoint::replay(&loaded.trace, &options, &reporting)
        .map_err(|e| BadInput(e.to_string()))?;
    for warning in &run.warnings {
        eprintln!("warning: {warning}");
    }
    print_load(&run.summary);
    if let Some(note) = run.summary.timeseries_note() {
        eprintln!("note: {note}");
    }
    super::create_out_dir(&args.out, "--out")?;
    write_requests_parquet(
        &args.out.join("requests.parquet"),
        &run.records,
        &["endpoint".to_string()],
    )?;
    write_summary_json(&args.out.join("summary.json"), &run.summary)?;
    write_timeseries_parquet(&args.out.join("timeseries.parquet"), &run.timeseries)?;
    print!("{}", run.summary.human());
    println!("wrote {}", args.out.display());
    Ok(())
}

/// How well the load generator kept to its schedule, printed, with a warning when it sent late.
fn print_load(summary: &capsim_sim::Summary) {
    if let Some(load) = &summary.load {
        eprintln!(
            "load: {} sent ({} not sent), requested {:.2} req/s, achieved {:.2} req/s; schedule delay p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            load.sent,
            load.not_sent,
            load.requested_rate_rps,
            load.achieved_rate_rps,
            load.schedule_delay_p50_ms,
            load.schedule_delay_p99_ms,
            load.schedule_delay_max_ms
        );
        if load.schedule_delay_p99_ms > 1.0 {
            eprintln!(
                "warning: the load generator sent 1% of its requests more than 1 ms late (p99 {:.3} ms): the latencies include the client's delay; use fewer requests per second or a quieter machine",
                load.schedule_delay_p99_ms
            );
        }
    }
}
