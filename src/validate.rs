//! Validation: every measured point replayed as its report ran it, predicted against measured, in-sample
//! and held out (DESIGN.md section 5). Targets live in [`TARGETS`], the one place tests read them from.

pub mod corpus;

use crate::calibrate::{self, FitOptions, PriorSource, Target};
use crate::catalog::Catalog;
use crate::data::{Point, ReportMeta};
use crate::error::{Error, Result};
use crate::experiment::{is_replayable, predict_cached, ExperimentUnknowns, ReplayCache};
use crate::hardware::{unmeasured_profile, unmeasured_profile_shared, SharedModel};
use crate::metrics::percentile_sorted;
use crate::profile::{Profile, ProfileFile, BUILTIN_PROFILES};
use rayon::prelude::*;
use serde::Serialize;

/// An accuracy target over unflagged points of one protocol and metric group.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AccuracyTarget {
    pub protocol: Protocol,
    pub group: MetricGroup,
    pub median_abs_error_pct_max: f64,
    pub p90_abs_error_pct_max: Option<f64>,
    /// Set when the target is known not to be met, with the reason (the data or the model); the test
    /// then checks that it is indeed still missed, so the marker cannot outlive the problem.
    pub resists: Option<&'static str>,
}

/// The accuracy targets (issue 5), in one place. Thresholds are not loosened; a target the current
/// model misses says why.
pub const TARGETS: &[AccuracyTarget] = &[
    AccuracyTarget {
        protocol: Protocol::InSample,
        group: MetricGroup::Ttft,
        median_abs_error_pct_max: 10.0,
        p90_abs_error_pct_max: Some(25.0),
        resists: Some(
            "report 003 (SGLang): single-request TTFT over-predicted by 20-45% while TTFT under load is under-predicted by 15-30%, with every SGLang scheduling variant tried (median 9.0% meets 10%; the p90, 26.1%, misses 25%)",
        ),
    },
    AccuracyTarget {
        protocol: Protocol::InSample,
        group: MetricGroup::Decode,
        median_abs_error_pct_max: 10.0,
        p90_abs_error_pct_max: Some(25.0),
        resists: None,
    },
    AccuracyTarget {
        protocol: Protocol::InSample,
        group: MetricGroup::E2e,
        median_abs_error_pct_max: 10.0,
        p90_abs_error_pct_max: Some(25.0),
        resists: None,
    },
    AccuracyTarget {
        protocol: Protocol::ExtrapolateConcurrency,
        group: MetricGroup::All,
        median_abs_error_pct_max: 15.0,
        p90_abs_error_pct_max: None,
        resists: Some(
            "points at concurrency <= 4 leave the per-sequence cost and expert spread to the shared hardware model of the other reports; report 003 (SGLang): its single-request TTFTs imply twice the prefill rate its loaded TTFTs show (held-out matmul 264 against 131 TFLOP/s in sample), so held-out TTFTs under load are about 50% low; report 000: the 32-user speed of one scenario (59 tok/s) is matched by no fit, in sample either",
        ),
    },
    AccuracyTarget {
        protocol: Protocol::CrossGpu,
        group: MetricGroup::All,
        median_abs_error_pct_max: 20.0,
        p90_abs_error_pct_max: None,
        resists: Some(
            "met at 16.7% before issue 10, 20.6% after: with the device memory torch reports (6% above the old decimal figure) and vLLM 0.19+ admission in the fits, report 000's refit converged (objective 4.12 to 2.83; matmul off the FP8 peak, 1.51 to 1.11 PFLOP/s, overlap 1.0 to 0.61), and that better in-sample fit moved to the H200 predicts 001's TTFTs 15-35% low, so 001's TTFT-bound use-case capacities come out high (general chatbot 23 against 15)",
        ),
    },
    // The question leave-one-report-out asks (a report's deployment predicted without any of its own
    // points), answered by what capsim now uses for it, so the same target.
    AccuracyTarget {
        protocol: Protocol::CorpusModel,
        group: MetricGroup::All,
        median_abs_error_pct_max: 25.0,
        p90_abs_error_pct_max: None,
        resists: None,
    },
    AccuracyTarget {
        protocol: Protocol::LeaveOneReportOut,
        group: MetricGroup::All,
        median_abs_error_pct_max: 25.0,
        p90_abs_error_pct_max: None,
        resists: Some(
            "met at 24.5% before issue 10, 25.7% after: the refitted profiles (see cross-gpu) moved the shared hardware model, and the use-case capacities of 001 and 003, bound by TTFT and per-user speed, are predicted 43% and 138% high (13% and 75% before)",
        ),
    },
];

