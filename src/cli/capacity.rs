//! `capsim capacity`: the largest load within SLOs, side by side across GPUs, and fleet sizing.

use super::shard::ScaleOutArgs;
use super::{ProfileArgs, WorkloadArgs};
use capsim::capacity::{self, preset, Capacity, Question, Routing, Slo, TriedPoint};
use capsim::error::{Error, Result};
use capsim::profile::Profile;
use capsim::report::{csv, num, table};
use capsim::workload::{LengthDist, LoadAxis};
use clap::{Args, ValueEnum};
use serde_json::json;
use std::path::PathBuf;

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum LoadArg {
    Burst,
    Concurrency,
    Rate,
    /// A multiple of a trace's or a workload file's own rate.
    Scale,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum RoutingArg {
    RoundRobin,
    LeastOutstanding,
    /// A conversation's turns (a trace's shared first block) to the replica holding its prefix.
    PrefixAware,
}

/// `--max-replicas` when not given: the fleet search's bound.
pub const DEFAULT_MAX_REPLICAS: u32 = 512;

#[derive(Args, Debug, Clone)]
pub struct CapacityArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// What to search over: a burst size (max safe queue depth), closed-loop clients, an open-loop rate,
    /// or the scale of a trace's or workload file's own rate [default: the file's own kind, else
    /// concurrency]
    #[arg(long, value_enum, help_heading = "Question")]
    pub load: Option<LoadArg>,
    /// A limit, NAME=VALUE: ttft_<stat>_s, itl_<stat>_ms, tpot_<stat>_ms, e2e_<stat>_s, queue_wait_<stat>_s
    /// (at most) or per_user_tok_s_<stat> (at least); stat = mean|p50|p90|p95|p99. Repeatable.
    #[arg(long, help_heading = "Question")]
    pub slo: Vec<String>,
    /// A use case of the reports: code-completion, short-chat, general-chat, long-documents, coding-agent
    /// (sets lengths and SLOs).
    #[arg(long, help_heading = "Question")]
    pub preset: Option<String>,
    /// Search no further than this load (default: 4096 burst, 1024 clients, 1000 requests/s).
    #[arg(long, help_heading = "Question")]
    pub max_load: Option<f64>,
    /// Seeds per load (merged per request); default 1 for bursts and closed loops, 3 for rates.
    #[arg(long, help_heading = "Question")]
    pub seeds: Option<u32>,
    /// Seed of the simulations: the same seed gives the same bytes, at any thread count.
    #[arg(long, default_value_t = 0, help_heading = "Question")]
    pub seed: u64,
    /// Relative resolution of a rate search, in [1e-12, 0.5) [default: 0.02].
    #[arg(long, help_heading = "Question")]
    pub rate_tol: Option<f64>,
    /// Answer the same question on each of these GPUs (comma-separated catalog names), side by side.
    #[arg(long, value_delimiter = ',', help_heading = "Deployment")]
    pub gpus: Option<Vec<String>>,
    /// Fleet sizing: the total request rate the fleet must serve within the SLOs (open loop).
    #[arg(long, help_heading = "Fleet")]
    pub target_rate: Option<f64>,
    /// Fleet sizing: how the router spreads requests over replicas [default: round-robin] (with
    /// --disaggregated: --pd-routing).
    #[arg(long, value_enum, help_heading = "Fleet")]
    pub routing: Option<RoutingArg>,
    /// Disaggregated prefill/decode: the cheapest prefill:decode worker split (fewest GPUs) serving
    /// --target-rate within the SLOs, each pool shaped by --prefill-*/--decode-* (workers searched).
    #[arg(long, help_heading = "Fleet")]
    pub disaggregated: bool,
    /// Fleet sizing: search no further than this many replicas (with --disaggregated: workers per pool).
    #[arg(long, default_value_t = DEFAULT_MAX_REPLICAS, help_heading = "Fleet")]
    pub max_replicas: u32,
    /// Fleet sizing: requests each replica receives in a candidate's run (the run grows with the fleet
    /// unless --requests or --duration fix it); default: eight running batches of the engine for the
    /// mean request, 1,000 to 20,000 (with --disaggregated: per worker of a split, default 200 per
    /// worker, 1,000 to 20,000 in all).
    #[arg(long, help_heading = "Fleet")]
    pub requests_per_replica: Option<u64>,
    /// Price of one GPU-hour (any currency), for cost per hour and per million output tokens.
    #[arg(long, help_heading = "Fleet")]
    pub gpu_price_per_hour: Option<f64>,
    /// Print JSON instead of a table.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Print CSV instead of a table.
    #[arg(long, conflicts_with = "json", help_heading = "Output")]
    pub csv: bool,
    /// Write an SVG of the first SLO metric against load, with the limit and the capacity found.
    #[arg(long, help_heading = "Output")]
    pub svg: Option<PathBuf>,
    #[command(flatten)]
    pub scale_out: ScaleOutArgs,
}

