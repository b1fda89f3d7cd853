//! Issue 25, item 4: KV offload to host memory (`--kv-offload-gb`): the host tier under vLLM's prefix
//! cache, the host link of the catalog, the metrics of each tier, and the flag's errors.

use super::{const_profile, default_profile};
use capsim::catalog::gpu::HostLinkKind;
use capsim::catalog::Catalog;
use capsim::metrics::{summarize, RequestSlo, Summary};
use capsim::profile::Profile;
use capsim::sim::{simulate, SimOptions, SimOutput};
use capsim::workload::{Arrivals, Conversation, LengthDist, RequestClass, TraceRecord, Workload, WorkloadSpec};
use std::process::{Command, Output};

fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap()
}

fn rec(t: f64, input: u32, hash_ids: &[u64]) -> TraceRecord {
    TraceRecord { arrival_s: t, input_tokens: input, output_tokens: 1, hash_ids: hash_ids.to_vec(), session: None }
}

fn ttft(out: &SimOutput, id: u32) -> f64 {
    out.records.iter().find(|r| r.id == id).unwrap().ttft_s()
}

/// Qwen3-Coder-30B-A3B in BF16 KV on one H200: 48 layers x 4 KV heads x 128 x 2 (K and V) x 2 bytes
/// = 98,304 bytes per token, 1,572,864 per 16-token block; the host link is PCIe Gen5 x16, 64 GB/s
/// one direction, of which a copy reaches 0.87.
const BLOCK_BYTES: f64 = 48.0 * 4.0 * 128.0 * 2.0 * 2.0 * 16.0;
const LINK_BYTES_S: f64 = 64e9 * 0.87;

/// A (1,024 tokens) runs and leaves its 64 full blocks cached; B (2,048 other tokens) takes 128 of
/// the pool's 130 blocks, the 66 never used and 62 of A's (the last first: vLLM frees a request's
/// blocks tail first), which go to host memory; C repeats A's prompt. Without offload C finds A's
/// first two blocks on the GPU and prefills the other 992 tokens: 4 steps of 256. With offload the
/// next 61 blocks (up to 1,008 tokens: the last token is always computed) come back from host memory
/// at the link's rate while C waits, then one step computes its last 16 tokens: TTFT = 61 blocks x
/// 1,572,864 B / 55.68 GB/s + 1 step.
#[test]
fn an_offload_hit_costs_the_transfer_and_a_miss_the_prefill() {
    let step_s = 0.01;
    let extra = |gb: &str| format!("kv_capacity_tokens = 2080\nmax_num_batched_tokens = 256\n{gb}");
    let plain = const_profile("vllm", step_s, &extra(""));
    let off = const_profile("vllm", step_s, &extra("kv_offload_gb = 100"));
    let k = off.engine.kv_offload.as_ref().unwrap();
    assert_eq!((k.block_bytes, k.block_bytes_per_gpu, k.effective_bytes_s), (BLOCK_BYTES, BLOCK_BYTES, LINK_BYTES_S));
    assert_eq!((k.link, k.host_blocks), (HostLinkKind::Pcie, (100e9 / BLOCK_BYTES) as u64));
    assert!(plain.engine.kv_offload.is_none());
    let w =
        Workload::trace(vec![rec(0.0, 1024, &[1, 2]), rec(10.0, 2048, &[3, 4, 5, 6]), rec(20.0, 1024, &[1, 2])], 0, 0)
            .unwrap();
    let a = simulate(&plain, &w, 1, SimOptions::default());
    let b = simulate(&off, &w, 1, SimOptions::default());
    // The miss: the prefill of 992 tokens, 4 steps.
    assert!((ttft(&a, 2) - 4.0 * step_s).abs() < 1e-9, "{}", ttft(&a, 2));
    assert!(a.offload.is_none());
    // The hit: the copy of 61 blocks, then one step.
    let load_s = (61.0 * BLOCK_BYTES / LINK_BYTES_S * 1e9).ceil() * 1e-9;
    assert!((ttft(&b, 2) - (load_s + step_s)).abs() < 1e-9, "{} against {}", ttft(&b, 2), load_s + step_s);
    assert!(load_s > 1.72e-3 && load_s < 1.73e-3, "1.723 ms by hand: {load_s}");
    let o = b.offload.as_ref().unwrap();
    assert_eq!((o.loads, o.blocks_loaded, o.bytes_loaded), (1, 61, 61.0 * BLOCK_BYTES));
    assert_eq!(o.host_hits, vec![(2, 61 * 16)]);
    assert_eq!(b.records.iter().find(|r| r.id == 2).unwrap().cached_tokens, 32, "the GPU kept A's first blocks");
    // A and B ran alike in both: only C's prefix differs.
    for id in [0, 1] {
        assert_eq!(ttft(&a, id), ttft(&b, id));
    }
    let s = summarize(&b, 0, 0, 0.0, &RequestSlo::default());
    let t = s.offload.as_ref().unwrap();
    assert_eq!(t.requests_host_hit, 1);
    let prompt = (1024 + 2048 + 1024) as f64;
    assert!((t.host_hit_rate - 976.0 / prompt).abs() < 1e-12);
    assert!((t.gpu_hit_rate - 32.0 / prompt).abs() < 1e-12);
    assert!((t.gpu_hit_rate + t.host_hit_rate + t.computed_rate - 1.0).abs() < 1e-12);
    assert_eq!(t.ttft_s_host_hit.mean, ttft(&b, 2));
}

