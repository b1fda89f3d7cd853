//! The step of a large deployment (issue 25): attention data parallelism, expert parallelism split
//! from tensor parallelism, pipeline stages (profile/parallel.rs counts the GPUs). Built once by
//! [`StepModel::new`](super::step::StepModel::new) when the profile states such a layout; plain
//! profiles never reach this file.
//!
//! One simulated engine stands for the N synchronized attention DP ranks, its requests spread evenly
//! over them (balanced ranks: TensorRT-LLM's `attention_dp_config.enable_balance`, SGLang's
//! round-robin DP controller and vLLM's DP load balancing all aim at it). The engine's KV capacity
//! and batch limits are N times one rank's (profile/engine.rs). A step of B sequences and T tokens:
//! - each rank computes attention, its dense layers, the LM head and its per-sequence work for the
//!   busiest rank's share, ceil(B / N) sequences and ceil(T / N) tokens, over its tp / N GPUs (the
//!   ranks run in parallel and wait for each other at every MoE layer); its KV reads and attention
//!   are the balanced share of the step's;
//! - the MoE layers see every rank's tokens: expert GEMMs and the experts touched over all T
//!   tokens, spread over all tp GPUs;
//! - weights read: the attention and dense weights once per rank (each rank holds its own copy), the
//!   touched experts once;
//! - communication inside a rank: the attention output (and dense MLP) all-reduce over its tp / N
//!   GPUs, the logits all-gather;
//! - `all_to_all_s`, the MoE exchange across the ranks, twice per MoE layer: with expert parallelism
//!   a dispatch and a combine all-to-all over the stage's GPUs (DeepEP's normal/low-latency kernels,
//!   SGLang --moe-a2a-backend deepep, TensorRT-LLM's alltoall MoE), each GPU sending its tokens' top-k
//!   copies, plus an all-reduce inside each expert's moe_tp = tp / ep GPUs when the experts are also
//!   TP-split; without expert parallelism (experts TP-split over all GPUs) the ranks' tokens are
//!   gathered before and reduce-scattered after each MoE layer (SGLang dp_attention.py
//!   `dp_gather` / `dp_scatter`), one all-reduce's worth over the stage. An expert-parallel
//!   exchange between attention-DP ranks also pays the profile's `exchange_latency_s` each time
//!   (learned on the corpus's attention-DP deployments: calibrate/exchange.rs): its kernels'
//!   fixed cost and the wait for the slowest rank, which neither the link model nor balanced ranks
//!   count.
//!
//! Pipeline parallelism with P stages of n_layers / P layers on tp GPUs each: the engine keeps P
//! micro-batches in flight (vLLM runs P virtual engines, `max_concurrent_batches` = pipeline size,
//! vllm/v1/engine/core.py `batch_queue`; aiconfigurator scales an aggregated worker's throughput by
//! pp_size, aic-core sdk/backends/base_backend.py). A simulated step is one period, in which every
//! micro-batch of ceil(B / P) sequences passes all P stages: each stage spends its 1/P of the layers
//! on each of the P micro-batches, so the period is one micro-batch's time through all layers (the
//! stages' weights read from their own GPUs) plus `pipeline_s`, its P - 1 point-to-point sends of the
//! activations (tokens x hidden x 2 bytes over the link, as an NCCL send: base latency + one hop +
//! bytes / bandwidth). The bubble: with fewer sequences than stages the period is still one full
//! traversal, so a lone request pays every stage in sequence. Stages of unequal layers (61 over 2:
//! 31 and 30) lengthen a full period to P x the largest stage's time (`stage_factor`).
//!
//! A prompt chunk is spread over neither the ranks nor the micro-batches: its sequence sits on one
//! rank of one micro-batch (the engines schedule whole requests per micro-batch), so a step holding
//! one charges the busiest micro-batch the larger of its longest chunk and the balanced ceil(T / P),
//! and that micro-batch's busiest rank the larger of the chunk and its ceil(. / N)
//! (StepModel::parts_prefill_whole). A lone prompt at P stages therefore takes one full traversal of
//! its whole chunk, its pp 1 time plus the sends between stages.
//!
//! Where this breaks: ranks with unequal contexts wait for the slowest, and so do several chunks
//! on one rank and micro-batches of unequal size. All make the real step longer than this one.

use crate::catalog::gpu::Collectives;
use crate::profile::Profile;
use crate::units::Dtype;

/// A large deployment's step constants (see the module doc).
#[derive(Debug, Clone)]
pub struct LargeStep {
    /// Attention DP ranks.
    pub ranks: u32,
    /// Pipeline stages (micro-batches in flight).
    pub stages: u32,
    /// The largest stage's layers over the mean stage's (Parallel::stage_imbalance; 1: even).
    pub stage_imbalance: f64,
    /// Weight bytes every step reads besides the touched experts: attention and dense weights once
    /// per rank.
    pub dense_weight_bytes: f64,
    /// All-reduces inside a rank per step (attention output every layer, dense MLP layers, and the
    /// MoE layers' when experts are split by TP with no DP) over `rank_coll`.
    rank_all_reduces: f64,
    rank_coll: Option<Collectives>,
    token_bytes: f64,
    logits_bytes_per_seq: f64,
    /// MoE exchanges per step (2 per MoE layer).
    moe_exchanges: f64,
    /// All-to-all over the stage's GPUs, and the bytes per GPU per MoE token.
    a2a: Option<(Collectives, f64)>,
    /// Fixed time of each all-to-all between attention-DP ranks (s; 0 with one rank).
    exchange_latency_s: f64,
    /// Gather / reduce-scatter over the stage's GPUs (experts TP-split under DP attention), bytes per
    /// MoE token.
    gather: Option<(Collectives, f64)>,
    /// All-reduce inside an expert's moe_tp GPUs, bytes per MoE token.
    moe_tp_reduce: Option<(Collectives, f64)>,
    /// The link between stages as a two-GPU group (a send is an all-gather of twice its bytes).
    p2p: Option<Collectives>,
}

