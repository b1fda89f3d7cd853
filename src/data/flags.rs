//! Flags computed from the catalogs: points that break physics, and points that contradict the same
//! report's own measurements under the stated load. Hand-written flags in points.csv ("contradiction:",
//! "duplicate:") quote the report; these are recomputed by [`refresh_flags`] and a test checks that the
//! file is up to date with the code.
//!
//! Every check takes the most lenient reading the report allows (the narrowest plausible dtype, the
//! fastest GPU of a family when the variant is not stated), so a flag means "impossible under any
//! reading", not "unlikely".

use super::{LoadKind, Point, ReportMeta};
use crate::catalog::{Catalog, ModelArch};
use crate::units::Dtype;

pub const PHYSICS_PREFIX: &str = "physics:";
pub const INCONSISTENT_PREFIX: &str = "inconsistent:";

/// Slack on consistency checks: figures are rounded and runs vary by about 10% (seed 002 prints 0.189 s
/// and 0.211 s for the same condition).
const CONSISTENCY_SLACK: f64 = 1.25;

struct Bounds {
    arch: ModelArch,
    bw_max_bytes_s: f64,
    flops_max_s: f64,
    memory_max_bytes: f64,
    gpu_desc: String,
    weight_dtype: Dtype,
    kv_dtype: Dtype,
}

fn bounds(p: &Point, catalog: &Catalog, meta: Option<&ReportMeta>) -> Option<Bounds> {
    let arch = catalog.model(&p.model).ok()?;
    let gpus = catalog.gpu_family(&p.gpu);
    if gpus.is_empty() {
        return None;
    }
    let bw = gpus.iter().map(|g| g.hbm_bandwidth_bytes_s()).fold(0.0, f64::max);
    let fl = gpus.iter().map(|g| g.max_dense_flops_s()).fold(0.0, f64::max);
    let mem = gpus.iter().map(|g| g.memory_bytes()).fold(0.0, f64::max);
    let gpu_desc = if gpus.len() == 1 { gpus[0].name.clone() } else { format!("fastest {} variant", p.gpu) };
    Some(Bounds {
        arch,
        bw_max_bytes_s: bw,
        flops_max_s: fl,
        memory_max_bytes: mem,
        gpu_desc,
        weight_dtype: p.precision.unwrap_or(Dtype::Fp8),
        kv_dtype: meta.and_then(ReportMeta::kv_dtype).unwrap_or(Dtype::Fp8),
    })
}

/// The report's best demonstrated prefill rate in tokens/s: its prefill_tok_s figures and single-request
/// TTFTs at 8K input or more (shorter prompts are dominated by fixed overheads).
fn best_prefill_rate(points: &[Point], report: &str) -> Option<f64> {
    points
        .iter()
        .filter(|q| q.report == report && !q.is_flagged_by_hand())
        .filter_map(|q| match (q.metric.as_str(), q.concurrency, q.input_tokens) {
            ("prefill_tok_s", _, _) => Some(q.value),
            ("ttft_s", Some(1), Some(l)) if l >= 8192 && q.value > 0.0 => Some(l as f64 / q.value),
            _ => None,
        })
        .reduce(f64::max)
}

fn best_single_user_speed(points: &[Point], report: &str) -> Option<f64> {
    points
        .iter()
        .filter(|q| q.report == report && q.metric == "per_user_tok_s" && q.concurrency == Some(1))
        .filter(|q| !q.is_flagged_by_hand())
        .map(|q| q.value)
        .reduce(f64::max)
}

impl Point {
    fn is_flagged_by_hand(&self) -> bool {
        self.flags.iter().any(|f| !f.starts_with(PHYSICS_PREFIX) && !f.starts_with(INCONSISTENT_PREFIX))
    }
}

