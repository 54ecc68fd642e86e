//! capsim's calibration: measures how long an ONNX model takes per batch through ONNX Runtime,
//! and writes a [`Profile`] that the simulator's
//! [`ProfileServiceTime`](capsim_sim::timing::profile::ProfileServiceTime) samples from.
//!
//! ONNX Runtime is loaded at run time from a shared library ([`library::locate`] finds one);
//! [`Runtime::open_session`] puts the model on the CPU or CUDA provider. [`calibrate`] then runs
//! the model on a grid of batch sizes and input lengths with random but valid inputs (token ids
//! below the vocabulary size, normal floats), times each `run` with inputs and outputs in host
//! memory (as a server sees it), and stops each grid point early once its p50 and p99 settle.
//!
//! ```no_run
//! use std::collections::BTreeMap;
//! use capsim_calibrate::{CalibrationConfig, ProviderChoice, Runtime, calibrate, library};
//!
//! let runtime = Runtime::load(&library::locate(None)?)?;
//! let config = CalibrationConfig {
//!     batch_sizes: vec![1, 2, 4, 8],
//!     dims: BTreeMap::from([("seq".to_string(), vec![16, 32, 64])]),
//!     ..CalibrationConfig::new("traces/models/text_classifier.onnx".into())
//! };
//! let profile = calibrate(&runtime, &config, &mut |_| {})?;
//! profile.write("profile.json".as_ref())?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod affinity;
pub mod decoder;
mod feed;
mod host;
pub mod library;
pub mod live;
mod measure;
pub mod model;
pub mod probe;
mod runtime;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use capsim_sim::rng::SimRng;
use capsim_sim::timing::profile::{
    AffineFit, CalibrationSettings, Environment, Grid, GridPoint, IdleCurve, IdleSlowdown,
    InputDescription, ModelDescription, PROFILE_FORMAT_VERSION, Profile, QUANTILE_LEVELS,
};
use rand::SeedableRng;

pub use runtime::{Provider, ProviderChoice, ProviderDecision, Runtime};

