//! Engine speed: customers per second on M/M/4 at utilization 0.8, and a 1 M-request trace
//! through two pipelines: the gateway, 4 instances and their dynamic batchers
//! (`gateway-batcher.toml`), and the whole serving path, which adds lognormal network paths both
//! ways, pre-processing workers and post-processing (`full-pipeline.toml`).
//!
//! `mm4_bare_heap_reference` times a bare binary-heap event loop of the same M/M/4
//! (`reference/bare_heap.rs`): the engine's rate over it is the cost of the serving model's
//! bookkeeping, a ratio that holds on any machine.
//!
//! Run with `cargo bench -p capsim-sim --bench engine`. `scripts/bench_vs_simpy.py` runs the
//! same M/M/4 in SimPy and prints the ratio; `cargo run --release -p capsim-sim --example
//! full_pipeline_rate` repeats the pipelines outside criterion; `scripts/ab_engine.py` compares
//! two builds in alternation (shared machines change speed).

use std::hint::black_box;
use std::time::Duration;

use capsim_sim::build::{BuiltScenario, Profiles, build};
use capsim_sim::rng::{Component, stream};
use capsim_sim::{RunOptions, Scenario, simulate};
use capsim_trace::{Columns, Trace};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::RngExt;
use rand_distr::Distribution;

mod reference {
    pub mod bare_heap;
}

/// `scenario` with its models built (it names no profile file).
fn built(scenario: &Scenario) -> BuiltScenario {
    build(scenario, &mut Profiles::default()).expect("the scenario builds")
}

/// `n` Poisson arrivals at `rate_rps`, input sizes uniform in 16..512 tokens.
fn poisson_trace(n: usize, rate_rps: f64, seed: u64) -> Trace {
    let mut rng = stream(seed, Component::Client, 999);
    let mut t_ns = 0.0f64;
    let mut arrival_ns = Vec::with_capacity(n);
    let mut input_tokens = Vec::with_capacity(n);
    for _ in 0..n {
        let e: f64 = rand_distr::Exp1.sample(&mut rng);
        t_ns += e * 1e9 / rate_rps;
        arrival_ns.push(t_ns.round() as u64);
        input_tokens.push(rng.random_range(16..512));
    }
    Trace::from_columns(Columns {
        arrival_ns,
        input_tokens,
        ..Columns::default()
    })
    .expect("sorted arrivals")
}

const MM4: &str =
    "[execution]\ninstance_count = 4\n[service]\nkind = \"exponential\"\nmean = \"1ms\"\n";

/// Gateway with admission control, 4 instances behind least-outstanding balancing, each with a
/// dynamic batcher.
const GATEWAY_BATCHER: &str = include_str!("gateway-batcher.toml");

/// [`GATEWAY_BATCHER`] plus network paths and pre- and post-processing.
const FULL_PIPELINE: &str = include_str!("full-pipeline.toml");

fn engine(c: &mut Criterion) {
    let n = 1_000_000;
    let mm4_trace = poisson_trace(n, 3200.0, 1);
    let mm4 = built(&Scenario::from_toml_str(MM4).expect("valid scenario"));
    let options = RunOptions {
        seed: 1,
        ..RunOptions::default()
    };
    let mut group = c.benchmark_group("engine");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Elements(n as u64));
    group.bench_function("mm4_rho0.8_1M_customers", |b| {
        b.iter(|| black_box(simulate(&mm4, &mm4_trace, &options).expect("runs")))
    });
    group.bench_function("mm4_bare_heap_reference", |b| {
        b.iter(|| {
            let mut rng = stream(1, Component::Execution, 0);
            black_box(reference::bare_heap::mmc_mean_wait_ns(
                mm4_trace.arrival_ns(),
                4,
                1e6,
                &mut rng,
            ))
        })
    });
    // A batch of 16 with inputs up to 512 tokens takes about 2 + 3.2 + 16 * 480 * 0.00025 = 7.1 ms,
    // so 4 instances serve about 9000 rps: 6000 rps is a utilization near 0.67.
    let full_trace = poisson_trace(n, 6000.0, 2);
    let gateway_batcher = built(&Scenario::from_toml_str(GATEWAY_BATCHER).expect("valid scenario"));
    group.bench_function("gateway_batcher_1M_requests", |b| {
        b.iter(|| black_box(simulate(&gateway_batcher, &full_trace, &options).expect("runs")))
    });
    let full = built(&Scenario::from_toml_str(FULL_PIPELINE).expect("valid scenario"));
    group.bench_function("full_pipeline_1M_requests", |b| {
        b.iter(|| black_box(simulate(&full, &full_trace, &options).expect("runs")))
    });
    group.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
