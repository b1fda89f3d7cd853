//! The corpus's protocols (issue 23): how well the learned step model (crate::hardware::learned)
//! transfers to a GPU, a model or an engine it was not fitted on. Each held-out member's points are
//! predicted from a model learned on every other point (so it gets no level offset of its own and no
//! deployment residual), replayed through the simulator as their client ran them (crate::corpus).
//! `corpus-in-sample` predicts every point from the model learned on all of them, with its
//! deployment's own residual.
//!
//! A benchmark client's own per-request cost and request count are properties of its measurements: a
//! replay of that client's point adds the cost, and sends the requests per client, fitted on that
//! client's other points (never onto a user's deployment).

use super::Row;
use crate::calibrate::corpus::{fit, replay, replay_points, replay_scaled};
use crate::calibrate::{exchange, handover};
use crate::catalog::Catalog;
use crate::corpus::Experiment;
use crate::hardware::learned::{LearnedModel, BW};
use crate::metrics::percentile_sorted;
use rayon::prelude::*;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CorpusProtocol {
    CorpusInSample,
    LeaveOneGpuOut,
    LeaveOneModelOut,
    LeaveOneEngineOut,
    /// The large deployments (disaggregated, MTP, attention-DP: crate::corpus::Feature) predicted by
    /// the model learned on every plain point; members are the feature sets.
    LargeInSample,
    /// Each GPU's large deployments predicted by the model learned on the other GPUs' plain points.
    LargeLeaveOneGpuOut,
}

impl CorpusProtocol {
    pub const ALL: [CorpusProtocol; 4] = [
        CorpusProtocol::CorpusInSample,
        CorpusProtocol::LeaveOneGpuOut,
        CorpusProtocol::LeaveOneModelOut,
        CorpusProtocol::LeaveOneEngineOut,
    ];
    /// The protocols over the large deployments (issue 25).
    pub const LARGE: [CorpusProtocol; 2] = [CorpusProtocol::LargeInSample, CorpusProtocol::LargeLeaveOneGpuOut];

    /// Whether it replays the large deployments (else the plain ones).
    pub fn is_large(self) -> bool {
        matches!(self, CorpusProtocol::LargeInSample | CorpusProtocol::LargeLeaveOneGpuOut)
    }

    /// Whether held-out points get their deployment's fitted residual (only plain in-sample points
    /// have one).
    fn in_sample(self) -> bool {
        self == CorpusProtocol::CorpusInSample
    }

    pub fn as_str(self) -> &'static str {
        match self {
            CorpusProtocol::CorpusInSample => "corpus-in-sample",
            CorpusProtocol::LargeInSample => "large-in-sample",
            CorpusProtocol::LargeLeaveOneGpuOut => "large-leave-one-gpu-out",
            CorpusProtocol::LeaveOneGpuOut => "leave-one-gpu-out",
            CorpusProtocol::LeaveOneModelOut => "leave-one-model-out",
            CorpusProtocol::LeaveOneEngineOut => "leave-one-engine-out",
        }
    }
    pub fn parse(s: &str) -> Option<CorpusProtocol> {
        CorpusProtocol::ALL.into_iter().chain(CorpusProtocol::LARGE).find(|p| p.as_str() == s)
    }
    /// One fold: every replayed point predicted by the model learned on every plain point.
    fn member_of_nothing(self) -> bool {
        matches!(self, CorpusProtocol::CorpusInSample | CorpusProtocol::LargeInSample)
    }

    /// The member an experiment belongs to under this protocol (None: in-sample, one fold).
    fn member(self, e: &Experiment) -> Option<String> {
        match self {
            CorpusProtocol::CorpusInSample | CorpusProtocol::LargeInSample => None,
            CorpusProtocol::LeaveOneGpuOut | CorpusProtocol::LargeLeaveOneGpuOut => Some(e.gpu.clone()),
            CorpusProtocol::LeaveOneModelOut => Some(e.model.clone()),
            CorpusProtocol::LeaveOneEngineOut => Some(e.engine.as_str().to_string()),
        }
    }
}

