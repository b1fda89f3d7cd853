//! Workloads: how requests arrive and how long they are (DESIGN.md section 3).
//!
//! [`WorkloadSpec`] is what the user wrote (flags or a TOML file); [`Workload`] is validated and is what
//! the simulator takes. [`Generator`] draws arrival times and lengths from RNG streams derived from the
//! run's seed, so a run is a pure function of (profile, workload, seed). Trace files are read in
//! [`trace`] (the only I/O here) and become a `Workload` like any other.

pub mod trace;

use crate::error::{Error, Result};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Exp1, Gamma, LogNormal, Normal, WeightedIndex};
use serde::{Deserialize, Serialize};

/// The pinned RNG of every random stream.
pub type SimRng = ChaCha8Rng;

/// Derive an independent stream from a seed and a stream id (SplitMix64 finalizer).
pub fn stream_rng(seed: u64, stream: u64) -> SimRng {
    let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    SimRng::seed_from_u64(z ^ (z >> 31))
}

/// A distribution of token counts. Draws are rounded and clamped to at least 1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "lowercase", deny_unknown_fields)]
pub enum LengthDist {
    Fixed {
        value: u32,
    },
    Uniform {
        min: u32,
        max: u32,
    },
    Normal {
        mean: f64,
        sd: f64,
    },
    /// Parameterized by the mean and standard deviation of the lengths themselves.
    Lognormal {
        mean: f64,
        sd: f64,
    },
    /// Draw one of `values`, with optional `weights` (uniform when absent).
    Empirical {
        values: Vec<u32>,
        #[serde(default)]
        weights: Vec<f64>,
    },
}

/// Work bounds, checked before a run starts so that a typo cannot run until killed: at most 100
/// million requests (about four minutes of simulation at the benchmark's pace), times up to 1e9 s
/// (31 years), rates up to 1e6 requests/s, burstiness down to 1e-3 (gamma inter-arrival shapes below
/// it put nearly every request at one instant). Runs beyond them are split into several.
pub const MAX_REQUESTS: u64 = 100_000_000;
pub const MAX_TIME_S: f64 = 1e9;
pub const MAX_RATE_PER_S: f64 = 1e6;
pub const MIN_BURSTINESS: f64 = 1e-3;

/// The longest prompt or output a workload may name: 2^24 tokens, above every catalog model's context
/// (Llama 4 Scout: 10M). Keeps prompt + output far inside 32 bits.
pub const MAX_REQUEST_TOKENS: u32 = 1 << 24;

/// The spread of a closed loop's output lengths that stands in for a real server's timing noise, where
/// every request would have the same output length (a fixed `--output-len`, or a benchmark file that
/// gives only its mean). With exactly equal lengths a simulated closed loop stays in lockstep: every
/// client finishes in the same step and sends again at once, so every round is a burst of prompts and
/// the mean TTFT comes out 2-3x the measured ones (the corpus's NVIDIA rows at commit 3d4c50b: +130% to
/// +210% per GPU; Llama-3.1-70B FP8 on 4 x H200 under vLLM, 64 clients of 1,024 / 1,024 tokens: 0.65 s
/// simulated in lockstep against 0.26 s measured). A real server's step times vary, its clients drift
/// apart after the first round, and the measured TTFTs match a loop that does. Closed loops draw such
/// outputs up to 2% short of the stated length ([`LengthDist::with_timing_noise`]): a length is a
/// maximum (`max_tokens`, reached with `--ignore-eos`), and a request at the model's context limit
/// stays within it.
pub const TIMING_NOISE_LENGTH_SPREAD: f64 = 0.02;

