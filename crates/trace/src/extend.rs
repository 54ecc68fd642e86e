//! `--extend-to DURATION`: a trace lengthened to DURATION out of its own arrivals and sizes, for
//! a log too short for the load it should drive (docs/trace-format.md).
//!
//! The rule is a circular moving-block bootstrap (Künsch, 1989; Politis and Romano, 1992) of
//! the gaps between arrivals, each gap carrying the request that ends it:
//!
//! 1. The trace is kept as it is, first to last arrival.
//! 2. Its `m = rows - 1` gaps are numbered in arrival order; gap `j` is followed by row `j + 1`,
//!    whose sizes (and every other column) travel with it.
//! 3. Until an arrival would fall past `first + DURATION`, a block of `b = ceil(sqrt(m))`
//!    consecutive gaps starting at a uniformly drawn gap is appended (wrapping from the last gap
//!    to the first); each appended request arrives its gap after the one before.
//!
//! Blocks keep the trace's short-range structure (bursts, the sizes within a burst, a quiet
//! spell) while the draws spread its rows over the new length without the period a plain tiling
//! would give it; the mean rate, the gap distribution and the joint distribution of sizes stay
//! those of the trace. The generator is seeded, so the same trace, duration and seed give the
//! same rows.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::table::take_indices;
use crate::{Trace, TraceError};

/// Rows an extended trace may hold.
pub const MAX_EXTENDED_ROWS: u64 = 100_000_000;

/// `trace` lengthened so that its arrivals span up to `target_ns` from the first one, by the
/// module's block bootstrap seeded with `seed`; a trace already that long is returned as is.
/// Fails on a trace with fewer than two requests or no span, and when the result would hold
/// more than [`MAX_EXTENDED_ROWS`] rows.
pub fn extend(trace: Trace, target_ns: u64, seed: u64) -> Result<Trace, TraceError> {
    let bad = |reason: String| TraceError::BadOption {
        option: "--extend-to",
        value: format!("{:.3}s", target_ns as f64 * 1e-9),
        reason,
    };
    let arrivals = trace.arrival_ns();
    let span_ns = trace.span_ns();
    if span_ns >= target_ns {
        return Ok(trace);
    }
    if arrivals.len() < 2 || span_ns == 0 {
        return Err(bad(
            "needs a trace of at least two requests over a nonzero span to resample".into(),
        ));
    }
    let expected_rows = arrivals.len() as f64 * target_ns as f64 / span_ns as f64;
    if expected_rows > MAX_EXTENDED_ROWS as f64 {
        return Err(bad(format!(
            "would hold about {expected_rows:.0} requests, more than the {MAX_EXTENDED_ROWS} allowed; extend to a shorter duration"
        )));
    }
    let first = arrivals[0];
    let end = first.saturating_add(target_ns);
    let gaps: Vec<u64> = arrivals.windows(2).map(|w| w[1] - w[0]).collect();
    let block = (gaps.len() as f64).sqrt().ceil() as usize;
    let mut rows: Vec<usize> = (0..arrivals.len()).collect();
    let mut times: Vec<u64> = arrivals.to_vec();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut now = arrivals[arrivals.len() - 1];
    'blocks: loop {
        let start = rng.random_range(0..gaps.len());
        for j in (start..start + block).map(|j| j % gaps.len()) {
            now += gaps[j];
            if now > end {
                break 'blocks;
            }
            rows.push(j + 1);
            times.push(now);
        }
    }
    let mut cols = take_indices(trace.columns(), &rows);
    cols.arrival_ns = times;
    Trace::from_columns(cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::Columns;

    const S: u64 = 1_000_000_000;

    fn trace(arrivals: &[u64]) -> Trace {
        Trace::from_columns(Columns {
            arrival_ns: arrivals.to_vec(),
            input_tokens: (0..arrivals.len() as u32).map(|i| 100 + i).collect(),
            output_tokens: Some((0..arrivals.len() as u32).map(|i| 1000 + i).collect()),
            ..Columns::default()
        })
        .unwrap()
    }

    /// A bursty trace: ten requests 10 ms apart, then a 5 s pause, four times.
    fn bursty() -> Trace {
        let arrivals: Vec<u64> = (0..40u64)
            .map(|i| (i / 10) * 5 * S + (i % 10) * S / 100)
            .collect();
        trace(&arrivals)
    }

    #[test]
    fn extension_reaches_the_duration_keeps_the_original_and_is_deterministic() {
        let original = bursty();
        let a = extend(original.clone(), 600 * S, 7).unwrap();
        let b = extend(original.clone(), 600 * S, 7).unwrap();
        let c = extend(original.clone(), 600 * S, 8).unwrap();
        assert_eq!(a.arrival_ns(), b.arrival_ns(), "same seed, same rows");
        assert_eq!(a.input_tokens(), b.input_tokens(), "same seed, same rows");
        assert_ne!(a.arrival_ns(), c.arrival_ns(), "another seed, other draws");
        assert_eq!(&a.arrival_ns()[..40], original.arrival_ns());
        let last = *a.arrival_ns().last().unwrap();
        assert!(
            last <= 600 * S && last > 590 * S,
            "last arrival at {} s",
            last as f64 / 1e9
        );
        assert!(a.arrival_ns().windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn every_gap_and_its_sizes_come_from_the_trace_together() {
        let original = bursty();
        let extended = extend(original.clone(), 300 * S, 1).unwrap();
        let gap_of_row: Vec<u64> = original
            .arrival_ns()
            .windows(2)
            .map(|w| w[1] - w[0])
            .collect();
        let arr = extended.arrival_ns();
        for i in 40..extended.len() {
            let row = (extended.input_tokens()[i] - 100) as usize;
            assert!(row >= 1, "row 0 ends no gap");
            assert_eq!(arr[i] - arr[i - 1], gap_of_row[row - 1], "row {i}'s gap");
            assert_eq!(
                extended.output_tokens().unwrap()[i],
                1000 + row as u32,
                "row {i}'s output travels with its input"
            );
        }
    }

    #[test]
    fn extension_keeps_the_rate_and_the_bursts() {
        let original = bursty();
        let extended = extend(original.clone(), 3600 * S, 3).unwrap();
        let before = crate::Summary::of(&original);
        let after = crate::Summary::of(&extended);
        let (r0, r1) = (before.mean_rate_rps.unwrap(), after.mean_rate_rps.unwrap());
        assert!((r1 / r0 - 1.0).abs() < 0.1, "rate {r0} became {r1}");
        let (cv0, cv1) = (
            before.interarrival_cv.unwrap(),
            after.interarrival_cv.unwrap(),
        );
        assert!(
            (cv1 / cv0 - 1.0).abs() < 0.1,
            "gaps kept: inter-arrival CV {cv0} became {cv1}"
        );
    }

    #[test]
    fn a_trace_already_long_enough_is_unchanged_and_one_row_is_refused() {
        let original = bursty();
        let kept = extend(original.clone(), 10 * S, 0).unwrap();
        assert_eq!(kept.arrival_ns(), original.arrival_ns());
        assert_eq!(kept.input_tokens(), original.input_tokens());
        let err = extend(trace(&[0]), 60 * S, 0).unwrap_err();
        assert!(err.to_string().contains("--extend-to"), "{err}");
    }
}
