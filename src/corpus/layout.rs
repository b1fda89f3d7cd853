//! The GPU layout a corpus point's benchmark launched (issue 25): tensor parallelism, attention data
//! parallelism and expert parallelism, rebuilt from what each source states (profile/parallel.rs says
//! how capsim counts them: `tensor_parallel` is the GPUs of the replica, the attention DP ranks split
//! them).
//!
//! - inferencex-dsr1 (metadata.json): `num_gpus` = `tp` for a single node; `dp_attention` runs one
//!   attention rank per GPU (TensorRT-LLM `enable_attention_dp: $DP_ATTENTION` with `--tp_size=$TP
//!   --ep_size=$EP_SIZE`, SemiAnalysisAI/InferenceX benchmarks/single_node/fixed_seq_len/
//!   dsr1_fp4_b200_trt.sh), experts over `ep` GPUs.
//! - aic-e2e rows from InferenceX's database (`db-dump`, and the `source_file=<date>.csv` rows whose
//!   id ends `_tp<T>_ep<E>_<n>`): the database stores a single node's GPU count as TP x EP (the
//!   dsr1-fp4-b200-trt-tp8ep8-dpa metadata: `num_gpus 8`, `db_num_prefill_gpu 64`), and
//!   aiconfigurator's adapter derived the columns from it (ai-dynamo/aiconfigurator
//!   src/aiconfigurator/sdk/config_adapter/inferencex.py `_worker`: TensorRT-LLM and SGLang
//!   `moe_tp, moe_ep = gpus // ep, ep`, with DP attention `tp_size 1, attention_dp_size gpus`; vLLM
//!   `attention_dp = gpus // tp`, `moe_ep = tp x attention_dp`). So the launch's TP and EP are
//!   (moe_tp, moe_ep) for TensorRT-LLM and SGLang, (tp_size, attention_dp_size) for vLLM, and the
//!   deployment runs on TP GPUs: `tp8ep8-dpa` is 8 GPUs, 8 attention ranks, experts over 8 GPUs,
//!   not the 64 the columns multiply to. InferenceX's vLLM entries of these models run without DP
//!   attention (configs/deprecated/nvidia-minimaxm2.5-m2.7-master.yaml minimaxm2.5-fp8-b200-vllm
//!   `{ tp: 4, ep: 4 }`; nvidia-kimik2.5-8k1k-master.yaml kimik2.5-fp4-b200-vllm `dp-attn: false` at
//!   tp 4): TP GPUs with --enable-expert-parallel.
//! - aic-e2e rows of NVIDIA's gap analyses: `tp_size` is the engine's tp_size (moe_tp x moe_ep =
//!   tp_size) and `batch_size` each rank's batch: concurrency / batch_size attention ranks
//!   (TensorRT-LLM enable_attention_dp, where each rank batches its own requests). Rows whose
//!   experts tile tp_size x attention_dp_size GPUs instead state aiconfigurator's convention (as
//!   its disaggregated pools do): attention_dp_size ranks of tp_size GPUs each.
//! - A disaggregated row's pools ([`worker`]): aiconfigurator's `prefill_*`/`decode_*` columns as
//!   a worker of tp_size x attention_dp_size GPUs (each rank's attention over tp_size of them), its
//!   experts over moe_tp_size x moe_ep_size of the same GPUs; InferenceX's metadata pool blocks as
//!   tp GPUs, one DP-attention rank per GPU (measured/corpus.rs).

use super::Refusal;
use crate::catalog::ModelArch;
use crate::measured::corpus::{CorpusPoint, PoolLayout};
use crate::measured::pd_recipes::PoolLaunch;
use crate::profile::{EngineKind, EngineSettings, Parallel};

/// A point's layout: the replica's GPUs, the large-deployment layout and each rank's batch (the
/// concurrency the engine settings of a rank are sized by).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Layout {
    pub tensor_parallel: u32,
    pub parallel: Parallel,
    /// Experts spread whole over every GPU of the replica (the plain profile's expert_parallel).
    pub expert_parallel: bool,
    /// The concurrency one rank's engine settings are sized for.
    pub rank_concurrency: u32,
}

/// One worker of a disaggregated pool: its GPUs, its layout and whether its experts are spread
/// whole over all of them (the plain profile's expert_parallel).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Worker {
    pub gpus: u32,
    pub parallel: Parallel,
    pub expert_parallel: bool,
}

