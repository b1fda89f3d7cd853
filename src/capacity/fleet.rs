//! Fleet sizing: the fewest replicas that serve a total open-loop rate within the SLOs, each candidate
//! fleet simulated jointly behind its router.
//!
//! Run length scales with the fleet: a candidate of K replicas runs `requests_per_replica x K`
//! requests (unless the question fixes a request count or a duration), so each replica sees the same
//! amount of traffic at 100 requests/s as at 10,000 and the verdict of one replica count does not
//! depend on the total rate. Stability is the steady-state trend of [`super::steady`], and a fleet
//! must be stable, not merely backlogged: a waiting queue that grows by 0.3 to 1% of the arrivals is
//! an engine 0.3 to 1% short of the rate, whose TTFT a four times longer run shows three times
//! higher (4,000 requests/s at 2,048 in / 256 out: 272 replicas pass backlogged at 3,800 requests
//! per replica, TTFT p95 0.6 s; at 15,200 per replica 274 give 5.6 s).
//!
//! The search starts from the single-replica capacity (a rate search on one engine with the same
//! per-replica run, to 1%), which puts the answer near rate / capacity, then brackets and splits the
//! bracket in four per round. The candidates of a round run in parallel; each candidate's simulation is one
//! deterministic run, so the answer does not depend on the number of threads.

use super::steady::Trend;
use super::{search_with, Question, Stability};
use crate::error::{Error, Result};
use crate::metrics::{summarize, RequestSlo, Summary};
use crate::profile::Profile;
use crate::sim::{Routing, SimOptions, SimOutput};
use crate::workload::{LoadAxis, LoadTemplate, Process, MAX_REQUESTS};
use rayon::prelude::*;
use serde::Serialize;

/// What a fleet must serve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FleetQuestion {
    /// Total requests per second offered to the fleet.
    pub rate: f64,
    pub routing: Routing,
    /// Search no further than this many replicas.
    pub max_replicas: u32,
    /// Requests per replica of a candidate's run when the template fixes neither a request count nor
    /// a duration; None: [`super::steady::steady_state_requests`].
    pub requests_per_replica: Option<u64>,
}

/// One simulated fleet.
#[derive(Debug, Clone)]
pub struct FleetRun {
    pub summary: Summary,
    pub trend: Trend,
}

/// One replica count the search tried.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FleetCandidate {
    pub replicas: u32,
    pub meets_slo: bool,
    /// The SLO metrics, by name.
    pub slo_values: Vec<(String, f64)>,
    pub stability: Stability,
    /// Growth of the waiting queue over the last quarter of the sending period, as a share of its
    /// arrivals.
    pub backlog_growth_share: f64,
    /// Requests the candidate's run sent.
    pub run_requests: u64,
    /// Simulated seconds over which they were sent.
    pub run_s: f64,
}

/// The answer: the fewest replicas meeting the SLOs (None when none up to the limit does).
#[derive(Debug, Clone, Serialize)]
pub struct FleetAnswer {
    pub replicas: Option<u32>,
    /// The statistics of the answer's run.
    #[serde(skip)]
    pub summary: Option<Summary>,
    /// Every candidate, by replica count.
    pub candidates: Vec<FleetCandidate>,
    /// The largest rate one replica serves within the SLOs (the search's starting point).
    pub single_replica_rate: f64,
    /// Requests per replica of each run, when the run length scales with the fleet.
    pub requests_per_replica: Option<u64>,
}

/// The template of a K-replica run: `requests_per_replica x K` requests unless the template fixes a
/// request count or a duration.
fn run_template(t: &LoadTemplate, per_replica: u64, replicas: u32) -> LoadTemplate {
    let mut t = t.clone();
    if t.requests.is_none() && t.duration_s.is_none() {
        t.requests = Some((per_replica.saturating_mul(replicas as u64)).min(MAX_REQUESTS));
    }
    t
}

