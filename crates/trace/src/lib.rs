//! Request traces for capsim: ingest, validate, transform and synthesize.
//!
//! A trace is a table of requests (arrival time, input size, optional output size, and optional
//! metadata) held in memory as typed columns ([`Trace`]). Readers turn Parquet, CSV and JSONL logs
//! into a [`Trace`]; transforms window, rescale and sample it; synthesizers generate one.

mod error;
mod table;

pub use error::TraceError;
pub use table::{Columns, ListColumn, ObservedLatencies, StringColumn, Trace};
