//! `capsim plan --target-rate R --existing "H100 SXM:replicas=4" --gpus "B200,H200 SXM"`: mixed-GPU
//! plans. Each GPU type and tensor-parallel degree of --gpus is a candidate new pool; the plan is the
//! fewest replicas of it that, beside the pools already owned, serve the rate within the SLO
//! (capsim::plan::mixed, the fleet simulated jointly behind the weighted least-outstanding router).
//! Plans are priced with every pool's GPUs (the owned ones run and draw power too), cheapest first.
//!
//! `--mix` plans fleets of two new GPU types of --gpus: for each pair, every count of the first
//! with the fewest replicas of the second beside it, until the first alone serves the rate (a pure
//! fleet, the plain plan's answer). The cheapest mix of a pair is among these: any mix meeting the
//! SLO costs at least as much as the same count of the first with the fewest of the second.

use super::mixed::{parse_pool, resolve_pool, PoolSpec};
use super::plan::{band_json, band_text, candidates, Candidate, PlanArgs};
use capsim::capacity::perturbed;
use capsim::catalog::Catalog;
use capsim::error::{Error, Result};
use capsim::plan::mixed::{size_mixed, MixedAnswer, NewCounts};
use capsim::plan::{fleet_power_w, GpuPrice, PriceTable, ReplicaBand};
use capsim::profile::Profile;
use capsim::report::{num, table};
use capsim::workload::LoadAxis;
use serde_json::json;

struct MixedPlan {
    gpu: String,
    tp: u32,
    new_replicas: u32,
    gpus: u32,
    cost_per_hour: f64,
    json: serde_json::Value,
    band: ReplicaBand,
}

/// The +-1 sigma band of `n` new replicas of `new` beside `existing`: the fleet sized again (`size`)
/// with every pool's profile moved the same way, one sigma slower and one faster (owned replicas are
/// as uncertain as new ones).
fn fleet_band(
    n: u32,
    existing: &[(&Profile, u32)],
    new: &Profile,
    size: impl Fn(&[(&Profile, u32)], &Profile) -> Result<Option<u32>>,
) -> Result<ReplicaBand> {
    let mut involved: Vec<&Profile> = existing.iter().map(|(p, _)| *p).collect();
    involved.push(new);
    ReplicaBand::find(n, &involved, |sign| {
        let moved: Vec<Profile> = existing.iter().map(|(p, _)| perturbed(p, sign)).collect();
        let ex: Vec<(&Profile, u32)> = moved.iter().zip(existing).map(|(m, (_, k))| (m, *k)).collect();
        size(&ex, &perturbed(new, sign))
    })
}

/// `--existing` values as pools (errors name --existing).
fn existing_pools(a: &PlanArgs) -> Result<Vec<PoolSpec>> {
    a.existing
        .iter()
        .map(|s| {
            parse_pool(s).map_err(|e| match e {
                Error::Input { msg, .. } => Error::flag("--existing", msg),
                other => other,
            })
        })
        .collect()
}

