//! Load axes of a sweep: `0.25..4x:16` (trace rate multipliers), `10..2000rps:log12` (target
//! mean arrival rates) and `1..256:log9` (closed-loop concurrency).
//!
//! An axis is `START..END:N` (N evenly spaced points, both ends included) or `START..END:logN`
//! (N points evenly spaced in log), with the unit of its kind on END (and optionally on START).
//! A single value (`2x`, `500rps`, `32`) is an axis of one point.

use std::fmt;

use crate::error::ParseError;

/// What a load value means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadKind {
    /// A multiplier on the trace's arrival rate (`x`).
    RateScale,
    /// A target mean arrival rate in requests per second (`rps`).
    TargetRate,
    /// The number of closed-loop clients (no unit); values are whole numbers.
    Concurrency,
}

impl LoadKind {
    /// The unit suffix written after values of this kind.
    pub fn unit(self) -> &'static str {
        match self {
            LoadKind::RateScale => "x",
            LoadKind::TargetRate => "rps",
            LoadKind::Concurrency => "",
        }
    }

    /// The column name used for load values of this kind in outputs.
    pub fn column(self) -> &'static str {
        match self {
            LoadKind::RateScale => "rate_scale",
            LoadKind::TargetRate => "target_rate_rps",
            LoadKind::Concurrency => "concurrency",
        }
    }
}

impl fmt::Display for LoadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LoadKind::RateScale => "rate multiplier",
            LoadKind::TargetRate => "target rate",
            LoadKind::Concurrency => "concurrency",
        })
    }
}

/// How points are spaced between the ends of an axis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spacing {
    /// Evenly spaced.
    Linear,
    /// Evenly spaced in log (a geometric sequence).
    Log,
}

/// A load axis: the loads a sweep runs each configuration at, in increasing order.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadAxis {
    /// What the values mean.
    pub kind: LoadKind,
    /// The values, strictly increasing, all > 0.
    pub values: Vec<f64>,
}

/// Largest number of points an axis may ask for.
pub const MAX_AXIS_POINTS: usize = 10_000;

impl LoadAxis {
    /// Parses `text` as an axis of `kind`. A unit that does not match `kind` is an error (so
    /// `--rate 2x` is refused rather than read as 2 rps).
    pub fn parse(text: &str, kind: LoadKind) -> Result<LoadAxis, ParseError> {
        let error = |reason: String| ParseError::new("load axis", text, reason);
        let example = match kind {
            LoadKind::RateScale => "`0.25..4x:16`",
            LoadKind::TargetRate => "`10..2000rps:log12`",
            LoadKind::Concurrency => "`1..256:log9`",
        };
        let trimmed = text.trim();
        let (range, count) = match trimmed.rsplit_once(':') {
            Some((range, count)) => (range, Some(count)),
            None => (trimmed, None),
        };
        let (start, end) = match range.split_once("..") {
            Some((start, end)) => (start, Some(end)),
            None => (range, None),
        };
        let start = parse_value(start, kind, true).map_err(&error)?;
        let Some(end) = end else {
            if count.is_some() {
                return Err(error(format!(
                    "a point count needs a range; write e.g. {example}"
                )));
            }
            return Self::from_values(kind, vec![start]).map_err(error);
        };
        let end = parse_value(end, kind, false).map_err(&error)?;
        if end <= start {
            return Err(error(format!(
                "the end must be larger than the start; write e.g. {example}"
            )));
        }
        let count = count.ok_or_else(|| {
            error(format!(
                "a range needs a point count after `:`; write e.g. {example}"
            ))
        })?;
        let (spacing, points) = match count.strip_prefix("log") {
            Some(points) => (Spacing::Log, points),
            None => (Spacing::Linear, count),
        };
        let points: usize = points
            .trim()
            .parse()
            .map_err(|_| error(format!("point count `{count}` is not a whole number")))?;
        if !(2..=MAX_AXIS_POINTS).contains(&points) {
            return Err(error(format!(
                "point count must be between 2 and {MAX_AXIS_POINTS}, got {points}"
            )));
        }
        Self::from_values(kind, spaced(start, end, points, spacing)).map_err(error)
    }

