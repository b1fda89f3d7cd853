//! Issue 23: the learned step model's structure. A GPU's GEMM throughput is learned relative to its
//! own kernel benchmark; a dense model pays no MoE layer's fixed cost; the NVIDIA rows' request
//! count is an unknown of their source, fitted and used in their replays; the closed form the lab
//! and the fit share is the one the fit minimized.

use capsim::calibrate::corpus::{closed_form, fit_with, replay_points};
use capsim::catalog::Catalog;
use capsim::hardware::learned::{LearnedModel, MOE_OVERHEAD, OVERHEAD};
use capsim::measured::corpus::Client;
use capsim::units::Dtype;

#[test]
fn the_gemm_reference_share_is_the_gpus_own_kernels() {
    let c = Catalog::builtin();
    let share = |g: &str, d: Dtype| c.gpu(g).unwrap().gemm_reference_share(d);
    assert_eq!(share("H100 SXM", Dtype::Fp8), 0.577);
    assert_eq!(share("B200", Dtype::Nvfp4), 0.362);
    assert_eq!(share("GB200", Dtype::Bf16), 0.621);
    // Hopper has no FP4 tensor cores: 4-bit weights run at the BF16 rate, so the BF16 kernels' share.
    assert_eq!(share("H200 SXM", Dtype::Nvfp4), 0.788);
    // A GPU without kernel tables takes the mean of the measured GPUs' share for its precision.
    let fp8_mean = (0.577 + 0.589 + 0.475 + 0.423) / 4.0;
    approx::assert_relative_eq!(share("MI300X", Dtype::Fp8), fp8_mean, max_relative = 1e-12);
    // The variants of a family share its kernels (H100 PCIe is an H100).
    assert_eq!(share("H100 PCIe", Dtype::Fp8), 0.577);
    // The workstation cards have tables of their own, and do not move the data-centre mean.
    assert_eq!(share("RTX PRO 6000", Dtype::Nvfp4), 0.639);
    assert_eq!(share("L40S", Dtype::Bf16), 0.581);
    approx::assert_relative_eq!(share("MI355X", Dtype::Mxfp4), (0.362 + 0.337) / 2.0, max_relative = 1e-12);
    // A GPU without tables whose die and peaks match a measured one takes that one's kernels.
    assert_eq!(share("B300", Dtype::Fp8), 0.475);
    assert_eq!(share("GB300", Dtype::Nvfp4), 0.337);
    assert_eq!(share("H20", Dtype::Fp8), 0.577);
    // A100 has neither tables nor a sibling: the data-centre mean of BF16.
    approx::assert_relative_eq!(
        share("A100", Dtype::Bf16),
        (0.779 + 0.788 + 0.657 + 0.621) / 4.0,
        max_relative = 1e-12
    );
}

#[test]
fn a_dense_model_pays_no_moe_layer_overhead() {
    let c = Catalog::builtin();
    let m = c.learned.as_ref().expect("a learned model ships");
    let gpu = c.gpu("H200 SXM").unwrap();
    let step_overhead = |model: &str| {
        let arch = c.model(model).unwrap();
        let l = m.lookup_arch(&gpu.name, "vllm", Dtype::Fp8, &arch, None);
        let (coef, _) = capsim::hardware::coefficients_from_learned(&l, &c.hardware, &arch, gpu, Dtype::Fp8, 1);
        (coef.step_overhead_s, l.values(), arch)
    };
    let (dense, v, arch) = step_overhead("Llama-3.1-70B");
    assert_eq!(arch.n_moe_layers(), 0);
    approx::assert_relative_eq!(dense, v[OVERHEAD] * arch.n_layers as f64, max_relative = 1e-12);
    let (moe, v, arch) = step_overhead("DeepSeek-R1");
    assert!(arch.n_moe_layers() > 50);
    approx::assert_relative_eq!(
        moe,
        v[OVERHEAD] * arch.n_layers as f64 + v[MOE_OVERHEAD] * arch.n_moe_layers() as f64,
        max_relative = 1e-12
    );
    assert!(v[MOE_OVERHEAD] > 0.0);
}

#[test]
fn nvidia_rows_replay_with_the_fitted_requests_per_client() {
    let c = Catalog::builtin();
    let mut m: LearnedModel = c.learned.clone().expect("a learned model ships");
    for k in &mut m.clients {
        k.requests_per_client = 3.0;
    }
    let ex = capsim::corpus::load(&c, None).unwrap();
    let nvidia = ex.plain().into_iter().find(|e| e.point.client == Client::NvidiaInternal).unwrap();
    let conc = nvidia.point.concurrency as u64;
    let points = replay_points(&m, nvidia);
    assert_eq!(points.len(), nvidia.points.len());
    for p in &points {
        assert_eq!(p.run.as_ref().unwrap().requests, 3 * conc, "fitted requests per client x clients");
    }
    // InferenceX states its count (10 x concurrency): its replay keeps it whatever the fit says.
    let ix = ex.plain().into_iter().find(|e| e.point.client == Client::InferenceX).unwrap();
    for p in replay_points(&m, ix) {
        assert_eq!(p.run.unwrap().requests, 10 * ix.point.concurrency as u64);
    }
    // The shipped model's fitted counts are reported and InferenceX's is its stated 10.
    let shipped = c.learned.as_ref().unwrap();
    let of = |k: &str| shipped.clients.iter().find(|c| c.client == k).unwrap().requests_per_client;
    approx::assert_relative_eq!(of("inferencex"), 10.0, max_relative = 1e-3);
    assert!((1.0..=100.0).contains(&of("nvidia-internal")), "{}", of("nvidia-internal"));
    // A file with an impossible count is refused with the key.
    let mut bad = shipped.clone();
    bad.clients[0].requests_per_client = 0.5;
    let e = LearnedModel::parse("learned.toml", &bad.to_toml()).unwrap_err().to_string();
    assert!(e.contains("clients[0].requests_per_client"), "{e}");
}

