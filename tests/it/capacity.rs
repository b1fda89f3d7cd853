use super::{const_profile, default_profile};
use capsim::capacity::{capacity, evaluate, search, Question, Slo, Verdict};
use capsim::workload::{LoadAxis, LoadTemplate};

fn question(axis: LoadAxis, t: LoadTemplate, slos: &[&str], max_load: f64) -> Question {
    Question {
        axis,
        template: t,
        slos: slos.iter().map(|s| Slo::parse(s).unwrap()).collect(),
        max_load,
        seeds: 1,
        seed: 0,
        rate_rel_tol: 0.01,
    }
}

#[test]
fn max_safe_queue_depth_by_hand() {
    // One request at a time, one 10 ms step each: request i of a burst gets its token at i x 10 ms, so
    // mean TTFT = (N + 1) / 2 x 10 ms; mean <= 100 ms holds up to N = 19.
    let p = const_profile("vllm", 0.010, "max_num_seqs = 1");
    let q = question(LoadAxis::Burst, LoadTemplate::fixed(1, 1), &["ttft_mean_s=0.1"], 1000.0);
    let (cap, verdict, points) = search(&p, &q, &|| {}).unwrap();
    assert_eq!((cap, verdict), (19.0, Verdict::Found));
    assert!(points.iter().any(|t| t.load == 20.0 && !t.meets_slo));
    // p99 instead of the mean: TTFT of the 99th percentile request ~ N x 10 ms <= 100 ms gives about 10.
    let q = question(LoadAxis::Burst, LoadTemplate::fixed(1, 1), &["ttft_p99_s=0.1"], 1000.0);
    assert_eq!(search(&p, &q, &|| {}).unwrap().0, 10.0);
}

#[test]
fn max_rate_by_hand_md1() {
    // M/D/1 with D = 10 ms: mean wait rho D / (2 (1 - rho)) <= D holds up to rho = 2/3, 66.7 requests/s.
    let p = const_profile("vllm", 0.010, "max_num_seqs = 1");
    let mut t = LoadTemplate::fixed(1, 1);
    t.requests = Some(40_000);
    t.warmup_requests = 500;
    let mut q = question(LoadAxis::Rate, t, &["queue_wait_mean_s=0.010"], 100.0);
    q.seeds = 2;
    let (cap, verdict, _) = search(&p, &q, &|| {}).unwrap();
    assert_eq!(verdict, Verdict::Found);
    assert!((cap - 66.7).abs() / 66.7 < 0.05, "{cap}");
    // Far above the service rate the verdict is overloaded.
    let over = evaluate(&p, &q, 150.0).unwrap();
    assert_eq!(over.stability, Some(capsim::capacity::Stability::Overloaded));
    assert!(!over.meets_slo);
}

#[test]
fn no_load_and_search_limit_verdicts() {
    let p = const_profile("vllm", 0.010, "max_num_seqs = 1");
    let q = question(LoadAxis::Burst, LoadTemplate::fixed(1, 1), &["ttft_mean_s=0.005"], 100.0);
    assert_eq!(search(&p, &q, &|| {}).unwrap().1, Verdict::NoLoadMeetsSlo);
    let q = question(LoadAxis::Burst, LoadTemplate::fixed(1, 1), &["ttft_mean_s=100"], 64.0);
    // Deterministic (compared as text: statistics of one-token outputs are NaN, no ITL to measure).
    assert_eq!(format!("{:?}", search(&p, &q, &|| {}).unwrap()), format!("{:?}", search(&p, &q, &|| {}).unwrap()));
    let (cap, v, _) = search(&p, &q, &|| {}).unwrap();
    assert_eq!((cap, v), (64.0, Verdict::AtSearchLimit));
}

