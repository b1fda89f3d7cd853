//! `vllm bench serve` and SGLang `bench_serving`: one JSON object per run, written by
//! vllm/benchmarks/serve.py (`--save-result`: aggregates; `--save-detailed`: plus per-request arrays;
//! `--append-result`: one object a line) and sglang/benchmark/serving.py (`--output-file`, JSONL,
//! `--output-details` adds the per-request arrays). Both tools share the load model: `request_rate`
//! ("inf" / `Infinity` when unlimited), `burstiness` (vLLM; gamma shape, 1 = Poisson) and
//! `max_concurrency` (a semaphore around sending). Definitions (vLLM's calculate_metrics, SGLang's the
//! same): TTFT per successful request; TPOT per request = (latency - ttft) / (output_len - 1); ITL
//! pools every inter-token gap of every request; E2EL is the request latency; `output_throughput` is
//! all output tokens over the run's duration. Statistics are `mean_`, `median_`, `std_`, `pNN_` +
//! `<metric>_ms`; a modified client's keys in seconds (`_s`, or no unit at all: `mean_ttft`, as
//! InferenceX's writes them) are converted where the unit is certain, else listed as not compared.
//! `queue_times` (vLLM) are the client's semaphore wait, not the server's queue: not
//! compared. Failed requests stay in the arrays with an error string and empty values.

use super::json::{num, tokens, Doc};
use super::{checked, mean, LengthRanges, MeasuredStat, RateProcess, RequestObs, Run, RunLoad, RunSource, Tool};
use crate::error::Result;
use crate::metrics::StatKind;
use crate::workload::MAX_REQUEST_TOKENS;
use serde_json::Value;

/// The scalar keys `vllm bench serve` (vllm/benchmarks/serve.py) and SGLang's `bench_serving` write
/// for every run: the signature that recognizes a result with a key or two missing, so the reader
/// can name what is missing instead of "no reader recognizes this file".
const SIGNATURE: &[&str] = &[
    "request_rate",
    "completed",
    "num_prompts",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "max_concurrency",
    "burstiness",
    "endpoint_type",
    "dataset_name",
];

/// Whether `key` is one of the tools' latency statistics (`mean_ttft_ms`, `p99_e2e_latency_ms`,
/// `std_itl_ms`, InferenceX's unit-less `median_tpot`), and of which metric (the file's name).
fn latency_metric(key: &str) -> Option<&'static str> {
    let body = key.strip_suffix("_ms").or_else(|| key.strip_suffix("_s")).unwrap_or(key);
    let (prefix, metric) = body.split_once('_')?;
    if !(prefix == "std" || stat_of(prefix).is_some()) {
        return None;
    }
    METRICS.iter().find(|(m, ..)| *m == metric).map(|(m, ..)| *m)
}

/// Which of the two tools wrote this object, if either. Recognized by its signature: the old rule
/// (`request_rate` and `completed`), or three of the keys both tools write for every run (their
/// latency statistics counting as one), each a scalar, so a result missing `completed`,
/// `num_prompts` or `request_rate` is still read as one and the missing key named.
pub fn recognizes(v: &Value) -> Option<Tool> {
    let obj = v.as_object()?;
    let has = |k: &str| v.get(k).is_some();
    if is_inferencex_point(v) {
        return Some(Tool::VllmBenchServe);
    }
    let scalar = |k: &str| obj.get(k).is_some_and(|x| !(x.is_object() || x.is_array()));
    let latency = obj.keys().any(|k| latency_metric(k).is_some() && scalar(k));
    let signature = SIGNATURE.iter().filter(|k| scalar(k)).count() + usize::from(latency);
    if !((has("request_rate") && has("completed")) || signature >= 3) {
        return None;
    }
    let sglang = ["dataset_name", "random_input_len", "server_info", "sharegpt_output_len"].iter().any(|k| has(k))
        || obj.keys().any(|k| latency_metric(k) == Some("e2e_latency"));
    if has("num_prompts") && (has("endpoint_type") || has("backend") || has("model_id")) {
        Some(Tool::VllmBenchServe)
    } else if sglang {
        Some(Tool::SglangBenchServing)
    } else {
        // vLLM's own keys (`endpoint_type`, `tokenizer_id`, `*_e2el_ms`), or none of SGLang's (it
        // always writes `dataset_name` and `*_e2e_latency_ms`): vLLM's layout, whose reader names
        // what is missing.
        Some(Tool::VllmBenchServe)
    }
}

