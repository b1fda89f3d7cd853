//! Development aid: replay the disaggregated corpus experiments whose id contains a pattern, in
//! sample on the shipped learned model, and print each pool's settings and figures (busy share,
//! queue waits, mean step, KV use) beside the measurement: where a TTFT error comes from (a pool
//! at its capacity, a decode too fast or too slow for the closed loop's cycle).
//! `cargo run --release --example pd_probe -- PATTERN [PREFILL_SCALE DECODE_SCALE]`: the scales
//! multiply each pool's step times (Profile::steps_scaled), to see what a pool's speed does to TTFT.

use capsim::calibrate::corpus::disaggregated;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let pat = args.get(1).cloned().unwrap_or_default();
    let scale = |i: usize| -> Result<f64, String> {
        args.get(i).map_or(Ok(1.0), |x| x.parse::<f64>().map_err(|e| format!("scale {x:?}: {e}")))
    };
    let (fp, fd) = (scale(2)?, scale(3)?);
    let catalog = capsim::catalog::Catalog::builtin();
    let model = catalog.learned.clone().ok_or("no learned model")?;
    let ex = capsim::corpus::load(&catalog, None)?;
    let matched: Vec<_> = ex.experiments.iter().filter(|e| e.pd.is_some() && e.point.id.contains(&pat)).collect();
    if matched.is_empty() {
        return Err(format!("no disaggregated corpus experiment's id contains {pat:?}").into());
    }
    for e in matched {
        let Some(x) = &e.pd else { continue };
        let mut d = disaggregated(&catalog, &model, e, x, true)?;
        d.prefill = d.prefill.steps_scaled(fp);
        d.decode = d.decode.steps_scaled(fd);
        let p = &e.points[0];
        let w = capsim::experiment::workload_for(p, &Default::default()).ok_or("no workload")?;
        let opts = capsim::sim::SimOptions {
            horizon_s: 1e6,
            series_points: 2,
            step_by_step: false,
            until_first_tokens: false,
        };
        let out = capsim::sim::simulate_disaggregated(&d, &w, 1, opts);
        let s = capsim::metrics::summarize(&out, 0, 0, 0.0, &Default::default());
        println!("== {}", e.point.id);
        for (n, pr, k) in [("prefill", &d.prefill, d.prefill_workers), ("decode", &d.decode, d.decode_workers)] {
            let en = &pr.engine;
            println!(
                "  {n}: {k} x tp{} {:?} seqs {} batched {} prefill_tokens {} kv_tokens {} stream {}",
                pr.tensor_parallel,
                pr.parallel,
                en.max_num_seqs,
                en.max_num_batched_tokens,
                en.max_prefill_tokens,
                en.kv_capacity_tokens,
                en.stream_interval
            );
        }
        let Some(r) = out.disagg.as_ref() else { continue };
        let med = |v: &[f64]| {
            let mut v = v.to_vec();
            v.sort_by(f64::total_cmp);
            if v.is_empty() {
                0.0
            } else {
                v[v.len() / 2]
            }
        };
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let end = r.end_ns as f64;
        println!(
            "  prefill busy {:.2} max_wait {} qwait med {:.3} mean {:.3} | decode busy {:.2} max_wait {} qwait med {:.3} mean {:.3} kv {:.2}/{:.2} preempt {} | kvx med {:.4}",
            r.prefill.busy_ns as f64 / end / r.prefill.workers as f64,
            r.prefill.max_waiting,
            med(&r.prefill.queue_wait_s),
            mean(&r.prefill.queue_wait_s),
            r.decode.busy_ns as f64 / end / r.decode.workers as f64,
            r.decode.max_waiting,
            med(&r.decode.queue_wait_s),
            mean(&r.decode.queue_wait_s),
            r.decode.kv_util_mean,
            r.decode.kv_util_max,
            r.decode.preemptions,
            med(&r.kv_transfer_s)
        );
        println!(
            "  prefill steps {} mean step {:.1} ms, prefill tokens/step {:.0}; decode steps {} mean step {:.2} ms",
            r.prefill.steps,
            r.prefill.busy_ns as f64 / r.prefill.steps.max(1) as f64 * 1e-6,
            s.requests_completed as f64 * w_mean_in(&out) / r.prefill.steps.max(1) as f64,
            r.decode.steps,
            r.decode.busy_ns as f64 / r.decode.steps.max(1) as f64 * 1e-6
        );
        println!(
            "  requests {} sim {:.0}s  TTFT mean {:.3} p50 {:.3} p99 {:.3}  TPOT mean {:.2} ms | measured TTFT {:?} TPOT {:?}",
            s.requests_completed, s.sim_time_s, s.ttft_s.mean, s.ttft_s.p50, s.ttft_s.p99, s.tpot_ms.mean, e.point.ttft_ms, e.point.tpot_ms
        );
    }
    Ok(())
}

fn w_mean_in(out: &capsim::sim::SimOutput) -> f64 {
    out.records.iter().map(|r| r.input_tokens as f64).sum::<f64>() / out.records.len().max(1) as f64
}
