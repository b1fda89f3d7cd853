//! What a fit takes from its points before and after the search: the engine variants worth fitting,
//! the statistics that can be compared at all, and the refusal of a user's runs that cannot be
//! replayed (a profile fitted to runs it never simulated would be the priors under the runs' name).

use super::runs::why_not_replayed;
use super::Target;
use crate::catalog::Catalog;
use crate::data::Point;
use crate::error::{Error, Result};
use crate::measured::{Run, RunLoad};
use crate::profile::{EngineSettings, ProfileFile};
use std::sync::Arc;

/// The engine variants to fit. A report's unstated settings are tried in turn, but a running-sequence
/// cap that no experiment of the report can reach changes nothing and is skipped. A single variant is
/// the settings as stated (a user's `--max-num-seqs` is a fact of the deployment, not a guess to
/// search): it is fitted whether or not it binds.
pub(super) fn variants_to_fit<'a>(t: &'a Target, points: &[Point]) -> Vec<&'a (String, EngineSettings)> {
    if t.variants.len() <= 1 {
        return t.variants.iter().collect();
    }
    let reach = most_in_flight(points.iter().filter(|p| p.report == t.report));
    t.variants.iter().filter(|(_, v)| v.max_num_seqs.is_none_or(|cap| reach.is_none_or(|r| cap < r))).collect()
}

/// The most requests any of the points' experiments can hold in flight; None where that is unbounded:
/// an open loop without a concurrency cap can queue any number, whatever its rate (it is not a
/// concurrency of 1). A report's point without a stated concurrency bounds nothing (as before), and
/// points of no concurrency at all give 1.
fn most_in_flight<'a>(points: impl Iterator<Item = &'a Point>) -> Option<u32> {
    let mut most = None;
    for p in points {
        let n = match p.run.as_deref().map(|r| &r.load) {
            Some(RunLoad::Rate { max_concurrency: None, .. }) => return None,
            Some(RunLoad::Rate { max_concurrency: Some(c), .. }) => Some(*c),
            _ => p.concurrency,
        };
        most = most.max(n);
    }
    Some(most.unwrap_or(1))
}

/// Why a point cannot be compared whatever the fit: a measured statistic of 0 (a TTFT or TPOT of 0
/// from a broken client, an ITL of 0 from one-token outputs) leaves its relative error undefined.
pub(super) fn not_comparable(p: &Point) -> Option<String> {
    (p.value <= 0.0).then(|| {
        format!(
            "{} {} {} measured as 0: its relative error is undefined ({})",
            p.scenario,
            p.metric,
            crate::metrics::stat_name(p.stat),
            p.quote
        )
    })
}

/// A user's runs whose statistics the replay gives no value for: refused, naming each run, its file
/// and why, instead of a profile that was never compared with them. `preds` are the predictions of
/// `pts` on `pf`. Report figures are not checked here: one a variant cannot replay scores as a tenfold
/// miss in the objective, as it always has.
pub(super) fn refuse_unreplayed(
    t: &Target,
    pf: &ProfileFile,
    catalog: &Catalog,
    pts: &[&Point],
    preds: &[Option<f64>],
) -> Result<()> {
    let missed: Vec<(&Arc<Run>, &Point)> = pts
        .iter()
        .zip(preds)
        .filter(|(_, pr)| !pr.is_some_and(|x| x.is_finite() && x > 0.0))
        .filter_map(|(p, _)| p.run.as_ref().map(|r| (r, *p)))
        .collect();
    if missed.is_empty() {
        return Ok(());
    }
    // A deployment that does not resolve (a model that does not fit the GPU...) is the reason for all.
    let profile = pf.resolve(&t.profile_name, catalog)?;
    let runs = distinct(missed.iter().map(|(r, _)| *r));
    let all_runs = distinct(pts.iter().filter_map(|p| p.run.as_ref())).len();
    let why: Vec<String> = runs
        .iter()
        .map(|run| {
            let stats: Vec<String> = missed
                .iter()
                .filter(|(r, _)| Arc::ptr_eq(r, run))
                .map(|(_, p)| format!("{} {}", p.metric, crate::metrics::stat_name(p.stat)))
                .collect();
            let all = pts.iter().filter(|p| p.run.as_ref().is_some_and(|r| Arc::ptr_eq(r, run))).count();
            format!("{} ({}): {}", run.label(), run.source.file, why_not_replayed(&profile, run, &stats, all))
        })
        .collect();
    Err(Error::Infeasible(format!(
        "{}: {} of {} run(s) cannot be replayed on {} {} with {} (no profile written): {}",
        t.report,
        runs.len(),
        all_runs,
        profile.arch.name,
        profile.gpu.name,
        profile.engine.kind.as_str(),
        why.join("; ")
    )))
}

/// Each run once, in order of first appearance (a run's points share one `Arc`).
fn distinct<'a>(runs: impl Iterator<Item = &'a Arc<Run>>) -> Vec<&'a Arc<Run>> {
    let mut out: Vec<&Arc<Run>> = Vec::new();
    for r in runs {
        if !out.iter().any(|o| Arc::ptr_eq(o, r)) {
            out.push(r);
        }
    }
    out
}
