//! A disaggregated prefill/decode deployment: a pool of prefill workers and a pool of decode workers,
//! each a [`Profile`] of its own (GPU, tensor parallelism, expert layout, engine, KV pool), and the
//! link the KV cache moves over between them. sim/disagg.rs simulates it.
//!
//! The flow, as NVIDIA Dynamo runs it with vLLM's NixlConnector (and SGLang's PD with Mooncake in
//! the same shape): the router sends a request to a prefill worker, which prefills it (chunked, as
//! its engine does) with max_tokens = 1; the request then goes to a decode worker, which allocates
//! blocks for the prompt and reads the prefill worker's KV over NIXL (an RDMA read, the request
//! waiting while the engine's other requests keep decoding: the transfer blocks the request, not
//! the engine); once the KV is there the decode worker recomputes the prompt's last token (vLLM's
//! scheduler lowers a fully loaded prompt's computed tokens by one to get its logits), which gives
//! the first token the client sees, and decodes the rest. So TTFT = prefill queue and compute +
//! transfer + the decode worker's queue + one decode-sized step.
//!
//! Sources: ai-dynamo/aiconfigurator generator/builders/k8s_builder.py launches both pools'
//! vLLM workers with `--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`;
//! its backend_templates/*/run.sh.j2 start `dynamo.frontend` with `--router-mode kv` only when the
//! KV router is asked for, and generator/dynamo_features.py normalizes an unset router mode to
//! `round-robin`: Dynamo's default routing, which capsim uses for both pools (the KV-aware router is
//! not simulated). vLLM's NixlConnector and its scheduler's `_update_waiting_for_remote_kv` (the
//! last prompt token recomputed) and Dynamo's disaggregated flow are cited as read in their
//! repositories' docs (docs/architecture/disagg_serving.md in ai-dynamo/dynamo); the snapshots are
//! above this workplace's fetch limit, so those two are not re-read here (ENGINES.md says so).

use super::Profile;
use crate::catalog::gpu::LinkKind;
use serde::Serialize;

/// One pool as the user states it (`--prefill-*`, `--decode-*`): None keeps the deployment's own.
/// `ep` and `attention_dp` are the pool's expert-parallel size and attention data-parallel ranks
/// (`--prefill-ep`, `--decode-attention-dp`), resolved as `--ep` and `--attention-dp` are.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolSpec {
    pub workers: u32,
    pub tp: Option<u32>,
    pub ep: Option<u32>,
    /// The pool's redundant expert slots (`--prefill-redundant-experts`), as `--redundant-experts`.
    pub redundant_experts: Option<u32>,
    pub attention_dp: Option<u32>,
    pub gpu: Option<String>,
    /// The pool's own running-request cap (each attention-DP rank's, as max_num_seqs), where it
    /// differs from the deployment's: Dynamo's recipes run prefill workers at one or two requests a
    /// rank and decode workers at their batch.
    pub max_num_seqs: Option<u32>,
    /// The pool's own per-step token budget (each rank's, as max_num_batched_tokens).
    pub max_num_batched_tokens: Option<u32>,
}

/// Per-transfer latency of one KV move (s): the decode worker's NIXL read request, its completion
/// notification and the hand-over of the request from the prefill response to the decode worker
/// through the router. An assumption (UCX RDMA round trips are tens of microseconds; the
/// request's hop through the frontend about a millisecond), stated as such in ENGINES.md.
pub const KV_TRANSFER_LATENCY_S: f64 = 1e-3;

/// Which link the KV moves over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkPath {
    /// Both pools inside one NVLink (or xGMI) domain: the GPU's own link.
    ScaleUp,
    /// Between nodes: the RDMA NIC of each GPU (InfiniBand or RoCE).
    Network,
}

/// The KV link between the pools: each prefill GPU sends its share of the prompt's KV over its own
/// link, each decode GPU receives its share over its own, all in parallel; the end whose GPUs move
/// more bytes each (a prefill pool of fewer GPUs per worker sends more per GPU than a wide decode
/// worker receives) bounds the transfer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvLink {
    pub path: LinkPath,
    /// Bandwidth per GPU, one direction, bytes/s.
    pub bw_bytes_s: f64,
    pub latency_s: f64,
    /// KV bytes per prompt token over the busier end's GPU: the larger of the two below.
    pub bytes_per_token_per_gpu: f64,
    /// KV bytes one prefill GPU sends per prompt token (its share under the prefill pool's tensor
    /// parallelism and attention DP, MLA's latent whole on every GPU).
    pub bytes_per_token_per_prefill_gpu: f64,
    /// KV bytes one decode GPU receives per prompt token (the same under the decode pool's layout).
    pub bytes_per_token_per_decode_gpu: f64,
    /// Why this link and figure.
    pub source: String,
}

