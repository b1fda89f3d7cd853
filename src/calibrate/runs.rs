//! Calibration targets for a user's own benchmark runs (the deployment comes from flags, the points
//! from [`crate::measured`]); the fit itself is the same two-stage fit as for the reports.

use super::Target;
use crate::catalog::Catalog;
use crate::error::{Error, Result};
use crate::measured::Run;

pub use crate::profile::Deployment;

/// One line of provenance per input file: path, SHA-256, tool and version, runs read.
#[derive(Debug, Clone)]
pub struct FileProvenance {
    pub path: String,
    pub sha256: String,
    pub tool: String,
    pub runs: usize,
}

impl FileProvenance {
    pub fn line(&self) -> String {
        format!("source: {} (sha256 {}, {}, {} run(s))", self.path, self.sha256, self.tool, self.runs)
    }
}

/// The calibration target of a named set of runs.
pub fn target_for_runs(
    name: &str,
    d: &Deployment,
    runs: &[Run],
    files: &[FileProvenance],
    catalog: &Catalog,
) -> Result<Target> {
    if name.is_empty() || name.contains(['/', '\\']) {
        return Err(Error::flag("--name", format!("must be a plain file name, got `{name}`")));
    }
    let arch = catalog.model(&d.model)?;
    let gpu = catalog.gpu(&d.gpu)?.name.clone();
    let mut assumptions: Vec<String> = files.iter().map(FileProvenance::line).collect();
    let failed: u64 = runs.iter().map(|r| r.failed).sum();
    if failed > 0 {
        assumptions.push(format!(
            "{failed} failed request(s) across the runs are counted, not replayed (each run's replay holds its completed requests)"
        ));
    }
    Ok(Target {
        report: name.to_string(),
        profile_name: name.to_string(),
        description: format!(
            "{} {} on {}x {} under {}, calibrated from {} benchmark run(s)",
            arch.name,
            d.weight_dtype.to_string().to_uppercase(),
            d.tensor_parallel,
            gpu,
            d.engine.as_str(),
            runs.len()
        ),
        // A config.json path stays a path (the profile reads it again); a catalog model by its name.
        deployment: Deployment {
            model: if d.model.ends_with(".json") { d.model.clone() } else { arch.name.clone() },
            gpu,
            ..d.clone()
        },
        assumptions,
        variants: vec![("engine settings as given".to_string(), d.settings.clone())],
    })
}
