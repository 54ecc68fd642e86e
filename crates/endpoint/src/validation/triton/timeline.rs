//! A run as Triton's own trace tells it ([`super::trace`]), made into a simulation of that run
//! with the machine taken out of the way: the simulated requests arrive when Triton queued them,
//! its batches take the time fitted to the run's own batches, stretched wherever the run's
//! batches ran slow (the replay input `slowdowns`), and the server's hand-over between batches
//! and its stalled dispatches are replayed (`batcher.dispatch_latency`, `release_latency`, the
//! replay inputs `release_latency_per_request`, `dispatch_residuals` and `pauses`: timings only
//! this run gives, handed to the engine by [`Scenario::set_replay`], never scenario keys). What
//! is left to differ is the queue and the batcher.
//!
//! Each request's end to end in that simulation is its measured time outside Triton's queue and
//! compute (the client's latency less Triton's queue start to compute end) plus its simulated
//! time from arrival to compute end ([`ServerTimeline::join`]).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use capsim_sim::Batcher;
use capsim_sim::scenario::{BatcherSpec, ReplayInputs};
use capsim_sim::timing::non_negative_least_squares;
use capsim_sim::{Outcome, RequestRecord, Scenario, ScenarioError};
use capsim_trace::{Columns, Trace, TraceError};

use super::trace::TracedRequest;

/// A wait of more than this between a batch's readiness and its compute start (past the usual
/// hand-over) is a stall of the server's process, not its rule: it is replayed as a pause and
/// left out of the hand-over's mean.
pub const STALL_NS: u64 = 1_000_000;

/// A replayed stall holds the simulated batcher from this long before the stalled batch could
/// have been formed: a simulation a little ahead of the server still waits with it.
pub const HOLD_MARGIN_NS: u64 = 500_000;

/// A request queued this long before a batch's start and left out of it was left behind.
pub const LEFT_BEHIND_NS: u64 = 50_000;

/// A batch that started within this of another batch's end was taken at a model instance's
/// release.
pub const RELEASE_WINDOW_NS: u64 = 1_000_000;

/// Steps of [`measure_thread_first`]'s bisection: the fraction to 1/128.
const THREAD_FIRST_STEPS: u32 = 7;

/// Between the thread never and always first, a left-behind share that moves less than this
/// cannot see the race (with no queue delay, nothing is left behind either way).
const THREAD_FIRST_SENSITIVITY: f64 = 0.02;

/// Batches taken at a release, and how many of them left a request behind.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LeftBehind {
    /// Batches smaller than `max_batch_size` that started within [`RELEASE_WINDOW_NS`] of a
    /// batch's end.
    pub taken: usize,
    /// Of them, those that left behind a request queued [`LEFT_BEHIND_NS`] before their start.
    pub left: usize,
}

impl LeftBehind {
    /// `left` over `taken`; 0 with none taken.
    pub fn share(&self) -> f64 {
        if self.taken == 0 {
            0.0
        } else {
            self.left as f64 / self.taken as f64
        }
    }

    /// Of `requests` (traced, or simulated: [`executed_requests`]) under a `max_batch_size`.
    /// When Triton's batcher thread wins the race at a batch's end
    /// (the replay's `thread_first_fraction`), the requests waiting behind the growing payload join
    /// it and none is left behind.
    pub fn of(requests: &[TracedRequest], max_batch_size: u32) -> LeftBehind {
        let mut by_queue: Vec<(u64, u64)> = requests
            .iter()
            .map(|r| (r.queue_start_ns, r.compute_start_ns))
            .collect();
        by_queue.sort_unstable();
        // The latest compute start among the requests queued up to each one.
        let latest_start: Vec<u64> = by_queue
            .iter()
            .scan(0, |top, &(_, start)| {
                *top = start.max(*top);
                Some(*top)
            })
            .collect();
        let batches = batches(requests);
        let mut ends: Vec<u64> = batches.iter().map(|b| b.end_ns).collect();
        ends.sort_unstable();
        let mut counted = LeftBehind::default();
        for batch in &batches {
            let start = batch.start_ns;
            let released = ends.partition_point(|&end| end < start);
            if batch.members.len() >= max_batch_size as usize
                || released == 0
                || start - ends[released - 1] > RELEASE_WINDOW_NS
            {
                continue;
            }
            counted.taken += 1;
            let before =
                by_queue.partition_point(|&(q, _)| q < start.saturating_sub(LEFT_BEHIND_NS));
            if before > 0 && latest_start[before - 1] > start {
                counted.left += 1;
            }
        }
        counted
    }
}

