//! Means with 95% confidence intervals across seeds (Student t).

use statrs::distribution::{ContinuousCDF, StudentsT};

/// The mean of a sample and its two-sided 95% confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Estimate {
    /// The sample mean.
    pub mean: f64,
    /// Lower end of the 95% interval; equal to the mean for a single sample.
    pub low: f64,
    /// Upper end of the 95% interval; equal to the mean for a single sample.
    pub high: f64,
    /// How many samples (e.g. seeds) the estimate is over.
    pub samples: usize,
}

impl Estimate {
    /// Half the width of the interval.
    pub fn half_width(&self) -> f64 {
        (self.high - self.low) / 2.0
    }

    /// The estimate of a quantity known to be at least `floor` (a capacity is at least 0): the
    /// interval's ends are raised to `floor` where they fall below it; the mean is kept. After
    /// this the interval may be asymmetric about the mean.
    pub fn floored_at(self, floor: f64) -> Estimate {
        Estimate {
            low: self.low.max(floor),
            high: self.high.max(floor),
            ..self
        }
    }
}

/// The mean of `values` with the Student-t 95% interval `mean ± t(0.975, n-1) · s / √n`.
///
/// One value gives a zero-width interval (there is no spread to estimate: report it as such);
/// no values, or a non-finite value, gives `None`.
pub fn mean_with_95_interval(values: &[f64]) -> Option<Estimate> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let samples = values.len();
    let mean = values.iter().sum::<f64>() / samples as f64;
    if samples == 1 {
        return Some(Estimate {
            mean,
            low: mean,
            high: mean,
            samples,
        });
    }
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (samples - 1) as f64;
    let t = StudentsT::new(0.0, 1.0, (samples - 1) as f64)
        .ok()?
        .inverse_cdf(0.975);
    let half_width = t * (variance / samples as f64).sqrt();
    Some(Estimate {
        mean,
        low: mean - half_width,
        high: mean + half_width,
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_uses_student_t_quantile() {
        // n = 3: mean 2, s = 1, t(0.975, 2) = 4.302653; half width = 4.302653 / √3 = 2.484138.
        let estimate = mean_with_95_interval(&[1.0, 2.0, 3.0]).unwrap();
        assert!((estimate.mean - 2.0).abs() < 1e-12);
        assert!(
            (estimate.half_width() - 2.484138).abs() < 1e-5,
            "expected 2.484138, got {}",
            estimate.half_width()
        );
    }

    #[test]
    fn floored_interval_of_a_nonnegative_quantity_never_goes_below_the_floor() {
        // Two seeds far apart: the Student-t interval (t(0.975, 1) = 12.706) reaches below 0.
        let raw = mean_with_95_interval(&[150.0, 256.6]).unwrap();
        assert!(raw.low < 0.0, "raw low {}", raw.low);
        let floored = raw.floored_at(0.0);
        assert_eq!(floored.low, 0.0);
        assert_eq!((floored.mean, floored.high), (raw.mean, raw.high));
        // An interval already above the floor is unchanged.
        let narrow = mean_with_95_interval(&[100.0, 101.0]).unwrap();
        assert_eq!(narrow.floored_at(0.0), narrow);
    }

    #[test]
    fn single_sample_has_zero_width() {
        let estimate = mean_with_95_interval(&[7.5]).unwrap();
        assert_eq!(
            (estimate.low, estimate.mean, estimate.high),
            (7.5, 7.5, 7.5)
        );
    }

    #[test]
    fn empty_or_nan_gives_none() {
        assert_eq!(mean_with_95_interval(&[]), None);
        assert_eq!(mean_with_95_interval(&[1.0, f64::NAN]), None);
    }
}
