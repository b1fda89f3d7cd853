//! The calibrator: fits the step-time coefficients of a (model, GPU, engine) from measured points.
//!
//! Stage (a), closed form: least squares on the single-request curves. Decode step time against the KV
//! bytes a step reads gives the effective bandwidth (slope) and the fixed overhead (intercept); TTFT
//! against prompt length, a + b*L + c*L^2 (chunked), gives the request overhead and the effective matmul
//! and attention FLOP/s. Stage (b), simulation in the loop: every unflagged point is replayed as the
//! report ran it ([`crate::experiment`]) and the coefficients, with the experiments' unknowns (requests
//! per test, KV memory fraction) within stated bounds, minimize a robust error in log space. Every
//! coefficient stays within the GPU's physical limits; a fit that presses against one says so.
//!
//! The calibrator knows the simulator only through its public entry points.

pub mod corpus;
pub mod exchange;
pub mod handover;
mod inputs;
pub mod nelder_mead;
mod priors;
mod report;
pub mod runs;
pub mod spec;
mod stage_a;
mod targets;

pub use report::report_text;
pub use targets::targets;

use crate::catalog::{Catalog, ModelArch};
use crate::data::{Point, ReportMeta};
use crate::error::{Error, Result};
use crate::experiment::{is_replayable, predict_cached, ExperimentUnknowns, ReplayCache};
use crate::metrics::StatKind;
use crate::profile::{
    CoefficientCovariance, CoefficientSigmas, Coefficients, EngineSettings, FitQuality, GpuRef, ModelRef, ProfileFile,
    Provenance,
};
use crate::units::Dtype;
use nelder_mead::{minimize, StopReason};
use priors::{learned_priors, priors, shared_priors};
use rayon::prelude::*;
use serde::Serialize;
use stage_a::{gauss_newton_covariance, stage_a};

/// One (model, GPU, engine) to calibrate, with the assumptions made where its report is silent.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub report: String,
    pub profile_name: String,
    pub description: String,
    /// What was measured and where: the same type a user's runs and an unmeasured deployment use.
    pub deployment: crate::profile::Deployment,
    pub assumptions: Vec<String>,
    /// Engine settings the report does not state, tried in turn (a discrete experiment unknown); the
    /// variant with the lower objective is kept and named in the provenance. A single variant is the
    /// settings as stated (a user's runs: the flags), fitted whatever they are.
    pub variants: Vec<(String, EngineSettings)>,
}

/// Options of one calibration.
pub struct FitOptions<'a> {
    /// Which unflagged points of the report may be used (held-out protocols narrow it).
    pub use_point: &'a (dyn Fn(&Point) -> bool + Sync),
    pub max_evaluations: usize,
    /// The command line, for provenance.
    pub command: String,
    pub data_sha256: String,
    /// Where the hardware coefficients' priors come from: what the data cannot identify is pulled
    /// toward what other deployments say, not to a generic guess.
    pub priors: PriorSource<'a>,
}

/// The source of a fit's priors on the hardware coefficients.
#[derive(Clone, Copy)]
pub enum PriorSource<'a> {
    /// Generic weak priors (a report's own profile, fitted alone: the shared model is estimated from
    /// those profiles).
    Generic,
    /// The shared hardware model's estimate for the deployment, fitted without this target's data.
    Shared(&'a crate::hardware::SharedModel),
    /// The step model learned on the corpus (models/learned.toml): its coefficients for the deployment
    /// centre the priors, with its spread for the levels the deployment lacks as their widths, and
    /// the parts a few runs of one deployment cannot tell apart (grouped GEMMs' rate relative to the
    /// dense ones, the API server's cost per streamed token, a prefill step's own overhead) are held
    /// at its values, so that the fit is the learned model with this deployment's residual. The
    /// shared model gives the memory/compute overlap, the one value the learned model takes from it.
    Learned { model: &'a crate::hardware::learned::LearnedModel, shared: &'a crate::hardware::SharedModel },
}

/// One fitted point.
#[derive(Debug, Clone, Serialize)]
pub struct FitRow {
    pub line: usize,
    pub scenario: String,
    pub load: String,
    pub concurrency: u32,
    pub aggregation: String,
    pub metric: String,
    pub stat: StatKind,
    pub measured: f64,
    pub fitted: f64,
    pub residual_pct: f64,
}