/// Everything that can stop a calibration. Each message says what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CalibrateError {
    /// No library in any automatic place.
    #[error(
        "ONNX Runtime's shared library was not found (looked in: {}). Install it with `scripts/setup.sh` \
         (puts onnxruntime==1.31.1 into the project's .venv) or `pip install onnxruntime==1.31.1`, \
         or pass --ort-lib /path/to/libonnxruntime.so.1.31.1 (or set ORT_DYLIB_PATH)",
        .searched.join("; ")
    )]
    LibraryNotFound {
        /// The places searched.
        searched: Vec<String>,
    },
    /// An explicitly named library does not exist.
    #[error(
        "ONNX Runtime library {} (from {origin}) does not exist; pass the path of libonnxruntime.so.<version> \
         (for a pip install: <site-packages>/onnxruntime/capi/), or run `scripts/setup.sh`",
        .path.display()
    )]
    LibraryMissing {
        /// The path given.
        path: PathBuf,
        /// `--ort-lib` or `ORT_DYLIB_PATH`.
        origin: &'static str,
    },
    /// The library exists but did not load.
    #[error(
        "could not load ONNX Runtime from {}: {reason}; capsim needs ONNX Runtime 1.31 \
         (`pip install onnxruntime==1.31.1`, or `scripts/setup.sh`)",
        .path.display()
    )]
    LibraryLoad {
        /// The library.
        path: PathBuf,
        /// ONNX Runtime's or the loader's reason.
        reason: String,
    },
    /// The model file does not exist.
    #[error(
        "model file {} does not exist; pass the path of an .onnx file (the shipped models are in traces/models/)",
        .path.display()
    )]
    ModelMissing {
        /// The path given.
        path: PathBuf,
    },
    /// ONNX Runtime could not load the model.
    #[error("ONNX Runtime could not load model {}: {reason}", .path.display())]
    ModelLoad {
        /// The model.
        path: PathBuf,
        /// ONNX Runtime's reason.
        reason: String,
    },
    /// An input's first axis is fixed, so batches of other sizes cannot run.
    #[error(
        "model {}: input `{input}` has shape {shape}, whose first (batch) dimension is fixed, so batch sizes \
         cannot be calibrated; export the model with a dynamic batch dimension (in torch.onnx.export: \
         dynamic_axes={{\"{input}\": {{0: \"batch\"}}}})",
        .model.display()
    )]
    NoDynamicBatch {
        /// The model.
        model: PathBuf,
        /// The input.
        input: String,
        /// Its shape.
        shape: String,
    },
    /// An input calibration cannot fill.
    #[error("model {}: cannot fill input `{input}`: {reason}", .model.display())]
    UnsupportedInput {
        /// The model.
        model: PathBuf,
        /// The input.
        input: String,
        /// Why.
        reason: String,
    },
    /// `--dim` names a dimension the model does not have.
    #[error(
        "--dim {name}: model {} has no dynamic dimension named `{name}`; its dynamic dimensions besides the batch are: {}",
        .model.display(),
        if .available.is_empty() { "none (drop --dim)".to_string() } else { .available.join(", ") }
    )]
    UnknownDim {
        /// The model.
        model: PathBuf,
        /// The name given.
        name: String,
        /// The model's dynamic dimensions.
        available: Vec<String>,
    },
    /// A dynamic dimension has no value.
    #[error(
        "model {}: dynamic dimension `{name}` needs values; bind it with --dim {name}=16,32,64 (several values make it the grid's length axis)",
        .model.display()
    )]
    UnboundDim {
        /// The model.
        model: PathBuf,
        /// The dimension.
        name: String,
    },
    /// Two dimensions were given several values.
    #[error(
        "--dim {first} and --dim {second} both list several values; the grid varies one length dimension: give the other a single value"
    )]
    TwoLengthDims {
        /// The first.
        first: String,
        /// The second.
        second: String,
    },
    /// The CUDA provider was asked for and could not be registered.
    #[error("--ep cuda: {reason}; use --ep cpu (or --ep auto, which falls back to CPU)")]
    CudaUnavailable {
        /// Why.
        reason: String,
    },
    /// A bad setting.
    #[error("{0}")]
    Settings(String),
    /// ONNX Runtime failed while running a grid point.
    #[error("running batch {batch} at length {length:?} failed: {reason}")]
    Run {
        /// Batch size.
        batch: u32,
        /// Length.
        length: Option<u32>,
        /// ONNX Runtime's reason.
        reason: String,
    },
}

impl CalibrateError {
    /// Whether the user can fix this (a path, flag, model or installation), as opposed to a
    /// failure while running.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, CalibrateError::Run { .. })
    }
}

/// What to calibrate and how.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationConfig {
    /// The ONNX model.
    pub model: PathBuf,
    /// Execution provider.
    pub provider: ProviderChoice,
    /// Batch sizes of the grid (each >= 1).
    pub batch_sizes: Vec<u32>,
    /// `--dim` bindings: dynamic dimension name -> values.
    pub dims: BTreeMap<String, Vec<u32>>,
    /// Untimed runs before each grid point.
    pub warmup_iters: u32,
    /// Most timed runs per grid point.
    pub max_iters: u32,
    /// Fewest timed runs before a point may stop early.
    pub min_iters: u32,
    /// Early stop when p50 and p99 move by less than this fraction between checks.
    pub convergence_tolerance: f64,
    /// Intra-op threads; 0 for ONNX Runtime's default.
    pub intra_threads: u32,
    /// Integer inputs are drawn below this.
    pub vocab: u64,
    /// Seed of the input data.
    pub seed: u64,
    /// Idle wait before every run, ns: a serving worker waits for its next batch, and a run after
    /// a wait is slower than one back to back (cold caches). 0: runs back to back.
    pub idle_gap_ns: u64,
    /// Idle waits, ns, after which the idle slowdown is measured at the smallest and the largest
    /// batch (see [`IdleSlowdown`]); empty: not measured. 0 (back to back) is always among them.
    pub idle_curve_gaps_ns: Vec<u64>,
}

