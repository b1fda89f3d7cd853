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
mod deploy;
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
mod validate_runs;
mod validate_runs_pd;
mod workload_args;

pub use deploy::*;
pub use workload_args::*;

use capsim::error::{Error, Result};
use capsim::metrics::RequestSlo;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

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
