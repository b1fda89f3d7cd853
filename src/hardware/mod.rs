//! The shared hardware model: efficiencies that belong to a GPU and a kind of operation rather than to
//! one profile, estimated jointly over every calibrated deployment, so that a deployment nobody
//! measured (another model, GPU or GPU count) gets the shared estimate and its uncertainty instead of
//! one report's fitted numbers.
//!
//! Each quantity is normalized so that it can transfer: achieved fractions of the GPU's peaks
//! (HBM bandwidth, dense tensor FLOP/s in the weights' dtype, BF16 FLOP/s for attention), the step's
//! fixed cost per layer (kernel launches and synchronization grow with depth), and the engine's
//! per-sequence and front-end costs as they are. The request overhead is the benchmark client's own
//! time, not the hardware's: its members are listed but the estimate stays a stated prior. The estimator is two-stage (empirical Bayes): each
//! report's profile is fitted on its own (crate::calibrate), then each quantity's shared value is the
//! precision-weighted geometric mean of the profiles that identify it, and its spread across them is
//! the uncertainty a new deployment inherits. Coefficients a profile could not identify (sitting at a
//! physical bound, or with a flat loss) do not vote.
//!
//! Dense against grouped (MoE) GEMMs: every calibration source is an MoE model whose fitted matmul
//! rate blends dense GEMMs (attention projections, shared experts) with the experts' grouped GEMMs.
//! The dense rate is not identified by that data; it takes a stated prior (`DENSE_GEMM_PRIOR`), and
//! each profile's grouped-GEMM efficiency is what its blend implies given the prior, from the FLOP
//! shares of its model: 1/blend = (1 - s)/dense + s/grouped, s the experts' share of matmul FLOPs.

pub mod learned;

use crate::catalog::{GpuSpec, ModelArch};
use crate::profile::{CoefficientSigmas, Coefficients, Profile};
use crate::units::Dtype;
use serde::{Deserialize, Serialize};

/// Dense GEMM efficiency prior: share of the dense tensor peak large GEMMs reach in the engines'
/// kernels. A judgement (cuBLAS/CUTLASS large-GEMM throughput is commonly reported at 70-80% of the
/// dense peak on Hopper and Ampere), not a fit: no dense model is in the calibration set. Its spread
/// (log sigma) says how far from it a deployment may be.
pub const DENSE_GEMM_PRIOR: (f64, f64) = (0.7, 0.3);

/// Spread assumed for a quantity that only one deployment identifies (log sigma: x/÷ 1.65).
const SINGLE_MEMBER_SIGMA_LOG: f64 = 0.5;

/// One deployment's value of a shared quantity.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Member {
    pub profile: String,
    pub value: f64,
}

/// A shared quantity: its estimate for a deployment with no measurements and the spread around it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SharedValue {
    pub value: f64,
    /// 1-sigma uncertainty of log(value) for a new deployment: the spread across deployments plus
    /// the standard error of the mean.
    pub sigma_log: f64,
    /// The deployments it was estimated from (empty: a stated prior).
    #[serde(default)]
    pub members: Vec<Member>,
    #[serde(default)]
    pub note: String,
}

impl SharedValue {
    /// (value, log sigma).
    pub fn pair(&self) -> (f64, f64) {
        (self.value, self.sigma_log)
    }

    fn prior(value: f64, sigma_log: f64, note: &str) -> SharedValue {
        SharedValue { value, sigma_log, members: Vec::new(), note: note.into() }
    }

