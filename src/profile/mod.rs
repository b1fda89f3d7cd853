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

mod engine;
mod retarget;

pub use engine::default_prefill_budget;
use engine::resolve_engine;
pub use retarget::{dtype_in_name, Retarget};

/// Embedded profiles (file name, text). The first is the default.
pub const BUILTIN_PROFILES: &[(&str, &str)] = &[
    (
        "qwen3-coder-30b-a3b-instruct-fp8_h200-sxm_vllm.toml",
        include_str!("../../models/qwen3-coder-30b-a3b-instruct-fp8_h200-sxm_vllm.toml"),
    ),
    (
        "qwen3-coder-30b-a3b-instruct-fp8_h100-pcie_vllm.toml",
        include_str!("../../models/qwen3-coder-30b-a3b-instruct-fp8_h100-pcie_vllm.toml"),
    ),
    ("qwen3.5-35b-a3b-fp8_h100-sxm_vllm.toml", include_str!("../../models/qwen3.5-35b-a3b-fp8_h100-sxm_vllm.toml")),
    (
        "qwen3-coder-next-fp8_h200-sxm_sglang.toml",
        include_str!("../../models/qwen3-coder-next-fp8_h200-sxm_sglang.toml"),
    ),
    (
        "qwen3-coder-30b-a3b-fp8_h200-sxm_vllm_handset.toml",
        include_str!("../../models/qwen3-coder-30b-a3b-fp8_h200-sxm_vllm_handset.toml"),
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Vllm,
    Sglang,
    /// TensorRT-LLM's in-flight batching (PyTorch backend, as trtllm-serve, NIM and Dynamo run it).
    Trtllm,
}

impl EngineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
            EngineKind::Trtllm => "trtllm",
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
    /// The engine release whose defaults and scheduler apply (ENGINES.md lists what changes with it);
    /// default: the newest release capsim was checked against.
    pub version: Option<String>,
    /// vLLM scheduler_reserve_full_isl: admit a waiting request only when its whole prompt fits the
    /// free blocks (default from 0.19), not just its first chunk.
    pub reserve_full_prompt: Option<bool>,
    /// vLLM --scheduler-watermark: share of KV blocks kept free when admitting (default 0).
    pub watermark: Option<f64>,
    /// SGLang: the clients send ignore_eos (sglang bench_serving's default), so from 0.5.22 the
    /// admission reserves the whole remaining output instead of new_token_ratio of it.
    pub ignore_eos: Option<bool>,
    /// TensorRT-LLM capacity_scheduler_policy.
    pub capacity_scheduler_policy: Option<CapacityPolicy>,
    /// TensorRT-LLM enable_chunked_prefill (default false: a prompt must fit max_num_tokens).
    pub enable_chunked_prefill: Option<bool>,
    /// TensorRT-LLM kv_cache_config.free_gpu_memory_fraction: share of the memory free after weights
    /// and activations that becomes KV cache (default 0.9).
    pub free_gpu_memory_fraction: Option<f64>,
}

/// TensorRT-LLM's capacity scheduler policies (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityPolicy {
    /// Admit a request only when the blocks for its whole sequence (prompt + max new tokens) fit
    /// beside what the running requests still need to finish; never pause.
    GuaranteedNoEvict,
    /// Admit when the next step fits; when memory runs out, pause the most recently started request
    /// (its KV freed, recomputed later).
    MaxUtilization,
}

impl CapacityPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityPolicy::GuaranteedNoEvict => "guaranteed_no_evict",
            CapacityPolicy::MaxUtilization => "max_utilization",
        }
    }
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
            new_token_ratio_decay_steps,
            version,
            reserve_full_prompt,
            watermark,
            ignore_eos,
            capacity_scheduler_policy,
            enable_chunked_prefill,
            free_gpu_memory_fraction
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

/// Access by the name the profile file uses, for the coefficients and their sigmas alike (the
/// covariance names them).
macro_rules! coefficients_by_name {
    ($t:ty) => {
        impl $t {
            /// The field of that name (None for a name that is not a coefficient).
            pub fn named_mut(&mut self, name: &str) -> Option<&mut f64> {
                Some(match name {
                    "step_overhead_s" => &mut self.step_overhead_s,
                    "per_seq_overhead_s" => &mut self.per_seq_overhead_s,
                    "bandwidth_eff_bytes_s" => &mut self.bandwidth_eff_bytes_s,
                    "matmul_flops_eff_s" => &mut self.matmul_flops_eff_s,
                    "attention_flops_eff_s" => &mut self.attention_flops_eff_s,
                    "request_overhead_s" => &mut self.request_overhead_s,
                    "mem_compute_overlap" => &mut self.mem_compute_overlap,
                    "expert_spread" => &mut self.expert_spread,
                    "frontend_serial_s" => &mut self.frontend_serial_s,
                    "grouped_gemm_rel" => &mut self.grouped_gemm_rel,
                    _ => return None,
                })
            }
            /// The value of that name (None for a name that is not a coefficient).
            pub fn named(&self, name: &str) -> Option<f64> {
                let mut copy = *self;
                copy.named_mut(name).map(|v| *v)
            }
        }
    };
}
coefficients_by_name!(Coefficients);
coefficients_by_name!(CoefficientSigmas);

