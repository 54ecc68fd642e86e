//! What a trace looks like: load, burstiness and size figures, as `capsim trace inspect` prints.
//!
//! Definitions (so that figures can be compared with other tools):
//! - mean rate: `(rows - 1) / span` (gaps per second), span = last - first arrival;
//! - peak rate in a W window: the most arrivals in any `[t_i, t_i + W)` starting at an arrival,
//!   divided by W; on a trace whose span is shorter than W, every arrival over the span (a
//!   window longer than the trace would dilute the rate below the mean);
//! - inter-arrival CV: population standard deviation of gaps over their mean;
//! - index of dispersion: sample variance over mean of arrival counts in consecutive complete
//!   60 s bins from the first arrival (needs two bins);
//! - percentiles: linear interpolation between order statistics (NumPy's default), so `p50` of
//!   `[1, 2]` is 1.5.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::Trace;

/// Summary figures of a trace. `None` where the trace is too short for a figure to mean anything.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Requests in the trace (failed ones included).
    pub rows: u64,
    /// First to last arrival, seconds.
    pub span_s: f64,
    /// Wall-clock time of the first arrival (RFC 3339, UTC), when the source had datetimes.
    pub start: Option<String>,
    /// `(rows - 1) / span`, requests per second; `None` with fewer than two rows or a zero span.
    pub mean_rate_rps: Option<f64>,
    /// Most arrivals in any 1 s window starting at an arrival, requests per second; on a trace
    /// that spans less than 1 s, its rows over its span.
    pub peak_rate_1s_rps: f64,
    /// Most arrivals in any 60 s window starting at an arrival, divided by 60, requests per
    /// second; on a trace that spans less than 60 s, its rows over its span (never below the
    /// mean rate).
    pub peak_rate_60s_rps: f64,
    /// Population standard deviation of the gaps between arrivals over their mean (1 for
    /// Poisson); `None` with fewer than two rows or when every gap is 0.
    pub interarrival_cv: Option<f64>,
    /// Fraction of gaps that are exactly 0 (quantised timestamps).
    pub zero_gap_fraction: Option<f64>,
    /// Index of dispersion of arrival counts in complete 60 s bins from the first arrival:
    /// sample variance over mean (1 for Poisson, above 1 bursty); `None` under two bins (a trace
    /// shorter than 120 s).
    pub dispersion_60s: Option<f64>,
    /// Input tokens per request (all zero figures, `count` 0, for an empty trace).
    pub input_tokens: Distribution,
    /// Output tokens per request; `None` when the trace has no output column.
    pub output_tokens: Option<Distribution>,
    /// Rows flagged failed.
    pub failed: u64,
    /// Mean prefix blocks per request, when the trace has them.
    pub prefix_blocks_mean: Option<f64>,
    /// Observed latency percentiles by column (`e2e_ms`, ...), NaN entries left out.
    pub observed_ms: BTreeMap<String, Distribution>,
}

/// Mean and percentiles of a set of values.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Distribution {
    /// Values summarised (NaNs left out).
    pub count: u64,
    /// Arithmetic mean, in the values' unit.
    pub mean: f64,
    /// Median, interpolated between order statistics as the module doc says.
    pub p50: f64,
    /// 90th percentile, interpolated.
    pub p90: f64,
    /// 99th percentile, interpolated.
    pub p99: f64,
    /// Largest value.
    pub max: f64,
}

impl Distribution {
    /// Summarises `values` (sorted here); `None` when empty.
    pub fn of(mut values: Vec<f64>) -> Option<Distribution> {
        values.retain(|v| !v.is_nan());
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        Some(Distribution {
            count: values.len() as u64,
            mean,
            p50: percentile_sorted(&values, 0.50),
            p90: percentile_sorted(&values, 0.90),
            p99: percentile_sorted(&values, 0.99),
            max: values[values.len() - 1],
        })
    }
}

/// The `q`-quantile (0..=1) of ascending `sorted` values by linear interpolation. Panics on an
/// empty slice.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

