//! The disaggregated prefill/decode flags of [`ProfileArgs`] (`--prefill-*`, `--decode-*`) resolved
//! into a [`Disaggregated`] deployment: each pool a profile of its own, from the deployment's flags
//! with the pool's GPU, tensor parallelism and expert layout.

use super::capacity::RoutingArg;
use super::ProfileArgs;
use capsim::catalog::Catalog;
use capsim::error::{Error, Result};
use capsim::profile::disagg::{worker_gpus, Disaggregated, PdRouting, PoolSpec, MAX_WORKERS};
use capsim::profile::Profile;
use capsim::workload::Workload;

/// Which pool, for flag names.
#[derive(Clone, Copy)]
enum Side {
    Prefill,
    Decode,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Prefill => "prefill",
            Side::Decode => "decode",
        }
    }
    fn flag(self, name: &str) -> String {
        match self {
            Side::Prefill => format!("--prefill-{name}"),
            Side::Decode => format!("--decode-{name}"),
        }
    }
}

impl ProfileArgs {
    /// The disaggregated flags and whether each was given.
    pub fn pd_flag_list(&self) -> [(&'static str, bool); 17] {
        [
            ("--pd-routing", self.pd_routing.is_some()),
            ("--prefill-workers", self.prefill_workers.is_some()),
            ("--prefill-tp", self.prefill_tp.is_some()),
            ("--prefill-ep", self.prefill_ep.is_some()),
            ("--prefill-redundant-experts", self.prefill_redundant_experts.is_some()),
            ("--prefill-attention-dp", self.prefill_attention_dp.is_some()),
            ("--prefill-gpu", self.prefill_gpu.is_some()),
            ("--prefill-max-num-seqs", self.prefill_max_num_seqs.is_some()),
            ("--prefill-max-num-batched-tokens", self.prefill_max_num_batched_tokens.is_some()),
            ("--decode-workers", self.decode_workers.is_some()),
            ("--decode-tp", self.decode_tp.is_some()),
            ("--decode-ep", self.decode_ep.is_some()),
            ("--decode-redundant-experts", self.decode_redundant_experts.is_some()),
            ("--decode-attention-dp", self.decode_attention_dp.is_some()),
            ("--decode-gpu", self.decode_gpu.is_some()),
            ("--decode-max-num-seqs", self.decode_max_num_seqs.is_some()),
            ("--decode-max-num-batched-tokens", self.decode_max_num_batched_tokens.is_some()),
        ]
    }
    /// The disaggregated flags given.
    pub fn pd_flags(&self) -> impl Iterator<Item = &'static str> {
        self.pd_flag_list().into_iter().filter_map(|(f, given)| given.then_some(f))
    }
    /// Refuse the disaggregated flags where the command runs one aggregated deployment (a pool flag
    /// would be dropped), naming the first given and saying `why`.
    pub fn refuse_pools(&self, why: &str) -> Result<()> {
        match self.pd_flags().next() {
            Some(flag) => Err(Error::flag(flag, why)),
            None => Ok(()),
        }
    }
    /// The two pools as stated (None: no disaggregated flag given). Both worker counts are required
    /// once any `--prefill-*` or `--decode-*` flag is given.
    pub fn pool_specs(&self) -> Result<Option<(PoolSpec, PoolSpec)>> {
        let Some(first) = self.pd_flags().next() else { return Ok(None) };
        let workers = |flag: &str, n: Option<u32>| -> Result<u32> {
            match n {
                None => Err(Error::flag(
                    flag,
                    format!(
                        "a disaggregated deployment (given {first}) needs both --prefill-workers and --decode-workers"
                    ),
                )),
                Some(n) if n == 0 || n > MAX_WORKERS => {
                    Err(Error::flag(flag, format!("must be in 1..={MAX_WORKERS} workers, got {n}")))
                }
                Some(n) => Ok(n),
            }
        };
        let p = PoolSpec {
            workers: workers("--prefill-workers", self.prefill_workers)?,
            tp: self.prefill_tp,
            ep: self.prefill_ep,
            redundant_experts: self.prefill_redundant_experts,
            attention_dp: self.prefill_attention_dp,
            gpu: self.prefill_gpu.clone(),
            max_num_seqs: self.prefill_max_num_seqs,
            max_num_batched_tokens: self.prefill_max_num_batched_tokens,
        };
        let d = PoolSpec {
            workers: workers("--decode-workers", self.decode_workers)?,
            tp: self.decode_tp,
            ep: self.decode_ep,
            redundant_experts: self.decode_redundant_experts,
            attention_dp: self.decode_attention_dp,
            gpu: self.decode_gpu.clone(),
            max_num_seqs: self.decode_max_num_seqs,
            max_num_batched_tokens: self.decode_max_num_batched_tokens,
        };
        Ok(Some((p, d)))
    }
    /// These flags without the disaggregated ones (the deployment each pool starts from).
    pub fn without_pd(&self) -> ProfileArgs {
        ProfileArgs {
            pd_routing: None,
            prefill_workers: None,
            prefill_tp: None,
            prefill_ep: None,
            prefill_redundant_experts: None,
            prefill_attention_dp: None,
            prefill_gpu: None,
            prefill_max_num_seqs: None,
            prefill_max_num_batched_tokens: None,
            decode_workers: None,
            decode_tp: None,
            decode_ep: None,
            decode_redundant_experts: None,
            decode_attention_dp: None,
            decode_gpu: None,
            decode_max_num_seqs: None,
            decode_max_num_batched_tokens: None,
            ..self.clone()
        }
    }
    /// One pool's profile: the deployment's flags with the pool's GPU, TP and expert layout; an error
    /// names the pool's flag.
    fn pool_profile(&self, catalog: &Catalog, spec: &PoolSpec, side: Side) -> Result<Profile> {
        let mut a = self.without_pd();
        if let Some(tp) = spec.tp {
            if tp == 0 {
                return Err(Error::flag(&side.flag("tp"), "must be at least 1 GPU"));
            }
            a.tp = Some(tp);
        }
        if let Some(g) = &spec.gpu {
            a.gpu = Some(g.clone());
        }
        if let Some(dp) = spec.attention_dp {
            if dp == 0 {
                return Err(Error::flag(&side.flag("attention-dp"), "must be at least 1"));
            }
            a.attention_dp = Some(dp);
        }
        if let Some(ep) = spec.ep {
            if ep == 0 {
                return Err(Error::flag(&side.flag("ep"), "must be at least 1"));
            }
            // The pool's own size replaces the shared flags' (--ep or --expert-parallel).
            a.ep = Some(ep);
            a.expert_parallel = false;
        }
        if let Some(n) = spec.redundant_experts {
            a.redundant_experts = Some(n);
        }
        // The pool's own engine caps replace the shared ones, in the engine's ranges, checked here
        // so that the error names the pool's flag.
        use capsim::profile::{MAX_BATCHED_TOKENS_LIMIT, MAX_NUM_SEQS_LIMIT};
        for (n, limit, flag, slot) in [
            (spec.max_num_seqs, MAX_NUM_SEQS_LIMIT, "max-num-seqs", &mut a.max_num_seqs),
            (
                spec.max_num_batched_tokens,
                MAX_BATCHED_TOKENS_LIMIT,
                "max-num-batched-tokens",
                &mut a.max_num_batched_tokens,
            ),
        ] {
            if let Some(n) = n {
                if n == 0 || n > limit {
                    return Err(Error::flag(&side.flag(flag), format!("must be in 1..={limit}, got {n}")));
                }
                *slot = Some(n);
            }
        }
        a.resolve(catalog).map_err(|e| match e {
            // The weights leave no KV room on the pool's workers (profile/engine.rs, the one
            // Infeasible of a resolve): the pool's own flags are what changes that.
            Error::Infeasible(msg) => {
                let flag = if spec.gpu.is_some() && spec.tp.is_none() { side.flag("gpu") } else { side.flag("tp") };
                let name = side.name();
                let (msg, advice) = msg.split_once("; raise tensor_parallel").unwrap_or((msg.as_str(), ""));
                // Redundant expert copies (profile/engine.rs names them) are the pool's flag too.
                let copies = match advice.is_empty() {
                    true => String::new(),
                    false => format!(", or fewer redundant experts ({})", side.flag("redundant-experts")),
                };
                Error::flag(
                    &flag,
                    format!(
                        "the {name} pool: {msg}; give its workers more GPUs ({}) or a GPU with more memory ({}){copies}",
                        side.flag("tp"),
                        side.flag("gpu")
                    ),
                )
            }
            e => rename_flag(e, side, spec),
        })
    }
    /// The disaggregated deployment the flags state, None without `--prefill-*`/`--decode-*` flags.
    pub fn disaggregated(&self, catalog: &Catalog) -> Result<Option<Disaggregated>> {
        let Some((p, d)) = self.pool_specs()? else { return Ok(None) };
        let prefill = self.pool_profile(catalog, &p, Side::Prefill)?;
        let decode = self.pool_profile(catalog, &d, Side::Decode)?;
        if prefill.arch.name != decode.arch.name {
            return Err(Error::flag("--decode-gpu", "both pools must serve the same model"));
        }
        let routing = match self.pd_routing {
            None | Some(RoutingArg::RoundRobin) => PdRouting::RoundRobin,
            Some(RoutingArg::LeastOutstanding) => PdRouting::LeastOutstanding,
            Some(RoutingArg::PrefixAware) => PdRouting::PrefixAware,
        };
        Ok(Some(
            Disaggregated::new(prefill, decode, p.workers, d.workers)
                .with_routing(routing)
                .with_learned_handover(catalog.learned.as_ref()),
        ))
    }
}