/// The run's `thread_first_fraction` (a replay input): the fraction whose simulation leaves requests
/// behind at as many batches taken at a release as the server did (`server`), by bisection on
/// `simulated(fraction)`, the simulation's share (which falls as the fraction grows). `Some(0)`
/// when the server left more behind than a thread never first does; `None` when the share
/// cannot see the race (no batch taken at a release, or a share that moves under 2 points
/// between the thread never and always first).
pub fn measure_thread_first<E>(
    server: LeftBehind,
    mut simulated: impl FnMut(f64) -> Result<f64, E>,
) -> Result<Option<f64>, E> {
    if server.taken == 0 {
        return Ok(None);
    }
    let never = simulated(0.0)?;
    if never - simulated(1.0)? < THREAD_FIRST_SENSITIVITY {
        return Ok(None);
    }
    let target = server.share();
    if never <= target {
        return Ok(Some(0.0));
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..THREAD_FIRST_STEPS {
        let mid = (lo + hi) / 2.0;
        if simulated(mid)? > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(Some((lo + hi) / 2.0))
}

/// A simulation's completed requests as Triton would have traced them (queued at arrival), for
/// [`LeftBehind::of`].
pub fn executed_requests(records: &[RequestRecord]) -> Vec<TracedRequest> {
    records
        .iter()
        .filter(|r| r.outcome == Outcome::Completed)
        .map(|r| TracedRequest {
            request_id: u64::from(r.request),
            queue_start_ns: r.arrival_ns,
            compute_start_ns: r.exec_start_ns,
            compute_end_ns: r.exec_end_ns,
        })
        .collect()
}

/// When a dynamic batcher's batch may start: its oldest request's queue delay over, or at once
/// when it holds a preferred (or the largest) number of requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Readiness {
    /// `max_queue_delay`, in nanoseconds.
    pub delay_ns: u64,
    /// The preferred sizes and `max_batch_size`.
    pub ready_sizes: Vec<u32>,
}

impl Readiness {
    /// The readiness of a scenario's batcher.
    pub fn of(batcher: &BatcherSpec) -> Readiness {
        let mut ready_sizes = batcher.preferred_batch_size.clone();
        ready_sizes.push(batcher.max_batch_size);
        Readiness {
            delay_ns: batcher.max_queue_delay.0,
            ready_sizes,
        }
    }

    /// When a batch whose requests were queued at `queued` (ns, not empty) could start.
    fn ready_at(&self, queued: &[u64]) -> u64 {
        let oldest = queued.iter().copied().min().unwrap_or(0);
        let newest = queued.iter().copied().max().unwrap_or(0);
        let mut ready = oldest + self.delay_ns;
        if self.ready_sizes.contains(&(queued.len() as u32)) {
            ready = ready.min(newest);
        }
        ready
    }
}

/// One of Triton's batches: the traced requests that share a compute start and end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracedBatch {
    /// Compute start, ns on Triton's clock.
    pub start_ns: u64,
    /// Compute end.
    pub end_ns: u64,
    /// Its requests, as indices into the traced requests.
    pub members: Vec<usize>,
}

impl TracedBatch {
    /// Its requests' queue starts, ns.
    fn queued(&self, requests: &[TracedRequest]) -> Vec<u64> {
        self.members
            .iter()
            .map(|&i| requests[i].queue_start_ns)
            .collect()
    }
}

/// `requests` grouped into batches, by compute start then end.
pub fn batches(requests: &[TracedRequest]) -> Vec<TracedBatch> {
    let mut grouped: BTreeMap<(u64, u64), Vec<usize>> = BTreeMap::new();
    for (i, r) in requests.iter().enumerate() {
        grouped
            .entry((r.compute_start_ns, r.compute_end_ns))
            .or_default()
            .push(i);
    }
    grouped
        .into_iter()
        .map(|((start_ns, end_ns), members)| TracedBatch {
            start_ns,
            end_ns,
            members,
        })
        .collect()
}

/// How a model instance passed from one batch to the next, from the trace.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Handover {
    /// Mean time from one batch's compute end to the next one's start on the same instance
    /// when the next was ready before (stalls apart), ns.
    pub turnaround_ns: f64,
    /// Mean wait of a ready batch for an idle instance (stalls apart), ns; 0 when no batch
    /// found its instance idle. A batch ready before its instance's release is taken by the
    /// instance's running thread and pays none of it.
    pub dispatch_ns: f64,
    /// Each of those waits over their mean (stalls apart), in trace order: the dispatch's
    /// spread, replayed as the replay input `dispatch_residuals`. Empty when `dispatch_ns` is 0.
    pub dispatch_residuals: Vec<f64>,
    /// The turnaround fitted as `release_ns + release_per_request_ns * n`, n the size of the
    /// batch that ended (its responses go out first): the part per batch, ns (>= 0).
    pub release_ns: f64,
    /// The part per request of the batch that ended, ns (>= 0).
    pub release_per_request_ns: f64,
    /// Back-to-back batches measured.
    pub turnarounds: usize,
    /// Batches that found their instance idle.
    pub idle_dispatches: usize,
    /// Batches ready with their instance free that started only when a later request arrived.
    pub left_waiting: usize,
    /// Their waits summed, ns.
    pub left_waiting_ns: u64,
}

impl Handover {
    /// The release a simulation pays after each batch: the fitted one with prefetching; without
    /// it, less the dispatch latency, which the measured turnarounds then hold (a batch is
    /// formed only once the instance's thread waits for one) and the simulation pays on every
    /// batch after a release.
    pub fn release_paid_ns(&self, prefetch: bool) -> f64 {
        if prefetch {
            self.release_ns
        } else {
            (self.release_ns - self.dispatch_ns).max(0.0)
        }
    }
}

/// The hand-over of `batches` on `model_instances` instances: each batch goes to the instance
/// free the longest before its start.
pub fn handover(
    requests: &[TracedRequest],
    batches: &[TracedBatch],
    model_instances: usize,
    readiness: &Readiness,
) -> Handover {
    let mut free_at = vec![0u64; model_instances.max(1)];
    let mut last_size = vec![0u32; free_at.len()];
    let (mut turnaround, mut idle_dispatch) = (Vec::new(), Vec::new());
    // (size of the batch that ended, turnaround) of back-to-back batches.
    let mut released = Vec::new();
    let mut out = Handover::default();
    for batch in batches {
        let k = (0..free_at.len())
            .min_by_key(|&i| (free_at[i] > batch.start_ns, free_at[i]))
            .unwrap_or(0);
        let queued = batch.queued(requests);
        let ready = readiness.ready_at(&queued);
        let could = ready.max(free_at[k]);
        let newest = queued.iter().copied().max().unwrap_or(0);
        if batch.start_ns.saturating_sub(could) > STALL_NS
            && batch.start_ns.saturating_sub(newest) < STALL_NS / 2
        {
            out.left_waiting += 1;
            out.left_waiting_ns += batch.start_ns - could;
        }
        if 0 < free_at[k] && free_at[k] <= batch.start_ns && ready < free_at[k] {
            turnaround.push(batch.start_ns - free_at[k]);
            released.push((last_size[k], batch.start_ns - free_at[k]));
        } else if free_at[k] < ready && ready <= batch.start_ns {
            // Ready after its instance was free (a tie is neither: the simulation takes such a
            // batch at the release).
            idle_dispatch.push(batch.start_ns - ready);
        }
        free_at[k] = free_at[k].max(batch.end_ns);
        last_size[k] = batch.members.len() as u32;
    }
    out.turnaround_ns = quick_mean_ns(&turnaround);
    out.turnarounds = turnaround.len();
    out.idle_dispatches = idle_dispatch.len();
    out.dispatch_ns = quick_mean_ns(&idle_dispatch);
    if out.dispatch_ns > 0.0 {
        out.dispatch_residuals = idle_dispatch
            .iter()
            .filter(|&&w| w < STALL_NS)
            .map(|&w| w as f64 / out.dispatch_ns)
            .collect();
    }
    (out.release_ns, out.release_per_request_ns) = release_fit(&released);
    out
}