/// What the calibration did, point by point, and why it stopped.
#[derive(Debug, Clone, Serialize)]
pub struct FitReport {
    pub profile_name: String,
    pub source_report: String,
    pub assumptions: Vec<String>,
    pub stage_a: Vec<String>,
    pub unidentifiable: Vec<String>,
    pub rows: Vec<FitRow>,
    /// Flagged points left out, with the flag.
    pub excluded: Vec<(usize, String)>,
    /// Points not simulated per experiment (capacity figures, summaries over scenarios, power...).
    pub not_replayed: usize,
    /// Statistics left out because no relative error can be taken of them (measured as 0), each why.
    pub not_comparable: Vec<String>,
    pub context_tokens_range: [u64; 2],
    pub concurrency_range: [u32; 2],
    pub stop_reason: StopReason,
    pub evaluations: usize,
    pub objective: f64,
    pub physics_ok: bool,
    pub physics: Vec<String>,
    pub coefficients: Coefficients,
    pub sigmas: CoefficientSigmas,
    pub unknowns: ExperimentUnknowns,
    pub gpu_memory_utilization: f64,
    pub median_abs_error_pct: f64,
    pub p90_abs_error_pct: f64,
}

/// The coefficients among the parameters, with their names in the profile (log space except the
/// overlap, which is linear).
const COEFFICIENT_PARAMS: [(usize, &str); 9] = [
    (P_OVERHEAD, "step_overhead_s"),
    (P_PER_SEQ, "per_seq_overhead_s"),
    (P_BW, "bandwidth_eff_bytes_s"),
    (P_MATMUL, "matmul_flops_eff_s"),
    (P_ATTN, "attention_flops_eff_s"),
    (P_REQ, "request_overhead_s"),
    (P_OVERLAP, "mem_compute_overlap"),
    (P_SPREAD, "expert_spread"),
    (P_FRONTEND, "frontend_serial_s"),
];

/// Parameter vector layout (log of positive coefficients, linear for the rest).
const P_OVERHEAD: usize = 0;
const P_PER_SEQ: usize = 1;
const P_BW: usize = 2;
const P_MATMUL: usize = 3;
const P_ATTN: usize = 4;
const P_REQ: usize = 5;
const P_ROUNDS_CLOSED: usize = 6;
const P_ROUNDS_UNKNOWN: usize = 7;
const P_MEM: usize = 8;
const P_OVERLAP: usize = 9;
const P_SPREAD: usize = 10;
const P_FRONTEND: usize = 11;
const N_PARAMS: usize = 12;

struct Space {
    lo: [f64; N_PARAMS],
    hi: [f64; N_PARAMS],
    active: Vec<usize>,
    base: [f64; N_PARAMS],
}

impl Space {
    fn full(&self, x: &[f64]) -> [f64; N_PARAMS] {
        let mut v = self.base;
        for (k, &i) in self.active.iter().enumerate() {
            v[i] = x[k].clamp(self.lo[i], self.hi[i]);
        }
        v
    }
}

struct Built {
    coefficients: Coefficients,
    unknowns: ExperimentUnknowns,
    mem_fraction: f64,
}

/// The coefficients a fit holds where they are (not among the parameters).
#[derive(Clone, Copy)]
struct Held {
    /// Not fitted from the runs but taken as learned ([`exchange_of`]).
    exchange_latency_s: f64,
    grouped_gemm_rel: f64,
    api_per_token_s: f64,
    prefill_step_overhead_s: f64,
}

impl Held {
    /// What a fit holds: the learned model's values where it centres the priors
    /// ([`PriorSource::Learned`]), else the plain step (one matmul rate, no per-token or per-prefill
    /// host cost).
    fn of(exchange_latency_s: f64, learned: Option<&Coefficients>) -> Held {
        Held {
            exchange_latency_s,
            grouped_gemm_rel: learned.map_or(1.0, |c| c.grouped_gemm_rel),
            api_per_token_s: learned.map_or(0.0, |c| c.api_per_token_s),
            prefill_step_overhead_s: learned.map_or(0.0, |c| c.prefill_step_overhead_s),
        }
    }
}

