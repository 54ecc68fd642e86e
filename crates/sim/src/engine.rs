//! The discrete-event engine: replays a trace through a [`Scenario`] and accounts for every
//! request.
//!
//! Time is an integer count of nanoseconds. Pending events sit in an [`EventQueue`] ordered by
//! (time, sequence number); trace arrivals are already sorted, so they are merged with the queue
//! instead of being pushed through it (at equal times, queued events run first). Stages that take
//! no time in a scenario (no network latency, no post-processing) are run inline, without an
//! event. In-flight requests live in a small table of reusable *tickets*, so the engine's memory
//! is bounded by the requests in flight, not by the trace's length; finished requests go to a
//! [`RecordSink`] and a streaming [`SummaryBuilder`].
//!
//! At the end the engine asserts that every request sent was completed, rejected or timed out.

use std::collections::HashMap;
use std::sync::Arc;

use rand::RngExt;

use capsim_trace::Trace;

use crate::batcher::{Batcher, BatcherThread, Decision, IDLE_POLL_NS};
use crate::build::BuiltScenario;
use crate::event::{Event, EventKind, EventQueue};
use crate::gateway::{Admission, Balancer, Refusal};
use crate::instance::{FreeSet, Instance, ModelInstance};
use crate::llm::scheduler::{NewSeq, Scheduler, Token, Unservable};
use crate::network::NetworkPath;
use crate::postprocess;
use crate::preprocess::{self, WorkerPool};
use crate::queue::{Entry, InstanceQueue, Part};
use crate::record::{NoRecords, Outcome, RecordSink, RejectReason, RequestLog, RequestRecord};
use crate::rng::{Component, SimRng, stream};
use crate::scenario::{
    LoadMode, PostprocessSpec, PreprocessSpec, RetryOn, Scenario, TimeoutAction,
};
use crate::summary::{InstanceUtilization, LlmSummary, Summary, SummaryBuilder};
use crate::time::SimTime;
use crate::timeseries::{IntervalCounters, LlmState, State, Timeseries};
use crate::timing::service::{BatchShape, ServiceTime};
use crate::timing::step_time::StepTime;

/// Which requests are excluded from statistics as warm-up (they are still simulated and counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Warmup {
    /// Measure everything.
    #[default]
    None,
    /// Exclude requests sent before this time, in nanoseconds.
    DurationNs(u64),
    /// Exclude the first this-many requests of the trace.
    Count(u64),
}

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

/// What a run produced besides per-request records.
#[derive(Debug, Clone)]
pub struct Run {
    /// The summary.
    pub summary: Summary,
    /// The sampled timeseries.
    pub timeseries: Timeseries,
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
            "pre-processing (`preprocess.base`, `preprocess.per_input_token`)"
        }
        EventKind::QueueTimeout => "a queue timeout (`queue.timeout`)",
        EventKind::BatcherTimer => "the batcher's timer (`batcher.max_queue_delay`)",
        EventKind::BatcherPoll => "the batcher's 500 ms poll",
        EventKind::BatchDone => {
            "a batch or step executing (`[service]` or `[step_time]` and the batcher's step overheads, with the trace's token counts)"
        }
        EventKind::ModelInstanceReady => "a model instance loading (`execution.cold_start`)",
        EventKind::PostprocessDone => {
            "post-processing (`postprocess.base`, `postprocess.per_output_token`)"
        }
        EventKind::ClientSend => "a closed-loop client's pause (`load.think_time`)",
        EventKind::RetrySend => "a retry's backoff (`retry.backoff`, `retry.backoff_multiplier`)",
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
            now_s: engine.now.as_secs_f64(),
            cause: horizon_cause(kind),
        });
    }
    Ok(engine.finish())
}

// FIFO lanes of the event queue: stages whose delay is a constant of the stage, so their events
// are scheduled in time order (see `crate::event`). Were a delay to vary after all (two pools
// with different constants), the queue sends the out-of-order event to its heap: the order of
// events never depends on the lane chosen, only the speed does.
const LANE_GATEWAY: usize = 0;
const LANE_CACHE: usize = 1;
const LANE_POSTPROCESS: usize = 2;
const LANE_TIMEOUT: usize = 3;
const LANE_CLIENT: usize = 4;
const LANE_UPLINK: usize = 5;
const LANE_DOWNLINK: usize = 6;
const LANES: usize = 7;
/// A lane index that does not exist: the event goes to the heap.
const NO_LANE: usize = usize::MAX;

/// Which of [`crate::summary::STAGES`] the scenario models (the others take no time).
fn modeled_stages(scenario: &Scenario, uplink_instant: bool, downlink_instant: bool) -> [bool; 8] {
    let pools = scenario.pools();
    [
        true,
        !uplink_instant,
        scenario.gateway.overhead.0 > 0 || scenario.cache.latency.0 > 0,
        pools.iter().any(|p| p.preprocess.is_some()),
        true,
        true,
        pools
            .iter()
            .any(|p| !postprocess::is_instant(&p.postprocess)),
        !downlink_instant,
    ]
}

/// Where an in-flight request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Free,
    NetworkIn,
    Gateway,
    Preprocess,
    Queued,
    Delayed,
    Executing,
    Postprocess,
    NetworkOut,
    Backoff,
}

#[derive(Debug, Clone, Copy)]
struct Ticket {
    record: RequestRecord,
    stage: Stage,
    generation: u32,
    level: u32,
    measured: bool,
    admitted: bool,
    /// Continuous batching: when its latest output token was sampled.
    last_token_ns: u64,
}

/// A pool's settings and random streams, ready for the hot loop.
struct PoolState {
    batcher: Batcher,
    /// `max_input_tokens`, or `u32::MAX` for none.
    max_input_tokens: u32,
    /// `max_output_tokens`, or `u32::MAX` for none.
    max_output_tokens: u32,
    max_queue_size: u32,
    timeout_ns: Option<u64>,
    timeout_action: TimeoutAction,
    levels: u32,
    preprocess: Option<PreprocessSpec>,
    postprocess: PostprocessSpec,
    postprocess_instant: bool,
    /// Dynamic batcher's model (`None` for a continuous pool).
    service: Option<Arc<dyn ServiceTime>>,
    /// Continuous batcher's step-time model.
    step_time: Option<Arc<dyn StepTime>>,
    /// Whether `service` or `step_time` can ever extrapolate (asked once, so analytic models
    /// cost nothing).
    may_extrapolate: bool,
    /// Batches started whose execution time the model extrapolated.
    extrapolated_batches: u64,
    first_instance: u32,
    /// Active instances (a prefix of the pool's instances; the rest are standby).
    instances: u32,
    standby_left: u32,
    activate_at_outstanding: u32,
    cold_start_ns: u64,
    balancer: Balancer,
    balancer_rng: SimRng,
    execution_rng: SimRng,
}

struct Engine<'a> {
    scenario: &'a Scenario,
    seed: u64,
    warmup: Warmup,
    arrival_ns: &'a [u64],
    input_tokens: &'a [u32],
    output_tokens: Option<&'a [u32]>,
    class: Option<&'a [u32]>,
    model: Option<&'a capsim_trace::StringColumn>,
    model_pool: HashMap<String, u16>,
    class_pool: HashMap<u32, u16>,

    uplink: NetworkPath,
    uplink_instant: bool,
    uplink_rng: SimRng,
    /// [`LANE_UPLINK`] when the uplink's delay is constant, else no lane (the heap).
    uplink_lane: usize,
    downlink: NetworkPath,
    downlink_instant: bool,
    downlink_rng: SimRng,
    downlink_lane: usize,
    gateway_overhead_ns: u64,
    admission: Admission,
    cache_hit_probability: f64,
    cache_latency_ns: u64,
    cache_rng: SimRng,
    closed_loop: bool,
    think_time_ns: u64,

    pools: Vec<PoolState>,
    instances: Vec<Instance>,
    model_instances: Vec<ModelInstance>,
    /// Continuous batchers, by instance (`None` for dynamic-batcher instances).
    schedulers: Vec<Option<Scheduler>>,
    has_llm: bool,
    /// The continuous batchers' state summed over their instances, for the timeseries:
    /// updated where it changes (requests queued or taken, steps planned or completed).
    llm_state: LlmState,
    prefix_blocks: Option<&'a capsim_trace::ListColumn>,
    /// Tokens of the step being completed (capacity kept between steps).
    token_buf: Vec<Token>,
    /// Output tokens of completed continuous-batching requests (checked against the samples).
    llm_completed_tokens: u64,
    tickets: Vec<Ticket>,
    free_tickets: Vec<u32>,
    events: EventQueue,

    now: SimTime,
    next_request: usize,
    first_attempts: u64,
    /// Attempts waiting out a retry's backoff (out of the system, still to be sent).
    backing_off: u64,
    retry_max_attempts: u32,
    retry_backoff_ns: u64,
    retry_multiplier: f64,
    retry_rejected: bool,
    retry_timed_out: bool,
    next_batch_id: u64,
    sent: u64,
    finished: u64,
    in_system: u32,
    queued: u32,
    preprocess_waiting: u32,
    busy_model_instances: u32,
    in_system_area: u128,

    /// Set when the run stopped at an event at or past [`SimTime::HORIZON`]: its kind.
    past_horizon: Option<EventKind>,
    interval_ns: u64,
    /// Rows the timeseries may hold (even): reaching it merges rows in pairs and doubles
    /// `interval_ns`.
    timeseries_max_rows: usize,
    next_sample: SimTime,
    last_sample: SimTime,
    interval: IntervalCounters,
    timeseries: Timeseries,
    summary: SummaryBuilder,
}

/// Whether a queue entry still stands for its ticket: the ticket was not reused since (same
/// generation) and is still waiting in that part of the queue (not timed out or taken).
#[inline]
fn queued_entry_is_live(tickets: &[Ticket], e: Entry, part: Part) -> bool {
    let t = &tickets[e.ticket as usize];
    t.generation == e.generation
        && match part {
            Part::Main => t.stage == Stage::Queued,
            Part::Delayed => t.stage == Stage::Delayed,
        }
}

