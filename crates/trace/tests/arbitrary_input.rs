//! Every reader, fed arbitrary bytes, returns an error or a valid trace, and never panics.
//!
//! Besides raw bytes, each reader gets inputs shaped like its format (a real header followed by
//! random fields; a valid Parquet file with flipped bytes or cut short) so that the random
//! cases get past the first check and into the parsing code.

use std::path::{Path, PathBuf};

use capsim_trace::{Format, IngestOptions, Trace, read_trace};
use proptest::prelude::*;

fn read(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    format: Option<Format>,
    skip: bool,
) -> Result<Trace, String> {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    let opts = IngestOptions {
        format,
        maps: Vec::new(),
        skip_invalid: skip,
        keep_offsets: false,
    };
    match read_trace(&[path], &opts) {
        Ok((trace, report)) => {
            assert!(report.adds_up(), "report does not add up: {report:?}");
            assert_eq!(report.rows as usize, trace.len());
            assert!(
                trace.arrival_ns().windows(2).all(|w| w[0] <= w[1]),
                "unsorted"
            );
            assert!(!trace.is_empty(), "an empty trace must be an error");
            Ok(trace)
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty());
            Err(msg)
        }
    }
}

/// A CSV field: numbers (some negative, fractional, huge), datetimes, junk, empty.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,6}",
        "-[0-9]{1,4}",
        "[0-9]{1,3}\\.[0-9]{1,3}",
        "[0-9]{20,25}",
        "2023-1[0-2]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9]\\.[0-9]{1,9}",
        Just("NaN".to_string()),
        Just(String::new()),
        "[a-z\"]{1,5}",
    ]
}

fn csv_body(columns: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::collection::vec(field(), 0..columns + 2), 0..30).prop_map(|rows| {
        rows.into_iter()
            .map(|r| r.join(","))
            .collect::<Vec<_>>()
            .join("\n")
    })
}

fn canonical_parquet() -> Vec<u8> {
    static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BYTES.get_or_init(make_canonical_parquet).clone()
}

