//! A measured point as an experiment to replay (DESIGN.md section 3): the load as the report ran it, the
//! metric as the report defines it. Used by the calibrator (simulation in the loop) and by validation.
//!
//! What the reports do not state is an explicit unknown ([`ExperimentUnknowns`]): how many requests a
//! closed-loop test held, and how tests of unknown load were driven (1 round = all N sent at once, a
//! burst; more rounds = a closed loop that drifts apart).

use crate::data::{Aggregation, LoadKind, Point, ReportMeta};
use crate::measured::{RateProcess, Run, RunLoad, RUN_METRICS};
use crate::metrics::StatKind;
use crate::metrics::{summarize, RequestSlo, Stats, Summary};
use crate::profile::Profile;
use crate::sim::{simulate, SimOptions};
use crate::workload::{Arrivals, LengthDist, Process, RateSchedule, RequestClass, TraceRecord, Workload, WorkloadSpec};
use serde::{Deserialize, Serialize};

/// Metrics a simulation of one experiment predicts directly.
pub const REPLAYABLE_METRICS: &[&str] = &[
    "ttft_s",
    "itl_ms",
    "per_user_tok_s",
    "e2e_ms",
    "queue_wait_s",
    "system_tok_s",
    "system_tok_per_hour",
    "scaling_eff_pct",
];

/// Unknowns of the experiments, stated and fitted within bounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExperimentUnknowns {
    /// Requests per client in closed-loop tests (the reports do not say how many requests a test held).
    pub rounds_closed: f64,
    /// Requests per client in tests whose load the report does not describe (1 = a burst).
    pub rounds_unknown: f64,
}

impl Default for ExperimentUnknowns {
    fn default() -> Self {
        ExperimentUnknowns { rounds_closed: 3.0, rounds_unknown: 2.0 }
    }
}

impl ExperimentUnknowns {
    pub const ROUNDS_MIN: f64 = 1.0;
    pub const ROUNDS_MAX: f64 = 8.0;
}

/// Whether the simulator predicts the point: one experiment, a peak or range over the report's
/// scenarios at one concurrency, a max safe queue depth, or a statistic of a benchmark run.
pub fn is_replayable(p: &Point, metas: &[ReportMeta]) -> bool {
    if p.run.is_some() {
        return RUN_METRICS.contains(&p.metric.as_str());
    }
    if p.metric == "capacity_requests" {
        return p.input_tokens.is_some() && use_case_slo(p, metas).is_some();
    }
    if p.metric == "max_safe_queue_depth" {
        return p.input_tokens.is_some() && queue_threshold(p, metas).is_some();
    }
    if p.concurrency.is_none() || !REPLAYABLE_METRICS.contains(&p.metric.as_str()) {
        return false;
    }
    if p.scenario == "all" {
        return !matches!(p.aggregation, Aggregation::Value) && !scenarios_of(p, metas).is_empty();
    }
    p.is_experiment()
}

fn meta_of<'a>(p: &Point, metas: &'a [ReportMeta]) -> Option<&'a ReportMeta> {
    metas.iter().find(|m| m.report == p.report)
}

/// The concrete scenarios a summary point ranges over, as points of their own.
fn scenarios_of(p: &Point, metas: &[ReportMeta]) -> Vec<Point> {
    meta_of(p, metas).map_or(Vec::new(), |m| {
        m.scenario
            .iter()
            .map(|s| {
                let mut q = p.clone();
                q.scenario = s.name.clone();
                q.input_tokens = Some(s.input_tokens);
                q.output_tokens = Some(s.output_tokens);
                q.aggregation = Aggregation::Value;
                q
            })
            .collect()
    })
}

fn queue_threshold(p: &Point, metas: &[ReportMeta]) -> Option<f64> {
    meta_of(p, metas)?.threshold.iter().find(|t| t.use_case == "max_safe_queue_depth").and_then(|t| t.ttft_s_max)
}

/// The workload of a point's experiment: a benchmark run's load as the tool ran it, or a report's
/// load with the stated unknowns.
pub fn workload_for(p: &Point, u: &ExperimentUnknowns) -> Option<Workload> {
    if let Some(run) = &p.run {
        return run_workload(run).ok();
    }
    experiment_workload(p.input_tokens? as u32, p.output_tokens? as u32, p.load, p.concurrency?, u)
}

