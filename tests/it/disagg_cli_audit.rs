//! Audit of `capacity --disaggregated`'s wiring: a batch line with `"disaggregated": true` runs the
//! same P:D split search as the command line (it had run an aggregated fleet, and `batch --check`
//! called it valid), and every flag of plain capacity is either honoured by the split search
//! (--gpu-price-per-hour, --requests-per-replica, --pd-routing) or refused naming it (--routing,
//! --max-load, --rate-tol, --seeds, --shard), where all had given byte-identical output.

use serde_json::Value;
use std::process::{Command, Output};

fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap()
}

fn json_of(o: &Output) -> Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A split beyond 1:1 in a fraction of a second: the default profile, prefill workers of 2 GPUs,
/// decode workers of 1.
const SPLIT: &[&str] = &[
    "capacity",
    "--disaggregated",
    "--prefill-tp",
    "2",
    "--decode-tp",
    "1",
    "--target-rate",
    "40",
    "--slo",
    "ttft_p95_s=1",
    "--slo",
    "tpot_mean_ms=10",
    "--input-len",
    "2048",
    "--output-len",
    "128",
];

/// A cheaper question (one or two workers per pool) for the flags' checks.
const SMALL: &[&str] = &[
    "capacity",
    "--disaggregated",
    "--prefill-tp",
    "2",
    "--decode-tp",
    "1",
    "--target-rate",
    "8",
    "--slo",
    "ttft_p95_s=1",
    "--input-len",
    "1024",
    "--output-len",
    "64",
];

fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    [base, extra].concat()
}

/// The refusal of a command: exit 2, naming `flag`, and the stated reason.
fn refused(o: &Output, flag: &str, why: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{flag}: {err}");
    assert!(err.contains(&format!("`{flag}`")) && err.contains(why), "{flag} should be refused ({why}): {err}");
}

#[test]
fn a_batch_line_with_disaggregated_runs_the_split_search_of_the_command_line() {
    let dir = crate::Scratch::new("disagg-batch");
    let cli = json_of(&capsim(&with(SPLIT, &["--gpu-price-per-hour", "3", "--json"])));
    let best = &cli["disaggregated"]["best"];
    let (p, d) = (best["prefill_workers"].as_u64().unwrap(), best["decode_workers"].as_u64().unwrap());
    assert!(p + d > 2, "a split beyond 1:1: {best}");
    let path = dir.join("pd.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"command": "capacity", "disaggregated": true, "prefill_tp": 2, "decode_tp": 1, "target_rate": 40, "#,
            r#""slo": ["ttft_p95_s=1", "tpot_mean_ms=10"], "input_len": 2048, "output_len": 128, "gpu_price_per_hour": 3}"#,
            "\n"
        ),
    )
    .unwrap();
    let path = path.to_str().unwrap();
    let check = capsim(&["batch", "--check", path]);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let o = capsim(&["batch", path]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let line: Value = serde_json::from_slice(&o.stdout).unwrap();
    // The command's --json, byte for byte as a value: the same split, not an aggregated fleet.
    assert!(line["result"].get("fleet").is_none(), "{}", line["result"]);
    assert_eq!(line["result"], cli);
    assert_eq!(line["result"]["cost_per_hour"], 3.0 * best["gpus"].as_f64().unwrap());
}

