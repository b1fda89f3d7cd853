//! Issue 24 (hardening, third round): regression tests from its reproducers.
//!
//! Simulator items: 4 (quadratic time in a conversation's or a trace session's history), 5 (memory
//! inside the work bound: refused with the estimate and the limit, or run in what it uses), 10 (token
//! counts that wrapped in 32 bits).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Scratch;

/// Run capsim with `env`; (exit code, stdout, stderr). Fails the test if it panics, aborts or takes
/// more than `limit_s`.
fn capsim_env(args: &[&str], env: &[(&str, &str)], limit_s: u64) -> (i32, String, String) {
    let start = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string());
    assert!(start.elapsed() < Duration::from_secs(limit_s), "{args:?} took {:?}", start.elapsed());
    assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{args:?} crashed: {err}");
    (o.status.code().unwrap_or(-1), out, err)
}

fn capsim(args: &[&str]) -> (i32, String, String) {
    capsim_env(args, &[], 20)
}

/// Exit code 2 and a message naming every one of `needles`.
fn refused_env(args: &[&str], env: &[(&str, &str)], needles: &[&str]) -> String {
    let (code, _, err) = capsim_env(args, env, 20);
    assert_eq!(code, 2, "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?} should name `{n}`: {err}");
    }
    err
}

fn temp(dir: &Scratch, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// The value of a summary line of `simulate`'s table.
fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(key))
        .map(|l| l[key.len()..].trim())
        .unwrap_or_else(|| panic!("no `{key}` in {out}"))
}

// Item 4: each turn copied and hashed the whole history (80,000 turns: minutes). The history is
// hashed once as it grows, and a turn takes its previous turn's blocks back as one segment.
#[test]
fn a_conversation_of_80000_turns_runs_in_seconds() {
    let args = ["simulate", "--concurrency", "1", "--requests", "80000", "--turns", "80000", "--input-len", "1"];
    let (code, out, err) = capsim_env(&[&args[..], &["--output-len", "1"]].concat(), &[], 30);
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "requests completed / sent"), "80000 / 80000");
    // The history is all cached: every turn recomputes only its own tokens and the last one.
    assert_eq!(line(&out, "prefix cache hit rate"), "100.0% of prompt tokens");
}

#[test]
fn a_trace_of_40000_rows_in_one_session_runs_in_seconds() {
    let dir = Scratch::new("h3sim");
    // Each row re-sends the session so far and adds two tokens: the history grows to 80,000 tokens.
    let mut text = String::from("arrival_s,input_tokens,output_tokens,session_id\n");
    for i in 0..40_000u32 {
        text.push_str(&format!("{i}.0,{},1,chat-1\n", 2 * i + 1));
    }
    let trace = temp(&dir, "one-session.csv", &text);
    let (code, out, err) = capsim_env(&["simulate", "--trace", trace.to_str().unwrap()], &[], 30);
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "requests completed / sent"), "40000 / 40000");
    assert_eq!(line(&out, "prefix cache hit rate"), "100.0% of prompt tokens");
}

// Item 5: runs inside the work bound that cannot fit in memory are refused before they start, with
// the estimate and the limit; the limit is pinned here so the verdict does not depend on the machine.
#[test]
fn runs_beyond_the_machines_memory_are_refused_with_the_estimate() {
    let four = [("CAPSIM_MEMORY_GB", "4")];
    let err = refused_env(
        &["simulate", "--burst", "100000000"],
        &four,
        &["a burst of 100000000 requests", "limit of 4.0 GB"],
    );
    assert!(err.contains("needs about 37.6 GB"), "{err}");
    let err = refused_env(
        &["simulate", "--concurrency", "64", "--requests", "100000000"],
        &four,
        &["100000000 requests from 64 clients", "limit of 4.0 GB", "CAPSIM_MEMORY_GB"],
    );
    assert!(err.contains("needs about 7.2 GB"), "{err}");
    // Fleet sizing: the candidate fleet near 1e6 requests/s is refused once its size is known.
    refused_env(
        &[
            "capacity",
            "--target-rate",
            "1e6",
            "--max-replicas",
            "100000",
            "--slo",
            "ttft_p95_s=2",
            "--input-len",
            "128",
            "--output-len",
            "16",
            "--requests-per-replica",
            "1000",
        ],
        &four,
        &["a fleet of", "replicas needs about", "limit of 4.0 GB"],
    );
    // A closed loop bounded only by its duration: the most its clients can send in it.
    refused_env(&["simulate", "--concurrency", "1", "--duration", "1e9"], &four, &["requests from 1 clients", "limit"]);
    // A limit that is not a number is named.
    refused_env(&["simulate", "--burst", "1"], &[("CAPSIM_MEMORY_GB", "lots")], &["CAPSIM_MEMORY_GB", "lots"]);
    // What fits runs as before.
    let (code, _, err) = capsim_env(&["simulate", "--burst", "10"], &four, 20);
    assert_eq!(code, 0, "{err}");
}

