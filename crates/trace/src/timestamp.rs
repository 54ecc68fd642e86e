//! Arrival times as logs write them: wall-clock datetimes and numeric offsets with a unit.
//!
//! The Azure traces write `YYYY-MM-DD HH:MM:SS.fffffff` (no zone, 100 ns digits); parsing that
//! shape is the hot path of CSV ingest, so it is done by hand on bytes. Other datetime shapes
//! (RFC 3339 with an offset, `T` separators, fewer digits) fall back to `jiff`.

use crate::InvalidReason;

/// The unit of an arrival column, as named in `--map arrival=COL:UNIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    /// Wall-clock datetimes (zone-less ones are taken as UTC); the trace starts at the earliest.
    Datetime,
    /// Seconds from trace start (may have a fraction).
    Seconds,
    /// Milliseconds from trace start.
    Millis,
    /// Microseconds from trace start.
    Micros,
    /// Nanoseconds from trace start.
    Nanos,
}

impl TimeUnit {
    /// Parses `datetime`, `s`, `ms`, `us` or `ns`.
    pub fn parse(text: &str) -> Option<TimeUnit> {
        Some(match text {
            "datetime" => TimeUnit::Datetime,
            "s" => TimeUnit::Seconds,
            "ms" => TimeUnit::Millis,
            "us" => TimeUnit::Micros,
            "ns" => TimeUnit::Nanos,
            _ => return None,
        })
    }

    /// Nanoseconds per unit; 0 for datetimes.
    pub fn ns_per_unit(self) -> u64 {
        match self {
            TimeUnit::Datetime => 0,
            TimeUnit::Seconds => 1_000_000_000,
            TimeUnit::Millis => 1_000_000,
            TimeUnit::Micros => 1_000,
            TimeUnit::Nanos => 1,
        }
    }

    /// The name used in `--map`.
    pub fn name(self) -> &'static str {
        match self {
            TimeUnit::Datetime => "datetime",
            TimeUnit::Seconds => "s",
            TimeUnit::Millis => "ms",
            TimeUnit::Micros => "us",
            TimeUnit::Nanos => "ns",
        }
    }
}

/// Parses a datetime into Unix nanoseconds. Zone-less datetimes are UTC.
pub fn parse_datetime_ns(text: &[u8]) -> Result<i64, InvalidReason> {
    if let Some(ns) = parse_fixed_datetime_ns(text) {
        return Ok(ns);
    }
    let text = std::str::from_utf8(text).map_err(|_| InvalidReason::BadTimestamp)?;
    let text = text.trim();
    if let Ok(ts) = text.parse::<jiff::Timestamp>() {
        return i64::try_from(ts.as_nanosecond()).map_err(|_| InvalidReason::TooLarge);
    }
    let dt: jiff::civil::DateTime = text.parse().map_err(|_| InvalidReason::BadTimestamp)?;
    let ts = jiff::tz::TimeZone::UTC
        .to_timestamp(dt)
        .map_err(|_| InvalidReason::BadTimestamp)?;
    i64::try_from(ts.as_nanosecond()).map_err(|_| InvalidReason::TooLarge)
}

/// The fast path: `YYYY-MM-DD HH:MM:SS` optionally followed by `.` and 1 to 9 digits, nothing
/// else. Returns `None` for any other shape (the caller falls back to the general parser).
pub fn parse_fixed_datetime_ns(b: &[u8]) -> Option<i64> {
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[10] != b' ' || b[13] != b':' {
        return None;
    }
    if b[16] != b':' {
        return None;
    }
    let year = digits(&b[0..4])? as i64;
    let month = digits(&b[5..7])? as u32;
    let day = digits(&b[8..10])? as u32;
    let hour = digits(&b[11..13])? as i64;
    let minute = digits(&b[14..16])? as i64;
    let second = digits(&b[17..19])? as i64;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut frac_ns = 0i64;
    if b.len() > 19 {
        let frac = &b[20..];
        if b[19] != b'.' || frac.is_empty() || frac.len() > 9 {
            return None;
        }
        frac_ns = digits(frac)? as i64 * 10i64.pow(9 - frac.len() as u32);
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Some(secs * 1_000_000_000 + frac_ns)
}

fn digits(b: &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + d as u64;
    }
    Some(v)
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = month as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses a numeric time offset in `unit` into nanoseconds. Accepts integers and decimals
/// (`19440110.0`); rejects negatives, NaN and values beyond `i64::MAX` ns.
pub fn parse_offset_ns(text: &[u8], unit: TimeUnit) -> Result<i64, InvalidReason> {
    let scale = unit.ns_per_unit();
    if let Some(v) = parse_u64(text) {
        return v
            .checked_mul(scale)
            .and_then(|ns| i64::try_from(ns).ok())
            .ok_or(InvalidReason::TooLarge);
    }
    let v = parse_f64(text)?;
    offset_from_f64(v, unit)
}

/// Converts a float offset in `unit` into nanoseconds, rounding to the nearest nanosecond.
pub fn offset_from_f64(v: f64, unit: TimeUnit) -> Result<i64, InvalidReason> {
    if !v.is_finite() {
        return Err(InvalidReason::NotFinite);
    }
    if v < 0.0 {
        return Err(InvalidReason::Negative);
    }
    let ns = v * unit.ns_per_unit() as f64;
    if ns >= i64::MAX as f64 {
        return Err(InvalidReason::TooLarge);
    }
    Ok(ns.round() as i64)
}

/// Parses a plain unsigned decimal integer (no sign, no spaces). `None` for anything else.
pub fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 19 {
        return None;
    }
    digits(b)
}

