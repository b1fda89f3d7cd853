//! Each disaggregated InferenceX point's per-pool engine settings, as the recipe its benchmark
//! launched gives them (issue 25). metadata.json states the pools as the config key names them
//! (workers, tp, ep, dp-attn) but not the engine flags each pool ran with: the prefill worker's
//! batch and token budget, the decode worker's batch cap, whether decode runs DP attention at all
//! (a `tep8` recipe under a `dp-attn: true` key), the KV cache's dtype, the drafted tokens of MTP.
//! `inferencex-dsr1/pd_recipes.json` (capsim's own file, written by `pd_recipes.py` beside it from
//! NVIDIA/srt-slurm and InferenceX's staged recipes; its docstring says how each value is read)
//! holds them per point file; this reader turns it into [`PdLaunch`].

use super::json::Doc;
use crate::error::{Error, Result};
use crate::profile::EngineSettings;
use crate::units::Dtype;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// One pool's settings, every value per attention-DP rank as capsim's engine settings are (None: the
/// recipe leaves the engine's default, or metadata.json's layout stands).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PoolLaunch {
    /// A worker's GPUs.
    pub tensor_parallel: Option<u32>,
    /// Attention-DP ranks of a worker (1: no DP attention).
    pub attention_dp: Option<u32>,
    /// The MoE's expert-parallel size.
    pub expert_parallel: Option<u32>,
    /// Expert slots beyond the routed experts (SGLang ep-num-redundant-experts, TensorRT-LLM's load
    /// balancer num_slots minus the experts); 0 may be stated.
    pub redundant_experts: Option<u32>,
    /// The engine settings the recipe states, under capsim's names: the file's `max_batch_size`
    /// (TensorRT-LLM, or the variables' PREFILL_/DECODE_MAX_BATCH_SIZE) is `max_num_seqs`,
    /// `max_num_tokens` is `max_num_batched_tokens`, SGLang's `mem_fraction_static` is
    /// `gpu_memory_utilization`; the rest keep their names.
    pub settings: EngineSettings,
    /// The KV cache's dtype.
    pub kv_dtype: Option<Dtype>,
    /// Decode: tokens MTP drafts per step (0: MTP off).
    pub spec_tokens: Option<u32>,
}

/// A point's two pools and where their settings were read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PdLaunch {
    pub source: String,
    pub prefill: PoolLaunch,
    pub decode: PoolLaunch,
}

const COUNTS: [&str; 14] = [
    "tensor_parallel",
    "attention_dp",
    "expert_parallel",
    "redundant_experts",
    "max_batch_size",
    "max_num_tokens",
    "max_running_requests",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "stream_interval",
    "scheduler_recv_interval",
    "attention_dp_timeout_iters",
    "attention_dp_batching_wait_iters",
    "spec_tokens",
];
const FRACTIONS: [&str; 2] = ["free_gpu_memory_fraction", "mem_fraction_static"];
const OTHERS: [&str; 3] = ["enable_chunked_prefill", "kv_dtype", "attention_dp_balance"];

/// pd_recipes.json, read: each point's [`PdLaunch`] by `<folder>/<file>`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PdRecipes {
    pub file: String,
    pub points: BTreeMap<String, PdLaunch>,
}

