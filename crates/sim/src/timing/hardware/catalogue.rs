//! The entries of the hardware catalogue, one per accelerator, each figure with its source.
//!
//! Conventions, the same for every entry:
//! - **Dense** Tensor Core throughput, no structured sparsity. NVIDIA's tables print the sparse
//!   figure with the footnote "with sparsity" (or "Shown with sparsity. Specifications 1/2
//!   lower without sparsity"); the dense figure is half of it, and `sparse_*` keeps the printed
//!   figure so that a test checks the halving.
//! - BF16/FP16 **with FP32 accumulate**, the precision vLLM's BF16 GEMMs (cuBLAS, CUTLASS)
//!   accumulate in. GeForce cards run FP16-accumulate at twice that rate; the data-center and
//!   RTX PRO cards run both at the same rate. FP8 likewise with FP32 accumulate (vLLM's CUTLASS
//!   FP8 GEMMs).
//! - Memory in the datasheet's decimal GB, bandwidth in decimal GB/s or TB/s.
//! - Interconnect bandwidth **bidirectional** per GPU (both directions added), as NVIDIA prints
//!   it ("NVLink: 900GB/s", "PCIe Gen5: 128GB/s", "PCIe Gen4 x16: 64GB/s bidirectional");
//!   one direction is half. A PCIe figure the source does not print is the PCI Express
//!   specification's x16 rate (Gen4 64 GB/s, Gen5 128 GB/s, both directions).
//! - A figure no public source gives is absent (`None`), never guessed.

use super::{Accelerator, Link, LinkKind};

const GB: u64 = 1_000_000_000;
const GB_S: f64 = 1e9;

const fn link(kind: LinkKind, bidirectional_gb_per_s: f64) -> Link {
    Link {
        kind,
        bidirectional_bytes_per_s: bidirectional_gb_per_s * GB_S,
    }
}

const NVLINK3_600: Link = link(LinkKind::NvLink { generation: 3 }, 600.0);
const NVLINK4_900: Link = link(LinkKind::NvLink { generation: 4 }, 900.0);
const NVLINK4_BRIDGE_600: Link = link(LinkKind::NvLink { generation: 4 }, 600.0);
const NVLINK5_1800: Link = link(LinkKind::NvLink { generation: 5 }, 1800.0);
const PCIE4_X16: Link = link(LinkKind::Pcie { generation: 4 }, 64.0);
const PCIE5_X16: Link = link(LinkKind::Pcie { generation: 5 }, 128.0);
const INFINITY_FABRIC4_896: Link = link(LinkKind::InfinityFabric { generation: 4 }, 896.0);

/// NVIDIA H100 SXM5 80 GB.
pub const H100_SXM: Accelerator = Accelerator {
    name: "h100-sxm",
    aliases: &["h100", "h100-sxm5", "nvidia h100 80gb hbm3"],
    model: "NVIDIA H100 SXM5 80 GB",
    dense_bf16_flops_per_s: Some(989.0e12),
    sparse_bf16_flops_per_s: Some(1979.0e12),
    dense_fp8_flops_per_s: Some(1979.0e12),
    sparse_fp8_flops_per_s: Some(3958.0e12),
    memory_bytes: 80 * GB,
    memory_bandwidth_bytes_per_s: 3350.0e9,
    links: &[NVLINK4_900, PCIE5_X16],
    compute_units: Some(132),
    source: "NVIDIA H100 Tensor Core GPU datasheet, table \"Technical Specifications\", column \
             H100 SXM (https://www.nvidia.com/en-us/data-center/h100/): BF16 Tensor Core 1,979 \
             TFLOPS and FP8 3,958 TFLOPS with the footnote \"With sparsity\" (dense = half; the \
             Hopper whitepaper's dense BF16 is 989.4), 80 GB, 3.35 TB/s, \"NVLink: 900GB/s \
             PCIe Gen5: 128GB/s\". SMs: NVIDIA H100 Tensor Core GPU Architecture whitepaper \
             (https://resources.nvidia.com/en-us-tensor-core), table \"NVIDIA H100 compared to \
             A100\", H100 SXM5: 132 SMs.",
};

