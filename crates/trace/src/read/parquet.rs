// Over 800 lines: one reader (canonical and mapped schemas share the column decoding); 100 of them are its tests.
//! Parquet: the canonical schema, or any schema through a [`ColumnMap`].
//!
//! Only the mapped columns are decoded. Canonical files (`arrival` Int64 ns, sizes UInt32, no
//! nulls) take a fast path that copies whole batches; other types go through a per-value
//! conversion that checks each value and names the bad ones.

use std::fs::File;
use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type, UInt8Type, UInt16Type,
    UInt32Type, UInt64Type,
};
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, RecordBatch};
use arrow_schema::{DataType, TimeUnit as ArrowUnit};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::{Builder, Issues, Located, Part, ReadOptions, TimeBase};
use crate::format::ColumnMap;
use crate::table::{ListColumn, StringColumn};
use crate::timestamp::{self, TimeUnit};
use crate::{InvalidReason, TraceError};

/// Parquet key-value metadata key holding the Unix ns of `arrival == 0` in canonical files.
pub(crate) const START_KEY: &str = "capsim.start_unix_ns";

const BATCH_ROWS: usize = 64 * 1024;

/// Resolved source column names of the mapped canonical columns.
type Names = Located<String>;

/// Finds each mapped column among the file's columns (`present`); a required one that is
/// missing is an error.
fn find_names(path: &Path, present: &[String], map: &ColumnMap) -> Result<Names, TraceError> {
    Located::resolve(
        map,
        |name| present.iter().any(|p| p == name).then(|| name.to_string()),
        |name| super::missing_column(path, None, name, present.to_vec()),
    )
}

/// The source columns to read, arrival and input first.
fn wanted(names: &Names) -> Vec<&str> {
    [Some(&names.arrival), Some(&names.input)]
        .into_iter()
        .chain([
            names.output.as_ref(),
            names.request_id.as_ref(),
            names.model.as_ref(),
            names.class.as_ref(),
            names.prefix_blocks.as_ref(),
            names.failed.as_ref(),
            names.e2e_ms.as_ref(),
            names.queue_ms.as_ref(),
            names.compute_ms.as_ref(),
        ])
        .flatten()
        .map(String::as_str)
        .collect()
}

pub(crate) fn read(path: &Path, opts: &ReadOptions<'_>) -> Result<Part, TraceError> {
    // The parquet crate asserts on some kinds of damaged metadata instead of returning an
    // error; `check_layout` catches the known ones first, and this turns any other into the same
    // clear error rather than a crash.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| read_unguarded(path, opts)))
        .unwrap_or_else(|_| {
            Err(TraceError::CorruptParquet {
                path: path.to_path_buf(),
                detail: "the Parquet decoder failed on damaged data".to_string(),
            })
        })
}

/// Checks that every column chunk lies inside the file (the decoder panics otherwise).
fn check_layout(
    meta: &parquet::file::metadata::ParquetMetaData,
    file_len: u64,
) -> Result<(), String> {
    for (g, rg) in meta.row_groups().iter().enumerate() {
        for (c, col) in rg.columns().iter().enumerate() {
            let start = col
                .dictionary_page_offset()
                .unwrap_or(col.data_page_offset());
            let len = col.compressed_size();
            let inside =
                start >= 0 && len >= 0 && (start as u64).saturating_add(len as u64) <= file_len;
            if !inside {
                return Err(format!(
                    "row group {g}, column {c}: chunk at offset {start} with {len} bytes lies outside the {file_len}-byte file"
                ));
            }
        }
    }
    Ok(())
}

