//! Issue 24 (hardening, third round): regression tests from its reproducers, `calibrate --runs` and
//! `validate --runs`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Scratch;

/// Run capsim; (exit code, stdout, stderr). Fails the test if it panics or takes more than 30 s.
fn capsim(args: &[&str]) -> (i32, String, String) {
    let start = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(start.elapsed() < Duration::from_secs(30), "{args:?} took {:?}", start.elapsed());
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).to_string(), err)
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}

/// A copy of a fixture run with some keys set: the user's edited file.
fn edited_run(dir: &Path, fixture_rel: &str, name: &str, set: &[(&str, f64)]) -> PathBuf {
    let text = std::fs::read_to_string(fixture(fixture_rel)).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (k, x) in set {
        v[*k] = serde_json::json!(x);
    }
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
    p
}

/// `calibrate --runs` with the H200 deployment of the fixtures and a small budget, plus `extra`.
fn calibrate_runs(runs: &Path, out: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args =
        vec!["calibrate", "--runs", runs.to_str().unwrap(), "--gpu", "H200 SXM", "--engine", "vllm", "--name", "mine"];
    args.extend(["--out", out.to_str().unwrap(), "--max-evals", "20"]);
    args.extend(extra);
    capsim(&args)
}

/// Item 2: a stated `--max-num-seqs` at or above the runs' highest concurrency, and any cap under
/// rate-only runs (which are not a concurrency of 1: an open loop can queue without bound), panicked
/// with "at least one variant". The stated cap is a fact of the deployment: it is fitted with and
/// written into the profile.
#[test]
fn a_stated_max_num_seqs_is_fitted_not_dropped() {
    let scratch = Scratch::new("h3cal-cap");
    let out = scratch.path();
    // Closed-loop sweep up to concurrency 16, cap 256.
    let (code, _, err) = calibrate_runs(&fixture("vllm/sweep/low"), out, &["--max-num-seqs", "256"]);
    assert_eq!(code, 0, "{err}");
    let toml = std::fs::read_to_string(out.join("mine.toml")).unwrap();
    assert!(toml.contains("max_num_seqs = 256"), "{toml}");
    // Open-loop (Poisson rate) runs only, a cap below and above anything: both fitted.
    for cap in ["4", "1024"] {
        let (code, _, err) =
            calibrate_runs(&fixture("guidellm/benchmarks_poisson.json"), out, &["--max-num-seqs", cap]);
        assert_eq!(code, 0, "cap {cap}: {err}");
        let toml = std::fs::read_to_string(out.join("mine.toml")).unwrap();
        assert!(toml.contains(&format!("max_num_seqs = {cap}")), "{toml}");
    }
}

