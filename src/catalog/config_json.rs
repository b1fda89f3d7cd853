//! Reading a Hugging Face `config.json` into a [`ModelArch`]: which layers hold full, sliding-window,
//! chunked or linear attention, which carry MoE or dense MLPs, the attention kind (GQA or MLA), and the
//! checkpoint's own quantization. The derivation rules of each family follow the transformers
//! configuration classes (`configuration_<family>.py`, `__post_init__`), cited per rule below.
//!
//! Every integer field is checked on the way in: a value that is not a non-negative integer, or that
//! does not fit the width the model keeps it in, is an error naming the file and the key, never a
//! silent truncation.

use super::model::{DsaSpec, LinearAttnSpec, MlaSpec, ModelArch, MoeSpec};
use crate::error::{Error, Result};
use crate::units::Dtype;
use serde_json::Value;

/// `model_type`s capsim can derive every figure for. A multimodal wrapper is read by the `model_type`
/// of its `text_config` (the `_text` suffix dropped): Kimi-K2.5's `kimi_k25` wrapper holds a `kimi_k2`
/// language model, Qwen3.5's `qwen3_5_moe` a `qwen3_5_moe_text` one. The vision tower is not modelled.
pub const SUPPORTED_MODEL_TYPES: &[&str] = &[
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "gemma2",
    "gemma3",
    "qwen3_moe",
    "qwen2_moe",
    "mixtral",
    "gpt_oss",
    "llama4",
    "glm4_moe",
    "deepseek_v3",
    "kimi_k2",
    "glm_moe_dsa",
    "minimax_m2",
    "qwen3_next",
    "qwen3_5_moe",
];

fn get<'a>(v: &'a Value, text_cfg: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    text_cfg.and_then(|t| t.get(key)).or_else(|| v.get(key)).filter(|x| !x.is_null())
}

struct Cfg<'a> {
    source: &'a str,
    root: &'a Value,
    text: Option<&'a Value>,
}

impl<'a> Cfg<'a> {
    fn err(&self, key: &str, msg: impl Into<String>) -> Error {
        Error::input(self.source, None, Some(key), msg)
    }
    fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        match get(self.root, self.text, key) {
            None => Ok(None),
            Some(v) => {
                v.as_u64().map(Some).ok_or_else(|| self.err(key, format!("must be a non-negative integer, got {v}")))
            }
        }
    }
    /// A required positive integer no larger than `max` (a bound that keeps every derived product in
    /// range: no real model comes near it).
    fn positive(&self, key: &str, max: u64) -> Result<u64> {
        let v = self.opt_u64(key)?.ok_or_else(|| self.err(key, "required field is missing"))?;
        self.check_range(key, v, max)
    }
    fn opt_positive(&self, key: &str, max: u64) -> Result<Option<u64>> {
        self.opt_u64(key)?.map(|v| self.check_range(key, v, max)).transpose()
    }
    fn check_range(&self, key: &str, v: u64, max: u64) -> Result<u64> {
        if v == 0 {
            return Err(self.err(key, "must be positive, got 0"));
        }
        if v > max {
            return Err(self.err(key, format!("{v} is out of range (at most {max})")));
        }
        Ok(v)
    }
    fn str(&self, key: &str) -> Option<&'a str> {
        get(self.root, self.text, key).and_then(Value::as_str)
    }
    fn bool(&self, key: &str) -> Option<bool> {
        get(self.root, self.text, key).and_then(Value::as_bool)
    }
    fn u64_list(&self, key: &str) -> Result<Option<Vec<u64>>> {
        match get(self.root, self.text, key) {
            None => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_u64().ok_or_else(|| self.err(key, format!("entries must be non-negative integers, got {x}")))
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(v) => Err(self.err(key, format!("must be a list of integers, got {v}"))),
        }
    }
}

/// Bounds on config integers: far above any real model, low enough that no product overflows.
const MAX_LAYERS: u64 = 10_000;
const MAX_DIM: u64 = 1 << 24;
const MAX_HEADS: u64 = 1 << 16;
const MAX_EXPERTS: u64 = 1 << 16;
const MAX_CONTEXT: u64 = 1 << 34;