impl AccuracyTarget {
    /// (count, median, p90, met) over the rows of this target's protocol.
    pub fn evaluate(&self, rows: &[Row]) -> (usize, f64, f64, bool) {
        let (n, med, p90) =
            abs_error_stats(rows, |r| r.protocol == self.protocol.as_str() && self.group.contains(&r.metric));
        let met = n > 0 && med <= self.median_abs_error_pct_max && self.p90_abs_error_pct_max.is_none_or(|m| p90 <= m);
        (n, med, p90, met)
    }
}

/// Held-out fits use this evaluation budget (the shipped profiles use the CLI default).
pub const HELD_OUT_MAX_EVALS: usize = 600;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    InSample,
    ExtrapolateConcurrency,
    LeaveOneContextOut,
    CrossGpu,
    /// Each report predicted by the shared hardware model fitted on the other reports' profiles.
    LeaveOneReportOut,
    /// Each report predicted by the step model learned on the public corpus alone (models/learned.toml,
    /// which holds no report point): what capsim answers for a deployment nobody measured.
    CorpusModel,
}

impl Protocol {
    pub const ALL: [Protocol; 6] = [
        Protocol::InSample,
        Protocol::ExtrapolateConcurrency,
        Protocol::LeaveOneContextOut,
        Protocol::CrossGpu,
        Protocol::LeaveOneReportOut,
        Protocol::CorpusModel,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::InSample => "in-sample",
            Protocol::ExtrapolateConcurrency => "extrapolate-concurrency",
            Protocol::LeaveOneContextOut => "leave-one-context-out",
            Protocol::CrossGpu => "cross-gpu",
            Protocol::LeaveOneReportOut => "leave-one-report-out",
            Protocol::CorpusModel => "corpus-model",
        }
    }
    pub fn parse(s: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// Metric groups the targets speak of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricGroup {
    Ttft,
    /// ITL or per-user tok/s (one is the reciprocal of the other).
    Decode,
    E2e,
    All,
}

impl MetricGroup {
    pub fn contains(self, metric: &str) -> bool {
        match self {
            MetricGroup::Ttft => metric == "ttft_s",
            MetricGroup::Decode => metric == "itl_ms" || metric == "per_user_tok_s",
            MetricGroup::E2e => metric == "e2e_ms",
            MetricGroup::All => true,
        }
    }
}

/// One point: measured against predicted.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub report: String,
    pub line: usize,
    pub scenario: String,
    pub metric: String,
    pub load: String,
    pub concurrency: Option<u32>,
    pub input_tokens: Option<u64>,
    pub measured: f64,
    pub predicted: Option<f64>,
    pub error_pct: Option<f64>,
    pub flagged: bool,
    pub protocol: String,
    /// Which profile predicted it, or why nothing did.
    pub note: String,
    /// The prediction's +-1 sigma band: the point replayed on the profile one sigma slower and one
    /// faster (capacity::perturbed, along the fit's covariance where the profile has one).
    pub band: Option<(f64, f64)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct GroupSummary {
    pub report: String,
    pub metric: String,
    pub count: usize,
    pub median_abs_error_pct: f64,
    pub p90_abs_error_pct: f64,
}

