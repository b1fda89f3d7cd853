//! `capacity --disaggregated`: the cheapest prefill:decode split (fewest GPUs) of a disaggregated
//! deployment (crate::profile::disagg) that serves a target open-loop rate within the SLOs.
//!
//! The search assumes more workers in either pool never break an SLO that fewer met (monotone in P
//! and in D). For P = 1, 2, ... it finds the fewest decode workers D(P) that meet the SLOs, by
//! doubling then bisecting below the previous P's D (D(P) does not grow with P); a P whose prefill
//! pool is saturated (busy 95% or more) at the largest D tried skips ahead. It stops once P prefill
//! workers alone cost more GPUs than the best split found, or at `max_workers`. Work: about
//! P_max x log2(D) simulations, each of a run that grows with the workers.

use super::{Question, Slo};
use crate::error::{Error, Result};
use crate::metrics::{pool_summary, summarize, RequestSlo};
use crate::profile::disagg::{worker_gpus, Disaggregated};
use crate::sim::{simulate_disaggregated, SimOptions};
use crate::workload::{LoadAxis, MAX_REQUESTS};
use serde::Serialize;
use std::collections::BTreeMap;

/// One split tried.
#[derive(Debug, Clone, Serialize)]
pub struct PdCandidate {
    pub prefill_workers: u32,
    pub decode_workers: u32,
    pub gpus: u64,
    pub meets_slo: bool,
    /// Each SLO's value, named as the SLO.
    pub slo_values: Vec<(String, f64)>,
    pub ttft_s_mean: f64,
    pub tpot_ms_mean: f64,
    pub prefill_utilization: f64,
    pub decode_utilization: f64,
    /// Requests unfinished at the run's horizon (an overloaded split).
    pub unfinished: u64,
    /// Requests the split's run sent.
    pub run_requests: u64,
}

/// The answer: the cheapest split meeting the SLOs, the splits one worker smaller (which do not,
/// where the search is exact) and one worker larger, and every split tried.
#[derive(Debug, Clone, Serialize)]
pub struct PdAnswer {
    pub rate: f64,
    pub best: Option<PdCandidate>,
    pub neighbours: Vec<PdCandidate>,
    pub tried: Vec<PdCandidate>,
}

/// Requests of one candidate's run unless the template fixes a count or a duration: `per_worker`
/// for each of its workers (`--requests-per-replica`), else 200 per worker, at least 1,000 and at
/// most 20,000.
fn requests_for(workers: u32, per_worker: Option<u64>) -> u64 {
    match per_worker {
        Some(n) => n.saturating_mul(workers as u64).min(MAX_REQUESTS),
        None => (200 * workers as u64).clamp(1000, 20_000),
    }
}

/// Size the pools of `base` (its pools' profiles; its worker counts are ignored) for `rate`.
/// `requests_per_worker`: a candidate of P + D workers runs that many requests per worker, unless
/// the question's template fixes a request count or a duration (None: [`requests_for`]'s default).
pub fn size_disaggregated(
    base: &Disaggregated,
    q: &Question,
    rate: f64,
    max_workers: u32,
    requests_per_worker: Option<u64>,
    tick: &(dyn Fn() + Sync),
) -> Result<PdAnswer> {
    if requests_per_worker == Some(0) {
        return Err(Error::flag("--requests-per-replica", "must be at least 1"));
    }
    if q.slos.is_empty() {
        return Err(Error::flag("--slo", "give at least one SLO"));
    }
    let mut tried: BTreeMap<(u32, u32), PdCandidate> = BTreeMap::new();
    let mut eval = |p: u32, d: u32| -> Result<PdCandidate> {
        if let Some(c) = tried.get(&(p, d)) {
            return Ok(c.clone());
        }
        let dep = base.with_workers(p, d);
        let mut t = q.template.clone();
        if t.requests.is_none() && t.duration_s.is_none() {
            t.requests = Some(requests_for(p + d, requests_per_worker));
        }
        let w = t.at(LoadAxis::Rate, rate)?;
        crate::memory::check(&crate::sim::memory_estimate(&dep.decode, &w, p + d), 1, "a disaggregated candidate")?;
        let out = simulate_disaggregated(&dep, &w, q.seed, SimOptions::default());
        tick();
        let s =
            summarize(&out, w.spec.warmup_requests, w.spec.cooldown_requests, w.spec.warmup_s, &RequestSlo::default());
        let r = out.disagg.as_ref().expect("a disaggregated run");
        let (pre, dec) = (pool_summary(&r.prefill, r.end_ns), pool_summary(&r.decode, r.end_ns));
        let c = PdCandidate {
            prefill_workers: p,
            decode_workers: d,
            gpus: dep.gpus(),
            meets_slo: s.requests_unfinished == 0 && q.slos.iter().all(|slo: &Slo| slo.met(&s)),
            slo_values: q.slos.iter().map(|slo| (slo.name(), slo.value(&s))).collect(),
            ttft_s_mean: s.ttft_s.mean,
            tpot_ms_mean: s.tpot_ms.mean,
            prefill_utilization: pre.utilization,
            decode_utilization: dec.utilization,
            unfinished: s.requests_unfinished,
            run_requests: s.requests_sent,
        };
        tried.insert((p, d), c.clone());
        Ok(c)
    };
    // GPUs per worker (tensor parallel x pipeline stages).
    let (gpus_p, gpus_d) = (worker_gpus(&base.prefill), worker_gpus(&base.decode));
    let mut best: Option<(u64, u32, u32)> = None;
    let mut d_cap = max_workers;
    for p in 1..=max_workers {
        if best.is_some_and(|(g, _, _)| p as u64 * gpus_p + gpus_d > g) {
            break;
        }
        // Doubling D up to the cap, until it meets or the prefill pool is the bottleneck.
        let (mut lo, mut hi) = (1u32, None);
        let mut d = 1u32;
        loop {
            let c = eval(p, d)?;
            if c.meets_slo {
                hi = Some(d);
                break;
            }
            lo = d + 1;
            if d >= d_cap || c.prefill_utilization >= 0.95 {
                break;
            }
            d = (d * 2).min(d_cap);
        }
        let Some(mut hi) = hi else { continue };
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if eval(p, mid)?.meets_slo {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        d_cap = hi;
        let g = p as u64 * gpus_p + hi as u64 * gpus_d;
        if best.is_none_or(|(bg, _, _)| g < bg) {
            best = Some((g, p, hi));
        }
    }
    let mut neighbours = Vec::new();
    let best = match best {
        Some((_, p, d)) => {
            for (np, nd) in [(p.wrapping_sub(1), d), (p, d.wrapping_sub(1)), (p + 1, d), (p, d + 1)] {
                if (1..=max_workers).contains(&np) && (1..=max_workers).contains(&nd) {
                    neighbours.push(eval(np, nd)?);
                }
            }
            Some(eval(p, d)?)
        }
        None => None,
    };
    Ok(PdAnswer { rate, best, neighbours, tried: tried.into_values().collect() })
}
