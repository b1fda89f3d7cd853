//! The benchmark-report document of one or more deployments' datasheets: one self-contained HTML file
//! (inline CSS and SVG, no script, nothing fetched), or Markdown with the charts as SVG files beside
//! it. Laid out like the reports in calibration/sources: key figures, the curves against concurrency
//! per context length, TTFT against burst size, the use-case capacity table, then provenance.

use super::chart::{esc, Chart, Line};
use super::num;
use crate::datasheet::{Band, Datasheet};

pub(super) const CSS: &str = "body{font-family:Helvetica,Arial,sans-serif;max-width:1040px;margin:24px auto;padding:0 16px;color:#222;line-height:1.45}\
h1{font-size:24px;margin-bottom:4px}h2{font-size:20px;border-bottom:2px solid #ddd;padding-bottom:4px;margin-top:36px}h3{font-size:16px;margin-top:24px}\
table{border-collapse:collapse;margin:8px 0 16px}th,td{border:1px solid #ccc;padding:4px 10px;text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}\
.keys{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}.key{border:1px solid #ccc;border-radius:6px;padding:10px 14px;min-width:200px}.key b{display:block;font-size:22px}.key span{color:#555;font-size:12px}\
.warn{background:#fff4e5;border-left:4px solid #e69500;padding:8px 12px;margin:12px 0}.charts{display:flex;flex-wrap:wrap;gap:8px}.charts svg{max-width:100%;height:auto}\
.note{color:#555;font-size:13px}code,pre{background:#f6f6f6;padding:2px 4px;font-size:12px;white-space:pre-wrap}\
@media print{.charts svg{width:48%}h2{page-break-before:always}}";

fn band_text(b: &Band, digits: usize) -> String {
    if !b.mid.is_finite() {
        return "-".into();
    }
    let (lo, mid, hi) = (num(b.low, digits), num(b.mid, digits), num(b.high, digits));
    // A band narrower than the digits shown is no band.
    if b.low.is_finite() && b.high.is_finite() && lo != hi {
        format!("{mid} ({lo} to {hi})")
    } else {
        mid
    }
}

fn whole_band(b: &Band) -> String {
    if !b.mid.is_finite() {
        return "-".into();
    }
    if b.low != b.high {
        format!("{:.0} ({:.0} to {:.0})", b.mid, b.low, b.high)
    } else {
        format!("{:.0}", b.mid)
    }
}

fn ctx_label(t: u32) -> String {
    if t >= 1024 && t.is_multiple_of(1024) {
        format!("{}K", t / 1024)
    } else {
        t.to_string()
    }
}

/// The charts of one datasheet, by name: four metrics against concurrency, and the burst chart.
pub fn charts(d: &Datasheet) -> Vec<(String, Chart)> {
    type Get = fn(&crate::datasheet::CurvePoint) -> Band;
    let metrics: [(&str, &str, &str, Get); 4] = [
        ("per_user_speed", "Per-user speed", "tokens/s per user", |p| p.per_user_tok_s_mean),
        ("ttft", "Time to first token (mean)", "TTFT (s)", |p| p.ttft_s_mean),
        ("itl", "Inter-token latency (mean)", "ITL (ms)", |p| p.itl_ms_mean),
        ("system_throughput", "System output throughput", "output tokens/s", |p| p.system_output_tok_s),
    ];
    let measured_name = |m: &str| match m {
        "per_user_speed" => "per_user_tok_s",
        "ttft" => "ttft_s",
        "itl" => "itl_ms",
        _ => "system_tok_s",
    };
    let mut out = Vec::new();
    for (key, title, unit, get) in metrics {
        let mut lines = Vec::new();
        for (i, c) in d.curves.iter().enumerate() {
            let label = format!("{} in / {} out", ctx_label(c.input_tokens), c.output_tokens);
            lines.push(Line {
                label: label.clone(),
                color: i,
                points: c.points.iter().map(|p| (p.concurrency as f64, get(p).mid)).collect(),
                band: c.points.iter().map(|p| (p.concurrency as f64, get(p).low, get(p).high)).collect(),
                dots: false,
            });
            let m: Vec<(f64, f64)> = c
                .measured
                .iter()
                .filter(|q| q.metric == measured_name(key))
                .map(|q| (q.concurrency as f64, q.value))
                .collect();
            if !m.is_empty() {
                lines.push(Line { label: format!("{label} measured"), color: i, points: m, band: vec![], dots: true });
            }
        }
        out.push((
            key.to_string(),
            Chart {
                title: format!("{title}, {}", d.gpu),
                x_label: "concurrent users (closed loop, log scale)".into(),
                y_label: unit.into(),
                log_x: true,
                lines,
                width: 500.0,
                ..Default::default()
            },
        ));
    }
    let b = &d.bursts;
    out.push((
        "burst".to_string(),
        Chart {
            title: format!("TTFT against burst size, {}", d.gpu),
            x_label: format!(
                "requests sent at once ({} in / {} out, log scale)",
                ctx_label(b.input_tokens),
                b.output_tokens
            ),
            y_label: "mean TTFT (s)".into(),
            log_x: true,
            lines: vec![Line {
                label: "predicted".into(),
                color: 0,
                points: b.points.iter().map(|p| (p.burst as f64, p.ttft_s_mean.mid)).collect(),
                band: b.points.iter().map(|p| (p.burst as f64, p.ttft_s_mean.low, p.ttft_s_mean.high)).collect(),
                dots: false,
            }],
            hline: Some((b.ttft_s_limit, format!("{} s limit", num(b.ttft_s_limit, 3)))),
            vline: (b.max_safe_queue_depth.mid > 0.0).then(|| {
                (b.max_safe_queue_depth.mid, format!("max safe queue depth {:.0}", b.max_safe_queue_depth.mid))
            }),
            xband: (b.max_safe_queue_depth.high > b.max_safe_queue_depth.low)
                .then(|| (b.max_safe_queue_depth.low, b.max_safe_queue_depth.high, "depth band".to_string())),
            width: 500.0,
        },
    ));
    out
}

