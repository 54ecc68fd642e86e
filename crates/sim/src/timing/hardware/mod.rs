//! The hardware catalogue: one entry per accelerator, each figure cited, that every step-time
//! kind's `hardware = "NAME"` names; and the parsers for the hardware quantities a scenario may
//! give instead (`flops = "989TFLOPS"`, `memory_bandwidth = "4.8TB/s"`).
//!
//! An [`Accelerator`] holds the datasheet figures (dense BF16 and FP8 Tensor Core throughput at
//! FP32 accumulate, memory and its bandwidth, interconnect, SM or CU count) and the source of
//! each; [`catalogue`] holds the entries and their conventions. [`lookup`] finds one by its name
//! or an alias (case-insensitive; `_` reads as `-`; the device names `nvidia-smi` and PyTorch
//! report are aliases), and an unknown name is an error listing the names with a "did you
//! mean". The roofline sees a part as a [`Hardware`]: one compute figure, chosen by the weights'
//! data type ([`Accelerator::hardware`]).
//!
//! ```
//! use capsim_sim::timing::hardware::{lookup, ComputeDtype};
//!
//! let h200 = lookup("NVIDIA H200").unwrap();
//! assert_eq!(h200.name, "h200");
//! let fp8 = h200.hardware(ComputeDtype::Fp8).unwrap();
//! assert_eq!(fp8.flops_per_s, 1979e12); // half the datasheet's 3,958 "with sparsity"
//! ```

use std::fmt;

pub mod catalogue;

pub use catalogue::CATALOGUE;

/// One accelerator, as the roofline sees it: one compute figure, one bandwidth, one capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hardware {
    /// Dense Tensor Core throughput at the data type computed in, FLOP/s.
    pub flops_per_s: f64,
    /// Peak memory (HBM or GDDR) bandwidth, bytes/s.
    pub memory_bandwidth_bytes_per_s: f64,
    /// Memory capacity, bytes (the datasheet's GB, decimal).
    pub memory_bytes: u64,
}

/// One catalogue entry: an accelerator's datasheet figures and where each comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accelerator {
    /// The name `hardware = "..."` takes (lowercase).
    pub name: &'static str,
    /// Other names it answers to, lowercase with `-` for `_`: short names and the driver's
    /// device name (`nvidia-smi`, `torch.cuda.get_device_name`).
    pub aliases: &'static [&'static str],
    /// The product, in words (`NVIDIA H100 SXM5 80 GB`).
    pub model: &'static str,
    /// Dense BF16/FP16 Tensor Core throughput with FP32 accumulate, FLOP/s; `None` where no
    /// public source prints it.
    pub dense_bf16_flops_per_s: Option<f64>,
    /// The sparse BF16 figure as the source prints it, FLOP/s, when it prints one.
    pub sparse_bf16_flops_per_s: Option<f64>,
    /// Dense FP8 Tensor Core throughput with FP32 accumulate, FLOP/s; `None` for a part without
    /// FP8 Tensor Cores (Ampere).
    pub dense_fp8_flops_per_s: Option<f64>,
    /// The sparse FP8 figure as the source prints it, FLOP/s, when it prints one.
    pub sparse_fp8_flops_per_s: Option<f64>,
    /// Memory capacity, bytes (decimal GB).
    pub memory_bytes: u64,
    /// Peak memory bandwidth, bytes/s.
    pub memory_bandwidth_bytes_per_s: f64,
    /// The links a GPU has, the GPU-to-GPU path first.
    pub links: &'static [Link],
    /// Streaming multiprocessors (NVIDIA) or compute units (AMD), for the per-operator
    /// roofline's tile waves; `None` where no public source gives it.
    pub compute_units: Option<u32>,
    /// The documents each figure comes from (title, table, URL) and how derived figures are
    /// derived.
    pub source: &'static str,
}

