//! Per-request metrics and their summaries, defined as the reports define them (DESIGN.md section 4):
//! - TTFT: sent to first token; queue wait: sent to the first step that schedules any of its tokens;
//! - TPOT (`tpot_ms`): one value per request, the mean gap between its successive tokens,
//!   (E2E - TTFT) / (output tokens - 1), as `vllm bench serve` computes TPOT and as GuideLLM's and
//!   AIPerf's `inter_token_latency` are defined; the reports' "ITL" is this quantity too;
//! - ITL (`itl_ms`): vLLM's pooled inter-token latency, every gap between successive streamed chunks
//!   of every measured request in one population ([`crate::sim::GapHistogram`]), as a benchmark
//!   client times each chunk it receives. A chunk is a token, unless the engine's stream interval k
//!   batches them (the first token alone, then one chunk as the output reaches 1 + m k tokens, and
//!   the last) or a speculative step emits several. With one token a chunk its mean weights requests
//!   by their token count and equals the mean TPOT when every request has the same output length; its
//!   percentiles see single long gaps (a prefill batch, a preemption) that TPOT averages away;
//! - per-user tok/s: output tokens / decode time of the request;
//! - system output tok/s: all output tokens / wall time of the measured window.
//!
//! Percentiles are numpy's default (linear interpolation). Summaries are computed from the merged
//! per-request data, never by averaging percentiles.

use crate::sim::{RequestRecord, SimOutput};
use serde::Serialize;

/// mean, p50, p90, p95, p99 of one metric over the measured requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Stats {
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
}

