//! Human-readable quantities in scenario files, flags and trace transforms: durations (`5ms`,
//! `2.5s`), rates (`120rps`), bandwidths (`10Gbps`) and sizes (`4KiB`). Each is parsed once, at
//! the edge, into an integer or `f64` with its unit in the name; an error quotes the bad value
//! and says what the accepted forms are.

use std::fmt;

use serde::Deserialize;

/// Why a quantity string did not parse. The message quotes the value and lists accepted units.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {value:?} is not valid: {hint}")]
pub struct QuantityError {
    /// What was being parsed ("duration", "rate", ...).
    pub kind: &'static str,
    /// The text as given.
    pub value: String,
    /// What would be accepted.
    pub hint: &'static str,
}

impl QuantityError {
    fn new(kind: &'static str, text: &str, hint: &'static str) -> QuantityError {
        QuantityError {
            kind,
            value: text.to_string(),
            hint,
        }
    }
}

const DURATION_HINT: &str =
    "write a number followed by a unit: ns, us, ms, s, m, h or d (for example \"5ms\" or \"2.5s\")";
const RATE_HINT: &str = "write a number followed by rps, rpm or rph (for example \"120rps\")";
const BANDWIDTH_HINT: &str = "write a number followed by bps, kbps, Mbps, Gbps, B/s, kB/s, MB/s or GB/s (for example \"10Gbps\")";
const SIZE_HINT: &str = "write a number of bytes, optionally with B, kB, MB, GB, KiB, MiB or GiB (for example \"4KiB\")";

fn split_number(text: &str) -> Option<(f64, &str)> {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|&(_, c)| {
            !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')
        })
        .map_or(text.len(), |(i, _)| i);
    // An exponent marker directly followed by a unit letter ("5e" + "ms") is not an exponent.
    let (mut num, mut unit) = text.split_at(end);
    while num.ends_with(['e', 'E']) {
        num = &num[..num.len() - 1];
        unit = &text[num.len()..];
    }
    let value: f64 = num.parse().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    Some((value, unit.trim()))
}

/// Parses a duration such as `5ms`, `2.5s`, `250us`, `100ns`, `1m`, `3d` or `0` into nanoseconds;
/// any other bare number is refused, the unit must be explicit.
/// Fractions below a nanosecond round to the nearest nanosecond.
pub fn parse_duration_ns(text: &str) -> Result<u64, QuantityError> {
    let ns = parse_duration_ns_f64(text)?.round();
    if ns > u64::MAX as f64 / 4.0 {
        return Err(QuantityError::new(
            "duration",
            text,
            "it is longer than 53375 days (146 years), the longest duration capsim takes",
        ));
    }
    Ok(ns as u64)
}

/// Parses a duration like [`parse_duration_ns`] but keeps fractions of a nanosecond
/// (`"0.25ns"` is 0.25), for coefficients that only add up to nanoseconds over many tokens.
pub fn parse_duration_ns_f64(text: &str) -> Result<f64, QuantityError> {
    let (value, unit) = split_number(text).ok_or_else(|| duration_error(text))?;
    let scale_ns = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86_400e9,
        "" if value == 0.0 => 1.0,
        _ => return Err(duration_error(text)),
    };
    Ok(value * scale_ns)
}

fn duration_error(text: &str) -> QuantityError {
    QuantityError::new("duration", text, DURATION_HINT)
}

/// Parses a request rate such as `120rps`, `3000rpm` or `1.5rph` into requests per second.
pub fn parse_rate_rps(text: &str) -> Result<f64, QuantityError> {
    let err = || QuantityError::new("rate", text, RATE_HINT);
    let (value, unit) = split_number(text).ok_or_else(err)?;
    let scale = match unit {
        "rps" | "/s" => 1.0,
        "krps" => 1e3,
        "rpm" | "/min" => 1.0 / 60.0,
        "rph" | "/h" => 1.0 / 3600.0,
        _ => return Err(err()),
    };
    Ok(value * scale)
}

