//! Fuzzing that stays (issues 16 and 24): every parser of user input, fed raw bytes and mutations of a
//! valid file, must return Ok or an error that names its source, and never panic (proptest reports a
//! panic as a failure, with the minimal input). One target per reader: config.json, profile TOML,
//! GPU TOML, workload TOML, traces (CSV, JSONL), points CSV, each benchmark tool's result files
//! (vLLM JSON and detailed JSON, vLLM JSONL, SGLang, GuideLLM, AIPerf summary and records) and the
//! corpus's files; a benchmark file that reads is also replayed as a workload and labelled (what
//! the readers promise the rest of capsim). About 1,000 cases per target here;
//! `CAPSIM_FUZZ_CASES=100000 cargo test --release fuzz` for a long run.

use capsim::catalog::Catalog;
use capsim::error::Error;
use capsim::profile::{ProfileFile, BUILTIN_PROFILES};
use proptest::prelude::*;

use crate::Scratch;

fn cases() -> u32 {
    std::env::var("CAPSIM_FUZZ_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(1000)
}

/// Tokens a mutation may insert: numbers at and past every bound, syntax that breaks structure.
pub(crate) const TOKENS: &[&str] = &[
    "-1",
    "0",
    "1e308",
    "-1e308",
    "NaN",
    "inf",
    "4294967296",
    "18446744073709551616",
    "1e-300",
    "\"",
    "'",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "=",
    "\n",
    "\r\n",
    "\t",
    "null",
    "true",
    "\u{0}",
    "\u{feff}",
    "é",
    "",
];

/// A mutation: (kind, position, length, token).
fn mutations() -> impl Strategy<Value = Vec<(u8, usize, usize, usize)>> {
    mutations_over(TOKENS.len())
}

/// Mutations whose tokens index a list of `n_tokens` (another module's own token list).
pub(crate) fn mutations_over(n_tokens: usize) -> impl Strategy<Value = Vec<(u8, usize, usize, usize)>> {
    prop::collection::vec((0u8..5, any::<usize>(), 0usize..64, 0..n_tokens), 1..6)
}

fn mutate(seed: &str, muts: &[(u8, usize, usize, usize)]) -> String {
    mutate_with(seed, muts, TOKENS)
}

/// Apply mutations to `seed` at char boundaries: delete a range, duplicate it, insert a token,
/// replace a range with a token, or truncate; tokens from `tokens`.
pub(crate) fn mutate_with(seed: &str, muts: &[(u8, usize, usize, usize)], tokens: &[&str]) -> String {
    let mut s = seed.to_string();
    for &(kind, pos, len, tok) in muts {
        if s.is_empty() {
            s.push_str(tokens[tok]);
            continue;
        }
        let mut a = pos % s.len();
        while !s.is_char_boundary(a) {
            a -= 1;
        }
        let mut b = (a + len).min(s.len());
        while !s.is_char_boundary(b) {
            b -= 1;
        }
        match kind {
            0 => s.replace_range(a..b, ""),
            1 => {
                let dup = s[a..b].to_string();
                s.insert_str(b, &dup);
            }
            2 => s.insert_str(a, tokens[tok]),
            3 => s.replace_range(a..b, tokens[tok]),
            _ => s.truncate(a),
        }
    }
    s
}

/// An error from parsing `source` names it (input errors) or says what it could not find.
fn names_source(e: &Error, source: &str) -> bool {
    match e {
        Error::Input { at, .. } => at.source.contains(source),
        Error::Io { path, .. } => path.contains(source),
        Error::Unknown { name, .. } => !name.is_empty() || !e.to_string().is_empty(),
        Error::Infeasible(msg) | Error::NothingMeasured(msg) | Error::NoAnswer(msg) => !msg.is_empty(),
    }
}

fn check<T>(r: capsim::error::Result<T>, source: &str) -> Result<(), TestCaseError> {
    if let Err(e) = r {
        prop_assert!(names_source(&e, source), "error does not name {source}: {e}");
    }
    Ok(())
}

/// A parser that reads a file from disk: the text is written to a temporary file named `name`.
fn via_file<T>(
    name: &str,
    text: &str,
    read: impl Fn(&std::path::Path) -> capsim::error::Result<T>,
) -> Result<(), TestCaseError> {
    let dir = Scratch::new("fuzz");
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    check(read(&path), name)
}

const CONFIG: &str = include_str!("../../models/configs/deepseek-v3.json");
const GPUS: &str = include_str!("../../models/gpus.toml");
const WORKLOAD: &str = r#"
requests = 50
[arrivals]
kind = "open_loop"
process = "gamma"
burstiness = 0.5
rate = { segments = [[0.0, 2.0], [300.0, 4.0]] }
[[classes]]
weight = 3.0
input = { dist = "lognormal", mean = 2000.0, sd = 800.0 }
output = { dist = "uniform", min = 100, max = 300 }
[[classes]]
input = { dist = "fixed", value = 1024 }
output = { dist = "empirical", values = [64, 128, 256], weights = [1.0, 2.0, 1.0] }
"#;
const TRACE_CSV: &str = "arrival_s,input_tokens,output_tokens\n0.0,100,20\n0.5,2000,100\n1.25,512,64\n";
const TRACE_JSONL: &str = "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 20, \"hash_ids\": [1, 2]}\n{\"timestamp\": 500, \"input_length\": 2000, \"output_length\": 100, \"hash_ids\": [1]}\n";
const VLLM_RESULT: &str = include_str!("../fixtures/vllm/sweep/low/c2_in1024.json");
const VLLM_DETAILED: &str = include_str!("../fixtures/vllm/detailed_c2.json");
const VLLM_APPEND: &str = include_str!("../fixtures/vllm/append.jsonl");
const SGLANG: &str = include_str!("../fixtures/sglang/bench_serving.jsonl");
const GUIDELLM: &str = include_str!("../fixtures/guidellm/benchmarks.json");
const AIPERF: &str = include_str!("../fixtures/aiperf/request-rate_8/profile_export_aiperf.json");
const AIPERF_RECORDS: &str = include_str!("../fixtures/aiperf/request-rate_8/profile_export.jsonl");
const IX_DIR: &str = "dsr1-fp4-b200-dynamo-sglang-1ptp4_1dtp8_4+8gpu-v0.5.8.post1-cu130-runtime";
const IX_META: &str = include_str!(
    "../../calibration/corpus/inferencex-dsr1/dsr1-fp4-b200-dynamo-sglang-1ptp4_1dtp8_4+8gpu-v0.5.8.post1-cu130-runtime/metadata.json"
);
const IX_POINT: &str = include_str!(
    "../../calibration/corpus/inferencex-dsr1/dsr1-fp4-b200-dynamo-sglang-1ptp4_1dtp8_4+8gpu-v0.5.8.post1-cu130-runtime/8192x1024_c4_2026-02-11.json"
);
const AIC_E2E: &str = include_str!("../../calibration/corpus/aic-e2e/measured.csv");

/// GuideLLM's fixture with each benchmark's request lists cut to three (a valid file, 10x smaller,
/// so a case costs what the others do).
fn guidellm_seed() -> &'static str {
    static SEED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SEED.get_or_init(|| {
        let mut v: serde_json::Value = serde_json::from_str(GUIDELLM).unwrap();
        for b in v["benchmarks"].as_array_mut().unwrap() {
            for k in ["successful", "errored", "incomplete"] {
                if let Some(a) = b["requests"][k].as_array_mut() {
                    a.truncate(3);
                }
            }
        }
        serde_json::to_string_pretty(&v).unwrap()
    })
}

