//! Human durations (`800ms`, `2.5s`, `150us`) as integer nanoseconds.

/// Parses a duration with a unit suffix (`ns`, `us`, `µs`, `ms`, `s`) into nanoseconds.
///
/// Fractions are allowed (`2.5ms`); the result is rounded to the nearest nanosecond. A bare
/// number, a negative value or an unknown unit is an error that quotes the text.
pub fn parse_duration_ns(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| {
            format!("duration `{text}` has no unit; write e.g. `800ms`, `2.5s`, `150us`")
        })?;
    let (number, unit) = text.split_at(split);
    let scale_ns = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        other => {
            return Err(format!(
                "duration `{text}` has unknown unit `{other}`; use ns, us, ms or s"
            ));
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("duration `{text}` does not start with a number"))?;
    let ns = value * scale_ns;
    if !ns.is_finite() || ns > u64::MAX as f64 {
        return Err(format!("duration `{text}` is out of range"));
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_scale_to_nanoseconds() {
        assert_eq!(parse_duration_ns("800ms"), Ok(800_000_000));
        assert_eq!(parse_duration_ns("2.5s"), Ok(2_500_000_000));
        assert_eq!(parse_duration_ns("150us"), Ok(150_000));
        assert_eq!(parse_duration_ns("7ns"), Ok(7));
        assert_eq!(parse_duration_ns("0ms"), Ok(0));
    }

    #[test]
    fn bad_durations_quote_the_text() {
        for bad in ["800", "ms", "-5ms", "5 parsecs", "1.2.3ms"] {
            let err = parse_duration_ns(bad).unwrap_err();
            assert!(
                err.contains(bad.trim()),
                "error `{err}` should quote `{bad}`"
            );
        }
    }
}
