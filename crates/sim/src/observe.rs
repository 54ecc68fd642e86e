//! Observation of a run, apart from the engine's kernel: the timeseries sampled at each interval
//! (and thinned when it reaches its cap), the time-weighted figures, and the building of the
//! summary at the end from the streaming counters, the model instances' busy times and the
//! continuous batchers' statistics.

use crate::context::Ctx;
use crate::instance::Fleet;
use crate::llm::prefix::PrefixStats;
use crate::llm::scheduler::Scheduler;
use crate::summary::{InstanceUtilization, LlmSummary, STAGES, Summary};
use crate::time::SimTime;
use crate::timeseries::{IntervalCounters, State, Timeseries};

/// What a run produced besides per-request records.
#[derive(Debug, Clone)]
pub struct Run {
    /// The summary.
    pub summary: Summary,
    /// The sampled timeseries.
    pub timeseries: Timeseries,
}

/// A stage of a request's path, in the order of [`STAGES`]: the span between two of its
/// record's timestamps, and the whole path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    EndToEnd,
    NetworkIn,
    Gateway,
    Preprocess,
    Queue,
    Execution,
    Postprocess,
    NetworkOut,
}

impl Stage {
    /// Every stage, in the order of [`STAGES`].
    pub const ALL: [Stage; 8] = [
        Stage::EndToEnd,
        Stage::NetworkIn,
        Stage::Gateway,
        Stage::Preprocess,
        Stage::Queue,
        Stage::Execution,
        Stage::Postprocess,
        Stage::NetworkOut,
    ];

    /// Its key in the summary.
    #[cfg(test)]
    pub fn name(self) -> &'static str {
        STAGES[self as usize]
    }
}

const _: () = assert!(Stage::ALL.len() == STAGES.len());

/// A set of [`Stage`]s, as bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct StageSet(u8);

impl StageSet {
    /// This set with `stage` in it when `on`.
    pub const fn with(self, stage: Stage, on: bool) -> StageSet {
        StageSet(self.0 | ((on as u8) << stage as u8))
    }

    /// Whether `stage` is in the set.
    pub const fn contains(self, stage: Stage) -> bool {
        self.0 & (1 << stage as u8) != 0
    }

    /// One flag per stage, in the order of [`STAGES`] (the summary's form).
    pub fn flags(self) -> [bool; STAGES.len()] {
        Stage::ALL.map(|s| self.contains(s))
    }
}

/// The timeseries being sampled, and what the summary needs at the end.
pub(crate) struct Observer {
    /// Interval between samples, in nanoseconds (doubled each time the series is thinned).
    pub interval_ns: u64,
    /// The interval the scenario asked for, in nanoseconds.
    pub configured_interval_ns: u64,
    /// Rows the timeseries may hold (even): reaching it merges rows in pairs and doubles
    /// `interval_ns`.
    pub max_rows: usize,
    pub next_sample: SimTime,
    pub last_sample: SimTime,
    pub timeseries: Timeseries,
    /// Integral of the requests in the system over time, in request-nanoseconds.
    pub in_system_area: u128,
    /// Whether the run has continuous batchers (their state is sampled too).
    pub has_llm: bool,
    pub scenario_name: String,
    pub pool_names: Vec<String>,
    pub seed: u64,
}

impl Observer {
    /// Integrates the time-weighted state from the clock to `t`, and moves the clock there.
    #[inline]
    pub fn integrate(&mut self, ctx: &mut Ctx, t: SimTime) {
        let dt = u128::from(t - ctx.now);
        self.in_system_area += u128::from(ctx.counters.in_system) * dt;
        ctx.interval.busy_area += u128::from(ctx.counters.busy_model_instances) * dt;
        ctx.now = t;
    }

    /// Emits the timeseries rows due up to `t` (the clock then integrates up to it).
    #[inline]
    pub fn sample_until(&mut self, ctx: &mut Ctx, fleet: &Fleet, t: SimTime) {
        while self.next_sample <= t {
            let boundary = self.next_sample;
            self.integrate(ctx, boundary);
            self.sample(ctx, fleet, boundary);
            if self.timeseries.len() >= self.max_rows {
                // Rows so far end at multiples of the interval and their count is even, so
                // merging pairs leaves the series sampled at twice the interval.
                self.timeseries.merge_pairs();
                self.interval_ns = self.interval_ns.saturating_mul(2);
            }
            self.next_sample = boundary + self.interval_ns;
        }
    }

    fn sample(&mut self, ctx: &mut Ctx, fleet: &Fleet, at: SimTime) {
        let state = State {
            queued: ctx.counters.queued,
            preprocess_waiting: ctx.counters.preprocess_waiting,
            in_system: ctx.counters.in_system,
            busy_model_instances: ctx.counters.busy_model_instances,
        };
        let length_ns = at - self.last_sample;
        self.timeseries.push(
            at.ns(),
            length_ns,
            fleet.model_instances.len() as u32,
            state,
            &ctx.interval,
        );
        if self.has_llm {
            // Kept up to date step by step: a sample costs the same with one server or 100,000.
            self.timeseries.push_llm(ctx.llm_state);
        }
        ctx.interval = IntervalCounters::default();
        self.last_sample = at;
    }

