//! `capsim validate --runs`: a user's benchmark result files replayed on the deployment the flags
//! name, aggregated or disaggregated (validate_runs_pd.rs), predicted against measured per run.

use super::deploy::EngineArg;
use super::shard::line;
use super::validate::ValidateArgs;
use super::validate::{coverage_text, fmt_opt};
use super::validate_runs_pd::{pd_json, pd_provenance_lines, pd_run_rows, pd_why_not_replayed};
use super::ProfileArgs;
use capsim::catalog::Catalog;
use capsim::error::{Error, Result};
use capsim::measured::Run;
use capsim::profile::disagg::Disaggregated;
use capsim::profile::Profile;
use capsim::report::{num, table};
use capsim::validate::{self};
use serde_json::json;
use std::fmt::Write as _;

/// The shared flag of the deployment that both pools of a disaggregated one replace with their own
/// (`--tp` beside `--prefill-tp` and `--decode-tp`: each pool's profile takes the pool's value,
/// `ProfileArgs::disaggregated`), and `--pd-routing` where each pool has one worker: a flag that
/// would change nothing, refused naming it rather than dropped.
pub(super) fn refuse_unused_pd_flags(d: &ProfileArgs) -> Result<()> {
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
pub(super) fn runs_deployment(
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
pub(super) fn layout_note(p: &Profile) -> String {
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
pub(super) fn gpus_text(p: &Profile) -> String {
    format!(
        "{} x{}{}{}",
        p.gpu.name,
        p.parallel.gpus(p.tensor_parallel),
        if p.expert_parallel { " (expert parallel)" } else { "" },
        layout_note(p)
    )
}

/// Where a profile's numbers come from: its calibration and fit, or the move that made it.
pub(super) fn provenance_text(p: &Profile, learned: Option<&capsim::hardware::learned::LearnedModel>) -> String {
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
pub(super) fn provenance_lines(p: &Profile, learned: Option<&capsim::hardware::learned::LearnedModel>) -> Vec<String> {
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

/// The rows of `runs` on the deployment: the profile's, or the disaggregated deployment's.
pub(super) fn run_rows(profile: &Profile, pd: Option<&Disaggregated>, runs: &[Run]) -> Vec<validate::RunRow> {
    match pd {
        Some(d) => pd_run_rows(d, runs),
        None => validate::validate_runs(profile, runs),
    }
}

/// `validate --runs`: every statistic of every run, predicted against measured, and a summary per
/// metric class.
pub fn run(a: &ValidateArgs) -> Result<()> {
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