pub(super) fn question(a: &CapacityArgs) -> Result<Question> {
    if a.workload.trace_rate_scale.is_some() {
        return Err(Error::flag(
            "--trace-rate-scale",
            "capacity searches the scale of the trace itself (--load scale); drop --trace-rate-scale",
        ));
    }
    let src = a.workload.source()?;
    let mut template = src.template.clone();
    let mut slo_text = a.slo.clone();
    if let (Some(_), Some(origin)) = (&a.preset, &src.origin) {
        return Err(Error::flag(
            "--preset",
            format!("a preset sets the request lengths, which {origin} gives; use --slo"),
        ));
    }
    if let Some(name) = &a.preset {
        let p = preset(name)?;
        if a.workload.input_len.is_some() || a.workload.output_len.is_some() {
            return Err(Error::flag("--preset", "a preset sets the lengths: drop --input-len / --output-len"));
        }
        // In conversations the preset's context is where a session ends: the last of N turns sends
        // the preset's input tokens (N user messages and N-1 replies), as a chat grows to 32K.
        let input = match &template.conversation {
            Some(c) => {
                let n = c.turns.max().max(1);
                let history = (n - 1).saturating_mul(p.output_tokens);
                if history >= p.input_tokens {
                    return Err(Error::flag(
                        "--turns",
                        format!(
                            "{n} turns of {} output tokens fill the preset's {}-token context before the last turn",
                            p.output_tokens, p.input_tokens
                        ),
                    ));
                }
                (p.input_tokens - history) / n
            }
            None => p.input_tokens,
        };
        template.classes[0].input = LengthDist::fixed(input);
        template.classes[0].output = LengthDist::fixed(p.output_tokens);
        slo_text.extend(p.slos.iter().map(|(n, v)| format!("{n}={v}")));
    }
    let slos: Vec<Slo> = slo_text.iter().map(|s| Slo::parse(s)).collect::<Result<_>>()?;
    if slos.is_empty() {
        return Err(Error::flag("--slo", "give at least one SLO (e.g. --slo ttft_mean_s=3.0) or a --preset"));
    }
    let axis = match (a.load, a.target_rate, src.own_load) {
        (Some(LoadArg::Burst), _, _) => LoadAxis::Burst,
        (Some(LoadArg::Concurrency), _, _) => LoadAxis::Concurrency,
        (Some(LoadArg::Rate), _, _) | (None, Some(_), _) => LoadAxis::Rate,
        (Some(LoadArg::Scale), _, _) => LoadAxis::Scale,
        (None, None, Some((own, _))) => own,
        (None, None, None) => LoadAxis::Concurrency,
    };
    if a.target_rate.is_some() && axis != LoadAxis::Rate {
        return Err(Error::flag(
            "--load",
            "fleet sizing (--target-rate) searches replicas at an open-loop rate: drop --load or use --load rate",
        ));
    }
    src.check_axis(axis, if a.target_rate.is_some() { "--target-rate" } else { "--load" })?;
    let max_load = a.max_load.unwrap_or(match axis {
        LoadAxis::Burst => 4096.0,
        LoadAxis::Concurrency => 1024.0,
        LoadAxis::Rate => 1000.0,
        LoadAxis::Scale => 100.0,
    });
    let bound = match axis {
        LoadAxis::Rate => capsim::workload::MAX_RATE_PER_S,
        LoadAxis::Scale => 1e6,
        _ => capsim::workload::MAX_REQUESTS as f64,
    };
    if !(max_load.is_finite() && max_load >= 1.0 && max_load <= bound) {
        return Err(Error::flag(
            "--max-load",
            format!("must be in 1..={bound:e}, got {}", capsim::error::fmt_num(max_load)),
        ));
    }
    let rate_tol = a.rate_tol.unwrap_or(DEFAULT_RATE_TOL);
    if !(rate_tol.is_finite() && rate_tol > 0.0 && rate_tol < 0.5) {
        return Err(Error::flag(
            "--rate-tol",
            format!("must be in [{MIN_RATE_TOL:e}, 0.5), got {}", capsim::error::fmt_num(rate_tol)),
        ));
    }
    if rate_tol < MIN_RATE_TOL {
        return Err(Error::flag(
            "--rate-tol",
            format!(
                "{} is finer than the search resolves: a rate is a 64-bit float (about 16 significant digits), \
                 so the bracket stops shrinking near 1e-16 of the rate; give at least {MIN_RATE_TOL:e} (a \
                 simulation's run-to-run noise is far larger anyway)",
                capsim::error::fmt_num(rate_tol)
            ),
        ));
    }
    let seeds = a.seeds.unwrap_or(if axis == LoadAxis::Rate { 3 } else { 1 });
    if seeds == 0 || seeds > 64 {
        return Err(Error::flag("--seeds", "must be in 1..=64"));
    }
    Ok(Question { axis, template, slos, max_load, seeds, seed: a.seed, rate_rel_tol: rate_tol })
}

