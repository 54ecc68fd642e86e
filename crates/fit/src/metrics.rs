//! The latency figures a fit matches: TTFT, TPOT and end-to-end, each mean, p50 and p90.

/// One latency's mean, p50 and p90, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Figures {
    /// Mean.
    pub mean_ms: f64,
    /// Median (linear interpolation between order statistics, as numpy's default).
    pub p50_ms: f64,
    /// 90th percentile (same interpolation).
    pub p90_ms: f64,
}

impl Figures {
    /// The figures of `values_ns`, NaN entries skipped; all NaN when none is left.
    pub fn of_ns(values_ns: &[f64]) -> Figures {
        let mut v: Vec<f64> = values_ns.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return Figures {
                mean_ms: f64::NAN,
                p50_ms: f64::NAN,
                p90_ms: f64::NAN,
            };
        }
        v.sort_by(f64::total_cmp);
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        Figures {
            mean_ms: mean / 1e6,
            p50_ms: quantile_sorted(&v, 0.5) / 1e6,
            p90_ms: quantile_sorted(&v, 0.9) / 1e6,
        }
    }

    /// `[mean, p50, p90]`.
    pub fn as_array(&self) -> [f64; 3] {
        [self.mean_ms, self.p50_ms, self.p90_ms]
    }
}

/// Quantile `q` in [0, 1] of sorted, non-empty `v`, interpolating linearly between order
/// statistics (numpy's default, which the ground truth's summaries use).
pub(crate) fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    let pos = q * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// The three latencies a fit matches.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LatencyMetrics {
    /// Time to first token.
    pub ttft: Figures,
    /// Time per output token after the first.
    pub tpot: Figures,
    /// End-to-end: last token, from the arrival.
    pub e2e: Figures,
}

/// Names of the nine figures, in [`LatencyMetrics::values`] order.
pub const METRIC_NAMES: [&str; 9] = [
    "ttft.mean",
    "ttft.p50",
    "ttft.p90",
    "tpot.mean",
    "tpot.p50",
    "tpot.p90",
    "e2e.mean",
    "e2e.p50",
    "e2e.p90",
];

impl LatencyMetrics {
    /// The nine figures in milliseconds, in [`METRIC_NAMES`] order.
    pub fn values(&self) -> [f64; 9] {
        let [a, b, c] = self.ttft.as_array();
        let [d, e, f] = self.tpot.as_array();
        let [g, h, i] = self.e2e.as_array();
        [a, b, c, d, e, f, g, h, i]
    }

    /// Relative error of each figure of `self` against `measured`, `(self - measured) / measured`.
    pub fn relative_errors(&self, measured: &LatencyMetrics) -> [f64; 9] {
        let sim = self.values();
        let meas = measured.values();
        std::array::from_fn(|k| (sim[k] - meas[k]) / meas[k])
    }

    /// The largest absolute relative error over the nine figures, against `measured`.
    pub fn worst_error(&self, measured: &LatencyMetrics) -> f64 {
        self.relative_errors(measured)
            .iter()
            .fold(0.0, |m, e| m.max(e.abs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_like_numpy() {
        let f = Figures::of_ns(&[1e6, 2e6, 3e6, 4e6, f64::NAN]);
        assert_eq!(f.mean_ms, 2.5);
        assert_eq!(f.p50_ms, 2.5, "numpy.percentile([1,2,3,4], 50) = 2.5");
        assert!(
            (f.p90_ms - 3.7).abs() < 1e-12,
            "numpy gives 3.7, got {}",
            f.p90_ms
        );
    }
}