/// One interconnect of a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// What kind and generation.
    pub kind: LinkKind,
    /// Bandwidth per GPU, both directions added (as NVIDIA prints it), bytes/s.
    pub bidirectional_bytes_per_s: f64,
}

/// A kind of interconnect and its generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// NVIDIA NVLink.
    NvLink {
        /// 3 (Ampere), 4 (Hopper), 5 (Blackwell).
        generation: u8,
    },
    /// PCI Express.
    Pcie {
        /// 4 or 5.
        generation: u8,
    },
    /// AMD Infinity Fabric.
    InfinityFabric {
        /// 4 (CDNA 3).
        generation: u8,
    },
}

impl fmt::Display for LinkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LinkKind::NvLink { generation } => write!(f, "NVLink {generation}"),
            LinkKind::Pcie { generation } => write!(f, "PCIe Gen{generation}"),
            LinkKind::InfinityFabric { generation } => write!(f, "Infinity Fabric {generation}"),
        }
    }
}

/// The data type a roofline's GEMMs compute in, which picks the throughput figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ComputeDtype {
    /// BF16/FP16 (also weight-only quantized weights, which vLLM dequantizes to BF16).
    Bf16,
    /// FP8 weights and activations (W8A8 FP8).
    Fp8,
}

/// Why an accelerator has no figure for what was asked.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MissingFigure {
    /// The part has no FP8 Tensor Cores.
    #[error("the {name} ({model}) has no FP8 Tensor Cores")]
    NoFp8 {
        /// The entry's name.
        name: &'static str,
        /// The product.
        model: &'static str,
    },
    /// No public source prints the part's dense BF16 throughput.
    #[error("no public source prints the {name}'s ({model}) Tensor Core throughput")]
    Unpublished {
        /// The entry's name.
        name: &'static str,
        /// The product.
        model: &'static str,
    },
}

impl Accelerator {
    /// Whether `name` names this entry: its name or an alias, ignoring ASCII case, surrounding
    /// space and `_` versus `-`.
    pub fn answers_to(&self, name: &str) -> bool {
        let wanted = normalize(name);
        self.name == wanted || self.aliases.contains(&wanted.as_str())
    }

    /// Dense throughput for `dtype`, FLOP/s.
    pub fn flops_per_s(&self, dtype: ComputeDtype) -> Result<f64, MissingFigure> {
        let (name, model) = (self.name, self.model);
        match dtype {
            ComputeDtype::Bf16 => self
                .dense_bf16_flops_per_s
                .ok_or(MissingFigure::Unpublished { name, model }),
            ComputeDtype::Fp8 => match (self.dense_fp8_flops_per_s, self.dense_bf16_flops_per_s) {
                (Some(f), _) => Ok(f),
                (None, Some(_)) => Err(MissingFigure::NoFp8 { name, model }),
                (None, None) => Err(MissingFigure::Unpublished { name, model }),
            },
        }
    }

    /// The part as the roofline sees it when computing in `dtype`.
    pub fn hardware(&self, dtype: ComputeDtype) -> Result<Hardware, MissingFigure> {
        Ok(Hardware {
            flops_per_s: self.flops_per_s(dtype)?,
            memory_bandwidth_bytes_per_s: self.memory_bandwidth_bytes_per_s,
            memory_bytes: self.memory_bytes,
        })
    }

    /// The GPU-to-GPU link (the first listed).
    pub fn gpu_to_gpu(&self) -> Option<&Link> {
        self.links.first()
    }
}

fn normalize(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace('_', "-")
}

/// The catalogue's names, in its order.
pub fn names() -> Vec<&'static str> {
    CATALOGUE.iter().map(|a| a.name).collect()
}

/// The entry `name` names (its name or an alias, see [`Accelerator::answers_to`]), or `None`.
pub fn find(name: &str) -> Option<&'static Accelerator> {
    CATALOGUE.iter().find(|a| a.answers_to(name))
}

