//! The command line as a library call, for front ends other than the `capsim` binary (the Python
//! package in python/). A command's flags, given as the keys of a JSON object, become its argument
//! list through the command's own clap definitions (the names, defaults and checks are the CLI's,
//! defined once); the command runs on the same code path as on the command line, and what it would
//! print is returned instead of printed, so a caller's `--json` is the CLI's byte for byte. Progress
//! bars are hidden and their position handed to the caller, which draws its own.

use super::{dispatch, parse, Cli, ProfileArgs, WorkloadArgs};
use capsim::error::{Error, Result};
use clap::{ArgAction, Args, Command, CommandFactory, FromArgMatches};
use serde_json::{json, Map, Value};
use std::cell::RefCell;
use std::sync::{Arc, Mutex};

thread_local! {
    /// The output of the captured run on this thread, if one is running.
    static CAPTURE: RefCell<Option<Capture>> = const { RefCell::new(None) };
}

struct Capture {
    stdout: String,
    progress: Progress,
}

/// Where a captured run's progress stands: the last progress bar it opened, shared with the caller
/// (which reads it from another thread while the run goes on).
#[derive(Clone, Default, Debug)]
pub struct Progress(Arc<Mutex<Option<indicatif::ProgressBar>>>);

impl Progress {
    /// The position and length of the bar the run opened last (length `None` for a count with no
    /// known total); `None` before the run opens one.
    pub fn get(&self) -> Option<(u64, Option<u64>)> {
        let bar = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        bar.as_ref().map(|b| (b.position(), b.length()))
    }
}

/// Append to this thread's captured output, if a captured run is going on (`None` otherwise).
pub(super) fn write_captured(args: std::fmt::Arguments) -> Option<Result<()>> {
    CAPTURE.with(|c| {
        c.borrow_mut().as_mut().map(|cap| {
            std::fmt::Write::write_fmt(&mut cap.stdout, args).map_err(|_| Error::Io {
                path: "captured output".into(),
                err: std::io::Error::other("a value failed to format"),
            })
        })
    })
}

/// Hand a new progress bar to this thread's captured run, if one is going on; true if it was.
pub(super) fn report_progress(pb: &indicatif::ProgressBar) -> bool {
    CAPTURE.with(|c| match c.borrow().as_ref() {
        Some(cap) => {
            *cap.progress.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(pb.clone());
            true
        }
        None => false,
    })
}

/// What a captured run printed, and how it ended (a warning such as [`Error::NoAnswer`] comes with
/// the output the command printed before it).
#[derive(Debug)]
pub struct Captured {
    pub stdout: String,
    pub result: Result<()>,
}

/// Run a command line as `capsim` runs it (`args[0]` is the program's name) with its standard output
/// captured: `--help` and `--version` give their text, a usage error is an [`Error::Input`] naming
/// the flag. Runs on the calling thread; standard error (notes, warnings) is left as it is.
pub fn run_captured(args: Vec<String>, progress: &Progress) -> Captured {
    let previous =
        CAPTURE.with(|c| c.borrow_mut().replace(Capture { stdout: String::new(), progress: progress.clone() }));
    let os_args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
    super::set_command_line(&os_args);
    let result = match parse(args) {
        Ok(cli) => dispatch(cli.cmd),
        Err(e) if e.use_stderr() => Err(usage_error(&e)),
        Err(e) => super::write_stdout(format_args!("{}", e.render())),
    };
    let cap = CAPTURE.with(|c| std::mem::replace(&mut *c.borrow_mut(), previous));
    Captured { stdout: cap.map(|c| c.stdout).unwrap_or_default(), result }
}

/// A clap usage error as an input error naming the flag clap names (an unknown flag, a bad value, a
/// missing required flag).
fn usage_error(e: &clap::Error) -> Error {
    use clap::error::{ContextKind, ContextValue};
    let msg = first_line(&e.to_string());
    match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => {
            let flag = arg.split([' ', '=']).next().unwrap_or(arg);
            Error::flag(flag, msg)
        }
        _ => Error::input("command line", None, None, msg),
    }
}

pub(super) fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim_start_matches("error: ").to_string()
}

