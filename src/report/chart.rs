//! SVG charts people read: axes with round ticks (1, 2, 5 steps), units in the axis titles, log-scale
//! load axes where loads double, a shaded +-1 sigma band under a line, measured points as dots over
//! the predicted lines. Standalone SVG (no script, no external resource), legible on screen and in
//! print.

use super::num;

/// One line (or set of dots) of a chart.
#[derive(Debug, Clone, Default)]
pub struct Line {
    pub label: String,
    /// Colour index: a predicted line and its measured dots share one.
    pub color: usize,
    pub points: Vec<(f64, f64)>,
    /// (x, low, high): the band shaded under the line.
    pub band: Vec<(f64, f64, f64)>,
    /// Dots only (measured points).
    pub dots: bool,
}

/// A chart: lines over a load axis, with an optional limit (horizontal) and a marked load (vertical).
#[derive(Debug, Clone, Default)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub lines: Vec<Line>,
    pub hline: Option<(f64, String)>,
    pub vline: Option<(f64, String)>,
    /// A range of the x axis shaded (a capacity's band), with its label.
    pub xband: Option<(f64, f64, String)>,
    /// Width in pixels (the height follows).
    pub width: f64,
}

const COLORS: [&str; 8] = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

/// Round ticks covering [lo, hi] (the last at or above hi): steps of 1, 2 or 5 times a power of ten,
/// about `n` of them.
pub fn nice_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let e = raw.log10().floor() as i32;
    let mag = 10f64.powi(e);
    let m = [1.0, 2.0, 5.0, 10.0].into_iter().find(|m| m * mag >= raw).unwrap_or(10.0);
    let step = m * mag;
    let first = (lo / step + 1e-9).floor() as i64;
    let last = (hi / step - 1e-9).ceil() as i64;
    // k x m x 10^e, divided rather than multiplied for negative exponents, so that 0.3 is 0.3 and
    // not 0.30000000000000004.
    let at = |k: i64| if e < 0 { k as f64 * m / 10f64.powi(-e) } else { k as f64 * m * mag };
    (first..=last).map(at).collect()
}

/// Log-axis ticks: powers of two (loads double) from lo to hi.
fn log2_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut t = Vec::new();
    let mut v = 2f64.powf(lo.max(1e-9).log2().floor());
    while v <= hi * 1.0001 {
        if v >= lo * 0.9999 {
            t.push(v);
        }
        v *= 2.0;
    }
    t
}