impl<'a> Engine<'a> {
    fn new(built: &'a BuiltScenario, trace: &'a Trace, options: &RunOptions) -> Engine<'a> {
        let scenario = &built.scenario;
        let seed = options.seed;
        let mut pools = Vec::new();
        let mut instances = Vec::new();
        let mut model_instances = Vec::new();
        let mut schedulers = Vec::new();
        let mut events = EventQueue::new(1024, LANES);
        let mut model_pool = HashMap::new();
        let mut class_pool = HashMap::new();
        for (p, pool) in scenario.pools().iter().enumerate() {
            let models = &built.pools[p];
            let p16 = p as u16;
            for m in &pool.models {
                model_pool.entry(m.clone()).or_insert(p16);
            }
            for &c in &pool.classes {
                class_pool.entry(c).or_insert(p16);
            }
            let first_instance = instances.len() as u32;
            let per_instance = pool.execution.gpus * pool.execution.instance_count;
            let cold_start_ns = pool.execution.cold_start.0;
            for i in 0..pool.instances + pool.standby.instances {
                let index = instances.len() as u32;
                let standby = i >= pool.instances;
                instances.push(Instance {
                    pool: p16,
                    index_in_pool: i,
                    queue: InstanceQueue::new(pool.queue.priority_levels),
                    workers: pool
                        .preprocess
                        .as_ref()
                        .map(|pre| WorkerPool::new(pre.workers)),
                    first_model_instance: model_instances.len() as u32,
                    model_instances: per_instance,
                    free: FreeSet::new(per_instance, cold_start_ns == 0 && !standby),
                    outstanding: 0,
                    timer_at: SimTime::NEVER,
                    batcher: BatcherThread::default(),
                    batcher_idle_since: None,
                    poll_at: SimTime::NEVER,
                    poll_event_at: SimTime::NEVER,
                });
                schedulers.push(
                    pool.llm
                        .as_ref()
                        .map(|l| Scheduler::new(l.scheduler.clone())),
                );
                for k in 0..per_instance {
                    if cold_start_ns > 0 && !standby {
                        events.push(
                            cold_start_ns,
                            EventKind::ModelInstanceReady,
                            model_instances.len() as u32,
                            0,
                        );
                    }
                    model_instances.push(ModelInstance::new(
                        index,
                        k,
                        cold_start_ns == 0 && !standby,
                        pool.batcher.max_batch_size,
                    ));
                }
            }
            let service = models.service.as_ref().map(|s| {
                options
                    .service_override
                    .clone()
                    .unwrap_or_else(|| s.clone())
            });
            pools.push(PoolState {
                batcher: Batcher::new(
                    &pool.batcher,
                    // Triton prefetches payloads only without a queue policy.
                    pool.queue.timeout.is_none()
                        && pool.queue.max_queue_size == 0
                        && pool.queue.priority_levels == 1,
                ),
                max_input_tokens: pool.max_input_tokens.unwrap_or(u32::MAX),
                max_output_tokens: pool.max_output_tokens.unwrap_or(u32::MAX),
                max_queue_size: pool.queue.max_queue_size,
                timeout_ns: pool.queue.timeout.map(|d| d.0),
                timeout_action: pool.queue.timeout_action,
                levels: pool.queue.priority_levels,
                preprocess: pool.preprocess.clone(),
                postprocess: pool.postprocess.clone(),
                postprocess_instant: postprocess::is_instant(&pool.postprocess),
                may_extrapolate: service.as_ref().is_some_and(|s| s.may_extrapolate())
                    || models
                        .step_time
                        .as_ref()
                        .is_some_and(|s| s.may_extrapolate()),
                extrapolated_batches: 0,
                service,
                step_time: models.step_time.clone(),
                first_instance,
                instances: pool.instances,
                standby_left: pool.standby.instances,
                activate_at_outstanding: pool.standby.activate_at_outstanding,
                cold_start_ns,
                balancer: Balancer::new(scenario.gateway.load_balancing),
                balancer_rng: stream(seed, Component::Balancer, p as u32),
                execution_rng: stream(seed, Component::Execution, p as u32),
            });
        }
        let has_llm = schedulers.iter().any(Option::is_some);
        let llm_state = LlmState {
            kv_blocks_total: schedulers
                .iter()
                .flatten()
                .map(|s| u64::from(s.kv_total()))
                .sum(),
            ..LlmState::default()
        };
        let uplink = NetworkPath::uplink(&scenario.network);
        let downlink = NetworkPath::downlink(&scenario.network);
        let lane_if_constant = |path: &NetworkPath, lane: usize| {
            if path.is_constant() { lane } else { NO_LANE }
        };
        let uplink_lane = lane_if_constant(&uplink, LANE_UPLINK);
        let downlink_lane = lane_if_constant(&downlink, LANE_DOWNLINK);
        let closed_loop = scenario.load.mode == LoadMode::Closed;
        if closed_loop {
            // A client past the trace's length would find nothing to send.
            let clients = u64::from(scenario.load.concurrency).min(trace.len() as u64) as u32;
            for client in 0..clients {
                events.push_in_order(LANE_CLIENT, 0, EventKind::ClientSend, client, 0);
            }
        }
        let interval_ns = scenario.timeseries.interval.0;
        let uplink_instant = uplink.is_instant();
        let downlink_instant = downlink.is_instant();
        Engine {
            scenario,
            seed,
            warmup: options.warmup,
            arrival_ns: trace.arrival_ns(),
            input_tokens: trace.input_tokens(),
            output_tokens: trace.output_tokens(),
            class: trace.class(),
            model: trace.model(),
            model_pool,
            class_pool,
            uplink_instant,
            uplink,
            uplink_rng: stream(seed, Component::NetworkUp, 0),
            uplink_lane,
            downlink_instant,
            downlink,
            downlink_rng: stream(seed, Component::NetworkDown, 0),
            downlink_lane,
            gateway_overhead_ns: scenario.gateway.overhead.0,
            admission: Admission::new(&scenario.gateway),
            cache_hit_probability: scenario.cache.hit_probability,
            cache_latency_ns: scenario.cache.latency.0,
            cache_rng: stream(seed, Component::Cache, 0),
            closed_loop,
            think_time_ns: scenario.load.think_time.0,
            pools,
            instances,
            model_instances,
            schedulers,
            has_llm,
            llm_state,
            prefix_blocks: trace.prefix_blocks(),
            token_buf: Vec::with_capacity(256),
            llm_completed_tokens: 0,
            tickets: Vec::with_capacity(1024),
            free_tickets: Vec::with_capacity(1024),
            events,
            now: SimTime::ZERO,
            next_request: 0,
            first_attempts: 0,
            backing_off: 0,
            retry_max_attempts: scenario.retry.max_attempts,
            retry_backoff_ns: scenario.retry.backoff.0,
            retry_multiplier: scenario.retry.backoff_multiplier,
            retry_rejected: scenario.retry.on.contains(&RetryOn::Rejected),
            retry_timed_out: scenario.retry.on.contains(&RetryOn::TimedOut),
            next_batch_id: 0,
            sent: 0,
            finished: 0,
            in_system: 0,
            queued: 0,
            preprocess_waiting: 0,
            busy_model_instances: 0,
            in_system_area: 0,
            past_horizon: None,
            interval_ns,
            timeseries_max_rows: (scenario.timeseries.max_rows & !1).max(2) as usize,
            next_sample: SimTime(interval_ns),
            last_sample: SimTime::ZERO,
            interval: IntervalCounters::default(),
            timeseries: Timeseries::default(),
            summary: {
                let slo = scenario.slo.as_ref();
                let builder = SummaryBuilder::new(
                    slo.and_then(|s| s.latency).map(|d| d.0),
                    modeled_stages(scenario, uplink_instant, downlink_instant),
                );
                if has_llm {
                    builder.with_token_metrics(
                        slo.and_then(|s| s.ttft).map(|d| d.0),
                        slo.and_then(|s| s.tpot).map(|d| d.0),
                    )
                } else {
                    builder
                }
            },
        }
    }

    /// Runs until every request is answered, or until the next event lies at or past
    /// [`SimTime::HORIZON`] (then `past_horizon` names it and the end-of-run checks are skipped).
    fn run<S: RecordSink>(&mut self, sink: &mut S) {
        let rows = self.arrival_ns.len();
        // The trace's arrivals drive an open-loop run; closed-loop clients send on their own.
        let open_loop_arrivals: &[u64] = if self.closed_loop {
            &[]
        } else {
            self.arrival_ns
        };
        loop {
            if self.in_system == 0 && self.next_request == rows && self.backing_off == 0 {
                // Every request is answered and none is left to send: what is still queued
                // (a cold start, a closed-loop client's last think time, a batcher timer whose
                // requests timed out) changes nothing, and would stretch the run's end past its
                // last response.
                break;
            }
            let next_arrival_ns = open_loop_arrivals
                .get(self.next_request)
                .copied()
                .unwrap_or(u64::MAX);
            if let Some(event) = self.events.pop_until(next_arrival_ns) {
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
                let request = self.next_request;
                self.next_request += 1;
                self.send(request as u32, u32::MAX, sink);
            } else {
                break;
            }
        }
        assert_eq!(
            self.in_system, 0,
            "requests left in the system after the run drained"
        );
        assert_eq!(self.sent, self.finished, "every request sent must finish");
        assert_eq!(
            self.first_attempts as usize, rows,
            "every request of the trace must be sent exactly once"
        );
        let counts = self.summary.counts();
        assert!(
            counts.adds_up() && counts.total == self.sent,
            "completed {} + rejected {} + timed out {} != total {}",
            counts.completed,
            counts.rejected,
            counts.timed_out,
            self.sent
        );
    }

    /// Moves the clock to `t`, integrating time-weighted state and emitting timeseries rows.
    #[inline]
    fn advance(&mut self, t: SimTime) {
        assert!(
            t >= self.now,
            "time went backwards: {:?} -> {:?}",
            self.now,
            t
        );
        while self.next_sample <= t {
            let boundary = self.next_sample;
            self.integrate(boundary);
            self.sample(boundary);
            if self.timeseries.len() >= self.timeseries_max_rows {
                // Rows so far end at multiples of the interval and their count is even, so
                // merging pairs leaves the series sampled at twice the interval.
                self.timeseries.merge_pairs();
                self.interval_ns = self.interval_ns.saturating_mul(2);
            }
            self.next_sample = boundary + self.interval_ns;
        }
        self.integrate(t);
    }

    /// True for a queue timeout or batcher timer whose request or deadline has moved on: its
    /// handler would do nothing.
    #[inline]
    fn is_stale_timer(&self, event: &Event) -> bool {
        match event.kind {
            EventKind::QueueTimeout => {
                let t = &self.tickets[event.target as usize];
                t.generation != event.aux || t.stage != Stage::Queued
            }
            EventKind::BatcherTimer => {
                self.instances[event.target as usize].timer_at != SimTime(event.time_ns())
            }
            EventKind::BatcherPoll => {
                self.instances[event.target as usize].poll_at != SimTime(event.time_ns())
            }
            _ => false,
        }
    }

    /// A stale batcher poll still carries the instance's next one: each instance keeps at most
    /// one poll event queued (an idle thread's poll is asked for at nearly every arrival), moved
    /// on to the poll now wanted, if any.
    fn carry_poll(&mut self, event: &Event) {
        if event.kind != EventKind::BatcherPoll {
            return;
        }
        let instance = &mut self.instances[event.target as usize];
        instance.poll_event_at = SimTime::NEVER;
        if instance.poll_at != SimTime::NEVER {
            instance.poll_event_at = instance.poll_at;
            self.events.push(
                instance.poll_at.ns(),
                EventKind::BatcherPoll,
                event.target,
                0,
            );
        }
    }

    #[inline]
    fn integrate(&mut self, t: SimTime) {
        let dt = u128::from(t - self.now);
        self.in_system_area += u128::from(self.in_system) * dt;
        self.interval.busy_area += u128::from(self.busy_model_instances) * dt;
        self.now = t;
    }

    fn sample(&mut self, at: SimTime) {
        let state = State {
            queued: self.queued,
            preprocess_waiting: self.preprocess_waiting,
            in_system: self.in_system,
            busy_model_instances: self.busy_model_instances,
        };
        let length_ns = at - self.last_sample;
        self.timeseries.push(
            at.ns(),
            length_ns,
            self.model_instances.len() as u32,
            state,
            &self.interval,
        );
        if self.has_llm {
            // Kept up to date step by step: a sample costs the same with one server or 100,000.
            self.timeseries.push_llm(self.llm_state);
        }
        self.interval = IntervalCounters::default();
        self.last_sample = at;
    }

    fn handle<S: RecordSink>(&mut self, kind: EventKind, target: u32, aux: u32, sink: &mut S) {
        let now = self.now;
        match kind {
            EventKind::GatewayArrival => self.gateway_arrival(target, sink),
            EventKind::GatewayDone => self.route(target, sink),
            EventKind::CacheAnswered => self.postprocessed(target, sink),
            EventKind::PreprocessDone => self.preprocess_done(target, sink),
            EventKind::QueueTimeout => self.queue_timeout(target, aux, sink),
            EventKind::BatcherTimer => {
                let instance = &mut self.instances[target as usize];
                // `run` drops timers whose deadline has moved (`is_stale_timer`).
                debug_assert_eq!(instance.timer_at, now);
                instance.timer_at = SimTime::NEVER;
                self.dispatch(target);
            }
            EventKind::BatcherPoll => {
                let instance = &mut self.instances[target as usize];
                debug_assert_eq!(instance.poll_at, now);
                instance.poll_event_at = SimTime::NEVER;
                self.dispatch(target);
            }
            EventKind::BatchDone => self.batch_done(target, sink),
            EventKind::ModelInstanceReady => {
                let mi = &mut self.model_instances[target as usize];
                mi.ready = true;
                mi.idle_since = now;
                let (instance, k) = (mi.instance, mi.index_in_instance);
                self.instances[instance as usize].free.insert(k);
                self.dispatch(instance);
            }
            EventKind::PostprocessDone => self.postprocessed(target, sink),
            EventKind::ResponseDelivered => self.deliver(target, sink),
            EventKind::RetrySend => self.retry(target, sink),
            EventKind::ClientSend => {
                if self.next_request < self.arrival_ns.len() {
                    let request = self.next_request;
                    self.next_request += 1;
                    self.send(request as u32, target, sink);
                }
            }
        }
    }

    #[inline]
    fn new_ticket(&mut self, record: RequestRecord, level: u32, measured: bool) -> u32 {
        let ticket = Ticket {
            record,
            stage: Stage::NetworkIn,
            generation: 0,
            level,
            measured,
            admitted: false,
            last_token_ns: 0,
        };
        match self.free_tickets.pop() {
            Some(t) => {
                let generation = self.tickets[t as usize].generation;
                self.tickets[t as usize] = Ticket {
                    generation,
                    ..ticket
                };
                t
            }
            None => {
                self.tickets.push(ticket);
                (self.tickets.len() - 1) as u32
            }
        }
    }

    /// A client sends trace row `request` now.
    #[inline]
    fn send<S: RecordSink>(&mut self, request: u32, client: u32, sink: &mut S) {
        let row = request as usize;
        let now = self.now.ns();
        let mut record = RequestRecord::new(request, 1, now);
        record.client = client;
        record.input_tokens = self.input_tokens[row];
        record.output_tokens = self.output_tokens.map_or(0, |o| o[row]);
        let level = self.class.map_or(0, |c| c[row]);
        let measured = match self.warmup {
            Warmup::None => true,
            Warmup::DurationNs(d) => now >= d,
            Warmup::Count(n) => u64::from(request) >= n,
        };
        let ticket = self.new_ticket(record, level, measured);
        self.first_attempts += 1;
        self.launch(ticket, sink);
    }

    /// A client's attempt leaves for the gateway.
    #[inline]
    fn launch<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let now = self.now.ns();
        self.sent += 1;
        self.in_system += 1;
        self.interval.arrivals += 1;
        if self.uplink_instant {
            self.gateway_arrival(ticket, sink);
        } else {
            let tokens = self.tickets[ticket as usize].record.input_tokens;
            let delay_ns = self.uplink.delay_ns(tokens, &mut self.uplink_rng);
            self.events.push_in_order(
                self.uplink_lane,
                now.saturating_add(delay_ns),
                EventKind::GatewayArrival,
                ticket,
                0,
            );
        }
    }

    /// A client sends attempt `attempt + 1` of the request whose last attempt failed on `ticket`.
    fn retry<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let now = self.now.ns();
        let t = &mut self.tickets[ticket as usize];
        debug_assert_eq!(t.stage, Stage::Backoff);
        self.backing_off -= 1;
        let last = t.record;
        let mut record = RequestRecord::new(last.request, last.attempt + 1, now);
        record.client = last.client;
        // The trace's sizes: the last attempt's may have been truncated by its pool.
        let row = last.request as usize;
        record.input_tokens = self.input_tokens[row];
        record.output_tokens = self.output_tokens.map_or(0, |o| o[row]);
        t.record = record;
        t.stage = Stage::NetworkIn;
        t.admitted = false;
        self.launch(ticket, sink);
    }

    #[inline]
    fn gateway_arrival<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let now = self.now.ns();
        let t = &mut self.tickets[ticket as usize];
        t.record.gateway_ns = now;
        t.stage = Stage::Gateway;
        match self.admission.admit(now) {
            Err(refusal) => {
                let reason = match refusal {
                    Refusal::RateLimited => RejectReason::RateLimited,
                    Refusal::MaxInFlight => RejectReason::MaxInFlight,
                };
                self.end(ticket, Outcome::Rejected(reason), sink);
            }
            Ok(()) => {
                let t = &mut self.tickets[ticket as usize];
                t.admitted = true;
                if self.cache_hit_probability > 0.0
                    && self.cache_rng.random_bool(self.cache_hit_probability)
                {
                    t.record.cache_hit = true;
                    t.record.admitted_ns = now;
                    self.events.push_in_order(
                        LANE_CACHE,
                        now.saturating_add(self.cache_latency_ns),
                        EventKind::CacheAnswered,
                        ticket,
                        0,
                    );
                    return;
                }
                if self.gateway_overhead_ns == 0 {
                    self.route(ticket, sink);
                } else {
                    self.events.push_in_order(
                        LANE_GATEWAY,
                        now.saturating_add(self.gateway_overhead_ns),
                        EventKind::GatewayDone,
                        ticket,
                        0,
                    );
                }
            }
        }
    }

    #[inline(always)]
    fn pool_of(&self, row: usize) -> u16 {
        if self.pools.len() == 1 {
            return 0;
        }
        self.routed_pool_of(row)
    }

    /// [`Engine::pool_of`] where there are several pools.
    #[inline(never)]
    fn routed_pool_of(&self, row: usize) -> u16 {
        if let Some(model) = self.model
            && let Some(&p) = self.model_pool.get(model.get(row))
        {
            return p;
        }
        if let Some(class) = self.class
            && let Some(&p) = self.class_pool.get(&class[row])
        {
            return p;
        }
        0
    }

    /// The gateway routes an admitted request to an instance of its pool.
    #[inline]
    fn route<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let now = self.now.ns();
        let row = self.tickets[ticket as usize].record.request as usize;
        let p = self.pool_of(row);
        if self.pools[p as usize].standby_left > 0 {
            self.activate_standby_if_needed(p);
        }
        let pool = &mut self.pools[p as usize];
        let first = pool.first_instance as usize;
        let instances = &self.instances;
        let pick = pool.balancer.pick(
            pool.instances,
            &mut pool.balancer_rng,
            |i| instances[first + i as usize].outstanding,
            |i| instances[first + i as usize].waiting(),
        );
        let instance_index = pool.first_instance + pick;
        let t = &mut self.tickets[ticket as usize];
        t.record.pool = p;
        t.record.instance = pick;
        t.record.admitted_ns = now;
        t.level = t.level.min(pool.levels - 1);
        let instance = &mut self.instances[instance_index as usize];
        instance.outstanding += 1;
        match &pool.preprocess {
            None => self.enqueue(ticket, instance_index, sink),
            Some(spec) => {
                t.stage = Stage::Preprocess;
                let workers = instance
                    .workers
                    .as_mut()
                    .expect("pool with preprocess has workers");
                if workers.start_or_wait(ticket) {
                    let done = now.saturating_add(preprocess::time_ns(spec, t.record.input_tokens));
                    self.events.push(done, EventKind::PreprocessDone, ticket, 0);
                } else {
                    self.preprocess_waiting += 1;
                }
            }
        }
    }

    /// Activates the pool's next standby instance when every active one is loaded to the
    /// threshold; its model instances become ready after the cold start.
    fn activate_standby_if_needed(&mut self, p: u16) {
        let now = self.now.ns();
        let pool = &mut self.pools[p as usize];
        if pool.standby_left == 0 {
            return;
        }
        let first = pool.first_instance as usize;
        let active = &self.instances[first..first + pool.instances as usize];
        if active
            .iter()
            .any(|i| i.outstanding < pool.activate_at_outstanding)
        {
            return;
        }
        let index = pool.first_instance + pool.instances;
        pool.instances += 1;
        pool.standby_left -= 1;
        let instance = &mut self.instances[index as usize];
        let from = instance.first_model_instance;
        for mi in from..from + instance.model_instances {
            if pool.cold_start_ns == 0 {
                let model_instance = &mut self.model_instances[mi as usize];
                model_instance.ready = true;
                model_instance.idle_since = self.now;
                instance.free.insert(mi - from);
            } else {
                self.events.push(
                    now.saturating_add(pool.cold_start_ns),
                    EventKind::ModelInstanceReady,
                    mi,
                    0,
                );
            }
        }
    }

    #[inline]
    fn preprocess_done<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let now = self.now.ns();
        let record = self.tickets[ticket as usize].record;
        let instance_index = self.pools[record.pool as usize].first_instance + record.instance;
        let instance = &mut self.instances[instance_index as usize];
        let workers = instance
            .workers
            .as_mut()
            .expect("pool with preprocess has workers");
        if let Some(next) = workers.finish() {
            self.preprocess_waiting -= 1;
            let spec = self.pools[record.pool as usize]
                .preprocess
                .as_ref()
                .expect("pool with workers has a preprocess spec");
            let tokens = self.tickets[next as usize].record.input_tokens;
            self.events.push(
                now.saturating_add(preprocess::time_ns(spec, tokens)),
                EventKind::PreprocessDone,
                next,
                0,
            );
        }
        self.enqueue(ticket, instance_index, sink);
    }

    /// The request enters its instance's queue (or is rejected: queue full).
    #[inline]
    fn enqueue<S: RecordSink>(&mut self, ticket: u32, instance_index: u32, sink: &mut S) {
        let now = self.now.ns();
        let t = &mut self.tickets[ticket as usize];
        let pool = &self.pools[t.record.pool as usize];
        // The model's limits apply to what pre-processing hands on (a tokenizer reads the whole
        // input and truncates its output), and to everything after it.
        if t.record.input_tokens > pool.max_input_tokens {
            t.record.input_tokens = pool.max_input_tokens;
            t.record.input_truncated = true;
        }
        if t.record.output_tokens > pool.max_output_tokens {
            t.record.output_tokens = pool.max_output_tokens;
            t.record.output_truncated = true;
        }
        let instance = &mut self.instances[instance_index as usize];
        if let Some(scheduler) = &self.schedulers[instance_index as usize]
            && let Some(why) = scheduler
                .config()
                .unservable(t.record.input_tokens, t.record.output_tokens)
        {
            instance.outstanding -= 1;
            let reason = match why {
                Unservable::KvCapacity => RejectReason::KvCapacity,
                Unservable::PromptTooLong => RejectReason::PromptTooLong,
            };
            self.end(ticket, Outcome::Rejected(reason), sink);
            return;
        }
        if pool.max_queue_size > 0 && instance.queue.len() >= pool.max_queue_size {
            instance.outstanding -= 1;
            self.end(ticket, Outcome::Rejected(RejectReason::QueueFull), sink);
            return;
        }
        t.record.queued_ns = now;
        t.stage = Stage::Queued;
        let entry = Entry {
            ticket,
            generation: t.generation,
            queued_ns: now,
        };
        instance.queue.push(t.level, entry, Part::Main);
        self.queued += 1;
        if self.schedulers[instance_index as usize].is_some() {
            self.llm_state.waiting += 1;
        }
        if let Some(timeout_ns) = pool.timeout_ns {
            self.events.push_in_order(
                LANE_TIMEOUT,
                now.saturating_add(timeout_ns),
                EventKind::QueueTimeout,
                ticket,
                t.generation,
            );
        }
        self.arrived(instance_index);
    }

    fn queue_timeout<S: RecordSink>(&mut self, ticket: u32, generation: u32, sink: &mut S) {
        let t = &mut self.tickets[ticket as usize];
        // `run` drops stale timeouts before they get here (`is_stale_timer`).
        debug_assert!(t.generation == generation && t.stage == Stage::Queued);
        let pool = &self.pools[t.record.pool as usize];
        let instance_index = pool.first_instance + t.record.instance;
        let instance = &mut self.instances[instance_index as usize];
        instance.queue.forget_one();
        match pool.timeout_action {
            TimeoutAction::Reject => {
                self.queued -= 1;
                if self.schedulers[instance_index as usize].is_some() {
                    self.llm_state.waiting -= 1;
                }
                instance.outstanding -= 1;
                self.end(ticket, Outcome::TimedOut, sink);
            }
            TimeoutAction::Delay => {
                t.stage = Stage::Delayed;
                let entry = Entry {
                    ticket,
                    generation,
                    queued_ns: t.record.queued_ns,
                };
                instance.queue.push(t.level, entry, Part::Delayed);
            }
        }
    }

    /// Wakes `instance_index`'s batcher after a batch finished, a model instance became ready or
    /// its timer ran out: free model instances take the waiting payloads, then the batcher
    /// thread runs (a continuous batcher plans its next step).
    #[inline(always)]
    fn dispatch(&mut self, instance_index: u32) {
        let index = instance_index as usize;
        if self.schedulers[index].is_some() {
            self.plan_step(instance_index);
            return;
        }
        if self.pools[self.instances[index].pool as usize]
            .batcher
            .max_batch_size
            == 1
        {
            self.start_singles(instance_index);
            return;
        }
        self.start_payloads(instance_index);
        self.run_batcher(instance_index);
    }

    /// Without batching (`max_batch_size = 1`) Triton runs no batcher thread: each request is a
    /// payload of its own, and free model instances take them in order.
    #[inline]
    fn start_singles(&mut self, instance_index: u32) {
        loop {
            let instance = &self.instances[instance_index as usize];
            if instance.queue.is_empty() {
                return;
            }
            let Some(free) = instance.free.first() else {
                return;
            };
            let mi_index = instance.first_model_instance + free;
            self.start_batch(instance_index, mi_index, 1);
        }
    }

    /// A request was queued at `instance_index`: the batcher runs if the arrival wakes it
    /// (Triton's `Enqueue`, see [`crate::batcher`]); if not, and it sleeps with nothing else to
    /// wait for, its 500 ms poll is armed.
    #[inline]
    fn arrived(&mut self, instance_index: u32) {
        let index = instance_index as usize;
        if self.schedulers[index].is_some() {
            self.plan_step(instance_index);
            return;
        }
        let instance = &mut self.instances[index];
        let batcher = &self.pools[instance.pool as usize].batcher;
        if batcher.max_batch_size == 1 {
            self.start_singles(instance_index);
            return;
        }
        let thread = &instance.batcher;
        let waiting = instance.queue.len() - thread.in_payloads();
        let slot = thread.slot_available(batcher, instance.model_instances, instance.free.len());
        if thread.woken_by_arrival(waiting, slot) {
            self.run_batcher(instance_index);
        } else if let Some(since) = instance.batcher_idle_since {
            // The idle thread polls every 500 ms from `since`: the first poll not yet past.
            let polls = (self.now.ns() - since.ns()).div_ceil(IDLE_POLL_NS).max(1);
            let poll = SimTime(
                since
                    .ns()
                    .saturating_add(polls.saturating_mul(IDLE_POLL_NS)),
            );
            instance.poll_at = poll;
            if instance.poll_event_at == SimTime::NEVER {
                instance.poll_event_at = poll;
                self.events
                    .push(poll.ns(), EventKind::BatcherPoll, instance_index, 0);
            }
        }
    }

    /// Free model instances of `instance_index` take the payloads waiting for them, the oldest
    /// first, each starting a batch.
    #[inline]
    fn start_payloads(&mut self, instance_index: u32) {
        let now = self.now.ns();
        loop {
            let instance = &mut self.instances[instance_index as usize];
            let Some(free) = instance.free.first() else {
                return;
            };
            let batcher = &self.pools[instance.pool as usize].batcher;
            let Some(size) = instance.batcher.take(batcher, now) else {
                return;
            };
            let mi_index = instance.first_model_instance + free;
            self.start_batch(instance_index, mi_index, size);
        }
    }

    /// Triton's batcher thread of `instance_index`, awake now: it fills payloads (which free
    /// model instances take at once) until it must sleep: nothing waits, no payload slot is
    /// free, or the rule says wait (its timer is then set).
    fn run_batcher(&mut self, instance_index: u32) {
        let now = self.now;
        let index = instance_index as usize;
        // The thread is awake: the timer it slept on no longer stands (unless set again).
        let previous_timer = std::mem::replace(&mut self.instances[index].timer_at, SimTime::NEVER);
        self.instances[index].poll_at = SimTime::NEVER;
        self.instances[index].batcher_idle_since = None;
        // Each pass moves requests into a payload, replaces a saturated one, or returns.
        loop {
            let instance = &mut self.instances[index];
            let batcher = &self.pools[instance.pool as usize].batcher;
            instance.batcher.refresh();
            let in_payloads = instance.batcher.in_payloads();
            let waiting = instance.queue.len() - in_payloads;
            if waiting == 0 {
                instance.batcher_idle_since = Some(now);
                return;
            }
            let free = instance.free.len();
            if !instance
                .batcher
                .slot_available(batcher, instance.model_instances, free)
            {
                return;
            }
            let oldest_ns = if in_payloads == 0 {
                let tickets = &self.tickets;
                instance
                    .queue
                    .oldest_queued_ns(|e, part| queued_entry_is_live(tickets, e, part))
                    .expect("a non-empty queue has an oldest request")
            } else {
                // Payloads wait only with prefetching, whose queue is one FIFO.
                instance
                    .queue
                    .queued_ns_at(in_payloads)
                    .expect("requests wait behind the payloads")
            };
            match batcher.decide_payload(&mut instance.batcher, now.ns(), waiting, oldest_ns) {
                Decision::Send(0) => {}
                Decision::Send(n) => {
                    instance.batcher.add(n, oldest_ns);
                    self.start_payloads(instance_index);
                }
                Decision::WaitUntil(deadline_ns) => {
                    let deadline = SimTime(deadline_ns);
                    instance.timer_at = deadline;
                    if deadline != previous_timer {
                        self.events
                            .push(deadline_ns, EventKind::BatcherTimer, instance_index, 0);
                    }
                    return;
                }
                Decision::Idle => unreachable!("the batcher is asked only with requests waiting"),
            }
        }
    }

    #[inline]
    fn start_batch(&mut self, instance_index: u32, mi_index: u32, size: u32) {
        let now = self.now.ns();
        let batch_id = self.next_batch_id;
        self.next_batch_id += 1;
        let instance = &mut self.instances[instance_index as usize];
        let pool = &mut self.pools[instance.pool as usize];
        let mi = &mut self.model_instances[mi_index as usize];
        debug_assert!(mi.is_free() && mi.members.is_empty());
        assert!(
            size >= 1 && size <= pool.batcher.max_batch_size,
            "batch of {size} exceeds its limit"
        );
        let tickets = &mut self.tickets;
        let mut shape = BatchShape {
            size,
            max_input_tokens: 0,
            total_input_tokens: 0,
            idle_ns: now - mi.idle_since.ns(),
        };
        for _ in 0..size {
            let entry = instance
                .queue
                .pop(|e, part| queued_entry_is_live(tickets, e, part))
                .expect("the batcher never sends more requests than are queued");
            let t = &mut tickets[entry.ticket as usize];
            t.stage = Stage::Executing;
            t.record.batch_formed_ns = now;
            t.record.exec_start_ns = now;
            t.record.batch_id = batch_id;
            t.record.batch_size = size;
            t.record.model_instance = mi.index_in_instance;
            shape.max_input_tokens = shape.max_input_tokens.max(t.record.input_tokens);
            shape.total_input_tokens += u64::from(t.record.input_tokens);
            mi.members.push(entry.ticket);
        }
        self.queued -= size;
        let service = pool
            .service
            .as_ref()
            .expect("a dynamic-batcher pool has a service model");
        let duration_ns = service.sample_ns(&shape, &mut pool.execution_rng);
        if pool.may_extrapolate && service.is_extrapolated(&shape) {
            pool.extrapolated_batches += 1;
        }
        self.begin_execution(mi_index, size, now.saturating_add(duration_ns));
    }

    /// Marks model instance `mi_index` busy with a batch (or step) of `size` requests until
    /// `done_ns`, and counts the batch.
    #[inline]
    fn begin_execution(&mut self, mi_index: u32, size: u32, done_ns: u64) {
        let mi = &mut self.model_instances[mi_index as usize];
        mi.busy = true;
        mi.batch_start = self.now;
        mi.batches += 1;
        self.instances[mi.instance as usize]
            .free
            .remove(mi.index_in_instance);
        self.busy_model_instances += 1;
        self.interval.batches += 1;
        self.interval.batched += u64::from(size);
        self.summary.add_batch(size);
        self.events.push(done_ns, EventKind::BatchDone, mi_index, 0);
    }

    /// Marks model instance `mi_index` free again, its batch (or step) over now; returns its
    /// instance.
    #[inline]
    fn end_execution(&mut self, mi_index: u32) -> u32 {
        let now = self.now;
        let mi = &mut self.model_instances[mi_index as usize];
        mi.busy = false;
        mi.busy_ns += now - mi.batch_start;
        mi.idle_since = now;
        self.instances[mi.instance as usize]
            .free
            .insert(mi.index_in_instance);
        self.busy_model_instances -= 1;
        mi.instance
    }

    /// Plans and starts the next step of continuous-batching instance `instance_index`, when its
    /// model instance is free and there is work.
    fn plan_step(&mut self, instance_index: u32) {
        let now = self.now.ns();
        let i = instance_index as usize;
        let instance = &mut self.instances[i];
        let mi_index = instance.first_model_instance;
        let mi = &mut self.model_instances[mi_index as usize];
        if !mi.is_free() {
            return;
        }
        let scheduler = self.schedulers[i]
            .as_mut()
            .expect("a continuous instance has a scheduler");
        let before = Occupancy::of(scheduler);
        let tickets = &mut self.tickets;
        let queue = &mut instance.queue;
        let prefix_blocks = self.prefix_blocks;
        let mut taken = 0u32;
        let planned = scheduler.plan_step(now, || {
            let entry = queue.pop(|e, part| queued_entry_is_live(tickets, e, part))?;
            taken += 1;
            let t = &mut tickets[entry.ticket as usize];
            // Out of the queue (and its timeout): waiting in the scheduler, then running.
            t.stage = Stage::Executing;
            t.record.batch_formed_ns = now;
            let row = t.record.request as usize;
            Some(NewSeq {
                ticket: entry.ticket,
                prompt_tokens: t.record.input_tokens,
                output_tokens: t.record.output_tokens,
                prefix_ids: prefix_blocks.map_or(&[][..], |p| p.get(row)),
            })
        });
        self.queued -= taken;
        self.llm_state.waiting -= taken;
        Occupancy::of(scheduler).update(before, &mut self.llm_state);
        for &ticket in scheduler.admitted() {
            let t = &mut tickets[ticket as usize];
            t.record.exec_start_ns = now;
            t.record.model_instance = mi.index_in_instance;
        }
        let Some(step) = planned else {
            return;
        };
        let pool = &mut self.pools[instance.pool as usize];
        let step_time = pool
            .step_time
            .as_ref()
            .expect("a continuous pool has a step-time model");
        let gpu_ns = step_time.sample_ns(&step.batch, &mut pool.execution_rng);
        if pool.may_extrapolate && step_time.is_extrapolated(&step.batch) {
            pool.extrapolated_batches += 1;
        }
        let (seqs, done_ns) = (
            step.batch.seqs(),
            now.saturating_add(gpu_ns).saturating_add(step.overhead_ns),
        );
        self.begin_execution(mi_index, seqs, done_ns);
    }

    /// A continuous-batching step ends: tokens are emitted, finished requests move on to
    /// post-processing, and the next step is planned.
    fn step_done<S: RecordSink>(&mut self, mi_index: u32, sink: &mut S) {
        let now = self.now;
        let instance_index = self.end_execution(mi_index);
        let mut tokens = std::mem::take(&mut self.token_buf);
        tokens.clear();
        let scheduler = self.schedulers[instance_index as usize]
            .as_mut()
            .expect("a continuous instance has a scheduler");
        let before = Occupancy::of(scheduler);
        scheduler.complete_step(now.ns(), |token| tokens.push(token));
        Occupancy::of(scheduler).update(before, &mut self.llm_state);
        for token in &tokens {
            let t = &mut self.tickets[token.ticket as usize];
            debug_assert_eq!(t.stage, Stage::Executing);
            if token.index == 0 {
                t.record.first_token_ns = now.ns();
            } else if t.measured {
                self.summary.add_inter_token_ns(now.ns() - t.last_token_ns);
            }
            t.last_token_ns = now.ns();
            if token.last {
                t.record.exec_end_ns = now.ns();
                self.llm_completed_tokens += u64::from(token.index + 1);
                self.instances[instance_index as usize].outstanding -= 1;
                self.executed(token.ticket, sink);
            }
        }
        self.token_buf = tokens;
        self.plan_step(instance_index);
    }

    /// Execution is over for `ticket`: post-processing starts (or is skipped).
    #[inline]
    fn executed<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let now = self.now;
        let t = &mut self.tickets[ticket as usize];
        let pool = &self.pools[t.record.pool as usize];
        if pool.postprocess_instant {
            self.postprocessed(ticket, sink);
        } else {
            t.stage = Stage::Postprocess;
            let done = now + postprocess::time_ns(&pool.postprocess, t.record.output_tokens);
            self.events.push_in_order(
                LANE_POSTPROCESS,
                done.ns(),
                EventKind::PostprocessDone,
                ticket,
                0,
            );
        }
    }

    #[inline]
    fn batch_done<S: RecordSink>(&mut self, mi_index: u32, sink: &mut S) {
        let instance_index = self.model_instances[mi_index as usize].instance;
        if self.schedulers[instance_index as usize].is_some() {
            self.step_done(mi_index, sink);
            return;
        }
        let now = self.now;
        self.end_execution(mi_index);
        let mut members = std::mem::take(&mut self.model_instances[mi_index as usize].members);
        self.instances[instance_index as usize].outstanding -= members.len() as u32;
        for &ticket in &members {
            self.tickets[ticket as usize].record.exec_end_ns = now.ns();
            self.executed(ticket, sink);
        }
        members.clear();
        self.model_instances[mi_index as usize].members = members;
        self.dispatch(instance_index);
    }

    /// Post-processing (or the cache) is done: the response leaves the gateway.
    #[inline]
    fn postprocessed<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        let now = self.now.ns();
        let t = &mut self.tickets[ticket as usize];
        t.record.postprocessed_ns = now;
        if t.admitted {
            t.admitted = false;
            self.admission.release();
        }
        if self.downlink_instant {
            self.deliver(ticket, sink);
        } else {
            t.stage = Stage::NetworkOut;
            let delay_ns = self
                .downlink
                .delay_ns(t.record.output_tokens, &mut self.downlink_rng);
            self.events.push_in_order(
                self.downlink_lane,
                now.saturating_add(delay_ns),
                EventKind::ResponseDelivered,
                ticket,
                0,
            );
        }
    }

    #[inline]
    fn deliver<S: RecordSink>(&mut self, ticket: u32, sink: &mut S) {
        self.end(ticket, Outcome::Completed, sink);
    }

    /// The request is finished: record it and free its ticket.
    #[inline]
    fn end<S: RecordSink>(&mut self, ticket: u32, outcome: Outcome, sink: &mut S) {
        let now = self.now.ns();
        let t = &mut self.tickets[ticket as usize];
        debug_assert!(t.stage != Stage::Free, "a request finished twice");
        if t.admitted {
            t.admitted = false;
            self.admission.release();
        }
        t.record.response_ns = now;
        t.record.outcome = outcome;
        t.generation = t.generation.wrapping_add(1);
        // The record is read in place (no copy of the whole record per request).
        let record = &t.record;
        let retry = match outcome {
            // The engine never fails a request: that outcome is a real server's.
            Outcome::Completed | Outcome::Failed(_) => false,
            Outcome::Rejected(_) => self.retry_rejected,
            Outcome::TimedOut => self.retry_timed_out,
        } && u32::from(record.attempt) < self.retry_max_attempts;
        self.in_system -= 1;
        self.finished += 1;
        self.interval.finished += 1;
        sink.record(record);
        self.summary.add(record, t.measured);
        let (attempt, client) = (record.attempt, record.client);
        if retry {
            t.stage = Stage::Backoff;
            self.backing_off += 1;
            let backoff_ns =
                self.retry_backoff_ns as f64 * self.retry_multiplier.powi(i32::from(attempt) - 1);
            self.events.push(
                now.saturating_add(backoff_ns.round() as u64),
                EventKind::RetrySend,
                ticket,
                0,
            );
            return;
        }
        t.stage = Stage::Free;
        self.free_tickets.push(ticket);
        if self.closed_loop && client != u32::MAX {
            self.events.push_in_order(
                LANE_CLIENT,
                now.saturating_add(self.think_time_ns),
                EventKind::ClientSend,
                client,
                0,
            );
        }
    }

    /// Adds the continuous batchers' section to the summary, checking that every output token
    /// sampled belongs to a completed request.
    fn finish_llm(&mut self, end_ns: u64) {
        let mut llm = LlmSummary::default();
        let (mut seqs, mut tokens, mut kv_block_ns) = (0u64, 0u64, 0u128);
        let mut prefix = crate::llm::prefix::PrefixStats::default();
        for scheduler in self.schedulers.iter_mut().flatten() {
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
            llm.output_tokens, self.llm_completed_tokens,
            "output tokens sampled != output tokens of completed requests"
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
        self.summary.set_llm(llm);
    }

    fn finish(mut self) -> Run {
        let end = self.now;
        if end > self.last_sample {
            self.sample(end);
        }
        let end_ns = end.ns();
        if self.has_llm {
            self.finish_llm(end_ns);
        }
        let utilization = self
            .model_instances
            .iter()
            .map(|mi| {
                let instance = &self.instances[mi.instance as usize];
                InstanceUtilization {
                    pool: self.scenario.pools()[instance.pool as usize].name.clone(),
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
        for (pool, spec) in self.pools.iter().zip(self.scenario.pools()) {
            self.summary
                .add_extrapolated_batches(&spec.name, pool.extrapolated_batches);
        }
        let mean_in_system = if end_ns == 0 {
            0.0
        } else {
            self.in_system_area as f64 / end_ns as f64
        };
        let mut summary = self.summary.finish(
            &self.scenario.name,
            self.seed,
            utilization,
            mean_in_system,
            end_ns,
        );
        summary.set_timeseries_interval(self.interval_ns, self.scenario.timeseries.interval.0);
        Run {
            summary,
            timeseries: self.timeseries,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::scenario_runs::{run_with_sink, simulate, simulate_with_requests};
    use capsim_trace::Columns;

    const MS: u64 = 1_000_000;

    fn trace_ms(arrivals_ms: &[u64], class: Option<Vec<u32>>) -> Trace {
        Trace::from_columns(Columns {
            arrival_ns: arrivals_ms.iter().map(|a| a * MS).collect(),
            input_tokens: vec![10; arrivals_ms.len()],
            class,
            ..Columns::default()
        })
        .unwrap()
    }

    /// (request, batch formed ms, exec end ms, batch size, outcome) of one request.
    type Step = (u32, Option<u64>, Option<u64>, u32, &'static str);

    fn timeline(scenario: &str, trace: &Trace) -> Vec<Step> {
        let scenario = Scenario::from_toml_str(scenario).unwrap();
        let (_, log) = simulate_with_requests(&scenario, trace, &RunOptions::default()).unwrap();
        let ms = |ns: u64| (ns != crate::record::NONE).then_some(ns / MS);
        log.records()
            .iter()
            .map(|r| {
                (
                    r.request,
                    ms(r.batch_formed_ns),
                    ms(r.exec_end_ns),
                    r.batch_size,
                    r.outcome.as_str(),
                )
            })
            .collect()
    }

    const DONE: &str = "completed";

    #[test]
    fn golden_an_expired_delay_sends_everything_queued_not_the_preferred_size() {
        let s = "[batcher]\nmax_batch_size = 8\npreferred_batch_size = [4]\nmax_queue_delay = \"2ms\"\n\
                 [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let got = timeline(s, &trace_ms(&[0, 3, 4, 5, 6, 7, 8], None));
        // r0 alone at 2 ms (its delay); at 12 ms six are queued and r1 has waited 9 ms: Triton
        // sends all six, where a preferred size of 4 would leave two behind.
        let mut expected = vec![(0, Some(2), Some(12), 1, DONE)];
        expected.extend((1..=6).map(|r| (r, Some(12), Some(22), 6, DONE)));
        assert_eq!(got, expected);
    }

    #[test]
    fn golden_doc_timeline_payloads_form_ahead_and_arrivals_below_the_next_preferred_size_wait() {
        let s = "[batcher]\nmax_batch_size = 8\npreferred_batch_size = [4]\nmax_queue_delay = \"2ms\"\n\
                 [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let trace = Trace::from_columns(Columns {
            arrival_ns: [0, 1_000, 2_500, 3_000, 4_000, 5_000, 15_000]
                .iter()
                .map(|us| us * 1_000)
                .collect(),
            input_tokens: vec![10; 7],
            ..Columns::default()
        })
        .unwrap();
        let got = timeline(s, &trace);
        // The timeline of the batcher module's documentation: [r2 r3 r4] is formed at 4.5 ms
        // while the instance is busy, r5 does not join it, and r6 joins [r5] at once.
        let expected = vec![
            (0, Some(2), Some(12), 2, DONE),
            (1, Some(2), Some(12), 2, DONE),
            (2, Some(12), Some(22), 3, DONE),
            (3, Some(12), Some(22), 3, DONE),
            (4, Some(12), Some(22), 3, DONE),
            (5, Some(22), Some(32), 2, DONE),
            (6, Some(22), Some(32), 2, DONE),
        ];
        assert_eq!(got, expected);
        let prefetch_off = s.replace("max_queue_delay", "prefetch = false\nmax_queue_delay");
        let got = timeline(&prefetch_off, &trace);
        let expected = vec![
            (0, Some(2), Some(12), 2, DONE),
            (1, Some(2), Some(12), 2, DONE),
            (2, Some(12), Some(22), 4, DONE),
            (3, Some(12), Some(22), 4, DONE),
            (4, Some(12), Some(22), 4, DONE),
            (5, Some(12), Some(22), 4, DONE),
            (6, Some(22), Some(32), 1, DONE),
        ];
        assert_eq!(
            got, expected,
            "without prefetching a batch is formed when the instance frees up"
        );
    }

    #[test]
    fn golden_a_request_the_batcher_was_not_woken_for_joins_at_its_500_ms_poll() {
        let s = "[batcher]\nmax_batch_size = 8\npreferred_batch_size = [4]\nmax_queue_delay = \"2ms\"\n\
                 [service]\nkind = \"constant\"\ntime = \"2s\"\n";
        let got = timeline(s, &trace_ms(&[0, 1, 3, 6], None));
        // [r0 r1] run from 2 ms; [r2] is formed at 5 ms and waits for the instance; r3 (6 ms)
        // does not wake the thread (1 < 4 waiting), which polls at 5 + 500 ms and adds r3 to
        // [r2] before the instance takes it at 2002 ms.
        let expected = vec![
            (0, Some(2), Some(2002), 2, DONE),
            (1, Some(2), Some(2002), 2, DONE),
            (2, Some(2002), Some(4002), 2, DONE),
            (3, Some(2002), Some(4002), 2, DONE),
        ];
        assert_eq!(got, expected);
        // An arrival long after the thread went idle waits for the next of its polls (every
        // 500 ms from 5 ms: 10.005 s), not one in the past.
        let slow = s.replace("2s", "100s");
        let got = timeline(&slow, &trace_ms(&[0, 3, 10_000], None));
        assert_eq!(got[2], (2, Some(100_002), Some(200_002), 2, DONE));
    }

    #[test]
    fn golden_full_batch_goes_at_once_and_partial_batch_waits_the_delay() {
        let s = "[batcher]\nmax_batch_size = 4\nmax_queue_delay = \"5ms\"\n\
                 [service]\nkind = \"constant\"\ntime = \"3ms\"\n";
        let got = timeline(s, &trace_ms(&[0, 1, 2, 3, 10, 11], None));
        let expected = vec![
            (0, Some(3), Some(6), 4, DONE),
            (1, Some(3), Some(6), 4, DONE),
            (2, Some(3), Some(6), 4, DONE),
            (3, Some(3), Some(6), 4, DONE),
            (4, Some(15), Some(18), 2, DONE),
            (5, Some(15), Some(18), 2, DONE),
        ];
        assert_eq!(got, expected);
    }

    #[test]
    fn golden_no_batching_uses_every_model_instance() {
        let s =
            "[execution]\ninstance_count = 2\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let got = timeline(s, &trace_ms(&[0, 0, 0, 5], None));
        let expected = vec![
            (0, Some(0), Some(10), 1, DONE),
            (1, Some(0), Some(10), 1, DONE),
            (2, Some(10), Some(20), 1, DONE),
            (3, Some(10), Some(20), 1, DONE),
        ];
        assert_eq!(got, expected);
    }

    #[test]
    fn golden_zero_delay_sends_what_is_queued_when_an_instance_frees() {
        let s = "[batcher]\nmax_batch_size = 4\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let got = timeline(s, &trace_ms(&[0, 1, 2, 3, 4, 5], None));
        let expected = vec![
            (0, Some(0), Some(10), 1, DONE),
            (1, Some(10), Some(20), 4, DONE),
            (2, Some(10), Some(20), 4, DONE),
            (3, Some(10), Some(20), 4, DONE),
            (4, Some(10), Some(20), 4, DONE),
            (5, Some(20), Some(30), 1, DONE),
        ];
        assert_eq!(got, expected);
    }

    #[test]
    fn golden_queue_timeout_reject_and_delay() {
        let reject =
            "[queue]\ntimeout = \"5ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let got = timeline(reject, &trace_ms(&[0, 1, 2, 8], None));
        let expected = vec![
            (0, Some(0), Some(10), 1, DONE),
            (1, None, None, 0, "timed_out"),
            (2, None, None, 0, "timed_out"),
            (3, Some(10), Some(20), 1, DONE),
        ];
        assert_eq!(got, expected);
        let delay = "[queue]\ntimeout = \"5ms\"\ntimeout_action = \"DELAY\"\n\
                     [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let got = timeline(delay, &trace_ms(&[0, 1, 8], None));
        let expected = vec![
            (0, Some(0), Some(10), 1, DONE),
            (1, Some(20), Some(30), 1, DONE),
            (2, Some(10), Some(20), 1, DONE),
        ];
        assert_eq!(
            got, expected,
            "a delayed request goes behind those that did not time out"
        );
    }

    #[test]
    fn golden_priority_levels_serve_urgent_classes_first() {
        let s = "[queue]\npriority_levels = 2\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let got = timeline(s, &trace_ms(&[0, 1, 2], Some(vec![1, 1, 0])));
        let expected = vec![
            (0, Some(0), Some(10), 1, DONE),
            (1, Some(20), Some(30), 1, DONE),
            (2, Some(10), Some(20), 1, DONE),
        ];
        assert_eq!(got, expected);
    }

    #[test]
    fn golden_cold_start_delays_the_first_batch() {
        let s =
            "[execution]\ncold_start = \"5ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let got = timeline(s, &trace_ms(&[0, 1], None));
        assert_eq!(
            got,
            vec![
                (0, Some(5), Some(15), 1, DONE),
                (1, Some(15), Some(25), 1, DONE)
            ]
        );
    }

    #[test]
    fn full_queue_rejects_at_once_with_its_reason() {
        let s = "[queue]\nmax_queue_size = 1\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let got = timeline(s, &trace_ms(&[0, 1, 2, 12], None));
        assert_eq!(got[2], (2, None, None, 0, "rejected"));
        assert_eq!(got[3], (3, Some(20), Some(30), 1, DONE));
        let scenario = Scenario::from_toml_str(s).unwrap();
        let summary = simulate(
            &scenario,
            &trace_ms(&[0, 1, 2, 12], None),
            &RunOptions::default(),
        )
        .unwrap();
        assert_eq!(summary.rejected(RejectReason::QueueFull), 1);
        assert!(summary.requests.adds_up());
    }

    #[test]
    fn closed_loop_clients_send_after_each_response_and_think_time() {
        let s = "[load]\nmode = \"closed\"\nconcurrency = 2\nthink_time = \"1ms\"\n\
                 [execution]\ninstance_count = 2\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        let trace = trace_ms(&[0; 5], None);
        let (_, log) = simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
        let sends: Vec<u64> = log.records().iter().map(|r| r.arrival_ns / MS).collect();
        assert_eq!(sends, vec![0, 0, 11, 11, 22]);
        assert_eq!(log.records()[4].latency_ns(), 10 * MS);
    }

    #[test]
    fn the_run_ends_at_its_last_response_not_at_a_later_cold_start_think_time_or_timer() {
        // Found by tests/swarm.rs (seeds 189, 104, 146 of 0..200): each of these outlived the
        // last response and stretched `end_s` (and the utilization measured over it).
        let cases = [
            // A cold start finishing after every request timed out waiting for it.
            "[queue]\ntimeout = \"5ms\"\n[execution]\ncold_start = \"1s\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n",
            // A closed-loop client's think time after its last response.
            "[load]\nmode = \"closed\"\nconcurrency = 2\nthink_time = \"1s\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n",
            // The batcher's timer for a batch whose requests timed out first.
            "[queue]\ntimeout = \"5ms\"\n[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"1s\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n",
        ];
        for s in cases {
            let scenario = Scenario::from_toml_str(s).unwrap();
            let trace = trace_ms(&[0, 1, 2], None);
            let (run, log) =
                simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
            let last_ns = log.records().iter().map(|r| r.response_ns).max().unwrap();
            assert!(
                (run.summary.end_s - last_ns as f64 / 1e9).abs() < 1e-12,
                "end {} s, last response {} s:\n{s}",
                run.summary.end_s,
                last_ns as f64 / 1e9
            );
        }
    }

    #[test]
    fn timed_out_requests_are_retried_after_backoff_and_each_attempt_recorded() {
        let s = "[queue]\ntimeout = \"5ms\"\n[retry]\nmax_attempts = 3\nbackoff = \"10ms\"\n\
                 [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        let (run, log) = simulate_with_requests(
            &scenario,
            &trace_ms(&[0, 1, 2], None),
            &RunOptions::default(),
        )
        .unwrap();
        let got: Vec<(u32, u16, u64, &str)> = log
            .records()
            .iter()
            .map(|r| (r.request, r.attempt, r.arrival_ns / MS, r.outcome.as_str()))
            .collect();
        // r1 times out at 6 and retries at 16 (runs 16..26); r2 times out at 7, retries at 17,
        // times out again at 22 and retries at 22 + 20 = 42, when the instance is free.
        let expected = vec![
            (0, 1, 0, "completed"),
            (1, 1, 1, "timed_out"),
            (1, 2, 16, "completed"),
            (2, 1, 2, "timed_out"),
            (2, 2, 17, "timed_out"),
            (2, 3, 42, "completed"),
        ];
        assert_eq!(got, expected);
        let c = &run.summary.requests;
        assert_eq!((c.total, c.retries, c.completed, c.timed_out), (6, 3, 3, 3));
    }

    #[test]
    fn standby_instance_activates_under_load_and_starts_cold() {
        let s = "[gateway]\nload_balancing = \"least_outstanding\"\n\
                 [standby]\ninstances = 1\nactivate_at_outstanding = 2\n\
                 [execution]\ncold_start = \"5ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        // The active instance loads until 5ms; r0 runs 5..15. At 6, r1 finds one outstanding
        // (< 2) and queues there; at 7, r2 finds two outstanding: the standby instance is
        // activated, the balancer sends r2 to it (least outstanding), and it runs r2 after its
        // own cold start, 12..22.
        let scenario = Scenario::from_toml_str(s).unwrap();
        let (_, log) = simulate_with_requests(
            &scenario,
            &trace_ms(&[0, 6, 7], None),
            &RunOptions::default(),
        )
        .unwrap();
        let got: Vec<(u32, u32, u64)> = log
            .records()
            .iter()
            .map(|r| (r.request, r.instance, r.exec_start_ns / MS))
            .collect();
        assert_eq!(got, vec![(0, 0, 5), (1, 0, 15), (2, 1, 12)]);
    }

    #[test]
    fn gateway_refusals_are_counted_by_reason_and_everything_adds_up() {
        let s = "[gateway]\nrate_limit = \"100rps\"\nburst = 5\nmax_in_flight = 3\n\
                 [network.latency]\nkind = \"lognormal\"\nmedian = \"1ms\"\np99 = \"4ms\"\n\
                 [service]\nkind = \"exponential\"\nmean = \"20ms\"\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        let trace = trace_ms(&(0..2_000).collect::<Vec<u64>>(), None);
        let summary = simulate(
            &scenario,
            &trace,
            &RunOptions {
                seed: 3,
                ..RunOptions::default()
            },
        )
        .unwrap();
        assert!(summary.requests.adds_up(), "{:?}", summary.requests);
        assert_eq!(summary.requests.total, 2_000);
        assert!(
            summary.rejected(RejectReason::RateLimited) > 0,
            "{:?}",
            summary.requests
        );
        assert!(
            summary.rejected(RejectReason::MaxInFlight) > 0,
            "{:?}",
            summary.requests
        );
    }

    #[test]
    fn cache_hits_answer_without_a_model() {
        let s = "[cache]\nhit_probability = 0.5\nlatency = \"1ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        let trace = trace_ms(&(0..1_000).map(|i| i * 20).collect::<Vec<u64>>(), None);
        let (run, log) = simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
        let hits = run.summary.requests.cache_hits;
        assert!((400..600).contains(&hits), "{hits} hits of 1000 at p = 0.5");
        assert_eq!(run.summary.batches, 1_000 - hits);
        for r in log.records().iter().filter(|r| r.cache_hit) {
            assert_eq!(r.latency_ns(), MS);
            assert_eq!(r.batch_size, 0);
        }
    }

    #[test]
    fn requests_route_to_pools_by_class() {
        let s = "[service]\nkind = \"constant\"\ntime = \"10ms\"\n\
                 [pools.fast]\nclasses = [1]\n[pools.fast.service]\nkind = \"constant\"\ntime = \"1ms\"\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        let trace = trace_ms(&[0, 100], Some(vec![0, 1]));
        let (_, log) = simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
        assert_eq!(
            (log.records()[0].pool, log.records()[0].latency_ns()),
            (0, 10 * MS)
        );
        assert_eq!(
            (log.records()[1].pool, log.records()[1].latency_ns()),
            (1, MS)
        );
    }

    #[test]
    fn preprocess_workers_queue_requests_fifo() {
        let s = "[preprocess]\nworkers = 1\nbase = \"1ms\"\nper_input_token = \"100us\"\n\
                 [execution]\ninstance_count = 4\n[service]\nkind = \"constant\"\ntime = \"1ms\"\n";
        let got = timeline(s, &trace_ms(&[0, 0, 0], None));
        // Each request takes 1ms + 10 tokens * 0.1ms = 2ms of the single worker.
        let starts: Vec<Option<u64>> = got.iter().map(|g| g.1).collect();
        assert_eq!(starts, vec![Some(2), Some(4), Some(6)]);
    }

    /// A calibrated-looking model whose grid ends at batch 4: larger batches are extrapolated.
    #[derive(Debug)]
    struct GridUpToBatch4;

    impl ServiceTime for GridUpToBatch4 {
        fn sample_ns(&self, _batch: &BatchShape, _rng: &mut SimRng) -> u64 {
            10 * MS
        }

        fn mean_ns(&self, _batch: &BatchShape) -> f64 {
            (10 * MS) as f64
        }

        fn is_extrapolated(&self, batch: &BatchShape) -> bool {
            batch.size > 4
        }
    }

    #[test]
    fn batches_outside_the_calibrated_grid_are_counted_and_reported() {
        let s = "[batcher]\nmax_batch_size = 8\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        // r0 runs alone 0..10; r1..r6 queue meanwhile and run as one batch of 6 (extrapolated)
        // 10..20; r7..r9 arrive at 12 and run as a batch of 3 at 20.
        let trace = trace_ms(&[0, 1, 1, 1, 1, 1, 1, 12, 12, 12], None);
        let options = RunOptions {
            service_override: Some(Arc::new(GridUpToBatch4)),
            ..RunOptions::default()
        };
        let summary = simulate(&scenario, &trace, &options).unwrap();
        assert_eq!(summary.batch_size_counts, vec![0, 1, 0, 1, 0, 0, 1]);
        assert_eq!(summary.extrapolated_batches, 1);
        assert_eq!(
            summary.extrapolated_batches_by_pool,
            [("default".to_string(), 1)].into_iter().collect()
        );
        let human = summary.human();
        assert!(
            human.contains(
                "1 of 3 batches outside the calibrated grid; their times are extrapolated"
            ),
            "{human}"
        );
        let analytic = simulate(&scenario, &trace, &RunOptions::default()).unwrap();
        assert_eq!(analytic.batch_size_counts, summary.batch_size_counts);
        assert_eq!(analytic.extrapolated_batches, 0);
        assert!(!analytic.human().contains("extrapolated"));
    }

    /// Runs 1 ms plus the idle time before the batch: shows the engine's idle times.
    #[derive(Debug)]
    struct SlowerAfterIdle;

    impl ServiceTime for SlowerAfterIdle {
        fn sample_ns(&self, batch: &BatchShape, _rng: &mut SimRng) -> u64 {
            MS + batch.idle_ns
        }

        fn mean_ns(&self, batch: &BatchShape) -> f64 {
            (MS + batch.idle_ns) as f64
        }
    }

    #[test]
    fn each_batch_sees_how_long_its_model_instance_idled() {
        let scenario =
            Scenario::from_toml_str("[service]\nkind = \"constant\"\ntime = \"1ms\"\n").unwrap();
        // r0 at 2 ms: idle since the start, 2 ms, runs 3 ms (ends 5). r1 at 4 ms waits and starts
        // at 5 back to back: 1 ms (ends 6). r2 at 10 ms: idle 4 ms, runs 5 ms (ends 15).
        let trace = trace_ms(&[2, 4, 10], None);
        let options = RunOptions {
            service_override: Some(Arc::new(SlowerAfterIdle)),
            ..RunOptions::default()
        };
        let (_, log) = simulate_with_requests(&scenario, &trace, &options).unwrap();
        let ends: Vec<u64> = log.records().iter().map(|r| r.exec_end_ns / MS).collect();
        assert_eq!(ends, vec![5, 6, 15]);
    }

    #[test]
    fn warmup_by_count_excludes_the_first_requests_from_statistics() {
        let s = "[service]\nkind = \"constant\"\ntime = \"1ms\"\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        let trace = trace_ms(&(0..100).map(|i| i * 10).collect::<Vec<u64>>(), None);
        let options = RunOptions {
            warmup: Warmup::Count(30),
            ..RunOptions::default()
        };
        let summary = simulate(&scenario, &trace, &options).unwrap();
        assert_eq!(
            (
                summary.requests.total,
                summary.measured.total,
                summary.warmup_excluded
            ),
            (100, 70, 30)
        );
        assert_eq!(summary.latency_ms["end_to_end"].count, 70);
    }

    /// Poisson-ish arrivals over `span_ms`, deterministic.
    fn spread_trace(requests: u64, span_ms: u64) -> Trace {
        let arrivals: Vec<u64> = (0..requests)
            .map(|i| (i * i * 7919 % (span_ms * 1_000)) / 1_000)
            .collect::<std::collections::BTreeSet<u64>>()
            .into_iter()
            .collect();
        trace_ms(&arrivals, None)
    }

    #[test]
    fn a_capped_timeseries_equals_the_series_sampled_at_the_doubled_interval() {
        let base = "instances = 2\n[batcher]\nmax_batch_size = 4\nmax_queue_delay = \"3ms\"\n\
                    [service]\nkind = \"exponential\"\nmean = \"7ms\"\n";
        let trace = spread_trace(4_000, 60_000);
        let run = |extra: &str| {
            let scenario = Scenario::from_toml_str(&format!("{base}{extra}")).unwrap();
            run_with_sink(&scenario, &trace, &RunOptions::default(), &mut NoRecords).unwrap()
        };
        // 60 s at 10 ms is 6,000 rows; a cap of 1,000 doubles the interval three times (80 ms).
        let capped = run("[timeseries]\ninterval = \"10ms\"\nmax_rows = 1000\n");
        let direct = run("[timeseries]\ninterval = \"80ms\"\n");
        assert!(capped.summary.timeseries_coarsened);
        assert!(!direct.summary.timeseries_coarsened);
        assert_eq!(capped.summary.timeseries_interval_s, 0.08);
        assert!(
            capped.timeseries.len() <= 1000,
            "{} rows",
            capped.timeseries.len()
        );
        let (a, b) = (&capped.timeseries, &direct.timeseries);
        assert_eq!(a.time_ns, b.time_ns);
        assert_eq!(a.queued, b.queued);
        assert_eq!(a.in_system, b.in_system);
        assert_eq!(a.busy_model_instances, b.busy_model_instances);
        assert_eq!(a.arrivals, b.arrivals);
        assert_eq!(a.finished, b.finished);
        assert_eq!(a.batches, b.batches);
        for (i, (x, y)) in a.utilization.iter().zip(&b.utilization).enumerate() {
            assert!(
                (x - y).abs() < 1e-12,
                "row {i}: utilization {x} merged, {y} direct"
            );
        }
        for (i, (x, y)) in a.batch_size_mean.iter().zip(&b.batch_size_mean).enumerate() {
            assert!(
                (x - y).abs() < 1e-12,
                "row {i}: batch size {x} merged, {y} direct"
            );
        }
        assert_eq!(capped.summary.requests, direct.summary.requests);
    }

    #[test]
    fn a_long_quiet_gap_keeps_the_timeseries_within_its_cap() {
        // 1 us rows over 1000 days of simulated time.
        let s = "[execution]\ncold_start = \"1000d\"\n[service]\nkind = \"constant\"\ntime = \"1ms\"\n\
                 [timeseries]\ninterval = \"1us\"\nmax_rows = 5000\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        let trace = trace_ms(&[0, 1, 2], None);
        let run = run_with_sink(&scenario, &trace, &RunOptions::default(), &mut NoRecords).unwrap();
        assert!(
            run.timeseries.len() <= 5000,
            "{} rows",
            run.timeseries.len()
        );
        assert!(run.summary.timeseries_coarsened);
        let day_ms = 86_400_000.0;
        let e2e = &run.summary.latency_ms["end_to_end"];
        assert_eq!(e2e.count, 3);
        assert!(
            (e2e.p50_ms / day_ms - 1000.0).abs() < 1.0,
            "p50 {} days, expected 1000 (no clamp)",
            e2e.p50_ms / day_ms
        );
    }

    #[test]
    fn stale_queue_timeouts_do_not_stretch_the_run_past_its_last_response() {
        let s = "[queue]\ntimeout = \"1000d\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        let trace = trace_ms(&[0, 1, 2], None);
        let run = run_with_sink(&scenario, &trace, &RunOptions::default(), &mut NoRecords).unwrap();
        assert_eq!(run.summary.requests.completed, 3);
        // The last of three 10 ms batches back to back ends at 30 ms.
        assert!(
            (run.summary.end_s - 0.030).abs() < 1e-9,
            "end {} s, expected 0.030 s",
            run.summary.end_s
        );
        assert!(!run.summary.timeseries_coarsened);
    }

    #[test]
    fn a_batch_ending_past_the_horizon_stops_the_run_with_an_error_naming_the_stage() {
        // 50,000 days per token of a 10-token request: 1,370 years.
        let s = "[service]\nkind = \"affine\"\na = \"1ms\"\nc = \"50000d\"\n";
        let scenario = Scenario::from_toml_str(s).unwrap();
        let err = run_with_sink(
            &scenario,
            &trace_ms(&[0, 5], None),
            &RunOptions::default(),
            &mut NoRecords,
        )
        .unwrap_err();
        assert!(matches!(err, SimError::PastHorizon { .. }), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("[service]") && message.contains("292 years"),
            "{message}"
        );
    }
}