impl LengthDist {
    pub fn fixed(value: u32) -> Self {
        LengthDist::Fixed { value }
    }
    /// A closed loop's output length: a fixed L drawn from [floor(0.98 L), L] (at least one token
    /// short where L > 1; the constant says why); any other distribution as it is, so `uniform:L:L`
    /// keeps every output at exactly L.
    pub fn with_timing_noise(self) -> Self {
        match self {
            LengthDist::Fixed { value } if value > 1 => {
                // As the corpus draws its NVIDIA rows' outputs: [floor(0.98 L), L].
                let min = (((1.0 - TIMING_NOISE_LENGTH_SPREAD) * value as f64).floor() as u32).clamp(1, value - 1);
                LengthDist::Uniform { min, max: value }
            }
            other => other,
        }
    }
    /// Check the parameters; `field` names the distribution in the error.
    pub fn validate(&self, field: &str) -> Result<()> {
        let bad = |msg: String| Err(Error::input("workload", None, Some(field), msg));
        let max = MAX_REQUEST_TOKENS;
        let out = match self {
            LengthDist::Fixed { value } if *value == 0 || *value > max => {
                bad(format!("length must be in 1..={max}, got {value}"))
            }
            LengthDist::Uniform { min, max: hi } if *min == 0 || min > hi || *hi > max => {
                bad(format!("need 1 <= min <= max <= {max}, got {min}..{hi}"))
            }
            LengthDist::Normal { mean, sd } | LengthDist::Lognormal { mean, sd }
                if !(mean.is_finite()
                    && sd.is_finite()
                    && *mean > 0.0
                    && *sd >= 0.0
                    && *mean <= max as f64
                    && *sd <= max as f64) =>
            {
                bad(format!(
                    "need 0 < mean <= {max} and 0 <= sd <= {max}; got mean {}, sd {}",
                    crate::error::fmt_num(*mean),
                    crate::error::fmt_num(*sd)
                ))
            }
            LengthDist::Empirical { values, weights } => {
                if values.is_empty() || values.iter().any(|&v| v == 0 || v > max) {
                    return bad(format!("values must be non-empty and each in 1..={max}"));
                }
                let total: f64 = weights.iter().sum();
                if !weights.is_empty()
                    && (weights.len() != values.len()
                        || weights.iter().any(|w| !w.is_finite() || *w < 0.0)
                        || !(total.is_finite() && total > 0.0))
                {
                    return bad(
                        "weights must match values in number, be finite, non-negative, not all zero, with a finite sum"
                            .into(),
                    );
                }
                Ok(())
            }
            _ => Ok(()),
        };
        out?;
        // The sampler's own checks (a lognormal whose variance overflows, weights it cannot index).
        LengthSampler::new(self)
            .map(|_| ())
            .ok_or_else(|| Error::input("workload", None, Some(field), format!("{self:?} cannot be sampled")))
    }
    pub fn mean(&self) -> f64 {
        match self {
            LengthDist::Fixed { value } => *value as f64,
            LengthDist::Uniform { min, max } => (*min as f64 + *max as f64) / 2.0,
            LengthDist::Normal { mean, .. } | LengthDist::Lognormal { mean, .. } => *mean,
            LengthDist::Empirical { values, weights } => {
                if weights.is_empty() {
                    values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64
                } else {
                    let s: f64 = weights.iter().sum();
                    values.iter().zip(weights).map(|(&v, w)| v as f64 * w).sum::<f64>() / s
                }
            }
        }
    }
    /// The shortest length it can draw.
    pub fn min(&self) -> u32 {
        match self {
            LengthDist::Fixed { value } => *value,
            LengthDist::Uniform { min, .. } => *min,
            LengthDist::Normal { .. } | LengthDist::Lognormal { .. } => 1,
            LengthDist::Empirical { values, .. } => *values.iter().min().unwrap_or(&1),
        }
    }
    pub fn max(&self) -> u32 {
        match self {
            LengthDist::Fixed { value } => *value,
            LengthDist::Uniform { max, .. } => *max,
            LengthDist::Normal { mean, sd } | LengthDist::Lognormal { mean, sd } => (mean + 6.0 * sd).ceil() as u32,
            LengthDist::Empirical { values, .. } => *values.iter().max().unwrap_or(&1),
        }
    }
}

/// A validated sampler for one LengthDist.
#[derive(Debug, Clone)]
enum LengthSampler {
    Fixed(u32),
    Uniform(u32, u32),
    Normal(Normal<f64>),
    LogNormal(LogNormal<f64>),
    Empirical(Vec<u32>, Option<WeightedIndex<f64>>),
}

impl LengthSampler {
    /// None when the distribution library refuses the parameters ([`LengthDist::validate`] reports it).
    fn new(d: &LengthDist) -> Option<LengthSampler> {
        Some(match d {
            LengthDist::Fixed { value } => LengthSampler::Fixed(*value),
            LengthDist::Uniform { min, max } => LengthSampler::Uniform(*min, *max),
            LengthDist::Normal { mean, sd } => LengthSampler::Normal(Normal::new(*mean, *sd).ok()?),
            LengthDist::Lognormal { mean, sd } => {
                // Moments of the lengths -> parameters of the underlying normal.
                let s2 = (1.0 + (sd / mean).powi(2)).ln();
                LengthSampler::LogNormal(LogNormal::new(mean.ln() - s2 / 2.0, s2.sqrt()).ok()?)
            }
            LengthDist::Empirical { values, weights } => LengthSampler::Empirical(
                values.clone(),
                if weights.is_empty() { None } else { Some(WeightedIndex::new(weights).ok()?) },
            ),
        })
    }
    fn sample(&self, rng: &mut SimRng) -> u32 {
        let clamp = |x: f64| x.round().clamp(1.0, MAX_REQUEST_TOKENS as f64) as u32;
        match self {
            LengthSampler::Fixed(v) => *v,
            LengthSampler::Uniform(a, b) => rng.gen_range(*a..=*b),
            LengthSampler::Normal(n) => clamp(n.sample(rng)),
            LengthSampler::LogNormal(n) => clamp(n.sample(rng)),
            LengthSampler::Empirical(v, None) => v[rng.gen_range(0..v.len())],
            LengthSampler::Empirical(v, Some(w)) => v[w.sample(rng)],
        }
    }
}

/// One kind of request in a mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestClass {
    #[serde(default = "one")]
    pub weight: f64,
    #[serde(default)]
    pub name: String,
    pub input: LengthDist,
    pub output: LengthDist,
    /// Tokens of a system prompt every request of the class starts with (the same text for all of
    /// them, so a prefix cache holds it once); the input follows it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub system_prompt_tokens: u32,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn one() -> f64 {
    1.0
}

