//! Stage (a) of the calibration: closed-form least squares on the single-request curves (decode step
//! time against KV bytes read; TTFT against prompt length), giving the starting point of stage (b) and
//! notes on what the data identifies, what it cannot, and where it presses against physics.

use super::*;

/// Plain least squares with non-negative coefficients for up to 3 unknowns: every subset of active
/// columns is solved by normal equations and the best feasible one kept.
fn nnls(cols: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let k = cols.len();
    let mut best: Option<(f64, Vec<f64>)> = None;
    for mask in 1u32..(1 << k) {
        let idx: Vec<usize> = (0..k).filter(|i| mask & (1 << i) != 0).collect();
        let m = idx.len();
        let mut a = vec![vec![0.0; m + 1]; m];
        for (r, &i) in idx.iter().enumerate() {
            for (c, &j) in idx.iter().enumerate() {
                a[r][c] = cols[i].iter().zip(&cols[j]).map(|(p, q)| p * q).sum();
            }
            a[r][m] = cols[i].iter().zip(y).map(|(p, q)| p * q).sum();
        }
        // Gaussian elimination with partial pivoting.
        let mut ok = true;
        for c in 0..m {
            let piv = (c..m).max_by(|&p, &q| a[p][c].abs().total_cmp(&a[q][c].abs())).unwrap();
            if a[piv][c].abs() < 1e-300 {
                ok = false;
                break;
            }
            a.swap(c, piv);
            let pivot_row = a[c].clone();
            for (r, row) in a.iter_mut().enumerate() {
                if r != c {
                    let f = row[c] / pivot_row[c];
                    for (x, p) in row.iter_mut().zip(&pivot_row).skip(c) {
                        *x -= f * p;
                    }
                }
            }
        }
        if !ok {
            continue;
        }
        let sol: Vec<f64> = (0..m).map(|r| a[r][m] / a[r][r]).collect();
        if sol.iter().any(|&v| v < 0.0 || !v.is_finite()) {
            continue;
        }
        let mut full = vec![0.0; k];
        for (r, &i) in idx.iter().enumerate() {
            full[i] = sol[r];
        }
        let sse: f64 =
            y.iter().enumerate().map(|(n, yv)| (yv - (0..k).map(|i| cols[i][n] * full[i]).sum::<f64>()).powi(2)).sum();
        if best.as_ref().is_none_or(|(s, _)| sse < *s) {
            best = Some((sse, full));
        }
    }
    best.map(|(_, v)| v)
}

fn dedup_count(xs: impl Iterator<Item = u64>) -> usize {
    let mut v: Vec<u64> = xs.collect();
    v.sort();
    v.dedup();
    v.len()
}

