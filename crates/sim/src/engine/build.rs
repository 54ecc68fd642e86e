//! The engine built from a scenario: the one place that reads a [`Scenario`]'s and its pools'
//! fields, and turns them into each stage's state.

use std::collections::HashMap;

use capsim_trace::Trace;
use rand::Rng;

use super::{Engine, Executor, RunOptions};
use crate::batcher::Batcher;
use crate::batcher::instance::DynamicInstance;
use crate::build::BuiltScenario;
use crate::client::{Clients, Link, RetryPolicy};
use crate::context::{
    Counters, Ctx, InstanceId, LANE_CLIENT, LANE_DOWNLINK, LANE_UPLINK, LANES, PoolId, Tickets,
};
use crate::continuous::{Continuous, ContinuousInstance};
use crate::event::{EventKind, EventQueue};
use crate::gateway::{Admission, Balancer, Gateway, PoolRoute};
use crate::host::HostJobs;
use crate::instance::{Execution, Fleet, FreeSet, Instance, ModelInstance};
use crate::network::NetworkPath;
use crate::observe::{Observer, Stage, StageSet};
use crate::postprocess::{self, Postprocess};
use crate::preprocess::{Preprocess, WorkerPool};
use crate::queue::{InstanceQueue, QueuePolicy};
use crate::rng::{Component, stream};
use crate::scenario::{LoadMode, Pool, RetryOn, Scenario};
use crate::summary::SummaryBuilder;
use crate::time::SimTime;
use crate::timeseries::{IntervalCounters, LlmState, Timeseries};

/// The jobs of `pool`'s host, when it has `[host]`.
fn host_jobs(pool: &Pool) -> Option<HostJobs> {
    pool.host.as_ref().map(|spec| HostJobs {
        spec: spec.clone(),
        postprocess: pool.postprocess.clone(),
    })
}

/// The stages the scenario models (the others take no time).
fn modeled_stages(scenario: &Scenario, uplink_instant: bool, downlink_instant: bool) -> StageSet {
    let pools = scenario.pools();
    StageSet::default()
        .with(Stage::EndToEnd, true)
        .with(Stage::NetworkIn, !uplink_instant)
        .with(
            Stage::Gateway,
            scenario.gateway.overhead.0 > 0 || scenario.cache.latency.0 > 0,
        )
        .with(
            Stage::Preprocess,
            pools.iter().any(|p| {
                p.preprocess.is_some() || host_jobs(p).is_some_and(|h| h.has_request_work())
            }),
        )
        .with(Stage::Queue, true)
        .with(Stage::Execution, true)
        .with(
            Stage::Postprocess,
            pools.iter().any(|p| {
                !postprocess::is_instant(&p.postprocess)
                    || host_jobs(p).is_some_and(|h| h.has_response_work())
            }),
        )
        .with(Stage::NetworkOut, !downlink_instant)
}

/// The keys of the run summary's `latency_ms` a run of `scenario` reports: `end_to_end`,
/// `queue` and `execution` always, the other stages of [`crate::summary::STAGES`] it models (a
/// stage it does not model takes no time and is left out), and
/// [`crate::summary::TOKEN_METRICS`] when a pool batches continuously.
pub fn latency_keys(scenario: &Scenario) -> Vec<&'static str> {
    let uplink_instant = crate::network::NetworkPath::uplink(&scenario.network).is_instant();
    let downlink_instant = crate::network::NetworkPath::downlink(&scenario.network).is_instant();
    let modeled = modeled_stages(scenario, uplink_instant, downlink_instant).flags();
    let stages = crate::summary::STAGES
        .into_iter()
        .zip(modeled)
        .filter_map(|(key, on)| on.then_some(key));
    let continuous = scenario.pools().iter().any(|p| p.llm.is_some());
    let tokens = crate::summary::TOKEN_METRICS
        .into_iter()
        .filter(|_| continuous);
    stages.chain(tokens).collect()
}

