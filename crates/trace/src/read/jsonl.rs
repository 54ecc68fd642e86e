//! JSON Lines: one object per line, generic through a [`ColumnMap`], and the Mooncake preset.
//!
//! The first object's keys decide which optional columns exist; a later object missing a key
//! the first one had is an invalid row (missing value).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde_json::Value;

use super::{Builder, Issues, Located, Part, Presence, ReadOptions, RowBuf, TimeBase};
use crate::timestamp::{self, TimeUnit};
use crate::{InvalidReason, TraceError};

type Object = serde_json::Map<String, Value>;

pub(crate) fn read(path: &Path, opts: &ReadOptions<'_>) -> Result<Part, TraceError> {
    let io_err = |source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io_err)?;
    let mut reader = BufReader::with_capacity(1 << 18, file);
    let map = opts.map;
    let mut issues = Issues::new(path, opts.skip_invalid);
    let mut line_buf = Vec::new();
    let mut line_no = 0u64;
    let mut rows_read = 0u64;
    let mut cols: Option<Builder> = None;
    let mut keys = Keys::default();
    let mut unit = map.arrival_unit;
    let mut unstated = false;
    let mut row = RowBuf::default();
    loop {
        line_buf.clear();
        let n = reader.read_until(b'\n', &mut line_buf).map_err(io_err)?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = line_buf.trim_ascii();
        if text.is_empty() {
            continue;
        }
        rows_read += 1;
        let obj = match serde_json::from_slice::<Value>(text) {
            Ok(Value::Object(obj)) => obj,
            _ => {
                issues.bad(line_no, "(record)", text, InvalidReason::BadRecord)?;
                continue;
            }
        };
        let cols = match &mut cols {
            Some(c) => c,
            None => {
                keys = resolve_keys(path, line_no, &obj, map)?;
                cols.insert(Builder::new(keys.presence(map.zero_output_is_failed), 1024))
            }
        };
        // Arrival.
        let raw = obj.get(&keys.arrival).unwrap_or(&Value::Null);
        let unit_now = match unit {
            Some(u) => u,
            None => *unit.insert(first_unit(raw, &mut unstated, cols)),
        };
        match arrival_value(raw, unit_now) {
            Ok(v) => {
                row.arrival = v;
                row.arrival_raw = raw
                    .as_f64()
                    .or_else(|| raw.as_str().and_then(|s| s.trim().parse().ok()))
                    .unwrap_or(f64::NAN);
            }
            Err(reason) => {
                issues.bad(line_no, &keys.arrival, &show(raw), reason)?;
                continue;
            }
        }
        match size_value(obj.get(&keys.input)) {
            Ok(v) => row.input = v,
            Err(reason) => {
                issues.bad(
                    line_no,
                    &keys.input,
                    &show_opt(obj.get(&keys.input)),
                    reason,
                )?;
                continue;
            }
        }
        if !read_optional(&keys, &obj, &mut row, line_no, &mut issues)? {
            continue;
        }
        if map.zero_output_is_failed && keys.output.is_some() {
            row.failed = row.output == 0;
        }
        cols.push(&row);
    }
    let base = match unit {
        Some(TimeUnit::Datetime) => TimeBase::Unix,
        _ => TimeBase::Offset,
    };
    let cols = cols.unwrap_or_else(|| Builder::new(Presence::default(), 0));
    Ok(Part {
        path: path.to_path_buf(),
        cols,
        base,
        arrival_unstated: unstated,
        rows_read,
        skipped: issues.counts,
        left_out: BTreeMap::new(),
    })
}

/// The arrival's unit told by the first row's `raw` value when the map states none: a number
/// with no unit stated is read as ns (`unstated` set, the values as written kept in `cols`) until
/// `arrival_unit::settle` decides from the whole column; a string is a datetime.
fn first_unit(raw: &Value, unstated: &mut bool, cols: &mut Builder) -> TimeUnit {
    *unstated = !matches!(raw, Value::String(_));
    if *unstated {
        cols.arrival_raw = Some(Vec::with_capacity(1024));
        TimeUnit::Nanos
    } else {
        TimeUnit::Datetime
    }
}

/// Source keys, resolved against the first object.
type Keys = Located<String>;

/// Finds each mapped key in the first object (`first`, on line `line`); a required one that is
/// missing is an error.
fn resolve_keys(
    path: &Path,
    line: u64,
    first: &Object,
    map: &crate::ColumnMap,
) -> Result<Keys, TraceError> {
    Located::resolve(
        map,
        |name| first.contains_key(name).then(|| name.to_string()),
        |name| super::missing_column(path, Some(line), name, first.keys().cloned().collect()),
    )
}

