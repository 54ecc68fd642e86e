// Over 800 lines: the case generator and the audit of every record against its scenario are one harness, each rule next to the others.
//! Swarm tests, as TigerBeetle runs them: each case draws a random but valid and realistic
//! scenario (whole features switched on or off with skewed weights) and a random trace, runs
//! `capsim simulate` on them, and audits every record of `requests.parquet` and the counts of
//! `summary.json` against the rules of the serving path. Where `tests/extremes.rs` asks only
//! that absurd inputs never crash the command, this asks that sensible inputs give a run that
//! obeys its own rules.
//!
//! Features drawn (probability a case has them): one pool (60%), two (30%) or three (10%),
//! routed by the trace's `model` and `class`; each pool a continuous LLM batcher (35%: random
//! `max_num_seqs`, `max_num_batched_tokens`, chunked prefill on 80%, a KV cache small enough to
//! preempt and reject, prefix caching 30%, per-step overheads) or Triton's dynamic batcher (65%:
//! `max_batch_size` 1..64, preferred sizes 30%, `max_queue_delay` 70%, prefetch explicitly off
//! 20%, a dispatch latency 20%, a release latency 20% (and, in the default pool, replay inputs: per request 20%, pauses of dispatch 10%), constant, affine or exponential service
//! time); per pool several instances, 1..2 GPUs x
//! 1..2 model instances (dynamic), standby instances 15%, cold start 15%, pre-processing 25%,
//! post-processing 30%, priority levels 20%, `max_queue_size` 20%, queue timeout 25% (half with
//! `timeout_action = delay`), `max_input_tokens` and `max_output_tokens` 15% each. Gateway: constant network latency 30%, overhead 30%, rate limit
//! 15%, `max_in_flight` 15%, result cache 15%, a random balancer. Client: retries with backoff
//! 25% (on rejections, timeouts or both), closed loop 20% (`concurrency` 1..64, think time).
//! Trace: 100 to 2,500 requests, Poisson or bursty arrivals (ties sometimes) at 0.2 to 1.6 times
//! a rough capacity estimate, log-normal sizes, prefix block lists when a pool caches prefixes.
//!
//! Rules checked, from the columns `requests.parquet` really has (`crates/sim/src/output.rs`):
//! - order: `arrival <= gateway <= admitted <= queued <= batch_formed <= exec_start <=
//!   first_token <= exec_end <= postprocessed <= response` over the stages reached, the stages
//!   reached fit the outcome (a gateway rejection was never admitted, a timed-out request never
//!   batched, a completion went through every stage of its path), `latency_ns = response -
//!   arrival`, and with continuous batching `ttft_ns` and `tpot_ns` follow from the times;
//! - accounting: every trace row appears, attempts 1..n contiguous, only the last may complete,
//!   every earlier one ended in an outcome `retry.on` retries, a last failed attempt was not
//!   retryable or used up `max_attempts`, each attempt holds its row's sizes (cut to its pool's
//!   token limits once routed); `summary.json`'s totals, outcomes, reasons, retries, cache hits,
//!   truncations, batches (per size and per model instance), LLM output tokens, end-to-end count
//!   and maximum, and `end_s` match the records;
//! - retries: an attempt is sent exactly `backoff * multiplier^(k-1)` after attempt k's answer;
//! - load: open loop, first attempts are sent at the trace's arrival; closed loop, at most
//!   `concurrency` clients, a client's requests never overlap and are `think_time` apart, trace
//!   rows are sent in order, and no more than `concurrency` requests are ever in flight;
//! - gateway: admitted requests in flight never exceed `max_in_flight`, admissions never beat
//!   the token bucket (`burst + rate * span`), the overhead and the cache latency are exact,
//!   rejections name only limits the scenario sets;
//! - routing: the pool follows the request's model, else class, else default; instance and
//!   model instance indices exist, standby instances only where configured;
//! - batches (dynamic): members of one `batch_id` share pool, instance, model instance and
//!   times, number `batch_size`, which is within `max_batch_size`; no batcher forms a batch
//!   inside a pause; compute starts exactly the dispatch latency after the batch formed, or,
//!   for a batch its model instance took as the batch before ended (formed between that one's
//!   compute end and its release, per batch and per request), exactly at that release; either
//!   moved to the end of the pause that holds it; batches of one model instance never overlap
//!   (from compute start to compute end and release), none starts before the cold start;
//!   constant and affine batch times are exactly the model's; post-processing takes exactly its
//!   time, pre-processing at least its;
//! - continuous batching: the steps' sizes (`summary.json`) within `max_num_seqs`, no request
//!   completed that the KV cache or (without chunked prefill) the token budget cannot hold;
//! - queues: a queue never holds more than `max_queue_size`; with `timeout_action = reject` a
//!   timed-out request waited exactly its timeout and a batched one at most it; with `delay`
//!   nothing times out;
//! - determinism: a rerun with the same seed writes byte-identical `summary.json`,
//!   `requests.parquet` and `timeseries.parquet`.
//!
//! Not checkable from the outputs, so not checked: the per-step token budget
//! (`max_num_batched_tokens`; only the steps' mean tokens are written, and that is checked), KV
//! blocks in use and preemptions per step, which requests a continuous step held, the order
//! priority levels serve in (a batch mixes levels and the queue's state is not written), that a
//! dynamic batch was formed by Triton's rule (`max_queue_delay`, preferred sizes), when a
//! standby instance was activated (so its cold start), and the balancer's choices.
//!
//! `CAPSIM_SWARM_CASES` sets the number of cases (default 1,000: about 25 s in release on two
//! cores), `CAPSIM_SWARM_FIRST_SEED` the first seed (default: from `git rev-parse HEAD`, so each
//! commit covers new seeds; a fixed seed without git), `CAPSIM_SWARM_SEEDS=3,17` runs just those.
//! A failing case prints its seed, the rule it broke, the scenario and the command that
//! reproduces it; `CAPSIM_SWARM_DIR=DIR` keeps every case's scenario, trace and outputs there.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// Seed used when neither the environment nor git gives one.
const FALLBACK_FIRST_SEED: u64 = 0x5EED_0000;

/// Null in an output time column.
const NONE: u64 = u64::MAX;

// ---------------------------------------------------------------------------------------------
// The drawn case.

#[derive(Debug, Clone)]
enum Service {
    Constant { time_ns: u64 },
    Affine { a_ns: u64, b_ns: u64, c_ns: u64 },
    Exponential { mean_ns: u64 },
}

impl Service {
    /// The exact batch time of a deterministic model, `None` for a random one.
    fn exact_ns(&self, size: u64, max_input_tokens: u64) -> Option<u64> {
        match *self {
            Service::Constant { time_ns } => Some(time_ns),
            Service::Affine { a_ns, b_ns, c_ns } => {
                let size = size as f64;
                let ns =
                    a_ns as f64 + b_ns as f64 * size + c_ns as f64 * size * max_input_tokens as f64;
                Some(ns.round() as u64)
            }
            Service::Exponential { .. } => None,
        }
    }

    fn mean_ns(&self, size: u64, input_tokens: u64) -> f64 {
        match *self {
            Service::Exponential { mean_ns } => mean_ns as f64,
            _ => self.exact_ns(size, input_tokens).unwrap_or(0) as f64,
        }
    }
}

#[derive(Debug, Clone)]
struct Dynamic {
    max_batch_size: u32,
    preferred: Vec<u32>,
    max_queue_delay_ns: u64,
    prefetch_off: bool,
    dispatch_latency_ns: u64,
    release_latency_ns: u64,
    release_latency_per_request_ns: u64,
    /// The replay input `pauses` (default pool only): sorted, disjoint `[from, to)` in ns.
    pauses: Vec<(u64, u64)>,
    service: Service,
}

impl Dynamic {
    /// When a batch formed at `formed_ns` starts computing: after the dispatch latency (none
    /// `at_release`, taken by its model instance as it was released), or at the end of the
    /// pause that holds that moment.
    fn compute_start_ns(&self, formed_ns: u64, at_release: bool) -> u64 {
        let dispatch_ns = if at_release {
            0
        } else {
            self.dispatch_latency_ns
        };
        self.resume_ns(formed_ns.saturating_add(dispatch_ns))
    }

    /// `t`, or the end of the pause that holds it.
    fn resume_ns(&self, t: u64) -> u64 {
        self.pauses
            .iter()
            .find(|&&(from, to)| from <= t && t < to)
            .map_or(t, |&(_, to)| to)
    }

    /// Whether a batcher (`max_batch_size` above 1) forming a batch at `formed_ns` broke a
    /// pause: it forms nothing inside one.
    fn release_ns(&self, size: u64) -> u64 {
        self.release_latency_ns
            .saturating_add(self.release_latency_per_request_ns.saturating_mul(size))
    }

    fn formed_in_pause(&self, formed_ns: u64) -> bool {
        self.max_batch_size > 1
            && self
                .pauses
                .iter()
                .any(|&(from, to)| from <= formed_ns && formed_ns < to)
    }
}

#[derive(Debug, Clone)]
struct Continuous {
    max_num_seqs: u32,
    max_num_batched_tokens: u32,
    chunked_prefill: bool,
    block_size: u32,
    num_gpu_blocks: u32,
    prefix_caching: bool,
    prefix_block_tokens: u32,
    step_overhead_ns: u64,
    step_overhead_per_seq_ns: u64,
    base_ns: u64,
    per_prefill_token_ns: u64,
    per_decode_seq_ns: u64,
    per_kv_token_ns: u64,
    schedule_ahead_steps: u32,
}

#[derive(Debug, Clone)]
enum Batching {
    Dynamic(Dynamic),
    Continuous(Continuous),
}