#[test]
fn a_looser_slo_never_gives_a_lower_capacity() {
    let p = default_profile();
    let mut last = 0.0;
    for limit in [0.5, 1.0, 2.0, 4.0, 8.0] {
        let q = question(LoadAxis::Burst, LoadTemplate::fixed(4096, 128), &[&format!("ttft_mean_s={limit}")], 2048.0);
        let (cap, _, _) = search(&p, &q, &|| {}).unwrap();
        assert!(cap >= last, "limit {limit}: {cap} < {last}");
        last = cap;
    }
    let mut last = f64::INFINITY;
    for min in [5.0, 20.0, 40.0, 80.0] {
        let q = question(
            LoadAxis::Concurrency,
            LoadTemplate::fixed(2048, 256),
            &[&format!("per_user_tok_s_mean={min}")],
            512.0,
        );
        let (cap, _, _) = search(&p, &q, &|| {}).unwrap();
        assert!(cap <= last, "min speed {min}: {cap} > {last}");
        last = cap;
    }
}

#[test]
fn capacity_is_deterministic_at_any_thread_count_and_has_a_band() {
    let p = default_profile();
    let mut t = LoadTemplate::fixed(2048, 256);
    t.requests = Some(400);
    let mut q = question(LoadAxis::Rate, t, &["ttft_p95_s=2.0"], 100.0);
    q.seeds = 2;
    let run = |threads| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap()
            .install(|| serde_json::to_string(&capacity(&p, &q, &|| {}).unwrap()).unwrap())
    };
    assert_eq!(run(1), run(4));
    let c = capacity(&p, &q, &|| {}).unwrap();
    assert!(c.band.0 <= c.capacity && c.capacity <= c.band.1, "{:?}", c.band);
}

#[test]
fn slo_names_parse_and_bad_ones_are_refused() {
    let s = Slo::parse("ttft_p99_s=2.5").unwrap();
    assert_eq!((s.name(), s.limit), ("ttft_p99_s".to_string(), 2.5));
    assert!(Slo::parse("per_user_tok_s_mean=15").unwrap().is_lower_bound());
    for bad in ["ttft_s=3", "ttft_p42_s=1", "latency_mean_s=1", "ttft_mean_s=-1", "ttft_mean_s=nan", "ttft_mean_s"] {
        let e = Slo::parse(bad).unwrap_err().to_string();
        assert!(e.contains("--slo"), "{bad}: {e}");
    }
}

#[test]
fn fleet_of_one_is_the_single_engine_and_routing_is_simulated() {
    use capsim::sim::{simulate, simulate_fleet, Routing, SimOptions};
    use capsim::workload::LengthDist;
    let p = default_profile();
    let mut t = LoadTemplate::fixed(1, 1);
    t.classes[0].input = LengthDist::Lognormal { mean: 3000.0, sd: 3000.0 };
    t.classes[0].output = LengthDist::Lognormal { mean: 300.0, sd: 400.0 };
    t.requests = Some(3000);
    let w = t.at(LoadAxis::Rate, 24.0).unwrap();
    let single = simulate(&p, &w, 5, SimOptions::default());
    let fleet1 = simulate_fleet(&p, &w, 5, SimOptions::default(), 1, Routing::LeastOutstanding);
    assert_eq!(single.records, fleet1[0].records);
    // Four replicas: every request served exactly once, by one replica.
    for routing in [Routing::RoundRobin, Routing::LeastOutstanding] {
        let outs = simulate_fleet(&p, &w, 5, SimOptions::default(), 4, routing);
        let mut ids: Vec<u32> = outs.iter().flat_map(|o| o.records.iter().map(|r| r.id)).collect();
        ids.sort();
        assert_eq!(ids, (0..3000).collect::<Vec<u32>>(), "{routing:?}");
        assert!(outs.iter().all(|o| !o.records.is_empty()));
    }
    // Round-robin puts request i on replica i mod 4.
    let rr = simulate_fleet(&p, &w, 5, SimOptions::default(), 4, Routing::RoundRobin);
    assert!(rr.iter().enumerate().all(|(k, o)| o.records.iter().all(|r| r.id as usize % 4 == k)));
    // With uneven request sizes, least-outstanding routing does not queue worse than round-robin.
    let mean_wait = |outs: &Vec<capsim::sim::SimOutput>| {
        let all: Vec<f64> = outs.iter().flat_map(|o| o.records.iter().map(|r| r.queue_wait_s())).collect();
        all.iter().sum::<f64>() / all.len() as f64
    };
    let lor = simulate_fleet(&p, &w, 5, SimOptions::default(), 4, Routing::LeastOutstanding);
    assert!(mean_wait(&lor) <= mean_wait(&rr) * 1.05, "LOR {} vs RR {}", mean_wait(&lor), mean_wait(&rr));
}

