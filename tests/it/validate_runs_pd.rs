//! `capsim validate --runs FILES` on a disaggregated prefill/decode deployment (`--prefill-*`,
//! `--decode-*`, `--pd-routing`, as simulate takes them): each run is replayed on both pools as its
//! load generator ran it, the very replay `capsim simulate` gives for that load (same seed, same
//! bytes), compared as the aggregated path compares it; the output names each pool, and bad or
//! meaningless flags are refused naming them.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

const SWEEP: &str = "vllm/sweep/high";
const MODEL: &str = "Qwen3-Coder-30B-A3B-Instruct";
/// One prefill worker of one H200, one decode worker of two.
const PD: &[&str] = &["--prefill-workers", "1", "--decode-workers", "1", "--decode-tp", "2"];

fn fixture(rel: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel).to_str().unwrap().to_string()
}

fn capsim(args: &[&str]) -> Output {
    let dir = crate::Scratch::new("validate-runs-pd");
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(dir.path()).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `validate --runs FIXTURE --model M --gpu "H200 SXM" ARGS... --json`, parsed.
fn validate(fix: &str, args: &[&str]) -> Value {
    let f = fixture(fix);
    let argv = [&["validate", "--runs", &f, "--model", MODEL, "--gpu", "H200 SXM"][..], args, &["--json"]].concat();
    let o = capsim(&argv);
    assert!(o.status.success(), "{argv:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn row<'a>(v: &'a Value, run: &str, metric: &str, stat: &str) -> &'a Value {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == run && r["metric"] == metric && r["stat"] == stat)
        .unwrap_or_else(|| panic!("no {run} {metric} {stat} row"))
}

fn predicted(v: &Value) -> Vec<f64> {
    v["rows"].as_array().unwrap().iter().map(|r| r["predicted"].as_f64().expect("a prediction")).collect()
}

#[test]
fn each_run_is_replayed_on_the_pools_as_simulate_runs_its_load() {
    let v = validate(SWEEP, PD);
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6);
    let p = predicted(&v);
    assert!(p.len() >= 100 && p.iter().all(|x| x.is_finite() && *x > 0.0), "{} rows", p.len());
    // The run at 128 clients of 1,024-token prompts, 384 requests, 253 output tokens on average, as
    // simulate runs that load on the same flags with the replay's seed and horizon.
    let run = runs.iter().find(|r| r["file"].as_str().unwrap().ends_with("c128_in1024.json")).unwrap();
    assert_eq!(run["load"], "concurrency 128");
    let (n, out) = (run["completed"].as_u64().unwrap(), run["output_tokens_mean"].as_f64().unwrap());
    assert_eq!(n, 384);
    let label = run["run"].as_str().unwrap();
    let (requests, output) = (n.to_string(), format!("{}", out.round() as u64));
    let sim = [
        &["simulate", "--model", MODEL, "--gpu", "H200 SXM"][..],
        PD,
        &["--concurrency", "128", "--requests", &requests, "--input-len", "1024", "--output-len", &output],
        &["--seed", "1", "--horizon", "1000000", "--json"],
    ]
    .concat();
    let o = capsim(&sim);
    assert!(o.status.success(), "{}", stderr(&o));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["requests_completed"], 384, "{}", s["requests_completed"]);
    for stat in ["mean", "p50", "p90", "p99"] {
        assert_eq!(
            row(&v, label, "ttft_s", stat)["predicted"].as_f64().unwrap(),
            s["ttft_s"][stat].as_f64().unwrap(),
            "TTFT {stat}: validate's replay against simulate's"
        );
    }
    assert_eq!(row(&v, label, "tpot_ms", "mean")["predicted"].as_f64(), s["tpot_ms"]["mean"].as_f64());
    // The replay is deterministic: the same command, the same bytes.
    let again = validate(SWEEP, PD);
    assert_eq!(again["rows"], v["rows"]);
    // Compared as the aggregated path compares: the error is the prediction's over the measurement.
    for r in v["rows"].as_array().unwrap() {
        let (m, x) = (r["measured"].as_f64().unwrap(), r["predicted"].as_f64().unwrap());
        assert!((r["error_pct"].as_f64().unwrap() - (x / m - 1.0) * 100.0).abs() < 1e-6, "{r}");
        assert_eq!(r["flagged"], false, "{r}");
        // The band holds the prediction (the profile states its uncertainty).
        let (lo, hi) = (r["band"][0].as_f64().unwrap(), r["band"][1].as_f64().unwrap());
        assert!(lo <= x && x <= hi && lo < hi, "{r}");
    }
}

