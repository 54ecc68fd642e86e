//! `capsim fit`: fits a scenario's service model to a measured per-request log: a
//! continuous-batching scenario's step time by simulation, a dynamic batcher's affine service
//! time from the log's execution times.

mod pooled;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use capsim_endpoint::triton::{ModelStats, ServerOverheads, ServerRequestTimes};
use capsim_fit::dynamic::{BatchLog, bootstrap_affine, fit_dynamic, read_batch_log};
use capsim_fit::meta::read_run_meta;
use capsim_fit::{
    FitConfig, FitResult, LogMap, MeasuredLog, bootstrap, compare, describe_intervals, fit,
    parse_log_format, read_log_as,
};
use capsim_report::plot::{CdfPlot, CdfSeries, PlotSize, draw_latency_cdf};
use capsim_sim::Scenario;
use clap::Args;

use super::BadInput;
use super::shared::triton_fit::fit_triton_stats;

/// Flags of `capsim fit`.
#[derive(Debug, Args)]
pub struct FitArgs {
    /// The scenario to fit (TOML, one pool). With `batcher.kind = "continuous"` its engine limits
    /// and KV cache are kept and its `[step_time]` becomes the fitted `linear` one; with a dynamic
    /// batcher its `[service]` becomes the fitted `affine` one with residuals. With several
    /// `--log`: once for all logs (one deployment), or once per log in the same order (each
    /// scenario one deployment).
    #[arg(long = "scenario", value_name = "S.toml", required = true)]
    pub scenarios: Vec<PathBuf>,
    /// The measured log, its format told by its content: vLLM per-request records (JSON lines:
    /// input_toks, output_toks, arrival_time, queued_ts, first_token_ts, last_token_ts),
    /// capsim's `requests.parquet` (a dynamic-batching fit needs its execution times: batch_id,
    /// batch_size, exec_start_ns, exec_end_ns), inference-perf's
    /// `per_request_lifecycle_metrics.json` or AIPerf's `profile_export.jsonl`.
    /// Given more than once, the runs are fitted together (the efficiencies shared, the
    /// overheads per deployment) and each is predicted from a fit of the others.
    #[arg(long = "log", value_name = "LOG", required = true)]
    pub logs: Vec<PathBuf>,
    // Read LOG as this format instead of the one its content shows (`format_help`).
    #[arg(long, value_name = "FORMAT", help = format_help())]
    pub format: Option<String>,
    /// Read LOG (CSV, JSON lines or Parquet) through this map of its columns:
    /// `arrival=COL[:UNIT],input_tokens=COL,output_tokens=COL` plus `first_token=COL[:UNIT],
    /// last_token=COL[:UNIT]` (timestamps) or `ttft=COL[:UNIT],e2e=COL[:UNIT]` (durations);
    /// UNIT is s (default; a timestamp that is Unix ms, us or ns by its magnitude is read so,
    /// with a note), ms, us or ns. Latencies count from the arrival.
    #[arg(long, value_name = "MAP")]
    pub map: Option<String>,
    /// Where to write the fitted scenario (required unless --predict); with several --log, a
    /// folder that gets one fitted scenario per deployment, named after its scenario file.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "FITTED.toml",
        required_unless_present = "predict"
    )]
    pub output: Option<PathBuf>,
    /// Fit nothing: replay the log through the scenario as it is (engine limits and KV cache
    /// from the run's meta.json, as a fit takes them) and print the same table. It is a
    /// prediction when none of the scenario's parameters came from this log (a bundle of
    /// operator timings, datasheet figures, other runs), a replay otherwise.
    #[arg(long)]
    pub predict: bool,
    /// Also write fit.txt (the table and the parameters) into this folder.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Seed of the simulations.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Bootstrap replicas over requests for the parameters' 5-95% intervals (0: none; each
    /// replica is one more fit). A dynamic-batching fit resamples batches and, being a least
    /// squares, always runs at least 200.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub bootstrap: usize,
    /// Most Nelder-Mead iterations of each start.
    #[arg(long, default_value_t = FitConfig::default().max_iterations)]
    pub max_iterations: u64,
    /// Nelder-Mead starts, run in parallel (1 to 8); the best is kept.
    #[arg(long, default_value_t = FitConfig::default().starts, value_name = "N")]
    pub starts: usize,
}

