//! A real in-process server for the live replay: a wall-clock arrival timer, a real queue, and one
//! thread per model instance, each with its own ONNX Runtime session, that applies the scenario's
//! batcher rule ([`Batcher`]) to the queue whenever it is free and runs the batch it forms.
//!
//! Only the queue, batcher and model execution are real; the scenario's network, gateway,
//! pre- and post-processing stages are not reproduced (they take no time in the live records).
//! Execution time includes building the batch's input tensors on the host, padded to the longest
//! input of the batch.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use capsim_sim::record::{Outcome, RequestRecord};
use capsim_sim::rng::SimRng;
use capsim_sim::scenario::BatcherKind;
use capsim_sim::scenario::Pool;
use capsim_sim::summary::InstanceUtilization;
use capsim_sim::timeseries::{Timeseries, sample_records};
use capsim_sim::{Batcher, Decision};
use rand::SeedableRng;

use crate::host::CpuWaitMeter;
use crate::model::{DimPlan, InputSpec};
use crate::{CalibrateError, ProviderChoice, Runtime, feed, model};

/// One request of the replayed trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LiveRequest {
    /// Intended arrival, ns since the replay's start.
    pub arrival_ns: u64,
    /// Input length in tokens (the model's length dimension).
    pub input_tokens: u32,
    /// Output tokens (recorded only).
    pub output_tokens: u32,
}

/// How to run the model instances.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveConfig {
    /// The ONNX model.
    pub model: PathBuf,
    /// Execution provider.
    pub provider: ProviderChoice,
    /// Intra-op threads per session (0: ONNX Runtime's default).
    pub intra_threads: u32,
    /// The model's length dimension (`None` for a model without one).
    pub length_dim: Option<String>,
    /// Longest input the model accepts; longer inputs are cut to it (and counted).
    pub max_length: u32,
    /// Integer inputs are drawn below this.
    pub vocab: u64,
    /// Seed of the input data.
    pub seed: u64,
}

/// What a live replay measured.
#[derive(Debug, Clone)]
pub struct LiveRun {
    /// One record per request, in request order.
    pub records: Vec<RequestRecord>,
    /// Size of every batch, in the order they were formed.
    pub batch_sizes: Vec<u32>,
    /// Busy time per model instance.
    pub utilization: Vec<InstanceUtilization>,
    /// Requests whose input was cut to `max_length`.
    pub truncated_inputs: u64,
    /// Last response, ns since the start.
    pub end_ns: u64,
    /// Time the model instances' threads spent runnable but waiting for a CPU while executing
    /// batches, summed over batches, ns (Linux's `/proc/thread-self/schedstat`; `None` where
    /// the kernel does not say). Other processes on the machine take this from the server; the
    /// calibrated profile cannot know it.
    pub cpu_wait_ns: Option<u64>,
}

impl LiveRun {
    /// Summed execution time of all batches, ns.
    pub fn busy_ns(&self) -> u64 {
        self.utilization
            .iter()
            .map(|u| (u.busy_s * 1e9).round() as u64)
            .sum()
    }
}

struct Queued {
    request: u32,
    queued_ns: u64,
}

struct Batch {
    id: u64,
    formed_ns: u64,
    requests: Vec<Queued>,
}

