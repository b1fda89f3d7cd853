//! Engine settings a corpus deployment's launch script gave its engine where the corpus's files do
//! not resolve them: InferenceX's B200 SGLang scripts pass `--scheduler-recv-interval
//! $SCHEDULER_RECV_INTERVAL`, `--max-running-requests $MAX_RUNNING_REQUESTS` and the like, which
//! metadata.json records verbatim, and its TensorRT-LLM scripts set `stream_interval` in a YAML file
//! the launch lines only name. `inferencex-dsr1/launch_settings.json` (capsim's own file, written by
//! `launch_settings.py` beside it from the scripts at the commits metadata.json records) resolves them
//! per deployment; this reader turns it into [`LaunchSettings`] per point.

use super::json::Doc;
use crate::error::{Error, Result};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// The settings one point's engine was launched with, as its script gives them (None: not given, the
/// engine's default).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LaunchSettings {
    /// SGLang --max-running-requests.
    pub max_running_requests: Option<u32>,
    /// SGLang --chunked-prefill-size.
    pub chunked_prefill_size: Option<u32>,
    /// SGLang --max-prefill-tokens.
    pub max_prefill_tokens: Option<u32>,
    /// SGLang --mem-fraction-static.
    pub mem_fraction_static: Option<f64>,
    /// SGLang --scheduler-recv-interval at the point's concurrency.
    pub scheduler_recv_interval: Option<u32>,
    /// Tokens per streamed response (SGLang and vLLM --stream-interval, TensorRT-LLM
    /// stream_interval).
    pub stream_interval: Option<u32>,
    /// How InferenceX's TensorRT-LLM script sized --max_num_tokens (None: the later scripts' rule,
    /// which crate::corpus::benchmark_settings assumes).
    pub trt_max_num_tokens: Option<TrtTokens>,
    /// Where the values were read (script, commit, lines).
    pub script: String,
}

/// How an InferenceX TensorRT-LLM script sizes --max_num_tokens (crate::corpus::inferencex_trt_max_num_tokens);
/// launch_settings.json's `trt_max_num_tokens_floor` or `trt_max_num_tokens_mtp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TrtTokens {
    /// (CONC + ISL + 64 + 63) / 64 x 64, at least this floor: 8192 in the later scripts, 0 (none) in
    /// the December 2025 slurm scripts.
    Floor(u32),
    /// The MTP scripts': ((MTP + 1) x MAX_BATCH_SIZE + ISL + 64 + 63) / 64 x 64, the batch the
    /// client's CONC or, under attention DP, each rank's share of it; no floor.
    Mtp,
}

/// One deployment's entry: the settings, with the receive interval by concurrency.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    base: LaunchSettings,
    /// (from concurrency, interval), ascending: the last whose concurrency is at most a point's applies.
    recv_by_conc: Vec<(u32, u32)>,
}

/// launch_settings.json, read: each deployment's entry by folder name, and each plain layout's
/// (`dsr1-fp8-b200-sglang-tp8`: what every folder of it agrees on) for InferenceX's own database
/// rows in aic-e2e, which name no folder.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LaunchTable {
    file: String,
    entries: BTreeMap<String, Entry>,
    layouts: BTreeMap<String, Entry>,
    /// The disaggregated points' per-pool settings (pd_recipes.json, [`super::pd_recipes`]).
    pd: super::pd_recipes::PdRecipes,
}

const KEYS: [&str; 9] = [
    "script",
    "max_running_requests",
    "chunked_prefill_size",
    "max_prefill_tokens",
    "mem_fraction_static",
    "scheduler_recv_interval",
    "stream_interval",
    "trt_max_num_tokens_floor",
    "trt_max_num_tokens_mtp",
];

impl LaunchTable {
    /// Parse `text` (the file `file`); every error names the file and the key.
    pub fn parse(file: &str, text: &str) -> Result<LaunchTable> {
        let v: Value = super::parse_json_lenient(text)
            .map_err(|e| Error::input(file, Some(e.line()), None, format!("malformed JSON: {e}")))?;
        let top = Doc { src: file, line: 1, v: &v };
        let Some(deps) = v.get("deployments").and_then(Value::as_object) else {
            return Err(top.err("deployments", "required: an object of deployment folder -> settings"));
        };
        let layouts = match v.get("layouts") {
            None => serde_json::Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(_) => return Err(top.err("layouts", "must be an object of layout -> settings")),
        };
        let entries = Self::entries(&top, "deployments", deps)?;
        let layouts = Self::entries(&top, "layouts", &layouts)?;
        Ok(LaunchTable { file: file.to_string(), entries, layouts, pd: Default::default() })
    }

