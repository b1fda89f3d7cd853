//! `vllm bench serve` and SGLang `bench_serving`: one JSON object per run, written by
//! vllm/benchmarks/serve.py (`--save-result`: aggregates; `--save-detailed`: plus per-request arrays;
//! `--append-result`: one object a line) and sglang/benchmark/serving.py (`--output-file`, JSONL,
//! `--output-details` adds the per-request arrays). Both tools share the load model: `request_rate`
//! ("inf" / `Infinity` when unlimited), `burstiness` (vLLM; gamma shape, 1 = Poisson) and
//! `max_concurrency` (a semaphore around sending). Definitions (vLLM's calculate_metrics, SGLang's the
//! same): TTFT per successful request; TPOT per request = (latency - ttft) / (output_len - 1); ITL
//! pools every inter-token gap of every request; E2EL is the request latency; `output_throughput` is
//! all output tokens over the run's duration. Statistics are `mean_`, `median_`, `std_`, `pNN_` +
//! `<metric>_ms`. `queue_times` (vLLM) are the client's semaphore wait, not the server's queue: not
//! compared. Failed requests stay in the arrays with an error string and empty values.

use super::json::Doc;
use super::{checked, mean, MeasuredStat, RateProcess, RequestObs, Run, RunLoad, RunSource, Tool};
use crate::error::Result;
use crate::metrics::StatKind;
use serde_json::Value;

/// Which of the two tools wrote this object, if either.
pub fn recognizes(v: &Value) -> Option<Tool> {
    let has = |k: &str| v.get(k).is_some();
    if !(v.is_object() && has("request_rate") && has("completed")) {
        return None;
    }
    if has("num_prompts") && (has("endpoint_type") || has("backend") || has("model_id")) {
        Some(Tool::VllmBenchServe)
    } else if has("dataset_name") || has("random_input_len") || has("server_info") {
        Some(Tool::SglangBenchServing)
    } else {
        None
    }
}

/// The metrics both tools print, with capsim's name and the factor from the file's milliseconds.
const METRICS: &[(&str, &str, f64)] = &[
    ("ttft", "ttft_s", 1e-3),
    ("tpot", "tpot_ms", 1.0),
    ("itl", "itl_ms", 1.0),
    ("e2el", "e2e_ms", 1.0),
    ("e2e_latency", "e2e_ms", 1.0),
];

fn stat_of(prefix: &str) -> Option<StatKind> {
    match prefix {
        "mean" => Some(StatKind::Mean),
        "median" => Some(StatKind::P50),
        p => StatKind::parse(p),
    }
}

