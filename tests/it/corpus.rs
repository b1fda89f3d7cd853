//! The public corpus (issue 23): read, expressed or refused with a reason, learned from, and the
//! learned model's use for deployments nobody calibrated.

use capsim::catalog::Catalog;
use capsim::corpus::{builtin_points, express_all, read_points, resolves, Refusal};
use capsim::hardware::learned::{LearnedModel, BW, GEMM, LEVELS};
use capsim::measured::corpus::{read_aic_e2e, Client};
use capsim::measured::launch::TrtTokens;
use std::process::{Command, Output};

use crate::Scratch;

fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

const HEADER: &str = "id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,prefill_batch_size,prefill_num_workers,prefill_tp_size,prefill_pp_size,prefill_attention_dp_size,prefill_moe_tp_size,prefill_moe_ep_size,decode_batch_size,decode_num_workers,decode_tp_size,decode_pp_size,decode_attention_dp_size,decode_moe_tp_size,decode_moe_ep_size,silicon_ttft_ms,silicon_tpot_ms";

fn row(isl: &str, tpot: &str) -> String {
    format!(
        "x,db-dump/2026-04-27; config_id=1; silicon_concurrency=8; measured=2026-04-18,vllm,0.19.0,meta-llama/Llama-3.1-70B,h200_sxm,fp8,agg,{isl},1024,fp8,fp8,8,4,1,1,4,1,,,,,,,,,,,,,,,120.5,{tpot}"
    )
}

#[test]
fn every_point_is_replayed_or_refused_with_a_reason() {
    let catalog = Catalog::builtin();
    let points = builtin_points().unwrap();
    let n = points.len();
    assert!(n > 6000, "the shipped corpus has about 6,000 points, read {n}");
    let check = resolves(&catalog);
    let e = express_all(&catalog, points, &check);
    assert_eq!(e.experiments.len() + e.refused.len(), n, "nothing dropped silently");
    assert!(e.experiments.len() > 3000, "most aggregated points are expressible: {}", e.experiments.len());
    let counts = e.counts();
    assert_eq!(counts.iter().map(|c| c.1).sum::<usize>(), e.refused.len());
    assert!(e.refused.iter().any(|(_, r)| *r == Refusal::Disaggregated));
    // Issue 25: MTP points are expressed with their launch's drafted tokens (SGLang on NVIDIA: 2, on
    // AMD: 3; TensorRT-LLM: 3, 1 under attention DP), or their recipe's (pd_recipes.json).
    let mtp: Vec<_> = e.experiments.iter().filter_map(|x| x.deployment.speculative.as_ref().map(|s| (x, s))).collect();
    assert!(mtp.len() > 50, "{} MTP points expressed", mtp.len());
    for (x, s) in &mtp {
        assert_eq!(x.point.spec_decoding.as_deref(), Some("mtp"));
        // TensorRT-LLM's MTP launches under attention DP draft 1 token (InferenceX's scripts).
        let adp = x.point.attention_dp > 1;
        let k = match (x.engine, x.gpu.starts_with("MI"), adp) {
            (capsim::profile::EngineKind::Sglang, false, _) => 2,
            (capsim::profile::EngineKind::Trtllm, _, true) => 1,
            _ => 3,
        };
        let recipe = x.point.pd_launch.as_ref().and_then(|l| l.decode.spec_tokens).filter(|&k| k > 0);
        let k = recipe.unwrap_or(k);
        assert_eq!(s.tokens, k, "{}", x.point.id);
    }
    assert!(!e
        .refused
        .iter()
        .any(|(p, r)| *r == Refusal::SpeculativeDecoding && p.spec_decoding.as_deref() == Some("mtp")));
    // Disaggregated deployments that name their router or KV transport before the engine
    // (Dynamo's `dynamo-sglang`, AMD's SGLang over MoRI `mori-sglang`) replay on the engine behind
    // it, with both pools; another engine (AMD's ATOM) is refused by name.
    for prefix in ["dynamo-", "mori-"] {
        let named: Vec<_> = e.experiments.iter().filter(|x| x.point.engine.starts_with(prefix)).collect();
        assert!(!named.is_empty(), "{prefix}* points replay");
        assert!(named.iter().all(|x| x.pd.is_some()), "{prefix}* points are disaggregated");
    }
    assert!(e
        .experiments
        .iter()
        .any(|x| x.point.engine == "mori-sglang" && x.engine == capsim::profile::EngineKind::Sglang));
    assert!(e.refused.iter().any(|(p, r)| p.engine == "atom" && *r == Refusal::UnknownEngine("atom".into())));
    // A pool whose `num_gpus` gives each worker more GPUs than its `tp` under DP attention (SGLang's
    // GB200 runs: tp 1, 3 prefill workers on 24 GPUs, 1 decode worker on 48) runs that many ranks of
    // `tp` GPUs each, where no recipe says otherwise (this one's, mid-curve-3p1d.yaml, states 32
    // decode GPUs: skipped in pd_recipes.json).
    let meta = e.experiments.iter().find(|x| x.point.id.contains("3ptp1-dpa_1dtp1-dpa_24+48gpu")).unwrap();
    assert!(meta.point.pd_launch.is_none());
    let pd = meta.pd.as_ref().unwrap();
    assert_eq!((pd.prefill_workers, pd.prefill.tensor_parallel, pd.prefill.parallel.attention_dp), (3, 8, 8));
    assert_eq!((pd.decode_workers, pd.decode.tensor_parallel, pd.decode.parallel.attention_dp), (1, 48, 48));
    // Where the recipe with its nodes and workers is read, it decides: TP4 prefill workers without
    // DP attention, a decode worker of 32 DP ranks with DeepEP over all 32 GPUs.
    let wide = e.experiments.iter().find(|x| x.point.id.contains("10ptp1-dpa_1dtp1-dpa_40+32gpu")).unwrap();
    let pd = wide.pd.as_ref().unwrap();
    assert_eq!((pd.prefill_workers, pd.prefill.tensor_parallel, pd.prefill.parallel.attention_dp), (10, 4, 1));
    assert_eq!(
        (
            pd.decode_workers,
            pd.decode.tensor_parallel,
            pd.decode.parallel.attention_dp,
            pd.decode.parallel.expert_parallel_size
        ),
        (1, 32, 32, 32)
    );
    // Every replayed point carries its run, replayed as its client ran it.
    for x in &e.experiments {
        assert!(!x.points.is_empty());
        assert_eq!(x.run.requests, x.point.requests.unwrap_or(10 * x.point.concurrency as u64));
        let ((i0, i1), (o0, o1)) = x.run.uniform_lengths.unwrap();
        assert_eq!((i1, o1), (x.point.isl, x.point.osl));
        if x.point.client == Client::InferenceX {
            assert_eq!(i0, (0.8 * x.point.isl as f64).floor() as u32, "{}", x.point.id);
            assert_eq!(o0, (0.8 * x.point.osl as f64).floor() as u32);
        } else {
            assert_eq!(i0, i1, "stated input lengths are fixed: {}", x.point.id);
            assert_eq!(o0, (0.98 * x.point.osl as f64).floor() as u32, "outputs up to 2% short: {}", x.point.id);
        }
    }
}

