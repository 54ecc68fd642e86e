//! The drawn case: a random but valid and realistic scenario (`Spec`), its trace, and the files
//! `capsim simulate` reads (`scenario.toml`, `replay.toml`, `trace.csv` and its `--map`).

mod draw;
mod scenario;
mod trace;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

#[derive(Debug, Clone)]
pub enum Service {
    Constant { time_ns: u64 },
    Affine { a_ns: u64, b_ns: u64, c_ns: u64 },
    Exponential { mean_ns: u64 },
}

impl Service {
    /// The exact batch time of a deterministic model, `None` for a random one.
    pub fn exact_ns(&self, size: u64, max_input_tokens: u64) -> Option<u64> {
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

    pub fn mean_ns(&self, size: u64, input_tokens: u64) -> f64 {
        match *self {
            Service::Exponential { mean_ns } => mean_ns as f64,
            _ => self.exact_ns(size, input_tokens).unwrap_or(0) as f64,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Dynamic {
    pub max_batch_size: u32,
    pub preferred: Vec<u32>,
    pub max_queue_delay_ns: u64,
    pub prefetch_off: bool,
    pub dispatch_latency_ns: u64,
    pub release_latency_ns: u64,
    pub release_latency_per_request_ns: u64,
    /// The replay input `pauses` (default pool only): sorted, disjoint `[from, to)` in ns.
    pub pauses: Vec<(u64, u64)>,
    pub service: Service,
}

impl Dynamic {
    /// When a batch formed at `formed_ns` starts computing: after the dispatch latency (none
    /// `at_release`, taken by its model instance as it was released), or at the end of the
    /// pause that holds that moment.
    pub fn compute_start_ns(&self, formed_ns: u64, at_release: bool) -> u64 {
        let dispatch_ns = if at_release {
            0
        } else {
            self.dispatch_latency_ns
        };
        self.resume_ns(formed_ns.saturating_add(dispatch_ns))
    }

    /// `t`, or the end of the pause that holds it.
    pub fn resume_ns(&self, t: u64) -> u64 {
        self.pauses
            .iter()
            .find(|&&(from, to)| from <= t && t < to)
            .map_or(t, |&(_, to)| to)
    }

    /// How long a model instance stays held after computing a batch of `size`.
    pub fn release_ns(&self, size: u64) -> u64 {
        self.release_latency_ns
            .saturating_add(self.release_latency_per_request_ns.saturating_mul(size))
    }

    /// Whether a batcher (`max_batch_size` above 1) forming a batch at `formed_ns` broke a
    /// pause: it forms nothing inside one.
    pub fn formed_in_pause(&self, formed_ns: u64) -> bool {
        self.max_batch_size > 1
            && self
                .pauses
                .iter()
                .any(|&(from, to)| from <= formed_ns && formed_ns < to)
    }
}

#[derive(Debug, Clone)]
pub struct Continuous {
    pub max_num_seqs: u32,
    pub max_num_batched_tokens: u32,
    pub chunked_prefill: bool,
    pub block_size: u32,
    pub num_gpu_blocks: u32,
    pub prefix_caching: bool,
    pub prefix_block_tokens: u32,
    pub step_overhead_ns: u64,
    pub step_overhead_per_seq_ns: u64,
    pub base_ns: u64,
    pub per_prefill_token_ns: u64,
    pub per_decode_seq_ns: u64,
    pub per_kv_token_ns: u64,
    pub schedule_ahead_steps: u32,
}

#[derive(Debug, Clone)]
pub enum Batching {
    Dynamic(Dynamic),
    Continuous(Continuous),
}

#[derive(Debug, Clone)]
pub struct Pool {
    pub name: String,
    pub models: Vec<String>,
    pub classes: Vec<u32>,
    pub instances: u32,
    pub standby: u32,
    pub activate_at_outstanding: u32,
    pub gpus: u32,
    pub instance_count: u32,
    pub cold_start_ns: u64,
    /// Workers, base, per input token.
    pub preprocess: Option<(u32, u64, u64)>,
    pub priority_levels: u32,
    pub max_queue_size: u32,
    /// The model's input and output limits (`max_input_tokens`, `max_output_tokens`).
    pub max_input_tokens: Option<u32>,
    pub max_output_tokens: Option<u32>,
    pub timeout_ns: Option<u64>,
    pub timeout_delay: bool,
    pub batching: Batching,
    /// Base, per output token.
    pub postprocess: Option<(u64, u64)>,
    /// `[host]` (dynamic pools only): cores, request, per input token, response. Its cores run
    /// the pre-processing (written without `workers`) and the post-processing.
    pub host: Option<(u32, u64, u64, u64)>,
}

impl Pool {
    pub fn model_instances(&self) -> u32 {
        self.gpus * self.instance_count
    }

    pub fn continuous(&self) -> Option<&Continuous> {
        match &self.batching {
            Batching::Continuous(c) => Some(c),
            Batching::Dynamic(_) => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Retry {
    pub max_attempts: u32,
    pub backoff_ns: u64,
    pub multiplier: f64,
    pub on_rejected: bool,
    pub on_timed_out: bool,
}

#[derive(Debug, Clone)]
pub struct Spec {
    pub pools: Vec<Pool>,
    pub one_way_ns: u64,
    pub overhead_ns: u64,
    /// Rate (requests per second), burst.
    pub rate_limit: Option<(f64, u32)>,
    pub max_in_flight: Option<u32>,
    /// Hit probability, latency.
    pub cache: Option<(f64, u64)>,
    pub balancing: &'static str,
    pub retry: Option<Retry>,
    /// Concurrency, think time.
    pub closed: Option<(u32, u64)>,
}

#[derive(Debug, Clone, Default)]
pub struct TraceRows {
    pub arrival_ns: Vec<u64>,
    pub input_tokens: Vec<u32>,
    pub output_tokens: Vec<u32>,
    pub model: Option<Vec<String>>,
    pub class: Option<Vec<u32>>,
    pub prefix_blocks: Option<Vec<Vec<u64>>>,
}

pub struct Case {
    pub spec: Spec,
    pub trace: TraceRows,
    pub scenario_toml: String,
    /// The default pool's replay inputs (a replay-inputs file; may be empty).
    pub replay_toml: String,
    pub trace_csv: String,
    pub map: String,
}

pub fn draw_case(seed: u64) -> Case {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut spec = draw::draw_spec(&mut rng);
    let (trace, rate_rps) = trace::draw_trace(&mut rng, &spec);
    // A rate limit from half to three times the offered rate (or the clients' pace).
    if let Some((rate, burst)) = &mut spec.rate_limit {
        *rate = rate_rps * rng.random_range(0.5..3.0);
        if rng.random_bool(0.5) {
            *burst = (rate.floor() as u32).max(1);
        }
    }
    let scenario_toml = scenario::scenario_toml(&spec, seed);
    let replay_toml = scenario::replay_toml(&spec);
    let (trace_csv, map) = trace::trace_csv(&trace);
    Case {
        spec,
        trace,
        scenario_toml,
        replay_toml,
        trace_csv,
        map,
    }
}
