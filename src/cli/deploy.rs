//! The deployment flag group every command shares ([`ProfileArgs`]: `--profile --gpu --model --tp
//! --precision ...`, engine settings, the large layouts and the disaggregated pools' flags) and its
//! resolution into a [`Profile`]; errors name the flag.

use capsim::catalog::Catalog;
use capsim::error::{Error, Result};
use capsim::profile::{CapacityPolicy, EngineKind, EngineSettings, Profile, Retarget};
use capsim::units::Dtype;
use clap::{Args, ValueEnum};
use std::path::PathBuf;
/// Which profile, moved where, with which engine settings.
#[derive(Args, Debug, Clone, Default)]
pub struct ProfileArgs {
    /// Profile name (see `capsim profiles`) or a profile TOML file; default: the embedded default.
    #[arg(long, help_heading = "Deployment")]
    pub profile: Option<String>,
    /// Retarget the profile to another GPU of the catalog (keeps fitted efficiencies).
    #[arg(long, help_heading = "Deployment")]
    pub gpu: Option<String>,
    /// Retarget the profile to another model: a catalog name or a config.json path.
    #[arg(long, help_heading = "Deployment")]
    pub model: Option<String>,
    /// Tensor-parallel degree (GPUs per replica).
    #[arg(long, help_heading = "Deployment")]
    pub tp: Option<u32>,
    /// MoE experts placed whole on the GPUs and reached by all-to-all (vLLM --enable-expert-parallel).
    #[arg(long, help_heading = "Deployment")]
    pub expert_parallel: bool,
    /// Attention data-parallel ranks splitting the --tp GPUs: each rank holds its own requests and KV
    /// and runs attention over tp / N GPUs; the MoE layers span all of them (SGLang --dp with
    /// --enable-dp-attention, TensorRT-LLM enable_attention_dp; vLLM -tp T -dp D is --tp T*D
    /// --attention-dp D). MoE models only.
    #[arg(long, help_heading = "Deployment")]
    pub attention_dp: Option<u32>,
    /// Expert-parallel size: GPUs the routed experts are spread over whole, dividing --tp; each expert
    /// is split over tp / N GPUs (TensorRT-LLM moe_expert_parallel_size, SGLang --ep-size).
    /// --expert-parallel is --ep equal to --tp.
    #[arg(long, help_heading = "Deployment")]
    pub ep: Option<u32>,
    /// Pipeline stages, each of --tp GPUs holding n_layers / N layers; N micro-batches in flight
    /// (vLLM --pipeline-parallel-size, SGLang --pp-size).
    #[arg(long, help_heading = "Deployment")]
    pub pp: Option<u32>,
    /// Expert slots beyond the routed experts, copies of busy ones, so that an EP group that does not
    /// divide the experts fills evenly: 256 experts + 32 over --ep 24, 48 or 72 (SGLang
    /// --ep-num-redundant-experts; TensorRT-LLM's load balancer num_slots minus the experts). Their
    /// weights take memory, and a touched expert's copies read its weights too.
    #[arg(long, help_heading = "Deployment")]
    pub redundant_experts: Option<u32>,
    /// Extra GPU catalog file (TOML, models/gpus.toml format) that adds to or overrides the built-in one.
    #[arg(long, help_heading = "Deployment")]
    pub gpus_file: Option<PathBuf>,
    /// Shared hardware model file (written by `capsim calibrate` as hardware.toml or NAME.hardware.toml)
    /// that replaces the built-in one for deployments without measurements.
    #[arg(long, help_heading = "Deployment")]
    pub hardware: Option<PathBuf>,
    /// Engine policy.
    #[arg(long, value_enum, help_heading = "Engine")]
    pub engine: Option<EngineArg>,
    /// Weight precision: bf16, fp16, fp8, mxfp4, nvfp4 or int4 (AWQ/GPTQ W4A16); default: the profile's,
    /// or for another model its config.json quantization_config, else BF16.
    #[arg(long, help_heading = "Deployment")]
    pub precision: Option<String>,
    /// KV cache dtype: bf16, fp16 or fp8.
    #[arg(long, help_heading = "Deployment")]
    pub kv_dtype: Option<String>,
    /// vLLM max_num_batched_tokens (SGLang: chunked_prefill_size).
    #[arg(long, help_heading = "Engine")]
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM max_num_seqs (SGLang: max_running_requests).
    #[arg(long, help_heading = "Engine")]
    pub max_num_seqs: Option<u32>,
    /// KV capacity in tokens (default: derived from GPU memory).
    #[arg(long, help_heading = "Engine")]
    pub kv_capacity_tokens: Option<u64>,
    /// Fraction of GPU memory the engine may use.
    #[arg(long, help_heading = "Engine")]
    pub gpu_memory_utilization: Option<f64>,
    /// KV block size in tokens.
    #[arg(long, help_heading = "Engine")]
    pub block_size: Option<u32>,
    /// SGLang: run decodes inside prefill batches.
    #[arg(long, help_heading = "Engine")]
    pub enable_mixed_chunk: bool,
    /// SGLang: run a decode batch between consecutive prefill batches while requests are decoding.
    #[arg(long, help_heading = "Engine")]
    pub interleave_decode: bool,
    /// SGLang: decode steps run back to back before new requests are considered (--num-continuous-decode-steps).
    #[arg(long, help_heading = "Engine")]
    pub num_continuous_decode_steps: Option<u32>,
    /// SGLang: the scheduler takes new requests only every N decode steps (--scheduler-recv-interval).
    #[arg(long, help_heading = "Engine")]
    pub scheduler_recv_interval: Option<u32>,
    /// Tokens per streamed response (SGLang and vLLM --stream-interval, TensorRT-LLM stream_interval): the API server's per-token cost is paid once per this many tokens, and the client receives them in chunks of this many after the first token alone, so ITL is the gap between chunks (TPOT does not change).
    #[arg(long, help_heading = "Engine")]
    pub stream_interval: Option<u32>,
    /// SGLang: max_prefill_tokens of one prefill batch.
    #[arg(long, help_heading = "Engine")]
    pub max_prefill_tokens: Option<u32>,
    /// SGLang: initial new_token_ratio (admission reservation per running request).
    #[arg(long, help_heading = "Engine")]
    pub new_token_ratio_init: Option<f64>,
    /// SGLang: floor of new_token_ratio.
    #[arg(long, help_heading = "Engine")]
    pub new_token_ratio_min: Option<f64>,
    /// SGLang: decode steps over which new_token_ratio decays from its initial value to its floor.
    #[arg(long, help_heading = "Engine")]
    pub new_token_ratio_decay_steps: Option<u32>,
    /// Engine release whose defaults and scheduler apply, e.g. 0.18.1 (default: the newest capsim
    /// read: vLLM 0.33.0, SGLang 0.5.23, TensorRT-LLM 1.2.1; ENGINES.md lists what changes)
    #[arg(long, help_heading = "Engine")]
    pub engine_version: Option<String>,
    /// vLLM: admit a waiting request only when its whole prompt fits the free KV blocks
    /// (scheduler_reserve_full_isl; default true from 0.19)
    #[arg(long, help_heading = "Engine")]
    pub reserve_full_prompt: Option<bool>,
    /// vLLM: share of KV blocks kept free when admitting waiting requests (--scheduler-watermark)
    #[arg(long, help_heading = "Engine")]
    pub watermark: Option<f64>,
    /// SGLang: clients send ignore_eos (sglang bench_serving's default): from 0.5.22 admission reserves
    /// the whole remaining output
    #[arg(long, help_heading = "Engine")]
    pub ignore_eos: bool,
    /// TensorRT-LLM capacity_scheduler_policy
    #[arg(long, value_enum, help_heading = "Engine")]
    pub capacity_scheduler_policy: Option<CapacityPolicyArg>,
    /// TensorRT-LLM: split prompts over steps (enable_chunked_prefill; default off)
    #[arg(long, help_heading = "Engine")]
    pub enable_chunked_prefill: bool,
    /// TensorRT-LLM: share of the memory free after weights and activations given to the KV cache
    /// (kv_cache_config.free_gpu_memory_fraction; default 0.9)
    #[arg(long, help_heading = "Engine")]
    pub free_gpu_memory_fraction: Option<f64>,
    /// Prefix caching, on by default as in the engines (simulated for vLLM and SGLang: block hashes,
    /// LRU eviction); it matters when requests share a prefix (system prompts, conversations, trace
    /// hash_ids)
    #[arg(long, value_enum, help_heading = "Engine")]
    pub prefix_caching: Option<OnOff>,
    /// Speculative decoding: the draft (mtp: the model's multi-token-prediction layer; eagle: a
    /// one-layer EAGLE head; ngram: prompt lookup on the host). Needs --spec-tokens.
    #[arg(long, value_enum, help_heading = "Speculative decoding")]
    pub spec_method: Option<SpecMethodArg>,
    /// Tokens drafted and verified per decode step (K; SGLang's --speculative-num-draft-tokens minus 1).
    #[arg(long, help_heading = "Speculative decoding")]
    pub spec_tokens: Option<u32>,
    /// Acceptance of each drafted token given the previous one was accepted: A, or a1,...,aK per
    /// position, each in [0, 1] (default for mtp: 0.85, DeepSeek-V3's report; eagle and ngram: required)
    #[arg(long, help_heading = "Speculative decoding")]
    pub spec_accept_rate: Option<String>,
    /// Host memory for KV blocks the GPU prefix cache evicts, GB per replica (vLLM's
    /// OffloadingConnector cpu_bytes_to_use): a later prefix hit there loads them back over the
    /// GPU's host link (PCIe, NVLink-C2C on GB200/GB300) instead of recomputing; 0: off
    #[arg(long, help_heading = "Engine", allow_negative_numbers = true)]
    pub kv_offload_gb: Option<f64>,
    /// Disaggregated prefill/decode: how the router picks each request's workers. round-robin
    /// (Dynamo's default router mode), least-outstanding (load-aware), prefix-aware (a
    /// conversation's later turns to the prefill worker holding its prefix, else least-outstanding:
    /// llm-d's P/D prefix-cache and queue scorers, Dynamo's KV router) [default: round-robin]
    #[arg(long, value_enum, help_heading = "Disaggregated")]
    pub pd_routing: Option<super::capacity::RoutingArg>,
    /// Disaggregated prefill/decode: prefill workers (with --decode-workers; src/cli/disagg.rs).
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_workers: Option<u32>,
    /// GPUs per prefill worker (tensor parallelism); default --tp.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_tp: Option<u32>,
    /// Expert-parallel size of a prefill worker: GPUs its routed experts are spread over whole,
    /// dividing its TP (as --ep; its TP: experts whole per GPU); default the shared --ep.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_ep: Option<u32>,
    /// Redundant expert slots of a prefill worker (as --redundant-experts, over its EP group);
    /// default the shared --redundant-experts.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_redundant_experts: Option<u32>,
    /// Attention data-parallel ranks splitting a prefill worker's GPUs (as --attention-dp; MoE
    /// models only); default the shared --attention-dp.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_attention_dp: Option<u32>,
    /// The prefill workers' GPU; default --gpu.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_gpu: Option<String>,
    /// A prefill worker's running-request cap, each attention-DP rank's (as --max-num-seqs;
    /// TensorRT-LLM max_batch_size); default the shared --max-num-seqs.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_max_num_seqs: Option<u32>,
    /// A prefill worker's token budget per step, each rank's (as --max-num-batched-tokens;
    /// TensorRT-LLM max_num_tokens, SGLang chunked_prefill_size / dp_size); default the shared one.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_max_num_batched_tokens: Option<u32>,
    /// Decode workers (with --prefill-workers).
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_workers: Option<u32>,
    /// GPUs per decode worker (tensor parallelism); default --tp.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_tp: Option<u32>,
    /// Expert-parallel size of a decode worker (as --prefill-ep).
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_ep: Option<u32>,
    /// Redundant expert slots of a decode worker (as --redundant-experts, over its EP group);
    /// default the shared --redundant-experts.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_redundant_experts: Option<u32>,
    /// Attention data-parallel ranks splitting a decode worker's GPUs (as --attention-dp): a
    /// request's KV lives on one rank, so the transfer lands on that rank's tp / N GPUs.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_attention_dp: Option<u32>,
    /// The decode workers' GPU; default --gpu.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_gpu: Option<String>,
    /// A decode worker's running-request cap, each rank's (as --prefill-max-num-seqs).
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_max_num_seqs: Option<u32>,
    /// A decode worker's token budget per step, each rank's (as --prefill-max-num-batched-tokens):
    /// it bounds the tokens the worker computes, not the prompts it receives computed.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_max_num_batched_tokens: Option<u32>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMethodArg {
    Mtp,
    Eagle,
    Ngram,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum EngineArg {
    Vllm,
    Sglang,
    Trtllm,
}

impl From<EngineKind> for EngineArg {
    fn from(k: EngineKind) -> EngineArg {
        match k {
            EngineKind::Vllm => EngineArg::Vllm,
            EngineKind::Sglang => EngineArg::Sglang,
            EngineKind::Trtllm => EngineArg::Trtllm,
        }
    }
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum CapacityPolicyArg {
    GuaranteedNoEvict,
    MaxUtilization,
}

/// A dtype flag's value.
pub fn parse_dtype(flag: &str, s: &str, allowed: &[Dtype]) -> Result<Dtype> {
    let names = allowed.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
    Dtype::parse(s)
        .filter(|d| allowed.contains(d))
        .ok_or_else(|| Error::flag(flag, format!("unknown value `{s}`; one of {names}")))
}

pub const WEIGHT_DTYPES: &[Dtype] = &[Dtype::Bf16, Dtype::Fp16, Dtype::Fp8, Dtype::Mxfp4, Dtype::Int4, Dtype::Nvfp4];
pub const KV_DTYPES: &[Dtype] = &[Dtype::Bf16, Dtype::Fp16, Dtype::Fp8];

impl ProfileArgs {
    /// The deployment changes the flags ask for.
    pub fn retarget(&self) -> Result<Retarget> {
        Ok(Retarget {
            gpu: self.gpu.clone(),
            model: self.model.clone(),
            tensor_parallel: self.tp,
            expert_parallel: self.expert_parallel.then_some(true),
            weight_dtype: self
                .precision
                .as_deref()
                .map(|p| parse_dtype("--precision", p, WEIGHT_DTYPES))
                .transpose()?,
            kv_dtype: self.kv_dtype.as_deref().map(|p| parse_dtype("--kv-dtype", p, KV_DTYPES)).transpose()?,
            engine: self.engine_settings().kind,
        })
    }
    /// The engine settings the flags set (None where not given).
    pub fn engine_settings(&self) -> EngineSettings {
        EngineSettings {
            kind: self.engine.map(|e| match e {
                EngineArg::Vllm => EngineKind::Vllm,
                EngineArg::Sglang => EngineKind::Sglang,
                EngineArg::Trtllm => EngineKind::Trtllm,
            }),
            version: self.engine_version.clone(),
            reserve_full_prompt: self.reserve_full_prompt,
            watermark: self.watermark,
            ignore_eos: self.ignore_eos.then_some(true),
            capacity_scheduler_policy: self.capacity_scheduler_policy.map(|p| match p {
                CapacityPolicyArg::GuaranteedNoEvict => CapacityPolicy::GuaranteedNoEvict,
                CapacityPolicyArg::MaxUtilization => CapacityPolicy::MaxUtilization,
            }),
            enable_chunked_prefill: self.enable_chunked_prefill.then_some(true),
            free_gpu_memory_fraction: self.free_gpu_memory_fraction,
            prefix_caching: self.prefix_caching.map(|v| v == OnOff::On),
            kv_offload_gb: self.kv_offload_gb,
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_num_seqs: self.max_num_seqs,
            block_size_tokens: self.block_size,
            gpu_memory_utilization: self.gpu_memory_utilization,
            kv_capacity_tokens: self.kv_capacity_tokens,
            enable_mixed_chunk: self.enable_mixed_chunk.then_some(true),
            interleave_decode: self.interleave_decode.then_some(true),
            num_continuous_decode_steps: self.num_continuous_decode_steps,
            scheduler_recv_interval: self.scheduler_recv_interval,
            stream_interval: self.stream_interval,
            max_prefill_tokens: self.max_prefill_tokens,
            new_token_ratio_init: self.new_token_ratio_init,
            new_token_ratio_min: self.new_token_ratio_min,
            new_token_ratio_decay_steps: self.new_token_ratio_decay_steps,
            chunked_prefill_size: self.max_num_batched_tokens,
            max_running_requests: self.max_num_seqs,
            attention_dp_balance: None,
            attention_dp_timeout_iters: None,
            attention_dp_batching_wait_iters: None,
        }
    }
    pub fn catalog(&self) -> Result<Catalog> {
        let mut c = Catalog::builtin();
        if let Some(f) = &self.gpus_file {
            c.add_gpu_file(f)?;
        }
        if let Some(f) = &self.hardware {
            c.hardware = capsim::hardware::SharedModel::parse(&f.display().to_string(), &capsim::error::read_file(f)?)?;
        }
        Ok(c)
    }
    /// The flags given, as typed (for commands that take the group only in some modes).
    pub fn given_flags(&self) -> Vec<&'static str> {
        [
            ("--profile", self.profile.is_some()),
            ("--gpu", self.gpu.is_some()),
            ("--model", self.model.is_some()),
            ("--tp", self.tp.is_some()),
            ("--expert-parallel", self.expert_parallel),
            ("--attention-dp", self.attention_dp.is_some()),
            ("--ep", self.ep.is_some()),
            ("--pp", self.pp.is_some()),
            ("--redundant-experts", self.redundant_experts.is_some()),
            ("--gpus-file", self.gpus_file.is_some()),
            ("--hardware", self.hardware.is_some()),
            ("--engine", self.engine.is_some()),
            ("--precision", self.precision.is_some()),
            ("--kv-dtype", self.kv_dtype.is_some()),
            ("--max-num-batched-tokens", self.max_num_batched_tokens.is_some()),
            ("--max-num-seqs", self.max_num_seqs.is_some()),
            ("--kv-capacity-tokens", self.kv_capacity_tokens.is_some()),
            ("--gpu-memory-utilization", self.gpu_memory_utilization.is_some()),
            ("--block-size", self.block_size.is_some()),
            ("--enable-mixed-chunk", self.enable_mixed_chunk),
            ("--interleave-decode", self.interleave_decode),
            ("--num-continuous-decode-steps", self.num_continuous_decode_steps.is_some()),
            ("--scheduler-recv-interval", self.scheduler_recv_interval.is_some()),
            ("--stream-interval", self.stream_interval.is_some()),
            ("--max-prefill-tokens", self.max_prefill_tokens.is_some()),
            ("--new-token-ratio-init", self.new_token_ratio_init.is_some()),
            ("--new-token-ratio-min", self.new_token_ratio_min.is_some()),
            ("--new-token-ratio-decay-steps", self.new_token_ratio_decay_steps.is_some()),
            ("--engine-version", self.engine_version.is_some()),
            ("--reserve-full-prompt", self.reserve_full_prompt.is_some()),
            ("--watermark", self.watermark.is_some()),
            ("--ignore-eos", self.ignore_eos),
            ("--capacity-scheduler-policy", self.capacity_scheduler_policy.is_some()),
            ("--enable-chunked-prefill", self.enable_chunked_prefill),
            ("--free-gpu-memory-fraction", self.free_gpu_memory_fraction.is_some()),
            ("--prefix-caching", self.prefix_caching.is_some()),
            ("--spec-method", self.spec_method.is_some()),
            ("--spec-tokens", self.spec_tokens.is_some()),
            ("--spec-accept-rate", self.spec_accept_rate.is_some()),
            ("--kv-offload-gb", self.kv_offload_gb.is_some()),
        ]
        .into_iter()
        .chain(self.pd_flag_list())
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
    /// The `[gpu]` keys --attention-dp, --ep and --pp set (the profile's own expert_parallel gives way
    /// to --ep; the flag --expert-parallel does not).
    fn set_layout(&self, g: &mut capsim::profile::GpuRef) {
        if let Some(n) = self.attention_dp {
            g.attention_dp = Some(n);
        }
        if let Some(n) = self.ep {
            g.expert_parallel_size = Some(n);
            if !self.expert_parallel {
                g.expert_parallel = None;
            }
        }
        if let Some(n) = self.pp {
            g.pipeline_parallel = Some(n);
        }
        if let Some(n) = self.redundant_experts {
            g.redundant_experts = Some(n);
        }
    }
    /// Whether --attention-dp, --ep, --pp or --redundant-experts is given.
    fn layout_given(&self) -> bool {
        self.attention_dp.is_some() || self.ep.is_some() || self.pp.is_some() || self.redundant_experts.is_some()
    }
    /// The layout the layout flags state for `arch` on `gpu` at `tp` GPUs (profile/parallel.rs), the
    /// plain one where none is given; a bad one is refused naming its flag. For a deployment built
    /// from flags alone (calibrate --runs); [`Self::resolve`] applies the same flags to a profile.
    pub fn parallel(
        &self,
        arch: &capsim::catalog::ModelArch,
        gpu: &capsim::catalog::GpuSpec,
        tp: u32,
    ) -> Result<capsim::profile::Parallel> {
        if !self.layout_given() {
            return Ok(capsim::profile::Parallel::default());
        }
        let mut g = capsim::profile::GpuRef::default();
        self.set_layout(&mut g);
        capsim::profile::Parallel::resolve("command line", arch, gpu, tp, &g).map_err(layout_error)
    }
    /// `p` with the layout --attention-dp, --ep and --pp state (profile/parallel.rs); `p` itself when
    /// none is given. A bad layout is refused naming its flag.
    fn apply_layout(&self, catalog: &Catalog, p: Profile) -> Result<Profile> {
        if !self.layout_given() {
            return Ok(p);
        }
        let mut f = p.file.clone();
        self.set_layout(&mut f.gpu);
        // A KV capacity pinned for another layout no longer holds.
        f.engine.kv_capacity_tokens = None;
        let mut r = f.resolve("command line", catalog).map_err(layout_error)?;
        r.retargeted_from = p.retargeted_from.clone();
        r.retarget_method = p.retarget_method.clone();
        // A layout other than the one the profile's step costs were measured on (a calibrated one
        // GPU run as two pipeline stages) is an extrapolation, said as such, as --tp's is.
        if r.parallel != p.parallel {
            let (a, b) = (&p.parallel, &r.parallel);
            let what = format!(
                "layout moved from the profile's (attention DP {}, EP {}, PP {}, redundant experts {}) to attention DP {}, EP {}, PP {}, redundant experts {}: its step costs, measured on the former, run on the latter",
                a.attention_dp,
                a.expert_parallel_size,
                a.pipeline_parallel,
                a.redundant_experts,
                b.attention_dp,
                b.expert_parallel_size,
                b.pipeline_parallel,
                b.redundant_experts
            );
            r.retarget_method = Some(match r.retarget_method.take() {
                Some(m) => format!("{m}; {what}"),
                None => what,
            });
            r.retargeted_from.get_or_insert_with(|| p.file.name.clone());
        }
        Ok(r)
    }
    /// The resolved profile: loaded, engine overrides applied, retargeted if asked. A name no catalog
    /// knows, or a GPU count out of range, is refused naming the flag that gave it.
    pub fn resolve(&self, catalog: &Catalog) -> Result<Profile> {
        self.refuse_pools(
            "a disaggregated deployment runs in simulate, capacity --disaggregated, explain and validate --runs only",
        )?;
        if let Some(gb) = self.kv_offload_gb {
            capsim::profile::offload::check_gb(gb).map_err(|msg| Error::flag("--kv-offload-gb", msg))?;
        }
        let spec = self.speculative()?;
        let mut p = self.resolve_plain(catalog)?;
        if spec.is_some() {
            // Validated by `speculative` as ProfileFile::resolve validates a profile's table.
            p.file.speculative = spec;
        }
        Ok(p)
    }
    /// The speculative decoding the flags ask for (None without --spec-method), each problem named by
    /// its flag.
    pub fn speculative(&self) -> Result<Option<capsim::profile::Speculative>> {
        use capsim::profile::spec::{parse_rates, MAX_SPEC_TOKENS, MTP_DEFAULT_ACCEPT, MTP_DEFAULT_SOURCE};
        use capsim::profile::{SpecMethod, Speculative};
        let Some(m) = self.spec_method else {
            for (flag, given) in
                [("--spec-tokens", self.spec_tokens.is_some()), ("--spec-accept-rate", self.spec_accept_rate.is_some())]
            {
                if given {
                    return Err(Error::flag(flag, "needs --spec-method (mtp, eagle or ngram)"));
                }
            }
            return Ok(None);
        };
        let method = match m {
            SpecMethodArg::Mtp => SpecMethod::Mtp,
            SpecMethodArg::Eagle => SpecMethod::Eagle,
            SpecMethodArg::Ngram => SpecMethod::Ngram,
        };
        let k = self.spec_tokens.ok_or_else(|| {
            Error::flag(
                "--spec-tokens",
                format!("required with --spec-method: tokens drafted per step, 1..={MAX_SPEC_TOKENS}"),
            )
        })?;
        if k == 0 || k > MAX_SPEC_TOKENS {
            return Err(Error::flag("--spec-tokens", format!("must be in 1..={MAX_SPEC_TOKENS}, got {k}")));
        }
        let (rates, source) = match (&self.spec_accept_rate, method) {
            (Some(s), _) => {
                (parse_rates(s).map_err(|e| Error::flag("--spec-accept-rate", e))?, "--spec-accept-rate".to_string())
            }
            (None, SpecMethod::Mtp) => (vec![MTP_DEFAULT_ACCEPT], MTP_DEFAULT_SOURCE.to_string()),
            (None, _) => {
                return Err(Error::flag(
                    "--spec-accept-rate",
                    format!(
                        "required with --spec-method {}: no published acceptance applies to every model",
                        method.as_str()
                    ),
                ))
            }
        };
        let mut s = Speculative::new(method, k, rates);
        s.accept_rate_source = source;
        if let Some((_, msg)) = s.problem() {
            return Err(Error::flag("--spec-accept-rate", msg));
        }
        Ok(Some(s))
    }
    /// The flag that set an engine field of the profile (`engine.max_num_seqs`: `--max-num-seqs`),
    /// where it was given: an error in the field is the flag's.
    fn engine_flag(&self, field: Option<&str>) -> Option<&'static str> {
        let (flag, given) = match field? {
            "engine.kv_offload_gb" => ("--kv-offload-gb", self.kv_offload_gb.is_some()),
            "engine.kv_capacity_tokens" => ("--kv-capacity-tokens", self.kv_capacity_tokens.is_some()),
            "engine.block_size_tokens" => ("--block-size", self.block_size.is_some()),
            "engine.max_num_seqs" => ("--max-num-seqs", self.max_num_seqs.is_some()),
            "engine.max_num_batched_tokens" => ("--max-num-batched-tokens", self.max_num_batched_tokens.is_some()),
            "engine.max_prefill_tokens" => ("--max-prefill-tokens", self.max_prefill_tokens.is_some()),
            "engine.gpu_memory_utilization" => ("--gpu-memory-utilization", self.gpu_memory_utilization.is_some()),
            "engine.free_gpu_memory_fraction" => {
                ("--free-gpu-memory-fraction", self.free_gpu_memory_fraction.is_some())
            }
            "engine.stream_interval" => ("--stream-interval", self.stream_interval.is_some()),
            "engine.scheduler_recv_interval" => ("--scheduler-recv-interval", self.scheduler_recv_interval.is_some()),
            "engine.watermark" => ("--watermark", self.watermark.is_some()),
            "engine.new_token_ratio_init" => ("--new-token-ratio-init", self.new_token_ratio_init.is_some()),
            "engine.version" => ("--engine-version", self.engine_version.is_some()),
            _ => return None,
        };
        given.then_some(flag)
    }
    /// [`ProfileArgs::resolve`] without speculative decoding.
    fn resolve_plain(&self, catalog: &Catalog) -> Result<Profile> {
        let base = Profile::load(self.profile.as_deref(), catalog).map_err(|e| match e {
            Error::Unknown { kind, .. } if kind.starts_with("profile") => Error::flag("--profile", e.to_string()),
            other => other,
        })?;
        let over = self.engine_settings();
        // The layout flags apply before the move, so that --tp and --attention-dp are checked together.
        let mut base = base;
        self.set_layout(&mut base.file.gpu);
        let p = base.retarget(catalog, &self.retarget()?).map_err(|e| {
            let flag = match &e {
                Error::Unknown { kind: "GPU", .. } => "--gpu",
                Error::Unknown { kind: "model", .. } => "--model",
                Error::Input { at, .. } if at.field.as_deref() == Some("gpu.tensor_parallel") => "--tp",
                Error::Input { at, .. }
                    if layout_flag(at.field.as_deref()).is_some()
                        && at.field.as_deref() != Some("gpu.expert_parallel") =>
                {
                    layout_flag(at.field.as_deref()).unwrap_or("--tp")
                }
                _ => return e,
            };
            match e {
                Error::Input { msg, .. } => Error::flag(flag, msg),
                other => Error::flag(flag, other.to_string()),
            }
        })?;
        let p = self.apply_layout(catalog, p)?;
        if over == EngineSettings::default() {
            return Ok(p);
        }
        let mut f = p.file.clone();
        let switched = over.kind.filter(|&k| k != p.engine.kind);
        if switched.is_some() {
            // Another engine: none of the profile's engine settings (a fitted memory fraction, a
            // running-sequence cap) means the same thing there; start from that engine's defaults.
            f.engine = EngineSettings::default();
        }
        f.engine.merge(&over);
        let mut r = f.resolve("command line", catalog).map_err(|e| match e {
            Error::Input { at, msg } => match self.engine_flag(at.field.as_deref()) {
                Some(flag) => Error::flag(flag, msg),
                None => Error::Input { at, msg },
            },
            other => other,
        })?;
        r.retargeted_from = p.retargeted_from.clone();
        r.retarget_method = p.retarget_method.clone();
        if let Some(k) = switched {
            // The step costs were measured under the profile's engine; another engine's scheduler runs
            // on them, its own kernels and overheads unmeasured: an extrapolation, said as such.
            let why = format!(
                "engine switched from {} to {}: its scheduler and memory formula, on step costs measured under {}",
                p.engine.kind.as_str(),
                k.as_str(),
                p.engine.kind.as_str()
            );
            r.retargeted_from.get_or_insert_with(|| p.name().to_string());
            r.retarget_method = Some(match r.retarget_method.take() {
                Some(m) => format!("{m}; {why}"),
                None => why,
            });
        }
        Ok(r)
    }
}

/// An error of a layout field (profile/parallel.rs) named by its flag; any other as it is.
fn layout_error(e: Error) -> Error {
    match e {
        Error::Input { at, msg } => match layout_flag(at.field.as_deref()) {
            Some(flag) => Error::flag(flag, msg),
            None => Error::Input { at, msg },
        },
        other => other,
    }
}

/// The flag of a layout field of the profile's `[gpu]` table (profile/parallel.rs).
fn layout_flag(field: Option<&str>) -> Option<&'static str> {
    match field? {
        "gpu.attention_dp" => Some("--attention-dp"),
        "gpu.expert_parallel_size" => Some("--ep"),
        "gpu.pipeline_parallel" => Some("--pp"),
        "gpu.redundant_experts" => Some("--redundant-experts"),
        "gpu.expert_parallel" => Some("--expert-parallel"),
        _ => None,
    }
}
