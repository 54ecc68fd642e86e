//! The steady-state window of a run: which requests its statistics describe.
//!
//! A run starts with an empty system (the warm-up: the first requests meet no queue) and, after
//! the last request is sent, empties again (the drain: the last requests meet a fleet with
//! nothing else to do). Neither is the load the trace describes, so [`run`] measures only the
//! requests sent in a window between them, derived from the run itself:
//!
//! 1. A pilot run with the same seed gives each completed request's send time and end-to-end
//!    latency. The measured run that follows is the same run (what is measured does not change
//!    what happens), so the window fits it exactly.
//! 2. **Lifetime** `L`: the pilot's mean end-to-end latency of completed requests.
//! 3. **Drain**: requests sent within `L` of the last send are left out (they would still be in
//!    the system when it starts to empty); the window ends at `last send - L`.
//! 4. **Warm-up**: MSER-5 (White, 1997) on the latencies of the requests sent before the window's
//!    end, in send order: batch means of 5 requests `Y_1..Y_k`; the truncation `d` that
//!    minimises `sum_{j>d} (Y_j - mean_{j>d} Y)^2 / (k - d)^2` (the squared standard error of
//!    the mean of what is kept) sets the window's start at the first send of batch `d + 1`.
//!    `d` is at most `k/2`, and covers at most the sends of the first [`WARMUP_LIFETIMES`]
//!    lifetimes: the empty start's effect fades within a few lifetimes, while a burst of the
//!    trace, which MSER-5 alone would also cut as a transient, is load to be measured. An explicit warm-up ([`Warmup::DurationNs`], [`Warmup::Count`]) replaces
//!    this step; [`Warmup::Window`] replaces the whole rule.
//! 5. **Floor**: the window keeps at least the later half of the sends after the warm-up, so
//!    that an overloaded run (whose lifetime grows with the run) is still measured on its worst
//!    part instead of on nothing.
//! 6. **Too short**: a window of fewer than [`SHORT_LIFETIMES`] lifetimes (before the floor)
//!    means the trace is too short for this load: its requests did not turn over often enough
//!    for the statistics to describe a steady state. A trace the fleet holds all in flight at
//!    once (nothing ever queues) is the extreme case: its lifetime reaches its whole span.
//!
//! The window and why it was chosen are in [`Summary::steady_window`](crate::Summary).

use capsim_trace::Trace;

use crate::build::BuiltScenario;
use crate::client::Warmup;
use crate::engine::{RunOptions, SimError, run_with_sink};
use crate::observe::Run;
use crate::record::{Outcome, RecordSink, RequestRecord};
pub use crate::summary::SteadyWindow;

/// Lifetimes a steady window must span; a shorter one marks the trace too short for its load.
pub const SHORT_LIFETIMES: f64 = 3.0;

/// Lifetimes from the first send within which the warm-up may end.
pub const WARMUP_LIFETIMES: f64 = 10.0;

/// Requests per batch of the MSER-5 rule.
const MSER_BATCH: usize = 5;

/// Simulates `trace` and measures it over its steady-state window (see the module doc);
/// `options.warmup` is the warm-up given, [`Warmup::None`] when none was. Every finished
/// request of the measured run goes to `sink`.
pub fn run<S: RecordSink>(
    built: &BuiltScenario,
    trace: &Trace,
    options: &RunOptions,
    sink: &mut S,
) -> Result<Run, SimError> {
    if let Warmup::Window { .. } = options.warmup {
        return run_with_sink(built, trace, options, sink);
    }
    let window = pilot(built, trace, options)?;
    let measured = RunOptions {
        warmup: Warmup::Window {
            from_ns: window.from_ns,
            to_ns: window.to_ns,
        },
        ..options.clone()
    };
    let mut run = run_with_sink(built, trace, &measured, sink)?;
    run.summary.steady_window = Some(window.describe());
    Ok(run)
}

/// The steady-state window [`run`] would measure `trace` over, from the pilot run alone (half
/// the cost of [`run`], for a check of the trace's length).
pub fn window(
    built: &BuiltScenario,
    trace: &Trace,
    options: &RunOptions,
) -> Result<SteadyWindow, SimError> {
    Ok(pilot(built, trace, options)?.describe())
}

