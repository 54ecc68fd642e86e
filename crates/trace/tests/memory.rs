//! Memory budget: arrival times and the two size columns take at most 24 bytes a request once
//! ingest is done, whatever the reader (the vectors are trimmed to their length).

use std::path::PathBuf;

use capsim_trace::{IngestOptions, read_trace};

fn shipped(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../traces")
        .join(name)
}

#[test]
fn arrival_and_sizes_take_at_most_24_bytes_a_request() {
    let dir = tempfile::tempdir().unwrap();
    // A CSV copy (different reader, capacity guessed from the file size) of the shipped trace.
    let (conv, _) =
        read_trace(&[shipped("azure-conv.parquet")], &IngestOptions::default()).unwrap();
    let csv = dir.path().join("conv.csv");
    let mut text = String::from("arrival,input_tokens,output_tokens\n");
    let out = conv.output_tokens().unwrap();
    for ((a, i), o) in conv.arrival_ns().iter().zip(conv.input_tokens()).zip(out) {
        text.push_str(&format!("{a},{i},{o}\n"));
    }
    std::fs::write(&csv, text).unwrap();
    for path in [
        shipped("azure-conv.parquet"),
        shipped("mooncake-conversation.parquet"),
        csv,
    ] {
        let (t, _) = read_trace(std::slice::from_ref(&path), &IngestOptions::default()).unwrap();
        let per_row = t.core_heap_bytes() as f64 / t.len() as f64;
        assert!(
            per_row <= 24.0,
            "{}: {per_row:.2} bytes a request, budget 24",
            path.display()
        );
    }
}
