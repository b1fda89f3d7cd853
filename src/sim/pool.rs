//! vLLM's running decodes as one aggregate. Under load a vLLM step schedules every running request:
//! the decodes take one token each and a few prefills their chunks. Visiting each decode at each step
//! costs O(batch) per step, and an open loop at 90% load has an arrival every step or two, so the
//! decode-only fast-forward (sim/fastforward.rs) finds no stretch to skip. Here the decodes join a
//! pool that is advanced in O(1) per step:
//!
//! - a member's fields are those of the tick it joined ([`DecodePool::tick`] counts the pool's steps);
//!   it has decoded one token per tick since, so its state is brought up to date on demand
//!   ([`Engine::pool_sync`]): when it finishes, and for everyone when a step needs the exact scheduler;
//! - the step's shape gains the members' count and the sum of their contexts (every term of the
//!   shape is an integer, so the sum equals the scheduler's request-by-request sum to the bit);
//! - the KV blocks a step takes are counted per phase of the block size, as in the fast-forward;
//! - completions come off a heap keyed by (the tick of the finishing step, admission order), so
//!   requests finishing in one step are recorded in the running batch's order.
//!
//! A step takes this path only when its outcome does not depend on the order of the running batch:
//! every running request's remaining tokens fit the token budget and all their new blocks fit the
//! free ones, so nothing is cut short or preempted. Otherwise the pool is dissolved into the running
//! batch (every member synced) and the step runs through `schedule_vllm`, request by request. After
//! such a step the pooled path waits a few steps before it is tried again (doubling up to 64), so
//! an engine under memory pressure pays little for the attempts. tests/it/sim.rs compares both
//! paths to the nanosecond.

use super::engine::{div_ceil, Engine, NONE};
use super::step::BatchShape;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The pooled decodes of one vLLM engine.
#[derive(Debug, Default)]
pub(super) struct DecodePool {
    /// Whether this run may pool (vLLM, no prefix cache, not step by step).
    pub(super) enabled: bool,
    /// The running batch is split into pool members and `explicit` requests (true), or every running
    /// request's fields are current and the pool is empty (false).
    pub(super) active: bool,
    /// Steps the pool has decoded.
    pub(super) tick: u64,
    pub(super) n: u32,
    /// Sum over members of computed + 1: the KV tokens (and attention pairs) of their next decode.
    pub(super) kv: u64,
    /// Members inside the measured window (their token gaps count).
    pub(super) measured: u64,
    /// crossings[t mod block]: members that take a new KV block in the step of tick t.
    pub(super) crossings: Vec<u64>,
    /// (tick of the step that finishes it, admission order, request).
    pub(super) finishes: BinaryHeap<Reverse<(u64, u64, u32)>>,
    /// Running requests outside the pool (prefilling, or not yet joined), in running order.
    pub(super) explicit: Vec<u32>,
    /// When the members' latest token was produced (the end of the pool's latest step).
    pub(super) last_token_ns: u64,
    /// Steps to run request by request before the next attempt, and the wait after the next failure.
    wait: u32,
    backoff: u32,
}

impl DecodePool {
    pub(super) fn new(enabled: bool, block: u32) -> DecodePool {
        DecodePool { enabled, crossings: vec![0; block.max(1) as usize], backoff: 1, ..Default::default() }
    }
}