    /// Weighted geometric mean of `members` (value, relative sigma of the member's own fit).
    fn pool(members: Vec<(String, f64, f64)>, fallback: SharedValue) -> SharedValue {
        let members: Vec<_> = members.into_iter().filter(|(_, v, _)| v.is_finite() && *v > 0.0).collect();
        if members.is_empty() {
            return fallback;
        }
        let w: Vec<f64> = members.iter().map(|(_, _, s)| 1.0 / s.clamp(0.05, 1.0).powi(2)).collect();
        let sw: f64 = w.iter().sum();
        let mean = members.iter().zip(&w).map(|((_, v, _), w)| w * v.ln()).sum::<f64>() / sw;
        let n = members.len() as f64;
        let sigma_log = if members.len() == 1 {
            SINGLE_MEMBER_SIGMA_LOG
        } else {
            let var = members.iter().zip(&w).map(|((_, v, _), w)| w * (v.ln() - mean).powi(2)).sum::<f64>() / sw;
            // Spread across deployments (small-sample corrected) plus the standard error of the mean.
            let spread2 = var * n / (n - 1.0);
            (spread2 * (1.0 + 1.0 / n)).sqrt().max(0.05)
        };
        SharedValue {
            value: mean.exp(),
            sigma_log,
            members: members.into_iter().map(|(profile, value, _)| Member { profile, value }).collect(),
            note: String::new(),
        }
    }
}

/// Grouped-GEMM efficiency against tokens per expert in a full prefill chunk:
/// e(M) = e_max x M / (M + M_half), M = chunk tokens x k / E. The experts' GEMMs of a full chunk get M
/// rows each on average; the fewer rows per expert, the further from the tensor-core tiles' throughput
/// (padding, one weight pass per few rows, load imbalance between experts). Fitted across deployments
/// with different expert counts; the values are per deployment, the curve is what transfers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GroupedCurve {
    pub e_max: f64,
    pub m_half: f64,
    /// RMS of the members' log residuals about the curve (the uncertainty of a new deployment).
    pub sigma_log: f64,
    /// (profile, tokens per expert, efficiency) of the members.
    pub members: Vec<(String, f64, f64)>,
}

impl GroupedCurve {
    pub fn at(&self, m: f64) -> f64 {
        self.e_max * m / (m + self.m_half)
    }

    /// Least squares in log space over a log grid of M_half (e_max in closed form for each, capped at
    /// `cap`); None with fewer than two members at distinct M.
    pub fn fit(members: Vec<(String, f64, f64)>, cap: f64) -> Option<GroupedCurve> {
        let mut ms: Vec<f64> = members.iter().map(|m| m.1).collect();
        ms.sort_by(f64::total_cmp);
        ms.dedup();
        if ms.len() < 2 {
            return None;
        }
        let mut best: Option<(f64, f64, f64)> = None;
        for i in 0..=120 {
            let m_half = 10f64.powf(i as f64 / 24.0); // 1 .. 1e5
            let shape = |m: f64| (m / (m + m_half)).ln();
            let log_e = members.iter().map(|(_, m, e)| e.ln() - shape(*m)).sum::<f64>() / members.len() as f64;
            let log_e = log_e.min(cap.ln());
            let sse: f64 = members.iter().map(|(_, m, e)| (e.ln() - log_e - shape(*m)).powi(2)).sum();
            if best.is_none_or(|b| sse < b.2 - 1e-15) {
                best = Some((log_e.exp(), m_half, sse));
            }
        }
        let (e_max, m_half, sse) = best?;
        let dof = (members.len() as f64 - 2.0).max(1.0);
        Some(GroupedCurve { e_max, m_half, sigma_log: (sse / dof).sqrt().max(0.1), members })
    }
}

/// Tokens per expert in a full prefill chunk of `chunk_tokens`.
pub fn tokens_per_expert(a: &ModelArch, chunk_tokens: u32) -> f64 {
    a.moe.as_ref().map_or(0.0, |m| chunk_tokens as f64 * m.n_experts_per_token as f64 / m.n_experts as f64)
}

