//! The GPU catalog: memory, HBM bandwidth, dense BF16/FP8 tensor throughput and TDP, each with its source.
//! These are the *peaks* a profile's fitted efficiencies are relative to, so that a profile can be moved
//! to another GPU by swapping them.

use crate::error::{toml_error, Error, Result};
use crate::units::Dtype;
use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    pub name: String,
    pub family: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Marketed memory (GB as the datasheet prints it; physically GiB of HBM).
    pub memory_gb: f64,
    /// Total memory the engine sees (`torch.cuda.mem_get_info()` total, bytes), where measured: a
    /// little below the physical GiB because the driver keeps some. Engines size their KV cache from
    /// this figure, so capacity follows it.
    #[serde(default)]
    pub device_memory_bytes: Option<f64>,
    #[serde(default)]
    pub device_memory_source: Option<String>,
    pub hbm_bandwidth_tb_s: f64,
    pub bf16_tflops: f64,
    pub fp8_tflops: Option<f64>,
    /// Dense FP4 tensor throughput (Blackwell), if the GPU has FP4 tensor cores.
    #[serde(default)]
    pub fp4_tflops: Option<f64>,
    pub tdp_w: f64,
    pub source: String,
    /// GPU-to-GPU link: "nvlink", "xgmi" or "pcie".
    pub link: LinkKind,
    /// Link bandwidth per GPU, one direction (GB/s), within the link domain.
    pub link_bw_gb_s: f64,
    /// GPUs reachable over that link (8 behind an NVSwitch, 2 or 4 on NVLink bridges, 1 for PCIe
    /// cards); larger tensor-parallel groups go over PCIe.
    pub link_domain_gpus: u32,
    /// PCIe bandwidth per GPU, one direction (GB/s).
    pub pcie_bw_gb_s: f64,
    pub link_source: String,
    /// The link between the GPU and host memory, over which KV offload (`--kv-offload-gb`) stores and
    /// loads blocks: "pcie" (an x86 host) or "c2c" (NVLink-C2C to a Grace CPU). Default: PCIe at
    /// `pcie_bw_gb_s`, so a `--gpus-file` may leave the three host-link fields out.
    #[serde(default)]
    pub host_link: Option<HostLinkKind>,
    /// Host-link bandwidth per GPU, one direction (GB/s), as the specification gives it; default
    /// `pcie_bw_gb_s`. Transfers reach [`HostLinkKind::share`] of it.
    #[serde(default)]
    pub host_link_bw_gb_s: Option<f64>,
    #[serde(default)]
    pub host_link_source: Option<String>,
    /// Scale-out network bandwidth per GPU, one direction (GB/s): the RDMA NIC (InfiniBand or RoCE)
    /// that a disaggregated deployment's KV moves over between nodes (crate::profile::disagg). None:
    /// [`DEFAULT_SCALE_OUT_BW_GB_S`].
    #[serde(default)]
    pub scale_out_bw_gb_s: Option<f64>,
    #[serde(default)]
    pub scale_out_source: Option<String>,
}

/// The GPU's link to host memory.
#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum HostLinkKind {
    Pcie,
    C2c,
}

impl HostLinkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            HostLinkKind::Pcie => "PCIe",
            HostLinkKind::C2c => "NVLink-C2C",
        }
    }
    /// Share of the link's one-direction figure a host-to-device copy reaches, as measured with
    /// nvbandwidth (`host_to_device_memcpy_ce`; stas00/ml-engineering network/README.md): PCIe Gen5
    /// x16 on an 8 x H200 node, 55.43 GB/s of 63 (0.88; 0.87 of the 64 GB/s the catalog lists, the
    /// figure used here); NVLink-C2C on a DGX Station GB300, 359 GB/s host to device of 450 (0.80).
    pub fn share(self) -> f64 {
        match self {
            HostLinkKind::Pcie => 0.87,
            HostLinkKind::C2c => 0.80,
        }
    }
}