/// The arrival process of an open loop.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Process {
    Poisson,
    /// Gamma inter-arrival times with shape = burstiness, scale = 1/(rate x burstiness), exactly as
    /// `vllm bench serve --burstiness`; burstiness 1 is Poisson, below 1 burstier, above 1 smoother.
    Gamma,
    /// Evenly spaced arrivals.
    Constant,
}

/// A piecewise-constant rate: `[start_s, requests_per_s]` segments in increasing start order; the last
/// rate holds after its start. A file may write it as its segments or as a daily curve
/// ([`RateScheduleFile`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RateScheduleFile")]
pub struct RateSchedule {
    pub segments: Vec<(f64, f64)>,
}

/// A rate schedule as a file writes it: `segments = [[start_s, rate], ...]`, or a daily curve,
/// `peak = 40.0` and `hourly = [24 multiples of the peak]` (optionally `day_s`, the day's length in
/// simulated seconds, 86,400 by default: a shorter day compresses the curve), the shape of the
/// diurnal traffic curves serving traces show. Each form is checked here so a bad curve names its
/// key; the segments' order and bounds are checked by the workload's validation.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateScheduleFile {
    pub segments: Option<Vec<(f64, f64)>>,
    pub peak: Option<f64>,
    pub hourly: Option<Vec<f64>>,
    pub day_s: Option<f64>,
}

impl TryFrom<RateScheduleFile> for RateSchedule {
    type Error = String;
    fn try_from(f: RateScheduleFile) -> std::result::Result<Self, String> {
        match (f.segments, f.peak, f.hourly) {
            (Some(segments), None, None) if f.day_s.is_none() => Ok(RateSchedule { segments }),
            (None, Some(peak), Some(hourly)) => {
                if !(peak.is_finite() && peak > 0.0 && peak <= MAX_RATE_PER_S) {
                    return Err(format!("rate.peak must be a rate in (0, {MAX_RATE_PER_S:e}] per s, got {peak}"));
                }
                let hourly: [f64; 24] = hourly
                    .try_into()
                    .map_err(|h: Vec<f64>| format!("rate.hourly must hold 24 multiples of the peak, got {}", h.len()))?;
                if let Some((i, m)) = hourly.iter().enumerate().find(|(_, m)| !(m.is_finite() && (0.0..=1.0).contains(*m))) {
                    return Err(format!("rate.hourly[{i}] must be a multiple of the peak in [0, 1], got {m}"));
                }
                let day_s = f.day_s.unwrap_or(86_400.0);
                if !(24.0..=MAX_TIME_S).contains(&day_s) {
                    return Err(format!("rate.day_s must be a number of seconds in [24, {MAX_TIME_S:e}], got {day_s}"));
                }
                Ok(RateSchedule::daily(peak, &hourly, day_s))
            }
            _ => Err("a rate schedule is `segments = [[start_s, rate], ...]` or a daily curve, `peak` and `hourly` (24 multiples of the peak, optionally `day_s`)".into()),
        }
    }
}

impl RateSchedule {
    pub fn constant(rate: f64) -> Self {
        RateSchedule { segments: vec![(0.0, rate)] }
    }
    /// A daily curve: 24 hourly rates as multiples of `peak_rate`, compressed into `day_s` seconds.
    pub fn daily(peak_rate: f64, hourly_multipliers: &[f64; 24], day_s: f64) -> Self {
        RateSchedule {
            segments: hourly_multipliers
                .iter()
                .enumerate()
                .map(|(h, m)| (h as f64 * day_s / 24.0, peak_rate * m))
                .collect(),
        }
    }
    fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::input("workload", None, Some("rate"), msg));
        if self.segments.is_empty() || self.segments[0].0 != 0.0 {
            return bad("the rate schedule must start at time 0".into());
        }
        let mut last = -1.0;
        for &(t, r) in &self.segments {
            if !(t.is_finite() && r.is_finite()) || r < 0.0 || t <= last || t > MAX_TIME_S || r > MAX_RATE_PER_S {
                return bad(format!(
                    "segments need increasing start times in 0..={MAX_TIME_S:e} s and rates in 0..={MAX_RATE_PER_S:e} per s; got ({}, {})",
                    crate::error::fmt_num(t),
                    crate::error::fmt_num(r)
                ));
            }
            last = t;
        }
        if self.segments.last().map(|s| s.1) == Some(0.0) {
            return bad("the last segment's rate must be positive (arrivals would stop forever)".into());
        }
        Ok(())
    }
    /// The highest rate of a segment that starts before `until_s` (the end of the sending period):
    /// the peak a fixed fleet must hold (capsim plan over a curve).
    pub fn peak_rate(&self, until_s: f64) -> f64 {
        self.segments.iter().filter(|&&(t, _)| t < until_s || t == 0.0).map(|&(_, r)| r).fold(0.0, f64::max)
    }
    /// When the expected number of arrivals reaches `n` (infinite when the schedule never gets there).
    pub fn expected_time_of(&self, n: f64) -> f64 {
        self.invert(n)
    }
    pub fn mean_rate(&self, horizon_s: f64) -> f64 {
        self.cumulative(horizon_s) / horizon_s.max(1e-12)
    }
    /// Expected arrivals by time t (the integral of the rate).
    fn cumulative(&self, t: f64) -> f64 {
        let mut acc = 0.0;
        for (i, &(s, r)) in self.segments.iter().enumerate() {
            if t <= s {
                break;
            }
            let end = self.segments.get(i + 1).map_or(f64::INFINITY, |n| n.0).min(t);
            acc += r * (end - s);
        }
        acc
    }
    /// The time at which the cumulative rate reaches `tau` (inverse of `cumulative`).
    fn invert(&self, tau: f64) -> f64 {
        let mut acc = 0.0;
        for (i, &(s, r)) in self.segments.iter().enumerate() {
            let end = self.segments.get(i + 1).map_or(f64::INFINITY, |n| n.0);
            let seg = r * (end - s);
            if r > 0.0 && acc + seg >= tau {
                return s + (tau - acc) / r;
            }
            acc += seg;
        }
        f64::INFINITY
    }
}

