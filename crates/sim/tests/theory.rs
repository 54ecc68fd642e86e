//! The simulator against queueing theory: mean waiting times of M/M/1, M/M/4 and M/D/1 (also
//! with a dispatch latency, and for a host's core) within 2% of their closed forms, two host
//! cores against the FIFO recursion, Little's law on a full pipeline, with 10^6 customers and
//! fixed seeds.
//!
//! Seeds are not chosen to pass: each check runs on two seeds (and an exploration test, run with
//! `--ignored`, prints the error over twenty), with enough customers that the 2% bound is several
//! standard errors wide.

use capsim_sim::build::{BuiltScenario, Profiles, build};
use capsim_sim::rng::{Component, stream};
use capsim_sim::{RunOptions, Scenario, Warmup, simulate, simulate_with_requests, theory};
use capsim_trace::{Columns, Trace};
use rand_distr::Distribution;

/// `scenario` with its models built (it names no profile file).
fn built(scenario: &Scenario) -> BuiltScenario {
    build(scenario, &mut Profiles::default()).expect("the scenario builds")
}

/// A Poisson arrival stream of `n` requests at `rate_rps`, from `seed`.
fn poisson_trace(n: usize, rate_rps: f64, seed: u64) -> Trace {
    let mut rng = stream(seed, Component::Client, 999);
    let mut t_ns = 0.0f64;
    let mut arrival_ns = Vec::with_capacity(n);
    for _ in 0..n {
        let e: f64 = rand_distr::Exp1.sample(&mut rng);
        t_ns += e * 1e9 / rate_rps;
        arrival_ns.push(t_ns.round() as u64);
    }
    Trace::from_columns(Columns {
        arrival_ns,
        input_tokens: vec![1; n],
        ..Columns::default()
    })
    .expect("sorted arrivals")
}

/// Mean time in queue (enqueue to execution start) measured by the simulator, in seconds.
fn simulated_mean_wait_s(scenario: &str, trace: &Trace, seed: u64, warmup: u64) -> f64 {
    let scenario = Scenario::from_toml_str(scenario).expect("valid scenario");
    let options = RunOptions {
        seed,
        warmup: Warmup::Count(warmup),
        ..RunOptions::default()
    };
    let summary = simulate(&built(&scenario), trace, &options).expect("runs");
    assert!(summary.requests.adds_up());
    assert_eq!(summary.requests.completed, trace.len() as u64);
    summary.latency_ms["queue"].mean_ms * 1e-3
}

/// 4 x 10^6 customers: at 10^6 the standard error of the mean wait at utilization 0.8 is about
/// 0.8-1.0% (measured over twenty seeds by the ignored exploration test), so 2% would be only
/// two standard errors; four times the customers halves it.
const CUSTOMERS: usize = 4_000_000;
const WARMUP: u64 = 10_000;

const MM1: &str = "[service]\nkind = \"exponential\"\nmean = \"1ms\"\n";
const MM4: &str =
    "[execution]\ninstance_count = 4\n[service]\nkind = \"exponential\"\nmean = \"1ms\"\n";
const MD1: &str = "[service]\nkind = \"constant\"\ntime = \"1ms\"\n";

fn relative_error(scenario: &str, rate_rps: f64, expected_s: f64, seed: u64) -> f64 {
    let trace = poisson_trace(CUSTOMERS, rate_rps, seed);
    let got = simulated_mean_wait_s(scenario, &trace, seed, WARMUP);
    (got - expected_s) / expected_s
}

#[test]
fn mm1_mean_wait_matches_theory() {
    let expected = theory::mm1_mean_wait_s(800.0, 1000.0).unwrap();
    for seed in [1, 2] {
        let err = relative_error(MM1, 800.0, expected, seed);
        assert!(
            err.abs() < 0.02,
            "M/M/1 rho 0.8 seed {seed}: expected {expected}s, relative error {err:+.4}"
        );
    }
}

