//! Scale-out on existing batch schedulers: `--shard I/N` runs a deterministic slice of a command's
//! points, `--jsonl` writes one result per line, and `capsim merge` joins the slices into the bytes
//! the unsharded run prints. No cluster code: a Slurm job array or a Kubernetes Indexed Job runs the
//! slices (examples/).
//!
//! Point k of a command belongs to shard I of N when k mod N = I: interleaved, so each slice holds
//! light and heavy points alike. A point's result depends only on its index (its seed is derived from
//! it), never on the slice that ran it, so the merged lines equal the unsharded run's line for line.

use capsim::error::{Error, Location, Result};
use clap::Args;
use serde_json::{Map, Value};
use std::path::PathBuf;

#[derive(Args, Debug, Clone, Default)]
pub struct ScaleOutArgs {
    /// Run only slice I of N (I from 0 to N-1): point k runs when k mod N = I. Needs --jsonl; `capsim
    /// merge` joins the slices' files into what the unsharded run prints.
    #[arg(long, value_name = "I/N", help_heading = "Scale-out")]
    pub shard: Option<String>,
    /// One JSON result per line, each with its point's "index" and the number of points "of": the
    /// format `capsim merge` joins.
    #[arg(long, help_heading = "Scale-out")]
    pub jsonl: bool,
}

/// Slice `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: u64,
    pub count: u64,
}

impl Shard {
    pub const ALL: Shard = Shard { index: 0, count: 1 };
    pub fn parse(s: &str) -> Result<Shard> {
        let bad = |m: String| Error::flag("--shard", m);
        let (i, n) = s.split_once('/').ok_or_else(|| bad(format!("expected I/N such as 0/4, got `{s}`")))?;
        let i: u64 = i.trim().parse().map_err(|_| bad(format!("`{i}` is not a slice number (0 to N-1)")))?;
        let n: u64 = n.trim().parse().map_err(|_| bad(format!("`{n}` is not a slice count")))?;
        if n == 0 || n > 1_000_000 {
            return Err(bad(format!("the slice count must be in 1..=1000000, got {n}")));
        }
        if i >= n {
            return Err(bad(format!("slice {i} of {n} does not exist: slices are numbered 0 to {}", n - 1)));
        }
        Ok(Shard { index: i, count: n })
    }
    /// Whether point `k` is this slice's.
    pub fn owns(&self, k: usize) -> bool {
        k as u64 % self.count == self.index
    }
    /// The indices of `n` points this slice runs. A slice past the last point (a job array with more
    /// tasks than points) runs none and writes an empty file, which `capsim merge` accepts; it says so.
    pub fn indices(&self, n: usize) -> Vec<usize> {
        let mine: Vec<usize> = (0..n).filter(|&k| self.owns(k)).collect();
        if mine.is_empty() && *self != Shard::ALL {
            eprintln!(
                "note: slice {} of {} holds none of the {n} points: its output is empty, and `capsim merge` takes it as it is",
                self.index, self.count
            );
        }
        mine
    }
}

impl ScaleOutArgs {
    /// The slice to run; a slice needs --jsonl (a table of part of the points cannot be merged).
    pub fn shard(&self) -> Result<Shard> {
        match &self.shard {
            None => Ok(Shard::ALL),
            Some(s) => {
                let sh = Shard::parse(s)?;
                if !self.jsonl {
                    return Err(Error::flag("--shard", "a slice writes JSON lines for `capsim merge`: add --jsonl"));
                }
                Ok(sh)
            }
        }
    }
}

