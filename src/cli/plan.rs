//! `capsim plan`: the cheapest fleet meeting the SLO at a target rate, over the GPUs and
//! tensor-parallel degrees asked about, with the runner-ups. Each candidate deployment is sized by
//! capacity's fleet search (the fewest replicas meeting the SLO, simulated jointly behind the
//! router), priced and powered from the price table (capsim::plan). Two other questions share the
//! flags: over a rate curve instead of a rate (plan_day.rs), and new replicas beside pools already
//! owned (--existing, plan_mixed.rs).

use super::capacity::{self, CapacityArgs, Outcome};
use capsim::catalog::{Catalog, GpuSpec};
use capsim::error::{Error, Result};
use capsim::plan::{fleet_power_w, GpuPrice, PriceTable, ReplicaBand};
use capsim::report::{num, table};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct PlanArgs {
    /// The deployment, workload and question flags of `capsim capacity`: --gpus (required: the GPU
    /// types to consider), --target-rate (or a rate curve: --workload with a rate schedule, or
    /// --trace), --slo or --preset, --routing, --requests-per-replica, --seeds.
    #[command(flatten)]
    pub capacity: CapacityArgs,
    /// Tensor-parallel degrees to consider (default: --tp if given, else 1, 2, 4 and 8 where the
    /// model fits and the GPU's NVLink domain holds them).
    #[arg(long, value_delimiter = ',', help_heading = "Plan")]
    pub tps: Option<Vec<u32>>,
    /// Price and power table (TOML, models/prices.toml's format); default: the built-in table, whose
    /// prices are placeholders dated in the file.
    #[arg(long, help_heading = "Plan")]
    pub price_file: Option<PathBuf>,
    /// Consider no fleet of more GPUs than this.
    #[arg(long, default_value_t = 64, help_heading = "Plan")]
    pub max_gpus: u32,
    /// A pool already owned, GPU[:tp=N][:replicas=N] (repeatable): each plan adds the fewest
    /// replicas of one GPU type of --gpus to these pools, the mixed fleet simulated behind the
    /// weighted least-outstanding router at --target-rate.
    #[arg(long, help_heading = "Plan")]
    pub existing: Vec<String>,
    /// At --target-rate: plans mixing two GPU types of --gpus (each pair, none owned: every count of
    /// the first with the fewest replicas of the second), each type at its first TP that runs.
    #[arg(long, help_heading = "Plan")]
    pub mix: bool,
    /// Over a rate curve (--workload with a rate schedule, or --trace; no --target-rate): also plan
    /// the fleet this autoscaling policy scales (its min and max replicas, the max capped by
    /// --max-gpus), beside the fixed fleet that holds the curve.
    #[arg(long, help_heading = "Plan")]
    pub autoscale: Option<PathBuf>,
    /// Over a rate curve: the SLO must hold in every bucket of this many seconds (by send time).
    /// Default: the --autoscale policy's bucket_s, else 3600.
    #[arg(long, help_heading = "Plan")]
    pub bucket_s: Option<f64>,
    /// Over a trace: its peak rate is its busiest window of this many seconds (the starting point
    /// of the fixed fleet's search).
    #[arg(long, default_value_t = 300.0, help_heading = "Plan")]
    pub peak_window_s: f64,
}

/// Flags of capacity that a plan does not take, and the plan's own bounds.
pub(super) fn check_flags(a: &PlanArgs) -> Result<()> {
    let c = &a.capacity;
    for (flag, given) in [
        ("--svg", c.svg.is_some()),
        ("--csv", c.csv),
        ("--gpu-price-per-hour", c.gpu_price_per_hour.is_some()),
        ("--load", c.load.is_some()),
        ("--jsonl", c.scale_out.jsonl),
    ] {
        if given {
            return Err(Error::flag(
                flag,
                "does not apply to plan (prices come from --price-file, the size from --max-gpus)",
            ));
        }
    }
    if c.max_replicas != super::capacity::DEFAULT_MAX_REPLICAS {
        return Err(Error::flag("--max-replicas", "does not apply to plan: bound the fleet with --max-gpus"));
    }
    // Plans are fleets of aggregated replicas; the disaggregated split has its own search.
    let why = "plan sizes fleets of aggregated replicas; size a disaggregated deployment with capsim capacity --disaggregated --target-rate R";
    if c.disaggregated {
        return Err(Error::flag("--disaggregated", why));
    }
    c.profile.refuse_pools(why)?;
    if a.max_gpus == 0 || a.max_gpus > 100_000 {
        return Err(Error::flag("--max-gpus", format!("must be in 1..=100000, got {}", a.max_gpus)));
    }
    if let Some(tps) = &a.tps {
        if let Some(bad) = tps.iter().find(|&&t| t == 0 || t > capsim::profile::MAX_TENSOR_PARALLEL) {
            return Err(Error::flag(
                "--tps",
                format!("each degree must be in 1..={}, got {bad}", capsim::profile::MAX_TENSOR_PARALLEL),
            ));
        }
    }
    Ok(())
}

