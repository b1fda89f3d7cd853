//! The public corpus as experiments to replay (calibration/corpus, its README): every point becomes a
//! deployment capsim can build and a benchmark run replayed as its load generator ran it (a closed
//! loop at the concurrency; InferenceX's lengths uniform in [int(0.8 L), L], 10 x concurrency
//! requests; NVIDIA's own rows fixed lengths, their request count an unknown of the source), or a
//! [`Refusal`] that says why not. Nothing is dropped silently: `capsim points --corpus` counts the
//! refusals by reason.

use crate::catalog::Catalog;
use crate::data::{Aggregation, LoadKind, Point};
use crate::error::Result;
use crate::measured::corpus::{
    read_aic_e2e, read_inferencex_deployment, read_inferencex_dir, read_launch_table, Client, CorpusPoint, PoolLayout,
    LAUNCH_SETTINGS, PD_RECIPES,
};
use crate::measured::launch::{LaunchTable, TrtTokens};
use crate::measured::{MeasuredStat, Run, RunLoad, RunSource, Tool};
use crate::profile::{Deployment, EngineKind, EngineSettings, SpecMethod, Speculative};
use crate::units::Dtype;
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;

mod layout;
pub use layout::{layout, Layout};

pub const AIC_E2E_PATH: &str = "calibration/corpus/aic-e2e/measured.csv";
pub const AIC_E2E: &str = include_str!("../calibration/corpus/aic-e2e/measured.csv");
pub const INFERENCEX_PATH: &str = "calibration/corpus/inferencex-dsr1";

#[allow(clippy::all)]
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/corpus_inferencex.rs"));
}

/// Requests per client the NVIDIA rows are replayed with: their client's request count is not
/// stated (corpus README). A stated assumption, reported with every use.
pub const NVIDIA_ROUNDS: u64 = 10;

/// capsim's launch settings of the shipped InferenceX deployments (crate::measured::launch).
pub const INFERENCEX_LAUNCH: &str = include_str!("../calibration/corpus/inferencex-dsr1/launch_settings.json");

/// capsim's per-pool settings of the shipped InferenceX disaggregated points (crate::measured::pd_recipes).
pub const INFERENCEX_PD_RECIPES: &str = include_str!("../calibration/corpus/inferencex-dsr1/pd_recipes.json");

/// The shipped corpus, as embedded in the binary.
pub fn builtin_points() -> Result<Vec<CorpusPoint>> {
    let mut out = read_aic_e2e(AIC_E2E_PATH, AIC_E2E)?;
    let launch = LaunchTable::parse(&format!("{INFERENCEX_PATH}/{LAUNCH_SETTINGS}"), INFERENCEX_LAUNCH)?
        .with_pd_recipes(&format!("{INFERENCEX_PATH}/{PD_RECIPES}"), INFERENCEX_PD_RECIPES)?;
    for (dep, meta, files) in embedded::INFERENCEX {
        let files: Vec<(String, &str)> = files.iter().map(|(n, t)| (n.to_string(), *t)).collect();
        out.extend(read_inferencex_deployment(&format!("{INFERENCEX_PATH}/{dep}"), meta, &files, Some(&launch))?);
    }
    launch.check_known(
        |d| embedded::INFERENCEX.iter().any(|(dep, _, _)| *dep == d),
        |p| {
            embedded::INFERENCEX.iter().any(|(dep, _, files)| {
                p.strip_prefix(*dep)
                    .and_then(|r| r.strip_prefix('/'))
                    .is_some_and(|f| files.iter().any(|(n, _)| *n == f))
            })
        },
    )?;
    launch.attach_layouts(&mut out);
    lend_pd_recipes(&mut out);
    Ok(out)
}

/// The deployment and load a disaggregated point ran, as far as its columns tell, read as
/// [`express`] reads them: GPU ([`gpu_name`]), engine behind its router ([`engine_behind_router`]),
/// version, the experts' dtype ([`weight_dtype`]), lengths, concurrency, speculative decoding, and
/// each pool's workers and GPUs per worker ([`layout::worker_gpus`]). The concurrency is part of it
/// because a config entry's recipe is chosen by its conc-list: the same pools at another
/// concurrency may have run another recipe's caps.
fn pd_deployment(p: &CorpusPoint) -> Option<impl Eq + std::hash::Hash> {
    let (pre, dec) = p.pools?;
    let gpu = gpu_name(&p.gpu).to_ascii_lowercase();
    let dtype = weight_dtype(p, true, gpu.starts_with("mi")).ok()?;
    let version = p.engine_version.trim_start_matches('v').to_string();
    Some((
        (gpu, EngineKind::from_name(engine_behind_router(&p.engine))?.as_str(), version, dtype),
        (p.isl, p.osl, p.concurrency, p.spec_decoding.is_some()),
        (pre.workers, layout::worker_gpus(p, &pre), dec.workers, layout::worker_gpus(p, &dec)),
    ))
}

/// InferenceX's database rows in aic-e2e (`db-dump`) of a disaggregated deployment whose
/// inferencex-dsr1 points run a recipe (pd_recipes.json) run the same recipe: the database states
/// the pools as InferenceX's config key does (`tp 1, ep 1` placeholders for the December 2025 GB200
/// Dynamo SGLang runs: moe_tp 32, moe_ep 1, where the recipe ran DeepEP over the 32 GPUs). The row
/// takes the recipe of the folder point of the same deployment at the same concurrency
/// (pd_deployment) measured on the same day, else the latest before it, else the earliest; its
/// source says which point lent it.
fn lend_pd_recipes(points: &mut [CorpusPoint]) {
    use std::collections::HashMap;
    let mut by_deployment: HashMap<_, Vec<usize>> = HashMap::new();
    for (i, p) in points.iter().enumerate() {
        if p.set == "inferencex-dsr1" && p.pd_launch.is_some() {
            if let Some(k) = pd_deployment(p) {
                by_deployment.entry(k).or_default().push(i);
            }
        }
    }
    for i in 0..points.len() {
        let p = &points[i];
        if !(p.is_inferencex_db_row() && p.disaggregated && p.pd_launch.is_none()) {
            continue;
        }
        let Some(lenders) = pd_deployment(p).and_then(|k| by_deployment.get(&k)) else { continue };
        let day = p.date.get(..10).unwrap_or(&p.date);
        let pick = lenders
            .iter()
            .filter(|&&j| points[j].date.as_str() <= day)
            .max_by_key(|&&j| (&points[j].date, &points[j].id))
            .or_else(|| lenders.iter().min_by_key(|&&j| (&points[j].date, &points[j].id)));
        if let Some(&j) = pick {
            let mut launch = points[j].pd_launch.clone().expect("lenders have a launch");
            launch.source = format!("{} (lent by {}, the same deployment)", launch.source, points[j].id);
            points[i].pd_launch = Some(launch);
        }
    }
}

