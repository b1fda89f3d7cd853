//! Moving a profile to another GPU, model, GPU count or precision: its own fitted shares of the
//! peaks where the model stays, the shared hardware model (crate::hardware) where it changes.

use super::{default_prefill_budget, CoefficientSigmas, EngineKind, Profile};
use crate::catalog::Catalog;
use crate::error::Result;
use crate::units::Dtype;

/// Where to move a profile: each None keeps the profile's own.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Retarget {
    pub gpu: Option<String>,
    pub model: Option<String>,
    pub tensor_parallel: Option<u32>,
    pub expert_parallel: Option<bool>,
    pub weight_dtype: Option<Dtype>,
    pub kv_dtype: Option<Dtype>,
    /// The engine the deployment will run under. Where the coefficients come from the learned step
    /// model (another model), they are looked up for this engine, and the fit-in-memory check uses
    /// its memory formula: the engine's own offsets are what the corpus learned per engine.
    pub engine: Option<EngineKind>,
}

impl Profile {
    /// Move the profile to another GPU, model, tensor-parallel degree, expert layout or precision.
    ///
    /// - Another model: the profile's fitted numbers belong to its own kernel mix, so the coefficients
    ///   come from the shared hardware model (`catalog.hardware`, crate::hardware) for the new model,
    ///   GPU and dtype, with its uncertainties. The weights' precision is `to.weight_dtype`, else the
    ///   checkpoint's own quantization_config, else a precision named in the model's name (`-FP8`,
    ///   `-AWQ`), else BF16; the KV cache likewise (`to.kv_dtype`, the config's, BF16).
    /// - Same model elsewhere: the profile keeps its fitted efficiencies (each coefficient's share of
    ///   the peak it is bounded by), each pulled toward the shared model's by the two uncertainties
    ///   (an estimate the profile could not identify takes the shared one), and swaps peaks, byte and
    ///   FLOP counts (DESIGN.md section 1); its uncertainties and covariance are widened by the shared
    ///   model's spread across deployments. A config.json of the same architecture counts as the same
    ///   model, served in the checkpoint's own precision.
    ///
    /// Every change is applied before the one fit-in-memory check, so a precision change that only
    /// fits the new model is accepted.
    pub fn retarget(&self, catalog: &Catalog, to: &Retarget) -> Result<Profile> {
        let new_gpu = match to.gpu.as_deref() {
            Some(g) => catalog.gpu(g)?.clone(),
            None => self.gpu.clone(),
        };
        let new_arch = match to.model.as_deref() {
            Some(m) => Some(catalog.model(m)?),
            None => None,
        };
        // The same architecture under another name (a config.json path of the profile's model) is the
        // same kernel mix: the profile's own efficiencies still apply.
        let model_changed = new_arch.as_ref().is_some_and(|a| !a.same_architecture(&self.arch));
        // The precisions: the flags; else, for a model named by a config.json file, the checkpoint's
        // own (quantization_config, else BF16); for a catalog name, a precision in the name or the
        // config, else (same model) the profile's own, (another model) BF16.
        let named = to.model.as_deref().unwrap_or("");
        let by_file = named.ends_with(".json") || (!named.is_empty() && std::path::Path::new(named).is_file());
        let (w_new, kv_new) = match &new_arch {
            Some(a) if model_changed || by_file => (
                to.weight_dtype.or(a.weight_dtype_native).or_else(|| dtype_in_name(named)).unwrap_or(Dtype::Bf16),
                to.kv_dtype.or(a.kv_dtype_native).unwrap_or(Dtype::Bf16),
            ),
            Some(a) => (
                to.weight_dtype
                    .or(a.weight_dtype_native)
                    .or_else(|| dtype_in_name(named))
                    .unwrap_or(self.file.model.weight_dtype),
                to.kv_dtype.or(a.kv_dtype_native).unwrap_or(self.file.model.kv_dtype),
            ),
            None => (
                to.weight_dtype.unwrap_or(self.file.model.weight_dtype),
                to.kv_dtype.unwrap_or(self.file.model.kv_dtype),
            ),
        };
        let same_gpu = new_gpu.name == self.gpu.name;
        let same_tp = to.tensor_parallel.is_none_or(|t| t == self.tensor_parallel);
        let same_ep = to.expert_parallel.is_none_or(|e| e == self.expert_parallel);
        let same_dtypes = w_new == self.file.model.weight_dtype && kv_new == self.file.model.kv_dtype;
        if same_gpu && !model_changed && same_tp && same_ep && same_dtypes {
            // Only the engine may differ: the caller switches it on the profile's own step costs.
            return Ok(self.clone());
        }
        let mut f = self.file.clone();
        let old_gpu = self.gpu.clone();
        let w_old = f.model.weight_dtype;
        f.gpu.name = new_gpu.name.clone();
        if let Some(tp) = to.tensor_parallel {
            f.gpu.tensor_parallel = Some(tp);
        }
        if let Some(ep) = to.expert_parallel {
            f.gpu.expert_parallel = Some(ep);
        }
        // Engine defaults that depend on the GPU or the model are re-derived unless the profile pinned
        // them; a KV capacity and memory fraction fitted on the old deployment no longer apply.
        f.engine.kv_capacity_tokens = None;
        if !same_gpu || model_changed {
            f.engine.max_num_batched_tokens = None;
            f.engine.max_num_seqs = None;
            f.engine.chunked_prefill_size = None;
            f.engine.gpu_memory_utilization = None;
        }
        let old_kind = self.engine.kind;
        let engine_switch = to.engine.filter(|&k| k != old_kind);
        if let Some(k) = engine_switch {
            // None of the old engine's settings (a fitted memory fraction, a running-sequence cap)
            // means the same thing under another engine: start from that engine's defaults.
            f.engine = super::EngineSettings { kind: Some(k), ..Default::default() };
        }
        let kind = f.engine.kind.unwrap_or(EngineKind::Vllm);
        let chunk = default_prefill_budget(kind, &f.engine, &new_gpu);
        let shared = &catalog.hardware;
        let method;
        if let (true, Some(arch)) = (model_changed, &new_arch) {
            let w = w_new;
            f.model.weight_dtype = w;
            f.model.kv_dtype = kv_new;
            f.model.name = named.to_string();
            f.model.state_dtype = None;
            let (c, sig) = match &catalog.learned {
                Some(m) => {
                    let l = m.lookup_arch(&new_gpu.name, kind.as_str(), w, arch, None);
                    // The layout the retargeted file states; one that does not resolve is refused,
                    // naming its field, when the file is resolved below.
                    let tp = f.gpu.tensor_parallel.unwrap_or(1).max(1);
                    let moe_tp = crate::profile::Parallel::resolve(&f.name, arch, &new_gpu, tp, &f.gpu)
                        .map_or(1, |par| par.expert_split(tp, f.gpu.expert_parallel.unwrap_or(false)));
                    crate::hardware::coefficients_from_learned(&l, shared, arch, &new_gpu, w, moe_tp)
                }
                None => shared.coefficients_for(arch, &new_gpu, w, chunk),
            };
            f.coefficients = c;
            f.sigmas = Some(sig);
            f.covariance = None;
            method = if catalog.learned.is_some() {
                "another model: coefficients from the step model learned across the corpus (models/learned.toml)"
            } else {
                "another model: coefficients from the shared hardware model (models/hardware.toml)"
            };
        } else {
            let w = w_new;
            f.model.weight_dtype = w;
            f.model.kv_dtype = kv_new;
            // Each coefficient's share of its peak (or its value): the profile's own estimate pulled
            // toward the shared model's by precision (the posterior of a normal prior of the shared
            // spread and a likelihood of the fit's own sigma); a coefficient the profile could not
            // identify takes the shared value.
            let own = self.file.sigmas.unwrap_or(CoefficientSigmas::unidentified());
            let c0 = self.coefficients;
            let (bw0, mm0, at0) =
                (old_gpu.hbm_bandwidth_bytes_s(), old_gpu.dense_flops_s(w_old), old_gpu.dense_flops_s(Dtype::Bf16));
            let blend_sigma = shared.blend_sigma_for(&self.arch, chunk);
            let layers = self.arch.n_layers as f64;
            let c = &mut f.coefficients;
            c.bandwidth_eff_bytes_s = shrink(
                c0.bandwidth_eff_bytes_s / bw0,
                own.bandwidth_eff_bytes_s,
                Some(1.0),
                shared.bandwidth_frac.pair(),
            ) * new_gpu.hbm_bandwidth_bytes_s();
            c.matmul_flops_eff_s = shrink(
                c0.matmul_flops_eff_s / mm0,
                own.matmul_flops_eff_s,
                Some(1.0),
                (shared.blend_for(&self.arch, chunk), blend_sigma),
            ) * new_gpu.dense_flops_s(w);
            c.attention_flops_eff_s = shrink(
                c0.attention_flops_eff_s / at0,
                own.attention_flops_eff_s,
                Some(1.0),
                shared.attention_frac.pair(),
            ) * new_gpu.dense_flops_s(Dtype::Bf16);
            c.step_overhead_s =
                shrink(c0.step_overhead_s / layers, own.step_overhead_s, None, shared.step_overhead_per_layer_s.pair())
                    * layers;
            c.per_seq_overhead_s =
                shrink(c0.per_seq_overhead_s, own.per_seq_overhead_s, None, shared.per_seq_overhead_s.pair());
            c.request_overhead_s =
                shrink(c0.request_overhead_s, own.request_overhead_s, None, shared.request_overhead_s.pair());
            c.frontend_serial_s =
                shrink(c0.frontend_serial_s, own.frontend_serial_s, None, shared.frontend_serial_s.pair());
            c.mem_compute_overlap =
                shrink(c0.mem_compute_overlap, own.mem_compute_overlap, Some(1.0), shared.mem_compute_overlap.pair())
                    .min(1.0);
            if self.arch.moe.is_some() {
                c.expert_spread =
                    shrink(c0.expert_spread, own.expert_spread, Some(1.0), shared.expert_spread.pair()).min(1.0);
            }
            if c.exchange_latency_s == 0.0 {
                // No report runs attention-DP ranks, so no profile fit identifies the exchange
                // between them: the value learned on the corpus's attention-DP deployments.
                c.exchange_latency_s = catalog.learned.as_ref().map_or(0.0, |m| m.exchange_latency_s());
            }
            f.sigmas = Some(shared.widen(&own));
            // The fit's covariance, widened on its diagonal by the spread across deployments.
            if let (Some(cov), Some(wide)) = (f.covariance.as_mut(), f.sigmas) {
                for (k, name) in cov.names.iter().enumerate() {
                    let (o, w) = (own.named(name).unwrap_or(0.0), wide.named(name).unwrap_or(0.0));
                    cov.matrix[k][k] += (w * w - o * o).max(0.0);
                }
            }
            method = "same model: fitted shares of the peaks kept, pulled toward the shared hardware model by their uncertainty; peaks and counts swapped";
        }
        let method = match engine_switch {
            // The profile's own step costs were measured under its engine; another engine's scheduler
            // runs on them, its own kernels and overheads unmeasured: an extrapolation, said as such.
            Some(k) if !model_changed => format!(
                "{method}; engine switched from {} to {}: its scheduler and memory formula, on step costs measured under {}",
                old_kind.as_str(),
                k.as_str(),
                old_kind.as_str()
            ),
            _ => method.to_string(),
        };
        let tp_note = match (same_tp, to.tensor_parallel) {
            (false, Some(t)) => format!(" x{t}"),
            _ => String::new(),
        };
        f.name = format!(
            "{} -> {}{}{}{}",
            self.file.name,
            new_gpu.name,
            tp_note,
            if model_changed { format!(" / {}", f.model.name) } else { String::new() },
            if same_dtypes && !model_changed {
                String::new()
            } else {
                format!(" / {} weights, {} KV", f.model.weight_dtype, f.model.kv_dtype)
            }
        );
        let mut p = f.resolve("retargeted profile", catalog)?;
        p.retargeted_from = Some(self.file.name.clone());
        p.retarget_method = Some(method);
        Ok(p)
    }