/// The price table: --price-file, else the built-in one.
pub(super) fn prices(a: &PlanArgs) -> Result<PriceTable> {
    match &a.price_file {
        Some(path) => PriceTable::parse(&path.display().to_string(), &capsim::error::read_file(path)?),
        None => Ok(PriceTable::builtin()),
    }
}

/// The GPU types asked about, each priced before anything runs.
pub(super) fn gpus(a: &PlanArgs, catalog: &Catalog, prices: &PriceTable) -> Result<Vec<String>> {
    let Some(gpus) = a.capacity.gpus.clone() else {
        return Err(Error::flag(
            "--gpus",
            "plan needs the GPU types to consider, e.g. --gpus \"H100 SXM,H200 SXM,B200\"",
        ));
    };
    for g in &gpus {
        let spec = catalog.gpu(g)?;
        prices.get(&spec.name)?;
    }
    Ok(gpus)
}

/// The tensor-parallel degrees considered on a GPU: --tps, else --tp, else 1, 2, 4 and 8 within its
/// NVLink domain.
pub(super) fn tps_of(a: &PlanArgs, spec: &GpuSpec) -> Vec<u32> {
    match (&a.tps, a.capacity.profile.tp) {
        (Some(t), _) => t.clone(),
        (None, Some(t)) => vec![t],
        (None, None) => [1, 2, 4, 8].into_iter().filter(|&t| t <= spec.link_domain_gpus.max(1)).collect(),
    }
}

/// One deployment a plan may use: a GPU of --gpus at a TP of --tps, resolved on that GPU, with its
/// price.
pub(super) struct Candidate {
    pub spec: GpuSpec,
    pub price: GpuPrice,
    pub tp: u32,
    pub profile: capsim::profile::Profile,
}

/// Every GPU of `gpus` at every TP of [`tps_of`], each deployment resolved on its own GPU. One that
/// cannot run (does not fit, heads do not divide) or, when `cap_replica`, needs more GPUs than
/// --max-gpus for one replica is a refusal of that candidate, pushed to `refused` with its reason;
/// any other error (an unknown GPU, a GPU without a price) is the question's and ends the plan.
pub(super) fn candidates(
    a: &PlanArgs,
    catalog: &Catalog,
    prices: &PriceTable,
    gpus: &[String],
    cap_replica: bool,
    refused: &mut Vec<serde_json::Value>,
) -> Result<Vec<Candidate>> {
    let mut out = Vec::new();
    for g in gpus {
        let spec = catalog.gpu(g)?.clone();
        let price = prices.get(&spec.name)?.clone();
        for tp in tps_of(a, &spec) {
            let refuse = |reason: String| json!({"gpu": spec.name, "tensor_parallel": tp, "reason": reason});
            if cap_replica && tp > a.max_gpus {
                refused.push(refuse(format!("one replica needs {tp} GPUs, above --max-gpus {}", a.max_gpus)));
                continue;
            }
            let mut pa = a.capacity.profile.clone();
            pa.gpu = Some(g.clone());
            pa.tp = Some(tp);
            match pa.resolve(catalog) {
                Ok(profile) => out.push(Candidate { spec: spec.clone(), price: price.clone(), tp, profile }),
                Err(e) => refused.push(refuse(e.to_string())),
            }
        }
    }
    Ok(out)
}

/// A plan: one pool of one deployment.
struct Plan {
    gpu: String,
    tp: u32,
    replicas: u32,
    gpus: u32,
    cost_per_hour: f64,
    row: serde_json::Value,
    power_kw: f64,
    /// Offered rate over the fleet's SLO capacity (replicas x one replica's rate within the SLO).
    utilization: f64,
    band: ReplicaBand,
    price_per_gpu_hour: f64,
}

