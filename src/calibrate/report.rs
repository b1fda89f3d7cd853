//! The fit report as text: what the calibration assumed, identified and left to priors, its
//! coefficients with their uncertainty, and every point's residual. Formatting only; the numbers come
//! from [`FitReport`].

use super::FitReport;

/// The fit report as text (printed and saved next to the profile).
pub fn report_text(r: &FitReport) -> String {
    use crate::report::{num, table};
    let mut s = format!("# fit report: {}\nsource report: {}\n\n", r.profile_name, r.source_report);
    for a in &r.assumptions {
        s += &format!("assumption: {a}\n");
    }
    for a in &r.stage_a {
        s += &format!("stage (a): {a}\n");
    }
    for u in &r.unidentifiable {
        s += &format!("unidentifiable: {u}\n");
    }
    let c = &r.coefficients;
    let sg = &r.sigmas;
    s += "\ncoefficient                  value        rel. sigma\n";
    for (n, v, e) in [
        ("step_overhead_s", c.step_overhead_s, sg.step_overhead_s),
        ("per_seq_overhead_s", c.per_seq_overhead_s, sg.per_seq_overhead_s),
        ("bandwidth_eff_bytes_s", c.bandwidth_eff_bytes_s, sg.bandwidth_eff_bytes_s),
        ("matmul_flops_eff_s", c.matmul_flops_eff_s, sg.matmul_flops_eff_s),
        ("attention_flops_eff_s", c.attention_flops_eff_s, sg.attention_flops_eff_s),
        ("request_overhead_s", c.request_overhead_s, sg.request_overhead_s),
        ("mem_compute_overlap", c.mem_compute_overlap, sg.mem_compute_overlap),
        ("expert_spread", c.expert_spread, sg.expert_spread),
        ("frontend_serial_s", c.frontend_serial_s, sg.frontend_serial_s),
    ] {
        s += &format!("{n:<28} {v:<12.4e} {:.1}%\n", e * 100.0);
    }
    s += &format!(
        "experiment unknowns: {:.2} requests/client (closed loop), {:.2} (unknown load); KV memory fraction {:.3}\n",
        r.unknowns.rounds_closed, r.unknowns.rounds_unknown, r.gpu_memory_utilization
    );
    s += &format!(
        "\nranges seen: context {}..{} tokens, concurrency {}..{}\n",
        r.context_tokens_range[0], r.context_tokens_range[1], r.concurrency_range[0], r.concurrency_range[1]
    );
    s += &format!(
        "optimizer: {} after {} evaluations (objective {:.4})\n",
        r.stop_reason.describe(),
        r.evaluations,
        r.objective
    );
    s += &format!(
        "physics: {}\n",
        if r.physics_ok { "all coefficients within the GPU's limits".to_string() } else { r.physics.join("; ") }
    );
    s += &format!(
        "fit: median |error| {:.1}%, p90 {:.1}% over {} points\n\n",
        r.median_abs_error_pct,
        r.p90_abs_error_pct,
        r.rows.len()
    );
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|x| {
            vec![
                x.line.to_string(),
                x.scenario.clone(),
                x.load.clone(),
                // A rate run has no concurrency: its load column says its rate.
                if x.load.starts_with("rate ") { "-".into() } else { x.concurrency.to_string() },
                x.metric.clone(),
                crate::metrics::stat_name(x.stat).to_string(),
                num(x.measured, 4),
                num(x.fitted, 4),
                format!("{:+.1}%", x.residual_pct),
            ]
        })
        .collect();
    s += &table(&["line", "scenario", "load", "conc", "metric", "stat", "measured", "fitted", "residual"], &rows);
    s += &format!("\nleft out as flagged ({}):\n", r.excluded.len());
    for (line, why) in &r.excluded {
        s += &format!("  line {line}: {why}\n");
    }
    s += &format!("not fitted ({} points): capacity figures (replayed by `capsim validate`), power, success rates, request counts\n", r.not_replayed);
    if !r.not_comparable.is_empty() {
        s += &format!("not compared ({}):\n", r.not_comparable.len());
        for why in &r.not_comparable {
            s += &format!("  {why}\n");
        }
    }
    s
}
