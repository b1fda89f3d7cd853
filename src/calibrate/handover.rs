//! The fixed hand-over of a disaggregated request from its prefill worker to its decode worker
//! (crate::profile::disagg::Disaggregated::handover_s), per engine, learned after the step model.
//!
//! Why a stage of its own: no aggregated deployment hands requests over, so the plain points that
//! fit the step model (calibrate::corpus) cannot identify it, and the link model charges only the
//! bytes (profile::disagg::KV_TRANSFER_LATENCY_S, 1 ms, plus the KV over the link). Replayed with
//! that alone, the corpus's disaggregated TTFTs at one to four clients, where no queue forms and a
//! TTFT is the request's own prefill, hand-over, transfer and first decode step, came out too fast
//! by a median 32 ms under SGLang and 173 ms under vLLM (Dynamo), and by 5 ms too slow under
//! TensorRT-LLM (validation/large.md of 2026-11-28, before this stage). Those are the frameworks'
//! hand-overs: the router's hop, the decode worker's KV allocation, SGLang's bootstrap handshake
//! between the servers, Dynamo's remote-prefill round trip and NIXL's notifications; which of them
//! is not identified.
//!
//! How: each disaggregated experiment measured at [`LOW_LOAD_CLIENTS`] clients or fewer is
//! replayed without a hand-over; at that load a TTFT moves one for one with it, so the fit per
//! engine is the median of the measured TTFT minus the replayed one, never below 0 (a
//! replay already too slow is the step model's error, not a negative hand-over) and at most
//! [`MAX_S`], and 0 for an engine with fewer than [`MIN_POINTS`] such TTFTs or
//! [`MIN_DEPLOYMENTS`] deployments. One value per engine and every GPU, link and layout: the frameworks differ, and the
//! corpus has too few low-load points per GPU to tell more apart.

use crate::catalog::Catalog;
use crate::corpus::Experiment;
use crate::hardware::learned::{HandoverFit, LearnedModel};
use rayon::prelude::*;

/// The most clients of a point the fit uses: below this a closed loop forms no queue at a
/// disaggregated deployment's prefill pool, so its TTFT is the sum the hand-over adds to.
pub const LOW_LOAD_CLIENTS: u32 = 4;
/// The largest hand-over the fit returns (s).
pub const MAX_S: f64 = 1.0;
/// The least evidence an engine's hand-over is fitted on: TTFTs, and deployments among them. With
/// less, a median gap is the GPU's step-model error as much as the framework's hand-over: with
/// GB200 held out, TensorRT-LLM's 7 low-load TTFTs on B200 (two deployments) put it at 70 ms,
/// against 0 from all 36 of 6 deployments, and GB200's replays came out 8 points worse
/// (validation/large.md, 2026-11-28). Below it the engine keeps 0, its fit reported with the
/// evidence it lacked.
pub const MIN_POINTS: usize = 10;
pub const MIN_DEPLOYMENTS: usize = 3;

/// Whether a fit rests on enough evidence to be used ([`MIN_POINTS`], [`MIN_DEPLOYMENTS`]).
pub fn enough(h: &HandoverFit) -> bool {
    h.points >= MIN_POINTS && h.deployments >= MIN_DEPLOYMENTS
}

/// One low-load disaggregated experiment's TTFT as measured and as replayed without a hand-over.
#[derive(Debug, Clone)]
pub struct HandoverObservation {
    pub engine: String,
    pub gpu: String,
    pub deployment: String,
    pub measured_s: f64,
    pub without_s: f64,
}

/// `model` with its hand-overs replaced by `fits`.
pub fn with_handover(model: &LearnedModel, fits: Vec<HandoverFit>) -> LearnedModel {
    LearnedModel { handover: fits, ..model.clone() }
}

/// The observations of the disaggregated experiments among `exps` at [`LOW_LOAD_CLIENTS`] clients
/// or fewer, replayed on `model` without a hand-over (as the protocols replay them: the learned
/// values without the deployment's own residual, the client's cost).
pub fn observations(catalog: &Catalog, model: &LearnedModel, exps: &[&Experiment]) -> Vec<HandoverObservation> {
    let without = with_handover(model, Vec::new());
    exps.par_iter()
        .filter(|e| e.pd.is_some() && e.point.concurrency > 0 && e.point.concurrency <= LOW_LOAD_CLIENTS)
        .filter_map(|e| {
            let point = super::corpus::replay_points(&without, e).into_iter().find(|p| p.metric == "ttft_s")?;
            let measured_s = point.value;
            let v = super::corpus::replay(catalog, &without, e, std::slice::from_ref(&point), false).ok()?[0]?;
            (v.is_finite() && v > 0.0 && measured_s > 0.0).then(|| HandoverObservation {
                engine: e.deployment.engine.as_str().to_string(),
                gpu: e.gpu.clone(),
                deployment: e.deployment_key(),
                measured_s,
                without_s: v,
            })
        })
        .collect()
}

