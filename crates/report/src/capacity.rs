//! Capacity search: the largest load a configuration sustains, by bracketing then bisection.
//!
//! The search is generic over an evaluator, `FnMut(load) -> Result<Outcome, E>`, that runs the
//! configuration at a load and judges the run. A load is *sustainable* when the SLO holds, the
//! fraction of requests rejected or timed out is at most a stated bound, and the queue does not
//! grow without bound (see [`QueueGrowth`]). The search assumes sustainability falls off once,
//! as load rises; it brackets the boundary by doubling or halving from a start load, then
//! bisects until the bracket is within a relative tolerance (1% by default).

/// The verdict on one run at one load.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// Whether every SLO objective held.
    pub slo_met: bool,
    /// Fraction of requests in the run that were rejected or timed out, in [0, 1].
    pub lost_fraction: f64,
    /// Whether the queue grew without bound over the run.
    pub queue_grows: bool,
}

impl Outcome {
    /// Whether this run was sustainable, allowing at most `max_lost_fraction` of requests
    /// rejected or timed out.
    pub fn sustainable(&self, max_lost_fraction: f64) -> bool {
        self.slo_met && self.lost_fraction <= max_lost_fraction && !self.queue_grows
    }
}

/// The queue-growth test: the mean queue depth over the last third of a run against the first.
///
/// The queue *grows without bound* when the last third's mean depth exceeds
/// `ratio × first + slack` — with an overloaded queue the depth climbs linearly, so the last
/// third's mean is about five times the first's; a stable one fluctuates around a level.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueueGrowth {
    /// Mean depth over the first third of the samples.
    pub first_third_mean: f64,
    /// Mean depth over the last third of the samples.
    pub last_third_mean: f64,
    /// The verdict.
    pub grows: bool,
}

/// Multiplier on the first third's mean depth in the growth test.
pub const QUEUE_GROWTH_RATIO: f64 = 2.0;
/// Requests of slack in the growth test, so that a nearly empty queue is not called growing.
pub const QUEUE_GROWTH_SLACK: f64 = 2.0;

impl QueueGrowth {
    /// Tests queue depths sampled at even intervals over a run. Fewer than three samples cannot
    /// be split into thirds and are judged not growing.
    pub fn from_samples(depths: &[f64]) -> QueueGrowth {
        let third = depths.len() / 3;
        if third == 0 {
            return QueueGrowth {
                first_third_mean: 0.0,
                last_third_mean: 0.0,
                grows: false,
            };
        }
        let mean = |values: &[f64]| values.iter().sum::<f64>() / values.len() as f64;
        let first_third_mean = mean(&depths[..third]);
        let last_third_mean = mean(&depths[depths.len() - third..]);
        QueueGrowth {
            first_third_mean,
            last_third_mean,
            grows: last_third_mean > QUEUE_GROWTH_RATIO * first_third_mean + QUEUE_GROWTH_SLACK,
        }
    }
}

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SearchOptions {
    /// The first load tried (> 0).
    pub start_load: f64,
    /// The lowest load tried; below it the capacity is reported as below the range.
    pub min_load: f64,
    /// The highest load tried; above it the capacity is reported as beyond the range.
    pub max_load: f64,
    /// Stop when `(unsustainable - sustainable) / sustainable` is at most this (0.01 = 1%).
    pub relative_tolerance: f64,
    /// Largest allowed fraction of requests rejected or timed out.
    pub max_lost_fraction: f64,
    /// Bound on evaluator calls.
    pub max_evaluations: usize,
}

impl Default for SearchOptions {
    fn default() -> SearchOptions {
        SearchOptions {
            start_load: 1.0,
            min_load: 1e-3,
            max_load: 1e3,
            relative_tolerance: 0.01,
            max_lost_fraction: 0.001,
            max_evaluations: 64,
        }
    }
}

/// Where the capacity lies relative to the searched range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bracket {
    /// Bracketed and bisected to the tolerance.
    Found,
    /// Even the minimum load was unsustainable; the capacity is below it.
    BelowRange,
    /// Even the maximum load was sustainable; the capacity is at least that.
    AboveRange,
}

/// One evaluator call.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Probe {
    /// The load evaluated.
    pub load: f64,
    /// What the run showed.
    pub outcome: Outcome,
    /// Whether it was sustainable under the search's bound.
    pub sustainable: bool,
}

/// The result of a search.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Capacity {
    /// The highest load found sustainable (0 when [`Bracket::BelowRange`]).
    pub sustainable_load: f64,
    /// The lowest load found unsustainable (`None` when [`Bracket::AboveRange`]).
    pub unsustainable_load: Option<f64>,
    /// Where the capacity lies.
    pub bracket: Bracket,
    /// Every evaluation, in order (outcomes known before the search first).
    pub probes: Vec<Probe>,
}