/// numpy.percentile(x, q) with the default linear method; `sorted` must be ascending.
pub fn percentile_sorted(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q / 100.0 * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

impl Stats {
    /// No values: every statistic is NaN, which the JSON contract writes as `null` and tables as `-`
    /// (a run that measured nothing has no latency, not a latency of zero).
    pub const EMPTY: Stats = Stats { mean: f64::NAN, p50: f64::NAN, p90: f64::NAN, p95: f64::NAN, p99: f64::NAN };
    /// Summary of values (sorted in place); [`Stats::EMPTY`] for none.
    pub fn of(values: &mut [f64]) -> Stats {
        if values.is_empty() {
            return Stats::EMPTY;
        }
        // Unstable is enough: values equal under total_cmp are the same bits, so the order is the
        // same as a stable sort's, and a million TTFTs sort in half the time.
        values.sort_unstable_by(f64::total_cmp);
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        Stats {
            mean,
            p50: percentile_sorted(values, 50.0),
            p90: percentile_sorted(values, 90.0),
            p95: percentile_sorted(values, 95.0),
            p99: percentile_sorted(values, 99.0),
        }
    }
    pub fn get(&self, stat: StatKind) -> f64 {
        match stat {
            StatKind::Mean => self.mean,
            StatKind::P50 => self.p50,
            StatKind::P90 => self.p90,
            StatKind::P95 => self.p95,
            StatKind::P99 => self.p99,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StatKind {
    Mean,
    P50,
    P90,
    P95,
    P99,
}

/// The statistic's name as capsim writes it (mean, p50, p90, p95, p99).
pub fn stat_name(s: StatKind) -> &'static str {
    match s {
        StatKind::Mean => "mean",
        StatKind::P50 => "p50",
        StatKind::P90 => "p90",
        StatKind::P95 => "p95",
        StatKind::P99 => "p99",
    }
}

impl StatKind {
    pub fn parse(s: &str) -> Option<StatKind> {
        match s {
            "mean" | "avg" => Some(StatKind::Mean),
            "p50" | "median" => Some(StatKind::P50),
            "p90" => Some(StatKind::P90),
            "p95" => Some(StatKind::P95),
            "p99" => Some(StatKind::P99),
            _ => None,
        }
    }
}

/// Per-request limits for goodput: a request is good when it meets every limit given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct RequestSlo {
    pub ttft_s_max: Option<f64>,
    pub itl_ms_max: Option<f64>,
    pub e2e_s_max: Option<f64>,
}

impl RequestSlo {
    pub fn is_set(&self) -> bool {
        self.ttft_s_max.is_some() || self.itl_ms_max.is_some() || self.e2e_s_max.is_some()
    }
    /// `itl_ms_max` applies to the request's own mean gap (its TPOT), as vLLM's goodput does.
    fn meets(&self, r: &RequestRecord) -> bool {
        self.ttft_s_max.is_none_or(|m| r.ttft_s() <= m)
            && self.itl_ms_max.is_none_or(|m| tpot_ms(r).is_none_or(|v| v <= m))
            && self.e2e_s_max.is_none_or(|m| r.e2e_s() <= m)
    }
}

fn tpot_ms(r: &RequestRecord) -> Option<f64> {
    (r.output_tokens > 1).then(|| r.decode_s() / (r.output_tokens - 1) as f64 * 1e3)
}

/// The summary of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub requests_sent: u64,
    pub requests_completed: u64,
    /// Completed requests inside the measured window (after warm-up and cool-down exclusion).
    pub requests_measured: u64,
    pub requests_rejected: u64,
    pub requests_unfinished: u64,
    pub ttft_s: Stats,
    pub queue_wait_s: Stats,
    pub itl_ms: Stats,
    pub tpot_ms: Stats,
    pub e2e_s: Stats,
    pub per_user_tok_s: Stats,
    pub system_output_tok_s: f64,
    pub system_total_tok_s: f64,
    pub request_throughput_per_s: f64,
    pub goodput_requests_per_s: Option<f64>,
    pub goodput_fraction: Option<f64>,
    pub preemptions: u64,
    pub steps: u64,
    pub sim_time_s: f64,
    pub busy_fraction: f64,
    pub kv_util_mean: f64,
    pub kv_util_max: f64,
    pub max_waiting: u32,
    /// Requests outstanding when the last one was sent (open loops: a growing backlog shows here).
    pub outstanding_at_last_send: u64,
    pub last_send_s: f64,
    /// Prompt tokens served from the prefix cache over all prompt tokens of the measured requests
    /// (0 to 1; 0 when nothing is shared or caching is off).
    pub prefix_hit_rate: f64,
    /// Mean prompt tokens per measured request found in the prefix cache.
    pub cached_tokens_per_request: f64,
    /// Cached blocks evicted to make room.
    pub prefix_evictions: u64,
    /// TTFT of the requests that hit the cache, and of those that did not.
    pub ttft_s_hit: Stats,
    pub ttft_s_miss: Stats,
    /// KV offload's tiers (present only when the run has a host tier, `--kv-offload-gb`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offload: Option<OffloadSummary>,
}

/// Where the measured requests' prompt tokens came from with a host tier, and what the tier cost.
/// `prefix_hit_rate`, `ttft_s_hit` and `ttft_s_miss` of the [`Summary`] count the GPU cache only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffloadSummary {
    /// Shares of the measured requests' prompt tokens (sum 1): found in the GPU prefix cache, loaded
    /// from host memory, computed.
    pub gpu_hit_rate: f64,
    pub host_hit_rate: f64,
    pub computed_rate: f64,
    /// Measured requests whose admission loaded blocks from host memory.
    pub requests_host_hit: u64,
    /// TTFT of the measured requests whose prefix hit host memory; that hit only the GPU cache; that
    /// hit neither.
    pub ttft_s_host_hit: Stats,
    pub ttft_s_gpu_hit: Stats,
    pub ttft_s_miss: Stats,
    /// The whole run's copies back to the GPU (bytes over all the replica's GPUs), and their mean
    /// duration (s).
    pub loads: u64,
    pub bytes_loaded: f64,
    pub load_s_mean: f64,
    /// Blocks the GPU evicted into host memory, and blocks host memory dropped.
    pub blocks_stored: u64,
    pub host_evictions: u64,
}

