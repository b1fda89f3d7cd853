//! The engine state every policy shares: requests, the running and waiting queues, KV blocks. Each
//! engine's scheduling policy lives in its own file (vllm.rs, sglang.rs, trtllm.rs) as one method of
//! [`Engine`] called once per step; the event loop (run.rs) does not know which one runs.
//!
//! A request of P prompt tokens and O output tokens: `num_tokens` starts at P; each step schedules up
//! to num_tokens - computed tokens; the step that brings computed to num_tokens samples a token (the
//! first token ends the prefill); a request resumed after preemption re-prefills prompt + generated.

use super::pool::DecodePool;
use super::prefix::PrefixCache;
use super::step::{BatchShape, StepModel};
use super::RequestRecord;
use crate::profile::Profile;
use crate::units::SimTime;
use std::collections::VecDeque;

pub(super) const NONE: u64 = u64::MAX;

#[derive(Debug, Clone)]
pub(super) struct Live {
    pub(super) id: u32,
    pub(super) client: u32,
    pub(super) class: u16,
    pub(super) arrival_ns: u64,
    pub(super) enqueued_ns: u64,
    pub(super) prompt: u32,
    pub(super) output: u32,
    pub(super) num_tokens: u32,
    pub(super) computed: u32,
    pub(super) generated: u32,
    /// KV blocks held for computed tokens.
    pub(super) blocks: u32,
    /// Whether the per-sequence reserved blocks (linear state, sliding window) are held.
    pub(super) reserved: bool,
    pub(super) first_sched_ns: u64,
    pub(super) first_token_ns: u64,
    /// When its latest token was produced.
    pub(super) last_token_ns: u64,
    /// When the client last received a streamed chunk (the first token alone, then a chunk each time
    /// the output crosses 1 + m x the engine's stream interval, and the last token): the pooled ITL is
    /// the gaps between chunks, as a benchmark client times them. Kept only where the interval is
    /// above 1: with 1 every token is a chunk, and `last_token_ns` gives the gaps.
    pub(super) sent_ns: u64,
    /// Inside the workload's measured window: its token gaps go into the pooled ITL.
    pub(super) measured: bool,
    pub(super) preemptions: u32,
    pub(super) admitted_seq: u64,
    /// Prefix caching: the chain hashes of the sequence's full blocks (empty without a cache or
    /// shared content), the block ids it holds, how many of them are registered in the cache, and the
    /// prompt tokens its first admission found cached.
    pub(super) hashes: Vec<u64>,
    pub(super) table: Vec<u32>,
    pub(super) registered: u32,
    /// Some block of `table[..registered]` is not cached under its hash (its content was cached in
    /// another block first).
    pub(super) uncached: bool,
    pub(super) cached_tokens: u32,
    /// The cached prefix found at the last admission attempt (kept while it waits); before the
    /// first, the blocks the slot's previous request held, the guess [`PrefixCache::lookup`]
    /// checks first (a conversation's next turn often lands in its previous turn's slot).
    pub(super) probe: Vec<u32>,
    /// The decode pool's tick its fields are current at, while it is a member (sim/pool.rs); NONE
    /// otherwise.
    pub(super) pool_tick: u64,
    /// Its index in the running batch while the decode pool is active (sim/pool.rs).
    pub(super) run_pos: u32,
    /// TensorRT-LLM attention DP with balance: the rank it was sent to (sim/trtllm.rs).
    pub(super) adp_rank: u8,
}

impl Live {
    /// A slot before its first request.
    pub(super) const EMPTY: Live = Live {
        id: 0,
        client: 0,
        class: 0,
        arrival_ns: 0,
        enqueued_ns: 0,
        prompt: 0,
        output: 0,
        num_tokens: 0,
        computed: 0,
        generated: 0,
        blocks: 0,
        reserved: false,
        first_sched_ns: NONE,
        first_token_ns: NONE,
        last_token_ns: NONE,
        sent_ns: NONE,
        measured: false,
        preemptions: 0,
        admitted_seq: 0,
        hashes: Vec::new(),
        table: Vec::new(),
        registered: 0,
        uncached: false,
        cached_tokens: 0,
        probe: Vec::new(),
        pool_tick: NONE,
        run_pos: 0,
        adp_rank: 0,
    };

