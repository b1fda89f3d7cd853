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
    // A decode pool with no KV room for one request (prompt 1500 + output 1000 over 2000 tokens).
    let o = capsim(&[
        "simulate",
        "--input-len",
        "1500",
        "--output-len",
        "1000",
        "--requests",
        "4",
        "--rate",
        "1",
        "--kv-capacity-tokens",
        "2000",
        "--prefill-workers",
        "1",
        "--decode-workers",
        "1",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--decode-tp") && err.contains("no room for one request"), "{err}");
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
/// of a rank with 4 ranks; the transfer by hand from that. The run completes every request with
/// both pools' own layouts (prefill EP 2 over its 2 GPUs with 2 ranks).
#[test]
fn pools_with_their_own_attention_dp() {
    let link = |extra: &[&str]| {
        let mut a = vec!["explain", "--prefill-workers", "1", "--decode-workers", "1", "--decode-tp", "4"];
        a.extend_from_slice(extra);
        a.extend_from_slice(&["--context", "1000", "--json"]);
        capsim_json(&a)["kv_transfer"].clone()
    };
    assert_eq!(link(&[])["link"]["bytes_per_token_per_gpu"], 24_576.0);
    let t = link(&["--decode-attention-dp", "4"]);
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
