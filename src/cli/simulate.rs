//! `capsim simulate`: one workload on one profile.

use super::{goodput_slo, ProfileArgs, WorkloadArgs};
use capsim::error::{Error, Result};
use capsim::metrics::{summarize, Stats, Summary};
use capsim::profile::Profile;
use capsim::report::{num, table};
use capsim::sim::{simulate, SimOptions};
use capsim::workload::{Arrivals, LengthDist, LoadAxis, Workload};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Closed loop with N clients.
    #[arg(long, group = "load", help_heading = "Load")]
    pub concurrency: Option<u32>,
    /// N requests sent at t = 0.
    #[arg(long, group = "load", help_heading = "Load")]
    pub burst: Option<u32>,
    /// Open loop at R requests per second (Poisson unless --burstiness or --process say otherwise).
    #[arg(long, group = "load", help_heading = "Load")]
    pub rate: Option<f64>,
    /// Seed of the simulations: the same seed gives the same bytes, at any thread count.
    #[arg(long, default_value_t = 0, help_heading = "Run")]
    pub seed: u64,
    /// Print the JSON contract instead of a table.
    /// Print JSON instead of a table.
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Goodput: a request is good when its TTFT is at most this (s).
    #[arg(long, help_heading = "Run")]
    pub goodput_ttft_s: Option<f64>,
    /// Goodput: ... and its ITL at most this (ms).
    #[arg(long, help_heading = "Run")]
    pub goodput_itl_ms: Option<f64>,
    /// Goodput: ... and its E2E at most this (s).
    #[arg(long, help_heading = "Run")]
    pub goodput_e2e_s: Option<f64>,
    /// Stop the simulation at this simulated time (s); unfinished requests are counted.
    #[arg(long, default_value_t = 1e7, help_heading = "Run")]
    pub horizon: f64,
    /// Serve the workload (an open loop or a trace) on a fleet whose replica count this autoscaling
    /// policy (TOML: min/max replicas, metric and target, start-up delay parts, price) changes over
    /// time; reports requests, latency, SLO attainment (the --goodput-* limits) and GPU-hours per hour.
    #[arg(long, help_heading = "Fleet")]
    pub autoscale: Option<PathBuf>,
    /// A pool of a mixed fleet, GPU[:tp=N][:replicas=N] (repeatable): the workload served by every
    /// pool together behind a weighted least-outstanding router; metrics per pool and for the fleet.
    #[arg(long, help_heading = "Fleet")]
    pub pool: Vec<String>,
    /// With --autoscale: write an HTML page of the day (replicas, TTFT and TPOT over the day, the
    /// bucket table) to this file.
    #[arg(long, help_heading = "Output")]
    pub html: Option<PathBuf>,
    /// Write every request's record (CSV) to this file.
    #[arg(long, help_heading = "Output")]
    pub per_request: Option<PathBuf>,
    /// Write the summary as a `vllm bench serve --save-result` JSON file (readable by calibrate --runs
    /// and validate --runs).
    #[arg(long, help_heading = "Output")]
    pub save_vllm_result: Option<PathBuf>,
}

pub fn workload_of(a: &SimulateArgs) -> Result<Workload> {
    let src = a.workload.source()?;
    let load = if let Some(n) = a.concurrency {
        if n == 0 {
            return Err(Error::flag("--concurrency", "must be at least 1"));
        }
        Some((LoadAxis::Concurrency, n as f64, "--concurrency"))
    } else if let Some(n) = a.burst {
        if n == 0 {
            return Err(Error::flag("--burst", "must be at least 1"));
        }
        Some((LoadAxis::Burst, n as f64, "--burst"))
    } else if let Some(r) = a.rate {
        let max = capsim::workload::MAX_RATE_PER_S;
        if !(r.is_finite() && r > 0.0 && r <= max) {
            return Err(Error::flag(
                "--rate",
                format!(
                    "must be a positive number of requests per second up to {max:e}, got {}",
                    capsim::error::fmt_num(r)
                ),
            ));
        }
        Some((LoadAxis::Rate, r, "--rate"))
    } else {
        None
    };
    match (load, &src.file_workload) {
        (Some((axis, value, flag)), _) => {
            src.check_axis(axis, flag)?;
            // A workload the flags built: its errors are theirs (a file's keep its name).
            let w = src.template.at(axis, value);
            match src.file_workload {
                None => w.map_err(|e| super::workload_args::flag_error(e, flag)),
                Some(_) => w,
            }
        }
        // A closed loop of the file's own replays drifts as a load of it does (WorkloadSpec::with_timing_noise).
        (None, Some(w)) if matches!(w.spec.arrivals, Arrivals::ClosedLoop { .. }) => {
            w.spec.clone().with_timing_noise().validate()
        }
        (None, Some(w)) => Ok(w.clone()),
        (None, None) => {
            Err(Error::flag("--concurrency", "choose a load: --concurrency, --burst, --rate, --trace or --workload"))
        }
    }
}