/// One request of a replayed trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceRecord {
    pub arrival_s: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Mooncake's `hash_ids`: one id per 512-token block of the prompt (the last may be partial);
    /// equal ids are equal content, so they drive prefix-cache hits. Empty: the prompt shares nothing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hash_ids: Vec<u64>,
    /// The conversation the request belongs to: it extends the session's previous request (prompt and
    /// reply), as far as its own prompt reaches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
}

/// Tokens per Mooncake `hash_ids` block (the trace's block size, FAST'25 Mooncake paper).
pub const HASH_ID_BLOCK_TOKENS: u32 = 512;

/// Multi-turn conversations: each session's turns re-send the history (every earlier user message and
/// reply) plus a new user message of the class's input length, and get a reply of its output length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conversation {
    /// Turns per session.
    pub turns: LengthDist,
    /// Seconds the user takes between a reply and the next turn (mean when exponential).
    #[serde(default)]
    pub think_time_s: f64,
    #[serde(default)]
    pub think_exponential: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Arrivals {
    /// N clients; each sends its next request `think_time_s` (exponential with that mean when
    /// `think_exponential`) after its previous one completes. All start at t = 0 (the first round is a
    /// synchronized burst, as `vllm bench serve --max-concurrency`).
    ClosedLoop {
        clients: u32,
        #[serde(default)]
        think_time_s: f64,
        #[serde(default)]
        think_exponential: bool,
    },
    /// N requests at t = 0, each once.
    Burst {
        n: u32,
    },
    OpenLoop {
        process: Process,
        rate: RateSchedule,
        #[serde(default = "one")]
        burstiness: f64,
    },
    Trace {
        records: Vec<TraceRecord>,
    },
}

/// The workload as a user writes it in TOML (`--workload FILE.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    pub arrivals: Arrivals,
    #[serde(default)]
    pub classes: Vec<RequestClass>,
    /// Stop after this many requests have been sent (closed and open loops).
    pub requests: Option<u64>,
    /// Stop sending after this many seconds of simulated time.
    pub duration_s: Option<f64>,
    /// Leave the first N requests (by arrival) out of the metrics.
    #[serde(default)]
    pub warmup_requests: u64,
    /// Leave the last N requests (by arrival) out of the metrics.
    #[serde(default)]
    pub cooldown_requests: u64,
    /// Leave requests that arrive before this time out of the metrics.
    #[serde(default)]
    pub warmup_s: f64,
    /// Requests are turns of multi-turn conversations: a closed loop's clients and a burst's requests
    /// each run sessions, an open loop's arrivals each start one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<Conversation>,
}

/// A validated workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    pub spec: WorkloadSpec,
}

impl WorkloadSpec {
    /// A closed loop's fixed output lengths drawn up to 2% short ([`LengthDist::with_timing_noise`]:
    /// clients that all get the same length stay in lockstep); other arrivals keep their lengths. The
    /// one place every closed loop a user asks for passes: a load of a template (flags, sweeps,
    /// capacity), a workload file replayed at its own load, a benchmark run's replay.
    pub fn with_timing_noise(mut self) -> Self {
        if matches!(self.arrivals, Arrivals::ClosedLoop { .. }) {
            for c in &mut self.classes {
                c.output = c.output.clone().with_timing_noise();
            }
        }
        self
    }

