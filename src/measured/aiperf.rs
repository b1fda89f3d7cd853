//! AIPerf and GenAI-Perf exports. `profile_export_aiperf.json` (AIPerf) and
//! `profile_export_genai_perf.json` (GenAI-Perf) hold one run's aggregates, each metric an object
//! `{unit, avg, p50, p90, p95, p99, ...}`, and the run's settings under `input_config` (AIPerf 0.13:
//! `phases[].{type: concurrency|poisson|constant|..., concurrency, rate, requests}`; older AIPerf:
//! `loadgen.{concurrency, request_rate, request_count}`; GenAI-Perf: `concurrency`, `request_rate`).
//! `profile_export.jsonl` beside it lists the requests (`metadata.request_start_ns`,
//! `metrics.input_sequence_length.value`, `output_sequence_length.value`); it is merged into the run
//! of the aggregate file next to it, and gives the lengths and the request count where the summary
//! lacks them (older AIPerf writes no `request_count`). Where neither states the sequence lengths,
//! the token counts the server reported (`usage_prompt_tokens`, `usage_completion_tokens`) are the
//! lengths; where no records sit beside the summary, its percentiles of the lengths are replayed. Definitions (AIPerf docs, metrics reference):
//! `time_to_first_token`; `inter_token_latency` = (request latency - TTFT) / (output tokens - 1), i.e.
//! vLLM's TPOT; `inter_chunk_latency` = the gaps between streamed chunks, pooled like vLLM's ITL (one
//! token a chunk on the engines capsim models); `request_latency`; `output_token_throughput` over the
//! benchmark's duration.

use super::json::{parse_documents, tokens, Doc};
use super::lengths::{read_percentiles, LengthPercentiles};
use super::{checked, mean, MeasuredStat, RateProcess, RequestObs, Run, RunLoad, RunSource, Tool};
use crate::error::{Error, Result};
use crate::metrics::StatKind;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn is_metric(v: &Value) -> bool {
    v.get("unit").is_some() && (v.get("avg").is_some() || v.get("p50").is_some())
}

/// The metrics AIPerf and GenAI-Perf write for every run, each an object `{unit, avg, ...}`.
const SIGNATURE: &[&str] = &[
    "request_latency",
    "time_to_first_token",
    "inter_token_latency",
    "request_throughput",
    "output_token_throughput",
    "output_sequence_length",
    "input_sequence_length",
    "request_count",
];

/// An aggregate export: its settings and a metric, or (the settings missing, for the reader to name)
/// the tool's version key or three of the metrics it always writes.
pub fn recognizes_aggregate(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    let metrics = SIGNATURE.iter().filter(|k| o.get(**k).is_some_and(is_metric)).count();
    (v.get("input_config").is_some() && o.values().any(is_metric))
        || ((v.get("aiperf_version").is_some() || v.get("genai_perf_version").is_some()) && metrics >= 1)
        || metrics >= 3
}

pub fn recognizes_records(v: &Value) -> bool {
    v.get("metadata").is_some_and(|m| m.get("request_start_ns").is_some()) && v.get("metrics").is_some()
}