/// A band of replicas as JSON, with the cost per hour of each end.
pub(super) fn band_json(b: &ReplicaBand, gpus_per_replica: u32, price_per_gpu_hour: f64) -> serde_json::Value {
    let cost = |k: Option<u32>| k.map(|k| (k * gpus_per_replica) as f64 * price_per_gpu_hour);
    json!({
        "replicas": {"low": b.low, "high": b.high},
        "cost_per_hour": {"low": cost(b.low), "high": cost(b.high)},
        "from_sigmas": b.from_sigmas,
    })
}

/// "4", or "4 (3 to 5)" with a band, "4 (3 to -)" when the slow end finds no fleet.
pub(super) fn band_text(k: u32, b: &ReplicaBand) -> String {
    if b.low == Some(k) && b.high == Some(k) {
        return k.to_string();
    }
    let end = |x: Option<u32>| x.map_or("-".to_string(), |x| x.to_string());
    format!("{k} ({} to {})", end(b.low), end(b.high))
}

pub fn run(a: PlanArgs) -> Result<()> {
    let c = &a.capacity;
    check_flags(&a)?;
    let prices = prices(&a)?;
    let catalog = c.profile.catalog()?;
    let gpus = gpus(&a, &catalog, &prices)?;
    let Some(rate) = c.target_rate else {
        if c.workload.workload.is_some() || c.workload.trace.is_some() {
            return super::plan_day::run(&a, &catalog, &prices, &gpus);
        }
        return Err(Error::flag(
            "--target-rate",
            "plan needs the rate the fleet must serve (requests/s), or a rate curve: --workload with a rate schedule, or --trace",
        ));
    };
    for (flag, given) in [("--autoscale", a.autoscale.is_some()), ("--bucket-s", a.bucket_s.is_some())] {
        if given {
            return Err(Error::flag(
                flag,
                "applies to a plan over a rate curve (--workload or --trace, no --target-rate)",
            ));
        }
    }
    if a.mix {
        if !a.existing.is_empty() {
            return Err(Error::flag(
                "--mix",
                "mixes new pools; with --existing each plan adds one type to the owned pools",
            ));
        }
        return super::plan_mixed::run_mix(&a, &catalog, &prices, &gpus, rate);
    }
    if !a.existing.is_empty() {
        return super::plan_mixed::run(&a, &catalog, &prices, &gpus, rate);
    }
    let pb = super::progress_bar(0, "simulations");
    let tick = || pb.inc(1);
    let mut plans: Vec<Plan> = Vec::new();
    let mut refused: Vec<serde_json::Value> = Vec::new();
    let runnable = candidates(&a, &catalog, &prices, &gpus, true, &mut refused)?;
    let searched = runnable.len();
    for Candidate { spec, price, tp, .. } in runnable {
        let mut ca = c.clone();
        ca.gpus = Some(vec![spec.name.clone()]);
        ca.profile.tp = Some(tp);
        ca.gpu_price_per_hour = Some(price.price_per_hour);
        ca.max_replicas = a.max_gpus / tp;
        pb.set_message(format!("{} x{tp}", spec.name));
        let prep = capacity::prepare(&ca)?;
        let outcome = prep.run_one(0, &tick)?;
        let Outcome::Fleet(ans) = &outcome else { unreachable!("--target-rate asks a fleet question") };
        let row = prep.json_one(0, &outcome);
        let Some(k) = ans.replicas else {
            refused.push(json!({"gpu": spec.name, "tensor_parallel": tp, "reason": format!("no fleet of up to {} GPUs meets the SLO", a.max_gpus)}));
            continue;
        };
        // The fleet's load as a share of what it serves within the SLO: a replica at its SLO
        // capacity counts as fully busy (a step running is not: a small decode batch keeps the
        // GPU stepping far below its power limit). The one-replica search stops at the target
        // rate, so a one-replica plan counts as fully used (its power an upper bound).
        let utilization = (rate / (k as f64 * ans.single_replica_rate)).clamp(0.0, 1.0);
        let n = k * tp;
        let (p0, fq) = (&prep.profiles[0], prep.fleet.as_ref().expect("a fleet question"));
        let band = ReplicaBand::find(k, &[p0], |sign| {
            Ok(capsim::capacity::size_fleet(&capsim::capacity::perturbed(p0, sign), &prep.q, fq, &tick)?.replicas)
        })?;
        plans.push(Plan {
            gpu: spec.name.clone(),
            tp,
            replicas: k,
            gpus: n,
            cost_per_hour: n as f64 * price.price_per_hour,
            power_kw: fleet_power_w(&price, n, utilization) / 1e3,
            utilization,
            row,
            band,
            price_per_gpu_hour: price.price_per_hour,
        });
    }
    pb.finish_and_clear();
    plans.sort_by(|x, y| x.cost_per_hour.total_cmp(&y.cost_per_hour).then(x.gpus.cmp(&y.gpus)).then(x.gpu.cmp(&y.gpu)));
    let plan_json: Vec<serde_json::Value> = plans
        .iter()
        .map(|p| {
            let r = &p.row;
            let neighbour = r["search"]["candidates"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["replicas"] == json!(p.replicas - 1)).cloned());
            json!({
                "pools": [{"gpu": p.gpu, "tp": p.tp, "replicas": p.replicas, "gpus": p.gpus}],
                "gpus": p.gpus,
                "cost_per_hour": p.cost_per_hour,
                "cost_per_million_output_tokens": r["cost_per_million_output_tokens"],
                "slo_met": true,
                "slo_values": r["slo_values"],
                "utilization": p.utilization,
                "power_kw": p.power_kw,
                "energy_kwh_per_day": p.power_kw * 24.0,
                "extrapolation": r["extrapolation"],
                "one_replica_fewer": neighbour,
                "band": band_json(&p.band, p.tp, p.price_per_gpu_hour),
                "search": r["search"],
            })
        })
        .collect();
    if c.json {
        let v = json!({
            "capsim_version": env!("CARGO_PKG_VERSION"),
            "target_rate": rate,
            "max_gpus": a.max_gpus,
            "prices": {"source": prices.source, "date": prices.date, "currency": prices.currency},
            "plans": plan_json,
            "refused": refused,
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
    } else {
        outln!(
            "plans for {} requests/s within the SLO, cheapest first (prices: {}, {} {}):",
            num(rate, 4),
            prices.source,
            prices.currency,
            prices.date
        )?;
        let rows: Vec<Vec<String>> = plans
            .iter()
            .zip(&plan_json)
            .map(|(p, j)| {
                vec![
                    p.gpu.clone(),
                    p.tp.to_string(),
                    band_text(p.replicas, &p.band),
                    p.gpus.to_string(),
                    num(p.cost_per_hour, 4),
                    j["cost_per_million_output_tokens"].as_f64().map_or("-".into(), |v| num(v, 4)),
                    format!("{:.0}%", p.utilization * 100.0),
                    num(p.power_kw, 4),
                ]
            })
            .collect();
        out!(
            "{}",
            table(
                &["gpu", "tp", "replicas", "gpus", "cost/hour", "cost/M output tokens", "utilization", "power kW"],
                &rows
            )
        )?;
        print_refused(&refused, "")?;
    }
    if plans.is_empty() && searched == 0 {
        // Nothing was searched: every candidate was refused before any SLO (a layout flag that fits
        // no GPU and TP, a model too large for --max-gpus), which the lines above name.
        return Err(Error::NoAnswer(format!(
            "no deployment of --gpus at any TP within --max-gpus {} can run, so no SLO was searched (each candidate's reason: the `not a plan` lines, or `refused` in --json)",
            a.max_gpus
        )));
    }
    if plans.is_empty() {
        return Err(Error::NoAnswer(format!("no plan within --max-gpus {} meets the SLO", a.max_gpus)));
    }
    Ok(())
}

/// The candidates refused, one line each (`prefix` before the GPU: "+ " where it is added to owned
/// pools).
pub(super) fn print_refused(refused: &[serde_json::Value], prefix: &str) -> Result<()> {
    for r in refused {
        outln!(
            "not a plan: {prefix}{} x{}: {}",
            r["gpu"].as_str().unwrap_or(""),
            r["tensor_parallel"],
            r["reason"].as_str().unwrap_or("")
        )?;
    }
    Ok(())
}
