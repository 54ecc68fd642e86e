//! The share of batch ends a server's batcher sleeps through (`batcher.missed_release`), fitted
//! to a calibration's open loops by simulating them.
//!
//! Triton 2.51's dynamic batcher sometimes does not wake when a batch ends with requests
//! waiting: they start only with the next arrival (or its 500 ms poll). Its trace of the
//! classifier on a 2-core VM showed it at 8% of such batch ends (13% where the oldest waiting
//! request's delay had run out, 5% where not, 0.5% of batches that found the instance idle),
//! at every load from 200 to 450 requests a second. A client sees it as a few requests late by
//! the gap to the next arrival, so the open loops of a calibration hold it: each loop is
//! simulated with the calibrated scenario, the requests measured later than that simulation
//! by more than a threshold are counted, and the share is the one at which the simulation,
//! paired seed by seed with itself at share 0, makes as many late requests. Only requests the
//! simulation at share 0 serves within the threshold count: one it queues longer is late or
//! early by the queue's own error (a compute a few per cent off, amplified near capacity), not
//! by a batch end slept through.
//!
//! Each loop is cut into [`STRETCHES`] stretches of as many compared requests. A stretch with
//! more late requests than the simulation makes there at [`MAX_SHARE`] is a slow spell of the
//! machine (a backlog the model has no cause for), not batch ends slept through, and is left
//! out on both sides. On 2026-12-07 one calibration's 20% loop had 71 of 1,737 requests late
//! where the others had 5-22, and the share fitted to it, 0.45, put that server's p99 at twice
//! its runs'. (The median stretch was tried first: the demo trace's bursts crowd the late
//! requests of a normal loop into one or two stretches, 8+0+0+3 or 18+3+0+5, and the median
//! threw the rest away.)

use std::collections::HashMap;
use std::path::PathBuf;

use capsim_sim::{
    BuiltScenario, Outcome, RequestRecord, RunOptions, Scenario, simulate_with_requests,
};
use capsim_trace::Trace;

use crate::EndpointError;

/// The shares tried, 0 to [`MAX_SHARE`] in steps of [`STEP`].
const STEP: f64 = 0.02;
/// The largest share fitted; a server late more often is reported at it.
pub const MAX_SHARE: f64 = 0.5;
/// Seeds each share is simulated with (their late counts averaged).
const SEEDS: u64 = 4;
/// Stretches of a loop's compared requests, in trace order, each of which a slow spell may
/// leave out (see the module's documentation).
pub const STRETCHES: usize = 4;

/// One open loop of a calibration: the trace it sent and what the client measured.
#[derive(Debug, Clone)]
pub struct OpenLoopRecords {
    /// The paced trace sent (arrivals and sizes).
    pub trace: Trace,
    /// The client's record of each request, by trace row.
    pub records: Vec<RequestRecord>,
}

/// What [`fit_missed_release`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct MissedReleaseFit {
    /// The fitted share, 0 to [`MAX_SHARE`].
    pub share: f64,
    /// Requests the client measured more than `threshold_ns` later than the simulation at
    /// share 0, over every loop's stretches but its slow spells (the fit's target).
    pub late_measured: u64,
    /// The simulation's late requests (the seeds' mean, over the same stretches) at the tried
    /// shares around the fitted one, `(share, late)` below and above it: the same where the fit
    /// is 0 or capped.
    pub bracket: [(f64, f64); 2],
    /// The lateness counted, ns.
    pub threshold_ns: u64,
    /// Each loop's late requests, in order.
    pub by_loop: Vec<LoopLate>,
    /// Completed requests compared: those the simulation at share 0 serves within
    /// `threshold_ns`.
    pub requests: u64,
}

/// One loop's late requests measured, stretch by stretch.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopLate {
    /// Late requests in each stretch.
    pub late: [u64; STRETCHES],
    /// Whether each stretch was a slow spell, left out: more late requests than the simulation
    /// makes there at [`MAX_SHARE`].
    pub spell: [bool; STRETCHES],
    /// Requests compared.
    pub requests: u64,
}

