//! A measured time as a function of one size (tokens, sequences, bytes), interpolated linearly
//! between measured points.

/// Measured `(x, time_ns)` points, sorted by `x`, no two with the same `x`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Curve {
    points: Vec<(f64, f64)>,
}

impl Curve {
    /// A curve through `points` (any order). Points with the same `x` are averaged. `None`
    /// when empty or when any value is not finite or is negative.
    pub fn new(mut points: Vec<(f64, f64)>) -> Option<Curve> {
        if points.is_empty()
            || points
                .iter()
                .any(|&(x, t)| !x.is_finite() || !t.is_finite() || x < 0.0 || t < 0.0)
        {
            return None;
        }
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut merged: Vec<(f64, f64, u32)> = Vec::with_capacity(points.len());
        for (x, t) in points {
            match merged.last_mut() {
                Some(last) if last.0 == x => {
                    last.1 += t;
                    last.2 += 1;
                }
                _ => merged.push((x, t, 1)),
            }
        }
        Some(Curve {
            points: merged
                .into_iter()
                .map(|(x, t, n)| (x, t / f64::from(n)))
                .collect(),
        })
    }

    /// The measured points, sorted by `x`.
    pub fn points(&self) -> &[(f64, f64)] {
        &self.points
    }

    /// The largest measured `x`.
    pub fn max_x(&self) -> f64 {
        self.points.last().map_or(0.0, |p| p.0)
    }

    /// The time at `x`, ns: linear between the two measured points around it; below the first
    /// point, the first point's time (a kernel never gets faster on less work); above the last,
    /// the line through the last two points, never below the last time.
    pub fn at(&self, x: f64) -> f64 {
        let p = &self.points;
        match p.len() {
            0 => 0.0,
            1 => p[0].1,
            n => {
                if x <= p[0].0 {
                    return p[0].1;
                }
                let hi = p.partition_point(|&(px, _)| px < x);
                if hi >= n {
                    let (x0, t0) = p[n - 2];
                    let (x1, t1) = p[n - 1];
                    let slope = ((t1 - t0) / (x1 - x0)).max(0.0);
                    return t1 + slope * (x - x1);
                }
                let (x0, t0) = p[hi - 1];
                let (x1, t1) = p[hi];
                if x1 == x0 {
                    return t1;
                }
                t0 + (t1 - t0) * (x - x0) / (x1 - x0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_between_points_clamps_below_and_extends_the_last_slope_above() {
        let c = Curve::new(vec![(4.0, 40.0), (1.0, 10.0), (2.0, 30.0)]).unwrap();
        assert_eq!(c.at(0.5), 10.0);
        assert_eq!(c.at(1.5), 20.0);
        assert_eq!(c.at(3.0), 35.0);
        assert_eq!(c.at(6.0), 50.0);
        let falling = Curve::new(vec![(1.0, 10.0), (2.0, 8.0)]).unwrap();
        assert_eq!(falling.at(10.0), 8.0, "extrapolation never falls");
    }

    #[test]
    fn repeated_points_are_averaged_and_bad_points_refused() {
        let c = Curve::new(vec![(1.0, 10.0), (1.0, 20.0)]).unwrap();
        assert_eq!(c.points(), &[(1.0, 15.0)]);
        assert!(Curve::new(vec![]).is_none());
        assert!(Curve::new(vec![(1.0, f64::NAN)]).is_none());
        assert!(Curve::new(vec![(-1.0, 1.0)]).is_none());
    }
}
