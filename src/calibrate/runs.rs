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
    // `.` would write `..toml` and `..fit.txt`: hidden files the user would not find.
    if name.starts_with('.') || name.chars().any(char::is_control) {
        return Err(Error::flag(
            "--name",
            format!("must not start with `.` or hold control characters (it names visible files), got {name:?}"),
        ));
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

/// The engine the runs were served by, where every file that names one names the same (None where
/// none names one). Runs of two engines are two deployments: refused, naming each engine, how many
/// runs and a file of it.
pub fn files_engine(runs: &[Run]) -> Result<Option<crate::profile::EngineKind>> {
    use crate::profile::EngineKind;
    let mut seen: Vec<(&'static str, &str, usize)> = Vec::new();
    for r in runs {
        let Some(e) = r.source.engine else { continue };
        match seen.iter_mut().find(|s| s.0 == e) {
            Some(s) => s.2 += 1,
            None => seen.push((e, r.source.file.as_str(), 1)),
        }
    }
    if seen.len() > 1 {
        let each: Vec<String> = seen.iter().map(|(e, file, n)| format!("{e} ({n} run(s), e.g. {file})")).collect();
        return Err(Error::flag(
            "--runs",
            format!(
                "the files were served by {} engines: {}; a profile is of one deployment: pass the runs of one at a time, or name one with --engine",
                seen.len(),
                each.join(", ")
            ),
        ));
    }
    Ok(seen.pop().and_then(|(e, _, _)| EngineKind::from_name(e)))
}

/// The server release the runs state, where it is one capsim models: SGLang's bench_serving
/// records the server's `/get_server_info` version (`RunSource::tool_version`). A release outside
/// the ones capsim read is said in `notes` and left out (the latest release's behaviour is used).
pub fn files_server_version(runs: &[Run], kind: crate::profile::EngineKind, notes: &mut Vec<String>) -> Option<String> {
    use crate::measured::Tool;
    use crate::profile::{latest_version, oldest_version, EngineKind, EngineVersion};
    let mut versions: Vec<&str> = runs
        .iter()
        .filter(|r| matches!(r.source.tool, Tool::SglangBenchServing) && kind == EngineKind::Sglang)
        .filter_map(|r| r.source.tool_version.as_deref())
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let [v] = versions[..] else { return None };
    let (oldest, newest) = (oldest_version(kind), latest_version(kind));
    match EngineVersion::parse(v) {
        Some(parsed) if parsed >= oldest && parsed <= newest => {
            notes.push(format!("engine release from the files' server_info: {} {v}", kind.as_str()));
            Some(v.to_string())
        }
        _ => {
            notes.push(format!(
                "the files' server release {} {v} is outside the releases capsim read ({oldest} to {newest}): {newest}'s behaviour used",
                kind.as_str()
            ));
            None
        }
    }
}

/// The model the runs measured, as their files name it (None where no file names one). Runs of two
/// models in one folder, or of one checkpoint at two precisions, are two deployments, and one profile
/// fitted to (or checked against) both is right for neither: refused, naming each model, how many
/// runs and a file of it. Two names of one model (an organisation prefix, a catalog alias) are one.
pub fn files_model(runs: &[Run], catalog: &Catalog) -> Result<Option<String>> {
    // (what identifies the model, the first id naming it, its first file, runs)
    let mut seen: Vec<(String, String, String, usize)> = Vec::new();
    for r in runs {
        let Some(id) = r.source.model_id.as_deref().map(str::trim).filter(|id| !id.is_empty()) else {
            continue;
        };
        let key = model_key(id, catalog);
        match seen.iter_mut().find(|s| s.0 == key) {
            Some(s) => s.3 += 1,
            None => seen.push((key, id.to_string(), r.source.file.clone(), 1)),
        }
    }
    if seen.len() > 1 {
        let each: Vec<String> =
            seen.iter().map(|(_, id, file, n)| format!("`{id}` ({n} run(s), e.g. {file})")).collect();
        return Err(Error::flag(
            "--runs",
            format!(
                "the files measure {} different models or checkpoints: {}; a profile is of one deployment: pass the runs of one at a time",
                seen.len(),
                each.join(", ")
            ),
        ));
    }
    Ok(seen.pop().map(|s| s.1))
}

/// What identifies a model id for [`files_model`]: the catalog's architecture where it knows the id,
/// else the id's last path segment, with whether it names an FP8 checkpoint.
fn model_key(id: &str, catalog: &Catalog) -> String {
    let base = catalog
        .model(id)
        .map(|a| a.name)
        .unwrap_or_else(|_| id.trim_end_matches('/').rsplit('/').next().unwrap_or(id).to_ascii_lowercase());
    format!("{base}{}", if is_fp8_name(id) { " fp8" } else { "" })
}

/// Whether a model name says it is an FP8 checkpoint (`...-FP8`, `fp8-dynamic`...).
pub fn is_fp8_name(name: &str) -> bool {
    name.to_ascii_lowercase().contains("fp8")
}

/// Runs whose ITL says the server streamed several tokens per chunk while the deployment streams
/// every token: their mean ITL over their mean TPOT, where both are stated and the ratio is 1.5 or
/// more. A client times each chunk it receives (`vllm bench serve` appends one ITL per SSE chunk), so
/// a server launched with `--stream-interval k` shows an ITL near k TPOTs, and speculative decoding
/// one near the tokens a step emits; replayed token by token, the ITL comes out that many times
/// low (and `calibrate --runs` would fit it). One note per run, naming the flags.
pub fn chunking_notes(runs: &[Run], stream_interval: u32, speculative: bool) -> Vec<String> {
    if stream_interval > 1 || speculative {
        return Vec::new();
    }
    let mean = |r: &Run, metric: &str| {
        r.stats.iter().find(|s| s.metric == metric && s.stat == crate::metrics::StatKind::Mean).map(|s| s.value)
    };
    runs.iter()
        .filter_map(|r| {
            let (itl, tpot) = (mean(r, "itl_ms")?, mean(r, "tpot_ms")?);
            let ratio = itl / tpot;
            (tpot > 0.0 && ratio.is_finite() && ratio >= 1.5).then(|| {
                format!(
                    "{}: its mean ITL is {ratio:.1} x its mean TPOT, so the server sent about {:.0} tokens per streamed chunk \
                     (launched with --stream-interval, or decoding speculatively); the deployment streams every token: \
                     pass --stream-interval {:.0} (or --spec-method) for its ITL to compare",
                    r.label(),
                    ratio.round(),
                    ratio.round()
                )
            })
        })
        .collect()
}

/// Why the replay of `run` on `profile` gives no value for `stats` (of its `all` statistics), in the
/// run's terms: its load, its lengths against the model's context, or a replay that finished nothing.
pub fn why_not_replayed(profile: &crate::profile::Profile, run: &Run, stats: &[String], all: usize) -> String {
    let msg = |e: Error| match e {
        Error::Input { msg, .. } => msg,
        other => other.to_string(),
    };
    match crate::experiment::run_workload(run) {
        Err(e) => format!("its load cannot be replayed: {}", msg(e)),
        Ok(w) => match w.check_context(profile.arch.max_context, &profile.arch.name) {
            Err(e) => format!(
                "mean lengths {} in / {} out: {}",
                crate::error::fmt_num(run.input_tokens_mean),
                crate::error::fmt_num(run.output_tokens_mean),
                msg(e)
            ),
            Ok(()) if stats.len() >= all => {
                "its replay completed no request (every one rejected by the engine or unfinished)".to_string()
            }
            Ok(()) => format!("its replay gives no value for {}", stats.join(", ")),
        },
    }
}