#[derive(Clone, Copy, PartialEq)]
enum LayerKind {
    Full,
    Sliding,
    Chunked,
    Linear,
}

/// Layer kinds: `layer_types` when the config lists them, else the family's rule.
fn layer_kinds(c: &Cfg, family: &str, n_layers: u32) -> Result<Vec<LayerKind>> {
    if let Some(v) = get(c.root, c.text, "layer_types") {
        let types = v.as_array().ok_or_else(|| c.err("layer_types", "must be a list of strings"))?;
        if types.len() != n_layers as usize {
            return Err(
                c.err("layer_types", format!("has {} entries but num_hidden_layers is {n_layers}", types.len()))
            );
        }
        return types
            .iter()
            .map(|t| match t.as_str() {
                Some("full_attention" | "attention") => Ok(LayerKind::Full),
                Some("sliding_attention") => Ok(LayerKind::Sliding),
                Some("chunked_attention") => Ok(LayerKind::Chunked),
                Some("linear_attention") => Ok(LayerKind::Linear),
                _ => Err(c.err("layer_types", format!("unknown layer type {t}"))),
            })
            .collect();
    }
    let n = n_layers as u64;
    Ok(match family {
        // MiniMax-M2: `attn_type_list` gives each layer's attention, 1 = softmax (full) attention and 0 =
        // lightning (linear) attention, the convention of MiniMax-Text-01 / M1 (one softmax layer after
        // every seven lightning ones; recalled, not re-read). The MiniMax-M2.5 config lists 62 x 1 (the
        // config corpus's SOURCES.md: the upstream file has `attn_type_list`, 62 x 1; the copy kept here
        // lacks the key), i.e. every layer is full GQA attention. Lightning attention's state is not
        // modelled, so a 0 is refused.
        "minimax_m2" => match c.u64_list("attn_type_list")? {
            None => vec![LayerKind::Full; n as usize],
            Some(l) => {
                if l.len() != n as usize {
                    return Err(
                        c.err("attn_type_list", format!("has {} entries but num_hidden_layers is {n}", l.len()))
                    );
                }
                if l.iter().any(|&t| t != 1) {
                    return Err(c.err(
                        "attn_type_list",
                        "only softmax attention layers (1) are supported; lightning attention (0) is not modelled",
                    ));
                }
                vec![LayerKind::Full; n as usize]
            }
        },
        // Qwen3-Next / Qwen3.5: every full_attention_interval-th layer is full attention, the rest
        // Gated DeltaNet.
        "qwen3_next" | "qwen3_5_moe" => {
            let interval = c.positive("full_attention_interval", MAX_LAYERS)?;
            (1..=n).map(|i| if i % interval == 0 { LayerKind::Full } else { LayerKind::Linear }).collect()
        }
        // configuration_gemma2.py: sliding if (i + 1) % 2, i.e. even layers slide.
        "gemma2" => (0..n).map(|i| if (i + 1) % 2 != 0 { LayerKind::Sliding } else { LayerKind::Full }).collect(),
        // configuration_gemma3.py: sliding if (i + 1) % pattern, pattern = sliding_window_pattern (6).
        "gemma3" => {
            let pattern = match c.opt_positive("sliding_window_pattern", MAX_LAYERS)? {
                Some(p) => p,
                None => c.opt_positive("_sliding_window_pattern", MAX_LAYERS)?.unwrap_or(6),
            };
            (0..n).map(|i| if (i + 1) % pattern != 0 { LayerKind::Sliding } else { LayerKind::Full }).collect()
        }
        // configuration_llama4.py: no_rope_layers[i] = 1 for RoPE layers, which use chunked attention;
        // default: every no_rope_layer_interval-th layer (4) is a NoPE full-attention layer. Without an
        // attention_chunk_size every layer is full.
        "llama4" => {
            if get(c.root, c.text, "attention_chunk_size").is_none() && get(c.root, c.text, "no_rope_layers").is_some()
            {
                vec![LayerKind::Full; n as usize]
            } else {
                let rope = match c.u64_list("no_rope_layers")? {
                    Some(l) if !l.is_empty() => {
                        if l.len() != n as usize {
                            return Err(c.err(
                                "no_rope_layers",
                                format!("has {} entries but num_hidden_layers is {n}", l.len()),
                            ));
                        }
                        l.iter().map(|&x| x != 0).collect::<Vec<_>>()
                    }
                    _ => {
                        let interval = c.opt_positive("no_rope_layer_interval", MAX_LAYERS)?.unwrap_or(4);
                        (0..n).map(|i| (i + 1) % interval != 0).collect()
                    }
                };
                rope.into_iter().map(|r| if r { LayerKind::Chunked } else { LayerKind::Full }).collect()
            }
        }
        _ => vec![LayerKind::Full; n as usize],
    })
}

