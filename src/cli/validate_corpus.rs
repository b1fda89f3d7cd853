//! `capsim validate --protocol corpus-in-sample | leave-one-gpu-out | leave-one-model-out |
//! leave-one-engine-out`: the learned step model against the corpus (capsim::validate::corpus).

use super::validate::ValidateArgs;
use capsim::catalog::Catalog;
use capsim::error::{Error, Result};
use capsim::validate::corpus::{summarize, validate_corpus, CorpusProtocol, CorpusRow, CorpusSummary};
use serde_json::json;

/// `--protocol corpus-all`: the four corpus protocols over the plain deployments.
pub const ALL: &str = "corpus-all";
/// `--protocol corpus-large`: the two protocols over the large deployments (issue 25).
pub const LARGE: &str = "corpus-large";

pub fn run(a: &ValidateArgs, protocols: &[CorpusProtocol], catalog: &Catalog) -> Result<()> {
    for (flag, given) in [("--report", a.report.is_some()), ("--plots", a.plots.is_some())] {
        if given {
            return Err(Error::flag(flag, "does not apply to the corpus protocols"));
        }
    }
    if let Some(flag) = a.deployment.given_flags().into_iter().next() {
        return Err(Error::flag(flag, "the corpus protocols replay every corpus point on its own deployment"));
    }
    if a.json && a.markdown.is_some() {
        return Err(Error::flag("--json", "choose one output: --json or --markdown"));
    }
    if let Some(path) = &a.markdown {
        super::check_output_file("--markdown", path)?;
    }
    let ex = capsim::corpus::load(catalog, None)?;
    let mut doc = if protocols.iter().all(|p| p.is_large()) { large_head(&ex) } else { markdown_head(&ex) };
    for &p in protocols {
        let rows = validate_corpus(catalog, &ex.experiments, p)?;
        let sums = summarize(&rows, p);
        if a.markdown.is_some() {
            doc += &markdown_section(p, &sums);
            doc += &exchange_note(p, &rows);
            doc += &mtp_note(p, &rows);
            doc += &handover_note(p, &rows);
            continue;
        }
        print_one(a, p, &rows, &sums, &ex)?;
    }
    if let Some(path) = &a.markdown {
        std::fs::write(path, doc).map_err(|err| Error::Io { path: path.display().to_string(), err })?;
        outln!("wrote {}", path.display())?;
    }
    Ok(())
}

fn print_one(
    a: &ValidateArgs,
    p: CorpusProtocol,
    rows: &[CorpusRow],
    sums: &[CorpusSummary],
    ex: &capsim::corpus::Expressed,
) -> Result<()> {
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "protocol": p.as_str(),
                "rows": rows,
                "summary": sums,
                "refused_by_reason": ex.counts().iter().map(|(r, n)| json!({"reason": r, "points": n})).collect::<Vec<_>>(),
            }))
            .expect("json")
        )?;
        return Ok(());
    }
    out!("{}", summary_text(p, rows, sums))?;
    Ok(())
}

/// The targets of issue 23 over the corpus: (protocol, metric, median |error| % at most).
pub const TARGETS: &[(CorpusProtocol, &str, f64)] = &[
    (CorpusProtocol::LeaveOneGpuOut, "ttft_s", 20.0),
    (CorpusProtocol::LeaveOneGpuOut, "tpot_ms", 10.0),
    (CorpusProtocol::LeaveOneModelOut, "ttft_s", 15.0),
    (CorpusProtocol::LeaveOneModelOut, "tpot_ms", 10.0),
    (CorpusProtocol::LargeInSample, "ttft_s", 25.0),
    (CorpusProtocol::LargeInSample, "tpot_ms", 15.0),
    (CorpusProtocol::LargeLeaveOneGpuOut, "ttft_s", 25.0),
    (CorpusProtocol::LargeLeaveOneGpuOut, "tpot_ms", 15.0),
];

/// A value the large protocols fit on the training set, as each held-out member's rows were replayed
/// at it ("all" in sample; none for the plain protocols): `what` then each member's `value`.
fn fitted_note(
    p: CorpusProtocol,
    rows: &[CorpusRow],
    value: impl Fn(&CorpusRow) -> Option<String>,
    what: &str,
) -> String {
    let mut used: std::collections::BTreeMap<String, String> = Default::default();
    for r in rows {
        if let Some(v) = value(r) {
            let member = if p == CorpusProtocol::LargeInSample { "all".to_string() } else { r.member.clone() };
            used.insert(member, v);
        }
    }
    if used.is_empty() {
        return String::new();
    }
    let list: Vec<String> = used.iter().map(|(m, v)| format!("{m} {v}")).collect();
    format!("{what}: {}.\n\n", list.join(", "))
}