fn read_unguarded(path: &Path, opts: &ReadOptions<'_>) -> Result<Part, TraceError> {
    let corrupt = |e: &dyn std::fmt::Display| TraceError::CorruptParquet {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let file = File::open(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file_len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| corrupt(&e))?;
    check_layout(builder.metadata(), file_len).map_err(|e| corrupt(&e))?;
    let schema = builder.schema().clone();
    let present: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    let map = opts.map;
    let names = find_names(path, &present, map)?;
    let start_unix_ns: Option<i64> = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == START_KEY))
        .and_then(|k| k.value.as_deref())
        .and_then(|v| v.parse().ok());
    let rows = usize::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
    let indices: Vec<usize> = wanted(&names)
        .iter()
        .filter_map(|w| present.iter().position(|p| p == w))
        .collect();
    let mask = ProjectionMask::roots(builder.parquet_schema(), indices);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(BATCH_ROWS)
        .build()
        .map_err(|e| corrupt(&e))?;
    let mut cols = Builder::new(names.presence(map.zero_output_is_failed), rows);
    let unstated = arrival_unstated(&schema, &names.arrival, map, start_unix_ns);
    let floats = schema
        .field_with_name(&names.arrival)
        .is_ok_and(|f| f.data_type().is_floating());
    if unstated && floats {
        cols.arrival_raw = Some(Vec::with_capacity(rows));
    }
    let mut issues = Issues::new(path, opts.skip_invalid);
    issues.at = "row";
    let mut base = None;
    let mut rows_read = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| corrupt(&e))?;
        let batch_base = read_batch(path, &batch, &names, map, rows_read, &mut cols, &mut issues)?;
        base.get_or_insert(batch_base);
        rows_read += batch.num_rows() as u64;
    }
    let mut base = base.unwrap_or(TimeBase::Offset);
    if let (TimeBase::Offset, Some(start)) = (base, start_unix_ns) {
        // A canonical file that remembers its wall-clock start joins other files on that clock.
        for a in &mut cols.arrival {
            *a = a.saturating_add(start);
        }
        base = TimeBase::Unix;
    }
    Ok(Part {
        path: path.to_path_buf(),
        cols,
        base,
        arrival_unstated: unstated,
        rows_read,
        skipped: issues.counts,
        left_out: std::collections::BTreeMap::new(),
    })
}

/// True when the arrival column is numeric and nothing states its unit: no `--map` unit, no
/// wall-clock start in the metadata, and not the canonical Int64 `arrival` (nanoseconds by the
/// schema).
fn arrival_unstated(
    schema: &arrow_schema::Schema,
    name: &str,
    map: &crate::ColumnMap,
    start_unix_ns: Option<i64>,
) -> bool {
    let Ok(field) = schema.field_with_name(name) else {
        return false;
    };
    let data_type = field.data_type();
    let canonical = name == "arrival" && *data_type == DataType::Int64;
    map.arrival_unit.is_none() && start_unix_ns.is_none() && data_type.is_numeric() && !canonical
}

/// One problem found while converting a batch: batch row, source column, value, reason.
struct Bad {
    row: usize,
    column: String,
    value: String,
    reason: InvalidReason,
}