    pub fn validate(mut self) -> Result<Workload> {
        // Inline trace records replay in time order, as CSV and JSONL traces do (a stable sort keeps
        // the file's order among equal times).
        if let Arrivals::Trace { records } = &mut self.arrivals {
            records.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        }
        let bad = |field: &str, msg: String| Err(Error::input("workload", None, Some(field), msg));
        let is_trace = matches!(self.arrivals, Arrivals::Trace { .. });
        if self.classes.is_empty() && !is_trace {
            return bad("classes", "at least one request class (input and output lengths) is needed".into());
        }
        for (i, c) in self.classes.iter().enumerate() {
            if !(c.weight.is_finite() && c.weight >= 0.0) {
                return bad(&format!("classes[{i}].weight"), format!("must be finite and >= 0, got {}", c.weight));
            }
            c.input.validate(&format!("classes[{i}].input"))?;
            c.output.validate(&format!("classes[{i}].output"))?;
        }
        if !self.classes.is_empty() && self.classes.iter().map(|c| c.weight).sum::<f64>() <= 0.0 {
            return bad("classes", "class weights must not all be zero".into());
        }
        if let Some(d) = self.duration_s {
            if !(d.is_finite() && d > 0.0 && d <= MAX_TIME_S) {
                return bad(
                    "duration_s",
                    format!("must be a number of seconds in (0, {MAX_TIME_S:e}], got {}", crate::error::fmt_num(d)),
                );
            }
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0 && self.warmup_s <= MAX_TIME_S) {
            return bad("warmup_s", format!("must be in 0..={MAX_TIME_S:e} s, got {}", self.warmup_s));
        }
        if let Some(n) = self.requests {
            if n == 0 {
                return bad("requests", "must be at least 1".into());
            }
            if n > MAX_REQUESTS {
                return bad(
                    "requests",
                    format!("{n} requests exceed capsim's bound of {MAX_REQUESTS} per run; split the run"),
                );
            }
        }
        match &self.arrivals {
            Arrivals::ClosedLoop { clients, think_time_s, .. } => {
                if *clients == 0 {
                    return bad("clients", "a closed loop needs at least one client".into());
                }
                if !(think_time_s.is_finite() && *think_time_s >= 0.0 && *think_time_s <= MAX_TIME_S) {
                    return bad(
                        "think_time_s",
                        format!("must be in 0..={MAX_TIME_S:e} s, got {}", crate::error::fmt_num(*think_time_s)),
                    );
                }
                if self.requests.is_none() && self.duration_s.is_none() {
                    return bad("requests", "a closed loop needs a request count or a duration".into());
                }
            }
            Arrivals::Burst { n } => {
                if *n == 0 || *n as u64 > MAX_REQUESTS {
                    return bad("burst", format!("a burst needs 1..={MAX_REQUESTS} requests, got {n}"));
                }
            }
            Arrivals::OpenLoop { rate, burstiness, .. } => {
                rate.validate()?;
                if !(burstiness.is_finite() && *burstiness >= MIN_BURSTINESS && *burstiness <= 1e6) {
                    return bad(
                        "burstiness",
                        format!("must be in {MIN_BURSTINESS}..=1e6, got {}", crate::error::fmt_num(*burstiness)),
                    );
                }
                match (self.requests, self.duration_s) {
                    (None, None) => {
                        return bad("requests", "an open loop needs a request count or a duration".into());
                    }
                    (None, Some(d)) if rate.cumulative(d) > MAX_REQUESTS as f64 => {
                        return bad(
                            "duration_s",
                            format!(
                                "{d} s at this rate sends about {:.3e} requests, over capsim's bound of {MAX_REQUESTS} per run; shorten the duration or set a request count",
                                rate.cumulative(d)
                            ),
                        );
                    }
                    _ => {}
                }
            }
            Arrivals::Trace { records } => {
                if records.is_empty() {
                    return bad("trace", "the trace holds no requests".into());
                }
                for (i, r) in records.iter().enumerate() {
                    if !(r.arrival_s.is_finite() && r.arrival_s >= 0.0) || r.input_tokens == 0 || r.output_tokens == 0 {
                        return bad(
                            &format!("trace[{i}]"),
                            "needs a finite arrival >= 0 and input/output tokens >= 1".into(),
                        );
                    }
                    for (field, n) in [("input_tokens", r.input_tokens), ("output_tokens", r.output_tokens)] {
                        if n > MAX_REQUEST_TOKENS {
                            return bad(
                                &format!("trace[{i}].{field}"),
                                format!("{n} tokens exceed capsim's bound of {MAX_REQUEST_TOKENS} tokens per request"),
                            );
                        }
                    }
                }
            }
        }
        if let Some(c) = &self.conversation {
            if is_trace {
                return bad("conversation", "a trace replays its own requests; give its sessions as hash_ids".into());
            }
            c.turns.validate("conversation.turns")?;
            if !(c.think_time_s.is_finite() && c.think_time_s >= 0.0 && c.think_time_s <= MAX_TIME_S) {
                return bad(
                    "conversation.think_time_s",
                    format!("must be in 0..={MAX_TIME_S:e} s, got {}", c.think_time_s),
                );
            }
        }
        for (i, c) in self.classes.iter().enumerate() {
            if c.system_prompt_tokens > MAX_REQUEST_TOKENS {
                return bad(
                    &format!("classes[{i}].system_prompt_tokens"),
                    format!("must be at most {MAX_REQUEST_TOKENS}, got {}", c.system_prompt_tokens),
                );
            }
        }
        let w = Workload { spec: self };
        if let Some(n) = w.planned_requests() {
            let left_out = w.spec.warmup_requests.saturating_add(w.spec.cooldown_requests);
            if left_out >= n {
                return bad(
                    "warmup_requests",
                    format!(
                        "warm-up {} plus cool-down {} leave none of the {n} requests to measure",
                        w.spec.warmup_requests, w.spec.cooldown_requests
                    ),
                );
            }
        }
        Ok(w)
    }
}

