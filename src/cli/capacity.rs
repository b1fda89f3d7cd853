//! `capsim capacity`: the largest load within SLOs, side by side across GPUs, and fleet sizing.

use super::{LengthArgs, ProfileArgs};
use capsim::capacity::{self, preset, Capacity, Question, Routing, Slo, TriedPoint};
use capsim::error::{Error, Result};
use capsim::profile::Profile;
use capsim::report::{csv, num, svg_chart, table, Series};
use capsim::workload::{LengthDist, LoadAxis};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum LoadArg {
    Burst,
    Concurrency,
    Rate,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum RoutingArg {
    RoundRobin,
    LeastOutstanding,
}

#[derive(Args, Debug)]
pub struct CapacityArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    #[command(flatten)]
    pub lengths: LengthArgs,
    /// What to search over: a burst size (max safe queue depth), closed-loop clients, or an open-loop rate.
    #[arg(long, value_enum, default_value = "concurrency")]
    pub load: LoadArg,
    /// A limit, NAME=VALUE: ttft_<stat>_s, itl_<stat>_ms, tpot_<stat>_ms, e2e_<stat>_s, queue_wait_<stat>_s
    /// (at most) or per_user_tok_s_<stat> (at least); stat = mean|p50|p90|p95|p99. Repeatable.
    #[arg(long)]
    pub slo: Vec<String>,
    /// A use case of the reports: code-completion, short-chat, general-chat, long-documents, coding-agent
    /// (sets lengths and SLOs).
    #[arg(long)]
    pub preset: Option<String>,
    /// Search no further than this load (default: 4096 burst, 1024 clients, 1000 requests/s).
    #[arg(long)]
    pub max_load: Option<f64>,
    /// Seeds per load (merged per request); default 1 for bursts and closed loops, 3 for rates.
    #[arg(long)]
    pub seeds: Option<u32>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Relative resolution of a rate search.
    #[arg(long, default_value_t = 0.02)]
    pub rate_tol: f64,
    /// Answer the same question on each of these GPUs (comma-separated catalog names), side by side.
    #[arg(long, value_delimiter = ',')]
    pub gpus: Option<Vec<String>>,
    /// Fleet sizing: the total request rate the fleet must serve within the SLOs (open loop).
    #[arg(long)]
    pub target_rate: Option<f64>,
    #[arg(long, value_enum, default_value = "round-robin")]
    pub routing: RoutingArg,
    #[arg(long, default_value_t = 512)]
    pub max_replicas: u32,
    /// Price of one GPU-hour (any currency), for cost per hour and per million output tokens.
    #[arg(long)]
    pub gpu_price_per_hour: Option<f64>,
    #[arg(long)]
    pub json: bool,
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
    /// Write an SVG of the first SLO metric against load, with the limit and the capacity found.
    #[arg(long)]
    pub svg: Option<PathBuf>,
}

fn progress(len_hint: u64) -> ProgressBar {
    let pb = ProgressBar::new(len_hint);
    if std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::stderr());
        pb.set_style(ProgressStyle::with_template("{spinner} {pos} simulations {elapsed} {msg}").expect("template"));
    } else {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    pb
}

fn question(a: &CapacityArgs) -> Result<Question> {
    let mut template = a.lengths.template()?;
    let mut slo_text = a.slo.clone();
    if let Some(name) = &a.preset {
        let p = preset(name)?;
        template.classes[0].input = LengthDist::fixed(p.input_tokens);
        template.classes[0].output = LengthDist::fixed(p.output_tokens);
        slo_text.extend(p.slos.iter().map(|(n, v)| format!("{n}={v}")));
    }
    let slos: Vec<Slo> = slo_text.iter().map(|s| Slo::parse(s)).collect::<Result<_>>()?;
    if slos.is_empty() {
        return Err(Error::flag("--slo", "give at least one SLO (e.g. --slo ttft_mean_s=3.0) or a --preset"));
    }
    let axis = match a.load {
        LoadArg::Burst => LoadAxis::Burst,
        LoadArg::Concurrency => LoadAxis::Concurrency,
        LoadArg::Rate => LoadAxis::Rate,
    };
    let max_load = a.max_load.unwrap_or(match axis {
        LoadAxis::Burst => 4096.0,
        LoadAxis::Concurrency => 1024.0,
        LoadAxis::Rate => 1000.0,
    });
    let bound = match axis {
        LoadAxis::Rate => capsim::workload::MAX_RATE_PER_S,
        _ => capsim::workload::MAX_REQUESTS as f64,
    };
    if !(max_load.is_finite() && max_load >= 1.0 && max_load <= bound) {
        return Err(Error::flag(
            "--max-load",
            format!("must be in 1..={bound:e}, got {}", capsim::error::fmt_num(max_load)),
        ));
    }
    if !(a.rate_tol.is_finite() && a.rate_tol > 0.0 && a.rate_tol < 0.5) {
        return Err(Error::flag("--rate-tol", "must be in (0, 0.5)"));
    }
    let seeds = a.seeds.unwrap_or(if axis == LoadAxis::Rate { 3 } else { 1 });
    if seeds == 0 || seeds > 64 {
        return Err(Error::flag("--seeds", "must be in 1..=64"));
    }
    Ok(Question { axis, template, slos, max_load, seeds, seed: a.seed, rate_rel_tol: a.rate_tol })
}