/// Parses a bandwidth such as `10Gbps` or `100MB/s` into bytes per second.
pub fn parse_bandwidth_bytes_per_s(text: &str) -> Result<f64, QuantityError> {
    let err = || QuantityError::new("bandwidth", text, BANDWIDTH_HINT);
    let (value, unit) = split_number(text).ok_or_else(err)?;
    let scale = match unit {
        "bps" => 1.0 / 8.0,
        "kbps" | "Kbps" => 1e3 / 8.0,
        "Mbps" => 1e6 / 8.0,
        "Gbps" => 1e9 / 8.0,
        "B/s" => 1.0,
        "kB/s" | "KB/s" => 1e3,
        "MB/s" => 1e6,
        "GB/s" => 1e9,
        _ => return Err(err()),
    };
    let bytes_per_s = value * scale;
    if bytes_per_s <= 0.0 {
        return Err(err());
    }
    Ok(bytes_per_s)
}

/// Parses a size such as `512`, `4KiB` or `1.5MB` into bytes.
pub fn parse_size_bytes(text: &str) -> Result<u64, QuantityError> {
    let err = || QuantityError::new("size", text, SIZE_HINT);
    let (value, unit) = split_number(text).ok_or_else(err)?;
    let scale = match unit {
        "" | "B" => 1.0,
        "kB" | "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(err()),
    };
    Ok((value * scale).round() as u64)
}

/// Formats nanoseconds as the shortest exact human duration (`5ms`, `2500us`), the inverse of
/// [`parse_duration_ns`].
pub fn format_duration_ns(ns: u64) -> String {
    struct D(u64);
    impl fmt::Display for D {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            let ns = self.0;
            for (unit, scale) in [
                ("h", 3_600_000_000_000u64),
                ("s", 1_000_000_000),
                ("ms", 1_000_000),
                ("us", 1_000),
            ] {
                if ns != 0 && ns.is_multiple_of(scale) {
                    return write!(f, "{}{unit}", ns / scale);
                }
            }
            write!(f, "{ns}ns")
        }
    }
    D(ns).to_string()
}

/// Formats seconds for people: `12.345s` under a minute, `4m05.3s` under an hour, `2h03m07.5s`
/// beyond. Rounding comes first and carries: 59.9996 s is `1m00.0s`, 299.96 s is `5m00.0s`,
/// 3599.96 s is `1h00m00.0s`, never `4m60.0s`. Negative and non-finite seconds print as `0.000s`.
pub fn format_seconds_human(seconds: f64) -> String {
    let s = if seconds.is_finite() {
        seconds.max(0.0)
    } else {
        0.0
    };
    let ms = (s * 1e3).round() as u64;
    if ms < 60_000 {
        return format!("{}.{:03}s", ms / 1_000, ms % 1_000);
    }
    let tenths = (s * 10.0).round() as u64;
    let (hours, rest) = (tenths / 36_000, tenths % 36_000);
    let (minutes, rest) = (rest / 600, rest % 600);
    let seconds = format!("{:02}.{}s", rest / 10, rest % 10);
    if hours > 0 {
        format!("{hours}h{minutes:02}m{seconds}")
    } else {
        format!("{minutes}m{seconds}")
    }
}

/// A duration read from a scenario file or flag, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DurationNs(pub u64);

impl<'de> Deserialize<'de> for DurationNs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = quantity_text(d, "duration", "\"5ms\"")?;
        parse_duration_ns(&text)
            .map(DurationNs)
            .map_err(de_err::<D>)
    }
}

/// A request rate read from a scenario file or flag, in requests per second.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RateRps(pub f64);

impl<'de> Deserialize<'de> for RateRps {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = quantity_text(d, "rate", "\"120rps\"")?;
        parse_rate_rps(&text).map(RateRps).map_err(de_err::<D>)
    }
}

/// A bandwidth read from a scenario file or flag, in bytes per second.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BandwidthBytesPerS(pub f64);

impl<'de> Deserialize<'de> for BandwidthBytesPerS {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = quantity_text(d, "bandwidth", "\"10Gbps\"")?;
        parse_bandwidth_bytes_per_s(&text)
            .map(BandwidthBytesPerS)
            .map_err(de_err::<D>)
    }
}

/// A size read from a scenario file or flag, in bytes (a bare integer is bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SizeBytes(pub u64);

