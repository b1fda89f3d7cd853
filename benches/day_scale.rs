//! A day of traffic on an autoscaled fleet (issue 26): a daily curve whose mean is 1,000 requests/s
//! (86.4 million requests over 86,400 simulated s; examples/day.toml's hourly shape, so the peak is
//! about 1,750 requests/s), 2,048 tokens in and 256 out, on the default profile, scaled by an
//! HPA-like policy on 20 outstanding requests per replica (1 to 1,000 replicas, 90 s start-up).
//! Prints the requests, the most replicas held, GPU-hours, the SLO share, the wall time and the peak
//! resident memory. Target: under 60 s and 2 GB on 2 cores, memory flat in the request count.
//!
//! Run: cargo bench --bench day_scale   (CAPSIM_BENCH_RATE=R for another mean rate,
//! CAPSIM_BENCH_HOURS=H to simulate only the first H hours)

use capsim::autoscale::AutoscalePolicy;
use capsim::catalog::Catalog;
use capsim::metrics::RequestSlo;
use capsim::profile::Profile;
use capsim::sim::{simulate_autoscaled, SimOptions};
use capsim::workload::{Arrivals, Process, RateSchedule, Workload};
use std::time::Instant;

mod common;
use common::{peak_rss_mb, record};

/// examples/day.toml's hourly multiples of the peak.
const HOURLY: [f64; 24] = [
    0.25, 0.2, 0.15, 0.15, 0.15, 0.2, 0.3, 0.45, 0.6, 0.75, 0.85, 0.9, 0.9, 0.95, 1.0, 1.0, 0.95, 0.85, 0.75, 0.65,
    0.55, 0.45, 0.35, 0.3,
];

const POLICY: &str = "min_replicas = 1
max_replicas = 1000
initial_replicas = 40
metric = \"outstanding\"
target = 20.0
provisioning_s = 60.0
storage_gb_s = 2.0
engine_start_s = 20.0
cuda_graph_capture_s = 10.0
price_per_gpu_hour = 3.0
";

fn main() {
    let env = |k: &str, d: f64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(d);
    let mean_rate = env("CAPSIM_BENCH_RATE", 1000.0);
    let hours = env("CAPSIM_BENCH_HOURS", 24.0);
    let p = Profile::load(None, &Catalog::builtin()).expect("default profile");
    let peak = mean_rate * 24.0 / HOURLY.iter().sum::<f64>();
    let rate = RateSchedule::daily(peak, &HOURLY, 86_400.0);
    // A request count is required to build it; the duration then bounds the sends instead.
    let mut w =
        Workload::fixed(Arrivals::OpenLoop { process: Process::Poisson, rate, burstiness: 1.0 }, 2048, 256, Some(1))
            .expect("workload");
    w.spec.requests = None;
    w.spec.duration_s = Some(hours * 3600.0);
    let w = w.spec.validate().expect("workload with a duration");
    let policy = AutoscalePolicy::parse("bench policy", POLICY).expect("policy");
    let slo = RequestSlo { ttft_s_max: Some(2.0), itl_ms_max: Some(100.0), e2e_s_max: None };
    let start = Instant::now();
    let opts = SimOptions { horizon_s: hours * 3600.0 + 3600.0, ..Default::default() };
    let out = simulate_autoscaled(&p, &w, 0, opts, &policy, &slo);
    let secs = start.elapsed().as_secs_f64();
    let met: u64 = out.buckets.iter().map(|b| b.slo_met).sum();
    let gpu_hours = out.replica_seconds * p.tensor_parallel as f64 / 3600.0;
    println!(
        "{hours} h at a mean {mean_rate} requests/s (peak {peak:.0}), 2048 in / 256 out, {}: {} requests sent, {} completed, {} rejected, {} unfinished",
        p.name(),
        out.requests_sent,
        out.requests_completed,
        out.requests_rejected,
        out.requests_unfinished
    );
    println!(
        "replicas: at most {}, {} scale-ups, {} scale-downs; {gpu_hours:.0} GPU-hours; SLO (TTFT <= 2 s, TPOT <= 100 ms) met by {:.2}%",
        out.replicas_max,
        out.scale_ups,
        out.scale_downs,
        100.0 * met as f64 / out.requests_completed.max(1) as f64
    );
    println!("wall {secs:.1} s on {} threads, peak RSS {:.0} MB", rayon::current_num_threads(), peak_rss_mb());
    record(
        "day_scale",
        "mean_rate,hours,requests,replicas_max,wall_s,threads,peak_rss_mb",
        &format!(
            "{mean_rate},{hours},{},{},{secs:.1},{},{:.0}",
            out.requests_sent,
            out.replicas_max,
            rayon::current_num_threads(),
            peak_rss_mb()
        ),
    );
}
