//! A small Nelder-Mead simplex minimizer (adaptive coefficients of Gao and Han, 2012).
//!
//! Why this and not a gradient method: the objective is a discrete-event simulation, piecewise constant
//! in the coefficients at fine scale (integer nanoseconds, discrete scheduling decisions), so finite-
//! difference gradients are noise. Why not a crate: argmin's Nelder-Mead would pull in a framework of
//! traits for 80 lines of arithmetic; this one is deterministic, allocation-light and reports why it
//! stopped as an enum.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The spread of objective values over the simplex fell below the tolerance.
    Converged,
    /// The simplex shrank below the size tolerance.
    SimplexCollapsed,
    /// The evaluation budget ran out first.
    MaxEvaluations,
}

impl StopReason {
    pub fn describe(self) -> &'static str {
        match self {
            StopReason::Converged => "converged: objective spread over the simplex below tolerance",
            StopReason::SimplexCollapsed => "converged: simplex smaller than the size tolerance",
            StopReason::MaxEvaluations => "stopped at the evaluation budget before converging",
        }
    }
}

#[derive(Debug, Clone)]
pub struct NmResult {
    pub x: Vec<f64>,
    pub f: f64,
    pub evaluations: usize,
    pub stop: StopReason,
}

/// Minimize `f` from `x0` with initial steps `step` per coordinate. `f` maps a whole batch of points to
/// values so the caller can evaluate in parallel (the initial simplex is one batch).
pub fn minimize(
    mut f: impl FnMut(&[Vec<f64>]) -> Vec<f64>,
    x0: &[f64],
    step: &[f64],
    max_evals: usize,
    f_tol: f64,
    x_tol: f64,
) -> NmResult {
    let n = x0.len();
    let nf = n as f64;
    let (alpha, beta, gamma, delta) = (1.0, 1.0 + 2.0 / nf, 0.75 - 1.0 / (2.0 * nf), 1.0 - 1.0 / nf);
    let mut simplex: Vec<Vec<f64>> = vec![x0.to_vec()];
    for i in 0..n {
        let mut x = x0.to_vec();
        x[i] += step[i];
        simplex.push(x);
    }
    let mut fv = f(&simplex);
    let mut evals = fv.len();
    loop {
        let mut idx: Vec<usize> = (0..=n).collect();
        idx.sort_by(|&a, &b| fv[a].total_cmp(&fv[b]));
        simplex = idx.iter().map(|&i| simplex[i].clone()).collect();
        fv = idx.iter().map(|&i| fv[i]).collect();
        let spread = (fv[n] - fv[0]).abs();
        let size = (1..=n)
            .map(|i| simplex[i].iter().zip(&simplex[0]).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max))
            .fold(0.0, f64::max);
        if spread <= f_tol * (1.0 + fv[0].abs()) {
            return NmResult { x: simplex[0].clone(), f: fv[0], evaluations: evals, stop: StopReason::Converged };
        }
        if size <= x_tol {
            return NmResult {
                x: simplex[0].clone(),
                f: fv[0],
                evaluations: evals,
                stop: StopReason::SimplexCollapsed,
            };
        }
        if evals >= max_evals {
            return NmResult { x: simplex[0].clone(), f: fv[0], evaluations: evals, stop: StopReason::MaxEvaluations };
        }
        let centroid: Vec<f64> = (0..n).map(|j| simplex[..n].iter().map(|x| x[j]).sum::<f64>() / nf).collect();
        let along = |t: f64| -> Vec<f64> { (0..n).map(|j| centroid[j] + t * (simplex[n][j] - centroid[j])).collect() };
        let xr = along(-alpha);
        let fr = {
            evals += 1;
            f(std::slice::from_ref(&xr))[0]
        };
        if fr < fv[0] {
            let xe = along(-alpha * beta);
            let fe = {
                evals += 1;
                f(std::slice::from_ref(&xe))[0]
            };
            if fe < fr {
                simplex[n] = xe;
                fv[n] = fe;
            } else {
                simplex[n] = xr;
                fv[n] = fr;
            }
        } else if fr < fv[n - 1] {
            simplex[n] = xr;
            fv[n] = fr;
        } else {
            let (xc, fc) = if fr < fv[n] {
                let xc = along(-alpha * gamma);
                let fc = {
                    evals += 1;
                    f(std::slice::from_ref(&xc))[0]
                };
                (xc, fc)
            } else {
                let xc = along(gamma);
                let fc = {
                    evals += 1;
                    f(std::slice::from_ref(&xc))[0]
                };
                (xc, fc)
            };
            if fc < fv[n].min(fr) {
                simplex[n] = xc;
                fv[n] = fc;
            } else {
                // Shrink towards the best vertex, evaluated as one batch.
                let best = simplex[0].clone();
                let shrunk: Vec<Vec<f64>> = simplex[1..]
                    .iter()
                    .map(|x| x.iter().zip(&best).map(|(a, b)| b + delta * (a - b)).collect())
                    .collect();
                let vals = f(&shrunk);
                evals += vals.len();
                for (i, (x, v)) in shrunk.into_iter().zip(vals).enumerate() {
                    simplex[i + 1] = x;
                    fv[i + 1] = v;
                }
            }
        }
    }
}