/// A name the catalogue does not hold.
#[derive(Debug, Clone, PartialEq)]
pub struct UnknownHardware {
    /// The name as given.
    pub value: String,
    /// The catalogue name closest to it, when one is close.
    pub suggestion: Option<&'static str>,
}

impl fmt::Display for UnknownHardware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not in the hardware catalogue", self.value)?;
        if let Some(s) = self.suggestion {
            write!(f, " (did you mean {s:?}?)")?;
        }
        write!(f, "; use one of {}", names().join(", "))
    }
}

impl std::error::Error for UnknownHardware {}

/// The entry `name` names, or an error listing the names with the closest one.
pub fn lookup(name: &str) -> Result<&'static Accelerator, UnknownHardware> {
    find(name).ok_or_else(|| {
        let candidates = CATALOGUE
            .iter()
            .flat_map(|a| std::iter::once(a.name).chain(a.aliases.iter().copied()));
        let close = capsim_trace::suggest::closest(&normalize(name), candidates);
        UnknownHardware {
            value: name.to_string(),
            suggestion: close.and_then(find).map(|a| a.name),
        }
    })
}

/// The BF16 figures of the entry `name` names, or `None` for an unknown name or a part whose
/// BF16 throughput no source prints (the A10G).
pub fn preset(name: &str) -> Option<Hardware> {
    find(name)?.hardware(ComputeDtype::Bf16).ok()
}

fn split_number(text: &str) -> Option<(f64, &str)> {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == '+' || c == '-'))
        .map_or(text.len(), |(i, _)| i);
    let (num, unit) = text.split_at(end);
    let value: f64 = num.parse().ok()?;
    (value.is_finite() && value > 0.0).then_some((value, unit.trim()))
}

/// Parses a compute throughput such as `989TFLOPS`, `1.2PFLOPS` or `500GFLOPS` into FLOP/s.
/// Returns `None` for anything else (zero and negative values included).
pub fn parse_flops_per_s(text: &str) -> Option<f64> {
    let (value, unit) = split_number(text)?;
    let scale = match unit {
        "FLOPS" | "FLOP/s" => 1.0,
        "GFLOPS" | "GFLOP/s" => 1e9,
        "TFLOPS" | "TFLOP/s" => 1e12,
        "PFLOPS" | "PFLOP/s" => 1e15,
        _ => return None,
    };
    Some(value * scale)
}

