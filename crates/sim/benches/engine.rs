//! Engine speed: customers per second on M/M/4 at utilization 0.8, and a 1 M-request trace
//! through the full pipeline (network, gateway, 4 instances with pre-processing and a dynamic
//! batcher). Run with `cargo bench -p capsim-sim --bench engine`; compare the M/M/4 figure with
//! `scripts/simpy_mm4.py` (SimPy, the same model), which prints the ratio.

use std::hint::black_box;
use std::time::Duration;

use capsim_sim::rng::{Component, stream};
use capsim_sim::{RunOptions, Scenario, simulate};
use capsim_trace::{Columns, Trace};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::RngExt;
use rand_distr::Distribution;

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

/// Gateway with admission control, 4 instances behind least-outstanding balancing, each with
/// pre-processing workers and a dynamic batcher; utilization about 0.7.
pub const FULL_PIPELINE: &str = r#"
instances = 4
[network.latency]
kind = "lognormal"
median = "0.5ms"
p99 = "3ms"
[network]
bandwidth = "10Gbps"
request_bytes_per_input_token = 4
[gateway]
overhead = "50us"
max_in_flight = 4096
load_balancing = "least_outstanding"
[preprocess]
workers = 4
base = "100us"
per_input_token = "1us"
[batcher]
max_batch_size = 16
preferred_batch_size = [8, 16]
max_queue_delay = "2ms"
[service]
kind = "affine"
a = "2ms"
b = "0.2ms"
c = "1us"
[postprocess]
base = "50us"
"#;

fn engine(c: &mut Criterion) {
    let n = 1_000_000;
    let mm4_trace = poisson_trace(n, 3200.0, 1);
    let mm4 = Scenario::from_toml_str(MM4).expect("valid scenario");
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
    // 4 instances x ~ (16-request batches of ~2ms + 3.2ms + 8 * 0.25ms) → about 2.4k rps each.
    let full_trace = poisson_trace(n, 6000.0, 2);
    let full = Scenario::from_toml_str(FULL_PIPELINE).expect("valid scenario");
    group.bench_function("full_pipeline_1M_requests", |b| {
        b.iter(|| black_box(simulate(&full, &full_trace, &options).expect("runs")))
    });
    group.finish();
}

criterion_group!(benches, engine);
criterion_main!(benches);