struct State {
    queue: VecDeque<Queued>,
    next_batch_id: u64,
    arrivals_done: bool,
    failure: Option<CalibrateError>,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    start: Instant,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panicking worker poisons the lock; the state itself stays consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

struct Executed {
    instance: usize,
    batch: Batch,
    exec_start_ns: u64,
    exec_end_ns: u64,
    /// Run-queue wait of the thread during the batch, ns (`None`: not known).
    cpu_wait_ns: Option<u64>,
}

/// A condition-variable timeout wakes late by tens of microseconds (more on a busy machine); the
/// batcher sleeps until this long before its deadline and yields the CPU in a loop for the rest,
/// so `max_queue_delay` is kept as exactly as the simulator keeps it.
const DEADLINE_SPIN_NS: u64 = 150_000;

/// What one model instance's thread needs besides its session.
struct Worker {
    index: usize,
    shared: Arc<Shared>,
    batcher: Batcher,
    inputs: Arc<Vec<InputSpec>>,
    plan: Arc<DimPlan>,
    /// Clamped input length per request.
    lengths: Arc<Vec<u32>>,
    has_length: bool,
    vocab: u64,
    rng: SimRng,
}

/// Whether the live server can serve `pool`: it runs Triton's dynamic batcher only, so a
/// continuous-batching (LLM) pool is refused with what to use instead.
pub fn check_servable(pool: &Pool) -> Result<(), CalibrateError> {
    if matches!(pool.batcher.kind, BatcherKind::Continuous) {
        return Err(CalibrateError::Settings(format!(
            "pool {:?} has batcher.kind = \"continuous\": the live replay serves the dynamic batcher only; \
             simulate LLM scenarios with `capsim simulate`",
            pool.name
        )));
    }
    Ok(())
}

/// Replays `requests` (sorted by arrival) in wall time through the default pool of a scenario.
/// Every request completes (the live server neither rejects nor times out); the function returns
/// when the last response is out, or with the first ONNX Runtime failure.
///
/// Each model instance is one thread that, whenever it is free, applies the batcher's rule to the
/// shared queue itself and runs the batch it forms: no thread hand-off between forming a batch
/// and running it (the simulator has none either). A request's arrival is the moment the timer
/// thread actually put it in the queue (a client timestamps its send), not the trace's intended
/// time, which a sleeping timer misses by tens of microseconds.
pub fn replay(
    runtime: &Runtime,
    pool: &Pool,
    requests: &[LiveRequest],
    config: &LiveConfig,
) -> Result<LiveRun, CalibrateError> {
    check_servable(pool)?;
    let instances_per_server = (pool.execution.gpus * pool.execution.instance_count) as usize;
    let instance_count = pool.instances as usize * instances_per_server;
    check_requests(requests)?;
    let Sessions {
        sessions,
        inputs,
        plan,
        has_length,
    } = open_sessions(runtime, config, instance_count)?;
    let lengths: Arc<Vec<u32>> = Arc::new(
        requests
            .iter()
            .map(|r| r.input_tokens.clamp(1, config.max_length))
            .collect(),
    );

    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            queue: VecDeque::new(),
            next_batch_id: 0,
            arrivals_done: false,
            failure: None,
        }),
        wake: Condvar::new(),
        start: Instant::now(),
    });
    // The client off the servers' CPUs, as in production (see the affinity module).
    let allowed = crate::affinity::allowed_cpus();
    let placement = crate::affinity::Placement::over(&allowed);
    let mut workers = Vec::with_capacity(instance_count);
    for (index, session) in sessions.into_iter().enumerate() {
        let cpu = placement.server(index);
        let worker = Worker {
            index,
            shared: shared.clone(),
            batcher: Batcher::new(&pool.batcher, &pool.replay, false),
            inputs: inputs.clone(),
            plan: plan.clone(),
            lengths: lengths.clone(),
            has_length,
            vocab: config.vocab,
            rng: SimRng::seed_from_u64(config.seed.wrapping_add(index as u64)),
        };
        workers.push(thread::spawn(move || {
            if let Some(cpu) = cpu {
                crate::affinity::pin_current_thread(&[cpu]);
            }
            worker.serve(session)
        }));
    }
    if let Some(cpu) = placement.client {
        crate::affinity::pin_current_thread(&[cpu]);
    }
    let sent_ns = send_arrivals(&shared, requests);
    // The calling thread goes back to every CPU it had.
    if placement.client.is_some() {
        crate::affinity::pin_current_thread(&allowed);
    }
    shared.lock().arrivals_done = true;
    shared.wake.notify_all();
    let mut executed: Vec<Executed> = Vec::new();
    for worker in workers {
        // A panicked worker leaves its batches out; the count check below then fails loudly.
        if let Ok(done) = worker.join() {
            executed.extend(done);
        }
    }
    if let Some(failure) = shared.lock().failure.take() {
        return Err(failure);
    }
    Ok(live_run(executed, requests, &sent_ns, pool, config))
}

/// Checks the requests: fewer than 2^32, sorted by arrival.
fn check_requests(requests: &[LiveRequest]) -> Result<(), CalibrateError> {
    if requests.len() >= u32::MAX as usize {
        return Err(CalibrateError::Settings(format!(
            "the trace has {} requests; the live replay handles fewer than 2^32",
            requests.len()
        )));
    }
    if requests
        .windows(2)
        .any(|w| w[1].arrival_ns < w[0].arrival_ns)
    {
        return Err(CalibrateError::Settings(
            "live replay: arrivals must be sorted".into(),
        ));
    }
    Ok(())
}

/// The model instances' sessions and what their requests are built from.
struct Sessions {
    sessions: Vec<ort::session::Session>,
    inputs: Arc<Vec<InputSpec>>,
    plan: Arc<DimPlan>,
    /// Whether the model has a length axis.
    has_length: bool,
}

