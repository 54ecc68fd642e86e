//! Ingest: files and directories in, one validated [`Trace`] and an [`IngestReport`] out.
//!
//! Each file is read with its own format (given, or detected from its name and header) and the
//! same column mapping; the parts are concatenated, stably sorted by arrival (the number of rows
//! that arrived out of order is reported), and rebased: datetimes, and numbers that can only be
//! wall-clock times (see [`WALL_CLOCK_FLOOR_UNIX_NS`]), start at the earliest arrival with the
//! wall-clock start kept; so do a preset's clock times with an arbitrary origin (vLLM's
//! `queued_ts`, inference-perf's `start_time`), with no wall-clock start; other numbers are
//! offsets from the trace's start and keep their values.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::arrival_unit::InferredUnit;
use crate::format::{self, ColumnMap, Format};
use crate::read::{self, Builder, Part, ReadOptions, TimeBase};
use crate::table::{Columns, ObservedLatencies};
use crate::{Trace, TraceError};

/// How to read trace files.
#[derive(Debug, Clone, Default)]
pub struct IngestOptions {
    /// Format of every file; `None` detects it per file from the extension and header.
    pub format: Option<Format>,
    /// `--map` values, applied in order on top of the format's base map.
    pub maps: Vec<String>,
    /// Skip and count rows with unusable values instead of failing on the first.
    pub skip_invalid: bool,
    /// Keep numeric arrivals as offsets even when they are wall-clock times, or a preset's clock
    /// with an arbitrary origin (the run then starts at time 0, with a gap before the first
    /// request).
    pub keep_offsets: bool,
}

/// The earliest Unix time, 2000-01-01T00:00:00Z in nanoseconds, that numeric arrivals are taken
/// as wall-clock from: a trace whose first request comes 30 years after its start is a log of
/// Unix times (seconds, milliseconds, microseconds or nanoseconds, as the column's unit says),
/// not of offsets.
pub const WALL_CLOCK_FLOOR_UNIX_NS: i64 = 946_684_800_000_000_000;

/// Where the trace's time 0 came from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeOrigin {
    /// Numeric offsets from the trace's start, kept as they are.
    #[default]
    Offsets,
    /// Datetimes, rebased so that the earliest request arrives at 0.
    Datetimes,
    /// Numbers that are Unix times (the earliest at or after [`WALL_CLOCK_FLOOR_UNIX_NS`]),
    /// rebased so that the earliest request arrives at 0.
    UnixNumbers,
    /// Unix times kept as offsets, as `keep_offsets` asked: time 0 is 1970-01-01, and the trace
    /// carries no separate wall-clock start.
    UnixNumbersKept,
    /// Times of a clock with an arbitrary origin, as a preset's arrival column is (vLLM's
    /// monotonic `queued_ts`, inference-perf's `perf_counter` seconds), rebased so that the
    /// earliest request arrives at 0; `keep_offsets` keeps them as they are ([`Offsets`](Self::Offsets)).
    ArbitraryClock,
}

impl TimeOrigin {
    /// A phrase for terminals: what the arrival times were read as and where time 0 is.
    pub fn describe(self) -> &'static str {
        match self {
            TimeOrigin::Offsets => "offsets from the trace's start, kept as they are",
            TimeOrigin::Datetimes => "datetimes, rebased to the first arrival",
            TimeOrigin::UnixNumbers => {
                "Unix times, rebased to the first arrival (--keep-offsets keeps them as they are)"
            }
            TimeOrigin::UnixNumbersKept => {
                "Unix times kept as offsets (--keep-offsets): time 0 is 1970-01-01"
            }
            TimeOrigin::ArbitraryClock => {
                "times of the log's own clock (an arbitrary origin), rebased to the first arrival \
                 (--keep-offsets keeps them as they are)"
            }
        }
    }
}