/// Runs the pilot and derives the window from it.
fn pilot(built: &BuiltScenario, trace: &Trace, options: &RunOptions) -> Result<Window, SimError> {
    let mut pilot = Pilot::new(options.warmup);
    run_with_sink(
        built,
        trace,
        &RunOptions {
            warmup: Warmup::None,
            ..options.clone()
        },
        &mut pilot,
    )?;
    Ok(pilot.window())
}

/// What the pilot run keeps of each finished request.
struct Pilot {
    /// The warm-up given.
    given: Warmup,
    /// (send time, end-to-end latency) of each completed attempt, in nanoseconds.
    completed: Vec<(u64, u64)>,
    last_send_ns: u64,
    /// Send time of trace row `n`'s first attempt, for a given [`Warmup::Count`]`(n)`.
    row_send_ns: Option<u64>,
}

impl Pilot {
    fn new(given: Warmup) -> Pilot {
        Pilot {
            given,
            completed: Vec::new(),
            last_send_ns: 0,
            row_send_ns: None,
        }
    }
}

impl RecordSink for Pilot {
    fn record(&mut self, record: &RequestRecord) {
        self.last_send_ns = self.last_send_ns.max(record.arrival_ns);
        if let Warmup::Count(n) = self.given
            && u64::from(record.request) == n
            && record.attempt == 1
        {
            self.row_send_ns = Some(record.arrival_ns);
        }
        if record.outcome == Outcome::Completed {
            self.completed
                .push((record.arrival_ns, record.latency_ns()));
        }
    }
}

/// A window in nanoseconds, with the figures that chose it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Window {
    from_ns: u64,
    to_ns: u64,
    last_send_ns: u64,
    lifetime_ns: u64,
    given: Warmup,
    /// The window's length by the rule, before the floor.
    rule_length_ns: u64,
}

impl Pilot {
    /// The window the module doc's rule gives for this run.
    fn window(mut self) -> Window {
        self.completed.sort_unstable();
        let lifetime_ns = mean_latency_ns(&self.completed);
        // Past the last send, so that the last request is measured when the lifetime is 0.
        let drain_from_ns = (self.last_send_ns + 1).saturating_sub(lifetime_ns);
        let from_ns = match self.given {
            Warmup::DurationNs(d) => d,
            Warmup::Count(0) => 0,
            Warmup::Count(_) => self.row_send_ns.unwrap_or(u64::MAX),
            Warmup::None | Warmup::Window { .. } => {
                let kept = self
                    .completed
                    .partition_point(|&(sent, _)| sent < drain_from_ns);
                let latencies: Vec<u64> = self.completed[..kept].iter().map(|&(_, l)| l).collect();
                let first_ns = self.completed.first().map_or(0, |&(sent, _)| sent);
                let warmup_end_ns =
                    first_ns.saturating_add((WARMUP_LIFETIMES * lifetime_ns as f64) as u64);
                let most =
                    self.completed[..kept].partition_point(|&(sent, _)| sent < warmup_end_ns);
                let batch = mser5_truncation(&latencies, most / MSER_BATCH);
                self.completed
                    .get(batch * MSER_BATCH)
                    .map_or(0, |&(sent, _)| sent)
            }
        };
        let from_ns = from_ns.min(self.last_send_ns + 1);
        let floor_ns = from_ns + (self.last_send_ns + 1 - from_ns) / 2;
        Window {
            from_ns,
            to_ns: drain_from_ns.max(floor_ns),
            last_send_ns: self.last_send_ns,
            lifetime_ns,
            given: self.given,
            rule_length_ns: drain_from_ns.saturating_sub(from_ns),
        }
    }
}

