//! Audit of the benchmark-file readers (src/measured), third pass: a vLLM result missing
//! `completed`, `num_prompts` or `request_rate` was "no reader recognizes this file"; negative or
//! impossible per-request times, per-request arrays of another length than the requests, and
//! latencies of 1e300 were read; a latency the tool always writes could be missing without a word;
//! a copy of a result file under another name was read as a second run.

use capsim::measured::{read_file, read_path, read_paths, Run};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::Scratch;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn write_json(p: &Path, v: &Value) {
    std::fs::write(p, serde_json::to_string(v).unwrap()).unwrap();
}

/// `v` without the keys `keys`.
fn without(v: &Value, keys: &[&str]) -> Value {
    let mut v = v.clone();
    for k in keys {
        v.as_object_mut().unwrap().remove(*k);
    }
    v
}

/// The error of reading `v` written to `dir/name`; it must name the file and `field` (as `field`).
fn refused(dir: &Path, name: &str, v: &Value, field: &str) -> String {
    let p = dir.join(name);
    write_json(&p, v);
    let e = read_file(&p).expect_err("must be refused").to_string();
    assert!(e.contains(name), "the error names the file: {e}");
    assert!(e.contains(&format!("`{field}`")), "the error names the field `{field}`: {e}");
    assert!(!e.contains("no reader recognizes"), "{e}");
    e
}