/// Scale-out bandwidth per GPU where the catalog gives none: one ConnectX-7 NDR 400 Gb/s NIC per GPU
/// = 50 GB/s one direction, as ai-dynamo/aiconfigurator systems/h100_sxm.yaml and h200_sxm.yaml
/// (`inter_node_bw: 50000000000 # Byte/s per GPU, single direction, 1:1 CX7 NDR 400Gb/s per node`).
pub const DEFAULT_SCALE_OUT_BW_GB_S: f64 = 50.0;

#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    Nvlink,
    Xgmi,
    Pcie,
}

/// Cost of the collectives of an n-GPU group (FACTS-hardware-engines.md section 1):
/// t = latency + factor x bytes / bandwidth, with the nccl-tests bus factors (all-reduce 2(n-1)/n,
/// all-gather and all-to-all (n-1)/n) and NCCL's own ring latency model (src/graph/tuning.cc: base
/// 6.6 us for the LL protocol plus 0.6 us per step on NVLink, 1.0 us on PCIe, 2(n-1) steps for an
/// all-reduce). Bandwidth is the link's one-direction figure times 0.8, the share p2p tests reach
/// (NVIDIA/nccl issue #1264: 380 of 450 GB/s on H100).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Collectives {
    pub gpus: u32,
    /// Bytes per second each GPU moves in one direction.
    pub bw_bytes_s: f64,
    /// Per-step latency of the ring (s).
    pub hop_s: f64,
}

/// NCCL ring LL base latency (tuning.cc baseLatencies Ring LL).
const NCCL_BASE_LATENCY_S: f64 = 6.6e-6;
/// Share of the link bandwidth collectives reach.
pub const LINK_EFFICIENCY: f64 = 0.8;

impl Collectives {
    /// All-reduce of `bytes` (the full tensor each GPU holds) over the group.
    pub fn all_reduce_s(&self, bytes: f64) -> f64 {
        if self.gpus <= 1 {
            return 0.0;
        }
        let n = self.gpus as f64;
        NCCL_BASE_LATENCY_S + 2.0 * (n - 1.0) * self.hop_s + 2.0 * (n - 1.0) / n * bytes / self.bw_bytes_s
    }
    /// All-gather into a tensor of `bytes` in total.
    pub fn all_gather_s(&self, bytes: f64) -> f64 {
        if self.gpus <= 1 {
            return 0.0;
        }
        let n = self.gpus as f64;
        NCCL_BASE_LATENCY_S + (n - 1.0) * self.hop_s + (n - 1.0) / n * bytes / self.bw_bytes_s
    }
    /// All-to-all where each GPU holds `bytes_per_gpu` to spread over the group.
    pub fn all_to_all_s(&self, bytes_per_gpu: f64) -> f64 {
        if self.gpus <= 1 {
            return 0.0;
        }
        let n = self.gpus as f64;
        NCCL_BASE_LATENCY_S + (n - 1.0) * self.hop_s + (n - 1.0) / n * bytes_per_gpu / self.bw_bytes_s
    }
}

const GIB: f64 = (1u64 << 30) as f64;

/// Share of the marketed GiB that `torch.cuda.mem_get_info()` reports as total, measured on an H100 SXM
/// (85,017,493,504 B of 80 GiB: 0.990) and an H200 (150,109,880,320 B of 141 GiB: 0.991); used for GPUs
/// without a measured `device_memory_bytes`.
pub const DEVICE_MEMORY_SHARE: f64 = 0.99;

