//! Issue 24 (hardening, third round): regression tests from its reproducers (the CLI's items 1, 3, 7
//! and 11), and fuzz targets for the files `capsim batch` and `capsim merge` read: a small count by
//! default, `CAPSIM_FUZZ_CASES=100000 cargo test --release hardening3_cli` for a long run.

use proptest::prelude::*;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::Scratch;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_capsim")
}

/// Run capsim in `dir` with `stdout` as its standard output; fails the test on a panic or a run
/// past 60 s.
fn run_with(dir: &Path, args: &[&str], stdout: Stdio) -> Output {
    let start = Instant::now();
    let o = Command::new(bin()).args(args).current_dir(dir).stdout(stdout).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(start.elapsed() < Duration::from_secs(60), "{args:?} took {:?}", start.elapsed());
    o
}

fn run(dir: &Path, args: &[&str]) -> Output {
    run_with(dir, args, Stdio::piped())
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let o = run(dir, args);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// Exit 2 and a message naming each of `needles`; the message is returned.
fn refused(dir: &Path, args: &[&str], needles: &[&str]) -> String {
    let o = run(dir, args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?} should name `{n}`: {err}");
    }
    err
}

/// A fresh folder for one test (or one case), removed when the guard is dropped.
fn scratch(name: &str) -> Scratch {
    Scratch::new(&format!("h3cli-{name}"))
}

/// The longest run of digits in `s`: a number printed without an exponent shows as hundreds.
fn longest_digit_run(s: &str) -> usize {
    s.split(|c: char| !c.is_ascii_digit()).map(str::len).max().unwrap_or(0)
}

/// Item 1: output to a full disk is an error that says so (exit 2), never a panic, for every
/// command, its help and the completion scripts.
#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_under_any_command_is_an_error_naming_standard_output() {
    let dir = scratch("full");
    let d = dir.path();
    std::fs::write(d.join("s.jsonl"), "{\"burst\": 2, \"input_len\": 64, \"output_len\": 4}\n").unwrap();
    std::fs::write(d.join("slice.jsonl"), "{\"index\":0,\"of\":1,\"x\":1}\n").unwrap();
    let commands: &[&[&str]] = &[
        &["models"],
        &["models", "--json"],
        &["gpus"],
        &["profiles"],
        &["points"],
        &["explain"],
        &["simulate", "--burst", "2", "--input-len", "64", "--output-len", "4"],
        &["simulate", "--burst", "2", "--input-len", "64", "--output-len", "4", "--json"],
        &["sweep", "--burst", "1,2", "--input-len", "64", "--output-len", "4"],
        &["sweep", "--burst", "1,2", "--input-len", "64", "--output-len", "4", "--jsonl"],
        &[
            "capacity",
            "--load",
            "concurrency",
            "--max-load",
            "2",
            "--requests",
            "4",
            "--input-len",
            "64",
            "--output-len",
            "4",
            "--slo",
            "ttft_mean_s=100",
        ],
        &["batch", "s.jsonl"],
        &["batch", "--check", "s.jsonl"],
        &["merge", "slice.jsonl"],
        &["completions", "bash"],
        &["completions", "zsh"],
        &["--help"],
        &["--version"],
        &["sweep", "--help"],
    ];
    for args in commands {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let o = run_with(d, args, Stdio::from(full));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("capsim: error: standard output: No space left on device"), "{args:?}: {err}");
    }
}

/// Item 1: a reader that stops early (`capsim ... | head`) still ends the process quietly (SIGPIPE),
/// without an error message about standard output.
#[cfg(unix)]
#[test]
fn a_closed_pipe_still_ends_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    // 64 KB of completion script: more than a pipe's buffer, so the writer meets the closed end.
    let mut child = Command::new(bin())
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 100];
    out.read_exact(&mut first).unwrap();
    drop(out);
    let o = child.wait_with_output().unwrap();
    // Ended by SIGPIPE (13), or done before the reader left.
    assert!(o.status.success() || o.status.signal() == Some(13), "{:?}", o.status);
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
}