/// Turnarounds (`(size of the batch that ended, ns)`, stalls apart) fitted as `r0 + r1 * size`
/// by least squares with neither negative: `(r0, r1)` in ns, `(0, 0)` without any.
fn release_fit(released: &[(u32, u64)]) -> (f64, f64) {
    let quick: Vec<&(u32, u64)> = released.iter().filter(|p| p.1 < STALL_NS).collect();
    let rows: Vec<[f64; 3]> = quick
        .iter()
        .map(|&&(n, _)| [1.0, f64::from(n), 0.0])
        .collect();
    let y: Vec<f64> = quick.iter().map(|&&(_, t)| t as f64).collect();
    non_negative_least_squares(&rows, &y, &vec![1.0; rows.len()], 2)
        .map_or((0.0, 0.0), |beta| (beta[0], beta[1]))
}

/// The mean of the waits under [`STALL_NS`] (0 without any): a longer one is a stall, replayed
/// as a pause, which would count twice in a mean.
fn quick_mean_ns(waits_ns: &[u64]) -> f64 {
    let quick: Vec<u64> = waits_ns.iter().copied().filter(|&w| w < STALL_NS).collect();
    if quick.is_empty() {
        0.0
    } else {
        quick.iter().sum::<u64>() as f64 / quick.len() as f64
    }
}

/// A batch's time fitted as `a + b * n + c * n * L` (n requests padded to the longest, L tokens).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchTimeFit {
    /// Per batch, ns (>= 0).
    pub a_ns: f64,
    /// Per request, ns (>= 0).
    pub b_ns: f64,
    /// Per padded token, ns (>= 0).
    pub c_ns: f64,
    /// Batches fitted.
    pub batches: usize,
    /// Of them, those within 1.5 times the fit, which the last fit used.
    pub kept: usize,
}

impl BatchTimeFit {
    /// The fitted time of `size` requests padded to `longest` tokens, ns.
    pub fn at(&self, size: u32, longest: u32) -> f64 {
        let n = f64::from(size);
        self.a_ns + self.b_ns * n + self.c_ns * n * f64::from(longest)
    }
}

/// Each batch's time (`(size, longest, ns)`) fitted on 1, n and n * L: first by least absolute
/// deviations (iteratively reweighted), which a few stalled batches cannot pull, then by least
/// squares over the batches within 1.5 times that fit, twice (the machine's stalls, which the
/// slowdowns carry instead, left out). Each fit is the best with no coefficient negative; of
/// terms that the batches cannot tell apart (n and n * L when every input has one length), the
/// later one is 0. `None` without batches.
pub fn fit_batch_times(samples: &[(u32, u32, f64)]) -> Option<BatchTimeFit> {
    if samples.is_empty() {
        return None;
    }
    let rows: Vec<[f64; 3]> = samples
        .iter()
        .map(|&(n, l, _)| {
            let n = f64::from(n);
            [1.0, n, n * f64::from(l)]
        })
        .collect();
    let y: Vec<f64> = samples.iter().map(|s| s.2).collect();
    let fitted =
        |coef: &[f64; 3], i: usize| -> f64 { rows[i].iter().zip(coef).map(|(x, c)| x * c).sum() };
    // Column 0 (ones) always solves over rows of positive weight, so each fit below is `Some`.
    let fit = |weights: &[f64], last: [f64; 3]| {
        non_negative_least_squares(&rows, &y, weights, 3).unwrap_or(last)
    };
    let mut weights = vec![1.0; samples.len()];
    let mut coef = [0.0; 3];
    for _ in 0..30 {
        coef = fit(&weights, coef);
        for (i, w) in weights.iter_mut().enumerate() {
            *w = 1.0
                / (y[i] - fitted(&coef, i))
                    .abs()
                    .max(1e-3 * y[i].abs().max(1.0));
        }
    }
    let mut keep: Vec<bool> = (0..samples.len())
        .map(|i| y[i] <= 1.5 * fitted(&coef, i))
        .collect();
    for _ in 0..2 {
        if !keep.contains(&true) {
            break;
        }
        let weights: Vec<f64> = keep.iter().map(|&k| if k { 1.0 } else { 0.0 }).collect();
        coef = fit(&weights, coef);
        for (i, k) in keep.iter_mut().enumerate() {
            *k = y[i] <= 1.5 * fitted(&coef, i);
        }
    }
    Some(BatchTimeFit {
        a_ns: coef[0],
        b_ns: coef[1],
        c_ns: coef[2],
        batches: samples.len(),
        kept: keep.iter().filter(|&&k| k).count(),
    })
}

/// The run's speed and stalls on the simulation's clock (ns from the first queue start).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SpeedWindows {
    /// `(from, to, factor)`: each stretch of the run's batches, at their measured over fitted
    /// time (the mean where several model instances' batches overlap), in (0, 1000]; each
    /// window starts where the one before ended (from 0), so the gaps between batches go at the
    /// next batch's speed.
    pub slowdowns: Vec<(u64, u64, f64)>,
    /// `(from, to)`: where a ready batch waited [`STALL_NS`] or more after its readiness or its
    /// instance's release, whichever came later (one model instance only; a wait the means
    /// of the hand-over leave out), and started past the mean turnaround: the batcher, not the
    /// model, was held. Each runs from
    /// [`HOLD_MARGIN_NS`] before the batch could have been formed (not before its oldest
    /// request's queue start or the previous batch's start) to when it was (a dispatch latency
    /// before compute): the simulated batcher forms its batch then, from all that waited, as
    /// Triton's did when it woke.
    pub pauses: Vec<(u64, u64)>,
}