    /// The entries of the object `section` of the file.
    fn entries(top: &Doc, section: &str, deps: &serde_json::Map<String, Value>) -> Result<BTreeMap<String, Entry>> {
        let file = top.src;
        let mut entries = BTreeMap::new();
        for (dep, e) in deps {
            let key = |k: &str| format!("{section}.{dep}.{k}");
            let Some(obj) = e.as_object() else {
                return Err(top.err(&format!("{section}.{dep}"), "must be an object"));
            };
            if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
                return Err(top.err(&key(k), format!("unknown key; known: {}", KEYS.join(", "))));
            }
            let d = Doc { src: file, line: 1, v: e };
            let count = |k: &str| -> Result<Option<u32>> {
                match d.opt_num(k)? {
                    None => Ok(None),
                    Some(x) if x.fract() == 0.0 && (1.0..=u32::MAX as f64).contains(&x) => Ok(Some(x as u32)),
                    Some(x) => Err(top.err(&key(k), format!("must be a whole number >= 1, got {x}"))),
                }
            };
            let mem = match d.opt_num("mem_fraction_static")? {
                Some(x) if !(x > 0.0 && x <= 1.0) => {
                    return Err(top.err(&key("mem_fraction_static"), format!("must be in (0, 1], got {x}")))
                }
                x => x,
            };
            let mut recv_by_conc = Vec::new();
            if let Some(r) = e.get("scheduler_recv_interval").filter(|r| !r.is_null()) {
                let bad = || {
                    top.err(
                        &key("scheduler_recv_interval"),
                        "must be a list of [from_concurrency, interval] pairs of whole numbers >= 1, concurrency ascending from 1",
                    )
                };
                for pair in r.as_array().ok_or_else(bad)? {
                    let p = pair.as_array().filter(|p| p.len() == 2).ok_or_else(bad)?;
                    let n = |x: &Value| x.as_u64().filter(|&n| n >= 1 && n <= u32::MAX as u64).map(|n| n as u32);
                    let (c, i) = (n(&p[0]).ok_or_else(bad)?, n(&p[1]).ok_or_else(bad)?);
                    if recv_by_conc.last().is_some_and(|&(prev, _)| prev >= c) || (recv_by_conc.is_empty() && c != 1) {
                        return Err(bad());
                    }
                    recv_by_conc.push((c, i));
                }
                if recv_by_conc.is_empty() {
                    return Err(bad());
                }
            }
            let base = LaunchSettings {
                max_running_requests: count("max_running_requests")?,
                chunked_prefill_size: count("chunked_prefill_size")?,
                max_prefill_tokens: count("max_prefill_tokens")?,
                mem_fraction_static: mem,
                scheduler_recv_interval: None,
                stream_interval: count("stream_interval")?,
                trt_max_num_tokens: trt_tokens(&d).map_err(|e| e.under(&format!("{section}.{dep}")))?,
                script: d
                    .opt_string("script")?
                    .ok_or_else(|| top.err(&key("script"), "required: where the values were read"))?,
            };
            entries.insert(dep.clone(), Entry { base, recv_by_conc });
        }
        Ok(entries)
    }

    /// This table with the disaggregated points' per-pool settings of `text` (pd_recipes.json, the
    /// file `file`).
    pub fn with_pd_recipes(mut self, file: &str, text: &str) -> Result<LaunchTable> {
        self.pd = super::pd_recipes::PdRecipes::parse(file, text)?;
        Ok(self)
    }

    /// The per-pool settings of point file `name` of deployment folder `dep` (None: not a
    /// disaggregated point the file resolves).
    pub fn pd_at(&self, dep: &str, name: &str) -> Option<&super::pd_recipes::PdLaunch> {
        self.pd.at(dep, name)
    }

    /// The settings of deployment folder `dep` at client concurrency `conc` (None: the file has no
    /// entry for it).
    pub fn at(&self, dep: &str, conc: u32) -> Option<LaunchSettings> {
        Self::resolve(self.entries.get(dep)?, conc)
    }

    fn resolve(e: &Entry, conc: u32) -> Option<LaunchSettings> {
        let recv = e.recv_by_conc.iter().rev().find(|&&(from, _)| from <= conc).map(|&(_, i)| i);
        Some(LaunchSettings { scheduler_recv_interval: recv, ..e.base.clone() })
    }

    /// Gives InferenceX's own database rows in aic-e2e (`dsr1_b200_sglang_fp8_agg_...`) the
    /// settings of their plain layout where the file has them: those rows name the configuration
    /// (model, GPU, engine, precision, TP) but no folder, and every folder of that layout was
    /// launched with the same settings. Rows with expert or attention-DP columns are left alone.
    pub fn attach_layouts(&self, points: &mut [super::corpus::CorpusPoint]) {
        for p in points.iter_mut().filter(|p| p.is_inferencex_db_row()) {
            if p.launch.is_some() || p.moe_ep > 1 || p.attention_dp > 1 {
                continue;
            }
            let parts: Vec<&str> = p.id.split('_').collect();
            let [model, gpu, engine, precision, ..] = parts[..] else { continue };
            let engine = if engine == "trtllm" { "trt" } else { engine };
            let key = format!("{model}-{precision}-{gpu}-{engine}-tp{}", p.tensor_parallel);
            if let Some(e) = self.layouts.get(&key) {
                p.launch = Self::resolve(e, p.concurrency);
            }
        }
    }

    /// An error for the first entry whose deployment is not among `known`, or whose point
    /// (`<folder>/<file>`) is not among `known_point` (an entry for a folder or point the corpus
    /// does not have is a typo, not a setting to drop silently).
    pub fn check_known(
        &self,
        mut known: impl FnMut(&str) -> bool,
        known_point: impl FnMut(&str) -> bool,
    ) -> Result<()> {
        self.pd.check_known(known_point)?;
        match self.entries.keys().find(|d| !known(d)) {
            Some(d) => Err(Error::input(
                &self.file,
                None,
                Some(&format!("deployments.{d}")),
                "no deployment folder of that name in the corpus",
            )),
            None => Ok(()),
        }
    }
}

