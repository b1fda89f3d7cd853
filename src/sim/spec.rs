//! Speculative decoding in the step loop (issue 25): each decode step, every decoding sequence
//! verifies the K tokens its draft proposed (K + 1 query tokens through the target model, its KV
//! read once) and emits the accepted run plus the target's own token.
//!
//! - KV: the drafted tokens' slots are allocated before the step, as vLLM's scheduler does
//!   (vllm/v1/core/sched/scheduler.py `schedule`: `kv_cache_manager.allocate_slots(request,
//!   num_new_tokens, num_lookahead_tokens=self.num_lookahead_tokens)`, with `num_lookahead_tokens`
//!   = `num_speculative_tokens` when speculation is on, 0 for a request's first chunk;
//!   ../shared/FACTS-hardware-engines.md, vLLM V1 scheduler notes). Where the free blocks cannot hold all K, the
//!   sequence drafts fewer this step (vLLM would preempt instead; the lookahead is at most one block).
//! - Token budget (vLLM): a decode's drafts count against max_num_batched_tokens. vLLM's scheduler
//!   gives a running request num_new_tokens = num_tokens_with_spec - num_computed_tokens (1 + K for
//!   a decode), cut to the budget left, and trims its drafts to what was scheduled
//!   (vllm/v1/core/sched/scheduler.py `schedule`: `num_new_tokens = min(num_new_tokens,
//!   token_budget)`, then `num_scheduled_spec_tokens = num_new_tokens +
//!   request.num_computed_tokens - request.num_tokens` and
//!   `del request.spec_token_ids[num_scheduled_spec_tokens:]`;
//!   `token_budget -= num_new_tokens`; read in vLLM 0.8.5's PyPI source, the running-request loop
//!   of `Scheduler.schedule`). So the running decodes, in order, take 1 + K
//!   until the budget runs short, the one at the edge fewer drafts, those beyond it no step at all,
//!   and waiting prompts get what is left. `schedule_vllm` charges each decode's drafts to its
//!   budget and records them (`SpecState::granted`); `spec_verify` drafts that many. The verification tokens are added to the step's shape
//!   after the scheduler built it. SGLang and TensorRT-LLM: the drafts are not charged to a budget
//!   here (SGLang's decode batches are not bound by its prefill budget).
//!   Before this, vLLM's drafts were charged to no budget: a budget of 2 tokens with K = 3 ran
//!   steps of 4 tokens per sequence.
//! - Acceptance: deterministic, not drawn. Each sequence keeps an accumulator of the expected tokens
//!   per step, E = 1 + sum_{i<=K} prod_{j<=i} a_j (started at 1/2), and emits its integer part each
//!   step: after s steps it has emitted round(s x E) tokens, between 1 and K + 1 a step. A seeded
//!   stream of acceptance draws would give the same mean, but would make a run's TPOT a noisy
//!   function of the acceptance rate, which `calibrate --runs --spec-method` searches over in one
//!   dimension; the accumulator keeps TPOT monotone in the rate and the run a pure function of its
//!   inputs (it draws nothing, so the seed's other streams are untouched).
//! - A sequence never emits beyond its output length: the emitted run is cut at the last token.
//! - Token gaps: the tokens of one step reach the client together (one streamed chunk), so the
//!   pooled ITL counts one gap per sequence and step, as vLLM's benchmark counts chunks. With a
//!   stream interval above 1 a chunk goes out when the step's tokens carry the output across
//!   1 + m x the interval, or finish it (sim/engine.rs `sent_ns`).
//! - The decode pool and the decode fast-forward (sim/pool.rs, sim/fastforward.rs) are off for
//!   speculative runs (decided once, at construction); plain runs keep them.
//!
//! The draft's cost is [`DraftModel::draft_s`], the step model's `draft_s` part (sim/step.rs).

use super::engine::Engine;
use super::step::BatchShape;
use crate::catalog::gpu::Collectives;
use crate::profile::spec::NGRAM_S_PER_SEQ;
use crate::profile::EngineKind;
use crate::profile::{Profile, SpecMethod, Speculative};
use crate::units::Dtype;