/// Converts one batch into `cols`, then drops (or fails on) rows with an unusable value.
fn read_batch(
    path: &Path,
    batch: &RecordBatch,
    names: &Names,
    map: &crate::ColumnMap,
    first_row: u64,
    cols: &mut Builder,
    issues: &mut Issues<'_>,
) -> Result<TimeBase, TraceError> {
    let n = batch.num_rows();
    let start = cols.len();
    let mut bad: Vec<Bad> = Vec::new();
    let column = |name: &str| batch_column(path, batch, name);
    let wrong = |name: &str, arr: &dyn Array, expected: &str| wrong_type(path, name, arr, expected);

    let arr = column(&names.arrival)?;
    let base = append_arrival(
        arr.as_ref(),
        map.arrival_unit,
        &names.arrival,
        &mut cols.arrival,
        &mut bad,
    )
    .ok_or_else(|| {
        wrong(
            &names.arrival,
            arr.as_ref(),
            "integer or float offsets (with --map arrival=COL:UNIT), a timestamp, or datetime text",
        )
    })?;
    if let Some(raw) = &mut cols.arrival_raw {
        append_raw(arr.as_ref(), raw);
    }
    let sizes = "a non-negative integer";
    let arr = column(&names.input)?;
    append_sizes(arr.as_ref(), &names.input, &mut cols.input, &mut bad)
        .ok_or_else(|| wrong(&names.input, arr.as_ref(), sizes))?;
    if let (Some(name), Some(out)) = (&names.output, &mut cols.output) {
        let arr = column(name)?;
        append_sizes(arr.as_ref(), name, out, &mut bad)
            .ok_or_else(|| wrong(name, arr.as_ref(), sizes))?;
    }
    if let (Some(name), Some(out)) = (&names.class, &mut cols.class) {
        let arr = column(name)?;
        append_sizes(arr.as_ref(), name, out, &mut bad)
            .ok_or_else(|| wrong(name, arr.as_ref(), sizes))?;
    }
    append_failed_and_latencies(path, batch, names, start, cols, &mut bad)?;
    let mut strings: [(Option<&String>, Option<StringColumn>); 2] = [
        (names.request_id.as_ref(), None),
        (names.model.as_ref(), None),
    ];
    for (name, out) in strings.iter_mut() {
        if let Some(name) = name {
            let arr = column(name)?;
            *out = Some(to_strings(arr.as_ref()).ok_or_else(|| wrong(name, arr.as_ref(), "text"))?);
        }
    }
    let mut blocks = None;
    if let Some(name) = &names.prefix_blocks {
        let arr = column(name)?;
        blocks = Some(
            to_lists(arr.as_ref(), name, &mut bad)
                .ok_or_else(|| wrong(name, arr.as_ref(), "a list of non-negative integers"))?,
        );
    }

    let keep = drop_bad(bad, n, first_row, start, cols, issues)?;
    let kept = |i: &usize| keep.as_ref().is_none_or(|k| k[*i]);
    let [(_, ids), (_, models)] = strings;
    if let (Some(src), Some(dst)) = (ids, &mut cols.request_id) {
        (0..n).filter(kept).for_each(|i| dst.push(src.get(i)));
    }
    if let (Some(src), Some(dst)) = (models, &mut cols.model) {
        (0..n).filter(kept).for_each(|i| dst.push(src.get(i)));
    }
    if let (Some(src), Some(dst)) = (blocks, &mut cols.prefix_blocks) {
        (0..n).filter(kept).for_each(|i| dst.push(src.get(i)));
    }
    Ok(base)
}

/// The batch's column `name`.
fn batch_column<'b>(
    path: &Path,
    batch: &'b RecordBatch,
    name: &str,
) -> Result<&'b ArrayRef, TraceError> {
    batch
        .column_by_name(name)
        .ok_or_else(|| super::missing_column(path, None, name, Vec::new()))
}

/// Column `name` (`arr`) holds values of a type other than `expected`.
fn wrong_type(path: &Path, name: &str, arr: &dyn Array, expected: &str) -> TraceError {
    TraceError::WrongType {
        path: path.to_path_buf(),
        column: name.to_string(),
        actual: arr.data_type().to_string(),
        expected: expected.to_string(),
    }
}