/// The per-request export that goes with an aggregate file: X_aiperf.json -> X.jsonl.
pub(crate) fn records_sibling(aggregate: &Path) -> Option<PathBuf> {
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
    let cfg = d.get("input_config").ok_or_else(|| {
        d.err("input_config", "missing: the run's settings (its concurrency or request rate) are under it")
    })?;
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
                pd.clients("concurrency")?,
                pd.opt_num("rate")?,
                pd.opt_str("type"),
                pd.requests("requests")?,
                "input_config.phases[]",
            )
        }
        None => {
            let lg = if cfg.get("loadgen").is_some() { "loadgen." } else { "" };
            (
                c.clients(&format!("{lg}concurrency"))?,
                c.opt_num(&format!("{lg}request_rate"))?,
                None,
                c.requests(&format!("{lg}request_count"))?,
                "input_config",
            )
        }
    };
    let load = match (rate.filter(|r| r.is_finite()), conc) {
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
    // The requests beside the summary: their lengths, and their count where the summary has none
    // (older AIPerf writes no `request_count`).
    let (per_request, errored_records) = match records_sibling(path) {
        Some(rec) => {
            let (ok, errored) = read_records(&rec)?;
            let n = ok.len() as u64;
            (ok, Some((n, errored)))
        }
        None => (Vec::new(), None),
    };
    let completed = d.requests("request_count.avg")?.or(errored_records.map(|(ok, _)| ok)).or(planned).unwrap_or(0);
    let failed = match d.requests("error_request_count.avg")? {
        Some(n) => n,
        None => match v.get("error_summary").and_then(Value::as_array).filter(|e| !e.is_empty()) {
            Some(errors) => errors.iter().enumerate().try_fold(0u64, |sum, (i, e)| {
                let ed = Doc { src, line: 1, v: e };
                let n = ed
                    .requests("count")
                    .map_err(|_| d.err(&format!("error_summary[{i}].count"), "must be a whole number of requests"))?;
                Ok::<u64, Error>(sum + n.unwrap_or(1))
            })?,
            None => errored_records.map_or(0, |(_, e)| e),
        },
    };

    // Lengths: the records', else the summary's (AIPerf's sequence lengths, else the token counts
    // the server reported), with their percentiles where the records are absent.
    const INPUT_KEYS: &[&str] = &["input_sequence_length", "usage_prompt_tokens"];
    const OUTPUT_KEYS: &[&str] = &["output_sequence_length", "output_token_count", "usage_completion_tokens"];
    let summary_mean = |keys: &[&str], total: &str| -> Result<Option<f64>> {
        for k in keys {
            if let Some(m) = avg(k)? {
                return Ok(Some(m));
            }
        }
        Ok(avg(total)?.filter(|_| completed > 0).map(|t| t / completed as f64))
    };
    let input_mean = match mean(per_request.iter().map(|r| r.input_tokens as f64)) {
        Some(m) => m,
        None => summary_mean(INPUT_KEYS, "total_isl")?.ok_or_else(|| {
            d.err(
                "input_sequence_length",
                "missing (and usage_prompt_tokens, total_isl, and a profile_export.jsonl beside it): the replay needs the input length",
            )
        })?,
    };
    let output_mean = match mean(per_request.iter().map(|r| r.output_tokens as f64)) {
        Some(m) => m,
        None => summary_mean(OUTPUT_KEYS, "total_osl")?.ok_or_else(|| {
            d.err(
                "output_sequence_length",
                "missing (and output_token_count, usage_completion_tokens, total_osl, and a profile_export.jsonl beside it): the replay needs the output length",
            )
        })?,
    };
    let mut length_percentiles = LengthPercentiles::default();
    if per_request.is_empty() {
        const PCT: &[(&str, f64)] = &[
            ("min", 0.0),
            ("p1", 0.01),
            ("p5", 0.05),
            ("p10", 0.10),
            ("p25", 0.25),
            ("p50", 0.50),
            ("p75", 0.75),
            ("p90", 0.90),
            ("p95", 0.95),
            ("p99", 0.99),
            ("max", 1.0),
        ];
        let pct = |keys: &[&str]| match keys.iter().find(|k| d.get(k).is_some()) {
            Some(k) => read_percentiles(&d, k, PCT),
            None => Ok(vec![]),
        };
        length_percentiles = LengthPercentiles { input: pct(INPUT_KEYS)?, output: pct(OUTPUT_KEYS)? };
    }

    let mut stats = Vec::new();
    let mut not_compared = Vec::new();
    for &(key, name, factor) in METRICS {
        // The tools write these for every streamed run: one the file lacks is said, not dropped
        // (a run without streaming has no TTFT or inter-token latency).
        let quantity = match name {
            "ttft_s" => Some("TTFT"),
            "tpot_ms" => Some("inter-token latency"),
            "e2e_ms" => Some("request latency"),
            _ => None,
        };
        let Some(m) = d.get(key) else {
            if let Some(q) = quantity {
                not_compared.push(super::absent_note(key, q, &[], false));
            }
            continue;
        };
        if let Some(q) = quantity.filter(|_| m.get("avg").is_none_or(Value::is_null)) {
            let stated: Vec<StatKind> =
                [("p50", StatKind::P50), ("p90", StatKind::P90), ("p95", StatKind::P95), ("p99", StatKind::P99)]
                    .iter()
                    .filter(|(k, _)| m.get(k).is_some_and(|x| !x.is_null()))
                    .map(|(_, s)| *s)
                    .collect();
            not_compared.push(super::absent_note(&format!("{key}.avg"), q, &stated, true));
        }
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
        source: RunSource {
            file: src.to_string(),
            index: 0,
            runs_in_file: 1,
            tool,
            tool_version: version,
            model_id,
            engine: None,
        },
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
        length_percentiles,
    })
    .map(|r| vec![r])
}

