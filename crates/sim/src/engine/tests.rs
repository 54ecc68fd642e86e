//! The engine's tests: golden timelines of Triton's dynamic batcher replayed request by
//! request, and the accounting of every stage.

use super::*;
use crate::build::scenario_runs::{run_with_sink, simulate, simulate_with_requests};
use std::path::Path;

use crate::scenario::{ReplayInputs, Scenario};
use capsim_trace::Columns;

use crate::rng::SimRng;
use crate::timing::service::BatchShape;

const MS: u64 = 1_000_000;

fn trace_ms(arrivals_ms: &[u64], class: Option<Vec<u32>>) -> Trace {
    Trace::from_columns(Columns {
        arrival_ns: arrivals_ms.iter().map(|a| a * MS).collect(),
        input_tokens: vec![10; arrivals_ms.len()],
        class,
        ..Columns::default()
    })
    .unwrap()
}

/// (request, batch formed ms, exec end ms, batch size, outcome) of one request.
type Step = (u32, Option<u64>, Option<u64>, u32, &'static str);

/// The scenario of `text`; a last `[replay]` table holds replay inputs (a replay-inputs file's
/// keys, which a scenario does not take), given with [`Scenario::set_replay`].
fn scenario_of(text: &str) -> Scenario {
    let (scenario, replay) = text.split_once("[replay]\n").unwrap_or((text, ""));
    let mut s = Scenario::from_toml_str(scenario).unwrap();
    if !replay.is_empty() {
        let inputs = ReplayInputs::from_toml_str(replay, Path::new("test")).unwrap();
        s.set_replay(inputs).unwrap();
    }
    s
}

fn timeline(scenario: &str, trace: &Trace) -> Vec<Step> {
    let scenario = scenario_of(scenario);
    let (_, log) = simulate_with_requests(&scenario, trace, &RunOptions::default()).unwrap();
    let ms = |ns: u64| (ns != crate::record::NONE).then_some(ns / MS);
    log.records()
        .iter()
        .map(|r| {
            (
                r.request,
                ms(r.batch_formed_ns),
                ms(r.exec_end_ns),
                r.batch_size,
                r.outcome.as_str(),
            )
        })
        .collect()
}

const DONE: &str = "completed";

/// The request records of `trace` through `scenario` with `seed`.
fn records_at_seed(
    scenario: &Scenario,
    trace: &Trace,
    seed: u64,
) -> Vec<crate::record::RequestRecord> {
    let options = RunOptions {
        seed,
        ..RunOptions::default()
    };
    let (_, log) = simulate_with_requests(scenario, trace, &options).unwrap();
    log.records().to_vec()
}

/// (queued, batch formed, compute start, compute end, response) of each request, in ms.
fn stage_times_ms(scenario: &str, arrivals_ms: &[u64]) -> (Run, Vec<[u64; 5]>) {
    let scenario = scenario_of(scenario);
    let trace = trace_ms(arrivals_ms, None);
    let (run, log) = simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
    let times = log
        .records()
        .iter()
        .map(|r| {
            [
                r.queued_ns,
                r.batch_formed_ns,
                r.exec_start_ns,
                r.exec_end_ns,
                r.response_ns,
            ]
            .map(|ns| ns / MS)
        })
        .collect();
    (run, times)
}

#[test]
fn dispatch_latency_holds_an_idle_model_instance_before_compute_but_not_one_at_its_release() {
    let s =
        "[batcher]\ndispatch_latency = \"2ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let (_, got) = stage_times_ms(s, &[0, 5, 30]);
    // r0 wakes the idle instance: compute from 2 ms. r1 waits for it and is taken at r0's end
    // (12 ms) by the instance's running thread: no dispatch. r2 finds it idle again.
    assert_eq!(
        got,
        vec![[0, 0, 2, 12, 12], [5, 12, 12, 22, 22], [30, 30, 32, 42, 42]]
    );
}

#[test]
fn dispatch_residuals_spread_each_idle_dispatch_around_the_latency_and_leave_releases_alone() {
    // Residuals 1 and 3 rescale to 0.5 and 1.5: an idle instance's dispatch is 1 or 3 ms.
    let s = "[batcher]\ndispatch_latency = \"2ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n\
             [replay]\ndispatch_residuals = [1.0, 3.0]\n";
    let arrivals: Vec<u64> = (0..200).map(|i| i * 20).collect();
    let (_, got) = stage_times_ms(s, &arrivals);
    let waits: Vec<u64> = got.iter().map(|t| t[2] - t[1]).collect();
    let (short, long) = (
        waits.iter().filter(|&&w| w == 1).count(),
        waits.iter().filter(|&&w| w == 3).count(),
    );
    assert_eq!(short + long, 200, "every dispatch is 1 or 3 ms: {waits:?}");
    assert!(
        (70..=130).contains(&short),
        "the two drawn about equally often: {short} of 200 at 1 ms"
    );
    // A batch taken at its instance's release pays no dispatch, drawn or not.
    let (_, back_to_back) = stage_times_ms(s, &[0, 1]);
    let r1 = back_to_back[1];
    assert_eq!(
        r1[2], r1[1],
        "r1 computes as it is taken at r0's end: {r1:?}"
    );
    // The same seed draws the same dispatches.
    assert_eq!(stage_times_ms(s, &arrivals).1, got);
}

#[test]
fn release_latency_per_request_holds_the_model_instance_by_the_size_of_its_batch() {
    let s = "[batcher]\nmax_batch_size = 4\nrelease_latency = \"1ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n\
             [replay]\nrelease_latency_per_request = \"2ms\"\n";
    let (_, got) = stage_times_ms(s, &[0, 1, 2, 3, 11]);
    // r0 alone, released at 10 + 1 + 2 = 13 ms. At its compute end (10 ms) the instance takes
    // the payload r1-r3, which grows no more: r4 (11 ms, inside the release) waits for the next
    // one. The three compute from 13 ms; their release ends at 23 + 1 + 3 * 2 = 30 ms, when
    // r4, taken at 23 ms, computes. Responses are not held.
    assert_eq!(
        got,
        vec![
            [0, 0, 0, 10, 10],
            [1, 10, 13, 23, 23],
            [2, 10, 13, 23, 23],
            [3, 10, 13, 23, 23],
            [11, 23, 30, 40, 40],
        ]
    );
    // Nothing waiting at a compute end: the instance stays taken through its release, and a
    // request arriving in it starts at its end.
    let (_, held) = stage_times_ms(s, &[0, 11]);
    assert_eq!(
        held[1],
        [11, 13, 13, 23, 23],
        "r1 waits for r0's release at 13 ms"
    );
}

#[test]
fn without_prefetching_the_batch_after_a_release_is_formed_at_its_end_and_pays_the_dispatch() {
    let s = "[batcher]\nmax_batch_size = 4\nprefetch = false\ndispatch_latency = \"1ms\"\n\
             release_latency = \"1ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n\
             [replay]\nrelease_latency_per_request = \"2ms\"\n";
    let (_, got) = stage_times_ms(s, &[0, 1, 2, 3, 12]);
    // r0 wakes the idle instance: formed at 0, computes 1-11 ms, released at 11 + 1 + 2 = 14.
    // Nothing is formed before the instance's thread waits for it, so r4, arriving inside the
    // release (12 ms), joins r1-r3: the four are formed at 14 ms and, the instance idle then,
    // compute after the dispatch, from 15 ms.
    let mut expected = vec![[0, 0, 1, 11, 11]];
    expected.extend([1, 2, 3, 12].map(|a| [a, 14, 15, 25, 25]));
    assert_eq!(got, expected);
}

#[test]
fn release_latency_holds_the_model_instance_after_compute_but_not_the_requests() {
    let s =
        "[batcher]\nrelease_latency = \"3ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let (run, got) = stage_times_ms(s, &[0, 5]);
    // r0 is answered at 10 ms; its model instance takes r1 then and computes it from 13 ms.
    assert_eq!(got, vec![[0, 0, 0, 10, 10], [5, 10, 13, 23, 23]]);
    // The run ends with the last response, not the last release.
    assert!(
        (run.summary.end_s - 0.023).abs() < 1e-12,
        "{}",
        run.summary.end_s
    );
}

#[test]
fn a_pause_holds_the_start_of_compute_and_not_the_work_in_flight() {
    let s = "[service]\nkind = \"constant\"\ntime = \"10ms\"\n\
             [replay]\npauses = [{ from = \"5ms\", to = \"20ms\" }]\n";
    let (_, got) = stage_times_ms(s, &[0, 8]);
    // r0 runs through the pause; r1's batch, taken at 10 ms inside it, computes from 20 ms.
    assert_eq!(got, vec![[0, 0, 0, 10, 10], [8, 10, 20, 30, 30]]);
}

#[test]
fn golden_a_paused_batcher_forms_nothing_until_the_pause_ends_then_batches_all_queued() {
    let s = "[batcher]\nmax_batch_size = 8\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n\
             [replay]\npauses = [{ from = \"5ms\", to = \"20ms\" }]\n";
    let got = timeline(s, &trace_ms(&[0, 8, 12, 15], None));
    // r0 runs through the pause. r1, r2 and r3 arrive while the batcher is held (its thread
    // stalled, as Triton's was when it missed a wake-up): nothing is formed, not even when r0's
    // model instance frees at 10 ms; at 20 ms the three go in one batch.
    let mut expected = vec![(0, Some(0), Some(10), 1, DONE)];
    expected.extend((1..=3).map(|r| (r, Some(20), Some(30), 3, DONE)));
    assert_eq!(got, expected);
}

#[test]
fn a_slowdown_window_delays_only_the_work_inside_it() {
    let s = "[service]\nkind = \"constant\"\ntime = \"10ms\"\n\
             [replay]\nslowdowns = [{ from = \"5ms\", to = \"15ms\", factor = 3.0 }]\n";
    let got = timeline(s, &trace_ms(&[0, 30], None));
    // r0: 5 ms of work before the window, 10/3 ms of work in its 10 ms at a third of the
    // speed, the last 5/3 ms after it: done at 16.67 ms. r1 starts after the window.
    assert_eq!(
        got,
        vec![
            (0, Some(0), Some(16), 1, DONE),
            (1, Some(30), Some(40), 1, DONE)
        ]
    );
}

#[test]
fn a_speed_process_runs_each_window_at_a_drawn_level_and_each_seed_draws_its_own() {
    let s = "[execution]\nspeed_levels = [1.0, 3.0]\nspeed_window = \"10ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"4ms\"\n";
    let scenario = scenario_of(s);
    // One request at the start of each window: its 4 ms run at 0.5 or 1.5 (the levels over
    // their mean), 2 or 6 ms.
    let trace = trace_ms(&(0..60).map(|i| i * 10).collect::<Vec<_>>(), None);
    let computes = |seed: u64| -> Vec<u64> {
        records_at_seed(&scenario, &trace, seed)
            .iter()
            .map(|r| r.exec_end_ns - r.exec_start_ns)
            .collect()
    };
    let a = computes(1);
    assert!(a.iter().all(|&ns| ns == 2 * MS || ns == 6 * MS), "{a:?}");
    let slow = a.iter().filter(|&&ns| ns == 6 * MS).count();
    assert!((15..=45).contains(&slow), "{slow} of 60 windows slow");
    assert_eq!(a, computes(1), "the same seed, the same windows");
    assert_ne!(a, computes(2), "another seed, other windows");
}

/// Batch sizes in the order they run (one model instance: by their compute end).
fn batch_sizes(got: &[Step]) -> Vec<u32> {
    let mut ends: Vec<(u64, u32)> = got.iter().filter_map(|r| r.2.map(|e| (e, r.3))).collect();
    ends.sort_unstable();
    ends.dedup();
    ends.into_iter().map(|(_, size)| size).collect()
}

#[test]
fn golden_a_payload_behind_a_full_one_that_does_not_fit_at_its_take_grows_no_more() {
    // The timeline of a probe of Triton 2.51 (scripts/experiments/triton_probe.py until
    // 2026-12-06, in git history; docs/archive/validation-log.md): 40 ms batches, preferred 4
    // and 8, an 8 ms delay.
    // r1-r8 (10-17 ms) fill a payload behind r0's batch, r9-r12 (20-23 ms) make a payload of 4
    // behind that, and r13-r16 (24-27 ms) wait: two payloads hold both slots.
    let s = "[batcher]\nmax_batch_size = 8\npreferred_batch_size = [4, 8]\n\
             max_queue_delay = \"8ms\"\n[service]\nkind = \"constant\"\ntime = \"40ms\"\n";
    let arrivals = |r17_ms: u64| -> Vec<u64> {
        let mut a = vec![0];
        a.extend(10..18);
        a.extend(20..28);
        a.extend([r17_ms, 55, 60, 65, 70, 90, 92, 94, 96, 98]);
        a
    };
    // At 48 ms the eight are taken, and the four behind (waiting since 20 ms) are examined for
    // the merge but do not fit: they stay four. r13-r16 start a new payload of four, which
    // fits with them at their take (88 ms): 8 again, as if nothing had happened.
    let merged = timeline(s, &trace_ms(&arrivals(50), None));
    assert_eq!(batch_sizes(&merged), vec![1, 8, 8, 8, 2]);
    // With r17 arriving before that take, the new payload is five, which does not fit with
    // the four: each payload behind is cut where it stood, as Triton 2.51 ran it in 6 of 37
    // attempts (1, 8, 4, 5, 6, 3 there).
    let cut = timeline(s, &trace_ms(&arrivals(47), None));
    assert_eq!(batch_sizes(&cut), vec![1, 8, 4, 5, 4, 5]);
}

#[test]
fn golden_an_expired_delay_sends_everything_queued_not_the_preferred_size() {
    let s = "[batcher]\nmax_batch_size = 8\npreferred_batch_size = [4]\nmax_queue_delay = \"2ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let got = timeline(s, &trace_ms(&[0, 3, 4, 5, 6, 7, 8], None));
    // r0 alone at 2 ms (its delay); at 12 ms six are queued and r1 has waited 9 ms: Triton
    // sends all six, where a preferred size of 4 would leave two behind.
    let mut expected = vec![(0, Some(2), Some(12), 1, DONE)];
    expected.extend((1..=6).map(|r| (r, Some(12), Some(22), 6, DONE)));
    assert_eq!(got, expected);
}

/// The doc timeline's arrivals (ms) repeated every 100 ms, `cycles` times.
fn doc_timeline_cycles(cycles: u64) -> Trace {
    let arrival_ns = (0..cycles)
        .flat_map(|c| {
            [0, 1_000, 2_500, 3_000, 4_000, 5_000, 15_000].map(|us| c * 100 * MS + us * 1_000)
        })
        .collect::<Vec<u64>>();
    let n = arrival_ns.len();
    Trace::from_columns(Columns {
        arrival_ns,
        input_tokens: vec![10; n],
        ..Columns::default()
    })
    .unwrap()
}

const DOC_TIMELINE: &str = "[batcher]\nmax_batch_size = 8\npreferred_batch_size = [4]\n\
                            max_queue_delay = \"2ms\"\n\
                            [service]\nkind = \"constant\"\ntime = \"10ms\"\n";

#[test]
fn golden_doc_timeline_payloads_form_ahead_and_arrivals_below_the_next_preferred_size_wait() {
    let s = DOC_TIMELINE;
    let trace = doc_timeline_cycles(1);
    let got = timeline(s, &trace);
    // The timeline of the batcher module's documentation: [r2 r3 r4] is formed at 4.5 ms
    // while the instance is busy, r5 does not join it, and r6 joins [r5] at once.
    let expected = vec![
        (0, Some(2), Some(12), 2, DONE),
        (1, Some(2), Some(12), 2, DONE),
        (2, Some(12), Some(22), 3, DONE),
        (3, Some(12), Some(22), 3, DONE),
        (4, Some(12), Some(22), 3, DONE),
        (5, Some(22), Some(32), 2, DONE),
        (6, Some(22), Some(32), 2, DONE),
    ];
    assert_eq!(got, expected);
    let prefetch_off = s.replace("max_queue_delay", "prefetch = false\nmax_queue_delay");
    let got = timeline(&prefetch_off, &trace);
    let expected = vec![
        (0, Some(2), Some(12), 2, DONE),
        (1, Some(2), Some(12), 2, DONE),
        (2, Some(12), Some(22), 4, DONE),
        (3, Some(12), Some(22), 4, DONE),
        (4, Some(12), Some(22), 4, DONE),
        (5, Some(12), Some(22), 4, DONE),
        (6, Some(22), Some(32), 1, DONE),
    ];
    assert_eq!(
        got, expected,
        "without prefetching a batch is formed when the instance frees up"
    );
}

#[test]
fn golden_doc_timeline_with_the_thread_first_r5_joins_the_waiting_payload() {
    let s = format!("{DOC_TIMELINE}[replay]\nthread_first_fraction = 1\n");
    let got = timeline(&s, &doc_timeline_cycles(1));
    // At 12 ms the thread runs before the instance takes [r2 r3 r4]: r5 joins it (a preferred
    // 4), and r6 waits its own delay, then for the instance. Here that is the batches of
    // forming them when the instance frees up.
    assert_eq!(got[5], (5, Some(12), Some(22), 4, DONE));
    assert_eq!(got[6], (6, Some(22), Some(32), 1, DONE));
    let prefetch_off = DOC_TIMELINE.replace("max_queue_delay", "prefetch = false\nmax_queue_delay");
    assert_eq!(got, timeline(&prefetch_off, &doc_timeline_cycles(1)));
}

#[test]
fn the_thread_runs_first_in_its_fraction_of_batch_ends_drawn_from_the_seed() {
    const CYCLES: u64 = 2_000;
    let trace = doc_timeline_cycles(CYCLES);
    // Cycles whose r5 left at 12 ms in a batch of 4: the thread won that cycle's first race.
    let thread_won = |fraction: f64, seed: u64| {
        let s = format!("{DOC_TIMELINE}[replay]\nthread_first_fraction = {fraction}\n");
        records_at_seed(&scenario_of(&s), &trace, seed)
            .iter()
            .filter(|r| r.request % 7 == 5 && r.batch_size == 4)
            .count() as f64
    };
    assert_eq!(thread_won(0.0, 1), 0.0, "the default: the instance first");
    assert_eq!(thread_won(1.0, 1), CYCLES as f64);
    for (fraction, seed) in [(0.1, 1), (0.3, 2), (0.7, 3)] {
        let won = thread_won(fraction, seed);
        let expected = fraction * CYCLES as f64;
        // Four binomial standard deviations.
        let bound = 4.0 * (CYCLES as f64 * fraction * (1.0 - fraction)).sqrt();
        assert!(
            (won - expected).abs() <= bound,
            "fraction {fraction}: the thread won {won} of {CYCLES} races, expected {expected} \
             +- {bound:.0}"
        );
        assert_eq!(
            won,
            thread_won(fraction, seed),
            "the same seed, the same races"
        );
    }
}

#[test]
fn golden_doc_timeline_a_batch_end_slept_through_waits_for_the_next_arrival_or_the_poll() {
    let s = DOC_TIMELINE.replace("[service]", "missed_release = 1\n[service]");
    let got = timeline(&s, &doc_timeline_cycles(1));
    // At 12 ms A ends with [r2 r3 r4] formed and r5 waiting; the thread sleeps through it (and
    // through r5's delay at 7 ms) until r6 arrives at 15 ms: the instance takes [r2 r3 r4]
    // then, and r5 and r6 form [r5 r6]. At 25 ms it sleeps through again: nothing arrives, so
    // [r5 r6] waits for the 500 ms poll.
    let expected = vec![
        (0, Some(2), Some(12), 2, DONE),
        (1, Some(2), Some(12), 2, DONE),
        (2, Some(15), Some(25), 3, DONE),
        (3, Some(15), Some(25), 3, DONE),
        (4, Some(15), Some(25), 3, DONE),
        (5, Some(525), Some(535), 2, DONE),
        (6, Some(525), Some(535), 2, DONE),
    ];
    assert_eq!(got, expected);
    let none = DOC_TIMELINE.replace("[service]", "missed_release = 0\n[service]");
    assert_eq!(
        timeline(&none, &doc_timeline_cycles(1)),
        timeline(DOC_TIMELINE, &doc_timeline_cycles(1)),
        "0 is the default"
    );
}

#[test]
fn the_batcher_sleeps_through_its_share_of_batch_ends_drawn_from_the_seed() {
    const CYCLES: u64 = 2_000;
    // Every 100 ms r0 at 0, r1 at 1 and r2 at 40 ms; each batch takes 10 ms, and batches are
    // formed only when the instance is free. r1 waits behind r0's batch, so each cycle has one
    // batch end with a request waiting: r1 leaves at 10 ms (19 ms end to end), or, slept
    // through, with r2 at 40 ms (49 ms).
    let arrivals: Vec<u64> = (0..CYCLES)
        .flat_map(|c| [c * 100, c * 100 + 1, c * 100 + 40])
        .collect();
    let trace = trace_ms(&arrivals, None);
    let missed = |share: f64, seed: u64| {
        let s = format!(
            "[batcher]\nmax_batch_size = 8\nprefetch = false\nmissed_release = {share}\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n"
        );
        let options = RunOptions {
            seed,
            ..RunOptions::default()
        };
        let (_, log) = simulate_with_requests(&scenario_of(&s), &trace, &options).unwrap();
        assert!(log.records().iter().all(|r| r.outcome.as_str() == DONE));
        log.records()
            .iter()
            .filter(|r| r.latency_ns() > 30 * MS)
            .count() as f64
    };
    assert_eq!(missed(0.0, 1), 0.0);
    assert_eq!(missed(1.0, 1), CYCLES as f64);
    for (share, seed) in [(0.05, 1), (0.2, 2), (0.6, 3)] {
        let got = missed(share, seed);
        let expected = share * CYCLES as f64;
        // Four binomial standard deviations.
        let bound = 4.0 * (CYCLES as f64 * share * (1.0 - share)).sqrt();
        assert!(
            (got - expected).abs() <= bound,
            "share {share}: {got} of {CYCLES} batch ends slept through, expected {expected} \
             +- {bound:.0}"
        );
        assert_eq!(got, missed(share, seed), "the same seed, the same draws");
    }
}

#[test]
fn golden_a_request_the_batcher_was_not_woken_for_joins_at_its_500_ms_poll() {
    let s = "[batcher]\nmax_batch_size = 8\npreferred_batch_size = [4]\nmax_queue_delay = \"2ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"2s\"\n";
    let got = timeline(s, &trace_ms(&[0, 1, 3, 6], None));
    // [r0 r1] run from 2 ms; [r2] is formed at 5 ms and waits for the instance; r3 (6 ms)
    // does not wake the thread (1 < 4 waiting), which polls at 5 + 500 ms and adds r3 to
    // [r2] before the instance takes it at 2002 ms.
    let expected = vec![
        (0, Some(2), Some(2002), 2, DONE),
        (1, Some(2), Some(2002), 2, DONE),
        (2, Some(2002), Some(4002), 2, DONE),
        (3, Some(2002), Some(4002), 2, DONE),
    ];
    assert_eq!(got, expected);
    // An arrival long after the thread went idle waits for the next of its polls (every
    // 500 ms from 5 ms: 10.005 s), not one in the past.
    let slow = s.replace("2s", "100s");
    let got = timeline(&slow, &trace_ms(&[0, 3, 10_000], None));
    assert_eq!(got[2], (2, Some(100_002), Some(200_002), 2, DONE));
}

#[test]
fn golden_full_batch_goes_at_once_and_partial_batch_waits_the_delay() {
    let s = "[batcher]\nmax_batch_size = 4\nmax_queue_delay = \"5ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"3ms\"\n";
    let got = timeline(s, &trace_ms(&[0, 1, 2, 3, 10, 11], None));
    let expected = vec![
        (0, Some(3), Some(6), 4, DONE),
        (1, Some(3), Some(6), 4, DONE),
        (2, Some(3), Some(6), 4, DONE),
        (3, Some(3), Some(6), 4, DONE),
        (4, Some(15), Some(18), 2, DONE),
        (5, Some(15), Some(18), 2, DONE),
    ];
    assert_eq!(got, expected);
}

#[test]
fn golden_no_batching_uses_every_model_instance() {
    let s = "[execution]\ninstance_count = 2\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let got = timeline(s, &trace_ms(&[0, 0, 0, 5], None));
    let expected = vec![
        (0, Some(0), Some(10), 1, DONE),
        (1, Some(0), Some(10), 1, DONE),
        (2, Some(10), Some(20), 1, DONE),
        (3, Some(10), Some(20), 1, DONE),
    ];
    assert_eq!(got, expected);
}

#[test]
fn golden_zero_delay_sends_what_is_queued_when_an_instance_frees() {
    let s = "[batcher]\nmax_batch_size = 4\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let got = timeline(s, &trace_ms(&[0, 1, 2, 3, 4, 5], None));
    let expected = vec![
        (0, Some(0), Some(10), 1, DONE),
        (1, Some(10), Some(20), 4, DONE),
        (2, Some(10), Some(20), 4, DONE),
        (3, Some(10), Some(20), 4, DONE),
        (4, Some(10), Some(20), 4, DONE),
        (5, Some(20), Some(30), 1, DONE),
    ];
    assert_eq!(got, expected);
}

#[test]
fn golden_queue_timeout_reject_and_delay() {
    let reject = "[queue]\ntimeout = \"5ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let got = timeline(reject, &trace_ms(&[0, 1, 2, 8], None));
    let expected = vec![
        (0, Some(0), Some(10), 1, DONE),
        (1, None, None, 0, "timed_out"),
        (2, None, None, 0, "timed_out"),
        (3, Some(10), Some(20), 1, DONE),
    ];
    assert_eq!(got, expected);
    let delay = "[queue]\ntimeout = \"5ms\"\ntimeout_action = \"DELAY\"\n\
                 [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let got = timeline(delay, &trace_ms(&[0, 1, 8], None));
    let expected = vec![
        (0, Some(0), Some(10), 1, DONE),
        (1, Some(20), Some(30), 1, DONE),
        (2, Some(10), Some(20), 1, DONE),
    ];
    assert_eq!(
        got, expected,
        "a delayed request goes behind those that did not time out"
    );
}

#[test]
fn golden_priority_levels_serve_urgent_classes_first() {
    let s = "[queue]\npriority_levels = 2\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let got = timeline(s, &trace_ms(&[0, 1, 2], Some(vec![1, 1, 0])));
    let expected = vec![
        (0, Some(0), Some(10), 1, DONE),
        (1, Some(20), Some(30), 1, DONE),
        (2, Some(10), Some(20), 1, DONE),
    ];
    assert_eq!(got, expected);
}

#[test]
fn golden_cold_start_delays_the_first_batch() {
    let s = "[execution]\ncold_start = \"5ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let got = timeline(s, &trace_ms(&[0, 1], None));
    assert_eq!(
        got,
        vec![
            (0, Some(5), Some(15), 1, DONE),
            (1, Some(15), Some(25), 1, DONE)
        ]
    );
}

#[test]
fn full_queue_rejects_at_once_with_its_reason() {
    let s = "[queue]\nmax_queue_size = 1\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let got = timeline(s, &trace_ms(&[0, 1, 2, 12], None));
    assert_eq!(got[2], (2, None, None, 0, "rejected"));
    assert_eq!(got[3], (3, Some(20), Some(30), 1, DONE));
    let scenario = Scenario::from_toml_str(s).unwrap();
    let summary = simulate(
        &scenario,
        &trace_ms(&[0, 1, 2, 12], None),
        &RunOptions::default(),
    )
    .unwrap();
    assert_eq!(summary.rejected(RejectReason::QueueFull), 1);
    assert!(summary.requests.adds_up());
}

#[test]
fn closed_loop_clients_send_after_each_response_and_think_time() {
    let s = "[load]\nmode = \"closed\"\nconcurrency = 2\nthink_time = \"1ms\"\n\
             [execution]\ninstance_count = 2\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    let trace = trace_ms(&[0; 5], None);
    let (_, log) = simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
    let sends: Vec<u64> = log.records().iter().map(|r| r.arrival_ns / MS).collect();
    assert_eq!(sends, vec![0, 0, 11, 11, 22]);
    assert_eq!(log.records()[4].latency_ns(), 10 * MS);
}

#[test]
fn the_run_ends_at_its_last_response_not_at_a_later_cold_start_think_time_or_timer() {
    // Found by tests/swarm.rs (seeds 189, 104, 146 of 0..200): each of these outlived the
    // last response and stretched `end_s` (and the utilization measured over it).
    let cases = [
        // A cold start finishing after every request timed out waiting for it.
        "[queue]\ntimeout = \"5ms\"\n[execution]\ncold_start = \"1s\"\n\
         [service]\nkind = \"constant\"\ntime = \"10ms\"\n",
        // A closed-loop client's think time after its last response.
        "[load]\nmode = \"closed\"\nconcurrency = 2\nthink_time = \"1s\"\n\
         [service]\nkind = \"constant\"\ntime = \"10ms\"\n",
        // The batcher's timer for a batch whose requests timed out first.
        "[queue]\ntimeout = \"5ms\"\n[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"1s\"\n\
         [service]\nkind = \"constant\"\ntime = \"10ms\"\n",
    ];
    for s in cases {
        let scenario = Scenario::from_toml_str(s).unwrap();
        let trace = trace_ms(&[0, 1, 2], None);
        let (run, log) = simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
        let last_ns = log.records().iter().map(|r| r.response_ns).max().unwrap();
        assert!(
            (run.summary.end_s - last_ns as f64 / 1e9).abs() < 1e-12,
            "end {} s, last response {} s:\n{s}",
            run.summary.end_s,
            last_ns as f64 / 1e9
        );
    }
}

#[test]
fn timed_out_requests_are_retried_after_backoff_and_each_attempt_recorded() {
    let s = "[queue]\ntimeout = \"5ms\"\n[retry]\nmax_attempts = 3\nbackoff = \"10ms\"\n\
             [service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    let (run, log) = simulate_with_requests(
        &scenario,
        &trace_ms(&[0, 1, 2], None),
        &RunOptions::default(),
    )
    .unwrap();
    let got: Vec<(u32, u16, u64, &str)> = log
        .records()
        .iter()
        .map(|r| (r.request, r.attempt, r.arrival_ns / MS, r.outcome.as_str()))
        .collect();
    // r1 times out at 6 and retries at 16 (runs 16..26); r2 times out at 7, retries at 17,
    // times out again at 22 and retries at 22 + 20 = 42, when the instance is free.
    let expected = vec![
        (0, 1, 0, "completed"),
        (1, 1, 1, "timed_out"),
        (1, 2, 16, "completed"),
        (2, 1, 2, "timed_out"),
        (2, 2, 17, "timed_out"),
        (2, 3, 42, "completed"),
    ];
    assert_eq!(got, expected);
    let c = &run.summary.requests;
    assert_eq!((c.total, c.retries, c.completed, c.timed_out), (6, 3, 3, 3));
}

