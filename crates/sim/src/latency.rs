//! The latency statistics of one stage, as `summary.json` and the other tools' formats report
//! them. A leaf: the summary builds them, [`crate::compat`] renames them.

use serde::{Deserialize, Serialize};

/// Latency statistics of one stage, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyStats {
    /// Requests measured.
    pub count: u64,
    /// Exact mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Exact maximum.
    pub max_ms: f64,
    /// Exact minimum.
    #[serde(default)]
    pub min_ms: f64,
    /// Exact standard deviation of the population (numpy's `std`, which vLLM's benchmark
    /// writes).
    #[serde(default)]
    pub std_ms: f64,
}
