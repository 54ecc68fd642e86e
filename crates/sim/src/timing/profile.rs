// Over 800 lines: the profile format, its validation and the model sampling it share one
// grid layout; a third of the file is their tests.
//! Calibration profiles and the service-time model fitted to them.
//!
//! `capsim calibrate` measures a real model through ONNX Runtime on a grid of batch sizes and
//! input lengths and writes a [`Profile`] (JSON). [`ProfileServiceTime`] turns a profile into a
//! [`ServiceTime`]: inside the grid, a batch's execution time is drawn from the measured quantiles,
//! interpolated between grid points, so the tail survives, plus the measured mean host time to
//! build the batch's inputs; outside the grid, times are extrapolated conservatively and such a
//! batch is flagged ([`ServiceTime::is_extrapolated`]; the engine counts them).
//!
//! Inputs are padded to the longest input of the batch, so the length coordinate of a batch is
//! [`BatchShape::max_input_tokens`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::RngExt;
use serde::{Deserialize, Serialize};

use crate::rng::SimRng;
use crate::timing::least_squares::{least_squares, squared_error};
use crate::timing::service::{BatchShape, ServiceTime};

/// The profile format this build reads and writes.
pub const PROFILE_FORMAT_VERSION: u32 = 1;

/// The quantile levels calibration records for every grid point: dense in the tail, with the
/// minimum (0) and the maximum (1) so sampling never leaves the measured range.
pub const QUANTILE_LEVELS: [f64; 17] = [
    0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.999, 1.0,
];

/// A calibration profile: what was measured, where, and the measurements.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// [`PROFILE_FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// The model that was measured.
    pub model: ModelDescription,
    /// The machine and runtime it was measured on.
    pub environment: Environment,
    /// How it was measured.
    pub settings: CalibrationSettings,
    /// The grid of batch sizes and lengths.
    pub grid: Grid,
    /// The levels (in `[0, 1]`, increasing, from 0 to 1) of every point's quantile vectors.
    pub quantile_levels: Vec<f64>,
    /// One entry per (batch size, length) of the grid.
    pub points: Vec<GridPoint>,
    /// Least-squares fit of the mean latency: `a + b*batch + c*batch*length`.
    pub fit: AffineFit,
    /// How much slower a run is after the model instance idled (absent in profiles measured
    /// without it, and in older ones: then the idle time before a batch changes nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_slowdown: Option<IdleSlowdown>,
}

/// Run time after an idle wait, measured at one or more grid points. On a CPU a model run that
/// follows an idle wait is slower (caches gone cold, clocks down; on the shipped classifier
/// 0.2-0.3 ms more after 2 ms idle and 0.4-1.0 ms more after 8-16 ms), and the extra time grows with
/// the run, but less than in proportion. The simulator adds to each batch's run the extra time
/// that the points say for its idle time, interpolated by run time between the points (see
/// [`IdleSlowdown::extra_ns`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleSlowdown {
    /// Idle waits before the runs, ns: strictly increasing, the first 0 (back to back).
    pub gaps_ns: Vec<u64>,
    /// Timed runs after each gap, at each point.
    pub iterations: u32,
    /// The points, by increasing back-to-back run time.
    pub points: Vec<IdleCurve>,
}

/// The idle slowdown at one grid point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleCurve {
    /// Batch size.
    pub batch_size: u32,
    /// Length (`None` when the grid has no length dimension).
    pub length: Option<u32>,
    /// Median run time after each of [`IdleSlowdown::gaps_ns`], ns.
    pub median_ns: Vec<f64>,
}

impl IdleSlowdown {
    /// The median run time at point `k` after an idle wait of `idle_ns`: interpolated linearly
    /// between the measured gaps, the last gap's beyond it.
    fn time_ns(&self, k: usize, idle_ns: u64) -> f64 {
        let median = &self.points[k].median_ns;
        let g = self.gaps_ns.partition_point(|&gap| gap <= idle_ns);
        if g == 0 {
            return median[0];
        }
        if g == self.gaps_ns.len() {
            return median[g - 1];
        }
        let (g0, g1) = (self.gaps_ns[g - 1] as f64, self.gaps_ns[g] as f64);
        let w = (idle_ns as f64 - g0) / (g1 - g0);
        median[g - 1] + w * (median[g] - median[g - 1])
    }

    /// The time to add to a run of `run_ns` measured after an idle wait of `grid_gap_ns` when it
    /// follows one of `idle_ns` instead, ns (negative when `idle_ns` is the shorter). Each point
    /// gives an extra time at its own run time; between points it is interpolated linearly in the
    /// run time, below the first point it shrinks in proportion to the run, and above the last it
    /// stays the last point's (the cold start is paid once per run). With one point it is
    /// proportional to the run throughout.
    pub fn extra_ns(&self, run_ns: f64, grid_gap_ns: u64, idle_ns: u64) -> f64 {
        let at = |k: usize| {
            let grid = self.time_ns(k, grid_gap_ns);
            (grid, self.time_ns(k, idle_ns) - grid)
        };
        let (mut xa, mut ea) = at(0);
        if self.points.len() == 1 || run_ns <= xa {
            return ea * run_ns / xa.max(1.0);
        }
        for k in 1..self.points.len() {
            let (x1, e1) = at(k);
            if run_ns <= x1 {
                let w = ((run_ns - xa) / (x1 - xa).max(1.0)).clamp(0.0, 1.0);
                return ea + w * (e1 - ea);
            }
            (xa, ea) = (x1, e1);
        }
        ea
    }

