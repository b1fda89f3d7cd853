//! The step model learned across the corpus (models/learned.toml, written by `capsim calibrate
//! --corpus`): efficiencies and host costs that belong to a GPU, an engine, the pair, and the weights'
//! dtype, learned jointly over every deployment the corpus measured.
//!
//! Each quantity is log-additive over levels: log value = global + gpu + engine + (gpu, engine) +
//! dtype (the GEMM share only), every level's offset pulled toward 0 by a stated prior spread
//! (partial pooling), so a pair measured thinly leans on its GPU and its engine, and a pair nobody
//! measured gets exactly that, with the spread of the levels it lacks as its uncertainty. A
//! deployment the corpus measured keeps its own residual (decode and prefill scales, pulled toward
//! 0 as well); a benchmark client's own overhead is fitted per client and never enters a prediction
//! for another deployment.

use crate::catalog::GpuSpec;
use crate::units::Dtype;
use serde::{Deserialize, Serialize};

/// The learned quantities, in this order everywhere (`global`, offsets, spreads).
pub const PARAMS: [&str; 11] = [
    "bandwidth_frac",
    "gemm_rel_reference",
    "grouped_gemm_rel",
    "attention_frac",
    "step_overhead_per_layer_s",
    "per_seq_overhead_s",
    "request_overhead_s",
    "expert_spread",
    "moe_overhead_per_layer_s",
    "api_per_token_s",
    "prefill_overhead_per_layer_s",
];
pub const N_PARAMS: usize = PARAMS.len();
pub const BW: usize = 0;
/// The dense GEMMs' throughput relative to the GPU's kernel-benchmark share of peak
/// (crate::catalog::GpuSpec::gemm_reference_share), not a share of the peak itself: a GPU's own
/// kernels are known before anyone serves on it.
pub const GEMM: usize = 1;
pub const GROUPED: usize = 2;
pub const ATTN: usize = 3;
pub const OVERHEAD: usize = 4;
pub const PER_SEQ: usize = 5;
pub const REQUEST: usize = 6;
/// MoE: share of the experts a batch's tokens route among (crate::profile::Coefficients::expert_spread).
pub const SPREAD: usize = 7;
/// Host and launch cost per MoE layer on top of every layer's (routing, top-k, permutation and the
/// grouped GEMMs' fixed cost): a dense model has none, so one learned on MoE models does not carry
/// to it.
pub const MOE_OVERHEAD: usize = 8;
/// The API server's time per streamed token (detokenization, the SSE event): one process serves
/// every stream, so a new request's own work (tokenization, admission: `request_overhead_s`) gets
/// what streaming leaves of it, and TTFT grows with the tokens streamed per second
/// (crate::profile::Coefficients::api_per_token_s).
pub const API_TOKEN: usize = 9;
/// A step that computes a prompt chunk pays this per layer on top of `step_overhead_per_layer_s`:
/// prefill runs outside the decode's CUDA graphs (eager kernels, their launches, MoE dispatch's
/// host synchronization), so its fixed cost is the engine's and the model's, not the batch's. The
/// corpus identifies it apart from the prefill's throughput: a deployment measured at two prompt
/// lengths at low load gives both the intercept and the slope of its TTFT.
pub const PREFILL_OVERHEAD: usize = 10;

/// The quantities a TTFT identifies (prefill throughput and the host's costs per request and per
/// prefill step): their sigma carries the fit's TTFT residual (LearnedModel::ttft_residual_sigma_log)
/// and a TTFT's band is the widest of theirs ([`Learned::ttft_sigma_log`]).
pub const TTFT_PARAMS: [usize; 6] = [GEMM, GROUPED, ATTN, REQUEST, API_TOKEN, PREFILL_OVERHEAD];

