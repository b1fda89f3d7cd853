//! A profile: one serving deployment (architecture + GPU + engine settings) plus the physical
//! coefficients of its step-time model and its provenance. Profiles are TOML files in models/profiles;
//! the default profiles are embedded at build time.
//!
//! Two layers, as the rest of capsim: [`ProfileFile`] is what the file says (plain serde values, with
//! optional engine settings), [`Profile`] is resolved against the catalogs with every default filled in
//! and validated, so that the simulator's hot loop cannot meet a bad value.

use crate::catalog::{Catalog, GpuSpec, ModelArch};
use crate::error::{read_file, toml_error, Error, Result};
use crate::units::Dtype;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Embedded profiles (file name, text). The first is the default.
pub const BUILTIN_PROFILES: &[(&str, &str)] = &[
    (
        "qwen3-coder-30b-a3b-instruct-fp8_h200-sxm_vllm.toml",
        include_str!("../models/qwen3-coder-30b-a3b-instruct-fp8_h200-sxm_vllm.toml"),
    ),
    (
        "qwen3-coder-30b-a3b-instruct-fp8_h100-pcie_vllm.toml",
        include_str!("../models/qwen3-coder-30b-a3b-instruct-fp8_h100-pcie_vllm.toml"),
    ),
    ("qwen3.5-35b-a3b-fp8_h100-sxm_vllm.toml", include_str!("../models/qwen3.5-35b-a3b-fp8_h100-sxm_vllm.toml")),
    ("qwen3-coder-next-fp8_h200-sxm_sglang.toml", include_str!("../models/qwen3-coder-next-fp8_h200-sxm_sglang.toml")),
    (
        "qwen3-coder-30b-a3b-fp8_h200-sxm_vllm_handset.toml",
        include_str!("../models/qwen3-coder-30b-a3b-fp8_h200-sxm_vllm_handset.toml"),
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Vllm,
    Sglang,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    /// Catalog name or alias, or a path to a config.json.
    pub name: String,
    pub weight_dtype: Dtype,
    pub kv_dtype: Dtype,
    /// Linear-attention recurrent state dtype (hybrid models); default fp32 as vLLM and SGLang keep it.
    #[serde(default)]
    pub state_dtype: Option<Dtype>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GpuRef {
    pub name: String,
    #[serde(default)]
    pub tensor_parallel: Option<u32>,
    /// MoE experts placed whole on the tensor-parallel GPUs and reached by all-to-all dispatch and
    /// combine (vLLM --enable-expert-parallel, SGLang --ep-size) instead of split by tensor parallelism.
    #[serde(default)]
    pub expert_parallel: Option<bool>,
}

/// Engine settings as written; None means "the engine's default on this GPU" (FACTS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    pub kind: Option<EngineKind>,
    pub max_num_batched_tokens: Option<u32>,
    pub max_num_seqs: Option<u32>,
    pub block_size_tokens: Option<u32>,
    pub gpu_memory_utilization: Option<f64>,
    /// Set the KV capacity directly instead of deriving it from memory.
    pub kv_capacity_tokens: Option<u64>,
    pub chunked_prefill_size: Option<u32>,
    pub max_prefill_tokens: Option<u32>,
    pub max_running_requests: Option<u32>,
    pub enable_mixed_chunk: Option<bool>,
    /// SGLang: run a decode batch between consecutive prefill batches while requests are decoding
    /// (decode-friendly interleaving), instead of prefill-first.
    pub interleave_decode: Option<bool>,
    /// SGLang --num-continuous-decode-steps: decode steps run back to back before new requests are
    /// considered (default 1).
    pub num_continuous_decode_steps: Option<u32>,
    pub new_token_ratio_init: Option<f64>,
    pub new_token_ratio_min: Option<f64>,
    pub new_token_ratio_decay_steps: Option<u32>,
}

impl EngineSettings {
    /// Settings in `over` replace those here.
    pub fn merge(&mut self, over: &EngineSettings) {
        macro_rules! m { ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f.clone(); } )* } }
        m!(
            kind,
            max_num_batched_tokens,
            max_num_seqs,
            block_size_tokens,
            gpu_memory_utilization,
            kv_capacity_tokens,
            chunked_prefill_size,
            max_prefill_tokens,
            max_running_requests,
            enable_mixed_chunk,
            interleave_decode,
            num_continuous_decode_steps,
            new_token_ratio_init,
            new_token_ratio_min,
            new_token_ratio_decay_steps
        );
    }
}

