//! A plan over a rate curve (issue 26): a workload file's rate schedule (a daily curve written as
//! segments) or a trace, simulated whole on a candidate fleet.
//!
//! "The SLO holds over the day" is judged per reporting bucket (an hour by default): every bucket's
//! requests (by send time) must meet every limit, and no request may be lost. A day-wide percentile
//! would let a fleet too small for the peak hour pass when that hour is under 5% of the day's
//! requests; a bucket is long enough for a steady state and short enough to see the peak.
//!
//! The curve is simulated by the autoscaled fleet (crate::sim::simulate_autoscaled), which keeps no
//! records (each finished request counted into its bucket's TTFT and TPOT histograms, within 0.4%),
//! so a day of millions of requests runs in flat memory. A fixed fleet of K replicas is that
//! simulation with a policy pinned at K ([`fixed_fleet_policy`]): the same least-outstanding router,
//! no scaling. The SLOs a day can judge are therefore TTFT and TPOT statistics ([`check_day_slos`]).
//!
//! [`size_fixed_day`] finds the fewest replicas whose day meets the SLO, starting from the fleet that
//! holds the curve's peak in a steady state (capacity's fleet search at [`peak_rate`]) and checking
//! that count and the one below by simulating the whole curve.

use super::{energy_kwh, GpuPrice};
use crate::autoscale::{AutoscalePolicy, ScaleMetric};
use crate::capacity::{Slo, SloMetric};
use crate::error::{Error, Result};
use crate::metrics::{RequestSlo, StatKind};
use crate::profile::Profile;
use crate::sim::{simulate_autoscaled, AutoscaleBucket, AutoscaleOutput, GapHistogram, SimOptions};
use crate::workload::{Arrivals, Workload};
use serde::Serialize;

/// Refuse SLOs a day's run cannot judge: only TTFT and TPOT statistics are kept per bucket.
pub fn check_day_slos(slos: &[Slo]) -> Result<()> {
    if slos.is_empty() {
        return Err(Error::flag("--slo", "give at least one SLO (e.g. --slo ttft_p95_s=2)"));
    }
    for s in slos {
        if !matches!(s.metric, SloMetric::TtftS | SloMetric::TpotMs) {
            return Err(Error::flag(
                "--slo",
                format!(
                    "`{}`: a plan over a rate curve judges each bucket's TTFT and TPOT (ttft_<stat>_s, tpot_<stat>_ms); the day's run keeps no other per-request figure",
                    s.name()
                ),
            ));
        }
    }
    Ok(())
}

/// A histogram's statistic in seconds (NaN when empty).
fn stat_s(h: &GapHistogram, stat: StatKind) -> f64 {
    match stat {
        StatKind::Mean => h.mean_s(),
        StatKind::P50 => h.percentile_s(50.0),
        StatKind::P90 => h.percentile_s(90.0),
        StatKind::P95 => h.percentile_s(95.0),
        StatKind::P99 => h.percentile_s(99.0),
    }
}

/// The value of `slo`'s metric in a bucket (its unit: s for TTFT, ms for TPOT).
pub fn bucket_value(b: &AutoscaleBucket, slo: &Slo) -> f64 {
    match slo.metric {
        SloMetric::TtftS => stat_s(&b.ttft, slo.stat),
        SloMetric::TpotMs => stat_s(&b.tpot, slo.stat) * 1e3,
        _ => f64::NAN,
    }
}

/// One bucket judged against the SLO.
#[derive(Debug, Clone, Serialize)]
pub struct BucketVerdict {
    pub start_s: f64,
    pub requests_sent: u64,
    pub requests_completed: u64,
    /// The SLO metrics, by name (null where the bucket completed nothing).
    pub slo_values: Vec<(String, f64)>,
    pub slo_met: bool,
    pub replicas_max: u32,
    pub gpu_hours: f64,
    /// Busy replica-seconds over held replica-seconds.
    pub utilization: f64,
    pub energy_kwh: f64,
}

/// A whole curve simulated on one fleet (fixed or autoscaled) and judged.
#[derive(Debug, Clone, Serialize)]
pub struct DayRun {
    pub gpus_per_replica: u32,
    pub buckets: Vec<BucketVerdict>,
    /// Every bucket met the SLO and no request was lost.
    pub slo_met: bool,
    /// Buckets that missed the SLO.
    pub buckets_failed: usize,
    pub requests_sent: u64,
    pub requests_lost: u64,
    /// Simulated span: from 0 to the last request's end.
    pub span_s: f64,
    pub gpu_hours: f64,
    pub cost: f64,
    /// The mean over the span.
    pub cost_per_hour: f64,
    /// Cost over the output tokens of the requests completed (NaN when none).
    pub cost_per_million_output_tokens: f64,
    pub energy_kwh: f64,
    /// Mean power over the span.
    pub power_kw_mean: f64,
    pub replicas_max: u32,
    pub scale_ups: u64,
    pub scale_downs: u64,
    pub output_tokens: u64,
}