/// Moves log values by a measured deployment's own residual: its decode scale slows the HBM share
/// and speeds nothing else of a decode step's (the host costs per step grow with it), its prefill
/// scale slows the GEMM and attention shares. The one place the residual's reach is written.
pub fn apply_residual(log_v: &mut [f64; N_PARAMS], decode_log: f64, prefill_log: f64) {
    log_v[BW] -= decode_log;
    log_v[OVERHEAD] += decode_log;
    log_v[MOE_OVERHEAD] += decode_log;
    log_v[PER_SEQ] += decode_log;
    log_v[GEMM] -= prefill_log;
    log_v[ATTN] -= prefill_log;
    log_v[PREFILL_OVERHEAD] += prefill_log;
}

/// A model's kernel family: its attention (MLA, linear-attention hybrid, or grouped-query softmax,
/// sliding windows included) and whether its MLPs are routed experts. Models of one family run the
/// same attention and MoE kernels in an engine (DeepSeek-R1, DeepSeek-V3, Kimi-K2.5 and GLM-5 are
/// all MLA MoE), so a model nobody measured takes its siblings' offsets before the global values.
pub fn model_family(arch: &crate::catalog::ModelArch) -> String {
    let attention = if arch.mla.is_some() {
        "mla"
    } else if arch.linear.is_some() {
        "hybrid"
    } else {
        "gqa"
    };
    format!("{attention}-{}", if arch.moe.is_some() { "moe" } else { "dense" })
}

/// Whether a parameter is a share (at most 1).
pub fn is_share(i: usize) -> bool {
    i == BW || i == GROUPED || i == ATTN || i == SPREAD
}

/// Level kinds, from the broadest. A GPU nobody measured still has a vendor and usually a
/// generation (its kernels, its memory system); a model nobody measured still has a family (its
/// attention and MoE kernels, [`model_family`]); `model` is the architecture (catalog name): a model
/// nobody measured gets none, and the spread across models as its uncertainty.
pub const LEVELS: [&str; 8] = ["vendor", "generation", "gpu", "engine", "gpu_engine", "dtype", "family", "model"];
pub const N_LEVELS: usize = LEVELS.len();

/// One level member's offsets (log) and how many points informed it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Offset {
    pub level: String,
    pub key: String,
    pub points: usize,
    pub log_offsets: Vec<f64>,
}

/// A measured deployment's own residual: log scales of its decode and prefill steps.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeploymentResidual {
    pub key: String,
    pub points: usize,
    pub decode_log: f64,
    pub prefill_log: f64,
}

/// A benchmark client's own per-request time (s), fitted per source; a property of the
/// measurement, reported, never part of a prediction for another deployment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClientCost {
    pub client: String,
    pub points: usize,
    pub overhead_s: f64,
    /// Requests each client sent (closed-loop rounds): stated by the source, or fitted where the
    /// source leaves it unknown (the first round is a burst, so it decides part of a mean TTFT).
    pub requests_per_client: f64,
}

/// The fit's quality, as the calibration measured it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LearnedFit {
    pub points: usize,
    pub deployments: usize,
    /// Median |error| of the closed-form predictions the fit minimized (%).
    pub ttft_median_abs_pct: f64,
    pub tpot_median_abs_pct: f64,
    pub iterations: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LearnedModel {
    pub provenance: String,
    pub params: Vec<String>,
    /// Natural units (shares of a peak; seconds).
    pub global: Vec<f64>,
    /// Prior spread (log) of each level's offsets, per parameter: what pulls an offset toward 0.
    pub prior_sigma_log: Vec<Vec<f64>>,
    /// Spread (log) across each level's fitted members, per parameter: the uncertainty a
    /// deployment inherits for a level it has no member of.
    pub spread_sigma_log: Vec<Vec<f64>>,
    /// RMS of the fit's log residuals: the model's own error, added to every band.
    pub residual_sigma_log: f64,
    /// The same over the TTFTs alone, added instead to the quantities a TTFT identifies
    /// ([`TTFT_PARAMS`]): a TTFT carries host costs and queueing that a TPOT does not, and the
    /// residuals of both together (mostly TPOTs' smaller ones) made TTFT bands hold a third of the
    /// held-out points instead of about two thirds. Absent: `residual_sigma_log`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_residual_sigma_log: Option<f64>,
    pub offsets: Vec<Offset>,
    #[serde(default)]
    pub deployments: Vec<DeploymentResidual>,
    #[serde(default)]
    pub clients: Vec<ClientCost>,
    #[serde(default)]
    pub fit: LearnedFit,
    /// The fixed time of a MoE exchange between attention-DP ranks, learned on the corpus's
    /// attention-DP deployments (absent: not modelled, 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exchange: Option<ExchangeFit>,
    /// The fixed hand-over of a disaggregated request from its prefill to its decode worker, per
    /// engine, learned on the corpus's disaggregated deployments (absent: 0).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub handover: Vec<HandoverFit>,
}