/// The physical coefficients of the step-time model (sim::step), in SI units.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Coefficients {
    /// Fixed cost of one engine step: kernel launches, scheduler, sampling (s).
    pub step_overhead_s: f64,
    /// Extra cost per sequence in the step: per-request CPU work, sampling, detokenization (s).
    pub per_seq_overhead_s: f64,
    /// Effective memory bandwidth for weights, KV and state (bytes/s).
    pub bandwidth_eff_bytes_s: f64,
    /// Effective FLOP/s of the dense matmuls.
    pub matmul_flops_eff_s: f64,
    /// Effective FLOP/s of attention (QK^T and AV).
    pub attention_flops_eff_s: f64,
    /// Time between the client sending a request and the engine seeing it, plus first-token streaming:
    /// HTTP, tokenization, detokenization (s). Added to TTFT and E2E.
    pub request_overhead_s: f64,
    /// Fraction of the smaller of memory and compute time hidden under the larger (1 = roofline max,
    /// 0 = additive). Mixed steps cost more than either part alone (DESIGN.md section 1).
    #[serde(default = "one")]
    pub mem_compute_overlap: f64,
    /// MoE: share of the experts a workload's tokens effectively route among (1 = uniform routing,
    /// E(1-(1-k/E)^B); less when routing is correlated, as for benchmark prompts).
    #[serde(default = "one")]
    pub expert_spread: f64,
    /// Per-request work done one request at a time before the engine (the API server's parsing and
    /// tokenization): a FIFO stage, so a burst queues here as well as in the engine (s).
    #[serde(default)]
    pub frontend_serial_s: f64,
    /// Throughput of the MoE experts' grouped GEMMs relative to `matmul_flops_eff_s`, the dense GEMM
    /// rate (1 = as fast as dense GEMMs). Profiles fitted on one MoE model leave it at 1 and fit the
    /// blend; the shared hardware model (crate::hardware) separates the two for other models.
    #[serde(default = "one")]
    pub grouped_gemm_rel: f64,
}

fn one() -> f64 {
    1.0
}

/// Relative 1-sigma uncertainty of each coefficient, from the fit; used for capacity bands.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CoefficientSigmas {
    pub step_overhead_s: f64,
    pub per_seq_overhead_s: f64,
    pub bandwidth_eff_bytes_s: f64,
    pub matmul_flops_eff_s: f64,
    pub attention_flops_eff_s: f64,
    pub request_overhead_s: f64,
    #[serde(default)]
    pub mem_compute_overlap: f64,
    #[serde(default)]
    pub expert_spread: f64,
    #[serde(default)]
    pub frontend_serial_s: f64,
    #[serde(default)]
    pub grouped_gemm_rel: f64,
}

const KNOWN_COEFFICIENTS: [&str; 10] = [
    "step_overhead_s",
    "per_seq_overhead_s",
    "bandwidth_eff_bytes_s",
    "matmul_flops_eff_s",
    "attention_flops_eff_s",
    "request_overhead_s",
    "mem_compute_overlap",
    "expert_spread",
    "frontend_serial_s",
    "grouped_gemm_rel",
];

/// A covariance matrix over named coefficients.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CoefficientCovariance {
    pub names: Vec<String>,
    pub matrix: Vec<Vec<f64>>,
}

impl CoefficientSigmas {
    /// The sigma of a coefficient by its name in the profile (0 for an unknown name).
    pub fn named(&self, name: &str) -> f64 {
        match name {
            "step_overhead_s" => self.step_overhead_s,
            "per_seq_overhead_s" => self.per_seq_overhead_s,
            "bandwidth_eff_bytes_s" => self.bandwidth_eff_bytes_s,
            "matmul_flops_eff_s" => self.matmul_flops_eff_s,
            "attention_flops_eff_s" => self.attention_flops_eff_s,
            "request_overhead_s" => self.request_overhead_s,
            "mem_compute_overlap" => self.mem_compute_overlap,
            "expert_spread" => self.expert_spread,
            "frontend_serial_s" => self.frontend_serial_s,
            "grouped_gemm_rel" => self.grouped_gemm_rel,
            _ => 0.0,
        }
    }