/// The profile on `gpu` at the tensor-parallel degree asked for (`--tp`, else the profile's own), the
/// same deployment `simulate` resolves: a model that does not fit is refused with the engine's memory
/// arithmetic, never moved to more GPUs behind the user's back. The workload's requests must fit
/// the model's context.
fn on_gpu(a: &CapacityArgs, catalog: &capsim::catalog::Catalog, gpu: Option<&str>, q: &Question) -> Result<Profile> {
    let mut pa = a.profile.clone();
    pa.gpu = gpu.map(str::to_string).or(pa.gpu);
    let p = pa.resolve(catalog)?;
    capsim::workload::check_context(&q.template.classes, p.arch.max_context, &p.arch.name)?;
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
    if let Some(path) = &a.svg {
        super::check_output_file("--svg", path)?;
    }
    let catalog = a.profile.catalog()?;
    let q = question(&a)?;
    if let Some(rate) = a.target_rate {
        return fleet(&a, &q, &catalog, rate);
    }
    let gpus: Vec<Option<String>> = match &a.gpus {
        Some(g) => g.iter().map(|x| Some(x.clone())).collect(),
        None => vec![None],
    };
    let pb = progress(0);
    let tick = || pb.inc(1);
    let mut results = Vec::new();
    for g in &gpus {
        let p = on_gpu(&a, &catalog, g.as_deref(), &q)?;
        pb.set_message(p.gpu.name.clone());
        let c = capacity::capacity(&p, &q, &tick)?;
        results.push((p, c));
    }
    pb.finish_and_clear();
    let answered = results.iter().any(|(_, c)| c.verdict != capacity::Verdict::NoLoadMeetsSlo);
    if let Some(path) = &a.svg {
        let (p, c) = &results[0];
        let slo = q.slos[0];
        let slo_name = slo.name();
        let series = vec![Series {
            label: &slo_name,
            points: c.points.iter().map(|t| (t.load, t.slo_values[0].1)).collect(),
            markers: false,
            color: 0,
        }];
        let svg = svg_chart(
            &format!("{} against {} ({})", slo.name(), q.axis.as_str(), p.name()),
            q.axis.as_str(),
            &slo.name(),
            &series,
            Some((slo.limit, "SLO")),
            (c.capacity > 0.0).then_some((c.capacity, "capacity")),
            false,
        );
        std::fs::write(path, svg).map_err(|err| Error::Io { path: path.display().to_string(), err })?;
    }
    if a.json {
        let v: Vec<_> = results
            .iter()
            .map(|(p, c)| {
                json!({
                    "capacity": resolved(&q, c.capacity), "band": {"low": resolved(&q, c.band.0), "high": resolved(&q, c.band.1)}, "verdict": c.verdict, "stability": c.stability,
                    "non_monotone_loads": c.non_monotone_loads,
                    "points": c.points, "load": q.axis.as_str(), "slos": q.slos.iter().map(|s| json!({"name": s.name(), "limit": s.limit})).collect::<Vec<_>>(),
                    "profile": c.profile, "gpu": p.gpu.name, "tensor_parallel": p.tensor_parallel,
                    "extrapolation": p.retargeted_from.is_some(), "retargeted_from": p.retargeted_from, "seeds": q.seeds, "seed": q.seed,
                })
            })
            .collect();
        let out = if v.len() == 1 { v.into_iter().next().expect("one") } else { json!({"side_by_side": v}) };
        println!("{}", serde_json::to_string_pretty(&out).expect("json"));
        return Ok(answered);
    }
    if a.csv {
        let (h, rows) = points_rows(&results[0].1.points);
        let h: Vec<&str> = h.iter().map(String::as_str).collect();
        if results.len() == 1 {
            print!("{}", csv(&h, &rows));
        } else {
            print!("{}", csv(SIDE_BY_SIDE_HEADERS, &side_by_side_rows(&results, &q)));
        }
        return Ok(answered);
    }
    let slo_desc: Vec<String> = q
        .slos
        .iter()
        .map(|s| format!("{} {} {}", s.name(), if s.is_lower_bound() { ">=" } else { "<=" }, s.limit))
        .collect();
    println!("question: largest {} with {} (seeds {})", q.axis.as_str(), slo_desc.join(" and "), q.seeds);
    if results.len() > 1 {
        print!("{}", table(SIDE_BY_SIDE_HEADERS, &side_by_side_rows(&results, &q)));
        return Ok(answered);
    }
    let (p, c) = &results[0];
    println!("profile: {}{}", p.name(), super::simulate::extrapolation_note(p));
    println!(
        "capacity: {} {}  (band {} .. {} from the profile's fitted uncertainty; {})\n",
        capsim::data::format_value(resolved(&q, c.capacity)),
        q.axis.as_str(),
        capsim::data::format_value(resolved(&q, c.band.0)),
        capsim::data::format_value(resolved(&q, c.band.1)),
        verdict_text(c, &q)
    );
    let (h, rows) = points_rows(&c.points);
    let h: Vec<&str> = h.iter().map(String::as_str).collect();
    print!("{}", table(&h, &rows));
    Ok(answered)
}

