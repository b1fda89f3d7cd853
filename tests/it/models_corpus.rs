//! The models of the public measurement corpus (issue 23): every config.json of the corpus resolves,
//! by catalog name, by Hugging Face id and by path, into the architecture its model card describes.
//! Published totals: DeepSeek-R1 671B / 37B (arXiv:2412.19437), Kimi-K2.5 1T / 32B (MoonshotAI/Kimi-K2.5
//! README), MiniMax-M2.5 230B / 10B (MiniMax-AI/MiniMax-M2 README), GLM-5 744B / 40B (zai-org/GLM-5
//! README), Qwen3.5-397B-A17B 397B / 17B (QwenLM/Qwen3.5 README).

use capsim::catalog::{Catalog, ModelArch};
use capsim::units::Dtype;
use serde_json::Value;
use std::process::{Command, Output};

fn model(name: &str) -> ModelArch {
    Catalog::builtin().model(name).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn config(file: &str) -> String {
    std::fs::read_to_string(format!("{}/models/configs/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn parse(text: &str) -> capsim::error::Result<ModelArch> {
    ModelArch::from_config_json("t", "t.json", text)
}

fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
}

/// `got` within `rel` (a fraction) of `published` (in billions).
fn near(what: &str, got: u64, published_b: f64, rel: f64) {
    let g = got as f64 / 1e9;
    assert!((g / published_b - 1.0).abs() <= rel, "{what}: {g:.2}B against {published_b}B published (within {rel})");
}

/// Every corpus model id of aic-e2e/measured.csv and of the corpus's configs resolves, to this entry.
#[test]
fn corpus_model_ids_resolve_to_their_entries() {
    let c = Catalog::builtin();
    for (id, entry) in [
        ("deepseek-ai/DeepSeek-R1", "DeepSeek-R1"),
        ("nvidia/DeepSeek-R1-NVFP4", "DeepSeek-R1"),
        ("deepseek-ai/DeepSeek-V3", "DeepSeek-V3"),
        ("nvidia/DeepSeek-V3.1-NVFP4", "DeepSeek-V3"),
        ("moonshotai/Kimi-K2.5", "Kimi-K2.5"),
        ("MiniMaxAI/MiniMax-M2.5", "MiniMax-M2.5"),
        ("zai-org/GLM-5", "GLM-5"),
        ("zhipuai/GLM-5", "GLM-5"),
        ("zai-org/GLM-5-FP8", "GLM-5"),
        ("Qwen/Qwen3.5-397B-A17B", "Qwen3.5-397B-A17B"),
        ("meta-llama/Llama-3.1-70B", "Llama-3.1-70B"),
        ("meta-llama/Llama-3.1-70B-Instruct", "Llama-3.1-70B"),
        ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct"),
        ("nvidia/Llama-3.1-8B-Instruct-FP8", "Llama-3.1-8B-Instruct"),
        ("Qwen/Qwen3-32B", "Qwen3-32B"),
        ("nvidia/Qwen3-32B-NVFP4", "Qwen3-32B"),
        ("Qwen/Qwen3-235B-A22B", "Qwen3-235B-A22B"),
        ("Qwen/Qwen3-235B-A22B-FP8", "Qwen3-235B-A22B"),
        ("openai/gpt-oss-120b", "gpt-oss-120b"),
    ] {
        assert_eq!(c.model(id).unwrap_or_else(|e| panic!("{id}: {e}")).name, entry, "{id}");
    }
}

/// No name or alias of the catalog stands for two entries (the first would silently win).
#[test]
fn catalog_names_and_aliases_are_unique() {
    let c = Catalog::builtin();
    let norm = |s: &str| s.trim().to_ascii_lowercase().replace(['_', ' '], "-");
    let mut seen = std::collections::HashMap::new();
    for m in &c.models {
        for n in std::iter::once(&m.entry.name).chain(&m.entry.aliases) {
            if let Some(other) = seen.insert(norm(n), m.entry.name.clone()) {
                assert_eq!(other, m.entry.name, "`{n}` names both {other} and {}", m.entry.name);
            }
        }
    }
}

/// A catalog file named by its path (`--model path.json`) is the catalog entry's architecture.
#[test]
fn corpus_configs_resolve_by_path_too() {
    let c = Catalog::builtin();
    for (file, entry) in [
        ("deepseek-r1.json", "DeepSeek-R1"),
        ("kimi-k2.5.json", "Kimi-K2.5"),
        ("minimax-m2.5.json", "MiniMax-M2.5"),
        ("glm-5.json", "GLM-5"),
        ("qwen3.5-397b-a17b.json", "Qwen3.5-397B-A17B"),
        ("llama-3.1-70b.json", "Llama-3.1-70B"),
    ] {
        let path = format!("{}/models/configs/{file}", env!("CARGO_MANIFEST_DIR"));
        let by_path = c.model(&path).unwrap();
        assert!(by_path.same_architecture(&model(entry)), "{file}");
    }
    // The corpus's DeepSeek-V3 copy has CRLF line endings; the trimmed R1 copy is the same architecture.
    let crlf = parse(&config("deepseek-r1.json").replace('\n', "\r\n")).unwrap();
    assert!(crlf.same_architecture(&model("DeepSeek-V3")));
    assert!(model("DeepSeek-R1").same_architecture(&model("DeepSeek-V3")));
    // Llama-3.1-70B is Llama-3.3-70B's architecture.
    assert!(model("Llama-3.1-70B").same_architecture(&model("Llama-3.3-70B-Instruct")));
}

#[test]
fn deepseek_r1_is_671b_with_37b_active_and_an_mla_latent() {
    let m = model("deepseek-ai/DeepSeek-R1");
    assert_eq!((m.model_type.as_str(), m.n_layers, m.n_moe_layers(), m.hidden), ("deepseek_v3", 61, 58, 7168));
    near("R1 total", m.params_total(), 671.0, 0.01);
    near("R1 active", m.params_active(), 37.0, 0.03);
    assert!(m.mla.is_some() && m.dsa.is_none());
    // (512 + 64) x 2 bytes x 61 layers (FACTS-hardware-engines.md 5b).
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 70_272.0);
    assert_eq!(m.kv_bytes_per_token(Dtype::Fp8), 35_136.0);
    assert_eq!(m.weight_dtype_native, Some(Dtype::Fp8), "fp8 block-128 quantization_config");
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.n_experts, moe.n_experts_per_token, moe.shared_intermediate), (256, 8, 2048));
}

