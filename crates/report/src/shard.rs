//! Shards (`I/N`): disjoint slices of a sweep's configurations, for job arrays.
//!
//! Shard `I` of `N` (0-based, so a Kubernetes Indexed Job's `JOB_COMPLETION_INDEX` or a Slurm
//! `--array=0-(N-1)` task id can be passed as is) takes every configuration whose index `k` has
//! `k % N == I`. The shards are disjoint and together cover the grid.

use std::fmt;
use std::str::FromStr;

use crate::error::ParseError;

/// Largest shard count accepted.
pub const MAX_SHARDS: u32 = 1_000_000;

/// One slice of a sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    /// This shard's index, `0..count`.
    pub index: u32,
    /// How many shards the sweep is cut into, at least 1.
    pub count: u32,
}

impl Shard {
    /// The whole sweep as one shard.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Whether configuration number `configuration_index` belongs to this shard.
    pub fn contains(self, configuration_index: usize) -> bool {
        configuration_index % self.count as usize == self.index as usize
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Shard, ParseError> {
        let error = |reason: String| ParseError::new("shard", text, reason);
        let (index, count) = text
            .split_once('/')
            .ok_or_else(|| error("expected I/N, e.g. `0/4` for the first of four".into()))?;
        let index: u32 = index
            .trim()
            .parse()
            .map_err(|_| error(format!("index `{index}` is not a whole number")))?;
        let count: u32 = count
            .trim()
            .parse()
            .map_err(|_| error(format!("count `{count}` is not a whole number")))?;
        if count == 0 || count > MAX_SHARDS {
            return Err(error(format!("count must be 1 to {MAX_SHARDS}")));
        }
        if index >= count {
            return Err(error(format!(
                "index must be below the count (shards are numbered 0 to {})",
                count - 1
            )));
        }
        Ok(Shard { index, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_disjoint_and_cover_every_configuration() {
        let count = 4;
        let shards: Vec<Shard> = (0..count)
            .map(|i| format!("{i}/{count}").parse().unwrap())
            .collect();
        for k in 0..103 {
            let owners = shards.iter().filter(|s| s.contains(k)).count();
            assert_eq!(owners, 1, "configuration {k} is in {owners} shards");
        }
    }

    #[test]
    fn bad_shards_quote_the_bad_value() {
        let cases = [
            ("3", "I/N"),
            ("4/4", "0 to 3"),
            ("a/4", "`a`"),
            ("1/0", "count"),
            ("-1/4", "`-1`"),
        ];
        for (text, mention) in cases {
            let err = text.parse::<Shard>().unwrap_err().to_string();
            assert!(err.contains(text), "error `{err}` should quote `{text}`");
            assert!(
                err.contains(mention),
                "error `{err}` should mention `{mention}`"
            );
        }
    }
}