/// Median and p90 of |error| over unflagged rows that match.
pub fn abs_error_stats(rows: &[Row], keep: impl Fn(&Row) -> bool) -> (usize, f64, f64) {
    let mut e: Vec<f64> =
        rows.iter().filter(|r| !r.flagged && keep(r)).filter_map(|r| r.error_pct.map(f64::abs)).collect();
    e.sort_by(f64::total_cmp);
    if e.is_empty() {
        return (0, f64::NAN, f64::NAN);
    }
    (e.len(), percentile_sorted(&e, 50.0), percentile_sorted(&e, 90.0))
}

pub fn summarize_rows(rows: &[Row]) -> Vec<GroupSummary> {
    let mut keys: Vec<(String, String)> =
        rows.iter().filter(|r| r.error_pct.is_some()).map(|r| (r.report.clone(), r.metric.clone())).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|(rep, m)| {
            let (count, med, p90) = abs_error_stats(rows, |r| r.report == rep && r.metric == m);
            (count > 0).then_some(GroupSummary {
                report: rep,
                metric: m,
                count,
                median_abs_error_pct: med,
                p90_abs_error_pct: p90,
            })
        })
        .collect()
}

/// The shipped (in-sample) profile of each report.
pub fn builtin_profiles_by_report(catalog: &Catalog) -> Result<Vec<(String, Profile)>> {
    let mut out = Vec::new();
    for (file, text) in BUILTIN_PROFILES {
        let pf = ProfileFile::parse(file, text)?;
        if pf.fit.is_none() {
            continue;
        }
        out.push((pf.provenance.source_report.clone(), pf.resolve(file, catalog)?));
    }
    Ok(out)
}

fn row(p: &Point, protocol: Protocol, predicted: Option<f64>, note: String) -> Row {
    Row {
        report: p.report.clone(),
        line: p.line,
        scenario: p.scenario.clone(),
        metric: p.metric.clone(),
        load: p.load.as_str().into(),
        concurrency: p.concurrency,
        input_tokens: p.input_tokens,
        measured: p.value,
        predicted,
        // A figure of 0 has no relative error (not +inf%).
        error_pct: predicted.filter(|_| p.value > 0.0).map(|v| (v - p.value) / p.value * 100.0),
        flagged: p.is_flagged(),
        protocol: protocol.as_str().into(),
        note,
        band: None,
    }
}

fn unknowns_of(p: &Profile) -> ExperimentUnknowns {
    p.file.experiment.unwrap_or_default()
}

/// Predict the given points with one profile, in parallel, in order.
fn predict_rows(
    points: &[&Point],
    profile: &Profile,
    metas: &[ReportMeta],
    protocol: Protocol,
    note: &str,
) -> Vec<Row> {
    let u = unknowns_of(profile);
    let cache = ReplayCache::default();
    let bands = Bands::new(profile);
    points
        .par_iter()
        .map(|p| {
            if !is_replayable(p, metas) {
                return row(p, protocol, None, not_replayable_reason(p));
            }
            let v = predict_cached(profile, p, &u, metas, &cache);
            let mut r =
                row(p, protocol, v, if v.is_some() { note.to_string() } else { "simulation produced no value".into() });
            r.band = v.and_then(|v| bands.of(p, v, &u, metas));
            r
        })
        .collect()
}

fn not_replayable_reason(p: &Point) -> String {
    match p.metric.as_str() {
        "capacity_requests" => "not predicted: the report states no thresholds for this capacity".into(),
        "power_w" | "power_cost_usd_per_hour" => "not predicted: capsim models time, not power draw".into(),
        "success_rate_pct" | "requests_total" => "not predicted: a property of the run, not of the engine".into(),
        "prefill_tok_s" => "not predicted: the report's per-user prefill speed is a peak over contexts whose definition it does not give".into(),
        "throughput_scaling_x" => "not predicted: averaged over contexts the report does not list".into(),
        _ => "not predicted: not one experiment (a summary without a scenario list)".into(),
    }
}

