//! A user's own measurements: the result files of the benchmark tools capacity planners run, read into
//! [`Run`]s. Each reader does nothing but turn a file into runs: the load as the tool ran it, the
//! request count, the lengths (per request where the file has them), failed requests, and every
//! measured statistic under capsim's name for the quantity of the same definition (DESIGN.md section
//! 6, FACTS.md's table of metric names). A run then becomes measured points to replay
//! ([`Run::points`]), the same notion of a measurement as a report's printed figure, so calibration and
//! validation have one path.
//!
//! Formats are recognized from content, never from the file name:
//! - `vllm bench serve --save-result` JSON, `--save-detailed`, `--append-result` JSONL ([`bench_serving`]);
//! - SGLang `bench_serving --output-file` JSONL, with or without `--output-details` ([`bench_serving`]);
//! - GuideLLM benchmarks.json, metadata version 1 and 2 ([`guidellm`]);
//! - AIPerf `profile_export_aiperf.json` (+ `profile_export.jsonl` beside it) and GenAI-Perf
//!   `profile_export_genai_perf.json` ([`aiperf`]).
//!
//! A directory is read file by file in name order (as `vllm bench sweep` writes one per point). A
//! file reached twice (a link, a folder given twice) or a copy of one already read (the same bytes
//! under another name; an AIPerf summary with the records beside it) is read once, the other
//! listed as skipped naming both paths.
//!
//! A file a reader recognizes by its signature (the keys its tool always writes) but that lacks a
//! key the replay needs is refused naming that key; a latency the tool always writes that the file
//! lacks is read without, and said (an `(absent` entry of [`Run::not_compared`],
//! [`Run::absent_notes`]).

pub mod aiperf;
pub mod bench_serving;
pub mod corpus;
pub mod guidellm;
pub mod json;
pub mod launch;
pub mod lengths;
pub mod pd_recipes;

use crate::data::{Aggregation, LoadKind, Point};
use crate::error::{Error, Result};
use crate::metrics::StatKind;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;

pub use json::parse_json_lenient;
pub use lengths::LengthPercentiles;

/// Which tool wrote a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    VllmBenchServe,
    SglangBenchServing,
    GuideLlm,
    Aiperf,
    GenaiPerf,
}

impl Tool {
    pub fn as_str(self) -> &'static str {
        match self {
            Tool::VllmBenchServe => "vllm bench serve",
            Tool::SglangBenchServing => "sglang bench_serving",
            Tool::GuideLlm => "guidellm",
            Tool::Aiperf => "aiperf",
            Tool::GenaiPerf => "genai-perf",
        }
    }
}

/// The formats the readers know, for the error about a file none of them recognizes.
pub const FORMATS: &str = "vllm bench serve JSON/JSONL (--save-result, --save-detailed, --append-result), \
SGLang bench_serving JSONL, GuideLLM benchmarks.json (v1, v2), AIPerf profile_export_aiperf.json / \
profile_export.jsonl, GenAI-Perf profile_export_genai_perf.json";

/// Inter-arrival process of an open-loop run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RateProcess {
    /// Gamma gaps with shape = burstiness (`vllm bench serve --burstiness`; 1 = Poisson).
    Gamma { burstiness: f64 },
    /// Evenly spaced sends (GuideLLM `constant`).
    Constant,
}

/// The load as the tool generated it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunLoad {
    /// N clients, each sending its next request when the previous one completes (`--max-concurrency N`
    /// with an unlimited rate, GuideLLM `concurrent`/`synchronous`, AIPerf `--concurrency`).
    Concurrency { clients: u32 },
    /// Every request sent at once: an unlimited rate with no concurrency cap (`--request-rate inf`),
    /// GuideLLM `throughput` without a cap.
    Burst,
    /// An open loop at `rate_per_s`; `max_concurrency` is a cap some tools add on top.
    Rate { rate_per_s: f64, process: RateProcess, max_concurrency: Option<u32> },
}

