//! The discrete-event engine's kernel: replays a trace through a [`Scenario`](crate::Scenario) and accounts for
//! every request.
//!
//! Time is an integer count of nanoseconds. Pending events sit in an
//! [`EventQueue`](crate::event::EventQueue) ordered by (time, sequence number); trace arrivals
//! are already sorted, so they are merged with the queue instead of being pushed through it (at
//! equal times, queued events run first). Stages that take no time in a scenario (no network
//! latency, no post-processing) are run inline, without an event. In-flight requests live in a small table of reusable *tickets*, so the engine's memory
//! is bounded by the requests in flight, not by the trace's length; finished requests go to a
//! [`RecordSink`] and a streaming [`SummaryBuilder`](crate::summary::SummaryBuilder).
//!
//! The kernel keeps the clock, the run loop, the dispatch of each event to its stage and the
//! hand-over of a request from one stage to the next; each stage owns its state and its flow in
//! its own module ([`crate::client`], [`crate::gateway`], [`crate::preprocess`] (with
//! [`crate::host`]'s cores),
//! [`crate::queue`], the dynamic batcher's `crate::batcher::instance`, [`crate::continuous`],
//! [`crate::postprocess`]) and sees the kernel through a [`Ctx`]. [`crate::observe`] samples the
//! timeseries and builds the summary.
//!
//! At the end the engine asserts that every request sent was completed, rejected, timed out or
//! failed (its client gave up at `load.client_timeout`).

use std::sync::Arc;

use capsim_trace::Trace;

use crate::batcher::instance::DynamicInstance;
use crate::build::BuiltScenario;
use crate::client::Clients;
use crate::context::{ClientId, Ctx, InstanceId, Place, RequestId};
use crate::continuous::{Continuous, ContinuousInstance};
use crate::event::{Event, EventKind};
use crate::gateway::{Arrived, Gateway};
use crate::instance::{Execution, Fleet, Site, end_execution, hold_execution};
use crate::observe::Observer;
use crate::postprocess::{Postprocess, Started};
use crate::preprocess::Preprocess;
use crate::queue::{QueuePolicy, is_stale_timeout};
use crate::record::{FailReason, NoRecords, Outcome, RecordSink, RejectReason, RequestLog};
use crate::summary::Summary;
use crate::time::SimTime;
use crate::timing::service::ServiceTime;

pub use crate::client::Warmup;
pub use crate::observe::Run;

mod build;

pub use build::latency_keys;
#[cfg(test)]
mod abort_tests;
#[cfg(test)]
mod host_tests;
#[cfg(test)]
mod pipeline_tests;
#[cfg(test)]
mod tests;

/// Options of one run that are not part of the scenario.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Seed of every random stream.
    pub seed: u64,
    /// Warm-up exclusion.
    pub warmup: Warmup,
    /// Replaces the service-time model of every pool (for example a calibrated profile).
    pub service_override: Option<Arc<dyn ServiceTime>>,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The engine numbers requests with 32 bits.
    #[error("the trace has {rows} requests; the simulator handles at most {max}", max = u32::MAX - 1)]
    TooManyRequests {
        /// Rows of the trace.
        rows: usize,
    },
    /// A continuous-batching pool needs each request's output tokens.
    #[error(
        "pool `{pool}` uses continuous batching, which generates each request's output tokens, but the trace has no output_tokens column: read a trace that has one (map it with --map output_tokens=COLUMN)"
    )]
    MissingOutputTokens {
        /// The pool's name.
        pool: String,
    },
    /// An event would happen at or after [`SimTime::HORIZON`] (about 292 years), past what the
    /// engine's nanosecond clock represents.
    #[error(
        "the run would go past 292 years of simulated time (at {now_s:.0} s, the next event is {cause} that ends later than that); shorten those durations or use fewer, smaller requests"
    )]
    PastHorizon {
        /// Simulated time when the run stopped, in seconds.
        now_s: f64,
        /// The stage whose event lies past the horizon, and the keys that set its duration.
        cause: &'static str,
    },
}

