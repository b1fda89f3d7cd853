//! The measured data: calibration/points.csv (one row per number printed in a benchmark report) and the
//! per-report metadata under calibration/reports/. Both are embedded in the binary; `--data FILE`
//! replaces the points.
//!
//! The CSV wire type ([`PointRow`]) is kept apart from the validated in-memory type ([`Point`]): every
//! field is checked once, here, and errors name the file, the line and the column.

pub mod flags;

use crate::error::{read_file, toml_error, Error, Result};
use crate::measured::Run;
use crate::metrics::StatKind;
use crate::units::Dtype;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

pub const POINTS_CSV: &str = include_str!("../../calibration/points.csv");
pub const POINTS_PATH: &str = "calibration/points.csv";

/// Report metadata files, embedded.
pub const REPORT_META: &[(&str, &str)] = &[
    ("000_2d6ea432ec8bd63a.txt", include_str!("../../calibration/reports/000_2d6ea432ec8bd63a.toml")),
    ("001_755e0d5560c212ac.txt", include_str!("../../calibration/reports/001_755e0d5560c212ac.toml")),
    ("002_54c11bffdcfbf732.txt", include_str!("../../calibration/reports/002_54c11bffdcfbf732.toml")),
    ("003_1f7ea993e37bf08b.txt", include_str!("../../calibration/reports/003_1f7ea993e37bf08b.toml")),
    ("004_cf24bff5c2ecb52c.txt", include_str!("../../calibration/reports/004_cf24bff5c2ecb52c.toml")),
];

/// The report source texts, embedded so that quotes can be checked anywhere.
pub const REPORT_SOURCES: &[(&str, &str)] = &[
    ("000_2d6ea432ec8bd63a.txt", include_str!("../../calibration/sources/000_2d6ea432ec8bd63a.txt")),
    ("001_755e0d5560c212ac.txt", include_str!("../../calibration/sources/001_755e0d5560c212ac.txt")),
    ("002_54c11bffdcfbf732.txt", include_str!("../../calibration/sources/002_54c11bffdcfbf732.txt")),
    ("003_1f7ea993e37bf08b.txt", include_str!("../../calibration/sources/003_1f7ea993e37bf08b.txt")),
    ("004_cf24bff5c2ecb52c.txt", include_str!("../../calibration/sources/004_cf24bff5c2ecb52c.txt")),
];

/// One CSV row exactly as on disk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PointRow {
    pub report: String,
    pub model: String,
    pub precision: String,
    pub gpu: String,
    pub engine: String,
    pub scenario: String,
    pub input_tokens: String,
    pub output_tokens: String,
    pub load: String,
    pub concurrency: String,
    pub metric: String,
    pub value: String,
    pub approx: String,
    pub aggregation: String,
    pub quote: String,
    pub flag: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoadKind {
    ClosedLoop,
    Burst,
    Unknown,
}

impl LoadKind {
    pub fn as_str(self) -> &'static str {
        match self {
            LoadKind::ClosedLoop => "closed_loop",
            LoadKind::Burst => "burst",
            LoadKind::Unknown => "unknown",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    Value,
    Peak,
    RangeLow,
    RangeHigh,
}

/// The metrics a point may carry; the unit is in the name.
pub const METRICS: &[&str] = &[
    "ttft_s",
    "itl_ms",
    "per_user_tok_s",
    "system_tok_s",
    "system_tok_per_hour",
    "e2e_ms",
    "queue_wait_s",
    "prefill_tok_s",
    "scaling_eff_pct",
    "throughput_scaling_x",
    "power_w",
    "power_cost_usd_per_hour",
    "max_safe_queue_depth",
    "capacity_requests",
    "success_rate_pct",
    "requests_total",
];

/// A validated measured point. `line` is its line in the CSV (header = line 1).
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub line: usize,
    pub report: String,
    pub model: String,
    /// None where the report does not state it.
    pub precision: Option<Dtype>,
    pub gpu: String,
    pub engine: String,
    pub scenario: String,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub load: LoadKind,
    pub concurrency: Option<u32>,
    pub metric: String,
    pub value: f64,
    pub approx: bool,
    pub aggregation: Aggregation,
    pub quote: String,
    /// Reasons, " | "-separated in the file; empty when the point is usable.
    pub flags: Vec<String>,
    /// Which statistic of the metric (the reports print means).
    pub stat: StatKind,
    /// The benchmark run the point was read from (a user's result file): its replay uses the load,
    /// request count and lengths as the tool ran them. None for a report's printed figure.
    pub run: Option<Arc<Run>>,
}

