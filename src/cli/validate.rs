//! `capsim validate`: predicted against measured for every point, per protocol; VALIDATION.md.

use super::deploy::EngineArg;
use super::shard::{line, ScaleOutArgs};
use super::ProfileArgs;
use capsim::catalog::Catalog;
use capsim::data::{self, LoadKind, Point};
use capsim::error::{Error, Result};
use capsim::experiment::{disaggregated_summary, metric_of_point, predict, ExperimentUnknowns};
use capsim::measured::Run;
use capsim::profile::disagg::Disaggregated;
use capsim::profile::Profile;
use capsim::report::{num, svg_chart, table, Series};
use capsim::validate::{self, summarize_rows, Protocol, Row, TARGETS};
use clap::Args;
use rayon::prelude::*;
use serde_json::json;
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// Benchmark result files or directories to replay, instead of the reports' points, on the
    /// deployment the flags name as simulate takes them: --profile P, or --gpu with --model, --tp,
    /// --engine, --precision, --kv-dtype ... (the model the files name when --model is not given).
    #[arg(long, num_args = 1.., value_name = "PATH")]
    pub runs: Vec<PathBuf>,
    /// The deployment: without --runs only --profile applies (validate that profile on its
    /// source_report's points instead of the shipped one).
    #[command(flatten)]
    pub deployment: ProfileArgs,
    /// in-sample, extrapolate-concurrency, leave-one-context-out, cross-gpu, leave-one-report-out,
    /// corpus-model (the reports predicted by the step model learned on the corpus alone), or all
    /// [default: in-sample]; over the public corpus (the learned step model): corpus-in-sample,
    /// leave-one-gpu-out, leave-one-model-out, leave-one-engine-out, or corpus-all; over its large
    /// deployments (disaggregated, MTP, attention-DP): large-in-sample, large-leave-one-gpu-out, or
    /// corpus-large
    #[arg(long)]
    pub protocol: Option<String>,
    /// Only the report whose file name starts with this (e.g. 002).
    #[arg(long)]
    pub report: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write the full validation document (all protocols, tables and plots) to this file.
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Folder for the SVG plots of --markdown (relative paths are written into the document)
    /// [default: validation]
    #[arg(long)]
    pub plots: Option<PathBuf>,
    #[command(flatten)]
    pub scale_out: ScaleOutArgs,
}

fn protocols(s: &str) -> Result<Vec<Protocol>> {
    if s == "all" {
        return Ok(Protocol::ALL.to_vec());
    }
    Protocol::parse(s).map(|p| vec![p]).ok_or_else(|| {
        Error::flag("--protocol", format!("unknown protocol `{s}`; one of in-sample, extrapolate-concurrency, leave-one-context-out, cross-gpu, leave-one-report-out, corpus-model, all; over the corpus: corpus-in-sample, leave-one-gpu-out, leave-one-model-out, leave-one-engine-out, corpus-all; over the corpus's large deployments: large-in-sample, large-leave-one-gpu-out, corpus-large"))
    })
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| num(x, digits))
}

fn rows_table(rows: &[Row]) -> String {
    let t: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.report[..3].to_string(),
                r.line.to_string(),
                r.scenario.clone(),
                r.load.clone(),
                r.concurrency.map_or("-".into(), |c| c.to_string()),
                r.metric.clone(),
                num(r.measured, 4),
                fmt_opt(r.predicted, 4),
                r.error_pct.map_or("-".into(), |e| format!("{e:+.1}%")),
                if r.flagged { "flagged".into() } else { String::new() },
            ]
        })
        .collect();
    table(&["rep", "line", "scenario", "load", "conc", "metric", "measured", "predicted", "error", "left out"], &t)
}

fn summary_table(rows: &[Row]) -> String {
    let t: Vec<Vec<String>> = summarize_rows(rows)
        .iter()
        .map(|g| {
            vec![
                g.report[..3].to_string(),
                g.metric.clone(),
                g.count.to_string(),
                format!("{:.1}%", g.median_abs_error_pct),
                format!("{:.1}%", g.p90_abs_error_pct),
            ]
        })
        .collect();
    table(&["report", "metric", "count", "median |error|", "p90 |error|"], &t)
}

/// The coverage line of one protocol.
pub fn coverage_line(rows: &[Row]) -> Option<String> {
    coverage_text(validate::band_coverage(rows), "unflagged measured points")
}

/// "coverage: INSIDE of N WHAT inside the band (share)", None without bands.
fn coverage_text((n, inside): (usize, usize), what: &str) -> Option<String> {
    (n > 0).then(|| {
        format!(
            "coverage: {inside} of {n} {what} inside the predicted +-1 sigma band ({:.0}%; honest bands hold about 68%)",
            inside as f64 / n as f64 * 100.0
        )
    })
}

/// The target lines of one protocol: group, count, median, p90, verdict.
pub fn target_lines(protocol: Protocol, rows: &[Row]) -> Vec<(String, bool)> {
    TARGETS
        .iter()
        .filter(|t| t.protocol == protocol)
        .map(|t| {
            let (n, med, p90, ok) = t.evaluate(rows);
            (
                format!(
                    "{:?} over {n} unflagged points: median |error| {med:.1}% (target <= {}%){}: {}{}",
                    t.group,
                    t.median_abs_error_pct_max,
                    t.p90_abs_error_pct_max.map_or(String::new(), |m| format!(", p90 {p90:.1}% (target <= {m}%)")),
                    if ok { "met" } else { "NOT met" },
                    t.resists.filter(|_| !ok).map_or(String::new(), |r| format!(" (resists: {r})")),
                ),
                ok,
            )
        })
        .collect()
}

