//! Issue 25: attention data parallelism, expert-parallel size and pipeline stages
//! (profile/parallel.rs, sim/step_large.rs): hand-computed steps, memory, errors naming the flag, and
//! plain deployments unchanged.

use capsim::catalog::Catalog;
use capsim::profile::{Profile, ProfileFile};
use capsim::sim::{BatchShape, StepModel};
use std::process::{Command, Output};

pub(crate) fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap()
}

/// Qwen3-Coder-30B-A3B (MoE: 48 layers, 128 experts, top-8) on H200s with `gpu` keys added and the
/// given costs; bandwidth and FLOP/s as given (1e30: the matmuls and reads take no time).
pub(crate) fn profile(gpu: &str, engine: &str, step_s: f64, per_seq_s: f64, bw: f64) -> Profile {
    profile_of("vllm", gpu, engine, step_s, per_seq_s, bw)
}

/// [`profile`] under the engine `kind`.
fn profile_of(kind: &str, gpu: &str, engine: &str, step_s: f64, per_seq_s: f64, bw: f64) -> Profile {
    let text = format!(
        r#"
name = "dp"
[model]
name = "Qwen3-Coder-30B-A3B-Instruct"
weight_dtype = "fp8"
kv_dtype = "bf16"
[gpu]
name = "H200 SXM"
{gpu}
[engine]
kind = "{kind}"
{engine}
[coefficients]
step_overhead_s = {step_s}
per_seq_overhead_s = {per_seq_s}
bandwidth_eff_bytes_s = {bw:e}
matmul_flops_eff_s = 1e30
attention_flops_eff_s = 1e30
request_overhead_s = 0.0
[provenance]
method = "test"
"#
    );
    ProfileFile::parse("test", &text).unwrap().resolve("test", &Catalog::builtin()).unwrap()
}

pub(crate) fn decodes(n: u32, context: u32) -> BatchShape {
    let mut b = BatchShape::default();
    for _ in 0..n {
        b.add_chunk(context, 1);
    }
    b
}

/// NCCL's ring latency and the link's usable bandwidth, as catalog::gpu::Collectives states them.
const BASE_S: f64 = 6.6e-6;
const HOP_S: f64 = 0.6e-6;

#[test]
fn attention_dp_step_is_the_busiest_ranks_share_plus_the_all_to_all() {
    // 4 GPUs, 4 ranks of one GPU each, experts over all 4: no all-reduce inside a rank (one GPU), the
    // MoE dispatch and combine across the ranks in every MoE layer.
    let p = profile("tensor_parallel = 4\nattention_dp = 4\nexpert_parallel_size = 4", "", 0.01, 1e-3, 1e30);
    let m = StepModel::new(&p);
    let parts = m.parts(&decodes(10, 100));
    // Host: ceil(10 / 4) = 3 sequences on the busiest rank.
    assert!((parts.per_seq_s - 3e-3).abs() < 1e-15, "{}", parts.per_seq_s);
    assert_eq!(parts.communication_s, 0.0);
    // All-to-all by hand: each GPU sends its tokens' top-8 copies of the hidden state (2048 x 2 bytes),
    // a quarter of the 10 tokens' over 4 GPUs, 3/4 of it leaving the GPU; twice per MoE layer.
    let a = &p.arch;
    assert_eq!((a.hidden, a.n_moe_layers(), a.moe.as_ref().unwrap().n_experts_per_token), (2048, 48, 8));
    let bw = p.gpu.link_bw_gb_s * 1e9 * 0.8;
    let per_gpu_bytes = 10.0 * 8.0 * 2048.0 * 2.0 / 4.0;
    let one = BASE_S + 3.0 * HOP_S + 0.75 * per_gpu_bytes / bw;
    let expected = 2.0 * 48.0 * one;
    assert!((parts.all_to_all_s - expected).abs() < 1e-12, "{} vs {expected}", parts.all_to_all_s);
    let total = 0.01 + 3e-3 + expected;
    assert!((parts.total_s - total).abs() < 1e-9, "{} vs {total}", parts.total_s);
}