/// Run under an address-space limit of `mb` (Linux: ulimit -v), so that memory sized by the KV
/// pool rather than by what the run uses aborts the test.
#[cfg(target_os = "linux")]
fn capsim_within(mb: u64, args: &[&str]) -> (i32, String, String) {
    let start = Instant::now();
    let cmd = format!("ulimit -v {} && exec \"$0\" \"$@\"", mb * 1024);
    let o = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .arg(env!("CARGO_BIN_EXE_capsim"))
        .args(args)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    let (out, err) = (String::from_utf8_lossy(&o.stdout).to_string(), String::from_utf8_lossy(&o.stderr).to_string());
    assert!(start.elapsed() < Duration::from_secs(20), "{args:?} took {:?}", start.elapsed());
    assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{args:?} crashed: {err}");
    (o.status.code().unwrap_or(-1), out, err)
}

#[cfg(target_os = "linux")]
#[test]
fn a_huge_kv_pool_with_prefix_caching_costs_what_the_run_uses() {
    let dir = Scratch::new("h3sim");
    // 2^64 - 1 tokens of KV: the prefix cache's block tables were allocated for every block.
    let conv = ["--concurrency", "4", "--requests", "200", "--turns", "5", "--json"];
    let (code, out, err) =
        capsim_within(2048, &[&["simulate", "--kv-capacity-tokens", "18446744073709551615"], &conv[..]].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests_completed"], 200);
    assert!(v["prefix_hit_rate"].as_f64().unwrap() > 0.5, "{}", v["prefix_hit_rate"]);
    // A GPU of a million GB: about 1e10 tokens of KV, 6e8 blocks (12 GB of block tables before).
    let gpus = temp(
        &dir,
        "huge-gpu.toml",
        r#"[[gpu]]
name = "Huge GPU"
family = "H200"
memory_gb = 1000000
hbm_bandwidth_tb_s = 4.8
bf16_tflops = 989
fp8_tflops = 1979
tdp_w = 700
source = "test"
link = "nvlink"
link_bw_gb_s = 450
link_domain_gpus = 8
pcie_bw_gb_s = 64
link_source = "test"
"#,
    );
    let (code, out, err) = capsim_within(
        2048,
        &[&["simulate", "--gpus-file", gpus.to_str().unwrap(), "--gpu", "Huge GPU"], &conv[..]].concat(),
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["requests_completed"], 200);
    assert!(v["kv_capacity"]["kv_capacity_tokens"].as_u64().unwrap() > 5_000_000_000);
    // Past the catalog's bounds (1e7 GB) a figure is a typo: 1e30 GB gave 2^64 - 1 tokens of KV.
    // An empty name is refused too.
    let text = std::fs::read_to_string(&gpus).unwrap();
    for (from, to, field) in
        [("memory_gb = 1000000", "memory_gb = 1e30", "memory_gb"), ("\"Huge GPU\"", "\" \"", "name")]
    {
        let bad = temp(&dir, &format!("bad-gpu-{field}.toml"), &text.replace(from, to));
        let e = capsim::catalog::gpu::parse_gpus(bad.to_str().unwrap(), &std::fs::read_to_string(&bad).unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("`{field}`")), "{field}: {e}");
    }
}