/// A pool's layout as the JSON of `simulate` and `capacity --disaggregated` reports it.
fn pool_layout(p: &Profile) -> serde_json::Value {
    serde_json::json!({
        "gpu": p.gpu.name,
        "tensor_parallel": p.tensor_parallel,
        "pipeline_parallel": p.parallel.pipeline_parallel,
        "expert_parallel": p.expert_parallel,
        // The GPUs the experts are spread over, as simulate's scenario states it.
        "expert_parallel_size": p.parallel.expert_gpus(p.tensor_parallel, p.expert_parallel),
        "redundant_experts": p.parallel.redundant_experts,
        "attention_dp": p.parallel.attention_dp,
        // Each rank's, as --prefill-max-num-seqs and --prefill-max-num-batched-tokens state them.
        "max_num_seqs": p.engine.max_num_seqs / p.parallel.attention_dp.max(1),
        "max_num_batched_tokens": p.engine.max_num_batched_tokens / p.parallel.attention_dp.max(1),
    })
}

/// A worker's layout as the text names it: "TP4", or "TP2 PP4" with pipeline stages (its GPUs are
/// their product).
fn layout(p: &Profile) -> String {
    match p.parallel.pipeline_parallel {
        1 => format!("TP{}", p.tensor_parallel),
        pp => format!("TP{} PP{pp}", p.tensor_parallel),
    }
}