/// The resolved scenario written next to every result.
pub fn scenario_json(p: &Profile, w: &Workload, seed: u64) -> serde_json::Value {
    let workload = match &w.spec.arrivals {
        Arrivals::Trace { records } => json!({
            "arrivals": {"kind": "trace", "requests": records.len()},
            "warmup_requests": w.spec.warmup_requests,
            "cooldown_requests": w.spec.cooldown_requests,
        }),
        _ => serde_json::to_value(&w.spec).expect("workload serializes"),
    };
    json!({
        "profile": p.name(),
        "retargeted_from": p.retargeted_from,
        "retarget_method": p.retarget_method,
        "extrapolation": p.retargeted_from.is_some(),
        "caveats": p.caveats(),
        "expert_parallel": p.expert_parallel,
        "model": p.arch.name,
        "gpu": p.gpu.name,
        "tensor_parallel": p.tensor_parallel,
        "weight_dtype": p.file.model.weight_dtype,
        "kv_dtype": p.file.model.kv_dtype,
        "engine": p.engine,
        "coefficients": p.coefficients,
        "workload": workload,
        "seed": seed,
        // The layout beyond tensor parallelism and the speculation (issue 25), added after the keys
        // above, which stay as they were: attention DP ranks, the GPUs the experts are spread over
        // (the TP group under plain --expert-parallel, 1 without), pipeline stages, redundant
        // expert slots, and the speculative method, drafts, acceptance (null without).
        "attention_dp": p.parallel.attention_dp,
        "expert_parallel_size": p.parallel.expert_gpus(p.tensor_parallel, p.expert_parallel),
        "pipeline_parallel": p.parallel.pipeline_parallel,
        "redundant_experts": p.parallel.redundant_experts,
        "speculative": p.speculative().map(|s| json!({
            "method": s.method.as_str(),
            "tokens": s.tokens,
            "accept_rate": s.accept_rate,
            "expected_tokens_per_step": s.expected_tokens(s.tokens),
        })),
    })
}

/// The text header's lines for a layout beyond tensor parallelism and for speculative decoding
/// (empty for a plain deployment).
pub fn layout_text(p: &Profile) -> String {
    let mut out = String::new();
    let par = &p.parallel;
    if par.is_large(p.tensor_parallel) {
        out += &format!(
            "layout: TP {}, {} attention DP rank(s), experts over {} GPU(s), {} pipeline stage(s){}: {} GPUs\n",
            p.tensor_parallel,
            par.attention_dp,
            p.parallel.expert_gpus(p.tensor_parallel, p.expert_parallel),
            par.pipeline_parallel,
            if par.redundant_experts > 0 {
                format!(", {} redundant experts", par.redundant_experts)
            } else {
                String::new()
            },
            par.gpus(p.tensor_parallel)
        );
    }
    if let Some(s) = p.speculative() {
        out += &format!(
            "speculative decoding: {}, {} drafted tokens a step at acceptance {}: {} tokens per sequence and step expected\n",
            s.method.as_str(),
            s.tokens,
            s.accept_rate.iter().map(|x| format!("{x}")).collect::<Vec<_>>().join(","),
            num(s.expected_tokens(s.tokens), 4)
        );
    }
    out
}

fn stats_row(name: &str, s: &Stats) -> Vec<String> {
    vec![name.into(), num(s.mean, 4), num(s.p50, 4), num(s.p90, 4), num(s.p95, 4), num(s.p99, 4)]
}

