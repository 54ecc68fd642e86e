//! A per-operator roofline whose coefficients transfer: calibrated on one model's measured
//! operator table on a GPU, it predicts another model's operators, or another tensor-parallel
//! degree's, on that GPU.
//!
//! Each operator gets an analytic cost from the per-rank shapes of its layer ([`LayerShape`]):
//!
//! - **GEMMs** (`qkv_proj`, `o_proj`, `gate_up_proj`, `down_proj`, `lm_head`), `M` tokens by `N`
//!   outputs by `K` inputs: `2MNK` FLOPs and `(NK + MK + MN)` values moved (weights, input,
//!   output). Time = `launch + max(flops / (F * eff_c), bytes / (B * eff_b))`, with `F`, `B` the
//!   GPU's datasheet peaks and a compute efficiency that depends on the shape:
//!   `eff_c = peak * (M / (M + m_half)) * wave^p`, where `wave` is the share of the GPU's
//!   streaming multiprocessors busy in the kernel's last wave of 128x128 output tiles
//!   (`tiles / (ceil(tiles / SMs) * SMs)`). The first factor is the small-`M` ramp (too few rows
//!   to fill a tile's pipeline), the second the tile quantization that makes a narrow GEMM (large
//!   tensor parallelism, small `N`) slower than its FLOPs say. Five coefficients for every GEMM.
//! - **Element-wise and norm operators** (`layernorm`, `qk_norm`, `rotary_emb`, `act_fn`, `add`,
//!   `embedding`): values moved only. Time = `launch + max(row_ns * width, bytes / (B * eff_b))`,
//!   where `width` is the values of one token's row (these kernels give each token's row to one
//!   thread block, which walks it: at a few tokens the time grows with the row, not the bytes).
//!   `row_ns` and `eff_b` are per operator (kernels differ by 3x in how close they come to the
//!   bandwidth; `eff_b` may exceed 1, since an element-wise kernel reads what the kernel before
//!   it just wrote, from the L2 cache when it fits); `launch` is one figure for them all, the
//!   fastest element-wise time of the calibration table, since one table has one row width per
//!   operator and cannot tell a launch from per-row work. `qk_norm` is modelled only for a layer
//!   that has it ([`LayerShape::qk_norm`], Qwen3). [`LayerShape::from_config`] reads the shape
//!   from a Hugging Face config, for tables that record none (LLMServingSim bundles).
//!
//! Calibration is least squares on log time (relative errors, so that the microsecond kernels
//! count as much as the millisecond ones), by a deterministic Nelder-Mead search.
//! Values are BF16 (2 bytes).

use std::collections::BTreeMap;

use super::table::{Operator, OperatorTable};
use crate::timing::hardware::{self, Accelerator, ComputeDtype, Hardware, MissingFigure};
use crate::timing::model_config::ModelConfig;

/// Bytes of one value (BF16).
pub const BYTES_PER_VALUE: f64 = 2.0;

/// Rows and columns of the output tile one streaming multiprocessor computes at a time (cuBLAS's
/// large BF16 kernels on Ampere and Hopper).
const TILE: f64 = 128.0;

/// The shapes of one decoder layer of a dense transformer, and the tensor-parallel degree that
/// splits it across ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    /// Model width (`hidden_size`).
    pub hidden: u64,
    /// Query heads.
    pub heads: u64,
    /// Key/value heads (grouped-query attention; equal to `heads` without it).
    pub kv_heads: u64,
    /// Values per head.
    pub head_dim: u64,
    /// MLP width (`intermediate_size`).
    pub intermediate: u64,
    /// Vocabulary size.
    pub vocab: u64,
    /// Ranks the layer is split across (1 without tensor parallelism).
    pub tensor_parallel: u64,
    /// Whether the layer normalises each query and key head (`qk_norm`, Qwen3); without it the
    /// roofline does not model `qk_norm`.
    pub qk_norm: bool,
}