/// The subcommand `capsim COMMAND`, as the command line defines it.
fn subcommand(command: &str) -> Result<Command> {
    let cli = Cli::command();
    cli.find_subcommand(command).cloned().ok_or_else(|| Error::Unknown {
        kind: "command",
        name: command.to_string(),
        known: cli.get_subcommands().map(|c| c.get_name().to_string()).collect(),
    })
}

/// The argument list (program name first) of `command` with the flags the keys of `obj` name
/// (`input_len` or `input-len`), built with the command's own definitions: a boolean is a switch, a
/// list a repeated or comma-separated flag as the flag takes it, a positional argument its value
/// (keyed by its name). Keys in `skip` are left out; keys in `refuse` are refused with `why`. Errors
/// name the key through `at`.
pub fn argv_for(
    cmd: &Command,
    obj: &Map<String, Value>,
    skip: &[&str],
    refuse: (&[&str], &str),
    at: &dyn Fn(&str, String) -> Error,
) -> Result<Vec<String>> {
    let command = cmd.get_name();
    let mut args = vec!["capsim".to_string(), command.to_string()];
    let mut positionals = Vec::new();
    for (key, value) in obj {
        if skip.contains(&key.as_str()) {
            continue;
        }
        let long = key.replace('_', "-");
        if refuse.0.contains(&long.as_str()) {
            return Err(at(key, format!("`{key}` {}", refuse.1)));
        }
        let positional = cmd.get_positionals().find(|a| a.get_id().as_str().replace('_', "-") == long);
        let Some(arg) = cmd.get_arguments().find(|a| a.get_long() == Some(long.as_str())).or(positional) else {
            return Err(at(key, format!("unknown key: `capsim {command}` has no flag --{long}")));
        };
        let flag = format!("--{long}");
        let scalar = |v: &Value| -> Result<String> {
            match v {
                Value::String(s) => Ok(s.clone()),
                Value::Number(n) => Ok(n.to_string()),
                Value::Bool(b) => Ok(b.to_string()),
                _ => Err(at(key, format!("{flag} takes a string, a number or a boolean, got {v}"))),
            }
        };
        if arg.is_positional() {
            match value {
                Value::Array(items) => {
                    for v in items {
                        positionals.push(scalar(v)?);
                    }
                }
                v => positionals.push(scalar(v)?),
            }
            continue;
        }
        match arg.get_action() {
            ArgAction::SetTrue | ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong => match value {
                Value::Bool(true) => args.push(flag),
                Value::Bool(false) => {}
                _ => return Err(at(key, format!("{flag} is a switch: true or false, got {value}"))),
            },
            ArgAction::Append => match value {
                Value::Array(items) if arg.get_value_delimiter().is_some() => {
                    let parts = items.iter().map(scalar).collect::<Result<Vec<_>>>()?;
                    args.push(format!("{flag}={}", parts.join(",")));
                }
                Value::Array(items) => {
                    for v in items {
                        args.push(format!("{flag}={}", scalar(v)?));
                    }
                }
                v => args.push(format!("{flag}={}", scalar(v)?)),
            },
            _ => args.push(format!("{flag}={}", scalar(value)?)),
        }
    }
    if !positionals.is_empty() {
        args.push("--".to_string());
        args.extend(positionals);
    }
    Ok(args)
}

/// An error from a key of a front end's call: the key is the field.
fn key_error(key: &str, msg: String) -> Error {
    Error::input("arguments", None, Some(key), msg)
}

/// Run `capsim COMMAND` with the flags `obj` gives (see [`argv_for`]) and capture its output.
pub fn run_keys(command: &str, obj: &Map<String, Value>, progress: &Progress) -> Captured {
    // Built, so that its --help is an argument too (`help=True` prints the help, as the CLI does).
    let args = subcommand(command).and_then(|mut cmd| {
        cmd.build();
        argv_for(&cmd, obj, &[], (&[], ""), &key_error)
    });
    match args {
        Ok(args) => run_captured(args, progress),
        Err(e) => Captured { stdout: String::new(), result: Err(e) },
    }
}

/// The commands of the command line with their one-line descriptions.
pub fn commands() -> Value {
    Cli::command()
        .get_subcommands()
        .map(|c| json!({"name": c.get_name(), "about": c.get_about().map(|s| s.to_string())}))
        .collect()
}

