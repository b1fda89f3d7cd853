//! Advice on a deployment's engine settings against a workload: combinations that run, but not as a
//! benchmark of the same deployment would, so a user reading the result should know.

use super::{EngineConfig, EngineKind};
use crate::workload::{Arrivals, Workload};

/// TensorRT-LLM without chunked prefill runs a prompt whole, in a step whose max_num_tokens must also
/// hold one token of every generating request (sim/trtllm.rs). When a typical prompt plus the other
/// requests in flight exceeds max_num_tokens, a new prompt waits until enough of them finish: the load
/// runs nearly one request at a time and TTFT grows with the concurrency. Benchmarks avoid this by
/// setting max_num_tokens to at least ISL + concurrency (InferenceX's launch scripts:
/// round_up(CONC + ISL + 64, 64); aiconfigurator's rules: CONC + ISL + 1500; ENGINES.md). Returns the
/// warning to print, or None when the budget holds a mean prompt beside the rest of the batch.
pub fn trtllm_budget_warning(engine: &EngineConfig, workload: &Workload) -> Option<String> {
    if engine.kind != EngineKind::Trtllm || engine.chunked_prefill {
        return None;
    }
    let in_flight = match &workload.spec.arrivals {
        Arrivals::ClosedLoop { clients, .. } => *clients,
        Arrivals::Burst { n } => *n,
        Arrivals::OpenLoop { .. } | Arrivals::Trace { .. } => engine.max_num_seqs,
    }
    .min(engine.max_num_seqs);
    if in_flight <= 1 {
        return None;
    }
    let prompt = workload.mean_input_tokens().ceil() as u64;
    let need = prompt + in_flight as u64 - 1;
    let budget = engine.max_num_batched_tokens as u64;
    (need > budget).then(|| {
        format!(
            "TensorRT-LLM without chunked prefill: a {prompt}-token prompt beside {} other requests in flight needs {need} tokens of max_num_tokens {budget}, so new prompts wait for running requests to finish and the load nearly serializes (TTFT grows with concurrency); benchmarks set max_num_tokens >= ISL + concurrency: --max-num-batched-tokens {}, or --enable-chunked-prefill",
            in_flight - 1,
            need.div_ceil(64) * 64
        )
    })
}
