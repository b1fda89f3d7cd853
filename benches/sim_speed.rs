//! Simulator speed, with issue 13's targets: 1,000,000 requests of 1024 in / 256 out on the default
//! profile, single-threaded, (a) closed loop with 64 clients, (b) Poisson at 90% of the profile's
//! capacity, each in <= 0.5 s with peak resident memory <= 200 MB; then the two commands whose
//! speed users wait on, timed as users run them: `capsim calibrate` of the four reports with the
//! default budget (<= 30 s) and `capsim validate --protocol all` (<= 60 s). Prints every figure with
//! its target and appends them with the commit to benches/results/sim_speed.csv.
//!
//! Run: cargo bench --bench sim_speed   (CAPSIM_BENCH_REQUESTS=N to change the count;
//! CAPSIM_BENCH_SIM_ONLY=1 to skip the two commands)

use capsim::catalog::Catalog;
use capsim::metrics::{summarize, RequestSlo};
use capsim::profile::Profile;
use capsim::sim::{simulate, SimOptions};
use capsim::workload::{LoadAxis, LoadTemplate};
use std::time::Instant;

mod common;
use common::{peak_rss_mb, record};

fn main() {
    let n: u64 = std::env::var("CAPSIM_BENCH_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let p = Profile::load(None, &Catalog::builtin()).expect("default profile");
    // The profile's capacity for this request shape: saturated closed-loop throughput (1024 clients).
    let mut t = LoadTemplate::fixed(1024, 256);
    t.requests = Some(20_000);
    let sat = simulate(&p, &t.at(LoadAxis::Concurrency, 1024.0).unwrap(), 1, SimOptions::default());
    let cap = summarize(&sat, 2000, 2000, 0.0, &RequestSlo::default()).request_throughput_per_s;
    println!("profile {}: capacity at 1024/256 = {cap:.1} requests/s (closed loop, 1024 clients)", p.name());
    t.requests = Some(n);
    for (label, axis, load) in [
        ("closed loop, 64 clients", LoadAxis::Concurrency, 64.0),
        ("Poisson at 90% of capacity", LoadAxis::Rate, 0.9 * cap),
    ] {
        let w = t.at(axis, load).unwrap();
        let start = Instant::now();
        let out = simulate(&p, &w, 7, SimOptions::default());
        let secs = start.elapsed().as_secs_f64();
        let s = summarize(&out, 0, 0, 0.0, &RequestSlo::default());
        println!(
            "{label}: {} requests in {secs:.3} s wall = {:.0} requests/s, {} steps = {:.0} steps/s; simulated {:.0} s, mean TTFT {:.3} s, peak RSS {:.0} MB",
            s.requests_completed,
            s.requests_completed as f64 / secs,
            out.steps,
            out.steps as f64 / secs,
            s.sim_time_s,
            s.ttft_s.mean,
            peak_rss_mb()
        );
        if n == 1_000_000 {
            println!("  target: <= 0.5 s and <= 200 MB: {}", verdict(secs <= 0.5 && peak_rss_mb() <= 200.0));
        }
        record(
            "sim_speed",
            "workload,requests,wall_s,requests_per_s,steps,steps_per_s,peak_rss_mb",
            &format!(
                "{},{},{secs:.3},{:.0},{},{:.0},{:.0}",
                label.replace(',', ";"),
                s.requests_completed,
                s.requests_completed as f64 / secs,
                out.steps,
                out.steps as f64 / secs,
                peak_rss_mb()
            ),
        );
    }
    if std::env::var_os("CAPSIM_BENCH_SIM_ONLY").is_some() {
        return;
    }
    let scratch = std::env::temp_dir().join(format!("capsim-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).expect("scratch folder");
    for (label, args, target_s) in [
        ("capsim calibrate (4 reports; default budget)", &["calibrate", "--out", "models"][..], 30.0),
        ("capsim validate --protocol all", &["validate", "--protocol", "all", "--json"][..], 60.0),
    ] {
        let start = Instant::now();
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_capsim"))
            .args(args)
            .current_dir(&scratch)
            .output()
            .expect("capsim runs");
        let secs = start.elapsed().as_secs_f64();
        assert!(o.status.success(), "{label}: {}", String::from_utf8_lossy(&o.stderr));
        println!("{label}: {secs:.1} s wall; target <= {target_s} s: {}", verdict(secs <= target_s));
        record(
            "sim_speed",
            "workload,requests,wall_s,requests_per_s,steps,steps_per_s,peak_rss_mb",
            &format!("{label},,{secs:.3},,,,"),
        );
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}
