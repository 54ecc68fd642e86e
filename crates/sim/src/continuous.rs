//! One instance's continuous batcher at work (vLLM's engine loop): each step is planned by its
//! [`Scheduler`] from the requests it holds and those the instance queue hands it, runs for the
//! step-time model's time, and emits one token per running request; the gaps between a
//! request's tokens are measured here.

use std::sync::Arc;

use capsim_trace::ListColumn;

use crate::context::{Ctx, Place};
use crate::instance::{Site, begin_execution};
use crate::llm::scheduler::{NewSeq, Scheduler, Step, Token, Unservable};
use crate::queue::{InstanceQueue, is_live};
use crate::record::RejectReason;
use crate::rng::SimRng;
use crate::scenario::LlmPool;
use crate::timeseries::LlmState;
use crate::timing::step_spread::{CudaGraphs, StepResiduals};

/// What one continuous batcher holds, as the timeseries counts it.
#[derive(Clone, Copy)]
struct Occupancy {
    running: u32,
    held: u32,
    kv_blocks_in_use: u32,
}

impl Occupancy {
    fn of(scheduler: &Scheduler) -> Occupancy {
        Occupancy {
            running: scheduler.running(),
            held: scheduler.held(),
            kv_blocks_in_use: scheduler.kv_in_use(),
        }
    }

    /// Moves the totals in `state` from `before` to this occupancy.
    fn update(self, before: Occupancy, state: &mut LlmState) {
        state.running = state.running + self.running - before.running;
        state.waiting = state.waiting + self.held - before.held;
        state.kv_blocks_in_use = state.kv_blocks_in_use + u64::from(self.kv_blocks_in_use)
            - u64::from(before.kv_blocks_in_use);
    }
}

/// What the continuous batchers share: the trace's prefix blocks, a buffer for a step's
/// tokens, and the counts of output tokens of requests that left a scheduler.
pub(crate) struct Continuous<'a> {
    pub prefix_blocks: Option<&'a ListColumn>,
    /// Tokens of the step being completed (capacity kept between steps).
    pub token_buf: Vec<Token>,
    /// Output tokens of requests whose generation ran to its last token (checked, with
    /// `aborted_tokens`, against the samples).
    pub completed_tokens: u64,
    /// Output tokens sampled for requests whose client gave up before their last token.
    pub aborted_tokens: u64,
}

impl Continuous<'_> {
    /// Gives `token` to its request; true when it was the request's last (its execution is
    /// over).
    #[inline]
    pub fn emit(&mut self, ctx: &mut Ctx, token: Token) -> bool {
        let now = ctx.now.ns();
        let t = &mut ctx.tickets[token.ticket];
        debug_assert_eq!(t.place, Place::Executing);
        if token.index == 0 {
            t.record.first_token_ns = now;
        } else if t.measured {
            ctx.summary.add_inter_token_ns(now - t.last_token_ns);
        }
        t.last_token_ns = now;
        if token.last {
            t.record.exec_end_ns = now;
            self.completed_tokens += u64::from(token.index + 1);
        }
        token.last
    }
}

/// The continuous batcher of one instance (one model instance, which runs its steps).
///
/// Scheduling ahead (vLLM V1 with `async_scheduling`): vLLM's engine core keeps a queue of two
/// scheduled steps, so while step k runs, step k+1 is already scheduled, and the next
/// scheduling (of k+2) happens when step k's outputs are in. A request that joins during step
/// k is thus first scheduled in k+2. Here the scheduler still plans each step at its start
/// (running requests see no staleness); only requests from the instance queue wait: one that
/// joined after `steps_started` was `s` is taken at the first plan with `steps_started >= s +
/// schedule_ahead_steps`, or at once when the plan would otherwise be empty (the engine would
/// go idle, and vLLM schedules a request that finds the batch queue empty at once).
pub(crate) struct ContinuousInstance {
    pub scheduler: Scheduler,
    /// Steps scheduled ahead of the running one (`batcher.schedule_ahead_steps`).
    schedule_ahead_steps: u64,
    /// Steps started so far.
    steps_started: u64,
    /// The CUDA graphs a step is padded to for its time (`batcher.cuda_graph_sizes`).
    cuda_graphs: Arc<CudaGraphs>,
    /// `batcher.step_residuals`, and the stream they are drawn from (untouched without them).
    residuals: Option<Arc<StepResiduals>>,
    residuals_rng: SimRng,
}

impl ContinuousInstance {
    /// An idle instance of `pool`, its residual factors drawn from `residuals_rng`.
    pub fn new(pool: &LlmPool, residuals_rng: SimRng) -> ContinuousInstance {
        ContinuousInstance {
            scheduler: Scheduler::new(pool.scheduler.clone()),
            schedule_ahead_steps: u64::from(pool.schedule_ahead_steps),
            steps_started: 0,
            cuda_graphs: pool.cuda_graphs.clone(),
            residuals: pool.step_residuals.clone(),
            residuals_rng,
        }
    }

    /// Steps started so far: a request joining the queue now keeps it
    /// ([`crate::context::Ticket::steps_at_join`]).
    #[inline]
    pub fn steps_started(&self) -> u64 {
        self.steps_started
    }