/// What one call of an operator does on one rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Work {
    /// A matrix product of `m x k` by `k x n`.
    Gemm {
        /// Rows (tokens or sequences).
        m: f64,
        /// Output columns.
        n: f64,
        /// Inner dimension.
        k: f64,
    },
    /// An element-wise or norm kernel.
    Elementwise {
        /// Bytes read and written.
        bytes: f64,
        /// Values of one token's row.
        width: f64,
    },
}

impl LayerShape {
    /// The layer of `config` split across `tensor_parallel` ranks (0 is taken as 1): its widths,
    /// heads, vocabulary and q/k norms as the config gives them. For a mixture of experts,
    /// `intermediate` is the config's `intermediate_size` (the dense MLP's width), since the
    /// roofline models no expert block.
    pub fn from_config(config: &ModelConfig, tensor_parallel: u64) -> LayerShape {
        LayerShape {
            hidden: u64::from(config.hidden_size),
            heads: u64::from(config.num_attention_heads),
            kv_heads: u64::from(config.num_kv_heads),
            head_dim: u64::from(config.head_dim),
            intermediate: u64::from(config.intermediate_size),
            vocab: u64::from(config.vocab_size),
            tensor_parallel: tensor_parallel.max(1),
            qk_norm: config.qk_norm,
        }
    }

    /// The same layer at `tensor_parallel` ranks.
    pub fn at_tensor_parallel(self, tensor_parallel: u64) -> LayerShape {
        LayerShape {
            tensor_parallel,
            ..self
        }
    }

    /// What `op` does on one rank over `tokens` tokens (sequences for `lm_head`), or `None` for an
    /// operator this roofline does not model (the sampler) or the layer does not have
    /// (`qk_norm` without [`LayerShape::qk_norm`]).
    pub fn work(&self, op: Operator, tokens: f64) -> Option<Work> {
        let t = self.tensor_parallel.max(1) as f64;
        let (h, i) = (self.hidden as f64, self.intermediate as f64);
        let q = (self.heads * self.head_dim) as f64;
        let qk = ((self.heads + self.kv_heads) * self.head_dim) as f64 / t;
        let qkv = ((self.heads + 2 * self.kv_heads) * self.head_dim) as f64 / t;
        let gemm = |n: f64, k: f64| Some(Work::Gemm { m: tokens, n, k });
        let moved = |values_per_token: f64, width: f64| {
            Some(Work::Elementwise {
                bytes: tokens * values_per_token * BYTES_PER_VALUE,
                width,
            })
        };
        match op {
            Operator::QkvProj => gemm(qkv, h),
            Operator::OProj => gemm(h, q / t),
            Operator::GateUpProj => gemm(2.0 * i / t, h),
            Operator::DownProj => gemm(h, i / t),
            Operator::LmHead => gemm(self.vocab as f64 / t, h),
            // Read the row, write it.
            Operator::Layernorm | Operator::FinalLayernorm | Operator::Embedding => {
                moved(2.0 * h, h)
            }
            Operator::QkNorm if !self.qk_norm => None,
            Operator::QkNorm | Operator::RotaryEmb => moved(2.0 * qk, qk),
            // Read gate and up, write their product.
            Operator::ActFn => moved(3.0 * i / t, i / t),
            // Read two rows, write one.
            Operator::Add => moved(3.0 * h, h),
            Operator::Sampler => None,
        }
    }
}

/// A GPU as the per-operator roofline sees it: the datasheet peaks and the number of streaming
/// multiprocessors (for the GEMMs' tile waves), both from the hardware catalogue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gpu {
    /// Peak dense BF16 throughput and memory bandwidth.
    pub hardware: Hardware,
    /// Streaming multiprocessors (compute units on AMD).
    pub streaming_multiprocessors: u32,
}

/// Why a catalogue entry cannot be a [`Gpu`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GpuError {
    /// No dense BF16 figure.
    #[error("{0}")]
    Figure(MissingFigure),
    /// No SM count.
    #[error(
        "no public source gives the {name}'s ({model}) SM count, which the GEMMs' tile waves need"
    )]
    NoComputeUnits {
        /// The entry's name.
        name: &'static str,
        /// The product.
        model: &'static str,
    },
}

