//! One instance's dynamic batcher at work: its thread's timer and 500 ms poll, the forming of
//! payloads by [`Batcher::decide_payload`] as requests arrive and model instances free up, and
//! the start of each batch on a free model instance.

use crate::batcher::{Batcher, BatcherThread, Decision, IDLE_POLL_NS};
use crate::context::{Ctx, Place};
use crate::event::{Event, EventKind};
use crate::instance::{Site, begin_execution};
use crate::queue::is_live;
use crate::rng::SimRng;
use crate::time::SimTime;
use crate::timing::service::BatchShape;
use rand::RngExt;

/// The dynamic batcher of one instance: Triton's batcher thread and its wake-ups.
#[derive(Debug, Clone)]
pub(crate) struct DynamicInstance {
    /// Its pool's rule (`max_batch_size`, preferred sizes, delay, prefetching).
    rule: Batcher,
    /// The batcher's thread and payloads.
    thread: BatcherThread,
    /// Time of the pending batcher wake-up, or [`SimTime::NEVER`].
    timer_at: SimTime,
    /// When the batcher thread went to sleep with nothing waiting, if it is asleep so.
    idle_since: Option<SimTime>,
    /// When the sleeping batcher thread polls (500 ms after it went idle, asked for by an
    /// arrival it was not woken for), or [`SimTime::NEVER`].
    poll_at: SimTime,
    /// Time of the one poll event this instance has queued, or [`SimTime::NEVER`].
    poll_event_at: SimTime,
    /// Draws who wins the race at a batch's end; untouched when the thread never goes first.
    race: SimRng,
    /// Draws each dispatch latency; untouched without the replay input `dispatch_residuals`.
    dispatch_draws: SimRng,
    /// Draws the wake-ups slept through at batch ends; untouched without
    /// `batcher.missed_release`.
    misses: SimRng,
    /// The thread slept through a batch's end and waits for an arrival (or its poll).
    asleep: bool,
    /// The model instance (the fleet's index) being released now, inside [`Self::released`],
    /// and the wait before the compute of the batch it takes (instead of the dispatch latency).
    released: Option<(u32, u64)>,
}

impl DynamicInstance {
    /// An idle batcher applying `rule`, drawing its race at batch ends from `race`, its
    /// dispatch latencies from `dispatch_draws` and the batch ends it sleeps through from
    /// `misses`.
    pub fn new(
        rule: Batcher,
        race: SimRng,
        dispatch_draws: SimRng,
        misses: SimRng,
    ) -> DynamicInstance {
        DynamicInstance {
            rule,
            thread: BatcherThread::default(),
            timer_at: SimTime::NEVER,
            idle_since: None,
            poll_at: SimTime::NEVER,
            poll_event_at: SimTime::NEVER,
            race,
            dispatch_draws,
            misses,
            asleep: false,
            released: None,
        }
    }
}

impl DynamicInstance {
    /// How long a model instance stays taken after the compute of a batch of `size` requests
    /// ends (`batcher.release_latency` and the replay input `release_latency_per_request`).
    #[inline]
    pub fn release_latency_ns(&self, size: u32) -> u64 {
        let per_request = self.rule.release_latency_per_request_ns;
        self.rule
            .release_latency_ns
            .saturating_add(per_request.saturating_mul(u64::from(size)))
    }

    /// Whether payloads are formed ahead of a free model instance (Triton's prefetching).
    #[inline]
    pub fn prefetches(&self) -> bool {
        self.rule.prefetch
    }

    /// True for a batcher timer or poll whose deadline has moved on: its handler would do
    /// nothing.
    #[inline]
    pub fn is_stale(&self, event: &Event) -> bool {
        match event.kind {
            EventKind::BatcherTimer => self.timer_at != SimTime(event.time_ns()),
            EventKind::BatcherPoll => self.poll_at != SimTime(event.time_ns()),
            _ => false,
        }
    }

    /// A stale batcher poll still carries the instance's next one: each instance keeps at most
    /// one poll event queued (an idle thread's poll is asked for at nearly every arrival), moved
    /// on to the poll now wanted, if any.
    pub fn carry_poll(&mut self, ctx: &mut Ctx, event: &Event) {
        if event.kind != EventKind::BatcherPoll {
            return;
        }
        self.poll_event_at = SimTime::NEVER;
        if self.poll_at != SimTime::NEVER {
            self.poll_event_at = self.poll_at;
            ctx.events
                .push(self.poll_at.ns(), EventKind::BatcherPoll, event.target, 0);
        }
    }