/// Item 3: a rate tolerance finer than floats resolve is refused at once, and the search itself
/// stops when its bracket is two adjacent floats (it looped forever between them).
#[test]
fn a_rate_tolerance_below_float_resolution_is_refused_and_the_search_ends() {
    let dir = scratch("ratetol");
    let d = dir.path();
    let args = ["capacity", "--load", "rate", "--slo", "ttft_p95_s=2", "--max-load", "20", "--rate-tol", "1e-16"];
    let e = refused(d, &args, &["--rate-tol", "1e-16", "1e-12"]);
    assert!(longest_digit_run(&e) < 20, "{e}");
    refused(d, &["capacity", "--load", "rate", "--slo", "ttft_p95_s=2", "--rate-tol", "0"], &["--rate-tol"]);

    // The library with no tolerance at all: bisection until no float lies inside the bracket.
    use capsim::capacity::{search, Question, Slo, Verdict};
    use capsim::workload::{LoadAxis, LoadTemplate};
    let p = super::default_profile();
    let mut template = LoadTemplate::fixed(256, 16);
    template.requests = Some(24);
    let q = Question {
        axis: LoadAxis::Rate,
        template,
        slos: vec![Slo::parse("ttft_p95_s=0.08").unwrap()],
        max_load: 1000.0,
        seeds: 1,
        seed: 0,
        rate_rel_tol: 0.0,
    };
    let start = Instant::now();
    let (cap, verdict, tried) = search(&p, &q, &|| {}).unwrap();
    assert!(start.elapsed() < Duration::from_secs(120), "{:?}", start.elapsed());
    assert!(tried.len() < 1000, "{} loads tried", tried.len());
    if verdict == Verdict::Found {
        // The bracket closed on the capacity: the next float up was tried and failed.
        let next_fail = tried.iter().filter(|t| !t.meets_slo && t.load > cap).map(|t| t.load).fold(f64::MAX, f64::min);
        assert!(next_fail <= cap * (1.0 + 1e-12), "capacity {cap}, lowest failure above it {next_fail}");
    }
}

/// Item 7: a shard past the last point writes an empty slice that merge takes; merged, the slices
/// equal the unsharded run.
#[test]
fn a_job_array_with_more_tasks_than_points_merges() {
    let dir = scratch("shards");
    let d = dir.path();
    let sweep = ["sweep", "--concurrency", "1,2", "--requests", "6", "--input-len", "64", "--output-len", "4"];
    let whole = ok(d, &[&sweep[..], &["--jsonl"]].concat());
    let mut files = Vec::new();
    for i in 0..3 {
        let slice = format!("{i}/3");
        let o = run(d, &[&sweep[..], &["--jsonl", "--shard", &slice]].concat());
        assert!(o.status.success());
        let name = format!("slice-{i}.jsonl");
        std::fs::write(d.join(&name), &o.stdout).unwrap();
        if i == 2 {
            assert!(o.stdout.is_empty());
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("slice 2 of 3 holds none of the 2 points"), "{err}");
        }
        files.push(name);
    }
    let files: Vec<&str> = files.iter().map(String::as_str).collect();
    assert_eq!(ok(d, &[&["merge"], &files[..]].concat()), whole);
    // An empty slice does not hide a missing one, and empty files alone are no run.
    refused(d, &["merge", files[0], files[2]], &["missing"]);
    refused(d, &["merge", files[2]], &["no result lines"]);
    // Same with batch: three scenarios, five tasks.
    let scen = "{\"burst\": 2, \"input_len\": 64, \"output_len\": 4}\n{\"burst\": 3, \"input_len\": 64, \"output_len\": 4}\n{\"burst\": 1, \"input_len\": 32, \"output_len\": 4}\n";
    std::fs::write(d.join("s.jsonl"), scen).unwrap();
    let whole = ok(d, &["batch", "s.jsonl"]);
    let mut names = Vec::new();
    for i in 0..5 {
        let name = format!("b-{i}.jsonl");
        std::fs::write(d.join(&name), ok(d, &["batch", "s.jsonl", "--shard", &format!("{i}/5")])).unwrap();
        names.push(name);
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(ok(d, &[&["merge"], &names[..]].concat()), whole);
}

