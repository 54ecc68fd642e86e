//! Errors from reading, validating and transforming traces.

/// Everything that can go wrong with a trace. Each variant names where (file, row, column) and
/// what would fix it, so the command can print it as is.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A column has a different number of rows from `arrival_ns`.
    #[error("column `{column}` has {actual} rows, expected {expected} (one per request)")]
    ColumnLength {
        column: String,
        expected: usize,
        actual: usize,
    },
    /// Arrival times decrease at `row` (0-based) after sorting should have happened.
    #[error("arrival times are not sorted: row {row} arrives before row {}", row - 1)]
    Unsorted { row: usize },
}