/// The sequences a step drafts for, the context their draft passes read, and the prompt tokens the
/// draft runs over besides.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DraftShape {
    /// Decoding sequences that drafted this step.
    pub seqs: u32,
    /// Their contexts summed (tokens of KV each draft pass attends).
    pub ctx_tokens: u64,
    /// Prompt tokens the step computes, which the draft model runs over too ([`add_draft_prompt`]).
    pub prompt_tokens: u64,
    /// Their (query, key) pairs in one attention layer: n x start + n(n + 1)/2 per chunk.
    pub prompt_pairs: f64,
}

/// A prompt chunk of `n` tokens from position `start`, which the draft model also runs over (one
/// pass, after the target's): the draft keeps its own KV of the prompt and starts from the target's
/// hidden states at every position.
/// - SGLang (0.5.9 `speculative/eagle_worker.py` `forward_batch_generation`): an extend batch runs
///   `forward_target_extend`, then `forward_draft_extend` over the same batch with the target's
///   hidden states.
/// - vLLM (0.12.0 `v1/worker/gpu_model_runner.py` `propose_draft_token_ids`, EAGLE and MTP): with
///   no drafts verified in the step, the drafter's input is every scheduled token,
///   `input_ids[:num_scheduled_tokens]`, prompt chunks included.
/// - TensorRT-LLM's MTP is taken to do the same for its context requests (UNVERIFIED: not read).
///
/// Before this, a prompt chunk cost the draft nothing: one MTP layer over the prompt is about one
/// layer in the model's sixty-one for DeepSeek-R1, plus the pass's own fixed time.
#[inline]
pub fn add_draft_prompt(draft: &mut DraftShape, start: u32, n: u32) {
    let (s0, nn) = (start as f64, n as f64);
    draft.prompt_tokens += n as u64;
    draft.prompt_pairs += nn * s0 + nn * (nn + 1.0) / 2.0;
}

/// A scheduled entry of `n` tokens is a decode: one token after the request's first, its prompt
/// done (the test `spec_verify` and vLLM's budget share).
#[inline]
pub(super) fn is_decoding(r: &super::engine::Live, n: u32) -> bool {
    n == 1 && r.generated > 0 && r.computed + 1 == r.num_tokens
}

/// One decoding sequence's verification of `d` drafted tokens, added to a step's shape that already
/// holds its decode token (`BatchShape::add_chunk(start, 1)`), and its draft passes added to `draft`:
/// the one place the speculative step's shape is built, for the simulator (`spec_verify`) and
/// `capsim explain` alike. The d tokens read their own KV slots and attend to the context and to
/// the tokens before them; they leave `max_chunk` alone (a verification is no prompt chunk: the
/// step stays a decode step, without the prefill's fixed cost, and under attention DP or pipeline
/// stages keeps the decode's balanced split) and `decode_pairs` too. explain built the sequence as
/// one (1 + K)-token chunk, which made its step a prefill step (issue 25's audit: DeepSeek-R1 on
/// 8 B200s, MTP K = 3, one decode at context 1100: a 69.92 ms step against the simulator's 9.2).
#[inline]
pub fn add_verification(shape: &mut BatchShape, draft: &mut DraftShape, start: u32, d: u32) {
    let (s0, dd) = (start as f64, d as f64);
    shape.n_tokens += d;
    shape.kv_read_tokens += d as u64;
    shape.attn_pairs += dd * s0 + ((dd + 1.0) * (dd + 2.0) / 2.0 - 1.0);
    draft.seqs += 1;
    draft.ctx_tokens += start as u64 + 1;
}

/// The per-step speculation state of one engine.
#[derive(Debug, Clone)]
pub(super) struct SpecState {
    pub(super) k: u32,
    /// Expected tokens per step when d tokens were drafted, d = 0..=K.
    expected: Vec<f64>,
    /// Each slot's accumulator of expected tokens (fractional part kept between steps).
    acc: Vec<f64>,
    /// (slot, tokens drafted) of this step's decoding sequences.
    drafted: Vec<(u32, u32)>,
    /// vLLM: the drafts its scheduler granted each running entry it scheduled, in the order of
    /// `Engine::scheduled` (0 for an entry that is no decode); the scheduler charges them to its
    /// token budget and `spec_verify` drafts that many. Empty for the other engines (K each).
    pub(super) granted: Vec<u32>,
    pub(super) draft: DraftShape,
}

