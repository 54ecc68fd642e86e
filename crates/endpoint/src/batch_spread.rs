//! The compute's spread from batch to batch, measured through the server (`capsim calibrate
//! --endpoint`): batches run one at a time, each alone on the server, its compute read from the
//! server's own statistics before and after it.
//!
//! A server's statistics hold sums, so a batch's own time shows only where it is the one batch
//! of its size between two readings. Each round sends that batch behind a *blocker*, one long
//! request per model instance that keeps the instance busy while the batch's requests arrive,
//! so that they queue and leave as one batch of their size (Triton's batcher would otherwise
//! send the first preferred size that arrived). A round counts where the statistics show the
//! blockers and exactly one batch of its size. A batch of one is sent alone.
//!
//! Why: on a shared machine (the 2-core VM, 2026-12-07) batches of the same requests took
//! 0.6-2x their mean, each on its own, besides the slower and faster seconds the open loops'
//! windows read ([`crate::ServerCalibration::apply_speed_levels`]). A long batch that meets a
//! burst leaves a backlog that the mean does not; the simulation draws the measured ratios back
//! (`service.residuals`).

use capsim_trace::{Columns, Trace};

use crate::validation::triton::{ModelStats, model_stats};
use crate::{EndpointError, EndpointOptions, LoadMode, Reporting, replay};

/// Rounds of each batch size.
pub const SPREAD_ROUNDS: usize = 40;

/// The fewest batches of a size that count before their ratios do: fewer give no mean to
/// measure them by.
pub const MIN_BATCHES_PER_SIZE: usize = 10;

/// How the rounds are sent: the sizes, and what the server's batcher waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct SpreadPlan {
    /// The batch sizes measured, each [`SPREAD_ROUNDS`] times (the rounds interleave them).
    pub sizes: Vec<u32>,
    /// The batcher's longest wait for a fuller batch, ns: a lone blocker leaves after it.
    pub max_queue_delay_ns: u64,
    /// Model instances, one blocker each.
    pub instances: u32,
}

impl SpreadPlan {
    /// Powers of two up to `max_batch_size`, and `max_batch_size` itself: the sizes an open loop
    /// runs, from one to full.
    pub fn new(max_batch_size: u32, max_queue_delay_ns: u64, instances: u32) -> SpreadPlan {
        let max = max_batch_size.max(1);
        let mut sizes: Vec<u32> = std::iter::successors(Some(1u32), |&c| c.checked_mul(2))
            .take_while(|&c| c < max)
            .collect();
        sizes.push(max);
        SpreadPlan {
            sizes,
            max_queue_delay_ns,
            instances: instances.max(1),
        }
    }

    /// Between one blocker's arrival and the next: the batcher's wait and half a millisecond,
    /// so that each leaves alone for an instance of its own.
    fn step_ns(&self) -> u64 {
        self.max_queue_delay_ns + 500_000
    }

    /// A round's requests: for a batch of more than one, a blocker of `blocker_tokens` per
    /// instance, then, while they run, the batch of `lengths`, all at once.
    fn round(&self, lengths: &[u32], blocker_tokens: u32) -> Columns {
        let blockers = if lengths.len() > 1 { self.instances } else { 0 };
        let mut columns = Columns::default();
        for k in 0..blockers {
            columns.arrival_ns.push(u64::from(k) * self.step_ns());
            columns.input_tokens.push(blocker_tokens);
        }
        let at = u64::from(blockers) * self.step_ns();
        for &n in lengths {
            columns.arrival_ns.push(at);
            columns.input_tokens.push(n);
        }
        columns
    }
}

/// One size's batches, each alone on the server.
#[derive(Debug, Clone, PartialEq)]
pub struct IsolatedBatches {
    /// Requests per batch.
    pub size: u32,
    /// Rounds sent.
    pub rounds: usize,
    /// The compute of each round that ran as one batch of this size (input, inference and
    /// output, Triton's `compute_*`), ns, in the order sent.
    pub compute_ns: Vec<u64>,
}

impl IsolatedBatches {
    /// Whether enough batches ran alone ([`MIN_BATCHES_PER_SIZE`]) for their ratios to count.
    pub fn counts(&self) -> bool {
        self.compute_ns.len() >= MIN_BATCHES_PER_SIZE
    }

    /// Each batch's compute over its size's mean; none unless it [`counts`](Self::counts).
    pub fn ratios(&self) -> Vec<f64> {
        if !self.counts() {
            return Vec::new();
        }
        let mean = self.compute_ns.iter().sum::<u64>() as f64 / self.compute_ns.len() as f64;
        self.compute_ns.iter().map(|&ns| ns as f64 / mean).collect()
    }
}