#[test]
fn mmc_mean_wait_matches_erlang_c() {
    let expected = theory::mmc_mean_wait_s(3200.0, 1000.0, 4).unwrap();
    for seed in [1, 2] {
        let err = relative_error(MM4, 3200.0, expected, seed);
        assert!(
            err.abs() < 0.02,
            "M/M/4 rho 0.8 seed {seed}: expected {expected}s, relative error {err:+.4}"
        );
    }
}

#[test]
fn md1_mean_wait_matches_pollaczek_khinchine() {
    let expected = theory::md1_mean_wait_s(800.0, 1e-3).unwrap();
    for seed in [1, 2] {
        let err = relative_error(MD1, 800.0, expected, seed);
        assert!(
            err.abs() < 0.02,
            "M/D/1 rho 0.8 seed {seed}: expected {expected}s, relative error {err:+.4}"
        );
    }
}

/// The mean queue time of M/D/1 whose requests take `compute_s` and hold the server
/// `release_s` after, plus `dispatch_s` before when they find it idle (counted as queue time):
/// Welch's M/G/1 with an exceptional first service.
fn md1_with_handover_queue_s(
    arrival_rps: f64,
    dispatch_s: f64,
    compute_s: f64,
    release_s: f64,
) -> f64 {
    let s = compute_s + release_s;
    let s0 = dispatch_s + s;
    let wait = theory::mg1_exceptional_first_mean_wait_s(arrival_rps, s, s * s, s0, s0 * s0)
        .expect("stable");
    let idle = theory::mg1_exceptional_first_idle_share(arrival_rps, s, s0).expect("stable");
    wait + idle * dispatch_s
}

/// A dispatch latency holds an idle model instance before compute and counts as queue time; a
/// request taken at the instance's release skips it. M/D/1 with 0.7 ms of compute and 0.3 ms of
/// dispatch at each busy period's start waits as Welch's queue says (0.716 ms; 0.912 ms if
/// every request paid the dispatch).
#[test]
fn dispatch_latency_is_queue_time_and_holds_an_idle_instance() {
    const MD1_DISPATCH: &str = "[batcher]\ndispatch_latency = \"300us\"\n\
                                [service]\nkind = \"constant\"\ntime = \"700us\"\n";
    let expected = md1_with_handover_queue_s(800.0, 0.3e-3, 0.7e-3, 0.0);
    for seed in [1, 2] {
        let err = relative_error(MD1_DISPATCH, 800.0, expected, seed);
        assert!(
            err.abs() < 0.02,
            "M/D/1 rho 0.56 with a 0.3 ms dispatch, seed {seed}: expected {expected}s, relative \
             error {err:+.4}"
        );
    }
}

/// A release latency holds the model instance after compute and delays no response: M/D/1 with
/// 0.1 ms of dispatch (from idle), 0.6 ms of compute and 0.3 ms of release.
#[test]
fn release_latency_holds_the_instance_and_is_not_queue_time() {
    const MD1_RELEASE: &str = "[batcher]\ndispatch_latency = \"100us\"\nrelease_latency = \"300us\"\n\
                               [service]\nkind = \"constant\"\ntime = \"600us\"\n";
    let expected = md1_with_handover_queue_s(800.0, 0.1e-3, 0.6e-3, 0.3e-3);
    for seed in [1, 2] {
        let err = relative_error(MD1_RELEASE, 800.0, expected, seed);
        assert!(
            err.abs() < 0.02,
            "M/D/1 rho 0.72 with 0.1 ms of dispatch and 0.3 ms of release, seed {seed}: expected \
             {expected}s, relative error {err:+.4}"
        );
    }
}

/// One host core with 1 ms of CPU per request on its way in, in front of a model a thousand
/// times faster: the wait for the core (the pre-processing stage less the job) is M/D/1's.
const HOST_MD1: &str = "[host]\ncores = 1\nrequest = \"1ms\"\n\
                        [service]\nkind = \"constant\"\ntime = \"1us\"\n";

