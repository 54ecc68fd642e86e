// Over 800 lines: the figures, errors and shares of validate --endpoint and their table are one report; 220 of them are its tests.
//! A measured run beside its simulations, as `capsim validate --endpoint` prints and writes it:
//! throughput, end-to-end percentiles and the mean queue time, each simulation's relative error
//! against the measurement, the batch-size shares with their worst gap, and the server's
//! compute time per batch size against the service model's (the calibration's drift).
//!
//! Two simulations of the same trace: `sim`, with the scenario's (or the profile's) service
//! model, and `run-sim`, with the service times the server itself reported during the run. The
//! second leaves only the queue and the batcher between the server and the simulator; the first
//! adds the drift of the service model.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use capsim_sim::record::RequestRecord;
use capsim_sim::scenario::Pool;
use capsim_sim::summary::LatencyStats;
use capsim_sim::{BatchShape, ServiceTime, Summary};
use serde::Serialize;

/// The share of a load's requests that may fail before the printout warns: past it the
/// measured figures describe a server in trouble (a traced Triton that crashed mid-run failed
/// 1,613 of 2,991).
const WARN_FAILED_SHARE: f64 = 0.1;
/// `(simulated - measured) / measured`; `None` when the measured value is 0 or not finite.
pub fn relative_error(simulated: f64, measured: f64) -> Option<f64> {
    (measured != 0.0 && measured.is_finite() && simulated.is_finite())
        .then(|| (simulated - measured) / measured)
}

/// The rate that saturates a pool: every model instance running full batches back to back,
/// `model instances x max_batch_size / mean time of a full batch` ("calibrated capacity"). A full
/// batch is `max_batch_size` consecutive requests of the trace, padded to the longest of them, as
/// the server pads them: with inputs of uneven length a batch costs what its longest input
/// costs, far more than a batch at the mean length.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CalibratedCapacity {
    /// Requests per second.
    pub rate_rps: f64,
    /// Model instances of the pool: instances x GPUs x instance count.
    pub model_instances: u32,
    /// The batcher's `max_batch_size`.
    pub max_batch_size: u32,
    /// The trace's mean input length, in tokens (rounded up).
    pub mean_input_tokens: u32,
    /// The mean longest input of a full batch (what it is padded to), in tokens (rounded up).
    pub padded_input_tokens: u32,
    /// The service model's mean time of a full batch, in milliseconds.
    pub full_batch_ms: f64,
}

impl CalibratedCapacity {
    /// The capacity of `pool` with `service`'s times for requests of `input_tokens` (the
    /// trace's, as the server sees them, in arrival order): the full batches are the trace's
    /// consecutive runs of `max_batch_size` requests (wrapping around at its end, so a trace
    /// shorter than a batch still fills one). `None` for an empty trace or a batch timed at 0.
    pub fn of(
        pool: &Pool,
        service: &dyn ServiceTime,
        input_tokens: &[u32],
    ) -> Option<CalibratedCapacity> {
        if input_tokens.is_empty() {
            return None;
        }
        let model_instances = pool.instances * pool.execution.gpus * pool.execution.instance_count;
        let n = input_tokens.len();
        let mean = input_tokens.iter().map(|&t| f64::from(t)).sum::<f64>() / n as f64;
        let max_batch_size = pool.batcher.max_batch_size.max(1);
        let batch = max_batch_size as usize;
        let (mut time_ns, mut padded, mut batches) = (0.0, 0.0, 0usize);
        for start in (0..n).step_by(batch) {
            let lengths = (start..start + batch).map(|i| input_tokens[i % n]);
            let longest = lengths.clone().max().unwrap_or(0);
            let shape = BatchShape {
                size: max_batch_size,
                max_input_tokens: longest,
                total_input_tokens: lengths.map(u64::from).sum(),
                // At capacity a model instance runs batches back to back.
                idle_ns: 0,
            };
            time_ns += service.mean_ns(&shape);
            padded += f64::from(longest);
            batches += 1;
        }
        let full_batch_ns = time_ns / batches as f64;
        (full_batch_ns > 0.0 && full_batch_ns.is_finite()).then(|| CalibratedCapacity {
            rate_rps: f64::from(model_instances) * f64::from(max_batch_size)
                / (full_batch_ns * 1e-9),
            model_instances,
            max_batch_size,
            mean_input_tokens: mean.ceil() as u32,
            padded_input_tokens: (padded / batches as f64).ceil() as u32,
            full_batch_ms: full_batch_ns * 1e-6,
        })
    }
}

/// The figures compared, of one run (measured or simulated).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Completions per second over the run's span.
    pub throughput_rps: f64,
    /// End-to-end latency percentiles of completed requests, in milliseconds.
    pub e2e_p50_ms: f64,
    /// 90th percentile.
    pub e2e_p90_ms: f64,
    /// 99th percentile.
    pub e2e_p99_ms: f64,
    /// Mean time in the server's queue, in milliseconds; `None` when unknown (a client sees no
    /// queue: a measured run's comes from the server's statistics).
    pub queue_mean_ms: Option<f64>,
}

impl Figures {
    /// A run's figures from its summary; the queue mean from its `queue` stage, when it has one.
    pub fn of(summary: &Summary) -> Figures {
        let empty = LatencyStats::default();
        let e2e = summary.latency_ms.get("end_to_end").unwrap_or(&empty);
        Figures {
            throughput_rps: summary.throughput_rps,
            e2e_p50_ms: e2e.p50_ms,
            e2e_p90_ms: e2e.p90_ms,
            e2e_p99_ms: e2e.p99_ms,
            queue_mean_ms: summary.latency_ms.get("queue").map(|q| q.mean_ms),
        }
    }

    /// The mean of each figure over `draws` (several seeds of one simulation); the first's
    /// throughput. `None` without any.
    pub fn mean(draws: &[Figures]) -> Option<Figures> {
        let first = draws.first()?;
        let n = draws.len() as f64;
        let mean = |f: &dyn Fn(&Figures) -> f64| draws.iter().map(f).sum::<f64>() / n;
        Some(Figures {
            throughput_rps: first.throughput_rps,
            e2e_p50_ms: mean(&|f| f.e2e_p50_ms),
            e2e_p90_ms: mean(&|f| f.e2e_p90_ms),
            e2e_p99_ms: mean(&|f| f.e2e_p99_ms),
            queue_mean_ms: draws
                .iter()
                .map(|f| f.queue_mean_ms)
                .sum::<Option<f64>>()
                .map(|sum| sum / n),
        })
    }

    /// Each figure's relative error (`relative_error`) against `measured`.
    pub fn errors_against(&self, measured: &Figures) -> Errors {
        Errors {
            throughput: relative_error(self.throughput_rps, measured.throughput_rps),
            e2e_p50: relative_error(self.e2e_p50_ms, measured.e2e_p50_ms),
            e2e_p90: relative_error(self.e2e_p90_ms, measured.e2e_p90_ms),
            e2e_p99: relative_error(self.e2e_p99_ms, measured.e2e_p99_ms),
            queue_mean: self
                .queue_mean_ms
                .zip(measured.queue_mean_ms)
                .and_then(|(s, m)| relative_error(s, m)),
        }
    }
}

