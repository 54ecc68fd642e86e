//! Readers: one file in, one [`Part`] of columns out. `ingest` merges parts into a trace.
//!
//! Every reader fills a [`Builder`] column by column (no row structs are kept) and hands every
//! row it cannot use to [`Issues`], which either fails with a message naming file, line, column
//! and value, or (with `--skip-invalid`) counts the row by reason.

pub(crate) mod csv;
pub(crate) mod jsonl;
pub(crate) mod loadgen;
pub(crate) mod parquet;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::format::{ColumnMap, Field};
use crate::table::{ListColumn, StringColumn};
use crate::{InvalidReason, TraceError};

/// What arrival values mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeBase {
    /// Unix nanoseconds (from datetimes); the trace is rebased to start at the earliest.
    Unix,
    /// Nanoseconds from the trace's start, as the log wrote them.
    Offset,
    /// Nanoseconds of a clock with an arbitrary origin (vLLM's monotonic `queued_ts`,
    /// inference-perf's `perf_counter`); the trace is rebased to start at the earliest.
    Clock,
}

impl TimeBase {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            TimeBase::Unix => "wall-clock datetimes",
            TimeBase::Offset => "offsets from trace start",
            TimeBase::Clock => "times of a clock with an arbitrary origin",
        }
    }
}

/// Where each mapped canonical column is in a source: a CSV column's index, a Parquet column's
/// or a JSON key's name. The arrival and the input tokens always; the others when the map names
/// them and the source has them.
#[derive(Default)]
pub(crate) struct Located<T> {
    pub arrival: T,
    pub input: T,
    pub output: Option<T>,
    pub request_id: Option<T>,
    pub model: Option<T>,
    pub class: Option<T>,
    pub prefix_blocks: Option<T>,
    pub failed: Option<T>,
    pub e2e_ms: Option<T>,
    pub queue_ms: Option<T>,
    pub compute_ms: Option<T>,
}

impl<T> Located<T> {
    /// Each of `map`'s columns looked up with `find`; a required one it does not find is the
    /// error `missing` makes of its name.
    pub(crate) fn resolve(
        map: &ColumnMap,
        find: impl Fn(&str) -> Option<T>,
        missing: impl Fn(&str) -> TraceError,
    ) -> Result<Located<T>, TraceError> {
        let required = |name: &str| find(name).ok_or_else(|| missing(name));
        let optional = |field: &Field| -> Result<Option<T>, TraceError> {
            match &field.column {
                None => Ok(None),
                Some(name) => match find(name) {
                    Some(found) => Ok(Some(found)),
                    None if field.required => Err(missing(name)),
                    None => Ok(None),
                },
            }
        };
        Ok(Located {
            arrival: required(&map.arrival)?,
            input: required(&map.input_tokens)?,
            output: optional(&map.output_tokens)?,
            request_id: optional(&map.request_id)?,
            model: optional(&map.model)?,
            class: optional(&map.class)?,
            prefix_blocks: optional(&map.prefix_blocks)?,
            failed: optional(&map.failed)?,
            e2e_ms: optional(&map.e2e_ms)?,
            queue_ms: optional(&map.queue_ms)?,
            compute_ms: optional(&map.compute_ms)?,
        })
    }

    /// Which optional columns the trace gets: `failed` also where a zero output marks a failure.
    pub(crate) fn presence(&self, zero_output_is_failed: bool) -> Presence {
        Presence {
            output_tokens: self.output.is_some(),
            request_id: self.request_id.is_some(),
            model: self.model.is_some(),
            class: self.class.is_some(),
            prefix_blocks: self.prefix_blocks.is_some(),
            failed: self.failed.is_some() || (zero_output_is_failed && self.output.is_some()),
            e2e_ms: self.e2e_ms.is_some(),
            queue_ms: self.queue_ms.is_some(),
            compute_ms: self.compute_ms.is_some(),
        }
    }
}

/// Which optional columns a part has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Presence {
    pub output_tokens: bool,
    pub request_id: bool,
    pub model: bool,
    pub class: bool,
    pub prefix_blocks: bool,
    pub failed: bool,
    pub e2e_ms: bool,
    pub queue_ms: bool,
    pub compute_ms: bool,
}