#[test]
fn kimi_k2_5_reads_its_text_config_and_int4_experts() {
    let m = model("moonshotai/Kimi-K2.5");
    assert_eq!((m.model_type.as_str(), m.n_layers, m.n_moe_layers(), m.hidden), ("kimi_k2", 61, 60, 7168));
    assert_eq!((m.n_heads, m.vocab, m.max_context, m.tie_embeddings), (64, 163_840, 262_144, false));
    near("Kimi-K2.5 total", m.params_total(), 1000.0, 0.03);
    near("Kimi-K2.5 active", m.params_active(), 32.0, 0.03);
    assert_eq!(m.moe.as_ref().unwrap().n_experts, 384);
    assert!(m.mla.is_some());
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 70_272.0, "the MLA latent, as DeepSeek-V3's");
    // compressed-tensors INT4 on the routed experts only: attention, shared experts, the dense MLP and
    // the LM head are in the ignore list and stay at the deployment's precision.
    assert_eq!((m.weight_dtype_native, m.expert_dtype_native), (None, Some(Dtype::Int4)));
    assert_eq!(m.kv_dtype_native, None);
    let gb = m.weight_bytes(Dtype::Bf16) / 1e9;
    assert!((520.0..620.0).contains(&gb), "INT4 experts and BF16 rest: {gb:.0} GB (the checkpoint is ~595 GB)");
    // The same architecture as Kimi-K2 but for the checkpoint's precision and context.
    let k2 = model("Kimi-K2-Instruct");
    assert_eq!((k2.params_total(), k2.params_active()), (m.params_total(), m.params_active()));
}