/// NVIDIA H100 PCIe 80 GB.
pub const H100_PCIE: Accelerator = Accelerator {
    name: "h100-pcie",
    aliases: &["nvidia h100 pcie"],
    model: "NVIDIA H100 PCIe 80 GB",
    dense_bf16_flops_per_s: Some(756.0e12),
    sparse_bf16_flops_per_s: Some(1513.0e12),
    dense_fp8_flops_per_s: Some(1513.0e12),
    sparse_fp8_flops_per_s: Some(3026.0e12),
    memory_bytes: 80 * GB,
    memory_bandwidth_bytes_per_s: 2000.0e9,
    links: &[PCIE5_X16, NVLINK4_BRIDGE_600],
    compute_units: Some(114),
    source: "NVIDIA H100 Tensor Core GPU datasheet (2022 edition, before H100 NVL replaced the \
             PCIe column), column H100 PCIe (https://www.nvidia.com/en-us/data-center/h100/): \
             BF16 Tensor Core 1,513 TFLOPS and FP8 3,026 TFLOPS \"with sparsity\" (dense = half; \
             the Hopper whitepaper's dense BF16 is 756.4), 80 GB HBM2e, 2 TB/s (2,000 GB/s), \
             \"NVLink: 600GB/s PCIe Gen5: 128GB/s\" (the NVLink figure is a bridge joining two \
             cards; without it GPUs talk over PCIe, listed first). SMs: Hopper whitepaper, H100 \
             PCIe: 114 SMs (also NVIDIA LaunchPad's H100 MIG guide, \
             https://docs.nvidia.com/launchpad/ai/h100-mig/latest/h100-mig-gpu.html).",
};

/// NVIDIA H200 SXM 141 GB.
pub const H200_SXM: Accelerator = Accelerator {
    name: "h200",
    aliases: &["h200-sxm", "nvidia h200"],
    model: "NVIDIA H200 SXM 141 GB",
    dense_bf16_flops_per_s: Some(989.0e12),
    sparse_bf16_flops_per_s: Some(1979.0e12),
    dense_fp8_flops_per_s: Some(1979.0e12),
    sparse_fp8_flops_per_s: Some(3958.0e12),
    memory_bytes: 141 * GB,
    memory_bandwidth_bytes_per_s: 4800.0e9,
    links: &[NVLINK4_900, PCIE5_X16],
    compute_units: Some(132),
    source: "NVIDIA H200 Tensor Core GPU datasheet, column H200 SXM \
             (https://www.nvidia.com/en-us/data-center/h200/): BF16 Tensor Core 1,979 TFLOPS and \
             FP8 3,958 TFLOPS \"With sparsity\" (dense = half; the H100 SXM's GH100 compute), \
             141 GB HBM3e, 4.8 TB/s, \"NVLink: 900GB/s PCIe Gen5: 128GB/s\". SMs: the datasheet \
             prints none; 132, the H100 SXM's GH100 configuration, which CUDA's device query \
             reports for an H200.",
};

/// NVIDIA B200 (HGX B200 / DGX B200 board).
pub const B200: Accelerator = Accelerator {
    name: "b200",
    aliases: &["b200-sxm", "nvidia b200"],
    model: "NVIDIA B200 (HGX B200)",
    dense_bf16_flops_per_s: Some(2250.0e12),
    sparse_bf16_flops_per_s: Some(4500.0e12),
    dense_fp8_flops_per_s: Some(4500.0e12),
    sparse_fp8_flops_per_s: Some(9000.0e12),
    memory_bytes: 180 * GB,
    memory_bandwidth_bytes_per_s: 8000.0e9,
    links: &[NVLINK5_1800],
    compute_units: Some(148),
    source: "NVIDIA HGX platform page, column HGX B200, 8 GPUs \
             (https://www.nvidia.com/en-us/data-center/hgx/): FP4 Tensor Core 144 | 72 PFLOPS \
             (sparse | dense), FP8/FP6 72 PFLOPS, FP16/BF16 36 PFLOPS; with FP4 dense at 72, \
             FP8 dense is 36 and BF16 dense 18, so the 72 and 36 are sparse figures; per GPU \
             (divided by 8) dense BF16 2.25 PFLOPS, dense FP8 4.5 PFLOPS. NVIDIA DGX B200 \
             datasheet (https://www.nvidia.com/en-us/data-center/dgx-b200/): 1,440 GB HBM3e and \
             64 TB/s for 8 GPUs (180 GB, 8 TB/s each), fifth-generation NVLink 14.4 TB/s \
             aggregate (1.8 TB/s per GPU). SMs: no NVIDIA document prints them; 148 is what \
             CUDA's device query reports, as public B200 kernels (CUTLASS, FlashAttention) size \
             their grids.",
};

