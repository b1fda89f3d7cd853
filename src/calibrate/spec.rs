//! The acceptance rate of speculative decoding fitted from a user's runs (`capsim calibrate --runs
//! FILES --spec-method M --spec-tokens K`, issue 25): the deployment's physics are held as they are
//! (the profile built for it, from the learned step model or the shared hardware model) and only
//! the acceptance moves, one number for every drafted position, until the replayed runs' TPOT
//! matches the measured TPOT. A one-dimensional search: a grid over [0, 1] in steps of 0.05, then a
//! golden-section refinement inside the best grid cell's neighbours.
//!
//! The loss is the mean squared log ratio of predicted to measured TPOT (every TPOT statistic of
//! every run). The simulator's acceptance is deterministic (sim/spec.rs), so the replayed TPOT is a
//! monotone, noise-free function of the rate and the search needs no repeated draws.

use crate::error::{Error, Result};
use crate::experiment::{predict_cached, ExperimentUnknowns, ReplayCache};
use crate::measured::Run;
use crate::profile::Profile;
use serde::Serialize;

/// The fitted acceptance and its quality.
#[derive(Debug, Clone, Serialize)]
pub struct AcceptanceFit {
    /// Conditional acceptance per drafted position (one value for all).
    pub accept_rate: f64,
    /// TPOT statistics fitted.
    pub n_points: usize,
    /// Median and 90th percentile |TPOT error| (%) at the fitted rate.
    pub median_abs_error_pct: f64,
    pub p90_abs_error_pct: f64,
    /// Mean signed TPOT error (%) at acceptance 0 and 1: how far the rate's range reaches. A fitted
    /// rate at a bound with an error left means the physics, not the acceptance, is off.
    pub error_at_0_pct: f64,
    pub error_at_1_pct: f64,
    /// Whether the fit stopped at a bound of [0, 1].
    pub at_bound: bool,
    /// Simulated replays of every run (evaluations of the loss).
    pub evaluations: usize,
}

/// Fit the acceptance rate of `profile`'s speculative decoding to the TPOT of `runs`.
pub fn fit_acceptance(profile: &Profile, runs: &[Run]) -> Result<AcceptanceFit> {
    let Some(spec) = profile.speculative() else {
        return Err(Error::flag("--spec-method", "fitting an acceptance rate needs --spec-method and --spec-tokens"));
    };
    let points: Vec<_> =
        runs.iter().flat_map(|r| r.points("spec")).filter(|p| p.metric == "tpot_ms" && p.value > 0.0).collect();
    if points.is_empty() {
        return Err(Error::flag("--runs", "the runs hold no TPOT statistic: the acceptance rate is fitted from TPOT"));
    }
    let u = ExperimentUnknowns::default();
    let mut evaluations = 0usize;
    // Signed errors (predicted / measured - 1) of every point at rate a.
    let mut errors = |a: f64| -> Vec<f64> {
        evaluations += 1;
        let mut p = profile.clone();
        p.file.speculative = Some(spec.with_rate(a));
        let cache = ReplayCache::default();
        points
            .iter()
            .map(|pt| predict_cached(&p, pt, &u, &[], &cache).map_or(f64::NAN, |v| v / pt.value - 1.0))
            .collect()
    };
    let loss = |e: &[f64]| -> f64 {
        let ok: Vec<f64> = e.iter().filter(|x| x.is_finite() && **x > -1.0).map(|x| (1.0 + x).ln().powi(2)).collect();
        if ok.is_empty() {
            f64::INFINITY
        } else {
            ok.iter().sum::<f64>() / ok.len() as f64
        }
    };
    let grid: Vec<f64> = (0..=20).map(|i| i as f64 / 20.0).collect();
    let mut best = (f64::INFINITY, 0.0);
    let mut at = Vec::with_capacity(grid.len());
    for &a in &grid {
        let e = errors(a);
        let l = loss(&e);
        if l < best.0 {
            best = (l, a);
        }
        at.push(e);
    }
    let mean = |e: &[f64]| {
        let ok: Vec<f64> = e.iter().copied().filter(|x| x.is_finite()).collect();
        if ok.is_empty() {
            f64::NAN
        } else {
            100.0 * ok.iter().sum::<f64>() / ok.len() as f64
        }
    };
    let (error_at_0_pct, error_at_1_pct) = (mean(&at[0]), mean(&at[grid.len() - 1]));
    if !best.0.is_finite() {
        return Err(Error::flag("--runs", "no run could be replayed on this deployment at any acceptance rate"));
    }
    // Golden section on [best - 0.05, best + 0.05] within [0, 1].
    let (mut lo, mut hi) = ((best.1 - 0.05f64).max(0.0), (best.1 + 0.05f64).min(1.0));
    let g = (5f64.sqrt() - 1.0) / 2.0;
    let (mut x1, mut x2) = (hi - g * (hi - lo), lo + g * (hi - lo));
    let (mut f1, mut f2) = (loss(&errors(x1)), loss(&errors(x2)));
    for _ in 0..12 {
        if f1 <= f2 {
            hi = x2;
            (x2, f2) = (x1, f1);
            x1 = hi - g * (hi - lo);
            f1 = loss(&errors(x1));
        } else {
            lo = x1;
            (x1, f1) = (x2, f2);
            x2 = lo + g * (hi - lo);
            f2 = loss(&errors(x2));
        }
    }
    for (l, a) in [(f1, x1), (f2, x2)] {
        if l < best.0 {
            best = (l, a);
        }
    }
    let rate = (best.1 * 1e4).round() / 1e4;
    let e = errors(rate);
    let mut abs: Vec<f64> = e.iter().filter(|x| x.is_finite()).map(|x| 100.0 * x.abs()).collect();
    abs.sort_by(f64::total_cmp);
    let q = |f: f64| if abs.is_empty() { f64::NAN } else { abs[((abs.len() - 1) as f64 * f).round() as usize] };
    Ok(AcceptanceFit {
        accept_rate: rate,
        n_points: points.len(),
        median_abs_error_pct: q(0.5),
        p90_abs_error_pct: q(0.9),
        error_at_0_pct,
        error_at_1_pct,
        at_bound: rate <= 0.0 || rate >= 1.0,
        evaluations,
    })
}

/// The fit as the calibrate command prints it.
pub fn fit_text(name: &str, k: u32, method: &str, f: &AcceptanceFit) -> String {
    format!(
        "speculative decoding ({method}, {k} drafted tokens per step) of `{name}`: acceptance fitted on {} TPOT statistic(s)\n  \
         accept_rate = {:.4} per drafted position{}\n  \
         TPOT |error| at the fit: median {:.1}%, p90 {:.1}%\n  \
         mean TPOT error at acceptance 0: {:+.1}%, at acceptance 1: {:+.1}% ({} replays of the runs)\n",
        f.n_points,
        f.accept_rate,
        if f.at_bound { " (at a bound of [0, 1]: the deployment's physics, not the acceptance, leave the error)" } else { "" },
        f.median_abs_error_pct,
        f.p90_abs_error_pct,
        f.error_at_0_pct,
        f.error_at_1_pct,
        f.evaluations
    )
}
