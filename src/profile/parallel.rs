//! Attention data parallelism, expert parallelism wider than or split from tensor parallelism, and
//! pipeline parallelism (issue 25): the layout of one replica's GPUs, validated once.
//!
//! How capsim counts GPUs (ENGINES.md, "Large deployments"): `tensor_parallel` is the GPUs of one
//! pipeline stage, as SGLang and TensorRT-LLM count them; a replica uses
//! `tensor_parallel x pipeline_parallel` GPUs.
//! - `attention_dp` ranks split those GPUs for attention: each rank holds its own requests and KV and
//!   runs attention over `tensor_parallel / attention_dp` GPUs, its attention and dense weights
//!   replicated per rank; the MoE layers span all the GPUs. SGLang `--tp 8 --dp 8
//!   --enable-dp-attention` (server_args.py: `tp_size % dp_size == 0`, attention TP = tp / dp) and
//!   TensorRT-LLM `tp_size: 8, enable_attention_dp: true` (attention TP 1, one rank per GPU) are
//!   `tensor_parallel 8, attention_dp 8`. vLLM `--tensor-parallel-size T --data-parallel-size D
//!   --enable-expert-parallel` runs D engines of T GPUs whose MoE layers form one EP group of T x D
//!   (vllm/config/parallel.py: EP size = TP x DP): `tensor_parallel T x D, attention_dp D,
//!   expert_parallel_size T x D`. aiconfigurator's rows (`tp_size` t is the attention TP,
//!   `attention_dp_size` d; aic-core sdk/backends/base_backend.py: GPUs per worker tp x pp x dp,
//!   global batch = bs x attention_dp_size) are `tensor_parallel t x d, attention_dp d`.
//! - `expert_parallel_size` E: the experts are spread whole over E GPUs, and each expert is split over
//!   `tensor_parallel / E` GPUs (TensorRT-LLM moe_expert_parallel_size x moe_tensor_parallel_size =
//!   tp_size, llmapi/llm_args.py; SGLang --ep-size divides --tp). E = tensor_parallel is the
//!   `expert_parallel = true` of plain profiles (vLLM --enable-expert-parallel).
//! - `redundant_experts` R: extra expert slots holding copies of the busiest experts, so that the
//!   n routed experts plus R fill the EP group evenly, (n + R) / E slots per GPU (SGLang
//!   --ep-num-redundant-experts, server_args.py; TensorRT-LLM's MoE load balancer `num_slots` = n +
//!   R). This is how an EP group that does not divide the experts runs: DeepSeek-R1's 256 experts
//!   over 24, 48 or 72 GPUs with R = 32 (NVIDIA/srt-slurm recipes/gb200-fp8/8k1k/max-tpt-6p1d.yaml:
//!   `ep-size: 24`, `ep-num-redundant-experts: 32`). Their weights are resident memory, and a
//!   touched expert's copies take some of its tokens on their own GPUs, each reading the weights:
//!   a step reads (n + R) / n of the touched experts' bytes (sim/step.rs).
//! - `pipeline_parallel` P: P stages of n_layers / P layers, each on `tensor_parallel` GPUs (vLLM
//!   --pipeline-parallel-size, SGLang --pp-size, TensorRT-LLM pp_size); where P does not divide the
//!   layers the largest stage holds ceil(n_layers / P) ([`Parallel::stage_imbalance`]).

use crate::catalog::{GpuSpec, ModelArch};
use crate::error::{Error, Result};
use crate::units::Dtype;
use serde::Serialize;

/// The most redundant expert slots a layout may state (the recipes use 32; a bound that keeps the
/// arithmetic far from overflow).
pub const MAX_REDUNDANT_EXPERTS: u32 = 1 << 16;

/// A replica's layout beyond plain tensor parallelism. [`Parallel::plain`] is every profile that
/// states none of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Parallel {
    /// Attention data-parallel ranks (1: none).
    pub attention_dp: u32,
    /// GPUs the experts are spread over whole (1: experts split by tensor parallelism only).
    pub expert_parallel_size: u32,
    /// Pipeline stages (1: none).
    pub pipeline_parallel: u32,
    /// Expert slots beyond the routed experts, holding copies of busy ones (0: none).
    pub redundant_experts: u32,
}

impl Default for Parallel {
    fn default() -> Parallel {
        Parallel::plain()
    }
}

impl Parallel {
    pub const fn plain() -> Parallel {
        Parallel { attention_dp: 1, expert_parallel_size: 1, pipeline_parallel: 1, redundant_experts: 0 }
    }

    /// The `[gpu]` fields that state this layout (None where plain), for a profile file built from a
    /// deployment.
    pub fn gpu_ref(&self) -> super::GpuRef {
        let set = |v: u32| (v > 1).then_some(v);
        super::GpuRef {
            attention_dp: set(self.attention_dp),
            expert_parallel_size: set(self.expert_parallel_size),
            pipeline_parallel: set(self.pipeline_parallel),
            redundant_experts: (self.redundant_experts > 0).then_some(self.redundant_experts),
            ..Default::default()
        }
    }

