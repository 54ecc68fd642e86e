//! capsim's own live server (ONNX Runtime in process) beside the simulation of the same
//! arrivals, as `capsim validate` without `--endpoint` prints it: at each load the figures of
//! both runs, each live batch's execution time against the profile's prediction for its shape,
//! and the level the live server ran the profile's times at.
//!
//! `live_loop.rs` makes the runs (the simulation, the live replay, the machine-speed probe);
//! this module only computes and words what they add up to.

use std::collections::BTreeMap;

use capsim_sim::record::RequestRecord;
use capsim_sim::summary::LatencyStats;
use capsim_sim::timing::profile::{Profile, ProfileServiceTime};
use capsim_sim::{BatchShape, Scenario, Summary};

/// `(simulated - measured) / measured`, and 0 when the measured value is 0 (the live table's
/// convention; [`super::comparison::relative_error`] leaves that case out instead).
pub fn error_or_zero(simulated: f64, measured: f64) -> f64 {
    if measured == 0.0 {
        0.0
    } else {
        (simulated - measured) / measured
    }
}

/// Median of non-empty values (sorts them); NaN for none.
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The stages whose percentiles the table compares, as the summary names them.
const COMPARED_STAGES: [&str; 2] = ["end_to_end", "queue"];

/// One row of the comparison: a figure of the simulated and of the live run.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureRow {
    /// What is compared, with its unit (`throughput rps`, `queue p99 ms`).
    pub metric: String,
    /// The simulation's value.
    pub simulated: f64,
    /// The live run's value.
    pub measured: f64,
}

impl FigureRow {
    /// The simulation's relative error against the live run (0 when the live value is 0).
    pub fn error(&self) -> f64 {
        error_or_zero(self.simulated, self.measured)
    }
}

/// The figures both runs are compared on: throughput, then p50, p90 and p99 of the end-to-end
/// and queue latencies (0 where a run has no such stage).
pub fn figure_rows(simulated: &Summary, measured: &Summary) -> Vec<FigureRow> {
    let mut rows = vec![FigureRow {
        metric: "throughput rps".to_string(),
        simulated: simulated.throughput_rps,
        measured: measured.throughput_rps,
    }];
    let empty = LatencyStats::default();
    for stage in COMPARED_STAGES {
        let s = simulated.latency_ms.get(stage).unwrap_or(&empty);
        let m = measured.latency_ms.get(stage).unwrap_or(&empty);
        for (name, simulated, measured) in [
            ("p50", s.p50_ms, m.p50_ms),
            ("p90", s.p90_ms, m.p90_ms),
            ("p99", s.p99_ms, m.p99_ms),
        ] {
            rows.push(FigureRow {
                metric: format!("{stage} {name} ms"),
                simulated,
                measured,
            });
        }
    }
    rows
}

/// The header of the comparison table that [`figures_text`] fills.
pub fn figures_header() -> String {
    format!(
        "{:>5} {:<18} {:>10} {:>10} {:>8}\n",
        "load", "metric", "simulated", "measured", "error"
    )
}

/// The comparison table's rows at `load` (a fraction of the calibrated capacity), one line
/// each.
pub fn figures_text(load: f64, rows: &[FigureRow]) -> String {
    rows.iter()
        .map(|row| {
            format!(
                "{:>4.0}% {:<18} {:>10.3} {:>10.3} {:>+7.1}%\n",
                load * 100.0,
                row.metric,
                row.simulated,
                row.measured,
                100.0 * row.error()
            )
        })
        .collect()
}

/// One live batch: its size, measured execution time and the profile's median, p99 and longest
/// run for its shape (size, longest clamped input, the idle time before it), input build
/// included, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveBatch {
    /// Requests in the batch.
    pub size: u32,
    /// Measured execution time, ns.
    pub measured_ns: f64,
    /// The profile's median for the batch's shape, ns.
    pub predicted_ns: f64,
    /// The profile's p99 for the batch's shape, ns.
    pub p99_ns: f64,
    /// The profile's longest run for the batch's shape, ns.
    pub max_ns: f64,
}