/// The shared flag of the deployment that both pools of a disaggregated one replace with their own
/// (`--tp` beside `--prefill-tp` and `--decode-tp`: each pool's profile takes the pool's value,
/// `ProfileArgs::disaggregated`), and `--pd-routing` where each pool has one worker: a flag that
/// would change nothing, refused naming it rather than dropped.
fn refuse_unused_pd_flags(d: &ProfileArgs) -> Result<()> {
    let Some((p, dec)) = d.pool_specs()? else { return Ok(()) };
    for (flag, given, own, prefill, decode) in [
        ("--gpu", d.gpu.is_some(), "gpu", p.gpu.is_some(), dec.gpu.is_some()),
        ("--tp", d.tp.is_some(), "tp", p.tp.is_some(), dec.tp.is_some()),
        ("--ep", d.ep.is_some(), "ep", p.ep.is_some(), dec.ep.is_some()),
        ("--expert-parallel", d.expert_parallel, "ep", p.ep.is_some(), dec.ep.is_some()),
        (
            "--attention-dp",
            d.attention_dp.is_some(),
            "attention-dp",
            p.attention_dp.is_some(),
            dec.attention_dp.is_some(),
        ),
        (
            "--redundant-experts",
            d.redundant_experts.is_some(),
            "redundant-experts",
            p.redundant_experts.is_some(),
            dec.redundant_experts.is_some(),
        ),
        (
            "--max-num-seqs",
            d.max_num_seqs.is_some(),
            "max-num-seqs",
            p.max_num_seqs.is_some(),
            dec.max_num_seqs.is_some(),
        ),
        (
            "--max-num-batched-tokens",
            d.max_num_batched_tokens.is_some(),
            "max-num-batched-tokens",
            p.max_num_batched_tokens.is_some(),
            dec.max_num_batched_tokens.is_some(),
        ),
    ] {
        if given && prefill && decode {
            return Err(Error::flag(
                flag,
                format!(
                    "both pools state their own (--prefill-{own}, --decode-{own}), so {flag} applies to neither: leave it out, or drop one pool's flag to let that pool take it"
                ),
            ));
        }
    }
    if d.pd_routing.is_some() && p.workers == 1 && dec.workers == 1 {
        return Err(Error::flag(
            "--pd-routing",
            "picks a request's prefill and decode worker: with one worker in each pool there is nothing to pick (give --prefill-workers or --decode-workers above 1)",
        ));
    }
    Ok(())
}

/// The deployment `validate --runs` replays the runs on, through the one path every command takes
/// (`ProfileArgs::resolve`; with `--prefill-*`/`--decode-*` the disaggregated deployment simulate
/// builds, `ProfileArgs::disaggregated`, and as the profile its decode pool's, as simulate's), with
/// notes on what was taken from the files.
fn runs_deployment(
    d: &ProfileArgs,
    runs: &[Run],
    catalog: &Catalog,
) -> Result<(Profile, Option<Disaggregated>, Vec<String>)> {
    let mut notes = Vec::new();
    // Both pools on GPUs of their own name the deployment's GPUs without --gpu.
    let pools_name_gpus = d.prefill_gpu.is_some() && d.decode_gpu.is_some();
    if d.profile.is_none() && d.gpu.is_none() && !pools_name_gpus {
        return Err(Error::flag(
            "--gpu",
            "required with --runs unless --profile names the deployment: the GPU the runs were measured on \
             (with --model, --tp, --engine, --precision, --kv-dtype as simulate takes them; disaggregated, \
             --prefill-gpu and --decode-gpu may name each pool's instead)",
        ));
    }
    refuse_unused_pd_flags(d)?;
    let files_model = capsim::calibrate::runs::files_model(runs, catalog)?;
    let mut d = d.clone();
    if d.profile.is_none() && d.model.is_none() {
        // As calibrate --runs: the model the files name, when the catalog knows it.
        let id = files_model.clone().ok_or_else(|| {
            Error::flag("--model", "required: the files name no model (give a catalog name or a config.json)")
        })?;
        let arch = catalog.model(&id).map_err(|_| {
            Error::flag("--model", format!("required: the files name `{id}`, which the model catalog does not know"))
        })?;
        notes.push(format!("model from the files' model id `{id}`: {}", arch.name));
        d.model = Some(id);
    }
    if d.profile.is_none() && d.engine.is_none() {
        // As the model: the engine the files name (an SGLang server's result replayed under SGLang),
        // said as such; where they name none, the default profile's engine, said too.
        match capsim::calibrate::runs::files_engine(runs)? {
            Some(k) => {
                notes.push(format!("engine from the files (their server or endpoint names it): {}", k.as_str()));
                d.engine = Some(EngineArg::from(k));
                if d.engine_version.is_none() {
                    d.engine_version = capsim::calibrate::runs::files_server_version(runs, k, &mut notes);
                }
            }
            None => notes
                .push("engine not given (--engine), and the files name none: the default profile's (vLLM V1)".into()),
        }
    }
    // The files' model and engine, taken above, are each pool's too.
    let pd = d.disaggregated(catalog)?;
    let profile = match &pd {
        Some(x) => x.decode.clone(),
        None => d.resolve(catalog)?,
    };
    if d.precision.is_none() || d.kv_dtype.is_none() {
        // What calibrate --runs lists as its assumptions, said here too: the files state neither.
        let (w, kv) = (profile.file.model.weight_dtype, profile.file.model.kv_dtype);
        let from = if profile.moved_to_another_model() {
            "the checkpoint's config or name, else BF16"
        } else {
            "the profile's, of this model"
        };
        let (mut flags, mut said) = (Vec::new(), Vec::new());
        if d.precision.is_none() {
            flags.push("--precision");
            said.push(format!("weights {w}"));
        }
        if d.kv_dtype.is_none() {
            flags.push("--kv-dtype");
            said.push(format!("KV cache {kv}"));
        }
        notes.push(format!(
            "precision not given ({}): {} ({from}); the files do not state it",
            flags.join(", "),
            said.join(", ")
        ));
    }
    if let (Some(m), Some((id, arch))) =
        (&d.model, files_model.as_ref().and_then(|id| catalog.model(id).ok().map(|a| (id, a))))
    {
        // --model given: the runs are replayed on it (a what-if), said when they measured another.
        if !arch.same_architecture(&profile.arch) {
            notes.push(format!(
                "--model `{m}` is not the model the files measured (`{id}`{}): the errors compare another model's runs",
                if arch.name == *id { String::new() } else { format!(", {}", arch.name) }
            ));
        }
    }
    notes.extend(capsim::calibrate::runs::chunking_notes(
        runs,
        profile.engine.stream_interval,
        profile.speculative().is_some(),
    ));
    if d.model.is_none() {
        // --profile alone: its own model, said when the files name another.
        if let Some((id, arch)) = files_model.and_then(|id| catalog.model(&id).ok().map(|a| (id, a))) {
            if !arch.same_architecture(&profile.arch) {
                notes.push(format!(
                    "the files name model `{id}`, the profile is of {}: give --model to move the profile to it",
                    profile.arch.name
                ));
            }
        }
    }
    Ok((profile, pd, notes))
}

/// The layout beyond TP, and speculation, where there is any: both change every prediction
/// (" (2 pipeline stages of TP 4) (EP 8) (mtp with 3 drafted tokens)").
fn layout_note(p: &Profile) -> String {
    let par = &p.parallel;
    let mut layout = String::new();
    if par.pipeline_parallel > 1 {
        let _ = write!(layout, " ({} pipeline stages of TP {})", par.pipeline_parallel, p.tensor_parallel);
    }
    if par.attention_dp > 1 {
        let _ = write!(layout, " (attention DP {})", par.attention_dp);
    }
    if par.expert_parallel_size > 1 && !p.expert_parallel {
        let _ = write!(layout, " (EP {})", par.expert_parallel_size);
    }
    if let Some(s) = p.speculative() {
        let _ = write!(layout, " ({} with {} drafted tokens)", s.method.as_str(), s.tokens);
    }
    layout
}

