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
//! A *pause* `[from, to)` stops the dynamic batcher's dispatch instead: a batch whose compute
//! would start inside it starts at its end, and work already running is not touched. It is what
//! a server's stalled hand-over of a ready batch (its batcher thread or backend held up, not the
//! model) does, and that wait is queue time, as the server counts it.

use std::fmt;

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

/// Sorted, non-overlapping slowdown windows. Empty: execution runs at its normal speed always.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Slowdowns {
    windows: Vec<SlowdownWindow>,
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
            if !(w.factor.is_finite() && w.factor > 0.0 && w.factor <= 1000.0) {
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
        })
    }

    /// Whether there is no window (execution always at normal speed).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
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
            let inside = (w.to_ns - t) as f64;
            if left * w.factor <= inside {
                return t.saturating_add((left * w.factor).round() as u64);
            }
            left -= inside / w.factor;
            t = w.to_ns;
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
}