    /// The batcher's timer runs out.
    #[inline]
    pub fn timer(&mut self, ctx: &mut Ctx, site: Site<'_>) {
        // `run` drops timers whose deadline has moved (`is_stale`).
        debug_assert_eq!(self.timer_at, ctx.now);
        self.timer_at = SimTime::NEVER;
        if self.asleep {
            // Slept through a batch's end: only an arrival or the poll wakes the thread.
            return;
        }
        self.dispatch(ctx, site);
    }

    /// The sleeping batcher thread polls.
    #[inline]
    pub fn poll(&mut self, ctx: &mut Ctx, site: Site<'_>) {
        debug_assert_eq!(self.poll_at, ctx.now);
        self.poll_event_at = SimTime::NEVER;
        self.dispatch(ctx, site);
    }

    /// Wakes the batcher after a model instance became ready or its timer ran out: free model
    /// instances take the waiting payloads, then the batcher thread runs.
    #[inline(always)]
    pub fn dispatch(&mut self, ctx: &mut Ctx, mut site: Site<'_>) {
        self.asleep = false;
        if self.rule.max_batch_size == 1 {
            start_singles(
                ctx,
                &mut site,
                &self.rule,
                &mut self.dispatch_draws,
                self.released,
            );
            return;
        }
        if self.held_by_pause(ctx, &site) {
            return;
        }
        self.start_payloads(ctx, &mut site);
        self.run_batcher(ctx, &mut site);
    }

    /// Wakes the batcher after a batch finished and freed model instance `mi_index` (the
    /// fleet's index). Triton's thread and the instance race; the thread runs first in
    /// `thread_first_fraction` of batch ends, moving the requests waiting behind a growing
    /// payload into it before the instance takes it. Otherwise as
    /// [`DynamicInstance::dispatch`], except that the freed instance's next batch, taken by its
    /// running thread, computes `start_ns` later (the rest of its release) instead of after the
    /// dispatch latency.
    #[inline(always)]
    pub fn released(&mut self, ctx: &mut Ctx, mut site: Site<'_>, mi_index: u32, start_ns: u64) {
        if self.sleeps_through(ctx, &site) {
            return;
        }
        self.released = Some((mi_index, start_ns));
        let fraction = self.rule.thread_first_fraction;
        if self.rule.max_batch_size > 1
            && fraction > 0.0
            && !self.held_by_pause(ctx, &site)
            && self.race.random::<f64>() < fraction
        {
            self.run_batcher(ctx, &mut site);
        }
        self.dispatch(ctx, site);
        self.released = None;
    }

    /// Whether the thread sleeps through this batch's end (`batcher.missed_release`, drawn only
    /// with requests waiting and batching on): nothing is taken or formed now, and the thread
    /// next runs on an arrival or at its 500 ms poll from now, whichever comes first.
    #[inline(always)]
    fn sleeps_through(&mut self, ctx: &mut Ctx, site: &Site<'_>) -> bool {
        let p = self.rule.missed_release;
        if p == 0.0
            || self.rule.max_batch_size == 1
            || site.instance.queue.is_empty()
            || self.misses.random::<f64>() >= p
        {
            return false;
        }
        self.asleep = true;
        self.arm_poll(
            ctx,
            site,
            SimTime(ctx.now.ns().saturating_add(IDLE_POLL_NS)),
        );
        true
    }

    /// The sleeping thread next polls at `poll`: queued unless this instance's one poll event
    /// comes no later (a stale one is carried on to `poll_at` by [`Self::carry_poll`]).
    #[inline]
    fn arm_poll(&mut self, ctx: &mut Ctx, site: &Site<'_>, poll: SimTime) {
        self.poll_at = poll;
        if self.poll_event_at == SimTime::NEVER || self.poll_event_at > poll {
            self.poll_event_at = poll;
            ctx.events
                .push(poll.ns(), EventKind::BatcherPoll, site.index.0, 0);
        }
    }