/// "GPU xN (expert parallel) (layout)": one replica's (one worker's) GPUs, tensor parallel times
/// pipeline stages, and its layout.
fn gpus_text(p: &Profile) -> String {
    format!(
        "{} x{}{}{}",
        p.gpu.name,
        p.parallel.gpus(p.tensor_parallel),
        if p.expert_parallel { " (expert parallel)" } else { "" },
        layout_note(p)
    )
}

/// Where a profile's numbers come from: its calibration and fit, or the move that made it.
fn provenance_text(p: &Profile, learned: Option<&capsim::hardware::learned::LearnedModel>) -> String {
    let f = &p.file;
    let mut prov = if !f.provenance.source_report.is_empty() {
        format!("calibrated on report {}", f.provenance.source_report)
    } else if !f.provenance.command.is_empty() {
        format!("calibrated with `{}`", f.provenance.command)
    } else {
        f.provenance.method.clone()
    };
    if let Some(fit) = &f.fit {
        let _ = write!(
            prov,
            " (fit over {} points: median |error| {:.1}%, p90 {:.1}%)",
            fit.n_points, fit.median_abs_error_pct, fit.p90_abs_error_pct
        );
    }
    match (&p.retargeted_from, learned.filter(|_| p.moved_to_another_model())) {
        // Another model: the coefficients are the learned step model's, as for any deployment
        // nobody calibrated; the profile it was moved from lends none of its fit.
        (Some(base), Some(m)) => {
            prov = format!(
                "the step model learned across the corpus (models/learned.toml: {} points of {} deployments, its fit's median |error| TTFT {:.1}%, TPOT {:.1}%; held out by GPU, model and engine in validation/corpus.md), moved from profile {base}, whose own fit does not enter these coefficients",
                m.fit.points, m.fit.deployments, m.fit.ttft_median_abs_pct, m.fit.tpot_median_abs_pct
            );
        }
        // The numbers are the moved profile's, not its fit's: the move is the extrapolation above.
        (Some(base), None) => prov = format!("moved from profile {base}, itself {prov}"),
        (None, _) => {}
    }
    prov
}

/// Where the predictions come from: the deployment, the profile's provenance and its band.
fn provenance_lines(p: &Profile, learned: Option<&capsim::hardware::learned::LearnedModel>) -> Vec<String> {
    let f = &p.file;
    let mut out = vec![format!("profile: {}{}", p.name(), super::simulate::extrapolation_note(p))];
    out.push(format!(
        "deployment: {} on {}, {} {}, {} weights, {} KV, KV capacity {} tokens",
        p.arch.name,
        gpus_text(p),
        p.engine.kind.as_str(),
        p.engine.version,
        f.model.weight_dtype,
        f.model.kv_dtype,
        p.engine.kv_capacity_tokens
    ));
    out.push(format!("provenance: {}", provenance_text(p, learned)));
    out.push(if f.sigmas.is_some() {
        "band: each prediction +-1 sigma: the runs replayed on the profile one sigma slower and one faster \
         (its uncertainty: the fit's, widened or replaced by the shared hardware model's where it was moved), \
         widened by the fit's residual scatter"
            .into()
    } else {
        "band: none (the profile states no uncertainty)".into()
    });
    out
}

/// [`provenance_lines`] of a disaggregated deployment: each pool's profile, workers, GPUs and
/// layout, the provenance (once where the pools share it) and the band.
fn pd_provenance_lines(d: &Disaggregated, learned: Option<&capsim::hardware::learned::LearnedModel>) -> Vec<String> {
    let (p, q) = (&d.prefill, &d.decode);
    let named = |p: &Profile| format!("{}{}", p.name(), super::simulate::extrapolation_note(p));
    let mut out = vec![if named(p) == named(q) {
        format!("profile: {} (both pools)", named(q))
    } else {
        format!("profile: prefill pool {}; decode pool {}", named(p), named(q))
    }];
    out.push(format!(
        "deployment: {} disaggregated on {} GPUs ({} routing, KV link {} GB/s per GPU), {} {}, {} weights, {} KV",
        q.arch.name,
        d.gpus(),
        d.routing.as_str(),
        num(d.link.bw_bytes_s / 1e9, 4),
        q.engine.kind.as_str(),
        q.engine.version,
        q.file.model.weight_dtype,
        q.file.model.kv_dtype,
    ));
    for (name, p, workers) in [("prefill", p, d.prefill_workers), ("decode", q, d.decode_workers)] {
        out.push(format!(
            "  {name} pool: {workers} worker{} on {}, KV capacity {} tokens each",
            if workers == 1 { "" } else { "s" },
            gpus_text(p),
            p.engine.kv_capacity_tokens
        ));
    }
    let (a, b) = (provenance_text(p, learned), provenance_text(q, learned));
    out.push(if a == b {
        format!("provenance: {b}")
    } else {
        format!("provenance: prefill pool {a}; decode pool {b}")
    });
    out.push(if p.file.sigmas.is_some() || q.file.sigmas.is_some() {
        "band: each prediction +-1 sigma: the runs replayed with both pools' profiles one sigma slower and one faster \
         (their uncertainty: the fit's, widened or replaced by the shared hardware model's where it was moved), \
         widened by the fit's residual scatter; a TTFT's band also holds the replays with the prefill pool slower \
         and the decode pool faster, and the other way (the ratio of the pools' speeds moved one sigma)"
            .into()
    } else {
        "band: none (the pools' profiles state no uncertainty)".into()
    });
    out
}

/// A disaggregated deployment with each pool's profile moved `prefill` and `decode` sigmas
/// (`capacity::perturbed`: +1 one sigma faster, -1 slower; linear in between).
fn pd_perturbed(d: &Disaggregated, prefill: f64, decode: f64) -> Disaggregated {
    let mut x = d.clone();
    x.prefill = capsim::capacity::perturbed(&d.prefill, prefill);
    x.decode = capsim::capacity::perturbed(&d.decode, decode);
    x
}

/// The +-1 sigma band of a prediction `v` replayed `a` and `b` one sigma either way: their spread
/// widened by the fit's residual scatter `resid` in quadrature in log space (`validate::Bands::of`'s
/// arithmetic); None unless all three are positive.
fn alike_band(v: f64, a: f64, b: f64, resid: f64) -> Option<(f64, f64)> {
    if !(v > 0.0 && a > 0.0 && b > 0.0) {
        return None;
    }
    let (lo, hi) = (v.min(a).min(b), v.max(a).max(b));
    let widen = |x: f64| (x.ln().powi(2) + resid * resid).sqrt();
    Some((v * (-widen(v / lo)).exp(), v * widen(hi / v).exp()))
}