/// The closed form that `closed_form` evaluates for any experiment (the lab's held-out stand-in)
/// is, for a fitted experiment with its residual, exactly the prediction the fit minimized.
#[test]
fn the_closed_form_of_a_fit_is_what_it_minimized() {
    let c = Catalog::builtin();
    let ex = capsim::corpus::load(&c, None).unwrap();
    let some: Vec<_> =
        ex.plain().into_iter().filter(|e| e.engine.as_str() == "trtllm" && e.gpu == "H100 SXM").collect();
    assert!(some.len() > 50);
    let f = fit_with(&c, &some, "test", 0).unwrap();
    assert_eq!(f.predictions.len(), some.len());
    for (k, ttft, tpot) in &f.predictions {
        let (t, p) = closed_form(&c, &f.model, some[*k], true).unwrap();
        approx::assert_relative_eq!(t, *ttft, max_relative = 1e-9);
        approx::assert_relative_eq!(p, *tpot, max_relative = 1e-9);
    }
}

#[test]
fn a_model_nobody_measured_takes_its_kernel_family_before_the_global_values() {
    use capsim::hardware::learned::{model_family, ModelKey, LEVELS};
    let c = Catalog::builtin();
    let fam = |m: &str| model_family(&c.model(m).unwrap());
    for m in ["DeepSeek-R1", "DeepSeek-V3", "Kimi-K2.5", "GLM-5"] {
        assert_eq!(fam(m), "mla-moe", "{m}");
    }
    assert_eq!(fam("Llama-3.1-8B-Instruct"), "gqa-dense");
    assert_eq!(fam("Qwen3-32B"), "gqa-dense");
    assert_eq!(fam("Qwen3-235B-A22B"), "gqa-moe");
    assert_eq!(fam("gpt-oss-120b"), "gqa-moe");
    assert_eq!(fam("Qwen3.5-397B-A17B"), "hybrid-moe");
    let m = c.learned.as_ref().expect("a learned model ships");
    let level = |name: &str| LEVELS.iter().position(|l| *l == name).unwrap();
    // A new MLA MoE checkpoint: the family is matched, the model is not, and its values are the
    // family's, not the global ones (which a new GQA dense model gets apart from its own family's).
    let new_mla = m.lookup("H200 SXM", "sglang", Dtype::Fp8, ModelKey { family: "mla-moe", name: "new-mla" }, None);
    let new_gqa = m.lookup("H200 SXM", "sglang", Dtype::Fp8, ModelKey { family: "gqa-dense", name: "new-gqa" }, None);
    let nothing = m.lookup("H200 SXM", "sglang", Dtype::Fp8, ModelKey { family: "none", name: "none" }, None);
    assert!(new_mla.matched[level("family")] && !new_mla.matched[level("model")]);
    assert!(!nothing.matched[level("family")]);
    assert_ne!(new_mla.values(), new_gqa.values());
    assert_ne!(new_mla.values(), nothing.values());
    // The family's spread replaces the unmatched family level's: a family member is surer.
    assert!(new_mla.sigma_log[capsim::hardware::learned::BW] < nothing.sigma_log[capsim::hardware::learned::BW]);
}

/// InferenceX's files keep the median TTFT: the closed form the fit minimizes predicts a median
/// for them (no first-round burst, which is all above it), below the mean it predicts for the same
/// point stated as a mean, and the more so the higher the concurrency (the larger the burst).
#[test]
fn a_median_ttft_is_fitted_as_a_median() {
    use capsim::metrics::StatKind;
    let c = Catalog::builtin();
    let m = c.learned.as_ref().expect("a learned model ships");
    let ex = capsim::corpus::load(&c, None).unwrap();
    let medians: Vec<_> = ex
        .plain()
        .into_iter()
        .filter(|e| matches!(e.point.ttft_ms, Some((StatKind::P50, _))) && e.point.concurrency >= 16)
        .collect();
    assert!(medians.len() > 100, "{}", medians.len());
    let mut gaps = Vec::new();
    for e in medians.iter().take(40) {
        let (median, _) = closed_form(&c, m, e, true).unwrap();
        let mut as_mean = (*e).clone();
        as_mean.point.ttft_ms = as_mean.point.ttft_ms.map(|(_, v)| (StatKind::Mean, v));
        let (mean, _) = closed_form(&c, m, &as_mean, true).unwrap();
        assert!(median < mean, "{}: median {median} vs mean {mean}", e.point.id);
        gaps.push(mean / median);
    }
    assert!(gaps.iter().any(|g| *g > 1.2), "{gaps:?}");
}

