//! Capacity planning: the largest load that meets an SLO (burst size, closed-loop concurrency or
//! open-loop rate), with a band from the profile's fitted uncertainty, verdicts for open loops, fleet
//! sizing with simulated routing, and side-by-side GPUs.
//!
//! Searches bracket (doubling) and then split the bracket in four per round: the candidates of a round
//! run in parallel, and the answer does not depend on the number of threads. Several seeds per load are
//! merged at the per-request level (percentiles are never averaged).

pub mod disagg;
pub mod fleet;
pub mod steady;

use crate::error::{Error, Result};
use crate::metrics::{summarize, RequestSlo, StatKind, Summary};
use crate::profile::Profile;
use crate::sim::{simulate, SimOptions, SimOutput};
use crate::sweep::point_seed;
use crate::workload::{LoadAxis, LoadTemplate, Workload};
use rayon::prelude::*;
use serde::Serialize;

/// A metric an SLO can bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SloMetric {
    TtftS,
    ItlMs,
    TpotMs,
    E2eS,
    QueueWaitS,
    PerUserTokS,
}

/// One limit: `ttft_p99_s=2.0` (at most), `per_user_tok_s_mean=15` (at least).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Slo {
    pub metric: SloMetric,
    pub stat: StatKind,
    pub limit: f64,
}

impl Slo {
    /// Parse `NAME=VALUE` with NAME one of ttft_<stat>_s, itl_<stat>_ms, tpot_<stat>_ms, e2e_<stat>_s,
    /// queue_wait_<stat>_s (upper limits) or per_user_tok_s_<stat> (a lower limit); stat is mean, p50,
    /// p90, p95 or p99.
    pub fn parse(s: &str) -> Result<Slo> {
        let bad = |m: String| Error::flag("--slo", m);
        let (name, value) =
            s.split_once('=').ok_or_else(|| bad(format!("`{s}`: expected NAME=VALUE, e.g. ttft_mean_s=3.0")))?;
        let limit: f64 = value.trim().parse().map_err(|_| bad(format!("`{value}` is not a number")))?;
        if !(limit.is_finite() && limit > 0.0) {
            return Err(bad(format!("`{name}` needs a positive finite limit, got {value}")));
        }
        let name = name.trim();
        let (metric, rest) = if let Some(r) = name.strip_prefix("per_user_tok_s_") {
            (SloMetric::PerUserTokS, r.to_string())
        } else {
            let table = [
                ("ttft_", "_s", SloMetric::TtftS),
                ("itl_", "_ms", SloMetric::ItlMs),
                ("tpot_", "_ms", SloMetric::TpotMs),
                ("e2e_", "_s", SloMetric::E2eS),
                ("queue_wait_", "_s", SloMetric::QueueWaitS),
            ];
            table
                .iter()
                .find_map(|(pre, suf, m)| name.strip_prefix(pre).and_then(|r| r.strip_suffix(suf)).map(|r| (*m, r.to_string())))
                .ok_or_else(|| {
                    bad(format!(
                        "unknown SLO `{name}`; use ttft_<stat>_s, itl_<stat>_ms, tpot_<stat>_ms, e2e_<stat>_s, queue_wait_<stat>_s or per_user_tok_s_<stat> with stat mean|p50|p90|p95|p99"
                    ))
                })?
        };
        let stat = StatKind::parse(&rest)
            .ok_or_else(|| bad(format!("unknown statistic `{rest}` in `{name}` (mean, p50, p90, p95, p99)")))?;
        Ok(Slo { metric, stat, limit })
    }
    pub fn name(&self) -> String {
        let stat = crate::metrics::stat_name(self.stat);
        match self.metric {
            SloMetric::TtftS => format!("ttft_{stat}_s"),
            SloMetric::ItlMs => format!("itl_{stat}_ms"),
            SloMetric::TpotMs => format!("tpot_{stat}_ms"),
            SloMetric::E2eS => format!("e2e_{stat}_s"),
            SloMetric::QueueWaitS => format!("queue_wait_{stat}_s"),
            SloMetric::PerUserTokS => format!("per_user_tok_s_{stat}"),
        }
    }
    pub fn is_lower_bound(&self) -> bool {
        self.metric == SloMetric::PerUserTokS
    }
    pub fn value(&self, s: &Summary) -> f64 {
        let st = match self.metric {
            SloMetric::TtftS => &s.ttft_s,
            SloMetric::ItlMs => &s.itl_ms,
            SloMetric::TpotMs => &s.tpot_ms,
            SloMetric::E2eS => &s.e2e_s,
            SloMetric::QueueWaitS => &s.queue_wait_s,
            SloMetric::PerUserTokS => &s.per_user_tok_s,
        };
        st.get(self.stat)
    }
    pub fn met(&self, s: &Summary) -> bool {
        let v = self.value(s);
        if s.requests_measured == 0 || !v.is_finite() {
            return false;
        }
        if self.is_lower_bound() {
            v >= self.limit
        } else {
            v <= self.limit
        }
    }
}

