//! GuideLLM benchmarks.json (`guidellm benchmark --output-path`, `guidellm run --output kind=json`):
//! `metadata.version` 1 or 2 (version 1 files put the report's fields at the top level too), a list of
//! `benchmarks`, each with its strategy (`config.strategy`, older `args.strategy`: `type_` synchronous,
//! concurrent with `streams`, throughput with `max_concurrency`, constant and poisson with `rate`),
//! `metrics.<name>.successful.{mean, median, percentiles.pNN}` and the requests (`requests.successful`,
//! `errored`, `incomplete`). Definitions (guidellm/benchmark/schemas): `time_to_first_token_ms`;
//! `inter_token_latency_ms` = (latency - TTFT) / (output tokens - 1) per request, i.e. vLLM's TPOT;
//! `time_per_output_token_ms` = latency / output tokens (TTFT included; not compared: no capsim
//! quantity has that definition); `request_latency` in seconds; `output_tokens_per_second` over the
//! benchmark's duration.

use super::json::{tokens, Doc};
use super::lengths::{read_percentiles, LengthPercentiles};
use super::{checked, mean, MeasuredStat, RateProcess, RequestObs, Run, RunLoad, RunSource, Tool};
use crate::error::{Error, Result};
use crate::metrics::StatKind;
use serde_json::Value;

pub fn recognizes(v: &Value) -> bool {
    v.get("benchmarks").is_some_and(Value::is_array)
        && (v.get("metadata").is_some()
            || v["benchmarks"].get(0).is_some_and(|b| b.get("metrics").is_some() && b.get("requests").is_some()))
}

/// A request's times in GuideLLM's per-request stats (`requests.successful[]`), with the factor to
/// seconds.
const REQUEST_TIMES: &[(&str, f64)] = &[
    ("time_to_first_token_ms", 1e-3),
    ("time_to_first_output_token_ms", 1e-3),
    ("inter_token_latency_ms", 1e-3),
    ("time_per_output_token_ms", 1e-3),
    ("time_to_last_round_trip_ms", 1e-3),
    ("avg_round_trip_time_ms", 1e-3),
    ("request_latency", 1.0),
];

/// (file key, capsim metric, factor to capsim's unit)
const METRICS: &[(&str, &str, f64)] = &[
    ("time_to_first_token_ms", "ttft_s", 1e-3),
    ("inter_token_latency_ms", "tpot_ms", 1.0),
    ("request_latency", "e2e_ms", 1e3),
];

pub fn read(src: &str, v: &Value) -> Result<Vec<Run>> {
    let top = Doc { src, line: 1, v };
    let version = top.opt_str("metadata.guidellm_version").or_else(|| top.opt_str("guidellm_version"));
    let benches = v["benchmarks"].as_array().expect("recognized");
    if benches.is_empty() {
        return Err(top.err("benchmarks", "no benchmark in the file"));
    }
    benches.iter().enumerate().map(|(i, b)| read_one(src, i, b, version.clone())).collect()
}

