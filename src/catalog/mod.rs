//! Catalogs of GPUs and model architectures. The files under models/ are embedded at build time so the
//! installed binary works from any directory; files named on the command line add to or override them.

pub mod config_json;
pub mod gpu;
pub mod model;

pub use gpu::GpuSpec;
pub use model::{DsaSpec, LinearAttnSpec, MlaSpec, ModelArch, MoeSpec};

use crate::error::{read_file, toml_error, Error, Result};
use crate::hardware::SharedModel;
use serde::Deserialize;
use std::path::Path;

const GPUS_TOML: &str = include_str!("../../models/gpus.toml");
const MODELS_TOML: &str = include_str!("../../models/models.toml");
const HARDWARE_TOML: &str = include_str!("../../models/hardware.toml");
const LEARNED_TOML: &str = include_str!("../../models/learned.toml");

/// The embedded config.json files, by file name.
const CONFIGS: &[(&str, &str)] = &[
    ("qwen3-coder-30b-a3b-instruct.json", include_str!("../../models/configs/qwen3-coder-30b-a3b-instruct.json")),
    ("qwen3.5-35b-a3b.json", include_str!("../../models/configs/qwen3.5-35b-a3b.json")),
    ("qwen3-coder-next.json", include_str!("../../models/configs/qwen3-coder-next.json")),
    ("llama-3.1-8b-instruct.json", include_str!("../../models/configs/llama-3.1-8b-instruct.json")),
    ("llama-3.3-70b-instruct.json", include_str!("../../models/configs/llama-3.3-70b-instruct.json")),
    ("mistral-7b-instruct-v0.3.json", include_str!("../../models/configs/mistral-7b-instruct-v0.3.json")),
    ("mixtral-8x7b-instruct-v0.1.json", include_str!("../../models/configs/mixtral-8x7b-instruct-v0.1.json")),
    ("qwen3-8b.json", include_str!("../../models/configs/qwen3-8b.json")),
    ("qwen3-32b.json", include_str!("../../models/configs/qwen3-32b.json")),
    ("qwen3-235b-a22b.json", include_str!("../../models/configs/qwen3-235b-a22b.json")),
    ("gpt-oss-120b.json", include_str!("../../models/configs/gpt-oss-120b.json")),
    ("gpt-oss-20b.json", include_str!("../../models/configs/gpt-oss-20b.json")),
    ("glm-4.5.json", include_str!("../../models/configs/glm-4.5.json")),
    ("glm-4.5-air.json", include_str!("../../models/configs/glm-4.5-air.json")),
    ("glm-4.6.json", include_str!("../../models/configs/glm-4.6.json")),
    ("deepseek-v3.json", include_str!("../../models/configs/deepseek-v3.json")),
    ("kimi-k2.json", include_str!("../../models/configs/kimi-k2.json")),
    ("gemma-2-27b-it.json", include_str!("../../models/configs/gemma-2-27b-it.json")),
    ("gemma-2-9b-it.json", include_str!("../../models/configs/gemma-2-9b-it.json")),
    ("gemma-3-12b-it.json", include_str!("../../models/configs/gemma-3-12b-it.json")),
    ("gemma-3-27b-it.json", include_str!("../../models/configs/gemma-3-27b-it.json")),
    ("llama-4-scout-17b-16e-instruct.json", include_str!("../../models/configs/llama-4-scout-17b-16e-instruct.json")),
    (
        "llama-4-maverick-17b-128e-instruct.json",
        include_str!("../../models/configs/llama-4-maverick-17b-128e-instruct.json"),
    ),
    ("phi-3-mini-4k-instruct.json", include_str!("../../models/configs/phi-3-mini-4k-instruct.json")),
    ("phi-4.json", include_str!("../../models/configs/phi-4.json")),
    ("deepseek-r1.json", include_str!("../../models/configs/deepseek-r1.json")),
    ("kimi-k2.5.json", include_str!("../../models/configs/kimi-k2.5.json")),
    ("minimax-m2.5.json", include_str!("../../models/configs/minimax-m2.5.json")),
    ("glm-5.json", include_str!("../../models/configs/glm-5.json")),
    ("qwen3.5-397b-a17b.json", include_str!("../../models/configs/qwen3.5-397b-a17b.json")),
    ("llama-3.1-70b.json", include_str!("../../models/configs/llama-3.1-70b.json")),
];

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    pub name: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub config: String,
    pub source: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ModelsFile {
    model: Vec<ModelEntry>,
}

/// A catalog entry with its architecture parsed.
#[derive(Debug, Clone)]
pub struct CatalogModel {
    pub entry: ModelEntry,
    pub arch: ModelArch,
}