fn deployment_line(d: &Datasheet) -> String {
    format!(
        "{} ({}) on {} x {}, {}, KV cache {} tokens",
        d.model, d.weight_dtype, d.tensor_parallel, d.gpu, d.engine, d.kv_capacity_tokens
    )
}

const BAND_NOTE: &str = "Values in parentheses are the band: the same prediction with the profile's fitted coefficients one sigma slower and one sigma faster. Lines are predictions, shaded areas their bands, open circles the measured points the profile was fitted on.";

/// The HTML document. `command` is the exact command that wrote it.
pub fn html(sheets: &[Datasheet], command: &str, version: &str) -> String {
    let mut s = String::new();
    let title = format!(
        "{} on {}",
        sheets.first().map_or("", |d| d.model.as_str()),
        sheets.iter().map(|d| d.gpu.as_str()).collect::<Vec<_>>().join(", ")
    );
    s += &format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>capsim report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<h1>Capacity report: {}</h1>\n<p class=\"note\">Predicted by capsim {} from step-time profiles; nothing here was measured on this hardware unless marked as measured. {BAND_NOTE}</p>\n",
        esc(&title),
        esc(&title),
        esc(version)
    );
    if sheets.len() > 1 {
        s += "<h2 id=\"comparison\">Side by side</h2>\n<table>\n<tr><th>figure</th>";
        for d in sheets {
            s += &format!("<th>{}{}</th>", esc(&d.gpu), if d.extrapolation.is_some() { " (extrapolated)" } else { "" });
        }
        s += "</tr>\n";
        type Row = (&'static str, fn(&Datasheet) -> String);
        let rows: [Row; 4] = [
            ("peak decode speed (tok/s, 1 user)", |d| band_text(&d.key.peak_decode_tok_s, 3)),
            ("peak system throughput (tok/s)", |d| band_text(&d.key.peak_system_tok_s, 3)),
            ("best TTFT (s)", |d| band_text(&d.key.best_ttft_s, 3)),
            ("max safe queue depth", |d| whole_band(&d.key.max_safe_queue_depth)),
        ];
        for (name, f) in rows {
            s += &format!("<tr><td>{name}</td>");
            for d in sheets {
                s += &format!("<td>{}</td>", esc(&f(d)));
            }
            s += "</tr>\n";
        }
        for (i, u) in sheets[0].use_cases.iter().enumerate() {
            s += &format!("<tr><td>{}: users</td>", esc(&u.name));
            for d in sheets {
                let c = d.use_cases.get(i).and_then(|u| u.capacity.as_ref()).map_or("-".to_string(), whole_band);
                s += &format!("<td>{}</td>", esc(&c));
            }
            s += "</tr>\n";
        }
        s += "</table>\n";
    }
    for d in sheets {
        s += &format!("<h2 id=\"{}\">{}</h2>\n<p>{}</p>\n", esc(&d.profile), esc(&d.gpu), esc(&deployment_line(d)));
        if let Some(e) = &d.extrapolation {
            s += &format!("<div class=\"warn\"><b>EXTRAPOLATION.</b> {}</div>\n", esc(e));
        }
        s += "<div class=\"keys\">\n";
        for (label, value, unit) in [
            ("Peak decode speed", band_text(&d.key.peak_decode_tok_s, 3), "tokens/s, one user"),
            ("Peak system throughput", band_text(&d.key.peak_system_tok_s, 3), "output tokens/s"),
            ("Best TTFT", band_text(&d.key.best_ttft_s, 3), "s, one user"),
            ("Max safe queue depth", whole_band(&d.key.max_safe_queue_depth), "requests at once"),
        ] {
            s += &format!("<div class=\"key\"><span>{label}</span><b>{}</b><span>{unit}</span></div>\n", esc(&value));
        }
        s += "</div>\n<h3>Against concurrency</h3>\n<div class=\"charts\">\n";
        for (name, c) in charts(d) {
            if name == "burst" {
                s += "</div>\n<h3>Bursts</h3>\n<div class=\"charts\">\n";
            }
            s += &c.to_svg();
        }
        s += &format!(
            "</div>\n<p class=\"note\">Max safe queue depth: the largest burst whose mean TTFT stays within {} s.</p>\n",
            num(d.bursts.ttft_s_limit, 3)
        );
        s += "<h3>Use-case capacity</h3>\n<table>\n<tr><th>use case</th><th>input / output tokens</th><th>SLOs (means)</th><th>concurrent users</th><th>verdict</th></tr>\n";
        for u in &d.use_cases {
            s += &format!(
                "<tr><td>{}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                esc(&u.name),
                u.input_tokens,
                u.output_tokens,
                esc(&u.slos),
                u.capacity.as_ref().map_or("-".to_string(), whole_band),
                esc(&u.verdict)
            );
        }
        s += "</table>\n<h3>Provenance</h3>\n<ul>\n";
        for l in &d.provenance {
            s += &format!("<li>{}</li>\n", esc(l));
        }
        s += "</ul>\n";
    }
    s += &format!("<h2 id=\"command\">Command</h2>\n<pre>{}</pre>\n</body>\n</html>\n", esc(command));
    s
}

