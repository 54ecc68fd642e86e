//! Windows of simulated time in which a pool's model execution runs slower (or faster): a GPU
//! throttled for ten minutes, a noisy neighbour, or, in validation, the stalls a real server
//! showed during the very run being compared.
//!
//! A window `[from, to)` with factor `f` makes execution progress at `1/f` of its normal speed
//! inside it. A batch (or LLM step) is a fixed amount of work: the part of it that falls inside a
//! window takes `f` times as long, the rest runs at normal speed. So a batch that starts just
//! before a 20 ms stall of factor 10 is delayed by about 18 ms, not multiplied by 10, which is
//! what a stall of the machine does to work in flight.
//!
//! A [`SpeedProcess`] is the modelled counterpart of those windows, a scenario's
//! `execution.speed_levels`: time cut into windows of one length, each running at a factor drawn
//! at random from measured levels, as a shared machine's speed wanders from second to second.
//!
//! A *pause* `[from, to)` stops the dynamic batcher's dispatch instead: a batch whose compute
//! would start inside it starts at its end, and work already running is not touched. It is what
//! a server's stalled hand-over of a ready batch (its batcher thread or backend held up, not the
//! model) does, and that wait is queue time, as the server counts it.

use std::fmt;
use std::sync::Arc;

use crate::rng::splitmix64;

/// One window as validated: execution inside `[from_ns, to_ns)` takes `factor` times as long.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SlowdownWindow {
    /// Start of the window, ns of simulated time.
    pub from_ns: u64,
    /// End of the window (exclusive), ns; above `from_ns`.
    pub to_ns: u64,
    /// How many times longer work takes inside the window; finite, above 0 and at most 1000.
    pub factor: f64,
}

/// Whether `factor` may stretch work: finite, above 0 and at most 1000.
fn is_factor(factor: f64) -> bool {
    factor.is_finite() && factor > 0.0 && factor <= 1000.0
}

/// Work with `left` ns to do at normal speed, run from `t` inside a window that ends at `to_ns`
/// (`u64::MAX`: never) at `factor`: `Ok` with its end where it ends inside, else `Err` with the
/// work left at the window's end.
fn through_window(t: u64, to_ns: u64, factor: f64, left: f64) -> Result<u64, f64> {
    let inside = to_ns.saturating_sub(t) as f64;
    if left * factor <= inside || to_ns == u64::MAX {
        return Ok(t.saturating_add((left * factor).round() as u64));
    }
    Err(left - inside / factor)
}

/// Sorted, non-overlapping slowdown windows, or a [`SpeedProcess`]. Empty: execution runs at its
/// normal speed always.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slowdowns {
    windows: Vec<SlowdownWindow>,
    process: Option<SpeedProcess>,
}

/// A machine whose speed wanders: simulated time cut into windows of `window_ns` from 0, each
/// window's work taking a factor drawn from `levels` (rescaled to mean 1, so the model's mean
/// time stays its own) times as long. Each window draws on its own, from a hash of the run's seed
/// and the window's index: the same seed gives the same windows whatever else the run does,
/// and no window is drawn ahead of time, so the process has no horizon.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeedProcess {
    window_ns: u64,
    levels: Arc<[f64]>,
    key: u64,
}

impl SpeedProcess {
    /// Validates the levels (at least one, each finite, above 0 and at most 1000) and the window
    /// (above 0 ns); the error says what is wrong. Unseeded: [`SpeedProcess::seeded`] gives
    /// each run its own windows.
    pub fn new(levels: &[f64], window_ns: u64) -> Result<SpeedProcess, String> {
        if levels.is_empty() {
            return Err("is empty; give at least one level (1: the model's speed)".to_string());
        }
        if let Some((i, bad)) = levels.iter().enumerate().find(|(_, l)| !is_factor(**l)) {
            return Err(format!(
                "[{i}] is {bad}; each level must be above 0 and at most 1000"
            ));
        }
        if window_ns == 0 {
            return Err("needs `execution.speed_window` above 0".to_string());
        }
        let mean = levels.iter().sum::<f64>() / levels.len() as f64;
        Ok(SpeedProcess {
            window_ns,
            levels: levels.iter().map(|l| l / mean).collect(),
            key: 0,
        })
    }

    /// The same process drawing its windows from `key` (a run's seed, mixed).
    pub fn seeded(self, key: u64) -> SpeedProcess {
        SpeedProcess { key, ..self }
    }

