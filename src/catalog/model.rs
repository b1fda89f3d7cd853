//! Model architectures read from Hugging Face `config.json` files, and the figures the step-time model
//! needs derived from them: parameters (total and active), weight bytes, KV bytes per token, per-sequence
//! linear-attention state, FLOPs per prefill token as a function of context, and the experts a batch of
//! B tokens touches.
//!
//! Supported families: dense llama-style (`llama`, `mistral`, `qwen2`, `qwen3`), MoE (`qwen3_moe`,
//! `mixtral`, `gpt_oss`) and hybrid linear attention (`qwen3_next`, `qwen3_5_moe`). Norms, biases and
//! rotary tables are left out of parameter counts: they are well under 0.1% of any of these models.

use crate::error::{Error, Result};
use crate::units::Dtype;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct MoeSpec {
    pub n_experts: u32,
    pub n_experts_per_token: u32,
    pub expert_intermediate: u64,
    /// Intermediate size of the always-on shared expert (0 when there is none).
    pub shared_intermediate: u64,
}

/// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): a fixed-size recurrent state per sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct LinearAttnSpec {
    pub n_key_heads: u64,
    pub n_value_heads: u64,
    pub key_head_dim: u64,
    pub value_head_dim: u64,
    pub conv_kernel: u64,
}

impl LinearAttnSpec {
    fn key_dim(&self) -> u64 {
        self.n_key_heads * self.key_head_dim
    }
    fn value_dim(&self) -> u64 {
        self.n_value_heads * self.value_head_dim
    }
    /// Elements of the recurrent state matrix per layer: value heads x key dim x value dim.
    fn recurrent_elems(&self) -> u64 {
        self.n_value_heads * self.key_head_dim * self.value_head_dim
    }
    /// Elements of the short-convolution state per layer: conv channels x (kernel - 1).
    fn conv_elems(&self) -> u64 {
        (2 * self.key_dim() + self.value_dim()) * (self.conv_kernel.saturating_sub(1))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelArch {
    pub name: String,
    pub model_type: String,
    pub hidden: u64,
    pub n_layers: u32,
    /// Layers with full (global) softmax attention: they hold KV for the whole context.
    pub n_full_attn_layers: u32,
    /// Layers with sliding-window attention: they hold KV for at most `sliding_window` tokens.
    pub n_sliding_layers: u32,
    pub sliding_window: u64,
    /// Layers with linear attention (constant state, no KV).
    pub n_linear_layers: u32,
    pub n_heads: u64,
    pub n_kv_heads: u64,
    pub head_dim: u64,
    pub vocab: u64,
    pub tie_embeddings: bool,
    /// Dense MLP intermediate size (dense models only).
    pub intermediate: u64,
    pub moe: Option<MoeSpec>,
    pub linear: Option<LinearAttnSpec>,
    /// Qwen3-Next style attention whose q_proj also emits an output gate (q_proj twice as wide).
    pub attn_output_gate: bool,
    /// The checkpoint's own storage of expert weights when it is quantized in config.json (gpt-oss MXFP4).
    pub expert_dtype_native: Option<Dtype>,
    pub max_context: u64,
}

fn get<'a>(v: &'a Value, text_cfg: Option<&'a Value>, key: &str) -> Option<&'a Value> {
    text_cfg.and_then(|t| t.get(key)).or_else(|| v.get(key)).filter(|x| !x.is_null())
}

struct Cfg<'a> {
    source: &'a str,
    root: &'a Value,
    text: Option<&'a Value>,
}

impl<'a> Cfg<'a> {
    fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        match get(self.root, self.text, key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) => Ok(Some(n)),
                None => {
                    Err(Error::input(self.source, None, Some(key), format!("must be a non-negative integer, got {v}")))
                }
            },
        }
    }
    fn u64(&self, key: &str) -> Result<u64> {
        let v = self
            .opt_u64(key)?
            .ok_or_else(|| Error::input(self.source, None, Some(key), "required field is missing"))?;
        if v == 0 {
            return Err(Error::input(self.source, None, Some(key), "must be positive, got 0"));
        }
        Ok(v)
    }
    fn str(&self, key: &str) -> Option<&'a str> {
        get(self.root, self.text, key).and_then(Value::as_str)
    }
    fn bool(&self, key: &str) -> Option<bool> {
        get(self.root, self.text, key).and_then(Value::as_bool)
    }
}

