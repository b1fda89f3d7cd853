//! Engine settings resolved against the deployment: every default filled as the engine release fills
//! it, and the KV capacity derived from memory with each engine's own formula (ENGINES.md cites the
//! source lines of every default and formula used here).

use super::{ModelRef, Parallel, Profile};
use crate::catalog::{GpuSpec, ModelArch};
use crate::error::{Error, Result};
use crate::units::Dtype;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Vllm,
    Sglang,
    /// TensorRT-LLM's in-flight batching (PyTorch backend, as trtllm-serve, NIM and Dynamo run it).
    Trtllm,
}

impl EngineKind {
    /// The engine a name means: capsim's own (`as_str`) and the corpus's and benchmark files'
    /// spellings (`trt`).
    pub fn from_name(name: &str) -> Option<EngineKind> {
        match name {
            "vllm" => Some(EngineKind::Vllm),
            "sglang" => Some(EngineKind::Sglang),
            "trtllm" | "trt" => Some(EngineKind::Trtllm),
            _ => None,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Vllm => "vllm",
            EngineKind::Sglang => "sglang",
            EngineKind::Trtllm => "trtllm",
        }
    }
}

/// The most running requests an engine setting may state (a bound on the simulator's request
/// slots, not any engine's own limit).
pub const MAX_NUM_SEQS_LIMIT: u32 = 1 << 20;

/// The largest per-step token budget an engine setting may state.
pub const MAX_BATCHED_TOKENS_LIMIT: u32 = 1 << 24;

/// Engine settings as written; None means "the engine's default on this GPU" (FACTS.md).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    pub kind: Option<EngineKind>,
    pub max_num_batched_tokens: Option<u32>,
    pub max_num_seqs: Option<u32>,
    pub block_size_tokens: Option<u32>,
    pub gpu_memory_utilization: Option<f64>,
    /// Set the KV capacity directly instead of deriving it from memory.
    pub kv_capacity_tokens: Option<u64>,
    pub chunked_prefill_size: Option<u32>,
    pub max_prefill_tokens: Option<u32>,
    pub max_running_requests: Option<u32>,
    pub enable_mixed_chunk: Option<bool>,
    /// SGLang: run a decode batch between consecutive prefill batches while requests are decoding
    /// (decode-friendly interleaving), instead of prefill-first.
    pub interleave_decode: Option<bool>,
    /// SGLang --num-continuous-decode-steps: decode steps run back to back before new requests are
    /// considered (default 1).
    pub num_continuous_decode_steps: Option<u32>,
    /// SGLang --scheduler-recv-interval: the scheduler takes new requests from the tokenizer only
    /// once every this many decode steps (right after a prefill or an idle spin; default 1: every
    /// iteration).
    pub scheduler_recv_interval: Option<u32>,
    /// Tokens per streamed response (SGLang and vLLM --stream-interval, TensorRT-LLM
    /// stream_interval; default 1): the API server handles one event per this many tokens of a stream,
    /// and the client receives the first token alone, then a chunk as the output reaches 1 + m x this
    /// many tokens (SGLang 0.5.2-0.5.10 scheduler_output_processor_mixin; vLLM 0.33 output_processor
    /// sends the first token, then every this many; TensorRT-LLM taken alike), and the last token.
    pub stream_interval: Option<u32>,
    pub new_token_ratio_init: Option<f64>,
    pub new_token_ratio_min: Option<f64>,
    pub new_token_ratio_decay_steps: Option<u32>,
    /// The engine release whose defaults and scheduler apply (ENGINES.md lists what changes with it);
    /// default: the newest release capsim was checked against.
    pub version: Option<String>,
    /// vLLM scheduler_reserve_full_isl: admit a waiting request only when its whole prompt fits the
    /// free blocks (default from 0.19), not just its first chunk.
    pub reserve_full_prompt: Option<bool>,
    /// vLLM --scheduler-watermark: share of KV blocks kept free when admitting (default 0).
    pub watermark: Option<f64>,
    /// SGLang: the clients send ignore_eos (sglang bench_serving's default), so from 0.5.22 the
    /// admission reserves the whole remaining output instead of new_token_ratio of it.
    pub ignore_eos: Option<bool>,
    /// TensorRT-LLM capacity_scheduler_policy.
    pub capacity_scheduler_policy: Option<CapacityPolicy>,
    /// TensorRT-LLM enable_chunked_prefill (default false: a prompt must fit max_num_tokens).
    pub enable_chunked_prefill: Option<bool>,
    /// TensorRT-LLM kv_cache_config.free_gpu_memory_fraction: share of the memory free after weights
    /// and activations that becomes KV cache (default 0.9).
    pub free_gpu_memory_fraction: Option<f64>,
    /// Prefix caching (vLLM enable_prefix_caching, SGLang's radix cache, TensorRT-LLM block reuse): on
    /// by default in all three engines.
    pub prefix_caching: Option<bool>,
    /// Host memory for KV blocks the GPU evicts, GB per replica (vLLM's OffloadingConnector
    /// cpu_bytes_to_use; profile/offload.rs). Absent or 0: no host tier.
    pub kv_offload_gb: Option<f64>,
    /// TensorRT-LLM attention_dp_config.enable_balance (default false): hold new contexts until every
    /// attention DP rank has one (sim/trtllm.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_dp_balance: Option<bool>,
    /// TensorRT-LLM attention_dp_config.timeout_iters (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_dp_timeout_iters: Option<u32>,
    /// TensorRT-LLM attention_dp_config.batching_wait_iters (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_dp_batching_wait_iters: Option<u32>,
}