/// The fixed time from a disaggregated request's first token on its prefill worker to the start of
/// its KV transfer, for one engine (crate::profile::disagg::Disaggregated::handover_s), fitted
/// after the step model (calibrate/handover.rs says how): no aggregated deployment hands requests
/// over, and a disaggregated TTFT at low load is that fixed time plus steps the plain points fit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HandoverFit {
    pub engine: String,
    /// Seconds per request.
    pub handover_s: f64,
    /// TTFTs and deployments it was fitted on.
    pub points: usize,
    pub deployments: usize,
    /// Median |error| of those TTFTs without it and with it (%).
    pub ttft_median_abs_pct_without: f64,
    pub ttft_median_abs_pct: f64,
}

/// The fixed time of one MoE dispatch or combine between attention-DP ranks
/// (crate::profile::Coefficients::exchange_latency_s), fitted after the step model
/// (calibrate/exchange.rs says how, and what it may hold): no plain deployment runs such an
/// exchange, so the plain points cannot tell it from the other costs, while every attention-DP
/// deployment's TPOT pays it twice per MoE layer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExchangeFit {
    /// Seconds per exchange.
    pub latency_s: f64,
    /// TPOTs and deployments it was fitted on.
    pub points: usize,
    pub deployments: usize,
    /// Median |error| of those TPOTs without it and with it (%).
    pub tpot_median_abs_pct_without: f64,
    pub tpot_median_abs_pct: f64,
}

/// What a deployment gets from the learned model.
#[derive(Debug, Clone, PartialEq)]
pub struct Learned {
    /// The log values in [`PARAMS`] order, before the shares' clamp: a deployment's residual moves
    /// these, then the clamp applies, in the fit's order (calibrate::corpus), so its own points
    /// come out as fitted ([`Learned::with_residual`]).
    pub log_values: [f64; N_PARAMS],
    /// Log sigma of each, from the levels the deployment has no member of plus the residual.
    pub sigma_log: [f64; N_PARAMS],
    /// Which levels had a member ([`LEVELS`] order).
    pub matched: [bool; N_LEVELS],
    /// The measured deployment's own residual, where the corpus measured this very deployment.
    pub residual: Option<(f64, f64)>,
    /// Fixed time of a MoE exchange between attention-DP ranks (s; [`ExchangeFit`]), 0 where the
    /// model has none.
    pub exchange_latency_s: f64,
}

impl Learned {
    /// The learned values in natural units, [`PARAMS`] order (shares clamped to (0, 1]).
    pub fn values(&self) -> [f64; N_PARAMS] {
        natural(&self.log_values)
    }
    /// The log sigma of a TTFT predicted from these values: the widest of the quantities a TTFT
    /// identifies ([`TTFT_PARAMS`]), each the fit's TTFT residual plus the spread of every level the
    /// deployment lacks.
    pub fn ttft_sigma_log(&self) -> f64 {
        TTFT_PARAMS.iter().map(|&i| self.sigma_log[i]).fold(0.0, f64::max)
    }
    /// The values in natural units with the measured deployment's residual applied (none: the
    /// learned values themselves).
    pub fn with_residual(&self) -> [f64; N_PARAMS] {
        let mut log = self.log_values;
        if let Some((d, p)) = self.residual {
            apply_residual(&mut log, d, p);
        }
        natural(&log)
    }
}

/// Log values to natural units, the shares clamped to (0, 1] (the fit's closed form and a
/// deployment's lookup alike).
pub fn natural(log: &[f64; N_PARAMS]) -> [f64; N_PARAMS] {
    std::array::from_fn(|i| if is_share(i) { log[i].exp().min(1.0) } else { log[i].exp() })
}

