//! Issue 10: KV capacity as each engine computes it, behaviour under memory pressure, TensorRT-LLM.

use super::const_profile;
use capsim::catalog::Catalog;
use capsim::metrics::{summarize, RequestSlo, Summary};
use capsim::profile::{EngineKind, Profile, ProfileFile};
use capsim::sim::{simulate, simulate_observed, SimOptions, SimOutput, StepView};
use capsim::units::Dtype;
use capsim::workload::{Arrivals, Workload};

/// A deployment with the default profile's coefficients (hand-written, so that a refit cannot move
/// these tests) and the engine's own defaults.
fn deployment(model: &str, dtype: &str, gpu: &str, tp: u32, engine: &str, extra: &str) -> Profile {
    let text = format!(
        r#"
name = "t"
[model]
name = "{model}"
weight_dtype = "{dtype}"
kv_dtype = "bf16"
[gpu]
name = "{gpu}"
tensor_parallel = {tp}
[engine]
kind = "{engine}"
{extra}
[coefficients]
step_overhead_s = 0.005
per_seq_overhead_s = 0.00009
bandwidth_eff_bytes_s = 2.2e12
matmul_flops_eff_s = 5.0e14
attention_flops_eff_s = 4.0e14
request_overhead_s = 0.0
mem_compute_overlap = 0.6
[provenance]
method = "test"
"#
    );
    ProfileFile::parse("test", &text).unwrap().resolve("test", &Catalog::builtin()).unwrap()
}

fn close(got: u64, want: f64) {
    let rel = (got as f64 - want).abs() / want;
    assert!(rel < 1e-6 || (got as f64 - want).abs() <= 1.0, "got {got} tokens, formula gives {want:.1}");
}

const H100: f64 = 85_017_493_504.0; // torch.cuda.mem_get_info() total, measured
const H200: f64 = 150_109_880_320.0;

