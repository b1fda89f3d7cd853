//! `capsim batch SCENARIOS.jsonl`: one scenario per line, run in parallel, one JSON result per line
//! in input order. The interface for notebooks, pipelines and cluster shards.
//!
//! A scenario's keys are the flags of the command it runs (`command`: simulate, the default, sweep or
//! capacity), spelled with `_` or `-`, so everything the command line can say a scenario can say, and
//! is checked by the same parser: `{"model": "Llama-3.1-8B-Instruct", "gpu": "H100 SXM",
//! "concurrency": 32, "input_len": 2048}`. Booleans are switches (`"expert_parallel": true`), lists
//! are comma-separated values or repeated flags as the flag takes them. `label` (anything) is echoed.
//! Output flags (--json, --csv, --svg, files) are refused: the result is the command's `--json`.
//!
//! Every scenario is checked (parsed, deployment and workload resolved) before any runs: a bad line
//! stops the batch at once with its file, line and key, not hours later.

use super::shard::{line, Shard};
use super::{capacity, disagg, simulate, sweep, Cli, Cmd};
use capsim::error::{Error, Location, Result};
use clap::{Args, CommandFactory, FromArgMatches};
use rayon::prelude::*;
use serde_json::{json, Map, Value};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct BatchArgs {
    /// Scenarios, one JSON object per line: "command" (simulate, sweep or capacity; default simulate),
    /// "label" (echoed), and that command's flags as keys (input_len or input-len).
    #[arg(value_name = "SCENARIOS.jsonl")]
    pub scenarios: PathBuf,
    /// Run only slice I of N of the scenarios (I from 0 to N-1: line k when k mod N = I); `capsim
    /// merge` joins the slices' outputs.
    #[arg(long, value_name = "I/N", help_heading = "Scale-out")]
    pub shard: Option<String>,
    /// Check every scenario (flags, deployment, workload) and exit without running any: a job
    /// array's input checked before it is submitted.
    #[arg(long)]
    pub check: bool,
}

/// Flags whose job is an output format or a file: a batch result is always the command's JSON.
const OUTPUT_KEYS: &[&str] = &["json", "csv", "jsonl", "shard", "svg", "per-request", "save-vllm-result"];
const COMMANDS: &[&str] = &["simulate", "sweep", "capacity"];

enum Prepared {
    Simulate(simulate::Prepared),
    Sweep(sweep::Prepared),
    Capacity(capacity::Prepared),
    /// `capacity` with `"disaggregated": true`: the P:D split search.
    Disaggregated(Box<disagg::PdPrepared>),
}

struct Scenario {
    line: usize,
    command: String,
    object: Map<String, Value>,
    prepared: Prepared,
}

/// The argument list of one scenario, built from its keys with the command's own flag definitions.
fn argv(command: &str, obj: &Map<String, Value>, at: &dyn Fn(&str, String) -> Error) -> Result<Vec<String>> {
    let cmd = Cli::command();
    let sub = cmd.find_subcommand(command).expect("a known command");
    let refused = "chooses an output; batch writes each result as one JSON line";
    super::embed::argv_for(sub, obj, &["command", "label"], (OUTPUT_KEYS, refused), at)
}