/// A fleet of K replicas at a total open-loop rate, simulated jointly: the router places each request
/// as it is sent, seeing the replicas' state at that moment. Latency statistics over all requests;
/// throughput summed over replicas; the trend over the whole fleet.
pub fn simulate_fleet(
    p: &Profile,
    t: &LoadTemplate,
    rate: f64,
    replicas: u32,
    routing: Routing,
    seed: u64,
) -> Result<FleetRun> {
    let w = t.at(LoadAxis::Rate, rate)?;
    crate::memory::check(&crate::sim::memory_estimate(p, &w, replicas), 1, &format!("a fleet of {replicas} replicas"))?;
    let mut outs: Vec<SimOutput> = crate::sim::simulate_fleet(p, &w, seed, SimOptions::default(), replicas, routing);
    let trend = Trend::of(&outs);
    // Throughput and busy time per replica; then the records move into one run (no copy: a
    // 1,000-replica candidate holds millions of them).
    let (mut tok_s, mut busy, mut served) = (0.0, 0.0, 0usize);
    for o in outs.iter().filter(|o| !o.records.is_empty()) {
        let s = summarize(o, 0, 0, 0.0, &RequestSlo::default());
        tok_s += s.system_output_tok_s;
        busy += s.busy_fraction;
        served += 1;
    }
    if served == 0 {
        return Err(Error::Infeasible("the fleet completed no request".into()));
    }
    let total: usize = outs.iter().map(|o| o.records.len()).sum();
    let mut records = Vec::with_capacity(total);
    let (mut rejected, mut unfinished, mut preemptions, mut steps, mut kv_max) = (0, 0, 0, 0, 0f64);
    let evictions: u64 = outs.iter().map(|o| o.prefix_evictions).sum();
    // KV offload: every replica's tally (request ids are global send order).
    let offload =
        outs.iter().filter_map(|o| o.offload.as_ref()).fold(None, |acc: Option<crate::sim::OffloadStats>, o| {
            let mut a = acc.unwrap_or_default();
            a.add(o);
            Some(a)
        });
    for o in &mut outs[..] {
        // Each replica's records freed as they move (append keeps the source's capacity).
        records.append(&mut std::mem::take(&mut o.records));
        rejected += o.requests_rejected;
        unfinished += o.requests_unfinished;
        preemptions += o.preemptions;
        steps += o.steps;
        kv_max = kv_max.max(o.kv_util_max);
    }
    let mut all = outs.swap_remove(0);
    for o in &outs {
        all.itl_gaps.merge(&o.itl_gaps);
    }
    drop(outs);
    // Request ids are global send order, so warm-up and cool-down apply across the fleet.
    all.records = records;
    all.requests_sent = w.planned_requests().unwrap_or(all.records.len() as u64);
    all.requests_rejected = rejected;
    all.requests_unfinished = unfinished;
    all.preemptions = preemptions;
    all.steps = steps;
    all.kv_util_max = kv_max;
    all.prefix_evictions = evictions;
    all.offload = offload;
    let mut m = summarize(&all, w.spec.warmup_requests, w.spec.cooldown_requests, 0.0, &RequestSlo::default());
    m.system_output_tok_s = tok_s;
    m.busy_fraction = busy / replicas as f64;
    Ok(FleetRun { summary: m, trend })
}

