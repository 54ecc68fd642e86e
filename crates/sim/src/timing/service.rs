//! Service-time models: how long one batch takes on a model instance.
//!
//! The engine asks a [`ServiceTime`] for the execution time of every batch it starts. Analytic
//! models live here; the calibrated, profile-driven model lives in [`crate::timing::profile`].

use crate::rng::SimRng;

/// What a batch looks like to a service-time model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchShape {
    /// Requests in the batch (>= 1).
    pub size: u32,
    /// Longest input of the batch in tokens: inputs are padded to it.
    pub max_input_tokens: u32,
    /// Sum of the batch's input tokens, before padding.
    pub total_input_tokens: u64,
    /// How long the model instance had been idle (ready, running nothing) when the batch
    /// started, ns; 0 when it starts as the previous batch ends. A run after an idle wait can be
    /// slower (cold caches, clocks down); calibrated profiles model that, analytic models do not.
    pub idle_ns: u64,
}

/// A model of batch execution time. Implementations are immutable and shared between instances;
/// all randomness comes from the caller's generator so runs stay deterministic.
pub trait ServiceTime: Send + Sync + std::fmt::Debug {
    /// Draws the execution time of one batch, in nanoseconds.
    fn sample_ns(&self, batch: &BatchShape, rng: &mut SimRng) -> u64;

    /// The mean execution time of a batch of this shape, in nanoseconds (for capacity estimates
    /// and reports; the engine itself only samples).
    fn mean_ns(&self, batch: &BatchShape) -> f64;

    /// Whether this batch lies outside the measurements the model was fitted to (its time is
    /// extrapolated); the engine counts such batches for the summary. Analytic models: never.
    fn is_extrapolated(&self, _batch: &BatchShape) -> bool {
        false
    }

    /// Whether [`ServiceTime::is_extrapolated`] can ever be true. The engine asks once per pool
    /// and skips the per-batch question when it is false. Default: true (ask every batch);
    /// models that never extrapolate return false.
    fn may_extrapolate(&self) -> bool {
        true
    }
}

/// Multiplicative variability drawn from an empirical distribution: each draw picks one observed
/// ratio (measured time / model mean) uniformly at random, so the tails of the measurements
/// survive in the simulation. The ratios are rescaled to mean 1 so the model's mean is kept.
#[derive(Debug, Clone, PartialEq)]
pub struct Residuals {
    factors: Vec<f64>,
}

impl Residuals {
    /// Builds the distribution from observed ratios. Returns `None` when `ratios` is empty or
    /// holds a non-finite or non-positive value.
    pub fn from_ratios(ratios: &[f64]) -> Option<Residuals> {
        if ratios.is_empty() || ratios.iter().any(|r| !r.is_finite() || *r <= 0.0) {
            return None;
        }
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        Some(Residuals {
            factors: ratios.iter().map(|r| r / mean).collect(),
        })
    }

    /// Draws one factor (mean 1 over many draws).
    #[inline]
    pub fn draw(&self, rng: &mut SimRng) -> f64 {
        use rand::RngExt;
        self.factors[rng.random_range(0..self.factors.len())]
    }

    /// The factors, rescaled to mean 1.
    pub fn factors(&self) -> &[f64] {
        &self.factors
    }
}

#[inline]
fn scaled_ns(mean_ns: f64, residuals: Option<&Residuals>, rng: &mut SimRng) -> u64 {
    let factor = residuals.map_or(1.0, |r| r.draw(rng));
    crate::time::round_ns(mean_ns * factor)
}

/// Every batch takes `time_ns`, times an optional empirical residual factor.
#[derive(Debug, Clone, PartialEq)]
pub struct ConstantService {
    /// Execution time of any batch, in nanoseconds.
    pub time_ns: u64,
    /// Optional variability.
    pub residuals: Option<Residuals>,
}

impl ServiceTime for ConstantService {
    fn sample_ns(&self, _batch: &BatchShape, rng: &mut SimRng) -> u64 {
        match &self.residuals {
            None => self.time_ns,
            Some(r) => scaled_ns(self.time_ns as f64, Some(r), rng),
        }
    }

    fn mean_ns(&self, _batch: &BatchShape) -> f64 {
        self.time_ns as f64
    }

    fn may_extrapolate(&self) -> bool {
        false
    }
}

