//! An autoscaled fleet's day as one self-contained HTML page (`capsim simulate --autoscale POLICY
//! --html FILE`): replicas over the day (the policy's count at each evaluation, ready and starting,
//! and the most held per bucket), then TTFT and TPOT p95 per bucket with the SLO's limits, then the
//! bucket table. Formats finished figures only: the CLI computes every value it is given.

use super::chart::{esc, Chart, Line};
use super::num;

/// One bucket's figures, as the CLI computed them.
#[derive(Debug, Clone, PartialEq)]
pub struct DayBucketRow {
    pub start_h: f64,
    pub end_h: f64,
    pub requests_sent: u64,
    pub replicas_max: u32,
    /// NaN where the bucket completed nothing.
    pub ttft_p95_s: f64,
    pub tpot_p95_ms: f64,
    /// Share of completed requests meeting the --goodput-* limits (NaN when none completed).
    pub slo_met_share: f64,
    pub gpu_hours: f64,
    /// NaN when the GPU's power is unknown.
    pub energy_kwh: f64,
}

/// What the page shows.
#[derive(Debug, Clone, Default)]
pub struct DayPage {
    pub title: String,
    /// Key figures: (label, value).
    pub keys: Vec<(String, String)>,
    pub buckets: Vec<DayBucketRow>,
    /// (hour, replicas the policy holds ready or starting) at each evaluation.
    pub replicas: Vec<(f64, u32)>,
    pub ttft_limit_s: Option<f64>,
    pub tpot_limit_ms: Option<f64>,
    /// The exact command that wrote the page.
    pub command: String,
    pub version: String,
}

/// The page's three charts: replicas, TTFT p95 and TPOT p95 against the hour of the day.
pub fn day_charts(p: &DayPage) -> Vec<Chart> {
    let mid = |b: &DayBucketRow| (b.start_h + b.end_h) / 2.0;
    let replicas = Chart {
        title: "Replicas over the day".into(),
        x_label: "hour".into(),
        y_label: "replicas".into(),
        lines: vec![
            Line {
                label: "ready + starting (each evaluation)".into(),
                color: 0,
                points: p.replicas.iter().map(|&(t, n)| (t, n as f64)).collect(),
                ..Default::default()
            },
            Line {
                label: "most held in the bucket".into(),
                color: 1,
                points: p.buckets.iter().map(|b| (mid(b), b.replicas_max as f64)).collect(),
                dots: true,
                ..Default::default()
            },
        ],
        width: 480.0,
        ..Default::default()
    };
    let latency = |title: &str, y: &str, f: fn(&DayBucketRow) -> f64, limit: Option<f64>| Chart {
        title: title.into(),
        x_label: "hour (bucket middle)".into(),
        y_label: y.into(),
        lines: vec![Line {
            label: "p95 of the bucket's requests".into(),
            color: 2,
            points: p.buckets.iter().filter(|b| f(b).is_finite()).map(|b| (mid(b), f(b))).collect(),
            ..Default::default()
        }],
        hline: limit.map(|l| (l, "limit".to_string())),
        width: 480.0,
        ..Default::default()
    };
    vec![
        replicas,
        latency("TTFT over the day", "TTFT p95 (s)", |b| b.ttft_p95_s, p.ttft_limit_s),
        latency("TPOT over the day", "TPOT p95 (ms)", |b| b.tpot_p95_ms, p.tpot_limit_ms),
    ]
}

/// The HTML document.
pub fn day_html(p: &DayPage) -> String {
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>capsim autoscaled day: {}</title>\n<style>{}</style>\n</head>\n<body>\n<h1>Autoscaled day: {}</h1>\n<p class=\"note\">Simulated by capsim {}; nothing here was measured.</p>\n<div class=\"keys\">\n",
        esc(&p.title),
        super::html::CSS,
        esc(&p.title),
        esc(&p.version)
    );
    for (label, value) in &p.keys {
        s += &format!("<div class=\"key\"><span>{}</span><b>{}</b></div>\n", esc(label), esc(value));
    }
    s += "</div>\n<div class=\"charts\">\n";
    for c in day_charts(p) {
        s += &c.to_svg();
    }
    s += "</div>\n<h2>By bucket</h2>\n<table>\n<tr><th>start h</th><th>sent</th><th>replicas max</th><th>TTFT p95 s</th><th>TPOT p95 ms</th><th>SLO met</th><th>GPU-hours</th><th>energy kWh</th></tr>\n";
    let cell = |v: f64, d: usize| if v.is_finite() { num(v, d) } else { "-".into() };
    for b in &p.buckets {
        s += &format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            num(b.start_h, 4),
            b.requests_sent,
            b.replicas_max,
            cell(b.ttft_p95_s, 4),
            cell(b.tpot_p95_ms, 4),
            if b.slo_met_share.is_finite() { format!("{:.1}%", b.slo_met_share * 100.0) } else { "-".into() },
            cell(b.gpu_hours, 4),
            cell(b.energy_kwh, 4)
        );
    }
    s += &format!("</table>\n<h2 id=\"command\">Command</h2>\n<pre>{}</pre>\n</body>\n</html>\n", esc(&p.command));
    s
}