/// Parses the optional columns of one object. `Ok(false)` means the row is skipped.
fn read_optional(
    keys: &Keys,
    obj: &Object,
    row: &mut RowBuf,
    line: u64,
    issues: &mut Issues<'_>,
) -> Result<bool, TraceError> {
    macro_rules! parse_into {
        ($key:expr, $slot:expr, $parse:expr) => {
            if let Some(k) = &$key {
                let v = obj.get(k);
                match $parse(v) {
                    Ok(x) => $slot = x,
                    Err(reason) => {
                        issues.bad(line, k, &show_opt(v), reason)?;
                        return Ok(false);
                    }
                }
            }
        };
    }
    parse_into!(keys.output, row.output, size_value);
    parse_into!(keys.class, row.class, size_value);
    parse_into!(keys.failed, row.failed, bool_value);
    parse_into!(keys.e2e_ms, row.e2e_ms, latency_value);
    parse_into!(keys.queue_ms, row.queue_ms, latency_value);
    parse_into!(keys.compute_ms, row.compute_ms, latency_value);
    for (key, slot) in [
        (&keys.request_id, &mut row.request_id),
        (&keys.model, &mut row.model),
    ] {
        if let Some(k) = key {
            slot.clear();
            match obj.get(k) {
                Some(Value::String(s)) => slot.push_str(s),
                Some(Value::Null) | None => {}
                Some(other) => slot.push_str(&other.to_string()),
            }
        }
    }
    if let Some(k) = &keys.prefix_blocks {
        row.blocks.clear();
        let v = obj.get(k);
        if let Err(reason) = blocks_value(v, &mut row.blocks) {
            issues.bad(line, k, &show_opt(v), reason)?;
            return Ok(false);
        }
    }
    Ok(true)
}

pub(crate) fn arrival_value(v: &Value, unit: TimeUnit) -> Result<i64, InvalidReason> {
    match v {
        Value::Null => Err(InvalidReason::MissingValue),
        Value::String(s) if unit == TimeUnit::Datetime => {
            timestamp::parse_datetime_ns(s.as_bytes())
        }
        Value::String(s) => timestamp::parse_offset_ns(s.as_bytes(), unit),
        Value::Number(_) if unit == TimeUnit::Datetime => Err(InvalidReason::BadTimestamp),
        Value::Number(n) => match n.as_u64() {
            Some(u) => u
                .checked_mul(unit.ns_per_unit())
                .and_then(|ns| i64::try_from(ns).ok())
                .ok_or(InvalidReason::TooLarge),
            None => timestamp::offset_from_f64(n.as_f64().unwrap_or(f64::NAN), unit),
        },
        _ => Err(InvalidReason::BadTimestamp),
    }
}

pub(crate) fn size_value(v: Option<&Value>) -> Result<u32, InvalidReason> {
    match v {
        None | Some(Value::Null) => Err(InvalidReason::MissingValue),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(u) => u32::try_from(u).map_err(|_| InvalidReason::TooLarge),
            None => timestamp::size_from_f64(n.as_f64().unwrap_or(f64::NAN)),
        },
        Some(Value::String(s)) => timestamp::parse_size(s.as_bytes()),
        Some(_) => Err(InvalidReason::BadNumber),
    }
}

fn bool_value(v: Option<&Value>) -> Result<bool, InvalidReason> {
    match v {
        None | Some(Value::Null) => Err(InvalidReason::MissingValue),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(InvalidReason::BadBool),
        },
        Some(Value::String(s)) => super::parse_bool(s.as_bytes()),
        Some(_) => Err(InvalidReason::BadBool),
    }
}

fn latency_value(v: Option<&Value>) -> Result<f64, InvalidReason> {
    match v {
        None | Some(Value::Null) => Ok(f64::NAN),
        Some(Value::Number(n)) => {
            let x = n.as_f64().ok_or(InvalidReason::BadNumber)?;
            if x < 0.0 {
                Err(InvalidReason::Negative)
            } else {
                Ok(x)
            }
        }
        Some(Value::String(s)) => super::parse_latency(s.as_bytes()),
        Some(_) => Err(InvalidReason::BadNumber),
    }
}

fn blocks_value(v: Option<&Value>, out: &mut Vec<u64>) -> Result<(), InvalidReason> {
    match v {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(items)) => {
            for item in items {
                match item.as_u64() {
                    Some(x) => out.push(x),
                    None if item.as_i64().is_some_and(|x| x < 0) => {
                        return Err(InvalidReason::Negative);
                    }
                    None => return Err(InvalidReason::BadNumber),
                }
            }
            Ok(())
        }
        Some(_) => Err(InvalidReason::BadNumber),
    }
}

fn show(v: &Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

fn show_opt(v: Option<&Value>) -> Vec<u8> {
    v.map(show).unwrap_or_default()
}