/// Item 7: a slice holding one pretty-printed JSON object is refused, not written back as `{`.
#[test]
fn merge_refuses_a_document_over_several_lines() {
    let dir = scratch("pretty");
    let d = dir.path();
    std::fs::write(d.join("pretty.json"), "{\n  \"index\": 0,\n  \"of\": 1,\n  \"x\": 1\n}\n").unwrap();
    let e = refused(d, &["merge", "pretty.json"], &["pretty.json", "line 1", "one result per line"]);
    assert!(!e.contains("missing `index`"), "{e}");
    let json =
        ok(d, &["sweep", "--concurrency", "1", "--requests", "4", "--input-len", "64", "--output-len", "4", "--json"]);
    std::fs::write(d.join("sweep.json"), json).unwrap();
    refused(d, &["merge", "sweep.json"], &["sweep.json", "one result per line"]);
    let o = run(d, &["merge", "pretty.json"]);
    assert!(o.stdout.is_empty());
}

/// Item 11: contexts past the model's window, an engine release capsim never read, and huge numbers
/// are refused with a message of reasonable length, not answered with an empty report or a label.
#[test]
fn reports_versions_and_huge_numbers_are_refused_plainly() {
    let dir = scratch("item11");
    let d = dir.path();
    let e = refused(
        d,
        &["report", "--contexts", "262145", "--concurrency", "1", "--out", "r.html"],
        &["--contexts", "262145", "262144"],
    );
    assert!(!d.join("r.html").exists(), "{e}");
    refused(d, &["report", "--contexts", "1024,262145", "--concurrency", "1", "--out", "r.html"], &["262145"]);
    refused(
        d,
        &["report", "--contexts", "1024", "--output-len", "262144", "--concurrency", "1", "--out", "r.html"],
        &["--contexts"],
    );
    assert!(!d.join("r.html").exists());

    refused(d, &["simulate", "--burst", "1", "--engine-version", "99.99.99"], &["99.99.99", "0.10.1 to 0.33.0"]);
    refused(d, &["simulate", "--burst", "1", "--engine-version", "0.9.2"], &["0.9.2", "0.10.1 to 0.33.0"]);
    refused(
        d,
        &["simulate", "--burst", "1", "--engine", "sglang", "--engine-version", "0.33.0"],
        &["SGLang 0.33.0", "0.4.6 to 0.5.23"],
    );
    refused(d, &["simulate", "--burst", "1", "--engine", "trtllm", "--engine-version", "2.0"], &["TensorRT-LLM 2.0.0"]);
    for (engine, v) in [("vllm", "0.10.1"), ("vllm", "v0.33.0"), ("sglang", "0.4.6"), ("trtllm", "1.2.1")] {
        let out = ok(
            d,
            &[
                "simulate",
                "--burst",
                "1",
                "--input-len",
                "64",
                "--output-len",
                "4",
                "--engine",
                engine,
                "--engine-version",
                v,
                "--json",
            ],
        );
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(j["scenario"]["engine"]["version"], v.trim_start_matches('v'), "{engine} {v}");
    }

    std::fs::write(d.join("far.csv"), "arrival_s,input_tokens,output_tokens\n0,100,10\n1e300,100,10\n").unwrap();
    std::fs::write(d.join("near.csv"), "arrival_s,input_tokens,output_tokens\n0,100,10\n1,100,10\n").unwrap();
    let mut all = String::new();
    for args in [
        &["simulate", "--trace", "far.csv"][..],
        &["sweep", "--trace", "far.csv", "--scale", "2"],
        &["sweep", "--trace", "near.csv", "--scale", "1e308"],
        &["sweep", "--trace", "near.csv", "--scale", "1e-300"],
        &["simulate", "--trace", "near.csv", "--trace-rate-scale", "1e300"],
        &["simulate", "--rate", "1e300"],
        &["sweep", "--rate", "1,1e300"],
        &["simulate", "--burst", "2", "--watermark", "1e300"],
        &["simulate", "--burst", "2", "--gpu-memory-utilization", "1e300"],
        &["simulate", "--concurrency", "2", "--turns", "2", "--turn-think-time", "1e300"],
    ] {
        all += &refused(d, args, &[]);
    }
    assert!(all.contains("far.csv") && all.contains("1e300 s") && all.contains("--scale"), "{all}");
    assert!(longest_digit_run(&all) < 20, "{all}");
    // Printed loads: a large scale that is allowed stays short.
    let out = ok(d, &["sweep", "--trace", "near.csv", "--scale", "1e6", "--csv"]);
    assert!(out.lines().nth(1).unwrap().starts_with("scale,1000000,"), "{out}");
    assert_eq!(capsim::report::num(1e300, 4), "1.000e300");
    assert_eq!(capsim::report::num(123456.7, 4), "123457");
    assert_eq!(capsim::data::format_value(1e308), "1e308");
    assert_eq!(capsim::data::format_value(2.5), "2.5");
    assert_eq!(capsim::data::format_value(1000.0), "1000");
}