/// Appends a batch's `failed` flags (read, or derived from the outputs appended from `start`
/// under `zero_output_is_failed`) and its three latency columns, where the trace has them.
fn append_failed_and_latencies(
    path: &Path,
    batch: &RecordBatch,
    names: &Names,
    start: usize,
    cols: &mut Builder,
    bad: &mut Vec<Bad>,
) -> Result<(), TraceError> {
    if let Some(out) = &mut cols.failed {
        match &names.failed {
            Some(name) => {
                let arr = batch_column(path, batch, name)?;
                append_bools(arr.as_ref(), name, out, bad)
                    .ok_or_else(|| wrong_type(path, name, arr.as_ref(), "boolean"))?;
            }
            None => {
                // zero_output_is_failed: derived from the output column appended above.
                let outputs = cols.output.as_deref().unwrap_or_default();
                out.extend(outputs[start..].iter().map(|&o| o == 0));
            }
        }
    }
    for (name, out) in [
        (&names.e2e_ms, &mut cols.e2e_ms),
        (&names.queue_ms, &mut cols.queue_ms),
        (&names.compute_ms, &mut cols.compute_ms),
    ] {
        if let (Some(name), Some(out)) = (name, out) {
            let arr = batch_column(path, batch, name)?;
            append_latencies(arr.as_ref(), name, out, bad)
                .ok_or_else(|| wrong_type(path, name, arr.as_ref(), "a number of milliseconds"))?;
        }
    }
    Ok(())
}

/// Appends the arrivals as written (NaN where not a number), for a column whose unit waits to be
/// settled.
fn append_raw(arr: &dyn Array, raw: &mut Vec<f64>) {
    visit(arr, |_, v| {
        raw.push(match v {
            Some(Scalar::F(x)) => x,
            Some(Scalar::I(x)) => x as f64,
            Some(Scalar::U(x)) => x as f64,
            _ => f64::NAN,
        });
    });
}

/// Reports each row of a batch with an unusable value (`bad`; the batch's first row is
/// `first_row` in the file, and its `n` rows start at `start` in `cols`) and drops it from the
/// numeric columns appended so far; returns which rows are kept, `None` when all are.
fn drop_bad(
    mut bad: Vec<Bad>,
    n: usize,
    first_row: u64,
    start: usize,
    cols: &mut Builder,
    issues: &mut Issues<'_>,
) -> Result<Option<Vec<bool>>, TraceError> {
    if bad.is_empty() {
        return Ok(None);
    }
    bad.sort_by_key(|b| b.row);
    let mut mask = vec![true; n];
    for b in &bad {
        if mask[b.row] {
            let row_no = first_row + b.row as u64 + 1;
            issues.bad(row_no, &b.column, b.value.as_bytes(), b.reason)?;
            mask[b.row] = false;
        }
    }
    compact_tail(&mut cols.arrival, start, &mask);
    if let Some(raw) = &mut cols.arrival_raw {
        compact_tail(raw, start, &mask);
    }
    compact_tail(&mut cols.input, start, &mask);
    for v in [&mut cols.output, &mut cols.class].into_iter().flatten() {
        compact_tail(v, start, &mask);
    }
    if let Some(v) = &mut cols.failed {
        compact_tail(v, start, &mask);
    }
    for v in [&mut cols.e2e_ms, &mut cols.queue_ms, &mut cols.compute_ms]
        .into_iter()
        .flatten()
    {
        compact_tail(v, start, &mask);
    }
    Ok(Some(mask))
}

fn compact_tail<T: Copy>(v: &mut Vec<T>, start: usize, keep: &[bool]) {
    let mut w = start;
    for (i, &k) in keep.iter().enumerate() {
        if k {
            v[w] = v[start + i];
            w += 1;
        }
    }
    v.truncate(w);
}

/// A value of any supported scalar type, for the per-value path.
#[derive(Clone, Copy)]
enum Scalar<'a> {
    I(i64),
    U(u64),
    F(f64),
    S(&'a str),
    B(bool),
}

impl std::fmt::Display for Scalar<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::I(v) => write!(f, "{v}"),
            Scalar::U(v) => write!(f, "{v}"),
            Scalar::F(v) => write!(f, "{v}"),
            Scalar::S(v) => write!(f, "{v}"),
            Scalar::B(v) => write!(f, "{v}"),
        }
    }
}