/// The fewest replicas that serve `fq.rate` within the question's SLOs in a stable steady state. `tick` is called once per simulation (for a progress bar).
pub fn size_fleet(p: &Profile, q: &Question, fq: &FleetQuestion, tick: &(dyn Fn() + Sync)) -> Result<FleetAnswer> {
    if !(fq.rate.is_finite() && fq.rate > 0.0) {
        return Err(Error::flag(
            "--target-rate",
            format!("must be a positive rate, got {}", crate::error::fmt_num(fq.rate)),
        ));
    }
    if fq.max_replicas == 0 {
        return Err(Error::flag("--max-replicas", "must be at least 1"));
    }
    let per_replica = match fq.requests_per_replica {
        Some(0) => return Err(Error::flag("--requests-per-replica", "must be at least 1")),
        Some(n) => n,
        None => super::steady::steady_state_requests(p, &q.template)?,
    };
    // One replica's capacity with the same per-replica run: the answer is near rate / capacity.
    let mut one = q.clone();
    one.axis = LoadAxis::Rate;
    one.template = run_template(&q.template, per_replica, 1);
    one.max_load = fq.rate;
    one.seeds = 4;
    one.rate_rel_tol = 0.01;
    let (mut single, _, _) = search_with(p, &one, tick, false)?;
    let replicas_for =
        |r: f64| if r > 0.0 { (fq.rate / r).ceil().clamp(1.0, fq.max_replicas as f64) as u32 } else { fq.max_replicas };
    if fq.routing == Routing::RoundRobin && q.template.process == Process::Poisson && single > 0.0 {
        // Round-robin deals every K-th request of a Poisson stream to a replica: its arrivals are
        // Erlang-K, a gamma process of shape K (burstiness K). One replica with those arrivals is
        // one replica of the fleet.
        let k = replicas_for(single);
        if k > 1 {
            one.template.process = Process::Gamma;
            one.template.burstiness = k as f64;
            single = search_with(p, &one, tick, false)?.0;
        }
    }
    let estimate = replicas_for(single);
    let mut tried: Vec<(FleetCandidate, Summary)> = Vec::new();
    let eval = |ks: &[u32], tried: &mut Vec<(FleetCandidate, Summary)>| -> Result<()> {
        let mut ks: Vec<u32> = ks.iter().copied().filter(|k| !tried.iter().any(|(c, _)| c.replicas == *k)).collect();
        ks.sort_unstable();
        ks.dedup();
        let runs: Vec<Result<(FleetCandidate, Summary)>> = ks
            .par_iter()
            .map(|&k| {
                let t = run_template(&q.template, per_replica, k);
                let run = simulate_fleet(p, &t, fq.rate, k, fq.routing, q.seed);
                tick();
                let run = run?;
                let stability = run.trend.verdict();
                let s = run.summary;
                let c = FleetCandidate {
                    replicas: k,
                    meets_slo: q.slos.iter().all(|x| x.met(&s)) && stability == Stability::Stable,
                    slo_values: q.slos.iter().map(|x| (x.name(), x.value(&s))).collect(),
                    stability,
                    backlog_growth_share: run.trend.share(),
                    run_requests: s.requests_sent,
                    run_s: s.last_send_s,
                };
                Ok((c, s))
            })
            .collect();
        for r in runs {
            tried.push(r?);
        }
        Ok(())
    };
    let passes = |tried: &[(FleetCandidate, Summary)]| -> (u32, u32) {
        // (largest failing count below the smallest passing one, smallest passing count)
        let pass = tried.iter().filter(|(c, _)| c.meets_slo).map(|(c, _)| c.replicas).min().unwrap_or(u32::MAX);
        let fail = tried.iter().filter(|(c, _)| !c.meets_slo && c.replicas < pass).map(|(c, _)| c.replicas).max();
        (fail.unwrap_or(0), pass)
    };
    // Round-robin candidates of open loops simulate their replicas in parallel, so one candidate per
    // round uses the machine and bisection wastes nothing; other fleets (least-outstanding and
    // prefix-aware routing, conversations) are one joint simulation each, so three candidates run
    // side by side and the bracket is split in four.
    let width: u32 = if fq.routing == Routing::RoundRobin && q.template.conversation.is_none() { 1 } else { 3 };
    eval(&[estimate], &mut tried)?;
    // Bracket: the estimate's neighbour first (the estimate is most often the answer or one off),
    // then gallop up from the largest failure until one passes, or down from the smallest pass until
    // one fails, in steps of 1% of the estimate that double.
    let mut offset = 1u32;
    let mut step = (estimate / 100).max(1);
    loop {
        let (fail, pass) = passes(&tried);
        let ks: Vec<u32> = if pass == u32::MAX {
            let top = tried.iter().map(|(c, _)| c.replicas).max().unwrap_or(1);
            if top >= fq.max_replicas {
                break;
            }
            (0..width).map(|i| top.saturating_add(offset + step * i).min(fq.max_replicas)).collect()
        } else if fail == 0 && pass > 1 {
            (0..width).map(|i| pass.saturating_sub(offset + step * i).max(1)).collect()
        } else {
            break;
        };
        eval(&ks, &mut tried)?;
        offset = step;
        step *= 2;
    }
    // Split the bracket (fail, pass) in width + 1 per round until it is one replica wide.
    loop {
        let (fail, pass) = passes(&tried);
        if pass == u32::MAX || pass - fail <= 1 {
            break;
        }
        let parts = width as u64 + 1;
        let mut ks: Vec<u32> = (1..parts)
            .map(|i| fail + ((pass - fail) as u64 * i / parts) as u32)
            .filter(|&k| k > fail && k < pass)
            .collect();
        ks.dedup();
        if ks.is_empty() {
            ks.push(fail + 1);
        }
        eval(&ks, &mut tried)?;
    }
    tried.sort_by_key(|(c, _)| c.replicas);
    let (_, pass) = passes(&tried);
    let answer = (pass != u32::MAX).then_some(pass);
    let summary = answer.and_then(|k| tried.iter().find(|(c, _)| c.replicas == k).map(|(_, s)| s.clone()));
    Ok(FleetAnswer {
        replicas: answer,
        summary,
        candidates: tried.into_iter().map(|(c, _)| c).collect(),
        single_replica_rate: single,
        requests_per_replica: (q.template.requests.is_none() && q.template.duration_s.is_none()).then_some(per_replica),
    })
}
