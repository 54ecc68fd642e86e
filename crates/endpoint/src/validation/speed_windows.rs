//! The machine's speed over a run, window by window: Triton's statistics read every
//! [`WINDOW`] while the load runs, and in each window the server's compute against the
//! scenario's for as many batches of each size, as the simulation of the same requests timed
//! them ([`speed_windows`]). validate simulates the run again with each window's
//! level as a slowdown of its execution (sim at the server's speed by window): the calibrated
//! model with the machine's speed as the run measured it, and nothing else from the run. Where
//! it meets the run and sim does not, the machine's speed moved during the run or since the
//! calibration; where both miss alike, the model does. A replay of that one series, never a
//! prediction.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use capsim_sim::RequestRecord;

use super::comparison::{SpeedWindow, simulated_batches};
use super::triton::{self, ModelStats};

/// How often the statistics are read during a run.
pub(crate) const WINDOW: Duration = Duration::from_secs(2);

/// A window with fewer of the server's batches of sizes the scenario ran than this keeps the
/// scenario's speed: its level would be a handful of batches' spread, not the machine's speed.
const MIN_BATCHES: u64 = 20;

/// The simulation's batches of a size, ended in a window, that time that size there.
const LOCAL_BATCHES: usize = 3;

/// Reads a model's statistics at a fixed period on a thread of its own until [`finish`]ed.
///
/// [`finish`]: StatsPoller::finish
pub(crate) struct StatsPoller {
    start: Instant,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<(u64, ModelStats)>>,
}

impl StatsPoller {
    /// Starts reading `model`'s statistics from `base_url` now and every `every` after
    /// ([`WINDOW`] in validate).
    pub(crate) fn start(base_url: &str, model: &str, every: Duration) -> StatsPoller {
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
                let next = every * (tick + 1);
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
    pub(crate) fn finish(self, last: Option<&ModelStats>) -> Vec<(u64, ModelStats)> {
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

/// The windows between consecutive `samples` (time in ns, cumulative statistics) with at least
/// [`MIN_BATCHES`] of the server's batches of sizes the simulation `simulated` (sim's requests,
/// in the same time) also ran; the others keep the scenario's speed.
///
/// A window's level is the server's compute in it over the scenario's for as many batches of
/// each size, each size timed by the simulation's batches of that size that ended in the same
/// window where it ran at least [`LOCAL_BATCHES`] of them, and by all of its batches of that size
/// otherwise: a burst's batches carry its long inputs, on the server and in the simulation
/// alike, so a burst does not read as a slow machine.
pub(crate) fn speed_windows(
    samples: &[(u64, ModelStats)],
    simulated: &[RequestRecord],
) -> Vec<SpeedWindow> {
    // Each size's batches (end, compute), in the order they ran.
    let mut by_size: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for b in simulated_batches(simulated) {
        by_size.entry(b.size).or_default().push((b.end_ns, b.ns));
    }
    let mean_ns = |size: u32, from: u64, to: u64| {
        let of_size = by_size.get(&size)?;
        let local: Vec<u64> = of_size
            .iter()
            .filter(|(end, _)| (from..to).contains(end))
            .map(|&(_, ns)| ns)
            .collect();
        let times: Vec<u64> = if local.len() >= LOCAL_BATCHES {
            local
        } else {
            of_size.iter().map(|&(_, ns)| ns).collect()
        };
        Some(times.iter().sum::<u64>() as f64 / times.len() as f64)
    };
    samples
        .windows(2)
        .filter_map(|pair| {
            let ((from, earlier), (to, later)) = (&pair[0], &pair[1]);
            let delta = later.since(earlier);
            let (mut server_ns, mut model_ns, mut count) = (0.0, 0.0, 0);
            for b in delta.batch_stats.iter().filter(|b| b.executions() > 0) {
                if let Some(mean) = mean_ns(b.batch_size, *from, *to) {
                    server_ns += b.compute_ns() as f64;
                    model_ns += mean * b.executions() as f64;
                    count += b.executions();
                }
            }
            (to > from && count >= MIN_BATCHES && model_ns > 0.0).then(|| SpeedWindow {
                from_s: *from as f64 * 1e-9,
                to_s: *to as f64 * 1e-9,
                level: server_ns / model_ns,
                batches: count,
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

    /// One simulated batch of size 1 per request: `id`, ending at `end_ms` after `ms`.
    fn batch(id: u64, end_ms: u64, ms: u64) -> RequestRecord {
        let mut r = RequestRecord::new(id as u32, 1, 0);
        (r.batch_id, r.batch_size) = (id, 1);
        (r.exec_start_ns, r.exec_end_ns) = ((end_ms - ms) * 1_000_000, end_ms * 1_000_000);
        r
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
            // 40 batches at 4 ms, where the simulation's own batches took 4 ms too (a burst's
            // long inputs): the scenario's speed.
            (8_000_000_000, stats(200, 395)),
        ];
        // The simulation: batches of 1 ms in the first three windows (one each: too few to
        // time the size there), three of 4 ms in the last.
        let mut simulated = vec![batch(0, 1_000, 1), batch(1, 3_000, 1), batch(2, 5_000, 1)];
        simulated.extend((3..6).map(|id| batch(id, 7_000 + id, 4)));
        // Each batch's requests share its times: a second record of a batch counts once.
        simulated.push(batch(0, 1_000, 1));
        let windows = speed_windows(&samples, &simulated);
        assert_eq!(windows.len(), 3, "{windows:?}");
        // The first windows are timed by all the simulation's batches: 15 ms over 6.
        let mean = 15.0 / 6.0;
        assert_eq!((windows[0].from_s, windows[0].to_s), (0.0, 2.0));
        assert!((windows[0].level - 2.0 / mean).abs() < 1e-9, "{windows:?}");
        assert_eq!(windows[0].batches, 100);
        assert_eq!((windows[1].from_s, windows[1].to_s), (4.0, 6.0));
        assert!((windows[1].level - 0.5 / mean).abs() < 1e-9, "{windows:?}");
        assert_eq!((windows[2].from_s, windows[2].to_s), (6.0, 8.0));
        assert!((windows[2].level - 1.0).abs() < 1e-9, "{windows:?}");
        // Sizes the simulation never ran are left out of the level.
        assert!(speed_windows(&samples, &[]).is_empty());
    }
}
