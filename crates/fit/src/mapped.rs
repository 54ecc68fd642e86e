//! Per-request logs in any CSV, JSON-lines or Parquet layout, read through a `--map` of their
//! columns.
//!
//! ```text
//! arrival=t_send:s,first_token=t_first:s,last_token=t_last:s,input_tokens=prompt,output_tokens=completion
//! arrival=start_ms:ms,ttft=ttft_ms:ms,e2e=latency_ms:ms,input_tokens=isl,output_tokens=osl
//! ```
//!
//! Keys: `arrival`, `input_tokens`, `output_tokens`, and either both timestamps `first_token` and
//! `last_token` (on the arrival's clock) or both durations `ttft` and `e2e` (from the arrival). A
//! time column takes a unit after a colon: `s`, `ms`, `us` or `ns` (default `s`, except that a
//! timestamp column whose first value is a Unix time in ms, us or ns by its magnitude is read
//! in that unit, see [`LogMap::settle_units`]). Values must be
//! numbers (datetimes are not read here; a Parquet column may be of any integer or float type).
//! Latencies count from `arrival`. Parquet is told by its magic bytes; otherwise a `.csv` file is
//! CSV and anything else JSON lines.

use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, RecordBatch};
use capsim_trace::{MapError, MapKey, MapReader, TimeUnit, map_entries};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::log::{LogError, MeasuredLog, Row, into_log, is_parquet, read_text};

/// A numeric column and the nanoseconds of one of its units.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeColumn {
    /// Column (CSV header) or key (JSON) name.
    pub name: String,
    /// Nanoseconds per unit of the column's values.
    pub unit_ns: f64,
    /// Whether the map gave the unit; when not, `unit_ns` is the default (seconds) until the
    /// values' magnitude says they are Unix times in another unit (see [`LogMap::settle_units`]).
    pub unit_stated: bool,
}

/// Where a log keeps each request's latencies.
#[derive(Debug, Clone, PartialEq)]
pub enum LatencyColumns {
    /// Timestamps of the first and last token, on the arrival's clock.
    Timestamps {
        /// First token.
        first_token: TimeColumn,
        /// Last token.
        last_token: TimeColumn,
    },
    /// Durations from the arrival.
    Durations {
        /// Time to first token.
        ttft: TimeColumn,
        /// End-to-end latency.
        e2e: TimeColumn,
    },
}

/// A `--map` of a log's columns (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct LogMap {
    /// Arrival time.
    pub arrival: TimeColumn,
    /// Prompt tokens.
    pub input_tokens: String,
    /// Output tokens.
    pub output_tokens: String,
    /// Latencies.
    pub latencies: LatencyColumns,
}

impl LogMap {
    /// Parses `key=column[:unit],...`. An unknown key, a missing one or a bad unit is an error
    /// naming it.
    pub fn parse(text: &str) -> Result<LogMap, LogError> {
        let bad = |message: String| LogError::Map {
            map: text.to_string(),
            message,
        };
        let mut entries: Vec<(MapKey, TimeColumn)> = Vec::new();
        for entry in map_entries(text, MapReader::Log) {
            let entry = entry.map_err(|e| bad(map_message(&e)))?;
            let unit = entry.unit.unwrap_or(TimeUnit::Seconds);
            entries.push((
                entry.key,
                TimeColumn {
                    name: entry.column.to_string(),
                    unit_ns: unit.ns_per_unit() as f64,
                    unit_stated: entry.unit.is_some(),
                },
            ));
        }
        let take = |key: MapKey| {
            entries
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, c)| c.clone())
        };
        let need = |key: MapKey| {
            take(key).ok_or_else(|| bad(format!("no `{}`; a fit needs {}", key.name(), NEEDED)))
        };
        let latencies = match (
            take(MapKey::FirstToken),
            take(MapKey::LastToken),
            take(MapKey::Ttft),
            take(MapKey::E2e),
        ) {
            (Some(first_token), Some(last_token), None, None) => LatencyColumns::Timestamps {
                first_token,
                last_token,
            },
            (None, None, Some(ttft), Some(e2e)) => LatencyColumns::Durations { ttft, e2e },
            _ => {
                return Err(bad(
                    "give either first_token and last_token (timestamps) or ttft and e2e \
                     (durations), one pair"
                        .into(),
                ));
            }
        };
        Ok(LogMap {
            arrival: need(MapKey::Arrival)?,
            input_tokens: need(MapKey::InputTokens)?.name,
            output_tokens: need(MapKey::OutputTokens)?.name,
            latencies,
        })
    }
}