/// Parses a memory bandwidth such as `4.8TB/s`, `3350GB/s` or `900MB/s` into bytes/s.
/// Returns `None` for anything else (zero and negative values included).
pub fn parse_memory_bandwidth_bytes_per_s(text: &str) -> Option<f64> {
    let (value, unit) = split_number(text)?;
    let scale = match unit {
        "B/s" => 1.0,
        "kB/s" | "KB/s" => 1e3,
        "MB/s" => 1e6,
        "GB/s" => 1e9,
        "TB/s" => 1e12,
        "GiB/s" => 1024.0 * 1024.0 * 1024.0,
        "TiB/s" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some(value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relative_gap(a: f64, b: f64) -> f64 {
        (a - b).abs() / b
    }

    #[test]
    fn every_name_and_alias_resolves_to_its_own_entry_and_no_name_is_shared() {
        let mut seen: Vec<&str> = Vec::new();
        for entry in CATALOGUE {
            for name in std::iter::once(entry.name).chain(entry.aliases.iter().copied()) {
                assert_eq!(name, normalize(name), "{name:?} is not stored normalized");
                assert!(!seen.contains(&name), "{name:?} names two entries");
                seen.push(name);
                let found = lookup(name).map(|a| a.name);
                assert_eq!(found, Ok(entry.name), "{name:?}");
                let shouted = name.to_ascii_uppercase().replace('-', "_");
                assert_eq!(
                    find(&shouted).map(|a| a.name),
                    Some(entry.name),
                    "{shouted:?}"
                );
            }
        }
        assert_eq!(CATALOGUE.len(), 12);
    }

    /// Every entry against the relations its sources state: dense = half the printed sparse
    /// figure, FP8 = 2 x BF16 (every datasheet here with both prints the doubling; 2% allows
    /// the printed roundings, L40S's 733 vs 2 x 362.05 the widest at 1.2%), positive memory
    /// and bandwidth, a link, and a cited URL.
    #[test]
    fn every_entry_is_consistent_with_the_relations_its_sources_print() {
        for a in CATALOGUE {
            let pairs = [
                (a.dense_bf16_flops_per_s, a.sparse_bf16_flops_per_s, "BF16"),
                (a.dense_fp8_flops_per_s, a.sparse_fp8_flops_per_s, "FP8"),
            ];
            for (dense, sparse, what) in pairs {
                if let (Some(dense), Some(sparse)) = (dense, sparse) {
                    let gap = relative_gap(2.0 * dense, sparse);
                    assert!(
                        gap < 0.015,
                        "{}: {what} dense {dense:e} x 2 vs sparse {sparse:e}",
                        a.name
                    );
                }
                assert!(
                    sparse.is_none() || dense.is_some(),
                    "{}: a printed sparse {what} figure without its dense one",
                    a.name
                );
            }
            if let (Some(fp8), Some(bf16)) = (a.dense_fp8_flops_per_s, a.dense_bf16_flops_per_s) {
                assert!(
                    relative_gap(fp8, 2.0 * bf16) < 0.02,
                    "{}: FP8 {fp8:e} vs 2 x BF16 {bf16:e}",
                    a.name
                );
            }
            assert!(
                a.memory_bytes > 0 && a.memory_bandwidth_bytes_per_s > 0.0,
                "{}",
                a.name
            );
            assert!(!a.links.is_empty(), "{}: no interconnect", a.name);
            assert!(
                a.links.iter().all(|l| l.bidirectional_bytes_per_s > 0.0),
                "{}",
                a.name
            );
            assert!(
                a.source.contains("https://"),
                "{}: the source names no URL",
                a.name
            );
            assert!(!a.model.is_empty(), "{}", a.name);
        }
    }

    #[test]
    fn h200_has_the_h100_sxms_compute_and_more_memory() {
        let (h100, h200) = (lookup("H100").unwrap(), lookup("h200-sxm").unwrap());
        assert_eq!(h100.name, "h100-sxm");
        assert_eq!(h100.dense_bf16_flops_per_s, h200.dense_bf16_flops_per_s);
        assert_eq!(h100.dense_fp8_flops_per_s, h200.dense_fp8_flops_per_s);
        assert_eq!(h100.compute_units, h200.compute_units);
        assert!(h200.memory_bandwidth_bytes_per_s > h100.memory_bandwidth_bytes_per_s);
        assert!(h200.memory_bytes > h100.memory_bytes);
    }

    #[test]
    fn ampere_parts_have_no_fp8_and_the_a10g_no_published_compute() {
        for name in ["a100-40gb", "a100", "a10g"] {
            let part = lookup(name).unwrap();
            let e = part.hardware(ComputeDtype::Fp8).unwrap_err().to_string();
            assert!(e.contains(part.name), "{name}: {e}");
        }
        let a100 = lookup("a100").unwrap();
        assert_eq!(a100.name, "a100-80gb");
        assert_eq!(
            a100.hardware(ComputeDtype::Fp8),
            Err(MissingFigure::NoFp8 {
                name: "a100-80gb",
                model: a100.model
            })
        );
        let a10g = lookup("NVIDIA A10G").unwrap();
        assert!(matches!(
            a10g.hardware(ComputeDtype::Bf16),
            Err(MissingFigure::Unpublished { .. })
        ));
        assert_eq!(preset("a10g"), None);
    }

    #[test]
    fn fp8_doubles_the_compute_figure_and_keeps_the_memory() {
        let h100 = lookup("h100-sxm").unwrap();
        let (bf16, fp8) = (
            h100.hardware(ComputeDtype::Bf16).unwrap(),
            h100.hardware(ComputeDtype::Fp8).unwrap(),
        );
        assert_eq!((bf16.flops_per_s, fp8.flops_per_s), (989e12, 1979e12));
        assert_eq!(
            bf16.memory_bandwidth_bytes_per_s,
            fp8.memory_bandwidth_bytes_per_s
        );
        assert_eq!(bf16.memory_bytes, 80_000_000_000);
    }

    #[test]
    fn the_pcie_cards_answer_to_their_driver_names_with_the_server_editions_figures() {
        let rtx4090 = lookup("NVIDIA GeForce RTX 4090").unwrap();
        assert_eq!(rtx4090.name, "rtx4090");
        assert_eq!(
            (
                rtx4090.dense_bf16_flops_per_s,
                rtx4090.memory_bandwidth_bytes_per_s
            ),
            (Some(165.2e12), 1.008e12)
        );
        let pro = lookup("NVIDIA RTX PRO 6000 Blackwell Server Edition").unwrap();
        assert_eq!(pro.name, "rtx-pro-6000");
        // The Server Edition's 1,597 GB/s, not the Workstation Edition's 1,792.
        assert_eq!(
            (
                pro.dense_bf16_flops_per_s,
                pro.memory_bandwidth_bytes_per_s,
                pro.memory_bytes
            ),
            (Some(500e12), 1.597e12, 96_000_000_000)
        );
        assert_eq!(pro.compute_units, Some(188));
        assert_eq!(
            lookup("AMD Instinct MI300X").unwrap().compute_units,
            Some(304)
        );
    }

    #[test]
    fn an_unknown_name_lists_the_catalogue_and_suggests_the_closest() {
        let e = lookup("h1000").unwrap_err();
        assert_eq!(e.suggestion, Some("h100-sxm"));
        let text = e.to_string();
        for part in [
            "\"h1000\"",
            "did you mean \"h100-sxm\"",
            "rtx-pro-6000",
            "mi300x",
            "a10g",
        ] {
            assert!(text.contains(part), "{part:?} not in {text}");
        }
        let far = lookup("tpu-v5e").unwrap_err();
        assert_eq!(far.suggestion, None, "{far}");
        assert!(!far.to_string().contains("did you mean"), "{far}");
    }

    #[test]
    fn interconnects_name_their_generation() {
        let kinds = |name: &str| -> Vec<String> {
            lookup(name)
                .unwrap()
                .links
                .iter()
                .map(|l| l.kind.to_string())
                .collect()
        };
        assert_eq!(kinds("h100-sxm"), ["NVLink 4", "PCIe Gen5"]);
        assert_eq!(kinds("b200"), ["NVLink 5"]);
        assert_eq!(kinds("a100-80gb"), ["NVLink 3", "PCIe Gen4"]);
        assert_eq!(kinds("l40s"), ["PCIe Gen4"]);
        assert_eq!(kinds("mi300x"), ["Infinity Fabric 4", "PCIe Gen5"]);
        let nvlink4 = lookup("h200").unwrap().gpu_to_gpu().unwrap();
        assert_eq!(nvlink4.bidirectional_bytes_per_s, 900e9);
    }

    #[test]
    fn throughput_and_bandwidth_units_scale() {
        assert_eq!(parse_flops_per_s("989TFLOPS"), Some(989e12));
        assert_eq!(parse_flops_per_s("1.5 PFLOPS"), Some(1.5e15));
        assert_eq!(parse_flops_per_s("989"), None);
        assert_eq!(parse_flops_per_s("0TFLOPS"), None);
        assert_eq!(parse_memory_bandwidth_bytes_per_s("4.8TB/s"), Some(4.8e12));
        assert_eq!(
            parse_memory_bandwidth_bytes_per_s("3350GB/s"),
            Some(3.35e12)
        );
        assert_eq!(parse_memory_bandwidth_bytes_per_s("fast"), None);
    }
}