/// Mean wait for a host core measured by the simulator (the pre-processing stage less the
/// job's `job_s`), in seconds.
fn simulated_mean_core_wait_s(scenario: &str, trace: &Trace, seed: u64, job_s: f64) -> f64 {
    let scenario = Scenario::from_toml_str(scenario).expect("valid scenario");
    let options = RunOptions {
        seed,
        warmup: Warmup::Count(WARMUP),
        ..RunOptions::default()
    };
    let summary = simulate(&built(&scenario), trace, &options).expect("runs");
    assert!(summary.requests.adds_up());
    assert_eq!(summary.requests.completed, trace.len() as u64);
    summary.latency_ms["preprocess"].mean_ms * 1e-3 - job_s
}

#[test]
fn host_core_wait_matches_md1() {
    let expected = theory::md1_mean_wait_s(700.0, 1e-3).unwrap();
    for seed in [1, 2] {
        let trace = poisson_trace(CUSTOMERS, 700.0, seed);
        let got = simulated_mean_core_wait_s(HOST_MD1, &trace, seed, 1e-3);
        let err = (got - expected) / expected;
        println!(
            "host M/D/1 rho 0.7 seed {seed}: simulated {got:.6e} s, theory {expected:.6e} s, error {err:+.4}"
        );
        assert!(
            err.abs() < 0.02,
            "host M/D/1 rho 0.7 seed {seed}: expected {expected}s, got {got}s, relative error {err:+.4}"
        );
    }
}

/// The waits of a FIFO queue in front of `servers` identical servers that take `service_ns`
/// each, by the Kiefer-Wolfowitz recursion: each arrival, in order, starts on the server free
/// first, when it is free.
fn fifo_waits_ns(arrival_ns: &[u64], servers: usize, service_ns: u64) -> Vec<u64> {
    let mut free_at_ns = vec![0u64; servers];
    arrival_ns
        .iter()
        .map(|&a| {
            let k = (0..servers).min_by_key(|&k| free_at_ns[k]).unwrap();
            let start_ns = a.max(free_at_ns[k]);
            free_at_ns[k] = start_ns + service_ns;
            start_ns - a
        })
        .collect()
}

/// Two cores at 0.7 each: every request waits exactly what a FIFO queue before two servers
/// makes it wait (the Kiefer-Wolfowitz recursion on the same arrivals), and the mean wait is
/// below that of the same load split over two M/D/1 queues (pooling the cores helps).
#[test]
fn two_host_cores_wait_as_one_fifo_before_two_servers_and_less_than_two_md1() {
    const HOST_MD2: &str = "[host]\ncores = 2\nrequest = \"1ms\"\n\
                            [service]\nkind = \"constant\"\ntime = \"1us\"\n";
    let n = 1_000_000;
    let trace = poisson_trace(n, 1400.0, 3);
    let scenario = Scenario::from_toml_str(HOST_MD2).expect("valid scenario");
    let options = RunOptions {
        seed: 3,
        ..RunOptions::default()
    };
    let (_, log) = simulate_with_requests(&built(&scenario), &trace, &options).expect("runs");
    let simulated: Vec<u64> = log
        .records()
        .iter()
        .map(|r| r.queued_ns - r.admitted_ns - 1_000_000)
        .collect();
    let expected = fifo_waits_ns(trace.arrival_ns(), 2, 1_000_000);
    let differ = simulated
        .iter()
        .zip(&expected)
        .filter(|(s, e)| s != e)
        .count();
    assert_eq!(
        differ, 0,
        "requests whose wait for a core differs from the recursion's"
    );
    let mean_s = simulated.iter().map(|&w| w as f64).sum::<f64>() / n as f64 * 1e-9;
    let split_s = theory::md1_mean_wait_s(700.0, 1e-3).unwrap();
    println!(
        "host M/D/2 per-core rho 0.7: mean wait {mean_s:.6e} s; two M/D/1 at 0.7: {split_s:.6e} s"
    );
    assert!(
        mean_s > 0.0 && mean_s < split_s,
        "two cores: mean wait {mean_s} s, expected above 0 and below two M/D/1's {split_s} s"
    );
}