    /// Serde's test for leaving the layout out of a plain deployment's JSON.
    pub fn is_default(&self) -> bool {
        *self == Parallel::plain()
    }

    /// Neither attention DP nor PP (expert parallelism, if any, equal to the TP group: the plain
    /// `expert_parallel` layout).
    pub fn is_plain(&self) -> bool {
        self.attention_dp == 1 && self.pipeline_parallel == 1
    }

    /// The step model needs the large-deployment arithmetic (sim/step_large.rs): attention DP, PP, or
    /// experts split over TP and EP at once.
    pub fn is_large(&self, tp: u32) -> bool {
        !self.is_plain() || self.wide_ep(tp)
    }

    /// Experts spread over an EP group other than the TP group (wider, or split over TP and EP at
    /// once); an EP group equal to TP is the plain `expert_parallel` layout.
    pub fn wide_ep(&self, tp: u32) -> bool {
        self.expert_parallel_size > 1 && self.expert_parallel_size != tp
    }

    /// The largest pipeline stage's layers over the mean stage's: 1 where the stages divide the
    /// layers, P x ceil(L / P) / L where they do not (DeepSeek-R1's 61 layers over 2 stages: 31
    /// and 30, 1.016). Every engine splits unevenly rather than refuse: vLLM and SGLang
    /// `get_pp_indices` (vllm/distributed/utils.py in 0.12.0: the remainder goes one layer each to
    /// the stages before the last; sglang/srt/distributed/utils.py in 0.5.9: to the last stages),
    /// both overridable by VLLM_PP_LAYER_PARTITION / SGLANG_PP_LAYER_PARTITION. Whichever stages
    /// take the remainder, the largest holds ceil(L / P) layers: it sets the pipeline's period
    /// with every stage busy (sim/step.rs) and, holding that share of the weights and of each
    /// token's KV, the replica's KV capacity (profile/engine.rs). Weights are counted in
    /// proportion to layers; the embeddings on the first and last stages are what vLLM's
    /// placement of the remainder balances.
    pub fn stage_imbalance(&self, arch: &ModelArch) -> f64 {
        let (p, l) = (self.pipeline_parallel.max(1), arch.n_layers.max(1));
        (p * l.div_ceil(p)) as f64 / l as f64
    }

    /// GPUs of the whole replica.
    pub fn gpus(&self, tp: u32) -> u32 {
        tp * self.pipeline_parallel
    }

    /// GPUs each attention rank runs attention over.
    pub fn attention_tp(&self, tp: u32) -> u32 {
        tp / self.attention_dp
    }

    /// GPUs each expert is split over (tensor parallelism inside the MoE layers).
    pub fn moe_tp(&self, tp: u32) -> u32 {
        tp / self.expert_parallel_size
    }

    /// GPUs each expert is split over for a replica of `tp` GPUs whose plain `expert_parallel`
    /// switch may also place whole experts on each GPU (a profile's or deployment's pair).
    pub fn expert_split(&self, tp: u32, expert_parallel: bool) -> u32 {
        if expert_parallel {
            1
        } else {
            self.moe_tp(tp).max(1)
        }
    }

    /// GPUs a MoE layer's experts are spread over whole: `--ep N`, the whole TP group under the
    /// plain `expert_parallel` switch, 1 where each expert is split over the TP group.
    pub fn expert_gpus(&self, tp: u32, expert_parallel: bool) -> u32 {
        tp / self.expert_split(tp, expert_parallel)
    }

    /// Copies of the KV cache, relative to one, that one attention rank stores over its GPUs.
    pub fn kv_replication(&self, arch: &ModelArch, tp: u32) -> f64 {
        arch.kv_replication(self.attention_tp(tp))
    }

    /// Weight bytes resident over the replica: the attention, dense and embedding weights once per
    /// attention rank, the routed experts once, and the redundant experts' copies.
    pub fn weight_bytes(&self, arch: &ModelArch, w: Dtype) -> f64 {
        let all = arch.weight_bytes(w);
        let one_expert = arch.n_moe_layers() as f64 * arch.expert_params() as f64 * arch.expert_dtype(w).bytes();
        let copies = self.redundant_experts as f64 * one_expert;
        if self.attention_dp == 1 {
            return all + copies;
        }
        let experts = arch.moe.as_ref().map_or(0.0, |m| m.n_experts as f64) * one_expert;
        (all - experts) * self.attention_dp as f64 + experts + copies
    }