fn parse(path: &std::path::Path) -> Result<Vec<Scenario>> {
    let text = capsim::error::read_file(path)?;
    let file = path.display().to_string();
    let mut out = Vec::new();
    // The project's JSON Lines reader: line numbers, and the error of the reading that got further.
    for (line_no, v) in capsim::measured::json::parse_documents(&file, &text)? {
        let at = |field: &str, msg: String| Error::Input {
            at: Location { source: file.clone(), line: Some(line_no), field: Some(field.to_string()) },
            msg,
        };
        let Value::Object(obj) = v else {
            return Err(at("line", "a scenario is a JSON object of flags, e.g. {\"concurrency\": 32}".into()));
        };
        let command = match obj.get("command") {
            None => "simulate".to_string(),
            Some(Value::String(c)) if COMMANDS.contains(&c.as_str()) => c.clone(),
            Some(other) => {
                return Err(at("command", format!("must be one of {}, got {other}", COMMANDS.join(", "))));
            }
        };
        let args = argv(&command, &obj, &at)?;
        let matches = Cli::command()
            .mut_subcommands(|c| c.allow_negative_numbers(true))
            .try_get_matches_from(&args)
            .map_err(|e| at("flags", first_line(&e.to_string())))?;
        let cli = Cli::from_arg_matches(&matches).map_err(|e| at("flags", first_line(&e.to_string())))?;
        // The command's own checks, with the line named.
        let locate = |e: Error| match e {
            Error::Input { at: inner, msg } => at(
                inner.field.as_deref().unwrap_or("flags"),
                if inner.source == "command line" { msg } else { format!("{inner}: {msg}") },
            ),
            other => at("scenario", other.to_string()),
        };
        let prepared = match cli.cmd {
            Cmd::Simulate(a) => Prepared::Simulate(simulate::prepare(&a).map_err(locate)?),
            Cmd::Sweep(a) => Prepared::Sweep(sweep::prepare(&a).map_err(locate)?),
            Cmd::Capacity(a) if a.disaggregated => {
                Prepared::Disaggregated(Box::new(disagg::prepare_capacity(&a).map_err(locate)?))
            }
            Cmd::Capacity(a) => Prepared::Capacity(capacity::prepare(&a).map_err(locate)?),
            _ => unreachable!("only the listed commands are parsed"),
        };
        out.push(Scenario { line: line_no, command, object: obj, prepared });
    }
    if out.is_empty() {
        return Err(Error::input(&file, None, None, "no scenarios: one JSON object per line"));
    }
    Ok(out)
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim_start_matches("error: ").to_string()
}

/// One scenario's result: the command's `--json`, and whether a capacity question was answered.
fn run_one(s: &Scenario) -> Result<(Value, bool)> {
    Ok(match &s.prepared {
        Prepared::Simulate(p) => {
            let (out, sum) = p.run();
            (p.json(&out, &sum), true)
        }
        Prepared::Sweep(p) => {
            let all: Vec<usize> = (0..p.loads.len()).collect();
            (p.json(&p.points(&all)?), true)
        }
        Prepared::Capacity(p) => {
            let outcomes =
                (0..p.profiles.len()).map(|i| p.run_one(i, &|| {})).collect::<Result<Vec<capacity::Outcome>>>()?;
            let answered = if p.fleet.is_some() {
                outcomes.iter().all(capacity::Prepared::answered)
            } else {
                outcomes.iter().any(capacity::Prepared::answered)
            };
            (p.json(&outcomes), answered)
        }
        Prepared::Disaggregated(p) => {
            let ans = p.run(&|| {})?;
            let answered = ans.best.is_some();
            (p.json(&ans), answered)
        }
    })
}

pub fn run(a: BatchArgs) -> Result<()> {
    let shard = match &a.shard {
        Some(s) => Shard::parse(s)?,
        None => Shard::ALL,
    };
    let scenarios = parse(&a.scenarios)?;
    let n = scenarios.len();
    if a.check {
        return outln!("{}: {n} scenario(s), each valid", a.scenarios.display());
    }
    let mine = shard.indices(n);
    let pb = super::progress_bar(mine.len() as u64, "scenarios");
    let results: Vec<Result<(Value, bool)>> = mine
        .par_iter()
        .map(|&i| {
            let r = run_one(&scenarios[i]);
            pb.inc(1);
            r
        })
        .collect();
    pb.finish_and_clear();
    let mut unanswered = Vec::new();
    for (&i, r) in mine.iter().zip(results) {
        let s = &scenarios[i];
        let (result, answered) = r.map_err(|e| {
            Error::input(a.scenarios.display().to_string(), Some(s.line), Some("scenario"), e.to_string())
        })?;
        if !answered {
            unanswered.push(s.line.to_string());
        }
        let mut v = json!({"line": s.line, "command": s.command, "scenario": s.object, "result": result});
        if let Some(label) = s.object.get("label") {
            v["label"] = label.clone();
        }
        outln!("{}", line(i, n, v))?;
    }
    if !unanswered.is_empty() {
        return Err(Error::NoAnswer(format!(
            "no load meets the SLO (or no fleet up to --max-replicas does) in the capacity scenarios of line {}",
            unanswered.join(", ")
        )));
    }
    Ok(())
}