impl Point {
    pub fn is_flagged(&self) -> bool {
        !self.flags.is_empty()
    }
    /// A point that describes one experiment (a scenario at a load), not a summary over scenarios.
    pub fn is_experiment(&self) -> bool {
        self.scenario != "all"
            && matches!(self.aggregation, Aggregation::Value | Aggregation::Peak)
            && self.input_tokens.is_some()
            && self.output_tokens.is_some()
    }
}

fn parse_opt_u64(src: &str, line: usize, field: &str, s: &str) -> Result<Option<u64>> {
    if s.trim().is_empty() {
        return Ok(None);
    }
    let t = s.trim();
    if t.starts_with('-') {
        return Err(Error::input(src, Some(line), Some(field), format!("must not be negative, got `{t}`")));
    }
    t.parse::<u64>()
        .map(Some)
        .map_err(|_| Error::input(src, Some(line), Some(field), format!("must be a non-negative integer, got `{t}`")))
}

impl PointRow {
    pub fn validate(&self, src: &str, line: usize) -> Result<Point> {
        let e = |field: &str, msg: String| Error::input(src, Some(line), Some(field), msg);
        let value: f64 =
            self.value.trim().parse().map_err(|_| e("value", format!("not a number: `{}`", self.value)))?;
        if !value.is_finite() {
            return Err(e("value", format!("must be finite, got `{}`", self.value)));
        }
        if value < 0.0 {
            return Err(e("value", format!("must not be negative, got {}", crate::error::fmt_num(value))));
        }
        if !METRICS.contains(&self.metric.as_str()) {
            return Err(e("metric", format!("unknown metric `{}`; known: {}", self.metric, METRICS.join(", "))));
        }
        let precision = match self.precision.as_str() {
            "unknown" | "" => None,
            p => Some(Dtype::parse(p).ok_or_else(|| e("precision", format!("unknown precision `{p}`")))?),
        };
        let load = match self.load.as_str() {
            "closed_loop" => LoadKind::ClosedLoop,
            "burst" => LoadKind::Burst,
            "unknown" => LoadKind::Unknown,
            other => return Err(e("load", format!("must be closed_loop, burst or unknown, got `{other}`"))),
        };
        let aggregation = match self.aggregation.as_str() {
            "value" => Aggregation::Value,
            "peak" => Aggregation::Peak,
            "range_low" => Aggregation::RangeLow,
            "range_high" => Aggregation::RangeHigh,
            other => {
                return Err(e("aggregation", format!("must be value, peak, range_low or range_high, got `{other}`")))
            }
        };
        let approx = match self.approx.as_str() {
            "true" => true,
            "false" => false,
            other => return Err(e("approx", format!("must be true or false, got `{other}`"))),
        };
        let concurrency = parse_opt_u64(src, line, "concurrency", &self.concurrency)?;
        if concurrency == Some(0) {
            return Err(e("concurrency", "must be at least 1".into()));
        }
        if self.quote.trim().is_empty() {
            return Err(e("quote", "must not be empty".into()));
        }
        Ok(Point {
            line,
            report: self.report.clone(),
            model: self.model.clone(),
            precision,
            gpu: self.gpu.clone(),
            engine: self.engine.clone(),
            scenario: self.scenario.clone(),
            input_tokens: parse_opt_u64(src, line, "input_tokens", &self.input_tokens)?,
            output_tokens: parse_opt_u64(src, line, "output_tokens", &self.output_tokens)?,
            load,
            concurrency: concurrency.map(|c| c as u32),
            metric: self.metric.clone(),
            value,
            approx,
            aggregation,
            quote: self.quote.clone(),
            flags: self.flag.split(" | ").map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect(),
            stat: StatKind::Mean,
            run: None,
        })
    }
}

/// Parse points CSV text; `src` names the file in errors.
pub fn parse_points(src: &str, text: &str) -> Result<Vec<Point>> {
    let mut rdr = csv::ReaderBuilder::new().has_headers(true).from_reader(text.as_bytes());
    let expected = [
        "report",
        "model",
        "precision",
        "gpu",
        "engine",
        "scenario",
        "input_tokens",
        "output_tokens",
        "load",
        "concurrency",
        "metric",
        "value",
        "approx",
        "aggregation",
        "quote",
        "flag",
    ];
    let headers = rdr.headers().map_err(|err| Error::input(src, Some(1), None, format!("bad header: {err}")))?.clone();
    for (i, h) in expected.iter().enumerate() {
        if headers.get(i) != Some(*h) {
            return Err(Error::input(
                src,
                Some(1),
                Some(h),
                format!("header column {} must be `{h}`, got `{}`", i + 1, headers.get(i).unwrap_or("")),
            ));
        }
    }
    let mut out = Vec::new();
    for rec in rdr.records() {
        let rec = rec.map_err(|err| {
            let line = err.position().map_or(0, |p| p.line() as usize);
            Error::csv_row(src, line, Some(&headers), &err)
        })?;
        let line = rec.position().map_or(0, |p| p.line() as usize);
        if rec.len() != expected.len() {
            return Err(Error::input(
                src,
                Some(line),
                None,
                format!("expected {} fields, got {}", expected.len(), rec.len()),
            ));
        }
        let row: PointRow = rec
            .deserialize(Some(&headers))
            .map_err(|err| Error::input(src, Some(line), None, format!("malformed row: {err}")))?;
        out.push(row.validate(src, line)?);
    }
    Ok(out)
}