/// The coefficients at `v`, with the held ones.
fn build(v: &[f64; N_PARAMS], held: &Held) -> Built {
    Built {
        coefficients: Coefficients {
            step_overhead_s: v[P_OVERHEAD].exp(),
            per_seq_overhead_s: v[P_PER_SEQ].exp(),
            bandwidth_eff_bytes_s: v[P_BW].exp(),
            matmul_flops_eff_s: v[P_MATMUL].exp(),
            attention_flops_eff_s: v[P_ATTN].exp(),
            request_overhead_s: v[P_REQ].exp(),
            mem_compute_overlap: v[P_OVERLAP],
            expert_spread: v[P_SPREAD].exp(),
            frontend_serial_s: v[P_FRONTEND].exp(),
            grouped_gemm_rel: held.grouped_gemm_rel,
            api_per_token_s: held.api_per_token_s,
            prefill_step_overhead_s: held.prefill_step_overhead_s,
            exchange_latency_s: held.exchange_latency_s,
        },
        unknowns: ExperimentUnknowns { rounds_closed: v[P_ROUNDS_CLOSED], rounds_unknown: v[P_ROUNDS_UNKNOWN] },
        mem_fraction: v[P_MEM],
    }
}

/// The fixed time of an exchange between attention-DP ranks for `t`'s deployment: the learned
/// model's (calibrate/exchange.rs) where the layout has attention-DP ranks, else 0. A user's runs of
/// one deployment cannot tell it from the step overhead (both are paid every step), so it is held
/// at the corpus's value and the rest of the step is fitted around it.
fn exchange_of(t: &Target, catalog: &crate::catalog::Catalog) -> f64 {
    match (t.deployment.parallel.attention_dp > 1, &catalog.learned) {
        (true, Some(m)) => m.exchange_latency_s(),
        _ => 0.0,
    }
}

fn profile_file(t: &Target, b: &Built, variant: &EngineSettings) -> ProfileFile {
    // The profile names the engine release it assumes (the newest capsim read, unless the runs' or the
    // flags' settings say otherwise), so that a later default does not change what it means.
    let mut engine = EngineSettings {
        kind: Some(t.deployment.engine),
        gpu_memory_utilization: Some(b.mem_fraction),
        version: Some(crate::profile::latest_version(t.deployment.engine).to_string()),
        ..Default::default()
    };
    engine.merge(variant);
    ProfileFile {
        name: t.profile_name.clone(),
        description: t.description.clone(),
        model: ModelRef {
            name: t.deployment.model.clone(),
            weight_dtype: t.deployment.weight_dtype,
            kv_dtype: t.deployment.kv_dtype,
            state_dtype: None,
        },
        gpu: GpuRef {
            name: t.deployment.gpu.clone(),
            tensor_parallel: Some(t.deployment.tensor_parallel),
            expert_parallel: t.deployment.expert_parallel.then_some(true),
            ..t.deployment.parallel.gpu_ref()
        },
        engine,
        coefficients: b.coefficients,
        sigmas: None,
        covariance: None,
        experiment: Some(b.unknowns),
        provenance: Provenance::default(),
        fit: None,
        speculative: t.deployment.speculative.clone(),
    }
}

/// How many pseudo-observations each prior counts as. A benchmark run's statistics are not
/// independent measurements: its mean, median and percentiles of one metric, and its throughput,
/// move together, so a prior weighs as much as one run (the statistics per run fitted), not as one
/// statistic, which let a few runs' hundreds of statistics override every prior. A report's figures
/// are each their own measurement: 1. Measured over the corpus (examples/runs_lab.rs: a GPU's
/// deployments fitted on their runs at concurrency <= 8 with the step model learned without that
/// GPU, their means at >= 32 predicted), InferenceX's bench files went from median |error| TTFT
/// 16.2%, TPOT 8.3% to 14.8% and 6.2%. Applied to the learned model's priors only: their widths are
/// the spread of deployments measured over thousands of points; the shared model's, the spread of
/// five profiles, are not trusted to weigh as much as a run (with them, the vLLM round trip's bands
/// held 43% of the held-out statistics instead of 52%).
fn prior_weight(fit_pts: &[&Point]) -> f64 {
    let mut runs: Vec<*const crate::measured::Run> =
        fit_pts.iter().filter_map(|p| p.run.as_ref().map(std::sync::Arc::as_ptr)).collect();
    runs.sort();
    runs.dedup();
    if runs.is_empty() {
        return 1.0;
    }
    let of_runs = fit_pts.iter().filter(|p| p.run.is_some()).count();
    (of_runs as f64 / runs.len() as f64).max(1.0)
}