/// A pool's error from the shared flags named by the pool's own flag where it came from there.
fn rename_flag(e: Error, side: Side, spec: &PoolSpec) -> Error {
    match e {
        Error::Input { at, msg } if at.source == "command line" => {
            // The pool's flag where the pool stated its own value; else the shared flag it took.
            let own = |given: bool, name: &str, shared: &str| if given { side.flag(name) } else { shared.to_string() };
            let flag = match at.field.as_deref() {
                Some("--gpu") => own(spec.gpu.is_some(), "gpu", "--gpu"),
                Some("--tp") => own(spec.tp.is_some(), "tp", "--tp"),
                Some("--attention-dp") => own(spec.attention_dp.is_some(), "attention-dp", "--attention-dp"),
                Some("--ep") => own(spec.ep.is_some(), "ep", "--ep"),
                Some("--redundant-experts") => {
                    own(spec.redundant_experts.is_some(), "redundant-experts", "--redundant-experts")
                }
                Some(f) => f.to_string(),
                None => return Error::Input { at, msg },
            };
            Error::flag(&flag, msg)
        }
        other => other,
    }
}

/// The workload's shortest request must fit each pool alone: its prompt (and first token) the
/// prefill worker's KV, its whole sequence the decode worker's, which holds it to the end; else no
/// request could run, refused naming the pool's flag (longer requests that do not fit are rejected
/// one by one, as an engine rejects them).
pub fn check_pools_fit(d: &Disaggregated, w: &Workload) -> Result<()> {
    use capsim::workload::Arrivals;
    let (input, output) = match &w.spec.arrivals {
        Arrivals::Trace { records } => records
            .iter()
            .map(|r| (r.input_tokens, r.output_tokens))
            .min_by_key(|&(i, o)| i as u64 + o as u64)
            .unwrap_or((1, 1)),
        _ => w
            .spec
            .classes
            .iter()
            .map(|c| (c.input.min() + c.system_prompt_tokens, c.output.min()))
            .min_by_key(|&(i, o)| i as u64 + o as u64)
            .unwrap_or((1, 1)),
    };
    for (p, side, tokens) in
        [(&d.prefill, Side::Prefill, input as u64 + 1), (&d.decode, Side::Decode, input as u64 + output as u64)]
    {
        let e = &p.engine;
        let blocks = tokens.div_ceil(e.block_size_tokens as u64) + e.per_seq_reserved_blocks as u64;
        if blocks > e.kv_capacity_blocks() {
            let pool = side.name();
            // A stated KV capacity (--kv-capacity-tokens, or a profile's engine.kv_capacity_tokens)
            // is every worker's whatever its GPUs: more GPUs cannot help.
            if p.file.engine.kv_capacity_tokens.is_some() {
                return Err(Error::flag(
                    "--kv-capacity-tokens",
                    format!(
                        "{} tokens of KV per worker, as stated, leave a {pool} worker no room for the workload's longest request, which needs {tokens}: raise it, or leave it unstated to derive each pool's KV from its GPUs",
                        e.kv_capacity_tokens
                    ),
                ));
            }
            return Err(Error::flag(
                &side.flag("tp"),
                format!(
                    "a {pool} worker ({} x {}, {}) holds KV for {} tokens, and the workload's longest request needs {} (prompt {}{}): no room for one request; give the pool more GPUs (--{pool}-tp) or another GPU (--{pool}-gpu)",
                    worker_gpus(p),
                    p.gpu.name,
                    p.engine.kind.as_str(),
                    e.kv_capacity_tokens,
                    tokens,
                    input,
                    match side { Side::Prefill => String::from(" + 1"), Side::Decode => format!(" + output {output}") },
                ),
            ));
        }
    }
    Ok(())
}