#[test]
fn standby_instance_activates_under_load_and_starts_cold() {
    let s = "[gateway]\nload_balancing = \"least_outstanding\"\n\
             [standby]\ninstances = 1\nactivate_at_outstanding = 2\n\
             [execution]\ncold_start = \"5ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    // The active instance loads until 5ms; r0 runs 5..15. At 6, r1 finds one outstanding
    // (< 2) and queues there; at 7, r2 finds two outstanding: the standby instance is
    // activated, the balancer sends r2 to it (least outstanding), and it runs r2 after its
    // own cold start, 12..22.
    let scenario = Scenario::from_toml_str(s).unwrap();
    let (_, log) = simulate_with_requests(
        &scenario,
        &trace_ms(&[0, 6, 7], None),
        &RunOptions::default(),
    )
    .unwrap();
    let got: Vec<(u32, u32, u64)> = log
        .records()
        .iter()
        .map(|r| (r.request, r.instance, r.exec_start_ns / MS))
        .collect();
    assert_eq!(got, vec![(0, 0, 5), (1, 0, 15), (2, 1, 12)]);
}

#[test]
fn gateway_refusals_are_counted_by_reason_and_everything_adds_up() {
    let s = "[gateway]\nrate_limit = \"100rps\"\nburst = 5\nmax_in_flight = 3\n\
             [network.latency]\nkind = \"lognormal\"\nmedian = \"1ms\"\np99 = \"4ms\"\n\
             [service]\nkind = \"exponential\"\nmean = \"20ms\"\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    let trace = trace_ms(&(0..2_000).collect::<Vec<u64>>(), None);
    let summary = simulate(
        &scenario,
        &trace,
        &RunOptions {
            seed: 3,
            ..RunOptions::default()
        },
    )
    .unwrap();
    assert!(summary.requests.adds_up(), "{:?}", summary.requests);
    assert_eq!(summary.requests.total, 2_000);
    assert!(
        summary.rejected(RejectReason::RateLimited) > 0,
        "{:?}",
        summary.requests
    );
    assert!(
        summary.rejected(RejectReason::MaxInFlight) > 0,
        "{:?}",
        summary.requests
    );
}

