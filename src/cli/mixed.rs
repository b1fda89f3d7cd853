//! `capsim simulate --pool SPEC --pool SPEC ...`: a mixed fleet, pools of different GPU types (and
//! tensor-parallel degrees) of the same model and engine behind the weighted least-outstanding
//! router (capsim::sim::simulate_mixed); the metrics of each pool and of the fleet.

use super::goodput_slo;
use super::simulate::{summary_table, workload_of, SimulateArgs};
use capsim::error::{Error, Result};
use capsim::metrics::summarize;
use capsim::report::{num, table};
use capsim::sim::{replica_speed, simulate_mixed, SimOptions, SimOutput};
use serde_json::json;

/// One `--pool` value: `GPU[:tp=N][:replicas=N]`, e.g. `B200:replicas=2` or `H100 SXM:tp=2:replicas=3`.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSpec {
    pub gpu: String,
    pub tp: Option<u32>,
    pub replicas: u32,
    /// The value as given, for the errors about this pool.
    pub entry: String,
}

/// A pool's deployment: the shared deployment flags with the pool's GPU and TP. An error about
/// that GPU or TP is the pool's, so it names `flag` (--pool, --existing) and the entry, not --gpu
/// or --tp, which the user did not give.
pub fn resolve_pool(
    base: &super::deploy::ProfileArgs,
    spec: &PoolSpec,
    flag: &str,
    catalog: &capsim::catalog::Catalog,
) -> Result<capsim::profile::Profile> {
    let mut pa = base.clone();
    pa.gpu = Some(spec.gpu.clone());
    pa.tp = spec.tp;
    pa.resolve(catalog).map_err(|e| match e {
        Error::Input { at, msg }
            if at.source == "command line" && matches!(at.field.as_deref(), Some("--gpu" | "--tp")) =>
        {
            Error::flag(flag, format!("`{}`: {msg}", spec.entry))
        }
        other => other,
    })
}

pub fn parse_pool(s: &str) -> Result<PoolSpec> {
    let mut parts = s.split(':');
    let gpu = parts.next().unwrap_or("").trim().to_string();
    if gpu.is_empty() {
        return Err(Error::flag("--pool", format!("`{s}`: starts with a GPU name, e.g. \"H100 SXM:replicas=2\"")));
    }
    let mut spec = PoolSpec { gpu, tp: None, replicas: 1, entry: s.to_string() };
    for kv in parts {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Error::flag("--pool", format!("`{kv}` in `{s}`: expected key=value (tp, replicas)")))?;
        let n: u32 = v
            .trim()
            .parse()
            .map_err(|_| Error::flag("--pool", format!("`{kv}` in `{s}`: {k} must be a whole number")))?;
        match k.trim() {
            "tp" if (1..=capsim::profile::MAX_TENSOR_PARALLEL).contains(&n) => spec.tp = Some(n),
            "replicas" if (1..=10_000).contains(&n) => spec.replicas = n,
            "tp" | "replicas" => {
                return Err(Error::flag(
                    "--pool",
                    format!(
                        "`{kv}` in `{s}`: tp must be in 1..={}, replicas in 1..=10000",
                        capsim::profile::MAX_TENSOR_PARALLEL
                    ),
                ))
            }
            other => return Err(Error::flag("--pool", format!("`{other}` in `{s}`: unknown key (tp, replicas)"))),
        }
    }
    Ok(spec)
}

pub fn run(a: &SimulateArgs) -> Result<()> {
    for (flag, given) in [
        ("--per-request", a.per_request.is_some()),
        ("--save-vllm-result", a.save_vllm_result.is_some()),
        ("--autoscale", a.autoscale.is_some()),
        ("--gpu", a.profile.gpu.is_some()),
        ("--tp", a.profile.tp.is_some()),
    ] {
        if given {
            return Err(Error::flag(flag, "does not apply with --pool (each pool names its GPU and TP)"));
        }
    }
    let specs: Vec<PoolSpec> = a.pool.iter().map(|s| parse_pool(s)).collect::<Result<_>>()?;
    let catalog = a.profile.catalog()?;
    let mut profiles = Vec::new();
    for s in &specs {
        profiles.push(resolve_pool(&a.profile, s, "--pool", &catalog)?);
    }
    let w = workload_of(a)?;
    for p in &profiles {
        w.check_context(p.arch.max_context, &p.arch.name)?;
    }
    if !(a.horizon.is_finite() && a.horizon > 0.0) {
        return Err(Error::flag("--horizon", "must be a positive number of seconds"));
    }
    let slo = goodput_slo(a.goodput_ttft_s, a.goodput_itl_ms, a.goodput_e2e_s)?;
    let pools: Vec<(&capsim::profile::Profile, u32)> =
        profiles.iter().zip(&specs).map(|(p, s)| (p, s.replicas)).collect();
    let outs = simulate_mixed(&pools, &w, a.seed, SimOptions { horizon_s: a.horizon, ..Default::default() });
    let sum = |o: &SimOutput| summarize(o, 0, 0, w.spec.warmup_s, &slo);
    let mut all = outs[0].clone();
    for o in &outs[1..] {
        all.absorb(o.clone());
    }
    // Each pool's busy time is its replicas' mean: the fleet's is the mean over every replica.
    let replicas: u64 = specs.iter().map(|s| s.replicas as u64).sum();
    all.busy_ns = outs.iter().zip(&specs).map(|(o, s)| o.busy_ns * s.replicas as u64).sum::<u64>() / replicas.max(1);
    all.records.sort_by_key(|r| r.id);
    all.requests_sent = all.records.len() as u64 + all.requests_rejected + all.requests_unfinished;
    let fleet = summarize(&all, w.spec.warmup_requests, w.spec.cooldown_requests, w.spec.warmup_s, &slo);
    let total = all.requests_sent.max(1) as f64;
    if a.json {
        let pools_json: Vec<_> = profiles
            .iter()
            .zip(&specs)
            .zip(&outs)
            .map(|((p, s), o)| {
                json!({
                    "gpu": p.gpu.name, "tp": p.tensor_parallel, "replicas": s.replicas, "profile": p.name(),
                    "replica_speed_tok_s": replica_speed(p), "requests_share": o.requests_sent as f64 / total,
                    "summary": sum(o),
                })
            })
            .collect();
        let v = json!({"capsim_version": env!("CARGO_PKG_VERSION"), "seed": a.seed, "routing": "weighted-least-outstanding", "pools": pools_json, "fleet": fleet});
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = profiles
        .iter()
        .zip(&specs)
        .zip(&outs)
        .map(|((p, s), o)| {
            let m = sum(o);
            vec![
                p.gpu.name.clone(),
                p.tensor_parallel.to_string(),
                s.replicas.to_string(),
                num(replica_speed(p), 4),
                format!("{:.1}%", o.requests_sent as f64 / total * 100.0),
                num(m.ttft_s.p50, 4),
                num(m.ttft_s.p95, 4),
                num(m.tpot_ms.p50, 4),
            ]
        })
        .collect();
    outln!("mixed fleet behind a weighted least-outstanding router (weights: decode tokens/s of a replica at 32 sequences, context 2,048):")?;
    out!(
        "{}",
        table(&["gpu", "tp", "replicas", "speed tok/s", "requests", "TTFT p50 s", "TTFT p95 s", "TPOT p50 ms"], &rows)
    )?;
    outln!("\nfleet:")?;
    out!("{}", summary_table(&fleet))?;
    Ok(())
}