/// What an event past the horizon was, with the keys that set its delay, for
/// [`SimError::PastHorizon`].
fn horizon_cause(kind: EventKind) -> &'static str {
    match kind {
        EventKind::GatewayArrival | EventKind::ResponseDelivered => {
            "a network transfer (`network.latency`, `network.bandwidth` and the request or response bytes)"
        }
        EventKind::GatewayDone => "the gateway's work (`gateway.overhead`)",
        EventKind::CacheAnswered => "a cache answer (`cache.latency`)",
        EventKind::PreprocessDone => {
            "pre-processing (`preprocess.base`, `preprocess.per_input_token`, with `[host]` also `host.request` and `host.request_per_input_token`)"
        }
        EventKind::QueueTimeout => "a queue timeout (`queue.timeout`)",
        EventKind::BatcherTimer => "the batcher's timer (`batcher.max_queue_delay`)",
        EventKind::BatcherPoll => "the batcher's 500 ms poll",
        EventKind::BatchDone => {
            "a batch or step executing (`[service]` or `[step_time]`, `batcher.dispatch_latency` and `release_latency` and the batcher's step overheads, with the trace's token counts)"
        }
        EventKind::ModelInstanceReady => "a model instance loading (`execution.cold_start`)",
        EventKind::PostprocessDone => {
            "post-processing (`postprocess.base`, `postprocess.per_output_token`)"
        }
        EventKind::HostResponseDone => {
            "a response's work on a host core (`host.response`, `postprocess.base`, `postprocess.per_output_token`)"
        }
        EventKind::ClientSend => "a closed-loop client's pause (`load.think_time`)",
        EventKind::RetrySend => "a retry's backoff (`retry.backoff`, `retry.backoff_multiplier`)",
        EventKind::ClientTimeout => "a client's timeout (`load.client_timeout`)",
    }
}

/// Simulates `trace` through `scenario` and returns the summary only (no per-request records;
/// memory stays bounded). This is the entry point for sweeps and capacity searches.
pub fn simulate(
    built: &BuiltScenario,
    trace: &Trace,
    options: &RunOptions,
) -> Result<Summary, SimError> {
    run_with_sink(built, trace, options, &mut NoRecords).map(|run| run.summary)
}

/// Simulates and keeps every request's record, sorted by trace row then attempt.
pub fn simulate_with_requests(
    built: &BuiltScenario,
    trace: &Trace,
    options: &RunOptions,
) -> Result<(Run, RequestLog), SimError> {
    let mut log = RequestLog::with_capacity(trace.len());
    let run = run_with_sink(built, trace, options, &mut log)?;
    log.sort_by_request();
    Ok((run, log))
}

/// Simulates, handing every finished request to `sink`.
pub fn run_with_sink<S: RecordSink>(
    built: &BuiltScenario,
    trace: &Trace,
    options: &RunOptions,
    sink: &mut S,
) -> Result<Run, SimError> {
    let scenario = &built.scenario;
    if trace.len() >= u32::MAX as usize {
        return Err(SimError::TooManyRequests { rows: trace.len() });
    }
    if trace.output_tokens().is_none()
        && let Some(pool) = scenario.pools().iter().find(|p| p.llm.is_some())
    {
        return Err(SimError::MissingOutputTokens {
            pool: pool.name.clone(),
        });
    }
    if let Some(&last_ns) = trace.arrival_ns().last()
        && last_ns >= SimTime::HORIZON.ns()
    {
        return Err(SimError::PastHorizon {
            now_s: 0.0,
            cause: "the trace's last arrival (`--rate-scale` or the arrival column)",
        });
    }
    let mut engine = Engine::new(built, trace, options);
    engine.run(sink);
    if let Some(kind) = engine.past_horizon {
        return Err(SimError::PastHorizon {
            now_s: engine.ctx.now.as_secs_f64(),
            cause: horizon_cause(kind),
        });
    }
    Ok(engine.finish())
}

/// Instance `index`'s executor, and the site it runs on.
#[inline(always)]
fn site_of<'s>(
    fleet: &'s mut Fleet,
    executions: &'s mut [Execution],
    executors: &'s mut [Executor],
    index: InstanceId,
) -> (&'s mut Executor, Site<'s>) {
    let instance = &mut fleet.instances[index.index()];
    let execution = &mut executions[instance.pool.index()];
    (
        &mut executors[index.index()],
        Site {
            index,
            instance,
            model_instances: &mut fleet.model_instances,
            execution,
        },
    )
}