/// Stage (a): initial coefficients from the single-request curves, with notes on what was identified.
pub(super) fn stage_a(
    arch: &ModelArch,
    t: &Target,
    gpu: &crate::catalog::GpuSpec,
    pts: &[&Point],
    budget: u32,
) -> ([f64; N_PARAMS], Vec<String>, Vec<String>, Vec<String>) {
    let mut notes = Vec::new();
    let mut unident = Vec::new();
    let mut physics = Vec::new();
    let peak_bw = gpu.hbm_bandwidth_bytes_s();
    let peak_mm = gpu.dense_flops_s(t.deployment.weight_dtype);
    let peak_attn = gpu.max_dense_flops_s();
    // Decode: step seconds = a + kv_bytes / bw.
    let dec: Vec<(f64, f64)> = pts
        .iter()
        .filter(|p| {
            p.scenario != "all"
                && p.concurrency == Some(1)
                && p.stat == StatKind::Mean
                && (p.metric == "per_user_tok_s" || p.metric == "itl_ms" || p.metric == "tpot_ms")
                && p.value > 0.0
        })
        .map(|p| {
            let ctx = p.input_tokens.unwrap() as f64 + p.output_tokens.unwrap() as f64 / 2.0;
            let x = arch.kv_bytes_for_context(t.deployment.kv_dtype, ctx);
            let y = if p.metric == "per_user_tok_s" { 1.0 / p.value } else { p.value / 1e3 };
            (x, y)
        })
        .collect();
    let w1 = arch.weight_bytes_read(t.deployment.weight_dtype, 1.0);
    let n_ctx = dedup_count(dec.iter().map(|d| d.0 as u64));
    let mut bw = 0.8 * peak_bw;
    let mut overhead_total = 0.005;
    if n_ctx >= 2 {
        let sol = nnls(
            &[vec![1.0; dec.len()], dec.iter().map(|d| d.0).collect()],
            &dec.iter().map(|d| d.1).collect::<Vec<_>>(),
        );
        match sol {
            Some(s) if s[1] > 0.0 => {
                let implied = 1.0 / s[1];
                notes.push(format!(
                    "decode: {} single-request points over {n_ctx} contexts: step = {:.3} ms + KV bytes / {:.2} TB/s",
                    dec.len(),
                    s[0] * 1e3,
                    implied / 1e12
                ));
                if implied > peak_bw {
                    physics.push(format!(
                        "single-request decode slope implies {:.2} TB/s, above the {:.2} TB/s HBM peak of the {}: the fit is held at the peak",
                        implied / 1e12,
                        peak_bw / 1e12,
                        gpu.name
                    ));
                }
                bw = implied.min(peak_bw);
                overhead_total = s[0] - w1 / bw;
            }
            _ => unident.push(
                "bandwidth_eff_bytes_s: decode speed does not fall with context in the data; prior 0.8 x HBM peak"
                    .into(),
            ),
        }
    } else if !dec.is_empty() {
        unident.push(format!(
            "bandwidth_eff_bytes_s: single-request decode measured at {n_ctx} context only; prior 0.8 x HBM peak (aiconfigurator's empirical factor)"
        ));
        let y = dec.iter().map(|d| d.1).sum::<f64>() / dec.len() as f64;
        let x = dec.iter().map(|d| d.0).sum::<f64>() / dec.len() as f64;
        overhead_total = y - (w1 + x) / bw;
    } else {
        unident.push(
            "bandwidth_eff_bytes_s and step overhead: no single-request decode point; priors 0.8 x HBM peak and 5 ms"
                .into(),
        );
    }
    if overhead_total <= 2e-4 {
        physics.push(format!(
            "single-request decode is faster than reading the active weights at {:.2} TB/s allows ({:.2} ms per step left for overhead): overhead floored at 0.2 ms",
            bw / 1e12,
            overhead_total * 1e3
        ));
        overhead_total = 2e-4;
    }
    // TTFT(L) = r + chunks(L) * overhead + L * lin / M + pairs(L) * attn / A.
    let ttft: Vec<(f64, f64)> = pts
        .iter()
        .filter(|p| p.scenario != "all" && p.concurrency == Some(1) && p.metric == "ttft_s" && p.stat == StatKind::Mean)
        .map(|p| (p.input_tokens.unwrap() as f64, p.value))
        .collect();
    let n_len = dedup_count(ttft.iter().map(|d| d.0 as u64));
    let lin = arch.flops_per_token_linear();
    let pair = arch.attn_flops_per_token_pair();
    let mut mm = 0.3 * peak_mm;
    let mut attn = 0.6 * gpu.dense_flops_s(Dtype::Bf16);
    let mut req = 0.05;
    let chunks = |l: f64| (l / budget as f64).ceil();
    let y: Vec<f64> = ttft.iter().map(|(l, v)| v - chunks(*l) * overhead_total).collect();
    let c_one = vec![1.0; ttft.len()];
    let c_lin: Vec<f64> = ttft.iter().map(|(l, _)| l * lin).collect();
    let c_attn: Vec<f64> = ttft.iter().map(|(l, _)| l * (l + 1.0) / 2.0 * pair).collect();
    if n_len >= 3 {
        if let Some(s) = nnls(&[c_one.clone(), c_lin.clone(), c_attn.clone()], &y) {
            req = s[0];
            if s[1] > 0.0 {
                mm = 1.0 / s[1];
            }
            if s[2] > 0.0 {
                attn = 1.0 / s[2];
            }
            notes.push(format!(
                "prefill: {} single-request TTFTs over {n_len} lengths: a = {:.3} s, matmul {:.0} TFLOP/s, attention {:.0} TFLOP/s",
                ttft.len(),
                req,
                mm / 1e12,
                attn / 1e12
            ));
        }
    } else if n_len >= 1 {
        let rest: Vec<f64> = y.iter().zip(&c_attn).map(|(yv, ca)| yv - ca / attn).collect();
        let cols = if n_len == 2 { vec![c_one.clone(), c_lin.clone()] } else { vec![c_one.clone()] };
        let rest = if n_len == 2 { rest } else { rest.iter().zip(&c_lin).map(|(r, cl)| r - cl / mm).collect() };
        if let Some(s) = nnls(&cols, &rest) {
            req = s[0];
            if n_len == 2 && s[1] > 0.0 {
                mm = 1.0 / s[1];
            }
        }
        unident.push(format!(
            "attention_flops_eff_s: single-request TTFT at {n_len} prompt length(s) only; prior 0.6 x BF16 peak"
        ));
        if n_len == 1 {
            unident.push(
                "matmul_flops_eff_s: single-request TTFT at one prompt length only; prior 0.3 x dense peak".into(),
            );
        }
    } else {
        unident.push(
            "request_overhead_s, matmul and attention FLOP/s: no single-request TTFT; priors 50 ms, 0.3 and 0.6 x peak"
                .into(),
        );
    }
    for (name, v, peak) in [("matmul", &mut mm, peak_mm), ("attention", &mut attn, peak_attn)] {
        if *v > peak {
            physics.push(format!(
                "single-request TTFT implies {name} at {:.0} TFLOP/s, above the {:.0} TFLOP/s dense peak: held at the peak",
                *v / 1e12,
                peak / 1e12
            ));
            *v = peak;
        }
    }
    let mut v = [0.0; N_PARAMS];
    v[P_OVERHEAD] = (overhead_total * 0.85).ln();
    v[P_PER_SEQ] = (overhead_total * 0.15).max(2e-6).ln();
    v[P_BW] = bw.ln();
    v[P_MATMUL] = mm.ln();
    v[P_ATTN] = attn.ln();
    v[P_REQ] = req.max(1e-3).ln();
    v[P_ROUNDS_CLOSED] = ExperimentUnknowns::default().rounds_closed;
    v[P_ROUNDS_UNKNOWN] = ExperimentUnknowns::default().rounds_unknown;
    v[P_MEM] = 0.9;
    v[P_OVERLAP] = 0.5;
    v[P_SPREAD] = (0.5f64).ln();
    v[P_FRONTEND] = (1e-3f64).ln();
    (v, notes, unident, physics)
}

