//! The knee of a latency curve by Kneedle (Satopaa, Albrecht, Irwin and Raghavan, "Finding a
//! 'Kneedle' in a Haystack", ICDCSW 2011).
//!
//! Latency against load is increasing and convex. Kneedle, as the paper states it, works on
//! concave increasing curves, so the normalised curve is first turned into one by the point
//! reflection `(x, y) -> (1 - x, 1 - y)` (read from the last point to the first), as the paper's
//! reference implementation does. Then: the difference curve `D = y - x`, its local maxima, and
//! for each local maximum the threshold `T = D_max - S * mean(Δx)`; a local maximum is a knee when
//! the difference curve falls below its threshold before the next local maximum. Of the knees,
//! the one with the largest difference value is reported. There is no smoothing step: the points
//! are already means over a run, and the paper's reference implementation also interpolates
//! without smoothing by default.

/// The paper's default sensitivity `S`.
pub const DEFAULT_SENSITIVITY: f64 = 1.0;

/// Curves with fewer points than this get a warning: the knee is coarse.
pub const MIN_POINTS_WITHOUT_WARNING: usize = 10;

/// A knee: a point of the input curve.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Knee {
    /// Index of the point in the input.
    pub index: usize,
    /// The point's x (input units).
    pub x: f64,
    /// The point's y (input units).
    pub y: f64,
    /// The difference-curve value at the knee, in normalised units (0..1).
    pub difference: f64,
}

/// What Kneedle found, with warnings a reader should see next to the knee.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KneeAnalysis {
    /// The knee, or `None` when no local maximum of the difference curve passes the threshold
    /// (e.g. a straight line, or a curve that never bends within the points).
    pub knee: Option<Knee>,
    /// Human-readable warnings, e.g. too few points.
    pub warnings: Vec<String>,
}

/// Input Kneedle cannot work on.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KneeError {
    /// `x` and `y` have different lengths.
    #[error("knee: x has {x_len} points but y has {y_len}")]
    LengthMismatch {
        /// Points in `x`.
        x_len: usize,
        /// Points in `y`.
        y_len: usize,
    },
    /// Fewer than three points: there is no interior point to be a knee.
    #[error("knee: need at least 3 points, got {count}")]
    TooFewPoints {
        /// Points given (0, 1 or 2).
        count: usize,
    },
    /// A value is NaN or infinite.
    #[error("knee: point {index} is not finite (x = {x}, y = {y})")]
    NotFinite {
        /// Index of the first such point.
        index: usize,
        /// Its x.
        x: f64,
        /// Its y.
        y: f64,
    },
    /// `x` does not strictly increase.
    #[error("knee: x must strictly increase, but x[{index}] = {x} follows {previous}")]
    NotIncreasing {
        /// Index of the first point whose x is not above the one before.
        index: usize,
        /// Its x.
        x: f64,
        /// The x before it.
        previous: f64,
    },
    /// The sensitivity is negative or not finite.
    #[error("knee: sensitivity must be a finite number >= 0, got {0}")]
    BadSensitivity(f64),
}