impl Gpu {
    /// The catalogue entry `accelerator` with its dense BF16 figures and SM count; an error
    /// when the catalogue holds either as absent (no public source).
    pub fn of(accelerator: &Accelerator) -> Result<Gpu, GpuError> {
        let hardware = accelerator
            .hardware(ComputeDtype::Bf16)
            .map_err(GpuError::Figure)?;
        let streaming_multiprocessors =
            accelerator.compute_units.ok_or(GpuError::NoComputeUnits {
                name: accelerator.name,
                model: accelerator.model,
            })?;
        Ok(Gpu {
            hardware,
            streaming_multiprocessors,
        })
    }

    /// The GPU `name` names in the catalogue (a name, an alias or a driver's device name; see
    /// [`hardware::lookup`]), or `None` when it names none or lacks a figure.
    pub fn preset(name: &str) -> Option<Gpu> {
        Gpu::of(hardware::find(name)?).ok()
    }
}

/// The coefficients shared by every GEMM.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmCoefficients {
    /// Fixed time of one GEMM call, ns.
    pub launch_ns: f64,
    /// Compute efficiency of a large, full-wave GEMM (fraction of peak FLOPs).
    pub peak_compute_efficiency: f64,
    /// Rows `M` at which the compute efficiency is half its peak.
    pub half_efficiency_tokens: f64,
    /// Exponent of the last wave's occupancy in the compute efficiency.
    pub wave_exponent: f64,
    /// Fraction of peak bandwidth a weight-bound GEMM reaches.
    pub bandwidth_efficiency: f64,
}

/// The coefficients of one element-wise operator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ElementwiseCoefficients {
    /// Time per value of one token's row when one row is all there is, ns.
    pub row_ns_per_value: f64,
    /// Effective bandwidth on many tokens as a multiple of the peak memory bandwidth: above 1
    /// where the kernel's operands come from the L2 cache (the kernel before it just wrote
    /// them, and they fit).
    pub bandwidth_efficiency: f64,
}

/// Calibrated per-operator roofline coefficients for one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Coefficients {
    /// The GPU they were calibrated on.
    pub gpu: Gpu,
    /// Every GEMM's.
    pub gemm: GemmCoefficients,
    /// Fixed time of one element-wise call, ns.
    pub elementwise_launch_ns: f64,
    /// Each element-wise operator calibrated.
    pub elementwise: BTreeMap<Operator, ElementwiseCoefficients>,
    /// All element-wise operators of the calibration table fitted together: for an operator
    /// the table did not have (a `qk_norm` uses `layernorm`'s when there is one).
    pub elementwise_pooled: ElementwiseCoefficients,
}

impl Coefficients {
    /// The coefficients `op` is predicted with: its own, a similar operator's (the norms
    /// `qk_norm` and `final_layernorm` take `layernorm`'s), or the pooled fit.
    pub fn elementwise_for(&self, op: Operator) -> ElementwiseCoefficients {
        let similar = match op {
            Operator::QkNorm | Operator::FinalLayernorm => Some(Operator::Layernorm),
            _ => None,
        };
        self.elementwise
            .get(&op)
            .or_else(|| similar.and_then(|s| self.elementwise.get(&s)))
            .copied()
            .unwrap_or(self.elementwise_pooled)
    }
}

/// Predicted time of one call of `op` on one rank over `tokens` tokens (sequences for
/// `lm_head`), ns; `None` for an operator the roofline does not model (the sampler).
pub fn predict(
    coeffs: &Coefficients,
    shape: &LayerShape,
    op: Operator,
    tokens: f64,
) -> Option<f64> {
    Some(match shape.work(op, tokens)? {
        Work::Gemm { m, n, k } => gemm_ns(&coeffs.gemm, &coeffs.gpu, m, n, k),
        Work::Elementwise { bytes, width } => elementwise_ns(
            coeffs.elementwise_launch_ns,
            &coeffs.elementwise_for(op),
            &coeffs.gpu,
            bytes,
            width,
        ),
    })
}

