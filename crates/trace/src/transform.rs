//! Transforms every command applies to a trace it reads, in this order:
//!
//! 1. `--window START..END`: keep requests arriving in `[first + START, first + END)`, where
//!    `first` is the first arrival; times are durations with units (`10m..20m`, `..30s`, `5m..`).
//!    The kept requests are shifted so that the window's start is time 0.
//! 2. `--sample FRACTION`: keep each request independently with probability FRACTION (seeded).
//! 3. `--rate-scale K`: K times the load; every gap between arrivals is divided by K.
//! 4. `--extend-to DURATION`: lengthen the trace to DURATION from its first arrival by a
//!    seeded block bootstrap of its own gaps and sizes ([`crate::extend`]); a trace already as
//!    long is kept as it is.
//! 5. `--limit N`: keep the first N requests.
//!
//! Each step counts the rows it drops in the [`IngestReport`].

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::quantity::parse_duration_ns;
use crate::table::{Columns, take_indices};
use crate::{IngestReport, Trace, TraceError};

/// The transforms to apply; `Default` applies none.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transforms {
    /// `[start_ns, end_ns)` relative to the first arrival; `None` ends are open.
    pub window: Option<(Option<u64>, Option<u64>)>,
    /// Keep probability in `(0, 1]`.
    pub sample: Option<f64>,
    /// Seed of the sampling generator.
    pub sample_seed: u64,
    /// Load multiplier `K > 0`.
    pub rate_scale: Option<f64>,
    /// Lengthen the trace to this span from its first arrival, nanoseconds.
    pub extend_to_ns: Option<u64>,
    /// Seed of the extension's block draws.
    pub extend_seed: u64,
    /// Maximum number of requests.
    pub limit: Option<usize>,
}

impl Transforms {
    /// Parses `START..END` (either side may be empty) into a window.
    pub fn parse_window(text: &str) -> Result<(Option<u64>, Option<u64>), TraceError> {
        let bad = |reason: String| TraceError::BadOption {
            option: "--window",
            value: text.to_string(),
            reason,
        };
        let (a, b) = text
            .split_once("..")
            .ok_or_else(|| bad("expected START..END, e.g. 10m..20m, ..30s or 5m..".into()))?;
        let side = |s: &str| -> Result<Option<u64>, TraceError> {
            if s.trim().is_empty() {
                Ok(None)
            } else {
                parse_duration_ns(s)
                    .map(Some)
                    .map_err(|e| bad(e.to_string()))
            }
        };
        let (start, end) = (side(a)?, side(b)?);
        if let (Some(s), Some(e)) = (start, end)
            && e <= s
        {
            return Err(bad("END must be after START".into()));
        }
        Ok((start, end))
    }

    /// Checks ranges: sample in (0, 1], rate scale finite and > 0.
    pub fn validate(&self) -> Result<(), TraceError> {
        if let Some(p) = self.sample
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(TraceError::BadOption {
                option: "--sample",
                value: p.to_string(),
                reason: "must be a fraction in (0, 1]".into(),
            });
        }
        if let Some(k) = self.rate_scale
            && !(k.is_finite() && k > 0.0)
        {
            return Err(TraceError::BadOption {
                option: "--rate-scale",
                value: k.to_string(),
                reason: "must be a number > 0 (2 doubles the load)".into(),
            });
        }
        Ok(())
    }

    /// True when no transform is set.
    pub fn is_identity(&self) -> bool {
        self.window.is_none()
            && self.sample.is_none()
            && self.rate_scale.is_none()
            && self.extend_to_ns.is_none()
            && self.limit.is_none()
    }

    /// Applies the transforms in the documented order, counting dropped rows in `report`.
    /// Fails when nothing is left.
    pub fn apply(&self, trace: Trace, report: &mut IngestReport) -> Result<Trace, TraceError> {
        self.validate()?;
        if self.is_identity() {
            return Ok(trace);
        }
        let mut trace = trace;
        if let Some((start, end)) = self.window {
            let first = trace.arrival_ns().first().copied().unwrap_or(0);
            let lo = first.saturating_add(start.unwrap_or(0));
            let hi = end.map_or(u64::MAX, |e| first.saturating_add(e));
            let arrivals = trace.arrival_ns();
            let from = arrivals.partition_point(|&a| a < lo);
            let to = arrivals.partition_point(|&a| a < hi);
            report.dropped_by_window += (trace.len() - (to - from)) as u64;
            let span_ns = trace.span_ns();
            let mut cols = take_rows(trace.columns(), from..to);
            for a in &mut cols.arrival_ns {
                *a -= lo;
            }
            cols.start_unix_ns = cols.start_unix_ns.map(|s| s.saturating_add(lo as i64));
            if cols.arrival_ns.is_empty() {
                return Err(TraceError::Empty {
                    what: "--window".into(),
                    hint: format!(
                        "the window selects no request (the trace spans {:.1} s from its first arrival)",
                        span_ns as f64 / 1e9
                    ),
                });
            }
            trace = Trace::from_columns(cols)?;
        }
        if let Some(p) = self.sample {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(self.sample_seed);
            let keep: Vec<usize> = (0..trace.len())
                .filter(|_| rng.random::<f64>() < p)
                .collect();
            report.dropped_by_sample += (trace.len() - keep.len()) as u64;
            let cols = take_indices(trace.columns(), &keep);
            if cols.arrival_ns.is_empty() {
                return Err(TraceError::Empty {
                    what: "--sample".into(),
                    hint: "the sample kept no request; use a larger fraction".into(),
                });
            }
            trace = Trace::from_columns(cols)?;
        }
        if let Some(k) = self.rate_scale {
            let mut cols = trace.into_columns();
            let first = cols.arrival_ns.first().copied().unwrap_or(0);
            // Arrivals stay signed 64-bit nanoseconds (292 years), as every reader gives them.
            let room_ns = (i64::MAX as u64).saturating_sub(first) as f64;
            for a in &mut cols.arrival_ns {
                let offset_ns = ((*a - first) as f64 / k).round();
                if offset_ns > room_ns {
                    return Err(TraceError::BadOption {
                        option: "--rate-scale",
                        value: k.to_string(),
                        reason: format!(
                            "stretches the trace to {:.0} years, past the 292 years of simulated time capsim represents; use a larger factor, or fewer requests (--window, --limit)",
                            offset_ns / 1e9 / 31_557_600.0
                        ),
                    });
                }
                *a = first + offset_ns as u64;
            }
            trace = Trace::from_columns(cols)?;
        }
        if let Some(target_ns) = self.extend_to_ns {
            let rows = trace.len();
            trace = crate::extend::extend(trace, target_ns, self.extend_seed)?;
            report.added_by_extend += (trace.len() - rows) as u64;
        }
        if let Some(n) = self.limit {
            if n == 0 {
                return Err(TraceError::BadOption {
                    option: "--limit",
                    value: "0".into(),
                    reason: "must be at least 1".into(),
                });
            }
            if trace.len() > n {
                report.dropped_by_limit += (trace.len() - n) as u64;
                trace = Trace::from_columns(take_rows(trace.columns(), 0..n))?;
            }
        }
        report.rows = trace.len() as u64;
        report.failed = trace
            .failed()
            .map_or(0, |f| f.iter().filter(|&&x| x).count() as u64);
        Ok(trace)
    }
}