/// The tiers of the measured requests (`measured`) from the run's tally.
fn offload_summary<'a>(
    o: &crate::sim::OffloadStats,
    measured: impl Fn() -> Box<dyn Iterator<Item = &'a RequestRecord> + 'a>,
) -> OffloadSummary {
    let host: std::collections::HashMap<u32, u32> = o.host_hits.iter().copied().collect();
    let host_of = |r: &RequestRecord| host.get(&r.id).copied().unwrap_or(0);
    let (mut prompt, mut gpu, mut from_host, mut hit_requests) = (0u64, 0u64, 0u64, 0u64);
    for r in measured() {
        prompt += r.input_tokens as u64;
        gpu += r.cached_tokens as u64;
        let h = host_of(r) as u64;
        from_host += h;
        hit_requests += (h > 0) as u64;
    }
    let share = |x: u64| if prompt > 0 { x as f64 / prompt as f64 } else { 0.0 };
    let stats = |keep: &dyn Fn(&RequestRecord) -> bool| {
        let mut v: Vec<f64> = measured().filter(|r| keep(r)).map(|r| r.ttft_s()).collect();
        Stats::of(&mut v)
    };
    OffloadSummary {
        gpu_hit_rate: share(gpu),
        host_hit_rate: share(from_host),
        computed_rate: share(prompt - gpu - from_host),
        requests_host_hit: hit_requests,
        ttft_s_host_hit: stats(&|r| host_of(r) > 0),
        ttft_s_gpu_hit: stats(&|r| host_of(r) == 0 && r.cached_tokens > 0),
        ttft_s_miss: stats(&|r| host_of(r) == 0 && r.cached_tokens == 0),
        loads: o.loads,
        bytes_loaded: o.bytes_loaded,
        load_s_mean: if o.loads > 0 { o.load_s / o.loads as f64 } else { f64::NAN },
        blocks_stored: o.blocks_stored,
        host_evictions: o.host_evictions,
    }
}

/// The pooled ITL in ms; zeros when no request produced a second token.
pub fn pooled_itl_ms(h: &crate::sim::GapHistogram) -> Stats {
    if h.count() == 0 {
        return Stats::EMPTY;
    }
    let ms = |q: f64| h.percentile_s(q) * 1e3;
    Stats { mean: h.mean_s() * 1e3, p50: ms(50.0), p90: ms(90.0), p95: ms(95.0), p99: ms(99.0) }
}

