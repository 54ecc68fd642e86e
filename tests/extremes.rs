//! Property: whatever the durations, rates, sizes and counts of a scenario, the trace's time
//! origin and the transforms, `capsim simulate` either completes (exit 0) or refuses with exit 2
//! and a one-line `error:` message. It never panics, never aborts, is never killed, and stays
//! within a 2 GB address space and a time limit.
//!
//! Each case is drawn from its own seed and run in a child process whose address space is
//! limited (`ulimit -v`), so an allocation sized by simulated time or by a configured bound fails
//! the case instead of the machine. `CAPSIM_EXTREME_CASES` sets the number of cases (default
//! 10,000, under a minute on two cores) and `CAPSIM_EXTREME_FIRST_SEED` the first seed (`CAPSIM_EXTREME_SEEDS=3,17` runs just those); a failing
//! case prints the command line, scenario and trace that reproduce it, and
//! `CAPSIM_EXTREME_DIR=DIR` keeps every case's files in `DIR`.

mod common;

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// The child's address-space limit, in KiB (`ulimit -v`): 2 GiB.
const ADDRESS_SPACE_KIB: u64 = 2 * 1024 * 1024;

/// A case that runs longer than this fails (it would be a hang, not a slow run: every case
/// simulates at most a few thousand requests).
const CASE_TIME_LIMIT: Duration = Duration::from_secs(60);

const DAY_NS: f64 = 86_400e9;

/// What kind of value a scenario key takes.
#[derive(Clone, Copy)]
enum Kind {
    /// 1 ns to 1000 days, log-uniform, sometimes 0.
    Duration,
    /// 1e-6 to 1e9 requests per second.
    Rate,
    /// 1 B/s to 1e13 B/s.
    Bandwidth,
    /// 0 B to 1 TB.
    Size,
    /// Integers from 0 to 1e15, edges of the valid ranges included.
    Count,
    /// Probabilities, in and out of [0, 1].
    Probability,
    /// Multipliers from 1 to 1e9.
    Multiplier,
}

/// Keys every scenario shape takes.
const COMMON_KEYS: &[(&str, Kind)] = &[
    ("instances", Kind::Count),
    ("load.concurrency", Kind::Count),
    ("load.think_time", Kind::Duration),
    ("network.latency.one_way", Kind::Duration),
    ("network.bandwidth", Kind::Bandwidth),
    ("network.request_bytes", Kind::Size),
    ("network.request_bytes_per_input_token", Kind::Count),
    ("network.response_bytes", Kind::Size),
    ("network.response_bytes_per_output_token", Kind::Count),
    ("gateway.overhead", Kind::Duration),
    ("gateway.rate_limit", Kind::Rate),
    ("gateway.burst", Kind::Count),
    ("gateway.max_in_flight", Kind::Count),
    ("cache.hit_probability", Kind::Probability),
    ("cache.latency", Kind::Duration),
    ("standby.instances", Kind::Count),
    ("standby.activate_at_outstanding", Kind::Count),
    ("queue.max_queue_size", Kind::Count),
    ("queue.timeout", Kind::Duration),
    ("execution.cold_start", Kind::Duration),
    ("retry.max_attempts", Kind::Count),
    ("retry.backoff", Kind::Duration),
    ("retry.backoff_multiplier", Kind::Multiplier),
    ("timeseries.interval", Kind::Duration),
    ("timeseries.max_rows", Kind::Count),
];

/// Keys of a dynamic-batching pool with an affine service time.
const DYNAMIC_KEYS: &[(&str, Kind)] = &[
    ("preprocess.workers", Kind::Count),
    ("preprocess.base", Kind::Duration),
    ("preprocess.per_input_token", Kind::Duration),
    ("queue.priority_levels", Kind::Count),
    ("batcher.max_batch_size", Kind::Count),
    ("batcher.max_queue_delay", Kind::Duration),
    ("execution.gpus", Kind::Count),
    ("execution.instance_count", Kind::Count),
    ("service.a", Kind::Duration),
    ("service.b", Kind::Duration),
    ("service.c", Kind::Duration),
    ("postprocess.base", Kind::Duration),
    ("postprocess.per_output_token", Kind::Duration),
    ("host.cores", Kind::Count),
    ("host.request", Kind::Duration),
    ("host.request_per_input_token", Kind::Duration),
    ("host.response", Kind::Duration),
    ("slo.latency", Kind::Duration),
];