    /// Whether the batcher is inside a pause (the replay input `pauses`) now: it forms and hands out
    /// nothing, and its timer is set to the pause's end, when it runs on what is queued then.
    #[inline(always)]
    fn held_by_pause(&mut self, ctx: &mut Ctx, site: &Site<'_>) -> bool {
        let now = ctx.now.ns();
        let resume_ns = site.execution.pauses.resume_ns(now);
        if resume_ns == now {
            return false;
        }
        if self.timer_at != SimTime(resume_ns) {
            self.timer_at = SimTime(resume_ns);
            ctx.events
                .push(resume_ns, EventKind::BatcherTimer, site.index.0, 0);
        }
        true
    }

    /// A request was queued: the batcher runs if the arrival wakes it (Triton's `Enqueue`, see
    /// [`crate::batcher`]); if not, and it sleeps with nothing else to wait for, its 500 ms poll
    /// is armed.
    #[inline]
    pub fn arrived(&mut self, ctx: &mut Ctx, mut site: Site<'_>) {
        if self.rule.max_batch_size == 1 {
            start_singles(ctx, &mut site, &self.rule, &mut self.dispatch_draws, None);
            return;
        }
        if self.asleep {
            self.dispatch(ctx, site);
            return;
        }
        if self.held_by_pause(ctx, &site) {
            return;
        }
        let batcher = &self.rule;
        let instance = &*site.instance;
        let thread = &self.thread;
        let waiting = instance.queue.len() - thread.in_payloads();
        let slot = thread.slot_available(batcher, instance.model_instances, instance.free.len());
        if thread.woken_by_arrival(waiting, slot) {
            self.run_batcher(ctx, &mut site);
        } else if let Some(since) = self.idle_since {
            // The idle thread polls every 500 ms from `since`: the first poll not yet past.
            let polls = (ctx.now.ns() - since.ns()).div_ceil(IDLE_POLL_NS).max(1);
            let poll = SimTime(
                since
                    .ns()
                    .saturating_add(polls.saturating_mul(IDLE_POLL_NS)),
            );
            self.arm_poll(ctx, &site, poll);
        }
    }

    /// Free model instances take the payloads waiting for them, the oldest first, each starting
    /// a batch.
    #[inline]
    fn start_payloads(&mut self, ctx: &mut Ctx, site: &mut Site<'_>) {
        let now = ctx.now.ns();
        loop {
            let Some(free) = site.instance.free.first() else {
                return;
            };
            let Some(size) = self.thread.take(&self.rule, now) else {
                return;
            };
            let mi_index = site.instance.first_model_instance + free;
            start_batch(
                ctx,
                site,
                &self.rule,
                &mut self.dispatch_draws,
                mi_index,
                size,
                self.released,
            );
        }
    }

    /// Triton's batcher thread, awake now: it fills payloads (which free model instances take
    /// at once) until it must sleep: nothing waits, no payload slot is free, or the rule says
    /// wait (its timer is then set).
    fn run_batcher(&mut self, ctx: &mut Ctx, site: &mut Site<'_>) {
        let now = ctx.now;
        // The thread is awake: the timer it slept on no longer stands (unless set again).
        let previous_timer = std::mem::replace(&mut self.timer_at, SimTime::NEVER);
        self.poll_at = SimTime::NEVER;
        self.idle_since = None;
        // Each pass moves requests into a payload, replaces a saturated one, or returns.
        loop {
            let instance = &mut *site.instance;
            let batcher = &self.rule;
            self.thread.refresh();
            let in_payloads = self.thread.in_payloads();
            let waiting = instance.queue.len() - in_payloads;
            if waiting == 0 {
                self.idle_since = Some(now);
                return;
            }
            let free = instance.free.len();
            if !self
                .thread
                .slot_available(batcher, instance.model_instances, free)
            {
                return;
            }
            let oldest_ns = if in_payloads == 0 {
                let tickets = &ctx.tickets;
                instance
                    .queue
                    .oldest_queued_ns(|e, part| is_live(tickets, e, part))
                    .expect("a non-empty queue has an oldest request")
            } else {
                // Payloads wait only with prefetching, whose queue is one FIFO.
                instance
                    .queue
                    .queued_ns_at(in_payloads)
                    .expect("requests wait behind the payloads")
            };
            match batcher.decide_payload(&mut self.thread, now.ns(), waiting, oldest_ns) {
                Decision::Send(0) => {}
                Decision::Send(n) => {
                    self.thread.add(n, oldest_ns);
                    self.start_payloads(ctx, site);
                }
                Decision::WaitUntil(deadline_ns) => {
                    let deadline = SimTime(deadline_ns);
                    self.timer_at = deadline;
                    if deadline != previous_timer {
                        ctx.events
                            .push(deadline_ns, EventKind::BatcherTimer, site.index.0, 0);
                    }
                    return;
                }
                Decision::Idle => unreachable!("the batcher is asked only with requests waiting"),
            }
        }
    }
}