/// The deployment's JSON object, as simulate's and validate --runs' `disaggregated` key state it:
/// each pool's workers, layout (as `--prefill-*`/`--decode-*` state it), engine and KV capacity; the
/// GPUs in all, the KV link, the hand-over and the router.
pub fn deployment_json(d: &Disaggregated) -> serde_json::Value {
    use serde_json::json;
    let pool = |p: &Profile, workers: u32| {
        let mut v = pool_layout(p);
        v["workers"] = json!(workers);
        v["engine"] = json!(p.engine.kind.as_str());
        v["kv_capacity_tokens"] = json!(p.engine.kv_capacity_tokens);
        v
    };
    json!({
        "prefill": pool(&d.prefill, d.prefill_workers),
        "decode": pool(&d.decode, d.decode_workers),
        "gpus": d.gpus(),
        "kv_link": d.link,
        "handover_s": d.handover_s,
        "routing": d.routing,
    })
}

/// `simulate --json`'s disaggregated keys: "disaggregated" (the deployment: each pool's workers,
/// GPU, TP, expert layout, engine and KV capacity, the link), "pools" ({"prefill", "decode"}: each
/// pool's [`capsim::metrics::PoolSummary`]) and "kv_transfer_s" (Stats of each request's transfer,
/// the wait for the link included, with "max").
pub fn insert_json(
    obj: &mut serde_json::Map<String, serde_json::Value>,
    d: &Disaggregated,
    r: &capsim::sim::DisaggReport,
) {
    use serde_json::json;
    obj.insert("disaggregated".into(), deployment_json(d));
    let (pre, dec) = pools(r);
    obj.insert("pools".into(), json!({"prefill": pre, "decode": dec}));
    let mut t = r.kv_transfer_s.clone();
    let max = t.iter().copied().fold(f64::NAN, f64::max);
    let mut v = serde_json::to_value(capsim::metrics::Stats::of(&mut t)).expect("stats serialize");
    v.as_object_mut().expect("object").insert("max".into(), json!(max));
    obj.insert("kv_transfer_s".into(), v);
}