    fn from_values(kind: LoadKind, mut values: Vec<f64>) -> Result<LoadAxis, String> {
        if kind == LoadKind::Concurrency {
            for value in &mut values {
                *value = value.round();
            }
            values.dedup();
            if values.iter().any(|&v| v < 1.0) {
                return Err("concurrency must be at least 1".into());
            }
        }
        if values.iter().any(|&v| !(v > 0.0 && v.is_finite())) {
            return Err("load values must be positive and finite".into());
        }
        Ok(LoadAxis { kind, values })
    }
}

fn parse_value(text: &str, kind: LoadKind, unit_optional: bool) -> Result<f64, String> {
    let text = text.trim();
    let number = match kind {
        LoadKind::Concurrency => text,
        _ => match text.strip_suffix(kind.unit()) {
            Some(number) => number,
            None if unit_optional => text,
            None => {
                return Err(format!(
                    "`{text}` needs the unit `{}` of a {kind} axis",
                    kind.unit()
                ));
            }
        },
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number for a {kind} axis"))?;
    if !(value > 0.0 && value.is_finite()) {
        return Err(format!("`{text}` must be a positive number"));
    }
    Ok(value)
}

fn spaced(start: f64, end: f64, points: usize, spacing: Spacing) -> Vec<f64> {
    let last = (points - 1) as f64;
    (0..points)
        .map(|i| {
            let t = i as f64 / last;
            match spacing {
                Spacing::Linear => start + (end - start) * t,
                Spacing::Log => (start.ln() + (end.ln() - start.ln()) * t).exp(),
            }
        })
        .enumerate()
        // Pin the ends exactly so `1..256:log9` ends at 256, not 255.99999.
        .map(|(i, v)| match i {
            0 => start,
            i if i + 1 == points => end,
            _ => v,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| (x - y).abs() < 1e-9 * y.abs().max(1.0))
    }

    #[test]
    fn linear_multiplier_axis_has_evenly_spaced_points() {
        let axis = LoadAxis::parse("0.25..4x:16", LoadKind::RateScale).unwrap();
        assert_eq!(axis.values.len(), 16);
        assert_eq!(axis.values[0], 0.25);
        assert_eq!(axis.values[15], 4.0);
        assert!((axis.values[1] - 0.5).abs() < 1e-12, "{:?}", axis.values);
    }

    #[test]
    fn log_rate_axis_is_geometric() {
        let axis = LoadAxis::parse("10..2000rps:log12", LoadKind::TargetRate).unwrap();
        assert_eq!(axis.values.len(), 12);
        let ratio = axis.values[1] / axis.values[0];
        for pair in axis.values.windows(2) {
            assert!((pair[1] / pair[0] - ratio).abs() < 1e-9);
        }
        assert_eq!(axis.values[11], 2000.0);
    }

    #[test]
    fn log_concurrency_axis_gives_powers_of_two() {
        let axis = LoadAxis::parse("1..256:log9", LoadKind::Concurrency).unwrap();
        assert!(close(
            &axis.values,
            &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]
        ));
    }

    #[test]
    fn concurrency_points_are_rounded_and_deduplicated() {
        let axis = LoadAxis::parse("1..3:log5", LoadKind::Concurrency).unwrap();
        assert_eq!(axis.values, vec![1.0, 2.0, 3.0]);
    }

    #[test]
    fn single_value_is_a_one_point_axis() {
        let axis = LoadAxis::parse("500rps", LoadKind::TargetRate).unwrap();
        assert_eq!(axis.values, vec![500.0]);
    }

    #[test]
    fn bad_axes_quote_the_bad_value() {
        let cases = [
            ("0.25..4:16", LoadKind::RateScale, "`4`"),
            ("10..2000x:log12", LoadKind::TargetRate, "rps"),
            ("4..1x:5", LoadKind::RateScale, "larger"),
            ("1..4x", LoadKind::RateScale, "point count"),
            ("1..4x:lots", LoadKind::RateScale, "lots"),
            ("1..4x:1", LoadKind::RateScale, "between 2"),
            ("-1..4x:3", LoadKind::RateScale, "-1"),
            ("abc", LoadKind::Concurrency, "abc"),
        ];
        for (text, kind, quoted) in cases {
            let err = LoadAxis::parse(text, kind).unwrap_err().to_string();
            assert!(err.contains(text), "error `{err}` should quote `{text}`");
            assert!(
                err.contains(quoted),
                "error `{err}` should mention `{quoted}`"
            );
        }
    }
}