/// A resolved disaggregated deployment.
#[derive(Debug, Clone)]
pub struct Disaggregated {
    pub prefill: Profile,
    pub decode: Profile,
    pub prefill_workers: u32,
    pub decode_workers: u32,
    pub link: KvLink,
    /// How the router picks each request's prefill and decode worker.
    pub routing: PdRouting,
    /// The fixed time from a request's first token on its prefill worker to its KV transfer's
    /// start (s): the framework's hand-over of the request to a decode worker (the router's hop,
    /// the decode worker's KV allocation and the connector's handshake: SGLang's bootstrap,
    /// Dynamo's remote-prefill round trip, NIXL's notifications). Learned per engine on the
    /// corpus's disaggregated TTFTs at low load (calibrate/handover.rs); 0 where none is learned.
    pub handover_s: f64,
}

/// How a disaggregated deployment's router picks the workers of a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PdRouting {
    /// Request i to prefill worker i mod P, its hand-over j to decode worker j mod D: a router
    /// that knows neither the workers' caches nor their load (Dynamo's default router mode).
    #[default]
    RoundRobin,
    /// Each to the worker of its pool with the fewest requests routed to it and not finished there
    /// (ties: the lowest index): a load-aware router (llm-d's queue-scorer alone).
    LeastOutstanding,
    /// A conversation's later turns to the prefill worker that computed its earlier ones (where its
    /// prefix is cached), anything else least-outstanding; decode least-outstanding. A prefix-cache
    /// aware router: llm-d's P/D configuration scores prefill workers by prefix-cache hit (weight 2)
    /// and queue (weight 1) (llm-d-inference-scheduler deploy/config/pd-epp-config.yaml, commit
    /// 520af478), Dynamo's KV router by the blocks a worker already holds.
    PrefixAware,
}

impl PdRouting {
    pub fn as_str(self) -> &'static str {
        match self {
            PdRouting::RoundRobin => "round-robin",
            PdRouting::LeastOutstanding => "least-outstanding",
            PdRouting::PrefixAware => "prefix-aware",
        }
    }
}

/// What each GPU of a pool's worker holds of `bytes` of one copy of a token's KV, and so sends
/// (prefill) or receives (decode) over its own link: a request's KV lives on one attention-DP rank
/// (without attention DP, the whole worker), split over that rank's tp / N GPUs and replicated as
/// the model's KV heads require (MLA's latent whole on each), and over the pipeline stages, each
/// stage's GPUs holding its n_layers / pp layers' KV (as the step model splits the layers); the
/// largest of unequal stages, ceil(n_layers / pp) layers, sends or receives the most and sets the
/// transfer's time.
fn per_gpu(p: &Profile, bytes: f64) -> f64 {
    let tp = p.tensor_parallel;
    bytes * p.parallel.kv_replication(&p.arch, tp) * p.parallel.stage_imbalance(&p.arch)
        / p.parallel.attention_tp(tp) as f64
        / p.parallel.pipeline_parallel as f64
}

/// GPUs of one worker of a pool: its tensor-parallel degree times its pipeline stages.
pub fn worker_gpus(p: &Profile) -> u64 {
    p.parallel.gpus(p.tensor_parallel) as u64
}

/// KV bytes of a `prompt_tokens`-token prompt on each GPU of a pool's worker: the full-attention
/// layers' for every token, sliding-window layers' for at most their window.
fn prompt_bytes_per_gpu(p: &Profile, prompt_tokens: u32) -> f64 {
    let (a, kv) = (&p.arch, p.file.model.kv_dtype);
    per_gpu(p, a.kv_bytes_per_token(kv)) * prompt_tokens as f64
        + per_gpu(p, a.sliding_kv_bytes_per_token(kv)) * (prompt_tokens as u64).min(a.sliding_window) as f64
}

/// Cap on the workers of a pool (a bound on the work of one run).
pub const MAX_WORKERS: u32 = 4096;

