//! Decode-only stretches in one call. When vLLM's or SGLang's running batch only decodes (nothing
//! waiting, nothing chunked, every request one token from its last) and no request finishes or sees a new
//! arrival for k steps, each of those steps schedules the same requests one token each: the batch
//! shape grows by one context token per request per step, and the step time is the step model's of
//! that shape. A request crosses into a new KV block every block-size steps at a known phase, so the
//! blocks each step allocates are counted per phase, and the stretch stops before a step whose
//! blocks would not fit (there vLLM preempts and SGLang retracts). SGLang's decode batches also
//! advance its decode streak and decay its new_token_ratio, step by step as its scheduler does. The stretch is advanced by computing k step times, in
//! the order and with the float operations of step-by-step simulation (the KV-utilization area, the
//! pooled ITL gaps, the series samples), without visiting each request at each step: O(k + batch)
//! instead of O(k x batch), and the same bytes (tests/it/sim.rs compares both paths). With vLLM's decode
//! pool active (sim/pool.rs) the stretch is [`Replica::fast_forward_pool`]: the pool already holds the
//! counts, so nothing is scanned and the members are left behind the pool's tick, O(k).

use super::run::Replica;
use super::step::{BatchShape, FixedParts};
use super::Sample;
use crate::profile::EngineKind;

impl Replica<'_> {
    /// One step of a decode stretch of `shape.n_seqs` requests (`measured` of them in the measured
    /// window) at KV utilization `used`: its time, the utilization area, the series sample, the
    /// counters and the token gaps, as the step loop (run.rs) counts them; the shape then grows by
    /// one context token per request.
    #[inline(always)]
    fn stretch_step(&mut self, fixed: &FixedParts, shape: &mut BatchShape, used: f64, measured: u64) {
        let n = shape.n_seqs;
        let step_start = self.now;
        let dt = self.eng.model.step_ns_with(fixed, shape.kv_read_tokens, shape.attn_pairs);
        self.kv_area += used * dt as f64;
        let out = &mut self.out;
        out.kv_util_max = out.kv_util_max.max(used);
        let sample = Sample { t_s: step_start as f64 * 1e-9, kv_util: used, running: n, waiting: 0 };
        self.clock.sample(&mut out.series, step_start, sample);
        self.now = step_start + dt;
        out.busy_ns += dt;
        out.steps += 1;
        self.last_step = (n, dt, step_start + dt);
        out.decode_tokens += n as u64;
        out.itl_gaps.add_n(dt, measured);
        shape.kv_read_tokens += n as u64;
        shape.attn_pairs += n as f64;
    }

    /// Advance a decode-only stretch of at least two steps, none starting at or after `limit_ns`.
    /// False (nothing done) when the engine is not in one.
    pub(super) fn fast_forward(&mut self, limit_ns: u64) -> bool {
        let now = self.now;
        let eng = &self.eng;
        let kind = eng.p.engine.kind;
        if kind == EngineKind::Trtllm
            || eng.spec.is_some()
            || eng.p.engine.stream_interval > 1
            || eng.cache.is_some()
            || !eng.waiting.is_empty()
            || eng.chunked.is_some()
            || eng.running.is_empty()
            || now >= limit_ns
        {
            return false;
        }
        let n = eng.running.len() as u32;
        // vLLM's token budget must cover one token per running request (SGLang's decode batch has
        // no budget).
        if kind == EngineKind::Vllm && n > eng.p.engine.max_num_batched_tokens {
            return false;
        }
        // A request found finishing within two steps blocks every stretch while it runs.
        if let Some((i, seq)) = self.ff_blocker {
            let r = &eng.reqs[i as usize];
            if r.admitted_seq == seq && r.generated < r.output {
                return false;
            }
            self.ff_blocker = None;
        }
        let block = eng.block as u64;
        let (mut k, mut kv, mut measured, mut first_done) = (u64::MAX, 0u64, 0u64, 0u32);
        for &i in &eng.running {
            let r = &eng.reqs[i as usize];
            if eng.decode_room(r, now).is_none() {
                return false;
            }
            // Steps before the one that finishes it.
            let before = (r.output - r.generated - 1) as u64;
            if before < k {
                (k, first_done) = (before, i);
            }
            kv += r.computed as u64 + 1;
            measured += r.measured as u64;
        }
        if k < 2 {
            self.ff_blocker = Some((first_done, eng.reqs[first_done as usize].admitted_seq));
            return false;
        }
        // Requests whose next block is needed at step j, for j mod block (each needs one more every
        // `block` steps from its first), in the buffer kept between calls.
        let mut crossings = std::mem::take(&mut self.crossings);
        crossings.clear();
        crossings.resize(block as usize, 0);
        let eng = &self.eng;
        for &i in &eng.running {
            let r = &eng.reqs[i as usize];
            crossings[(r.blocks as u64 * block - r.computed as u64) as usize] += 1;
        }
        // The shape of the first step, as schedule_vllm builds it (every sum an exact integer).
        let mut shape =
            BatchShape { n_seqs: n, n_tokens: n, kv_read_tokens: kv, attn_pairs: kv as f64, ..Default::default() };
        let fixed = eng.model.fixed(n, n);
        let cap = eng.capacity_blocks;
        let mut free = eng.free_blocks;
        let mut done = 0u64;
        while done < k && self.now < limit_ns {
            // This step's new blocks; a step they do not fit is vLLM's to preempt in.
            let need = crossings[(done % block) as usize];
            if need > free {
                break;
            }
            free -= need;
            self.stretch_step(&fixed, &mut shape, (cap - free) as f64 / cap as f64, measured);
            if kind == EngineKind::Sglang {
                // A decode batch: the streak grows and new_token_ratio decays, as schedule_sglang.
                let e = &mut self.eng;
                e.last_was_prefill = false;
                e.decode_streak += 1;
                e.new_token_ratio = (e.new_token_ratio - e.ratio_decay).max(e.p.engine.new_token_ratio_min);
            }
            done += 1;
        }
        self.crossings = crossings;
        if done == 0 {
            return false;
        }
        let d = done as u32;
        let end = self.now;
        let eng = &mut self.eng;
        eng.free_blocks = free;
        for k in 0..eng.running.len() {
            let r = &mut eng.reqs[eng.running[k] as usize];
            let room = r.blocks as u64 * block - r.computed as u64;
            // Blocks taken at steps room, room + block, ... below `done`.
            if done > room {
                r.blocks += (1 + (done - 1 - room) / block) as u32;
            }
            r.computed += d;
            r.generated += d;
            r.num_tokens += d;
            r.last_token_ns = end;
        }
        true
    }
}