/// Each engine's formula written out with the numbers of three deployments: Llama-3.1-8B BF16 on one
/// H100, Qwen3-Coder-30B-A3B FP8 on one H200, Llama-3.3-70B BF16 on four H100s.
#[test]
fn kv_capacity_by_each_engines_formula() {
    let c = Catalog::builtin();
    let w8 = c.model("Llama-3.1-8B-Instruct").unwrap().weight_bytes(Dtype::Bf16);
    let w30 = c.model("Qwen3-Coder-30B-A3B-Instruct").unwrap().weight_bytes(Dtype::Fp8);
    let w70 = c.model("Llama-3.3-70B-Instruct").unwrap().weight_bytes(Dtype::Bf16);
    // The weights are the parameter counts at 2 (BF16) or about 1 (FP8) bytes.
    assert!((w8 / 2.0 / 8.03e9 - 1.0).abs() < 0.005, "{w8}");
    assert!((w70 / 2.0 / 70.6e9 - 1.0).abs() < 0.005, "{w70}");
    assert!(w30 > 30.5e9 && w30 < 31.5e9, "{w30}");
    // KV bytes per token, BF16: layers x KV heads x head dim x 2 (K, V) x 2 bytes.
    let (kv8, kv30, kv70) = (32.0 * 8.0 * 128.0 * 4.0, 48.0 * 4.0 * 128.0 * 4.0, 80.0 * 8.0 * 128.0 * 4.0);
    // Activation peak per GPU: max(8192 tokens x hidden x 34 B, min(seqs, 8192) x vocab x 8 B).
    let act = |hidden: f64, vocab: f64, seqs: f64| (8192.0 * hidden * 34.0).max(seqs.min(8192.0) * vocab * 8.0);

    // vLLM 0.33 (>= 0.20): total x 0.92 - weights - activations - non-torch (0.3 GB, +0.7 GB per GPU
    // with TP) - CUDA graphs (0.75 GB per GPU).
    let p = deployment("Llama-3.1-8B-Instruct", "bf16", "H100 SXM", 1, "vllm", "");
    close(p.engine.kv_capacity_tokens, (H100 * 0.92 - w8 - act(4096.0, 128256.0, 1024.0) - 0.3e9 - 0.75e9) / kv8);
    let p = deployment("Qwen3-Coder-30B-A3B-Instruct", "fp8", "H200 SXM", 1, "vllm", "");
    close(p.engine.kv_capacity_tokens, (H200 * 0.92 - w30 - act(2048.0, 151936.0, 1024.0) - 0.3e9 - 0.75e9) / kv30);
    let p = deployment("Llama-3.3-70B-Instruct", "bf16", "H100 SXM", 4, "vllm", "");
    let per_gpu = act(8192.0, 128256.0, 1024.0) + 1.0e9 + 0.75e9;
    close(p.engine.kv_capacity_tokens, (4.0 * H100 * 0.92 - w70 - 4.0 * per_gpu) / kv70);
    // vLLM 0.18: utilization 0.9 and the graphs out of the headroom.
    let p = deployment("Llama-3.1-8B-Instruct", "bf16", "H100 SXM", 1, "vllm", "version = \"0.18.1\"");
    close(p.engine.kv_capacity_tokens, (H100 * 0.9 - w8 - act(4096.0, 128256.0, 1024.0) - 0.3e9) / kv8);

    // SGLang: mem_fraction_static = round((MiB - reserve) / MiB, 3), reserve = 512 + 8192 x 1.5 +
    // TP/8 x 1024 + graph bs x 2 (256 below TP 4, 512 from TP 4), at least 10 GiB; pool = total x
    // fraction - weights.
    let frac = |total: f64, tp: f64, bs: f64| {
        let mib = total / 1048576.0;
        let reserve: f64 = (512.0 + 8192.0 * 1.5 + tp / 8.0 * 1024.0 + bs * 2.0).max(10240.0);
        ((mib - reserve) / mib * 1000.0).round() / 1000.0
    };
    assert_eq!(frac(H100, 1.0, 256.0), 0.834); // FACTS-hardware-engines.md 4c's worked example: ~0.835
    let p = deployment("Llama-3.1-8B-Instruct", "bf16", "H100 SXM", 1, "sglang", "");
    assert_eq!(p.engine.gpu_memory_utilization, 0.834);
    close(p.engine.kv_capacity_tokens, (H100 * 0.834 - w8) / kv8);
    let p = deployment("Qwen3-Coder-30B-A3B-Instruct", "fp8", "H200 SXM", 1, "sglang", "");
    close(p.engine.kv_capacity_tokens, (H200 * frac(H200, 1.0, 256.0) - w30) / kv30);
    let p = deployment("Llama-3.3-70B-Instruct", "bf16", "H100 SXM", 4, "sglang", "");
    close(p.engine.kv_capacity_tokens, (4.0 * H100 * frac(H100, 4.0, 512.0) - w70) / kv70);

    // TensorRT-LLM: 0.9 x (total - weights - activations - context 0.55 GB - non-torch - graphs), with
    // max_batch_size 2048 sequences in the sampler's share.
    let p = deployment("Llama-3.1-8B-Instruct", "bf16", "H100 SXM", 1, "trtllm", "");
    assert_eq!(p.engine.block_size_tokens, 32);
    let free = H100 - w8 - act(4096.0, 128256.0, 2048.0) - 0.55e9 - 0.3e9 - 0.75e9;
    close(p.engine.kv_capacity_tokens, 0.9 * free / kv8);
    let p = deployment("Qwen3-Coder-30B-A3B-Instruct", "fp8", "H200 SXM", 1, "trtllm", "");
    let free = H200 - w30 - act(2048.0, 151936.0, 2048.0) - 0.55e9 - 0.3e9 - 0.75e9;
    close(p.engine.kv_capacity_tokens, 0.9 * free / kv30);
    let p = deployment("Llama-3.3-70B-Instruct", "bf16", "H100 SXM", 4, "trtllm", "");
    let free = 4.0 * H100 - w70 - 4.0 * (act(8192.0, 128256.0, 2048.0) + 0.55e9 + 1.0e9 + 0.75e9);
    close(p.engine.kv_capacity_tokens, 0.9 * free / kv70);

    // The report a user checks against the engine's log: 131,072-token requests the cache holds.
    let p = deployment("Llama-3.1-8B-Instruct", "bf16", "H100 SXM", 1, "vllm", "");
    let k = p.kv_capacity();
    assert_eq!(k.max_model_len_tokens, 131072);
    assert!((k.max_len_requests - (k.kv_capacity_tokens / 16) as f64 / 8192.0).abs() < 1e-9);
    assert!(k.memory.as_ref().unwrap().formula.contains("vLLM 0.33.0"));
}