/// The profile on `gpu` at the tensor-parallel degree asked for (`--tp`, else the profile's own), the
/// same deployment `simulate` resolves: a model that does not fit is refused with the engine's memory
/// arithmetic, never moved to more GPUs behind the user's back. The workload's requests must fit
/// the model's context.
fn on_gpu(a: &CapacityArgs, catalog: &capsim::catalog::Catalog, gpu: Option<&str>, q: &Question) -> Result<Profile> {
    let mut pa = a.profile.clone();
    pa.gpu = gpu.map(str::to_string).or(pa.gpu);
    let p = pa.resolve(catalog)?;
    if !q.template.is_trace() {
        capsim::workload::check_context(&q.template.classes, p.arch.max_context, &p.arch.name)?;
    }
    Ok(p)
}

fn points_rows(points: &[TriedPoint]) -> (Vec<String>, Vec<Vec<String>>) {
    let mut headers: Vec<String> = vec!["load".into(), "meets_slo".into()];
    headers.extend(
        points.first().map(|p| p.slo_values.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>()).unwrap_or_default(),
    );
    headers.extend(
        ["ttft_s_mean", "itl_ms_mean", "per_user_tok_s_mean", "system_output_tok_s", "utilization", "stability"]
            .map(String::from),
    );
    let rows = points
        .iter()
        .map(|p| {
            let mut r = vec![capsim::data::format_value(p.load), p.meets_slo.to_string()];
            r.extend(p.slo_values.iter().map(|(_, v)| num(*v, 4)));
            r.extend([
                num(p.ttft_s_mean, 4),
                num(p.itl_ms_mean, 4),
                num(p.per_user_tok_s_mean, 4),
                num(p.system_output_tok_s, 4),
                format!("{:.2}", p.utilization),
                p.stability.map_or("-".into(), |s| format!("{s:?}").to_lowercase()),
            ]);
            r
        })
        .collect();
    (headers, rows)
}

/// `--rate-tol` when not given.
pub const DEFAULT_RATE_TOL: f64 = 0.02;

/// The finest `--rate-tol`: well above the 2.2e-16 relative spacing of 64-bit floats, so that the
/// bracket's quarter points stay distinct from its ends.
const MIN_RATE_TOL: f64 = 1e-12;

const SIDE_BY_SIDE_HEADERS: &[&str] =
    &["gpu", "tensor_parallel", "extrapolated", "capacity", "band_low", "band_high", "verdict"];

