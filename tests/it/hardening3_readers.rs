//! Issue 24 (hardening, third round): regression tests from its reproducers, the benchmark-file
//! readers' items (6, 9, 12, 13, 14, 15).

use capsim::experiment::run_workload;
use capsim::measured::{read_file, read_path, RunLoad};
use capsim::metrics::StatKind;
use capsim::workload::{Generator, LengthDist};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Scratch;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

/// A fresh scratch folder for one test, removed when the guard is dropped.
fn scratch(name: &str) -> Scratch {
    Scratch::new(&format!("h3r-{name}"))
}

/// Run capsim; (exit code, stdout, stderr). Fails the test if it panics or runs past 20 s (killed
/// then, so a blocking read fails the test instead of hanging it).
fn capsim(args: &[&str]) -> (i32, String, String) {
    capsim_within(args, 20)
}

/// [`capsim`] with a limit of `secs` seconds.
pub(crate) fn capsim_within(args: &[&str], secs: u64) -> (i32, String, String) {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(args)
        .current_dir(std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(secs) {
            child.kill().unwrap();
            panic!("{args:?} ran past {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string());
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    (o.status.code().unwrap_or(-1), out, err)
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &Value) {
    std::fs::write(p, serde_json::to_string_pretty(v).unwrap()).unwrap();
}

/// The error of reading `v` written to `dir/name`, as text.
fn read_error(dir: &Path, name: &str, v: &Value) -> String {
    let p = dir.join(name);
    write_json(&p, v);
    let e = read_file(&p).expect_err("must be refused").to_string();
    assert!(e.contains(name), "the error names the file: {e}");
    e
}

#[cfg(unix)]
#[test]
fn item6_a_fifo_is_not_opened_and_a_symlink_loop_reads_each_run_once() {
    let tmp = scratch("item6");
    let dir = tmp.path();
    std::fs::copy(fixture("vllm/sweep/low/c1_in1024.json"), dir.join("c1_in1024.json")).unwrap();
    assert!(Command::new("mkfifo").arg(dir.join("blocked.json")).status().unwrap().success());
    std::os::unix::fs::symlink(".", dir.join("loop")).unwrap();
    std::os::unix::fs::symlink("c1_in1024.json", dir.join("same.json")).unwrap();
    // Before: the FIFO blocked forever; the loop read the run 41 times.
    let (runs, skipped) = read_path(dir).unwrap();
    assert_eq!(runs.len(), 1, "{runs:?}");
    let said = skipped.join("\n");
    assert!(said.contains("blocked.json: not a regular file"), "{said}");
    assert!(said.contains("loop: a folder already read"), "{said}");
    assert!(said.contains("the same file as one already read"), "{said}");
    // The same through the command line, and a folder given twice is read once.
    let d = dir.to_str().unwrap();
    let (code, out, err) = capsim(&["validate", "--runs", d, d, "--gpu", "H200 SXM", "--engine", "vllm"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().filter(|l| l.starts_with("run ") && l.contains("requests sent")).count(), 1, "{out}");
    assert!(err.contains("not a regular file"), "{err}");
    // A FIFO named on its own is refused, not opened.
    let fifo = dir.join("blocked.json");
    let (code, _, err) = capsim(&["validate", "--runs", fifo.to_str().unwrap(), "--gpu", "H200 SXM"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("blocked.json") && err.contains("not a regular file"), "{err}");
    // A folder holding nothing readable says what it skipped.
    let only_tmp = scratch("item6-only");
    let only = only_tmp.path();
    assert!(Command::new("mkfifo").arg(only.join("x.json")).status().unwrap().success());
    let e = read_path(only).unwrap_err().to_string();
    assert!(e.contains("x.json: not a regular file"), "{e}");
}

#[test]
fn item9_counts_are_range_checked_not_truncated_or_saturated() {
    let tmp = scratch("item9");
    let dir = tmp.path();
    // GuideLLM streams = 2^32 + 4 was concurrency 4.
    let mut g = read_json(&fixture("guidellm/benchmarks.json"));
    g["benchmarks"][1]["config"]["strategy"]["streams"] = json!(4294967300u64);
    let e = read_error(dir, "guidellm.json", &g);
    assert!(e.contains("benchmarks[1].config.strategy.streams") && e.contains("4294967295"), "{e}");
    // AIPerf request_count 1e300 was u64::MAX requests; a fractional one was floored.
    for (x, shown) in [(json!(1e300), "1e300"), (json!(16.5), "16.5")] {
        let a_tmp = scratch(&format!("item9-aiperf-{shown}"));
        let a = a_tmp.path();
        let mut v = read_json(&fixture("aiperf/concurrency_4/profile_export_aiperf.json"));
        v["request_count"]["avg"] = x;
        let e = read_error(a, "profile_export_aiperf.json", &v);
        assert!(e.contains("request_count.avg") && e.contains(shown), "{e}");
    }
    // vLLM: a fractional completed count, a cap beyond u32, a fractional per-request length.
    let base = read_json(&fixture("vllm/detailed_c2.json"));
    for (key, x, field) in [
        ("completed", json!(2.5), "completed"),
        ("max_concurrency", json!(4294967296u64), "max_concurrency"),
        ("num_prompts", json!(1e300), "num_prompts"),
        ("input_lens", json!([1024, 1024.5, 1024, 1024]), "input_lens[1]"),
        ("output_lens", json!([16, 1e300, 0, 16]), "output_lens[1]"),
    ] {
        let mut v = base.clone();
        v[key] = x;
        let e = read_error(dir, "vllm.json", &v);
        assert!(e.contains(&format!("`{field}`")), "{key}: {e}");
    }
    // The command line exits 2 naming the key.
    let mut g = read_json(&fixture("guidellm/benchmarks.json"));
    g["benchmarks"][0]["config"]["strategy"] = json!({"type_": "concurrent", "streams": 2.5});
    let p = dir.join("g2.json");
    write_json(&p, &g);
    let (code, _, err) = capsim(&["validate", "--runs", p.to_str().unwrap(), "--gpu", "H200 SXM"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("g2.json") && err.contains("streams") && err.contains("2.5"), "{err}");
}

/// A vLLM result with its latency keys renamed to `<stat>_<metric>` in seconds, as InferenceX's
/// client writes them.
fn in_seconds(mut v: Value) -> Value {
    let o = v.as_object_mut().unwrap();
    let keys: Vec<String> = o.keys().filter(|k| k.ends_with("_ms")).cloned().collect();
    for k in keys {
        let x = o.remove(&k).unwrap();
        o.insert(k.trim_end_matches("_ms").to_string(), json!(x.as_f64().unwrap() / 1e3));
    }
    v
}

#[test]
fn item12_latency_keys_in_seconds_are_converted_or_said_not_compared() {
    let tmp = scratch("item12");
    let dir = tmp.path();
    let ms = read_file(&fixture("vllm/sweep/low/c2_in1024.json")).unwrap().remove(0);
    let seconds = in_seconds(read_json(&fixture("vllm/sweep/low/c2_in1024.json")));
    let same_stats = |r: &capsim::measured::Run| {
        assert_eq!(r.stats.len(), ms.stats.len(), "{:?}", r.stats);
        for (a, b) in r.stats.iter().zip(&ms.stats) {
            assert_eq!((a.metric, a.stat), (b.metric, b.stat));
            assert!((a.value - b.value).abs() <= 1e-9 * b.value.abs(), "{} {} vs {}", a.key, a.value, b.value);
        }
    };
    // A closed loop with its request throughput: Little's law shows the seconds.
    let p = dir.join("little.json");
    write_json(&p, &seconds);
    let r = read_file(&p).unwrap().remove(0);
    same_stats(&r);
    assert!(r.stats.iter().any(|s| s.key.contains("Little's law")), "{:?}", r.stats);
    // Interactivity (1 / TPOT in seconds) shows it too.
    let mut v = seconds.clone();
    v.as_object_mut().unwrap().remove("request_throughput");
    let tpot = v["median_tpot"].as_f64().unwrap();
    v["median_intvty"] = json!(1.0 / tpot);
    let p = dir.join("intvty.json");
    write_json(&p, &v);
    let r = read_file(&p).unwrap().remove(0);
    assert!(r.stats.iter().any(|s| s.key.contains("interactivity")), "{:?}", r.stats);
    let latencies = |r: &capsim::measured::Run| {
        r.stats.iter().filter(|s| s.metric != "output_tok_s" && s.metric != "request_per_s").count()
    };
    assert_eq!(latencies(&r), latencies(&ms));
    assert!(latencies(&ms) >= 6);
    // Nothing shows the unit: every latency statistic is listed as not compared (they were dropped
    // without a word).
    let mut v = seconds;
    v.as_object_mut().unwrap().remove("request_throughput");
    let p = dir.join("unknown.json");
    write_json(&p, &v);
    let r = read_file(&p).unwrap().remove(0);
    assert!(r.stats.iter().all(|s| s.metric == "output_tok_s"), "{:?}", r.stats);
    for k in ["mean_ttft", "median_ttft", "p99_ttft", "mean_tpot", "p99_itl", "mean_e2el"] {
        assert!(
            r.not_compared.iter().any(|n| n.starts_with(&format!("{k} (no unit in the key"))),
            "{k}: {:?}",
            r.not_compared
        );
    }
    // A statistic stated twice (with and without a unit) is compared once.
    let mut v = read_json(&fixture("vllm/sweep/low/c2_in1024.json"));
    v["mean_ttft_s"] = json!(v["mean_ttft_ms"].as_f64().unwrap() / 1e3);
    let p = dir.join("twice.json");
    write_json(&p, &v);
    let r = read_file(&p).unwrap().remove(0);
    assert_eq!(r.stats.iter().filter(|s| s.metric == "ttft_s" && s.stat == StatKind::Mean).count(), 1);
    assert!(r.not_compared.iter().any(|n| n.starts_with("mean_ttft_s (the same statistic as mean_ttft_ms)")));
}

/// The `q` quantile of drawn values (nearest rank).
fn quantile(xs: &mut [u32], q: f64) -> f64 {
    xs.sort_unstable();
    xs[((xs.len() - 1) as f64 * q).round() as usize] as f64
}

#[test]
fn item13_stated_length_percentiles_are_replayed_not_their_mean() {
    // An AIPerf summary without the records beside it, whose lengths spread (a real sweep's shape).
    let tmp = scratch("item13");
    let dir = tmp.path();
    let mut v = read_json(&fixture("aiperf/concurrency_4/profile_export_aiperf.json"));
    let spread = |avg: f64, p: [f64; 11]| {
        let keys = ["min", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "max"];
        let mut o = json!({"unit": "tokens", "avg": avg});
        for (k, x) in keys.iter().zip(p) {
            o[*k] = json!(x);
        }
        o
    };
    v["input_sequence_length"] =
        spread(1000.0, [200.0, 300.0, 500.0, 600.0, 800.0, 950.0, 1150.0, 1400.0, 1600.0, 2100.0, 3000.0]);
    v["output_sequence_length"] =
        spread(300.0, [20.0, 40.0, 80.0, 110.0, 180.0, 260.0, 380.0, 520.0, 640.0, 900.0, 1500.0]);
    let p = dir.join("profile_export_aiperf.json");
    write_json(&p, &v);
    let run = read_file(&p).unwrap().remove(0);
    assert_eq!(run.output_tokens_mean, 300.0, "the mean is the file's");
    assert_eq!(run.length_percentiles.output.len(), 11);
    let w = run_workload(&run).unwrap();
    assert!(matches!(w.spec.classes[0].output, LengthDist::Empirical { .. }), "{:?}", w.spec.classes[0].output);
    // Draws with the replay's generator reproduce the stated median and p99 (they were all 300).
    let mut g = Generator::new(&w, 1);
    let (mut ins, mut outs): (Vec<u32>, Vec<u32>) = (0..100_000).map(|_| g.lengths()).map(|(i, o, _)| (i, o)).unzip();
    for (xs, p50, p99) in [(&mut ins, 950.0, 2100.0), (&mut outs, 260.0, 900.0)] {
        let (a, b) = (quantile(xs, 0.5), quantile(xs, 0.99));
        assert!((a - p50).abs() / p50 < 0.03, "p50 {a} vs {p50}");
        assert!((b - p99).abs() / p99 < 0.05, "p99 {b} vs {p99}");
    }
    // Lengths that do not spread keep their value; a closed loop's outputs only get the timing-noise
    // shortfall (workload::TIMING_NOISE_LENGTH_SPREAD), so the replayed clients drift apart.
    let fixed = read_file(&fixture("aiperf/concurrency_4/profile_export_aiperf.json")).unwrap().remove(0);
    let w = run_workload(&fixed).unwrap();
    assert_eq!(w.spec.classes[0].input, LengthDist::fixed(fixed.input_tokens_mean.round() as u32));
    assert_eq!(w.spec.classes[0].output, LengthDist::Uniform { min: 31, max: 32 });
    // vLLM's per-request lists are drawn from as listed.
    let mut d = read_json(&fixture("vllm/detailed_c2.json"));
    d["output_lens"] = json!([16, 64, 0, 256]);
    let p = dir.join("detailed.json");
    write_json(&p, &d);
    let run = read_file(&p).unwrap().remove(0);
    match &run_workload(&run).unwrap().spec.classes[0].output {
        LengthDist::Empirical { values, .. } => assert_eq!(values, &vec![16, 64, 256]),
        other => panic!("{other:?}"),
    }
    // Percentiles that decrease are refused, naming the key.
    v["output_sequence_length"]["p90"] = json!(100.0);
    let e = read_error(dir, "profile_export_aiperf.json", &v);
    assert!(e.contains("output_sequence_length.p90") && e.contains("cannot decrease"), "{e}");
}

#[test]
fn item14_runs_are_labelled_by_folder_and_rate() {
    let (runs, _) = read_path(&fixture("aiperf")).unwrap();
    let labels: Vec<String> = runs.iter().map(|r| r.label()).collect();
    // Both were `profile_export_aiperf.json#0`.
    assert_eq!(labels, ["concurrency_4/profile_export_aiperf.json", "request-rate_8/profile_export_aiperf.json"]);
    assert_eq!(runs[1].load.short(), "rate 8/s");
    assert!(matches!(runs[1].load, RunLoad::Rate { .. }));
    // Several runs in one file are numbered; one run in a file is not.
    let jsonl: Vec<String> = read_file(&fixture("vllm/append.jsonl")).unwrap().iter().map(|r| r.label()).collect();
    assert_eq!(jsonl, ["vllm/append.jsonl#0", "vllm/append.jsonl#1"]);
    // The fit report shows the rate run as its rate (it showed load `unknown`, concurrency 0).
    let tmp = scratch("item14");
    let out = tmp.path();
    let (code, _, err) = capsim(&[
        "calibrate",
        "--runs",
        fixture("aiperf").to_str().unwrap(),
        "--gpu",
        "H100 PCIe",
        "--max-evals",
        "10",
        "--name",
        "a",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let fit = std::fs::read_to_string(out.join("a.fit.txt")).unwrap();
    let row = fit
        .lines()
        .find(|l| l.contains("request-rate_8/profile_export_aiperf.json") && l.contains("ttft_s"))
        .expect(&fit);
    assert!(row.contains("rate 8/s") && !row.contains("unknown"), "{row}");
    assert_eq!(row.split_whitespace().nth(4), Some("-"), "no concurrency for a rate run: {row}");
    assert!(
        fit.lines().any(|l| l.contains("concurrency_4/profile_export_aiperf.json") && l.contains("concurrency 4")),
        "{fit}"
    );
}

#[test]
fn item15_aiperf_lengths_and_counts_from_the_records_beside_it() {
    let src = fixture("aiperf/concurrency_4");
    let summary = read_json(&src.join("profile_export_aiperf.json"));
    let records = std::fs::read_to_string(src.join("profile_export.jsonl")).unwrap();
    let tmp = scratch("item15");
    let folder = |name: &str, summary: &Value, records: Option<&str>| {
        let d = tmp.join(name);
        std::fs::create_dir_all(&d).unwrap();
        write_json(&d.join("profile_export_aiperf.json"), summary);
        if let Some(r) = records {
            std::fs::write(d.join("profile_export.jsonl"), r).unwrap();
        }
        d.join("profile_export_aiperf.json")
    };
    // No input_sequence_length in the summary (it was refused): the records' lengths.
    let mut s = summary.clone();
    for k in ["input_sequence_length", "output_sequence_length"] {
        s.as_object_mut().unwrap().remove(k);
    }
    let run = read_file(&folder("item15-a", &s, Some(&records))).unwrap().remove(0);
    assert_eq!((run.input_tokens_mean, run.output_tokens_mean), (256.0, 32.0));
    // No records either: the token counts the server reported.
    let run = read_file(&folder("item15-b", &s, None)).unwrap().remove(0);
    assert_eq!((run.input_tokens_mean, run.output_tokens_mean), (256.0, 32.0));
    // Records whose sequence lengths are absent: their usage token counts.
    let usage_only: String = records
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let m = v["metrics"].as_object_mut().unwrap();
            m.remove("input_sequence_length");
            m.remove("output_sequence_length");
            m.remove("output_token_count");
            serde_json::to_string(&v).unwrap() + "\n"
        })
        .collect();
    let run = read_file(&folder("item15-c", &s, Some(&usage_only))).unwrap().remove(0);
    assert_eq!(run.per_request.len(), 16);
    assert_eq!(run.input_tokens_mean, 256.0);
    // Older AIPerf: `loadgen`, no request_count: the records are counted ("no request completed").
    let mut old = summary.clone();
    old["input_config"] = json!({"loadgen": {"concurrency": 4}, "model_names": ["m"]});
    old.as_object_mut().unwrap().remove("request_count");
    let run = read_file(&folder("item15-d", &old, Some(&records))).unwrap().remove(0);
    assert_eq!((run.completed, run.failed, run.requests), (16, 0, 16));
    assert_eq!(run.load, RunLoad::Concurrency { clients: 4 });
    // Nothing states the lengths: refused naming the key.
    let mut none = s.clone();
    for k in ["usage_prompt_tokens", "total_isl"] {
        none.as_object_mut().unwrap().remove(k);
    }
    let e = read_file(&folder("item15-e", &none, None)).unwrap_err().to_string();
    assert!(e.contains("input_sequence_length") && e.contains("usage_prompt_tokens"), "{e}");
    // A record's send time: negative, or a clock in another unit (seconds among nanoseconds, so the
    // run would span 1e9 x its length), refused at that record's line naming the key.
    let with_start = |line_no: usize, start: f64| -> String {
        records
            .lines()
            .enumerate()
            .map(|(i, l)| {
                let mut v: Value = serde_json::from_str(l).unwrap();
                if i + 1 == line_no {
                    v["metadata"]["request_start_ns"] = json!(start);
                }
                serde_json::to_string(&v).unwrap() + "\n"
            })
            .collect()
    };
    let e = read_file(&folder("item15-f", &summary, Some(&with_start(3, -5.0)))).unwrap_err().to_string();
    assert!(e.contains("line 3") && e.contains("request_start_ns") && e.contains("-5"), "{e}");
    let e = read_file(&folder("item15-g", &summary, Some(&with_start(5, 1e30)))).unwrap_err().to_string();
    assert!(e.contains("line 5") && e.contains("request_start_ns") && e.contains("nanoseconds"), "{e}");
}

/// A bad statistic is refused with the value the file wrote: `mean_ttft_ms: -5` said `got -0.005`
/// (capsim keeps TTFT in seconds) before.
#[test]
fn a_negative_statistic_is_refused_in_the_files_own_unit() {
    let tmp = scratch("neg-unit");
    let dir = tmp.path();
    let mut v = read_json(&fixture("vllm/detailed_c2.json"));
    v["mean_ttft_ms"] = json!(-5.0);
    let e = read_error(dir, "neg.json", &v);
    assert!(e.contains("mean_ttft_ms") && e.contains("got -5") && !e.contains("-0.005"), "{e}");
}

/// Audit of 2026-11-28: a vLLM result's `request_rate` is `inf` or a rate a replay can run (-inf was
/// replayed as a burst; 1e-300 printed 300 digits), and `burstiness` is in the range the workload
/// takes (1e308 was read, then refused by calibrate without its key); a file whose every listed
/// request failed, and totals below one token a request, are refused naming the key they are in; a
/// model_id that is not a string is named; a UTF-8 byte-order mark is read past (was "malformed
/// JSON at line 1 column 1").
#[test]
fn a_runs_rate_and_burstiness_are_bounded_naming_the_key() {
    let tmp = scratch("rate-bounds");
    let dir = tmp.path();
    let base = read_json(&fixture("vllm/detailed_c2.json"));
    for (key, x, shown) in [
        ("request_rate", json!("-inf"), "-inf"),
        ("request_rate", json!(-1.0), "-1"),
        ("request_rate", json!(0.0), "got 0"),
        ("request_rate", json!(1e-300), "1e-300"),
        ("request_rate", json!(1e7), "10000000"),
        ("burstiness", json!(1e308), "1e308"),
        ("burstiness", json!(0.0), "got 0"),
    ] {
        let mut v = base.clone();
        v[key] = x;
        if key == "burstiness" {
            v["request_rate"] = json!(4.0);
        }
        let e = read_error(dir, "vllm.json", &v);
        assert!(e.contains(&format!("`{key}`")) && e.contains(shown), "{key}: {e}");
    }
    // Every listed request failed: named as such (was blamed on a missing total_input_tokens).
    let mut v = base.clone();
    let n = v["output_lens"].as_array().unwrap().len();
    v["output_lens"] = json!(vec![0; n]);
    let e = read_error(dir, "vllm.json", &v);
    assert!(e.contains("`output_lens`") && e.contains("failed"), "{e}");
    // Totals without per-request lists: each named with the value the file states (was a derived
    // "input tokens" mean).
    for (key, x) in [("total_input_tokens", -10240.0), ("total_output_tokens", -1.0)] {
        let mut v = base.clone();
        for k in ["input_lens", "output_lens", "ttfts", "itls", "start_times", "errors", "generated_texts"] {
            v.as_object_mut().unwrap().remove(k);
        }
        v[key] = json!(x);
        let e = read_error(dir, "vllm.json", &v);
        assert!(e.contains(&format!("`{key}`")) && e.contains(&format!("got {x}")), "{key}: {e}");
    }
    // A model_id that is not a string is named as such (was "the files name no model").
    let mut v = base.clone();
    v["model_id"] = json!(5);
    let e = read_error(dir, "vllm.json", &v);
    assert!(e.contains("`model_id`") && e.contains("must be a string"), "{e}");
    // A UTF-8 byte-order mark before the JSON (Windows tools write one) is no content.
    let p = dir.join("bom.json");
    let mut bytes = b"\xEF\xBB\xBF".to_vec();
    bytes.extend(serde_json::to_vec(&base).unwrap());
    std::fs::write(&p, bytes).unwrap();
    read_file(&p).unwrap();
    // The tools' unlimited rate and an ordinary open loop still read.
    for rate in [json!("inf"), json!(4.0)] {
        let mut v = base.clone();
        v["request_rate"] = rate;
        let p = dir.join("ok.json");
        write_json(&p, &v);
        read_file(&p).unwrap();
    }
}
