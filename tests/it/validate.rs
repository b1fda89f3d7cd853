use capsim::catalog::Catalog;
use capsim::data;
use capsim::validate::{run, Protocol, TARGETS};

#[test]
fn in_sample_validation_covers_every_point() {
    let (c, pts, metas) = (Catalog::builtin(), data::load_points(None).unwrap(), data::report_metas().unwrap());
    let rows = run(Protocol::InSample, &pts, &metas, &c, None, None).unwrap();
    assert_eq!(rows.len(), pts.len(), "every point of points.csv gets a row");
    // Every flagged point is shown as flagged; every unflagged experiment gets a prediction.
    for (r, p) in rows.iter().zip(&pts) {
        assert_eq!((r.line, r.flagged), (p.line, p.is_flagged()));
        if capsim::experiment::is_replayable(p, &metas) {
            assert!(r.predicted.is_some(), "line {}: {}", r.line, r.note);
        } else {
            assert!(r.predicted.is_none() && r.note.starts_with("not predicted"), "line {}", r.line);
        }
    }
    // Report 002's max safe queue depths are predicted.
    let q: Vec<_> = rows.iter().filter(|r| r.metric == "max_safe_queue_depth" && r.report.starts_with("002")).collect();
    assert_eq!(q.len(), 4);
    assert!(q.iter().all(|r| r.predicted.is_some_and(|v| v >= 1.0)));
    // Issue 10's target, within 10% of 131/84/19/8. Chatbot and RAG meet it with the running-sequence
    // cap fitted as 100 in flight (memory never binds: 256 chatbot requests use under half the KV
    // blocks). Agentic and tool calling resist: the bursts need a faster long prefill than the
    // report's own tool-calling closed loop at 32 users (TTFT 6.18 s, fitted 4.7 s) allows; they
    // are predicted 17 and 7, and this test fails when that changes, to be looked at.
    let depth = |scenario: &str| q.iter().find(|r| r.scenario == scenario).unwrap().predicted.unwrap();
    for (scenario, reported) in [("chatbot", 131.0), ("rag_qa", 84.0)] {
        assert!((depth(scenario) / reported - 1.0).abs() <= 0.10, "{scenario}: {}", depth(scenario));
    }
    for (scenario, reported) in [("agentic", 19.0), ("tool_calling", 8.0)] {
        let miss = (depth(scenario) / reported - 1.0).abs();
        assert!(miss > 0.10 && miss < 0.15, "{scenario}: {} (resisting; update the note above)", depth(scenario));
    }
}

#[test]
fn accuracy_targets_hold_or_are_marked_as_resisting() {
    let (c, pts, metas) = (Catalog::builtin(), data::load_points(None).unwrap(), data::report_metas().unwrap());
    let mut rows = run(Protocol::InSample, &pts, &metas, &c, None, None).unwrap();
    rows.extend(run(Protocol::ExtrapolateConcurrency, &pts, &metas, &c, None, None).unwrap());
    rows.extend(run(Protocol::CrossGpu, &pts, &metas, &c, None, None).unwrap());
    rows.extend(run(Protocol::LeaveOneReportOut, &pts, &metas, &c, None, None).unwrap());
    rows.extend(run(Protocol::CorpusModel, &pts, &metas, &c, None, None).unwrap());
    // Honest bands: the share of measured points inside the +-1 sigma prediction band is near 68%,
    // neither far below (bands that lie) nor all of them (bands too wide to say anything).
    for p in [Protocol::InSample, Protocol::CrossGpu, Protocol::LeaveOneReportOut, Protocol::CorpusModel] {
        let these: Vec<_> = rows.iter().filter(|r| r.protocol == p.as_str()).cloned().collect();
        let (n, inside) = capsim::validate::band_coverage(&these);
        let share = inside as f64 / n as f64;
        assert!(n >= 50 && (0.5..=0.9).contains(&share), "{p:?}: {inside} of {n} inside the band");
    }
    for t in TARGETS {
        let (n, med, p90, met) = t.evaluate(&rows);
        assert!(n >= 5, "{t:?}: only {n} points");
        match t.resists {
            None => assert!(met, "{:?} {:?}: median {med:.1}%, p90 {p90:.1}% misses its target", t.protocol, t.group),
            Some(why) => assert!(
                !met,
                "{:?} {:?} is now met (median {med:.1}%, p90 {p90:.1}%): remove its `resists` marker ({why})",
                t.protocol, t.group
            ),
        }
    }
}

#[test]
fn cross_gpu_retargets_the_other_reports_profile() {
    let (c, pts, metas) = (Catalog::builtin(), data::load_points(None).unwrap(), data::report_metas().unwrap());
    let rows = run(Protocol::CrossGpu, &pts, &metas, &c, Some("00"), None).unwrap();
    let from_001 = rows.iter().find(|r| r.report.starts_with("000") && r.predicted.is_some()).unwrap();
    assert!(from_001.note.contains("h200") && from_001.note.contains("H100 PCIe"), "{}", from_001.note);
    assert!(rows.iter().any(|r| r.report.starts_with("001") && r.note.contains("H200 SXM")));
}

/// The corpus-model protocol predicts every report from the learned step model, which holds no
/// report point, and says so; without a learned model it predicts nothing rather than falling back.
#[test]
fn corpus_model_predicts_the_reports_from_the_learned_model_alone() {
    let (c, pts, metas) = (Catalog::builtin(), data::load_points(None).unwrap(), data::report_metas().unwrap());
    let learned = c.learned.as_ref().expect("the built-in catalog embeds models/learned.toml");
    // The learned model was fitted on the corpus only: none of its clients or deployments is a report.
    assert!(learned.clients.iter().all(|k| !k.client.starts_with("00")));
    let rows = run(Protocol::CorpusModel, &pts, &metas, &c, None, None).unwrap();
    let replayed: Vec<_> = rows.iter().filter(|r| r.predicted.is_some()).collect();
    assert!(replayed.len() >= 100, "{} rows predicted", replayed.len());
    assert!(replayed.iter().all(|r| r.note == "step model learned on the corpus alone"));
    // The same deployments predicted by the shared model of the other reports differ: another model.
    let loro = run(Protocol::LeaveOneReportOut, &pts, &metas, &c, None, None).unwrap();
    let differ = rows.iter().zip(&loro).filter(|(a, b)| a.predicted.is_some() && a.predicted != b.predicted).count();
    assert!(differ * 2 > replayed.len(), "{differ} of {} differ", replayed.len());
    let mut bare = c.clone();
    bare.learned = None;
    let rows = run(Protocol::CorpusModel, &pts, &metas, &bare, Some("000"), None).unwrap();
    assert!(!rows.is_empty() && rows.iter().all(|r| r.predicted.is_none() && r.note.starts_with("not predicted")));
}