#[test]
fn the_memory_estimate_counts_what_a_run_holds() {
    use capsim::sim::memory_estimate;
    use capsim::workload::{Arrivals, Workload};
    let p = crate::default_profile();
    let burst = Workload::fixed(Arrivals::Burst { n: 1_000_000 }, 100, 10, None).unwrap();
    let closed = Workload::fixed(
        Arrivals::ClosedLoop { clients: 64, think_time_s: 0.0, think_exponential: false },
        100,
        10,
        Some(1_000_000),
    )
    .unwrap();
    let (b, c) = (memory_estimate(&p, &burst, 1), memory_estimate(&p, &closed, 1));
    assert_eq!((b.requests, b.in_flight, c.requests, c.in_flight), (1_000_000, 1_000_000, 1_000_000, 64));
    // Records (64 bytes and the summary's 8) for both; a burst holds every request at once besides.
    assert!((70_000_000..80_000_000).contains(&c.bytes()), "{c:?}");
    assert!(b.bytes() > 4 * c.bytes(), "{b:?}");
    // A fleet deals its sends ahead and merges its records.
    let fleet = memory_estimate(&p, &closed, 8);
    assert!(fleet.bytes() > c.bytes() + 100_000_000, "{fleet:?}");
}

// Item 10: 4,294,967,295 input tokens wrapped prompt + output to 9 tokens on a model of a 2^34
// context, and the run ended at its horizon with 21 of 101 requests done, exit 0.
#[test]
fn token_counts_beyond_the_bound_are_refused_naming_the_field() {
    let dir = Scratch::new("h3sim");
    let config = temp(
        &dir,
        "long-context.json",
        r#"{"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 17179869184, "intermediate_size": 1024, "torch_dtype": "bfloat16"}"#,
    );
    let mut text = String::from("arrival_s,input_tokens,output_tokens\n");
    for i in 0..101 {
        text.push_str(&format!("{}.0,{},10\n", i, if i == 20 { 4294967295u64 } else { 100 }));
    }
    let trace = temp(&dir, "huge-prompt.csv", &text);
    let args = [
        "simulate",
        "--model",
        config.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--kv-capacity-tokens",
        "100000000000",
    ];
    refused_env(&args, &[], &["huge-prompt.csv", "line 22", "`input_tokens`", "4294967295", "16777216"]);
    // The same bound for JSONL traces and outputs.
    let jsonl =
        temp(&dir, "huge-output.jsonl", "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 4294967295}\n");
    refused_env(&["simulate", "--trace", jsonl.to_str().unwrap()], &[], &["line 1", "`output_length`", "16777216"]);
    // Within the bound the same trace runs to the end.
    let ok = temp(&dir, "long-prompt.csv", &text.replace("4294967295", "16777216"));
    let (code, out, err) = capsim(&[
        "simulate",
        "--model",
        config.to_str().unwrap(),
        "--trace",
        ok.to_str().unwrap(),
        "--kv-capacity-tokens",
        "100000000000",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(line(&out, "requests completed / sent"), "101 / 101");
    // Records built in code are held to the bound too.
    let r = capsim::workload::TraceRecord {
        arrival_s: 0.0,
        input_tokens: u32::MAX,
        output_tokens: 1,
        hash_ids: vec![],
        session: None,
    };
    let e = capsim::workload::Workload::trace(vec![r], 0, 0).unwrap_err().to_string();
    assert!(e.contains("trace[0].input_tokens"), "{e}");
}

#[test]
fn a_run_that_leaves_requests_unfinished_says_so() {
    // Exit 0 (the completed requests' statistics are printed), with a warning naming the horizon.
    let (code, out, err) = capsim(&["simulate", "--rate", "1000", "--requests", "2000", "--horizon", "60"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("unfinished at horizon"), "{out}");
    assert!(err.contains("warning") && err.contains("--horizon") && err.contains("of 2000 requests"), "{err}");
    let (_, _, err) = capsim(&["simulate", "--rate", "1", "--requests", "20"]);
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn explain_counts_sequences_in_64_bits() {
    // --decode 4294967295 plus a prefill wrapped to 0 sequences, NaN tokens/s.
    refused_env(&["explain", "--decode", "4294967295", "--prefill", "1"], &[], &["--decode", "4294967296 sequences"]);
    refused_env(
        &[
            "explain",
            "--decode",
            "4294967295",
            "--prefill",
            "1",
            "--context",
            "0",
            "--kv-capacity-tokens",
            "1000000000000",
        ],
        &[],
        &["--decode", "4294967296 sequences"],
    );
    refused_env(&["explain", "--decode", "1", "--prefill", "4294967295"], &[], &["--prefill", "16777216"]);
    let (code, out, err) = capsim(&["explain", "--decode", "1024", "--context", "0"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("step: 1024 sequences, 1024 tokens"), "{out}");
    assert!(!out.contains("NaN"), "{out}");
}