/// The +-1 sigma prediction bands of one profile: each point replayed on the profile one sigma
/// slower and one faster (capacity::perturbed, along the fit's covariance where there is one), their
/// spread widened by the fit's residual scatter in quadrature in log space (a prediction band, not
/// only a parameter band). A profile without sigmas gives no bands.
struct Bands {
    perturbed: Option<[(Profile, ReplayCache); 2]>,
    resid: f64,
}

impl Bands {
    fn new(profile: &Profile) -> Bands {
        let perturbed = profile
            .file
            .sigmas
            .is_some()
            .then(|| [-1.0, 1.0].map(|sign| (crate::capacity::perturbed(profile, sign), ReplayCache::default())));
        Bands { perturbed, resid: profile.file.fit.as_ref().map_or(0.0, |f| f.residual_sigma_log) }
    }

    /// The band of `p`, predicted `v` by the profile itself (every prediction must be positive).
    fn of(&self, p: &Point, v: f64, u: &ExperimentUnknowns, metas: &[ReportMeta]) -> Option<(f64, f64)> {
        let [(slow, slow_cache), (fast, fast_cache)] = self.perturbed.as_ref()?;
        let a = predict_cached(slow, p, u, metas, slow_cache)?;
        let b = predict_cached(fast, p, u, metas, fast_cache)?;
        band_of_replays(v, a, b, self.resid)
    }
}

/// The +-1 sigma band of a prediction `v` whose replays one sigma slower and faster gave `a` and
/// `b`: their spread, widened by the fit's residual scatter `resid` in quadrature in log space;
/// None unless all three are positive. A profile's band here, a disaggregated deployment's in
/// `validate --runs` (both pools moved alike).
pub fn band_of_replays(v: f64, a: f64, b: f64, resid: f64) -> Option<(f64, f64)> {
    if !(v > 0.0 && a > 0.0 && b > 0.0) {
        return None;
    }
    let (lo, hi) = (v.min(a).min(b), v.max(a).max(b));
    let widen = |x: f64| (x.ln().powi(2) + resid * resid).sqrt();
    Some((v * (-widen(v / lo)).exp(), v * widen(hi / v).exp()))
}

/// (values with a band, of which the measured value lies inside it). About 68% of measured values
/// should fall inside honest 1-sigma bands.
fn coverage(measured_and_bands: impl Iterator<Item = (f64, Option<(f64, f64)>)>) -> (usize, usize) {
    let (mut with, mut inside) = (0, 0);
    for (m, (lo, hi)) in measured_and_bands.filter_map(|(m, b)| b.map(|b| (m, b))) {
        with += 1;
        if m >= lo * (1.0 - 1e-9) && m <= hi * (1.0 + 1e-9) {
            inside += 1;
        }
    }
    (with, inside)
}

/// Coverage of the bands over unflagged rows.
pub fn band_coverage(rows: &[Row]) -> (usize, usize) {
    coverage(rows.iter().filter(|r| !r.flagged).map(|r| (r.measured, r.band)))
}

/// Coverage of a user's runs' bands over every statistic.
pub fn run_band_coverage(rows: &[RunRow]) -> (usize, usize) {
    // A statistic measured as 0 is not compared: no band holds it, and none should be asked to.
    coverage(rows.iter().filter(|r| r.measured > 0.0).map(|r| (r.measured, r.band)))
}

/// The profiles of every report but `source` (and its duplicates).
fn others_than<'a>(profiles: &'a [(String, Profile)], metas: &[ReportMeta], source: &str) -> Vec<&'a Profile> {
    profiles
        .iter()
        .filter(|(r, _)| {
            r != source && !metas.iter().any(|m| m.report == *r && m.duplicate_of.as_deref() == Some(source))
        })
        .map(|(_, p)| p)
        .collect()
}