/// Share of the dense tensor peak that a serving engine's GEMM kernels reach on a GPU family, per
/// input dtype (FP8, NVFP4, BF16): the median over aiconfigurator's measured GEMM tables (TensorRT-LLM
/// 1.3.0rc20, m 1024-8192, n and k 4096-16384; ai-dynamo/aiconfigurator @ 095f58a, Apache-2.0),
/// which `calibration/kernels/reference_shares.py` reproduces from a checkout of that repository.
/// A kernel benchmark exists before anyone serves on a GPU, so the learned GEMM share is learned
/// relative to it and a GPU nobody served on starts from its own kernels, not from another GPU's
/// share of peak. NaN: the GPU has no such tensor cores (its matmuls run at the BF16 rate).
///
/// The RTX PRO 6000 and L40S reach far more of their (lower) peaks than the data-centre parts:
/// 0.686 and 0.488 of FP8, 0.816 and 0.581 of BF16, where the data-centre mean used to stand in
/// for them was 0.516 and 0.711 (RTX PRO 6000's NVFP4: 0.639 against 0.350).
const GEMM_REFERENCE_SHARE: [(&str, [f64; 3]); 6] = [
    ("H100", [0.577, f64::NAN, 0.779]),
    ("H200", [0.589, f64::NAN, 0.788]),
    ("B200", [0.475, 0.362, 0.657]),
    ("GB200", [0.423, 0.337, 0.621]),
    ("RTX PRO 6000", [0.686, 0.639, 0.816]),
    ("L40S", [0.488, f64::NAN, 0.581]),
];

/// The families whose measured shares stand in for a GPU's without kernel tables: the mean of the
/// four data-centre GPUs that both the kernel tables and the corpus cover. The workstation cards'
/// shares are left out of it (their peaks are lower, their kernels fill them differently), which
/// also keeps what the corpus's AMD GPUs are learned relative to as it was.
const FALLBACK_FAMILIES: [&str; 4] = ["H100", "H200", "B200", "GB200"];

/// A GPU without kernel tables whose kernels are its sibling's: the same SM architecture at the same
/// dense FP8 and BF16 peaks (B300 and B200: 4,500 and 2,250 TFLOP/s; GB300 and GB200: 5,000 and
/// 2,500; models/gpus.toml), or a cut-down part of one die (H20 is a GH100 with fewer SMs). A stated
/// judgement: the corpus keeps B300 and GB300 apart for checks on GPUs nobody calibrated on, so their
/// own tables are not read. Blackwell Ultra's NVFP4 peak is higher than Blackwell's (14,000 against
/// 9,000 TFLOP/s on B300): its sibling's NVFP4 share applied to it assumes the kernels keep up.
const KERNEL_SIBLING: [(&str, &str); 3] = [("B300", "B200"), ("GB300", "GB200"), ("H20", "H100")];

