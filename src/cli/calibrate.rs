//! `capsim calibrate`: fit a profile for every (model, GPU, engine) in the reports' data, or for a
//! user's own benchmark runs (`--runs`).

use super::{parse_dtype, ProfileArgs, KV_DTYPES, WEIGHT_DTYPES};
use capsim::calibrate::runs::{files_model, is_fp8_name, target_for_runs, Deployment, FileProvenance};
use capsim::calibrate::{self, report_text, FitOptions, FitReport, PriorSource, Target};
use capsim::catalog::Catalog;
use capsim::data::{self, Point, ReportMeta};
use capsim::error::{Error, Result};
use capsim::hardware::SharedModel;
use capsim::measured::{self, Run};
use capsim::profile::Profile;
use capsim::profile::{EngineKind, ProfileFile};
use capsim::units::Dtype;
use clap::Args;
use rayon::prelude::*;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Args, Debug)]
pub struct CalibrateArgs {
    /// Benchmark result files or directories (vllm bench serve, SGLang bench_serving, GuideLLM, AIPerf,
    /// GenAI-Perf): calibrate one profile from them instead of the reports' points.
    #[arg(long, num_args = 1.., value_name = "PATH")]
    pub runs: Vec<PathBuf>,
    /// Name of the profile written from --runs (DIR/NAME.toml and DIR/NAME.fit.txt).
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub deployment: ProfileArgs,
    /// Measured points (default: the embedded calibration/points.csv).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Folder for <profile>.toml and <profile>.fit.txt.
    #[arg(long, default_value = "models")]
    pub out: PathBuf,
    /// Only the report whose file name starts with this (e.g. 001).
    #[arg(long)]
    pub report: Option<String>,
    /// Evaluation budget of the simulation-in-the-loop stage, per profile (default 2000 for the
    /// reports, 5000 for --runs: a sweep of runs holds hundreds of statistics whose fit converges in
    /// 3000-4500 evaluations, and a budget cut short leaves the per-sequence cost and the expert
    /// spread confounded).
    #[arg(long)]
    pub max_evals: Option<usize>,
    /// Print the fit reports as JSON.
    #[arg(long)]
    pub json: bool,
    /// Learn the step model from the public corpus (embedded calibration/corpus, or a folder laid out
    /// like it) and write OUT/learned.toml and OUT/learned.fit.txt: efficiencies and host costs per
    /// GPU, engine, pair and dtype, the measured deployments' residuals, the clients' own costs.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["runs", "data", "report", "name", "max_evals"])]
    #[allow(clippy::option_option)]
    pub corpus: Option<Option<PathBuf>>,
}

/// Every run in the paths, with one provenance line per file.
pub fn read_runs(paths: &[PathBuf]) -> Result<(Vec<Run>, Vec<FileProvenance>, Vec<String>)> {
    // One walk over all paths: a file reached twice (a link, a folder given twice) is read once.
    let (runs, skipped) = measured::read_paths(paths)?;
    let mut files: Vec<FileProvenance> = Vec::new();
    for r in &runs {
        if let Some(f) = files.iter_mut().find(|f| f.path == r.source.file) {
            f.runs += 1;
            continue;
        }
        let bytes = std::fs::read(&r.source.file).map_err(|err| Error::Io { path: r.source.file.clone(), err })?;
        files.push(FileProvenance {
            path: r.source.file.clone(),
            sha256: calibrate::sha256_hex(&bytes),
            tool: format!(
                "{}{}",
                r.source.tool.as_str(),
                r.source.tool_version.as_ref().map_or(String::new(), |v| format!(" {v}"))
            ),
            runs: 1,
        });
    }
    Ok((runs, files, skipped))
}