/// The shared hardware model (models/hardware.toml, written by `capsim calibrate`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SharedModel {
    #[serde(default)]
    pub provenance: String,
    /// Achieved share of the HBM peak.
    pub bandwidth_frac: SharedValue,
    /// Share of the dense tensor peak (in the weights' dtype) large dense GEMMs reach.
    pub dense_gemm_frac: SharedValue,
    /// Share of the dense tensor peak the experts' grouped GEMMs reach (pooled over deployments).
    pub grouped_gemm_frac: SharedValue,
    /// The same against tokens per expert, where the members span enough expert counts; used in
    /// place of the pooled value when present.
    #[serde(default)]
    pub grouped_gemm_curve: Option<GroupedCurve>,
    /// Share of the BF16 dense peak attention kernels reach.
    pub attention_frac: SharedValue,
    /// Fixed step cost per layer (s).
    pub step_overhead_per_layer_s: SharedValue,
    pub per_seq_overhead_s: SharedValue,
    pub request_overhead_s: SharedValue,
    pub frontend_serial_s: SharedValue,
    pub mem_compute_overlap: SharedValue,
    /// MoE: share of the experts a workload's tokens route among.
    pub expert_spread: SharedValue,
    /// RMS over the member profiles of their fits' residual scatter (log): the model's own error a
    /// prediction band adds.
    #[serde(default)]
    pub residual_sigma_log: f64,
}

/// Whether a fitted coefficient carries information: not pinned at a physical bound, not flat.
fn identified(value: f64, bound: Option<f64>, sigma: f64) -> bool {
    bound.is_none_or(|b| value < 0.995 * b) && sigma < 0.99
}

/// The experts' share of a model's matmul FLOPs per prefill token (LM head excluded).
pub fn expert_flop_share(a: &ModelArch) -> f64 {
    let body = a.flops_per_token_body();
    if body > 0.0 {
        (a.expert_flops_per_token() / body).clamp(0.0, 1.0)
    } else {
        0.0
    }
}

impl SharedModel {
    /// The priors alone: what capsim assumes before any calibration (stated in each note).
    pub fn prior() -> SharedModel {
        SharedModel {
            provenance: "priors only (no calibrated deployment)".into(),
            bandwidth_frac: SharedValue::prior(0.8, 0.2, "aiconfigurator mem_bw_empirical_scaling_factor 0.8"),
            dense_gemm_frac: SharedValue::prior(
                DENSE_GEMM_PRIOR.0,
                DENSE_GEMM_PRIOR.1,
                "judgement: large-GEMM share of the dense peak",
            ),
            grouped_gemm_frac: SharedValue::prior(0.3, 0.7, "judgement: fused MoE kernels well below dense GEMMs"),
            grouped_gemm_curve: None,
            attention_frac: SharedValue::prior(0.4, 0.5, "judgement: FlashAttention share of the BF16 peak"),
            step_overhead_per_layer_s: SharedValue::prior(1e-4, 0.7, "judgement: ~5 ms per step for a 48-layer model"),
            per_seq_overhead_s: SharedValue::prior(5e-5, 1.5, "same prior as calibration"),
            request_overhead_s: SharedValue::prior(0.05, 1.0, "same prior as calibration"),
            frontend_serial_s: SharedValue::prior(1e-3, 2.0, "same prior as calibration"),
            mem_compute_overlap: SharedValue::prior(0.5, 0.7, "same prior as calibration"),
            expert_spread: SharedValue::prior(0.25, 1.0, "sqrt(k/E) for 8 of 128 experts"),
            residual_sigma_log: 0.0,
        }
    }