fn held_out_fit(
    points: &[Point],
    metas: &[ReportMeta],
    t: &Target,
    catalog: &Catalog,
    keep: &(dyn Fn(&Point) -> bool + Sync),
    shared: &SharedModel,
) -> Result<Profile> {
    let opts = FitOptions {
        priors: PriorSource::Shared(shared),
        use_point: keep,
        max_evaluations: HELD_OUT_MAX_EVALS,
        command: "capsim validate (held-out fit)".into(),
        data_sha256: String::new(),
    };
    let (pf, _) = calibrate::calibrate(points, metas, t, catalog, &opts)?;
    pf.resolve(&pf.name, catalog)
}

/// Run one protocol over all points (or only those of `only_report`). `profile_override` replaces the
/// in-sample profile of its report.
pub fn run(
    protocol: Protocol,
    points: &[Point],
    metas: &[ReportMeta],
    catalog: &Catalog,
    only_report: Option<&str>,
    profile_override: Option<&Profile>,
) -> Result<Vec<Row>> {
    let mut profiles = builtin_profiles_by_report(catalog)?;
    if let Some(p) = profile_override {
        let rep = p.file.provenance.source_report.clone();
        if rep.is_empty() {
            return Err(Error::flag(
                "--profile",
                "the profile names no source_report: validation needs to know which report it describes",
            ));
        }
        profiles.retain(|(r, _)| *r != rep);
        profiles.push((rep, p.clone()));
    }
    let targets = calibrate::targets(metas, catalog)?;
    let reports: Vec<String> = {
        let mut r: Vec<String> = points.iter().map(|p| p.report.clone()).collect();
        r.dedup();
        r
    };
    // Reports (and, leaving a context out, contexts) are fitted in parallel and their rows kept in
    // order: each held-out fit waits on its slowest simulation at every evaluation.
    let one_report = |rep: &String| -> Result<Vec<Row>> {
        let mut rows = Vec::new();
        let pts: Vec<&Point> = points.iter().filter(|p| &p.report == rep).collect();
        let meta = metas.iter().find(|m| &m.report == rep);
        // A duplicate report is predicted by its original's profile.
        let source = meta.and_then(|m| m.duplicate_of.clone()).unwrap_or_else(|| rep.clone());
        let profile = profiles.iter().find(|(r, _)| *r == source).map(|(_, p)| p);
        let target = targets.iter().find(|t| t.report == source);
        // The shared hardware model of the other reports' profiles: nothing of this report in it.
        let others_shared = |label: &str| SharedModel::fit(&others_than(&profiles, metas, &source), label);
        match protocol {
            Protocol::InSample => match profile {
                Some(p) => rows.extend(predict_rows(&pts, p, metas, protocol, &format!("profile {}", p.name()))),
                None => rows.extend(pts.iter().map(|p| row(p, protocol, None, "no profile for this report".into()))),
            },
            Protocol::ExtrapolateConcurrency => {
                let Some(t) = target else { return Ok(rows) };
                // Priors from the shared model of the other reports: none of this report's points.
                let shared = others_shared("held out");
                let fitted = held_out_fit(
                    points,
                    metas,
                    t,
                    catalog,
                    &|p: &Point| p.concurrency.is_some_and(|c| c <= 4),
                    &shared,
                )?;
                let high: Vec<&Point> = pts.iter().copied().filter(|p| p.concurrency.is_some_and(|c| c > 4)).collect();
                rows.extend(predict_rows(&high, &fitted, metas, protocol, "fitted on concurrency <= 4 only"));
            }
            Protocol::LeaveOneContextOut => {
                let Some(t) = target else { return Ok(rows) };
                let mut ctxs: Vec<u64> =
                    pts.iter().filter(|p| p.scenario != "all").filter_map(|p| p.input_tokens).collect();
                ctxs.sort();
                ctxs.dedup();
                let shared = others_shared("held out");
                let per_context: Vec<Result<Vec<Row>>> = ctxs
                    .par_iter()
                    .map(|&l| {
                        let fitted = held_out_fit(
                            points,
                            metas,
                            t,
                            catalog,
                            &move |p: &Point| p.input_tokens != Some(l),
                            &shared,
                        )?;
                        let held: Vec<&Point> = pts.iter().copied().filter(|p| p.input_tokens == Some(l)).collect();
                        Ok(predict_rows(&held, &fitted, metas, protocol, &format!("fitted without {l}-token contexts")))
                    })
                    .collect();
                for r in per_context {
                    rows.extend(r?);
                }
            }
            Protocol::LeaveOneReportOut => {
                let Some(t) = target else { return Ok(rows) };
                // The shared hardware model fitted on every other report's profile, the deployment
                // built from it with nothing of this report but what it states (model, GPU,
                // precision, engine).
                let others = others_than(&profiles, metas, &source);
                let shared = SharedModel::fit(&others, "leave-one-report-out");
                let name =
                    format!("{} (shared model without report {})", t.profile_name, &source[..3.min(source.len())]);
                let p = unmeasured_profile_shared(catalog, &shared, &name, &t.deployment)?;
                let note = format!("shared model of {} other deployments", others.len());
                rows.extend(predict_rows(&pts, &p, metas, protocol, &note));
            }
            Protocol::CorpusModel => {
                let Some(t) = target else { return Ok(rows) };
                if catalog.learned.is_none() {
                    let why = "not predicted: no learned step model (models/learned.toml) in the catalog";
                    rows.extend(pts.iter().map(|p| row(p, protocol, None, why.into())));
                    return Ok(rows);
                }
                // Every coefficient from the learned model for the deployment as the report states it;
                // the memory/compute overlap, the one value it takes from a shared model, from the
                // other reports' (as leave-one-report-out), so nothing of this report is in it.
                let shared = others_shared("corpus-model");
                let name = format!("{} (learned step model)", t.profile_name);
                let p = unmeasured_profile(catalog, &shared, &name, &t.deployment)?;
                rows.extend(predict_rows(&pts, &p, metas, protocol, "step model learned on the corpus alone"));
            }
            Protocol::CrossGpu => {
                // Qwen3-Coder-30B-A3B: report 000 (H100 PCIe) and 001 (H200 SXM) predict each other.
                let other = match &rep[..3] {
                    "000" => "001_755e0d5560c212ac.txt",
                    "001" => "000_2d6ea432ec8bd63a.txt",
                    _ => return Ok(rows),
                };
                let Some((_, from)) = profiles.iter().find(|(r, _)| r == other) else {
                    return Ok(rows);
                };
                let Some((_, own)) = profiles.iter().find(|(r, _)| *r == source) else {
                    return Ok(rows);
                };
                // The shared model the move leans on knows nothing of the report being predicted.
                let mut held_out = catalog.clone();
                held_out.hardware = others_shared("cross-gpu");
                let moved = from.retarget(
                    &held_out,
                    &crate::profile::Retarget { gpu: Some(own.gpu.name.clone()), ..Default::default() },
                )?;
                // The experiment unknowns belong to the report being predicted.
                let mut moved = moved;
                moved.file.experiment = own.file.experiment;
                rows.extend(predict_rows(
                    &pts,
                    &moved,
                    metas,
                    protocol,
                    &format!("profile {} retargeted to {}", from.name(), own.gpu.name),
                ));
            }
        }
        Ok(rows)
    };
    let per_report: Vec<Result<Vec<Row>>> =
        reports.par_iter().filter(|r| only_report.is_none_or(|o| r.starts_with(o))).map(one_report).collect();
    let mut rows = Vec::new();
    for r in per_report {
        rows.extend(r?);
    }
    Ok(rows)
}