fn take_rows(c: &Columns, range: std::ops::Range<usize>) -> Columns {
    let idx: Vec<usize> = range.collect();
    take_indices(c, &idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(arrivals: &[u64]) -> Trace {
        Trace::from_columns(Columns {
            arrival_ns: arrivals.to_vec(),
            input_tokens: (0..arrivals.len() as u32).collect(),
            ..Columns::default()
        })
        .unwrap()
    }

    fn report(n: usize) -> IngestReport {
        IngestReport {
            rows_read: n as u64,
            rows: n as u64,
            ..IngestReport::default()
        }
    }

    #[test]
    fn window_keeps_half_open_range_and_shifts_to_zero() {
        let t = trace(&[0, 1_000_000_000, 2_000_000_000, 3_000_000_000]);
        let tf = Transforms {
            window: Some(Transforms::parse_window("1s..3s").unwrap()),
            ..Transforms::default()
        };
        let mut r = report(4);
        let out = tf.apply(t, &mut r).unwrap();
        assert_eq!(out.arrival_ns(), &[0, 1_000_000_000]);
        assert_eq!(out.input_tokens(), &[1, 2]);
        assert_eq!(r.dropped_by_window, 2);
        assert!(r.adds_up());
    }

    #[test]
    fn a_rate_scale_stretching_past_292_years_is_refused() {
        let trace = Trace::from_columns(Columns {
            arrival_ns: vec![0, 10_000_000_000_000],
            input_tokens: vec![1, 1],
            ..Columns::default()
        })
        .unwrap();
        let t = Transforms {
            rate_scale: Some(1e-6),
            ..Transforms::default()
        };
        let err = t
            .apply(trace, &mut IngestReport::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--rate-scale") && err.contains("292 years"),
            "{err}"
        );
    }

    #[test]
    fn rate_scale_divides_gaps() {
        let t = trace(&[100, 300, 700]);
        let tf = Transforms {
            rate_scale: Some(2.0),
            ..Transforms::default()
        };
        let out = tf.apply(t, &mut report(3)).unwrap();
        assert_eq!(out.arrival_ns(), &[100, 200, 400]);
    }

    #[test]
    fn sample_is_deterministic_per_seed_and_close_to_fraction() {
        let arrivals: Vec<u64> = (0..10_000).collect();
        let tf = Transforms {
            sample: Some(0.3),
            sample_seed: 7,
            ..Transforms::default()
        };
        let a = tf.apply(trace(&arrivals), &mut report(10_000)).unwrap();
        let b = tf.apply(trace(&arrivals), &mut report(10_000)).unwrap();
        assert_eq!(a.arrival_ns(), b.arrival_ns());
        let kept = a.len() as f64 / 10_000.0;
        assert!(
            (kept - 0.3).abs() < 0.02,
            "kept fraction {kept}, expected ~0.3"
        );
    }

    #[test]
    fn limit_keeps_first_rows_and_bad_options_are_refused() {
        let mut r = report(3);
        let out = Transforms {
            limit: Some(2),
            ..Transforms::default()
        }
        .apply(trace(&[1, 2, 3]), &mut r)
        .unwrap();
        assert_eq!(out.len(), 2);
        assert_eq!(r.dropped_by_limit, 1);
        assert!(r.adds_up());
        assert!(Transforms::parse_window("5s..1s").is_err());
        assert!(Transforms::parse_window("5s").is_err());
        let bad = Transforms {
            sample: Some(1.5),
            ..Transforms::default()
        };
        assert!(bad.apply(trace(&[1]), &mut report(1)).is_err());
    }
}
