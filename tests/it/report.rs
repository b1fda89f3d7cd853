//! Issue 12: the report, the CLI surface, and the JSON contracts.

use std::path::Path;
use std::process::{Command, Output};

fn capsim(dir: &Path, args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(dir).output().unwrap();
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"), "{args:?}");
    o
}

/// A fresh folder for one test, removed when the guard is dropped.
fn scratch(name: &str) -> crate::Scratch {
    crate::Scratch::new(&format!("it-{name}"))
}

/// The report of the default profile: every section, every chart, the band paths and the measured
/// points, no NaN or infinity anywhere, nothing fetched (no script, no external URL).
#[test]
fn the_default_profiles_report_has_every_section_and_chart() {
    let dir = scratch("report");
    let d = dir.path();
    let o = capsim(d, &["report", "--out", "r.html"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(d.join("r.html")).unwrap();
    for section in [
        "<h1>Capacity report",
        "Peak decode speed",
        "Peak system throughput",
        "Best TTFT",
        "Max safe queue depth",
        "<h3>Against concurrency</h3>",
        "<h3>Bursts</h3>",
        "<h3>Use-case capacity</h3>",
        "<h3>Provenance</h3>",
        "id=\"command\"",
    ] {
        assert!(html.contains(section), "missing {section}");
    }
    for chart in [
        "Per-user speed",
        "Time to first token",
        "Inter-token latency",
        "System output throughput",
        "TTFT against burst size",
    ] {
        assert!(html.contains(&format!("<title>{chart}")), "missing chart {chart}");
    }
    assert_eq!(html.matches("<svg").count(), 5);
    assert!(html.matches("class=\"band\"").count() >= 5, "bands drawn as shaded areas");
    assert!(html.matches("class=\"measured\"").count() >= 5, "the profile's measured points as dots");
    for preset in ["code-completion", "short-chat", "general-chat", "long-documents", "coding-agent"] {
        assert!(html.contains(&format!("<tr><td>{preset}</td>")), "use case {preset}");
    }
    for bad in ["NaN", "inf<", ">inf", "<script", "http://", "https://"] {
        let allowed =
            bad == "http://" && html.matches("http://").count() == html.matches("http://www.w3.org/2000/svg").count();
        assert!(allowed || !html.contains(bad), "the report holds {bad}");
    }
    // Markdown: the document and its charts beside it.
    let o = capsim(d, &["report", "--format", "md", "--out", "r.md"]);
    assert!(o.status.success());
    let md = std::fs::read_to_string(d.join("r.md")).unwrap();
    assert_eq!(md.matches("](r_charts/").count(), 5);
    assert_eq!(std::fs::read_dir(d.join("r_charts")).unwrap().count(), 5);
}

#[test]
fn gpus_side_by_side_mark_the_extrapolations() {
    let dir = scratch("report-gpus");
    let d = dir.path();
    let o = capsim(d, &["report", "--gpus", "H200 SXM,B200", "--concurrency", "1,4,16", "--out", "r.html"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(d.join("r.html")).unwrap();
    assert!(html.contains("<h2 id=\"comparison\">Side by side</h2>"));
    assert!(html.contains("B200 (extrapolated)") && html.contains("<b>EXTRAPOLATION.</b>"));
    assert_eq!(html.matches("<svg").count(), 10);
    // Bad input is refused before any work.
    let o = capsim(d, &["report", "--out", "nowhere/r.html"]);
    assert_eq!(o.status.code(), Some(2));
    let o = capsim(d, &["report", "--concurrency", "0", "--out", "r.html"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn version_names_the_commit_and_completions_are_generated() {
    let d = std::env::temp_dir();
    let v = String::from_utf8(capsim(&d, &["--version"]).stdout).unwrap();
    assert!(v.starts_with("capsim 0.") && v.contains('(') && v.contains(')'), "{v}");
    for (shell, marker) in [("bash", "complete -F"), ("zsh", "#compdef capsim"), ("fish", "complete -c capsim")] {
        let o = capsim(&d, &["completions", shell]);
        assert!(o.status.success());
        let text = String::from_utf8(o.stdout).unwrap();
        assert!(text.contains(marker) && text.contains("simulate") && text.contains("prefix-caching"), "{shell}");
    }
}

/// The shape of a JSON document: every key path with the type of its value (arrays by their first
/// element), sorted. A key renamed, removed or retyped changes it.
fn shape(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
    use serde_json::Value::*;
    match v {
        Object(m) => {
            for (k, x) in m {
                shape(x, &format!("{path}.{k}"), out);
            }
        }
        Array(a) => match a.first() {
            Some(x) => shape(x, &format!("{path}[]"), out),
            None => out.push(format!("{path}: empty array")),
        },
        Null => out.push(format!("{path}: null")),
        Bool(_) => out.push(format!("{path}: bool")),
        Number(_) => out.push(format!("{path}: number")),
        String(_) => out.push(format!("{path}: string")),
    }
}

/// The JSON contracts of simulate, capacity and validate against checked-in files
/// (tests/fixtures/contracts). An intended change is written with CAPSIM_BLESS=1 and reviewed in the
/// diff.
#[test]
fn json_contracts_keep_their_keys_and_types() {
    let d = std::env::temp_dir();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/contracts");
    let cases: [(&str, &[&str]); 4] = [
        ("simulate", &["simulate", "--concurrency", "4", "--requests", "40", "--json"]),
        ("capacity", &["capacity", "--load", "burst", "--slo", "ttft_mean_s=2", "--max-load", "64", "--json"]),
        (
            "capacity-fleet",
            &["capacity", "--slo", "ttft_p95_s=2", "--target-rate", "10", "--requests-per-replica", "300", "--json"],
        ),
        ("validate", &["validate", "--protocol", "in-sample", "--json"]),
    ];
    let mut changed = Vec::new();
    for (name, args) in cases {
        let o = capsim(&d, args);
        assert!(o.status.success(), "{name}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let mut lines = Vec::new();
        shape(&v, "", &mut lines);
        lines.sort();
        lines.dedup();
        let text = lines.join("\n") + "\n";
        let file = root.join(format!("{name}.txt"));
        if std::env::var("CAPSIM_BLESS").is_ok() {
            std::fs::write(&file, &text).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&file).unwrap_or_default();
        if expected != text {
            changed.push(format!("{name}: expected {} lines, got {}", expected.lines().count(), lines.len()));
        }
    }
    assert!(changed.is_empty(), "JSON contracts changed (CAPSIM_BLESS=1 to accept): {changed:?}");
}