fn tick_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if v.abs() >= 1000.0 && v.fract() == 0.0 {
        // 16384 -> 16,384
        let s = format!("{}", v as i64);
        let mut out = String::new();
        for (i, c) in s.chars().rev().enumerate() {
            if i > 0 && i % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        return out.chars().rev().collect();
    }
    let s = num(v, 3);
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl Chart {
    pub fn to_svg(&self) -> String {
        let w = if self.width > 0.0 { self.width } else { 640.0 };
        let (ml, mr, mt) = (64.0, 16.0, 34.0);
        // The legend wraps into rows under the plot; the height grows with them.
        let item_w = |l: &Line| 26.0 + 6.5 * l.label.chars().count() as f64;
        let mut legend: Vec<(f64, usize)> = Vec::new();
        let (mut x, mut row) = (ml, 0usize);
        for l in &self.lines {
            if x > ml && x + item_w(l) > w - mr {
                x = ml;
                row += 1;
            }
            legend.push((x, row));
            x += item_w(l);
        }
        let rows = row as f64 + 1.0;
        let mb = 58.0 + 16.0 * rows;
        let h = (w * 0.62).round() + 16.0 * (rows - 1.0);
        let (pw, ph) = (w - ml - mr, h - mt - mb);
        let finite = |x: f64, y: f64| x.is_finite() && y.is_finite() && (!self.log_x || x > 0.0);
        let mut xs: Vec<f64> = Vec::new();
        let mut y_hi = 0.0f64;
        for l in &self.lines {
            for &(x, y) in l.points.iter().filter(|(x, y)| finite(*x, *y)) {
                xs.push(x);
                y_hi = y_hi.max(y);
            }
            for &(x, _, hi) in l.band.iter().filter(|(x, lo, hi)| finite(*x, *lo) && hi.is_finite()) {
                xs.push(x);
                y_hi = y_hi.max(hi);
            }
        }
        if let Some((y, _)) = &self.hline {
            y_hi = y_hi.max(*y);
        }
        let (mut x_lo, mut x_hi) =
            xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        if !x_lo.is_finite() || x_hi <= x_lo {
            x_lo = if self.log_x { 1.0 } else { 0.0 };
            x_hi = x_lo + 1.0;
        }
        let y_ticks = nice_ticks(0.0, if y_hi > 0.0 { y_hi * 1.05 } else { 1.0 }, 5);
        let y_top = *y_ticks.last().unwrap_or(&1.0);
        let y_top = if y_top < y_hi { y_hi } else { y_top }.max(1e-12);
        let x_ticks = if self.log_x { log2_ticks(x_lo, x_hi) } else { nice_ticks(x_lo, x_hi, 6) };
        let (fx_lo, fx_hi) = if self.log_x {
            (x_lo.log2(), x_hi.log2())
        } else {
            (x_ticks.first().copied().unwrap_or(x_lo).min(x_lo), x_ticks.last().copied().unwrap_or(x_hi).max(x_hi))
        };
        let span = (fx_hi - fx_lo).max(1e-12);
        let px = |x: f64| ml + ((if self.log_x { x.log2() } else { x }) - fx_lo) / span * pw;
        let py = |y: f64| mt + ph - (y / y_top).clamp(-0.05, 1.05) * ph;
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" role=\"img\">\n<title>{}</title>\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{:.1}\" y=\"20\" font-size=\"14\" font-weight=\"bold\" text-anchor=\"middle\">{}</text>\n",
            esc(&self.title),
            ml + pw / 2.0,
            esc(&self.title)
        );
        for &t in &y_ticks {
            let y = py(t);
            s += &format!(
                "<line x1=\"{ml}\" x2=\"{:.1}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#333\">{}</text>\n",
                ml + pw,
                ml - 6.0,
                y + 4.0,
                tick_label(t)
            );
        }
        for &t in &x_ticks {
            let x = px(t);
            s += &format!(
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{mt}\" y2=\"{:.1}\" stroke=\"#f0f0f0\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#333\">{}</text>\n",
                mt + ph,
                mt + ph + 16.0,
                tick_label(t)
            );
        }
        s += &format!(
            "<rect x=\"{ml}\" y=\"{mt}\" width=\"{pw:.1}\" height=\"{ph:.1}\" fill=\"none\" stroke=\"#555\"/>\n"
        );
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
            ml + pw / 2.0,
            mt + ph + 34.0,
            esc(&self.x_label)
        );
        s += &format!(
            "<text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {:.1})\">{}</text>\n",
            mt + ph / 2.0,
            mt + ph / 2.0,
            esc(&self.y_label)
        );
        if let Some((a, b, label)) = &self.xband {
            if finite(*a, 0.0) && finite(*b, 0.0) && b >= a {
                let (xa, xb) = (px(*a).max(ml), px(*b).min(ml + pw));
                s += &format!(
                    "<rect class=\"band\" x=\"{xa:.1}\" y=\"{mt}\" width=\"{:.1}\" height=\"{ph:.1}\" fill=\"#2a2\" fill-opacity=\"0.12\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#2a2\" font-size=\"11\">{}</text>\n",
                    (xb - xa).max(1.0),
                    (xa + xb) / 2.0,
                    mt + ph - 6.0,
                    esc(label)
                );
            }
        }
        // Bands first, lines over them, dots on top.
        for l in &self.lines {
            let band: Vec<&(f64, f64, f64)> =
                l.band.iter().filter(|(x, lo, hi)| finite(*x, *lo) && hi.is_finite()).collect();
            if band.len() >= 2 {
                let c = COLORS[l.color % COLORS.len()];
                let mut d: Vec<String> =
                    band.iter().map(|(x, _, hi)| format!("{:.1},{:.1}", px(*x), py(*hi))).collect();
                d.extend(band.iter().rev().map(|(x, lo, _)| format!("{:.1},{:.1}", px(*x), py(*lo))));
                s += &format!(
                    "<polygon class=\"band\" points=\"{}\" fill=\"{c}\" fill-opacity=\"0.18\" stroke=\"none\"/>\n",
                    d.join(" ")
                );
            }
        }
        for l in self.lines.iter().filter(|l| !l.dots) {
            let c = COLORS[l.color % COLORS.len()];
            let pts: Vec<String> = l
                .points
                .iter()
                .filter(|(x, y)| finite(*x, *y))
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            if !pts.is_empty() {
                s += &format!(
                    "<polyline class=\"line\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\" points=\"{}\"/>\n",
                    pts.join(" ")
                );
            }
        }
        for l in self.lines.iter().filter(|l| l.dots) {
            let c = COLORS[l.color % COLORS.len()];
            for (x, y) in l.points.iter().filter(|(x, y)| finite(*x, *y)) {
                s += &format!(
                    "<circle class=\"measured\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"4.5\" fill=\"white\" stroke=\"{c}\" stroke-width=\"2\"/>\n",
                    px(*x),
                    py(*y)
                );
            }
        }
        if let Some((y, label)) = &self.hline {
            let yy = py(*y);
            s += &format!(
                "<line x1=\"{ml}\" x2=\"{:.1}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"#b22\" stroke-dasharray=\"6 4\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#b22\">{}</text>\n",
                ml + pw,
                ml + pw - 4.0,
                yy - 4.0,
                esc(label)
            );
        }
        if let Some((x, label)) = &self.vline {
            if finite(*x, 0.0) {
                let xx = px(*x);
                // The label on the side of the line with room for it.
                let (tx, anchor) = if xx > ml + pw * 0.6 { (xx - 4.0, "end") } else { (xx + 4.0, "start") };
                s += &format!(
                    "<line x1=\"{xx:.1}\" x2=\"{xx:.1}\" y1=\"{mt}\" y2=\"{:.1}\" stroke=\"#2a2\" stroke-dasharray=\"3 3\"/><text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"{anchor}\" fill=\"#2a2\">{}</text>\n",
                    mt + ph,
                    mt + 14.0,
                    esc(label)
                );
            }
        }
        // Legend below the plot, left to right in rows.
        let legend_top = mt + ph + 58.0;
        for (l, &(lx, row)) in self.lines.iter().zip(&legend) {
            let ly = legend_top + 16.0 * row as f64;
            let c = COLORS[l.color % COLORS.len()];
            let key = if l.dots {
                format!(
                    "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"4\" fill=\"white\" stroke=\"{c}\" stroke-width=\"2\"/>",
                    lx + 6.0,
                    ly - 4.0
                )
            } else {
                format!("<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"14\" height=\"3\" fill=\"{c}\"/>", ly - 5.5)
            };
            s += &format!("{key}<text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>\n", lx + 18.0, esc(&l.label));
        }
        s += "</svg>\n";
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round() {
        assert_eq!(nice_ticks(0.0, 9.3, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(nice_ticks(0.0, 0.37, 5), vec![0.0, 0.1, 0.2, 0.3, 0.4]);
        assert_eq!(nice_ticks(0.0, 3700.0, 5), vec![0.0, 1000.0, 2000.0, 3000.0, 4000.0]);
        assert_eq!(log2_ticks(1.0, 128.0), vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]);
        assert_eq!(tick_label(16384.0), "16,384");
        assert_eq!(tick_label(0.25), "0.25");
    }
}
