//! `capsim explain`: one engine step of a given batch broken into its parts, so a user can see why a
//! deployment is slow and check the physics by hand (sim::StepModel::parts, the formula the
//! simulator itself sums).

use super::ProfileArgs;
use capsim::error::{Error, Result};
use capsim::report::{num, table};
use capsim::sim::{add_draft_prompt, add_verification, BatchShape, DraftShape, StepModel};
use clap::Args;
use serde_json::json;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    #[command(flatten)]
    pub deployment: ProfileArgs,
    /// Sequences decoding in the step (one token each).
    #[arg(long, default_value_t = 32)]
    pub decode: u32,
    /// Context (tokens already in the KV cache) of each decoding sequence.
    #[arg(long, default_value_t = 4096)]
    pub context: u32,
    /// Tokens of one prompt chunk prefilled in the same step (0: a decode-only step).
    #[arg(long, default_value_t = 0)]
    pub prefill: u32,
    /// Position where that chunk starts (tokens of the prompt already prefilled).
    #[arg(long, default_value_t = 0)]
    pub prefill_start: u32,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Deployment flags that change what the scheduler does between steps and nothing of a step's
/// parts (sim/vllm.rs, sglang.rs, trtllm.rs, prefix.rs). A cached prefix is explained by
/// --prefill-start; --kv-offload-gb is explained (its host tier's load of that prefix).
const SCHEDULING_ONLY: [&str; 8] = [
    "--prefix-caching",
    "--ignore-eos",
    "--watermark",
    "--reserve-full-prompt",
    "--capacity-scheduler-policy",
    "--new-token-ratio-init",
    "--new-token-ratio-min",
    "--new-token-ratio-decay-steps",
];