/// TensorRT-LLM's attention DP balance, resolved (sim/trtllm.rs `adp_release`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AdpBalance {
    /// Attention DP ranks: 2 to 64 (attention_dp > 1 divides tensor_parallel, which is at most 64),
    /// so the simulator keeps one bit per rank in a u64.
    pub ranks: u32,
    pub timeout_iters: u32,
    pub batching_wait_iters: u32,
}

/// TensorRT-LLM's capacity scheduler policies (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapacityPolicy {
    /// Admit a request only when the blocks for its whole sequence (prompt + max new tokens) fit
    /// beside what the running requests still need to finish; never pause.
    GuaranteedNoEvict,
    /// Admit when the next step fits; when memory runs out, pause the most recently started request
    /// (its KV freed, recomputed later).
    MaxUtilization,
}

impl EngineSettings {
    /// Settings in `over` replace those here.
    pub fn merge(&mut self, over: &EngineSettings) {
        macro_rules! m { ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f.clone(); } )* } }
        m!(
            kind,
            max_num_batched_tokens,
            max_num_seqs,
            block_size_tokens,
            gpu_memory_utilization,
            kv_capacity_tokens,
            chunked_prefill_size,
            max_prefill_tokens,
            max_running_requests,
            enable_mixed_chunk,
            interleave_decode,
            num_continuous_decode_steps,
            scheduler_recv_interval,
            stream_interval,
            new_token_ratio_init,
            new_token_ratio_min,
            new_token_ratio_decay_steps,
            version,
            reserve_full_prompt,
            watermark,
            ignore_eos,
            capacity_scheduler_policy,
            enable_chunked_prefill,
            free_gpu_memory_fraction,
            prefix_caching,
            kv_offload_gb,
            attention_dp_balance,
            attention_dp_timeout_iters,
            attention_dp_batching_wait_iters
        );
    }
}

/// Resolved engine configuration: every setting has a value.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineConfig {
    pub kind: EngineKind,
    /// The engine release whose defaults apply.
    pub version: String,
    /// vLLM: per-step token budget. SGLang: chunked_prefill_size (the chunk budget of a prefill batch).
    pub max_num_batched_tokens: u32,
    /// vLLM max_num_seqs / SGLang max_running_requests.
    pub max_num_seqs: u32,
    /// KV allocation granularity in tokens (vLLM 16, SGLang page size 1).
    pub block_size_tokens: u32,
    pub gpu_memory_utilization: f64,
    pub kv_capacity_tokens: u64,
    /// Blocks each running sequence holds besides its KV (linear-attention state, sliding windows).
    pub per_seq_reserved_blocks: u32,
    pub max_prefill_tokens: u32,
    pub enable_mixed_chunk: bool,
    pub interleave_decode: bool,
    pub num_continuous_decode_steps: u32,
    /// SGLang's scheduler_recv_interval (sim/run.rs `RecvSkipper`): 1 takes arrivals every iteration.
    #[serde(skip_serializing_if = "is_one")]
    pub recv_interval: u32,
    /// Tokens per streamed response: the API server's cost per streamed token
    /// (Coefficients::api_per_token_s) is per response, so it is paid once per this many tokens.
    #[serde(skip_serializing_if = "is_one")]
    pub stream_interval: u32,
    pub new_token_ratio_init: f64,
    pub new_token_ratio_min: f64,
    pub new_token_ratio_decay_steps: u32,
    /// vLLM: a waiting request starts only when blocks for all its tokens so far are free.
    pub reserve_full_prompt: bool,
    /// vLLM: blocks kept free when admitting a waiting request while others run.
    pub watermark_blocks: u64,
    /// SGLang: admission reserves the whole remaining output (fixed-length requests, >= 0.5.22).
    pub reserve_full_output: bool,
    /// TensorRT-LLM capacity policy (None for the other engines).
    pub capacity_policy: Option<CapacityPolicy>,
    /// Prompts may be split over steps (always for vLLM V1 and SGLang; TensorRT-LLM only when enabled).
    pub chunked_prefill: bool,
    /// Prefix caching on (vllm/config/cache.py enable_prefix_caching: True; SGLang's radix cache;
    /// simulated for vLLM and SGLang).
    pub prefix_caching: bool,
    /// How the KV capacity was derived from memory (None when set directly).
    pub memory: Option<KvMemory>,
    /// The host tier of KV offload (None: off; left out of the JSON then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_offload: Option<super::offload::KvOffload>,
    /// TensorRT-LLM under attention DP with enable_balance (None otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attention_dp_balance: Option<AdpBalance>,
}