/// Why a search failed.
#[derive(Debug, thiserror::Error)]
pub enum SearchError<E: std::error::Error + 'static> {
    /// The options are inconsistent.
    #[error("capacity search: {0}")]
    BadOptions(String),
    /// The evaluator failed at a load.
    #[error("capacity search: run at load {load} failed")]
    Evaluator {
        /// The load of the failed run, in the load axis's unit (multiplier, req/s or clients).
        load: f64,
        /// The evaluator's error.
        #[source]
        source: E,
    },
    /// The bound on evaluations was reached before the tolerance.
    #[error("capacity search: no result within {0} runs")]
    TooManyEvaluations(usize),
}

/// Finds the largest sustainable load by bracketing from `options.start_load` (doubling while
/// sustainable, halving while not, within `[min_load, max_load]`) and then bisecting.
pub fn search_capacity<E, F>(
    options: &SearchOptions,
    evaluate: F,
) -> Result<Capacity, SearchError<E>>
where
    E: std::error::Error + 'static,
    F: FnMut(f64) -> Result<Outcome, E>,
{
    search_capacity_from(options, &[], evaluate)
}

/// Like [`search_capacity`], but starts from `known` outcomes of the same configuration and
/// seed (for example a sweep's curve runs), so runs already made are not made again: the
/// bracket starts at the lowest known unsustainable load and the highest known sustainable load
/// below it; with only sustainable ones it doubles from the highest, with only unsustainable ones
/// it halves from the lowest. Known loads outside `[min_load, max_load]` are ignored. The known
/// outcomes come first in [`Capacity::probes`] and count against `max_evaluations`.
pub fn search_capacity_from<E, F>(
    options: &SearchOptions,
    known: &[(f64, Outcome)],
    mut evaluate: F,
) -> Result<Capacity, SearchError<E>>
where
    E: std::error::Error + 'static,
    F: FnMut(f64) -> Result<Outcome, E>,
{
    check_options(options)?;
    let mut probes: Vec<Probe> = known
        .iter()
        .filter(|(load, _)| (options.min_load..=options.max_load).contains(load))
        .map(|&(load, outcome)| Probe {
            load,
            outcome,
            sustainable: outcome.sustainable(options.max_lost_fraction),
        })
        .collect();
    let lowest_unsustainable = probes
        .iter()
        .filter(|p| !p.sustainable)
        .map(|p| p.load)
        .min_by(f64::total_cmp);
    let highest_sustainable_below = |limit: f64| {
        probes
            .iter()
            .filter(|p| p.sustainable && p.load < limit)
            .map(|p| p.load)
            .max_by(f64::total_cmp)
    };
    let known_bracket = match lowest_unsustainable {
        Some(high) => (highest_sustainable_below(high), Some(high)),
        None => (highest_sustainable_below(f64::INFINITY), None),
    };
    let mut probe = |load: f64, probes: &mut Vec<Probe>| -> Result<bool, SearchError<E>> {
        if probes.len() >= options.max_evaluations {
            return Err(SearchError::TooManyEvaluations(options.max_evaluations));
        }
        let outcome = evaluate(load).map_err(|source| SearchError::Evaluator { load, source })?;
        let sustainable = outcome.sustainable(options.max_lost_fraction);
        probes.push(Probe {
            load,
            outcome,
            sustainable,
        });
        Ok(sustainable)
    };

    let start = options.start_load.clamp(options.min_load, options.max_load);
    // Both ends move as the bracket is found; each starts at the first load tried.
    let (mut low, mut high) = (start, start);
    let start_sustainable = match known_bracket {
        (Some(known_low), Some(known_high)) => {
            return bisect(options, known_low, known_high, probes, &mut probe);
        }
        (Some(known_low), None) => {
            low = known_low;
            true
        }
        (None, Some(known_high)) => {
            high = known_high;
            false
        }
        (None, None) => probe(start, &mut probes)?,
    };
    if start_sustainable {
        loop {
            if low >= options.max_load {
                return Ok(Capacity {
                    sustainable_load: low,
                    unsustainable_load: None,
                    bracket: Bracket::AboveRange,
                    probes,
                });
            }
            let next = (low * 2.0).min(options.max_load);
            if probe(next, &mut probes)? {
                low = next;
            } else {
                high = next;
                break;
            }
        }
    } else {
        loop {
            if high <= options.min_load {
                return Ok(Capacity {
                    sustainable_load: 0.0,
                    unsustainable_load: Some(high),
                    bracket: Bracket::BelowRange,
                    probes,
                });
            }
            let next = (high / 2.0).max(options.min_load);
            if probe(next, &mut probes)? {
                low = next;
                break;
            }
            high = next;
        }
    }
    bisect(options, low, high, probes, &mut probe)
}