/// The flags of `capsim COMMAND` as its definitions give them: for each, the key a front end
/// passes (`input_len`), the flag (`--input-len`), how it takes values (`switch`, `list`, `value`,
/// `positional`), its defaults as text, the values it allows, whether it is required, its help
/// heading and help. The Python package's stubs are generated from it.
pub fn flags(command: &str) -> Result<Value> {
    Ok(flag_table(&subcommand(command)?))
}

fn flag_table(cmd: &Command) -> Value {
    cmd.get_arguments()
        .filter(|a| !matches!(a.get_action(), ArgAction::Help | ArgAction::Version | ArgAction::HelpShort))
        .map(|a| {
            let kind = if a.is_positional() {
                "positional"
            } else {
                match a.get_action() {
                    ArgAction::SetTrue => "switch",
                    ArgAction::Append => "list",
                    _ => "value",
                }
            };
            let key = match a.get_long() {
                Some(long) => long.replace('-', "_"),
                None => a.get_id().as_str().replace('-', "_"),
            };
            let defaults: Vec<String> =
                a.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
            let values: Vec<String> = a.get_possible_values().iter().map(|v| v.get_name().to_string()).collect();
            json!({
                "key": key,
                "flag": a.get_long().map(|l| format!("--{l}")),
                "kind": kind,
                "defaults": defaults,
                "values": values,
                "required": a.is_required_set(),
                "heading": a.get_help_heading(),
                "help": a.get_help().map(|h| h.to_string()),
            })
        })
        .collect()
}

/// The keys of the deployment flags (every command's `ProfileArgs`) and of the workload flags
/// (`WorkloadArgs`: lengths, a workload file, a trace).
pub fn groups() -> Value {
    let keys = |c: Command| -> Vec<Value> {
        flag_table(&c).as_array().expect("a list").iter().map(|f| f["key"].clone()).collect()
    };
    json!({
        "deployment": keys(ProfileArgs::augment_args(Command::new("deployment"))),
        "workload": keys(WorkloadArgs::augment_args(Command::new("workload"))),
    })
}

/// Parse a flag group alone (as a command named `name` with only those flags).
fn parse_group<A: Args + FromArgMatches>(name: &'static str, obj: &Map<String, Value>) -> Result<A> {
    let cmd = A::augment_args(Command::new(name).allow_negative_numbers(true));
    let mut args = argv_for(&cmd, obj, &[], (&[], ""), &key_error)?;
    args.remove(1); // The group is the whole command: no subcommand name.
    let matches = cmd.try_get_matches_from(args).map_err(|e| usage_error(&e))?;
    A::from_arg_matches(&matches).map_err(|e| usage_error(&e))
}

/// Check a deployment's flags as every command resolves them (`ProfileArgs::resolve`: the profile,
/// the catalogs, the model and GPU moved to, the engine settings, whether it fits) and describe the
/// resolved deployment. A disaggregated deployment's pools are resolved by the command that runs
/// them, so it is only parsed here.
pub fn resolve_deployment(obj: &Map<String, Value>) -> Result<Value> {
    let a: ProfileArgs = parse_group("deployment", obj)?;
    if a.pd_flags().next().is_some() {
        return Ok(json!({"disaggregated": true}));
    }
    let catalog = a.catalog()?;
    let p = a.resolve(&catalog)?;
    Ok(json!({
        "profile": p.name(),
        "retargeted_from": p.retargeted_from,
        "retarget_method": p.retarget_method,
        "extrapolation": p.retargeted_from.is_some(),
        "caveats": p.caveats(),
        "model": p.arch.name,
        "gpu": p.gpu.name,
        "tensor_parallel": p.tensor_parallel,
        "expert_parallel": p.expert_parallel,
        "weight_dtype": p.file.model.weight_dtype,
        "kv_dtype": p.file.model.kv_dtype,
        "engine": p.engine,
    }))
}

/// Check a workload's flags as every command reads them (`WorkloadArgs::source`: the lengths, the
/// workload file or the trace, the flags that conflict with them).
pub fn check_workload(obj: &Map<String, Value>) -> Result<()> {
    let a: WorkloadArgs = parse_group("workload", obj)?;
    a.source().map(|_| ())
}