fn make_canonical_parquet() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("t.csv");
    let mut text =
        String::from("arrival,input_tokens,output_tokens,model,prefix_blocks,failed,e2e_ms\n");
    for i in 0..300u64 {
        text.push_str(&format!(
            "{},{},{},m{},[{} {}],{},{}.5\n",
            i * 1000,
            i % 97,
            i % 13,
            i % 3,
            i,
            i + 1,
            i % 2,
            i
        ));
    }
    std::fs::write(&csv, text).unwrap();
    // 300 arrivals 1 us apart: a unitless column that dense is refused, so state the unit.
    let opts = IngestOptions {
        maps: vec!["arrival=arrival:ns".into()],
        ..IngestOptions::default()
    };
    let (trace, _) = read_trace(&[csv], &opts).unwrap();
    let out = dir.path().join("t.parquet");
    capsim_trace::write_parquet(&trace, &out).unwrap();
    std::fs::read(out).unwrap()
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().to_path_buf();
    (d, p)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn csv_reader_never_panics_on_raw_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400), skip in any::<bool>()) {
        let (_d, dir) = tmp();
        let _ = read(&dir, "x.csv", &bytes, Some(Format::Csv), skip);
        let _ = read(&dir, "y.csv", &bytes, Some(Format::Azure), skip);
    }

    #[test]
    fn csv_presets_never_panic_on_random_fields(body in csv_body(6), skip in any::<bool>()) {
        let (_d, dir) = tmp();
        for (header, format) in [
            ("TIMESTAMP,ContextTokens,GeneratedTokens", Format::Azure),
            ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type", Format::BurstGpt),
            ("arrival,input_tokens,output_tokens,failed,e2e_ms,prefix_blocks", Format::Csv),
        ] {
            let text = format!("{header}\n{body}");
            let _ = read(&dir, "x.csv", text.as_bytes(), Some(format), skip);
        }
    }

    #[test]
    fn jsonl_reader_never_panics_on_raw_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400), skip in any::<bool>()) {
        let (_d, dir) = tmp();
        let _ = read(&dir, "x.jsonl", &bytes, Some(Format::Jsonl), skip);
        let _ = read(&dir, "y.jsonl", &bytes, Some(Format::Mooncake), skip);
        let _ = read(&dir, "z.json", &bytes, Some(Format::InferencePerf), skip);
        let _ = read(&dir, "w.jsonl", &bytes, Some(Format::Aiperf), skip);
    }

    #[test]
    fn mooncake_reader_never_panics_on_random_values(
        rows in prop::collection::vec((field(), field(), field(), prop::collection::vec(-5i64..1_000, 0..5)), 1..20),
        skip in any::<bool>(),
    ) {
        let (_d, dir) = tmp();
        let text: String = rows
            .iter()
            .map(|(t, i, o, h)| {
                let q = |s: &str| if s.parse::<f64>().is_ok() { s.to_string() } else { format!("{s:?}") };
                format!("{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": {:?}}}\n", q(t), q(i), q(o), h)
            })
            .collect();
        let _ = read(&dir, "m.jsonl", text.as_bytes(), Some(Format::Mooncake), skip);
    }

    #[test]
    fn load_generator_readers_never_panic_on_random_values(
        rows in prop::collection::vec((field(), field(), field(), any::<bool>()), 1..20),
        skip in any::<bool>(),
    ) {
        let (_d, dir) = tmp();
        let q = |s: &str| if s.parse::<f64>().is_ok() { s.to_string() } else { format!("{s:?}") };
        let entries: Vec<String> = rows
            .iter()
            .map(|(t, i, o, failed)| {
                format!(
                    "{{\"start_time\": {}, \"info\": {{\"input_tokens\": {}, \"output_tokens\": {}}}, \"error\": {}}}",
                    q(t), q(i), q(o), if *failed { "{}" } else { "null" }
                )
            })
            .collect();
        let text = format!("[{}]", entries.join(",\n"));
        let _ = read(&dir, "p.json", text.as_bytes(), Some(Format::InferencePerf), skip);
        let text: String = rows
            .iter()
            .map(|(t, i, o, warmup)| {
                format!(
                    "{{\"metadata\": {{\"request_start_ns\": {}, \"benchmark_phase\": \"{}\"}}, \"metrics\": {{\"input_sequence_length\": {{\"value\": {}}}, \"output_sequence_length\": {{\"value\": {}}}}}, \"error\": null}}\n",
                    q(t), if *warmup { "warmup" } else { "profiling" }, q(i), q(o)
                )
            })
            .collect();
        let _ = read(&dir, "p.jsonl", text.as_bytes(), Some(Format::Aiperf), skip);
    }

    #[test]
    fn parquet_reader_never_panics_on_raw_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let (_d, dir) = tmp();
        let mut with_magic = b"PAR1".to_vec();
        with_magic.extend_from_slice(&bytes);
        with_magic.extend_from_slice(b"PAR1");
        let _ = read(&dir, "x.parquet", &bytes, Some(Format::Parquet), false);
        let _ = read(&dir, "y.parquet", &with_magic, Some(Format::Parquet), false);
    }

    #[test]
    fn parquet_reader_never_panics_on_damaged_files(
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let (_d, dir) = tmp();
        let mut bytes = canonical_parquet();
        for (at, x) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x | 1;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        let _ = read(&dir, "d.parquet", &bytes, Some(Format::Parquet), true);
    }
}

#[test]
fn undamaged_canonical_parquet_reads_back() {
    let (_d, dir) = tmp();
    let trace = read(&dir, "ok.parquet", &canonical_parquet(), None, false).unwrap();
    assert_eq!(trace.len(), 300);
    assert_eq!(trace.prefix_blocks().unwrap().get(5), &[5, 6]);
}