/// Keys of a continuous-batching pool with a linear step time.
const CONTINUOUS_KEYS: &[(&str, Kind)] = &[
    ("batcher.max_num_seqs", Kind::Count),
    ("batcher.max_num_batched_tokens", Kind::Count),
    ("batcher.step_overhead", Kind::Duration),
    ("batcher.step_overhead_per_seq", Kind::Duration),
    ("kv_cache.block_size", Kind::Count),
    ("kv_cache.num_gpu_blocks", Kind::Count),
    ("kv_cache.prefix_block_tokens", Kind::Count),
    ("step_time.base", Kind::Duration),
    ("step_time.per_prefill_token", Kind::Duration),
    ("step_time.per_decode_seq", Kind::Duration),
    ("step_time.per_kv_token", Kind::Duration),
    ("step_time.per_prefill_attention_token2", Kind::Duration),
    ("slo.ttft", Kind::Duration),
    ("slo.tpot", Kind::Duration),
];

const DYNAMIC_SCENARIO: &str = "name = \"extreme-dynamic\"\n\
    instances = 2\n\
    [queue]\nmax_queue_size = 64\n\
    [batcher]\nmax_batch_size = 8\nmax_queue_delay = \"1ms\"\n\
    [service]\nkind = \"affine\"\na = \"1ms\"\nb = \"0.1ms\"\nc = \"1us\"\n";

const CONTINUOUS_SCENARIO: &str = "name = \"extreme-continuous\"\n\
    [batcher]\nkind = \"continuous\"\nmax_num_seqs = 16\nmax_num_batched_tokens = 512\n\
    [kv_cache]\nblock_size = 16\nnum_gpu_blocks = 4096\n\
    [step_time]\nkind = \"linear\"\nbase = \"5ms\"\nper_prefill_token = \"20us\"\nper_decode_seq = \"0.1ms\"\n";

/// 10 to the power of a uniform draw in `[low, high)`.
fn log_uniform(rng: &mut StdRng, low: f64, high: f64) -> f64 {
    10f64.powf(rng.random_range(low..high))
}

fn draw_value(rng: &mut StdRng, kind: Kind) -> String {
    match kind {
        Kind::Duration => match rng.random_range(0..10) {
            0 => "0".to_string(),
            1 => "1000d".to_string(),
            2 => "1ns".to_string(),
            _ => format!("{:.0}ns", log_uniform(rng, 0.0, (1000.0 * DAY_NS).log10())),
        },
        Kind::Rate => format!("{:e}rps", log_uniform(rng, -6.0, 9.0)),
        Kind::Bandwidth => format!("{:e}B/s", log_uniform(rng, 0.0, 13.0)),
        Kind::Size => format!("{:.0}B", log_uniform(rng, 0.0, 12.0)),
        Kind::Count => {
            const EDGES: [u64; 14] = [
                0,
                1,
                2,
                3,
                64,
                4_096,
                65_536,
                65_537,
                1_000_000,
                1_000_000_000,
                4_294_967_295,
                4_294_967_296,
                1_000_000_000_000_000,
                u64::MAX,
            ];
            if rng.random_bool(0.5) {
                EDGES[rng.random_range(0..EDGES.len())].to_string()
            } else {
                format!("{:.0}", log_uniform(rng, 0.0, 9.0))
            }
        }
        Kind::Probability => ["0", "0.5", "1", "1.5", "-1"][rng.random_range(0..5)].to_string(),
        Kind::Multiplier => format!("{:.3}", log_uniform(rng, 0.0, 9.0)),
    }
}

/// One drawn case: scenario text, trace text, and the command's arguments after the paths.
struct Case {
    scenario: String,
    trace: String,
    args: Vec<String>,
}