#[test]
fn cache_hits_answer_without_a_model() {
    let s = "[cache]\nhit_probability = 0.5\nlatency = \"1ms\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    let trace = trace_ms(&(0..1_000).map(|i| i * 20).collect::<Vec<u64>>(), None);
    let (run, log) = simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
    let hits = run.summary.requests.cache_hits;
    assert!((400..600).contains(&hits), "{hits} hits of 1000 at p = 0.5");
    assert_eq!(run.summary.batches, 1_000 - hits);
    for r in log.records().iter().filter(|r| r.cache_hit) {
        assert_eq!(r.latency_ns(), MS);
        assert_eq!(r.batch_size, 0);
    }
}

#[test]
fn requests_route_to_pools_by_class() {
    let s = "[service]\nkind = \"constant\"\ntime = \"10ms\"\n\
             [pools.fast]\nclasses = [1]\n[pools.fast.service]\nkind = \"constant\"\ntime = \"1ms\"\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    let trace = trace_ms(&[0, 100], Some(vec![0, 1]));
    let (_, log) = simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
    assert_eq!(
        (log.records()[0].pool, log.records()[0].latency_ns()),
        (0, 10 * MS)
    );
    assert_eq!(
        (log.records()[1].pool, log.records()[1].latency_ns()),
        (1, MS)
    );
}

