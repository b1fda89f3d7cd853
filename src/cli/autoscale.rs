//! `capsim simulate --autoscale POLICY.toml`: the workload on a fleet whose replica count the policy
//! changes over simulated time (capsim::sim::simulate_autoscaled), reported per bucket (an hour by
//! default): requests, latency, SLO attainment, replicas, their cost and energy, and with `--html`
//! a page charting replicas and latency over the day.
//!
//! Energy is the utilization-dependent power model of capsim::plan (idle power while held, busy
//! power while stepping) with the GPU's idle and busy watts from the built-in table
//! (models/prices.toml); a GPU it does not list gets no energy figure.

use super::goodput_slo;
use super::simulate::{workload_of, SimulateArgs};
use capsim::autoscale::AutoscalePolicy;
use capsim::error::{Error, Result};
use capsim::plan::{energy_kwh, GpuPrice, PriceTable};
use capsim::report::day::{day_html, DayBucketRow, DayPage};
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
    if let Some(path) = &a.html {
        super::check_output_file("--html", path)?;
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
    let power = PriceTable::builtin().get(&p.gpu.name).ok().cloned();
    let energy =
        power.as_ref().map(|pw| energy_kwh(pw, p.tensor_parallel, out.replica_seconds, out.busy_replica_seconds));
    if let Some(path) = &a.html {
        let page = page(a, p.name(), &policy, &out, gpus, power.as_ref(), energy, cost);
        std::fs::write(path, day_html(&page)).map_err(|err| Error::Io { path: path.display().to_string(), err })?;
    }
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
            "busy_replica_hours": out.busy_replica_seconds / 3600.0,
            "gpu_hours": gpu_hours,
            "cost": cost,
            "energy_kwh": energy,
            "power": power.as_ref().map(|pw| json!({"source": capsim::plan::DEFAULT_PRICES_PATH, "idle_w_per_gpu": pw.idle_w, "busy_w_per_gpu": pw.busy_w})),
            "output_tokens": out.output_tokens,
            "scale_ups": out.scale_ups,
            "scale_downs": out.scale_downs,
            "replicas_max": out.replicas_max,
            "end_s": out.end_s,
            "buckets": out.buckets.iter().map(|b| bucket_json(b, p.tensor_parallel, policy.price_per_gpu_hour, power.as_ref())).collect::<Vec<_>>(),
            "timeline": out.timeline,
        });
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return Ok(());
    }
    out!("{}", text_report(p.name(), &policy, &out, p.tensor_parallel, cost, power.as_ref(), energy))?;
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

fn bucket_json(b: &AutoscaleBucket, tp: u32, price: Option<f64>, power: Option<&GpuPrice>) -> serde_json::Value {
    let mut v = serde_json::to_value(b).expect("bucket serializes");
    let o = v.as_object_mut().expect("object");
    let gpu_hours = b.replica_seconds * tp as f64 / 3600.0;
    o.insert("energy_kwh".into(), json!(power.map(|pw| energy_kwh(pw, tp, b.replica_seconds, b.busy_replica_seconds))));
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

fn text_report(
    profile: &str,
    policy: &AutoscalePolicy,
    out: &AutoscaleOutput,
    tp: u32,
    cost: Option<f64>,
    power: Option<&GpuPrice>,
    energy: Option<f64>,
) -> String {
    let gpus = tp as f64;
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
                power.map_or("-".into(), |pw| num(energy_kwh(pw, tp, b.replica_seconds, b.busy_replica_seconds), 4)),
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
            "energy kWh",
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
    let busy = if out.replica_seconds > 0.0 { out.busy_replica_seconds / out.replica_seconds } else { 0.0 };
    t += &match (power, energy) {
        (Some(pw), Some(e)) => format!(
            "energy {} kWh: {} W idle and {} W busy per GPU ({}), replicas stepping {:.1}% of the time held\n",
            num(e, 4),
            num(pw.idle_w, 4),
            num(pw.busy_w, 4),
            capsim::plan::DEFAULT_PRICES_PATH,
            busy * 100.0
        ),
        _ => format!("energy: no idle and busy power for this GPU in {}\n", capsim::plan::DEFAULT_PRICES_PATH),
    };
    t
}

/// The HTML page's figures: the buckets and the policy's replica count at each evaluation.
#[allow(clippy::too_many_arguments)]
fn page(
    a: &SimulateArgs,
    profile: &str,
    policy: &AutoscalePolicy,
    out: &AutoscaleOutput,
    gpus: f64,
    power: Option<&GpuPrice>,
    energy: Option<f64>,
    cost: Option<f64>,
) -> DayPage {
    let tp = gpus as u32;
    let p95 = |h: &GapHistogram, scale: f64| if h.count() == 0 { f64::NAN } else { h.percentile_s(95.0) * scale };
    let buckets = out
        .buckets
        .iter()
        .map(|b| DayBucketRow {
            start_h: b.start_s / 3600.0,
            end_h: ((b.start_s + policy.bucket_s).min(out.end_s.max(b.start_s))) / 3600.0,
            requests_sent: b.requests_sent,
            replicas_max: b.replicas_max,
            ttft_p95_s: p95(&b.ttft, 1.0),
            tpot_p95_ms: p95(&b.tpot, 1e3),
            slo_met_share: share(b.slo_met, b.requests_completed).unwrap_or(f64::NAN),
            gpu_hours: b.replica_seconds * gpus / 3600.0,
            energy_kwh: power.map_or(f64::NAN, |pw| energy_kwh(pw, tp, b.replica_seconds, b.busy_replica_seconds)),
        })
        .collect();
    let mut keys = vec![
        ("requests sent".to_string(), out.requests_sent.to_string()),
        ("requests lost".to_string(), (out.requests_rejected + out.requests_unfinished).to_string()),
        ("most replicas held".to_string(), out.replicas_max.to_string()),
        ("GPU-hours".to_string(), num(out.replica_seconds * gpus / 3600.0, 4)),
    ];
    if let Some(c) = cost {
        keys.push(("cost".into(), num(c, 4)));
    }
    if let Some(e) = energy {
        keys.push(("energy kWh".into(), num(e, 4)));
    }
    let command = super::command_line();
    DayPage {
        title: format!("{profile}, {}..{} replicas", policy.min_replicas, policy.max_replicas),
        keys,
        buckets,
        replicas: out.timeline.iter().map(|s| (s.t_s / 3600.0, s.ready + s.starting)).collect(),
        ttft_limit_s: a.goodput_ttft_s,
        tpot_limit_ms: a.goodput_itl_ms,
        command,
        version: env!("CARGO_PKG_VERSION").into(),
    }
}