pub fn summary_table(s: &Summary) -> String {
    let mut out = table(
        &["metric", "mean", "p50", "p90", "p95", "p99"],
        &[
            stats_row("ttft_s", &s.ttft_s),
            stats_row("queue_wait_s", &s.queue_wait_s),
            stats_row("itl_ms", &s.itl_ms),
            stats_row("tpot_ms", &s.tpot_ms),
            stats_row("e2e_s", &s.e2e_s),
            stats_row("per_user_tok_s", &s.per_user_tok_s),
        ],
    );
    out.push('\n');
    let mut kv = vec![
        ("requests completed / sent", format!("{} / {}", s.requests_completed, s.requests_sent)),
        ("requests measured", s.requests_measured.to_string()),
        ("system output tok/s", num(s.system_output_tok_s, 4)),
        ("system total tok/s", num(s.system_total_tok_s, 4)),
        ("request throughput /s", num(s.request_throughput_per_s, 4)),
        ("preemptions", s.preemptions.to_string()),
        ("KV utilization mean / max", format!("{:.1}% / {:.1}%", s.kv_util_mean * 100.0, s.kv_util_max * 100.0)),
        ("max waiting", s.max_waiting.to_string()),
        ("engine steps", s.steps.to_string()),
        ("simulated time s", num(s.sim_time_s, 4)),
    ];
    if s.requests_rejected > 0 {
        kv.push(("rejected (context, memory)", s.requests_rejected.to_string()));
    }
    if s.requests_unfinished > 0 {
        kv.push(("unfinished at horizon", s.requests_unfinished.to_string()));
    }
    if let (Some(g), Some(f)) = (s.goodput_requests_per_s, s.goodput_fraction) {
        kv.push(("goodput req/s (fraction)", format!("{} ({:.1}%)", num(g, 4), f * 100.0)));
    }
    if s.prefix_hit_rate > 0.0 || s.prefix_evictions > 0 {
        kv.push(("prefix cache hit rate", format!("{:.1}% of prompt tokens", s.prefix_hit_rate * 100.0)));
        kv.push(("cached tokens / request", num(s.cached_tokens_per_request, 4)));
        kv.push(("prefix cache evictions", format!("{} blocks", s.prefix_evictions)));
        kv.push(("TTFT mean hit / miss s", format!("{} / {}", num(s.ttft_s_hit.mean, 4), num(s.ttft_s_miss.mean, 4))));
    }
    if let Some(o) = &s.offload {
        kv.push((
            "prompt tokens GPU/host/new",
            format!(
                "{:.1}% / {:.1}% / {:.1}%",
                o.gpu_hit_rate * 100.0,
                o.host_hit_rate * 100.0,
                o.computed_rate * 100.0
            ),
        ));
        kv.push((
            "TTFT mean host/GPU/miss s",
            format!(
                "{} / {} / {}",
                num(o.ttft_s_host_hit.mean, 4),
                num(o.ttft_s_gpu_hit.mean, 4),
                num(o.ttft_s_miss.mean, 4)
            ),
        ));
        kv.push((
            "host loads (GB, mean s)",
            format!("{} ({} GB, {} s)", o.loads, num(o.bytes_loaded / 1e9, 4), num(o.load_s_mean, 4)),
        ));
        kv.push(("host stores / evictions", format!("{} / {} blocks", o.blocks_stored, o.host_evictions)));
    }
    for (k, v) in kv {
        out.push_str(&format!("{k:<28}{v}\n"));
    }
    out
}

/// A simulation ready to run: every input checked.
pub struct Prepared {
    pub profile: Profile,
    pub workload: Workload,
    pub slo: capsim::metrics::RequestSlo,
    pub seed: u64,
    pub horizon_s: f64,
    /// A disaggregated deployment (`--prefill-*`, `--decode-*`); `profile` is then its decode pool's.
    pub pd: Option<Box<capsim::profile::disagg::Disaggregated>>,
}

pub fn prepare(a: &SimulateArgs) -> Result<Prepared> {
    for (flag, path) in [("--per-request", &a.per_request), ("--save-vllm-result", &a.save_vllm_result)] {
        if let Some(path) = path {
            super::check_output_file(flag, path)?;
        }
    }
    let catalog = a.profile.catalog()?;
    let pd = a.profile.disaggregated(&catalog)?.map(Box::new);
    let p = match &pd {
        Some(d) => d.decode.clone(),
        None => a.profile.resolve(&catalog)?,
    };
    let w = workload_of(a)?;
    w.check_context(p.arch.max_context, &p.arch.name)?;
    if let Some(d) = &pd {
        super::disagg::check_pools_fit(d, &w)?;
    }
    if !(a.horizon.is_finite() && a.horizon > 0.0) {
        return Err(Error::flag("--horizon", "must be a positive number of seconds"));
    }
    let slo = goodput_slo(a.goodput_ttft_s, a.goodput_itl_ms, a.goodput_e2e_s)?;
    let replicas = pd.as_ref().map_or(1, |d| d.prefill_workers + d.decode_workers);
    capsim::memory::check(&capsim::sim::memory_estimate(&p, &w, replicas), 1, "this simulation")?;
    Ok(Prepared { profile: p, workload: w, slo, seed: a.seed, horizon_s: a.horizon, pd })
}

