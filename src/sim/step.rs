//! The duration of one engine step from the batch's shape (DESIGN.md section 1).
//!
//! step = overhead + per_seq x sequences + max(memory, compute) + (1 - overlap) x min(memory, compute)
//!        + communication, where
//! - memory time = (weights read + KV read + linear-attention state) / effective bandwidth, over the
//!   tensor-parallel GPUs; the weights read grow with the tokens in the step for MoE models (experts
//!   touched, E(1-(1-k/E)^B)); KV stored more than once under tensor parallelism (GQA with fewer KV
//!   heads than GPUs, MLA's latent on every GPU) is read by every GPU that holds it;
//! - compute time = dense matmul FLOPs / effective FLOP/s + MoE expert FLOPs / (effective FLOP/s x
//!   grouped-GEMM efficiency relative to dense) + LM-head FLOPs (once per sequence, not per prefill
//!   token) + attention FLOPs / effective attention FLOP/s;
//! - communication = two all-reduces per layer of (tokens x hidden x 2 bytes) under tensor parallelism
//!   (Megatron: after the attention output and the MLP down projection), the MLP one replaced by an
//!   all-to-all dispatch and combine per MoE layer under expert parallelism, and one all-gather of the
//!   logits; costs from the GPU catalog's link (catalog::gpu::Collectives).
//!
//! Every coefficient is in physical units, so a profile moves to another GPU by swapping peaks and to
//! another model by swapping byte and FLOP counts. Constants are folded once in [`StepModel::new`]; the
//! per-step evaluation is a handful of multiplications and one table lookup. [`StepModel::parts`] is
//! the one place the formula is written: the simulator sums it, `capsim explain` prints it.

use super::spec::{DraftModel, DraftShape};
use super::step_large::LargeStep;
use crate::catalog::gpu::Collectives;
use crate::catalog::ModelArch;
use crate::profile::Profile;
use crate::units::Dtype;
use serde::Serialize;
use std::cell::RefCell;

/// What a step contains, accumulated by the scheduler as it builds the batch.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchShape {
    /// Sequences in the step (decodes and prefill chunks).
    pub n_seqs: u32,
    /// Tokens computed in the step (1 per decode, the chunk length per prefill).
    pub n_tokens: u32,
    /// Tokens of context whose KV the step reads (each scheduled sequence reads its prefix once).
    pub kv_read_tokens: u64,
    /// (query, key) pairs of softmax attention over the step.
    pub attn_pairs: f64,
    /// The pairs of decoding tokens (one-token chunks) among `attn_pairs`: MLA computes them in
    /// its absorbed form, at more FLOPs per pair (ModelArch::attn_flops_per_decode_pair).
    pub decode_pairs: f64,
    /// The longest chunk's tokens and the position it starts at: under attention DP that
    /// sequence sits on one rank, which computes it alone (sim/step_large.rs).
    pub max_chunk: u32,
    pub max_chunk_start: u32,
}

impl BatchShape {
    /// Add a chunk of `n` tokens of a sequence whose first `start` tokens already have KV.
    #[inline]
    pub fn add_chunk(&mut self, start: u32, n: u32) {
        self.n_seqs += 1;
        self.n_tokens += n;
        self.kv_read_tokens += start as u64 + n as u64;
        if n > self.max_chunk {
            self.max_chunk = n;
            self.max_chunk_start = start;
        }
        let pairs = chunk_pairs(start, n);
        self.attn_pairs += pairs;
        if n == 1 {
            self.decode_pairs += pairs;
        }
    }
}

/// (query, key) pairs of a chunk of `n` tokens whose first `start` tokens already have KV.
#[inline]
fn chunk_pairs(start: u32, n: u32) -> f64 {
    let (s, n) = (start as f64, n as f64);
    n * s + n * (n + 1.0) / 2.0
}