    /// Make this slot a new request of `prompt` + `output` tokens, in place: building the struct and
    /// moving it into the slot copied its 184 bytes three times per request (memcpy, 6% of the
    /// Poisson benchmark). Every field is named, so a new one cannot be forgotten; the prefix
    /// cache's lists keep their capacity, and `probe` the previous request's blocks as a guess.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start(
        &mut self,
        id: u32,
        client: u32,
        class: u16,
        arrival_ns: u64,
        enqueued_ns: u64,
        prompt: u32,
        output: u32,
        measured: bool,
    ) {
        let Live {
            id: r_id,
            client: r_client,
            class: r_class,
            arrival_ns: r_arrival,
            enqueued_ns: r_enqueued,
            prompt: r_prompt,
            output: r_output,
            num_tokens,
            computed,
            generated,
            blocks,
            reserved,
            first_sched_ns,
            first_token_ns,
            last_token_ns,
            sent_ns,
            measured: r_measured,
            preemptions,
            admitted_seq,
            hashes,
            table,
            registered,
            uncached,
            cached_tokens,
            probe: _,
            pool_tick,
            run_pos,
            adp_rank,
        } = self;
        (*r_id, *r_client, *r_class, *r_arrival, *r_enqueued) = (id, client, class, arrival_ns, enqueued_ns);
        (*r_prompt, *r_output, *num_tokens, *r_measured) = (prompt, output, prompt, measured);
        (*computed, *generated, *blocks, *reserved) = (0, 0, 0, false);
        (*first_sched_ns, *first_token_ns, *last_token_ns, *sent_ns) = (NONE, NONE, NONE, NONE);
        (*preemptions, *admitted_seq, *registered, *cached_tokens, *uncached) = (0, 0, 0, 0, false);
        hashes.clear();
        table.clear();
        (*pool_tick, *run_pos, *adp_rank) = (NONE, 0, 0);
    }

    /// What the run reports of it, finished at `now`.
    pub(super) fn record(&self, now: u64) -> RequestRecord {
        RequestRecord {
            id: self.id,
            class: self.class,
            input_tokens: self.prompt,
            output_tokens: self.output,
            arrival: SimTime(self.arrival_ns),
            enqueued: SimTime(self.enqueued_ns),
            first_scheduled: SimTime(self.first_sched_ns),
            first_token: SimTime(self.first_token_ns),
            finish: SimTime(now),
            preemptions: self.preemptions,
            cached_tokens: self.cached_tokens,
        }
    }
}

pub(super) struct Engine<'a> {
    pub(super) p: &'a Profile,
    pub(super) model: StepModel,
    pub(super) reqs: Vec<Live>,
    pub(super) free_slots: Vec<u32>,
    pub(super) running: Vec<u32>,
    pub(super) waiting: VecDeque<u32>,
    /// SGLang: the request being chunked (not in `running`).
    pub(super) chunked: Option<u32>,
    pub(super) free_blocks: u64,
    pub(super) capacity_blocks: u64,
    pub(super) block: u32,
    pub(super) reserved_blocks: u32,
    pub(super) scheduled: Vec<(u32, u32)>,
    pub(super) admit_seq: u64,
    pub(super) new_token_ratio: f64,
    pub(super) ratio_decay: f64,
    /// SGLang: whether the previous iteration was a prefill batch.
    pub(super) last_was_prefill: bool,
    /// SGLang: decode steps run back to back since the last prefill batch.
    pub(super) decode_streak: u32,
    pub(super) preemptions: u64,
    /// vLLM's prefix cache over the block pool (None: caching off, or nothing in the workload can hit).
    pub(super) cache: Option<PrefixCache>,
    /// vLLM's running decodes advanced as one aggregate (sim/pool.rs).
    pub(super) pool: DecodePool,
    /// Speculative decoding's state (sim/spec.rs); None for plain decoding.
    pub(super) spec: Option<super::spec::SpecState>,
    /// KV offload: the requests loading from host memory (sim/offload.rs); None without.
    pub(super) offload: Option<Box<super::offload::Offload>>,
    /// TensorRT-LLM attention DP balance: how long the waiting contexts have been held (sim/trtllm.rs).
    pub(super) adp: super::trtllm::AdpState,
}

