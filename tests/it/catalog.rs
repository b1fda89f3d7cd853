use approx::assert_relative_eq;
use capsim::catalog::{Catalog, ModelArch};
use capsim::units::Dtype;

fn model(name: &str) -> ModelArch {
    Catalog::builtin().model(name).unwrap()
}

#[test]
fn qwen3_30b_a3b_hand_computed_figures() {
    let m = model("Qwen3-Coder-30B-A3B-Instruct");
    // 2 x 48 layers x 4 KV heads x 128 x 2 bytes.
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 98_304.0);
    assert_eq!(m.kv_bytes_per_token(Dtype::Fp8), 49_152.0);
    assert_eq!(m.n_full_attn_layers, 48);
    // 30.5B total, 3.3B active (model card).
    assert_relative_eq!(m.params_total() as f64 / 1e9, 30.53, epsilon = 0.05);
    assert_relative_eq!(m.params_active() as f64 / 1e9, 3.35, epsilon = 0.05);
    // FACTS.md: 82 of 128 experts at B = 16, 126 at B = 64.
    assert_eq!(m.experts_touched(16.0).round(), 82.0);
    assert_eq!(m.experts_touched(64.0).round(), 126.0);
    assert_relative_eq!(m.experts_touched(1.0), 8.0, epsilon = 1e-9);
    // Attention FLOPs per (query, key) pair: 4 x 48 x 32 x 128.
    assert_eq!(m.attn_flops_per_token_pair(), 786_432.0);
    assert!(m.linear_state_bytes(Dtype::Bf16) == 0.0);
}

#[test]
fn qwen3_next_hybrid_figures() {
    let m = model("Qwen3-Coder-Next");
    assert_eq!((m.n_full_attn_layers, m.n_linear_layers, m.n_layers), (12, 36, 48));
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 24_576.0);
    assert_eq!(m.kv_bytes_per_token(Dtype::Fp8), 12_288.0);
    let mib = 1024.0 * 1024.0;
    // FACTS.md: about 38 MiB in bf16, about 74 MiB with an fp32 recurrent state.
    assert_relative_eq!(m.linear_state_bytes(Dtype::Bf16) / mib, 37.69, epsilon = 0.05);
    assert_relative_eq!(m.linear_state_bytes(Dtype::Fp32) / mib, 73.7, epsilon = 0.1);
    assert_relative_eq!(m.params_total() as f64 / 1e9, 80.0, epsilon = 0.5);
}

#[test]
fn qwen3_5_hybrid_figures() {
    let m = model("Qwen/Qwen3.5-35B-A3B-FP8");
    assert_eq!((m.n_full_attn_layers, m.n_linear_layers), (10, 30));
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 20_480.0);
    assert_eq!(m.kv_bytes_per_token(Dtype::Fp8), 10_240.0);
    let mib = 1024.0 * 1024.0;
    assert_relative_eq!(m.linear_state_bytes(Dtype::Bf16) / mib, 31.4, epsilon = 0.1);
    assert_relative_eq!(m.linear_state_bytes(Dtype::Fp32) / mib, 61.4, epsilon = 0.1);
    assert_relative_eq!(m.params_total() as f64 / 1e9, 35.0, epsilon = 0.5);
}

#[test]
fn dense_and_other_moe_figures() {
    let l8 = model("Llama-3.1-8B-Instruct");
    assert_relative_eq!(l8.params_total() as f64 / 1e9, 8.03, epsilon = 0.01);
    assert_eq!(l8.kv_bytes_per_token(Dtype::Bf16), 131_072.0);
    assert_eq!(l8.experts_touched(64.0), 0.0);
    let l70 = model("llama-3.3-70b");
    assert_relative_eq!(l70.params_total() as f64 / 1e9, 70.55, epsilon = 0.05);
    let mx = model("Mixtral-8x7B-Instruct-v0.1");
    assert_relative_eq!(mx.params_total() as f64 / 1e9, 46.7, epsilon = 0.1);
    assert_relative_eq!(mx.params_active() as f64 / 1e9, 12.9, epsilon = 0.1);
    let g = model("gpt-oss-120b");
    assert_eq!((g.n_full_attn_layers, g.n_sliding_layers), (18, 18));
    assert_relative_eq!(g.params_total() as f64 / 1e9, 116.8, epsilon = 0.5);
    // MXFP4 experts: about 61 GB of weights although the config says bfloat16.
    assert!(g.weight_bytes(Dtype::Bf16) < 70e9, "{}", g.weight_bytes(Dtype::Bf16));
    // Sliding layers hold at most the 128-token window.
    assert_eq!(
        g.kv_bytes_for_context(Dtype::Bf16, 10_000.0),
        g.kv_bytes_per_token(Dtype::Bf16) * 10_000.0 + g.sliding_kv_bytes_per_token(Dtype::Bf16) * 128.0
    );
    let q = model("Qwen3-235B-A22B");
    assert_relative_eq!(q.params_active() as f64 / 1e9, 22.2, epsilon = 0.2);
}