/// A closed loop of five rounds whose first and last round are left out of the metrics.
fn closed(clients: u32, input: u32, output: u32) -> Workload {
    let arrivals = Arrivals::ClosedLoop { clients, think_time_s: 0.0, think_exponential: false };
    let mut w = Workload::fixed(arrivals, input, output, Some(5 * clients as u64)).unwrap();
    w.spec.warmup_requests = clients as u64;
    w.spec.cooldown_requests = clients as u64;
    w
}

fn summary(out: &SimOutput, w: &Workload) -> Summary {
    summarize(out, w.spec.warmup_requests, w.spec.cooldown_requests, 0.0, &RequestSlo::default())
}

/// Completions per second between the end of the first round and the start of the last.
fn completion_rate(out: &SimOutput, clients: usize) -> f64 {
    let mut f: Vec<u64> = out.records.iter().map(|r| r.finish.0).collect();
    f.sort_unstable();
    let (a, b) = (clients, f.len() - clients);
    (b - a) as f64 / ((f[b] - f[a]) as f64 * 1e-9)
}

/// The issue's case: Llama-3.1-8B on one H100, 20,000-token prompts, closed loops from below to far
/// above what the KV cache holds (about 22 such requests).
#[test]
fn a_kv_bound_closed_loop_plateaus_instead_of_thrashing() {
    let p = deployment("Llama-3.1-8B-Instruct", "bf16", "H100 SXM", 1, "vllm", "");
    let fits = p.engine.kv_capacity_blocks() / (20_256u64).div_ceil(16);
    assert!((20..26).contains(&fits), "{fits}");
    let run = |clients: u32| {
        let w = closed(clients, 20_000, 256);
        let out = simulate(&p, &w, 3, SimOptions::default());
        (summary(&out, &w), out.preemptions, completion_rate(&out, clients as usize))
    };
    // Throughput is the steady completion rate: a summary's window (first measured send to last
    // measured finish) also counts the queueing of the first measured requests when clients outnumber
    // what runs.
    let (fit16, pre16, x16) = run(16);
    assert_eq!(pre16, 0);
    for clients in [64, 250] {
        let (s, preemptions, x) = run(clients);
        assert!(x >= 0.8 * x16, "{clients} clients: {x} requests/s vs {x16} at 16");
        // Only decode growth can preempt now, and rarely: never a request whose prefill has not ended.
        assert!(preemptions < 30, "{clients} clients: {preemptions} preemptions");
        // Little's law for a closed loop without think time: N = X x R, R the mean time in the system.
        let r = s.e2e_s.mean;
        assert!((clients as f64 / (x * r) - 1.0).abs() < 0.15, "{clients}: X {x} R {r}");
        // The waiting shows in TTFT: the requests beyond what fits queue for a finishing one.
        assert!(s.ttft_s.mean > fit16.ttft_s.mean * (clients as f64 / 32.0), "{clients}: {}", s.ttft_s.mean);
    }
    // SGLang (reservations, retraction) and TensorRT-LLM (whole-sequence reservations) hold the
    // plateau too.
    for (engine, extra) in [("sglang", ""), ("trtllm", "enable_chunked_prefill = true")] {
        let q = deployment("Llama-3.1-8B-Instruct", "bf16", "H100 SXM", 1, engine, extra);
        let rate = |clients: u32| {
            let out = simulate(&q, &closed(clients, 20_000, 256), 3, SimOptions::default());
            assert!(out.preemptions < 30, "{engine}, {clients} clients: {} preemptions", out.preemptions);
            completion_rate(&out, clients as usize)
        };
        let (low, high) = (rate(16), rate(250));
        assert!(high >= 0.8 * low, "{engine}: {high} requests/s at 250 clients vs {low} at 16");
    }
    // vLLM before 0.19 checked only the first chunk at admission: chunks of new prompts fill the cache
    // and preempt each other, and throughput falls. capsim keeps that behaviour for those versions.
    let old = deployment("Llama-3.1-8B-Instruct", "bf16", "H100 SXM", 1, "vllm", "version = \"0.18.1\"");
    let out = simulate(&old, &closed(64, 20_000, 256), 3, SimOptions::default());
    assert!(out.preemptions > 100, "{}", out.preemptions);
    assert!(completion_rate(&out, 64) < 0.9 * run(64).2);
}

fn trtllm(policy: &str, extra: &str) -> Profile {
    const_profile(
        "trtllm",
        0.001,
        &format!("kv_capacity_tokens = 2048\ncapacity_scheduler_policy = \"{policy}\"\nmax_num_batched_tokens = 512\n{extra}"),
    )
}

