//! CSV with a header row: generic through a [`ColumnMap`], and the Azure and BurstGPT presets.
//!
//! Fields are parsed straight from the csv crate's reused `ByteRecord` (no per-row `String`);
//! the Azure datetime shape has a hand-written parser.

use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use super::{Builder, Issues, Located, Part, ReadOptions, RowBuf, TimeBase};
use crate::format::ColumnMap;
use crate::timestamp::{self, TimeUnit};
use crate::{InvalidReason, TraceError};

/// Each mapped column's index in the header.
type Indices = Located<usize>;

// Start small; after `SAMPLE_ROWS` rows, reserve for the whole file from the bytes a row takes
// so far, so the columns do not double past their final size (peak memory stays near 16 bytes a
// request for arrival and sizes). Ingest trims any slack at the end.
const SAMPLE_ROWS: usize = 4096;

/// Finds each mapped column in `header`; a required one that is missing is an error.
fn find_indices(path: &Path, header: &[String], map: &ColumnMap) -> Result<Indices, TraceError> {
    Located::resolve(
        map,
        |name| header.iter().position(|h| h == name),
        |name| super::missing_column(path, Some(1), name, header.to_vec()),
    )
}

/// One file's reading state: where its columns are, the arrival's unit once known, and the
/// invalid rows so far.
struct Rows<'a> {
    idx: Indices,
    header: Vec<String>,
    /// The arrival's unit: the map's, or decided by the first row.
    unit: Option<TimeUnit>,
    /// A numeric arrival column with no unit stated (read as ns until settled).
    unstated: bool,
    issues: Issues<'a>,
}

pub(crate) fn read(path: &Path, opts: &ReadOptions<'_>) -> Result<Part, TraceError> {
    let file = File::open(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut rdr = csv::ReaderBuilder::new()
        .has_headers(true)
        .flexible(true)
        .from_reader(BufReader::with_capacity(1 << 18, file));
    let header: Vec<String> = rdr
        .byte_headers()
        .map_err(|e| csv_error(path, e))?
        .iter()
        .map(|h| String::from_utf8_lossy(h).trim().to_string())
        .collect();
    let map = opts.map;
    let idx = find_indices(path, &header, map)?;
    let mut cols = Builder::new(idx.presence(map.zero_output_is_failed), SAMPLE_ROWS);
    let mut rows = Rows {
        idx,
        header,
        unit: map.arrival_unit,
        unstated: false,
        issues: Issues::new(path, opts.skip_invalid),
    };
    let mut row = RowBuf::default();
    let mut rec = csv::ByteRecord::new();
    let mut rows_read = 0u64;
    loop {
        match rdr.read_byte_record(&mut rec) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                if let csv::ErrorKind::Io(_) = e.kind() {
                    return Err(csv_error(path, e));
                }
                // A record the csv parser rejects (e.g. a broken quote): count or fail.
                rows_read += 1;
                let line = e.position().map(|p| p.line()).unwrap_or(0);
                rows.issues
                    .bad(line, "(record)", b"", InvalidReason::BadRecord)?;
                continue;
            }
        }
        // A blank line is no record.
        if rec.len() == 1 && rec[0].is_empty() {
            continue;
        }
        rows_read += 1;
        if !rows.parse(&rec, &mut row, &mut cols)? {
            continue;
        }
        if map.zero_output_is_failed && rows.idx.output.is_some() {
            row.failed = row.output == 0;
        }
        cols.push(&row);
        if cols.len() == SAMPLE_ROWS {
            let bytes_so_far = rec.position().map_or(0, |p| p.byte()).max(1);
            let per_row = bytes_so_far as f64 / SAMPLE_ROWS as f64;
            let rows = (file_len as f64 / per_row * 1.02) as usize;
            cols.reserve(rows.saturating_sub(SAMPLE_ROWS).min(1 << 28));
        }
    }
    let base = match rows.unit {
        Some(TimeUnit::Datetime) => TimeBase::Unix,
        _ => TimeBase::Offset,
    };
    Ok(Part {
        path: path.to_path_buf(),
        cols,
        base,
        arrival_unstated: rows.unstated,
        rows_read,
        skipped: rows.issues.counts,
        left_out: std::collections::BTreeMap::new(),
    })
}