/// How a simulation's end-to-end p99 spreads over its seeds, and where the measured run's falls
/// among them. Each seed draws again whatever the scenario draws (the compute's spread, the speed
/// windows, the batch ends slept through), as a rerun of the server draws its machine again: near
/// the load where the queue tips over, one draw's p99 can be several times another's, and then no
/// single figure, measured or simulated, pins the point down.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SeedSpread {
    /// Each seed's end-to-end p99, ms, ascending.
    pub e2e_p99_ms: Vec<f64>,
    /// The share of seeds whose p99 lies below the measured run's, a tie counting half: about
    /// 0.5 where the run sits inside the simulated spread; 0 or 1 where it lies outside it.
    /// Over many runs of a model that draws the server's spread, it averages 0.5.
    pub measured_rank: f64,
}

impl SeedSpread {
    /// The spread of `draws`' p99 against `measured`'s; `None` with fewer than two draws.
    pub fn of(draws: &[Figures], measured: &Figures) -> Option<SeedSpread> {
        if draws.len() < 2 {
            return None;
        }
        let mut p99: Vec<f64> = draws.iter().map(|f| f.e2e_p99_ms).collect();
        p99.sort_by(f64::total_cmp);
        let run = measured.e2e_p99_ms;
        let below = p99.iter().filter(|&&p| p < run).count() as f64;
        let ties = p99.iter().filter(|&&p| p == run).count() as f64;
        Some(SeedSpread {
            measured_rank: (below + ties / 2.0) / p99.len() as f64,
            e2e_p99_ms: p99,
        })
    }

    /// The seeds' median p99, ms.
    pub fn median_ms(&self) -> f64 {
        super::live::median(&mut self.e2e_p99_ms.clone())
    }

    /// The largest seed's p99 over the smallest's.
    pub fn ratio(&self) -> f64 {
        let (lo, hi) = (
            self.e2e_p99_ms[0],
            self.e2e_p99_ms[self.e2e_p99_ms.len() - 1],
        );
        if lo > 0.0 { hi / lo } else { f64::INFINITY }
    }

    /// One line of the report: the seeds' range and median, where the run falls, and whether the
    /// point sits where the queue tips over (seeds more than [`SeedSpread::TIPPING`] apart).
    fn text(&self, measured_ms: f64) -> String {
        let n = self.e2e_p99_ms.len();
        let tipping = if self.ratio() > SeedSpread::TIPPING {
            format!(
                "; the seeds lie more than {}x apart: the queue tips over at this load in some \
                 draws and not in others, and one run's p99 is one draw",
                SeedSpread::TIPPING
            )
        } else {
            String::new()
        };
        // Seeds below the run's, a tie counting half: whole but for ties.
        let below = self.measured_rank * n as f64;
        let below = if below.fract() == 0.0 {
            format!("{below:.0}")
        } else {
            format!("{below:.1}")
        };
        format!(
            "  sim end_to_end p99 by seed ({n}): {:.1}-{:.1} ms, median {:.1}; the run's {:.1} ms \
             lies above {below} of them (rank {:.2}){tipping}",
            self.e2e_p99_ms[0],
            self.e2e_p99_ms[n - 1],
            self.median_ms(),
            measured_ms,
            self.measured_rank,
        )
    }

    /// The seeds' largest p99 over their smallest beyond which the report calls the load a
    /// tipping point.
    pub const TIPPING: f64 = 2.0;
}

/// A simulation's relative errors against the measurement (0.05: 5% above); `None` where the
/// measurement is 0 or missing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Errors {
    /// Throughput.
    pub throughput: Option<f64>,
    /// End-to-end p50.
    pub e2e_p50: Option<f64>,
    /// End-to-end p90.
    pub e2e_p90: Option<f64>,
    /// End-to-end p99.
    pub e2e_p99: Option<f64>,
    /// Mean queue time.
    pub queue_mean: Option<f64>,
}

/// Each batch size's share of the batches run, in percent (sizes that ran none are absent).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct BatchShares(pub BTreeMap<u32, f64>);

/// The batch size whose shares differ most, and by how many percentage points.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ShareGap {
    /// Requests per batch.
    pub batch_size: u32,
    /// Absolute difference of the shares, in percentage points.
    pub points: f64,
}

impl BatchShares {
    /// Shares of `(batch size, batches)` counts; empty without batches.
    pub fn from_counts(counts: impl IntoIterator<Item = (u32, u64)>) -> BatchShares {
        let mut by_size: BTreeMap<u32, u64> = BTreeMap::new();
        for (size, n) in counts {
            if n > 0 {
                *by_size.entry(size).or_default() += n;
            }
        }
        let total: u64 = by_size.values().sum();
        BatchShares(
            by_size
                .into_iter()
                .map(|(size, n)| (size, 100.0 * n as f64 / total as f64))
                .collect(),
        )
    }

    /// A simulation's shares, from its `batch_size_counts`.
    pub fn of(summary: &Summary) -> BatchShares {
        BatchShares::from_counts(
            summary
                .batch_size_counts
                .iter()
                .enumerate()
                .map(|(size, &n)| (size as u32, n)),
        )
    }

    /// The mean of several draws' shares, size by size (a size a draw ran none of counts 0
    /// there); empty without draws.
    pub fn mean(draws: &[BatchShares]) -> BatchShares {
        let sizes: std::collections::BTreeSet<u32> =
            draws.iter().flat_map(|d| d.0.keys().copied()).collect();
        BatchShares(
            sizes
                .into_iter()
                .map(|size| {
                    let sum: f64 = draws.iter().map(|d| d.get(size)).sum();
                    (size, sum / draws.len() as f64)
                })
                .collect(),
        )
    }

    /// The share of batches of `size`, in percent (0 when none ran).
    pub fn get(&self, size: u32) -> f64 {
        self.0.get(&size).copied().unwrap_or(0.0)
    }

    /// The largest difference from `other` over the sizes either ran; `None` when neither ran a
    /// batch.
    pub fn worst_gap(&self, other: &BatchShares) -> Option<ShareGap> {
        self.0
            .keys()
            .chain(other.0.keys())
            .map(|&size| ShareGap {
                batch_size: size,
                points: (self.get(size) - other.get(size)).abs(),
            })
            .max_by(|a, b| {
                a.points
                    .total_cmp(&b.points)
                    .then(b.batch_size.cmp(&a.batch_size))
            })
    }
}

/// One window of the run: the server's compute over the scenario's for the same batches.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SpeedWindow {
    /// Start, seconds from the run's start.
    pub from_s: f64,
    /// End (exclusive), seconds.
    pub to_s: f64,
    /// The server's compute over the scenario's mean compute for the same batch sizes.
    pub level: f64,
    /// The server's batches it is over (of sizes the scenario ran).
    pub batches: u64,
}

/// One batch of a simulation, from its requests' records.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct SimulatedBatch {
    /// Requests in it.
    pub size: u32,
    /// When its execution ended, ns.
    pub end_ns: u64,
    /// Its execution time, ns.
    pub ns: u64,
}

/// Each batch of a run once, in the order of its id, from its requests' records (those of no
/// batch left out).
pub(super) fn simulated_batches(records: &[RequestRecord]) -> Vec<SimulatedBatch> {
    let mut batches: BTreeMap<u64, SimulatedBatch> = BTreeMap::new();
    for r in records {
        if r.batch_size > 0 && r.exec_end_ns >= r.exec_start_ns && r.batch_id != u64::MAX {
            batches.entry(r.batch_id).or_insert(SimulatedBatch {
                size: r.batch_size,
                end_ns: r.exec_end_ns,
                ns: r.exec_end_ns - r.exec_start_ns,
            });
        }
    }
    batches.into_values().collect()
}

