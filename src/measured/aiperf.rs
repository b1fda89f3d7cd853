//! AIPerf and GenAI-Perf exports. `profile_export_aiperf.json` (AIPerf) and
//! `profile_export_genai_perf.json` (GenAI-Perf) hold one run's aggregates, each metric an object
//! `{unit, avg, p50, p90, p95, p99, ...}`, and the run's settings under `input_config` (AIPerf 0.13:
//! `phases[].{type: concurrency|poisson|constant|..., concurrency, rate, requests}`; older AIPerf:
//! `loadgen.{concurrency, request_rate, request_count}`; GenAI-Perf: `concurrency`, `request_rate`).
//! `profile_export.jsonl` beside it lists the requests (`metadata.request_start_ns`,
//! `metrics.input_sequence_length.value`, `output_sequence_length.value`); it is merged into the run
//! of the aggregate file next to it. Definitions (AIPerf docs, metrics reference):
//! `time_to_first_token`; `inter_token_latency` = (request latency - TTFT) / (output tokens - 1), i.e.
//! vLLM's TPOT; `inter_chunk_latency` = the gaps between streamed chunks, pooled like vLLM's ITL (one
//! token a chunk on the engines capsim models); `request_latency`; `output_token_throughput` over the
//! benchmark's duration.

use super::json::{parse_documents, Doc};
use super::{checked, mean, MeasuredStat, RateProcess, RequestObs, Run, RunLoad, RunSource, Tool};
use crate::error::{Error, Result};
use crate::metrics::StatKind;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn is_metric(v: &Value) -> bool {
    v.get("unit").is_some() && (v.get("avg").is_some() || v.get("p50").is_some())
}

pub fn recognizes_aggregate(v: &Value) -> bool {
    v.get("input_config").is_some() && v.as_object().is_some_and(|o| o.values().any(is_metric))
}

pub fn recognizes_records(v: &Value) -> bool {
    v.get("metadata").is_some_and(|m| m.get("request_start_ns").is_some()) && v.get("metrics").is_some()
}

/// The per-request export that goes with an aggregate file: X_aiperf.json -> X.jsonl.
fn records_sibling(aggregate: &Path) -> Option<PathBuf> {
    let name = aggregate.file_name()?.to_str()?;
    let stem = name.strip_suffix("_aiperf.json")?;
    let p = aggregate.with_file_name(format!("{stem}.jsonl"));
    p.is_file().then_some(p)
}

/// Whether `p` is a per-request export whose aggregate file sits beside it (read with it).
pub fn is_merged_sibling(p: &Path) -> bool {
    let Some(name) = p.file_name().and_then(|n| n.to_str()) else { return false };
    name.strip_suffix(".jsonl").is_some_and(|stem| p.with_file_name(format!("{stem}_aiperf.json")).is_file())
}

/// (file key, capsim metric, factor from milliseconds to capsim's unit)
const METRICS: &[(&str, &str, f64)] = &[
    ("time_to_first_token", "ttft_s", 1e-3),
    ("inter_token_latency", "tpot_ms", 1.0),
    ("inter_chunk_latency", "itl_ms", 1.0),
    ("request_latency", "e2e_ms", 1.0),
];

fn ms_factor(unit: &str) -> Option<f64> {
    match unit {
        "ms" => Some(1.0),
        "ns" => Some(1e-6),
        "us" => Some(1e-3),
        "s" | "sec" | "seconds" => Some(1e3),
        _ => None,
    }
}