/// A corpus folder on disk laid out as calibration/corpus (`aic-e2e/measured.csv` and/or
/// `inferencex-dsr1/`); at least one of the two must be there.
pub fn read_points(dir: &Path) -> Result<Vec<CorpusPoint>> {
    let aic = dir.join("aic-e2e/measured.csv");
    let ix = dir.join("inferencex-dsr1");
    if !aic.is_file() && !ix.is_dir() {
        return Err(crate::Error::input(
            dir.display().to_string(),
            None,
            None,
            "not a corpus folder: needs aic-e2e/measured.csv or inferencex-dsr1/ (as calibration/corpus)",
        ));
    }
    let mut out = Vec::new();
    if aic.is_file() {
        let text = crate::error::read_file(&aic)?;
        out.extend(read_aic_e2e(&aic.display().to_string(), &text)?);
    }
    if ix.is_dir() {
        let launch = read_launch_table(&ix)?;
        out.extend(read_inferencex_dir(&ix, launch.as_ref())?);
        if let Some(t) = &launch {
            t.attach_layouts(&mut out);
        }
    }
    lend_pd_recipes(&mut out);
    Ok(out)
}

/// Why capsim cannot replay a corpus point yet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "reason", content = "detail", rename_all = "snake_case")]
pub enum Refusal {
    /// A row its source marks unofficial (InferenceX's Together-cluster baselines: another client).
    Unofficial,
    /// Prefill and decode on separate workers whose layout or client concurrency the source does not
    /// state (issue 25: the others are replayed on sim/disagg.rs).
    Disaggregated,
    /// A draft method or engine whose launch settings capsim has not read (MTP on SGLang, TensorRT-LLM
    /// and vLLM is expressed: `corpus_speculative`).
    SpeculativeDecoding,
    /// Attention data parallelism whose ranks the columns do not tile over the GPUs (issue 25).
    AttentionDp,
    /// A dense model's per-rank `batch_size` below the concurrency: attention-DP ranks a dense
    /// model does not run (its layers are all attention and dense), so replicas or a batch cap the
    /// row does not state.
    DenseRankBatch,
    PipelineParallel,
    /// MoE experts split over tensor and expert parallelism at once.
    MixedMoeLayout,
    /// More tensor-parallel GPUs than one NVLink domain holds.
    BeyondLinkDomain,
    UnknownGpu(String),
    UnknownModel(String),
    UnknownEngine(String),
    UnknownDtype(String),
    /// No TTFT or TPOT statistic capsim compares.
    NoStatistic,
    /// The deployment does not resolve (does not fit in memory, context beyond the model's window).
    DoesNotResolve(String),
    /// Speculative decoding the row does not mark ([`unmarked_mtp`]).
    UnmarkedMtp,
    /// The same measurement as another corpus point (same GPU, engine, lengths, concurrency, TTFT
    /// and TPOT): replayed once, as that point ([`Duplicate::of`]).
    Duplicate(Duplicate),
}

/// Which point a copy repeats.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Duplicate {
    /// The id of the point replayed in its place.
    pub of: String,
    /// Whether that point is an inferencex-dsr1 file (else an aic-e2e row).
    pub of_folder_point: bool,
}

impl Refusal {
    /// The reason's name, for counts.
    pub fn label(&self) -> String {
        match self {
            Refusal::Unofficial => "unofficial row of its source (another client setup)".into(),
            Refusal::Disaggregated => "disaggregated prefill/decode without a stated layout or concurrency".into(),
            Refusal::SpeculativeDecoding => "speculative decoding of a method capsim has not read".into(),
            Refusal::UnmarkedMtp => "MTP the row does not mark (the image and day of an InferenceX MTP run)".into(),
            Refusal::AttentionDp => {
                "attention data parallelism whose ranks, GPUs and experts the columns do not tile".into()
            }
            Refusal::DenseRankBatch => "a dense model whose batch_size per rank is below the concurrency: attention-DP ranks it does not run, replicas or a batch cap the row does not state".into(),
            Refusal::PipelineParallel => "pipeline parallelism".into(),
            Refusal::MixedMoeLayout => "MoE split over TP and EP at once".into(),
            Refusal::BeyondLinkDomain => "tensor parallel beyond one NVLink domain".into(),
            Refusal::UnknownGpu(g) => format!("GPU not in the catalog: {g}"),
            Refusal::UnknownModel(m) => format!("model not in the catalog: {m}"),
            Refusal::UnknownEngine(e) => format!("engine not modelled: {e}"),
            Refusal::UnknownDtype(d) => format!("precision not known: {d}"),
            Refusal::NoStatistic => "no TTFT or TPOT statistic".into(),
            Refusal::DoesNotResolve(why) => format!("deployment does not resolve: {why}"),
            Refusal::Duplicate(d) if d.of_folder_point => "a copy of an inferencex-dsr1 point".into(),
            Refusal::Duplicate(_) => "a copy of another aic-e2e row".into(),
        }
    }
}

/// A corpus point capsim can replay: its deployment, its run and the measured points of that run.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub point: CorpusPoint,
    pub deployment: Deployment,
    /// Catalog names, the keys the learned hardware model groups by.
    pub gpu: String,
    pub model: String,
    /// The model's kernel family (`hardware::learned::model_family`), a level of the learned model.
    pub family: String,
    pub engine: EngineKind,
    pub run: Arc<Run>,
    /// `ttft_s` and `tpot_ms` (those the source has), each a point carrying `run`.
    pub points: Vec<Point>,
    /// A disaggregated point's pools (`deployment` is then its decode pool's).
    pub pd: Option<PdExperiment>,
}

/// A disaggregated experiment's two pools as its benchmark launched them.
#[derive(Debug, Clone)]
pub struct PdExperiment {
    pub prefill: Deployment,
    pub decode: Deployment,
    pub prefill_workers: u32,
    pub decode_workers: u32,
}