/// A named use case of the reports: lengths and SLOs (means, as the reports state them).
pub struct Preset {
    pub name: &'static str,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub slos: &'static [(&'static str, f64)],
}

/// The reports' use cases (reports 001 and 003, "Use Case Guidance").
pub const PRESETS: &[Preset] = &[
    Preset { name: "code-completion", input_tokens: 1024, output_tokens: 128, slos: &[("e2e_mean_s", 2.0)] },
    Preset {
        name: "short-chat",
        input_tokens: 8192,
        output_tokens: 1024,
        slos: &[("ttft_mean_s", 10.0), ("per_user_tok_s_mean", 10.0)],
    },
    Preset {
        name: "general-chat",
        input_tokens: 32768,
        output_tokens: 1024,
        slos: &[("ttft_mean_s", 8.0), ("per_user_tok_s_mean", 15.0)],
    },
    Preset {
        name: "long-documents",
        input_tokens: 65536,
        output_tokens: 1024,
        slos: &[("ttft_mean_s", 12.0), ("per_user_tok_s_mean", 15.0)],
    },
    Preset {
        name: "coding-agent",
        input_tokens: 98304,
        output_tokens: 1024,
        slos: &[("ttft_mean_s", 12.0), ("per_user_tok_s_mean", 20.0)],
    },
];

pub fn preset(name: &str) -> Result<&'static Preset> {
    PRESETS.iter().find(|p| p.name == name).ok_or_else(|| {
        Error::flag(
            "--preset",
            format!(
                "unknown preset `{name}`; one of {}",
                PRESETS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
            ),
        )
    })
}

/// What a capacity question asks.
#[derive(Debug, Clone, Serialize)]
pub struct Question {
    pub axis: LoadAxis,
    pub template: LoadTemplate,
    pub slos: Vec<Slo>,
    /// Search no further than this load.
    pub max_load: f64,
    /// Seeds per load, merged per request.
    pub seeds: u32,
    pub seed: u64,
    /// Relative resolution of a rate search.
    pub rate_rel_tol: f64,
}

/// Open-loop verdict at one rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stability {
    /// The queue stays bounded while requests arrive.
    Stable,
    /// The waiting queue still grows over the last quarter of the sending period, by 0.3 to 1% of the
    /// arrivals there: a longer run would look worse (a fleet must be stable).
    Backlogged,
    /// It grows by more than 1% of the last quarter's arrivals: the engines cannot keep up.
    Overloaded,
}

/// One load the search tried.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TriedPoint {
    pub load: f64,
    pub meets_slo: bool,
    /// The SLO metrics at this load, by name.
    pub slo_values: Vec<(String, f64)>,
    pub ttft_s_mean: f64,
    pub ttft_s_p99: f64,
    pub itl_ms_mean: f64,
    pub e2e_s_mean: f64,
    pub per_user_tok_s_mean: f64,
    pub system_output_tok_s: f64,
    pub requests_measured: u64,
    pub utilization: f64,
    pub stability: Option<Stability>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A largest load meeting the SLO was found inside the search range.
    Found,
    /// Even the smallest load violates the SLO.
    NoLoadMeetsSlo,
    /// The SLO still holds at the search limit: capacity is at least that.
    AtSearchLimit,
}

