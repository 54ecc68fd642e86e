//! A dynamic batcher's service time fitted to a server's mean compute time per batch size, as
//! Triton's model statistics hold it: `a + b*size`, `c = 0` where the input lengths are not
//! known (the statistics hold none), and `a + b*size + c*size*E[longest] +
//! d*size*E[longest^2]` where the requests' lengths are known ([`fit_padded_line`]: the caller
//! sent them); no residuals (the statistics
//! hold means only) and no replay (they hold no arrivals).
//!
//! The server's protocol stays with the caller: it reads the statistics, fits the line
//! (weighted by each size's batches) and hands over the sizes ([`SizeMean`]), the line and the
//! time each request spends in the server outside its queue and the model.

use std::path::Path;

use capsim_sim::timing::non_negative_least_squares;
use capsim_sim::timing::service::size_level;
use capsim_sim::{Scenario, ScenarioError};

use super::FitError;
use super::dynamic::{AffineFit, with_affine_service};

/// One batch size's measured mean compute time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SizeMean {
    /// Requests per batch (>= 1).
    pub batch_size: u32,
    /// Batches of this size measured (>= 1).
    pub batches: u64,
    /// Their mean compute time (input, inference, output), in nanoseconds.
    pub mean_ns: f64,
}

/// The expected longest input of a batch of `size` requests drawn at random (with replacement)
/// from `sorted` (input lengths, ascending): the mean of the largest of `size` draws, exact for
/// the empirical distribution. 0 without lengths.
pub fn expected_longest(sorted: &[u32], size: u32) -> f64 {
    expected_longest_power(sorted, size, 1)
}

/// The expected square of the longest input of a batch of `size` requests drawn as in
/// [`expected_longest`]: what a cost quadratic in the padded sequence (attention) averages to.
pub fn expected_longest_squared(sorted: &[u32], size: u32) -> f64 {
    expected_longest_power(sorted, size, 2)
}

/// The expected `power`-th power of the longest of `size` draws from `sorted`.
fn expected_longest_power(sorted: &[u32], size: u32, power: i32) -> f64 {
    let n = sorted.len() as f64;
    let mut below = 0.0;
    let mut mean = 0.0;
    for (k, &length) in sorted.iter().enumerate() {
        // P(max <= the k-th smallest) - P(max <= the one before).
        let at_most = ((k + 1) as f64 / n).powi(size as i32);
        mean += f64::from(length).powi(power) * (at_most - below);
        below = at_most;
    }
    mean
}

/// A line fitted to each batch size's mean: `a + b*size + c*size*E[longest] +
/// d*size*E[longest^2]`, in nanoseconds (`c` and `d` 0 where the input lengths are not known).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PaddedLine {
    /// Per batch.
    pub a_ns: f64,
    /// Per request of the batch.
    pub b_ns: f64,
    /// Per padded token (size times the longest input).
    pub c_ns: f64,
    /// Per padded token per token of its padded sequence (size times the longest input
    /// squared): a transformer's attention.
    pub d_ns: f64,
}

impl PaddedLine {
    /// The line's mean time of a batch of `size` drawn from `sorted` (ascending lengths), ns.
    pub fn mean_ns(&self, sorted: &[u32], size: u32) -> f64 {
        let n = f64::from(size);
        self.a_ns
            + self.b_ns * n
            + self.c_ns * n * expected_longest(sorted, size)
            + self.d_ns * n * expected_longest_squared(sorted, size)
    }
}