impl Window {
    fn describe(&self) -> SteadyWindow {
        let s = |ns: u64| ns as f64 * 1e-9;
        let lifetime_s = s(self.lifetime_ns);
        let (warmup_rule, start) = match self.given {
            Warmup::None | Warmup::Window { .. } => (
                "mser-5",
                "the warm-up ends where MSER-5 on the latencies in send order truncates",
            ),
            _ => ("warmup", "the warm-up is the one given"),
        };
        let short = (self.rule_length_ns as f64) < SHORT_LIFETIMES * self.lifetime_ns as f64;
        let mut why = format!(
            "requests sent in [{:.3} s, {:.3} s) are measured: {start}; requests sent within one mean lifetime ({lifetime_s:.3} s) of the last send ({:.3} s) meet a draining system and are left out",
            s(self.from_ns),
            s(self.to_ns),
            s(self.last_send_ns),
        );
        if self.to_ns > self.last_send_ns.saturating_sub(self.lifetime_ns) + 1 {
            why.push_str(
                "; the window keeps at least the later half of the sends after the warm-up",
            );
        }
        if short {
            why.push_str(&format!(
                "; the window spans fewer than {SHORT_LIFETIMES} lifetimes: the trace is too short for this load"
            ));
        }
        SteadyWindow {
            from_s: s(self.from_ns),
            to_s: s(self.to_ns),
            last_send_s: s(self.last_send_ns),
            lifetime_s,
            warmup_rule: warmup_rule.to_string(),
            why,
            too_short_needs_s: short
                .then(|| s(self.from_ns) + (SHORT_LIFETIMES + 1.0) * lifetime_s),
        }
    }
}

/// Mean of the latencies in `(send, latency)` pairs, nanoseconds; 0 when there are none.
fn mean_latency_ns(completed: &[(u64, u64)]) -> u64 {
    if completed.is_empty() {
        return 0;
    }
    let total: u128 = completed.iter().map(|&(_, l)| u128::from(l)).sum();
    (total / completed.len() as u128) as u64
}