/// The mean execution time of a run's batches of each size, in nanoseconds, with the number of
/// batches: each batch counted once, from its requests' records.
pub fn execution_by_batch_size(records: &[RequestRecord]) -> BTreeMap<u32, (u64, f64)> {
    let mut sums: BTreeMap<u32, (u64, f64)> = BTreeMap::new();
    for SimulatedBatch { size, ns, .. } in simulated_batches(records) {
        let entry = sums.entry(size).or_default();
        entry.0 += 1;
        entry.1 += ns as f64;
    }
    sums.into_iter()
        .map(|(size, (n, sum))| (size, (n, sum / n as f64)))
        .collect()
}

/// A simulation beside the measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Simulated {
    /// Its figures.
    pub figures: Figures,
    /// Their errors against the measured ones.
    pub errors: Errors,
    /// Requests it completed.
    pub completed: u64,
    /// Requests it refused or timed out (its scenario's admission and queue timeout).
    pub not_completed: u64,
    /// Its batch-size shares.
    pub batch_shares: BatchShares,
    /// The worst gap to the server's shares, when the server reported them.
    pub worst_share_gap: Option<ShareGap>,
}

impl Simulated {
    /// Its end-to-end p50 and p99 with their errors, for a line of text.
    fn tail_text(&self) -> String {
        let (f, e) = (&self.figures, &self.errors);
        format!(
            "end_to_end p50 {:.3} ms ({}), p99 {:.3} ms ({})",
            f.e2e_p50_ms,
            percent(e.e2e_p50),
            f.e2e_p99_ms,
            percent(e.e2e_p99)
        )
    }

    /// `summary` against `measured` figures and the server's shares (empty when unknown).
    pub fn new(summary: &Summary, measured: &Figures, server_shares: &BatchShares) -> Simulated {
        Simulated::with_figures(
            summary,
            Figures::of(summary),
            BatchShares::of(summary),
            measured,
            server_shares,
        )
    }

    /// As [`Simulated::new`], with `figures` and `batch_shares` computed otherwise than from
    /// `summary` (a simulation whose end to end is joined to the measured requests', and whose
    /// shares are the mean over several seeds).
    pub fn with_figures(
        summary: &Summary,
        figures: Figures,
        batch_shares: BatchShares,
        measured: &Figures,
        server_shares: &BatchShares,
    ) -> Simulated {
        Simulated {
            errors: figures.errors_against(measured),
            figures,
            completed: summary.requests.completed,
            not_completed: summary.requests.total - summary.requests.completed,
            worst_share_gap: if server_shares.0.is_empty() {
                None
            } else {
                server_shares.worst_gap(&batch_shares)
            },
            batch_shares,
        }
    }
}

/// The measured run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Measured {
    /// Its figures (the queue mean from the server's statistics).
    pub figures: Figures,
    /// Requests sent.
    pub sent: u64,
    /// Answered.
    pub completed: u64,
    /// Failed (timeout, connection, HTTP error).
    pub failed: u64,
    /// How late the load generator sent 1% of its requests, in milliseconds.
    pub schedule_delay_p99_ms: Option<f64>,
}

/// The server's mean compute time of one batch size against the service model's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ComputeDrift {
    /// Requests per batch.
    pub batch_size: u32,
    /// Batches of this size the server ran.
    pub server_batches: u64,
    /// Their mean compute time, in milliseconds.
    pub server_ms: f64,
    /// The mean execution time of the simulation's batches of this size (the scenario's or the
    /// profile's model, on the same trace), in milliseconds; `None` when it ran none.
    pub model_ms: Option<f64>,
    /// `(model - server) / server`.
    pub error: Option<f64>,
}

/// The batches of one size as the server reported them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerBatchTime {
    /// Requests per batch.
    pub batch_size: u32,
    /// Batches of this size the server ran.
    pub batches: u64,
    /// Their mean compute time, in nanoseconds.
    pub mean_ns: f64,
}

impl ComputeDrift {
    /// The server's mean compute of each batch size it ran (`server`, in its order) beside the
    /// mean execution of the simulation's batches of that size in `simulated` (the service model
    /// on the same trace).
    pub fn by_batch_size(
        server: impl IntoIterator<Item = ServerBatchTime>,
        simulated: &[RequestRecord],
    ) -> Vec<ComputeDrift> {
        let model = execution_by_batch_size(simulated);
        server
            .into_iter()
            .map(|t| {
                let server_ms = t.mean_ns * 1e-6;
                let model_ms = model.get(&t.batch_size).map(|&(_, ns)| ns * 1e-6);
                ComputeDrift {
                    batch_size: t.batch_size,
                    server_batches: t.batches,
                    server_ms,
                    model_ms,
                    error: model_ms.and_then(|m| relative_error(m, server_ms)),
                }
            })
            .collect()
    }

    /// The factor that brings the model's time of this batch size to the server's (server over
    /// model); `None` when the simulation ran no batch of this size or timed it at 0.
    pub fn level(&self) -> Option<f64> {
        self.model_ms
            .filter(|&m| m > 0.0)
            .map(|m| self.server_ms / m)
    }

    /// The server's compute over all its batches of the sizes the simulation also ran, over the
    /// model's time of as many batches of each size: 1.0 where the service model held the
    /// server's speed over the run, 0.8 where the server computed in 20% less time. `None`
    /// without such a batch.
    pub fn overall_level(drift: &[ComputeDrift]) -> Option<f64> {
        let (server_ms, model_ms) = drift
            .iter()
            .filter_map(|d| {
                let n = d.server_batches as f64;
                d.model_ms.map(|m| (d.server_ms * n, m * n))
            })
            .fold((0.0, 0.0), |(s, m), (ds, dm)| (s + ds, m + dm));
        (model_ms > 0.0).then(|| server_ms / model_ms)
    }
}

/// The run-driven simulation's service model: the server's mean per batch size, and the
/// line used beyond the measured sizes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunService {
    /// Batch sizes the server ran.
    pub batch_sizes: Vec<u32>,
    /// Weighted least-squares fit `a + b * batch_size`: its `a`, in milliseconds.
    pub fit_a_ms: f64,
    /// Its `b`, in milliseconds per request.
    pub fit_b_ms: f64,
    /// The run-sim took the scenario's (or profile's) time of each batch, scaled per batch size
    /// to the server's mean; else the server's mean per size alone.
    pub leveled: bool,
    /// The path outside the server the run-sim used, as measured (`None`: the scenario's own).
    pub path: Option<MeasuredPath>,
}

/// The path outside a server's queue and model, measured in a run: the client's mean end to end
/// against the server's mean time per request.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeasuredPath {
    /// Half the client's time outside the server, in milliseconds.
    pub one_way_ms: f64,
    /// The server's time outside its queue and model, in milliseconds.
    pub server_outside_ms: f64,
}