impl RunLoad {
    pub fn describe(&self) -> String {
        match self {
            RunLoad::Concurrency { clients } => format!("concurrency {clients}"),
            RunLoad::Burst => "burst (all at once)".into(),
            RunLoad::Rate { rate_per_s, process, max_concurrency } => format!(
                "rate {rate_per_s} req/s ({}){}",
                match process {
                    RateProcess::Gamma { burstiness } if *burstiness == 1.0 => "Poisson".to_string(),
                    RateProcess::Gamma { burstiness } => format!("gamma, burstiness {burstiness}"),
                    RateProcess::Constant => "constant".to_string(),
                },
                max_concurrency.map_or(String::new(), |c| format!(", at most {c} in flight"))
            ),
        }
    }

    /// A short name for tables: `concurrency 4`, `burst`, `rate 8/s`.
    pub fn short(&self) -> String {
        match self {
            RunLoad::Concurrency { clients } => format!("concurrency {clients}"),
            RunLoad::Burst => "burst".into(),
            RunLoad::Rate { rate_per_s, .. } => format!("rate {}/s", crate::error::fmt_num(*rate_per_s)),
        }
    }
}

/// One request as the file records it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RequestObs {
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// When the client sent it, seconds after the run's first send (None where the file has no times).
    pub start_s: Option<f64>,
}

/// A measured statistic: capsim's name for the quantity (the unit in the name) and its statistic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeasuredStat {
    /// `ttft_s`, `tpot_ms` (per-request mean gap), `itl_ms` (pooled gaps), `e2e_ms`, `output_tok_s`
    /// (all output tokens over the run's duration), `request_per_s`.
    pub metric: &'static str,
    pub stat: StatKind,
    pub value: f64,
    /// The key in the file it came from.
    pub key: String,
}

/// What every run carries about where it came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSource {
    pub file: String,
    /// Position of the run in its file (JSONL line, GuideLLM benchmark), from 0.
    pub index: usize,
    /// Runs the file holds (the label numbers a run only where there are several).
    pub runs_in_file: usize,
    pub tool: Tool,
    pub tool_version: Option<String>,
    pub model_id: Option<String>,
    /// The serving engine the file names, where it names one (`vllm`, `sglang`, `trtllm`): SGLang's
    /// bench_serving states the server's `server_info`; a `backend` of `vllm`, `sglang` or `trt` is
    /// that engine's own endpoint. `openai` and the like name only the API, so no engine.
    pub engine: Option<&'static str>,
}

/// Inclusive (min, max) ranges of the input and the output lengths.
pub type LengthRanges = ((u32, u32), (u32, u32));

/// One benchmark run read from a file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub source: RunSource,
    pub load: RunLoad,
    /// Requests the tool sent (completed + failed + those cut off).
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    pub input_tokens_mean: f64,
    pub output_tokens_mean: f64,
    /// Completed requests in send order, where the file lists them.
    pub per_request: Vec<RequestObs>,
    pub stats: Vec<MeasuredStat>,
    /// Statistics the file holds that capsim does not compare (std, other percentiles), by key.
    pub not_compared: Vec<String>,
    /// Lengths drawn uniformly in these (min, max) ranges (input, output) where the client says so
    /// and the file lists no requests (the corpus's InferenceX client: [int(0.8 L), L]; SGLang's
    /// `random_range_ratio` r: [max(int(L r), 1), L]).
    pub uniform_lengths: Option<LengthRanges>,
    /// Percentiles of the lengths where the file states them and lists no requests (AIPerf's
    /// `input_sequence_length.p1..p99`, GuideLLM's `prompt_token_count.percentiles`): replayed as
    /// that distribution, not its mean, so the E2E tail is not flattened.
    pub length_percentiles: LengthPercentiles,
}

/// Metrics of a run, as capsim names them.
pub const RUN_METRICS: &[&str] = &["ttft_s", "tpot_ms", "itl_ms", "e2e_ms", "output_tok_s", "request_per_s"];

impl Run {
    /// The run as a user tells it apart: its folder and file (`concurrency_4/profile_export_aiperf.json`:
    /// tools write one file name per run, in a folder per load point), and `#index` where the file
    /// holds several runs (JSONL lines, GuideLLM benchmarks).
    pub fn label(&self) -> String {
        let path = Path::new(&self.source.file);
        let file = path.file_name().map_or(self.source.file.clone(), |f| f.to_string_lossy().to_string());
        let base = match path.parent().and_then(Path::file_name) {
            Some(dir) => format!("{}/{file}", dir.to_string_lossy()),
            None => file,
        };
        if self.source.runs_in_file > 1 {
            format!("{base}#{}", self.source.index)
        } else {
            base
        }
    }