/// A disaggregated pool's engine settings: aiconfigurator's benchmark rules for NVIDIA's rows
/// (ai-dynamo/aiconfigurator generator/rule_plugin/benchmark/{vllm,trtllm,sglang}.rule: a prefill
/// worker's max_batch_size its stated batch (default 1) and max_num_tokens ISL + 1500 (TensorRT-LLM
/// rounded up to 32-token blocks; SGLang max_prefill_tokens ISL + 1500); a decode worker's
/// max_batch_size its stated batch (default 128) and max_num_tokens that batch), the engines'
/// defaults for InferenceX's (its TensorRT-LLM token budget as aggregated).
fn pool_settings(client: Client, engine: EngineKind, isl: u32, batch: Option<u32>, prefill: bool) -> EngineSettings {
    if client == Client::InferenceX {
        return benchmark_settings(client, engine, isl, batch.unwrap_or(1));
    }
    let mut s = EngineSettings { kind: Some(engine), ..EngineSettings::default() };
    let batch = batch.unwrap_or(if prefill { 1 } else { 128 });
    let tokens = if prefill { isl as u64 + 1500 } else { batch as u64 };
    let tokens = if engine == EngineKind::Trtllm { tokens.div_ceil(32) * 32 } else { tokens };
    let tokens = Some(tokens.min(u32::MAX as u64) as u32);
    s.max_num_seqs = Some(batch);
    match engine {
        EngineKind::Sglang if prefill => s.max_prefill_tokens = tokens,
        EngineKind::Sglang => {}
        _ => s.max_num_batched_tokens = tokens,
    }
    s
}

/// What makes a corpus point a large deployment (issue 25): the serving features beyond one
/// aggregated engine of tensor-parallel GPUs. The learned step model is fitted on plain points only
/// (the closed form of calibrate::corpus knows one engine's step); large points are predicted from it
/// and reported apart (`capsim validate --protocol large-in-sample | large-leave-one-gpu-out`), the
/// attention-DP ones after fitting the one quantity no plain point identifies, the fixed time of an
/// exchange between ranks (calibrate::exchange).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Feature {
    /// Prefill and decode on separate worker pools.
    Disaggregated,
    /// Speculative decoding (the corpus's MTP).
    Speculative,
    /// Attention data parallelism (each rank its own requests and KV; the engine's batch is the
    /// concurrency over the ranks).
    AttentionDp,
    /// Pipeline parallelism.
    PipelineParallel,
    /// Expert parallelism wider than, or split differently from, the tensor-parallel group.
    WideEp,
}

impl Feature {
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::Disaggregated => "disaggregated",
            Feature::Speculative => "mtp",
            Feature::AttentionDp => "attention-dp",
            Feature::PipelineParallel => "pipeline-parallel",
            Feature::WideEp => "wide-ep",
        }
    }
}

/// The large-deployment features a corpus point's columns state: whether its layout must be
/// resolved (corpus/layout.rs) before it is replayed. What it is replayed as is
/// [`Experiment::features`], from the resolved layout.
pub fn stated_features(p: &CorpusPoint) -> Vec<Feature> {
    let mut f = Vec::new();
    if p.disaggregated {
        f.push(Feature::Disaggregated);
    }
    if p.spec_decoding.is_some() {
        f.push(Feature::Speculative);
    }
    if p.attention_dp > 1 || p.batch_size.is_some_and(|b| b != p.concurrency) {
        f.push(Feature::AttentionDp);
    }
    if p.pipeline_parallel > 1 {
        f.push(Feature::PipelineParallel);
    }
    if p.moe_ep > 1 && (p.moe_tp > 1 || p.moe_ep != p.tensor_parallel) {
        f.push(Feature::WideEp);
    }
    f
}

impl Experiment {
    /// The learned model's keys for this experiment's model.
    pub fn model_key(&self) -> crate::hardware::learned::ModelKey<'_> {
        crate::hardware::learned::ModelKey { family: &self.family, name: &self.model }
    }

    /// The large-deployment features of the deployment it is replayed on (empty: a plain aggregated
    /// deployment, which the learned model is fitted on): the layout its source's columns resolve to
    /// (corpus/layout.rs), not the columns. InferenceX's database rows state a single node's GPUs as
    /// TP x EP (`tp8ep8` is 64 "TP" GPUs with moe_tp 8) and its vLLM rows DP ranks the launch runs as
    /// expert parallelism over TP GPUs: both are plain layouts, experts whole over the TP group.
    pub fn features(&self) -> Vec<Feature> {
        let pools = match &self.pd {
            Some(pd) => vec![&pd.prefill, &pd.decode],
            None => vec![&self.deployment],
        };
        let any = |f: &dyn Fn(&Deployment) -> bool| pools.iter().any(|d| f(d));
        let mut f = Vec::new();
        if self.pd.is_some() {
            f.push(Feature::Disaggregated);
        }
        if any(&|d| d.speculative.is_some()) {
            f.push(Feature::Speculative);
        }
        if any(&|d| d.parallel.attention_dp > 1) {
            f.push(Feature::AttentionDp);
        }
        if any(&|d| d.parallel.pipeline_parallel > 1) {
            f.push(Feature::PipelineParallel);
        }
        if any(&|d| d.parallel.wide_ep(d.tensor_parallel)) {
            f.push(Feature::WideEp);
        }
        f
    }

    /// A plain aggregated deployment: fitted on by `calibrate --corpus` and the plain protocols.
    pub fn is_plain(&self) -> bool {
        self.features().is_empty()
    }

    /// The deployment's identity (GPU, model, engine, precision, TP, EP): points of one deployment
    /// share a fitted residual.
    pub fn deployment_key(&self) -> String {
        let d = &self.deployment;
        let par = &d.parallel;
        let large = if !par.is_large(d.tensor_parallel) {
            String::new()
        } else {
            format!(" dp{} ep{} pp{}", par.attention_dp, par.expert_parallel_size, par.pipeline_parallel)
        };
        format!(
            "{} | {} | {} {} | {} | tp{}{}{large}",
            self.model,
            self.gpu,
            self.engine.as_str(),
            self.point.engine_version,
            d.weight_dtype,
            d.tensor_parallel,
            if d.expert_parallel { " ep" } else { "" }
        )
    }
}

/// The engine behind a disaggregated deployment's router or KV transport, which its name comes first
/// in: Dynamo's (`dynamo-sglang`, `dynamo-trt`) and AMD's SGLang P/D over MoRI (`mori-sglang`: the
/// image is lmsysorg/sglang-rocm, the KV moved by SGLang's MoRI transfer backend over the scale-out
/// NICs). aic-e2e writes the engine alone.
fn engine_behind_router(e: &str) -> &str {
    e.trim_start_matches("dynamo-").trim_start_matches("mori-")
}