fn draw_case(seed: u64) -> Case {
    let mut rng = StdRng::seed_from_u64(seed);
    let continuous = rng.random_bool(0.4);
    let (scenario, keys) = if continuous {
        (CONTINUOUS_SCENARIO, CONTINUOUS_KEYS)
    } else {
        (DYNAMIC_SCENARIO, DYNAMIC_KEYS)
    };
    let mut args = Vec::new();
    let set_probability = rng.random_range(0.05..0.5);
    for &(key, kind) in COMMON_KEYS.iter().chain(keys) {
        if rng.random_bool(set_probability) {
            if key == "network.latency.one_way" {
                args.extend([
                    "--set".to_string(),
                    "network.latency.kind=constant".to_string(),
                ]);
            }
            args.push("--set".to_string());
            args.push(format!("{key}={}", draw_value(&mut rng, kind)));
        }
    }
    if !args.iter().any(|a| a.starts_with("network.latency")) && rng.random_bool(0.1) {
        let mut median = draw_value(&mut rng, Kind::Duration);
        let mut p99 = draw_value(&mut rng, Kind::Duration);
        if rng.random_bool(0.8) {
            // Mostly a valid pair (p99 above the median), sometimes not.
            let ns = |d: &str| capsim_trace::parse_duration_ns(d).unwrap_or(0);
            if ns(&p99) < ns(&median) {
                std::mem::swap(&mut median, &mut p99);
            }
        }
        for set in [
            "network.latency.kind=lognormal".to_string(),
            format!("network.latency.median={median}"),
            format!("network.latency.p99={p99}"),
        ] {
            args.extend(["--set".to_string(), set]);
        }
    }
    if rng.random_bool(0.2) {
        args.extend(["--set".to_string(), "load.mode=closed".to_string()]);
    }
    if rng.random_bool(0.2) {
        args.extend([
            "--set".to_string(),
            "queue.timeout_action=delay".to_string(),
        ]);
    }
    if continuous && rng.random_bool(0.3) {
        args.extend([
            "--set".to_string(),
            "kv_cache.enable_prefix_caching=true".to_string(),
        ]);
    }
    let (trace, unit) = draw_trace(&mut rng, continuous);
    args.push("--map".to_string());
    args.push(format!("arrival=t:{unit},input_tokens=i,output_tokens=o"));
    if rng.random_bool(0.3) {
        args.push("--keep-offsets".to_string());
    }
    if rng.random_bool(0.3) {
        args.push("--rate-scale".to_string());
        args.push(format!("{:e}", log_uniform(&mut rng, -6.0, 9.0)));
    }
    if rng.random_bool(0.2) {
        let start = draw_value(&mut rng, Kind::Duration);
        let end = draw_value(&mut rng, Kind::Duration);
        args.push(format!("--window={start}..{end}"));
    }
    if rng.random_bool(0.2) {
        args.push("--sample".to_string());
        args.push(format!("{:.3}", rng.random_range(0.0..1.0)));
    }
    if rng.random_bool(0.2) {
        args.push("--limit".to_string());
        args.push(rng.random_range(0..100u32).to_string());
    }
    if rng.random_bool(0.5) {
        args.push("--no-requests".to_string());
    }
    Case {
        scenario: scenario.to_string(),
        trace,
        args,
    }
}

/// A CSV trace with columns `t` (arrival in the returned unit), `i` and `o`: up to a few
/// thousand requests at a rate from 1e-6 to 1e9 per second, starting at 0, at a late offset, or
/// at a Unix time.
fn draw_trace(rng: &mut StdRng, continuous: bool) -> (String, &'static str) {
    let rows = if rng.random_bool(0.1) {
        rng.random_range(1..3_000)
    } else {
        rng.random_range(1..64)
    };
    let rate_per_s = log_uniform(rng, -6.0, 9.0);
    let (unit, ns_per_unit) =
        [("s", 1e9), ("ms", 1e6), ("us", 1e3), ("ns", 1.0)][rng.random_range(0..4)];
    let start_ns = match rng.random_range(0..4) {
        0 => 0.0,
        1 => log_uniform(rng, 0.0, 18.0),
        // Unix times from 2001 to 2033.
        _ => rng.random_range(1e18..2e18),
    };
    let mut text = String::from("t,i,o\n");
    let mut t_ns = start_ns;
    for _ in 0..rows {
        let input = if !continuous && rng.random_bool(0.05) {
            rng.random_range(0..=u32::MAX as u64)
        } else {
            log_uniform(rng, 0.0, 4.0) as u64
        };
        let output = log_uniform(rng, 0.0, 3.0) as u64;
        let value = t_ns / ns_per_unit;
        if unit == "s" {
            writeln!(text, "{value:.6},{input},{output}").unwrap();
        } else {
            writeln!(text, "{value:.0},{input},{output}").unwrap();
        }
        let gap_s = -rng.random_range(f64::EPSILON..1.0).ln() / rate_per_s;
        // Arrivals stay within what a signed 64-bit nanosecond count holds.
        t_ns = (t_ns + gap_s * 1e9).min(9.0e18);
    }
    (text, unit)
}