/// Most arrivals in any window `[t_i, t_i + window_ns)`.
pub fn peak_count(arrival_ns: &[u64], window_ns: u64) -> u64 {
    let mut best = 0usize;
    let mut hi = 0usize;
    for lo in 0..arrival_ns.len() {
        let end = arrival_ns[lo].saturating_add(window_ns);
        while hi < arrival_ns.len() && arrival_ns[hi] < end {
            hi += 1;
        }
        best = best.max(hi - lo);
    }
    best as u64
}

/// Peak rate over a `window_ns` window, requests per second: [`peak_count`] over the window,
/// or, when the arrivals span less than the window (and more than nothing), every arrival over
/// their span.
pub fn peak_rate_rps(arrival_ns: &[u64], window_ns: u64) -> f64 {
    let span_ns = match (arrival_ns.first(), arrival_ns.last()) {
        (Some(first), Some(last)) => last - first,
        _ => 0,
    };
    let over_ns = if span_ns > 0 && span_ns < window_ns {
        span_ns
    } else {
        window_ns
    };
    peak_count(arrival_ns, window_ns) as f64 / (over_ns as f64 * 1e-9)
}

/// Arrival counts in consecutive complete bins of `bin_ns` starting at the first arrival.
pub fn bin_counts(arrival_ns: &[u64], bin_ns: u64) -> Vec<u64> {
    let (Some(&first), Some(&last)) = (arrival_ns.first(), arrival_ns.last()) else {
        return Vec::new();
    };
    let bins = ((last - first) / bin_ns) as usize;
    let mut counts = vec![0u64; bins];
    for &a in arrival_ns {
        let b = ((a - first) / bin_ns) as usize;
        if b < bins {
            counts[b] += 1;
        }
    }
    counts
}

impl Summary {
    /// Computes the summary of `trace`.
    pub fn of(trace: &Trace) -> Summary {
        let arr = trace.arrival_ns();
        let rows = trace.len() as u64;
        let span_ns = trace.span_ns();
        let span_s = span_ns as f64 / 1e9;
        let mean_rate_rps = (rows >= 2 && span_ns > 0).then(|| (rows - 1) as f64 / span_s);
        let (cv, zero) = if arr.len() >= 2 {
            let gaps = arr.windows(2).map(|w| (w[1] - w[0]) as f64);
            let n = (arr.len() - 1) as f64;
            let mean = gaps.clone().sum::<f64>() / n;
            let var = gaps.clone().map(|g| (g - mean) * (g - mean)).sum::<f64>() / n;
            let zeros = gaps.filter(|&g| g == 0.0).count() as f64;
            ((mean > 0.0).then(|| var.sqrt() / mean), Some(zeros / n))
        } else {
            (None, None)
        };
        let counts = bin_counts(arr, 60_000_000_000);
        let dispersion_60s = (counts.len() >= 2).then(|| {
            let n = counts.len() as f64;
            let mean = counts.iter().sum::<u64>() as f64 / n;
            let var = counts
                .iter()
                .map(|&c| (c as f64 - mean).powi(2))
                .sum::<f64>()
                / (n - 1.0);
            if mean > 0.0 { var / mean } else { 0.0 }
        });
        let sizes = |v: &[u32]| Distribution::of(v.iter().map(|&x| x as f64).collect());
        let input_tokens = sizes(trace.input_tokens()).unwrap_or(Distribution {
            count: 0,
            mean: 0.0,
            p50: 0.0,
            p90: 0.0,
            p99: 0.0,
            max: 0.0,
        });
        let mut observed_ms = BTreeMap::new();
        let obs = trace.observed();
        for (name, col) in [
            ("e2e_ms", &obs.e2e_ms),
            ("queue_ms", &obs.queue_ms),
            ("compute_ms", &obs.compute_ms),
        ] {
            if let Some(d) = col.as_ref().and_then(|v| Distribution::of(v.clone())) {
                observed_ms.insert(name.to_string(), d);
            }
        }
        Summary {
            rows,
            span_s,
            start: trace.start_unix_ns().and_then(|ns| {
                jiff::Timestamp::from_nanosecond(ns as i128)
                    .ok()
                    .map(|t| t.to_string())
            }),
            mean_rate_rps,
            peak_rate_1s_rps: peak_rate_rps(arr, 1_000_000_000),
            peak_rate_60s_rps: peak_rate_rps(arr, 60_000_000_000),
            interarrival_cv: cv,
            zero_gap_fraction: zero,
            dispersion_60s,
            input_tokens,
            output_tokens: trace.output_tokens().and_then(sizes),
            failed: trace
                .failed()
                .map_or(0, |f| f.iter().filter(|&&x| x).count() as u64),
            prefix_blocks_mean: trace
                .prefix_blocks()
                .filter(|l| !l.is_empty())
                .map(|l| l.values().len() as f64 / l.len() as f64),
            observed_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Columns;

    #[test]
    fn percentiles_interpolate_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile_sorted(&v, 0.5), 2.5);
        assert_eq!(percentile_sorted(&v, 0.0), 1.0);
        assert_eq!(percentile_sorted(&v, 1.0), 4.0);
        assert!((percentile_sorted(&v, 0.9) - 3.7).abs() < 1e-12);
    }