impl SpecState {
    pub(super) fn new(s: &Speculative) -> SpecState {
        SpecState {
            k: s.tokens,
            expected: (0..=s.tokens).map(|d| s.expected_tokens(d)).collect(),
            acc: Vec::new(),
            drafted: Vec::new(),
            granted: Vec::new(),
            draft: DraftShape::default(),
        }
    }
}

impl Engine<'_> {
    /// After the scheduler built the step: every decoding sequence drafts K tokens, their KV slots
    /// are allocated and their verification added to the shape.
    pub(super) fn spec_verify(&mut self, shape: &mut BatchShape) {
        let Some(mut s) = self.spec.take() else { return };
        s.drafted.clear();
        s.draft = DraftShape::default();
        if s.acc.len() < self.reqs.len() {
            s.acc.resize(self.reqs.len(), 0.5);
        }
        // vLLM: the drafts its scheduler granted (the running entries come first in `scheduled`);
        // the other engines draft K.
        let vllm = self.p.engine.kind == EngineKind::Vllm;
        for j in 0..self.scheduled.len() {
            let (idx, n) = self.scheduled[j];
            let r = &self.reqs[idx as usize];
            let decoding = is_decoding(r, n);
            let granted = if vllm { s.granted.get(j).copied().unwrap_or(0) } else { s.k };
            if !decoding {
                // A prompt chunk (or a recomputed one): the draft model runs over it too.
                add_draft_prompt(&mut s.draft, r.computed, n);
                continue;
            }
            let start = r.computed;
            let mut d = granted;
            while d > 0 && self.extra_blocks(r, start + 1 + d) > self.free_blocks {
                d -= 1;
            }
            if r.generated == 1 {
                // Its first decode step: a new request in this slot.
                s.acc[idx as usize] = 0.5;
            }
            if d > 0 {
                self.alloc(idx, start + 1 + d);
            }
            add_verification(shape, &mut s.draft, start, d);
            s.drafted.push((idx, d));
        }
        self.spec = Some(s);
    }

    /// After the step loop gave every decoding sequence its one token: the accepted drafts besides,
    /// cut at the output length. Adds them to `decode_tokens`; true when a sequence finished on them.
    pub(super) fn spec_emit(&mut self, decode_tokens: &mut u64, itl_gaps: &mut super::GapHistogram) -> bool {
        let Some(mut s) = self.spec.take() else { return false };
        let stream = self.p.engine.stream_interval;
        let mut finished = false;
        for &(idx, d) in &s.drafted {
            let r = &mut self.reqs[idx as usize];
            if r.generated >= r.output {
                continue;
            }
            let a = &mut s.acc[idx as usize];
            *a += s.expected[d as usize];
            let e = a.floor();
            *a -= e;
            let extra = (e as u32).saturating_sub(1).min(r.output - r.generated);
            let before = r.generated;
            r.generated += extra;
            // The step's chunk, when its accepted drafts carried the output across a stream boundary
            // or to its end and the step's own token had not sent one.
            if stream > 1
                && extra > 0
                && r.sent_ns != r.last_token_ns
                && ((before - 1) / stream != (r.generated - 1) / stream || r.generated == r.output)
            {
                if r.measured {
                    itl_gaps.add(r.last_token_ns - r.sent_ns);
                }
                r.sent_ns = r.last_token_ns;
            }
            r.computed += extra;
            r.num_tokens += extra;
            *decode_tokens += extra as u64;
            if r.generated == r.output {
                // The step loop had made room for one more token.
                r.num_tokens -= 1;
                finished = true;
            }
        }
        self.spec = Some(s);
        finished
    }
}