/// MSER-5's truncation of `series`: how many leading batches of `MSER_BATCH` (5) values to drop
/// (at most half of them, and at most `most_batches`), the first minimum of the squared
/// standard error of what is left (ties within rounding go to the smaller truncation). 0 for a
/// series of fewer than two batches.
pub fn mser5_truncation(series: &[u64], most_batches: usize) -> usize {
    let means: Vec<f64> = series
        .chunks_exact(MSER_BATCH)
        .map(|c| c.iter().map(|&v| v as f64).sum::<f64>() / MSER_BATCH as f64)
        .collect();
    let k = means.len();
    if k < 2 {
        return 0;
    }
    // Centred, so that the suffix sums below lose little to cancellation.
    let centre = means.iter().sum::<f64>() / k as f64;
    let mut statistics = vec![0.0; (k / 2).min(most_batches) + 1];
    let (mut sum, mut sum_sq) = (0.0, 0.0);
    for d in (0..k).rev() {
        let y = means[d] - centre;
        sum += y;
        sum_sq += y * y;
        if d < statistics.len() {
            let kept = (k - d) as f64;
            statistics[d] = (sum_sq - sum * sum / kept).max(0.0) / (kept * kept);
        }
    }
    let least = statistics.iter().copied().fold(f64::INFINITY, f64::min);
    let tolerance = 1e-9 * statistics[0].max(least);
    statistics
        .iter()
        .position(|&s| s <= least + tolerance)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// A pilot that saw one completed request sent every second for `sends` seconds, with
    /// `latency(i)` seconds of latency for request `i`.
    fn pilot(sends: u64, given: Warmup, latency_s: impl Fn(u64) -> f64) -> Pilot {
        let mut pilot = Pilot::new(given);
        for i in 0..sends {
            let mut record = RequestRecord::new(i as u32, 1, i * S);
            record.outcome = Outcome::Completed;
            record.response_ns = i * S + (latency_s(i) * 1e9) as u64;
            pilot.record(&record);
        }
        pilot
    }

    #[test]
    fn mser5_drops_a_transient_and_nothing_from_a_stationary_series() {
        // 100 values climbing from an empty system, then 900 around a level.
        let wobble = |i: u64| i * 7919 % 13;
        let transient: Vec<u64> = (0..1000u64)
            .map(|i| if i < 100 { i * 10 } else { 1000 + wobble(i) })
            .collect();
        let cut = mser5_truncation(&transient, usize::MAX);
        assert!(
            (18..=22).contains(&cut),
            "the 20 batches of the transient are dropped, got {cut}"
        );
        let stationary: Vec<u64> = (0..1000u64).map(|i| 1000 + wobble(i)).collect();
        let kept = mser5_truncation(&stationary, usize::MAX);
        assert!(kept <= 2, "{kept}");
        assert_eq!(
            mser5_truncation(&[1, 2, 3], usize::MAX),
            0,
            "under two batches"
        );
        assert_eq!(
            mser5_truncation(&transient, 5),
            5,
            "at most the batches allowed"
        );
    }

    #[test]
    fn the_window_leaves_out_the_warm_up_and_one_lifetime_before_the_last_send() {
        // Latency 1 s for the first 50 requests (an empty system), 10 s afterwards.
        let window = pilot(1000, Warmup::None, |i| if i < 50 { 1.0 } else { 10.0 }).window();
        let lifetime_s = (50.0 * 1.0 + 950.0 * 10.0) / 1000.0;
        assert_eq!(window.lifetime_ns, (lifetime_s * 1e9) as u64);
        assert_eq!(window.from_ns, 50 * S, "MSER-5 cuts the first 10 batches");
        assert_eq!(window.to_ns, 999 * S + 1 - window.lifetime_ns);
        let described = window.describe();
        assert!(!described.too_short(), "{described:?}");
        assert_eq!(described.warmup_rule, "mser-5");
        assert!(described.why.contains("draining"), "{}", described.why);
    }

    #[test]
    fn a_burst_long_after_the_start_is_load_not_warm_up() {
        // Latency 1 s throughout but 30 s for the requests sent in 100..300 s (a burst), 1000 s
        // of sends: MSER-5 alone would cut the burst as a transient.
        let window = pilot(1000, Warmup::None, |i| {
            if (100..300).contains(&i) { 30.0 } else { 1.0 }
        })
        .window();
        let lifetime_s = window.lifetime_ns as f64 * 1e-9;
        assert!(
            (window.from_ns as f64) * 1e-9 <= WARMUP_LIFETIMES * lifetime_s,
            "warm-up ends at {} s, lifetime {lifetime_s} s",
            window.from_ns as f64 * 1e-9
        );
        assert!(
            window.from_ns < 100 * S,
            "the burst is measured: {window:?}"
        );
    }

    #[test]
    fn a_given_warmup_replaces_mser_but_the_drain_still_applies() {
        let by_time = pilot(1000, Warmup::DurationNs(30 * S), |_| 5.0).window();
        assert_eq!(by_time.from_ns, 30 * S);
        assert_eq!(by_time.to_ns, 999 * S + 1 - 5 * S);
        let by_count = pilot(1000, Warmup::Count(250), |_| 5.0).window();
        assert_eq!(by_count.from_ns, 250 * S);
        assert_eq!(by_count.describe().warmup_rule, "warmup");
    }

    #[test]
    fn a_trace_shorter_than_a_few_lifetimes_is_too_short() {
        // 30 requests over 29 s, each living 40 s: the fleet holds them all at once.
        let window = pilot(30, Warmup::None, |_| 40.0).window().describe();
        assert!(window.too_short(), "{window:?}");
        let needs_s = window.too_short_needs_s.unwrap();
        assert!(
            needs_s >= (SHORT_LIFETIMES + 1.0) * 40.0,
            "needs {needs_s} s"
        );
        assert!(
            window.to_s > window.from_s,
            "the floor keeps a window: {window:?}"
        );
        // The same lifetime over 1000 s is long enough.
        assert!(
            !pilot(1000, Warmup::None, |_| 40.0)
                .window()
                .describe()
                .too_short()
        );
    }

    #[test]
    fn an_overloaded_run_is_still_measured_on_its_later_half() {
        // Latency grows with the run: the mean lifetime is longer than the run's sends.
        let window = pilot(100, Warmup::Count(0), |i| 3.0 * i as f64).window();
        assert_eq!(window.from_ns, 0);
        assert!(window.to_ns >= 49 * S, "{window:?}");
        assert!(window.describe().too_short());
    }
}