impl LogMap {
    /// Gives each timestamp column (arrival, first and last token) whose unit the map left out
    /// the unit its first value's magnitude implies when that is Unix milliseconds,
    /// microseconds or nanoseconds (no request log is 30,000 years long in seconds); the
    /// default, seconds, stays otherwise. `get` reads the first row. Returns a note for each
    /// unit inferred.
    pub fn settle_units(&mut self, get: &dyn Fn(&str) -> Result<f64, LogError>) -> Vec<String> {
        let mut notes = Vec::new();
        let mut columns: Vec<&mut TimeColumn> = vec![&mut self.arrival];
        if let LatencyColumns::Timestamps {
            first_token,
            last_token,
        } = &mut self.latencies
        {
            columns.extend([first_token, last_token]);
        }
        for column in columns.into_iter().filter(|c| !c.unit_stated) {
            let Ok(value) = get(&column.name) else {
                continue;
            };
            let unit = capsim_trace::epoch_unit(value, value).filter(|u| *u != TimeUnit::Seconds);
            if let Some(unit) = unit {
                column.unit_ns = unit.ns_per_unit() as f64;
                column.unit_stated = true;
                notes.push(format!(
                    "`{}` read as Unix time in {} by its magnitude (state it: {}:{})",
                    column.name,
                    unit.name(),
                    column.name,
                    unit.name()
                ));
            }
        }
        notes
    }

    /// The columns the map names, arrival first.
    pub fn column_names(&self) -> Vec<&str> {
        let mut names = vec![
            self.arrival.name.as_str(),
            self.input_tokens.as_str(),
            self.output_tokens.as_str(),
        ];
        match &self.latencies {
            LatencyColumns::Timestamps {
                first_token,
                last_token,
            } => names.extend([first_token.name.as_str(), last_token.name.as_str()]),
            LatencyColumns::Durations { ttft, e2e } => {
                names.extend([ttft.name.as_str(), e2e.name.as_str()]);
            }
        }
        names
    }
}

/// Fit's wording of a `--map` error.
fn map_message(error: &MapError) -> String {
    match error {
        MapError::NotKeyColumn { entry } => format!("`{entry}` is not key=column"),
        MapError::UnknownUnit { key, unit } => {
            format!("unit `{unit}` of `{key}`: use s, ms, us or ns")
        }
        MapError::UnknownKey { key } => format!(
            "unknown key `{key}`; keys: {}",
            MapKey::names(MapReader::Log).join(", ")
        ),
        // The log reader leaves an empty column to the read, which names it.
        MapError::NoColumn { .. } => error.to_string(),
    }
}

const NEEDED: &str =
    "arrival, input_tokens, output_tokens, and first_token and last_token or ttft and e2e";

/// Reads a Parquet (by its magic bytes), CSV (`.csv`) or JSON-lines (anything else) log through
/// `map`.
pub fn read_mapped(path: &Path, map: &LogMap) -> Result<MeasuredLog, LogError> {
    if is_parquet(path)? {
        return read_mapped_parquet(path, map);
    }
    let mut map = map.clone();
    let mut notes: Option<Vec<String>> = None;
    let csv = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let text = read_text(path)?;
    let mut rows = Vec::new();
    if csv {
        let mut reader = csv::Reader::from_reader(text.as_bytes());
        let headers = reader
            .headers()
            .map_err(|e| row_err(path, 1, format!("unreadable header ({e})")))?
            .clone();
        for (i, record) in reader.records().enumerate() {
            let line = i + 2;
            let record = record.map_err(|e| row_err(path, line, e.to_string()))?;
            let get = |name: &str| -> Result<f64, LogError> {
                let k = headers
                    .iter()
                    .position(|h| h == name)
                    .ok_or_else(|| row_err(path, 1, no_column(name, headers.iter())))?;
                let cell = record.get(k).unwrap_or("").trim();
                cell.parse::<f64>().map_err(|_| {
                    row_err(path, line, format!("`{name}` = {cell:?} is not a number"))
                })
            };
            notes.get_or_insert_with(|| map.settle_units(&get));
            rows.push(mapped_row(path, line, &map, &get)?);
        }
        let format = described("CSV through --map", notes);
        return Ok(into_log(rows, &format, Vec::new()));
    }
    for (i, line_text) in text.lines().enumerate() {
        let line = i + 1;
        if line_text.trim().is_empty() {
            continue;
        }
        let value: serde_json::Value = serde_json::from_str(line_text).map_err(|e| {
            row_err(
                path,
                line,
                format!("not a JSON object ({e}); --map reads CSV (.csv), JSON lines or Parquet"),
            )
        })?;
        let get = |name: &str| -> Result<f64, LogError> {
            let keys = || {
                value
                    .as_object()
                    .into_iter()
                    .flat_map(|o| o.keys().map(String::as_str))
            };
            let cell = value
                .get(name)
                .ok_or_else(|| row_err(path, line, no_column(name, keys())))?;
            cell.as_f64()
                .ok_or_else(|| row_err(path, line, format!("`{name}` = {cell} is not a number")))
        };
        notes.get_or_insert_with(|| map.settle_units(&get));
        rows.push(mapped_row(path, line, &map, &get)?);
    }
    let format = described("JSON lines through --map", notes);
    Ok(into_log(rows, &format, Vec::new()))
}

