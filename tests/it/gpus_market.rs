//! The GPUs the corpus and buyers name (issue 23): B300, GB200, GB300, H20, MI325X, MI355X and the
//! RTX PRO 6000 Blackwell Server join the catalog with sourced figures, reachable by the corpus's
//! spellings, consistent with each other, and listed by `capsim gpus`.

use capsim::catalog::gpu::LinkKind;
use capsim::catalog::Catalog;
use capsim::units::Dtype;
use std::process::Command;

/// The new GPUs by catalog name, each with the spellings that must reach it.
const NEW: &[(&str, &[&str])] = &[
    ("B300", &["b300", "b300_sxm", "B300 SXM"]),
    ("GB200", &["gb200", "GB200 NVL72"]),
    ("GB300", &["gb300", "GB300 NVL72"]),
    ("H20", &["h20"]),
    ("MI325X", &["mi325x", "Instinct MI325X"]),
    ("MI355X", &["mi355x", "Instinct MI355X"]),
    (
        "RTX PRO 6000 Blackwell Server",
        &[
            "rtx-pro-6000",
            "rtx_pro_6000",
            "RTX PRO 6000",
            "rtx_pro_6000_server",
            "RTX PRO 6000 Blackwell Server Edition",
        ],
    ),
];

#[test]
fn new_gpus_resolve_by_name_and_alias() {
    let c = Catalog::builtin();
    for (name, aliases) in NEW {
        let g = c.gpu(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&g.name, name);
        for a in *aliases {
            assert_eq!(&c.gpu(a).unwrap_or_else(|e| panic!("{a}: {e}")).name, name, "alias {a}");
        }
    }
    // The corpus's spellings of GPUs already in the catalog.
    for (spelling, name) in [("b200_sxm", "B200"), ("b200", "B200"), ("h100_sxm", "H100 SXM"), ("h200_sxm", "H200 SXM")]
    {
        assert_eq!(c.gpu(spelling).unwrap().name, name, "{spelling}");
    }
    // H20 is not H200 (and "h200" stays the H200 SXM).
    assert_eq!(c.gpu("h200").unwrap().name, "H200 SXM");
    assert_ne!(c.gpu("h20").unwrap().name, c.gpu("h200").unwrap().name);
    // Families: the H100 family still has its three variants, the new GPUs are their own.
    assert_eq!(c.gpu_family("H100").len(), 3);
    assert_eq!(c.gpu_family("RTX PRO 6000").len(), 1);
}

#[test]
fn every_name_and_alias_reaches_its_own_gpu() {
    // No alias of one GPU shadows another GPU's name or alias (lookup takes the first match).
    let c = Catalog::builtin();
    for g in &c.gpus {
        for s in std::iter::once(&g.name).chain(g.aliases.iter()) {
            assert_eq!(c.gpu(s).unwrap().name, g.name, "`{s}` of {} reaches another GPU", g.name);
        }
    }
}

#[test]
fn figures_are_consistent_and_sourced() {
    let c = Catalog::builtin();
    assert!(c.gpus.len() >= 16, "{} GPUs", c.gpus.len());
    for g in &c.gpus {
        let n = &g.name;
        assert!(g.memory_gb > 0.0 && g.hbm_bandwidth_tb_s > 0.0 && g.bf16_tflops > 0.0 && g.tdp_w > 0.0, "{n}");
        assert!(g.link_bw_gb_s > 0.0 && g.pcie_bw_gb_s > 0.0 && g.link_domain_gpus >= 1, "{n}");
        assert!(!g.source.is_empty() && !g.link_source.is_empty(), "{n}");
        if let Some(fp8) = g.fp8_tflops {
            assert!(fp8 >= g.bf16_tflops, "{n}: fp8 {fp8} < bf16 {}", g.bf16_tflops);
        }
        if let Some(fp4) = g.fp4_tflops {
            let below = g.fp8_tflops.unwrap_or(g.bf16_tflops);
            assert!(fp4 >= below, "{n}: fp4 {fp4} < {below}");
        }
        // What the engines see is at most the marketed size, and not far below it.
        let gib = g.memory_bytes() / (1u64 << 30) as f64;
        assert!(gib <= g.memory_gb * 1.01 && gib >= g.memory_gb * 0.9, "{n}: {gib} GiB of {} GB", g.memory_gb);
        if g.device_memory_bytes.is_some() {
            assert!(g.device_memory_source.as_deref().is_some_and(|s| !s.is_empty()), "{n}");
        }
        // A PCIe card's domain is itself; NVLink and xGMI domains hold several GPUs.
        match g.link {
            LinkKind::Pcie => assert_eq!(g.link_domain_gpus, 1, "{n}"),
            LinkKind::Nvlink | LinkKind::Xgmi => assert!(g.link_domain_gpus >= 2, "{n}"),
        }
    }
}