#[test]
fn preprocess_workers_queue_requests_fifo() {
    let s = "[preprocess]\nworkers = 1\nbase = \"1ms\"\nper_input_token = \"100us\"\n\
             [execution]\ninstance_count = 4\n[service]\nkind = \"constant\"\ntime = \"1ms\"\n";
    let got = timeline(s, &trace_ms(&[0, 0, 0], None));
    // Each request takes 1ms + 10 tokens * 0.1ms = 2ms of the single worker.
    let starts: Vec<Option<u64>> = got.iter().map(|g| g.1).collect();
    assert_eq!(starts, vec![Some(2), Some(4), Some(6)]);
}

/// A calibrated-looking model whose grid ends at batch 4: larger batches are extrapolated.
#[derive(Debug)]
struct GridUpToBatch4;

impl ServiceTime for GridUpToBatch4 {
    fn sample_ns(&self, _batch: &BatchShape, _rng: &mut SimRng) -> u64 {
        10 * MS
    }

    fn mean_ns(&self, _batch: &BatchShape) -> f64 {
        (10 * MS) as f64
    }

    fn is_extrapolated(&self, batch: &BatchShape) -> bool {
        batch.size > 4
    }
}

#[test]
fn batches_outside_the_calibrated_grid_are_counted_and_reported() {
    let s = "[batcher]\nmax_batch_size = 8\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    // r0 runs alone 0..10; r1..r6 queue meanwhile and run as one batch of 6 (extrapolated)
    // 10..20; r7..r9 arrive at 12 and run as a batch of 3 at 20.
    let trace = trace_ms(&[0, 1, 1, 1, 1, 1, 1, 12, 12, 12], None);
    let options = RunOptions {
        service_override: Some(Arc::new(GridUpToBatch4)),
        ..RunOptions::default()
    };
    let summary = simulate(&scenario, &trace, &options).unwrap();
    assert_eq!(summary.batch_size_counts, vec![0, 1, 0, 1, 0, 0, 1]);
    assert_eq!(summary.extrapolated_batches, 1);
    assert_eq!(
        summary.extrapolated_batches_by_pool,
        [("default".to_string(), 1)].into_iter().collect()
    );
    let human = summary.human();
    assert!(
        human.contains("1 of 3 batches outside the calibrated grid; their times are extrapolated"),
        "{human}"
    );
    let analytic = simulate(&scenario, &trace, &RunOptions::default()).unwrap();
    assert_eq!(analytic.batch_size_counts, summary.batch_size_counts);
    assert_eq!(analytic.extrapolated_batches, 0);
    assert!(!analytic.human().contains("extrapolated"));
}