impl<'a> Engine<'a> {
    /// Builds every stage from the scenario: the one place that reads it.
    pub(super) fn new(
        built: &'a BuiltScenario,
        trace: &'a Trace,
        options: &RunOptions,
    ) -> Engine<'a> {
        let scenario = &built.scenario;
        let seed = options.seed;
        let mut events = EventQueue::new(1024, LANES);
        let mut pools = BuiltPools::default();
        for (p, pool) in scenario.pools().iter().enumerate() {
            pools.add(p, pool, built, options, &mut events);
        }
        let has_llm = pools
            .executors
            .iter()
            .any(|e| matches!(e, Executor::Continuous(_)));
        let llm_state = LlmState {
            kv_blocks_total: pools
                .executors
                .iter()
                .map(|e| match e {
                    Executor::Continuous(c) => u64::from(c.scheduler.kv_total()),
                    Executor::Dynamic(_) => 0,
                })
                .sum(),
            ..LlmState::default()
        };
        let clients = clients(scenario, trace, options);
        if clients.closed_loop {
            // A client past the trace's length would find nothing to send.
            let clients = u64::from(scenario.load.concurrency).min(trace.len() as u64) as u32;
            for client in 0..clients {
                events.push_in_order(LANE_CLIENT, 0, EventKind::ClientSend, client, 0);
            }
        }
        let summary = summary_builder(scenario, &clients, has_llm);
        Engine {
            ctx: Ctx {
                now: SimTime::ZERO,
                events,
                tickets: Tickets::with_capacity(1024),
                counters: Counters::default(),
                interval: IntervalCounters::default(),
                summary,
                llm_state,
            },
            clients,
            gateway: Gateway {
                admission: Admission::new(&scenario.gateway),
                overhead_ns: scenario.gateway.overhead.0,
                cache_hit_probability: scenario.cache.hit_probability,
                cache_latency_ns: scenario.cache.latency.0,
                cache_rng: stream(seed, Component::Cache, 0),
                model: trace.model(),
                class: trace.class(),
                model_pool: pools.model_pool,
                class_pool: pools.class_pool,
                pools: pools.routes,
            },
            preprocess: preprocess_of(scenario),
            queues: pools.queues,
            fleet: Fleet {
                instances: pools.instances,
                model_instances: pools.model_instances,
            },
            executors: pools.executors,
            executions: pools.executions,
            continuous: Continuous {
                prefix_blocks: trace.prefix_blocks(),
                token_buf: Vec::with_capacity(256),
                completed_tokens: 0,
                aborted_tokens: 0,
            },
            postprocess: postprocess_of(scenario),
            observe: observer(scenario, has_llm, seed),
            abandoned_jobs: Vec::new(),
            past_horizon: None,
        }
    }
}

/// Each pool's state as the build lays it out, pool after pool: its route, queue policy and
/// execution, its instances (with their executors) and model instances, in the fleet's order.
#[derive(Default)]
struct BuiltPools {
    routes: Vec<PoolRoute>,
    queues: Vec<QueuePolicy>,
    executions: Vec<Execution>,
    instances: Vec<Instance>,
    model_instances: Vec<ModelInstance>,
    executors: Vec<Executor>,
    /// The first pool that serves each model, and each class.
    model_pool: HashMap<String, PoolId>,
    class_pool: HashMap<u32, PoolId>,
}

impl BuiltPools {
    /// Adds pool `p` of the scenario: its state, and the cold starts of its instances in
    /// `events`.
    fn add(
        &mut self,
        p: usize,
        pool: &Pool,
        built: &BuiltScenario,
        options: &RunOptions,
        events: &mut EventQueue,
    ) {
        let seed = options.seed;
        let models = &built.pools[p];
        let pool_id = PoolId(p as u16);
        for m in &pool.models {
            self.model_pool.entry(m.clone()).or_insert(pool_id);
        }
        for &c in &pool.classes {
            self.class_pool.entry(c).or_insert(pool_id);
        }
        let first_instance = self.instances.len() as u32;
        self.add_instances(pool, pool_id, seed, events);
        let service = models.service.as_ref().map(|s| {
            options
                .service_override
                .clone()
                .unwrap_or_else(|| s.clone())
        });
        self.executions.push(Execution {
            may_extrapolate: service.as_ref().is_some_and(|s| s.may_extrapolate())
                || models
                    .step_time
                    .as_ref()
                    .is_some_and(|s| s.may_extrapolate()),
            extrapolated_batches: 0,
            slowdowns: pool
                .slowdowns
                .seeded(stream(seed, Component::Speed, p as u32).next_u64()),
            pauses: pool.pauses.clone(),
            service,
            step_time: models.step_time.clone(),
            rng: stream(seed, Component::Execution, p as u32),
        });
        self.queues.push(QueuePolicy {
            max_input_tokens: pool.max_input_tokens.unwrap_or(u32::MAX),
            max_output_tokens: pool.max_output_tokens.unwrap_or(u32::MAX),
            max_queue_size: pool.queue.max_queue_size,
            timeout_ns: pool.queue.timeout.map(|d| d.0),
            timeout_action: pool.queue.timeout_action,
            levels: pool.queue.priority_levels,
        });
        self.routes.push(PoolRoute {
            first_instance,
            instances: pool.instances,
            standby_left: pool.standby.instances,
            activate_at_outstanding: pool.standby.activate_at_outstanding,
            cold_start_ns: pool.execution.cold_start.0,
            balancer: Balancer::new(built.scenario.gateway.load_balancing),
            rng: stream(seed, Component::Balancer, p as u32),
        });
    }