/// The exchange latency between attention-DP ranks each held-out member's rows were replayed at.
fn exchange_note(p: CorpusProtocol, rows: &[CorpusRow]) -> String {
    fitted_note(
        p,
        rows,
        |r| r.exchange_latency_us.map(|x| format!("{x:.1} us")),
        "Fixed time of a MoE dispatch or combine between attention-DP ranks, fitted on the attention-DP TPOTs without MTP of the training set (in sample: every such point; a GPU held out: the other GPUs'; calibrate/exchange.rs)",
    )
}

/// Each engine's hand-over of a disaggregated request each held-out member's rows were replayed at.
fn handover_note(p: CorpusProtocol, rows: &[CorpusRow]) -> String {
    let what = format!(
        "Hand-over of a disaggregated request from its prefill to its decode worker per engine, fitted on the disaggregated TTFTs at {} clients or fewer of the training set (in sample: every such point; a GPU held out: the other GPUs'; calibrate/handover.rs; an engine without one: 0)",
        capsim::calibrate::handover::LOW_LOAD_CLIENTS
    );
    fitted_note(p, rows, |r| r.handovers.as_ref().map(|h| format!("({h})")), &what)
}

/// The MTP acceptance each held-out member's MTP rows were replayed at.
fn mtp_note(p: CorpusProtocol, rows: &[CorpusRow]) -> String {
    fitted_note(
        p,
        rows,
        |r| r.mtp_accept_rate.map(|a| format!("{a:.2}")),
        "MTP acceptance per drafted position, fitted on the MTP TPOTs of the training set (in sample: every MTP point; a GPU held out: the other GPUs'), since no launch states it and the corpus's prompts are random tokens",
    )
}

/// The head of validation/large.md.
fn large_head(ex: &capsim::corpus::Expressed) -> String {
    let mut t = String::from(concat!(
        "# Large deployments against the corpus\n\n",
        "Written by `capsim validate --protocol corpus-large --markdown validation/large.md`. The corpus's\n",
        "disaggregated, speculative-decoding (MTP) and attention-DP points (issue 25) are replayed as their\n",
        "clients ran them (validation/corpus.md says how), each on its deployment as capsim models it. The\n",
        "learned step model is fitted on the plain aggregated points only: `large-in-sample` replays on the\n",
        "model learned on every plain point, `large-leave-one-gpu-out` on the model learned without the GPU's\n",
        "plain points. Two quantities no plain point identifies are fitted on the large points of the\n",
        "training set (all of them in sample, the other GPUs' with a GPU held out), as stated below each\n",
        "table: the fixed time of a MoE exchange between attention-DP ranks (on the attention-DP TPOTs\n",
        "without MTP; `capsim calibrate --corpus` ships the value fitted on all of them) and MTP's\n",
        "acceptance. Rows are grouped by feature set in sample and by GPU held out. Error = predicted /\n",
        "measured - 1. The band is validation/corpus.md's; a disaggregated point's TTFT band is also at\n",
        "least as wide as its replays with the prefill pool's steps slower and the decode pool's faster by\n",
        "one sigma of their ratio, and the other way (a closed loop near the prefill pool's capacity turns a\n",
        "modest error in that ratio into a large one in TTFT).\n\n",
    ));
    let large = ex.large();
    let recipes = large.iter().filter(|e| e.point.pd_launch.is_some()).count();
    t += &format!(
        "{} large-deployment points replayed; {recipes} disaggregated InferenceX points of them run the pools their\nrecipes launched (calibration/corpus/inferencex-dsr1/pd_recipes.json: each pool's layout and redundant experts,\nbatch and token caps, memory fraction, KV dtype, stream and scheduler receive intervals and MTP drafted tokens).\n\n",
        large.len()
    );
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    for e in &large {
        let f: Vec<&str> = e.features().into_iter().map(|f| f.as_str()).collect();
        *counts.entry(f.join("+")).or_default() += 1;
    }
    if !counts.is_empty() {
        t += "| features | points |\n| --- | --- |\n";
        for (f, n) in counts {
            t += &format!("| {f} | {n} |\n");
        }
        t += "\n";
    }
    t
}

