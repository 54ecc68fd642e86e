//! `capsim trace inspect | convert | synth`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use capsim_trace::{
    Arrivals, Distribution, Format, IngestOptions, SizeDist, Sizes, Summary, SynthSpec, Transforms,
    parse_duration_ns,
};
use clap::{Args, Subcommand};

use super::BadInput;
use crate::input::{LoadedTrace, TraceInput};

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Print a trace's load, burstiness and size figures.
    Inspect(InspectArgs),
    /// Convert traces (CSV, JSONL, Parquet, presets) to canonical Parquet.
    Convert(ConvertArgs),
    /// Generate a synthetic trace, deterministic per seed.
    Synth(SynthArgs),
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub input: TraceInput,
    /// Print JSON (summary and ingest report) instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ConvertArgs {
    #[command(flatten)]
    pub input: TraceInput,
    /// Output Parquet file.
    #[arg(short = 'o', long = "out", value_name = "OUT.parquet")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct SynthArgs {
    /// Output Parquet file.
    #[arg(short = 'o', long = "out", value_name = "OUT.parquet")]
    pub out: PathBuf,
    /// Arrival process: poisson, gamma:cv=C, constant, diurnal:period=P,amplitude=A,
    /// bursty:ratio=R,on=D,off=D.
    #[arg(long, default_value = "poisson", value_name = "PROCESS")]
    pub arrivals: String,
    /// Mean arrival rate in requests per second (`5` or `5rps`).
    #[arg(long, default_value = "10", value_name = "RATE")]
    pub rate: String,
    /// Length of the trace (e.g. `5m`); stops at whichever of --duration and --count is first.
    #[arg(long, value_name = "DURATION")]
    pub duration: Option<String>,
    /// Number of requests.
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Input sizes: const:N, uniform:LO..HI, lognormal:mean=M,cv=C.
    #[arg(long, default_value = "lognormal:mean=1000,cv=1", value_name = "DIST")]
    pub input_tokens: String,
    /// Output sizes, as --input-tokens, or `none` for a trace without output tokens.
    #[arg(long, default_value = "lognormal:mean=200,cv=1", value_name = "DIST")]
    pub output_tokens: String,
    /// Resample (input, output) sizes jointly from this trace instead of --input/--output-tokens.
    #[arg(long, value_name = "TRACE")]
    pub sizes_from: Option<PathBuf>,
    /// Format of the --sizes-from trace, as for `trace inspect` (detected when omitted).
    #[arg(long, value_name = "FORMAT", requires = "sizes_from")]
    pub format: Option<String>,
    /// Column mapping of the --sizes-from trace, as for `trace inspect`, e.g.
    /// `arrival=ts:s,input_tokens=prompt,output_tokens=completion`; repeatable.
    #[arg(
        long = "map",
        value_name = "KEY=COL[:UNIT],...",
        requires = "sizes_from"
    )]
    pub maps: Vec<String>,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

pub fn run(cmd: TraceCommand) -> Result<()> {
    match cmd {
        TraceCommand::Inspect(a) => inspect(&a),
        TraceCommand::Convert(a) => convert(&a),
        TraceCommand::Synth(a) => synth(&a),
    }
}

fn inspect(args: &InspectArgs) -> Result<()> {
    let loaded = args.input.load()?;
    let summary = Summary::of(&loaded.trace);
    if args.json {
        let doc = serde_json::json!({ "summary": summary, "ingest": loaded.report });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", render(&args.input, &loaded, &summary));
    }
    Ok(())
}