/// The deployment of the runs: flags first, else what the files say and the catalog knows.
pub fn deployment_of(a: &ProfileArgs, runs: &[Run], catalog: &Catalog) -> Result<(Deployment, Vec<String>)> {
    let mut notes = Vec::new();
    // A disaggregated deployment's pools are predicted from the learned model, not fitted from one
    // deployment's runs: a pool flag would be dropped, so it is refused, naming it.
    a.refuse_pools(
        "calibrate --runs fits one aggregated deployment; a disaggregated deployment runs in simulate, capacity --disaggregated, explain and validate --runs only",
    )?;
    if a.profile.is_some() {
        return Err(Error::flag(
            "--profile",
            "calibrating from --runs fits a new profile; name the deployment with --model and --gpu",
        ));
    }
    let files = files_model(runs, catalog)?;
    let model = match &a.model {
        Some(m) => {
            // A profile named after one model and fitted to another's runs is wrong under either name.
            if let (Some(id), Ok(flag)) = (&files, catalog.model(m)) {
                if let Ok(named) = catalog.model(id) {
                    if !named.same_architecture(&flag) {
                        return Err(Error::flag(
                            "--model",
                            format!(
                                "`{m}` contradicts the files, which measured `{id}` ({}): leave --model out to take the files' model, or pass runs of `{m}`",
                                named.name
                            ),
                        ));
                    }
                }
            }
            m.clone()
        }
        None => {
            let id = files.clone().ok_or_else(|| {
                Error::flag("--model", "required: the files name no model (give a catalog name or a config.json)")
            })?;
            let arch = catalog.model(&id).map_err(|_| {
                Error::flag(
                    "--model",
                    format!("required: the files name `{id}`, which the model catalog does not know"),
                )
            })?;
            notes.push(format!("model from the files' model id `{id}`: {}", arch.name));
            id
        }
    };
    let gpu = a.gpu.clone().ok_or_else(|| Error::flag("--gpu", "required: the GPU the runs were measured on"))?;
    let tp = a.tp.unwrap_or(1);
    if tp == 0 {
        return Err(Error::flag("--tp", "must be at least 1"));
    }
    let engine = match (a.engine_settings().kind, calibrate::runs::files_engine(runs)?) {
        (Some(k), _) => k,
        (None, Some(k)) => {
            notes.push(format!("engine from the files (their server or endpoint names it): {}", k.as_str()));
            k
        }
        (None, None) => {
            notes.push("engine not given (--engine), and the files name none: vLLM V1 scheduling assumed".into());
            EngineKind::Vllm
        }
    };
    let fp8_named = [Some(model.as_str()), files.as_deref()].into_iter().flatten().find(|m| is_fp8_name(m));
    let weight_dtype = match &a.precision {
        Some(p) => {
            let d = parse_dtype("--precision", p, WEIGHT_DTYPES)?;
            // An FP8 checkpoint is served with FP8 weights: another precision is a different deployment.
            if let (Some(name), false) = (fp8_named, d == Dtype::Fp8) {
                return Err(Error::flag(
                    "--precision",
                    format!(
                        "{d} contradicts the model `{name}`, an FP8 checkpoint: give --precision fp8 or leave it out"
                    ),
                ));
            }
            d
        }
        None => {
            let fp8 = fp8_named.is_some();
            let d = if fp8 { Dtype::Fp8 } else { Dtype::Bf16 };
            notes.push(format!("weight precision not given (--precision): {d} assumed from the model name"));
            d
        }
    };
    let kv_dtype = match &a.kv_dtype {
        Some(k) => parse_dtype("--kv-dtype", k, KV_DTYPES)?,
        None => {
            notes.push("KV cache dtype not given (--kv-dtype): bf16 assumed (the engines' `auto`)".into());
            Dtype::Bf16
        }
    };
    // The layout --attention-dp, --ep, --pp and --redundant-experts state, checked as simulate checks
    // it (a bad one is refused naming its flag).
    let parallel = {
        let arch = catalog.model(&model).map_err(|e| Error::flag("--model", e.to_string()))?;
        let spec = catalog.gpu(&gpu).map_err(|e| Error::flag("--gpu", e.to_string()))?;
        a.parallel(&arch, spec, tp)?
    };
    let mut settings = a.engine_settings();
    if settings.kind.is_none() && settings.version.is_none() {
        settings.version = calibrate::runs::files_server_version(runs, engine, &mut notes);
    }
    settings.kind = Some(engine);
    notes.extend(capsim::calibrate::runs::chunking_notes(
        runs,
        settings.stream_interval.unwrap_or(1),
        a.spec_method.is_some(),
    ));
    Ok((
        Deployment {
            model,
            gpu,
            tensor_parallel: tp,
            expert_parallel: a.expert_parallel,
            parallel,
            engine,
            weight_dtype,
            kv_dtype,
            settings,
            speculative: speculative_to_fit(a)?,
        },
        notes,
    ))
}