#[derive(Debug, Clone)]
pub struct Catalog {
    pub gpus: Vec<GpuSpec>,
    pub models: Vec<CatalogModel>,
    /// The shared hardware model deployments without measurements are built from.
    pub hardware: SharedModel,
    /// The step model learned across the corpus (models/learned.toml, `capsim calibrate --corpus`):
    /// where present, a deployment nobody calibrated takes its coefficients from it.
    pub learned: Option<crate::hardware::learned::LearnedModel>,
}

fn norm(s: &str) -> String {
    s.trim().to_ascii_lowercase().replace(['_', ' '], "-")
}

impl Catalog {
    /// The catalogs embedded in the binary.
    pub fn builtin() -> Catalog {
        // The embedded data is checked by the test suite; a failure here is a build defect, not user input.
        Self::from_texts(GPUS_TOML, MODELS_TOML, |file| {
            CONFIGS.iter().find(|(n, _)| *n == file).map(|(_, t)| t.to_string())
        })
        .expect("embedded catalogs are valid (checked by tests)")
    }

    fn from_texts(gpus: &str, models: &str, config: impl Fn(&str) -> Option<String>) -> Result<Catalog> {
        let gpus = gpu::parse_gpus("models/gpus.toml", gpus)?;
        let file: ModelsFile = toml::from_str(models).map_err(|e| toml_error("models/models.toml", models, e))?;
        let mut out = Vec::new();
        for entry in file.model {
            let src = format!("models/configs/{}", entry.config);
            let text = config(&entry.config)
                .ok_or_else(|| Error::input("models/models.toml", None, Some("config"), format!("no file {src}")))?;
            let arch = ModelArch::from_config_json(&entry.name, &src, &text)?;
            out.push(CatalogModel { entry, arch });
        }
        let hardware = if HARDWARE_TOML.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
            SharedModel::prior()
        } else {
            SharedModel::parse("models/hardware.toml", HARDWARE_TOML)?
        };
        let learned = if LEARNED_TOML.lines().all(|l| l.trim().is_empty() || l.trim_start().starts_with('#')) {
            None
        } else {
            Some(crate::hardware::learned::LearnedModel::parse("models/learned.toml", LEARNED_TOML)?)
        };
        Ok(Catalog { gpus, models: out, hardware, learned })
    }

    /// Add or override GPUs from a TOML file in the format of models/gpus.toml.
    pub fn add_gpu_file(&mut self, path: &Path) -> Result<()> {
        let text = read_file(path)?;
        for g in gpu::parse_gpus(&path.display().to_string(), &text)? {
            self.gpus.retain(|x| norm(&x.name) != norm(&g.name));
            self.gpus.push(g);
        }
        Ok(())
    }

    /// A GPU by catalog name or alias. A family name that is no alias ("H100": SXM, PCIe and NVL
    /// differ in clocks, power and links) is refused with the family's members as the choices.
    pub fn gpu(&self, name: &str) -> Result<&GpuSpec> {
        let n = norm(name);
        self.gpus.iter().find(|g| norm(&g.name) == n || g.aliases.iter().any(|a| norm(a) == n)).ok_or_else(|| {
            let family: Vec<String> =
                self.gpus.iter().filter(|g| norm(&g.family) == n).map(|g| g.name.clone()).collect();
            let known = if family.is_empty() { self.gpus.iter().map(|g| g.name.clone()).collect() } else { family };
            Error::Unknown { kind: "GPU", name: name.to_string(), known }
        })
    }

    /// All GPUs whose name, alias or family matches: "H100" gives the three H100 variants.
    pub fn gpu_family(&self, name: &str) -> Vec<&GpuSpec> {
        if let Ok(g) = self.gpu(name) {
            return vec![g];
        }
        let n = norm(name);
        self.gpus.iter().filter(|g| norm(&g.family) == n).collect()
    }

    /// A model by catalog name or alias, or a path to a config.json.
    pub fn model(&self, name_or_path: &str) -> Result<ModelArch> {
        let n = norm(name_or_path);
        if let Some(m) =
            self.models.iter().find(|m| norm(&m.entry.name) == n || m.entry.aliases.iter().any(|a| norm(a) == n))
        {
            return Ok(m.arch.clone());
        }
        let path = Path::new(name_or_path);
        if name_or_path.ends_with(".json") || path.is_file() {
            let text = read_file(path)?;
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or(name_or_path);
            return ModelArch::from_config_json(stem, name_or_path, &text);
        }
        Err(Error::Unknown {
            kind: "model",
            name: name_or_path.to_string(),
            known: self.models.iter().map(|m| m.entry.name.clone()).collect(),
        })
    }
}