    /// What the file lacks and the run was read without, or took a stated assumption for: the
    /// `(absent` entries of [`Run::not_compared`] (a latency the tool always writes, InferenceX's
    /// counts and range ratio), for the commands to print as notes.
    pub fn absent_notes(&self) -> impl Iterator<Item = &str> {
        self.not_compared.iter().map(String::as_str).filter(|n| n.contains(" (absent"))
    }

    /// Concurrency of the load where it has one (closed loops); a burst counts its requests.
    pub fn concurrency(&self) -> Option<u32> {
        match self.load {
            RunLoad::Concurrency { clients } => Some(clients),
            RunLoad::Burst => Some(self.requests.min(u32::MAX as u64) as u32),
            RunLoad::Rate { .. } => None,
        }
    }

    /// The run's measured statistics as points to replay, one per statistic, all sharing one replay
    /// of the run. `group` names the set of runs (the profile being calibrated or validated).
    pub fn points(&self, group: &str) -> Vec<Point> {
        let replay = Arc::new(self.clone());
        let load = match self.load {
            RunLoad::Concurrency { .. } => LoadKind::ClosedLoop,
            RunLoad::Burst => LoadKind::Burst,
            RunLoad::Rate { .. } => LoadKind::Unknown,
        };
        self.stats
            .iter()
            .map(|s| Point {
                line: self.source.index + 1,
                report: group.to_string(),
                model: self.source.model_id.clone().unwrap_or_default(),
                precision: None,
                gpu: String::new(),
                engine: self.source.tool.as_str().to_string(),
                scenario: self.label(),
                input_tokens: Some(self.input_tokens_mean.round().max(1.0) as u64),
                output_tokens: Some(self.output_tokens_mean.round().max(1.0) as u64),
                load,
                concurrency: self.concurrency(),
                metric: s.metric.to_string(),
                value: s.value,
                approx: false,
                aggregation: Aggregation::Value,
                quote: format!("{}: {} = {}", self.source.file, s.key, s.value),
                flags: vec![],
                stat: s.stat,
                run: Some(replay.clone()),
            })
            .collect()
    }
}

/// Read every run in `path`: a file of any known format, or a directory of them (recursively, in name
/// order; what is not read is listed in the second value with the reason).
pub fn read_path(path: &Path) -> Result<(Vec<Run>, Vec<String>)> {
    read_paths(&[path])
}

/// [`read_path`] over several paths, each file read once however often it is reached.
pub fn read_paths<P: AsRef<Path>>(paths: &[P]) -> Result<(Vec<Run>, Vec<String>)> {
    let mut walk = Walk::default();
    for path in paths {
        let path = path.as_ref();
        let io = |err| Error::Io { path: path.display().to_string(), err };
        // `metadata` follows links without opening: a FIFO is seen for what it is, not read.
        let meta = std::fs::metadata(path).map_err(io)?;
        if meta.is_dir() {
            let (before, skipped_before, dups) = (walk.runs.len(), walk.skipped.len(), walk.duplicates);
            if !walk.first_visit(path, true)? {
                walk.skipped.push(format!("{}: a folder already read", path.display()));
                continue;
            }
            read_dir(path, &mut walk)?;
            if walk.runs.len() == before && walk.duplicates == dups {
                let skipped = &walk.skipped[skipped_before..];
                return Err(Error::input(
                    path.display().to_string(),
                    None,
                    None,
                    format!(
                        "no benchmark result file in this directory (formats: {FORMATS}){}",
                        if skipped.is_empty() { String::new() } else { format!("; skipped: {}", skipped.join("; ")) }
                    ),
                ));
            }
        } else if meta.is_file() {
            if !walk.first_visit(path, false)? {
                walk.skipped.push(format!("{}: the same file as one already read (read once)", path.display()));
            } else if let Some(first) = walk.first_content(path)? {
                walk.skipped.push(same_content(path, &first));
            } else {
                walk.runs.extend(read_file(path)?);
            }
        } else {
            return Err(Error::input(
                path.display().to_string(),
                None,
                None,
                "not a regular file (a FIFO, socket or device): only result files are read",
            ));
        }
    }
    Ok((walk.runs, walk.skipped))
}

