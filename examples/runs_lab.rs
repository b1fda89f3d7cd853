//! A user's low-load runs on a GPU nobody calibrated, predicting the same deployment under load: the
//! question `capsim calibrate --runs` answers. For each GPU of the corpus, the step model is learned
//! (closed form) on every other GPU's points; each plain deployment on the held-out GPU is then
//! calibrated from its runs at concurrency <= LOW (default 8), as `calibrate --runs` fits them, with
//! each source of priors in turn, and its mean TTFT and TPOT at concurrency >= HIGH (default 32)
//! predicted by replaying the fitted profile. The learned model alone (no runs) is shown for
//! reference. A development aid for the priors of a user's fit:
//! `cargo run --release --example runs_lab [-- --low 8 --high 32 --max-evals 300 --gpu NAME --match TEXT
//! --csv FILE]` (`--match` keeps the deployments whose key holds TEXT; `RUNS_LAB_DEBUG=1` prints each
//! fit's coefficients and every point of its deployment).

use capsim::calibrate::corpus::{fit_with, median};
use capsim::calibrate::runs::target_for_runs;
use capsim::calibrate::{self, FitOptions, PriorSource};
use capsim::catalog::Catalog;
use capsim::corpus::Experiment;
use capsim::experiment::{predict_cached, ReplayCache};
use capsim::profile::Profile;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::io::Write;