    #[test]
    fn peak_count_finds_densest_window() {
        let s = 1_000_000_000;
        let arr = [0, s / 2, s, s + 1, s + 2, 5 * s];
        assert_eq!(peak_count(&arr, s), 4, "[0.5s, 1.5s) holds 4 arrivals");
    }

    #[test]
    fn a_trace_shorter_than_the_window_has_its_peak_over_its_span_not_below_its_mean() {
        // 300 requests over 29 s, as a short log: over a 60 s window they were 5.0 req/s, half
        // the 10.3 req/s mean.
        let arr: Vec<u64> = (0..300u64).map(|i| i * 29_000_000_000 / 299).collect();
        let t = Trace::from_columns(Columns {
            input_tokens: vec![10; arr.len()],
            arrival_ns: arr,
            ..Columns::default()
        })
        .unwrap();
        let s = Summary::of(&t);
        let mean = s.mean_rate_rps.unwrap();
        assert!(
            s.peak_rate_60s_rps >= mean,
            "60 s peak {} below the mean {mean}",
            s.peak_rate_60s_rps
        );
        assert!((s.peak_rate_60s_rps - 300.0 / 29.0).abs() < 1e-9);
        assert!(s.peak_rate_1s_rps >= mean);
    }

    #[test]
    fn peaks_are_never_below_the_mean_whatever_the_span() {
        let s = 1_000_000_000u64;
        for (rows, span_s) in [(2u64, 1u64), (3, 59), (61, 60), (100, 61), (1000, 3600)] {
            let arr: Vec<u64> = (0..rows).map(|i| i * span_s * s / (rows - 1)).collect();
            let mean = (rows - 1) as f64 / span_s as f64;
            for window in [s, 60 * s] {
                let peak = peak_rate_rps(&arr, window);
                assert!(
                    peak >= mean - 1e-9,
                    "{rows} rows over {span_s} s, {window} ns window: peak {peak} < mean {mean}"
                );
            }
        }
    }

    #[test]
    fn constant_arrivals_have_zero_cv_and_dispersion() {
        let arr: Vec<u64> = (0..600).map(|i| i * 1_000_000_000).collect();
        let t = Trace::from_columns(Columns {
            input_tokens: vec![10; arr.len()],
            arrival_ns: arr,
            ..Columns::default()
        })
        .unwrap();
        let s = Summary::of(&t);
        assert_eq!(s.interarrival_cv, Some(0.0));
        assert_eq!(s.dispersion_60s, Some(0.0));
        assert_eq!(s.mean_rate_rps, Some(1.0));
        assert_eq!(s.peak_rate_1s_rps, 1.0);
        assert_eq!(s.input_tokens.p99, 10.0);
    }
}