/// One statistic of a benchmark run, predicted against measured (`capsim validate --runs`).
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub file: String,
    /// FILE#INDEX: the run within its file.
    pub run: String,
    pub load: String,
    pub metric: String,
    pub stat: String,
    pub measured: f64,
    pub predicted: Option<f64>,
    /// (predicted - measured) / measured, a fraction (0.05 = 5% over); None without a prediction, or
    /// for a statistic measured as 0 ([`MEASURED_ZERO`]).
    pub error: Option<f64>,
    /// The same error in percent, as the protocols' rows carry it (`Row::error_pct`).
    pub error_pct: Option<f64>,
    /// Left out of the summaries, as a protocol row's flag leaves it out: a statistic with no
    /// prediction or measured as 0 (no relative error).
    pub flagged: bool,
    /// The prediction's +-1 sigma band (as `Row::band`).
    pub band: Option<(f64, f64)>,
}

impl RunRow {
    /// The row of `run`'s statistic `p` against a prediction and its band: the error is relative
    /// to the measurement, none where there is no prediction or the measurement is 0 (flagged).
    pub fn new(run: &crate::measured::Run, p: &Point, predicted: Option<f64>, band: Option<(f64, f64)>) -> RunRow {
        let error = predicted.filter(|_| p.value > 0.0).map(|x| (x - p.value) / p.value);
        RunRow {
            band,
            file: run.source.file.clone(),
            run: run.label(),
            load: run.load.describe(),
            metric: p.metric.clone(),
            stat: crate::metrics::stat_name(p.stat).to_string(),
            measured: p.value,
            predicted,
            error,
            error_pct: error.map(|e| e * 100.0),
            flagged: error.is_none(),
        }
    }
}