    fn validate(&self) -> Result<(), String> {
        let gaps = &self.gaps_ns;
        if gaps.len() < 2 || gaps[0] != 0 || !gaps.windows(2).all(|w| w[0] < w[1]) {
            return Err(
                "idle_slowdown.gaps_ns must start at 0, increase strictly and hold at least 2 gaps"
                    .into(),
            );
        }
        if self.points.is_empty() {
            return Err("idle_slowdown.points must hold at least one point".into());
        }
        for (k, point) in self.points.iter().enumerate() {
            if point.median_ns.len() != gaps.len() {
                return Err(format!(
                    "idle_slowdown.points[{k}].median_ns has {} values for {} gaps",
                    point.median_ns.len(),
                    gaps.len()
                ));
            }
            if let Some(bad) = point
                .median_ns
                .iter()
                .find(|t| !t.is_finite() || **t <= 0.0)
            {
                return Err(format!(
                    "idle_slowdown.points[{k}].median_ns must be finite and positive, found {bad}"
                ));
            }
        }
        if !self
            .points
            .windows(2)
            .all(|w| w[0].median_ns[0] <= w[1].median_ns[0])
        {
            return Err(
                "idle_slowdown.points must be ordered by their back-to-back median_ns".into(),
            );
        }
        Ok(())
    }
}

/// The measured model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelDescription {
    /// Path of the ONNX file as given to `capsim calibrate`.
    pub path: String,
    /// Size of the file in bytes.
    pub file_bytes: u64,
    /// The model's inputs.
    pub inputs: Vec<InputDescription>,
}

/// One input of the measured model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputDescription {
    /// Input name.
    pub name: String,
    /// ONNX element type, for example `int64` or `float32`.
    pub element_type: String,
    /// Dimensions: a number for a fixed one, the symbolic name (or `?`) for a dynamic one.
    pub shape: Vec<String>,
}

/// Where the profile was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    /// `cpu` or `cuda`: the execution provider that ran the model.
    pub execution_provider: String,
    /// The device that ran the model (the CPU model for the CPU provider, the GPU's name for CUDA).
    pub device_name: String,
    /// ONNX Runtime version, for example `1.31.1`.
    pub ort_version: String,
    /// The shared library that was loaded.
    pub ort_library: String,
    /// Intra-op threads requested; 0 means ONNX Runtime's default (one per physical core).
    pub intra_threads: u32,
    /// The host CPU model.
    pub cpu_model: String,
    /// Logical CPUs of the host.
    pub logical_cpus: u32,
    /// Operating system and architecture.
    pub os: String,
    /// When calibration started, RFC 3339 in UTC.
    pub date: String,
    /// Version of capsim that wrote the profile.
    pub capsim_version: String,
}

/// The measurement settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationSettings {
    /// Untimed runs before measuring each grid point.
    pub warmup_iters: u32,
    /// Most timed runs per grid point.
    pub max_iters: u32,
    /// Fewest timed runs before a grid point may stop early.
    pub min_iters: u32,
    /// A point stops early when p50 and p99 change by less than this fraction between checks.
    pub convergence_tolerance: f64,
    /// Token ids are drawn below this.
    pub vocab: u64,
    /// Seed of the random input data.
    pub seed: u64,
    /// Idle wait before every timed run, ns (0: back to back; absent in older profiles).
    #[serde(default)]
    pub idle_gap_ns: u64,
}

/// The calibration grid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grid {
    /// Batch sizes, increasing, each >= 1.
    pub batch_sizes: Vec<u32>,
    /// Name of the dynamic dimension that carries the input length (tokens), if the model has one.
    pub length_dim: Option<String>,
    /// Lengths, increasing; empty when `length_dim` is `None`.
    pub lengths: Vec<u32>,
    /// Other dynamic dimensions, bound to one value for the whole calibration.
    pub fixed_dims: BTreeMap<String, u64>,
}

/// Measurements at one grid point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GridPoint {
    /// Batch size.
    pub batch_size: u32,
    /// Length (the `length_dim` value); `None` when the grid has no length dimension.
    pub length: Option<u32>,
    /// Timed runs.
    pub iterations: u32,
    /// Whether the point stopped early because p50 and p99 converged.
    pub converged: bool,
    /// Quantiles of one `run` (host inputs to host outputs), ns, at the profile's levels.
    pub latency_ns: Vec<u64>,
    /// Mean of one `run`, ns.
    pub latency_mean_ns: f64,
    /// Quantiles of the host time to build the batch's input tensors, ns.
    pub input_build_ns: Vec<u64>,
    /// Mean host time to build the inputs, ns.
    pub input_build_mean_ns: f64,
    /// Mean time per timed run that the measuring thread was runnable but waiting for a CPU
    /// (kept off it by other threads or processes), ns; `None` where the OS does not say (and in
    /// profiles written before it was recorded). Large values mean a busy machine inflated the
    /// measurement.
    #[serde(default)]
    pub cpu_wait_mean_ns: Option<f64>,
}

/// A least-squares fit of mean latency: `a_ns + b_ns * batch + c_ns * batch * length`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AffineFit {
    /// Fixed cost per batch, ns.
    pub a_ns: f64,
    /// Cost per request, ns.
    pub b_ns: f64,
    /// Cost per padded token (`batch * length`), ns; 0 without a length dimension.
    pub c_ns: f64,
    /// Coefficient of determination of the fit over the grid points' means.
    pub r_squared: f64,
}

/// A problem with a profile file.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read or written.
    #[error("profile {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not a profile in JSON.
    #[error("profile {path}: not a capsim profile ({source}); write one with `capsim calibrate`")]
    Json {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: serde_json::Error,
    },
    /// The profile parses but breaks one of its rules.
    #[error("profile{}: {reason}", .path.as_ref().map(|p| format!(" {}", p.display())).unwrap_or_default())]
    Invalid {
        /// The file, when the profile came from one.
        path: Option<PathBuf>,
        /// What is wrong and where.
        reason: String,
    },
}

/// Why a JSON file of a profile kind could not be read (each kind wraps it in its own error).
#[derive(Debug)]
pub(crate) enum JsonFileError {
    /// The file could not be read.
    Io(std::io::Error),
    /// The file is not JSON of the expected shape.
    Json(serde_json::Error),
    /// The value parses but breaks one of its rules.
    Invalid(String),
}

/// Reads `path` as JSON of `T` and checks it with `validate`.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    path: &Path,
    validate: impl Fn(&T) -> Result<(), String>,
) -> Result<T, JsonFileError> {
    let text = std::fs::read_to_string(path).map_err(JsonFileError::Io)?;
    let value: T = serde_json::from_str(&text).map_err(JsonFileError::Json)?;
    validate(&value).map_err(JsonFileError::Invalid)?;
    Ok(value)
}