impl LoopLate {
    /// `8+0+(71)+3 of 1855`: each stretch's late requests, a spell's in parentheses.
    fn describe(&self) -> String {
        let late: Vec<String> = self
            .late
            .iter()
            .zip(self.spell)
            .map(|(n, spell)| {
                if spell {
                    format!("({n})")
                } else {
                    n.to_string()
                }
            })
            .collect();
        format!("{} of {}", late.join("+"), self.requests)
    }
}

impl MissedReleaseFit {
    /// One line for calibrate's report and the fitted file's header.
    pub fn describe(&self) -> String {
        let capped = if self.share >= MAX_SHARE {
            " (the largest fitted)"
        } else {
            ""
        };
        format!(
            "batcher.missed_release {:.3}{capped}: the share of batch ends with requests waiting \
             at which the simulated open loops make as many requests late by over {:.1} ms as \
             the server's ({} of {} measured; simulated {:.1} at {:.2} and {:.1} at {:.2}; by \
             loop and stretch of {STRETCHES}, a slow spell left out in parentheses: {})",
            self.share,
            self.threshold_ns as f64 * 1e-6,
            self.late_measured,
            self.requests,
            self.bracket[0].1,
            self.bracket[0].0,
            self.bracket[1].1,
            self.bracket[1].0,
            self.by_loop
                .iter()
                .map(LoopLate::describe)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// Fits `batcher.missed_release` of `scenario` (its pool 0, with batching) to `loops`: the
/// share, in steps of 0.02 and linear between them, at which the simulated loops make as many
/// requests late by over `threshold_ns` as were measured, slow spells left out. `None` without
/// batching, or without a completed request to compare.
pub fn fit_missed_release(
    scenario: &Scenario,
    loops: &[&OpenLoopRecords],
    threshold_ns: u64,
) -> Result<Option<MissedReleaseFit>, EndpointError> {
    if scenario.pools()[0].batcher.max_batch_size <= 1 {
        return Ok(None);
    }
    // The scenario at `share`, built once for every loop and seed it simulates.
    let at = |share: f64| -> Result<BuiltScenario, EndpointError> {
        let mut s = scenario.clone();
        s.set("batcher.missed_release", &format!("{share}"))
            .map_err(sim_error)?;
        capsim_sim::build::build(&s, &mut capsim_sim::Profiles::default()).map_err(sim_error)
    };
    let (comparison, mut by_loop) = Comparison::measure(&at(0.0)?, loops, threshold_ns)?;
    let requests: u64 = by_loop.iter().map(|l| l.requests).sum();
    if requests == 0 {
        return Ok(None);
    }
    // The simulation at the largest share: the spells' ceiling, and the search's last step.
    let ceiling = comparison.late_by_stretch(&at(MAX_SHARE)?)?;
    mark_spells(&mut by_loop, &ceiling);
    let late_measured = by_loop
        .iter()
        .map(|l| outside_spells(l.late.map(|n| n as f64), l.spell))
        .sum::<f64>() as u64;
    let (share, bracket) = bracketed_share(late_measured as f64, |share| {
        let late = if share >= MAX_SHARE - STEP / 2.0 {
            ceiling.clone()
        } else {
            comparison.late_by_stretch(&at(share)?)?
        };
        Ok(late
            .into_iter()
            .zip(&by_loop)
            .map(|(late, l)| outside_spells(late, l.spell))
            .sum())
    })?;
    Ok(Some(MissedReleaseFit {
        share,
        late_measured,
        bracket,
        threshold_ns,
        requests,
        by_loop,
    }))
}

/// `batcher.missed_release` pooled over calibrations of one deployment (`capsim calibrate
/// --endpoint --pool EARLIER.toml`): the mean of this calibration's fitted share and the shares
/// the earlier calibrations' files hold (each one's own fit, or, for a file written with
/// `--pool`, its pooled share, so that a chain pooling every earlier file weighs the first
/// calibrations more).
///
/// The share is the batcher's, a property of the server's software on its machine, yet one
/// calibration's fit moves with the minutes it ran in. Over five passes of the classifier on the
/// 2-core VM (2026-12-07, 88 runs, each calibrated on a fresh server right before it) the fitted
/// shares ran from 0 to 0.38, and a run's p99 error followed its own calibration's share
/// (correlation 0.84 at the demo trace's 30%, 0.77 at the Poisson trace's) while the run's
/// measured p99 did not (-0.14 to -0.31 within a pass): the spread is the fit's, not the
/// server's. Re-simulated with the mean share of the calibrations before it in its pass (its own
/// included), 37 of 45 runs at 30% met every target, against 29 with its own share alone; the
/// 60% runs were unchanged (10 of 45 either way).
#[derive(Debug, Clone, PartialEq)]
pub struct PooledShare {
    /// The pooled share: the mean of `own` and `earlier`.
    pub share: f64,
    /// This calibration's fitted share.
    pub own: f64,
    /// The earlier calibrations' shares, in the order given.
    pub earlier: Vec<f64>,
}

impl PooledShare {
    /// Pools `own`, this calibration's share, with `earlier` ([`earlier_shares`]).
    pub fn new(own: f64, earlier: Vec<f64>) -> PooledShare {
        let share = (own + earlier.iter().sum::<f64>()) / (1 + earlier.len()) as f64;
        PooledShare {
            share,
            own,
            earlier,
        }
    }

    /// One line for calibrate's report and the fitted file's header.
    pub fn describe(&self) -> String {
        let earlier: Vec<String> = self.earlier.iter().map(|s| format!("{s:.3}")).collect();
        let whose = if earlier.len() == 1 {
            "calibration's"
        } else {
            "calibrations'"
        };
        format!(
            "batcher.missed_release {:.3}: pooled (--pool), the mean of this calibration's {:.3} \
             and {} earlier {whose} ({}); one calibration's share moves with the minutes its \
             open loop ran in, the batcher's does not",
            self.share,
            self.own,
            earlier.len(),
            earlier.join(", ")
        )
    }
}

/// The share each of `earlier` (a calibrated scenario and the file it came from) holds, to
/// pool with a calibration of `scenario` ([`pool_missed_release`]), checked before calibrating.
/// An error names a file whose batcher is not `scenario`'s (another deployment) or that holds
/// no fitted share.
pub fn earlier_shares(
    scenario: &Scenario,
    earlier: &[(PathBuf, Scenario)],
) -> Result<Vec<f64>, EndpointError> {
    let batcher = |s: &Scenario| {
        let pool = &s.pools()[0];
        let b = &pool.batcher;
        (
            b.max_batch_size,
            b.max_queue_delay,
            b.preferred_batch_size.clone(),
            pool.execution.instance_count,
        )
    };
    earlier
        .iter()
        .map(|(path, calibrated)| {
            let refuse = |message: &str| EndpointError::Pool {
                path: path.clone(),
                message: message.to_string(),
            };
            if batcher(calibrated) != batcher(scenario) {
                return Err(refuse(
                    "its batcher (max_batch_size, max_queue_delay, preferred_batch_size, \
                     instance_count) is not this scenario's: pool only calibrations of the same \
                     deployment",
                ));
            }
            share_in(calibrated).ok_or_else(|| {
                refuse(
                    "it holds no batcher.missed_release: pool only scenarios `capsim calibrate \
                     --endpoint` fitted it in (with batching)",
                )
            })
        })
        .collect()
}

/// Pools the share `scenario` holds (this calibration's fit) with `earlier`
/// ([`earlier_shares`]) into a [`PooledShare`] and sets it; its line, or `Ok(None)` (the
/// scenario untouched) where nothing is pooled: no earlier share, or none fitted here.
pub fn pool_missed_release(
    scenario: &mut Scenario,
    earlier: &[f64],
) -> Result<Option<String>, EndpointError> {
    let (Some(own), false) = (share_in(scenario), earlier.is_empty()) else {
        return Ok(None);
    };
    let pooled = PooledShare::new(own, earlier.to_vec());
    set_share(scenario, pooled.share)?;
    Ok(Some(pooled.describe()))
}

/// Sets `batcher.missed_release` of the calibrated `scenario` to `share` (four decimals).
pub(crate) fn set_share(scenario: &mut Scenario, share: f64) -> Result<(), EndpointError> {
    scenario
        .set("batcher.missed_release", &format!("{share:.4}"))
        .map_err(|e| EndpointError::Protocol {
            url: "the calibrated scenario".to_string(),
            message: e.to_string(),
        })
}

/// The `batcher.missed_release` a scenario sets (a number), if it sets one.
fn share_in(scenario: &Scenario) -> Option<f64> {
    let value = scenario.get("batcher.missed_release")?;
    value
        .as_float()
        .or_else(|| value.as_integer().map(|n| n as f64))
}

/// The open loops as the fit compares them: each one's simulated latencies at share 0 by seed
/// (by trace row), and its stretches.
struct Comparison<'a> {
    loops: &'a [&'a OpenLoopRecords],
    baselines: Vec<(Vec<HashMap<u32, u64>>, Stretches)>,
    threshold_ns: u64,
}

impl<'a> Comparison<'a> {
    /// Simulates `loops` at share 0 (`base`) and counts, stretch by stretch, the completed
    /// requests measured over `threshold_ns` later than that simulation, among those it serves
    /// within `threshold_ns` (no spell marked yet).
    fn measure(
        base: &BuiltScenario,
        loops: &'a [&'a OpenLoopRecords],
        threshold_ns: u64,
    ) -> Result<(Comparison<'a>, Vec<LoopLate>), EndpointError> {
        let mut baselines = Vec::with_capacity(loops.len());
        let mut by_loop = Vec::with_capacity(loops.len());
        for l in loops {
            let seeds = (0..SEEDS)
                .map(|seed| latencies(base, &l.trace, seed))
                .collect::<Result<Vec<_>, _>>()?;
            // The completed requests compared, by row, and whether each was late.
            let compared: Vec<(u32, bool)> = l
                .records
                .iter()
                .filter(|r| r.outcome == Outcome::Completed)
                .filter_map(|r| {
                    let sim = *seeds[0].get(&r.request)?;
                    (sim <= threshold_ns)
                        .then(|| (r.request, r.latency_ns() > sim.saturating_add(threshold_ns)))
                })
                .collect();
            let stretches = Stretches::of(compared.iter().map(|&(row, _)| row));
            by_loop.push(LoopLate {
                late: stretches.count(compared.iter().filter(|c| c.1).map(|&(row, _)| row)),
                spell: [false; STRETCHES],
                requests: compared.len() as u64,
            });
            baselines.push((seeds, stretches));
        }
        let comparison = Comparison {
            loops,
            baselines,
            threshold_ns,
        };
        Ok((comparison, by_loop))
    }

