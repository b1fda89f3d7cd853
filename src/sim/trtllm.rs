//! TensorRT-LLM's in-flight batching (cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp and
//! microBatchScheduler.cpp, kvCacheManager.cpp; defaults from tensorrt_llm/llmapi/llm_args.py;
//! ENGINES.md).
//!
//! Each iteration the capacity scheduler decides which requests may hold memory, then the micro-batch
//! scheduler fills max_num_tokens: requests already running first (one token per generating request,
//! the next chunk of a chunked context), then waiting requests in arrival order, stopping at the first
//! that does not fit (head-of-line). Context and generation requests share an iteration. Without
//! chunked prefill (the default) a context runs whole, so a prompt longer than max_num_tokens can never
//! start: the engine refuses it, and so does capsim (counted as rejected).
//!
//! - GUARANTEED_NO_EVICT (default): a request starts only when the blocks for its whole sequence
//!   (prompt + output) fit beside what every running request still needs to finish
//!   (getRemainingBlocksToCompletion). Nothing is ever paused.
//! - MAX_UTILIZATION: a request starts when the blocks of its next step fit (getNeededBlocksOneStep);
//!   when a running request cannot get its next block, the most recently started request is paused
//!   (its KV freed, recomputed later), as vLLM preempts. No request starts in an iteration that paused
//!   one.

use super::engine::{Engine, Live};
use super::step::BatchShape;
use crate::profile::{AdpBalance, CapacityPolicy};

impl Engine<'_> {
    /// Blocks a request still needs to hold its whole sequence, prompt and every output token.
    fn blocks_to_completion(&self, r: &Live) -> u64 {
        self.extra_blocks(r, r.prompt + r.output)
    }

    /// Tokens of a request's context to run now with `budget` tokens left, or None if it must wait:
    /// the rest of it, or a block-aligned chunk of it when chunking is on.
    fn trtllm_context_tokens(&self, r: &Live, budget: u32, alone: bool) -> Option<u32> {
        let rest = r.num_tokens - r.computed;
        if rest <= budget {
            return Some(rest);
        }
        if self.p.engine.chunked_prefill {
            // Chunks are whole blocks, unless the budget left is below one block.
            let aligned = budget / self.block * self.block;
            return Some(if aligned > 0 { aligned } else { budget });
        }
        // A context resumed after a pause may outgrow the budget; it runs when nothing else does.
        alone.then_some(rest)
    }

    /// Whether the held contexts may start now under TensorRT-LLM's attention DP balance
    /// ([`AdpState::release`]): which ranks have a waiting context, and which a generation request.
    /// A waiting request holds KV only when a prefill worker handed it over (a new or paused one
    /// has none): TensorRT-LLM schedules those apart from the contexts (py_executor's
    /// `fitting_disagg_gen_init_requests`, as recalled, same caveat as [`AdpState::assign`]), so
    /// the balance never holds them.
    fn adp_release(&mut self, b: &AdpBalance) -> bool {
        let ctx = ranks_where(&self.reqs, &self.waiting, |r| r.computed == 0);
        if ctx == 0 {
            return true;
        }
        let gen = ranks_where(&self.reqs, &self.running, |r| r.computed >= r.prompt);
        self.adp.release(b, ctx, gen)
    }

    pub(super) fn schedule_trtllm(&mut self, now: u64, shape: &mut BatchShape) {
        let e = &self.p.engine;
        let policy = e.capacity_policy.unwrap_or(CapacityPolicy::GuaranteedNoEvict);
        let mut budget = e.max_num_batched_tokens;
        let mut paused = false;
        // Blocks free beyond what the running requests still need to finish (GUARANTEED_NO_EVICT).
        let mut spare = match policy {
            CapacityPolicy::GuaranteedNoEvict => {
                let owed: u64 = self.running.iter().map(|&i| self.blocks_to_completion(&self.reqs[i as usize])).sum();
                self.free_blocks.saturating_sub(owed)
            }
            CapacityPolicy::MaxUtilization => 0,
        };
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let idx = self.running[i];
            let r = &self.reqs[idx as usize];
            let Some(n) = self.trtllm_context_tokens(r, budget, self.scheduled.is_empty()) else {
                i += 1;
                continue;
            };
            let target = r.computed + n;
            if policy == CapacityPolicy::MaxUtilization {
                let before = self.preemptions;
                let fits = self.preempt_newest_until_fits(idx, target);
                paused |= self.preemptions > before;
                if !fits {
                    break;
                }
            }
            self.alloc(idx, target);
            self.mark_scheduled(idx, now, shape, n);
            budget -= n;
            i += 1;
        }
        if paused {
            return;
        }
        if let Some(b) = &e.attention_dp_balance {
            if !self.adp_release(b) {
                return;
            }
        }
        while budget > 0 && (self.running.len() as u32) < e.max_num_seqs {
            let Some(&idx) = self.waiting.front() else {
                break;
            };
            let r = &self.reqs[idx as usize];
            let Some(n) = self.trtllm_context_tokens(r, budget, self.scheduled.is_empty()) else {
                break;
            };
            match policy {
                CapacityPolicy::GuaranteedNoEvict => {
                    let need = self.blocks_to_completion(r);
                    if need > spare {
                        break;
                    }
                    spare -= need;
                }
                CapacityPolicy::MaxUtilization => {
                    if self.extra_blocks(r, r.computed + n) > self.free_blocks {
                        break;
                    }
                }
            }
            self.admit_head(now, shape, n);
            budget -= n;
        }
    }
}

/// Ranks a bitmask holds: AdpBalance::ranks is at most 64 (checked when the profile resolves).
const MAX_RANKS: usize = 64;