pub fn run(a: &PlanArgs, catalog: &Catalog, prices: &PriceTable, gpus: &[String], rate: f64) -> Result<()> {
    let c = &a.capacity;
    let q = super::capacity::question(c)?;
    if let Some(n) = c.requests_per_replica.filter(|n| !(1..=1_000_000).contains(n)) {
        return Err(Error::flag("--requests-per-replica", format!("must be in 1..=1000000, got {n}")));
    }
    let specs = existing_pools(a)?;
    // The owned pools: each must run and be priced, or the plan cannot be costed.
    let mut owned: Vec<(Profile, u32, GpuPrice)> = Vec::new();
    for s in &specs {
        let p = resolve_pool(&c.profile, s, "--existing", catalog)?;
        if !q.template.is_trace() {
            capsim::workload::check_context(&q.template.classes, p.arch.max_context, &p.arch.name)?;
        }
        let price = prices.get(&p.gpu.name)?.clone();
        owned.push((p, s.replicas, price));
    }
    let owned_gpus: u32 = owned.iter().map(|(p, n, _)| n * p.tensor_parallel).sum();
    if owned_gpus > a.max_gpus {
        return Err(Error::flag(
            "--max-gpus",
            format!("the --existing pools hold {owned_gpus} GPUs, more than --max-gpus {}", a.max_gpus),
        ));
    }
    let owned_cost: f64 = owned.iter().map(|(p, n, pr)| (n * p.tensor_parallel) as f64 * pr.price_per_hour).sum();
    let existing: Vec<(&Profile, u32)> = owned.iter().map(|(p, n, _)| (p, *n)).collect();
    let turns = q.template.conversation.as_ref().map_or(1.0, |c| c.turns.mean());
    let tok_h = rate * turns * q.template.at(LoadAxis::Rate, rate).map_or(0.0, |w| w.mean_output_tokens()) * 3600.0;
    let pb = super::progress_bar(0, "simulations");
    let tick = || pb.inc(1);
    let mut plans: Vec<MixedPlan> = Vec::new();
    let mut refused: Vec<serde_json::Value> = Vec::new();
    // The owned pools already bound --max-gpus (checked above); each candidate's room is what is left.
    for Candidate { spec, price, tp, profile: p } in candidates(a, catalog, prices, gpus, false, &mut refused)? {
        let refuse = |reason: String| json!({"gpu": spec.name, "tensor_parallel": tp, "reason": reason});
        if !q.template.is_trace() {
            capsim::workload::check_context(&q.template.classes, p.arch.max_context, &p.arch.name)?;
        }
        pb.set_message(format!("+ {} x{tp}", spec.name));
        let max_new = (a.max_gpus - owned_gpus) / tp;
        let ans = size_mixed(&existing, &p, &q, rate, c.requests_per_replica, NewCounts::up_to(max_new), &tick)?;
        let Some(n) = ans.new_replicas else {
            refused.push(refuse(format!(
                "no mixed fleet with up to {max_new} new replicas ({} GPUs in all) meets the SLO",
                owned_gpus + max_new * tp
            )));
            continue;
        };
        let cost = owned_cost + (n * tp) as f64 * price.price_per_hour;
        let band = fleet_band(n, &existing, &p, |ex, new| {
            Ok(size_mixed(ex, new, &q, rate, c.requests_per_replica, NewCounts::up_to(max_new), &tick)?.new_replicas)
        })?;
        let mut json = plan_json(&owned, (&p, n, &price), &ans, cost, tok_h, true);
        for (v, slo) in json["slo_values"].as_array_mut().into_iter().flatten().zip(&q.slos) {
            v["limit"] = json!(slo.limit);
        }
        json["band"] = added_band_json(&band, tp, price.price_per_hour, owned_cost);
        plans.push(MixedPlan {
            gpu: spec.name.clone(),
            tp,
            new_replicas: n,
            gpus: owned_gpus + n * tp,
            cost_per_hour: cost,
            json,
            band,
        });
    }
    pb.finish_and_clear();
    plans.sort_by(|x, y| {
        x.cost_per_hour
            .total_cmp(&y.cost_per_hour)
            .then(x.gpus.cmp(&y.gpus))
            .then(x.gpu.cmp(&y.gpu))
            .then(x.tp.cmp(&y.tp))
    });
    let owned_json: Vec<_> =
        owned.iter().map(|(p, n, _)| json!({"gpu": p.gpu.name, "tp": p.tensor_parallel, "replicas": n})).collect();
    let owned_text: Vec<String> =
        owned.iter().map(|(p, n, _)| format!("{} TP{} x{n}", p.gpu.name, p.tensor_parallel)).collect();
    let title = format!("mixed plans for {} requests/s within the SLO beside {}", num(rate, 4), owned_text.join(" + "));
    print_plans(a, prices, rate, &title, json!({"existing": owned_json}), &plans, &refused)?;
    if plans.is_empty() {
        return Err(Error::NoAnswer(format!("no mixed plan within --max-gpus {} meets the SLO", a.max_gpus)));
    }
    Ok(())
}

/// The band of the added pool's replicas, its cost per hour with the other pools' `base_cost` (the
/// same at either end).
fn added_band_json(band: &ReplicaBand, tp: u32, price_per_gpu_hour: f64, base_cost: f64) -> serde_json::Value {
    let mut b = band_json(band, tp, price_per_gpu_hour);
    for end in ["low", "high"] {
        if let Some(x) = b["cost_per_hour"][end].as_f64() {
            b["cost_per_hour"][end] = json!(x + base_cost);
        }
    }
    b["new_replicas"] = b["replicas"].take();
    if let Some(o) = b.as_object_mut() {
        o.remove("replicas");
    }
    b
}