/// The checkpoint's own weight and KV formats from `quantization_config` (FACTS-hardware-engines.md
/// section 6). Returns (all weights, experts only, KV cache).
type Quant = (Option<Dtype>, Option<Dtype>, Option<Dtype>);

fn quantization(c: &Cfg) -> Result<Quant> {
    let key = "quantization_config";
    // Multimodal wrappers may keep it inside text_config (Kimi-K2.5).
    let Some(q) = c.root.get(key).or_else(|| c.text.and_then(|t| t.get(key))).filter(|q| !q.is_null()) else {
        return Ok((None, None, None));
    };
    let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("").to_ascii_lowercase();
    let bits = q.get("bits").and_then(Value::as_u64);
    let kv = match q.get("kv_cache_quant_algo").and_then(Value::as_str) {
        Some(s) if s.eq_ignore_ascii_case("fp8") => Some(Dtype::Fp8),
        _ => match q.get("kv_cache_scheme").and_then(|s| s.get("num_bits")).and_then(Value::as_u64) {
            Some(8) => Some(Dtype::Fp8),
            _ => None,
        },
    };
    let from_algo = |algo: &str| match algo.to_ascii_uppercase().as_str() {
        "FP8" => Some(Dtype::Fp8),
        "NVFP4" => Some(Dtype::Nvfp4),
        "W4A16_AWQ" | "INT4_AWQ" => Some(Dtype::Int4),
        _ => None,
    };
    let weights = match method.as_str() {
        "fp8" | "fbgemm_fp8" => Some(Dtype::Fp8),
        // gpt-oss: only the MoE experts are MXFP4; attention, router, embeddings stay BF16.
        "mxfp4" => return Ok((None, Some(Dtype::Mxfp4), kv)),
        "gptq" | "awq" | "gptq_marlin" | "awq_marlin" => match bits {
            Some(4) | None => Some(Dtype::Int4),
            Some(8) => Some(Dtype::Fp8),
            Some(b) => {
                return Err(c.err("quantization_config.bits", format!("{b}-bit {method} is not supported (4 or 8)")))
            }
        },
        "modelopt" => {
            let algo = q.get("quant_algo").and_then(Value::as_str).unwrap_or("");
            from_algo(algo)
                .ok_or_else(|| {
                    c.err(
                        "quantization_config.quant_algo",
                        format!("`{algo}` is not supported (FP8, NVFP4, W4A16_AWQ)"),
                    )
                })?
                .into()
        }
        "compressed-tensors" => {
            // The weights of the first config group decide (the others are usually the same scheme on
            // other targets); `format` tells nvfp4 apart from integer 4-bit packing.
            let group = q.get("config_groups").and_then(Value::as_object).and_then(|g| g.values().next());
            let w = group.and_then(|g| g.get("weights"));
            let nb = w.and_then(|w| w.get("num_bits")).and_then(Value::as_u64);
            let ty = w.and_then(|w| w.get("type")).and_then(Value::as_str).unwrap_or("int");
            let format = q.get("format").and_then(Value::as_str).unwrap_or("");
            let dtype = match (nb, ty) {
                (Some(8), "float") => Dtype::Fp8,
                (Some(8), _) => Dtype::Fp8, // INT8 weights: one byte per weight, as FP8
                (Some(4), "float") => Dtype::Nvfp4,
                (Some(4), _) if format.contains("nvfp4") => Dtype::Nvfp4,
                (Some(4), _) => Dtype::Int4,
                _ => {
                    return Err(c.err(
                        "quantization_config.config_groups",
                        "compressed-tensors weights scheme not recognized (need num_bits 4 or 8)",
                    ))
                }
            };
            // `ignore` lists the modules left unquantized. When attention is among them the scheme is
            // taken to cover the routed experts only (Kimi-K2.5 / K2-Thinking's native INT4: lm_head,
            // `self_attn`, `shared_experts` and the dense MLPs ignored, so only the routed experts are
            // INT4); a dense MLP quantized alongside the experts would be counted at the deployment's
            // precision.
            let ignores_attention = q.get("ignore").and_then(Value::as_array).is_some_and(|l| {
                l.iter().filter_map(Value::as_str).any(|s| s.contains("self_attn") || s.contains("attention"))
            });
            if ignores_attention {
                return Ok((None, Some(dtype), kv));
            }
            Some(dtype)
        }
        "bitsandbytes" => match q.get("load_in_4bit").and_then(Value::as_bool) {
            Some(true) => Some(Dtype::Int4),
            _ => Some(Dtype::Fp8),
        },
        "" => return Err(c.err("quantization_config.quant_method", "required field is missing")),
        other => {
            return Err(c.err(
                "quantization_config.quant_method",
                format!(
                    "`{other}` is not supported (fp8, mxfp4, gptq, awq, modelopt, compressed-tensors, bitsandbytes); \
                     remove the block and pass --precision"
                ),
            ))
        }
    };
    Ok((weights, None, kv))
}

