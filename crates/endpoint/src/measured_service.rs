//! A service-time model made of what a real server measured: its mean compute time per batch
//! size over one run (Triton's `batch_stats`), for the simulator's
//! [`RunOptions::service_override`](capsim_sim::RunOptions). Driving a simulation with it
//! leaves the queue and the batcher as the only model between the server and the simulation.

use std::sync::Arc;

use capsim_sim::rng::SimRng;
use capsim_sim::{BatchShape, ServiceTime};

/// The mean time of the batches of one size, as a server measured them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchTime {
    /// Requests per batch (>= 1).
    pub batch_size: u32,
    /// Batches of this size measured (>= 1).
    pub batches: u64,
    /// Their mean time, in nanoseconds.
    pub mean_ns: f64,
}

/// `a + b * batch_size`, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AffineFit {
    /// Fixed time per batch, in nanoseconds (>= 0).
    pub a_ns: f64,
    /// Time per request of the batch, in nanoseconds (>= 0).
    pub b_ns: f64,
}

impl AffineFit {
    /// The fitted time of a batch of `batch_size`, in nanoseconds.
    pub fn at(&self, batch_size: f64) -> f64 {
        self.a_ns + self.b_ns * batch_size
    }
}

/// Least squares of the mean time per batch size, each size weighted by its batches, with the
/// slope and the intercept held at 0 or above (non-negative least squares: an intercept that
/// would go below 0 is fixed at 0 and the slope refitted through the origin).
/// One size alone gives a flat line at its mean. `None` without batches.
pub fn fit_affine(times: &[BatchTime]) -> Option<AffineFit> {
    let weight: f64 = times.iter().map(|t| t.batches as f64).sum();
    if weight <= 0.0 {
        return None;
    }
    let mean_x = times
        .iter()
        .map(|t| f64::from(t.batch_size) * t.batches as f64)
        .sum::<f64>()
        / weight;
    let mean_y = times
        .iter()
        .map(|t| t.mean_ns * t.batches as f64)
        .sum::<f64>()
        / weight;
    let sxx: f64 = times
        .iter()
        .map(|t| t.batches as f64 * (f64::from(t.batch_size) - mean_x).powi(2))
        .sum();
    let sxy: f64 = times
        .iter()
        .map(|t| t.batches as f64 * (f64::from(t.batch_size) - mean_x) * (t.mean_ns - mean_y))
        .sum();
    let b_ns = if sxx > 0.0 { (sxy / sxx).max(0.0) } else { 0.0 };
    let a_ns = mean_y - b_ns * mean_x;
    if a_ns >= 0.0 {
        return Some(AffineFit { a_ns, b_ns });
    }
    // The intercept would go below 0: the best line with a = 0 goes through the origin.
    let sxx0: f64 = times
        .iter()
        .map(|t| t.batches as f64 * f64::from(t.batch_size).powi(2))
        .sum();
    let sxy0: f64 = times
        .iter()
        .map(|t| t.batches as f64 * f64::from(t.batch_size) * t.mean_ns)
        .sum();
    Some(AffineFit {
        a_ns: 0.0,
        b_ns: if sxx0 > 0.0 {
            (sxy0 / sxx0).max(0.0)
        } else {
            0.0
        },
    })
}

/// Each batch takes the server's measured mean time for its size: linear between the measured
/// sizes, and beyond them along the [`fit_affine`] slope from the nearest measured size (never
/// below 0). The same time for every batch of a size: the server reported means only.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredService {
    /// Measured sizes, ascending, each once.
    sizes: Vec<u32>,
    /// Mean time of each of `sizes`, in nanoseconds.
    means_ns: Vec<f64>,
    fit: AffineFit,
}