    /// Estimate the shared model from calibrated profiles (each fitted on its own measurements).
    pub fn fit(profiles: &[&Profile], provenance: &str) -> SharedModel {
        let prior = SharedModel::prior();
        let one = CoefficientSigmas::unidentified();
        // Members of each pooled quantity: (profile, value, the fit's own relative sigma).
        type Members = Vec<(String, f64, f64)>;
        let (mut bw, mut attn, mut ovh, mut per_seq) = (Members::new(), Members::new(), Members::new(), Members::new());
        let (mut req, mut front, mut overlap, mut spread) =
            (Members::new(), Members::new(), Members::new(), Members::new());
        // (profile, fitted matmul share of peak, experts' FLOP share, sigma, tokens per expert)
        let mut blends: Vec<(String, f64, f64, f64, f64)> = Vec::new();
        for p in profiles {
            let c = &p.coefficients;
            let s = p.file.sigmas.unwrap_or(one);
            let name = p.name().to_string();
            let w = p.file.model.weight_dtype;
            let (bw_peak, mm_peak, attn_peak) =
                (p.gpu.hbm_bandwidth_bytes_s(), p.gpu.dense_flops_s(w), p.gpu.dense_flops_s(Dtype::Bf16));
            if identified(c.bandwidth_eff_bytes_s, Some(bw_peak), s.bandwidth_eff_bytes_s) {
                bw.push((name.clone(), c.bandwidth_eff_bytes_s / bw_peak, s.bandwidth_eff_bytes_s));
            }
            if identified(c.matmul_flops_eff_s, Some(mm_peak), s.matmul_flops_eff_s) {
                let blend = c.matmul_flops_eff_s / mm_peak;
                let tpe = tokens_per_expert(&p.arch, p.engine.max_num_batched_tokens);
                blends.push((name.clone(), blend, expert_flop_share(&p.arch), s.matmul_flops_eff_s, tpe));
            }
            if identified(c.attention_flops_eff_s, Some(attn_peak), s.attention_flops_eff_s) {
                attn.push((name.clone(), c.attention_flops_eff_s / attn_peak, s.attention_flops_eff_s));
            }
            if identified(c.step_overhead_s, None, s.step_overhead_s) {
                ovh.push((name.clone(), c.step_overhead_s / p.arch.n_layers as f64, s.step_overhead_s));
            }
            for (members, v, sg) in [
                (&mut per_seq, c.per_seq_overhead_s, s.per_seq_overhead_s),
                (&mut req, c.request_overhead_s, s.request_overhead_s),
                (&mut front, c.frontend_serial_s, s.frontend_serial_s),
                (&mut overlap, c.mem_compute_overlap, s.mem_compute_overlap),
            ] {
                if identified(v, None, sg) {
                    members.push((name.clone(), v, sg));
                }
            }
            if p.arch.moe.is_some() && identified(c.expert_spread, None, s.expert_spread) {
                spread.push((name.clone(), c.expert_spread, s.expert_spread));
            }
        }
        // Dense models identify the dense GEMM share directly; MoE models the grouped one, given it.
        let dense_members = blends.iter().filter(|b| b.2 == 0.0).map(|b| (b.0.clone(), b.1, b.3)).collect();
        let dense_gemm_frac = SharedValue::pool(dense_members, prior.dense_gemm_frac.clone());
        let dense = dense_gemm_frac.value;
        let grouped_members: Vec<(String, f64, f64, f64)> = blends
            .iter()
            .filter(|b| b.2 > 0.0)
            .map(|(name, blend, share, sigma, tpe)| {
                let inv = 1.0 / blend - (1.0 - share) / dense;
                // A blend faster than the dense share allows for its dense part says the experts run
                // at least as fast as dense GEMMs here.
                let g = if inv > share / dense { share / inv } else { dense };
                (name.clone(), g, *sigma, *tpe)
            })
            .collect();
        let grouped_gemm_curve =
            GroupedCurve::fit(grouped_members.iter().map(|(n, g, _, m)| (n.clone(), *m, *g)).collect(), dense);
        let grouped = grouped_members.into_iter().map(|(n, g, s, _)| (n, g, s)).collect();
        let mut overlap = SharedValue::pool(overlap, prior.mem_compute_overlap);
        overlap.value = overlap.value.min(1.0);
        SharedModel {
            provenance: provenance.into(),
            bandwidth_frac: SharedValue::pool(bw, prior.bandwidth_frac),
            dense_gemm_frac,
            grouped_gemm_frac: SharedValue::pool(grouped, prior.grouped_gemm_frac),
            grouped_gemm_curve,
            attention_frac: SharedValue::pool(attn, prior.attention_frac),
            step_overhead_per_layer_s: SharedValue::pool(ovh, prior.step_overhead_per_layer_s),
            per_seq_overhead_s: SharedValue::pool(per_seq, prior.per_seq_overhead_s),
            // The request overhead is the benchmark client's and the API server's time (HTTP,
            // tokenization, streaming), not the hardware's: the reports' clients range from 17 ms to
            // 280 ms. The members are listed, the estimate stays the stated prior, its spread at least
            // theirs.
            request_overhead_s: {
                let pooled = SharedValue::pool(req, prior.request_overhead_s.clone());
                SharedValue {
                    value: prior.request_overhead_s.value,
                    sigma_log: prior.request_overhead_s.sigma_log.max(pooled.sigma_log),
                    members: pooled.members,
                    note: "the client's time, not the hardware's: the stated prior, not the members' mean".into(),
                }
            },
            frontend_serial_s: SharedValue::pool(front, prior.frontend_serial_s),
            mem_compute_overlap: overlap,
            expert_spread: SharedValue::pool(spread, prior.expert_spread),
            residual_sigma_log: {
                let r: Vec<f64> =
                    profiles.iter().filter_map(|p| p.file.fit.as_ref().map(|f| f.residual_sigma_log)).collect();
                if r.is_empty() {
                    0.0
                } else {
                    (r.iter().map(|x| x * x).sum::<f64>() / r.len() as f64).sqrt()
                }
            },
        }
    }