impl DayRun {
    /// Judge an autoscaled (or fixed) run's output against `slos`, priced and powered by `price`.
    pub fn judge(out: &AutoscaleOutput, gpus_per_replica: u32, slos: &[Slo], price: &GpuPrice) -> DayRun {
        let g = gpus_per_replica as f64;
        let buckets: Vec<BucketVerdict> = out
            .buckets
            .iter()
            .map(|b| {
                let values: Vec<(String, f64)> = slos.iter().map(|s| (s.name(), bucket_value(b, s))).collect();
                let within = slos.iter().zip(&values).all(|(s, (_, v))| v.is_finite() && *v <= s.limit);
                // A bucket that sent nothing has nothing to miss; one whose requests all failed misses.
                let met = b.requests_rejected == 0 && (b.requests_sent == 0 || (b.requests_completed > 0 && within));
                BucketVerdict {
                    start_s: b.start_s,
                    requests_sent: b.requests_sent,
                    requests_completed: b.requests_completed,
                    slo_values: values,
                    slo_met: met,
                    replicas_max: b.replicas_max,
                    gpu_hours: b.replica_seconds * g / 3600.0,
                    utilization: if b.replica_seconds > 0.0 { b.busy_replica_seconds / b.replica_seconds } else { 0.0 },
                    energy_kwh: energy_kwh(price, gpus_per_replica, b.replica_seconds, b.busy_replica_seconds),
                }
            })
            .collect();
        let lost = out.requests_rejected + out.requests_unfinished;
        let buckets_failed = buckets.iter().filter(|b| !b.slo_met).count();
        let gpu_hours = out.replica_seconds * g / 3600.0;
        let cost = gpu_hours * price.price_per_hour;
        let energy = buckets.iter().map(|b| b.energy_kwh).sum::<f64>();
        let hours = out.end_s / 3600.0;
        DayRun {
            gpus_per_replica,
            slo_met: buckets_failed == 0 && lost == 0 && out.requests_completed > 0,
            buckets_failed,
            buckets,
            requests_sent: out.requests_sent,
            requests_lost: lost,
            span_s: out.end_s,
            gpu_hours,
            cost,
            cost_per_hour: if hours > 0.0 { cost / hours } else { f64::NAN },
            cost_per_million_output_tokens: if out.output_tokens > 0 {
                cost / (out.output_tokens as f64 / 1e6)
            } else {
                f64::NAN
            },
            energy_kwh: energy,
            power_kw_mean: if hours > 0.0 { energy / hours } else { f64::NAN },
            replicas_max: out.replicas_max,
            scale_ups: out.scale_ups,
            scale_downs: out.scale_downs,
            output_tokens: out.output_tokens,
        }
    }
}

/// A policy that holds `replicas` all along: min = max = initial, evaluated once per bucket (so a
/// replica's busy time is cut at the bucket's edges).
pub fn fixed_fleet_policy(replicas: u32, bucket_s: f64) -> AutoscalePolicy {
    AutoscalePolicy {
        min_replicas: replicas,
        max_replicas: replicas,
        initial_replicas: replicas,
        metric: ScaleMetric::Outstanding,
        target: 1.0,
        interval_s: bucket_s,
        tolerance: 0.0,
        scale_down_stabilization_s: 0.0,
        scale_up_max_replicas: 0,
        scale_up_max_percent: 0.0,
        provisioning_s: 0.0,
        storage_gb_s: 1.0,
        engine_start_s: 0.0,
        cuda_graph_capture_s: 0.0,
        price_per_gpu_hour: None,
        bucket_s,
        router_refresh_s: 0.05,
    }
}

/// Simulate the whole curve `w` on `p` under `policy` and judge it.
pub fn simulate_day(
    p: &Profile,
    w: &Workload,
    seed: u64,
    policy: &AutoscalePolicy,
    slos: &[Slo],
    price: &GpuPrice,
) -> DayRun {
    let out = simulate_autoscaled(p, w, seed, SimOptions::default(), policy, &RequestSlo::default());
    DayRun::judge(&out, p.tensor_parallel, slos, price)
}