impl Presence {
    pub(crate) fn list(&self) -> [(&'static str, bool); 9] {
        [
            ("output_tokens", self.output_tokens),
            ("request_id", self.request_id),
            ("model", self.model),
            ("class", self.class),
            ("prefix_blocks", self.prefix_blocks),
            ("failed", self.failed),
            ("e2e_ms", self.e2e_ms),
            ("queue_ms", self.queue_ms),
            ("compute_ms", self.compute_ms),
        ]
    }
}

/// One row's parsed values, reused across rows so that reading allocates nothing per row once
/// the strings and block list have grown to their largest.
#[derive(Debug, Default)]
pub(crate) struct RowBuf {
    pub arrival: i64,
    /// The arrival as written, kept when its unit is not stated (see `Builder::arrival_raw`).
    pub arrival_raw: f64,
    pub input: u32,
    pub output: u32,
    pub request_id: String,
    pub model: String,
    pub class: u32,
    pub blocks: Vec<u64>,
    pub failed: bool,
    pub e2e_ms: f64,
    pub queue_ms: f64,
    pub compute_ms: f64,
}

/// Columns under construction. Arrivals are `i64` in the part's [`TimeBase`] until `ingest`
/// rebases them.
#[derive(Debug, Default)]
pub(crate) struct Builder {
    pub arrival: Vec<i64>,
    /// Arrivals as written, while a numeric column with no unit stated waits for
    /// `arrival_unit::settle` (which takes it); `None` otherwise, and when `arrival` holds the
    /// written values exactly (whole numbers read as nanoseconds).
    pub arrival_raw: Option<Vec<f64>>,
    pub input: Vec<u32>,
    pub output: Option<Vec<u32>>,
    pub request_id: Option<StringColumn>,
    pub model: Option<StringColumn>,
    pub class: Option<Vec<u32>>,
    pub prefix_blocks: Option<ListColumn>,
    pub failed: Option<Vec<bool>>,
    pub e2e_ms: Option<Vec<f64>>,
    pub queue_ms: Option<Vec<f64>>,
    pub compute_ms: Option<Vec<f64>>,
}

impl Builder {
    pub(crate) fn new(p: Presence, rows: usize) -> Builder {
        Builder {
            arrival: Vec::with_capacity(rows),
            arrival_raw: None,
            input: Vec::with_capacity(rows),
            output: p.output_tokens.then(|| Vec::with_capacity(rows)),
            request_id: p.request_id.then(|| StringColumn::with_capacity(rows)),
            model: p.model.then(|| StringColumn::with_capacity(rows)),
            class: p.class.then(|| Vec::with_capacity(rows)),
            prefix_blocks: p.prefix_blocks.then(|| ListColumn::with_capacity(rows)),
            failed: p.failed.then(|| Vec::with_capacity(rows)),
            e2e_ms: p.e2e_ms.then(|| Vec::with_capacity(rows)),
            queue_ms: p.queue_ms.then(|| Vec::with_capacity(rows)),
            compute_ms: p.compute_ms.then(|| Vec::with_capacity(rows)),
        }
    }