impl FitArgs {
    /// The scenario of a fit of one log.
    fn scenario(&self) -> &Path {
        &self.scenarios[0]
    }

    /// The log of a fit of one log.
    fn log(&self) -> &Path {
        &self.logs[0]
    }

    /// The fit's settings from the flags.
    pub(crate) fn config(&self) -> FitConfig {
        FitConfig {
            seed: self.seed,
            max_iterations: self.max_iterations,
            starts: self.starts,
            ..FitConfig::default()
        }
    }
}

/// Runs `capsim fit`.
pub fn run(args: FitArgs) -> Result<()> {
    if args.logs.len() > 1 || args.scenarios.len() > 1 {
        return pooled::run(&args);
    }
    let scenario = Scenario::from_path(args.scenario()).map_err(|e| BadInput(e.to_string()))?;
    if scenario.pools().len() == 1 && scenario.pools()[0].service_spec.is_some() {
        if args.predict {
            return Err(BadInput(
                "--predict compares a continuous-batching scenario with an LLM log; this scenario has a dynamic batcher's [service]".into(),
            )
            .into());
        }
        return run_dynamic(&scenario, &args);
    }
    let log = read_measured_log(&args, args.log())?;
    // The engine the log was served by: its limits and KV cache, where meta.json says.
    let mut scenario = scenario;
    let mut from_meta = String::new();
    if let Some(meta) = read_run_meta(args.log()).map_err(|e| BadInput(e.to_string()))? {
        for a in meta
            .apply(&mut scenario)
            .map_err(|e| BadInput(e.to_string()))?
        {
            from_meta.push_str(&format!(
                "from {}: {} = {} (the scenario had {})\n",
                meta.path.display(),
                a.key,
                a.value,
                a.was.as_deref().unwrap_or("the default")
            ));
        }
    }
    if args.predict {
        let comparison =
            compare(&scenario, &log, args.seed).map_err(|e| BadInput(e.to_string()))?;
        print!(
            "{from_meta}{}",
            comparison.describe(args.log(), args.scenario(), &log)
        );
        return Ok(());
    }
    let config = args.config();
    let result = fit(&scenario, &log, &config).map_err(|e| BadInput(e.to_string()))?;
    let intervals = bootstrap(&scenario, &log, &result, &config, args.bootstrap)
        .map_err(|e| BadInput(e.to_string()))?;
    let mut text = from_meta + &result.describe(args.log(), &log);
    if !intervals.is_empty() {
        text.push_str(&describe_intervals(&intervals, args.bootstrap));
    }
    print!("{text}");
    for warning in result.warnings() {
        eprintln!("warning: {warning}");
    }
    if let Some(dir) = write_outputs(&args, &fitted_toml(&result, &args)?, &text)? {
        draw_cdfs(&result, dir)?;
    }
    Ok(())
}

/// Writes the fitted scenario to `-o` and, with `--report DIR`, the fit's text to `DIR/fit.txt`;
/// returns the report folder when there is one.
/// The fitted scenario as TOML for the `-o` file ([`capsim_sim::build::toml_for_file`]).
fn toml_beside_output(scenario: &Scenario, args: &FitArgs) -> Result<String> {
    Ok(match args.output.as_deref() {
        Some(output) => capsim_sim::build::toml_for_file(scenario, output)?,
        // No -o: write_outputs refuses before anything is written.
        None => capsim_sim::build::toml_for_folder(scenario, Path::new("."))?,
    })
}

fn write_outputs<'a>(args: &'a FitArgs, fitted: &str, text: &str) -> Result<Option<&'a Path>> {
    let output = args
        .output
        .as_ref()
        .ok_or_else(|| BadInput("-o FITTED.toml is required to write the fit".into()))?;
    std::fs::write(output, fitted).with_context(|| format!("writing {}", output.display()))?;
    let Some(dir) = &args.report else {
        return Ok(None);
    };
    super::create_out_dir(dir, "--report")?;
    let path = dir.join("fit.txt");
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(Some(dir))
}