/// Runs 1 ms plus the idle time before the batch: shows the engine's idle times.
#[derive(Debug)]
struct SlowerAfterIdle;

impl ServiceTime for SlowerAfterIdle {
    fn sample_ns(&self, batch: &BatchShape, _rng: &mut SimRng) -> u64 {
        MS + batch.idle_ns
    }

    fn mean_ns(&self, batch: &BatchShape) -> f64 {
        (MS + batch.idle_ns) as f64
    }
}

#[test]
fn each_batch_sees_how_long_its_model_instance_idled() {
    let scenario =
        Scenario::from_toml_str("[service]\nkind = \"constant\"\ntime = \"1ms\"\n").unwrap();
    // r0 at 2 ms: idle since the start, 2 ms, runs 3 ms (ends 5). r1 at 4 ms waits and starts
    // at 5 back to back: 1 ms (ends 6). r2 at 10 ms: idle 4 ms, runs 5 ms (ends 15).
    let trace = trace_ms(&[2, 4, 10], None);
    let options = RunOptions {
        service_override: Some(Arc::new(SlowerAfterIdle)),
        ..RunOptions::default()
    };
    let (_, log) = simulate_with_requests(&scenario, &trace, &options).unwrap();
    let ends: Vec<u64> = log.records().iter().map(|r| r.exec_end_ns / MS).collect();
    assert_eq!(ends, vec![5, 6, 15]);
}

