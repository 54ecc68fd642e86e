//! The machine's speed over a run, window by window: Triton's statistics read every
//! [`WINDOW`] while the load runs, and in each window the server's compute against the
//! scenario's for the same batch sizes. validate simulates the run again with each window's
//! level as a slowdown of its execution (sim at the server's speed by window): the calibrated
//! model with the machine's speed as the run measured it, and nothing else from the run. Where
//! it meets the run and sim does not, the machine's speed moved during the run or since the
//! calibration; where both miss alike, the model does. A replay of that one series, never a
//! prediction.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::triton::{self, ModelStats};

/// How often the statistics are read during a run.
pub(super) const WINDOW: Duration = Duration::from_secs(2);

/// A window with fewer of the server's batches of sizes the scenario ran than this keeps the
/// scenario's speed: its level would be a handful of batches' spread, not the machine's speed.
const MIN_BATCHES: u64 = 20;

/// Reads a model's statistics every [`WINDOW`] on a thread of its own until [`finish`]ed.
///
/// [`finish`]: StatsPoller::finish
pub(super) struct StatsPoller {
    start: Instant,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<(u64, ModelStats)>>,
}

impl StatsPoller {
    /// Starts reading `model`'s statistics from `base_url` now and every [`WINDOW`] after.
    pub(super) fn start(base_url: &str, model: &str) -> StatsPoller {
        let (url, model) = (base_url.to_string(), model.to_string());
        let start = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut samples = Vec::new();
            for tick in 0u32.. {
                // A read that fails leaves a longer window between the reads either side.
                if let Ok(stats) = triton::model_stats(&url, &model) {
                    samples.push((elapsed_ns(start), stats));
                }
                let next = WINDOW * (tick + 1);
                while start.elapsed() < next {
                    if stopped.load(Ordering::Relaxed) {
                        return samples;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            samples
        });
        StatsPoller {
            start,
            stop,
            thread,
        }
    }

    /// Stops the reads and returns them, each with its time since the start in ns, then
    /// `last` (the statistics read after the run) at its time.
    pub(super) fn finish(self, last: Option<&ModelStats>) -> Vec<(u64, ModelStats)> {
        let at = elapsed_ns(self.start);
        self.stop.store(true, Ordering::Relaxed);
        let mut samples = self.thread.join().unwrap_or_default();
        if let Some(last) = last {
            samples.push((at, last.clone()));
        }
        samples
    }
}

fn elapsed_ns(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// One window of the run: the server's compute over the scenario's for the same batches.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SpeedWindow {
    /// Start, seconds from the run's start.
    pub from_s: f64,
    /// End (exclusive), seconds.
    pub to_s: f64,
    /// The server's compute over the scenario's mean compute for the same batch sizes.
    pub level: f64,
    /// The server's batches it is over (of sizes the scenario ran).
    pub batches: u64,
}

/// The windows between consecutive `samples` (time in ns, cumulative statistics) with at least
/// [`MIN_BATCHES`] of the server's batches of sizes `model_ms` times (the scenario's mean
/// compute per batch of that size, ms); the others keep the scenario's speed.
pub(super) fn speed_windows(
    samples: &[(u64, ModelStats)],
    model_ms: &dyn Fn(u32) -> Option<f64>,
) -> Vec<SpeedWindow> {
    samples
        .windows(2)
        .filter_map(|pair| {
            let ((from, earlier), (to, later)) = (&pair[0], &pair[1]);
            let delta = later.since(earlier);
            let (mut server_ns, mut model_ns, mut batches) = (0.0, 0.0, 0);
            for b in delta.batch_stats.iter().filter(|b| b.executions() > 0) {
                if let Some(ms) = model_ms(b.batch_size) {
                    server_ns += b.compute_ns() as f64;
                    model_ns += ms * 1e6 * b.executions() as f64;
                    batches += b.executions();
                }
            }
            (to > from && batches >= MIN_BATCHES && model_ns > 0.0).then(|| SpeedWindow {
                from_s: *from as f64 * 1e-9,
                to_s: *to as f64 * 1e-9,
                level: server_ns / model_ns,
                batches,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Cumulative statistics with `batches` of size 1 at `ms` each so far.
    fn stats(batches: u64, total_ms: u64) -> ModelStats {
        let json = format!(
            r#"{{"model_stats": [{{"name": "m", "batch_stats": [{{"batch_size": 1,
            "compute_input": {{"count": {batches}, "ns": 0}},
            "compute_infer": {{"count": {batches}, "ns": {}}},
            "compute_output": {{"count": {batches}, "ns": 0}}}}]}}]}}"#,
            total_ms * 1_000_000
        );
        ModelStats::parse(json.as_bytes(), "test").expect("statistics")
    }

    #[test]
    fn each_window_is_its_own_compute_over_the_scenarios() {
        let samples = vec![
            (0, stats(0, 0)),
            // 100 batches at 2 ms against the scenario's 1 ms: twice as slow.
            (2_000_000_000, stats(100, 200)),
            // 10 batches: too few to say, the scenario's speed.
            (4_000_000_000, stats(110, 210)),
            // 50 batches at 0.5 ms: twice as fast.
            (6_000_000_000, stats(160, 235)),
        ];
        let windows = speed_windows(&samples, &|size| (size == 1).then_some(1.0));
        assert_eq!(windows.len(), 2, "{windows:?}");
        assert_eq!((windows[0].from_s, windows[0].to_s), (0.0, 2.0));
        assert!((windows[0].level - 2.0).abs() < 1e-9, "{windows:?}");
        assert_eq!(windows[0].batches, 100);
        assert_eq!((windows[1].from_s, windows[1].to_s), (4.0, 6.0));
        assert!((windows[1].level - 0.5).abs() < 1e-9, "{windows:?}");
        // Sizes the scenario never ran are left out of the level.
        assert!(speed_windows(&samples, &|_| None).is_empty());
    }
}