/// Bootstrap replicas of a dynamic-batching fit when `--bootstrap` asks for fewer.
const DYNAMIC_BOOTSTRAP: usize = 200;

/// The dynamic-batching fit: affine service time from the log's execution times.
fn run_dynamic(scenario: &Scenario, args: &FitArgs) -> Result<()> {
    let parquet = args
        .log()
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    let json = args
        .log()
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if args.map.is_none()
        && json
        && let Some(stats) = read_triton_stats(args.log())?
    {
        return run_triton(scenario, args, &stats);
    }
    if args.map.is_some() || !parquet {
        return Err(BadInput(format!(
            "{}: {} has a dynamic batcher, whose fit reads capsim's requests.parquet with its \
             execution times (batch_id, batch_size, exec_start_ns, exec_end_ns) or Triton's \
             statistics (.json); a per-request LLM log{} fits a scenario with \
             batcher.kind = \"continuous\"",
            args.log().display(),
            args.scenario().display(),
            if args.map.is_some() {
                " read through --map"
            } else {
                ""
            }
        ))
        .into());
    }
    let log = read_batch_log(args.log()).map_err(|e| BadInput(e.to_string()))?;
    let overheads = server_overheads(args.log(), &log)?;
    let mut scenario = scenario.clone();
    if let Some(o) = &overheads {
        o.apply(&mut scenario)
            .map_err(|e| BadInput(e.to_string()))?;
    }
    let scenario = &scenario;
    let config = args.config();
    let result = fit_dynamic(scenario, &log, &config).map_err(|e| BadInput(e.to_string()))?;
    // Resampling batches is cheap; a fit by simulation has no batches to resample.
    let replicas = args.bootstrap.max(DYNAMIC_BOOTSTRAP);
    let intervals = if result.by_simulation.is_some() {
        Vec::new()
    } else {
        bootstrap_affine(&log.batches, replicas, args.seed)
    };
    let mut text = result.describe(&intervals, replicas, args.log(), log.e2e_ns.len());
    if let Some(o) = &overheads {
        text.push_str(&o.describe());
    }
    print!("{text}");
    let how = match &result.by_simulation {
        None => format!(
            "by least squares\n# of the log's {} batch execution times; residuals are measured / \
             fitted per batch.\n",
            result.batches
        ),
        Some(_) => "by simulation\n# from the log's end-to-end (and queue) mean, p50 and p90: \
                    the log has no execution times; no residuals.\n"
            .to_string(),
    };
    let mut header = format!(
        "# Fitted by `capsim fit --scenario {} --log {}` (seed {}): [service] a, b, c {how}",
        args.scenario().display(),
        args.log().display(),
        args.seed,
    );
    if overheads.is_some() {
        header.push_str(
            "# [network] latency and [postprocess] base: the client's and the server's mean \
             time per request\n# (summary.json's server_metrics) less the server's queue and \
             compute.\n",
        );
    }
    for warning in result.warnings() {
        header.push_str(&format!("# WARNING: {warning}\n"));
        eprintln!("warning: {warning}");
    }
    write_outputs(
        args,
        &(header + &toml_beside_output(&result.scenario, args)?),
        &text,
    )?;
    Ok(())
}

/// The overheads of a run whose summary.json (beside `log`) holds Triton's request, queue and
/// compute counters; `None` without such a summary.
fn server_overheads(log_path: &Path, log: &BatchLog) -> Result<Option<ServerOverheads>> {
    let summary = log_path.with_file_name("summary.json");
    let Ok(bytes) = std::fs::read(&summary) else {
        return Ok(None);
    };
    let json: serde_json::Value = serde_json::from_slice(&bytes)
        .map_err(|e| BadInput(format!("{}: not JSON ({e})", summary.display())))?;
    let Some(metrics) = json.get("server_metrics").and_then(|m| m.as_object()) else {
        return Ok(None);
    };
    let metrics: std::collections::BTreeMap<String, f64> = metrics
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.as_f64()?)))
        .collect();
    let Some(server) = ServerRequestTimes::from_metrics(&metrics) else {
        return Ok(None);
    };
    Ok(ServerOverheads::new(&log.e2e_ns, server, summary))
}

