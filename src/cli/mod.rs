//! Argument parsing (what the user typed) and its resolution into library objects (profile, workload).
//!
//! Every command writes its output with `outln!` and `out!`, never `println!`: a write that fails (a
//! full disk under `capsim sweep ... > out.txt`, `> /dev/full`) is an [`Error::Io`] naming standard
//! output (exit 2), where `println!` would panic. A closed pipe (`| head`) still ends the process
//! quietly by SIGPIPE (main.rs).

/// `println!` for command output: the write error, if any, as an [`Error::Io`] on standard output.
macro_rules! outln {
    () => {
        $crate::cli::write_stdout(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` for command output: the write error, if any, as an [`Error::Io`] on standard output.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_stdout(format_args!($($arg)*))
    };
}

mod autoscale;
mod batch;
mod calibrate;
mod capacity;
mod catalog;
mod disagg;
pub mod embed;
mod explain;
mod mixed;
mod plan;
mod plan_day;
mod plan_mixed;
mod report;
mod shard;
mod simulate;
mod sweep;
mod validate;
mod validate_corpus;

use capsim::catalog::Catalog;
use capsim::error::{Error, Result};
use capsim::metrics::RequestSlo;
use capsim::profile::{CapacityPolicy, EngineKind, EngineSettings, Profile, Retarget};
use capsim::units::Dtype;
use capsim::workload::trace::read_trace;
use capsim::workload::{LengthDist, LoadAxis, LoadTemplate, Process, RequestClass, Workload, WorkloadSpec};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "capsim", version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("CAPSIM_GIT_COMMIT"), ")"), about = "Capacity simulator for LLM inference serving", long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Fit step-time profiles from measured benchmark points.
    Calibrate(calibrate::CalibrateArgs),
    /// Simulate one workload on a profile and print every latency metric.
    Simulate(simulate::SimulateArgs),
    /// Simulate a list of loads (concurrencies, rates or burst sizes) in parallel.
    Sweep(sweep::SweepArgs),
    /// The largest load that meets an SLO; side by side across GPUs; fleet sizing.
    Capacity(capacity::CapacityArgs),
    /// The cheapest fleet (GPU type, TP, replicas) meeting the SLO at a target rate, with runner-ups,
    /// cost per hour and per million output tokens, and power.
    Plan(plan::PlanArgs),
    /// Replay every measured experiment and compare predicted with measured.
    Validate(validate::ValidateArgs),
    /// Break one engine step of a given batch into its parts (weights, KV, compute, attention,
    /// communication, overhead), in ms.
    Explain(explain::ExplainArgs),
    /// List the profiles.
    Profiles(catalog::ProfilesArgs),
    /// List the GPU catalog.
    Gpus(catalog::GpusArgs),
    /// List the model catalog with derived figures.
    Models(catalog::ModelsArgs),
    /// Check the measured points and refresh their computed flags.
    Points(catalog::PointsArgs),
    /// Run scenarios from a JSON-lines file (one per line: a command's flags as keys) in parallel; one
    /// JSON result per line, in input order.
    Batch(batch::BatchArgs),
    /// A benchmark report of a deployment (or several GPUs side by side): one self-contained HTML file
    /// or Markdown.
    Report(report::ReportArgs),
    /// Print a shell completion script: `capsim completions bash > /etc/bash_completion.d/capsim`
    /// (zsh: into a directory of $fpath as _capsim; fish: ~/.config/fish/completions/capsim.fish).
    Completions(CompletionsArgs),
    /// Join the JSON-lines files of sharded runs (--shard I/N --jsonl) into the unsharded run's output.
    Merge(shard::MergeArgs),
}

/// Write command output to standard output; a failed write is an [`Error::Io`] on "standard output".
/// Under [`embed::run_captured`] the output goes to that call's buffer instead.
pub fn write_stdout(args: std::fmt::Arguments) -> Result<()> {
    if let Some(r) = embed::write_captured(args) {
        return r;
    }
    use std::io::Write;
    std::io::stdout().lock().write_fmt(args).map_err(stdout_error)
}

fn stdout_error(err: std::io::Error) -> Error {
    Error::Io { path: "standard output".into(), err }
}

/// Run the command the arguments name. Its output is flushed before this returns, so a write that
/// fails at the end (the last line, buffered) is an error too, not lost at exit.
pub fn run() -> Result<()> {
    run_from(std::env::args_os())
}

/// [`run`] on the given arguments (the first is the program's name), as the `capsim` command the
/// Python package installs runs it.
pub fn run_from<I, T>(args: I) -> Result<()>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    set_command_line(&args);
    let parsed = parse(args);
    let result = match parsed {
        Ok(cli) => dispatch(cli.cmd),
        // A usage error goes to stderr with clap's exit code, as `e.exit()` does.
        Err(e) if e.use_stderr() => e.exit(),
        // --help and --version are output: a failed write is an error here too.
        Err(e) => e.print().map_err(stdout_error),
    };
    // A failed flush means the output is incomplete: that outranks what the command returned (a
    // warning such as NoAnswer promises that its output was printed).
    use std::io::Write;
    std::io::stdout().lock().flush().map_err(stdout_error)?;
    result
}

/// The exit code of a command's result, its error or warning written to standard error as the
/// `capsim` command writes it.
pub fn exit_code(result: Result<()>) -> u8 {
    match result {
        Ok(()) => 0,
        Err(e @ (Error::NothingMeasured(_) | Error::NoAnswer(_))) => {
            eprintln!("capsim: warning: {e}");
            e.exit_code()
        }
        Err(e) => {
            eprintln!("capsim: error: {e}");
            e.exit_code()
        }
    }
}

thread_local! {
    /// The arguments of the command running on this thread, for the reports that record it.
    static COMMAND_LINE: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn set_command_line(args: &[std::ffi::OsString]) {
    COMMAND_LINE.with(|c| *c.borrow_mut() = args.iter().map(|a| a.to_string_lossy().into_owned()).collect());
}

/// The command line being run, as a report records it: arguments joined by spaces, those with a
/// space quoted (the arguments given to [`run_from`] or [`embed::run_captured`], not the Python
/// interpreter's).
pub fn command_line() -> String {
    COMMAND_LINE.with(|c| {
        c.borrow()
            .iter()
            .map(|s| if s.contains(' ') { format!("\"{s}\"") } else { s.clone() })
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// The arguments parsed by the command's definitions. Negative numbers are values to check ("must be
/// positive"), not unknown flags.
fn parse<I, T>(args: I) -> std::result::Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Cli::command()
        .mut_subcommands(|c| c.allow_negative_numbers(true))
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m))
}

fn dispatch(cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Calibrate(a) => calibrate::run(a),
        Cmd::Simulate(a) => simulate::run(a),
        Cmd::Sweep(a) => sweep::run(a),
        Cmd::Capacity(a) => capacity::run(a),
        Cmd::Plan(a) => plan::run(a),
        Cmd::Validate(a) => validate::run(a),
        Cmd::Explain(a) => explain::run(a),
        Cmd::Profiles(a) => catalog::profiles(a),
        Cmd::Gpus(a) => catalog::gpus(a),
        Cmd::Models(a) => catalog::models(a),
        Cmd::Points(a) => catalog::points(a),
        Cmd::Batch(a) => batch::run(a),
        Cmd::Merge(a) => shard::merge(a),
        Cmd::Report(a) => report::run(a),
        Cmd::Completions(a) => {
            // Into memory first: clap_complete panics when its writer fails.
            let mut script = Vec::new();
            clap_complete::generate(a.shell, &mut Cli::command(), "capsim", &mut script);
            out!("{}", String::from_utf8_lossy(&script))
        }
    }
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// A progress bar on stderr when it is a terminal (hidden otherwise, so pipes and files get only the
/// results): `len` items of `what`, or, when `len` is 0, a spinner counting them with the elapsed
/// time.
pub fn progress_bar(len: u64, what: &str) -> indicatif::ProgressBar {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    use std::io::IsTerminal;
    let pb = if len == 0 { ProgressBar::new_spinner() } else { ProgressBar::new(len) };
    if embed::report_progress(&pb) {
        // A captured run: hidden here, drawn by the caller from its position.
        pb.set_draw_target(ProgressDrawTarget::hidden());
    } else if std::io::stderr().is_terminal() {
        pb.set_draw_target(ProgressDrawTarget::stderr());
        let template = if len == 0 {
            format!("{{spinner}} {{pos}} {what} {{elapsed}} {{msg}}")
        } else {
            format!("{{bar:30}} {{pos}}/{{len}} {what} {{elapsed}} {{msg}}")
        };
        pb.set_style(ProgressStyle::with_template(&template).expect("template"));
        if len == 0 {
            pb.enable_steady_tick(std::time::Duration::from_millis(120));
        }
    } else {
        pb.set_draw_target(ProgressDrawTarget::hidden());
    }
    pb
}

/// capsim's version with the commit it was built from.
pub fn version() -> String {
    format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("CAPSIM_GIT_COMMIT"))
}

/// Which profile, moved where, with which engine settings.
#[derive(Args, Debug, Clone, Default)]
pub struct ProfileArgs {
    /// Profile name (see `capsim profiles`) or a profile TOML file; default: the embedded default.
    #[arg(long, help_heading = "Deployment")]
    pub profile: Option<String>,
    /// Retarget the profile to another GPU of the catalog (keeps fitted efficiencies).
    #[arg(long, help_heading = "Deployment")]
    pub gpu: Option<String>,
    /// Retarget the profile to another model: a catalog name or a config.json path.
    #[arg(long, help_heading = "Deployment")]
    pub model: Option<String>,
    /// Tensor-parallel degree (GPUs per replica).
    #[arg(long, help_heading = "Deployment")]
    pub tp: Option<u32>,
    /// MoE experts placed whole on the GPUs and reached by all-to-all (vLLM --enable-expert-parallel).
    #[arg(long, help_heading = "Deployment")]
    pub expert_parallel: bool,
    /// Attention data-parallel ranks splitting the --tp GPUs: each rank holds its own requests and KV
    /// and runs attention over tp / N GPUs; the MoE layers span all of them (SGLang --dp with
    /// --enable-dp-attention, TensorRT-LLM enable_attention_dp; vLLM -tp T -dp D is --tp T*D
    /// --attention-dp D). MoE models only.
    #[arg(long, help_heading = "Deployment")]
    pub attention_dp: Option<u32>,
    /// Expert-parallel size: GPUs the routed experts are spread over whole, dividing --tp; each expert
    /// is split over tp / N GPUs (TensorRT-LLM moe_expert_parallel_size, SGLang --ep-size).
    /// --expert-parallel is --ep equal to --tp.
    #[arg(long, help_heading = "Deployment")]
    pub ep: Option<u32>,
    /// Pipeline stages, each of --tp GPUs holding n_layers / N layers; N micro-batches in flight
    /// (vLLM --pipeline-parallel-size, SGLang --pp-size).
    #[arg(long, help_heading = "Deployment")]
    pub pp: Option<u32>,
    /// Expert slots beyond the routed experts, copies of busy ones, so that an EP group that does not
    /// divide the experts fills evenly: 256 experts + 32 over --ep 24, 48 or 72 (SGLang
    /// --ep-num-redundant-experts; TensorRT-LLM's load balancer num_slots minus the experts). Their
    /// weights take memory, and a touched expert's copies read its weights too.
    #[arg(long, help_heading = "Deployment")]
    pub redundant_experts: Option<u32>,
    /// Extra GPU catalog file (TOML, models/gpus.toml format) that adds to or overrides the built-in one.
    #[arg(long, help_heading = "Deployment")]
    pub gpus_file: Option<PathBuf>,
    /// Shared hardware model file (written by `capsim calibrate` as hardware.toml or NAME.hardware.toml)
    /// that replaces the built-in one for deployments without measurements.
    #[arg(long, help_heading = "Deployment")]
    pub hardware: Option<PathBuf>,
    /// Engine policy.
    #[arg(long, value_enum, help_heading = "Engine")]
    pub engine: Option<EngineArg>,
    /// Weight precision: bf16, fp16, fp8, mxfp4, nvfp4 or int4 (AWQ/GPTQ W4A16); default: the profile's,
    /// or for another model its config.json quantization_config, else BF16.
    #[arg(long, help_heading = "Deployment")]
    pub precision: Option<String>,
    /// KV cache dtype: bf16, fp16 or fp8.
    #[arg(long, help_heading = "Deployment")]
    pub kv_dtype: Option<String>,
    /// vLLM max_num_batched_tokens (SGLang: chunked_prefill_size).
    #[arg(long, help_heading = "Engine")]
    pub max_num_batched_tokens: Option<u32>,
    /// vLLM max_num_seqs (SGLang: max_running_requests).
    #[arg(long, help_heading = "Engine")]
    pub max_num_seqs: Option<u32>,
    /// KV capacity in tokens (default: derived from GPU memory).
    #[arg(long, help_heading = "Engine")]
    pub kv_capacity_tokens: Option<u64>,
    /// Fraction of GPU memory the engine may use.
    #[arg(long, help_heading = "Engine")]
    pub gpu_memory_utilization: Option<f64>,
    /// KV block size in tokens.
    #[arg(long, help_heading = "Engine")]
    pub block_size: Option<u32>,
    /// SGLang: run decodes inside prefill batches.
    #[arg(long, help_heading = "Engine")]
    pub enable_mixed_chunk: bool,
    /// SGLang: run a decode batch between consecutive prefill batches while requests are decoding.
    #[arg(long, help_heading = "Engine")]
    pub interleave_decode: bool,
    /// SGLang: decode steps run back to back before new requests are considered (--num-continuous-decode-steps).
    #[arg(long, help_heading = "Engine")]
    pub num_continuous_decode_steps: Option<u32>,
    /// SGLang: the scheduler takes new requests only every N decode steps (--scheduler-recv-interval).
    #[arg(long, help_heading = "Engine")]
    pub scheduler_recv_interval: Option<u32>,
    /// Tokens per streamed response (SGLang and vLLM --stream-interval, TensorRT-LLM stream_interval): the API server's per-token cost is paid once per this many tokens.
    #[arg(long, help_heading = "Engine")]
    pub stream_interval: Option<u32>,
    /// SGLang: max_prefill_tokens of one prefill batch.
    #[arg(long, help_heading = "Engine")]
    pub max_prefill_tokens: Option<u32>,
    /// SGLang: initial new_token_ratio (admission reservation per running request).
    #[arg(long, help_heading = "Engine")]
    pub new_token_ratio_init: Option<f64>,
    /// SGLang: floor of new_token_ratio.
    #[arg(long, help_heading = "Engine")]
    pub new_token_ratio_min: Option<f64>,
    /// SGLang: decode steps over which new_token_ratio decays from its initial value to its floor.
    #[arg(long, help_heading = "Engine")]
    pub new_token_ratio_decay_steps: Option<u32>,
    /// Engine release whose defaults and scheduler apply, e.g. 0.18.1 (default: the newest capsim
    /// read: vLLM 0.33.0, SGLang 0.5.23, TensorRT-LLM 1.2.1; ENGINES.md lists what changes)
    #[arg(long, help_heading = "Engine")]
    pub engine_version: Option<String>,
    /// vLLM: admit a waiting request only when its whole prompt fits the free KV blocks
    /// (scheduler_reserve_full_isl; default true from 0.19)
    #[arg(long, help_heading = "Engine")]
    pub reserve_full_prompt: Option<bool>,
    /// vLLM: share of KV blocks kept free when admitting waiting requests (--scheduler-watermark)
    #[arg(long, help_heading = "Engine")]
    pub watermark: Option<f64>,
    /// SGLang: clients send ignore_eos (sglang bench_serving's default): from 0.5.22 admission reserves
    /// the whole remaining output
    #[arg(long, help_heading = "Engine")]
    pub ignore_eos: bool,
    /// TensorRT-LLM capacity_scheduler_policy
    #[arg(long, value_enum, help_heading = "Engine")]
    pub capacity_scheduler_policy: Option<CapacityPolicyArg>,
    /// TensorRT-LLM: split prompts over steps (enable_chunked_prefill; default off)
    #[arg(long, help_heading = "Engine")]
    pub enable_chunked_prefill: bool,
    /// TensorRT-LLM: share of the memory free after weights and activations given to the KV cache
    /// (kv_cache_config.free_gpu_memory_fraction; default 0.9)
    #[arg(long, help_heading = "Engine")]
    pub free_gpu_memory_fraction: Option<f64>,
    /// Prefix caching, on by default as in the engines (simulated for vLLM and SGLang: block hashes,
    /// LRU eviction); it matters when requests share a prefix (system prompts, conversations, trace
    /// hash_ids)
    #[arg(long, value_enum, help_heading = "Engine")]
    pub prefix_caching: Option<OnOff>,
    /// Speculative decoding: the draft (mtp: the model's multi-token-prediction layer; eagle: a
    /// one-layer EAGLE head; ngram: prompt lookup on the host). Needs --spec-tokens.
    #[arg(long, value_enum, help_heading = "Speculative decoding")]
    pub spec_method: Option<SpecMethodArg>,
    /// Tokens drafted and verified per decode step (K; SGLang's --speculative-num-draft-tokens minus 1).
    #[arg(long, help_heading = "Speculative decoding")]
    pub spec_tokens: Option<u32>,
    /// Acceptance of each drafted token given the previous one was accepted: A, or a1,...,aK per
    /// position, each in [0, 1] (default for mtp: 0.85, DeepSeek-V3's report; eagle and ngram: required)
    #[arg(long, help_heading = "Speculative decoding")]
    pub spec_accept_rate: Option<String>,
    /// Host memory for KV blocks the GPU prefix cache evicts, GB per replica (vLLM's
    /// OffloadingConnector cpu_bytes_to_use): a later prefix hit there loads them back over the
    /// GPU's host link (PCIe, NVLink-C2C on GB200/GB300) instead of recomputing; 0: off
    #[arg(long, help_heading = "Engine", allow_negative_numbers = true)]
    pub kv_offload_gb: Option<f64>,
    /// Disaggregated prefill/decode: prefill workers (with --decode-workers; src/cli/disagg.rs).
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_workers: Option<u32>,
    /// GPUs per prefill worker (tensor parallelism); default --tp.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_tp: Option<u32>,
    /// Expert-parallel size of a prefill worker: GPUs its routed experts are spread over whole,
    /// dividing its TP (as --ep; its TP: experts whole per GPU); default the shared --ep.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_ep: Option<u32>,
    /// Redundant expert slots of a prefill worker (as --redundant-experts, over its EP group);
    /// default the shared --redundant-experts.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_redundant_experts: Option<u32>,
    /// Attention data-parallel ranks splitting a prefill worker's GPUs (as --attention-dp; MoE
    /// models only); default the shared --attention-dp.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_attention_dp: Option<u32>,
    /// The prefill workers' GPU; default --gpu.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_gpu: Option<String>,
    /// A prefill worker's running-request cap, each attention-DP rank's (as --max-num-seqs;
    /// TensorRT-LLM max_batch_size); default the shared --max-num-seqs.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_max_num_seqs: Option<u32>,
    /// A prefill worker's token budget per step, each rank's (as --max-num-batched-tokens;
    /// TensorRT-LLM max_num_tokens, SGLang chunked_prefill_size / dp_size); default the shared one.
    #[arg(long, help_heading = "Disaggregated")]
    pub prefill_max_num_batched_tokens: Option<u32>,
    /// Decode workers (with --prefill-workers).
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_workers: Option<u32>,
    /// GPUs per decode worker (tensor parallelism); default --tp.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_tp: Option<u32>,
    /// Expert-parallel size of a decode worker (as --prefill-ep).
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_ep: Option<u32>,
    /// Redundant expert slots of a decode worker (as --redundant-experts, over its EP group);
    /// default the shared --redundant-experts.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_redundant_experts: Option<u32>,
    /// Attention data-parallel ranks splitting a decode worker's GPUs (as --attention-dp): a
    /// request's KV lives on one rank, so the transfer lands on that rank's tp / N GPUs.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_attention_dp: Option<u32>,
    /// The decode workers' GPU; default --gpu.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_gpu: Option<String>,
    /// A decode worker's running-request cap, each rank's (as --prefill-max-num-seqs).
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_max_num_seqs: Option<u32>,
    /// A decode worker's token budget per step, each rank's (as --prefill-max-num-batched-tokens):
    /// it bounds the tokens the worker computes, not the prompts it receives computed.
    #[arg(long, help_heading = "Disaggregated")]
    pub decode_max_num_batched_tokens: Option<u32>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecMethodArg {
    Mtp,
    Eagle,
    Ngram,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum EngineArg {
    Vllm,
    Sglang,
    Trtllm,
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum CapacityPolicyArg {
    GuaranteedNoEvict,
    MaxUtilization,
}

/// A dtype flag's value.
pub fn parse_dtype(flag: &str, s: &str, allowed: &[Dtype]) -> Result<Dtype> {
    let names = allowed.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
    Dtype::parse(s)
        .filter(|d| allowed.contains(d))
        .ok_or_else(|| Error::flag(flag, format!("unknown value `{s}`; one of {names}")))
}

pub const WEIGHT_DTYPES: &[Dtype] = &[Dtype::Bf16, Dtype::Fp16, Dtype::Fp8, Dtype::Mxfp4, Dtype::Int4, Dtype::Nvfp4];
pub const KV_DTYPES: &[Dtype] = &[Dtype::Bf16, Dtype::Fp16, Dtype::Fp8];

impl ProfileArgs {
    /// The deployment changes the flags ask for.
    pub fn retarget(&self) -> Result<Retarget> {
        Ok(Retarget {
            gpu: self.gpu.clone(),
            model: self.model.clone(),
            tensor_parallel: self.tp,
            expert_parallel: self.expert_parallel.then_some(true),
            weight_dtype: self
                .precision
                .as_deref()
                .map(|p| parse_dtype("--precision", p, WEIGHT_DTYPES))
                .transpose()?,
            kv_dtype: self.kv_dtype.as_deref().map(|p| parse_dtype("--kv-dtype", p, KV_DTYPES)).transpose()?,
        })
    }
    /// The engine settings the flags set (None where not given).
    pub fn engine_settings(&self) -> EngineSettings {
        EngineSettings {
            kind: self.engine.map(|e| match e {
                EngineArg::Vllm => EngineKind::Vllm,
                EngineArg::Sglang => EngineKind::Sglang,
                EngineArg::Trtllm => EngineKind::Trtllm,
            }),
            version: self.engine_version.clone(),
            reserve_full_prompt: self.reserve_full_prompt,
            watermark: self.watermark,
            ignore_eos: self.ignore_eos.then_some(true),
            capacity_scheduler_policy: self.capacity_scheduler_policy.map(|p| match p {
                CapacityPolicyArg::GuaranteedNoEvict => CapacityPolicy::GuaranteedNoEvict,
                CapacityPolicyArg::MaxUtilization => CapacityPolicy::MaxUtilization,
            }),
            enable_chunked_prefill: self.enable_chunked_prefill.then_some(true),
            free_gpu_memory_fraction: self.free_gpu_memory_fraction,
            prefix_caching: self.prefix_caching.map(|v| v == OnOff::On),
            kv_offload_gb: self.kv_offload_gb,
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_num_seqs: self.max_num_seqs,
            block_size_tokens: self.block_size,
            gpu_memory_utilization: self.gpu_memory_utilization,
            kv_capacity_tokens: self.kv_capacity_tokens,
            enable_mixed_chunk: self.enable_mixed_chunk.then_some(true),
            interleave_decode: self.interleave_decode.then_some(true),
            num_continuous_decode_steps: self.num_continuous_decode_steps,
            scheduler_recv_interval: self.scheduler_recv_interval,
            stream_interval: self.stream_interval,
            max_prefill_tokens: self.max_prefill_tokens,
            new_token_ratio_init: self.new_token_ratio_init,
            new_token_ratio_min: self.new_token_ratio_min,
            new_token_ratio_decay_steps: self.new_token_ratio_decay_steps,
            chunked_prefill_size: self.max_num_batched_tokens,
            max_running_requests: self.max_num_seqs,
            attention_dp_balance: None,
            attention_dp_timeout_iters: None,
            attention_dp_batching_wait_iters: None,
        }
    }
    pub fn catalog(&self) -> Result<Catalog> {
        let mut c = Catalog::builtin();
        if let Some(f) = &self.gpus_file {
            c.add_gpu_file(f)?;
        }
        if let Some(f) = &self.hardware {
            c.hardware = capsim::hardware::SharedModel::parse(&f.display().to_string(), &capsim::error::read_file(f)?)?;
        }
        Ok(c)
    }
    /// The flags given, as typed (for commands that take the group only in some modes).
    pub fn given_flags(&self) -> Vec<&'static str> {
        [
            ("--profile", self.profile.is_some()),
            ("--gpu", self.gpu.is_some()),
            ("--model", self.model.is_some()),
            ("--tp", self.tp.is_some()),
            ("--expert-parallel", self.expert_parallel),
            ("--attention-dp", self.attention_dp.is_some()),
            ("--ep", self.ep.is_some()),
            ("--pp", self.pp.is_some()),
            ("--redundant-experts", self.redundant_experts.is_some()),
            ("--gpus-file", self.gpus_file.is_some()),
            ("--hardware", self.hardware.is_some()),
            ("--engine", self.engine.is_some()),
            ("--precision", self.precision.is_some()),
            ("--kv-dtype", self.kv_dtype.is_some()),
            ("--max-num-batched-tokens", self.max_num_batched_tokens.is_some()),
            ("--max-num-seqs", self.max_num_seqs.is_some()),
            ("--kv-capacity-tokens", self.kv_capacity_tokens.is_some()),
            ("--gpu-memory-utilization", self.gpu_memory_utilization.is_some()),
            ("--block-size", self.block_size.is_some()),
            ("--enable-mixed-chunk", self.enable_mixed_chunk),
            ("--interleave-decode", self.interleave_decode),
            ("--num-continuous-decode-steps", self.num_continuous_decode_steps.is_some()),
            ("--scheduler-recv-interval", self.scheduler_recv_interval.is_some()),
            ("--stream-interval", self.stream_interval.is_some()),
            ("--max-prefill-tokens", self.max_prefill_tokens.is_some()),
            ("--new-token-ratio-init", self.new_token_ratio_init.is_some()),
            ("--new-token-ratio-min", self.new_token_ratio_min.is_some()),
            ("--new-token-ratio-decay-steps", self.new_token_ratio_decay_steps.is_some()),
            ("--engine-version", self.engine_version.is_some()),
            ("--reserve-full-prompt", self.reserve_full_prompt.is_some()),
            ("--watermark", self.watermark.is_some()),
            ("--ignore-eos", self.ignore_eos),
            ("--capacity-scheduler-policy", self.capacity_scheduler_policy.is_some()),
            ("--enable-chunked-prefill", self.enable_chunked_prefill),
            ("--free-gpu-memory-fraction", self.free_gpu_memory_fraction.is_some()),
            ("--prefix-caching", self.prefix_caching.is_some()),
            ("--spec-method", self.spec_method.is_some()),
            ("--spec-tokens", self.spec_tokens.is_some()),
            ("--spec-accept-rate", self.spec_accept_rate.is_some()),
            ("--kv-offload-gb", self.kv_offload_gb.is_some()),
        ]
        .into_iter()
        .chain(self.pd_flag_list())
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }
    /// The `[gpu]` keys --attention-dp, --ep and --pp set (the profile's own expert_parallel gives way
    /// to --ep; the flag --expert-parallel does not).
    fn set_layout(&self, g: &mut capsim::profile::GpuRef) {
        if let Some(n) = self.attention_dp {
            g.attention_dp = Some(n);
        }
        if let Some(n) = self.ep {
            g.expert_parallel_size = Some(n);
            if !self.expert_parallel {
                g.expert_parallel = None;
            }
        }
        if let Some(n) = self.pp {
            g.pipeline_parallel = Some(n);
        }
        if let Some(n) = self.redundant_experts {
            g.redundant_experts = Some(n);
        }
    }
    /// `p` with the layout --attention-dp, --ep and --pp state (profile/parallel.rs); `p` itself when
    /// none is given. A bad layout is refused naming its flag.
    fn apply_layout(&self, catalog: &Catalog, p: Profile) -> Result<Profile> {
        if self.attention_dp.is_none() && self.ep.is_none() && self.pp.is_none() && self.redundant_experts.is_none() {
            return Ok(p);
        }
        let mut f = p.file.clone();
        self.set_layout(&mut f.gpu);
        // A KV capacity pinned for another layout no longer holds.
        f.engine.kv_capacity_tokens = None;
        let mut r = f.resolve("command line", catalog).map_err(|e| {
            let flag = match &e {
                Error::Input { at, .. } => match layout_flag(at.field.as_deref()) {
                    Some(flag) => flag,
                    None => return e,
                },
                _ => return e,
            };
            match e {
                Error::Input { msg, .. } => Error::flag(flag, msg),
                other => other,
            }
        })?;
        r.retargeted_from = p.retargeted_from.clone();
        r.retarget_method = p.retarget_method.clone();
        Ok(r)
    }
    /// The resolved profile: loaded, engine overrides applied, retargeted if asked. A name no catalog
    /// knows, or a GPU count out of range, is refused naming the flag that gave it.
    pub fn resolve(&self, catalog: &Catalog) -> Result<Profile> {
        if let Some(flag) = self.pd_flags().next() {
            return Err(Error::flag(
                flag,
                "a disaggregated deployment runs in simulate, capacity --disaggregated and explain only",
            ));
        }
        if let Some(gb) = self.kv_offload_gb {
            capsim::profile::offload::check_gb(gb).map_err(|msg| Error::flag("--kv-offload-gb", msg))?;
        }
        let spec = self.speculative()?;
        let mut p = self.resolve_plain(catalog)?;
        if spec.is_some() {
            // Validated by `speculative` as ProfileFile::resolve validates a profile's table.
            p.file.speculative = spec;
        }
        Ok(p)
    }
    /// The speculative decoding the flags ask for (None without --spec-method), each problem named by
    /// its flag.
    pub fn speculative(&self) -> Result<Option<capsim::profile::Speculative>> {
        use capsim::profile::spec::{parse_rates, MAX_SPEC_TOKENS, MTP_DEFAULT_ACCEPT, MTP_DEFAULT_SOURCE};
        use capsim::profile::{SpecMethod, Speculative};
        let Some(m) = self.spec_method else {
            for (flag, given) in
                [("--spec-tokens", self.spec_tokens.is_some()), ("--spec-accept-rate", self.spec_accept_rate.is_some())]
            {
                if given {
                    return Err(Error::flag(flag, "needs --spec-method (mtp, eagle or ngram)"));
                }
            }
            return Ok(None);
        };
        let method = match m {
            SpecMethodArg::Mtp => SpecMethod::Mtp,
            SpecMethodArg::Eagle => SpecMethod::Eagle,
            SpecMethodArg::Ngram => SpecMethod::Ngram,
        };
        let k = self.spec_tokens.ok_or_else(|| {
            Error::flag(
                "--spec-tokens",
                format!("required with --spec-method: tokens drafted per step, 1..={MAX_SPEC_TOKENS}"),
            )
        })?;
        if k == 0 || k > MAX_SPEC_TOKENS {
            return Err(Error::flag("--spec-tokens", format!("must be in 1..={MAX_SPEC_TOKENS}, got {k}")));
        }
        let (rates, source) = match (&self.spec_accept_rate, method) {
            (Some(s), _) => {
                (parse_rates(s).map_err(|e| Error::flag("--spec-accept-rate", e))?, "--spec-accept-rate".to_string())
            }
            (None, SpecMethod::Mtp) => (vec![MTP_DEFAULT_ACCEPT], MTP_DEFAULT_SOURCE.to_string()),
            (None, _) => {
                return Err(Error::flag(
                    "--spec-accept-rate",
                    format!(
                        "required with --spec-method {}: no published acceptance applies to every model",
                        method.as_str()
                    ),
                ))
            }
        };
        let mut s = Speculative::new(method, k, rates);
        s.accept_rate_source = source;
        if let Some((_, msg)) = s.problem() {
            return Err(Error::flag("--spec-accept-rate", msg));
        }
        Ok(Some(s))
    }
    /// [`ProfileArgs::resolve`] without speculative decoding.
    fn resolve_plain(&self, catalog: &Catalog) -> Result<Profile> {
        let base = Profile::load(self.profile.as_deref(), catalog).map_err(|e| match e {
            Error::Unknown { kind, .. } if kind.starts_with("profile") => Error::flag("--profile", e.to_string()),
            other => other,
        })?;
        let over = self.engine_settings();
        // The layout flags apply before the move, so that --tp and --attention-dp are checked together.
        let mut base = base;
        self.set_layout(&mut base.file.gpu);
        let p = base.retarget(catalog, &self.retarget()?).map_err(|e| {
            let flag = match &e {
                Error::Unknown { kind: "GPU", .. } => "--gpu",
                Error::Unknown { kind: "model", .. } => "--model",
                Error::Input { at, .. } if at.field.as_deref() == Some("gpu.tensor_parallel") => "--tp",
                Error::Input { at, .. }
                    if layout_flag(at.field.as_deref()).is_some()
                        && at.field.as_deref() != Some("gpu.expert_parallel") =>
                {
                    layout_flag(at.field.as_deref()).unwrap_or("--tp")
                }
                _ => return e,
            };
            match e {
                Error::Input { msg, .. } => Error::flag(flag, msg),
                other => Error::flag(flag, other.to_string()),
            }
        })?;
        let p = self.apply_layout(catalog, p)?;
        if over == EngineSettings::default() {
            return Ok(p);
        }
        let mut f = p.file.clone();
        let switched = over.kind.filter(|&k| k != p.engine.kind);
        if switched.is_some() {
            // Another engine: none of the profile's engine settings (a fitted memory fraction, a
            // running-sequence cap) means the same thing there; start from that engine's defaults.
            f.engine = EngineSettings::default();
        }
        f.engine.merge(&over);
        let mut r = f.resolve("command line", catalog).map_err(|e| match e {
            Error::Input { at, msg }
                if at.field.as_deref() == Some("engine.kv_offload_gb") && over.kv_offload_gb.is_some() =>
            {
                Error::flag("--kv-offload-gb", msg)
            }
            other => other,
        })?;
        r.retargeted_from = p.retargeted_from.clone();
        r.retarget_method = p.retarget_method.clone();
        if let Some(k) = switched {
            // The step costs were measured under the profile's engine; another engine's scheduler runs
            // on them, its own kernels and overheads unmeasured: an extrapolation, said as such.
            let why = format!(
                "engine switched from {} to {}: its scheduler and memory formula, on step costs measured under {}",
                p.engine.kind.as_str(),
                k.as_str(),
                p.engine.kind.as_str()
            );
            r.retargeted_from.get_or_insert_with(|| p.name().to_string());
            r.retarget_method = Some(match r.retarget_method.take() {
                Some(m) => format!("{m}; {why}"),
                None => why,
            });
        }
        Ok(r)
    }
}

/// The flag of a layout field of the profile's `[gpu]` table (profile/parallel.rs).
fn layout_flag(field: Option<&str>) -> Option<&'static str> {
    match field? {
        "gpu.attention_dp" => Some("--attention-dp"),
        "gpu.expert_parallel_size" => Some("--ep"),
        "gpu.pipeline_parallel" => Some("--pp"),
        "gpu.redundant_experts" => Some("--redundant-experts"),
        "gpu.expert_parallel" => Some("--expert-parallel"),
        _ => None,
    }
}

/// The workload, shared by simulate, sweep and capacity: request lengths and run length as flags, a
/// workload TOML file, or a trace. The load level (clients, rate, burst size, scale) is each
/// command's own.
#[derive(Args, Debug, Clone, Default)]
pub struct WorkloadArgs {
    /// Input tokens: N, or uniform:MIN:MAX, normal:MEAN:SD, lognormal:MEAN:SD [default: 1024]
    #[arg(long, allow_hyphen_values = true, help_heading = "Workload")]
    pub input_len: Option<String>,
    /// Output tokens, same forms as --input-len [default: 256]
    #[arg(long, allow_hyphen_values = true, help_heading = "Workload")]
    pub output_len: Option<String>,
    /// Requests to send (closed and open loops); default 5 rounds of a closed loop (>= 100), 1000 open.
    /// Overrides a workload file's count.
    #[arg(long, help_heading = "Workload")]
    pub requests: Option<u64>,
    /// Stop sending after this many simulated seconds (overrides a workload file's duration_s).
    #[arg(long, help_heading = "Workload")]
    pub duration: Option<f64>,
    /// Closed loop: seconds a client waits after a response before its next request [default: 0]
    #[arg(long, help_heading = "Workload")]
    pub think_time: Option<f64>,
    /// Closed loop: draw think times from an exponential with mean --think-time.
    #[arg(long, help_heading = "Workload")]
    pub think_exponential: bool,
    /// Open loop arrival process [default: poisson]
    #[arg(long, value_enum, help_heading = "Workload")]
    pub process: Option<ProcessArg>,
    /// Gamma burstiness as `vllm bench serve --burstiness` (implies --process gamma unless 1).
    #[arg(long, help_heading = "Workload")]
    pub burstiness: Option<f64>,
    /// Leave the first N requests out of the metrics (overrides a workload file's warmup_requests).
    #[arg(long, help_heading = "Workload")]
    pub warmup_requests: Option<u64>,
    /// Leave the last N requests out of the metrics (overrides a workload file's cooldown_requests).
    #[arg(long, help_heading = "Workload")]
    pub cooldown_requests: Option<u64>,
    /// Requests are turns of conversations of this many turns (N, or uniform:MIN:MAX, ...): each turn
    /// re-sends the history and adds a user message of --input-len tokens; the reply is --output-len.
    #[arg(long, help_heading = "Workload")]
    pub turns: Option<String>,
    /// Conversations: seconds a user takes between a reply and the next turn [default: 0]
    #[arg(long, help_heading = "Workload")]
    pub turn_think_time: Option<f64>,
    /// Every request starts with the same system prompt of this many tokens (then its input).
    #[arg(long, help_heading = "Workload")]
    pub system_prompt_tokens: Option<u32>,
    /// A workload TOML file: request classes, arrivals (closed loop, burst, open loop with a rate
    /// schedule), run length. A load flag of the command replaces its arrivals and keeps the rest.
    #[arg(long, help_heading = "Workload")]
    pub workload: Option<PathBuf>,
    /// Replay a trace (CSV or JSONL: arrival time, input tokens, output tokens; Mooncake, Azure,
    /// BurstGPT). Its load axis is the scale (sweep --scale, capacity --load scale).
    #[arg(long, help_heading = "Workload")]
    pub trace: Option<PathBuf>,
    /// Replay the trace this many times faster (2 halves every gap between arrivals: twice the traffic).
    /// Sweep: the base that --scale values multiply. Capacity searches the scale itself.
    #[arg(long, help_heading = "Workload")]
    pub trace_rate_scale: Option<f64>,
    /// Replay only the trace's requests sent in START:END seconds of the original trace (before scaling).
    #[arg(long, help_heading = "Workload")]
    pub trace_window: Option<String>,
}

/// Where a workload came from, for notes and refusals.
#[derive(Debug, Clone)]
pub struct WorkloadSource {
    pub template: LoadTemplate,
    /// The file's own load (axis and level) when the workload came from a file or a trace.
    pub own_load: Option<(LoadAxis, f64)>,
    /// The file's workload exactly as written (simulate runs it when no load flag is given).
    pub file_workload: Option<Workload>,
    /// "workload file X" or "trace X".
    pub origin: Option<String>,
}

impl WorkloadSource {
    /// Whether the command's load axis applies: a trace keeps its arrivals only on the scale axis; a
    /// workload file's arrivals of another kind than the axis are replaced (said on stderr).
    pub fn check_axis(&self, axis: LoadAxis, flag: &str) -> Result<()> {
        let Some((own, _)) = self.own_load else {
            if axis == LoadAxis::Scale {
                return Err(Error::flag(
                    flag,
                    "a scale multiplies a trace's or a workload file's own rate: give --trace or --workload, or use --rate",
                ));
            }
            return Ok(());
        };
        let origin = self.origin.as_deref().unwrap_or("the workload");
        if self.template.is_trace() && axis != LoadAxis::Scale {
            return Err(Error::flag(
                flag,
                format!("{origin} has its own arrival times: vary its rate with --scale (sweep) or --load scale (capacity), or --trace-rate-scale (simulate)"),
            ));
        }
        if axis == LoadAxis::Scale && own != LoadAxis::Scale {
            return Err(Error::flag(
                flag,
                format!("{origin} is a {}, not an open loop: a scale multiplies an open-loop rate", own.as_str()),
            ));
        }
        if axis != own {
            let kind = match own {
                LoadAxis::Concurrency => "closed-loop",
                LoadAxis::Burst => "burst",
                LoadAxis::Rate | LoadAxis::Scale => "open-loop",
            };
            eprintln!(
                "note: {origin}: its {kind} arrivals are replaced by the {} asked for; its request classes and run length are kept",
                axis.as_str()
            );
        }
        Ok(())
    }
}

impl WorkloadArgs {
    /// The flags that shape requests and arrivals, which a workload file or a trace gives instead.
    fn shape_flags(&self) -> Vec<&'static str> {
        [
            ("--input-len", self.input_len.is_some()),
            ("--output-len", self.output_len.is_some()),
            ("--think-time", self.think_time.is_some()),
            ("--think-exponential", self.think_exponential),
            ("--process", self.process.is_some()),
            ("--burstiness", self.burstiness.is_some()),
            ("--turns", self.turns.is_some()),
            ("--turn-think-time", self.turn_think_time.is_some()),
            ("--system-prompt-tokens", self.system_prompt_tokens.is_some()),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// The workload: from a file, a trace or the flags, with the overrides the flags give.
    pub fn source(&self) -> Result<WorkloadSource> {
        if self.workload.is_some() && self.trace.is_some() {
            return Err(Error::flag("--trace", "give a workload file or a trace, not both"));
        }
        if self.trace.is_none() {
            for (flag, given) in [
                ("--trace-rate-scale", self.trace_rate_scale.is_some()),
                ("--trace-window", self.trace_window.is_some()),
            ] {
                if given {
                    return Err(Error::flag(flag, "applies to a trace: give --trace FILE"));
                }
            }
        }
        if let Some(d) = self.duration {
            if !(d.is_finite() && d > 0.0) {
                return Err(Error::flag(
                    "--duration",
                    format!("must be a positive number of seconds, got {}", capsim::error::fmt_num(d)),
                ));
            }
        }
        let (w, origin) = if let Some(path) = &self.workload {
            (read_workload_file(path)?, format!("workload file {}", path.display()))
        } else if let Some(path) = &self.trace {
            for (flag, given) in [("--requests", self.requests.is_some()), ("--duration", self.duration.is_some())] {
                if given {
                    return Err(Error::flag(
                        flag,
                        "a trace sends its own requests; choose a span with --trace-window START:END",
                    ));
                }
            }
            let w = trace_workload(
                path,
                self.warmup_requests.unwrap_or(0),
                self.cooldown_requests.unwrap_or(0),
                self.trace_rate_scale.unwrap_or(1.0),
                self.trace_window.as_deref(),
            )?;
            (w, format!("trace {}", path.display()))
        } else {
            return Ok(WorkloadSource {
                template: self.template()?,
                own_load: None,
                file_workload: None,
                origin: None,
            });
        };
        if let Some(flag) = self.shape_flags().first() {
            return Err(Error::flag(
                flag,
                format!("{origin} gives the requests' lengths and arrivals; drop {flag} or edit the file"),
            ));
        }
        // Run-length and measurement overrides apply to the file's own workload too.
        let mut spec = w.spec.clone();
        let overridden = self.requests.is_some()
            || self.duration.is_some()
            || self.warmup_requests.is_some()
            || self.cooldown_requests.is_some();
        if let Some(n) = self.requests {
            spec.requests = Some(n);
        }
        if let Some(d) = self.duration {
            spec.duration_s = Some(d);
        }
        spec.warmup_requests = self.warmup_requests.unwrap_or(spec.warmup_requests);
        spec.cooldown_requests = self.cooldown_requests.unwrap_or(spec.cooldown_requests);
        let w = if overridden { spec.validate()? } else { w };
        let (template, axis, load) = LoadTemplate::of_workload(&w);
        Ok(WorkloadSource { template, own_load: Some((axis, load)), file_workload: Some(w), origin: Some(origin) })
    }

    /// The template the flags describe (no file).
    pub fn template(&self) -> Result<LoadTemplate> {
        let mut t = LoadTemplate::fixed(1, 1);
        t.classes = vec![RequestClass {
            weight: 1.0,
            name: String::new(),
            input: parse_length("--input-len", self.input_len.as_deref().unwrap_or("1024"))?,
            output: parse_length("--output-len", self.output_len.as_deref().unwrap_or("256"))?,
            system_prompt_tokens: 0,
        }];
        t.requests = self.requests;
        t.duration_s = self.duration;
        let think = self.think_time.unwrap_or(0.0);
        if !(think.is_finite() && think >= 0.0) {
            return Err(Error::flag("--think-time", format!("must be >= 0, got {}", capsim::error::fmt_num(think))));
        }
        t.think_time_s = think;
        t.think_exponential = self.think_exponential;
        let process = self.process.unwrap_or(ProcessArg::Poisson);
        t.process = match process {
            ProcessArg::Poisson => Process::Poisson,
            ProcessArg::Gamma => Process::Gamma,
            ProcessArg::Constant => Process::Constant,
        };
        if let Some(b) = self.burstiness {
            if !(b.is_finite() && b > 0.0) {
                return Err(Error::flag(
                    "--burstiness",
                    format!("must be a positive number, got {}", capsim::error::fmt_num(b)),
                ));
            }
            t.burstiness = b;
            if b != 1.0 && matches!(process, ProcessArg::Poisson) {
                t.process = Process::Gamma;
            }
        }
        t.warmup_requests = self.warmup_requests.unwrap_or(0);
        t.cooldown_requests = self.cooldown_requests.unwrap_or(0);
        if let Some(n) = self.system_prompt_tokens {
            if n > capsim::workload::MAX_REQUEST_TOKENS {
                return Err(Error::flag(
                    "--system-prompt-tokens",
                    format!("must be at most {}", capsim::workload::MAX_REQUEST_TOKENS),
                ));
            }
            t.classes[0].system_prompt_tokens = n;
        }
        let think = self.turn_think_time.unwrap_or(0.0);
        if !(think.is_finite() && (0.0..=capsim::workload::MAX_TIME_S).contains(&think)) {
            return Err(Error::flag(
                "--turn-think-time",
                format!("must be in 0..=1e9 s, got {}", capsim::error::fmt_num(think)),
            ));
        }
        match &self.turns {
            Some(turns) => {
                t.conversation = Some(capsim::workload::Conversation {
                    turns: parse_length("--turns", turns)?,
                    think_time_s: think,
                    think_exponential: self.think_exponential,
                })
            }
            None if self.turn_think_time.is_some() => {
                return Err(Error::flag("--turn-think-time", "applies to conversations: give --turns"));
            }
            None => {}
        }
        Ok(t)
    }
}

#[derive(ValueEnum, Debug, Clone, Copy)]
pub enum ProcessArg {
    Poisson,
    Gamma,
    Constant,
}

pub fn parse_length(flag: &str, s: &str) -> Result<LengthDist> {
    let parts: Vec<&str> = s.split(':').collect();
    let num = |i: usize| -> Result<f64> {
        let t = parts.get(i).ok_or_else(|| Error::flag(flag, format!("`{s}`: missing parameter {i}")))?;
        let v: f64 = t.parse().map_err(|_| Error::flag(flag, format!("`{t}` is not a number")))?;
        if !v.is_finite() || v < 0.0 {
            return Err(Error::flag(flag, format!("`{t}` must be a finite non-negative number")));
        }
        Ok(v)
    };
    let d = match parts[0] {
        "uniform" => LengthDist::Uniform { min: num(1)? as u32, max: num(2)? as u32 },
        "normal" => LengthDist::Normal { mean: num(1)?, sd: num(2)? },
        "lognormal" => LengthDist::Lognormal { mean: num(1)?, sd: num(2)? },
        _ if parts.len() == 1 => {
            let t = parts[0].trim();
            if t.starts_with('-') {
                return Err(Error::flag(flag, format!("token count must not be negative, got `{t}`")));
            }
            let v: u32 =
                t.parse().map_err(|_| Error::flag(flag, format!("`{t}` is not a token count or a distribution")))?;
            if v == 0 {
                return Err(Error::flag(flag, "token count must be at least 1"));
            }
            LengthDist::Fixed { value: v }
        }
        other => return Err(Error::flag(flag, format!("unknown distribution `{other}` (uniform, normal, lognormal)"))),
    };
    d.validate(flag).map_err(|e| match e {
        Error::Input { msg, .. } => Error::flag(flag, msg),
        other => other,
    })?;
    Ok(d)
}

/// Read a workload TOML file (`--workload`).
pub fn read_workload_file(path: &std::path::Path) -> Result<Workload> {
    let text = capsim::error::read_file(path)?;
    let src = path.display().to_string();
    let spec: WorkloadSpec = toml::from_str(&text).map_err(|e| capsim::error::toml_error(&src, &text, e))?;
    spec.validate().map_err(|e| match e {
        Error::Input { at, msg } => Error::Input { at: capsim::error::Location { source: src.clone(), ..at }, msg },
        other => other,
    })
}

/// A trace file as a workload.
pub fn trace_workload(
    path: &std::path::Path,
    warmup: u64,
    cooldown: u64,
    rate_scale: f64,
    window: Option<&str>,
) -> Result<Workload> {
    if !(rate_scale.is_finite() && (1e-3..=1e3).contains(&rate_scale)) {
        return Err(Error::flag(
            "--trace-rate-scale",
            format!("must be in 0.001..=1000, got {}", capsim::error::fmt_num(rate_scale)),
        ));
    }
    let mut t = read_trace(path)?;
    if let Some(w) = window {
        let bad =
            || Error::flag("--trace-window", format!("expected START:END in seconds with START < END, got `{w}`"));
        let (a, b) = w.split_once(':').ok_or_else(bad)?;
        let (a, b): (f64, f64) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
        if !(a.is_finite() && b.is_finite() && 0.0 <= a && a < b) {
            return Err(bad());
        }
        t.records.retain(|r| r.arrival_s >= a && r.arrival_s < b);
        if t.records.is_empty() {
            return Err(Error::flag("--trace-window", format!("no request of {} is sent in {w}", path.display())));
        }
        let t0 = t.records[0].arrival_s;
        t.records.iter_mut().for_each(|r| r.arrival_s -= t0);
    }
    // Faster replay: every gap divided by the scale (the request mix and its order unchanged).
    t.records.iter_mut().for_each(|r| r.arrival_s /= rate_scale);
    let span_s = t.records.iter().map(|r| r.arrival_s).fold(0.0, f64::max);
    if span_s > capsim::workload::MAX_TIME_S {
        return Err(Error::input(
            path.display().to_string(),
            None,
            None,
            format!(
                "the trace sends requests over {} s{}, past the {:e} s (31 years) a run may last: are its times in seconds?",
                capsim::error::fmt_num(span_s),
                if rate_scale != 1.0 { " after --trace-rate-scale" } else { "" },
                capsim::workload::MAX_TIME_S
            ),
        ));
    }
    eprintln!("note: {}: {} trace, {} requests over {span_s:.1} s", path.display(), t.format, t.records.len(),);
    if t.skipped_failures > 0 {
        // Nothing dropped without a word: BurstGPT marks failed requests with 0 response tokens.
        eprintln!(
            "note: {}: {} of {} rows skipped for 0 input or output tokens (failed requests cannot be replayed)",
            path.display(),
            t.skipped_failures,
            t.records.len() + t.skipped_failures
        );
    }
    Workload::trace(t.records, warmup, cooldown)
}

/// `--slo` items such as ttft_mean_s=3.0 as per-request goodput limits where they are per-request.
pub fn goodput_slo(ttft_s: Option<f64>, itl_ms: Option<f64>, e2e_s: Option<f64>) -> Result<RequestSlo> {
    for (flag, v) in [("--goodput-ttft-s", ttft_s), ("--goodput-itl-ms", itl_ms), ("--goodput-e2e-s", e2e_s)] {
        if let Some(v) = v {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::flag(flag, format!("must be a positive number, got {}", capsim::error::fmt_num(v))));
            }
        }
    }
    Ok(RequestSlo { ttft_s_max: ttft_s, itl_ms_max: itl_ms, e2e_s_max: e2e_s })
}

/// An output file can be written: its folder exists and the path is not a folder. Checked before any
/// computation so that a typo fails at once.
pub fn check_output_file(flag: &str, path: &std::path::Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::flag(flag, format!("{} is a folder, not a file", path.display())));
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    if !parent.is_dir() {
        return Err(Error::flag(
            flag,
            format!("cannot write {}: folder {} does not exist", path.display(), parent.display()),
        ));
    }
    Ok(())
}

/// An output folder exists or can be created (its parent exists), and is not a file.
pub fn check_output_dir(flag: &str, path: &std::path::Path) -> Result<()> {
    if path.exists() && !path.is_dir() {
        return Err(Error::flag(flag, format!("{} exists and is not a folder", path.display())));
    }
    if !path.exists() {
        check_output_file(flag, path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every flag of every command says what it does, and the long help of simulate groups its flags
    /// under headings (deployment, engine, workload, output) so that it scans.
    #[test]
    fn every_flag_has_help_and_a_heading() {
        let cmd = Cli::command();
        let mut missing = Vec::new();
        for sub in cmd.get_subcommands() {
            for a in sub.get_arguments() {
                if a.get_id() == "help" || a.get_id() == "version" {
                    continue;
                }
                if a.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                    missing.push(format!("{} --{}", sub.get_name(), a.get_id()));
                }
            }
        }
        assert!(missing.is_empty(), "flags without help: {missing:?}");
        let sim = cmd.find_subcommand("simulate").unwrap();
        let headings: std::collections::BTreeSet<String> =
            sim.get_arguments().filter_map(|a| a.get_help_heading().map(str::to_string)).collect();
        for h in ["Deployment", "Engine", "Workload", "Load", "Output"] {
            assert!(headings.contains(h), "simulate has no {h} heading: {headings:?}");
        }
    }
}