    /// The pool's instances, active then standby, each with its executor and model instances;
    /// a model instance that starts cold (not on standby) gets its ready event at the cold start.
    fn add_instances(&mut self, pool: &Pool, pool_id: PoolId, seed: u64, events: &mut EventQueue) {
        let per_instance = pool.execution.gpus * pool.execution.instance_count;
        let cold_start_ns = pool.execution.cold_start.0;
        let rule = Batcher::new(&pool.batcher, &pool.replay, pool.queue.allows_prefetch());
        for i in 0..pool.instances + pool.standby.instances {
            let index = InstanceId(self.instances.len() as u32);
            let standby = i >= pool.instances;
            self.instances.push(Instance {
                pool: pool_id,
                index_in_pool: i,
                queue: InstanceQueue::new(pool.queue.priority_levels),
                workers: workers_of(pool),
                first_model_instance: self.model_instances.len() as u32,
                model_instances: per_instance,
                free: FreeSet::new(per_instance, cold_start_ns == 0 && !standby),
                outstanding: 0,
            });
            self.executors.push(match &pool.llm {
                Some(l) => Executor::Continuous(ContinuousInstance::new(
                    l,
                    stream(seed, Component::StepResiduals, index.0),
                )),
                None => Executor::Dynamic(DynamicInstance::new(
                    rule.clone(),
                    stream(seed, Component::BatcherRace, index.0),
                    stream(seed, Component::BatcherDispatch, index.0),
                    stream(seed, Component::BatcherMissedRelease, index.0),
                )),
            });
            for k in 0..per_instance {
                if cold_start_ns > 0 && !standby {
                    events.push(
                        cold_start_ns,
                        EventKind::ModelInstanceReady,
                        self.model_instances.len() as u32,
                        0,
                    );
                }
                self.model_instances.push(ModelInstance::new(
                    index,
                    k,
                    cold_start_ns == 0 && !standby,
                    pool.batcher.max_batch_size,
                ));
            }
        }
    }
}

/// The CPU workers of each instance of `pool`: its host's cores with `[host]`, else its
/// pre-processing workers (1 unless set), else none.
fn workers_of(pool: &Pool) -> Option<WorkerPool> {
    match (&pool.host, &pool.preprocess) {
        (Some(host), _) => Some(WorkerPool::sharing_with_compute(
            host.cores,
            host.compute_cores,
        )),
        (None, Some(pre)) => Some(WorkerPool::new(pre.workers.unwrap_or(1))),
        (None, None) => None,
    }
}

/// The clients: the trace's columns, the load mode, the retry policy and the network links.
fn clients<'a>(scenario: &Scenario, trace: &'a Trace, options: &RunOptions) -> Clients<'a> {
    let seed = options.seed;
    Clients {
        arrival_ns: trace.arrival_ns(),
        input_tokens: trace.input_tokens(),
        output_tokens: trace.output_tokens(),
        class: trace.class(),
        warmup: options.warmup,
        closed_loop: scenario.load.mode == LoadMode::Closed,
        think_time_ns: scenario.load.think_time.0,
        timeout_ns: scenario.load.client_timeout.map(|d| d.0),
        retry: RetryPolicy {
            max_attempts: scenario.retry.max_attempts,
            backoff_ns: scenario.retry.backoff.0,
            multiplier: scenario.retry.backoff_multiplier,
            on_rejected: scenario.retry.on.contains(&RetryOn::Rejected),
            on_timed_out: scenario.retry.on.contains(&RetryOn::TimedOut),
            on_client_timeout: scenario.retry.on.contains(&RetryOn::ClientTimeout),
        },
        uplink: Link::new(
            NetworkPath::uplink(&scenario.network),
            stream(seed, Component::NetworkUp, 0),
            LANE_UPLINK,
        ),
        downlink: Link::new(
            NetworkPath::downlink(&scenario.network),
            stream(seed, Component::NetworkDown, 0),
            LANE_DOWNLINK,
        ),
        next_request: 0,
        first_attempts: 0,
        backing_off: 0,
    }
}