impl Engine<'_> {
    /// Bring a member's fields to the pool's tick: one token per tick since it joined (the block it
    /// allocated in each, the last token at the end of the latest step).
    #[inline]
    pub(super) fn pool_sync(&mut self, idx: u32) {
        let (tick, last) = (self.pool.tick, self.pool.last_token_ns);
        let block = self.block;
        let r = &mut self.reqs[idx as usize];
        let d = (tick - r.pool_tick) as u32;
        if d > 0 {
            r.computed += d;
            r.generated += d;
            // The step that finishes a request does not extend it.
            r.num_tokens += d - (r.generated == r.output) as u32;
            r.blocks = r.blocks.max(div_ceil(r.computed as u64, block as u64) as u32);
            r.last_token_ns = last;
            r.pool_tick = tick;
        }
    }

    /// Dissolve the pool: every member synced and back in the running batch as an ordinary request.
    pub(super) fn pool_dissolve(&mut self) {
        if !self.pool.active {
            return;
        }
        // Back to admission order (completions swap-removed).
        let reqs = &self.reqs;
        self.running.sort_unstable_by_key(|&i| reqs[i as usize].admitted_seq);
        for k in 0..self.running.len() {
            let idx = self.running[k];
            if self.reqs[idx as usize].pool_tick != NONE {
                self.pool_sync(idx);
                self.reqs[idx as usize].pool_tick = NONE;
            }
        }
        let p = &mut self.pool;
        p.active = false;
        p.n = 0;
        p.kv = 0;
        p.measured = 0;
        p.crossings.iter_mut().for_each(|c| *c = 0);
        p.finishes.clear();
        p.explicit.clear();
    }

    /// Before a step at `now`: split the running batch (if it is not) and move the requests that
    /// decode into the pool. False when this step runs request by request (pooling off, or waiting
    /// after a failed attempt).
    pub(super) fn pool_prepare(&mut self, now: u64) -> bool {
        if !self.pool.enabled {
            return false;
        }
        if self.pool.wait > 0 {
            self.pool.wait -= 1;
            return false;
        }
        if !self.pool.active {
            self.pool.active = true;
            self.pool.explicit.clear();
            self.pool.explicit.extend_from_slice(&self.running);
            self.note_positions(0);
        }
        let mut explicit = std::mem::take(&mut self.pool.explicit);
        explicit.retain(|&idx| match self.decode_room(&self.reqs[idx as usize], now) {
            Some(room) => {
                self.pool_join(idx, room);
                false
            }
            None => true,
        });
        self.pool.explicit = explicit;
        true
    }

    /// The member's phase: the ticks mod block at which it takes a new block.
    fn pool_phase(&self, room: u64) -> usize {
        ((self.pool.tick + room) % self.block as u64) as usize
    }

    /// A request whose next step is a decode, `room` steps from its next block, joins the pool.
    fn pool_join(&mut self, idx: u32, room: u64) {
        let phase = self.pool_phase(room);
        let p = &mut self.pool;
        let r = &mut self.reqs[idx as usize];
        r.pool_tick = p.tick;
        p.n += 1;
        p.kv += r.computed as u64 + 1;
        p.measured += r.measured as u64;
        p.crossings[phase] += 1;
        p.finishes.push(Reverse((p.tick + (r.output - r.generated) as u64 - 1, r.admitted_seq, idx)));
    }

    /// A member leaves the pool, synced (its entry off the heap already), undoing [`Engine::pool_join`].
    fn pool_leave(&mut self, idx: u32) {
        self.pool_sync(idx);
        let r = &self.reqs[idx as usize];
        let room = r.blocks as u64 * self.block as u64 - r.computed as u64;
        let (kv, measured, phase) = (r.computed as u64 + 1, r.measured as u64, self.pool_phase(room));
        let p = &mut self.pool;
        p.n -= 1;
        p.kv -= kv;
        p.measured -= measured;
        p.crossings[phase] -= 1;
        self.reqs[idx as usize].pool_tick = NONE;
    }

    /// A failed attempt: dissolve, and run the next steps request by request.
    fn pool_give_up(&mut self) {
        self.pool_dissolve();
        self.pool.wait = self.pool.backoff;
        self.pool.backoff = (self.pool.backoff * 2).min(64);
    }

    /// vLLM's step with the pool, when every running request gets all its remaining tokens and blocks
    /// (then the request-by-request scheduler would give the same batch in any order). False (the
    /// pool dissolved, nothing scheduled) when it does not hold: `schedule_vllm` runs the step.
    pub(super) fn schedule_vllm_pooled(&mut self, now: u64, shape: &mut BatchShape) -> bool {
        let e = &self.p.engine;
        let block = self.block as u64;
        let mut tokens = self.pool.n as u64;
        let mut blocks = self.pool.crossings[(self.pool.tick % block) as usize];
        for &idx in &self.pool.explicit {
            let r = &self.reqs[idx as usize];
            tokens += (r.num_tokens - r.computed) as u64;
            blocks += self.extra_blocks(r, r.num_tokens);
        }
        if tokens > e.max_num_batched_tokens as u64 || blocks > self.free_blocks {
            self.pool_give_up();
            return false;
        }
        self.pool.backoff = 1;
        let p = &self.pool;
        self.free_blocks -= p.crossings[(p.tick % block) as usize];
        shape.n_seqs += p.n;
        shape.n_tokens += p.n;
        shape.kv_read_tokens += p.kv;
        shape.attn_pairs += p.kv as f64;
        let explicit = std::mem::take(&mut self.pool.explicit);
        for &idx in &explicit {
            let r = &self.reqs[idx as usize];
            let (n, target) = (r.num_tokens - r.computed, r.num_tokens);
            self.alloc(idx, target);
            self.mark_scheduled(idx, now, shape, n);
        }
        self.pool.explicit = explicit;
        let before = self.running.len();
        self.admit_waiting_vllm(now, shape, e.max_num_batched_tokens - tokens as u32);
        self.pool.explicit.extend_from_slice(&self.running[before..]);
        self.note_positions(before);
        true
    }

    /// After a pooled step that ended at `end`: the members decoded one token each. Returns the
    /// members that finished in it, synced and out of the pool, in admission order, in `done`.
    pub(super) fn pool_after_step(&mut self, end: u64, done: &mut Vec<u32>) {
        let p = &mut self.pool;
        let t = p.tick;
        p.tick += 1;
        p.kv += p.n as u64;
        p.last_token_ns = end;
        while let Some(&Reverse((at, _, idx))) = self.pool.finishes.peek() {
            if at != t {
                debug_assert!(at > t, "a member outlived its output");
                break;
            }
            self.pool.finishes.pop();
            self.pool_leave(idx);
            done.push(idx);
        }
    }

    /// Take a request that finished in a pooled step out of the running batch. While the pool is
    /// active the running batch is only a set (swap-remove by each request's `run_pos`: shifting
    /// the batch and searching it per completion cost 17% of the Poisson benchmark); dissolving the
    /// pool sorts it back into admission order.
    pub(super) fn remove_running(&mut self, idx: u32) {
        let pos = self.reqs[idx as usize].run_pos as usize;
        debug_assert_eq!(self.running[pos], idx);
        self.running.swap_remove(pos);
        if let Some(&moved) = self.running.get(pos) {
            self.reqs[moved as usize].run_pos = pos as u32;
        }
    }

    /// Drop the explicit requests that have produced their last token.
    pub(super) fn drop_finished_explicit(&mut self) {
        let reqs = &self.reqs;
        self.pool.explicit.retain(|&i| reqs[i as usize].generated != reqs[i as usize].output);
    }

    /// Record where each running request from `from` on sits in the running batch.
    fn note_positions(&mut self, from: usize) {
        for k in from..self.running.len() {
            self.reqs[self.running[k] as usize].run_pos = k as u32;
        }
    }
}