/// What a walk has read, and the canonical paths it has seen: a symlink loop enters a folder once and
/// a file reached twice (two links, a folder given twice) is read once, so no run is counted twice.
#[derive(Default)]
struct Walk {
    runs: Vec<Run>,
    skipped: Vec<String>,
    seen: std::collections::HashSet<(bool, std::path::PathBuf)>,
    /// Result files reached again (already read through another path, or a copy of one read).
    duplicates: usize,
    /// SHA-256 of each result file's content read (with the AIPerf records merged into it) and the
    /// path it was first read from: a copy of a file under another name is the same run.
    contents: std::collections::HashMap<String, String>,
}

impl Walk {
    /// Whether this is the first time the walk reaches `path` (a folder or a file).
    fn first_visit(&mut self, path: &Path, dir: bool) -> Result<bool> {
        let canonical =
            std::fs::canonicalize(path).map_err(|err| Error::Io { path: path.display().to_string(), err })?;
        let first = self.seen.insert((dir, canonical));
        self.duplicates += usize::from(!first && !dir);
        Ok(first)
    }

    /// None the first time the walk reads this content; else the path it was first read from
    /// (counted as a duplicate). An AIPerf summary's content includes the records beside it, which
    /// are read with it.
    fn first_content(&mut self, path: &Path) -> Result<Option<String>> {
        let read = |p: &Path| std::fs::read(p).map_err(|err| Error::Io { path: p.display().to_string(), err });
        let mut bytes = read(path)?;
        if let Some(records) = aiperf::records_sibling(path) {
            bytes.extend_from_slice(b"\0profile_export.jsonl\0");
            bytes.extend(read(&records)?);
        }
        let digest = sha256_hex(&bytes);
        match self.contents.entry(digest) {
            std::collections::hash_map::Entry::Occupied(e) => {
                self.duplicates += 1;
                Ok(Some(e.get().clone()))
            }
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(path.display().to_string());
                Ok(None)
            }
        }
    }
}

/// SHA-256 of the data, hex: a result file's content (a copy under another name is the same run),
/// and the sources a fit report lists.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The note for a file skipped as a copy of one already read.
fn same_content(path: &Path, first: &str) -> String {
    format!("{}: the same content as {first}, already read (identical bytes: read once)", path.display())
}

fn read_dir(dir: &Path, walk: &mut Walk) -> Result<()> {
    let io = |err| Error::Io { path: dir.display().to_string(), err };
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(io)?.collect::<std::io::Result<Vec<_>>>().map_err(io)?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let p = e.path();
        let meta = match std::fs::metadata(&p) {
            Ok(m) => m,
            Err(err) => {
                walk.skipped.push(format!("{}: cannot be read ({err})", p.display()));
                continue;
            }
        };
        if meta.is_dir() {
            match walk.first_visit(&p, true) {
                Ok(true) => read_dir(&p, walk)?,
                Ok(false) => walk.skipped.push(format!("{}: a folder already read (a link back)", p.display())),
                Err(err) => walk.skipped.push(format!("{}: cannot be read ({err})", p.display())),
            }
            continue;
        }
        if !meta.is_file() {
            walk.skipped.push(format!("{}: not a regular file (a FIFO, socket or device), not opened", p.display()));
            continue;
        }
        let name = e.file_name().to_string_lossy().to_string();
        if !(name.ends_with(".json") || name.ends_with(".jsonl")) {
            walk.skipped.push(format!("{}: not a JSON file", p.display()));
            continue;
        }
        if aiperf::is_merged_sibling(&p) {
            walk.skipped.push(format!(
                "{}: AIPerf per-request export, read with the profile_export_aiperf.json beside it",
                p.display()
            ));
            continue;
        }
        if !walk.first_visit(&p, false)? {
            walk.skipped.push(format!("{}: the same file as one already read (read once)", p.display()));
            continue;
        }
        if let Some(first) = walk.first_content(&p)? {
            walk.skipped.push(same_content(&p, &first));
            continue;
        }
        let (src, docs) = documents(&p)?;
        let bookkeeping = match docs.as_slice() {
            [(_, v)] => sweep_bookkeeping(v),
            _ => None,
        };
        match bookkeeping {
            Some(why) => walk.skipped.push(format!("{}: {why}", p.display())),
            None => walk.runs.extend(runs_of(&p, &src, &docs)?),
        }
    }
    Ok(())
}