/// A point's GPU (the catalog's name where the catalog has it, else as written) and engine (behind
/// any router): how two rows of different sets name the same deployment ([`copies`],
/// [`unmarked_mtp`]).
fn gpu_and_engine(catalog: &Catalog, p: &CorpusPoint) -> (String, Option<&'static str>) {
    (catalog_gpu_name(catalog, &p.gpu), EngineKind::from_name(engine_behind_router(&p.engine)).map(|e| e.as_str()))
}

/// The catalog's name of a corpus GPU (`b200_sxm` and `b200` are both B200), else the corpus's own.
pub fn catalog_gpu_name(catalog: &Catalog, corpus_gpu: &str) -> String {
    catalog.gpu(&gpu_name(corpus_gpu)).map_or_else(|_| corpus_gpu.to_string(), |s| s.name.clone())
}

/// The catalog GPU a corpus name means (the sets write `h100_sxm`, `b200_sxm`, `gb200`, `h200`).
fn gpu_name(g: &str) -> String {
    match g {
        "h100" => "H100 SXM".into(),
        "h200" => "H200 SXM".into(),
        "b200" | "b200_sxm" => "B200".into(),
        other => other.to_string(),
    }
}

/// The catalog model a corpus name means: a Hugging Face id (catalog aliases), InferenceX's short
/// names and its checkpoints' paths (all DeepSeek-R1-0528 but one gpt-oss-120b).
fn model_name(m: &str) -> String {
    let l = m.to_ascii_lowercase();
    if l == "dsr1" || l.contains("deepseek-r1") {
        return "DeepSeek-R1".into();
    }
    if l.starts_with("gptoss") {
        return "gpt-oss-120b".into();
    }
    m.to_string()
}

/// InferenceX's database rows in aic-e2e of its `dsr1` configurations: their model_path says
/// deepseek-ai/DeepSeek-V3, but InferenceX benchmarks DeepSeek-R1-0528 there (its dashboard rows are
/// DeepSeek-R1 only: corpus README), and those of them also in inferencex-dsr1 carry the same TTFT and
/// TPOT as the point there, whose metadata names DeepSeek-R1-0528. The two share one architecture;
/// the name decides which model a protocol holds out.
fn is_dsr1_db_row(p: &CorpusPoint) -> bool {
    p.is_inferencex_db_row() && p.id.starts_with("dsr1_")
}

/// The weights' dtype from the quantization columns: the experts' for an MoE model (most of the
/// bytes), else the dense GEMMs'; blank columns mean the checkpoint's BF16. `fp4` is NVFP4 on NVIDIA
/// GPUs and MXFP4 on AMD's (the sets' convention: ModelOpt checkpoints on NVIDIA, AMD's MXFP4 ones).
fn weight_dtype(p: &CorpusPoint, moe: bool, amd: bool) -> std::result::Result<Dtype, Refusal> {
    let q = if moe && !p.moe_quant.is_empty() { &p.moe_quant } else { &p.gemm_quant };
    let q = if q.is_empty() { &p.precision } else { q };
    match q.as_str() {
        "" | "bf16" => Ok(Dtype::Bf16),
        "fp8" | "fp8_block" => Ok(Dtype::Fp8),
        "nvfp4" => Ok(Dtype::Nvfp4),
        "mxfp4" => Ok(Dtype::Mxfp4),
        "fp4" => Ok(if amd { Dtype::Mxfp4 } else { Dtype::Nvfp4 }),
        "int4_wo" | "int4" => Ok(Dtype::Int4),
        other => Err(Refusal::UnknownDtype(other.to_string())),
    }
}

/// InferenceX's TensorRT-LLM token budget by its script's rule (crate::measured::launch::TrtTokens):
/// `(CONC + ISL + 64 + 63) / 64 x 64` at least the floor, or the MTP scripts' `((MTP + 1) x
/// MAX_BATCH_SIZE + ISL + 64 + 63) / 64 x 64` with MAX_BATCH_SIZE the client's CONC or, over `ranks`
/// attention-DP ranks, each rank's share (`CONC < ranks ? CONC : CONC / ranks`:
/// benchmarks/dsr1_fp4_b200_trt_mtp.sh @ ec912828, lines 28-35 and 70; the slurm scripts' CONC / TP
/// at 008b91a9 is the same where CONC >= TP).
pub fn inferencex_trt_max_num_tokens(
    rule: TrtTokens,
    isl: u32,
    concurrency: u32,
    draft_tokens: u32,
    ranks: u32,
) -> u32 {
    let conc = concurrency as u64;
    let (batch_tokens, floor) = match rule {
        TrtTokens::Floor(floor) => (conc, floor as u64),
        TrtTokens::Mtp => {
            let ranks = ranks.max(1) as u64;
            let batch = if ranks > 1 && conc >= ranks { conc / ranks } else { conc };
            ((draft_tokens as u64 + 1) * batch, 0)
        }
    };
    ((batch_tokens + isl as u64 + 64).div_ceil(64) * 64).max(floor).min(u32::MAX as u64) as u32
}