fn pools(r: &capsim::sim::DisaggReport) -> (capsim::metrics::PoolSummary, capsim::metrics::PoolSummary) {
    (capsim::metrics::pool_summary(&r.prefill, r.end_ns), capsim::metrics::pool_summary(&r.decode, r.end_ns))
}

/// The table's lines for a disaggregated run: the deployment and each pool's figures. `cache`: the
/// run reports a prefix cache or a host tier, which are the prefill pool's (said so).
pub fn pools_text(d: &Disaggregated, r: &capsim::sim::DisaggReport, cache: bool) -> String {
    use capsim::report::num;
    let mut t = r.kv_transfer_s.clone();
    let ts = capsim::metrics::Stats::of(&mut t);
    let mut out = format!(
        "disaggregated: {} GPUs, {} routing; KV link {} GB/s per GPU + {} ms per transfer ({}); {} bytes of KV per prompt token on each GPU of the busier end (a prefill GPU sends {}, a decode GPU receives {})\n",
        d.gpus(),
        d.routing.as_str(),
        num(d.link.bw_bytes_s / 1e9, 4),
        num(d.link.latency_s * 1e3, 3),
        d.link.source,
        d.link.bytes_per_token_per_gpu,
        d.link.bytes_per_token_per_prefill_gpu,
        d.link.bytes_per_token_per_decode_gpu
    );
    let (pre, dec) = pools(r);
    for (name, p, s, workers) in
        [("prefill", &d.prefill, &pre, d.prefill_workers), ("decode", &d.decode, &dec, d.decode_workers)]
    {
        out.push_str(&format!(
            "  {name:<8}{workers} x {} {}{} {}: KV {} tokens; busy {:.1}%, queue wait mean {} s (max {} s, {} waiting at most), KV mean / max {:.1}% / {:.1}%, preemptions {}\n",
            p.gpu.name,
            layout(p),
            if p.expert_parallel { " EP" } else { "" },
            p.engine.kind.as_str(),
            p.engine.kv_capacity_tokens,
            s.utilization * 100.0,
            num(s.queue_wait_s.mean, 4),
            num(s.queue_wait_s_max, 4),
            s.max_waiting,
            s.kv_util_mean * 100.0,
            s.kv_util_max * 100.0,
            s.preemptions
        ));
    }
    out.push_str(&format!(
        "  KV transfer s: mean {}, p50 {}, p99 {}\n",
        num(ts.mean, 4),
        num(ts.p50, 4),
        num(ts.p99, 4)
    ));
    if cache {
        out.push_str(&format!(
            "  prefix cache and host tier below: the prefill pool's ({} blocks evicted there; decode workers receive each prompt's KV and keep no prefix cache)\n",
            pre.prefix_evictions
        ));
    }
    out
}