/// `aux` of a [`EventKind::BatchDone`]: the batch's compute is over.
const COMPUTED: u32 = 0;
/// `aux` of a [`EventKind::BatchDone`]: the model instance is free after its release latency.
const RELEASED: u32 = 1;

/// A member of a dynamic batch whose client gave up while it computed: the batch runs on (a
/// GPU batch cannot be cut), and its result is dropped when it ends.
const ABANDONED: u32 = u32::MAX;

/// What executes an instance's requests: Triton's dynamic batcher, or a continuous batcher.
// One per instance, reached on every event of it: a boxed scheduler would cost an indirection
// there, and the unused bytes of a dynamic instance's slot (a few hundred) cost nothing.
#[allow(clippy::large_enum_variant)]
enum Executor {
    Dynamic(DynamicInstance),
    Continuous(ContinuousInstance),
}

struct Engine<'a> {
    ctx: Ctx,
    clients: Clients<'a>,
    gateway: Gateway<'a>,
    preprocess: Preprocess,
    /// Queue policies, by pool.
    queues: Vec<QueuePolicy>,
    fleet: Fleet,
    /// By instance.
    executors: Vec<Executor>,
    /// By pool.
    executions: Vec<Execution>,
    continuous: Continuous<'a>,
    postprocess: Postprocess,
    observe: Observer,
    /// (ticket, generation, instance) of each request whose client gave up while a
    /// pre-processing worker (or a host's core, either way) ran its job: the worker finishes
    /// it, then takes the next job.
    abandoned_jobs: Vec<(u32, u32, InstanceId)>,
    /// Set when the run stopped at an event at or past [`SimTime::HORIZON`]: its kind.
    past_horizon: Option<EventKind>,
}

impl<'a> Engine<'a> {
    /// Runs until every request is answered, or until the next event lies at or past
    /// [`SimTime::HORIZON`] (then `past_horizon` names it and the end-of-run checks are skipped).
    fn run<S: RecordSink>(&mut self, sink: &mut S) {
        let rows = self.clients.rows();
        // The trace's arrivals drive an open-loop run; closed-loop clients send on their own.
        let open_loop_arrivals: &[u64] = if self.clients.closed_loop {
            &[]
        } else {
            self.clients.arrival_ns
        };
        loop {
            if self.ctx.counters.in_system == 0
                && self.clients.next_request == rows
                && self.clients.backing_off == 0
            {
                // Every request is answered and none is left to send: what is still queued
                // (a cold start, a closed-loop client's last think time, a batcher timer whose
                // requests timed out) changes nothing, and would stretch the run's end past its
                // last response.
                break;
            }
            let next_arrival_ns = open_loop_arrivals
                .get(self.clients.next_request)
                .copied()
                .unwrap_or(u64::MAX);
            if let Some(event) = self.ctx.events.pop_until(next_arrival_ns) {
                if self.is_stale_timer(&event) {
                    // A timer that no longer applies changes nothing: leaving the clock where it
                    // is keeps it from stretching the run's end (and its time-averaged figures)
                    // past the last thing that happened.
                    self.carry_poll(&event);
                    continue;
                }
                if event.time_ns() >= SimTime::HORIZON.ns() {
                    self.past_horizon = Some(event.kind);
                    return;
                }
                self.advance(SimTime(event.time_ns()));
                self.handle(event.kind, event.target, event.aux, sink);
            } else if next_arrival_ns != u64::MAX {
                self.advance(SimTime(next_arrival_ns));
                let request = self.clients.next_request;
                self.clients.next_request += 1;
                self.send(RequestId(request as u32), ClientId::OPEN_LOOP, sink);
            } else {
                break;
            }
        }
        self.check_accounts();
    }

    /// The end-of-run invariants: requests in = requests out.
    fn check_accounts(&self) {
        let counters = &self.ctx.counters;
        assert_eq!(
            counters.in_system, 0,
            "requests left in the system after the run drained"
        );
        assert_eq!(
            counters.sent, counters.finished,
            "every request sent must finish"
        );
        assert_eq!(
            self.clients.first_attempts as usize,
            self.clients.rows(),
            "every request of the trace must be sent exactly once"
        );
        let counts = self.ctx.summary.counts();
        assert!(
            counts.adds_up() && counts.total == counters.sent,
            "completed {} + rejected {} + timed out {} + failed {} != total {}",
            counts.completed,
            counts.rejected,
            counts.timed_out,
            counts.failed,
            counters.sent
        );
    }

