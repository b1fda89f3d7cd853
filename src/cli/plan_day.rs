//! `capsim plan --workload DAY.toml | --trace FILE`: the cheapest fleet that meets the SLO over a
//! whole rate curve (capsim::plan::day), for each GPU and tensor-parallel degree asked about:
//!
//! - the fixed fleet: capacity's fleet search at the curve's peak (steady state) gives a starting
//!   count; the whole curve is then simulated at that count and the one below, and the search moves
//!   until the fewest replicas meeting the SLO in every bucket are found beside a failing neighbour;
//! - with `--autoscale POLICY.toml`, the fleet that policy scales between its min and max replicas
//!   (the max capped by --max-gpus), simulated over the same curve.
//!
//! Plans are priced, powered and billed from the price table (not the policy's own price), listed
//! cheapest per hour first among those meeting the SLO, then those that do not.

use super::plan::{band_json, band_text, candidates, Candidate, PlanArgs};
use capsim::autoscale::AutoscalePolicy;
use capsim::capacity::{perturbed, size_fleet, FleetQuestion, Question, Routing, Slo};
use capsim::catalog::Catalog;
use capsim::error::{Error, Result};
use capsim::plan::day::{check_day_slos, peak_rate, simulate_day, size_fixed_day, DayRun};
use capsim::plan::{PriceTable, ReplicaBand};
use capsim::report::{num, table};
use capsim::workload::{LoadAxis, LoadTemplate};
use serde_json::json;

/// One plan over the curve.
struct DayPlan {
    kind: &'static str,
    gpu: String,
    tp: u32,
    /// The fixed fleet's replicas, or the autoscaled fleet's most held at once.
    replicas: u32,
    run: DayRun,
    /// The fixed fleet's band of replicas from the profile's uncertainty.
    band: Option<ReplicaBand>,
    extra: serde_json::Value,
}