/// NVIDIA A100 SXM4 40 GB.
pub const A100_SXM_40GB: Accelerator = Accelerator {
    name: "a100-40gb",
    aliases: &["a100-sxm4-40gb", "nvidia a100-sxm4-40gb"],
    model: "NVIDIA A100 SXM4 40 GB",
    dense_bf16_flops_per_s: Some(312.0e12),
    sparse_bf16_flops_per_s: Some(624.0e12),
    dense_fp8_flops_per_s: None,
    sparse_fp8_flops_per_s: None,
    memory_bytes: 40 * GB,
    memory_bandwidth_bytes_per_s: 1555.0e9,
    links: &[NVLINK3_600, PCIE4_X16],
    compute_units: Some(108),
    source: "NVIDIA A100 Tensor Core GPU datasheet, column A100 40GB SXM \
             (https://www.nvidia.com/en-us/data-center/a100/): BFLOAT16 Tensor Core 312 | 624 \
             TFLOPS (the second \"With sparsity\"), 40 GB HBM2, 1,555 GB/s, \"NVLink: 600GB/s \
             PCIe Gen4: 64GB/s\"; Ampere has no FP8 Tensor Cores. SMs: NVIDIA A100 Tensor Core \
             GPU Architecture whitepaper, 108 SMs.",
};

/// NVIDIA A100 SXM4 80 GB.
pub const A100_SXM_80GB: Accelerator = Accelerator {
    name: "a100-80gb",
    aliases: &[
        "a100",
        "a100-sxm",
        "a100-sxm4-80gb",
        "nvidia a100-sxm4-80gb",
    ],
    model: "NVIDIA A100 SXM4 80 GB",
    dense_bf16_flops_per_s: Some(312.0e12),
    sparse_bf16_flops_per_s: Some(624.0e12),
    dense_fp8_flops_per_s: None,
    sparse_fp8_flops_per_s: None,
    memory_bytes: 80 * GB,
    memory_bandwidth_bytes_per_s: 2039.0e9,
    links: &[NVLINK3_600, PCIE4_X16],
    compute_units: Some(108),
    source: "NVIDIA A100 Tensor Core GPU datasheet, column A100 80GB SXM \
             (https://www.nvidia.com/en-us/data-center/a100/): BFLOAT16 Tensor Core 312 | 624 \
             TFLOPS (the second \"With sparsity\"), 80 GB HBM2e, 2,039 GB/s, \"NVLink: 600GB/s \
             PCIe Gen4: 64GB/s\"; Ampere has no FP8 Tensor Cores. SMs: NVIDIA A100 Tensor Core \
             GPU Architecture whitepaper, 108 SMs.",
};

/// NVIDIA A10G (AWS G5 instances).
pub const A10G: Accelerator = Accelerator {
    name: "a10g",
    aliases: &["nvidia a10g"],
    model: "NVIDIA A10G (AWS EC2 G5)",
    dense_bf16_flops_per_s: None,
    sparse_bf16_flops_per_s: None,
    dense_fp8_flops_per_s: None,
    sparse_fp8_flops_per_s: None,
    memory_bytes: 24 * GB,
    memory_bandwidth_bytes_per_s: 600.0e9,
    links: &[PCIE4_X16],
    compute_units: None,
    source: "Amazon EC2 G5 instances page (https://aws.amazon.com/ec2/instance-types/g5/): \
             NVIDIA A10G Tensor Core GPUs with 24 GB of memory each, joined over PCIe (no \
             NVLink); the A10G is an AWS-only part with no NVIDIA datasheet, and neither AWS \
             nor NVIDIA prints its Tensor Core throughput or SM count, so both are absent \
             (give flops = \"...\" to use it in a roofline); the A10 datasheet's 125 TFLOPS is \
             another part's. Bandwidth: 600 GB/s, the GA102 board's 384-bit GDDR6 at 12.5 Gbps \
             that the A10G shares with the A10 (NVIDIA A10 datasheet, \
             https://www.nvidia.com/en-us/data-center/products/a10-gpu/; Baseten, \"NVIDIA A10 \
             vs A10G for ML model inference\", \
             https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/). PCIe Gen4 \
             x16 (GA102), 64 GB/s by the PCI Express specification. Ampere has no FP8.",
};

