//! Capacity search: the largest load a configuration sustains, by bracketing then bisection.
//!
//! The search is generic over an evaluator, `FnMut(load) -> Result<Outcome, E>`, that runs the
//! configuration at a load and judges the run. A load is *sustainable* when the SLO holds, the
//! fraction of requests rejected or timed out is at most a stated bound, the queue does not
//! grow without bound (see [`QueueGrowth`]) and the run's achieved throughput keeps up with its
//! offered rate (see [`MIN_ACHIEVED_FRACTION`]). The search brackets the boundary by doubling or
//! halving from a start load, then bisects until the bracket is within a relative tolerance (1%
//! by default).
//!
//! Noise makes sustainability not quite monotone in load, so where a search starts decides which
//! boundary it lands on. The capacity is therefore defined by the search's own path: the highest
//! load it found sustainable below the lowest load it found unsustainable, on a path that depends
//! only on [`SearchOptions`] and the outcomes. Callers that must agree (`sweep` and `plan`) use
//! the same options ([`SearchOptions::canonical`]: anchored at the trace's own rate), so the same
//! configuration and seed give the same runs and the same capacity.

/// Why a run was unsustainable: the condition it failed. The capacity search reports those of
/// the lowest load it found unsustainable, i.e. what ends the configuration's curve.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// An SLO objective did not hold.
    Slo,
    /// More requests were rejected or timed out than the bound allows (`--max-lost`).
    Losses,
    /// The queue grew without bound.
    QueueGrowth,
    /// The achieved throughput fell below [`MIN_ACHIEVED_FRACTION`] of the offered rate.
    AchievedBelowOffered,
}

impl Limit {
    /// The name used in `capacity.csv` (`slo`, `losses`, `queue_growth`,
    /// `achieved_below_offered`).
    pub fn name(self) -> &'static str {
        match self {
            Limit::Slo => "slo",
            Limit::Losses => "losses",
            Limit::QueueGrowth => "queue_growth",
            Limit::AchievedBelowOffered => "achieved_below_offered",
        }
    }

    /// A few words for a figure or a sentence.
    pub fn words(self) -> &'static str {
        match self {
            Limit::Slo => "SLO crossed",
            Limit::Losses => "losses over --max-lost",
            Limit::QueueGrowth => "queue grows",
            Limit::AchievedBelowOffered => "achieved < offered",
        }
    }

    /// Fewer words, for a figure's label: as [`Limit::words`] but `losses` for the losses.
    pub fn short_words(self) -> &'static str {
        match self {
            Limit::Losses => "losses",
            other => other.words(),
        }
    }
}

/// The smallest fraction of its offered rate a sustainable run achieves. A run whose completions
/// per second (over its span to the last response) fall more than 10% below its arrivals per
/// second (over their span) ended its arrivals with a backlog of more than a tenth of the run:
/// it is overloaded even when the queue-depth test misses it (requests held in running batches,
/// growth that starts late in the run).
pub const MIN_ACHIEVED_FRACTION: f64 = 0.9;

/// The verdict on one run at one load.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    /// Whether every SLO objective held.
    pub slo_met: bool,
    /// Fraction of requests in the run that were rejected or timed out (in the queue, or at
    /// their client's timeout: failed), in [0, 1].
    pub lost_fraction: f64,
    /// Whether the queue grew without bound over the run.
    pub queue_grows: bool,
    /// Achieved throughput over offered rate (1 when nothing was offered).
    pub achieved_fraction: f64,
}

impl Outcome {
    /// Whether this run was sustainable, allowing at most `max_lost_fraction` of requests
    /// rejected or timed out.
    pub fn sustainable(&self, max_lost_fraction: f64) -> bool {
        self.limits(max_lost_fraction).is_empty()
    }