/// Sends [`SPREAD_ROUNDS`] rounds of each of `plan`'s sizes (a batch of the trace's first
/// requests of that size, their lengths cut to `options.max_input_tokens`; its blockers as long
/// as the server takes), reading the server's statistics before and after each, and returns
/// each size's batches that ran alone. An error when the server stops answering.
pub fn isolated_batches(
    trace: &Trace,
    options: &EndpointOptions,
    plan: &SpreadPlan,
) -> Result<Vec<IsolatedBatches>, EndpointError> {
    let lengths: Vec<u32> = trace
        .input_tokens()
        .iter()
        .map(|&n| n.clamp(1, options.max_input_tokens.max(1)))
        .collect();
    let open = EndpointOptions {
        mode: LoadMode::Open,
        ..options.clone()
    };
    // Each size's round, the same every time: its requests and its blockers (none where the
    // trace holds fewer requests than the size).
    let mut rounds = Vec::with_capacity(plan.sizes.len());
    for &size in &plan.sizes {
        let Some(batch) = lengths.get(..size as usize) else {
            rounds.push(None);
            continue;
        };
        let round = plan.round(batch, options.max_input_tokens.max(1));
        let blockers = (round.arrival_ns.len() - batch.len()) as u64;
        let round = Trace::from_columns(round).map_err(|e| EndpointError::Protocol {
            url: options.base_url.clone(),
            message: format!("building a round of {size} for the compute's spread: {e}"),
        })?;
        rounds.push(Some((round, blockers)));
    }
    let mut measured: Vec<IsolatedBatches> = plan
        .sizes
        .iter()
        .map(|&size| IsolatedBatches {
            size,
            rounds: 0,
            compute_ns: Vec::new(),
        })
        .collect();
    // One reading between two rounds: the last round's after is the next one's before.
    let mut before = model_stats(&options.base_url, &options.model)?;
    for _ in 0..SPREAD_ROUNDS {
        for (batches, round) in measured.iter_mut().zip(&rounds) {
            let Some((round, blockers)) = round else {
                continue;
            };
            let run = replay(round, &open, &Reporting::default())?;
            let after = model_stats(&options.base_url, &options.model)?;
            batches.rounds += 1;
            let all_answered = run.summary.requests.completed == run.summary.requests.total;
            if all_answered && let Some(ns) = alone(&after.since(&before), batches.size, *blockers)
            {
                batches.compute_ns.push(ns);
            }
            before = after;
        }
    }
    Ok(measured)
}

/// The compute of the one batch of `size` in `since`, when it holds that batch and `blockers`
/// more executions and nothing else.
fn alone(since: &ModelStats, size: u32, blockers: u64) -> Option<u64> {
    if since.execution_count != blockers + 1 {
        return None;
    }
    let batch = since.batch_stats.iter().find(|b| b.batch_size == size)?;
    (batch.executions() == 1).then(|| batch.compute_ns())
}

/// The ratios of every size that has enough batches, pooled, sorted.
pub fn pooled_ratios(spread: &[IsolatedBatches]) -> Vec<f64> {
    let mut ratios: Vec<f64> = spread.iter().flat_map(IsolatedBatches::ratios).collect();
    ratios.sort_by(f64::total_cmp);
    ratios
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::triton::BatchStats;

    fn stats(executions: u64, batches: &[(u32, u64, u64)]) -> ModelStats {
        let mut stats = ModelStats {
            execution_count: executions,
            ..ModelStats::default()
        };
        for &(batch_size, count, ns) in batches {
            let mut b = BatchStats {
                batch_size,
                ..BatchStats::default()
            };
            b.compute_infer.count = count;
            b.compute_infer.ns = ns;
            stats.batch_stats.push(b);
        }
        stats
    }

    #[test]
    fn the_sizes_run_from_one_to_full_and_a_round_queues_its_batch_behind_each_blocker() {
        let plan = SpreadPlan::new(24, 2_000_000, 2);
        assert_eq!(plan.sizes, vec![1, 2, 4, 8, 16, 24]);
        assert_eq!(SpreadPlan::new(1, 0, 1).sizes, vec![1]);
        let round = plan.round(&[10, 20, 30], 512);
        assert_eq!(round.input_tokens, vec![512, 512, 10, 20, 30]);
        assert_eq!(
            round.arrival_ns,
            vec![0, 2_500_000, 5_000_000, 5_000_000, 5_000_000]
        );
        let alone = plan.round(&[7], 512);
        assert_eq!((alone.arrival_ns, alone.input_tokens), (vec![0], vec![7]));
    }

    #[test]
    fn a_round_counts_only_where_its_batch_ran_alone_beside_its_blockers() {
        // The blocker (a batch of one) and the batch of 8.
        let ran = stats(2, &[(1, 1, 6_000_000), (8, 1, 3_000_000)]);
        assert_eq!(alone(&ran, 8, 1), Some(3_000_000));
        // The batch split in two (8 = 4 + 4), or a blocker joined it.
        assert_eq!(alone(&stats(3, &[(1, 1, 6), (4, 2, 5)]), 8, 1), None);
        assert_eq!(alone(&stats(1, &[(9, 1, 6)]), 8, 1), None);
        // A batch of one is sent alone.
        assert_eq!(alone(&stats(1, &[(1, 1, 900_000)]), 1, 0), Some(900_000));
        assert_eq!(alone(&stats(2, &[(1, 2, 900_000)]), 1, 0), None);
    }

    #[test]
    fn the_ratios_are_each_batch_over_its_size_mean_and_a_thin_size_gives_none() {
        let full = IsolatedBatches {
            size: 4,
            rounds: 12,
            compute_ns: [1, 1, 1, 1, 1, 1, 1, 1, 1, 3]
                .map(|k| k * 1_000_000)
                .to_vec(),
        };
        let r = full.ratios();
        assert_eq!(r.len(), 10);
        assert!((r[9] - 3.0 / 1.2).abs() < 1e-12 && (r[0] - 1.0 / 1.2).abs() < 1e-12);
        let thin = IsolatedBatches {
            size: 8,
            rounds: 40,
            compute_ns: vec![5; MIN_BATCHES_PER_SIZE - 1],
        };
        assert!(thin.ratios().is_empty());
        let pooled = pooled_ratios(&[full, thin]);
        assert_eq!(pooled.len(), 10);
        assert!(pooled.windows(2).all(|w| w[0] <= w[1]));
    }
}
