//! Physics that must transfer: every new architecture's parameter counts and KV bytes against numbers
//! derived by hand from its config.json, the dtype handling of quantization configs, the cost of
//! tensor and expert parallelism, and the shared hardware model.

use approx::assert_relative_eq;
use capsim::catalog::gpu::LINK_EFFICIENCY;
use capsim::catalog::{Catalog, ModelArch};
use capsim::hardware::{expert_flop_share, SharedModel};
use capsim::profile::{Profile, ProfileFile, Retarget};
use capsim::sim::{BatchShape, StepModel};
use capsim::units::Dtype;

fn model(name: &str) -> ModelArch {
    Catalog::builtin().model(name).unwrap()
}

fn parse(json: &str) -> capsim::error::Result<ModelArch> {
    ModelArch::from_config_json("t", "t/config.json", json)
}

/// 3 x hidden x intermediate: gate, up and down projections.
fn mlp(h: u64, i: u64) -> u64 {
    3 * h * i
}

#[test]
fn deepseek_v3_mla_by_hand() {
    let m = model("deepseek-ai/DeepSeek-V3");
    // FACTS-hardware-engines.md 5b: (kv_lora_rank 512 + rope 64) x 2 bytes x 61 layers.
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), (512.0 + 64.0) * 2.0 * 61.0);
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 70_272.0);
    let h = 7168u64;
    let attn = h * 1536 + 1536 * 128 * (128 + 64) + h * (512 + 64) + 512 * 128 * (128 + 128) + 128 * 128 * h;
    let expert = mlp(h, 2048);
    let vocab = 129_280 * h;
    let moe_layers = 61 - 3;
    let total = 61 * attn + 3 * mlp(h, 18432) + moe_layers * (256 * expert + expert + h * 256) + 2 * vocab;
    assert_eq!(m.params_total(), total);
    let active = 61 * attn + 3 * mlp(h, 18432) + moe_layers * (8 * expert + expert + h * 256) + 2 * vocab;
    assert_eq!(m.params_active(), active);
    // 671B total, 37B activated (DeepSeek-V3 tech report).
    assert_relative_eq!(total as f64 / 1e9, 671.0, max_relative = 0.005);
    assert_relative_eq!(active as f64 / 1e9, 37.0, max_relative = 0.02);
    // Prefill attention FLOPs per (query, key) pair: 2 x 128 heads x (192 qk + 128 v) x 61 layers.
    assert_eq!(m.attn_flops_per_token_pair(), 2.0 * 128.0 * 320.0 * 61.0);
    // A decoding token's pair in the absorbed form: scores over the latent and rope dims, values
    // over the latent: 2 x 128 heads x (512 + 64 + 512) x 61 layers, 3.4x the prefill form.
    assert_eq!(m.attn_flops_per_decode_pair(), 2.0 * 128.0 * 1088.0 * 61.0);
    assert_eq!(m.weight_dtype_native, Some(Dtype::Fp8));
    // MLA's latent is kept whole on every tensor-parallel GPU.
    assert_eq!(m.kv_replication(8), 8.0);
}

#[test]
fn kimi_k2_by_hand() {
    let m = model("moonshotai/Kimi-K2-Instruct");
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 70_272.0);
    let h = 7168u64;
    let attn = h * 1536 + 1536 * 64 * 192 + h * 576 + 512 * 64 * 256 + 64 * 128 * h;
    let expert = mlp(h, 2048);
    let total = 61 * attn + mlp(h, 18432) + 60 * (384 * expert + expert + h * 384) + 2 * 163_840 * h;
    assert_eq!(m.params_total(), total);
    // 1T total, 32B active (model page).
    assert_relative_eq!(total as f64 / 1e12, 1.03, max_relative = 0.01);
    assert_relative_eq!(m.params_active() as f64 / 1e9, 32.9, max_relative = 0.01);
}

#[test]
fn glm4_moe_by_hand() {
    let m = model("zai-org/GLM-4.5");
    // FACTS 5a: 2 x 8 KV heads x 128 x 2 bytes x 92 layers.
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 376_832.0);
    let h = 5120u64;
    let attn = h * 96 * 128 + 2 * h * 8 * 128 + 96 * 128 * h;
    let expert = mlp(h, 1536);
    let total = 92 * attn + 3 * mlp(h, 12288) + 89 * (160 * expert + expert + h * 160) + 2 * 151_552 * h;
    assert_eq!(m.params_total(), total);
    assert_eq!(m.moe.as_ref().unwrap().n_moe_layers, 89);
    // "355B total, 32B active": the MTP layer (not served without speculative decoding) is not counted.
    assert_relative_eq!(total as f64 / 1e9, 352.8, max_relative = 0.002);
    assert_relative_eq!(m.params_active() as f64 / 1e9, 33.6, max_relative = 0.01);
    let air = model("GLM-4.5-Air");
    assert_eq!(air.kv_bytes_per_token(Dtype::Bf16), 188_416.0);
    assert_relative_eq!(air.params_total() as f64 / 1e9, 106.0, max_relative = 0.02);
    assert_eq!(model("glm-4.6").max_context, 202_752);
}