/// One session per model instance, opened before the clock starts (loading a model is not
/// serving time), with the model's inputs and their dimensions' plan.
fn open_sessions(
    runtime: &Runtime,
    config: &LiveConfig,
    instance_count: usize,
) -> Result<Sessions, CalibrateError> {
    let mut sessions = Vec::with_capacity(instance_count);
    let mut inputs: Vec<InputSpec> = Vec::new();
    let mut plan: Option<DimPlan> = None;
    let mut has_length = false;
    for _ in 0..instance_count {
        let (session, _) =
            runtime.open_session(&config.model, config.provider, config.intra_threads)?;
        if plan.is_none() {
            inputs = model::inputs_of(&session, &config.model)?;
            let length_dim = match &config.length_dim {
                Some(dim) => Some(dim.clone()),
                None => single_length_dim(&inputs, &config.model)?,
            };
            let mut bindings = std::collections::BTreeMap::new();
            if let Some(dim) = &length_dim {
                // Two values make it the length axis; the shape then follows each batch.
                bindings.insert(dim.clone(), vec![1, config.max_length.max(2)]);
            }
            has_length = length_dim.is_some();
            plan = Some(DimPlan::resolve(&inputs, &bindings, &config.model)?);
        }
        sessions.push(session);
    }
    let plan = Arc::new(
        plan.ok_or_else(|| CalibrateError::Settings("the pool has no model instance".into()))?,
    );
    Ok(Sessions {
        sessions,
        inputs: Arc::new(inputs),
        plan,
        has_length,
    })
}

/// The arrival timer (the calling thread): puts each request in the queue at its arrival,
/// stopping at a failure. Returns each request's time in the queue, ns from the start.
fn send_arrivals(shared: &Shared, requests: &[LiveRequest]) -> Vec<u64> {
    let mut sent_ns = vec![0u64; requests.len()];
    for (index, request) in requests.iter().enumerate() {
        let target = shared.start + Duration::from_nanos(request.arrival_ns);
        let now = Instant::now();
        if target > now {
            thread::sleep(target - now);
        }
        let mut state = shared.lock();
        if state.failure.is_some() {
            break;
        }
        let queued_ns = shared.now_ns();
        sent_ns[index] = queued_ns;
        state.queue.push_back(Queued {
            request: index as u32,
            queued_ns,
        });
        drop(state);
        shared.wake.notify_all();
    }
    sent_ns
}

/// The live run made of the batches the model instances executed: a record per request, the
/// batch sizes and each model instance's utilization.
fn live_run(
    mut executed: Vec<Executed>,
    requests: &[LiveRequest],
    sent_ns: &[u64],
    pool: &Pool,
    config: &LiveConfig,
) -> LiveRun {
    let instances_per_server = (pool.execution.gpus * pool.execution.instance_count) as usize;
    let instance_count = pool.instances as usize * instances_per_server;
    let mut records: Vec<RequestRecord> = Vec::with_capacity(requests.len());
    let mut batch_sizes = Vec::new();
    let mut busy_ns = vec![0u64; instance_count];
    let mut batches_per_instance = vec![0u64; instance_count];
    executed.sort_by_key(|e| e.batch.id);
    let cpu_wait_ns = executed
        .iter()
        .try_fold(0u64, |sum, e| e.cpu_wait_ns.map(|w| sum + w));
    for e in &executed {
        batch_sizes.push(e.batch.requests.len() as u32);
        busy_ns[e.instance] += e.exec_end_ns - e.exec_start_ns;
        batches_per_instance[e.instance] += 1;
        for queued in &e.batch.requests {
            let request = &requests[queued.request as usize];
            let sent = sent_ns[queued.request as usize];
            let mut record = RequestRecord::new(queued.request, 0, sent);
            record.pool = 0;
            record.instance = (e.instance / instances_per_server) as u32;
            record.model_instance = (e.instance % instances_per_server) as u32;
            record.input_tokens = request.input_tokens;
            record.output_tokens = request.output_tokens;
            record.gateway_ns = queued.queued_ns;
            record.admitted_ns = queued.queued_ns;
            record.queued_ns = queued.queued_ns;
            record.batch_formed_ns = e.batch.formed_ns;
            record.exec_start_ns = e.exec_start_ns;
            record.exec_end_ns = e.exec_end_ns;
            record.postprocessed_ns = e.exec_end_ns;
            record.response_ns = e.exec_end_ns;
            record.batch_id = e.batch.id;
            record.batch_size = e.batch.requests.len() as u32;
            record.outcome = Outcome::Completed;
            records.push(record);
        }
    }
    records.sort_by_key(|r| r.request);
    assert_eq!(
        records.len(),
        requests.len(),
        "every request in is answered out"
    );
    let end_ns = records.iter().map(|r| r.response_ns).max().unwrap_or(0);
    let utilization = (0..instance_count)
        .map(|i| InstanceUtilization {
            pool: pool.name.clone(),
            instance: (i / instances_per_server) as u32,
            model_instance: (i % instances_per_server) as u32,
            batches: batches_per_instance[i],
            busy_s: busy_ns[i] as f64 * 1e-9,
            utilization: if end_ns == 0 {
                0.0
            } else {
                busy_ns[i] as f64 / end_ns as f64
            },
        })
        .collect();
    let truncated_inputs = requests
        .iter()
        .filter(|r| r.input_tokens > config.max_length)
        .count() as u64;
    LiveRun {
        records,
        batch_sizes,
        utilization,
        truncated_inputs,
        end_ns,
        cpu_wait_ns,
    }
}