impl Prepared {
    pub fn run(&self) -> (capsim::sim::SimOutput, Summary) {
        let (p, w) = (&self.profile, &self.workload);
        let opts = SimOptions { horizon_s: self.horizon_s, ..Default::default() };
        let out = match &self.pd {
            Some(d) => capsim::sim::simulate_disaggregated(d, w, self.seed, opts),
            None => simulate(p, w, self.seed, opts),
        };
        let s = summarize(&out, w.spec.warmup_requests, w.spec.cooldown_requests, w.spec.warmup_s, &self.slo);
        (out, s)
    }
    /// The JSON `simulate --json` prints.
    pub fn json(&self, out: &capsim::sim::SimOutput, s: &Summary) -> serde_json::Value {
        let mut v = serde_json::to_value(s).expect("summary serializes");
        let obj = v.as_object_mut().expect("object");
        obj.insert("capsim_version".into(), json!(env!("CARGO_PKG_VERSION")));
        obj.insert("seed".into(), json!(self.seed));
        obj.insert("scenario".into(), scenario_json(&self.profile, &self.workload, self.seed));
        obj.insert("kv_capacity".into(), serde_json::to_value(self.profile.kv_capacity()).expect("kv serializes"));
        obj.insert("kv_series".into(), serde_json::to_value(&out.series).expect("series serializes"));
        if let (Some(d), Some(r)) = (&self.pd, &out.disagg) {
            super::disagg::insert_json(obj, d, r);
        }
        v
    }
}

/// Says how a closed loop's fixed output lengths were drawn (WorkloadSpec::with_timing_noise), so that
/// the range in the scenario is not a surprise: a class whose outputs are the draw a fixed length
/// becomes.
fn timing_noise_note(w: &Workload) -> Option<String> {
    if !matches!(w.spec.arrivals, Arrivals::ClosedLoop { .. }) {
        return None;
    }
    let spread: Vec<String> = w
        .spec
        .classes
        .iter()
        .filter_map(|c| match c.output {
            LengthDist::Uniform { min, max } if LengthDist::fixed(max).with_timing_noise() == c.output => {
                Some(format!("{max} -> {min}..={max}"))
            }
            _ => None,
        })
        .collect();
    (!spread.is_empty()).then(|| {
        format!(
            "closed loop: outputs drawn up to 2% short of the fixed length ({}): a real server's timing noise keeps its \
             clients from running in lockstep (--output-len uniform:N:N for exactly N)",
            spread.join(", ")
        )
    })
}

pub fn run(a: SimulateArgs) -> Result<()> {
    if a.html.is_some() && a.autoscale.is_none() {
        return Err(Error::flag("--html", "charts an autoscaled day: give --autoscale POLICY.toml"));
    }
    if !a.pool.is_empty() {
        return super::mixed::run(&a);
    }
    if let Some(policy) = &a.autoscale {
        return super::autoscale::run(&a, policy);
    }
    let prep = prepare(&a)?;
    let (out, s) = prep.run();
    let (p, w) = (&prep.profile, &prep.workload);
    if let Some(path) = &a.per_request {
        write_per_request(path, &out.records, out.offload.as_ref())
            .map_err(|err| Error::Io { path: path.display().to_string(), err })?;
    }
    if let Some(path) = &a.save_vllm_result {
        let v = capsim::report::vllm_bench_result(&s, &w.spec.arrivals, &p.arch.name);
        std::fs::write(path, serde_json::to_string(&v).expect("json"))
            .map_err(|err| Error::Io { path: path.display().to_string(), err })?;
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&prep.json(&out, &s)).expect("json"))?;
    } else {
        outln!("profile: {}{}", p.name(), extrapolation_note(p))?;
        outln!(
            "engine: {} (budget {} tokens, max {} seqs, KV {} tokens in {}-token blocks), seed {}",
            p.engine.kind.as_str(),
            p.engine.max_num_batched_tokens,
            p.engine.max_num_seqs,
            p.engine.kv_capacity_tokens,
            p.engine.block_size_tokens,
            a.seed
        )?;
        out!("{}", layout_text(p))?;
        if let Some(note) = timing_noise_note(w) {
            outln!("{note}")?;
        }
        match (&prep.pd, &out.disagg) {
            (Some(d), Some(r)) => {
                let cache = s.prefix_hit_rate > 0.0 || s.prefix_evictions > 0 || s.offload.is_some();
                out!("{}", super::disagg::pools_text(d, r, cache))?
            }
            _ => out!("{}", kv_capacity_text(p))?,
        }
        outln!()?;
        out!("{}", summary_table(&s))?;
    }
    if let Some(msg) = capsim::profile::trtllm_budget_warning(&p.engine, w) {
        eprintln!("capsim: warning: {msg}");
    }
    if s.requests_unfinished > 0 {
        // Not silent: the statistics cover only the requests that finished.
        eprintln!(
            "capsim: warning: {} of {} requests were still queued or running when the run stopped at its horizon of {} s (--horizon): the engine could not finish them (an open loop above its capacity, or requests too long for it); the statistics cover the {} that completed",
            s.requests_unfinished,
            s.requests_sent,
            num(prep.horizon_s, 4),
            s.requests_completed
        );
    }
    if s.requests_measured == 0 {
        return Err(Error::NothingMeasured(format!(
            "no request was measured ({} sent, {} completed, {} rejected, {} unfinished at the horizon, warm-up {} and cool-down {} left out): the latency statistics are empty (null in JSON, - in the table)",
            s.requests_sent,
            s.requests_completed,
            s.requests_rejected,
            s.requests_unfinished,
            w.spec.warmup_requests,
            w.spec.cooldown_requests
        )));
    }
    Ok(())
}