/// Without batching (`max_batch_size = 1`) Triton runs no batcher thread: each request is a
/// payload of its own, and free model instances take them in order (`released`: the model
/// instance being released now, if any).
#[inline]
fn start_singles(
    ctx: &mut Ctx,
    site: &mut Site<'_>,
    rule: &Batcher,
    dispatch_draws: &mut SimRng,
    released: Option<(u32, u64)>,
) {
    loop {
        if site.instance.queue.is_empty() {
            return;
        }
        let Some(free) = site.instance.free.first() else {
            return;
        };
        let mi_index = site.instance.first_model_instance + free;
        start_batch(ctx, site, rule, dispatch_draws, mi_index, 1, released);
    }
}

/// Model instance `mi_index` takes a batch of the `size` oldest queued requests; its compute
/// starts after the dispatch latency, or, when the instance is the one being `released` now,
/// after the wait given with it (or at the end of a pause that holds it: a batch formed just
/// before one, or a request without batching).
#[inline]
fn start_batch(
    ctx: &mut Ctx,
    site: &mut Site<'_>,
    rule: &Batcher,
    dispatch_draws: &mut SimRng,
    mi_index: u32,
    size: u32,
    released: Option<(u32, u64)>,
) {
    let now = ctx.now.ns();
    let execution = &mut *site.execution;
    let dispatch_ns = match released {
        Some((freed, start_ns)) if freed == mi_index => start_ns,
        _ => rule.draw_dispatch_ns(dispatch_draws),
    };
    let compute_start_ns = execution.pauses.resume_ns(now.saturating_add(dispatch_ns));
    let batch_id = ctx.counters.next_batch_id;
    ctx.counters.next_batch_id += 1;
    let instance = &mut *site.instance;
    let mi = &mut site.model_instances[mi_index as usize];
    debug_assert!(mi.is_free() && mi.members.is_empty());
    assert!(
        size >= 1 && size <= rule.max_batch_size,
        "batch of {size} exceeds its limit"
    );
    let tickets = &mut ctx.tickets;
    let mut shape = BatchShape {
        size,
        max_input_tokens: 0,
        total_input_tokens: 0,
        idle_ns: now - mi.idle_since.ns(),
    };
    for _ in 0..size {
        let entry = instance
            .queue
            .pop(|e, part| is_live(tickets, e, part))
            .expect("the batcher never sends more requests than are queued");
        let t = &mut tickets[entry.ticket];
        t.place = Place::Executing;
        t.record.batch_formed_ns = now;
        t.record.exec_start_ns = compute_start_ns;
        t.record.batch_id = batch_id;
        t.record.batch_size = size;
        t.record.model_instance = mi.index_in_instance;
        shape.max_input_tokens = shape.max_input_tokens.max(t.record.input_tokens);
        shape.total_input_tokens += u64::from(t.record.input_tokens);
        mi.members.push(entry.ticket);
    }
    ctx.counters.queued -= size;
    let service = execution
        .service
        .as_ref()
        .expect("a dynamic-batcher pool has a service model");
    let duration_ns = service.sample_ns(&shape, &mut execution.rng);
    if execution.may_extrapolate && service.is_extrapolated(&shape) {
        execution.extrapolated_batches += 1;
    }
    let done_ns = execution.slowdowns.end_ns(compute_start_ns, duration_ns);
    if let Some(cores) = instance.workers.as_mut() {
        cores.compute_started();
    }
    begin_execution(ctx, instance, mi, mi_index, size, done_ns);
}