/// The layout flags as given (` --attention-dp 8 --ep 8`), for the command a profile records.
fn layout_flags(a: &ProfileArgs) -> String {
    [("--attention-dp", a.attention_dp), ("--ep", a.ep), ("--pp", a.pp), ("--redundant-experts", a.redundant_experts)]
        .into_iter()
        .filter_map(|(f, v)| v.map(|n| format!(" {f} {n}")))
        .collect()
}

/// The speculative decoding whose acceptance `calibrate --runs` fits: --spec-method and --spec-tokens
/// as given, the rate left to the fit (a placeholder until then).
fn speculative_to_fit(a: &ProfileArgs) -> Result<Option<capsim::profile::Speculative>> {
    if a.spec_method.is_none() {
        return a.speculative();
    }
    if a.spec_accept_rate.is_some() {
        return Err(Error::flag(
            "--spec-accept-rate",
            "calibrate --runs fits the acceptance rate from the runs' TPOT: leave it out",
        ));
    }
    ProfileArgs { spec_accept_rate: Some("0.5".into()), ..a.clone() }.speculative()
}

/// `calibrate --runs` of a deployment with speculative decoding: its physics from the learned step
/// model (or the shared hardware model), its acceptance rate fitted to the runs' TPOT
/// (capsim::calibrate::spec), written as a profile with its `[speculative]` table.
fn run_spec(
    a: &CalibrateArgs,
    catalog: &Catalog,
    name: &str,
    dep: &Deployment,
    runs: &[Run],
    command: &str,
) -> Result<()> {
    let profile = capsim::hardware::unmeasured_profile(catalog, &catalog.hardware, name, dep)?;
    let spec = profile.speculative().cloned().expect("a speculative deployment");
    let fit = calibrate::spec::fit_acceptance(&profile, runs)?;
    let mut pf = profile.file.clone();
    pf.description = format!("{}; speculative acceptance fitted from {} run(s)", pf.description, runs.len());
    pf.provenance.command = command.to_string();
    pf.provenance.notes.push(format!(
        "acceptance rate fitted to the runs' TPOT on the {} physics (one-dimensional search)",
        profile.retarget_method.as_deref().unwrap_or("deployment's")
    ));
    let mut s = spec.with_rate(fit.accept_rate);
    s.accept_rate_source = format!("fitted by `{command}`");
    s.fit_tpot_median_abs_error_pct = Some((fit.median_abs_error_pct * 100.0).round() / 100.0);
    s.fit_points = Some(fit.n_points);
    pf.speculative = Some(s);
    // The written profile must read back.
    pf.resolve(name, catalog)?;
    std::fs::create_dir_all(&a.out).map_err(|err| Error::Io { path: a.out.display().to_string(), err })?;
    let toml_path = a.out.join(format!("{name}.toml"));
    let fit_path = a.out.join(format!("{name}.fit.txt"));
    let header =
        format!("# Generated by `{command}` (capsim {}). Fit report: {name}.fit.txt\n", env!("CARGO_PKG_VERSION"));
    std::fs::write(&toml_path, header + &pf.to_toml())
        .map_err(|err| Error::Io { path: toml_path.display().to_string(), err })?;
    let txt = calibrate::spec::fit_text(name, spec.tokens, spec.method.as_str(), &fit);
    std::fs::write(&fit_path, &txt).map_err(|err| Error::Io { path: fit_path.display().to_string(), err })?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&fit).expect("json"))?;
    } else {
        out!("{txt}")?;
        outln!("wrote {} and {}", toml_path.display(), fit_path.display())?;
    }
    Ok(())
}