/// The figures as the sources give them (models/gpus.toml names each source), so that an edit to the
/// catalog shows up here.
#[test]
fn new_gpus_carry_their_sourced_figures() {
    let c = Catalog::builtin();
    // (name, memory_gb, TB/s, bf16, fp8, fp4, W, link GB/s one direction, link domain, PCIe GB/s)
    #[allow(clippy::type_complexity)]
    let rows: &[(&str, f64, f64, f64, Option<f64>, Option<f64>, f64, f64, u32, f64)] = &[
        ("B200", 180.0, 7.7, 2250.0, Some(4500.0), Some(9000.0), 1000.0, 900.0, 8, 128.0),
        ("B300", 288.0, 7.75, 2250.0, Some(4500.0), Some(14000.0), 1100.0, 900.0, 8, 128.0),
        ("GB200", 186.0, 8.0, 2500.0, Some(5000.0), Some(10000.0), 1200.0, 900.0, 72, 64.0),
        ("GB300", 288.0, 8.0, 2500.0, Some(5000.0), Some(15000.0), 1400.0, 900.0, 72, 64.0),
        ("H20", 96.0, 4.0, 148.0, Some(296.0), None, 400.0, 450.0, 8, 64.0),
        ("MI325X", 256.0, 6.0, 1307.0, Some(2615.0), None, 1000.0, 448.0, 8, 64.0),
        ("MI355X", 288.0, 8.0, 2516.6, Some(5033.2), Some(10066.4), 1400.0, 535.5, 8, 64.0),
        ("RTX PRO 6000 Blackwell Server", 96.0, 1.792, 467.8, Some(935.6), Some(1871.2), 600.0, 64.0, 1, 64.0),
    ];
    for &(name, mem, bw, bf16, fp8, fp4, w, link, domain, pcie) in rows {
        let g = c.gpu(name).unwrap();
        assert_eq!(
            (g.memory_gb, g.hbm_bandwidth_tb_s, g.bf16_tflops, g.fp8_tflops, g.fp4_tflops, g.tdp_w),
            (mem, bw, bf16, fp8, fp4, w),
            "{name}"
        );
        assert_eq!((g.link_bw_gb_s, g.link_domain_gpus, g.pcie_bw_gb_s), (link, domain, pcie), "{name}");
    }
    // Links: NVLink on the NVIDIA parts but the PCIe card, Infinity Fabric on AMD's.
    assert_eq!(c.gpu("gb200").unwrap().link, LinkKind::Nvlink);
    assert_eq!(c.gpu("h20").unwrap().link, LinkKind::Nvlink);
    assert_eq!(c.gpu("mi325x").unwrap().link, LinkKind::Xgmi);
    assert_eq!(c.gpu("mi355x").unwrap().link, LinkKind::Xgmi);
    assert_eq!(c.gpu("rtx_pro_6000").unwrap().link, LinkKind::Pcie);
    // The NVL72 sources name the Grace CPU's NVLink-C2C, which the catalog has no field for.
    for n in ["GB200", "GB300"] {
        assert!(c.gpu(n).unwrap().link_source.contains("NVLink-C2C"), "{n}");
    }
    // Unverified figures say so where they are used.
    assert!(c.gpu("H20").unwrap().source.contains("UNVERIFIED"));
    assert!(c.gpu("H20").unwrap().link_source.contains("UNVERIFIED"));
}

#[test]
fn engine_memory_follows_nvidia_smi_where_the_marketed_size_overstates_it() {
    let c = Catalog::builtin();
    let mib = |n: &str| c.gpu(n).unwrap().memory_bytes() / (1u64 << 20) as f64;
    // nvidia-smi's totals as aiconfigurator records them (FACTS-gpus-2026.md).
    assert_eq!(mib("B300"), 275_040.0);
    assert_eq!(mib("GB200"), 189_471.0);
    assert_eq!(mib("GB300"), 284_208.0);
    assert_eq!(mib("RTX PRO 6000 Blackwell Server"), 97_887.0);
    // 288 GB marketed, about 268.6 GiB seen: far below 0.99 x 288 GiB.
    assert!(mib("B300") / 1024.0 < 0.95 * 288.0);
}