/// `batch --check` checks every scenario and runs none.
#[test]
fn batch_check_runs_nothing() {
    let dir = scratch("check");
    let d = dir.path();
    // A million requests would take minutes to simulate; checking them takes none.
    std::fs::write(
        d.join("s.jsonl"),
        "{\"concurrency\": 64, \"requests\": 1000000}\n{\"command\": \"sweep\", \"rate\": [1, 2]}\n",
    )
    .unwrap();
    let start = Instant::now();
    assert_eq!(ok(d, &["batch", "--check", "s.jsonl"]), "s.jsonl: 2 scenario(s), each valid\n");
    assert!(start.elapsed() < Duration::from_secs(20));
    std::fs::write(d.join("bad.jsonl"), "{\"concurrency\": 4}\n{\"concurrency\": 0}\n").unwrap();
    refused(d, &["batch", "--check", "bad.jsonl"], &["bad.jsonl", "line 2", "concurrency"]);
}

// ---- Fuzz targets: batch and merge input. ----

/// Cases per target: a small count by default (each case starts the binary), `CAPSIM_FUZZ_CASES`
/// for a long run.
fn cases() -> u32 {
    std::env::var("CAPSIM_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256)
}

/// The keys these files hold, inserted beside tests/it/fuzz.rs's tokens (numbers at and past every
/// bound, syntax that breaks structure).
const EXTRA_TOKENS: &[&str] =
    &["\"index\": 1, ", "\"of\": 3, ", "\"command\": \"capacity\", ", "\"label\": [1], ", "\n{}\n"];

fn tokens() -> Vec<&'static str> {
    crate::fuzz::TOKENS.iter().chain(EXTRA_TOKENS).copied().collect()
}

fn mutations() -> impl Strategy<Value = Vec<(u8, usize, usize, usize)>> {
    crate::fuzz::mutations_over(tokens().len())
}

fn mutate(seed: &str, muts: &[(u8, usize, usize, usize)]) -> String {
    crate::fuzz::mutate_with(seed, muts, &tokens())
}

/// Keys a structured mutation sets: the commands' flags, some at their bounds, and output flags
/// batch refuses.
const KEYS: &[&str] = &[
    "command",
    "label",
    "concurrency",
    "rate",
    "burst",
    "scale",
    "requests",
    "duration",
    "input_len",
    "output_len",
    "turns",
    "gpu",
    "gpus",
    "model",
    "engine",
    "engine_version",
    "tp",
    "precision",
    "max_num_seqs",
    "kv_capacity_tokens",
    "prefix_caching",
    "expert_parallel",
    "load",
    "slo",
    "preset",
    "max_load",
    "rate_tol",
    "seeds",
    "target_rate",
    "trace",
    "workload",
    "profile",
    "json",
    "shard",
    "input-len",
];

/// JSON values a structured mutation puts under a key.
const VALUES: &[&str] = &[
    "-1",
    "0",
    "1",
    "0.5",
    "1e308",
    "-1e308",
    "1e-300",
    "4294967296",
    "18446744073709551616",
    "\"\"",
    "\"abc\"",
    "\"1,2\"",
    "\"lognormal:1:1e300\"",
    "\"uniform:5:1\"",
    "true",
    "false",
    "null",
    "[]",
    "[1, 2]",
    "[\"ttft_p95_s=2\", 3]",
    "{}",
    "\"H100 SXM\"",
    "\"sglang\"",
    "\"trtllm\"",
    "\"99.99.99\"",
    "\"ttft_p95_s=2\"",
    "\"capacity\"",
    "\"sweep\"",
    "\"rate\"",
    "\"code-completion\"",
];