/// The learned fixed time of an exchange between attention-DP ranks: paid by each dispatch and
/// combine (twice per MoE layer) where tokens move between ranks, by none where the experts are
/// split by TP inside one rank (no exchange between ranks).
#[test]
fn the_exchange_latency_is_paid_twice_per_moe_layer_between_ranks() {
    let gpu = "tensor_parallel = 4\nattention_dp = 4\nexpert_parallel_size = 4";
    let base = profile(gpu, "", 0.01, 1e-3, 1e30);
    let mut with = base.clone();
    with.coefficients.exchange_latency_s = 50e-6;
    let shape = decodes(10, 100);
    let (p0, p1) = (StepModel::new(&base).parts(&shape), StepModel::new(&with).parts(&shape));
    let added = 2.0 * 48.0 * 50e-6;
    assert!((p1.all_to_all_s - p0.all_to_all_s - added).abs() < 1e-12, "{} vs {}", p1.all_to_all_s, p0.all_to_all_s);
    assert!((p1.total_s - p0.total_s - added).abs() < 1e-9);
    // Experts over TP only, one rank: no exchange between ranks to pay it.
    let mut one_rank = profile("tensor_parallel = 4\nexpert_parallel_size = 2", "", 0.01, 1e-3, 1e30);
    let before = StepModel::new(&one_rank).parts(&shape).total_s;
    one_rank.coefficients.exchange_latency_s = 50e-6;
    assert_eq!(StepModel::new(&one_rank).parts(&shape).total_s, before);
}

#[test]
fn attention_dp_replicates_the_dense_weights_and_multiplies_the_batch_limits() {
    let engine = "max_num_seqs = 64\nmax_num_batched_tokens = 2048";
    let plain = profile("tensor_parallel = 4", engine, 0.01, 0.0, 1e12);
    let dp = profile("tensor_parallel = 4\nattention_dp = 4", engine, 0.01, 0.0, 1e12);
    // Each rank has its own scheduler: 4 x 64 sequences and 4 x 2048 tokens a step over the engine.
    assert_eq!((dp.engine.max_num_seqs, dp.engine.max_num_batched_tokens), (256, 8192));
    assert_eq!((plain.engine.max_num_seqs, plain.engine.max_num_batched_tokens), (64, 2048));
    // Weights: the attention, dense and embedding weights once per rank (3 more copies), the experts once.
    let a = &plain.arch;
    let m = a.moe.as_ref().unwrap();
    let experts = a.n_moe_layers() as f64 * m.n_experts as f64 * a.expert_params() as f64 * 1.0;
    let dense = a.weight_bytes(capsim::units::Dtype::Fp8) - experts;
    let (mp, md) = (plain.engine.memory.as_ref().unwrap(), dp.engine.memory.as_ref().unwrap());
    assert!((md.weights_bytes - mp.weights_bytes - 3.0 * dense).abs() < 1.0);
    // The KV per token is the same (4 KV heads: one per GPU at TP 4, one copy per rank at TP 1), so the
    // capacity is what the memory left says: N ranks' caches together.
    assert!((md.kv_bytes - (mp.kv_bytes - 3.0 * dense)).abs() < 1.0);
    let kv_per_token = a.kv_bytes_per_token(capsim::units::Dtype::Bf16);
    assert_eq!(dp.engine.kv_capacity_tokens, (md.kv_bytes / kv_per_token) as u64);
    // A decode step reads the dense weights 4 times (each rank its own copy).
    let (sp, sd) = (StepModel::new(&plain), StepModel::new(&dp));
    let b = decodes(8, 1000);
    let dense_read = a.always_read_params() as f64 * 1.0;
    let extra = sd.parts(&b).weights_s - sp.parts(&b).weights_s;
    assert!((extra - 3.0 * dense_read / (1e12 * 4.0)).abs() < 1e-12, "{extra}");
}