    /// The levels, rescaled to mean 1.
    pub fn levels(&self) -> &[f64] {
        &self.levels
    }

    /// The factor of window `index` (`[index * window_ns, (index + 1) * window_ns)`).
    pub fn factor(&self, index: u64) -> f64 {
        let draw = splitmix64(self.key ^ splitmix64(index));
        self.levels[(draw % self.levels.len() as u64) as usize]
    }

    /// When work that takes `work_ns` at the model's speed, started at `start_ns`, ends: each
    /// window it crosses runs it at that window's factor.
    pub fn end_ns(&self, start_ns: u64, work_ns: u64) -> u64 {
        let mut t = start_ns;
        let mut left = work_ns as f64;
        loop {
            let index = t / self.window_ns;
            let window_end = index.saturating_add(1).saturating_mul(self.window_ns);
            match through_window(t, window_end, self.factor(index), left) {
                Ok(end_ns) => return end_ns,
                Err(rest) => (left, t) = (rest, window_end),
            }
        }
    }
}

/// Why a list of windows was refused: the index of the offending window (0-based, in the order
/// given) and what is wrong with it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlowdownError {
    /// Index of the window in the list as given.
    pub index: usize,
    /// What is wrong and what would fix it.
    pub message: String,
}

impl fmt::Display for SlowdownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "window {}: {}", self.index, self.message)
    }
}

/// The order that sorts `spans` (`[from, to)` in ns, in any order) by start, after checking that
/// each has `from < to` and that no two overlap (they may touch).
fn sorted_disjoint(spans: &[(u64, u64)]) -> Result<Vec<usize>, SlowdownError> {
    for (index, &(from_ns, to_ns)) in spans.iter().enumerate() {
        if to_ns <= from_ns {
            return Err(SlowdownError {
                index,
                message: format!("ends at {to_ns} ns, not after its start at {from_ns} ns"),
            });
        }
    }
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| (spans[i].0, i));
    for pair in order.windows(2) {
        let (a, b) = (spans[pair[0]], spans[pair[1]]);
        if b.0 < a.1 {
            return Err(SlowdownError {
                index: pair[1],
                message: format!(
                    "overlaps window {} ({}..{} ns); windows must not overlap",
                    pair[0], a.0, a.1
                ),
            });
        }
    }
    Ok(order)
}

impl Slowdowns {
    /// Validates windows given in any order: each must have `from < to` and a factor above 0 and
    /// at most 1000, and no two may overlap (they may touch).
    pub fn new(windows: &[SlowdownWindow]) -> Result<Slowdowns, SlowdownError> {
        for (index, w) in windows.iter().enumerate() {
            if !is_factor(w.factor) {
                return Err(SlowdownError {
                    index,
                    message: format!(
                        "factor is {}; it must be above 0 and at most 1000",
                        w.factor
                    ),
                });
            }
        }
        let spans: Vec<(u64, u64)> = windows.iter().map(|w| (w.from_ns, w.to_ns)).collect();
        let order = sorted_disjoint(&spans)?;
        Ok(Slowdowns {
            windows: order.into_iter().map(|i| windows[i]).collect(),
            process: None,
        })
    }

    /// Execution at the speed of `process` throughout.
    pub fn varying(process: SpeedProcess) -> Slowdowns {
        Slowdowns {
            windows: Vec::new(),
            process: Some(process),
        }
    }

    /// The same slowdowns, a speed process among them drawing its windows from `key`.
    pub fn seeded(&self, key: u64) -> Slowdowns {
        Slowdowns {
            windows: self.windows.clone(),
            process: self.process.clone().map(|p| p.seeded(key)),
        }
    }

    /// The speed process, if execution runs at one.
    pub fn process(&self) -> Option<&SpeedProcess> {
        self.process.as_ref()
    }

