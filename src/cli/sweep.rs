//! `capsim sweep`: many loads, one row each, in parallel.

use super::{LengthArgs, ProfileArgs};
use capsim::error::{Error, Result};
use capsim::metrics::RequestSlo;
use capsim::report::{csv, num, table};
use capsim::sweep::run_sweep;
use capsim::workload::LoadAxis;
use clap::Args;
use serde_json::json;

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    #[command(flatten)]
    pub lengths: LengthArgs,
    /// Closed-loop client counts, comma-separated.
    #[arg(long, value_delimiter = ',', group = "axis")]
    pub concurrency: Option<Vec<f64>>,
    /// Burst sizes, comma-separated.
    #[arg(long, value_delimiter = ',', group = "axis")]
    pub burst: Option<Vec<f64>>,
    /// Open-loop rates (requests/s), comma-separated.
    #[arg(long, value_delimiter = ',', group = "axis")]
    pub rate: Option<Vec<f64>>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long)]
    pub json: bool,
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,
}

pub const HEADERS: &[&str] = &[
    "load_kind",
    "load",
    "requests_completed",
    "ttft_s_mean",
    "ttft_s_p50",
    "ttft_s_p99",
    "queue_wait_s_mean",
    "itl_ms_mean",
    "itl_ms_p99",
    "e2e_s_mean",
    "per_user_tok_s_mean",
    "system_output_tok_s",
    "preemptions",
    "kv_util_max",
];

pub fn run(a: SweepArgs) -> Result<()> {
    let catalog = a.profile.catalog()?;
    let p = a.profile.resolve(&catalog)?;
    let t = a.lengths.template()?;
    capsim::workload::check_context(&t.classes, p.arch.max_context, &p.arch.name)?;
    let (axis, loads) = match (&a.concurrency, &a.burst, &a.rate) {
        (Some(v), _, _) => (LoadAxis::Concurrency, v.clone()),
        (_, Some(v), _) => (LoadAxis::Burst, v.clone()),
        (_, _, Some(v)) => (LoadAxis::Rate, v.clone()),
        _ => return Err(Error::flag("--concurrency", "give a list of loads: --concurrency, --burst or --rate")),
    };
    for &l in &loads {
        if !(l.is_finite() && l > 0.0) || (axis.is_integer() && l.fract() != 0.0) {
            return Err(Error::flag(
                &format!("--{}", axis.as_str()),
                format!(
                    "each load must be a positive {}, got {l}",
                    if axis.is_integer() { "integer" } else { "number" }
                ),
            ));
        }
    }
    let points = run_sweep(&p, &t, axis, &loads, a.seed, &RequestSlo::default())?;
    let rows: Vec<Vec<String>> = points
        .iter()
        .map(|pt| {
            let s = &pt.summary;
            vec![
                axis.as_str().to_string(),
                capsim::data::format_value(pt.load),
                s.requests_completed.to_string(),
                num(s.ttft_s.mean, 4),
                num(s.ttft_s.p50, 4),
                num(s.ttft_s.p99, 4),
                num(s.queue_wait_s.mean, 4),
                num(s.itl_ms.mean, 4),
                num(s.itl_ms.p99, 4),
                num(s.e2e_s.mean, 4),
                num(s.per_user_tok_s.mean, 4),
                num(s.system_output_tok_s, 4),
                s.preemptions.to_string(),
                num(s.kv_util_max, 3),
            ]
        })
        .collect();
    if a.json {
        let v = json!({
            "capsim_version": env!("CARGO_PKG_VERSION"),
            "profile": p.name(),
            "retargeted_from": p.retargeted_from,
            "seed": a.seed,
            "template": t,
            "points": points,
        });
        println!("{}", serde_json::to_string_pretty(&v).expect("json"));
    } else if a.csv {
        print!("{}", csv(HEADERS, &rows));
    } else {
        println!("profile: {}{}", p.name(), super::simulate::extrapolation_note(&p));
        print!("{}", table(HEADERS, &rows));
    }
    Ok(())
}