/// Each size's mean compute time fitted as a [`PaddedLine`] by least squares of the relative
/// residuals, weighted by the batches, with none negative, where `E[longest]` and
/// `E[longest^2]` are [`expected_longest`] and [`expected_longest_squared`] of `lengths` (the
/// inputs the batches were formed from). `d` is rounded to whole nanoseconds (the scenario's
/// unit) and the others refitted with it held, so the line written is the one fitted.
///
/// Relative, because a prediction is judged by each batch's relative error: absolute residuals
/// let a few large slow batches set the line, and the classifier's fit (the shipped model
/// through Triton, 1,753 batches, 22 sizes) then came out `c` alone, 24% under the 1,107
/// batches of one and 9-24% over the sizes 2-4. The `d` term: a transformer encoder's
/// attention grows with the square of the padded sequence, and without it a line true to the
/// small batches was 40% under the classifier's full batches of 32 (the capacity). Of terms the
/// sizes cannot tell apart (one input length: `size`, `size*E[longest]` and
/// `size*E[longest^2]` are proportional), the later are 0. `None` without sizes.
pub fn fit_padded_line(sizes: &[SizeMean], lengths: &[u32]) -> Option<PaddedLine> {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    let rows: Vec<[f64; 4]> = sizes
        .iter()
        .map(|t| {
            let n = f64::from(t.batch_size);
            [
                1.0,
                n,
                n * expected_longest(&sorted, t.batch_size),
                n * expected_longest_squared(&sorted, t.batch_size),
            ]
        })
        .collect();
    let y: Vec<f64> = sizes.iter().map(|t| t.mean_ns).collect();
    let weights: Vec<f64> = sizes
        .iter()
        .map(|t| t.batches as f64 / t.mean_ns.max(1.0).powi(2))
        .collect();
    let beta = non_negative_least_squares(&rows, &y, &weights, 4)?;
    let d_ns = beta[3].round();
    if d_ns == beta[3] {
        return Some(PaddedLine {
            a_ns: beta[0],
            b_ns: beta[1],
            c_ns: beta[2],
            d_ns,
        });
    }
    // The others again, with d held at its whole nanoseconds.
    let rest: Vec<[f64; 3]> = rows.iter().map(|r| [r[0], r[1], r[2]]).collect();
    let y_rest: Vec<f64> = rows.iter().zip(&y).map(|(r, y)| y - d_ns * r[3]).collect();
    let beta = non_negative_least_squares(&rest, &y_rest, &weights, 3)?;
    Some(PaddedLine {
        a_ns: beta[0],
        b_ns: beta[1],
        c_ns: beta[2],
        d_ns,
    })
}

/// The fewest requests (batches times size) a batch size's mean must average over to set its
/// level ([`size_levels`]): a mean over fewer is mostly which inputs happened to meet (the
/// classifier's sizes 5-7 through Triton, 1-5 batches each, sat -35% to +44% off any line).
pub const MIN_LEVEL_REQUESTS: u64 = 100;

/// Each batch size's level over `line`, from size 1 to the largest size measured over at least
/// [`MIN_LEVEL_REQUESTS`] requests: the measured mean over the line's at those sizes, linear in
/// the size between them, the nearest one's outside them (larger sizes take the last, as
/// `service.size_factors` reads it). Rounded to 3 decimals; empty without such a size or where
/// every level rounds to 1 (the line is the measurement).
///
/// Why: a line true to the many small batches can miss the few full ones. Through Triton on
/// the 2-core VM, the classifier's batches of 32 took 139 ms against the fitted line's 86
/// (-38%; per request, 4.3 ms against 1.3 ms at size 1: the cost grows faster than the padded
/// tokens once a batch's activations leave the caches), so the calibrated capacity was 291
/// requests per second where the server served about 231. The levels keep the line's shape
/// within a size (longer inputs cost more) and the server's measured mean across sizes.
pub fn size_levels(sizes: &[SizeMean], line: &PaddedLine, lengths: &[u32]) -> Vec<f64> {
    let mut sorted = lengths.to_vec();
    sorted.sort_unstable();
    let mut anchors: Vec<(u32, f64)> = sizes
        .iter()
        .filter(|t| t.batches * u64::from(t.batch_size) >= MIN_LEVEL_REQUESTS)
        .filter_map(|t| {
            let fitted = line.mean_ns(&sorted, t.batch_size);
            (fitted > 0.0 && t.mean_ns > 0.0).then(|| (t.batch_size, t.mean_ns / fitted))
        })
        .collect();
    anchors.sort_by_key(|&(size, _)| size);
    let Some(&(largest, _)) = anchors.last() else {
        return Vec::new();
    };
    let levels: Vec<f64> = (1..=largest)
        .map(|size| (level_at(&anchors, size) * 1000.0).round() / 1000.0)
        .collect();
    if levels.iter().all(|&l| l == 1.0) {
        return Vec::new();
    }
    levels
}

