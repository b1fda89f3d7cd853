//! `capsim validate --runs` on a disaggregated prefill/decode deployment: each run replayed on both
//! pools, its band from the pools' profiles moved one sigma alike and apart, and the pools named.

use super::validate_runs::{gpus_text, provenance_text};
use capsim::error::Error;
use capsim::experiment::{disaggregated_summary, metric_of_point};
use capsim::measured::Run;
use capsim::profile::disagg::Disaggregated;
use capsim::profile::Profile;
use capsim::report::num;
use capsim::validate::{self};
use rayon::prelude::*;
use serde_json::json;

/// [`provenance_lines`] of a disaggregated deployment: each pool's profile, workers, GPUs and
/// layout, the provenance (once where the pools share it) and the band.
pub(super) fn pd_provenance_lines(
    d: &Disaggregated,
    learned: Option<&capsim::hardware::learned::LearnedModel>,
) -> Vec<String> {
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
pub(super) fn pd_perturbed(d: &Disaggregated, prefill: f64, decode: f64) -> Disaggregated {
    let mut x = d.clone();
    x.prefill = capsim::capacity::perturbed(&d.prefill, prefill);
    x.decode = capsim::capacity::perturbed(&d.decode, decode);
    x
}

/// `validate::validate_runs` on a disaggregated deployment: each run replayed as its load generator
/// ran it (`experiment::run_workload`, the aggregated path's workload) on both pools
/// (`experiment::disaggregated_summary`, as the corpus replays its disaggregated points), each
/// statistic compared as the aggregated path compares it (`experiment::metric_of_point`).
///
/// The band: the aggregated path's (`validate::band_of_replays`) applied to both pools: each pool's profile one sigma slower and
/// one faster (`capacity::perturbed`), the spread widened by the fit's residual scatter in quadrature
/// in log space. A TTFT's band is also at least as wide as the replays with the prefill pool slower
/// and the decode pool faster and the other way, as the large protocols widen a disaggregated
/// point's (`validate::corpus::replayed_band`): near the prefill pool's capacity a modest error in
/// the ratio of the pools' speeds is a large one in TTFT, and scaling both pools alike does not
/// show it. There the ratio moves one sigma, split between the pools in proportion to each one's
/// sigma squared (`validate::corpus::pool_band_scales`, from the learned model's sigmas of a corpus
/// experiment, which a deployment resolved from flags is not); here each pool's sigma is its
/// profile's, taken as equal for pools of one profile, so each pool moves 1/sqrt(2) of its own.
pub(super) fn pd_run_rows(d: &Disaggregated, runs: &[Run]) -> Vec<validate::RunRow> {
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
                        let band = validate::band_of_replays(v, value(1)?, value(2)?, resid)?;
                        let moved = if p.metric == "ttft_s" { [value(3), value(4)] } else { [None, None] };
                        Some(validate::corpus::replayed_band(band, moved))
                    });
                    validate::RunRow::new(run, p, predicted, band)
                })
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flatten()
        .collect()
}

/// Why a run's statistics have no prediction on a disaggregated deployment: its shortest request
/// fits no worker of a pool (`disagg::check_pools_fit`, simulate's refusal), else as on one profile.
pub(super) fn pd_why_not_replayed(d: &Disaggregated, run: &Run, missing: &[String], all: usize) -> String {
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

/// The `disaggregated` object of `validate --runs --json`: simulate's (`disagg::deployment_json`)
/// with each pool's GPUs per worker, layout and speculation (as the top-level `parallel` and
/// `speculative`) and the profile it took.
pub(super) fn pd_json(d: &Disaggregated) -> serde_json::Value {
    let mut v = super::disagg::deployment_json(d);
    for (key, p) in [("prefill", &d.prefill), ("decode", &d.decode)] {
        let pool = &mut v[key];
        pool["gpus_per_worker"] = json!(capsim::profile::disagg::worker_gpus(p));
        pool["parallel"] = json!(p.parallel);
        pool["speculative"] = json!(p.speculative());
        pool["profile"] = json!(p.name());
        pool["retargeted_from"] = json!(p.retargeted_from);
        pool["retarget_method"] = json!(p.retarget_method);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::super::ProfileArgs;
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
            let alike = capsim::validate::band_of_replays(
                v,
                metric_of_point(&slow, p).unwrap(),
                metric_of_point(&fast, p).unwrap(),
                resid,
            )
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