/// A `capacity --disaggregated` question ready to run: every input checked, the pools' shapes
/// resolved (the command line's and a batch line's alike).
pub struct PdPrepared {
    pub q: capsim::capacity::Question,
    /// The pools' profiles and router (worker counts 1: they are searched).
    pub base: Disaggregated,
    pub rate: f64,
    pub max_workers: u32,
    /// `--requests-per-replica`: requests per worker of a split's run.
    pub requests_per_worker: Option<u64>,
    pub gpu_price_per_hour: Option<f64>,
}

/// Check a `capacity --disaggregated` question. Flags of the aggregated search that this one has no
/// use for are refused, naming them, rather than ignored.
pub fn prepare_capacity(a: &super::capacity::CapacityArgs) -> Result<PdPrepared> {
    let rate = a.target_rate.ok_or_else(|| {
        Error::flag("--disaggregated", "sizes the pools for an open-loop rate: give --target-rate R (requests/s)")
    })?;
    if !(rate.is_finite() && rate > 0.0 && rate <= capsim::workload::MAX_RATE_PER_S) {
        return Err(Error::flag(
            "--target-rate",
            format!("must be a positive rate up to 1e6, got {}", capsim::error::fmt_num(rate)),
        ));
    }
    let not_searched = "not with --disaggregated: the split search simulates each split at --target-rate \
        (one run of --seed), searching worker counts up to --max-replicas per pool, not a load";
    for (flag, given, why) in [
        ("--gpus", a.gpus.is_some(), "not with --disaggregated"),
        ("--svg", a.svg.is_some(), "not with --disaggregated"),
        ("--csv", a.csv, "not with --disaggregated"),
        ("--jsonl", a.scale_out.jsonl, "not with --disaggregated"),
        ("--shard", a.scale_out.shard.is_some(), "not with --disaggregated"),
        (
            "--routing",
            a.routing.is_some(),
            "not with --disaggregated: the router over the pools' workers is --pd-routing (round-robin, least-outstanding, prefix-aware)",
        ),
    ] {
        if given {
            return Err(Error::flag(flag, why));
        }
    }
    // The worker counts are what is searched: given ones would be ignored, so they are refused.
    for (flag, given) in
        [("--prefill-workers", a.profile.prefill_workers), ("--decode-workers", a.profile.decode_workers)]
    {
        if let Some(n) = given {
            return Err(Error::flag(
                flag,
                format!(
                    "capacity --disaggregated searches the number of prefill and decode workers (up to --max-replicas per pool), so it takes no {flag} (given {n}); leave both out, and state each pool's shape with --prefill-tp, --decode-tp, --prefill-gpu, ...; to run one split, use simulate --prefill-workers P --decode-workers D"
                ),
            ));
        }
    }
    if a.max_replicas == 0 || a.max_replicas > MAX_WORKERS {
        return Err(Error::flag(
            "--max-replicas",
            format!("with --disaggregated: workers per pool, in 1..={MAX_WORKERS}"),
        ));
    }
    super::capacity::refuse_load_search_flags(a, not_searched)?;
    super::capacity::check_price(a)?;
    let q = super::capacity::question(a)?;
    super::capacity::check_requests_per_replica(a, &q)?;
    let catalog = a.profile.catalog()?;
    let mut pa = a.profile.clone();
    // The pools' shapes alone matter here (the worker counts, refused above, are searched).
    pa.prefill_workers = Some(1);
    pa.decode_workers = Some(1);
    let base = pa.disaggregated(&catalog)?.expect("worker counts set");
    let w = q.template.at(capsim::workload::LoadAxis::Rate, rate)?;
    w.check_context(base.decode.arch.max_context, &base.decode.arch.name)?;
    check_pools_fit(&base, &w)?;
    Ok(PdPrepared {
        q,
        base,
        rate,
        max_workers: a.max_replicas,
        requests_per_worker: a.requests_per_replica,
        gpu_price_per_hour: a.gpu_price_per_hour,
    })
}

