//! Acceptance: the capacity search, driving the simulator, finds the analytic capacity of an
//! M/M/c queue under a waiting-time SLO (Erlang C inverted) within 2%.

use capsim_report::{Bracket, LoadKind, SearchOptions, Slo, Workload, search_capacity};
use capsim_sim::{Profiles, Scenario, Warmup, theory};
use capsim_trace::{Columns, Trace};

/// Poisson arrivals at `rate_rps`: exponential gaps by inversion of a fixed-seed SplitMix64
/// stream (the test needs no RNG crate of its own).
fn poisson_trace(requests: usize, rate_rps: f64, seed: u64) -> Trace {
    let mut state = seed;
    let mut next_uniform = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut t_ns = 0.0f64;
    let arrival_ns = (0..requests)
        .map(|_| {
            t_ns += -next_uniform().ln() * 1e9 / rate_rps;
            t_ns.round() as u64
        })
        .collect();
    Trace::from_columns(Columns {
        arrival_ns,
        input_tokens: vec![1; requests],
        ..Columns::default()
    })
    .expect("sorted arrivals")
}

/// The arrival rate at which the M/M/c mean wait equals `max_wait_s`, by bisection on the
/// closed form (the wait rises monotonically with the rate).
fn analytic_capacity_rps(service_rate_rps: f64, servers: u32, max_wait_s: f64) -> f64 {
    let (mut low, mut high) = (0.0, f64::from(servers) * service_rate_rps);
    for _ in 0..200 {
        let middle = 0.5 * (low + high);
        match theory::mmc_mean_wait_s(middle, service_rate_rps, servers) {
            Some(wait) if wait <= max_wait_s => low = middle,
            _ => high = middle,
        }
    }
    low
}

#[test]
fn mmc_capacity_search_matches_inverted_erlang_c() {
    const SERVERS: u32 = 4;
    const SERVICE_RATE_RPS: f64 = 1000.0;
    let scenario = Scenario::from_toml_str(
        "[execution]\ninstance_count = 4\n[service]\nkind = \"exponential\"\nmean = \"1ms\"\n",
    )
    .expect("valid M/M/4 scenario");
    let slo: Slo = "queue.mean<=1ms".parse().unwrap();
    let expected_rps = analytic_capacity_rps(SERVICE_RATE_RPS, SERVERS, 1e-3);

    for seed in [11, 12] {
        let trace = poisson_trace(300_000, 1000.0, seed);
        let workload = Workload::new(&trace, LoadKind::RateScale, Warmup::Count(5_000));
        let trace_rate_rps = workload.trace_rate_rps.expect("a Poisson trace has a rate");
        let options = SearchOptions {
            start_load: 1.0,
            min_load: 0.01,
            max_load: 10.0,
            ..SearchOptions::default()
        };
        let capacity = search_capacity(&options, |load| {
            workload
                .run(&scenario, &Profiles::default(), load, seed)
                .map(|run| run.outcome(&slo))
        })
        .expect("the search runs");
        assert_eq!(capacity.bracket, Bracket::Found);
        let found_rps = capacity.sustainable_load * trace_rate_rps;
        let error = (found_rps - expected_rps) / expected_rps;
        eprintln!(
            "seed {seed}: expected {expected_rps:.1} rps, found {found_rps:.1} rps ({error:+.4}), {} runs",
            capacity.probes.len()
        );
        assert!(
            error.abs() < 0.02,
            "seed {seed}: expected {expected_rps:.1} rps (Erlang C inverted), found {found_rps:.1} rps ({error:+.4})"
        );
    }
}