/// Summarize a run. `warmup_requests`/`cooldown_requests` drop the first/last requests by send order;
/// `warmup_s` drops requests sent before that time.
pub fn summarize(
    out: &SimOutput,
    warmup_requests: u64,
    cooldown_requests: u64,
    warmup_s: f64,
    slo: &RequestSlo,
) -> Summary {
    let sent = out.requests_sent;
    let last_id = sent.saturating_sub(cooldown_requests);
    let warm_ns = (warmup_s * 1e9) as u64;
    let measured = || {
        out.records
            .iter()
            .filter(move |r| (r.id as u64) >= warmup_requests && (r.id as u64) < last_id && r.arrival.0 >= warm_ns)
    };
    // One statistic's values at a time: a run of 100 million requests holds its records and one
    // vector of 8 bytes per request, not seven (the summary's memory is part of the run's estimate,
    // crate::sim::memory_estimate).
    let stats = |f: &dyn Fn(&RequestRecord) -> Option<f64>| {
        let mut v: Vec<f64> = measured().filter_map(f).collect();
        Stats::of(&mut v)
    };
    let (mut n, mut t0, mut t1, mut out_tokens, mut in_tokens, mut good, mut cached) =
        (0usize, u64::MAX, 0u64, 0u64, 0u64, 0usize, 0u64);
    for r in measured() {
        n += 1;
        (t0, t1) = (t0.min(r.arrival.0), t1.max(r.finish.0));
        out_tokens += r.output_tokens as u64;
        in_tokens += r.input_tokens as u64;
        cached += r.cached_tokens as u64;
        good += (slo.is_set() && slo.meets(r)) as usize;
    }
    let wall_s = if n > 0 && t1 > t0 { (t1 - t0) as f64 * 1e-9 } else { 0.0 };
    let per_s = |x: f64| if wall_s > 0.0 { x / wall_s } else { 0.0 };
    let good = slo.is_set().then_some(good);
    Summary {
        requests_sent: sent,
        requests_completed: out.records.len() as u64,
        requests_measured: n as u64,
        requests_rejected: out.requests_rejected,
        requests_unfinished: out.requests_unfinished,
        ttft_s: stats(&|r| Some(r.ttft_s())),
        queue_wait_s: stats(&|r| Some(r.queue_wait_s())),
        itl_ms: pooled_itl_ms(&out.itl_gaps),
        tpot_ms: stats(&tpot_ms),
        e2e_s: stats(&|r| Some(r.e2e_s())),
        per_user_tok_s: stats(&|r| {
            (r.output_tokens > 1 && r.decode_s() > 0.0).then(|| r.output_tokens as f64 / r.decode_s())
        }),
        system_output_tok_s: per_s(out_tokens as f64),
        system_total_tok_s: per_s((out_tokens + in_tokens) as f64),
        request_throughput_per_s: per_s(n as f64),
        goodput_requests_per_s: good.map(|g| per_s(g as f64)),
        goodput_fraction: good.map(|g| if n > 0 { g as f64 / n as f64 } else { 0.0 }),
        preemptions: out.preemptions,
        steps: out.steps,
        sim_time_s: out.end.secs(),
        busy_fraction: if out.end.0 > 0 { out.busy_ns as f64 / out.end.0 as f64 } else { 0.0 },
        kv_util_mean: out.kv_util_time_weighted_mean,
        kv_util_max: out.kv_util_max,
        max_waiting: out.max_waiting,
        outstanding_at_last_send: out.outstanding_at_last_send,
        last_send_s: out.last_send.secs(),
        prefix_hit_rate: if in_tokens > 0 { cached as f64 / in_tokens as f64 } else { 0.0 },
        cached_tokens_per_request: if n > 0 { cached as f64 / n as f64 } else { 0.0 },
        prefix_evictions: out.prefix_evictions,
        ttft_s_hit: stats(&|r| (r.cached_tokens > 0).then(|| r.ttft_s())),
        ttft_s_miss: stats(&|r| (r.cached_tokens == 0).then(|| r.ttft_s())),
        offload: out.offload.as_ref().map(|o| offload_summary(o, || Box::new(measured()))),
    }
}

/// One pool of a disaggregated deployment over a run (`simulate --json` "pools"): its busy share
/// (busy time summed over its workers / (workers x the run's length)), its queue (each request's wait
/// from reaching a worker's engine to its first step there, s; the longest waiting queue of any
/// worker, requests), its KV use (time-weighted mean over busy time, max), preemptions, requests it
/// rejected and steps.
#[derive(Debug, Clone, Serialize)]
pub struct PoolSummary {
    pub workers: u32,
    pub utilization: f64,
    pub queue_wait_s: Stats,
    pub queue_wait_s_max: f64,
    pub max_waiting: u32,
    pub kv_util_mean: f64,
    pub kv_util_max: f64,
    pub preemptions: u64,
    pub rejected: u64,
    pub steps: u64,
    /// Blocks the pool's prefix caches evicted (the run's `prefix_evictions` is both pools' sum).
    pub prefix_evictions: u64,
}

/// A disaggregated run's pool figures summarized.
pub fn pool_summary(p: &crate::sim::PoolOutput, end_ns: u64) -> PoolSummary {
    let mut waits = p.queue_wait_s.clone();
    let max = waits.iter().copied().fold(f64::NAN, f64::max);
    let span = p.workers as f64 * end_ns as f64;
    PoolSummary {
        workers: p.workers,
        utilization: if span > 0.0 { p.busy_ns as f64 / span } else { 0.0 },
        queue_wait_s: Stats::of(&mut waits),
        queue_wait_s_max: max,
        max_waiting: p.max_waiting,
        kv_util_mean: p.kv_util_mean,
        kv_util_max: p.kv_util_max,
        preemptions: p.preemptions,
        rejected: p.rejected,
        steps: p.steps,
        prefix_evictions: p.prefix_evictions,
    }
}