/// Bisects a bracket (`low` sustainable, `high` not) down to the relative tolerance.
fn bisect<E: std::error::Error + 'static>(
    options: &SearchOptions,
    mut low: f64,
    mut high: f64,
    mut probes: Vec<Probe>,
    probe: &mut impl FnMut(f64, &mut Vec<Probe>) -> Result<bool, SearchError<E>>,
) -> Result<Capacity, SearchError<E>> {
    while (high - low) / low > options.relative_tolerance {
        let middle = 0.5 * (low + high);
        if probe(middle, &mut probes)? {
            low = middle;
        } else {
            high = middle;
        }
    }
    Ok(Capacity {
        sustainable_load: low,
        unsustainable_load: Some(high),
        bracket: Bracket::Found,
        probes,
    })
}

fn check_options<E: std::error::Error + 'static>(
    options: &SearchOptions,
) -> Result<(), SearchError<E>> {
    let positive = |v: f64| v > 0.0 && v.is_finite();
    if !(positive(options.start_load) && positive(options.min_load) && positive(options.max_load)) {
        return Err(SearchError::BadOptions(format!(
            "loads must be positive and finite (start {}, min {}, max {})",
            options.start_load, options.min_load, options.max_load
        )));
    }
    if options.min_load >= options.max_load {
        return Err(SearchError::BadOptions(format!(
            "min load {} must be below max load {}",
            options.min_load, options.max_load
        )));
    }
    if !positive(options.relative_tolerance) {
        return Err(SearchError::BadOptions(format!(
            "relative tolerance must be positive, got {}",
            options.relative_tolerance
        )));
    }
    if !(0.0..=1.0).contains(&options.max_lost_fraction) {
        return Err(SearchError::BadOptions(format!(
            "max lost fraction must be in [0, 1], got {}",
            options.max_lost_fraction
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    fn threshold_evaluator(threshold: f64) -> impl FnMut(f64) -> Result<Outcome, Infallible> {
        move |load| {
            Ok(Outcome {
                slo_met: load <= threshold,
                lost_fraction: 0.0,
                queue_grows: false,
            })
        }
    }

    fn assert_within_tolerance(capacity: &Capacity, threshold: f64, tolerance: f64) {
        assert_eq!(capacity.bracket, Bracket::Found);
        let low = capacity.sustainable_load;
        let high = capacity.unsustainable_load.unwrap();
        assert!(
            low <= threshold && threshold < high,
            "{low} <= {threshold} < {high}"
        );
        assert!(
            (high - low) / low <= tolerance,
            "bracket {low}..{high} wider than {tolerance}"
        );
    }

    #[test]
    fn search_finds_threshold_above_start_within_one_percent() {
        let options = SearchOptions::default();
        for threshold in [1.0, 1.37, 3.9, 250.0, 999.0] {
            let capacity = search_capacity(&options, threshold_evaluator(threshold)).unwrap();
            assert_within_tolerance(&capacity, threshold, 0.01);
        }
    }

    #[test]
    fn search_finds_threshold_below_start_within_one_percent() {
        let options = SearchOptions::default();
        for threshold in [0.0013, 0.2, 0.73, 0.999] {
            let capacity = search_capacity(&options, threshold_evaluator(threshold)).unwrap();
            assert_within_tolerance(&capacity, threshold, 0.01);
        }
    }

    #[test]
    fn each_sustainability_condition_alone_bounds_capacity() {
        let options = SearchOptions {
            max_lost_fraction: 0.01,
            ..SearchOptions::default()
        };
        let losses = |load: f64| -> Result<Outcome, Infallible> {
            Ok(Outcome {
                slo_met: true,
                lost_fraction: if load > 5.0 { 0.02 } else { 0.005 },
                queue_grows: false,
            })
        };
        let capacity = search_capacity(&options, losses).unwrap();
        assert_within_tolerance(&capacity, 5.0, 0.01);

        let growth = |load: f64| -> Result<Outcome, Infallible> {
            Ok(Outcome {
                slo_met: true,
                lost_fraction: 0.0,
                queue_grows: load > 2.5,
            })
        };
        let capacity = search_capacity(&options, growth).unwrap();
        assert_within_tolerance(&capacity, 2.5, 0.01);
    }

    #[test]
    fn capacity_outside_the_range_is_reported_as_such() {
        let options = SearchOptions {
            min_load: 0.5,
            max_load: 8.0,
            ..SearchOptions::default()
        };
        let above = search_capacity(&options, threshold_evaluator(100.0)).unwrap();
        assert_eq!(above.bracket, Bracket::AboveRange);
        assert_eq!(above.sustainable_load, 8.0);
        let below = search_capacity(&options, threshold_evaluator(0.1)).unwrap();
        assert_eq!(below.bracket, Bracket::BelowRange);
        assert_eq!(below.unsustainable_load, Some(0.5));
    }

    #[test]
    fn evaluator_error_carries_the_load() {
        #[derive(Debug, thiserror::Error)]
        #[error("engine broke")]
        struct Broke;
        let err = search_capacity(&SearchOptions::default(), |load| {
            if load > 1.5 {
                Err(Broke)
            } else {
                Ok(Outcome {
                    slo_met: true,
                    lost_fraction: 0.0,
                    queue_grows: false,
                })
            }
        })
        .unwrap_err();
        assert!(
            matches!(err, SearchError::Evaluator { load, .. } if load == 2.0),
            "{err}"
        );
    }

    #[test]
    fn evaluation_budget_is_enforced() {
        let options = SearchOptions {
            max_evaluations: 3,
            ..SearchOptions::default()
        };
        let err = search_capacity(&options, threshold_evaluator(37.0)).unwrap_err();
        assert!(matches!(err, SearchError::TooManyEvaluations(3)), "{err}");
    }

    #[test]
    fn growing_queue_is_detected_and_stable_one_is_not() {
        let growing: Vec<f64> = (0..300).map(|i| f64::from(i) * 0.5).collect();
        assert!(QueueGrowth::from_samples(&growing).grows);
        let stable: Vec<f64> = (0..300).map(|i| 10.0 + f64::from(i % 7) - 3.0).collect();
        let test = QueueGrowth::from_samples(&stable);
        assert!(!test.grows, "{test:?}");
        assert!(!QueueGrowth::from_samples(&[0.0, 100.0]).grows);
    }

    fn known(loads: &[f64], threshold: f64) -> Vec<(f64, Outcome)> {
        let mut evaluate = threshold_evaluator(threshold);
        loads
            .iter()
            .map(|&load| (load, evaluate(load).unwrap()))
            .collect()
    }

    #[test]
    fn known_outcomes_bracket_the_search_and_save_runs() {
        let options = SearchOptions::default();
        let curve: Vec<f64> = (1..=10).map(|i| 0.25 + 0.4 * f64::from(i - 1)).collect();
        for threshold in [0.3, 1.37, 2.0, 3.9] {
            let mut calls = 0;
            let mut evaluate = threshold_evaluator(threshold);
            let capacity = search_capacity_from(&options, &known(&curve, threshold), |load| {
                calls += 1;
                evaluate(load)
            })
            .unwrap();
            assert_within_tolerance(&capacity, threshold, 0.01);
            let mut cold_calls = 0;
            let mut evaluate = threshold_evaluator(threshold);
            search_capacity(&options, |load| {
                cold_calls += 1;
                evaluate(load)
            })
            .unwrap();
            assert!(
                calls < cold_calls,
                "threshold {threshold}: {calls} runs with the curve known, {cold_calls} without"
            );
            assert_eq!(capacity.probes.len(), curve.len() + calls);
        }
    }

    #[test]
    fn known_outcomes_on_one_side_extend_the_bracket_outward() {
        let options = SearchOptions::default();
        let all_sustainable = known(&[0.5, 1.0, 2.0], 37.0);
        let capacity =
            search_capacity_from(&options, &all_sustainable, threshold_evaluator(37.0)).unwrap();
        assert_within_tolerance(&capacity, 37.0, 0.01);
        assert_eq!(
            capacity.probes[3].load, 4.0,
            "doubles from the highest known"
        );
        let none_sustainable = known(&[0.5, 1.0, 2.0], 0.01);
        let capacity =
            search_capacity_from(&options, &none_sustainable, threshold_evaluator(0.01)).unwrap();
        assert_within_tolerance(&capacity, 0.01, 0.01);
        assert_eq!(
            capacity.probes[3].load, 0.25,
            "halves from the lowest known"
        );
    }

    #[test]
    fn bad_options_are_refused() {
        let options = SearchOptions {
            min_load: 5.0,
            max_load: 1.0,
            ..SearchOptions::default()
        };
        assert!(matches!(
            search_capacity(&options, threshold_evaluator(1.0)),
            Err(SearchError::BadOptions(_))
        ));
    }
}