/// sigma^2 (J'J)^-1 for a Jacobian given as one column per parameter; a direction the data leaves
/// flat gets a variance of at least 1 (relative sigma 100%). None when J'J cannot be inverted.
pub(super) fn gauss_newton_covariance(jac: &[Vec<f64>], sigma2: f64) -> Option<Vec<Vec<f64>>> {
    let n = jac.len();
    let mut a: Vec<Vec<f64>> =
        (0..n).map(|i| (0..n).map(|j| jac[i].iter().zip(&jac[j]).map(|(x, y)| x * y).sum()).collect()).collect();
    // A ridge of sigma^2 per parameter: at most a variance of 1 (log units) in any direction.
    for (i, row) in a.iter_mut().enumerate() {
        row[i] += sigma2.max(1e-12);
    }
    let inv = invert(&a)?;
    let cov: Vec<Vec<f64>> = inv.into_iter().map(|row| row.into_iter().map(|x| x * sigma2).collect()).collect();
    // Non-finite entries or a negative variance (a residual variance or curvature out of range) are no
    // more usable than a singular matrix: None, which the fit reports, not a profile that fails to load.
    let usable = cov.iter().flatten().all(|x| x.is_finite()) && (0..n).all(|i| cov[i][i] >= 0.0);
    usable.then_some(cov)
}

/// Inverse of a small symmetric positive matrix by Gauss-Jordan elimination with partial pivoting;
/// None when it is singular.
pub(crate) fn invert(a: &[Vec<f64>]) -> Option<Vec<Vec<f64>>> {
    let n = a.len();
    let mut m: Vec<Vec<f64>> = a
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let mut r = row.clone();
            r.extend((0..n).map(|j| if i == j { 1.0 } else { 0.0 }));
            r
        })
        .collect();
    for col in 0..n {
        let piv = (col..n).max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))?;
        if m[piv][col].abs() < 1e-300 {
            return None;
        }
        m.swap(col, piv);
        let d = m[col][col];
        for x in m[col].iter_mut() {
            *x /= d;
        }
        for r in 0..n {
            if r != col {
                let f = m[r][col];
                if f != 0.0 {
                    let pivot_row = m[col].clone();
                    for (x, p) in m[r].iter_mut().zip(&pivot_row) {
                        *x -= f * p;
                    }
                }
            }
        }
    }
    Some(m.into_iter().map(|r| r[n..].to_vec()).collect())
}

#[cfg(test)]
mod tests {
    use super::invert;

    #[test]
    fn inverts_a_correlated_matrix() {
        let a = vec![vec![4.0, 2.0, 0.6], vec![2.0, 3.0, 0.4], vec![0.6, 0.4, 1.0]];
        let inv = invert(&a).unwrap();
        for (i, row) in a.iter().enumerate() {
            for j in 0..3 {
                let p: f64 = row.iter().zip(&inv).map(|(x, inv_row)| x * inv_row[j]).sum();
                assert!((p - if i == j { 1.0 } else { 0.0 }).abs() < 1e-12, "{i} {j} {p}");
            }
        }
        assert!(
            invert(&[vec![1.0, 2.0], vec![2.0, 4.0]]).is_none() || invert(&[vec![0.0, 0.0], vec![0.0, 0.0]]).is_none()
        );
    }
}