    /// Each loop's requests `built` makes late by over the threshold against share 0, paired
    /// seed by seed, by stretch (the seeds' mean).
    fn late_by_stretch(
        &self,
        built: &BuiltScenario,
    ) -> Result<Vec<[f64; STRETCHES]>, EndpointError> {
        let threshold_ns = self.threshold_ns;
        let mut by_loop = Vec::with_capacity(self.loops.len());
        for (l, (seeds, stretches)) in self.loops.iter().zip(&self.baselines) {
            let mut late = [0.0; STRETCHES];
            for (seed, base) in seeds.iter().enumerate() {
                let sim = latencies(built, &l.trace, seed as u64)?;
                let rows = sim.iter().filter_map(|(&row, &ns)| {
                    base.get(&row)
                        .is_some_and(|&b| b <= threshold_ns && ns > b.saturating_add(threshold_ns))
                        .then_some(row)
                });
                for (sum, n) in late.iter_mut().zip(stretches.count(rows)) {
                    *sum += n as f64 / SEEDS as f64;
                }
            }
            by_loop.push(late);
        }
        Ok(by_loop)
    }
}

/// Marks as a slow spell each stretch with more late requests than `ceiling` (the simulation at
/// [`MAX_SHARE`]), unless half the stretches or more are: a server that sleeps through more
/// often than the largest share.
fn mark_spells(by_loop: &mut [LoopLate], ceiling: &[[f64; STRETCHES]]) {
    for (measured, most) in by_loop.iter_mut().zip(ceiling) {
        measured.spell = std::array::from_fn(|k| measured.late[k] as f64 > most[k]);
    }
    let spells: usize = by_loop
        .iter()
        .map(|l| l.spell.iter().filter(|&&s| s).count())
        .sum();
    if 2 * spells >= STRETCHES * by_loop.len() {
        by_loop
            .iter_mut()
            .for_each(|l| l.spell = [false; STRETCHES]);
    }
}

