//! Units and numeric formats shared by every stage: data types of weights and KV cache, and the
//! integer simulated time.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Storage format of weights, KV cache or recurrent state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Fp32,
    Bf16,
    Fp16,
    Fp8,
    /// OCP MXFP4: 4-bit elements plus one 8-bit scale per 32 elements = 4.25 bits.
    Mxfp4,
    /// 4-bit integer weights with a 16-bit scale per group of 128 (AWQ, GPTQ, compressed-tensors
    /// W4A16): 4 + 16/128 = 4.125 bits (FACTS-hardware-engines.md section 6). Matmuls run at the
    /// activations' BF16 rate.
    Int4,
    /// NVIDIA NVFP4: 4-bit E2M1 elements plus one FP8 scale per 16 = 4.5 bits (FACTS-hardware-engines.md
    /// section 6). Matmuls run at the FP4 rate on GPUs that have one, else weight-only at BF16.
    Nvfp4,
}

impl Dtype {
    pub fn bytes(self) -> f64 {
        match self {
            Dtype::Fp32 => 4.0,
            Dtype::Bf16 | Dtype::Fp16 => 2.0,
            Dtype::Fp8 => 1.0,
            Dtype::Mxfp4 => 4.25 / 8.0,
            Dtype::Int4 => 4.125 / 8.0,
            Dtype::Nvfp4 => 4.5 / 8.0,
        }
    }
    pub fn parse(s: &str) -> Option<Dtype> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "float32" => Some(Dtype::Fp32),
            "bf16" | "bfloat16" => Some(Dtype::Bf16),
            "fp16" | "float16" | "half" => Some(Dtype::Fp16),
            "fp8" | "fp8_e4m3" | "float8" => Some(Dtype::Fp8),
            "mxfp4" | "fp4" => Some(Dtype::Mxfp4),
            "int4" | "w4a16" | "awq" | "gptq" => Some(Dtype::Int4),
            "nvfp4" => Some(Dtype::Nvfp4),
            _ => None,
        }
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Dtype::Fp32 => "fp32",
            Dtype::Bf16 => "bf16",
            Dtype::Fp16 => "fp16",
            Dtype::Fp8 => "fp8",
            Dtype::Mxfp4 => "mxfp4",
            Dtype::Int4 => "int4",
            Dtype::Nvfp4 => "nvfp4",
        };
        f.write_str(s)
    }
}

/// Simulated time in integer nanoseconds. Integer time keeps event order exact and runs reproducible;
/// 2^63 ns is about 292 years of simulated time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
pub struct SimTime(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);
    pub fn from_secs(s: f64) -> SimTime {
        debug_assert!(s.is_finite() && s >= 0.0);
        SimTime((s * 1e9).round() as u64)
    }
    pub fn secs(self) -> f64 {
        self.0 as f64 * 1e-9
    }
}

impl std::ops::Add for SimTime {
    type Output = SimTime;
    fn add(self, o: SimTime) -> SimTime {
        SimTime(self.0 + o.0)
    }
}