fn fleet(a: &CapacityArgs, q: &Question, catalog: &capsim::catalog::Catalog, rate: f64) -> Result<bool> {
    if !(rate.is_finite() && rate > 0.0) {
        return Err(Error::flag("--target-rate", format!("must be a positive rate, got {rate}")));
    }
    if a.max_replicas == 0 || a.max_replicas > 100_000 {
        return Err(Error::flag("--max-replicas", format!("must be in 1..=100000, got {}", a.max_replicas)));
    }
    if let Some(pr) = a.gpu_price_per_hour {
        if !(pr.is_finite() && pr >= 0.0) {
            return Err(Error::flag("--gpu-price-per-hour", "must be a non-negative number"));
        }
    }
    let routing = match a.routing {
        RoutingArg::RoundRobin => Routing::RoundRobin,
        RoutingArg::LeastOutstanding => Routing::LeastOutstanding,
    };
    let gpus: Vec<Option<String>> = match &a.gpus {
        Some(g) => g.iter().map(|x| Some(x.clone())).collect(),
        None => vec![None],
    };
    let mut t = q.template.clone();
    if t.requests.is_none() {
        t.requests = Some(((rate * 120.0) as u64).clamp(500, 20_000));
    }
    let mut out = Vec::new();
    for g in &gpus {
        let p = on_gpu(a, catalog, g.as_deref(), q)?;
        let ok = |k: u32| -> Result<(bool, capsim::metrics::Summary)> {
            let (s, stability) = capacity::simulate_fleet(&p, &t, rate, k, routing, q.seed)?;
            Ok((q.slos.iter().all(|x| x.met(&s)) && stability != capacity::Stability::Overloaded, s))
        };
        // Bracket and bisect over the replica count (more replicas never hurt).
        let (mut lo, mut hi) = (0u32, 1u32);
        let mut found = None;
        while hi <= a.max_replicas {
            let (good, s) = ok(hi)?;
            if good {
                found = Some((hi, s));
                break;
            }
            lo = hi;
            hi *= 2;
        }
        let Some((mut k, mut s)) = found else {
            out.push((p, None));
            continue;
        };
        hi = k;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            let (good, sm) = ok(mid)?;
            if good {
                hi = mid;
                k = mid;
                s = sm;
            } else {
                lo = mid;
            }
        }
        out.push((p, Some((k, s))));
    }
    let rows: Vec<serde_json::Value> = out
        .iter()
        .map(|(p, r)| {
            let tp = p.tensor_parallel;
            match r {
                None => json!({"gpu": p.gpu.name, "tensor_parallel": tp, "replicas": null, "verdict": format!("no fleet of up to {} replicas meets the SLO", a.max_replicas)}),
                Some((k, s)) => {
                    let gpus_n = k * tp;
                    let cost_h = a.gpu_price_per_hour.map(|pr| pr * gpus_n as f64);
                    // A fleet that meets its SLOs without backlog serves what it is offered.
                    let served_tok_s = rate * t.at(LoadAxis::Rate, rate).map_or(0.0, |w| w.mean_output_tokens());
                    let tok_h = served_tok_s * 3600.0;
                    json!({
                        "gpu": p.gpu.name, "tensor_parallel": tp, "replicas": k, "gpus": gpus_n,
                        "extrapolation": p.retargeted_from.is_some(), "retargeted_from": p.retargeted_from,
                        "routing": routing, "target_rate": rate,
                        "slo_values": q.slos.iter().map(|x| json!({"name": x.name(), "value": x.value(s), "limit": x.limit})).collect::<Vec<_>>(),
                        "output_tok_s": served_tok_s, "power_kw_at_tdp": gpus_n as f64 * p.gpu.tdp_w / 1000.0,
                        "cost_per_hour": cost_h, "cost_per_million_output_tokens": cost_h.map(|c| if tok_h > 0.0 { c / (tok_h / 1e6) } else { f64::NAN }),
                        "verdict": "found",
                    })
                }
            }
        })
        .collect();
    let answered = rows.iter().all(|r| !r["replicas"].is_null());
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json!({"fleet": rows})).expect("json"));
        return Ok(answered);
    }
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
                r["verdict"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    println!("fleet for {rate} requests/s, routing {:?}", routing);
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
        "verdict",
    ];
    if a.csv {
        print!("{}", csv(&headers, &t_rows));
    } else {
        print!("{}", table(&headers, &t_rows));
    }
    Ok(answered)
}