fn mixed_load() -> Workload {
    let mut t = capsim::workload::LoadTemplate::fixed(1, 1);
    t.classes[0].input = capsim::workload::LengthDist::Uniform { min: 10, max: 500 };
    t.classes[0].output = capsim::workload::LengthDist::Uniform { min: 50, max: 600 };
    t.requests = Some(400);
    t.at(capsim::workload::LoadAxis::Concurrency, 40.0).unwrap()
}

#[test]
fn guaranteed_no_evict_never_preempts_and_max_utilization_does() {
    let p = trtllm("guaranteed_no_evict", "");
    assert_eq!(p.engine.kind, EngineKind::Trtllm);
    let mut max_used = 0;
    let out = simulate_observed(&p, &mixed_load(), 5, SimOptions::default(), &mut |v: &StepView| {
        max_used = max_used.max(v.used_blocks());
        assert!(v.used_blocks() <= v.capacity_blocks());
    });
    assert_eq!(out.preemptions, 0);
    assert_eq!(out.records.len(), 400);
    assert!(out.records.iter().all(|r| r.preemptions == 0));
    // The same load admitted greedily runs out of memory and pauses requests.
    let out = simulate(&trtllm("max_utilization", ""), &mixed_load(), 5, SimOptions::default());
    assert!(out.preemptions > 0);
    assert_eq!(out.records.len(), 400);
    assert!(max_used > 0);
}

#[test]
fn trtllm_without_chunked_prefill_refuses_prompts_over_max_num_tokens() {
    let w = Workload::fixed(Arrivals::Burst { n: 3 }, 600, 10, None).unwrap();
    let out = simulate(&trtllm("guaranteed_no_evict", ""), &w, 1, SimOptions::default());
    assert_eq!(out.requests_rejected, 3);
    let out = simulate(&trtllm("guaranteed_no_evict", "enable_chunked_prefill = true"), &w, 1, SimOptions::default());
    assert_eq!((out.requests_rejected, out.records.len()), (0, 3));
    // 600 tokens in 512-token steps, chunks whole 32-token blocks: 512 then 88.
    assert!(out.steps >= 2 + 9);
}

#[test]
fn every_engine_is_deterministic() {
    for (engine, extra) in [
        ("vllm", ""),
        ("sglang", ""),
        ("trtllm", "capacity_scheduler_policy = \"max_utilization\"\nenable_chunked_prefill = true"),
        ("trtllm", ""),
    ] {
        let p = const_profile(engine, 0.001, &format!("kv_capacity_tokens = 2048\n{extra}"));
        let a = simulate(&p, &mixed_load(), 11, SimOptions::default());
        let b = simulate(&p, &mixed_load(), 11, SimOptions::default());
        assert_eq!(a.records, b.records, "{engine}");
        assert_eq!((a.steps, a.preemptions, a.end), (b.steps, b.preemptions, b.end), "{engine}");
    }
}

#[test]
fn settings_of_another_engine_and_bad_versions_are_refused() {
    let c = Catalog::builtin();
    let base = |engine: &str, extra: &str| {
        format!(
            "name = \"t\"\n[model]\nname = \"Llama-3.1-8B-Instruct\"\nweight_dtype = \"bf16\"\nkv_dtype = \"bf16\"\n[gpu]\nname = \"H100 SXM\"\n[engine]\nkind = \"{engine}\"\n{extra}\n[coefficients]\nstep_overhead_s = 0.005\nper_seq_overhead_s = 0.0\nbandwidth_eff_bytes_s = 2e12\nmatmul_flops_eff_s = 5e14\nattention_flops_eff_s = 4e14\nrequest_overhead_s = 0.0\n[provenance]\nmethod = \"test\"\n"
        )
    };
    for (engine, extra, field) in [
        ("vllm", "capacity_scheduler_policy = \"max_utilization\"", "engine.capacity_scheduler_policy"),
        ("sglang", "watermark = 0.01", "engine.watermark"),
        ("vllm", "version = \"latest\"", "engine.version"),
        ("vllm", "watermark = 1.5", "engine.watermark"),
        ("trtllm", "free_gpu_memory_fraction = 0", "engine.free_gpu_memory_fraction"),
    ] {
        let e = ProfileFile::parse("t.toml", &base(engine, extra)).unwrap().resolve("t.toml", &c).unwrap_err();
        assert!(e.to_string().contains(field), "{engine} {extra}: {e}");
    }
}