pub fn run(a: ExplainArgs) -> Result<()> {
    if a.decode == 0 && a.prefill == 0 {
        return Err(Error::flag("--decode", "the step is empty: give --decode N or --prefill N"));
    }
    let catalog = a.deployment.catalog()?;
    // Flags that act on scheduling across steps (what is admitted, kept, evicted or cached), not on
    // the time of the one step explained: said, not silently taken.
    for flag in a.deployment.given_flags() {
        if SCHEDULING_ONLY.contains(&flag) {
            eprintln!(
                "note: {flag} acts on scheduling across steps (admission, eviction, caching), not on one step's time: `capsim simulate` shows its effect"
            );
        }
    }
    // A disaggregated deployment: a step of prompt chunks alone (--decode 0) is a prefill worker's,
    // on the prefill pool's layout and GPU (--prefill-tp, --prefill-gpu, ...); a step with decodes
    // is a decode worker's; the KV transfer between them beside it. explain showed the decode
    // worker's step for both, so --prefill-* went unused for a prefill step.
    let pd = a.deployment.disaggregated(&catalog)?;
    let (p, pool) = match &pd {
        Some(d) if a.decode == 0 => (d.prefill.clone(), Some("prefill")),
        Some(d) => (d.decode.clone(), Some("decode")),
        None => (a.deployment.resolve(&catalog)?, None),
    };
    // A decode worker of a disaggregated deployment takes its requests' KV from the prefill pool and
    // computes no prompt chunk (sim/disagg.rs): a step of both is no step of this deployment.
    if pool == Some("decode") && a.prefill > 0 {
        return Err(Error::flag(
            "--prefill",
            format!(
                "a decode worker of a disaggregated deployment computes no prompt chunk (its prompts' KV comes from the prefill pool); ask about the prefill worker's step with --decode 0 --prefill {}, or about the decode worker's with --prefill 0",
                a.prefill
            ),
        ));
    }
    // --prefill-start places a chunk, or the cached prefix a host KV tier loads; alone it says nothing.
    if a.prefill_start > 0 && a.prefill == 0 && p.engine.kv_offload.is_none() {
        return Err(Error::flag(
            "--prefill-start",
            "places a prompt chunk (--prefill N) or the prefix a host KV tier loads (--kv-offload-gb); with neither it changes nothing",
        ));
    }
    // A step holds at most the engine's running-sequence cap and contexts within the model's window
    // (counted in 64 bits: --decode 4294967295 plus a prefill is not 0 sequences).
    let seqs = a.decode as u64 + u64::from(a.prefill > 0);
    if seqs > p.engine.max_num_seqs as u64 {
        return Err(Error::flag(
            "--decode",
            format!(
                "{seqs} sequences in one step exceed the engine's cap (max_num_seqs {}); raise --max-num-seqs to ask about a larger batch",
                p.engine.max_num_seqs
            ),
        ));
    }
    // A chunk is part of one request's prompt (the per-request bound of every workload), so the
    // step's token count stays far inside 32 bits.
    let max_request = capsim::workload::MAX_REQUEST_TOKENS;
    if a.prefill > max_request {
        return Err(Error::flag(
            "--prefill",
            format!("a {}-token chunk exceeds capsim's bound of {max_request} tokens per request", a.prefill),
        ));
    }
    let max_ctx = p.arch.max_context;
    if a.context as u64 > max_ctx {
        return Err(Error::flag(
            "--context",
            format!("contexts must stay within {}'s {max_ctx}-token window, got {}", p.arch.name, a.context),
        ));
    }
    if a.prefill_start as u64 + a.prefill as u64 > max_ctx {
        let flag = if a.prefill_start > 0 { "--prefill-start" } else { "--prefill" };
        return Err(Error::flag(
            flag,
            format!(
                "the chunk ends at position {} (--prefill-start {} + --prefill {}), past {}'s {max_ctx}-token window",
                a.prefill_start as u64 + a.prefill as u64,
                a.prefill_start,
                a.prefill,
                p.arch.name
            ),
        ));
    }
    let kv_tokens = a.decode as u64 * (a.context as u64 + 1) + a.prefill_start as u64 + a.prefill as u64;
    if kv_tokens > p.engine.kv_capacity_tokens {
        return Err(Error::flag(
            "--decode",
            format!(
                "the batch holds {kv_tokens} tokens of KV, more than the cache's {} on this deployment",
                p.engine.kv_capacity_tokens
            ),
        ));
    }
    // Speculative decoding: each decoding sequence verifies its K drafts (K + 1 query tokens) and the
    // draft runs after the step; the shape is built as the simulator builds it: the scheduler's
    // decodes and chunk, then each decode's verification (sim/spec.rs `add_verification`, the
    // function `spec_verify` calls, in its order, so the sums agree to the bit). `plain` is
    // the same step without speculation.
    let spec = p.speculative().cloned();
    let k = spec.as_ref().map_or(0, |s| s.tokens);
    let shape = |k: Option<u32>| {
        let (mut b, mut d) = (BatchShape::default(), DraftShape::default());
        for _ in 0..a.decode {
            b.add_chunk(a.context, 1);
        }
        if a.prefill > 0 {
            b.add_chunk(a.prefill_start, a.prefill);
        }
        if let Some(k) = k {
            // spec_verify's order: the decodes' verifications, and the chunk the draft runs over too.
            for _ in 0..a.decode {
                add_verification(&mut b, &mut d, a.context, k);
            }
            if a.prefill > 0 {
                add_draft_prompt(&mut d, a.prefill_start, a.prefill);
            }
        }
        (b, d)
    };
    let (b, draft) = shape(spec.as_ref().map(|_| k));
    let model = StepModel::new(&p);
    let parts = model.parts_spec(&b, &draft);
    let plain = model.parts(&shape(None).0);
    // Tokens the step emits: each decode's expected accepted run plus one, the chunk's one if it ends.
    let emitted = a.decode as f64 * spec.as_ref().map_or(1.0, |s| s.expected_tokens(k));
    let ms = |s: f64| s * 1e3;
    let hidden = parts.memory_s.min(parts.compute_s) * (1.0 - parts.exposed);
    let bound = if parts.memory_s >= parts.compute_s { "memory" } else { "compute" };
    // sim/run.rs RecvSkipper: new requests are taken once every N decode steps, half of them on average.
    let recv_wait_s = p.engine.recv_interval as f64 * parts.total_s / 2.0;
    if a.json {
        let v = json!({
            "profile": p.name(),
            "retargeted_from": p.retargeted_from,
            "caveats": p.caveats(),
            "batch": {"sequences": b.n_seqs, "tokens": b.n_tokens, "kv_read_tokens": b.kv_read_tokens, "attention_pairs": b.attn_pairs},
            "parts_s": parts,
            "bound": bound,
            "hidden_s": hidden,
            "host": host_json(&p, &parts, a.decode),
        });
        let mut v = v;
        if p.parallel.pipeline_parallel > 1 {
            let (pp, l) = (p.parallel.pipeline_parallel, p.arch.n_layers);
            v["pipeline"] = json!({
                "stages": pp,
                "layers": l,
                "largest_stage_layers": l.div_ceil(pp),
                "stage_imbalance": p.parallel.stage_imbalance(&p.arch),
            });
        }
        if parts.all_to_all_s > 0.0 {
            // Of `all_to_all_s`: the fixed time of each exchange between attention-DP ranks.
            v["exchange_latency_s"] = json!(p.rank_exchange_latency_s());
        }
        if let Some(s) = &spec {
            v["speculative"] = json!({
                "method": s.method.as_str(),
                "tokens": s.tokens,
                "accept_rate": s.accept_rate,
                "expected_tokens_per_sequence": s.expected_tokens(k),
                "verification_s": parts.total_s - parts.draft_s - plain.total_s,
                "draft_s": parts.draft_s,
                "plain_step_s": plain.total_s,
                "decode_tok_s": emitted / parts.total_s,
                "plain_decode_tok_s": a.decode as f64 / plain.total_s,
            });
        }
        if let Some(k) = &p.engine.kv_offload {
            v["kv_offload"] = offload_json(k, p.engine.block_size_tokens, a.prefill_start);
        }
        if p.engine.recv_interval > 1 {
            v["scheduler_recv_interval"] = json!({"interval": p.engine.recv_interval, "mean_wait_s": recv_wait_s});
        }
        if let Some(d) = &pd {
            v["kv_transfer"] = super::disagg::transfer_json(d, a.context.max(a.prefill_start + a.prefill));
            v["pool"] = json!(pool);
        }
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return Ok(());
    }
    outln!("profile: {}{}", p.name(), super::simulate::extrapolation_note(&p))?;
    if let (Some(d), Some(pool)) = (&pd, pool) {
        let (workers, why) = match pool {
            "prefill" => (d.prefill_workers, "a step of prompt chunks alone (--decode 0)"),
            _ => (d.decode_workers, "a step with decodes (--decode 0 shows a prefill worker's)"),
        };
        outln!("pool: a {pool} worker's step, one of {workers}: {why}")?;
    }
    outln!(
        "step: {} sequences, {} tokens ({} decoding at context {}{}), {} x {} (TP {}{})",
        b.n_seqs,
        b.n_tokens,
        a.decode,
        a.context,
        if a.prefill > 0 {
            format!(", a {}-token prefill chunk from position {}", a.prefill, a.prefill_start)
        } else {
            String::new()
        },
        p.tensor_parallel,
        p.gpu.name,
        p.tensor_parallel,
        if p.expert_parallel { ", experts parallel" } else { "" },
    )?;
    outln!()?;
    let par = &p.parallel;
    if par.is_large(p.tensor_parallel) {
        outln!(
            "layout: {} attention DP rank(s) of {} GPU(s), experts over {} GPU(s) (each split over {}), {} pipeline stage(s): {} GPUs; a rank computes its share of each step, ceil(sequences / ranks) (balanced ranks)",
            par.attention_dp,
            par.attention_tp(p.tensor_parallel),
            par.expert_parallel_size,
            par.moe_tp(p.tensor_parallel),
            par.pipeline_parallel,
            par.gpus(p.tensor_parallel)
        )?;
    }
    let imbalance = par.stage_imbalance(&p.arch);
    if imbalance > 1.0 {
        let (pp, l) = (par.pipeline_parallel, p.arch.n_layers);
        outln!(
            "stages: {pp} stages do not divide {l} layers; the largest holds {} (x{imbalance:.4} the mean): with every stage busy it sets the period, and its share of the weights and KV sets the KV capacity (vLLM and SGLang split the remainder one layer per stage)",
            l.div_ceil(pp)
        )?;
    }
    if par.redundant_experts > 0 {
        let n = p.arch.moe.as_ref().map_or(0, |m| m.n_experts);
        let ep = par.expert_parallel_size.max(1);
        outln!(
            "redundant experts: {} copies beside the {n} routed experts, {} slots per GPU of the EP group of {ep} (their weights take memory; a touched expert's copies read its weights too: weights read x (n + copies) / n for the experts)",
            par.redundant_experts,
            (n + par.redundant_experts) / ep
        )?;
    }
    let c = &p.coefficients;
    let mut rows = vec![
        vec![
            "weights read".into(),
            num(ms(parts.weights_s), 4),
            format!("at {:.2} TB/s x {} GPUs", c.bandwidth_eff_bytes_s / 1e12, p.tensor_parallel),
        ],
        vec!["KV read".into(), num(ms(parts.kv_s), 4), format!("{} tokens of context", b.kv_read_tokens)],
        vec!["state read".into(), num(ms(parts.state_s), 4), "linear-attention state, sliding windows".into()],
        vec!["= memory".into(), num(ms(parts.memory_s), 4), String::new()],
        vec![
            "dense matmuls".into(),
            num(ms(parts.dense_matmul_s), 4),
            format!("at {:.0} TFLOP/s per GPU", c.matmul_flops_eff_s / 1e12),
        ],
        vec![
            "expert matmuls".into(),
            num(ms(parts.expert_matmul_s), 4),
            if p.arch.moe.is_some() {
                format!("grouped GEMMs at {:.2} x dense", c.grouped_gemm_rel)
            } else {
                "no experts".into()
            },
        ],
        vec!["LM head".into(), num(ms(parts.lm_head_s), 4), "once per sequence".into()],
        vec![
            "attention".into(),
            num(ms(parts.attention_s), 4),
            format!("at {:.0} TFLOP/s per GPU", c.attention_flops_eff_s / 1e12),
        ],
        vec!["= compute".into(), num(ms(parts.compute_s), 4), String::new()],
        vec![
            "hidden by overlap".into(),
            num(-ms(hidden), 4),
            format!("{bound}-bound; {:.0}% of the smaller part overlaps", (1.0 - parts.exposed) * 100.0),
        ],
        vec![
            "communication".into(),
            num(ms(parts.communication_s), 4),
            if p.tensor_parallel > 1 {
                format!("{:?} at {} GB/s per direction", p.gpu.link, p.gpu.link_bw_gb_s)
            } else {
                "one GPU".into()
            },
        ],
    ];
    if parts.all_to_all_s > 0.0 {
        rows.push(vec![
            "all-to-all across DP ranks".into(),
            num(ms(parts.all_to_all_s), 4),
            format!(
                "MoE dispatch + combine over {} GPUs, twice per MoE layer ({} GPUs per expert){}",
                p.tensor_parallel,
                par.moe_tp(p.tensor_parallel),
                if p.rank_exchange_latency_s() > 0.0 {
                    format!(
                        "; {:.1} us fixed per exchange between ranks (learned on the corpus's attention-DP deployments)",
                        p.rank_exchange_latency_s() * 1e6
                    )
                } else {
                    String::new()
                }
            ),
        ]);
    }
    if par.pipeline_parallel > 1 {
        rows.push(vec![
            "pipeline sends".into(),
            num(ms(parts.pipeline_s), 4),
            format!(
                "{} stages: activations sent {} times per micro-batch; {} micro-batches in flight",
                par.pipeline_parallel,
                par.pipeline_parallel - 1,
                par.pipeline_parallel
            ),
        ]);
    }
    rows.extend([
        vec![
            "host: step overhead".into(),
            num(ms(parts.overhead_s), 4),
            match p.arch.n_moe_layers() {
                0 => format!("scheduler CPU time and kernel launches per step ({} layers)", p.arch.n_layers),
                m => format!(
                    "scheduler CPU time and kernel launches per step ({} layers, {m} of them MoE: routing, top-k, permutation, grouped-GEMM launches)",
                    p.arch.n_layers
                ),
            },
        ],
        vec![
            "host: prefill step".into(),
            num(ms(parts.prefill_overhead_s), 4),
            if parts.prefill_overhead_s > 0.0 {
                format!(
                    "a step with a prompt chunk: eager kernels outside the decode's CUDA graphs{}",
                    if p.arch.moe.is_some() { ", MoE dispatch's host synchronization" } else { "" }
                )
            } else if c.prefill_step_overhead_s > 0.0 {
                "none: no prompt chunk in this step".into()
            } else {
                "not modelled by this profile".into()
            },
        ],
        vec![
            "host: per sequence".into(),
            num(ms(parts.per_seq_s), 4),
            format!("{} sequences: scheduling, sampling, detokenizing and streaming each token", b.n_seqs),
        ],
    ]);
    if let Some(s) = &spec {
        rows.push(vec![
            "draft".into(),
            num(ms(parts.draft_s), 4),
            match s.method {
                capsim::profile::SpecMethod::Ngram => format!("{} sequences' n-gram lookups on the host", a.decode),
                m => {
                    let head = if m == capsim::profile::SpecMethod::Mtp { "MTP layer" } else { "EAGLE head" };
                    let decodes =
                        format!("{k} sequential passes of the {head} and LM head over {} sequences", a.decode);
                    let prompt = format!("one pass of the {head} over the chunk's {} prompt tokens", a.prefill);
                    match (a.decode > 0, a.prefill > 0) {
                        (true, true) => format!("{decodes}, and {prompt}"),
                        (false, true) => prompt,
                        _ => decodes,
                    }
                }
            },
        ]);
    }
    rows.push(vec![
        "= step".into(),
        num(ms(parts.total_s), 4),
        format!("{:.1} tokens/s", b.n_tokens as f64 / parts.total_s),
    ]);
    if let Some(s) = &spec {
        rows.push(vec![
            "of which verification".into(),
            num(ms(parts.total_s - parts.draft_s - plain.total_s), 4),
            format!("{} drafted tokens of each of {} decodes verified in the step", k, a.decode),
        ]);
        rows.push(vec![
            "plain step".into(),
            num(ms(plain.total_s), 4),
            format!("the same step without speculation: {:.1} decode tokens/s", a.decode as f64 / plain.total_s),
        ]);
        rows.push(vec![
            "= decode tokens/s".into(),
            format!("{:.1}", emitted / parts.total_s),
            format!(
                "{:.3} tokens per sequence and step at acceptance {}",
                s.expected_tokens(k),
                s.accept_rate.iter().map(|x| format!("{x}")).collect::<Vec<_>>().join(",")
            ),
        ]);
    }
    out!("{}", table(&["part", "ms", "how"], &rows))?;
    // The host's costs outside the step: each request's, once (they add to its TTFT, not to any step).
    outln!()?;
    outln!(
        "per request, outside the step: API server {} ms (tokenization, admission, first-token streaming); \
         front-end serial stage {} ms; async scheduling overlap: {ASYNC_OVERLAP}",
        num(c.request_overhead_s * 1e3, 3),
        num(c.frontend_serial_s * 1e3, 3)
    )?;
    if c.api_per_token_s > 0.0 && parts.total_s > 0.0 {
        // The API server streams every running sequence's token each step; a request's own API
        // time gets what that leaves (sim/run.rs, Replica::accept).
        let every = p.engine.stream_interval;
        let busy = capsim::profile::api_busy_share(p.api_per_streamed_token_s(), a.decode as f64, parts.total_s);
        outln!(
            "API server per streamed token (detokenization, SSE): {} us{}; streaming this step's {} tokens every {} ms keeps it {}% busy, so a request arriving now spends {} ms in it",
            num(c.api_per_token_s * 1e6, 3),
            if every > 1 { format!(", paid once per {every} tokens (--stream-interval)") } else { String::new() },
            a.decode,
            num(parts.total_s * 1e3, 4),
            num(busy * 100.0, 3),
            num(c.request_overhead_s / (1.0 - busy) * 1e3, 3)
        )?;
    }
    if p.engine.recv_interval > 1 && parts.total_s > 0.0 {
        outln!(
            "scheduler receive interval: SGLang takes new requests once every {} decode steps (--scheduler-recv-interval); one arriving under steps like this waits about {} ms before it is scheduled",
            p.engine.recv_interval,
            num(recv_wait_s * 1e3, 3)
        )?;
    }
    if let Some(k) = &p.engine.kv_offload {
        let block = p.engine.block_size_tokens;
        let blocks = (a.prefill_start / block) as u64;
        outln!(
            "KV offload: {} GB of host memory, {} blocks of {} tokens ({} MB each, TP {}); \
             loads over {} at {} GB/s per GPU ({} GB/s x {}): {} ms per block",
            num(k.host_bytes / 1e9, 4),
            k.host_blocks,
            block,
            num(k.block_bytes / 1e6, 4),
            p.tensor_parallel,
            k.link.as_str(),
            num(k.effective_bytes_s / 1e9, 4),
            num(k.link_bytes_s / 1e9, 4),
            k.link.share(),
            num(k.load_ns(1) as f64 * 1e-6, 4),
        )?;
        // The same tokens computed instead: prefill chunks of the step budget, alone on the engine.
        let (model, end, budget) = (StepModel::new(&p), blocks as u32 * block, p.engine.max_num_batched_tokens);
        let (mut pos, mut compute_s) = (0u32, 0.0);
        while pos < end {
            let n = budget.min(end - pos);
            let mut c = BatchShape::default();
            c.add_chunk(pos, n);
            compute_s += model.parts(&c).total_s;
            pos += n;
        }
        outln!(
            "  a prompt whose first {} tokens ({} blocks, --prefill-start) are in host memory waits {} ms for them \
             before its first step (no step waits: vLLM loads asynchronously); computing them alone takes {} ms of prefill steps",
            end,
            blocks,
            num(k.load_ns(blocks) as f64 * 1e-6, 4),
            num(compute_s * 1e3, 4),
        )?;
        outln!("  host link: {}", k.link_source)?;
    }
    if let Some(d) = &pd {
        let pool = pool.unwrap_or("decode");
        out!("{}", super::disagg::transfer_text(d, pool, a.context.max(a.prefill_start + a.prefill)))?;
    }
    outln!("coefficients from: {}", p.retarget_method.as_deref().unwrap_or(&p.file.provenance.method))?;
    Ok(())
}