/// Refuse request classes every request of which would exceed the model's context (prompt + output
/// over max_model_len): the engine would reject them all. Classes that can draw a few such requests
/// run, and the engine rejects those (counted, shown, left out of the latency statistics).
pub fn check_context(classes: &[RequestClass], max_context: u64, model: &str) -> Result<()> {
    for (i, c) in classes.iter().enumerate() {
        let shortest = c.input.min() as u64 + c.output.min() as u64;
        if shortest > max_context {
            return Err(Error::input(
                "workload",
                None,
                Some(&format!("classes[{i}]")),
                format!(
                    "every request has at least {shortest} tokens (input + output), over {model}'s context of {max_context}: the engine rejects them all"
                ),
            ));
        }
    }
    Ok(())
}

impl Workload {
    /// [`check_context`] for this workload's classes (traces are checked request by request at
    /// arrival).
    pub fn check_context(&self, max_context: u64, model: &str) -> Result<()> {
        check_context(&self.spec.classes, max_context, model)
    }
    /// Total requests the workload sends, when it is known in advance.
    pub fn planned_requests(&self) -> Option<u64> {
        if self.spec.conversation.is_some() {
            // Sessions of drawn lengths: only a request count bounds them in advance.
            return self.spec.requests;
        }
        match &self.spec.arrivals {
            Arrivals::Burst { n } => Some(*n as u64),
            Arrivals::Trace { records } => Some(records.len() as u64),
            _ => self.spec.requests,
        }
    }
    pub fn mean_output_tokens(&self) -> f64 {
        if let Arrivals::Trace { records } = &self.spec.arrivals {
            return records.iter().map(|r| r.output_tokens as f64).sum::<f64>() / records.len() as f64;
        }
        let w: f64 = self.spec.classes.iter().map(|c| c.weight).sum();
        self.spec.classes.iter().map(|c| c.weight * c.output.mean()).sum::<f64>() / w
    }
    /// Mean prompt tokens of a request (system prompt included; a conversation turn's new message
    /// only, without its history).
    pub fn mean_input_tokens(&self) -> f64 {
        if let Arrivals::Trace { records } = &self.spec.arrivals {
            return records.iter().map(|r| r.input_tokens as f64).sum::<f64>() / records.len() as f64;
        }
        let w: f64 = self.spec.classes.iter().map(|c| c.weight).sum();
        self.spec.classes.iter().map(|c| c.weight * (c.input.mean() + c.system_prompt_tokens as f64)).sum::<f64>() / w
    }
    /// A replayed trace; warm-up and cool-down by request count.
    pub fn trace(records: Vec<TraceRecord>, warmup_requests: u64, cooldown_requests: u64) -> Result<Workload> {
        WorkloadSpec {
            arrivals: Arrivals::Trace { records },
            classes: vec![],
            requests: None,
            duration_s: None,
            warmup_requests,
            cooldown_requests,
            warmup_s: 0.0,
            conversation: None,
        }
        .validate()
    }

    /// A simple closed loop or burst of fixed lengths: the common case, and what the reports ran.
    pub fn fixed(arrivals: Arrivals, input: u32, output: u32, requests: Option<u64>) -> Result<Workload> {
        WorkloadSpec {
            arrivals,
            classes: vec![RequestClass {
                weight: 1.0,
                name: String::new(),
                input: LengthDist::fixed(input),
                output: LengthDist::fixed(output),
                system_prompt_tokens: 0,
            }],
            requests,
            duration_s: None,
            warmup_requests: 0,
            cooldown_requests: 0,
            warmup_s: 0.0,
            conversation: None,
        }
        .validate()
    }
}

/// Draws lengths and open-loop arrival times from the seed's streams.
#[derive(Debug)]
pub struct Generator {
    lengths_rng: SimRng,
    arrivals_rng: SimRng,
    think_rng: SimRng,
    classes: Vec<(LengthSampler, LengthSampler)>,
    class_index: Option<WeightedIndex<f64>>,
    /// Operational time of the open loop (in expected arrivals).
    tau: f64,
    gamma: Option<Gamma<f64>>,
    turns: Option<LengthSampler>,
}

/// A sampler of a validated workload's lengths ([`LengthDist::validate`] built one already).
fn sampler(d: &LengthDist) -> LengthSampler {
    LengthSampler::new(d).expect("validated with the workload")
}

impl Generator {
    pub fn new(w: &Workload, seed: u64) -> Generator {
        let classes: Vec<_> = w.spec.classes.iter().map(|c| (sampler(&c.input), sampler(&c.output))).collect();
        let class_index = if classes.len() > 1 {
            Some(WeightedIndex::new(w.spec.classes.iter().map(|c| c.weight)).expect("validated"))
        } else {
            None
        };
        let gamma = match &w.spec.arrivals {
            Arrivals::OpenLoop { process: Process::Gamma, burstiness, .. } => {
                Some(Gamma::new(*burstiness, 1.0 / burstiness).expect("validated"))
            }
            _ => None,
        };
        Generator {
            lengths_rng: stream_rng(seed, 1),
            arrivals_rng: stream_rng(seed, 2),
            think_rng: stream_rng(seed, 3),
            classes,
            class_index,
            tau: 0.0,
            gamma,
            turns: w.spec.conversation.as_ref().map(|c| sampler(&c.turns)),
        }
    }

