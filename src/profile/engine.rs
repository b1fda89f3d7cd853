//! Engine settings resolved against the deployment: every default filled as the engine fills it, and
//! the KV capacity derived from memory (FACTS-hardware-engines.md: each engine's memory formula).

use super::{EngineConfig, EngineKind, EngineSettings, ModelRef};
use crate::catalog::{GpuSpec, ModelArch};
use crate::error::{Error, Result};
use crate::units::Dtype;

/// Activation memory vLLM's profiling run reserves, per batched token: about 34 bytes per hidden unit
/// (hidden states, residual, MLP intermediate in BF16), plus a fixed 1.5 GB for CUDA graphs, the
/// sampler and the allocator's slack. A heuristic, stated as such; set kv_capacity_tokens to override.
fn activation_bytes(arch: &ModelArch, max_batched_tokens: u32) -> f64 {
    max_batched_tokens as f64 * arch.hidden as f64 * 34.0 + 1.5e9
}

/// The prefill token budget of a step: the engine's setting, else its default on this GPU.
pub fn default_prefill_budget(kind: EngineKind, s: &EngineSettings, gpu: &GpuSpec) -> u32 {
    match kind {
        EngineKind::Vllm => s.max_num_batched_tokens.unwrap_or_else(|| gpu.vllm_default_max_num_batched_tokens()),
        EngineKind::Sglang => s
            .chunked_prefill_size
            .or(s.max_num_batched_tokens)
            .unwrap_or_else(|| gpu.sglang_default_chunked_prefill_size()),
    }
}

pub(super) fn resolve_engine(
    source: &str,
    s: &EngineSettings,
    m: &ModelRef,
    arch: &ModelArch,
    gpu: &GpuSpec,
    tp: u32,
) -> Result<EngineConfig> {
    let kind = s.kind.unwrap_or(EngineKind::Vllm);
    let err = |f: &str, msg: String| Error::input(source, None, Some(f), msg);
    let (budget, seqs, block, util) = match kind {
        EngineKind::Vllm => (
            default_prefill_budget(kind, s, gpu),
            s.max_num_seqs.unwrap_or_else(|| gpu.vllm_default_max_num_seqs()),
            s.block_size_tokens.unwrap_or(16),
            s.gpu_memory_utilization.unwrap_or(0.92),
        ),
        EngineKind::Sglang => (
            default_prefill_budget(kind, s, gpu),
            // FACTS.md does not list SGLang's max_running_requests default (derived from memory); 1024 is
            // capsim's stated choice, overridable.
            s.max_running_requests.or(s.max_num_seqs).unwrap_or(1024),
            s.block_size_tokens.unwrap_or(1),
            s.gpu_memory_utilization.unwrap_or_else(|| gpu.sglang_default_mem_fraction_static()),
        ),
    };
    if budget == 0 {
        return Err(err("engine.max_num_batched_tokens", "must be positive".into()));
    }
    if seqs == 0 {
        return Err(err("engine.max_num_seqs", "must be positive".into()));
    }
    if block == 0 || block > 1024 {
        return Err(err("engine.block_size_tokens", format!("must be in 1..=1024, got {block}")));
    }
    if !(util.is_finite() && util > 0.0 && util <= 1.0) {
        return Err(err("engine.gpu_memory_utilization", format!("must be in (0, 1], got {util}")));
    }
    // Bytes of KV per token over all the GPUs: copies kept on several GPUs count once per copy.
    let replication = arch.kv_replication(tp);
    let kv_per_token = arch.kv_bytes_per_token(m.kv_dtype) * replication;
    let state_dtype = m.state_dtype.unwrap_or(Dtype::Fp32);
    let reserved_bytes = arch.linear_state_bytes(state_dtype)
        + arch.sliding_kv_bytes_per_token(m.kv_dtype) * replication * arch.sliding_window as f64;
    let block_bytes = kv_per_token * block as f64;
    let per_seq_reserved_blocks = if reserved_bytes > 0.0 { (reserved_bytes / block_bytes).ceil() as u32 } else { 0 };
    let kv_capacity_tokens = match s.kv_capacity_tokens {
        Some(t) => t,
        None => {
            let mem = gpu.memory_bytes() * tp as f64 * util;
            let free = mem - arch.weight_bytes(m.weight_dtype) - activation_bytes(arch, budget) * tp as f64;
            if free <= 0.0 {
                return Err(Error::Infeasible(format!(
                    "{} in {} ({:.1} GB of weights) does not fit {} x {} at memory utilization {util}; raise tensor_parallel",
                    arch.name,
                    m.weight_dtype,
                    arch.weight_bytes(m.weight_dtype) / 1e9,
                    tp,
                    gpu.name
                )));
            }
            (free / kv_per_token) as u64
        }
    };
    if kv_capacity_tokens < block as u64 {
        return Err(err(
            "engine.kv_capacity_tokens",
            format!("must hold at least one block, got {kv_capacity_tokens}"),
        ));
    }
    let ratio_init = s.new_token_ratio_init.unwrap_or(0.7);
    let ratio_min = s.new_token_ratio_min.unwrap_or(0.098);
    if !(0.0..=1.0).contains(&ratio_init) || !(0.0..=ratio_init).contains(&ratio_min) {
        return Err(err(
            "engine.new_token_ratio_init",
            "need 0 <= new_token_ratio_min <= new_token_ratio_init <= 1".into(),
        ));
    }
    Ok(EngineConfig {
        kind,
        max_num_batched_tokens: budget,
        max_num_seqs: seqs,
        block_size_tokens: block,
        gpu_memory_utilization: util,
        kv_capacity_tokens,
        per_seq_reserved_blocks,
        max_prefill_tokens: s.max_prefill_tokens.unwrap_or(16384).max(budget),
        enable_mixed_chunk: s.enable_mixed_chunk.unwrap_or(false),
        interleave_decode: s.interleave_decode.unwrap_or(false),
        num_continuous_decode_steps: s.num_continuous_decode_steps.unwrap_or(1).max(1),
        new_token_ratio_init: ratio_init,
        new_token_ratio_min: ratio_min,
        // SGLang decays the ratio linearly from init to min over about 600 decode steps.
        new_token_ratio_decay_steps: s.new_token_ratio_decay_steps.unwrap_or(600).max(1),
    })
}