/// The curve's peak rate (requests/s): an open loop's highest segment within its sending period, or
/// a trace's busiest `window_s` (arrivals in it over its length). Errors for closed loops and bursts,
/// whose load is not a rate.
pub fn peak_rate(w: &Workload, window_s: f64) -> Result<f64> {
    match &w.spec.arrivals {
        Arrivals::OpenLoop { rate, .. } => {
            let by_count = w.spec.requests.map_or(f64::INFINITY, |n| rate.expected_time_of(n as f64));
            let until = by_count.min(w.spec.duration_s.unwrap_or(f64::INFINITY));
            Ok(rate.peak_rate(until))
        }
        Arrivals::Trace { records } => {
            let t: Vec<f64> = records.iter().map(|r| r.arrival_s).collect();
            let span = t.last().copied().unwrap_or(0.0) - t.first().copied().unwrap_or(0.0);
            let window = window_s.min(span.max(1e-9));
            // Two pointers over the sorted arrivals: the most arrivals within any window.
            let (mut most, mut lo) = (0usize, 0usize);
            for hi in 0..t.len() {
                while t[hi] - t[lo] >= window {
                    lo += 1;
                }
                most = most.max(hi - lo + 1);
            }
            Ok(most as f64 / window)
        }
        _ => Err(Error::flag(
            "--workload",
            "a plan over a curve needs an open loop with a rate schedule or a trace; a closed loop's or a burst's load is not a rate",
        )),
    }
}

/// The fewest replicas of a fixed fleet whose whole-curve run meets the SLO, and every count tried.
#[derive(Debug, Clone)]
pub struct DayFleet {
    /// None when no count up to the limit meets it.
    pub replicas: Option<u32>,
    /// Every replica count simulated, by count.
    pub tried: Vec<(u32, DayRun)>,
}

impl DayFleet {
    pub fn run(&self, replicas: u32) -> Option<&DayRun> {
        self.tried.iter().find(|(k, _)| *k == replicas).map(|(_, r)| r)
    }
}

/// Search the fewest replicas (1..=`max`) of a fixed fleet of `p` whose run of the whole curve `w`
/// meets `slos` in every bucket of `bucket_s`, starting at `start` (the peak's steady-state answer):
/// `start` and `start - 1` first (most often the answer and its failing neighbour), then galloping
/// up from a failure or down from a pass in doubling steps, then bisecting. The answer's neighbour
/// with one replica fewer is always among those tried (or the answer is 1). Each count is one
/// deterministic simulation; those of a round run in parallel, so the answer does not depend on the
/// number of threads. `tick` is called per simulation.
#[allow(clippy::too_many_arguments)]
pub fn size_fixed_day(
    p: &Profile,
    w: &Workload,
    seed: u64,
    slos: &[Slo],
    bucket_s: f64,
    price: &GpuPrice,
    start: u32,
    max: u32,
    tick: &(dyn Fn() + Sync),
) -> DayFleet {
    use rayon::prelude::*;
    let max = max.max(1);
    let mut tried: Vec<(u32, DayRun)> = Vec::new();
    let eval = |ks: &[u32], tried: &mut Vec<(u32, DayRun)>| {
        let mut ks: Vec<u32> =
            ks.iter().copied().filter(|&k| (1..=max).contains(&k) && !tried.iter().any(|(t, _)| *t == k)).collect();
        ks.sort_unstable();
        ks.dedup();
        let runs: Vec<(u32, DayRun)> = ks
            .par_iter()
            .map(|&k| {
                let r = simulate_day(p, w, seed, &fixed_fleet_policy(k, bucket_s), slos, price);
                tick();
                (k, r)
            })
            .collect();
        tried.extend(runs);
    };
    // (largest failing count below the smallest passing one, smallest passing count or max + 1)
    let bracket = |tried: &[(u32, DayRun)]| {
        let pass = tried.iter().filter(|(_, r)| r.slo_met).map(|(k, _)| *k).min().unwrap_or(max + 1);
        let fail = tried.iter().filter(|(k, r)| !r.slo_met && *k < pass).map(|(k, _)| *k).max().unwrap_or(0);
        (fail, pass)
    };
    let start = start.clamp(1, max);
    eval(&[start, start.saturating_sub(1)], &mut tried);
    let mut step = 1u32;
    loop {
        let (fail, pass) = bracket(&tried);
        if pass > max {
            let top = tried.iter().map(|(k, _)| *k).max().unwrap_or(0);
            if top >= max {
                break;
            }
            eval(&[top.saturating_add(step).min(max)], &mut tried);
        } else if fail == 0 && pass > 1 {
            eval(&[pass.saturating_sub(step).max(1)], &mut tried);
        } else {
            break;
        }
        step = step.saturating_mul(2);
    }
    loop {
        let (fail, pass) = bracket(&tried);
        if pass > max || pass - fail <= 1 {
            break;
        }
        eval(&[fail + (pass - fail) / 2], &mut tried);
    }
    tried.sort_by_key(|(k, _)| *k);
    let (_, pass) = bracket(&tried);
    DayFleet { replicas: (pass <= max).then_some(pass), tried }
}