/// What the server's own trace of a run said, and how the trace-driven simulation used it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ServerTimelineReport {
    /// Requests of the run the server traced.
    pub requests_traced: u64,
    /// Of them, completed both in the run and in the simulation.
    pub requests_joined: u64,
    /// Batches traced.
    pub batches: u64,
    /// The batches' time fitted as `a + b * n + c * n * L`: `a`, in milliseconds.
    pub fit_a_ms: f64,
    /// `b`, in milliseconds per request.
    pub fit_b_ms: f64,
    /// `c`, in microseconds per padded token.
    pub fit_c_us: f64,
    /// Batches within 1.5 times the fit.
    pub batches_fitted: u64,
    /// A model instance's mean time from one batch's end to the next one's start (requests
    /// waiting), in microseconds.
    pub turnaround_us: f64,
    /// Its part before compute (`batcher.dispatch_latency`), in microseconds.
    pub dispatch_us: f64,
    /// Its part after compute per batch (`batcher.release_latency`), in microseconds.
    pub release_us: f64,
    /// Its part after compute per request of the batch that ended
    /// (`batcher.release_latency_per_request`), in microseconds.
    pub release_per_request_us: f64,
    /// Slowdown windows of more than 3 times the fit (this machine's stalls).
    pub stalls: u64,
    /// Their time, in milliseconds.
    pub stall_ms: f64,
    /// Stalled dispatches replayed as pauses.
    pub pauses: u64,
    /// Their time, in milliseconds.
    pub pause_ms: f64,
    /// Ready batches (instance free) that started only when a later request arrived.
    pub left_waiting: u64,
    /// Their waits summed, in milliseconds.
    pub left_waiting_ms: f64,
    /// The server's queue time (queue start to compute start), median, in milliseconds.
    pub server_queue_p50_ms: f64,
    /// The simulation's (arrival to compute start), same requests.
    pub sim_queue_p50_ms: f64,
    /// The server's queue time, 99th percentile.
    pub server_queue_p99_ms: f64,
    /// The simulation's.
    pub sim_queue_p99_ms: f64,
    /// The batcher thread's share of the race at batch ends, measured from the trace and
    /// replayed (`batcher.thread_first_fraction`); `None` where the trace cannot tell it (no
    /// queue delay, or no batch taken at a release).
    pub thread_first_fraction: Option<f64>,
    /// The server's batches taken at a model instance's release, below `max_batch_size`.
    pub released_batches: u64,
    /// Of them, the share that left behind a request queued before their start.
    pub server_left_behind: f64,
    /// The simulation's share, at the fraction measured.
    pub sim_left_behind: f64,
    /// The seeds whose figures (end-to-end percentiles, queue mean and percentiles) and batch
    /// shares the simulation's are the mean of: each seed draws the race and the dispatches
    /// again, and one draw of a share moves by points where a few hundred batches ran; 1 when
    /// nothing is drawn.
    pub seeds: u32,
}

/// One load of a validation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadValidation {
    /// Fraction of the capacity.
    pub load: f64,
    /// The scaled trace's rate, requests per second.
    pub rate_rps: f64,
    /// Requests in the scaled trace.
    pub requests: u64,
    /// The measured run.
    pub measured: Measured,
    /// The batch-size shares of the server's executions (empty when it reports none).
    pub server_batch_shares: BatchShares,
    /// The simulation with the scenario's or the profile's service model.
    pub sim: Simulated,
    /// The seeds `sim`'s figures and batch shares are the mean of: more than one where the
    /// scenario draws batch ends slept through (`batcher.missed_release`).
    pub sim_seeds: u32,
    /// How `sim`'s end-to-end p99 spreads over those seeds, and where the run's falls in it
    /// (`None` with one seed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_spread: Option<SeedSpread>,
    /// The simulation with the server's own service times.
    pub run_sim: Option<Simulated>,
    /// Why there is no `run_sim`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_sim_missing: Option<String>,
    /// Its service model.
    pub run_service: Option<RunService>,
    /// The server's compute per batch size against the service model's (the drift).
    pub compute_by_batch_size: Vec<ComputeDrift>,
    /// The drift over all those batches ([`ComputeDrift::overall_level`]): the server's compute
    /// over the service model's, 1.0 where the model held the server's speed.
    pub compute_level: Option<f64>,
    /// sim again with every batch's compute multiplied by `compute_level`: the calibrated model
    /// at the machine's speed over the run, the one figure it takes from the run (so a replay,
    /// not a prediction). Where it meets the run and sim does not, the machine's speed moved
    /// between the calibration and the run; where both miss alike, the model does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_at_server_speed: Option<Simulated>,
    /// The server's speed window by window over the run (Triton's statistics read every 2 s),
    /// each window's compute against the scenario's for as many batches of each size, as the
    /// simulation of the same requests timed them; windows with too few batches to say are left
    /// out.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub speed_windows: Vec<SpeedWindow>,
    /// sim again with each of `speed_windows` a slowdown of its execution: the calibrated model
    /// at the machine's speed as the run measured it, window by window (a replay of that series
    /// alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sim_by_window: Option<Simulated>,
    /// The simulation driven by the server's own trace of the run (`--server-trace`): its
    /// arrivals, batch times, hand-over and stalls; each request's end to end is its measured
    /// time outside the server plus its simulated time inside.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_sim: Option<Simulated>,
    /// What the trace said.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_timeline: Option<ServerTimelineReport>,
    /// Why there is no `trace_sim` though one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_sim_missing: Option<String>,
}

/// A whole validation against a running server, as `validation.json` holds it: what was
/// compared (endpoint, protocol, model, scenario, service model, capacity, the batchers'
/// differences) and every load's [`LoadValidation`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EndpointValidation {
    /// The server's base URL.
    pub endpoint: String,
    /// Its protocol (`kserve` or `openai`).
    pub protocol: String,
    /// The model served.
    pub model: String,
    /// The scenario's name.
    pub scenario: String,
    /// The scenario-driven simulation's service model: `scenario` (its `[service]`) or
    /// `profile PATH`.
    pub service_model: String,
    /// The capacity the loads are fractions of.
    pub capacity: CalibratedCapacity,
    /// Where the scenario and the server's batcher differ (empty when they agree or the server
    /// does not say).
    pub batcher_differences: Vec<String>,
    /// Each load, in the order run.
    pub loads: Vec<LoadValidation>,
}

impl EndpointValidation {
    /// `validation.json`'s text: pretty JSON, every object's keys in alphabetical order, ending
    /// with a newline.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        // Through a `Value`, whose maps sort their keys.
        let value = serde_json::to_value(self)?;
        Ok(serde_json::to_string_pretty(&value)? + "\n")
    }
}

/// Formats a relative error as `+1.2%`, or `-` when there is none.
fn percent(error: Option<f64>) -> String {
    error.map_or_else(|| "-".to_string(), |e| format!("{:+.1}%", 100.0 * e))
}

fn value(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
}

/// Joins `cells` with ", ", at most `per_line` on a line, each continued line indented.
fn wrapped(cells: &[String], per_line: usize) -> String {
    cells
        .chunks(per_line.max(1))
        .map(|c| c.join(", "))
        .collect::<Vec<_>>()
        .join(",\n      ")
}

impl LoadValidation {
    /// The table `capsim validate --endpoint` prints for this load. `model` names the service
    /// model (`scenario's`, `profile's`), `server` the server (`Triton's`).
    pub fn human(&self, model: &str, server: &str) -> String {
        let mut out = String::new();
        self.figures_table(&mut out, server);
        self.missing_and_refused(&mut out);
        self.batch_shares_text(&mut out, server);
        self.drift_text(&mut out, model, server);
        self.run_service_text(&mut out, model, server);
        if let Some(t) = &self.server_timeline {
            t.text(&mut out, server);
        }
        out
    }