/// Every batch of a live run's `records` with the profile's prediction for it, inputs cut to
/// `max_length`: where the service model and the live server part ways. Batches are ordered by
/// model instance and start.
pub fn live_batches(
    records: &[RequestRecord],
    service: &ProfileServiceTime,
    max_length: u32,
) -> Vec<LiveBatch> {
    /// A batch as its records give it.
    struct Run {
        instance: u32,
        size: u32,
        longest: u32,
        start_ns: u64,
        end_ns: u64,
    }
    let mut batches: BTreeMap<u64, Run> = BTreeMap::new();
    for r in records {
        let entry = batches.entry(r.batch_id).or_insert(Run {
            instance: r.model_instance,
            size: r.batch_size,
            longest: 0,
            start_ns: r.exec_start_ns,
            end_ns: r.exec_end_ns,
        });
        entry.longest = entry.longest.max(r.input_tokens.clamp(1, max_length));
    }
    // Each batch's idle time before it: since its model instance's previous batch ended.
    let mut runs: Vec<Run> = batches.into_values().collect();
    runs.sort_by_key(|r| (r.instance, r.start_ns));
    let mut previous_end: Option<(u32, u64)> = None;
    runs.into_iter()
        .map(|run| {
            let idle_ns = match previous_end {
                Some((i, end)) if i == run.instance => run.start_ns.saturating_sub(end),
                _ => run.start_ns,
            };
            previous_end = Some((run.instance, run.end_ns));
            let shape = BatchShape {
                size: run.size,
                max_input_tokens: run.longest,
                total_input_tokens: u64::from(run.size) * u64::from(run.longest),
                idle_ns,
            };
            let build_ns = service.input_build_mean_ns(&shape);
            LiveBatch {
                size: run.size,
                measured_ns: (run.end_ns - run.start_ns) as f64,
                predicted_ns: service.quantile_ns(&shape, 0.5) + build_ns,
                p99_ns: service.quantile_ns(&shape, 0.99) + build_ns,
                max_ns: service.quantile_ns(&shape, 1.0) + build_ns,
            }
        })
        .collect()
}

/// The live run times of one batch size against the profile's, ms.
#[derive(Debug, Clone, PartialEq)]
pub struct RunTimes {
    /// The batch size.
    pub batch_size: u32,
    /// Live batches of this size.
    pub batches: usize,
    /// Median measured execution time of these batches.
    pub live_median_ms: f64,
    /// Median over the same batches of the profile's median for each one's shape (size and
    /// longest clamped input), input build included.
    pub profile_median_ms: f64,
}

/// Each batch size's median measured execution time against the median prediction, by
/// increasing size.
pub fn run_times_by_size(batches: &[LiveBatch]) -> Vec<RunTimes> {
    /// Measured and predicted ns of one size's batches.
    #[derive(Default)]
    struct Times {
        measured: Vec<f64>,
        predicted: Vec<f64>,
    }
    let mut by_size: BTreeMap<u32, Times> = BTreeMap::new();
    for b in batches {
        let times = by_size.entry(b.size).or_default();
        times.measured.push(b.measured_ns);
        times.predicted.push(b.predicted_ns);
    }
    by_size
        .into_iter()
        .map(|(batch_size, mut times)| RunTimes {
            batch_size,
            batches: times.measured.len(),
            live_median_ms: median(&mut times.measured) * 1e-6,
            profile_median_ms: median(&mut times.predicted) * 1e-6,
        })
        .collect()
}

/// The level the live server ran the profile's batches at: the median over batches of measured
/// over predicted time (1.1: 10% slower than the profile). `None` without batches.
pub fn live_level(batches: &[LiveBatch]) -> Option<f64> {
    let mut ratios: Vec<f64> = batches
        .iter()
        .filter(|b| b.predicted_ns > 0.0)
        .map(|b| b.measured_ns / b.predicted_ns)
        .collect();
    (!ratios.is_empty()).then(|| median(&mut ratios))
}

/// The live batches in the profile's tail for their shapes. The simulation draws 1% of its
/// batches above the profile's p99 and none above its longest run; live batches there are
/// stalls or a tail the calibration's few hundred runs per grid point did not sample, and they
/// set the live p99 at moderate load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TailExcess {
    /// Live batches.
    pub batches: usize,
    /// Those above the profile's p99 for their shape.
    pub over_p99: usize,
    /// Those above the profile's longest run for their shape.
    pub over_max: usize,
    /// The batch furthest above the profile's longest run for its shape: (measured, longest) ns.
    pub worst: Option<(f64, f64)>,
}

impl TailExcess {
    /// The tail of `batches`.
    pub fn of(batches: &[LiveBatch]) -> TailExcess {
        let worst = batches
            .iter()
            .filter(|b| b.max_ns > 0.0 && b.measured_ns > b.max_ns)
            .max_by(|a, b| (a.measured_ns / a.max_ns).total_cmp(&(b.measured_ns / b.max_ns)))
            .map(|b| (b.measured_ns, b.max_ns));
        TailExcess {
            batches: batches.len(),
            over_p99: batches.iter().filter(|b| b.measured_ns > b.p99_ns).count(),
            over_max: batches.iter().filter(|b| b.measured_ns > b.max_ns).count(),
            worst,
        }
    }