#[derive(Debug, Clone, Serialize)]
pub struct Capacity {
    pub capacity: f64,
    pub band: (f64, f64),
    pub verdict: Verdict,
    /// Open loops: the stability of the capacity point.
    pub stability: Option<Stability>,
    pub points: Vec<TriedPoint>,
    /// Loads above the capacity that meet the SLO again: the metric is not monotone there.
    pub non_monotone_loads: Vec<f64>,
    pub profile: String,
    pub retargeted_from: Option<String>,
}

/// Stable, backlogged or overloaded: see [`steady`].
fn stability(out: &SimOutput) -> Stability {
    steady::Trend::of(std::slice::from_ref(out)).verdict()
}

/// Simulate one load with every seed; latency statistics over the merged requests, throughputs
/// averaged over seeds.
pub fn evaluate(p: &Profile, q: &Question, load: f64) -> Result<TriedPoint> {
    let w = q.template.at(q.axis, load)?;
    // The seeds run side by side, and their records are merged into one more copy.
    let copies = q.seeds.max(1) as u64 + 1;
    crate::memory::check(&crate::sim::memory_estimate(p, &w, 1), copies, &format!("the load {load}"))?;
    let runs: Vec<(SimOutput, Summary)> = (0..q.seeds.max(1))
        .into_par_iter()
        .map(|i| {
            let out = simulate(p, &w, point_seed(q.seed, i as u64), SimOptions::default());
            let s = summarize(
                &out,
                w.spec.warmup_requests,
                w.spec.cooldown_requests,
                w.spec.warmup_s,
                &RequestSlo::default(),
            );
            (out, s)
        })
        .collect();
    let merged = merge(&runs, &w);
    let n = runs.len() as f64;
    let mean_of = |f: &dyn Fn(&Summary) -> f64| runs.iter().map(|(_, s)| f(s)).sum::<f64>() / n;
    let meets = q.slos.iter().all(|s| s.met(&merged));
    let stab = (q.axis == LoadAxis::Rate).then(|| {
        // The worst verdict over seeds.
        runs.iter().map(|(o, _)| stability(o)).max_by_key(|s| *s as u8).expect("one seed at least")
    });
    Ok(TriedPoint {
        load,
        meets_slo: meets && stab != Some(Stability::Overloaded),
        slo_values: q.slos.iter().map(|s| (s.name(), s.value(&merged))).collect(),
        ttft_s_mean: merged.ttft_s.mean,
        ttft_s_p99: merged.ttft_s.p99,
        itl_ms_mean: merged.itl_ms.mean,
        e2e_s_mean: merged.e2e_s.mean,
        per_user_tok_s_mean: merged.per_user_tok_s.mean,
        system_output_tok_s: mean_of(&|s| s.system_output_tok_s),
        requests_measured: merged.requests_measured,
        utilization: mean_of(&|s| s.busy_fraction),
        stability: stab,
    })
}

/// Per-request merge of several seeds' runs (warm-up and cool-down applied per run).
fn merge(runs: &[(SimOutput, Summary)], w: &Workload) -> Summary {
    let mut all = runs[0].0.clone();
    all.records.clear();
    for (out, _) in &runs[1..] {
        all.itl_gaps.merge(&out.itl_gaps);
    }
    // KV offload: the runs' tallies added, their host hits renumbered with the records.
    let mut offload = all.offload.take().map(|_| crate::sim::OffloadStats::default());
    let mut next_id = 0u32;
    for (out, _) in runs {
        let last = out.requests_sent.saturating_sub(w.spec.cooldown_requests);
        let host: std::collections::HashMap<u32, u32> =
            out.offload.iter().flat_map(|o| o.host_hits.iter().copied()).collect();
        if let (Some(sum), Some(o)) = (&mut offload, &out.offload) {
            sum.add(&crate::sim::OffloadStats { host_hits: Vec::new(), ..o.clone() });
        }
        for r in out.records.iter().filter(|r| (r.id as u64) >= w.spec.warmup_requests && (r.id as u64) < last) {
            let mut r = *r;
            if let (Some(sum), Some(&h)) = (&mut offload, host.get(&r.id)) {
                sum.host_hits.push((next_id, h));
            }
            r.id = next_id;
            next_id += 1;
            all.records.push(r);
        }
    }
    all.requests_sent = next_id as u64;
    all.offload = offload;
    summarize(&all, 0, 0, 0.0, &RequestSlo::default())
}

