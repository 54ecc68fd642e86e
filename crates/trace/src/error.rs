//! Errors from reading, validating and transforming traces.

use std::path::PathBuf;

/// Everything that can go wrong with a trace. Each variant names where (file, row, column) and
/// what would fix it, so the command can print it as is. Row numbers are 1-based line numbers as
/// a person sees them in the file (the CSV header is line 1).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A column has a different number of rows from `arrival_ns`.
    #[error("column `{column}` has {actual} rows, expected {expected} (one per request)")]
    ColumnLength {
        column: String,
        expected: usize,
        actual: usize,
    },
    /// Arrival times decrease at `row` (0-based) after sorting should have happened.
    #[error("arrival times are not sorted: row {row} arrives before row {}", row.saturating_sub(1))]
    Unsorted { row: usize },
    /// The file could not be opened or read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A path given as a trace does not exist.
    #[error("{}: no such file or directory", path.display())]
    NotFound { path: PathBuf },
    /// A directory holds no file with a trace extension.
    #[error(
        "{}: directory has no trace files (looked for *.parquet, *.csv, *.jsonl, *.json)",
        path.display()
    )]
    EmptyDirectory { path: PathBuf },
    /// No paths were given at all.
    #[error("no trace file given (pass one or more trace paths, e.g. traces/demo.parquet)")]
    NoInput,
    /// The format could not be told from the file name or header.
    #[error(
        "{}: cannot tell the trace format (header: {header:?}); pass --format \
         (parquet, csv, jsonl, azure, burstgpt, mooncake) and, for csv/jsonl, --map",
        path.display()
    )]
    UnknownFormat { path: PathBuf, header: String },
    /// A required column is missing.
    #[error(
        "{}: no column `{column}` (columns present: {}); map one with \
         --map {suggestion}",
        path.display(),
        present.join(", ")
    )]
    MissingColumn {
        path: PathBuf,
        column: String,
        present: Vec<String>,
        suggestion: String,
    },
    /// A column exists but holds a type that cannot mean what the mapping says.
    #[error(
        "{}: column `{column}` has type {actual}, expected {expected}; \
         map a suitable column with --map",
        path.display()
    )]
    WrongType {
        path: PathBuf,
        column: String,
        actual: String,
        expected: String,
    },
    /// One value could not be used. `line` is 1-based (JSONL line, CSV line, or Parquet row + 1).
    #[error(
        "{}: {at} {line}, column `{column}`: {reason} {value:?}{}",
        path.display(),
        hint_suffix(hint)
    )]
    InvalidValue {
        path: PathBuf,
        /// `line` for text files, `row` for Parquet.
        at: &'static str,
        line: u64,
        column: String,
        value: String,
        reason: InvalidReason,
        hint: String,
    },
    /// The Parquet file is truncated, corrupt or not Parquet at all.
    #[error("{}: not a readable Parquet file ({detail}); re-export it or check the download", path.display())]
    CorruptParquet { path: PathBuf, detail: String },
    /// Files given together do not have the same optional columns.
    #[error(
        "{}: has {} column `{column}` but {} does {}; convert them separately",
        path.display(),
        if *present { "a" } else { "no" },
        first.display(),
        if *present { "not" } else { "" }
    )]
    SchemaMismatch {
        path: PathBuf,
        first: PathBuf,
        column: String,
        present: bool,
    },
    /// Some files have wall-clock datetimes and others offsets from trace start.
    #[error(
        "{}: arrivals are {this} but {} has {other}; they cannot be merged into one timeline",
        path.display(),
        first.display()
    )]
    MixedTimeBase {
        path: PathBuf,
        first: PathBuf,
        this: &'static str,
        other: &'static str,
    },
    /// After reading (and skipping invalid rows) no request is left.
    #[error("{what}: trace is empty (no requests){}", hint_suffix(hint))]
    Empty { what: String, hint: String },
    /// A `--map` specification could not be parsed.
    #[error("bad --map {spec:?}: {reason}")]
    BadMap { spec: String, reason: String },
    /// A transform or generator option is out of range or malformed.
    #[error("bad {option} {value:?}: {reason}")]
    BadOption {
        option: &'static str,
        value: String,
        reason: String,
    },
    /// Writing Parquet failed.
    #[error("{}: cannot write Parquet: {detail}", path.display())]
    Write { path: PathBuf, detail: String },
}

/// Why a value in a row could not be used. Rows skipped with `--skip-invalid` are counted by
/// this reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InvalidReason {
    /// The field is empty or null.
    MissingValue,
    /// The field is not a number.
    BadNumber,
    /// A size or time is negative.
    Negative,
    /// A number is NaN or infinite.
    NotFinite,
    /// A size has a fractional part.
    Fractional,
    /// A number does not fit the column (sizes up to 2^32 - 1, times up to ~292 years of ns).
    TooLarge,
    /// A datetime could not be parsed.
    BadTimestamp,
    /// A flag is not `true`/`false`/`1`/`0`.
    BadBool,
    /// A CSV line has fewer fields than the header, or a JSONL line is not a JSON object.
    BadRecord,
}

impl InvalidReason {
    /// A short label, as used in reports and JSON.
    pub fn label(self) -> &'static str {
        match self {
            InvalidReason::MissingValue => "missing_value",
            InvalidReason::BadNumber => "bad_number",
            InvalidReason::Negative => "negative",
            InvalidReason::NotFinite => "not_finite",
            InvalidReason::Fractional => "fractional",
            InvalidReason::TooLarge => "too_large",
            InvalidReason::BadTimestamp => "bad_timestamp",
            InvalidReason::BadBool => "bad_bool",
            InvalidReason::BadRecord => "bad_record",
        }
    }
}

impl std::fmt::Display for InvalidReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            InvalidReason::MissingValue => "missing value",
            InvalidReason::BadNumber => "not a number:",
            InvalidReason::Negative => "negative value",
            InvalidReason::NotFinite => "NaN or infinite value",
            InvalidReason::Fractional => "size is not a whole number:",
            InvalidReason::TooLarge => "value too large:",
            InvalidReason::BadTimestamp => "unparseable timestamp",
            InvalidReason::BadBool => "not true/false/1/0:",
            InvalidReason::BadRecord => "malformed record",
        })
    }
}

fn hint_suffix(hint: &str) -> String {
    if hint.is_empty() {
        String::new()
    } else {
        format!("; {hint}")
    }
}

impl TraceError {
    /// True when the error is the user's input (bad file, flag or value) rather than the
    /// machine (I/O failure while writing). The command exits with code 2 for these.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, TraceError::Write { .. })
    }
}