/// `validate::validate_runs` on a disaggregated deployment: each run replayed as its load generator
/// ran it (`experiment::run_workload`, the aggregated path's workload) on both pools
/// (`experiment::disaggregated_summary`, as the corpus replays its disaggregated points), each
/// statistic compared as the aggregated path compares it (`experiment::metric_of_point`).
///
/// The band: the aggregated path's (`validate::Bands`, private to src/validate.rs, whose two lines
/// of arithmetic are repeated here) applied to both pools: each pool's profile one sigma slower and
/// one faster (`capacity::perturbed`), the spread widened by the fit's residual scatter in quadrature
/// in log space. A TTFT's band is also at least as wide as the replays with the prefill pool slower
/// and the decode pool faster and the other way, as the large protocols widen a disaggregated
/// point's (`validate::corpus::replayed_band`): near the prefill pool's capacity a modest error in
/// the ratio of the pools' speeds is a large one in TTFT, and scaling both pools alike does not
/// show it. There the ratio moves one sigma, split between the pools in proportion to each one's
/// sigma squared (`validate::corpus::pool_band_scales`, from the learned model's sigmas of a corpus
/// experiment, which a deployment resolved from flags is not); here each pool's sigma is its
/// profile's, taken as equal for pools of one profile, so each pool moves 1/sqrt(2) of its own.
fn pd_run_rows(d: &Disaggregated, runs: &[Run]) -> Vec<validate::RunRow> {
    let sigmas = d.prefill.file.sigmas.is_some() || d.decode.file.sigmas.is_some();
    let half = std::f64::consts::FRAC_1_SQRT_2;
    // 0: the deployment; 1, 2: both pools slower, faster; 3, 4: the pools' ratio moved either way.
    let mut replays = vec![d.clone()];
    if sigmas {
        replays.extend([
            pd_perturbed(d, -1.0, -1.0),
            pd_perturbed(d, 1.0, 1.0),
            pd_perturbed(d, -half, half),
            pd_perturbed(d, half, -half),
        ]);
    }
    let resid = [&d.prefill, &d.decode]
        .iter()
        .filter_map(|p| p.file.fit.as_ref().map(|f| f.residual_sigma_log))
        .fold(0.0, f64::max);
    runs.par_iter()
        .map(|run| {
            let points = run.points("validate");
            // Every statistic of a run is of one replay (one workload): simulated once per deployment.
            let summaries: Vec<Option<capsim::metrics::Summary>> = match points.first() {
                Some(p) => replays.par_iter().map(|x| disaggregated_summary(x, p)).collect(),
                None => Vec::new(),
            };
            points
                .iter()
                .map(|p| {
                    let value = |i: usize| summaries.get(i)?.as_ref().and_then(|s| metric_of_point(s, p));
                    let predicted = value(0);
                    let band = predicted.filter(|_| sigmas).and_then(|v| {
                        let band = alike_band(v, value(1)?, value(2)?, resid)?;
                        let moved = if p.metric == "ttft_s" { [value(3), value(4)] } else { [None, None] };
                        Some(
                            moved
                                .into_iter()
                                .flatten()
                                .filter(|x| x.is_finite() && *x > 0.0)
                                .fold(band, |(lo, hi), x| (lo.min(x), hi.max(x))),
                        )
                    });
                    let error = predicted.filter(|_| p.value > 0.0).map(|x| (x - p.value) / p.value);
                    validate::RunRow {
                        band,
                        file: run.source.file.clone(),
                        run: run.label(),
                        load: run.load.describe(),
                        metric: p.metric.clone(),
                        stat: capsim::metrics::stat_name(p.stat).to_string(),
                        measured: p.value,
                        predicted,
                        error,
                        error_pct: error.map(|e| e * 100.0),
                        flagged: error.is_none(),
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flatten()
        .collect()
}

/// The rows of `runs` on the deployment: the profile's, or the disaggregated deployment's.
fn run_rows(profile: &Profile, pd: Option<&Disaggregated>, runs: &[Run]) -> Vec<validate::RunRow> {
    match pd {
        Some(d) => pd_run_rows(d, runs),
        None => validate::validate_runs(profile, runs),
    }
}

/// Why a run's statistics have no prediction on a disaggregated deployment: its shortest request
/// fits no worker of a pool (`disagg::check_pools_fit`, simulate's refusal), else as on one profile.
fn pd_why_not_replayed(d: &Disaggregated, run: &Run, missing: &[String], all: usize) -> String {
    if let Ok(w) = capsim::experiment::run_workload(run) {
        match super::disagg::check_pools_fit(d, &w) {
            Err(Error::Input { at, msg }) => {
                let flag = at.field.map_or(String::new(), |f| format!(" ({f})"));
                return format!("its shortest request fits no worker of a pool{flag}: {msg}");
            }
            Err(e) => return format!("its shortest request fits no worker of a pool: {e}"),
            Ok(()) => {}
        }
    }
    capsim::calibrate::runs::why_not_replayed(&d.decode, run, missing, all)
}

/// The `disaggregated` object of `validate --runs --json`: each pool's workers, GPU, tensor
/// parallelism, GPUs per worker, layout (as the top-level `parallel` and `speculative`), engine, KV
/// capacity and profile; the GPUs in all, the router and the KV link, as simulate's object names them.
fn pd_json(d: &Disaggregated) -> serde_json::Value {
    let pool = |p: &Profile, workers: u32| {
        json!({"workers": workers, "gpu": p.gpu.name, "tensor_parallel": p.tensor_parallel,
               "gpus_per_worker": capsim::profile::disagg::worker_gpus(p), "expert_parallel": p.expert_parallel,
               "parallel": p.parallel, "speculative": p.speculative(), "engine": p.engine.kind.as_str(),
               "kv_capacity_tokens": p.engine.kv_capacity_tokens, "profile": p.name(),
               "retargeted_from": p.retargeted_from, "retarget_method": p.retarget_method})
    };
    json!({"prefill": pool(&d.prefill, d.prefill_workers), "decode": pool(&d.decode, d.decode_workers),
           "gpus": d.gpus(), "routing": d.routing, "kv_link": d.link})
}

/// `validate --runs`: every statistic of every run, predicted against measured, and a summary per
/// metric class.
fn validate_runs(a: &ValidateArgs) -> Result<()> {
    // Flags of the reports' points say nothing about a user's runs: refused, not ignored.
    for (flag, given) in [
        ("--protocol", a.protocol.is_some()),
        ("--report", a.report.is_some()),
        ("--markdown", a.markdown.is_some()),
        ("--plots", a.plots.is_some()),
    ] {
        if given {
            return Err(Error::flag(
                flag,
                "applies to the reports' points, not to --runs (whose runs are replayed on the deployment the flags name)",
            ));
        }
    }
    let catalog = a.deployment.catalog()?;
    let (runs, _files, skipped) = super::calibrate::read_runs(&a.runs)?;
    let (profile, pd, notes) = runs_deployment(&a.deployment, &runs, &catalog)?;
    for n in &notes {
        eprintln!("note: {n}");
    }
    if let Some(d) = &pd {
        // As simulate checks its run: the replay's memory, each run's in turn.
        for r in &runs {
            if let Ok(w) = capsim::experiment::run_workload(r) {
                let est = capsim::sim::memory_estimate(&d.decode, &w, d.prefill_workers + d.decode_workers);
                capsim::memory::check(
                    &est,
                    1,
                    &format!("replaying run {} on the disaggregated deployment", r.label()),
                )?;
            }
        }
    }
    if a.scale_out.jsonl {
        // One line per run: its statistics predicted against measured.
        let shard = a.scale_out.shard()?;
        for s in &skipped {
            eprintln!("skipped {s}");
        }
        for i in shard.indices(runs.len()) {
            let r = &runs[i];
            let rows = run_rows(&profile, pd.as_ref(), std::slice::from_ref(r));
            let mut v = json!({"profile": profile.name(), "run": r.label(), "file": r.source.file, "tool": r.source.tool.as_str(), "rows": rows});
            if let Some(d) = &pd {
                v["disaggregated"] = pd_json(d);
            }
            outln!("{}", line(i, runs.len(), v))?;
        }
        return Ok(());
    }
    let rows = run_rows(&profile, pd.as_ref(), &runs);
    let summary = validate::summarize_run_rows(&rows);
    let failed: u64 = runs.iter().map(|r| r.failed).sum();
    let coverage = validate::run_band_coverage(&rows);
    // Statistics measured as 0: no relative error, said rather than shown as +inf% or dropped.
    let zero: Vec<String> =
        rows.iter().filter(|r| r.measured <= 0.0).map(|r| format!("{} {} {}", r.run, r.metric, r.stat)).collect();
    // Runs the replay gives nothing for, each with why (not a column of dashes without a reason).
    let not_replayed: Vec<String> = runs
        .iter()
        .filter_map(|run| {
            let mine: Vec<&validate::RunRow> =
                rows.iter().filter(|r| r.file == run.source.file && r.run == run.label()).collect();
            let missing: Vec<String> =
                mine.iter().filter(|r| r.predicted.is_none()).map(|r| format!("{} {}", r.metric, r.stat)).collect();
            (!missing.is_empty()).then(|| {
                let why = match &pd {
                    Some(d) => pd_why_not_replayed(d, run, &missing, mine.len()),
                    None => capsim::calibrate::runs::why_not_replayed(&profile, run, &missing, mine.len()),
                };
                format!("{} ({}): {why}", run.label(), run.source.file)
            })
        })
        .collect();
    // Nothing compared at all: the table is printed, and the exit code says there is no answer.
    let compared = rows.iter().filter(|r| r.error.is_some()).count();
    let no_answer = (compared == 0).then(|| {
        Error::NoAnswer(format!(
            "no statistic of the {} run(s) could be compared on {}{} (the output says why: not replayed, not compared)",
            runs.len(),
            profile.name(),
            if pd.is_some() { ", disaggregated" } else { "" }
        ))
    });
    if a.json {
        let runs_json: Vec<_> = runs
            .iter()
            .map(|r| {
                json!({"run": r.label(), "file": r.source.file, "tool": r.source.tool.as_str(),
                       "tool_version": r.source.tool_version, "load": r.load.describe(), "requests": r.requests,
                       "completed": r.completed, "failed": r.failed, "input_tokens_mean": r.input_tokens_mean,
                       "output_tokens_mean": r.output_tokens_mean, "not_compared": r.not_compared})
            })
            .collect();
        let p = &profile;
        // Disaggregated: the deployment keys are the decode pool's (simulate's `profile` is), the
        // extrapolation and caveats either pool's, each pool in `disaggregated`.
        let pools: Vec<&Profile> = pd.as_ref().map_or(vec![p], |d| vec![&d.prefill, &d.decode]);
        let extrapolation = pools.iter().any(|q| q.retargeted_from.is_some());
        let mut caveats: Vec<String> = Vec::new();
        for c in pools.iter().flat_map(|q| q.caveats()) {
            if !caveats.contains(&c) {
                caveats.push(c);
            }
        }
        let mut v = json!({"profile": p.name(), "runs": runs_json, "rows": rows, "summary": summary, "skipped": skipped,
                           "not_comparable": {"why": validate::MEASURED_ZERO, "statistics": zero},
                           "not_replayed": not_replayed,
                           "band_coverage": {"statistics": coverage.0, "inside": coverage.1},
                           "retargeted_from": p.retargeted_from, "retarget_method": p.retarget_method,
                           "extrapolation": extrapolation, "caveats": caveats, "notes": notes,
                           "model": p.arch.name, "gpu": p.gpu.name, "tensor_parallel": p.tensor_parallel,
                           "expert_parallel": p.expert_parallel, "parallel": p.parallel,
                           "speculative": p.speculative(), "weight_dtype": p.file.model.weight_dtype,
                           "kv_dtype": p.file.model.kv_dtype, "engine": p.engine,
                           "source_report": p.file.provenance.source_report});
        if let Some(d) = &pd {
            v["disaggregated"] = pd_json(d);
        }
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return no_answer.map_or(Ok(()), Err);
    }
    for s in &skipped {
        eprintln!("skipped {s}");
    }
    let lines = match &pd {
        Some(d) => pd_provenance_lines(d, catalog.learned.as_ref()),
        None => provenance_lines(&profile, catalog.learned.as_ref()),
    };
    for l in lines {
        outln!("{l}")?;
    }
    for r in &runs {
        let lengths = match (r.uniform_lengths, r.per_request.is_empty()) {
            (Some(((i0, i1), (o0, o1))), true) => format!("lengths uniform in {i0}..={i1} in / {o0}..={o1} out"),
            _ => format!("mean lengths {:.0} in / {:.0} out", r.input_tokens_mean, r.output_tokens_mean),
        };
        outln!(
            "run {}: {} ({}{}), {} requests sent, {} completed, {} failed, {lengths}{}",
            r.label(),
            r.load.describe(),
            r.source.tool.as_str(),
            r.source.tool_version.as_ref().map_or(String::new(), |v| format!(" {v}")),
            r.requests,
            r.completed,
            r.failed,
            if r.per_request.is_empty() { String::new() } else { format!(", {} requests listed", r.per_request.len()) }
        )?;
        if !r.not_compared.is_empty() {
            outln!("  not compared: {}", r.not_compared.join("; "))?;
        }
    }
    outln!()?;
    let t: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.run.clone(),
                r.load.clone(),
                r.metric.clone(),
                r.stat.clone(),
                num(r.measured, 4),
                fmt_opt(r.predicted, 4),
                r.band.map_or("-".into(), |(lo, hi)| format!("{} .. {}", num(lo, 4), num(hi, 4))),
                match (r.error, r.measured > 0.0) {
                    (Some(e), _) => format!("{:+.1}%", e * 100.0),
                    (None, false) => "n/a (measured 0)".into(),
                    (None, true) => "-".into(),
                },
            ]
        })
        .collect();
    outln!("{}", table(&["run", "load", "metric", "stat", "measured", "predicted", "band (+-1 sigma)", "error"], &t))?;
    let s: Vec<Vec<String>> = summary
        .iter()
        .map(|c| {
            vec![
                c.class.clone(),
                c.count.to_string(),
                format!("{:.1}%", c.median_abs_error * 100.0),
                format!("{:.1}%", c.p90_abs_error * 100.0),
                format!("{:+.1}%", c.mean_error * 100.0),
            ]
        })
        .collect();
    outln!("{}", table(&["class", "count", "median |error|", "p90 |error|", "mean error"], &s))?;
    if let Some(line) = coverage_text(coverage, "measured statistics") {
        outln!("{line}")?;
    }
    if !zero.is_empty() {
        outln!(
            "not compared ({} statistic(s) {}, left out of the summary): {}",
            zero.len(),
            validate::MEASURED_ZERO,
            zero.join(", ")
        )?;
    }
    for n in &not_replayed {
        outln!("not replayed: {n}")?;
    }
    if failed > 0 {
        outln!("{failed} failed request(s) in the files are counted above, not replayed")?;
    }
    no_answer.map_or(Ok(()), Err)
}

pub fn run(a: ValidateArgs) -> Result<()> {
    let catalog = Catalog::builtin();
    a.scale_out.shard()?;
    if a.scale_out.jsonl && (a.json || a.markdown.is_some()) {
        return Err(Error::flag("--jsonl", "choose one output: --jsonl, --json or --markdown"));
    }
    if !a.runs.is_empty() {
        return validate_runs(&a);
    }
    // The reports' points are replayed on their own deployments: of the deployment flags only
    // --profile (one report's profile replaced) applies.
    if let Some(flag) = a.deployment.given_flags().into_iter().find(|f| *f != "--profile") {
        return Err(Error::flag(
            flag,
            "applies to --runs (your own result files); the reports' points are replayed on their own deployments \
             (--profile replaces one report's profile; --protocol cross-gpu moves profiles between GPUs)",
        ));
    }
    if let Some(p) = a.protocol.as_deref().and_then(capsim::validate::corpus::CorpusProtocol::parse) {
        return super::validate_corpus::run(&a, &[p], &catalog);
    }
    if a.protocol.as_deref() == Some(super::validate_corpus::ALL) {
        return super::validate_corpus::run(&a, &capsim::validate::corpus::CorpusProtocol::ALL, &catalog);
    }
    if a.protocol.as_deref() == Some(super::validate_corpus::LARGE) {
        return super::validate_corpus::run(&a, &capsim::validate::corpus::CorpusProtocol::LARGE, &catalog);
    }
    let plots = a.plots.clone().unwrap_or_else(|| PathBuf::from("validation"));
    let protocol = a.protocol.as_deref().unwrap_or("in-sample");
    let points = data::load_points(None)?;
    let metas = data::report_metas()?;
    if let Some(prefix) = &a.report {
        if !points.iter().any(|p| p.report.starts_with(prefix.as_str())) {
            let mut known: Vec<&str> = points.iter().map(|p| p.report.as_str()).collect();
            known.dedup();
            return Err(Error::flag(
                "--report",
                format!("no report starts with `{prefix}`; known: {}", known.join(", ")),
            ));
        }
    }
    if let Some(path) = &a.markdown {
        // Fail on the output paths before minutes of computing, not after.
        super::check_output_file("--markdown", path)?;
        super::check_output_dir("--plots", &plots)?;
    }
    let override_profile = match &a.deployment.profile {
        Some(_) => Some(a.deployment.resolve(&catalog)?),
        None => None,
    };
    if let Some(path) = &a.markdown {
        return markdown(path, &plots, &points, &metas, &catalog);
    }
    if a.scale_out.jsonl {
        // One line per (protocol, report): each is its own fit, the unit a slice runs.
        let mut reports: Vec<&str> = points.iter().map(|p| p.report.as_str()).collect();
        reports.dedup();
        reports.retain(|r| a.report.as_deref().is_none_or(|o| r.starts_with(o)));
        let tasks: Vec<(Protocol, &str)> =
            protocols(protocol)?.into_iter().flat_map(|p| reports.iter().map(move |r| (p, *r))).collect();
        let shard = a.scale_out.shard()?;
        for i in shard.indices(tasks.len()) {
            let (p, rep) = tasks[i];
            let rows = validate::run(p, &points, &metas, &catalog, Some(rep), override_profile.as_ref())?;
            outln!("{}", line(i, tasks.len(), json!({"protocol": p.as_str(), "report": rep, "rows": rows})))?;
        }
        return Ok(());
    }
    let protocols = protocols(protocol)?;
    let pb = super::progress_bar(protocols.len() as u64, "protocols");
    // The protocols in parallel, their rows in order.
    let per_protocol: Vec<_> = protocols
        .par_iter()
        .map(|&p| {
            let rows = validate::run(p, &points, &metas, &catalog, a.report.as_deref(), override_profile.as_ref());
            pb.inc(1);
            rows
        })
        .collect();
    pb.finish_and_clear();
    let mut all = Vec::new();
    for rows in per_protocol {
        all.extend(rows?);
    }
    if a.json {
        let summary: Vec<_> = Protocol::ALL
            .iter()
            .filter(|p| all.iter().any(|r| r.protocol == p.as_str()))
            .map(|p| {
                let rows: Vec<Row> = all.iter().filter(|r| r.protocol == p.as_str()).cloned().collect();
                let (n, inside) = validate::band_coverage(&rows);
                json!({"protocol": p.as_str(), "groups": summarize_rows(&rows), "band_coverage": {"points": n, "inside": inside},
                       "targets": target_lines(*p, &rows).iter().map(|(s, ok)| json!({"target": s, "met": ok})).collect::<Vec<_>>()})
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&json!({"rows": all, "summary": summary})).expect("json"))?;
        return Ok(());
    }
    for p in Protocol::ALL.iter().filter(|p| all.iter().any(|r| r.protocol == p.as_str())) {
        let rows: Vec<Row> = all.iter().filter(|r| r.protocol == p.as_str()).cloned().collect();
        outln!("== protocol {} ==\n{}\n{}", p.as_str(), rows_table(&rows), summary_table(&rows))?;
        for (line, _) in target_lines(*p, &rows) {
            outln!("target: {line}")?;
        }
        if let Some(c) = coverage_line(&rows) {
            outln!("{c}")?;
        }
        outln!()?;
    }
    Ok(())
}

/// Simulated curve of a scenario: metric against concurrency.
fn curve(
    profile: &capsim::profile::Profile,
    base: &Point,
    metric: &str,
    concs: &[u32],
    u: &ExperimentUnknowns,
    metas: &[data::ReportMeta],
) -> Vec<(f64, f64)> {
    concs
        .par_iter()
        .filter_map(|&c| {
            let mut q = base.clone();
            q.concurrency = Some(c);
            q.metric = metric.into();
            predict(profile, &q, u, metas).map(|v| (c as f64, v))
        })
        .collect()
}

fn markdown(
    path: &PathBuf,
    plots: &PathBuf,
    points: &[Point],
    metas: &[data::ReportMeta],
    catalog: &Catalog,
) -> Result<()> {
    std::fs::create_dir_all(plots).map_err(|err| Error::Io { path: plots.display().to_string(), err })?;
    let mut md = format!(
        "<!-- Generated by `capsim validate --markdown {} --plots {}`; do not edit by hand. -->\n# Validation: predicted against measured\n\n",
        path.display(),
        plots.display()
    );
    md += "Every point of calibration/points.csv replayed as its report ran it (DESIGN.md section 3), predicted by\n\
           the simulator and compared with the measured value. Error = (predicted - measured) / measured. Flagged\n\
           points are shown and left out of every statistic. Targets (src/validate.rs `TARGETS`): in-sample median\n\
           |error| <= 10% and p90 <= 25% for TTFT, ITL or per-user tok/s, and E2E; extrapolate-concurrency median <= 15%;\n\
           cross-gpu median <= 20%; leave-one-report-out and corpus-model median <= 25%. Each protocol also counts the measured points inside the\n\
           predicted +-1 sigma band (the fit's covariance and residual scatter; about 68% if the bands are honest).\n\n\
           These protocols measure the four reports' profiles. How the step model learned across the public corpus\n\
           (calibration/corpus, `capsim calibrate --corpus`) transfers to a GPU, a model or an engine it was not fitted on\n\
           is measured over about 3,800 corpus points in [validation/corpus.md](validation/corpus.md)\n\
           (`capsim validate --protocol corpus-all --markdown validation/corpus.md`: corpus-in-sample, leave-one-gpu-out,\n\
           leave-one-model-out, leave-one-engine-out). The corpus's large deployments (disaggregated prefill/decode,\n\
           speculative decoding, attention data parallelism, wide expert parallelism), predicted by the model learned on the\n\
           plain points (with MTP's acceptance and the fixed time of an exchange between attention-DP ranks fitted on the\n\
           training set's large points), are in [validation/large.md](validation/large.md) (`capsim validate --protocol corpus-large\n\
           --markdown validation/large.md`: large-in-sample, large-leave-one-gpu-out; targets TTFT <= 25%, TPOT <= 15%).\n\n";
    let per_protocol: Vec<Result<Vec<Row>>> =
        Protocol::ALL.par_iter().map(|&p| validate::run(p, points, metas, catalog, None, None)).collect();
    for (p, rows) in Protocol::ALL.into_iter().zip(per_protocol) {
        let rows = rows?;
        let _ = writeln!(md, "## Protocol `{}`\n", p.as_str());
        md += match p {
            Protocol::InSample => "The shipped profiles, calibrated on all unflagged points of their report.\n\n",
            Protocol::ExtrapolateConcurrency => "Profiles fitted only on points at concurrency 4 or less, predicting every higher-concurrency point.\n\n",
            Protocol::LeaveOneContextOut => "Each input length predicted by a profile fitted without any point at that length.\n\n",
            Protocol::CrossGpu => "Qwen3-Coder-30B-A3B: report 000's profile moved to the H200 SXM predicts report 001, and 001's moved to the H100 PCIe predicts 000.\n\n",
            Protocol::LeaveOneReportOut => "Each report predicted by the shared hardware model (src/hardware.rs) fitted on the other reports' profiles only: the deployment as the report states it (model, GPU, precision, engine), every coefficient from the shared model, the experiment's unknowns at their priors. This was capsim's answer for a deployment nobody measured before the step model learned on the corpus; corpus-model below is its answer now.\n\n",
            Protocol::CorpusModel => "Each report predicted by the step model learned on the public corpus alone (models/learned.toml, `capsim calibrate --corpus`; no report point is in it): the deployment as the report states it (model, GPU, precision, engine), every coefficient from the learned model for that GPU, engine, dtype and model family (src/hardware/learned.rs), the memory/compute overlap from the other reports' shared model, the experiment's unknowns at their priors. This is what capsim answers for a deployment nobody measured (`capsim simulate --model M --gpu G ...` without a profile).\n\n",
        };
        for (line, _) in target_lines(p, &rows) {
            let _ = writeln!(md, "- target: {line}");
        }
        if let Some(c) = coverage_line(&rows) {
            let _ = writeln!(md, "- {c}");
        }
        md += "\n```\n";
        md += &summary_table(&rows);
        md += "```\n\n<details><summary>every point</summary>\n\n```\n";
        md += &rows_table(&rows);
        md += "```\n\n</details>\n\n";
    }
    // Max safe queue depth of report 002.
    let rows = validate::run(Protocol::InSample, points, metas, catalog, Some("002"), None)?;
    md += "## Max safe queue depth (report 002: burst, mean TTFT <= 3.0 s)\n\n| scenario | reported | predicted |\n| --- | --- | --- |\n";
    for r in rows.iter().filter(|r| r.metric == "max_safe_queue_depth") {
        let _ = writeln!(md, "| {} | {} | {} |", r.scenario, num(r.measured, 4), fmt_opt(r.predicted, 4));
    }
    md += "\n## Plots\n\nMeasured points (dots) over simulated curves (lines), in-sample profiles, per report and scenario.\n\n";
    let profiles = validate::builtin_profiles_by_report(catalog)?;
    let mut reports: Vec<&str> = points.iter().map(|p| p.report.as_str()).collect();
    reports.dedup();
    for rep in reports {
        let Some((_, prof)) = profiles.iter().find(|(r, _)| r == rep) else {
            continue;
        };
        let u = prof.file.experiment.unwrap_or_default();
        for metric in ["ttft_s", "per_user_tok_s"] {
            let pts: Vec<&Point> = points
                .iter()
                .filter(|p| {
                    p.report == rep
                        && p.metric == metric
                        && p.is_experiment()
                        && p.concurrency.is_some()
                        && !p.is_flagged()
                })
                .collect();
            let mut scen: Vec<&str> = pts.iter().map(|p| p.scenario.as_str()).collect();
            scen.sort();
            scen.dedup();
            if scen.is_empty() {
                continue;
            }
            let mut series = Vec::new();
            for s in &scen {
                let sp: Vec<&&Point> = pts.iter().filter(|p| p.scenario == *s).collect();
                let max_c = sp.iter().filter_map(|p| p.concurrency).max().unwrap_or(1);
                let mut concs: Vec<u32> =
                    [1u32, 2, 4, 8, 16, 32, 64, 128].into_iter().filter(|&c| c <= max_c).collect();
                concs.extend(sp.iter().filter_map(|p| p.concurrency));
                concs.sort();
                concs.dedup();
                let base = (*sp[0]).clone();
                let load = if base.load == LoadKind::Unknown { "unknown load" } else { base.load.as_str() };
                series.push((format!("{s} ({load}) simulated"), curve(prof, &base, metric, &concs, &u, metas), false));
                series.push((
                    format!("{s} measured"),
                    sp.iter().map(|p| (p.concurrency.unwrap() as f64, p.value)).collect(),
                    true,
                ));
            }
            let ser: Vec<Series> = series
                .iter()
                .enumerate()
                .map(|(i, (l, pts, m))| Series { label: l, points: pts.clone(), markers: *m, color: i / 2 })
                .collect();
            let file = format!("{}_{}.svg", &rep[..3], metric);
            let svg = svg_chart(
                &format!("report {}: {metric} against concurrency", &rep[..3]),
                "concurrency",
                metric,
                &ser,
                None,
                None,
                true,
            );
            let fpath = plots.join(&file);
            std::fs::write(&fpath, svg).map_err(|err| Error::Io { path: fpath.display().to_string(), err })?;
            let _ = writeln!(md, "![report {} {metric}]({}/{file})\n", &rep[..3], plots.display());
        }
    }
    std::fs::write(path, md).map_err(|err| Error::Io { path: path.display().to_string(), err })?;
    outln!("wrote {} and plots under {}", path.display(), plots.display())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ProfileArgs;
    use clap::{Args, FromArgMatches};

    /// A disaggregated TTFT's band holds the replays with the pools' ratio moved (the prefill pool
    /// slower and the decode pool faster, and the other way), where they reach beyond the band of
    /// both pools moved alike: 512 clients of 4,096-token prompts on one prefill worker and two
    /// decode workers, near the prefill pool's capacity. Other statistics keep the band of both
    /// pools moved alike.
    #[test]
    fn a_disaggregated_ttft_band_holds_the_replays_with_the_pools_ratio_moved() {
        use capsim::experiment::{disaggregated_summary, metric_of_point};
        let catalog = capsim::catalog::Catalog::builtin();
        let args = ProfileArgs {
            gpu: Some("H200 SXM".into()),
            prefill_workers: Some(1),
            decode_workers: Some(2),
            ..ProfileArgs::default()
        };
        let d = args.disaggregated(&catalog).unwrap().unwrap();
        // A `vllm bench serve` result of that load (the measured values do not enter the band).
        let file = std::env::temp_dir().join(format!("capsim-pd-band-{}.json", std::process::id()));
        let ms = |v: f64| serde_json::json!(v);
        let mut v = serde_json::json!({"backend": "vllm", "model_id": "Qwen3-Coder-30B-A3B-Instruct",
            "max_concurrency": 512, "num_prompts": 2048, "completed": 2048, "failed": 0, "request_rate": "inf",
            "burstiness": 1.0, "duration": 400.0, "total_input_tokens": 2048.0 * 4096.0,
            "total_output_tokens": 2048.0 * 512.0, "request_throughput": 5.0, "output_throughput": 2500.0});
        for stat in ["mean", "median", "p90", "p99"] {
            for (m, x) in [("ttft", 5e4), ("tpot", 90.0), ("itl", 90.0), ("e2el", 9e4)] {
                v[format!("{stat}_{m}_ms")] = ms(x);
            }
        }
        std::fs::write(&file, v.to_string()).unwrap();
        let (runs, _) = capsim::measured::read_path(&file).unwrap();
        let _ = std::fs::remove_file(&file);
        assert_eq!(runs.len(), 1);
        let rows = super::pd_run_rows(&d, &runs);
        let points = runs[0].points("validate");
        let half = std::f64::consts::FRAC_1_SQRT_2;
        let at = |x: &capsim::profile::disagg::Disaggregated| disaggregated_summary(x, &points[0]).unwrap();
        let (slow, fast) = (at(&super::pd_perturbed(&d, -1.0, -1.0)), at(&super::pd_perturbed(&d, 1.0, 1.0)));
        let moved = [at(&super::pd_perturbed(&d, -half, half)), at(&super::pd_perturbed(&d, half, -half))];
        let resid = d.decode.file.fit.as_ref().unwrap().residual_sigma_log;
        let mut beyond = 0;
        for (r, p) in rows.iter().zip(&points) {
            let v = r.predicted.unwrap();
            let alike =
                super::alike_band(v, metric_of_point(&slow, p).unwrap(), metric_of_point(&fast, p).unwrap(), resid)
                    .unwrap();
            let (lo, hi) = r.band.unwrap();
            if r.metric != "ttft_s" {
                assert_eq!((lo, hi), alike, "{} {}", r.metric, r.stat);
                continue;
            }
            for s in &moved {
                let x = metric_of_point(s, p).unwrap();
                assert!(lo <= x && x <= hi, "TTFT {}: {x} outside {lo} .. {hi}", r.stat);
                beyond += usize::from(x < alike.0 || x > alike.1);
            }
        }
        assert!(beyond > 0, "no TTFT replay with the pools' ratio moved reached beyond the band of both moved alike");
    }

    /// `ProfileArgs::given_flags` knows every flag of the group: each one given alone is reported, so
    /// a flag added to the group cannot slip past validate's refusal without --runs.
    #[test]
    fn given_flags_knows_every_deployment_flag() {
        let cmd = ProfileArgs::augment_args(clap::Command::new("t"));
        let mut n = 0;
        for arg in cmd.get_arguments() {
            let long = format!("--{}", arg.get_long().expect("a long flag"));
            let mut argv = vec!["t".to_string(), long.clone()];
            if arg.get_action().takes_values() {
                let value = arg.get_possible_values().first().map_or("1".to_string(), |v| v.get_name().to_string());
                argv.push(value);
            }
            let m = cmd.clone().try_get_matches_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
            let a = ProfileArgs::from_arg_matches(&m).unwrap();
            assert_eq!(a.given_flags(), vec![long.as_str()], "{argv:?}");
            n += 1;
        }
        assert!(n >= 30, "{n} flags");
        assert!(ProfileArgs::default().given_flags().is_empty());
    }
}
