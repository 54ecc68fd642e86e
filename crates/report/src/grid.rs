//! Grid axes over scenario keys (`batcher.max_batch_size=1,4,8`, `instances=1..8`,
//! `batcher.max_queue_delay=0ms,2ms`) and the configurations they span.
//!
//! Values stay text: the scenario parses each one with the type and unit of its key, so any key
//! of the scenario can be an axis.

use std::fmt;
use std::str::FromStr;

use crate::error::ParseError;

/// Largest number of values one axis may expand to.
pub const MAX_AXIS_VALUES: usize = 10_000;

/// Largest number of configurations a grid may span.
pub const MAX_CONFIGURATIONS: usize = 1_000_000;

/// One axis: a scenario key and the values it takes, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridAxis {
    /// A dotted scenario key, e.g. `batcher.max_batch_size`.
    pub key: String,
    /// The values, as text, never empty, without duplicates.
    pub values: Vec<String>,
}

impl FromStr for GridAxis {
    type Err = ParseError;

    /// Parses `key=v1,v2,...` or `key=A..B` (every whole number from A to B).
    fn from_str(text: &str) -> Result<GridAxis, ParseError> {
        let error = |reason: String| ParseError::new("grid axis", text, reason);
        let (key, values) = text.split_once('=').ok_or_else(|| {
            error("expected `key=v1,v2,...` or `key=A..B`, e.g. `instances=1..8`".into())
        })?;
        let key = key.trim();
        let key_ok = !key.is_empty()
            && key.split('.').all(|part| {
                !part.is_empty()
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            });
        if !key_ok {
            return Err(error(format!(
                "key `{key}` must be a dotted scenario key such as `batcher.max_batch_size`"
            )));
        }
        let values = values.trim();
        let expanded = match values.split_once("..") {
            Some((start, end)) => integer_range(start, end).map_err(&error)?,
            None => values
                .split(',')
                .map(|value| value.trim().to_string())
                .collect(),
        };
        if expanded.iter().any(String::is_empty) {
            return Err(error(format!("axis `{key}` has an empty value")));
        }
        for (i, value) in expanded.iter().enumerate() {
            if expanded[..i].contains(value) {
                return Err(error(format!("value `{value}` appears twice")));
            }
        }
        Ok(GridAxis {
            key: key.to_string(),
            values: expanded,
        })
    }
}

fn integer_range(start: &str, end: &str) -> Result<Vec<String>, String> {
    let parse = |text: &str| {
        text.trim()
            .parse::<i64>()
            .map_err(|_| format!("range end `{}` is not a whole number", text.trim()))
    };
    let (start, end) = (parse(start)?, parse(end)?);
    if end < start {
        return Err(format!("range {start}..{end} is empty; write it low..high"));
    }
    if (end - start) as u64 >= MAX_AXIS_VALUES as u64 {
        return Err(format!(
            "range {start}..{end} has more than {MAX_AXIS_VALUES} values"
        ));
    }
    Ok((start..=end).map(|v| v.to_string()).collect())
}

/// One point of the grid: a value for every axis, in axis order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Configuration {
    /// `(key, value)` pairs, one per axis.
    pub settings: Vec<(String, String)>,
}

impl Configuration {
    /// The value this configuration gives `key`, if that key is an axis.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

impl fmt::Display for Configuration {
    /// `key=value key=value`, or `baseline` for the grid with no axes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.settings.is_empty() {
            return f.write_str("baseline");
        }
        for (i, (key, value)) in self.settings.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{key}={value}")?;
        }
        Ok(())
    }
}

/// The Cartesian product of grid axes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Grid {
    axes: Vec<GridAxis>,
}

impl Grid {
    /// A grid over `axes`. The same key twice, or a product over [`MAX_CONFIGURATIONS`], is an
    /// error.
    pub fn new(axes: Vec<GridAxis>) -> Result<Grid, ParseError> {
        for (i, axis) in axes.iter().enumerate() {
            if axes[..i].iter().any(|other| other.key == axis.key) {
                return Err(ParseError::new(
                    "grid axis",
                    &axis.key,
                    "the key is given by two --grid flags; put all its values in one",
                ));
            }
        }
        let count = axes
            .iter()
            .try_fold(1usize, |n, axis| n.checked_mul(axis.values.len()));
        match count {
            Some(count) if count <= MAX_CONFIGURATIONS => Ok(Grid { axes }),
            _ => Err(ParseError::new(
                "grid",
                &axes
                    .iter()
                    .map(|a| a.key.as_str())
                    .collect::<Vec<_>>()
                    .join(" x "),
                format!("spans more than {MAX_CONFIGURATIONS} configurations"),
            )),
        }
    }

    /// The axes, in the order given.
    pub fn axes(&self) -> &[GridAxis] {
        &self.axes
    }

    /// Every configuration, the first axis varying slowest. A grid with no axes has one
    /// configuration with no settings (the scenario as written).
    pub fn configurations(&self) -> Vec<Configuration> {
        let mut configurations = vec![Configuration {
            settings: Vec::new(),
        }];
        for axis in &self.axes {
            configurations = configurations
                .into_iter()
                .flat_map(|configuration| {
                    axis.values.iter().map(move |value| {
                        let mut settings = configuration.settings.clone();
                        settings.push((axis.key.clone(), value.clone()));
                        Configuration { settings }
                    })
                })
                .collect();
        }
        configurations
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_list_keeps_text_and_order() {
        let axis: GridAxis = "batcher.max_queue_delay=0ms, 2ms,5ms".parse().unwrap();
        assert_eq!(axis.key, "batcher.max_queue_delay");
        assert_eq!(axis.values, vec!["0ms", "2ms", "5ms"]);
    }

    #[test]
    fn integer_range_includes_both_ends() {
        let axis: GridAxis = "instances=1..8".parse().unwrap();
        assert_eq!(
            axis.values,
            (1..=8).map(|v| v.to_string()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn configurations_are_the_cartesian_product_first_axis_slowest() {
        let grid = Grid::new(vec![
            "batcher.max_batch_size=1,4".parse().unwrap(),
            "instances=1..3".parse().unwrap(),
        ])
        .unwrap();
        let configurations = grid.configurations();
        assert_eq!(configurations.len(), 6);
        assert_eq!(
            configurations[1].to_string(),
            "batcher.max_batch_size=1 instances=2"
        );
        assert_eq!(configurations[3].get("batcher.max_batch_size"), Some("4"));
        assert_eq!(configurations[3].get("instances"), Some("1"));
    }

    #[test]
    fn empty_grid_has_one_baseline_configuration() {
        let configurations = Grid::default().configurations();
        assert_eq!(configurations.len(), 1);
        assert_eq!(configurations[0].to_string(), "baseline");
    }

    #[test]
    fn repeated_key_is_refused() {
        let err = Grid::new(vec![
            "instances=1,2".parse().unwrap(),
            "instances=3".parse().unwrap(),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("instances"), "{err}");
    }

    #[test]
    fn bad_axes_quote_the_bad_value() {
        let cases = [
            ("instances", "key=v1"),
            ("=1,2", "key ``"),
            ("batcher..size=1", "batcher..size"),
            ("instances=8..1", "8..1"),
            ("instances=1..x", "`x`"),
            ("instances=1,,2", "empty value"),
            ("instances=1,1", "twice"),
            ("instances=0..100000", "more than"),
        ];
        for (text, mention) in cases {
            let err = text.parse::<GridAxis>().unwrap_err().to_string();
            assert!(err.contains(text), "error `{err}` should quote `{text}`");
            assert!(
                err.contains(mention),
                "error `{err}` should mention `{mention}`"
            );
        }
    }
}