impl ModelArch {
    /// Parse a Hugging Face config.json. `source` names the file in errors.
    pub fn from_config_json(name: &str, source: &str, text: &str) -> Result<ModelArch> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| Error::input(source, Some(e.line()), None, format!("invalid JSON: {e}")))?;
        if !root.is_object() {
            return Err(Error::input(source, None, None, "config.json must be a JSON object"));
        }
        let text_cfg = root.get("text_config").filter(|t| t.is_object());
        let c = Cfg { source, root: &root, text: text_cfg };
        let model_type = c
            .str("model_type")
            .ok_or_else(|| Error::input(source, None, Some("model_type"), "required field is missing"))?
            .to_string();
        let top_type = root.get("model_type").and_then(Value::as_str).unwrap_or(&model_type).to_string();
        let family = top_type.trim_end_matches("_text").to_string();
        let known = [
            "llama",
            "mistral",
            "qwen2",
            "qwen3",
            "qwen3_moe",
            "mixtral",
            "gpt_oss",
            "qwen3_next",
            "qwen3_5_moe",
            "qwen2_moe",
        ];
        if !known.contains(&family.as_str()) {
            return Err(Error::input(
                source,
                None,
                Some("model_type"),
                format!("unsupported model_type `{family}`; supported: {}", known.join(", ")),
            ));
        }
        let hidden = c.u64("hidden_size")?;
        let n_layers = c.u64("num_hidden_layers")? as u32;
        let n_heads = c.u64("num_attention_heads")?;
        let n_kv_heads = c.opt_u64("num_key_value_heads")?.unwrap_or(n_heads);
        if n_kv_heads == 0 {
            return Err(Error::input(source, None, Some("num_key_value_heads"), "must be positive, got 0"));
        }
        let head_dim = c.opt_u64("head_dim")?.unwrap_or(hidden / n_heads);
        let vocab = c.u64("vocab_size")?;
        let max_context = c.u64("max_position_embeddings")?;
        let tie_embeddings = root
            .get("tie_word_embeddings")
            .and_then(Value::as_bool)
            .or_else(|| c.bool("tie_word_embeddings"))
            .unwrap_or(false);

        // Layer kinds: explicit layer_types, else full_attention_interval for hybrids, else all full.
        let layer_types: Option<Vec<String>> = get(c.root, c.text, "layer_types").map(|v| {
            v.as_array().map(|a| a.iter().map(|x| x.as_str().unwrap_or("").to_string()).collect()).unwrap_or_default()
        });
        let is_hybrid = family == "qwen3_next" || family == "qwen3_5_moe";
        let (mut n_full, mut n_sliding, mut n_linear) = (0u32, 0u32, 0u32);
        if let Some(types) = &layer_types {
            if types.len() != n_layers as usize {
                return Err(Error::input(
                    source,
                    None,
                    Some("layer_types"),
                    format!("has {} entries but num_hidden_layers is {n_layers}", types.len()),
                ));
            }
            for t in types {
                match t.as_str() {
                    "full_attention" | "attention" => n_full += 1,
                    "sliding_attention" => n_sliding += 1,
                    "linear_attention" => n_linear += 1,
                    other => {
                        return Err(Error::input(
                            source,
                            None,
                            Some("layer_types"),
                            format!("unknown layer type `{other}`"),
                        ))
                    }
                }
            }
        } else if is_hybrid {
            let interval = c.u64("full_attention_interval")? as u32;
            n_full = (1..=n_layers).filter(|i| i % interval == 0).count() as u32;
            n_linear = n_layers - n_full;
        } else {
            n_full = n_layers;
        }
        let sliding_window = if n_sliding > 0 { c.u64("sliding_window")? } else { 0 };

        let n_experts = c.opt_u64("num_experts")?.or(c.opt_u64("num_local_experts")?);
        let moe = match n_experts {
            Some(e) if e > 1 => {
                let k = c.opt_u64("num_experts_per_tok")?.or(c.opt_u64("experts_per_token")?).ok_or_else(|| {
                    Error::input(source, None, Some("num_experts_per_tok"), "required for MoE models")
                })?;
                if k == 0 || k > e {
                    return Err(Error::input(
                        source,
                        None,
                        Some("num_experts_per_tok"),
                        format!("must be in 1..={e}, got {k}"),
                    ));
                }
                let expert_intermediate = match c.opt_u64("moe_intermediate_size")? {
                    Some(v) if v > 0 => v,
                    _ => c.u64("intermediate_size")?,
                };
                Some(MoeSpec {
                    n_experts: e as u32,
                    n_experts_per_token: k as u32,
                    expert_intermediate,
                    shared_intermediate: c.opt_u64("shared_expert_intermediate_size")?.unwrap_or(0),
                })
            }
            _ => None,
        };
        let intermediate = if moe.is_none() { c.u64("intermediate_size")? } else { 0 };
        let linear = if n_linear > 0 {
            Some(LinearAttnSpec {
                n_key_heads: c.u64("linear_num_key_heads")?,
                n_value_heads: c.u64("linear_num_value_heads")?,
                key_head_dim: c.u64("linear_key_head_dim")?,
                value_head_dim: c.u64("linear_value_head_dim")?,
                conv_kernel: c.u64("linear_conv_kernel_dim")?,
            })
        } else {
            None
        };
        let expert_dtype_native = root
            .get("quantization_config")
            .and_then(|q| q.get("quant_method"))
            .and_then(Value::as_str)
            .and_then(Dtype::parse);
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
            attn_output_gate: is_hybrid,
            expert_dtype_native,
            max_context,
        })
    }

    pub fn kind(&self) -> &'static str {
        match (&self.moe, &self.linear) {
            (_, Some(_)) => "hybrid-moe",
            (Some(_), None) => "moe",
            (None, None) => "dense",
        }
    }

    fn softmax_attn_params_per_layer(&self) -> u64 {
        let q = self.hidden * self.n_heads * self.head_dim * if self.attn_output_gate { 2 } else { 1 };
        let kv = 2 * self.hidden * self.n_kv_heads * self.head_dim;
        let o = self.n_heads * self.head_dim * self.hidden;
        q + kv + o
    }
    fn linear_attn_params_per_layer(&self) -> u64 {
        match &self.linear {
            None => 0,
            Some(l) => {
                let qkvz = self.hidden * (2 * l.key_dim() + 2 * l.value_dim());
                let ba = self.hidden * 2 * l.n_value_heads;
                let conv = (2 * l.key_dim() + l.value_dim()) * l.conv_kernel;
                let out = l.value_dim() * self.hidden;
                qkvz + ba + conv + out
            }
        }
    }
    /// Attention parameters over all layers (softmax and linear).
    fn attn_params(&self) -> u64 {
        (self.n_full_attn_layers + self.n_sliding_layers) as u64 * self.softmax_attn_params_per_layer()
            + self.n_linear_layers as u64 * self.linear_attn_params_per_layer()
    }
    /// Parameters of one routed expert (gate, up, down projections).
    pub fn expert_params(&self) -> u64 {
        self.moe.as_ref().map_or(0, |m| 3 * self.hidden * m.expert_intermediate)
    }
    /// Parameters read by every token regardless of routing, excluding the input embedding table (a
    /// lookup reads one row, not the table): attention, dense MLPs, shared experts, routers, LM head.
    pub fn always_read_params(&self) -> u64 {
        let l = self.n_layers as u64;
        let mlp = match &self.moe {
            None => l * 3 * self.hidden * self.intermediate,
            Some(m) => {
                let shared_gate = if m.shared_intermediate > 0 { self.hidden } else { 0 };
                l * (3 * self.hidden * m.shared_intermediate + self.hidden * m.n_experts as u64 + shared_gate)
            }
        };
        self.attn_params() + mlp + self.vocab * self.hidden
    }
    fn embedding_params(&self) -> u64 {
        if self.tie_embeddings {
            0
        } else {
            self.vocab * self.hidden
        }
    }
    pub fn params_total(&self) -> u64 {
        let experts = self.moe.as_ref().map_or(0, |m| self.n_layers as u64 * m.n_experts as u64 * self.expert_params());
        self.always_read_params() + experts + self.embedding_params()
    }
    /// Parameters used per token, the input embedding included (the convention of model cards).
    pub fn params_active(&self) -> u64 {
        self.matmul_params_active() + self.embedding_params()
    }
    /// Parameters that take part in matmuls per token: 2 FLOPs each.
    pub fn matmul_params_active(&self) -> u64 {
        let experts =
            self.moe.as_ref().map_or(0, |m| self.n_layers as u64 * m.n_experts_per_token as u64 * self.expert_params());
        self.always_read_params() + experts
    }
    /// Expected distinct experts per layer touched by a batch of `n_tokens` tokens under uniform
    /// routing: E * (1 - (1 - k/E)^B) (DESIGN.md section 1).
    pub fn experts_touched(&self, n_tokens: f64) -> f64 {
        self.experts_touched_spread(n_tokens, 1.0)
    }
    /// Experts touched when the workload's tokens route among only a share `spread` of the experts
    /// (correlated routing: E_eff = max(k, spread x E) in the same formula). spread = 1 is uniform.
    pub fn experts_touched_spread(&self, n_tokens: f64, spread: f64) -> f64 {
        match &self.moe {
            None => 0.0,
            Some(m) => {
                let k = m.n_experts_per_token as f64;
                let e = (m.n_experts as f64 * spread.clamp(0.0, 1.0)).max(k);
                e * (1.0 - (1.0 - k / e).powf(n_tokens.max(0.0)))
            }
        }
    }
    /// Dtype the experts are stored in, given the deployment's weight dtype: a checkpoint quantized in
    /// its config (gpt-oss MXFP4) keeps that unless the deployment is narrower still.
    pub fn expert_dtype(&self, weight_dtype: Dtype) -> Dtype {
        match self.expert_dtype_native {
            Some(native) if native.bytes() < weight_dtype.bytes() => native,
            _ => weight_dtype,
        }
    }
    /// Bytes of all weights resident on the GPU(s).
    pub fn weight_bytes(&self, weight_dtype: Dtype) -> f64 {
        let experts = self.params_total() - self.always_read_params() - self.embedding_params();
        (self.always_read_params() + self.embedding_params()) as f64 * weight_dtype.bytes()
            + experts as f64 * self.expert_dtype(weight_dtype).bytes()
    }
    /// Weight bytes one step reads for a batch of `n_tokens` tokens: the always-read part plus the
    /// experts the batch touches.
    pub fn weight_bytes_read(&self, weight_dtype: Dtype, n_tokens: f64) -> f64 {
        let dense = self.always_read_params() as f64 * weight_dtype.bytes();
        let experts = self.n_layers as f64
            * self.experts_touched(n_tokens)
            * self.expert_params() as f64
            * self.expert_dtype(weight_dtype).bytes();
        dense + experts
    }
    /// KV bytes per token of context held by full-attention layers (2 x layers x KV heads x head dim x
    /// dtype bytes). Sliding layers add `sliding_kv_bytes_per_token` for at most the window.
    pub fn kv_bytes_per_token(&self, kv_dtype: Dtype) -> f64 {
        2.0 * self.n_full_attn_layers as f64 * (self.n_kv_heads * self.head_dim) as f64 * kv_dtype.bytes()
    }
    pub fn sliding_kv_bytes_per_token(&self, kv_dtype: Dtype) -> f64 {
        2.0 * self.n_sliding_layers as f64 * (self.n_kv_heads * self.head_dim) as f64 * kv_dtype.bytes()
    }
    /// KV bytes held by one sequence of `context` tokens.
    pub fn kv_bytes_for_context(&self, kv_dtype: Dtype, context: f64) -> f64 {
        self.kv_bytes_per_token(kv_dtype) * context
            + self.sliding_kv_bytes_per_token(kv_dtype) * context.min(self.sliding_window as f64)
    }
    /// Per-sequence linear-attention state: recurrent state in `state_dtype`, convolution state in BF16.
    pub fn linear_state_bytes(&self, state_dtype: Dtype) -> f64 {
        match &self.linear {
            None => 0.0,
            Some(l) => {
                self.n_linear_layers as f64
                    * (l.recurrent_elems() as f64 * state_dtype.bytes() + l.conv_elems() as f64 * Dtype::Bf16.bytes())
            }
        }
    }
    /// Matmul FLOPs per token (2 per active matmul parameter), independent of context.
    pub fn flops_per_token_linear(&self) -> f64 {
        let gdn = self.linear.as_ref().map_or(0.0, |l| {
            // Delta-rule state update and readout: about 4 FLOPs per state element per token.
            4.0 * self.n_linear_layers as f64 * l.recurrent_elems() as f64
        });
        2.0 * self.matmul_params_active() as f64 + gdn
    }
    /// Attention FLOPs per (query token, context token) pair over the full-attention layers: QK^T and
    /// AV, 2 FLOPs per multiply-add each.
    pub fn attn_flops_per_token_pair(&self) -> f64 {
        4.0 * self.n_full_attn_layers as f64 * (self.n_heads * self.head_dim) as f64
    }
    fn sliding_attn_flops_per_token_pair(&self) -> f64 {
        4.0 * self.n_sliding_layers as f64 * (self.n_heads * self.head_dim) as f64
    }
    /// Attention FLOPs of a prefill chunk of `n` tokens starting at context position `start` (causal:
    /// token i attends to start+i+1 tokens): pairs = n*start + n(n+1)/2.
    pub fn chunk_attn_flops(&self, start: f64, n: f64) -> f64 {
        let pairs = n * start + n * (n + 1.0) / 2.0;
        let w = self.sliding_window as f64;
        let sliding_pairs = if self.n_sliding_layers > 0 { pairs.min(n * w) } else { 0.0 };
        self.attn_flops_per_token_pair() * pairs + self.sliding_attn_flops_per_token_pair() * sliding_pairs
    }
    /// Prefill FLOPs of one token at context position `context`.
    pub fn prefill_flops_per_token(&self, context: f64) -> f64 {
        self.flops_per_token_linear()
            + self.attn_flops_per_token_pair() * context
            + self.sliding_attn_flops_per_token_pair() * context.min(self.sliding_window as f64)
    }
    /// FLOPs of prefilling a whole prompt of `len` tokens from scratch.
    pub fn prompt_prefill_flops(&self, len: f64) -> f64 {
        self.flops_per_token_linear() * len + self.chunk_attn_flops(0.0, len)
    }
}