/// What a case did wrong, if anything.
fn run_case(seed: u64, dir: &Path) -> Result<(), String> {
    let case = draw_case(seed);
    let scenario = dir.join(format!("s{seed}.toml"));
    let trace = dir.join(format!("t{seed}.csv"));
    let out = dir.join(format!("o{seed}"));
    std::fs::write(&scenario, &case.scenario).unwrap();
    std::fs::write(&trace, &case.trace).unwrap();
    let mut args: Vec<String> = vec![
        "simulate".to_string(),
        "--scenario".to_string(),
        scenario.display().to_string(),
        trace.display().to_string(),
        "-o".to_string(),
        out.display().to_string(),
    ];
    args.extend(case.args.iter().cloned());
    let reproduce = || {
        format!(
            "seed {seed}: capsim {}\nscenario:\n{}\ntrace (first lines):\n{}",
            args.join(" "),
            case.scenario,
            case.trace.lines().take(5).collect::<Vec<_>>().join("\n")
        )
    };
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_capsim"))
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > CASE_TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "ran past {} s\n{}",
                CASE_TIME_LIMIT.as_secs(),
                reproduce()
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr)
        .expect("stderr reads");
    let _ = std::fs::remove_dir_all(&out);
    match status.code() {
        Some(0) => {}
        Some(2) => {
            let message = stderr.lines().find(|l| l.starts_with("error: "));
            if message.is_none_or(|m| m.len() < 20) {
                return Err(format!(
                    "exit 2 without an error message (stderr: {stderr})\n{}",
                    reproduce()
                ));
            }
        }
        other => {
            return Err(format!(
                "exit {other:?} ({status}); stderr: {stderr}\n{}",
                reproduce()
            ));
        }
    }
    if stderr.contains("panicked") {
        return Err(format!("panicked: {stderr}\n{}", reproduce()));
    }
    Ok(())
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number"))
        })
        .unwrap_or(default)
}

#[test]
fn extreme_scenarios_traces_and_transforms_complete_or_exit_2_never_abort() {
    let cases = env_u64("CAPSIM_EXTREME_CASES", 10_000);
    let first_seed = env_u64("CAPSIM_EXTREME_FIRST_SEED", 0);
    // CAPSIM_EXTREME_SEEDS=3,17 runs just those cases (to rerun failures).
    let seeds: Vec<u64> = match std::env::var("CAPSIM_EXTREME_SEEDS") {
        Ok(list) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .expect("CAPSIM_EXTREME_SEEDS: whole numbers, comma-separated")
            })
            .collect(),
        Err(_) => (first_seed..first_seed + cases).collect(),
    };
    let cases = seeds.len();
    // CAPSIM_EXTREME_DIR keeps each case's scenario and trace there, to rerun one by hand.
    let temp = tempfile::tempdir().expect("tempdir");
    let dir = std::env::var_os("CAPSIM_EXTREME_DIR").map_or(temp.path().to_path_buf(), |d| {
        std::fs::create_dir_all(&d).expect("create CAPSIM_EXTREME_DIR");
        std::path::PathBuf::from(d)
    });
    let started = Instant::now();
    let failures: Vec<String> = common::on_workers(&seeds, |seed| run_case(seed, &dir).err())
        .into_iter()
        .flatten()
        .collect();
    eprintln!(
        "{cases} extreme cases (seeds {}..={}) in {:.1} s, {} failed",
        seeds.first().copied().unwrap_or(0),
        seeds.last().copied().unwrap_or(0),
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    if let Ok(path) = std::env::var("CAPSIM_EXTREME_FAILURES") {
        std::fs::write(&path, failures.join("\n\n")).expect("write the failures");
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases failed; the first:\n{}",
        failures.len(),
        failures[0]
    );
}