    /// The conditions this run failed, in [`Limit`]'s order; empty when it was sustainable.
    pub fn limits(&self, max_lost_fraction: f64) -> Vec<Limit> {
        [
            (!self.slo_met, Limit::Slo),
            (self.lost_fraction > max_lost_fraction, Limit::Losses),
            (self.queue_grows, Limit::QueueGrowth),
            (
                self.achieved_fraction < MIN_ACHIEVED_FRACTION,
                Limit::AchievedBelowOffered,
            ),
        ]
        .into_iter()
        .filter_map(|(failed, limit)| failed.then_some(limit))
        .collect()
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

/// Lowest and highest multiple of a trace's rate the canonical search tries: 2^-12 and 2^12.
pub const CANONICAL_MULTIPLE_RANGE: (f64, f64) = (1.0 / 4096.0, 4096.0);
/// Highest closed-loop client count the canonical search tries.
pub const CANONICAL_MAX_CONCURRENCY: f64 = 65536.0;

impl SearchOptions {
    /// The one search `sweep`, `plan` and the sensitivity run share, over multiples of the
    /// trace's rate: it starts at the trace's own rate (1x) and brackets between 2^-12 and 2^12
    /// times it, whatever loads a sweep's curve runs, so the loads it tries depend only on the
    /// outcomes.
    pub fn canonical(max_lost_fraction: f64) -> SearchOptions {
        SearchOptions {
            start_load: 1.0,
            min_load: CANONICAL_MULTIPLE_RANGE.0,
            max_load: CANONICAL_MULTIPLE_RANGE.1,
            max_lost_fraction,
            ..SearchOptions::default()
        }
    }

    /// The canonical search over closed-loop client counts: from one client up to
    /// [`CANONICAL_MAX_CONCURRENCY`].
    pub fn canonical_concurrency(max_lost_fraction: f64) -> SearchOptions {
        SearchOptions {
            start_load: 1.0,
            min_load: 1.0,
            max_load: CANONICAL_MAX_CONCURRENCY,
            max_lost_fraction,
            ..SearchOptions::default()
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
    /// What failed at the lowest load found unsustainable: what ends the curve (empty when
    /// [`Bracket::AboveRange`]).
    pub limited_by: Vec<Limit>,
    /// Every evaluation, in order.
    pub probes: Vec<Probe>,
}

impl Capacity {
    fn new(
        sustainable_load: f64,
        unsustainable_load: Option<f64>,
        bracket: Bracket,
        probes: Vec<Probe>,
        max_lost_fraction: f64,
    ) -> Capacity {
        let limited_by = unsustainable_load
            .and_then(|load| probes.iter().find(|p| p.load == load))
            .map_or_else(Vec::new, |p| p.outcome.limits(max_lost_fraction));
        Capacity {
            sustainable_load,
            unsustainable_load,
            bracket,
            limited_by,
            probes,
        }
    }
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
/// sustainable, halving while not, within `[min_load, max_load]`) and then bisecting. The loads
/// tried depend only on `options` and the outcomes, so an evaluator that memoizes its runs
/// (returns a run already made at the very same load) cannot change the result.
pub fn search_capacity<E, F>(
    options: &SearchOptions,
    mut evaluate: F,
) -> Result<Capacity, SearchError<E>>
where
    E: std::error::Error + 'static,
    F: FnMut(f64) -> Result<Outcome, E>,
{
    check_options(options)?;
    let mut probes: Vec<Probe> = Vec::new();
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
    let max_lost = options.max_lost_fraction;
    let start = options.start_load.clamp(options.min_load, options.max_load);
    // Both ends move as the bracket is found; each starts at the first load tried.
    let (mut low, mut high) = (start, start);
    if probe(start, &mut probes)? {
        loop {
            if low >= options.max_load {
                return Ok(Capacity::new(
                    low,
                    None,
                    Bracket::AboveRange,
                    probes,
                    max_lost,
                ));
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
                return Ok(Capacity::new(
                    0.0,
                    Some(high),
                    Bracket::BelowRange,
                    probes,
                    max_lost,
                ));
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
    Ok(Capacity::new(
        low,
        Some(high),
        Bracket::Found,
        probes,
        options.max_lost_fraction,
    ))
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
                achieved_fraction: 1.0,
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
                achieved_fraction: 1.0,
            })
        };
        let capacity = search_capacity(&options, losses).unwrap();
        assert_within_tolerance(&capacity, 5.0, 0.01);

        let growth = |load: f64| -> Result<Outcome, Infallible> {
            Ok(Outcome {
                slo_met: true,
                lost_fraction: 0.0,
                queue_grows: load > 2.5,
                achieved_fraction: 1.0,
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
                    achieved_fraction: 1.0,
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

    #[test]
    fn achieved_below_offered_alone_bounds_capacity_and_is_named() {
        let options = SearchOptions::canonical(0.001);
        let falls_behind = |load: f64| -> Result<Outcome, Infallible> {
            Ok(Outcome {
                slo_met: true,
                lost_fraction: 0.0,
                queue_grows: false,
                achieved_fraction: if load > 3.3 { 0.8 } else { 0.99 },
            })
        };
        let capacity = search_capacity(&options, falls_behind).unwrap();
        assert_within_tolerance(&capacity, 3.3, 0.01);
        assert_eq!(capacity.limited_by, vec![Limit::AchievedBelowOffered]);
    }

    #[test]
    fn limited_by_lists_what_failed_at_the_lowest_unsustainable_load() {
        let options = SearchOptions::canonical(0.01);
        // Above 6 the SLO fails; above 6.5 the losses too: the bracket's top is just above 6.
        let capacity = search_capacity(&options, |load| {
            Ok::<_, Infallible>(Outcome {
                slo_met: load <= 6.0,
                lost_fraction: if load > 6.5 { 0.05 } else { 0.0 },
                queue_grows: false,
                achieved_fraction: 1.0,
            })
        })
        .unwrap();
        assert_within_tolerance(&capacity, 6.0, 0.01);
        assert_eq!(capacity.limited_by, vec![Limit::Slo]);
        let above = search_capacity(
            &SearchOptions {
                max_load: 8.0,
                ..options
            },
            threshold_evaluator(100.0),
        )
        .unwrap();
        assert!(above.limited_by.is_empty(), "{:?}", above.limited_by);
    }

    #[test]
    fn on_noisy_outcomes_capacity_is_the_highest_sustainable_below_the_lowest_unsustainable() {
        // Sustainable below 10, except for a noisy band of loads whose fractional part is
        // below 0.3 (non-monotone); the path must still be consistent with the definition.
        let noisy = |load: f64| -> Result<Outcome, Infallible> {
            Ok(Outcome {
                slo_met: load <= 10.0 && load.fract() >= 0.3,
                lost_fraction: 0.0,
                queue_grows: false,
                achieved_fraction: 1.0,
            })
        };
        let options = SearchOptions::canonical(0.001);
        let capacity = search_capacity(&options, noisy).unwrap();
        let high = capacity.unsustainable_load.unwrap();
        for p in &capacity.probes {
            if p.sustainable {
                assert!(
                    p.load <= capacity.sustainable_load,
                    "{p:?} above {capacity:?}"
                );
            } else {
                assert!(p.load >= high, "{p:?} unsustainable below {high}");
            }
        }
        // The same options give the same path: a second search agrees run for run.
        let again = search_capacity(&options, noisy).unwrap();
        assert_eq!(again, capacity);
    }

    #[test]
    fn canonical_search_starts_at_the_traces_own_rate() {
        let capacity =
            search_capacity(&SearchOptions::canonical(0.001), threshold_evaluator(5.0)).unwrap();
        let loads: Vec<f64> = capacity.probes.iter().take(4).map(|p| p.load).collect();
        assert_eq!(loads, [1.0, 2.0, 4.0, 8.0], "doubling from 1x");
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