#[inline]
pub(super) fn div_ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

impl<'a> Engine<'a> {
    pub(super) fn blocks_for(&self, tokens: u32) -> u32 {
        div_ceil(tokens as u64, self.block as u64) as u32
    }
    /// Blocks a request still needs to hold `tokens` tokens of KV (plus its reserved blocks, if it
    /// does not hold them yet).
    #[inline]
    pub(super) fn extra_blocks(&self, r: &Live, tokens: u32) -> u64 {
        // Fast path: most decode steps stay inside the last block (no division).
        if r.reserved && tokens as u64 <= r.blocks as u64 * self.block as u64 {
            return 0;
        }
        let reserved = if r.reserved { 0 } else { self.reserved_blocks };
        (self.blocks_for(tokens).saturating_sub(r.blocks) + reserved) as u64
    }
    /// Steps before `r` needs a new KV block, when its next step is a plain decode: it has a token,
    /// its next token is its only unscheduled one, it got its latest token at `now` (so the gap is
    /// the step's), it holds its reserved blocks and its last block has room or is just full. None
    /// otherwise. What a request must be for a decode stretch (sim/fastforward.rs) or the decode
    /// pool (sim/pool.rs) to carry it without visiting it.
    #[inline]
    pub(super) fn decode_room(&self, r: &Live, now: u64) -> Option<u64> {
        let block = self.block as u64;
        let room = (r.blocks as u64 * block).checked_sub(r.computed as u64)?;
        (r.generated >= 1 && r.computed + 1 == r.num_tokens && r.last_token_ns == now && r.reserved && room < block)
            .then_some(room)
    }
    /// Hand a request that produced its last token at `now` back: its record, its blocks and its slot.
    /// Returns its client.
    pub(super) fn complete(&mut self, idx: u32, now: u64, records: &mut Vec<RequestRecord>) -> u32 {
        let r = &self.reqs[idx as usize];
        records.push(r.record(now));
        if self.p.engine.attention_dp_balance.is_some() {
            self.adp.leave(r.adp_rank);
        }
        let client = r.client;
        self.free(idx, true);
        self.free_slots.push(idx);
        client
    }
    #[inline(always)]
    pub(super) fn alloc(&mut self, idx: u32, tokens: u32) {
        if self.cache.is_some() {
            return self.alloc_cached(idx, tokens);
        }
        let r = &self.reqs[idx as usize];
        let extra = self.extra_blocks(r, tokens);
        if extra == 0 && r.reserved {
            return;
        }
        assert!(extra <= self.free_blocks, "KV over-allocation");
        self.free_blocks -= extra;
        let kv = self.blocks_for(tokens);
        let r = &mut self.reqs[idx as usize];
        r.blocks = r.blocks.max(kv);
        r.reserved = true;
    }
    /// [`Engine::alloc`] with block identities: new blocks from the free queue's head, and the blocks
    /// that are full once `tokens` are computed cached under their content hash. Out of line: the
    /// plain path of `alloc` runs for every scheduled request of every step and must stay inlined
    /// (with this body inlined it was not, and the 1M-request benchmark lost 30%).
    #[inline(never)]
    fn alloc_cached(&mut self, idx: u32, tokens: u32) {
        let need = self.blocks_for(tokens).saturating_sub(self.reqs[idx as usize].blocks);
        assert!(need as u64 <= self.free_blocks, "KV over-allocation");
        let cache = self.cache.as_mut().expect("caching");
        let r = &mut self.reqs[idx as usize];
        for _ in 0..need {
            r.table.push(cache.allocate());
        }
        self.free_blocks -= need as u64;
        r.blocks += need;
        r.reserved = true;
        let full = (tokens / self.block).min(r.hashes.len() as u32);
        for k in r.registered..full {
            r.uncached |= !cache.register(r.table[k as usize], r.hashes[k as usize]);
        }
        r.registered = r.registered.max(full);
    }
    /// Prefix caching at admission: the request's longest cached prefix (at most num_tokens - 1
    /// tokens) in its `probe`. Returns (hit blocks, how many of them are free).
    pub(super) fn lookup_prefix(&mut self, idx: u32) -> (u32, u64) {
        let Some(cache) = &mut self.cache else { return (0, 0) };
        let r = &mut self.reqs[idx as usize];
        if !r.table.is_empty() || r.computed > 0 || r.hashes.is_empty() {
            r.probe.clear();
            return (0, 0);
        }
        let max = ((r.num_tokens - 1) / self.block) as usize;
        let free = cache.lookup(&r.hashes, max, &mut r.probe);
        (r.probe.len() as u32, free)
    }
    /// Take the blocks of the request's `probe`: their tokens are computed.
    pub(super) fn take_prefix(&mut self, idx: u32) {
        let r = &mut self.reqs[idx as usize];
        if r.probe.is_empty() {
            return;
        }
        let cache = self.cache.as_mut().expect("caching");
        self.free_blocks -= cache.take(&r.probe);
        // The table is empty before admission (lookup_prefix): the probe becomes it.
        debug_assert!(r.table.is_empty());
        std::mem::swap(&mut r.table, &mut r.probe);
        r.probe.clear();
        let hits = r.table.len() as u32;
        r.blocks = hits;
        r.registered = hits;
        r.computed = hits * self.block;
        if r.first_sched_ns == NONE {
            r.cached_tokens = r.computed;
        }
    }
    /// Give back a request's blocks (`finished`: it completed; else it is preempted and keeps its
    /// hashes to run again).
    pub(super) fn free(&mut self, idx: u32, finished: bool) {
        if let Some(cache) = &mut self.cache {
            // Tail first, as vLLM frees a request's blocks.
            let r = &mut self.reqs[idx as usize];
            let cached = r.registered as usize;
            let (freed, held) = cache.release_table(&mut r.table, &mut r.hashes, cached, finished && !r.uncached);
            self.free_blocks += freed;
            if held {
                // The cache holds them as one segment, the next lookup's guess.
                r.probe.clear();
            } else {
                // Its blocks are the next lookup's guess (the slot's next request, or this one
                // again after a preemption).
                std::mem::swap(&mut r.table, &mut r.probe);
            }
            r.table.clear();
            r.blocks = 0;
            r.registered = 0;
            r.uncached = false;
            r.reserved = false;
            return;
        }
        let reserved = self.reserved_blocks as u64;
        let r = &mut self.reqs[idx as usize];
        self.free_blocks += r.blocks as u64 + if r.reserved { reserved } else { 0 };
        r.blocks = 0;
        r.reserved = false;
    }
    /// Nothing running, waiting or being chunked.
    pub(super) fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty() && self.chunked.is_none() && self.loading().is_empty()
    }
    /// Blocks in use (for invariant checks).
    pub(super) fn used_blocks(&self) -> u64 {
        self.capacity_blocks - self.free_blocks
    }
    /// Whether a request could ever run: its whole sequence fits the empty cache.
    pub(super) fn fits_ever(&self, prompt: u32, output: u32) -> bool {
        div_ceil(prompt as u64 + output as u64, self.block as u64) + self.reserved_blocks as u64 <= self.capacity_blocks
    }
    /// Whether the engine would ever accept this request: prompt + output within the model's context
    /// (vLLM, SGLang and TensorRT-LLM all refuse longer ones), the whole sequence fits the empty cache,
    /// and (TensorRT-LLM without chunked prefill) the prompt tokens it still has to compute fit
    /// max_num_tokens, as the engine refuses a context longer than max_num_tokens. `kv_ready` of the
    /// prompt's tokens arrive computed (a disaggregated decode worker receives all but the last
    /// from the prefill worker: TensorRT-LLM's generation-only requests, whose decode workers run
    /// max_num_tokens of a few tokens per sequence, e.g. NVIDIA srt-slurm recipes/trtllm/gb200-fp4/
    /// 8k1k/stp/ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml `max_num_tokens: 16` for 8K prompts). A
    /// sequence's token counts are u32: one longer than u32::MAX tokens (a conversation's history
    /// on a model of a longer context) is rejected as beyond the context, never wrapped.
    pub(super) fn accepts(&self, prompt: u32, output: u32, kv_ready: u32) -> bool {
        let e = &self.p.engine;
        let tokens = prompt as u64 + output as u64;
        tokens <= self.p.arch.max_context.min(u32::MAX as u64)
            && self.fits_ever(prompt, output)
            && (e.chunked_prefill || prompt.saturating_sub(kv_ready) <= e.max_num_batched_tokens)
    }
    pub(super) fn preempt(&mut self, idx: u32) {
        self.free(idx, false);
        let r = &mut self.reqs[idx as usize];
        r.computed = 0;
        r.preemptions += 1;
        self.preemptions += 1;
        self.waiting.push_front(idx);
    }
    /// Preempt the most recently admitted running requests (vLLM's `self.running.pop()`,
    /// TensorRT-LLM's pause of the last started) until `idx` can hold `target` tokens. Returns false
    /// when `idx` itself had to go.
    #[inline]
    pub(super) fn preempt_newest_until_fits(&mut self, idx: u32, target: u32) -> bool {
        while self.extra_blocks(&self.reqs[idx as usize], target) > self.free_blocks {
            let victim = self.running.pop().expect("running holds idx");
            self.preempt(victim);
            if victim == idx {
                return false;
            }
        }
        true
    }
    /// Move the head of the waiting queue into the running batch with `n` of its tokens scheduled.
    #[inline]
    pub(super) fn admit_head(&mut self, now: u64, shape: &mut BatchShape, n: u32) {
        let idx = self.waiting.pop_front().expect("a waiting request");
        self.alloc(idx, self.reqs[idx as usize].computed + n);
        self.admit_seq += 1;
        self.reqs[idx as usize].admitted_seq = self.admit_seq;
        self.running.push(idx);
        self.mark_scheduled(idx, now, shape, n);
    }
    #[inline]
    pub(super) fn mark_scheduled(&mut self, idx: u32, now: u64, shape: &mut BatchShape, n: u32) {
        let r = &mut self.reqs[idx as usize];
        if r.first_sched_ns == NONE {
            r.first_sched_ns = now;
        }
        shape.add_chunk(r.computed, n);
        self.scheduled.push((idx, n));
    }
}