    /// Moves the clock to `t`, integrating time-weighted state and emitting timeseries rows.
    #[inline]
    fn advance(&mut self, t: SimTime) {
        assert!(
            t >= self.ctx.now,
            "time went backwards: {:?} -> {:?}",
            self.ctx.now,
            t
        );
        self.observe.sample_until(&mut self.ctx, &self.fleet, t);
        self.observe.integrate(&mut self.ctx, t);
    }

    /// True for a queue timeout or batcher timer whose request or deadline has moved on, or an
    /// event of an attempt that has ended (its client gave up, or it was answered): its handler
    /// would do nothing.
    #[inline]
    fn is_stale_timer(&self, event: &Event) -> bool {
        match event.kind {
            EventKind::QueueTimeout => is_stale_timeout(&self.ctx.tickets, event.target, event.aux),
            EventKind::GatewayArrival
            | EventKind::GatewayDone
            | EventKind::CacheAnswered
            | EventKind::PostprocessDone
            | EventKind::ResponseDelivered
            | EventKind::ClientTimeout => self.ctx.tickets[event.target].generation != event.aux,
            EventKind::BatcherTimer | EventKind::BatcherPoll => {
                match &self.executors[InstanceId(event.target).index()] {
                    Executor::Dynamic(d) => d.is_stale(event),
                    Executor::Continuous(_) => unreachable!("a continuous batcher sets no timer"),
                }
            }
            _ => false,
        }
    }

    /// A stale batcher poll still carries the instance's next one.
    fn carry_poll(&mut self, event: &Event) {
        if event.kind == EventKind::BatcherPoll
            && let Executor::Dynamic(d) = &mut self.executors[InstanceId(event.target).index()]
        {
            d.carry_poll(&mut self.ctx, event);
        }
    }

    fn handle<S: RecordSink>(&mut self, kind: EventKind, target: u32, aux: u32, sink: &mut S) {
        match kind {
            EventKind::GatewayArrival => self.gateway_arrival(target, sink),
            EventKind::GatewayDone => self.route(target, sink),
            EventKind::CacheAnswered => self.postprocessed(target, sink),
            EventKind::PreprocessDone => self.preprocess_done(target, aux, sink),
            EventKind::QueueTimeout => self.queue_timeout(target, aux, sink),
            EventKind::BatcherTimer | EventKind::BatcherPoll => {
                let (executor, at) = site_of(
                    &mut self.fleet,
                    &mut self.executions,
                    &mut self.executors,
                    InstanceId(target),
                );
                let Executor::Dynamic(d) = executor else {
                    unreachable!("only a dynamic batcher sets timers")
                };
                if kind == EventKind::BatcherTimer {
                    d.timer(&mut self.ctx, at);
                } else {
                    d.poll(&mut self.ctx, at);
                }
            }
            EventKind::BatchDone => self.batch_done(target, aux, sink),
            EventKind::ModelInstanceReady => {
                let now = self.ctx.now;
                let mi = &mut self.fleet.model_instances[target as usize];
                mi.ready = true;
                mi.idle_since = now;
                let (instance, k) = (mi.instance, mi.index_in_instance);
                self.fleet.instances[instance.index()].free.insert(k);
                self.dispatch(instance, None);
            }
            EventKind::PostprocessDone => self.postprocessed(target, sink),
            EventKind::HostResponseDone => self.host_response_done(target, aux, sink),
            EventKind::ResponseDelivered => self.end(target, Outcome::Completed, sink),
            EventKind::RetrySend => {
                self.clients.retry(&mut self.ctx, target);
                self.launch(target, sink);
            }
            EventKind::ClientSend => {
                if let Some(request) = self.clients.next_row() {
                    self.send(request, ClientId(target), sink);
                }
            }
            EventKind::ClientTimeout => self.client_timeout(target, sink),
        }
    }

    /// `client` sends trace row `request` now.
    #[inline]
    fn send<S: RecordSink>(&mut self, request: RequestId, client: ClientId, sink: &mut S) {
        let ticket = self.clients.send(&mut self.ctx, request, client);
        self.launch(ticket, sink);
    }