#[test]
fn warmup_by_count_excludes_the_first_requests_from_statistics() {
    let s = "[service]\nkind = \"constant\"\ntime = \"1ms\"\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    let trace = trace_ms(&(0..100).map(|i| i * 10).collect::<Vec<u64>>(), None);
    let options = RunOptions {
        warmup: Warmup::Count(30),
        ..RunOptions::default()
    };
    let summary = simulate(&scenario, &trace, &options).unwrap();
    assert_eq!(
        (
            summary.requests.total,
            summary.measured.total,
            summary.warmup_excluded
        ),
        (100, 70, 30)
    );
    assert_eq!(summary.latency_ms["end_to_end"].count, 70);
}

/// Poisson-ish arrivals over `span_ms`, deterministic.
fn spread_trace(requests: u64, span_ms: u64) -> Trace {
    let arrivals: Vec<u64> = (0..requests)
        .map(|i| (i * i * 7919 % (span_ms * 1_000)) / 1_000)
        .collect::<std::collections::BTreeSet<u64>>()
        .into_iter()
        .collect();
    trace_ms(&arrivals, None)
}

#[test]
fn a_capped_timeseries_equals_the_series_sampled_at_the_doubled_interval() {
    let base = "instances = 2\n[batcher]\nmax_batch_size = 4\nmax_queue_delay = \"3ms\"\n\
                [service]\nkind = \"exponential\"\nmean = \"7ms\"\n";
    let trace = spread_trace(4_000, 60_000);
    let run = |extra: &str| {
        let scenario = Scenario::from_toml_str(&format!("{base}{extra}")).unwrap();
        run_with_sink(&scenario, &trace, &RunOptions::default(), &mut NoRecords).unwrap()
    };
    // 60 s at 10 ms is 6,000 rows; a cap of 1,000 doubles the interval three times (80 ms).
    let capped = run("[timeseries]\ninterval = \"10ms\"\nmax_rows = 1000\n");
    let direct = run("[timeseries]\ninterval = \"80ms\"\n");
    assert!(capped.summary.timeseries_coarsened);
    assert!(!direct.summary.timeseries_coarsened);
    assert_eq!(capped.summary.timeseries_interval_s, 0.08);
    assert!(
        capped.timeseries.len() <= 1000,
        "{} rows",
        capped.timeseries.len()
    );
    let (a, b) = (&capped.timeseries, &direct.timeseries);
    assert_eq!(a.time_ns, b.time_ns);
    assert_eq!(a.queued, b.queued);
    assert_eq!(a.in_system, b.in_system);
    assert_eq!(a.busy_model_instances, b.busy_model_instances);
    assert_eq!(a.arrivals, b.arrivals);
    assert_eq!(a.finished, b.finished);
    assert_eq!(a.batches, b.batches);
    for (i, (x, y)) in a.utilization.iter().zip(&b.utilization).enumerate() {
        assert!(
            (x - y).abs() < 1e-12,
            "row {i}: utilization {x} merged, {y} direct"
        );
    }
    for (i, (x, y)) in a.batch_size_mean.iter().zip(&b.batch_size_mean).enumerate() {
        assert!(
            (x - y).abs() < 1e-12,
            "row {i}: batch size {x} merged, {y} direct"
        );
    }
    assert_eq!(capped.summary.requests, direct.summary.requests);
}

