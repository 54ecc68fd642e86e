//! Simulation time: an integer count of nanoseconds since the start of the run.
//!
//! The engine never uses floating-point seconds; conversions happen at the edges (parsing
//! scenarios, writing reports).

use std::ops::{Add, AddAssign, Sub};

/// An instant of simulated time, in nanoseconds since the run's origin (the trace's time 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SimTime(pub u64);

impl SimTime {
    /// The run's origin.
    pub const ZERO: SimTime = SimTime(0);
    /// A time later than any event; used as "never".
    pub const NEVER: SimTime = SimTime(u64::MAX);
    /// The end of representable simulated time: 2^63 ns, about 292 years. A run stops with an
    /// error at an event this late rather than let sums of times saturate; trace arrivals
    /// (signed 64-bit nanoseconds) all come before it.
    pub const HORIZON: SimTime = SimTime(1 << 63);

    /// Nanoseconds since the origin.
    #[inline]
    pub fn ns(self) -> u64 {
        self.0
    }

    /// Nanoseconds from `earlier` to `self`; zero when `earlier` is later (never negative).
    #[inline]
    pub fn since(self, earlier: SimTime) -> u64 {
        self.0.saturating_sub(earlier.0)
    }

    /// Seconds since the origin, for reports.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
}

/// Rounds a non-negative duration in nanoseconds to the nearest integer (halves away from
/// zero), exactly as `ns.round() as u64` does for every input (negative and NaN give 0, values
/// past `u64::MAX` saturate), without the `round` library call that a baseline x86-64 build makes
/// for `f64::round`: the truncating cast is one instruction, and `ns - truncated` is exact.
#[inline]
pub fn round_ns(ns: f64) -> u64 {
    // Below 2^52 ns (52 days), where every duration a run samples lies, the signed casts are one
    // instruction each way, where the unsigned ones take several on a baseline x86-64 build.
    if (0.0..4_503_599_627_370_496.0).contains(&ns) {
        let truncated = ns as i64;
        let fraction = ns - truncated as f64;
        return (truncated + i64::from(fraction >= 0.5)) as u64;
    }
    let truncated = ns as u64;
    // Exact: below 2^53 both are representable and within 1 of each other; above, `ns` is
    // integral and the difference is 0 (or the cast saturated and the difference is ignored).
    let fraction = ns - truncated as f64;
    truncated + u64::from(fraction >= 0.5 && truncated < u64::MAX)
}

impl Add<u64> for SimTime {
    type Output = SimTime;
    /// Adds nanoseconds, saturating at [`SimTime::NEVER`].
    #[inline]
    fn add(self, delay_ns: u64) -> SimTime {
        SimTime(self.0.saturating_add(delay_ns))
    }
}

impl AddAssign<u64> for SimTime {
    #[inline]
    fn add_assign(&mut self, delay_ns: u64) {
        self.0 = self.0.saturating_add(delay_ns);
    }
}

impl Sub for SimTime {
    type Output = u64;
    /// Nanoseconds between two instants. Panics in debug builds if `rhs` is later.
    #[inline]
    fn sub(self, rhs: SimTime) -> u64 {
        debug_assert!(
            self.0 >= rhs.0,
            "time went backwards: {} - {}",
            self.0,
            rhs.0
        );
        self.0 - rhs.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    #[test]
    fn round_ns_equals_f64_round_cast_for_every_kind_of_input() {
        let mut values = vec![
            0.0,
            -0.0,
            0.5,
            1.5,
            2.5,
            0.499_999_999_999_999_94,
            -0.3,
            -0.7,
            -2.5,
            4_503_599_627_370_495.5,
            4_503_599_627_370_497.0,
            9_007_199_254_740_993.0,
            1.8e19,
            1.9e19,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            u64::MAX as f64,
        ];
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..200_000 {
            let magnitude = rng.random_range(-3..70);
            values.push(rng.random::<f64>() * 2f64.powi(magnitude));
            values.push(rng.random_range(0..1_000_000u64) as f64 + 0.5);
        }
        for v in values {
            assert_eq!(round_ns(v), v.round() as u64, "value {v:e}");
        }
    }
}
