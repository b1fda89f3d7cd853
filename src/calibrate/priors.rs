//! The priors of stage (b): generic weak priors on what single-user data cannot identify, or the
//! shared hardware model's estimate for the deployment (held-out fits, a user's runs). Each counts as
//! one pseudo-observation of 0.5 z^2 (a user's runs: one run's worth, calibrate::prior_weight).

use super::{Target, P_FRONTEND, P_MEM, P_OVERLAP, P_PER_SEQ, P_ROUNDS_CLOSED, P_ROUNDS_UNKNOWN, P_SPREAD};
use super::{P_ATTN, P_BW, P_MATMUL, P_OVERHEAD, P_REQ};
use crate::catalog::ModelArch;

/// Weak priors (centre, width) on coefficients that single-user data cannot identify, in parameter
/// space (log for positive coefficients). Each counts as one pseudo-observation of 0.5 z^2, so with a
/// few dozen points the data dominates; with a handful the fit stays physical.
pub(super) fn priors(arch: &ModelArch) -> Vec<(usize, f64, f64, String)> {
    // Expert spread: the log-midpoint between one token's experts (k/E) and uniform routing (1).
    let spread_centre = arch.moe.as_ref().map_or(1.0, |m| (m.n_experts_per_token as f64 / m.n_experts as f64).sqrt());
    vec![
        (P_PER_SEQ, (5e-5f64).ln(), 1.5, "per_seq_overhead_s ~ 50 us (x/÷ 4.5)".into()),
        (P_MEM, 0.9, 0.05, "gpu_memory_utilization ~ 0.90 ± 0.05".into()),
        (P_OVERLAP, 0.5, 0.35, "mem_compute_overlap ~ 0.5 ± 0.35".into()),
        (P_SPREAD, spread_centre.ln(), 1.0, "expert_spread ~ sqrt(k/E) (x/÷ 2.7)".into()),
        (P_FRONTEND, (1e-3f64).ln(), 2.0, "frontend_serial_s ~ 1 ms (x/÷ 7.4)".into()),
        (P_ROUNDS_CLOSED, 2.0, 3.0, "requests per client (closed loop) ~ 2 ± 3".into()),
        (P_ROUNDS_UNKNOWN, 2.0, 3.0, "requests per client (unknown load) ~ 2 ± 3".into()),
    ]
}

/// Priors from the shared hardware model for the target's deployment: the centre is the shared
/// estimate, the width its spread across deployments (log for positive coefficients).
pub(super) fn shared_priors(
    shared: &crate::hardware::SharedModel,
    arch: &ModelArch,
    gpu: &crate::catalog::GpuSpec,
    t: &Target,
    chunk: u32,
) -> Vec<(usize, f64, f64, String)> {
    let (c, s) = shared.coefficients_for(arch, gpu, t.deployment.weight_dtype, chunk);
    // The fit has one matmul rate (dense and grouped GEMMs blended), so its prior is the blend.
    let blend_sigma = shared.blend_sigma_for(arch, chunk);
    let blend = shared.blend_for(arch, chunk) * gpu.dense_flops_s(t.deployment.weight_dtype);
    let log = |i: usize, v: f64, w: f64, name: &str| {
        (i, v.ln(), w.max(0.05), format!("{name} ~ {v:.4e} (x/÷ {:.2}, shared hardware model)", w.max(0.05).exp()))
    };
    let shared_entries = vec![
        log(P_OVERHEAD, c.step_overhead_s, s.step_overhead_s, "step_overhead_s"),
        log(P_PER_SEQ, c.per_seq_overhead_s, s.per_seq_overhead_s, "per_seq_overhead_s"),
        log(P_BW, c.bandwidth_eff_bytes_s, s.bandwidth_eff_bytes_s, "bandwidth_eff_bytes_s"),
        log(P_MATMUL, blend, blend_sigma, "matmul_flops_eff_s (dense/grouped blend)"),
        log(P_ATTN, c.attention_flops_eff_s, s.attention_flops_eff_s, "attention_flops_eff_s"),
        log(P_REQ, c.request_overhead_s, s.request_overhead_s, "request_overhead_s"),
        log(P_FRONTEND, c.frontend_serial_s, s.frontend_serial_s, "frontend_serial_s"),
        (
            P_OVERLAP,
            c.mem_compute_overlap,
            (c.mem_compute_overlap * s.mem_compute_overlap).max(0.1),
            format!("mem_compute_overlap ~ {:.2} (shared hardware model)", c.mem_compute_overlap),
        ),
    ];
    let spread = arch.moe.is_some().then(|| log(P_SPREAD, c.expert_spread, s.expert_spread, "expert_spread"));
    // The experiment's unknowns (memory fraction, requests per client) keep the generic priors.
    let replaced = |i: &usize| shared_entries.iter().chain(&spread).any(|(k, ..)| k == i);
    let generic: Vec<_> = priors(arch).into_iter().filter(|(i, ..)| !replaced(i)).collect();
    shared_entries.into_iter().chain(generic).chain(spread).collect()
}

/// Priors centred on the learned step model's coefficients for the deployment
/// (crate::hardware::learned_coefficients), each as wide as its spread there (log for positive coefficients). The
/// learned model has no front-end serial cost (its per-request cost holds the API server's work), so
/// that one keeps its generic prior, as do the experiment's unknowns.
pub(super) fn learned_priors(
    c: &crate::profile::Coefficients,
    s: &crate::profile::CoefficientSigmas,
    shared: &crate::hardware::SharedModel,
    arch: &ModelArch,
) -> Vec<(usize, f64, f64, String)> {
    let log = |i: usize, v: f64, w: f64, name: &str| {
        (i, v.ln(), w.max(0.05), format!("{name} ~ {v:.4e} (x/÷ {:.2}, learned step model)", w.max(0.05).exp()))
    };
    let mut learned = vec![
        log(P_OVERHEAD, c.step_overhead_s, s.step_overhead_s, "step_overhead_s"),
        log(P_PER_SEQ, c.per_seq_overhead_s, s.per_seq_overhead_s, "per_seq_overhead_s"),
        log(P_BW, c.bandwidth_eff_bytes_s, s.bandwidth_eff_bytes_s, "bandwidth_eff_bytes_s"),
        log(P_MATMUL, c.matmul_flops_eff_s, s.matmul_flops_eff_s, "matmul_flops_eff_s (dense GEMMs)"),
        log(P_ATTN, c.attention_flops_eff_s, s.attention_flops_eff_s, "attention_flops_eff_s"),
        log(P_REQ, c.request_overhead_s, s.request_overhead_s, "request_overhead_s"),
        (
            P_OVERLAP,
            c.mem_compute_overlap,
            (c.mem_compute_overlap * shared.mem_compute_overlap.sigma_log).max(0.1),
            format!("mem_compute_overlap ~ {:.2} (shared hardware model)", c.mem_compute_overlap),
        ),
    ];
    if arch.moe.is_some() {
        learned.push(log(P_SPREAD, c.expert_spread, s.expert_spread, "expert_spread"));
    }
    let replaced = |i: &usize| learned.iter().any(|(k, ..)| k == i);
    let generic: Vec<_> = priors(arch).into_iter().filter(|(i, ..)| !replaced(i)).collect();
    learned.into_iter().chain(generic).collect()
}
