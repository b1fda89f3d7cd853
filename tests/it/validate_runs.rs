//! `capsim validate --runs FILES` on the deployment flags simulate takes (--gpu, --tp, --model,
//! --engine, ...), resolved by the one path (`ProfileArgs::resolve`): the rows move with the
//! deployment, the output says where the prediction comes from and carries its band, the JSON keeps
//! its keys, and flags that do not apply are refused.

use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The embedded default profile (what simulate runs without --profile).
const DEFAULT: &str = "qwen3-coder-30b-a3b-instruct-fp8_h200-sxm_vllm";

fn fixture(rel: &str) -> String {
    let p: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel);
    p.to_str().unwrap().to_string()
}

fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `validate --runs FIXTURE ARGS... --json`, parsed.
fn json(fix: &str, args: &[&str]) -> Value {
    let f = fixture(fix);
    let mut argv = vec!["validate", "--runs", f.as_str()];
    argv.extend_from_slice(args);
    argv.push("--json");
    let o = capsim(&argv);
    assert!(o.status.success(), "{argv:?}: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().unwrap_or_else(|| panic!("not an object: {v}")).keys().cloned().collect()
}

fn predicted(v: &Value) -> Vec<Option<f64>> {
    v["rows"].as_array().unwrap().iter().map(|r| r["predicted"].as_f64()).collect()
}

/// What each row compares (run, metric, statistic, measured value): the files', whatever the deployment.
fn measured(v: &Value) -> Vec<(String, String, String, f64)> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["run"].as_str().unwrap().to_string(),
                r["metric"].as_str().unwrap().to_string(),
                r["stat"].as_str().unwrap().to_string(),
                r["measured"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_gpu_flags_move_the_prediction_and_the_profile_flag_keeps_it() {
    let fix = "vllm/sweep/high";
    let by_profile = json(fix, &["--profile", DEFAULT]);
    // The default profile on its own GPU, through the deployment flags: the same deployment, the
    // same bytes of rows.
    let same = json(fix, &["--gpu", "H200 SXM"]);
    assert_eq!(by_profile["rows"], same["rows"]);
    assert_eq!(same["extrapolation"], false);
    // Moved to two H100 SXM: the same statistics, other predictions.
    let moved = json(fix, &["--gpu", "H100 SXM", "--tp", "2"]);
    assert_eq!(measured(&moved), measured(&by_profile));
    let (a, b) = (predicted(&by_profile), predicted(&moved));
    assert!(a.len() >= 100 && a.iter().chain(&b).all(Option::is_some), "{} rows", a.len());
    let differ = a.iter().zip(&b).filter(|(x, y)| (x.unwrap() / y.unwrap() - 1.0).abs() > 0.01).count();
    assert!(differ * 10 >= a.len() * 9, "only {differ} of {} predictions moved by more than 1%", a.len());
    // Where the prediction comes from.
    assert_eq!(moved["gpu"], "H100 SXM");
    assert_eq!(moved["tensor_parallel"], 2);
    assert_eq!(moved["extrapolation"], true);
    assert_eq!(moved["retargeted_from"], DEFAULT);
    assert!(moved["retarget_method"].as_str().unwrap().contains("shared hardware model"), "{moved}");
    assert!(moved["profile"].as_str().unwrap().contains("H100 SXM x2"), "{}", moved["profile"]);
    assert_eq!(by_profile["extrapolation"], false);
    assert_eq!(by_profile["gpu"], "H200 SXM");
    // The band: every prediction of the moved profile has one around it.
    for r in moved["rows"].as_array().unwrap() {
        let (lo, hi, p) =
            (r["band"][0].as_f64().unwrap(), r["band"][1].as_f64().unwrap(), r["predicted"].as_f64().unwrap());
        assert!(lo <= p && p <= hi && lo < hi, "{r}");
    }
    let cov = &moved["band_coverage"];
    assert_eq!(cov["statistics"].as_u64().unwrap() as usize, a.len());
}

#[test]
fn the_json_keeps_its_keys() {
    let fix = "guidellm/benchmarks.json";
    let by_profile = json(fix, &["--profile", DEFAULT]);
    let moved = json(fix, &["--gpu", "H100 SXM", "--tp", "2", "--engine", "vllm"]);
    // Today's keys, each still there with the deployment flags.
    for k in ["profile", "runs", "rows", "summary", "skipped", "band_coverage"] {
        assert!(moved.get(k).is_some(), "no {k}: {:?}", keys(&moved));
    }
    assert_eq!(keys(&moved["band_coverage"]), ["inside", "statistics"].map(String::from).into());
    let row_keys: BTreeSet<String> =
        ["file", "run", "load", "metric", "stat", "measured", "predicted", "error", "error_pct", "flagged", "band"]
            .map(String::from)
            .into();
    let run_keys: BTreeSet<String> = [
        "run",
        "file",
        "tool",
        "tool_version",
        "load",
        "requests",
        "completed",
        "failed",
        "input_tokens_mean",
        "output_tokens_mean",
        "not_compared",
    ]
    .map(String::from)
    .into();
    for v in [&by_profile, &moved] {
        assert_eq!(keys(v), keys(&by_profile), "one set of keys, however the deployment is named");
        for r in v["rows"].as_array().unwrap() {
            assert_eq!(keys(r), row_keys);
            // The protocols' `error_pct` and `flagged`, beside the fraction `error` kept for old readers.
            match r["error"].as_f64() {
                Some(e) => {
                    assert!((r["error_pct"].as_f64().unwrap() - 100.0 * e).abs() < 1e-9, "{r}");
                    assert_eq!(r["flagged"], false, "{r}");
                }
                None => assert_eq!(r["flagged"], true, "{r}"),
            }
        }
        for r in v["runs"].as_array().unwrap() {
            assert_eq!(keys(r), run_keys);
        }
        for c in v["summary"].as_array().unwrap() {
            assert_eq!(
                keys(c),
                ["class", "count", "median_abs_error", "p90_abs_error", "mean_error"].map(String::from).into()
            );
        }
    }
    // --jsonl: the same rows, one line per run, through the same deployment.
    let f = fixture(fix);
    let o = capsim(&["validate", "--runs", &f, "--gpu", "H100 SXM", "--tp", "2", "--engine", "vllm", "--jsonl"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let mut rows = Vec::new();
    for l in String::from_utf8(o.stdout).unwrap().lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["profile"], moved["profile"], "{l}");
        rows.extend(v["rows"].as_array().unwrap().iter().cloned());
    }
    assert_eq!(Value::Array(rows), moved["rows"]);
}

#[test]
fn the_text_says_where_the_prediction_comes_from() {
    let f = fixture("vllm/sweep/high");
    let o = capsim(&["validate", "--runs", &f, "--gpu", "H100 SXM", "--tp", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let t = String::from_utf8_lossy(&o.stdout);
    for needle in [
        &format!("[EXTRAPOLATION: retargeted from profile {DEFAULT}") as &str,
        "deployment: Qwen3-Coder-30B-A3B-Instruct on H100 SXM x2, vllm",
        &format!("provenance: moved from profile {DEFAULT}, itself calibrated on report 001"),
        "band: each prediction +-1 sigma",
        "band (+-1 sigma)",
        "coverage: ",
    ] {
        assert!(t.contains(needle), "no `{needle}` in:\n{t}");
    }
    // The model came from the files, and it is said.
    assert!(stderr(&o).contains("model from the files' model id `Qwen3-Coder-30B-A3B-Instruct`"), "{}", stderr(&o));
    // A calibrated profile on its own deployment: no extrapolation, its report.
    let o = capsim(&["validate", "--runs", &f, "--profile", DEFAULT]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("provenance: calibrated on report 001") && !t.contains("EXTRAPOLATION"), "{t}");
    // Another model: the learned step model's coefficients, said as such, not the moved profile's fit
    // (before: 'moved from profile ..., itself calibrated on report 001 (fit over 39 points ...)').
    let o = capsim(&["validate", "--runs", &f, "--gpu", "H100 SXM", "--model", "Llama-3.1-8B-Instruct"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("provenance: the step model learned across the corpus (models/learned.toml: "), "{t}");
    assert!(!t.contains("itself calibrated on report"), "{t}");
}

#[test]
fn every_tool_replays_on_the_flags_deployment() {
    for (fix, engine) in
        [("vllm/detailed_c2.json", "vllm"), ("sglang", "sglang"), ("guidellm", "vllm"), ("aiperf", "vllm")]
    {
        let v = json(fix, &["--gpu", "H100 SXM", "--tp", "2", "--engine", engine]);
        assert_eq!(v["gpu"], "H100 SXM", "{fix}");
        assert_eq!(v["engine"]["kind"], engine, "{fix}");
        let p = predicted(&v);
        assert!(!p.is_empty() && p.iter().all(Option::is_some), "{fix}: {p:?}");
    }
    // Another model than the files name: the shared hardware model's coefficients, and other numbers.
    let files = json("guidellm/benchmarks.json", &["--gpu", "H100 SXM"]);
    let llama = json("guidellm/benchmarks.json", &["--gpu", "H100 SXM", "--model", "Llama-3.1-8B-Instruct"]);
    assert_eq!(llama["model"], "Llama-3.1-8B-Instruct");
    assert_eq!(files["model"], "Qwen3-Coder-30B-A3B-Instruct");
    assert!(llama["retarget_method"].as_str().unwrap().starts_with("another model"), "{}", llama["retarget_method"]);
    assert_ne!(predicted(&files), predicted(&llama));
    // --profile with files of another model: kept, and said.
    let f = fixture("sglang");
    let o = capsim(&["validate", "--runs", &f, "--profile", "qwen3.5-35b-a3b-fp8_h100-sxm_vllm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("give --model to move the profile"), "{}", stderr(&o));
}

#[test]
fn bad_or_conflicting_flags_are_refused_naming_the_flag() {
    let f = fixture("vllm/detailed_c2.json");
    let runs: &[&str] = &["validate", "--runs", &f];
    let cases: &[(&[&str], &[&str])] = &[
        (&["--gpu", "H900"], &["--gpu", "unknown GPU `H900`"]),
        (&["--gpu", "H100 SXM", "--model", "no-such-model"], &["--model", "unknown model `no-such-model`"]),
        (&["--gpu", "H100 SXM", "--tp", "0"], &["--tp"]),
        (&["--gpu", "H100 SXM", "--precision", "fp3"], &["--precision"]),
        (&["--gpu", "H100 SXM", "--kv-dtype", "int2"], &["--kv-dtype"]),
        (&["--profile", "no-such-profile"], &["--profile", "unknown profile"]),
        // Nothing names the GPU the runs were measured on.
        (&[], &["--gpu", "required with --runs"]),
        (&["--model", "Qwen3-8B"], &["--gpu", "required with --runs"]),
        // The reports' flags mean nothing for a user's runs.
        (&["--gpu", "H100 SXM", "--protocol", "all"], &["--protocol", "not to --runs"]),
        (&["--profile", DEFAULT, "--protocol", "in-sample"], &["--protocol", "not to --runs"]),
        (&["--gpu", "H100 SXM", "--report", "001"], &["--report", "not to --runs"]),
        (&["--gpu", "H100 SXM", "--markdown", "v.md"], &["--markdown", "not to --runs"]),
        (&["--gpu", "H100 SXM", "--plots", "plots"], &["--plots", "not to --runs"]),
    ];
    for (extra, needles) in cases {
        let argv: Vec<&str> = runs.iter().chain(extra.iter()).copied().collect();
        let o = capsim(&argv);
        assert_eq!(o.status.code(), Some(2), "{argv:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(needles.iter().all(|n| e.contains(n)) && !e.contains("panicked"), "{argv:?}: {e}");
    }
    // Without --runs the reports' points run on their own deployments: a deployment flag other than
    // --profile is refused, not ignored.
    for (argv, flag) in [
        (&["validate", "--gpu", "H100 SXM"] as &[&str], "--gpu"),
        (&["validate", "--report", "001", "--tp", "2"], "--tp"),
        (&["validate", "--profile", DEFAULT, "--engine", "sglang"], "--engine"),
        (&["validate", "--max-num-seqs", "8", "--json"], "--max-num-seqs"),
    ] {
        let o = capsim(argv);
        assert_eq!(o.status.code(), Some(2), "{argv:?}: {}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains(flag) && e.contains("applies to --runs"), "{argv:?}: {e}");
    }
}

/// A closed-loop run whose file gives only mean lengths (`vllm bench serve --save-result` without
/// `--save-detailed`) is replayed with its clients drifting apart, as a real server's timing noise
/// makes them (workload::TIMING_NOISE_LENGTH_SPREAD). Replayed with every output exactly equal, the
/// simulated clients stay in lockstep and each round is a burst: on this real run (InferenceX,
/// DeepSeek-R1 FP8 on 8 x H200 under SGLang 0.5.9, 32 clients, 1,024 in / 1,024 out; the corpus copy,
/// with its length range taken out so that only the means are left) the lockstep replay put the
/// mean TTFT at 0.99 s against 0.34 s measured (+193%) and the median at 0.86 s against 0.16 s; the
/// drifting one at 0.25 s and 0.16 s.
#[test]
fn a_closed_loop_of_mean_lengths_is_not_replayed_in_lockstep() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("calibration/corpus/inferencex-dsr1/dsr1-fp8-h200-sglang-tp8-v0.5.9-cu130/1024x1024_c32_2026-03-25.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&src).unwrap()).unwrap();
    // As `vllm bench serve --save-result` writes it: counts and token totals (the lengths' means: the
    // client drew them uniformly in [0.8 L, L]), no length range.
    let n = v["num_prompts"].as_u64().unwrap();
    v["completed"] = n.into();
    v["total_input_tokens"] = (n as f64 * 921.6).into();
    v["total_output_tokens"] = (n as f64 * 921.6).into();
    v.as_object_mut().unwrap().remove("random_range_ratio");
    let dir = crate::Scratch::new("lockstep");
    let file = dir.join("c32.json");
    std::fs::write(&file, serde_json::to_string(&v).unwrap()).unwrap();
    let f = file.to_str().unwrap();
    let deployment =
        ["--model", "DeepSeek-R1", "--gpu", "H200 SXM", "--tp", "8", "--engine", "sglang", "--precision", "fp8"];
    let mut argv = vec!["validate", "--runs", f];
    argv.extend_from_slice(&deployment);
    argv.push("--json");
    let o = capsim(&argv);
    assert!(o.status.success(), "{}", stderr(&o));
    let out: Value = serde_json::from_slice(&o.stdout).unwrap();
    let ttft = |stat: &str| {
        out["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["metric"] == "ttft_s" && r["stat"] == stat)
            .unwrap_or_else(|| panic!("no ttft_s {stat} row"))
            .clone()
    };
    let (mean, p50) = (ttft("mean"), ttft("p50"));
    let measured = mean["measured"].as_f64().unwrap();
    let predicted = mean["predicted"].as_f64().unwrap();
    assert!((0.3..0.4).contains(&measured), "the file's mean TTFT: {measured}");
    assert!(predicted < 1.6 * measured, "mean TTFT {predicted} s against {measured} s measured: replayed in lockstep?");
    // In lockstep most requests of a round wait behind the same burst of prompts: the median is far
    // above the measured one, which is a single prompt's wait.
    let (a, m) = (p50["predicted"].as_f64().unwrap(), p50["measured"].as_f64().unwrap());
    assert!(a < 2.0 * m, "TTFT p50 {a} s against {m} s measured: the clients did not drift apart");
    // Its server streamed 10 tokens a chunk (--stream-interval 10 in InferenceX's launch script): the
    // ITL says so, and the output says which flag makes it comparable; given, the note goes.
    let notes = |v: &Value| -> Vec<String> {
        v["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect()
    };
    assert!(
        notes(&out)
            .iter()
            .any(|n| n.contains("about 10 tokens per streamed chunk") && n.contains("--stream-interval 10")),
        "{:?}",
        notes(&out)
    );
    let mut chunked = argv.clone();
    chunked.extend_from_slice(&["--stream-interval", "10"]);
    let o = capsim(&chunked);
    assert!(o.status.success(), "{}", stderr(&o));
    let with: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(notes(&with).iter().all(|n| !n.contains("per streamed chunk")), "{:?}", notes(&with));
    let itl = |v: &Value| {
        let r = v["rows"].as_array().unwrap().iter().find(|r| r["metric"] == "itl_ms" && r["stat"] == "mean").unwrap();
        r["error_pct"].as_f64().or_else(|| r["error"].as_f64().map(|e| e * 100.0)).unwrap()
    };
    assert!(itl(&out) < -80.0 && itl(&with).abs() < 40.0, "ITL error {} -> {}", itl(&out), itl(&with));
    // The same run simulated with every output exactly 922 tokens (`uniform:922:922`) is the lockstep
    // it avoids; `--output-len 922` drifts as the replay does.
    let sim = |output: &str| {
        let o = capsim(
            &[
                &["simulate"][..],
                &deployment,
                &["--concurrency", "32", "--input-len", "922", "--output-len", output, "--requests", "320", "--json"],
            ]
            .concat(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        v["ttft_s"]["mean"].as_f64().unwrap()
    };
    let (lockstep, drifting) = (sim("uniform:922:922"), sim("922"));
    assert!(lockstep > 2.0 * predicted, "lockstep mean TTFT {lockstep} s, the replay's {predicted} s");
    assert!(
        drifting < 1.6 * measured,
        "simulate --output-len 922: mean TTFT {drifting} s against {measured} s measured"
    );
}

/// A result file names its engine (SGLang's bench_serving: `backend` and `server_info`): without
/// --engine the runs replay under it, and its release, each said; --engine still wins.
#[test]
fn the_files_engine_is_taken_where_the_flags_name_none() {
    let v = json("sglang/bench_serving.jsonl", &["--gpu", "H200 SXM", "--tp", "2"]);
    assert_eq!(v["engine"]["kind"], "sglang");
    assert_eq!(v["engine"]["version"], "0.5.9");
    let notes: Vec<&str> = v["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(notes.iter().any(|n| n.starts_with("engine from the files")), "{notes:?}");
    let forced = json("sglang/bench_serving.jsonl", &["--gpu", "H200 SXM", "--tp", "2", "--engine", "vllm"]);
    assert_eq!(forced["engine"]["kind"], "vllm");
    // A tool that names no engine: the default profile's, said.
    let g = json("guidellm/benchmarks.json", &["--gpu", "H100 SXM"]);
    let notes: Vec<&str> = g["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(notes.iter().any(|n| n.contains("the files name none")), "{notes:?}");
    // The precision the files do not state is said, as calibrate --runs lists it in its assumptions.
    assert!(
        notes.iter().any(|n| n.starts_with("precision not given (--precision, --kv-dtype): weights fp8")),
        "{notes:?}"
    );
    let given = json("guidellm/benchmarks.json", &["--gpu", "H100 SXM", "--precision", "fp8", "--kv-dtype", "fp8"]);
    let notes: Vec<&str> = given["notes"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(!notes.iter().any(|n| n.starts_with("precision not given")), "{notes:?}");
}

/// The corpus's InferenceX point files (vllm bench serve's layout without the counts and token
/// totals InferenceX drops) replay as InferenceX's client ran them: 10 x concurrency requests,
/// lengths uniform in [int(0.8 L), L]; the deployment's metadata.json is skipped with its reason.
#[test]
fn inferencex_point_files_replay_as_their_client_ran() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("calibration/corpus/inferencex-dsr1/dsr1-fp8-h200-sglang-tp8-v0.5.11-cu130");
    let d = dir.to_str().unwrap();
    let o = capsim(&["validate", "--runs", d, "--gpu", "H200 SXM", "--tp", "8", "--precision", "fp8", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["engine"]["kind"], "sglang", "ix_framework sglang");
    let skipped: Vec<&str> = v["skipped"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(skipped.len() == 1 && skipped[0].contains("InferenceX deployment metadata"), "{skipped:?}");
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 6);
    for r in runs {
        let c: u64 = r["load"].as_str().unwrap().trim_start_matches("concurrency ").parse().unwrap();
        assert_eq!(r["requests"], 10 * c, "{r}");
        let isl: f64 = if r["run"].as_str().unwrap().contains("/8192x") { 8192.0 } else { 1024.0 };
        let lo = (0.8 * isl).floor();
        assert!((r["input_tokens_mean"].as_f64().unwrap() - (lo + isl) / 2.0).abs() < 1e-9, "{r}");
    }
    let p = predicted(&v);
    assert!(!p.is_empty() && p.iter().all(Option::is_some));
}

/// A layout other than the profile's (here two pipeline stages of the one-GPU default profile) is
/// an extrapolation, and the deployment line and JSON say the layout and the GPU count (they said
/// "x1" and `extrapolation: false`; the audit of 2026-11-28).
#[test]
fn a_layout_flag_is_an_extrapolation_and_shown() {
    let args = ["--gpu", "H200 SXM", "--pp", "2"];
    let v = json("vllm/sweep/high/c32_in1024.json", &args);
    assert_eq!(v["extrapolation"], true, "{}", v["retarget_method"]);
    assert_eq!(v["parallel"]["pipeline_parallel"], 2);
    assert!(v["retarget_method"].as_str().unwrap().contains("PP 2"), "{}", v["retarget_method"]);
    let f = fixture("vllm/sweep/high/c32_in1024.json");
    let o = capsim(&["validate", "--runs", &f, "--gpu", "H200 SXM", "--pp", "2"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("on H200 SXM x2 (2 pipeline stages of TP 1)"), "{out}{}", stderr(&o));
}
