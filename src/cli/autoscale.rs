//! `capsim simulate --autoscale POLICY.toml`: the workload on a fleet whose replica count the policy
//! changes over simulated time (capsim::sim::simulate_autoscaled), reported per bucket (an hour by
//! default): requests, latency, SLO attainment, replicas and their cost.

use super::goodput_slo;
use super::simulate::{workload_of, SimulateArgs};
use capsim::autoscale::AutoscalePolicy;
use capsim::error::{Error, Result};
use capsim::report::{num, table};
use capsim::sim::{simulate_autoscaled, AutoscaleBucket, AutoscaleOutput, GapHistogram, SimOptions};
use capsim::workload::Arrivals;
use serde_json::json;
use std::path::Path;

pub fn run(a: &SimulateArgs, policy_path: &Path) -> Result<()> {
    for (flag, given) in [
        ("--per-request", a.per_request.is_some()),
        ("--save-vllm-result", a.save_vllm_result.is_some()),
        ("--concurrency", a.concurrency.is_some()),
        ("--burst", a.burst.is_some()),
    ] {
        if given {
            return Err(Error::flag(
                flag,
                "does not apply with --autoscale (an autoscaled fleet serves an open loop or a trace: --rate, a --workload schedule, --trace)",
            ));
        }
    }
    let text = capsim::error::read_file(policy_path)?;
    let policy = AutoscalePolicy::parse(&policy_path.display().to_string(), &text)?;
    let catalog = a.profile.catalog()?;
    let p = a.profile.resolve(&catalog)?;
    let w = workload_of(a)?;
    w.check_context(p.arch.max_context, &p.arch.name)?;
    if matches!(w.spec.arrivals, Arrivals::ClosedLoop { .. } | Arrivals::Burst { .. }) {
        return Err(Error::flag(
            "--autoscale",
            "needs an open loop or a trace (--rate, a --workload with a rate schedule, --trace): a closed loop's load would change with the fleet",
        ));
    }
    if !(a.horizon.is_finite() && a.horizon > 0.0) {
        return Err(Error::flag("--horizon", "must be a positive number of seconds"));
    }
    let slo = goodput_slo(a.goodput_ttft_s, a.goodput_itl_ms, a.goodput_e2e_s)?;
    let out =
        simulate_autoscaled(&p, &w, a.seed, SimOptions { horizon_s: a.horizon, ..Default::default() }, &policy, &slo);
    let gpus = p.tensor_parallel as f64;
    let gpu_hours = out.replica_seconds * gpus / 3600.0;
    let cost = policy.price_per_gpu_hour.map(|c| c * gpu_hours);
    if a.json {
        let v = json!({
            "capsim_version": env!("CARGO_PKG_VERSION"),
            "seed": a.seed,
            "profile": p.name(),
            "gpus_per_replica": p.tensor_parallel,
            "policy": policy,
            "startup_delay_s": out.startup_delay_s,
            "requests_sent": out.requests_sent,
            "requests_completed": out.requests_completed,
            "requests_rejected": out.requests_rejected,
            "requests_unfinished": out.requests_unfinished,
            "requests_lost": out.requests_rejected + out.requests_unfinished,
            "slo_met_share": share(out.buckets.iter().map(|b| b.slo_met).sum(), out.requests_completed),
            "ttft_s": stats_s(&out.ttft),
            "tpot_ms": stats_ms(&out.tpot),
            "replica_hours": out.replica_seconds / 3600.0,
            "gpu_hours": gpu_hours,
            "cost": cost,
            "scale_ups": out.scale_ups,
            "scale_downs": out.scale_downs,
            "replicas_max": out.replicas_max,
            "end_s": out.end_s,
            "buckets": out.buckets.iter().map(|b| bucket_json(b, gpus, policy.price_per_gpu_hour)).collect::<Vec<_>>(),
            "timeline": out.timeline,
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return Ok(());
    }
    out!("{}", text_report(p.name(), &policy, &out, gpus, cost))?;
    Ok(())
}

fn share(n: u64, of: u64) -> Option<f64> {
    (of > 0).then(|| n as f64 / of as f64)
}

/// p50, p95, p99 and the mean of a histogram of nanoseconds, scaled (null when empty).
fn stats(h: &GapHistogram, scale: f64) -> serde_json::Value {
    if h.count() == 0 {
        return json!({"mean": null, "p50": null, "p95": null, "p99": null});
    }
    json!({
        "mean": h.mean_s() * scale,
        "p50": h.percentile_s(50.0) * scale,
        "p95": h.percentile_s(95.0) * scale,
        "p99": h.percentile_s(99.0) * scale,
    })
}

fn stats_s(h: &GapHistogram) -> serde_json::Value {
    stats(h, 1.0)
}

fn stats_ms(h: &GapHistogram) -> serde_json::Value {
    stats(h, 1e3)
}

fn bucket_json(b: &AutoscaleBucket, gpus: f64, price: Option<f64>) -> serde_json::Value {
    let mut v = serde_json::to_value(b).expect("bucket serializes");
    let o = v.as_object_mut().expect("object");
    let gpu_hours = b.replica_seconds * gpus / 3600.0;
    o.insert("gpu_hours".into(), json!(gpu_hours));
    o.insert("cost".into(), json!(price.map(|c| c * gpu_hours)));
    o.insert("ttft_s".into(), stats_s(&b.ttft));
    o.insert("tpot_ms".into(), stats_ms(&b.tpot));
    for (k, n) in
        [("slo_met_share", b.slo_met), ("slo_ttft_met_share", b.slo_ttft_met), ("slo_itl_met_share", b.slo_itl_met)]
    {
        o.insert(k.into(), json!(share(n, b.requests_completed)));
    }
    v
}

fn text_report(profile: &str, policy: &AutoscalePolicy, out: &AutoscaleOutput, gpus: f64, cost: Option<f64>) -> String {
    let mut t = format!(
        "autoscaled fleet of {profile} ({gpus} GPUs per replica): {:?} per ready replica, target {}, {}..{} replicas, evaluated every {} s; a new replica serves {} s after it is asked for\n\n",
        policy.metric,
        num(policy.target, 4),
        policy.min_replicas,
        policy.max_replicas,
        num(policy.interval_s, 4),
        num(out.startup_delay_s, 4)
    );
    let pct = |n: u64, of: u64| share(n, of).map_or("-".into(), |x| format!("{:.1}%", x * 100.0));
    let q = |h: &GapHistogram, p: f64, scale: f64| {
        if h.count() == 0 {
            "-".into()
        } else {
            num(h.percentile_s(p) * scale, 4)
        }
    };
    let rows: Vec<Vec<String>> = out
        .buckets
        .iter()
        .map(|b| {
            vec![
                num(b.start_s / 3600.0, 4),
                b.requests_sent.to_string(),
                b.requests_completed.to_string(),
                q(&b.ttft, 50.0, 1.0),
                q(&b.ttft, 95.0, 1.0),
                q(&b.tpot, 50.0, 1e3),
                pct(b.slo_met, b.requests_completed),
                b.replicas_max.to_string(),
                num(b.replica_seconds * gpus / 3600.0, 4),
            ]
        })
        .collect();
    t += &table(
        &[
            "start h",
            "sent",
            "completed",
            "TTFT p50 s",
            "TTFT p95 s",
            "TPOT p50 ms",
            "SLO met",
            "replicas max",
            "GPU-hours",
        ],
        &rows,
    );
    let gpu_hours = out.replica_seconds * gpus / 3600.0;
    t += &format!(
        "\n{} requests sent, {} completed, {} lost ({} rejected, {} unfinished); SLO met by {} of those completed\nGPU-hours {}{}; {} replicas started, {} removed, at most {} held at once\n",
        out.requests_sent,
        out.requests_completed,
        out.requests_rejected + out.requests_unfinished,
        out.requests_rejected,
        out.requests_unfinished,
        pct(out.buckets.iter().map(|b| b.slo_met).sum(), out.requests_completed),
        num(gpu_hours, 4),
        cost.map_or(String::new(), |c| format!(", cost {}", num(c, 4))),
        out.scale_ups,
        out.scale_downs,
        out.replicas_max
    );
    t
}