/// The log's format, with the units inferred for its columns.
fn described(format: &str, notes: Option<Vec<String>>) -> String {
    match notes.filter(|n| !n.is_empty()) {
        Some(notes) => format!("{format}; {}", notes.join("; ")),
        None => format.to_string(),
    }
}

/// Reads a Parquet log through `map`; rows are numbered from 0, as Parquet readers show them.
fn read_mapped_parquet(path: &Path, map: &LogMap) -> Result<MeasuredLog, LogError> {
    let parquet_err = |message: String| LogError::Parquet {
        path: path.to_path_buf(),
        message,
    };
    let file = std::fs::File::open(path).map_err(|source| LogError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| parquet_err(e.to_string()))?;
    let mut rows = Vec::new();
    let mut base_row = 0;
    let mut map = map.clone();
    let mut notes: Option<Vec<String>> = None;
    for batch in reader {
        let batch = batch.map_err(|e| parquet_err(e.to_string()))?;
        let columns = MappedColumns::of(path, &batch, &map)?;
        for i in 0..batch.num_rows() {
            let row = base_row + i;
            let get = |name: &str| columns.value(path, name, i, row);
            notes.get_or_insert_with(|| map.settle_units(&get));
            rows.push(mapped_row(path, row, &map, &get)?);
        }
        base_row += batch.num_rows();
    }
    let format = described("Parquet through --map", notes);
    Ok(into_log(rows, &format, Vec::new()))
}

/// The numeric columns of one record batch that a map names.
struct MappedColumns {
    columns: Vec<(String, ArrayRef)>,
}

impl MappedColumns {
    /// Finds each column `map` names in `batch`; a missing or non-numeric one is an error
    /// listing the columns there are.
    fn of(path: &Path, batch: &RecordBatch, map: &LogMap) -> Result<MappedColumns, LogError> {
        let mut columns = Vec::new();
        for name in map.column_names() {
            let Some(array) = batch.column_by_name(name) else {
                let schema = batch.schema();
                let present = schema.fields().iter().map(|f| f.name().as_str());
                return Err(LogError::Parquet {
                    path: path.to_path_buf(),
                    message: no_column(name, present),
                });
            };
            if !array.is_empty() && numeric_value(array.as_ref(), 0).is_none() {
                return Err(LogError::Parquet {
                    path: path.to_path_buf(),
                    message: format!(
                        "column `{name}` is {}, not a number; --map reads integer and float \
                         columns (write times as numbers of s, ms, us or ns)",
                        array.data_type()
                    ),
                });
            }
            columns.push((name.to_string(), array.clone()));
        }
        Ok(MappedColumns { columns })
    }

    /// Cell `i` of column `name` as a number; a null is an error naming `row`.
    fn value(&self, path: &Path, name: &str, i: usize, row: usize) -> Result<f64, LogError> {
        let array = self
            .columns
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
            .ok_or_else(|| row_err(path, row, format!("no column `{name}` named in --map")))?;
        if array.is_null(i) {
            return Err(row_err(path, row, format!("`{name}` is null")));
        }
        numeric_value(array.as_ref(), i)
            .ok_or_else(|| row_err(path, row, format!("`{name}` is not a number")))
    }
}

/// Cell `i` of an integer or float array as `f64`; `None` for any other type.
fn numeric_value(array: &dyn Array, i: usize) -> Option<f64> {
    macro_rules! try_type {
        ($($t:ty),*) => {
            $(if let Some(a) = array.as_primitive_opt::<$t>() {
                return Some(a.value(i) as f64);
            })*
        };
    }
    try_type!(
        Float64Type,
        Float32Type,
        Int64Type,
        Int32Type,
        Int16Type,
        Int8Type,
        UInt64Type,
        UInt32Type,
        UInt16Type,
        UInt8Type
    );
    None
}