/// Scenarios of every command: cheap to check, each with list, switch and label keys.
const SCENARIOS: &str = concat!(
    include_str!("../../examples/scenarios.jsonl"),
    "{\"command\": \"capacity\", \"load\": \"rate\", \"slo\": [\"ttft_p95_s=2\"], \"max_load\": 20, \"rate_tol\": 0.05}\n",
    "{\"label\": {\"a\": 1}, \"burst\": 4, \"expert_parallel\": false, \"input_len\": \"uniform:10:20\"}\n",
);

/// Three slices of a five-point run, as `--shard I/3 --jsonl` writes them.
const SLICES: [&str; 3] = [
    "{\"index\":0,\"of\":5,\"profile\":\"p\",\"point\":{\"load\":1.0}}\n{\"index\":3,\"of\":5,\"profile\":\"p\",\"point\":{\"load\":4.0}}\n",
    "{\"index\":1,\"of\":5,\"profile\":\"p\",\"point\":{\"load\":2.0}}\n{\"index\":4,\"of\":5,\"profile\":\"p\",\"point\":{\"load\":5.0}}\n",
    "{\"index\":2,\"of\":5,\"profile\":\"p\",\"point\":{\"load\":3.0}}\n",
];

/// The error of a run that failed: exit 2, one `capsim: error:` line naming one of `sources`.
fn check_refusal(o: &Output, sources: &[&str]) -> Result<(), TestCaseError> {
    let err = String::from_utf8_lossy(&o.stderr);
    prop_assert_eq!(o.status.code(), Some(2), "{}", err);
    let line = err.lines().find(|l| l.starts_with("capsim: error: "));
    prop_assert!(
        line.is_some_and(|l| sources.iter().any(|s| l.contains(s))),
        "error names none of {:?}: {}",
        sources,
        err
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, .. ProptestConfig::default() })]

    /// `capsim batch --check` on a mutated scenario file: every scenario valid, or exit 2 naming
    /// the file; never a panic.
    #[test]
    fn fuzz_batch_input(muts in mutations(), line in any::<usize>(), raw in prop::collection::vec(any::<u8>(), 0..256), mode in 0u8..5) {
        let dir = scratch("fuzz-batch");
        let d = dir.path();
        let text = match mode {
            0 => String::from_utf8_lossy(&raw).to_string(),
            1 => mutate(SCENARIOS, &muts),
            // Keys and values replaced in valid JSON: the cases reach the flags and the commands' checks.
            2 => {
                let mut lines: Vec<String> = SCENARIOS.lines().map(str::to_string).collect();
                let k = line % lines.len();
                let mut obj: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&lines[k]).unwrap();
                for &(kind, key, _, value) in &muts {
                    let key = if kind % 2 == 0 && !obj.is_empty() {
                        obj.keys().nth(key % obj.len()).unwrap().clone()
                    } else {
                        KEYS[key % KEYS.len()].to_string()
                    };
                    if kind == 4 {
                        obj.remove(&key);
                    } else {
                        obj.insert(key, serde_json::from_str(VALUES[value % VALUES.len()]).unwrap());
                    }
                }
                lines[k] = serde_json::Value::Object(obj).to_string();
                lines.join("\n")
            }
            // One line mutated, the others intact.
            _ => {
                let mut lines: Vec<String> = SCENARIOS.lines().map(str::to_string).collect();
                let k = line % lines.len();
                lines[k] = mutate(&lines[k], &muts);
                lines.join("\n")
            }
        };
        std::fs::write(d.join("fuzz-scenarios.jsonl"), &text).unwrap();
        let o = run(d, &["batch", "--check", "fuzz-scenarios.jsonl"]);
        if o.status.success() {
            let out = String::from_utf8_lossy(&o.stdout);
            prop_assert!(out.starts_with("fuzz-scenarios.jsonl: ") && out.ends_with("scenario(s), each valid\n"), "{}", out);
        } else {
            check_refusal(&o, &["fuzz-scenarios.jsonl"])?;
        }
    }

    /// `capsim merge` on slices one of which is mutated (or emptied): the whole run's lines in index
    /// order, each as some slice wrote it, or exit 2 naming a file or the slices' fault; never a panic.
    #[test]
    fn fuzz_merge_input(muts in mutations(), which in 0usize..3, empty in 0usize..4) {
        let dir = scratch("fuzz-merge");
        let d = dir.path();
        let mut texts: Vec<String> = SLICES.iter().map(|s| s.to_string()).collect();
        texts[which] = mutate(&texts[which], &muts);
        if empty < 3 {
            texts[empty].clear();
        }
        let names = ["fuzz-a.jsonl", "fuzz-b.jsonl", "fuzz-c.jsonl"];
        for (n, t) in names.iter().zip(&texts) {
            std::fs::write(d.join(n), t).unwrap();
        }
        let o = run(d, &[&["merge"], &names[..]].concat());
        if o.status.success() {
            let out = String::from_utf8(o.stdout.clone()).unwrap();
            let lines: Vec<&str> = out.lines().collect();
            let written: Vec<&str> = texts.iter().flat_map(|t| t.lines()).collect();
            for (k, l) in lines.iter().enumerate() {
                prop_assert!(written.contains(l), "line {} was not in a slice: {}", k, l);
                let v: serde_json::Value = serde_json::from_str(l).map_err(|e| TestCaseError::fail(format!("{e}: {l}")))?;
                prop_assert_eq!(v["index"].as_u64(), Some(k as u64), "{}", out);
                prop_assert_eq!(v["of"].as_u64(), Some(lines.len() as u64), "{}", out);
            }
        } else {
            check_refusal(&o, &["fuzz-a.jsonl", "fuzz-b.jsonl", "fuzz-c.jsonl", "command line"])?;
        }
    }
}