    /// Why a request of these sizes can never be served here, if it cannot.
    #[inline]
    pub fn unservable(&self, input_tokens: u32, output_tokens: u32) -> Option<RejectReason> {
        self.scheduler
            .config()
            .unservable(input_tokens, output_tokens)
            .map(|why| match why {
                Unservable::KvCapacity => RejectReason::KvCapacity,
                Unservable::PromptTooLong => RejectReason::PromptTooLong,
            })
    }

    /// Plans and starts the next step, when the model instance is free and there is work.
    pub fn plan_step(&mut self, ctx: &mut Ctx, site: Site<'_>, prefix_blocks: Option<&ListColumn>) {
        let now = ctx.now.ns();
        let instance = site.instance;
        let mi_index = instance.first_model_instance;
        let mi = &mut site.model_instances[mi_index as usize];
        if !mi.is_free() {
            return;
        }
        let before = Occupancy::of(&self.scheduler);
        let mut taken = 0u32;
        let mut planned =
            self.plan_from_queue(ctx, &mut instance.queue, prefix_blocks, true, &mut taken);
        if planned.is_none() && self.schedule_ahead_steps > 0 && !instance.queue.is_empty() {
            // Nothing would run: the engine would go idle, so it schedules what has joined now.
            planned =
                self.plan_from_queue(ctx, &mut instance.queue, prefix_blocks, false, &mut taken);
        }
        ctx.counters.queued -= taken;
        ctx.llm_state.waiting -= taken;
        Occupancy::of(&self.scheduler).update(before, &mut ctx.llm_state);
        for &ticket in self.scheduler.admitted() {
            let t = &mut ctx.tickets[ticket];
            t.record.exec_start_ns = now;
            t.record.model_instance = mi.index_in_instance;
        }
        let Some(step) = planned else {
            return;
        };
        self.steps_started += 1;
        let execution = site.execution;
        let step_time = execution
            .step_time
            .as_ref()
            .expect("a continuous pool has a step-time model");
        // The time is the padded step's; the scheduler's decisions (and `seqs` below) stay
        // those of the real one.
        let computed = self.cuda_graphs.pad(&step.batch);
        let mut gpu_ns = step_time.sample_ns(&computed, &mut execution.rng);
        if let Some(residuals) = &self.residuals {
            gpu_ns = residuals.apply(gpu_ns, &mut self.residuals_rng);
        }
        if execution.may_extrapolate && step_time.is_extrapolated(&computed) {
            execution.extrapolated_batches += 1;
        }
        let (seqs, done_ns) = (
            step.batch.seqs(),
            execution
                .slowdowns
                .end_ns(now, gpu_ns.saturating_add(step.overhead_ns)),
        );
        begin_execution(ctx, instance, mi, mi_index, seqs, done_ns);
    }

    /// Has the scheduler plan a step now, handing it requests from `queue` (counted in
    /// `taken`); with `ahead`, only those that joined `schedule_ahead_steps` step starts ago
    /// or earlier.
    fn plan_from_queue(
        &mut self,
        ctx: &mut Ctx,
        queue: &mut InstanceQueue,
        prefix_blocks: Option<&ListColumn>,
        ahead: bool,
        taken: &mut u32,
    ) -> Option<Step> {
        let now = ctx.now.ns();
        let tickets = &mut ctx.tickets;
        // A request that joined after step `s` started may be scheduled once step
        // `s + schedule_ahead_steps` has started; without `ahead`, every one may.
        let latest_join = if ahead {
            self.steps_started.checked_sub(self.schedule_ahead_steps)
        } else {
            Some(self.steps_started)
        };
        self.scheduler.plan_step(now, || {
            let latest_join = latest_join?;
            let entry = queue.pop_eligible(
                |e, part| is_live(tickets, e, part),
                |e| tickets[e.ticket].steps_at_join <= latest_join,
            )?;
            *taken += 1;
            let t = &mut tickets[entry.ticket];
            // Out of the queue (and its timeout): waiting in the scheduler, then running.
            t.place = Place::Executing;
            t.record.batch_formed_ns = now;
            let row = t.record.request as usize;
            Some(NewSeq {
                ticket: entry.ticket,
                prompt_tokens: t.record.input_tokens,
                output_tokens: t.record.output_tokens,
                prefix_ids: prefix_blocks.map_or(&[][..], |p| p.get(row)),
            })
        })
    }

    /// The client of the request on `ticket`, which the scheduler holds (waiting or running),
    /// gave up: the scheduler drops it and frees its KV blocks now (see [`Scheduler::abort`]).
    /// Returns the output tokens it had sampled.
    pub fn abort(&mut self, ctx: &mut Ctx, ticket: u32) -> u32 {
        let before = Occupancy::of(&self.scheduler);
        let sampled = self
            .scheduler
            .abort(ctx.now.ns(), ticket)
            .expect("an executing request is held by its instance's scheduler");
        Occupancy::of(&self.scheduler).update(before, &mut ctx.llm_state);
        sampled
    }

    /// The running step ends now: its tokens go to `tokens`, in the scheduler's order.
    pub fn complete_step(&mut self, ctx: &mut Ctx, tokens: &mut Vec<Token>) {
        tokens.clear();
        let before = Occupancy::of(&self.scheduler);
        self.scheduler
            .complete_step(ctx.now.ns(), |token| tokens.push(token));
        Occupancy::of(&self.scheduler).update(before, &mut ctx.llm_state);
    }
}