fn read_one(src: &str, index: usize, b: &Value, version: Option<String>) -> Result<Run> {
    let d = Doc { src, line: 1, v: b };
    let at = |field: &str| format!("benchmarks[{index}].{field}");
    let err = |field: &str, msg: String| Error::input(src, None, Some(&at(field)), msg);
    let strat = d.get("config.strategy").or_else(|| d.get("args.strategy")).ok_or_else(|| {
        err(
            "config.strategy",
            "missing: the benchmark's load (synchronous, concurrent, throughput, constant, poisson)".into(),
        )
    })?;
    let s = Doc { src, line: 1, v: strat };
    let kind = s.opt_str("type_").or_else(|| s.opt_str("type")).unwrap_or_default();
    let in_strategy = |e| under(e, &at("config.strategy"));
    let cap = s.clients("max_concurrency").map_err(in_strategy)?;
    let load = match kind.as_str() {
        "synchronous" => RunLoad::Concurrency { clients: 1 },
        "concurrent" => RunLoad::Concurrency {
            clients: s
                .clients("streams")
                .map_err(in_strategy)?
                .ok_or_else(|| err("config.strategy.streams", "missing".into()))?,
        },
        "throughput" => cap.map_or(RunLoad::Burst, |n| RunLoad::Concurrency { clients: n }),
        "constant" | "poisson" | "async" => RunLoad::Rate {
            rate_per_s: s.num("rate").map_err(|_| err("config.strategy.rate", "missing".into()))?,
            process: if kind == "constant" { RateProcess::Constant } else { RateProcess::Gamma { burstiness: 1.0 } },
            max_concurrency: cap,
        },
        other => {
            return Err(err(
                "config.strategy.type_",
                format!("unknown strategy `{other}` (synchronous, concurrent, throughput, constant, poisson)"),
            ))
        }
    };
    let ok: Vec<&Value> =
        d.get("requests.successful").and_then(Value::as_array).map(|a| a.iter().collect()).unwrap_or_default();
    let n_errored = d.get("requests.errored").and_then(Value::as_array).map_or(0, Vec::len) as u64;
    let n_incomplete = d.get("requests.incomplete").and_then(Value::as_array).map_or(0, Vec::len) as u64;
    let totals = |k: &str| d.requests(&format!("metrics.request_totals.{k}")).map_err(|e| under(e, &at("")));
    let completed = totals("successful")?.unwrap_or(ok.len() as u64);
    let failed = totals("errored")?.unwrap_or(n_errored);
    let incomplete = totals("incomplete")?.unwrap_or(n_incomplete);

    let mut per_request = Vec::new();
    let t0 = ok
        .iter()
        .filter_map(|r| r.get("request_start_time").or(r.get("start_time")).and_then(Value::as_f64))
        .reduce(f64::min);
    for (j, r) in ok.iter().enumerate() {
        let rd = Doc { src, line: 1, v: r };
        let field = |k: &str| at(&format!("requests.successful[{j}].{k}"));
        let tokens = |k: &str| -> Result<u32> {
            let x = rd.num(k).map_err(|_| Error::input(src, None, Some(&field(k)), "missing"))?;
            tokens(&rd, &field(k), x, 0)
        };
        let start = r.get("request_start_time").or(r.get("start_time")).and_then(Value::as_f64);
        // The request's own times: not replayed, but a negative or impossible one is no
        // measurement, so the file is refused naming it rather than read past.
        for (k, to_s) in REQUEST_TIMES {
            let Some(x) = rd.opt_num(k).map_err(|e| under(e, &at(&format!("requests.successful[{j}]"))))? else {
                continue;
            };
            let max = crate::workload::MAX_TIME_S;
            if !(x.is_finite() && x >= 0.0 && x * to_s <= max) {
                let unit = if *to_s == 1.0 { "s" } else { "ms" };
                return Err(Error::input(
                    src,
                    None,
                    Some(&field(k)),
                    format!(
                        "must be a time from 0 to {} {unit}, got {}",
                        crate::error::fmt_num(max / to_s),
                        crate::error::fmt_num(x)
                    ),
                ));
            }
        }
        for k in ["request_start_time", "start_time", "request_end_time", "end_time"] {
            if let Some(x) = r.get(k).filter(|x| !x.is_null()) {
                if !x.as_f64().is_some_and(f64::is_finite) {
                    return Err(Error::input(
                        src,
                        None,
                        Some(&field(k)),
                        format!("must be a time in seconds, got {x}"),
                    ));
                }
            }
        }
        per_request.push(RequestObs {
            input_tokens: tokens("prompt_tokens")?.max(1),
            output_tokens: tokens("output_tokens")?,
            start_s: start.zip(t0).map(|(s, t0)| s - t0),
        });
    }
    let input_mean = mean(per_request.iter().map(|r| r.input_tokens as f64))
        .map_or_else(|| d.opt_num("metrics.prompt_token_count.successful.mean"), |m| Ok(Some(m)))?
        .ok_or_else(|| err("metrics.prompt_token_count", "missing, and no per-request prompt_tokens".into()))?;
    let output_mean = mean(per_request.iter().map(|r| r.output_tokens as f64))
        .map_or_else(|| d.opt_num("metrics.output_token_count.successful.mean"), |m| Ok(Some(m)))?
        .ok_or_else(|| err("metrics.output_token_count", "missing, and no per-request output_tokens".into()))?;

    // Where the file lists no requests, the percentiles of the lengths (replayed as a distribution).
    let mut length_percentiles = LengthPercentiles::default();
    if per_request.is_empty() {
        let keys = [
            ("min", 0.0),
            ("percentiles.p001", 0.001),
            ("percentiles.p01", 0.01),
            ("percentiles.p05", 0.05),
            ("percentiles.p10", 0.10),
            ("percentiles.p25", 0.25),
            ("percentiles.p50", 0.50),
            ("percentiles.p75", 0.75),
            ("percentiles.p90", 0.90),
            ("percentiles.p95", 0.95),
            ("percentiles.p99", 0.99),
            ("percentiles.p999", 0.999),
            ("max", 1.0),
        ];
        let pct =
            |k: &str| read_percentiles(&d, &format!("metrics.{k}.successful"), &keys).map_err(|e| under(e, &at("")));
        length_percentiles =
            LengthPercentiles { input: pct("prompt_token_count")?, output: pct("output_token_count")? };
    }

    let mut stats = Vec::new();
    let mut not_compared = vec!["time_per_output_token_ms (latency / output tokens, TTFT included)".to_string()];
    for &(key, name, factor) in METRICS {
        let base = format!("metrics.{key}.successful");
        // GuideLLM writes each for every benchmark: one the file lacks is said, not dropped.
        let quantity = match name {
            "ttft_s" => "TTFT",
            "tpot_ms" => "inter-token latency",
            _ => "request latency",
        };
        let Some(dist) = d.get(&base) else {
            not_compared.push(super::absent_note(&format!("metrics.{key}"), quantity, &[], false));
            continue;
        };
        if dist.get("mean").is_none_or(Value::is_null) {
            let stated: Vec<StatKind> = ["median", "percentiles.p90", "percentiles.p95", "percentiles.p99"]
                .iter()
                .zip([StatKind::P50, StatKind::P90, StatKind::P95, StatKind::P99])
                .filter(|(k, _)| Doc { src, line: 1, v: dist }.get(k).is_some())
                .map(|(_, s)| s)
                .collect();
            not_compared.push(super::absent_note(&format!("{key}.successful.mean"), quantity, &stated, true));
        }
        let dd = Doc { src, line: 1, v: dist };
        for (k, stat) in [("mean", StatKind::Mean), ("median", StatKind::P50)] {
            if let Some(x) = dd.opt_num(k)? {
                stats.push(MeasuredStat {
                    metric: name,
                    stat,
                    value: x * factor,
                    key: format!("{key}.successful.{k}"),
                });
            }
        }
        for (k, stat) in [("p90", StatKind::P90), ("p95", StatKind::P95), ("p99", StatKind::P99)] {
            if let Some(x) = dd.opt_num(&format!("percentiles.{k}"))? {
                stats.push(MeasuredStat {
                    metric: name,
                    stat,
                    value: x * factor,
                    key: format!("{key}.successful.percentiles.{k}"),
                });
            }
        }
    }
    if let Some(x) = d.opt_num("metrics.output_tokens_per_second.successful.mean")? {
        stats.push(MeasuredStat {
            metric: "output_tok_s",
            stat: StatKind::Mean,
            value: x,
            key: "output_tokens_per_second.successful.mean".into(),
        });
    }
    if let Some(x) = d.opt_num("metrics.requests_per_second.successful.mean")? {
        stats.push(MeasuredStat {
            metric: "request_per_s",
            stat: StatKind::Mean,
            value: x,
            key: "requests_per_second.successful.mean".into(),
        });
    }
    let model_id =
        d.opt_str("config.backend.model").or_else(|| d.opt_str("worker.backend_model")).filter(|m| !m.is_empty());
    checked(Run {
        source: RunSource {
            file: src.to_string(),
            index,
            runs_in_file: 1,
            tool: Tool::GuideLlm,
            tool_version: version,
            model_id,
            engine: None,
        },
        load,
        requests: completed + failed + incomplete,
        completed,
        failed: failed + incomplete,
        input_tokens_mean: input_mean,
        output_tokens_mean: output_mean,
        per_request,
        stats,
        not_compared,
        uniform_lengths: None,
        length_percentiles,
    })
}

/// An error about a key read relative to `base` (a benchmark, its strategy), naming the full key.
fn under(e: Error, base: &str) -> Error {
    match e {
        Error::Input { at, msg } => {
            let field = match at.field {
                Some(f) if base.ends_with('.') => format!("{base}{f}"),
                Some(f) => format!("{base}.{f}"),
                None => base.trim_end_matches('.').to_string(),
            };
            Error::input(at.source, None, Some(&field), msg)
        }
        e => e,
    }
}