impl PdPrepared {
    /// The search; `tick` once per simulation.
    pub fn run(&self, tick: &(dyn Fn() + Sync)) -> Result<capsim::capacity::disagg::PdAnswer> {
        capsim::capacity::disagg::size_disaggregated(
            &self.base,
            &self.q,
            self.rate,
            self.max_workers,
            self.requests_per_worker,
            tick,
        )
    }
    /// The cheapest split's served output tokens/s, power at TDP and cost (null without a split;
    /// costs null without --gpu-price-per-hour), under `capacity --json`'s fleet keys.
    fn plan_json(&self, ans: &capsim::capacity::disagg::PdAnswer) -> serde_json::Value {
        let Some(b) = &ans.best else {
            return serde_json::json!({"output_tok_s": null, "power_kw_at_tdp": null, "cost_per_hour": null, "cost_per_million_output_tokens": null});
        };
        let tok_s = super::capacity::served_output_tok_s(&self.q, self.rate);
        let (cost_h, cost_m) = super::capacity::cost_json(self.gpu_price_per_hour, b.gpus, tok_s);
        let (d, pg, dg) = (&self.base, worker_gpus(&self.base.prefill), worker_gpus(&self.base.decode));
        let watts = b.prefill_workers as f64 * pg as f64 * d.prefill.gpu.tdp_w
            + b.decode_workers as f64 * dg as f64 * d.decode.gpu.tdp_w;
        serde_json::json!({
            "output_tok_s": tok_s, "power_kw_at_tdp": watts / 1000.0,
            "cost_per_hour": cost_h, "cost_per_million_output_tokens": cost_m,
        })
    }
    /// What `capacity --disaggregated --json` prints (a batch line's result).
    pub fn json(&self, ans: &capsim::capacity::disagg::PdAnswer) -> serde_json::Value {
        let mut v = serde_json::json!({
            "disaggregated": ans,
            "prefill": pool_layout(&self.base.prefill),
            "decode": pool_layout(&self.base.decode),
            "routing": self.base.routing.as_str(),
            "slos": self.q.slos.iter().map(|s| serde_json::json!({"name": s.name(), "limit": s.limit})).collect::<Vec<_>>(),
            "seed": self.q.seed,
            "requests_per_replica": self.requests_per_worker,
        });
        if let (Some(obj), serde_json::Value::Object(plan)) = (v.as_object_mut(), self.plan_json(ans)) {
            obj.extend(plan);
        }
        v
    }
}

/// `capacity --disaggregated`: the cheapest split meeting the SLOs at --target-rate, its neighbours
/// and every split tried. True when a split meets them.
pub fn capacity(a: &super::capacity::CapacityArgs) -> Result<bool> {
    use capsim::report::{num, table};
    let prep = prepare_capacity(a)?;
    let pb = super::progress_bar(0, "simulations");
    let tick = || pb.inc(1);
    let ans = prep.run(&tick)?;
    pb.finish_and_clear();
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&prep.json(&ans)).expect("json"))?;
        return Ok(ans.best.is_some());
    }
    let (q, base, rate) = (&prep.q, &prep.base, prep.rate);
    let row = |c: &capsim::capacity::disagg::PdCandidate| {
        let mut r = vec![
            c.prefill_workers.to_string(),
            c.decode_workers.to_string(),
            c.gpus.to_string(),
            c.meets_slo.to_string(),
        ];
        r.extend(c.slo_values.iter().map(|(_, v)| num(*v, 4)));
        r.extend([
            format!("{:.2}", c.prefill_utilization),
            format!("{:.2}", c.decode_utilization),
            c.unfinished.to_string(),
        ]);
        r
    };
    let mut headers: Vec<String> = ["prefill", "decode", "gpus", "meets_slo"].map(String::from).to_vec();
    headers.extend(q.slos.iter().map(|s| s.name()));
    headers.extend(["prefill_busy", "decode_busy", "unfinished"].map(String::from));
    let h: Vec<&str> = headers.iter().map(String::as_str).collect();
    outln!(
        "disaggregated at {} requests/s: prefill workers of {} x {} ({}), decode workers of {} x {} ({}); {} routing; KV link {}",
        num(rate, 4),
        worker_gpus(&base.prefill),
        base.prefill.gpu.name,
        layout(&base.prefill),
        worker_gpus(&base.decode),
        base.decode.gpu.name,
        layout(&base.decode),
        base.routing.as_str(),
        base.link.source
    )?;
    match &ans.best {
        Some(b) => {
            outln!("cheapest: {} prefill + {} decode workers = {} GPUs", b.prefill_workers, b.decode_workers, b.gpus)?;
            let plan = prep.plan_json(&ans);
            let f = |k: &str| plan[k].as_f64().map_or("-".into(), |v| num(v, 4));
            let cost = match prep.gpu_price_per_hour {
                Some(_) => {
                    format!(
                        "; cost {} per hour, {} per million output tokens",
                        f("cost_per_hour"),
                        f("cost_per_million_output_tokens")
                    )
                }
                None => String::new(),
            };
            outln!("serves {} output tokens/s; {} kW at TDP{cost}", f("output_tok_s"), f("power_kw_at_tdp"))?;
            outln!("\nit and its neighbours (one worker fewer or more in a pool):")?;
            let rows: Vec<Vec<String>> = std::iter::once(b).chain(ans.neighbours.iter()).map(row).collect();
            out!("{}", table(&h, &rows))?;
        }
        None => outln!("no split up to {} workers per pool meets the SLOs", prep.max_workers)?,
    }
    outln!("\nevery split tried:")?;
    out!("{}", table(&h, &ans.tried.iter().map(row).collect::<Vec<_>>()))?;
    Ok(ans.best.is_some())
}

