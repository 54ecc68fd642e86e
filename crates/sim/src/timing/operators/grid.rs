//! Measured times on grids of several sizes (attention's four, a mixture of experts' two), with
//! the interpolation rule every lookup follows.
//!
//! The profilers' grids are not full cartesian products: LLMServingSim measures pure prefills
//! (no decodes), pure decodes (no prefill chunk) and mixed steps on different sets of points, and
//! a densified bundle adds a second, finer grid over part of the first (Qwen3-32B's chunks 24,
//! 36, 54, ... measured only with KV lengths of 512 and up). So a grid is indexed as a tree, one
//! level per axis in order: under each measured value of the first axis, the values of the second
//! axis measured with it, and so on. A lookup brackets the query on the first axis between the
//! two nearest values measured there, looks each bracket up on the remaining axes among the rows
//! measured under it, and blends the two. On a full cartesian grid this is exactly multilinear
//! interpolation. On a partial one (the "missing cells" rule), a bracket whose rows start above
//! the query on a later axis (the query below that sub-grid's smallest value, where the whole grid
//! measured smaller) gives way to the nearest value on its side, among the three nearest, whose
//! rows reach down to the query; where a side has none, the two nearest values are blended as
//! they are. Above a sub-grid's top needs no such care: the bundles' sub-grids share their tops.
/// What an axis counts, which decides its edge rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AxisKind {
    /// A number of tokens or sequences whose zero means the work is absent (no prefill chunk, no
    /// decodes): a query of 0 reads only rows measured at 0, and a nonzero query below the
    /// smallest nonzero measured value takes that value's time.
    Count,
    /// A length (KV history): below the smallest measured value, the smallest value's time.
    Length,
}

/// Why rows cannot form a grid. Row indices are 0-based positions in the rows given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GridError {
    /// Two rows measure the same point.
    #[error("rows {first} and {second} measure the same point; keep one")]
    Duplicate {
        /// The earlier row.
        first: usize,
        /// The later row.
        second: usize,
    },
    /// A time is not finite or is negative.
    #[error("row {index}: time {time_ns} ns is not a finite, non-negative number")]
    BadTime {
        /// The row.
        index: usize,
        /// The time given.
        time_ns: f64,
    },
}

/// The tree index of an `N`-axis grid: node `i` spans `values[start..start + len]`, sorted, with
/// `next` giving for each value the child node (or, on the last axis, the index into `times`).
#[derive(Debug, Clone, PartialEq, Default)]
struct Nested<const N: usize> {
    /// The smallest value of each axis over all rows.
    lowest: Vec<f64>,
    nodes: Vec<(u32, u32)>,
    values: Vec<f64>,
    next: Vec<u32>,
    times: Vec<f64>,
}

