//! cli::embed, the command line as a library call (the Python package's path): the captured output is
//! the binary's byte for byte, keys become the flags the CLI parses, errors name the key or flag.

use capsim::cli::embed::{self, Progress};
use capsim::error::Error;
use serde_json::{json, Map, Value};
use std::process::Command;

fn keys(v: Value) -> Map<String, Value> {
    v.as_object().expect("an object").clone()
}

fn binary(args: &[&str]) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn captured_json_is_the_binarys() {
    let k = keys(json!({"concurrency": 8, "input_len": "1024", "output-len": 256, "requests": 100, "seed": 3,
                        "json": true}));
    let c = embed::run_keys("simulate", &k, &Progress::default());
    c.result.unwrap();
    let expected = binary(&[
        "simulate",
        "--concurrency",
        "8",
        "--input-len",
        "1024",
        "--output-len",
        "256",
        "--requests",
        "100",
        "--seed",
        "3",
        "--json",
    ]);
    assert_eq!(c.stdout, expected);
    // A list is the flag's comma-separated values; a switch is true.
    let k = keys(json!({"concurrency": [1, 4], "requests": 20, "json": true, "expert_parallel": true}));
    let c = embed::run_keys("sweep", &k, &Progress::default());
    c.result.unwrap();
    assert_eq!(c.stdout, binary(&["sweep", "--concurrency", "1,4", "--requests", "20", "--json", "--expert-parallel"]));
}

#[test]
fn captured_errors_name_the_key_or_flag() {
    let run = |command: &str, v: Value| embed::run_keys(command, &keys(v), &Progress::default());
    let field = |r: Result<(), Error>| match r {
        Err(Error::Input { at, .. }) => at.field.unwrap_or_default(),
        other => panic!("not an input error: {other:?}"),
    };
    let c = run("simulate", json!({"concurrency": 1, "no_such_flag": 1}));
    assert_eq!(field(c.result), "no_such_flag");
    assert!(c.stdout.is_empty());
    assert_eq!(field(run("simulate", json!({"concurrency": "x"})).result), "--concurrency");
    assert_eq!(field(run("simulate", json!({"concurrency": 1, "input_len": "abc"})).result), "--input-len");
    assert_eq!(field(run("simulate", json!({"concurrency": 1, "expert_parallel": 2})).result), "expert_parallel");
    assert!(matches!(run("nope", json!({})).result, Err(Error::Unknown { .. })));
    // --help is output, captured.
    let c = run("simulate", json!({"help": true}));
    assert!(c.result.is_ok() && c.stdout.contains("--concurrency"));
}

#[test]
fn the_flag_table_is_the_clap_definition() {
    let flags = embed::flags("simulate").unwrap();
    let find = |k: &str| flags.as_array().unwrap().iter().find(|f| f["key"] == k).cloned().unwrap();
    assert_eq!(find("seed")["defaults"], json!(["0"]));
    assert_eq!(find("expert_parallel")["kind"], "switch");
    assert_eq!(find("engine")["values"], json!(["vllm", "sglang", "trtllm"]));
    let groups = embed::groups();
    assert!(groups["deployment"].as_array().unwrap().contains(&json!("gpu")));
    assert!(groups["workload"].as_array().unwrap().contains(&json!("input_len")));
    assert!(!groups["workload"].as_array().unwrap().contains(&json!("gpu")));
}

#[test]
fn deployments_and_workloads_resolve_alone() {
    let d = embed::resolve_deployment(&keys(json!({"gpu": "H100 SXM", "tp": 2}))).unwrap();
    assert_eq!(d["gpu"], "H100 SXM");
    assert_eq!(d["tensor_parallel"], 2);
    assert_eq!(d["extrapolation"], true);
    match embed::resolve_deployment(&keys(json!({"gpu": "H900"}))) {
        Err(Error::Input { at, .. }) => assert_eq!(at.field.as_deref(), Some("--gpu")),
        other => panic!("{other:?}"),
    }
    embed::check_workload(&keys(json!({"input_len": "lognormal:2000:800", "output_len": 64}))).unwrap();
    match embed::check_workload(&keys(json!({"input_len": "lognormal:x"}))) {
        Err(Error::Input { at, .. }) => assert_eq!(at.field.as_deref(), Some("--input-len")),
        other => panic!("{other:?}"),
    }
}