fn write_profile(out: &Path, command: &str, pf: &ProfileFile, rep: &FitReport) -> Result<(PathBuf, PathBuf, String)> {
    let toml_path = out.join(format!("{}.toml", pf.name));
    let fit_path = out.join(format!("{}.fit.txt", pf.name));
    let header = format!(
        "# Generated by `{}` (capsim {}). Fit report: {}.fit.txt\n",
        command,
        env!("CARGO_PKG_VERSION"),
        pf.name
    );
    std::fs::write(&toml_path, header + &pf.to_toml())
        .map_err(|err| Error::Io { path: toml_path.display().to_string(), err })?;
    let txt = report_text(rep);
    std::fs::write(&fit_path, &txt).map_err(|err| Error::Io { path: fit_path.display().to_string(), err })?;
    Ok((toml_path, fit_path, txt))
}

pub fn run(a: CalibrateArgs) -> Result<()> {
    if a.runs.is_empty() {
        // Without --runs the deployments are the reports' or the corpus's own: a deployment flag
        // would be dropped, so it is refused, naming it (the catalog files still apply).
        let mode = if a.corpus.is_some() {
            "--corpus fits the corpus's"
        } else {
            "without --runs calibrate fits the reports'"
        };
        if let Some(flag) = a.deployment.given_flags().into_iter().find(|f| !matches!(*f, "--gpus-file" | "--hardware"))
        {
            return Err(Error::flag(
                flag,
                format!("{mode} own deployments, each as measured; {flag} names the deployment of --runs"),
            ));
        }
    }
    if let Some(dir) = &a.corpus {
        return run_corpus(&a, dir.as_deref());
    }
    let max_evals = a.max_evals.unwrap_or(if a.runs.is_empty() { 2000 } else { 5000 });
    if max_evals < 10 {
        return Err(Error::flag("--max-evals", "must be at least 10"));
    }
    // The output folder is checked before the fit, not after minutes of it.
    super::check_output_dir("--out", &a.out)?;
    let catalog = a.deployment.catalog()?;
    let (points, metas, targets, sha, command): (Vec<Point>, Vec<ReportMeta>, Vec<Target>, String, String) = if a
        .runs
        .is_empty()
    {
        if a.name.is_some() {
            return Err(Error::flag(
                "--name",
                "names the profile of --runs; the reports' profiles are named after their deployment",
            ));
        }
        let text = match &a.data {
            None => data::POINTS_CSV.to_string(),
            Some(p) => capsim::error::read_file(p)?,
        };
        let src = a.data.as_ref().map_or(data::POINTS_PATH.to_string(), |p| p.display().to_string());
        let points = data::parse_points(&src, &text)?;
        let metas = data::report_metas()?;
        let mut targets = calibrate::targets(&metas, &catalog)?;
        if let Some(r) = &a.report {
            targets.retain(|t| t.report.starts_with(r.as_str()));
            if targets.is_empty() {
                return Err(Error::flag("--report", format!("no independent report starts with `{r}`")));
            }
        }
        let command = format!(
            "capsim calibrate --data {} --out {}{} --max-evals {}",
            src,
            a.out.display(),
            a.report.as_ref().map(|r| format!(" --report {r}")).unwrap_or_default(),
            max_evals
        );
        (points, metas, targets, calibrate::sha256_hex(text.as_bytes()), command)
    } else {
        if a.data.is_some() || a.report.is_some() {
            return Err(Error::flag(
                "--runs",
                "calibrates from result files; --data and --report select the reports' points",
            ));
        }
        let name = a.name.clone().ok_or_else(|| Error::flag("--name", "required with --runs: the profile's name"))?;
        let (runs, files, skipped) = read_runs(&a.runs)?;
        for s in &skipped {
            eprintln!("skipped {s}");
        }
        // What a file lacks (a latency the tool always writes, a count InferenceX drops): said
        // here and in the fit report, as validate --runs lists it under the run.
        let absent: Vec<String> =
            runs.iter().flat_map(|r| r.absent_notes().map(move |n| format!("{}: {n}", r.label()))).collect();
        for n in &absent {
            eprintln!("note: {n}");
        }
        let (dep, notes) = deployment_of(&a.deployment, &runs, &catalog)?;
        let mut t = target_for_runs(&name, &dep, &runs, &files, &catalog)?;
        t.assumptions.extend(notes);
        t.assumptions.extend(absent);
        let points: Vec<Point> = runs.iter().flat_map(|r| r.points(&name)).collect();
        let all_sha: String = files.iter().map(|f| f.sha256.as_str()).collect::<Vec<_>>().join("");
        let command = format!(
                "capsim calibrate --runs {} --model {} --gpu {} --tp {}{}{} --engine {} --precision {} --kv-dtype {} --name {} --out {} --max-evals {}",
                a.runs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" "),
                dep.model,
                dep.gpu,
                dep.tensor_parallel,
                if dep.expert_parallel { " --expert-parallel" } else { "" },
                layout_flags(&a.deployment),
                dep.engine.as_str(),
                dep.weight_dtype,
                dep.kv_dtype,
                name,
                a.out.display(),
                max_evals
            );
        if let Some(s) = &dep.speculative {
            let command = format!(
                "{} --spec-method {} --spec-tokens {}",
                command.rsplit_once(" --max-evals").map_or(command.as_str(), |c| c.0),
                s.method.as_str(),
                s.tokens
            );
            return run_spec(&a, &catalog, &name, &dep, &runs, &command);
        }
        (points, vec![], vec![t], calibrate::sha256_hex(all_sha.as_bytes()), command)
    };
    let opts = FitOptions {
        use_point: &|_| true,
        max_evaluations: max_evals,
        command,
        data_sha256: sha,
        // A user's runs are few points on one deployment: what they cannot identify is pulled toward
        // the step model learned on the corpus (the shared hardware model of the reports where the
        // catalog has none). Fitted on a held-out GPU's runs at concurrency <= 8, its priors predict
        // the runs at 32 and more with median |error| TTFT 22.5%, TPOT 8.0%, where the shared
        // model's gave 25.6% and 21.1% (examples/runs_lab.rs). The reports' own profiles are each
        // fitted alone (the shared model is estimated from them).
        priors: match (&catalog.learned, a.runs.is_empty()) {
            (_, true) => PriorSource::Generic,
            (Some(model), false) => PriorSource::Learned { model, shared: &catalog.hardware },
            (None, false) => PriorSource::Shared(&catalog.hardware),
        },
    };
    let mut reports = Vec::new();
    let mut fitted = Vec::new();
    let pb = super::progress_bar(targets.len() as u64, "profiles fitted");
    // The reports' profiles are fitted alone, so in parallel (a fit waits on its slowest simulation
    // at every evaluation; two fits fill each other's gaps), then written in order.
    let fits: Vec<_> = targets
        .par_iter()
        .map(|t| {
            let start = Instant::now();
            let fit = calibrate::calibrate(&points, &metas, t, &catalog, &opts);
            pb.inc(1);
            (fit, start.elapsed().as_secs_f64())
        })
        .collect();
    pb.finish_and_clear();
    // Created once there is something to write: a refused fit leaves no empty folder behind.
    if fits.iter().all(|(f, _)| f.is_ok()) {
        std::fs::create_dir_all(&a.out).map_err(|err| Error::Io { path: a.out.display().to_string(), err })?;
    }
    for (fit, secs) in fits {
        let (pf, rep) = fit.map_err(|e| as_flag(e, a.name.as_deref(), &a.deployment))?;
        fitted.push(pf.resolve(&pf.name, &catalog)?);
        let (toml_path, fit_path, txt) = write_profile(&a.out, &opts.command, &pf, &rep)?;
        if a.json {
            reports.push(rep);
        } else {
            outln!("{txt}")?;
            outln!("wrote {} and {} ({secs:.1} s)\n", toml_path.display(), fit_path.display())?;
        }
    }
    // The shared hardware model over every deployment: all reports' profiles when every report was
    // calibrated; the built-in ones plus this one for a user's runs. A single report's refit alone
    // does not overwrite it.
    if a.report.is_none() {
        let mut pool = fitted;
        if !a.runs.is_empty() {
            for (_, p) in capsim::validate::builtin_profiles_by_report(&catalog)? {
                pool.push(p);
            }
        }
        let refs: Vec<&Profile> = pool.iter().collect();
        let shared = SharedModel::fit(&refs, &opts.command);
        let path = a.out.join(if a.runs.is_empty() {
            "hardware.toml".to_string()
        } else {
            format!("{}.hardware.toml", a.name.as_deref().unwrap_or("runs"))
        });
        let text = format!(
            "# The shared hardware model (src/hardware.rs), fitted over the profiles listed under each value.\n# Generated by `{}`; do not edit by hand.\n{}",
            opts.command,
            shared.to_toml()
        );
        std::fs::write(&path, text).map_err(|err| Error::Io { path: path.display().to_string(), err })?;
        if !a.json {
            outln!("wrote {} (shared hardware model over {} deployments)", path.display(), refs.len())?;
        }
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&reports).expect("json"))?;
    }
    Ok(())
}