fn is_one(x: &u32) -> bool {
    *x == 1
}

impl EngineConfig {
    pub fn kv_capacity_blocks(&self) -> u64 {
        self.kv_capacity_tokens / self.block_size_tokens as u64
    }
}

/// The engine's memory arithmetic for one replica (all its GPUs), in bytes, as its start-up log
/// itemizes it: compare `kv_bytes` and the capacity in tokens with the engine's "GPU KV cache size"
/// line. Each engine leaves different parts outside its budget (ENGINES.md).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvMemory {
    /// Device memory the engine sees (torch's total, per GPU x GPUs).
    pub total_bytes: f64,
    /// vLLM: total x gpu_memory_utilization. SGLang: total x mem_fraction_static. TensorRT-LLM: total.
    pub budget_bytes: f64,
    pub weights_bytes: f64,
    /// Peak activations of the engine's profiling run (vLLM, TensorRT-LLM; inside SGLang's reserve).
    pub activation_bytes: f64,
    /// CUDA context, NCCL and cuBLAS buffers, allocator slack.
    pub non_torch_bytes: f64,
    /// CUDA graphs, where the engine subtracts them from its budget (vLLM >= 0.20).
    pub cuda_graph_bytes: f64,
    /// What the KV cache gets.
    pub kv_bytes: f64,
    /// The formula, in words, with the engine version it follows.
    pub formula: String,
}

/// The KV cache as the engine's start-up log states it: capacity in tokens and how many requests of
/// the model's full context length it holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvCapacity {
    pub kv_capacity_tokens: u64,
    pub kv_block_size_tokens: u32,
    pub kv_capacity_blocks: u64,
    /// The model's context length (max_model_len when the engine is not told otherwise).
    pub max_model_len_tokens: u64,
    /// Requests of max_model_len tokens the cache holds at once (vLLM's "Maximum concurrency for N
    /// tokens per request"), counting each sequence's reserved blocks (linear state, windows).
    pub max_len_requests: f64,
    /// How the capacity came from memory; None when kv_capacity_tokens was set directly.
    pub memory: Option<KvMemory>,
    /// The engine's log line to compare `kv_capacity_tokens` with.
    pub engine_log_line: &'static str,
}

impl Profile {
    /// The KV cache's capacity, for the user to check against the engine's own start-up log.
    pub fn kv_capacity(&self) -> KvCapacity {
        let e = &self.engine;
        let block = e.block_size_tokens as u64;
        let max_len = self.arch.max_context;
        let per_request = max_len.div_ceil(block) + e.per_seq_reserved_blocks as u64;
        KvCapacity {
            kv_capacity_tokens: e.kv_capacity_tokens,
            kv_block_size_tokens: e.block_size_tokens,
            kv_capacity_blocks: e.kv_capacity_blocks(),
            max_model_len_tokens: max_len,
            max_len_requests: e.kv_capacity_blocks() as f64 / per_request as f64,
            memory: e.memory.clone(),
            engine_log_line: match e.kind {
                EngineKind::Vllm => {
                    "vLLM: \"GPU KV cache size: N tokens\" and \"Maximum concurrency for L tokens per request: Xx\""
                }
                EngineKind::Sglang => {
                    "SGLang: \"KV Cache is allocated. #tokens: N\" (and max_total_num_tokens in the server info)"
                }
                EngineKind::Trtllm => {
                    "TensorRT-LLM: \"[MemUsageChange] Allocated X GiB for max tokens in paged KV cache (N)\""
                }
            },
        }
    }
}