impl<const N: usize> Nested<N> {
    fn new(rows: &[([u64; N], f64)]) -> Result<Nested<N>, GridError> {
        if let Some((index, &(_, time_ns))) = rows
            .iter()
            .enumerate()
            .find(|(_, (_, t))| !t.is_finite() || *t < 0.0)
        {
            return Err(GridError::BadTime { index, time_ns });
        }
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&i| (rows[i].0, i));
        if let Some(pair) = order.windows(2).find(|w| rows[w[0]].0 == rows[w[1]].0) {
            return Err(GridError::Duplicate {
                first: pair[0],
                second: pair[1],
            });
        }
        let sorted: Vec<([u64; N], f64)> = order.iter().map(|&i| rows[i]).collect();
        let mut grid = Nested::default();
        if !sorted.is_empty() {
            grid.build(&sorted, 0);
        }
        grid.lowest = (0..N)
            .map(|axis| {
                rows.iter()
                    .map(|(k, _)| k[axis] as f64)
                    .fold(f64::INFINITY, f64::min)
            })
            .collect();
        Ok(grid)
    }

    /// Adds the node for `rows` (sorted, sharing the values of the axes before `axis`) and its
    /// children; returns its index.
    fn build(&mut self, rows: &[([u64; N], f64)], axis: usize) -> u32 {
        let node = self.nodes.len();
        let start = self.values.len();
        let groups: Vec<&[([u64; N], f64)]> =
            rows.chunk_by(|a, b| a.0[axis] == b.0[axis]).collect();
        self.nodes.push((to_u32(start), to_u32(groups.len())));
        for group in &groups {
            self.values.push(group[0].0[axis] as f64);
            self.next.push(0);
        }
        for (i, group) in groups.iter().enumerate() {
            self.next[start + i] = if axis + 1 == N {
                self.times.push(group[0].1);
                to_u32(self.times.len() - 1)
            } else {
                self.build(group, axis + 1)
            };
        }
        to_u32(node)
    }

    /// The interpolated time at `q`, or `None` where nothing was measured for the query's
    /// regime (a zero count with no row at zero).
    /// `log_space` blends between two nonzero values by the logarithm of the size instead of
    /// the size (kept to measure the choice against; lookups use linear).
    fn at(&self, q: &[f64; N], kinds: &[AxisKind; N], log_space: bool) -> Option<f64> {
        if self.nodes.is_empty() {
            return None;
        }
        self.eval(0, 0, q, &Lookup { kinds, log_space })
            .map(|h| h.0)
    }

    /// The time at `q` from `node` (on `axis`) down, and whether the rows used reach down to the
    /// query on every axis from `axis` on (or to the grid's smallest value, for a query below).
    fn eval(&self, node: u32, axis: usize, q: &[f64; N], how: &Lookup<N>) -> Option<Hit> {
        let (start, len) = self.nodes[node as usize];
        let (start, n) = (start as usize, len as usize);
        let values = &self.values[start..start + n];
        let child = |i: usize| {
            let next = self.next[start + i];
            if axis + 1 == N {
                Some((self.times[next as usize], true))
            } else {
                self.eval(next, axis + 1, q, how)
            }
        };
        let x = q[axis];
        let count = how.kinds[axis] == AxisKind::Count;
        if count && x == 0.0 {
            return if values[0] == 0.0 { child(0) } else { None };
        }
        let hi = values.partition_point(|&v| v < x);
        if hi < n && values[hi] == x {
            return child(hi);
        }
        let lowest = self.lowest[axis];
        if hi == 0 {
            return child(0).map(|(t, spans)| (t, spans && values[0] <= lowest));
        }
        if hi == n {
            let top = child(n - 1)?;
            let t = match n {
                1 => top.0,
                _ => extrapolate(x, (values[n - 2], child(n - 2)), (values[n - 1], top.0)),
            };
            // Above a sub-grid's top counts as spanned: the bundles' sub-grids share their tops
            // (mixed steps stop at 128 decodes everywhere), so looking further finds nothing.
            return Some((t, top.1));
        }
        if count && values[hi - 1] == 0.0 {
            // Running any prefill (or decode) at all changes the kernel: the time at zero is
            // another regime, so the smallest nonzero point stands for the sizes below it.
            let first = child(hi);
            return match first {
                Some((_, true)) | None => first,
                Some(_) => (hi + 1..n.min(hi + SCAN))
                    .filter_map(child)
                    .find(|h| h.1)
                    .or(first),
            };
        }
        let (lo_hit, hi_hit) = (child(hi - 1), child(hi));
        let spanning = |i: usize, h: Option<Hit>| h.filter(|h| h.1).map(|h| (i, h.0));
        let below = spanning(hi - 1, lo_hit).or_else(|| {
            (hi.saturating_sub(SCAN)..hi - 1)
                .rev()
                .take_while(|&i| !(count && values[i] == 0.0))
                .find_map(|i| spanning(i, child(i)))
        });
        let above = spanning(hi, hi_hit)
            .or_else(|| (hi + 1..n.min(hi + SCAN)).find_map(|i| spanning(i, child(i))));
        if let (Some((i0, t0)), Some((i1, t1))) = (below, above) {
            return Some((
                blend(x, values[i0], t0, values[i1], t1, how.log_space),
                true,
            ));
        }
        match (lo_hit, hi_hit) {
            (Some((t0, _)), Some((t1, _))) => Some((
                blend(x, values[hi - 1], t0, values[hi], t1, how.log_space),
                false,
            )),
            (one, None) | (None, one) => one.map(|(t, _)| (t, false)),
        }
    }
}