/// The draft's cost per step, folded from the architecture's byte and FLOP counts and the profile's
/// efficiencies (the same coefficients as the target's step, sim/step.rs).
///
/// - MTP: K sequential passes of the model's MTP module over the drafting sequences, one token each.
///   DeepSeek-V3/R1 (config.json `num_nextn_predict_layers: 1`; models/configs/deepseek-v3.json,
///   ../shared/corpus/configs/deepseek-ai__DeepSeek-R1.json) has one such module: a decoder layer of
///   the model's own kind (MLA attention and an MoE MLP: the routed experts a batch touches, the
///   shared expert, the router), the `eh_proj` projection of [embedding; hidden] (2h x h), and the
///   shared head (the LM head, read and computed again each pass). vLLM, SGLang and TensorRT-LLM
///   reuse the one module for K > 1 drafts. The first pass of vLLM's proposer runs over the
///   verified tokens (up to K + 1 per sequence); one token per sequence per pass is taken.
/// - EAGLE: K passes of a one-layer head: a dense decoder layer of the target's attention and its
///   dense MLP width (`intermediate_size`), the fc of [embedding; hidden] (2h x h), the LM head.
/// - ngram: no pass; [`NGRAM_S_PER_SEQ`] of host time per drafting sequence (an assumption).
/// - MTP and EAGLE also run one pass over a step's prompt tokens ([`add_draft_prompt`],
///   [`DraftModel::prompt_pass_s`]).
///
/// Each pass: the layer's share of the step overhead (step_overhead / layers), max(memory, compute) +
/// (1 - overlap) x min, and the layer's collectives (two all-reduces, or an all-reduce and the MoE
/// dispatch and combine under expert parallelism, and the logits' all-gather).
#[derive(Debug, Clone)]
pub struct DraftModel {
    method: SpecMethod,
    passes: f64,
    overhead_s: f64,
    inv_bw: f64,
    dense_bytes: f64,
    expert_bytes: f64,
    arch: crate::catalog::ModelArch,
    expert_spread: f64,
    kv_bytes_per_ctx: f64,
    dense_s_per_token: f64,
    expert_s_per_token: f64,
    lm_head_s_per_seq: f64,
    attn_s_per_ctx: f64,
    exposed: f64,
    coll: Option<Collectives>,
    all_reduces: f64,
    all_to_alls: f64,
    token_bytes: f64,
    a2a_bytes_per_token: f64,
    /// Fixed time of each all-to-all between attention-DP ranks (the target step's: sim/step_large.rs).
    exchange_latency_s: f64,
    logits_bytes_per_seq: f64,
}

impl DraftModel {
    pub fn new(p: &Profile, s: &Speculative) -> DraftModel {
        let a = &p.arch;
        let c = &p.coefficients;
        let tp = p.tensor_parallel;
        let w = p.file.model.weight_dtype;
        let h = a.hidden;
        let moe = if s.method == SpecMethod::Mtp { a.moe.as_ref() } else { None };
        let attn = a.softmax_attn_params_per_layer();
        let mlp_always = match moe {
            Some(m) => 3 * h * m.shared_intermediate + h * m.n_experts as u64 + if m.shared_gate { h } else { 0 },
            None => 3 * h * a.intermediate,
        };
        let proj = 2 * h * h;
        let lm = a.lm_head_params();
        let matmul_rate = c.matmul_flops_eff_s * tp as f64;
        let attn_layers = a.n_full_attn_layers.max(1) as f64;
        let k_routed = moe.map_or(0.0, |m| m.n_experts_per_token as f64);
        let token_bytes = h as f64 * Dtype::Bf16.bytes();
        let ep = moe.is_some() && p.expert_parallel;
        DraftModel {
            method: s.method,
            passes: s.tokens as f64,
            overhead_s: c.step_overhead_s / a.n_layers.max(1) as f64,
            inv_bw: 1.0 / (c.bandwidth_eff_bytes_s * tp as f64),
            dense_bytes: (attn + mlp_always + proj + lm) as f64 * w.bytes(),
            expert_bytes: if moe.is_some() { a.expert_params() as f64 * a.expert_dtype(w).bytes() } else { 0.0 },
            arch: a.clone(),
            expert_spread: c.expert_spread,
            // The KV copies of the layout, as the target step counts them (sim/step.rs): under
            // attention DP each rank keeps its requests' KV over its own tp / N GPUs.
            kv_bytes_per_ctx: a.kv_bytes_per_token(p.file.model.kv_dtype) / attn_layers
                * p.parallel.kv_replication(a, tp),
            dense_s_per_token: 2.0 * (attn + mlp_always + proj) as f64 / matmul_rate,
            expert_s_per_token: 2.0 * k_routed * a.expert_params() as f64 / (matmul_rate * c.grouped_gemm_rel),
            lm_head_s_per_seq: 2.0 * lm as f64 / matmul_rate,
            attn_s_per_ctx: a.attn_flops_per_token_pair() / attn_layers / (c.attention_flops_eff_s * tp as f64),
            exposed: 1.0 - c.mem_compute_overlap,
            coll: (tp > 1).then(|| p.gpu.collectives(tp)),
            all_reduces: if ep { 1.0 } else { 2.0 },
            all_to_alls: if ep { 2.0 } else { 0.0 },
            token_bytes,
            a2a_bytes_per_token: k_routed * token_bytes / tp as f64,
            exchange_latency_s: p.rank_exchange_latency_s(),
            logits_bytes_per_seq: a.vocab as f64 * Dtype::Bf16.bytes(),
        }
    }

