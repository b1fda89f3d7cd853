//! Mixed-GPU plans (issue 26): pools a buyer already runs (say four H100 replicas) plus the fewest
//! replicas of a new deployment that together serve a rate within the SLO, simulated jointly behind
//! the mixed fleet's weighted least-outstanding router (crate::sim::simulate_mixed).
//!
//! A candidate of N new replicas runs `requests_per_replica x (existing + N)` requests (unless the
//! template fixes a count or a duration), as capacity's fleet search does, so each replica sees the
//! same traffic whatever the fleet's size, and it must meet every SLO in a stable steady state
//! (capacity::steady's trend of the waiting queue over the last quarter of the sending period).
//! The search tries no new replica first, then 1, 2, 4, ... until a count passes, then bisects:
//! the answer's neighbour with one replica fewer is always among those tried.

use crate::capacity::steady::Trend;
use crate::capacity::{Question, Stability};
use crate::error::{Error, Result};
use crate::metrics::{summarize, RequestSlo, Summary};
use crate::profile::Profile;
use crate::sim::{simulate_mixed, SimOptions, SimOutput};
use crate::workload::{LoadAxis, LoadTemplate, MAX_REQUESTS};
use serde::Serialize;

/// One mixed fleet simulated at the rate.
#[derive(Debug, Clone, Serialize)]
pub struct MixedCandidate {
    /// Replicas of the new deployment.
    pub new_replicas: u32,
    pub meets_slo: bool,
    pub slo_values: Vec<(String, f64)>,
    pub stability: Stability,
    /// Each pool's share of the requests (existing pools first, then the new one where it has
    /// replicas).
    pub requests_share: Vec<f64>,
    /// Each pool's stepping share of the run (its replicas' mean busy time over the run's span).
    pub busy_share: Vec<f64>,
    pub run_requests: u64,
}

/// The fewest new replicas meeting the SLO (None when none up to the limit does), and every count
/// tried, by count.
#[derive(Debug, Clone, Serialize)]
pub struct MixedAnswer {
    pub new_replicas: Option<u32>,
    pub candidates: Vec<MixedCandidate>,
    pub requests_per_replica: Option<u64>,
}

impl MixedAnswer {
    pub fn candidate(&self, new_replicas: u32) -> Option<&MixedCandidate> {
        self.candidates.iter().find(|c| c.new_replicas == new_replicas)
    }
}

/// Simulate the pools `existing` plus `new_replicas` of `new` at `rate`, the run `requests` long
/// (None: the template's own length), and judge it against the question's SLOs.
pub fn simulate_mixed_candidate(
    existing: &[(&Profile, u32)],
    new: &Profile,
    new_replicas: u32,
    q: &Question,
    rate: f64,
    requests: Option<u64>,
) -> Result<(MixedCandidate, Summary)> {
    let mut t: LoadTemplate = q.template.clone();
    if t.requests.is_none() && t.duration_s.is_none() {
        t.requests = requests.map(|n| n.min(MAX_REQUESTS));
    }
    let w = t.at(LoadAxis::Rate, rate)?;
    let mut pools: Vec<(&Profile, u32)> = existing.to_vec();
    if new_replicas > 0 {
        pools.push((new, new_replicas));
    }
    let replicas: u32 = pools.iter().map(|(_, n)| n).sum();
    if replicas == 0 {
        return Err(Error::flag("--existing", "a mixed fleet needs at least one replica"));
    }
    crate::memory::check(
        &crate::sim::memory_estimate(new, &w, replicas),
        1,
        &format!("a mixed fleet of {replicas} replicas"),
    )?;
    let outs: Vec<SimOutput> = simulate_mixed(&pools, &w, q.seed, SimOptions::default());
    let trend = Trend::of(&outs);
    let span_ns = outs.iter().map(|o| o.end.0).max().unwrap_or(0).max(1) as f64;
    let busy_share: Vec<f64> = outs.iter().map(|o| o.busy_ns as f64 / span_ns).collect();
    let sent: Vec<u64> = outs.iter().map(|o| o.requests_sent).collect();
    let total_sent = sent.iter().sum::<u64>().max(1) as f64;
    let mut all = outs[0].clone();
    for o in &outs[1..] {
        all.absorb(o.clone());
    }
    all.records.sort_by_key(|r| r.id);
    all.requests_sent = all.records.len() as u64 + all.requests_rejected + all.requests_unfinished;
    let s = summarize(&all, w.spec.warmup_requests, w.spec.cooldown_requests, 0.0, &RequestSlo::default());
    if s.requests_measured == 0 {
        return Err(Error::Infeasible("the mixed fleet completed no request".into()));
    }
    let stability = trend.verdict();
    let c = MixedCandidate {
        new_replicas,
        meets_slo: q.slos.iter().all(|x| x.met(&s)) && stability == Stability::Stable,
        slo_values: q.slos.iter().map(|x| (x.name(), x.value(&s))).collect(),
        stability,
        requests_share: sent.iter().map(|&n| n as f64 / total_sent).collect(),
        busy_share,
        run_requests: s.requests_sent,
    };
    Ok((c, s))
}