/// The bitmask of the ranks of the requests `ids` that `keep`.
fn ranks_where<'a>(reqs: &[Live], ids: impl IntoIterator<Item = &'a u32>, keep: impl Fn(&Live) -> bool) -> u64 {
    ids.into_iter().map(|&i| &reqs[i as usize]).filter(|r| keep(r)).fold(0, |m, r| m | 1 << r.adp_rank)
}

/// The bitmask of ranks 0..ranks.
fn all_ranks(ranks: u32) -> u64 {
    u64::MAX >> (MAX_RANKS as u32 - ranks)
}

/// TensorRT-LLM's attention DP balance between iterations (`attention_dp_config.enable_balance`;
/// tensorrt_llm/_torch/pyexecutor/py_executor.py `_balance_adp_requests`, as recalled from the
/// TensorRT-LLM source, same caveat as [`AdpState::assign`]): iterations the waiting contexts have
/// been held, the batching wait's, and each rank's active requests.
#[derive(Debug, Clone, Copy)]
pub(super) struct AdpState {
    wait_iters: u32,
    batching_iters: u32,
    /// Requests sent to each rank and not finished (running or waiting).
    active: [u32; MAX_RANKS],
}

impl Default for AdpState {
    fn default() -> Self {
        AdpState { wait_iters: 0, batching_iters: 0, active: [0; MAX_RANKS] }
    }
}

impl AdpState {
    /// The rank a new request is sent to, counted active there: the one with the fewest active
    /// requests, ties to the lowest. TensorRT-LLM's executor request queue assigns each fetched
    /// request to the least-loaded rank, and a request stays on its rank (as recalled from
    /// tensorrt_llm/_torch/pyexecutor/executor_request_queue.py, which is not among this
    /// repository's mirrors and was too large to fetch: re-check against the release used).
    pub(super) fn assign(&mut self, ranks: u32) -> u8 {
        let rank = (0..ranks as usize).min_by_key(|&r| (self.active[r], r)).unwrap_or(0);
        self.active[rank] += 1;
        rank as u8
    }

    /// A request of `rank`, counted by [`Self::assign`], finished.
    pub(super) fn leave(&mut self, rank: u8) {
        self.active[rank as usize] -= 1;
    }

    /// Whether the held contexts start this iteration, given the bitmasks of the ranks with a
    /// waiting context (`ctx`) and with a generation request (`gen`). They are held until every
    /// rank has a context, or some rank has no generation request, or they have waited
    /// `timeout_iters` iterations; when every rank has both, they wait `batching_wait_iters` more
    /// to batch.
    ///
    /// Why per rank: a request stays on the rank it was sent to ([`Self::assign`]), so in a
    /// steady closed loop a new request lands where one just finished, on a rank drawn by the
    /// completions, and "every rank has one" takes a coupon collector's draws (about 8 arrivals
    /// for 4 ranks), not as many arrivals as ranks. Counting the waiting requests instead released
    /// InferenceX's TensorRT-LLM runs at 256 clients about three times too early (TTFT -56%).
    pub(super) fn release(&mut self, b: &AdpBalance, ctx: u64, gen: u64) -> bool {
        let all = all_ranks(b.ranks);
        let all_gen = gen & all == all;
        if ctx & all == all {
            self.wait_iters = 0;
            if all_gen && self.batching_iters < b.batching_wait_iters {
                self.batching_iters += 1;
                return false;
            }
            self.batching_iters = 0;
            return true;
        }
        self.wait_iters += 1;
        if self.wait_iters >= b.timeout_iters || !all_gen {
            self.wait_iters = 0;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_request_goes_to_the_least_active_rank() {
        let mut s = AdpState::default();
        let sent: Vec<u8> = (0..5).map(|_| s.assign(4)).collect();
        assert_eq!(sent, [0, 1, 2, 3, 0]);
        s.leave(2);
        assert_eq!(s.assign(4), 2, "where one just finished");
        assert_eq!(s.assign(4), 1);
        let mut s = AdpState::default();
        assert_eq!((0..64).map(|_| s.assign(64)).last(), Some(63));
        assert_eq!(AdpState::default().assign(1), 0);
    }

    #[test]
    fn contexts_wait_until_every_rank_has_one() {
        let b = AdpBalance { ranks: 2, timeout_iters: 3, batching_wait_iters: 0 };
        let both = all_ranks(2);
        let mut s = AdpState::default();
        // Two contexts on rank 0 while both ranks generate: held, however many they are.
        let rank0 = 1;
        assert!(!s.release(&b, rank0, both));
        assert!(!s.release(&b, rank0, both));
        // The third held iteration reaches the timeout.
        assert!(s.release(&b, rank0, both));
        // One on each rank: at once.
        assert!(s.release(&b, both, both));
        // A rank with nothing to generate does not wait for contexts.
        assert!(s.release(&b, rank0, rank0));
        // Sixty-four ranks: the full mask.
        let b64 = AdpBalance { ranks: 64, timeout_iters: 100, batching_wait_iters: 0 };
        assert!(AdpState::default().release(&b64, u64::MAX, u64::MAX));
        assert!(!AdpState::default().release(&b64, u64::MAX >> 1, u64::MAX));
    }

    #[test]
    fn a_full_house_waits_the_batching_iterations() {
        let b = AdpBalance { ranks: 2, timeout_iters: 50, batching_wait_iters: 2 };
        let both = all_ranks(2);
        let mut s = AdpState::default();
        assert!(!s.release(&b, both, both));
        assert!(!s.release(&b, both, both));
        assert!(s.release(&b, both, both));
    }
}