/// An InferenceX point file (the corpus's `inferencex-dsr1/<deployment>/<ISL>x<OSL>_c<conc>_<date>.json`,
/// and the dashboard's rows converted the same way): `vllm bench serve`'s layout from InferenceX's
/// fork of vLLM's benchmark_serving.py, with the counts and token totals InferenceX's
/// `process_result.py` drops (`completed`, `total_input_tokens`, `total_output_tokens`). What the
/// replay needs of them is InferenceX's client, the same for every point: `--num-prompts` 10 x
/// concurrency and lengths uniform in [int(0.8 L), L] (calibration/corpus/inferencex-dsr1/README.md,
/// "Workload replay facts").
fn is_inferencex_point(v: &Value) -> bool {
    let has = |k: &str| v.get(k).is_some();
    v.is_object() && has("ix_source") && has("max_concurrency") && has("random_input_len") && !has("completed")
}

/// InferenceX's `--num-prompts` per client (its single-node launch scripts: `$(( $CONC * 10 ))`).
pub const INFERENCEX_PROMPTS_PER_CLIENT: u64 = 10;
/// InferenceX's `random_range_ratio` where a point file does not state it
/// (`.github/workflows/benchmark-tmpl.yml`: 0.8).
pub const INFERENCEX_RANGE_RATIO: f64 = 0.8;

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
            format!(
                "this line is not a vllm bench serve or SGLang bench_serving result (needs request_rate and completed, or three of {})",
                SIGNATURE.join(", ")
            ),
        )
    })?;
    let what = tool.as_str();
    let ix = is_inferencex_point(v);
    let mut ix_notes = Vec::new();
    let rate = match d.get("request_rate") {
        Some(Value::String(s)) if s == "trace" => {
            return Err(d.err("request_rate", "a trace-timestamp run (`trace`) has no recorded send times to replay"))
        }
        None if ix => {
            ix_notes.push(
                "request_rate (absent: InferenceX's client sends at an unlimited rate, max_concurrency the cap)"
                    .to_string(),
            );
            f64::INFINITY
        }
        None => {
            return Err(d.err(
                "request_rate",
                format!("missing: every {what} result states the rate it sent at (`inf` where unlimited)"),
            ))
        }
        Some(_) => d.num("request_rate")?,
    };
    // `inf` (the tools' unlimited rate) or a rate the replay can run: at least one request in the
    // longest run capsim simulates, at most its rate bound (crate::workload). -inf, NaN, 0 and
    // negative rates are no run's.
    let (lo, hi) = (1.0 / crate::workload::MAX_TIME_S, crate::workload::MAX_RATE_PER_S);
    if !(rate == f64::INFINITY || (lo..=hi).contains(&rate)) {
        return Err(d.err(
            "request_rate",
            format!("must be inf or a rate in {lo:e}..={hi:e} requests/s, got {}", crate::error::fmt_num(rate)),
        ));
    }
    let burstiness = d.opt_num("burstiness")?.unwrap_or(1.0);
    let min_b = crate::workload::MIN_BURSTINESS;
    if !(burstiness.is_finite() && (min_b..=1e6).contains(&burstiness)) {
        return Err(d.err("burstiness", format!("must be in {min_b}..=1e6, got {}", crate::error::fmt_num(burstiness))));
    }
    // The run's wall time: the throughputs are its tokens over it. Not replayed (the replay times its
    // own run), but a run of no time, negative time or more than the longest run capsim simulates is
    // no run's: refused rather than read past.
    if let Some(t) = d.opt_num("duration")? {
        let hi = crate::workload::MAX_TIME_S;
        if !(t.is_finite() && t > 0.0 && t <= hi) {
            return Err(d.err(
                "duration",
                format!(
                    "must be a run's wall time in seconds, above 0 and at most {hi:e}, got {}",
                    crate::error::fmt_num(t)
                ),
            ));
        }
    }
    let cap = d.clients("max_concurrency")?;
    let load = match (rate.is_infinite(), cap) {
        (true, None) => RunLoad::Burst,
        (true, Some(n)) => RunLoad::Concurrency { clients: n },
        (false, cap) => {
            RunLoad::Rate { rate_per_s: rate, process: RateProcess::Gamma { burstiness }, max_concurrency: cap }
        }
    };
    let completed = match d.requests("completed")? {
        Some(n) => n,
        None if ix => {
            let n = match (d.requests("num_prompts")?, &load) {
                (Some(n), _) => n,
                (None, RunLoad::Concurrency { clients }) => INFERENCEX_PROMPTS_PER_CLIENT * *clients as u64,
                (None, _) => return Err(d.err("max_concurrency", "an InferenceX point needs its concurrency")),
            };
            ix_notes.push(format!(
                "completed (absent: InferenceX keeps no counts; {n} requests, 10 x concurrency as its launch scripts send, all taken as completed)"
            ));
            n
        }
        None => {
            return Err(d.err("completed", format!("missing: every {what} result states how many requests completed")))
        }
    };
    let num_prompts = d.requests("num_prompts")?;
    if tool == Tool::VllmBenchServe && !ix && num_prompts.is_none() {
        return Err(d.err("num_prompts", "missing: every vllm bench serve result states the requests it sent"));
    }
    if ix {
        if let Some(f) = d.opt_str("ix_framework") {
            if f.starts_with("dynamo") || f.contains('-') {
                ix_notes.push(format!(
                    "ix_framework {f} (a disaggregated or multi-node deployment: validate --runs replays the one deployment the flags name; simulate takes --prefill-workers/--decode-workers)"
                ));
            }
        }
    }

    // Per-request arrays (--save-detailed / --output-details).
    check_per_request(&d, num_prompts, completed)?;
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
            if !out_len.is_finite() || out_len < 0.0 {
                return Err(d.err(&format!("output_lens[{i}]"), format!("must be a token count, got {out_len}")));
            }
            let err = errors.as_ref().and_then(|e| e.get(i).copied()).unwrap_or(false);
            let no_token = ttfts.as_ref().and_then(|t| t.get(i).copied().flatten()).is_some_and(|t| t <= 0.0);
            if err || out_len < 1.0 || no_token {
                failed += 1;
                continue;
            }
            let input = inp[i].ok_or_else(|| d.err(&format!("input_lens[{i}]"), "missing for a completed request"))?;
            let input = tokens(&d, &format!("input_lens[{i}]"), input, 1)?;
            let out_len = tokens(&d, &format!("output_lens[{i}]"), out_len, 1)?;
            let start_s = match (&starts, t0) {
                (Some(s), Some(t0)) => s.get(i).copied().flatten().map(|t| t - t0),
                _ => None,
            };
            per_request.push(RequestObs { input_tokens: input, output_tokens: out_len, start_s });
        }
        // Every listed request failed (an error, no output token): the run has no lengths to
        // replay, whatever its totals say.
        if per_request.is_empty() && !inp.is_empty() {
            return Err(d.err(
                "output_lens",
                format!(
                    "all {} listed requests failed (an error, no output token or a TTFT <= 0): nothing to replay",
                    inp.len()
                ),
            ));
        }
        failed_listed = Some(failed);
    }
    let requests = match tool {
        Tool::VllmBenchServe => num_prompts,
        _ => None,
    }
    .or(inputs.as_ref().map(|i| i.len() as u64))
    .unwrap_or(completed + d.requests("failed")?.unwrap_or(0));
    let failed = d.requests("failed")?.or(failed_listed).unwrap_or(requests.saturating_sub(completed));

    let ix_lengths = if ix && per_request.is_empty() && d.get("total_input_tokens").is_none() {
        let ratio = d.opt_num("random_range_ratio")?.unwrap_or(INFERENCEX_RANGE_RATIO);
        if !(0.0..=1.0).contains(&ratio) {
            return Err(d.err("random_range_ratio", format!("must be in [0, 1], got {ratio}")));
        }
        let len = |key: &str| -> Result<(u32, u32)> {
            let l = d.opt_num(key)?.ok_or_else(|| d.err(key, "missing: the replay needs the lengths"))?;
            Ok(super::lengths::ratio_range(tokens(&d, key, l, 1)?, ratio))
        };
        let (i, o) = (len("random_input_len")?, len("random_output_len")?);
        if d.get("random_range_ratio").is_none() {
            ix_notes.push(format!("random_range_ratio (absent: InferenceX's {INFERENCEX_RANGE_RATIO} assumed)"));
        }
        Some((i, o))
    } else {
        None
    };
    let (input_mean, output_mean) = if let Some((i, o)) = ix_lengths {
        (super::lengths::range_mean(i), super::lengths::range_mean(o))
    } else if per_request.is_empty() {
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
        // At least one token per completed request, each total as the file states it.
        let n = completed.max(1) as f64;
        for (key, total) in [("total_input_tokens", tin), ("total_output_tokens", tout)] {
            if !(total.is_finite() && total >= n) {
                return Err(d.err(
                    key,
                    format!(
                        "must be at least one token per completed request ({n}), got {}",
                        crate::error::fmt_num(total)
                    ),
                ));
            }
        }
        (tin / n, tout / n)
    } else {
        (
            mean(per_request.iter().map(|r| r.input_tokens as f64)).unwrap_or(0.0),
            mean(per_request.iter().map(|r| r.output_tokens as f64)).unwrap_or(0.0),
        )
    };

    let mut stats: Vec<MeasuredStat> = Vec::new();
    let mut not_compared = ix_notes;
    let uniform_lengths = match (tool, per_request.is_empty()) {
        _ if ix_lengths.is_some() => ix_lengths,
        (Tool::SglangBenchServing, true) => sglang_random_lengths(&d, input_mean, output_mean, &mut not_compared)?,
        _ => None,
    };
    let obj = v.as_object().expect("recognized objects are objects");
    // Latency keys name their unit (`_ms` as vLLM and SGLang write them, `_s`); a modified client
    // (InferenceX's) writes seconds with no unit in the key: converted where the file shows the unit
    // unambiguously (`unstated_unit`), else listed as not compared. Keys with a unit come first, so
    // a statistic stated twice is compared once.
    let unstated = unstated_unit(&d, &load, completed)?;
    let mut keyed: Vec<(&String, &str, Option<f64>)> = obj
        .keys()
        .map(|key| match (key.strip_suffix("_ms"), key.strip_suffix("_s")) {
            (Some(body), _) => (key, body, Some(1.0)),
            (None, Some(body)) => (key, body, Some(1e3)),
            (None, None) => (key, key.as_str(), None),
        })
        .collect();
    keyed.sort_by_key(|(_, _, unit)| unit.is_none());
    for (key, body, unit) in keyed {
        let Some((prefix, metric)) = body.split_once('_') else { continue };
        let Some(&(_, name, factor)) = METRICS.iter().find(|(m, ..)| *m == metric) else { continue };
        let Some(stat) = stat_of(prefix) else {
            not_compared.push(key.clone());
            continue;
        };
        let Some(x) = d.opt_num(key)? else {
            not_compared.push(format!("{key} (null)"));
            continue;
        };
        let to_ms = match (unit, unstated) {
            (Some(u), _) => u,
            (None, Ok((u, _))) => u,
            (None, Err(why)) => {
                not_compared.push(format!("{key} ({why})"));
                continue;
            }
        };
        if let Some(first) = stats.iter().find(|s| s.metric == name && s.stat == stat) {
            not_compared.push(format!("{key} (the same statistic as {})", first.key));
            continue;
        }
        let key = match (unit, unstated) {
            (None, Ok((_, how))) => format!("{key} ({how})"),
            _ => key.clone(),
        };
        stats.push(MeasuredStat { metric: name, stat, value: x * to_ms * factor, key });
    }
    for (key, name) in [("output_throughput", "output_tok_s"), ("request_throughput", "request_per_s")] {
        if let Some(x) = d.opt_num(key)? {
            stats.push(MeasuredStat { metric: name, stat: StatKind::Mean, value: x, key: key.into() });
        }
    }
    if d.get("queue_times").is_some() {
        not_compared.push("queue_times (the client's semaphore wait, not the server's queue)".into());
    }
    // The latencies the tool writes for every run by default (vLLM's `--percentile-metrics`
    // ttft,tpot,itl; SGLang's all four): one the file lacks is said, not dropped without a word.
    // InferenceX's dashboard rows keep medians and p99 only, so only a metric with no statistic
    // at all is said there.
    let expected: &[(&str, &str)] = match tool {
        Tool::SglangBenchServing => {
            &[("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e_latency", "E2E latency")]
        }
        _ => &[("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL")],
    };
    for &(metric, quantity) in expected {
        let name = METRICS.iter().find(|(m, ..)| *m == metric).map_or("", |x| x.1);
        if stats.iter().any(|s| s.metric == name && s.stat == StatKind::Mean) {
            continue;
        }
        let keys: Vec<&String> = obj.keys().filter(|k| latency_metric(k) == Some(metric)).collect();
        // A mean stated but not compared (null, no unit) is listed above with why.
        if keys.iter().any(|k| k.starts_with("mean_")) || (ix && !keys.is_empty()) {
            continue;
        }
        let stated: Vec<StatKind> = stats.iter().filter(|s| s.metric == name).map(|s| s.stat).collect();
        not_compared.push(super::absent_note(&format!("mean_{metric}_ms"), quantity, &stated, !keys.is_empty()));
    }
    // serde_json keeps keys sorted; order the statistics by metric, then statistic.
    stats.sort_by_key(|s| (super::RUN_METRICS.iter().position(|m| *m == s.metric), s.stat as u8));
    // A model_id of another type than a string is refused, not read as absent (it would be
    // reported as a file naming no model).
    let model_id = d.opt_string("model_id")?.or_else(|| d.opt_str("server_info.model_path"));
    let tool_version = d.opt_str("server_info.version");
    // InferenceX names a single-node point's engine `sglang`, `trt` or `vllm`, as a backend would.
    let named = d.opt_str("backend").or_else(|| d.opt_str("ix_framework"));
    let engine = engine_named(tool, named.as_deref(), d.get("server_info").is_some());
    checked(Run {
        source: RunSource {
            file: src.to_string(),
            index: if many { index } else { 0 },
            runs_in_file: 1,
            tool,
            tool_version,
            model_id,
            engine,
        },
        load,
        requests,
        completed,
        failed,
        input_tokens_mean: input_mean,
        output_tokens_mean: output_mean,
        per_request,
        stats,
        not_compared,
        uniform_lengths,
        length_percentiles: Default::default(),
    })
}