    /// A client's attempt leaves for the gateway.
    #[inline]
    fn launch<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        if self.clients.launch(&mut self.ctx, ticket) {
            self.gateway_arrival(ticket, sink);
        }
    }

    #[inline]
    fn gateway_arrival<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        match self.gateway.arrive(&mut self.ctx, ticket) {
            Arrived::Refused(reason) => self.end(ticket, Outcome::Rejected(reason), sink),
            Arrived::Later => {}
            Arrived::Route => self.route(ticket, sink),
        }
    }

    /// The gateway routes an admitted request to an instance of its pool, where it is
    /// pre-processed or queued.
    #[inline]
    fn route<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let index = self.gateway.route(&mut self.ctx, &mut self.fleet, ticket);
        let instance = &mut self.fleet.instances[index.index()];
        if !self
            .preprocess
            .start(&mut self.ctx, instance.pool, &mut instance.workers, ticket)
        {
            self.enqueue(ticket, index, sink);
        }
    }

    /// A pre-processing worker is done with the request on `ticket` (of `generation`): it takes
    /// the next waiting request, and the request is queued unless its client gave up meanwhile.
    #[inline]
    fn preprocess_done<S: RecordSink>(&mut self, ticket: u32, generation: u32, sink: &mut S) {
        if let Some(index) = self.job_done(ticket, generation) {
            self.enqueue(ticket, index, sink);
        }
    }

    /// A worker (or core) finished the job of the request on `ticket` (of `generation`): it
    /// takes the next waiting job. The request's instance, unless its client gave up meanwhile.
    #[inline]
    fn job_done(&mut self, ticket: u32, generation: u32) -> Option<InstanceId> {
        if self.ctx.tickets[ticket].generation != generation {
            self.abandoned_job_done(ticket, generation);
            return None;
        }
        let index = self.gateway.instance_of(&self.ctx.tickets[ticket].record);
        let instance = &mut self.fleet.instances[index.index()];
        self.preprocess
            .finish(&mut self.ctx, instance.pool, &mut instance.workers);
        Some(index)
    }

    /// A worker (or core) finished the job of a request whose client had given up: it takes
    /// the next one.
    #[cold]
    fn abandoned_job_done(&mut self, ticket: u32, generation: u32) {
        let at = self
            .abandoned_jobs
            .iter()
            .position(|&(t, g, _)| (t, g) == (ticket, generation))
            .expect("a stale job's end belongs to an abandoned request");
        let (_, _, index) = self.abandoned_jobs.swap_remove(at);
        let instance = &mut self.fleet.instances[index.index()];
        self.preprocess
            .finish(&mut self.ctx, instance.pool, &mut instance.workers);
    }

    /// The request enters its instance's queue (or is rejected: it can never be served there,
    /// or the queue is full), and the instance's batcher hears of it.
    #[inline]
    fn enqueue<S: RecordSink>(&mut self, ticket: u32, index: InstanceId, sink: &mut S) {
        let record = &mut self.ctx.tickets[ticket].record;
        let policy = &self.queues[record.pool as usize];
        policy.cut(record);
        let instance = &mut self.fleet.instances[index.index()];
        let executor = &self.executors[index.index()];
        let refusal = match executor {
            Executor::Continuous(c) => c.unservable(record.input_tokens, record.output_tokens),
            Executor::Dynamic(_) => None,
        }
        .or_else(|| {
            policy
                .is_full(&instance.queue)
                .then_some(RejectReason::QueueFull)
        });
        if let Some(reason) = refusal {
            instance.outstanding -= 1;
            self.end(ticket, Outcome::Rejected(reason), sink);
            return;
        }
        policy.push(&mut self.ctx, &mut instance.queue, ticket);
        if let Executor::Continuous(c) = executor {
            self.ctx.llm_state.waiting += 1;
            self.ctx.tickets[ticket].steps_at_join = c.steps_started();
        }
        self.arrived(index);
    }

    fn queue_timeout<S: RecordSink>(&mut self, ticket: u32, generation: u32, sink: &mut S) {
        let record = &self.ctx.tickets[ticket].record;
        let policy = &self.queues[record.pool as usize];
        let index = self.gateway.instance_of(record);
        let instance = &mut self.fleet.instances[index.index()];
        if policy.time_out(&mut self.ctx, &mut instance.queue, ticket, generation) {
            if let Executor::Continuous(_) = self.executors[index.index()] {
                self.ctx.llm_state.waiting -= 1;
            }
            instance.outstanding -= 1;
            self.end(ticket, Outcome::TimedOut, sink);
        }
    }

    /// The client of the attempt on `ticket` gives up (`load.client_timeout`): the server lets
    /// go of the request wherever it is, and the attempt fails as `timeout` now. An event still
    /// pending for it (in the network, the gateway, post-processing) is stale from here on
    /// (`is_stale_timer`).
    fn client_timeout<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let t = &self.ctx.tickets[ticket];
        let (place, generation) = (t.place, t.generation);
        // Read only where the request was routed to an instance.
        let index = || self.gateway.instance_of(&t.record);
        let mut replan = None;
        match place {
            Place::NetworkIn | Place::Gateway | Place::Postprocess | Place::NetworkOut => {}
            Place::PreprocessWaiting => {
                let index = index();
                let instance = &mut self.fleet.instances[index.index()];
                self.preprocess
                    .abandon_waiting(&mut self.ctx, &mut instance.workers);
                instance.outstanding -= 1;
            }
            Place::Preprocess => {
                // Tokenization is not interruptible: the worker stays busy until it finishes.
                let index = index();
                self.abandoned_jobs.push((ticket, generation, index));
                self.fleet.instances[index.index()].outstanding -= 1;
            }
            Place::HostResponseWaiting => {
                let index = index();
                let instance = &mut self.fleet.instances[index.index()];
                self.preprocess
                    .abandon_waiting_response(&mut instance.workers);
            }
            Place::HostResponse => {
                // Serialising is not interruptible either: the core finishes the response.
                let index = index();
                self.abandoned_jobs.push((ticket, generation, index));
            }
            Place::Queued | Place::Delayed => {
                let index = index();
                let instance = &mut self.fleet.instances[index.index()];
                instance.queue.forget_one();
                instance.outstanding -= 1;
                self.ctx.counters.queued -= 1;
                if let Executor::Continuous(_) = self.executors[index.index()] {
                    self.ctx.llm_state.waiting -= 1;
                }
            }
            Place::Executing => {
                let index = index();
                replan = self.abandon_execution(ticket, index).then_some(index);
            }
            Place::Free | Place::Backoff => {
                unreachable!("the timeout of an ended attempt is stale")
            }
        }
        self.end(ticket, Outcome::Failed(FailReason::Timeout), sink);
        if let Some(index) = replan {
            // Its blocks may let a waiting request in, if no step is running to plan after.
            self.dispatch(index, None);
        }
    }

    /// The client of the executing request on `ticket`, at instance `index`, gave up. A
    /// continuous batcher drops it and frees its KV blocks now (true: plan a step, if none
    /// runs); a dynamic batch runs on, and its result for it is dropped.
    fn abandon_execution(&mut self, ticket: u32, index: InstanceId) -> bool {
        self.fleet.instances[index.index()].outstanding -= 1;
        match &mut self.executors[index.index()] {
            Executor::Continuous(c) => {
                self.continuous.aborted_tokens += u64::from(c.abort(&mut self.ctx, ticket));
                true
            }
            Executor::Dynamic(_) => {
                let instance = &self.fleet.instances[index.index()];
                let mi_index =
                    instance.first_model_instance + self.ctx.tickets[ticket].record.model_instance;
                let members = &mut self.fleet.model_instances[mi_index as usize].members;
                let member = members
                    .iter_mut()
                    .find(|m| **m == ticket)
                    .expect("an executing request is a member of its batch");
                *member = ABANDONED;
                false
            }
        }
    }

    /// A request was queued at instance `index`: its batcher hears of it.
    #[inline]
    fn arrived(&mut self, index: InstanceId) {
        let prefix_blocks = self.continuous.prefix_blocks;
        let (executor, at) = site_of(
            &mut self.fleet,
            &mut self.executions,
            &mut self.executors,
            index,
        );
        match executor {
            Executor::Dynamic(d) => d.arrived(&mut self.ctx, at),
            Executor::Continuous(c) => c.plan_step(&mut self.ctx, at, prefix_blocks),
        }
    }

    /// Wakes instance `index`'s batcher after a model instance became ready, or after a batch
    /// (or step) freed model instance `freed` (the fleet's index, with the wait before its next
    /// batch computes): free model instances take the waiting payloads, then the batcher thread
    /// runs (a continuous batcher plans its next step). After a batch, the dynamic batcher's
    /// thread may run first (the replay input `thread_first_fraction`), and the freed instance's next
    /// batch waits that instead of the dispatch latency.
    #[inline(always)]
    fn dispatch(&mut self, index: InstanceId, freed: Option<(u32, u64)>) {
        let prefix_blocks = self.continuous.prefix_blocks;
        let (executor, at) = site_of(
            &mut self.fleet,
            &mut self.executions,
            &mut self.executors,
            index,
        );
        match executor {
            Executor::Dynamic(d) => match freed {
                Some((mi_index, start_ns)) => d.released(&mut self.ctx, at, mi_index, start_ns),
                None => d.dispatch(&mut self.ctx, at),
            },
            Executor::Continuous(c) => c.plan_step(&mut self.ctx, at, prefix_blocks),
        }
    }

    /// A model instance's batch (or step) is over (`aux` = [`COMPUTED`]), or the model instance
    /// is released after it (`aux` = [`RELEASED`], with a release latency).
    #[inline]
    fn batch_done<S: RecordSink>(&mut self, mi_index: u32, aux: u32, sink: &mut S) {
        let index = self.fleet.model_instances[mi_index as usize].instance;
        match &mut self.executors[index.index()] {
            Executor::Dynamic(d) if aux == COMPUTED => {
                let instance = &mut self.fleet.instances[index.index()];
                self.preprocess
                    .compute_ended(&mut self.ctx, instance.pool, &mut instance.workers);
                let size = self.fleet.model_instances[mi_index as usize].members.len();
                let release_ns = d.release_latency_ns(size as u32);
                if release_ns > 0 {
                    let prefetches = d.prefetches();
                    self.release(index, mi_index, release_ns, prefetches, sink);
                    return;
                }
                end_execution(&mut self.ctx, &mut self.fleet, mi_index);
                self.batch_executed(index, mi_index, sink);
            }
            Executor::Dynamic(d) => {
                end_execution(&mut self.ctx, &mut self.fleet, mi_index);
                if !d.prefetches() {
                    // Released: an idle instance, whose batch pays the dispatch latency.
                    self.dispatch(index, None);
                    return;
                }
            }
            Executor::Continuous(c) => {
                end_execution(&mut self.ctx, &mut self.fleet, mi_index);
                let mut tokens = std::mem::take(&mut self.continuous.token_buf);
                c.complete_step(&mut self.ctx, &mut tokens);
                for &token in &tokens {
                    if self.continuous.emit(&mut self.ctx, token) {
                        self.fleet.instances[index.index()].outstanding -= 1;
                        self.executed(token.ticket, sink);
                    }
                }
                self.continuous.token_buf = tokens;
            }
        }
        self.dispatch(index, Some((mi_index, 0)));
    }

    /// A batch's compute is over with a release latency: its requests go on now, and the model
    /// instance is released `release_ns` from now. As in Triton, with prefetching the instance
    /// takes its next ready payload now (which grows no more) and computes it when the release
    /// is over; without (or with none ready) it stays taken until then, and without
    /// prefetching nothing is formed for it before.
    #[cold]
    #[inline(never)]
    fn release<S: RecordSink>(
        &mut self,
        index: InstanceId,
        mi_index: u32,
        release_ns: u64,
        prefetches: bool,
        sink: &mut S,
    ) {
        self.batch_executed(index, mi_index, sink);
        if prefetches {
            end_execution(&mut self.ctx, &mut self.fleet, mi_index);
            self.dispatch(index, Some((mi_index, release_ns)));
            if !self.fleet.model_instances[mi_index as usize].is_free() {
                return;
            }
            hold_execution(&mut self.ctx, &mut self.fleet, mi_index);
        }
        let at_ns = self.ctx.now.ns().saturating_add(release_ns);
        self.ctx
            .events
            .push(at_ns, EventKind::BatchDone, mi_index, RELEASED);
    }

    /// Every request of model instance `mi_index`'s batch is done executing (those whose
    /// client gave up are dropped).
    #[inline]
    fn batch_executed<S: RecordSink>(&mut self, index: InstanceId, mi_index: u32, sink: &mut S) {
        let now = self.ctx.now.ns();
        let mut members =
            std::mem::take(&mut self.fleet.model_instances[mi_index as usize].members);
        let answered = members.iter().filter(|&&m| m != ABANDONED).count();
        self.fleet.instances[index.index()].outstanding -= answered as u32;
        for &ticket in &members {
            if ticket == ABANDONED {
                continue;
            }
            self.ctx.tickets[ticket].record.exec_end_ns = now;
            self.executed(ticket, sink);
        }
        members.clear();
        self.fleet.model_instances[mi_index as usize].members = members;
    }

    /// Execution is over for `ticket`: post-processing starts (or is skipped, or goes to the
    /// host's cores).
    #[inline]
    fn executed<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        match self.postprocess.start(&mut self.ctx, ticket) {
            Started::Done => self.postprocessed(ticket, sink),
            Started::Later => {}
            Started::OnHost => self.respond_on_host(ticket, sink),
        }
    }

    /// The response of `ticket` starts its way-out job on a core of its instance's host, or
    /// waits for one; one that takes no CPU time goes on at once.
    #[inline(never)]
    fn respond_on_host<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let index = self.gateway.instance_of(&self.ctx.tickets[ticket].record);
        let instance = &mut self.fleet.instances[index.index()];
        if !self.preprocess.start_response(
            &mut self.ctx,
            instance.pool,
            &mut instance.workers,
            ticket,
        ) {
            self.postprocessed(ticket, sink);
        }
    }

    /// A core of its instance's host finished the way-out job of the response on `ticket` (of
    /// `generation`): the core takes the next waiting job, and the response goes on unless its
    /// client gave up meanwhile.
    fn host_response_done<S: RecordSink>(&mut self, ticket: u32, generation: u32, sink: &mut S) {
        if self.job_done(ticket, generation).is_some() {
            self.postprocessed(ticket, sink);
        }
    }

    /// Post-processing (or the cache) is done: the response leaves the gateway.
    #[inline]
    fn postprocessed<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        self.gateway.respond(&mut self.ctx, ticket);
        if self.clients.respond(&mut self.ctx, ticket) {
            self.end(ticket, Outcome::Completed, sink);
        }
    }

    /// The attempt is finished: record it, then its client retries it or its ticket is freed.
    #[inline]
    fn end<S: RecordSink>(&mut self, ticket: u32, outcome: Outcome, sink: &mut S) {
        let now = self.ctx.now.ns();
        let t = &mut self.ctx.tickets[ticket];
        debug_assert!(t.place != Place::Free, "a request finished twice");
        self.gateway.release(t);
        t.record.response_ns = now;
        t.record.outcome = outcome;
        t.generation = t.generation.wrapping_add(1);
        // The record is read in place (no copy of the whole record per request).
        let record = &t.record;
        let retry = self.clients.retries(outcome, record.attempt);
        let counters = &mut self.ctx.counters;
        counters.in_system -= 1;
        counters.finished += 1;
        self.ctx.interval.finished += 1;
        sink.record(record);
        self.ctx.summary.add(record, t.measured);
        let (attempt, client) = (record.attempt, record.client);
        self.clients
            .ended(&mut self.ctx, ticket, retry, attempt, ClientId(client));
    }

    fn finish(self) -> Run {
        let Engine {
            ctx,
            fleet,
            mut executors,
            executions,
            continuous,
            observe,
            ..
        } = self;
        for executor in &mut executors {
            if let Executor::Continuous(c) = executor
                && c.scheduler.is_busy()
            {
                // Every request is answered, so a step still running computes only for requests
                // whose clients gave up: it samples nothing, and the run ends at its last response.
                c.scheduler.complete_step(ctx.now.ns(), |token| {
                    unreachable!("a step past the last response sampled {token:?}")
                });
            }
        }
        observe.finish(
            ctx,
            &fleet,
            executions.iter().map(|e| e.extrapolated_batches),
            executors.iter_mut().filter_map(|e| match e {
                Executor::Continuous(c) => Some(&mut c.scheduler),
                Executor::Dynamic(_) => None,
            }),
            continuous.completed_tokens + continuous.aborted_tokens,
        )
    }
}
