//! Issue 25: speculative decoding (sim/spec.rs, the step model's draft_s, profile [speculative],
//! the --spec-* flags, calibrate --runs --spec-method).

use super::const_profile;
use capsim::catalog::Catalog;
use capsim::measured::{MeasuredStat, Run, RunLoad, RunSource, Tool};
use capsim::metrics::StatKind;
use capsim::profile::{Profile, ProfileFile, SpecMethod, Speculative};
use capsim::sim::{simulate, simulate_observed, DraftShape, SimOptions, SimOutput, StepModel};
use capsim::workload::{Arrivals, Workload};
use std::process::{Command, Output};

const MS: u64 = 1_000_000;

/// 48 ms steps on Qwen3-Coder-30B-A3B (48 layers): one draft pass costs the layer's share of the
/// step overhead, 48 ms / 48 = 1 ms, the variable terms rounding to 0 ns.
fn spec_profile(engine: &str, k: u32, a: &[f64]) -> Profile {
    let mut p = const_profile(engine, 0.048, "");
    p.file.speculative = Some(Speculative::new(SpecMethod::Mtp, k, a.to_vec()));
    p
}

fn burst(n: u32, input: u32, output: u32) -> Workload {
    Workload::fixed(Arrivals::Burst { n }, input, output, None).unwrap()
}

fn run(p: &Profile, w: &Workload) -> SimOutput {
    simulate(p, w, 7, SimOptions::default())
}

#[test]
fn acceptance_zero_is_plain_decoding_plus_the_draft() {
    for engine in ["vllm", "sglang", "trtllm"] {
        let plain = run(&const_profile(engine, 0.048, ""), &burst(1, 100, 5)).records[0];
        let spec = run(&spec_profile(engine, 2, &[0.0]), &burst(1, 100, 5)).records[0];
        // One prefill step (48 ms, and the draft's one pass over the prompt, 1 ms), then 4 decode
        // steps of 48 ms + 2 draft passes of 1 ms.
        assert_eq!(plain.first_token.0, 48 * MS, "{engine}");
        assert_eq!(spec.first_token.0, 49 * MS, "{engine}");
        assert_eq!(plain.finish.0, (48 + 4 * 48) * MS, "{engine}");
        assert_eq!(spec.finish.0, (49 + 4 * 50) * MS, "{engine}");
    }
}

#[test]
fn acceptance_one_emits_k_plus_one_tokens_a_step() {
    for engine in ["vllm", "sglang", "trtllm"] {
        // K = 2: 1 token from the prefill (49 ms with the draft's pass over the prompt), then 3 a
        // step: 7 tokens after 2 decode steps of 50 ms.
        let out = run(&spec_profile(engine, 2, &[1.0]), &burst(1, 100, 7));
        let r = out.records[0];
        assert_eq!((r.first_token.0, r.finish.0), (49 * MS, 149 * MS), "{engine}");
        assert_eq!(out.steps, 3, "{engine}");
        // TPOT = step / (K + 1).
        let tpot = (r.finish.0 - r.first_token.0) as f64 / 6.0;
        assert!((tpot - 50.0 * MS as f64 / 3.0).abs() < 1.0, "{engine}");
        assert_eq!(out.decode_tokens, 6, "{engine}");
    }
}

#[test]
fn a_sequence_never_emits_beyond_its_output() {
    // K = 3 at acceptance 1 with 6 output tokens: the prefill's token, then 4 (cut to 4 of 4 left),
    // then 1: the second decode step emits only what is left.
    let out = run(&spec_profile("vllm", 3, &[1.0]), &burst(1, 100, 6));
    let r = out.records[0];
    assert_eq!(r.output_tokens, 6);
    assert_eq!(out.decode_tokens, 5);
    assert_eq!(out.steps, 3);
    assert_eq!(r.finish.0, (49 + 2 * 51) * MS);
    // Many requests of varied lengths: every output token and only those, KV covering them.
    let w = Workload::fixed(
        Arrivals::ClosedLoop { clients: 24, think_time_s: 0.0, think_exponential: false },
        300,
        37,
        Some(200),
    )
    .unwrap();
    for a in [0.0, 0.3, 0.7, 1.0] {
        let p = spec_profile("vllm", 3, &[a]);
        let mut kv_ok = true;
        let out = simulate_observed(&p, &w, 3, SimOptions::default(), &mut |v| {
            kv_ok &= v.kv_covers_computed() && v.used_blocks() == v.held_blocks();
        });
        assert!(kv_ok, "acceptance {a}");
        assert_eq!(out.records.len(), 200);
        let outputs: u64 = out.records.iter().map(|r| r.output_tokens as u64).sum();
        assert_eq!(out.decode_tokens + out.records.len() as u64, outputs, "acceptance {a}");
    }
}