/// Writes `value` to `path` as pretty-printed JSON with a final newline.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), std::io::Error> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    std::fs::write(path, text)
}

impl Profile {
    /// Reads and validates a profile file.
    pub fn read(path: &Path) -> Result<Profile, ProfileError> {
        let path_buf = || path.to_path_buf();
        read_json(path, Profile::validate).map_err(|e| match e {
            JsonFileError::Io(source) => ProfileError::Io {
                path: path_buf(),
                source,
            },
            JsonFileError::Json(source) => ProfileError::Json {
                path: path_buf(),
                source,
            },
            JsonFileError::Invalid(reason) => ProfileError::Invalid {
                path: Some(path_buf()),
                reason,
            },
        })
    }

    /// Writes the profile as pretty-printed JSON.
    pub fn write(&self, path: &Path) -> Result<(), ProfileError> {
        write_json(path, self).map_err(|source| ProfileError::Io {
            path: path.to_path_buf(),
            source,
        })
    }

    /// Checks the profile's rules; the error names the offending field or grid point.
    pub fn validate(&self) -> Result<(), String> {
        if self.format_version != PROFILE_FORMAT_VERSION {
            return Err(format!(
                "format_version {} is not supported (this capsim reads {PROFILE_FORMAT_VERSION}); re-run `capsim calibrate`",
                self.format_version
            ));
        }
        let levels = &self.quantile_levels;
        let increasing = levels.windows(2).all(|w| w[0] < w[1]);
        if levels.len() < 2 || levels[0] != 0.0 || levels[levels.len() - 1] != 1.0 || !increasing {
            return Err("quantile_levels must increase strictly from 0 to 1".into());
        }
        let batches = &self.grid.batch_sizes;
        if batches.is_empty() || batches[0] == 0 || !batches.windows(2).all(|w| w[0] < w[1]) {
            return Err("grid.batch_sizes must be non-empty, >= 1 and strictly increasing".into());
        }
        let lengths = &self.grid.lengths;
        match &self.grid.length_dim {
            Some(dim)
                if lengths.is_empty()
                    || lengths[0] == 0
                    || !lengths.windows(2).all(|w| w[0] < w[1]) =>
            {
                return Err(format!(
                    "grid.lengths (dimension {dim}) must be non-empty, >= 1 and strictly increasing"
                ));
            }
            Some(_) => {}
            None if !lengths.is_empty() => {
                return Err("grid.lengths must be empty when grid.length_dim is null".into());
            }
            None => {}
        }
        let length_count = lengths.len().max(1);
        if self.points.len() != batches.len() * length_count {
            return Err(format!(
                "the grid has {} batch sizes x {} lengths but the profile has {} points",
                batches.len(),
                length_count,
                self.points.len()
            ));
        }
        for (index, point) in self.points.iter().enumerate() {
            let at = format!(
                "points[{index}] (batch {}, length {:?})",
                point.batch_size, point.length
            );
            if !batches.contains(&point.batch_size) {
                return Err(format!("{at}: batch size is not in grid.batch_sizes"));
            }
            match (point.length, &self.grid.length_dim) {
                (Some(length), Some(_)) if lengths.contains(&length) => {}
                (None, None) => {}
                _ => return Err(format!("{at}: length does not match grid.lengths")),
            }
            for (name, quantiles) in [
                ("latency_ns", &point.latency_ns),
                ("input_build_ns", &point.input_build_ns),
            ] {
                if quantiles.len() != levels.len() {
                    return Err(format!(
                        "{at}: {name} has {} values for {} quantile levels",
                        quantiles.len(),
                        levels.len()
                    ));
                }
                if !quantiles.windows(2).all(|w| w[0] <= w[1]) {
                    return Err(format!("{at}: {name} must not decrease"));
                }
            }
            if point.iterations == 0 || point.latency_ns[levels.len() - 1] == 0 {
                return Err(format!("{at}: no measured runs"));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for point in &self.points {
            if !seen.insert((point.batch_size, point.length)) {
                return Err(format!(
                    "grid point (batch {}, length {:?}) appears twice",
                    point.batch_size, point.length
                ));
            }
        }
        if let Some(idle) = &self.idle_slowdown {
            idle.validate()?;
        }
        Ok(())
    }
}

impl AffineFit {
    /// Least-squares fit of `latency_ns = a + b*batch + c*batch*length` over `(batch, length,
    /// latency_ns)` samples. With no length, or a single one, the `c` term is dropped (0). Returns `None`
    /// when the samples cannot determine the coefficients (fewer distinct points than terms).
    pub fn fit(samples: &[(u32, Option<u32>, f64)]) -> Option<AffineFit> {
        if samples.is_empty() {
            return None;
        }
        // With one length, `batch * length` is a multiple of `batch`: `c` is not identifiable.
        let with_length = samples.iter().any(|s| s.1.is_some() && s.1 != samples[0].1);
        let terms = if with_length { 3 } else { 2 };
        let row = |&(batch, length, _): &(u32, Option<u32>, f64)| {
            let b = f64::from(batch);
            [1.0, b, b * f64::from(length.unwrap_or(0))]
        };
        let rows: Vec<[f64; 3]> = samples.iter().map(row).collect();
        let y: Vec<f64> = samples.iter().map(|s| s.2).collect();
        let set: Vec<usize> = (0..terms).collect();
        let ones = vec![1.0; rows.len()];
        let beta = least_squares(&rows, &y, &ones, &set)?;
        let mean = y.iter().sum::<f64>() / y.len() as f64;
        let ss_res = squared_error(&rows, &y, &ones, &beta);
        let ss_tot: f64 = y.iter().map(|y| (y - mean).powi(2)).sum();
        let r_squared = if ss_tot > 0.0 {
            1.0 - ss_res / ss_tot
        } else {
            1.0
        };
        Some(AffineFit {
            a_ns: beta[0],
            b_ns: beta[1],
            c_ns: if with_length { beta[2] } else { 0.0 },
            r_squared,
        })
    }

    /// The fitted mean latency of a batch, ns.
    pub fn predict_ns(&self, batch: u32, length: u32) -> f64 {
        let b = f64::from(batch);
        self.a_ns + self.b_ns * b + self.c_ns * b * f64::from(length)
    }
}

/// Where a coordinate falls on one axis of a measured grid (also used by the decoder step
/// profile, [`crate::timing::step_profile`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum AxisPosition {
    /// Between grid values `lo` and `lo + 1`, at fraction `t` (`t = 0` on or below the first).
    Inside { lo: usize, t: f64 },
    /// Beyond the last grid value, at coordinate `x`.
    Above { x: f64 },
}

/// One increasing axis of a measured grid (batch sizes, lengths, prompt tokens, contexts).
#[derive(Debug, Clone)]
pub(crate) struct Axis {
    pub(crate) values: Vec<f64>,
}

impl Axis {
    pub(crate) fn locate(&self, x: f64) -> AxisPosition {
        let n = self.values.len();
        let last = self.values[n - 1];
        if x > last {
            return AxisPosition::Above { x };
        }
        if n == 1 || x <= self.values[0] {
            return AxisPosition::Inside { lo: 0, t: 0.0 };
        }
        // First index whose value is >= x; x lies in (values[hi-1], values[hi]].
        let hi = self.values.partition_point(|&v| v < x).max(1);
        let (a, b) = (self.values[hi - 1], self.values[hi]);
        AxisPosition::Inside {
            lo: hi - 1,
            t: (x - a) / (b - a),
        }
    }