    /// Every coefficient unidentified (100%).
    pub fn unidentified() -> CoefficientSigmas {
        CoefficientSigmas {
            step_overhead_s: 1.0,
            per_seq_overhead_s: 1.0,
            bandwidth_eff_bytes_s: 1.0,
            matmul_flops_eff_s: 1.0,
            attention_flops_eff_s: 1.0,
            request_overhead_s: 1.0,
            mem_compute_overlap: 1.0,
            expert_spread: 1.0,
            frontend_serial_s: 1.0,
            grouped_gemm_rel: 1.0,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    pub method: String,
    #[serde(default)]
    pub source_report: String,
    #[serde(default)]
    pub command: String,
    #[serde(default)]
    pub data_sha256: String,
    #[serde(default)]
    pub capsim_version: String,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Fit quality as the calibrator reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FitQuality {
    pub n_points: usize,
    pub n_flagged_excluded: usize,
    pub median_abs_error_pct: f64,
    pub p90_abs_error_pct: f64,
    pub stop_reason: String,
    #[serde(default)]
    pub physics_ok: bool,
    #[serde(default)]
    pub physics_notes: Vec<String>,
    #[serde(default)]
    pub context_tokens_range: [u64; 2],
    #[serde(default)]
    pub concurrency_range: [u32; 2],
    /// RMS of the fit's log residuals (per degree of freedom): the model's own scatter about the
    /// measurements, which a prediction band adds to the coefficients' uncertainty.
    #[serde(default)]
    pub residual_sigma_log: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub model: ModelRef,
    pub gpu: GpuRef,
    pub engine: EngineSettings,
    pub coefficients: Coefficients,
    #[serde(default)]
    pub sigmas: Option<CoefficientSigmas>,
    /// The fit's covariance of the coefficients in log space (the overlap linear), named; bands move
    /// the coefficients along it rather than each by its own sigma.
    #[serde(default)]
    pub covariance: Option<CoefficientCovariance>,
    /// The unknowns of the source report's experiments as calibration fitted them (requests per test);
    /// validation replays the experiments with them.
    #[serde(default)]
    pub experiment: Option<crate::experiment::ExperimentUnknowns>,
    pub provenance: Provenance,
    #[serde(default)]
    pub fit: Option<FitQuality>,
}

/// Resolved engine configuration: every setting has a value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineConfig {
    pub kind: EngineKind,
    /// vLLM: per-step token budget. SGLang: chunked_prefill_size (the chunk budget of a prefill batch).
    pub max_num_batched_tokens: u32,
    /// vLLM max_num_seqs / SGLang max_running_requests.
    pub max_num_seqs: u32,
    /// KV allocation granularity in tokens (vLLM 16, SGLang page size 1).
    pub block_size_tokens: u32,
    pub gpu_memory_utilization: f64,
    pub kv_capacity_tokens: u64,
    /// Blocks each running sequence holds besides its KV (linear-attention state, sliding windows).
    pub per_seq_reserved_blocks: u32,
    pub max_prefill_tokens: u32,
    pub enable_mixed_chunk: bool,
    pub interleave_decode: bool,
    pub num_continuous_decode_steps: u32,
    pub new_token_ratio_init: f64,
    pub new_token_ratio_min: f64,
    pub new_token_ratio_decay_steps: u32,
}

impl EngineConfig {
    pub fn kv_capacity_blocks(&self) -> u64 {
        self.kv_capacity_tokens / self.block_size_tokens as u64
    }
}

/// Where to move a profile: each None keeps the profile's own.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Retarget {
    pub gpu: Option<String>,
    pub model: Option<String>,
    pub tensor_parallel: Option<u32>,
    pub expert_parallel: Option<bool>,
    pub weight_dtype: Option<Dtype>,
    pub kv_dtype: Option<Dtype>,
}

/// A resolved, validated profile.
#[derive(Debug, Clone)]
pub struct Profile {
    pub file: ProfileFile,
    pub arch: ModelArch,
    pub gpu: GpuSpec,
    pub tensor_parallel: u32,
    /// Experts distributed whole over the GPUs (all-to-all), not split by tensor parallelism.
    pub expert_parallel: bool,
    pub engine: EngineConfig,
    pub coefficients: Coefficients,
    /// Set when the profile was moved to another GPU or model than it was fitted on.
    pub retargeted_from: Option<String>,
    /// How the coefficients were carried over (set with `retargeted_from`).
    pub retarget_method: Option<String>,
}

/// Activation memory vLLM's profiling run reserves, per batched token: about 34 bytes per hidden unit
/// (hidden states, residual, MLP intermediate in BF16), plus a fixed 1.5 GB for CUDA graphs, the
/// sampler and the allocator's slack. A heuristic, stated as such; set kv_capacity_tokens to override.
fn activation_bytes(arch: &ModelArch, max_batched_tokens: u32) -> f64 {
    max_batched_tokens as f64 * arch.hidden as f64 * 34.0 + 1.5e9
}

impl ProfileFile {
    pub fn parse(source: &str, text: &str) -> Result<ProfileFile> {
        toml::from_str(text).map_err(|e| toml_error(source, text, e))
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("profile serializes")
    }