/// A GPU's vendor and generation (catalog names), the levels above the GPU.
pub fn gpu_lineage(gpu: &str) -> (&'static str, &'static str) {
    let g = gpu.to_ascii_uppercase();
    if g.starts_with("MI3") {
        return ("amd", if g.starts_with("MI35") { "cdna4" } else { "cdna3" });
    }
    let gen = if g.starts_with("H1") || g.starts_with("H2") {
        "hopper"
    } else if g.starts_with("B") || g.starts_with("GB") || g.starts_with("RTX PRO 6000") {
        "blackwell"
    } else if g.starts_with("A100") {
        "ampere"
    } else if g.starts_with("L40") {
        "ada"
    } else {
        "other"
    };
    ("nvidia", gen)
}

/// Dense BF16 tensor throughput (TFLOP/s) of the chip the learned per-layer overheads are stated
/// for: H100's and H200's (both the GH100 die at the same clocks, so they share it).
pub const KERNEL_SPEED_REFERENCE_BF16_TFLOPS: f64 = 989.0;

/// Exponent of [`kernel_overhead_scale`]. The corpus measures each GPU it has, so the in-sample fit
/// cannot tell exponents apart (its penalized cost moves by under 0.1% from 0 to 1: the GPU
/// offsets absorb any of them); what an exponent changes is a GPU nobody measured. 0.5 is the
/// round value that leave-one-GPU-out preferred in the fit's closed form (TPOT median |error|
/// 16.8% at 0, 13.3% at 0.5, 14.7% at 1; HBM bandwidth instead of tensor throughput: 13.6% at
/// best, with H100 and H200 pulled apart although they are one die), so that protocol's TPOT is
/// not fully held out in this one number.
pub const KERNEL_SPEED_EXPONENT: f64 = 0.5;

/// How a GPU's per-layer overheads (`step_overhead_per_layer_s`, `moe_overhead_per_layer_s`)
/// scale from the reference chip: (reference / its dense BF16 throughput)^0.5.
///
/// Why: what the fit learns as per-layer overhead is mostly GPU time that neither the weights'
/// bytes nor the matmuls' FLOPs count: norms, rotary embeddings, routing and top-k, activation
/// quantization, the fixed tiles of small GEMMs, the gaps between kernels. It runs at the speed
/// of the chip's SMs, which its tensor throughput tracks across generations (B200 over H100:
/// 2.27x, so 0.66x the overhead), and not of its HBM (H100 and H200 differ only there). Without
/// it a GPU of a generation nobody measured got Hopper's overheads: B200 held out was 18% too
/// slow in TPOT.
pub fn kernel_overhead_scale(gpu: &GpuSpec) -> f64 {
    if gpu.bf16_tflops > 0.0 {
        (KERNEL_SPEED_REFERENCE_BF16_TFLOPS / gpu.bf16_tflops).powf(KERNEL_SPEED_EXPONENT)
    } else {
        1.0
    }
}

/// Columns of one expert's slice on a GPU at which its grouped GEMMs run at half the rate of a
/// full-width expert: [`grouped_slice_efficiency`].
pub const GROUPED_SLICE_HALF_COLUMNS: f64 = 256.0;