/// `--per-request`: one CSV row per completed request, written as it is formatted (a run of 100
/// million requests would otherwise hold every row's text at once, several times its records).
/// With KV offload (`offload`), two columns more at the end: the prompt tokens found in the GPU
/// prefix cache and those loaded from host memory.
fn write_per_request(
    path: &std::path::Path,
    records: &[capsim::sim::RequestRecord],
    offload: Option<&capsim::sim::OffloadStats>,
) -> std::io::Result<()> {
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(file);
    let mut header = vec![
        "id",
        "class",
        "input_tokens",
        "output_tokens",
        "arrival_s",
        "queue_wait_s",
        "ttft_s",
        "e2e_s",
        "preemptions",
    ];
    let host: Option<std::collections::HashMap<u32, u32>> = offload.map(|o| o.host_hits.iter().copied().collect());
    if host.is_some() {
        header.extend(["gpu_cached_tokens", "host_cached_tokens"]);
    }
    w.write_record(&header)?;
    let mut row: Vec<String> = Vec::with_capacity(header.len());
    for r in records {
        row.clear();
        row.extend([
            r.id.to_string(),
            r.class.to_string(),
            r.input_tokens.to_string(),
            r.output_tokens.to_string(),
            format!("{:.9}", r.arrival.secs()),
            format!("{:.9}", r.queue_wait_s()),
            format!("{:.9}", r.ttft_s()),
            format!("{:.9}", r.e2e_s()),
            r.preemptions.to_string(),
        ]);
        if let Some(host) = &host {
            row.push(r.cached_tokens.to_string());
            row.push(host.get(&r.id).copied().unwrap_or(0).to_string());
        }
        w.write_record(&row)?;
    }
    w.into_inner().map_err(|e| e.into_error())?.into_inner().map_err(|e| e.into_error())?;
    Ok(())
}

/// The KV capacity lines: tokens, max-length requests, and the memory arithmetic behind them, to
/// hold against the engine's start-up log.
pub fn kv_capacity_text(p: &Profile) -> String {
    let k = p.kv_capacity();
    let mut out = format!(
        "KV cache: {} tokens ({} blocks of {}), {} requests of {} tokens (max_model_len)\n",
        k.kv_capacity_tokens,
        k.kv_capacity_blocks,
        k.kv_block_size_tokens,
        num(k.max_len_requests, 3),
        k.max_model_len_tokens
    );
    match &k.memory {
        Some(m) => {
            let gb = |b: f64| format!("{:.1}", b / 1e9);
            out.push_str(&format!(
                "  memory GB: total {}, budget {}, weights {}, activations {}, non-torch {}, CUDA graphs {} -> KV {}\n  ({})\n",
                gb(m.total_bytes),
                gb(m.budget_bytes),
                gb(m.weights_bytes),
                gb(m.activation_bytes),
                gb(m.non_torch_bytes),
                gb(m.cuda_graph_bytes),
                gb(m.kv_bytes),
                m.formula
            ));
        }
        None => out.push_str("  (kv_capacity_tokens set directly)\n"),
    }
    out.push_str(&format!("  compare: {}\n", k.engine_log_line));
    out
}

pub fn extrapolation_note(p: &Profile) -> String {
    match &p.retargeted_from {
        Some(from) => format!(
            "  [EXTRAPOLATION: retargeted from profile {from}; {}]",
            p.retarget_method.as_deref().unwrap_or("efficiencies kept, peaks and counts swapped")
        ),
        None => String::new(),
    }
    .to_string()
        + &p.caveats().iter().map(|c| format!("\n  note: {c}")).collect::<String>()
}
