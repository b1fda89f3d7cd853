//! `capsim sweep`: many loads, one row each, in parallel.

use super::shard::{line, ScaleOutArgs};
use super::{ProfileArgs, WorkloadArgs};
use capsim::error::{Error, Result};
use capsim::metrics::RequestSlo;
use capsim::report::{csv, num, table};
use capsim::sweep::run_sweep_at;
use capsim::workload::LoadAxis;
use clap::Args;
use serde_json::json;

#[derive(Args, Debug)]
pub struct SweepArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Closed-loop client counts, comma-separated.
    #[arg(long, value_delimiter = ',', group = "axis", help_heading = "Load")]
    pub concurrency: Option<Vec<f64>>,
    /// Burst sizes, comma-separated.
    #[arg(long, value_delimiter = ',', group = "axis", help_heading = "Load")]
    pub burst: Option<Vec<f64>>,
    /// Open-loop rates (requests/s), comma-separated.
    #[arg(long, value_delimiter = ',', group = "axis", help_heading = "Load")]
    pub rate: Option<Vec<f64>>,
    /// Multiples of a trace's or a workload file's own rate, comma-separated (2 = twice the traffic).
    #[arg(long, value_delimiter = ',', group = "axis", help_heading = "Load")]
    pub scale: Option<Vec<f64>>,
    /// Seed of the simulations: the same seed gives the same bytes, at any thread count.
    #[arg(long, default_value_t = 0, help_heading = "Run")]
    pub seed: u64,
    /// Print JSON instead of a table.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Print CSV instead of a table.
    #[arg(long, conflicts_with = "json", help_heading = "Output")]
    pub csv: bool,
    #[command(flatten)]
    pub scale_out: ScaleOutArgs,
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

/// A sweep ready to run: every input checked.
pub struct Prepared {
    pub profile: capsim::profile::Profile,
    pub template: capsim::workload::LoadTemplate,
    pub axis: LoadAxis,
    pub loads: Vec<f64>,
    pub seed: u64,
}

pub fn prepare(a: &SweepArgs) -> Result<Prepared> {
    let catalog = a.profile.catalog()?;
    let p = a.profile.resolve(&catalog)?;
    let src = a.workload.source()?;
    let t = src.template.clone();
    if !t.is_trace() {
        capsim::workload::check_context(&t.classes, p.arch.max_context, &p.arch.name)?;
    }
    let (axis, loads) = match (&a.concurrency, &a.burst, &a.rate, &a.scale) {
        (Some(v), _, _, _) => (LoadAxis::Concurrency, v.clone()),
        (_, Some(v), _, _) => (LoadAxis::Burst, v.clone()),
        (_, _, Some(v), _) => (LoadAxis::Rate, v.clone()),
        (_, _, _, Some(v)) => (LoadAxis::Scale, v.clone()),
        _ => {
            return Err(Error::flag("--concurrency", "give a list of loads: --concurrency, --burst, --rate or --scale"))
        }
    };
    src.check_axis(axis, &format!("--{}", axis.as_str()))?;
    for &l in &loads {
        if !(l.is_finite() && l > 0.0) || (axis.is_integer() && l.fract() != 0.0) {
            return Err(Error::flag(
                &format!("--{}", axis.as_str()),
                format!(
                    "each load must be a positive {}, got {}",
                    if axis.is_integer() { "integer" } else { "number" },
                    capsim::error::fmt_num(l)
                ),
            ));
        }
    }
    if axis == LoadAxis::Scale {
        // As `capacity --load scale` searches: a million times a trace's traffic is far past any GPU.
        if let Some(&l) = loads.iter().find(|&&l| !(1e-6..=1e6).contains(&l)) {
            return Err(Error::flag(
                "--scale",
                format!("each scale must be in 1e-6..=1e6, got {}", capsim::error::fmt_num(l)),
            ));
        }
    }
    for &l in &loads {
        // Every load's workload is valid before anything runs.
        t.at(axis, l)?;
    }
    Ok(Prepared { profile: p, template: t, axis, loads, seed: a.seed })
}

impl Prepared {
    /// The points of `indices` (seeds from their index in the whole sweep), in that order.
    pub fn points(&self, indices: &[usize]) -> Result<Vec<capsim::sweep::SweepPoint>> {
        self.points_ticked(indices, &|| {})
    }
    /// [`Prepared::points`], `tick` called as each point finishes (a progress bar).
    pub fn points_ticked(&self, indices: &[usize], tick: &(dyn Fn() + Sync)) -> Result<Vec<capsim::sweep::SweepPoint>> {
        run_sweep_at(
            &self.profile,
            &self.template,
            self.axis,
            &self.loads,
            indices,
            self.seed,
            &RequestSlo::default(),
            tick,
        )
    }
    /// The JSON `sweep --json` prints.
    pub fn json(&self, points: &[capsim::sweep::SweepPoint]) -> serde_json::Value {
        json!({
            "capsim_version": env!("CARGO_PKG_VERSION"),
            "profile": self.profile.name(),
            "retargeted_from": self.profile.retargeted_from,
            "seed": self.seed,
            "template": self.template,
            "points": points,
        })
    }
    /// One point's JSON line.
    pub fn point_json(&self, pt: &capsim::sweep::SweepPoint) -> serde_json::Value {
        json!({"profile": self.profile.name(), "retargeted_from": self.profile.retargeted_from, "point": pt})
    }
}

pub fn run(a: SweepArgs) -> Result<()> {
    let shard = a.scale_out.shard()?;
    if a.scale_out.jsonl && (a.json || a.csv) {
        return Err(Error::flag("--jsonl", "choose one output: --jsonl, --json or --csv"));
    }
    let prep = prepare(&a)?;
    let (p, axis) = (&prep.profile, prep.axis);
    if a.scale_out.jsonl {
        let idx = shard.indices(prep.loads.len());
        let points = prep.points(&idx)?;
        for (i, pt) in idx.iter().zip(&points) {
            outln!("{}", line(*i, prep.loads.len(), prep.point_json(pt)))?;
        }
        return Ok(());
    }
    let all: Vec<usize> = (0..prep.loads.len()).collect();
    let pb = super::progress_bar(all.len() as u64, "loads");
    let points = prep.points_ticked(&all, &|| pb.inc(1))?;
    pb.finish_and_clear();
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
        outln!("{}", serde_json::to_string_pretty(&prep.json(&points)).expect("json"))?;
    } else if a.csv {
        out!("{}", csv(HEADERS, &rows))?;
    } else {
        outln!("profile: {}{}", p.name(), super::simulate::extrapolation_note(p))?;
        out!("{}", table(HEADERS, &rows))?;
    }
    Ok(())
}
