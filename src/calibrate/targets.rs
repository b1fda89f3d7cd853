//! The reports' calibration targets: one (model, GPU, engine) per independent report, with the
//! assumptions made where the report is silent and its unstated engine settings as variants to try.

use super::Target;
use crate::catalog::Catalog;
use crate::data::ReportMeta;
use crate::error::{Error, Result};
use crate::profile::{EngineKind, EngineSettings};
use crate::units::Dtype;

fn slug(s: &str) -> String {
    s.to_ascii_lowercase().replace([' ', '/', '_'], "-")
}

/// The calibration targets: one per independent report.
pub fn targets(metas: &[ReportMeta], catalog: &Catalog) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    for m in metas.iter().filter(|m| m.independent) {
        let mut assumptions = Vec::new();
        let arch = catalog.model(&m.model)?;
        let gpu = match catalog.gpu(&m.gpu) {
            Ok(g) => g.name.clone(),
            Err(_) => {
                let fam = catalog.gpu_family(&m.gpu);
                let g = fam.iter().find(|g| g.name.contains("SXM")).or(fam.first()).ok_or_else(|| {
                    Error::input(
                        format!("calibration/reports/{}", m.report),
                        None,
                        Some("gpu"),
                        format!("unknown GPU `{}`", m.gpu),
                    )
                })?;
                assumptions.push(format!("GPU variant not stated ('{}'): {} assumed", m.gpu, g.name));
                g.name.clone()
            }
        };
        let engine = match m.engine.as_str() {
            "vllm" => EngineKind::Vllm,
            "sglang" => EngineKind::Sglang,
            "trtllm" | "tensorrt-llm" => EngineKind::Trtllm,
            _ => {
                assumptions.push("engine not stated: vLLM V1 scheduling assumed".into());
                EngineKind::Vllm
            }
        };
        let weight_dtype = m.precision().unwrap_or_else(|| {
            assumptions.push("precision not stated: FP8 weights assumed (BF16 weights would leave too little KV for the report's 32K x 8 capacity on 80 GB)".into());
            Dtype::Fp8
        });
        let kv_dtype = m.kv_dtype().unwrap_or_else(|| {
            assumptions
                .push("KV cache dtype not stated: BF16 assumed (the engines' 'auto' for these checkpoints)".into());
            Dtype::Bf16
        });
        let profile_name = format!("{}-{}_{}_{}", slug(&arch.name), weight_dtype, slug(&gpu), engine.as_str());
        let variants = match engine {
            EngineKind::Vllm if m.engine == "vllm" => vec![("vLLM defaults".to_string(), EngineSettings::default())],
            // Engine not stated: its running-sequence cap is an unknown of the experiment too.
            EngineKind::Vllm => vec![
                ("vLLM defaults".to_string(), EngineSettings::default()),
                ("max_num_seqs 128".to_string(), EngineSettings { max_num_seqs: Some(128), ..Default::default() }),
                // A client that holds at most 100 requests in flight (aiohttp's TCPConnector and httpx's
                // default connection limits) caps the running batch exactly as max_num_seqs 100 does.
                (
                    "100 in flight (a client's default connection limit)".to_string(),
                    EngineSettings { max_num_seqs: Some(100), ..Default::default() },
                ),
                ("max_num_seqs 64".to_string(), EngineSettings { max_num_seqs: Some(64), ..Default::default() }),
            ],
            EngineKind::Trtllm => vec![("TensorRT-LLM defaults".to_string(), EngineSettings::default())],
            EngineKind::Sglang => vec![
                ("SGLang defaults (decodes wait during prefill batches)".to_string(), EngineSettings::default()),
                (
                    "SGLang with --enable-mixed-chunk (decodes ride in prefill batches)".to_string(),
                    EngineSettings { enable_mixed_chunk: Some(true), ..Default::default() },
                ),
                (
                    "SGLang with a decode batch between prefill batches (decode-friendly interleaving)".to_string(),
                    EngineSettings { interleave_decode: Some(true), ..Default::default() },
                ),
            ],
        };
        out.push(Target {
            report: m.report.clone(),
            description: format!(
                "{} {} on 1x {} under {} (report {})",
                arch.name,
                weight_dtype.to_string().to_uppercase(),
                gpu,
                engine.as_str(),
                &m.report[..3]
            ),
            profile_name,
            deployment: crate::profile::Deployment {
                model: arch.name.clone(),
                gpu,
                tensor_parallel: 1,
                expert_parallel: false,
                parallel: Default::default(),
                engine,
                weight_dtype,
                kv_dtype,
                settings: EngineSettings::default(),
                speculative: None,
            },
            assumptions,
            variants,
        });
    }
    Ok(out)
}