    /// The grouped-GEMM share of the dense peak for `arch` with prefill chunks of `chunk_tokens`,
    /// and its log sigma: from the curve where there is one, else the pooled value.
    pub fn grouped_for(&self, arch: &ModelArch, chunk_tokens: u32) -> (f64, f64) {
        match &self.grouped_gemm_curve {
            Some(c) => (c.at(tokens_per_expert(arch, chunk_tokens)), c.sigma_log),
            None => (self.grouped_gemm_frac.value, self.grouped_gemm_frac.sigma_log),
        }
    }

    /// The matmul share of the dense peak a model's blend of dense and grouped GEMMs reaches.
    pub fn blend_for(&self, arch: &ModelArch, chunk_tokens: u32) -> f64 {
        let share = expert_flop_share(arch);
        let dense = self.dense_gemm_frac.value;
        if share <= 0.0 {
            return dense;
        }
        let (grouped, _) = self.grouped_for(arch, chunk_tokens);
        1.0 / ((1.0 - share) / dense + share / grouped.max(1e-6))
    }

    /// Log sigma of that blend: the dense and grouped uncertainties weighted by their FLOP shares.
    pub fn blend_sigma_for(&self, arch: &ModelArch, chunk_tokens: u32) -> f64 {
        let share = expert_flop_share(arch);
        let (_, grouped_sigma) = self.grouped_for(arch, chunk_tokens);
        ((1.0 - share) * self.dense_gemm_frac.sigma_log).hypot(share * grouped_sigma)
    }

    /// Coefficients and their relative 1-sigma uncertainties for a deployment with no measurements
    /// whose prefill chunks hold `chunk_tokens` tokens.
    pub fn coefficients_for(
        &self,
        arch: &ModelArch,
        gpu: &GpuSpec,
        weight_dtype: Dtype,
        chunk_tokens: u32,
    ) -> (Coefficients, CoefficientSigmas) {
        let dense = self.dense_gemm_frac.value;
        let (grouped, grouped_sigma) =
            if arch.moe.is_some() { self.grouped_for(arch, chunk_tokens) } else { (dense, 0.0) };
        let c = Coefficients {
            step_overhead_s: self.step_overhead_per_layer_s.value * arch.n_layers as f64,
            per_seq_overhead_s: self.per_seq_overhead_s.value,
            bandwidth_eff_bytes_s: (self.bandwidth_frac.value.min(1.0)) * gpu.hbm_bandwidth_bytes_s(),
            matmul_flops_eff_s: dense.min(1.0) * gpu.dense_flops_s(weight_dtype),
            attention_flops_eff_s: self.attention_frac.value.min(1.0) * gpu.dense_flops_s(Dtype::Bf16),
            request_overhead_s: self.request_overhead_s.value,
            mem_compute_overlap: self.mem_compute_overlap.value.clamp(0.0, 1.0),
            expert_spread: self.expert_spread.value.min(1.0),
            frontend_serial_s: self.frontend_serial_s.value,
            grouped_gemm_rel: (grouped / dense).clamp(1e-3, 1.0),
            api_per_token_s: 0.0,
            prefill_step_overhead_s: 0.0,
            exchange_latency_s: 0.0,
        };
        let s = CoefficientSigmas {
            step_overhead_s: self.step_overhead_per_layer_s.sigma_log,
            per_seq_overhead_s: self.per_seq_overhead_s.sigma_log,
            bandwidth_eff_bytes_s: self.bandwidth_frac.sigma_log,
            // The matmul rate is the dense one; the uncertainty of the step's matmul time is the
            // blend's (the grouped share carries its own, larger spread).
            matmul_flops_eff_s: self.blend_sigma_for(arch, chunk_tokens),
            attention_flops_eff_s: self.attention_frac.sigma_log,
            request_overhead_s: self.request_overhead_s.sigma_log,
            mem_compute_overlap: self.mem_compute_overlap.sigma_log,
            expert_spread: self.expert_spread.sigma_log,
            frontend_serial_s: self.frontend_serial_s.sigma_log,
            grouped_gemm_rel: grouped_sigma,
        };
        (c, s)
    }