/// Triton's model statistics in `path` (`GET /v2/models/NAME/stats`, whole or its one
/// `model_stats` entry as `scripts/triton.py stats` prints it); `None` when the JSON is not
/// Triton's.
fn read_triton_stats(path: &Path) -> Result<Option<ModelStats>> {
    let bytes = std::fs::read(path)
        .map_err(|e| BadInput(format!("{}: cannot read the log ({e})", path.display())))?;
    let name = path.display().to_string();
    if let Ok(stats) = ModelStats::parse(&bytes, &name) {
        return Ok(Some(stats));
    }
    Ok(serde_json::from_slice::<ModelStats>(&bytes).ok())
}

/// The fit to Triton's per-batch-size statistics: `a + b*size` on the mean compute time
/// (input, inference, output) of each size, weighted by its batches.
fn run_triton(scenario: &Scenario, args: &FitArgs, stats: &ModelStats) -> Result<()> {
    let fitted = fit_triton_stats(scenario, stats, &[], &args.log().display().to_string())?;
    let text = fitted.describe(&stats.name, args.log());
    print!("{text}");
    let header = fitted.toml_header(args.scenario(), args.log());
    write_outputs(
        args,
        &(header + &toml_beside_output(&fitted.scenario, args)?),
        &text,
    )?;
    Ok(())
}

/// `--format`'s help: the formats fit reads, from the trace crate's table, each with its line.
fn format_help() -> String {
    let formats: Vec<String> = capsim_trace::Format::all()
        .filter(|f| f.has_latencies())
        .map(|f| format!("{} ({})", f.name(), f.describe()))
        .collect();
    format!(
        "Read LOG as this format instead of the one its content shows: {}",
        formats.join(", ")
    )
}

/// The measured log at `path`, read with `--map` and `--format` (bad input names the flag's
/// value or the file).
fn read_measured_log(args: &FitArgs, path: &Path) -> Result<MeasuredLog> {
    let map = args
        .map
        .as_deref()
        .map(LogMap::parse)
        .transpose()
        .map_err(|e| BadInput(e.to_string()))?;
    let format = args
        .format
        .as_deref()
        .map(parse_log_format)
        .transpose()
        .map_err(|e| BadInput(e.to_string()))?;
    Ok(read_log_as(path, map.as_ref(), format).map_err(|e| BadInput(e.to_string()))?)
}

fn fitted_toml(result: &FitResult, args: &FitArgs) -> Result<String> {
    let header = result.toml_header(args.scenario(), args.log(), args.seed);
    Ok(header + &toml_beside_output(&result.scenario, args)?)
}

/// Writes `ttft_cdf.png`, `tpot_cdf.png` and `e2e_cdf.png`: each latency's CDF, measured and
/// fitted, into `dir`.
fn draw_cdfs(result: &FitResult, dir: &Path) -> Result<()> {
    let (m, s) = (&result.measured_requests, &result.simulated_requests);
    for (name, title, measured, simulated) in [
        ("ttft", "TTFT", &m.ttft_ns, &s.ttft_ns),
        ("tpot", "TPOT", &m.tpot_ns, &s.tpot_ns),
        ("e2e", "end-to-end latency", &m.e2e_ns, &s.e2e_ns),
    ] {
        let ms =
            |v: &[f64]| -> Vec<f64> { v.iter().filter(|x| !x.is_nan()).map(|x| x / 1e6).collect() };
        let plot = CdfPlot {
            title: format!("{title}: measured and fitted"),
            series: vec![
                CdfSeries {
                    label: "measured".into(),
                    latencies_ms: ms(measured),
                },
                CdfSeries {
                    label: "fitted".into(),
                    latencies_ms: ms(simulated),
                },
            ],
            slo_ms: None,
        };
        let path = dir.join(format!("{name}_cdf.png"));
        draw_latency_cdf(&plot, PlotSize::DEFAULT, &path)
            .with_context(|| format!("drawing {}", path.display()))?;
    }
    Ok(())
}