/// An engine release, compared numerically ("0.9" < "0.19").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EngineVersion(pub u32, pub u32, pub u32);

impl EngineVersion {
    /// "0.19", "0.19.1" or "v0.19.1"; suffixes such as "rc1" or ".post1" are ignored.
    pub fn parse(text: &str) -> Option<EngineVersion> {
        let t = text.trim().trim_start_matches('v');
        let mut parts = t.split('.').map(|p| {
            let digits: String = p.chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(EngineVersion(major, minor, patch))
    }
}

impl std::fmt::Display for EngineVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// The newest release of each engine whose source capsim's defaults and scheduler were read from.
pub fn latest_version(kind: EngineKind) -> EngineVersion {
    match kind {
        EngineKind::Vllm => EngineVersion(0, 33, 0),
        EngineKind::Sglang => EngineVersion(0, 5, 23),
        EngineKind::Trtllm => EngineVersion(1, 2, 1),
    }
}

/// The oldest release of each engine capsim read (ENGINES.md: vLLM sdists from 0.10.1, SGLang wheels
/// from 0.4.6; TensorRT-LLM's 1.x LLM API and PyTorch backend). A version outside oldest..=newest is
/// refused: its defaults and scheduler are unknown, and a label would claim otherwise.
pub fn oldest_version(kind: EngineKind) -> EngineVersion {
    match kind {
        EngineKind::Vllm => EngineVersion(0, 10, 1),
        EngineKind::Sglang => EngineVersion(0, 4, 6),
        EngineKind::Trtllm => EngineVersion(1, 0, 0),
    }
}

/// The engine's name as its users write it.
fn engine_display(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Vllm => "vLLM",
        EngineKind::Sglang => "SGLang",
        EngineKind::Trtllm => "TensorRT-LLM",
    }
}

const MIB: f64 = (1u64 << 20) as f64;

/// Peak activations of a profiling forward pass over `tokens` tokens, per GPU: about 34 bytes per
/// hidden unit per token (hidden states, residual, MLP intermediate in BF16), or the sampler's FP32
/// logits and probabilities for `seqs` sequences when those are larger. A heuristic, stated as such;
/// set kv_capacity_tokens to override the derived capacity.
fn activation_peak_bytes(arch: &ModelArch, tokens: u32, seqs: u32) -> f64 {
    let forward = tokens as f64 * arch.hidden as f64 * 34.0;
    let sampler = seqs.min(tokens) as f64 * arch.vocab as f64 * 8.0;
    forward.max(sampler)
}

/// Memory outside torch's allocator that grows after the engine's start-up snapshot: cuBLAS and
/// attention workspaces (0.3 GB), and NCCL buffers when GPUs talk (0.7 GB). A heuristic.
fn non_torch_bytes(tp: u32) -> f64 {
    0.3e9 + if tp > 1 { 0.7e9 } else { 0.0 }
}

/// CUDA graphs of the decode batch sizes (vLLM captures up to 512 sizes piecewise; about 0.75 GB on
/// the reports' GPUs by their logs' "Graph capturing finished ... took" lines). A heuristic.
const CUDA_GRAPH_BYTES: f64 = 0.75e9;

/// The CUDA context, outside every allocator (measured: 0.55 GB on H100 and H200, torch 2.11).
const CUDA_CONTEXT_BYTES: f64 = 0.55e9;

/// The prefill token budget of a step: the engine's setting, else its default on this GPU.
pub fn default_prefill_budget(kind: EngineKind, s: &EngineSettings, gpu: &GpuSpec) -> u32 {
    match kind {
        EngineKind::Vllm => s.max_num_batched_tokens.unwrap_or_else(|| gpu.vllm_default_max_num_batched_tokens()),
        EngineKind::Sglang => s
            .chunked_prefill_size
            .or(s.max_num_batched_tokens)
            .unwrap_or_else(|| gpu.sglang_default_chunked_prefill_size()),
        // TensorRT-LLM max_num_tokens (llm_args.py BaseLlmArgs, default 8192).
        EngineKind::Trtllm => s.max_num_batched_tokens.unwrap_or(8192),
    }
}

/// SGLang's decode CUDA-graph max batch size by GPU memory and TP
/// (srt/arg_groups/memory_hook.py, GPU-dependent capacity defaults).
fn sglang_cuda_graph_max_bs(gpu_mib: f64, tp: u32) -> f64 {
    let gib = gpu_mib / 1024.0;
    if gib < 20.0 {
        8.0
    } else if gib < 35.0 {
        if tp < 4 {
            48.0
        } else {
            160.0
        }
    } else if gib < 60.0 {
        if tp < 4 {
            32.0
        } else {
            160.0
        }
    } else if gib < 160.0 {
        if tp < 4 {
            256.0
        } else {
            512.0
        }
    } else {
        512.0
    }
}

/// SGLang's default mem_fraction_static (srt/arg_groups/memory_hook.py): the memory kept for
/// activations and graphs, in MiB, is 512 + max(chunk, 2048) x 1.5 + TP/8 x 1024 + graph max bs x 2,
/// at least 10 GiB on GPUs over 60 GiB; the fraction is the rest of the GPU, rounded to 3 places.
pub fn sglang_default_mem_fraction_static(gpu: &GpuSpec, chunk: u32, tp: u32) -> f64 {
    let gpu_mib = gpu.memory_bytes() / MIB;
    let mut reserved = 512.0 + chunk.max(2048) as f64 * 1.5 + tp as f64 / 8.0 * 1024.0;
    reserved += sglang_cuda_graph_max_bs(gpu_mib, tp) * 2.0;
    if gpu_mib > 60.0 * 1024.0 {
        reserved = reserved.max(10.0 * 1024.0);
    }
    ((gpu_mib - reserved) / gpu_mib * 1000.0).round() / 1000.0
}

/// SGLang's max_running_requests when not set (srt/model_executor/pool_configurator.py
/// `_resolve_max_running_requests_per_worker`, approximating ModelRunner._resolve_max_num_reqs): pool
/// tokens / context length x 512, clamped to 2048..4096, at most half the pool's tokens.
pub fn sglang_default_max_running_requests(pool_tokens: u64, context_len: u64) -> u32 {
    let estimated = (pool_tokens as f64 / context_len.max(1) as f64 * 512.0) as u64;
    estimated.clamp(2048, 4096).min(pool_tokens / 2).max(1) as u32
}

pub(super) fn resolve_engine(
    source: &str,
    s: &EngineSettings,
    m: &ModelRef,
    arch: &ModelArch,
    gpu: &GpuSpec,
    tp: u32,
    par: &Parallel,
) -> Result<EngineConfig> {
    let kind = s.kind.unwrap_or(EngineKind::Vllm);
    let err = |f: &str, msg: String| Error::input(source, None, Some(f), msg);
    let version = match &s.version {
        None => latest_version(kind),
        Some(t) => {
            let v = EngineVersion::parse(t)
                .ok_or_else(|| err("engine.version", format!("`{t}` is not a release number such as 0.19.1")))?;
            let (oldest, newest) = (oldest_version(kind), latest_version(kind));
            if v < oldest || v > newest {
                return Err(err(
                    "engine.version",
                    format!(
                        "{} {v} is outside the releases capsim read ({oldest} to {newest}): its defaults and scheduler are unknown. Give a release in that range (ENGINES.md lists what changes between them), or leave the version out for {newest}'s behaviour",
                        engine_display(kind)
                    ),
                ));
            }
            v
        }
    };
    let budget = default_prefill_budget(kind, s, gpu);
    let (seqs, block, util) = match kind {
        EngineKind::Vllm => (
            s.max_num_seqs.unwrap_or_else(|| gpu.vllm_default_max_num_seqs()),
            s.block_size_tokens.unwrap_or(16),
            // vllm/config/cache.py: 0.9 through 0.19, 0.92 from 0.20.
            s.gpu_memory_utilization.unwrap_or(if version >= EngineVersion(0, 20, 0) { 0.92 } else { 0.9 }),
        ),
        EngineKind::Sglang => (
            // Derived from the pool once its size is known (below); 2048 only sizes the estimate.
            s.max_running_requests.or(s.max_num_seqs).unwrap_or(2048),
            s.block_size_tokens.unwrap_or(1),
            s.gpu_memory_utilization.unwrap_or_else(|| sglang_default_mem_fraction_static(gpu, budget, tp)),
        ),
        // llm_args.py max_batch_size 2048; KvCacheConfig tokens_per_block 32; free_gpu_memory_fraction 0.9.
        EngineKind::Trtllm => (
            s.max_num_seqs.unwrap_or(2048),
            s.block_size_tokens.unwrap_or(32),
            s.free_gpu_memory_fraction.or(s.gpu_memory_utilization).unwrap_or(0.9),
        ),
    };
    if budget == 0 {
        return Err(err("engine.max_num_batched_tokens", "must be positive".into()));
    }
    if seqs == 0 || seqs > MAX_NUM_SEQS_LIMIT {
        return Err(err("engine.max_num_seqs", format!("must be in 1..={MAX_NUM_SEQS_LIMIT}, got {seqs}")));
    }
    if budget > MAX_BATCHED_TOKENS_LIMIT {
        return Err(err(
            "engine.max_num_batched_tokens",
            format!("must be at most {MAX_BATCHED_TOKENS_LIMIT}, got {budget}"),
        ));
    }
    if block == 0 || block > 1024 {
        return Err(err("engine.block_size_tokens", format!("must be in 1..=1024, got {block}")));
    }
    let util_field =
        if kind == EngineKind::Trtllm { "engine.free_gpu_memory_fraction" } else { "engine.gpu_memory_utilization" };
    if !(util.is_finite() && util > 0.0 && util <= 1.0) {
        return Err(err(util_field, format!("must be in (0, 1], got {}", crate::error::fmt_num(util))));
    }
    let watermark = s.watermark.unwrap_or(0.0);
    if !(watermark.is_finite() && (0.0..1.0).contains(&watermark)) {
        return Err(err("engine.watermark", format!("must be in [0, 1), got {}", crate::error::fmt_num(watermark))));
    }
    // Bytes of KV per token over all the GPUs: copies kept on several GPUs count once per copy.
    // Under attention DP each rank stores its own requests' KV over its tp / attention_dp GPUs.
    let replication = par.kv_replication(arch, tp);
    let kv_per_token = arch.kv_bytes_per_token(m.kv_dtype) * replication;
    let state_dtype = m.state_dtype.unwrap_or(Dtype::Fp32);
    let reserved_bytes = arch.linear_state_bytes(state_dtype)
        + arch.sliding_kv_bytes_per_token(m.kv_dtype) * replication * arch.sliding_window as f64;
    let block_bytes = kv_per_token * block as f64;
    let per_seq_reserved_blocks = if reserved_bytes > 0.0 { (reserved_bytes / block_bytes).ceil() as u32 } else { 0 };
    let (kv_capacity_tokens, memory) = match s.kv_capacity_tokens {
        Some(t) => (t, None),
        None => {
            let mem = kv_memory(kind, version, arch, m.weight_dtype, gpu, tp, util, budget, seqs, par);
            if mem.kv_bytes <= 0.0 {
                // Redundant expert copies are part of those weights: name them where there are some.
                let copies = match par.redundant_experts {
                    0 => String::new(),
                    r => format!(
                        " or lower redundant_experts (--redundant-experts: its {r} expert copies are in those weights)"
                    ),
                };
                return Err(Error::Infeasible(format!(
                    "{} in {} ({:.1} GB of weights) does not fit {} x {} under {} ({}); raise tensor_parallel{copies}",
                    arch.name,
                    m.weight_dtype,
                    mem.weights_bytes / 1e9,
                    tp,
                    gpu.name,
                    kind.as_str(),
                    mem.formula
                )));
            }
            ((mem.kv_bytes / kv_per_token) as u64, Some(mem))
        }
    };
    if kv_capacity_tokens < block as u64 {
        return Err(err(
            "engine.kv_capacity_tokens",
            format!("must hold at least one block, got {kv_capacity_tokens}"),
        ));
    }
    if s.max_prefill_tokens == Some(0) {
        return Err(err("engine.max_prefill_tokens", "must be at least 1".into()));
    }
    let ratio_init = s.new_token_ratio_init.unwrap_or(0.7);
    // SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR 0.14 x init (environ.py).
    let ratio_min = s.new_token_ratio_min.unwrap_or(0.098);
    if !(0.0..=1.0).contains(&ratio_init) || !(0.0..=ratio_init).contains(&ratio_min) {
        return Err(err(
            "engine.new_token_ratio_init",
            "need 0 <= new_token_ratio_min <= new_token_ratio_init <= 1".into(),
        ));
    }
    let only = |field: &str, set: bool, engine: EngineKind| -> Result<()> {
        if set && kind != engine {
            return Err(err(field, format!("is a {} setting; this profile runs {}", engine.as_str(), kind.as_str())));
        }
        Ok(())
    };
    only("engine.capacity_scheduler_policy", s.capacity_scheduler_policy.is_some(), EngineKind::Trtllm)?;
    only("engine.enable_chunked_prefill", s.enable_chunked_prefill.is_some(), EngineKind::Trtllm)?;
    only("engine.free_gpu_memory_fraction", s.free_gpu_memory_fraction.is_some(), EngineKind::Trtllm)?;
    only("engine.reserve_full_prompt", s.reserve_full_prompt.is_some(), EngineKind::Vllm)?;
    only("engine.watermark", s.watermark.is_some(), EngineKind::Vllm)?;
    only("engine.attention_dp_balance", s.attention_dp_balance.is_some(), EngineKind::Trtllm)?;
    only("engine.scheduler_recv_interval", s.scheduler_recv_interval.is_some(), EngineKind::Sglang)?;
    if s.stream_interval == Some(0) {
        return Err(err("engine.stream_interval", "must be at least 1".into()));
    }
    match s.scheduler_recv_interval {
        Some(0) => return Err(err("engine.scheduler_recv_interval", "must be at least 1".into())),
        // scheduler_recv_skipper.py asserts `not server_args.enable_dp_attention`.
        Some(n) if n > 1 && par.attention_dp > 1 => {
            return Err(err(
                "engine.scheduler_recv_interval",
                format!("SGLang does not run a receive interval ({n}) under attention DP; leave it at 1"),
            ))
        }
        _ => {}
    }
    // llm_args.py AttentionDpConfig: enable_balance False, timeout_iters 50, batching_wait_iters 10.
    let attention_dp_balance = (kind == EngineKind::Trtllm
        && par.attention_dp > 1
        && s.attention_dp_balance.unwrap_or(false))
    .then(|| AdpBalance {
        ranks: par.attention_dp,
        timeout_iters: s.attention_dp_timeout_iters.unwrap_or(50).max(1),
        batching_wait_iters: s.attention_dp_batching_wait_iters.unwrap_or(10),
    });
    // Attention DP: the settings are each rank's (its own scheduler and batch), the simulated engine
    // stands for all ranks at once (profile/parallel.rs, sim/step_large.rs).
    let ranks = par.attention_dp;
    let mut config = EngineConfig {
        kind,
        version: version.to_string(),
        max_num_batched_tokens: budget * ranks,
        max_num_seqs: match kind {
            EngineKind::Sglang if s.max_running_requests.or(s.max_num_seqs).is_none() => {
                sglang_default_max_running_requests(kv_capacity_tokens / ranks as u64, arch.max_context) * ranks
            }
            _ => seqs * ranks,
        },
        block_size_tokens: block,
        gpu_memory_utilization: util,
        kv_capacity_tokens,
        per_seq_reserved_blocks,
        max_prefill_tokens: s.max_prefill_tokens.unwrap_or(16384).max(budget),
        enable_mixed_chunk: s.enable_mixed_chunk.unwrap_or(false),
        interleave_decode: s.interleave_decode.unwrap_or(false),
        num_continuous_decode_steps: s.num_continuous_decode_steps.unwrap_or(1).max(1),
        recv_interval: s.scheduler_recv_interval.unwrap_or(1),
        stream_interval: s.stream_interval.unwrap_or(1),
        new_token_ratio_init: ratio_init,
        new_token_ratio_min: ratio_min,
        // SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS: linear decay from init to min over 600 decode steps.
        new_token_ratio_decay_steps: s.new_token_ratio_decay_steps.unwrap_or(600).max(1),
        // vllm/config/scheduler.py scheduler_reserve_full_isl: added in 0.19, default True.
        reserve_full_prompt: kind == EngineKind::Vllm
            && s.reserve_full_prompt.unwrap_or(version >= EngineVersion(0, 19, 0)),
        watermark_blocks: (watermark * (kv_capacity_tokens / block as u64) as f64) as u64,
        // schedule_policy.py: `ratio = 1.0 if req.sampling_params.ignore_eos` from 0.5.22 (absent in 0.5.21).
        reserve_full_output: kind == EngineKind::Sglang
            && s.ignore_eos.unwrap_or(false)
            && version >= EngineVersion(0, 5, 22),
        capacity_policy: (kind == EngineKind::Trtllm)
            .then(|| s.capacity_scheduler_policy.unwrap_or(CapacityPolicy::GuaranteedNoEvict)),
        chunked_prefill: kind != EngineKind::Trtllm || s.enable_chunked_prefill.unwrap_or(false),
        prefix_caching: s.prefix_caching.unwrap_or(true),
        memory,
        attention_dp_balance,
        kv_offload: None,
    };
    config.kv_offload = super::offload::resolve(source, s.kv_offload_gb, &config, arch, gpu, tp, kv_per_token)?;
    Ok(config)
}

/// The KV cache's share of memory for one replica of `tp` GPUs, by the engine's formula.
#[allow(clippy::too_many_arguments)]
fn kv_memory(
    kind: EngineKind,
    version: EngineVersion,
    arch: &ModelArch,
    weight_dtype: Dtype,
    gpu: &GpuSpec,
    tp: u32,
    util: f64,
    budget: u32,
    seqs: u32,
    par: &Parallel,
) -> KvMemory {
    // All the replica's GPUs (pipeline stages included); weights replicated per attention DP rank.
    let tp = par.gpus(tp);
    let n = tp as f64;
    let total = gpu.memory_bytes() * n;
    let weights = par.weight_bytes(arch, weight_dtype);
    // Stages of unequal layers (Parallel::stage_imbalance s): the largest stage holds s / P of the
    // weights and of each token's KV beside 1 / P of everything else, so the replica holds the
    // tokens that stage holds: (rest - s x weights) / s in bytes of the whole replica's KV.
    let s = par.stage_imbalance(arch);
    let activation = activation_peak_bytes(arch, budget, seqs) * n;
    let non_torch = non_torch_bytes(tp) * n;
    let mut mem = match kind {
        EngineKind::Vllm => {
            // vllm/v1/worker/gpu_worker.py determine_available_memory: requested (total x utilization)
            // minus the non-KV memory its profiling run measured (weights, activation peak, non-torch
            // growth) minus, from 0.20 (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default 1), the CUDA
            // graphs' estimate. The CUDA context predates the snapshot and sits in the headroom.
            let graphs = if version >= EngineVersion(0, 20, 0) { CUDA_GRAPH_BYTES * n } else { 0.0 };
            let budget_bytes = total * util;
            KvMemory {
                total_bytes: total,
                budget_bytes,
                weights_bytes: weights,
                activation_bytes: activation,
                non_torch_bytes: non_torch,
                cuda_graph_bytes: graphs,
                kv_bytes: (budget_bytes - s * weights - activation - non_torch - graphs) / s,
                formula: format!(
                    "vLLM {version}: total x gpu_memory_utilization {util} - weights - activation peak - non-torch{}",
                    if graphs > 0.0 { " - CUDA graphs" } else { " (CUDA graphs come out of the headroom)" }
                ),
            }
        }
        EngineKind::Sglang => {
            // srt/model_executor/model_runner.py profile_max_num_token: the pool is what is left of
            // total x mem_fraction_static once the weights are loaded; activations and graphs live in
            // the rest of the GPU.
            let budget_bytes = total * util;
            KvMemory {
                total_bytes: total,
                budget_bytes,
                weights_bytes: weights,
                activation_bytes: 0.0,
                non_torch_bytes: 0.0,
                cuda_graph_bytes: 0.0,
                kv_bytes: (budget_bytes - s * weights) / s,
                formula: format!("SGLang {version}: total x mem_fraction_static {util} - weights"),
            }
        }
        EngineKind::Trtllm => {
            // KvCacheConfig.free_gpu_memory_fraction: the share of the memory still free after the
            // weights, the CUDA context, the runtime buffers and a max_num_tokens profiling forward.
            let context = CUDA_CONTEXT_BYTES * n;
            let graphs = CUDA_GRAPH_BYTES * n;
            let free = (total - s * weights - activation - non_torch - context - graphs) / s;
            KvMemory {
                total_bytes: total,
                budget_bytes: total,
                weights_bytes: weights,
                activation_bytes: activation,
                non_torch_bytes: non_torch + context,
                cuda_graph_bytes: graphs,
                kv_bytes: free * util,
                formula: format!(
                    "TensorRT-LLM {version}: free_gpu_memory_fraction {util} x (total - weights - activations - context and buffers - CUDA graphs)"
                ),
            }
        }
    };
    if s > 1.0 {
        let (p, l) = (par.pipeline_parallel, arch.n_layers);
        mem.formula.push_str(&format!(
            ", on the largest of {p} stages ({} of {l} layers: weights x {s:.4} and KV over {s:.4})",
            l.div_ceil(p)
        ));
    }
    mem
}
