//! KV offload to host memory (`--kv-offload-gb`, `[engine] kv_offload_gb`): the host tier's size in
//! blocks and the cost of loading blocks back over the GPU's host link.
//!
//! The real counterparts are vLLM's KV connectors (`OffloadingConnector`, `SimpleCPUOffloadConnector`,
//! LMCache) and SGLang's HiCache. capsim models vLLM's: blocks the GPU prefix cache evicts are kept in
//! a host pool of `cpu_bytes_to_use` bytes, least recently used out first, and a request whose prefix
//! misses on the GPU but is found in host memory gets those blocks copied back asynchronously while
//! it waits (vllm-project/vllm-ascend docs/source/user_guide/feature_guide/kv_cache_cpu_offload.md,
//! "How It Works", of the upstream OffloadingConnector: eviction to CPU when device memory is full,
//! asynchronous copies on dedicated streams that overlap compute, LRU host pool; the scheduler side
//! in sim/offload.rs). The connector does nothing without prefix caching (vllm-ascend
//! simple_cpu_offload_connector.py: "When prefix caching is disabled, upstream intentionally leaves
//! the worker unset and the connector behaves as a no-op"), so an engine whose prefix cache capsim
//! does not simulate is refused rather than silently run without the tier.

use super::engine::{EngineConfig, EngineKind};
use crate::catalog::gpu::HostLinkKind;
use crate::catalog::{GpuSpec, ModelArch};
use crate::error::{Error, Result};
use serde::Serialize;

/// The largest host tier per replica accepted (GB): 100 TB, beyond any server's memory; a larger
/// figure is a typo (bytes given as GB).
pub const MAX_KV_OFFLOAD_GB: f64 = 100_000.0;

/// A resolved host tier.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KvOffload {
    /// Host memory given to KV, bytes (the flag's GB x 1e9).
    pub host_bytes: f64,
    /// Bytes of one KV block over all the replica's GPUs (what the host stores per block).
    pub block_bytes: f64,
    /// Blocks the host holds: host_bytes / block_bytes, rounded down.
    pub host_blocks: u64,
    /// The host link and its one-direction bandwidth per GPU as specified (bytes/s).
    pub link: HostLinkKind,
    pub link_bytes_s: f64,
    /// What a copy reaches per GPU (bytes/s): link_bytes_s x the link's share.
    pub effective_bytes_s: f64,
    /// Bytes of one block on one GPU: each GPU copies its own shard over its own link, all at once.
    pub block_bytes_per_gpu: f64,
    pub link_source: String,
}

impl KvOffload {
    /// Time to copy `blocks` blocks from host memory to the GPUs (ns, rounded up).
    pub fn load_ns(&self, blocks: u64) -> u64 {
        (blocks as f64 * self.block_bytes_per_gpu / self.effective_bytes_s * 1e9).ceil() as u64
    }
}

/// The flag's (or the TOML key's) value checked: finite, not negative, not absurd. `Ok(None)` for 0
/// (off).
pub fn check_gb(gb: f64) -> std::result::Result<Option<f64>, String> {
    if !gb.is_finite() || gb < 0.0 {
        return Err(format!("must be a finite number of GB >= 0 (0: off), got {}", crate::error::fmt_num(gb)));
    }
    if gb > MAX_KV_OFFLOAD_GB {
        return Err(format!(
            "{} GB of host memory per replica is beyond any server ({MAX_KV_OFFLOAD_GB} GB at most): is it bytes?",
            crate::error::fmt_num(gb)
        ));
    }
    Ok((gb > 0.0).then_some(gb))
}

/// The host tier of an engine configuration, or None when `gb` is absent or 0. `kv_per_token`: KV
/// bytes per token over all `tp` GPUs (copies kept on several GPUs counted once per copy).
pub(super) fn resolve(
    source: &str,
    gb: Option<f64>,
    e: &EngineConfig,
    arch: &ModelArch,
    gpu: &GpuSpec,
    tp: u32,
    kv_per_token: f64,
) -> Result<Option<KvOffload>> {
    let field = "engine.kv_offload_gb";
    let err = |msg: String| Error::input(source, None, Some(field), msg);
    let Some(gb) = gb else { return Ok(None) };
    let Some(gb) = check_gb(gb).map_err(err)? else { return Ok(None) };
    if e.kind != EngineKind::Vllm {
        return Err(err(format!(
            "KV offload is simulated for vLLM (its OffloadingConnector) only: {} is not ({}); SGLang's HiCache and TensorRT-LLM's host cache are not modelled",
            e.kind.as_str(),
            match e.kind {
                EngineKind::Sglang => "HiCache loads host blocks inside the prefill batch",
                _ => "its block reuse is not simulated",
            }
        )));
    }
    if !e.prefix_caching {
        return Err(err(
            "needs prefix caching (vLLM's offloading connectors are a no-op without it): drop --prefix-caching off"
                .into(),
        ));
    }
    if e.per_seq_reserved_blocks > 0 {
        return Err(err(format!(
            "{} keeps per-sequence state besides its KV blocks (linear attention or sliding windows), which capsim runs without a prefix cache, so there is nothing to offload",
            arch.name
        )));
    }
    let block_bytes = kv_per_token * e.block_size_tokens as f64;
    let host_bytes = gb * 1e9;
    let host_blocks = (host_bytes / block_bytes).floor() as u64;
    if host_blocks == 0 {
        return Err(err(format!(
            "{} GB holds no KV block of {} bytes",
            crate::error::fmt_num(gb),
            crate::error::fmt_num(block_bytes)
        )));
    }
    let (link, link_bytes_s) = gpu.host_link();
    Ok(Some(KvOffload {
        host_bytes,
        block_bytes,
        host_blocks,
        link,
        link_bytes_s,
        effective_bytes_s: gpu.host_link_effective_bytes_s(),
        block_bytes_per_gpu: block_bytes / tp as f64,
        link_source: gpu.host_link_source.clone().unwrap_or_else(|| {
            format!("PCIe at the catalog's pcie_bw_gb_s ({} GB/s): no host_link given", gpu.pcie_bw_gb_s)
        }),
    }))
}