/// A time and whether the rows it came from reach down to the query.
type Hit = (f64, bool);

/// How many of the measured values nearest a query, on each side, a bracket may choose from to
/// find rows that reach down to the query on the later axes.
const SCAN: usize = 3;

/// The time at `x` on the line through `(x0, t0)` and `(x1, t1)`, or through their logarithms
/// of size when `log_space` and `x0 > 0`.
fn blend(x: f64, x0: f64, t0: f64, x1: f64, t1: f64, log_space: bool) -> f64 {
    let w = if log_space && x0 > 0.0 {
        (x / x0).ln() / (x1 / x0).ln()
    } else {
        (x - x0) / (x1 - x0)
    };
    t0 + (t1 - t0) * w
}

/// How a lookup treats each axis.
struct Lookup<'a, const N: usize> {
    kinds: &'a [AxisKind; N],
    log_space: bool,
}

/// Beyond the top of an axis at `x`: the line through the second value `(x0, t0)` and the top
/// `(x1, t1)`, never below the top value (without a time at the second, the top value).
fn extrapolate(x: f64, (x0, t0): (f64, Option<Hit>), (x1, t1): (f64, f64)) -> f64 {
    match t0 {
        Some((t0, _)) => t1 + ((t1 - t0) / (x1 - x0)).max(0.0) * (x - x1),
        None => t1,
    }
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).expect("a grid of fewer than 2^32 rows")
}

const ATTENTION_AXES: [AxisKind; 4] = [
    AxisKind::Count,
    AxisKind::Length,
    AxisKind::Count,
    AxisKind::Length,
];

/// Measured attention kernel times on LLMServingSim's 4-D grid: `(prefill_chunk, kv_prefill,
/// n_decode, kv_decode) -> ns`, one layer, one rank.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AttentionGrid {
    rows: Vec<([u64; 4], f64)>,
    index: Nested<4>,
}

impl AttentionGrid {
    /// A grid of `rows`: `[prefill_chunk, kv_prefill, n_decode, kv_decode]` and ns, any order,
    /// any subset of points (see [`AttentionGrid::at`] for how gaps are bridged).
    pub fn new(rows: Vec<([u64; 4], f64)>) -> Result<AttentionGrid, GridError> {
        let index = Nested::new(&rows)?;
        Ok(AttentionGrid { rows, index })
    }

    /// The measured rows, in the order given.
    pub fn rows(&self) -> &[([u64; 4], f64)] {
        &self.rows
    }

    /// The attention time of one layer, ns, for a step with a prefill chunk of `prefill_chunk`
    /// tokens attending to `kv_prefill` tokens of history, and `n_decode` decodes each attending
    /// to `kv_decode` tokens.
    ///
    /// Each axis is bracketed by the two nearest measured values whose rows reach the query and
    /// blended linearly in the value, nested axis by axis (the module doc's rule for a partial
    /// grid). Linear in the value rather than in its logarithm, measured: with every other
    /// interior value of one axis held out in turn, linear predicts the held-out rows better on
    /// every axis of both shipped bundles (RTX 4090 Llama-3.1-8B, median error 0.3-1.2% linear
    /// against 2.5-7.9% log-space; the test
    /// `linear_interpolation_predicts_held_out_attention_better_than_log_space`). Edges:
    /// - beyond an axis's top, the line through its top two values, never below the top value;
    /// - `prefill_chunk` or `n_decode` of 0 reads only rows measured at 0 on that axis (no
    ///   prefill, or no decodes); a nonzero value below the smallest nonzero measured one takes
    ///   that one's time (the kernel switches when the work appears: on the RTX 4090, 8 decodes
    ///   at 1024 tokens of KV take 56 us alone and 89 us beside a 16- or 32-token chunk, so a
    ///   line from zero is wrong; held out, it tripled the p90 error);
    /// - a KV length below the smallest measured takes its time; between 0 and the first
    ///   nonzero length where 0 is measured, linear;
    /// - a step with neither prefill nor decodes, or an empty grid, is 0.
    ///
    /// Allocates nothing: a binary search per axis and, on a full grid, 16 rows blended.
    pub fn at(&self, prefill_chunk: u64, kv_prefill: u64, n_decode: u64, kv_decode: u64) -> f64 {
        self.lookup(prefill_chunk, kv_prefill, n_decode, kv_decode, false)
    }

