//! `capsim validate`: predicted against measured for every point, per protocol; VALIDATION.md.

use super::shard::{line, ScaleOutArgs};
use super::ProfileArgs;
use capsim::catalog::Catalog;
use capsim::data::{self, LoadKind, Point};
use capsim::error::{Error, Result};
use capsim::experiment::{predict, ExperimentUnknowns};
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

pub(super) fn fmt_opt(v: Option<f64>, digits: usize) -> String {
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
pub(super) fn coverage_text((n, inside): (usize, usize), what: &str) -> Option<String> {
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

pub fn run(a: ValidateArgs) -> Result<()> {
    let catalog = Catalog::builtin();
    a.scale_out.shard()?;
    if a.scale_out.jsonl && (a.json || a.markdown.is_some()) {
        return Err(Error::flag("--jsonl", "choose one output: --jsonl, --json or --markdown"));
    }
    if !a.runs.is_empty() {
        return super::validate_runs::run(&a);
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