/// What ingest (and the transforms after it) did, so that every row read is accounted for:
/// `rows_read == rows_skipped + rows_left_out + rows + dropped_by_window + dropped_by_sample +
/// dropped_by_limit`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct IngestReport {
    /// Per file: path, format, data rows read, rows skipped.
    pub files: Vec<FileReport>,
    /// Data rows in all files.
    pub rows_read: u64,
    /// Rows skipped as invalid (only with `--skip-invalid`).
    pub rows_skipped: u64,
    /// Skipped rows by reason (labels as in [`InvalidReason::label`](crate::error::InvalidReason::label)).
    pub skipped_by_reason: BTreeMap<String, u64>,
    /// Records the format leaves out, neither kept nor invalid: a load generator's failed
    /// requests and warm-up (inference-perf, AIPerf), as `capsim fit` leaves them out.
    #[serde(skip_serializing_if = "is_zero")]
    pub rows_left_out: u64,
    /// Those records by reason (`failed (error set)`, `warmup`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub left_out_by_reason: BTreeMap<String, u64>,
    /// Rows that arrived earlier than a row before them in the input (they were sorted).
    pub out_of_order: u64,
    /// What the arrival times were read as, and where time 0 is.
    pub time_origin: TimeOrigin,
    /// Numeric arrival columns with no unit stated whose unit was inferred from their values'
    /// magnitude (Unix times), one per file.
    pub inferred_units: Vec<InferredUnit>,
    /// Rows flagged failed (kept in the trace).
    pub failed: u64,
    /// Rows dropped by `--window`.
    pub dropped_by_window: u64,
    /// Rows dropped by `--sample`.
    pub dropped_by_sample: u64,
    /// Rows dropped by `--limit`.
    pub dropped_by_limit: u64,
    /// Rows added by `--extend-to`'s block bootstrap.
    pub added_by_extend: u64,
    /// Rows in the final trace.
    pub rows: u64,
}

/// One input file's share of an [`IngestReport`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileReport {
    /// The file read (a directory given as input appears as one entry per file in it).
    pub path: PathBuf,
    /// The format it was read as, by its `--format` name.
    pub format: &'static str,
    /// Data rows in the file (a CSV header not counted).
    pub rows_read: u64,
    /// Of those, rows skipped as invalid (only with `--skip-invalid`; else 0).
    pub rows_skipped: u64,
}

impl IngestReport {
    /// True when every row read is in the trace, skipped, or dropped by a transform.
    pub fn adds_up(&self) -> bool {
        self.rows_read
            == self.rows_skipped
                + self.rows_left_out
                + self.rows
                + self.dropped_by_window
                + self.dropped_by_sample
                + self.dropped_by_limit
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// File extensions read from a directory.
const TRACE_EXTENSIONS: [&str; 4] = ["parquet", "csv", "jsonl", "json"];

/// Expands directories into their trace files (sorted by name); checks that paths exist.
pub fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, TraceError> {
    if paths.is_empty() {
        return Err(TraceError::NoInput);
    }
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|source| TraceError::Io {
                path: path.clone(),
                source,
            })?;
            let mut found: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && has_trace_extension(p))
                .collect();
            if found.is_empty() {
                return Err(TraceError::EmptyDirectory { path: path.clone() });
            }
            found.sort();
            files.extend(found);
        } else if path.exists() {
            files.push(path.clone());
        } else {
            return Err(TraceError::NotFound { path: path.clone() });
        }
    }
    Ok(files)
}

fn has_trace_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| TRACE_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()))
}

