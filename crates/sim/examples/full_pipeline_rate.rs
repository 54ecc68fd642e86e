//! Wall time of a 1 M-request Poisson trace (6000 rps, inputs uniform in 16..512 tokens) through
//! the full-pipeline benchmark scenario (`crates/sim/benches/full-pipeline.toml`), summary only.
//! Prints the median of several runs, one thread.
//!
//! `cargo run --release -p capsim-sim --example full_pipeline_rate -- [REQUESTS] [REPEATS] [SCENARIO]`;
//! SCENARIO is a scenario file to run instead, e.g. `crates/sim/benches/gateway-batcher.toml`.

use std::time::Instant;

use capsim_sim::build::{BuiltScenario, Profiles, build};
use capsim_sim::rng::{Component, stream};
use capsim_sim::{RunOptions, Scenario, simulate};
use capsim_trace::{Columns, Trace};
use rand::RngExt;
use rand_distr::Distribution;

/// `scenario` with its models built (it names no profile file).
fn built(scenario: &Scenario) -> BuiltScenario {
    build(scenario, &mut Profiles::default()).expect("the scenario builds")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let repeats: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5).max(1);
    let scenario_text = match args.next() {
        Some(path) => std::fs::read_to_string(&path).expect("readable scenario file"),
        None => include_str!("../benches/full-pipeline.toml").to_string(),
    };
    // The same trace as the criterion bench's `full_pipeline_1M_requests`.
    let mut rng = stream(2, Component::Client, 999);
    let mut t_ns = 0.0f64;
    let mut arrival_ns = Vec::with_capacity(n);
    let mut input_tokens = Vec::with_capacity(n);
    for _ in 0..n {
        let e: f64 = rand_distr::Exp1.sample(&mut rng);
        t_ns += e * 1e9 / 6000.0;
        arrival_ns.push(t_ns.round() as u64);
        input_tokens.push(rng.random_range(16..512));
    }
    let trace = Trace::from_columns(Columns {
        arrival_ns,
        input_tokens,
        ..Columns::default()
    })
    .expect("sorted arrivals");
    let scenario = Scenario::from_toml_str(&scenario_text).expect("valid scenario");
    let mut secs = Vec::with_capacity(repeats);
    let mut p99_ms = 0.0;
    for _ in 0..repeats {
        let options = RunOptions {
            seed: 1,
            ..RunOptions::default()
        };
        let start = Instant::now();
        let summary = simulate(&built(&scenario), &trace, &options).expect("runs");
        secs.push(start.elapsed().as_secs_f64());
        p99_ms = summary.latency_ms["end_to_end"].p99_ms;
    }
    secs.sort_by(f64::total_cmp);
    println!(
        "capsim full pipeline: {n} requests, median {:.3} s over {repeats} runs (e2e p99 {p99_ms} ms)",
        secs[secs.len() / 2]
    );
}
