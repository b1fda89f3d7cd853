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
    pub memory_gb: f64,
    pub hbm_bandwidth_tb_s: f64,
    pub bf16_tflops: f64,
    pub fp8_tflops: Option<f64>,
    pub tdp_w: f64,
    pub source: String,
}

impl GpuSpec {
    pub fn memory_bytes(&self) -> f64 {
        self.memory_gb * 1e9
    }
    pub fn hbm_bandwidth_bytes_s(&self) -> f64 {
        self.hbm_bandwidth_tb_s * 1e12
    }
    /// Dense tensor FLOP/s for matmuls whose operands are in `dtype`. A GPU without FP8 tensor cores
    /// runs FP8 weights at its BF16 rate (weight-only quantization), and 4-bit weights likewise.
    pub fn dense_flops_s(&self, dtype: Dtype) -> f64 {
        let tflops = match dtype {
            Dtype::Fp8 => self.fp8_tflops.unwrap_or(self.bf16_tflops),
            _ => self.bf16_tflops,
        };
        tflops * 1e12
    }
    /// The highest dense peak of this GPU, used as the upper bound of physics checks.
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
    /// SGLang's chunked_prefill_size default (FACTS.md): 4096 on 40-60 GB, 8192 on 60-160 GB, 16384 above.
    pub fn sglang_default_chunked_prefill_size(&self) -> u32 {
        let gb = self.memory_gb;
        if gb > 160.0 {
            16384
        } else if gb >= 60.0 {
            8192
        } else {
            4096
        }
    }
    /// SGLang's mem_fraction_static at defaults (FACTS.md: about 0.84 on H100 80 GB, 0.91 on H200); a
    /// linear interpolation in memory between those two anchors, clamped.
    pub fn sglang_default_mem_fraction_static(&self) -> f64 {
        let t = ((self.memory_gb - 80.0) / (141.0 - 80.0)).clamp(0.0, 1.0);
        0.84 + t * (0.91 - 0.84)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GpuFile {
    gpu: Vec<GpuSpec>,
}

pub fn parse_gpus(source: &str, text: &str) -> Result<Vec<GpuSpec>> {
    let file: GpuFile = toml::from_str(text).map_err(|e| toml_error(source, text, e))?;
    for g in &file.gpu {
        let ctx = format!("{source} [gpu `{}`]", g.name);
        for (field, v) in [
            ("memory_gb", g.memory_gb),
            ("hbm_bandwidth_tb_s", g.hbm_bandwidth_tb_s),
            ("bf16_tflops", g.bf16_tflops),
            ("tdp_w", g.tdp_w),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::input(&ctx, None, Some(field), format!("must be a positive number, got {v}")));
            }
        }
        if let Some(v) = g.fp8_tflops {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::input(&ctx, None, Some("fp8_tflops"), format!("must be positive, got {v}")));
            }
        }
    }
    Ok(file.gpu)
}