#[test]
fn fp4_runs_natively_on_blackwell_and_cdna4_only() {
    let c = Catalog::builtin();
    for n in ["B200", "B300", "GB200", "GB300", "MI355X", "RTX PRO 6000 Blackwell Server"] {
        let g = c.gpu(n).unwrap();
        assert!(g.runs_natively(Dtype::Nvfp4) && g.runs_natively(Dtype::Mxfp4), "{n}");
        assert_eq!(g.dense_flops_s(Dtype::Mxfp4), g.fp4_tflops.unwrap() * 1e12, "{n}");
    }
    for n in ["H20", "MI325X", "H200 SXM"] {
        let g = c.gpu(n).unwrap();
        assert!(!g.runs_natively(Dtype::Nvfp4) && g.runs_natively(Dtype::Fp8), "{n}");
        // 4-bit weights fall back to the BF16 rate.
        assert_eq!(g.dense_flops_s(Dtype::Nvfp4), g.bf16_tflops * 1e12, "{n}");
    }
}

#[test]
fn nvl72_keeps_large_groups_on_nvlink() {
    let c = Catalog::builtin();
    // 16 GPUs: within one NVL72 rack, on NVLink; past an HGX B200 node's 8, over PCIe.
    let gb = c.gpu("GB200").unwrap().collectives(16);
    let b = c.gpu("B200").unwrap().collectives(16);
    assert_eq!(gb.bw_bytes_s, 900e9 * capsim::catalog::gpu::LINK_EFFICIENCY);
    assert_eq!(b.bw_bytes_s, 128e9 * capsim::catalog::gpu::LINK_EFFICIENCY);
    assert!(gb.all_reduce_s(64e6) < b.all_reduce_s(64e6));
    // MI355X's 8-GPU Infinity Fabric is faster than MI325X's.
    let m5 = c.gpu("MI355X").unwrap().collectives(8);
    let m3 = c.gpu("MI325X").unwrap().collectives(8);
    assert!(m5.all_reduce_s(64e6) < m3.all_reduce_s(64e6));
}

fn capsim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).current_dir(std::env::temp_dir()).output().unwrap()
}

#[test]
fn capsim_gpus_lists_the_new_gpus() {
    let o = capsim(&["gpus"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    for (name, _) in NEW {
        assert!(table.contains(name), "{name} missing from `capsim gpus`:\n{table}");
    }
    let o = capsim(&["gpus", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v.as_array().unwrap().iter().map(|g| g["name"].as_str().unwrap()).collect();
    for (name, _) in NEW {
        assert!(names.contains(name), "{name} missing from `capsim gpus --json`: {names:?}");
    }
    assert_eq!(names.len(), Catalog::builtin().gpus.len());
}

/// `capsim gpus` lists the FP4 tensor rate where the catalog has one (B200's, which issue 23 asks
/// for), in the table and the JSON; a GPU without FP4 shows none.
#[test]
fn gpus_lists_fp4_where_the_catalog_has_it() {
    let o = capsim(&["gpus", "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let by = |n: &str| v.as_array().unwrap().iter().find(|g| g["name"] == n).unwrap().clone();
    let c = capsim::catalog::Catalog::builtin();
    assert_eq!(by("B200")["fp4_tflops"].as_f64(), c.gpu("B200").unwrap().fp4_tflops);
    assert!(by("B200")["fp4_tflops"].as_f64().is_some_and(|x| x > 0.0));
    assert!(by("H100 SXM")["fp4_tflops"].is_null());
    let text = String::from_utf8(capsim(&["gpus"]).stdout).unwrap();
    assert!(text.lines().next().unwrap().contains("fp4_tflops"), "{text}");
}

/// TensorRT-LLM runs on NVIDIA GPUs only: an AMD GPU under it is refused, naming the engine, not
/// simulated (the audit of 2026-11-28 found it accepted without a word); vLLM and SGLang run there.
#[test]
fn tensorrt_llm_is_refused_on_amd_gpus() {
    for gpu in ["MI300X", "MI325X", "MI355X"] {
        let o =
            capsim(&["simulate", "--model", "gpt-oss-120b", "--gpu", gpu, "--engine", "trtllm", "--concurrency", "2"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("TensorRT-LLM runs on NVIDIA GPUs only"), "{gpu}: {err}");
        assert!(err.contains(gpu) && err.contains("--engine"), "{err}");
        let o =
            capsim(&["simulate", "--model", "gpt-oss-120b", "--gpu", gpu, "--engine", "sglang", "--concurrency", "2"]);
        assert!(o.status.success(), "{gpu}: {}", String::from_utf8_lossy(&o.stderr));
    }
}