/// The worker a pool `l` of point `p` states (see the module doc), within `link_domain` GPUs.
/// Experts whole over the worker's GPUs or split by its TP alone, without attention DP, is the
/// plain layout; anything else goes through the large step (sim/step_large.rs), as the aggregated
/// points' layouts do.
pub fn worker(p: &CorpusPoint, l: &PoolLayout, moe: bool, link_domain: u32) -> Result<Worker, Refusal> {
    let dp = l.attention_dp.max(1);
    let gpus = worker_gpus(p, l);
    if gpus > link_domain {
        return Err(Refusal::BeyondLinkDomain);
    }
    if !gpus.is_multiple_of(dp) {
        return Err(Refusal::AttentionDp);
    }
    let ep = if moe { l.moe_ep.max(1) } else { 1 };
    // aic-e2e's rows state moe_tp beside EP: the two must tile the worker's GPUs.
    if !gpus.is_multiple_of(ep) || (counts_rank_gpus(p) && moe && l.moe_tp.max(1) * ep != gpus) {
        return Err(Refusal::MixedMoeLayout);
    }
    let parallel = if dp == 1 && (ep == 1 || ep == gpus) {
        Parallel::plain()
    } else {
        Parallel { attention_dp: dp, expert_parallel_size: ep, pipeline_parallel: 1, redundant_experts: 0 }
    };
    Ok(Worker { gpus, parallel, expert_parallel: moe && ep > 1 && ep == gpus })
}

/// Whether `p`'s pools count one attention rank's GPUs in `tensor_parallel` (aic-e2e's rows:
/// `tp_size` is the attention TP, aiconfigurator's convention) rather than a worker's (InferenceX's
/// metadata.json).
fn counts_rank_gpus(p: &CorpusPoint) -> bool {
    p.set == "aic-e2e"
}

/// The GPUs of one worker of pool `l` of point `p`.
pub fn worker_gpus(p: &CorpusPoint, l: &PoolLayout) -> u32 {
    if counts_rank_gpus(p) {
        l.tensor_parallel * l.attention_dp.max(1)
    } else {
        l.tensor_parallel
    }
}

/// The launch's (TP, EP) from an aic-e2e id `..._tp<T>_ep<E>_<n>`.
fn id_tp_ep(id: &str) -> Option<(u32, u32)> {
    let mut parts = id.rsplit('_');
    parts.next()?.parse::<u32>().ok()?;
    let ep = parts.next()?.strip_prefix("ep")?.parse::<u32>().ok()?;
    let tp = parts.next()?.strip_prefix("tp")?.parse::<u32>().ok()?;
    Some((tp, ep))
}

/// Whether the row comes from InferenceX's database through aiconfigurator's adapter (see above).
fn from_inferencex_db(p: &CorpusPoint) -> bool {
    p.is_inferencex_db_row() || (p.set == "aic-e2e" && id_tp_ep(&p.id).is_some())
}

/// The layout of `p`, or None where the columns do not make one (the caller refuses the point with
/// the refusal its columns raise).
pub fn layout(p: &CorpusPoint, engine: EngineKind, arch: &ModelArch) -> Option<Layout> {
    let moe = arch.moe.is_some();
    let conc = p.concurrency;
    let (tp, dp, ep) = if p.set != "aic-e2e" {
        (p.tensor_parallel, p.attention_dp, if moe { p.moe_ep } else { 1 })
    } else if from_inferencex_db(p) {
        let db_gpus = p.tensor_parallel * p.attention_dp;
        let (tp, ep, dpa) = match engine {
            EngineKind::Vllm => (p.tensor_parallel, p.attention_dp, false),
            _ if moe => (p.moe_tp.max(1), p.moe_ep.max(1), p.attention_dp > 1),
            _ => (db_gpus, 1, p.attention_dp > 1),
        };
        if let Some((t, e)) = id_tp_ep(&p.id) {
            if (t, e) != (tp, ep) {
                return None;
            }
        }
        if moe && tp * ep != db_gpus {
            return None;
        }
        (tp, if dpa { tp } else { 1 }, if moe { ep } else { 1 })
    } else if moe && p.attention_dp > 1 && p.moe_tp.max(1) * p.moe_ep.max(1) == p.tensor_parallel * p.attention_dp {
        // aiconfigurator's own convention, as in its disaggregated pools: `tp_size` is each
        // attention rank's TP, the replica tp_size x attention_dp_size GPUs tiled by the experts'
        // moe_tp x moe_ep (the `source_file=2026-03-25.csv` rows: DeepSeek-R1 `tp 1, dp 8, ep 8`
        // at batch 32 and concurrency 256, id `_tp8_0_ep8_0_`), each rank batching its share.
        let dp = p.attention_dp;
        if p.batch_size.is_some_and(|b| b * dp != conc) {
            return None;
        }
        (p.tensor_parallel * dp, dp, p.moe_ep.max(1))
    } else {
        // NVIDIA's own rows: tp_size GPUs, each rank's batch.
        let tp = p.tensor_parallel;
        let dp = match p.batch_size {
            Some(b) if b > 0 && b != conc && conc.is_multiple_of(b) => conc / b,
            Some(b) if b != conc => return None,
            _ => p.attention_dp,
        };
        if moe && p.moe_tp.max(1) * p.moe_ep.max(1) != tp {
            return None;
        }
        (tp, dp, if moe { p.moe_ep.max(1) } else { 1 })
    };
    if tp == 0 || dp == 0 || !tp.is_multiple_of(dp) || ep == 0 || !tp.is_multiple_of(ep) {
        return None;
    }
    let parallel = Parallel {
        attention_dp: dp,
        expert_parallel_size: ep,
        pipeline_parallel: p.pipeline_parallel,
        redundant_experts: 0,
    };
    // InferenceX's scripts size the engine by the client's CONC (MAX_NUM_TOKENS); aiconfigurator's
    // rules by max_batch_size, each rank's batch.
    let inferencex = p.set != "aic-e2e" || from_inferencex_db(p);
    Some(Layout {
        tensor_parallel: tp,
        parallel,
        expert_parallel: moe && ep > 1 && ep == tp,
        rank_concurrency: if inferencex { conc } else { conc.div_ceil(dp) },
    })
}