    /// Widen a profile's own uncertainties by the spread across deployments, for a profile moved to
    /// another GPU, GPU count or precision (its residuals are kept, their transfer is uncertain).
    pub fn widen(&self, own: &CoefficientSigmas) -> CoefficientSigmas {
        let q = |a: f64, b: &SharedValue| (a * a + b.sigma_log * b.sigma_log).sqrt();
        CoefficientSigmas {
            step_overhead_s: q(own.step_overhead_s, &self.step_overhead_per_layer_s),
            per_seq_overhead_s: q(own.per_seq_overhead_s, &self.per_seq_overhead_s),
            bandwidth_eff_bytes_s: q(own.bandwidth_eff_bytes_s, &self.bandwidth_frac),
            matmul_flops_eff_s: q(own.matmul_flops_eff_s, &self.grouped_gemm_frac),
            attention_flops_eff_s: q(own.attention_flops_eff_s, &self.attention_frac),
            request_overhead_s: own.request_overhead_s,
            mem_compute_overlap: own.mem_compute_overlap,
            expert_spread: own.expert_spread,
            frontend_serial_s: own.frontend_serial_s,
            grouped_gemm_rel: own.grouped_gemm_rel,
        }
    }

    /// Read a shared model file; every value is checked (positive and finite, shares of a peak at
    /// most 1, sigmas non-negative), so that no deployment built from it can carry a bad coefficient.
    pub fn parse(source: &str, text: &str) -> crate::error::Result<SharedModel> {
        let m: SharedModel = toml::from_str(text).map_err(|e| crate::error::toml_error(source, text, e))?;
        let bad = |key: &str, msg: String| crate::error::Error::input(source, None, Some(key), msg);
        for (key, v, share) in [
            ("bandwidth_frac", &m.bandwidth_frac, true),
            ("dense_gemm_frac", &m.dense_gemm_frac, true),
            ("grouped_gemm_frac", &m.grouped_gemm_frac, true),
            ("attention_frac", &m.attention_frac, true),
            ("step_overhead_per_layer_s", &m.step_overhead_per_layer_s, false),
            ("per_seq_overhead_s", &m.per_seq_overhead_s, false),
            ("request_overhead_s", &m.request_overhead_s, false),
            ("frontend_serial_s", &m.frontend_serial_s, false),
            ("mem_compute_overlap", &m.mem_compute_overlap, true),
            ("expert_spread", &m.expert_spread, true),
        ] {
            if !(v.value.is_finite() && v.value > 0.0) || (share && v.value > 1.0) {
                let range = if share { "in (0, 1]" } else { "positive and finite" };
                return Err(bad(
                    &format!("{key}.value"),
                    format!("must be {range}, got {}", crate::error::fmt_num(v.value)),
                ));
            }
            if !(v.sigma_log.is_finite() && v.sigma_log >= 0.0) {
                return Err(bad(
                    &format!("{key}.sigma_log"),
                    format!("must be >= 0, got {}", crate::error::fmt_num(v.sigma_log)),
                ));
            }
        }
        if let Some(c) = &m.grouped_gemm_curve {
            if !(c.e_max.is_finite() && c.e_max > 0.0 && c.e_max <= 1.0) {
                return Err(bad(
                    "grouped_gemm_curve.e_max",
                    format!("must be in (0, 1], got {}", crate::error::fmt_num(c.e_max)),
                ));
            }
            if !(c.m_half.is_finite() && c.m_half >= 0.0 && c.sigma_log.is_finite() && c.sigma_log >= 0.0) {
                return Err(bad("grouped_gemm_curve.m_half", "m_half and sigma_log must be finite and >= 0".into()));
            }
        }
        check_sigma_log(m.residual_sigma_log).map_err(|msg| bad("residual_sigma_log", msg))?;
        Ok(m)
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("shared model serializes")
    }
}