/// Item 8: runs the fit cannot replay (lengths over the model's context) wrote a profile of NaN
/// residuals and a median error of 1e9%, exit 0; a statistic measured as 0 made calibrate fail on
/// the profile's internal `covariance.matrix` and validate print `+inf%`.
#[test]
fn runs_that_cannot_be_replayed_or_compared_are_refused_or_said() {
    // Lengths that cannot fit: refused before any profile, naming each run, its file and why.
    let scratch = Scratch::new("h3cal-long");
    let dir = scratch.path();
    let runs = dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    edited_run(&runs, "vllm/sweep/low/c1_in1024.json", "c1.json", &[("total_input_tokens", 16.0 * 300000.0)]);
    edited_run(&runs, "vllm/sweep/low/c4_in1024.json", "c4.json", &[("total_input_tokens", 16.0 * 300000.0)]);
    let out = dir.join("out");
    let (code, _, err) = calibrate_runs(&runs, &out, &[]);
    assert_eq!(code, 2, "{err}");
    for needle in ["2 of 2 run(s) cannot be replayed", "c1.json", "c4.json", "context of 262144", "no profile written"]
    {
        assert!(err.contains(needle), "should name `{needle}`: {err}");
    }
    assert!(!out.join("mine.toml").exists() && !out.join("mine.fit.txt").exists());

    // One run replays, the other cannot: still refused, naming only the one.
    std::fs::copy(fixture("vllm/sweep/low/c1_in1024.json"), runs.join("c1.json")).unwrap();
    let (code, _, err) = calibrate_runs(&runs, &out, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("1 of 2 run(s)") && err.contains("c4.json") && !err.contains("c1.json"), "{err}");

    // A statistic measured as 0: not compared (said in the fit report), the rest fitted, and the
    // profile loads again.
    let zero = dir.join("zero");
    std::fs::create_dir_all(&zero).unwrap();
    edited_run(&zero, "vllm/sweep/low/c1_in1024.json", "c1.json", &[("mean_ttft_ms", 0.0)]);
    std::fs::copy(fixture("vllm/sweep/low/c4_in1024.json"), zero.join("c4.json")).unwrap();
    let (code, stdout, err) = calibrate_runs(&zero, &out, &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("covariance") && !stdout.contains("inf%") && !stdout.contains("NaN"), "{stdout}{err}");
    let fit = std::fs::read_to_string(out.join("mine.fit.txt")).unwrap();
    assert!(fit.contains("not compared (1)") && fit.contains("mean_ttft_ms = 0"), "{fit}");
    let profile = out.join("mine.toml");
    let (code, stdout, err) =
        capsim(&["validate", "--runs", zero.to_str().unwrap(), "--profile", profile.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(!stdout.contains("inf%") && !stdout.contains("NaN"), "{stdout}");
    assert!(stdout.contains("n/a (measured 0)") && stdout.contains("not compared (1 statistic(s)"), "{stdout}");
    let (_, stdout, _) =
        capsim(&["validate", "--runs", zero.to_str().unwrap(), "--profile", profile.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let zero_rows: Vec<&serde_json::Value> =
        v["rows"].as_array().unwrap().iter().filter(|r| r["measured"] == 0.0).collect();
    assert_eq!(zero_rows.len(), 1);
    assert!(zero_rows[0]["error"].is_null());
    let said = v["not_comparable"]["statistics"].as_array().unwrap();
    assert!(said.len() == 1 && said[0].as_str().unwrap().ends_with("ttft_s mean"), "{said:?}");
    assert!(v["not_comparable"]["why"].as_str().unwrap().contains("measured as 0"));

    // Every statistic 0: nothing comparable, refused naming them.
    let none = dir.join("none");
    std::fs::create_dir_all(&none).unwrap();
    let text = std::fs::read_to_string(fixture("vllm/sweep/low/c1_in1024.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (k, x) in v.as_object_mut().unwrap().iter_mut() {
        if x.is_number() && (k.contains("_ms") || k.contains("throughput")) {
            *x = serde_json::json!(0.0);
        }
    }
    std::fs::write(none.join("c1.json"), v.to_string()).unwrap();
    let out2 = dir.join("out2");
    let (code, _, err) = calibrate_runs(&none, &out2, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nothing to compare") && err.contains("mean_ttft_ms = 0"), "{err}");
    assert!(!out2.join("mine.toml").exists());
}

/// Audit: runs of two models (or of one checkpoint at two precisions) in one folder were fitted, or
/// validated, as the first file's model; a `--model` or `--precision` that contradicts the files was
/// taken as said. Refused naming each model and a file of it, or the flag.
#[test]
fn runs_of_two_models_or_against_the_flags_are_refused() {
    let scratch = Scratch::new("h3cal-mixed");
    let dir = scratch.path();
    let out = dir.join("out");
    let two_models = dir.join("two_models");
    std::fs::create_dir_all(&two_models).unwrap();
    std::fs::copy(fixture("vllm/sweep/low/c1_in1024.json"), two_models.join("c1.json")).unwrap();
    std::fs::copy(fixture("sglang/bench_serving.jsonl"), two_models.join("sglang.jsonl")).unwrap();
    let two_precisions = dir.join("two_precisions");
    std::fs::create_dir_all(&two_precisions).unwrap();
    std::fs::copy(fixture("vllm/sweep/low/c1_in1024.json"), two_precisions.join("c1.json")).unwrap();
    std::fs::copy(fixture("vllm/detailed_c2.json"), two_precisions.join("fp8.json")).unwrap();
    for (runs, a, b) in [
        (&two_models, "Qwen3-Coder-30B-A3B-Instruct", "Qwen/Qwen3-Coder-Next-FP8"),
        (&two_precisions, "Qwen3-Coder-30B-A3B-Instruct", "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8"),
    ] {
        let (code, _, err) = calibrate_runs(runs, &out, &[]);
        assert_eq!(code, 2, "{err}");
        for needle in ["--runs", "2 different models", &format!("`{a}`"), &format!("`{b}`")] {
            assert!(err.contains(needle), "should name {needle}: {err}");
        }
        assert!(!out.join("mine.toml").exists());
        let (code, _, err) = capsim(&["validate", "--runs", runs.to_str().unwrap(), "--gpu", "H200 SXM"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("2 different models"), "{err}");
    }
    // Flags against the files: another model, another precision than the FP8 checkpoint's.
    let low = fixture("vllm/sweep/low");
    let (code, _, err) = calibrate_runs(&low, &out, &["--model", "Mistral-7B-Instruct-v0.3"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--model") && err.contains("contradicts the files"), "{err}");
    let (code, _, err) = calibrate_runs(&fixture("vllm/detailed_c2.json"), &out, &["--precision", "bf16"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--precision") && err.contains("FP8 checkpoint"), "{err}");
    // The same model under its catalog name and as the files name it: accepted.
    let (code, _, err) = calibrate_runs(&low, &out, &["--model", "Qwen3-Coder-30B-A3B-Instruct"]);
    assert_eq!(code, 0, "{err}");
    // validate replays on the --model it is given, and says that the files measured another.
    let (code, _, err) =
        capsim(&["validate", "--runs", low.to_str().unwrap(), "--gpu", "H200 SXM", "--model", "Qwen3-8B"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("not the model the files measured"), "{err}");
}

/// Audit: `validate --runs` of runs it cannot replay printed a column of dashes and an empty summary,
/// exit 0. Each run is named with why, and with nothing compared the exit code is 3 (no answer).
#[test]
fn validate_says_why_runs_are_not_replayed() {
    let scratch = Scratch::new("h3cal-vlong");
    let dir = scratch.path();
    edited_run(dir, "vllm/sweep/low/c1_in1024.json", "c1.json", &[("total_input_tokens", 16.0 * 300000.0)]);
    let (code, stdout, err) = capsim(&["validate", "--runs", dir.to_str().unwrap(), "--gpu", "H200 SXM"]);
    assert_eq!(code, 3, "{err}");
    assert!(stdout.contains("not replayed: ") && stdout.contains("c1.json") && stdout.contains("context of 262144"));
    assert!(err.contains("no statistic of the 1 run(s) could be compared"), "{err}");
    // One run that replays beside it: compared, exit 0, the other still named.
    std::fs::copy(fixture("vllm/sweep/low/c2_in1024.json"), dir.join("c2.json")).unwrap();
    let (code, stdout, err) = capsim(&["validate", "--runs", dir.to_str().unwrap(), "--gpu", "H200 SXM", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let nr = v["not_replayed"].as_array().unwrap();
    assert!(nr.len() == 1 && nr[0].as_str().unwrap().contains("c1.json"), "{nr:?}");
}

/// Audit: a deployment flag the fitted profile cannot take was refused naming the profile's internal
/// key (`x, field engine.max_num_seqs`, `gpu.tensor_parallel`), and `--name .` wrote hidden `..toml`
/// files. Named by the flag; nothing written, no folder left behind.
#[test]
fn calibrate_names_the_flag_not_the_profile_key() {
    let scratch = Scratch::new("h3cal-flags");
    let dir = scratch.path();
    let out = dir.join("out");
    let low = fixture("vllm/sweep/low");
    for (extra, flag) in [
        (&["--max-num-seqs", "0"][..], "field `--max-num-seqs`"),
        (&["--tp", "3"][..], "field `--tp`"),
        (&["--gpu-memory-utilization", "1.5"][..], "field `--gpu-memory-utilization`"),
    ] {
        let (code, _, err) = calibrate_runs(&low, &out, extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(flag) && !err.contains("engine.") && !err.contains("gpu.tensor"), "{extra:?}: {err}");
        assert!(!out.exists(), "{extra:?} left {out:?}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["calibrate", "--runs", low.to_str().unwrap(), "--gpu", "H200 SXM", "--name", "."])
        .args(["--out", out.to_str().unwrap(), "--max-evals", "20"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--name"));
    assert!(!out.join("..toml").exists());
}

/// Without --runs, calibrate fits the reports' (or, with --corpus, the corpus's) own deployments: a
/// deployment flag would be dropped, so it is refused naming it, before any fit runs.
#[test]
fn deployment_flags_without_runs_are_refused_naming_them() {
    let scratch = Scratch::new("h3cal-noruns");
    let out = scratch.path();
    let o = out.to_str().unwrap();
    for (args, flag) in [
        (vec!["calibrate", "--attention-dp", "2", "--out", o], "--attention-dp"),
        (vec!["calibrate", "--gpu", "H100 SXM", "--out", o], "--gpu"),
        (vec!["calibrate", "--corpus", "--tp", "4", "--out", o], "--tp"),
    ] {
        let (code, _, err) = capsim(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains("names the deployment of --runs"), "{err}");
    }
}