/// Reads `paths` (files or directories) as one trace ordered by arrival.
pub fn read_trace(
    paths: &[PathBuf],
    opts: &IngestOptions,
) -> Result<(Trace, IngestReport), TraceError> {
    let files = expand_paths(paths)?;
    let mut report = IngestReport::default();
    let mut merged: Option<Part> = None;
    for path in &files {
        let format = match opts.format {
            Some(f) => f,
            None => format::detect(path)?,
        };
        let (part, inferred) = read_file(path, format, opts)?;
        report.inferred_units.extend(inferred);
        let skipped: u64 = part.skipped.values().sum();
        report.files.push(FileReport {
            path: path.clone(),
            format: format.name(),
            rows_read: part.rows_read,
            rows_skipped: skipped,
        });
        report.rows_read += part.rows_read;
        report.rows_skipped += skipped;
        for (reason, n) in &part.skipped {
            *report
                .skipped_by_reason
                .entry(reason.label().to_string())
                .or_insert(0) += n;
        }
        for (&reason, n) in &part.left_out {
            report.rows_left_out += n;
            *report
                .left_out_by_reason
                .entry(reason.to_string())
                .or_insert(0) += n;
        }
        merged = Some(match merged {
            None => part,
            Some(mut first) => {
                check_compatible(&first, &part)?;
                first.cols.append(part.cols);
                first
            }
        });
    }
    let Some(part) = merged else {
        return Err(TraceError::NoInput);
    };
    if part.cols.len() == 0 {
        let what = describe_inputs(&files);
        let hint = if report.rows_skipped > 0 {
            format!(
                "all {} rows were invalid ({})",
                report.rows_skipped,
                reasons(&report.skipped_by_reason)
            )
        } else if report.rows_left_out > 0 {
            format!(
                "all {} records were left out by the format ({})",
                report.rows_left_out,
                reasons(&report.left_out_by_reason)
            )
        } else {
            String::new()
        };
        return Err(TraceError::Empty { what, hint });
    }
    let (columns, out_of_order, time_origin) = finish(part.cols, part.base, opts.keep_offsets);
    report.out_of_order = out_of_order;
    report.time_origin = time_origin;
    let trace = Trace::from_columns(columns)?;
    report.failed = trace
        .failed()
        .map_or(0, |f| f.iter().filter(|&&x| x).count() as u64);
    report.rows = trace.len() as u64;
    Ok((trace, report))
}

/// Reads one file in `format`, through the format's map and `opts.maps`; returns its part and
/// the unit inferred for its arrivals, if one was.
fn read_file(
    path: &Path,
    format: Format,
    opts: &IngestOptions,
) -> Result<(Part, Option<InferredUnit>), TraceError> {
    let container = format.container();
    let mut map: ColumnMap = format.base_map();
    for spec in &opts.maps {
        if !container.mapped() {
            return Err(TraceError::BadMap {
                spec: spec.clone(),
                reason: format!(
                    "--format {} reads its own keys (docs/trace-format.md); drop --map",
                    format.name()
                ),
            });
        }
        map.apply(spec)?;
    }
    let ro = ReadOptions {
        map: &map,
        skip_invalid: opts.skip_invalid,
    };
    let mut part = match container {
        format::Container::Parquet => read::parquet::read(path, &ro)?,
        format::Container::Csv => read::csv::read(path, &ro)?,
        format::Container::Jsonl => read::jsonl::read(path, &ro)?,
        format::Container::InferencePerf => read::loadgen::read_inference_perf(path, &ro)?,
        format::Container::Aiperf => read::loadgen::read_aiperf(path, &ro)?,
    };
    let inferred = crate::arrival_unit::settle(&mut part, &map.arrival)?;
    // The preset's own arrival column keeps its meaning: a clock with an arbitrary origin.
    let own_arrival = map.arrival == format.base_map().arrival;
    if format.arrival_clock_is_arbitrary() && own_arrival && part.base == TimeBase::Offset {
        part.base = TimeBase::Clock;
    }
    Ok((part, inferred))
}

fn describe_inputs(files: &[PathBuf]) -> String {
    match files {
        [one] => one.display().to_string(),
        many => format!("{} files", many.len()),
    }
}