/// The computed flags of point `idx`.
pub fn computed_flags(points: &[Point], idx: usize, catalog: &Catalog, metas: &[ReportMeta]) -> Vec<String> {
    let p = &points[idx];
    let mut out = Vec::new();
    let (Some(input), Some(output)) = (p.input_tokens, p.output_tokens) else {
        return out;
    };
    let meta = metas.iter().find(|m| m.report == p.report);
    let Some(b) = bounds(p, catalog, meta) else {
        return out;
    };
    let (l_in, l_out) = (input as f64, output as f64);
    let n = p.concurrency.unwrap_or(1) as f64;
    let a = &b.arch;

    // 1. Decode: bytes one step must read at least, over the step time the figure implies.
    let step_s = match p.metric.as_str() {
        "per_user_tok_s" if p.value > 0.0 => Some(1.0 / p.value),
        "itl_ms" if p.value > 0.0 => Some(p.value / 1000.0),
        _ => None,
    };
    if let Some(step_s) = step_s {
        let n_dec = if p.load == LoadKind::ClosedLoop { n } else { 1.0 };
        let ctx = l_in + l_out / 2.0;
        let bytes = a.weight_bytes_read(b.weight_dtype, 1.0)
            + n_dec * (a.kv_bytes_for_context(b.kv_dtype, ctx) + a.linear_state_bytes(Dtype::Bf16));
        let bw = bytes / step_s;
        if bw > b.bw_max_bytes_s {
            out.push(format!(
                "{PHYSICS_PREFIX} one decode step every {:.1} ms must read at least {:.1} GB ({} active weights, {n_dec} x KV of {ctx:.0} tokens in {}): {:.2} TB/s, above the {:.2} TB/s HBM peak of the {}",
                step_s * 1e3,
                bytes / 1e9,
                b.weight_dtype,
                b.kv_dtype,
                bw / 1e12,
                b.bw_max_bytes_s / 1e12,
                b.gpu_desc
            ));
        }
    }
    // 2. Prefill: FLOPs of the prompt(s) over the time the figure allows.
    let prompt_flops = a.prompt_prefill_flops(l_in);
    let implied_flops = match (p.metric.as_str(), p.load) {
        ("ttft_s", _) if n == 1.0 && p.value > 0.0 => Some(prompt_flops / p.value),
        ("ttft_s", LoadKind::Burst) if p.value > 0.0 => Some((n + 1.0) / 2.0 * prompt_flops / p.value),
        ("prefill_tok_s", _) => Some(p.value * prompt_flops / l_in),
        _ => None,
    };
    if let Some(f) = implied_flops {
        if f > b.flops_max_s {
            out.push(format!(
                "{PHYSICS_PREFIX} prefilling {input}-token prompts as stated needs {:.0} TFLOP/s, above the {:.0} TFLOP/s dense peak of the {}",
                f / 1e12,
                b.flops_max_s / 1e12,
                b.gpu_desc
            ));
        }
    }
    // 3. Residency: more sequences than the KV cache can hold force queueing behind whole requests.
    if p.metric == "ttft_s" && n > 1.0 && p.load != LoadKind::Burst {
        let per_seq = a.kv_bytes_for_context(b.kv_dtype, l_in + l_out) + a.linear_state_bytes(Dtype::Bf16);
        let free = b.memory_max_bytes - a.weight_bytes(b.weight_dtype);
        let n_fit = (free / per_seq).floor().max(0.0);
        if n_fit < n {
            if let Some(speed) = best_single_user_speed(points, &p.report) {
                let bound = (n - n_fit) / n * l_out / speed;
                if p.value < bound {
                    out.push(format!(
                        "{PHYSICS_PREFIX} at most {n_fit:.0} sequences of {} tokens fit in {:.0} GB beside {:.1} GB of {} weights ({} KV), so {:.0} of {n:.0} requests wait for a whole {output}-token generation: mean TTFT at least {bound:.1} s, not {}",
                        input + output,
                        b.memory_max_bytes / 1e9,
                        a.weight_bytes(b.weight_dtype) / 1e9,
                        b.weight_dtype,
                        b.kv_dtype,
                        n - n_fit,
                        super::format_value(p.value)
                    ));
                }
            }
        }
    }
    // 4. Consistency with the report's own prefill rate, if the N requests started together.
    if p.metric == "ttft_s" && n > 1.0 && p.load != LoadKind::ClosedLoop {
        if let Some(rate) = best_prefill_rate(points, &p.report) {
            let bound = (n + 1.0) / 2.0 * l_in / rate;
            if p.value * CONSISTENCY_SLACK < bound {
                out.push(format!(
                    "{INCONSISTENT_PREFIX} if the {n:.0} requests were sent at once, mean TTFT is at least {bound:.1} s at the report's own best prefill rate of {rate:.0} tok/s; {} s needs {:.1}x that rate (it fits only a staggered closed loop)",
                    super::format_value(p.value),
                    bound / p.value
                ));
            }
        }
    }
    out
}

/// Replace the computed flags of every point by freshly computed ones; hand flags are kept.
pub fn refresh_flags(points: &mut [Point], catalog: &Catalog, metas: &[ReportMeta]) {
    for p in points.iter_mut() {
        p.flags.retain(|f| !f.starts_with(PHYSICS_PREFIX) && !f.starts_with(INCONSISTENT_PREFIX));
    }
    let computed: Vec<Vec<String>> = (0..points.len()).map(|i| computed_flags(points, i, catalog, metas)).collect();
    for (p, c) in points.iter_mut().zip(computed) {
        p.flags.extend(c);
    }
}