/// The level at `size` from `anchors` (sizes ascending, levels): linear between the two around
/// it, the nearest one's outside them.
fn level_at(anchors: &[(u32, f64)], size: u32) -> f64 {
    let above = anchors.iter().position(|&(s, _)| s >= size);
    match above {
        None => anchors[anchors.len() - 1].1,
        Some(0) => anchors[0].1,
        Some(i) => {
            let ((s0, l0), (s1, l1)) = (anchors[i - 1], anchors[i]);
            let t = f64::from(size - s0) / f64::from(s1 - s0);
            l0 + t * (l1 - l0)
        }
    }
}

/// Why a fit to batch means failed.
#[derive(Debug, thiserror::Error)]
pub enum BatchMeansError {
    /// The scenario is not one a dynamic-batching fit handles.
    #[error(transparent)]
    Fit(#[from] FitError),
    /// The scenario refused the fitted `postprocess.base`.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

/// What a fit to batch means found.
#[derive(Debug, Clone)]
pub struct BatchMeansFit {
    /// The input scenario with `[service]` the fitted affine one and, when the overhead is
    /// known, `postprocess.base` that overhead.
    pub scenario: Scenario,
    /// The fitted line (`c_ns` 0, no ratios).
    pub affine: AffineFit,
    /// The server's mean time per request outside its queue and the model, whole nanoseconds;
    /// `None` when unknown (the scenario's `postprocess.base` is kept).
    pub overhead_ns: Option<u64>,
    /// The fitted attention term (`service.d`), ns; 0 where not fitted.
    pub d_ns: f64,
    /// Each batch size's level over the line (`service.size_factors`, [`size_levels`]); empty
    /// where the line is the measurement.
    pub size_factors: Vec<f64>,
    /// The sizes fitted.
    pub sizes: Vec<SizeMean>,
    /// The input lengths the batches were formed from, ascending, where known (then `c` was
    /// fitted on each size's expected longest input); empty otherwise.
    pub lengths: Vec<u32>,
}

/// Puts the `line` fitted to `sizes` into `scenario`'s `[service]` (`service.d` only where
/// not 0; `c` and `d` 0 and `lengths` empty where the input lengths are not known; otherwise
/// `lengths` are the inputs the batches were formed from, which the fit's text uses), and the
/// server's time per request outside its queue and the model (`overhead_ns`, nanoseconds) into
/// `postprocess.base`: one constant after the model, since the statistics cannot tell before
/// from after. The scenario must have one pool with a dynamic batcher.
pub fn fit_batch_means(
    scenario: &Scenario,
    sizes: &[SizeMean],
    line: PaddedLine,
    lengths: &[u32],
    overhead_ns: Option<f64>,
) -> Result<BatchMeansFit, BatchMeansError> {
    let affine = AffineFit {
        a_ns: line.a_ns,
        b_ns: line.b_ns,
        c_ns: line.c_ns,
        c_fitted: !lengths.is_empty(),
        ratios: Vec::new(),
    };
    let mut lengths = lengths.to_vec();
    lengths.sort_unstable();
    let mut fitted = with_affine_service(scenario, &affine)?;
    if line.d_ns > 0.0 {
        fitted.set("service.d", &format!("\"{}ns\"", line.d_ns.round() as u64))?;
    }
    let size_factors = size_levels(sizes, &line, &lengths);
    if !size_factors.is_empty() {
        let list: Vec<String> = size_factors.iter().map(|l| format!("{l:.3}")).collect();
        fitted.set("service.size_factors", &format!("[{}]", list.join(", ")))?;
    }
    let overhead_ns = overhead_ns.map(|ns| ns.round() as u64);
    if let Some(ns) = overhead_ns {
        fitted.set("postprocess.base", &format!("\"{ns}ns\""))?;
    }
    Ok(BatchMeansFit {
        scenario: fitted,
        affine,
        d_ns: line.d_ns.round(),
        size_factors,
        overhead_ns,
        sizes: sizes.to_vec(),
        lengths,
    })
}

impl BatchMeansFit {
    /// Batches over every size.
    pub fn batches(&self) -> u64 {
        self.sizes.iter().map(|t| t.batches).sum()
    }

    /// The fit's text: the coefficients, each size measured against fitted, and the overhead.
    /// `model` names the model and `log` the statistics' file.
    pub fn describe(&self, model: &str, log: &Path) -> String {
        let fit = &self.affine;
        let (line, c) = if self.lengths.is_empty() {
            (
                "a + b*size",
                format!(
                    "{:>14} (the statistics know no input lengths: b carries the per-token cost \
                     at the run's lengths)",
                    "0"
                ),
            )
        } else {
            (
                "a + b*size + c*size*E[longest] + d*size*E[longest^2] (E[longest]: the expected \
                 longest of `size` of the inputs sent), none negative, relative,",
                format!(
                    "{:>14.1} ns per padded token\n  service.d {:>14.0} ns per padded token per \
                     token of its sequence (attention)",
                    fit.c_ns, self.d_ns
                ),
            )
        };
        let mut text = format!(
            "fit: Triton's statistics of model {:?} in {}: {} batches of {} sizes; {line} by \
             least squares of each size's mean compute time (input, inference, output), weighted by \
             its batches\n  service.a {:>14.1} ns\n  service.b {:>14.1} ns\n  \
             service.c {c}\n{:<6} {:>9} {:>14} {:>14} {:>8}\n",
            model,
            log.display(),
            self.batches(),
            self.sizes.len(),
            fit.a_ns,
            fit.b_ns,
            "size",
            "batches",
            "measured_ms",
            "fitted_ms",
            "error"
        );
        let line = PaddedLine {
            a_ns: fit.a_ns,
            b_ns: fit.b_ns,
            c_ns: fit.c_ns,
            d_ns: self.d_ns,
        };
        for t in &self.sizes {
            let fitted_ns = line.mean_ns(&self.lengths, t.batch_size)
                * size_level(&self.size_factors, t.batch_size);
            text.push_str(&format!(
                "{:<6} {:>9} {:>14.3} {:>14.3} {:>+7.1}%{}\n",
                t.batch_size,
                t.batches,
                t.mean_ns / 1e6,
                fitted_ns / 1e6,
                (fitted_ns / t.mean_ns - 1.0) * 100.0,
                self.level_text(t.batch_size)
            ));
        }
        if let (Some(first), Some(last)) = (self.size_factors.first(), self.size_factors.last()) {
            text.push_str(&format!(
                "  service.size_factors: each size's level over the line, the measured mean over \
                 the fitted where it averages at least {MIN_LEVEL_REQUESTS} requests (batches \
                 times size), linear in the size between those: {first:.3} at size 1 to \
                 {last:.3} at {} and beyond; fitted_ms is the line times its size's level\n",
                self.size_factors.len()
            ));
        }
        match self.overhead_ns {
            Some(ns) => text.push_str(&format!(
                "  postprocess.base {:>7.1} us  per request inside the server outside the queue and \
                 the model (mean success time less mean queue and compute)\n",
                ns as f64 / 1e3
            )),
            None => text.push_str(
                "  postprocess.base: kept (the statistics hold no per-request success, queue and \
                 compute times)\n",
            ),
        }
        text.push_str(
            "no residuals from these means (the statistics hold means only) and no replay (they hold no \
             arrivals)\n",
        );
        text
    }

    /// The level column of a size's row: `  level L` where levels were fitted, else nothing.
    fn level_text(&self, size: u32) -> String {
        if self.size_factors.is_empty() {
            return String::new();
        }
        format!("   level {:.3}", size_level(&self.size_factors, size))
    }

    /// The comment above the fitted scenario: the command that fitted it (`scenario` and `log`
    /// its files) and what each fitted key comes from.
    pub fn toml_header(&self, scenario: &Path, log: &Path) -> String {
        self.toml_header_of(&format!(
            "capsim fit --scenario {} --log {}",
            scenario.display(),
            log.display()
        ))
    }

    /// The comment above the fitted scenario, `command` the command line that fitted it.
    pub fn toml_header_of(&self, command: &str) -> String {
        format!(
            "# Fitted by `{command}`: [service] a and b{} by least squares of\n\
             # Triton's mean compute time per batch size ({} batches); {}no residuals;\n\
             # [postprocess] base: the server's mean time per request outside queue and model.\n{}",
            if self.lengths.is_empty() {
                ""
            } else {
                ", c and d (on each size's expected longest input sent and its square;\n\
                 # relative residuals)"
            },
            self.batches(),
            if self.lengths.is_empty() {
                "c = 0, "
            } else {
                ""
            },
            if self.size_factors.is_empty() {
                String::new()
            } else {
                format!(
                    "# [service] size_factors: each size's measured mean over the line, where it \
                     averages\n# at least {MIN_LEVEL_REQUESTS} requests; linear in the size between.\n"
                )
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_expected_longest_is_the_mean_of_the_largest_of_size_draws() {
        // Two lengths: the largest of two draws is 1 only when both are 1 (1/4).
        assert!((expected_longest(&[1, 2], 2) - 1.75).abs() < 1e-12);
        assert!((expected_longest(&[1, 2], 1) - 1.5).abs() < 1e-12);
        assert_eq!(expected_longest(&[7, 7, 7], 5), 7.0);
        assert_eq!(expected_longest(&[], 3), 0.0);
        // It grows with the batch towards the longest.
        let sorted: Vec<u32> = (1..=100).collect();
        let at = |n| expected_longest(&sorted, n);
        assert!(at(1) < at(2) && at(2) < at(32) && at(32) < 100.0);
    }

    #[test]
    fn a_padded_line_is_recovered_from_means_built_on_it() {
        let lengths = [10, 20, 40, 80, 160, 320];
        let mut sorted = lengths.to_vec();
        sorted.sort_unstable();
        let (a, c) = (100_000.0, 10.0);
        let sizes: Vec<SizeMean> = [1u32, 2, 4, 8, 16, 32]
            .iter()
            .map(|&n| SizeMean {
                batch_size: n,
                batches: 10,
                mean_ns: a + c * f64::from(n) * expected_longest(&sorted, n),
            })
            .collect();
        let fit = fit_padded_line(&sizes, &lengths).expect("a fit");
        assert!((fit.a_ns - a).abs() < 1e-3 * a, "{fit:?}");
        assert!(fit.b_ns.abs() < 1e-6 * a, "{fit:?}");
        assert!((fit.c_ns - c).abs() < 1e-6 * c, "{fit:?}");
        assert_eq!(fit.d_ns, 0.0, "{fit:?}");
        // One length: size, size*longest and size*longest^2 are proportional, and the
        // per-request term is kept.
        let fit = fit_padded_line(&sizes, &[16; 4]).expect("a fit");
        assert!(
            fit.b_ns > 0.0 && fit.c_ns == 0.0 && fit.d_ns == 0.0,
            "{fit:?}"
        );
    }

    #[test]
    fn a_few_slow_large_batches_do_not_set_the_line_for_the_many_small_ones() {
        // Many batches of 1 to 4 on the line a + c*n*E[longest]; two slow batches of 32, 40%
        // over it (a stall). Relative residuals keep the small sizes within 2%; absolute ones
        // would let the batch of 32 (hundreds of times their time) pull the line through it.
        let lengths: Vec<u32> = (1..=300).collect();
        let (a, c) = (500_000.0, 8_000.0);
        let line = |n: u32| a + c * f64::from(n) * expected_longest(&lengths, n);
        let mut sizes: Vec<SizeMean> = [(1u32, 1000u64), (2, 400), (3, 150), (4, 80)]
            .iter()
            .map(|&(n, batches)| SizeMean {
                batch_size: n,
                batches,
                mean_ns: line(n),
            })
            .collect();
        sizes.push(SizeMean {
            batch_size: 32,
            batches: 2,
            mean_ns: 1.4 * line(32),
        });
        let fit = fit_padded_line(&sizes, &lengths).expect("a fit");
        for n in 1..=4 {
            let fitted = fit.mean_ns(&lengths, n);
            assert!(
                (fitted / line(n) - 1.0).abs() < 0.02,
                "size {n}: {fitted} against {} ({fit:?})",
                line(n)
            );
        }
    }

    #[test]
    fn sizes_measured_over_enough_requests_set_the_levels_linear_between_and_flat_beyond() {
        let lengths = [64];
        let line = PaddedLine {
            a_ns: 1_000_000.0,
            b_ns: 1_000_000.0,
            ..PaddedLine::default()
        };
        let at = |n: u32, batches: u64, level: f64| SizeMean {
            batch_size: n,
            batches,
            mean_ns: level * line.mean_ns(&lengths, n),
        };
        // Size 1 on the line; size 5 over 100 requests at 1.5; size 3 over 99 requests (33
        // batches) too few to count, whatever its mean.
        let sizes = [at(1, 500, 1.0), at(3, 33, 9.0), at(5, 20, 1.5)];
        assert_eq!(
            size_levels(&sizes, &line, &lengths),
            vec![1.0, 1.125, 1.25, 1.375, 1.5]
        );
        // Below the smallest anchor: its level.
        let sizes = [at(2, 100, 0.8), at(4, 100, 1.2)];
        assert_eq!(
            size_levels(&sizes, &line, &lengths),
            vec![0.8, 0.8, 1.0, 1.2]
        );
        // The line is the measurement, or nothing is measured often enough: no levels.
        assert!(size_levels(&[at(1, 500, 1.0004), at(8, 50, 1.0)], &line, &lengths).is_empty());
        assert!(size_levels(&[at(1, 99, 2.0)], &line, &lengths).is_empty());
    }

    #[test]
    fn a_fit_writes_the_levels_into_the_scenario_and_the_leveled_service_takes_them() {
        let scenario = Scenario::from_toml_str(
            "[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"1ms\"\n[service]\nkind = \"constant\"\ntime = \"1ms\"\n",
        )
        .unwrap();
        let line = PaddedLine {
            a_ns: 1_000_000.0,
            b_ns: 500_000.0,
            ..PaddedLine::default()
        };
        let sizes = [
            SizeMean {
                batch_size: 1,
                batches: 400,
                mean_ns: 1_500_000.0,
            },
            SizeMean {
                batch_size: 8,
                batches: 40,
                mean_ns: 2.0 * 5_000_000.0,
            },
        ];
        let fit = fit_batch_means(&scenario, &sizes, line, &[], None).unwrap();
        assert_eq!(fit.size_factors.len(), 8);
        assert_eq!((fit.size_factors[0], fit.size_factors[7]), (1.0, 2.0));
        let built =
            capsim_sim::build::build(&fit.scenario, &mut capsim_sim::Profiles::default()).unwrap();
        let service = built.pools[0]
            .service
            .as_ref()
            .expect("a dynamic pool's service");
        let shape = |size| capsim_sim::BatchShape {
            size,
            max_input_tokens: 16,
            total_input_tokens: 16,
            idle_ns: 0,
        };
        assert_eq!(service.mean_ns(&shape(1)), 1_500_000.0);
        assert_eq!(service.mean_ns(&shape(8)), 10_000_000.0);
        assert!(
            fit.describe("m", Path::new("s.json"))
                .contains("level 2.000")
        );
    }

    #[test]
    fn an_attention_term_is_recovered_beside_the_line() {
        // A transformer's batch: a + c*n*L + d*n*L^2 with d in whole nanoseconds.
        let lengths: Vec<u32> = (8..=512).step_by(8).collect();
        let truth = PaddedLine {
            a_ns: 400_000.0,
            b_ns: 0.0,
            c_ns: 6_000.0,
            d_ns: 12.0,
        };
        let sizes: Vec<SizeMean> = [1u32, 2, 3, 4, 8, 16, 32]
            .iter()
            .map(|&n| SizeMean {
                batch_size: n,
                batches: 50,
                mean_ns: truth.mean_ns(&lengths, n),
            })
            .collect();
        let fit = fit_padded_line(&sizes, &lengths).expect("a fit");
        assert_eq!(fit.d_ns, 12.0, "{fit:?}");
        for n in [1, 4, 32] {
            let error = fit.mean_ns(&lengths, n) / truth.mean_ns(&lengths, n) - 1.0;
            assert!(error.abs() < 1e-6, "size {n}: {error} ({fit:?})");
        }
        // E[longest^2] is the mean of the square, above the square of the mean.
        let (mean, square) = (
            expected_longest(&lengths, 2),
            expected_longest_squared(&lengths, 2),
        );
        assert!(square > mean * mean, "{square} against {mean}^2");
        assert_eq!(expected_longest_squared(&[3, 3], 4), 9.0);
    }
}
