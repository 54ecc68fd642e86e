//! Latency samples of one grid point, their quantiles, and when they have converged.

use capsim_sim::timing::profile::QUANTILE_LEVELS;

/// The `level` quantile (in `[0, 1]`) of sorted samples, interpolating between order statistics.
/// Empty samples give 0.
pub fn quantile(sorted: &[u64], level: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let position = level.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = position.floor() as usize;
    let hi = position.ceil() as usize;
    let t = position - lo as f64;
    (sorted[lo] as f64 + t * (sorted[hi] as f64 - sorted[lo] as f64)).round() as u64
}

/// Quantiles at [`QUANTILE_LEVELS`] of unsorted samples.
pub fn profile_quantiles(samples: &[u64]) -> Vec<u64> {
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    QUANTILE_LEVELS
        .iter()
        .map(|&level| quantile(&sorted, level))
        .collect()
}

/// Mean of samples (0 when empty).
pub fn mean(samples: &[u64]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.iter().map(|&s| s as f64).sum::<f64>() / samples.len() as f64
}

/// Decides when a grid point has enough samples: after `min_iters`, every `check_every` samples
/// the p50 and p99 are compared with the previous check; when both moved by less than
/// `tolerance` (relative), the distribution has converged.
#[derive(Debug, Clone)]
pub struct Convergence {
    min_iters: usize,
    check_every: usize,
    tolerance: f64,
    previous: Option<(u64, u64)>,
    scratch: Vec<u64>,
}

impl Convergence {
    /// A new test; `check_every` is at least 1.
    pub fn new(min_iters: u32, check_every: u32, tolerance: f64) -> Convergence {
        Convergence {
            min_iters: min_iters as usize,
            check_every: check_every.max(1) as usize,
            tolerance,
            previous: None,
            scratch: Vec::new(),
        }
    }

    /// Whether `samples` (all so far) have converged.
    pub fn converged(&mut self, samples: &[u64]) -> bool {
        let n = samples.len();
        if n < self.min_iters || !(n - self.min_iters).is_multiple_of(self.check_every) {
            return false;
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(samples);
        self.scratch.sort_unstable();
        let now = (quantile(&self.scratch, 0.5), quantile(&self.scratch, 0.99));
        let close = |a: u64, b: u64| {
            let scale = a.max(b).max(1) as f64;
            (a as f64 - b as f64).abs() / scale < self.tolerance
        };
        let done = self
            .previous
            .is_some_and(|(p50, p99)| close(p50, now.0) && close(p99, now.1));
        self.previous = Some(now);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_order_statistics() {
        let sorted = [10, 20, 30, 40, 50];
        assert_eq!(quantile(&sorted, 0.0), 10);
        assert_eq!(quantile(&sorted, 0.5), 30);
        assert_eq!(quantile(&sorted, 0.625), 35);
        assert_eq!(quantile(&sorted, 1.0), 50);
        assert_eq!(quantile(&[], 0.5), 0);
    }

    #[test]
    fn a_stable_distribution_converges_and_a_drifting_one_does_not() {
        let stable: Vec<u64> = (0..200).map(|i| 1_000 + (i * 7919 % 100)).collect();
        let mut test = Convergence::new(50, 25, 0.02);
        let stopped_at = (1..=stable.len()).find(|&n| test.converged(&stable[..n]));
        assert_eq!(
            stopped_at,
            Some(75),
            "stable samples should stop at the second check"
        );

        let drifting: Vec<u64> = (0..200).map(|i| 1_000 + 20 * i).collect();
        let mut test = Convergence::new(50, 25, 0.02);
        assert_eq!(
            (1..=drifting.len()).find(|&n| test.converged(&drifting[..n])),
            None
        );
    }
}