/// Robust loss of one log residual: soft L1 with a 5% scale.
fn loss(r: f64) -> f64 {
    let z = r / 0.05;
    2.0 * ((1.0 + z * z).sqrt() - 1.0)
}

/// Calibrate one target from its report's points: every engine variant, keeping the best.
pub fn calibrate(
    points: &[Point],
    metas: &[ReportMeta],
    t: &Target,
    catalog: &Catalog,
    opts: &FitOptions,
) -> Result<(ProfileFile, FitReport)> {
    let mut best: Option<(ProfileFile, FitReport)> = None;
    let mut tried = Vec::new();
    let variants = inputs::variants_to_fit(t, points);
    // Each variant gets the whole budget: their objectives are compared, and a fit cut short by a
    // smaller share loses to a converged one for that reason alone (report 002 at 800 evaluations
    // each: vLLM defaults 5.21; at 2000: 2.58). The variants are fitted in parallel (each fit's
    // evaluations wait for their slowest simulation, which leaves cores idle) and compared in order.
    let fits: Vec<Result<(ProfileFile, FitReport)>> =
        variants.par_iter().map(|(_, settings)| calibrate_variant(points, metas, t, catalog, opts, settings)).collect();
    for ((label, _), fit) in variants.iter().zip(fits) {
        let (pf, rep) = fit?;
        tried.push(format!("{label}: objective {:.4}, median |error| {:.1}%", rep.objective, rep.median_abs_error_pct));
        if best.as_ref().is_none_or(|(_, b)| rep.objective < b.objective) {
            best = Some((pf, rep));
        }
    }
    let Some((mut pf, mut rep)) = best else {
        return Err(Error::Infeasible(format!("{}: no engine settings to fit", t.report)));
    };
    if variants.len() > 1 {
        let chosen = variants
            .iter()
            .zip(&tried)
            .find(|(_, tr)| tr.contains(&format!("objective {:.4}", rep.objective)))
            .map(|(v, _)| v.0.clone())
            .unwrap_or_default();
        let note = format!(
            "engine settings not stated, fitted as a discrete unknown: {} (tried: {})",
            chosen,
            tried.join("; ")
        );
        pf.provenance.notes.push(note.clone());
        rep.assumptions.push(note);
    }
    Ok((pf, rep))
}

