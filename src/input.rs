//! The trace-input flags every command that reads a trace shares.
//!
//! A command flattens [`TraceInput`] into its clap arguments and calls [`TraceInput::load`]:
//!
//! ```ignore
//! #[derive(Debug, clap::Args)]
//! pub struct SimulateArgs {
//!     #[command(flatten)]
//!     pub input: crate::input::TraceInput,
//!     // ... the command's own flags ...
//! }
//! // in the command:
//! let loaded = args.input.load()?;          // anyhow::Result<LoadedTrace>
//! let trace: &capsim_trace::Trace = &loaded.trace;
//! eprintln!("{}", loaded.report_line());    // "19366 requests read (0 skipped, ...)"
//! ```
//!
//! That gives the command `TRACE...` positionals (or `--trace PATH`, repeatable, for commands
//! that have positionals of their own), `--format`, `--map`, `--skip-invalid`, `--keep-offsets` and the
//! transforms `--window`, `--sample`/`--sample-seed`, `--rate-scale`,
//! `--extend-to`/`--extend-seed`, `--limit`. All the logic
//! lives in `capsim_trace`; this struct only maps flags onto it. Errors from `load` are
//! `capsim_trace::TraceError`s, which the command's exit code maps to 2.

use std::path::PathBuf;

use anyhow::Result;
use capsim_trace::{Format, IngestOptions, IngestReport, TimeOrigin, Trace, Transforms};

/// Where a trace comes from and how to read and transform it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TraceInput {
    /// Trace files or directories (Parquet, CSV, JSONL); several are merged in arrival order.
    #[arg(value_name = "TRACE")]
    pub paths: Vec<PathBuf>,

    /// A trace file or directory (same as the positional TRACE; may be repeated).
    #[arg(long = "trace", value_name = "PATH")]
    pub trace: Vec<PathBuf>,

    // Input format, its names from the trace crate's table of formats (`format_help`).
    #[arg(long, value_name = "FORMAT", help = format_help())]
    pub format: Option<String>,

    /// Column mapping, e.g. `arrival=ts:ms,input_tokens=prompt,output_tokens=completion`
    /// (arrival units: datetime, s, ms, us, ns). Overrides the format's defaults; repeatable.
    #[arg(long = "map", value_name = "KEY=COL[:UNIT],...")]
    pub maps: Vec<String>,

    /// Skip rows with unusable values (and count them by reason) instead of failing.
    #[arg(long)]
    pub skip_invalid: bool,

    /// Keep numeric arrivals as they are even when they are Unix times (the run then starts at
    /// 1970-01-01, decades before the first request) or a log's own clock (vllm,
    /// inference-perf). By default such arrivals are rebased to the first one, as datetimes are.
    #[arg(long)]
    pub keep_offsets: bool,

    /// Keep requests arriving in START..END after the first arrival (e.g. `10m..20m`, `..30s`).
    #[arg(long, value_name = "START..END")]
    pub window: Option<String>,

    /// Keep each request with this probability (seeded by --sample-seed).
    #[arg(long, value_name = "FRACTION")]
    pub sample: Option<f64>,

    /// Seed of --sample.
    #[arg(long, value_name = "SEED", default_value_t = 0)]
    pub sample_seed: u64,

    /// Multiply the load by K: every gap between arrivals is divided by K.
    #[arg(long, value_name = "K")]
    pub rate_scale: Option<f64>,

    /// Lengthen the trace to DURATION from its first arrival (e.g. `10m`) by a seeded block
    /// bootstrap of its own gaps, each with its request's sizes (docs/trace-format.md); for a
    /// log too short for the load it should drive. Applied after --rate-scale.
    #[arg(long, value_name = "DURATION")]
    pub extend_to: Option<String>,

    /// Seed of --extend-to's draws.
    #[arg(long, value_name = "SEED", default_value_t = 0)]
    pub extend_seed: u64,

    /// Keep only the first N requests (after the other transforms).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
}