/// The profile named `name` of a deployment nobody measured, with coefficients from `shared`
/// (engine defaults unless `d.settings` sets them).
pub fn unmeasured_profile(
    catalog: &crate::catalog::Catalog,
    shared: &SharedModel,
    name: &str,
    d: &crate::profile::Deployment,
) -> crate::error::Result<Profile> {
    build_unmeasured(catalog, shared, catalog.learned.as_ref(), name, d)
}

/// [`unmeasured_profile`] from `shared` alone, the learned step model set aside: the reports'
/// leave-one-report-out protocol predicts each report from the shared model of the others.
pub fn unmeasured_profile_shared(
    catalog: &crate::catalog::Catalog,
    shared: &SharedModel,
    name: &str,
    d: &crate::profile::Deployment,
) -> crate::error::Result<Profile> {
    build_unmeasured(catalog, shared, None, name, d)
}

fn build_unmeasured(
    catalog: &crate::catalog::Catalog,
    shared: &SharedModel,
    learned: Option<&learned::LearnedModel>,
    name: &str,
    d: &crate::profile::Deployment,
) -> crate::error::Result<Profile> {
    use crate::profile::{GpuRef, ModelRef, ProfileFile, Provenance};
    let arch = catalog.model(&d.model)?;
    let gpu = catalog.gpu(&d.gpu)?;
    let engine = crate::profile::EngineSettings { kind: Some(d.engine), ..d.settings.clone() };
    let chunk = crate::profile::default_prefill_budget(d.engine, &engine, gpu);
    let (c, s) = match learned {
        Some(m) => learned_coefficients(m, shared, &arch, gpu, d),
        None => shared.coefficients_for(&arch, gpu, d.weight_dtype, chunk),
    };
    let method = if learned.is_some() { "learned step model (models/learned.toml)" } else { "shared hardware model" };
    let pf = ProfileFile {
        name: name.to_string(),
        description: format!("{} on {}x {} from the {method}", arch.name, d.tensor_parallel, gpu.name),
        model: ModelRef {
            name: d.model.clone(),
            weight_dtype: d.weight_dtype,
            kv_dtype: d.kv_dtype,
            state_dtype: None,
        },
        gpu: GpuRef {
            name: d.gpu.clone(),
            tensor_parallel: Some(d.tensor_parallel),
            expert_parallel: d.expert_parallel.then_some(true),
            ..d.parallel.gpu_ref()
        },
        engine,
        coefficients: c,
        sigmas: Some(s),
        covariance: None,
        experiment: None,
        provenance: Provenance {
            method: method.into(),
            notes: vec![learned.map_or(shared.provenance.clone(), |m| m.provenance.clone())],
            ..Default::default()
        },
        fit: Some(crate::profile::FitQuality {
            stop_reason: format!("no measurements: coefficients from the {method}"),
            residual_sigma_log: learned.map_or(shared.residual_sigma_log, |m| m.residual_sigma_log),
            ..Default::default()
        }),
        speculative: d.speculative.clone(),
    };
    let mut p = pf.resolve(name, catalog)?;
    p.retargeted_from = Some(method.into());
    p.retarget_method = Some(format!("no measurements: coefficients from the {method}"));
    Ok(p)
}