#[test]
fn pipeline_step_is_one_micro_batch_through_every_stage_plus_the_sends() {
    // 2 stages of one GPU: a period carries 2 micro-batches of ceil(8 / 2) = 4 sequences; the step
    // model's period is one micro-batch's way through all 48 layers plus its one send between stages.
    let p = profile("tensor_parallel = 1\npipeline_parallel = 2", "", 0.01, 1e-3, 1e12);
    let m = StepModel::new(&p);
    let parts = m.parts(&decodes(8, 1000));
    // Weights: both stages' layers read once per micro-batch, the experts a 4-token batch touches.
    assert!((parts.weights_s - m.weight_bytes(4) / 1e12).abs() < 1e-15);
    // KV: the micro-batch's share, 4 x 1001 tokens of context.
    let kv = p.arch.kv_bytes_per_token(capsim::units::Dtype::Bf16);
    assert!((parts.kv_s - 4.0 * 1001.0 * kv / 1e12).abs() < 1e-12, "{}", parts.kv_s);
    // Send by hand: 4 tokens x 2048 x 2 bytes over NVLink as NCCL sends it.
    let bw = p.gpu.link_bw_gb_s * 1e9 * 0.8;
    let send = BASE_S + HOP_S + 4.0 * 2048.0 * 2.0 / bw;
    assert!((parts.pipeline_s - send).abs() < 1e-15, "{} vs {send}", parts.pipeline_s);
    // One scheduler runs every micro-batch: all 8 sequences' host work.
    assert!((parts.per_seq_s - 8e-3).abs() < 1e-15);
    // A lone request pays a whole traversal: the bubble.
    let lone = m.parts(&decodes(1, 1000));
    assert!((lone.weights_s - m.weight_bytes(1) / 1e12).abs() < 1e-15);
    // Memory over both stages' GPUs.
    assert_eq!(p.engine.memory.as_ref().unwrap().total_bytes, 2.0 * p.gpu.memory_bytes());
}

#[test]
fn plain_layouts_take_the_plain_path() {
    // attention_dp = 1, pipeline_parallel = 1 and expert_parallel_size = tp are the plain expert-parallel
    // profile: same resolved engine, same step to the bit.
    let plain = profile("tensor_parallel = 4\nexpert_parallel = true", "", 0.01, 1e-4, 3e12);
    let stated = profile(
        "tensor_parallel = 4\nattention_dp = 1\nexpert_parallel_size = 4\npipeline_parallel = 1",
        "",
        0.01,
        1e-4,
        3e12,
    );
    assert!(stated.expert_parallel);
    assert_eq!(plain.engine, stated.engine);
    let (a, b) = (StepModel::new(&plain), StepModel::new(&stated));
    for shape in [decodes(1, 10), decodes(37, 5000)] {
        assert_eq!(a.parts(&shape), b.parts(&shape));
        assert_eq!(a.parts(&shape).all_to_all_s, 0.0);
    }
    // A plain profile's file and JSON gain no keys.
    let toml = plain.file.to_toml();
    assert!(
        !toml.contains("attention_dp") && !toml.contains("pipeline_parallel") && !toml.contains("expert_parallel_size")
    );
    let json = serde_json::to_string(&a.parts(&decodes(3, 10))).unwrap();
    assert!(!json.contains("all_to_all_s") && !json.contains("pipeline_s"), "{json}");
}

