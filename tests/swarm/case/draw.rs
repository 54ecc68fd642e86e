//! The draws: a pool's batcher, a pool, the whole scenario, with whole features on or off by
//! skewed weights.

use rand::RngExt;
use rand::rngs::StdRng;

use super::{Batching, Continuous, Dynamic, Pool, Retry, Service, Spec};

/// 10 to the power of a uniform draw in `[low, high)`.
pub fn log_uniform(rng: &mut StdRng, low: f64, high: f64) -> f64 {
    10f64.powf(rng.random_range(low..high))
}

/// A duration from `low_ns` to `high_ns`, log-uniform.
pub fn duration(rng: &mut StdRng, low_ns: f64, high_ns: f64) -> u64 {
    log_uniform(rng, low_ns.log10(), high_ns.log10()).round() as u64
}

/// A log-normal size with the given median, at least `min`, at most `max`.
pub fn size(rng: &mut StdRng, median: f64, sigma: f64, min: u32, max: u32) -> u32 {
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
        host: (!continuous && rng.random_bool(0.2)).then(|| {
            (
                rng.random_range(1..=4),
                duration(rng, 1e3, 1e6),
                if rng.random_bool(0.5) {
                    duration(rng, 1.0, 2e3)
                } else {
                    0
                },
                if rng.random_bool(0.7) {
                    duration(rng, 1e3, 5e5)
                } else {
                    0
                },
            )
        }),
    }
}

pub fn draw_spec(rng: &mut StdRng) -> Spec {
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
