//! Issue 16's reproducers: each exits cleanly and quickly, with the documented code and a message that
//! names its source.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::Scratch;

/// Run capsim; (exit code, stderr). Fails the test if it panics or takes more than 20 s.
fn capsim(args: &[&str]) -> (i32, String) {
    let start = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(start.elapsed() < Duration::from_secs(20), "{args:?} took {:?}", start.elapsed());
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    (o.status.code().unwrap_or(-1), err)
}

/// Exit code 2 and a message naming `needle` (a flag, field or the reason).
fn refused(args: &[&str], needle: &str) {
    let (code, err) = capsim(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?} should name `{needle}`: {err}");
}

#[test]
fn bad_numbers_are_refused_naming_the_input() {
    // Panics and overflows before issue 16.
    refused(
        &["simulate", "--concurrency", "1", "--requests", "4", "--input-len", "lognormal:100:1e160"],
        "--input-len",
    );
    refused(&["simulate", "--burst", "1", "--input-len", "4294967295", "--output-len", "10"], "--input-len");
    refused(&["simulate", "--max-num-seqs", "4294967295", "--burst", "1"], "`--max-num-seqs`");
    // Unbounded work.
    refused(&["sweep", "--burst", "1e300"], "burst");
    refused(&["simulate", "--concurrency", "1", "--requests", "4294967296"], "requests");
    refused(&["simulate", "--rate", "1", "--duration", "1e300"], "duration");
    refused(&["simulate", "--rate", "5", "--burstiness", "1e-300", "--duration", "10"], "burstiness");
    refused(&["simulate", "--concurrency", "1", "--requests", "2", "--think-time", "1e300"], "`--think-time`");
    refused(&["capacity", "--max-load", "4294967296", "--slo", "ttft_mean_s=2"], "--max-load");
    // Negative numbers are values to check, not unknown flags.
    refused(&["simulate", "--burst", "1", "--goodput-ttft-s", "-1"], "--goodput-ttft-s");
    refused(&["simulate", "--concurrency", "1", "--think-time", "-1"], "--think-time");
    // Nothing to measure.
    refused(&["simulate", "--concurrency", "2", "--requests", "0"], "requests");
    refused(&["simulate", "--concurrency", "2", "--requests", "5", "--warmup-requests", "5"], "`--warmup-requests`");
}

#[test]
fn answers_that_must_be_refusals() {
    // A model that does not fit one GPU: capacity refuses as simulate does.
    refused(&["capacity", "--model", "Qwen3-235B-A22B", "--max-load", "8", "--slo", "ttft_mean_s=2"], "does not fit");
    refused(&["simulate", "--model", "Qwen3-235B-A22B", "--burst", "1"], "does not fit");
    // Requests beyond the model's context.
    refused(&["simulate", "--burst", "1", "--input-len", "300000"], "context of 262144");
    refused(
        &["simulate", "--model", "Mistral-7B-Instruct-v0.3", "--burst", "1", "--input-len", "40000"],
        "context of 32768",
    );
    refused(&["capacity", "--input-len", "300000", "--slo", "ttft_mean_s=2"], "context");
    refused(&["validate", "--report", "999"], "no report starts with `999`");
    // Output paths are checked before any computation.
    refused(&["validate", "--markdown", "/nonexistent/x.md"], "/nonexistent");
    let tmp = Scratch::new("hardening");
    let file = tmp.join("capsim-hardening-a-file");
    std::fs::write(&file, "x").unwrap();
    refused(&["calibrate", "--out", file.to_str().unwrap()], "not a folder");
}

#[test]
fn drawn_requests_beyond_the_context_are_rejected_and_counted() {
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args([
            "simulate",
            "--model",
            "Mistral-7B-Instruct-v0.3",
            "--concurrency",
            "2",
            "--requests",
            "20",
            "--input-len",
            "uniform:30000:34000",
            "--output-len",
            "100",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (done, rejected) = (v["requests_completed"].as_u64().unwrap(), v["requests_rejected"].as_u64().unwrap());
    assert!(rejected > 0 && done + rejected == 20, "{done} + {rejected}");
}

#[test]
fn a_run_that_measures_nothing_prints_nulls_and_exits_3() {
    // Every request over the KV capacity: all rejected, nothing measured.
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["simulate", "--burst", "3", "--input-len", "100", "--kv-capacity-tokens", "64", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("warning: no request was measured"));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["ttft_s"]["mean"].is_null() && v["itl_ms"]["p99"].is_null(), "{}", v["ttft_s"]);
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["simulate", "--burst", "3", "--input-len", "100", "--kv-capacity-tokens", "64"])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    let ttft = table.lines().find(|l| l.starts_with("ttft_s")).unwrap();
    assert!(ttft.split_whitespace().skip(1).all(|c| c == "-"), "{ttft}");
}