/// `s` with the attention-DP settings of the point's launch script: InferenceX's TensorRT-LLM scripts
/// turn on `attention_dp_config.enable_balance` whenever DP_ATTENTION is true, with `timeout_iters:
/// 60, batching_wait_iters: 0` for DeepSeek-R1 (benchmarks/single_node/fixed_seq_len/
/// dsr1_fp4_b200_trt.sh, dsr1_fp8_b200_trt.sh, dsr1_fp8_h200_trt.sh) and TensorRT-LLM's defaults
/// for gpt-oss (deprecated/gptoss_fp4_b200_trt.sh: `enable_balance: true` alone). NVIDIA's own rows
/// (aiconfigurator's generated configs) leave it off, TensorRT-LLM's default.
///
/// And the settings the launch script gave where metadata.json does not resolve them
/// (CorpusPoint::launch): InferenceX's B200 SGLang scripts' scheduler receive interval,
/// running-request cap, chunk and prefill budgets and mem_fraction_static, every NVIDIA
/// deployment's stream interval, and its TensorRT-LLM scripts' token budget (which the MTP scripts
/// size by the `draft_tokens` the point drafts).
pub fn launch_settings(
    p: &CorpusPoint,
    parallel: &Parallel,
    draft_tokens: u32,
    mut s: EngineSettings,
) -> EngineSettings {
    if let Some(l) = &p.launch {
        s.max_running_requests = l.max_running_requests.or(s.max_running_requests);
        s.chunked_prefill_size = l.chunked_prefill_size.or(s.chunked_prefill_size);
        s.max_prefill_tokens = l.max_prefill_tokens.or(s.max_prefill_tokens);
        s.gpu_memory_utilization = l.mem_fraction_static.or(s.gpu_memory_utilization);
        s.scheduler_recv_interval = l.scheduler_recv_interval.or(s.scheduler_recv_interval);
        s.stream_interval = l.stream_interval.or(s.stream_interval);
        // The script's own rule for TensorRT-LLM's token budget (benchmark_settings assumes the
        // later scripts' floor of 8192).
        if let (Some(EngineKind::Trtllm), Some(rule)) = (s.kind, l.trt_max_num_tokens) {
            s.max_num_batched_tokens = Some(crate::corpus::inferencex_trt_max_num_tokens(
                rule,
                p.isl,
                p.concurrency,
                draft_tokens,
                parallel.attention_dp,
            ));
        }
    }
    let inferencex = p.set != "aic-e2e" || from_inferencex_db(p);
    if s.kind == Some(EngineKind::Trtllm) && parallel.attention_dp > 1 && inferencex {
        s.attention_dp_balance = Some(true);
        if !p.model.to_ascii_lowercase().contains("gpt-oss") {
            s.attention_dp_timeout_iters = Some(60);
            s.attention_dp_batching_wait_iters = Some(0);
        }
    }
    s
}

/// Pool `l` as the recipe `r` the point launched lays it out (crate::measured::pd_recipes): its
/// GPUs per worker, attention-DP ranks and EP size where the recipe states them. metadata.json's
/// pools follow the config key, which can differ from the recipe that ran (InferenceX
/// nvidia-master.yaml dsr1-fp4-gb200-dynamo-trt @ 4e9a376b: `dp-attn: true` for a decode pool whose
/// recipe, ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml, sets `enable_attention_dp: false`).
/// Where `p`'s pools count a rank's GPUs ([`worker_gpus`]), the recipe's worker GPUs are divided
/// over its ranks.
pub fn recipe_pool(p: &CorpusPoint, l: PoolLayout, r: &PoolLaunch) -> PoolLayout {
    let gpus = r.tensor_parallel.unwrap_or_else(|| worker_gpus(p, &l));
    let ep = r.expert_parallel.unwrap_or(l.moe_ep).max(1);
    let dp = r.attention_dp.unwrap_or(l.attention_dp).max(1);
    PoolLayout {
        tensor_parallel: if counts_rank_gpus(p) { (gpus / dp).max(1) } else { gpus },
        attention_dp: dp,
        moe_tp: if ep > 1 { (gpus / ep).max(1) } else { gpus },
        moe_ep: ep,
        ..l
    }
}