/// The first `n` lines of a text.
fn head(text: &str, n: usize) -> String {
    text.lines().take(n).map(|l| format!("{l}\n")).collect()
}

/// A scratch folder for one case of a target (files that must sit side by side), removed when the
/// guard is dropped.
fn fuzz_dir(target: &str) -> Scratch {
    Scratch::new(&format!("fuzz-{target}"))
}

/// Read a benchmark result file: Ok, or an error naming it; what reads must replay and label
/// without a panic.
fn read_benchmark(path: &std::path::Path, name: &str) -> Result<(), TestCaseError> {
    match capsim::measured::read_path(path) {
        Ok((runs, _)) => {
            for r in &runs {
                let _ = capsim::experiment::run_workload(r);
                prop_assert!(!r.label().is_empty());
                let _ = r.points("fuzz");
            }
            Ok(())
        }
        Err(e) => {
            prop_assert!(names_source(&e, name), "error does not name {name}: {e}");
            Ok(())
        }
    }
}

/// `text` (mutated from `seed`, or raw bytes) as the file `name` in the target's folder, read.
fn fuzz_benchmark(target: &str, name: &str, text: &str) -> Result<(), TestCaseError> {
    let dir = fuzz_dir(target);
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    read_benchmark(&path, name)
}

fn text_of(seed: &str, muts: &[(u8, usize, usize, usize)], raw: &[u8], use_raw: bool) -> String {
    if use_raw {
        String::from_utf8_lossy(raw).to_string()
    } else {
        mutate(seed, muts)
    }
}

