//! Issue 25, disaggregated prefill/decode: runs computed by hand on constant-step profiles, each
//! pool's queue and KV apart, bad flags named, determinism, and capacity --disaggregated.

use super::const_profile;
use capsim::profile::disagg::{Disaggregated, LinkPath, KV_TRANSFER_LATENCY_S};
use capsim::sim::{simulate_disaggregated, SimOptions};
use capsim::units::SimTime;
use capsim::workload::{Arrivals, Workload};
use std::process::{Command, Output};

fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap()
}

/// `capsim ARGS` that must succeed, its JSON output.
fn capsim_json(args: &[&str]) -> serde_json::Value {
    let o = capsim(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn burst(n: u32, input: u32, output: u32) -> Workload {
    Workload::fixed(Arrivals::Burst { n }, input, output, None).unwrap()
}

const STEP_S: f64 = 0.01;

/// One request: prefill one step on the prefill worker (first token there at T), KV over NVLink
/// (two H200 GPUs in one 8-GPU node: 450 GB/s) in latency + 1000 tokens x 98,304 bytes (Qwen3-30B-A3B:
/// 2 x 48 layers x 4 KV heads x 128 x 2 bytes) / 450e9, then the decode worker's first step gives
/// the client's first token: TTFT = 2T + transfer; each further token one step.
#[test]
fn one_request_by_hand() {
    let p = const_profile("vllm", STEP_S, "");
    let d = Disaggregated::new(p.clone(), p, 1, 1);
    assert_eq!(d.link.path, LinkPath::ScaleUp);
    assert_eq!(d.link.bw_bytes_s, 450e9);
    assert_eq!(d.link.bytes_per_token_per_gpu, 98_304.0);
    let xfer_s = KV_TRANSFER_LATENCY_S + 1000.0 * 98_304.0 / 450e9;
    assert!((d.transfer_s(1000) - xfer_s).abs() < 1e-15);
    let out = simulate_disaggregated(&d, &burst(1, 1000, 10), 0, SimOptions::default());
    assert_eq!(out.records.len(), 1);
    let r = out.records[0];
    let t = SimTime::from_secs(STEP_S).0;
    let xfer_ns = SimTime::from_secs(KV_TRANSFER_LATENCY_S).0 + SimTime::from_secs(1000.0 * 98_304.0 / 450e9).0;
    assert_eq!(r.arrival.0, 0);
    assert_eq!(r.first_token.0, 2 * t + xfer_ns, "TTFT = prefill step + transfer + first decode step");
    assert_eq!(r.finish.0, 11 * t + xfer_ns, "then 9 more steps");
    let rep = out.disagg.as_ref().unwrap();
    assert_eq!(rep.kv_transfer_s.len(), 1);
    assert!((rep.kv_transfer_s[0] - xfer_ns as f64 * 1e-9).abs() < 1e-12);
    assert_eq!(rep.prefill.steps, 1);
    assert_eq!(rep.decode.steps, 10);
    assert_eq!(out.decode_tokens + out.prefill_tokens, 1000 + 10);
}

/// A TensorRT-LLM decode worker's token cap bounds what it computes, not the prompt it receives: the
/// recipes run decode workers at `max_num_tokens` of a few tokens per sequence (NVIDIA srt-slurm
/// ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml: 16 for 8K prompts), and a request arrives there with
/// its prompt's KV computed. The same run as [`one_request_by_hand`] with the decode worker capped
/// at 16 tokens a step: served, nothing rejected, the same times.
#[test]
fn a_decode_worker_takes_prompts_longer_than_its_token_cap() {
    let p = const_profile("trtllm", STEP_S, "max_num_batched_tokens = 2048");
    let capped = const_profile("trtllm", STEP_S, "max_num_batched_tokens = 16\nmax_num_seqs = 16");
    let out = simulate_disaggregated(
        &Disaggregated::new(p.clone(), capped, 1, 1),
        &burst(4, 1000, 10),
        0,
        SimOptions::default(),
    );
    let reference =
        simulate_disaggregated(&Disaggregated::new(p.clone(), p, 1, 1), &burst(4, 1000, 10), 0, SimOptions::default());
    assert_eq!(out.requests_rejected, 0);
    assert_eq!(out.records.len(), 4);
    let times =
        |o: &capsim::sim::SimOutput| o.records.iter().map(|r| (r.first_token.0, r.finish.0)).collect::<Vec<_>>();
    assert_eq!(times(&out), times(&reference));
    // The prefill worker's cap still refuses a prompt it would have to compute whole.
    let small = const_profile("trtllm", STEP_S, "max_num_batched_tokens = 512");
    let refused = simulate_disaggregated(
        &Disaggregated::new(small.clone(), small, 1, 1),
        &burst(1, 1000, 10),
        0,
        SimOptions::default(),
    );
    assert_eq!((refused.requests_rejected, refused.records.len()), (1, 0));
}

/// Across nodes: a prefill pool on H100 SXM and a decode pool on H200 SXM go over the network, 50
/// GB/s per GPU (ConnectX-7 NDR, models/gpus.toml).
#[test]
fn different_gpus_use_the_network() {
    let p = const_profile("vllm", STEP_S, "");
    let mut f = p.file.clone();
    f.gpu.name = "H100 SXM".into();
    let h100 = f.resolve("test", &capsim::catalog::Catalog::builtin()).unwrap();
    let d = Disaggregated::new(h100, p.clone(), 1, 1);
    assert_eq!(d.link.path, LinkPath::Network);
    assert_eq!(d.link.bw_bytes_s, 50e9);
    // Same GPU beyond one 8-GPU node: the network too.
    let d = Disaggregated::new(p.clone(), p, 4, 5);
    assert_eq!(d.link.path, LinkPath::Network);
    assert_eq!(d.gpus(), 9);
}

/// Each pool keeps its own queue and KV: 8 prompts at once on one prefill worker of a 1024-token
/// budget wait k steps each there (mean 3.5 T), while two decode workers with room for two requests
/// each queue and fill their own KV and the prefill worker's stays nearly empty.
#[test]
fn pools_have_their_own_queue_and_kv() {
    let pre = const_profile("vllm", STEP_S, "max_num_batched_tokens = 1024\nkv_capacity_tokens = 100000");
    let dec = const_profile("vllm", STEP_S, "max_num_batched_tokens = 1024\nkv_capacity_tokens = 2400");
    let d = Disaggregated::new(pre, dec, 1, 2);
    let out = simulate_disaggregated(&d, &burst(8, 1024, 100), 3, SimOptions::default());
    assert_eq!(out.records.len(), 8);
    let rep = out.disagg.as_ref().unwrap();
    let mean_wait: f64 = rep.prefill.queue_wait_s.iter().sum::<f64>() / 8.0;
    assert!((mean_wait - 3.5 * STEP_S).abs() < 1e-9, "prefill waits 0..7 steps: {mean_wait}");
    assert_eq!(rep.prefill.max_waiting, 8, "all eight wait before the first step");
    assert!(rep.prefill.kv_util_max < 0.02, "prefill KV: one prompt at a time of 100k");
    assert!(rep.decode.kv_util_max > 0.9, "decode KV full: {}", rep.decode.kv_util_max);
    assert!(rep.decode.queue_wait_s.iter().cloned().fold(0.0, f64::max) > 10.0 * STEP_S, "decode queue");
    assert_eq!(rep.prefill.workers, 1);
    assert_eq!(rep.decode.workers, 2);
    // TTFT includes the transfer and the decode queue.
    for r in &out.records {
        assert!(r.ttft_s() >= 2.0 * STEP_S + KV_TRANSFER_LATENCY_S);
    }
}

fn flags<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["simulate", "--input-len", "512", "--output-len", "32", "--requests", "40", "--rate", "5"];
    v.extend_from_slice(extra);
    v
}

#[test]
fn cli_simulate_reports_pools_and_is_deterministic() {
    let args = flags(&["--prefill-workers", "1", "--decode-workers", "2", "--json", "--seed", "7"]);
    let a = capsim(&args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let b = capsim(&args);
    assert_eq!(a.stdout, b.stdout, "same seed, same bytes");
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    for pool in ["prefill", "decode"] {
        let p = &v["pools"][pool];
        assert!(p["utilization"].as_f64().unwrap() > 0.0, "{pool}");
        assert!(p["queue_wait_s"]["mean"].is_number());
        assert!(p["kv_util_max"].is_number());
        assert!(p["preemptions"].is_number());
    }
    assert_eq!(v["pools"]["decode"]["workers"], 2);
    assert!(v["kv_transfer_s"]["mean"].as_f64().unwrap() > 0.0);
    assert!(v["disaggregated"]["kv_link"]["bw_bytes_s"].is_number());
    let t = capsim(&flags(&["--prefill-workers", "1", "--decode-workers", "2"]));
    assert!(t.status.success());
    let text = String::from_utf8_lossy(&t.stdout);
    assert!(text.contains("KV transfer s"), "{text}");
    assert!(text.contains("prefill ") && text.contains("decode "), "{text}");
}

/// Each pool's own caps (Dynamo's recipes set them apart: one or two requests per prefill rank, the
/// decode worker's batch): reported per pool, and a decode worker capped at 2 running requests
/// queues the other clients there while the prefill worker does not.
#[test]
fn each_pool_takes_its_own_caps() {
    let base = ["--concurrency", "8", "--prefill-workers", "1", "--decode-workers", "1", "--json"];
    let mut args = flags(&base);
    args.retain(|a| *a != "--rate" && *a != "5");
    let capped = [&args[..], &["--decode-max-num-seqs", "2", "--prefill-max-num-batched-tokens", "1024"]].concat();
    let v = capsim_json(&capped);
    let d = &v["disaggregated"];
    assert_eq!(
        (d["decode"]["max_num_seqs"].as_u64(), d["prefill"]["max_num_batched_tokens"].as_u64()),
        (Some(2), Some(1024))
    );
    assert!(d["prefill"]["max_num_seqs"].as_u64().unwrap() > 2, "the prefill pool keeps the shared cap");
    assert!(v["pools"]["decode"]["max_waiting"].as_u64().unwrap() >= 5, "{}", v["pools"]["decode"]);
    let free = capsim_json(&args);
    assert!(free["pools"]["decode"]["max_waiting"].as_u64().unwrap() < 5);
    // Fewer requests decoding at once: each step is shorter.
    assert!(v["tpot_ms"]["mean"].as_f64().unwrap() < free["tpot_ms"]["mean"].as_f64().unwrap());
}

fn refused(extra: &[&str], flag: &str, words: &str) {
    let o = capsim(&flags(extra));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
    assert!(err.contains(flag), "{extra:?} should name {flag}: {err}");
    assert!(err.contains(words), "{extra:?} should say `{words}`: {err}");
}

#[test]
fn bad_values_are_named() {
    refused(&["--prefill-workers", "0", "--decode-workers", "1"], "--prefill-workers", "must be in 1..=");
    refused(&["--prefill-workers", "1"], "--decode-workers", "needs both");
    refused(&["--decode-tp", "2"], "--prefill-workers", "needs both");
    refused(&["--prefill-workers", "1", "--decode-workers", "1", "--decode-tp", "0"], "--decode-tp", "at least 1");
    refused(
        &["--prefill-workers", "1", "--decode-workers", "1", "--decode-attention-dp", "2"],
        "--decode-attention-dp",
        "only 1 GPUs",
    );
    refused(
        &["--prefill-workers", "1", "--decode-workers", "1", "--decode-attention-dp", "0"],
        "--decode-attention-dp",
        "at least 1",
    );
    refused(
        &["--prefill-workers", "1", "--decode-workers", "1", "--prefill-ep", "3"],
        "--prefill-ep",
        "does not divide",
    );
    refused(
        &["--prefill-workers", "1", "--decode-workers", "1", "--decode-tp", "4", "--decode-attention-dp", "3"],
        "--decode-attention-dp",
        "divide",
    );
    refused(&["--prefill-workers", "1", "--decode-workers", "1", "--decode-gpu", "NoSuchGpu"], "--decode-gpu", "");
    refused(
        &["--prefill-workers", "1", "--decode-workers", "1", "--decode-max-num-seqs", "0"],
        "--decode-max-num-seqs",
        "1..=",
    );
    refused(
        &["--prefill-workers", "1", "--decode-workers", "1", "--prefill-max-num-batched-tokens", "0"],
        "--prefill-max-num-batched-tokens",
        "1..=",
    );
    refused(&["--prefill-max-num-seqs", "4"], "--prefill-workers", "needs both");
    // A decode pool with no KV room for one request (prompt 1500 + output 1000 over 2000 tokens):
    // --kv-capacity-tokens states every worker's KV, so the flag named is it, not the pool's TP.
    let kv_room = |args: &str| {
        let o = capsim(&args.split(' ').collect::<Vec<_>>());
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(2), "{err}");
        err
    };
    let pools = "--prefill-workers 1 --decode-workers 1";
    let err = kv_room(&format!(
        "simulate --input-len 1500 --output-len 1000 --requests 4 --rate 1 --kv-capacity-tokens 2000 {pools}"
    ));
    assert!(err.contains("`--kv-capacity-tokens`") && err.contains("no room"), "{err}");
    // Without it, the decode worker's GPUs decide: one L40S holds 153,088 tokens of the default
    // model's KV, short of a 160,000-token prompt and its output.
    let err = kv_room(&format!(
        "simulate --input-len 160000 --output-len 1000 --requests 1 --concurrency 1 {pools} --decode-gpu L40S"
    ));
    assert!(err.contains("`--decode-tp`") && err.contains("no room for one request"), "{err}");
    // Other commands refuse the flags rather than ignore them.
    let o = capsim(&["sweep", "--concurrency", "1,2", "--prefill-workers", "1", "--decode-workers", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--prefill-workers"));
}

/// The split capacity --disaggregated picks meets the SLOs, and each split one worker smaller in a
/// pool does not.
#[test]
fn capacity_picks_a_split_whose_smaller_neighbours_fail() {
    let v = capsim_json(&[
        "capacity",
        "--disaggregated",
        "--target-rate",
        "30",
        "--input-len",
        "4000",
        "--output-len",
        "300",
        "--slo",
        "ttft_p95_s=1.0",
        "--slo",
        "tpot_mean_ms=15",
        "--json",
    ]);
    let best = &v["disaggregated"]["best"];
    assert_eq!(best["meets_slo"], true);
    let (p, d) = (best["prefill_workers"].as_u64().unwrap(), best["decode_workers"].as_u64().unwrap());
    assert!(p + d > 2, "a split beyond 1:1 at this rate: {best}");
    let smaller: Vec<&serde_json::Value> = v["disaggregated"]["neighbours"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["prefill_workers"].as_u64().unwrap() + n["decode_workers"].as_u64().unwrap() < p + d)
        .collect();
    assert!(!smaller.is_empty());
    for n in smaller {
        assert_eq!(n["meets_slo"], false, "a smaller split met the SLOs: {n}");
    }
    // Without a rate it says what it needs.
    let o = capsim(&["capacity", "--disaggregated", "--slo", "ttft_p95_s=1.0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--target-rate"));
}

#[test]
fn explain_shows_the_kv_transfer() {
    let v = capsim_json(&["explain", "--prefill-workers", "1", "--decode-workers", "1", "--context", "1000", "--json"]);
    let t = &v["kv_transfer"];
    let expect = KV_TRANSFER_LATENCY_S
        + 1000.0 * t["link"]["bytes_per_token_per_gpu"].as_f64().unwrap() / t["link"]["bw_bytes_s"].as_f64().unwrap();
    assert!((t["transfer_s"].as_f64().unwrap() - expect).abs() < 1e-12);
    let o = capsim(&["explain", "--prefill-workers", "1", "--decode-workers", "1"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("KV transfer"));
}

/// A closed loop: a decode worker's fast-forward never runs past a request another worker's
/// completion sends its way (each decode queue wait stays within one decode step).
#[test]
fn closed_loop_decode_waits_stay_short() {
    let p = const_profile("vllm", STEP_S, "");
    let d = Disaggregated::new(p.clone(), p, 1, 4);
    let w = Workload::fixed(
        Arrivals::ClosedLoop { clients: 8, think_time_s: 0.0, think_exponential: false },
        500,
        200,
        Some(64),
    )
    .unwrap();
    let fast = simulate_disaggregated(&d, &w, 1, SimOptions::default());
    let slow = simulate_disaggregated(&d, &w, 1, SimOptions { step_by_step: true, ..SimOptions::default() });
    assert_eq!(fast.records, slow.records, "fast-forward equals step by step");
    let max = fast.disagg.as_ref().unwrap().decode.queue_wait_s.iter().cloned().fold(0.0, f64::max);
    assert!(max <= STEP_S + 1e-9, "decode queue wait {max}");
}

/// A pool with its own attention DP (`--decode-attention-dp`): a request's KV lands on one rank, so
/// its tp / N GPUs receive all of it. Qwen3-30B-A3B's 4 KV heads (98,304 bytes per token) over a
/// decode worker of TP 4: 24,576 bytes per GPU without attention DP, the whole 98,304 on the one GPU
/// of a rank with 4 ranks; the transfer by hand from that. The prefill worker (the deployment's TP 1)
/// sends all 98,304 from its one GPU either way, so that end bounds both transfers. The run completes every request with
/// both pools' own layouts (prefill EP 2 over its 2 GPUs with 2 ranks).
#[test]
fn pools_with_their_own_attention_dp() {
    let link = |extra: &[&str]| {
        let mut a = vec!["explain", "--prefill-workers", "1", "--decode-workers", "1", "--decode-tp", "4"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--context", "1000", "--json"]);
        capsim_json(&a)["kv_transfer"].clone()
    };
    let plain = link(&[]);
    assert_eq!(plain["bytes_per_decode_gpu"], 1000.0 * 24_576.0);
    assert_eq!(plain["bytes_per_prefill_gpu"], 1000.0 * 98_304.0);
    assert_eq!(plain["link"]["bytes_per_token_per_gpu"], 98_304.0);
    let t = link(&["--decode-attention-dp", "4"]);
    assert_eq!(t["bytes_per_decode_gpu"], 1000.0 * 98_304.0);
    assert_eq!(t["link"]["bytes_per_token_per_gpu"], 98_304.0);
    let bw = t["link"]["bw_bytes_s"].as_f64().unwrap();
    let expect = KV_TRANSFER_LATENCY_S + 1000.0 * 98_304.0 / bw;
    assert!((t["transfer_s"].as_f64().unwrap() - expect).abs() < 1e-12, "{t}");
    let v = capsim_json(&[
        "simulate",
        "--prefill-workers",
        "1",
        "--prefill-tp",
        "2",
        "--prefill-attention-dp",
        "2",
        "--prefill-ep",
        "2",
        "--decode-workers",
        "1",
        "--decode-tp",
        "4",
        "--decode-attention-dp",
        "4",
        "--input-len",
        "512",
        "--output-len",
        "32",
        "--requests",
        "40",
        "--rate",
        "4",
        "--json",
    ]);
    assert_eq!(v["requests_completed"], 40);
    assert_eq!(v["disaggregated"]["decode"]["attention_dp"], 4);
    assert_eq!(v["disaggregated"]["prefill"]["attention_dp"], 2);
    assert_eq!(v["disaggregated"]["prefill"]["expert_parallel_size"], 2);
}

/// The prefix cache and its host tier live where prompts are computed, the prefill pool; a
/// disaggregated run reports them from there, not from the first decode worker (which keeps none).
/// The trace of large_offload.rs's hand-computed hit (A, then B evicting A's blocks to host memory,
/// then C repeating A) on one prefill worker with that engine: every request's prefill there is the
/// aggregated run's (each has one output token), so the tiers' tallies and the prefix evictions
/// equal that run's, and the prompt tokens loaded from host memory are C's 976 of 4,096.
#[test]
fn offload_and_prefix_figures_come_from_the_prefill_pool() {
    use capsim::metrics::{summarize, RequestSlo};
    use capsim::workload::TraceRecord;
    let rec = |t: f64, input: u32, hash_ids: &[u64]| TraceRecord {
        arrival_s: t,
        input_tokens: input,
        output_tokens: 1,
        hash_ids: hash_ids.to_vec(),
        session: None,
    };
    let off =
        const_profile("vllm", STEP_S, "kv_capacity_tokens = 2080\nmax_num_batched_tokens = 256\nkv_offload_gb = 100");
    let w =
        Workload::trace(vec![rec(0.0, 1024, &[1, 2]), rec(10.0, 2048, &[3, 4, 5, 6]), rec(20.0, 1024, &[1, 2])], 0, 0)
            .unwrap();
    let one = capsim::sim::simulate(&off, &w, 1, SimOptions::default());
    let o1 = one.offload.as_ref().unwrap();
    assert_eq!((o1.loads, o1.host_hits.clone()), (1, vec![(2, 61 * 16)]), "the aggregated run's hit");
    let out = simulate_disaggregated(&Disaggregated::new(off.clone(), off, 1, 2), &w, 1, SimOptions::default());
    assert_eq!(out.records.len(), 3);
    assert_eq!(out.offload.as_ref(), Some(o1), "the prefill worker's tiers");
    assert!(one.prefix_evictions > 0);
    assert_eq!(out.prefix_evictions, one.prefix_evictions);
    let s = summarize(&out, 0, 0, 0.0, &RequestSlo::default());
    let t = s.offload.as_ref().unwrap();
    assert!((t.host_hit_rate - 976.0 / 4096.0).abs() < 1e-12, "{t:?}");
    assert_eq!(t.requests_host_hit, 1);
    assert_eq!(s.prefix_evictions, one.prefix_evictions);
}

/// The KV series of a disaggregated run is the decode pool's: every decode worker's requests, not
/// the first worker's alone. Four requests at once over two decode workers run two on each.
#[test]
fn the_kv_series_covers_every_decode_worker() {
    let p = const_profile("vllm", STEP_S, "");
    let out =
        simulate_disaggregated(&Disaggregated::new(p.clone(), p, 1, 2), &burst(4, 100, 50), 0, SimOptions::default());
    assert_eq!(out.records.len(), 4);
    let most = out.series.iter().map(|s| s.running).max().unwrap();
    assert_eq!(most, 4, "two requests on each of two decode workers");
}

/// Each GPU moves its own share of a prompt's KV over its own link, so the busier end bounds the
/// transfer. Llama-3.1-70B keeps 327,680 bytes of KV per token (bf16: 80 layers x 8 KV heads x 128 x
/// 2 x 2); a prefill worker of TP 2 holds 163,840 of them on each GPU, a decode worker of TP 8
/// 40,960. Ten H100s exceed one 8-GPU node: the network, 50 GB/s per GPU. An 8,192-token prompt
/// takes 1 ms + 8,192 x 163,840 / 50e9 = 27.84 ms whichever way round the pools are, and a run of
/// one request at a time waits exactly that for each transfer.
#[test]
fn the_busier_end_bounds_the_kv_transfer() {
    let base = ["--model", "Llama-3.1-70B", "--gpu", "H100 SXM", "--tp", "4", "--precision", "fp8"];
    let explain = |pre: &str, dec: &str| {
        let mut a = vec!["explain"];
        a.extend_from_slice(&base);
        a.extend_from_slice(&["--prefill-workers", "1", "--decode-workers", "1", "--prefill-tp", pre]);
        a.extend_from_slice(&["--decode-tp", dec, "--decode", "1", "--context", "8192", "--json"]);
        capsim_json(&a)["kv_transfer"].clone()
    };
    let expect = KV_TRANSFER_LATENCY_S + 8192.0 * 163_840.0 / 50e9;
    for (pre, dec) in [("2", "8"), ("8", "2")] {
        let t = explain(pre, dec);
        assert_eq!(t["link"]["bw_bytes_s"], 50e9, "{t}");
        assert_eq!(t["link"]["bytes_per_token_per_gpu"], 163_840.0, "{t}");
        assert!((t["transfer_s"].as_f64().unwrap() - expect).abs() < 1e-12, "{pre}:{dec} {t}");
    }
    let t = explain("2", "8");
    assert_eq!(
        (t["bytes_per_prefill_gpu"].as_f64(), t["bytes_per_decode_gpu"].as_f64()),
        (Some(8192.0 * 163_840.0), Some(8192.0 * 40_960.0))
    );
    let mut a = vec!["simulate"];
    a.extend_from_slice(&base);
    a.extend_from_slice(&["--concurrency", "1", "--requests", "2", "--input-len", "8192", "--prefill-workers", "1"]);
    a.extend_from_slice(&["--decode-workers", "1", "--prefill-tp", "2", "--decode-tp", "8", "--json"]);
    let v = capsim_json(&a);
    assert!((v["kv_transfer_s"]["max"].as_f64().unwrap() - expect).abs() < 2e-9, "{}", v["kv_transfer_s"]);
}

/// Pipeline stages are GPUs: a worker of `--tp 2 --pp 4` runs on 8, so one prefill and one decode
/// worker are 16 H100s, beyond one 8-GPU node (the network, 50 GB/s per GPU), and each GPU holds one
/// stage's 80 / 4 layers of Llama-3.1-70B's KV over TP 2: 327,680 / 2 / 4 = 40,960 bytes per token.
/// capacity --disaggregated counts its candidates' GPUs the same way.
#[test]
fn pipeline_stages_count_in_gpus_link_and_bytes() {
    let base = ["--model", "Llama-3.1-70B", "--gpu", "H100 SXM", "--tp", "2", "--pp", "4", "--precision", "fp8"];
    let pd = ["--prefill-workers", "1", "--decode-workers", "1"];
    let load = ["--concurrency", "1", "--requests", "2", "--input-len", "1000", "--output-len", "16"];
    let args: Vec<&str> = [&["simulate"][..], &base, &pd, &load].concat();
    let v = capsim_json(&[&args[..], &["--json"]].concat());
    let d = &v["disaggregated"];
    assert_eq!(d["gpus"], 16, "{d}");
    assert_eq!(d["kv_link"]["path"], "network", "{d}");
    assert_eq!(d["kv_link"]["bytes_per_token_per_gpu"], 40_960.0, "{d}");
    assert_eq!(
        (d["prefill"]["pipeline_parallel"].as_u64(), d["decode"]["pipeline_parallel"].as_u64()),
        (Some(4), Some(4))
    );
    let o = capsim(&args);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("disaggregated: 16 GPUs") && text.contains("TP2 PP4"), "{text}");
    let c = capsim_json(
        &[
            &["capacity", "--disaggregated", "--target-rate", "0.5", "--max-replicas", "2"][..],
            &base,
            &["--input-len", "1000", "--output-len", "16", "--requests", "20", "--slo", "ttft_p95_s=100", "--json"],
        ]
        .concat(),
    );
    let tried = c["disaggregated"]["tried"].as_array().unwrap();
    assert!(!tried.is_empty());
    for t in tried {
        let workers = t["prefill_workers"].as_u64().unwrap() + t["decode_workers"].as_u64().unwrap();
        assert_eq!(t["gpus"].as_u64(), Some(8 * workers), "{t}");
    }
}

/// A pool whose weights leave no KV room is refused naming that pool's flag: DeepSeek-R1 in fp8
/// (671 GB) fits no prefill worker of 2 B200s nor a decode worker of 8 A100 80GB.
#[test]
fn a_pool_too_small_for_the_weights_names_its_flag() {
    let base = ["simulate", "--model", "DeepSeek-R1", "--gpu", "B200", "--tp", "8", "--precision", "fp8"];
    let load = ["--concurrency", "1", "--requests", "1", "--input-len", "100", "--output-len", "2"];
    let pd = ["--prefill-workers", "1", "--decode-workers", "1"];
    for (extra, flag) in [(["--prefill-tp", "2"], "--prefill-tp"), (["--decode-gpu", "A100 80GB"], "--decode-gpu")] {
        let o = capsim(&[&base[..], &load, &pd, &extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("does not fit") && err.contains(flag), "{extra:?} should name {flag}: {err}");
        assert!(!err.contains("raise tensor_parallel"), "{err}");
    }
}

/// capacity --disaggregated searches the split: worker counts given to it are refused, naming the
/// flag and saying so, rather than ignored.
#[test]
fn capacity_refuses_the_worker_counts_it_searches() {
    let base = ["capacity", "--disaggregated", "--target-rate", "5", "--slo", "ttft_p95_s=1.0"];
    for (extra, flag) in [
        (&["--prefill-workers", "3", "--decode-workers", "2"][..], "--prefill-workers"),
        (&["--decode-workers", "2"][..], "--decode-workers"),
    ] {
        let o = capsim(&[&base[..], extra].concat());
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(flag) && err.contains("searches"), "{extra:?}: {err}");
    }
}

/// explain of a disaggregated deployment: a prefill-only step (--decode 0) is a prefill worker's,
/// on --prefill-tp's GPUs; a step with decodes a decode worker's. explain had shown the decode
/// pool's "8 x B200 (TP 8)" step for `--prefill-tp 4 --decode 0 --prefill 4096` and called it a
/// decode worker's.
#[test]
fn explain_takes_the_pool_whose_step_it_is() {
    let pd = ["--prefill-workers", "1", "--decode-workers", "1", "--prefill-tp", "4", "--decode-tp", "8"];
    let run = |step: &[&str], json: bool| {
        let mut a = vec!["explain", "--model", "DeepSeek-R1", "--gpu", "B200", "--precision", "fp8"];
        a.extend_from_slice(&pd);
        a.extend_from_slice(step);
        if json {
            a.push("--json");
        }
        let o = capsim(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let prefill = ["--decode", "0", "--prefill", "4096"];
    let v: serde_json::Value = serde_json::from_slice(&run(&prefill, true)).unwrap();
    assert_eq!(v["pool"], "prefill");
    assert!(v["profile"].as_str().unwrap().contains("B200 x4"), "{}", v["profile"]);
    let text = String::from_utf8(run(&prefill, false)).unwrap();
    assert!(text.contains("4 x B200 (TP 4") && text.contains("the step above is a prefill worker's"), "{text}");
    // The same step on the TP 4 deployment alone: the prefill worker's step is that step.
    let o = capsim(&[
        "explain",
        "--model",
        "DeepSeek-R1",
        "--gpu",
        "B200",
        "--precision",
        "fp8",
        "--tp",
        "4",
        "--decode",
        "0",
        "--prefill",
        "4096",
        "--json",
    ]);
    let alone: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["parts_s"], alone["parts_s"]);
    let v: serde_json::Value = serde_json::from_slice(&run(&["--decode", "8", "--context", "1000"], true)).unwrap();
    assert_eq!(v["pool"], "decode");
    assert!(v["profile"].as_str().unwrap().contains("B200 x8"), "{}", v["profile"]);
}

/// The router (--pd-routing). Round-robin, the default (Dynamo's default router mode), scatters a
/// conversation's turns over the prefill workers, so each turn finds its prefix on the worker it
/// lands on one time in P: more prefill workers made a light multi-turn load slower (the audit of
/// issue 25: mean TTFT 0.142 s with 1 worker, 0.184 with 2, 0.217 with 4). Prefix-aware routing
/// (llm-d's P/D prefix-cache scorer, Dynamo's KV router) sends a conversation's later turns to the
/// worker holding its prefix: 4 workers keep the one worker's hit rate.
#[test]
fn prefix_aware_routing_keeps_a_conversation_on_its_prefill_worker() {
    let run = |workers: &str, routing: &str| -> (f64, f64) {
        let v = capsim_json(&[
            "simulate",
            "--model",
            "Llama-3.1-70B",
            "--gpu",
            "H100 SXM",
            "--tp",
            "4",
            "--precision",
            "fp8",
            "--turns",
            "4",
            "--input-len",
            "2000",
            "--output-len",
            "100",
            "--requests",
            "80",
            "--turn-think-time",
            "2",
            "--rate",
            "0.2",
            "--prefill-workers",
            workers,
            "--decode-workers",
            "1",
            "--pd-routing",
            routing,
            "--json",
        ]);
        assert_eq!(v["disaggregated"]["routing"], routing);
        (v["prefix_hit_rate"].as_f64().unwrap(), v["ttft_s"]["mean"].as_f64().unwrap())
    };
    let (one_hit, one_ttft) = run("1", "round-robin");
    let (rr_hit, rr_ttft) = run("4", "round-robin");
    let (pa_hit, pa_ttft) = run("4", "prefix-aware");
    assert!(one_hit > 0.4, "{one_hit}");
    assert!(rr_hit < 0.6 * one_hit, "round-robin scatters the turns: {rr_hit} against {one_hit}");
    assert!(pa_hit > 0.9 * one_hit, "prefix-aware keeps them: {pa_hit} against {one_hit}");
    assert!(pa_ttft < rr_ttft && pa_ttft < 1.1 * one_ttft, "{pa_ttft} {rr_ttft} {one_ttft}");
    // The flag is a disaggregated one: alone it asks for the pools.
    let o = capsim(&["simulate", "--pd-routing", "prefix-aware", "--concurrency", "1", "--requests", "2"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("--prefill-workers") && err.contains("--pd-routing"), "{err}");
}

/// `Profile::steps_scaled` (the corpus protocols replay a disaggregated deployment's pools at such
/// scales for their TTFT bands): on one GPU, with no collectives, every part of a decode step and
/// of a prefill step takes `f` times as long, so the step does; the bandwidth never passes the
/// HBM peak when sped up.
#[test]
fn steps_scaled_scales_a_one_gpu_step() {
    use capsim::sim::{BatchShape, StepModel};
    // The default profile: one H200, every coefficient finite.
    let p = crate::default_profile();
    assert_eq!(p.tensor_parallel, 1);
    let mut decode = BatchShape::default();
    for _ in 0..32 {
        decode.add_chunk(2000, 1);
    }
    let mut prefill = decode;
    prefill.add_chunk(0, 2048);
    let (a, b) = (StepModel::new(&p), StepModel::new(&p.clone().steps_scaled(2.0)));
    for shape in [decode, prefill] {
        let (x, y) = (a.step_s(&shape), b.step_s(&shape));
        assert!((y / x - 2.0).abs() < 1e-9, "{x} -> {y}");
    }
    let q = p.clone().steps_scaled(2.0);
    assert!((q.coefficients.request_overhead_s - 2.0 * p.coefficients.request_overhead_s).abs() < 1e-15);
    assert!(p.coefficients.request_overhead_s > 0.0);
    let fast = p.clone().steps_scaled(1e-3);
    assert_eq!(fast.coefficients.bandwidth_eff_bytes_s, p.gpu.hbm_bandwidth_bytes_s());
}

/// Two prefill workers hand their requests over when their steps are taken, so the hand-overs
/// reach the decode worker's link out of time order: one worker's step, taken later, can end
/// earlier. A KV waits for the link only behind transfers that hold it, never behind another
/// worker's step still running (the audit of 2026-11-28: DeepSeek-R1 on GB200, 8K prompts, a KV
/// transfer of 1.3 ms waited up to 186 ms). The wait is bounded by the transfers of every other
/// request in flight.
#[test]
fn a_kv_waits_only_behind_transfers_holding_the_link() {
    let base = ["--model", "DeepSeek-R1", "--gpu", "GB200", "--precision", "nvfp4", "--kv-dtype", "fp8"];
    let pools = ["--engine", "sglang", "--prefill-workers", "2", "--prefill-tp", "4", "--prefill-ep", "4"];
    let dec = ["--prefill-attention-dp", "4", "--decode-workers", "1", "--decode-tp", "16", "--decode-ep", "16"];
    let mut e = vec!["explain"];
    e.extend(base.iter().chain(&pools).chain(&dec));
    e.extend(["--decode-attention-dp", "16", "--decode", "1", "--context", "8192", "--json"]);
    let one = capsim_json(&e)["kv_transfer"]["transfer_s"].as_f64().unwrap();
    let mut s = vec!["simulate"];
    s.extend(base.iter().chain(&pools).chain(&dec));
    s.extend(["--decode-attention-dp", "16", "--concurrency", "32", "--requests", "128"]);
    s.extend(["--input-len", "8192", "--output-len", "256", "--json"]);
    let v = capsim_json(&s);
    let max = v["kv_transfer_s"]["max"].as_f64().unwrap();
    assert!(max >= one - 1e-9 && max <= 32.0 * one, "max {max} s, one transfer {one} s");
}

/// explain refuses a step no deployment runs, naming the flag: a prompt chunk on a decode worker
/// of a disaggregated deployment, and --prefill-start with neither a chunk nor a host KV tier (it
/// was ignored; the audit of 2026-11-28).
#[test]
fn explain_refuses_steps_that_do_not_happen() {
    let o = capsim(&[
        "explain",
        "--prefill-workers",
        "2",
        "--decode-workers",
        "1",
        "--decode",
        "64",
        "--context",
        "2000",
        "--prefill",
        "4096",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("`--prefill`") && err.contains("computes no prompt chunk"), "{err}");
    let o =
        capsim(&["explain", "--prefill-workers", "2", "--decode-workers", "1", "--decode", "0", "--prefill", "4096"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = capsim(&["explain", "--decode", "4", "--prefill-start", "100"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("`--prefill-start`"), "{err}");
    let o = capsim(&["explain", "--decode", "4", "--prefill", "512", "--prefill-start", "100"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