/// (arm, point, predicted TTFT s, measured TTFT s, predicted TPOT s, measured TPOT s)
type Prediction = (String, String, f64, f64, f64, f64);

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Mean TTFT (s) and TPOT (s) of `e` predicted by `profile` (None where the replay gives nothing).
fn predict(profile: &Profile, e: &Experiment) -> (Option<f64>, Option<f64>) {
    let cache = ReplayCache::default();
    let u = profile.file.experiment.unwrap_or_default();
    let mut out = (None, None);
    for p in &e.points {
        let v = predict_cached(profile, p, &u, &[], &cache);
        match p.metric.as_str() {
            "ttft_s" => out.0 = v,
            "tpot_ms" => out.1 = v.map(|x| x * 1e-3),
            _ => {}
        }
    }
    out
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let low: u32 = arg(&args, "--low", 8);
    let high: u32 = arg(&args, "--high", 32);
    let max_evals: usize = arg(&args, "--max-evals", 300);
    let only_gpu: String = arg(&args, "--gpu", String::new());
    let csv: String = arg(&args, "--csv", String::new());
    let only_dep: String = arg(&args, "--match", String::new());
    let catalog = Catalog::builtin();
    let ex = capsim::corpus::load(&catalog, None)?;
    let plain = ex.plain();
    let mut gpus: Vec<String> = plain.iter().map(|e| e.gpu.clone()).collect();
    gpus.sort();
    gpus.dedup();
    // (arm, gpu) -> (|TTFT error| %, |TPOT error| %)
    let mut errs: BTreeMap<(String, String), (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    let mut lines = Vec::new();
    for g in gpus.iter().filter(|g| only_gpu.is_empty() || **g == only_gpu) {
        let train: Vec<&Experiment> = plain.iter().filter(|e| &e.gpu != g).copied().collect();
        let learned = fit_with(&catalog, &train, "runs_lab", 0)?.model;
        let mut held = catalog.clone();
        held.learned = Some(learned.clone());
        let mut by_dep: BTreeMap<String, Vec<&Experiment>> = BTreeMap::new();
        for e in plain.iter().filter(|e| &e.gpu == g) {
            let key =
                format!("{}|{}|{}|{:?}", e.point.client.as_str(), e.point.set, e.point.engine_version, e.deployment)
                    .replace(['"', ','], "");
            by_dep.entry(key).or_default().push(e);
        }
        let deps: Vec<(String, Vec<&Experiment>)> = by_dep
            .into_iter()
            .filter(|(key, es)| {
                key.contains(&only_dep)
                    && es.iter().any(|e| e.point.concurrency <= low)
                    && es.iter().any(|e| e.point.concurrency >= high)
            })
            .collect();
        eprintln!("{g}: {} deployments with runs at <= {low} and >= {high}", deps.len());
        let results: Vec<Vec<Prediction>> = deps
            .par_iter()
            .enumerate()
            .map(|(k, (key, es))| {
                let name = format!("dep{k}");
                let fit_es: Vec<&&Experiment> = es.iter().filter(|e| e.point.concurrency <= low).collect();
                let runs: Vec<capsim::measured::Run> = fit_es.iter().map(|e| (*e.run).clone()).collect();
                let points: Vec<capsim::data::Point> = runs.iter().flat_map(|r| r.points(&name)).collect();
                let d = &es[0].deployment;
                let Ok(t) = target_for_runs(&name, d, &runs, &[], &held) else { return vec![] };
                let mut arms: Vec<(&str, Option<Profile>)> = Vec::new();
                let unmeasured = capsim::hardware::unmeasured_profile(&held, &held.hardware, &name, d).ok();
                arms.push(("learned alone", unmeasured));
                for (arm, priors) in [
                    ("runs, shared priors", PriorSource::Shared(&held.hardware)),
                    ("runs, learned priors", PriorSource::Learned { model: &learned, shared: &held.hardware }),
                ] {
                    let opts = FitOptions {
                        use_point: &|_| true,
                        max_evaluations: max_evals,
                        command: "runs_lab".into(),
                        data_sha256: String::new(),
                        priors,
                    };
                    let p = calibrate::calibrate(&points, &[], &t, &held, &opts)
                        .ok()
                        .and_then(|(pf, _)| pf.resolve(&name, &held).ok());
                    arms.push((arm, p));
                }
                if std::env::var("RUNS_LAB_DEBUG").is_ok() {
                    for (arm, p) in &arms {
                        if let Some(p) = p {
                            eprintln!("{key}\n  {arm}: {:?} {:?}", p.file.coefficients, p.file.experiment);
                        }
                    }
                    for e in es.iter() {
                        let (Some((_, tm)), Some((_, pm))) = (e.point.ttft_ms, e.point.tpot_ms) else { continue };
                        let row: Vec<String> = arms
                            .iter()
                            .filter_map(|(_, p)| p.as_ref())
                            .map(|p| {
                                let (t, tp) = predict(p, e);
                                format!("{:.3}/{:.4}", t.unwrap_or(f64::NAN), tp.unwrap_or(f64::NAN))
                            })
                            .collect();
                        eprintln!(
                            "  {}x{} c{}: measured {:.3}/{:.4}; {}",
                            e.point.isl,
                            e.point.osl,
                            e.point.concurrency,
                            tm * 1e-3,
                            pm * 1e-3,
                            row.join(" ")
                        );
                    }
                }
                let mut out = Vec::new();
                for e in es.iter().filter(|e| e.point.concurrency >= high) {
                    let (Some((_, tm)), Some((_, pm))) = (e.point.ttft_ms, e.point.tpot_ms) else { continue };
                    for (arm, p) in &arms {
                        let Some(p) = p else { continue };
                        if let (Some(t), Some(tp)) = predict(p, e) {
                            out.push((
                                arm.to_string(),
                                format!("{key}|{}x{}|c{}", e.point.isl, e.point.osl, e.point.concurrency),
                                t,
                                tm * 1e-3,
                                tp,
                                pm * 1e-3,
                            ));
                        }
                    }
                }
                out
            })
            .collect();
        for (arm, id, t, tm, p, pm) in results.into_iter().flatten() {
            let en = errs.entry((arm.clone(), g.clone())).or_default();
            en.0.push((t / tm - 1.0).abs() * 100.0);
            en.1.push((p / pm - 1.0).abs() * 100.0);
            let en = errs.entry((arm.clone(), "ALL".into())).or_default();
            en.0.push((t / tm - 1.0).abs() * 100.0);
            en.1.push((p / pm - 1.0).abs() * 100.0);
            lines.push(format!("{},{g},{},{t},{tm},{p},{pm}", arm.replace(',', ";"), id.replace(',', ";")));
        }
    }
    for ((arm, g), (mut t, mut p)) in errs {
        println!(
            "{arm:<22} {g:<10} n {:>4}  TTFT |e| {:>6.1}%  TPOT |e| {:>6.1}%",
            t.len(),
            median(&mut t),
            median(&mut p)
        );
    }
    if !csv.is_empty() {
        let mut f = std::fs::File::create(&csv)?;
        writeln!(f, "arm,gpu,id,ttft_pred,ttft_meas,tpot_pred,tpot_meas")?;
        for l in lines {
            writeln!(f, "{l}")?;
        }
    }
    Ok(())
}