/// The largest load meeting the SLO: double until it fails, then split the bracket in four per round.
/// `tick` is called once per evaluated load (for a progress bar).
pub fn search(p: &Profile, q: &Question, tick: &(dyn Fn() + Sync)) -> Result<(f64, Verdict, Vec<TriedPoint>)> {
    search_with(p, q, tick, true)
}

/// [`search`], with or without the scan below the bracket (an estimate that is checked afterwards,
/// as the fleet search's single replica, does without).
pub(crate) fn search_with(
    p: &Profile,
    q: &Question,
    tick: &(dyn Fn() + Sync),
    scan_below: bool,
) -> Result<(f64, Verdict, Vec<TriedPoint>)> {
    // An open loop without a request count or a duration runs long enough for a steady state, as
    // fleet sizing does: 1,000 requests near saturation end before the engine's batch has filled
    // (2,048 in / 256 out on an H200: 15.6 requests/s pass with 1,000, 14.6 hold in a steady state).
    let steady;
    let q = if q.axis == LoadAxis::Rate && q.template.requests.is_none() && q.template.duration_s.is_none() {
        let mut r = q.clone();
        r.template.requests = Some(steady::steady_state_requests(p, &q.template)?);
        steady = r;
        &steady
    } else {
        q
    };
    let integer = q.axis.is_integer();
    let mut tried: Vec<TriedPoint> = Vec::new();
    let eval = |loads: &[f64]| -> Result<Vec<TriedPoint>> {
        loads
            .par_iter()
            .map(|&l| {
                let r = evaluate(p, q, l);
                tick();
                r
            })
            .collect()
    };
    let start = if integer { 1.0 } else { (q.max_load / 1024.0).max(1e-3) };
    let first = eval(&[start])?;
    tried.extend(first.clone());
    if !first[0].meets_slo && integer {
        tried.sort_by(|a, b| a.load.total_cmp(&b.load));
        return Ok((0.0, Verdict::NoLoadMeetsSlo, tried));
    }
    let (mut lo, mut hi) = if first[0].meets_slo { (start, f64::NAN) } else { (0.0, start) };
    // Bracket by doubling, two candidates per round.
    while hi.is_nan() {
        let cands: Vec<f64> = [lo * 2.0, lo * 4.0].into_iter().map(|x| x.min(q.max_load)).collect();
        let mut cands = cands;
        cands.dedup();
        let res = eval(&cands)?;
        tried.extend(res.clone());
        for r in &res {
            if r.meets_slo {
                lo = lo.max(r.load);
            } else if hi.is_nan() || r.load < hi {
                hi = r.load;
            }
        }
        if hi.is_nan() && lo >= q.max_load {
            tried.sort_by(|a, b| a.load.total_cmp(&b.load));
            return Ok((q.max_load, Verdict::AtSearchLimit, tried));
        }
    }
    // A failure below a success (the metric is not monotone, or noise): the bracket is the lowest
    // failure and the largest success below it, not the highest success.
    hi = tried.iter().filter(|t| !t.meets_slo).map(|t| t.load).fold(hi, f64::min);
    lo = tried.iter().filter(|t| t.meets_slo && t.load < hi).map(|t| t.load).fold(0.0, f64::max);
    let refine = |mut lo: f64, mut hi: f64, tried: &mut Vec<TriedPoint>| -> Result<(f64, f64)> {
        // Split [lo, hi] in four per round until the bracket is one integer (or the rate tolerance),
        // or until no load lies strictly between its ends (two adjacent floats: a tolerance finer
        // than f64 resolves would otherwise loop forever).
        loop {
            let done = if integer { hi - lo <= 1.0 } else { (hi - lo) <= q.rate_rel_tol * hi.max(1e-9) };
            if done {
                return Ok((lo, hi));
            }
            let mut cands: Vec<f64> = (1..4).map(|k| lo + (hi - lo) * k as f64 / 4.0).collect();
            if integer {
                cands.iter_mut().for_each(|c| *c = c.round());
            }
            cands.retain(|c| *c > lo && *c < hi);
            cands.dedup();
            if cands.is_empty() {
                return Ok((lo, hi));
            }
            let res = eval(&cands)?;
            tried.extend(res.clone());
            // The new lo is the largest passing candidate below the smallest failing one.
            let first_fail = res.iter().filter(|r| !r.meets_slo).map(|r| r.load).fold(hi, f64::min);
            lo = res.iter().filter(|r| r.meets_slo && r.load < first_fail).map(|r| r.load).fold(lo, f64::max);
            hi = first_fail;
        }
    };
    (lo, _) = refine(lo, hi, &mut tried)?;
    // Scan below the bracket on a geometric grid (4 points per doubling): a metric that is not
    // monotone in the load (a closed loop can phase-lock with the engine's steps) may fail between
    // loads the bisection passed. The capacity is the largest load below the lowest failure, so
    // every load up to it meets the SLO; the bracket is refined again when the scan finds one.
    let mut grid = Vec::new();
    let mut x = start;
    while scan_below && x < lo {
        let g = if integer { x.round() } else { x };
        if g > 0.0 && g < lo && !tried.iter().any(|t| t.load == g) && grid.last() != Some(&g) {
            grid.push(g);
        }
        x *= 2f64.powf(0.25);
    }
    tried.extend(eval(&grid)?);
    let lowest_fail = tried.iter().filter(|t| !t.meets_slo).map(|t| t.load).fold(f64::INFINITY, f64::min);
    if lowest_fail < lo {
        let below = tried.iter().filter(|t| t.meets_slo && t.load < lowest_fail).map(|t| t.load).fold(0.0, f64::max);
        (lo, _) = refine(below, lowest_fail, &mut tried)?;
    }
    tried.sort_by(|a, b| a.load.total_cmp(&b.load));
    if lo <= 0.0 {
        return Ok((0.0, Verdict::NoLoadMeetsSlo, tried));
    }
    Ok((lo, Verdict::Found, tried))
}