#[test]
fn minimax_m2_5_is_full_gqa_attention_with_256_experts() {
    let m = model("MiniMaxAI/MiniMax-M2.5");
    assert_eq!((m.model_type.as_str(), m.n_layers, m.n_full_attn_layers, m.n_linear_layers), ("minimax_m2", 62, 62, 0));
    assert_eq!((m.hidden, m.n_heads, m.n_kv_heads, m.head_dim, m.vocab), (3072, 48, 8, 128, 200_064));
    assert!(m.mla.is_none() && m.linear.is_none());
    let moe = m.moe.as_ref().unwrap();
    assert_eq!(
        (moe.n_experts, moe.n_experts_per_token, moe.expert_intermediate, moe.shared_intermediate),
        (256, 8, 1536, 0)
    );
    assert_eq!(m.n_moe_layers(), 62);
    near("MiniMax-M2.5 total", m.params_total(), 230.0, 0.01);
    // "10B active" is a round figure: 10.4B in the matmuls, 11.0B with the 0.6B input embedding.
    near("MiniMax-M2.5 active (matmuls)", m.matmul_params_active(), 10.0, 0.05);
    // 2 x 8 KV heads x 128 x 2 bytes x 62 layers.
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 253_952.0);
    assert_eq!(m.weight_dtype_native, Some(Dtype::Fp8));
}

#[test]
fn glm_5_is_mla_with_a_sparse_attention_indexer() {
    let m = model("zhipuai/GLM-5");
    assert_eq!((m.model_type.as_str(), m.n_layers, m.n_moe_layers(), m.hidden), ("glm_moe_dsa", 78, 75, 6144));
    let mla = m.mla.as_ref().unwrap();
    assert_eq!(
        (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim),
        (2048, 512, 192, 64, 256)
    );
    let dsa = m.dsa.as_ref().unwrap();
    assert_eq!((dsa.index_n_heads, dsa.index_head_dim, dsa.index_topk), (32, 128, 2048));
    assert_eq!(dsa.key_bytes_per_token_layer(), 132.0, "FP8 key of 128 plus one 4-byte scale");
    let moe = m.moe.as_ref().unwrap();
    assert_eq!(
        (moe.n_experts, moe.n_experts_per_token, moe.expert_intermediate, moe.shared_intermediate),
        (256, 8, 2048, 2048)
    );
    near("GLM-5 total", m.params_total(), 744.0, 0.01);
    near("GLM-5 active", m.params_active(), 40.0, 0.05);
    near("GLM-5 active (matmuls)", m.matmul_params_active(), 40.0, 0.03);
    // Latent (512 + 64) in the KV dtype plus the indexer's 132-byte FP8 key, x 78 layers.
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 78.0 * (576.0 * 2.0 + 132.0));
    assert_eq!(m.kv_bytes_per_token(Dtype::Fp8), 78.0 * (576.0 + 132.0));
    // Attention FLOPs per pair: MLA's 2 x 64 heads x (256 + 256) plus the indexer's 2 x 32 x 128.
    assert_eq!(m.attn_flops_per_token_pair(), 78.0 * (2.0 * 64.0 * 512.0 + 2.0 * 32.0 * 128.0));
    assert_eq!(m.weight_dtype_native, None, "GLM-5 is BF16; GLM-5-FP8 takes FP8 from its name or config");
    // GLM-5-FP8's config is GLM-5's plus an fp8 block-128 quantization_config.
    let mut v: Value = serde_json::from_str(&config("glm-5.json")).unwrap();
    v["quantization_config"] = serde_json::json!({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head"]});
    let fp8 = parse(&v.to_string()).unwrap();
    assert!(fp8.params_total() == m.params_total() && fp8.weight_dtype_native == Some(Dtype::Fp8));
}

#[test]
fn qwen3_5_397b_is_a_hybrid_of_15_full_and_45_linear_layers() {
    let m = model("Qwen/Qwen3.5-397B-A17B");
    assert_eq!(
        (m.model_type.as_str(), m.n_full_attn_layers, m.n_linear_layers, m.hidden),
        ("qwen3_5_moe", 15, 45, 4096)
    );
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.n_experts, moe.n_experts_per_token, moe.shared_intermediate), (512, 10, 1024));
    near("Qwen3.5-397B total", m.params_total(), 397.0, 0.01);
    near("Qwen3.5-397B active", m.params_active(), 17.0, 0.03);
    // 2 x 2 KV heads x 256 x 2 bytes x 15 full-attention layers.
    assert_eq!(m.kv_bytes_per_token(Dtype::Bf16), 30_720.0);
    assert!(m.linear_state_bytes(Dtype::Bf16) > 0.0);
}