/// NVIDIA L4.
pub const L4: Accelerator = Accelerator {
    name: "l4",
    aliases: &["nvidia l4"],
    model: "NVIDIA L4 24 GB",
    dense_bf16_flops_per_s: Some(121.0e12),
    sparse_bf16_flops_per_s: Some(242.0e12),
    dense_fp8_flops_per_s: Some(242.5e12),
    sparse_fp8_flops_per_s: Some(485.0e12),
    memory_bytes: 24 * GB,
    memory_bandwidth_bytes_per_s: 300.0e9,
    links: &[PCIE4_X16],
    compute_units: None,
    source: "NVIDIA L4 Tensor Core GPU datasheet \
             (https://www.nvidia.com/en-us/data-center/l4/): BFLOAT16 Tensor Core 242 TFLOPS and \
             FP8 485 TFLOPS, footnote \"With sparsity\" (dense = half), 24 GB GDDR6, 300 GB/s, \
             \"PCIe Gen4 x16 64GB/s\". SMs: the datasheet prints none and third-party listings \
             disagree (58 or 60), so absent.",
};

/// NVIDIA L40S.
pub const L40S: Accelerator = Accelerator {
    name: "l40s",
    aliases: &["nvidia l40s"],
    model: "NVIDIA L40S 48 GB",
    dense_bf16_flops_per_s: Some(362.05e12),
    sparse_bf16_flops_per_s: Some(733.0e12),
    dense_fp8_flops_per_s: Some(733.0e12),
    sparse_fp8_flops_per_s: Some(1466.0e12),
    memory_bytes: 48 * GB,
    memory_bandwidth_bytes_per_s: 864.0e9,
    links: &[PCIE4_X16],
    compute_units: Some(142),
    source: "NVIDIA L40S datasheet (https://www.nvidia.com/en-us/data-center/l40s/): BFLOAT16 \
             Tensor Core 362.05 | 733* TFLOPS and FP8 733 | 1,466* TFLOPS (\"* With \
             Sparsity\"; the dense figures as printed, though 733 is 2.02x 362.05, not 2x), \
             48 GB GDDR6, 864 GB/s, \"PCIe Gen4 x16: 64GB/s bidirectional\". SMs: 18,176 CUDA \
             cores / 128 per Ada SM (NVIDIA Ada GPU Architecture whitepaper) = 142, the \
             datasheet's 142 RT Cores (one per SM).",
};

/// NVIDIA GeForce RTX 4090.
pub const RTX_4090: Accelerator = Accelerator {
    name: "rtx4090",
    aliases: &["rtx-4090", "geforce-rtx-4090", "nvidia geforce rtx 4090"],
    model: "NVIDIA GeForce RTX 4090 24 GB",
    dense_bf16_flops_per_s: Some(165.2e12),
    sparse_bf16_flops_per_s: Some(330.4e12),
    dense_fp8_flops_per_s: Some(330.3e12),
    sparse_fp8_flops_per_s: Some(660.6e12),
    memory_bytes: 24 * GB,
    memory_bandwidth_bytes_per_s: 1008.0e9,
    links: &[PCIE4_X16],
    compute_units: Some(128),
    source: "NVIDIA Ada GPU Architecture whitepaper v2.02, Appendix A, \"GeForce RTX 4090 Full \
             Specifications\" (https://images.nvidia.com/aem-dam/Solutions/geforce/ada/\
             nvidia-ada-gpu-architecture.pdf): Peak BF16 Tensor TFLOPS with FP32 Accumulate \
             165.2/330.4 and Peak FP8 Tensor TFLOPS with FP32 Accumulate 330.3/660.6 (dense / \
             sparse; the FP16-accumulate rows are twice these, which vLLM's GEMMs do not use), \
             128 SMs, 24 GB GDDR6X, 1,008 GB/s. No NVLink; PCIe Gen4 x16, 64 GB/s by the PCI \
             Express specification (the whitepaper prints no link bandwidth).",
};