/// Loads that meet the SLO above a load that does not: where the metric is not monotone in the load
/// (the capacity stops below the lowest failure).
pub fn non_monotone_loads(tried: &[TriedPoint]) -> Vec<f64> {
    let lowest_fail = tried.iter().filter(|t| !t.meets_slo).map(|t| t.load).fold(f64::INFINITY, f64::min);
    tried.iter().filter(|t| t.meets_slo && t.load > lowest_fail).map(|t| t.load).collect()
}

/// The profile moved one sigma towards slower (`sign` = -1) or faster (+1) service.
///
/// With the fit's covariance: one sigma of the predicted time of a reference request along the
/// coefficients' joint uncertainty (the delta method). g is the gradient of log(reference time) in
/// the coefficients (log space; the overlap, a share, linear), and delta = -sign x Cov g /
/// sqrt(g' Cov g) moves the reference time by one sigma, accounting for correlations. A fixed
/// "rates up, costs down" direction could make the slow profile faster on decode when, say, the
/// bandwidth and the per-sequence cost are strongly correlated. Without a covariance (profiles moved
/// to another deployment carry only marginal sigmas): every coefficient one marginal sigma in the
/// slow or fast direction.
pub fn perturbed(p: &Profile, sign: f64) -> Profile {
    let mut q = p.clone();
    if let Some(cov) = p.file.covariance.as_ref().filter(|c| c.matrix.len() == c.names.len() && !c.names.is_empty()) {
        let u = reference_time_gradient(p, &cov.names);
        let cu: Vec<f64> = cov.matrix.iter().map(|row| row.iter().zip(&u).map(|(a, b)| a * b).sum()).collect();
        let var: f64 = cu.iter().zip(&u).map(|(a, b)| a * b).sum();
        if var > 0.0 && var.is_finite() {
            let c = &mut q.coefficients;
            for (name, d) in cov.names.iter().zip(&cu) {
                let delta = (-sign * d / var.sqrt()).clamp(-2.0, 2.0);
                if let Some(v) = c.named_mut(name) {
                    // The overlap is a share, linear in the covariance; the rest are logs.
                    *v = if name == "mem_compute_overlap" { (*v + delta).clamp(0.0, 1.0) } else { *v * delta.exp() };
                }
            }
            c.expert_spread = c.expert_spread.min(1.0);
            c.bandwidth_eff_bytes_s = c.bandwidth_eff_bytes_s.min(p.gpu.hbm_bandwidth_bytes_s());
            q.file.coefficients = *c;
            return q;
        }
    }
    let Some(sg) = p.file.sigmas else {
        return q;
    };
    let c = &mut q.coefficients;
    let up = |v: f64, s: f64| v * (1.0 + s.min(0.9) * sign);
    let down = |v: f64, s: f64| v * (1.0 - s.min(0.9) * sign).max(0.05);
    c.bandwidth_eff_bytes_s = up(c.bandwidth_eff_bytes_s, sg.bandwidth_eff_bytes_s).min(p.gpu.hbm_bandwidth_bytes_s());
    c.matmul_flops_eff_s = up(c.matmul_flops_eff_s, sg.matmul_flops_eff_s);
    c.attention_flops_eff_s = up(c.attention_flops_eff_s, sg.attention_flops_eff_s);
    c.step_overhead_s = down(c.step_overhead_s, sg.step_overhead_s);
    c.per_seq_overhead_s = down(c.per_seq_overhead_s, sg.per_seq_overhead_s);
    c.request_overhead_s = down(c.request_overhead_s, sg.request_overhead_s);
    c.frontend_serial_s = down(c.frontend_serial_s, sg.frontend_serial_s);
    q.file.coefficients = *c;
    q
}

