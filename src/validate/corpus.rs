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
use crate::calibrate::corpus::{fit, profile_for, profile_for_deployment, replay_points};
use crate::catalog::Catalog;
use crate::corpus::Experiment;
use crate::experiment::{predict_cached, ExperimentUnknowns, ReplayCache};
use crate::hardware::learned::{LearnedModel, BW, GEMM};
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

/// A held-out row's ±1 sigma band: the learned model's log sigma for the quantity that dominates
/// the metric (TPOT: the HBM share; TTFT: the GEMM share), both including the fit's residual spread
/// and the spread of every level the deployment has no member of.
fn band(model: &LearnedModel, e: &Experiment, metric: &str, predicted: f64, in_sample: bool) -> (f64, f64) {
    let key = e.deployment_key();
    let l = model.lookup(
        &e.gpu,
        e.engine.as_str(),
        e.deployment.weight_dtype,
        e.model_key(),
        in_sample.then_some(key.as_str()),
    );
    let s = if metric == "tpot_ms" { l.sigma_log[BW] } else { l.sigma_log[GEMM] };
    (predicted * (-s).exp(), predicted * s.exp())
}

/// A row of a corpus protocol with the member it held out (GPU, model, engine; "all" in sample).
#[derive(Debug, Clone, Serialize)]
pub struct CorpusRow {
    pub member: String,
    #[serde(flatten)]
    pub row: Row,
}

/// Replay `exps` on profiles from `model`; rows in the experiments' order.
fn replay(
    catalog: &Catalog,
    model: &LearnedModel,
    exps: &[&Experiment],
    protocol: CorpusProtocol,
    member: &str,
    note: &str,
) -> Vec<CorpusRow> {
    let in_sample = protocol.in_sample();
    exps.par_iter()
        .map(|e| {
            let profile = profile_for(catalog, &catalog.hardware, model, e, in_sample, true);
            let cache = ReplayCache::default();
            let points = replay_points(model, e);
            // A disaggregated experiment: both pools' profiles, one replay on sim/disagg.rs.
            let pd = e.pd.as_ref().map(|x| disaggregated(catalog, model, e, x, in_sample));
            let pd_summary = match (&pd, points.first()) {
                (Some(Ok(d)), Some(p)) => crate::experiment::disaggregated_summary(d, p),
                _ => None,
            };
            let profile = match pd {
                Some(Err(err)) => Err(err),
                _ => profile,
            };
            points
                .iter()
                .map(|p| {
                    let predicted = if e.pd.is_some() {
                        pd_summary.as_ref().and_then(|s| crate::experiment::metric_of_point(s, p))
                    } else {
                        profile
                            .as_ref()
                            .ok()
                            .and_then(|pr| predict_cached(pr, p, &ExperimentUnknowns::default(), &[], &cache))
                    };
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
                        note: match &profile {
                            Ok(_) => format!("{note}; {}", e.deployment_key()),
                            Err(err) => format!("no profile: {err}"),
                        },
                        band: predicted.map(|v| band(model, e, &p.metric, v, in_sample)),
                    };
                    let member = match protocol {
                        CorpusProtocol::LargeInSample => feature_label(e),
                        _ => member.to_string(),
                    };
                    CorpusRow { member, row }
                })
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flatten()
        .collect()
}

/// A disaggregated experiment's deployment: each pool's profile from the learned model.
fn disaggregated(
    catalog: &Catalog,
    model: &LearnedModel,
    e: &Experiment,
    x: &crate::corpus::PdExperiment,
    in_sample: bool,
) -> crate::error::Result<crate::profile::disagg::Disaggregated> {
    let pool = |d| profile_for_deployment(catalog, &catalog.hardware, model, e, d, in_sample, true);
    Ok(crate::profile::disagg::Disaggregated::new(
        pool(&x.prefill)?,
        pool(&x.decode)?,
        x.prefill_workers,
        x.decode_workers,
    ))
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
    if protocol.member_of_nothing() {
        let m = fit(catalog, &plain, protocol.as_str())?.model;
        let note = "learned on every plain corpus point";
        return Ok(replay(catalog, &m, &replayed, protocol, "all", note));
    }
    let mut members: Vec<String> = replayed.iter().filter_map(|e| protocol.member(e)).collect();
    members.sort();
    members.dedup();
    let mut rows = Vec::new();
    for m in &members {
        let is_m = |e: &&&Experiment| protocol.member(e).as_deref() == Some(m.as_str());
        let train: Vec<&Experiment> = plain.iter().filter(|e| !is_m(e)).copied().collect();
        let held: Vec<&Experiment> = replayed.iter().filter(|e| is_m(e)).copied().collect();
        if train.is_empty() {
            continue;
        }
        let model = fit(catalog, &train, &format!("{} without {m}", protocol.as_str()))?.model;
        rows.extend(replay(catalog, &model, &held, protocol, m, &format!("learned without {m}")));
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