/// A host tier too small for one block: refused. One that holds fewer blocks than the GPU evicts
/// keeps the most recent ones; a prompt whose blocks it dropped is computed.
#[test]
fn a_host_tier_keeps_the_most_recently_evicted_blocks() {
    let extra = |gb: f64| format!("kv_capacity_tokens = 2080\nmax_num_batched_tokens = 256\nkv_offload_gb = {gb}");
    // 10 blocks of host memory: B's allocation evicts A's blocks 63 down to 2, the last ten of those
    // evictions (blocks 11 to 2) stay; C's prefix in host memory starts at block 2: 10 blocks.
    let p = const_profile("vllm", 0.01, &extra(10.5 * BLOCK_BYTES / 1e9));
    assert_eq!(p.engine.kv_offload.as_ref().unwrap().host_blocks, 10);
    let w =
        Workload::trace(vec![rec(0.0, 1024, &[1, 2]), rec(10.0, 2048, &[3, 4, 5, 6]), rec(20.0, 1024, &[1, 2])], 0, 0)
            .unwrap();
    let out = simulate(&p, &w, 1, SimOptions::default());
    let o = out.offload.unwrap();
    assert_eq!(o.host_hits, vec![(2, 10 * 16)]);
    assert_eq!(o.host_evictions, o.blocks_stored - 10);
    // Less than one block: refused.
    let mut f = p.file.clone();
    f.engine.kv_offload_gb = Some(0.5 * BLOCK_BYTES / 1e9);
    let e = f.resolve("t", &Catalog::builtin()).unwrap_err().to_string();
    assert!(e.contains("engine.kv_offload_gb") && e.contains("no KV block"), "{e}");
}

fn conversations(p: &Profile, gb: Option<f64>) -> (SimOutput, Summary) {
    let mut f = p.file.clone();
    f.engine.kv_capacity_tokens = Some(100_000);
    f.engine.kv_offload_gb = gb;
    let p = f.resolve("test", &Catalog::builtin()).unwrap();
    let w = WorkloadSpec {
        arrivals: Arrivals::ClosedLoop { clients: 32, think_time_s: 0.0, think_exponential: false },
        classes: vec![RequestClass {
            weight: 1.0,
            name: String::new(),
            input: LengthDist::fixed(1500),
            output: LengthDist::fixed(150),
            system_prompt_tokens: 500,
        }],
        requests: Some(512),
        duration_s: None,
        warmup_requests: 0,
        cooldown_requests: 0,
        warmup_s: 0.0,
        conversation: Some(Conversation { turns: LengthDist::fixed(8), think_time_s: 5.0, think_exponential: false }),
    }
    .validate()
    .unwrap();
    let out = simulate(&p, &w, 7, SimOptions::default());
    let s = summarize(&out, 0, 0, 0.0, &RequestSlo::default());
    (out, s)
}