/// The single run of `v` written to `dir/name`.
fn read_one(dir: &Path, name: &str, v: &Value) -> Vec<Run> {
    let p = dir.join(name);
    write_json(&p, v);
    read_file(&p).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Run capsim; (exit code, stdout, stderr). Fails the test on a panic or past 60 s.
fn capsim(args: &[&str]) -> (i32, String, String) {
    crate::hardening3_readers::capsim_within(args, 60)
}

const VALIDATE: &[&str] = &["--gpu", "H200 SXM", "--model", "Qwen3-Coder-30B-A3B-Instruct", "--engine", "vllm"];

#[test]
fn a_result_missing_a_key_is_read_as_its_tool_and_the_key_named() {
    let tmp = Scratch::new("audit-missing");
    let dir = tmp.path();
    let vllm = read_json(&fixture("vllm/sweep/high/c32_in1024.json"));
    for key in ["completed", "num_prompts", "request_rate"] {
        let e = refused(dir, &format!("no_{key}.json"), &without(&vllm, &[key]), key);
        assert!(e.contains("missing") && e.contains("vllm bench serve"), "{key}: {e}");
    }
    // Two keys gone at once: still vLLM's layout, the first one missing named.
    let e = refused(dir, "two.json", &without(&vllm, &["completed", "num_prompts"]), "completed");
    assert!(e.contains("vllm bench serve"), "{e}");
    // The same for a detailed file and an SGLang line.
    let detailed = read_json(&fixture("vllm/detailed_c2.json"));
    refused(dir, "detailed.json", &without(&detailed, &["request_rate"]), "request_rate");
    let line = std::fs::read_to_string(fixture("sglang/bench_serving.jsonl")).unwrap();
    let sglang = capsim::measured::parse_json_lenient(line.lines().next().unwrap()).unwrap();
    let e = refused(dir, "sglang.json", &without(&sglang, &["completed"]), "completed");
    assert!(e.contains("sglang bench_serving"), "{e}");
    // AIPerf without its settings: named, not "no reader recognizes".
    let aiperf = read_json(&fixture("aiperf/concurrency_4/profile_export_aiperf.json"));
    let e = refused(dir, "aiperf.json", &without(&aiperf, &["input_config"]), "input_config");
    assert!(e.contains("missing"), "{e}");
    // What is no result at all still lists the formats tried.
    let p = dir.join("other.json");
    write_json(&p, &json!({"completed": 3, "hello": 1}));
    let e = read_file(&p).unwrap_err().to_string();
    assert!(e.contains("other.json") && e.contains("no reader recognizes"), "{e}");
    // The command line exits 2 with the same message.
    let p = dir.join("no_completed.json");
    let (code, _, err) = capsim(&[&["validate", "--runs", p.to_str().unwrap()], VALIDATE].concat());
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no_completed.json") && err.contains("`completed`: missing"), "{err}");
}

#[test]
fn per_request_arrays_hold_one_entry_a_request_and_sane_times() {
    let tmp = Scratch::new("audit-arrays");
    let dir = tmp.path();
    let base = read_json(&fixture("vllm/detailed_c2.json"));
    let with = |key: &str, x: Value| {
        let mut v = base.clone();
        v[key] = x;
        v
    };
    // A negative TTFT was counted as a failed request; 0.0 is vLLM's mark of one and still is.
    let e = refused(dir, "negttft.json", &with("ttfts", json!([0.112, -3.0, 0.0, 0.131])), "ttfts[1]");
    assert!(e.contains("got -3"), "{e}");
    refused(dir, "hugettft.json", &with("ttfts", json!([0.112, 1e300, 0.0, 0.131])), "ttfts[1]");
    assert_eq!(read_one(dir, "ok.json", &base)[0].failed, 1);
    // Arrays of another length than the others, or than the requests sent.
    let e = refused(dir, "long.json", &with("ttfts", json!([0.1, 0.1, 0.0, 0.1, 0.1, 0.1])), "ttfts");
    assert!(e.contains("has 6 entries, input_lens 4"), "{e}");
    let e = refused(dir, "short.json", &with("itls", json!([[0.01], [0.01]])), "itls");
    assert!(e.contains("has 2 entries, input_lens 4"), "{e}");
    let mut v = base.clone();
    for k in ["input_lens", "output_lens", "ttfts", "itls", "start_times", "errors", "generated_texts"] {
        let mut a = v[k].as_array().unwrap().clone();
        a.push(a[0].clone());
        v[k] = Value::Array(a);
    }
    let e = refused(dir, "five.json", &v, "input_lens");
    assert!(e.contains("has 5 entries, num_prompts 4"), "{e}");
    // Gaps, latencies, send times and errors are what they say.
    let mut itls = base["itls"].clone();
    itls[0][2] = json!(-0.5);
    refused(dir, "gap.json", &with("itls", itls), "itls[0][2]");
    refused(dir, "itl.json", &with("itls", json!([[0.01], 5, [], [0.01]])), "itls[1]");
    refused(dir, "lat.json", &with("latencies", json!([0.2, "nan", 0.0, 0.3])), "latencies[1]");
    refused(dir, "start.json", &with("start_times", json!([1000.0, "inf", 1000.2, 1000.3])), "start_times[1]");
    refused(dir, "err.json", &with("errors", json!(["", 7, "timeout", ""])), "errors[1]");
    // GuideLLM: a request's own times (its TTFT of -50 ms was read).
    let g = read_json(&fixture("guidellm/benchmarks.json"));
    for (k, x, shown) in [("time_to_first_token_ms", -50.0, "got -50"), ("request_latency", 1e300, "got 1e300")] {
        let mut v = g.clone();
        v["benchmarks"][0]["requests"]["successful"][0][k] = json!(x);
        let e = refused(dir, "guidellm.json", &v, &format!("benchmarks[0].requests.successful[0].{k}"));
        assert!(e.contains(shown), "{e}");
    }
}

#[test]
fn a_statistic_past_the_longest_run_is_refused_naming_its_key() {
    let tmp = Scratch::new("audit-huge");
    let dir = tmp.path();
    let vllm = read_json(&fixture("vllm/sweep/high/c32_in1024.json"));
    for (key, x) in [("mean_ttft_ms", 1e300), ("p99_e2el_ms", 1e13), ("median_itl_ms", f64::MAX)] {
        let mut v = vllm.clone();
        v[key] = json!(x);
        let e = refused(dir, "huge.json", &v, key);
        assert!(e.contains("at most 1e9 s"), "{key}: {e}");
    }
    let mut v = vllm.clone();
    v["request_throughput"] = json!(1e300);
    refused(dir, "rate.json", &v, "request_throughput");
    // A long latency that a run can have is still read.
    let mut v = vllm.clone();
    v["p99_e2el_ms"] = json!(3.6e6);
    read_one(dir, "hour.json", &v);
    let mut g = read_json(&fixture("guidellm/benchmarks.json"));
    g["benchmarks"][0]["metrics"]["time_to_first_token_ms"]["successful"]["mean"] = json!(1e300);
    refused(dir, "guidellm.json", &g, "time_to_first_token_ms.successful.mean");
    let mut a = read_json(&fixture("aiperf/concurrency_4/profile_export_aiperf.json"));
    a["time_to_first_token"]["avg"] = json!(1e300);
    refused(dir, "profile_export_aiperf.json", &a, "time_to_first_token.avg");
}

/// The notes that say a run lacks a latency, as the commands print them.
fn absent(r: &Run) -> Vec<&str> {
    r.absent_notes().collect()
}

#[test]
fn a_latency_the_tool_always_writes_is_said_when_absent() {
    let tmp = Scratch::new("audit-absent");
    let dir = tmp.path();
    // The fixtures lack none.
    let mut all: Vec<Run> = Vec::new();
    for f in ["vllm/sweep", "vllm/detailed_c2.json", "vllm/append.jsonl", "sglang", "guidellm", "aiperf"] {
        all.extend(read_path(&fixture(f)).unwrap().0);
    }
    for r in &all {
        assert!(absent(r).is_empty(), "{}: {:?}", r.label(), r.not_compared);
    }
    // vLLM: the mean alone, then every TTFT statistic.
    let vllm = read_json(&fixture("vllm/sweep/high/c32_in1024.json"));
    let r = read_one(dir, "no_mean.json", &without(&vllm, &["mean_ttft_ms"])).remove(0);
    assert!(absent(&r).iter().any(|n| n.starts_with("mean_ttft_ms (absent: TTFT compared at the file's p50")), "{r:?}");
    assert!(r.stats.iter().any(|s| s.metric == "ttft_s"));
    let ttft: Vec<&str> =
        vllm.as_object().unwrap().keys().filter(|k| k.contains("_ttft_")).map(String::as_str).collect();
    let r = read_one(dir, "no_ttft.json", &without(&vllm, &ttft)).remove(0);
    assert!(absent(&r).iter().any(|n| n.contains("the run carries no TTFT")), "{:?}", r.not_compared);
    assert!(r.stats.iter().all(|s| s.metric != "ttft_s"));
    // GuideLLM and AIPerf.
    let mut g = read_json(&fixture("guidellm/benchmarks.json"));
    g["benchmarks"][1]["metrics"].as_object_mut().unwrap().remove("time_to_first_token_ms");
    let runs = read_one(dir, "guidellm.json", &g);
    assert!(absent(&runs[0]).is_empty());
    assert!(
        absent(&runs[1]).iter().any(|n| n.starts_with("metrics.time_to_first_token_ms") && n.contains("no TTFT")),
        "{:?}",
        runs[1].not_compared
    );
    let a = read_json(&fixture("aiperf/concurrency_4/profile_export_aiperf.json"));
    let r = read_one(dir, "profile_export_aiperf.json", &without(&a, &["time_to_first_token"])).remove(0);
    assert!(absent(&r).iter().any(|n| n.starts_with("time_to_first_token") && n.contains("no TTFT")), "{r:?}");
    // validate --runs lists it under the run; calibrate --runs prints it and writes it in the fit report.
    let p = dir.join("no_ttft.json");
    let (code, out, err) = capsim(&[&["validate", "--runs", p.to_str().unwrap()], VALIDATE].concat());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("not compared:") && out.contains("the run carries no TTFT"), "{out}");
    let out_dir = dir.join("profiles");
    let (code, _, err) = capsim(
        &[
            &["calibrate", "--runs", p.to_str().unwrap(), "--name", "a", "--max-evals", "10"],
            &["--out", out_dir.to_str().unwrap()][..],
            VALIDATE,
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("no_ttft.json: mean_ttft_ms (absent") && err.contains("the run carries no TTFT"), "{err}");
    let fit = std::fs::read_to_string(out_dir.join("a.fit.txt")).unwrap();
    assert!(fit.contains("the run carries no TTFT"), "{fit}");
}

#[test]
fn identical_copies_of_a_result_count_once() {
    let tmp = Scratch::new("audit-copies");
    let dir = tmp.path();
    let (one, two) = (dir.join("one"), dir.join("two"));
    std::fs::create_dir_all(&one).unwrap();
    std::fs::create_dir_all(&two).unwrap();
    let c1 = fixture("vllm/sweep/low/c1_in1024.json");
    std::fs::copy(&c1, one.join("a.json")).unwrap();
    std::fs::copy(&c1, one.join("b.json")).unwrap();
    std::fs::copy(fixture("vllm/sweep/low/c2_in1024.json"), one.join("c.json")).unwrap();
    std::fs::copy(&c1, two.join("copy.json")).unwrap();
    // In one folder: the copy is skipped, naming both paths.
    let (runs, skipped) = read_path(&one).unwrap();
    assert_eq!(runs.len(), 2, "{skipped:?}");
    let said = skipped.join("\n");
    assert!(said.contains("b.json: the same content as") && said.contains("a.json"), "{said}");
    // Across folders and files named on their own; a folder holding only a copy is no error.
    let (runs, skipped) = read_paths(&[one.clone(), two.clone()]).unwrap();
    assert_eq!(runs.len(), 2, "{skipped:?}");
    assert!(skipped.iter().any(|s| s.contains("copy.json") && s.contains("a.json")), "{skipped:?}");
    let (runs, skipped) = read_paths(&[one.join("a.json"), two.join("copy.json")]).unwrap();
    assert_eq!(runs.len(), 1, "{skipped:?}");
    // AIPerf: the records beside a summary are part of its content.
    let (x, y, z) = (dir.join("x"), dir.join("y"), dir.join("z"));
    let records = std::fs::read_to_string(fixture("aiperf/concurrency_4/profile_export.jsonl")).unwrap();
    for (d, recs) in
        [(&x, records.clone()), (&y, records.lines().skip(1).map(|l| format!("{l}\n")).collect()), (&z, records)]
    {
        std::fs::create_dir_all(d).unwrap();
        std::fs::copy(fixture("aiperf/concurrency_4/profile_export_aiperf.json"), d.join("profile_export_aiperf.json"))
            .unwrap();
        std::fs::write(d.join("profile_export.jsonl"), recs).unwrap();
    }
    let (runs, skipped) = read_paths(&[x, y, z]).unwrap();
    assert_eq!(runs.len(), 2, "x and y differ in their records, z copies x: {skipped:?}");
    // The command line: one run, the copy said.
    let (code, out, err) =
        capsim(&[&["validate", "--runs", one.to_str().unwrap(), two.to_str().unwrap()], VALIDATE].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().filter(|l| l.starts_with("run ") && l.contains("requests sent")).count(), 2, "{out}");
    assert!(err.contains("skipped") && err.contains("copy.json: the same content as"), "{err}");
}