/// A run's lengths: fixed where every request had the same, else drawn from the recorded ones (input
/// and output independently), else from the percentiles the file states, else the file's means.
fn run_lengths(run: &Run) -> (LengthDist, LengthDist) {
    if let (Some(((i0, i1), (o0, o1))), true) = (run.uniform_lengths, run.per_request.is_empty()) {
        let u =
            |lo: u32, hi: u32| if lo == hi { LengthDist::fixed(hi) } else { LengthDist::Uniform { min: lo, max: hi } };
        return (u(i0.max(1), i1.max(1)), u(o0.max(1), o1.max(1)));
    }
    // Listed requests, else the stated percentiles on an even grid of quantiles, else the mean.
    let dist = |listed: Vec<u32>, percentiles: &[(f64, f64)], mean: f64| -> LengthDist {
        let xs = if listed.is_empty() { crate::measured::lengths::quantile_grid(percentiles) } else { listed };
        match xs.first() {
            Some(&first) if xs.iter().any(|&x| x != first) => LengthDist::Empirical { values: xs, weights: vec![] },
            Some(&first) => LengthDist::fixed(first.max(1)),
            None => LengthDist::fixed(mean.round().max(1.0) as u32),
        }
    };
    let pct = &run.length_percentiles;
    (
        dist(run.per_request.iter().map(|r| r.input_tokens.max(1)).collect(), &pct.input, run.input_tokens_mean),
        dist(run.per_request.iter().map(|r| r.output_tokens.max(1)).collect(), &pct.output, run.output_tokens_mean),
    )
}

/// The replay of a benchmark run (DESIGN.md section 6): a closed loop of the tool's concurrency with
/// the run's completed requests; a burst of them for an unlimited rate with no cap; an open loop at
/// the tool's rate with its process; the recorded send times and lengths where an open-loop run lists
/// them. Failed requests are not replayed (the run reports how many there were).
pub fn run_workload(run: &Run) -> crate::error::Result<Workload> {
    let n = run.completed;
    if let RunLoad::Rate { .. } = run.load {
        let recorded: Option<Vec<TraceRecord>> = run
            .per_request
            .iter()
            .map(|r| {
                r.start_s.map(|t| TraceRecord {
                    arrival_s: t.max(0.0),
                    input_tokens: r.input_tokens,
                    output_tokens: r.output_tokens.max(1),
                    hash_ids: vec![],
                    session: None,
                })
            })
            .collect();
        if let Some(mut records) = recorded.filter(|r| !r.is_empty()) {
            records.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
            return Workload::trace(records, 0, 0);
        }
    }
    let (input, output) = run_lengths(run);
    let arrivals = match run.load {
        RunLoad::Concurrency { clients } => {
            Arrivals::ClosedLoop { clients, think_time_s: 0.0, think_exponential: false }
        }
        RunLoad::Burst => Arrivals::Burst { n: n.min(u32::MAX as u64) as u32 },
        RunLoad::Rate { rate_per_s, process, .. } => match process {
            RateProcess::Gamma { burstiness } => Arrivals::OpenLoop {
                process: if burstiness == 1.0 { Process::Poisson } else { Process::Gamma },
                rate: RateSchedule::constant(rate_per_s),
                burstiness,
            },
            RateProcess::Constant => Arrivals::OpenLoop {
                process: Process::Constant,
                rate: RateSchedule::constant(rate_per_s),
                burstiness: 1.0,
            },
        },
    };
    WorkloadSpec {
        arrivals,
        classes: vec![RequestClass { weight: 1.0, name: String::new(), input, output, system_prompt_tokens: 0 }],
        requests: Some(n),
        duration_s: None,
        warmup_requests: 0,
        cooldown_requests: 0,
        warmup_s: 0.0,
        conversation: None,
    }
    .with_timing_noise()
    .validate()
}

/// N clients of fixed lengths, each sending `rounds` requests for the load kind (1 round = a burst).
fn experiment_workload(input: u32, output: u32, load: LoadKind, n: u32, u: &ExperimentUnknowns) -> Option<Workload> {
    let rounds = match load {
        LoadKind::Burst => 1.0,
        LoadKind::ClosedLoop => u.rounds_closed,
        LoadKind::Unknown => u.rounds_unknown,
    };
    let n = n as u64;
    let requests = ((n as f64 * rounds).round() as u64).max(n);
    let arrivals = if requests == n {
        Arrivals::Burst { n: n as u32 }
    } else {
        Arrivals::ClosedLoop { clients: n as u32, think_time_s: 0.0, think_exponential: false }
    };
    Workload::fixed(arrivals, input, output, Some(requests)).ok()
}

/// How a report computes system throughput.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemThroughput {
    /// The sum of the concurrent streams' speeds: N x mean per-user speed (report 000's table:
    /// 8 x 140.2 = 1,121 and 32 x 81.7 = 2,614).
    SumOfStreams,
    /// Output tokens over the wall time of the run (prefill time included).
    WallClock,
}

fn system_def(p: &Point, metas: &[ReportMeta]) -> SystemThroughput {
    match meta_of(p, metas).map(|m| m.system_throughput.as_str()) {
        Some("wall_clock") => SystemThroughput::WallClock,
        _ => SystemThroughput::SumOfStreams,
    }
}