/// 32 users in 8-turn conversations: each holds up to 8 x 1,650 + 500 tokens, about 430,000 in all,
/// four times the GPU's 100,000; 100 GB of host memory (over a million tokens at 98 KB) holds them.
/// With the tier, histories that fell out of the GPU come back from host memory: more of the prompt
/// tokens are served from a cache, fewer computed, and the mean TTFT falls.
#[test]
fn a_multi_turn_working_set_beyond_gpu_kv_hits_host_memory_and_ttft_falls() {
    let p = default_profile();
    let (plain, a) = conversations(&p, None);
    let (_, b) = conversations(&p, Some(100.0));
    assert!(plain.prefix_evictions > 0, "the working set exceeds the GPU's KV");
    assert!(a.offload.is_none());
    let o = b.offload.as_ref().unwrap();
    assert!(o.host_hit_rate > 0.3, "host hit rate {}", o.host_hit_rate);
    assert!(
        o.gpu_hit_rate + o.host_hit_rate > a.prefix_hit_rate + 0.2,
        "cache hits {} + {} against {} without offload",
        o.gpu_hit_rate,
        o.host_hit_rate,
        a.prefix_hit_rate
    );
    assert!(b.ttft_s.mean < 0.8 * a.ttft_s.mean, "TTFT {} with offload against {}", b.ttft_s.mean, a.ttft_s.mean);
    assert!(o.bytes_loaded > 0.0 && o.load_s_mean > 0.0);
    assert_eq!(o.host_evictions, 0, "100 GB holds the whole working set");
}

