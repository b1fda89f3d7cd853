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

mod advice;
pub mod disagg;
mod engine;
pub mod offload;
mod parallel;
mod retarget;
pub mod spec;

pub use advice::trtllm_budget_warning;
use engine::resolve_engine;
pub use engine::{
    default_prefill_budget, latest_version, oldest_version, AdpBalance, CapacityPolicy, EngineConfig, EngineKind,
    EngineSettings, EngineVersion, KvCapacity, KvMemory, MAX_BATCHED_TOKENS_LIMIT, MAX_NUM_SEQS_LIMIT,
};
pub use parallel::Parallel;
pub use retarget::{dtype_in_name, Retarget};
pub use spec::{SpecMethod, Speculative};

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

/// The most GPUs one replica's tensor-parallel group may span: a GB200 or GB300 NVL72 rack, 72 GPUs
/// in one NVLink domain (models/gpus.toml link_domain_gpus), which the corpus's wide deployments use
/// (SGLang and TensorRT-LLM attention-DP and expert-parallel groups of 72).
pub const MAX_TENSOR_PARALLEL: u32 = 72;

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

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GpuRef {
    pub name: String,
    #[serde(default)]
    pub tensor_parallel: Option<u32>,
    /// MoE experts placed whole on the tensor-parallel GPUs and reached by all-to-all dispatch and
    /// combine (vLLM --enable-expert-parallel, SGLang --ep-size) instead of split by tensor parallelism.
    #[serde(default)]
    pub expert_parallel: Option<bool>,
    /// Attention data-parallel ranks splitting the tensor-parallel GPUs (profile/parallel.rs; default
    /// 1). Absent from plain profiles' files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_dp: Option<u32>,
    /// GPUs the experts are spread over whole, dividing tensor_parallel (default: tensor_parallel
    /// with expert_parallel = true, else 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expert_parallel_size: Option<u32>,
    /// Pipeline stages, each of tensor_parallel GPUs (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_parallel: Option<u32>,
    /// Expert slots beyond the routed experts, copies of busy ones, so that an EP group that does
    /// not divide the experts fills evenly (default 0; profile/parallel.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redundant_experts: Option<u32>,
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
    /// The API server's time per streamed token (detokenization, the SSE event; s). One process
    /// serves every stream, so a new request's `request_overhead_s` is spread over what streaming
    /// leaves: it takes request_overhead_s / (1 - tokens per second x this). 0: not modelled (the
    /// reports' profiles fold it into the request overhead).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub api_per_token_s: f64,
    /// Extra fixed cost of a step that computes a prompt chunk (s): prefill runs outside the
    /// decode's CUDA graphs (eager kernel launches, MoE dispatch's host synchronization), so a
    /// prompt's first step costs this on top of `step_overhead_s` whatever its length. Learned
    /// across the corpus (crate::hardware::learned::PREFILL_OVERHEAD); 0: not modelled (the
    /// reports' profiles fold it into the request overhead).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prefill_step_overhead_s: f64,
    /// Fixed time of one MoE dispatch or combine that moves tokens between attention-DP ranks (s),
    /// on top of its bytes over the link (crate::catalog::Collectives::all_to_all_s): what an
    /// attention-DP step pays per exchange beyond them, the kernels' fixed cost and most likely
    /// each rank's wait for the slowest one, which the balanced-ranks step (sim/step_large.rs)
    /// leaves out. Paid twice per MoE layer per step. Learned across the corpus's attention-DP
    /// deployments (calibrate/exchange.rs); 0: not modelled.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub exchange_latency_s: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The most of its time the API server may spend streaming tokens (the rest admits requests):
/// a bound that keeps 1 / (1 - busy share) finite ([`Coefficients::api_per_token_s`]).
pub const API_BUSY_MAX: f64 = 0.9;

/// The API server's busy share streaming `seqs` tokens every `step` at `per_token` each (any one
/// time unit for both), at most [`API_BUSY_MAX`]: a new request's own API time is stretched by
/// 1 / (1 - this). The one formula of the simulator (sim/run.rs), the fit's closed form
/// (calibrate::corpus) and `capsim explain`.
#[inline]
pub fn api_busy_share(per_token: f64, seqs: f64, step: f64) -> f64 {
    (per_token * seqs / step).min(API_BUSY_MAX)
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
    /// Speculative decoding (issue 25): absent for plain deployments, which serialize as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Speculative>,
}

/// A deployment as a user states it (the runs it was measured on, or one nobody measured): what it
/// runs, where, and with which engine settings.
#[derive(Debug, Clone, Serialize)]
pub struct Deployment {
    /// Catalog name or config.json path.
    pub model: String,
    pub gpu: String,
    pub tensor_parallel: u32,
    /// Experts spread whole over the GPUs (vLLM --enable-expert-parallel).
    pub expert_parallel: bool,
    /// Attention DP, wider or split expert parallelism, pipeline stages (plain: none; not written
    /// when plain).
    #[serde(skip_serializing_if = "Parallel::is_default")]
    pub parallel: Parallel,
    pub engine: EngineKind,
    pub weight_dtype: Dtype,
    pub kv_dtype: Dtype,
    /// Engine settings the user gave (None = the engine's defaults).
    pub settings: EngineSettings,
    /// Speculative decoding (None: plain decoding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Speculative>,
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
    /// Attention DP ranks, expert-parallel size and pipeline stages (profile/parallel.rs).
    pub parallel: Parallel,
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
        if tp == 0 || tp > MAX_TENSOR_PARALLEL {
            return Err(Error::input(
                source,
                None,
                Some("gpu.tensor_parallel"),
                format!("must be in 1..={MAX_TENSOR_PARALLEL}, got {tp}"),
            ));
        }
        let c = &self.coefficients;
        // Physical ranges: a cost of 1e300 s or a rate below 1 GB/s is a typo, not a deployment (the
        // bandwidth and FLOP/s bounds are far above any GPU; the 1e30 of test profiles stays in).
        for (field, v, lo, hi) in [
            ("coefficients.step_overhead_s", c.step_overhead_s, 0.0, 10.0),
            ("coefficients.per_seq_overhead_s", c.per_seq_overhead_s, 0.0, 1.0),
            ("coefficients.bandwidth_eff_bytes_s", c.bandwidth_eff_bytes_s, 1e9, 1e30),
            ("coefficients.matmul_flops_eff_s", c.matmul_flops_eff_s, 1e9, 1e30),
            ("coefficients.attention_flops_eff_s", c.attention_flops_eff_s, 1e9, 1e30),
            ("coefficients.request_overhead_s", c.request_overhead_s, 0.0, 600.0),
            ("coefficients.mem_compute_overlap", c.mem_compute_overlap, 0.0, 1.0),
            ("coefficients.expert_spread", c.expert_spread, 0.0, 1e3),
            ("coefficients.frontend_serial_s", c.frontend_serial_s, 0.0, 60.0),
            ("coefficients.grouped_gemm_rel", c.grouped_gemm_rel, 1e-3, 1e3),
            ("coefficients.api_per_token_s", c.api_per_token_s, 0.0, 1.0),
            ("coefficients.prefill_step_overhead_s", c.prefill_step_overhead_s, 0.0, 10.0),
        ] {
            if !(v.is_finite() && v >= lo && v <= hi) {
                return Err(Error::input(
                    source,
                    None,
                    Some(field),
                    format!("must be in {lo:e}..={hi:e}, got {}", crate::error::fmt_num(v)),
                ));
            }
        }
        if c.mem_compute_overlap > 1.0 {
            return Err(Error::input(
                source,
                None,
                Some("coefficients.mem_compute_overlap"),
                format!("must be in [0, 1], got {}", crate::error::fmt_num(c.mem_compute_overlap)),
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
        // Under attention DP the ranks' attention runs over tp / attention_dp GPUs, checked there.
        let attention_split = self.gpu.attention_dp.is_some_and(|d| d > 1);
        if let Some(why) = arch.tensor_parallel_problem(tp).filter(|_| !attention_split) {
            return Err(Error::input(
                source,
                None,
                Some("gpu.tensor_parallel"),
                format!("{} cannot run at tensor_parallel {tp}: {why}", arch.name),
            ));
        }
        let parallel = Parallel::resolve(source, &arch, &gpu, tp, &self.gpu)?;
        let expert_parallel = self.gpu.expert_parallel.unwrap_or(false)
            || (parallel.expert_parallel_size > 1 && parallel.expert_parallel_size == tp);
        if expert_parallel && arch.moe.is_none() {
            return Err(Error::input(
                source,
                None,
                Some("gpu.expert_parallel"),
                format!("{} has no experts", arch.name),
            ));
        }
        if let Some((field, msg)) = self.speculative.as_ref().and_then(Speculative::problem) {
            return Err(Error::input(source, None, Some(&format!("speculative.{field}")), msg));
        }
        let engine = resolve_engine(source, &self.engine, &self.model, &arch, &gpu, tp, &parallel)?;
        // TensorRT-LLM is built on CUDA and NVIDIA's kernels: it does not run on AMD GPUs (its
        // installation guide lists NVIDIA GPUs and CUDA only; AMD's serving stacks are vLLM, SGLang
        // and ATOM, as the corpus's MI300X, MI325X and MI355X rows run).
        if engine.kind == EngineKind::Trtllm && crate::hardware::learned::gpu_lineage(&gpu.name).0 == "amd" {
            return Err(Error::input(
                source,
                None,
                Some("engine.kind"),
                format!(
                    "TensorRT-LLM runs on NVIDIA GPUs only and {} is an AMD GPU: use vllm or sglang (--engine)",
                    gpu.name
                ),
            ));
        }
        Ok(Profile {
            file: self.clone(),
            arch,
            gpu,
            tensor_parallel: tp,
            expert_parallel,
            parallel,
            engine,
            coefficients: *c,
            retargeted_from: None,
            retarget_method: None,
        })
    }
}

impl Profile {
    /// This deployment with its steps and host costs `f` times as long: the effective rates divided
    /// by `f` (the bandwidth at most the HBM peak), the overheads and the exchange's fixed time
    /// multiplied by it; the links' collectives (catalog figures) and the overlap as they are.
    /// The corpus protocols' bands replay a disaggregated deployment's pools at such scales.
    pub fn steps_scaled(mut self, f: f64) -> Profile {
        let c = &mut self.coefficients;
        c.bandwidth_eff_bytes_s = (c.bandwidth_eff_bytes_s / f).min(self.gpu.hbm_bandwidth_bytes_s());
        c.matmul_flops_eff_s /= f;
        c.attention_flops_eff_s /= f;
        for x in [
            &mut c.step_overhead_s,
            &mut c.per_seq_overhead_s,
            &mut c.prefill_step_overhead_s,
            &mut c.request_overhead_s,
            &mut c.frontend_serial_s,
            &mut c.api_per_token_s,
            &mut c.exchange_latency_s,
        ] {
            *x *= f;
        }
        self.file.coefficients = *c;
        self
    }

    pub fn name(&self) -> &str {
        &self.file.name
    }

    /// GPUs each MoE expert is split over ([`Parallel::expert_split`]).
    pub fn expert_split(&self) -> u32 {
        self.parallel.expert_split(self.tensor_parallel, self.expert_parallel)
    }

    /// The API server's cost per streamed token as the engine streams: its per-response cost
    /// (Coefficients::api_per_token_s) once per EngineConfig::stream_interval tokens.
    pub fn api_per_streamed_token_s(&self) -> f64 {
        self.coefficients.api_per_token_s / self.engine.stream_interval as f64
    }

    /// The fixed time each MoE exchange between attention-DP ranks pays here
    /// (Coefficients::exchange_latency_s): where the layout moves a MoE layer's tokens between ranks
    /// (more than one rank, experts spread over an EP group), else 0. The one test of where it is
    /// paid: the step (sim/step_large.rs), the MTP draft (sim/spec.rs) and `capsim explain`.
    pub fn rank_exchange_latency_s(&self) -> f64 {
        let between_ranks =
            self.arch.moe.is_some() && self.parallel.attention_dp > 1 && self.parallel.expert_parallel_size > 1;
        if between_ranks {
            self.coefficients.exchange_latency_s
        } else {
            0.0
        }
    }

    /// Whether the coefficients are the learned step model's for a model the profile was moved to
    /// (Profile::retarget's "another model" method), not the profile's own fit.
    pub fn moved_to_another_model(&self) -> bool {
        self.retarget_method.as_deref().is_some_and(|m| m.starts_with("another model"))
    }

    /// Its speculative decoding (None: plain decoding), validated by [`ProfileFile::resolve`].
    pub fn speculative(&self) -> Option<&Speculative> {
        self.file.speculative.as_ref()
    }

    pub fn load(name_or_path: Option<&str>, catalog: &Catalog) -> Result<Profile> {
        let (source, text) = match name_or_path {
            None => (format!("<builtin>/{}", BUILTIN_PROFILES[0].0), BUILTIN_PROFILES[0].1.to_string()),
            // A file the user names wins over an embedded profile of the same name.
            Some(n) if Path::new(n).is_file() => (n.to_string(), read_file(Path::new(n))?),
            Some(n) => {
                let stem = n.trim_end_matches(".toml");
                if let Some((f, t)) = BUILTIN_PROFILES.iter().find(|(f, t)| {
                    f.trim_end_matches(".toml") == stem
                        || ProfileFile::parse(f, t).map(|p| p.name == n).unwrap_or(false)
                }) {
                    (format!("<builtin>/{f}"), t.to_string())
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