impl Worker {
    /// The model instance's loop: while free, apply the batcher's rule to the queue; run each
    /// batch formed. Returns the batches it ran, when the arrivals are done and the queue is
    /// empty, or at the first failure (recorded in the shared state).
    fn serve(mut self, mut session: ort::session::Session) -> Vec<Executed> {
        let shared = self.shared.clone();
        let cpu_wait = CpuWaitMeter::for_this_thread();
        let mut executed = Vec::new();
        let mut state = shared.lock();
        loop {
            if state.failure.is_some() || (state.arrivals_done && state.queue.is_empty()) {
                return executed;
            }
            let now_ns = shared.now_ns();
            let queue = &state.queue;
            let decision =
                self.batcher
                    .decide(now_ns, queue.len().min(u32::MAX as usize) as u32, || {
                        queue.front().map_or(now_ns, |q| q.queued_ns)
                    });
            match decision {
                Decision::Send(size) => {
                    let batch = Batch {
                        id: state.next_batch_id,
                        formed_ns: now_ns,
                        requests: state.queue.drain(..size as usize).collect(),
                    };
                    state.next_batch_id += 1;
                    drop(state);
                    match self.run(&mut session, &cpu_wait, batch) {
                        Ok(done) => executed.push(done),
                        Err(failure) => {
                            shared.lock().failure.get_or_insert(failure);
                            shared.wake.notify_all();
                            return executed;
                        }
                    }
                    state = shared.lock();
                }
                Decision::WaitUntil(deadline_ns) => {
                    let left_ns = deadline_ns.saturating_sub(now_ns);
                    if left_ns > DEADLINE_SPIN_NS {
                        let timeout = Duration::from_nanos(left_ns - DEADLINE_SPIN_NS);
                        state = shared
                            .wake
                            .wait_timeout(state, timeout)
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .0;
                    } else {
                        drop(state);
                        thread::yield_now();
                        state = shared.lock();
                    }
                }
                Decision::Idle => {
                    state = shared
                        .wake
                        .wait(state)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
            }
        }
    }

    /// Builds the batch's inputs (padded to its longest input) and runs it; the time of both is
    /// the batch's execution.
    fn run(
        &mut self,
        session: &mut ort::session::Session,
        cpu_wait: &CpuWaitMeter,
        batch: Batch,
    ) -> Result<Executed, CalibrateError> {
        // Read outside the timed span: the read itself takes microseconds.
        let wait_before_ns = cpu_wait.read_ns();
        let exec_start_ns = self.shared.now_ns();
        let size = batch.requests.len() as u32;
        let length = self.has_length.then(|| {
            batch
                .requests
                .iter()
                .map(|q| self.lengths[q.request as usize])
                .max()
                .unwrap_or(1)
        });
        feed::build_inputs(
            &self.inputs,
            &self.plan,
            size,
            length,
            self.vocab,
            &mut self.rng,
        )
        .and_then(|values| session.run(values).map(drop))
        .map_err(|e| CalibrateError::Run {
            batch: size,
            length,
            reason: e.to_string(),
        })?;
        let exec_end_ns = self.shared.now_ns();
        let cpu_wait_ns = wait_before_ns
            .zip(cpu_wait.read_ns())
            .map(|(before, after)| after.saturating_sub(before));
        Ok(Executed {
            instance: self.index,
            batch,
            exec_start_ns,
            exec_end_ns,
            cpu_wait_ns,
        })
    }
}

/// The model's one dynamic dimension besides the batch (the input length), if it has one.
fn single_length_dim(
    inputs: &[InputSpec],
    model: &std::path::Path,
) -> Result<Option<String>, CalibrateError> {
    let mut names: Vec<String> = Vec::new();
    for input in inputs {
        for axis in 1..input.dims.len() {
            let name = input.dim_name(axis);
            if matches!(input.dims[axis], crate::model::Dim::Dynamic(_)) && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    match names.len() {
        0 => Ok(None),
        1 => Ok(names.pop()),
        _ => Err(CalibrateError::Settings(format!(
            "model {} has several dynamic dimensions ({}): name the input length with --length-dim",
            model.display(),
            names.join(", ")
        ))),
    }
}

/// Samples a finished live run every `interval_ns` (see [`capsim_sim::timeseries::interval_for`]) into the
/// simulator's timeseries columns, from its records (see
/// [`capsim_sim::timeseries::sample_records`]).
pub fn timeseries_of(run: &LiveRun, interval_ns: u64, model_instances: u32) -> Timeseries {
    sample_records(&run.records, run.end_ns, interval_ns, model_instances)
}
