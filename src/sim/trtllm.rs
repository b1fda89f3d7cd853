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

    /// TensorRT-LLM's attention DP balance (`attention_dp_config.enable_balance`;
    /// tensorrt_llm/_torch/pyexecutor/py_executor.py `_balance_adp_requests`, as read from the
    /// TensorRT-LLM source outside this repository's mirrors): new contexts are held until every rank
    /// has one (the engine stands for balanced ranks: as many waiting requests as ranks), or some rank
    /// has no generation request, or they have waited `timeout_iters` iterations; when every rank
    /// has both, they wait `batching_wait_iters` more to batch. Whether the contexts may start now.
    fn adp_release(&mut self, b: &AdpBalance) -> bool {
        if self.waiting.is_empty() {
            return true;
        }
        let all_gen = self.running.len() as u32 >= b.ranks;
        if self.waiting.len() as u32 >= b.ranks {
            self.adp_wait_iters = 0;
            if all_gen && self.adp_batching_iters < b.batching_wait_iters {
                self.adp_batching_iters += 1;
                return false;
            }
            self.adp_batching_iters = 0;
            return true;
        }
        self.adp_wait_iters += 1;
        if self.adp_wait_iters >= b.timeout_iters || !all_gen {
            self.adp_wait_iters = 0;
            return true;
        }
        false
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