impl MeasuredService {
    /// The model of `times` (a size listed twice keeps its batch-weighted mean); `None` when no
    /// size has a batch, or a time is not finite or negative.
    pub fn new(times: &[BatchTime]) -> Option<MeasuredService> {
        let mut times: Vec<BatchTime> = times
            .iter()
            .copied()
            .filter(|t| t.batches > 0 && t.batch_size > 0)
            .collect();
        if times
            .iter()
            .any(|t| !(t.mean_ns.is_finite() && t.mean_ns >= 0.0))
        {
            return None;
        }
        times.sort_by_key(|t| t.batch_size);
        let mut merged: Vec<BatchTime> = Vec::with_capacity(times.len());
        for t in times {
            match merged.last_mut() {
                Some(last) if last.batch_size == t.batch_size => {
                    let batches = last.batches + t.batches;
                    last.mean_ns = (last.mean_ns * last.batches as f64
                        + t.mean_ns * t.batches as f64)
                        / batches as f64;
                    last.batches = batches;
                }
                _ => merged.push(t),
            }
        }
        let fit = fit_affine(&merged)?;
        Some(MeasuredService {
            sizes: merged.iter().map(|t| t.batch_size).collect(),
            means_ns: merged.iter().map(|t| t.mean_ns).collect(),
            fit,
        })
    }

    /// The weighted least-squares line through the measured means (the slope used beyond them).
    pub fn fit(&self) -> AffineFit {
        self.fit
    }

    /// The measured sizes, ascending.
    pub fn sizes(&self) -> &[u32] {
        &self.sizes
    }

    /// The time of a batch of `size` requests, in nanoseconds.
    fn time_ns(&self, size: u32) -> f64 {
        let n = self.sizes.len();
        let (first, last) = (self.sizes[0], self.sizes[n - 1]);
        if size <= first {
            let below = f64::from(first - size);
            return (self.means_ns[0] - self.fit.b_ns * below).max(0.0);
        }
        if size >= last {
            return self.means_ns[n - 1] + self.fit.b_ns * f64::from(size - last);
        }
        // first < size < last: the measured sizes around it.
        let upper = self.sizes.partition_point(|&s| s < size);
        if self.sizes[upper] == size {
            return self.means_ns[upper];
        }
        let (s0, s1) = (
            f64::from(self.sizes[upper - 1]),
            f64::from(self.sizes[upper]),
        );
        let (t0, t1) = (self.means_ns[upper - 1], self.means_ns[upper]);
        t0 + (t1 - t0) * (f64::from(size) - s0) / (s1 - s0)
    }
}

impl ServiceTime for MeasuredService {
    fn sample_ns(&self, batch: &BatchShape, _rng: &mut SimRng) -> u64 {
        capsim_sim::round_ns(self.time_ns(batch.size))
    }

    fn mean_ns(&self, batch: &BatchShape) -> f64 {
        self.time_ns(batch.size)
    }

    /// A batch of a size the server never ran (below or beyond the measured ones).
    fn is_extrapolated(&self, batch: &BatchShape) -> bool {
        batch.size < self.sizes[0] || batch.size > self.sizes[self.sizes.len() - 1]
    }
}

/// Another model's time for each batch (its dependence on the batch's inputs, and its spread),
/// scaled for each batch size to the level a server measured: the factor of size `n` is the
/// server's mean compute for `n` over the model's mean for the same run's batches of `n`; linear
/// between the sizes with a factor, the nearest one's beyond them. Where the model knows what
/// makes one batch of a size slower than another (padded input length), this keeps it, which a
/// mean per size ([`MeasuredService`]) cannot.
#[derive(Debug, Clone)]
pub struct LeveledService {
    inner: Arc<dyn ServiceTime>,
    /// Sizes with a factor, ascending, each once.
    sizes: Vec<u32>,
    factors: Vec<f64>,
}

impl LeveledService {
    /// `inner` scaled by `levels` (batch size, factor); sizes listed twice keep the first.
    /// `None` without a level, or with a factor that is not finite and positive.
    pub fn new(inner: Arc<dyn ServiceTime>, levels: &[(u32, f64)]) -> Option<LeveledService> {
        if levels.is_empty() || levels.iter().any(|&(_, f)| !(f.is_finite() && f > 0.0)) {
            return None;
        }
        let mut levels = levels.to_vec();
        levels.sort_by_key(|&(size, _)| size);
        levels.dedup_by_key(|&mut (size, _)| size);
        Some(LeveledService {
            inner,
            sizes: levels.iter().map(|&(size, _)| size).collect(),
            factors: levels.iter().map(|&(_, f)| f).collect(),
        })
    }