    /// [`AttentionGrid::at`] blending in log-space between nonzero values when `log_space`.
    fn lookup(&self, pc: u64, kp: u64, nd: u64, kd: u64, log_space: bool) -> f64 {
        if pc == 0 && nd == 0 {
            return 0.0;
        }
        let q = [pc as f64, kp as f64, nd as f64, kd as f64];
        self.index.at(&q, &ATTENTION_AXES, log_space).unwrap_or(0.0)
    }

    /// [`AttentionGrid::at`] with log-space blending, to measure the choice of linear against.
    #[cfg(test)]
    pub(crate) fn at_log_space(&self, pc: u64, kp: u64, nd: u64, kd: u64) -> f64 {
        self.lookup(pc, kp, nd, kd, true)
    }
}

const MOE_AXES: [AxisKind; 2] = [AxisKind::Count, AxisKind::Count];

/// Measured mixture-of-experts block times: `(tokens on the rank, experts activated) -> ns`, one
/// layer, one rank.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MoeGrid {
    rows: Vec<([u64; 2], f64)>,
    index: Nested<2>,
}

impl MoeGrid {
    /// A grid of `rows`: `[tokens, activated_experts]` and ns, any order, any subset of points.
    pub fn new(rows: Vec<([u64; 2], f64)>) -> Result<MoeGrid, GridError> {
        let index = Nested::new(&rows)?;
        Ok(MoeGrid { rows, index })
    }

    /// The measured rows, in the order given.
    pub fn rows(&self) -> &[([u64; 2], f64)] {
        &self.rows
    }