    /// Resolve against the catalogs, filling engine defaults and deriving KV capacity.
    pub fn resolve(&self, source: &str, catalog: &Catalog) -> Result<Profile> {
        let arch = catalog.model(&self.model.name)?;
        let gpu = catalog.gpu(&self.gpu.name)?.clone();
        let tp = self.gpu.tensor_parallel.unwrap_or(1);
        if tp == 0 || tp > 64 {
            return Err(Error::input(
                source,
                None,
                Some("gpu.tensor_parallel"),
                format!("must be in 1..=64, got {tp}"),
            ));
        }
        let c = &self.coefficients;
        for (field, v, lo) in [
            ("coefficients.step_overhead_s", c.step_overhead_s, 0.0),
            ("coefficients.per_seq_overhead_s", c.per_seq_overhead_s, 0.0),
            ("coefficients.bandwidth_eff_bytes_s", c.bandwidth_eff_bytes_s, 1e9),
            ("coefficients.matmul_flops_eff_s", c.matmul_flops_eff_s, 1e9),
            ("coefficients.attention_flops_eff_s", c.attention_flops_eff_s, 1e9),
            ("coefficients.request_overhead_s", c.request_overhead_s, 0.0),
            ("coefficients.mem_compute_overlap", c.mem_compute_overlap, 0.0),
            ("coefficients.expert_spread", c.expert_spread, 0.0),
            ("coefficients.frontend_serial_s", c.frontend_serial_s, 0.0),
            ("coefficients.grouped_gemm_rel", c.grouped_gemm_rel, 1e-3),
        ] {
            if !v.is_finite() || v < lo {
                return Err(Error::input(
                    source,
                    None,
                    Some(field),
                    format!("must be a finite number >= {lo}, got {v}"),
                ));
            }
        }
        if c.mem_compute_overlap > 1.0 {
            return Err(Error::input(
                source,
                None,
                Some("coefficients.mem_compute_overlap"),
                format!("must be in [0, 1], got {}", c.mem_compute_overlap),
            ));
        }
        if let Some(cov) = &self.covariance {
            let n = cov.names.len();
            if cov.matrix.len() != n || cov.matrix.iter().any(|r| r.len() != n) {
                return Err(Error::input(
                    source,
                    None,
                    Some("covariance.matrix"),
                    format!("must be {n} x {n}, one row and column per name"),
                ));
            }
            if let Some(bad) = cov.names.iter().find(|n| !KNOWN_COEFFICIENTS.contains(&n.as_str())) {
                return Err(Error::input(
                    source,
                    None,
                    Some("covariance.names"),
                    format!("unknown coefficient `{bad}`"),
                ));
            }
            if cov.matrix.iter().flatten().any(|x| !x.is_finite()) || (0..n).any(|i| cov.matrix[i][i] < 0.0) {
                return Err(Error::input(
                    source,
                    None,
                    Some("covariance.matrix"),
                    "entries must be finite with a non-negative diagonal",
                ));
            }
        }
        if let Some(why) = arch.tensor_parallel_problem(tp) {
            return Err(Error::input(
                source,
                None,
                Some("gpu.tensor_parallel"),
                format!("{} cannot run at tensor_parallel {tp}: {why}", arch.name),
            ));
        }
        let expert_parallel = self.gpu.expert_parallel.unwrap_or(false);
        if expert_parallel && arch.moe.is_none() {
            return Err(Error::input(
                source,
                None,
                Some("gpu.expert_parallel"),
                format!("{} has no experts", arch.name),
            ));
        }
        let engine = resolve_engine(source, &self.engine, &self.model, &arch, &gpu, tp)?;
        Ok(Profile {
            file: self.clone(),
            arch,
            gpu,
            tensor_parallel: tp,
            expert_parallel,
            engine,
            coefficients: *c,
            retargeted_from: None,
            retarget_method: None,
        })
    }
}

/// The prefill token budget of a step: the engine's setting, else its default on this GPU.
pub fn default_prefill_budget(kind: EngineKind, s: &EngineSettings, gpu: &GpuSpec) -> u32 {
    match kind {
        EngineKind::Vllm => s.max_num_batched_tokens.unwrap_or_else(|| gpu.vllm_default_max_num_batched_tokens()),
        EngineKind::Sglang => s
            .chunked_prefill_size
            .or(s.max_num_batched_tokens)
            .unwrap_or_else(|| gpu.sglang_default_chunked_prefill_size()),
    }
}

fn resolve_engine(
    source: &str,
    s: &EngineSettings,
    m: &ModelRef,
    arch: &ModelArch,
    gpu: &GpuSpec,
    tp: u32,
) -> Result<EngineConfig> {
    let kind = s.kind.unwrap_or(EngineKind::Vllm);
    let err = |f: &str, msg: String| Error::input(source, None, Some(f), msg);
    let (budget, seqs, block, util) = match kind {
        EngineKind::Vllm => (
            default_prefill_budget(kind, s, gpu),
            s.max_num_seqs.unwrap_or_else(|| gpu.vllm_default_max_num_seqs()),
            s.block_size_tokens.unwrap_or(16),
            s.gpu_memory_utilization.unwrap_or(0.92),
        ),
        EngineKind::Sglang => (
            default_prefill_budget(kind, s, gpu),
            // FACTS.md does not list SGLang's max_running_requests default (derived from memory); 1024 is
            // capsim's stated choice, overridable.
            s.max_running_requests.or(s.max_num_seqs).unwrap_or(1024),
            s.block_size_tokens.unwrap_or(1),
            s.gpu_memory_utilization.unwrap_or_else(|| gpu.sglang_default_mem_fraction_static()),
        ),
    };
    if budget == 0 {
        return Err(err("engine.max_num_batched_tokens", "must be positive".into()));
    }
    if seqs == 0 {
        return Err(err("engine.max_num_seqs", "must be positive".into()));
    }
    if block == 0 || block > 1024 {
        return Err(err("engine.block_size_tokens", format!("must be in 1..=1024, got {block}")));
    }
    if !(util.is_finite() && util > 0.0 && util <= 1.0) {
        return Err(err("engine.gpu_memory_utilization", format!("must be in (0, 1], got {util}")));
    }
    // Bytes of KV per token over all the GPUs: copies kept on several GPUs count once per copy.
    let replication = arch.kv_replication(tp);
    let kv_per_token = arch.kv_bytes_per_token(m.kv_dtype) * replication;
    let state_dtype = m.state_dtype.unwrap_or(Dtype::Fp32);
    let reserved_bytes = arch.linear_state_bytes(state_dtype)
        + arch.sliding_kv_bytes_per_token(m.kv_dtype) * replication * arch.sliding_window as f64;
    let block_bytes = kv_per_token * block as f64;
    let per_seq_reserved_blocks = if reserved_bytes > 0.0 { (reserved_bytes / block_bytes).ceil() as u32 } else { 0 };
    let kv_capacity_tokens = match s.kv_capacity_tokens {
        Some(t) => t,
        None => {
            let mem = gpu.memory_bytes() * tp as f64 * util;
            let free = mem - arch.weight_bytes(m.weight_dtype) - activation_bytes(arch, budget) * tp as f64;
            if free <= 0.0 {
                return Err(Error::Infeasible(format!(
                    "{} in {} ({:.1} GB of weights) does not fit {} x {} at memory utilization {util}; raise tensor_parallel",
                    arch.name,
                    m.weight_dtype,
                    arch.weight_bytes(m.weight_dtype) / 1e9,
                    tp,
                    gpu.name
                )));
            }
            (free / kv_per_token) as u64
        }
    };
    if kv_capacity_tokens < block as u64 {
        return Err(err(
            "engine.kv_capacity_tokens",
            format!("must hold at least one block, got {kv_capacity_tokens}"),
        ));
    }
    let ratio_init = s.new_token_ratio_init.unwrap_or(0.7);
    let ratio_min = s.new_token_ratio_min.unwrap_or(0.098);
    if !(0.0..=1.0).contains(&ratio_init) || !(0.0..=ratio_init).contains(&ratio_min) {
        return Err(err(
            "engine.new_token_ratio_init",
            "need 0 <= new_token_ratio_min <= new_token_ratio_init <= 1".into(),
        ));
    }
    Ok(EngineConfig {
        kind,
        max_num_batched_tokens: budget,
        max_num_seqs: seqs,
        block_size_tokens: block,
        gpu_memory_utilization: util,
        kv_capacity_tokens,
        per_seq_reserved_blocks,
        max_prefill_tokens: s.max_prefill_tokens.unwrap_or(16384).max(budget),
        enable_mixed_chunk: s.enable_mixed_chunk.unwrap_or(false),
        interleave_decode: s.interleave_decode.unwrap_or(false),
        num_continuous_decode_steps: s.num_continuous_decode_steps.unwrap_or(1).max(1),
        new_token_ratio_init: ratio_init,
        new_token_ratio_min: ratio_min,
        // SGLang decays the ratio linearly from init to min over about 600 decode steps.
        new_token_ratio_decay_steps: s.new_token_ratio_decay_steps.unwrap_or(600).max(1),
    })
}

impl Profile {
    pub fn name(&self) -> &str {
        &self.file.name
    }
    pub fn load(name_or_path: Option<&str>, catalog: &Catalog) -> Result<Profile> {
        let (source, text) = match name_or_path {
            None => (format!("<builtin>/{}", BUILTIN_PROFILES[0].0), BUILTIN_PROFILES[0].1.to_string()),
            Some(n) => {
                let stem = n.trim_end_matches(".toml");
                if let Some((f, t)) = BUILTIN_PROFILES.iter().find(|(f, t)| {
                    f.trim_end_matches(".toml") == stem
                        || ProfileFile::parse(f, t).map(|p| p.name == n).unwrap_or(false)
                }) {
                    (format!("<builtin>/{f}"), t.to_string())
                } else if Path::new(n).is_file() {
                    (n.to_string(), read_file(Path::new(n))?)
                } else {
                    return Err(Error::Unknown {
                        kind: "profile (name or file)",
                        name: n.to_string(),
                        known: BUILTIN_PROFILES.iter().map(|(f, _)| f.trim_end_matches(".toml").to_string()).collect(),
                    });
                }
            }
        };
        ProfileFile::parse(&source, &text)?.resolve(&source, catalog)
    }