/// Parse a Hugging Face config.json. `source` names the file in errors.
pub fn parse(name: &str, source: &str, text: &str) -> Result<ModelArch> {
    let root: Value = crate::measured::json::reject_duplicate_keys(text)
        .and_then(|_| serde_json::from_str(text))
        .map_err(|e| Error::input(source, Some(e.line()), None, format!("invalid JSON: {e}")))?;
    if !root.is_object() {
        return Err(Error::input(source, None, None, "config.json must be a JSON object"));
    }
    let text_cfg = root.get("text_config").filter(|t| t.is_object());
    let c = Cfg { source, root: &root, text: text_cfg };
    // The language model's own model_type (text_config's, when there is one) names the family.
    let model_type = c.str("model_type").ok_or_else(|| c.err("model_type", "required field is missing"))?.to_string();
    let family = model_type.trim_end_matches("_text").to_string();
    if !SUPPORTED_MODEL_TYPES.contains(&family.as_str()) {
        let key = if text_cfg.is_some_and(|t| t.get("model_type").is_some()) {
            "text_config.model_type"
        } else {
            "model_type"
        };
        return Err(
            c.err(key, format!("unsupported model_type `{family}`; supported: {}", SUPPORTED_MODEL_TYPES.join(", ")))
        );
    }
    let hidden = c.positive("hidden_size", MAX_DIM)?;
    let n_layers = c.positive("num_hidden_layers", MAX_LAYERS)? as u32;
    let n_heads = c.positive("num_attention_heads", MAX_HEADS)?;
    let n_kv_heads = c.opt_positive("num_key_value_heads", MAX_HEADS)?.unwrap_or(n_heads);
    // Grouped-query attention shares each KV head among query heads: never more KV heads than them.
    if n_kv_heads > n_heads {
        return Err(c.err(
            "num_key_value_heads",
            format!("{n_kv_heads} is more than num_attention_heads ({n_heads}): each KV head serves one or more query heads"),
        ));
    }
    let head_dim = match c.opt_positive("head_dim", MAX_DIM)? {
        Some(d) => d,
        None => (hidden / n_heads).max(1),
    };
    let vocab = c.positive("vocab_size", MAX_DIM)?;
    let max_context = c.positive("max_position_embeddings", MAX_CONTEXT)?;
    let tie_embeddings = root
        .get("tie_word_embeddings")
        .and_then(Value::as_bool)
        .or_else(|| c.bool("tie_word_embeddings"))
        .unwrap_or(matches!(family.as_str(), "gemma2" | "gemma3"));

    let kinds = layer_kinds(&c, &family, n_layers)?;
    let count = |k: LayerKind| kinds.iter().filter(|&&x| x == k).count() as u32;
    let n_full = count(LayerKind::Full);
    let n_chunked = count(LayerKind::Chunked);
    let n_sliding = count(LayerKind::Sliding) + n_chunked;
    let n_linear = count(LayerKind::Linear);
    if count(LayerKind::Sliding) > 0 && n_chunked > 0 {
        return Err(c.err("layer_types", "sliding and chunked layers in one model are not supported"));
    }
    let sliding_window = if n_chunked > 0 {
        // Chunked local attention (Llama 4) holds at most one chunk of KV per layer: modelled as a
        // window of attention_chunk_size tokens (an upper bound on the KV it keeps).
        c.opt_positive("attention_chunk_size", MAX_CONTEXT)?.unwrap_or(8192)
    } else if n_sliding > 0 {
        c.positive("sliding_window", MAX_CONTEXT)?
    } else {
        0
    };

    // Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): a compressed KV latent per token.
    let mla = match c.opt_positive("kv_lora_rank", MAX_DIM)? {
        None => None,
        Some(kv_lora_rank) => Some(MlaSpec {
            q_lora_rank: c.opt_positive("q_lora_rank", MAX_DIM)?.unwrap_or(0),
            kv_lora_rank,
            qk_nope_head_dim: c.positive("qk_nope_head_dim", MAX_DIM)?,
            qk_rope_head_dim: c.positive("qk_rope_head_dim", MAX_DIM)?,
            v_head_dim: c.positive("v_head_dim", MAX_DIM)?,
        }),
    };
    // DeepSeek sparse attention (GLM-5 `glm_moe_dsa`; the DeepSeek-V3.2 design): a lightning indexer of
    // index_n_heads x index_head_dim scores every cached token and the MLA attention reads only the
    // index_topk best. Required for glm_moe_dsa (its configuration has no defaults capsim relies on).
    let dsa = if family == "glm_moe_dsa" || get(c.root, c.text, "index_topk").is_some() {
        if mla.is_none() {
            return Err(c.err("kv_lora_rank", "sparse attention (index_topk) is modelled on MLA only"));
        }
        Some(DsaSpec {
            index_n_heads: c.positive("index_n_heads", MAX_HEADS)?,
            index_head_dim: c.positive("index_head_dim", MAX_DIM)?,
            index_topk: c.positive("index_topk", MAX_CONTEXT)?,
        })
    } else {
        None
    };

    let n_experts = match c.opt_u64("num_experts")? {
        Some(e) => Some(e),
        None => match c.opt_u64("num_local_experts")? {
            Some(e) => Some(e),
            None => c.opt_u64("n_routed_experts")?,
        },
    };
    let intermediate_key = if family == "llama4" { "intermediate_size_mlp" } else { "intermediate_size" };
    let moe = match n_experts {
        Some(e) if e > 1 => {
            let e = c.check_range("num_experts", e, MAX_EXPERTS)?;
            let k = match c.opt_u64("num_experts_per_tok")? {
                Some(k) => k,
                None => c
                    .opt_u64("experts_per_token")?
                    .ok_or_else(|| c.err("num_experts_per_tok", "required for MoE models"))?,
            };
            if k == 0 || k > e {
                return Err(c.err("num_experts_per_tok", format!("must be in 1..={e}, got {k}")));
            }
            let expert_intermediate = match c.opt_u64("moe_intermediate_size")? {
                Some(v) if v > 0 => c.check_range("moe_intermediate_size", v, MAX_DIM)?,
                _ => c.positive("intermediate_size", MAX_DIM)?,
            };
            // Shared experts: Qwen names their width and gates them; DeepSeek and GLM count them in
            // units of the routed expert's width; Llama 4 has one of the routed width.
            let (shared_intermediate, shared_gate) = match family.as_str() {
                "deepseek_v3" | "kimi_k2" | "glm4_moe" | "glm_moe_dsa" => {
                    (c.opt_u64("n_shared_experts")?.unwrap_or(0).min(MAX_EXPERTS) * expert_intermediate, false)
                }
                "llama4" => (expert_intermediate, false),
                // MiniMax-M2 has no shared expert (`shared_intermediate_size` 0; intermediate_size is the
                // routed expert's width). A nonzero width is refused rather than guessed at (gated or not).
                "minimax_m2" => match c.opt_u64("shared_intermediate_size")? {
                    None | Some(0) => (0, false),
                    Some(_) => {
                        return Err(c.err("shared_intermediate_size", "a MiniMax-M2 shared expert is not modelled"))
                    }
                },
                _ => {
                    // 0 or absent: no shared expert.
                    let s = c.opt_u64("shared_expert_intermediate_size")?.filter(|&s| s > 0);
                    let s = s.map(|s| c.check_range("shared_expert_intermediate_size", s, MAX_DIM)).transpose()?;
                    (s.unwrap_or(0), s.is_some())
                }
            };
            let n_moe_layers = match family.as_str() {
                "deepseek_v3" | "kimi_k2" | "glm4_moe" | "glm_moe_dsa" => {
                    let k_dense = c.opt_u64("first_k_dense_replace")?.unwrap_or(0);
                    if k_dense > n_layers as u64 {
                        return Err(c.err(
                            "first_k_dense_replace",
                            format!("{k_dense} is more than num_hidden_layers ({n_layers})"),
                        ));
                    }
                    // modeling_deepseek.py: layer i has an MoE MLP when i >= first_k_dense_replace and
                    // i % moe_layer_freq == 0 (1 in every published config).
                    let freq = c.opt_positive("moe_layer_freq", MAX_LAYERS)?.unwrap_or(1);
                    (k_dense..n_layers as u64).filter(|i| i % freq == 0).count() as u32
                }
                "llama4" => match c.u64_list("moe_layers")? {
                    Some(l) => {
                        if l.iter().any(|&i| i >= n_layers as u64) {
                            return Err(c.err("moe_layers", format!("layer index out of 0..{n_layers}")));
                        }
                        l.len() as u32
                    }
                    None => {
                        let step = c.opt_positive("interleave_moe_layer_step", MAX_LAYERS)?.unwrap_or(1);
                        (step - 1..n_layers as u64).step_by(step as usize).count() as u32
                    }
                },
                _ => n_layers,
            };
            Some(MoeSpec {
                n_experts: e as u32,
                n_experts_per_token: k as u32,
                expert_intermediate,
                shared_intermediate,
                shared_gate,
                n_moe_layers,
            })
        }
        _ => None,
    };
    let dense_layers = n_layers - moe.as_ref().map_or(0, |m| m.n_moe_layers);
    let intermediate = if dense_layers > 0 { c.positive(intermediate_key, MAX_DIM)? } else { 0 };
    let linear = if n_linear > 0 {
        Some(LinearAttnSpec {
            n_key_heads: c.positive("linear_num_key_heads", MAX_HEADS)?,
            n_value_heads: c.positive("linear_num_value_heads", MAX_HEADS)?,
            key_head_dim: c.positive("linear_key_head_dim", MAX_DIM)?,
            value_head_dim: c.positive("linear_value_head_dim", MAX_DIM)?,
            conv_kernel: c.positive("linear_conv_kernel_dim", MAX_DIM)?,
        })
    } else {
        None
    };
    let (weight_dtype_native, expert_dtype_native, kv_dtype_native) = quantization(&c)?;
    // The first of the keys the model families use for their MTP modules (none: 0).
    let mut mtp_modules = 0;
    for key in ["num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules"] {
        if let Some(n) = c.opt_u64(key)? {
            mtp_modules = n.min(MAX_LAYERS) as u32;
            break;
        }
    }
    Ok(ModelArch {
        name: name.to_string(),
        model_type: family.clone(),
        hidden,
        n_layers,
        n_full_attn_layers: n_full,
        n_sliding_layers: n_sliding,
        sliding_window,
        n_linear_layers: n_linear,
        n_heads,
        n_kv_heads,
        head_dim,
        vocab,
        tie_embeddings,
        intermediate,
        moe,
        linear,
        mla,
        dsa,
        attn_output_gate: family == "qwen3_next" || family == "qwen3_5_moe",
        weight_dtype_native,
        expert_dtype_native,
        kv_dtype_native,
        max_context,
        mtp_modules,
    })
}