/// The requests of a `profile_export.jsonl`: the successful ones in send order, and how many failed.
/// A request's lengths are AIPerf's sequence lengths, else the token counts the server reported.
fn read_records(path: &Path) -> Result<(Vec<RequestObs>, u64)> {
    let src = path.display().to_string();
    let text = crate::error::read_file(path)?;
    let mut out: Vec<(f64, usize, RequestObs)> = Vec::new();
    let mut errored = 0;
    for (line, v) in parse_documents(&src, &text)? {
        let d = Doc { src: &src, line, v: &v };
        if !recognizes_records(&v) {
            return Err(d.err("metadata.request_start_ns", "not an AIPerf request record"));
        }
        if v.get("error").is_some_and(|e| !e.is_null()) {
            errored += 1;
            continue;
        }
        let start_ns = d.num("metadata.request_start_ns")?;
        if !start_ns.is_finite() || start_ns < 0.0 {
            return Err(d.err(
                "metadata.request_start_ns",
                format!("must be a finite, non-negative time (ns since the epoch), got {start_ns}"),
            ));
        }
        let first = |keys: &[&str]| -> Result<(String, f64)> {
            for k in keys {
                let path = format!("metrics.{k}.value");
                if let Some(x) = d.opt_num(&path)? {
                    return Ok((path, x));
                }
            }
            Err(d.err(&format!("metrics.{}.value", keys[0]), format!("missing (and {})", keys[1..].join(", "))))
        };
        let (ik, isl) = first(&["input_sequence_length", "usage_prompt_tokens"])?;
        let (ok, osl) = first(&["output_sequence_length", "output_token_count", "usage_completion_tokens"])?;
        let input_tokens = tokens(&d, &ik, isl, 1)?;
        let output_tokens = tokens(&d, &ok, osl, 0)?;
        out.push((start_ns, line, RequestObs { input_tokens, output_tokens, start_s: None }));
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    let t0 = out.first().map_or(0.0, |x| x.0);
    // The sends span the run: one beyond any run capsim replays is a clock mixed up (a time in
    // microseconds or seconds among nanoseconds), refused at that record, as the other readers
    // bound their times.
    if let Some((t, line, _)) = out.last() {
        let span_s = (t - t0) * 1e-9;
        if span_s > crate::workload::MAX_TIME_S {
            let v = Value::Null;
            let d = Doc { src: &src, line: *line, v: &v };
            return Err(d.err(
                "metadata.request_start_ns",
                format!(
                    "sent {span_s:.3e} s after the first request, beyond the {:.0} s a replayed run may span: are all the records' times in nanoseconds?",
                    crate::workload::MAX_TIME_S
                ),
            ));
        }
    }
    let ok = out
        .into_iter()
        .map(|(t, _, mut r)| {
            r.start_s = Some((t - t0) * 1e-9);
            r
        })
        .collect();
    Ok((ok, errored))
}