/// "No column" for a name the `--map` gave: the columns the log has, and the closest of them
/// when one is close.
fn no_column<'a>(name: &str, present: impl Iterator<Item = &'a str> + Clone) -> String {
    let listed: Vec<&str> = present.clone().collect();
    let hint = capsim_trace::closest(name, present)
        .map(|c| format!("; did you mean `{c}`?"))
        .unwrap_or_default();
    format!(
        "no column `{name}` named in --map (the log's columns: {}){hint}",
        listed.join(", ")
    )
}

fn row_err(path: &Path, row: usize, message: String) -> LogError {
    LogError::Row {
        path: path.to_path_buf(),
        row,
        message,
    }
}

/// A hint for a TTFT more than a day off: the arrival is on another clock or in another unit
/// than the token times (vLLM's `arrival_time` is Unix time, its `*_ts` a monotonic clock).
fn clock_hint(ttft_ns: i64) -> &'static str {
    const DAY_NS: u64 = 86_400_000_000_000;
    if ttft_ns.unsigned_abs() > DAY_NS {
        "; a gap of more than a day means the arrival and token columns are on different clocks \
         or in different units: map an arrival on the token times' clock (vLLM: \
         arrival=queued_ts:s) or give each column its unit"
    } else {
        ""
    }
}

/// One request through `map`, its fields read by `get`.
fn mapped_row(
    path: &Path,
    line: usize,
    map: &LogMap,
    get: &dyn Fn(&str) -> Result<f64, LogError>,
) -> Result<Row, LogError> {
    let ns = |c: &TimeColumn| -> Result<i64, LogError> {
        Ok((get(&c.name)? * c.unit_ns).round() as i64)
    };
    let tokens = |name: &str| -> Result<u32, LogError> {
        let n = get(name)?;
        if n < 0.0 || n.fract() != 0.0 || n > f64::from(u32::MAX) {
            return Err(row_err(
                path,
                line,
                format!("`{name}` = {n} is not a token count"),
            ));
        }
        Ok(n as u32)
    };
    let arrival = ns(&map.arrival)?;
    let (ttft, e2e) = match &map.latencies {
        LatencyColumns::Timestamps {
            first_token,
            last_token,
        } => (ns(first_token)? - arrival, ns(last_token)? - arrival),
        LatencyColumns::Durations { ttft, e2e } => (ns(ttft)?, ns(e2e)?),
    };
    if !(0 <= ttft && ttft <= e2e) {
        return Err(row_err(
            path,
            line,
            format!(
                "TTFT {:.6} s and end-to-end {:.6} s: times go backwards (the first token must \
                 come at or after the arrival, the last at or after the first){}",
                ttft as f64 / 1e9,
                e2e as f64 / 1e9,
                clock_hint(ttft)
            ),
        ));
    }
    let output_tokens = tokens(&map.output_tokens)?;
    if output_tokens == 0 {
        return Err(row_err(
            path,
            line,
            format!(
                "`{}` = 0: a request without a token has no TTFT; drop it",
                map.output_tokens
            ),
        ));
    }
    Ok(Row {
        arrival_ns: arrival,
        input_tokens: tokens(&map.input_tokens)?,
        output_tokens,
        ttft_ns: ttft as u64,
        e2e_ns: e2e as u64,
        submit_delay_ns: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_map_needs_one_pair_of_latency_columns_and_known_units() {
        let ok = LogMap::parse("arrival=t:ms,ttft=a:ms,e2e=b:ms,input_tokens=i,output_tokens=o")
            .unwrap();
        assert_eq!(ok.arrival.unit_ns, 1e6);
        let err = LogMap::parse("arrival=t,first_token=a,ttft=b,input_tokens=i,output_tokens=o")
            .unwrap_err()
            .to_string();
        assert!(err.contains("one pair"), "{err}");
        let err = LogMap::parse("arrival=t:min").unwrap_err().to_string();
        assert!(err.contains("unit `min`"), "{err}");
        let err = LogMap::parse("arrival=t,first_token=a,last_token=b,output_tokens=o")
            .unwrap_err()
            .to_string();
        assert!(err.contains("no `input_tokens`"), "{err}");
        let err = LogMap::parse("arival=t").unwrap_err().to_string();
        assert!(err.contains("unknown key `arival`"), "{err}");
    }

    #[test]
    fn a_csv_log_through_a_map_counts_latency_from_its_arrival() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        let mut text = "send,first,last,isl,osl\n".to_string();
        for i in 0..3 {
            let t = 10.0 + f64::from(i);
            text.push_str(&format!("{t},{},{},100,11\n", t + 0.25, t + 1.25));
        }
        std::fs::write(&path, text).unwrap();
        let map = LogMap::parse(
            "arrival=send:s,first_token=first:s,last_token=last:s,input_tokens=isl,output_tokens=osl",
        )
        .unwrap();
        let log = read_mapped(&path, &map).unwrap();
        assert_eq!(log.arrival_ns, vec![0, 1_000_000_000, 2_000_000_000]);
        assert_eq!(log.ttft_ns[1], 250_000_000);
        assert_eq!(log.e2e_ns[1], 1_250_000_000);
        let missing = LogMap::parse(
            "arrival=sent:s,first_token=first:s,last_token=last:s,input_tokens=isl,output_tokens=osl",
        )
        .unwrap();
        let err = read_mapped(&path, &missing).unwrap_err().to_string();
        assert!(
            err.contains("log.csv: row 1") && err.contains("no column `sent`"),
            "{err}"
        );
    }

    #[test]
    fn a_mistyped_column_names_the_row_the_columns_there_are_and_the_closest() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = dir.path().join("requests.jsonl");
        std::fs::write(
            &jsonl,
            "{\"arrival_time\": 1.0, \"first_token_ts\": 1.5, \"last_token_ts\": 2.0, \
             \"input_toks\": 10, \"output_toks\": 5}\n",
        )
        .unwrap();
        let csv = dir.path().join("requests.csv");
        std::fs::write(
            &csv,
            "arrival_time,first_token_ts,last_token_ts,input_toks,output_toks\n1,1.5,2,10,5\n",
        )
        .unwrap();
        let map = LogMap::parse(
            "arrival=arrival_time,first_token=first_token_ts,last_token=last_token_ts,\
             input_tokens=input_toks,output_tokens=output_tok",
        )
        .unwrap();
        for (path, row) in [(&jsonl, "row 1"), (&csv, "row 1")] {
            let err = read_mapped(path, &map).unwrap_err().to_string();
            for want in [
                path.display().to_string().as_str(),
                row,
                "no column `output_tok`",
                "the log's columns: arrival_time, ",
                "last_token_ts",
                "did you mean `output_toks`?",
            ] {
                assert!(err.contains(want), "missing {want:?} in: {err}");
            }
        }
    }

    #[test]
    fn a_value_that_is_not_a_number_is_told_apart_from_a_missing_column() {
        let dir = tempfile::tempdir().unwrap();
        let jsonl = dir.path().join("requests.jsonl");
        std::fs::write(
            &jsonl,
            "{\"t\": 1.0, \"f\": 1.5, \"l\": 2.0, \"i\": 10, \"o\": \"five\"}\n",
        )
        .unwrap();
        let map =
            LogMap::parse("arrival=t,first_token=f,last_token=l,input_tokens=i,output_tokens=o")
                .unwrap();
        let err = read_mapped(&jsonl, &map).unwrap_err().to_string();
        assert!(
            err.contains("row 1: `o` = \"five\" is not a number"),
            "{err}"
        );
    }

    #[test]
    fn unix_milliseconds_with_no_unit_are_read_as_milliseconds_not_seconds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        let mut text = "send,first,last,isl,osl\n".to_string();
        for i in 0..3 {
            let t = 1_787_267_980_000_i64 + 1_000 * i;
            text.push_str(&format!("{t},{},{},100,11\n", t + 250, t + 1_250));
        }
        std::fs::write(&path, text).unwrap();
        let map = LogMap::parse(
            "arrival=send,first_token=first,last_token=last,input_tokens=isl,output_tokens=osl",
        )
        .unwrap();
        let log = read_mapped(&path, &map).unwrap();
        // Unix times in ns are past f64's 2^53: within a microsecond.
        let near = |got: u64, want: u64| assert!(got.abs_diff(want) < 1_000, "{got} vs {want}");
        near(log.arrival_ns[2], 2_000_000_000);
        near(log.ttft_ns[1], 250_000_000);
        near(log.e2e_ns[1], 1_250_000_000);
        assert!(
            log.format
                .contains("`send` read as Unix time in ms by its magnitude (state it: send:ms)"),
            "{}",
            log.format
        );
    }

    #[test]
    fn unix_seconds_with_no_unit_keep_the_default_without_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.csv");
        let text = "send,first,last,isl,osl\n1787267980.5,1787267980.75,1787267981.75,100,11\n";
        std::fs::write(&path, text).unwrap();
        let map = LogMap::parse(
            "arrival=send,first_token=first,last_token=last,input_tokens=isl,output_tokens=osl",
        )
        .unwrap();
        let log = read_mapped(&path, &map).unwrap();
        assert!(
            log.ttft_ns[0].abs_diff(250_000_000) < 1_000,
            "{}",
            log.ttft_ns[0]
        );
        assert_eq!(log.format, "CSV through --map");
    }

    #[test]
    fn an_arrival_on_another_clock_than_the_tokens_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("requests.jsonl");
        std::fs::write(
            &path,
            "{\"arrival_time\": 1787267980.08, \"first_token_ts\": 27537.35, \
             \"last_token_ts\": 27554.23, \"input_toks\": 10, \"output_toks\": 5}\n",
        )
        .unwrap();
        let map = LogMap::parse(
            "arrival=arrival_time,first_token=first_token_ts,last_token=last_token_ts,\
             input_tokens=input_toks,output_tokens=output_toks",
        )
        .unwrap();
        let err = read_mapped(&path, &map).unwrap_err().to_string();
        assert!(
            err.contains("times go backwards") && err.contains("different clocks"),
            "{err}"
        );
    }

    /// The CSV test's log as Parquet, times in ms (int64) and sizes as uint32.
    fn write_parquet(path: &Path, send_ms: &[i64], first_ms: &[i64], last_ms: &[f64]) {
        use std::sync::Arc;

        use arrow_array::{Float64Array, Int64Array, UInt32Array};
        let n = send_ms.len();
        let batch = RecordBatch::try_from_iter([
            (
                "send",
                Arc::new(Int64Array::from(send_ms.to_vec())) as ArrayRef,
            ),
            (
                "first",
                Arc::new(Int64Array::from(first_ms.to_vec())) as ArrayRef,
            ),
            (
                "last",
                Arc::new(Float64Array::from(last_ms.to_vec())) as ArrayRef,
            ),
            ("isl", Arc::new(UInt32Array::from(vec![100; n])) as ArrayRef),
            ("osl", Arc::new(UInt32Array::from(vec![11; n])) as ArrayRef),
        ])
        .unwrap();
        let file = std::fs::File::create(path).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
    }

    #[test]
    fn a_parquet_log_through_a_map_reads_as_the_same_csv() {
        let dir = tempfile::tempdir().unwrap();
        // No .parquet extension: Parquet is told by its magic bytes.
        let path = dir.path().join("log.bin");
        write_parquet(
            &path,
            &[10_000, 11_000, 12_000],
            &[10_250, 11_250, 12_250],
            &[11_250.0, 12_250.0, 13_250.0],
        );
        let map = LogMap::parse(
            "arrival=send:ms,first_token=first:ms,last_token=last:ms,input_tokens=isl,output_tokens=osl",
        )
        .unwrap();
        let log = read_mapped(&path, &map).unwrap();
        assert_eq!(log.arrival_ns, vec![0, 1_000_000_000, 2_000_000_000]);
        assert_eq!(log.ttft_ns[1], 250_000_000);
        assert_eq!(log.e2e_ns[1], 1_250_000_000);
        assert_eq!((log.input_tokens[2], log.output_tokens[2]), (100, 11));
        assert_eq!(log.format, "Parquet through --map");
        let missing = LogMap::parse(
            "arrival=sent:ms,first_token=first:ms,last_token=last:ms,input_tokens=isl,output_tokens=osl",
        )
        .unwrap();
        let err = read_mapped(&path, &missing).unwrap_err().to_string();
        assert!(
            err.contains("log.bin")
                && err.contains("no column `sent`")
                && err.contains("send, first, last, isl, osl"),
            "{err}"
        );
    }

    #[test]
    fn a_parquet_row_whose_times_go_backwards_names_the_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.parquet");
        write_parquet(&path, &[0, 1_000], &[100, 900], &[200.0, 1_500.0]);
        let map = LogMap::parse(
            "arrival=send:ms,first_token=first:ms,last_token=last:ms,input_tokens=isl,output_tokens=osl",
        )
        .unwrap();
        let err = read_mapped(&path, &map).unwrap_err().to_string();
        assert!(
            err.contains("log.parquet: row 1") && err.contains("backwards"),
            "{err}"
        );
    }
}
