//! The public corpus (calibration/corpus, its README): measurements taken by others, read into
//! [`CorpusPoint`]s exactly as their files state them. Two sets:
//!
//! - `aic-e2e/measured.csv` (aiconfigurator's accuracy set, Apache-2.0): one row per (deployment,
//!   ISL, OSL, concurrency) with the mean TTFT and TPOT in ms. Rows from the InferenceX database
//!   (`db-dump/...`) ran InferenceX's client; the others (`source_file=...`, NVIDIA's internal
//!   benchmark database and gap analyses) do not state their client's settings.
//! - `inferencex-dsr1/<deployment>/metadata.json` + one `vllm bench serve`-layout file per load point
//!   (InferenceX dashboard rows of DeepSeek-R1): the latency keys are the source's seconds x 1000,
//!   `completed`, `duration` and token totals were never stored (its README).
//!
//! The reader does nothing but read: whether capsim can express a point (its GPU, model, engine,
//! parallelism) is decided above it (crate::corpus), with a reason for every point it cannot.
//! Errors name the file, the line (CSV) or the key (JSON), and the field.

use super::json::Doc;
use super::launch::LaunchTable;
use crate::error::{Error, Result};
use crate::metrics::StatKind;
use serde::Serialize;
use serde_json::Value;

/// Which client drove a point's load, as far as the corpus says (corpus README).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Client {
    /// InferenceX's fork of `vllm bench serve`: random lengths uniform in [0.8, 1.0] x ISL and x OSL,
    /// `--ignore-eos`, request rate inf, `--max-concurrency conc`, 10 x conc prompts (single node).
    InferenceX,
    /// NVIDIA's internal benchmark database (`source_file=<date>.csv`): settings not stated; assumed
    /// fixed lengths and a closed loop at the concurrency.
    NvidiaInternal,
    /// NVIDIA's gap analyses (`source_file=...gap-analysis...`): settings not stated, as above.
    NvidiaGapAnalysis,
}

impl Client {
    pub fn as_str(self) -> &'static str {
        match self {
            Client::InferenceX => "inferencex",
            Client::NvidiaInternal => "nvidia-internal",
            Client::NvidiaGapAnalysis => "nvidia-gap-analysis",
        }
    }

    /// How the client's load is replayed, for reports.
    pub fn note(self) -> &'static str {
        match self {
            Client::InferenceX => "InferenceX client: lengths uniform in [0.8, 1.0] x ISL/OSL, 10 x concurrency requests",
            Client::NvidiaInternal | Client::NvidiaGapAnalysis => {
                "client not stated: a closed loop at the concurrency, requests per client fitted (prior 10), fixed lengths (outputs up to 2% short: \
                 timing noise) assumed"
            }
        }
    }

    /// Shares of the stated input and output lengths a request's lengths may fall short by (uniform in
    /// [int((1 - share) L), L]). InferenceX states 0.2 for both. NVIDIA's rows state no client: their
    /// lengths are taken as fixed, except that each output may end up to 2% short, a stand-in for the
    /// timing noise of a real server ([`crate::workload::TIMING_NOISE_LENGTH_SPREAD`] says why; InferenceX's
    /// rows were within 6% where the NVIDIA rows' fixed lengths were 130-210% high).
    pub fn length_shortfall(self) -> (f64, f64) {
        match self {
            Client::InferenceX => (0.2, 0.2),
            _ => (0.0, crate::workload::TIMING_NOISE_LENGTH_SPREAD),
        }
    }
}

/// One pool of a disaggregated deployment as its source states it (aic-e2e `prefill_*`/`decode_*`
/// columns; InferenceX metadata.json `prefill`/`decode` blocks).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PoolLayout {
    pub workers: u32,
    pub tensor_parallel: u32,
    pub attention_dp: u32,
    pub moe_tp: u32,
    pub moe_ep: u32,
    /// The engine's batch size per worker where stated (aic-e2e `*_batch_size`: the benchmark's
    /// max_batch_size of that pool).
    pub batch_size: Option<u32>,
}