fn calibrate_variant(
    points: &[Point],
    metas: &[ReportMeta],
    t: &Target,
    catalog: &Catalog,
    opts: &FitOptions,
    variant: &EngineSettings,
) -> Result<(ProfileFile, FitReport)> {
    let arch = catalog.model(&t.deployment.model)?;
    let gpu = catalog.gpu(&t.deployment.gpu)?.clone();
    let learned = match opts.priors {
        PriorSource::Learned { model, shared } => {
            Some(crate::hardware::learned_coefficients(model, shared, &arch, &gpu, &t.deployment))
        }
        _ => None,
    };
    let held = Held::of(exchange_of(t, catalog), learned.as_ref().map(|(c, _)| c));
    let held_note = learned.as_ref().map(|_| {
        format!(
            "held at the learned step model's values (runs of one deployment cannot tell them from the fitted coefficients): grouped_gemm_rel = {:.4}, api_per_token_s = {:.4e}, prefill_step_overhead_s = {:.4e}",
            held.grouped_gemm_rel, held.api_per_token_s, held.prefill_step_overhead_s
        )
    });
    let report_pts: Vec<&Point> = points.iter().filter(|p| p.report == t.report).collect();
    let excluded: Vec<(usize, String)> =
        report_pts.iter().filter(|p| p.is_flagged()).map(|p| (p.line, p.flags.join(" | "))).collect();
    let usable = |p: &&Point| {
        !p.is_flagged() && is_replayable(p, metas) && p.metric != "capacity_requests" && (opts.use_point)(p)
    };
    let not_comparable: Vec<String> =
        report_pts.iter().copied().filter(usable).filter_map(inputs::not_comparable).collect();
    let fit_pts: Vec<&Point> =
        report_pts.iter().copied().filter(usable).filter(|p| inputs::not_comparable(p).is_none()).collect();
    let not_replayed = report_pts.iter().filter(|p| !p.is_flagged() && !is_replayable(p, metas)).count();
    if fit_pts.is_empty() {
        return Err(Error::Infeasible(if not_comparable.is_empty() {
            format!("{}: no usable points to calibrate on", t.report)
        } else {
            let quotes: Vec<String> = report_pts.iter().copied().filter(usable).map(|p| p.quote.clone()).collect();
            format!(
                "{}: nothing to compare a fit with: every statistic is measured as 0, whose relative error is undefined ({})",
                t.report,
                quotes.join("; ")
            )
        }));
    }
    let base_budget = crate::profile::default_prefill_budget(t.deployment.engine, &EngineSettings::default(), &gpu);
    let (v0, stage_notes, mut unident, mut physics) = stage_a(&arch, t, &gpu, &fit_pts, base_budget);

    let peak_bw = gpu.hbm_bandwidth_bytes_s();
    let peak_mm = gpu.dense_flops_s(t.deployment.weight_dtype);
    let peak_attn = gpu.max_dense_flops_s();
    let has = |f: &dyn Fn(&Point) -> bool| fit_pts.iter().any(|p| f(p));
    // A benchmark run states its request count and load: only a report's tests have these unknowns.
    let multi_closed = has(&|p: &Point| {
        p.run.is_none() && p.load == crate::data::LoadKind::ClosedLoop && p.concurrency.unwrap_or(1) > 1
    });
    let multi_unknown =
        has(&|p: &Point| p.run.is_none() && p.load == crate::data::LoadKind::Unknown && p.concurrency.unwrap_or(1) > 1);
    let multi = has(&|p: &Point| p.concurrency.map_or(p.run.is_some(), |c| c > 1));
    let mut active = vec![P_OVERHEAD, P_BW, P_MATMUL, P_ATTN, P_REQ];
    if multi {
        active.push(P_PER_SEQ);
        active.push(P_MEM);
        active.push(P_OVERLAP);
        if arch.moe.is_some() {
            active.push(P_SPREAD);
        }
        active.push(P_FRONTEND);
    } else {
        unident.push("per_seq_overhead_s: no multi-user point; 15% of the single-request step overhead".into());
        unident.push("gpu_memory_utilization: no multi-user point; 0.9".into());
        unident.push("mem_compute_overlap: no multi-user (mixed-step) point; 0.5".into());
        if arch.moe.is_some() {
            unident.push("expert_spread: no multi-user point; uniform routing (1.0)".into());
        }
        unident.push("frontend_serial_s: no multi-user point; 1 ms".into());
    }
    if multi_closed {
        active.push(P_ROUNDS_CLOSED);
    }
    if multi_unknown {
        active.push(P_ROUNDS_UNKNOWN);
    }
    unident.extend(held_note);
    let all_priors = match (opts.priors, &learned) {
        (PriorSource::Learned { shared, .. }, Some((c, s))) => learned_priors(c, s, shared, &arch),
        (PriorSource::Shared(sh), _) => shared_priors(sh, &arch, &gpu, t, base_budget),
        _ => priors(&arch),
    };
    // What the data cannot identify takes the learned or shared model's estimate for this deployment
    // when there is one (held-out fits, a user's runs), rather than the single-request heuristics.
    let mut v0 = v0;
    if !matches!(opts.priors, PriorSource::Generic) {
        let mut taken = Vec::new();
        for (i, centre, _, what) in &all_priors {
            let is_coefficient = COEFFICIENT_PARAMS.iter().any(|&(k, _)| k == *i);
            if is_coefficient && !active.contains(i) {
                v0[*i] = *centre;
                taken.push(what.clone());
            }
        }
        if !taken.is_empty() {
            unident.push(format!("fixed at the prior's estimate: {}", taken.join("; ")));
        }
    }
    let space = Space {
        lo: [
            (1e-4f64).ln(),
            (1e-6f64).ln(),
            (0.05 * peak_bw).ln(),
            (0.01 * peak_mm).ln(),
            (0.01 * peak_attn).ln(),
            (1e-3f64).ln(),
            1.0,
            1.0,
            0.75,
            0.0,
            (0.01f64).ln(),
            (1e-5f64).ln(),
        ],
        hi: [
            (0.1f64).ln(),
            (0.01f64).ln(),
            peak_bw.ln(),
            peak_mm.ln(),
            peak_attn.ln(),
            (3.0f64).ln(),
            ExperimentUnknowns::ROUNDS_MAX,
            ExperimentUnknowns::ROUNDS_MAX,
            0.95,
            1.0,
            0.0,
            (0.2f64).ln(),
        ],
        active: active.clone(),
        base: v0,
    };
    let x0: Vec<f64> = active.iter().map(|&i| v0[i].clamp(space.lo[i], space.hi[i])).collect();
    let step: Vec<f64> = active
        .iter()
        .map(|&i| match i {
            P_ROUNDS_CLOSED | P_ROUNDS_UNKNOWN => 1.0,
            P_MEM => 0.05,
            P_OVERLAP => 0.3,
            P_SPREAD => -0.7,
            P_FRONTEND => 2.0,
            P_PER_SEQ => 1.0,
            _ => 0.3,
        })
        .collect();

    let predict_all = |v: &[f64; N_PARAMS]| -> Vec<Option<f64>> {
        let b = build(v, &held);
        let pf = profile_file(t, &b, variant);
        let Ok(profile) = pf.resolve(&t.profile_name, catalog) else {
            return vec![None; fit_pts.len()];
        };
        {
            let cache = ReplayCache::default();
            fit_pts.par_iter().map(|p| predict_cached(&profile, p, &b.unknowns, metas, &cache)).collect()
        }
    };
    // A user's run the replay gives nothing for is refused before the search, not after minutes of it.
    let v_start = space.full(&x0);
    inputs::refuse_unreplayed(
        t,
        &profile_file(t, &build(&v_start, &held), variant),
        catalog,
        &fit_pts,
        &predict_all(&v_start),
    )?;
    let prior_list: Vec<(usize, f64, f64, String)> =
        all_priors.into_iter().filter(|(i, ..)| active.contains(i)).collect();
    let pw = match opts.priors {
        PriorSource::Learned { .. } => prior_weight(&fit_pts),
        _ => 1.0,
    };
    let prior_penalty = |v: &[f64; N_PARAMS]| -> f64 {
        pw * prior_list.iter().map(|(i, c, w, _)| 0.5 * ((v[*i] - c) / w).powi(2)).sum::<f64>()
    };
    let objective_of = |preds: &[Option<f64>], v: &[f64; N_PARAMS]| -> f64 {
        (preds
            .iter()
            .zip(&fit_pts)
            .map(|(pr, p)| match pr {
                Some(x) if *x > 0.0 => loss((x / p.value).ln()),
                _ => loss(10f64.ln()),
            })
            .sum::<f64>()
            + prior_penalty(v))
            / fit_pts.len() as f64
    };
    // Nelder-Mead with restarts from the best point, within one evaluation budget.
    let eval_batch = |batch: &[Vec<f64>]| -> Vec<f64> {
        batch
            .iter()
            .map(|x| {
                let v = space.full(x);
                objective_of(&predict_all(&v), &v)
            })
            .collect()
    };
    let first_budget = opts.max_evaluations * 3 / 5;
    let mut nm = minimize(eval_batch, &x0, &step, first_budget, 1e-4, 1e-3);
    let mut used = nm.evaluations;
    let mut restarts = 0;
    let mut idle = 0;
    while used + 2 * active.len() < opts.max_evaluations {
        // Restarts alternate full and half steps from the best point: a simplex collapsed in a valley
        // of several trading coefficients is a false convergence, and a full-size simplex gets out of
        // it where a shrinking one cannot. Three restarts in a row without gain end the search.
        let scale = if restarts % 2 == 0 { 1.0 } else { 0.5 };
        let step_now: Vec<f64> = step.iter().map(|s| s * scale).collect();
        let again = minimize(eval_batch, &nm.x, &step_now, opts.max_evaluations - used, 1e-4, 1e-4);
        used += again.evaluations;
        restarts += 1;
        let gain = nm.f - again.f;
        if again.f < nm.f {
            nm = again;
        }
        idle = if gain < 1e-3 { idle + 1 } else { 0 };
        if idle >= 3 {
            break;
        }
    }
    nm.evaluations = used;
    let v = space.full(&nm.x);
    let b = build(&v, &held);
    let preds = predict_all(&v);
    inputs::refuse_unreplayed(t, &profile_file(t, &b, variant), catalog, &fit_pts, &preds)?;

    // Laplace (Gauss-Newton) approximation of the coefficients' uncertainty: the Jacobian of the log
    // residuals by central differences, covariance = residual variance x (J'J)^-1 over the active
    // parameters. The full matrix keeps the correlations (step overhead against bandwidth, matmul
    // against attention) that a per-coordinate curvature ignores; its diagonal gives each marginal
    // sigma (relative, as the parameters are logs; 1.0 marks a direction the data leaves flat).
    let residuals = |v: &[f64; N_PARAMS]| -> Vec<f64> {
        // As in the objective: a prediction that is not a positive number is a tenfold miss, so that a
        // perturbed replay that yields nothing cannot make the curvature (and the profile) non-finite.
        let miss = |pr: &Option<f64>, p: &Point| match pr {
            Some(x) if *x > 0.0 && x.is_finite() => (x / p.value).ln(),
            _ => 10f64.ln(),
        };
        predict_all(v).iter().zip(&fit_pts).map(|(pr, p)| miss(pr, p)).collect()
    };
    let r0 = residuals(&v);
    let dof = (fit_pts.len() as f64 - active.len() as f64).max(1.0);
    let sigma_r2 = r0.iter().map(|r| r * r).sum::<f64>() / dof;
    let h = 0.05;
    let jac: Vec<Vec<f64>> = active
        .iter()
        .map(|&i| {
            let (mut up, mut dn) = (v, v);
            up[i] = (v[i] + h).min(space.hi[i]);
            dn[i] = (v[i] - h).max(space.lo[i]);
            let width = up[i] - dn[i];
            let (ru, rd) = (residuals(&up), residuals(&dn));
            ru.iter().zip(&rd).map(|(a, b)| if width > 0.0 { (a - b) / width } else { 0.0 }).collect()
        })
        .collect();
    let cov = gauss_newton_covariance(&jac, sigma_r2);
    if cov.is_none() {
        unident.push(format!(
            "coefficient uncertainty: the residuals' curvature over the {} compared statistics cannot be inverted (residual variance {}); every fitted coefficient's sigma is 100%",
            fit_pts.len(),
            crate::error::fmt_num(sigma_r2)
        ));
    }
    let sig = |i: usize| -> f64 {
        match active.iter().position(|&a| a == i) {
            None => 0.0,
            Some(k) => cov.as_ref().map_or(1.0, |c| c[k][k].max(0.0).sqrt().min(1.0)),
        }
    };
    let sigmas = CoefficientSigmas {
        step_overhead_s: sig(P_OVERHEAD),
        per_seq_overhead_s: sig(P_PER_SEQ),
        bandwidth_eff_bytes_s: sig(P_BW),
        matmul_flops_eff_s: sig(P_MATMUL),
        attention_flops_eff_s: sig(P_ATTN),
        request_overhead_s: sig(P_REQ),
        mem_compute_overlap: sig(P_OVERLAP),
        expert_spread: sig(P_SPREAD),
        frontend_serial_s: sig(P_FRONTEND),
        grouped_gemm_rel: 0.0,
    };
    // The covariance of the coefficients (not the experiment's unknowns), in their log space.
    let covariance = cov.map(|c| {
        let keep: Vec<(usize, &str)> = COEFFICIENT_PARAMS
            .iter()
            .filter_map(|&(i, name)| active.iter().position(|&a| a == i).map(|k| (k, name)))
            .collect();
        CoefficientCovariance {
            names: keep.iter().map(|(_, n)| n.to_string()).collect(),
            matrix: keep.iter().map(|&(a, _)| keep.iter().map(|&(b, _)| c[a][b]).collect()).collect(),
        }
    });

    // Physics: coefficients at a physical bound mean the data pushed past it.
    for (i, name, peak, what) in [
        (P_BW, "bandwidth_eff_bytes_s", peak_bw, "HBM peak"),
        (P_MATMUL, "matmul_flops_eff_s", peak_mm, "dense peak"),
        (P_ATTN, "attention_flops_eff_s", peak_attn, "dense peak"),
    ] {
        let val = v[i].exp();
        if active.contains(&i) && val >= 0.99 * peak {
            physics.push(format!(
                "{name} = {:.3e} sits at the {what} ({:.3e}): the data would push it past physics",
                val, peak
            ));
        }
    }
    let physics_ok = physics.is_empty();

    let rows: Vec<FitRow> = fit_pts
        .iter()
        .zip(&preds)
        .map(|(p, pr)| {
            let fitted = pr.unwrap_or(f64::NAN);
            FitRow {
                line: p.line,
                scenario: p.scenario.clone(),
                load: p.run.as_ref().map_or_else(|| p.load.as_str().into(), |r| r.load.short()),
                concurrency: p.concurrency.unwrap_or(0),
                aggregation: format!("{:?}", p.aggregation).to_lowercase(),
                metric: p.metric.clone(),
                stat: p.stat,
                measured: p.value,
                fitted,
                residual_pct: (fitted - p.value) / p.value * 100.0,
            }
        })
        .collect();
    let mut abs: Vec<f64> =
        rows.iter().map(|r| if r.residual_pct.is_finite() { r.residual_pct.abs() } else { 1e9 }).collect();
    abs.sort_by(f64::total_cmp);
    let med = crate::metrics::percentile_sorted(&abs, 50.0);
    let p90 = crate::metrics::percentile_sorted(&abs, 90.0);
    let ctx: Vec<u64> = fit_pts.iter().filter_map(|p| p.input_tokens).collect();
    let conc: Vec<u32> = fit_pts.iter().filter_map(|p| p.concurrency).collect();
    let ctx_range = [*ctx.iter().min().unwrap_or(&0), *ctx.iter().max().unwrap_or(&0)];
    let conc_range = [*conc.iter().min().unwrap_or(&0), *conc.iter().max().unwrap_or(&0)];

    let mut pf = profile_file(t, &b, variant);
    pf.sigmas = Some(sigmas);
    pf.covariance = covariance;
    let mut notes = t.assumptions.clone();
    notes.extend(stage_notes.iter().cloned());
    notes.extend(unident.iter().map(|u| format!("unidentifiable: {u}")));
    notes.extend(not_comparable.iter().map(|w| format!("not compared: {w}")));
    let weight = if pw == 1.0 {
        "one pseudo-observation".to_string()
    } else {
        format!("{pw:.1} pseudo-observations, one run's statistics")
    };
    notes.extend(prior_list.iter().map(|(.., d)| format!("weak prior ({weight}): {d}")));
    notes.push(format!(
        "experiment unknowns fitted: {:.2} requests per client in closed-loop tests, {:.2} in tests of unknown load (1 = burst); KV memory fraction {:.3}",
        b.unknowns.rounds_closed, b.unknowns.rounds_unknown, b.mem_fraction
    ));
    pf.provenance = Provenance {
        method: "stage (a) closed-form least squares on single-request decode and TTFT curves; stage (b) Nelder-Mead over simulated replays of every unflagged point, soft-L1 loss on log residuals".into(),
        source_report: t.report.clone(),
        command: opts.command.clone(),
        data_sha256: opts.data_sha256.clone(),
        capsim_version: env!("CARGO_PKG_VERSION").into(),
        notes,
    };
    pf.fit = Some(FitQuality {
        n_points: fit_pts.len(),
        n_flagged_excluded: excluded.len(),
        median_abs_error_pct: med,
        p90_abs_error_pct: p90,
        stop_reason: format!("{} after {} evaluations and {restarts} restart(s)", nm.stop.describe(), nm.evaluations),
        physics_ok,
        physics_notes: physics.clone(),
        context_tokens_range: ctx_range,
        concurrency_range: conc_range,
        residual_sigma_log: sigma_r2.sqrt(),
    });
    let report = FitReport {
        profile_name: t.profile_name.clone(),
        source_report: t.report.clone(),
        assumptions: t.assumptions.clone(),
        stage_a: stage_notes,
        unidentifiable: unident,
        rows,
        excluded,
        not_replayed,
        not_comparable: not_comparable.clone(),
        context_tokens_range: ctx_range,
        concurrency_range: conc_range,
        stop_reason: nm.stop,
        evaluations: nm.evaluations,
        objective: nm.f,
        physics_ok,
        physics,
        coefficients: b.coefficients,
        sigmas,
        unknowns: b.unknowns,
        gpu_memory_utilization: b.mem_fraction,
        median_abs_error_pct: med,
        p90_abs_error_pct: p90,
    };
    Ok((pf, report))
}

/// SHA-256 of the data, hex (the measured layer's, which tells copies of a result file apart).
pub use crate::measured::sha256_hex;