/// Files `vllm bench sweep` writes beside its runs (vllm/benchmarks/sweep/serve.py): `summary.json`, a
/// JSON array repeating the `run=N.json` files of its folder; `warmup.json`, a run with run_number -1;
/// `*.failure.json`, the error of a run that failed. In a directory they are listed as skipped, not
/// read (the summary would count every run twice, the warm-up is not a measurement).
fn sweep_bookkeeping(v: &serde_json::Value) -> Option<String> {
    if v.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(|x| bench_serving::recognizes(x).is_some())) {
        return Some("vllm bench sweep summary (repeats the run=N.json files beside it)".into());
    }
    if v.get("error_type").is_some() && v.get("bench_overrides").is_some() {
        return Some(format!(
            "vllm bench sweep failure record: {}",
            v.get("error").and_then(|e| e.as_str()).unwrap_or("no message")
        ));
    }
    if bench_serving::recognizes(v).is_some() && v.get("run_number").and_then(|n| n.as_i64()).is_some_and(|n| n < 0) {
        return Some("vllm bench sweep warm-up run (run_number -1)".into());
    }
    if ["engine_scripts", "config_entry", "points"].iter().all(|k| v.get(k).is_some()) {
        // calibration/corpus/inferencex-dsr1/<deployment>/metadata.json: the deployment, not a run.
        return Some(format!(
            "InferenceX deployment metadata ({} on {} x {}, tp {}): the deployment, not a measurement; name it with the flags",
            v.get("engine").and_then(|x| x.as_str()).unwrap_or("engine not stated"),
            v.get("num_gpus").and_then(|x| x.as_u64()).map_or("?".into(), |n| n.to_string()),
            v.get("gpu").and_then(|x| x.as_str()).unwrap_or("GPU not stated"),
            v.get("tp").and_then(|x| x.as_u64()).map_or("?".into(), |n| n.to_string()),
        ));
    }
    None
}

/// A file's JSON documents, with the file's name for errors.
fn documents(path: &Path) -> Result<(String, Vec<(usize, serde_json::Value)>)> {
    let src = path.display().to_string();
    let text = crate::error::read_file(path)?;
    let docs = json::parse_documents(&src, &text)?;
    Ok((src, docs))
}

/// Read one file, recognizing its format from its content.
pub fn read_file(path: &Path) -> Result<Vec<Run>> {
    let (src, docs) = documents(path)?;
    runs_of(path, &src, &docs)
}

fn runs_of(path: &Path, src: &str, docs: &[(usize, serde_json::Value)]) -> Result<Vec<Run>> {
    let mut runs = read_runs_of(path, src, docs)?;
    let n = runs.len();
    for r in &mut runs {
        r.source.runs_in_file = n;
    }
    Ok(runs)
}

fn read_runs_of(path: &Path, src: &str, docs: &[(usize, serde_json::Value)]) -> Result<Vec<Run>> {
    let first = docs.first().ok_or_else(|| Error::input(src, None, None, "the file is empty"))?;
    let (_, v) = first;
    if guidellm::recognizes(v) {
        return guidellm::read(src, v);
    }
    if aiperf::recognizes_aggregate(v) {
        return aiperf::read(path, src, v);
    }
    if aiperf::recognizes_records(v) {
        return Err(Error::input(
            src,
            Some(1),
            None,
            "an AIPerf per-request export (profile_export.jsonl) holds no load settings; read the \
             profile_export_aiperf.json beside it (it is merged automatically)",
        ));
    }
    if let Some(items) =
        v.as_array().filter(|a| docs.len() == 1 && a.iter().any(|x| bench_serving::recognizes(x).is_some()))
    {
        // A `vllm bench sweep` summary.json given on its own: the runs it lists.
        return items.iter().enumerate().map(|(i, x)| bench_serving::read(src, i, 1, x, true)).collect();
    }
    if bench_serving::recognizes(v).is_some() {
        return docs
            .iter()
            .enumerate()
            .map(|(i, (line, v))| bench_serving::read(src, i, *line, v, docs.len() > 1))
            .collect();
    }
    Err(Error::input(src, None, None, format!("no reader recognizes this file; formats tried: {FORMATS}")))
}