    /// One line at `load`; empty without batches.
    pub fn text(&self, load: f64) -> String {
        if self.batches == 0 {
            return String::new();
        }
        let share = |n: usize| 100.0 * n as f64 / self.batches as f64;
        let worst = self.worst.map_or(String::new(), |(measured, longest)| {
            format!(
                "; the furthest ran {:.3} ms where the profile's longest is {:.3} ms",
                measured * 1e-6,
                longest * 1e-6
            )
        });
        format!(
            "{:>4.0}% live batches in the profile's tail for their shape: {:.1}% above its p99 \
             (the simulation: 1%), {:.1}% above its longest run (the simulation: none){worst}\n",
            load * 100.0,
            share(self.over_p99),
            share(self.over_max),
        )
    }
}

/// What one load's live batches say about the profile: run times by size, the tail, the level.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchReport {
    /// Each batch size's median live and predicted run time.
    pub run_times: Vec<RunTimes>,
    /// Live batches beyond the profile's p99 and longest run.
    pub tail: TailExcess,
    /// The median ratio of live to predicted run time (`live_level`).
    pub level: Option<f64>,
}

impl BatchReport {
    /// The report of a live run's `records` against the profile's times.
    pub fn of(records: &[RequestRecord], service: &ProfileServiceTime, max_length: u32) -> Self {
        let batches = live_batches(records, service, max_length);
        BatchReport {
            run_times: run_times_by_size(&batches),
            tail: TailExcess::of(&batches),
            level: live_level(&batches),
        }
    }

    /// The run-time line and the tail line at `load`.
    pub fn text(&self, load: f64) -> String {
        let cells: Vec<String> = self
            .run_times
            .iter()
            .map(|t| {
                format!(
                    "{}: {:.3}/{:.3} ({:+.0}%, {} batches)",
                    t.batch_size,
                    t.live_median_ms,
                    t.profile_median_ms,
                    100.0 * error_or_zero(t.live_median_ms, t.profile_median_ms),
                    t.batches
                )
            })
            .collect();
        format!(
            "{:>4.0}% median batch run time, live/profile ms, by batch size: {}\n{}",
            load * 100.0,
            cells.join("; "),
            self.tail.text(load)
        )
    }
}

/// The simulation with the profile's times brought to the live batches' level against the live
/// run: the serving model's own error, once the service times are right. A diagnostic, fitted
/// to the run it is compared with.
#[derive(Debug, Clone, PartialEq)]
pub struct Leveled {
    /// The factor on the profile's times (`live_level`).
    pub level: f64,
    /// Per compared stage (`end_to_end`, `queue`): the relative errors of p50 and p99.
    pub errors: Vec<StageErrors>,
}

/// A stage's p50 and p99 relative errors, simulated against measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StageErrors {
    /// The summary's stage name.
    pub stage: &'static str,
    /// Relative error of the p50 (0 when the live p50 is 0).
    pub p50: f64,
    /// Relative error of the p99 (0 when the live p99 is 0).
    pub p99: f64,
}

impl Leveled {
    /// The errors of the simulation at `level` (`simulated`) against the live run.
    pub fn of(level: f64, simulated: &Summary, measured: &Summary) -> Leveled {
        let empty = LatencyStats::default();
        let errors = COMPARED_STAGES
            .iter()
            .map(|&stage| {
                let s = simulated.latency_ms.get(stage).unwrap_or(&empty);
                let m = measured.latency_ms.get(stage).unwrap_or(&empty);
                StageErrors {
                    stage,
                    p50: error_or_zero(s.p50_ms, m.p50_ms),
                    p99: error_or_zero(s.p99_ms, m.p99_ms),
                }
            })
            .collect();
        Leveled { level, errors }
    }

    /// One line at `load`.
    pub fn text(&self, load: f64) -> String {
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|e| {
                format!(
                    "{} p50 {:+.1}%, p99 {:+.1}%",
                    e.stage,
                    100.0 * e.p50,
                    100.0 * e.p99
                )
            })
            .collect();
        format!(
            "{:>4.0}% with the profile's times x{:.3} (the live batches' median over the \
             profile's; a diagnostic, fitted to this run) the errors would be: {}\n",
            load * 100.0,
            self.level,
            errors.join("; ")
        )
    }
}