/// The idle waits [`CalibrationConfig::new`] measures the idle slowdown after: 0 to 16 ms,
/// doubling from 0.5 ms (batchers wait up to a few `max_queue_delay`s between batches).
pub const DEFAULT_IDLE_CURVE_GAPS_NS: [u64; 7] = [
    0, 500_000, 1_000_000, 2_000_000, 4_000_000, 8_000_000, 16_000_000,
];

impl CalibrationConfig {
    /// Defaults: CPU-or-CUDA (`auto`), batch 1..8, 10 warm-up runs, 60..200 timed runs, 3%
    /// tolerance, vocabulary 1000, seed 1.
    pub fn new(model: PathBuf) -> CalibrationConfig {
        CalibrationConfig {
            model,
            provider: ProviderChoice::Auto,
            batch_sizes: vec![1, 2, 4, 8],
            dims: BTreeMap::new(),
            warmup_iters: 10,
            max_iters: 200,
            min_iters: 60,
            convergence_tolerance: 0.03,
            intra_threads: 0,
            vocab: 1000,
            seed: 1,
            idle_gap_ns: 0,
            idle_curve_gaps_ns: DEFAULT_IDLE_CURVE_GAPS_NS.to_vec(),
        }
    }

    fn check(&self) -> Result<(), CalibrateError> {
        let bad = |m: &str| Err(CalibrateError::Settings(m.to_string()));
        if self.batch_sizes.is_empty() || self.batch_sizes.contains(&0) {
            return bad("--batch needs one or more batch sizes >= 1, for example --batch 1,2,4,8");
        }
        if self.dims.values().any(|v| v.is_empty() || v.contains(&0)) {
            return bad("--dim values must be >= 1, for example --dim seq=16,32,64");
        }
        if self.max_iters == 0 {
            return bad("--iters must be >= 1");
        }
        if self.vocab == 0 {
            return bad("--vocab must be >= 1");
        }
        if self.convergence_tolerance.is_nan() || self.convergence_tolerance < 0.0 {
            return bad("the convergence tolerance must be >= 0");
        }
        Ok(())
    }
}