/// The counts of the new type [`size_mixed`] may try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewCounts {
    /// At most this many replicas.
    pub max: u32,
    /// Try `max` first and stop there if it fails (one simulation instead of a gallop's ~log2(max)),
    /// for a caller that expects no count to pass (the count before failed). The search assumes, as
    /// the gallop does, that more replicas never break an SLO that fewer meet.
    pub top_first: bool,
}

impl NewCounts {
    /// Up to `max`, galloping from 0.
    pub fn up_to(max: u32) -> NewCounts {
        NewCounts { max, top_first: false }
    }
}

/// The fewest replicas of `new` (0..=`new_counts.max`) that, beside the `existing` pools, serve `rate`
/// within the question's SLOs. `requests_per_replica`: None for capacity's steady-state default on
/// the new deployment. `tick` is called per simulation. `new_counts` bounds the counts tried.
pub fn size_mixed(
    existing: &[(&Profile, u32)],
    new: &Profile,
    q: &Question,
    rate: f64,
    requests_per_replica: Option<u64>,
    new_counts: NewCounts,
    tick: &(dyn Fn() + Sync),
) -> Result<MixedAnswer> {
    let NewCounts { max: max_new, top_first } = new_counts;
    let fixed_length = q.template.requests.is_some() || q.template.duration_s.is_some();
    let per_replica = match requests_per_replica {
        Some(n) => n,
        None => crate::capacity::steady::steady_state_requests(new, &q.template)?,
    };
    let existing_n: u32 = existing.iter().map(|(_, n)| n).sum();
    let mut tried: Vec<MixedCandidate> = Vec::new();
    let eval = |n: u32, tried: &mut Vec<MixedCandidate>| -> Result<bool> {
        if let Some(c) = tried.iter().find(|c| c.new_replicas == n) {
            return Ok(c.meets_slo);
        }
        let requests = per_replica.saturating_mul((existing_n + n) as u64);
        let (c, _) = simulate_mixed_candidate(existing, new, n, q, rate, Some(requests))?;
        tick();
        let met = c.meets_slo;
        tried.push(c);
        Ok(met)
    };
    // Gallop: 0, 1, 2, 4, ... (capped at max_new) until one passes.
    let (mut fail, mut pass) = (None::<u32>, None::<u32>);
    let mut n = 0u32;
    if top_first && !eval(max_new, &mut tried)? {
        fail = Some(max_new);
    }
    while fail != Some(max_new) {
        if eval(n, &mut tried)? {
            pass = Some(n);
            break;
        }
        fail = Some(n);
        if n >= max_new {
            break;
        }
        n = if n == 0 { 1 } else { n.saturating_mul(2) }.min(max_new);
    }
    if let (Some(mut lo), Some(mut hi)) = (fail, pass) {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if eval(mid, &mut tried)? {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        pass = Some(hi);
    }
    tried.sort_by_key(|c| c.new_replicas);
    Ok(MixedAnswer {
        new_replicas: pass,
        candidates: tried,
        requests_per_replica: (!fixed_length).then_some(per_replica),
    })
}