#[test]
fn bad_layouts_are_refused_naming_the_flag() {
    let err = |args: &[&str]| {
        let o = capsim(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    let e = err(&["explain", "--tp", "4", "--attention-dp", "8"]);
    assert!(e.contains("--attention-dp") && e.contains("only 4 GPUs"), "{e}");
    let e = err(&["explain", "--tp", "4", "--attention-dp", "3"]);
    assert!(e.contains("--attention-dp") && e.contains("do not divide"), "{e}");
    let e = err(&["explain", "--tp", "4", "--ep", "3"]);
    assert!(e.contains("--ep") && e.contains("does not divide the 4 GPUs"), "{e}");
    let e = err(&["explain", "--tp", "8", "--ep", "8", "--expert-parallel", "--attention-dp", "0"]);
    assert!(e.contains("--attention-dp"), "{e}");
    let e = err(&["explain", "--pp", "49"]);
    assert!(e.contains("--pp") && e.contains("48 layers"), "{e}");
    let e = err(&["explain", "--model", "Llama-3.1-8B-Instruct", "--tp", "2", "--attention-dp", "2"]);
    assert!(e.contains("--attention-dp") && e.contains("dense model"), "{e}");
    // Experts the EP size does not divide: 128 experts over 6 GPUs (6 ranks of one GPU each).
    let e = err(&["explain", "--tp", "6", "--attention-dp", "6", "--ep", "6"]);
    assert!(e.contains("--ep") && e.contains("128 routed experts"), "{e}");
}

/// Redundant experts (SGLang --ep-num-redundant-experts): 128 experts plus 16 copies fill an EP group
/// of 6 or 12 GPUs evenly; their weights are resident memory, one expert's bytes per copy, and a step
/// reads (128 + 16) / 128 of the touched experts' bytes (each copy on its own GPU reads them).
#[test]
fn redundant_experts_fill_an_ep_group_the_experts_do_not_divide() {
    let engine = "max_num_seqs = 64\nmax_num_batched_tokens = 2048";
    let with = |r: u32| {
        profile(
            &format!("tensor_parallel = 8\nattention_dp = 8\nexpert_parallel_size = 8\nredundant_experts = {r}"),
            engine,
            0.01,
            0.0,
            1e12,
        )
    };
    let (none, copies) = (with(0), with(16));
    assert_eq!(copies.parallel.redundant_experts, 16);
    let a = &none.arch;
    let one_expert = a.n_moe_layers() as f64 * a.expert_params() as f64 * 1.0;
    let (m0, m16) = (none.engine.memory.as_ref().unwrap(), copies.engine.memory.as_ref().unwrap());
    assert!((m16.weights_bytes - m0.weights_bytes - 16.0 * one_expert).abs() < 1.0);
    assert!(m16.kv_bytes < m0.kv_bytes && copies.engine.kv_capacity_tokens < none.engine.kv_capacity_tokens);
    let b = decodes(64, 1000);
    let (p0, p16) = (StepModel::new(&none).parts(&b), StepModel::new(&copies).parts(&b));
    let dense = a.always_read_params() as f64 * 1.0 * 8.0 / (1e12 * 8.0);
    assert!(((p16.weights_s - dense) - (p0.weights_s - dense) * 144.0 / 128.0).abs() < 1e-12, "{p0:?} {p16:?}");
    assert_eq!((p16.kv_s, p16.all_to_all_s), (p0.kv_s, p0.all_to_all_s));

    let run = |args: &[&str]| capsim(&[&["explain", "--tp", "6", "--attention-dp", "6", "--ep", "6"], args].concat());
    let o = run(&["--redundant-experts", "16"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("redundant experts: 16 copies beside the 128 routed experts, 24 slots per GPU"), "{out}");
    let err = |args: &[&str]| {
        let o = run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    // Without copies the refusal says how many would fill the group (128 = 6 x 21 + 2: 4 more).
    let e = err(&[]);
    assert!(e.contains("--ep") && e.contains("(4 or more, a multiple of 6 apart"), "{e}");
    let e = err(&["--redundant-experts", "5"]);
    assert!(e.contains("--redundant-experts") && e.contains("133 slots"), "{e}");
    let e = capsim(&["explain", "--tp", "2", "--redundant-experts", "2"]);
    let e = String::from_utf8_lossy(&e.stderr);
    assert!(e.contains("--redundant-experts") && e.contains("need expert parallelism"), "{e}");
    let e = err(&["--redundant-experts", "70000"]);
    assert!(e.contains("--redundant-experts") && e.contains("at most 65536"), "{e}");
    // A pool's own flag names the pool.
    let o = capsim(&[
        "simulate",
        "--prefill-workers",
        "1",
        "--decode-workers",
        "1",
        "--decode-redundant-experts",
        "4",
        "--concurrency",
        "2",
        "--requests",
        "4",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("--decode-redundant-experts") && e.contains("need expert parallelism"), "{e}");
}

#[test]
fn explain_shows_the_all_to_all_and_the_pipeline() {
    let o = capsim(&["explain", "--tp", "4", "--attention-dp", "4", "--ep", "4", "--decode", "64"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("all-to-all across DP ranks") && out.contains("4 attention DP rank(s)"), "{out}");
    // The embedded learned model's exchange latency, named where it is paid.
    assert!(out.contains("us fixed per exchange between ranks"), "{out}");
    let o = capsim(&["explain", "--pp", "2", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("\"pipeline_s\""), "{out}");
    // A plain explain is as before: no new rows.
    let o = capsim(&["explain"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(!out.contains("all-to-all across DP ranks") && !out.contains("pipeline sends") && !out.contains("layout:"));
}

/// A TensorRT-LLM profile of 2 attention-DP ranks with steps of exactly 10 ms, and `balance` (its
/// attention_dp_* keys) in its engine table.
fn trt_two_ranks(balance: &str) -> Profile {
    profile_of("trtllm", "tensor_parallel = 2\nattention_dp = 2", balance, 0.01, 0.0, 1e30)
}

/// The balance on, holding a context at most 4 iterations.
const BALANCE_4: &str =
    "attention_dp_balance = true\nattention_dp_timeout_iters = 4\nattention_dp_batching_wait_iters = 0";

/// A closed loop of 5 clients, 100-token prompts, outputs of 5 to 40 tokens, so requests finish one
/// by one and their successors arrive alone.
fn five_clients(requests: u64) -> capsim::workload::Workload {
    use capsim::workload::{Arrivals, LengthDist, Workload};
    let mut w = Workload::fixed(
        Arrivals::ClosedLoop { clients: 5, think_time_s: 0.0, think_exponential: false },
        100,
        20,
        Some(requests),
    )
    .unwrap();
    w.spec.classes[0].output = LengthDist::Uniform { min: 5, max: 40 };
    w
}

#[test]
fn trtllm_balance_holds_contexts_until_every_rank_has_one_or_the_timeout() {
    use capsim::sim::{simulate, SimOptions};
    let w = five_clients(200);
    let ttfts = |p: &Profile| {
        let out = simulate(p, &w, 7, SimOptions { horizon_s: 1e6, ..Default::default() });
        assert_eq!(out.records.len(), 200);
        out.records.iter().map(|r| r.ttft_s()).collect::<Vec<_>>()
    };
    let off = ttfts(&trt_two_ranks(""));
    // A step is 10 ms plus the MoE exchange between the two ranks (under 1.5 ms here).
    assert!(off.iter().all(|&t| (0.01..0.0115).contains(&t)), "without balance a context runs in the next step");
    let on_profile = trt_two_ranks(BALANCE_4);
    assert_eq!(on_profile.engine.attention_dp_balance.map(|b| (b.ranks, b.timeout_iters)), Some((2, 4)));
    let on = ttfts(&on_profile);
    // A lone context waits for a second one or for 4 held iterations, then runs in its step: at
    // most 4 + 1 steps from its arrival.
    let max = on.iter().cloned().fold(0.0, f64::max);
    assert!(max <= 5.0 * 0.0115, "{max}");
    assert!(on.iter().any(|&t| t > 0.03), "some contexts were held");
}

/// A disaggregated decode worker's requests arrive with their prompt's KV: TensorRT-LLM schedules
/// them apart from contexts (py_executor's `fitting_disagg_gen_init_requests`), so its attention-DP
/// balance holds none of them; and a prefill worker generates nothing, so "some rank has no
/// generation request" releases its contexts at once. The same run with either pool's balance on
/// or off: the same records.
#[test]
fn the_balance_holds_no_handed_over_request() {
    use capsim::profile::disagg::Disaggregated;
    use capsim::sim::{simulate_disaggregated, SimOptions};
    let w = five_clients(100);
    let run = |prefill: &str, decode: &str| {
        let d = Disaggregated::new(trt_two_ranks(prefill), trt_two_ranks(decode), 1, 1);
        let out = simulate_disaggregated(&d, &w, 3, SimOptions { horizon_s: 1e6, ..Default::default() });
        assert_eq!(out.records.len(), 100);
        out.records
    };
    let off = run("", "");
    assert_eq!(run("", BALANCE_4), off, "the decode pool's balance holds nothing");
    assert_eq!(run(BALANCE_4, ""), off, "nor the prefill pool's");
}

/// A prompt chunk under attention DP sits on one rank: that rank computes the whole chunk over its
/// tp / N GPUs while the others wait at the MoE layers. Four ranks of one GPU each therefore spend
/// four times what TP 4 without attention DP spends on the chunk's dense layers, attention and KV
/// reads (the same GPUs' coefficients), not the same (the balanced split, which gave each rank a
/// quarter of the chunk). Decode-only steps keep the balanced split.
#[test]
fn a_prompt_chunk_runs_on_one_rank() {
    let parts = |extra: &[&str], decode: &str, prefill: &str| {
        let mut a = vec!["explain", "--tp", "4", "--ep", "4", "--decode", decode, "--prefill", prefill, "--json"];
        a.extend_from_slice(extra);
        let o = capsim(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["parts_s"].clone()
    };
    let dp = parts(&["--attention-dp", "4"], "0", "4096");
    let tp = parts(&[], "0", "4096");
    for k in ["dense_matmul_s", "attention_s", "kv_s"] {
        let (a, b) = (dp[k].as_f64().unwrap(), tp[k].as_f64().unwrap());
        assert!(b > 0.0 && (a / (4.0 * b) - 1.0).abs() < 1e-9, "{k}: {a} against 4 x {b}");
    }
    // 64 decodes alone: each rank computes its 16 sequences on its one GPU, the time TP 4 takes for
    // all 64 over four.
    let dp = parts(&["--attention-dp", "4"], "64", "0");
    let tp = parts(&[], "64", "0");
    let (a, b) = (dp["dense_matmul_s"].as_f64().unwrap(), tp["dense_matmul_s"].as_f64().unwrap());
    assert!((a / b - 1.0).abs() < 1e-9, "decode: {a} against {b}");
}

/// The KV replication note says what attention DP stores: each rank holds its own requests' KV over
/// its tp / attention_dp GPUs. DeepSeek-R1's MLA latent is kept whole on every GPU of a group, so TP
/// 8 stores it 8 times; with 8 ranks of one GPU each a request's KV is stored once, with 2 ranks of 4
/// GPUs 4 times. The note (text and JSON caveats) follows.
#[test]
fn the_kv_replication_note_follows_attention_dp() {
    let caveats = |dp: &str| -> Vec<String> {
        let mut a = vec!["simulate", "--model", "DeepSeek-R1", "--gpu", "B200", "--tp", "8", "--precision", "fp8"];
        a.extend_from_slice(&["--concurrency", "1", "--requests", "1", "--input-len", "100", "--output-len", "2"]);
        if dp != "1" {
            a.extend_from_slice(&["--attention-dp", dp]);
        }
        let o = capsim(&[&a[..], &["--json"]].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let text = String::from_utf8_lossy(&capsim(&a).stdout).to_string();
        let c: Vec<String> =
            v["scenario"]["caveats"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
        for note in c.iter().filter(|c| c.contains("KV cache")) {
            assert!(text.contains(note.as_str()), "the text prints the JSON's note: {text}");
        }
        c.into_iter().filter(|c| c.contains("KV cache")).collect()
    };
    let plain = caveats("1");
    assert!(plain.len() == 1 && plain[0].contains("stored 8 times across the 8 GPUs"), "{plain:?}");
    let eight = caveats("8");
    assert_eq!(eight.len(), 1, "{eight:?}");
    assert!(!eight[0].contains("8 times"), "{eight:?}");
    assert!(eight[0].contains("each of the 8 attention-DP ranks") && eight[0].contains("once"), "{eight:?}");
    let two = caveats("2");
    assert_eq!(two.len(), 1, "{two:?}");
    assert!(two[0].contains("stored 4 times across each") && two[0].contains("2 attention-DP ranks"), "{two:?}");
}

/// One sequence's prompt chunk is one micro-batch: it passes every stage in turn, so its step is
/// pp 1's plus the P - 1 sends of its activations. The audit of issue 25 found the chunk split over
/// the stages (`LargeStep::shares` gave each micro-batch ceil(T / P) of a lone prompt's tokens):
/// `explain --decode 0 --prefill 2048 --pp 4` on Llama-3.1-70B showed dense matmuls of 12.46 ms
/// against 49.84 ms at pp 1, and a lone prompt's TTFT fell from 0.116 s at pp 1 to 0.061 s at pp 4.
#[test]
fn a_prompt_chunk_is_one_micro_batch_through_every_stage() {
    let one = profile("tensor_parallel = 1", "", 0.01, 1e-3, 1e12);
    let two = profile("tensor_parallel = 1\npipeline_parallel = 2", "", 0.01, 1e-3, 1e12);
    let mut b = BatchShape::default();
    b.add_chunk(0, 2048);
    let (p1, p2) = (StepModel::new(&one).parts(&b), StepModel::new(&two).parts(&b));
    for (name, x, y) in [
        ("weights", p1.weights_s, p2.weights_s),
        ("kv", p1.kv_s, p2.kv_s),
        ("attention", p1.attention_s, p2.attention_s),
        ("dense", p1.dense_matmul_s, p2.dense_matmul_s),
        ("experts", p1.expert_matmul_s, p2.expert_matmul_s),
    ] {
        assert!((x - y).abs() <= 1e-12 * x.abs(), "{name}: pp 1 {x}, pp 2 {y}");
    }
    // The send by hand: 2048 tokens x 2048 x 2 bytes over NVLink as NCCL sends it.
    let send = BASE_S + HOP_S + 2048.0 * 2048.0 * 2.0 / (two.gpu.link_bw_gb_s * 1e9 * 0.8);
    assert!((p2.pipeline_s - send).abs() < 1e-15, "{} vs {send}", p2.pipeline_s);
    assert!((p2.total_s - p1.total_s - send).abs() < 1e-12, "{} vs {} + {send}", p2.total_s, p1.total_s);
    // Beside 63 decodes at 4 stages, the chunk's micro-batch still carries the whole chunk (its
    // dense work is the chunk's, more than the balanced (2048 + 63) / 4 tokens).
    let four = profile("tensor_parallel = 1\npipeline_parallel = 4", "", 0.01, 1e-3, 1e12);
    for _ in 0..63 {
        b.add_chunk(1000, 1);
    }
    let m4 = StepModel::new(&four);
    let (mixed, alone) = (m4.parts(&b).weights_s, m4.weight_bytes(2048) / 1e12);
    assert!((mixed - alone).abs() < 1e-15, "{mixed} vs {alone}");
}

/// The same through the CLI on the audit's deployment: a lone prompt's TTFT does not fall as
/// stages are added (it rises by the sends), and explain's prefill step keeps pp 1's matmuls.
#[test]
fn pipeline_stages_do_not_shorten_a_lone_prompt() {
    let dep = ["--model", "Llama-3.1-70B", "--gpu", "H100 SXM", "--tp", "4", "--precision", "fp8"];
    let ttft = |pp: &str| {
        let mut a = vec!["simulate", "--concurrency", "1", "--requests", "5", "--input-len", "2048"];
        a.extend_from_slice(&dep);
        a.extend_from_slice(&["--output-len", "uniform:200:200", "--pp", pp, "--json"]);
        let o = capsim(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v["ttft_s"]["mean"].as_f64().unwrap(), v["tpot_ms"]["mean"].as_f64().unwrap())
    };
    let (t1, tpot1) = ttft("1");
    let (t4, tpot4) = ttft("4");
    assert!(t4 >= t1 && t4 < 1.1 * t1, "TTFT {t4} at pp 4 against {t1} at pp 1");
    // Decode steps keep the balanced split: a lone decode's TPOT as before (within the sends).
    assert!((tpot4 / tpot1 - 1.0).abs() < 0.02, "TPOT {tpot4} against {tpot1}");
    let dense = |pp: &str| {
        let mut a = vec!["explain", "--decode", "0", "--prefill", "2048", "--pp", pp, "--json"];
        a.extend_from_slice(&dep);
        let o = capsim(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["parts_s"]["dense_matmul_s"].as_f64().unwrap()
    };
    let (d1, d4) = (dense("1"), dense("4"));
    assert!((d4 / d1 - 1.0).abs() < 1e-9, "dense matmuls {d4} at pp 4 against {d1} at pp 1");
}

/// A decode's context is read by the micro-batch and rank that hold its sequence: with B sequences
/// over P stages and N attention-DP ranks the step waits for the busiest, ceil(ceil(B / P) / N) of
/// them, not the balanced B / (P N). Before, a lone decode at --pp 2 read half its KV per period
/// (Llama-3.1-70B FP8, 4 x H100 per stage, context 8,000: TPOT 11.46 ms at pp 2, 11.41 at pp 4,
/// below pp 1's 11.58): by hand, one decode at pp 2 reads what it reads at pp 1, two decodes at pp
/// 2 (one per micro-batch) what one does, three (two in the busiest) what two do at pp 1.
#[test]
fn a_decode_reads_its_context_on_the_micro_batch_that_holds_it() {
    let kv = |decode: &str, pp: &str| -> (f64, f64) {
        let o = capsim(&[
            "explain",
            "--model",
            "Llama-3.1-70B",
            "--gpu",
            "H100 SXM",
            "--tp",
            "4",
            "--precision",
            "fp8",
            "--decode",
            decode,
            "--context",
            "8000",
            "--pp",
            pp,
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v["parts_s"]["kv_s"].as_f64().unwrap(), v["parts_s"]["attention_s"].as_f64().unwrap())
    };
    let close = |a: (f64, f64), b: (f64, f64)| (a.0 / b.0 - 1.0).abs() < 1e-9 && (a.1 / b.1 - 1.0).abs() < 1e-9;
    assert!(close(kv("1", "2"), kv("1", "1")), "{:?} {:?}", kv("1", "2"), kv("1", "1"));
    assert!(close(kv("2", "2"), kv("1", "1")));
    assert!(close(kv("3", "2"), kv("2", "1")));
    assert!(close(kv("8", "2"), kv("4", "1")), "balanced: half the sequences per micro-batch");
}

/// A GB200 NVL72 rack is one NVLink domain of 72 GPUs, and its wide deployments use all of them:
/// DeepSeek-R1 over 72 attention-DP ranks with its experts spread over the 72 (256 + 32
/// redundant). --tp 72 was refused ("must be in 1..=64"); a TP group past the rack still is.
#[test]
fn a_whole_nvl72_rack_is_one_replica() {
    let args = |tp: &'static str| {
        vec![
            "simulate",
            "--model",
            "DeepSeek-R1",
            "--gpu",
            "GB200",
            "--tp",
            tp,
            "--attention-dp",
            tp,
            "--ep",
            tp,
            "--redundant-experts",
            "32",
            "--precision",
            "nvfp4",
            "--concurrency",
            "64",
            "--requests",
            "128",
            "--input-len",
            "1024",
            "--output-len",
            "64",
        ]
    };
    let o = capsim(&args("72"));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = capsim(&args("80"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--tp") && err.contains("1..=72"), "{err}");
}

/// `calibrate --runs` of an attention-DP deployment takes the layout flags (they were dropped, and
/// the profile written was plain TP): the profile states the layout and holds the exchange between
/// ranks at the learned value, its command names the flags, and a bad layout is refused naming its
/// flag.
#[test]
fn calibrate_runs_takes_the_layout_flags() {
    let run = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "calibration/corpus/inferencex-dsr1/dsr1-fp4-b200-trt-tp4ep4-dpa-1.2.0rc6.post2/1024x1024_c256_2026-02-03.json",
    );
    let dir = crate::Scratch::new("dp-calibrate");
    let out = dir.join("out");
    let run = run.to_str().unwrap();
    let base = [
        "calibrate",
        "--runs",
        run,
        "--model",
        "deepseek-r1",
        "--gpu",
        "b200",
        "--tp",
        "4",
        "--precision",
        "nvfp4",
        "--kv-dtype",
        "fp8",
        "--engine",
        "trtllm",
        "--name",
        "dp",
        "--max-evals",
        "10",
        "--out",
    ];
    let mut args: Vec<&str> = base.to_vec();
    args.extend([out.to_str().unwrap(), "--attention-dp", "4", "--ep", "4"]);
    let o = capsim(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(out.join("dp.toml")).unwrap();
    assert!(text.contains("attention_dp = 4") && text.contains("expert_parallel_size = 4"), "{text}");
    assert!(text.contains("--attention-dp 4 --ep 4"), "{text}");
    let learned = Catalog::builtin().learned.and_then(|m| m.exchange).expect("a learned exchange");
    let p = ProfileFile::parse("dp.toml", &text).unwrap().resolve("dp", &Catalog::builtin()).unwrap();
    assert_eq!(p.coefficients.exchange_latency_s, learned.latency_s);
    let mut bad: Vec<&str> = base.to_vec();
    bad.extend([out.to_str().unwrap(), "--attention-dp", "3"]);
    let o = capsim(&bad);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--attention-dp") && err.contains("do not divide"), "{err}");
}

/// explain says which deployment flags act only on scheduling across steps instead of taking them
/// silently, and its step is the same with or without them.
#[test]
fn explain_says_a_scheduling_flag_does_not_change_the_step() {
    let plain = capsim(&["explain", "--json"]);
    let o = capsim(&["explain", "--json", "--prefix-caching", "on", "--watermark", "0.05"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("note: --prefix-caching acts on scheduling") && err.contains("note: --watermark"), "{err}");
    assert_eq!(o.stdout, plain.stdout);
    assert!(String::from_utf8_lossy(&plain.stderr).is_empty());
}