/// One row per GPU of a side-by-side answer (table and CSV alike).
fn side_by_side_rows(results: &[(Profile, Capacity)], q: &Question) -> Vec<Vec<String>> {
    results
        .iter()
        .map(|(p, c)| {
            vec![
                p.gpu.name.clone(),
                p.tensor_parallel.to_string(),
                p.retargeted_from.as_ref().map_or("no (calibrated)".into(), |f| format!("yes (from {f})")),
                capsim::data::format_value(resolved(q, c.capacity)),
                capsim::data::format_value(resolved(q, c.band.0)),
                capsim::data::format_value(resolved(q, c.band.1)),
                verdict_text(c, q),
            ]
        })
        .collect()
}

/// A load as precise as the search that found it: whole numbers for clients and bursts, and for rates
/// the significant digits the relative tolerance resolves (13.18359375 at 1% prints 13.2).
fn resolved(q: &Question, x: f64) -> f64 {
    if q.axis.is_integer() || x == 0.0 || !x.is_finite() {
        return x.round();
    }
    let digits = (-q.rate_rel_tol.log10()).ceil() as i32 + 1;
    let scale = 10f64.powi(digits - 1 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

fn verdict_text(c: &Capacity, q: &Question) -> String {
    let v = match c.verdict {
        capacity::Verdict::Found => "found".to_string(),
        capacity::Verdict::NoLoadMeetsSlo => "no load meets the SLO".to_string(),
        capacity::Verdict::AtSearchLimit => {
            format!("SLO still met at the search limit {}", q.max_load)
        }
    };
    let v = match c.stability {
        Some(s) => format!("{v}; {} at capacity", format!("{s:?}").to_lowercase()),
        None => v,
    };
    if c.non_monotone_loads.is_empty() {
        return v;
    }
    let loads: Vec<String> = c.non_monotone_loads.iter().map(|l| num(*l, 4)).collect();
    format!("{v}; not monotone: the SLO holds again at {}", loads.join(", "))
}

/// A capacity question ready to run: every input checked, one profile per GPU asked about.
pub struct Prepared {
    pub q: Question,
    pub profiles: Vec<Profile>,
    pub fleet: Option<capacity::FleetQuestion>,
    pub gpu_price_per_hour: Option<f64>,
}

/// One GPU's answer.
pub enum Outcome {
    Loads(Capacity),
    Fleet(Box<capacity::FleetAnswer>),
}

/// `--requests-per-replica` in its range (fleet sizing and the disaggregated split alike).
pub(super) fn check_requests_per_replica(a: &CapacityArgs, q: &Question) -> Result<()> {
    if let Some(n) = a.requests_per_replica.filter(|n| !(1..=1_000_000).contains(n)) {
        return Err(Error::flag("--requests-per-replica", format!("must be in 1..=1000000, got {n}")));
    }
    if a.requests_per_replica.is_some() && (q.template.requests.is_some() || q.template.duration_s.is_some()) {
        return Err(Error::flag(
            "--requests-per-replica",
            "sets the length of each candidate's run, which --requests or --duration (or the workload file) already fix: give one or the other",
        ));
    }
    Ok(())
}

/// A load search's bounds, which a search at a fixed --target-rate (a fleet, a disaggregated split)
/// has no use for: refused naming the flag with `why`, rather than ignored.
pub(super) fn refuse_load_search_flags(a: &CapacityArgs, why: &str) -> Result<()> {
    for (flag, given) in
        [("--max-load", a.max_load.is_some()), ("--rate-tol", a.rate_tol.is_some()), ("--seeds", a.seeds.is_some())]
    {
        if given {
            return Err(Error::flag(flag, why));
        }
    }
    Ok(())
}

/// `--gpu-price-per-hour` a non-negative number (fleet sizing and the disaggregated split alike).
pub(super) fn check_price(a: &CapacityArgs) -> Result<()> {
    match a.gpu_price_per_hour {
        Some(pr) if !(pr.is_finite() && pr >= 0.0) => {
            Err(Error::flag("--gpu-price-per-hour", "must be a non-negative number"))
        }
        _ => Ok(()),
    }
}

/// Output tokens per second a deployment serves at `rate` requests/s (sessions/s with
/// conversations, each of mean-turns requests) when it meets its SLOs in a steady state.
pub(super) fn served_output_tok_s(q: &Question, rate: f64) -> f64 {
    let turns = q.template.conversation.as_ref().map_or(1.0, |c| c.turns.mean());
    rate * turns * q.template.at(LoadAxis::Rate, rate).map_or(0.0, |w| w.mean_output_tokens())
}

/// Cost per hour of `gpus` GPUs at `price` per GPU-hour, and per million of `output_tok_s`
/// (the keys `capacity --json` reports them under; null without a price).
pub(super) fn cost_json(price: Option<f64>, gpus: u64, output_tok_s: f64) -> (Option<f64>, Option<f64>) {
    let cost_h = price.map(|pr| pr * gpus as f64);
    let tok_h = output_tok_s * 3600.0;
    (cost_h, cost_h.map(|c| if tok_h > 0.0 { c / (tok_h / 1e6) } else { f64::NAN }))
}

pub fn prepare(a: &CapacityArgs) -> Result<Prepared> {
    if a.disaggregated {
        // Batch and plan route a disaggregated question to its own search (super::disagg).
        return Err(Error::flag("--disaggregated", "sizes its pools with capacity --disaggregated's own search"));
    }
    if let Some(path) = &a.svg {
        super::check_output_file("--svg", path)?;
    }
    let catalog = a.profile.catalog()?;
    let q = question(a)?;
    let fleet = match a.target_rate {
        None => None,
        Some(rate) => {
            if !(rate.is_finite() && rate > 0.0 && rate <= capsim::workload::MAX_RATE_PER_S) {
                return Err(Error::flag(
                    "--target-rate",
                    format!("must be a positive rate up to 1e6, got {}", capsim::error::fmt_num(rate)),
                ));
            }
            if a.max_replicas == 0 || a.max_replicas > 100_000 {
                return Err(Error::flag("--max-replicas", format!("must be in 1..=100000, got {}", a.max_replicas)));
            }
            check_requests_per_replica(a, &q)?;
            let routing = match a.routing.unwrap_or(RoutingArg::RoundRobin) {
                RoutingArg::RoundRobin => Routing::RoundRobin,
                RoutingArg::LeastOutstanding => Routing::LeastOutstanding,
                RoutingArg::PrefixAware => Routing::PrefixAware,
            };
            Some(capacity::FleetQuestion {
                rate,
                routing,
                max_replicas: a.max_replicas,
                requests_per_replica: a.requests_per_replica,
            })
        }
    };
    if a.target_rate.is_none() && a.requests_per_replica.is_some() {
        return Err(Error::flag("--requests-per-replica", "applies to fleet sizing: give --target-rate"));
    }
    // Flags one mode takes and the other would ignore (the audit of 2026-11-28): a fleet's cost and
    // routing belong to fleet sizing; fleet sizing runs each candidate fleet at the target rate with
    // --seed, and its one-replica estimate its own bounds, so no load search's bounds apply to it.
    if a.target_rate.is_none() {
        for (flag, given) in [
            ("--routing", a.routing.is_some()),
            ("--gpu-price-per-hour", a.gpu_price_per_hour.is_some()),
            // A value other than the default is one given (an explicit 512 cannot be told apart).
            ("--max-replicas", a.max_replicas != DEFAULT_MAX_REPLICAS),
        ] {
            if given {
                return Err(Error::flag(flag, "applies to fleet sizing: give --target-rate"));
            }
        }
    } else {
        refuse_load_search_flags(
            a,
            "bounds a load search; fleet sizing (--target-rate) runs each candidate fleet at the target rate (seed: --seed)",
        )?;
    }
    check_price(a)?;
    let gpus: Vec<Option<String>> = match &a.gpus {
        Some(g) => g.iter().map(|x| Some(x.clone())).collect(),
        None => vec![None],
    };
    let profiles = gpus.iter().map(|g| on_gpu(a, &catalog, g.as_deref(), &q)).collect::<Result<Vec<_>>>()?;
    Ok(Prepared { q, profiles, fleet, gpu_price_per_hour: a.gpu_price_per_hour })
}

impl Prepared {
    /// The answer on GPU `i`.
    pub fn run_one(&self, i: usize, tick: &(dyn Fn() + Sync)) -> Result<Outcome> {
        let p = &self.profiles[i];
        match &self.fleet {
            Some(fq) => Ok(Outcome::Fleet(Box::new(capacity::size_fleet(p, &self.q, fq, tick)?))),
            None => Ok(Outcome::Loads(capacity::capacity(p, &self.q, tick)?)),
        }
    }
    pub fn answered(o: &Outcome) -> bool {
        match o {
            Outcome::Loads(c) => c.verdict != capacity::Verdict::NoLoadMeetsSlo,
            Outcome::Fleet(f) => f.replicas.is_some(),
        }
    }
    /// GPU `i`'s answer as JSON: the object `capacity --json` prints for one GPU, or its fleet row.
    pub fn json_one(&self, i: usize, o: &Outcome) -> serde_json::Value {
        let (p, q) = (&self.profiles[i], &self.q);
        match o {
            Outcome::Loads(c) => json!({
                "capacity": resolved(q, c.capacity), "band": {"low": resolved(q, c.band.0), "high": resolved(q, c.band.1)}, "verdict": c.verdict, "stability": c.stability,
                "non_monotone_loads": c.non_monotone_loads,
                "points": c.points, "load": q.axis.as_str(), "slos": q.slos.iter().map(|s| json!({"name": s.name(), "limit": s.limit})).collect::<Vec<_>>(),
                "profile": c.profile, "gpu": p.gpu.name, "tensor_parallel": p.tensor_parallel,
                "extrapolation": p.retargeted_from.is_some(), "retargeted_from": p.retargeted_from, "seeds": q.seeds, "seed": q.seed,
            }),
            Outcome::Fleet(ans) => self.fleet_row(i, ans),
        }
    }
    /// Everything `capacity --json` prints.
    pub fn json(&self, outcomes: &[Outcome]) -> serde_json::Value {
        let v: Vec<_> = outcomes.iter().enumerate().map(|(i, o)| self.json_one(i, o)).collect();
        if self.fleet.is_some() {
            json!({"fleet": v})
        } else if v.len() == 1 {
            v.into_iter().next().expect("one")
        } else {
            json!({"side_by_side": v})
        }
    }
    fn fleet_row(&self, i: usize, ans: &capacity::FleetAnswer) -> serde_json::Value {
        let (p, q) = (&self.profiles[i], &self.q);
        let fq = self.fleet.as_ref().expect("a fleet question");
        let tp = p.tensor_parallel;
        let search = json!({
            "requests_per_replica": ans.requests_per_replica,
            "single_replica_rate": resolved(q, ans.single_replica_rate),
            "candidates": ans.candidates,
        });
        let (Some(k), Some(s)) = (ans.replicas, &ans.summary) else {
            return json!({"gpu": p.gpu.name, "tensor_parallel": tp, "replicas": null, "verdict": format!("no fleet of up to {} replicas meets the SLO", fq.max_replicas), "search": search});
        };
        let at = ans.candidates.iter().find(|c| c.replicas == k).expect("the answer was tried");
        let gpus_n = k * tp;
        // A fleet that meets its SLOs in a steady state serves what it is offered.
        let served_tok_s = served_output_tok_s(q, fq.rate);
        let (cost_h, cost_m) = cost_json(self.gpu_price_per_hour, gpus_n as u64, served_tok_s);
        json!({
            "gpu": p.gpu.name, "tensor_parallel": tp, "replicas": k, "gpus": gpus_n,
            "extrapolation": p.retargeted_from.is_some(), "retargeted_from": p.retargeted_from,
            "routing": fq.routing, "target_rate": fq.rate,
            "slo_values": q.slos.iter().map(|x| json!({"name": x.name(), "value": x.value(s), "limit": x.limit})).collect::<Vec<_>>(),
            "output_tok_s": served_tok_s, "power_kw_at_tdp": gpus_n as f64 * p.gpu.tdp_w / 1000.0,
            "cost_per_hour": cost_h, "cost_per_million_output_tokens": cost_m,
            "stability": at.stability, "run_requests": at.run_requests, "run_s": at.run_s,
            "verdict": "found", "search": search,
        })
    }
}

/// The capacity question; exit code 3 (a warning, the output printed) when it has no answer: no load
/// meets the SLO on any GPU asked about, or no fleet up to --max-replicas does.
pub fn run(a: CapacityArgs) -> Result<()> {
    if answer(a)? {
        Ok(())
    } else {
        Err(Error::NoAnswer("no load meets the SLO (or no fleet up to --max-replicas does)".into()))
    }
}

/// Prints the answer; false when there is none.
fn answer(a: CapacityArgs) -> Result<bool> {
    if a.disaggregated {
        return super::disagg::capacity(&a);
    }
    let shard = a.scale_out.shard()?;
    if a.scale_out.jsonl && (a.json || a.csv || a.svg.is_some()) {
        return Err(Error::flag("--jsonl", "choose one output: --jsonl, --json, --csv or --svg"));
    }
    let prep = prepare(&a)?;
    let pb = super::progress_bar(0, "simulations");
    let tick = || pb.inc(1);
    let n = prep.profiles.len();
    let mine = if a.scale_out.jsonl { shard.indices(n) } else { (0..n).collect() };
    let mut outcomes = Vec::new();
    for &i in &mine {
        pb.set_message(prep.profiles[i].gpu.name.clone());
        outcomes.push(prep.run_one(i, &tick)?);
    }
    pb.finish_and_clear();
    // Answered when some GPU has an answer (a fleet: when every GPU has one).
    let answered = if prep.fleet.is_some() {
        outcomes.iter().all(Prepared::answered)
    } else {
        outcomes.iter().any(Prepared::answered) || outcomes.is_empty()
    };
    if a.scale_out.jsonl {
        for (&i, o) in mine.iter().zip(&outcomes) {
            outln!("{}", super::shard::line(i, n, prep.json_one(i, o)))?;
        }
        return Ok(answered);
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&prep.json(&outcomes)).expect("json"))?;
        return Ok(answered);
    }
    if prep.fleet.is_some() {
        let fleet: Vec<&capacity::FleetAnswer> = outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Fleet(f) => Some(f.as_ref()),
                Outcome::Loads(_) => None,
            })
            .collect();
        print_fleet(&a, &prep, &fleet)?;
        return Ok(answered);
    }
    let q = &prep.q;
    let results: Vec<(Profile, Capacity)> = prep
        .profiles
        .iter()
        .cloned()
        .zip(outcomes)
        .filter_map(|(p, o)| match o {
            Outcome::Loads(c) => Some((p, c)),
            Outcome::Fleet(_) => None,
        })
        .collect();
    if let Some(path) = &a.svg {
        let (p, c) = &results[0];
        let slo = q.slos[0];
        let unit = match slo.metric {
            capacity::SloMetric::TtftS | capacity::SloMetric::E2eS | capacity::SloMetric::QueueWaitS => "s",
            capacity::SloMetric::ItlMs | capacity::SloMetric::TpotMs => "ms",
            capacity::SloMetric::PerUserTokS => "tokens/s",
        };
        let x_label = match q.axis {
            LoadAxis::Concurrency => "concurrent users (log scale)",
            LoadAxis::Burst => "requests sent at once (log scale)",
            LoadAxis::Rate => "requests/s (log scale)",
            LoadAxis::Scale => "multiple of the trace's rate (log scale)",
        };
        let chart = capsim::report::chart::Chart {
            title: format!("{} against {} ({})", slo.name(), q.axis.as_str(), p.gpu.name),
            x_label: x_label.into(),
            y_label: format!("{} ({unit})", slo.name()),
            log_x: true,
            lines: vec![capsim::report::chart::Line {
                label: format!("{} (predicted)", slo.name()),
                color: 0,
                points: c.points.iter().map(|t| (t.load, t.slo_values[0].1)).collect(),
                ..Default::default()
            }],
            hline: Some((slo.limit, "SLO".into())),
            vline: (c.capacity > 0.0)
                .then(|| (c.capacity, format!("capacity {}", capsim::data::format_value(resolved(q, c.capacity))))),
            xband: (c.band.1 > c.band.0).then(|| (c.band.0, c.band.1, "band (+-1 sigma)".into())),
            width: 720.0,
        };
        let svg = chart.to_svg();
        std::fs::write(path, svg).map_err(|err| Error::Io { path: path.display().to_string(), err })?;
    }
    if a.csv {
        let (h, rows) = points_rows(&results[0].1.points);
        let h: Vec<&str> = h.iter().map(String::as_str).collect();
        if results.len() == 1 {
            out!("{}", csv(&h, &rows))?;
        } else {
            out!("{}", csv(SIDE_BY_SIDE_HEADERS, &side_by_side_rows(&results, q)))?;
        }
        return Ok(answered);
    }
    let slo_desc: Vec<String> = q
        .slos
        .iter()
        .map(|s| {
            format!("{} {} {}", s.name(), if s.is_lower_bound() { ">=" } else { "<=" }, capsim::error::fmt_num(s.limit))
        })
        .collect();
    outln!("question: largest {} with {} (seeds {})", q.axis.as_str(), slo_desc.join(" and "), q.seeds)?;
    if results.len() > 1 {
        out!("{}", table(SIDE_BY_SIDE_HEADERS, &side_by_side_rows(&results, q)))?;
        return Ok(answered);
    }
    let (p, c) = &results[0];
    outln!("profile: {}{}", p.name(), super::simulate::extrapolation_note(p))?;
    outln!(
        "capacity: {} {}  (band {} .. {} from the profile's fitted uncertainty; {})\n",
        capsim::data::format_value(resolved(q, c.capacity)),
        q.axis.as_str(),
        capsim::data::format_value(resolved(q, c.band.0)),
        capsim::data::format_value(resolved(q, c.band.1)),
        verdict_text(c, q)
    )?;
    let (h, rows) = points_rows(&c.points);
    let h: Vec<&str> = h.iter().map(String::as_str).collect();
    out!("{}", table(&h, &rows))?;
    Ok(answered)
}

