//! The workload flag group shared by simulate, sweep and capacity ([`WorkloadArgs`]: request
//! lengths and run length as flags, a workload TOML file, or a trace) and its resolution into a
//! [`Workload`]; errors name the flag.

use capsim::error::{Error, Result};
use capsim::workload::trace::read_trace;
use capsim::workload::{LengthDist, LoadAxis, LoadTemplate, Process, RequestClass, Workload, WorkloadSpec};
use clap::{Args, ValueEnum};
use std::path::PathBuf;
/// The workload, shared by simulate, sweep and capacity: request lengths and run length as flags, a
/// workload TOML file, or a trace. The load level (clients, rate, burst size, scale) is each
/// command's own.
#[derive(Args, Debug, Clone, Default)]
pub struct WorkloadArgs {
    /// Input tokens: N, or uniform:MIN:MAX, normal:MEAN:SD, lognormal:MEAN:SD [default: 1024]
    #[arg(long, allow_hyphen_values = true, help_heading = "Workload")]
    pub input_len: Option<String>,
    /// Output tokens, same forms as --input-len [default: 256]. A closed loop (--concurrency) draws a fixed N from [floor(0.98 N), N]: a real server's timing noise keeps its clients from running in lockstep; uniform:N:N for exactly N
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
        // The run-length flags checked now, so that their errors name them in every command (a
        // command that sets its own request count later is probed with one that passes).
        let mut probe = t.clone();
        if probe.requests.is_none() && probe.duration_s.is_none() {
            let measured = probe.warmup_requests.saturating_add(probe.cooldown_requests).saturating_add(1);
            probe.requests = Some(measured.min(capsim::workload::MAX_REQUESTS));
        }
        probe.at(LoadAxis::Concurrency, 1.0).map_err(|e| flag_error(e, "--concurrency"))?;
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
    // --turns counts a conversation's turns; the other length flags count tokens.
    let unit = if flag == "--turns" { "turn count" } else { "token count" };
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
                return Err(Error::flag(flag, format!("{unit} must not be negative, got `{t}`")));
            }
            let v: u32 =
                t.parse().map_err(|_| Error::flag(flag, format!("`{t}` is not a {unit} or a distribution")))?;
            if v == 0 {
                return Err(Error::flag(flag, format!("{unit} must be at least 1")));
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

/// An error of a workload the flags built (source `workload`), named by the flag that set the field:
/// `requests` is --requests, `rate` the load's flag (`load_flag`), and so on. Other errors, and
/// fields no flag sets, are returned as they are.
pub fn flag_error(e: Error, load_flag: &str) -> Error {
    match e {
        Error::Input { at, msg } if at.source == "workload" => {
            let flag = match at.field.as_deref() {
                Some("requests") => "--requests",
                Some("duration_s") => "--duration",
                Some("warmup_requests") => "--warmup-requests",
                Some("cooldown_requests") => "--cooldown-requests",
                Some("burstiness") => "--burstiness",
                Some("think_time_s") => "--think-time",
                Some("rate" | "clients" | "burst") => load_flag,
                _ => return Error::Input { at, msg },
            };
            Error::flag(flag, msg)
        }
        other => other,
    }
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