fn reasons(by_reason: &BTreeMap<String, u64>) -> String {
    by_reason
        .iter()
        .map(|(r, n)| format!("{r}: {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_compatible(first: &Part, next: &Part) -> Result<(), TraceError> {
    let a = first.cols.presence().list();
    let b = next.cols.presence().list();
    if let Some(((column, _), (_, present))) = a.iter().zip(b.iter()).find(|(x, y)| x.1 != y.1) {
        return Err(TraceError::SchemaMismatch {
            path: next.path.clone(),
            first: first.path.clone(),
            column: column.to_string(),
            present: *present,
        });
    }
    if first.base != next.base {
        return Err(TraceError::MixedTimeBase {
            path: next.path.clone(),
            first: first.path.clone(),
            this: next.base.describe(),
            other: first.base.describe(),
        });
    }
    Ok(())
}

/// Sorts (stably) and rebases the builder into canonical columns. Returns the columns, the
/// number of rows that arrived out of order, and where time 0 was put.
fn finish(mut b: Builder, base: TimeBase, keep_offsets: bool) -> (Columns, u64, TimeOrigin) {
    let mut out_of_order = 0u64;
    let mut latest = i64::MIN;
    for &a in &b.arrival {
        if a < latest {
            out_of_order += 1;
        } else {
            latest = a;
        }
    }
    if out_of_order > 0 {
        let mut order: Vec<usize> = (0..b.arrival.len()).collect();
        order.sort_by_key(|&i| b.arrival[i]);
        b = permute(b, &order);
    }
    let min = b.arrival.first().copied().unwrap_or(0);
    let origin = match base {
        TimeBase::Unix => TimeOrigin::Datetimes,
        // A clock's times that can only be Unix times are read as such, like any number.
        TimeBase::Offset | TimeBase::Clock if min >= WALL_CLOCK_FLOOR_UNIX_NS => {
            if keep_offsets {
                TimeOrigin::UnixNumbersKept
            } else {
                TimeOrigin::UnixNumbers
            }
        }
        TimeBase::Clock if !keep_offsets => TimeOrigin::ArbitraryClock,
        TimeBase::Offset | TimeBase::Clock => TimeOrigin::Offsets,
    };
    let (shift, start_unix_ns) = match origin {
        TimeOrigin::Datetimes | TimeOrigin::UnixNumbers => (min, Some(min)),
        TimeOrigin::ArbitraryClock => (min, None),
        TimeOrigin::UnixNumbersKept | TimeOrigin::Offsets => (0, None),
    };
    // Same size and alignment: this collect reuses the allocation.
    let mut arrival_ns: Vec<u64> = b.arrival.into_iter().map(|a| (a - shift) as u64).collect();
    arrival_ns.shrink_to_fit();
    let mut input_tokens = b.input;
    input_tokens.shrink_to_fit();
    let shrink = |v: Option<Vec<u32>>| {
        v.map(|mut v| {
            v.shrink_to_fit();
            v
        })
    };
    let cols = Columns {
        arrival_ns,
        input_tokens,
        output_tokens: shrink(b.output),
        request_id: b.request_id,
        model: b.model,
        class: shrink(b.class),
        prefix_blocks: b.prefix_blocks,
        failed: b.failed,
        observed: ObservedLatencies {
            e2e_ms: b.e2e_ms,
            queue_ms: b.queue_ms,
            compute_ms: b.compute_ms,
        },
        start_unix_ns,
    };
    (cols, out_of_order, origin)
}

fn permute(b: Builder, order: &[usize]) -> Builder {
    fn take<T: Copy>(v: &[T], order: &[usize]) -> Vec<T> {
        order.iter().map(|&i| v[i]).collect()
    }
    Builder {
        arrival: take(&b.arrival, order),
        arrival_raw: None,
        input: take(&b.input, order),
        output: b.output.as_deref().map(|v| take(v, order)),
        request_id: b.request_id.as_ref().map(|c| c.take(order)),
        model: b.model.as_ref().map(|c| c.take(order)),
        class: b.class.as_deref().map(|v| take(v, order)),
        prefix_blocks: b.prefix_blocks.as_ref().map(|c| c.take(order)),
        failed: b.failed.as_deref().map(|v| take(v, order)),
        e2e_ms: b.e2e_ms.as_deref().map(|v| take(v, order)),
        queue_ms: b.queue_ms.as_deref().map(|v| take(v, order)),
        compute_ms: b.compute_ms.as_deref().map(|v| take(v, order)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn unsorted_csv_is_sorted_stably_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "t.csv",
            "arrival,input_tokens\n5,1\n3,2\n3,3\n9,4\n1,5\n",
        );
        let (trace, report) = read_trace(&[p], &IngestOptions::default()).unwrap();
        assert_eq!(trace.arrival_ns(), &[1, 3, 3, 5, 9]);
        assert_eq!(
            trace.input_tokens(),
            &[5, 2, 3, 1, 4],
            "ties keep input order"
        );
        assert_eq!(report.out_of_order, 3);
        assert!(report.adds_up());
    }

    #[test]
    fn skip_invalid_counts_rows_by_reason() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "t.csv",
            "arrival,input_tokens,output_tokens\n1,10,2\n2,-4,2\n3,NaN,1\n4,5,\n5,5,5\n",
        );
        let opts = IngestOptions {
            skip_invalid: true,
            ..IngestOptions::default()
        };
        let (trace, report) = read_trace(std::slice::from_ref(&p), &opts).unwrap();
        assert_eq!(trace.len(), 2);
        assert_eq!(report.rows_read, 5);
        assert_eq!(report.skipped_by_reason.get("negative"), Some(&1));
        assert_eq!(report.skipped_by_reason.get("not_finite"), Some(&1));
        assert_eq!(report.skipped_by_reason.get("missing_value"), Some(&1));
        assert!(report.adds_up(), "{report:?}");
        let err = read_trace(&[p], &IngestOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("line 3, column `input_tokens`: negative value \"-4\""),
            "{err}"
        );
    }

    #[test]
    fn datetimes_rebase_to_the_earliest_arrival() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47.5,1,2\n2023-11-16 18:15:46.0000001,3,4\n",
        );
        let (trace, report) = read_trace(&[p], &IngestOptions::default()).unwrap();
        assert_eq!(trace.arrival_ns(), &[0, 1_499_999_900]);
        assert_eq!(report.out_of_order, 1);
        assert!(trace.start_unix_ns().is_some());
    }

    #[test]
    fn unix_numbers_in_any_unit_rebase_to_the_first_arrival() {
        let dir = tempfile::tempdir().unwrap();
        let first_unix_ns = 1_777_142_838_300_000_000i64;
        for (unit, first, second) in [
            ("s", "1777142838.3", "1777142839.5"),
            ("ms", "1777142838300", "1777142839500"),
            ("us", "1777142838300000", "1777142839500000"),
            ("ns", "1777142838300000000", "1777142839500000000"),
        ] {
            let p = write(
                dir.path(),
                &format!("{unit}.csv"),
                &format!("t,n\n{second},2\n{first},1\n"),
            );
            let opts = IngestOptions {
                maps: vec![format!("arrival=t:{unit},input_tokens=n")],
                ..IngestOptions::default()
            };
            let (trace, report) = read_trace(std::slice::from_ref(&p), &opts).unwrap();
            assert_eq!(trace.arrival_ns(), &[0, 1_200_000_000], "unit {unit}");
            assert_eq!(trace.start_unix_ns(), Some(first_unix_ns), "unit {unit}");
            assert_eq!(report.time_origin, TimeOrigin::UnixNumbers, "unit {unit}");

            let keep = IngestOptions {
                keep_offsets: true,
                ..opts
            };
            let (trace, report) = read_trace(&[p], &keep).unwrap();
            assert_eq!(trace.arrival_ns()[0], first_unix_ns as u64, "unit {unit}");
            assert_eq!(trace.start_unix_ns(), None, "unit {unit}");
            assert_eq!(report.time_origin, TimeOrigin::UnixNumbersKept);
        }
    }

    #[test]
    fn unix_seconds_with_no_unit_are_read_as_seconds_and_noted() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "requests.jsonl",
            "{\"arrival_time\": 1787267980.0827403, \"input_toks\": 2358}\n\
             {\"arrival_time\": 1787267980.3478317, \"input_toks\": 1034}\n\
             {\"arrival_time\": 1787268009.0, \"input_toks\": 10}\n",
        );
        let opts = IngestOptions {
            maps: vec!["arrival=arrival_time,input_tokens=input_toks".into()],
            ..IngestOptions::default()
        };
        let (trace, report) = read_trace(std::slice::from_ref(&p), &opts).unwrap();
        let got = trace.arrival_ns();
        assert_eq!(got[0], 0);
        assert!(got[1].abs_diff(265_091_400) < 1_000, "{got:?}");
        assert!(got[2].abs_diff(28_917_259_700) < 1_000, "{got:?}");
        assert_eq!(report.time_origin, TimeOrigin::UnixNumbers);
        assert_eq!(
            report.inferred_units,
            vec![InferredUnit {
                path: p,
                column: "arrival_time".into(),
                unit: "s"
            }]
        );
        let note = report.inferred_units[0].note();
        assert!(note.contains("--map arrival=arrival_time:s"), "{note}");
    }

    #[test]
    fn unix_milliseconds_with_no_unit_are_read_as_milliseconds() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "t.csv",
            "t,n\n1777142839500,2\n1777142838300,1\n",
        );
        let opts = IngestOptions {
            maps: vec!["arrival=t,input_tokens=n".into()],
            ..IngestOptions::default()
        };
        let (trace, report) = read_trace(&[p], &opts).unwrap();
        assert_eq!(trace.arrival_ns(), &[0, 1_200_000_000]);
        assert_eq!(trace.start_unix_ns(), Some(1_777_142_838_300_000_000));
        assert_eq!(report.inferred_units[0].unit, "ms");
    }

    #[test]
    fn nanosecond_offsets_that_only_look_like_seconds_stay_nanoseconds() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "t.csv",
            "arrival,input_tokens\n1500000000,1\n3000000000,2\n",
        );
        let (trace, report) = read_trace(&[p], &IngestOptions::default()).unwrap();
        assert_eq!(trace.arrival_ns(), &[1_500_000_000, 3_000_000_000]);
        assert!(report.inferred_units.is_empty());
        assert_eq!(report.time_origin, TimeOrigin::Offsets);
    }

    #[test]
    fn many_arrivals_within_nanoseconds_are_refused_naming_the_likely_units() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = "t,n\n".to_string();
        for i in 0..300 {
            text.push_str(&format!("{i},1\n"));
        }
        let p = write(dir.path(), "offsets.csv", &text);
        let opts = IngestOptions {
            maps: vec!["arrival=t,input_tokens=n".into()],
            ..IngestOptions::default()
        };
        let err = read_trace(&[p], &opts).unwrap_err().to_string();
        for want in [
            "offsets.csv: arrival column `t` has no unit",
            "its 300 arrivals span 299 ns",
            "as seconds they span 299.0 s (1.0 req/s)",
            "as milliseconds 299.0 ms",
            "--map arrival=t:s",
        ] {
            assert!(err.contains(want), "missing {want:?} in: {err}");
        }
    }

    #[test]
    fn fractions_with_no_unit_are_refused_not_rounded_to_nanoseconds() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "t.jsonl",
            "{\"arrival\": 0.0, \"input_tokens\": 1}\n{\"arrival\": 2.5, \"input_tokens\": 1}\n",
        );
        let err = read_trace(&[p], &IngestOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("arrival column `arrival` has no unit and holds fractions (2.5)")
                && err.contains("--map arrival=arrival:s"),
            "{err}"
        );
    }

    #[test]
    fn offsets_below_the_year_2000_keep_their_values() {
        let dir = tempfile::tempdir().unwrap();
        // 29 years of seconds: a long offset, still not a Unix time of this century.
        let p = write(dir.path(), "t.csv", "t,n\n5,1\n915148800,2\n");
        let opts = IngestOptions {
            maps: vec!["arrival=t:s,input_tokens=n".to_string()],
            ..IngestOptions::default()
        };
        let (trace, report) = read_trace(&[p], &opts).unwrap();
        assert_eq!(
            trace.arrival_ns(),
            &[5_000_000_000, 915_148_800_000_000_000]
        );
        assert_eq!(trace.start_unix_ns(), None);
        assert_eq!(report.time_origin, TimeOrigin::Offsets);
    }

    #[test]
    fn a_mistyped_column_is_named_with_the_file_line_columns_and_a_suggestion() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = write(
            dir.path(),
            "r.jsonl",
            "\n{\"arrival_time\": 1, \"input_toks\": 2, \"output_toks\": 3}\n",
        );
        let csv = write(
            dir.path(),
            "r.csv",
            "arrival_time,input_toks,output_toks\n1,2,3\n",
        );
        for (path, at) in [(jsonl, "line 2"), (csv, "line 1")] {
            let opts = IngestOptions {
                maps: vec![
                    "arrival=arrival_time:s,input_tokens=input_toks,output_tokens=output_tok"
                        .into(),
                ],
                ..IngestOptions::default()
            };
            let err = read_trace(std::slice::from_ref(&path), &opts)
                .unwrap_err()
                .to_string();
            for want in [
                path.display().to_string().as_str(),
                at,
                "no column `output_tok`",
                "arrival_time, input_toks, output_toks",
                "did you mean `output_toks`?",
            ] {
                assert!(err.contains(want), "missing {want:?} in: {err}");
            }
        }
    }

    #[test]
    fn several_files_merge_into_one_timeline() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(
            dir.path(),
            "a.jsonl",
            "{\"arrival\": 10, \"input_tokens\": 1}\n{\"arrival\": 30, \"input_tokens\": 3}\n",
        );
        let b = write(
            dir.path(),
            "b.jsonl",
            "{\"arrival\": 20, \"input_tokens\": 2}\n",
        );
        let (trace, report) = read_trace(&[a, b], &IngestOptions::default()).unwrap();
        assert_eq!(trace.input_tokens(), &[1, 2, 3]);
        assert_eq!(report.files.len(), 2);
    }

    #[test]
    fn files_with_different_optional_columns_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(
            dir.path(),
            "a.csv",
            "arrival,input_tokens,output_tokens\n1,1,1\n",
        );
        let b = write(dir.path(), "b.csv", "arrival,input_tokens\n2,2\n");
        let err = read_trace(&[a, b], &IngestOptions::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("output_tokens"), "{err}");
    }

    #[test]
    fn burstgpt_zero_token_rows_are_kept_and_flagged_failed() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "b.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
             5,ChatGPT,472,18,490,Conversation log\n\
             7,GPT-4,0,0,0,Conversation log\n",
        );
        let (trace, report) = read_trace(&[p], &IngestOptions::default()).unwrap();
        assert_eq!(trace.len(), 2);
        assert_eq!(trace.failed(), Some(&[false, true][..]));
        assert_eq!(report.failed, 1);
        assert_eq!(trace.model().unwrap().get(1), "GPT-4");
        assert_eq!(trace.arrival_ns(), &[5_000_000_000, 7_000_000_000]);
    }

    #[test]
    fn a_vllm_log_starts_at_its_first_request_unless_offsets_are_kept_or_arrival_remapped() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "requests.jsonl",
            "{\"queued_ts\": 27536.5, \"arrival_time\": 1.7e9, \"input_toks\": 3, \"output_toks\": 4}\n\
             {\"queued_ts\": 27537.25, \"arrival_time\": 1.7e9, \"input_toks\": 5, \"output_toks\": 6}\n",
        );
        let read = |keep_offsets: bool, maps: &[&str]| {
            let opts = IngestOptions {
                format: Some(Format::Vllm),
                keep_offsets,
                maps: maps.iter().map(|m| m.to_string()).collect(),
                ..IngestOptions::default()
            };
            read_trace(std::slice::from_ref(&p), &opts).unwrap()
        };
        let (trace, report) = read(false, &[]);
        assert_eq!(trace.arrival_ns(), &[0, 750_000_000]);
        assert_eq!(report.time_origin, TimeOrigin::ArbitraryClock);
        assert_eq!(
            trace.start_unix_ns(),
            None,
            "the clock's origin is no wall-clock time"
        );
        let (trace, report) = read(true, &[]);
        assert_eq!(
            trace.arrival_ns(),
            &[27_536_500_000_000, 27_537_250_000_000]
        );
        assert_eq!(report.time_origin, TimeOrigin::Offsets);
        // Another arrival column is read as any number (here Unix seconds, rebased).
        let (_, report) = read(false, &["arrival=arrival_time:s"]);
        assert_eq!(report.time_origin, TimeOrigin::UnixNumbers);
        // The clock's unit may be restated; it is still the clock.
        let (trace, report) = read(false, &["arrival=queued_ts:ms"]);
        assert_eq!(trace.arrival_ns(), &[0, 750_000]);
        assert_eq!(report.time_origin, TimeOrigin::ArbitraryClock);
    }
}