/// Finds the knee of an increasing convex curve, e.g. latency (y) against offered load (x).
///
/// `x` must strictly increase; `sensitivity` is the paper's `S` (larger is more conservative;
/// [`DEFAULT_SENSITIVITY`] is 1). A flat curve has no knee.
pub fn kneedle_convex_increasing(
    x: &[f64],
    y: &[f64],
    sensitivity: f64,
) -> Result<KneeAnalysis, KneeError> {
    validate(x, y, sensitivity)?;
    let count = x.len();
    let mut warnings = Vec::new();
    if count < MIN_POINTS_WITHOUT_WARNING {
        warnings.push(format!(
            "knee from only {count} points (fewer than {MIN_POINTS_WITHOUT_WARNING}); \
             add load points for a reliable knee"
        ));
    }
    let (y_min, y_max) = y
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    if y_max == y_min {
        warnings.push("the curve is flat: no knee".to_string());
        return Ok(KneeAnalysis {
            knee: None,
            warnings,
        });
    }
    let x_span = x[count - 1] - x[0];
    // Reflected into a concave increasing curve: point j of the reflected curve is input point
    // count - 1 - j.
    let reflected_x = |j: usize| 1.0 - (x[count - 1 - j] - x[0]) / x_span;
    let reflected_y = |j: usize| 1.0 - (y[count - 1 - j] - y_min) / (y_max - y_min);
    let difference: Vec<f64> = (0..count)
        .map(|j| reflected_y(j) - reflected_x(j))
        .collect();
    // The reflected x spans exactly [0, 1], so the mean spacing is 1 / (count - 1).
    let mean_spacing = 1.0 / (count - 1) as f64;
    let is_local_max =
        |j: usize| difference[j] > difference[j - 1] && difference[j] >= difference[j + 1];

    let mut best: Option<usize> = None;
    for j in 1..count - 1 {
        if !is_local_max(j) {
            continue;
        }
        let threshold = difference[j] - sensitivity * mean_spacing;
        for k in j + 1..count {
            if k < count - 1 && is_local_max(k) {
                break;
            }
            if difference[k] < threshold {
                if best.is_none_or(|b| difference[j] > difference[b]) {
                    best = Some(j);
                }
                break;
            }
        }
    }
    let knee = best.map(|j| {
        let index = count - 1 - j;
        Knee {
            index,
            x: x[index],
            y: y[index],
            difference: difference[j],
        }
    });
    if knee.is_none() {
        warnings.push(format!(
            "no local maximum of the difference curve passes the threshold at sensitivity {sensitivity}"
        ));
    }
    Ok(KneeAnalysis { knee, warnings })
}