/// Why a statistic measured as 0 is not compared.
pub const MEASURED_ZERO: &str = "measured as 0: relative error undefined";

/// The metric classes of [`RunRow`] summaries.
pub const RUN_METRIC_CLASSES: &[(&str, &[&str])] = &[
    ("ttft", &["ttft_s"]),
    ("tpot", &["tpot_ms"]),
    ("itl", &["itl_ms"]),
    ("e2e", &["e2e_ms"]),
    ("throughput", &["output_tok_s", "request_per_s"]),
];

/// Errors of one metric class over runs.
#[derive(Debug, Clone, Serialize)]
pub struct RunClassSummary {
    pub class: String,
    pub count: usize,
    pub median_abs_error: f64,
    pub p90_abs_error: f64,
    /// Mean of the signed errors: positive when capsim predicts too high.
    pub mean_error: f64,
}

/// Replay every run on `profile` and compare each statistic the file holds with the simulated
/// statistic of the same definition. Runs are simulated in parallel; results keep the runs' order.
pub fn validate_runs(profile: &Profile, runs: &[crate::measured::Run]) -> Vec<RunRow> {
    let u = ExperimentUnknowns::default();
    runs.par_iter()
        .map(|run| {
            // Caches per run: a replay is keyed by its run, whose address is only unique while alive.
            let cache = ReplayCache::default();
            let bands = Bands::new(profile);
            run.points("validate")
                .iter()
                .map(|p| {
                    let predicted = predict_cached(profile, p, &u, &[], &cache);
                    RunRow::new(run, p, predicted, predicted.and_then(|v| bands.of(p, v, &u, &[])))
                })
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .into_iter()
        .flatten()
        .collect()
}

/// Median, p90 and mean signed error per metric class (classes without rows are left out).
pub fn summarize_run_rows(rows: &[RunRow]) -> Vec<RunClassSummary> {
    RUN_METRIC_CLASSES
        .iter()
        .filter_map(|(class, metrics)| {
            let errs: Vec<f64> =
                rows.iter().filter(|r| metrics.contains(&r.metric.as_str())).filter_map(|r| r.error).collect();
            if errs.is_empty() {
                return None;
            }
            let mut abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
            abs.sort_by(f64::total_cmp);
            Some(RunClassSummary {
                class: class.to_string(),
                count: errs.len(),
                median_abs_error: percentile_sorted(&abs, 50.0),
                p90_abs_error: percentile_sorted(&abs, 90.0),
                mean_error: errs.iter().sum::<f64>() / errs.len() as f64,
            })
        })
        .collect()
}