impl<'de> Deserialize<'de> for SizeBytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(SizeBytes(n)),
            Raw::Text(t) => parse_size_bytes(&t).map(SizeBytes).map_err(de_err::<D>),
        }
    }
}

fn de_err<'de, D: serde::Deserializer<'de>>(e: QuantityError) -> D::Error {
    <D::Error as serde::de::Error>::custom(e)
}

/// Reads a quantity that must be a string with a unit; a bare number gets an error saying so.
fn quantity_text<'de, D: serde::Deserializer<'de>>(
    d: D,
    kind: &'static str,
    example: &'static str,
) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Int(i64),
        Float(f64),
    }
    let bare = match Raw::deserialize(d)? {
        Raw::Text(t) => return Ok(t),
        Raw::Int(0) => return Ok("0".to_string()),
        Raw::Int(n) => n.to_string(),
        Raw::Float(x) => x.to_string(),
    };
    Err(<D::Error as serde::de::Error>::custom(format!(
        "{kind} {bare} has no unit: write it as a string with a unit, for example {example}"
    )))
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_seconds_carry_a_rounded_minute_and_hour() {
        for (seconds, want) in [
            (12.3456, "12.346s"),
            (59.9996, "1m00.0s"),
            (59.96, "59.960s"),
            (65.3, "1m05.3s"),
            (299.96, "5m00.0s"),
            (299.94, "4m59.9s"),
            (3599.96, "1h00m00.0s"),
            (7387.5, "2h03m07.5s"),
            (-1.0, "0.000s"),
            (f64::NAN, "0.000s"),
        ] {
            assert_eq!(format_seconds_human(seconds), want, "{seconds} s");
        }
    }

    use super::*;

    #[test]
    fn durations_parse_with_every_unit() {
        assert_eq!(parse_duration_ns("5ms"), Ok(5_000_000));
        assert_eq!(parse_duration_ns("2.5s"), Ok(2_500_000_000));
        assert_eq!(parse_duration_ns("250us"), Ok(250_000));
        assert_eq!(parse_duration_ns("100ns"), Ok(100));
        assert_eq!(parse_duration_ns("1m"), Ok(60_000_000_000));
        assert_eq!(parse_duration_ns("10min"), Ok(600_000_000_000));
        assert_eq!(parse_duration_ns("1h"), Ok(3_600_000_000_000));
        assert_eq!(parse_duration_ns("3d"), Ok(259_200_000_000_000));
        assert_eq!(parse_duration_ns("0"), Ok(0));
        assert_eq!(parse_duration_ns(" 1.5 ms "), Ok(1_500_000));
        assert_eq!(parse_duration_ns("1e3ns"), Ok(1_000));
    }

    #[test]
    fn bad_durations_are_rejected_quoting_the_value() {
        for bad in ["5", "5 parsecs", "ms", "-1ms", "", "NaNms", "infs"] {
            let err = parse_duration_ns(bad).unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn rates_bandwidths_and_sizes_parse() {
        assert_eq!(parse_rate_rps("120rps"), Ok(120.0));
        assert_eq!(parse_rate_rps("60rpm"), Ok(1.0));
        assert!(parse_rate_rps("120").is_err());
        assert_eq!(parse_bandwidth_bytes_per_s("8Gbps"), Ok(1e9));
        assert_eq!(parse_bandwidth_bytes_per_s("100MB/s"), Ok(1e8));
        assert!(parse_bandwidth_bytes_per_s("0Gbps").is_err());
        assert_eq!(parse_size_bytes("4KiB"), Ok(4096));
        assert_eq!(parse_size_bytes("512"), Ok(512));
        assert!(parse_size_bytes("4 lbs").is_err());
    }

    #[test]
    fn formatted_durations_parse_back_to_the_same_value() {
        for ns in [
            0,
            1,
            999,
            1_000,
            1_500_000,
            5_000_000,
            2_500_000_000,
            7_200_000_000_000,
        ] {
            assert_eq!(
                parse_duration_ns(&format_duration_ns(ns)),
                Ok(ns),
                "{}",
                format_duration_ns(ns)
            );
        }
    }
}