#[test]
fn expected_tokens_per_step_follow_the_acceptance() {
    // a = 0.5 per position, K = 2: E = 1 + 0.5 + 0.25 = 1.75 tokens a step; 1 + 35 x 1.75 = 62.25
    // tokens come from the prefill and 35 decode steps, so 36 decode steps emit the 63 after the first.
    let out = run(&spec_profile("vllm", 2, &[0.5]), &burst(1, 100, 64));
    assert_eq!(out.steps, 1 + 36);
    // Per-position rates: 0.8 then 0.5: E = 1 + 0.8 + 0.4 = 2.2.
    let s = Speculative::new(SpecMethod::Mtp, 2, vec![0.8, 0.5]);
    assert!((s.expected_tokens(2) - 2.2).abs() < 1e-12);
    assert!((s.with_rate(1.0).expected_tokens(2) - 3.0).abs() < 1e-12);
}

#[test]
fn same_seed_same_bytes() {
    let w = Workload::fixed(
        Arrivals::ClosedLoop { clients: 32, think_time_s: 0.0, think_exponential: false },
        500,
        80,
        Some(300),
    )
    .unwrap();
    let p = {
        let mut p = super::default_profile();
        p.file.speculative = Some(Speculative::new(SpecMethod::Mtp, 3, vec![0.9, 0.7, 0.5]));
        p
    };
    let a = simulate(&p, &w, 11, SimOptions::default());
    let b = simulate(&p, &w, 11, SimOptions::default());
    assert_eq!(a.records, b.records);
    assert_eq!((a.steps, a.decode_tokens, a.end), (b.steps, b.decode_tokens, b.end));
    // Step by step gives the same run (speculation takes no fast path).
    let c = simulate(&p, &w, 11, SimOptions { step_by_step: true, ..SimOptions::default() });
    assert_eq!(a.records, c.records);
}

#[test]
fn the_draft_is_a_part_of_the_step() {
    let mut p = super::default_profile();
    let b = {
        let mut b = capsim::sim::BatchShape::default();
        for _ in 0..16 {
            b.add_chunk(2000, 1);
        }
        b
    };
    let d = DraftShape { seqs: 16, ctx_tokens: 16 * 2001, ..DraftShape::default() };
    let plain = StepModel::new(&p).parts(&b);
    assert_eq!(StepModel::new(&p).parts_spec(&b, &d), plain, "no speculation: no draft part");
    p.file.speculative = Some(Speculative::new(SpecMethod::Mtp, 2, vec![0.8]));
    let spec = StepModel::new(&p).parts_spec(&b, &d);
    assert!(spec.draft_s > 0.0);
    assert_eq!(spec.total_s, plain.total_s + spec.draft_s);
    // Two MTP passes of one MoE layer and the LM head: more than 2/48 of the weights' time (the LM
    // head is read each pass), far less than the target's step.
    assert!(spec.draft_s > 2.0 / 48.0 * plain.weights_s && spec.draft_s < 0.5 * plain.total_s, "{spec:?}");
    // A prompt chunk in the step: the draft runs over it once more (SGLang's draft extend, vLLM's
    // drafter over every scheduled token), a pass that grows with the chunk and costs no LM head.
    let with_prompt = |p: &Profile, n: u32| {
        let mut d = d;
        capsim::sim::add_draft_prompt(&mut d, 0, n);
        StepModel::new(p).parts_spec(&b, &d).draft_s
    };
    let (short, long) = (with_prompt(&p, 512), with_prompt(&p, 4096));
    assert!(spec.draft_s < short && short < long, "{} {short} {long}", spec.draft_s);
    p.file.speculative = Some(Speculative::new(SpecMethod::Ngram, 2, vec![0.8]));
    let ngram = StepModel::new(&p).parts_spec(&b, &d);
    assert!((ngram.draft_s - 16.0 * capsim::profile::spec::NGRAM_S_PER_SEQ).abs() < 1e-15);
    // n-gram lookups run on the host over the sequences' own tokens: a prompt costs them nothing.
    assert_eq!(with_prompt(&p, 4096), ngram.draft_s);
}

fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap()
}

#[test]
fn bad_flags_name_the_flag() {
    let base = ["simulate", "--concurrency", "2", "--requests", "4"];
    for (extra, flag) in [
        (&["--spec-method", "mtp", "--spec-tokens", "2", "--spec-accept-rate", "1.5"][..], "--spec-accept-rate"),
        (&["--spec-method", "mtp", "--spec-tokens", "2", "--spec-accept-rate", "NaN"][..], "--spec-accept-rate"),
        (&["--spec-method", "mtp", "--spec-tokens", "2", "--spec-accept-rate", "-0.1"][..], "--spec-accept-rate"),
        (&["--spec-method", "mtp", "--spec-tokens", "3", "--spec-accept-rate", "0.9,0.8"][..], "--spec-accept-rate"),
        (&["--spec-method", "mtp", "--spec-tokens", "2", "--spec-accept-rate", "x"][..], "--spec-accept-rate"),
        (&["--spec-method", "mtp", "--spec-tokens", "0"][..], "--spec-tokens"),
        (&["--spec-method", "mtp", "--spec-tokens", "100000"][..], "--spec-tokens"),
        (&["--spec-method", "mtp"][..], "--spec-tokens"),
        (&["--spec-tokens", "2"][..], "--spec-tokens"),
        (&["--spec-accept-rate", "0.5"][..], "--spec-accept-rate"),
        (&["--spec-method", "eagle", "--spec-tokens", "2"][..], "--spec-accept-rate"),
    ] {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let o = capsim(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag), "{args:?}: {err}");
    }
    let o =
        capsim(&[&base[..], &["--spec-method", "ngram", "--spec-tokens", "3", "--spec-accept-rate", "0.4"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn a_profile_carries_its_speculation() {
    let mut p = const_profile("vllm", 0.048, "");
    p.file.speculative = Some(Speculative::new(SpecMethod::Eagle, 3, vec![0.8, 0.6, 0.4]));
    let text = p.file.to_toml();
    assert!(text.contains("[speculative]"), "{text}");
    let back = ProfileFile::parse("t", &text).unwrap().resolve("t", &Catalog::builtin()).unwrap();
    assert_eq!(back.speculative(), p.speculative());
    // A plain profile writes no table.
    assert!(!const_profile("vllm", 0.048, "").file.to_toml().contains("speculative"));
    for (table, field) in [
        ("method = \"mtp\"\ntokens = 2\naccept_rate = [1.2]", "speculative.accept_rate"),
        ("method = \"mtp\"\ntokens = 2\naccept_rate = [0.5, 0.5, 0.5]", "speculative.accept_rate"),
        ("method = \"mtp\"\ntokens = 0\naccept_rate = [0.5]", "speculative.tokens"),
    ] {
        let t = format!("{}\n[speculative]\n{table}\n", const_profile("vllm", 0.048, "").file.to_toml());
        let e = ProfileFile::parse("t", &t).unwrap().resolve("t", &Catalog::builtin()).unwrap_err().to_string();
        assert!(e.contains(field), "{e}");
    }
}

/// Runs of a closed loop at `clients` replayed on `p`, written as a run with the simulated TPOT.
fn synthetic_run(p: &Profile, clients: u32, input: u32, output: u32) -> Run {
    let requests = 8 * clients as u64;
    let w = Workload::fixed(
        Arrivals::ClosedLoop { clients, think_time_s: 0.0, think_exponential: false },
        input,
        output,
        Some(requests),
    )
    .unwrap();
    let out = simulate(p, &w, 1, SimOptions::default());
    let s = capsim::metrics::summarize(&out, 0, 0, 0.0, &capsim::metrics::RequestSlo::default());
    Run {
        source: RunSource {
            file: format!("synthetic-c{clients}.json"),
            index: 0,
            runs_in_file: 1,
            tool: Tool::VllmBenchServe,
            tool_version: None,
            model_id: None,
            engine: None,
        },
        load: RunLoad::Concurrency { clients },
        requests,
        completed: requests,
        failed: 0,
        input_tokens_mean: input as f64,
        output_tokens_mean: output as f64,
        per_request: Vec::new(),
        stats: vec![MeasuredStat {
            metric: "tpot_ms",
            stat: StatKind::Mean,
            value: s.tpot_ms.mean,
            key: "mean_tpot_ms".into(),
        }],
        not_compared: Vec::new(),
        uniform_lengths: None,
        length_percentiles: Default::default(),
    }
}

#[test]
fn calibrate_recovers_a_known_acceptance() {
    // Runs simulated at acceptance 0.7 on a deployment; the fit, on the same physics, finds the rate
    // again. Tolerance 0.03: the deterministic accumulator makes TPOT a step function of the rate
    // (each request's token count per step is an integer), so rates within a few hundredths give the
    // same replay; 0.03 is well inside the span a measured TPOT's few percent of noise would leave.
    let mut p = super::default_profile();
    p.file.speculative = Some(Speculative::new(SpecMethod::Mtp, 3, vec![0.7]));
    let runs: Vec<Run> = [4, 16, 48].iter().map(|&c| synthetic_run(&p, c, 800, 150)).collect();
    p.file.speculative = Some(Speculative::new(SpecMethod::Mtp, 3, vec![0.2]));
    let fit = capsim::calibrate::spec::fit_acceptance(&p, &runs).unwrap();
    assert!((fit.accept_rate - 0.7).abs() <= 0.03, "{fit:?}");
    assert!(fit.median_abs_error_pct < 1.0, "{fit:?}");
    assert!(fit.error_at_0_pct > 0.0 && fit.error_at_1_pct < 0.0, "{fit:?}");
}

#[test]
fn calibrate_runs_writes_the_fitted_acceptance_and_explain_shows_the_draft() {
    let dir = crate::Scratch::new("spec-cal");
    let out = dir.join("out");
    let runs = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/vllm/sweep");
    let o = capsim(&[
        "calibrate",
        "--runs",
        runs,
        "--gpu",
        "H200 SXM",
        "--engine",
        "vllm",
        "--name",
        "specfit",
        "--out",
        out.to_str().unwrap(),
        "--spec-method",
        "mtp",
        "--spec-tokens",
        "2",
    ]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("accept_rate = ") && text.contains("TPOT |error| at the fit"), "{text}");
    let profile = out.join("specfit.toml");
    let pf = ProfileFile::parse("t", &std::fs::read_to_string(&profile).unwrap()).unwrap();
    let s = pf.speculative.clone().unwrap();
    assert_eq!((s.method, s.tokens, s.accept_rate.len()), (SpecMethod::Mtp, 2, 1));
    assert!(s.fit_points.unwrap() > 0 && s.fit_tpot_median_abs_error_pct.is_some());
    // The written profile simulates, and explain shows its draft and verification.
    let o = capsim(&["explain", "--profile", profile.to_str().unwrap(), "--decode", "8", "--context", "1000"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("draft") && text.contains("of which verification") && text.contains("plain step"), "{text}");
    let o = capsim(&["explain", "--profile", profile.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["parts_s"]["draft_s"].as_f64().unwrap() > 0.0);
    assert!(v["speculative"]["verification_s"].as_f64().unwrap() > 0.0);
    // A plain explain has no draft key.
    let o = capsim(&["explain", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["parts_s"].get("draft_s").is_none() && v.get("speculative").is_none());
}

/// explain's speculative step is the simulator's step for the same batch: N requests of 1100
/// tokens sent together prefill in one step, then decode once at context 1100 (2 output tokens), so
/// each one's single inter-token gap is that decode step, which explain prints for
/// `--decode N --context 1100`. explain had built each decode as one (1 + K)-token chunk, a prefill
/// step (issue 25's audit: 69.92 ms against the simulator's 9.21 ms for N = 1 on DeepSeek-R1 with
/// MTP K = 3), and missed the decodes' absorbed-MLA pairs; under attention DP it charged the chunk to
/// one rank. Acceptance does not change the step (only what it emits), so two rates are checked.
#[test]
fn explain_speculative_step_is_the_simulators() {
    let dep = ["--model", "DeepSeek-R1", "--gpu", "B200", "--tp", "8", "--precision", "fp8", "--spec-method", "mtp"];
    let json = |args: &[&str]| -> serde_json::Value {
        let o = capsim(args);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    for (n, rate, layout) in [
        ("1", "0", &[][..]),
        ("6", "0.7", &[][..]),
        ("1", "0", &["--attention-dp", "8", "--ep", "8"][..]),
        ("6", "0.7", &["--attention-dp", "8", "--ep", "8"][..]),
    ] {
        let mut common: Vec<&str> = dep.to_vec();
        common.extend_from_slice(&["--spec-tokens", "3", "--spec-accept-rate", rate]);
        common.extend_from_slice(layout);
        let mut e = vec!["explain", "--decode", n, "--context", "1100", "--json"];
        e.extend_from_slice(&common);
        let ex = json(&e);
        let step_ms = ex["parts_s"]["total_s"].as_f64().unwrap() * 1e3;
        assert_eq!(ex["parts_s"].get("prefill_overhead_s"), None, "{n} {layout:?}: a decode step");
        let mut s =
            vec!["simulate", "--burst", n, "--requests", n, "--input-len", "1100", "--output-len", "2", "--json"];
        s.extend_from_slice(&common);
        let sim = json(&s);
        let itl_ms = sim["itl_ms"]["mean"].as_f64().unwrap();
        assert!(
            (itl_ms - step_ms).abs() < 1e-6,
            "{n} decodes at {rate}, {layout:?}: explain {step_ms} ms, simulate {itl_ms} ms"
        );
    }
}

/// vLLM counts a decode's drafts against max_num_batched_tokens: running decodes take 1 + K in
/// order, the one at the budget's edge fewer drafts, those beyond it wait a step
/// (vllm/v1/core/sched/scheduler.py `schedule`, sim/spec.rs). Before, the drafts were added outside
/// the budget: `simulate ... --max-num-batched-tokens 2 --spec-method mtp --spec-tokens 3` ran 4
/// tokens per sequence a step.
#[test]
fn vllm_drafts_count_against_the_token_budget() {
    let mut p = const_profile("vllm", 0.048, "max_num_batched_tokens = 10");
    p.file.speculative = Some(Speculative::new(SpecMethod::Mtp, 3, vec![0.0]));
    let w = burst(4, 5, 30);
    let (mut max_tokens, mut at_edge) = (0, 0);
    let out = simulate_observed(&p, &w, 7, SimOptions::default(), &mut |v| {
        max_tokens = max_tokens.max(v.shape.n_tokens);
        // Four decodes at a budget of 10: 4 + 4 + 2 (one draft) tokens, the fourth waits.
        if v.shape.n_seqs == 3 && v.shape.n_tokens == 10 && v.shape.max_chunk == 1 {
            at_edge += 1;
        }
    });
    assert_eq!(max_tokens, 10);
    assert!(at_edge > 0);
    assert!(out.records.iter().all(|r| r.output_tokens == 30));
    // With room in the budget every decode verifies its 3 drafts: 4 x 4 tokens.
    let mut p = const_profile("vllm", 0.048, "max_num_batched_tokens = 100");
    p.file.speculative = Some(Speculative::new(SpecMethod::Mtp, 3, vec![0.0]));
    let mut max_tokens = 0;
    simulate_observed(&p, &w, 7, SimOptions::default(), &mut |v| max_tokens = max_tokens.max(v.shape.n_tokens));
    assert_eq!(max_tokens, 20, "the prompts' step");
    let mut decode_max = 0;
    simulate_observed(&p, &w, 7, SimOptions::default(), &mut |v| {
        if v.shape.max_chunk == 1 {
            decode_max = decode_max.max(v.shape.n_tokens);
        }
    });
    assert_eq!(decode_max, 16);
}

/// simulate's scenario states the layout and the speculation it ran (new keys beside the old),
/// and the text header names the speculation. Before, `--attention-dp 4 --ep 8 --spec-method mtp`
/// left only expert_parallel and tensor_parallel in the scenario.
#[test]
fn the_scenario_states_the_layout_and_the_speculation() {
    let mut a = vec!["simulate", "--model", "DeepSeek-R1", "--gpu", "B200", "--tp", "8", "--precision", "fp8"];
    a.extend_from_slice(&["--attention-dp", "4", "--ep", "8", "--spec-method", "mtp", "--spec-tokens", "2"]);
    a.extend_from_slice(&["--spec-accept-rate", "0.5", "--concurrency", "2", "--requests", "6"]);
    let text = capsim(&a);
    assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("speculative decoding: mtp, 2 drafted tokens a step at acceptance 0.5"), "{text}");
    assert!(
        text.contains("layout: TP 8, 4 attention DP rank(s), experts over 8 GPU(s), 1 pipeline stage(s)"),
        "{text}"
    );
    a.push("--json");
    let o = capsim(&a);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["scenario"];
    assert_eq!((s["attention_dp"].as_u64(), s["expert_parallel_size"].as_u64()), (Some(4), Some(8)));
    assert_eq!((s["pipeline_parallel"].as_u64(), s["tensor_parallel"].as_u64()), (Some(1), Some(8)));
    assert_eq!(s["speculative"]["method"], "mtp");
    assert_eq!(s["speculative"]["tokens"], 2);
    assert_eq!(s["speculative"]["accept_rate"], serde_json::json!([0.5]));
    // 1 + 0.5 + 0.25 tokens a step.
    assert_eq!(s["speculative"]["expected_tokens_per_step"], 1.75);
}

/// MTP drafts with the checkpoint's own MTP module: the catalog reads how many a config.json names
/// (DeepSeek's and GLM's num_nextn_predict_layers, Qwen3.5's mtp_num_hidden_layers, MiniMax-M2's
/// num_mtp_modules), and `--spec-method mtp` on a model that names none is said in the caveats
/// (text and --json), not taken silently at another model's acceptance.
#[test]
fn mtp_on_a_model_without_an_mtp_module_is_said() {
    let c = Catalog::builtin();
    for (model, n) in [
        ("DeepSeek-R1", 1),
        ("GLM-5", 1),
        ("MiniMax-M2.5", 3),
        ("Qwen3.5-397B-A17B", 1),
        ("Kimi-K2.5", 0),
        ("Llama-3.1-8B-Instruct", 0),
    ] {
        assert_eq!(c.model(model).unwrap().mtp_modules, n, "{model}");
    }
    let caveats = |model: &str| -> Vec<String> {
        let flags = "--gpu B200 --tp 8 --precision fp8 --spec-method mtp --spec-tokens 2 --burst 2 --json";
        let o = capsim(&[&["simulate", "--model", model][..], &flags.split(' ').collect::<Vec<_>>()].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["scenario"]["caveats"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect()
    };
    assert!(caveats("Llama-3.1-70B").iter().any(|c| c.contains("names no MTP module")));
    assert!(!caveats("DeepSeek-R1").iter().any(|c| c.contains("MTP module")));
}