#[derive(Debug, Clone)]
struct Pool {
    name: String,
    models: Vec<String>,
    classes: Vec<u32>,
    instances: u32,
    standby: u32,
    activate_at_outstanding: u32,
    gpus: u32,
    instance_count: u32,
    cold_start_ns: u64,
    /// Workers, base, per input token.
    preprocess: Option<(u32, u64, u64)>,
    priority_levels: u32,
    max_queue_size: u32,
    /// The model's input and output limits (`max_input_tokens`, `max_output_tokens`).
    max_input_tokens: Option<u32>,
    max_output_tokens: Option<u32>,
    timeout_ns: Option<u64>,
    timeout_delay: bool,
    batching: Batching,
    /// Base, per output token.
    postprocess: Option<(u64, u64)>,
}

impl Pool {
    fn model_instances(&self) -> u32 {
        self.gpus * self.instance_count
    }

    fn continuous(&self) -> Option<&Continuous> {
        match &self.batching {
            Batching::Continuous(c) => Some(c),
            Batching::Dynamic(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Retry {
    max_attempts: u32,
    backoff_ns: u64,
    multiplier: f64,
    on_rejected: bool,
    on_timed_out: bool,
}

#[derive(Debug, Clone)]
struct Spec {
    pools: Vec<Pool>,
    one_way_ns: u64,
    overhead_ns: u64,
    /// Rate (requests per second), burst.
    rate_limit: Option<(f64, u32)>,
    max_in_flight: Option<u32>,
    /// Hit probability, latency.
    cache: Option<(f64, u64)>,
    balancing: &'static str,
    retry: Option<Retry>,
    /// Concurrency, think time.
    closed: Option<(u32, u64)>,
}

#[derive(Debug, Clone, Default)]
struct TraceRows {
    arrival_ns: Vec<u64>,
    input_tokens: Vec<u32>,
    output_tokens: Vec<u32>,
    model: Option<Vec<String>>,
    class: Option<Vec<u32>>,
    prefix_blocks: Option<Vec<Vec<u64>>>,
}

struct Case {
    spec: Spec,
    trace: TraceRows,
    scenario_toml: String,
    /// The default pool's replay inputs (a replay-inputs file; may be empty).
    replay_toml: String,
    trace_csv: String,
    map: String,
}

fn ns(value: u64) -> String {
    format!("\"{value}ns\"")
}

/// 10 to the power of a uniform draw in `[low, high)`.
fn log_uniform(rng: &mut StdRng, low: f64, high: f64) -> f64 {
    10f64.powf(rng.random_range(low..high))
}

/// A duration from `low_ns` to `high_ns`, log-uniform.
fn duration(rng: &mut StdRng, low_ns: f64, high_ns: f64) -> u64 {
    log_uniform(rng, low_ns.log10(), high_ns.log10()).round() as u64
}

/// A log-normal size with the given median, at least `min`, at most `max`.
fn size(rng: &mut StdRng, median: f64, sigma: f64, min: u32, max: u32) -> u32 {
    // Box-Muller from two uniforms (the test needs no distribution crate).
    let u1: f64 = rng.random_range(f64::EPSILON..1.0);
    let u2: f64 = rng.random_range(0.0..1.0);
    let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
    ((median * (sigma * z).exp()).round() as u32).clamp(min, max)
}

fn draw_dynamic(rng: &mut StdRng) -> Dynamic {
    let max_batch_size = match rng.random_range(0..10) {
        0..=1 => 1,
        2..=7 => [2, 4, 8, 16][rng.random_range(0..4)],
        _ => rng.random_range(2..=64),
    };
    let mut preferred = Vec::new();
    if max_batch_size > 1 && rng.random_bool(0.3) {
        for _ in 0..rng.random_range(1..=3) {
            preferred.push(rng.random_range(1..=max_batch_size));
        }
        preferred.sort_unstable();
        preferred.dedup();
    }
    let max_queue_delay_ns = if rng.random_bool(0.7) {
        duration(rng, 1e5, 2e7)
    } else {
        0
    };
    let service = match rng.random_range(0..10) {
        0..=2 => Service::Constant {
            time_ns: duration(rng, 5e5, 3e7),
        },
        3..=7 => Service::Affine {
            a_ns: duration(rng, 5e5, 2e7),
            b_ns: duration(rng, 1e4, 2e6),
            c_ns: if rng.random_bool(0.5) {
                duration(rng, 10.0, 1e4)
            } else {
                0
            },
        },
        _ => Service::Exponential {
            mean_ns: duration(rng, 5e5, 3e7),
        },
    };
    let prefetch_off = rng.random_bool(0.2);
    let dispatch_latency_ns = if rng.random_bool(0.2) {
        duration(rng, 1e4, 2e6)
    } else {
        0
    };
    let release_latency_ns = if rng.random_bool(0.2) {
        duration(rng, 1e4, 2e6)
    } else {
        0
    };
    let release_latency_per_request_ns = if rng.random_bool(0.2) {
        duration(rng, 1e3, 2e5)
    } else {
        0
    };
    let mut pauses = Vec::new();
    if rng.random_bool(0.1) {
        let mut at_ns = 0;
        for _ in 0..rng.random_range(1..=5) {
            let from = at_ns + duration(rng, 1e3, 1e9);
            let to = from + duration(rng, 1e3, 5e7);
            pauses.push((from, to));
            at_ns = to;
        }
    }
    Dynamic {
        max_batch_size,
        preferred,
        max_queue_delay_ns,
        prefetch_off,
        dispatch_latency_ns,
        release_latency_ns,
        release_latency_per_request_ns,
        pauses,
        service,
    }
}

fn draw_continuous(rng: &mut StdRng) -> Continuous {
    let block_size = [8, 16, 16, 32][rng.random_range(0..4)];
    Continuous {
        max_num_seqs: [1, 4, 8, 16, 32, 64, 128][rng.random_range(0..7)],
        max_num_batched_tokens: [64, 256, 512, 1024, 2048, 8192][rng.random_range(0..6)],
        chunked_prefill: rng.random_bool(0.8),
        block_size,
        // From a tight cache (preemptions, kv_capacity rejections) to a roomy one.
        num_gpu_blocks: duration(rng, 40.0, 20_000.0) as u32,
        prefix_caching: rng.random_bool(0.3),
        prefix_block_tokens: block_size * [1, 2, 4][rng.random_range(0..3)],
        step_overhead_ns: if rng.random_bool(0.3) {
            duration(rng, 1e4, 2e6)
        } else {
            0
        },
        step_overhead_per_seq_ns: if rng.random_bool(0.2) {
            duration(rng, 1e3, 1e5)
        } else {
            0
        },
        base_ns: duration(rng, 1e6, 2e7),
        per_prefill_token_ns: duration(rng, 1e3, 2e5),
        per_decode_seq_ns: duration(rng, 1e4, 1e6),
        per_kv_token_ns: if rng.random_bool(0.5) {
            duration(rng, 0.5, 50.0)
        } else {
            0
        },
        schedule_ahead_steps: [0, 1, 1, 2][rng.random_range(0..4)],
    }
}

fn draw_pool(rng: &mut StdRng, name: &str) -> Pool {
    let continuous = rng.random_bool(0.35);
    let (gpus, instance_count) = if continuous {
        (1, 1)
    } else {
        (
            if rng.random_bool(0.2) { 2 } else { 1 },
            if rng.random_bool(0.3) { 2 } else { 1 },
        )
    };
    let timeout_ns = rng.random_bool(0.25).then(|| duration(rng, 1e6, 5e8));
    Pool {
        name: name.to_string(),
        models: Vec::new(),
        classes: Vec::new(),
        instances: [1, 1, 2, 3, 4, 8][rng.random_range(0..6)],
        standby: if rng.random_bool(0.15) {
            rng.random_range(1..=3)
        } else {
            0
        },
        activate_at_outstanding: rng.random_range(1..=16),
        gpus,
        instance_count,
        cold_start_ns: if rng.random_bool(0.15) {
            duration(rng, 1e6, 2e9)
        } else {
            0
        },
        preprocess: rng.random_bool(0.25).then(|| {
            (
                rng.random_range(1..=4),
                duration(rng, 1e4, 2e6),
                if rng.random_bool(0.5) {
                    duration(rng, 1.0, 2e3)
                } else {
                    0
                },
            )
        }),
        priority_levels: if rng.random_bool(0.2) {
            rng.random_range(2..=4)
        } else {
            1
        },
        max_input_tokens: rng.random_bool(0.15).then(|| rng.random_range(1..=1_000)),
        max_output_tokens: rng.random_bool(0.15).then(|| rng.random_range(1..=200)),
        max_queue_size: if rng.random_bool(0.2) {
            rng.random_range(1..=64)
        } else {
            0
        },
        timeout_ns,
        timeout_delay: timeout_ns.is_some() && rng.random_bool(0.5),
        batching: if continuous {
            Batching::Continuous(draw_continuous(rng))
        } else {
            let mut d = draw_dynamic(rng);
            if name != "default" {
                // Replay inputs are the default pool's only (a replay is of one server).
                d.release_latency_per_request_ns = 0;
                d.pauses.clear();
            }
            Batching::Dynamic(d)
        },
        postprocess: rng.random_bool(0.3).then(|| {
            (
                duration(rng, 1e3, 2e6),
                if rng.random_bool(0.5) {
                    duration(rng, 1.0, 1e4)
                } else {
                    0
                },
            )
        }),
    }
}

fn draw_spec(rng: &mut StdRng) -> Spec {
    let pool_count = match rng.random_range(0..10) {
        0..=5 => 1,
        6..=8 => 2,
        _ => 3,
    };
    let mut pools: Vec<Pool> = (0..pool_count)
        .map(|p| {
            draw_pool(
                rng,
                if p == 0 {
                    "default"
                } else {
                    ["chat", "embed"][p - 1]
                },
            )
        })
        .collect();
    // Pool 1 takes model m1 (and sometimes class 3), pool 2 class 2 (and sometimes model m2).
    if pool_count > 1 {
        pools[1].models.push("m1".to_string());
        if rng.random_bool(0.5) {
            pools[1].classes.push(3);
        }
    }
    if pool_count > 2 {
        pools[2].classes.push(2);
        if rng.random_bool(0.5) {
            pools[2].models.push("m2".to_string());
        }
    }
    // The rate is set against the trace's rate once it is drawn (`draw_case`).
    let rate_limit = rng
        .random_bool(0.15)
        .then(|| (1.0, rng.random_range(1..=50)));
    Spec {
        pools,
        one_way_ns: if rng.random_bool(0.3) {
            duration(rng, 1e4, 5e7)
        } else {
            0
        },
        overhead_ns: if rng.random_bool(0.3) {
            duration(rng, 1e3, 1e6)
        } else {
            0
        },
        rate_limit,
        max_in_flight: rng.random_bool(0.15).then(|| rng.random_range(1..=200)),
        cache: rng.random_bool(0.15).then(|| {
            (
                [0.05, 0.2, 0.5, 0.9][rng.random_range(0..4)],
                if rng.random_bool(0.7) {
                    duration(rng, 1e3, 1e6)
                } else {
                    0
                },
            )
        }),
        balancing: [
            "round_robin",
            "random",
            "least_outstanding",
            "join_shortest_queue",
            "power_of_two",
        ][rng.random_range(0..5)],
        retry: rng.random_bool(0.25).then(|| {
            let on = rng.random_range(0..3);
            Retry {
                max_attempts: rng.random_range(2..=5),
                backoff_ns: duration(rng, 1e5, 5e8),
                multiplier: [1.0, 1.5, 2.0, 3.0][rng.random_range(0..4)],
                on_rejected: on != 1,
                on_timed_out: on != 0,
            }
        }),
        closed: rng.random_bool(0.2).then(|| {
            (
                [1, 2, 4, 8, 16, 64][rng.random_range(0..6)],
                if rng.random_bool(0.5) {
                    duration(rng, 1e3, 1e8)
                } else {
                    0
                },
            )
        }),
    }
}

/// Requests per second the scenario roughly serves (to aim the trace's rate at it).
fn capacity_rps(spec: &Spec, mean_input: f64, mean_output: f64) -> f64 {
    spec.pools
        .iter()
        .map(|p| {
            let servers = f64::from(p.instances);
            match &p.batching {
                Batching::Dynamic(d) => {
                    let b = u64::from(d.max_batch_size);
                    let batch_ns = (d.service.mean_ns(b, mean_input as u64)
                        + (d.dispatch_latency_ns + d.release_ns(b)) as f64)
                        .max(1.0);
                    servers * f64::from(p.model_instances()) * b as f64 / batch_ns * 1e9
                }
                Batching::Continuous(c) => {
                    let seqs = f64::from(c.max_num_seqs.min(32));
                    let step_ns = (c.base_ns + c.step_overhead_ns) as f64
                        + (c.per_decode_seq_ns + c.step_overhead_per_seq_ns) as f64 * seqs
                        + c.per_prefill_token_ns as f64 * mean_input * seqs / mean_output.max(1.0);
                    servers * seqs / (step_ns * mean_output.max(1.0)) * 1e9
                }
            }
        })
        .sum::<f64>()
        .max(0.1)
}

/// The trace, and its mean arrival rate in requests per second.
fn draw_trace(rng: &mut StdRng, spec: &Spec) -> (TraceRows, f64) {
    let rows = if rng.random_bool(0.7) {
        rng.random_range(100..800)
    } else {
        rng.random_range(800..2_500)
    };
    let llm = spec.pools.iter().any(|p| p.continuous().is_some());
    let (input_median, output_median) = if llm {
        (log_uniform(rng, 1.0, 3.0), log_uniform(rng, 0.5, 2.3))
    } else {
        (log_uniform(rng, 0.5, 2.5), 1.0)
    };
    let rho = if rng.random_bool(0.7) {
        rng.random_range(0.2..0.95)
    } else {
        rng.random_range(0.95..1.6)
    };
    let rate_rps = rho * capacity_rps(spec, input_median, output_median);
    let bursty = rng.random_bool(0.3);
    let ties = rng.random_bool(0.1);
    let mut t_ns = if rng.random_bool(0.3) {
        duration(rng, 1e3, 5e9)
    } else {
        0
    };
    let prefix_tokens = spec
        .pools
        .iter()
        .filter_map(|p| p.continuous())
        .find(|c| c.prefix_caching)
        .map(|c| c.prefix_block_tokens);
    let mut trace = TraceRows::default();
    if spec.pools.len() > 1 {
        trace.model = Some(Vec::new());
        trace.class = Some(Vec::new());
    } else if spec.pools[0].priority_levels > 1 || rng.random_bool(0.2) {
        trace.class = Some(Vec::new());
    }
    if prefix_tokens.is_some() {
        trace.prefix_blocks = Some(Vec::new());
    }
    for _ in 0..rows {
        trace.arrival_ns.push(t_ns);
        let input = size(rng, input_median, 1.0, 1, 8_000);
        trace.input_tokens.push(input);
        trace
            .output_tokens
            .push(size(rng, output_median, 0.8, 1, 1_000));
        if let Some(models) = &mut trace.model {
            models.push(["m0", "m1", "m2"][rng.random_range(0..3)].to_string());
        }
        if let Some(classes) = &mut trace.class {
            classes.push(rng.random_range(0..5));
        }
        if let (Some(blocks), Some(per_block)) = (&mut trace.prefix_blocks, prefix_tokens) {
            // A few shared system prompts, then the request's own blocks.
            let count = input / per_block;
            let shared = rng.random_range(0..4u64);
            let own = rng.random_range(0..u64::MAX / 2);
            blocks.push(
                (0..u64::from(count))
                    .map(|k| if k < 2 { 1_000 * shared + k } else { own + k })
                    .collect(),
            );
        }
        let mut gap_s = -rng.random_range(f64::EPSILON..1.0).ln() / rate_rps;
        if bursty {
            gap_s *= if rng.random_bool(0.8) { 0.1 } else { 4.6 };
        }
        if ties && rng.random_bool(0.05) {
            gap_s = 0.0;
        }
        t_ns += (gap_s * 1e9).round() as u64;
    }
    (trace, rate_rps)
}

/// The default pool's replay inputs (`capsim simulate --replay-inputs`): its hand-over per
/// request and its pauses, which a scenario does not take. Empty when it has none.
fn replay_toml(spec: &Spec) -> String {
    let mut s = String::new();
    if let Batching::Dynamic(d) = &spec.pools[0].batching {
        if d.release_latency_per_request_ns > 0 {
            writeln!(
                s,
                "release_latency_per_request = {}",
                ns(d.release_latency_per_request_ns)
            )
            .unwrap();
        }
        if !d.pauses.is_empty() {
            let windows: Vec<String> = d
                .pauses
                .iter()
                .map(|&(from, to)| format!("{{ from = {}, to = {} }}", ns(from), ns(to)))
                .collect();
            writeln!(s, "pauses = [{}]", windows.join(", ")).unwrap();
        }
    }
    s
}

fn scenario_toml(spec: &Spec, seed: u64) -> String {
    let mut s = format!(
        "name = \"swarm-{seed}\"\ninstances = {}\n",
        spec.pools[0].instances
    );
    // The default pool's top-level keys, before any table.
    limits_toml(&mut s, &spec.pools[0]);
    if let Some((concurrency, think_ns)) = spec.closed {
        writeln!(
            s,
            "[load]\nmode = \"closed\"\nconcurrency = {concurrency}\nthink_time = {}",
            ns(think_ns)
        )
        .unwrap();
    }
    if spec.one_way_ns > 0 {
        writeln!(
            s,
            "[network.latency]\nkind = \"constant\"\none_way = {}",
            ns(spec.one_way_ns)
        )
        .unwrap();
    }
    writeln!(
        s,
        "[gateway]\noverhead = {}\nload_balancing = \"{}\"",
        ns(spec.overhead_ns),
        spec.balancing
    )
    .unwrap();
    if let Some((rate, burst)) = spec.rate_limit {
        writeln!(s, "rate_limit = \"{rate}rps\"\nburst = {burst}").unwrap();
    }
    if let Some(limit) = spec.max_in_flight {
        writeln!(s, "max_in_flight = {limit}").unwrap();
    }
    if let Some((p, latency_ns)) = spec.cache {
        writeln!(
            s,
            "[cache]\nhit_probability = {p}\nlatency = {}",
            ns(latency_ns)
        )
        .unwrap();
    }
    if let Some(r) = &spec.retry {
        let mut on = Vec::new();
        if r.on_rejected {
            on.push("\"rejected\"");
        }
        if r.on_timed_out {
            on.push("\"timed_out\"");
        }
        writeln!(
            s,
            "[retry]\nmax_attempts = {}\nbackoff = {}\nbackoff_multiplier = {:?}\non = [{}]",
            r.max_attempts,
            ns(r.backoff_ns),
            r.multiplier,
            on.join(", ")
        )
        .unwrap();
    }
    for (index, pool) in spec.pools.iter().enumerate() {
        let prefix = if index == 0 {
            String::new()
        } else {
            let name = &pool.name;
            writeln!(s, "[pools.{name}]\ninstances = {}", pool.instances).unwrap();
            limits_toml(&mut s, pool);
            let models: Vec<String> = pool.models.iter().map(|m| format!("\"{m}\"")).collect();
            writeln!(
                s,
                "models = [{}]\nclasses = [{}]",
                models.join(", "),
                pool.classes
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
            .unwrap();
            format!("pools.{name}.")
        };
        pool_toml(&mut s, &prefix, pool);
    }
    s
}

/// The pool's token limits, keys of its top-level table.
fn limits_toml(s: &mut String, pool: &Pool) {
    if let Some(limit) = pool.max_input_tokens {
        writeln!(s, "max_input_tokens = {limit}").unwrap();
    }
    if let Some(limit) = pool.max_output_tokens {
        writeln!(s, "max_output_tokens = {limit}").unwrap();
    }
}

fn pool_toml(s: &mut String, prefix: &str, pool: &Pool) {
    if pool.standby > 0 {
        writeln!(
            s,
            "[{prefix}standby]\ninstances = {}\nactivate_at_outstanding = {}",
            pool.standby, pool.activate_at_outstanding
        )
        .unwrap();
    }
    if let Some((workers, base_ns, per_ns)) = pool.preprocess {
        writeln!(
            s,
            "[{prefix}preprocess]\nworkers = {workers}\nbase = {}\nper_input_token = {}",
            ns(base_ns),
            ns(per_ns)
        )
        .unwrap();
    }
    writeln!(
        s,
        "[{prefix}queue]\npriority_levels = {}\nmax_queue_size = {}",
        pool.priority_levels, pool.max_queue_size
    )
    .unwrap();
    if let Some(timeout_ns) = pool.timeout_ns {
        writeln!(
            s,
            "timeout = {}\ntimeout_action = \"{}\"",
            ns(timeout_ns),
            if pool.timeout_delay {
                "delay"
            } else {
                "reject"
            }
        )
        .unwrap();
    }
    writeln!(
        s,
        "[{prefix}execution]\ngpus = {}\ninstance_count = {}\ncold_start = {}",
        pool.gpus,
        pool.instance_count,
        ns(pool.cold_start_ns)
    )
    .unwrap();
    match &pool.batching {
        Batching::Dynamic(d) => {
            writeln!(
                s,
                "[{prefix}batcher]\nmax_batch_size = {}\nmax_queue_delay = {}",
                d.max_batch_size,
                ns(d.max_queue_delay_ns)
            )
            .unwrap();
            if !d.preferred.is_empty() {
                writeln!(s, "preferred_batch_size = {:?}", d.preferred).unwrap();
            }
            if d.prefetch_off {
                writeln!(s, "prefetch = false").unwrap();
            }
            if d.dispatch_latency_ns > 0 {
                writeln!(s, "dispatch_latency = {}", ns(d.dispatch_latency_ns)).unwrap();
            }
            if d.release_latency_ns > 0 {
                writeln!(s, "release_latency = {}", ns(d.release_latency_ns)).unwrap();
            }
            match d.service {
                Service::Constant { time_ns } => writeln!(
                    s,
                    "[{prefix}service]\nkind = \"constant\"\ntime = {}",
                    ns(time_ns)
                ),
                Service::Affine { a_ns, b_ns, c_ns } => writeln!(
                    s,
                    "[{prefix}service]\nkind = \"affine\"\na = {}\nb = {}\nc = {}",
                    ns(a_ns),
                    ns(b_ns),
                    ns(c_ns)
                ),
                Service::Exponential { mean_ns } => writeln!(
                    s,
                    "[{prefix}service]\nkind = \"exponential\"\nmean = {}",
                    ns(mean_ns)
                ),
            }
            .unwrap();
        }
        Batching::Continuous(c) => {
            writeln!(
                s,
                "[{prefix}batcher]\nkind = \"continuous\"\nmax_num_seqs = {}\n\
                 max_num_batched_tokens = {}\nenable_chunked_prefill = {}\n\
                 step_overhead = {}\nstep_overhead_per_seq = {}\nschedule_ahead_steps = {}",
                c.max_num_seqs,
                c.max_num_batched_tokens,
                c.chunked_prefill,
                ns(c.step_overhead_ns),
                ns(c.step_overhead_per_seq_ns),
                c.schedule_ahead_steps
            )
            .unwrap();
            if pool.priority_levels > 1 {
                writeln!(s, "scheduling = \"priority\"").unwrap();
            }
            writeln!(
                s,
                "[{prefix}kv_cache]\nblock_size = {}\nnum_gpu_blocks = {}\n\
                 enable_prefix_caching = {}\nprefix_block_tokens = {}",
                c.block_size, c.num_gpu_blocks, c.prefix_caching, c.prefix_block_tokens
            )
            .unwrap();
            writeln!(
                s,
                "[{prefix}step_time]\nkind = \"linear\"\nbase = {}\nper_prefill_token = {}\n\
                 per_decode_seq = {}\nper_kv_token = {}",
                ns(c.base_ns),
                ns(c.per_prefill_token_ns),
                ns(c.per_decode_seq_ns),
                ns(c.per_kv_token_ns)
            )
            .unwrap();
        }
    }
    if let Some((base_ns, per_ns)) = pool.postprocess {
        writeln!(
            s,
            "[{prefix}postprocess]\nbase = {}\nper_output_token = {}",
            ns(base_ns),
            ns(per_ns)
        )
        .unwrap();
    }
}

/// The trace as CSV and the `--map` that reads it.
fn trace_csv(trace: &TraceRows) -> (String, String) {
    let mut header = vec!["t", "i", "o"];
    let mut map = "arrival=t:ns,input_tokens=i,output_tokens=o".to_string();
    if trace.model.is_some() {
        header.push("m");
        map.push_str(",model=m");
    }
    if trace.class.is_some() {
        header.push("c");
        map.push_str(",class=c");
    }
    if trace.prefix_blocks.is_some() {
        header.push("p");
        map.push_str(",prefix_blocks=p");
    }
    let mut text = header.join(",");
    text.push('\n');
    for row in 0..trace.arrival_ns.len() {
        write!(
            text,
            "{},{},{}",
            trace.arrival_ns[row], trace.input_tokens[row], trace.output_tokens[row]
        )
        .unwrap();
        if let Some(m) = &trace.model {
            write!(text, ",{}", m[row]).unwrap();
        }
        if let Some(c) = &trace.class {
            write!(text, ",{}", c[row]).unwrap();
        }
        if let Some(p) = &trace.prefix_blocks {
            let list: Vec<String> = p[row].iter().map(u64::to_string).collect();
            write!(text, ",{}", list.join(";")).unwrap();
        }
        text.push('\n');
    }
    (text, map)
}

fn draw_case(seed: u64) -> Case {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut spec = draw_spec(&mut rng);
    let (trace, rate_rps) = draw_trace(&mut rng, &spec);
    // A rate limit from half to three times the offered rate (or the clients' pace).
    if let Some((rate, burst)) = &mut spec.rate_limit {
        *rate = rate_rps * rng.random_range(0.5..3.0);
        if rng.random_bool(0.5) {
            *burst = (rate.floor() as u32).max(1);
        }
    }
    let scenario_toml = scenario_toml(&spec, seed);
    let replay_toml = replay_toml(&spec);
    let (trace_csv, map) = trace_csv(&trace);
    Case {
        spec,
        trace,
        scenario_toml,
        replay_toml,
        trace_csv,
        map,
    }
}

// ---------------------------------------------------------------------------------------------
// Reading the outputs.

/// One row of requests.parquet; times and indices are `NONE` (`u64::MAX`) where null.
#[derive(Debug, Clone, Default)]
struct Rec {
    request: u64,
    attempt: u64,
    pool: Option<String>,
    instance: u64,
    model_instance: u64,
    client: u64,
    input_tokens: u64,
    output_tokens: u64,
    arrival_ns: u64,
    gateway_ns: u64,
    admitted_ns: u64,
    queued_ns: u64,
    batch_formed_ns: u64,
    exec_start_ns: u64,
    first_token_ns: u64,
    exec_end_ns: u64,
    postprocessed_ns: u64,
    response_ns: u64,
    latency_ns: u64,
    batch_id: u64,
    batch_size: u64,
    outcome: String,
    reject_reason: Option<String>,
    cache_hit: bool,
    ttft_ns: u64,
    tpot_ns: u64,
}

fn read_requests(path: &Path) -> Result<Vec<Rec>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader = SerializedFileReader::new(file).map_err(|e| format!("{}: {e}", path.display()))?;
    let rows = reader
        .get_row_iter(None)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut records = Vec::new();
    for row in rows {
        let row = row.map_err(|e| format!("{}: {e}", path.display()))?;
        let mut r = Rec {
            first_token_ns: NONE,
            ttft_ns: NONE,
            tpot_ns: NONE,
            ..Rec::default()
        };
        for (name, field) in row.get_column_iter() {
            let int = match field {
                Field::Null => Some(NONE),
                Field::Long(v) => Some(*v as u64),
                Field::UInt(v) => Some(u64::from(*v)),
                Field::Int(v) => Some(*v as u64),
                _ => None,
            };
            let text = match field {
                Field::Str(s) => Some(s.clone()),
                _ => None,
            };
            let slot = match name.as_str() {
                "request" => &mut r.request,
                "attempt" => &mut r.attempt,
                "instance" => &mut r.instance,
                "model_instance" => &mut r.model_instance,
                "client" => &mut r.client,
                "input_tokens" => &mut r.input_tokens,
                "output_tokens" => &mut r.output_tokens,
                "arrival_ns" => &mut r.arrival_ns,
                "gateway_ns" => &mut r.gateway_ns,
                "admitted_ns" => &mut r.admitted_ns,
                "queued_ns" => &mut r.queued_ns,
                "batch_formed_ns" => &mut r.batch_formed_ns,
                "exec_start_ns" => &mut r.exec_start_ns,
                "first_token_ns" => &mut r.first_token_ns,
                "exec_end_ns" => &mut r.exec_end_ns,
                "postprocessed_ns" => &mut r.postprocessed_ns,
                "response_ns" => &mut r.response_ns,
                "latency_ns" => &mut r.latency_ns,
                "batch_id" => &mut r.batch_id,
                "batch_size" => &mut r.batch_size,
                "ttft_ns" => &mut r.ttft_ns,
                "tpot_ns" => &mut r.tpot_ns,
                "pool" => {
                    r.pool = text;
                    continue;
                }
                "outcome" => {
                    r.outcome = text.unwrap_or_default();
                    continue;
                }
                "reject_reason" => {
                    r.reject_reason = text;
                    continue;
                }
                "fail_reason" => {
                    if !matches!(field, Field::Null) {
                        return Err(format!("a simulated request has fail_reason {field:?}"));
                    }
                    continue;
                }
                "cache_hit" => {
                    r.cache_hit = matches!(field, Field::Bool(true));
                    continue;
                }
                // A column this audit does not know yet.
                _ => continue,
            };
            *slot = int.ok_or_else(|| format!("column {name}: unexpected {field:?}"))?;
        }
        records.push(r);
    }
    Ok(records)
}

// ---------------------------------------------------------------------------------------------
// The audit.

/// Pool, instance, model instance.
type ModelInstanceKey = (String, u64, u64);

/// A batch's compute start, formation, compute end and its model instance's release, its id,
/// and whether it started other than the dispatch latency after its formation.
type BatchRun = (u64, u64, u64, u64, u64, bool);

/// Collects broken rules; the first few are reported.
#[derive(Default)]
struct Audit {
    broken: Vec<String>,
}

impl Audit {
    fn check(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok && self.broken.len() < 8 {
            self.broken.push(what());
        }
    }
}

fn present(t: u64) -> bool {
    t != NONE
}

/// The most intervals `[start, end)` open at once (ends before starts at equal times).
fn peak_overlap(intervals: impl Iterator<Item = (u64, u64)>) -> (usize, u64) {
    let mut edges: Vec<(u64, i8)> = Vec::new();
    for (start, end) in intervals {
        edges.push((start, 1));
        edges.push((end, -1));
    }
    edges.sort_unstable();
    let (mut open, mut peak, mut at) = (0i64, 0i64, 0u64);
    for (t, d) in edges {
        open += i64::from(d);
        if open > peak {
            (peak, at) = (open, t);
        }
    }
    (peak as usize, at)
}

/// The input and output tokens a record should hold: its trace row's, cut to its pool's limits
/// once it reached the pool (routed, not answered by the cache).
fn sizes_seen(spec: &Spec, trace: &TraceRows, r: &Rec) -> (u64, u64) {
    let row = r.request as usize;
    let (input, output) = (trace.input_tokens[row], trace.output_tokens[row]);
    let pool = r
        .pool
        .as_deref()
        .and_then(|name| spec.pools.iter().find(|p| p.name == name));
    match pool {
        Some(p) if !r.cache_hit => (
            u64::from(input.min(p.max_input_tokens.unwrap_or(u32::MAX))),
            u64::from(output.min(p.max_output_tokens.unwrap_or(u32::MAX))),
        ),
        _ => (u64::from(input), u64::from(output)),
    }
}

fn audit(case: &Case, records: &[Rec], summary: &serde_json::Value) -> Vec<String> {
    let spec = &case.spec;
    let trace = &case.trace;
    let mut a = Audit::default();
    let pool_index: HashMap<&str, usize> = spec
        .pools
        .iter()
        .enumerate()
        .map(|(i, p)| (p.name.as_str(), i))
        .collect();

    // Stage order, outcome shapes and per-record rules.
    for r in records {
        let id = || format!("request {} attempt {}", r.request, r.attempt);
        let chain = [
            ("arrival", r.arrival_ns),
            ("gateway", r.gateway_ns),
            ("admitted", r.admitted_ns),
            ("queued", r.queued_ns),
            ("batch_formed", r.batch_formed_ns),
            ("exec_start", r.exec_start_ns),
            ("first_token", r.first_token_ns),
            ("exec_end", r.exec_end_ns),
            ("postprocessed", r.postprocessed_ns),
            ("response", r.response_ns),
        ];
        let reached: Vec<(&str, u64)> =
            chain.iter().copied().filter(|&(_, t)| present(t)).collect();
        for pair in reached.windows(2) {
            a.check(pair[0].1 <= pair[1].1, || {
                format!(
                    "order: {}: {}_ns {} after {}_ns {}",
                    id(),
                    pair[0].0,
                    pair[0].1,
                    pair[1].0,
                    pair[1].1
                )
            });
        }
        a.check(present(r.arrival_ns) && present(r.response_ns), || {
            format!("order: {}: no arrival or response", id())
        });
        a.check(
            r.latency_ns == r.response_ns.wrapping_sub(r.arrival_ns),
            || {
                format!(
                    "order: {}: latency_ns {} is not response - arrival",
                    id(),
                    r.latency_ns
                )
            },
        );
        let pool = r
            .pool
            .as_deref()
            .and_then(|p| pool_index.get(p))
            .map(|&i| &spec.pools[i]);
        match r.outcome.as_str() {
            "completed" if r.cache_hit => {
                a.check(
                    spec.cache.is_some()
                        && !present(r.queued_ns)
                        && !present(r.exec_start_ns)
                        && present(r.postprocessed_ns),
                    || format!("shape: {}: a cache hit with stages {reached:?}", id()),
                );
                if let Some((_, latency_ns)) = spec.cache {
                    a.check(r.postprocessed_ns.wrapping_sub(r.admitted_ns) == latency_ns, || {
                        format!(
                            "gateway: {}: cache answered after {} ns, latency is {latency_ns} ns",
                            id(),
                            r.postprocessed_ns.wrapping_sub(r.admitted_ns)
                        )
                    });
                }
            }
            "completed" => {
                a.check(reached.len() >= 9 && pool.is_some(), || {
                    format!(
                        "shape: {}: completed with stages {reached:?} in pool {:?}",
                        id(),
                        r.pool
                    )
                });
            }
            "rejected" => {
                let reason = r.reject_reason.as_deref().unwrap_or("none");
                let at_gateway = matches!(reason, "rate_limited" | "max_in_flight");
                a.check(
                    !present(r.queued_ns)
                        && present(r.gateway_ns)
                        && present(r.admitted_ns) != at_gateway
                        && (!at_gateway || r.response_ns == r.gateway_ns),
                    || {
                        format!(
                            "shape: {}: rejected ({reason}) with stages {reached:?}",
                            id()
                        )
                    },
                );
                let allowed = match reason {
                    "rate_limited" => spec.rate_limit.is_some(),
                    "max_in_flight" => spec.max_in_flight.is_some(),
                    "queue_full" => pool.is_some_and(|p| p.max_queue_size > 0),
                    "kv_capacity" => pool.is_some_and(|p| {
                        p.continuous().is_some_and(|c| {
                            (r.input_tokens.max(1) + r.output_tokens.max(1) - 1)
                                .div_ceil(u64::from(c.block_size))
                                > u64::from(c.num_gpu_blocks)
                        })
                    }),
                    "prompt_too_long" => pool.is_some_and(|p| {
                        p.continuous().is_some_and(|c| {
                            !c.chunked_prefill
                                && r.input_tokens > u64::from(c.max_num_batched_tokens)
                        })
                    }),
                    _ => false,
                };
                a.check(allowed, || {
                    format!(
                        "shape: {}: rejected for {reason}, which this scenario cannot give",
                        id()
                    )
                });
            }
            "timed_out" => {
                let timeout =
                    pool.and_then(|p| (!p.timeout_delay).then_some(p.timeout_ns).flatten());
                a.check(present(r.queued_ns) && !present(r.batch_formed_ns), || {
                    format!("shape: {}: timed out with stages {reached:?}", id())
                });
                a.check(
                    timeout.is_some_and(|t| r.response_ns.wrapping_sub(r.queued_ns) == t),
                    || {
                        format!(
                            "timeout: {}: timed out after {} ns in the queue; the timeout is {timeout:?} ns",
                            id(),
                            r.response_ns.wrapping_sub(r.queued_ns)
                        )
                    },
                );
            }
            other => a.check(false, || format!("shape: {}: outcome {other}", id())),
        }
        // Where it went, and how long the fixed-time stages took.
        if let Some(p) = pool {
            let servers = u64::from(p.instances + p.standby);
            a.check(r.instance < servers, || {
                format!(
                    "routing: {}: instance {} of a pool of {servers}",
                    id(),
                    r.instance
                )
            });
            a.check(
                !present(r.model_instance) || r.model_instance < u64::from(p.model_instances()),
                || format!("routing: {}: model instance {}", id(), r.model_instance),
            );
            let row = r.request as usize;
            let by_model = trace
                .model
                .as_ref()
                .and_then(|m| spec.pools.iter().position(|q| q.models.contains(&m[row])));
            let by_class = trace
                .class
                .as_ref()
                .and_then(|c| spec.pools.iter().position(|q| q.classes.contains(&c[row])));
            let expected = &spec.pools[by_model.or(by_class).unwrap_or(0)].name;
            a.check(&p.name == expected, || {
                format!(
                    "routing: {}: in pool {}, its model and class route to {expected}",
                    id(),
                    p.name
                )
            });
            if let Some(timeout_ns) = p.timeout_ns
                && !p.timeout_delay
                && present(r.batch_formed_ns)
            {
                a.check(r.batch_formed_ns.wrapping_sub(r.queued_ns) <= timeout_ns, || {
                    format!(
                        "timeout: {}: batched after {} ns in the queue, past the {timeout_ns} ns timeout",
                        id(),
                        r.batch_formed_ns.wrapping_sub(r.queued_ns)
                    )
                });
            }
            if present(r.exec_start_ns) {
                a.check(r.exec_start_ns >= p.cold_start_ns, || {
                    format!(
                        "cold start: {}: executing at {} ns, before the cold start",
                        id(),
                        r.exec_start_ns
                    )
                });
            }
            if present(r.queued_ns) && !r.cache_hit {
                a.check(
                    r.admitted_ns.wrapping_sub(r.gateway_ns) == spec.overhead_ns,
                    || {
                        format!(
                            "gateway: {}: overhead {} ns, configured {} ns",
                            id(),
                            r.admitted_ns.wrapping_sub(r.gateway_ns),
                            spec.overhead_ns
                        )
                    },
                );
                let pre_ns = p
                    .preprocess
                    .map_or(0, |(_, base, per)| base + per * r.input_tokens);
                a.check(r.queued_ns.wrapping_sub(r.admitted_ns) >= pre_ns, || {
                    format!(
                        "preprocess: {}: queued {} ns after admission, pre-processing takes {pre_ns} ns",
                        id(),
                        r.queued_ns.wrapping_sub(r.admitted_ns)
                    )
                });
            }
            if present(r.exec_end_ns) {
                // A streamed (continuous) response has only its last token's detokenization
                // left after execution, then the close; a whole response every token's.
                let tokens_left = if p.continuous().is_some() {
                    1
                } else {
                    r.output_tokens
                };
                let post_ns = p
                    .postprocess
                    .map_or(0, |(base, per)| base + per * tokens_left);
                a.check(
                    r.postprocessed_ns.wrapping_sub(r.exec_end_ns) == post_ns,
                    || {
                        format!(
                            "postprocess: {}: took {} ns, configured {post_ns} ns",
                            id(),
                            r.postprocessed_ns.wrapping_sub(r.exec_end_ns)
                        )
                    },
                );
            }
            match &p.batching {
                Batching::Dynamic(d) => {
                    a.check(!present(r.first_token_ns), || {
                        format!("shape: {}: a first token outside an LLM pool", id())
                    });
                    if present(r.exec_start_ns) {
                        a.check(!d.formed_in_pause(r.batch_formed_ns), || {
                            format!(
                                "batch: {}: batch {} formed at {} ns, inside a pause {:?}",
                                id(),
                                r.batch_id,
                                r.batch_formed_ns,
                                d.pauses
                            )
                        });
                        // When exactly it computed (after the dispatch latency, or at the
                        // release of the batch before) is checked per model instance.
                        a.check(
                            r.exec_start_ns >= r.batch_formed_ns && present(r.batch_id),
                            || {
                                format!(
                                    "batch: {}: batch {} formed at {} ns, started at {} ns, dispatch latency {} ns, pauses {:?}",
                                    id(),
                                    r.batch_id,
                                    r.batch_formed_ns,
                                    r.exec_start_ns,
                                    d.dispatch_latency_ns,
                                    d.pauses
                                )
                            },
                        );
                    }
                }
                Batching::Continuous(c) => {
                    a.check(!present(r.batch_id) && r.batch_size == 0, || {
                        format!(
                            "shape: {}: a continuous request with batch {}",
                            id(),
                            r.batch_id
                        )
                    });
                    if r.outcome == "completed" {
                        a.check(present(r.first_token_ns), || {
                            format!("llm: {}: completed without a first token", id())
                        });
                        let kv_blocks = (r.input_tokens.max(1) + r.output_tokens.max(1) - 1)
                            .div_ceil(u64::from(c.block_size));
                        a.check(kv_blocks <= u64::from(c.num_gpu_blocks), || {
                            format!(
                                "llm: {}: completed needing {kv_blocks} KV blocks of {}",
                                id(),
                                c.num_gpu_blocks
                            )
                        });
                        a.check(c.chunked_prefill || r.input_tokens <= u64::from(c.max_num_batched_tokens), || {
                            format!("llm: {}: a prompt of {} tokens completed without chunked prefill", id(), r.input_tokens)
                        });
                        // Every token's path to the client is the last one's without the
                        // stream's close (`postprocess.base`).
                        let close_ns = p.postprocess.map_or(0, |(base, _)| base);
                        let ttft_ns = r
                            .first_token_ns
                            .wrapping_add(r.response_ns.wrapping_sub(r.exec_end_ns))
                            .wrapping_sub(close_ns)
                            .wrapping_sub(r.arrival_ns);
                        a.check(r.ttft_ns == ttft_ns, || {
                            format!("llm: {}: ttft_ns {} for {ttft_ns}", id(), r.ttft_ns)
                        });
                        let tpot_ns = if r.output_tokens >= 2 {
                            (r.exec_end_ns.wrapping_sub(r.first_token_ns)) / (r.output_tokens - 1)
                        } else {
                            NONE
                        };
                        a.check(r.tpot_ns == tpot_ns, || {
                            format!("llm: {}: tpot_ns {} for {tpot_ns}", id(), r.tpot_ns)
                        });
                    }
                }
            }
        }
        if present(r.gateway_ns) {
            a.check(
                r.gateway_ns.wrapping_sub(r.arrival_ns) >= spec.one_way_ns,
                || {
                    format!(
                        "network: {}: reached the gateway {} ns after sending",
                        id(),
                        r.gateway_ns.wrapping_sub(r.arrival_ns)
                    )
                },
            );
        }
        if present(r.postprocessed_ns) {
            a.check(
                r.response_ns.wrapping_sub(r.postprocessed_ns) >= spec.one_way_ns,
                || {
                    format!(
                        "network: {}: answered {} ns after leaving",
                        id(),
                        r.response_ns.wrapping_sub(r.postprocessed_ns)
                    )
                },
            );
        }
    }

    // Accounting and retries, per trace row.
    let mut by_request: BTreeMap<u64, Vec<&Rec>> = BTreeMap::new();
    for r in records {
        by_request.entry(r.request).or_default().push(r);
    }
    let rows = trace.arrival_ns.len() as u64;
    a.check(
        by_request.len() as u64 == rows
            && by_request.keys().next_back().is_none_or(|&k| k == rows - 1),
        || {
            format!(
                "accounting: {} of {rows} trace rows have records",
                by_request.len()
            )
        },
    );
    let max_attempts = spec.retry.as_ref().map_or(1, |r| u64::from(r.max_attempts));
    let retryable = |r: &Rec| {
        spec.retry
            .as_ref()
            .is_some_and(|retry| match r.outcome.as_str() {
                "rejected" => retry.on_rejected,
                "timed_out" => retry.on_timed_out,
                _ => false,
            })
    };
    for (&request, attempts) in &by_request {
        let mut attempts = attempts.clone();
        attempts.sort_by_key(|r| r.attempt);
        let numbers: Vec<u64> = attempts.iter().map(|r| r.attempt).collect();
        a.check(numbers.iter().copied().eq(1..=numbers.len() as u64), || {
            format!("accounting: request {request} has attempts {numbers:?}")
        });
        a.check(numbers.len() as u64 <= max_attempts, || {
            format!(
                "retry: request {request} made {} attempts of {max_attempts}",
                numbers.len()
            )
        });
        for pair in attempts.windows(2) {
            let (last, next) = (pair[0], pair[1]);
            a.check(retryable(last), || {
                format!(
                    "retry: request {request} attempt {} ({}) was retried",
                    last.attempt, last.outcome
                )
            });
            if let Some(retry) = &spec.retry {
                let backoff_ns = (retry.backoff_ns as f64
                    * retry.multiplier.powi(last.attempt as i32 - 1))
                .round() as u64;
                a.check(next.arrival_ns == last.response_ns + backoff_ns, || {
                    format!(
                        "retry: request {request} attempt {} sent {} ns after attempt {}'s answer; backoff {backoff_ns} ns",
                        next.attempt,
                        next.arrival_ns as i128 - last.response_ns as i128,
                        last.attempt
                    )
                });
            }
            a.check(next.client == last.client, || {
                format!("retry: request {request} changed client")
            });
        }
        let last = attempts[attempts.len() - 1];
        a.check(
            last.outcome == "completed" || !retryable(last) || last.attempt == max_attempts,
            || {
                format!(
                    "retry: request {request} gave up after attempt {} ({})",
                    last.attempt, last.outcome
                )
            },
        );
        if spec.closed.is_none() {
            let sent = trace.arrival_ns[request as usize];
            a.check(
                attempts[0].arrival_ns == sent && !present(attempts[0].client),
                || {
                    format!(
                        "load: request {request} sent at {} ns, the trace says {sent} ns",
                        attempts[0].arrival_ns
                    )
                },
            );
        }
        for r in &attempts {
            let (input, output) = sizes_seen(spec, trace, r);
            a.check(r.input_tokens == input && r.output_tokens == output, || {
                format!(
                    "accounting: request {request} attempt {} has {} and {} tokens, its row \
                     and pool's limits {input} and {output}",
                    r.attempt, r.input_tokens, r.output_tokens
                )
            });
        }
    }

    // Closed loop: clients, their think time, requests in flight.
    if let Some((concurrency, think_ns)) = spec.closed {
        let mut by_client: BTreeMap<u64, Vec<(u64, u64, u64)>> = BTreeMap::new();
        let mut spans = Vec::new();
        let mut first_sends = Vec::new();
        for (&request, attempts) in &by_request {
            let start = attempts.iter().map(|r| r.arrival_ns).min().unwrap_or(0);
            let end = attempts.iter().map(|r| r.response_ns).max().unwrap_or(0);
            spans.push((start, end));
            first_sends.push(start);
            by_client
                .entry(attempts[0].client)
                .or_default()
                .push((start, end, request));
        }
        a.check(
            by_client.keys().all(|&c| c < u64::from(concurrency)),
            || {
                format!(
                    "load: clients {:?} of a concurrency of {concurrency}",
                    by_client.keys().collect::<Vec<_>>()
                )
            },
        );
        a.check(first_sends.windows(2).all(|w| w[0] <= w[1]), || {
            "load: a closed loop sent trace rows out of order".to_string()
        });
        for (client, requests) in &mut by_client {
            requests.sort_unstable();
            for w in requests.windows(2) {
                a.check(w[1].0 >= w[0].1 + think_ns, || {
                    format!(
                        "load: client {client} sent request {} at {} ns, request {} answered at {} ns, think time {think_ns} ns",
                        w[1].2, w[1].0, w[0].2, w[0].1
                    )
                });
            }
        }
        let (peak, at) = peak_overlap(spans.into_iter());
        a.check(peak <= concurrency as usize, || {
            format!(
                "load: {peak} requests in flight at {at} ns with a concurrency of {concurrency}"
            )
        });
    }

    // Gateway limits.
    let took_token = |r: &&Rec| {
        !matches!(
            r.reject_reason.as_deref(),
            Some("rate_limited" | "max_in_flight")
        )
    };
    if let Some(limit) = spec.max_in_flight {
        let (peak, at) = peak_overlap(records.iter().filter(took_token).map(|r| {
            let released = if present(r.postprocessed_ns) {
                r.postprocessed_ns
            } else {
                r.response_ns
            };
            (r.gateway_ns, released)
        }));
        a.check(peak <= limit as usize, || {
            format!("gateway: {peak} admitted requests in flight at {at} ns, max_in_flight {limit}")
        });
    }
    if let Some((rate, burst)) = spec.rate_limit {
        let mut admitted: Vec<u64> = records
            .iter()
            .filter(took_token)
            .map(|r| r.gateway_ns)
            .collect();
        admitted.sort_unstable();
        // Admissions i..=j take j - i + 1 tokens: at most burst + rate * (t_j - t_i).
        let mut lowest = f64::INFINITY;
        for (j, &t) in admitted.iter().enumerate() {
            let key = j as f64 - rate * t as f64 * 1e-9;
            lowest = lowest.min(key);
            a.check(key - lowest + 1.0 <= f64::from(burst) + 1e-6, || {
                format!(
                    "gateway: {} admissions up to {t} ns beat a bucket of {burst} at {rate} rps",
                    j + 1
                )
            });
        }
    }

    // Queues: occupancy and bounds.
    for (p, pool) in spec.pools.iter().enumerate() {
        if pool.max_queue_size == 0 {
            continue;
        }
        let servers = pool.instances + pool.standby;
        for instance in 0..u64::from(servers) {
            let (peak, at) = peak_overlap(
                records
                    .iter()
                    .filter(|r| {
                        r.pool.as_deref() == Some(pool.name.as_str())
                            && r.instance == instance
                            && present(r.queued_ns)
                    })
                    .map(|r| {
                        let left = if present(r.batch_formed_ns) {
                            r.batch_formed_ns
                        } else {
                            r.response_ns
                        };
                        (r.queued_ns, left)
                    }),
            );
            a.check(peak <= pool.max_queue_size as usize, || {
                format!(
                    "queue: pool {p} instance {instance} held {peak} at {at} ns, max_queue_size {}",
                    pool.max_queue_size
                )
            });
        }
    }

    // Batches of the dynamic batchers.
    let mut batches: BTreeMap<u64, Vec<&Rec>> = BTreeMap::new();
    for r in records.iter().filter(|r| present(r.batch_id)) {
        batches.entry(r.batch_id).or_default().push(r);
    }
    let mut size_counts: Vec<u64> = vec![0];
    let mut per_model_instance: BTreeMap<ModelInstanceKey, Vec<BatchRun>> = BTreeMap::new();
    for (&batch, members) in &batches {
        let first = members[0];
        let pool = first
            .pool
            .as_deref()
            .and_then(|p| pool_index.get(p))
            .map(|&i| &spec.pools[i]);
        let Some(Batching::Dynamic(d)) = pool.map(|p| &p.batching) else {
            a.check(false, || {
                format!("batch: batch {batch} outside a dynamic pool")
            });
            continue;
        };
        let size = members.len() as u64;
        a.check(members.iter().all(|r| r.batch_size == size), || {
            format!(
                "batch: batch {batch} has {size} records, batch_size {}",
                first.batch_size
            )
        });
        a.check(size >= 1 && size <= u64::from(d.max_batch_size), || {
            format!(
                "batch: batch {batch} of {size} requests, max_batch_size {}",
                d.max_batch_size
            )
        });
        a.check(
            members.iter().all(|r| {
                (
                    &r.pool,
                    r.instance,
                    r.model_instance,
                    r.batch_formed_ns,
                    r.exec_start_ns,
                    r.exec_end_ns,
                ) == (
                    &first.pool,
                    first.instance,
                    first.model_instance,
                    first.batch_formed_ns,
                    first.exec_start_ns,
                    first.exec_end_ns,
                )
            }),
            || format!("batch: members of batch {batch} disagree on where or when it ran"),
        );
        let max_input = members.iter().map(|r| r.input_tokens).max().unwrap_or(0);
        if let Some(exact_ns) = d.service.exact_ns(size, max_input) {
            let took_ns = first.exec_end_ns.wrapping_sub(first.exec_start_ns);
            a.check(took_ns == exact_ns, || {
                format!("batch: batch {batch} of {size} (longest input {max_input}) ran {took_ns} ns, the model says {exact_ns} ns")
            });
        }
        if size_counts.len() <= size as usize {
            size_counts.resize(size as usize + 1, 0);
        }
        size_counts[size as usize] += 1;
        per_model_instance
            .entry((
                first.pool.clone().unwrap_or_default(),
                first.instance,
                first.model_instance,
            ))
            .or_default()
            // The model instance is held from the batch's formation (its dispatch latency) to its
            // release; a batch that skipped the dispatch latency must have been taken at the
            // release of the one before.
            .push((
                first.exec_start_ns,
                first.batch_formed_ns,
                first.exec_end_ns,
                first.exec_end_ns.saturating_add(d.release_ns(size)),
                batch,
                first.exec_start_ns != d.compute_start_ns(first.batch_formed_ns, false),
            ));
    }
    for ((pool, instance, mi), runs) in &mut per_model_instance {
        runs.sort_unstable();
        let Some(Batching::Dynamic(d)) = pool_index
            .get(pool.as_str())
            .map(|&i| &spec.pools[i].batching)
        else {
            continue;
        };
        if let Some(&(_, _, _, _, batch, true)) = runs.first() {
            a.check(false, || {
                format!(
                    "batch: batch {batch}, the first on pool {pool} instance {instance} model instance {mi}, skipped the dispatch latency"
                )
            });
        }
        for w in runs.windows(2) {
            let ((_, _, end, release, before, _), (start, formed, _, _, batch, taken)) =
                (w[0], w[1]);
            a.check(start >= release && formed >= end, || {
                format!(
                    "batch: batches {before} and {batch} overlap on pool {pool} instance {instance} model instance {mi}"
                )
            });
            a.check(
                !taken || ((end..=release).contains(&formed) && start == d.resume_ns(release)),
                || {
                    format!(
                        "batch: batch {batch} formed at {formed} ns started at {start} ns: neither after the dispatch latency nor at the release of batch {before} (compute end {end} ns, release {release} ns) on pool {pool} instance {instance} model instance {mi}"
                    )
                },
            );
        }
    }

    // summary.json against the records.
    let counts = &summary["requests"];
    let count = |pred: &dyn Fn(&Rec) -> bool| records.iter().filter(|r| pred(r)).count() as u64;
    let expect = [
        ("total", records.len() as u64),
        ("completed", count(&|r| r.outcome == "completed")),
        ("cache_hits", count(&|r| r.cache_hit)),
        ("rejected", count(&|r| r.outcome == "rejected")),
        ("timed_out", count(&|r| r.outcome == "timed_out")),
        ("retries", count(&|r| r.attempt > 1)),
        (
            "truncated_input",
            count(&|r| {
                sizes_seen(spec, trace, r).0 < u64::from(trace.input_tokens[r.request as usize])
            }),
        ),
        (
            "truncated_output",
            count(&|r| {
                sizes_seen(spec, trace, r).1 < u64::from(trace.output_tokens[r.request as usize])
            }),
        ),
    ];
    for (key, value) in expect {
        // Counts of none may be left out.
        let written = counts[key].as_u64().or((value == 0).then_some(0));
        a.check(written == Some(value), || {
            format!(
                "summary: requests.{key} is {}, the records count {value}",
                counts[key]
            )
        });
    }
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for r in records {
        if let Some(reason) = &r.reject_reason {
            *reasons.entry(reason.clone()).or_default() += 1;
        }
    }
    let summary_reasons: BTreeMap<String, u64> = counts["rejected_by_reason"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    a.check(summary_reasons == reasons, || {
        format!("summary: rejected_by_reason {summary_reasons:?}, the records {reasons:?}")
    });
    a.check(
        spec.pools
            .iter()
            .any(|p| p.timeout_ns.is_some() && !p.timeout_delay)
            || counts["timed_out"].as_u64() == Some(0),
        || "timeout: requests timed out without a rejecting timeout".to_string(),
    );
    let e2e = &summary["latency_ms"]["end_to_end"];
    // The latencies describe the requests sent in the run's steady window (its first attempt's
    // send), when the summary states one; all of them otherwise.
    let window_ns = summary["steady_window"].as_object().map(|w| {
        let ns = |key: &str| (w[key].as_f64().unwrap_or(f64::NAN) * 1e9).round() as u64;
        ns("from_s")..ns("to_s")
    });
    let first_sends: BTreeMap<u64, u64> = records
        .iter()
        .filter(|r| r.attempt == 1)
        .map(|r| (r.request, r.arrival_ns))
        .collect();
    let measured = |r: &Rec| {
        window_ns.as_ref().is_none_or(|window| {
            first_sends
                .get(&r.request)
                .is_some_and(|sent| window.contains(sent))
        })
    };
    let completed: Vec<&Rec> = records
        .iter()
        .filter(|r| r.outcome == "completed" && measured(r))
        .collect();
    a.check(
        e2e["count"].as_u64().unwrap_or(0) == completed.len() as u64,
        || {
            format!(
                "summary: end_to_end.count {} for {} completions",
                e2e["count"],
                completed.len()
            )
        },
    );
    if let Some(max_ns) = completed.iter().map(|r| r.latency_ns).max() {
        let max_ms = e2e["max_ms"].as_f64().unwrap_or(f64::NAN);
        a.check(
            (max_ms - max_ns as f64 / 1e6).abs() <= 1e-9 * max_ms.abs().max(1.0),
            || format!("summary: end_to_end.max_ms {max_ms}, the records {max_ns} ns"),
        );
    }
    if let Some(last_ns) = records.iter().map(|r| r.response_ns).max() {
        let end_s = summary["end_s"].as_f64().unwrap_or(f64::NAN);
        a.check(
            (end_s - last_ns as f64 / 1e9).abs() <= 1e-9 * end_s.max(1.0),
            || format!("summary: end_s {end_s}, the last response at {last_ns} ns"),
        );
    }
    let continuous_pools: Vec<&Pool> = spec
        .pools
        .iter()
        .filter(|p| p.continuous().is_some())
        .collect();
    let summary_sizes: Vec<u64> = summary["batch_size_counts"]
        .as_array()
        .map(|v| v.iter().map(|c| c.as_u64().unwrap_or(0)).collect())
        .unwrap_or_default();
    if continuous_pools.is_empty() {
        a.check(summary_sizes == size_counts, || {
            format!("summary: batch_size_counts {summary_sizes:?}, the records {size_counts:?}")
        });
        a.check(
            summary["batches"].as_u64() == Some(batches.len() as u64),
            || {
                format!(
                    "summary: batches {}, the records {}",
                    summary["batches"],
                    batches.len()
                )
            },
        );
        for u in summary["utilization"].as_array().into_iter().flatten() {
            let key = (
                u["pool"].as_str().unwrap_or("").to_string(),
                u["instance"].as_u64().unwrap_or(0),
                u["model_instance"].as_u64().unwrap_or(0),
            );
            let from_records = per_model_instance.get(&key).map_or(0, Vec::len) as u64;
            a.check(u["batches"].as_u64() == Some(from_records), || {
                format!(
                    "summary: utilization of {key:?} counts {} batches, the records {from_records}",
                    u["batches"]
                )
            });
        }
    } else {
        let largest = spec
            .pools
            .iter()
            .map(|p| match &p.batching {
                Batching::Dynamic(d) => d.max_batch_size,
                Batching::Continuous(c) => c.max_num_seqs,
            })
            .max()
            .unwrap_or(1) as usize;
        a.check(summary_sizes.len() <= largest + 1, || {
            format!(
                "llm: a step or batch of {} sequences, the limit is {largest}",
                summary_sizes.len() - 1
            )
        });
        let llm = &summary["llm"];
        let tokens: u64 = records
            .iter()
            .filter(|r| r.outcome == "completed" && present(r.first_token_ns))
            .map(|r| r.output_tokens.max(1))
            .sum();
        a.check(llm["output_tokens"].as_u64() == Some(tokens), || {
            format!(
                "llm: summary output_tokens {}, the completed requests {tokens}",
                llm["output_tokens"]
            )
        });
        let budget = continuous_pools
            .iter()
            .filter_map(|p| p.continuous())
            .map(|c| c.max_num_batched_tokens)
            .max()
            .unwrap_or(0);
        let mean_tokens = llm["mean_tokens_per_step"].as_f64().unwrap_or(0.0);
        a.check(mean_tokens <= f64::from(budget) + 1e-9, || {
            format!("llm: {mean_tokens} tokens per step on average, the budget is {budget}")
        });
    }
    a.broken
}

// ---------------------------------------------------------------------------------------------
// Running cases.

fn run_simulate(case_dir: &Path, out: &str, seed: u64, map: &str) -> Result<(), String> {
    let output = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args([
            "simulate",
            "--scenario",
            "scenario.toml",
            "--replay-inputs",
            "replay.toml",
            "trace.csv",
            "--map",
            map,
            "--seed",
            &seed.to_string(),
            "-o",
            out,
        ])
        .current_dir(case_dir)
        .env_remove("ORT_DYLIB_PATH")
        .output()
        .map_err(|e| format!("capsim does not run: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "capsim simulate failed ({}):\n{}",
            output.status,
            common::text(&output)
        ))
    }
}

/// What the cases did, summed (to see that the swarm reaches every outcome).
type Tally = BTreeMap<String, u64>;

fn tally(records: &[Rec], summary: &serde_json::Value) -> Tally {
    let mut t = Tally::new();
    for r in records {
        let outcome = match &r.reject_reason {
            Some(reason) => format!("rejected:{reason}"),
            None => r.outcome.clone(),
        };
        *t.entry(outcome).or_default() += 1;
        *t.entry("attempts".to_string()).or_default() += 1;
        *t.entry("retries".to_string()).or_default() += u64::from(r.attempt > 1);
        *t.entry("cache_hits".to_string()).or_default() += u64::from(r.cache_hit);
    }
    *t.entry("llm_preemptions".to_string()).or_default() +=
        summary["llm"]["preemptions"].as_u64().unwrap_or(0);
    *t.entry("llm_cached_prompt_tokens".to_string()).or_default() +=
        summary["llm"]["cached_prompt_tokens"].as_u64().unwrap_or(0);
    t
}

fn run_case(seed: u64, dir: &Path) -> Result<Tally, String> {
    let case = draw_case(seed);
    let case_dir = dir.join(format!("case-{seed}"));
    std::fs::create_dir_all(&case_dir).expect("case directory");
    std::fs::write(case_dir.join("scenario.toml"), &case.scenario_toml).expect("write scenario");
    std::fs::write(case_dir.join("replay.toml"), &case.replay_toml).expect("write replay inputs");
    std::fs::write(case_dir.join("trace.csv"), &case.trace_csv).expect("write trace");
    let reproduce = |why: String| {
        format!(
            "seed {seed}: {why}\nreproduce: cd {} && capsim simulate --scenario scenario.toml \
             --replay-inputs replay.toml trace.csv --map {} --seed {seed} -o out (or \
             CAPSIM_SWARM_SEEDS={seed} CAPSIM_SWARM_DIR=DIR cargo test --release --test swarm)\n\
             scenario.toml:\n{}replay.toml:\n{}",
            case_dir.display(),
            case.map,
            case.scenario_toml,
            case.replay_toml
        )
    };
    let result = (|| {
        run_simulate(&case_dir, "out", seed, &case.map)?;
        let out = case_dir.join("out");
        let records = read_requests(&out.join("requests.parquet"))?;
        let summary = common::summary(&out);
        let broken = audit(&case, &records, &summary);
        let counts = tally(&records, &summary);
        if !broken.is_empty() {
            return Err(format!(
                "{} rule(s) broken:\n  {}",
                broken.len(),
                broken.join("\n  ")
            ));
        }
        run_simulate(&case_dir, "again", seed, &case.map)?;
        for file in ["summary.json", "requests.parquet", "timeseries.parquet"] {
            let first = std::fs::read(out.join(file)).map_err(|e| e.to_string())?;
            let second =
                std::fs::read(case_dir.join("again").join(file)).map_err(|e| e.to_string())?;
            if first != second {
                return Err(format!(
                    "determinism: {file} differs on a rerun with seed {seed}"
                ));
            }
        }
        Ok(counts)
    })();
    match result {
        Ok(counts) => {
            if std::env::var_os("CAPSIM_SWARM_DIR").is_none() {
                let _ = std::fs::remove_dir_all(&case_dir);
            }
            Ok(counts)
        }
        Err(why) => Err(reproduce(why)),
    }
}

/// The first seed of this run: `CAPSIM_SWARM_FIRST_SEED`, else the commit's hash (48 bits),
/// else a fixed seed.
fn first_seed() -> u64 {
    if let Ok(v) = std::env::var("CAPSIM_SWARM_FIRST_SEED") {
        return v
            .parse()
            .unwrap_or_else(|_| panic!("CAPSIM_SWARM_FIRST_SEED={v:?} is not a whole number"));
    }
    Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| u64::from_str_radix(String::from_utf8_lossy(&o.stdout).get(..12)?, 16).ok())
        .unwrap_or(FALLBACK_FIRST_SEED)
}

#[test]
fn swarm_of_realistic_scenarios_obeys_the_serving_rules() {
    let seeds: Vec<u64> = match std::env::var("CAPSIM_SWARM_SEEDS") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .expect("CAPSIM_SWARM_SEEDS: whole numbers, comma-separated")
            })
            .collect(),
        Err(_) => {
            let cases: u64 = std::env::var("CAPSIM_SWARM_CASES")
                .map(|v| v.parse().expect("CAPSIM_SWARM_CASES: a whole number"))
                .unwrap_or(1_000);
            let first = first_seed();
            (first..first + cases).collect()
        }
    };
    let temp = tempfile::tempdir().expect("tempdir");
    let dir: PathBuf =
        std::env::var_os("CAPSIM_SWARM_DIR").map_or(temp.path().to_path_buf(), |d| {
            std::fs::create_dir_all(&d).expect("create CAPSIM_SWARM_DIR");
            PathBuf::from(d)
        });
    let started = Instant::now();
    let results: Vec<Result<Tally, String>> =
        common::on_workers(&seeds, |seed| run_case(seed, &dir));
    let mut total = Tally::new();
    let mut failures = Vec::new();
    for result in results {
        match result {
            Ok(counts) => {
                for (key, n) in counts {
                    *total.entry(key).or_default() += n;
                }
            }
            Err(why) => failures.push(why),
        }
    }
    let failed_seeds: HashSet<&str> = failures
        .iter()
        .filter_map(|f| f.strip_prefix("seed ")?.split(':').next())
        .collect();
    eprintln!(
        "{} swarm cases (seeds {}..={}) in {:.1} s, {} failed{}",
        seeds.len(),
        seeds.first().copied().unwrap_or(0),
        seeds.last().copied().unwrap_or(0),
        started.elapsed().as_secs_f64(),
        failures.len(),
        if failed_seeds.is_empty() {
            String::new()
        } else {
            format!(
                " (CAPSIM_SWARM_SEEDS={})",
                failed_seeds.into_iter().collect::<Vec<_>>().join(",")
            )
        }
    );
    eprintln!("over the passing cases: {total:?}");
    if let Ok(path) = std::env::var("CAPSIM_SWARM_FAILURES") {
        std::fs::write(&path, failures.join("\n\n")).expect("write the failures");
    }
    if !failures.is_empty() && std::env::var_os("CAPSIM_SWARM_DIR").is_none() {
        // The failing cases' files stay for a look (passing ones were removed).
        let kept = temp.keep();
        eprintln!("failing cases kept under {}", kept.display());
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed; the first:\n{}",
        failures.len(),
        seeds.len(),
        failures[0]
    );
}