/// The late requests of the stretches that are not slow spells.
fn outside_spells(late: [f64; STRETCHES], spell: [bool; STRETCHES]) -> f64 {
    late.iter()
        .zip(spell)
        .filter(|&(_, spell)| !spell)
        .map(|(n, _)| n)
        .sum()
}

/// The share, in steps of [`STEP`] up to [`MAX_SHARE`] and linear between them, at which
/// `late_at(share)` reaches `target`, and the two tried shares around it with their counts: 0
/// where `target` is 0, [`MAX_SHARE`] where no share reaches it.
fn bracketed_share(
    target: f64,
    mut late_at: impl FnMut(f64) -> Result<f64, EndpointError>,
) -> Result<(f64, [(f64, f64); 2]), EndpointError> {
    let (mut share, mut late_simulated) = (0.0, 0.0);
    let mut bracket = [(0.0, 0.0); 2];
    if target > 0.0 {
        let steps = (MAX_SHARE / STEP).round() as u32;
        for k in 1..=steps {
            let next = f64::from(k) * STEP;
            let late = late_at(next)?;
            if late >= target {
                // Linear between the two shares around the measured count (the one below made
                // fewer late requests than measured, so fewer than this one).
                bracket = [(share, late_simulated), (next, late)];
                share += (target - late_simulated) / (late - late_simulated) * STEP;
                break;
            }
            (share, late_simulated) = (next, late);
            bracket = [(next, late); 2];
        }
    }
    Ok((share, bracket))
}