/// The value of `metric`'s statistic `stat` in a summary, in the metric's unit, as the report or the
/// tool defines it (`itl_ms`: pooled gaps; `tpot_ms`: per-request mean gaps; `output_tok_s`: all
/// output tokens over the run's wall time).
pub fn metric_of(s: &Summary, metric: &str, stat: StatKind, concurrency: u32, system: SystemThroughput) -> Option<f64> {
    let v = match metric {
        "system_tok_s" => match system {
            SystemThroughput::SumOfStreams => s.per_user_tok_s.mean * concurrency as f64,
            SystemThroughput::WallClock => s.system_output_tok_s,
        },
        "output_tok_s" => s.system_output_tok_s,
        "request_per_s" => s.request_throughput_per_s,
        "ttft_s" => s.ttft_s.get(stat),
        "itl_ms" => s.itl_ms.get(stat),
        "tpot_ms" => s.tpot_ms.get(stat),
        "per_user_tok_s" => s.per_user_tok_s.get(stat),
        "e2e_ms" => s.e2e_s.get(stat) * 1e3,
        "queue_wait_s" => s.queue_wait_s.get(stat),
        _ => return None,
    };
    (s.requests_measured > 0 && v.is_finite()).then_some(v)
}

fn simulate_summary(profile: &Profile, p: &Point, u: &ExperimentUnknowns) -> Option<Summary> {
    Some(summary_of(profile, &workload_for(p, u)?))
}

/// How an experiment is replayed: seed 1, a horizon of 1e6 s against runaway runs, no series to speak of.
const REPLAY: SimOptions =
    SimOptions { horizon_s: 1e6, series_points: 2, step_by_step: false, until_first_tokens: false };

fn summary_of(profile: &Profile, w: &Workload) -> Summary {
    let out = simulate(profile, w, 1, REPLAY);
    summarize(&out, 0, 0, 0.0, &RequestSlo::default())
}

/// A disaggregated deployment's replay of a point's experiment (sim/disagg.rs), summarized; its
/// points' values come from it by [`metric_of_point`].
pub fn disaggregated_summary(d: &crate::profile::disagg::Disaggregated, p: &Point) -> Option<Summary> {
    let w = workload_for(p, &ExperimentUnknowns::default())?;
    let out = crate::sim::simulate_disaggregated(d, &w, 1, REPLAY);
    Some(summarize(&out, 0, 0, 0.0, &RequestSlo::default()))
}

/// A point's metric from its experiment's summary.
pub fn metric_of_point(s: &Summary, p: &Point) -> Option<f64> {
    metric_of(s, &p.metric, p.stat, p.concurrency.unwrap_or(1), system_def(p, &[]))
}

/// (input, output, load, concurrency, run identity: 0 for a report's point).
type WorkloadKey = (u64, u64, u8, u32, usize);

/// Summaries of the experiments already simulated for one (profile, unknowns): points that share an
/// experiment (several metrics of one run, summaries across scenarios) simulate it once.
#[derive(Default)]
pub struct ReplayCache {
    map: std::sync::Mutex<std::collections::HashMap<WorkloadKey, Option<Summary>>>,
}

impl ReplayCache {
    fn summary(&self, profile: &Profile, p: &Point, u: &ExperimentUnknowns) -> Option<Summary> {
        let run_id = p.run.as_ref().map_or(0, |r| std::sync::Arc::as_ptr(r) as usize);
        let key = (p.input_tokens?, p.output_tokens?, p.load as u8, p.concurrency.unwrap_or(0), run_id);
        if let Some(s) = self.map.lock().expect("cache lock").get(&key) {
            return s.clone();
        }
        let s = simulate_summary(profile, p, u);
        self.map.lock().expect("cache lock").insert(key, s.clone());
        s
    }
}

/// Simulate a point's experiment(s) and return the predicted value of its metric.
pub fn predict(profile: &Profile, p: &Point, u: &ExperimentUnknowns, metas: &[ReportMeta]) -> Option<f64> {
    predict_cached(profile, p, u, metas, &ReplayCache::default())
}