/// The reference request of the band: a 2,048-token prefill chunk beside 8 decodes, then 256 decode
/// steps of 16 sequences at 2,000 tokens of context, plus the request's fixed costs.
fn reference_time_s(p: &Profile) -> f64 {
    use crate::sim::{BatchShape, StepModel};
    let m = StepModel::new(p);
    let mut prefill = BatchShape::default();
    prefill.add_chunk(0, 2048);
    let mut decode = BatchShape::default();
    for _ in 0..16 {
        decode.add_chunk(2000, 1);
    }
    for _ in 0..8 {
        prefill.add_chunk(2000, 1);
    }
    let c = &p.coefficients;
    c.request_overhead_s + c.frontend_serial_s + m.step_s(&prefill) + 256.0 * m.step_s(&decode)
}

/// d log(reference time) / d log(coefficient) for each named coefficient (d / d overlap for the
/// overlap), by central differences of 1%.
fn reference_time_gradient(p: &Profile, names: &[String]) -> Vec<f64> {
    let at = |name: &str, h: f64| {
        let mut q = p.clone();
        if let Some(v) = q.coefficients.named_mut(name) {
            *v = if name == "mem_compute_overlap" { (*v + h).clamp(0.0, 1.0) } else { *v * h.exp() };
        }
        q.file.coefficients = q.coefficients;
        reference_time_s(&q).ln()
    };
    names.iter().map(|n| (at(n, 0.01) - at(n, -0.01)) / 0.02).collect()
}

/// Capacity with its band: the nominal profile and the profiles one sigma slower and faster.
pub fn capacity(p: &Profile, q: &Question, tick: &(dyn Fn() + Sync)) -> Result<Capacity> {
    let variants = [perturbed(p, -1.0), p.clone(), perturbed(p, 1.0)];
    let res: Vec<Result<(f64, Verdict, Vec<TriedPoint>)>> = variants.par_iter().map(|v| search(v, q, tick)).collect();
    let mut res: Vec<(f64, Verdict, Vec<TriedPoint>)> = res.into_iter().collect::<Result<_>>()?;
    let (hi_cap, _, _) = res.pop().expect("three");
    let (cap, verdict, points) = res.pop().expect("three");
    let (lo_cap, _, _) = res.pop().expect("three");
    let stability = points.iter().find(|t| t.load == cap).and_then(|t| t.stability);
    Ok(Capacity {
        capacity: cap,
        band: (lo_cap.min(cap), hi_cap.max(cap)),
        verdict,
        stability,
        non_monotone_loads: non_monotone_loads(&points),
        points,
        profile: p.name().to_string(),
        retargeted_from: p.retargeted_from.clone(),
    })
}

pub use crate::sim::Routing;
pub use fleet::{simulate_fleet, size_fleet, FleetAnswer, FleetCandidate, FleetQuestion};
