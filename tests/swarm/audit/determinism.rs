//! Determinism: a rerun with the same seed writes byte-identical `summary.json`,
//! `requests.parquet` and `timeseries.parquet`.

use std::path::Path;

/// Each output file of the run in `first` that the rerun in `again` did not write byte for byte.
pub fn rerun_is_byte_identical(first: &Path, again: &Path) -> Vec<String> {
    let read = |dir: &Path, file: &str| {
        std::fs::read(dir.join(file)).map_err(|e| format!("{}: {e}", dir.join(file).display()))
    };
    ["summary.json", "requests.parquet", "timeseries.parquet"]
        .into_iter()
        .filter_map(|file| match (read(first, file), read(again, file)) {
            (Ok(a), Ok(b)) if a == b => None,
            (Ok(_), Ok(_)) => Some(format!("{file} differs on a rerun with the same seed")),
            (Err(e), _) | (_, Err(e)) => Some(e),
        })
        .collect()
}
