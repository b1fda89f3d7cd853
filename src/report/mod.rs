//! Output formatting over finished results: aligned text tables, CSV and SVG line charts. Formatters
//! compute no statistics and print nothing; the CLI decides where their strings go.

/// An aligned text table: first column left-aligned, the rest right-aligned.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut w: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = w[i] - c.chars().count();
            if i > 0 {
                s.push_str("  ");
            }
            if i == 0 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    out.push_str(&line(w.iter().map(|&x| "-".repeat(x)).collect::<Vec<_>>().iter().map(String::as_str).collect()));
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// CSV text of a header and rows.
pub fn csv(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut w = csv::WriterBuilder::new().terminator(csv::Terminator::Any(b'\n')).from_writer(Vec::new());
    w.write_record(headers).expect("in-memory CSV");
    for r in rows {
        w.write_record(r).expect("in-memory CSV");
    }
    String::from_utf8(w.into_inner().expect("in-memory CSV")).expect("UTF-8")
}

/// A number with `digits` significant figures, without exponent for everyday magnitudes (below 10^15).
pub fn num(v: f64, digits: usize) -> String {
    if !v.is_finite() {
        return "-".into();
    }
    if v == 0.0 {
        return "0".into();
    }
    let mag = v.abs().log10().floor() as i32;
    if mag >= 15 {
        // Beyond 10^15 plain digits say nothing more: 1e300 is written 1.000e300, not 301 digits.
        let decimals = digits.saturating_sub(1);
        return format!("{v:.decimals$e}");
    }
    let decimals = (digits as i32 - 1 - mag).clamp(0, 9) as usize;
    format!("{v:.decimals$}")
}

pub mod chart;
pub mod day;
pub mod html;

/// One series of an SVG chart.
pub struct Series<'a> {
    pub label: &'a str,
    pub points: Vec<(f64, f64)>,
    /// Draw markers only (measured points) instead of a line.
    pub markers: bool,
    /// Series with the same colour index share a colour (a simulated line and its measured points).
    pub color: usize,
}