    /// The layout a profile's `[gpu]` table states, checked against the model and the GPU count;
    /// errors name the field (`gpu.attention_dp`, `gpu.expert_parallel_size`, `gpu.pipeline_parallel`),
    /// which the CLI maps to its flags.
    pub fn resolve(source: &str, arch: &ModelArch, _gpu: &GpuSpec, tp: u32, g: &super::GpuRef) -> Result<Parallel> {
        let err = |f: &str, msg: String| Error::input(source, None, Some(f), msg);
        let dp = g.attention_dp.unwrap_or(1);
        let pp = g.pipeline_parallel.unwrap_or(1);
        let alias = g.expert_parallel.unwrap_or(false);
        let redundant = g.redundant_experts.unwrap_or(0);
        if redundant > MAX_REDUNDANT_EXPERTS {
            return Err(err(
                "gpu.redundant_experts",
                format!("must be at most {MAX_REDUNDANT_EXPERTS}, got {redundant}"),
            ));
        }
        if dp == 0 {
            return Err(err("gpu.attention_dp", "must be at least 1".into()));
        }
        if dp > tp {
            return Err(err(
                "gpu.attention_dp",
                format!(
                    "{dp} attention DP ranks but only {tp} GPUs (tensor_parallel {tp}): each rank needs at least one GPU; the ranks split the tensor-parallel GPUs (SGLang --dp with --tp, TensorRT-LLM enable_attention_dp)"
                ),
            ));
        }
        if !tp.is_multiple_of(dp) {
            return Err(err(
                "gpu.attention_dp",
                format!("{dp} attention DP ranks do not divide the {tp} GPUs (SGLang asserts tp_size % dp_size == 0)"),
            ));
        }
        if dp > 1 && arch.moe.is_none() {
            // SGLang server_args.py: DP attention is for DeepSeek-style MoE models (the MoE layers are
            // what the ranks share); TensorRT-LLM's enable_attention_dp likewise exists for MoE layers.
            return Err(err(
                "gpu.attention_dp",
                format!(
                    "{} is a dense model: attention DP ranks share only MoE layers; run {dp} replicas instead",
                    arch.name
                ),
            ));
        }
        if let Some(why) = arch.tensor_parallel_problem(tp / dp) {
            return Err(err(
                "gpu.attention_dp",
                format!("each of the {dp} ranks runs attention over {} GPUs: {why}", tp / dp),
            ));
        }
        let ep = match (g.expert_parallel_size, alias) {
            (Some(e), true) if e != tp => {
                return Err(err(
                    "gpu.expert_parallel_size",
                    format!("{e} contradicts expert_parallel = true (experts over all {tp} GPUs)"),
                ))
            }
            (Some(e), _) => e,
            // A dense model with expert_parallel = true is refused by its own field's check.
            (None, true) => {
                if arch.moe.is_some() {
                    tp
                } else {
                    1
                }
            }
            (None, false) => 1,
        };
        if ep == 0 {
            return Err(err("gpu.expert_parallel_size", "must be at least 1".into()));
        }
        if ep > 1 {
            let Some(m) = &arch.moe else {
                return Err(err("gpu.expert_parallel_size", format!("{} has no experts", arch.name)));
            };
            if !tp.is_multiple_of(ep) {
                return Err(err(
                    "gpu.expert_parallel_size",
                    format!("{ep} does not divide the {tp} GPUs of a stage (each expert is split over tp / ep GPUs)"),
                ));
            }
            let slots = m.n_experts as u64 + redundant as u64;
            if !slots.is_multiple_of(ep as u64) {
                let (field, msg) = if redundant == 0 {
                    let r = (ep as u64 - m.n_experts as u64 % ep as u64) % ep as u64;
                    (
                        "gpu.expert_parallel_size",
                        format!(
                            "{ep} does not divide the {} routed experts of {}; engines run such a group with redundant experts filling it ({r} or more, a multiple of {ep} apart: SGLang --ep-num-redundant-experts, TensorRT-LLM's load balancer num_slots)",
                            m.n_experts, arch.name
                        ),
                    )
                } else {
                    (
                        "gpu.redundant_experts",
                        format!(
                            "{} routed experts of {} plus {redundant} redundant make {slots} slots, which the {ep} GPUs of the EP group do not share evenly",
                            m.n_experts, arch.name
                        ),
                    )
                };
                return Err(err(field, msg));
            }
        }
        if redundant > 0 && ep <= 1 {
            return Err(err(
                "gpu.redundant_experts",
                "redundant experts need expert parallelism (an EP size above 1): they are copies placed on other GPUs of the EP group".into(),
            ));
        }
        if pp == 0 {
            return Err(err("gpu.pipeline_parallel", "must be at least 1".into()));
        }
        if pp > arch.n_layers {
            return Err(err(
                "gpu.pipeline_parallel",
                format!(
                    "{pp} stages but {} has only {} layers: each stage needs at least one",
                    arch.name, arch.n_layers
                ),
            ));
        }
        Ok(Parallel { attention_dp: dp, expert_parallel_size: ep, pipeline_parallel: pp, redundant_experts: redundant })
    }
}
