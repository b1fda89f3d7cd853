//! The fixed time of a MoE exchange between attention-DP ranks
//! (crate::profile::Coefficients::exchange_latency_s), learned after the step model.
//!
//! Why a stage of its own: no plain deployment moves tokens between attention-DP ranks, so the
//! plain points that fit the step model (calibrate::corpus) cannot identify it; every attention-DP
//! deployment's TPOT pays it twice per MoE layer and step. Replayed with only the bytes over the
//! link (catalog::Collectives::all_to_all_s), the corpus's attention-DP TPOTs came out too fast by
//! a median 17.5% (validation/large.md before this stage), on every NVIDIA GPU and both engines
//! that run them.
//!
//! What the fitted value holds is not identified, and it is larger than the exchange's kernels:
//! DeepEP's low-latency dispatch and combine on one node of DeepSeek's shape (hidden 7,168, top-8
//! of 256 experts) take 17 to 22 us at a few tokens per GPU and 27 to 41 us at 128 on GB200 and
//! B200, 35 to 68 us on H200 (aiconfigurator @ 095f58a5,
//! aic-core/src/aiconfigurator_core/systems/data/{gb200,b200_sxm,h200_sxm}/comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet),
//! about 10 us more per exchange than the link model charges; across nodes over RDMA they take 77 to
//! 369 us (deepseek-ai/DeepEP README at 567632d, "Low-latency kernels with pure RDMA"). The rest is
//! what an attention-DP step pays per MoE layer that the balanced-ranks step (sim/step_large.rs)
//! leaves out, most likely each exchange's wait for the slowest rank (unequal contexts, unequal
//! expert loads). One value for every GPU, engine and link: fitted per GPU and engine on the corpus
//! it came out 36 to 84 us on the NVIDIA GPUs, with no order by link or EP size that a per-link
//! value could carry to a GPU nobody measured.
//!
//! How: each attention-DP experiment without speculation (MTP's acceptance is fitted apart, on
//! these values) is replayed through the simulator twice, without the latency and at
//! [`PROBE_S`]; a TPOT is a sum of step times, so between the two it moves linearly with the
//! latency, and the fit takes the latency that minimizes the squared log errors of the TPOTs
//! along that line, on a grid of [`GRID_S`].

use crate::catalog::Catalog;
use crate::corpus::{Experiment, Feature};
use crate::hardware::learned::{ExchangeFit, LearnedModel};
use rayon::prelude::*;

/// The second replay's latency (s): inside the range the corpus points to, so the line between
/// the two replays is an interpolation there.
pub const PROBE_S: f64 = 100e-6;
/// The fit's resolution (s).
pub const GRID_S: f64 = 0.5e-6;
/// The largest latency the fit considers (s).
pub const MAX_S: f64 = 500e-6;

/// One attention-DP experiment's TPOT as measured and as replayed without the exchange latency
/// and at [`PROBE_S`].
#[derive(Debug, Clone)]
pub struct ExchangeObservation {
    pub gpu: String,
    pub deployment: String,
    pub measured_ms: f64,
    pub without_ms: f64,
    pub probe_ms: f64,
}

impl ExchangeObservation {
    /// The TPOT at `latency_s`, on the line through the two replays.
    pub fn at(&self, latency_s: f64) -> f64 {
        self.without_ms + (self.probe_ms - self.without_ms) * latency_s / PROBE_S
    }
}

/// `model` with its exchange latency set (None: not modelled).
pub fn with_exchange(model: &LearnedModel, fit: Option<ExchangeFit>) -> LearnedModel {
    LearnedModel { exchange: fit, ..model.clone() }
}

/// The replayed TPOT (ms) of a corpus experiment on `model`, as the protocols replay it (the
/// learned values without the deployment's own residual, the client's cost), none where it does not
/// resolve.
pub fn replay_tpot_ms(catalog: &Catalog, model: &LearnedModel, e: &Experiment) -> Option<f64> {
    let point = super::corpus::replay_points(model, e).into_iter().find(|p| p.metric == "tpot_ms")?;
    let v = super::corpus::replay(catalog, model, e, std::slice::from_ref(&point), false).ok()?[0]?;
    (v.is_finite() && v > 0.0).then_some(v)
}

