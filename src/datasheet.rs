//! A deployment's datasheet: the figures a benchmark report prints, predicted for any deployment.
//! Per-user speed, TTFT, ITL and system throughput against concurrency for several context lengths,
//! TTFT against burst size with the max safe queue depth, the use-case capacity table, and the key
//! figures, each with its band (the profile one sigma slower and faster), plus the measured points
//! the profile was fitted on where it has them. `report` renders it; this module only computes.

use crate::capacity::{self, perturbed, Question, Slo, Verdict, PRESETS};
use crate::data::{Aggregation, LoadKind, Point};
use crate::error::{Error, Result};
use crate::metrics::{summarize, RequestSlo, Summary};
use crate::profile::Profile;
use crate::sim::{simulate, SimOptions};
use crate::sweep::point_seed;
use crate::workload::{LoadAxis, LoadTemplate};
use rayon::prelude::*;
use serde::Serialize;

/// A value with its band: the nominal profile's, and the lowest and highest of the profiles one
/// sigma slower and faster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Band {
    pub low: f64,
    pub mid: f64,
    pub high: f64,
}

impl Band {
    fn of(v: [f64; 3]) -> Band {
        let finite: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        let lo = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Band {
            low: if lo.is_finite() { lo } else { f64::NAN },
            mid: v[1],
            high: if hi.is_finite() { hi } else { f64::NAN },
        }
    }
}

/// One concurrency of a context's curve.
#[derive(Debug, Clone, Serialize)]
pub struct CurvePoint {
    pub concurrency: u32,
    pub ttft_s_mean: Band,
    pub itl_ms_mean: Band,
    pub per_user_tok_s_mean: Band,
    pub system_output_tok_s: Band,
}

/// A measured point of the profile's own report, for the charts.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub metric: String,
    pub concurrency: u32,
    pub value: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Curve {
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub points: Vec<CurvePoint>,
    pub measured: Vec<Measured>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BurstPoint {
    pub burst: u32,
    pub ttft_s_mean: Band,
}

#[derive(Debug, Clone, Serialize)]
pub struct Bursts {
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub ttft_s_limit: f64,
    pub points: Vec<BurstPoint>,
    /// The largest burst whose mean TTFT stays within the limit.
    pub max_safe_queue_depth: Band,
}

#[derive(Debug, Clone, Serialize)]
pub struct UseCase {
    pub name: String,
    pub input_tokens: u32,
    pub output_tokens: u32,
    pub slos: String,
    /// Concurrent users within the SLOs; None when the request exceeds the model's context.
    pub capacity: Option<Band>,
    pub verdict: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct KeyFigures {
    /// Tokens/s of one user alone, at the shortest context.
    pub peak_decode_tok_s: Band,
    /// The highest system output throughput over every curve point.
    pub peak_system_tok_s: Band,
    /// Mean TTFT of one user at the shortest context.
    pub best_ttft_s: Band,
    pub max_safe_queue_depth: Band,
}

#[derive(Debug, Clone, Serialize)]
pub struct Datasheet {
    pub profile: String,
    pub model: String,
    pub gpu: String,
    pub tensor_parallel: u32,
    pub engine: String,
    pub weight_dtype: String,
    pub kv_capacity_tokens: u64,
    /// Why this deployment is an extrapolation (another GPU, model or engine than measured).
    pub extrapolation: Option<String>,
    pub provenance: Vec<String>,
    pub key: KeyFigures,
    pub curves: Vec<Curve>,
    pub bursts: Bursts,
    pub use_cases: Vec<UseCase>,
}

/// What the datasheet covers.
#[derive(Debug, Clone)]
pub struct Options {
    /// Context lengths of the curves; None: the profile's measured contexts, else 1K, 8K and 32K.
    pub contexts: Option<Vec<u32>>,
    pub output_tokens: Option<u32>,
    pub concurrencies: Vec<u32>,
    pub bursts: Vec<u32>,
    /// Burst requests' lengths and the mean TTFT that bounds the max safe queue depth.
    pub burst_lengths: (u32, u32),
    pub burst_ttft_s: f64,
    pub seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            contexts: None,
            output_tokens: None,
            concurrencies: vec![1, 2, 4, 8, 16, 32, 64, 128],
            bursts: vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
            burst_lengths: (1024, 256),
            burst_ttft_s: 3.0,
            seed: 0,
        }
    }
}