/// A held-out row's ±1 sigma band: the learned model's log sigma for the metric (TPOT: the HBM
/// share's, with the fit's residual spread; TTFT: the widest of the quantities a TTFT identifies,
/// with the fit's TTFT residual spread: Learned::ttft_sigma_log), each widened by the spread of
/// every level the deployment has no member of.
fn band(model: &LearnedModel, e: &Experiment, metric: &str, predicted: f64, in_sample: bool) -> (f64, f64) {
    let l = crate::calibrate::corpus::learned_for(model, e, in_sample);
    let s = if metric == "tpot_ms" { l.sigma_log[BW] } else { l.ttft_sigma_log() };
    (predicted * (-s).exp(), predicted * s.exp())
}

/// A disaggregated deployment's TTFT band: the wider, at each end, of the learned sigma band `b`
/// and the replays at [`pool_band_scales`]. Why: a closed loop near the prefill pool's capacity
/// turns a modest error in the prefill's speed relative to the decode's into a large one in TTFT
/// (the decode sets how fast the clients come back, the prefill how fast they are served), which a
/// band of fixed width around the prediction does not say. Scaling both pools alike would not
/// show it: a closed loop's times all scale with its steps.
pub fn replayed_band(b: (f64, f64), moved: [Option<f64>; 2]) -> (f64, f64) {
    moved.iter().flatten().filter(|v| v.is_finite() && **v > 0.0).fold(b, |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// The (prefill, decode) step scales of the two replays: the ratio of the pools' speeds one sigma
/// either way, its log sigma sqrt(sp^2 + sd^2) for independent errors of sigma sp (the TTFT's) and
/// sd (the TPOT's), split between the pools along that sigma's gradient (sp^2 / r and sd^2 / r).
fn pool_band_scales(sp: f64, sd: f64) -> [(f64, f64); 2] {
    let r = (sp * sp + sd * sd).sqrt();
    if r <= 0.0 {
        return [(1.0, 1.0); 2];
    }
    let (p, d) = (sp * sp / r, sd * sd / r);
    [((p).exp(), (-d).exp()), ((-p).exp(), d.exp())]
}

/// A row of a corpus protocol with the member it held out (GPU, model, engine; "all" in sample).
#[derive(Debug, Clone, Serialize)]
pub struct CorpusRow {
    pub member: String,
    /// The MTP acceptance per drafted position the row was replayed at (MTP experiments only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtp_accept_rate: Option<f64>,
    /// The fixed time of a MoE exchange between attention-DP ranks the row was replayed at, in us
    /// (attention-DP experiments of the large protocols: calibrate/exchange.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exchange_latency_us: Option<f64>,
    /// The hand-over of a disaggregated request under the row's engine it was replayed at, in ms
    /// (disaggregated experiments: calibrate/handover.rs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handover_ms: Option<f64>,
    /// Every engine's hand-over in the model the row was replayed on ("sglang 32.0 ms, ..."), for
    /// the protocols' notes.
    #[serde(skip)]
    pub handovers: Option<String>,
    #[serde(flatten)]
    pub row: Row,
}

/// Replay `exps` on profiles from `model`: each experiment's rows, in the experiments' order.
fn replay_each(
    catalog: &Catalog,
    model: &LearnedModel,
    exps: &[&Experiment],
    protocol: CorpusProtocol,
    member: &str,
    note: &str,
) -> Vec<Vec<CorpusRow>> {
    let in_sample = protocol.in_sample();
    exps.par_iter()
        .map(|e| {
            let points = replay_points(model, e);
            let adp = e.features().contains(&crate::corpus::Feature::AttentionDp);
            let replayed = replay(catalog, model, e, &points, in_sample);
            // A disaggregated experiment's TTFT band also replays it with the prefill pool one sigma
            // slower and the decode pool faster, and the other way (`pool_band_scales`).
            let moved = match (&e.pd, &replayed) {
                (Some(_), Ok(_)) => {
                    let l = crate::calibrate::corpus::learned_for(model, e, in_sample);
                    Some(pool_band_scales(l.ttft_sigma_log(), l.sigma_log[BW]).map(|f| {
                        replay_scaled(catalog, model, e, &points, in_sample, Some(f))
                            .unwrap_or_else(|_| vec![None; points.len()])
                    }))
                }
                _ => None,
            };
            points
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let predicted = replayed.as_ref().ok().and_then(|v| v[i]);
                    let error_pct = predicted.map(|v| (v / p.value - 1.0) * 100.0);
                    let row = Row {
                        report: p.report.clone(),
                        line: p.line,
                        scenario: p.scenario.clone(),
                        metric: p.metric.clone(),
                        load: format!("closed_loop {}", crate::metrics::stat_name(p.stat)),
                        concurrency: p.concurrency,
                        input_tokens: p.input_tokens,
                        measured: p.value,
                        predicted,
                        error_pct,
                        flagged: false,
                        protocol: protocol.as_str().to_string(),
                        note: match &replayed {
                            Ok(_) => format!("{note}; {}", e.deployment_key()),
                            Err(err) => format!("no profile: {err}"),
                        },
                        band: predicted.map(|v| {
                            let b = band(model, e, &p.metric, v, in_sample);
                            match &moved {
                                Some([slow, fast]) if p.metric == "ttft_s" => replayed_band(b, [slow[i], fast[i]]),
                                _ => b,
                            }
                        }),
                    };
                    let member = match protocol {
                        CorpusProtocol::LargeInSample => feature_label(e),
                        _ => member.to_string(),
                    };
                    let mtp_accept_rate = speculation(e).map(|s| s.rate(0));
                    let exchange_latency_us = match (&model.exchange, adp) {
                        (Some(x), true) => Some(x.latency_s * 1e6),
                        _ => None,
                    };
                    let (handover_ms, handovers) = match &e.pd {
                        Some(_) => (
                            Some(model.handover_s(e.deployment.engine.as_str()).unwrap_or(0.0) * 1e3),
                            Some(
                                model
                                    .handover
                                    .iter()
                                    .map(|h| format!("{} {:.1} ms", h.engine, h.handover_s * 1e3))
                                    .collect::<Vec<_>>()
                                    .join(", "),
                            )
                            .filter(|t| !t.is_empty()),
                        ),
                        None => (None, None),
                    };
                    CorpusRow { member, mtp_accept_rate, exchange_latency_us, handover_ms, handovers, row }
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The speculative decoding of an experiment (its decode pool's when disaggregated).
fn speculation(e: &Experiment) -> Option<&crate::profile::spec::Speculative> {
    e.pd.as_ref().map_or(e.deployment.speculative.as_ref(), |pd| pd.decode.speculative.as_ref())
}

/// An experiment at another MTP acceptance (every pool that speculates), its source stated.
fn with_acceptance(e: &Experiment, a: f64, source: &str) -> Experiment {
    let mut e = e.clone();
    let set = |s: &mut Option<crate::profile::spec::Speculative>| {
        if let Some(x) = s.as_mut() {
            *x = x.with_rate(a);
            x.accept_rate_source = source.to_string();
        }
    };
    set(&mut e.deployment.speculative);
    if let Some(pd) = e.pd.as_mut() {
        set(&mut pd.prefill.speculative);
        set(&mut pd.decode.speculative);
    }
    e
}

/// One MTP experiment's TPOT replayed at the cited default acceptance: its GPU, tokens drafted per
/// step, predicted and measured TPOT, and its speculation at that default.
struct MtpObservation {
    gpu: String,
    drafted: u32,
    predicted_ms: f64,
    measured_ms: f64,
    speculation: crate::profile::spec::Speculative,
}

/// The acceptance per drafted position that best explains `obs` (least squares in log TPOT): a
/// step's duration hardly depends on the acceptance (every drafted token is verified), so the TPOT
/// at rate a is the default's times E(default) / E(a), with E the expected tokens per step.
/// None without observations.
fn fit_acceptance<'o>(obs: impl Iterator<Item = &'o MtpObservation>) -> Option<f64> {
    let obs: Vec<&MtpObservation> = obs.collect();
    if obs.is_empty() {
        return None;
    }
    let cost = |a: f64| -> f64 {
        obs.iter()
            .map(|o| {
                let scale =
                    o.speculation.expected_tokens(o.drafted) / o.speculation.with_rate(a).expected_tokens(o.drafted);
                (o.predicted_ms * scale / o.measured_ms).ln().powi(2)
            })
            .sum()
    };
    (1..=99).map(|k| k as f64 / 100.0).min_by(|x, y| cost(*x).total_cmp(&cost(*y)))
}

/// MTP is launched without a stated acceptance, and the corpus's prompts are random tokens, which a
/// draft predicts worse than text: replay its MTP experiments at the acceptance fitted on the MTP
/// experiments of the training set (each at the cited default first, on `m`: the model learned on
/// every plain point, with the held-out member's exchange latency). For a held-out GPU: fitted on
/// the other GPUs' MTP experiments (`m` includes that GPU's plain points but none of its MTP
/// ones). Returns the experiments to replay for `member` ("all" in sample).
fn mtp_fitted(catalog: &Catalog, m: &LearnedModel, replayed: &[&Experiment], member: &str) -> Vec<Experiment> {
    let mtp: Vec<&Experiment> = replayed.iter().filter(|e| speculation(e).is_some()).copied().collect();
    if mtp.is_empty() {
        return replayed.iter().map(|e| (*e).clone()).collect();
    }
    let rows = replay_each(catalog, m, &mtp, CorpusProtocol::LargeInSample, "all", "");
    let obs: Vec<MtpObservation> = mtp
        .iter()
        .zip(&rows)
        .filter_map(|(e, rows)| {
            let r = rows.iter().find(|r| r.row.metric == "tpot_ms")?;
            let s = speculation(e)?;
            Some(MtpObservation {
                gpu: e.gpu.clone(),
                drafted: s.tokens,
                predicted_ms: r.row.predicted.filter(|v| v.is_finite() && *v > 0.0)?,
                measured_ms: r.row.measured,
                speculation: s.clone(),
            })
        })
        .collect();
    let a = fit_acceptance(obs.iter().filter(|o| member == "all" || o.gpu != member));
    let source = a.map_or(String::new(), |a| {
        format!("{a:.2} per position, fitted on the corpus's MTP TPOTs (random prompts) without {member}")
    });
    replayed
        .iter()
        .map(|e| match (a, speculation(e)) {
            (Some(a), Some(_)) => with_acceptance(e, a, &source),
            _ => (*e).clone(),
        })
        .collect()
}

/// What the large protocols fit on the large points of the training set, per held-out member
/// ("all" in sample): the exchange latency between attention-DP ranks (calibrate/exchange.rs, on
/// the attention-DP TPOTs of the other members, replayed on `m`, the model learned on every plain
/// point), then the MTP acceptance with it ([`mtp_fitted`]); the experiments to replay with each.
fn large_fitted(catalog: &Catalog, m: &LearnedModel, replayed: &[&Experiment], members: &[String]) -> Vec<LargeFitted> {
    let obs = exchange::observations(catalog, m, replayed);
    members
        .iter()
        .map(|member| {
            let x = exchange::fit(obs.iter().filter(|o| member == "all" || &o.gpu != member));
            let with = exchange::with_exchange(m, x.clone());
            let exps = mtp_fitted(catalog, &with, replayed, member);
            // Each engine's hand-over on the training set's low-load disaggregated TTFTs, replayed
            // with the exchange and acceptance fitted above (calibrate/handover.rs).
            let refs: Vec<&Experiment> = exps.iter().collect();
            let held = handover::observations(catalog, &with, &refs);
            let h = handover::fit(held.iter().filter(|o| member == "all" || &o.gpu != member));
            LargeFitted { exchange: x, handover: h, exps }
        })
        .collect()
}

/// What [`large_fitted`] fits for one held-out member, and the experiments to replay with it.
struct LargeFitted {
    exchange: Option<crate::hardware::learned::ExchangeFit>,
    handover: Vec<crate::hardware::learned::HandoverFit>,
    exps: Vec<Experiment>,
}

/// The feature set of a large experiment, as its protocols' rows name it (`disaggregated+mtp`).
fn feature_label(e: &Experiment) -> String {
    let f: Vec<&str> = e.features().into_iter().map(|f| f.as_str()).collect();
    if f.is_empty() {
        "plain".into()
    } else {
        f.join("+")
    }
}

/// The rows of one protocol over the corpus's expressed experiments: the plain protocols fit and
/// replay the plain experiments; the large ones fit on the plain experiments (without the held-out
/// GPU's) and replay the large ones.
pub fn validate_corpus(
    catalog: &Catalog,
    exps: &[Experiment],
    protocol: CorpusProtocol,
) -> crate::error::Result<Vec<CorpusRow>> {
    let plain: Vec<&Experiment> = exps.iter().filter(|e| e.is_plain()).collect();
    let replayed: Vec<&Experiment> =
        if protocol.is_large() { exps.iter().filter(|e| !e.is_plain()).collect() } else { plain.clone() };
    let mut members: Vec<String> = if protocol.member_of_nothing() {
        vec!["all".to_string()]
    } else {
        replayed.iter().filter_map(|e| protocol.member(e)).collect()
    };
    members.sort();
    members.dedup();
    // The large protocols replay MTP at the acceptance fitted on the training set's MTP points.
    // The model learned on every plain point: the in-sample protocols replay on it, and the large
    // ones fit their MTP acceptance on its replays (fitted once for both).
    let all_plain = match protocol.is_large() || protocol.member_of_nothing() {
        true => Some(fit(catalog, &plain, protocol.as_str())?.model),
        false => None,
    };
    let owned = match (&all_plain, protocol.is_large()) {
        (Some(m), true) => large_fitted(catalog, m, &replayed, &members),
        _ => Vec::new(),
    };
    let replayed_for = |k: usize| -> Vec<&Experiment> {
        match owned.get(k) {
            Some(f) => f.exps.iter().collect(),
            None => replayed.clone(),
        }
    };
    // The member's model with the exchange latency and hand-overs fitted without it (large
    // protocols).
    let exchange_for = |k: usize, m: &LearnedModel| match owned.get(k) {
        Some(f) => handover::with_handover(&exchange::with_exchange(m, f.exchange.clone()), f.handover.clone()),
        None => m.clone(),
    };
    if let (true, Some(m)) = (protocol.member_of_nothing(), &all_plain) {
        let note = "learned on every plain corpus point";
        return Ok(replay_each(catalog, &exchange_for(0, m), &replayed_for(0), protocol, "all", note).concat());
    }
    let mut rows = Vec::new();
    for (k, m) in members.iter().enumerate() {
        let is_m = |e: &&&Experiment| protocol.member(e).as_deref() == Some(m.as_str());
        let train: Vec<&Experiment> = plain.iter().filter(|e| !is_m(e)).copied().collect();
        let these = replayed_for(k);
        let held: Vec<&Experiment> = these.iter().filter(|e| is_m(e)).copied().collect();
        if train.is_empty() {
            continue;
        }
        let model = exchange_for(k, &fit(catalog, &train, &format!("{} without {m}", protocol.as_str()))?.model);
        rows.extend(replay_each(catalog, &model, &held, protocol, m, &format!("learned without {m}")).concat());
    }
    Ok(rows)
}

/// One line of a corpus protocol's summary.
#[derive(Debug, Clone, Serialize)]
pub struct CorpusSummary {
    pub protocol: String,
    /// The held-out member (GPU, model, engine) or "all".
    pub member: String,
    pub metric: String,
    pub count: usize,
    pub median_abs_error_pct: f64,
    pub p90_abs_error_pct: f64,
    /// Median signed error (%): positive = predicted too slow.
    pub median_error_pct: f64,
    /// Share of measured values inside the ±1 sigma band (a calibrated band holds about 68%).
    pub band_coverage: f64,
}

/// Summaries per member and metric, then over all members per metric.
pub fn summarize(rows: &[CorpusRow], protocol: CorpusProtocol) -> Vec<CorpusSummary> {
    let mut keys: Vec<(String, String)> = rows.iter().map(|r| (r.member.clone(), r.row.metric.clone())).collect();
    keys.sort();
    keys.dedup();
    let mut metrics: Vec<String> = rows.iter().map(|r| r.row.metric.clone()).collect();
    metrics.sort();
    metrics.dedup();
    keys.retain(|k| k.0 != "all");
    keys.extend(metrics.into_iter().map(|m| ("all".to_string(), m)));
    keys.into_iter()
        .map(|(member, metric)| {
            let sel: Vec<&Row> = rows
                .iter()
                .filter(|r| r.row.metric == metric && (member == "all" || r.member == member))
                .map(|r| &r.row)
                .collect();
            let mut abs: Vec<f64> = sel.iter().filter_map(|r| r.error_pct.map(f64::abs)).collect();
            let mut signed: Vec<f64> = sel.iter().filter_map(|r| r.error_pct).collect();
            abs.sort_by(f64::total_cmp);
            signed.sort_by(f64::total_cmp);
            let inside =
                sel.iter().filter(|r| r.band.is_some_and(|(lo, hi)| r.measured >= lo && r.measured <= hi)).count();
            let with_band = sel.iter().filter(|r| r.band.is_some()).count();
            CorpusSummary {
                protocol: protocol.as_str().to_string(),
                member,
                metric,
                count: abs.len(),
                median_abs_error_pct: percentile_sorted(&abs, 50.0),
                p90_abs_error_pct: percentile_sorted(&abs, 90.0),
                median_error_pct: percentile_sorted(&signed, 50.0),
                band_coverage: if with_band > 0 { inside as f64 / with_band as f64 } else { f64::NAN },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{fit_acceptance, pool_band_scales, replayed_band, MtpObservation};
    use crate::profile::spec::{SpecMethod, Speculative};

    /// TPOTs made at a known acceptance (the default's TPOT scaled by the expected tokens per step)
    /// give that acceptance back, whatever each observation's drafted tokens; none gives none.
    #[test]
    fn the_fitted_acceptance_is_the_one_the_tpots_were_made_at() {
        let default = Speculative::new(SpecMethod::Mtp, 3, vec![0.85]);
        let obs: Vec<MtpObservation> = [(1, 10.0), (2, 20.0), (3, 30.0), (3, 12.0)]
            .into_iter()
            .map(|(k, predicted_ms)| {
                let s = Speculative { tokens: k, ..default.clone() };
                let truth = s.with_rate(0.62).expected_tokens(k);
                MtpObservation {
                    gpu: "B200".into(),
                    drafted: k,
                    predicted_ms,
                    measured_ms: predicted_ms * s.expected_tokens(k) / truth,
                    speculation: s,
                }
            })
            .collect();
        assert_eq!(fit_acceptance(obs.iter()), Some(0.62));
        assert_eq!(fit_acceptance(obs.iter().filter(|o| o.gpu == "H200")), None);
    }

    /// The two replays move the ratio of the pools' step times by one sigma of it, either way, each
    /// pool by its share of that sigma; no sigma, no move. The band takes the wider end of each.
    #[test]
    fn the_pool_scales_move_the_ratio_by_one_sigma() {
        let (sp, sd): (f64, f64) = (0.3, 0.2);
        let r = (sp * sp + sd * sd).sqrt();
        let [(p1, d1), (p2, d2)] = pool_band_scales(sp, sd);
        assert!(((p1 / d1).ln() - r).abs() < 1e-12 && ((p2 / d2).ln() + r).abs() < 1e-12);
        assert!(p1 > 1.0 && d1 < 1.0 && p2 < 1.0 && d2 > 1.0);
        assert!((p1.ln() / -d1.ln() - (sp * sp) / (sd * sd)).abs() < 1e-12);
        assert_eq!(pool_band_scales(0.0, 0.0), [(1.0, 1.0); 2]);
        assert_eq!(replayed_band((1.0, 2.0), [Some(5.0), Some(0.5)]), (0.5, 5.0));
        assert_eq!(replayed_band((1.0, 2.0), [Some(1.5), None]), (1.0, 2.0));
        assert_eq!(replayed_band((1.0, 2.0), [Some(f64::NAN), Some(0.0)]), (1.0, 2.0));
    }
}