    /// Move the profile to another GPU, model, tensor-parallel degree, expert layout or precision.
    ///
    /// - Another model: the profile's fitted numbers belong to its own kernel mix, so the coefficients
    ///   come from the shared hardware model (`catalog.hardware`, crate::hardware) for the new model,
    ///   GPU and dtype, with its uncertainties. The weights' precision is `to.weight_dtype`, else the
    ///   checkpoint's own quantization_config, else a precision named in the model's name (`-FP8`,
    ///   `-AWQ`), else BF16; the KV cache likewise (`to.kv_dtype`, the config's, BF16).
    /// - Same model elsewhere: the profile keeps its fitted efficiencies (each coefficient's share of
    ///   the peak it is bounded by) and swaps peaks, byte and FLOP counts (DESIGN.md section 1); its
    ///   uncertainties are widened by the shared model's spread across deployments.
    ///
    /// Every change is applied before the one fit-in-memory check, so a precision change that only
    /// fits the new model is accepted.
    pub fn retarget(&self, catalog: &Catalog, to: &Retarget) -> Result<Profile> {
        let new_gpu = match to.gpu.as_deref() {
            Some(g) => catalog.gpu(g)?.clone(),
            None => self.gpu.clone(),
        };
        let new_arch = match to.model.as_deref() {
            Some(m) => Some(catalog.model(m)?),
            None => None,
        };
        let model_changed = new_arch.as_ref().is_some_and(|a| a.name != self.arch.name || *a != self.arch);
        let same_gpu = new_gpu.name == self.gpu.name;
        let same_tp = to.tensor_parallel.is_none_or(|t| t == self.tensor_parallel);
        let same_ep = to.expert_parallel.is_none_or(|e| e == self.expert_parallel);
        let same_dtypes = to.weight_dtype.is_none_or(|d| d == self.file.model.weight_dtype)
            && to.kv_dtype.is_none_or(|d| d == self.file.model.kv_dtype);
        if same_gpu && !model_changed && same_tp && same_ep && same_dtypes {
            return Ok(self.clone());
        }
        let mut f = self.file.clone();
        let old_gpu = self.gpu.clone();
        let w_old = f.model.weight_dtype;
        f.gpu.name = new_gpu.name.clone();
        if let Some(tp) = to.tensor_parallel {
            f.gpu.tensor_parallel = Some(tp);
        }
        if let Some(ep) = to.expert_parallel {
            f.gpu.expert_parallel = Some(ep);
        }
        // Engine defaults that depend on the GPU or the model are re-derived unless the profile pinned
        // them; a KV capacity and memory fraction fitted on the old deployment no longer apply.
        f.engine.kv_capacity_tokens = None;
        if !same_gpu || model_changed {
            f.engine.max_num_batched_tokens = None;
            f.engine.max_num_seqs = None;
            f.engine.chunked_prefill_size = None;
            f.engine.gpu_memory_utilization = None;
        }
        let kind = f.engine.kind.unwrap_or(EngineKind::Vllm);
        let chunk = default_prefill_budget(kind, &f.engine, &new_gpu);
        let shared = &catalog.hardware;
        let method;
        if let (true, Some(arch)) = (model_changed, &new_arch) {
            let named = to.model.as_deref().unwrap_or("");
            let w =
                to.weight_dtype.or(arch.weight_dtype_native).or_else(|| dtype_in_name(named)).unwrap_or(Dtype::Bf16);
            f.model.weight_dtype = w;
            f.model.kv_dtype = to.kv_dtype.or(arch.kv_dtype_native).unwrap_or(Dtype::Bf16);
            f.model.name = named.to_string();
            f.model.state_dtype = None;
            let (c, sig) = shared.coefficients_for(arch, &new_gpu, w, chunk);
            f.coefficients = c;
            f.sigmas = Some(sig);
            f.covariance = None;
            method = "another model: coefficients from the shared hardware model (models/hardware.toml)";
        } else {
            let w = to.weight_dtype.unwrap_or(w_old);
            f.model.weight_dtype = w;
            if let Some(kv) = to.kv_dtype {
                f.model.kv_dtype = kv;
            }
            // Each coefficient's share of its peak (or its value): the profile's own estimate pulled
            // toward the shared model's by precision (the posterior of a normal prior of the shared
            // spread and a likelihood of the fit's own sigma); a coefficient the profile could not
            // identify takes the shared value.
            let own = self.file.sigmas.unwrap_or(CoefficientSigmas::unidentified());
            let c0 = self.coefficients;
            let (bw0, mm0, at0) =
                (old_gpu.hbm_bandwidth_bytes_s(), old_gpu.dense_flops_s(w_old), old_gpu.dense_flops_s(Dtype::Bf16));
            let share = crate::hardware::expert_flop_share(&self.arch);
            let (_, grouped_sigma) = shared.grouped_for(&self.arch, chunk);
            let blend_sigma = ((1.0 - share) * shared.dense_gemm_frac.sigma_log).hypot(share * grouped_sigma);
            let layers = self.arch.n_layers as f64;
            let c = &mut f.coefficients;
            c.bandwidth_eff_bytes_s = shrink(
                c0.bandwidth_eff_bytes_s / bw0,
                own.bandwidth_eff_bytes_s,
                Some(1.0),
                shared.bandwidth_frac.pair(),
            ) * new_gpu.hbm_bandwidth_bytes_s();
            c.matmul_flops_eff_s = shrink(
                c0.matmul_flops_eff_s / mm0,
                own.matmul_flops_eff_s,
                Some(1.0),
                (shared.blend_for(&self.arch, chunk), blend_sigma),
            ) * new_gpu.dense_flops_s(w);
            c.attention_flops_eff_s = shrink(
                c0.attention_flops_eff_s / at0,
                own.attention_flops_eff_s,
                Some(1.0),
                shared.attention_frac.pair(),
            ) * new_gpu.dense_flops_s(Dtype::Bf16);
            c.step_overhead_s =
                shrink(c0.step_overhead_s / layers, own.step_overhead_s, None, shared.step_overhead_per_layer_s.pair())
                    * layers;
            c.per_seq_overhead_s =
                shrink(c0.per_seq_overhead_s, own.per_seq_overhead_s, None, shared.per_seq_overhead_s.pair());
            c.request_overhead_s =
                shrink(c0.request_overhead_s, own.request_overhead_s, None, shared.request_overhead_s.pair());
            c.frontend_serial_s =
                shrink(c0.frontend_serial_s, own.frontend_serial_s, None, shared.frontend_serial_s.pair());
            c.mem_compute_overlap =
                shrink(c0.mem_compute_overlap, own.mem_compute_overlap, Some(1.0), shared.mem_compute_overlap.pair())
                    .min(1.0);
            if self.arch.moe.is_some() {
                c.expert_spread =
                    shrink(c0.expert_spread, own.expert_spread, Some(1.0), shared.expert_spread.pair()).min(1.0);
            }
            f.sigmas = Some(shared.widen(&own));
            // The fit's covariance, widened on its diagonal by the spread across deployments.
            if let (Some(cov), Some(wide)) = (f.covariance.as_mut(), f.sigmas) {
                for (k, name) in cov.names.iter().enumerate() {
                    let (o, w) = (own.named(name), wide.named(name));
                    cov.matrix[k][k] += (w * w - o * o).max(0.0);
                }
            }
            method = "same model: fitted shares of the peaks kept, pulled toward the shared hardware model by their uncertainty; peaks and counts swapped";
        }
        let tp_note = match (same_tp, to.tensor_parallel) {
            (false, Some(t)) => format!(" x{t}"),
            _ => String::new(),
        };
        f.name = format!(
            "{} -> {}{}{}{}",
            self.file.name,
            new_gpu.name,
            tp_note,
            if model_changed { format!(" / {}", f.model.name) } else { String::new() },
            if same_dtypes && !model_changed {
                String::new()
            } else {
                format!(" / {} weights, {} KV", f.model.weight_dtype, f.model.kv_dtype)
            }
        );
        let mut p = f.resolve("retargeted profile", catalog)?;
        p.retargeted_from = Some(self.file.name.clone());
        p.retarget_method = Some(method.to_string());
        Ok(p)
    }