/// What an observer sees after each step: for invariant checks in tests and for diagnostics.
pub struct StepView<'e> {
    pub(super) eng: &'e Engine<'e>,
    /// Simulated time at the end of the step.
    pub now_ns: u64,
    pub step_ns: u64,
    pub shape: BatchShape,
}

impl StepView<'_> {
    pub fn running(&self) -> usize {
        self.eng.running.len() + self.eng.chunked.is_some() as usize
    }
    pub fn waiting(&self) -> usize {
        self.eng.waiting.len()
    }
    pub fn used_blocks(&self) -> u64 {
        self.eng.used_blocks()
    }
    pub fn capacity_blocks(&self) -> u64 {
        self.eng.capacity_blocks
    }
    /// Blocks held by requests, counted one by one (must equal `used_blocks`).
    pub fn held_blocks(&self) -> u64 {
        let reserved = self.eng.reserved_blocks as u64;
        self.eng
            .running
            .iter()
            .chain(self.eng.waiting.iter())
            .chain(self.eng.chunked.iter())
            .chain(self.eng.loading().iter().map(|(_, i)| i))
            .map(|&i| {
                let r = &self.eng.reqs[i as usize];
                r.blocks as u64 + if r.reserved { reserved } else { 0 }
            })
            .sum()
    }
    /// Every running request holds KV for all the tokens it has computed.
    pub fn kv_covers_computed(&self) -> bool {
        self.eng.running.iter().chain(self.eng.chunked.iter()).all(|&i| {
            let r = &self.eng.reqs[i as usize];
            r.blocks as u64 * self.eng.block as u64 >= r.computed as u64
        })
    }
}