    /// The class of the next conversation.
    pub fn class(&mut self) -> u16 {
        match &self.class_index {
            Some(ix) => ix.sample(&mut self.lengths_rng) as u16,
            None => 0,
        }
    }
    /// The turns of the next conversation (1 without a conversation section).
    pub fn turns(&mut self) -> u32 {
        match &self.turns {
            Some(t) => t.sample(&mut self.lengths_rng).max(1),
            None => 1,
        }
    }
    /// (input, output) tokens drawn from class `ci`.
    pub fn lengths_of(&mut self, ci: u16) -> (u32, u32) {
        let (i, o) = &self.classes[ci as usize];
        (i.sample(&mut self.lengths_rng), o.sample(&mut self.lengths_rng))
    }

    /// (input tokens, output tokens, class index) of the next request.
    pub fn lengths(&mut self) -> (u32, u32, u16) {
        let ci = match &self.class_index {
            Some(ix) => ix.sample(&mut self.lengths_rng),
            None => 0,
        };
        let (i, o) = &self.classes[ci];
        (i.sample(&mut self.lengths_rng), o.sample(&mut self.lengths_rng), ci as u16)
    }

    /// Seconds a closed-loop client thinks before its next request.
    pub fn think_s(&mut self, mean_s: f64, exponential: bool) -> f64 {
        if mean_s <= 0.0 {
            0.0
        } else if exponential {
            let e: f64 = Exp1.sample(&mut self.think_rng);
            e * mean_s
        } else {
            mean_s
        }
    }

    /// The next open-loop arrival in seconds: unit-rate gaps in operational time mapped through the
    /// inverse cumulative rate, which is exact for a piecewise-constant Poisson rate.
    pub fn next_open_arrival_s(&mut self, process: Process, rate: &RateSchedule) -> f64 {
        let gap = match process {
            Process::Poisson => Exp1.sample(&mut self.arrivals_rng),
            Process::Gamma => self.gamma.as_ref().expect("gamma set for gamma process").sample(&mut self.arrivals_rng),
            Process::Constant => 1.0,
        };
        self.tau += gap;
        rate.invert(self.tau)
    }
}

/// Which load a sweep or capacity search varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadAxis {
    /// Closed-loop clients.
    Concurrency,
    /// A burst of N requests at t = 0.
    Burst,
    /// Open-loop requests per second.
    Rate,
    /// A multiple of a trace's or a workload file's own arrival rate: a trace replayed F times faster
    /// (every gap divided by F), an open-loop rate schedule with every rate times F.
    Scale,
}

impl LoadAxis {
    pub fn as_str(self) -> &'static str {
        match self {
            LoadAxis::Concurrency => "concurrency",
            LoadAxis::Burst => "burst",
            LoadAxis::Rate => "rate",
            LoadAxis::Scale => "scale",
        }
    }
    pub fn is_integer(self) -> bool {
        !matches!(self, LoadAxis::Rate | LoadAxis::Scale)
    }
}

/// Everything about a workload except the load level: sweeps and capacity searches instantiate it at
/// each load they try.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadTemplate {
    pub classes: Vec<RequestClass>,
    /// Requests per run; None = a default that scales with the load (see [`LoadTemplate::requests_at`]).
    pub requests: Option<u64>,
    pub duration_s: Option<f64>,
    pub think_time_s: f64,
    pub think_exponential: bool,
    pub process: Process,
    pub burstiness: f64,
    pub warmup_requests: u64,
    pub cooldown_requests: u64,
    pub warmup_s: f64,
    /// The arrivals a [`LoadAxis::Scale`] load multiplies: a trace's records or a workload file's
    /// open-loop schedule (None for templates built from flags).
    #[serde(serialize_with = "arrivals_outline")]
    pub scaled_arrivals: Option<Arrivals>,
    /// Requests are turns of conversations (see [`Conversation`]).
    pub conversation: Option<Conversation>,
}

/// A trace's records as their count (a template's JSON is not the place for a million records).
fn arrivals_outline<S: serde::Serializer>(a: &Option<Arrivals>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match a {
        Some(Arrivals::Trace { records }) => {
            #[derive(Serialize)]
            struct Outline {
                kind: &'static str,
                requests: usize,
            }
            Outline { kind: "trace", requests: records.len() }.serialize(s)
        }
        other => other.serialize(s),
    }
}