#[test]
fn prefill_flops_are_linear_plus_quadratic() {
    let m = model("Qwen3-Coder-30B-A3B-Instruct");
    let l = 32_768.0;
    let expect = m.flops_per_token_linear() * l + m.attn_flops_per_token_pair() * l * (l + 1.0) / 2.0;
    assert_relative_eq!(m.prompt_prefill_flops(l), expect, max_relative = 1e-12);
    // Chunks add up to the whole prompt.
    let chunks: f64 = (0..4).map(|i| m.chunk_attn_flops(i as f64 * 8192.0, 8192.0)).sum();
    assert_relative_eq!(chunks, m.chunk_attn_flops(0.0, l), max_relative = 1e-12);
}

#[test]
fn gpu_catalog_has_the_required_gpus_with_sources() {
    let c = Catalog::builtin();
    for name in ["H100 SXM", "H100 PCIe", "H100 NVL", "H200 SXM", "H200 NVL", "B200", "A100 80GB", "L40S", "MI300X"] {
        let g = c.gpu(name).unwrap();
        assert!(!g.source.is_empty());
        assert!(g.memory_gb > 0.0 && g.hbm_bandwidth_tb_s > 0.0 && g.bf16_tflops > 0.0 && g.tdp_w > 0.0);
    }
    assert_eq!(c.gpu("h200-sxm").unwrap().name, "H200 SXM");
    assert_eq!(c.gpu_family("H100").len(), 3);
    assert!(c.gpu("A100 80GB").unwrap().fp8_tflops.is_none());
    assert_eq!(c.gpu("H200 SXM").unwrap().vllm_default_max_num_batched_tokens(), 8192);
    assert_eq!(c.gpu("L40S").unwrap().vllm_default_max_num_batched_tokens(), 2048);
    assert!(c.models.len() >= 11);
}

#[test]
fn unknown_gpu_and_model_name_the_catalog() {
    let c = Catalog::builtin();
    let e = c.gpu("H900").unwrap_err().to_string();
    assert!(e.contains("unknown GPU `H900`") && e.contains("H200 SXM"), "{e}");
    // A family that is no alias names its members as the choices, and only them.
    let e = c.gpu("H100").unwrap_err().to_string();
    assert!(e.ends_with("known: H100 SXM, H100 PCIe, H100 NVL"), "{e}");
    let e = c.model("no-such-model").unwrap_err().to_string();
    assert!(e.contains("unknown model"), "{e}");
}

#[test]
fn config_json_errors_name_file_and_field() {
    let text = r#"{"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096, "intermediate_size": 11008}"#;
    let e = ModelArch::from_config_json("x", "cfg.json", text).unwrap_err().to_string();
    assert!(e.contains("cfg.json") && e.contains("num_hidden_layers") && e.contains("missing"), "{e}");
    let e = ModelArch::from_config_json("x", "cfg.json", "{\"model_type\": ").unwrap_err().to_string();
    assert!(e.contains("cfg.json") && e.contains("line 1"), "{e}");
    let bad = text.replace("\"hidden_size\": 4096", "\"hidden_size\": -5, \"num_hidden_layers\": 2");
    let e = ModelArch::from_config_json("x", "cfg.json", &bad).unwrap_err().to_string();
    assert!(e.contains("hidden_size") && e.contains("non-negative integer"), "{e}");
    let e = ModelArch::from_config_json("x", "cfg.json", &text.replace("llama", "mamba")).unwrap_err().to_string();
    assert!(e.contains("model_type") && e.contains("unsupported"), "{e}");
    // More KV heads than query heads is no attention layout (was accepted).
    let kv = text.replace(
        "\"num_attention_heads\": 32",
        "\"num_attention_heads\": 32, \"num_hidden_layers\": 2, \"num_key_value_heads\": 64",
    );
    let e = ModelArch::from_config_json("x", "cfg.json", &kv).unwrap_err().to_string();
    assert!(e.contains("cfg.json") && e.contains("`num_key_value_heads`") && e.contains("64"), "{e}");
}

#[test]
fn a_user_config_json_path_works_as_a_model() {
    let dir = crate::Scratch::new("cfg");
    let path = dir.join("mine.json");
    std::fs::write(&path, include_str!("../../models/configs/qwen3-8b.json")).unwrap();
    let m = Catalog::builtin().model(path.to_str().unwrap()).unwrap();
    assert_eq!(m.n_layers, 36);
}