#[test]
fn points_corpus_prints_the_counts_by_reason() {
    let o = capsim(&["points", "--corpus"]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("corpus points:") && t.contains("disaggregated prefill/decode"), "{t}");
    let o = capsim(&["points", "--corpus", "--json", "--list"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let total = v["points"].as_u64().unwrap();
    assert_eq!(v["replayed"].as_u64().unwrap() + v["refused"].as_u64().unwrap(), total);
    assert_eq!(v["refused_points"].as_array().unwrap().len() as u64, v["refused"].as_u64().unwrap());
    let by_reason: u64 = v["refused_by_reason"].as_array().unwrap().iter().map(|r| r["points"].as_u64().unwrap()).sum();
    assert_eq!(by_reason, v["refused"].as_u64().unwrap());
    // By GPU under the catalog's names (the sets write b200 and b200_sxm for one GPU), and by client;
    // each table adds up to the total.
    let gpus: Vec<&str> = v["by_gpu"].as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    assert!(gpus.contains(&"B200") && !gpus.iter().any(|g| g.contains('_') || *g == "b200"), "{gpus:?}");
    for table in ["by_gpu", "by_client", "by_set"] {
        let n: u64 = v[table]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["replayed"].as_u64().unwrap() + g["refused"].as_u64().unwrap())
            .sum();
        assert_eq!(n, total, "{table}");
    }
    // A refused point names its place once: a CSV row by file and line (and its id), a point file by
    // its path alone (its id), with no line (null, not 0), in the JSON and the text list.
    for r in v["refused_points"].as_array().unwrap() {
        match r["line"].as_u64() {
            Some(l) => assert!(l > 0 && r["file"].as_str().unwrap().ends_with(".csv"), "{r}"),
            None => assert!(r["line"].is_null() && r["file"].as_str().unwrap().ends_with(".json"), "{r}"),
        }
    }
    let listed = text(&capsim(&["points", "--corpus", "--list"]));
    let file_line = listed
        .lines()
        .find(|l| l.starts_with("calibration/corpus/inferencex-dsr1/") && !l.contains("a copy of"))
        .expect("a refused point file");
    assert_eq!(file_line.matches(".json").count(), 1, "{file_line}");
    // The disaggregated points replayed with their recipes' pool settings are counted.
    let recipes = v["replayed_with_pd_recipes"].as_u64().unwrap();
    assert!(recipes > 100 && recipes < v["replayed"].as_u64().unwrap(), "{recipes}");
    assert!(
        t.contains(&format!("{recipes} replayed disaggregated points run the pools their recipes launched")),
        "{t}"
    );
    // A copy names the point replayed in its place, in JSON and in the text list.
    let refused = v["refused_points"].as_array().unwrap();
    let copies: Vec<_> = refused.iter().filter(|r| r["reason"].as_str().unwrap().starts_with("a copy of")).collect();
    assert!(!copies.is_empty() && copies.iter().all(|r| r["copy_of"].is_string()));
    assert!(refused
        .iter()
        .filter(|r| !r["reason"].as_str().unwrap().starts_with("a copy of"))
        .all(|r| r.get("copy_of").is_none()));
    let list = text(&capsim(&["points", "--corpus", "--list"]));
    let of = copies[0]["copy_of"].as_str().unwrap();
    assert!(list.lines().any(|l| l.contains(copies[0]["id"].as_str().unwrap()) && l.ends_with(of)), "{of}");
}

#[test]
fn bad_corpus_rows_name_the_file_line_and_field() {
    let ok = format!("{HEADER}\n{}\n", row("1024", "9.5"));
    let p = read_aic_e2e("m.csv", &ok).unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].concurrency, 8);
    assert_eq!(p[0].client, Client::InferenceX);
    for (bad, field) in [(row("-5", "9.5"), "isl"), (row("1024", "NaN"), "silicon_tpot_ms"), (row("0", "9.5"), "isl")] {
        let e = read_aic_e2e("m.csv", &format!("{HEADER}\n{}\n{bad}\n", row("1024", "9.5"))).unwrap_err().to_string();
        assert!(e.contains("m.csv") && e.contains("line 3") && e.contains(field), "{e}");
    }
    // A deployment on no GPUs or no stages is refused, not read as one (its tp_size was).
    for (from, to, field) in
        [(",8,4,1,1,4,1,", ",8,0,1,1,4,1,", "tp_size"), (",8,4,1,1,4,1,", ",8,4,0,1,4,1,", "pp_size")]
    {
        let bad = row("1024", "9.5").replace(from, to);
        let e = read_aic_e2e("m.csv", &format!("{HEADER}\n{bad}\n")).unwrap_err().to_string();
        assert!(e.contains("line 2") && e.contains(field) && e.contains("got 0"), "{e}");
    }
    // A short row, and a value of the wrong type, name one line: the reader's (the csv crate's
    // message named its own record index and line besides) and the column.
    let e = read_aic_e2e("m.csv", &format!("{HEADER}\n{}\nx,y,z\n", row("1024", "9.5"))).unwrap_err().to_string();
    assert!(e.contains("line 3: malformed row: 3 fields where the header has") && !e.contains("record"), "{e}");
    let bad = row("1024", "9.5").replace(",8,4,1,1,4,1,", ",8,four,1,1,4,1,");
    let e = read_aic_e2e("m.csv", &format!("{HEADER}\n{bad}\n")).unwrap_err().to_string();
    assert!(e.contains("line 2") && !e.contains("record") && !e.contains("line:"), "{e}");
    // A folder that is no corpus, and an InferenceX metadata file without its GPU.
    let tmp = Scratch::new("corpus");
    let dir = tmp.path();
    assert!(read_points(dir).unwrap_err().to_string().contains("not a corpus folder"));
    let dep = dir.join("inferencex-dsr1/dep");
    std::fs::create_dir_all(&dep).unwrap();
    std::fs::write(dep.join("metadata.json"), r#"{"engine": "sglang", "precision": "fp8", "tp": 8}"#).unwrap();
    std::fs::write(dep.join("1024x1024_c4.json"), r#"{"max_concurrency": 4}"#).unwrap();
    let e = read_points(dir).unwrap_err().to_string();
    assert!(e.contains("metadata.json") && e.contains("gpu"), "{e}");
    let o = capsim(&["points", "--corpus", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("gpu"));
}

/// A small fit (one engine on two GPUs) twice: the same bytes; its lookups widen the band for what
/// they lack.
#[test]
fn the_learned_model_is_deterministic_and_widens_for_the_unmeasured() {
    let catalog = Catalog::builtin();
    let e = capsim::corpus::load(&catalog, None).unwrap();
    let some: Vec<_> = e
        .experiments
        .iter()
        .filter(|x| x.engine.as_str() == "vllm" && (x.gpu == "H200 SXM" || x.gpu == "H100 SXM"))
        .collect();
    assert!(some.len() > 100);
    let a = capsim::calibrate::corpus::fit(&catalog, &some, "test").unwrap().model;
    let b = capsim::calibrate::corpus::fit(&catalog, &some, "test").unwrap().model;
    assert_eq!(a.to_toml(), b.to_toml());
    let back = LearnedModel::parse("test", &a.to_toml()).unwrap();
    assert_eq!(back, a);
    let key = |family, name| capsim::hardware::learned::ModelKey { family, name };
    let seen = a.lookup("H200 SXM", "vllm", capsim::units::Dtype::Fp8, key("gqa-dense", "Llama-3.1-70B"), None);
    let unseen = a.lookup("MI355X", "trtllm", capsim::units::Dtype::Fp8, key("no such family", "no such model"), None);
    assert!(seen.matched.iter().filter(|m| **m).count() >= 5, "{:?}", seen.matched);
    assert!(!unseen.matched[LEVELS.iter().position(|l| *l == "gpu").unwrap()]);
    for i in [BW, GEMM] {
        assert!(unseen.sigma_log[i] > seen.sigma_log[i], "{i}: {} vs {}", unseen.sigma_log[i], seen.sigma_log[i]);
    }
    // A TTFT's quantities carry the fit's TTFT residual, the others the residual of both metrics; a
    // TTFT's band is the widest of its quantities'.
    let ttft = a.ttft_residual_sigma_log.expect("the fit states its TTFT residual");
    assert!(ttft > 0.0 && ttft != a.residual_sigma_log, "{ttft} vs {}", a.residual_sigma_log);
    let near = |x: f64, y: f64| (x - y).abs() < 1e-12;
    let full = a.lookup("H200 SXM", "vllm", capsim::units::Dtype::Fp8, key("gqa-dense", "Llama-3.1-70B"), None);
    assert!(full.matched.iter().all(|m| *m), "{:?}", full.matched);
    assert!(near(full.sigma_log[capsim::hardware::learned::REQUEST], ttft));
    assert!(near(full.sigma_log[BW], a.residual_sigma_log));
    assert!(near(full.ttft_sigma_log(), ttft));
    assert!(unseen.ttft_sigma_log() > ttft);
    // Closed-form in-sample errors are reported and finite.
    assert!(a.fit.tpot_median_abs_pct.is_finite() && a.fit.tpot_median_abs_pct < 50.0, "{:?}", a.fit);
}

#[test]
fn a_bad_learned_model_file_is_refused_with_its_key() {
    let catalog = Catalog::builtin();
    let Some(m) = &catalog.learned else { return };
    let mut bad = m.clone();
    bad.global[BW] = 1.5;
    let e = LearnedModel::parse("learned.toml", &bad.to_toml()).unwrap_err().to_string();
    assert!(e.contains("learned.toml") && e.contains("bandwidth_frac"), "{e}");
    let e = LearnedModel::parse("learned.toml", "provenance = 3").unwrap_err().to_string();
    assert!(e.contains("learned.toml"), "{e}");
    // The shipped model carries the exchange's fixed time; a negative or NaN one is refused by key.
    let x = m.exchange.clone().expect("the shipped model fits the exchange between attention-DP ranks");
    assert!(x.latency_s > 0.0 && x.points > 0, "{x:?}");
    for v in [-1e-6, f64::NAN] {
        let mut bad = m.clone();
        bad.exchange = Some(capsim::hardware::learned::ExchangeFit { latency_s: v, ..x.clone() });
        let e = LearnedModel::parse("learned.toml", &bad.to_toml()).unwrap_err().to_string();
        assert!(e.contains("learned.toml") && e.contains("exchange.latency_s"), "{e}");
    }
}

#[test]
fn explain_names_the_receive_and_stream_intervals() {
    let base =
        ["explain", "--model", "DeepSeek-R1", "--gpu", "B200", "--tp", "8", "--engine", "sglang", "--decode", "64"];
    let o = capsim(&[&base[..], &["--scheduler-recv-interval", "30", "--stream-interval", "10"]].concat());
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("once every 30 decode steps") && t.contains("paid once per 10 tokens"), "{t}");
    let plain = text(&capsim(&base));
    assert!(!plain.contains("receive interval") && !plain.contains("paid once per"), "{plain}");
}

#[test]
fn explain_names_the_host_costs() {
    let o = capsim(&["explain", "--model", "Llama-3.1-70B", "--gpu", "H200 SXM", "--tp", "4", "--decode", "64"]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    for part in ["host: step overhead", "host: per sequence", "API server", "coefficients from"] {
        assert!(t.contains(part), "{part} missing:\n{t}");
    }
}

/// InferenceX's TensorRT-LLM token budget follows the script each deployment ran: (CONC + ISL + 64 +
/// 63) / 64 x 64, floored at 8192 by the later scripts and not by the December 2025 slurm scripts
/// (launch_settings.json `trt_max_num_tokens_floor`). At 256 clients and 1,024-token prompts the
/// slurm script gives each rank 1,344 tokens a step: one prompt beside its decodes, not six. The MTP
/// scripts size it by their batch (`trt_max_num_tokens_mtp`).
#[test]
fn trt_token_budget_follows_the_script_the_run_used() {
    let points = builtin_points().unwrap();
    let catalog = Catalog::builtin();
    let budget = |dep: &str, conc: u32, isl: u32| {
        let p = points
            .iter()
            .find(|p| p.id.contains(&format!("/{dep}/")) && p.concurrency == conc && p.isl == isl)
            .unwrap_or_else(|| panic!("{dep} at {conc}"));
        let e = capsim::corpus::express(&catalog, p, &resolves(&catalog)).unwrap();
        (p.launch.as_ref().and_then(|l| l.trt_max_num_tokens), e.deployment.settings.max_num_batched_tokens)
    };
    assert_eq!(
        budget("dsr1-fp4-b200-trt-tp4ep4-dpa-1.1.0rc2.post2", 256, 1024),
        (Some(TrtTokens::Floor(0)), Some(1344))
    );
    assert_eq!(
        budget("dsr1-fp4-b200-trt-tp4ep4-dpa-1.1.0rc2.post2", 256, 8192),
        (Some(TrtTokens::Floor(0)), Some(8512))
    );
    assert_eq!(budget("dsr1-fp8-h200-trt-tp8ep8-1.3.0rc14", 4, 1024), (Some(TrtTokens::Floor(8192)), Some(8192)));
    assert_eq!(capsim::corpus::inferencex_trt_max_num_tokens(TrtTokens::Floor(0), 1024, 4, 0, 1), 1152);
    // The MTP scripts size it by their batch: ((1 + 1) x 256 / 4 + 1024 + 64 + 63) / 64 x 64 under
    // attention DP over 4 ranks, one drafted token.
    let mtp = points
        .iter()
        .find(|p| {
            p.id.contains("/dsr1-fp4-b200-trt-mtp-tp4ep4-dpa-1.1.0rc2.post2/") && p.concurrency == 256 && p.isl == 1024
        })
        .expect("an MTP point");
    assert!(mtp.launch.as_ref().is_some_and(|l| l.trt_max_num_tokens == Some(TrtTokens::Mtp)));
    let e = capsim::corpus::express(&catalog, mtp, &resolves(&catalog)).unwrap();
    assert_eq!(e.deployment.speculative.as_ref().map(|s| s.tokens), Some(1));
    assert_eq!(e.deployment.settings.max_num_batched_tokens, Some(1216));
    assert_eq!(capsim::corpus::inferencex_trt_max_num_tokens(TrtTokens::Mtp, 8192, 4, 3, 1), 8320);
}

/// InferenceX's launch settings that metadata.json leaves unresolved reach each point's engine:
/// B200 SGLang's receive interval by concurrency and its memory fraction, every NVIDIA deployment's
/// stream interval; AMD's scripts set neither.
#[test]
fn launch_settings_reach_the_points_they_were_read_for() {
    let points = builtin_points().unwrap();
    let at = |dep: &str, conc: u32| {
        points
            .iter()
            .find(|p| p.id.contains(&format!("/{dep}/")) && p.concurrency == conc)
            .unwrap_or_else(|| panic!("{dep} at {conc}"))
    };
    let l = at("dsr1-fp8-b200-sglang-tp8-v0.5.12-cu130", 64).launch.clone().unwrap();
    assert_eq!((l.scheduler_recv_interval, l.stream_interval, l.max_running_requests), (Some(30), Some(30), Some(128)));
    assert_eq!(
        at("dsr1-fp8-b200-sglang-tp8-v0.5.12-cu130", 4).launch.as_ref().unwrap().scheduler_recv_interval,
        Some(10)
    );
    // The TP 4 branch of the same script: 10 at any concurrency, and mem_fraction_static 0.95, at
    // which DeepSeek-R1 FP8 fits 4 x B200 (the default 0.854 does not).
    let tp4 = at("dsr1-fp8-b200-sglang-tp4-v0.5.12-cu130", 32);
    let l = tp4.launch.as_ref().unwrap();
    assert_eq!((l.scheduler_recv_interval, l.mem_fraction_static), (Some(10), Some(0.95)));
    let catalog = Catalog::builtin();
    let e = capsim::corpus::express(&catalog, tp4, &resolves(&catalog)).unwrap();
    assert_eq!(
        (e.deployment.settings.scheduler_recv_interval, e.deployment.settings.gpu_memory_utilization),
        (Some(10), Some(0.95))
    );
    let trt = at("dsr1-fp8-h200-trt-tp8ep8-1.3.0rc14", 4).launch.clone().unwrap();
    assert_eq!((trt.stream_interval, trt.scheduler_recv_interval), (Some(10), None));
    let amd = points.iter().filter(|p| p.gpu.starts_with("mi")).filter_map(|p| p.launch.as_ref());
    assert!(amd.clone().all(|l| l.stream_interval.is_none() && l.scheduler_recv_interval.is_none()));
    // Literal flags metadata.json states are read from it: H200's SGLang scripts and AMD's.
    let h200 = at("dsr1-fp8-h200-sglang-tp8-v0.5.9-cu130", 4).launch.clone().unwrap();
    assert_eq!(
        (h200.chunked_prefill_size, h200.max_prefill_tokens, h200.mem_fraction_static, h200.stream_interval),
        (Some(32768), Some(32768), Some(0.82), Some(10))
    );
    // Two launch lines by sequence length (512 and 256 running requests) state no single value.
    assert_eq!(h200.max_running_requests, None);
    assert!(amd.clone().any(|l| l.mem_fraction_static == Some(0.8)));
    // InferenceX's own database rows in aic-e2e take their plain layout's settings.
    let db = |id: &str| points.iter().find(|p| p.id == id).unwrap_or_else(|| panic!("{id}"));
    let l = db("dsr1_h200_sglang_fp8_agg_1024x1024_c16_cfg81").launch.clone().unwrap();
    assert_eq!((l.stream_interval, l.scheduler_recv_interval), (Some(10), None));
    let b200 = points
        .iter()
        .find(|p| p.id.starts_with("dsr1_b200_sglang_fp8_agg") && p.tensor_parallel == 8 && p.concurrency >= 16)
        .expect("a B200 SGLang FP8 database row");
    assert_eq!(b200.launch.as_ref().unwrap().scheduler_recv_interval, Some(30));
    assert!(points.iter().filter(|p| p.set == "aic-e2e" && p.client != Client::InferenceX).all(|p| p.launch.is_none()));
}

/// InferenceX's database rows in aic-e2e: a `dsr1_` row is DeepSeek-R1 (its model_path says
/// DeepSeek-V3), and one that repeats an inferencex-dsr1 point is refused naming that point.
#[test]
fn inferencex_database_rows_are_deepseek_r1_and_replayed_once() {
    let catalog = Catalog::builtin();
    let all = express_all(&catalog, builtin_points().unwrap(), &resolves(&catalog));
    let (dup, why) = all
        .refused
        .iter()
        .find(|(p, _)| p.id == "dsr1_h200_sglang_fp8_agg_1024x1024_c4_cfg81")
        .expect("the database copy of an inferencex-dsr1 point is refused");
    let Refusal::Duplicate(capsim::corpus::Duplicate { of, of_folder_point: true }) = why else { panic!("{why:?}") };
    assert!(of.starts_with("calibration/corpus/inferencex-dsr1/dsr1-fp8-h200-sglang-tp8-v0.5.9-cu130/"), "{of}");
    let twin = all.experiments.iter().find(|e| &e.point.id == of).expect("the folder point is replayed");
    assert!((twin.point.ttft_ms.unwrap().1 - dup.ttft_ms.unwrap().1).abs() < 1e-6);
    let db: Vec<_> = all.experiments.iter().filter(|e| e.point.id.starts_with("dsr1_")).collect();
    assert!(!db.is_empty() && db.iter().all(|e| e.model == "DeepSeek-R1"));
    assert!(all.experiments.iter().all(|e| e.model != "DeepSeek-V3" || !e.point.id.starts_with("dsr1_")));
}

/// NVIDIA's dumps in aic-e2e repeat InferenceX's runs and each other: each copy is refused naming
/// the point replayed in its place, the one whose client is best stated.
#[test]
fn copies_in_aic_e2e_are_replayed_once_as_the_best_stated_point() {
    use capsim::corpus::Duplicate;
    let catalog = Catalog::builtin();
    let all = express_all(&catalog, builtin_points().unwrap(), &resolves(&catalog));
    let refusal = |id: &str| {
        all.refused.iter().find(|(p, _)| p.id == id).map(|(_, r)| r.clone()).unwrap_or_else(|| panic!("{id} refused"))
    };
    // A NVIDIA row that is InferenceX's November 2025 run: the folder point is kept.
    let Refusal::Duplicate(Duplicate { of, of_folder_point: true }) =
        refusal("2026_04_06_deepseek_r1_b200_sxm_sglang_fp4_agg_8192x1024_c8_tp8_ep1_6")
    else {
        panic!("not a copy of the folder point")
    };
    assert!(of.ends_with("dsr1-fp4-b200-sglang-tp8-v0.5.5-cu129-amd64/8192x1024_c8_2025-11-10.json"), "{of}");
    // The April dump repeats the March one: the earlier row is kept.
    let copies: Vec<_> = all
        .refused
        .iter()
        .filter_map(|(p, r)| match r {
            Refusal::Duplicate(d) if !d.of_folder_point => Some((p, d)),
            _ => None,
        })
        .collect();
    assert!(copies.iter().any(|(p, d)| p.id.starts_with("2026_04_06") && d.of.starts_with("2026_03_25")));
    // Every copy names a point that is replayed or refused for another reason than being a copy,
    // with the same measurement.
    for (p, d) in &copies {
        let kept =
            all.experiments.iter().map(|e| &e.point).chain(all.refused.iter().map(|(q, _)| q)).find(|q| q.id == d.of);
        let kept = kept.unwrap_or_else(|| panic!("{} copies {}, which is not in the corpus", p.id, d.of));
        assert!(!all.refused.iter().any(|(q, r)| q.id == kept.id && matches!(r, Refusal::Duplicate(_))));
        assert_eq!((kept.isl, kept.osl, kept.concurrency), (p.isl, p.osl, p.concurrency), "{}", p.id);
        assert!((kept.ttft_ms.unwrap().1 - p.ttft_ms.unwrap().1).abs() < 1e-6 * p.ttft_ms.unwrap().1);
    }
    // No two replayed points are the same measurement.
    let mut seen = std::collections::HashSet::new();
    for e in &all.experiments {
        let p = &e.point;
        let key = (
            e.gpu.clone(),
            p.isl,
            p.osl,
            p.concurrency,
            p.ttft_ms.map(|t| t.1.to_bits()),
            p.tpot_ms.map(|t| t.1.to_bits()),
        );
        assert!(seen.insert(key), "{} is replayed twice", p.id);
    }
}

/// NVIDIA's DeepSeek-R1 rows measured on the day, GPU, engine and image of an InferenceX MTP run ran
/// MTP without saying so: refused. The same image's rows of another day (H200 TensorRT-LLM
/// 1.1.0rc2.post2 on 28 January 2026, when InferenceX ran it plain) are replayed.
#[test]
fn unmarked_mtp_rows_are_refused_with_their_reason() {
    let catalog = Catalog::builtin();
    let all = express_all(&catalog, builtin_points().unwrap(), &resolves(&catalog));
    let refused: Vec<_> =
        all.refused.iter().filter(|(_, r)| matches!(r, Refusal::UnmarkedMtp)).map(|(p, _)| p).collect();
    let runs: std::collections::BTreeSet<_> =
        refused.iter().map(|p| (p.gpu.as_str(), p.engine_version.as_str(), p.date.as_str())).collect();
    let expected = [
        ("b200_sxm", "1.1.0rc2.post2", "2026-01-14"),
        ("b200_sxm", "1.2.0rc6.post3", "2026-02-05"),
        ("b200_sxm", "1.2.0rc6.post3", "2026-02-06"),
        ("h200_sxm", "1.1.0rc2.post2", "2026-01-14"),
    ];
    assert_eq!(runs.into_iter().collect::<Vec<_>>(), expected);
    assert!(refused.iter().all(|p| p.engine == "trtllm" && p.set == "aic-e2e"));
    let replayed = |gpu: &str, version: &str, date: &str| {
        all.experiments.iter().any(|e| {
            let p = &e.point;
            p.set == "aic-e2e" && p.gpu == gpu && p.engine_version == version && p.date == date
        })
    };
    assert!(replayed("h200_sxm", "1.1.0rc2.post2", "2026-01-28"));
    assert!(replayed("b200_sxm", "1.2.0rc6.post2", "2026-01-29"));
    let o = capsim(&["points", "--corpus"]);
    assert!(text(&o).contains("MTP the row does not mark"), "{}", text(&o));
}

/// A run whose p99 TTFT is beyond twice its median E2E stalled once (InferenceX's SGLang 0.5.5 runs
/// on B200 waited about 75 s at the start): its median TTFT is compared, not the stall-laden mean.
#[test]
fn a_stalled_run_is_compared_on_its_median_ttft() {
    use capsim::metrics::StatKind;
    let points = builtin_points().unwrap();
    let find = |suffix: &str| points.iter().find(|p| p.id.ends_with(suffix)).unwrap_or_else(|| panic!("{suffix}"));
    // mean 9,188 ms, median 565 ms, p99 98,817 ms against a median E2E of 13,332 ms.
    let stalled = find("dsr1-fp4-b200-sglang-tp8-v0.5.5-cu129-amd64/8192x1024_c8_2025-11-10.json");
    assert_eq!(stalled.ttft_ms.unwrap().0, StatKind::Mean, "the point keeps what the file states");
    let (kind, ms) = stalled.as_compared().ttft_ms.unwrap();
    assert_eq!(kind, StatKind::P50);
    assert!((ms - 564.8048506118357).abs() < 1e-9, "{ms}");
    assert_eq!(stalled.as_compared().tpot_ms.unwrap().0, StatKind::Mean);
    let catalog = Catalog::builtin();
    let all = express_all(&catalog, points.clone(), &resolves(&catalog));
    let e = all.experiments.iter().find(|e| e.point.id == stalled.id).expect("replayed");
    assert_eq!(e.point.ttft_ms.unwrap().0, StatKind::P50, "the replay compares the median");
    // The same deployment's 1K/8K point: p99 70.8 s within twice a 139.5 s request, so its mean stays.
    let long = find("dsr1-fp4-b200-sglang-tp8-v0.5.5-cu129-amd64/1024x8192_c64_2025-11-10.json");
    assert_eq!(long.stalled_ttft_p50_ms, None);
    let n = points.iter().filter(|p| p.stalled_ttft_p50_ms.is_some()).count();
    assert_eq!(n, 11, "11 of the 474 points that state a mean TTFT stalled");
}

/// A corpus folder in a fresh temporary directory (removed when the guard is dropped): one
/// InferenceX deployment with no points, and `text` as inferencex-dsr1/`file` beside it.
fn one_deployment_corpus(tag: &str, file: &str, text: &str) -> Scratch {
    let dir = Scratch::new(tag);
    let dep = dir.join("inferencex-dsr1/dsr1-fp8-h200-sglang-tp8-x");
    std::fs::create_dir_all(&dep).unwrap();
    std::fs::write(dep.join("metadata.json"), r#"{"gpu": "h200", "engine": "sglang", "precision": "fp8", "tp": 8}"#)
        .unwrap();
    std::fs::write(dir.join("inferencex-dsr1").join(file), text).unwrap();
    dir
}

#[test]
fn a_bad_launch_settings_file_names_the_key() {
    use capsim::measured::launch::LaunchTable;
    let ok = r#"{"deployments": {"d": {"script": "s.sh", "scheduler_recv_interval": [[1, 10], [16, 30]]}}}"#;
    let t = LaunchTable::parse("l.json", ok).unwrap();
    assert_eq!(t.at("d", 15).unwrap().scheduler_recv_interval, Some(10));
    assert_eq!(t.at("d", 16).unwrap().scheduler_recv_interval, Some(30));
    assert!(t.at("other", 16).is_none());
    let floor = r#"{"deployments": {"d": {"script": "s.sh", "trt_max_num_tokens_floor": 0}}}"#;
    assert_eq!(
        LaunchTable::parse("l.json", floor).unwrap().at("d", 4).unwrap().trt_max_num_tokens,
        Some(TrtTokens::Floor(0))
    );
    for (bad, key) in [
        (r#"{"deployments": {"d": {"script": "s", "recv": 3}}}"#, "deployments.d.recv"),
        (
            r#"{"deployments": {"d": {"script": "s", "scheduler_recv_interval": [[16, 30], [1, 10]]}}}"#,
            "scheduler_recv_interval",
        ),
        (r#"{"deployments": {"d": {"script": "s", "scheduler_recv_interval": [[1, 0]]}}}"#, "scheduler_recv_interval"),
        (r#"{"deployments": {"d": {"script": "s", "mem_fraction_static": 1.5}}}"#, "mem_fraction_static"),
        (r#"{"deployments": {"d": {"script": "s", "stream_interval": -1}}}"#, "stream_interval"),
        (r#"{"deployments": {"d": {"script": "s", "trt_max_num_tokens_floor": 8.5}}}"#, "trt_max_num_tokens_floor"),
        (r#"{"deployments": {"d": {"script": "s", "trt_max_num_tokens_floor": -1}}}"#, "trt_max_num_tokens_floor"),
        (r#"{"deployments": {"d": {"script": "s", "trt_max_num_tokens_mtp": 1}}}"#, "trt_max_num_tokens_mtp"),
        (
            r#"{"deployments": {"d": {"script": "s", "trt_max_num_tokens_floor": 0, "trt_max_num_tokens_mtp": true}}}"#,
            "deployments.d.trt_max_num_tokens_mtp",
        ),
        (r#"{"deployments": {"d": {"stream_interval": 10}}}"#, "deployments.d.script"),
        (r#"{"deployments": 3}"#, "deployments"),
        ("{", "l.json"),
    ] {
        let e = LaunchTable::parse("l.json", bad).unwrap_err().to_string();
        assert!(e.contains("l.json") && e.contains(key), "{bad}: {e}");
    }
    // An entry for a deployment the corpus folder does not have is an error, not a setting dropped.
    let dir = one_deployment_corpus("launch", "launch_settings.json", ok);
    let e = read_points(dir.path()).unwrap_err().to_string();
    assert!(e.contains("launch_settings.json") && e.contains("deployments.d"), "{e}");
}

/// A point's features are those of the layout it is replayed on, not of its columns: InferenceX's
/// database rows state a single node's TP8 EP8 as 64 GPUs with moe_tp 8 and its vLLM rows the EP
/// ranks as attention DP, both plain layouts (experts whole over the TP group), so they are fitted
/// on; a row with DP attention stays a large deployment.
#[test]
fn a_point_is_large_by_the_layout_it_is_replayed_on() {
    let catalog = Catalog::builtin();
    let all = express_all(&catalog, builtin_points().unwrap(), &resolves(&catalog));
    let get =
        |id: &str| all.experiments.iter().find(|e| e.point.id == id).unwrap_or_else(|| panic!("{id} is replayed"));
    for (id, tp) in
        [("dsr1_h200_trtllm_fp8_agg_1024x1024_c32_cfg181", 8), ("kimik2_5_b200_vllm_fp4_agg_1024x1024_c32_cfg635", 4)]
    {
        let e = get(id);
        assert!(!capsim::corpus::stated_features(&e.point).is_empty(), "{id}: its columns need resolving");
        assert_eq!((e.deployment.tensor_parallel, e.deployment.expert_parallel), (tp, true), "{id}");
        assert!(e.is_plain() && e.features().is_empty(), "{id}: {:?}", e.features());
    }
    let dpa = get("dsr1_h200_trtllm_fp8_agg_8192x1024_c64_cfg183");
    assert_eq!(dpa.features(), vec![capsim::corpus::Feature::AttentionDp]);
    // aiconfigurator's own convention (tp_size per rank, experts tiling tp_size x attention_dp_size
    // GPUs): DeepSeek-R1 `tp 1, dp 8, moe_tp 1, ep 8` at batch 32 and concurrency 256 is 8 GPUs of
    // 8 ranks, experts over all 8. It was refused as attention DP the columns did not make.
    let r1 = get("2026_03_25_deepseek_r1_h200_sxm_trtllm_fp8_agg_1024x8192_c256_tp8_0_ep8_0_1238");
    assert_eq!(r1.deployment.tensor_parallel, 8);
    assert_eq!((r1.deployment.parallel.attention_dp, r1.deployment.parallel.expert_parallel_size), (8, 8));
    // A dense model's batch below the concurrency says why it is refused: no attention DP to run.
    let dense = "qwen_qwen3_32b_qwen_qwen3_32b_gb200_trtllm_agg_4000x1000_c8_tp2_epnone_11";
    let why = all.refused.iter().find(|(p, _)| p.id == dense).map(|(_, r)| r.label()).unwrap();
    assert!(why.contains("dense model") && why.contains("batch_size"), "{why}");
}

/// A disaggregated InferenceX point is replayed with the pools its recipe launched
/// (pd_recipes.json): InferenceX's GB200 TensorRT-LLM key says DP attention for the decode pool of
/// `1ptp4ep4-dpa_4dtp8ep8-dpa`, but its recipe, ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml, runs decode
/// as TP8 EP8 without it, 16 requests per worker, and prefill at 2 requests and 16,640 tokens per
/// rank, both with an FP8 KV cache. AMD's MTP runs draft the tokens their variables say.
#[test]
fn a_disaggregated_point_runs_the_pools_its_recipe_launched() {
    use capsim::units::Dtype;
    let catalog = Catalog::builtin();
    let points = builtin_points().unwrap();
    let find = |id: &str| points.iter().find(|p| p.id.ends_with(id)).unwrap_or_else(|| panic!("{id}"));
    let p =
        find("dsr1-fp4-gb200-dynamo-trt-1ptp4ep4-dpa_4dtp8ep8-dpa_4+32gpu-0.8.1.post2/8192x1024_c76_2026-01-31.json");
    assert!(p.pd_launch.as_ref().unwrap().source.contains("ctx1_gen4_tep8_batch16_eplb0_mtp0.yaml"));
    let e = capsim::corpus::express(&catalog, p, &resolves(&catalog)).unwrap();
    let pd = e.pd.as_ref().unwrap();
    let (pre, dec) = (&pd.prefill, &pd.decode);
    assert_eq!((dec.tensor_parallel, dec.parallel.attention_dp, dec.expert_parallel), (8, 1, true));
    assert_eq!(
        (dec.settings.max_num_seqs, dec.settings.max_num_batched_tokens, dec.settings.stream_interval),
        (Some(16), Some(16), Some(100))
    );
    assert_eq!((pre.tensor_parallel, pre.parallel.attention_dp), (4, 4));
    // Its context workers run attention DP without balancing: the recipe has no attention_dp_config
    // (TensorRT-LLM's default, enable_balance false), where InferenceX's single-node scripts turn it on.
    assert_eq!(pre.settings.attention_dp_balance, Some(false));
    assert_eq!((pre.settings.max_num_seqs, pre.settings.max_num_batched_tokens), (Some(2), Some(16640)));
    assert_eq!((pre.settings.free_gpu_memory_fraction, dec.settings.free_gpu_memory_fraction), (Some(0.6), Some(0.9)));
    assert_eq!((pre.kv_dtype, dec.kv_dtype), (Dtype::Fp8, Dtype::Fp8));
    assert_eq!((pd.prefill_workers, pd.decode_workers), (1, 4));
    // An MI355X SGLang MTP run whose config entry says DECODE_MTP_SIZE=1: one drafted token, where
    // capsim's default for AMD SGLang MTP is 3.
    let mtp = find("dsr1-fp4-mi355x-mori-sglang-mtp-1ptp4_2dtp8_4+16gpu-sglang-0.5.9-rocm720-mi35x-mori-0227-3/8192x1024_c64_2026-03-13.json");
    let e = capsim::corpus::express(&catalog, mtp, &resolves(&catalog)).unwrap();
    assert_eq!(e.pd.as_ref().unwrap().decode.speculative.as_ref().unwrap().tokens, 1);
    // A December 2025 GB200 Dynamo SGLang run launched by node counts (no recipe named: ai-dynamo's
    // frozen scripts): metadata.json's placeholders say `tp: 1, ep: 1, dp-attn: true`; the srt-slurm
    // recipe with its nodes and workers runs each decode worker over its 24 GPUs with DP attention and
    // DeepEP, 256 experts + 32 redundant copies, which 24 GPUs share evenly.
    let wide =
        find("dsr1-fp8-gb200-dynamo-sglang-6ptp1-dpa_1dtp1-dpa_48+24gpu-0.5.1-rc0.pre1/8192x1024_c512_2025-12-09.json");
    assert!(wide.pd_launch.as_ref().unwrap().source.contains("max-tpt-6p1d.yaml"), "{:?}", wide.pd_launch);
    let e = capsim::corpus::express(&catalog, wide, &resolves(&catalog)).unwrap();
    let (pre, dec) = (&e.pd.as_ref().unwrap().prefill, &e.pd.as_ref().unwrap().decode);
    assert_eq!(
        (
            dec.tensor_parallel,
            dec.parallel.attention_dp,
            dec.parallel.expert_parallel_size,
            dec.parallel.redundant_experts
        ),
        (24, 24, 24, 32)
    );
    assert_eq!((pre.tensor_parallel, pre.parallel.attention_dp, pre.parallel.expert_parallel_size), (8, 8, 8));
    // Its low-latency sibling runs TP4 without DP attention, though the key says dp-attn.
    let low =
        find("dsr1-fp8-gb200-dynamo-sglang-1ptp1-dpa_4dtp1-dpa_4+16gpu-v0.5.5.post2/1024x1024_c128_2025-12-19.json");
    let e = capsim::corpus::express(&catalog, low, &resolves(&catalog)).unwrap();
    let (pre, dec) = (&e.pd.as_ref().unwrap().prefill, &e.pd.as_ref().unwrap().decode);
    assert_eq!((dec.tensor_parallel, dec.parallel.attention_dp), (4, 1));
    // Its schedulers poll for new requests every 10 iterations (`scheduler-recv-interval: 10`).
    assert_eq!((pre.settings.scheduler_recv_interval, dec.settings.scheduler_recv_interval), (Some(10), Some(10)));
    // InferenceX's database row of the same deployment (aic-e2e: moe_tp 32, moe_ep 1, the key's
    // placeholders) runs the recipe a folder point of that deployment ran, lent with its source.
    let db = find("dsr1_gb200_sglang_fp8_disagg_1024x1024_c4096_cfg236");
    let lent = db.pd_launch.as_ref().expect("lent");
    assert!(lent.source.contains("max-tpt-2p1d.yaml") && lent.source.contains("lent by"), "{}", lent.source);
    let e = capsim::corpus::express(&catalog, db, &resolves(&catalog)).unwrap();
    let (pre, dec) = (&e.pd.as_ref().unwrap().prefill, &e.pd.as_ref().unwrap().decode);
    assert_eq!((dec.tensor_parallel, dec.parallel.attention_dp, dec.parallel.expert_parallel_size), (32, 32, 32));
    assert_eq!((pre.tensor_parallel, pre.parallel.attention_dp, pre.parallel.expert_parallel_size), (8, 8, 8));
    // Points without a recipe keep metadata.json's pools; no aggregated point has one, and no row but
    // InferenceX's (its folders' and its database's).
    assert!(points
        .iter()
        .filter(|p| p.pd_launch.is_some())
        .all(|p| p.disaggregated && (p.set == "inferencex-dsr1" || p.is_inferencex_db_row())));
}

#[test]
fn a_bad_pd_recipes_file_names_the_key() {
    use capsim::measured::pd_recipes::PdRecipes;
    let ok = r#"{"points": {"d/f.json": {"source": "r.yaml", "prefill": {"max_batch_size": 2}, "decode": {"spec_tokens": 0, "kv_dtype": "fp8", "redundant_experts": 0, "scheduler_recv_interval": 10}}}}"#;
    let t = PdRecipes::parse("pd.json", ok).unwrap();
    assert_eq!(t.at("d", "f.json").unwrap().prefill.settings.max_num_seqs, Some(2));
    assert_eq!(t.at("d", "f.json").unwrap().decode.redundant_experts, Some(0));
    assert_eq!(t.at("d", "f.json").unwrap().decode.settings.scheduler_recv_interval, Some(10));
    for (bad, key) in [
        (r#"{"points": {"d/f.json": {"prefill": {}}}}"#, "points.d/f.json.source"),
        (r#"{"points": {"d/f.json": {"source": "s", "prefill": {"batch": 2}}}}"#, "points.d/f.json.prefill.batch"),
        (r#"{"points": {"d/f.json": {"source": "s", "decode": {"max_batch_size": 0}}}}"#, "decode.max_batch_size"),
        (r#"{"points": {"d/f.json": {"source": "s", "decode": {"spec_tokens": -1}}}}"#, "decode.spec_tokens"),
        (
            r#"{"points": {"d/f.json": {"source": "s", "decode": {"redundant_experts": 1.5}}}}"#,
            "decode.redundant_experts",
        ),
        (
            r#"{"points": {"d/f.json": {"source": "s", "prefill": {"attention_dp_balance": 1}}}}"#,
            "prefill.attention_dp_balance",
        ),
        (
            r#"{"points": {"d/f.json": {"source": "s", "prefill": {"mem_fraction_static": 1.2}}}}"#,
            "mem_fraction_static",
        ),
        (r#"{"points": {"d/f.json": {"source": "s", "prefill": {"kv_dtype": "int3"}}}}"#, "prefill.kv_dtype"),
        (
            r#"{"points": {"d/f.json": {"source": "s", "prefill": {"tensor_parallel": 4, "attention_dp": 3}}}}"#,
            "prefill.attention_dp",
        ),
        (r#"{"points": {"d/f.json": {"source": "s", "pools": {}}}}"#, "points.d/f.json.pools"),
        (r#"{"points": 3}"#, "points"),
        (r#"{"points": {}, "skipped": {"x": 1}}"#, "skipped"),
        ("{", "pd.json"),
    ] {
        let e = PdRecipes::parse("pd.json", bad).unwrap_err().to_string();
        assert!(e.contains("pd.json") && e.contains(key), "{bad}: {e}");
    }
    // An entry for a point the corpus folder does not have is an error, not a setting dropped.
    let dir = one_deployment_corpus("pd-recipes", "pd_recipes.json", ok);
    let e = read_points(dir.path()).unwrap_err().to_string();
    assert!(e.contains("pd_recipes.json") && e.contains("points.d/f.json"), "{e}");
}