/// One step's duration broken into its parts (seconds). `memory_s` and `compute_s` overlap: the step
/// pays the larger in full and `exposed` of the smaller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct StepParts {
    pub weights_s: f64,
    pub kv_s: f64,
    pub state_s: f64,
    pub dense_matmul_s: f64,
    pub expert_matmul_s: f64,
    pub lm_head_s: f64,
    pub attention_s: f64,
    pub communication_s: f64,
    /// Large deployments (sim/step_large.rs): the MoE dispatch and combine across the attention DP
    /// ranks and the EP group (absent, 0, for plain deployments).
    #[serde(skip_serializing_if = "is_zero")]
    pub all_to_all_s: f64,
    /// Pipeline stages: the point-to-point sends of activations between stages (absent, 0, without).
    #[serde(skip_serializing_if = "is_zero")]
    pub pipeline_s: f64,
    pub overhead_s: f64,
    /// A step with a prompt chunk: the prefill's own fixed cost (Coefficients::prefill_step_overhead_s;
    /// absent, 0, for decode steps and where it is not modelled).
    #[serde(skip_serializing_if = "is_zero")]
    pub prefill_overhead_s: f64,
    pub per_seq_s: f64,
    /// weights + KV + state.
    pub memory_s: f64,
    /// dense + expert + LM head + attention.
    pub compute_s: f64,
    /// Share of min(memory, compute) not hidden under the larger one.
    pub exposed: f64,
    /// Speculative decoding: the draft's passes (MTP layer, EAGLE head) or host lookup (n-gram),
    /// after the target's verification step (sim/spec.rs `DraftModel`); 0 without speculation.
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_s: f64,
    pub total_s: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The parts of a step that its sequence and token counts decide (see [`StepModel::fixed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FixedParts {
    /// No tokens: the step takes no time.
    empty: bool,
    weights_s: f64,
    state_s: f64,
    dense_matmul_s: f64,
    expert_matmul_s: f64,
    lm_head_s: f64,
    communication_s: f64,
    all_to_all_s: f64,
    pipeline_s: f64,
    per_seq_s: f64,
    /// How much more context than the balanced share the busiest attention-DP rank of the busiest
    /// pipeline micro-batch reads, minus one (0: balanced, and for every plain deployment). The
    /// step model charges a large deployment's KV reads and attention as each rank's 1 / N of one
    /// micro-batch's 1 / P of the batch; a micro-batch holds whole sequences and a rank its own,
    /// so with B sequences the busiest holds ceil(ceil(B / P) / N) of them, and the step waits for
    /// it: a lone decode at P stages reads its whole KV in its one traversal, not 1 / P of it.
    context_excess: f64,
}

/// Step-time model with its constants folded.
#[derive(Debug, Clone)]
pub struct StepModel {
    overhead_s: f64,
    /// Added to a step that computes a prompt chunk (Coefficients::prefill_step_overhead_s).
    prefill_overhead_s: f64,
    per_seq_s: f64,
    /// Seconds per byte (over all tensor-parallel GPUs).
    inv_bw: f64,
    /// Always-read weight bytes.
    dense_weight_bytes: f64,
    /// Bytes of one expert in every MoE layer (MoE layers x expert params x dtype), times the expert
    /// slots per routed expert where redundant copies are placed (n + R) / n: a touched expert's
    /// copies take its tokens on their own GPUs, and each reads the weights (profile/parallel.rs).
    expert_bytes_all_layers: f64,
    /// experts_touched(B) for B < table_len, computed on first use (NaN until then; the table grows as
    /// larger batches come): a run
    /// meets a few dozen batch sizes of the ~8,000 a budget allows, and filling the table up front
    /// (a `powf` each) took two thirds of a calibration, which builds a step model for every
    /// simulated point of every evaluation.
    experts_touched: RefCell<Vec<f64>>,
    /// Batch sizes the table may hold (beyond it, computed each time).
    table_len: usize,
    arch_for_large_b: ModelArch,
    expert_spread: f64,
    /// KV bytes per token of context read, replication under tensor parallelism included.
    kv_bytes_per_token: f64,
    state_bytes_per_seq: f64,
    /// Seconds per token of dense (non-expert, non-LM-head) matmul work.
    dense_s_per_token: f64,
    /// Seconds per token of routed-expert matmul work.
    expert_s_per_token: f64,
    /// Seconds of LM head per sequence.
    lm_head_s_per_seq: f64,
    /// Seconds per attention (query, key) pair.
    attn_s_per_pair: f64,
    /// What a decoding token's pair costs beyond `attn_s_per_pair` (MLA's absorbed form; 0 else).
    attn_s_per_decode_pair_extra: f64,
    /// 1 - mem_compute_overlap.
    exposed: f64,
    comm: Comm,
    /// Speculative decoding's draft (None: plain decoding).
    draft: Option<DraftModel>,
    /// Attention DP, split expert parallelism, pipeline stages (None: plain, the common path).
    large: Option<Box<LargeStep>>,
}

/// Communication of one step, folded: per-step latency and per-token bytes of each collective kind.
#[derive(Debug, Clone, Copy, Default)]
struct Comm {
    coll: Option<Collectives>,
    /// All-reduces per step and the bytes each carries per token.
    all_reduces: f64,
    all_reduce_bytes_per_token: f64,
    /// All-to-alls per step (dispatch + combine per MoE layer) and bytes per GPU per token.
    all_to_alls: f64,
    all_to_all_bytes_per_token: f64,
    /// Logits all-gather bytes per sequence.
    logits_bytes_per_seq: f64,
}

impl Comm {
    fn new(p: &Profile) -> Comm {
        let tp = p.tensor_parallel;
        if tp <= 1 {
            return Comm::default();
        }
        let a = &p.arch;
        let coll = p.gpu.collectives(tp);
        let act_bytes = Dtype::Bf16.bytes();
        let token_bytes = a.hidden as f64 * act_bytes;
        let moe_layers = a.n_moe_layers() as f64;
        let layers = a.n_layers as f64;
        let (all_reduces, all_to_alls, a2a_per_token) = match (&a.moe, p.expert_parallel) {
            (Some(m), true) => {
                // Attention output all-reduce in every layer, dense MLP all-reduce in the dense layers,
                // dispatch + combine in the MoE layers, each GPU sending its 1/tp share of the tokens'
                // top-k copies (FACTS-hardware-engines.md 1d).
                let k = m.n_experts_per_token as f64;
                (layers + (layers - moe_layers), 2.0 * moe_layers, k * token_bytes / tp as f64)
            }
            _ => (2.0 * layers, 0.0, 0.0),
        };
        Comm {
            coll: Some(coll),
            all_reduces,
            all_reduce_bytes_per_token: token_bytes,
            all_to_alls,
            all_to_all_bytes_per_token: a2a_per_token,
            logits_bytes_per_seq: a.vocab as f64 * act_bytes,
        }
    }

    #[inline]
    fn step_s(&self, n_tokens: u32, n_seqs: u32) -> f64 {
        let Some(c) = &self.coll else { return 0.0 };
        let t = n_tokens as f64;
        self.all_reduces * c.all_reduce_s(t * self.all_reduce_bytes_per_token)
            + self.all_to_alls * c.all_to_all_s(t * self.all_to_all_bytes_per_token)
            + c.all_gather_s(n_seqs as f64 * self.logits_bytes_per_seq)
    }
}

impl StepModel {
    pub fn new(p: &Profile) -> StepModel {
        let a = &p.arch;
        let c = &p.coefficients;
        let tp = p.tensor_parallel as f64;
        let w = p.file.model.weight_dtype;
        let kv = p.file.model.kv_dtype;
        let table_len = (p.engine.max_num_batched_tokens as usize + p.engine.max_num_seqs as usize + 1).min(1 << 16);

        let state_dtype = p.file.model.state_dtype.unwrap_or(Dtype::Fp32);
        // Each attention DP rank keeps its KV over its own tp / attention_dp GPUs (plain: tp).
        let replication = p.parallel.kv_replication(a, p.tensor_parallel);
        let matmul_rate = c.matmul_flops_eff_s * tp;
        let expert_flops_per_token = a.expert_flops_per_token();
        let body_flops = a.flops_per_token_body();
        let dense_weight_bytes = a.always_read_params() as f64 * w.bytes();
        let large = LargeStep::new(p, dense_weight_bytes).map(Box::new);
        // A pipeline period reads each micro-batch's share of the KV once per layer (step_large.rs).
        let micro = large.as_ref().map_or(1.0, |l| l.stages as f64);
        let mut m = StepModel {
            overhead_s: c.step_overhead_s,
            prefill_overhead_s: c.prefill_step_overhead_s,
            per_seq_s: c.per_seq_overhead_s,
            inv_bw: 1.0 / (c.bandwidth_eff_bytes_s * tp),
            dense_weight_bytes,
            expert_bytes_all_layers: a.n_moe_layers() as f64
                * a.expert_params() as f64
                * a.expert_dtype(w).bytes()
                * a.moe.as_ref().map_or(1.0, |m| 1.0 + p.parallel.redundant_experts as f64 / m.n_experts as f64),
            experts_touched: RefCell::new(Vec::new()),
            table_len,
            arch_for_large_b: a.clone(),
            expert_spread: c.expert_spread,
            kv_bytes_per_token: a.kv_bytes_per_token(kv) * replication,
            state_bytes_per_seq: a.linear_state_bytes(state_dtype)
                + a.sliding_kv_bytes_per_token(kv) * replication * a.sliding_window as f64,
            dense_s_per_token: (body_flops - expert_flops_per_token) / matmul_rate,
            expert_s_per_token: expert_flops_per_token / (matmul_rate * c.grouped_gemm_rel),
            lm_head_s_per_seq: 2.0 * a.lm_head_params() as f64 / matmul_rate,
            attn_s_per_pair: a.attn_flops_per_token_pair() / (c.attention_flops_eff_s * tp),
            attn_s_per_decode_pair_extra: (a.attn_flops_per_decode_pair() - a.attn_flops_per_token_pair())
                / (c.attention_flops_eff_s * tp),
            exposed: 1.0 - c.mem_compute_overlap,
            comm: Comm::new(p),
            draft: p.speculative().map(|s| DraftModel::new(p, s)),
            large: None,
        };
        if large.is_some() {
            m.kv_bytes_per_token /= micro;
            m.attn_s_per_pair /= micro;
            m.attn_s_per_decode_pair_extra /= micro;
            m.comm = Comm::default();
            m.large = large;
        }
        m
    }

    #[inline]
    fn experts(&self, n_tokens: u32) -> f64 {
        let b = n_tokens as usize;
        let compute = || self.arch_for_large_b.experts_touched_spread(n_tokens as f64, self.expert_spread);
        if b >= self.table_len {
            return compute();
        }
        let mut table = self.experts_touched.borrow_mut();
        if b >= table.len() {
            let len = (b + 1).max(2 * table.len()).min(self.table_len);
            table.resize(len, f64::NAN);
        }
        if table[b].is_nan() {
            table[b] = compute();
        }
        table[b]
    }

    /// Weight bytes a step of `n_tokens` tokens reads.
    #[inline]
    pub fn weight_bytes(&self, n_tokens: u32) -> f64 {
        self.dense_weight_bytes + self.experts(n_tokens) * self.expert_bytes_all_layers
    }

    /// The step's duration and its parts.
    #[inline]
    pub fn parts(&self, b: &BatchShape) -> StepParts {
        let prefill = b.max_chunk > 1;
        match &self.large {
            Some(l) if prefill && (l.ranks > 1 || l.stages > 1) => self.parts_prefill_whole(l, b),
            _ => self.parts_with(
                &self.fixed(b.n_seqs, b.n_tokens),
                b.kv_read_tokens,
                b.attn_pairs,
                b.decode_pairs,
                prefill,
            ),
        }
    }

    /// A step with a prompt chunk under attention DP or pipeline stages: the chunk is one
    /// sequence's, and a sequence is never split. Its micro-batch carries the whole chunk through
    /// every stage (the engines build micro-batches of whole requests: vLLM's scheduler schedules a
    /// request's tokens in one batch and none of them again while that batch is in flight,
    /// vllm/v1/core/sched/scheduler.py `schedule`, "PP>1 and we have already scheduled all prompt
    /// tokens but they are not finished yet"; SGLang's pipeline loop runs one ScheduleBatch of
    /// whole requests per micro-batch, `event_loop_pp` (python/sglang/srt/managers/scheduler.py,
    /// scheduler_pp_mixin.py in later releases, one `running_mbs[mb_id]` per micro-batch); both read
    /// in the PyPI sources of vLLM 0.8.5 and SGLang 0.5.10), and inside it
    /// the chunk's sequence sits on one attention DP rank, which computes the whole chunk (its dense
    /// layers, attention and KV reads over that rank's tp / N GPUs) while every rank waits for it at
    /// the MoE layers. The busiest micro-batch and rank take the larger of that chunk and the
    /// balanced share: one prompt among decodes costs its whole chunk on one rank of one
    /// micro-batch; N x P prompts at once, one per rank and micro-batch, cost one chunk each in
    /// parallel. The balanced split alone gave a lone prompt 1 / N of its chunk under attention DP
    /// and 1 / P under P stages: its prefill ran N (P) times too fast (issue 25's audit: TTFT 0.116 s
    /// at --pp 1, 0.061 s at --pp 4 for one 2048-token prompt).
    #[cold]
    fn parts_prefill_whole(&self, l: &LargeStep, b: &BatchShape) -> StepParts {
        let (chunk, start) = (b.max_chunk, b.max_chunk_start);
        let (n, p) = (l.ranks, l.stages);
        // The micro-batch with the chunk: at least the chunk, at least its balanced share of the
        // step; its busiest rank: at least the chunk, at least the rank's share of the micro-batch.
        let micro = chunk.max(b.n_tokens.div_ceil(p));
        let busiest = chunk.max(micro.div_ceil(n));
        let f = self.fixed_large(l, b.n_seqs, b.n_tokens, Some((busiest, micro)));
        // The balanced formula charges pairs x (rate over all tp GPUs) / P, which is each rank's
        // 1 / N share over its tp / N GPUs of one micro-batch's 1 / P share of the step; a rank
        // with the chunk alone counts its pairs and reads N x P times.
        let scale = n as u64 * p as u64;
        let attn_pairs = (chunk_pairs(start, chunk) * scale as f64).max(b.attn_pairs);
        let kv_read_tokens = ((start as u64 + chunk as u64) * scale).max(b.kv_read_tokens);
        self.parts_with(&f, kv_read_tokens, attn_pairs, b.decode_pairs, true)
    }

    /// The parts a step's sequence and token counts decide. A decode stretch keeps both, so it
    /// computes these once (sim/fastforward.rs); the weights read, the collectives and the MoE
    /// table lookup were most of a step time's cost.
    #[inline]
    pub fn fixed(&self, n_seqs: u32, n_tokens: u32) -> FixedParts {
        if n_tokens == 0 {
            return FixedParts { empty: true, ..FixedParts::default() };
        }
        if let Some(l) = &self.large {
            return self.fixed_large(l, n_seqs, n_tokens, None);
        }
        let t = n_tokens as f64;
        FixedParts {
            empty: false,
            weights_s: self.weight_bytes(n_tokens) * self.inv_bw,
            state_s: n_seqs as f64 * self.state_bytes_per_seq * self.inv_bw,
            dense_matmul_s: t * self.dense_s_per_token,
            expert_matmul_s: t * self.expert_s_per_token,
            lm_head_s: n_seqs as f64 * self.lm_head_s_per_seq,
            communication_s: self.comm.step_s(n_tokens, n_seqs),
            all_to_all_s: 0.0,
            pipeline_s: 0.0,
            per_seq_s: self.per_seq_s * n_seqs as f64,
            context_excess: 0.0,
        }
    }

    /// [`StepModel::fixed`] of a large deployment (sim/step_large.rs says what each part stands for):
    /// the busiest attention DP rank's share of one pipeline micro-batch, the MoE layers over every
    /// rank's tokens. `whole_chunk` replaces the busiest rank's balanced share of the tokens and
    /// its micro-batch's (a prompt chunk in one micro-batch, on one rank).
    #[cold]
    fn fixed_large(&self, l: &LargeStep, n_seqs: u32, n_tokens: u32, whole_chunk: Option<(u32, u32)>) -> FixedParts {
        let (seqs, tokens, moe_tokens) = l.shares(n_seqs, n_tokens);
        let (tokens, moe_tokens) = whole_chunk.unwrap_or((tokens, moe_tokens));
        let ranks = l.ranks as f64;
        // The busiest rank's sequences over its balanced share (a step with a whole prompt chunk
        // charges its chunk's own reads: parts_prefill_whole).
        let context_excess = match whole_chunk {
            None if n_seqs > 0 => (seqs as f64 * ranks * l.stages as f64 / n_seqs as f64 - 1.0).max(0.0),
            _ => 0.0,
        };
        // The layers' work, scaled to the largest of unequal stages (1 for even ones).
        let stage = l.stage_factor(n_seqs);
        FixedParts {
            context_excess: (1.0 + context_excess) * stage - 1.0,
            empty: false,
            weights_s: stage
                * (l.dense_weight_bytes + self.experts(moe_tokens) * self.expert_bytes_all_layers)
                * self.inv_bw,
            state_s: stage * seqs as f64 * ranks * self.state_bytes_per_seq * self.inv_bw,
            dense_matmul_s: stage * tokens as f64 * ranks * self.dense_s_per_token,
            expert_matmul_s: stage * moe_tokens as f64 * self.expert_s_per_token,
            lm_head_s: seqs as f64 * ranks * self.lm_head_s_per_seq,
            communication_s: stage * l.rank_comm_s(seqs, tokens),
            all_to_all_s: stage * l.all_to_all_s(moe_tokens),
            pipeline_s: l.pipeline_s(tokens),
            per_seq_s: self.per_seq_s * n_seqs.div_ceil(l.ranks) as f64,
        }
    }

    /// The whole step from its fixed parts and the context it reads, `prefill` where it computes a
    /// prompt chunk (it pays Coefficients::prefill_step_overhead_s): the one place the formula is
    /// written.
    #[inline]
    pub fn parts_with(
        &self,
        f: &FixedParts,
        kv_read_tokens: u64,
        attn_pairs: f64,
        decode_pairs: f64,
        prefill: bool,
    ) -> StepParts {
        if f.empty {
            return StepParts::default();
        }
        let prefill_overhead_s = if prefill { self.prefill_overhead_s } else { 0.0 };
        let busiest = 1.0 + f.context_excess;
        let kv_s = kv_read_tokens as f64 * self.kv_bytes_per_token * self.inv_bw * busiest;
        let attention_s =
            (attn_pairs * self.attn_s_per_pair + decode_pairs * self.attn_s_per_decode_pair_extra) * busiest;
        let memory_s = f.weights_s + kv_s + f.state_s;
        let compute_s = f.dense_matmul_s + f.expert_matmul_s + f.lm_head_s + attention_s;
        let total_s = self.overhead_s
            + f.per_seq_s
            + memory_s.max(compute_s)
            + self.exposed * memory_s.min(compute_s)
            + f.communication_s
            + f.all_to_all_s
            + f.pipeline_s
            // Last: a step without it sums as it did before the prefill cost was modelled.
            + prefill_overhead_s;
        StepParts {
            weights_s: f.weights_s,
            kv_s,
            state_s: f.state_s,
            dense_matmul_s: f.dense_matmul_s,
            expert_matmul_s: f.expert_matmul_s,
            lm_head_s: f.lm_head_s,
            attention_s,
            communication_s: f.communication_s,
            all_to_all_s: f.all_to_all_s,
            pipeline_s: f.pipeline_s,
            overhead_s: self.overhead_s,
            prefill_overhead_s,
            per_seq_s: f.per_seq_s,
            memory_s,
            compute_s,
            exposed: self.exposed,
            draft_s: 0.0,
            total_s,
        }
    }

    /// A speculative step: the target's step over `b` (its verification tokens included) plus the
    /// draft's part for the drafting sequences `d` (0 without speculation).
    #[inline]
    pub fn parts_spec(&self, b: &BatchShape, d: &DraftShape) -> StepParts {
        let mut s = self.parts(b);
        if let (Some(m), false) = (&self.draft, s.total_s == 0.0) {
            s.draft_s = m.draft_s(d);
            s.total_s += s.draft_s;
        }
        s
    }

    /// [`StepModel::step_ns`] of a speculative step.
    #[inline]
    pub fn step_ns_spec(&self, b: &BatchShape, d: &DraftShape) -> u64 {
        round_ns(self.parts_spec(b, d).total_s * 1e9).max(1)
    }

    /// [`StepModel::step_ns`] of a step whose fixed parts are `f`.
    #[inline]
    pub fn step_ns_with(&self, f: &FixedParts, kv_read_tokens: u64, attn_pairs: f64) -> u64 {
        // A decode stretch: every pair is a decoding token's.
        round_ns(self.parts_with(f, kv_read_tokens, attn_pairs, attn_pairs, false).total_s * 1e9).max(1)
    }

    /// Step duration in seconds.
    #[inline]
    pub fn step_s(&self, b: &BatchShape) -> f64 {
        self.parts(b).total_s
    }

    /// Step duration in integer nanoseconds (at least 1 ns so time always advances).
    #[inline]
    pub fn step_ns(&self, b: &BatchShape) -> u64 {
        round_ns(self.step_s(b) * 1e9).max(1)
    }
}

/// `x.round() as u64` (half away from zero; negative and NaN give 0) without the libm call `round`
/// compiles to on the baseline x86-64 target (4% of a validation run in perf): the truncation is
/// exact, and so is the fraction it leaves.
#[inline]
fn round_ns(x: f64) -> u64 {
    let t = x as u64;
    t.saturating_add((x - t as f64 >= 0.5) as u64)
}

#[cfg(test)]
mod tests {
    use super::round_ns;

    #[test]
    fn round_ns_is_round() {
        let mut xs = vec![
            0.0,
            0.5,
            1.5,
            2.5,
            0.49999999999999994,
            1e9 + 0.5,
            4503599627370495.5,
            1e18,
            1e30,
            f64::INFINITY,
            -0.4,
            -3.0,
        ];
        xs.extend((0..10_000).map(|i| i as f64 * 12_345.678_9 + 0.5));
        xs.extend((0..10_000).map(|i| (i as f64).powf(3.3) / 7.0));
        for x in xs {
            assert_eq!(round_ns(x), x.round() as u64, "{x}");
        }
        assert_eq!(round_ns(f64::NAN), 0);
    }
}