fn validate(x: &[f64], y: &[f64], sensitivity: f64) -> Result<(), KneeError> {
    if x.len() != y.len() {
        return Err(KneeError::LengthMismatch {
            x_len: x.len(),
            y_len: y.len(),
        });
    }
    if x.len() < 3 {
        return Err(KneeError::TooFewPoints { count: x.len() });
    }
    if !(sensitivity >= 0.0 && sensitivity.is_finite()) {
        return Err(KneeError::BadSensitivity(sensitivity));
    }
    for (index, (&xi, &yi)) in x.iter().zip(y).enumerate() {
        if !xi.is_finite() || !yi.is_finite() {
            return Err(KneeError::NotFinite {
                index,
                x: xi,
                y: yi,
            });
        }
        if index > 0 && xi <= x[index - 1] {
            return Err(KneeError::NotIncreasing {
                index,
                x: xi,
                previous: x[index - 1],
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// y = x up to the corner at x = 10, then slope 10: a convex curve with a known corner.
    fn corner_curve() -> (Vec<f64>, Vec<f64>) {
        let x: Vec<f64> = (0..=20).map(f64::from).collect();
        let y = x
            .iter()
            .map(|&x| {
                if x <= 10.0 {
                    x
                } else {
                    10.0 + 10.0 * (x - 10.0)
                }
            })
            .collect();
        (x, y)
    }

    #[test]
    fn knee_of_piecewise_linear_curve_is_its_corner() {
        let (x, y) = corner_curve();
        let analysis = kneedle_convex_increasing(&x, &y, DEFAULT_SENSITIVITY).unwrap();
        let knee = analysis.knee.expect("a corner is a knee");
        assert_eq!(
            knee.index, 10,
            "expected the corner at x = 10, got {knee:?}"
        );
        // Normalised: x = 0.5, y = 10 / 110; the difference is their gap.
        assert!(
            (knee.difference - (0.5 - 10.0 / 110.0)).abs() < 1e-12,
            "{knee:?}"
        );
        assert!(analysis.warnings.is_empty(), "{:?}", analysis.warnings);
    }

    #[test]
    fn knee_of_mm1_wait_curve_matches_hand_computation() {
        // M/M/1 mean wait in units of the mean service time, W(ρ) = ρ / (1 - ρ), for
        // ρ = 0.05, 0.10, ..., 0.95 (19 points). By hand: normalised x_n = (ρ - 0.05) / 0.9,
        // y_n = (W - W(0.05)) / (W(0.95) - W(0.05)) with W(0.05) = 0.052632, W(0.95) = 19;
        // x_n - y_n (the difference curve read in the original orientation) is
        // 0.6019 at ρ = 0.70, 0.6222 at 0.75, 0.6250 at 0.80 (the maximum), 0.5926 at 0.85 and
        // 0.4722 at 0.90. The threshold is 0.6250 - 1/18 = 0.5694, and walking away from the
        // maximum towards lower ρ the curve falls below it at ρ = 0.60 (0.5347) before any other
        // local maximum, so the knee is ρ = 0.80 (index 15).
        let rho: Vec<f64> = (1..20).map(|i| f64::from(i) * 0.05).collect();
        let wait: Vec<f64> = rho.iter().map(|r| r / (1.0 - r)).collect();
        let analysis = kneedle_convex_increasing(&rho, &wait, DEFAULT_SENSITIVITY).unwrap();
        let knee = analysis.knee.expect("the M/M/1 wait curve has a knee");
        assert_eq!(knee.index, 15, "expected ρ = 0.80, got {knee:?}");
        assert!((knee.x - 0.80).abs() < 1e-12);
        assert!((knee.difference - 0.6250).abs() < 1e-3, "{knee:?}");
    }

    #[test]
    fn knee_does_not_move_under_affine_rescaling() {
        let (x, y) = corner_curve();
        let x2: Vec<f64> = x.iter().map(|v| 250.0 + 37.0 * v).collect();
        let y2: Vec<f64> = y.iter().map(|v| 3.0 + 0.001 * v).collect();
        let a = kneedle_convex_increasing(&x, &y, 1.0)
            .unwrap()
            .knee
            .unwrap();
        let b = kneedle_convex_increasing(&x2, &y2, 1.0)
            .unwrap()
            .knee
            .unwrap();
        assert_eq!(a.index, b.index);
    }

    #[test]
    fn straight_line_has_no_knee() {
        let x: Vec<f64> = (0..20).map(f64::from).collect();
        let y: Vec<f64> = x.iter().map(|v| 2.0 * v + 1.0).collect();
        let analysis = kneedle_convex_increasing(&x, &y, 1.0).unwrap();
        assert_eq!(analysis.knee, None);
    }

    #[test]
    fn flat_curve_has_no_knee() {
        let x: Vec<f64> = (0..12).map(f64::from).collect();
        let analysis = kneedle_convex_increasing(&x, &[5.0; 12], 1.0).unwrap();
        assert_eq!(analysis.knee, None);
        assert!(analysis.warnings.iter().any(|w| w.contains("flat")));
    }

    #[test]
    fn high_sensitivity_refuses_a_weak_knee() {
        // The corner's difference value is 0.41; with S = 20 the threshold is 0.41 - 20/20 < 0,
        // which the difference curve (never negative here) cannot fall below.
        let (x, y) = corner_curve();
        let analysis = kneedle_convex_increasing(&x, &y, 20.0).unwrap();
        assert_eq!(analysis.knee, None, "{analysis:?}");
    }

    #[test]
    fn fewer_than_ten_points_warns_but_still_finds_the_knee() {
        let x: Vec<f64> = (0..7).map(f64::from).collect();
        let y = vec![0.0, 1.0, 2.0, 3.0, 13.0, 23.0, 33.0];
        let analysis = kneedle_convex_increasing(&x, &y, 1.0).unwrap();
        assert_eq!(analysis.knee.map(|k| k.index), Some(3));
        assert!(
            analysis
                .warnings
                .iter()
                .any(|w| w.contains("only 7 points")),
            "{:?}",
            analysis.warnings
        );
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        assert_eq!(
            kneedle_convex_increasing(&[0.0, 1.0], &[0.0, 1.0], 1.0),
            Err(KneeError::TooFewPoints { count: 2 })
        );
        assert!(matches!(
            kneedle_convex_increasing(&[0.0, 2.0, 1.0], &[0.0, 1.0, 2.0], 1.0),
            Err(KneeError::NotIncreasing { index: 2, .. })
        ));
        assert!(matches!(
            kneedle_convex_increasing(&[0.0, 1.0, 2.0], &[0.0, f64::NAN, 2.0], 1.0),
            Err(KneeError::NotFinite { index: 1, .. })
        ));
        assert!(matches!(
            kneedle_convex_increasing(&[0.0, 1.0, 2.0], &[0.0, 1.0], 1.0),
            Err(KneeError::LengthMismatch { .. })
        ));
        assert!(matches!(
            kneedle_convex_increasing(&[0.0, 1.0, 2.0], &[0.0, 1.0, 2.0], -1.0),
            Err(KneeError::BadSensitivity(_))
        ));
    }
}