/// [`predict`] sharing simulations with other points through `cache` (same profile and unknowns).
pub fn predict_cached(
    profile: &Profile,
    p: &Point,
    u: &ExperimentUnknowns,
    metas: &[ReportMeta],
    cache: &ReplayCache,
) -> Option<f64> {
    let (input, output) = (p.input_tokens.map(|x| x as u32), p.output_tokens.map(|x| x as u32));
    if p.metric == "max_safe_queue_depth" {
        let t = queue_threshold(p, metas)?;
        return Some(max_safe_queue_depth(profile, input?, output?, t, 1024) as f64);
    }
    if p.metric == "capacity_requests" {
        let slo = use_case_slo(p, metas)?;
        return Some(max_concurrency_within(profile, input?, output?, &slo, u, 512) as f64);
    }
    if p.scenario == "all" {
        let vals: Vec<f64> =
            scenarios_of(p, metas).iter().filter_map(|q| predict_cached(profile, q, u, metas, cache)).collect();
        if vals.is_empty() {
            return None;
        }
        return Some(match p.aggregation {
            Aggregation::RangeLow => vals.iter().copied().fold(f64::INFINITY, f64::min),
            _ => vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        });
    }
    let n = p.concurrency.unwrap_or(1);
    let system = system_def(p, metas);
    match p.metric.as_str() {
        "scaling_eff_pct" => {
            // system(N) / (system(1) x N) with system = sum of stream speeds: per-user(N) / per-user(1).
            let at_n = cache.summary(profile, p, u)?.per_user_tok_s.mean;
            let mut one = p.clone();
            one.concurrency = Some(1);
            let at_1 = cache.summary(profile, &one, u)?.per_user_tok_s.mean;
            (at_1 > 0.0).then(|| at_n / at_1 * 100.0)
        }
        "system_tok_per_hour" => {
            metric_of(&cache.summary(profile, p, u)?, "system_tok_s", StatKind::Mean, n, system).map(|v| v * 3600.0)
        }
        m => metric_of(&cache.summary(profile, p, u)?, m, p.stat, n, system),
    }
}

/// Mean TTFT of a burst of `n` requests. Simulated until the last first token only (the decodes
/// after it cannot move a first token), the same mean as `summary_of`'s (a sorted sum of the same
/// TTFTs) while every request finishes within the horizon.
pub fn burst_mean_ttft_s(profile: &Profile, n: u32, input: u32, output: u32) -> f64 {
    let w =
        experiment_workload(input, output, LoadKind::Burst, n, &ExperimentUnknowns::default()).expect("valid burst");
    let mut out = simulate(profile, &w, 1, SimOptions { until_first_tokens: true, ..REPLAY });
    Stats::of(&mut out.ttfts_s).mean
}

/// The largest n in 1..=limit for which `ok` holds, assuming it holds up to some n and fails above:
/// double until it fails, then bisect. 0 if `ok(1)` fails; `limit` if `ok(limit)` holds.
pub fn largest_integer_meeting(ok: impl Fn(u32) -> bool, limit: u32) -> u32 {
    if !ok(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1u32, 2u32);
    while hi <= limit && ok(hi) {
        lo = hi;
        hi *= 2;
    }
    if hi > limit {
        if ok(limit) {
            return limit;
        }
        hi = limit;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The largest burst whose mean TTFT stays within `ttft_s_max` (seed 002's "max safe queue depth"),
/// by bracketing and bisection over integers; mean TTFT grows with the burst. 0 if even one request
/// misses it; `limit` if the limit itself meets it.
pub fn max_safe_queue_depth(profile: &Profile, input: u32, output: u32, ttft_s_max: f64, limit: u32) -> u32 {
    let ok = |n: u32| burst_mean_ttft_s(profile, n, input, output) <= ttft_s_max;
    largest_integer_meeting(ok, limit)
}

/// Use-case limits on means, as the reports state them (TTFT at most, per-user speed at least, E2E at
/// most).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct MeanSlo {
    pub ttft_s_max: Option<f64>,
    pub per_user_tok_s_min: Option<f64>,
    pub e2e_s_max: Option<f64>,
}

impl MeanSlo {
    pub fn met_by(&self, s: &Summary) -> bool {
        self.ttft_s_max.is_none_or(|m| s.ttft_s.mean <= m)
            && self.per_user_tok_s_min.is_none_or(|m| s.per_user_tok_s.mean >= m)
            && self.e2e_s_max.is_none_or(|m| s.e2e_s.mean <= m)
    }
}

/// The largest closed-loop concurrency whose means meet `slo`, replayed like the report's capacity
/// tables (requests per client from `u.rounds_unknown`); bracket and bisect over integers up to
/// `limit`. 0 when one client already misses.
pub fn max_concurrency_within(
    profile: &Profile,
    input: u32,
    output: u32,
    slo: &MeanSlo,
    u: &ExperimentUnknowns,
    limit: u32,
) -> u32 {
    let ok = |n: u32| {
        experiment_workload(input, output, LoadKind::Unknown, n, u)
            .is_some_and(|w| slo.met_by(&summary_of(profile, &w)))
    };
    largest_integer_meeting(ok, limit)
}

/// The use-case limits a report states for a capacity point's scenario.
pub fn use_case_slo(p: &Point, metas: &[ReportMeta]) -> Option<MeanSlo> {
    let t = meta_of(p, metas)?.threshold.iter().find(|t| t.use_case == p.scenario)?;
    Some(MeanSlo { ttft_s_max: t.ttft_s_max, per_user_tok_s_min: t.per_user_tok_s_min, e2e_s_max: t.e2e_s_max })
}