/// A plan's JSON: the pools (owned first, then the new one), its cost, power and the search.
fn plan_json(
    owned: &[(Profile, u32, GpuPrice)],
    new: (&Profile, u32, &GpuPrice),
    ans: &MixedAnswer,
    cost_per_hour: f64,
    tok_h: f64,
    owned_existing: bool,
) -> serde_json::Value {
    let (p, n, price) = new;
    let at = ans.candidate(n).expect("the answer was simulated");
    let mut pools: Vec<serde_json::Value> = Vec::new();
    let mut power_w = 0.0;
    let mut members: Vec<(&Profile, u32, &GpuPrice, bool)> =
        owned.iter().map(|(p, k, pr)| (p, *k, pr, owned_existing)).collect();
    if n > 0 {
        members.push((p, n, price, false));
    }
    for (i, (pp, k, pr, existing)) in members.iter().enumerate() {
        let gpus = k * pp.tensor_parallel;
        let busy = at.busy_share.get(i).copied().unwrap_or(0.0);
        power_w += fleet_power_w(pr, gpus, busy);
        pools.push(json!({
            "gpu": pp.gpu.name, "tp": pp.tensor_parallel, "replicas": k, "gpus": gpus, "existing": existing,
            "requests_share": at.requests_share.get(i), "busy_share": busy,
            "extrapolation": pp.retargeted_from.is_some(),
        }));
    }
    let fewer = n.checked_sub(1).and_then(|m| ans.candidate(m));
    json!({
        "pools": pools,
        "gpus": members.iter().map(|(pp, k, _, _)| k * pp.tensor_parallel).sum::<u32>(),
        "new_replicas": n,
        "cost_per_hour": cost_per_hour,
        "cost_per_million_output_tokens": if tok_h > 0.0 { cost_per_hour / (tok_h / 1e6) } else { f64::NAN },
        "slo_met": at.meets_slo,
        "slo_values": at.slo_values.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
        "stability": at.stability,
        "power_kw": power_w / 1e3,
        "energy_kwh_per_day": power_w / 1e3 * 24.0,
        "one_replica_fewer": fewer,
        "search": {"requests_per_replica": ans.requests_per_replica, "candidates": ans.candidates},
    })
}

/// Print the plans (JSON with `extra`'s keys, or a table), cheapest first as given.
fn print_plans(
    a: &PlanArgs,
    prices: &PriceTable,
    rate: f64,
    title: &str,
    extra: serde_json::Value,
    plans: &[MixedPlan],
    refused: &[serde_json::Value],
) -> Result<()> {
    if a.capacity.json {
        let mut v = json!({
            "capsim_version": env!("CARGO_PKG_VERSION"),
            "target_rate": rate,
            "max_gpus": a.max_gpus,
            "routing": "weighted-least-outstanding",
            "prices": {"source": prices.source, "date": prices.date, "currency": prices.currency},
            "plans": plans.iter().map(|p| p.json.clone()).collect::<Vec<_>>(),
            "refused": refused,
        });
        if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
            for (k, x) in e {
                o.insert(k.clone(), x.clone());
            }
        }
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return Ok(());
    }
    outln!("{title}, cheapest first (prices: {}, {} {}):", prices.source, prices.currency, prices.date)?;
    let rows: Vec<Vec<String>> = plans
        .iter()
        .map(|p| {
            let j = &p.json;
            let pools = j["pools"].as_array().cloned().unwrap_or_default();
            let names: Vec<String> = pools
                .iter()
                .map(|x| {
                    format!(
                        "{} TP{} x{}{}",
                        x["gpu"].as_str().unwrap_or(""),
                        x["tp"],
                        x["replicas"],
                        if x["existing"] == true { " (owned)" } else { "" }
                    )
                })
                .collect();
            let shares: Vec<String> =
                pools.iter().map(|x| format!("{:.0}%", x["requests_share"].as_f64().unwrap_or(0.0) * 100.0)).collect();
            vec![
                names.join(" + "),
                format!("{} TP{}: {}", p.gpu, p.tp, band_text(p.new_replicas, &p.band)),
                p.gpus.to_string(),
                num(p.cost_per_hour, 4),
                j["cost_per_million_output_tokens"].as_f64().map_or("-".into(), |v| num(v, 4)),
                j["power_kw"].as_f64().map_or("-".into(), |v| num(v, 4)),
                shares.join(" / "),
            ]
        })
        .collect();
    out!(
        "{}",
        table(
            &["pools", "added (band)", "gpus", "cost/hour", "cost/M output tokens", "power kW", "requests per pool"],
            &rows
        )
    )?;
    super::plan::print_refused(refused, "+ ")
}