/// NVIDIA RTX PRO 6000 Blackwell Server Edition.
pub const RTX_PRO_6000_SERVER: Accelerator = Accelerator {
    name: "rtx-pro-6000",
    aliases: &[
        "rtxpro6000",
        "rtx-pro-6000-server",
        "nvidia rtx pro 6000 blackwell server edition",
    ],
    model: "NVIDIA RTX PRO 6000 Blackwell Server Edition 96 GB",
    dense_bf16_flops_per_s: Some(500.0e12),
    sparse_bf16_flops_per_s: Some(1000.0e12),
    dense_fp8_flops_per_s: Some(1000.0e12),
    sparse_fp8_flops_per_s: Some(2000.0e12),
    memory_bytes: 96 * GB,
    memory_bandwidth_bytes_per_s: 1597.0e9,
    links: &[PCIE5_X16],
    compute_units: Some(188),
    source: "NVIDIA RTX PRO 6000 Blackwell Server Edition product page and datasheet \
             (https://www.nvidia.com/en-us/data-center/rtx-pro-6000-blackwell-server-edition/): \
             \"FP16 | BF16 Tensor Core 1 PFLOP\", \"FP8 Tensor Core 2 PFLOPS\", \"FP4 Tensor Core 4 \
             PFLOPS\", 96 GB GDDR7, 1,597 GB/s, PCIe Gen5 x16, 24,064 CUDA cores. The page does \
             not say sparse or dense; NVIDIA prints sparse Tensor Core figures throughout, and the \
             page's TF32 234 TFLOPS, twice its FP32 rate and so dense, rules out a dense 1 PFLOP \
             BF16: dense = half, 500 BF16 and 1,000 FP8 (a dense TF32 of 234 would give 468 BF16: \
             the figure is good to about 7%). The 1,792 GB/s that circulates (and issue 31 used) is the \
             Workstation Edition's. SMs: 24,064 / 128 CUDA cores per Blackwell SM = 188. PCIe \
             Gen5 x16: 128 GB/s by the PCI Express specification.",
};

/// AMD Instinct MI300X.
pub const MI300X: Accelerator = Accelerator {
    name: "mi300x",
    aliases: &["amd instinct mi300x", "instinct-mi300x"],
    model: "AMD Instinct MI300X 192 GB",
    dense_bf16_flops_per_s: Some(1307.4e12),
    sparse_bf16_flops_per_s: Some(2614.9e12),
    dense_fp8_flops_per_s: Some(2614.9e12),
    sparse_fp8_flops_per_s: Some(5229.8e12),
    memory_bytes: 192 * GB,
    memory_bandwidth_bytes_per_s: 5300.0e9,
    links: &[INFINITY_FABRIC4_896, PCIE5_X16],
    compute_units: Some(304),
    source: "AMD Instinct MI300X Accelerator data sheet \
             (https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/\
             amd-instinct-mi300x-data-sheet.pdf): Peak BF16 1,307.4 TFLOPS (2,614.9 with \
             sparsity), Peak FP8 2,614.9 TFLOPS (5,229.8 with sparsity), 192 GB HBM3, 5.3 TB/s, \
             304 compute units, 7 Infinity Fabric links at 128 GB/s peak each, PCIe Gen5 x16 128 \
             GB/s. Interconnect: 896 GB/s per GPU over all 7 links (AMD, Hot Chips 2024 MI300X \
             talk, slide 4: \"4th Gen Infinity Fabric 896 GB/s\"), taken as bidirectional like \
             NVIDIA's; one peer is reached over one link, 128 GB/s.",
};

/// Every entry, in the order the docs' table lists them.
pub const CATALOGUE: &[Accelerator] = &[
    H100_SXM,
    H100_PCIE,
    H200_SXM,
    B200,
    A100_SXM_40GB,
    A100_SXM_80GB,
    A10G,
    L4,
    L40S,
    RTX_4090,
    RTX_PRO_6000_SERVER,
    MI300X,
];