/// The GEMM roofline, ns.
fn gemm_ns(c: &GemmCoefficients, gpu: &Gpu, m: f64, n: f64, k: f64) -> f64 {
    let flops = 2.0 * m * n * k;
    let bytes = (n * k + m * k + m * n) * BYTES_PER_VALUE;
    let sms = f64::from(gpu.streaming_multiprocessors.max(1));
    let tiles = (m / TILE).ceil().max(1.0) * (n / TILE).ceil().max(1.0);
    let wave = tiles / ((tiles / sms).ceil() * sms);
    let eff_c =
        c.peak_compute_efficiency * m / (m + c.half_efficiency_tokens) * wave.powf(c.wave_exponent);
    let compute_s = flops / (gpu.hardware.flops_per_s * eff_c);
    let memory_s = bytes / (gpu.hardware.memory_bandwidth_bytes_per_s * c.bandwidth_efficiency);
    c.launch_ns + compute_s.max(memory_s) * 1e9
}

/// The element-wise roofline, ns.
fn elementwise_ns(
    launch_ns: f64,
    c: &ElementwiseCoefficients,
    gpu: &Gpu,
    bytes: f64,
    width: f64,
) -> f64 {
    let memory_ns =
        bytes / (gpu.hardware.memory_bandwidth_bytes_per_s * c.bandwidth_efficiency) * 1e9;
    launch_ns + (c.row_ns_per_value * width).max(memory_ns)
}

/// Why a table could not calibrate the roofline.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CalibrationError {
    /// The shape's tensor-parallel degree is not the table's.
    #[error(
        "{path}: the table is for tensor parallel {table}, the shape for {shape}; give the shape at the table's degree"
    )]
    TensorParallel {
        /// The table's folder.
        path: String,
        /// The table's degree.
        table: u32,
        /// The shape's.
        shape: u64,
    },
    /// The table lacks a class of operators.
    #[error(
        "{path}: no {what} operator measured; calibrate on a table with GEMMs and element-wise operators"
    )]
    Missing {
        /// The table's folder.
        path: String,
        /// Which class.
        what: &'static str,
    },
    /// The table measures an operator the shape's layer does not have.
    #[error(
        "{path}: the table measures {operator}, which the given model's layer does not have; give the shape of the table's own model ({model})"
    )]
    NotInLayer {
        /// The table's folder.
        path: String,
        /// The model the table names.
        model: String,
        /// The operator.
        operator: &'static str,
    },
    /// A measured time is zero, which log-time least squares cannot use.
    #[error("{path}: {operator} at {tokens} tokens takes 0 ns; a table of measured times has none")]
    ZeroTime {
        /// The table's folder.
        path: String,
        /// The operator.
        operator: &'static str,
        /// Its size.
        tokens: f64,
    },
}

/// Calibrates the roofline on `table`, whose layer is `shape`, measured on `gpu`: the GEMM
/// coefficients on every GEMM of the table together, each element-wise operator's on its own
/// curve, by least squares on log time. Deterministic: the same table gives the same
/// coefficients.
pub fn calibrate(
    table: &OperatorTable,
    shape: &LayerShape,
    gpu: Gpu,
) -> Result<Coefficients, CalibrationError> {
    let path = table.source.display().to_string();
    if shape.tensor_parallel != u64::from(table.tensor_parallel) {
        return Err(CalibrationError::TensorParallel {
            path,
            table: table.tensor_parallel,
            shape: shape.tensor_parallel,
        });
    }
    let mut gemms: Vec<(f64, f64, f64, f64)> = Vec::new();
    let mut elementwise: BTreeMap<Operator, Vec<(f64, f64, f64)>> = BTreeMap::new();
    for (&op, curve) in &table.operators {
        for &(tokens, ns) in curve.points() {
            if ns <= 0.0 {
                return Err(CalibrationError::ZeroTime {
                    path,
                    operator: op.name(),
                    tokens,
                });
            }
            match shape.work(op, tokens) {
                Some(Work::Gemm { m, n, k }) => gemms.push((m, n, k, ns)),
                Some(Work::Elementwise { bytes, width }) => {
                    elementwise.entry(op).or_default().push((bytes, width, ns))
                }
                None if op == Operator::QkNorm => {
                    return Err(CalibrationError::NotInLayer {
                        path,
                        model: table.model.clone(),
                        operator: op.name(),
                    });
                }
                None => {}
            }
        }
    }
    if gemms.is_empty() {
        return Err(CalibrationError::Missing { path, what: "GEMM" });
    }
    if elementwise.is_empty() {
        return Err(CalibrationError::Missing {
            path,
            what: "element-wise",
        });
    }
    let gemm = fit_gemm(&gemms, &gpu);
    let launch_ns = elementwise
        .values()
        .flatten()
        .map(|&(_, _, ns)| ns)
        .fold(f64::INFINITY, f64::min);
    let per_operator = elementwise
        .iter()
        .map(|(&op, rows)| (op, fit_elementwise(rows, launch_ns, &gpu)))
        .collect();
    let all: Vec<(f64, f64, f64)> = elementwise.values().flatten().copied().collect();
    Ok(Coefficients {
        gpu,
        gemm,
        elementwise_launch_ns: launch_ns,
        elementwise: per_operator,
        elementwise_pooled: fit_elementwise(&all, launch_ns, &gpu),
    })
}