    /// The run's summary and timeseries, at its end (the clock). `extrapolated_batches` are by
    /// pool; `schedulers` are the continuous batchers, which sampled `left_tokens` output
    /// tokens for the requests that left them (finished, or aborted by their client).
    pub fn finish<'s>(
        mut self,
        mut ctx: Ctx,
        fleet: &Fleet,
        extrapolated_batches: impl Iterator<Item = u64>,
        schedulers: impl Iterator<Item = &'s mut Scheduler>,
        left_tokens: u64,
    ) -> Run {
        let end = ctx.now;
        if end > self.last_sample {
            self.sample(&mut ctx, fleet, end);
        }
        let end_ns = end.ns();
        if self.has_llm {
            ctx.summary
                .set_llm(llm_summary(schedulers, left_tokens, end_ns));
        }
        let utilization = fleet
            .model_instances
            .iter()
            .map(|mi| {
                let instance = &fleet.instances[mi.instance.index()];
                InstanceUtilization {
                    pool: self.pool_names[instance.pool.index()].clone(),
                    instance: instance.index_in_pool,
                    model_instance: mi.index_in_instance,
                    batches: mi.batches,
                    busy_s: mi.busy_ns as f64 * 1e-9,
                    utilization: if end_ns == 0 {
                        0.0
                    } else {
                        mi.busy_ns as f64 / end_ns as f64
                    },
                }
            })
            .collect();
        for (batches, name) in extrapolated_batches.zip(&self.pool_names) {
            ctx.summary.add_extrapolated_batches(name, batches);
        }
        let mean_in_system = if end_ns == 0 {
            0.0
        } else {
            self.in_system_area as f64 / end_ns as f64
        };
        let mut summary = ctx.summary.finish(
            &self.scenario_name,
            self.seed,
            utilization,
            mean_in_system,
            end_ns,
        );
        summary.set_timeseries_interval(self.interval_ns, self.configured_interval_ns);
        Run {
            summary,
            timeseries: self.timeseries,
        }
    }
}

/// The continuous batchers' section of the summary, checking that every output token sampled
/// belongs to a request that left its scheduler (`left_tokens`: finished, or aborted).
fn llm_summary<'s>(
    schedulers: impl Iterator<Item = &'s mut Scheduler>,
    left_tokens: u64,
    end_ns: u64,
) -> LlmSummary {
    let mut llm = LlmSummary::default();
    let (mut seqs, mut tokens, mut kv_block_ns) = (0u64, 0u64, 0u128);
    let mut prefix = PrefixStats::default();
    for scheduler in schedulers {
        assert!(
            scheduler.is_idle(),
            "a continuous batcher still holds requests"
        );
        scheduler.finish(end_ns);
        let s = scheduler.stats();
        llm.steps += s.steps;
        seqs += s.step_seqs;
        tokens += s.step_tokens;
        llm.preemptions += s.preemptions;
        llm.recomputed_tokens += s.recomputed_tokens;
        llm.output_tokens += s.output_tokens;
        prefix.prompt_tokens += s.prefix.prompt_tokens;
        prefix.cached_prompt_tokens += s.prefix.cached_prompt_tokens;
        llm.kv_blocks_total += u64::from(scheduler.kv_total());
        kv_block_ns += s.kv_in_use_block_ns;
        llm.kv_utilization_max = llm
            .kv_utilization_max
            .max(f64::from(s.kv_in_use_max) / f64::from(scheduler.kv_total()));
    }
    assert_eq!(
        llm.output_tokens, left_tokens,
        "output tokens sampled != output tokens of the requests that finished or were aborted"
    );
    let per_step = |n: u64| {
        if llm.steps == 0 {
            0.0
        } else {
            n as f64 / llm.steps as f64
        }
    };
    llm.mean_seqs_per_step = per_step(seqs);
    llm.mean_tokens_per_step = per_step(tokens);
    llm.prompt_tokens = prefix.prompt_tokens;
    llm.cached_prompt_tokens = prefix.cached_prompt_tokens;
    llm.prefix_cache_hit_rate = prefix.hit_rate();
    llm.kv_utilization_mean = if end_ns == 0 || llm.kv_blocks_total == 0 {
        0.0
    } else {
        kv_block_ns as f64 / (llm.kv_blocks_total as f64 * end_ns as f64)
    };
    llm
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_set_gives_one_flag_per_stage_in_the_summary_order() {
        let set = StageSet::default()
            .with(Stage::NetworkIn, true)
            .with(Stage::Postprocess, true)
            .with(Stage::Queue, false);
        assert!(set.contains(Stage::NetworkIn) && !set.contains(Stage::Queue));
        assert_eq!(
            set.flags(),
            [false, true, false, false, false, false, true, false]
        );
        assert_eq!(Stage::NetworkOut.name(), "network_out");
        assert_eq!(Stage::Postprocess.name(), STAGES[6]);
    }
}
