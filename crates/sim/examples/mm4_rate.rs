//! Customers per second of the engine on M/M/4 at utilization 0.8 (exponential 1 ms service,
//! 3200 arrivals/s), summary only. Prints the median of several runs, one thread, and the same
//! for a bare binary-heap event loop of the same model (`benches/reference/bare_heap.rs`) run in
//! alternation with it, with the median of the rounds' ratios.
//!
//! `cargo run --release -p capsim-sim --example mm4_rate -- [CUSTOMERS] [REPEATS]`; used by
//! `scripts/bench_vs_simpy.py`, which runs the same model in SimPy and prints the ratio.

use std::time::Instant;

#[path = "../benches/reference/bare_heap.rs"]
mod bare_heap;

use capsim_sim::build::{BuiltScenario, Profiles, build};
use capsim_sim::rng::{Component, stream};
use capsim_sim::{RunOptions, Scenario, simulate, theory};
use capsim_trace::{Columns, Trace};
use rand_distr::Distribution;

/// `scenario` with its models built (it names no profile file).
fn built(scenario: &Scenario) -> BuiltScenario {
    build(scenario, &mut Profiles::default()).expect("the scenario builds")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let customers: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let repeats: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5).max(1);
    let mut rng = stream(1, Component::Client, 999);
    let mut t_ns = 0.0f64;
    let arrival_ns: Vec<u64> = (0..customers)
        .map(|_| {
            let e: f64 = rand_distr::Exp1.sample(&mut rng);
            t_ns += e * 1e9 / 3200.0;
            t_ns.round() as u64
        })
        .collect();
    let trace = Trace::from_columns(Columns {
        arrival_ns,
        input_tokens: vec![1; customers],
        ..Columns::default()
    })
    .expect("sorted arrivals");
    let scenario = Scenario::from_toml_str(
        "[execution]\ninstance_count = 4\n[service]\nkind = \"exponential\"\nmean = \"1ms\"\n",
    )
    .expect("valid scenario");
    let mut rates = Vec::with_capacity(repeats);
    let mut bare_rates = Vec::with_capacity(repeats);
    let mut ratios = Vec::with_capacity(repeats);
    let (mut wait_ms, mut bare_wait_ms) = (0.0, 0.0);
    for seed in 0..repeats as u64 {
        let options = RunOptions {
            seed,
            ..RunOptions::default()
        };
        let start = Instant::now();
        let summary = simulate(&built(&scenario), &trace, &options).expect("runs");
        let rate = customers as f64 / start.elapsed().as_secs_f64();
        wait_ms = summary.latency_ms["queue"].mean_ms;
        let mut rng = stream(seed, Component::Execution, 0);
        let start = Instant::now();
        let wait_ns = bare_heap::mmc_mean_wait_ns(trace.arrival_ns(), 4, 1e6, &mut rng);
        let bare_rate = customers as f64 / start.elapsed().as_secs_f64();
        bare_wait_ms = wait_ns / 1e6;
        rates.push(rate);
        bare_rates.push(bare_rate);
        ratios.push(rate / bare_rate);
    }
    for v in [&mut rates, &mut bare_rates, &mut ratios] {
        v.sort_by(f64::total_cmp);
    }
    let theory_ms = theory::mmc_mean_wait_s(3200.0, 1000.0, 4).unwrap_or(f64::NAN) * 1e3;
    println!(
        "capsim M/M/4 rho 0.8: {customers} customers, median {:.0} customers/s over {repeats} runs \
         (mean wait {wait_ms:.4} ms, Erlang C {theory_ms:.4} ms)",
        rates[rates.len() / 2]
    );
    println!(
        "bare binary-heap loop, same model: median {:.0} customers/s (mean wait {bare_wait_ms:.4} \
         ms); capsim / bare: median {:.3} over {repeats} paired runs",
        bare_rates[bare_rates.len() / 2],
        ratios[ratios.len() / 2]
    );
    println!("capsim_customers_per_s {:.0}", rates[rates.len() / 2]);
    println!(
        "bare_heap_customers_per_s {:.0}",
        bare_rates[bare_rates.len() / 2]
    );
}