/// `--format`'s help: the trace crate's formats, the generic ones and then the presets.
fn format_help() -> String {
    let names = |preset: bool| {
        Format::all()
            .filter(|f| f.is_preset() == preset)
            .map(Format::name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "Input format: {}, or a preset ({}). Detected from the file name and header when omitted",
        names(false),
        names(true)
    )
}

/// A trace read and transformed, with the account of every row.
#[derive(Debug, Clone)]
pub struct LoadedTrace {
    pub trace: Trace,
    pub report: IngestReport,
}

impl LoadedTrace {
    /// One line accounting for the rows read: kept, skipped, dropped by transforms, failed.
    pub fn report_line(&self) -> String {
        let r = &self.report;
        let mut parts = vec![format!("{} requests", r.rows)];
        if r.rows_skipped > 0 {
            let reasons: Vec<String> = r
                .skipped_by_reason
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            parts.push(format!(
                "{} invalid rows skipped ({})",
                r.rows_skipped,
                reasons.join(", ")
            ));
        }
        if r.rows_left_out > 0 {
            let reasons: Vec<String> = r
                .left_out_by_reason
                .iter()
                .map(|(k, v)| format!("{v} {k}"))
                .collect();
            parts.push(format!(
                "{} left out by the format ({})",
                r.rows_left_out,
                reasons.join(", ")
            ));
        }
        for (n, what) in [
            (r.dropped_by_window, "outside --window"),
            (r.dropped_by_sample, "not sampled"),
            (r.dropped_by_limit, "beyond --limit"),
        ] {
            if n > 0 {
                parts.push(format!("{n} {what}"));
            }
        }
        if r.added_by_extend > 0 {
            parts.push(format!(
                "{} added by --extend-to (block bootstrap of the trace's own gaps and sizes)",
                r.added_by_extend
            ));
        }
        if r.failed > 0 {
            parts.push(format!("{} flagged failed", r.failed));
        }
        if r.out_of_order > 0 {
            parts.push(format!("{} out of order (sorted)", r.out_of_order));
        }
        if matches!(
            r.time_origin,
            TimeOrigin::UnixNumbers | TimeOrigin::UnixNumbersKept | TimeOrigin::ArbitraryClock
        ) {
            parts.push(format!("arrivals read as {}", r.time_origin.describe()));
        }
        for inferred in &r.inferred_units {
            parts.push(format!(
                "arrivals `{}` read as Unix {} by their magnitude (state it: --map arrival={}:{})",
                inferred.column,
                inferred.unit_words(),
                inferred.column,
                inferred.unit
            ));
        }
        format!("{} rows read: {}", r.rows_read, parts.join(", "))
    }
}

impl TraceInput {
    /// All trace paths given, positional first.
    pub fn all_paths(&self) -> Vec<PathBuf> {
        self.paths.iter().chain(&self.trace).cloned().collect()
    }

    /// The ingest options these flags ask for.
    pub fn ingest_options(&self) -> Result<IngestOptions> {
        let format = self.format.as_deref().map(Format::parse).transpose()?;
        Ok(IngestOptions {
            format,
            maps: self.maps.clone(),
            skip_invalid: self.skip_invalid,
            keep_offsets: self.keep_offsets,
        })
    }

    /// The transforms these flags ask for.
    pub fn transforms(&self) -> Result<Transforms> {
        let window = self
            .window
            .as_deref()
            .map(Transforms::parse_window)
            .transpose()?;
        let extend_to_ns = self
            .extend_to
            .as_deref()
            .map(|text| {
                capsim_trace::parse_duration_ns(text).map_err(|e| {
                    crate::BadInput(format!("--extend-to {text:?}: {e}; write e.g. 10m"))
                })
            })
            .transpose()?;
        let t = Transforms {
            window,
            sample: self.sample,
            sample_seed: self.sample_seed,
            rate_scale: self.rate_scale,
            extend_to_ns,
            extend_seed: self.extend_seed,
            limit: self.limit,
        };
        t.validate()?;
        Ok(t)
    }

    /// Reads the trace(s), applies the transforms, and returns the trace with its report.
    pub fn load(&self) -> Result<LoadedTrace> {
        let paths = self.all_paths();
        let opts = self.ingest_options()?;
        let transforms = self.transforms()?;
        let (trace, report) = capsim_trace::load(&paths, &opts, &transforms)?;
        Ok(LoadedTrace { trace, report })
    }
}