/// `--gpu-price-per-hour` gives the cheapest split's cost under plain capacity's keys;
/// `--requests-per-replica` sets each split's run (N per worker); `--pd-routing` is the pools' router.
#[test]
fn the_split_search_honours_price_run_length_and_pd_routing() {
    let plain = json_of(&capsim(&with(SMALL, &["--json"])));
    assert_eq!(plain["cost_per_hour"], Value::Null);
    assert_eq!(plain["routing"], "round-robin");
    let priced = json_of(&capsim(&with(SMALL, &["--json", "--gpu-price-per-hour", "3"])));
    let gpus = priced["disaggregated"]["best"]["gpus"].as_f64().unwrap();
    let cost_h = priced["cost_per_hour"].as_f64().unwrap();
    assert_eq!(cost_h, 3.0 * gpus);
    let tok_s = priced["output_tok_s"].as_f64().unwrap();
    assert_eq!(tok_s, 8.0 * 64.0);
    let per_m = priced["cost_per_million_output_tokens"].as_f64().unwrap();
    assert!((per_m - cost_h / (tok_s * 3600.0 / 1e6)).abs() < 1e-9, "{per_m}");
    // The search itself is the same.
    assert_eq!(priced["disaggregated"], plain["disaggregated"]);
    let text = String::from_utf8(capsim(&with(SMALL, &["--gpu-price-per-hour", "3"])).stdout).unwrap();
    assert!(text.contains(&format!("cost {} per hour", capsim::report::num(cost_h, 4))), "{text}");

    let short = json_of(&capsim(&with(SMALL, &["--json", "--requests-per-replica", "100"])));
    assert_eq!(short["requests_per_replica"], 100);
    for c in short["disaggregated"]["tried"].as_array().unwrap() {
        let workers = c["prefill_workers"].as_u64().unwrap() + c["decode_workers"].as_u64().unwrap();
        assert_eq!(c["run_requests"].as_u64(), Some(100 * workers), "{c}");
    }
    assert_ne!(short["disaggregated"], plain["disaggregated"]);

    let lo = json_of(&capsim(&with(SMALL, &["--json", "--pd-routing", "least-outstanding"])));
    assert_eq!(lo["routing"], "least-outstanding");
}

/// Flags the split search has no use for are refused, naming them, on the command line and in a
/// batch line alike; --requests-per-replica is checked as plain capacity checks it.
#[test]
fn flags_the_split_search_cannot_use_are_refused_by_name() {
    for (extra, flag, why) in [
        (&["--routing", "least-outstanding"][..], "--routing", "--pd-routing"),
        (&["--max-load", "3"][..], "--max-load", "not with --disaggregated"),
        (&["--rate-tol", "0.3"][..], "--rate-tol", "not with --disaggregated"),
        (&["--seeds", "2"][..], "--seeds", "not with --disaggregated"),
        (&["--shard", "0/2"][..], "--shard", "not with --disaggregated"),
        (&["--requests-per-replica", "0"][..], "--requests-per-replica", "must be in 1..=1000000, got 0"),
        (&["--requests-per-replica", "50", "--requests", "100"][..], "--requests-per-replica", "--requests"),
        (&["--gpu-price-per-hour", "-1"][..], "--gpu-price-per-hour", "non-negative"),
    ] {
        refused(&capsim(&with(SMALL, extra)), flag, why);
    }
    // Plain capacity refuses a run of 0 requests per replica the same way.
    let plain = ["capacity", "--target-rate", "5", "--slo", "ttft_p95_s=1", "--input-len", "512", "--output-len", "32"];
    refused(&capsim(&with(&plain, &["--requests-per-replica", "0"])), "--requests-per-replica", "1..=1000000");

    let dir = crate::Scratch::new("disagg-batch-refused");
    let head = r#"{"command": "capacity", "disaggregated": true, "target_rate": 8, "slo": "ttft_p95_s=1", "input_len": 1024, "output_len": 64"#;
    for (key, value, flag) in [
        ("routing", "\"least-outstanding\"", "--routing"),
        ("rate_tol", "0.3", "--rate-tol"),
        ("requests_per_replica", "0", "--requests-per-replica"),
    ] {
        let path = dir.join(format!("{key}.jsonl"));
        std::fs::write(&path, format!("{head}, \"{key}\": {value}}}\n")).unwrap();
        let o = capsim(&["batch", "--check", path.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{key}: {err}");
        assert!(err.contains("line 1") && err.contains(flag), "{key}: {err}");
    }
}

/// --routing and --rate-tol, now unset unless given, keep their defaults and values in plain capacity.
#[test]
fn plain_capacity_keeps_routing_and_rate_tol() {
    let fleet = ["capacity", "--target-rate", "5", "--slo", "ttft_p95_s=1", "--input-len", "512", "--output-len", "32"];
    let v = json_of(&capsim(&with(&fleet, &["--json"])));
    assert_eq!(v["fleet"][0]["routing"], "round-robin");
    let v = json_of(&capsim(&with(&fleet, &["--json", "--routing", "least-outstanding"])));
    assert_eq!(v["fleet"][0]["routing"], "least-outstanding");
    let o = capsim(&[
        "capacity",
        "--load",
        "rate",
        "--slo",
        "ttft_p95_s=1",
        "--input-len",
        "512",
        "--output-len",
        "32",
        "--max-load",
        "20",
        "--rate-tol",
        "0.7",
    ]);
    refused(&o, "--rate-tol", "must be in");
}