fn sigmoid(z: f64) -> f64 {
    1.0 / (1.0 + (-z).exp())
}

/// GEMM coefficients from unconstrained search variables: positive ones by `exp`, fractions
/// by the logistic function.
fn gemm_from(z: &[f64]) -> GemmCoefficients {
    GemmCoefficients {
        launch_ns: z[0].exp(),
        peak_compute_efficiency: sigmoid(z[1]),
        half_efficiency_tokens: z[2].exp(),
        wave_exponent: z[3].exp(),
        bandwidth_efficiency: sigmoid(z[4]),
    }
}

fn fit_gemm(rows: &[(f64, f64, f64, f64)], gpu: &Gpu) -> GemmCoefficients {
    let loss = |z: &[f64]| {
        let c = gemm_from(z);
        rows.iter()
            .map(|&(m, n, k, ns)| (gemm_ns(&c, gpu, m, n, k) / ns).ln().powi(2))
            .sum()
    };
    // Start: 5 us launch, 73% of peak FLOPs, half of it at 64 rows, linear in the last wave,
    // 73% of peak bandwidth.
    let start = [5000f64.ln(), 1.0, 64f64.ln(), 0.0, 1.0];
    gemm_from(&minimize(loss, &start))
}

fn fit_elementwise(rows: &[(f64, f64, f64)], launch_ns: f64, gpu: &Gpu) -> ElementwiseCoefficients {
    let from = |z: &[f64]| ElementwiseCoefficients {
        row_ns_per_value: z[0].exp(),
        bandwidth_efficiency: z[1].exp(),
    };
    let loss = |z: &[f64]| {
        let c = from(z);
        rows.iter()
            .map(|&(bytes, width, ns)| {
                (elementwise_ns(launch_ns, &c, gpu, bytes, width) / ns)
                    .ln()
                    .powi(2)
            })
            .sum()
    };
    from(&minimize(loss, &[0.3f64.ln(), sigmoid(1.0).ln()]))
}

/// Nelder-Mead iterations of each of the two searches (the second restarts from the first's
/// best point with a fresh simplex, which frees a collapsed one).
const SEARCH_ITERATIONS: usize = 1500;

/// The point near `start` where `f` is least, by two Nelder-Mead searches. Deterministic.
fn minimize(f: impl Fn(&[f64]) -> f64, start: &[f64]) -> Vec<f64> {
    let first = nelder_mead(&f, start);
    nelder_mead(&f, &first)
}