fn render(input: &TraceInput, loaded: &LoadedTrace, s: &Summary) -> String {
    let mut out = String::new();
    let mut line = |label: &str, text: String| out.push_str(&format!("{label:<11} {text}\n"));
    let paths: Vec<String> = input
        .all_paths()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    line("trace", paths.join(" "));
    line("rows", loaded.report_line());
    let start = s
        .start
        .as_deref()
        .map(|t| format!(", from {t}"))
        .unwrap_or_default();
    line(
        "span",
        format!(
            "{}{start}",
            capsim_trace::quantity::format_seconds_human(s.span_s)
        ),
    );
    line(
        "time 0",
        format!("arrivals are {}", loaded.report.time_origin.describe()),
    );
    line(
        "rate",
        format!(
            "mean {} req/s; peak {} req/s (1 s window), {} req/s ({})",
            s.mean_rate_rps.map_or("-".to_string(), rate),
            s.peak_rate_1s_rps,
            fmt_num(s.peak_rate_60s_rps, 2),
            if s.span_s > 0.0 && s.span_s < 60.0 {
                "over its whole span, shorter than a 60 s window"
            } else {
                "60 s window"
            }
        ),
    );
    line(
        "burstiness",
        format!(
            "inter-arrival CV {}; index of dispersion (60 s counts) {}; zero gaps {}",
            opt(s.interarrival_cv, 2),
            opt(s.dispersion_60s, 2),
            s.zero_gap_fraction
                .map_or("-".to_string(), |z| format!("{:.1}%", z * 100.0))
        ),
    );
    line("input", dist(&s.input_tokens, "tokens"));
    match &s.output_tokens {
        Some(d) => line("output", dist(d, "tokens")),
        None => line("output", "(no output tokens in this trace)".to_string()),
    }
    if let Some(m) = s.prefix_blocks_mean {
        line("prefix", format!("{m:.1} blocks a request on average"));
    }
    line(
        "failed",
        format!("{} requests flagged failed (kept)", s.failed),
    );
    for (name, d) in &s.observed_ms {
        line(name, dist(d, "ms"));
    }
    out
}

fn dist(d: &Distribution, unit: &str) -> String {
    format!(
        "mean {}  p50 {}  p90 {}  p99 {}  max {}  {unit}",
        short(d.mean),
        short(d.p50),
        short(d.p90),
        short(d.p99),
        short(d.max)
    )
}

/// Whole numbers as they are; others with one decimal below 100, none above.
fn short(x: f64) -> String {
    if x.fract() == 0.0 || x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// Two decimals, or three significant digits for rates below 1 req/s.
fn rate(x: f64) -> String {
    if x >= 1.0 || x == 0.0 {
        format!("{x:.2}")
    } else {
        let decimals = (2.0 - x.log10().floor()) as usize;
        format!("{x:.decimals$}")
    }
}

fn fmt_num(x: f64, decimals: usize) -> String {
    format!("{x:.decimals$}")
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or("-".to_string(), |v| fmt_num(v, decimals))
}

fn convert(args: &ConvertArgs) -> Result<()> {
    let loaded = args.input.load()?;
    create_parent(&args.out)?;
    capsim_trace::write_parquet(&loaded.trace, &args.out)?;
    eprintln!("wrote {}: {}", args.out.display(), loaded.report_line());
    Ok(())
}

fn create_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        super::create_out_dir(dir, "--out")?;
    }
    Ok(())
}

fn parse_rate(text: &str) -> Result<f64> {
    let num = text.trim().trim_end_matches("rps").trim();
    num.parse::<f64>()
        .ok()
        .filter(|r| r.is_finite() && *r > 0.0)
        .ok_or_else(|| {
            BadInput(format!(
                "bad --rate {text:?}: expected requests per second > 0, e.g. 5 or 5rps"
            ))
            .into()
        })
}

fn synth(args: &SynthArgs) -> Result<()> {
    let duration_ns = args
        .duration
        .as_deref()
        .map(|d| parse_duration_ns(d).map_err(|e| BadInput(format!("bad --duration: {e}"))))
        .transpose()?;
    let sizes = match &args.sizes_from {
        Some(path) => {
            let opts = IngestOptions {
                format: args.format.as_deref().map(Format::parse).transpose()?,
                maps: args.maps.clone(),
                ..IngestOptions::default()
            };
            let (src, _) =
                capsim_trace::load(std::slice::from_ref(path), &opts, &Transforms::default())
                    .with_context(|| format!("reading --sizes-from {}", path.display()))?;
            Sizes::resampled_from(&src)
        }
        None => Sizes::Parametric {
            input: SizeDist::parse("--input-tokens", &args.input_tokens)?,
            output: match args.output_tokens.as_str() {
                "none" => None,
                text => Some(SizeDist::parse("--output-tokens", text)?),
            },
        },
    };
    let spec = SynthSpec {
        arrivals: Arrivals::parse(&args.arrivals)?,
        rate_rps: parse_rate(&args.rate)?,
        duration_ns,
        count: args.count,
        sizes,
        seed: args.seed,
    };
    let trace = capsim_trace::synthesize(&spec)?;
    create_parent(&args.out)?;
    capsim_trace::write_parquet(&trace, &args.out)?;
    eprintln!(
        "wrote {}: {} requests over {:.1} s",
        args.out.display(),
        trace.len(),
        trace.span_ns() as f64 / 1e9
    );
    Ok(())
}
