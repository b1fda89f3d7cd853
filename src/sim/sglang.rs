//! SGLang's scheduler (srt/managers/scheduler.py, schedule_policy.py, schedule_batch.py; read at
//! 0.5.23; ENGINES.md).
//!
//! Each iteration is a prefill (extend) batch when something can be admitted or a request is being
//! chunked, else a decode batch. At most one request is chunked at a time. Admission reserves
//! min(remaining output, 4096) x new_token_ratio tokens for every running request (the whole remaining
//! output for ignore_eos requests from 0.5.22); the ratio decays per decode step. When a decode step
//! cannot get memory, requests are retracted (fewest generated tokens first, longest prompt first among
//! equals) and recomputed later, and the ratio is re-estimated from the requests left: tokens decoded
//! plus 20 per request, over their max new tokens. Decodes wait during prefill batches unless mixed
//! chunks are enabled. The radix cache (mem_cache/radix_cache.py) is approximated by vLLM's block cache
//! at SGLang's page size of 1 token (sim/prefix.rs): the longest cached prefix, at most input_len - 1
//! tokens (schedule_batch.py `_compute_max_prefix_len`), is not recomputed; eviction takes the least
//! recently freed tokens, a request's tail before its prefix, where SGLang evicts the least recently
//! used leaves of its tree.

use super::engine::{Engine, Live};
use super::step::BatchShape;
use std::cmp::Reverse;

impl Engine<'_> {
    /// Tokens SGLang reserves for the future output of a request.
    pub(super) fn sglang_reserve(&self, r: &Live) -> f64 {
        let ratio = if self.p.engine.reserve_full_output { 1.0 } else { self.new_token_ratio };
        (r.output - r.generated).min(4096) as f64 * ratio
    }

    /// new_token_ratio_tracker.py estimate_new_token_ratio_after_retract: (tokens decoded + 20 per
    /// request) / (max new tokens + 1) over the requests still running, at most 1.
    fn ratio_after_retract(&self) -> f64 {
        let (decoded, max_new) = self.running.iter().fold((0u64, 0u64), |(d, m), &i| {
            let r = &self.reqs[i as usize];
            (d + r.generated as u64, m + r.output as u64)
        });
        ((decoded + 20 * self.running.len() as u64) as f64 / (max_new + 1) as f64).min(1.0)
    }

    /// `hits`, `free_hits`: the request's cached prefix (see [`Engine::lookup_prefix`]): those tokens
    /// need no new memory, and the cached ones that were evictable are no longer free.
    pub(super) fn sglang_admissible(&self, idx: u32, reserved_running: f64, (hits, free_hits): (u32, u64)) -> bool {
        let r = &self.reqs[idx as usize];
        let need = if hits == 0 {
            self.extra_blocks(r, r.num_tokens) as f64
        } else {
            ((self.blocks_for(r.num_tokens) - hits) as u64 + free_hits) as f64
        };
        let avail = self.free_blocks as f64 - reserved_running;
        if self.running.is_empty() && self.chunked.is_none() {
            // Alone on the engine, the reservation is moot: admit whatever fits.
            return need <= self.free_blocks as f64;
        }
        need + self.sglang_reserve(r) <= avail
    }

    /// SGLang scheduling of one iteration.
    pub(super) fn schedule_sglang(&mut self, now: u64, shape: &mut BatchShape) {
        let e = &self.p.engine;
        let reserved_running: f64 = self.running.iter().map(|&i| self.sglang_reserve(&self.reqs[i as usize])).sum();
        let head_ok = match self.waiting.front().copied() {
            Some(idx) => {
                let hits = self.lookup_prefix(idx);
                (self.running.len() as u32) < e.max_num_seqs && self.sglang_admissible(idx, reserved_running, hits)
            }
            None => false,
        };
        let in_decode_run = self.decode_streak > 0 && self.decode_streak < e.num_continuous_decode_steps;
        let decode_turn = !self.running.is_empty() && ((e.interleave_decode && self.last_was_prefill) || in_decode_run);
        if (self.chunked.is_some() || head_ok) && !decode_turn {
            let mut rem = e.max_num_batched_tokens;
            // Mixed chunks: the running decodes ride along (collected before new admissions).
            if e.enable_mixed_chunk {
                let mut k = 0;
                while k < self.running.len() {
                    let idx = self.running[k];
                    let target = self.reqs[idx as usize].computed + 1;
                    if self.extra_blocks(&self.reqs[idx as usize], target) <= self.free_blocks {
                        self.alloc(idx, target);
                        self.mark_scheduled(idx, now, shape, 1);
                    }
                    k += 1;
                }
            }
            if let Some(idx) = self.chunked {
                let r = &self.reqs[idx as usize];
                let n = (r.num_tokens - r.computed).min(rem);
                let target = r.computed + n;
                if self.extra_blocks(r, target) <= self.free_blocks {
                    self.alloc(idx, target);
                    self.mark_scheduled(idx, now, shape, n);
                    rem -= n;
                } else {
                    rem = 0;
                }
            }
            let mut reserved = reserved_running;
            while rem > 0 && self.chunked.is_none() && (self.running.len() as u32) < e.max_num_seqs {
                let Some(&idx) = self.waiting.front() else {
                    break;
                };
                // The radix cache's match (schedule_batch.py: at most input_len - 1 tokens).
                let hits = self.lookup_prefix(idx);
                if !self.sglang_admissible(idx, reserved, hits) {
                    break;
                }
                self.waiting.pop_front();
                self.take_prefix(idx);
                let r = &self.reqs[idx as usize];
                let need = r.num_tokens - r.computed;
                let n = need.min(rem);
                reserved += self.sglang_reserve(r);
                self.alloc(idx, self.reqs[idx as usize].computed + n);
                self.admit_seq += 1;
                self.reqs[idx as usize].admitted_seq = self.admit_seq;
                self.mark_scheduled(idx, now, shape, n);
                rem -= n;
                if n < need {
                    self.chunked = Some(idx);
                } else {
                    self.running.push(idx);
                }
            }
            if !self.scheduled.is_empty() {
                self.last_was_prefill = true;
                self.decode_streak = 0;
                return;
            }
        }
        self.last_was_prefill = false;
        self.decode_streak += 1;
        // Decode batch; retract until every running request can grow by one token.
        let mut retracted = false;
        loop {
            let need: u64 = self
                .running
                .iter()
                .map(|&i| {
                    let r = &self.reqs[i as usize];
                    self.extra_blocks(r, r.computed + 1)
                })
                .sum();
            if need <= self.free_blocks || self.running.is_empty() {
                break;
            }
            let (pos, _) = self
                .running
                .iter()
                .enumerate()
                .min_by_key(|(_, &i)| {
                    let r = &self.reqs[i as usize];
                    (r.generated, Reverse(r.prompt), Reverse(r.admitted_seq))
                })
                .expect("running non-empty");
            let victim = self.running.remove(pos);
            self.preempt(victim);
            retracted = true;
        }
        if retracted {
            self.new_token_ratio = self.ratio_after_retract();
        }
        for k in 0..self.running.len() {
            let idx = self.running[k];
            let target = self.reqs[idx as usize].computed + 1;
            self.alloc(idx, target);
            self.mark_scheduled(idx, now, shape, 1);
        }
        if !self.running.is_empty() {
            self.new_token_ratio = (self.new_token_ratio - self.ratio_decay).max(e.new_token_ratio_min);
        }
    }
}