    /// The value at `position` of a function known at the grid values through `at(index)`.
    /// Beyond the grid the function grows at least in proportion to the coordinate and at least
    /// as fast as over the last grid interval, which overestimates any time that grows
    /// sub-linearly or affinely with a non-negative intercept.
    pub(crate) fn value(&self, position: AxisPosition, at: impl Fn(usize) -> f64) -> f64 {
        match position {
            AxisPosition::Inside { lo, t: 0.0 } => at(lo),
            AxisPosition::Inside { lo, t } => at(lo) + t * (at(lo + 1) - at(lo)),
            AxisPosition::Above { x } => {
                let n = self.values.len();
                let last = self.values[n - 1];
                let v_last = at(n - 1);
                let proportional = v_last * x / last;
                if n == 1 {
                    return proportional;
                }
                let prev = self.values[n - 2];
                let slope = ((v_last - at(n - 2)) / (last - prev)).max(0.0);
                proportional.max(v_last + slope * (x - last))
            }
        }
    }
}

/// A [`ServiceTime`] drawn from a calibration profile.
///
/// Quantile vectors are made monotone at load time (each is the running maximum over quantile
/// levels, then over batch sizes, then over lengths), so a bigger batch or a longer input never
/// draws a shorter time for the same random number. A batch is timed by drawing one uniform `u`,
/// reading each neighbouring grid point's quantile function at `u`, and interpolating bilinearly
/// in (batch size, length): a quantile-preserving interpolation, so the tail of a point between
/// grid points is the interpolated tail.
#[derive(Debug)]
pub struct ProfileServiceTime {
    batch_axis: Axis,
    /// `None` when the profile has no length dimension.
    length_axis: Option<Axis>,
    levels: Vec<f64>,
    /// Monotone quantiles, ns, indexed `[(length_index * batches + batch_index) * levels + level]`.
    quantiles_ns: Vec<f64>,
    /// Monotone means, ns, indexed `[length_index * batches + batch_index]`.
    means_ns: Vec<f64>,
    /// Monotone mean host times to build a batch's inputs, ns, indexed like `means_ns`.
    input_build_means_ns: Vec<f64>,
    fit: AffineFit,
    /// The idle slowdown and the idle wait the grid was measured after, when the profile has one.
    idle: Option<(IdleSlowdown, u64)>,
}

impl ProfileServiceTime {
    /// Reads a profile file and builds the model.
    pub fn from_file(path: &Path) -> Result<ProfileServiceTime, ProfileError> {
        Ok(ProfileServiceTime::new(&Profile::read(path)?))
    }

    /// Builds the model from a profile that passed [`Profile::validate`].
    pub fn new(profile: &Profile) -> ProfileServiceTime {
        let batches: Vec<u32> = profile.grid.batch_sizes.clone();
        let lengths: Vec<Option<u32>> = if profile.grid.length_dim.is_some() {
            profile.grid.lengths.iter().map(|&l| Some(l)).collect()
        } else {
            vec![None]
        };
        let levels = profile.quantile_levels.clone();
        let (nb, nl, nq) = (batches.len(), lengths.len(), levels.len());
        let mut quantiles_ns = vec![0.0; nb * nl * nq];
        let mut means_ns = vec![0.0; nb * nl];
        let mut input_build_means_ns = vec![0.0; nb * nl];
        for point in &profile.points {
            let bi = batches.iter().position(|&b| b == point.batch_size);
            let li = lengths.iter().position(|&l| l == point.length);
            let (Some(bi), Some(li)) = (bi, li) else {
                continue; // unreachable for a validated profile
            };
            let cell = li * nb + bi;
            means_ns[cell] = point.latency_mean_ns;
            input_build_means_ns[cell] = point.input_build_mean_ns;
            for (q, &value) in point.latency_ns.iter().enumerate() {
                quantiles_ns[cell * nq + q] = value as f64;
            }
        }
        // Running maxima: over levels, then batch sizes, then lengths.
        for cell in 0..nb * nl {
            for q in 1..nq {
                let previous = quantiles_ns[cell * nq + q - 1];
                quantiles_ns[cell * nq + q] = quantiles_ns[cell * nq + q].max(previous);
            }
        }
        for li in 0..nl {
            for bi in 1..nb {
                let (cell, previous) = (li * nb + bi, li * nb + bi - 1);
                means_ns[cell] = means_ns[cell].max(means_ns[previous]);
                input_build_means_ns[cell] =
                    input_build_means_ns[cell].max(input_build_means_ns[previous]);
                for q in 0..nq {
                    let p = quantiles_ns[previous * nq + q];
                    quantiles_ns[cell * nq + q] = quantiles_ns[cell * nq + q].max(p);
                }
            }
        }
        for li in 1..nl {
            for bi in 0..nb {
                let (cell, previous) = (li * nb + bi, (li - 1) * nb + bi);
                means_ns[cell] = means_ns[cell].max(means_ns[previous]);
                input_build_means_ns[cell] =
                    input_build_means_ns[cell].max(input_build_means_ns[previous]);
                for q in 0..nq {
                    let p = quantiles_ns[previous * nq + q];
                    quantiles_ns[cell * nq + q] = quantiles_ns[cell * nq + q].max(p);
                }
            }
        }
        ProfileServiceTime {
            batch_axis: Axis {
                values: batches.iter().map(|&b| f64::from(b)).collect(),
            },
            length_axis: profile.grid.length_dim.as_ref().map(|_| Axis {
                values: profile.grid.lengths.iter().map(|&l| f64::from(l)).collect(),
            }),
            levels,
            quantiles_ns,
            means_ns,
            input_build_means_ns,
            fit: profile.fit,
            idle: profile
                .idle_slowdown
                .as_ref()
                .map(|idle| (idle.clone(), profile.settings.idle_gap_ns)),
        }
    }