/// The grouped GEMMs' rate at a deployment's expert slice relative to whole experts: N / (N + 256)
/// for N = the expert's intermediate size over the GPUs it is split over (`moe_tp`: the TP group
/// when experts are tensor-parallel, 1 when each GPU holds whole experts). The learned
/// `grouped_gemm_rel` is the whole expert's share; a deployment's coefficient is it times this.
///
/// Why: the corpus serves DeepSeek-R1 both with experts split over 8 GPUs (slices of 256 columns)
/// and whole on each GPU (2,048), and Dynamo's prefill workers with whole experts prefill far
/// faster per GPU than one share fitted mostly on split experts allowed. A narrow slice gives each
/// expert's GEMM few output tiles to spread over the SMs and reads its activations once per slice.
/// The form and the 256 are judgements, checked in the closed form (`cargo run --release --example
/// corpus_lab`): against one share for every slice, every protocol improved (TTFT / TPOT median
/// |error| a GPU held out 24.2 / 12.0 -> 23.5 / 11.9, a model 30.3 / 13.6 -> 29.1 / 13.2, an engine
/// 28.7 / 13.5 -> 27.9 / 13.5); 1,024 did worse than 256 with a GPU held out.
pub fn grouped_slice_efficiency(arch: &crate::catalog::ModelArch, moe_tp: u32) -> f64 {
    arch.moe.as_ref().map_or(1.0, |m| {
        let n = m.expert_intermediate as f64 / moe_tp.max(1) as f64;
        n / (n + GROUPED_SLICE_HALF_COLUMNS)
    })
}

/// The key of a (gpu, engine) pair.
pub fn pair_key(gpu: &str, engine: &str) -> String {
    format!("{gpu}|{engine}")
}

/// The dtype level's key: the GEMMs' input precision class.
pub fn dtype_key(w: Dtype) -> &'static str {
    match w {
        Dtype::Fp32 | Dtype::Bf16 | Dtype::Fp16 => "bf16",
        Dtype::Fp8 => "fp8",
        Dtype::Nvfp4 => "nvfp4",
        Dtype::Mxfp4 => "mxfp4",
        Dtype::Int4 => "int4",
    }
}

/// The model levels' keys: its [`model_family`] and its catalog name.
#[derive(Debug, Clone, Copy)]
pub struct ModelKey<'a> {
    pub family: &'a str,
    pub name: &'a str,
}

impl LearnedModel {
    /// The fixed time of a MoE exchange between attention-DP ranks ([`ExchangeFit`]), 0 where the
    /// model has none.
    pub fn exchange_latency_s(&self) -> f64 {
        self.exchange.as_ref().map_or(0.0, |x| x.latency_s)
    }

    /// The learned hand-over of a disaggregated request under `engine` ([`HandoverFit`]), None
    /// where the model has none for it.
    pub fn handover_s(&self, engine: &str) -> Option<f64> {
        self.handover.iter().find(|h| h.engine == engine).map(|h| h.handover_s)
    }

    fn offset(&self, level: &str, key: &str) -> Option<&Offset> {
        self.offsets.iter().find(|o| o.level == level && o.key == key)
    }

    /// The values for a GPU, engine and weights' dtype (catalog names, `EngineKind::as_str`), and the
    /// residual of `deployment_key` if the corpus measured it.
    pub fn lookup(
        &self,
        gpu: &str,
        engine: &str,
        w: Dtype,
        model: ModelKey<'_>,
        deployment_key: Option<&str>,
    ) -> Learned {
        let (vendor, generation) = gpu_lineage(gpu);
        let keys = [
            vendor.to_string(),
            generation.to_string(),
            gpu.to_string(),
            engine.to_string(),
            pair_key(gpu, engine),
            dtype_key(w).to_string(),
            model.family.to_string(),
            model.name.to_string(),
        ];
        let mut log: [f64; N_PARAMS] = std::array::from_fn(|i| self.global[i].ln());
        let ttft = self.ttft_residual_sigma_log.unwrap_or(self.residual_sigma_log);
        let residual = |i| if TTFT_PARAMS.contains(&i) { ttft } else { self.residual_sigma_log };
        let mut var: [f64; N_PARAMS] = std::array::from_fn(|i| residual(i).powi(2));
        let mut matched = [false; N_LEVELS];
        for (l, (level, key)) in LEVELS.iter().zip(&keys).enumerate() {
            match self.offset(level, key) {
                Some(o) => {
                    matched[l] = true;
                    for (x, d) in log.iter_mut().zip(&o.log_offsets) {
                        *x += d;
                    }
                }
                None => {
                    for (v, s) in var.iter_mut().zip(&self.spread_sigma_log[l]) {
                        *v += s * s;
                    }
                }
            }
        }
        let residual = deployment_key
            .and_then(|k| self.deployments.iter().find(|d| d.key == k))
            .map(|d| (d.decode_log, d.prefill_log));
        Learned {
            log_values: log,
            sigma_log: var.map(f64::sqrt),
            matched,
            residual,
            exchange_latency_s: self.exchange_latency_s(),
        }
    }