#[test]
fn gemma_sliding_patterns_by_hand() {
    let g2 = model("google/gemma-2-27b-it");
    assert_eq!((g2.n_full_attn_layers, g2.n_sliding_layers, g2.sliding_window), (23, 23, 4096));
    let per_layer = 2.0 * 16.0 * 128.0 * 2.0;
    assert_eq!(g2.kv_bytes_for_context(Dtype::Bf16, 10_000.0), 23.0 * per_layer * 10_000.0 + 23.0 * per_layer * 4096.0);
    let h = 4608u64;
    let total = 46 * (h * 32 * 128 * 2 + 2 * h * 16 * 128 + mlp(h, 36864)) + 256_000 * h;
    assert_eq!(g2.params_total(), total, "tied embeddings counted once");
    assert_relative_eq!(total as f64 / 1e9, 27.2, max_relative = 0.01);
    // Gemma-3: 5 local : 1 global, window 1024 (FACTS 5c: KV = 8 x 8192 x ctx + 40 x 8192 x min(ctx, 1024)).
    let g3 = model("gemma-3-12b-it");
    assert_eq!((g3.n_full_attn_layers, g3.n_sliding_layers, g3.sliding_window), (8, 40, 1024));
    for ctx in [500.0, 32_768.0] {
        assert_eq!(
            g3.kv_bytes_for_context(Dtype::Bf16, ctx),
            8.0 * 8192.0 * ctx + 40.0 * 8192.0 * f64::min(ctx, 1024.0)
        );
    }
    assert_relative_eq!(model("gemma-3-27b").params_total() as f64 / 1e9, 27.0, max_relative = 0.02);
}

#[test]
fn llama4_interleaved_moe_and_chunked_attention_by_hand() {
    let h = 5120u64;
    let attn = h * 40 * 128 * 2 + 2 * h * 8 * 128;
    let expert = mlp(h, 8192);
    let vocab = 202_048 * h;
    let scout = model("Llama-4-Scout-17B-16E-Instruct");
    // Every 4th layer is a NoPE global layer; the others hold one 8192-token chunk.
    assert_eq!((scout.n_full_attn_layers, scout.n_sliding_layers, scout.sliding_window), (12, 36, 8192));
    assert_eq!(scout.params_total(), 48 * (attn + 16 * expert + expert + h * 16) + 2 * vocab);
    assert_relative_eq!(scout.params_active() as f64 / 1e9, 17.2, max_relative = 0.01);
    let mav = model("llama-4-maverick");
    assert_eq!(mav.moe.as_ref().unwrap().n_moe_layers, 24);
    assert_eq!(mav.params_total(), 48 * attn + 24 * (128 * expert + expert + h * 128) + 24 * mlp(h, 16384) + 2 * vocab);
    assert_relative_eq!(mav.params_total() as f64 / 1e9, 400.0, max_relative = 0.01);
    assert_relative_eq!(mav.params_active() as f64 / 1e9, 17.2, max_relative = 0.01);
}

#[test]
fn phi3_by_hand() {
    let p4 = model("microsoft/phi-4");
    assert_eq!(p4.kv_bytes_per_token(Dtype::Bf16), 2.0 * 40.0 * 10.0 * 128.0 * 2.0);
    let h = 5120u64;
    assert_eq!(p4.params_total(), 40 * (h * 40 * 128 * 2 + 2 * h * 10 * 128 + mlp(h, 17920)) + 2 * 100_352 * h);
    assert_relative_eq!(p4.params_total() as f64 / 1e9, 14.7, max_relative = 0.01);
    assert_relative_eq!(model("phi-3-mini").params_total() as f64 / 1e9, 3.82, max_relative = 0.01);
}