    /// Caveats a user should read with this deployment's numbers.
    pub fn caveats(&self) -> Vec<String> {
        let mut out = Vec::new();
        let w = self.file.model.weight_dtype;
        if !self.gpu.runs_natively(w) {
            out.push(format!(
                "{} has no {w} tensor cores: {w} weights run weight-only at the BF16 rate ({:.0} TFLOP/s peak)",
                self.gpu.name, self.gpu.bf16_tflops
            ));
        }
        // AMD's FP4 tensor cores (MI355X's CDNA 4) take the OCP microscaling MXFP4 format, and the
        // ROCm engines serve FP4 checkpoints as MXFP4 (amd/DeepSeek-R1-0528-MXFP4; the corpus's
        // MI355X "fp4" rows are read as mxfp4, corpus.rs `weight_dtype`): NVFP4 is NVIDIA's format
        // (16-value blocks with FP8 scales, FACTS-hardware-engines.md).
        if w == crate::units::Dtype::Nvfp4
            && self.gpu.runs_natively(w)
            && crate::hardware::learned::gpu_lineage(&self.gpu.name).0 == "amd"
        {
            out.push(format!(
                "nvfp4 is NVIDIA's FP4 format; {} runs FP4 checkpoints as MXFP4 (32-value blocks, E8M0 scales: 4.25 bits a weight against nvfp4's 4.5), as its engines serve them (amd/DeepSeek-R1-0528-MXFP4): modelled at its FP4 rate with nvfp4's bytes; --precision mxfp4 is the deployment it runs",
                self.gpu.name
            ));
        }
        // Under attention DP each rank stores its own requests' KV over its tp / attention_dp GPUs:
        // the copies are those of one rank's group, not of the whole tensor-parallel group.
        let (tp, dp) = (self.tensor_parallel, self.parallel.attention_dp);
        let rank_gpus = self.parallel.attention_tp(tp);
        let r = self.parallel.kv_replication(&self.arch, tp);
        let why = if self.arch.mla.is_some() {
            "MLA's latent is kept whole on every GPU"
        } else {
            "fewer KV heads than GPUs"
        };
        if dp > 1 {
            let whole = self.arch.kv_replication(tp);
            if r > 1.0 {
                out.push(format!(
                    "KV cache stored {r:.0} times across each attention-DP rank's {rank_gpus} GPUs ({why}): each of the {dp} attention-DP ranks holds its own requests' KV, each token of context taking {r:.0}x the memory of one copy"
                ));
            } else if whole > 1.0 {
                out.push(format!(
                    "KV cache stored once: each of the {dp} attention-DP ranks holds its own requests' KV on its {rank_gpus} GPU{} (without attention DP, {why}: {whole:.0} copies across the {tp} GPUs)",
                    if rank_gpus == 1 { "" } else { "s" }
                ));
            }
        } else if r > 1.0 {
            out.push(format!(
                "KV cache stored {r:.0} times across the {tp} GPUs ({why}): each token of context takes {r:.0}x the memory of one copy"
            ));
        }
        if self.tensor_parallel > self.gpu.link_domain_gpus {
            out.push(format!(
                "tensor parallel {} exceeds the {}-GPU {:?} domain of {}: collectives over PCIe",
                self.tensor_parallel, self.gpu.link_domain_gpus, self.gpu.link, self.gpu.name
            ));
        }
        // A checkpoint that quantizes its routed experts in its config (gpt-oss's MXFP4) keeps them
        // so whatever the other weights are served in (ModelArch::expert_dtype): said, since the
        // deployment's one precision label would hide it.
        let experts = self.arch.expert_dtype(w);
        if self.arch.moe.is_some() && experts != w {
            out.push(format!(
                "routed experts stored in {experts} (the checkpoint's quantization_config), the other weights in {w}: \
                 --precision sets the other weights (the experts too only where it is narrower)"
            ));
        }
        // vLLM refuses to start when one request of max_model_len does not fit the KV cache
        // (vllm/v1/core/kv_cache_utils.py, check_enough_kv_cache_memory: 'To serve at least one
        // request with the model's max seq len ...'); capsim simulates the requests it is given.
        let k = self.kv_capacity();
        if k.max_len_requests < 1.0 {
            out.push(format!(
                "the KV cache holds {:.2} requests of the model's full {}-token context{}; the simulation runs the requests it is given",
                k.max_len_requests,
                k.max_model_len_tokens,
                match self.engine.kind {
                    EngineKind::Vllm => ": vLLM refuses to start so unless --max-model-len is lowered (check_enough_kv_cache_memory)",
                    _ => ": the engine cannot hold one request of that length",
                }
            ));
        }
        // MTP drafts with the checkpoint's own MTP module (vLLM's and SGLang's MTP/NEXTN proposers
        // load its weights): a model whose config names none has nothing to draft with.
        if let (Some(s), 0) = (self.speculative(), self.arch.mtp_modules) {
            if s.method == super::spec::SpecMethod::Mtp {
                out.push(format!(
                    "{}'s config.json names no MTP module (num_nextn_predict_layers, mtp_num_hidden_layers or num_mtp_modules), \
                     and the engines serve MTP only from one: the draft is costed as one decoder layer of the model's own kind, at \
                     an acceptance measured on another model unless --spec-accept-rate gives yours",
                    self.arch.name
                ));
            }
        }
        out
    }
}