pub fn load_points(path: Option<&Path>) -> Result<Vec<Point>> {
    match path {
        None => parse_points(POINTS_PATH, POINTS_CSV),
        Some(p) => parse_points(&p.display().to_string(), &read_file(p)?),
    }
}

/// Write points back as CSV (used to refresh computed flags).
pub fn write_points(points: &[Point]) -> String {
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    for p in points {
        let opt = |v: Option<u64>| v.map(|x| x.to_string()).unwrap_or_default();
        let row = PointRow {
            report: p.report.clone(),
            model: p.model.clone(),
            precision: p.precision.map_or("unknown".to_string(), |d| d.to_string()),
            gpu: p.gpu.clone(),
            engine: p.engine.clone(),
            scenario: p.scenario.clone(),
            input_tokens: opt(p.input_tokens),
            output_tokens: opt(p.output_tokens),
            load: p.load.as_str().to_string(),
            concurrency: opt(p.concurrency.map(u64::from)),
            metric: p.metric.clone(),
            value: format_value(p.value),
            approx: p.approx.to_string(),
            aggregation: match p.aggregation {
                Aggregation::Value => "value",
                Aggregation::Peak => "peak",
                Aggregation::RangeLow => "range_low",
                Aggregation::RangeHigh => "range_high",
            }
            .to_string(),
            quote: p.quote.clone(),
            flag: p.flags.join(" | "),
        };
        w.serialize(row).expect("writing CSV to memory cannot fail");
    }
    String::from_utf8(w.into_inner().expect("in-memory writer")).expect("CSV is UTF-8")
}

/// Shortest decimal that round-trips, without a trailing ".0"; in scientific notation outside
/// 1e-9..1e16, where plain digits run to hundreds of characters.
pub fn format_value(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-9..1e16).contains(&v.abs()) {
        // Shortest round trip in scientific notation: 1e308, not 309 digits.
        return format!("{v:e}");
    }
    let s = format!("{v}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

#[derive(Debug, Clone, Deserialize)]
pub struct Methodology {
    pub output_tokens: String,
    pub concurrency_range: String,
    pub caching: String,
    pub concurrent_means: String,
    pub load: String,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A use-case threshold as a report states it.
#[derive(Debug, Clone, Deserialize)]
pub struct Threshold {
    pub use_case: String,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub ttft_s_max: Option<f64>,
    pub e2e_s_max: Option<f64>,
    pub per_user_tok_s_min: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ScenarioMeta {
    pub name: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ReportMeta {
    pub report: String,
    pub model: String,
    pub gpu: String,
    pub engine: String,
    pub precision: String,
    pub kv_cache_dtype: String,
    pub independent: bool,
    #[serde(default)]
    pub duplicate_of: Option<String>,
    /// How the report computes system throughput: "sum_of_streams" (N x per-user speed) or
    /// "wall_clock" (output tokens / wall time).
    pub system_throughput: String,
    pub methodology: Methodology,
    #[serde(default)]
    pub threshold: Vec<Threshold>,
    #[serde(default)]
    pub scenario: Vec<ScenarioMeta>,
}

impl ReportMeta {
    pub fn precision(&self) -> Option<Dtype> {
        Dtype::parse(&self.precision)
    }
    pub fn kv_dtype(&self) -> Option<Dtype> {
        Dtype::parse(&self.kv_cache_dtype)
    }
}

pub fn report_metas() -> Result<Vec<ReportMeta>> {
    REPORT_META
        .iter()
        .map(|(name, text)| {
            let src = format!("calibration/reports/{}", name.replace(".txt", ".toml"));
            toml::from_str::<ReportMeta>(text).map_err(|e| toml_error(&src, text, e))
        })
        .collect()
}

pub fn report_source(report: &str) -> Option<&'static str> {
    REPORT_SOURCES.iter().find(|(n, _)| *n == report).map(|(_, t)| *t)
}