/// Why the profile may not describe the live run: measured with other intra-op threads than the
/// live sessions use, or, when it has no idle slowdown, with another idle wait before each run
/// than the scenario's batcher leaves a model instance at moderate load (about
/// `max_queue_delay`: a run after an idle wait is slower than one back to back, see
/// docs/calibration.md).
pub fn measurement_mismatch(
    profile: &Profile,
    scenario: &Scenario,
    threads: u32,
) -> Option<String> {
    let measured_threads = profile.environment.intra_threads;
    if measured_threads != threads {
        return Some(format!(
            "the profile was measured with --threads {measured_threads} and the live run uses --threads {threads}; calibrate with the same threads"
        ));
    }
    if profile.idle_slowdown.is_some() {
        return None;
    }
    let gap_ns = profile.settings.idle_gap_ns;
    let delay_ns = scenario.pools()[0].batcher.max_queue_delay.0;
    (gap_ns.abs_diff(delay_ns) > delay_ns / 2).then(|| {
        format!(
            "the profile's runs followed an idle wait of {:.3}ms but this batcher's max_queue_delay is {:.3}ms; at moderate load a model instance idles about that long before each batch, and runs after a longer wait are slower: calibrate without --idle-curve none (the default measures how run time grows with the idle wait), or with --idle-gap {}us",
            gap_ns as f64 * 1e-6,
            delay_ns as f64 * 1e-6,
            delay_ns / 1_000
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_is_the_middle_value_or_the_mean_of_the_two_middle_ones() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [7.0]), 7.0);
    }

    fn batch(size: u32, measured_ns: f64, predicted_ns: f64) -> LiveBatch {
        LiveBatch {
            size,
            measured_ns,
            predicted_ns,
            p99_ns: 1.5 * predicted_ns,
            max_ns: 2.0 * predicted_ns,
        }
    }

    #[test]
    fn tail_excess_counts_live_batches_beyond_the_profiles_p99_and_longest_run() {
        let batches = [
            batch(1, 1.0e6, 1e6),
            batch(1, 1.6e6, 1e6),
            batch(2, 2.5e6, 1e6),
            batch(4, 9.0e6, 3e6),
            batch(4, 2.0e6, 2e6),
        ];
        // p99 = 1.5x and longest = 2x the median: 1.6, 2.5 and 3.0 are above the p99, 2.5 and
        // 3.0 above the longest, the furthest 9 ms against 6 ms (3/2 beats 2.5/2).
        let tail = TailExcess::of(&batches);
        assert_eq!(
            tail,
            TailExcess {
                batches: 5,
                over_p99: 3,
                over_max: 2,
                worst: Some((9.0e6, 6.0e6)),
            }
        );
        let none = TailExcess::of(&[batch(1, 1e6, 1e6)]);
        assert_eq!((none.over_p99, none.over_max, none.worst), (0, 0, None));
    }

    #[test]
    fn the_live_level_is_the_median_ratio_of_measured_to_predicted_batch_times() {
        let batches = [
            batch(1, 1.2e6, 1e6),
            batch(1, 0.9e6, 1e6),
            batch(2, 3.3e6, 3e6),
            batch(4, 6e6, 4e6),
            batch(4, 4.4e6, 0.0),
        ];
        // Ratios 1.2, 0.9, 1.1 and 1.5 (the batch predicted at 0 is left out): median 1.15.
        let level = live_level(&batches).expect("batches");
        assert!((level - 1.15).abs() < 1e-12, "{level}");
        assert_eq!(live_level(&[]), None);
        let by_size = run_times_by_size(&batches);
        let sizes: Vec<(u32, usize)> = by_size.iter().map(|t| (t.batch_size, t.batches)).collect();
        assert_eq!(sizes, [(1, 2), (2, 1), (4, 2)]);
        assert!((by_size[0].live_median_ms - 1.05).abs() < 1e-12);
        assert!((by_size[2].profile_median_ms - 2.0).abs() < 1e-12);
    }

    #[test]
    fn a_table_row_shows_both_values_and_the_error_against_the_live_run() {
        let rows = [
            FigureRow {
                metric: "queue p99 ms".into(),
                simulated: 1.5,
                measured: 2.0,
            },
            FigureRow {
                metric: "queue p50 ms".into(),
                simulated: 1.0,
                measured: 0.0,
            },
        ];
        assert_eq!(
            figures_text(0.3, &rows),
            "  30% queue p99 ms            1.500      2.000   -25.0%\n  \
             30% queue p50 ms            1.000      0.000    +0.0%\n"
        );
    }
}
