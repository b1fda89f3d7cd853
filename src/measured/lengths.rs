//! Length distributions as the files state them: percentiles of the input and output lengths
//! (AIPerf's `input_sequence_length.{min, p1, ..., p99, max}`, GuideLLM's
//! `prompt_token_count.successful.percentiles`), read where a file lists no requests. A replay
//! draws from the piecewise-linear quantile function through them, on an even grid of quantiles,
//! so a run whose lengths spread is not replayed at its mean lengths (which flattens the E2E tail).

use super::json::Doc;
use crate::error::{fmt_num, Result};
use crate::workload::MAX_REQUEST_TOKENS;
use serde::Serialize;

/// Percentiles of a run's input and output lengths: (quantile in [0, 1], tokens), ascending in both;
/// empty where the file states none.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct LengthPercentiles {
    pub input: Vec<(f64, f64)>,
    pub output: Vec<(f64, f64)>,
}

/// Points of the quantile function a replay draws from, each equally likely: 1,000 puts a point
/// every 0.1 percentile, so p99 and everything below it are drawn at their stated values.
pub const GRID: usize = 1000;

/// The lengths at quantiles (k + 0.5) / [`GRID`] of the piecewise-linear quantile function through
/// `points` (held at the first and last value outside them), rounded, at least 1; empty when
/// `points` is.
pub fn quantile_grid(points: &[(f64, f64)]) -> Vec<u32> {
    let Some((&first, &last)) = points.first().zip(points.last()) else { return vec![] };
    (0..GRID)
        .map(|k| {
            let q = (k as f64 + 0.5) / GRID as f64;
            let v = if q <= first.0 {
                first.1
            } else if q >= last.0 {
                last.1
            } else {
                let i = points.partition_point(|p| p.0 <= q).clamp(1, points.len() - 1);
                let ((q0, v0), (q1, v1)) = (points[i - 1], points[i]);
                if q1 > q0 {
                    v0 + (v1 - v0) * (q - q0) / (q1 - q0)
                } else {
                    v1
                }
            };
            v.round().clamp(1.0, MAX_REQUEST_TOKENS as f64) as u32
        })
        .collect()
}

/// Read the percentiles `keys` (dotted path under `base`, quantile) of one length; each must be a
/// token count within capsim's bound and they must not decrease with the quantile. Errors name the
/// file and the key.
pub fn read_percentiles(d: &Doc, base: &str, keys: &[(&str, f64)]) -> Result<Vec<(f64, f64)>> {
    let mut out: Vec<(f64, f64, String)> = Vec::new();
    for &(k, q) in keys {
        let path = format!("{base}.{k}");
        let Some(v) = d.opt_num(&path)? else { continue };
        if !(v.is_finite() && (0.0..=MAX_REQUEST_TOKENS as f64).contains(&v)) {
            return Err(d.err(&path, format!("must be a token count in 0..={MAX_REQUEST_TOKENS}, got {}", fmt_num(v))));
        }
        out.push((q, v, path));
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let Some(w) = out.windows(2).find(|w| w[1].1 < w[0].1) {
        return Err(d.err(
            &w[1].2,
            format!("{} is below {} = {}: percentiles cannot decrease", fmt_num(w[1].1), w[0].2, fmt_num(w[0].1)),
        ));
    }
    Ok(out.into_iter().map(|(q, v, _)| (q, v)).collect())
}

/// A random dataset's length range for a stated length `len` and range ratio `ratio`: uniform
/// integers in [max(int(len x ratio), 1), len], as SGLang's `sample_random_requests` and InferenceX's
/// fork of vLLM's benchmark draw them (the corpus's NVIDIA rows: ratio 0.98, their timing noise).
pub fn ratio_range(len: u32, ratio: f64) -> (u32, u32) {
    (((len as f64 * ratio).floor() as u32).max(1), len)
}

/// The mean of a uniform integer range.
pub fn range_mean((lo, hi): (u32, u32)) -> f64 {
    (lo as f64 + hi as f64) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_passes_through_the_stated_percentiles() {
        let pts = [(0.0, 10.0), (0.5, 100.0), (0.99, 1000.0), (1.0, 2000.0)];
        let g = quantile_grid(&pts);
        assert_eq!(g.len(), GRID);
        // The median of the grid is the stated median; the 990th value the stated p99's neighbourhood.
        assert!((g[499] as f64 - 100.0).abs() <= 1.0 && (g[500] as f64 - 100.0).abs() <= 1.0, "{} {}", g[499], g[500]);
        assert!(g[989] < 1000 && g[990] > 1000);
        assert!(g.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(quantile_grid(&[(0.5, 7.0)]), vec![7; GRID]);
        assert!(quantile_grid(&[]).is_empty());
    }
}