/// The per-request arrays of a detailed result (`--save-detailed`, `--output-details`): one entry
/// per request sent, in the same order. (`latencies` and `queue_times`, which vLLM keeps without
/// `--save-detailed` too, are not compared or replayed: their entries are checked, not counted.)
const PER_REQUEST: &[&str] =
    &["input_lens", "output_lens", "ttfts", "itls", "start_times", "errors", "generated_texts"];

/// Check the per-request arrays: each an array, all of one length, the requests sent (`num_prompts`
/// where the file states it) and no fewer than the completed; times in seconds (`ttfts`, `itls`,
/// `latencies`, `queue_times`) finite, at least 0 (a failed request's TTFT is 0) and at most
/// [`crate::workload::MAX_TIME_S`]; send times finite and within that span; errors strings. Errors
/// name the array and the entry.
fn check_per_request(d: &Doc, num_prompts: Option<u64>, completed: u64) -> Result<()> {
    let mut first: Option<(&str, usize)> = None;
    for &key in PER_REQUEST {
        let Some(x) = d.get(key) else { continue };
        let Some(a) = x.as_array() else {
            return Err(d.err(key, "must be an array, one entry per request sent"));
        };
        match first {
            None => first = Some((key, a.len())),
            Some((k0, n0)) if a.len() != n0 => {
                return Err(d.err(
                    key,
                    format!(
                        "has {} entries, {k0} {n0}: the per-request arrays list one entry per request sent",
                        a.len()
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if let Some((k0, n)) = first {
        if let Some(sent) = num_prompts.filter(|&sent| sent != n as u64) {
            return Err(d.err(k0, format!("has {n} entries, num_prompts {sent}: one entry per request sent")));
        }
        if (n as u64) < completed {
            return Err(d.err(k0, format!("lists {n} requests, fewer than the {completed} completed")));
        }
    }
    let max = crate::workload::MAX_TIME_S;
    let time = |field: String, t: f64| -> Result<()> {
        if t.is_finite() && (0.0..=max).contains(&t) {
            Ok(())
        } else {
            Err(d.err(&field, format!("must be a time in seconds from 0 to {max:e}, got {}", crate::error::fmt_num(t))))
        }
    };
    for key in ["ttfts", "latencies", "queue_times"] {
        for (i, t) in d.num_array(key)?.unwrap_or_default().into_iter().enumerate() {
            if let Some(t) = t {
                time(format!("{key}[{i}]"), t)?;
            }
        }
    }
    if let Some(Value::Array(requests)) = d.get("itls") {
        for (i, r) in requests.iter().enumerate() {
            match r {
                Value::Null => {}
                Value::Array(gaps) => {
                    for (j, g) in gaps.iter().enumerate() {
                        let field = format!("itls[{i}][{j}]");
                        match g {
                            Value::Null => {}
                            g => {
                                time(field.clone(), num(g).ok_or_else(|| d.err(&field, format!("not a number: {g}")))?)?
                            }
                        }
                    }
                }
                other => {
                    return Err(d.err(
                        &format!("itls[{i}]"),
                        format!("must be the request's list of gaps between chunks, in seconds, got {other}"),
                    ))
                }
            }
        }
    }
    let starts: Vec<(usize, f64)> = d
        .num_array("start_times")?
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .filter_map(|(i, t)| t.map(|t| (i, t)))
        .collect();
    if let Some(&(i, t)) = starts.iter().find(|(_, t)| !t.is_finite()) {
        return Err(d.err(&format!("start_times[{i}]"), format!("must be a finite time, got {t}")));
    }
    if let (Some(lo), Some(&(i, hi))) =
        (starts.iter().map(|s| s.1).reduce(f64::min), starts.iter().max_by(|a, b| a.1.total_cmp(&b.1)))
    {
        if hi - lo > max {
            return Err(d.err(
                &format!("start_times[{i}]"),
                format!(
                    "{} s after the first send, beyond the longest run capsim simulates ({max:e} s)",
                    crate::error::fmt_num(hi - lo)
                ),
            ));
        }
    }
    if let Some(Value::Array(errors)) = d.get("errors") {
        if let Some((i, e)) = errors.iter().enumerate().find(|(_, e)| !(e.is_string() || e.is_null())) {
            return Err(
                d.err(&format!("errors[{i}]"), format!("must be the request's error message (a string), got {e}"))
            );
        }
    }
    Ok(())
}

/// The engine a result names: SGLang's bench_serving fetches the server's `/get_server_info` into
/// `server_info` (an SGLang server); a `backend` (or InferenceX's `ix_framework`) that is an engine's
/// own endpoint (`vllm`, `sglang`, `sglang-native`, `trt`, `tensorrt-llm`) names it. `openai`, `openai-chat` and other API names say
/// nothing about the server behind them.
fn engine_named(tool: Tool, backend: Option<&str>, server_info: bool) -> Option<&'static str> {
    match backend.map(str::to_ascii_lowercase).as_deref() {
        Some("vllm") => Some("vllm"),
        Some("sglang" | "sglang-native") => Some("sglang"),
        Some("trt" | "tensorrt-llm" | "trtllm") => Some("trtllm"),
        _ if server_info && matches!(tool, Tool::SglangBenchServing) => Some("sglang"),
        _ => None,
    }
}

/// The length ranges SGLang's random dataset drew from, where an `--output-file` line states them
/// and lists no requests: `random_input_len` L and `random_output_len` L' with `random_range_ratio`
/// r give input lengths uniform in [max(int(L r), 1), L] and outputs in [int(L' r), L'] (bounds
/// inclusive; `sample_random_requests` in sglang/bench_serving.py 0.4.6 and 0.5.2,
/// `compute_random_lens` in sglang/benchmark/datasets 0.5.10; the default r = 0 draws from [1, L],
/// r = 1 fixes every length). vLLM's result files state none of these keys. The range is used only
/// where the file's own token totals average what it implies (within 5%); otherwise the key is listed
/// as not used and the run replays at its mean lengths.
fn sglang_random_lengths(
    d: &Doc,
    input_mean: f64,
    output_mean: f64,
    not_used: &mut Vec<String>,
) -> Result<Option<LengthRanges>> {
    if !matches!(d.opt_str("dataset_name").as_deref(), Some("random" | "random-ids")) {
        return Ok(None);
    }
    let (Some(li), Some(lo), Some(r)) =
        (d.count("random_input_len")?, d.count("random_output_len")?, d.opt_num("random_range_ratio")?)
    else {
        return Ok(None);
    };
    if !(0.0..=1.0).contains(&r) {
        return Err(d.err("random_range_ratio", format!("must be in [0, 1], got {r}")));
    }
    if li == 0 || lo == 0 || li > MAX_REQUEST_TOKENS as u64 || lo > MAX_REQUEST_TOKENS as u64 {
        return Ok(None);
    }
    let (i, o) = (super::lengths::ratio_range(li as u32, r), super::lengths::ratio_range(lo as u32, r));
    let mid = super::lengths::range_mean;
    let off = |mean: f64, (a, b): (u32, u32)| (mean / mid((a, b)) - 1.0).abs() > 0.05;
    if off(input_mean, i) || off(output_mean, o) {
        not_used.push(format!(
            "random_range_ratio (lengths uniform in {}..={} in / {}..={} out would average {:.0} / {:.0} tokens, \
             the file's totals {input_mean:.0} / {output_mean:.0}: replayed at the mean lengths)",
            i.0,
            i.1,
            o.0,
            o.1,
            mid(i),
            mid(o)
        ));
        return Ok(None);
    }
    Ok(Some((i, o)))
}

/// The unit of latency keys written without one (`mean_ttft`, as InferenceX's client writes them):
/// the factor to milliseconds and how it was recognized, or why it cannot be. Recognized only where
/// the file itself shows it, by a 1000-fold margin: interactivity (`median_intvty`, tokens/s per
/// user, the reciprocal of TPOT in seconds) times the TPOT, or Little's law in a closed loop
/// (clients / request throughput is the mean E2E latency in seconds).
fn unstated_unit(
    d: &Doc,
    load: &RunLoad,
    completed: u64,
) -> Result<std::result::Result<(f64, &'static str), &'static str>> {
    let unit_of = |ratio: f64| -> Option<f64> {
        if (0.2..=2.0).contains(&ratio) {
            Some(1e3)
        } else if (200.0..=2000.0).contains(&ratio) {
            Some(1.0)
        } else {
            None
        }
    };
    for p in ["median", "mean"] {
        if let (Some(i), Some(t)) = (d.opt_num(&format!("{p}_intvty"))?, d.opt_num(&format!("{p}_tpot"))?) {
            if let Some(u) = unit_of(i * t) {
                return Ok(Ok((u, "unit from interactivity x TPOT")));
            }
        }
    }
    if let (RunLoad::Concurrency { clients }, Some(x), Some(e2e)) =
        (load, d.opt_num("request_throughput")?, d.opt_num("mean_e2el")?)
    {
        // Little's law holds once the loop runs full: more requests than clients.
        if completed > 2 * *clients as u64 && x > 0.0 {
            if let Some(u) = unit_of(e2e / (*clients as f64 / x)) {
                return Ok(Ok((u, "unit from Little's law")));
            }
        }
    }
    Ok(Err("no unit in the key, and the file does not show whether it is seconds or milliseconds: not compared"))
}