/// The observations of the attention-DP experiments among `exps` without speculation, replayed on
/// `model` (its own exchange latency replaced): those whose TPOT the latency moves.
pub fn observations(catalog: &Catalog, model: &LearnedModel, exps: &[&Experiment]) -> Vec<ExchangeObservation> {
    let probe = ExchangeFit {
        latency_s: PROBE_S,
        points: 0,
        deployments: 0,
        tpot_median_abs_pct_without: f64::NAN,
        tpot_median_abs_pct: f64::NAN,
    };
    let (without, at_probe) = (with_exchange(model, None), with_exchange(model, Some(probe)));
    exps.par_iter()
        .filter(|e| {
            let f = e.features();
            f.contains(&Feature::AttentionDp) && !f.contains(&Feature::Speculative)
        })
        .filter_map(|e| {
            let measured_ms = e.points.iter().find(|p| p.metric == "tpot_ms")?.value;
            let without_ms = replay_tpot_ms(catalog, &without, e)?;
            let probe_ms = replay_tpot_ms(catalog, &at_probe, e)?;
            (probe_ms != without_ms).then(|| ExchangeObservation {
                gpu: e.gpu.clone(),
                deployment: e.deployment_key(),
                measured_ms,
                without_ms,
                probe_ms,
            })
        })
        .collect()
}

/// The latency that best explains `obs` (least squares in log TPOT along each observation's line),
/// with the TPOTs' median |error| without it and at it; None without observations.
pub fn fit<'o>(obs: impl Iterator<Item = &'o ExchangeObservation>) -> Option<ExchangeFit> {
    let obs: Vec<&ExchangeObservation> = obs.collect();
    if obs.is_empty() {
        return None;
    }
    let cost = |l: f64| -> f64 { obs.iter().map(|o| (o.at(l) / o.measured_ms).ln().powi(2)).sum() };
    let steps = (MAX_S / GRID_S).round() as usize;
    let latency_s = (0..=steps).map(|k| k as f64 * GRID_S).min_by(|x, y| cost(*x).total_cmp(&cost(*y)))?;
    let median_abs = |l: f64| {
        let mut e: Vec<f64> = obs.iter().map(|o| (o.at(l) / o.measured_ms - 1.0).abs() * 100.0).collect();
        super::corpus::median(&mut e)
    };
    let mut deployments: Vec<&str> = obs.iter().map(|o| o.deployment.as_str()).collect();
    deployments.sort_unstable();
    deployments.dedup();
    Some(ExchangeFit {
        latency_s,
        points: obs.len(),
        deployments: deployments.len(),
        tpot_median_abs_pct_without: median_abs(0.0),
        tpot_median_abs_pct: median_abs(latency_s),
    })
}

#[cfg(test)]
mod tests {
    use super::{fit, ExchangeObservation, PROBE_S};

    fn obs(gpu: &str, without: f64, probe: f64, measured: f64) -> ExchangeObservation {
        ExchangeObservation {
            gpu: gpu.into(),
            deployment: format!("{gpu} dep"),
            measured_ms: measured,
            without_ms: without,
            probe_ms: probe,
        }
    }

    /// TPOTs measured where each observation's line puts 40 us give 40 us back, whatever the
    /// slopes; the errors without it are the lines' intercepts against the measurements.
    #[test]
    fn the_fitted_latency_is_the_one_the_tpots_were_measured_at() {
        let lines = [(20.0, 30.0), (10.0, 22.0), (35.0, 41.0)];
        let o: Vec<ExchangeObservation> = lines
            .iter()
            .enumerate()
            .map(|(i, &(w, p))| obs(if i == 0 { "B200" } else { "GB200" }, w, p, w + (p - w) * 40e-6 / PROBE_S))
            .collect();
        let f = fit(o.iter()).expect("observations");
        assert!((f.latency_s - 40e-6).abs() < 1e-9, "{}", f.latency_s);
        assert!(f.tpot_median_abs_pct < 1e-6);
        assert!(f.tpot_median_abs_pct_without > 10.0);
        assert_eq!((f.points, f.deployments), (3, 2));
        assert!(fit(o.iter().filter(|o| o.gpu == "H200")).is_none());
    }

    /// Replays already too slow without it give none: the latency is never negative.
    #[test]
    fn too_slow_without_it_gives_zero() {
        let o = [obs("B200", 30.0, 40.0, 25.0)];
        assert_eq!(fit(o.iter()).expect("one").latency_s, 0.0);
    }
}