    pub(crate) fn presence(&self) -> Presence {
        Presence {
            output_tokens: self.output.is_some(),
            request_id: self.request_id.is_some(),
            model: self.model.is_some(),
            class: self.class.is_some(),
            prefix_blocks: self.prefix_blocks.is_some(),
            failed: self.failed.is_some(),
            e2e_ms: self.e2e_ms.is_some(),
            queue_ms: self.queue_ms.is_some(),
            compute_ms: self.compute_ms.is_some(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.arrival.len()
    }

    /// Reserves room for `more` rows in the fixed-width columns.
    pub(crate) fn reserve(&mut self, more: usize) {
        self.arrival.reserve_exact(more);
        if let Some(raw) = &mut self.arrival_raw {
            raw.reserve_exact(more);
        }
        self.input.reserve_exact(more);
        for v in [&mut self.output, &mut self.class].into_iter().flatten() {
            v.reserve_exact(more);
        }
        if let Some(v) = &mut self.failed {
            v.reserve_exact(more);
        }
        for v in [&mut self.e2e_ms, &mut self.queue_ms, &mut self.compute_ms]
            .into_iter()
            .flatten()
        {
            v.reserve_exact(more);
        }
    }

    /// Appends one row; columns the builder does not have are ignored.
    pub(crate) fn push(&mut self, row: &RowBuf) {
        self.arrival.push(row.arrival);
        if let Some(raw) = &mut self.arrival_raw {
            raw.push(row.arrival_raw);
        }
        self.input.push(row.input);
        if let Some(c) = &mut self.output {
            c.push(row.output);
        }
        if let Some(c) = &mut self.request_id {
            c.push(&row.request_id);
        }
        if let Some(c) = &mut self.model {
            c.push(&row.model);
        }
        if let Some(c) = &mut self.class {
            c.push(row.class);
        }
        if let Some(c) = &mut self.prefix_blocks {
            c.push(&row.blocks);
        }
        if let Some(c) = &mut self.failed {
            c.push(row.failed);
        }
        if let Some(c) = &mut self.e2e_ms {
            c.push(row.e2e_ms);
        }
        if let Some(c) = &mut self.queue_ms {
            c.push(row.queue_ms);
        }
        if let Some(c) = &mut self.compute_ms {
            c.push(row.compute_ms);
        }
    }

    /// Appends all rows of `other`, which must have the same presence and settled arrivals.
    pub(crate) fn append(&mut self, other: Builder) {
        fn cat<T: Clone>(a: &mut Option<Vec<T>>, b: Option<Vec<T>>) {
            if let (Some(a), Some(b)) = (a, b) {
                a.extend_from_slice(&b);
            }
        }
        self.arrival.extend_from_slice(&other.arrival);
        self.input.extend_from_slice(&other.input);
        cat(&mut self.output, other.output);
        cat(&mut self.class, other.class);
        cat(&mut self.failed, other.failed);
        cat(&mut self.e2e_ms, other.e2e_ms);
        cat(&mut self.queue_ms, other.queue_ms);
        cat(&mut self.compute_ms, other.compute_ms);
        if let (Some(a), Some(b)) = (&mut self.request_id, &other.request_id) {
            b.iter().for_each(|s| a.push(s));
        }
        if let (Some(a), Some(b)) = (&mut self.model, &other.model) {
            b.iter().for_each(|s| a.push(s));
        }
        if let (Some(a), Some(b)) = (&mut self.prefix_blocks, &other.prefix_blocks) {
            (0..b.len()).for_each(|i| a.push(b.get(i)));
        }
    }
}

/// What one file yielded.
#[derive(Debug)]
pub(crate) struct Part {
    pub path: PathBuf,
    pub cols: Builder,
    pub base: TimeBase,
    /// The arrival column is numeric and no unit was stated: `cols.arrival` holds it read as
    /// nanoseconds until `arrival_unit::settle` decides.
    pub arrival_unstated: bool,
    /// Data rows in the file (kept + skipped).
    pub rows_read: u64,
    pub skipped: BTreeMap<InvalidReason, u64>,
    /// Records the format leaves out (a load generator's failed or warm-up requests), by
    /// reason; neither kept nor invalid.
    pub left_out: BTreeMap<&'static str, u64>,
}

/// Options every reader takes.
#[derive(Debug, Clone)]
pub(crate) struct ReadOptions<'a> {
    pub map: &'a ColumnMap,
    pub skip_invalid: bool,
}

/// Rows a reader could not use: fail on the first, or count them by reason.
pub(crate) struct Issues<'a> {
    path: &'a Path,
    skip: bool,
    /// `line` for text files, `row` for Parquet.
    pub at: &'static str,
    pub counts: BTreeMap<InvalidReason, u64>,
}

impl<'a> Issues<'a> {
    pub(crate) fn new(path: &'a Path, skip: bool) -> Issues<'a> {
        Issues {
            path,
            skip,
            at: "line",
            counts: BTreeMap::new(),
        }
    }

    /// Records that `line`'s `column` holds an unusable `value`. `Ok` means "skip the row".
    pub(crate) fn bad(
        &mut self,
        line: u64,
        column: &str,
        value: &[u8],
        reason: InvalidReason,
    ) -> Result<(), TraceError> {
        if self.skip {
            *self.counts.entry(reason).or_insert(0) += 1;
            return Ok(());
        }
        let hint = match reason {
            InvalidReason::BadTimestamp => {
                "expected a datetime like `2023-11-16 18:15:46.68`, \
                or numbers with --map arrival=COL:s (or ms, us, ns); \
                --skip-invalid skips and counts such rows"
            }
            InvalidReason::BadRecord => {
                "the row has fewer fields than the header, or is not \
                a JSON object; --skip-invalid skips and counts such rows"
            }
            _ => "fix the value, or pass --skip-invalid to skip and count such rows",
        };
        let value: String = String::from_utf8_lossy(value).chars().take(60).collect();
        Err(TraceError::InvalidValue {
            path: self.path.to_path_buf(),
            at: self.at,
            line,
            column: column.to_string(),
            value,
            reason,
            hint: hint.to_string(),
        })
    }
}

/// Parses a boolean flag.
pub(crate) fn parse_bool(b: &[u8]) -> Result<bool, InvalidReason> {
    match b.trim_ascii() {
        b"true" | b"True" | b"TRUE" | b"1" => Ok(true),
        b"false" | b"False" | b"FALSE" | b"0" => Ok(false),
        b"" => Err(InvalidReason::MissingValue),
        _ => Err(InvalidReason::BadBool),
    }
}

/// Parses a latency in ms; an empty field is NaN (not observed for this request).
pub(crate) fn parse_latency(b: &[u8]) -> Result<f64, InvalidReason> {
    if b.trim_ascii().is_empty() {
        return Ok(f64::NAN);
    }
    let v = crate::timestamp::parse_f64(b)?;
    if v < 0.0 {
        return Err(InvalidReason::Negative);
    }
    Ok(v)
}

/// Builds the missing-column error, with the present column closest to `column` when one is
/// close. `line` is where the columns were looked up (1 for a CSV header, the first JSON
/// object's line), `None` for a Parquet schema.
pub(crate) fn missing_column(
    path: &Path,
    line: Option<u64>,
    column: &str,
    present: Vec<String>,
) -> TraceError {
    let closest =
        crate::suggest::closest(column, present.iter().map(String::as_str)).map(str::to_string);
    TraceError::MissingColumn {
        path: path.to_path_buf(),
        line,
        column: column.to_string(),
        present,
        closest,
    }
}