/// The measured experiment points of the profile's source report (closed loops, unflagged values).
fn measured_points<'a>(p: &Profile, points: &'a [Point]) -> Vec<&'a Point> {
    let rep = &p.file.provenance.source_report;
    if rep.is_empty() || p.retargeted_from.is_some() {
        return vec![];
    }
    points
        .iter()
        .filter(|q| &q.report == rep && q.is_experiment() && !q.is_flagged())
        .filter(|q| q.aggregation == Aggregation::Value && q.load != LoadKind::Burst && q.concurrency.is_some())
        .filter(|q| matches!(q.metric.as_str(), "ttft_s" | "per_user_tok_s" | "itl_ms" | "system_tok_s"))
        .collect()
}

pub fn build(p: &Profile, o: &Options, points: &[Point]) -> Result<Datasheet> {
    let variants = [perturbed(p, -1.0), p.clone(), perturbed(p, 1.0)];
    let measured = measured_points(p, points);
    let max_ctx = p.arch.max_context;
    // Contexts: the measured ones (up to four), else 1K, 8K and 32K; each must fit with its output.
    let (mut contexts, output) = match (&o.contexts, o.output_tokens) {
        (Some(c), out) => (c.clone(), out.unwrap_or(256)),
        (None, out) if !measured.is_empty() => {
            let mut c: Vec<u32> = measured.iter().filter_map(|q| q.input_tokens).map(|x| x as u32).collect();
            c.sort_unstable();
            c.dedup();
            let mut outs: Vec<u32> = measured.iter().filter_map(|q| q.output_tokens).map(|x| x as u32).collect();
            outs.sort_unstable();
            (c.into_iter().take(4).collect(), out.unwrap_or(outs.get(outs.len() / 2).copied().unwrap_or(256)))
        }
        (None, out) => (vec![1024, 8192, 32768], out.unwrap_or(256)),
    };
    let fits = |c: u32| c as u64 + output as u64 <= max_ctx;
    if let Some(asked) = &o.contexts {
        // Contexts asked for by name are refused when they do not fit, not dropped in silence.
        let over: Vec<String> = asked.iter().filter(|&&c| !fits(c)).map(|c| c.to_string()).collect();
        if !over.is_empty() {
            return Err(Error::flag(
                "--contexts",
                format!(
                    "{} + {output} output tokens exceed {}'s context window of {max_ctx} tokens: the engine rejects such requests; give contexts up to {}",
                    over.join(", "),
                    p.arch.name,
                    max_ctx.saturating_sub(output as u64)
                ),
            ));
        }
    }
    contexts.retain(|&c| fits(c));
    if contexts.is_empty() {
        return Err(Error::flag(
            "--contexts",
            format!(
                "no context fits {}'s window of {max_ctx} tokens with {output} output tokens: give --contexts (and --output-len) that fit",
                p.arch.name
            ),
        ));
    }
    // Every (variant, context, concurrency) in parallel, each its own seed from its place.
    let jobs: Vec<(usize, usize, usize)> = (0..3)
        .flat_map(|v| (0..contexts.len()).flat_map(move |c| (0..o.concurrencies.len()).map(move |k| (v, c, k))))
        .collect();
    let runs: Vec<Result<Summary>> = jobs
        .par_iter()
        .map(|&(v, c, k)| {
            let t = LoadTemplate::fixed(contexts[c], output);
            let w = t.at(LoadAxis::Concurrency, o.concurrencies[k] as f64)?;
            let seed = point_seed(o.seed, (c * 1000 + k) as u64);
            let out = simulate(&variants[v], &w, seed, SimOptions::default());
            Ok(summarize(&out, 0, 0, 0.0, &RequestSlo::default()))
        })
        .collect();
    let runs: Vec<Summary> = runs.into_iter().collect::<Result<_>>()?;
    let at = |v: usize, c: usize, k: usize| &runs[(v * contexts.len() + c) * o.concurrencies.len() + k];
    let band = |c: usize, k: usize, f: &dyn Fn(&Summary) -> f64| Band::of([0, 1, 2].map(|v| f(at(v, c, k))));
    let curves: Vec<Curve> = contexts
        .iter()
        .enumerate()
        .map(|(c, &ctx)| Curve {
            input_tokens: ctx,
            output_tokens: output,
            points: o
                .concurrencies
                .iter()
                .enumerate()
                .map(|(k, &n)| CurvePoint {
                    concurrency: n,
                    ttft_s_mean: band(c, k, &|s| s.ttft_s.mean),
                    itl_ms_mean: band(c, k, &|s| s.itl_ms.mean),
                    per_user_tok_s_mean: band(c, k, &|s| s.per_user_tok_s.mean),
                    system_output_tok_s: band(c, k, &|s| s.system_output_tok_s),
                })
                .collect(),
            measured: measured
                .iter()
                .filter(|q| q.input_tokens == Some(ctx as u64) && q.output_tokens == Some(output as u64))
                .map(|q| Measured { metric: q.metric.clone(), concurrency: q.concurrency.unwrap_or(0), value: q.value })
                .collect(),
        })
        .collect();

    // Bursts: TTFT against burst size, and the largest burst within the limit.
    let (bi, bo) = o.burst_lengths;
    let burst_runs: Vec<Result<f64>> = (0..3)
        .flat_map(|v| o.bursts.iter().map(move |&b| (v, b)))
        .collect::<Vec<_>>()
        .par_iter()
        .map(|&(v, b)| {
            let w = LoadTemplate::fixed(bi, bo).at(LoadAxis::Burst, b as f64)?;
            let out = simulate(&variants[v], &w, point_seed(o.seed, 90_000 + b as u64), SimOptions::default());
            Ok(summarize(&out, 0, 0, 0.0, &RequestSlo::default()).ttft_s.mean)
        })
        .collect();
    let burst_runs: Vec<f64> = burst_runs.into_iter().collect::<Result<_>>()?;
    let nb = o.bursts.len();
    let burst_points: Vec<BurstPoint> = o
        .bursts
        .iter()
        .enumerate()
        .map(|(i, &b)| BurstPoint { burst: b, ttft_s_mean: Band::of([0, 1, 2].map(|v| burst_runs[v * nb + i])) })
        .collect();
    let depth_q = Question {
        axis: LoadAxis::Burst,
        template: LoadTemplate::fixed(bi, bo),
        slos: vec![Slo::parse(&format!("ttft_mean_s={}", o.burst_ttft_s))?],
        max_load: 4096.0,
        seeds: 1,
        seed: o.seed,
        rate_rel_tol: 0.02,
    };
    let depth = capacity::capacity(p, &depth_q, &|| {})?;
    let max_safe = Band { low: depth.band.0, mid: depth.capacity, high: depth.band.1 };

    // The reports' use cases: concurrent users within each one's SLOs.
    let use_cases: Vec<UseCase> = PRESETS
        .iter()
        .map(|u| {
            let slos: Vec<Slo> = u.slos.iter().map(|(n, v)| Slo::parse(&format!("{n}={v}"))).collect::<Result<_>>()?;
            let text = slos
                .iter()
                .map(|s| {
                    format!(
                        "{} {} {}",
                        s.name(),
                        if s.is_lower_bound() { ">=" } else { "<=" },
                        crate::error::fmt_num(s.limit)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            if u.input_tokens as u64 + u.output_tokens as u64 > max_ctx {
                return Ok(UseCase {
                    name: u.name.into(),
                    input_tokens: u.input_tokens,
                    output_tokens: u.output_tokens,
                    slos: text,
                    capacity: None,
                    verdict: format!("over the model's context of {max_ctx} tokens"),
                });
            }
            let q = Question {
                axis: LoadAxis::Concurrency,
                template: LoadTemplate::fixed(u.input_tokens, u.output_tokens),
                slos,
                max_load: 1024.0,
                seeds: 1,
                seed: o.seed,
                rate_rel_tol: 0.02,
            };
            let c = capacity::capacity(p, &q, &|| {})?;
            let verdict = match c.verdict {
                Verdict::Found => "found".to_string(),
                Verdict::NoLoadMeetsSlo => "not even one user".to_string(),
                Verdict::AtSearchLimit => "at least the search limit (1,024)".to_string(),
            };
            Ok(UseCase {
                name: u.name.into(),
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                slos: text,
                capacity: Some(Band { low: c.band.0, mid: c.capacity, high: c.band.1 }),
                verdict,
            })
        })
        .collect::<Result<_>>()?;

    let fold = |f: &dyn Fn(&Summary) -> f64| {
        Band::of([0, 1, 2].map(|v| {
            (0..contexts.len())
                .flat_map(|c| (0..o.concurrencies.len()).map(move |k| (c, k)))
                .map(|(c, k)| f(at(v, c, k)))
                .filter(|x| x.is_finite())
                .fold(f64::NEG_INFINITY, f64::max)
        }))
    };
    let first = |f: &dyn Fn(&Summary) -> f64| {
        if contexts.is_empty() || o.concurrencies.is_empty() {
            Band { low: f64::NAN, mid: f64::NAN, high: f64::NAN }
        } else {
            band(0, 0, f)
        }
    };
    let key = KeyFigures {
        peak_decode_tok_s: first(&|s| s.per_user_tok_s.mean),
        peak_system_tok_s: fold(&|s| s.system_output_tok_s),
        best_ttft_s: first(&|s| s.ttft_s.mean),
        max_safe_queue_depth: max_safe,
    };
    let f = &p.file;
    let mut provenance = vec![format!("profile {} ({})", p.name(), f.provenance.method)];
    if !f.provenance.source_report.is_empty() {
        provenance.push(format!("calibrated on report {}", f.provenance.source_report));
    }
    if let Some(fit) = &f.fit {
        provenance.push(format!(
            "fit: {} points, median |error| {:.1}%, p90 {:.1}%",
            fit.n_points, fit.median_abs_error_pct, fit.p90_abs_error_pct
        ));
    }
    if !f.provenance.command.is_empty() {
        provenance.push(format!("calibrated with: {}", f.provenance.command));
    }
    provenance.extend(p.caveats());
    Ok(Datasheet {
        profile: p.name().to_string(),
        model: p.arch.name.clone(),
        gpu: p.gpu.name.clone(),
        tensor_parallel: p.tensor_parallel,
        engine: format!("{} {}", p.engine.kind.as_str(), p.engine.version),
        weight_dtype: f.model.weight_dtype.to_string(),
        kv_capacity_tokens: p.engine.kv_capacity_tokens,
        extrapolation: p.retargeted_from.as_ref().map(|from| {
            format!(
                "retargeted from profile {from}: {}",
                p.retarget_method.as_deref().unwrap_or("efficiencies kept, peaks and counts swapped")
            )
        }),
        provenance,
        key,
        curves,
        bursts: Bursts {
            input_tokens: bi,
            output_tokens: bo,
            ttft_s_limit: o.burst_ttft_s,
            points: burst_points,
            max_safe_queue_depth: max_safe,
        },
        use_cases,
    })
}