/// A loop's compared requests cut into [`STRETCHES`] runs of consecutive trace rows, as many
/// requests each (within one).
#[derive(Debug, Clone)]
struct Stretches {
    /// The first row of each stretch after the first.
    starts: [u32; STRETCHES - 1],
}

impl Stretches {
    /// The stretches of `rows` (any order).
    fn of(rows: impl Iterator<Item = u32>) -> Stretches {
        let mut rows: Vec<u32> = rows.collect();
        rows.sort_unstable();
        let mut starts = [u32::MAX; STRETCHES - 1];
        if !rows.is_empty() {
            for (k, start) in starts.iter_mut().enumerate() {
                *start = rows[(k + 1) * rows.len() / STRETCHES];
            }
        }
        Stretches { starts }
    }

    /// How many of `rows` fall in each stretch.
    fn count(&self, rows: impl Iterator<Item = u32>) -> [u64; STRETCHES] {
        let mut counts = [0; STRETCHES];
        for row in rows {
            counts[self.starts.partition_point(|&start| start <= row)] += 1;
        }
        counts
    }
}

/// The completed requests' simulated latencies of `trace` under `built`, by trace row.
fn latencies(
    built: &BuiltScenario,
    trace: &Trace,
    seed: u64,
) -> Result<HashMap<u32, u64>, EndpointError> {
    let options = RunOptions {
        seed,
        ..RunOptions::default()
    };
    let (_, log) = simulate_with_requests(built, trace, &options).map_err(sim_error)?;
    Ok(log
        .records()
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .map(|r| (r.request, r.latency_ns()))
        .collect())
}