/// The learned model's coefficients (and log sigmas) for deployment `d`, with no measured
/// deployment's residual: what a deployment nobody measured gets, and what a user's runs are fitted
/// around (crate::calibrate::PriorSource::Learned).
pub fn learned_coefficients(
    m: &learned::LearnedModel,
    shared: &SharedModel,
    arch: &ModelArch,
    gpu: &GpuSpec,
    d: &crate::profile::Deployment,
) -> (Coefficients, CoefficientSigmas) {
    let l = m.lookup_arch(&gpu.name, d.engine.as_str(), d.weight_dtype, arch, None);
    let moe_tp = d.parallel.expert_split(d.tensor_parallel, d.expert_parallel);
    coefficients_from_learned(&l, shared, arch, gpu, d.weight_dtype, moe_tp)
}

/// Coefficients (and their log sigmas) from learned values (crate::hardware::learned) for `arch` on
/// `gpu` in `weight_dtype`: each share times the peak it is a share of, the per-layer overhead times
/// the layers and the GPU's kernel speed (learned::kernel_overhead_scale), a measured deployment's
/// own residual applied (decode: bandwidth, overheads; prefill: the GEMM and attention shares). The
/// overlap is the shared model's; the front-end's serial cost is 0 (the learned per-request cost
/// holds the API server's work).
pub fn coefficients_from_learned(
    l: &learned::Learned,
    shared: &SharedModel,
    arch: &ModelArch,
    gpu: &GpuSpec,
    weight_dtype: Dtype,
    moe_tp: u32,
) -> (Coefficients, CoefficientSigmas) {
    use learned::*;
    let v = &l.with_residual();
    let (layers, kernel_scale) = (arch.n_layers as f64, kernel_overhead_scale(gpu));
    let c = Coefficients {
        step_overhead_s: (v[OVERHEAD] * layers + v[MOE_OVERHEAD] * arch.n_moe_layers() as f64) * kernel_scale,
        per_seq_overhead_s: v[PER_SEQ],
        bandwidth_eff_bytes_s: v[BW] * gpu.hbm_bandwidth_bytes_s(),
        matmul_flops_eff_s: v[GEMM] * gpu.dense_flops_s(weight_dtype) * gpu.gemm_reference_share(weight_dtype),
        attention_flops_eff_s: v[ATTN] * gpu.dense_flops_s(Dtype::Bf16),
        request_overhead_s: v[REQUEST],
        mem_compute_overlap: shared.mem_compute_overlap.value.clamp(0.0, 1.0),
        expert_spread: v[SPREAD].clamp(1e-3, 1.0),
        frontend_serial_s: 0.0,
        grouped_gemm_rel: if arch.moe.is_some() {
            (v[GROUPED] * grouped_slice_efficiency(arch, moe_tp)).clamp(1e-3, 1.0)
        } else {
            1.0
        },
        api_per_token_s: v[API_TOKEN],
        prefill_step_overhead_s: v[PREFILL_OVERHEAD] * layers * kernel_scale,
        exchange_latency_s: l.exchange_latency_s,
    };
    let s = &l.sigma_log;
    let sig = CoefficientSigmas {
        step_overhead_s: s[OVERHEAD],
        per_seq_overhead_s: s[PER_SEQ],
        bandwidth_eff_bytes_s: s[BW],
        matmul_flops_eff_s: s[GEMM],
        attention_flops_eff_s: s[ATTN],
        request_overhead_s: s[REQUEST],
        mem_compute_overlap: shared.mem_compute_overlap.sigma_log,
        expert_spread: s[SPREAD],
        frontend_serial_s: 0.0,
        grouped_gemm_rel: if arch.moe.is_some() { s[GROUPED] } else { 0.0 },
    };
    (c, sig)
}

/// A model file's log spread: finite and not negative (both the shared and the learned model's
/// readers check it), else the message to give under its key.
fn check_sigma_log(v: f64) -> std::result::Result<(), String> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(format!("must be >= 0, got {}", crate::error::fmt_num(v)))
    }
}