/// The arguments of a command, from its parts.
fn args<'a>(parts: &[&[&'a str]]) -> Vec<&'a str> {
    parts.concat()
}

/// Audit of 2026-11-28: flags a command cannot honour are refused naming them, and an error names
/// the flag that caused it.
/// - `calibrate --runs` with a disaggregated pool flag (was accepted and dropped, an unknown pool
///   GPU unchecked); `plan --disaggregated` (was ignored: plans are aggregated fleets).
/// - `explain --prefill` past the model's window (blamed `--context`).
/// - A disaggregated deployment whose `--kv-capacity-tokens` leaves no room (blamed `--prefill-tp`,
///   whose advice could not help).
/// - A pool inheriting an unknown `--gpu` (named `--prefill-gpu`, which was not given).
/// - An engine flag's bad value (named `engine.max_num_seqs` and the like, the profile's keys), and
///   a workload flag's (named `workload, field requests`; --turns 0 called a token count).
#[test]
fn flags_a_command_cannot_honour_or_that_cause_an_error_are_named() {
    let dir = scratch("audit");
    let d = dir.path();
    let run_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/vllm/detailed_c2.json");
    let out = d.join("cal");
    let ds = ["--model", "DeepSeek-R1", "--engine", "sglang", "--precision", "fp8", "--kv-dtype", "fp8"];
    let b = [&ds[..], &["--gpu", "B200", "--tp", "8"]].concat();
    let w = ["--concurrency", "4", "--requests", "20", "--input-len", "512", "--output-len", "64"];
    let pd = ["--prefill-workers", "1", "--decode-workers", "1"];
    refused(
        d,
        &args(&[
            &["calibrate", "--runs", run_file.to_str().unwrap(), "--out", out.to_str().unwrap(), "--name", "x"],
            &["--model", "Qwen3-Coder-30B-A3B-Instruct", "--gpu", "H200 SXM", "--decode-gpu", "NoSuchGPU"],
        ]),
        &["`--decode-gpu`", "calibrate --runs fits one aggregated deployment"],
    );
    assert!(!out.exists(), "nothing written");
    let plan = ["plan", "--target-rate", "1", "--slo", "ttft_p99_s=2", "--input-len", "512", "--output-len", "64"];
    refused(
        d,
        &args(&[&plan, &ds, &["--gpus", "B200", "--disaggregated"]]),
        &["`--disaggregated`", "capacity --disaggregated"],
    );
    refused(d, &args(&[&plan, &ds, &["--gpus", "B200", "--prefill-tp", "4"]]), &["`--prefill-tp`"]);
    refused(d, &args(&[&["explain"], &b, &["--prefill", "200000", "--decode", "0"]]), &["`--prefill`", "163840"]);
    refused(
        d,
        &args(&[&["explain"], &b, &["--prefill", "100", "--prefill-start", "163800", "--decode", "0"]]),
        &["`--prefill-start`", "163900"],
    );
    refused(
        d,
        &args(&[&["simulate"], &b, &w, &pd, &["--kv-capacity-tokens", "100"]]),
        &["`--kv-capacity-tokens`", "needs 513"],
    );
    let inherited = args(&[&["simulate"], &ds, &["--gpu", "H100", "--tp", "8"], &w, &pd]);
    let err = refused(d, &inherited, &["`--gpu`", "unknown GPU `H100`"]);
    assert!(!err.contains("--prefill-gpu"), "{err}");
    refused(d, &args(&[&inherited, &["--prefill-gpu", "H100"]]), &["`--prefill-gpu`"]);
    // An engine flag's bad value is named by the flag, not the profile key it sets.
    for (flag, value) in [
        ("--kv-capacity-tokens", "0"),
        ("--block-size", "0"),
        ("--max-num-seqs", "0"),
        ("--stream-interval", "0"),
        ("--gpu-memory-utilization", "0"),
        ("--watermark", "2"),
    ] {
        let err = refused(d, &args(&[&["simulate"], &b, &w, &[flag, value]]), &[&format!("`{flag}`")]);
        assert!(!err.contains("engine."), "{flag}: {err}");
    }
    // A workload the flags built: its errors named by the flags (was `workload, field requests`).
    for (extra, flag, words) in [
        (&["--requests", "0", "--concurrency", "1"][..], "--requests", "at least 1"),
        (&["--rate", "1e308", "--requests", "5"][..], "--rate", "up to 1e6"),
        (
            &["--warmup-requests", "5", "--requests", "5", "--concurrency", "2"][..],
            "--warmup-requests",
            "none of the 5",
        ),
        (&["--turns", "0", "--requests", "5", "--concurrency", "1"][..], "--turns", "turn count"),
        (&["--burstiness", "0", "--rate", "2", "--requests", "5"][..], "--burstiness", "positive"),
    ] {
        let err = refused(d, &args(&[&["simulate"], &b, extra]), &[&format!("`{flag}`"), words]);
        assert!(!err.contains("workload,"), "{flag}: {err}");
    }
    // The same flags in the commands that build their own runs, and a sweep's load list.
    refused(d, &["capacity", "--slo", "ttft_p99_s=2", "--requests", "0"], &["`--requests`"]);
    refused(d, &["sweep", "--concurrency", "1,2", "--requests", "0"], &["`--requests`"]);
    refused(d, &["sweep", "--concurrency", "4294967295", "--requests", "20"], &["`--concurrency`", "whole number"]);
    // A plan over a curve: periods with floors (--bucket-s 1e-6 hung; --peak-window-s 1e-9 was an
    // internal rate-schedule error naming no flag).
    let day = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/day.toml");
    let plan_day = ["plan", "--workload", day.to_str().unwrap(), "--gpus", "H200 SXM", "--tps", "1"];
    let plan_day = [&plan_day[..], &["--slo", "ttft_p95_s=2"]].concat();
    refused(d, &args(&[&plan_day, &["--bucket-s", "1e-6"]]), &["`--bucket-s`", "[1, 1e9]"]);
    refused(d, &args(&[&plan_day, &["--peak-window-s=1e-9"]]), &["`--peak-window-s`", "[1, 86400]"]);
}