    /// The load's line and its figures, measured beside each simulation's with its error.
    fn figures_table(&self, out: &mut String, server: &str) {
        let m = &self.measured;
        let _ = writeln!(
            out,
            "load {:.0}%: {:.2} req/s, {} requests; measured: {} completed, {} failed{}",
            100.0 * self.load,
            self.rate_rps,
            self.requests,
            m.completed,
            m.failed,
            m.schedule_delay_p99_ms
                .map(|d| format!(", the load generator's schedule delay p99 {d:.3} ms"))
                .unwrap_or_default()
        );
        let answered = m.completed + m.failed;
        if m.failed as f64 > WARN_FAILED_SHARE * answered as f64 {
            let _ = writeln!(
                out,
                "  warning: {} of {answered} requests failed ({:.0}%): the measured figures are \
                 of the completed ones alone; the server's log says why",
                m.failed,
                100.0 * m.failed as f64 / answered as f64
            );
        }
        let traced = self.trace_sim.as_ref();
        let _ = writeln!(
            out,
            "  {:<22} {:>10} {:>10} {:>8} {:>10} {:>8}{}",
            "",
            "measured",
            "sim",
            "error",
            "run-sim",
            "error",
            if traced.is_some() {
                format!(" {:>10} {:>8}", "trace-sim", "error")
            } else {
                String::new()
            }
        );
        let run = self.run_sim.as_ref();
        let mut row = |name: &str,
                       measured: Option<f64>,
                       pick: fn(&Figures) -> Option<f64>,
                       error: fn(&Errors) -> Option<f64>| {
            let _ = writeln!(
                out,
                "  {name:<22} {:>10} {:>10} {:>8} {:>10} {:>8}{}",
                value(measured),
                value(pick(&self.sim.figures)),
                percent(error(&self.sim.errors)),
                value(run.and_then(|r| pick(&r.figures))),
                percent(run.and_then(|r| error(&r.errors))),
                traced.map_or(String::new(), |t| format!(
                    " {:>10} {:>8}",
                    value(pick(&t.figures)),
                    percent(error(&t.errors))
                )),
            );
        };
        row(
            "throughput rps",
            Some(m.figures.throughput_rps),
            |f| Some(f.throughput_rps),
            |e| e.throughput,
        );
        row(
            "end_to_end p50 ms",
            Some(m.figures.e2e_p50_ms),
            |f| Some(f.e2e_p50_ms),
            |e| e.e2e_p50,
        );
        row(
            "end_to_end p90 ms",
            Some(m.figures.e2e_p90_ms),
            |f| Some(f.e2e_p90_ms),
            |e| e.e2e_p90,
        );
        row(
            "end_to_end p99 ms",
            Some(m.figures.e2e_p99_ms),
            |f| Some(f.e2e_p99_ms),
            |e| e.e2e_p99,
        );
        row(
            &format!("queue mean ms ({server})"),
            m.figures.queue_mean_ms,
            |f| f.queue_mean_ms,
            |e| e.queue_mean,
        );
    }

    /// Why a simulation is missing, and the requests the simulations did not complete.
    fn missing_and_refused(&self, out: &mut String) {
        let run = self.run_sim.as_ref();
        if self.sim_seeds > 1 {
            let _ = writeln!(
                out,
                "  sim figures and batch shares: the mean of {} seeds (each draws again what the \
                 scenario draws: the compute's spread, speed windows, batch ends slept through)",
                self.sim_seeds
            );
        }
        if let Some(spread) = &self.sim_spread {
            let _ = writeln!(out, "{}", spread.text(self.measured.figures.e2e_p99_ms));
        }
        if let Some(note) = &self.run_sim_missing {
            let _ = writeln!(out, "  run-sim: not available: {note}");
        }
        if let Some(note) = &self.trace_sim_missing {
            let _ = writeln!(out, "  trace-sim: not available: {note}");
        }
        let not_completed: Vec<String> = std::iter::once(("sim", &self.sim))
            .chain(run.map(|r| ("run-sim", r)))
            .filter(|(_, s)| s.not_completed > 0)
            .map(|(name, s)| format!("{name} {}", s.not_completed))
            .collect();
        if !not_completed.is_empty() {
            let _ = writeln!(
                out,
                "  refused or timed out by the scenario's admission and queue: {}",
                not_completed.join(", ")
            );
        }
    }