    /// The block time of one layer on one rank, ns, for `tokens` routed to the rank activating
    /// `experts` distinct experts there. The rule is the attention grid's ([`AttentionGrid::at`]):
    /// nested, linear in the value between the two bracketing measured values on each axis (no
    /// MoE bundle is shared to measure log-space against, and linear won on every attention
    /// axis); beyond the top, the line through the top two values, never below the top; below
    /// the smallest measured value, its time. No tokens or no experts: 0.
    pub fn at(&self, tokens: u64, experts: u64) -> f64 {
        if tokens == 0 || experts == 0 {
            return 0.0;
        }
        self.index
            .at(&[tokens as f64, experts as f64], &MOE_AXES, false)
            .unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(rows: &[([u64; 4], f64)]) -> AttentionGrid {
        AttentionGrid::new(rows.to_vec()).unwrap()
    }

    #[test]
    fn a_full_grid_interpolates_multilinearly_and_returns_measured_points_exactly() {
        // t = 1000 + 10 pc + kp + 100 nd + 2 kd, on a 2x2x2x2 grid: multilinear is exact.
        let f = |k: [u64; 4]| 1000.0 + 10.0 * k[0] as f64 + k[1] as f64 + 100.0 * k[2] as f64;
        let f = move |k: [u64; 4]| f(k) + 2.0 * k[3] as f64;
        let mut rows = Vec::new();
        for pc in [16, 32] {
            for kp in [0, 64] {
                for nd in [1, 4] {
                    for kd in [16, 48] {
                        rows.push(([pc, kp, nd, kd], f([pc, kp, nd, kd])));
                    }
                }
            }
        }
        let g = grid(&rows);
        assert_eq!(g.at(32, 64, 4, 48), f([32, 64, 4, 48]));
        let q = [20, 16, 2, 32];
        assert!((g.at(q[0], q[1], q[2], q[3]) - f(q)).abs() < 1e-9);
    }

    #[test]
    fn beyond_the_top_the_line_through_the_top_two_values_never_falls() {
        let g = grid(&[
            ([0, 0, 1, 16], 10.0),
            ([0, 0, 1, 32], 20.0),
            ([0, 0, 2, 16], 30.0),
            ([0, 0, 2, 32], 25.0),
        ]);
        assert_eq!(
            g.at(0, 0, 1, 64),
            40.0,
            "kv_decode above the top follows the slope"
        );
        assert_eq!(
            g.at(0, 0, 2, 64),
            25.0,
            "a falling top segment is held flat"
        );
        assert_eq!(
            g.at(0, 0, 4, 16),
            70.0,
            "n_decode above the top follows the slope"
        );
    }

    #[test]
    fn below_the_smallest_chunk_the_smallest_chunk_stands_and_zero_reads_only_zero_rows() {
        let g = grid(&[
            ([0, 0, 8, 1024], 56.0),
            ([32, 0, 8, 1024], 90.0),
            ([64, 0, 8, 1024], 100.0),
            ([32, 0, 0, 0], 10.0),
        ]);
        assert_eq!(g.at(0, 0, 8, 1024), 56.0, "pure decode");
        assert_eq!(
            g.at(16, 0, 8, 1024),
            90.0,
            "a small chunk takes the first chunk's time"
        );
        assert_eq!(g.at(48, 0, 8, 1024), 95.0);
        assert_eq!(
            g.at(16, 0, 0, 0),
            10.0,
            "a prefill alone below the first chunk"
        );
        assert_eq!(g.at(0, 0, 0, 0), 0.0, "nothing to attend");
        assert_eq!(
            g.at(0, 0, 8, 100),
            56.0,
            "below the first KV length, its time"
        );
    }

    #[test]
    fn a_partial_grid_brackets_each_axis_among_the_values_measured_under_its_brackets() {
        // Under chunk 16 the KV axis has 0 and 512; under 32, only 0 and 1024.
        let g = grid(&[
            ([16, 0, 0, 0], 10.0),
            ([16, 512, 0, 0], 20.0),
            ([32, 0, 0, 0], 30.0),
            ([32, 1024, 0, 0], 50.0),
        ]);
        // At chunk 16, kv 256 -> 15; at chunk 32, kv 256 -> 35; halfway -> 25.
        assert_eq!(g.at(24, 256, 0, 0), 25.0);
    }

    #[test]
    fn a_bracket_whose_rows_miss_the_query_gives_way_to_the_nearest_one_whose_rows_span_it() {
        // Chunk 24 was measured only at 512 tokens of KV, like a densified bundle's extra chunks.
        let g = grid(&[
            ([16, 0, 1, 16], 10.0),
            ([16, 0, 1, 512], 50.0),
            ([24, 0, 1, 512], 60.0),
            ([32, 0, 1, 16], 20.0),
            ([32, 0, 1, 512], 70.0),
        ]);
        assert_eq!(
            g.at(28, 0, 1, 16),
            17.5,
            "between chunks 16 and 32, not 24's 512-KV row"
        );
        assert_eq!(g.at(28, 0, 1, 512), 65.0, "chunk 24 spans a 512-token KV");
    }

    #[test]
    fn duplicate_points_and_bad_times_are_refused_naming_the_rows() {
        let dup = AttentionGrid::new(vec![
            ([0, 0, 1, 16], 1.0),
            ([0, 0, 2, 16], 1.0),
            ([0, 0, 1, 16], 2.0),
        ]);
        assert_eq!(
            dup.unwrap_err(),
            GridError::Duplicate {
                first: 0,
                second: 2
            }
        );
        let nan = MoeGrid::new(vec![([1, 1], 1.0), ([2, 1], f64::NAN)]).unwrap_err();
        assert!(
            matches!(nan, GridError::BadTime { index: 1, .. }),
            "{nan:?}"
        );
    }

    #[test]
    fn moe_interpolates_tokens_and_experts_and_is_zero_without_tokens() {
        let g = MoeGrid::new(vec![
            ([1, 8], 50.0),
            ([2, 8], 56.0),
            ([1, 16], 70.0),
            ([2, 16], 80.0),
        ])
        .unwrap();
        assert_eq!(g.at(2, 12), 68.0);
        assert_eq!(
            g.at(4, 8),
            68.0,
            "tokens beyond the top follow the top slope"
        );
        assert_eq!(g.at(0, 8), 0.0);
        assert_eq!(
            g.at(1, 4),
            50.0,
            "fewer experts than measured: the smallest's time"
        );
        assert_eq!(MoeGrid::default().at(3, 3), 0.0);
    }
}