#[test]
fn a_closed_pipe_ends_quietly() {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["simulate", "--concurrency", "2", "--requests", "10", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    assert!(!String::from_utf8_lossy(&o.stderr).contains("panicked"));
}

#[test]
fn lossy_input_is_refused_or_reported() {
    let tmp = Scratch::new("hardening");
    let dir = tmp.path();
    let dup = dir.join("capsim-hardening-dup.csv");
    std::fs::write(&dup, "arrival_s,input_tokens,output_tokens,input_tokens\n0,10,10,5\n").unwrap();
    refused(&["simulate", "--trace", dup.to_str().unwrap()], "column named twice");
    let zero = dir.join("capsim-hardening-zero.csv");
    std::fs::write(&zero, "arrival_s,input_tokens,output_tokens\n0,10,10\n1,0,5\n2,10,0\n3,10,10\n").unwrap();
    let (code, err) = capsim(&["simulate", "--trace", zero.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(err.contains("2 of 4 rows skipped"), "{err}");
}

#[test]
fn a_profile_file_wins_over_an_embedded_profile_of_the_same_name() {
    let tmp = Scratch::new("hardening-profile");
    let dir = tmp.path();
    // The embedded default profile with one setting changed, saved under the embedded file's name.
    let text = capsim::profile::BUILTIN_PROFILES[0].1.replacen("[engine]\n", "[engine]\nmax_num_seqs = 3\n", 1);
    let name = capsim::profile::BUILTIN_PROFILES[0].0;
    std::fs::write(dir.join(name), text).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["simulate", "--profile", name, "--burst", "2", "--json"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["scenario"]["engine"]["max_num_seqs"], 3);
}

#[test]
fn settings_dates_and_catalog_entries_out_of_range_are_refused() {
    let tmp = Scratch::new("hardening");
    let dir = tmp.path();
    refused(&["simulate", "--burst", "1", "--max-prefill-tokens", "0"], "`--max-prefill-tokens`");
    refused(&["capacity", "--target-rate", "5", "--slo", "ttft_mean_s=2", "--max-replicas", "0"], "--max-replicas");
    let big = dir.join("capsim-hardening-big.toml");
    let text = capsim::profile::BUILTIN_PROFILES[0].1;
    let line = text.lines().find(|l| l.starts_with("step_overhead_s")).unwrap();
    std::fs::write(&big, text.replacen(line, "step_overhead_s = 1e300", 1)).unwrap();
    refused(&["simulate", "--profile", big.to_str().unwrap(), "--burst", "1"], "coefficients.step_overhead_s");
    let azure = dir.join("capsim-hardening-azure.csv");
    std::fs::write(&azure, "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-45 99:99:99,10,10\n").unwrap();
    refused(&["simulate", "--trace", azure.to_str().unwrap()], "TIMESTAMP");
    let gpus = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/models/gpus.toml")).unwrap();
    let first = &gpus[gpus.find("[[gpu]]").unwrap()..];
    let first = &first[..first[7..].find("[[gpu]]").unwrap() + 7];
    let dup = dir.join("capsim-hardening-gpus.toml");
    std::fs::write(&dup, format!("{first}{first}")).unwrap();
    refused(&["simulate", "--gpus-file", dup.to_str().unwrap(), "--burst", "1"], "named twice");
}

#[test]
fn trace_times_keep_their_meaning() {
    let tmp = Scratch::new("hardening");
    let dir = tmp.path();
    // A date string in a Mooncake `timestamp` (a key whose numbers are milliseconds) is a date.
    let mc = dir.join("capsim-hardening-mooncake.jsonl");
    std::fs::write(
        &mc,
        "{\"timestamp\": \"2024-01-01 00:00:00\", \"input_length\": 10, \"output_length\": 5}\n{\"timestamp\": \"2024-01-01 00:00:02\", \"input_length\": 10, \"output_length\": 5}\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["simulate", "--trace", mc.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["sim_time_s"].as_f64().unwrap() > 2.0, "{}", v["sim_time_s"]);
    // Inline trace records are replayed in time order.
    let inline = dir.join("capsim-hardening-inline.toml");
    std::fs::write(
        &inline,
        "[arrivals]\nkind = \"trace\"\nrecords = [ { arrival_s = 5.0, input_tokens = 100, output_tokens = 10 }, { arrival_s = 0.0, input_tokens = 100, output_tokens = 10 } ]\n",
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["simulate", "--workload", inline.to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["requests_completed"], 2);
    assert!(v["ttft_s"]["p99"].as_f64().unwrap() < 1.0, "{}", v["ttft_s"]);
}

#[test]
fn a_json_key_given_twice_is_refused() {
    let tmp = Scratch::new("hardening");
    let dir = tmp.path();
    let cfg = dir.join("capsim-hardening-dup-config.json");
    std::fs::write(&cfg, "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"hidden_size\": 8192}").unwrap();
    refused(&["simulate", "--model", cfg.to_str().unwrap(), "--burst", "1"], "appears twice");
    let run =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/vllm/sweep/low/c1_in1024.json"))
            .unwrap();
    let dup = dir.join("capsim-hardening-dup-run.json");
    std::fs::write(&dup, run.replacen('{', "{\"duration\": 1.0, ", 1)).unwrap();
    refused(
        &["validate", "--runs", dup.to_str().unwrap(), "--profile", "qwen3-coder-30b-a3b-instruct-fp8_h200-sxm_vllm"],
        "appears twice",
    );
}

#[test]
fn capacity_answers_with_the_search_resolution_and_exit_3_without_an_answer() {
    let (code, err) = capsim(&["capacity", "--load", "burst", "--slo", "ttft_mean_s=0.001"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("warning: no load meets the SLO"), "{err}");
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args([
            "capacity",
            "--load",
            "rate",
            "--input-len",
            "2048",
            "--output-len",
            "256",
            "--slo",
            "ttft_p95_s=2.0",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // 1% rate tolerance: three significant digits, not 13.18359375.
    let c = v["capacity"].as_f64().unwrap();
    let digits = format!("{c}").chars().filter(|ch| ch.is_ascii_digit()).count();
    assert!(digits <= 3, "{c}");
}

#[test]
fn a_timestamp_column_means_milliseconds_in_csv_and_jsonl() {
    let csv =
        capsim::workload::trace::parse_csv("t.csv", "timestamp,input_length,output_length\n0,100,10\n1000,100,10\n")
            .unwrap();
    let jsonl = capsim::workload::trace::parse_jsonl(
        "t.jsonl",
        "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 10}\n{\"timestamp\": 1000, \"input_length\": 100, \"output_length\": 10}\n",
    )
    .unwrap();
    assert_eq!(csv.records, jsonl.records);
    assert_eq!(csv.records[1].arrival_s, 1.0);
    // A time of "nan" or "inf" (numbers to a parser) is refused on its line and key, as in CSV.
    for (t, line) in [("\"nan\"", "line 1"), ("\"inf\"", "line 1"), ("\"-inf\"", "line 1")] {
        let text = format!("{{\"timestamp\": {t}, \"input_length\": 100, \"output_length\": 10}}\n");
        let e = capsim::workload::trace::parse_jsonl("t.jsonl", &text).unwrap_err().to_string();
        assert!(
            e.contains("t.jsonl") && e.contains(line) && e.contains("`timestamp`") && e.contains("finite"),
            "{t}: {e}"
        );
    }
}

#[test]
fn a_trace_at_rate_scale_2_has_half_the_gaps_and_a_window_cuts_it() {
    let tmp = Scratch::new("hardening");
    let dir = tmp.path();
    let trace = dir.join("capsim-trace-scale.csv");
    std::fs::write(&trace, "arrival_s,input_tokens,output_tokens\n0,100,10\n2,100,10\n4,100,10\n6,100,10\n").unwrap();
    let arrivals = |extra: &[&str]| -> Vec<f64> {
        let out = dir.join("capsim-trace-scale-requests.csv");
        let mut args = vec!["simulate", "--trace", trace.to_str().unwrap(), "--per-request", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (code, err) = capsim(&args);
        assert_eq!(code, 0, "{err}");
        let text = std::fs::read_to_string(&out).unwrap();
        let mut a: Vec<f64> = text.lines().skip(1).map(|l| l.split(',').nth(4).unwrap().parse().unwrap()).collect();
        a.sort_by(f64::total_cmp);
        a
    };
    assert_eq!(arrivals(&[]), [0.0, 2.0, 4.0, 6.0]);
    assert_eq!(arrivals(&["--trace-rate-scale", "2"]), [0.0, 1.0, 2.0, 3.0]);
    assert_eq!(arrivals(&["--trace-window", "2:5"]), [0.0, 2.0]);
    refused(&["simulate", "--trace", trace.to_str().unwrap(), "--trace-window", "9:10"], "--trace-window");
}

/// capacity refuses a flag its mode would ignore, naming it (the audit of 2026-11-28): a fleet's
/// routing and price without --target-rate, a load search's bounds with it.
#[test]
fn capacity_refuses_flags_its_mode_ignores() {
    let base = ["capacity", "--slo", "ttft_p95_s=2", "--input-len", "512", "--output-len", "64"];
    for (extra, flag) in [
        (&["--routing", "least-outstanding"][..], "`--routing`"),
        (&["--gpu-price-per-hour", "3"][..], "`--gpu-price-per-hour`"),
        (&["--max-replicas", "8"][..], "`--max-replicas`"),
        (&["--target-rate", "5", "--max-load", "40"][..], "`--max-load`"),
        (&["--target-rate", "5", "--rate-tol", "0.1"][..], "`--rate-tol`"),
        (&["--target-rate", "5", "--seeds", "2"][..], "`--seeds`"),
        (&["--target-rate", "5", "--requests", "100", "--requests-per-replica", "50"][..], "`--requests-per-replica`"),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        refused(&args, flag);
    }
}
