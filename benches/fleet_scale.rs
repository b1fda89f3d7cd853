//! Fleet sizing at scale (issue 14): the fewest replicas for 10,000 requests/s of 2,048 in / 440 out
//! at P95 TTFT <= 2 s on the default profile, about 1,000 replicas, each candidate fleet simulated
//! jointly for eight running batches per replica (3.6 million requests). Prints the answer, the
//! candidates, the run length, the wall time and the peak resident memory. Target: under a minute.
//!
//! Run: cargo bench --bench fleet_scale   (CAPSIM_BENCH_RATE=R to change the rate)

use capsim::capacity::{size_fleet, FleetQuestion, Question, Routing, Slo};
use capsim::catalog::Catalog;
use capsim::profile::Profile;
use capsim::workload::{LoadAxis, LoadTemplate};
use std::time::Instant;

mod common;
use common::{peak_rss_mb, record};

fn main() {
    let rate: f64 = std::env::var("CAPSIM_BENCH_RATE").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000.0);
    let p = Profile::load(None, &Catalog::builtin()).expect("default profile");
    let q = Question {
        axis: LoadAxis::Rate,
        template: LoadTemplate::fixed(2048, 440),
        slos: vec![Slo::parse("ttft_p95_s=2.0").expect("slo")],
        max_load: rate,
        seeds: 1,
        seed: 0,
        rate_rel_tol: 0.02,
    };
    let fq = FleetQuestion { rate, routing: Routing::RoundRobin, max_replicas: 4000, requests_per_replica: None };
    let start = Instant::now();
    let a = size_fleet(&p, &q, &fq, &|| {}).expect("fleet search");
    let secs = start.elapsed().as_secs_f64();
    let k = a.replicas.expect("an answer");
    let at = a.candidates.iter().find(|c| c.replicas == k).expect("tried");
    println!(
        "fleet for {rate} requests/s (2048 in / 440 out, P95 TTFT <= 2 s, {}): {k} replicas; one replica serves {:.2} requests/s",
        p.name(),
        a.single_replica_rate
    );
    println!(
        "candidates: {}",
        a.candidates
            .iter()
            .map(|c| format!("{}{}", c.replicas, if c.meets_slo { "+" } else { "-" }))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "run per candidate: {} requests per replica, {} requests over {:.0} simulated s at the answer",
        a.requests_per_replica.unwrap_or(0),
        at.run_requests,
        at.run_s
    );
    println!("wall {secs:.1} s on {} threads, peak RSS {:.0} MB", rayon::current_num_threads(), peak_rss_mb());
    record(
        "fleet_scale",
        "rate,replicas,candidates,requests_per_candidate,wall_s,threads,peak_rss_mb",
        &format!(
            "{rate},{k},{},{},{secs:.1},{},{:.0}",
            a.candidates.len(),
            at.run_requests,
            rayon::current_num_threads(),
            peak_rss_mb()
        ),
    );
}