/// How a run's batches were handed to the model instances: the inputs of [`speed_windows`]
/// besides the batches.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hand {
    /// The turnaround between back-to-back batches, ns.
    pub turnaround_ns: f64,
    /// The dispatch latency, ns.
    pub dispatch_ns: f64,
    /// Model instances.
    pub model_instances: usize,
}

/// [`SpeedWindows`] of `batches`, each with its fitted time `nominal_ns` (same order), the
/// simulation's clock starting at `t0`.
pub fn speed_windows(
    requests: &[TracedRequest],
    batches: &[TracedBatch],
    nominal_ns: &[f64],
    t0: u64,
    readiness: &Readiness,
    hand: Hand,
) -> SpeedWindows {
    let Hand {
        turnaround_ns,
        dispatch_ns,
        model_instances,
    } = hand;
    let mut pauses = Vec::new();
    if model_instances == 1 {
        let mut free_at: Option<u64> = None;
        let mut previous_start = 0;
        for batch in batches {
            let queued = batch.queued(requests);
            let ready = readiness.ready_at(&queued);
            let could = free_at.map_or(ready, |f| ready.max(f + turnaround_ns.round() as u64));
            // Held until the batch was formed (its compute start less the dispatch latency),
            // from [`HOLD_MARGIN_NS`] before it could have been, but not before its oldest
            // request's queue start or the previous batch's start: the server formed no batch
            // in between, and a simulation a little ahead of it must not either.
            let dispatch = dispatch_ns.round() as u64;
            let formed = batch.start_ns.saturating_sub(dispatch);
            let oldest = queued.iter().copied().min().unwrap_or(formed);
            let hold = could
                .saturating_sub(dispatch + HOLD_MARGIN_NS)
                .max(oldest)
                .max(previous_start);
            // A stall is a wait the hand-over's means leave out ([`quick_mean_ns`]: from the
            // later of readiness and the instance's release, [`STALL_NS`] or more), replayed
            // past where the mean would have started the batch.
            let waited = batch
                .start_ns
                .saturating_sub(free_at.map_or(ready, |f| ready.max(f)));
            if waited >= STALL_NS && batch.start_ns > could && hold >= t0 && formed > hold {
                pauses.push((hold - t0, formed - t0));
            }
            free_at = Some(batch.end_ns);
            previous_start = batch.start_ns;
        }
    }
    let mut edges: Vec<u64> = batches
        .iter()
        .flat_map(|b| [b.start_ns, b.end_ns])
        .collect();
    edges.sort_unstable();
    edges.dedup();
    let mut timed: Vec<(u64, u64, f64)> = batches
        .iter()
        .zip(nominal_ns)
        .filter(|(b, _)| b.end_ns > b.start_ns)
        .map(|(b, &nominal)| {
            let factor = if nominal > 0.0 {
                (b.end_ns - b.start_ns) as f64 / nominal
            } else {
                1.0
            };
            (b.start_ns, b.end_ns, factor)
        })
        .collect();
    timed.sort_by_key(|x| (x.0, x.1));
    let mut slowdowns = Vec::new();
    let mut active: Vec<(u64, u64, f64)> = Vec::new();
    let mut next = 0;
    for pair in edges.windows(2) {
        let (lo, hi) = (pair[0], pair[1]);
        while next < timed.len() && timed[next].0 <= lo {
            active.push(timed[next]);
            next += 1;
        }
        active.retain(|b| b.1 > lo);
        if active.is_empty() || lo < t0 {
            continue;
        }
        let mean = active.iter().map(|b| b.2).sum::<f64>() / active.len() as f64;
        // From where the last window ended: a simulated batch that starts a little before the
        // run's (nothing ran in between) still runs at its speed.
        let from = slowdowns.last().map_or(0, |w: &(u64, u64, f64)| w.1);
        slowdowns.push((from, hi - t0, mean.clamp(1e-3, 1000.0)));
    }
    SpeedWindows { slowdowns, pauses }
}

/// A traced run ready to simulate: its requests (those the client sent, in queue order), the
/// batch time fitted to its batches, its hand-over and its speed.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTimeline {
    requests: Vec<TracedRequest>,
    tokens: Vec<u32>,
    /// The batches' time, fitted.
    pub fit: BatchTimeFit,
    /// The model instances' hand-over.
    pub handover: Handover,
    /// The run's speed and stalls.
    pub windows: SpeedWindows,
    /// Batches traced.
    pub batches: usize,
}

/// Each request's times in a [`ServerTimeline`]'s simulation beside the server's, in ms.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Joined {
    /// End to end: the measured time outside the server plus the simulated time inside, of the
    /// requests completed both in the run and in the simulation.
    pub e2e_ms: Vec<f64>,
    /// Triton's queue time (queue start to compute start) of the requests the simulation
    /// completed.
    pub queue_server_ms: Vec<f64>,
    /// The simulation's (arrival to compute start), same requests.
    pub queue_sim_ms: Vec<f64>,
}