/// What [`calibrate`] reports as it goes.
#[derive(Debug)]
pub enum Progress<'a> {
    /// The session is open; `points` grid points follow.
    Started {
        /// Grid points to measure.
        points: usize,
        /// Provider in use, and why not CUDA under `auto`.
        decision: &'a ProviderDecision,
    },
    /// A grid point starts.
    PointStarted {
        /// Batch size.
        batch: u32,
        /// Length.
        length: Option<u32>,
    },
    /// A grid point is done.
    PointFinished(&'a GridPoint),
    /// The idle slowdown is being measured: `runs` runs over `points` grid points.
    IdleSlowdownStarted {
        /// Grid points measured.
        points: usize,
        /// Timed runs in all (every gap at every point).
        runs: u32,
    },
    /// The idle slowdown is measured.
    IdleSlowdownFinished(&'a IdleSlowdown),
}

/// Fails with [`CalibrateError::ModelMissing`] unless `model` is a file; cheap, so a command can
/// check it before loading ONNX Runtime.
pub fn check_model_file(model: &std::path::Path) -> Result<(), CalibrateError> {
    if model.is_file() {
        Ok(())
    } else {
        Err(CalibrateError::ModelMissing {
            path: model.to_path_buf(),
        })
    }
}

/// A grid point's batch size and length.
type PointShape = (u32, Option<u32>);

/// One timed run of a batch of `shape`, as a server makes it: build the inputs, then
/// `Session::run`. Returns the build time and the run time, ns; the outputs are dropped after
/// the run's timer stops.
pub(crate) fn time_run(
    session: &mut ort::session::Session,
    inputs: &[model::InputSpec],
    plan: &model::DimPlan,
    (batch, length): PointShape,
    vocab: u64,
    rng: &mut SimRng,
) -> Result<(u64, u64), CalibrateError> {
    let run_error = |reason: String| CalibrateError::Run {
        batch,
        length,
        reason,
    };
    let build_start = Instant::now();
    let values = feed::build_inputs(inputs, plan, batch, length, vocab, rng)
        .map_err(|e| run_error(e.to_string()))?;
    let built_ns = build_start.elapsed().as_nanos() as u64;
    let run_start = Instant::now();
    let outputs = session.run(values).map_err(|e| run_error(e.to_string()))?;
    let ran_ns = run_start.elapsed().as_nanos() as u64;
    drop(outputs);
    Ok((built_ns, ran_ns))
}

/// Measures the run time after each idle wait of `gaps_ns` at each of `points` (batch size,
/// length): `iterations` rounds, each running every point once after every gap in turn (so a
/// machine that changes speed during the measurement slows every gap and point alike; shared
/// machines do, by tens of percent from one second to the next), then each median.
fn measure_idle_slowdown(
    gaps_ns: &[u64],
    iterations: u32,
    points: &[PointShape],
    rng: &mut SimRng,
    run: &mut dyn FnMut(PointShape, &mut SimRng) -> Result<u64, CalibrateError>,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<IdleSlowdown, CalibrateError> {
    let mut gaps: Vec<u64> = gaps_ns.to_vec();
    gaps.push(0);
    gaps.sort_unstable();
    gaps.dedup();
    progress(Progress::IdleSlowdownStarted {
        points: points.len(),
        runs: iterations * (gaps.len() * points.len()) as u32,
    });
    // Warm every point up back to back first, as the grid does.
    for &point in points {
        for _ in 0..5 {
            run(point, rng)?;
        }
    }
    let mut runs_ns = vec![vec![Vec::with_capacity(iterations as usize); gaps.len()]; points.len()];
    for _ in 0..iterations {
        for (g, &gap_ns) in gaps.iter().enumerate() {
            for (k, &point) in points.iter().enumerate() {
                if gap_ns == 0 {
                    // Back to back, as the grid runs: a few runs first, so the core is as warm
                    // as in the grid's long loop whatever gap came before.
                    for _ in 0..3 {
                        run(point, rng)?;
                    }
                } else {
                    std::thread::sleep(std::time::Duration::from_nanos(gap_ns));
                }
                runs_ns[k][g].push(run(point, rng)?);
            }
        }
    }
    let mut curves: Vec<IdleCurve> = points
        .iter()
        .zip(runs_ns.iter_mut())
        .map(|(&(batch_size, length), runs)| IdleCurve {
            batch_size,
            length,
            median_ns: runs
                .iter_mut()
                .map(|r| {
                    r.sort_unstable();
                    (measure::quantile(r, 0.5) as f64).max(1.0)
                })
                .collect(),
        })
        .collect();
    curves.sort_by(|a, b| a.median_ns[0].total_cmp(&b.median_ns[0]));
    Ok(IdleSlowdown {
        gaps_ns: gaps,
        iterations,
        points: curves,
    })
}

/// Measures the model over the grid and returns the profile (with its affine fit).
pub fn calibrate(
    runtime: &Runtime,
    config: &CalibrationConfig,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Profile, CalibrateError> {
    config.check()?;
    let date = jiff::Timestamp::now().to_string();
    let (mut session, decision) =
        runtime.open_session(&config.model, config.provider, config.intra_threads)?;
    let inputs = model::inputs_of(&session, &config.model)?;
    let plan = model::DimPlan::resolve(&inputs, &config.dims, &config.model)?;
    let mut batch_sizes = config.batch_sizes.clone();
    batch_sizes.sort_unstable();
    batch_sizes.dedup();
    let lengths: Vec<Option<u32>> = match &plan.length {
        Some((_, values)) => values.iter().map(|&v| Some(v)).collect(),
        None => vec![None],
    };
    progress(Progress::Started {
        points: batch_sizes.len() * lengths.len(),
        decision: &decision,
    });

    let mut rng = SimRng::seed_from_u64(config.seed);
    let mut grid = GridRun {
        session: &mut session,
        inputs: &inputs,
        plan: &plan,
        config,
        rng: &mut rng,
    };
    let points = grid.measure(&batch_sizes, &lengths, progress)?;
    let idle_slowdown = grid.idle_slowdown(&batch_sizes, &lengths, progress)?;
    let fit = affine_fit_of(&points);
    let profile = Profile {
        format_version: PROFILE_FORMAT_VERSION,
        model: model_description(&config.model, &inputs),
        environment: environment(runtime, decision.provider, config.intra_threads, date),
        settings: CalibrationSettings {
            warmup_iters: config.warmup_iters,
            max_iters: config.max_iters,
            min_iters: config.min_iters,
            convergence_tolerance: config.convergence_tolerance,
            vocab: config.vocab,
            seed: config.seed,
            idle_gap_ns: config.idle_gap_ns,
        },
        grid: Grid {
            batch_sizes,
            length_dim: plan.length.as_ref().map(|(name, _)| name.clone()),
            lengths: plan
                .length
                .as_ref()
                .map(|(_, v)| v.clone())
                .unwrap_or_default(),
            fixed_dims: plan.fixed.clone(),
        },
        quantile_levels: QUANTILE_LEVELS.to_vec(),
        points,
        fit,
        idle_slowdown,
    };
    // The profile is built to the format's rules; a violation is a bug here, reported as such.
    profile.validate().map_err(|reason| {
        CalibrateError::Settings(format!(
            "internal error: calibration produced an invalid profile: {reason}"
        ))
    })?;
    Ok(profile)
}

/// The affine fit of the grid's mean latencies; with one grid point, that point's mean.
fn affine_fit_of(points: &[GridPoint]) -> AffineFit {
    let samples: Vec<(u32, Option<u32>, f64)> = points
        .iter()
        .map(|p| (p.batch_size, p.length, p.latency_mean_ns))
        .collect();
    AffineFit::fit(&samples).unwrap_or(AffineFit {
        // One grid point: the mean is the whole model.
        a_ns: samples.first().map_or(0.0, |s| s.2),
        b_ns: 0.0,
        c_ns: 0.0,
        r_squared: 1.0,
    })
}

/// The timed runs of one calibration: the open session, the model's inputs, the dimension
/// plan, the settings and the seeded generator of the inputs' values.
struct GridRun<'a> {
    session: &'a mut ort::session::Session,
    inputs: &'a [model::InputSpec],
    plan: &'a model::DimPlan,
    config: &'a CalibrationConfig,
    rng: &'a mut SimRng,
}

impl GridRun<'_> {
    /// Every point of the grid (each length, each batch size), reporting each to `progress`.
    fn measure(
        &mut self,
        batch_sizes: &[u32],
        lengths: &[Option<u32>],
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<Vec<GridPoint>, CalibrateError> {
        let cpu_wait = host::CpuWaitMeter::for_this_thread();
        let mut points = Vec::with_capacity(batch_sizes.len() * lengths.len());
        let max_iters = self.config.max_iters as usize;
        let mut runs = (Vec::with_capacity(max_iters), Vec::with_capacity(max_iters));
        for &length in lengths {
            for &batch in batch_sizes {
                progress(Progress::PointStarted { batch, length });
                let point = self.measure_point((batch, length), &cpu_wait, &mut runs)?;
                progress(Progress::PointFinished(&point));
                points.push(point);
            }
        }
        Ok(points)
    }

    /// One grid point: warm-up runs, then timed runs until the latency converges or the
    /// iterations run out. `runs` holds the (run, input build) times, in ns, reused from point
    /// to point.
    fn measure_point(
        &mut self,
        (batch, length): PointShape,
        cpu_wait: &host::CpuWaitMeter,
        (latency_ns, build_ns): &mut (Vec<u64>, Vec<u64>),
    ) -> Result<GridPoint, CalibrateError> {
        let config = self.config;
        let check_every = (config.min_iters / 2).max(10);
        let mut convergence =
            measure::Convergence::new(config.min_iters, check_every, config.convergence_tolerance);
        latency_ns.clear();
        build_ns.clear();
        let mut converged = false;
        // Run-queue wait over the timed runs: `None` once any read fails.
        let mut cpu_wait_ns: Option<u64> = Some(0);
        for iteration in 0..config.warmup_iters + config.max_iters {
            if config.idle_gap_ns > 0 {
                std::thread::sleep(std::time::Duration::from_nanos(config.idle_gap_ns));
            }
            let wait_before_ns = cpu_wait.read_ns();
            let (built_ns, ran_ns) = time_run(
                self.session,
                self.inputs,
                self.plan,
                (batch, length),
                config.vocab,
                self.rng,
            )?;
            let wait_after_ns = cpu_wait.read_ns();
            if iteration < config.warmup_iters {
                continue;
            }
            cpu_wait_ns = cpu_wait_ns
                .zip(wait_before_ns.zip(wait_after_ns))
                .map(|(sum, (before, after))| sum + after.saturating_sub(before));
            latency_ns.push(ran_ns);
            build_ns.push(built_ns);
            if convergence.converged(latency_ns) {
                converged = true;
                break;
            }
        }
        Ok(GridPoint {
            batch_size: batch,
            length,
            iterations: latency_ns.len() as u32,
            converged,
            latency_ns: measure::profile_quantiles(latency_ns),
            latency_mean_ns: measure::mean(latency_ns),
            input_build_ns: measure::profile_quantiles(build_ns),
            input_build_mean_ns: measure::mean(build_ns),
            cpu_wait_mean_ns: cpu_wait_ns
                .map(|total| total as f64 / latency_ns.len().max(1) as f64),
        })
    }

    /// The idle-slowdown curves, when the settings ask for gaps: the smallest and the largest
    /// batch at the middle length (the extra time after an idle wait grows with the run, less
    /// than in proportion, and is interpolated between them).
    fn idle_slowdown(
        &mut self,
        batch_sizes: &[u32],
        lengths: &[Option<u32>],
        progress: &mut dyn FnMut(Progress<'_>),
    ) -> Result<Option<IdleSlowdown>, CalibrateError> {
        let config = self.config;
        if config.idle_curve_gaps_ns.is_empty() {
            return Ok(None);
        }
        let length = lengths[lengths.len() / 2];
        let mut idle_points = vec![(batch_sizes[0], length)];
        if batch_sizes.len() > 1 {
            idle_points.push((batch_sizes[batch_sizes.len() - 1], length));
        }
        let (session, inputs, plan) = (&mut *self.session, self.inputs, self.plan);
        let mut run = |shape: PointShape, rng: &mut SimRng| {
            time_run(session, inputs, plan, shape, config.vocab, rng).map(|(_, ran)| ran)
        };
        let curve = measure_idle_slowdown(
            &config.idle_curve_gaps_ns,
            config.min_iters.max(20),
            &idle_points,
            self.rng,
            &mut run,
            progress,
        )?;
        progress(Progress::IdleSlowdownFinished(&curve));
        Ok(Some(curve))
    }
}

/// The model file as a profile describes it.
pub(crate) fn model_description(
    path: &std::path::Path,
    inputs: &[model::InputSpec],
) -> ModelDescription {
    ModelDescription {
        path: path.display().to_string(),
        file_bytes: std::fs::metadata(path).map_or(0, |m| m.len()),
        inputs: inputs
            .iter()
            .map(|i| InputDescription {
                name: i.name.clone(),
                element_type: i.element_type.name().to_string(),
                shape: i.shape_strings(),
            })
            .collect(),
    }
}

/// Where and with what a profile was measured; `date` is when the measurement started.
pub(crate) fn environment(
    runtime: &Runtime,
    provider: Provider,
    intra_threads: u32,
    date: String,
) -> Environment {
    Environment {
        execution_provider: provider.name().to_string(),
        device_name: match provider {
            Provider::Cpu => host::cpu_model(),
            Provider::Cuda => host::gpu_name(),
        },
        ort_version: runtime.version().to_string(),
        ort_library: runtime.library().display().to_string(),
        intra_threads,
        cpu_model: host::cpu_model(),
        logical_cpus: host::logical_cpus(),
        os: host::os(),
        date,
        capsim_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}
