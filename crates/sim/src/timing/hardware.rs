//! Accelerator presets for the analytic (roofline) step-time model, and the parsers for the
//! hardware quantities a scenario may give instead (`flops = "989TFLOPS"`,
//! `memory_bandwidth = "4.8TB/s"`).
//!
//! Figures are NVIDIA's datasheet numbers for the SXM boards and for the two PCIe cards of the
//! shared operator bundles (GeForce RTX 4090, RTX PRO 6000 Blackwell Server Edition): dense (no
//! structured sparsity) BF16/FP16 Tensor Core throughput with FP32 accumulate, memory bandwidth
//! and capacity. NVIDIA's tables print the sparse figure (1,979 TFLOPS BF16 for the H100/H200
//! SXM) with the footnote "with sparsity"; the dense figure is half of it.

/// One accelerator, as the roofline sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hardware {
    /// Dense BF16/FP16 Tensor Core throughput, FLOP/s.
    pub flops_per_s: f64,
    /// Peak memory (HBM or GDDR) bandwidth, bytes/s.
    pub memory_bandwidth_bytes_per_s: f64,
    /// Memory capacity, bytes (the datasheet's GB, decimal).
    pub memory_bytes: u64,
}

/// NVIDIA H100 SXM5 80 GB: 989 TFLOPS dense BF16 (1,979 with sparsity), 80 GB HBM3 at 3.35 TB/s.
/// Source: NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/).
pub const H100_SXM: Hardware = Hardware {
    flops_per_s: 989e12,
    memory_bandwidth_bytes_per_s: 3.35e12,
    memory_bytes: 80_000_000_000,
};

/// NVIDIA H200 SXM 141 GB: the H100's GH100 compute (989 TFLOPS dense BF16, 1,979 with
/// sparsity) with 141 GB HBM3e at 4.8 TB/s. Source: NVIDIA H200 Tensor Core GPU datasheet
/// (nvidia.com/en-us/data-center/h200/).
pub const H200_SXM: Hardware = Hardware {
    flops_per_s: 989e12,
    memory_bandwidth_bytes_per_s: 4.8e12,
    memory_bytes: 141_000_000_000,
};

/// NVIDIA A100 SXM4 80 GB: 312 TFLOPS dense BF16, 80 GB HBM2e at 2,039 GB/s. Source: NVIDIA
/// A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/).
pub const A100_SXM_80GB: Hardware = Hardware {
    flops_per_s: 312e12,
    memory_bandwidth_bytes_per_s: 2.039e12,
    memory_bytes: 80_000_000_000,
};

/// NVIDIA GeForce RTX 4090 (AD102, 128 SMs): 165.2 TFLOPS dense FP16/BF16 Tensor Core with FP32
/// accumulate (330.3 with sparsity), 24 GB GDDR6X at 1,008 GB/s. Source: NVIDIA Ada GPU
/// Architecture whitepaper, appendix table "GeForce RTX 4090".
pub const RTX_4090: Hardware = Hardware {
    flops_per_s: 165.2e12,
    memory_bandwidth_bytes_per_s: 1.008e12,
    memory_bytes: 24_000_000_000,
};

/// NVIDIA RTX PRO 6000 Blackwell Server Edition (GB202, 188 SMs): 503.8 TFLOPS dense BF16
/// Tensor Core, 96 GB GDDR7 at 1,792 GB/s. Source: NVIDIA RTX PRO 6000 Blackwell Server
/// Edition datasheet (nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/), the
/// figures quoted in issue 31.
pub const RTX_PRO_6000_SERVER: Hardware = Hardware {
    flops_per_s: 503.8e12,
    memory_bandwidth_bytes_per_s: 1.792e12,
    memory_bytes: 96_000_000_000,
};

/// The preset names a scenario may give as `hardware = "..."`.
pub const PRESET_NAMES: &[&str] = &["h100", "h200", "a100", "rtx4090", "rtx-pro-6000"];

/// The preset called `name` (case-insensitive; `h100-sxm`, `h200-sxm` and `a100-80gb` are
/// accepted too, and the driver's device names of the two PCIe cards, `NVIDIA GeForce RTX 4090`
/// and `NVIDIA RTX PRO 6000 Blackwell Server Edition`, as profilers record them), or `None`.
pub fn preset(name: &str) -> Option<Hardware> {
    match name.to_ascii_lowercase().as_str() {
        "h100" | "h100-sxm" | "h100_sxm" => Some(H100_SXM),
        "h200" | "h200-sxm" | "h200_sxm" => Some(H200_SXM),
        "a100" | "a100-80gb" | "a100_80gb" | "a100-sxm" => Some(A100_SXM_80GB),
        "rtx4090" | "rtx-4090" | "nvidia geforce rtx 4090" => Some(RTX_4090),
        "rtx-pro-6000" | "rtxpro6000" | "nvidia rtx pro 6000 blackwell server edition" => {
            Some(RTX_PRO_6000_SERVER)
        }
        _ => None,
    }
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

    #[test]
    fn h200_has_h100_compute_and_more_memory() {
        let (h100, h200) = (preset("H100").unwrap(), preset("h200-sxm").unwrap());
        assert_eq!(h100.flops_per_s, h200.flops_per_s);
        assert!(h200.memory_bandwidth_bytes_per_s > h100.memory_bandwidth_bytes_per_s);
        assert!(h200.memory_bytes > h100.memory_bytes);
        assert_eq!(preset("v100"), None);
    }

    #[test]
    fn the_pcie_cards_answer_to_their_preset_and_driver_names_with_datasheet_figures() {
        let rtx4090 = preset("rtx4090").unwrap();
        assert_eq!(preset("NVIDIA GeForce RTX 4090"), Some(rtx4090));
        assert_eq!(
            (rtx4090.flops_per_s, rtx4090.memory_bandwidth_bytes_per_s),
            (165.2e12, 1.008e12)
        );
        let pro = preset("rtx-pro-6000").unwrap();
        assert_eq!(
            preset("NVIDIA RTX PRO 6000 Blackwell Server Edition"),
            Some(pro)
        );
        assert_eq!(
            (
                pro.flops_per_s,
                pro.memory_bandwidth_bytes_per_s,
                pro.memory_bytes
            ),
            (503.8e12, 1.792e12, 96_000_000_000)
        );
        for name in PRESET_NAMES {
            assert!(preset(name).is_some(), "{name}");
        }
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