/// A run is a pure function of its inputs with the tier too; a run without it prints what it did
/// before the tier existed (no offload key, in the summary or the engine's settings), and
/// `--kv-offload-gb 0` is such a run.
#[test]
fn offload_runs_repeat_byte_for_byte_and_plain_runs_carry_no_offload_key() {
    let base = [
        "simulate",
        "--concurrency",
        "16",
        "--turns",
        "4",
        "--turn-think-time",
        "2",
        "--input-len",
        "1000",
        "--output-len",
        "100",
        "--requests",
        "200",
        "--kv-capacity-tokens",
        "40000",
        "--seed",
        "3",
        "--json",
    ];
    let with = |extra: &[&str]| {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let o = capsim(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    let x = with(&["--kv-offload-gb", "50"]);
    assert_eq!(x, with(&["--kv-offload-gb", "50"]), "same seed, same bytes");
    let v: serde_json::Value = serde_json::from_slice(&x).unwrap();
    for k in ["gpu_hit_rate", "host_hit_rate", "computed_rate", "bytes_loaded", "loads", "blocks_stored"] {
        assert!(v["offload"][k].is_number(), "offload.{k}");
    }
    for k in ["ttft_s_host_hit", "ttft_s_gpu_hit", "ttft_s_miss"] {
        assert!(!v["offload"][k]["mean"].is_null(), "offload.{k}");
    }
    assert_eq!(v["scenario"]["engine"]["kv_offload"]["link"], "pcie");
    let plain = with(&[]);
    let v: serde_json::Value = serde_json::from_slice(&plain).unwrap();
    assert!(v.get("offload").is_none() && v["scenario"]["engine"].get("kv_offload").is_none());
    assert_eq!(plain, with(&["--kv-offload-gb", "0"]));
}

/// Bad values and engines without the prefix cache the tier sits under: refused naming the flag.
#[test]
fn bad_kv_offload_values_name_the_flag() {
    let run = |args: &[&str]| {
        let mut a = vec!["simulate", "--concurrency", "2", "--requests", "4"];
        a.extend_from_slice(args);
        let o = capsim(&a);
        assert_eq!(o.status.code(), Some(2), "{args:?} must be refused");
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    for (args, why) in [
        (&["--kv-offload-gb", "-1"][..], "GB >= 0"),
        (&["--kv-offload-gb", "NaN"][..], "finite"),
        (&["--kv-offload-gb", "inf"][..], "finite"),
        (&["--kv-offload-gb", "5e6"][..], "is it bytes"),
        (&["--kv-offload-gb", "100", "--engine", "sglang"][..], "HiCache"),
        (&["--kv-offload-gb", "100", "--engine", "trtllm"][..], "vLLM"),
        (&["--kv-offload-gb", "100", "--prefix-caching", "off"][..], "prefix caching"),
    ] {
        let e = run(args);
        assert!(e.contains("--kv-offload-gb") && e.contains(why), "{args:?}: {e}");
    }
    // A hybrid model runs without a prefix cache: nothing to offload.
    let e = run(&["--kv-offload-gb", "100", "--profile", "qwen3.5-35b-a3b-fp8_h100-sxm_vllm"]);
    assert!(e.contains("--kv-offload-gb") && e.contains("per-sequence state"), "{e}");
    // In a profile file the key is named.
    let err = capsim::profile::ProfileFile::parse(
        "t.toml",
        "name = \"x\"\n[model]\nname = \"Qwen3-Coder-30B-A3B-Instruct\"\nweight_dtype = \"fp8\"\nkv_dtype = \"bf16\"\n[gpu]\nname = \"H200 SXM\"\n[engine]\nkv_offload_gb = -3\n[coefficients]\nstep_overhead_s = 0.01\nper_seq_overhead_s = 0.0\nbandwidth_eff_bytes_s = 1e12\nmatmul_flops_eff_s = 1e15\nattention_flops_eff_s = 1e15\nrequest_overhead_s = 0.0\n[provenance]\nmethod = \"test\"\n",
    )
    .unwrap()
    .resolve("t.toml", &Catalog::builtin())
    .unwrap_err()
    .to_string();
    assert!(err.contains("engine.kv_offload_gb"), "{err}");
}

/// The host link of each GPU: PCIe Gen5 x16 on the x86 hosts, Gen4 on A100, NVLink-C2C on the
/// Grace-Blackwell superchips; a user's GPU file without it gets PCIe at its pcie_bw_gb_s.
#[test]
fn the_catalog_gives_each_gpu_its_host_link() {
    let c = Catalog::builtin();
    for (gpu, kind, gb_s) in [
        ("H100 SXM", HostLinkKind::Pcie, 64.0),
        ("H200 SXM", HostLinkKind::Pcie, 64.0),
        ("B200", HostLinkKind::Pcie, 64.0),
        ("MI300X", HostLinkKind::Pcie, 64.0),
        ("MI325X", HostLinkKind::Pcie, 64.0),
        ("MI355X", HostLinkKind::Pcie, 64.0),
        ("A100 80GB", HostLinkKind::Pcie, 32.0),
        ("GB200", HostLinkKind::C2c, 225.0),
        ("GB300", HostLinkKind::C2c, 225.0),
        // No host-link fields: PCIe at pcie_bw_gb_s.
        ("L40S", HostLinkKind::Pcie, 32.0),
    ] {
        let g = c.gpu(gpu).unwrap();
        assert_eq!(g.host_link(), (kind, gb_s * 1e9), "{gpu}");
        assert!(g.host_link.is_none() || g.host_link_source.as_deref().is_some_and(|s| !s.is_empty()), "{gpu}");
    }
    assert!(
        c.gpu("GB200").unwrap().host_link_effective_bytes_s()
            > 3.0 * c.gpu("B200").unwrap().host_link_effective_bytes_s()
    );
    let bad = capsim::catalog::gpu::parse_gpus(
        "g.toml",
        "[[gpu]]\nname = \"X\"\nfamily = \"X\"\nmemory_gb = 80\nhbm_bandwidth_tb_s = 3\nbf16_tflops = 900\nfp8_tflops = 1800\ntdp_w = 700\nsource = \"s\"\nlink = \"nvlink\"\nlink_bw_gb_s = 450\nlink_domain_gpus = 8\npcie_bw_gb_s = 64\nlink_source = \"s\"\nhost_link = \"c2c\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(bad.contains("host_link_bw_gb_s"), "{bad}");
}

/// Every step of a run with the tier: the blocks requests hold (those waiting for their copy
/// included) are the blocks in use (conversations whose users share nothing), never more than the pool, and each running request holds KV for
/// what it computed; every request finishes.
#[test]
fn kv_is_accounted_while_requests_load_from_host_memory() {
    let mut f = default_profile().file.clone();
    f.engine.kv_capacity_tokens = Some(60_000);
    f.engine.kv_offload_gb = Some(20.0);
    let p = f.resolve("test", &Catalog::builtin()).unwrap();
    let w = WorkloadSpec {
        arrivals: Arrivals::ClosedLoop { clients: 24, think_time_s: 0.0, think_exponential: false },
        classes: vec![RequestClass {
            weight: 1.0,
            name: String::new(),
            input: LengthDist::fixed(900),
            output: LengthDist::fixed(60),
            // No prompt shared between users: no block has two holders, so held = used exactly.
            system_prompt_tokens: 0,
        }],
        requests: Some(300),
        duration_s: None,
        warmup_requests: 0,
        cooldown_requests: 0,
        warmup_s: 0.0,
        conversation: Some(Conversation { turns: LengthDist::fixed(6), think_time_s: 1.0, think_exponential: false }),
    }
    .validate()
    .unwrap();
    let mut steps = 0;
    let out = capsim::sim::simulate_observed(&p, &w, 5, SimOptions::default(), &mut |v: &capsim::sim::StepView| {
        assert_eq!(v.held_blocks(), v.used_blocks());
        assert!(v.used_blocks() <= v.capacity_blocks());
        assert!(v.kv_covers_computed());
        steps += 1;
    });
    assert!(steps > 0);
    assert_eq!((out.records.len(), out.requests_unfinished), (300, 0));
    assert!(out.offload.unwrap().loads > 0);
}

/// `capsim explain` shows the host-load part with the tier on: 512 blocks of 1,572,864 B over
/// 55.68 GB/s, 14.46 ms; without the tier the part is absent.
#[test]
fn explain_shows_the_host_load_with_offload_on() {
    let o = capsim(&["explain", "--decode", "4", "--prefill-start", "8192", "--kv-offload-gb", "500", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let k = &v["kv_offload"];
    assert_eq!(k["prefix_blocks"], 512);
    let by_hand = (512.0 * BLOCK_BYTES / LINK_BYTES_S * 1e9).ceil() * 1e-9;
    assert!((k["prefix_load_s"].as_f64().unwrap() - by_hand).abs() < 1e-12);
    let o = capsim(&["explain", "--decode", "4", "--prefill-start", "8192", "--kv-offload-gb", "500"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("KV offload") && text.contains("PCIe"), "{text}");
    let o = capsim(&["explain", "--decode", "4", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.get("kv_offload").is_none());
}

/// Requests that share nothing cannot hit a cache: the run reports an empty tier, and every request
/// runs as without it.
#[test]
fn a_workload_that_shares_nothing_reports_an_empty_tier() {
    let plain = const_profile("vllm", 0.01, "");
    let off = const_profile("vllm", 0.01, "kv_offload_gb = 10");
    let w = WorkloadSpec {
        arrivals: Arrivals::ClosedLoop { clients: 4, think_time_s: 0.0, think_exponential: false },
        classes: vec![RequestClass {
            weight: 1.0,
            name: String::new(),
            input: LengthDist::fixed(500),
            output: LengthDist::fixed(20),
            system_prompt_tokens: 0,
        }],
        requests: Some(40),
        duration_s: None,
        warmup_requests: 0,
        cooldown_requests: 0,
        warmup_s: 0.0,
        conversation: None,
    }
    .validate()
    .unwrap();
    let a = simulate(&plain, &w, 1, SimOptions::default());
    let b = simulate(&off, &w, 1, SimOptions::default());
    assert_eq!(a.records, b.records);
    let s = summarize(&b, 0, 0, 0.0, &RequestSlo::default()).offload.unwrap();
    assert_eq!((s.loads, s.host_hit_rate, s.gpu_hit_rate, s.computed_rate), (0, 0.0, 0.0, 1.0));
}