    /// Whether there is no window and no speed process (execution always at normal speed).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty() && self.process.is_none()
    }

    /// The windows, sorted by start.
    pub fn windows(&self) -> &[SlowdownWindow] {
        &self.windows
    }

    /// When work that takes `work_ns` at normal speed, started at `start_ns`, ends. Saturates at
    /// `u64::MAX`. Work that no window touches (always, without windows) takes exactly its
    /// normal time.
    #[inline]
    pub fn end_ns(&self, start_ns: u64, work_ns: u64) -> u64 {
        if let Some(process) = &self.process {
            return process.end_ns(start_ns, work_ns);
        }
        // The first window that ends after the start; earlier ones cannot touch this work.
        let first = self.windows.partition_point(|w| w.to_ns <= start_ns);
        let end_ns = start_ns.saturating_add(work_ns);
        match self.windows.get(first) {
            Some(w) if end_ns > w.from_ns => self.stretched_end_ns(first, start_ns, work_ns),
            _ => end_ns,
        }
    }

    /// [`Slowdowns::end_ns`] of work that reaches window `first`, the first to end after
    /// `start_ns`.
    fn stretched_end_ns(&self, first: usize, start_ns: u64, work_ns: u64) -> u64 {
        let mut t = start_ns;
        let mut left = work_ns as f64;
        for w in &self.windows[first..] {
            if t < w.from_ns {
                let free = (w.from_ns - t) as f64;
                if left <= free {
                    break;
                }
                left -= free;
                t = w.from_ns;
            }
            match through_window(t, w.to_ns, w.factor, left) {
                Ok(end_ns) => return end_ns,
                Err(rest) => (left, t) = (rest, w.to_ns),
            }
        }
        t.saturating_add(left.round() as u64)
    }
}

/// Sorted, non-overlapping pauses of the dynamic batcher's dispatch (`[from, to)` in ns).
/// Empty: dispatch never pauses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pauses {
    windows: Vec<(u64, u64)>,
}

impl Pauses {
    /// Validates pauses given in any order: each must have `from < to`, and no two may overlap
    /// (they may touch).
    pub fn new(windows: &[(u64, u64)]) -> Result<Pauses, SlowdownError> {
        let order = sorted_disjoint(windows)?;
        Ok(Pauses {
            windows: order.into_iter().map(|i| windows[i]).collect(),
        })
    }

    /// The pauses, sorted by start.
    pub fn windows(&self) -> &[(u64, u64)] {
        &self.windows
    }