    /// The profile's affine fit of mean latency.
    pub fn fit(&self) -> AffineFit {
        self.fit
    }

    /// Whether a batch lies beyond the grid in size or length.
    fn beyond_grid(&self, batch: &BatchShape) -> bool {
        let beyond_batch = matches!(
            self.batch_axis.locate(f64::from(batch.size)),
            AxisPosition::Above { .. }
        );
        let beyond_length = self.length_axis.as_ref().is_some_and(|axis| {
            matches!(
                axis.locate(f64::from(batch.max_input_tokens)),
                AxisPosition::Above { .. }
            )
        });
        beyond_batch || beyond_length
    }

    /// The mean host time to build the inputs of a batch of this shape, ns: a server builds a
    /// batch's tensors (padded to its longest input) before it runs them, and the simulated
    /// execution time charges it on top of [`quantile_ns`](Self::quantile_ns).
    pub fn input_build_mean_ns(&self, batch: &BatchShape) -> f64 {
        self.interpolate(batch, |cell| self.input_build_means_ns[cell])
    }

    /// A grid run time (ns) of this batch, after the batch's own idle time instead of the
    /// grid's (unchanged without an idle slowdown in the profile).
    fn after_idle(&self, run_ns: f64, batch: &BatchShape) -> f64 {
        match &self.idle {
            None => run_ns,
            Some((idle, grid_gap_ns)) => {
                (run_ns + idle.extra_ns(run_ns, *grid_gap_ns, batch.idle_ns)).max(1.0)
            }
        }
    }

    /// The `u`-quantile (`u` in `[0, 1]`) of the measured model run (`Session::run`) of a batch
    /// of this shape, ns, without the input build, after the batch's idle time (see
    /// [`IdleSlowdown::extra_ns`]).
    pub fn quantile_ns(&self, batch: &BatchShape, u: f64) -> f64 {
        let nq = self.levels.len();
        let k = self
            .levels
            .partition_point(|&level| level <= u)
            .clamp(1, nq - 1)
            - 1;
        let w = ((u - self.levels[k]) / (self.levels[k + 1] - self.levels[k])).clamp(0.0, 1.0);
        let run_ns = self.interpolate(batch, |cell| {
            let lo = self.quantiles_ns[cell * nq + k];
            lo + w * (self.quantiles_ns[cell * nq + k + 1] - lo)
        });
        self.after_idle(run_ns, batch)
    }

    /// Bilinear interpolation (with extrapolation) over the grid of a per-cell value.
    fn interpolate(&self, batch: &BatchShape, cell_value: impl Fn(usize) -> f64) -> f64 {
        let nb = self.batch_axis.values.len();
        let batch_position = self.batch_axis.locate(f64::from(batch.size.max(1)));
        match &self.length_axis {
            None => self.batch_axis.value(batch_position, &cell_value),
            Some(length_axis) => {
                let length_position = length_axis.locate(f64::from(batch.max_input_tokens));
                self.batch_axis.value(batch_position, |bi| {
                    length_axis.value(length_position, |li| cell_value(li * nb + bi))
                })
            }
        }
    }
}

impl ServiceTime for ProfileServiceTime {
    fn sample_ns(&self, batch: &BatchShape, rng: &mut SimRng) -> u64 {
        let u: f64 = rng.random();
        let run_ns = self.quantile_ns(batch, u);
        (run_ns + self.input_build_mean_ns(batch)).round().max(1.0) as u64
    }

    fn mean_ns(&self, batch: &BatchShape) -> f64 {
        self.after_idle(self.interpolate(batch, |cell| self.means_ns[cell]), batch)
            + self.input_build_mean_ns(batch)
    }