/// Exponentially distributed batch time with mean `mean_ns` (the "M" of M/M/c), independent of
/// the batch's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ExponentialService {
    /// Mean execution time, in nanoseconds.
    pub mean_ns: f64,
}

impl ServiceTime for ExponentialService {
    fn sample_ns(&self, _batch: &BatchShape, rng: &mut SimRng) -> u64 {
        use rand_distr::Distribution;
        let e: f64 = rand_distr::Exp1.sample(rng);
        crate::time::round_ns(e * self.mean_ns)
    }

    fn mean_ns(&self, _batch: &BatchShape) -> f64 {
        self.mean_ns
    }

    fn may_extrapolate(&self) -> bool {
        false
    }
}

/// Batch time `a + b*size + c*size*max_input_tokens + d*size*max_input_tokens^2` nanoseconds
/// (fixed overhead, per-request cost, per padded token cost, and per padded token of each
/// padded sequence: a transformer's attention, quadratic in the sequence), times the batch
/// size's measured level where one is given, times an optional empirical residual factor.
#[derive(Debug, Clone, PartialEq)]
pub struct AffineService {
    /// Fixed cost per batch, in nanoseconds.
    pub a_ns: f64,
    /// Cost per request of the batch, in nanoseconds.
    pub b_ns: f64,
    /// Cost per padded input token (batch size times the longest input), in nanoseconds.
    pub c_ns: f64,
    /// Cost per padded input token per padded token of its sequence (batch size times the
    /// longest input squared), in nanoseconds.
    pub d_ns: f64,
    /// Each batch size's level, measured over the line (the first for size 1; sizes beyond the
    /// list take the last); empty: every size at the line.
    pub size_factors: Vec<f64>,
    /// Optional variability.
    pub residuals: Option<Residuals>,
}

/// The level of a batch of `size` requests in `size_factors` (`service.size_factors`, from size
/// 1): its entry, the last one beyond the list, 1 without any.
pub fn size_level(size_factors: &[f64], size: u32) -> f64 {
    let last = size_factors.len();
    if last == 0 {
        return 1.0;
    }
    size_factors[(size.max(1) as usize).min(last) - 1]
}

impl ServiceTime for AffineService {
    fn sample_ns(&self, batch: &BatchShape, rng: &mut SimRng) -> u64 {
        scaled_ns(self.mean_ns(batch), self.residuals.as_ref(), rng)
    }

    fn mean_ns(&self, batch: &BatchShape) -> f64 {
        let size = f64::from(batch.size);
        let longest = f64::from(batch.max_input_tokens);
        let line = self.a_ns
            + self.b_ns * size
            + self.c_ns * size * longest
            + self.d_ns * size * longest * longest;
        if self.size_factors.is_empty() {
            line
        } else {
            line * size_level(&self.size_factors, batch.size)
        }
    }

    fn may_extrapolate(&self) -> bool {
        false
    }
}

/// Another model's times multiplied by `factor`: the same model on a machine `factor` times
/// slower (1.1: every batch takes 10% longer; 0.5: twice as fast).
#[derive(Debug, Clone)]
pub struct ScaledService {
    inner: std::sync::Arc<dyn ServiceTime>,
    factor: f64,
}

impl ScaledService {
    /// `inner` slowed by `factor`; `None` unless `factor` is finite and positive.
    pub fn new(inner: std::sync::Arc<dyn ServiceTime>, factor: f64) -> Option<ScaledService> {
        (factor.is_finite() && factor > 0.0).then_some(ScaledService { inner, factor })
    }
}

impl ServiceTime for ScaledService {
    fn sample_ns(&self, batch: &BatchShape, rng: &mut SimRng) -> u64 {
        crate::time::round_ns(self.inner.sample_ns(batch, rng) as f64 * self.factor)
    }

