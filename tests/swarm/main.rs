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
//! post-processing 30%, a host's cores (`[host]`, dynamic pools) 20%, priority levels 20%, `max_queue_size` 20%, queue timeout 25% (half with
//! `timeout_action = delay`), `max_input_tokens` and `max_output_tokens` 15% each. Gateway: constant network latency 30%, overhead 30%, rate limit
//! 15%, `max_in_flight` 15%, result cache 15%, a random balancer. Client: retries with backoff
//! 25% (on rejections, timeouts or both), closed loop 20% (`concurrency` 1..64, think time).
//! Trace: 100 to 2,500 requests, Poisson or bursty arrivals (ties sometimes) at 0.2 to 1.6 times
//! a rough capacity estimate, log-normal sizes, prefix block lists when a pool caches prefixes.
//!
//! Layout: `case/` draws the case and writes its files, `records.rs` reads `requests.parquet`,
//! `audit/` holds the rules, one function per rule named after it, in a module per group below
//! (`audit/mod.rs` lists them in the order they run and says why they run after the run).
//!
//! Rules checked, from the columns `requests.parquet` really has (`crates/sim/src/output.rs`):
//! - order: `arrival <= gateway <= admitted <= queued <= batch_formed <= exec_start <=
//!   first_token <= exec_end <= postprocessed <= response` over the stages reached, the stages
//!   reached fit the outcome (a gateway rejection was never admitted, a timed-out request never
//!   batched, a completion went through every stage of its path), `latency_ns = response -
//!   arrival`, with continuous batching `ttft_ns` and `tpot_ns` follow from the times, and the
//!   network's legs each take at least its one-way latency;
//! - accounting: every trace row appears, attempts 1..n contiguous, only the last may complete,
//!   every earlier one ended in an outcome `retry.on` retries, a last failed attempt was not
//!   retryable or used up `max_attempts`, each attempt holds its row's sizes (cut to its pool's
//!   token limits once routed); `summary.json`'s totals, outcomes, reasons, retries, cache hits,
//!   truncations, batches (per size and per model instance), LLM output tokens, end-to-end count
//!   and maximum, and `end_s` match the records;
//! - retries: at most `max_attempts`, all from one client, an attempt sent exactly
//!   `backoff * multiplier^(k-1)` after attempt k's answer;
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
//!   time (at least with a host), pre-processing at least its (with a host, its whole job);
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
//! A failing case prints its seed, the rules it broke (each by its function's path, with the
//! request and the values that broke it), the scenario and the command that
//! reproduces it; `CAPSIM_SWARM_DIR=DIR` keeps every case's scenario, trace and outputs there.

#[path = "../common/mod.rs"]
mod common;

mod audit;
mod case;
mod records;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use records::{Rec, read_requests};

/// Seed used when neither the environment nor git gives one.
const FALLBACK_FIRST_SEED: u64 = 0x5EED_0000;

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

/// The rules a run broke, as an error naming the first few; none is `Ok`.
fn broken(violations: Vec<audit::Violation>) -> Result<(), String> {
    if violations.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = violations.iter().take(8).map(|v| v.to_string()).collect();
    Err(format!(
        "{} rule(s) broken:\n  {}",
        violations.len(),
        shown.join("\n  ")
    ))
}

fn run_case(seed: u64, dir: &Path) -> Result<Tally, String> {
    let case = case::draw_case(seed);
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
        let counts = tally(&records, &summary);
        broken(audit::audit(&case, &records, &summary))?;
        run_simulate(&case_dir, "again", seed, &case.map)?;
        broken(audit::audit_rerun(&out, &case_dir.join("again")))?;
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
