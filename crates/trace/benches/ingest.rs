//! Ingest throughput (single thread): 1 M requests as Azure CSV and as canonical Parquet.
//!
//! The input is made in setup, not committed: the shipped Azure conv trace, replicated (each
//! copy shifted past the previous one) to 1 M rows, written to a temporary directory as Azure
//! CSV (`TIMESTAMP` with 7 fractional digits) and as canonical Parquet. Targets (issue 2):
//! Parquet >= 20 M rows/s, Azure CSV >= 2 M rows/s; memory for arrival + two sizes <= 24 bytes
//! a row (printed once, from `Trace::core_heap_bytes`).

use std::fmt::Write as _;
use std::hint::black_box;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use capsim_trace::{Columns, Format, IngestOptions, Summary, Trace, read_trace};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const ROWS: usize = 1_000_000;

fn replicated_conv() -> Trace {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../traces/azure-conv.parquet");
    let (conv, _) = read_trace(&[src], &IngestOptions::default()).expect("shipped conv trace");
    let period = conv.span_ns() + 1_000_000_000;
    let mut cols = Columns {
        start_unix_ns: conv.start_unix_ns(),
        output_tokens: Some(Vec::with_capacity(ROWS)),
        ..Columns::default()
    };
    let out = conv.output_tokens().expect("conv has output tokens");
    let rows = conv.arrival_ns().iter().zip(conv.input_tokens()).zip(out);
    'fill: for copy in 0.. {
        for ((&a, &i), &o) in rows.clone() {
            if cols.arrival_ns.len() == ROWS {
                break 'fill;
            }
            cols.arrival_ns.push(a + copy * period);
            cols.input_tokens.push(i);
            cols.output_tokens.as_mut().unwrap().push(o);
        }
    }
    Trace::from_columns(cols).expect("valid replicated trace")
}

fn write_azure_csv(trace: &Trace, path: &Path) {
    let start = trace.start_unix_ns().expect("conv has datetimes");
    let mut text = String::with_capacity(trace.len() * 40);
    text.push_str("TIMESTAMP,ContextTokens,GeneratedTokens\n");
    let out = trace.output_tokens().unwrap();
    let rows = trace.arrival_ns().iter().zip(trace.input_tokens()).zip(out);
    for ((&a, &input), &output) in rows {
        let ns = start + a as i64;
        let ts = jiff::Timestamp::from_nanosecond(ns as i128).unwrap();
        let dt = jiff::tz::TimeZone::UTC.to_datetime(ts);
        let _ = writeln!(
            text,
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:07},{},{}",
            dt.year(),
            dt.month(),
            dt.day(),
            dt.hour(),
            dt.minute(),
            dt.second(),
            dt.subsec_nanosecond() / 100,
            input,
            output
        );
    }
    std::fs::File::create(path)
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
}

struct Inputs {
    _dir: tempfile::TempDir,
    csv: PathBuf,
    parquet: PathBuf,
}

fn inputs() -> Inputs {
    let dir = tempfile::tempdir().unwrap();
    let trace = replicated_conv();
    let csv = dir.path().join("azure_1m.csv");
    let parquet = dir.path().join("canonical_1m.parquet");
    write_azure_csv(&trace, &csv);
    capsim_trace::write_parquet(&trace, &parquet).unwrap();
    for (name, path, format) in [
        ("azure csv", &csv, Format::Azure),
        ("parquet", &parquet, Format::Parquet),
    ] {
        let opts = IngestOptions {
            format: Some(format),
            ..IngestOptions::default()
        };
        let (t, _) = read_trace(std::slice::from_ref(path), &opts).unwrap();
        assert_eq!(t.arrival_ns(), trace.arrival_ns(), "{name} round trip");
        eprintln!(
            "{name}: {} rows, {} bytes on disk, arrival + sizes in memory {:.2} bytes/row (budget 24)",
            t.len(),
            std::fs::metadata(path).unwrap().len(),
            t.core_heap_bytes() as f64 / t.len() as f64
        );
    }
    Inputs {
        _dir: dir,
        csv,
        parquet,
    }
}

fn ingest(c: &mut Criterion) {
    let inputs = inputs();
    let mut group = c.benchmark_group("ingest_1M");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for (name, path, format) in [
        ("canonical_parquet", &inputs.parquet, Format::Parquet),
        ("azure_csv", &inputs.csv, Format::Azure),
    ] {
        let opts = IngestOptions {
            format: Some(format),
            ..IngestOptions::default()
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                let (t, _) = read_trace(std::slice::from_ref(path), &opts).unwrap();
                black_box(t.len())
            })
        });
    }
    group.finish();

    let (trace, _) = read_trace(
        std::slice::from_ref(&inputs.parquet),
        &IngestOptions::default(),
    )
    .unwrap();
    let mut group = c.benchmark_group("summary_1M");
    group.throughput(Throughput::Elements(ROWS as u64));
    group.sample_size(10);
    group.bench_function("inspect_figures", |b| {
        b.iter(|| black_box(Summary::of(&trace)))
    });
    group.finish();
}

criterion_group!(benches, ingest);
criterion_main!(benches);