/// The note for a latency a tool writes for every run that a file lacks, in [`Run::not_compared`]
/// (read by [`Run::absent_notes`]): its mean `mean_key`, with `stated` the statistics of it the run
/// compares, and `others` whether the file has other keys of it at all. A run without a quantity is
/// read, and says so, rather than losing it without a word.
pub(crate) fn absent_note(mean_key: &str, quantity: &str, stated: &[StatKind], others: bool) -> String {
    if !others {
        format!("{mean_key} (absent, as is every other {quantity} statistic: the run carries no {quantity}; none is compared)")
    } else if stated.is_empty() {
        format!("{mean_key} (absent: no {quantity} statistic is compared; the file's others are listed with why)")
    } else {
        let names: Vec<&str> = stated.iter().map(|s| crate::metrics::stat_name(*s)).collect();
        format!("{mean_key} (absent: {quantity} compared at the file's {} only)", names.join(", "))
    }
}

/// The mean of positive values (None when there are none).
fn mean(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let (n, s) = xs.fold((0u64, 0.0), |(n, s), x| (n + 1, s + x));
    (n > 0).then(|| s / n as f64)
}

/// Check a run has what its replay needs; errors name the file and the field.
fn checked(run: Run) -> Result<Run> {
    let src = &run.source.file;
    let line = Some(run.source.index + 1);
    if run.completed == 0 {
        return Err(Error::input(src, line, Some("completed"), "no request completed: nothing to compare"));
    }
    for (field, v) in [("input tokens", run.input_tokens_mean), ("output tokens", run.output_tokens_mean)] {
        if !(v.is_finite() && v >= 1.0) {
            return Err(Error::input(src, line, Some(field), format!("mean must be at least 1 token, got {v}")));
        }
    }
    if let RunLoad::Rate { rate_per_s, .. } = run.load {
        if !(rate_per_s.is_finite() && rate_per_s > 0.0) {
            return Err(Error::input(src, line, Some("request_rate"), format!("must be positive, got {rate_per_s}")));
        }
    }
    if let RunLoad::Concurrency { clients: 0 } = run.load {
        return Err(Error::input(src, line, Some("concurrency"), "must be at least 1"));
    }
    for s in &run.stats {
        // The value as the file wrote it: a TTFT is kept in seconds, the files write milliseconds.
        let stated = if s.metric == "ttft_s" && s.key.ends_with("_ms") { s.value * 1e3 } else { s.value };
        if !(s.value.is_finite() && s.value >= 0.0) {
            return Err(Error::input(
                src,
                line,
                Some(&s.key),
                format!("must be a finite non-negative number, got {stated}"),
            ));
        }
        // A latency beyond the longest run capsim simulates is no measurement (`mean_ttft_ms: 1e300`
        // was read as one); nor is a request rate beyond the rates it replays.
        let seconds = match s.metric {
            "ttft_s" => Some(s.value),
            "tpot_ms" | "itl_ms" | "e2e_ms" => Some(s.value * 1e-3),
            _ => None,
        };
        let max_t = crate::workload::MAX_TIME_S;
        if let Some(t) = seconds.filter(|&t| t > max_t) {
            return Err(Error::input(
                src,
                line,
                Some(&s.key),
                format!(
                    "must be a time of at most {max_t:e} s (the longest run capsim simulates), got {} ({} s)",
                    crate::error::fmt_num(stated),
                    crate::error::fmt_num(t)
                ),
            ));
        }
        let max_rate = crate::workload::MAX_RATE_PER_S;
        if s.metric == "request_per_s" && s.value > max_rate {
            return Err(Error::input(
                src,
                line,
                Some(&s.key),
                format!("must be at most {max_rate:e} requests/s, got {}", crate::error::fmt_num(s.value)),
            ));
        }
    }
    Ok(run)
}