pub fn run(a: &PlanArgs, catalog: &Catalog, prices: &PriceTable, gpus: &[String]) -> Result<()> {
    let c = &a.capacity;
    for (flag, given) in [("--existing", !a.existing.is_empty()), ("--mix", a.mix)] {
        if given {
            return Err(Error::flag(
                flag,
                "mixed-GPU plans serve a --target-rate; plans over a curve are of one GPU type",
            ));
        }
    }
    if c.preset.is_some() {
        return Err(Error::flag(
            "--preset",
            "a preset sets the request lengths, which the curve's file gives; use --slo",
        ));
    }
    if matches!(c.routing, Some(super::capacity::RoutingArg::PrefixAware)) {
        return Err(Error::flag(
            "--routing",
            "a plan over a curve routes to the least-outstanding replica (the autoscaled fleet's router)",
        ));
    }
    let slos: Vec<Slo> = c.slo.iter().map(|s| Slo::parse(s)).collect::<Result<_>>()?;
    check_day_slos(&slos)?;
    let src = c.workload.source()?;
    let w = src.file_workload.clone().expect("a workload file or a trace gives its own workload");
    let origin = src.origin.clone().unwrap_or_default();
    // At least a second: a shorter window's peak is a few requests over nothing (1e-9 s gave a
    // rate of 1e9 requests/s).
    if !(a.peak_window_s.is_finite() && (1.0..=86_400.0).contains(&a.peak_window_s)) {
        return Err(Error::flag(
            "--peak-window-s",
            format!("must be in [1, 86400] s, got {}", capsim::error::fmt_num(a.peak_window_s)),
        ));
    }
    let peak = peak_rate(&w, a.peak_window_s)?;
    if peak.is_nan() || peak <= 0.0 {
        return Err(Error::flag("--workload", format!("{origin} sends nothing: its peak rate is 0")));
    }
    let policy = match &a.autoscale {
        Some(path) => Some(AutoscalePolicy::parse(&path.display().to_string(), &capsim::error::read_file(path)?)?),
        None => None,
    };
    let bucket_s = a.bucket_s.or(policy.as_ref().map(|p| p.bucket_s)).unwrap_or(3600.0);
    // At least a second (a 1e-6 s bucket over a 40-minute curve was 2.4 billion rows).
    if !(bucket_s.is_finite() && (1.0..=capsim::workload::MAX_TIME_S).contains(&bucket_s)) {
        return Err(Error::flag(
            "--bucket-s",
            format!("must be a number of seconds in [1, 1e9], got {}", capsim::error::fmt_num(bucket_s)),
        ));
    }
    let seeds = c.seeds.unwrap_or(3);
    if seeds == 0 || seeds > 64 {
        return Err(Error::flag("--seeds", "must be in 1..=64"));
    }
    if let Some(n) = c.requests_per_replica.filter(|n| !(1..=1_000_000).contains(n)) {
        return Err(Error::flag("--requests-per-replica", format!("must be in 1..=1000000, got {n}")));
    }
    // The peak's steady state: the file's requests at a constant rate, runs that grow with the fleet
    // (a trace's requests stand in as their mean lengths here; the whole-curve runs replay it as is).
    let (mut template, _, _) = LoadTemplate::of_workload(&w);
    template.scaled_arrivals = None;
    template.requests = None;
    template.duration_s = None;
    let q = Question {
        axis: LoadAxis::Rate,
        template,
        slos: slos.clone(),
        max_load: peak,
        seeds,
        seed: c.seed,
        rate_rel_tol: c.rate_tol.unwrap_or(super::capacity::DEFAULT_RATE_TOL),
    };
    let pb = super::progress_bar(0, "simulations");
    let tick = || pb.inc(1);
    let mut plans: Vec<DayPlan> = Vec::new();
    let mut refused: Vec<serde_json::Value> = Vec::new();
    for Candidate { spec, price, tp, profile: p } in candidates(a, catalog, prices, gpus, true, &mut refused)? {
        let refuse = |reason: String| json!({"gpu": spec.name, "tensor_parallel": tp, "reason": reason});
        w.check_context(p.arch.max_context, &p.arch.name)?;
        pb.set_message(format!("{} x{tp}", spec.name));
        let cap = a.max_gpus / tp;
        let fq = FleetQuestion {
            rate: peak,
            routing: Routing::LeastOutstanding,
            max_replicas: cap,
            requests_per_replica: c.requests_per_replica,
        };
        let at_peak = size_fleet(&p, &q, &fq, &tick)?;
        let start = at_peak.replicas.unwrap_or(cap);
        let day = size_fixed_day(&p, &w, c.seed, &slos, bucket_s, &price, start, cap, &tick);
        let peak_json =
            json!({"rate": peak, "replicas": at_peak.replicas, "single_replica_rate": at_peak.single_replica_rate});
        match day.replicas {
            Some(k) => {
                let run = day.run(k).expect("the answer was simulated").clone();
                let fewer = (k > 1).then(|| day.run(k - 1).map(|r| neighbour_json(k - 1, r))).flatten();
                let tried: Vec<_> = day
                    .tried
                    .iter()
                    .map(|(n, r)| json!({"replicas": n, "slo_met": r.slo_met, "buckets_failed": r.buckets_failed}))
                    .collect();
                let band = ReplicaBand::find(k, &[&p], |sign| {
                    let pp = perturbed(&p, sign);
                    Ok(size_fixed_day(&pp, &w, c.seed, &slos, bucket_s, &price, k, cap, &tick).replicas)
                })?;
                plans.push(DayPlan {
                        kind: "fixed",
                        gpu: spec.name.clone(),
                        tp,
                        replicas: k,
                        run,
                        band: Some(band),
                        extra: json!({"peak": peak_json, "one_replica_fewer": fewer, "tried": tried, "extrapolation": p.retargeted_from.is_some(), "band": band_json(&band, tp, price.price_per_hour)}),
                    });
            }
            None => refused.push(refuse(format!(
                "no fixed fleet of up to {cap} replicas ({} GPUs) meets the SLO in every bucket",
                cap * tp
            ))),
        }
        if let Some(pol) = &policy {
            if pol.min_replicas > cap {
                refused.push(json!({"gpu": spec.name, "tensor_parallel": tp, "kind": "autoscaled", "reason": format!("the policy's min_replicas {} needs {} GPUs, above --max-gpus {}", pol.min_replicas, pol.min_replicas * tp, a.max_gpus)}));
                continue;
            }
            let mut pol = pol.clone();
            pol.max_replicas = pol.max_replicas.min(cap);
            pol.initial_replicas = pol.initial_replicas.min(pol.max_replicas);
            pol.bucket_s = bucket_s;
            let run = simulate_day(&p, &w, c.seed, &pol, &slos, &price);
            tick();
            // The band: the same policy over the curve with the profile one sigma faster and slower.
            let band = (p.file.sigmas.is_some() || p.file.covariance.is_some()).then(|| {
                    let [fast, slow] = [1.0, -1.0].map(|sign| simulate_day(&perturbed(&p, sign), &w, c.seed, &pol, &slos, &price));
                    json!({
                        "cost_per_hour": {"low": fast.cost_per_hour.min(run.cost_per_hour), "high": slow.cost_per_hour.max(run.cost_per_hour)},
                        "replicas_max": {"low": fast.replicas_max, "high": slow.replicas_max},
                        "slo_met": {"fast": fast.slo_met, "slow": slow.slo_met},
                        "from_sigmas": true,
                    })
                });
            plans.push(DayPlan {
                    kind: "autoscaled",
                    gpu: spec.name.clone(),
                    tp,
                    replicas: run.replicas_max,
                    band: None,
                    extra: json!({"min_replicas": pol.min_replicas, "max_replicas": pol.max_replicas, "peak": peak_json, "extrapolation": p.retargeted_from.is_some(), "band": band}),
                    run,
                });
        }
    }
    pb.finish_and_clear();
    plans.sort_by(|x, y| {
        y.run
            .slo_met
            .cmp(&x.run.slo_met)
            .then(x.run.cost_per_hour.total_cmp(&y.run.cost_per_hour))
            .then(x.gpu.cmp(&y.gpu))
            .then(x.tp.cmp(&y.tp))
    });
    let plan_json: Vec<serde_json::Value> = plans.iter().map(plan_json).collect();
    if c.json {
        let v = json!({
            "capsim_version": env!("CARGO_PKG_VERSION"),
            "curve": origin,
            "peak_rate": peak,
            "bucket_s": bucket_s,
            "routing": "least-outstanding",
            "max_gpus": a.max_gpus,
            "slos": slos.iter().map(|s| json!({"name": s.name(), "limit": s.limit})).collect::<Vec<_>>(),
            "prices": {"source": prices.source, "date": prices.date, "currency": prices.currency},
            "plans": plan_json,
            "refused": refused,
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
    } else {
        print_text(&plans, &refused, &origin, peak, bucket_s, prices)?;
    }
    if !plans.iter().any(|p| p.run.slo_met) {
        return Err(Error::NoAnswer(format!(
            "no plan within --max-gpus {} meets the SLO in every {} s bucket of the curve",
            a.max_gpus, bucket_s
        )));
    }
    Ok(())
}

fn neighbour_json(replicas: u32, r: &DayRun) -> serde_json::Value {
    json!({
        "replicas": replicas,
        "slo_met": r.slo_met,
        "buckets_failed": r.buckets_failed,
        "requests_lost": r.requests_lost,
        "buckets": r.buckets,
    })
}

fn plan_json(p: &DayPlan) -> serde_json::Value {
    let r = &p.run;
    let mut v = json!({
        "kind": p.kind,
        "pools": [{"gpu": p.gpu, "tp": p.tp, "replicas": p.replicas, "gpus": p.replicas * p.tp}],
        "gpus": p.replicas * p.tp,
        "cost_per_hour": r.cost_per_hour,
        "cost_per_day": r.cost_per_hour * 24.0,
        "cost": r.cost,
        "cost_per_million_output_tokens": r.cost_per_million_output_tokens,
        "slo_met": r.slo_met,
        "buckets_failed": r.buckets_failed,
        "requests_sent": r.requests_sent,
        "requests_lost": r.requests_lost,
        "span_s": r.span_s,
        "gpu_hours": r.gpu_hours,
        "energy_kwh": r.energy_kwh,
        "energy_kwh_per_day": r.power_kw_mean * 24.0,
        "power_kw_mean": r.power_kw_mean,
        "replicas_max": r.replicas_max,
        "scale_ups": r.scale_ups,
        "scale_downs": r.scale_downs,
        "buckets": r.buckets,
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), p.extra.as_object()) {
        for (k, x) in e {
            o.insert(k.clone(), x.clone());
        }
    }
    v
}

fn print_text(
    plans: &[DayPlan],
    refused: &[serde_json::Value],
    origin: &str,
    peak: f64,
    bucket_s: f64,
    prices: &PriceTable,
) -> Result<()> {
    outln!(
        "plans for the curve of {origin} (peak {} requests/s), the SLO met in every {} s bucket, cheapest first (prices: {}, {} {}):",
        num(peak, 4),
        num(bucket_s, 4),
        prices.source,
        prices.currency,
        prices.date
    )?;
    let rows: Vec<Vec<String>> = plans
        .iter()
        .map(|p| {
            let r = &p.run;
            let replicas = match &p.band {
                Some(b) => band_text(p.replicas, b),
                None => format!("<= {}", p.replicas),
            };
            vec![
                p.kind.to_string(),
                p.gpu.clone(),
                p.tp.to_string(),
                replicas,
                num(r.cost_per_hour, 4),
                num(r.cost_per_hour * 24.0, 4),
                num(r.cost_per_million_output_tokens, 4),
                num(r.gpu_hours, 4),
                num(r.energy_kwh, 4),
                format!("{}/{}", r.buckets.len() - r.buckets_failed, r.buckets.len()),
                if r.slo_met { "yes".into() } else { "no".into() },
            ]
        })
        .collect();
    out!(
        "{}",
        table(
            &[
                "kind",
                "gpu",
                "tp",
                "replicas",
                "cost/hour",
                "cost/day",
                "cost/M output tokens",
                "GPU-hours",
                "energy kWh",
                "buckets met",
                "SLO met",
            ],
            &rows
        )
    )?;
    if let Some(best) = plans.first().filter(|p| p.run.slo_met) {
        outln!(
            "\nthe cheapest plan, {} {} TP{} x{}, bucket by bucket:",
            best.kind,
            best.gpu,
            best.tp,
            if best.band.is_some() { best.replicas.to_string() } else { format!("{} at most", best.replicas) }
        )?;
        let names: Vec<String> =
            best.run.buckets.first().map(|b| b.slo_values.iter().map(|(n, _)| n.clone()).collect()).unwrap_or_default();
        let mut header: Vec<&str> = vec!["start h", "sent", "replicas max"];
        header.extend(names.iter().map(String::as_str));
        header.extend(["utilization", "energy kWh"]);
        let rows: Vec<Vec<String>> = best
            .run
            .buckets
            .iter()
            .map(|b| {
                let mut row = vec![num(b.start_s / 3600.0, 4), b.requests_sent.to_string(), b.replicas_max.to_string()];
                row.extend(b.slo_values.iter().map(|(_, v)| num(*v, 4)));
                row.push(format!("{:.0}%", b.utilization * 100.0));
                row.push(num(b.energy_kwh, 4));
                row
            })
            .collect();
        out!("{}", table(&header, &rows))?;
    }
    for p in plans.iter().filter(|p| p.kind == "fixed") {
        if let Some(f) = p.extra.get("one_replica_fewer").filter(|f| !f.is_null()) {
            outln!(
                "one replica fewer, {} TP{} x{}: misses the SLO in {} of {} buckets",
                p.gpu,
                p.tp,
                f["replicas"],
                f["buckets_failed"],
                f["buckets"].as_array().map_or(0, |b| b.len())
            )?;
        }
    }
    super::plan::print_refused(refused, "")
}