#[test]
fn dense_and_other_corpus_models() {
    near("Llama-3.1-70B", model("meta-llama/Llama-3.1-70B").params_total(), 70.6, 0.01);
    near("Llama-3.1-8B", model("meta-llama/Llama-3.1-8B-Instruct").params_total(), 8.03, 0.01);
    near("Qwen3-32B", model("Qwen/Qwen3-32B").params_total(), 32.8, 0.01);
    let q = model("Qwen/Qwen3-235B-A22B-FP8");
    near("Qwen3-235B total", q.params_total(), 235.0, 0.01);
    near("Qwen3-235B active", q.params_active(), 22.0, 0.02);
    near("gpt-oss-120b", model("openai/gpt-oss-120b").params_total(), 117.0, 0.01);
}

#[test]
fn corpus_config_rules_and_refusals() {
    let deepseek = config("deepseek-r1.json");
    let with = |key: &str, value: Value| {
        let mut v: Value = serde_json::from_str(&deepseek).unwrap();
        v[key] = value;
        parse(&v.to_string())
    };
    // moe_layer_freq: layers i >= first_k_dense_replace with i % freq == 0 are MoE.
    assert_eq!(with("moe_layer_freq", 2.into()).unwrap().n_moe_layers(), 29);
    // index_topk on MLA is DSA; the indexer's dims are then required.
    let e = with("index_topk", 2048.into()).unwrap_err().to_string();
    assert!(e.contains("index_n_heads"), "{e}");
    // GLM-5 without its indexer is refused, naming the key.
    let mut glm: Value = serde_json::from_str(&config("glm-5.json")).unwrap();
    glm.as_object_mut().unwrap().remove("index_topk");
    let e = parse(&glm.to_string()).unwrap_err().to_string();
    assert!(e.contains("index_topk"), "{e}");
    // MiniMax: attn_type_list of 1s is full attention; a lightning-attention layer (0) is refused.
    let minimax = config("minimax-m2.5.json");
    let mut v: Value = serde_json::from_str(&minimax).unwrap();
    v["attn_type_list"] = serde_json::json!(vec![1; 62]);
    assert!(parse(&v.to_string()).unwrap().same_architecture(&model("MiniMax-M2.5")));
    let mut l = vec![1; 62];
    l[0] = 0;
    v["attn_type_list"] = serde_json::json!(l);
    let e = parse(&v.to_string()).unwrap_err().to_string();
    assert!(e.contains("attn_type_list") && e.contains("lightning"), "{e}");
    // A wrapper whose language model is of an unknown family names text_config.model_type.
    let mut k: Value = serde_json::from_str(&config("kimi-k2.5.json")).unwrap();
    k["text_config"]["model_type"] = "unknown_lm".into();
    let e = parse(&k.to_string()).unwrap_err().to_string();
    assert!(e.contains("text_config.model_type") && e.contains("unknown_lm"), "{e}");
    // compressed-tensors INT4 that also covers attention quantizes every weight.
    let mut k: Value = serde_json::from_str(&config("kimi-k2.5.json")).unwrap();
    k["text_config"]["quantization_config"]["ignore"] = serde_json::json!(["lm_head"]);
    let all = parse(&k.to_string()).unwrap();
    assert_eq!((all.weight_dtype_native, all.expert_dtype_native), (Some(Dtype::Int4), None));
}

#[test]
fn capsim_models_lists_the_corpus_models() {
    let o = capsim(&["models", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v.as_array().unwrap();
    for name in ["DeepSeek-R1", "Kimi-K2.5", "MiniMax-M2.5", "GLM-5", "Qwen3.5-397B-A17B", "Llama-3.1-70B"] {
        let r = rows.iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{name} not listed"));
        assert!(r["source"].as_str().unwrap().contains("aiconfigurator"), "{name}: source names the copy");
    }
    let glm = rows.iter().find(|r| r["name"] == "GLM-5").unwrap();
    assert_eq!(glm["attention"], "mla");
    let o = capsim(&["models"]);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("MiniMax-M2.5") && table.contains("Kimi-K2.5"), "{table}");
    // A corpus config named by its path, as `--model path.json` in simulate and explain.
    let o = capsim(&["models", "--json", "--model", "models/configs/glm-5.json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let last = v.as_array().unwrap().last().unwrap();
    assert_eq!((last["name"].as_str(), last["moe_layers"].as_u64()), (Some("glm-5"), Some(75)));
}