fn sim_error(e: impl std::fmt::Display) -> EndpointError {
    EndpointError::Protocol {
        url: "the calibrated scenario".to_string(),
        message: format!("simulating the calibration's open loops: {e}"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use capsim_trace::Columns;
    use rand::{RngExt, SeedableRng};

    const MS: u64 = 1_000_000;

    /// One model instance batching up to 8 with a 1 ms delay, 2 ms a batch.
    pub(crate) fn scenario() -> Scenario {
        Scenario::from_toml_str(
            "[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"1ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"2ms\"\n",
        )
        .unwrap()
    }

    /// `n` Poisson arrivals at `rate_rps` (seeded).
    fn poisson(n: usize, rate_rps: f64, seed: u64) -> Trace {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut t = 0u64;
        let arrival_ns = (0..n)
            .map(|_| {
                t += (-(1.0 - rng.random::<f64>()).ln() / rate_rps * 1e9) as u64;
                t
            })
            .collect();
        Trace::from_columns(Columns {
            arrival_ns,
            input_tokens: vec![10; n],
            ..Columns::default()
        })
        .unwrap()
    }

    /// Loops at 150 and 300 req/s "measured" as the scenario at `share` simulates them.
    pub(crate) fn loops_measured_at(share: f64) -> Vec<OpenLoopRecords> {
        let mut measured = scenario();
        measured
            .set("batcher.missed_release", &share.to_string())
            .unwrap();
        [(150.0, 1), (300.0, 2)]
            .into_iter()
            .map(|(rate, seed)| {
                let trace = poisson(3_000, rate, seed);
                let built =
                    capsim_sim::build::build(&measured, &mut capsim_sim::Profiles::default())
                        .unwrap();
                let options = RunOptions {
                    seed: 1_000 + seed,
                    ..RunOptions::default()
                };
                let (_, log) = simulate_with_requests(&built, &trace, &options).unwrap();
                OpenLoopRecords {
                    trace,
                    records: log.records().to_vec(),
                }
            })
            .collect()
    }

    #[test]
    fn the_fit_recovers_the_share_a_server_sleeps_through() {
        for share in [0.1, 0.3] {
            let loops = loops_measured_at(share);
            let fit = fit_missed_release(&scenario(), &loops.iter().collect::<Vec<_>>(), 4 * MS)
                .unwrap()
                .unwrap();
            assert!(
                (fit.share - share).abs() <= 0.05,
                "share {share}: fitted {fit:?}"
            );
            assert!(fit.late_measured > 0 && fit.requests > 5_000, "{fit:?}");
        }
    }

    #[test]
    fn a_slow_spell_in_one_stretch_does_not_pass_for_batch_ends_slept_through() {
        let mut loops = loops_measured_at(0.1);
        // 300 consecutive requests of the 150 req/s loop's third stretch, 20 ms late each (two
        // seconds of a machine stalled): ten times the loop's own late requests.
        let spell = &mut loops[0].records[1_700..2_000];
        for r in spell.iter_mut() {
            r.response_ns += 20 * MS;
        }
        let fit = fit_missed_release(&scenario(), &loops.iter().collect::<Vec<_>>(), 4 * MS)
            .unwrap()
            .unwrap();
        let spell = &fit.by_loop[0];
        assert!(
            spell.late[2] >= 250 && spell.spell == [false, false, true, false],
            "the spell, the third stretch, left out alone: {fit:?}"
        );
        assert!(fit.by_loop[1].spell.iter().all(|&s| !s), "{fit:?}");
        assert!((fit.share - 0.1).abs() <= 0.05, "{fit:?}");
    }

    #[test]
    fn a_server_later_than_the_largest_share_everywhere_fits_the_largest() {
        let loops = loops_measured_at(0.9);
        let fit = fit_missed_release(&scenario(), &loops.iter().collect::<Vec<_>>(), 4 * MS)
            .unwrap()
            .unwrap();
        assert_eq!(fit.share, MAX_SHARE, "{fit:?}");
        assert!(
            fit.by_loop.iter().all(|l| l.spell.iter().all(|&s| !s)),
            "no stretch left out: {fit:?}"
        );
        assert!(
            fit.describe().contains("(the largest fitted)"),
            "{}",
            fit.describe()
        );
    }

    #[test]
    fn a_server_that_never_sleeps_through_fits_zero_and_no_batching_fits_nothing() {
        let loops = loops_measured_at(0.0);
        let loops: Vec<&OpenLoopRecords> = loops.iter().collect();
        let fit = fit_missed_release(&scenario(), &loops, 4 * MS)
            .unwrap()
            .unwrap();
        assert_eq!((fit.share, fit.late_measured), (0.0, 0), "{fit:?}");
        let mut single = scenario();
        single.set("batcher.max_batch_size", "1").unwrap();
        single.set("batcher.max_queue_delay", "\"0ms\"").unwrap();
        assert_eq!(fit_missed_release(&single, &loops, 4 * MS).unwrap(), None);
    }

    /// `scenario()` calibrated with `share`, and the file it came from.
    fn calibrated(share: &str, file: &str) -> (PathBuf, Scenario) {
        let mut s = scenario();
        s.set("batcher.missed_release", share).unwrap();
        (PathBuf::from(file), s)
    }

    #[test]
    fn pooling_sets_the_mean_of_this_calibrations_share_and_the_earlier_ones() {
        let mut own = calibrated("0.38", "own.toml").1;
        let earlier = [calibrated("0.14", "a.toml"), calibrated("0", "b.toml")];
        let shares = earlier_shares(&scenario(), &earlier).unwrap();
        assert_eq!(shares, [0.14, 0.0]);
        let line = pool_missed_release(&mut own, &shares).unwrap().unwrap();
        let pooled = share_in(&own).unwrap();
        assert!((pooled - 0.52 / 3.0).abs() < 1e-4, "{pooled}");
        assert!(
            line.contains("batcher.missed_release 0.173: pooled (--pool), the mean of this calibration's 0.380 and 2 earlier calibrations' (0.140, 0.000)"),
            "{line}"
        );
        let one = PooledShare::new(0.2, vec![0.14]);
        assert_eq!(one.share, (0.2 + 0.14) / 2.0);
        assert!(one.describe().contains("1 earlier calibration's (0.140)"));
    }

    #[test]
    fn pooling_leaves_the_scenario_alone_without_earlier_calibrations_or_a_fitted_share() {
        let mut own = calibrated("0.38", "own.toml").1;
        assert_eq!(pool_missed_release(&mut own, &[]).unwrap(), None);
        assert_eq!(share_in(&own), Some(0.38));
        // No share fitted here (no batching, no open loop): nothing to pool.
        let mut unfitted = scenario();
        assert_eq!(pool_missed_release(&mut unfitted, &[0.14]).unwrap(), None);
        assert_eq!(share_in(&unfitted), None);
    }

    #[test]
    fn pooling_refuses_another_deployments_calibration_or_one_without_a_share_naming_the_file() {
        let mut other = scenario();
        other.set("batcher.max_batch_size", "16").unwrap();
        other.set("batcher.missed_release", "0.1").unwrap();
        let err = earlier_shares(&scenario(), &[(PathBuf::from("other.toml"), other)])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("cannot pool the calibration other.toml")
                && err.contains("same deployment"),
            "{err}"
        );
        let err = earlier_shares(&scenario(), &[(PathBuf::from("bare.toml"), scenario())])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("bare.toml") && err.contains("holds no batcher.missed_release"),
            "{err}"
        );
    }
}