fn routing_name(r: Routing) -> &'static str {
    match r {
        Routing::RoundRobin => "round-robin",
        Routing::LeastOutstanding => "least-outstanding",
        Routing::PrefixAware => "prefix-aware",
    }
}

fn print_fleet(a: &CapacityArgs, prep: &Prepared, out: &[&capacity::FleetAnswer]) -> Result<()> {
    let fq = prep.fleet.as_ref().expect("a fleet question");
    let (q, rate, routing) = (&prep.q, fq.rate, fq.routing);
    let rows: Vec<serde_json::Value> = out.iter().enumerate().map(|(i, f)| prep.fleet_row(i, f)).collect();
    let t_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let f = |k: &str| r.get(k).and_then(|v| v.as_f64()).map_or("-".into(), |v| num(v, 4));
            vec![
                r["gpu"].as_str().unwrap_or("").to_string(),
                r["tensor_parallel"].to_string(),
                r["replicas"].to_string(),
                r.get("gpus").map_or("-".into(), |v| v.to_string()),
                if r.get("extrapolation").and_then(|v| v.as_bool()).unwrap_or(false) {
                    "yes".into()
                } else {
                    "no".into()
                },
                f("output_tok_s"),
                f("power_kw_at_tdp"),
                f("cost_per_hour"),
                f("cost_per_million_output_tokens"),
                r.get("run_requests").map_or("-".into(), |v| v.to_string()),
                f("run_s"),
                r["verdict"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    let headers = [
        "gpu",
        "tp",
        "replicas",
        "gpus",
        "extrapolated",
        "output_tok_s",
        "power_kw",
        "cost_per_hour",
        "cost_per_m_tok",
        "run_requests",
        "run_s",
        "verdict",
    ];
    if a.csv {
        return out!("{}", csv(&headers, &t_rows));
    }
    outln!("fleet for {rate} requests/s, routing {}", routing_name(routing))?;
    out!("{}", table(&headers, &t_rows))?;
    for (p, ans) in prep.profiles.iter().zip(out) {
        let tried: Vec<String> = ans
            .candidates
            .iter()
            .map(|c| {
                let v =
                    if c.meets_slo { "meets".to_string() } else { format!("fails, {:?}", c.stability).to_lowercase() };
                format!("{} ({v})", c.replicas)
            })
            .collect();
        outln!(
            "{}: one replica serves {} requests/s within the SLOs; replicas tried: {}",
            p.gpu.name,
            num(resolved(q, ans.single_replica_rate), 4),
            tried.join(", ")
        )?;
    }
    Ok(())
}