impl LoadTemplate {
    /// Everything of a workload but its load, and the load it was written at: a closed loop's clients,
    /// a burst's size, or scale 1 of an open loop's schedule or a trace. Sweeps and capacity searches
    /// vary the load; another axis than the file's replaces its arrivals and keeps the rest.
    pub fn of_workload(w: &Workload) -> (LoadTemplate, LoadAxis, f64) {
        let s = &w.spec;
        let mut t = LoadTemplate {
            classes: s.classes.clone(),
            requests: s.requests,
            duration_s: s.duration_s,
            warmup_requests: s.warmup_requests,
            cooldown_requests: s.cooldown_requests,
            warmup_s: s.warmup_s,
            conversation: s.conversation.clone(),
            ..LoadTemplate::fixed(1, 1)
        };
        if t.classes.is_empty() {
            // A trace carries its own lengths; the classes matter only if another axis replaces its
            // arrivals, and then its mean lengths stand in.
            t.classes = vec![RequestClass {
                weight: 1.0,
                name: "trace".into(),
                input: LengthDist::fixed(w.mean_input_tokens().round().max(1.0) as u32),
                output: LengthDist::fixed(w.mean_output_tokens().round().max(1.0) as u32),
                system_prompt_tokens: 0,
            }];
        }
        match &s.arrivals {
            Arrivals::ClosedLoop { clients, think_time_s, think_exponential } => {
                t.think_time_s = *think_time_s;
                t.think_exponential = *think_exponential;
                (t, LoadAxis::Concurrency, *clients as f64)
            }
            Arrivals::Burst { n } => (t, LoadAxis::Burst, *n as f64),
            Arrivals::OpenLoop { process, burstiness, .. } => {
                t.process = *process;
                t.burstiness = *burstiness;
                t.scaled_arrivals = Some(s.arrivals.clone());
                (t, LoadAxis::Scale, 1.0)
            }
            Arrivals::Trace { .. } => {
                t.scaled_arrivals = Some(s.arrivals.clone());
                (t, LoadAxis::Scale, 1.0)
            }
        }
    }
    /// Whether the template replays a trace (only the scale axis keeps its arrivals).
    pub fn is_trace(&self) -> bool {
        matches!(self.scaled_arrivals, Some(Arrivals::Trace { .. }))
    }
    pub fn fixed(input: u32, output: u32) -> LoadTemplate {
        LoadTemplate {
            classes: vec![RequestClass {
                weight: 1.0,
                name: String::new(),
                input: LengthDist::fixed(input),
                output: LengthDist::fixed(output),
                system_prompt_tokens: 0,
            }],
            requests: None,
            duration_s: None,
            think_time_s: 0.0,
            think_exponential: false,
            process: Process::Poisson,
            burstiness: 1.0,
            warmup_requests: 0,
            cooldown_requests: 0,
            warmup_s: 0.0,
            scaled_arrivals: None,
            conversation: None,
        }
    }
    /// Request count at a load when none was given: 5 rounds of a closed loop (at least 100; five
    /// sessions per client in conversations), 1000 for an open loop.
    pub fn requests_at(&self, axis: LoadAxis, value: f64) -> Option<u64> {
        if self.duration_s.is_some() && self.requests.is_none() {
            return None;
        }
        // Conversations: five sessions per client (or per session started, open loops: 1,000 turns).
        let turns = self.conversation.as_ref().map_or(1.0, |c| c.turns.mean().max(1.0));
        Some(self.requests.unwrap_or(match axis {
            LoadAxis::Concurrency => ((5.0 * value * turns) as u64).max(100),
            LoadAxis::Burst => value as u64,
            LoadAxis::Rate => 1000,
            LoadAxis::Scale => return self.requests,
        }))
    }
    pub fn at(&self, axis: LoadAxis, value: f64) -> Result<Workload> {
        // The load's flag (--concurrency, --burst, --rate, --scale: the CLI's names of the axes).
        let flag = format!("--{}", axis.as_str());
        if !(value.is_finite() && value > 0.0) {
            return Err(Error::flag(&flag, format!("load must be a positive number, got {value}")));
        }
        // Clients and burst sizes are whole numbers of requests within the work bound.
        if matches!(axis, LoadAxis::Concurrency | LoadAxis::Burst)
            && (value.fract() != 0.0 || value > MAX_REQUESTS as f64)
        {
            return Err(Error::flag(
                &flag,
                format!("must be a whole number in 1..={MAX_REQUESTS}, got {}", crate::error::fmt_num(value)),
            ));
        }
        let arrivals = match axis {
            LoadAxis::Concurrency => Arrivals::ClosedLoop {
                clients: value as u32,
                think_time_s: self.think_time_s,
                think_exponential: self.think_exponential,
            },
            LoadAxis::Burst => Arrivals::Burst { n: value as u32 },
            LoadAxis::Rate => Arrivals::OpenLoop {
                process: self.process,
                rate: RateSchedule::constant(value),
                burstiness: self.burstiness,
            },
            LoadAxis::Scale => match &self.scaled_arrivals {
                Some(Arrivals::Trace { records }) => Arrivals::Trace {
                    records: records.iter().map(|r| TraceRecord { arrival_s: r.arrival_s / value, ..r.clone() }).collect(),
                },
                Some(Arrivals::OpenLoop { process, rate, burstiness }) => Arrivals::OpenLoop {
                    process: *process,
                    rate: RateSchedule { segments: rate.segments.iter().map(|&(t, r)| (t, r * value)).collect() },
                    burstiness: *burstiness,
                },
                _ => {
                    return Err(Error::flag(
                        "--scale",
                        "a scale load multiplies a trace's or a workload file's open-loop rate; this workload has neither (use --rate, --concurrency or --burst)",
                    ))
                }
            },
        };
        let classes = if self.is_trace() && axis == LoadAxis::Scale { vec![] } else { self.classes.clone() };
        WorkloadSpec {
            arrivals,
            classes,
            requests: self.requests_at(axis, value),
            duration_s: self.duration_s,
            warmup_requests: self.warmup_requests,
            cooldown_requests: self.cooldown_requests,
            warmup_s: self.warmup_s,
            conversation: self.conversation.clone(),
        }
        .with_timing_noise()
        .validate()
    }
}