/// A covariance matrix over named coefficients.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CoefficientCovariance {
    pub names: Vec<String>,
    pub matrix: Vec<Vec<f64>>,
}

impl CoefficientSigmas {
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

/// A deployment as a user states it (the runs it was measured on, or one nobody measured): what it
/// runs, where, and with which engine settings.
#[derive(Debug, Clone)]
pub struct Deployment {
    /// Catalog name or config.json path.
    pub model: String,
    pub gpu: String,
    pub tensor_parallel: u32,
    /// Experts spread whole over the GPUs (vLLM --enable-expert-parallel).
    pub expert_parallel: bool,
    pub engine: EngineKind,
    pub weight_dtype: Dtype,
    pub kv_dtype: Dtype,
    /// Engine settings the user gave (None = the engine's defaults).
    pub settings: EngineSettings,
}

/// Resolved engine configuration: every setting has a value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineConfig {
    pub kind: EngineKind,
    /// The engine release whose defaults apply.
    pub version: String,
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
    /// vLLM: a waiting request starts only when blocks for all its tokens so far are free.
    pub reserve_full_prompt: bool,
    /// vLLM: blocks kept free when admitting a waiting request while others run.
    pub watermark_blocks: u64,
    /// SGLang: admission reserves the whole remaining output (fixed-length requests, >= 0.5.22).
    pub reserve_full_output: bool,
    /// TensorRT-LLM capacity policy (None for the other engines).
    pub capacity_policy: Option<CapacityPolicy>,
    /// Prompts may be split over steps (always for vLLM V1 and SGLang; TensorRT-LLM only when enabled).
    pub chunked_prefill: bool,
    /// How the KV capacity was derived from memory (None when set directly).
    pub memory: Option<KvMemory>,
}

impl EngineConfig {
    pub fn kv_capacity_blocks(&self) -> u64 {
        self.kv_capacity_tokens / self.block_size_tokens as u64
    }
}

/// The engine's memory arithmetic for one replica (all its GPUs), in bytes, as its start-up log
/// itemizes it: compare `kv_bytes` and the capacity in tokens with the engine's "GPU KV cache size"
/// line. Each engine leaves different parts outside its budget (ENGINES.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvMemory {
    /// Device memory the engine sees (torch's total, per GPU x GPUs).
    pub total_bytes: f64,
    /// vLLM: total x gpu_memory_utilization. SGLang: total x mem_fraction_static. TensorRT-LLM: total.
    pub budget_bytes: f64,
    pub weights_bytes: f64,
    /// Peak activations of the engine's profiling run (vLLM, TensorRT-LLM; inside SGLang's reserve).
    pub activation_bytes: f64,
    /// CUDA context, NCCL and cuBLAS buffers, allocator slack.
    pub non_torch_bytes: f64,
    /// CUDA graphs, where the engine subtracts them from its budget (vLLM >= 0.20).
    pub cuda_graph_bytes: f64,
    /// What the KV cache gets.
    pub kv_bytes: f64,
    /// The formula, in words, with the engine version it follows.
    pub formula: String,
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
            if let Some(bad) = cov.names.iter().find(|n| self.coefficients.named(n).is_none()) {
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

/// The KV cache as the engine's start-up log states it: capacity in tokens and how many requests of
/// the model's full context length it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvCapacity {
    pub kv_capacity_tokens: u64,
    pub kv_block_size_tokens: u32,
    pub kv_capacity_blocks: u64,
    /// The model's context length (max_model_len when the engine is not told otherwise).
    pub max_model_len_tokens: u64,
    /// Requests of max_model_len tokens the cache holds at once (vLLM's "Maximum concurrency for N
    /// tokens per request"), counting each sequence's reserved blocks (linear state, windows).
    pub max_len_requests: f64,
    /// How the capacity came from memory; None when kv_capacity_tokens was set directly.
    pub memory: Option<KvMemory>,
    /// The engine's log line to compare `kv_capacity_tokens` with.
    pub engine_log_line: &'static str,
}

impl Profile {
    pub fn name(&self) -> &str {
        &self.file.name
    }

    /// The KV cache's capacity, for the user to check against the engine's own start-up log.
    pub fn kv_capacity(&self) -> KvCapacity {
        let e = &self.engine;
        let block = e.block_size_tokens as u64;
        let max_len = self.arch.max_context;
        let per_request = max_len.div_ceil(block) + e.per_seq_reserved_blocks as u64;
        KvCapacity {
            kv_capacity_tokens: e.kv_capacity_tokens,
            kv_block_size_tokens: e.block_size_tokens,
            kv_capacity_blocks: e.kv_capacity_blocks(),
            max_model_len_tokens: max_len,
            max_len_requests: e.kv_capacity_blocks() as f64 / per_request as f64,
            memory: e.memory.clone(),
            engine_log_line: match e.kind {
                EngineKind::Vllm => {
                    "vLLM: \"GPU KV cache size: N tokens\" and \"Maximum concurrency for L tokens per request: Xx\""
                }
                EngineKind::Sglang => {
                    "SGLang: \"KV Cache is allocated. #tokens: N\" (and max_total_num_tokens in the server info)"
                }
                EngineKind::Trtllm => {
                    "TensorRT-LLM: \"[MemUsageChange] Allocated X GiB for max tokens in paged KV cache (N)\""
                }
            },
        }
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
}