fn markdown_head(ex: &capsim::corpus::Expressed) -> String {
    let mut t = String::from(concat!(
        "# The learned step model against the corpus\n\n",
        "Written by `capsim validate --protocol corpus-all --markdown validation/corpus.md`. Every corpus point\n",
        "capsim can express is replayed through the simulator as its client ran it: a closed loop at the\n",
        "concurrency; InferenceX's lengths uniform in [int(0.8 L), L] and 10 x concurrency requests; the NVIDIA\n",
        "rows, whose client is not stated, with fixed lengths (outputs up to 2% short, a stand-in for a real\n",
        "server's timing noise) and as many requests per client as the step model fitted for that source (the\n",
        "source does not state it and the first round is a burst; prior 10). A held-out GPU, model or engine is\n",
        "predicted by the step model learned on every other point (`capsim calibrate --corpus`), so it gets no\n",
        "offset of its own and no deployment residual; a benchmark client's own per-request cost and request\n",
        "count, fitted on that client's other points, are used in its replays. Error = predicted / measured - 1;\n",
        "the band is the learned model's ±1 sigma for the metric (TPOT: the HBM share's, with the fit's residual\n",
        "spread; TTFT: the widest of the prefill throughput's and the host costs', with the fit's TTFT residual\n",
        "spread), widened by the spread of every level the deployment lacks.\n\n",
    ));
    t += &format!(
        "{} points replayed, {} not expressible yet:\n\n| reason | points |\n| --- | --- |\n",
        ex.plain().len(),
        ex.refused.len()
    );
    for (r, n) in ex.counts() {
        t += &format!("| {r} | {n} |\n");
    }
    t += "\n";
    t
}

fn markdown_section(p: CorpusProtocol, sums: &[CorpusSummary]) -> String {
    let mut t = format!(
        "## {}\n\n| held out | metric | points | median abs error % | p90 abs error % | median error % | in ±1 sigma band |\n| --- | --- | --- | --- | --- | --- | --- |\n",
        p.as_str()
    );
    for s in sums {
        t += &format!("| {} |\n", cells(s).join(" | "));
    }
    for (_, metric, max) in TARGETS.iter().filter(|t| t.0 == p) {
        if let Some(s) = sums.iter().find(|s| s.member == "all" && s.metric == *metric) {
            let issue = if p.is_large() { 25 } else { 23 };
            t += &format!(
                "\nTarget (issue {issue}): {metric} median |error| <= {max}%: {:.1}%, {}.\n",
                s.median_abs_error_pct,
                if s.median_abs_error_pct <= *max { "met" } else { "NOT met" }
            );
        }
    }
    t += "\n";
    t
}

/// The summary table of a corpus protocol (also VALIDATION.md's corpus section).
pub fn summary_text(p: CorpusProtocol, rows: &[CorpusRow], sums: &[CorpusSummary]) -> String {
    let mut t = format!(
        "== protocol {} == ({} rows; error = predicted / measured - 1; band = the learned model's ±1 sigma)\n",
        p.as_str(),
        rows.len()
    );
    t += &format!(
        "{:<28} {:<8} {:>6} {:>10} {:>8} {:>11} {:>9}\n",
        "held out", "metric", "points", "median|e|%", "p90|e|%", "median e %", "in band"
    );
    for s in sums {
        let [member, metric, count, med, p90, signed, band] = cells(s);
        t += &format!("{member:<28} {metric:<8} {count:>6} {med:>10} {p90:>8} {signed:>11} {band:>9}\n");
    }
    t
}

/// A summary line's cells, as both the table and the Markdown print them.
fn cells(s: &CorpusSummary) -> [String; 7] {
    let pct = |x: f64| if x.is_finite() { format!("{x:.1}") } else { "-".into() };
    [
        s.member.clone(),
        s.metric.clone(),
        s.count.to_string(),
        pct(s.median_abs_error_pct),
        pct(s.p90_abs_error_pct),
        pct(s.median_error_pct),
        if s.band_coverage.is_finite() { format!("{:.0}%", s.band_coverage * 100.0) } else { "-".into() },
    ]
}