pub fn read(src: &str, index: usize, line: usize, v: &Value, many: bool) -> Result<Run> {
    let d = Doc { src, line, v };
    let tool = recognizes(v).ok_or_else(|| {
        d.err(
            "request_rate",
            "this line is not a vllm bench serve or SGLang bench_serving result (needs request_rate, completed and num_prompts or dataset_name)",
        )
    })?;
    let rate = match d.get("request_rate") {
        Some(Value::String(s)) if s == "trace" => {
            return Err(d.err("request_rate", "a trace-timestamp run (`trace`) has no recorded send times to replay"))
        }
        _ => d.opt_num("request_rate")?.unwrap_or(f64::INFINITY),
    };
    let burstiness = d.opt_num("burstiness")?.unwrap_or(1.0);
    if !(burstiness.is_finite() && burstiness > 0.0) {
        return Err(d.err("burstiness", format!("must be a positive number, got {burstiness}")));
    }
    let cap = d.count("max_concurrency")?.map(|c| c.min(u32::MAX as u64) as u32);
    let load = match (rate.is_infinite(), cap) {
        (true, None) => RunLoad::Burst,
        (true, Some(n)) => RunLoad::Concurrency { clients: n },
        (false, cap) => {
            RunLoad::Rate { rate_per_s: rate, process: RateProcess::Gamma { burstiness }, max_concurrency: cap }
        }
    };
    let completed = d.count("completed")?.ok_or_else(|| d.err("completed", "missing"))?;

    // Per-request arrays (--save-detailed / --output-details).
    let inputs = d.num_array("input_lens")?;
    let outputs = d.num_array("output_lens")?;
    let starts = d.num_array("start_times")?;
    let ttfts = d.num_array("ttfts")?;
    let errors: Option<Vec<bool>> = d
        .get("errors")
        .and_then(Value::as_array)
        .map(|es| es.iter().map(|e| e.as_str().is_some_and(|s| !s.is_empty())).collect());
    let mut per_request = Vec::new();
    let mut failed_listed = None;
    if let (Some(inp), Some(out)) = (&inputs, &outputs) {
        if inp.len() != out.len() {
            return Err(d.err("output_lens", format!("has {} entries, input_lens {}", out.len(), inp.len())));
        }
        let t0 = starts.as_ref().and_then(|s| s.iter().flatten().copied().reduce(f64::min));
        let mut failed = 0;
        for i in 0..inp.len() {
            let out_len = out[i].unwrap_or(0.0);
            let err = errors.as_ref().and_then(|e| e.get(i).copied()).unwrap_or(false);
            let no_token = ttfts.as_ref().and_then(|t| t.get(i).copied().flatten()).is_some_and(|t| t <= 0.0);
            if err || out_len < 1.0 || no_token {
                failed += 1;
                continue;
            }
            let input = inp[i].ok_or_else(|| d.err(&format!("input_lens[{i}]"), "missing for a completed request"))?;
            if !(input >= 1.0 && input.is_finite()) {
                return Err(d.err(&format!("input_lens[{i}]"), format!("must be at least 1, got {input}")));
            }
            let start_s = match (&starts, t0) {
                (Some(s), Some(t0)) => s.get(i).copied().flatten().map(|t| t - t0),
                _ => None,
            };
            per_request.push(RequestObs { input_tokens: input as u32, output_tokens: out_len as u32, start_s });
        }
        failed_listed = Some(failed);
    }
    let requests = match tool {
        Tool::VllmBenchServe => d.count("num_prompts")?,
        _ => None,
    }
    .or(inputs.as_ref().map(|i| i.len() as u64))
    .unwrap_or(completed + d.count("failed")?.unwrap_or(0));
    let failed = d.count("failed")?.or(failed_listed).unwrap_or(requests.saturating_sub(completed));

    let (input_mean, output_mean) = if per_request.is_empty() {
        let tin = d.opt_num("total_input_tokens")?.ok_or_else(|| {
            d.err(
                "total_input_tokens",
                "missing, and the file has no per-request input_lens: the replay needs the lengths",
            )
        })?;
        let tout = d.opt_num("total_output_tokens")?.ok_or_else(|| {
            d.err(
                "total_output_tokens",
                "missing, and the file has no per-request output_lens: the replay needs the lengths",
            )
        })?;
        let n = completed.max(1) as f64;
        (tin / n, tout / n)
    } else {
        (
            mean(per_request.iter().map(|r| r.input_tokens as f64)).unwrap_or(0.0),
            mean(per_request.iter().map(|r| r.output_tokens as f64)).unwrap_or(0.0),
        )
    };

    let mut stats = Vec::new();
    let mut not_compared = Vec::new();
    let obj = v.as_object().expect("recognized objects are objects");
    for key in obj.keys() {
        let Some(body) = key.strip_suffix("_ms") else { continue };
        let Some((prefix, metric)) = body.split_once('_') else { continue };
        let Some(&(_, name, factor)) = METRICS.iter().find(|(m, ..)| *m == metric) else { continue };
        match stat_of(prefix) {
            Some(stat) => match d.opt_num(key)? {
                Some(x) => stats.push(MeasuredStat { metric: name, stat, value: x * factor, key: key.clone() }),
                None => not_compared.push(format!("{key} (null)")),
            },
            None => not_compared.push(key.clone()),
        }
    }
    for (key, name) in [("output_throughput", "output_tok_s"), ("request_throughput", "request_per_s")] {
        if let Some(x) = d.opt_num(key)? {
            stats.push(MeasuredStat { metric: name, stat: StatKind::Mean, value: x, key: key.into() });
        }
    }
    if d.get("queue_times").is_some() {
        not_compared.push("queue_times (the client's semaphore wait, not the server's queue)".into());
    }
    // serde_json keeps keys sorted; order the statistics by metric, then statistic.
    stats.sort_by_key(|s| (super::RUN_METRICS.iter().position(|m| *m == s.metric), s.stat as u8));
    let model_id = d.opt_str("model_id").or_else(|| d.opt_str("server_info.model_path"));
    let tool_version = d.opt_str("server_info.version");
    checked(Run {
        source: RunSource { file: src.to_string(), index: if many { index } else { 0 }, tool, tool_version, model_id },
        load,
        requests,
        completed,
        failed,
        input_tokens_mean: input_mean,
        output_tokens_mean: output_mean,
        per_request,
        stats,
        not_compared,
        uniform_lengths: None,
    })
}