/// An error of the profile being fitted from --runs that a flag caused (`engine.max_num_seqs`,
/// `gpu.tensor_parallel` in the profile the flags become), named by the flag the user typed.
fn as_flag(e: Error, name: Option<&str>, d: &ProfileArgs) -> Error {
    let Error::Input { at, msg } = &e else { return e };
    let Some(field) = at.field.as_deref().filter(|_| name == Some(at.source.as_str())) else { return e };
    let flag = match field {
        "gpu.tensor_parallel" => "--tp".to_string(),
        f => match f.strip_prefix("engine.") {
            Some(k) => format!("--{}", k.replace('_', "-")),
            None => return e,
        },
    };
    match d.given_flags().into_iter().find(|g| *g == flag) {
        Some(g) => Error::flag(g, msg.clone()),
        None => e,
    }
}

/// `capsim calibrate --corpus`: the learned step model (crate::calibrate::corpus).
fn run_corpus(a: &CalibrateArgs, dir: Option<&std::path::Path>) -> Result<()> {
    super::check_output_dir("--out", &a.out)?;
    let catalog = a.deployment.catalog()?;
    let ex = capsim::corpus::load(&catalog, dir)?;
    let (total, source) = (ex.total(), dir.map_or("calibration/corpus (embedded)".into(), |d| d.display().to_string()));
    // Large deployments (disaggregated, MTP, attention-DP) are predicted from the model, not fitted.
    let exps = ex.plain();
    let command = format!(
        "capsim calibrate --corpus{} --out {}",
        dir.map_or(String::new(), |d| format!(" {}", d.display())),
        a.out.display()
    );
    let provenance = format!(
        "{command}: {} of {total} points of {source} (plain aggregated deployments; then the exchange latency between attention-DP ranks on the attention-DP deployments' TPOTs, and each engine's hand-over of a disaggregated request on the disaggregated deployments' low-load TTFTs; the rest are large deployments, validated apart, or cannot be expressed yet: capsim points --corpus)",
        exps.len()
    );
    let mut fit = calibrate::corpus::fit(&catalog, &exps, &provenance)?;
    // No plain deployment exchanges tokens between attention-DP ranks: the latency of that exchange
    // is fitted on the attention-DP deployments, with the step model fixed (calibrate/exchange.rs).
    let large = ex.large();
    let obs = calibrate::exchange::observations(&catalog, &fit.model, &large);
    fit.model.exchange = calibrate::exchange::fit(obs.iter());
    // Nor hands a request from a prefill worker to a decode worker: that hand-over is fitted per
    // engine on the disaggregated deployments' low-load TTFTs, with the exchange (calibrate/handover.rs).
    let obs = calibrate::handover::observations(&catalog, &fit.model, &large);
    fit.model.handover = calibrate::handover::fit(obs.iter());
    std::fs::create_dir_all(&a.out).map_err(|err| Error::Io { path: a.out.display().to_string(), err })?;
    let toml_path = a.out.join("learned.toml");
    let fit_path = a.out.join("learned.fit.txt");
    let header = format!("# Written by `{command}` (capsim {}). Do not edit: regenerate.\n", env!("CARGO_PKG_VERSION"));
    std::fs::write(&toml_path, header + &fit.model.to_toml())
        .map_err(|err| Error::Io { path: toml_path.display().to_string(), err })?;
    let txt = calibrate::corpus::report_text(&fit.model, &ex);
    std::fs::write(&fit_path, &txt).map_err(|err| Error::Io { path: fit_path.display().to_string(), err })?;
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&fit.model).expect("json"))?;
    } else {
        out!("{txt}")?;
        outln!("wrote {} and {}", toml_path.display(), fit_path.display())?;
    }
    Ok(())
}