/// The engine settings the point's benchmark launched the engine with, where its setup states them.
/// Benchmarkers size the per-step token budget so a whole prompt fits beside every running decode;
/// an engine left at TensorRT-LLM's default (max_num_tokens 8192, no chunked prefill) would admit an
/// 8192-token prompt only once no sequence is decoding, and a closed loop at concurrency 128 would
/// run one request at a time (TTFT of minutes where the corpus measures 0.3 s).
/// - InferenceX, TensorRT-LLM: `MAX_NUM_TOKENS=$(( (CONC+ISL+64+63)/64*64 ))`, at least 8192
///   (SemiAnalysisAI/InferenceX benchmarks/single_node/fixed_seq_len/dsr1_fp4_b200_trt.sh; the other
///   TRT scripts give ISL + OSL + 256 or 16384/32768 by sequence length, all a whole prompt and more).
///   The December 2025 slurm scripts set no floor: inferencex-dsr1/launch_settings.json says which
///   deployments ran which, and the MTP scripts' own rule (`trt_max_num_tokens_floor`,
///   `trt_max_num_tokens_mtp`; layout::launch_settings).
///   Its vLLM and SGLang scripts vary by recipe and are left at the engines' defaults, but for the
///   settings inferencex-dsr1/launch_settings.json resolves (layout::launch_settings).
/// - NVIDIA's rows (aiconfigurator's accuracy set): aiconfigurator's benchmark rules, assumed to be what
///   generated their engines' configs (ai-dynamo/aiconfigurator 095f58a,
///   src/aiconfigurator/generator/rule_plugin/benchmark/{trtllm,vllm,sglang}.rule): aggregated
///   TensorRT-LLM `max_num_tokens = round_up(max_batch_size + ISL + 1500, tokens_per_block 32)`, vLLM
///   `max_num_tokens = max_batch_size + ISL + 1500`, SGLang `max_prefill_tokens = ISL + 1500` with
///   `enable_mixed_chunk`; max_batch_size is the concurrency.
pub fn benchmark_settings(client: Client, engine: EngineKind, isl: u32, concurrency: u32) -> EngineSettings {
    let mut s = EngineSettings { kind: Some(engine), ..EngineSettings::default() };
    let (isl, conc) = (isl as u64, concurrency as u64);
    let tokens = |v: u64| Some(v.min(u32::MAX as u64) as u32);
    match (client, engine) {
        (Client::InferenceX, EngineKind::Trtllm) => {
            s.max_num_batched_tokens =
                Some(inferencex_trt_max_num_tokens(TrtTokens::Floor(8192), isl as u32, conc as u32, 0, 1));
        }
        (Client::InferenceX, _) => {}
        (_, EngineKind::Trtllm) => s.max_num_batched_tokens = tokens((conc + isl + 1500).div_ceil(32) * 32),
        (_, EngineKind::Vllm) => s.max_num_batched_tokens = tokens(conc + isl + 1500),
        (_, EngineKind::Sglang) => {
            s.max_prefill_tokens = tokens(isl + 1500);
            s.enable_mixed_chunk = Some(true);
        }
    }
    s
}

/// The engine release a point ran, where its version column names one capsim read: the defaults
/// and admission rules that changed between releases (vLLM's gpu_memory_utilization 0.9 -> 0.92
/// and CUDA graphs' memory from 0.20, its full-prompt reservation from 0.19; profile/engine.rs)
/// are the ones its engine had, not the newest release's. vLLM and SGLang only: InferenceX's
/// Dynamo TensorRT-LLM rows state Dynamo's version (0.8.1.post1), and capsim's TensorRT-LLM has no
/// release-dependent behaviour. A version that does not parse ("nightly-dev", "glm5-hopper") or
/// lies outside the releases read keeps the newest's behaviour, as a user's profile does.
fn corpus_release(p: &CorpusPoint, engine: EngineKind) -> Option<String> {
    use crate::profile::{latest_version, oldest_version, EngineVersion};
    if engine == EngineKind::Trtllm {
        return None;
    }
    let v = EngineVersion::parse(&p.engine_version)?;
    (v >= oldest_version(engine) && v <= latest_version(engine)).then(|| v.to_string())
}

/// The KV cache's dtype: the launch script's where the source states it (inferencex-dsr1's
/// metadata); else what the point's benchmark setup is known to use:
/// - TensorRT-LLM takes the checkpoint's `kv_cache_quant_algo`, FP8 in NVIDIA's ModelOpt FP8 and NVFP4
///   checkpoints (FACTS-hardware-engines.md, quantization formats), so FP8 where the weights are
///   quantized to 8 bits or fewer, whoever ran it.
/// - InferenceX's other rows (aic-e2e `db-dump`): its launch scripts pass `--kv-cache-dtype fp8` for
///   every quantized deployment in the corpus (MiniMax-M2.5 FP8/FP4 on B200 and H200, Kimi-K2.5 FP4,
///   Qwen3.5 FP8/FP4, DeepSeek on B200) except DeepSeek FP8 on H200 under SGLang
///   (SemiAnalysisAI/InferenceX benchmarks/single_node/fixed_seq_len/, e.g. minimaxm2.5_fp8_b200.sh,
///   dsr1_fp8_h200.sh; scripts as of the snapshot read, the runs may predate them).
/// - NVIDIA's rows: aiconfigurator, whose accuracy set they are, replays them with an FP8 KV cache
///   when the checkpoint named is itself FP8 or NVFP4 (aic-core sdk/models/helpers.py
///   `_infer_quant_modes_from_raw_config`, 095f58a): DeepSeek-R1/V3, MiniMax-M2.5 and
///   Qwen3-235B-A22B-FP8 declare `quant_method: fp8` in their config.json (calibration/corpus/configs),
///   `nvidia/*-FP8` and `*-NVFP4` are ModelOpt checkpoints.
/// - Otherwise the engines' default `--kv-cache-dtype auto`, the model's activation dtype (BF16)
///   whatever the weights' quantization (vllm/config/cache.py CacheDType; SGLang server_args
///   kv_cache_dtype "auto").
fn kv_dtype(p: &CorpusPoint, engine: EngineKind, w: Dtype) -> std::result::Result<Dtype, Refusal> {
    if let Some(kv) = &p.kv_dtype {
        return match kv.as_str() {
            "fp8" | "fp8_e4m3" | "fp8_e5m2" => Ok(Dtype::Fp8),
            "bf16" | "auto" | "bfloat16" => Ok(Dtype::Bf16),
            other => Err(Refusal::UnknownDtype(format!("kv cache {other}"))),
        };
    }
    let quantized = matches!(w, Dtype::Fp8 | Dtype::Nvfp4 | Dtype::Mxfp4 | Dtype::Int4);
    let fp8 = match (p.client, engine) {
        (_, EngineKind::Trtllm) => quantized && w != Dtype::Int4,
        // inferencex-dsr1's metadata read the scripts: no flag there means the engine's default.
        (Client::InferenceX, _) if p.set != "aic-e2e" => false,
        (Client::InferenceX, _) => {
            let deepseek_h200_sglang = p.model.to_ascii_lowercase().contains("deepseek")
                && p.gpu.starts_with("h200")
                && engine == EngineKind::Sglang;
            quantized && !deepseek_h200_sglang
        }
        (Client::NvidiaInternal | Client::NvidiaGapAnalysis, _) => checkpoint_is_fp8_or_nvfp4(&p.model),
    };
    Ok(if fp8 { Dtype::Fp8 } else { Dtype::Bf16 })
}

