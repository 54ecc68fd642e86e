//! Errors from reading, validating and transforming traces.

use std::path::PathBuf;

/// The `--map` hint printed with a missing-column error (the grammar is `format.rs`'s; the hint
/// lives here, with the one message that prints it, so the errors depend on no other module).
const MAP_HINT: &str =
    "arrival=COL:UNIT,input_tokens=COL,output_tokens=COL (UNIT: datetime, s, ms, us, ns)";

/// Everything that can go wrong with a trace. Each variant names where (file, row, column) and
/// what would fix it, so the command can print it as is. Row numbers are 1-based line numbers as
/// a person sees them in the file (the CSV header is line 1).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A column has a different number of rows from `arrival_ns`.
    #[error("column `{column}` has {actual} rows, expected {expected} (one per request)")]
    ColumnLength {
        /// Name of the column whose length is wrong, as in the canonical schema.
        column: String,
        /// Rows it should have: the length of `arrival_ns`.
        expected: usize,
        /// Rows it has.
        actual: usize,
    },
    /// Arrival times decrease at `row` (0-based) after sorting should have happened.
    #[error("arrival times are not sorted: row {row} arrives before row {}", row.saturating_sub(1))]
    Unsorted {
        /// 0-based index of the first row whose arrival is earlier than the row before it.
        row: usize,
    },
    /// The file could not be opened or read.
    #[error("{}: cannot read: {source}", path.display())]
    Io {
        /// The file that could not be read.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// A path given as a trace does not exist.
    #[error("{}: no such file or directory", path.display())]
    NotFound {
        /// The path as given.
        path: PathBuf,
    },
    /// A directory holds no file with a trace extension.
    #[error(
        "{}: directory has no trace files (looked for *.parquet, *.csv, *.jsonl, *.json)",
        path.display()
    )]
    EmptyDirectory {
        /// The directory as given.
        path: PathBuf,
    },
    /// No paths were given at all.
    #[error("no trace file given (pass one or more trace paths, e.g. traces/demo.parquet)")]
    NoInput,
    /// The format could not be told from the file name or header.
    #[error(
        "{}: cannot tell the trace format (header: {header:?}); pass --format ({formats}) \
         and, for csv/jsonl, --map",
        path.display()
    )]
    UnknownFormat {
        /// The file whose format is unknown.
        path: PathBuf,
        /// Its first line, cut to 80 characters, to show the user what was seen.
        header: String,
        /// The `--format` names, from the format table.
        formats: String,
    },
    /// A required column is missing.
    #[error(
        "{}: {}: no column `{column}` (columns present: {}){}; map one with \
         --map {}",
        path.display(),
        line.map_or("schema".to_string(), |l| format!("line {l}")),
        present.join(", "),
        closest.as_ref().map(|c| format!("; did you mean `{c}`?")).unwrap_or_default(),
        MAP_HINT
    )]
    MissingColumn {
        /// The file that lacks the column.
        path: PathBuf,
        /// The 1-based line where the columns were looked up: the CSV header (1) or the first
        /// JSON object; `None` for a Parquet schema.
        line: Option<u64>,
        /// The source column asked for (a canonical name, a preset's, or a `--map` value).
        column: String,
        /// The columns the file does have, in file order.
        present: Vec<String>,
        /// The present column closest in spelling to `column`, when one is close.
        closest: Option<String>,
    },
    /// A column exists but holds a type that cannot mean what the mapping says.
    #[error(
        "{}: column `{column}` has type {actual}, expected {expected}; \
         map a suitable column with --map",
        path.display()
    )]
    WrongType {
        /// The Parquet file.
        path: PathBuf,
        /// The column, by its name in the file.
        column: String,
        /// The Arrow type the column has, as Arrow prints it.
        actual: String,
        /// What the column would need to be, in words (e.g. "a non-negative integer").
        expected: String,
    },
    /// One value could not be used. `line` is 1-based (JSONL line, CSV line, or Parquet row + 1).
    #[error(
        "{}: {at} {line}, column `{column}`: {reason} {value:?}{}",
        path.display(),
        hint_suffix(hint)
    )]
    InvalidValue {
        /// The file holding the value.
        path: PathBuf,
        /// `line` for text files, `row` for Parquet.
        at: &'static str,
        /// 1-based line (CSV header is line 1) or Parquet row + 1.
        line: u64,
        /// The column (CSV header or JSON key) the value came from; `(header)` for a header row
        /// that could not be read.
        column: String,
        /// The value as written, cut to 60 characters.
        value: String,
        /// Why it could not be used.
        reason: InvalidReason,
        /// What would fix it; empty for no hint.
        hint: String,
    },
    /// The Parquet file is truncated, corrupt or not Parquet at all.
    #[error("{}: not a readable Parquet file ({detail}); re-export it or check the download", path.display())]
    CorruptParquet {
        /// The file.
        path: PathBuf,
        /// The Parquet or Arrow reader's own message.
        detail: String,
    },
    /// Files given together do not have the same optional columns.
    #[error(
        "{}: has {} column `{column}` but {} does {}; convert them separately",
        path.display(),
        if *present { "a" } else { "no" },
        first.display(),
        if *present { "not" } else { "" }
    )]
    SchemaMismatch {
        /// The file that differs from the first.
        path: PathBuf,
        /// The first file given, whose columns set the schema.
        first: PathBuf,
        /// The optional column one has and the other lacks.
        column: String,
        /// Whether `path` has the column (and `first` does not).
        present: bool,
    },
    /// Some files have wall-clock datetimes and others offsets from trace start.
    #[error(
        "{}: arrivals are {this} but {} has {other}; they cannot be merged into one timeline",
        path.display(),
        first.display()
    )]
    MixedTimeBase {
        /// The file whose time base differs from the first's.
        path: PathBuf,
        /// The first file given, whose time base sets the timeline.
        first: PathBuf,
        /// `path`'s time base in words ("wall-clock datetimes" or "offsets from trace start").
        this: &'static str,
        /// `first`'s time base in the same words.
        other: &'static str,
    },
    /// After reading (and skipping invalid rows) no request is left.
    #[error("{what}: trace is empty (no requests){}", hint_suffix(hint))]
    Empty {
        /// What came out empty: the input file (or "N files"), or the step that emptied it
        /// (`--window`, `--sample`, `synth`).
        what: String,
        /// Why, and what would fix it; empty for no hint.
        hint: String,
    },
    /// A numeric arrival column with no unit stated cannot be read in the default unit.
    #[error(
        "{}: arrival column `{column}` has no unit and {reason}; state its unit: \
         --map arrival={column}:s (or ms, us, ns)",
        path.display()
    )]
    ArrivalUnit {
        /// The file.
        path: PathBuf,
        /// The arrival column, by its name in the file.
        column: String,
        /// What the default reading gives, and the readings in seconds and milliseconds.
        reason: String,
    },
    /// A `--map` specification could not be parsed.
    #[error("bad --map {spec:?}: {reason}")]
    BadMap {
        /// The `--map` argument as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A transform or generator option is out of range or malformed.
    #[error("bad {option} {value:?}: {reason}")]
    BadOption {
        /// The flag, as the user types it (e.g. `--rate-scale`).
        option: &'static str,
        /// The value given.
        value: String,
        /// What is wrong and what range is accepted.
        reason: String,
    },
    /// Writing Parquet failed.
    #[error("{}: cannot write Parquet: {detail}", path.display())]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The writer's or the operating system's message.
        detail: String,
    },
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