fn visit_prim<T: ArrowPrimitiveType>(
    arr: &dyn Array,
    conv: impl Fn(T::Native) -> Scalar<'static>,
    f: &mut impl FnMut(usize, Option<Scalar<'_>>),
) {
    let a = arr.as_primitive::<T>();
    if a.null_count() == 0 {
        for (i, v) in a.values().iter().enumerate() {
            f(i, Some(conv(*v)));
        }
    } else {
        for i in 0..a.len() {
            f(i, (!a.is_null(i)).then(|| conv(a.value(i))));
        }
    }
}

/// Calls `f` for every row with its value (`None` for null). Returns `None` when the array's
/// type is not a plain scalar.
fn visit(arr: &dyn Array, mut f: impl FnMut(usize, Option<Scalar<'_>>)) -> Option<()> {
    match arr.data_type() {
        DataType::Int8 => visit_prim::<Int8Type>(arr, |v| Scalar::I(v as i64), &mut f),
        DataType::Int16 => visit_prim::<Int16Type>(arr, |v| Scalar::I(v as i64), &mut f),
        DataType::Int32 => visit_prim::<Int32Type>(arr, |v| Scalar::I(v as i64), &mut f),
        DataType::Int64 => visit_prim::<Int64Type>(arr, Scalar::I, &mut f),
        DataType::UInt8 => visit_prim::<UInt8Type>(arr, |v| Scalar::U(v as u64), &mut f),
        DataType::UInt16 => visit_prim::<UInt16Type>(arr, |v| Scalar::U(v as u64), &mut f),
        DataType::UInt32 => visit_prim::<UInt32Type>(arr, |v| Scalar::U(v as u64), &mut f),
        DataType::UInt64 => visit_prim::<UInt64Type>(arr, Scalar::U, &mut f),
        DataType::Float32 => visit_prim::<Float32Type>(arr, |v| Scalar::F(v as f64), &mut f),
        DataType::Float64 => visit_prim::<Float64Type>(arr, Scalar::F, &mut f),
        DataType::Boolean => {
            let a = arr.as_boolean();
            for i in 0..a.len() {
                f(i, (!a.is_null(i)).then(|| Scalar::B(a.value(i))));
            }
        }
        DataType::Utf8 => {
            let a = arr.as_string::<i32>();
            for i in 0..a.len() {
                f(i, (!a.is_null(i)).then(|| Scalar::S(a.value(i))));
            }
        }
        DataType::LargeUtf8 => {
            let a = arr.as_string::<i64>();
            for i in 0..a.len() {
                f(i, (!a.is_null(i)).then(|| Scalar::S(a.value(i))));
            }
        }
        DataType::Utf8View => {
            let a = arr.as_string_view();
            for i in 0..a.len() {
                f(i, (!a.is_null(i)).then(|| Scalar::S(a.value(i))));
            }
        }
        _ => return None,
    }
    Some(())
}

fn push_bad(
    bad: &mut Vec<Bad>,
    row: usize,
    column: &str,
    value: Option<Scalar<'_>>,
    reason: InvalidReason,
) {
    bad.push(Bad {
        row,
        column: column.to_string(),
        value: value.map(|v| v.to_string()).unwrap_or_default(),
        reason,
    });
}

/// Appends arrivals (one per row; bad rows get a placeholder and an entry in `bad`). Returns
/// the time base, or `None` for an unsupported type.
fn append_arrival(
    arr: &dyn Array,
    unit: Option<TimeUnit>,
    name: &str,
    out: &mut Vec<i64>,
    bad: &mut Vec<Bad>,
) -> Option<TimeBase> {
    // Fast path: canonical Int64 nanoseconds without nulls.
    if let (DataType::Int64, None | Some(TimeUnit::Nanos)) = (arr.data_type(), unit)
        && arr.null_count() == 0
    {
        let values = arr.as_primitive::<Int64Type>().values();
        if values.iter().all(|&v| v >= 0) {
            out.extend_from_slice(values);
            return Some(TimeBase::Offset);
        }
    }
    if let DataType::Timestamp(tu, _) = arr.data_type() {
        use arrow_array::types::{
            TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
            TimestampSecondType,
        };
        match tu {
            ArrowUnit::Second => {
                append_timestamps::<TimestampSecondType>(arr, 1_000_000_000, name, out, bad)
            }
            ArrowUnit::Millisecond => {
                append_timestamps::<TimestampMillisecondType>(arr, 1_000_000, name, out, bad)
            }
            ArrowUnit::Microsecond => {
                append_timestamps::<TimestampMicrosecondType>(arr, 1_000, name, out, bad)
            }
            ArrowUnit::Nanosecond => {
                append_timestamps::<TimestampNanosecondType>(arr, 1, name, out, bad)
            }
        }
        return Some(TimeBase::Unix);
    }
    let is_text = matches!(
        arr.data_type(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
    );
    let unit = match unit {
        Some(u) => u,
        None if is_text => TimeUnit::Datetime,
        None => TimeUnit::Nanos,
    };
    if unit == TimeUnit::Datetime && !is_text {
        return None;
    }
    let factor = unit.ns_per_unit();
    visit(arr, |i, v| {
        let parsed = match v {
            None => Err(InvalidReason::MissingValue),
            Some(Scalar::I(x)) if x < 0 => Err(InvalidReason::Negative),
            Some(Scalar::I(x)) => (x as u64)
                .checked_mul(factor)
                .and_then(|ns| i64::try_from(ns).ok())
                .ok_or(InvalidReason::TooLarge),
            Some(Scalar::U(x)) => x
                .checked_mul(factor)
                .and_then(|ns| i64::try_from(ns).ok())
                .ok_or(InvalidReason::TooLarge),
            Some(Scalar::F(x)) => timestamp::offset_from_f64(x, unit),
            Some(Scalar::S(s)) if unit == TimeUnit::Datetime => {
                timestamp::parse_datetime_ns(s.as_bytes())
            }
            Some(Scalar::S(s)) => timestamp::parse_offset_ns(s.as_bytes(), unit),
            Some(Scalar::B(_)) => Err(InvalidReason::BadNumber),
        };
        match parsed {
            Ok(x) => out.push(x),
            Err(reason) => {
                push_bad(bad, i, name, v, reason);
                out.push(0);
            }
        }
    })?;
    Some(if unit == TimeUnit::Datetime {
        TimeBase::Unix
    } else {
        TimeBase::Offset
    })
}

fn append_timestamps<T: ArrowPrimitiveType<Native = i64>>(
    arr: &dyn Array,
    scale: i64,
    name: &str,
    out: &mut Vec<i64>,
    bad: &mut Vec<Bad>,
) {
    let a = arr.as_primitive::<T>();
    for i in 0..a.len() {
        if a.is_null(i) {
            push_bad(bad, i, name, None, InvalidReason::MissingValue);
            out.push(0);
            continue;
        }
        match a.value(i).checked_mul(scale) {
            Some(v) => out.push(v),
            None => {
                push_bad(
                    bad,
                    i,
                    name,
                    Some(Scalar::I(a.value(i))),
                    InvalidReason::TooLarge,
                );
                out.push(0);
            }
        }
    }
}

fn append_sizes(arr: &dyn Array, name: &str, out: &mut Vec<u32>, bad: &mut Vec<Bad>) -> Option<()> {
    // Fast path: canonical UInt32 without nulls.
    if let DataType::UInt32 = arr.data_type()
        && arr.null_count() == 0
    {
        out.extend_from_slice(arr.as_primitive::<UInt32Type>().values());
        return Some(());
    }
    if matches!(arr.data_type(), DataType::Boolean) {
        return None;
    }
    visit(arr, |i, v| {
        let parsed = match v {
            None => Err(InvalidReason::MissingValue),
            Some(Scalar::I(x)) => timestamp::size_from_i64(x),
            Some(Scalar::U(x)) => u32::try_from(x).map_err(|_| InvalidReason::TooLarge),
            Some(Scalar::F(x)) => timestamp::size_from_f64(x),
            Some(Scalar::S(s)) => timestamp::parse_size(s.as_bytes()),
            Some(Scalar::B(_)) => Err(InvalidReason::BadNumber),
        };
        match parsed {
            Ok(x) => out.push(x),
            Err(reason) => {
                push_bad(bad, i, name, v, reason);
                out.push(0);
            }
        }
    })
}

fn append_bools(
    arr: &dyn Array,
    name: &str,
    out: &mut Vec<bool>,
    bad: &mut Vec<Bad>,
) -> Option<()> {
    visit(arr, |i, v| {
        let parsed = match v {
            None => Err(InvalidReason::MissingValue),
            Some(Scalar::B(b)) => Ok(b),
            Some(Scalar::I(0)) | Some(Scalar::U(0)) => Ok(false),
            Some(Scalar::I(1)) | Some(Scalar::U(1)) => Ok(true),
            Some(Scalar::S(s)) => super::parse_bool(s.as_bytes()),
            Some(_) => Err(InvalidReason::BadBool),
        };
        match parsed {
            Ok(x) => out.push(x),
            Err(reason) => {
                push_bad(bad, i, name, v, reason);
                out.push(false);
            }
        }
    })
}

fn append_latencies(
    arr: &dyn Array,
    name: &str,
    out: &mut Vec<f64>,
    bad: &mut Vec<Bad>,
) -> Option<()> {
    if matches!(arr.data_type(), DataType::Boolean) {
        return None;
    }
    visit(arr, |i, v| {
        let parsed = match v {
            None => Ok(f64::NAN),
            Some(Scalar::I(x)) => Ok(x as f64),
            Some(Scalar::U(x)) => Ok(x as f64),
            Some(Scalar::F(x)) => Ok(x),
            Some(Scalar::S(s)) => super::parse_latency(s.as_bytes()),
            Some(Scalar::B(_)) => Err(InvalidReason::BadNumber),
        };
        match parsed {
            Ok(x) if x < 0.0 => {
                push_bad(bad, i, name, v, InvalidReason::Negative);
                out.push(f64::NAN);
            }
            Ok(x) => out.push(x),
            Err(reason) => {
                push_bad(bad, i, name, v, reason);
                out.push(f64::NAN);
            }
        }
    })
}

fn to_strings(arr: &dyn Array) -> Option<StringColumn> {
    let mut col = StringColumn::with_capacity(arr.len());
    let mut buf = String::new();
    visit(arr, |_, v| {
        buf.clear();
        if let Some(v) = v {
            use std::fmt::Write;
            let _ = write!(buf, "{v}");
        }
        col.push(&buf);
    })?;
    Some(col)
}

fn to_lists(arr: &dyn Array, name: &str, bad: &mut Vec<Bad>) -> Option<ListColumn> {
    let mut col = ListColumn::with_capacity(arr.len());
    let mut items: Vec<u64> = Vec::new();
    let mut one = |i: usize, values: Option<std::sync::Arc<dyn Array>>| {
        items.clear();
        let mut failure = None;
        if let Some(values) = values {
            let ok = visit(values.as_ref(), |_, v| match v {
                Some(Scalar::U(x)) => items.push(x),
                Some(Scalar::I(x)) if x >= 0 => items.push(x as u64),
                Some(Scalar::I(x)) => failure = Some((Scalar::I(x), InvalidReason::Negative)),
                Some(other) => failure = Some((other_to_static(other), InvalidReason::BadNumber)),
                None => failure = Some((Scalar::S("null"), InvalidReason::MissingValue)),
            });
            if ok.is_none() {
                failure = Some((Scalar::S("(non-scalar)"), InvalidReason::BadNumber));
            }
        }
        if let Some((v, reason)) = failure {
            push_bad(bad, i, name, Some(v), reason);
            items.clear();
        }
        col.push(&items);
    };
    match arr.data_type() {
        DataType::List(_) => {
            let a = arr.as_list::<i32>();
            for i in 0..a.len() {
                one(i, (!a.is_null(i)).then(|| a.value(i)));
            }
        }
        DataType::LargeList(_) => {
            let a = arr.as_list::<i64>();
            for i in 0..a.len() {
                one(i, (!a.is_null(i)).then(|| a.value(i)));
            }
        }
        _ => return None,
    }
    Some(col)
}

fn other_to_static(v: Scalar<'_>) -> Scalar<'static> {
    match v {
        Scalar::I(x) => Scalar::I(x),
        Scalar::U(x) => Scalar::U(x),
        Scalar::F(x) => Scalar::F(x),
        Scalar::B(x) => Scalar::B(x),
        Scalar::S(_) => Scalar::S("(text)"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
    use parquet::arrow::ArrowWriter;

    use crate::{IngestOptions, read_trace};

    fn write(path: &std::path::Path, cols: Vec<(&str, ArrayRef)>) {
        let batch = RecordBatch::try_from_iter(cols).unwrap();
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None)
                .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }

    #[test]
    fn foreign_schema_values_are_checked_row_by_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.parquet");
        write(
            &path,
            vec![
                (
                    "ts",
                    Arc::new(StringArray::from(vec![
                        "2024-01-01 00:00:01",
                        "2024-01-01 00:00:00",
                        "2024-01-01 00:00:02",
                        "2024-01-01 00:00:03",
                    ])) as ArrayRef,
                ),
                (
                    "prompt",
                    Arc::new(Float64Array::from(vec![
                        Some(10.0),
                        Some(f64::NAN),
                        None,
                        Some(7.0),
                    ])) as ArrayRef,
                ),
                (
                    "gen",
                    Arc::new(Int64Array::from(vec![1, 2, 3, -4])) as ArrayRef,
                ),
            ],
        );
        let mut opts = IngestOptions {
            maps: vec!["arrival=ts:datetime,input_tokens=prompt,output_tokens=gen".into()],
            ..IngestOptions::default()
        };
        let err = read_trace(std::slice::from_ref(&path), &opts)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("row 2, column `prompt`: NaN or infinite value"),
            "{err}"
        );
        opts.skip_invalid = true;
        let (trace, report) = read_trace(&[path], &opts).unwrap();
        assert_eq!(
            trace.len(),
            1,
            "rows 2 (NaN), 3 (null) and 4 (negative) are skipped"
        );
        assert_eq!(trace.input_tokens(), &[10]);
        assert_eq!(report.rows_skipped, 3);
        assert_eq!(report.skipped_by_reason.get("negative"), Some(&1));
        assert_eq!(report.skipped_by_reason.get("missing_value"), Some(&1));
        assert_eq!(report.skipped_by_reason.get("not_finite"), Some(&1));
    }

    #[test]
    fn unsorted_foreign_parquet_is_sorted_and_rebased() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.parquet");
        write(
            &path,
            vec![
                (
                    "t_ms",
                    Arc::new(Int64Array::from(vec![3000, 1000, 2000])) as ArrayRef,
                ),
                ("n", Arc::new(Int64Array::from(vec![3, 1, 2])) as ArrayRef),
            ],
        );
        let opts = IngestOptions {
            maps: vec!["arrival=t_ms:ms,input_tokens=n".into()],
            ..IngestOptions::default()
        };
        let (trace, report) = read_trace(&[path], &opts).unwrap();
        assert_eq!(
            trace.arrival_ns(),
            &[1_000_000_000, 2_000_000_000, 3_000_000_000]
        );
        assert_eq!(trace.input_tokens(), &[1, 2, 3]);
        assert_eq!(report.out_of_order, 2);
    }
}