    /// [`Self::lookup`] for a catalog architecture (its family and name).
    pub fn lookup_arch(
        &self,
        gpu: &str,
        engine: &str,
        w: Dtype,
        arch: &crate::catalog::ModelArch,
        deployment_key: Option<&str>,
    ) -> Learned {
        let family = model_family(arch);
        self.lookup(gpu, engine, w, ModelKey { family: &family, name: &arch.name }, deployment_key)
    }

    /// Read and check a learned model file: every global value positive and finite, shares at most 1,
    /// every vector of the parameters' length.
    pub fn parse(source: &str, text: &str) -> crate::error::Result<LearnedModel> {
        let m: LearnedModel = toml::from_str(text).map_err(|e| crate::error::toml_error(source, text, e))?;
        let bad = |key: &str, msg: String| crate::error::Error::input(source, None, Some(key), msg);
        if m.params.iter().map(String::as_str).ne(PARAMS.iter().copied()) {
            return Err(bad("params", format!("must be {PARAMS:?}")));
        }
        if m.global.len() != N_PARAMS {
            return Err(bad("global", format!("needs {N_PARAMS} values")));
        }
        for (i, v) in m.global.iter().enumerate() {
            if !(v.is_finite() && *v > 0.0) || (is_share(i) && *v > 1.0) {
                return Err(bad(&format!("global[{i}] ({})", PARAMS[i]), format!("out of range: {v}")));
            }
        }
        for (name, table) in [("prior_sigma_log", &m.prior_sigma_log), ("spread_sigma_log", &m.spread_sigma_log)] {
            if table.len() != LEVELS.len()
                || table.iter().any(|r| r.len() != N_PARAMS || r.iter().any(|s| !(s.is_finite() && *s >= 0.0)))
            {
                return Err(bad(name, format!("needs {} rows of {N_PARAMS} non-negative values", LEVELS.len())));
            }
        }
        for (i, o) in m.offsets.iter().enumerate() {
            if !LEVELS.contains(&o.level.as_str()) {
                return Err(bad(&format!("offsets[{i}].level"), format!("must be one of {LEVELS:?}")));
            }
            if o.log_offsets.len() != N_PARAMS || o.log_offsets.iter().any(|x| !x.is_finite()) {
                return Err(bad(&format!("offsets[{i}].log_offsets"), format!("needs {N_PARAMS} finite values")));
            }
        }
        for (i, d) in m.deployments.iter().enumerate() {
            if !(d.decode_log.is_finite() && d.prefill_log.is_finite()) {
                return Err(bad(&format!("deployments[{i}]"), "residuals must be finite".into()));
            }
        }
        for (i, c) in m.clients.iter().enumerate() {
            if !(c.overhead_s.is_finite() && c.overhead_s >= 0.0) {
                return Err(bad(&format!("clients[{i}].overhead_s"), format!("must be >= 0 s, got {}", c.overhead_s)));
            }
            if !(c.requests_per_client.is_finite() && (1.0..=1e6).contains(&c.requests_per_client)) {
                return Err(bad(
                    &format!("clients[{i}].requests_per_client"),
                    format!("must be from 1 to 1000000, got {}", c.requests_per_client),
                ));
            }
        }
        super::check_sigma_log(m.residual_sigma_log).map_err(|msg| bad("residual_sigma_log", msg))?;
        if let Some(x) = &m.exchange {
            if !(x.latency_s.is_finite() && (0.0..=0.01).contains(&x.latency_s)) {
                return Err(bad("exchange.latency_s", format!("must be from 0 to 0.01 s, got {}", x.latency_s)));
            }
        }
        if let Some(s) = m.ttft_residual_sigma_log {
            super::check_sigma_log(s).map_err(|msg| bad("ttft_residual_sigma_log", msg))?;
        }
        Ok(m)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("learned model serializes")
    }
}
