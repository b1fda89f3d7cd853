//! The duration of one engine step from the batch's shape (DESIGN.md section 1).
//!
//! step = overhead + per_seq x sequences + max(memory, compute) + (1 - overlap) x min(memory, compute),
//! where
//! - memory time = (weights read + KV read + linear-attention state) / effective bandwidth; the weights
//!   read grow with the tokens in the step for MoE models (experts touched, E(1-(1-k/E)^B));
//! - compute time = matmul FLOPs / effective matmul FLOP/s + attention FLOPs / effective attention FLOP/s.
//!
//! Every coefficient is in physical units, so a profile moves to another GPU by swapping peaks and to
//! another model by swapping byte and FLOP counts. Constants are folded once in [`StepModel::new`]; the
//! per-step evaluation is a handful of multiplications and one table lookup.

use crate::catalog::ModelArch;
use crate::profile::Profile;
use crate::units::Dtype;

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
}

impl BatchShape {
    /// Add a chunk of `n` tokens of a sequence whose first `start` tokens already have KV.
    #[inline]
    pub fn add_chunk(&mut self, start: u32, n: u32) {
        self.n_seqs += 1;
        self.n_tokens += n;
        self.kv_read_tokens += start as u64 + n as u64;
        let (s, n) = (start as f64, n as f64);
        self.attn_pairs += n * s + n * (n + 1.0) / 2.0;
    }
}

/// Step-time model with its constants folded.
#[derive(Debug, Clone)]
pub struct StepModel {
    overhead_s: f64,
    per_seq_s: f64,
    /// Seconds per byte.
    inv_bw: f64,
    /// Always-read weight bytes.
    dense_weight_bytes: f64,
    /// Bytes of one expert in every layer (n_layers x expert params x dtype).
    expert_bytes_all_layers: f64,
    /// experts_touched(B) for B < table length.
    experts_touched: Vec<f64>,
    arch_for_large_b: ModelArch,
    expert_spread: f64,
    kv_bytes_per_token: f64,
    state_bytes_per_seq: f64,
    /// Seconds per token of matmul work.
    matmul_s_per_token: f64,
    /// Seconds per attention (query, key) pair.
    attn_s_per_pair: f64,
    /// 1 - mem_compute_overlap.
    exposed: f64,
}

impl StepModel {
    pub fn new(p: &Profile) -> StepModel {
        let a = &p.arch;
        let c = &p.coefficients;
        let tp = p.tensor_parallel as f64;
        let w = p.file.model.weight_dtype;
        let kv = p.file.model.kv_dtype;
        let table_len = (p.engine.max_num_batched_tokens as usize + p.engine.max_num_seqs as usize + 1).min(1 << 16);
        let experts_touched = (0..table_len).map(|b| a.experts_touched_spread(b as f64, c.expert_spread)).collect();
        let state_dtype = p.file.model.state_dtype.unwrap_or(Dtype::Fp32);
        StepModel {
            overhead_s: c.step_overhead_s,
            per_seq_s: c.per_seq_overhead_s,
            // Tensor parallelism splits bytes and FLOPs over the GPUs; communication is not modelled.
            inv_bw: 1.0 / (c.bandwidth_eff_bytes_s * tp),
            dense_weight_bytes: a.always_read_params() as f64 * w.bytes(),
            expert_bytes_all_layers: a.n_layers as f64 * a.expert_params() as f64 * a.expert_dtype(w).bytes(),
            experts_touched,
            arch_for_large_b: a.clone(),
            expert_spread: c.expert_spread,
            kv_bytes_per_token: a.kv_bytes_per_token(kv),
            state_bytes_per_seq: a.linear_state_bytes(state_dtype)
                + a.sliding_kv_bytes_per_token(kv) * a.sliding_window as f64,
            matmul_s_per_token: a.flops_per_token_linear() / (c.matmul_flops_eff_s * tp),
            attn_s_per_pair: a.attn_flops_per_token_pair() / (c.attention_flops_eff_s * tp),
            exposed: 1.0 - c.mem_compute_overlap,
        }
    }

    #[inline]
    fn experts(&self, n_tokens: u32) -> f64 {
        match self.experts_touched.get(n_tokens as usize) {
            Some(&e) => e,
            None => self.arch_for_large_b.experts_touched_spread(n_tokens as f64, self.expert_spread),
        }
    }

    /// Weight bytes a step of `n_tokens` tokens reads.
    #[inline]
    pub fn weight_bytes(&self, n_tokens: u32) -> f64 {
        self.dense_weight_bytes + self.experts(n_tokens) * self.expert_bytes_all_layers
    }

    /// Step duration in seconds.
    #[inline]
    pub fn step_s(&self, b: &BatchShape) -> f64 {
        if b.n_tokens == 0 {
            return 0.0;
        }
        let bytes = self.weight_bytes(b.n_tokens)
            + b.kv_read_tokens as f64 * self.kv_bytes_per_token
            + b.n_seqs as f64 * self.state_bytes_per_seq;
        let mem = bytes * self.inv_bw;
        let compute = b.n_tokens as f64 * self.matmul_s_per_token + b.attn_pairs * self.attn_s_per_pair;
        self.overhead_s + self.per_seq_s * b.n_seqs as f64 + mem.max(compute) + self.exposed * mem.min(compute)
    }

    /// Step duration in integer nanoseconds (at least 1 ns so time always advances).
    #[inline]
    pub fn step_ns(&self, b: &BatchShape) -> u64 {
        ((self.step_s(b) * 1e9).round() as u64).max(1)
    }
}