#[test]
fn unsupported_and_out_of_range_configs_are_named() {
    let e = parse(r#"{"model_type": "mamba", "hidden_size": 8}"#).unwrap_err().to_string();
    assert!(e.contains("model_type") && e.contains("glm4_moe") && e.contains("deepseek_v3"), "{e}");
    let base = r#""model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 1000, "max_position_embeddings": 4096, "intermediate_size": 11008"#;
    let e = parse(&format!(r#"{{{base}, "num_hidden_layers": 4294967296}}"#)).unwrap_err().to_string();
    assert!(e.contains("num_hidden_layers") && e.contains("out of range"), "{e}");
    let e = parse(
        r#"{"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 16, "vocab_size": 1000, "max_position_embeddings": 4096, "full_attention_interval": 4294967296}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("full_attention_interval"), "{e}");
    let e = parse(&format!(r#"{{{base}, "num_hidden_layers": 2, "quantization_config": {{"quant_method": "hqq"}}}}"#))
        .unwrap_err()
        .to_string();
    assert!(e.contains("quantization_config.quant_method") && e.contains("hqq"), "{e}");
}

#[test]
fn quantization_configs_give_the_checkpoint_precision() {
    let base = r#""model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 2, "num_attention_heads": 32, "vocab_size": 1000, "max_position_embeddings": 4096, "intermediate_size": 11008"#;
    let q = |qc: &str| parse(&format!(r#"{{{base}, "quantization_config": {qc}}}"#)).unwrap();
    assert_eq!(q(r#"{"quant_method": "fp8", "weight_block_size": [128, 128]}"#).weight_dtype_native, Some(Dtype::Fp8));
    assert_eq!(q(r#"{"quant_method": "gptq", "bits": 4, "group_size": 128}"#).weight_dtype_native, Some(Dtype::Int4));
    assert_eq!(q(r#"{"quant_method": "awq", "bits": 4}"#).weight_dtype_native, Some(Dtype::Int4));
    let ct = q(
        r#"{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"group_0": {"weights": {"num_bits": 4, "type": "int"}}}, "kv_cache_scheme": {"num_bits": 8}}"#,
    );
    assert_eq!((ct.weight_dtype_native, ct.kv_dtype_native), (Some(Dtype::Int4), Some(Dtype::Fp8)));
    let mo = q(r#"{"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}"#);
    assert_eq!((mo.weight_dtype_native, mo.kv_dtype_native), (Some(Dtype::Nvfp4), Some(Dtype::Fp8)));
    let gpt = model("gpt-oss-120b");
    assert_eq!((gpt.weight_dtype_native, gpt.expert_dtype_native), (None, Some(Dtype::Mxfp4)));
    assert_eq!(Dtype::Nvfp4.bytes(), 4.5 / 8.0);
}

fn default_profile() -> (Catalog, Profile) {
    let c = Catalog::builtin();
    let p = Profile::load(None, &c).unwrap();
    (c, p)
}

/// Another model under another engine takes the learned values of that engine, and is checked for
/// memory under that engine's formula. Before, the lookup used the default profile's engine (vLLM)
/// and the engine was switched afterwards: `explain --model llama-3.1-70b --engine sglang` and
/// `--engine trtllm` printed vLLM's 13.95 ms step to the digit.
#[test]
fn another_model_under_another_engine_takes_that_engines_learned_values() {
    use capsim::profile::EngineKind;
    let (c, p) = default_profile();
    let Some(m) = &c.learned else { return };
    let to = |e: EngineKind| Retarget {
        model: Some("Llama-3.1-70B".into()),
        gpu: Some("H200 SXM".into()),
        tensor_parallel: Some(4),
        weight_dtype: Some(Dtype::Fp8),
        engine: Some(e),
        ..Default::default()
    };
    let mut step_overheads = Vec::new();
    for e in [EngineKind::Vllm, EngineKind::Sglang, EngineKind::Trtllm] {
        let r = p.retarget(&c, &to(e)).unwrap();
        assert_eq!(r.engine.kind, e, "the retargeted profile runs under the engine asked for");
        let l = m.lookup_arch("H200 SXM", e.as_str(), Dtype::Fp8, &r.arch, None).values();
        let want = l[capsim::hardware::learned::OVERHEAD]
            * r.arch.n_layers as f64
            * capsim::hardware::learned::kernel_overhead_scale(&r.gpu);
        assert_relative_eq!(r.coefficients.step_overhead_s, want, max_relative = 1e-9);
        step_overheads.push(r.coefficients.step_overhead_s);
    }
    assert!(
        step_overheads[1] < 0.8 * step_overheads[0],
        "SGLang's learned step overhead is below vLLM's: {step_overheads:?}"
    );
}

#[test]
fn another_model_takes_its_own_precision_and_the_shared_model() {
    let (c, p) = default_profile();
    let to = |m: &str| Retarget { model: Some(m.into()), tensor_parallel: Some(8), ..Default::default() };
    let ds = p.retarget(&c, &to("deepseek-ai/DeepSeek-V3")).unwrap();
    assert_eq!(ds.file.model.weight_dtype, Dtype::Fp8, "quantization_config");
    // Another model's coefficients come from the step model learned across the corpus (the shared
    // hardware model of the reports where no learned model is shipped).
    let method = ds.retarget_method.as_deref().unwrap();
    assert!(
        method.contains(if c.learned.is_some() { "learned across the corpus" } else { "shared hardware model" }),
        "{method}"
    );
    let l8 = p.retarget(&c, &Retarget { model: Some("Llama-3.1-8B-Instruct".into()), ..Default::default() }).unwrap();
    assert_eq!(l8.file.model.weight_dtype, Dtype::Bf16, "no quantization_config: the checkpoint's BF16");
    let l8f = p
        .retarget(
            &c,
            &Retarget {
                model: Some("Llama-3.1-8B-Instruct".into()),
                weight_dtype: Some(Dtype::Fp8),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(l8f.file.model.weight_dtype, Dtype::Fp8, "--precision wins");
    // The dense model's GEMMs run at the dense share of the peak, not at one MoE fit's blend: the
    // learned model's GEMM throughput for its GPU, engine, dtype and model, relative to the GPU's
    // kernel-benchmark share of peak (or the shared model's share).
    let shared = &c.hardware;
    let gemm = match &c.learned {
        Some(m) => {
            m.lookup_arch(&l8.gpu.name, "vllm", Dtype::Bf16, &l8.arch, None).values()[capsim::hardware::learned::GEMM]
                * l8.gpu.gemm_reference_share(Dtype::Bf16)
        }
        None => shared.dense_gemm_frac.value,
    };
    assert_relative_eq!(l8.coefficients.matmul_flops_eff_s, gemm * l8.gpu.dense_flops_s(Dtype::Bf16));
    assert_relative_eq!(l8.coefficients.grouped_gemm_rel, 1.0);
    // Same model elsewhere keeps its fitted share of the peak, pulled toward the shared model by
    // precision: log share = (ln own / s_own^2 + ln shared / s_shared^2) / (1 / s_own^2 + 1 / s_shared^2).
    let moved = p.retarget(&c, &Retarget { gpu: Some("H100 SXM".into()), ..Default::default() }).unwrap();
    let own_share = p.coefficients.bandwidth_eff_bytes_s / p.gpu.hbm_bandwidth_bytes_s();
    let s_own = p.file.sigmas.unwrap().bandwidth_eff_bytes_s;
    let (sv, ss) = shared.bandwidth_frac.pair();
    let (wo, ws) = (1.0 / (s_own * s_own), 1.0 / (ss * ss));
    let expected = ((wo * own_share.ln() + ws * sv.ln()) / (wo + ws)).exp();
    assert_relative_eq!(
        moved.coefficients.bandwidth_eff_bytes_s / moved.gpu.hbm_bandwidth_bytes_s(),
        expected,
        max_relative = 1e-12
    );
    assert!((expected - own_share).abs() <= (sv - own_share).abs(), "between own and shared");
    let (own, wide) = (p.file.sigmas.unwrap(), moved.file.sigmas.unwrap());
    assert!(wide.bandwidth_eff_bytes_s > own.bandwidth_eff_bytes_s, "retargeted bands are wider");
    // A100 has no FP8 tensor cores: FP8 weights run at the BF16 rate, and the caveat says so.
    let a100 = p.retarget(&c, &Retarget { gpu: Some("A100".into()), ..Default::default() }).unwrap();
    assert_eq!(a100.gpu.dense_flops_s(Dtype::Fp8), a100.gpu.dense_flops_s(Dtype::Bf16));
    assert!(a100.caveats().iter().any(|c| c.contains("no fp8 tensor cores")), "{:?}", a100.caveats());
    // MI355X has FP4 tensor cores for MXFP4, the format its engines serve: an nvfp4 deployment there
    // is told so; an mxfp4 one, and nvfp4 on MI300X (no FP4 at all: the tensor-core note), are not.
    let on = |gpu: &str, w: Dtype| {
        let r = Retarget { gpu: Some(gpu.into()), weight_dtype: Some(w), ..Default::default() };
        p.retarget(&c, &r).unwrap().caveats()
    };
    let mxfp4_note = |v: &[String]| v.iter().any(|c| c.contains("runs FP4 checkpoints as MXFP4"));
    assert!(mxfp4_note(&on("MI355X", Dtype::Nvfp4)), "{:?}", on("MI355X", Dtype::Nvfp4));
    assert!(!mxfp4_note(&on("MI355X", Dtype::Mxfp4)));
    let mi300 = on("MI300X", Dtype::Nvfp4);
    assert!(!mxfp4_note(&mi300) && mi300.iter().any(|c| c.contains("no nvfp4 tensor cores")), "{mi300:?}");
}

#[test]
fn tensor_parallel_degree_must_split_the_heads() {
    let (c, p) = default_profile();
    let e = p
        .retarget(
            &c,
            &Retarget { model: Some("Llama-3.1-8B-Instruct".into()), tensor_parallel: Some(3), ..Default::default() },
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("tensor_parallel") && e.contains("32 attention heads"), "{e}");
}

fn profile_text(model: &str, gpu: &str, tp: u32, ep: bool) -> Profile {
    let text = format!(
        r#"
name = "t"
[model]
name = "{model}"
weight_dtype = "fp8"
kv_dtype = "bf16"
[gpu]
name = "{gpu}"
tensor_parallel = {tp}
expert_parallel = {ep}
[engine]
kind = "vllm"
kv_capacity_tokens = 1000000
[coefficients]
step_overhead_s = 0.004
per_seq_overhead_s = 0.0001
bandwidth_eff_bytes_s = 3.0e12
matmul_flops_eff_s = 6.0e14
attention_flops_eff_s = 4.0e14
request_overhead_s = 0.02
mem_compute_overlap = 0.5
[provenance]
method = "test"
"#
    );
    ProfileFile::parse("t", &text).unwrap().resolve("t", &Catalog::builtin()).unwrap()
}

#[test]
fn tensor_parallel_all_reduces_by_hand() {
    // Llama-3.3-70B on 4 x H100 SXM: 2 all-reduces per layer of tokens x 8192 x 2 bytes, and one
    // all-gather of the logits (sequences x vocab x 2 bytes). NCCL ring LL latency 6.6 us + 0.6 us per
    // step (2(n-1) steps for an all-reduce, n-1 for an all-gather); bus factors 2(n-1)/n and (n-1)/n.
    let p = profile_text("Llama-3.3-70B-Instruct", "H100 SXM", 4, false);
    let m = StepModel::new(&p);
    let mut b = BatchShape::default();
    for _ in 0..32 {
        b.add_chunk(1000, 1);
    }
    let bw = 450e9 * LINK_EFFICIENCY;
    let ar = 6.6e-6 + 6.0 * 0.6e-6 + 1.5 * (32.0 * 8192.0 * 2.0) / bw;
    let ag = 6.6e-6 + 3.0 * 0.6e-6 + 0.75 * (32.0 * 128_256.0 * 2.0) / bw;
    let parts = m.parts(&b);
    assert_relative_eq!(parts.communication_s, 160.0 * ar + ag, max_relative = 1e-12);
    // Sum identity: the parts make the step.
    let body = parts.memory_s.max(parts.compute_s) + parts.exposed * parts.memory_s.min(parts.compute_s);
    assert_relative_eq!(
        parts.total_s,
        parts.overhead_s + parts.per_seq_s + body + parts.communication_s,
        max_relative = 1e-12
    );
    // One GPU communicates nothing; PCIe cards beyond their link domain pay PCIe bandwidth.
    assert_eq!(
        StepModel::new(&profile_text("Llama-3.3-70B-Instruct", "H100 SXM", 1, false)).parts(&b).communication_s,
        0.0
    );
    let pcie = StepModel::new(&profile_text("Llama-3.3-70B-Instruct", "H100 PCIe", 4, false)).parts(&b).communication_s;
    assert!(pcie > parts.communication_s * 1.5, "{pcie} vs {}", parts.communication_s);
}

#[test]
fn a_step_with_a_prompt_chunk_pays_the_prefill_step_cost_once() {
    // The learned prefill step cost (Coefficients::prefill_step_overhead_s): a step computing one
    // or more prompt chunks pays it once on top of the plain step; decodes alone do not.
    let plain = profile_text("Llama-3.3-70B-Instruct", "H100 SXM", 4, false);
    let mut with = plain.clone();
    with.coefficients.prefill_step_overhead_s = 0.03;
    let (a, b) = (StepModel::new(&plain), StepModel::new(&with));
    let mut decode = BatchShape::default();
    for _ in 0..16 {
        decode.add_chunk(1000, 1);
    }
    assert_eq!(a.parts(&decode), b.parts(&decode));
    let mut mixed = decode;
    mixed.add_chunk(0, 2048);
    mixed.add_chunk(0, 512);
    let (pa, pb) = (a.parts(&mixed), b.parts(&mixed));
    assert_eq!(pa.prefill_overhead_s, 0.0);
    assert_eq!(pb.prefill_overhead_s, 0.03);
    assert_relative_eq!(pb.total_s, pa.total_s + 0.03, max_relative = 1e-12);
    // The explain JSON's sum identity holds with it.
    let body = pb.memory_s.max(pb.compute_s) + pb.exposed * pb.memory_s.min(pb.compute_s);
    assert_relative_eq!(
        pb.total_s,
        pb.overhead_s + pb.prefill_overhead_s + pb.per_seq_s + body + pb.communication_s,
        max_relative = 1e-12
    );
    // A negative or absurd value in a profile file is refused, naming the key.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/models/qwen3-coder-30b-a3b-instruct-fp8_h200-sxm_vllm.toml"
    ))
    .unwrap()
    .replace("[coefficients]", "[coefficients]\nprefill_step_overhead_s = -1.0");
    let e = ProfileFile::parse("p.toml", &text).unwrap().resolve("p.toml", &Catalog::builtin()).unwrap_err();
    assert!(e.to_string().contains("coefficients.prefill_step_overhead_s"), "{e}");
}

#[test]
fn expert_parallel_all_to_alls_by_hand() {
    // DeepSeek-V3 on 8 x H200 with experts spread whole: attention all-reduce in 61 layers, dense MLP
    // all-reduce in the 3 dense layers, dispatch + combine in the 58 MoE layers, each GPU sending its
    // eighth of the tokens' 8 expert copies (tokens / 8 x 8 x 7168 x 2 bytes).
    let p = profile_text("DeepSeek-V3", "H200 SXM", 8, true);
    let mut b = BatchShape::default();
    b.add_chunk(0, 4096);
    let t = 4096.0;
    let bw = 450e9 * LINK_EFFICIENCY;
    let ar = 6.6e-6 + 14.0 * 0.6e-6 + 1.75 * (t * 7168.0 * 2.0) / bw;
    let a2a = 6.6e-6 + 7.0 * 0.6e-6 + 0.875 * (t / 8.0 * 8.0 * 7168.0 * 2.0) / bw;
    let ag = 6.6e-6 + 7.0 * 0.6e-6 + 0.875 * (129_280.0 * 2.0) / bw;
    assert_relative_eq!(
        StepModel::new(&p).parts(&b).communication_s,
        64.0 * ar + 116.0 * a2a + ag,
        max_relative = 1e-12
    );
    // Expert parallelism on a dense model is refused.
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/models/qwen3-coder-30b-a3b-instruct-fp8_h200-sxm_vllm.toml"
    ))
    .unwrap()
    .replace("name = \"Qwen3-Coder-30B-A3B-Instruct\"", "name = \"Llama-3.1-8B-Instruct\"")
    .replace("tensor_parallel = 1", "tensor_parallel = 1\nexpert_parallel = true");
    let e = ProfileFile::parse("t", &text).unwrap().resolve("t", &Catalog::builtin()).unwrap_err().to_string();
    assert!(e.contains("expert_parallel") && e.contains("no experts"), "{e}");
}

#[test]
fn kv_replication_limits_capacity_under_tensor_parallelism() {
    // Qwen3-30B-A3B has 4 KV heads: at TP 8 each GPU keeps one, so KV is stored twice.
    let q = model("Qwen3-Coder-30B-A3B-Instruct");
    assert_eq!((q.kv_replication(2), q.kv_replication(4), q.kv_replication(8)), (1.0, 1.0, 2.0));
    // The step reads every copy: KV time per token doubles against TP 4 at the same per-GPU bandwidth.
    let kv_per_token = |tp| {
        let p = profile_text("Qwen3-Coder-30B-A3B-Instruct", "H200 SXM", tp, false);
        let mut b = BatchShape::default();
        b.add_chunk(100_000, 1);
        StepModel::new(&p).parts(&b).kv_s * tp as f64
    };
    assert_relative_eq!(kv_per_token(8), 2.0 * kv_per_token(4), max_relative = 1e-9);
}

#[test]
fn lm_head_runs_once_per_sequence() {
    let p = profile_text("Llama-3.1-8B-Instruct", "H100 SXM", 1, false);
    let m = StepModel::new(&p);
    let mut prefill = BatchShape::default();
    prefill.add_chunk(0, 2048);
    let parts = m.parts(&prefill);
    assert_relative_eq!(parts.lm_head_s, 2.0 * 128_256.0 * 4096.0 / 6.0e14, max_relative = 1e-12);
    assert_eq!(parts.expert_matmul_s, 0.0);
}

#[test]
fn shared_model_pools_the_identified_coefficients() {
    let c = Catalog::builtin();
    let profiles: Vec<Profile> =
        capsim::validate::builtin_profiles_by_report(&c).unwrap().into_iter().map(|(_, p)| p).collect();
    let refs: Vec<&Profile> = profiles.iter().collect();
    let s = SharedModel::fit(&refs, "test");
    // Bandwidth shares of the HBM peak: a weighted geometric mean of the members, inside their range.
    let b = &s.bandwidth_frac;
    assert!(!b.members.is_empty());
    let (lo, hi) = b.members.iter().fold((f64::MAX, 0.0f64), |(l, h), m| (l.min(m.value), h.max(m.value)));
    assert!(b.value >= lo - 1e-12 && b.value <= hi + 1e-12 && hi <= 1.0, "{b:?}");
    // Pinned coefficients do not vote: a fit at the dense peak carries no information.
    for p in &profiles {
        if p.coefficients.matmul_flops_eff_s >= 0.995 * p.gpu.dense_flops_s(p.file.model.weight_dtype) {
            assert!(s.grouped_gemm_frac.members.iter().all(|m| m.profile != p.name()));
        }
    }
    // The grouped-GEMM share inverts each blend: 1/blend = (1-s)/dense + s/grouped.
    for m in &s.grouped_gemm_frac.members {
        let p = profiles.iter().find(|p| p.name() == m.profile).unwrap();
        let share = expert_flop_share(&p.arch);
        let blend = p.coefficients.matmul_flops_eff_s / p.gpu.dense_flops_s(p.file.model.weight_dtype);
        let implied = 1.0 / ((1.0 - share) / s.dense_gemm_frac.value + share / m.value);
        assert!(m.value >= s.dense_gemm_frac.value - 1e-12 || (implied - blend).abs() < 1e-9 * blend, "{m:?}");
    }
    // The embedded model round-trips through its TOML form.
    assert_eq!(SharedModel::parse("x", &s.to_toml()).unwrap(), s);
}

#[test]
fn shipped_profiles_carry_a_consistent_covariance() {
    let c = Catalog::builtin();
    for (_, p) in capsim::validate::builtin_profiles_by_report(&c).unwrap() {
        let cov = p.file.covariance.as_ref().expect("calibrated profiles carry the fit's covariance");
        let n = cov.names.len();
        let s = p.file.sigmas.unwrap();
        for i in 0..n {
            for j in 0..n {
                assert_relative_eq!(cov.matrix[i][j], cov.matrix[j][i], max_relative = 1e-9);
            }
            // The marginal sigmas are the diagonal (capped at 100%).
            assert_relative_eq!(s.named(&cov.names[i]).unwrap(), cov.matrix[i][i].sqrt().min(1.0), max_relative = 1e-9);
            // Correlations are correlations.
            for j in 0..n {
                let r = cov.matrix[i][j] / (cov.matrix[i][i] * cov.matrix[j][j]).sqrt();
                assert!(r.abs() <= 1.0 + 1e-9, "{} {} {r}", cov.names[i], cov.names[j]);
            }
        }
        // The band moves along it: the slow profile is slower where the fit is sure of little.
        let (slow, fast) = (capsim::capacity::perturbed(&p, -1.0), capsim::capacity::perturbed(&p, 1.0));
        let mut b = BatchShape::default();
        for _ in 0..16 {
            b.add_chunk(2000, 1);
        }
        let t = |q: &Profile| StepModel::new(q).step_s(&b);
        assert!(t(&slow) > t(&p) && t(&p) > t(&fast), "{}: {} {} {}", p.name(), t(&slow), t(&p), t(&fast));
    }
}

#[test]
fn a_config_file_of_the_profiles_model_is_served_as_its_checkpoint() {
    // The default profile's own architecture named by a config.json path: the same kernel mix (its
    // fitted shares kept), but the checkpoint's precision (no quantization_config: BF16), unless
    // --precision says otherwise.
    let (c, p) = default_profile();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/models/configs/qwen3-coder-30b-a3b-instruct.json");
    let bf16 = p.retarget(&c, &Retarget { model: Some(path.into()), ..Default::default() }).unwrap();
    assert_eq!(bf16.file.model.weight_dtype, Dtype::Bf16);
    assert!(bf16.retarget_method.as_deref().unwrap().starts_with("same model"));
    let fp8 = p
        .retarget(&c, &Retarget { model: Some(path.into()), weight_dtype: Some(Dtype::Fp8), ..Default::default() })
        .unwrap();
    assert!(fp8.retargeted_from.is_none(), "nothing changes: the profile itself");
    // A catalog name of the same model keeps the profile's precision; a name with -FP8 says FP8.
    let named = p
        .retarget(&c, &Retarget { model: Some("Qwen/Qwen3-Coder-30B-A3B-Instruct".into()), ..Default::default() })
        .unwrap();
    assert_eq!(named.file.model.weight_dtype, Dtype::Fp8);
    assert!(named.retargeted_from.is_none());
}

#[test]
fn a_shared_model_file_with_a_bad_value_is_refused_by_name() {
    let s = Catalog::builtin().hardware.to_toml();
    let bad = s.replacen("[bandwidth_frac]\nvalue = ", "[bandwidth_frac]\nvalue = 7.0 #", 1);
    let e = SharedModel::parse("hw.toml", &bad).unwrap_err().to_string();
    assert!(e.contains("hw.toml") && e.contains("bandwidth_frac.value"), "{e}");
    let e = SharedModel::parse("hw.toml", "bandwidth_frac = 3").unwrap_err().to_string();
    assert!(e.contains("hw.toml"), "{e}");
    // The CLI names the file.
    let dir = crate::Scratch::new("hw");
    let f = dir.join("hw.toml");
    std::fs::write(&f, &bad).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["simulate", "--model", "Llama-3.1-8B-Instruct", "--hardware", f.to_str().unwrap(), "--burst", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("bandwidth_frac.value"));
}

#[test]
fn grouped_gemm_curve_recovers_a_known_curve() {
    use capsim::hardware::GroupedCurve;
    // Members on e(M) = 0.6 M / (M + 400): the fit finds the curve (grid of M_half, e_max closed form).
    let truth = |m: f64| 0.6 * m / (m + 400.0);
    let members: Vec<_> = [100.0, 250.0, 512.0, 2000.0].iter().map(|&m| (format!("m{m}"), m, truth(m))).collect();
    let c = GroupedCurve::fit(members, 0.7).unwrap();
    assert_relative_eq!(c.m_half, 400.0, max_relative = 0.06);
    assert_relative_eq!(c.e_max, 0.6, max_relative = 0.03);
    assert_relative_eq!(c.at(300.0), truth(300.0), max_relative = 0.02);
    // One expert count says nothing about the slope.
    assert!(GroupedCurve::fit(vec![("a".into(), 256.0, 0.1), ("b".into(), 256.0, 0.2)], 0.7).is_none());
}

#[test]
fn explain_parts_add_up_and_an_empty_step_is_refused() {
    let run = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).output().unwrap();
    let o = run(&[
        "explain",
        "--model",
        "Llama-3.3-70B-Instruct",
        "--gpu",
        "H100 SXM",
        "--tp",
        "4",
        "--decode",
        "8",
        "--prefill",
        "1024",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let p = &v["parts_s"];
    let f = |k: &str| p[k].as_f64().unwrap();
    let body = f("memory_s").max(f("compute_s")) + f("exposed") * f("memory_s").min(f("compute_s"));
    assert_relative_eq!(
        f("total_s"),
        f("overhead_s") + f("prefill_overhead_s") + f("per_seq_s") + body + f("communication_s"),
        max_relative = 1e-12
    );
    // The step carries a prompt chunk, so it pays the prefill's own fixed cost (learned model).
    assert!(f("prefill_overhead_s") > 0.0);
    assert!(f("communication_s") > 0.0 && f("expert_matmul_s") == 0.0);
    assert_eq!(v["batch"]["tokens"], 8 + 1024);
    let o = run(&["explain", "--decode", "0"]);
    assert!(!o.status.success() && String::from_utf8_lossy(&o.stderr).contains("--decode"));
}

#[test]
fn dense_models_use_the_dense_share_everywhere() {
    let c = Catalog::builtin();
    let l8 = model("Llama-3.1-8B-Instruct");
    let shared = &c.hardware;
    // No experts: the blend is the dense share, finite, and so are the priors and bands built on it.
    assert_eq!(shared.blend_for(&l8, 8192), shared.dense_gemm_frac.value);
    assert_eq!(shared.blend_sigma_for(&l8, 8192), shared.dense_gemm_frac.sigma_log);
    let gpu = c.gpu("H100 SXM").unwrap();
    let (coef, sig) = shared.coefficients_for(&l8, gpu, Dtype::Bf16, 8192);
    assert_eq!(coef.grouped_gemm_rel, 1.0);
    assert!(sig.matmul_flops_eff_s.is_finite() && coef.matmul_flops_eff_s.is_finite());
    // A dense profile with fitted sigmas moved to another GPU keeps finite coefficients.
    let mut p = profile_text("Llama-3.1-8B-Instruct", "H100 SXM", 1, false);
    p.file.sigmas = Some(capsim::profile::CoefficientSigmas {
        matmul_flops_eff_s: 0.1,
        bandwidth_eff_bytes_s: 0.1,
        ..capsim::profile::CoefficientSigmas::unidentified()
    });
    let moved = p.retarget(&c, &Retarget { gpu: Some("A100".into()), ..Default::default() }).unwrap();
    let k = moved.coefficients;
    for v in [
        k.matmul_flops_eff_s,
        k.bandwidth_eff_bytes_s,
        k.attention_flops_eff_s,
        k.step_overhead_s,
        k.request_overhead_s,
    ] {
        assert!(v.is_finite() && v > 0.0, "{k:?}");
    }
}

/// A step's decoding pairs are the one-token chunks' and cost the decode form; a prompt chunk's
/// pairs the prefill form. Llama (no MLA) has one form for both.
#[test]
fn mla_decode_pairs_cost_the_absorbed_form() {
    use capsim::sim::BatchShape;
    let mut b = BatchShape::default();
    b.add_chunk(999, 1);
    b.add_chunk(0, 100);
    assert_eq!(b.decode_pairs, 1000.0);
    assert_eq!(b.attn_pairs, 1000.0 + 100.0 * 101.0 / 2.0);
    let llama = model("meta-llama/Llama-3.1-8B-Instruct");
    assert_eq!(llama.attn_flops_per_decode_pair(), llama.attn_flops_per_token_pair());
    // GLM-5: MLA (64 heads, latent 512, rope 64) plus its indexer's 2 x 32 x 128 in both forms.
    let glm = model("zai-org/GLM-5");
    assert_eq!(glm.attn_flops_per_decode_pair(), 78.0 * (2.0 * 64.0 * 1088.0 + 2.0 * 32.0 * 128.0));
}
