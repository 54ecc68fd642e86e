//! The unit of a numeric arrival column that no `--map arrival=COL:UNIT` states.
//!
//! Unix times of any date from 2001-09-09 to 2262-04-11 are about 1e9 in seconds, 1e12 in
//! milliseconds, 1e15 in microseconds and 1e18 in nanoseconds: in every unit they fall in
//! [1e18, i64::MAX] once scaled to nanoseconds, and no two units overlap. A column whose
//! values all fall in one such band, spanning less than a tenth of their distance from 1970
//! (a log of months, not of decades), is read in that band's unit, and the ingest report says
//! so ([`InferredUnit`]). Any other column keeps the documented default, nanoseconds, unless
//! that reading cannot be a log of requests: fractional nanoseconds, or at least
//! [`MANY_ROWS`] arrivals in under a millisecond or at over [`MAX_MEAN_RATE_RPS`]. Those are
//! refused with the column, its readings in seconds and milliseconds, and the fix.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::TraceError;
use crate::read::Part;
use crate::timestamp::{self, TimeUnit};

/// Rows from which a default-nanosecond column is checked for an impossible load.
pub const MANY_ROWS: usize = 100;

/// A mean arrival rate above this (requests per second) is no service's load.
pub const MAX_MEAN_RATE_RPS: f64 = 1e6;

/// A span under this, with [`MANY_ROWS`] arrivals or more, is no service's log either.
const MIN_SPAN_NS: f64 = 1e6;

/// The smallest Unix time, in ns, that a unit is inferred from: 2001-09-09T01:46:40Z.
const EPOCH_BAND_LOW_NS: f64 = 1e18;

/// An arrival column whose unit was inferred from its values' magnitude.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InferredUnit {
    /// The file the column is in.
    pub path: PathBuf,
    /// The column, by its name in the file.
    pub column: String,
    /// The unit inferred, by its `--map` name (`s`, `ms`, `us` or `ns`).
    pub unit: &'static str,
}

impl InferredUnit {
    /// A note for terminals: what was inferred and how to state it.
    pub fn note(&self) -> String {
        format!(
            "{}: arrival column `{}` has no unit; its values are Unix times in {} by their \
             magnitude, read as --map arrival={}:{} (state the unit to silence this)",
            self.path.display(),
            self.column,
            self.unit_words(),
            self.column,
            self.unit
        )
    }

    /// The unit in words: `seconds`, `milliseconds`, `microseconds` or `nanoseconds`.
    pub fn unit_words(&self) -> &'static str {
        match self.unit {
            "s" => "seconds",
            "ms" => "milliseconds",
            "us" => "microseconds",
            _ => "nanoseconds",
        }
    }
}

/// Settles the unit of `part`'s arrivals when its column is numeric with no unit stated (they
/// were read as nanoseconds): rescales them when their magnitude says Unix time in another
/// unit, or refuses a nanosecond reading that cannot be a log. `column` is the arrival column's
/// name in the file.
pub(crate) fn settle(part: &mut Part, column: &str) -> Result<Option<InferredUnit>, TraceError> {
    if !part.arrival_unstated {
        return Ok(None);
    }
    let raw: Vec<f64> = match part.cols.arrival_raw.take() {
        Some(raw) => raw,
        None => part.cols.arrival.iter().map(|&a| a as f64).collect(),
    };
    let Some((min, max)) = min_max(&raw) else {
        return Ok(None);
    };
    if let Some(unit) = epoch_unit(min, max) {
        if unit != TimeUnit::Nanos {
            for (a, &v) in part.cols.arrival.iter_mut().zip(&raw) {
                *a = scale_to_ns(v, unit);
            }
        }
        return Ok(Some(InferredUnit {
            path: part.path.clone(),
            column: column.to_string(),
            unit: unit.name(),
        }));
    }
    check_nanoseconds(&part.path, column, &raw, min, max)?;
    Ok(None)
}

fn min_max(values: &[f64]) -> Option<(f64, f64)> {
    let first = *values.first()?;
    Some(
        values
            .iter()
            .fold((first, first), |(lo, hi), &v| (lo.min(v), hi.max(v))),
    )
}

/// The unit in which `min..=max` (numbers as a log wrote them) are Unix times of one band,
/// if any: seconds for about 1e9, milliseconds for 1e12, microseconds for 1e15, nanoseconds
/// for 1e18 (dates 2001-09-09 to 2262), the span under a tenth of the distance from 1970.
/// `None` for anything else, offsets from a trace's start included.
pub fn epoch_unit(min: f64, max: f64) -> Option<TimeUnit> {
    [
        TimeUnit::Seconds,
        TimeUnit::Millis,
        TimeUnit::Micros,
        TimeUnit::Nanos,
    ]
    .into_iter()
    .find(|unit| {
        let scale = unit.ns_per_unit() as f64;
        let (low_ns, high_ns) = (min * scale, max * scale);
        low_ns >= EPOCH_BAND_LOW_NS
            && high_ns < i64::MAX as f64
            && high_ns - low_ns <= low_ns / 10.0
    })
}