/// An entry's TensorRT-LLM token rule: `trt_max_num_tokens_floor` (a whole number >= 0) or
/// `trt_max_num_tokens_mtp: true`, not both.
fn trt_tokens(d: &Doc) -> Result<Option<TrtTokens>> {
    let floor = d.count_at_most("trt_max_num_tokens_floor", u32::MAX as u64)?;
    match (floor, d.opt_bool("trt_max_num_tokens_mtp")?) {
        (Some(_), Some(true)) => Err(d.err(
            "trt_max_num_tokens_mtp",
            "the MTP rule has no floor: give trt_max_num_tokens_floor or this, not both",
        )),
        (Some(f), _) => Ok(Some(TrtTokens::Floor(f as u32))),
        (None, Some(true)) => Ok(Some(TrtTokens::Mtp)),
        (None, _) => Ok(None),
    }
}

/// The SGLang settings an InferenceX deployment's metadata.json states as literal values
/// (`engine_scripts[].flags_found_in_script`: `"chunked_prefill_size": "32768"`), where every script
/// of the deployment agrees; a shell variable (`"$CHUNKED_PREFILL_SIZE"`) or a list of values (two
/// launch lines chosen by sequence length) states nothing. None where no such value is stated.
pub fn stated_sglang_flags(metadata: &Value) -> Option<LaunchSettings> {
    let scripts = metadata.get("engine_scripts")?.as_array()?;
    let literal = |key: &str| -> Option<f64> {
        let mut value: Option<f64> = None;
        for s in scripts {
            let v = s.get("flags_found_in_script")?.get(key)?;
            let x = v.as_str()?.trim().parse::<f64>().ok().filter(|x| x.is_finite() && *x > 0.0)?;
            if value.is_some_and(|y| y != x) {
                return None;
            }
            value = Some(x);
        }
        value
    };
    let count = |key: &str| literal(key).filter(|x| x.fract() == 0.0 && *x <= u32::MAX as f64).map(|x| x as u32);
    let out = LaunchSettings {
        max_running_requests: count("max_running_requests"),
        chunked_prefill_size: count("chunked_prefill_size"),
        max_prefill_tokens: count("max_prefill_tokens"),
        mem_fraction_static: literal("mem_fraction_static").filter(|x| *x <= 1.0),
        scheduler_recv_interval: None,
        stream_interval: None,
        trt_max_num_tokens: None,
        script: "metadata.json engine_scripts[].flags_found_in_script".into(),
    };
    let any = out.max_running_requests.is_some()
        || out.chunked_prefill_size.is_some()
        || out.max_prefill_tokens.is_some()
        || out.mem_fraction_static.is_some();
    any.then_some(out)
}

impl LaunchSettings {
    /// These settings, each one missing taken from `other`.
    pub fn or(self, other: &LaunchSettings) -> LaunchSettings {
        LaunchSettings {
            max_running_requests: self.max_running_requests.or(other.max_running_requests),
            chunked_prefill_size: self.chunked_prefill_size.or(other.chunked_prefill_size),
            max_prefill_tokens: self.max_prefill_tokens.or(other.max_prefill_tokens),
            mem_fraction_static: self.mem_fraction_static.or(other.mem_fraction_static),
            scheduler_recv_interval: self.scheduler_recv_interval.or(other.scheduler_recv_interval),
            stream_interval: self.stream_interval.or(other.stream_interval),
            trt_max_num_tokens: self.trt_max_num_tokens.or(other.trt_max_num_tokens),
            script: format!("{}; {}", self.script, other.script),
        }
    }
}