fn points_seed() -> String {
    capsim::data::POINTS_CSV.lines().take(12).collect::<Vec<_>>().join("\n")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn fuzz_config_json(muts in mutations(), raw in prop::collection::vec(any::<u8>(), 0..256), use_raw in any::<bool>()) {
        let text = if use_raw { String::from_utf8_lossy(&raw).to_string() } else { mutate(CONFIG, &muts) };
        check(capsim::catalog::config_json::parse("fuzz-model", "fuzz.json", &text), "fuzz.json")?;
    }

    #[test]
    fn fuzz_profile_toml(muts in mutations()) {
        let text = mutate(BUILTIN_PROFILES[0].1, &muts);
        match ProfileFile::parse("fuzz.toml", &text) {
            Ok(pf) => check(pf.resolve("fuzz.toml", &Catalog::builtin()), "fuzz.toml")?,
            Err(e) => prop_assert!(names_source(&e, "fuzz.toml"), "{e}"),
        }
    }

    #[test]
    fn fuzz_gpus_toml(muts in mutations()) {
        check(capsim::catalog::gpu::parse_gpus("fuzz-gpus.toml", &mutate(GPUS, &muts)), "fuzz-gpus.toml")?;
    }

    #[test]
    fn fuzz_workload_toml(muts in mutations()) {
        let text = mutate(WORKLOAD, &muts);
        // Parse errors come from toml itself; what must hold is no panic in validation and in the
        // sampler it builds.
        if let Ok(spec) = toml::from_str::<capsim::workload::WorkloadSpec>(&text) {
            if let Ok(w) = spec.validate() {
                let mut g = capsim::workload::Generator::new(&w, 1);
                for _ in 0..4 {
                    let _ = g.lengths();
                }
            }
        }
    }

    #[test]
    fn fuzz_traces(muts in mutations(), csv in any::<bool>()) {
        if csv {
            check(capsim::workload::trace::parse_csv("fuzz.csv", &mutate(TRACE_CSV, &muts)), "fuzz.csv")?;
        } else {
            check(capsim::workload::trace::parse_jsonl("fuzz.jsonl", &mutate(TRACE_JSONL, &muts)), "fuzz.jsonl")?;
        }
    }

    #[test]
    fn fuzz_points_csv(muts in mutations()) {
        check(capsim::data::parse_points("fuzz-points.csv", &mutate(&points_seed(), &muts)), "fuzz-points.csv")?;
    }

    #[test]
    fn fuzz_benchmark_result_files(muts in mutations(), sglang in any::<bool>()) {
        let (name, seed) = if sglang { ("fuzz-sglang.jsonl", SGLANG) } else { ("fuzz-vllm.json", VLLM_RESULT) };
        via_file(name, &mutate(seed, &muts), capsim::measured::read_file)?;
    }

    #[test]
    fn fuzz_vllm_json(muts in mutations(), raw in prop::collection::vec(any::<u8>(), 0..256), use_raw in any::<bool>(), detailed in any::<bool>()) {
        let seed = if detailed { VLLM_DETAILED } else { VLLM_RESULT };
        fuzz_benchmark("vllm-json", "result.json", &text_of(seed, &muts, &raw, use_raw))?;
    }

    #[test]
    fn fuzz_vllm_jsonl(muts in mutations(), raw in prop::collection::vec(any::<u8>(), 0..256), use_raw in any::<bool>()) {
        fuzz_benchmark("vllm-jsonl", "append.jsonl", &text_of(VLLM_APPEND, &muts, &raw, use_raw))?;
    }

    #[test]
    fn fuzz_sglang(muts in mutations(), raw in prop::collection::vec(any::<u8>(), 0..256), use_raw in any::<bool>()) {
        fuzz_benchmark("sglang", "bench_serving.jsonl", &text_of(SGLANG, &muts, &raw, use_raw))?;
    }

    #[test]
    fn fuzz_guidellm(muts in mutations(), raw in prop::collection::vec(any::<u8>(), 0..256), use_raw in any::<bool>()) {
        fuzz_benchmark("guidellm", "benchmarks.json", &text_of(guidellm_seed(), &muts, &raw, use_raw))?;
    }

    #[test]
    fn fuzz_aiperf_summary(muts in mutations(), raw in prop::collection::vec(any::<u8>(), 0..256), use_raw in any::<bool>()) {
        // Alone: the summary's own lengths, counts and percentiles are read.
        fuzz_benchmark("aiperf-summary", "profile_export_aiperf.json", &text_of(AIPERF, &muts, &raw, use_raw))?;
    }

    #[test]
    fn fuzz_aiperf_records(muts in mutations(), raw in prop::collection::vec(any::<u8>(), 0..256), use_raw in any::<bool>()) {
        // The records beside a valid summary, read through it.
        let dir = fuzz_dir("aiperf-records");
        std::fs::write(dir.join("profile_export_aiperf.json"), AIPERF).unwrap();
        std::fs::write(dir.join("profile_export.jsonl"), text_of(&head(AIPERF_RECORDS, 4), &muts, &raw, use_raw)).unwrap();
        let path = dir.join("profile_export_aiperf.json");
        match capsim::measured::read_path(&path) {
            Ok((runs, _)) => {
                for r in &runs {
                    let _ = capsim::experiment::run_workload(r);
                }
            }
            Err(e) => prop_assert!(names_source(&e, "profile_export"), "{e}"),
        }
    }

    #[test]
    fn fuzz_corpus_inferencex(muts in mutations(), meta in any::<bool>()) {
        let (m, p) = if meta { (mutate(IX_META, &muts), IX_POINT.to_string()) } else { (IX_META.to_string(), mutate(IX_POINT, &muts)) };
        let points = [("8192x1024_c4_2026-02-11.json".to_string(), p.as_str())];
        check(capsim::measured::corpus::read_inferencex_deployment(IX_DIR, &m, &points, None), IX_DIR)?;
    }

    #[test]
    fn fuzz_corpus_aic_e2e(muts in mutations()) {
        check(capsim::measured::corpus::read_aic_e2e("fuzz-measured.csv", &mutate(&head(AIC_E2E, 6), &muts)), "fuzz-measured.csv")?;
    }

    #[test]
    fn fuzz_extreme_cli_numbers(x in prop_oneof![any::<f64>(), Just(f64::NAN), Just(1e300), Just(-0.0), Just(4294967296.0)],
                                muts in mutations()) {
        // Length specs and loads as the flags give them.
        let spec = mutate("lognormal:2000:800", &muts);
        if let Ok(d) = capsim_cli_length(&spec) {
            let _ = d.validate("--input-len");
        }
        let mut t = capsim::workload::LoadTemplate::fixed(100, 10);
        t.requests = Some(10);
        for axis in [capsim::workload::LoadAxis::Concurrency, capsim::workload::LoadAxis::Burst, capsim::workload::LoadAxis::Rate] {
            let _ = t.at(axis, x);
        }
    }
}

/// The CLI's length syntax (N, uniform:MIN:MAX, normal:MEAN:SD, lognormal:MEAN:SD) parsed the way the
/// binary does, through serde of the same shapes.
fn capsim_cli_length(s: &str) -> Result<capsim::workload::LengthDist, ()> {
    use capsim::workload::LengthDist;
    let parts: Vec<&str> = s.split(':').collect();
    let f = |i: usize| parts.get(i).and_then(|p| p.parse::<f64>().ok()).ok_or(());
    let u = |i: usize| parts.get(i).and_then(|p| p.parse::<u32>().ok()).ok_or(());
    match parts[0] {
        "uniform" => Ok(LengthDist::Uniform { min: u(1)?, max: u(2)? }),
        "normal" => Ok(LengthDist::Normal { mean: f(1)?, sd: f(2)? }),
        "lognormal" => Ok(LengthDist::Lognormal { mean: f(1)?, sd: f(2)? }),
        _ => Ok(LengthDist::Fixed { value: u(0)? }),
    }
}