impl PdRecipes {
    /// Parse `text` (the file `file`); every error names the file and the key.
    pub fn parse(file: &str, text: &str) -> Result<PdRecipes> {
        let v: Value = super::parse_json_lenient(text)
            .map_err(|e| Error::input(file, Some(e.line()), None, format!("malformed JSON: {e}")))?;
        let top = Doc { src: file, line: 1, v: &v };
        let Some(points) = v.get("points").and_then(Value::as_object) else {
            return Err(top.err("points", "required: an object of <deployment folder>/<point file> -> pools"));
        };
        match v.get("skipped") {
            None => {}
            Some(Value::Object(m)) if m.values().all(Value::is_string) => {}
            Some(_) => return Err(top.err("skipped", "must be an object of point -> reason")),
        }
        let mut out = BTreeMap::new();
        for (point, e) in points {
            let at = |k: &str| format!("points.{point}.{k}");
            let source = e
                .get("source")
                .and_then(Value::as_str)
                .ok_or_else(|| top.err(&at("source"), "required: where the settings were read"))?;
            if let Some(k) =
                e.as_object().and_then(|o| o.keys().find(|k| !["source", "prefill", "decode"].contains(&k.as_str())))
            {
                return Err(top.err(&at(k), "unknown key; known: source, prefill, decode"));
            }
            let pool = |name: &str| -> Result<PoolLaunch> {
                let Some(pv) = e.get(name) else {
                    return Ok(PoolLaunch::default());
                };
                let Some(obj) = pv.as_object() else {
                    return Err(top.err(&at(name), "must be an object"));
                };
                let key = |k: &str| at(&format!("{name}.{k}"));
                if let Some(k) = obj.keys().find(|k| {
                    !COUNTS.contains(&k.as_str()) && !FRACTIONS.contains(&k.as_str()) && !OTHERS.contains(&k.as_str())
                }) {
                    return Err(top.err(&key(k), "unknown key"));
                }
                // The pool's object read with the Doc helpers, every error named from the top.
                let d = Doc { src: file, line: 1, v: pv };
                let prefix = at(name);
                let count = |k: &str| -> Result<Option<u32>> {
                    // spec_tokens (MTP off), redundant_experts and the balance's batching wait may
                    // be 0; every other count is at least 1.
                    let min = if matches!(k, "spec_tokens" | "redundant_experts" | "attention_dp_batching_wait_iters") {
                        0
                    } else {
                        1
                    };
                    match d.count_at_most(k, u32::MAX as u64).map_err(|e| e.under(&prefix))? {
                        Some(n) if n < min => Err(top.err(&key(k), format!("must be at least {min}, got {n}"))),
                        n => Ok(n.map(|n| n as u32)),
                    }
                };
                let boolean = |k: &str| d.opt_bool(k).map_err(|e| e.under(&prefix));
                let fraction = |k: &str| -> Result<Option<f64>> {
                    match d.opt_num(k).map_err(|e| e.under(&prefix))? {
                        Some(x) if !(x > 0.0 && x <= 1.0) => {
                            Err(top.err(&key(k), format!("must be in (0, 1], got {x}")))
                        }
                        x => Ok(x),
                    }
                };
                let kv_dtype = match d.opt_string("kv_dtype").map_err(|e| e.under(&prefix))?.as_deref() {
                    None => None,
                    Some(k @ ("fp8" | "bf16")) => Dtype::parse(k),
                    Some(k) => return Err(top.err(&key("kv_dtype"), format!("`{k}`: one of fp8, bf16"))),
                };
                Ok(PoolLaunch {
                    tensor_parallel: count("tensor_parallel")?,
                    attention_dp: count("attention_dp")?,
                    expert_parallel: count("expert_parallel")?,
                    redundant_experts: count("redundant_experts")?,
                    settings: EngineSettings {
                        max_num_seqs: count("max_batch_size")?,
                        max_num_batched_tokens: count("max_num_tokens")?,
                        enable_chunked_prefill: boolean("enable_chunked_prefill")?,
                        free_gpu_memory_fraction: fraction("free_gpu_memory_fraction")?,
                        max_running_requests: count("max_running_requests")?,
                        chunked_prefill_size: count("chunked_prefill_size")?,
                        max_prefill_tokens: count("max_prefill_tokens")?,
                        gpu_memory_utilization: fraction("mem_fraction_static")?,
                        stream_interval: count("stream_interval")?,
                        scheduler_recv_interval: count("scheduler_recv_interval")?,
                        attention_dp_balance: boolean("attention_dp_balance")?,
                        attention_dp_timeout_iters: count("attention_dp_timeout_iters")?,
                        attention_dp_batching_wait_iters: count("attention_dp_batching_wait_iters")?,
                        ..EngineSettings::default()
                    },
                    kv_dtype,
                    spec_tokens: count("spec_tokens")?,
                })
            };
            let launch = PdLaunch { source: source.to_string(), prefill: pool("prefill")?, decode: pool("decode")? };
            for (name, p) in [("prefill", &launch.prefill), ("decode", &launch.decode)] {
                if let (Some(tp), Some(dp)) = (p.tensor_parallel, p.attention_dp) {
                    if !tp.is_multiple_of(dp) {
                        return Err(top.err(
                            &at(&format!("{name}.attention_dp")),
                            format!("{dp} ranks do not divide the worker's {tp} GPUs"),
                        ));
                    }
                }
            }
            out.insert(point.clone(), launch);
        }
        Ok(PdRecipes { file: file.to_string(), points: out })
    }

    /// The settings of point file `name` of deployment folder `dep`.
    pub fn at(&self, dep: &str, name: &str) -> Option<&PdLaunch> {
        self.points.get(&format!("{dep}/{name}"))
    }

    /// An error for the first entry whose point the corpus does not have (a typo, not a setting to
    /// drop silently).
    pub fn check_known(&self, mut known: impl FnMut(&str) -> bool) -> Result<()> {
        match self.points.keys().find(|k| !known(k)) {
            Some(k) => Err(Error::input(
                &self.file,
                None,
                Some(&format!("points.{k}")),
                "no point file of that name in the corpus",
            )),
            None => Ok(()),
        }
    }
}