#[test]
fn the_disaggregated_prediction_is_not_the_aggregated_one_and_says_so() {
    let agg = validate(SWEEP, &[]);
    let pd = validate(SWEEP, PD);
    // The same statistics of the same files, other predictions.
    let what = |v: &Value| -> Vec<(String, String, String, f64)> {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let s = |k: &str| r[k].as_str().unwrap().to_string();
                (s("run"), s("metric"), s("stat"), r["measured"].as_f64().unwrap())
            })
            .collect()
    };
    assert_eq!(what(&agg), what(&pd));
    let (a, b) = (predicted(&agg), predicted(&pd));
    let moved = a.iter().zip(&b).filter(|(x, y)| (*x / *y - 1.0).abs() > 0.01).count();
    assert!(moved * 2 > a.len(), "only {moved} of {} predictions moved by more than 1%", a.len());
    // Every key of the aggregated output is kept, `disaggregated` added: each pool's workers, TP, GPU.
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    let mut expected = keys(&agg);
    expected.push("disaggregated".into());
    expected.sort();
    assert_eq!(keys(&pd), expected);
    assert!(agg.get("disaggregated").is_none());
    let d = &pd["disaggregated"];
    for (pool, workers, tp) in [("prefill", 1, 1), ("decode", 1, 2)] {
        assert_eq!(d[pool]["workers"], workers, "{d}");
        assert_eq!(d[pool]["tensor_parallel"], tp, "{d}");
        assert_eq!(d[pool]["gpus_per_worker"], tp, "{d}");
        assert_eq!(d[pool]["gpu"], "H200 SXM", "{d}");
        assert_eq!(d[pool]["parallel"]["pipeline_parallel"], 1, "{d}");
    }
    assert_eq!(d["gpus"], 3);
    assert_eq!(d["routing"], "round-robin");
    // The deployment keys are the decode pool's, as simulate's profile is.
    assert_eq!(pd["tensor_parallel"], 2);
    assert_eq!(pd["extrapolation"], true, "the decode pool moved to TP2");
    // The text names the pools and their layout.
    let f = fixture(SWEEP);
    let o = capsim(&[&["validate", "--runs", &f, "--gpu", "H200 SXM"][..], PD].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "deployment: Qwen3-Coder-30B-A3B-Instruct disaggregated on 3 GPUs (round-robin routing",
        "  prefill pool: 1 worker on H200 SXM x1, KV capacity ",
        "  decode pool: 1 worker on H200 SXM x2, KV capacity ",
        "band: each prediction +-1 sigma: the runs replayed with both pools' profiles",
        "band (+-1 sigma)",
        "coverage: ",
    ] {
        assert!(t.contains(needle), "no `{needle}` in:\n{t}");
    }
    // --jsonl: the same rows, a line per run, each naming the deployment.
    let o =
        capsim(&[&["validate", "--runs", &f, "--model", MODEL, "--gpu", "H200 SXM"][..], PD, &["--jsonl"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let mut rows = Vec::new();
    for l in String::from_utf8(o.stdout).unwrap().lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["disaggregated"], pd["disaggregated"], "{l}");
        rows.extend(v["rows"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(Value::Array(rows), pd["rows"]);
}

#[test]
fn bad_or_meaningless_pool_flags_are_refused_naming_the_flag() {
    let f = fixture(SWEEP);
    let base: &[&str] = &["validate", "--runs", &f, "--gpu", "H200 SXM"];
    let cases: &[(&[&str], &str, &str)] = &[
        (&["--prefill-workers", "1"], "--decode-workers", "needs both --prefill-workers and --decode-workers"),
        (&["--decode-workers", "2"], "--prefill-workers", "needs both"),
        (&["--prefill-workers", "1", "--decode-workers", "0"], "--decode-workers", "must be in 1..="),
        (&["--prefill-workers", "99999", "--decode-workers", "1"], "--prefill-workers", "must be in 1..="),
        (&["--pd-routing", "least-outstanding"], "--prefill-workers", "needs both"),
        (&["--prefill-workers", "1", "--decode-workers", "1", "--prefill-tp", "0"], "--prefill-tp", "at least 1"),
        (&["--prefill-workers", "1", "--decode-workers", "1", "--decode-gpu", "H900"], "--decode-gpu", "unknown GPU"),
        // A flag both pools replace, or a router with nothing to pick: refused, not ignored.
        (
            &["--prefill-workers", "1", "--decode-workers", "1", "--prefill-gpu", "H100 SXM", "--decode-gpu", "B200"],
            "--gpu",
            "applies to neither",
        ),
        (
            &["--prefill-workers", "1", "--decode-workers", "1", "--tp", "2", "--prefill-tp", "1", "--decode-tp", "4"],
            "--tp",
            "applies to neither",
        ),
        (
            &["--prefill-workers", "1", "--decode-workers", "1", "--pd-routing", "least-outstanding"],
            "--pd-routing",
            "nothing to pick",
        ),
        // The reports' flags stay refused with pools.
        (&["--prefill-workers", "1", "--decode-workers", "1", "--protocol", "all"], "--protocol", "not to --runs"),
    ];
    for (extra, flag, why) in cases {
        let argv = [base, extra].concat();
        let o = capsim(&argv);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{argv:?}: {e}");
        assert!(e.contains(&format!("`{flag}`")) && e.contains(why) && !e.contains("panicked"), "{argv:?}: {e}");
    }
    // Without --gpu: both pools naming their GPUs is enough, one is not.
    let o =
        capsim(&["validate", "--runs", &f, "--prefill-workers", "1", "--decode-workers", "1", "--prefill-gpu", "B200"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("`--gpu`: required with --runs"), "{}", stderr(&o));
    let two = validate_no_gpu(&f);
    assert_eq!(two["disaggregated"]["prefill"]["gpu"], "H200 SXM");
    assert_eq!(two["disaggregated"]["decode"]["gpu"], "H100 SXM");
    // A pool whose workers hold no request: not a panic, each run said not replayed, and why.
    let o = capsim(&[
        "validate",
        "--runs",
        &fixture("vllm/sweep/high/c32_in8192.json"),
        "--gpu",
        "H200 SXM",
        "--prefill-workers",
        "1",
        "--decode-workers",
        "1",
        "--kv-capacity-tokens",
        "2000",
    ]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(3), "no answer: {}", stderr(&o));
    assert!(t.contains("not replayed: ") && t.contains("fits no worker of a pool (--kv-capacity-tokens)"), "{t}");
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

fn validate_no_gpu(f: &str) -> Value {
    let argv = [
        "validate",
        "--runs",
        f,
        "--prefill-workers",
        "1",
        "--decode-workers",
        "1",
        "--prefill-gpu",
        "H200 SXM",
        "--decode-gpu",
        "H100 SXM",
        "--json",
    ];
    let o = capsim(&argv);
    assert!(o.status.success(), "{argv:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}