/// Whether the checkpoint a NVIDIA row names is itself FP8 or NVFP4 (see [`kv_dtype`]).
fn checkpoint_is_fp8_or_nvfp4(model_path: &str) -> bool {
    const NATIVE_FP8: &[&str] =
        &["deepseek-ai/DeepSeek-R1", "deepseek-ai/DeepSeek-V3", "MiniMaxAI/MiniMax-M2.5", "zai-org/GLM-5-FP8"];
    let upper = model_path.to_ascii_uppercase();
    NATIVE_FP8.contains(&model_path) || upper.ends_with("-FP8") || upper.ends_with("-NVFP4")
}

/// The speculative decoding an InferenceX `-mtp` deployment launched (None: a method or engine whose
/// launch capsim has not read). Tokens drafted per step, from the launch scripts in
/// SemiAnalysisAI/InferenceX (benchmarks/single_node/fixed_seq_len/, read at 843c6254):
/// - SGLang on NVIDIA GPUs (dsr1_fp8_b200_mtp.sh, dsr1_fp4_b200_mtp.sh, dsr1_fp8_h200_mtp.sh):
///   `--speculative-algorithm EAGLE --speculative-num-steps 2 --speculative-num-draft-tokens 3
///   --speculative-eagle-topk 1` over the model's NextN (MTP) layer: 2 drafted tokens (SGLang's
///   draft-token count includes the verified one);
/// - SGLang on AMD GPUs (dsr1_fp8_mi355x_mtp.sh, dsr1_fp4_mi355x_mtp.sh, dsr1_fp8_mi325x_mtp.sh):
///   `--speculative-num-steps 3 --speculative-num-draft-tokens 4`: 3;
/// - TensorRT-LLM (dsr1_fp8_b200_trt_mtp.sh, dsr1_fp4_b200_trt_mtp.sh, dsr1_fp8_h200_trt_mtp.sh):
///   `speculative_config: decoding_type: MTP, num_nextn_predict_layers: $MTP` with MTP=3, and MTP=1
///   under attention data parallelism;
/// - vLLM-based ATOM (dsr1_fp8_mi355x_atom_mtp.sh): `--method mtp --num-speculative-tokens 3`.
///
/// Acceptance: no launch states it; the cited default of [`crate::profile::spec::MTP_DEFAULT_ACCEPT`]
/// here, and the large protocols replay these points at the acceptance fitted on their training
/// set's MTP points (the corpus's prompts are random tokens: validate::corpus, `mtp_fitted`).
fn corpus_speculative(method: &str, engine: EngineKind, amd: bool, attention_dp: bool) -> Option<Speculative> {
    use crate::profile::spec::{MTP_DEFAULT_ACCEPT, MTP_DEFAULT_SOURCE};
    if method != "mtp" {
        return None;
    }
    let tokens = match engine {
        EngineKind::Sglang if amd => 3,
        EngineKind::Sglang => 2,
        EngineKind::Trtllm if attention_dp => 1,
        EngineKind::Trtllm | EngineKind::Vllm => 3,
    };
    let mut s = Speculative::new(SpecMethod::Mtp, tokens, vec![MTP_DEFAULT_ACCEPT]);
    s.accept_rate_source = MTP_DEFAULT_SOURCE.to_string();
    Some(s)
}