#[test]
fn a_long_quiet_gap_keeps_the_timeseries_within_its_cap() {
    // 1 us rows over 1000 days of simulated time.
    let s = "[execution]\ncold_start = \"1000d\"\n[service]\nkind = \"constant\"\ntime = \"1ms\"\n\
             [timeseries]\ninterval = \"1us\"\nmax_rows = 5000\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    let trace = trace_ms(&[0, 1, 2], None);
    let run = run_with_sink(&scenario, &trace, &RunOptions::default(), &mut NoRecords).unwrap();
    assert!(
        run.timeseries.len() <= 5000,
        "{} rows",
        run.timeseries.len()
    );
    assert!(run.summary.timeseries_coarsened);
    let day_ms = 86_400_000.0;
    let e2e = &run.summary.latency_ms["end_to_end"];
    assert_eq!(e2e.count, 3);
    assert!(
        (e2e.p50_ms / day_ms - 1000.0).abs() < 1.0,
        "p50 {} days, expected 1000 (no clamp)",
        e2e.p50_ms / day_ms
    );
}

#[test]
fn stale_queue_timeouts_do_not_stretch_the_run_past_its_last_response() {
    let s = "[queue]\ntimeout = \"1000d\"\n[service]\nkind = \"constant\"\ntime = \"10ms\"\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    let trace = trace_ms(&[0, 1, 2], None);
    let run = run_with_sink(&scenario, &trace, &RunOptions::default(), &mut NoRecords).unwrap();
    assert_eq!(run.summary.requests.completed, 3);
    // The last of three 10 ms batches back to back ends at 30 ms.
    assert!(
        (run.summary.end_s - 0.030).abs() < 1e-9,
        "end {} s, expected 0.030 s",
        run.summary.end_s
    );
    assert!(!run.summary.timeseries_coarsened);
}