    /// The factor of a batch of `size`.
    pub fn factor(&self, size: u32) -> f64 {
        let upper = self.sizes.partition_point(|&s| s < size);
        if upper == self.sizes.len() {
            return self.factors[upper - 1];
        }
        if self.sizes[upper] == size || upper == 0 {
            return self.factors[upper];
        }
        let (s0, s1) = (
            f64::from(self.sizes[upper - 1]),
            f64::from(self.sizes[upper]),
        );
        let (f0, f1) = (self.factors[upper - 1], self.factors[upper]);
        f0 + (f1 - f0) * (f64::from(size) - s0) / (s1 - s0)
    }

    /// The sizes with a factor, ascending.
    pub fn sizes(&self) -> &[u32] {
        &self.sizes
    }
}

impl ServiceTime for LeveledService {
    fn sample_ns(&self, batch: &BatchShape, rng: &mut SimRng) -> u64 {
        capsim_sim::round_ns(self.inner.sample_ns(batch, rng) as f64 * self.factor(batch.size))
    }

    fn mean_ns(&self, batch: &BatchShape) -> f64 {
        self.inner.mean_ns(batch) * self.factor(batch.size)
    }

    fn is_extrapolated(&self, batch: &BatchShape) -> bool {
        self.inner.is_extrapolated(batch)
    }

