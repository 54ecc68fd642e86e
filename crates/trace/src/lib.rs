//! Request traces for capsim: ingest, validate, transform and synthesize.
//!
//! A trace is a table of requests (arrival time, input size, optional output size, and optional
//! metadata) held in memory as typed columns ([`Trace`]): 16 bytes a request for arrival and two
//! sizes. Readers turn Parquet, CSV and JSONL logs into a [`Trace`] ([`read_trace`]), reporting
//! every row they could not use ([`IngestReport`]); [`Transforms`] window, sample, rescale and
//! limit it; [`synthesize`] generates one; [`write_parquet`] writes the canonical form;
//! [`Summary`] describes it.
//!
//! ```no_run
//! use capsim_trace::{read_trace, IngestOptions, Summary};
//! let (trace, report) = read_trace(&["traces/azure-conv.parquet".into()], &IngestOptions::default())?;
//! let summary = Summary::of(&trace);
//! println!("{} requests, {:?} req/s, {} rows skipped", trace.len(), summary.mean_rate_rps, report.rows_skipped);
//! # Ok::<(), capsim_trace::TraceError>(())
//! ```
//!
//! # Canonical Parquet schema
//!
//! | column | type | unit / meaning | required |
//! |---|---|---|---|
//! | `arrival` | Int64 (or any integer, float with a unit, Timestamp, datetime text) | ns from trace start | yes |
//! | `input_tokens` | UInt32 (any non-negative integer) | prompt tokens or a generic input size | yes |
//! | `output_tokens` | UInt32 | generated tokens | no |
//! | `request_id` | Utf8 | id from the log | no |
//! | `model` | Utf8 | model the request was sent to | no |
//! | `class` | UInt32 | priority class, 0 most urgent | no |
//! | `prefix_blocks` | `List<UInt64>` | prefix-block hashes (equal leading hashes share KV cache) | no |
//! | `failed` | Boolean | the log marks the request failed (kept, not dropped) | no |
//! | `e2e_ms`, `queue_ms`, `compute_ms` | Float64, nullable | latencies the production system observed | no |
//!
//! Key-value metadata `capsim.start_unix_ns` holds the wall-clock time of `arrival == 0` when
//! the source had datetimes. The full description, with `--map`, presets and transforms, is in
//! `docs/trace-format.md`.

#![warn(missing_docs)]

mod arrival_unit;
mod error;
pub mod extend;
mod format;
mod ingest;
mod map;
pub mod quantity;
mod read;
pub mod suggest;
mod summary;
mod synth;
mod table;
mod timestamp;
mod transform;
mod write;

pub use arrival_unit::{InferredUnit, MANY_ROWS, MAX_MEAN_RATE_RPS, epoch_unit};
pub use error::{InvalidReason, TraceError};
pub use format::{ColumnMap, Field, Format, MAP_KEYS, detect};
pub use ingest::{
    FileReport, IngestOptions, IngestReport, TimeOrigin, WALL_CLOCK_FLOOR_UNIX_NS, expand_paths,
    read_trace,
};
pub use map::{MapEntry, MapError, MapKey, MapReader, map_entries};
pub use quantity::parse_duration_ns;
pub use suggest::closest;
pub use summary::{Distribution, Summary, bin_counts, peak_count, percentile_sorted};
pub use synth::{Arrivals, MAX_REQUESTS, SizeDist, Sizes, SynthSpec, synthesize};
pub use table::{Columns, ListColumn, ObservedLatencies, StringColumn, Trace};
pub use timestamp::{TimeUnit, parse_datetime_ns};
pub use transform::Transforms;
pub use write::{write_parquet, write_parquet_to};

/// Reads `paths` with `opts`, then applies `transforms`: what every command reading a trace
/// does. The report accounts for every row read.
pub fn load(
    paths: &[std::path::PathBuf],
    opts: &IngestOptions,
    transforms: &Transforms,
) -> Result<(Trace, IngestReport), TraceError> {
    transforms.validate()?;
    let (trace, mut report) = read_trace(paths, opts)?;
    let trace = transforms.apply(trace, &mut report)?;
    debug_assert!(
        report.adds_up(),
        "ingest report does not add up: {report:?}"
    );
    Ok((trace, report))
}