/// Issue 16: the capacity search on a metric that is not monotone in the load. With this profile the
/// closed-loop mean TTFT at 1024/256 rises to 0.136 s at 64-68 clients, falls to 0.126 s at 76-80
/// and rises again. Whatever the SLO, every load the search tried up to the capacity meets it (the
/// capacity stops below the lowest failure), and loads that meet it again above a failure are
/// reported.
#[test]
fn capacity_on_a_non_monotone_metric_stops_below_the_lowest_failure() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/profiles/phase_lock_h100_pcie.toml");
    let p = capsim::profile::Profile::load(Some(path), &capsim::catalog::Catalog::builtin()).unwrap();
    for slo in ["ttft_mean_s=0.125", "ttft_mean_s=0.13", "ttft_mean_s=0.137"] {
        let q = question(LoadAxis::Concurrency, LoadTemplate::fixed(1024, 256), &[slo], 128.0);
        let (cap, _, tried) = search(&p, &q, &|| {}).unwrap();
        assert!(cap > 0.0);
        let lowest_fail = tried.iter().filter(|t| !t.meets_slo).map(|t| t.load).fold(f64::INFINITY, f64::min);
        assert!(cap < lowest_fail, "{slo}: capacity {cap} at or above a failing load {lowest_fail}");
        assert!(tried.iter().filter(|t| t.load <= cap).all(|t| t.meets_slo), "{slo}");
        let above: Vec<f64> = capsim::capacity::non_monotone_loads(&tried);
        assert!(above.iter().all(|&l| l > lowest_fail));
    }
}

/// `size_mixed` with `top_first`: where even the most replicas of the new type miss the SLO, one
/// simulation (at that most) decides it; without, the gallop tries 0, 1, 2, 4, ... up to it. Where a
/// count passes, both give the same fewest replicas.
#[test]
fn size_mixed_top_first_decides_an_unattainable_slo_in_one_simulation() {
    use capsim::plan::mixed::{size_mixed, NewCounts};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let p = const_profile("vllm", 0.010, "max_num_seqs = 4");
    let mut t = LoadTemplate::fixed(1, 4);
    t.requests = Some(200);
    // A lone request takes 4 steps of 10 ms: no fleet has a mean E2E of 1 ms.
    let never = question(LoadAxis::Rate, t.clone(), &["e2e_mean_s=0.001"], 1000.0);
    let sims = AtomicUsize::new(0);
    let tick = || {
        sims.fetch_add(1, Ordering::Relaxed);
    };
    let a = size_mixed(&[(&p, 1)], &p, &never, 50.0, Some(50), NewCounts { max: 16, top_first: true }, &tick).unwrap();
    assert_eq!((a.new_replicas, sims.swap(0, Ordering::Relaxed)), (None, 1));
    let b = size_mixed(&[(&p, 1)], &p, &never, 50.0, Some(50), NewCounts::up_to(16), &tick).unwrap();
    assert_eq!((b.new_replicas, sims.swap(0, Ordering::Relaxed)), (None, 6));
    // A reachable SLO: the same answer either way.
    let reachable = question(LoadAxis::Rate, t, &["e2e_mean_s=0.2"], 1000.0);
    let x =
        size_mixed(&[(&p, 1)], &p, &reachable, 300.0, Some(50), NewCounts { max: 16, top_first: true }, &tick).unwrap();
    let y = size_mixed(&[(&p, 1)], &p, &reachable, 300.0, Some(50), NewCounts::up_to(16), &tick).unwrap();
    assert!(x.new_replicas.is_some_and(|n| n > 0), "{:?}", x.new_replicas);
    assert_eq!(x.new_replicas, y.new_replicas);
}