/// Whether `p` can be replayed, and as what. `check` resolves the deployment (memory, context) and
/// may refuse it.
pub fn express(
    catalog: &Catalog,
    p: &CorpusPoint,
    check: &dyn Fn(&Deployment) -> std::result::Result<(), String>,
) -> std::result::Result<Experiment, Refusal> {
    let p = &*p.as_compared();
    if !p.official || p.range_ratio.is_some_and(|r| (r - 0.8).abs() > 1e-9) {
        return Err(Refusal::Unofficial);
    }
    let pools = match (p.disaggregated, p.pools) {
        (false, _) => None,
        (true, Some((pre, dec))) if p.concurrency > 0 && pre.workers > 0 && dec.workers > 0 => Some((pre, dec)),
        (true, _) => return Err(Refusal::Disaggregated),
    };
    let large = !stated_features(p).is_empty();
    let engine_name = match pools {
        Some(_) => engine_behind_router(&p.engine),
        None => p.engine.as_str(),
    };
    let engine = EngineKind::from_name(engine_name).ok_or_else(|| Refusal::UnknownEngine(p.engine.clone()))?;
    let gpu = catalog.gpu(&gpu_name(&p.gpu)).map_err(|_| Refusal::UnknownGpu(p.gpu.clone()))?;
    let model_key = if is_dsr1_db_row(p) { "DeepSeek-R1".to_string() } else { model_name(&p.model) };
    let arch = catalog.model(&model_key).map_err(|_| Refusal::UnknownModel(p.model.clone()))?;
    if p.ttft_ms.is_none() && p.tpot_ms.is_none() {
        return Err(Refusal::NoStatistic);
    }
    let moe = arch.moe.is_some();
    // Attention DP, wide or split EP, PP: the layout the benchmark launched (corpus/layout.rs); plain
    // points keep the columns as they are.
    let (tp, expert_parallel, parallel, settings_concurrency) = if pools.is_some() {
        // Each pool's own layout (below) replaces this one: the row's aggregated columns do not
        // describe a worker.
        (1, false, crate::profile::Parallel::plain(), p.concurrency)
    } else if large {
        let l = layout(p, engine, &arch).ok_or(
            if !moe && p.attention_dp <= 1 && p.batch_size.is_some_and(|b| b != p.concurrency) {
                Refusal::DenseRankBatch
            } else if p.attention_dp > 1 || p.batch_size.is_some_and(|b| b != p.concurrency) {
                Refusal::AttentionDp
            } else {
                Refusal::MixedMoeLayout
            },
        )?;
        (l.tensor_parallel, l.expert_parallel, l.parallel, l.rank_concurrency)
    } else {
        (p.tensor_parallel, moe && p.moe_ep > 1, crate::profile::Parallel::plain(), p.concurrency)
    };
    if tp > gpu.link_domain_gpus.max(1) {
        return Err(Refusal::BeyondLinkDomain);
    }
    if !large && expert_parallel && (p.moe_tp > 1 || p.moe_ep != tp) {
        return Err(Refusal::MixedMoeLayout);
    }
    let amd = gpu.name.starts_with("MI");
    let w = weight_dtype(p, moe, amd)?;
    let kv = kv_dtype(p, engine, w)?;
    let speculative = match p.spec_decoding.as_deref() {
        None => None,
        Some(m) => Some(corpus_speculative(m, engine, amd, p.attention_dp > 1).ok_or(Refusal::SpeculativeDecoding)?),
    };
    let draft_tokens = speculative.as_ref().map_or(0, |s| s.tokens);
    let deployment = Deployment {
        model: model_key,
        gpu: gpu.name.clone(),
        tensor_parallel: tp,
        expert_parallel,
        parallel,
        engine,
        weight_dtype: w,
        kv_dtype: kv,
        settings: layout::launch_settings(
            p,
            &parallel,
            draft_tokens,
            benchmark_settings(p.client, engine, p.isl, settings_concurrency),
        ),
        speculative,
    };
    let mut deployment = deployment;
    deployment.settings.version = corpus_release(p, engine);
    let pd = match pools {
        None => None,
        Some((pre, dec)) => {
            let pool = |l: PoolLayout, prefill: bool| -> std::result::Result<Deployment, Refusal> {
                // The recipe the point launched, where pd_recipes.json resolves it, over the
                // pool as metadata.json states it.
                let recipe = p.pd_launch.as_deref().map(|r| if prefill { &r.prefill } else { &r.decode });
                let l = recipe.map_or(l, |r| layout::recipe_pool(p, l, r));
                let w = layout::worker(p, &l, moe, gpu.link_domain_gpus.max(1))?;
                let mut d = Deployment {
                    tensor_parallel: w.gpus,
                    expert_parallel: w.expert_parallel,
                    parallel: w.parallel,
                    settings: layout::launch_settings(
                        p,
                        &w.parallel,
                        draft_tokens,
                        pool_settings(p.client, engine, p.isl, l.batch_size, prefill),
                    ),
                    ..deployment.clone()
                };
                if let Some(r) = recipe {
                    d.parallel.redundant_experts = r.redundant_experts.unwrap_or(0);
                    d.settings.merge(&r.settings);
                    d.kv_dtype = r.kv_dtype.unwrap_or(d.kv_dtype);
                    if let (Some(s), Some(k)) = (d.speculative.as_mut(), r.spec_tokens.filter(|&k| k > 0)) {
                        s.tokens = k;
                    }
                }
                Ok(d)
            };
            let (prefill, decode) = (pool(pre, true)?, pool(dec, false)?);
            check(&prefill).map_err(Refusal::DoesNotResolve)?;
            Some(PdExperiment { prefill, decode, prefill_workers: pre.workers, decode_workers: dec.workers })
        }
    };
    let deployment = match &pd {
        Some(x) => x.decode.clone(),
        None => deployment,
    };
    check(&deployment).map_err(Refusal::DoesNotResolve)?;
    let requests = p.requests.unwrap_or(NVIDIA_ROUNDS * p.concurrency as u64);
    let (short_in, short_out) = p.client.length_shortfall();
    use crate::measured::lengths::{range_mean as mean, ratio_range};
    let (ir, or) = (ratio_range(p.isl, 1.0 - short_in), ratio_range(p.osl, 1.0 - short_out));
    let mut stats = Vec::new();
    if let Some((stat, v)) = p.ttft_ms {
        stats.push(MeasuredStat { metric: "ttft_s", stat, value: v / 1e3, key: "ttft_ms".into() });
    }
    if let Some((stat, v)) = p.tpot_ms {
        stats.push(MeasuredStat { metric: "tpot_ms", stat, value: v, key: "tpot_ms".into() });
    }
    let run = Arc::new(Run {
        source: RunSource {
            file: p.file.clone(),
            index: p.line,
            runs_in_file: 1,
            tool: Tool::VllmBenchServe,
            tool_version: None,
            model_id: Some(p.model.clone()),
            engine: Some(engine.as_str()),
        },
        load: RunLoad::Concurrency { clients: p.concurrency },
        requests,
        completed: requests,
        failed: 0,
        input_tokens_mean: mean(ir),
        output_tokens_mean: mean(or),
        per_request: vec![],
        stats: stats.clone(),
        not_compared: vec![],
        uniform_lengths: Some((ir, or)),
        length_percentiles: Default::default(),
    });
    let points = stats
        .iter()
        .map(|s| Point {
            line: p.line,
            report: format!("corpus:{}", p.client.as_str()),
            model: deployment.model.clone(),
            precision: Some(w),
            gpu: deployment.gpu.clone(),
            engine: engine.as_str().to_string(),
            scenario: p.id.clone(),
            input_tokens: Some(p.isl as u64),
            output_tokens: Some(p.osl as u64),
            load: LoadKind::ClosedLoop,
            concurrency: Some(p.concurrency),
            metric: s.metric.to_string(),
            value: s.value,
            approx: false,
            aggregation: Aggregation::Value,
            quote: format!("{}: {} {} = {}", p.id, crate::metrics::stat_name(s.stat), s.key, s.value),
            flags: vec![],
            stat: s.stat,
            run: Some(run.clone()),
        })
        .collect();
    Ok(Experiment {
        gpu: gpu.name.clone(),
        model: arch.name.clone(),
        family: crate::hardware::learned::model_family(&arch),
        engine,
        point: p.clone(),
        deployment,
        run,
        points,
        pd,
    })
}

