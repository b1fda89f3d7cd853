//! vLLM V1's scheduler (vllm/v1/core/sched/scheduler.py `schedule`, read at 0.33.0; ENGINES.md).
//!
//! One token budget per step; running requests first, in admission order, each taking
//! min(remaining, budget) tokens (a decode under speculative decoding 1 + K, its drafts cut to what
//! the budget leaves: sim/spec.rs); then waiting requests FCFS while budget, max_num_seqs and KV blocks
//! allow, stopping at the first that cannot be allocated (head-of-line). Blocks are allocated for the
//! tokens computed in the step only; when a running request cannot get its blocks, the most recently
//! admitted running request is preempted (recompute) and goes back to the front of the queue, and no
//! waiting request starts that step. From 0.19 (`scheduler_reserve_full_isl`) a waiting request starts
//! only when blocks for all its tokens so far are free, not just for its first chunk: without that
//! check, long prompts admitted a chunk at a time fill the cache and preempt each other before their
//! prefills end.

use super::engine::Engine;
use super::step::BatchShape;

impl Engine<'_> {
    /// vLLM V1 scheduling of one step.
    pub(super) fn schedule_vllm(&mut self, now: u64, shape: &mut BatchShape) {
        if self.offload.is_some() {
            self.finish_loads(now);
        }
        let e = &self.p.engine;
        let mut budget = e.max_num_batched_tokens;
        // Speculative decoding: a decode's drafts take budget too, recorded for spec_verify
        // (sim/spec.rs `SpecState::granted`); 0 without speculation, which leaves the loop below as
        // it was.
        let spec_k = self.spec.as_mut().map_or(0, |s| {
            s.granted.clear();
            s.k
        });
        let mut preempted = false;
        let mut i = 0;
        while i < self.running.len() && budget > 0 {
            let idx = self.running[i];
            let r = &self.reqs[idx as usize];
            let n = (r.num_tokens - r.computed).min(budget);
            let target = r.computed + n;
            // Written out rather than through Engine::preempt_newest_until_fits: this loop runs for
            // every running request of every step, and the call cost 25% of the benchmark's speed
            // (cargo bench --bench sim_speed: 1M closed-loop requests in 2.9 s against 2.3 s).
            let mut self_preempted = false;
            while self.extra_blocks(&self.reqs[idx as usize], target) > self.free_blocks {
                let victim = self.running.pop().expect("running holds idx");
                self.preempt(victim);
                preempted = true;
                if victim == idx {
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                break;
            }
            self.alloc(idx, target);
            self.mark_scheduled(idx, now, shape, n);
            budget -= n;
            if spec_k > 0 {
                let d = if super::spec::is_decoding(&self.reqs[idx as usize], n) { spec_k.min(budget) } else { 0 };
                budget -= d;
                self.spec.as_mut().expect("spec_k > 0 only under speculation").granted.push(d);
            }
            i += 1;
        }
        if preempted {
            return;
        }
        self.admit_waiting_vllm(now, shape, budget);
    }

    /// Start waiting requests FCFS with `budget` tokens left in the step.
    #[inline]
    pub(super) fn admit_waiting_vllm(&mut self, now: u64, shape: &mut BatchShape, mut budget: u32) {
        let e = &self.p.engine;
        while budget > 0 && (self.running.len() as u32) < e.max_num_seqs {
            let Some(&idx) = self.waiting.front() else {
                break;
            };
            // Prefix caching: the cached prefix counts as computed; its free blocks leave the queue.
            let (hits, free_hits) = self.lookup_prefix(idx);
            // kv_cache_manager.py allocate_slots: the watermark applies to waiting and preempted
            // requests while others run; with full_sequence_must_fit every token so far must fit.
            let watermark = if self.running.is_empty() { 0 } else { e.watermark_blocks };
            if self.offload.is_some() {
                // KV offload: the prefix continues in host memory (sim/offload.rs).
                match self.admit_host_hit(now, idx, hits, free_hits, watermark) {
                    super::offload::HostAdmit::Loading => continue,
                    super::offload::HostAdmit::NoRoom => break,
                    super::offload::HostAdmit::Miss => {}
                }
            }
            let r = &self.reqs[idx as usize];
            let computed = r.computed + hits * self.block;
            let n = (r.num_tokens - computed).min(budget);
            let admit_tokens = if e.reserve_full_prompt { r.num_tokens } else { computed + n };
            let need = if hits == 0 {
                self.extra_blocks(r, admit_tokens)
            } else {
                (self.blocks_for(admit_tokens) - hits) as u64 + free_hits
            };
            if need + watermark > self.free_blocks {
                break;
            }
            self.take_prefix(idx);
            self.admit_head(now, shape, n);
            budget -= n;
        }
    }
}