    /// The batch sizes' shares of batches, the server's beside each simulation's, and the worst
    /// gap.
    fn batch_shares_text(&self, out: &mut String, server: &str) {
        let run = self.run_sim.as_ref();
        let traced = self.trace_sim.as_ref();
        if !self.server_batch_shares.0.is_empty() {
            let mut sizes: Vec<u32> = self.server_batch_shares.0.keys().copied().collect();
            sizes.extend(self.sim.batch_shares.0.keys());
            if let Some(r) = run {
                sizes.extend(r.batch_shares.0.keys());
            }
            sizes.sort_unstable();
            sizes.dedup();
            let cells: Vec<String> = sizes
                .iter()
                .map(|&s| {
                    let run_share =
                        run.map_or("-".to_string(), |r| format!("{:.1}", r.batch_shares.get(s)));
                    format!(
                        "{s}: {:.1}/{:.1}/{run_share}",
                        self.server_batch_shares.get(s),
                        self.sim.batch_shares.get(s)
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "  batch sizes, % of batches ({server} / sim / run-sim):\n      {}",
                wrapped(&cells, 8)
            );
            let gap = |s: Option<&Simulated>| {
                s.and_then(|s| s.worst_share_gap)
                    .map_or("-".to_string(), |g| {
                        format!("{:.1} pp (size {})", g.points, g.batch_size)
                    })
            };
            let _ = writeln!(
                out,
                "  worst batch-share gap: sim {}, run-sim {}{}",
                gap(Some(&self.sim)),
                gap(run),
                traced.map_or(String::new(), |t| format!(", trace-sim {}", gap(Some(t))))
            );
        }
    }

    /// The server's mean compute per batch size beside the service model's.
    fn drift_text(&self, out: &mut String, model: &str, server: &str) {
        if !self.compute_by_batch_size.is_empty() {
            let cells: Vec<String> = self
                .compute_by_batch_size
                .iter()
                .map(|d| {
                    format!(
                        "{}: {:.3}/{} ({}, {})",
                        d.batch_size,
                        d.server_ms,
                        value(d.model_ms),
                        percent(d.error),
                        d.server_batches
                    )
                })
                .collect();
            let _ = writeln!(
                out,
                "  drift: mean compute per batch, ms ({server} / {model} (error), {server} batches):\n      {}",
                wrapped(&cells, 4)
            );
            if let Some(level) = self.compute_level {
                let _ = writeln!(
                    out,
                    "  over all these batches the {server} compute was {level:.3}x the {model}"
                );
            }
            if let (Some(level), Some(at_speed)) = (self.compute_level, &self.sim_at_server_speed) {
                let _ = writeln!(
                    out,
                    "  sim at that speed (every batch's compute x{level:.3}, a figure from the run, so replayed): {}",
                    at_speed.tail_text()
                );
            }
            if let Some(by_window) = &self.sim_by_window {
                let levels = self.speed_windows.iter().map(|w| w.level);
                let (low, high) = levels.fold((f64::INFINITY, 0.0_f64), |(lo, hi), l| {
                    (lo.min(l), hi.max(l))
                });
                let _ = writeln!(
                    out,
                    "  sim at its speed window by window ({} windows of 2 s at {low:.2}-{high:.2}x, the {server} statistics read during the run: replayed): {}",
                    self.speed_windows.len(),
                    by_window.tail_text()
                );
            }
        }
    }

    /// What run-sim's service and path were.
    fn run_service_text(&self, out: &mut String, model: &str, server: &str) {
        if let Some(service) = &self.run_service {
            let sizes = match (service.batch_sizes.first(), service.batch_sizes.last()) {
                (Some(first), Some(last)) if first != last => format!("{first}..{last}"),
                (Some(only), _) => only.to_string(),
                _ => "-".to_string(),
            };
            if service.leveled {
                let _ = writeln!(
                    out,
                    "  run-sim's service: the {model} time of each batch (its inputs, its spread), scaled per batch size to the {server} mean compute ({} sizes in {sizes})",
                    service.batch_sizes.len(),
                );
            } else {
                let _ = writeln!(
                    out,
                    "  run-sim's service: {server} mean compute per batch size ({} sizes in {sizes}, linear between them); its fit {:.3} + {:.3}·n ms sets the slope beyond",
                    service.batch_sizes.len(),
                    service.fit_a_ms,
                    service.fit_b_ms
                );
            }
            if let Some(path) = &service.path {
                let _ = writeln!(
                    out,
                    "  run-sim's path: {:.3} ms each way between client and server and {:.3} ms in the server outside queue and model, as measured (the client's mean end to end against the {server} mean per request); the scenario's network, gateway, pre- and post-processing left out",
                    path.one_way_ms, path.server_outside_ms
                );
            }
        }
    }
}

impl ServerTimelineReport {
    /// trace-sim's lines: the server's timeline, the queues, the race and the seeds.
    fn text(&self, out: &mut String, server: &str) {
        let t = self;
        let _ = writeln!(
            out,
            "  trace-sim: {server} trace of {} requests ({} joined), {} batches fitted as {:.3} + {:.3}·n ms + {:.3} us·n·L ({} within 1.5 times the fit); turnaround {:.0} us (dispatch {:.0} from idle, release {:.0} + {:.1}·n); {} stalls over 3 times the fit ({:.0} ms), {} stalled dispatches replayed as pauses ({:.0} ms), {} ready batches left waiting for a later arrival ({:.0} ms)",
            t.requests_traced,
            t.requests_joined,
            t.batches,
            t.fit_a_ms,
            t.fit_b_ms,
            t.fit_c_us,
            t.batches_fitted,
            t.turnaround_us,
            t.dispatch_us,
            t.release_us,
            t.release_per_request_us,
            t.stalls,
            t.stall_ms,
            t.pauses,
            t.pause_ms,
            t.left_waiting,
            t.left_waiting_ms
        );
        let _ = writeln!(
            out,
            "  trace-sim queue ms ({server} / trace-sim): p50 {:.3} / {:.3} ({}), p99 {:.3} / {:.3} ({})",
            t.server_queue_p50_ms,
            t.sim_queue_p50_ms,
            percent(relative_error(t.sim_queue_p50_ms, t.server_queue_p50_ms)),
            t.server_queue_p99_ms,
            t.sim_queue_p99_ms,
            percent(relative_error(t.sim_queue_p99_ms, t.server_queue_p99_ms)),
        );
        let race = match t.thread_first_fraction {
            Some(fraction) => {
                format!("the batcher thread first at {fraction:.2} of batch ends")
            }
            None => "the batcher thread's share of the race not measurable (the instance first)"
                .to_string(),
        };
        let _ = writeln!(
            out,
            "  trace-sim race: {race}; of {} batches taken at a release, {:.1}% left a request behind in {server}, {:.1}% in trace-sim",
            t.released_batches,
            t.server_left_behind * 100.0,
            t.sim_left_behind * 100.0
        );
        if t.seeds > 1 {
            let _ = writeln!(
                out,
                "  trace-sim figures and batch shares: the mean of {} seeds (each draws the race and the dispatches again)",
                t.seeds
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsim_sim::Scenario;
    use capsim_sim::record::Outcome;

    #[test]
    fn validation_json_sorts_every_objects_keys() {
        let capacity = CalibratedCapacity {
            rate_rps: 100.0,
            model_instances: 2,
            max_batch_size: 8,
            mean_input_tokens: 32,
            padded_input_tokens: 40,
            full_batch_ms: 4.0,
        };
        let report = EndpointValidation {
            endpoint: "http://127.0.0.1:8000".into(),
            protocol: "kserve".into(),
            model: "m".into(),
            scenario: "s".into(),
            service_model: "scenario".into(),
            capacity,
            batcher_differences: vec!["max_batch_size 8 vs 4".into()],
            loads: Vec::new(),
        };
        let by_hand = serde_json::json!({
            "endpoint": "http://127.0.0.1:8000",
            "protocol": "kserve",
            "model": "m",
            "scenario": "s",
            "service_model": "scenario",
            "capacity": capacity,
            "batcher_differences": ["max_batch_size 8 vs 4"],
            "loads": [],
        });
        let expected = serde_json::to_string_pretty(&by_hand).unwrap() + "\n";
        assert_eq!(report.to_json().unwrap(), expected);
        let text = report.to_json().unwrap();
        let full_batch = text.find("full_batch_ms").unwrap();
        let rate = text.find("rate_rps").unwrap();
        assert!(full_batch < rate, "nested keys sorted too: {text}");
    }

    #[test]
    fn the_mean_of_draws_averages_each_figure_and_keeps_the_first_throughput() {
        let draw = |p50: f64, p99: f64, queue: Option<f64>| Figures {
            throughput_rps: 100.0 + p50,
            e2e_p50_ms: p50,
            e2e_p90_ms: 2.0 * p50,
            e2e_p99_ms: p99,
            queue_mean_ms: queue,
        };
        let mean =
            Figures::mean(&[draw(2.0, 10.0, Some(1.0)), draw(4.0, 30.0, Some(3.0))]).unwrap();
        let expected = Figures {
            throughput_rps: 102.0,
            ..draw(3.0, 20.0, Some(2.0))
        };
        assert_eq!(mean, expected);
        let unknown = Figures::mean(&[draw(2.0, 10.0, Some(1.0)), draw(4.0, 30.0, None)]).unwrap();
        assert_eq!(
            unknown.queue_mean_ms, None,
            "a queue unknown in one draw is unknown"
        );
        assert_eq!(Figures::mean(&[]), None);
    }

    #[test]
    fn relative_errors_are_against_the_measurement_and_absent_for_zero() {
        assert_eq!(relative_error(11.0, 10.0), Some(0.1));
        assert_eq!(relative_error(9.0, 10.0), Some(-0.1));
        assert_eq!(relative_error(1.0, 0.0), None);
    }

    #[test]
    fn shares_sum_to_100_and_the_worst_gap_names_its_size() {
        let server = BatchShares::from_counts([(1, 6), (2, 6), (4, 4), (6, 1), (8, 0)]);
        let total: f64 = server.0.values().sum();
        assert!((total - 100.0).abs() < 1e-9, "{total}");
        assert!(
            !server.0.contains_key(&8),
            "sizes that ran no batch are left out"
        );
        let sim = BatchShares::from_counts([(1, 10), (2, 5), (3, 5)]);
        // server 1: 35.3, 2: 35.3, 4: 23.5, 6: 5.9; sim 1: 50, 2: 25, 3: 25.
        let gap = server.worst_gap(&sim).expect("batches");
        assert_eq!(gap.batch_size, 3);
        assert!((gap.points - 25.0).abs() < 1e-9, "{gap:?}");
        assert_eq!(
            BatchShares::default().worst_gap(&BatchShares::default()),
            None
        );
        assert!(BatchShares::from_counts([(1, 0)]).0.is_empty());
    }

    #[test]
    fn the_mean_of_draws_counts_a_size_a_draw_ran_none_of_as_zero_and_sums_to_100() {
        let draws = [
            BatchShares::from_counts([(1, 1), (2, 1)]),
            BatchShares::from_counts([(1, 1), (3, 3)]),
        ];
        let mean = BatchShares::mean(&draws);
        // 1: (50 + 25) / 2; 2: (50 + 0) / 2; 3: (0 + 75) / 2.
        assert_eq!(
            mean.0.into_iter().collect::<Vec<_>>(),
            vec![(1, 37.5), (2, 25.0), (3, 37.5)]
        );
        assert!(BatchShares::mean(&[]).0.is_empty());
    }

    #[test]
    fn the_calibrated_capacity_runs_full_batches_on_every_model_instance() {
        let scenario = Scenario::from_toml_str(
            "instances = 2\n[batcher]\nmax_batch_size = 8\nmax_queue_delay = \"1ms\"\n\
             [execution]\ninstance_count = 2\n[service]\nkind = \"affine\"\na = \"2ms\"\n\
             b = \"0.5ms\"\nc = \"1us\"\n",
        )
        .unwrap();
        let pool = &scenario.pools()[0];
        let built =
            capsim_sim::build::build(&scenario, &mut capsim_sim::Profiles::default()).unwrap();
        let service = built.pools[0].service.clone().expect("a service model");
        let capacity = CalibratedCapacity::of(pool, service.as_ref(), &[10, 20, 31]).unwrap();
        // Mean 20.33 -> 21 tokens; the one batch of 8 (the three inputs, wrapped around) is
        // padded to the longest, 31: 2 + 4 + 8 x 31 x 0.001 = 6.248 ms, not the 6.168 ms of a
        // batch at the mean length.
        assert_eq!(capacity.mean_input_tokens, 21);
        assert_eq!(capacity.padded_input_tokens, 31);
        assert_eq!(capacity.model_instances, 4);
        assert!(
            (capacity.full_batch_ms - 6.248).abs() < 1e-9,
            "{capacity:?}"
        );
        assert!((capacity.rate_rps - 4.0 * 8.0 / 6.248e-3).abs() < 1e-6);
        assert_eq!(CalibratedCapacity::of(pool, service.as_ref(), &[]), None);
    }

    fn record(request: u32, batch_id: u64, batch_size: u32, start: u64, end: u64) -> RequestRecord {
        let mut r = RequestRecord::new(request, 1, 0);
        r.batch_id = batch_id;
        r.batch_size = batch_size;
        r.exec_start_ns = start;
        r.exec_end_ns = end;
        r.outcome = Outcome::Completed;
        r
    }

    #[test]
    fn the_level_of_a_batch_size_is_the_servers_time_over_the_models() {
        let drift = |model_ms| ComputeDrift {
            batch_size: 4,
            server_batches: 10,
            server_ms: 3.0,
            model_ms,
            error: None,
        };
        assert_eq!(drift(Some(2.0)).level(), Some(1.5));
        assert_eq!(
            drift(Some(0.0)).level(),
            None,
            "a model time of 0 has no level"
        );
        assert_eq!(drift(None).level(), None);
        let none = ComputeDrift::by_batch_size(
            [ServerBatchTime {
                batch_size: 2,
                batches: 3,
                mean_ns: 4e6,
            }],
            &[],
        );
        assert_eq!(
            none,
            [ComputeDrift {
                batch_size: 2,
                server_batches: 3,
                server_ms: 4.0,
                model_ms: None,
                error: None,
            }]
        );
    }

    #[test]
    fn execution_by_batch_size_counts_each_batch_once() {
        let records = [
            record(0, 0, 2, 0, 4_000),
            record(1, 0, 2, 0, 4_000),
            record(2, 1, 1, 5_000, 7_000),
            record(3, 2, 2, 8_000, 14_000),
            record(4, 2, 2, 8_000, 14_000),
            RequestRecord::new(5, 1, 0),
        ];
        let by_size = execution_by_batch_size(&records);
        assert_eq!(by_size.len(), 2, "{by_size:?}");
        assert_eq!(by_size[&1], (1, 2_000.0));
        assert_eq!(by_size[&2], (2, 5_000.0));
    }

    #[test]
    fn the_table_shows_both_simulations_and_says_why_one_is_missing() {
        let measured = Figures {
            throughput_rps: 10.0,
            e2e_p50_ms: 5.0,
            e2e_p90_ms: 8.0,
            e2e_p99_ms: 12.0,
            queue_mean_ms: Some(2.0),
        };
        let sim = Simulated {
            figures: Figures {
                e2e_p50_ms: 5.5,
                ..measured
            },
            errors: Figures {
                e2e_p50_ms: 5.5,
                ..measured
            }
            .errors_against(&measured),
            completed: 100,
            not_completed: 0,
            batch_shares: BatchShares::from_counts([(1, 1), (2, 1)]),
            worst_share_gap: Some(ShareGap {
                batch_size: 2,
                points: 10.0,
            }),
        };
        let at_speed = Simulated {
            figures: Figures {
                e2e_p50_ms: 4.8,
                ..measured
            },
            errors: Figures {
                e2e_p50_ms: 4.8,
                ..measured
            }
            .errors_against(&measured),
            ..sim.clone()
        };
        let validation = LoadValidation {
            load: 0.3,
            rate_rps: 10.0,
            requests: 100,
            measured: Measured {
                figures: measured,
                sent: 100,
                completed: 100,
                failed: 0,
                schedule_delay_p99_ms: Some(0.2),
            },
            server_batch_shares: BatchShares::from_counts([(1, 6), (2, 4)]),
            sim,
            sim_seeds: 1,
            sim_spread: None,
            run_sim: None,
            run_sim_missing: Some("the server reported no batches".to_string()),
            run_service: None,
            compute_by_batch_size: vec![ComputeDrift {
                batch_size: 1,
                server_batches: 6,
                server_ms: 2.5,
                model_ms: Some(2.0),
                error: relative_error(2.0, 2.5),
            }],
            compute_level: Some(1.25),
            sim_at_server_speed: Some(at_speed.clone()),
            speed_windows: [(0.0, 0.9), (2.0, 1.3)]
                .map(|(from_s, level)| SpeedWindow {
                    from_s,
                    to_s: from_s + 2.0,
                    level,
                    batches: 40,
                })
                .to_vec(),
            sim_by_window: Some(at_speed),
            trace_sim: None,
            server_timeline: None,
            trace_sim_missing: None,
        };
        let text = validation.human("scenario's", "Triton's");
        assert!(text.contains("load 30%"), "{text}");
        assert!(text.contains("+10.0%"), "the p50 error: {text}");
        assert!(
            text.contains("run-sim: not available: the server reported no batches"),
            "{text}"
        );
        assert!(text.contains("1: 60.0/50.0/-"), "{text}");
        assert!(text.contains("1: 2.500/2.000 (-20.0%, 6)"), "{text}");
        assert!(
            text.contains("over all these batches the Triton's compute was 1.250x the scenario's"),
            "{text}"
        );
        assert!(
            text.contains("sim at that speed (every batch's compute x1.250, a figure from the run, so replayed): end_to_end p50 4.800 ms (-4.0%)"),
            "the simulation at the server's speed, against the measured p50 of 5.0 ms: {text}"
        );
        assert!(
            text.contains("sim at its speed window by window (2 windows of 2 s at 0.90-1.30x, the Triton's statistics read during the run: replayed): end_to_end p50 4.800 ms"),
            "{text}"
        );
        // The server computed 25% slower than the scenario: the machine's speed moved.
        let slow = validation.speed_warning().expect("25% slower warns");
        assert!(
            slow.contains("took 1.25x") && slow.contains("ran slower"),
            "{slow}"
        );
        let mut steady = validation.clone();
        steady.compute_level = Some(1.05);
        assert_eq!(steady.speed_warning(), None, "5% is within the level");
        let drift = &validation.compute_by_batch_size;
        assert_eq!(ComputeDrift::overall_level(drift), Some(1.25));
        assert!(
            !text.contains("trace-sim"),
            "no trace-sim column without one: {text}"
        );
        assert!(!text.contains("warning"), "none failed: {text}");
        // A server that failed many of the load's requests is said to have, loudly.
        let mut failing = validation.clone();
        (failing.measured.completed, failing.measured.failed) = (40, 60);
        let text_failing = failing.human("scenario's", "Triton's");
        assert!(
            text_failing.contains("warning: 60 of 100 requests failed (60%)"),
            "{text_failing}"
        );
        let json = serde_json::to_value(&validation).unwrap();
        assert_eq!(json["server_batch_shares"]["1"], 60.0);
        assert_eq!(json["run_sim"], serde_json::Value::Null);
        assert_eq!(json["compute_level"], 1.25);
        assert_eq!(json["sim_at_server_speed"]["figures"]["e2e_p50_ms"], 4.8);
        assert_eq!(json["speed_windows"][1]["level"], 1.3);
        assert_eq!(json["sim_by_window"]["figures"]["e2e_p50_ms"], 4.8);
        assert!(json.get("trace_sim").is_none(), "{json}");

        // With the server's trace: a third column, and what the trace said.
        let mut traced = validation.clone();
        traced.trace_sim = Some(Simulated {
            figures: Figures {
                e2e_p50_ms: 4.5,
                ..measured
            },
            errors: Figures {
                e2e_p50_ms: 4.5,
                ..measured
            }
            .errors_against(&measured),
            ..traced.sim.clone()
        });
        traced.server_timeline = Some(ServerTimelineReport {
            requests_traced: 100,
            requests_joined: 99,
            batches: 60,
            fit_a_ms: 0.3,
            fit_b_ms: 0.0,
            fit_c_us: 9.5,
            batches_fitted: 50,
            turnaround_us: 300.0,
            dispatch_us: 150.0,
            release_us: 100.0,
            release_per_request_us: 12.5,
            stalls: 2,
            stall_ms: 40.0,
            pauses: 3,
            pause_ms: 30.0,
            left_waiting: 1,
            left_waiting_ms: 12.0,
            server_queue_p50_ms: 2.0,
            sim_queue_p50_ms: 2.1,
            server_queue_p99_ms: 20.0,
            sim_queue_p99_ms: 18.0,
            thread_first_fraction: Some(0.15),
            released_batches: 40,
            server_left_behind: 0.25,
            sim_left_behind: 0.275,
            seeds: 8,
        });
        let text = traced.human("scenario's", "Triton's");
        assert!(text.contains("trace-sim"), "{text}");
        assert!(text.contains("-10.0%"), "trace-sim's p50 error: {text}");
        assert!(
            text.contains("trace of 100 requests (99 joined)")
                && text.contains("p99 20.000 / 18.000 (-10.0%)"),
            "{text}"
        );
        assert!(
            text.contains("thread first at 0.15 of batch ends; of 40 batches taken at a release, 25.0% left a request behind in Triton's, 27.5% in trace-sim"),
            "{text}"
        );
        assert!(
            text.contains("trace-sim figures and batch shares: the mean of 8 seeds"),
            "{text}"
        );
        let json = serde_json::to_value(&traced).unwrap();
        assert_eq!(json["server_timeline"]["left_waiting"], 1);
        assert_eq!(json["server_timeline"]["thread_first_fraction"], 0.15);
        assert_eq!(json["server_timeline"]["seeds"], 8);
    }

    #[test]
    fn the_overall_level_weighs_each_size_by_its_batches_and_skips_sizes_the_model_ran_none_of() {
        let row = |batch_size, server_batches, server_ms, model_ms: Option<f64>| ComputeDrift {
            batch_size,
            server_batches,
            server_ms,
            model_ms,
            error: model_ms.and_then(|m| relative_error(m, server_ms)),
        };
        let drift = [
            row(1, 6, 2.5, Some(2.0)),
            row(2, 2, 1.0, Some(1.0)),
            row(9, 3, 9.0, None),
        ];
        // (6 x 2.5 + 2 x 1.0) / (6 x 2.0 + 2 x 1.0)
        let level = ComputeDrift::overall_level(&drift).unwrap();
        assert!((level - 17.0 / 14.0).abs() < 1e-12, "{level}");
        assert_eq!(ComputeDrift::overall_level(&drift[2..]), None);
    }

    /// Figures whose p99 only matters.
    fn p99(ms: f64) -> Figures {
        Figures {
            throughput_rps: 100.0,
            e2e_p50_ms: 1.0,
            e2e_p90_ms: 2.0,
            e2e_p99_ms: ms,
            queue_mean_ms: None,
        }
    }

    #[test]
    fn the_seed_spread_sorts_the_seeds_and_ranks_the_run_among_them_a_tie_counting_half() {
        let draws = [p99(60.0), p99(20.0), p99(40.0), p99(30.0)];
        let spread = SeedSpread::of(&draws, &p99(40.0)).unwrap();
        assert_eq!(spread.e2e_p99_ms, [20.0, 30.0, 40.0, 60.0]);
        // 20 and 30 below, 40 a tie: 2.5 of 4.
        assert_eq!(spread.measured_rank, 2.5 / 4.0);
        assert_eq!(spread.median_ms(), 35.0);
        assert_eq!(spread.ratio(), 3.0);
        assert_eq!(
            SeedSpread::of(&draws, &p99(100.0)).unwrap().measured_rank,
            1.0
        );
        assert_eq!(
            SeedSpread::of(&draws, &p99(10.0)).unwrap().measured_rank,
            0.0
        );
        assert_eq!(
            SeedSpread::of(&draws[..3], &p99(1.0)).unwrap().median_ms(),
            40.0
        );
        assert_eq!(SeedSpread::of(&draws[..1], &p99(40.0)), None);
    }

    #[test]
    fn the_report_names_a_tipping_point_only_where_the_seeds_lie_more_than_twice_apart() {
        let wide = SeedSpread::of(&[p99(50.0), p99(120.0), p99(60.0)], &p99(200.0)).unwrap();
        let text = wide.text(200.0);
        assert!(
            text.contains("p99 by seed (3): 50.0-120.0 ms, median 60.0; the run's 200.0 ms lies above 3 of them (rank 1.00)")
                && text.contains("more than 2x apart"),
            "{text}"
        );
        let narrow = SeedSpread::of(&[p99(50.0), p99(90.0)], &p99(70.0)).unwrap();
        let text = narrow.text(70.0);
        assert!(
            text.contains("above 1 of them (rank 0.50)") && !text.contains("apart"),
            "{text}"
        );
        let tied = SeedSpread::of(&[p99(50.0), p99(90.0)], &p99(50.0)).unwrap();
        let text = tied.text(50.0);
        assert!(text.contains("above 0.5 of them (rank 0.25)"), "{text}");
    }
}