impl GpuSpec {
    /// The reference GEMM share of peak for matmuls with `dtype` weights ([`GEMM_REFERENCE_SHARE`]):
    /// the GPU family's own where it was measured, else its [`KERNEL_SIBLING`]'s, else the mean of
    /// [`FALLBACK_FAMILIES`]' for the precision the matmul runs in (a stated judgement for GPUs
    /// without kernel tables).
    pub fn gemm_reference_share(&self, dtype: Dtype) -> f64 {
        let col = match dtype {
            Dtype::Fp8 if self.runs_natively(Dtype::Fp8) => 0,
            Dtype::Nvfp4 | Dtype::Mxfp4 if self.runs_natively(dtype) => 1,
            _ => 2,
        };
        let family = KERNEL_SIBLING.iter().find(|(f, _)| *f == self.family).map_or(self.family.as_str(), |(_, s)| s);
        let measured =
            |f: &str| GEMM_REFERENCE_SHARE.iter().find(|(k, _)| *k == f).map(|(_, v)| v[col]).filter(|x| x.is_finite());
        if let Some(v) = measured(family) {
            return v;
        }
        let known: Vec<f64> = FALLBACK_FAMILIES.iter().filter_map(|f| measured(f)).collect();
        known.iter().sum::<f64>() / known.len() as f64
    }
    /// Total memory as the engine sees it: the measured device figure, else the marketed size read
    /// as GiB times [`DEVICE_MEMORY_SHARE`].
    pub fn memory_bytes(&self) -> f64 {
        self.device_memory_bytes.unwrap_or(self.memory_gb * GIB * DEVICE_MEMORY_SHARE)
    }
    pub fn hbm_bandwidth_bytes_s(&self) -> f64 {
        self.hbm_bandwidth_tb_s * 1e12
    }
    /// Dense tensor FLOP/s for matmuls whose operands are in `dtype`. A GPU without FP8 tensor cores
    /// runs FP8 weights at its BF16 rate (weight-only quantization), and 4-bit weights likewise.
    pub fn dense_flops_s(&self, dtype: Dtype) -> f64 {
        let tflops = match dtype {
            Dtype::Fp8 => self.fp8_tflops.unwrap_or(self.bf16_tflops),
            Dtype::Nvfp4 | Dtype::Mxfp4 => self.fp4_tflops.unwrap_or(self.bf16_tflops),
            _ => self.bf16_tflops,
        };
        tflops * 1e12
    }
    /// The collectives of a group of `gpus` GPUs of this kind in one server: over the GPU link within
    /// its domain, over PCIe beyond it.
    pub fn collectives(&self, gpus: u32) -> Collectives {
        let (bw_gb_s, kind) = if gpus <= self.link_domain_gpus {
            (self.link_bw_gb_s, self.link)
        } else {
            (self.pcie_bw_gb_s, LinkKind::Pcie)
        };
        let hop_s = match kind {
            LinkKind::Nvlink | LinkKind::Xgmi => 0.6e-6,
            LinkKind::Pcie => 1.0e-6,
        };
        Collectives { gpus, bw_bytes_s: bw_gb_s * 1e9 * LINK_EFFICIENCY, hop_s }
    }
    /// The host link (KV offload): its kind and its one-direction bandwidth in bytes/s as specified
    /// (default: PCIe at `pcie_bw_gb_s`).
    pub fn host_link(&self) -> (HostLinkKind, f64) {
        (self.host_link.unwrap_or(HostLinkKind::Pcie), self.host_link_bw_gb_s.unwrap_or(self.pcie_bw_gb_s) * 1e9)
    }
    /// What a host-to-device copy reaches over the host link, bytes/s per GPU.
    pub fn host_link_effective_bytes_s(&self) -> f64 {
        let (kind, bw) = self.host_link();
        bw * kind.share()
    }
    /// Whether matmuls in `dtype` run on tensor cores of that width here, or fall back to BF16
    /// (weight-only quantization: A100 has no FP8, Hopper no FP4).
    pub fn runs_natively(&self, dtype: Dtype) -> bool {
        match dtype {
            Dtype::Fp8 => self.fp8_tflops.is_some(),
            Dtype::Nvfp4 | Dtype::Mxfp4 => self.fp4_tflops.is_some(),
            _ => true,
        }
    }
    /// The highest dense peak of this GPU, used as the upper bound of physics checks.
    /// Scale-out network bandwidth per GPU, one direction, bytes/s.
    pub fn scale_out_bw_bytes_s(&self) -> f64 {
        self.scale_out_bw_gb_s.unwrap_or(DEFAULT_SCALE_OUT_BW_GB_S) * 1e9
    }
    pub fn max_dense_flops_s(&self) -> f64 {
        self.fp8_tflops.unwrap_or(self.bf16_tflops).max(self.bf16_tflops) * 1e12
    }
    /// vLLM's `vllm serve` default token budget on this GPU (FACTS.md: 8192 on 70+ GiB GPUs, else 2048;
    /// 2048 on A100 too).
    pub fn vllm_default_max_num_batched_tokens(&self) -> u32 {
        let gib = self.memory_bytes() / (1u64 << 30) as f64;
        if gib >= 70.0 && self.family != "A100" {
            8192
        } else {
            2048
        }
    }
    pub fn vllm_default_max_num_seqs(&self) -> u32 {
        if self.vllm_default_max_num_batched_tokens() == 8192 {
            1024
        } else {
            256
        }
    }
    /// SGLang's chunked_prefill_size default by the GPU memory it reads (srt/arg_groups/memory_hook.py):
    /// 2048 under 20 GiB, 4096 under 60 GiB, 8192 under 160 GiB, 16384 above.
    pub fn sglang_default_chunked_prefill_size(&self) -> u32 {
        let gib = self.memory_bytes() / GIB;
        if gib < 20.0 {
            2048
        } else if gib < 60.0 {
            4096
        } else if gib < 160.0 {
            8192
        } else {
            16384
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuFile {
    gpu: Vec<GpuSpec>,
}

pub fn parse_gpus(source: &str, text: &str) -> Result<Vec<GpuSpec>> {
    let file: GpuFile = toml::from_str(text).map_err(|e| toml_error(source, text, e))?;
    for (i, g) in file.gpu.iter().enumerate() {
        let ctx = format!("{source} [gpu `{}`]", g.name);
        if g.name.trim().is_empty() {
            return Err(Error::input(&ctx, None, Some("name"), "must not be empty"));
        }
        if file.gpu[..i].iter().any(|h| h.name == g.name) {
            return Err(Error::input(&ctx, None, Some("name"), "named twice in this file"));
        }
        // Upper bounds far beyond any GPU (1e30 GB of memory was taken, and gave a KV
        // capacity of 2^64 - 1 tokens): past them a figure is a typo, and products overflow.
        for (field, v, max) in [
            ("memory_gb", g.memory_gb, 1e7),
            ("hbm_bandwidth_tb_s", g.hbm_bandwidth_tb_s, 1e4),
            ("bf16_tflops", g.bf16_tflops, 1e7),
            ("tdp_w", g.tdp_w, 1e6),
            ("link_bw_gb_s", g.link_bw_gb_s, 1e7),
            ("pcie_bw_gb_s", g.pcie_bw_gb_s, 1e7),
            ("scale_out_bw_gb_s", g.scale_out_bw_gb_s.unwrap_or(DEFAULT_SCALE_OUT_BW_GB_S), 1e7),
        ] {
            if !(v.is_finite() && v > 0.0 && v <= max) {
                return Err(Error::input(
                    &ctx,
                    None,
                    Some(field),
                    format!("must be a positive number up to {max:e}, got {}", crate::error::fmt_num(v)),
                ));
            }
        }
        for (field, v) in
            [("fp8_tflops", g.fp8_tflops), ("fp4_tflops", g.fp4_tflops), ("host_link_bw_gb_s", g.host_link_bw_gb_s)]
        {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0 && v <= 1e8) {
                    return Err(Error::input(
                        &ctx,
                        None,
                        Some(field),
                        format!("must be positive and at most 1e8, got {}", crate::error::fmt_num(v)),
                    ));
                }
            }
        }
        if let Some(v) = g.device_memory_bytes {
            if !(v.is_finite() && v > 0.0 && v <= g.memory_gb * GIB * 1.01) {
                return Err(Error::input(
                    &ctx,
                    None,
                    Some("device_memory_bytes"),
                    format!("must be positive and at most memory_gb GiB, got {}", crate::error::fmt_num(v)),
                ));
            }
        }
        if g.host_link == Some(HostLinkKind::C2c) && g.host_link_bw_gb_s.is_none() {
            return Err(Error::input(
                &ctx,
                None,
                Some("host_link_bw_gb_s"),
                "a c2c host link needs its bandwidth (pcie_bw_gb_s is the PCIe figure)",
            ));
        }
        if g.link_domain_gpus == 0 {
            return Err(Error::input(&ctx, None, Some("link_domain_gpus"), "must be at least 1"));
        }
    }
    Ok(file.gpu)
}