pub fn read(path: &Path, src: &str, v: &Value) -> Result<Vec<Run>> {
    let d = Doc { src, line: 1, v };
    let tool = if v.get("aiperf_version").is_some()
        || d.get("input_config.phases").is_some()
        || d.get("input_config.loadgen").is_some()
    {
        Tool::Aiperf
    } else {
        Tool::GenaiPerf
    };
    let version = d.opt_str("aiperf_version").or_else(|| d.opt_str("genai_perf_version"));
    let cfg = d.get("input_config").expect("recognized");
    let c = Doc { src, line: 1, v: cfg };
    // The profiling phase (AIPerf 0.13), else the older layouts.
    let phase = cfg
        .get("phases")
        .and_then(Value::as_array)
        .and_then(|ps| ps.iter().find(|p| p.get("kind").and_then(Value::as_str).is_none_or(|k| k == "profiling")));
    let (conc, rate, kind, planned, prefix) = match phase {
        Some(p) => {
            let pd = Doc { src, line: 1, v: p };
            (
                pd.count("concurrency")?,
                pd.opt_num("rate")?,
                pd.opt_str("type"),
                pd.count("requests")?,
                "input_config.phases[]",
            )
        }
        None => {
            let lg = if cfg.get("loadgen").is_some() { "loadgen." } else { "" };
            (
                c.count(&format!("{lg}concurrency"))?,
                c.opt_num(&format!("{lg}request_rate"))?,
                None,
                c.count(&format!("{lg}request_count"))?,
                "input_config",
            )
        }
    };
    let cap = conc.map(|n| n.min(u32::MAX as u64) as u32);
    let load = match (rate.filter(|r| r.is_finite()), cap) {
        (Some(r), cap) => RunLoad::Rate {
            rate_per_s: r,
            process: if kind.as_deref() == Some("constant") {
                RateProcess::Constant
            } else {
                RateProcess::Gamma { burstiness: 1.0 }
            },
            max_concurrency: cap,
        },
        (None, Some(n)) => RunLoad::Concurrency { clients: n },
        (None, None) => {
            return Err(Error::input(
                src,
                None,
                Some(&format!("{prefix}.concurrency")),
                "the run has neither a concurrency nor a request rate: its load cannot be replayed",
            ))
        }
    };

    let avg = |k: &str| d.opt_num(&format!("{k}.avg"));
    let completed = avg("request_count")?.map(|x| x as u64).or(planned).unwrap_or(0);
    let failed = avg("error_request_count")?.map(|x| x as u64).unwrap_or_else(|| {
        v.get("error_summary")
            .and_then(Value::as_array)
            .map_or(0, |e| e.iter().map(|x| x.get("count").and_then(Value::as_u64).unwrap_or(1)).sum())
    });

    let mut per_request = Vec::new();
    if let Some(rec) = records_sibling(path) {
        per_request = read_records(&rec)?;
    }
    let input_mean = mean(per_request.iter().map(|r| r.input_tokens as f64))
        .map_or_else(|| avg("input_sequence_length"), |m| Ok(Some(m)))?
        .ok_or_else(|| d.err("input_sequence_length", "missing: the replay needs the input length"))?;
    let output_mean = mean(per_request.iter().map(|r| r.output_tokens as f64))
        .map_or_else(|| avg("output_sequence_length"), |m| Ok(Some(m)))?
        .ok_or_else(|| d.err("output_sequence_length", "missing: the replay needs the output length"))?;

    let mut stats = Vec::new();
    let mut not_compared = Vec::new();
    for &(key, name, factor) in METRICS {
        let Some(m) = d.get(key) else { continue };
        let md = Doc { src, line: 1, v: m };
        let unit = md.opt_str("unit").unwrap_or_else(|| "ms".into());
        let to_ms =
            ms_factor(&unit).ok_or_else(|| d.err(&format!("{key}.unit"), format!("unknown time unit `{unit}`")))?;
        for (k, stat) in [
            ("avg", StatKind::Mean),
            ("p50", StatKind::P50),
            ("p90", StatKind::P90),
            ("p95", StatKind::P95),
            ("p99", StatKind::P99),
        ] {
            if let Some(x) = md.opt_num(k)? {
                stats.push(MeasuredStat { metric: name, stat, value: x * to_ms * factor, key: format!("{key}.{k}") });
            }
        }
    }
    for (key, name) in [("output_token_throughput", "output_tok_s"), ("request_throughput", "request_per_s")] {
        if let Some(x) = avg(key)? {
            stats.push(MeasuredStat { metric: name, stat: StatKind::Mean, value: x, key: format!("{key}.avg") });
        }
    }
    if v.get("output_token_throughput_per_user").is_some() {
        not_compared.push("output_token_throughput_per_user (1 / inter_token_latency per request)".into());
    }
    let model_id = d
        .get("input_config.models.items")
        .and_then(|a| a.get(0))
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .or_else(|| d.get("input_config.model_names").and_then(|a| a.get(0)).and_then(Value::as_str))
        .map(str::to_string);
    checked(Run {
        source: RunSource { file: src.to_string(), index: 0, tool, tool_version: version, model_id },
        load,
        requests: planned.unwrap_or(completed + failed).max(completed + failed),
        completed,
        failed,
        input_tokens_mean: input_mean,
        output_tokens_mean: output_mean,
        per_request,
        stats,
        not_compared,
        uniform_lengths: None,
    })
    .map(|r| vec![r])
}

/// The requests of a `profile_export.jsonl`, successful ones only, in send order.
fn read_records(path: &Path) -> Result<Vec<RequestObs>> {
    let src = path.display().to_string();
    let text = crate::error::read_file(path)?;
    let mut out: Vec<(f64, RequestObs)> = Vec::new();
    for (line, v) in parse_documents(&src, &text)? {
        let d = Doc { src: &src, line, v: &v };
        if !recognizes_records(&v) {
            return Err(d.err("metadata.request_start_ns", "not an AIPerf request record"));
        }
        if v.get("error").is_some_and(|e| !e.is_null()) {
            continue;
        }
        let start_ns = d.num("metadata.request_start_ns")?;
        let isl = d.num("metrics.input_sequence_length.value")?;
        let osl = d
            .opt_num("metrics.output_sequence_length.value")?
            .map_or_else(|| d.num("metrics.usage_completion_tokens.value"), Ok)?;
        if !(isl >= 1.0 && osl >= 0.0 && isl.is_finite() && osl.is_finite()) {
            return Err(d.err("metrics.input_sequence_length.value", format!("bad lengths {isl} / {osl}")));
        }
        out.push((start_ns, RequestObs { input_tokens: isl as u32, output_tokens: osl as u32, start_s: None }));
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    let t0 = out.first().map_or(0.0, |x| x.0);
    Ok(out
        .into_iter()
        .map(|(t, mut r)| {
            r.start_s = Some((t - t0) * 1e-9);
            r
        })
        .collect())
}