/// `v` in `unit` as nanoseconds: exact for whole numbers below 2^53, rounded otherwise. The
/// caller has checked that the result fits.
fn scale_to_ns(v: f64, unit: TimeUnit) -> i64 {
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if v.fract() == 0.0 && v < EXACT {
        (v as i64).saturating_mul(unit.ns_per_unit() as i64)
    } else {
        timestamp::offset_from_f64(v, unit).unwrap_or(i64::MAX)
    }
}

/// Refuses a default-nanosecond reading of `raw` that cannot be a log of requests.
fn check_nanoseconds(
    path: &Path,
    column: &str,
    raw: &[f64],
    min: f64,
    max: f64,
) -> Result<(), TraceError> {
    let refuse = |reason: String| TraceError::ArrivalUnit {
        path: path.to_path_buf(),
        column: column.to_string(),
        reason,
    };
    if let Some(v) = raw.iter().find(|v| v.fract() != 0.0) {
        return Err(refuse(format!(
            "holds fractions ({v}), which the default unit, nanoseconds, cannot have{}",
            readings(raw.len(), max - min)
        )));
    }
    let span_ns = max - min;
    let n = raw.len();
    let rate_rps = (n - 1) as f64 / (span_ns / 1e9);
    if n >= MANY_ROWS && (span_ns < MIN_SPAN_NS || rate_rps > MAX_MEAN_RATE_RPS) {
        return Err(refuse(format!(
            "read in the default unit, nanoseconds, its {n} arrivals span {} ({}), \
             which is no service's load{}",
            span_words(span_ns),
            rate_words(rate_rps),
            readings(n, span_ns)
        )));
    }
    Ok(())
}

/// "; as seconds: ..., as milliseconds: ...": the readings a person would check first.
fn readings(n: usize, span_raw: f64) -> String {
    let read = |unit: TimeUnit| {
        let span_ns = span_raw * unit.ns_per_unit() as f64;
        let rate = (n.saturating_sub(1)) as f64 / (span_ns / 1e9);
        format!("{} ({})", span_words(span_ns), rate_words(rate))
    };
    format!(
        "; as seconds they span {}, as milliseconds {}",
        read(TimeUnit::Seconds),
        read(TimeUnit::Millis)
    )
}

fn span_words(span_ns: f64) -> String {
    match span_ns {
        s if s >= 1e9 => format!("{:.1} s", s / 1e9),
        s if s >= 1e6 => format!("{:.1} ms", s / 1e6),
        s if s >= 1e3 => format!("{:.1} us", s / 1e3),
        s => format!("{s:.0} ns"),
    }
}

fn rate_words(rate_rps: f64) -> String {
    if !rate_rps.is_finite() {
        "all at one instant".to_string()
    } else if rate_rps >= 1e5 {
        format!("{rate_rps:.2e} req/s")
    } else {
        format!("{rate_rps:.1} req/s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_unit_of_a_unix_time_has_its_own_band() {
        let unix_s = 1_787_267_980.08;
        assert_eq!(epoch_unit(unix_s, unix_s + 29.0), Some(TimeUnit::Seconds));
        assert_eq!(
            epoch_unit(unix_s * 1e3, unix_s * 1e3 + 29e3),
            Some(TimeUnit::Millis)
        );
        assert_eq!(
            epoch_unit(unix_s * 1e6, unix_s * 1e6 + 29e6),
            Some(TimeUnit::Micros)
        );
        assert_eq!(
            epoch_unit(unix_s * 1e9, unix_s * 1e9 + 29e9),
            Some(TimeUnit::Nanos)
        );
    }

    #[test]
    fn offsets_and_long_spans_are_no_unix_time() {
        assert_eq!(epoch_unit(0.0, 3600.0), None, "offsets from 0");
        assert_eq!(epoch_unit(5e10, 6e10), None, "between the s and ms bands");
        // Nanosecond offsets from 1.5 s to 3 s sit in the seconds band, but would span 47 years.
        assert_eq!(epoch_unit(1.5e9, 3e9), None);
        // Seconds past 2262 do not fit in i64 nanoseconds.
        assert_eq!(epoch_unit(9.3e9, 9.3e9), None);
    }

    #[test]
    fn whole_numbers_scale_exactly() {
        assert_eq!(
            scale_to_ns(1_777_142_838_300_123.0, TimeUnit::Micros),
            1_777_142_838_300_123_000
        );
        assert_eq!(
            scale_to_ns(1_787_267_980.5, TimeUnit::Seconds),
            1_787_267_980_500_000_000
        );
    }

    #[test]
    fn spans_and_rates_read_in_the_nearest_unit() {
        assert_eq!(span_words(29.0), "29 ns");
        assert_eq!(span_words(29e9), "29.0 s");
        assert_eq!(rate_words(10.34), "10.3 req/s");
        assert_eq!(rate_words(1.03e10), "1.03e10 req/s");
    }
}