/// The summary's builder: the SLO's latency bound over the stages modeled, and the token
/// metrics with their bounds when a pool batches continuously (`has_llm`).
fn summary_builder(scenario: &Scenario, clients: &Clients<'_>, has_llm: bool) -> SummaryBuilder {
    let slo = scenario.slo.as_ref();
    let builder = SummaryBuilder::new(
        slo.and_then(|s| s.latency).map(|d| d.0),
        modeled_stages(scenario, clients.uplink.instant, clients.downlink.instant).flags(),
    );
    if has_llm {
        builder.with_token_metrics(
            slo.and_then(|s| s.ttft).map(|d| d.0),
            slo.and_then(|s| s.tpot).map(|d| d.0),
        )
    } else {
        builder
    }
}

/// Pre-processing, by pool: its spec, and its host's jobs with `[host]`.
fn preprocess_of(scenario: &Scenario) -> Preprocess {
    Preprocess {
        specs: scenario
            .pools()
            .iter()
            .map(|p| p.preprocess.clone())
            .collect(),
        hosts: scenario.pools().iter().map(host_jobs).collect(),
    }
}

/// Post-processing, by pool: its spec, how it runs (not at all when it takes no time; on the
/// host's cores with `[host]`), whether the pool streams.
fn postprocess_of(scenario: &Scenario) -> Postprocess {
    Postprocess {
        specs: scenario
            .pools()
            .iter()
            .map(|p| p.postprocess.clone())
            .collect(),
        modes: scenario
            .pools()
            .iter()
            .map(|p| {
                if p.host.is_some() {
                    postprocess::Mode::OnHost
                } else if postprocess::is_instant(&p.postprocess) {
                    postprocess::Mode::Instant
                } else {
                    postprocess::Mode::Delay
                }
            })
            .collect(),
        streamed: scenario.pools().iter().map(|p| p.llm.is_some()).collect(),
    }
}

/// The observer: the timeseries' interval and row bound, and the run's names.
fn observer(scenario: &Scenario, has_llm: bool, seed: u64) -> Observer {
    let interval_ns = scenario.timeseries.interval.0;
    Observer {
        interval_ns,
        configured_interval_ns: interval_ns,
        max_rows: (scenario.timeseries.max_rows & !1).max(2) as usize,
        next_sample: SimTime(interval_ns),
        last_sample: SimTime::ZERO,
        timeseries: Timeseries::default(),
        in_system_area: 0,
        has_llm,
        scenario_name: scenario.name.clone(),
        pool_names: scenario.pools().iter().map(|p| p.name.clone()).collect(),
        seed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "[service]\nkind = \"constant\"\ntime = \"5ms\"\n";
    const CONTINUOUS: &str = "[batcher]\nkind = \"continuous\"\n[kv_cache]\nnum_gpu_blocks = 1000\n[step_time]\nkind = \"linear\"\nbase = \"5ms\"\n";

    #[test]
    fn latency_keys_are_the_modelled_stages_and_token_metrics_only_when_continuous() {
        let s = Scenario::from_toml_str(MINIMAL).unwrap();
        assert_eq!(latency_keys(&s), ["end_to_end", "queue", "execution"]);
        let s = Scenario::from_toml_str(&format!(
            "{MINIMAL}[gateway]\noverhead = \"50us\"\n[preprocess]\nbase = \"1ms\"\n"
        ))
        .unwrap();
        assert_eq!(
            latency_keys(&s),
            ["end_to_end", "gateway", "preprocess", "queue", "execution"]
        );
        let s = Scenario::from_toml_str(CONTINUOUS).unwrap();
        assert_eq!(
            latency_keys(&s),
            [
                "end_to_end",
                "queue",
                "execution",
                "ttft",
                "tpot",
                "itl",
                "normalized"
            ]
        );
    }
}