/// The API server streams every running sequence's token each step; a request's own API time
/// (request_overhead_s) gets what that leaves: it takes overhead / (1 - busy), busy = seconds per
/// streamed token x sequences / step. With 10 ms steps of 16 sequences at 100 us per token the
/// server is 16% busy, so a 50 ms overhead becomes about 59.5 ms; decoding is untouched; nothing
/// changes where the cost is 0.
#[test]
fn a_requests_api_time_stretches_with_the_tokens_streamed() {
    use capsim::sim::{simulate, SimOptions};
    use capsim::workload::{Arrivals, Workload};
    let w = Workload::fixed(
        Arrivals::ClosedLoop { clients: 16, think_time_s: 0.0, think_exponential: false },
        64,
        100,
        Some(800),
    )
    .unwrap();
    let run = |api: f64| {
        let mut p = crate::const_profile("vllm", 0.01, "");
        p.coefficients.request_overhead_s = 0.05;
        p.coefficients.api_per_token_s = api;
        let o = simulate(&p, &w, 3, SimOptions::default());
        let n = o.records.len() as f64;
        let ttft = o.records.iter().map(|r| r.ttft_s()).sum::<f64>() / n;
        let gap = o.records.iter().map(|r| (r.e2e_s() - r.ttft_s()) / 99.0).sum::<f64>() / n;
        (ttft, gap)
    };
    let (t0, g0) = run(0.0);
    let (t1, g1) = run(1e-4);
    let (t3, _) = run(3e-4);
    approx::assert_relative_eq!(g0, 0.01, max_relative = 1e-6);
    approx::assert_relative_eq!(g1, 0.01, max_relative = 1e-6);
    let stretch = 0.05 / (1.0 - 1e-4 * 16.0 / 0.01) - 0.05;
    assert!(((t1 - t0) / stretch - 1.0).abs() < 0.15, "{t0} -> {t1}: {} vs {stretch}", t1 - t0);
    assert!(t3 > t1, "{t1} vs {t3}");
    // The learned model ships a positive cost, and explain names it.
    let c = Catalog::builtin();
    let m = c.learned.as_ref().expect("a learned model ships");
    assert!(m.global[capsim::hardware::learned::API_TOKEN] > 0.0);
}

/// A MoE expert split over TP GPUs into slices of N columns runs its grouped GEMMs at N / (N + 256)
/// of a whole expert's rate: DeepSeek-R1 (2,048 columns) split 8 ways at 0.5, whole at 0.89. The
/// learned share is the whole expert's; a dense model has no experts to slice.
#[test]
fn an_expert_split_over_tp_runs_at_its_slice_rate() {
    use capsim::hardware::learned::grouped_slice_efficiency;
    let c = Catalog::builtin();
    let r1 = c.model("DeepSeek-R1").unwrap();
    approx::assert_relative_eq!(grouped_slice_efficiency(&r1, 8), 0.5, max_relative = 1e-12);
    approx::assert_relative_eq!(grouped_slice_efficiency(&r1, 1), 2048.0 / 2304.0, max_relative = 1e-12);
    assert_eq!(grouped_slice_efficiency(&c.model("Llama-3.1-70B").unwrap(), 8), 1.0);
    let m = c.learned.as_ref().expect("a learned model ships");
    let gpu = c.gpu("B200").unwrap();
    let l = m.lookup_arch(&gpu.name, "sglang", Dtype::Fp8, &r1, None);
    let grouped = |moe_tp| capsim::hardware::coefficients_from_learned(&l, &c.hardware, &r1, gpu, Dtype::Fp8, moe_tp).0;
    let (split, whole) = (grouped(8).grouped_gemm_rel, grouped(1).grouped_gemm_rel);
    approx::assert_relative_eq!(whole / split, (2048.0 / 2304.0) / 0.5, max_relative = 1e-9);
    // The same through a deployment: TP 8 with experts split, and with experts whole on each GPU.
    let explain = |extra: &[&str]| {
        let mut args = vec!["explain", "--model", "DeepSeek-R1", "--gpu", "B200", "--tp", "8", "--engine", "sglang"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--precision", "fp8", "--decode", "0", "--prefill", "8192", "--json"]);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_capsim")).args(&args).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["parts_s"]["expert_matmul_s"].as_f64().unwrap_or_else(|| panic!("{v}"))
    };
    let (t_split, t_whole) = (explain(&[]), explain(&["--expert-parallel"]));
    approx::assert_relative_eq!(t_split / t_whole, (2048.0 / 2304.0) / 0.5, max_relative = 1e-6);
}