/// The Markdown document and its charts (file name, SVG); the document links the charts in `dir`.
pub fn markdown(sheets: &[Datasheet], command: &str, version: &str, dir: &str) -> (String, Vec<(String, String)>) {
    let mut s = format!(
        "# Capacity report: {} on {}\n\nPredicted by capsim {version} from step-time profiles. {BAND_NOTE}\n\n",
        sheets.first().map_or("", |d| d.model.as_str()),
        sheets.iter().map(|d| d.gpu.as_str()).collect::<Vec<_>>().join(", ")
    );
    let mut files = Vec::new();
    for d in sheets {
        s += &format!("## {}\n\n{}\n\n", d.gpu, deployment_line(d));
        if let Some(e) = &d.extrapolation {
            s += &format!("> **EXTRAPOLATION.** {e}\n\n");
        }
        s += "| figure | value |\n| --- | --- |\n";
        s += &format!("| peak decode speed (tok/s, one user) | {} |\n", band_text(&d.key.peak_decode_tok_s, 3));
        s += &format!("| peak system throughput (output tok/s) | {} |\n", band_text(&d.key.peak_system_tok_s, 3));
        s += &format!("| best TTFT (s, one user) | {} |\n", band_text(&d.key.best_ttft_s, 3));
        s += &format!(
            "| max safe queue depth (mean TTFT <= {} s) | {} |\n\n",
            num(d.bursts.ttft_s_limit, 3),
            whole_band(&d.key.max_safe_queue_depth)
        );
        for (name, c) in charts(d) {
            let file =
                format!("{}-{}.svg", d.gpu.to_lowercase().replace(|c: char| !c.is_ascii_alphanumeric(), "-"), name);
            s += &format!("![{}]({dir}/{file})\n\n", c.title);
            files.push((file, c.to_svg()));
        }
        s += "| use case | input / output | SLOs (means) | concurrent users | verdict |\n| --- | --- | --- | --- | --- |\n";
        for u in &d.use_cases {
            s += &format!(
                "| {} | {} / {} | {} | {} | {} |\n",
                u.name,
                u.input_tokens,
                u.output_tokens,
                u.slos,
                u.capacity.as_ref().map_or("-".to_string(), whole_band),
                u.verdict
            );
        }
        s += "\nProvenance:\n\n";
        for l in &d.provenance {
            s += &format!("- {l}\n");
        }
        s += "\n";
    }
    s += &format!("Command:\n\n    {command}\n");
    (s, files)
}