impl Replica<'_> {
    /// [`Replica::fast_forward`] for vLLM's decode pool (sim/pool.rs): every running request is a
    /// member and nothing waits, so the stretch runs to the step before the first member finishes
    /// without visiting any of them, and leaves them behind the pool's tick. False when the engine is
    /// not in such a stretch.
    pub(super) fn fast_forward_pool(&mut self, limit_ns: u64) -> bool {
        let eng = &self.eng;
        let pool = &eng.pool;
        if !eng.waiting.is_empty()
            || !pool.explicit.is_empty()
            || pool.n == 0
            || pool.n > eng.p.engine.max_num_batched_tokens
            || self.now >= limit_ns
        {
            return false;
        }
        let Some(&std::cmp::Reverse((finish_tick, ..))) = pool.finishes.peek() else {
            return false;
        };
        let k = finish_tick - pool.tick;
        let n = pool.n;
        let block = eng.block as u64;
        let cap = eng.capacity_blocks;
        let mut free = eng.free_blocks;
        let mut shape = BatchShape {
            n_seqs: n,
            n_tokens: n,
            kv_read_tokens: pool.kv,
            attn_pairs: pool.kv as f64,
            ..Default::default()
        };
        let fixed = eng.model.fixed(n, n);
        let (mut tick, measured) = (pool.tick, pool.measured);
        let mut done = 0u64;
        while done < k && self.now < limit_ns {
            let need = self.eng.pool.crossings[(tick % block) as usize];
            if need > free {
                break;
            }
            free -= need;
            self.stretch_step(&fixed, &mut shape, (cap - free) as f64 / cap as f64, measured);
            tick += 1;
            done += 1;
        }
        if done == 0 {
            return false;
        }
        let pool = &mut self.eng.pool;
        pool.tick = tick;
        pool.kv = shape.kv_read_tokens;
        pool.last_token_ns = self.now;
        self.eng.free_blocks = free;
        true
    }
}