/// One measured load point of the corpus, as its file states it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CorpusPoint {
    /// The row's id (aic-e2e) or `<deployment>/<file>` (InferenceX).
    pub id: String,
    /// The file it was read from and its line (CSV; 0 for a JSON file).
    pub file: String,
    pub line: usize,
    /// `aic-e2e` or `inferencex-dsr1`.
    pub set: &'static str,
    pub client: Client,
    /// The model as the source names it (a Hugging Face id, or InferenceX's `dsr1`).
    pub model: String,
    /// The GPU as the source names it (`h100_sxm`, `gb200`, `mi355x`).
    pub gpu: String,
    /// The engine as the source names it (`vllm`, `sglang`, `trtllm`, `trt`, `dynamo-sglang`, `atom`).
    pub engine: String,
    pub engine_version: String,
    /// Precision columns as written: the deployment's precision, the dense GEMMs' and the MoE experts'
    /// quantization (empty where the source leaves them blank).
    pub precision: String,
    pub gemm_quant: String,
    pub moe_quant: String,
    /// The KV cache dtype where the source states it (InferenceX launch scripts), else None.
    pub kv_dtype: Option<String>,
    pub tensor_parallel: u32,
    pub pipeline_parallel: u32,
    pub attention_dp: u32,
    pub moe_tp: u32,
    pub moe_ep: u32,
    /// Prefill and decode on separate workers.
    pub disaggregated: bool,
    /// The prefill and decode pools of a disaggregated point (None otherwise).
    pub pools: Option<(PoolLayout, PoolLayout)>,
    /// Speculative decoding (`mtp`), None when off.
    pub spec_decoding: Option<String>,
    pub isl: u32,
    pub osl: u32,
    /// The client's concurrency (closed loop); 0 where a disaggregated row does not state it.
    pub concurrency: u32,
    /// The engine's batch size where the source gives one apart from the concurrency (aic-e2e
    /// `batch_size`: concurrency / attention-DP ranks).
    pub batch_size: Option<u32>,
    /// Requests the client sent where the source says (InferenceX single node: 10 x conc).
    pub requests: Option<u64>,
    /// TTFT (ms) and TPOT (ms) with the statistic the source kept (mean, else median).
    pub ttft_ms: Option<(StatKind, f64)>,
    pub tpot_ms: Option<(StatKind, f64)>,
    /// The median TTFT (ms) of a run that stalled once ([`stalled`]), whose mean TTFT is mostly the
    /// stall: the replay compares this instead (crate::corpus::express).
    pub stalled_ttft_p50_ms: Option<f64>,
    /// The date it was measured, where stated.
    pub date: String,
    /// An official row of its source (InferenceX marks its Together-cluster baselines unofficial:
    /// another client setup).
    pub official: bool,
    /// InferenceX's `random_range_ratio` where the file states it (0.8 for official rows).
    pub range_ratio: Option<f64>,
    /// Engine settings the launch script gave that the point's own files do not resolve
    /// (inferencex-dsr1's launch_settings.json, by folder or, for InferenceX's database rows in
    /// aic-e2e, by layout) or state as literal flags (metadata.json); None where nothing does.
    pub launch: Option<super::launch::LaunchSettings>,
    /// A disaggregated InferenceX point's per-pool settings from the recipe it launched
    /// (pd_recipes.json), where resolved.
    pub pd_launch: Option<Box<super::pd_recipes::PdLaunch>>,
}

impl CorpusPoint {
    /// A row of InferenceX's own database in aic-e2e (`db-dump` in silicon_data_source): InferenceX's
    /// client, a configuration named by the id, no inferencex-dsr1 folder of its own.
    pub fn is_inferencex_db_row(&self) -> bool {
        self.set == "aic-e2e" && self.client == Client::InferenceX
    }

    /// The point with the statistics a replay compares: a stalled run's median TTFT in place of
    /// its mean ([`CorpusPoint::stalled_ttft_p50_ms`]), else the point as stated.
    pub fn as_compared(&self) -> std::borrow::Cow<'_, CorpusPoint> {
        match self.stalled_ttft_p50_ms {
            None => std::borrow::Cow::Borrowed(self),
            Some(ms) => std::borrow::Cow::Owned(CorpusPoint { ttft_ms: Some((StatKind::P50, ms)), ..self.clone() }),
        }
    }
}