    /// One draft pass over `d.seqs` sequences, one token each (s).
    pub fn pass_s(&self, d: &DraftShape) -> f64 {
        if d.seqs == 0 {
            return 0.0;
        }
        let kv_bytes = self.kv_bytes_per_ctx * d.ctx_tokens as f64;
        self.pass(d.seqs as f64, kv_bytes, d.ctx_tokens as f64 * self.attn_s_per_ctx, true)
    }

    /// The draft's one pass over the step's prompt tokens ([`add_draft_prompt`]) (s): the layer's
    /// weights and the experts those tokens touch read once, their FLOPs, their attention over the
    /// prompt so far, the layer's collectives over them. The LM head is left out (it runs for the last
    /// position of a finished prompt only).
    pub fn prompt_pass_s(&self, d: &DraftShape) -> f64 {
        if d.prompt_tokens == 0 {
            return 0.0;
        }
        self.pass(d.prompt_tokens as f64, 0.0, d.prompt_pairs * self.attn_s_per_ctx, false)
    }

    /// A pass of the draft layer over `n` tokens (s): its weights and the experts the tokens touch
    /// read once with `kv_bytes` of KV, their FLOPs and `attn_s` of attention, the layer's
    /// collectives, and the LM head with its logits' all-gather for each token when `lm_head`.
    fn pass(&self, n: f64, kv_bytes: f64, attn_s: f64, lm_head: bool) -> f64 {
        let experts =
            if self.expert_bytes > 0.0 { self.arch.experts_touched_spread(n, self.expert_spread) } else { 0.0 };
        let memory = (self.dense_bytes + experts * self.expert_bytes + kv_bytes) * self.inv_bw;
        let head = if lm_head { self.lm_head_s_per_seq } else { 0.0 };
        let compute = n * (self.dense_s_per_token + self.expert_s_per_token + head) + attn_s;
        let comm = self.coll.as_ref().map_or(0.0, |c| {
            self.all_reduces * c.all_reduce_s(n * self.token_bytes)
                + self.all_to_alls * (c.all_to_all_s(n * self.a2a_bytes_per_token) + self.exchange_latency_s)
                + if lm_head { c.all_gather_s(n * self.logits_bytes_per_seq) } else { 0.0 }
        });
        self.overhead_s + memory.max(compute) + self.exposed * memory.min(compute) + comm
    }

    /// The draft's time in a step whose drafting sequences and prompt tokens are `d` (s).
    pub fn draft_s(&self, d: &DraftShape) -> f64 {
        match self.method {
            SpecMethod::Ngram => d.seqs as f64 * NGRAM_S_PER_SEQ,
            SpecMethod::Mtp | SpecMethod::Eagle => self.passes * self.pass_s(d) + self.prompt_pass_s(d),
        }
    }
}