/// The check [`express_all`] uses by default: the deployment resolves as `capsim simulate` would
/// build it (the model fits in memory with room for KV, the engine's defaults apply).
pub fn resolves(catalog: &Catalog) -> impl Fn(&Deployment) -> std::result::Result<(), String> + '_ {
    move |d: &Deployment| {
        crate::hardware::unmeasured_profile(catalog, &catalog.hardware, "corpus", d)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// Every point expressed or refused, in the corpus's order.
pub struct Expressed {
    pub experiments: Vec<Experiment>,
    pub refused: Vec<(CorpusPoint, Refusal)>,
}

impl Expressed {
    /// The plain experiments (no large-deployment feature): what the learned model is fitted on.
    pub fn plain(&self) -> Vec<&Experiment> {
        self.experiments.iter().filter(|e| e.is_plain()).collect()
    }

    /// The large deployments' experiments (disaggregated, MTP, attention-DP, ...): predicted, never
    /// fitted on.
    pub fn large(&self) -> Vec<&Experiment> {
        self.experiments.iter().filter(|e| !e.is_plain()).collect()
    }

    /// Points read.
    pub fn total(&self) -> usize {
        self.experiments.len() + self.refused.len()
    }

    /// Refusals counted by reason, the largest first (ties by name).
    pub fn counts(&self) -> Vec<(String, usize)> {
        let mut m: std::collections::BTreeMap<String, usize> = Default::default();
        for (_, r) in &self.refused {
            *m.entry(r.label()).or_default() += 1;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

/// Express every point; `check` as in [`express`], asked once per deployment (points repeat them).
pub fn express_all(
    catalog: &Catalog,
    points: Vec<CorpusPoint>,
    check: &dyn Fn(&Deployment) -> std::result::Result<(), String>,
) -> Expressed {
    let cache: std::cell::RefCell<std::collections::HashMap<String, std::result::Result<(), String>>> =
        Default::default();
    let cached = |d: &Deployment| -> std::result::Result<(), String> {
        let key = format!("{d:?}");
        if let Some(r) = cache.borrow().get(&key) {
            return r.clone();
        }
        let r = check(d);
        cache.borrow_mut().insert(key, r.clone());
        r
    };
    let duplicates = copies(catalog, &points);
    let mtp = unmarked_mtp(catalog, &points);
    let mut experiments = Vec::new();
    let mut refused = Vec::new();
    for ((p, dup), mtp) in points.into_iter().zip(duplicates).zip(mtp) {
        if let Some(d) = dup {
            refused.push((p, Refusal::Duplicate(d)));
            continue;
        }
        if mtp {
            refused.push((p, Refusal::UnmarkedMtp));
            continue;
        }
        match express(catalog, &p, &cached) {
            Ok(e) => experiments.push(e),
            Err(r) => refused.push((p, r)),
        }
    }
    Expressed { experiments, refused }
}

/// NVIDIA's rows that ran multi-token prediction without saying so (aic-e2e has no
/// speculative-decoding column). The NVIDIA dumps hold InferenceX's runs (see [`copies`]), and a
/// DeepSeek-R1 row measured on the day, GPU, engine and image of an inferencex-dsr1 MTP deployment's
/// run, and of no plain deployment's, is that MTP run. The rows' TPOTs say the same: against
/// InferenceX's runs of the same precision, TP, lengths and concurrency,
/// - B200 TensorRT-LLM 1.2.0rc6.post3 (5-6 February 2026, an image InferenceX pinned for MTP only;
///   its plain B200 runs used 1.2.0rc6.post2): 0.92 x the MTP runs' TPOT (median of 50 pairs),
///   0.59 x the plain runs' (54), where the post2 rows sit at 1.00 x plain (46) and 1.36 x MTP (24);
/// - H200 TensorRT-LLM 1.1.0rc2.post2 of 14 January 2026: 1.00 x MTP (11 pairs, several equal to
///   the digit), 0.62 x plain (96); the same image's rows of 28 January match the plain runs.
///
/// The draft length they ran is not stated, so they are refused rather than replayed as plain
/// decoding 40% too slow. Returns, per point, whether it is such a row.
fn unmarked_mtp(catalog: &Catalog, points: &[CorpusPoint]) -> Vec<bool> {
    use std::collections::HashSet;
    let run = |p: &CorpusPoint| (gpu_and_engine(catalog, p), p.engine_version.clone(), p.date.clone());
    let folder = || points.iter().filter(|p| p.set == "inferencex-dsr1" && !p.disaggregated && !p.date.is_empty());
    let plain: HashSet<_> = folder().filter(|p| p.spec_decoding.is_none()).map(run).collect();
    let mtp: HashSet<_> =
        folder().filter(|p| p.spec_decoding.is_some()).map(run).filter(|k| !plain.contains(k)).collect();
    points
        .iter()
        .map(|p| {
            p.set == "aic-e2e"
                && !p.is_inferencex_db_row()
                && p.spec_decoding.is_none()
                && !p.engine_version.is_empty()
                && p.model.to_ascii_lowercase().contains("deepseek-r1")
                && mtp.contains(&run(p))
        })
        .collect()
}

/// For each point, the point it copies, if any: the same GPU, engine, lengths, concurrency and
/// disaggregation with TTFT and TPOT equal to 1e-9. aic-e2e repeats measurements: InferenceX's
/// database rows repeat inferencex-dsr1's files, and the NVIDIA dumps (`source_file=2026-03-25.csv`,
/// `2026-04-06.csv`) repeat both and each other (about 1,300 rows in all). A copy replayed again would
/// count its measurement twice in the fit and the statistics, and a NVIDIA row that copies an
/// InferenceX run would be replayed with the wrong client (fixed lengths, a fitted request count,
/// not InferenceX's uniform lengths and 10 x concurrency requests). The point kept is the one whose
/// client is best stated: an inferencex-dsr1 file, then an InferenceX database row, then the first
/// other row in file order.
fn copies(catalog: &Catalog, points: &[CorpusPoint]) -> Vec<Option<Duplicate>> {
    use std::collections::HashMap;
    let same = |a: Option<(crate::metrics::StatKind, f64)>, b: Option<(crate::metrics::StatKind, f64)>| match (a, b) {
        (Some((_, x)), Some((_, y))) => (x - y).abs() <= 1e-9 * x.abs().max(y.abs()),
        (None, None) => true,
        _ => false,
    };
    let rank = |p: &CorpusPoint| match (p.set, p.is_inferencex_db_row()) {
        ("inferencex-dsr1", _) => 0,
        (_, true) => 1,
        _ => 2,
    };
    let mut order: Vec<usize> = (0..points.len()).collect();
    order.sort_by_key(|&i| (rank(&points[i]), i));
    let mut kept: HashMap<_, Vec<usize>> = HashMap::new();
    let mut out = vec![None; points.len()];
    for i in order {
        let p = &points[i];
        let key = (gpu_and_engine(catalog, p), p.isl, p.osl, p.concurrency, p.disaggregated);
        let group = kept.entry(key).or_default();
        match group.iter().find(|&&j| same(points[j].ttft_ms, p.ttft_ms) && same(points[j].tpot_ms, p.tpot_ms)) {
            Some(&j) => {
                out[i] =
                    Some(Duplicate { of: points[j].id.clone(), of_folder_point: points[j].set == "inferencex-dsr1" })
            }
            None => group.push(i),
        }
    }
    out
}

/// The corpus (embedded, or the folder `dir`) expressed on `catalog`, each deployment checked by
/// [`resolves`]: what `capsim points`, `calibrate` and `validate` read with `--corpus`.
pub fn load(catalog: &Catalog, dir: Option<&Path>) -> Result<Expressed> {
    let points = match dir {
        None => builtin_points()?,
        Some(d) => read_points(d)?,
    };
    Ok(express_all(catalog, points, &resolves(catalog)))
}
