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