/// A line chart as a standalone SVG, with optional horizontal and vertical reference lines.
pub fn svg_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    hline: Option<(f64, &str)>,
    vline: Option<(f64, &str)>,
    log_x: bool,
) -> String {
    let (w, h, ml, mr, mt, mb) = (980.0, 440.0, 70.0, 330.0, 40.0, 50.0);
    let pw = w - ml - mr;
    let ph = h - mt - mb;
    let tx = |x: f64| if log_x { x.max(1e-9).ln() } else { x };
    let all: Vec<(f64, f64)> =
        series.iter().flat_map(|s| s.points.iter().copied()).filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in &all {
        x0 = x0.min(tx(x));
        x1 = x1.max(tx(x));
        y1 = y1.max(y);
    }
    if let Some((y, _)) = hline {
        y1 = y1.max(y);
    }
    if !x0.is_finite() || x1 <= x0 {
        x0 = 0.0;
        x1 = 1.0;
    }
    if y1 <= 0.0 {
        y1 = 1.0;
    }
    y1 *= 1.08;
    let px = |x: f64| ml + (tx(x) - x0) / (x1 - x0) * pw;
    let py = |y: f64| mt + ph - y / y1 * ph;
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"22\" font-size=\"14\" text-anchor=\"middle\">{}</text>\n",
        ml + pw / 2.0,
        esc(title)
    );
    s += &format!("<rect x=\"{ml}\" y=\"{mt}\" width=\"{pw}\" height=\"{ph}\" fill=\"none\" stroke=\"#444\"/>\n");
    for i in 0..=4 {
        let yv = y1 / 1.08 * i as f64 / 4.0;
        s += &format!(
            "<line x1=\"{ml}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            ml + pw,
            py(yv),
            py(yv),
            ml - 6.0,
            py(yv) + 4.0,
            num(yv, 3)
        );
    }
    let mut xt: Vec<f64> = all.iter().map(|p| p.0).collect();
    xt.sort_by(f64::total_cmp);
    xt.dedup();
    // Label ticks left to right, skipping any closer than 34 px to the last one drawn.
    let mut last_px = f64::NEG_INFINITY;
    for x in &xt {
        let xp = px(*x);
        if xp - last_px < 34.0 {
            continue;
        }
        last_px = xp;
        let label = if x.fract() == 0.0 { format!("{x:.0}") } else { num(*x, 3) };
        s += &format!("<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", xp, mt + ph + 16.0, label);
    }
    s += &format!("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", ml + pw / 2.0, h - 10.0, esc(x_label));
    s += &format!(
        "<text x=\"16\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {})\">{}</text>\n",
        mt + ph / 2.0,
        mt + ph / 2.0,
        esc(y_label)
    );
    if let Some((y, label)) = hline {
        s += &format!(
            "<line x1=\"{ml}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#d62728\" stroke-dasharray=\"6 4\"/><text x=\"{}\" y=\"{:.1}\" fill=\"#d62728\">{}</text>\n",
            ml + pw,
            py(y),
            py(y),
            ml + pw + 4.0,
            py(y) + 4.0,
            esc(label)
        );
    }
    if let Some((x, label)) = vline {
        s += &format!(
            "<line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{mt}\" y2=\"{}\" stroke=\"#2ca02c\" stroke-dasharray=\"3 3\"/><text x=\"{:.1}\" y=\"{}\" fill=\"#2ca02c\">{}</text>\n",
            px(x),
            px(x),
            mt + ph,
            px(x) + 4.0,
            mt + 14.0,
            esc(label)
        );
    }
    for (i, se) in series.iter().enumerate() {
        let c = colors[se.color % colors.len()];
        let pts: Vec<(f64, f64)> = se.points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
        if se.markers {
            for (x, y) in &pts {
                s += &format!("<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"{c}\"/>\n", px(*x), py(*y));
            }
        } else if !pts.is_empty() {
            let d: Vec<String> = pts.iter().map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y))).collect();
            s += &format!("<polyline fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\n", d.join(" "));
            for (x, y) in &pts {
                s += &format!(
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"5\" height=\"5\" fill=\"{c}\"/>\n",
                    px(*x) - 2.5,
                    py(*y) - 2.5
                );
            }
        }
        let ly = mt + 10.0 + i as f64 * 18.0;
        let (lx, cy) = (ml + pw + 16.0, ly + 6.0);
        let key = if se.markers {
            format!("circle cx=\"{lx:.1}\" cy=\"{cy:.1}\" r=\"4\"")
        } else {
            format!("rect x=\"{:.1}\" y=\"{:.1}\" width=\"14\" height=\"3\"", lx - 7.0, cy - 1.5)
        };
        s += &format!(
            "<{key} fill=\"{c}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>\n",
            lx + 14.0,
            cy + 4.0,
            esc(se.label)
        );
    }
    s += "</svg>\n";
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A run's summary in the layout of `vllm bench serve --save-result` (vllm/benchmarks/serve.py: the
/// traffic settings, then duration, completed, failed, token totals, throughputs, and
/// mean_/median_/pNN_ + ttft, tpot, itl, e2el + `_ms`), as if run with `--metric-percentiles 90,95,99`
/// and `--percentile-metrics ttft,tpot,itl,e2el`. For what-if runs a user wants to compare with real
/// ones, and for round trips through the readers. `std_` keys are not written: capsim does not compute
/// standard deviations.
pub fn vllm_bench_result(
    s: &crate::metrics::Summary,
    arrivals: &crate::workload::Arrivals,
    model_id: &str,
) -> serde_json::Value {
    use crate::workload::Arrivals;
    use serde_json::json;
    let (rate, burstiness, cap) = match arrivals {
        Arrivals::ClosedLoop { clients, .. } => (json!("inf"), 1.0, json!(clients)),
        Arrivals::OpenLoop { rate, burstiness, .. } => {
            (json!(rate.segments.first().map_or(0.0, |x| x.1)), *burstiness, json!(null))
        }
        _ => (json!("inf"), 1.0, json!(null)),
    };
    let n = s.requests_measured as f64;
    let duration = if s.request_throughput_per_s > 0.0 { n / s.request_throughput_per_s } else { 0.0 };
    let out_tokens = s.system_output_tok_s * duration;
    let mut v = json!({
        "date": "capsim",
        "endpoint_type": "capsim",
        "backend": "capsim",
        "label": null,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": s.requests_sent,
        "request_rate": rate,
        "burstiness": burstiness,
        "max_concurrency": cap,
        "duration": duration,
        "completed": s.requests_measured,
        "failed": s.requests_sent - s.requests_measured.min(s.requests_sent),
        "total_input_tokens": (s.system_total_tok_s * duration - out_tokens).round(),
        "total_output_tokens": out_tokens.round(),
        "request_throughput": s.request_throughput_per_s,
        "request_goodput": null,
        "output_throughput": s.system_output_tok_s,
        "total_token_throughput": s.system_total_tok_s,
    });
    let obj = v.as_object_mut().expect("object");
    for (name, st, factor) in
        [("ttft", &s.ttft_s, 1e3), ("tpot", &s.tpot_ms, 1.0), ("itl", &s.itl_ms, 1.0), ("e2el", &s.e2e_s, 1e3)]
    {
        obj.insert(format!("mean_{name}_ms"), json!(st.mean * factor));
        obj.insert(format!("median_{name}_ms"), json!(st.p50 * factor));
        obj.insert(format!("p90_{name}_ms"), json!(st.p90 * factor));
        obj.insert(format!("p95_{name}_ms"), json!(st.p95 * factor));
        obj.insert(format!("p99_{name}_ms"), json!(st.p99 * factor));
    }
    v
}