impl ServerTimeline {
    /// The timeline of a run's `traced` requests; `tokens_by_id[id]` is the input the client
    /// sent as request `id` (other ids, another client's, are left out). `None` when no traced
    /// request is the run's.
    pub fn new(
        traced: &[TracedRequest],
        tokens_by_id: &[u32],
        model_instances: usize,
        readiness: &Readiness,
    ) -> Option<ServerTimeline> {
        let requests: Vec<TracedRequest> = traced
            .iter()
            .copied()
            .filter(|r| (r.request_id as usize) < tokens_by_id.len())
            .collect();
        let tokens: Vec<u32> = requests
            .iter()
            .map(|r| tokens_by_id[r.request_id as usize])
            .collect();
        let batches = batches(&requests);
        let longest = |b: &TracedBatch| b.members.iter().map(|&i| tokens[i]).max().unwrap_or(0);
        let samples: Vec<(u32, u32, f64)> = batches
            .iter()
            .map(|b| {
                (
                    b.members.len() as u32,
                    longest(b),
                    (b.end_ns - b.start_ns) as f64,
                )
            })
            .collect();
        let fit = fit_batch_times(&samples)?;
        let handover = handover(&requests, &batches, model_instances, readiness);
        let nominal: Vec<f64> = batches
            .iter()
            .map(|b| fit.at(b.members.len() as u32, longest(b)))
            .collect();
        let t0 = requests.first()?.queue_start_ns;
        let windows = speed_windows(
            &requests,
            &batches,
            &nominal,
            t0,
            readiness,
            Hand {
                turnaround_ns: handover.turnaround_ns,
                dispatch_ns: handover.dispatch_ns,
                model_instances,
            },
        );
        Some(ServerTimeline {
            batches: batches.len(),
            requests,
            tokens,
            fit,
            handover,
            windows,
        })
    }

    /// The run's batches taken at a release that left a request behind ([`LeftBehind::of`]).
    pub fn left_behind(&self, max_batch_size: u32) -> LeftBehind {
        LeftBehind::of(&self.requests, max_batch_size)
    }

    /// Requests traced in the run.
    pub fn requests(&self) -> usize {
        self.requests.len()
    }

    /// The simulation's trace: each request at its queue start (from the first), with its input.
    pub fn trace(&self) -> Result<Trace, Box<TraceError>> {
        let t0 = self.requests.first().map_or(0, |r| r.queue_start_ns);
        Trace::from_columns(Columns {
            arrival_ns: self
                .requests
                .iter()
                .map(|r| r.queue_start_ns - t0)
                .collect(),
            input_tokens: self.tokens.clone(),
            ..Columns::default()
        })
        .map_err(Box::new)
    }

    /// Makes `scenario` the run's server: one server with nothing outside its queue and model
    /// (the measured time outside is added back by [`ServerTimeline::join`]), the fitted batch
    /// time, the hand-over and the run's speed and stalls.
    pub fn apply(&self, scenario: &mut Scenario) -> Result<(), ScenarioError> {
        let ms = |ns: f64| format!("\"{:.9}ms\"", ns.max(0.0) * 1e-6);
        scenario.set("instances", "1")?;
        scenario.set(
            "network",
            "{ latency = { kind = \"constant\", one_way = \"0ns\" } }",
        )?;
        scenario.set("gateway.overhead", "\"0ns\"")?;
        scenario.set("preprocess", "{}")?;
        scenario.set("postprocess", "{}")?;
        scenario.set(
            "service",
            &format!(
                "{{ kind = \"affine\", a = {}, b = {}, c = {} }}",
                ms(self.fit.a_ns),
                ms(self.fit.b_ns),
                ms(self.fit.c_ns)
            ),
        )?;
        let pool = &scenario.pools()[0];
        let prefetch =
            Batcher::new(&pool.batcher, &pool.replay, pool.queue.allows_prefetch()).prefetch;
        scenario.set("batcher.dispatch_latency", &ms(self.handover.dispatch_ns))?;
        // The run's own batch ends left waiting are replayed as pauses, not drawn.
        scenario.set("batcher.missed_release", "0")?;
        scenario.set(
            "batcher.release_latency",
            &ms(self.handover.release_paid_ns(prefetch)),
        )?;
        let inputs =
            ReplayInputs::from_toml_str(&self.replay_inputs_toml(), Path::new("server trace"))?;
        scenario.set_replay(inputs)
    }

    /// The run's replay inputs as a replay-inputs file (`capsim simulate --replay-inputs`): the
    /// dispatch's spread, the hand-over per request, and the run's speed and stalls, each
    /// written to the precision the replay uses.
    pub fn replay_inputs_toml(&self) -> String {
        let ms = |ns: f64| format!("\"{:.9}ms\"", ns.max(0.0) * 1e-6);
        let mut lines = vec![
            "# Measured from a server's trace by `capsim validate --endpoint --server-trace`: replay inputs, not scenario keys".to_string(),
        ];
        if !self.handover.dispatch_residuals.is_empty() {
            let ratios: Vec<String> = self
                .handover
                .dispatch_residuals
                .iter()
                .map(|r| format!("{r:.4}"))
                .collect();
            lines.push(format!("dispatch_residuals = [{}]", ratios.join(", ")));
        }
        lines.push(format!(
            "release_latency_per_request = {}",
            ms(self.handover.release_per_request_ns)
        ));
        let slowdowns: Vec<String> = self
            .windows
            .slowdowns
            .iter()
            .map(|&(from, to, factor)| {
                format!("{{ from = \"{from}ns\", to = \"{to}ns\", factor = {factor:.6} }}")
            })
            .collect();
        lines.push(format!("slowdowns = [{}]", slowdowns.join(", ")));
        let pauses: Vec<String> = self
            .windows
            .pauses
            .iter()
            .map(|&(from, to)| format!("{{ from = \"{from}ns\", to = \"{to}ns\" }}"))
            .collect();
        lines.push(format!("pauses = [{}]", pauses.join(", ")));
        lines.join("\n") + "\n"
    }