    fn mean_ns(&self, batch: &BatchShape) -> f64 {
        self.inner.mean_ns(batch) * self.factor
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

    const SHAPE: BatchShape = BatchShape {
        size: 4,
        max_input_tokens: 100,
        total_input_tokens: 250,
        idle_ns: 0,
    };

    #[test]
    fn affine_mean_is_a_plus_b_batch_plus_c_batch_max_len() {
        let s = AffineService {
            a_ns: 1000.0,
            b_ns: 10.0,
            c_ns: 0.5,
            d_ns: 0.0,
            size_factors: Vec::new(),
            residuals: None,
        };
        assert_eq!(s.mean_ns(&SHAPE), 1000.0 + 40.0 + 200.0);
        let mut rng = SimRng::seed_from_u64(1);
        assert_eq!(s.sample_ns(&SHAPE, &mut rng), 1240);
        // The attention term: d per padded token per token of its padded sequence.
        let quadratic = AffineService { d_ns: 0.01, ..s };
        assert_eq!(
            quadratic.mean_ns(&SHAPE),
            1240.0 + 0.01 * 4.0 * 100.0 * 100.0
        );
    }

    #[test]
    fn a_size_factor_levels_its_size_and_the_last_one_every_larger_size() {
        let s = AffineService {
            a_ns: 1000.0,
            b_ns: 10.0,
            c_ns: 0.5,
            d_ns: 0.0,
            size_factors: vec![1.0, 0.5, 1.0, 2.0],
            residuals: None,
        };
        let shape = |size| BatchShape { size, ..SHAPE };
        // Size 2: a + 2b + 2*100c = 1120, at half.
        assert_eq!(s.mean_ns(&shape(2)), 560.0);
        assert_eq!(s.mean_ns(&shape(4)), 2.0 * 1240.0);
        // Beyond the list: the last factor.
        assert_eq!(s.mean_ns(&shape(8)), 2.0 * (1000.0 + 80.0 + 400.0));
        let mut rng = SimRng::seed_from_u64(1);
        assert_eq!(s.sample_ns(&shape(4), &mut rng), 2480);
    }

    #[test]
    fn residual_draws_keep_the_mean_and_reach_the_tail() {
        let ratios = [0.9, 0.95, 1.0, 1.0, 1.05, 3.0];
        let r = Residuals::from_ratios(&ratios).unwrap();
        let s = ConstantService {
            time_ns: 1_000_000,
            residuals: Some(r),
        };
        let mut rng = SimRng::seed_from_u64(3);
        let n = 200_000;
        let draws: Vec<u64> = (0..n).map(|_| s.sample_ns(&SHAPE, &mut rng)).collect();
        let mean = draws.iter().sum::<u64>() as f64 / n as f64;
        assert!((mean / 1e6 - 1.0).abs() < 0.01, "mean {mean}");
        let max = *draws.iter().max().unwrap();
        let expected_max = (3.0 / (7.9 / 6.0) * 1e6_f64).round() as u64;
        assert_eq!(max, expected_max, "the largest residual must be reachable");
    }

    #[test]
    fn residuals_reject_empty_and_non_positive_ratios() {
        assert!(Residuals::from_ratios(&[]).is_none());
        assert!(Residuals::from_ratios(&[1.0, 0.0]).is_none());
        assert!(Residuals::from_ratios(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn exponential_sample_mean_matches_its_parameter() {
        let s = ExponentialService { mean_ns: 2e6 };
        let mut rng = SimRng::seed_from_u64(9);
        let n = 200_000;
        let mean = (0..n).map(|_| s.sample_ns(&SHAPE, &mut rng)).sum::<u64>() as f64 / n as f64;
        assert!((mean / 2e6 - 1.0).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn scaled_service_multiplies_every_draw_and_the_mean_by_its_factor() {
        let inner = std::sync::Arc::new(ExponentialService { mean_ns: 2e6 });
        let scaled = ScaledService::new(inner.clone(), 1.25).unwrap();
        assert_eq!(scaled.mean_ns(&SHAPE), 2.5e6);
        let (mut a, mut b) = (SimRng::seed_from_u64(4), SimRng::seed_from_u64(4));
        for _ in 0..1_000 {
            let plain = inner.sample_ns(&SHAPE, &mut a);
            let slowed = scaled.sample_ns(&SHAPE, &mut b);
            assert_eq!(
                slowed,
                crate::time::round_ns(plain as f64 * 1.25),
                "draw {plain}"
            );
        }
        assert!(!scaled.may_extrapolate());
        assert!(ScaledService::new(inner.clone(), 0.0).is_none());
        assert!(ScaledService::new(inner.clone(), -1.0).is_none());
        assert!(ScaledService::new(inner, f64::NAN).is_none());
    }
}