/// Every stage modeled: network latency and transfer, gateway overhead and admission, 4
/// instances with pre-processing workers, priority queue with timeouts, dynamic batching,
/// post-processing.
const FULL_PIPELINE: &str = r#"
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
max_in_flight = 200
load_balancing = "power_of_two"
[preprocess]
workers = 2
base = "100us"
per_input_token = "1us"
[queue]
priority_levels = 2
timeout = "50ms"
[batcher]
max_batch_size = 16
preferred_batch_size = [8, 16]
max_queue_delay = "2ms"
[service]
kind = "affine"
a = "2ms"
b = "0.2ms"
c = "1us"
residuals = [0.8, 0.9, 1.0, 1.0, 1.1, 1.5]
[postprocess]
base = "50us"
"#;

#[test]
fn littles_law_holds_on_the_full_pipeline() {
    let n = 300_000;
    let mut trace = poisson_trace(n, 6000.0, 5).into_columns();
    trace.input_tokens = (0..n).map(|i| 16 + (i as u32 * 7919) % 496).collect();
    trace.class = Some((0..n).map(|i| (i % 3 == 0) as u32).collect());
    let trace = Trace::from_columns(trace).unwrap();
    let scenario = Scenario::from_toml_str(FULL_PIPELINE).unwrap();
    let options = RunOptions {
        seed: 5,
        ..RunOptions::default()
    };
    let (run, log) = simulate_with_requests(&built(&scenario), &trace, &options).unwrap();
    let s = &run.summary;
    assert!(s.requests.adds_up(), "{:?}", s.requests);
    assert_eq!(s.requests.total, n as u64);
    // L (time-average in system, integrated by the engine) = lambda (arrivals over the run) *
    // W (mean time in system from the per-request records, every outcome).
    let end_s = s.end_s;
    let lambda = n as f64 / end_s;
    let w_s = log
        .records()
        .iter()
        .map(|r| r.latency_ns() as f64)
        .sum::<f64>()
        / n as f64
        * 1e-9;
    let l = s.mean_in_system;
    let err = (l - lambda * w_s) / (lambda * w_s);
    assert!(
        err.abs() < 0.01,
        "L = {l}, lambda W = {}, error {err:+.5}",
        lambda * w_s
    );
    assert!(
        l > 1.0,
        "the pipeline should hold several requests on average, got {l}"
    );
}

#[test]
#[ignore = "exploration: prints the error distribution over twenty seeds"]
fn explore_error_spread_over_seeds() {
    let mm1 = theory::mm1_mean_wait_s(800.0, 1000.0).unwrap();
    let mm4 = theory::mmc_mean_wait_s(3200.0, 1000.0, 4).unwrap();
    let md1 = theory::md1_mean_wait_s(800.0, 1e-3).unwrap();
    for (name, s, rate, expected) in [
        ("M/M/1", MM1, 800.0, mm1),
        ("M/M/4", MM4, 3200.0, mm4),
        ("M/D/1", MD1, 800.0, md1),
    ] {
        let errs: Vec<f64> = (1..=20)
            .map(|seed| relative_error(s, rate, expected, seed))
            .collect();
        let worst = errs.iter().fold(0.0f64, |a, e| a.max(e.abs()));
        let mean = errs.iter().sum::<f64>() / errs.len() as f64;
        let sd =
            (errs.iter().map(|e| (e - mean).powi(2)).sum::<f64>() / (errs.len() - 1) as f64).sqrt();
        println!("{name}: mean error {mean:+.4}, sd {sd:.4}, worst {worst:.4}");
    }
}