/// What explain says of the overlap async scheduling gives (vLLM's --async-scheduling, SGLang's and
/// TensorRT-LLM's overlap schedulers): it is not a part of its own. Each engine's step overhead is
/// learned from that engine's measurements under its own default scheduler, so whatever overlap the
/// engine had there is already out of the learned value; the corpus has no runs with it switched
/// off, so it cannot be split out.
const ASYNC_OVERLAP: &str = "not a part of its own: each engine's step overhead is learned from its \
measurements under its default scheduler, so the overlap it had there is inside the learned value";

/// The host's costs, for `--json`: each request's, once (API server, front-end serial stage), the
/// API server's per streamed token and the share of it this step keeps busy, the scheduler's per step
/// and per sequence (also in `parts_s` as `overhead_s` and `per_seq_s`).
fn host_json(p: &capsim::profile::Profile, parts: &capsim::sim::step::StepParts, decodes: u32) -> serde_json::Value {
    let c = &p.coefficients;
    let busy = if parts.total_s > 0.0 {
        capsim::profile::api_busy_share(p.api_per_streamed_token_s(), decodes as f64, parts.total_s)
    } else {
        0.0
    };
    json!({
        "request_overhead_s": c.request_overhead_s,
        "frontend_serial_s": c.frontend_serial_s,
        "api_per_token_s": c.api_per_token_s,
        "stream_interval": p.engine.stream_interval,
        "api_busy_share": busy,
        "request_api_s_now": c.request_overhead_s / (1.0 - busy),
        "step_overhead_s": parts.overhead_s,
        "per_seq_s": parts.per_seq_s,
        "async_scheduling_overlap": ASYNC_OVERLAP,
    })
}

/// The host-load part of a step's request, for `--json`.
fn offload_json(k: &capsim::profile::offload::KvOffload, block: u32, prefill_start: u32) -> serde_json::Value {
    let blocks = (prefill_start / block) as u64;
    json!({
        "host_bytes": k.host_bytes,
        "host_blocks": k.host_blocks,
        "block_bytes": k.block_bytes,
        "link": k.link,
        "link_bytes_s": k.link_bytes_s,
        "effective_bytes_s": k.effective_bytes_s,
        "load_s_per_block": k.load_ns(1) as f64 * 1e-9,
        "prefix_blocks": blocks,
        "prefix_load_s": k.load_ns(blocks) as f64 * 1e-9,
        "link_source": k.link_source,
    })
}