/// One Nelder-Mead search from `start` with a simplex of steps of 0.5 along each axis (the
/// standard reflection 1, expansion 2, contraction and shrink 1/2).
fn nelder_mead(f: &impl Fn(&[f64]) -> f64, start: &[f64]) -> Vec<f64> {
    let n = start.len();
    let mut simplex: Vec<(Vec<f64>, f64)> = (0..=n)
        .map(|i| {
            let mut x = start.to_vec();
            if i > 0 {
                x[i - 1] += 0.5;
            }
            let v = f(&x);
            (x, v)
        })
        .collect();
    let point = |c: &[f64], toward: &[f64], scale: f64| -> Vec<f64> {
        c.iter()
            .zip(toward)
            .map(|(c, w)| c + scale * (c - w))
            .collect()
    };
    for _ in 0..SEARCH_ITERATIONS {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let centroid: Vec<f64> = (0..n)
            .map(|j| simplex[..n].iter().map(|(x, _)| x[j]).sum::<f64>() / n as f64)
            .collect();
        let worst = simplex[n].0.clone();
        let reflected = point(&centroid, &worst, 1.0);
        let fr = f(&reflected);
        if fr < simplex[0].1 {
            let expanded = point(&centroid, &worst, 2.0);
            let fe = f(&expanded);
            simplex[n] = if fe < fr {
                (expanded, fe)
            } else {
                (reflected, fr)
            };
        } else if fr < simplex[n - 1].1 {
            simplex[n] = (reflected, fr);
        } else {
            let contracted = point(&centroid, &worst, -0.5);
            let fc = f(&contracted);
            if fc < simplex[n].1 {
                simplex[n] = (contracted, fc);
            } else {
                let best = simplex[0].0.clone();
                for (x, v) in simplex.iter_mut().skip(1) {
                    *x = best
                        .iter()
                        .zip(x.iter())
                        .map(|(b, x)| b + 0.5 * (x - b))
                        .collect();
                    *v = f(x);
                }
            }
        }
    }
    simplex
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(x, _)| x)
        .unwrap_or_else(|| start.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LLAMA_7B: LayerShape = LayerShape {
        hidden: 4096,
        heads: 32,
        kv_heads: 32,
        head_dim: 128,
        intermediate: 11008,
        vocab: 32000,
        tensor_parallel: 1,
        qk_norm: false,
    };

    #[test]
    fn per_rank_gemm_shapes_split_by_tensor_parallelism() {
        let s = LayerShape {
            kv_heads: 8,
            ..LLAMA_7B
        }
        .at_tensor_parallel(4);
        let gemm = |op| match s.work(op, 16.0) {
            Some(Work::Gemm { m, n, k }) => (m, n, k),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            gemm(Operator::QkvProj),
            (16.0, (32.0 + 16.0) * 128.0 / 4.0, 4096.0)
        );
        assert_eq!(gemm(Operator::OProj), (16.0, 4096.0, 1024.0));
        assert_eq!(gemm(Operator::GateUpProj), (16.0, 5504.0, 4096.0));
        assert_eq!(gemm(Operator::DownProj), (16.0, 4096.0, 2752.0));
        assert_eq!(gemm(Operator::LmHead), (16.0, 8000.0, 4096.0));
        assert_eq!(s.work(Operator::Sampler, 16.0), None);
        assert_eq!(
            s.work(Operator::ActFn, 16.0),
            Some(Work::Elementwise {
                bytes: 16.0 * 3.0 * 2752.0 * 2.0,
                width: 2752.0
            })
        );
    }

    fn h100() -> Gpu {
        Gpu::preset("h100").expect("preset")
    }

    #[test]
    fn every_catalogue_entry_with_its_figures_is_a_gpu_with_its_sm_count() {
        for entry in hardware::CATALOGUE {
            let gpu = Gpu::of(entry);
            let complete = entry.dense_bf16_flops_per_s.is_some() && entry.compute_units.is_some();
            assert_eq!(gpu.is_ok(), complete, "{}: {gpu:?}", entry.name);
            if let Err(e) = gpu {
                assert!(e.to_string().contains(entry.name), "{e}");
            }
        }
        assert!(matches!(
            Gpu::of(hardware::find("l4").unwrap()),
            Err(GpuError::NoComputeUnits { name: "l4", .. })
        ));
        let sms = |name| Gpu::preset(name).map(|g| g.streaming_multiprocessors);
        assert_eq!(sms("NVIDIA GeForce RTX 4090"), Some(128));
        assert_eq!(sms("rtx-pro-6000"), Some(188));
        assert_eq!((sms("h200"), sms("a100")), (Some(132), Some(108)));
        assert_eq!(Gpu::preset("v100"), None);
    }

    #[test]
    fn a_config_gives_the_per_rank_shape_with_qwen3s_qk_norm_and_its_vocabulary() {
        let qwen = ModelConfig::preset("qwen3-32b").expect("preset");
        let shape = LayerShape::from_config(&qwen, 2);
        assert_eq!(
            shape,
            LayerShape {
                hidden: 5120,
                heads: 64,
                kv_heads: 8,
                head_dim: 128,
                intermediate: 25600,
                vocab: 151936,
                tensor_parallel: 2,
                qk_norm: true,
            }
        );
        // heads x head_dim (8192) is not hidden (5120): o_proj's K is the former, split.
        assert_eq!(
            shape.work(Operator::OProj, 4.0),
            Some(Work::Gemm {
                m: 4.0,
                n: 5120.0,
                k: 4096.0
            })
        );
        // The bundle's profiler ran tp 2 as one rank with these overrides (meta.yaml).
        assert_eq!(
            shape.work(Operator::LmHead, 1.0),
            Some(Work::Gemm {
                m: 1.0,
                n: 75968.0,
                k: 5120.0
            })
        );
        assert_eq!(
            shape.work(Operator::GateUpProj, 1.0),
            Some(Work::Gemm {
                m: 1.0,
                n: 25600.0,
                k: 5120.0
            })
        );
        assert!(shape.work(Operator::QkNorm, 1.0).is_some());
        let llama =
            LayerShape::from_config(&ModelConfig::preset("llama-3.1-8b").expect("preset"), 0);
        assert_eq!((llama.tensor_parallel, llama.qk_norm), (1, false));
        assert_eq!(llama.work(Operator::QkNorm, 1.0), None);
    }

    #[test]
    fn a_weight_bound_gemm_takes_its_weights_over_the_bandwidth_and_a_large_one_its_flops() {
        let c = GemmCoefficients {
            launch_ns: 0.0,
            peak_compute_efficiency: 1.0,
            half_efficiency_tokens: 0.0,
            wave_exponent: 0.0,
            bandwidth_efficiency: 1.0,
        };
        let gpu = h100();
        let small = gemm_ns(&c, &gpu, 1.0, 4096.0, 4096.0);
        let weights_ns = (4096.0 * 4096.0 + 2.0 * 4096.0) * 2.0 / 3.35e12 * 1e9;
        assert!(
            (small - weights_ns).abs() < 1e-6 * weights_ns,
            "{small} vs {weights_ns}"
        );
        let large = gemm_ns(&c, &gpu, 8192.0, 8192.0, 8192.0);
        let flops_ns = 2.0 * 8192f64.powi(3) / 989e12 * 1e9;
        assert!(
            (large - flops_ns).abs() < 1e-6 * flops_ns,
            "{large} vs {flops_ns}"
        );
    }

    #[test]
    fn a_last_wave_part_empty_lowers_the_compute_efficiency() {
        let c = GemmCoefficients {
            launch_ns: 0.0,
            peak_compute_efficiency: 1.0,
            half_efficiency_tokens: 0.0,
            wave_exponent: 1.0,
            bandwidth_efficiency: 1.0,
        };
        let gpu = h100();
        // 4096 x 4224 is 32 x 33 = 1056 tiles = 8 full waves of 132; 4096 x 4352 is 1088 tiles,
        // 9 waves with the last nearly empty: 3% more FLOPs, 9/8 of the time.
        let full = gemm_ns(&c, &gpu, 4096.0, 4224.0, 4096.0);
        let spilled = gemm_ns(&c, &gpu, 4096.0, 4352.0, 4096.0);
        assert!(
            (spilled / full - 9.0 / 8.0).abs() < 1e-9,
            "{}",
            spilled / full
        );
    }

    #[test]
    fn calibration_recovers_coefficients_it_generated_the_table_with() {
        let gpu = h100();
        let truth = Coefficients {
            gpu,
            gemm: GemmCoefficients {
                launch_ns: 3000.0,
                peak_compute_efficiency: 0.75,
                half_efficiency_tokens: 150.0,
                wave_exponent: 0.5,
                bandwidth_efficiency: 0.85,
            },
            elementwise_launch_ns: 1000.0,
            // The launch is calibrated as the fastest element-wise time: an `add` with no
            // per-row walk, at one token, is within 1% of it.
            elementwise: BTreeMap::from([
                (
                    Operator::Add,
                    ElementwiseCoefficients {
                        row_ns_per_value: 0.0,
                        bandwidth_efficiency: 0.6,
                    },
                ),
                (
                    Operator::ActFn,
                    ElementwiseCoefficients {
                        row_ns_per_value: 0.5,
                        bandwidth_efficiency: 0.5,
                    },
                ),
            ]),
            elementwise_pooled: ElementwiseCoefficients {
                row_ns_per_value: 0.2,
                bandwidth_efficiency: 0.6,
            },
        };
        let tokens: Vec<f64> = (0..12).map(|i| f64::from(1u32 << i)).collect();
        let mut operators = BTreeMap::new();
        for op in [
            Operator::QkvProj,
            Operator::OProj,
            Operator::GateUpProj,
            Operator::DownProj,
            Operator::Add,
            Operator::ActFn,
        ] {
            let points = tokens
                .iter()
                .map(|&m| (m, predict(&truth, &LLAMA_7B, op, m).expect("modelled")))
                .collect();
            operators.insert(op, super::super::Curve::new(points).expect("curve"));
        }
        let table = OperatorTable {
            source: "generated".into(),
            format: super::super::TableFormat::Vidur,
            gpu: "h100".into(),
            model: "test".into(),
            tensor_parallel: 1,
            operators,
            attention: None,
            moe: None,
            decode_skew_alpha: None,
            all_reduce: None,
        };
        let fitted = calibrate(&table, &LLAMA_7B, gpu).expect("calibrates");
        for op in [
            Operator::QkvProj,
            Operator::DownProj,
            Operator::Add,
            Operator::ActFn,
        ] {
            for &m in &tokens {
                let (want, got) = (
                    predict(&truth, &LLAMA_7B, op, m).unwrap_or(0.0),
                    predict(&fitted, &LLAMA_7B, op, m).unwrap_or(0.0),
                );
                assert!(
                    (got / want - 1.0).abs() < 0.02,
                    "{op:?} at {m}: {got} vs {want}; {fitted:?}"
                );
            }
        }
        assert_eq!(
            calibrate(&table, &LLAMA_7B, gpu),
            Ok(fitted),
            "deterministic"
        );
        let err = calibrate(&table, &LLAMA_7B.at_tensor_parallel(2), gpu).expect_err("tp mismatch");
        assert!(err.to_string().contains("tensor parallel 1"), "{err}");
    }

    #[test]
    fn a_table_measuring_qk_norm_is_refused_for_a_layer_without_it() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../traces/profiles/llmservingsim/RTXPRO6000/Qwen/Qwen3-32B/bf16");
        let table = OperatorTable::load(&dir, 1).expect("shipped bundle");
        let qwen = ModelConfig::preset("qwen3-32b").expect("preset");
        let without = LayerShape {
            qk_norm: false,
            ..LayerShape::from_config(&qwen, 1)
        };
        let gpu = Gpu::preset("rtx-pro-6000").expect("preset");
        let err = calibrate(&table, &without, gpu).expect_err("qk_norm rows");
        assert!(
            err.to_string().contains("measures qk_norm")
                && err.to_string().contains("Qwen3-32B/bf16")
                && err.to_string().contains("(Qwen/Qwen3-32B)"),
            "{err}"
        );
        assert!(calibrate(&table, &LayerShape::from_config(&qwen, 1), gpu).is_ok());
    }
}