/// Precision-weighted combination in log space of a profile's own estimate (relative sigma
/// `own_sigma`) and the shared value (value, log sigma). An estimate at or above `bound` (a physical
/// peak share) or with a flat loss (sigma >= 0.99) carries no information: the shared value is taken.
fn shrink(own: f64, own_sigma: f64, bound: Option<f64>, shared: (f64, f64)) -> f64 {
    let (sv, ss) = shared;
    let identified = own > 0.0 && own_sigma < 0.99 && bound.is_none_or(|b| own < 0.995 * b);
    if !identified {
        return sv;
    }
    let (wo, ws) = (1.0 / own_sigma.max(0.01).powi(2), 1.0 / ss.max(0.01).powi(2));
    ((wo * own.ln() + ws * sv.ln()) / (wo + ws)).exp()
}

/// A weight precision named in a model's name (`Qwen/Qwen3-30B-A3B-FP8`, `...-AWQ`).
pub fn dtype_in_name(name: &str) -> Option<Dtype> {
    let n = name.to_ascii_lowercase();
    if n.contains("nvfp4") {
        Some(Dtype::Nvfp4)
    } else if n.contains("mxfp4") {
        Some(Dtype::Mxfp4)
    } else if n.contains("fp8") {
        Some(Dtype::Fp8)
    } else if ["awq", "gptq", "int4", "w4a16"].iter().any(|k| n.contains(k)) {
        Some(Dtype::Int4)
    } else {
        None
    }
}