/// The columns of aic-e2e/measured.csv capsim reads (the rest are the disaggregated workers' layout,
/// read only to say a row is disaggregated).
#[derive(Debug, serde::Deserialize)]
struct AicRow {
    id: String,
    silicon_data_source: String,
    backend: String,
    backend_version: String,
    model_path: String,
    system: String,
    precision: String,
    mode: String,
    isl: String,
    osl: String,
    gemm_quant_mode: String,
    moe_quant_mode: String,
    batch_size: String,
    tp_size: String,
    pp_size: String,
    attention_dp_size: String,
    moe_tp_size: String,
    moe_ep_size: String,
    prefill_batch_size: String,
    prefill_num_workers: String,
    prefill_tp_size: String,
    prefill_attention_dp_size: String,
    prefill_moe_tp_size: String,
    prefill_moe_ep_size: String,
    decode_batch_size: String,
    decode_num_workers: String,
    decode_tp_size: String,
    decode_attention_dp_size: String,
    decode_moe_tp_size: String,
    decode_moe_ep_size: String,
    silicon_ttft_ms: String,
    silicon_tpot_ms: String,
}

/// The `key=value` fields of aic-e2e's `silicon_data_source` column.
fn source_field<'a>(source: &'a str, key: &str) -> Option<&'a str> {
    source.split(';').map(str::trim).find_map(|kv| kv.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

/// Read aic-e2e/measured.csv.
pub fn read_aic_e2e(file: &str, text: &str) -> Result<Vec<CorpusPoint>> {
    let mut rdr = csv::ReaderBuilder::new().has_headers(true).from_reader(text.as_bytes());
    let headers = rdr.headers().map_err(|e| Error::csv_row(file, 1, None, &e))?.clone();
    let mut out = Vec::new();
    for (i, rec) in rdr.deserialize::<AicRow>().enumerate() {
        let line = i + 2;
        let r = rec.map_err(|e| Error::csv_row(file, line, Some(&headers), &e))?;
        let err = |field: &str, msg: String| Error::input(file, Some(line), Some(field), msg);
        let count = |field: &str, s: &str, default: Option<u32>| -> Result<u32> {
            match (s.trim(), default) {
                ("", Some(d)) => Ok(d),
                ("", None) => Err(err(field, "required, empty".into())),
                (t, _) => {
                    t.parse::<u32>().map_err(|_| err(field, format!("must be a non-negative integer, got `{t}`")))
                }
            }
        };
        let ms = |field: &str, s: &str| -> Result<Option<(StatKind, f64)>> {
            match s.trim() {
                "" => Ok(None),
                t => match t.parse::<f64>() {
                    Ok(v) if v.is_finite() && v > 0.0 => Ok(Some((StatKind::Mean, v))),
                    _ => Err(err(field, format!("must be a positive number of ms, got `{t}`"))),
                },
            }
        };
        let src = r.silicon_data_source.as_str();
        let client = if src.starts_with("db-dump") {
            Client::InferenceX
        } else if src.contains("gap-analysis") {
            Client::NvidiaGapAnalysis
        } else if src.starts_with("source_file=") {
            Client::NvidiaInternal
        } else {
            return Err(err("silicon_data_source", format!("unknown source `{src}`")));
        };
        let disaggregated = match r.mode.as_str() {
            "agg" => false,
            "disagg" => true,
            m => return Err(err("mode", format!("must be agg or disagg, got `{m}`"))),
        };
        let batch_size = count("batch_size", &r.batch_size, Some(0))?;
        let concurrency = match source_field(src, "silicon_concurrency") {
            Some(c) => c.parse::<u32>().map_err(|_| {
                err("silicon_data_source", format!("silicon_concurrency must be an integer, got `{c}`"))
            })?,
            None if batch_size > 0 => batch_size,
            // A disaggregated row's client concurrency is not always stated (its workers' batch sizes
            // are): kept as 0, "not stated"; capsim does not replay those rows yet (crate::corpus).
            None if disaggregated => 0,
            None => return Err(err("batch_size", "no concurrency: neither silicon_concurrency nor batch_size".into())),
        };
        if concurrency == 0 && !disaggregated {
            return Err(err("silicon_data_source", "silicon_concurrency must be at least 1".into()));
        }
        let tp = if disaggregated {
            count("prefill_tp_size", &r.prefill_tp_size, Some(1))?.max(count(
                "decode_tp_size",
                &r.decode_tp_size,
                Some(1),
            )?)
        } else {
            match count("tp_size", &r.tp_size, None)? {
                // A deployment on no GPUs: refused, not read as one (the audit of 2026-11-28). No
                // row of the corpus states 0; its attention-DP and MoE columns do (15, 18 and 25
                // rows), meaning "not split", and are read as 1 below.
                0 => return Err(err("tp_size", "must be at least 1 GPU, got 0".into())),
                n => n,
            }
        };
        if r.pp_size.trim() == "0" {
            return Err(err("pp_size", "must be at least 1 stage, got 0".into()));
        }
        let pools = if disaggregated {
            let pool = |side: &str, cols: [&str; 6]| -> Result<PoolLayout> {
                let c = |i: usize, default: Option<u32>| {
                    count(
                        &format!(
                            "{side}_{}",
                            ["batch_size", "num_workers", "tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size"]
                                [i]
                        ),
                        cols[i],
                        default,
                    )
                };
                let batch = c(0, Some(0))?;
                Ok(PoolLayout {
                    workers: c(1, Some(0))?,
                    tensor_parallel: c(2, Some(1))?.max(1),
                    attention_dp: c(3, Some(1))?.max(1),
                    moe_tp: c(4, Some(1))?,
                    moe_ep: c(5, Some(1))?,
                    batch_size: (batch > 0).then_some(batch),
                })
            };
            Some((
                pool(
                    "prefill",
                    [
                        &r.prefill_batch_size,
                        &r.prefill_num_workers,
                        &r.prefill_tp_size,
                        &r.prefill_attention_dp_size,
                        &r.prefill_moe_tp_size,
                        &r.prefill_moe_ep_size,
                    ],
                )?,
                pool(
                    "decode",
                    [
                        &r.decode_batch_size,
                        &r.decode_num_workers,
                        &r.decode_tp_size,
                        &r.decode_attention_dp_size,
                        &r.decode_moe_tp_size,
                        &r.decode_moe_ep_size,
                    ],
                )?,
            ))
        } else {
            None
        };
        let (isl, osl) = (count("isl", &r.isl, None)?, count("osl", &r.osl, None)?);
        if isl == 0 || osl == 0 {
            return Err(err(if isl == 0 { "isl" } else { "osl" }, "must be at least 1 token".into()));
        }
        out.push(CorpusPoint {
            id: r.id.clone(),
            file: file.to_string(),
            line,
            set: "aic-e2e",
            client,
            model: r.model_path.clone(),
            gpu: r.system.clone(),
            engine: r.backend.clone(),
            engine_version: r.backend_version.clone(),
            precision: r.precision.clone(),
            gemm_quant: r.gemm_quant_mode.clone(),
            moe_quant: r.moe_quant_mode.clone(),
            kv_dtype: None,
            tensor_parallel: tp.max(1),
            pipeline_parallel: count("pp_size", &r.pp_size, Some(1))?.max(1),
            // A disaggregated row's attention-DP is its pools' (its own column is blank).
            attention_dp: count("attention_dp_size", &r.attention_dp_size, Some(1))?
                .max(pools.map_or(1, |(p, d)| p.attention_dp.max(d.attention_dp)))
                .max(1),
            moe_tp: count("moe_tp_size", &r.moe_tp_size, Some(1))?,
            moe_ep: count("moe_ep_size", &r.moe_ep_size, Some(1))?,
            disaggregated,
            pools,
            spec_decoding: None,
            isl,
            osl,
            concurrency,
            batch_size: (batch_size > 0).then_some(batch_size),
            requests: (client == Client::InferenceX).then_some(10 * concurrency as u64),
            ttft_ms: ms("silicon_ttft_ms", &r.silicon_ttft_ms)?,
            tpot_ms: ms("silicon_tpot_ms", &r.silicon_tpot_ms)?,
            stalled_ttft_p50_ms: None,
            date: source_field(src, "measured").unwrap_or("").chars().take(10).collect(),
            official: true,
            range_ratio: None,
            launch: None,
            pd_launch: None,
        });
    }
    Ok(out)
}

/// A required string field.
fn string(d: &Doc, key: &str) -> Result<String> {
    d.opt_string(key)?.ok_or_else(|| d.err(key, "required field is missing"))
}

/// A count that fits u32.
fn count32(d: &Doc, key: &str) -> Result<Option<u32>> {
    match d.count(key)? {
        Some(n) if n > u32::MAX as u64 => Err(d.err(key, format!("must be at most {}, got {n}", u32::MAX))),
        n => Ok(n.map(|n| n as u32)),
    }
}

/// A positive, finite number of milliseconds.
fn ms(d: &Doc, key: &str) -> Result<Option<f64>> {
    match d.opt_num(key)? {
        Some(x) if !(x.is_finite() && x > 0.0) => Err(d.err(key, format!("must be a positive number of ms, got {x}"))),
        x => Ok(x),
    }
}

/// One InferenceX deployment: its metadata.json and its point files, as (name, text).
///
/// `launch`: launch_settings.json, whose entry for this folder (named by `dir`'s last component)
/// gives each point's engine settings, before the SGLang flags metadata.json states as literals.
pub fn read_inferencex_deployment(
    dir: &str,
    metadata: &str,
    points: &[(String, &str)],
    launch: Option<&LaunchTable>,
) -> Result<Vec<CorpusPoint>> {
    let meta_file = format!("{dir}/metadata.json");
    let folder = dir.rsplit('/').next().unwrap_or(dir);
    let mv: Value = crate::measured::parse_json_lenient(metadata)
        .map_err(|e| Error::input(&meta_file, Some(e.line()), None, format!("malformed JSON: {e}")))?;
    let m = Doc { src: &meta_file, line: 1, v: &mv };
    let gpu = string(&m, "gpu")?;
    let engine = string(&m, "engine")?;
    let precision = string(&m, "precision")?;
    let engine_version = m.opt_string("engine_version")?.unwrap_or_default();
    let disaggregated = m.opt_bool("disagg")?.unwrap_or(false);
    let spec = m.opt_string("spec_decoding")?.filter(|s| s != "none");
    let kv = m.opt_string("kv_cache_dtype")?;
    let official = m.opt_bool("official")?.unwrap_or(true);
    let pool = |key: &str| -> Result<PoolLayout> {
        let v =
            mv.get(key).ok_or_else(|| m.err(key, "a disaggregated deployment needs a prefill and a decode block"))?;
        let d = Doc { src: &meta_file, line: 1, v };
        let tp = count32(&d, "tp")?.unwrap_or(1).max(1);
        let ep = count32(&d, "ep")?.unwrap_or(1).max(1);
        let workers = count32(&d, "workers")?.unwrap_or(0);
        let dpa = d.opt_bool("dp_attention")?.unwrap_or(false);
        // A worker's GPUs are its `tp`, and under DP attention each of them a rank; except where
        // the pool's `num_gpus` gives each worker more GPUs than `tp` (SGLang's GB200 recipes,
        // `tp: 1` with DP attention over 4 to 48 GPUs): there `tp` is each rank's, and the worker
        // runs num_gpus / workers / tp ranks of it.
        let per_worker = count32(&d, "num_gpus")?
            .filter(|&n| workers > 0 && n.is_multiple_of(workers))
            .map(|n| n / workers)
            .filter(|&g| dpa && g > tp && g.is_multiple_of(tp));
        let (gpus, ranks) = match per_worker {
            Some(g) => (g, g / tp),
            None => (tp, if dpa { tp } else { 1 }),
        };
        Ok(PoolLayout {
            workers,
            tensor_parallel: gpus,
            attention_dp: ranks,
            moe_tp: if ep > 1 { 1 } else { gpus },
            moe_ep: ep,
            batch_size: None,
        })
    };
    let pools = if disaggregated { Some((pool("prefill")?, pool("decode")?)) } else { None };
    let (tp, ep, dpa) = if let Some((p, d)) = pools {
        // The decode pool's layout, attention-DP if either pool runs it.
        (d.tensor_parallel, d.moe_ep, p.attention_dp > 1 || d.attention_dp > 1)
    } else {
        let tp = count32(&m, "tp")?.ok_or_else(|| m.err("tp", "required for a single-node deployment"))?;
        (tp, count32(&m, "ep")?.unwrap_or(1), m.opt_bool("dp_attention")?.unwrap_or(false))
    };
    // SGLang's literal launch flags (the values launch_settings.json resolves from shell variables
    // come first).
    let stated = match (disaggregated, engine.as_str()) {
        (false, "sglang") => super::launch::stated_sglang_flags(&mv),
        _ => None,
    };
    let launch_at = |conc: u32| match (launch.and_then(|t| t.at(folder, conc)), &stated) {
        (Some(t), Some(s)) => Some(t.or(s)),
        (t, s) => t.or_else(|| s.clone()),
    };
    let mut out = Vec::new();
    for (name, text) in points {
        let file = format!("{dir}/{name}");
        let v: Value = crate::measured::parse_json_lenient(text)
            .map_err(|e| Error::input(&file, Some(e.line()), None, format!("malformed JSON: {e}")))?;
        let o = Doc { src: &file, line: 1, v: &v };
        let conc = count32(&o, "max_concurrency")?.ok_or_else(|| o.err("max_concurrency", "required"))?;
        let isl = count32(&o, "random_input_len")?.ok_or_else(|| o.err("random_input_len", "required"))?;
        let osl = count32(&o, "random_output_len")?.ok_or_else(|| o.err("random_output_len", "required"))?;
        if conc == 0 || isl == 0 || osl == 0 {
            return Err(o.err("max_concurrency", "concurrency and lengths must be at least 1"));
        }
        let range_ratio = match v.get("random_range_ratio") {
            None | Some(Value::Null) => None,
            Some(x) => match x.as_f64() {
                Some(r) if (0.0..=1.0).contains(&r) => Some(r),
                _ => return Err(o.err("random_range_ratio", format!("must be in [0, 1], got {x}"))),
            },
        };
        let stat = |metric: &str| -> Result<Option<(StatKind, f64)>> {
            if let Some(x) = ms(&o, &format!("mean_{metric}_ms"))? {
                return Ok(Some((StatKind::Mean, x)));
            }
            Ok(ms(&o, &format!("median_{metric}_ms"))?.map(|x| (StatKind::P50, x)))
        };
        let stalled_ttft_p50_ms = match stalled(&o)? {
            true if o.opt_num("mean_ttft_ms")?.is_some() => ms(&o, "median_ttft_ms")?,
            _ => None,
        };
        let requests = o.count("num_prompts")?;
        out.push(CorpusPoint {
            id: format!("{dir}/{name}"),
            file: file.clone(),
            line: 0,
            set: "inferencex-dsr1",
            client: Client::InferenceX,
            model: match m.opt_string("model_hf_id")? {
                Some(id) => id,
                None => string(&m, "model")?,
            },
            gpu: gpu.clone(),
            engine: engine.clone(),
            engine_version: engine_version.clone(),
            precision: precision.clone(),
            gemm_quant: precision.clone(),
            moe_quant: precision.clone(),
            kv_dtype: kv.clone(),
            tensor_parallel: tp.max(1),
            pipeline_parallel: 1,
            attention_dp: if dpa { pools.map_or(tp, |(p, d)| p.attention_dp.max(d.attention_dp)).max(1) } else { 1 },
            moe_tp: if ep > 1 { 1 } else { tp.max(1) },
            moe_ep: ep.max(1),
            disaggregated,
            pools,
            spec_decoding: spec.clone(),
            isl,
            osl,
            concurrency: conc,
            batch_size: None,
            requests: Some(requests.unwrap_or(10 * conc as u64)),
            ttft_ms: stat("ttft")?,
            tpot_ms: stat("tpot")?,
            stalled_ttft_p50_ms,
            date: o.opt_string("date")?.unwrap_or_default(),
            official,
            range_ratio,
            launch: launch_at(conc),
            pd_launch: launch.and_then(|t| t.pd_at(folder, name)).map(|l| Box::new(l.clone())),
        });
    }
    Ok(out)
}

/// Whether a point's run stalled: some request waited for its first token more than twice as long
/// as the median request took from send to last token (p99 TTFT > 2 x median E2E latency). No queue
/// of a closed loop does that (a client's request waits behind at most the requests in flight, each
/// about one E2E long, and the first round's burst of prefills is shorter still), but a one-time
/// stall at the start does: DeepSeek-R1 FP4 on 8 x B200 under SGLang 0.5.5 (InferenceX, November
/// 2025), 8K/1K at 8 clients, has p99 TTFT 98.8 s against a median E2E of 13.3 s and a median TTFT
/// of 0.56 s, and its mean TTFT (9.2 s) is mostly the stall. Such a point's median TTFT is the
/// statistic compared (`stalled_ttft_p50_ms`); 11 of the 474 points that state a mean qualify, the
/// next largest ratio is 1.5. The rule cannot see a stall shorter than twice a request's life: the
/// same deployments' 1K/8K points (median E2E 140 s) show the same 70-80 s p99 and keep their mean.
fn stalled(o: &Doc) -> Result<bool> {
    let (Some(p99), Some(e2e)) = (ms(o, "p99_ttft_ms")?, ms(o, "median_e2el_ms")?) else {
        return Ok(false);
    };
    Ok(p99 > 2.0 * e2e)
}

/// The name of the launch settings file in an InferenceX folder ([`super::launch`]).
pub const LAUNCH_SETTINGS: &str = "launch_settings.json";

/// The name of the disaggregated points' recipe settings file in an InferenceX folder
/// ([`super::pd_recipes`]).
pub const PD_RECIPES: &str = "pd_recipes.json";

/// The folder's [`LAUNCH_SETTINGS`] with its [`PD_RECIPES`], where it has either.
pub fn read_launch_table(root: &std::path::Path) -> Result<Option<LaunchTable>> {
    let (path, pd) = (root.join(LAUNCH_SETTINGS), root.join(PD_RECIPES));
    if !path.is_file() && !pd.is_file() {
        return Ok(None);
    }
    let mut table = match path.is_file() {
        true => LaunchTable::parse(&path.display().to_string(), &crate::error::read_file(&path)?)?,
        false => LaunchTable::default(),
    };
    if pd.is_file() {
        table = table.with_pd_recipes(&pd.display().to_string(), &crate::error::read_file(&pd)?)?;
    }
    Ok(Some(table))
}

/// Read an InferenceX folder on disk (`inferencex-dsr1/`): every deployment folder in name order,
/// its metadata.json and its point files (every other `.json`), regular files only, each point with
/// its settings from `launch` (the folder's [`read_launch_table`]), whose every entry must name a
/// folder.
pub fn read_inferencex_dir(root: &std::path::Path, launch: Option<&LaunchTable>) -> Result<Vec<CorpusPoint>> {
    let io = |p: &std::path::Path, err| Error::Io { path: p.display().to_string(), err };
    let mut dirs: Vec<_> = std::fs::read_dir(root)
        .map_err(|e| io(root, e))?
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| io(root, e))?;
    dirs.sort_by_key(|e| e.file_name());
    let mut out = Vec::new();
    let mut folders = Vec::new();
    let mut point_files: Vec<String> = Vec::new();
    for d in dirs {
        let ft = d.file_type().map_err(|e| io(&d.path(), e))?;
        if !ft.is_dir() {
            continue;
        }
        let dir = d.path();
        let meta_path = dir.join("metadata.json");
        // Checked before it is opened: a FIFO would block the read forever.
        if !std::fs::metadata(&meta_path).map_err(|e| io(&meta_path, e))?.is_file() {
            return Err(Error::input(meta_path.display().to_string(), None, None, "not a regular file"));
        }
        let metadata = crate::error::read_file(&meta_path)?;
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| io(&dir, e))?
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(|e| io(&dir, e))?;
        files.sort_by_key(|e| e.file_name());
        let mut texts = Vec::new();
        for f in files {
            let name = f.file_name().to_string_lossy().to_string();
            let is_file = f.file_type().map_err(|e| io(&f.path(), e))?.is_file();
            if !is_file || name == "metadata.json" || !name.ends_with(".json") {
                continue;
            }
            texts.push((name, crate::error::read_file(&f.path())?));
        }
        let refs: Vec<(String, &str)> = texts.iter().map(|(n, t)| (n.clone(), t.as_str())).collect();
        let label = format!("{}/{}", root.display(), d.file_name().to_string_lossy());
        out.extend(read_inferencex_deployment(&label, &metadata, &refs, launch)?);
        let folder = d.file_name().to_string_lossy().to_string();
        point_files.extend(texts.iter().map(|(n, _)| format!("{folder}/{n}")));
        folders.push(folder);
    }
    if let Some(t) = launch {
        t.check_known(|dep| folders.iter().any(|f| f == dep), |p| point_files.iter().any(|f| f == p))?;
    }
    Ok(out)
}