/// `--mix`: fleets of two GPU types of --gpus, none owned (see the module's note).
pub fn run_mix(a: &PlanArgs, catalog: &Catalog, prices: &PriceTable, gpus: &[String], rate: f64) -> Result<()> {
    let c = &a.capacity;
    let q = super::capacity::question(c)?;
    if let Some(n) = c.requests_per_replica.filter(|n| !(1..=1_000_000).contains(n)) {
        return Err(Error::flag("--requests-per-replica", format!("must be in 1..=1000000, got {n}")));
    }
    if gpus.len() < 2 {
        return Err(Error::flag("--mix", "mixes two GPU types: give at least two in --gpus"));
    }
    // One deployment per GPU type: its first tensor-parallel degree that runs.
    let mut decks: Vec<(Profile, GpuPrice)> = Vec::new();
    let mut refused: Vec<serde_json::Value> = Vec::new();
    for Candidate { spec, price, profile: p, .. } in candidates(a, catalog, prices, gpus, false, &mut refused)? {
        if decks.iter().any(|(d, _)| d.gpu.name == spec.name) {
            continue;
        }
        if !q.template.is_trace() {
            capsim::workload::check_context(&q.template.classes, p.arch.max_context, &p.arch.name)?;
        }
        decks.push((p, price));
    }
    let turns = q.template.conversation.as_ref().map_or(1.0, |c| c.turns.mean());
    let tok_h = rate * turns * q.template.at(LoadAxis::Rate, rate).map_or(0.0, |w| w.mean_output_tokens()) * 3600.0;
    let pb = super::progress_bar(0, "simulations");
    let tick = || pb.inc(1);
    let mut plans: Vec<MixedPlan> = Vec::new();
    // Types whose own replicas serve the rate before a second type is needed: (name, replicas).
    let mut alone: Vec<(String, u32)> = Vec::new();
    for i in 0..decks.len() {
        for j in i + 1..decks.len() {
            let ((pa, pra), (pb_, prb)) = (&decks[i], &decks[j]);
            let (ta, tb) = (pa.tensor_parallel, pb_.tensor_parallel);
            pb.set_message(format!("{} + {}", pa.gpu.name, pb_.gpu.name));
            let mut k = 1u32;
            // After a count of the first type that no count of the second completes, the next is
            // tried at the most of the second first: where no fleet meets the SLO, one simulation
            // per count instead of a gallop each (H100 + H200 at an unattainable TTFT ran past 300 s).
            let mut none_before = false;
            while k * ta < a.max_gpus {
                let max_new = (a.max_gpus - k * ta) / tb;
                let ans = size_mixed(
                    &[(pa, k)],
                    pb_,
                    &q,
                    rate,
                    c.requests_per_replica,
                    NewCounts { max: max_new, top_first: none_before },
                    &tick,
                )?;
                none_before = ans.new_replicas.is_none();
                match ans.new_replicas {
                    // The first type alone serves the rate: more of it mixes nothing.
                    Some(0) => {
                        if !alone.iter().any(|(g, _)| *g == pa.gpu.name) {
                            alone.push((pa.gpu.name.clone(), k));
                        }
                        break;
                    }
                    Some(n) => {
                        let band = fleet_band(n, &[(pa, k)], pb_, |ex, new| {
                            let counts = NewCounts::up_to(max_new);
                            Ok(size_mixed(ex, new, &q, rate, c.requests_per_replica, counts, &tick)?.new_replicas)
                        })?;
                        let cost = (k * ta) as f64 * pra.price_per_hour + (n * tb) as f64 * prb.price_per_hour;
                        let owned = [(pa.clone(), k, pra.clone())];
                        let mut json = plan_json(&owned, (pb_, n, prb), &ans, cost, tok_h, false);
                        for (v, slo) in json["slo_values"].as_array_mut().into_iter().flatten().zip(&q.slos) {
                            v["limit"] = json!(slo.limit);
                        }
                        json["band"] =
                            added_band_json(&band, tb, prb.price_per_hour, (k * ta) as f64 * pra.price_per_hour);
                        plans.push(MixedPlan {
                            gpu: pb_.gpu.name.clone(),
                            tp: tb,
                            new_replicas: n,
                            gpus: k * ta + n * tb,
                            cost_per_hour: cost,
                            json,
                            band,
                        });
                    }
                    None => {}
                }
                k += 1;
            }
        }
    }
    pb.finish_and_clear();
    plans.sort_by(|x, y| x.cost_per_hour.total_cmp(&y.cost_per_hour).then(x.gpus.cmp(&y.gpus)));
    let title = format!("plans mixing two GPU types for {} requests/s within the SLO", num(rate, 4));
    print_plans(a, prices, rate, &title, json!({"mix": true}), &plans, &refused)?;
    if plans.is_empty() {
        return Err(Error::NoAnswer(no_mix_message(&alone, a.max_gpus)));
    }
    Ok(())
}

/// Why `plan --mix` has no plan: where a type's own replicas already serve the rate before any of a
/// second type is added, that, rather than an SLO no fleet meets.
fn no_mix_message(alone: &[(String, u32)], max_gpus: u32) -> String {
    if alone.is_empty() {
        return format!("no mix of two GPU types within --max-gpus {max_gpus} meets the SLO");
    }
    let served: Vec<String> =
        alone.iter().map(|(g, k)| format!("{k} replica{} of {g}", if *k == 1 { "" } else { "s" })).collect();
    format!(
        "no mix of two GPU types is needed: {} alone serves the rate within the SLO, so a second type adds nothing; `plan` without --mix sizes single-type fleets",
        served.join(" or ")
    )
}