/// `explain`'s KV transfer of one prompt of `tokens` tokens (JSON "kv_transfer": link path,
/// bandwidth per GPU, latency, bytes each prefill GPU sends and each decode GPU receives, seconds).
pub fn transfer_json(d: &Disaggregated, tokens: u32) -> serde_json::Value {
    let (sent, received) = d.bytes_per_gpu(tokens);
    serde_json::json!({
        "prompt_tokens": tokens,
        "link": d.link,
        "bytes_per_prefill_gpu": sent,
        "bytes_per_decode_gpu": received,
        "transfer_s": d.transfer_s(tokens),
        "handover_s": d.handover_s,
    })
}

/// `explain`'s lines for the KV transfer of one prompt of `tokens` tokens, after the step of a
/// `pool` ("prefill" or "decode") worker.
pub fn transfer_text(d: &Disaggregated, pool: &str, tokens: u32) -> String {
    use capsim::report::num;
    let (sent, received) = d.bytes_per_gpu(tokens);
    format!(
        "KV transfer (disaggregated: {} prefill workers on {} {}, {} decode workers on {} {}; the step above is a {pool} worker's): a {tokens}-token prompt's KV leaves each prefill GPU as {} MB and reaches each decode GPU as {} MB, every GPU over its own link at once, in {} ms = {} ms latency + {} MB (the busier end) / {} GB/s ({:?}: {}); it adds to that request's TTFT, not to any step\n",
        d.prefill_workers,
        d.prefill.gpu.name,
        layout(&d.prefill),
        d.decode_workers,
        d.decode.gpu.name,
        layout(&d.decode),
        num(sent / 1e6, 4),
        num(received / 1e6, 4),
        num(d.transfer_s(tokens) * 1e3, 4),
        num(d.link.latency_s * 1e3, 3),
        num(sent.max(received) / 1e6, 4),
        num(d.link.bw_bytes_s / 1e9, 4),
        d.link.path,
        d.link.source
    ) + &format!(
        "hand-over before it: {} ms per request ({}: the router's hop, the decode worker's KV allocation and the connector's handshake, learned per engine on the corpus's disaggregated TTFTs at low load, calibrate/handover.rs); it adds to that request's TTFT, not to any step\n",
        num(d.handover_s * 1e3, 4),
        d.prefill.engine.kind.as_str()
    )
}