/// Each engine's hand-over from `obs` (the median of measured minus replayed, clamped to
/// [0, [`MAX_S`]]), with its TTFTs' median |error| without and with it, in engine order.
pub fn fit<'o>(obs: impl Iterator<Item = &'o HandoverObservation>) -> Vec<HandoverFit> {
    let obs: Vec<&HandoverObservation> = obs.collect();
    let mut engines: Vec<&str> = obs.iter().map(|o| o.engine.as_str()).collect();
    engines.sort_unstable();
    engines.dedup();
    engines
        .into_iter()
        .map(|engine| {
            let mine: Vec<&&HandoverObservation> = obs.iter().filter(|o| o.engine == engine).collect();
            let mut gaps: Vec<f64> = mine.iter().map(|o| o.measured_s - o.without_s).collect();
            let mut deployments: Vec<&str> = mine.iter().map(|o| o.deployment.as_str()).collect();
            deployments.sort_unstable();
            deployments.dedup();
            let evidence = mine.len() >= MIN_POINTS && deployments.len() >= MIN_DEPLOYMENTS;
            let handover_s = if evidence { super::corpus::median(&mut gaps).clamp(0.0, MAX_S) } else { 0.0 };
            let median_abs = |h: f64| {
                let mut e: Vec<f64> =
                    mine.iter().map(|o| ((o.without_s + h) / o.measured_s - 1.0).abs() * 100.0).collect();
                super::corpus::median(&mut e)
            };
            HandoverFit {
                engine: engine.to_string(),
                handover_s,
                points: mine.len(),
                deployments: deployments.len(),
                ttft_median_abs_pct_without: median_abs(0.0),
                ttft_median_abs_pct: median_abs(handover_s),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{enough, fit, HandoverObservation, MAX_S, MIN_POINTS};

    fn obs(engine: &str, deployment: &str, without: f64, measured: f64) -> HandoverObservation {
        HandoverObservation {
            engine: engine.into(),
            gpu: "GB200".into(),
            deployment: deployment.into(),
            measured_s: measured,
            without_s: without,
        }
    }

    /// TTFTs measured 120 ms above their replays give 120 ms for their engine, whatever the
    /// replays; a median resists the odd point; each engine gets its own.
    /// `n` TTFTs of `engine` over three deployments, each `gap` s above its replay, and one odd
    /// one far above.
    fn many(engine: &str, n: usize, gap: f64) -> Vec<HandoverObservation> {
        let mut v: Vec<HandoverObservation> = (0..n)
            .map(|i| obs(engine, ["a", "b", "c"][i % 3], 0.1 + 0.01 * i as f64, 0.1 + 0.01 * i as f64 + gap))
            .collect();
        v.push(obs(engine, "a", 0.2, 5.0));
        v
    }

    /// TTFTs measured 120 ms above their replays give 120 ms for their engine, whatever the
    /// replays; a median resists the odd point; each engine gets its own.
    #[test]
    fn each_engine_gets_the_median_gap_of_its_low_load_ttfts() {
        let mut o = many("vllm", 12, 0.12);
        o.extend(many("sglang", 10, 0.03));
        let f = fit(o.iter());
        assert_eq!(f.iter().map(|h| h.engine.as_str()).collect::<Vec<_>>(), ["sglang", "vllm"]);
        let v = &f[1];
        assert!((v.handover_s - 0.12).abs() < 1e-12, "{}", v.handover_s);
        assert_eq!((v.points, v.deployments), (13, 3));
        assert!(v.ttft_median_abs_pct < v.ttft_median_abs_pct_without);
        assert!((f[0].handover_s - 0.03).abs() < 1e-12);
    }

    /// Replays already too slow give 0, never a negative hand-over; the largest is MAX_S; too
    /// little evidence (fewer TTFTs or deployments than the bounds) gives 0, reported.
    #[test]
    fn the_hand_over_is_never_negative_nor_beyond_its_bound_nor_fitted_on_too_little() {
        let f = fit(many("trtllm", 12, -0.05).iter());
        assert_eq!(f[0].handover_s, 0.0);
        let f = fit(many("trtllm", 12, 50.0).iter());
        assert_eq!(f[0].handover_s, MAX_S);
        let few = many("vllm", MIN_POINTS - 2, 0.2);
        let f = fit(few.iter());
        assert_eq!((f[0].handover_s, f[0].points), (0.0, MIN_POINTS - 1));
        assert!(!enough(&f[0]));
        let one: Vec<HandoverObservation> = (0..20).map(|_| obs("vllm", "a", 0.1, 0.3)).collect();
        assert_eq!(fit(one.iter())[0].handover_s, 0.0, "one deployment");
        assert!(fit(std::iter::empty()).is_empty());
    }
}