#[test]
fn a_batch_ending_past_the_horizon_stops_the_run_with_an_error_naming_the_stage() {
    // 50,000 days per token of a 10-token request: 1,370 years.
    let s = "[service]\nkind = \"affine\"\na = \"1ms\"\nc = \"50000d\"\n";
    let scenario = Scenario::from_toml_str(s).unwrap();
    let err = run_with_sink(
        &scenario,
        &trace_ms(&[0, 5], None),
        &RunOptions::default(),
        &mut NoRecords,
    )
    .unwrap_err();
    assert!(matches!(err, SimError::PastHorizon { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("[service]") && message.contains("292 years"),
        "{message}"
    );
}

/// One request of 10 prompt tokens and `output` output tokens at 0 through a continuous batcher
/// of 10 ms steps (`extra` added to `[batcher]`): its execution time, steps back to back.
fn continuous_execution_ns(extra: &str, output: u32, seed: u64) -> u64 {
    let s = format!(
        "[batcher]\nkind = \"continuous\"\n{extra}\n[kv_cache]\nnum_gpu_blocks = 1000\n\
         [step_time]\nkind = \"linear\"\nbase = \"10ms\"\n"
    );
    let scenario = Scenario::from_toml_str(&s).unwrap();
    let trace = Trace::from_columns(Columns {
        arrival_ns: vec![0],
        input_tokens: vec![10],
        output_tokens: Some(vec![output]),
        ..Columns::default()
    })
    .unwrap();
    let options = RunOptions {
        seed,
        ..RunOptions::default()
    };
    let (_, log) = simulate_with_requests(&scenario, &trace, &options).unwrap();
    let r = log.records()[0];
    r.exec_end_ns - r.exec_start_ns
}

#[test]
fn step_residuals_multiply_each_step_by_a_drawn_factor_with_the_factors_mean() {
    // 2000 steps (the prefill and 1999 decodes), each 10 ms times 1 or 3: 10 or 30 ms.
    let steps = 2000u64;
    let total = continuous_execution_ns("step_residuals = [1.0, 3.0]", 2000, 7);
    let long = (total - steps * 10 * MS) / (20 * MS);
    assert_eq!(
        total,
        steps * 10 * MS + long * 20 * MS,
        "every step is 10 or 30 ms"
    );
    // The mean step is 10 + 20 * long / steps ms, 20 ms in expectation: `long` is binomial
    // (2000, 1/2), sd 22.4; five sd either side.
    assert!(
        long.abs_diff(steps / 2) <= 112,
        "expected about {} steps of 30 ms, got {long} (mean step {:.2} ms)",
        steps / 2,
        total as f64 / steps as f64 / MS as f64
    );
    assert_eq!(
        continuous_execution_ns("step_residuals = [1.0, 3.0]", 2000, 7),
        total,
        "the same seed draws the same factors"
    );
    assert_ne!(
        continuous_execution_ns("step_residuals = [1.0, 3.0]", 2000, 8),
        total,
        "another seed draws others"
    );
    assert_eq!(
        continuous_execution_ns("", 2000, 7),
        steps * 10 * MS,
        "without residuals every step is the model's 10 ms"
    );
}

#[test]
fn step_residuals_draw_from_their_own_stream_and_leave_every_other_draw_alone() {
    // A profile step time draws each step from the pool's execution stream, and the network's
    // latency from its own: a factor of 1 drawn from a stream of its own changes no record.
    let dir = tempfile::tempdir().unwrap();
    crate::timing::step_profile::tests::synthetic()
        .write(&dir.path().join("steps.json"))
        .unwrap();
    let records = |extra: &str| {
        let s = format!(
            "[network]\nlatency = {{ kind = \"lognormal\", median = \"1ms\", p99 = \"5ms\" }}\n\
             [batcher]\nkind = \"continuous\"\n{extra}\n[kv_cache]\nnum_gpu_blocks = 1000\n\
             [step_time]\nkind = \"profile\"\npath = \"steps.json\"\n"
        );
        std::fs::write(dir.path().join("s.toml"), s).unwrap();
        let scenario = Scenario::from_path(&dir.path().join("s.toml")).unwrap();
        let trace = Trace::from_columns(Columns {
            arrival_ns: (0..60).map(|i| i * 3 * MS).collect(),
            input_tokens: (0..60).map(|i| 20 + i % 7 * 30).collect(),
            output_tokens: Some((0..60).map(|i| 5 + i % 11).collect()),
            ..Columns::default()
        })
        .unwrap();
        let (_, log) = simulate_with_requests(&scenario, &trace, &RunOptions::default()).unwrap();
        log.records().to_vec()
    };
    let without = records("");
    assert_eq!(records("step_residuals = [1.0]"), without);
    assert_ne!(
        records("step_residuals = [1.0, 1.5]"),
        without,
        "factors other than 1 do move the steps"
    );
}