/// Parses a float, classifying failures.
pub fn parse_f64(b: &[u8]) -> Result<f64, InvalidReason> {
    let text = std::str::from_utf8(b).map_err(|_| InvalidReason::BadNumber)?;
    let text = text.trim();
    if text.is_empty() {
        return Err(InvalidReason::MissingValue);
    }
    let v: f64 = text.parse().map_err(|_| InvalidReason::BadNumber)?;
    if !v.is_finite() {
        return Err(InvalidReason::NotFinite);
    }
    Ok(v)
}

/// Parses a size (token count): a non-negative whole number below 2^32. Accepts `472` and
/// `472.0`; rejects `-3`, `NaN`, `1.5`.
pub fn parse_size(b: &[u8]) -> Result<u32, InvalidReason> {
    if let Some(v) = parse_u64(b) {
        return u32::try_from(v).map_err(|_| InvalidReason::TooLarge);
    }
    size_from_f64(parse_f64(b)?)
}

/// Checks a float size: finite, non-negative, whole, below 2^32.
pub fn size_from_f64(v: f64) -> Result<u32, InvalidReason> {
    if !v.is_finite() {
        return Err(InvalidReason::NotFinite);
    }
    if v < 0.0 {
        return Err(InvalidReason::Negative);
    }
    if v.fract() != 0.0 {
        return Err(InvalidReason::Fractional);
    }
    if v > u32::MAX as f64 {
        return Err(InvalidReason::TooLarge);
    }
    Ok(v as u32)
}

/// Checks an integer size: non-negative and below 2^32.
pub fn size_from_i64(v: i64) -> Result<u32, InvalidReason> {
    if v < 0 {
        return Err(InvalidReason::Negative);
    }
    u32::try_from(v).map_err(|_| InvalidReason::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_datetime_matches_jiff_for_azure_timestamps() {
        for text in [
            "2023-11-16 18:15:46.6805900",
            "2024-02-29 00:00:00.0000001",
            "1970-01-01 00:00:00",
            "2000-12-31 23:59:59.999999999",
        ] {
            let fast = parse_fixed_datetime_ns(text.as_bytes()).expect("fast path accepts");
            let dt: jiff::civil::DateTime = text.parse().unwrap();
            let slow = jiff::tz::TimeZone::UTC
                .to_timestamp(dt)
                .unwrap()
                .as_nanosecond();
            assert_eq!(fast as i128, slow, "{text}");
        }
    }

    #[test]
    fn datetime_rejects_impossible_dates_and_garbage() {
        for text in [
            "2023-02-30 00:00:00",
            "2023-13-01 00:00:00",
            "yesterday",
            "",
            "2023-11-16 25:00:00",
        ] {
            assert_eq!(
                parse_datetime_ns(text.as_bytes()),
                Err(InvalidReason::BadTimestamp),
                "{text}"
            );
        }
    }

    #[test]
    fn datetime_accepts_rfc3339_with_offset() {
        let a = parse_datetime_ns(b"2023-11-16T18:15:46Z").unwrap();
        let b = parse_datetime_ns(b"2023-11-16 18:15:46").unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn sizes_reject_negative_nan_and_fractions() {
        assert_eq!(parse_size(b"472"), Ok(472));
        assert_eq!(parse_size(b"472.0"), Ok(472));
        assert_eq!(parse_size(b"-3"), Err(InvalidReason::Negative));
        assert_eq!(parse_size(b"NaN"), Err(InvalidReason::NotFinite));
        assert_eq!(parse_size(b"1.5"), Err(InvalidReason::Fractional));
        assert_eq!(parse_size(b"abc"), Err(InvalidReason::BadNumber));
        assert_eq!(parse_size(b""), Err(InvalidReason::MissingValue));
        assert_eq!(parse_size(b"4294967296"), Err(InvalidReason::TooLarge));
    }

    #[test]
    fn offsets_scale_by_unit() {
        assert_eq!(
            parse_offset_ns(b"19440110.0", TimeUnit::Seconds),
            Ok(19_440_110_000_000_000)
        );
        assert_eq!(parse_offset_ns(b"3", TimeUnit::Millis), Ok(3_000_000));
        assert_eq!(
            parse_offset_ns(b"-1", TimeUnit::Millis),
            Err(InvalidReason::Negative)
        );
    }
}