/// One result line: `index` and `of` first, then the result's own fields.
pub fn line(index: usize, of: usize, result: Value) -> String {
    let mut m = Map::new();
    m.insert("index".into(), Value::from(index));
    m.insert("of".into(), Value::from(of));
    match result {
        Value::Object(o) => m.extend(o),
        other => {
            m.insert("result".into(), other);
        }
    }
    serde_json::to_string(&Value::Object(m)).expect("json")
}

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// JSON-lines files written by --shard I/N --jsonl (sweep, capacity --gpus, validate, batch).
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Write the merged lines to this file instead of standard output.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Join slices: every index from 0 to of-1 exactly once, in index order, each line as written.
pub fn merge(a: MergeArgs) -> Result<()> {
    if let Some(p) = &a.out {
        super::check_output_file("--out", p)?;
    }
    let mut lines: Vec<(u64, String, String)> = Vec::new(); // (index, text, where)
    let mut of: Option<(u64, String)> = None;
    // The keys of a line (but an optional label): lines of one command share them.
    let mut keys: Option<(Vec<String>, String)> = None;
    for path in &a.files {
        let text = capsim::error::read_file(path)?;
        let file = path.display().to_string();
        if text.trim().is_empty() {
            // A slice that held no point (more slices than points): nothing to add. A slice that
            // should have held points and wrote none shows as missing points below.
            continue;
        }
        let raw: Vec<&str> = text.lines().collect();
        // The project's JSON Lines reader; each line is written back as it was read.
        for (line_no, v) in capsim::measured::json::parse_documents(&file, &text)? {
            let l = raw.get(line_no - 1).copied().unwrap_or_default();
            let at = |field: &str, msg: String| Error::Input {
                at: Location { source: file.clone(), line: Some(line_no), field: Some(field.to_string()) },
                msg,
            };
            // One result a line: a document over several lines (--json output, pretty-printed) is not
            // a slice, and its first line alone is not a result to write back.
            if serde_json::from_str::<Value>(l).is_err() {
                return Err(at(
                    "line",
                    "a JSON document over several lines: --jsonl writes one result per line (is this --json output?)"
                        .into(),
                ));
            }
            let get = |k: &str| {
                v.get(k)
                    .and_then(Value::as_u64)
                    .ok_or_else(|| at(k, format!("missing `{k}` (a whole number): not a line of --jsonl output")))
            };
            let (i, o) = (get("index")?, get("of")?);
            match &of {
                None => of = Some((o, format!("{file}:{line_no}"))),
                Some((prev, where_)) if *prev != o => {
                    return Err(at(
                        "of",
                        format!("this line belongs to a run of {o} points, {where_} to one of {prev}: slices of different runs"),
                    ));
                }
                _ => {}
            }
            let mine: Vec<String> =
                v.as_object().map_or(vec![], |m| m.keys().filter(|k| *k != "label").cloned().collect());
            match &keys {
                None => keys = Some((mine, format!("{file}:{line_no}"))),
                Some((first, where_)) if *first != mine => {
                    return Err(at(
                        "line",
                        format!(
                            "this line has the fields {}, {where_} has {}: outputs of different commands",
                            mine.join(", "),
                            first.join(", ")
                        ),
                    ));
                }
                _ => {}
            }
            if i >= o {
                return Err(at("index", format!("index {i} is past the run's {o} points")));
            }
            lines.push((i, l.to_string(), format!("{file}:{line_no}")));
        }
    }
    let Some((of, _)) = of else {
        return Err(Error::Input {
            at: Location { source: a.files[0].display().to_string(), line: None, field: None },
            msg: "no result lines in the files given".into(),
        });
    };
    lines.sort_by_key(|(i, _, _)| *i);
    for w in lines.windows(2) {
        if w[0].0 == w[1].0 {
            return Err(Error::flag(
                "FILE",
                format!("point {} appears twice, at {} and {}: a slice was given twice", w[0].0, w[0].2, w[1].2),
            ));
        }
    }
    if lines.len() as u64 != of {
        let have: std::collections::HashSet<u64> = lines.iter().map(|l| l.0).collect();
        let missing: Vec<String> = (0..of).filter(|i| !have.contains(i)).take(10).map(|i| i.to_string()).collect();
        return Err(Error::flag(
            "FILE",
            format!(
                "{} of {of} points are missing (first: {}): a slice is missing or did not finish",
                of - lines.len() as u64,
                missing.join(", ")
            ),
        ));
    }
    let mut out = String::new();
    for (_, l, _) in &lines {
        out.push_str(l);
        out.push('\n');
    }
    match &a.out {
        Some(p) => std::fs::write(p, out).map_err(|err| Error::Io { path: p.display().to_string(), err }),
        None => {
            out!("{out}")?;
            Ok(())
        }
    }
}