    fn may_extrapolate(&self) -> bool {
        self.inner.may_extrapolate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn time(batch_size: u32, batches: u64, mean_ms: f64) -> BatchTime {
        BatchTime {
            batch_size,
            batches,
            mean_ns: mean_ms * 1e6,
        }
    }

    fn shape(size: u32) -> BatchShape {
        BatchShape {
            size,
            max_input_tokens: 16,
            total_input_tokens: u64::from(size) * 16,
            idle_ns: 0,
        }
    }

    #[test]
    fn the_fit_of_exact_a_plus_b_n_times_recovers_a_and_b() {
        let times: Vec<BatchTime> = [1, 2, 4, 8]
            .iter()
            .map(|&n| time(n, u64::from(n) + 3, 2.0 + 0.5 * f64::from(n)))
            .collect();
        let fit = fit_affine(&times).unwrap();
        assert!((fit.a_ns - 2e6).abs() < 1e-3, "a {}", fit.a_ns);
        assert!((fit.b_ns - 0.5e6).abs() < 1e-3, "b {}", fit.b_ns);
        assert_eq!(fit_affine(&[]), None);
    }

    #[test]
    fn the_fit_weights_sizes_by_their_batches_and_keeps_slope_and_intercept_non_negative() {
        // Many batches of 1 at 3 ms, one of 3 at 9 ms: the line passes close to (1, 3 ms).
        let fit = fit_affine(&[time(1, 99, 3.0), time(3, 1, 9.0)]).unwrap();
        assert!((fit.at(1.0) - 3e6).abs() < 0.1e6, "{fit:?}");
        // Times falling with size: a flat line at the weighted mean, not a negative slope.
        let flat = fit_affine(&[time(1, 1, 4.0), time(2, 3, 2.0)]).unwrap();
        assert_eq!(flat.b_ns, 0.0);
        assert!((flat.a_ns - 2.5e6).abs() < 1e-6, "{flat:?}");
        // Times steeper than proportional: the intercept would be negative, so it is held at 0
        // and the slope is the best line through the origin, sum(w x y) / sum(w x^2).
        let steep = fit_affine(&[time(1, 1, 1.0), time(2, 1, 4.0)]).unwrap();
        assert_eq!(steep.a_ns, 0.0);
        assert!((steep.b_ns - 1.8e6).abs() < 1e-6, "{steep:?}");
        // One size: flat at its mean.
        let one = fit_affine(&[time(4, 2, 5.0)]).unwrap();
        assert_eq!((one.a_ns, one.b_ns), (5e6, 0.0));
    }

    #[test]
    fn a_batch_takes_the_measured_time_linear_between_sizes_and_along_the_slope_beyond() {
        // Measured: 1 -> 3 ms, 2 -> 3.5 ms, 4 -> 6 ms (not on one line).
        let service =
            MeasuredService::new(&[time(4, 10, 6.0), time(1, 10, 3.0), time(2, 10, 3.5)]).unwrap();
        assert_eq!(service.sizes(), [1, 2, 4]);
        let ms = |n: u32| service.mean_ns(&shape(n)) * 1e-6;
        assert!((ms(1) - 3.0).abs() < 1e-9);
        assert!((ms(2) - 3.5).abs() < 1e-9);
        assert!(
            (ms(3) - 4.75).abs() < 1e-9,
            "halfway between 3.5 and 6: {}",
            ms(3)
        );
        assert!((ms(4) - 6.0).abs() < 1e-9);
        let slope_ms = service.fit().b_ns * 1e-6;
        assert!(slope_ms > 0.0);
        assert!((ms(8) - (6.0 + 4.0 * slope_ms)).abs() < 1e-9, "{}", ms(8));
        assert!(!service.is_extrapolated(&shape(3)));
        assert!(service.is_extrapolated(&shape(5)));
        let mut rng = SimRng::seed_from_u64(1);
        assert_eq!(service.sample_ns(&shape(3), &mut rng), 4_750_000);
    }

    #[test]
    fn below_the_smallest_size_the_time_falls_along_the_slope_but_not_below_zero() {
        let service =
            MeasuredService::new(&[time(4, 5, 1.0), time(8, 5, 9.0), time(16, 5, 17.0)]).unwrap();
        // The fit goes through the origin with 348/336 ms per request: size 3 at 1 - 1.04 < 0
        // is held at 0.
        assert_eq!(service.mean_ns(&shape(3)), 0.0);
        assert!(service.is_extrapolated(&shape(3)));
    }

    #[test]
    fn a_size_listed_twice_keeps_its_batch_weighted_mean_and_empty_or_bad_input_is_refused() {
        let service = MeasuredService::new(&[time(2, 1, 4.0), time(2, 3, 2.0)]).unwrap();
        assert_eq!(service.sizes(), [2]);
        assert!((service.mean_ns(&shape(2)) - 2.5e6).abs() < 1e-6);
        assert_eq!(MeasuredService::new(&[]), None);
        assert_eq!(MeasuredService::new(&[time(1, 0, 1.0)]), None);
        assert_eq!(MeasuredService::new(&[time(1, 1, f64::NAN)]), None);
    }

    #[test]
    fn a_leveled_model_keeps_its_shape_and_takes_the_servers_level_per_size() {
        let inner: Arc<dyn ServiceTime> =
            Arc::new(MeasuredService::new(&[time(1, 1, 1.0), time(4, 1, 4.0)]).expect("a model"));
        // The server measured size 1 at twice the model's time and size 4 at 1.5 times.
        let leveled = LeveledService::new(inner, &[(4, 1.5), (1, 2.0)]).expect("levels");
        assert_eq!(leveled.sizes(), &[1, 4]);
        assert!((leveled.mean_ns(&shape(1)) - 2e6).abs() < 1.0);
        assert!((leveled.mean_ns(&shape(4)) - 6e6).abs() < 1.0);
        // Between them, the factor runs linearly: size 2 at 2 - 0.5/3.
        let f2 = 2.0 - 0.5 / 3.0;
        assert!(
            (leveled.factor(2) - f2).abs() < 1e-12,
            "{}",
            leveled.factor(2)
        );
        assert!(
            (leveled.factor(9) - 1.5).abs() < 1e-12,
            "the nearest beyond"
        );
        let mut rng = SimRng::seed_from_u64(1);
        assert_eq!(leveled.sample_ns(&shape(4), &mut rng), 6_000_000);
        let again: Arc<dyn ServiceTime> = Arc::new(leveled);
        assert!(LeveledService::new(again.clone(), &[]).is_none());
        assert!(LeveledService::new(again, &[(1, f64::NAN)]).is_none());
    }
}