    /// The simulation's records (`simulated`, of [`ServerTimeline::trace`]) beside the run:
    /// `measured_latency_ns(id)` is the client's end to end of request `id` when it completed.
    pub fn join(
        &self,
        measured_latency_ns: impl Fn(u64) -> Option<u64>,
        simulated: &[RequestRecord],
    ) -> Joined {
        let completed: HashMap<u32, &RequestRecord> = simulated
            .iter()
            .filter(|r| r.outcome == Outcome::Completed)
            .map(|r| (r.request, r))
            .collect();
        let mut joined = Joined::default();
        for (row, r) in self.requests.iter().enumerate() {
            let Some(s) = completed.get(&(row as u32)) else {
                continue;
            };
            joined
                .queue_server_ms
                .push((r.compute_start_ns - r.queue_start_ns) as f64 * 1e-6);
            joined
                .queue_sim_ms
                .push(s.exec_start_ns.saturating_sub(s.arrival_ns) as f64 * 1e-6);
            if let Some(latency) = measured_latency_ns(r.request_id) {
                let inside_server = (r.compute_end_ns - r.queue_start_ns) as f64;
                let inside_sim = s.exec_end_ns.saturating_sub(s.arrival_ns) as f64;
                joined
                    .e2e_ms
                    .push((latency as f64 - inside_server + inside_sim) * 1e-6);
            }
        }
        joined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(id: u64, queue: u64, start: u64, end: u64) -> TracedRequest {
        TracedRequest {
            request_id: id,
            queue_start_ns: queue,
            compute_start_ns: start,
            compute_end_ns: end,
        }
    }

    const MS: u64 = 1_000_000;

    fn no_delay() -> Readiness {
        Readiness {
            delay_ns: 0,
            ready_sizes: vec![8],
        }
    }

    #[test]
    fn the_fit_recovers_a_b_and_c_and_leaves_the_stalled_batches_out() {
        let truth = BatchTimeFit {
            a_ns: 200_000.0,
            b_ns: 50_000.0,
            c_ns: 8_000.0,
            batches: 0,
            kept: 0,
        };
        let mut samples = Vec::new();
        for n in 1..=8u32 {
            for l in [16u32, 64, 200, 512] {
                samples.push((n, l, truth.at(n, l)));
            }
        }
        // Two batches stalled ten times their time.
        samples.push((2, 64, 10.0 * truth.at(2, 64)));
        samples.push((5, 200, 10.0 * truth.at(5, 200)));
        let fit = fit_batch_times(&samples).unwrap();
        for (got, want) in [
            (fit.a_ns, truth.a_ns),
            (fit.b_ns, truth.b_ns),
            (fit.c_ns, truth.c_ns),
        ] {
            assert!((got - want).abs() < 1e-6 * want, "fit {fit:?}");
        }
        assert_eq!((fit.batches, fit.kept), (34, 32));
        assert_eq!(fit_batch_times(&[]), None);
    }

    #[test]
    fn terms_the_batches_cannot_tell_apart_fit_the_times_all_the_same() {
        // Every input 16 tokens: n and 16 n are one column; 2 ms + 0.5 ms per request.
        let samples: Vec<(u32, u32, f64)> = (1..=8)
            .map(|n| (n, 16, 2e6 + 0.5e6 * f64::from(n)))
            .collect();
        let fit = fit_batch_times(&samples).unwrap();
        for n in 1..=8 {
            let want = 2e6 + 0.5e6 * f64::from(n);
            assert!((fit.at(n, 16) - want).abs() < 1.0, "{fit:?} at {n}");
        }
    }

    #[test]
    fn a_batch_taken_at_a_release_that_leaves_an_earlier_request_queued_left_it_behind() {
        let requests = vec![
            // A: two requests, 0-10 ms.
            request(0, 0, MS, 10 * MS),
            request(1, MS / 2, MS, 10 * MS),
            // B = [r2], taken at A's release, leaves r3 (queued at 5 ms) behind.
            request(2, 4 * MS, 10 * MS + MS / 10, 20 * MS),
            // C = [r3], taken at B's release, leaves nothing: r4 came after C started.
            request(3, 5 * MS, 20 * MS + MS / 10, 30 * MS),
            // D = [r4] and E = [r5] start 10 ms after a batch's end: not at a release.
            request(4, 20 * MS + MS / 5, 40 * MS, 50 * MS),
            request(5, 45 * MS, 60 * MS, 70 * MS),
        ];
        let counted = LeftBehind::of(&requests, 8);
        assert_eq!(
            counted,
            LeftBehind { taken: 2, left: 1 },
            "B and C taken, B left r3"
        );
        assert_eq!(counted.share(), 0.5);
        // With max_batch_size 1, every batch is full: none is counted.
        assert_eq!(LeftBehind::of(&requests, 1), LeftBehind::default());
    }

    #[test]
    fn the_thread_first_fraction_is_where_the_simulated_share_meets_the_servers() {
        let server = LeftBehind {
            taken: 100,
            left: 30,
        };
        let linear = |f: f64| Ok::<_, ()>(0.5 - 0.4 * f);
        let f = measure_thread_first(server, linear).unwrap().unwrap();
        assert!((f - 0.5).abs() <= 1.0 / 128.0, "{f}");
        // More left behind by the server than by a thread never first: the instance first.
        let fewer = |f: f64| Ok::<_, ()>(0.2 - 0.1 * f);
        assert_eq!(measure_thread_first(server, fewer), Ok(Some(0.0)));
        // A share the race does not move, or no batch at a release: not measurable.
        let flat = |_: f64| Ok::<_, ()>(0.31);
        assert_eq!(measure_thread_first(server, flat), Ok(None));
        assert_eq!(
            measure_thread_first(LeftBehind::default(), linear),
            Ok(None)
        );
    }

    #[test]
    fn handover_takes_dispatch_from_idle_starts_and_release_per_request_from_turnarounds() {
        // One instance, no delay. Batch A = [r1] runs 0-10 ms; B = [r2, r3], waiting through
        // it, starts 0.1 ms after A ends (10.1-20 ms); C = [r4] waits through B and starts
        // 0.15 ms after it (20.15-25 ms). r5 arrives at 30 ms to an idle instance and starts
        // 0.1 ms later (idle dispatch). Turnarounds: 0.1 ms after one request, 0.15 after two.
        let requests = vec![
            request(1, 0, 0, 10 * MS),
            request(2, 2 * MS, 10 * MS + 100_000, 20 * MS),
            request(3, 3 * MS, 10 * MS + 100_000, 20 * MS),
            request(4, 12 * MS, 20 * MS + 150_000, 25 * MS),
            request(5, 30 * MS, 30 * MS + 100_000, 35 * MS),
        ];
        let batches = batches(&requests);
        assert_eq!(batches.len(), 4);
        let h = handover(&requests, &batches, 1, &no_delay());
        assert_eq!((h.turnarounds, h.idle_dispatches), (2, 1));
        assert!((h.turnaround_ns - 125_000.0).abs() < 1e-6, "{h:?}");
        // r5's; the first batch, ready as the instance's (unset) release, counts as neither.
        assert!((h.dispatch_ns - 100_000.0).abs() < 1e-6, "{h:?}");
        // 0.05 ms + 0.05 ms per request of the batch that ended.
        assert!((h.release_ns - 50_000.0).abs() < 1e-3, "{h:?}");
        assert!((h.release_per_request_ns - 50_000.0).abs() < 1e-3, "{h:?}");
        assert_eq!(h.left_waiting, 0);
        // Without prefetching a simulated batch after a release also pays the dispatch, which
        // these turnarounds hold: the release paid is the fitted one less the dispatch.
        assert!((h.release_paid_ns(true) - 50_000.0).abs() < 1e-3);
        assert!(
            h.release_paid_ns(false).abs() < 1e-3,
            "0.05 - 0.1 ms, held at 0"
        );
    }

    #[test]
    fn handover_keeps_each_idle_dispatch_over_their_mean_leaving_stalls_out() {
        // Three requests, each to an idle instance: dispatched after 0.1 ms, 0.3 ms and 2 ms
        // (a stall, replayed as a pause and kept out of the mean and the spread).
        let requests = vec![
            request(1, MS, MS + 100_000, 5 * MS),
            request(2, 10 * MS, 10 * MS + 300_000, 15 * MS),
            request(3, 20 * MS, 22 * MS, 25 * MS),
        ];
        let batches = batches(&requests);
        let h = handover(&requests, &batches, 1, &no_delay());
        assert_eq!(h.idle_dispatches, 3);
        assert!((h.dispatch_ns - 200_000.0).abs() < 1e-6, "{h:?}");
        let spread: Vec<f64> = h.dispatch_residuals.iter().map(|r| r * 10.0).collect();
        assert_eq!(spread.len(), 2, "{h:?}");
        assert!(
            (spread[0] - 5.0).abs() < 1e-9 && (spread[1] - 15.0).abs() < 1e-9,
            "0.5 and 1.5 of the mean: {:?}",
            h.dispatch_residuals
        );
    }

    #[test]
    fn a_ready_batch_that_starts_only_with_a_later_arrival_is_left_waiting_and_paused() {
        // Request 1 is ready at 0 with the instance idle, but its batch starts at 20 ms, with
        // request 2 that arrived at 19.9 ms.
        let requests = vec![
            request(1, 0, 20 * MS, 25 * MS),
            request(2, 19_900_000, 20 * MS, 25 * MS),
        ];
        let batches = batches(&requests);
        let h = handover(&requests, &batches, 1, &no_delay());
        assert_eq!(h.left_waiting, 1);
        assert_eq!(h.left_waiting_ns, 20 * MS);
        let hand = Hand {
            turnaround_ns: 0.0,
            dispatch_ns: 0.1e6,
            model_instances: 1,
        };
        let w = speed_windows(&requests, &batches, &[5e6], 0, &no_delay(), hand);
        // From its oldest request's queue start until it was formed, 0.1 ms (its dispatch)
        // before its compute.
        assert_eq!(w.pauses, vec![(0, 20 * MS - 100_000)]);
        assert_eq!(w.slowdowns, vec![(0, 25 * MS, 1.0)]);
    }

    #[test]
    fn a_hand_over_the_mean_leaves_out_is_paused_past_the_mean_turnaround() {
        // Back to back: the second batch was ready before the first ended at 10 ms and started
        // 1.2 ms after it: over STALL_NS, so out of the turnaround's mean (0.3 ms here), but
        // under the mean and STALL_NS together. It is paused from where the mean would have
        // started it, less the hold's margin, to when it was formed.
        let requests = vec![
            request(1, 0, 0, 10 * MS),
            request(2, MS, 11_200_000, 16 * MS),
        ];
        let batches = batches(&requests);
        let hand = Hand {
            turnaround_ns: 300_000.0,
            dispatch_ns: 100_000.0,
            model_instances: 1,
        };
        let w = speed_windows(&requests, &batches, &[10e6, 4.8e6], 0, &no_delay(), hand);
        // could = 10.3 ms; hold = 10.3 - 0.1 - 0.5 ms; formed = 11.2 - 0.1 ms.
        assert_eq!(w.pauses, vec![(9_700_000, 11_100_000)]);
        // A hand-over under STALL_NS is the mean's, not a pause.
        let quick = vec![
            request(1, 0, 0, 10 * MS),
            request(2, MS, 10_900_000, 16 * MS),
        ];
        let w = speed_windows(
            &quick,
            &super::batches(&quick),
            &[10e6, 5.1e6],
            0,
            &no_delay(),
            hand,
        );
        assert!(w.pauses.is_empty(), "{:?}", w.pauses);
    }

    /// A "server" that is capsim itself: a run of the scenario, traced as Triton would trace it
    /// (queue start = arrival, compute start and end of each batch).
    fn simulated_server(scenario: &Scenario, trace: &Trace) -> Vec<TracedRequest> {
        let built = capsim_sim::build::build(scenario, &mut Default::default()).unwrap();
        let (_, log) =
            capsim_sim::simulate_with_requests(&built, trace, &Default::default()).unwrap();
        log.records()
            .iter()
            .filter(|r| r.outcome == Outcome::Completed)
            .map(|r| {
                request(
                    u64::from(r.request),
                    r.queued_ns,
                    r.exec_start_ns,
                    r.exec_end_ns,
                )
            })
            .collect()
    }

    #[test]
    fn a_run_simulated_on_its_own_timeline_gives_back_its_queue_times_and_latencies() {
        // A dynamic batcher whose batches take 1 ms + 0.2 ms per request + 2 us per padded
        // token, half speed from 300 to 400 ms, with 50 us of dispatch.
        let mut server = Scenario::from_toml_str(
            "name = \"s\"\n[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"1ms\"\n\
             dispatch_latency = \"50us\"\n[queue]\nmax_queue_size = 100\n\
             [service]\nkind = \"affine\"\na = \"1ms\"\nb = \"0.2ms\"\nc = \"2us\"\n",
        )
        .unwrap();
        let slow = "slowdowns = [{ from = \"300ms\", to = \"400ms\", factor = 2.0 }]";
        server
            .set_replay(ReplayInputs::from_toml_str(slow, Path::new("test")).unwrap())
            .unwrap();
        let n = 1500u64;
        let tokens: Vec<u32> = (0..n).map(|i| 16 + (i * 37 % 200) as u32).collect();
        let trace = Trace::from_columns(Columns {
            arrival_ns: (0..n)
                // Off the microsecond grid of the batch times, so that no arrival ties a batch's
                // end (whose order the fitted replay could not keep).
                .map(|i| i * 1_200_000 + (i * 7919 % 11) * 100_000 + (i * 104_729 % 997) * 1_013)
                .collect(),
            input_tokens: tokens.clone(),
            ..Columns::default()
        })
        .unwrap();
        let traced = simulated_server(&server, &trace);
        let readiness = Readiness::of(&server.pools()[0].batcher);
        let timeline = ServerTimeline::new(&traced, &tokens, 1, &readiness).unwrap();
        assert_eq!(timeline.requests(), n as usize);
        let fit = timeline.fit;
        // The batches slowed by the window (most of the batches of eight) pull the fit by a few
        // percent; the replay takes each batch's own time through the slowdowns.
        assert!(
            (fit.a_ns - 1e6).abs() < 5e4
                && (fit.b_ns - 0.2e6).abs() < 1e4
                && (fit.c_ns - 2e3).abs() < 40.0,
            "{fit:?}"
        );
        assert!(
            (timeline.handover.dispatch_ns - 50e3).abs() < 1e3,
            "{:?}",
            timeline.handover
        );
        let mut replayed = Scenario::from_toml_str(
            "name = \"r\"\n[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"1ms\"\n\
             [queue]\nmax_queue_size = 100\n[service]\nkind = \"affine\"\na = \"9ms\"\n",
        )
        .unwrap();
        timeline.apply(&mut replayed).unwrap();
        let built = capsim_sim::build::build(&replayed, &mut Default::default()).unwrap();
        let (_, log) = capsim_sim::simulate_with_requests(
            &built,
            &timeline.trace().unwrap(),
            &Default::default(),
        )
        .unwrap();
        // The client's latency: 0.3 ms each way around the server. Within 10 us: the fit is
        // not exact where the slowdown cut batches in two, so a batch may start a few
        // microseconds off the run's.
        let latency = |id: u64| {
            let r = traced.iter().find(|r| r.request_id == id)?;
            Some(r.compute_end_ns - r.queue_start_ns + 600_000)
        };
        let joined = timeline.join(latency, log.records());
        assert_eq!(joined.e2e_ms.len(), n as usize);
        // Within 10 us for 99 in 100: the fit is not exact where the slowdown cut
        // batches in two, and a batch that ends a few hundred nanoseconds off the run's can
        // swap its order with an arrival, which then waits for the next batch (and the few
        // behind it until the queue empties: 9 requests once here).
        let off = |server: &[f64], sim: &[f64]| -> Vec<usize> {
            (0..server.len())
                .filter(|&k| (server[k] - sim[k]).abs() >= 0.01)
                .collect()
        };
        let queue_off = off(&joined.queue_server_ms, &joined.queue_sim_ms);
        assert!(
            queue_off.len() <= n as usize / 100,
            "{} requests' queue times off by 10 us or more: {:?}",
            queue_off.len(),
            queue_off
                .iter()
                .map(|&k| (k, joined.queue_server_ms[k], joined.queue_sim_ms[k]))
                .collect::<Vec<_>>()
        );
        let measured_e2e: Vec<f64> = traced
            .iter()
            .map(|r| (r.compute_end_ns - r.queue_start_ns + 600_000) as f64 * 1e-6)
            .collect();
        let e2e_off = off(&measured_e2e, &joined.e2e_ms);
        assert!(
            e2e_off.len() <= n as usize / 100,
            "{} requests' end to end off by 10 us or more",
            e2e_off.len()
        );
    }

    #[test]
    fn overlapping_batches_of_two_instances_slow_their_overlap_by_the_mean_factor() {
        // Instance 1: 0-10 ms at twice its fit; instance 2: 5-15 ms at its fit.
        let requests = vec![
            request(1, 0, 0, 10 * MS),
            request(2, 5 * MS, 5 * MS, 15 * MS),
        ];
        let batches = batches(&requests);
        let hand = Hand {
            turnaround_ns: 0.0,
            dispatch_ns: 0.0,
            model_instances: 2,
        };
        let w = speed_windows(&requests, &batches, &[5e6, 10e6], 0, &no_delay(), hand);
        assert_eq!(
            w.slowdowns,
            vec![
                (0, 5 * MS, 2.0),
                (5 * MS, 10 * MS, 1.5),
                (10 * MS, 15 * MS, 1.0)
            ]
        );
        assert!(w.pauses.is_empty(), "two instances: no pauses");
    }
}