    /// When compute meant to start at `t_ns` starts: the end of the pause that holds `t_ns`, or
    /// `t_ns` itself.
    #[inline]
    pub fn resume_ns(&self, t_ns: u64) -> u64 {
        if self.windows.is_empty() {
            return t_ns;
        }
        let first = self.windows.partition_point(|&(_, to)| to <= t_ns);
        match self.windows.get(first) {
            Some(&(from, to)) if from <= t_ns => to,
            _ => t_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(from_ns: u64, to_ns: u64, factor: f64) -> SlowdownWindow {
        SlowdownWindow {
            from_ns,
            to_ns,
            factor,
        }
    }

    #[test]
    fn work_outside_every_window_takes_its_normal_time() {
        let s = Slowdowns::new(&[w(100, 200, 4.0)]).unwrap();
        assert_eq!(s.end_ns(0, 50), 50);
        assert_eq!(
            s.end_ns(0, 100),
            100,
            "ending exactly where the window starts"
        );
        assert_eq!(s.end_ns(200, 30), 230);
        assert_eq!(Slowdowns::default().end_ns(7, 3), 10);
    }

    #[test]
    fn only_the_part_of_the_work_inside_a_window_is_slowed() {
        let s = Slowdowns::new(&[w(100, 200, 4.0)]).unwrap();
        // 40 ns of work from 80: 20 before the window, 20 inside at a quarter speed.
        assert_eq!(s.end_ns(80, 40), 100 + 80);
        // 40 ns of work from 90: 10 before, 25 worth inside (100 ns), 5 after.
        assert_eq!(s.end_ns(90, 40), 205);
        // Entirely inside.
        assert_eq!(s.end_ns(120, 10), 160);
    }

    #[test]
    fn work_crossing_several_windows_adds_each_ones_delay() {
        let s = Slowdowns::new(&[w(300, 400, 0.5), w(100, 200, 2.0)]).unwrap();
        assert_eq!(s.windows()[0].from_ns, 100, "sorted by start");
        // 400 ns of work from 0: 100 free, 50 in [100,200), 100 free to 300, 150 more needs
        // 75 ns in the double-speed window, ending at 375.
        assert_eq!(s.end_ns(0, 400), 375);
    }

    #[test]
    fn a_start_inside_a_pause_waits_for_its_end_and_others_do_not() {
        let p = Pauses::new(&[(300, 400), (100, 200)]).unwrap();
        assert_eq!(p.windows(), &[(100, 200), (300, 400)], "sorted by start");
        assert_eq!(p.resume_ns(99), 99);
        assert_eq!(p.resume_ns(100), 200, "the start of a pause is inside it");
        assert_eq!(p.resume_ns(199), 200);
        assert_eq!(p.resume_ns(200), 200, "its end is not");
        assert_eq!(p.resume_ns(350), 400);
        assert_eq!(p.resume_ns(401), 401);
        assert_eq!(Pauses::default().resume_ns(150), 150);
        let e = Pauses::new(&[(0, 10), (5, 20)]).unwrap_err();
        assert_eq!(e.index, 1, "{e}");
        assert!(e.message.contains("overlaps"), "{e}");
    }

    #[test]
    fn bad_windows_are_refused_naming_their_index() {
        let e = Slowdowns::new(&[w(0, 10, 1.0), w(20, 20, 2.0)]).unwrap_err();
        assert_eq!(e.index, 1, "{e}");
        let e = Slowdowns::new(&[w(0, 10, 0.0)]).unwrap_err();
        assert!(e.message.contains("above 0"), "{e}");
        let e = Slowdowns::new(&[w(50, 90, 2.0), w(0, 60, 2.0)]).unwrap_err();
        assert_eq!(e.index, 0, "the later-starting window overlaps: {e}");
        assert!(
            Slowdowns::new(&[w(0, 10, 2.0), w(10, 20, 3.0)]).is_ok(),
            "touching is fine"
        );
    }

    #[test]
    fn a_speed_process_runs_each_window_at_its_own_drawn_level() {
        // Levels 1 and 3, rescaled to mean 1: 0.5 and 1.5.
        let p = SpeedProcess::new(&[1.0, 3.0], 100).unwrap().seeded(42);
        assert_eq!(p.levels(), &[0.5, 1.5]);
        let f0 = p.factor(0);
        let f1 = p.factor(1);
        // 40 ns of work from 80: 20 ns of window 0's time does 20/f0 of it, the rest runs at f1.
        let left = 40.0 - 20.0 / f0;
        let expected = if 40.0 * f0 <= 20.0 {
            80 + (40.0 * f0).round() as u64
        } else {
            100 + (left * f1).round() as u64
        };
        assert_eq!(p.end_ns(80, 40), expected);
        let s = Slowdowns::varying(SpeedProcess::new(&[1.0, 3.0], 100).unwrap()).seeded(42);
        assert_eq!(s.end_ns(80, 40), expected, "through Slowdowns alike");
        assert!(!s.is_empty());
        // One level: the model's own speed.
        let one = SpeedProcess::new(&[2.5], 10).unwrap();
        assert_eq!(one.end_ns(5, 1_000), 1_005);
    }

    #[test]
    fn a_speed_process_draws_each_level_as_often_and_by_its_seed_alone() {
        let p = SpeedProcess::new(&[0.8, 1.0, 1.2, 2.0], 1_000).unwrap();
        let a = p.clone().seeded(1);
        let b = p.clone().seeded(2);
        let draws: Vec<f64> = (0..8_000).map(|i| a.factor(i)).collect();
        assert_eq!(
            draws,
            (0..8_000).map(|i| a.factor(i)).collect::<Vec<_>>(),
            "the same seed, the same windows"
        );
        assert_ne!(
            draws,
            (0..8_000).map(|i| b.factor(i)).collect::<Vec<_>>(),
            "another seed, other windows"
        );
        for level in a.levels() {
            let share = draws.iter().filter(|&&d| d == *level).count() as f64 / 8_000.0;
            assert!((0.22..0.28).contains(&share), "{level}: {share}");
        }
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 1.0).abs() < 0.02, "mean factor {mean}");
    }

    #[test]
    fn bad_speed_levels_and_windows_are_refused_saying_why() {
        assert!(SpeedProcess::new(&[], 10).unwrap_err().contains("empty"));
        let err = SpeedProcess::new(&[1.0, 0.0], 10).unwrap_err();
        assert!(err.contains("[1]") && err.contains("above 0"), "{err}");
        assert!(SpeedProcess::new(&[1.0, f64::NAN], 10).is_err());
        assert!(
            SpeedProcess::new(&[1.0], 0)
                .unwrap_err()
                .contains("speed_window")
        );
    }
}