impl Disaggregated {
    /// The deployment of two resolved pools. The link: the GPUs' NVLink (xGMI) when both pools use
    /// the same GPU and all their GPUs fit one link domain (an HGX node of 8, a GB200 NVL72 rack of
    /// 72); else the scale-out network, the slower of the two GPUs' NICs (models/gpus.toml
    /// scale_out_bw_gb_s).
    pub fn new(prefill: Profile, decode: Profile, prefill_workers: u32, decode_workers: u32) -> Disaggregated {
        let gpus = prefill_workers as u64 * worker_gpus(&prefill) + decode_workers as u64 * worker_gpus(&decode);
        let same = prefill.gpu.name == decode.gpu.name;
        let fabric = matches!(decode.gpu.link, LinkKind::Nvlink | LinkKind::Xgmi);
        let (path, bw, source) = if same && fabric && gpus <= decode.gpu.link_domain_gpus as u64 {
            (
                LinkPath::ScaleUp,
                decode.gpu.link_bw_gb_s * 1e9,
                format!(
                    "{} GPUs within one {}-GPU link domain of {}: {} GB/s per GPU ({})",
                    gpus, decode.gpu.link_domain_gpus, decode.gpu.name, decode.gpu.link_bw_gb_s, decode.gpu.link_source
                ),
            )
        } else {
            let (p, d) = (prefill.gpu.scale_out_bw_bytes_s(), decode.gpu.scale_out_bw_bytes_s());
            let slower = if p < d { &prefill.gpu } else { &decode.gpu };
            let why = if !same {
                "the pools use different GPUs".to_string()
            } else {
                format!("{gpus} GPUs exceed one {}-GPU link domain", decode.gpu.link_domain_gpus)
            };
            (
                LinkPath::Network,
                p.min(d),
                format!(
                    "{why}: scale-out network, {} GB/s per GPU ({})",
                    slower.scale_out_bw_bytes_s() / 1e9,
                    slower.scale_out_source.as_deref().unwrap_or(
                        "no figure in the catalog: one ConnectX-7 NDR 400 Gb/s per GPU assumed (catalog::gpu::DEFAULT_SCALE_OUT_BW_GB_S)"
                    )
                ),
            )
        };
        let share = |p: &Profile| per_gpu(p, p.arch.kv_bytes_per_token(p.file.model.kv_dtype));
        let (sent, received) = (share(&prefill), share(&decode));
        let link = KvLink {
            path,
            bw_bytes_s: bw,
            latency_s: KV_TRANSFER_LATENCY_S,
            bytes_per_token_per_gpu: sent.max(received),
            bytes_per_token_per_prefill_gpu: sent,
            bytes_per_token_per_decode_gpu: received,
            source,
        };
        Disaggregated {
            prefill,
            decode,
            prefill_workers,
            decode_workers,
            link,
            routing: PdRouting::RoundRobin,
            handover_s: 0.0,
        }
    }
    /// The same deployment on other worker counts: its link is decided again (one link domain or
    /// the network, by the GPUs in all), its router and hand-over kept (capacity --disaggregated's
    /// candidates).
    pub fn with_workers(&self, prefill_workers: u32, decode_workers: u32) -> Disaggregated {
        let link = Disaggregated::new(self.prefill.clone(), self.decode.clone(), prefill_workers, decode_workers).link;
        Disaggregated { prefill_workers, decode_workers, link, ..self.clone() }
    }
    /// The same deployment behind another router.
    pub fn with_routing(self, routing: PdRouting) -> Disaggregated {
        Disaggregated { routing, ..self }
    }
    /// The same deployment with the learned hand-over of its engine (`handover_s`; none learned
    /// for it: 0).
    pub fn with_learned_handover(self, model: Option<&crate::hardware::learned::LearnedModel>) -> Disaggregated {
        let engine = self.prefill.engine.kind.as_str();
        let handover_s = model.and_then(|m| m.handover_s(engine)).unwrap_or(0.0);
        Disaggregated { handover_s, ..self }
    }
    /// GPUs in all: workers x tensor-parallel degree x pipeline stages, both pools.
    pub fn gpus(&self) -> u64 {
        self.prefill_workers as u64 * worker_gpus(&self.prefill)
            + self.decode_workers as u64 * worker_gpus(&self.decode)
    }
    /// KV bytes of a `prompt_tokens`-token prompt that each prefill GPU sends and each decode GPU
    /// receives. Sliding-window layers move at most their window.
    pub fn bytes_per_gpu(&self, prompt_tokens: u32) -> (f64, f64) {
        (prompt_bytes_per_gpu(&self.prefill, prompt_tokens), prompt_bytes_per_gpu(&self.decode, prompt_tokens))
    }
    /// Seconds one prompt's KV takes on an idle link: latency + the busier end's bytes per GPU /
    /// bandwidth (every GPU of both ends moves its share at once over its own link).
    pub fn transfer_s(&self, prompt_tokens: u32) -> f64 {
        let (sent, received) = self.bytes_per_gpu(prompt_tokens);
        self.link.latency_s + sent.max(received) / self.link.bw_bytes_s
    }
}