    /// Caveats a user should read with this deployment's numbers.
    pub fn caveats(&self) -> Vec<String> {
        let mut out = Vec::new();
        let w = self.file.model.weight_dtype;
        if !self.gpu.runs_natively(w) {
            out.push(format!(
                "{} has no {w} tensor cores: {w} weights run weight-only at the BF16 rate ({:.0} TFLOP/s peak)",
                self.gpu.name, self.gpu.bf16_tflops
            ));
        }
        let r = self.arch.kv_replication(self.tensor_parallel);
        if r > 1.0 {
            out.push(format!(
                "KV cache stored {r:.0} times over the {} GPUs ({}), so capacity does not grow with tensor parallelism",
                self.tensor_parallel,
                if self.arch.mla.is_some() {
                    "MLA's latent is kept whole on every GPU"
                } else {
                    "fewer KV heads than GPUs"
                }
            ));
        }
        if self.tensor_parallel > self.gpu.link_domain_gpus {
            out.push(format!(
                "tensor parallel {} exceeds the {}-GPU {:?} domain of {}: collectives over PCIe",
                self.tensor_parallel, self.gpu.link_domain_gpus, self.gpu.link, self.gpu.name
            ));
        }
        out
    }
}

/// Precision-weighted combination in log space of a profile's own estimate (relative sigma
/// `own_sigma`) and the shared value (value, log sigma). An estimate at or above `bound` (a physical
/// peak share) or with a flat loss (sigma >= 0.99) carries no information: the shared value is taken.
fn shrink(own: f64, own_sigma: f64, bound: Option<f64>, shared: (f64, f64)) -> f64 {
    let (sv, ss) = shared;
    let identified = own > 0.0 && own_sigma < 0.99 && bound.is_none_or(|b| own < 0.995 * b);
    if !identified {
        return sv;
    }
    let (wo, ws) = (1.0 / own_sigma.max(0.01).powi(2), 1.0 / ss.max(0.01).powi(2));
    ((wo * own.ln() + ws * sv.ln()) / (wo + ws)).exp()
}

/// A weight precision named in a model's name (`Qwen/Qwen3-30B-A3B-FP8`, `...-AWQ`).
pub fn dtype_in_name(name: &str) -> Option<Dtype> {
    let n = name.to_ascii_lowercase();
    if n.contains("nvfp4") {
        Some(Dtype::Nvfp4)
    } else if n.contains("mxfp4") {
        Some(Dtype::Mxfp4)
    } else if n.contains("fp8") {
        Some(Dtype::Fp8)
    } else if ["awq", "gptq", "int4", "w4a16"].iter().any(|k| n.contains(k)) {
        Some(Dtype::Int4)
    } else {
        None
    }
}