    fn is_extrapolated(&self, batch: &BatchShape) -> bool {
        self.beyond_grid(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn shape(size: u32, max_input_tokens: u32) -> BatchShape {
        BatchShape {
            size,
            max_input_tokens,
            total_input_tokens: u64::from(size) * u64::from(max_input_tokens),
            idle_ns: 0,
        }
    }

    /// A profile whose point (b, l) has quantiles `base(b, l) * (1 + level)`.
    fn profile(batches: &[u32], lengths: &[u32], base: impl Fn(u32, u32) -> f64) -> Profile {
        let levels = QUANTILE_LEVELS.to_vec();
        let mut points = Vec::new();
        for &length in lengths {
            for &batch in batches {
                let b = base(batch, length);
                let latency_ns: Vec<u64> = levels
                    .iter()
                    .map(|l| (b * (1.0 + l)).round() as u64)
                    .collect();
                points.push(GridPoint {
                    batch_size: batch,
                    length: Some(length),
                    iterations: 100,
                    converged: true,
                    latency_mean_ns: b * 1.5,
                    input_build_ns: vec![1_000; levels.len()],
                    input_build_mean_ns: 1_000.0,
                    cpu_wait_mean_ns: Some(0.0),
                    latency_ns,
                });
            }
        }
        let samples: Vec<_> = points
            .iter()
            .map(|p| (p.batch_size, p.length, p.latency_mean_ns))
            .collect();
        Profile {
            format_version: PROFILE_FORMAT_VERSION,
            model: ModelDescription {
                path: "m.onnx".into(),
                file_bytes: 1,
                inputs: vec![],
            },
            environment: Environment {
                execution_provider: "cpu".into(),
                device_name: "test".into(),
                ort_version: "1.31.1".into(),
                ort_library: "libonnxruntime.so".into(),
                intra_threads: 1,
                cpu_model: "test".into(),
                logical_cpus: 1,
                os: "linux".into(),
                date: "2026-01-01T00:00:00Z".into(),
                capsim_version: "0".into(),
            },
            settings: CalibrationSettings {
                warmup_iters: 1,
                max_iters: 100,
                min_iters: 10,
                convergence_tolerance: 0.02,
                vocab: 100,
                seed: 1,
                idle_gap_ns: 0,
            },
            grid: Grid {
                batch_sizes: batches.to_vec(),
                length_dim: Some("seq".into()),
                lengths: lengths.to_vec(),
                fixed_dims: BTreeMap::new(),
            },
            quantile_levels: levels,
            fit: AffineFit::fit(&samples).expect("fit"),
            points,
            idle_slowdown: None,
        }
    }

    /// Two points: back to back 1 ms and 4 ms; after 2 ms idle +0.2 and +0.4 ms, after 10 ms
    /// +0.5 and +1.0 ms.
    fn with_idle_slowdown(mut p: Profile, grid_gap_ns: u64) -> Profile {
        p.settings.idle_gap_ns = grid_gap_ns;
        p.idle_slowdown = Some(IdleSlowdown {
            gaps_ns: vec![0, 2_000_000, 10_000_000],
            iterations: 50,
            points: vec![
                IdleCurve {
                    batch_size: 1,
                    length: Some(32),
                    median_ns: vec![1e6, 1.2e6, 1.5e6],
                },
                IdleCurve {
                    batch_size: 2,
                    length: Some(32),
                    median_ns: vec![4e6, 4.4e6, 5e6],
                },
            ],
        });
        p
    }

    #[test]
    fn idle_extra_time_interpolates_between_gaps_and_points() {
        let p = with_idle_slowdown(profile(&[1, 2], &[32], affine), 0);
        let idle = p.idle_slowdown.as_ref().unwrap();
        for (run_ns, idle_ns, expected_ns) in [
            // At the points, between gaps and beyond the last gap.
            (1e6, 0, 0.0),
            (1e6, 1_000_000, 0.1e6),
            (1e6, 2_000_000, 0.2e6),
            (4e6, 6_000_000, 0.7e6),
            (4e6, 1_000_000_000, 1.0e6),
            // Between the points, linear in the run time.
            (2.5e6, 10_000_000, 0.75e6),
            // Below the first point in proportion to the run; above the last, held.
            (0.5e6, 10_000_000, 0.25e6),
            (40e6, 10_000_000, 1.0e6),
        ] {
            let got = idle.extra_ns(run_ns, 0, idle_ns);
            assert!(
                (got - expected_ns).abs() < 1e-6,
                "run {run_ns} idle {idle_ns}: {got} != {expected_ns}"
            );
        }
        // Relative to a grid measured after 2 ms (the points ran 1.2 and 4.4 ms there): back to
        // back is faster, 10 ms slower.
        assert!((idle.extra_ns(1.2e6, 2_000_000, 0) + 0.2e6).abs() < 1e-6);
        assert!((idle.extra_ns(4.4e6, 2_000_000, 10_000_000) - 0.6e6).abs() < 1e-6);
        // One point: in proportion to the run.
        let mut one = idle.clone();
        one.points.truncate(1);
        assert!((one.extra_ns(3e6, 0, 10_000_000) - 1.5e6).abs() < 1e-6);
    }

    #[test]
    fn run_times_follow_the_batchs_idle_time_and_not_the_input_build() {
        let plain = ProfileServiceTime::new(&profile(&[1, 2], &[32], affine));
        let with_idle =
            ProfileServiceTime::new(&with_idle_slowdown(profile(&[1, 2], &[32], affine), 0));
        let idle = with_idle_slowdown(profile(&[1, 2], &[32], affine), 0)
            .idle_slowdown
            .unwrap();
        let at = |idle_ns| BatchShape {
            idle_ns,
            ..shape(2, 32)
        };
        for u in [0.0, 0.5, 0.99] {
            let grid_ns = plain.quantile_ns(&at(0), u);
            assert_eq!(with_idle.quantile_ns(&at(0), u), grid_ns);
            for idle_ns in [1_000_000, 50_000_000] {
                let expected = grid_ns + idle.extra_ns(grid_ns, 0, idle_ns);
                let got = with_idle.quantile_ns(&at(idle_ns), u);
                assert!(
                    (got - expected).abs() < 1e-6 && got > grid_ns,
                    "u {u} idle {idle_ns}: {got} != {expected}"
                );
            }
        }
        assert_eq!(
            with_idle.input_build_mean_ns(&at(50_000_000)),
            plain.input_build_mean_ns(&at(0))
        );
        // Without a curve the idle time changes nothing.
        assert_eq!(
            plain.quantile_ns(&at(0), 0.5),
            plain.quantile_ns(&at(50_000_000), 0.5)
        );
    }

    #[test]
    fn malformed_idle_slowdowns_are_refused_with_the_key() {
        let good = with_idle_slowdown(profile(&[1, 2], &[32], affine), 0);
        assert_eq!(good.validate(), Ok(()));
        type Break = fn(&mut IdleSlowdown);
        let cases: [(&str, Break); 6] = [
            ("gaps_ns", |i| i.gaps_ns[0] = 5),
            ("gaps_ns", |i| i.gaps_ns = vec![0, 3, 3]),
            ("points", |i| i.points.clear()),
            ("points[1].median_ns", |i| i.points[1].median_ns.truncate(2)),
            ("points[0].median_ns", |i| {
                i.points[0].median_ns[1] = f64::NAN
            }),
            ("ordered", |i| i.points.reverse()),
        ];
        for (key, break_it) in cases {
            let mut bad = good.clone();
            break_it(bad.idle_slowdown.as_mut().unwrap());
            let err = bad.validate().expect_err("must be refused");
            assert!(err.contains("idle_slowdown") && err.contains(key), "{err}");
        }
    }

    fn affine(b: u32, l: u32) -> f64 {
        1_000_000.0 + 100_000.0 * f64::from(b) + 1_000.0 * f64::from(b * l)
    }

    #[test]
    fn grid_points_reproduce_their_measured_quantiles() {
        let p = profile(&[1, 2, 4, 8], &[16, 32, 64], affine);
        let model = ProfileServiceTime::new(&p);
        for point in &p.points {
            let s = shape(point.batch_size, point.length.unwrap());
            for (level, &expected) in p.quantile_levels.iter().zip(&point.latency_ns) {
                let got = model.quantile_ns(&s, *level);
                assert!(
                    (got - expected as f64).abs() < 1e-6,
                    "level {level}: expected {expected}, got {got}"
                );
            }
        }
    }

    #[test]
    fn between_grid_points_the_quantiles_interpolate_linearly() {
        let p = profile(&[2, 4], &[16, 32], affine);
        let model = ProfileServiceTime::new(&p);
        // Batch 3, length 24: midway on both axes; the base is bilinear in (b, l) at the corners.
        let corners = [affine(2, 16), affine(4, 16), affine(2, 32), affine(4, 32)];
        let expected = corners.iter().map(|c| c.round()).sum::<f64>() / 4.0 * 1.5;
        let got = model.quantile_ns(&shape(3, 24), 0.5);
        assert!(
            (got - expected).abs() < 2.0,
            "expected {expected}, got {got}"
        );
    }

    #[test]
    fn quantiles_never_decrease_with_batch_size_even_when_measurements_do() {
        // Batch 4 measured faster than batch 2 (noise): the model must not be.
        let p = profile(&[1, 2, 4, 8], &[16], |b, _| match b {
            2 => 3_000_000.0,
            4 => 2_000_000.0,
            _ => 1_000_000.0 * f64::from(b),
        });
        let model = ProfileServiceTime::new(&p);
        for level in [0.0, 0.5, 0.99, 1.0] {
            let mut previous = 0.0;
            for size in 1..=20 {
                let q = model.quantile_ns(&shape(size, 16), level);
                assert!(
                    q >= previous,
                    "level {level}: batch {size} gives {q} < {previous}"
                );
                previous = q;
            }
        }
    }

    #[test]
    fn beyond_the_grid_times_grow_at_least_in_proportion_and_are_flagged_extrapolated() {
        let p = profile(&[1, 2, 4, 8], &[16, 32, 64], affine);
        let model = ProfileServiceTime::new(&p);
        let at_edge = model.quantile_ns(&shape(8, 64), 0.5);
        let beyond = model.quantile_ns(&shape(16, 64), 0.5);
        assert!(
            beyond >= 2.0 * at_edge,
            "batch 16: {beyond} < 2 x {at_edge}"
        );
        // The true affine time at batch 16 is below the conservative estimate.
        assert!(
            beyond >= affine(16, 64) * 1.5 - 1.0,
            "{beyond} underestimates"
        );
        let longer = model.quantile_ns(&shape(8, 128), 0.5);
        assert!(
            longer >= 2.0 * at_edge,
            "length 128: {longer} < 2 x {at_edge}"
        );

        // Below the grid a batch is clamped to the smallest point, not extrapolated.
        let beyond: Vec<bool> = [(1, 64), (8, 64), (9, 64), (16, 64), (4, 65), (4, 8)]
            .iter()
            .map(|&(size, length)| model.is_extrapolated(&shape(size, length)))
            .collect();
        assert_eq!(beyond, [false, false, true, true, true, false]);
    }

    #[test]
    fn below_the_grid_a_batch_takes_the_smallest_points_time() {
        let p = profile(&[2, 4], &[16, 32], affine);
        let model = ProfileServiceTime::new(&p);
        let smallest = model.quantile_ns(&shape(2, 16), 0.9);
        assert_eq!(model.quantile_ns(&shape(1, 4), 0.9), smallest);
    }

    #[test]
    fn samples_follow_the_measured_distribution_including_its_tail() {
        let p = profile(&[1, 2], &[16], |_, _| 1_000_000.0);
        let model = ProfileServiceTime::new(&p);
        let mut rng = SimRng::seed_from_u64(11);
        let mut draws: Vec<u64> = (0..20_000)
            .map(|_| model.sample_ns(&shape(1, 16), &mut rng))
            .collect();
        draws.sort_unstable();
        let q = |u: f64| draws[((draws.len() - 1) as f64 * u) as usize] as f64;
        for u in [0.1, 0.5, 0.9, 0.99] {
            // The run's quantile plus the 1 us input build.
            let expected = 1_000_000.0 * (1.0 + u) + 1_000.0;
            assert!(
                (q(u) - expected).abs() / expected < 0.01,
                "p{u}: expected {expected}, got {}",
                q(u)
            );
        }
        assert!(
            *draws.last().unwrap() <= 2_001_000,
            "a draw exceeded the measured maximum"
        );
    }

    #[test]
    fn every_batch_is_charged_the_measured_time_to_build_its_inputs() {
        let mut p = profile(&[1, 8], &[16, 64], affine);
        for point in &mut p.points {
            let build_ns = 200.0 * f64::from(point.batch_size * point.length.unwrap());
            point.input_build_mean_ns = build_ns;
            point.input_build_ns = vec![build_ns as u64; p.quantile_levels.len()];
        }
        let model = ProfileServiceTime::new(&p);
        let s = shape(8, 64);
        let build_ns = 200.0 * 8.0 * 64.0;
        assert_eq!(model.input_build_mean_ns(&s), build_ns);
        let expected_mean = affine(8, 64) * 1.5 + build_ns;
        assert!(
            (model.mean_ns(&s) - expected_mean).abs() < 1.0,
            "mean: expected {expected_mean}, got {}",
            model.mean_ns(&s)
        );
        // Every draw is a run quantile plus the build: never below the fastest run plus it.
        let fastest_run_ns = model.quantile_ns(&s, 0.0);
        let mut rng = SimRng::seed_from_u64(5);
        for _ in 0..1_000 {
            let drawn = model.sample_ns(&s, &mut rng) as f64;
            assert!(
                drawn >= fastest_run_ns + build_ns - 1.0,
                "draw {drawn} < fastest run {fastest_run_ns} + build {build_ns}"
            );
        }
        // Between grid points the build time interpolates like the run time.
        let midway = model.input_build_mean_ns(&shape(8, 40));
        assert!(
            (midway - 200.0 * 8.0 * 40.0).abs() < 1.0,
            "build at length 40: {midway}"
        );
    }

    #[test]
    fn sampling_is_deterministic_for_a_seed() {
        let model = ProfileServiceTime::new(&profile(&[1, 4], &[16, 64], affine));
        let draw = |seed| {
            let mut rng = SimRng::seed_from_u64(seed);
            (0..100)
                .map(|i| model.sample_ns(&shape(1 + i % 6, 10 + 3 * i), &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
    }

    #[test]
    fn affine_fit_recovers_exact_coefficients() {
        let samples: Vec<_> = [1u32, 2, 4, 8]
            .iter()
            .flat_map(|&b| {
                [16u32, 64].map(move |l| {
                    (
                        b,
                        Some(l),
                        500.0 + 20.0 * f64::from(b) + 3.0 * f64::from(b * l),
                    )
                })
            })
            .collect();
        let fit = AffineFit::fit(&samples).expect("fit");
        assert!((fit.a_ns - 500.0).abs() < 1e-6, "a: {}", fit.a_ns);
        assert!((fit.b_ns - 20.0).abs() < 1e-6, "b: {}", fit.b_ns);
        assert!((fit.c_ns - 3.0).abs() < 1e-6, "c: {}", fit.c_ns);
        assert!((fit.r_squared - 1.0).abs() < 1e-9, "r2: {}", fit.r_squared);
        let no_length =
            AffineFit::fit(&[(1, None, 10.0), (2, None, 12.0), (4, None, 16.0)]).expect("fit");
        assert!(
            (no_length.b_ns - 2.0).abs() < 1e-9 && no_length.c_ns == 0.0,
            "{no_length:?}"
        );
        assert!(
            AffineFit::fit(&[(1, Some(16), 10.0)]).is_none(),
            "one point cannot fit three terms"
        );
    }

    #[test]
    fn profile_round_trips_through_json_and_validates() {
        let p = profile(&[1, 2], &[16, 32], affine);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.json");
        p.write(&path).expect("write");
        assert_eq!(Profile::read(&path).expect("read"), p);
    }

    #[test]
    fn a_scenario_service_of_kind_profile_reads_the_file_beside_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        profile(&[1, 2, 4], &[16, 64], affine)
            .write(&dir.path().join("p.json"))
            .expect("write");
        let scenario_path = dir.path().join("s.toml");
        let toml = "[batcher]\nmax_batch_size = 4\nmax_queue_delay = \"1ms\"\n[service]\nkind = \"profile\"\npath = \"p.json\"\n";
        std::fs::write(&scenario_path, toml).expect("write");
        let scenario = crate::Scenario::from_path(&scenario_path).expect("scenario");
        let built = crate::build::build(&scenario, &mut crate::Profiles::default()).expect("build");
        let service = built.pools[0].service.as_ref().expect("a dynamic pool");
        let expected = affine(2, 40) * 1.5;
        let got = service.mean_ns(&shape(2, 40));
        assert!(
            (got - expected).abs() / expected < 0.02,
            "expected ~{expected}, got {got}"
        );
        assert!(service.is_extrapolated(&shape(8, 16)) && !service.is_extrapolated(&shape(4, 64)));

        std::fs::write(&scenario_path, toml.replace("p.json", "absent.json")).expect("write");
        // The scenario is plain data; the build step reads the file and names it.
        let scenario = crate::Scenario::from_path(&scenario_path).expect("scenario");
        let err = crate::build::build(&scenario, &mut crate::Profiles::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("service.path") && err.contains("absent.json"),
            "{err}"
        );
    }

    #[test]
    fn a_profile_written_before_the_idle_gap_and_cpu_wait_reads_with_their_defaults() {
        let p = profile(&[1, 2], &[16, 32], affine);
        let mut json: serde_json::Value = serde_json::to_value(&p).expect("to JSON");
        json["settings"]
            .as_object_mut()
            .expect("settings")
            .remove("idle_gap_ns");
        for point in json["points"].as_array_mut().expect("points") {
            point
                .as_object_mut()
                .expect("point")
                .remove("cpu_wait_mean_ns");
        }
        let read: Profile =
            serde_json::from_value(json).expect("reads without idle_gap_ns and cpu_wait_mean_ns");
        assert_eq!(read.settings.idle_gap_ns, 0);
        assert!(read.points.iter().all(|p| p.cpu_wait_mean_ns.is_none()));
    }

    #[test]
    fn validation_names_the_broken_rule() {
        let mut p = profile(&[1, 2], &[16, 32], affine);
        p.points.pop();
        assert!(
            p.validate().unwrap_err().contains("3 points"),
            "{:?}",
            p.validate()
        );
        let mut p = profile(&[1, 2], &[16, 32], affine);
        p.points[1].latency_ns[3] = 0;
        assert!(p.validate().unwrap_err().contains("must not decrease"));
        let mut p = profile(&[1, 2], &[16, 32], affine);
        p.grid.batch_sizes = vec![2, 1];
        assert!(p.validate().unwrap_err().contains("strictly increasing"));
    }
}