impl LargeStep {
    /// The constants of `p`'s layout; None for a plain profile.
    pub fn new(p: &Profile, dense_weight_bytes: f64) -> Option<LargeStep> {
        let tp = p.tensor_parallel;
        let par = &p.parallel;
        if !par.is_large(tp) {
            return None;
        }
        let a = &p.arch;
        let ranks = par.attention_dp;
        let attn_tp = par.attention_tp(tp);
        let ep = par.expert_parallel_size;
        let moe_tp = par.moe_tp(tp);
        let token_bytes = a.hidden as f64 * Dtype::Bf16.bytes();
        let layers = a.n_layers as f64;
        let moe_layers = a.n_moe_layers() as f64;
        let group = |n: u32| (n > 1).then(|| p.gpu.collectives(n));
        let k = a.moe.as_ref().map_or(0.0, |m| m.n_experts_per_token as f64);
        let moe = a.moe.is_some() && tp > 1;
        // Experts TP-split over the whole stage with no DP: their all-reduce stays inside the rank
        // (the rank is the stage), as plain tensor parallelism.
        let moe_in_rank = a.moe.is_none() || (ep == 1 && ranks == 1);
        let rank_all_reduces = layers + (layers - moe_layers) + if moe_in_rank { moe_layers } else { 0.0 };
        let (a2a, gather, moe_tp_reduce) = if !moe || moe_in_rank {
            (None, None, None)
        } else if ep > 1 {
            let reduce = group(moe_tp).map(|c| (c, k * token_bytes / ep as f64));
            (group(tp).map(|c| (c, k * token_bytes / tp as f64)), None, reduce)
        } else {
            // Each of the two exchanges (gather, reduce-scatter) costs an all-gather of the tokens.
            (None, group(tp).map(|c| (c, token_bytes)), None)
        };
        let p2p = (par.pipeline_parallel > 1).then(|| Collectives { gpus: 2, ..p.gpu.collectives(par.gpus(tp)) });
        Some(LargeStep {
            ranks,
            stages: par.pipeline_parallel,
            stage_imbalance: par.stage_imbalance(a),
            dense_weight_bytes: dense_weight_bytes * ranks as f64,
            rank_all_reduces,
            rank_coll: group(attn_tp),
            token_bytes,
            logits_bytes_per_seq: a.vocab as f64 * Dtype::Bf16.bytes(),
            moe_exchanges: 2.0 * moe_layers,
            exchange_latency_s: p.rank_exchange_latency_s(),
            a2a,
            gather,
            moe_tp_reduce,
            p2p,
        })
    }

    /// The busiest rank's share of one micro-batch: (sequences, tokens), and the tokens the MoE
    /// layers see over all ranks.
    #[inline]
    pub fn shares(&self, n_seqs: u32, n_tokens: u32) -> (u32, u32, u32) {
        let micro_seqs = n_seqs.div_ceil(self.stages);
        let micro_tokens = n_tokens.div_ceil(self.stages);
        (micro_seqs.div_ceil(self.ranks), micro_tokens.div_ceil(self.ranks), micro_tokens)
    }

    /// Communication inside a rank for its `tokens` and `seqs` (attention all-reduces, logits).
    #[inline]
    pub fn rank_comm_s(&self, seqs: u32, tokens: u32) -> f64 {
        let Some(c) = &self.rank_coll else { return 0.0 };
        self.rank_all_reduces * c.all_reduce_s(tokens as f64 * self.token_bytes)
            + c.all_gather_s(seqs as f64 * self.logits_bytes_per_seq)
    }

    /// The MoE exchange across ranks and the EP group for `moe_tokens` tokens over all ranks.
    #[inline]
    pub fn all_to_all_s(&self, moe_tokens: u32) -> f64 {
        let t = moe_tokens as f64;
        // Per exchange (two per MoE layer); the moe_tp all-reduce runs once per layer.
        let one = self.a2a.map_or(0.0, |(c, b)| c.all_to_all_s(t * b) + self.exchange_latency_s)
            + self.gather.map_or(0.0, |(c, b)| c.all_gather_s(t * b))
            + 0.5 * self.moe_tp_reduce.map_or(0.0, |(c, b)| c.all_reduce_s(t * b));
        self.moe_exchanges * one
    }

    /// What the layers' work of a period of `n_seqs` sequences costs over its even-split time:
    /// with m = min(n_seqs, P) micro-batches in flight, the largest stage runs each of them through
    /// its ceil(L / P) layers, so the period is the longer of one traversal and m x that stage's
    /// time, max(1, m x imbalance / P). Even stages, or fewer micro-batches than stages (the
    /// bubble), leave it at one traversal.
    #[inline]
    pub fn stage_factor(&self, n_seqs: u32) -> f64 {
        if self.stage_imbalance <= 1.0 {
            return 1.0;
        }
        let m = n_seqs.clamp(1, self.stages) as f64;
        (m * self.stage_imbalance / self.stages as f64).max(1.0)
    }

    /// The P - 1 sends of a micro-batch of `micro_tokens` tokens between stages.
    #[inline]
    pub fn pipeline_s(&self, rank_tokens: u32) -> f64 {
        let Some(c) = &self.p2p else { return 0.0 };
        (self.stages - 1) as f64 * c.all_gather_s(2.0 * rank_tokens as f64 * self.token_bytes)
    }
}