impl Rows<'_> {
    /// Parses one record into `row`. `Ok(false)` means the row is skipped (an invalid value,
    /// counted or, without `skip_invalid`, an error).
    #[inline]
    fn parse(
        &mut self,
        rec: &csv::ByteRecord,
        row: &mut RowBuf,
        cols: &mut Builder,
    ) -> Result<bool, TraceError> {
        let line = rec.position().map(|p| p.line()).unwrap_or(0);
        if rec.len() < self.header.len() {
            let got = rec.iter().collect::<Vec<_>>().join(&b","[..]);
            self.issues
                .bad(line, "(record)", &got, InvalidReason::BadRecord)?;
            return Ok(false);
        }
        let field = |i: usize| rec.get(i).unwrap_or_default();
        let raw = field(self.idx.arrival);
        match self.arrival(raw, row, cols) {
            Ok(v) => row.arrival = v,
            Err(reason) => {
                let column = &self.header[self.idx.arrival];
                self.issues.bad(line, column, raw, reason)?;
                return Ok(false);
            }
        }
        // Sizes.
        match timestamp::parse_size(field(self.idx.input)) {
            Ok(v) => row.input = v,
            Err(reason) => {
                let i = self.idx.input;
                self.issues.bad(line, &self.header[i], field(i), reason)?;
                return Ok(false);
            }
        }
        if let Some(i) = self.idx.output {
            match timestamp::parse_size(field(i)) {
                Ok(v) => row.output = v,
                Err(reason) => {
                    self.issues.bad(line, &self.header[i], field(i), reason)?;
                    return Ok(false);
                }
            }
        }
        read_optional(&self.idx, row, rec, line, &mut self.issues, &self.header)
    }

    /// Parses the arrival `raw` in its unit, deciding the unit on the first row when the map
    /// states none (and keeping the value as written while a numeric one waits to be settled).
    #[inline]
    fn arrival(
        &mut self,
        raw: &[u8],
        row: &mut RowBuf,
        cols: &mut Builder,
    ) -> Result<i64, InvalidReason> {
        let unit_now = match self.unit {
            Some(u) => u,
            None => {
                // A number with no unit stated is read as ns until `arrival_unit::settle`
                // decides from the whole column.
                self.unstated = timestamp::parse_f64(raw).is_ok();
                if self.unstated {
                    cols.arrival_raw = Some(Vec::with_capacity(SAMPLE_ROWS));
                }
                *self.unit.insert(if self.unstated {
                    TimeUnit::Nanos
                } else {
                    TimeUnit::Datetime
                })
            }
        };
        let parsed = if raw.is_empty() {
            Err(InvalidReason::MissingValue)
        } else if unit_now == TimeUnit::Datetime {
            timestamp::parse_datetime_ns(raw)
        } else {
            timestamp::parse_offset_ns(raw, unit_now)
        };
        if self.unstated && parsed.is_ok() {
            row.arrival_raw = timestamp::parse_f64(raw).unwrap_or(f64::NAN);
        }
        parsed
    }
}

/// Parses the optional columns of one record. `Ok(false)` means the row is skipped.
fn read_optional(
    idx: &Indices,
    row: &mut RowBuf,
    rec: &csv::ByteRecord,
    line: u64,
    issues: &mut Issues<'_>,
    header: &[String],
) -> Result<bool, TraceError> {
    let field = |i: usize| rec.get(i).unwrap_or_default();
    macro_rules! parse_into {
        ($index:expr, $slot:expr, $parse:expr) => {
            if let Some(i) = $index {
                match $parse(field(i)) {
                    Ok(v) => $slot = v,
                    Err(reason) => {
                        issues.bad(line, &header[i], field(i), reason)?;
                        return Ok(false);
                    }
                }
            }
        };
    }
    if let Some(i) = idx.request_id {
        row.request_id.clear();
        row.request_id.push_str(&String::from_utf8_lossy(field(i)));
    }
    if let Some(i) = idx.model {
        row.model.clear();
        row.model.push_str(&String::from_utf8_lossy(field(i)));
    }
    parse_into!(idx.class, row.class, timestamp::parse_size);
    parse_into!(idx.failed, row.failed, super::parse_bool);
    parse_into!(idx.e2e_ms, row.e2e_ms, super::parse_latency);
    parse_into!(idx.queue_ms, row.queue_ms, super::parse_latency);
    parse_into!(idx.compute_ms, row.compute_ms, super::parse_latency);
    if let Some(i) = idx.prefix_blocks {
        row.blocks.clear();
        if let Err(reason) = parse_block_list(field(i), &mut row.blocks) {
            issues.bad(line, &header[i], field(i), reason)?;
            return Ok(false);
        }
    }
    Ok(true)
}

/// Parses a block list written in one CSV field: `[1, 2, 3]`, `1 2 3` or `1;2;3`.
fn parse_block_list(b: &[u8], out: &mut Vec<u64>) -> Result<(), InvalidReason> {
    let inner = b
        .trim_ascii()
        .strip_prefix(b"[")
        .and_then(|s| s.strip_suffix(b"]"))
        .unwrap_or(b.trim_ascii());
    for item in inner.split(|&c| c == b',' || c == b' ' || c == b';') {
        if item.is_empty() {
            continue;
        }
        out.push(timestamp::parse_u64(item).ok_or(InvalidReason::BadNumber)?);
    }
    Ok(())
}

fn csv_error(path: &Path, e: csv::Error) -> TraceError {
    match e.into_kind() {
        csv::ErrorKind::Io(source) => TraceError::Io {
            path: path.to_path_buf(),
            source,
        },
        other => TraceError::InvalidValue {
            path: path.to_path_buf(),
            at: "line",
            line: 1,
            column: "(header)".to_string(),
            value: format!("{other:?}").chars().take(60).collect(),
            reason: InvalidReason::BadRecord,
            hint: "the header row could not be read as CSV".to_string(),
        },
    }
}
