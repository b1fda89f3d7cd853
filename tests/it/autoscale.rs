//! Issue 26, autoscaling: a step in the rate curve, the policy's reaction, the start-up delay, the
//! queue meanwhile, and the policy file's refusals.

use crate::const_profile;
use capsim::autoscale::AutoscalePolicy;
use capsim::metrics::RequestSlo;
use capsim::sim::{simulate_autoscaled, SimOptions};
use capsim::workload::{Arrivals, Process, RateSchedule, Workload};

fn policy(extra: &str) -> AutoscalePolicy {
    let text = format!(
        "min_replicas = 1\nmax_replicas = 6\nmetric = \"outstanding\"\ntarget = 10.0\ninterval_s = 10.0\nprovisioning_s = 25.0\nstorage_gb_s = 1e6\nengine_start_s = 0.0\ncuda_graph_capture_s = 0.0\nbucket_s = 5.0\n{extra}"
    );
    AutoscalePolicy::parse("policy.toml", &text).unwrap()
}

/// 1 request/s for 100 s, then 40/s, evenly spaced; 100 output tokens at 10 ms a step, at most 16
/// running per replica (16 requests/s each).
fn step_workload(requests: u64) -> Workload {
    let arrivals = Arrivals::OpenLoop {
        process: Process::Constant,
        rate: RateSchedule { segments: vec![(0.0, 1.0), (100.0, 40.0)] },
        burstiness: 1.0,
    };
    Workload::fixed(arrivals, 64, 100, Some(requests)).unwrap()
}

#[test]
fn a_rate_step_scales_up_after_exactly_the_start_up_delay_and_requests_queue_meanwhile() {
    let p = const_profile("vllm", 0.01, "max_num_seqs = 16");
    let w = step_workload(100 + 40 * 200);
    let pol = policy("");
    let out = simulate_autoscaled(&p, &w, 1, SimOptions::default(), &pol, &RequestSlo::default());
    // The delay is its parts: 25 s of provisioning, the weights over 1e6 GB/s, nothing else.
    let weights = p.arch.weight_bytes(p.file.model.weight_dtype);
    assert!((out.startup_delay_s - (25.0 + weights / 1e15)).abs() < 1e-12, "{}", out.startup_delay_s);
    // Before the step one replica holds about one request: no scaling.
    let first_up = out.timeline.iter().position(|s| s.desired > s.ready + s.starting).expect("a scale-up");
    let t_up = out.timeline[first_up].t_s;
    assert!((100.0..=110.0).contains(&t_up), "first scale-up decided at {t_up} s");
    assert!(out.timeline[..first_up].iter().all(|s| s.ready == 1 && s.starting == 0));
    // The replicas asked for at t_up serve from t_up + delay: still starting at the evaluations
    // before, ready at the first one after.
    let ready_at = t_up + out.startup_delay_s;
    for s in &out.timeline {
        if s.t_s > t_up && s.t_s < ready_at {
            assert_eq!(s.ready, 1, "at {} s", s.t_s);
            assert!(s.starting >= 1, "at {} s", s.t_s);
        }
    }
    let after = out.timeline.iter().find(|s| s.t_s > ready_at).expect("an evaluation after the delay");
    assert!(after.ready > 1, "{after:?}");
    // Meanwhile the one replica is over its 16 requests/s: the queue grows and TTFT with it, then
    // falls back once the new replicas serve.
    let ttft_p50 = |start: f64| {
        let b = out.buckets.iter().find(|b| (b.start_s - start).abs() < 1e-9).unwrap();
        b.ttft.percentile_s(50.0)
    };
    let before = ttft_p50(50.0);
    let during = ttft_p50(((ready_at / 5.0).floor() - 1.0) * 5.0);
    let late = ttft_p50(250.0);
    assert!(during > 20.0 * before, "TTFT before {before} s, while starting {during} s");
    assert!(late < 2.0 * before, "TTFT after the scale-up {late} s, before {before} s");
    assert_eq!(out.requests_completed, out.requests_sent);
}

#[test]
fn scale_down_waits_for_the_stabilization_window_and_replicas_drain() {
    let p = const_profile("vllm", 0.01, "max_num_seqs = 16");
    // 40/s for 100 s, then 1/s.
    let arrivals = Arrivals::OpenLoop {
        process: Process::Constant,
        rate: RateSchedule { segments: vec![(0.0, 40.0), (100.0, 1.0)] },
        burstiness: 1.0,
    };
    let w = Workload::fixed(arrivals, 64, 100, Some(4000 + 300)).unwrap();
    let pol = policy("initial_replicas = 4\nscale_down_stabilization_s = 60.0");
    let out = simulate_autoscaled(&p, &w, 1, SimOptions::default(), &pol, &RequestSlo::default());
    let first_down = out.timeline.iter().find(|s| s.desired < s.ready + s.starting).expect("a scale-down");
    // The load falls at 100 s; the window holds the higher recommendations for 60 s after it.
    assert!(first_down.t_s >= 160.0, "scaled down at {} s", first_down.t_s);
    assert!(out.scale_downs > 0);
    assert_eq!(out.requests_completed, out.requests_sent, "draining replicas finish their requests");
    let held: f64 = out.buckets.iter().map(|b| b.replica_seconds).sum();
    assert!((held - out.replica_seconds).abs() < 1e-6 * out.replica_seconds.max(1.0));
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let p = const_profile("vllm", 0.01, "max_num_seqs = 16");
    let w = step_workload(3000);
    let pol = policy("");
    let a = simulate_autoscaled(&p, &w, 7, SimOptions::default(), &pol, &RequestSlo::default());
    let b = simulate_autoscaled(&p, &w, 7, SimOptions::default(), &pol, &RequestSlo::default());
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
}

#[test]
fn bad_policies_name_the_key() {
    let base = "metric = \"outstanding\"\ntarget = 10.0\nprovisioning_s = 1.0\nstorage_gb_s = 1.0\nengine_start_s = 0.0\ncuda_graph_capture_s = 0.0\n";
    for (extra, key) in [
        ("min_replicas = 4\nmax_replicas = 2\n", "min_replicas"),
        ("min_replicas = 0\nmax_replicas = 2\n", "min_replicas"),
        ("min_replicas = 1\nmax_replicas = 2\ninitial_replicas = 3\n", "initial_replicas"),
        ("min_replicas = 1\nmax_replicas = 2\ninterval_s = -1.0\n", "interval_s"),
        ("min_replicas = 1\nmax_replicas = 2\nprice_per_gpu_hour = nan\n", "price_per_gpu_hour"),
        ("min_replicas = 1\nmax_replicas = 2\nbogus = 1\n", "bogus"),
        ("min_replicas = 1\nmax_replicas = 2\nrouter_refresh_s = 0.0\n", "router_refresh_s"),
        // Periods a simulated day steps through have floors: 1e-9 s exhausted memory, 1e-6 s hung.
        ("min_replicas = 1\nmax_replicas = 2\ninterval_s = 1e-9\n", "interval_s"),
        ("min_replicas = 1\nmax_replicas = 2\nbucket_s = 1e-6\n", "bucket_s"),
        ("min_replicas = 1\nmax_replicas = 2\nrouter_refresh_s = 1e-9\n", "router_refresh_s"),
    ] {
        let e = AutoscalePolicy::parse("p.toml", &format!("{extra}{base}")).unwrap_err().to_string();
        assert!(e.contains("p.toml") && e.contains(key), "{extra}: {e}");
    }
    let e = AutoscalePolicy::parse(
        "p.toml",
        &base.replace("target = 10.0", "target = -1.0").replace("metric", "min_replicas = 1\nmax_replicas = 2\nmetric"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("target"), "{e}");
}

#[test]
fn the_cli_refuses_a_closed_loop_and_a_bad_file_by_name() {
    let dir = crate::Scratch::new("it-autoscale");
    let good = dir.join("policy.toml");
    std::fs::write(&good, "min_replicas = 1\nmax_replicas = 2\nmetric = \"waiting\"\ntarget = 4.0\nprovisioning_s = 1.0\nstorage_gb_s = 1.0\nengine_start_s = 0.0\ncuda_graph_capture_s = 0.0\n").unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "min_replicas = 3\nmax_replicas = 2\nmetric = \"waiting\"\ntarget = 4.0\nprovisioning_s = 1.0\nstorage_gb_s = 1.0\nengine_start_s = 0.0\ncuda_graph_capture_s = 0.0\n").unwrap();
    let run = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).output().unwrap();
    let o = run(&["simulate", "--concurrency", "4", "--autoscale", good.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--concurrency"), "{}", String::from_utf8_lossy(&o.stderr));
    let o = run(&["simulate", "--rate", "2", "--requests", "50", "--autoscale", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("bad.toml") && e.contains("min_replicas"), "{e}");
    let o = run(&["simulate", "--rate", "2", "--requests", "50", "--autoscale", good.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["requests_sent"], 50);
    assert!(v["gpu_hours"].as_f64().unwrap() > 0.0 && v["buckets"].is_array() && v["timeline"].is_array());
}

/// Issue 26, mixed fleets: the weighted least-outstanding router keeps outstanding requests per unit
/// of speed equal across replicas. Saturated (requests queue at both), each replica then takes the
/// traffic it completes: shares in proportion to speed (2:1). Below saturation with steps of fixed
/// length, a request's latency is inversely proportional to speed too, so equal outstanding per
/// speed means traffic in proportion to speed squared (4:1; one fast against two slow, 4:1:1).
#[test]
fn a_mixed_fleet_sends_each_pool_its_share() {
    use capsim::sim::{replica_speed, simulate_mixed};
    let fast = const_profile("vllm", 0.005, "max_num_seqs = 64");
    let slow = const_profile("vllm", 0.010, "max_num_seqs = 64");
    assert!((replica_speed(&fast) / replica_speed(&slow) - 2.0).abs() < 1e-9);
    let share = |pools: &[(&capsim::profile::Profile, u32)], rate: f64| -> Vec<f64> {
        let arrivals =
            Arrivals::OpenLoop { process: Process::Constant, rate: RateSchedule::constant(rate), burstiness: 1.0 };
        let w = Workload::fixed(arrivals, 64, 100, Some(6000)).unwrap();
        let outs = simulate_mixed(pools, &w, 3, SimOptions::default());
        let n: Vec<f64> = outs.iter().map(|o| o.records.len() as f64).collect();
        let total: f64 = n.iter().sum();
        assert_eq!(total as u64, 6000, "every request served once");
        n.iter().map(|x| x / total).collect()
    };
    // Capacities: 64 sequences per 100 steps of 5 ms (128 requests/s) and of 10 ms (64/s).
    let s = share(&[(&fast, 1), (&slow, 1)], 400.0);
    assert!((s[0] - 2.0 / 3.0).abs() < 0.03, "saturated: fast pool's share {s:?}");
    let s = share(&[(&fast, 1), (&slow, 1)], 60.0);
    assert!((s[0] - 0.8).abs() < 0.03, "below saturation: fast pool's share {s:?}");
    let s = share(&[(&fast, 1), (&slow, 2)], 60.0);
    assert!((s[0] - 2.0 / 3.0).abs() < 0.03, "one fast against two slow {s:?}");
}

#[test]
fn the_cli_runs_a_mixed_fleet_and_refuses_bad_pools_by_flag() {
    let run = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).output().unwrap();
    let o = run(&[
        "simulate",
        "--model",
        "Llama-3.1-8B-Instruct",
        "--pool",
        "B200",
        "--pool",
        "H100 SXM:replicas=2",
        "--rate",
        "10",
        "--requests",
        "400",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pools = v["pools"].as_array().unwrap();
    assert_eq!(pools.len(), 2);
    let shares: f64 = pools.iter().map(|p| p["requests_share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 1e-9);
    assert_eq!(v["fleet"]["requests_sent"], 400);
    // A pool's GPU or TP that does not resolve is the pool's error, named by --pool and the entry
    // (no --gpu or --tp was given), as is a malformed entry.
    for bad in ["B200:replicas=0", "B200:tp=x", "B200:colour=red", ":replicas=2", "B200:tp=3", "Nope:replicas=2"] {
        let o = run(&["simulate", "--pool", bad, "--pool", "H200 SXM", "--rate", "2", "--requests", "10"]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("field `--pool`") && e.contains(bad), "{bad}: {e}");
    }
    for bad in ["B200:tp=3", "Nope:replicas=2"] {
        let o = run(&[
            "plan",
            "--gpus",
            "H100 SXM,H200 SXM",
            "--target-rate",
            "2",
            "--slo",
            "ttft_p95_s=2",
            "--existing",
            bad,
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("field `--existing`") && e.contains(bad), "{bad}: {e}");
    }
}

#[test]
fn busy_time_output_tokens_and_energy_add_up() {
    use capsim::plan::{energy_kwh, GpuPrice};
    let p = const_profile("vllm", 0.01, "max_num_seqs = 16");
    // One request of 100 output tokens on one replica: 100 steps of 10 ms busy, nothing else.
    let one = Arrivals::OpenLoop { process: Process::Constant, rate: RateSchedule::constant(1.0), burstiness: 1.0 };
    let w = Workload::fixed(one, 64, 100, Some(1)).unwrap();
    let out = simulate_autoscaled(&p, &w, 1, SimOptions::default(), &policy(""), &RequestSlo::default());
    assert!((out.busy_replica_seconds - 1.0).abs() < 1e-9, "{}", out.busy_replica_seconds);
    assert_eq!(out.output_tokens, 100);
    let price = GpuPrice { name: "x".into(), price_per_hour: 1.0, idle_w: 100.0, busy_w: 500.0 };
    let e = energy_kwh(&price, 2, out.replica_seconds, out.busy_replica_seconds);
    assert!((e - 2.0 * (100.0 * out.replica_seconds + 400.0 * 1.0) / 3.6e6).abs() < 1e-15, "{e}");
    assert!((energy_kwh(&price, 2, 3600.0, 1800.0) - 0.6).abs() < 1e-12);
    // The rate step: every bucket's busy time within its held time (but for a straddling step per
    // replica), the buckets summing to the run's figures.
    let w = step_workload(100 + 40 * 200);
    let out = simulate_autoscaled(&p, &w, 1, SimOptions::default(), &policy(""), &RequestSlo::default());
    for b in &out.buckets {
        assert!(b.busy_replica_seconds <= b.replica_seconds + 0.01 * b.replicas_max as f64 + 1e-9, "{b:?}");
        assert_eq!(b.output_tokens, 100 * b.requests_completed);
    }
    let busy: f64 = out.buckets.iter().map(|b| b.busy_replica_seconds).sum();
    assert!((busy - out.busy_replica_seconds).abs() < 1e-6);
    assert!(out.busy_replica_seconds > 0.5 * out.replica_seconds, "a loaded fleet mostly steps");
    assert_eq!(out.output_tokens, 100 * out.requests_completed);
}

#[test]
fn the_autoscaled_report_gives_energy_and_an_html_day() {
    let dir = crate::Scratch::new("it-autoscale-html");
    let pol = dir.join("policy.toml");
    std::fs::write(&pol, "min_replicas = 1\nmax_replicas = 4\nmetric = \"outstanding\"\ntarget = 8.0\nprovisioning_s = 5.0\nstorage_gb_s = 2.0\nengine_start_s = 0.0\ncuda_graph_capture_s = 0.0\nbucket_s = 20.0\n").unwrap();
    let html = dir.join("day.html");
    let run = |args: &[&str]| std::process::Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).output().unwrap();
    let args = [
        "simulate",
        "--model",
        "Llama-3.1-8B-Instruct",
        "--gpu",
        "H100 SXM",
        "--rate",
        "10",
        "--requests",
        "600",
        "--autoscale",
        pol.to_str().unwrap(),
        "--goodput-ttft-s",
        "1",
        "--html",
        html.to_str().unwrap(),
        "--json",
    ];
    let o = run(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let e = v["energy_kwh"].as_f64().unwrap();
    let sum: f64 = v["buckets"].as_array().unwrap().iter().map(|b| b["energy_kwh"].as_f64().unwrap()).sum();
    assert!((e - sum).abs() < 1e-9 * e.max(1e-12), "{e} vs the buckets' {sum}");
    // 70 W idle, 700 W busy an H100 (models/prices.toml): between all idle and all busy.
    let gpu_h = v["gpu_hours"].as_f64().unwrap();
    assert!(e > 0.07 * gpu_h && e < 0.7 * gpu_h, "{e} kWh over {gpu_h} GPU-hours");
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches("<svg").count(), 3, "replicas, TTFT, TPOT");
    assert!(page.contains("Replicas over the day") && page.contains("--autoscale"));
    assert_eq!(page.matches("<tr><td>").count(), v["buckets"].as_array().unwrap().len());
    let o = run(&["simulate", "--rate", "2", "--requests", "10", "--html", html.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--html"));
    let text = run(&args[..args.len() - 1]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("energy"), "{}", String::from_utf8_lossy(&text.stdout));
}

#[test]
fn the_reporting_buckets_change_no_result() {
    // Advances stop at bucket edges (so busy time lands in its bucket): the run itself must not
    // change with the buckets' length.
    let p = const_profile("vllm", 0.01, "max_num_seqs = 16");
    let w = step_workload(100 + 40 * 200);
    let run = |bucket: &str| {
        let pol = policy("").clone();
        let pol = capsim::autoscale::AutoscalePolicy { bucket_s: bucket.parse().unwrap(), ..pol };
        simulate_autoscaled(&p, &w, 5, SimOptions::default(), &pol, &RequestSlo::default())
    };
    // 4.97 s is no multiple of the router's 50 ms looks: a bucket's edge is not a look.
    let (a, b, c) = (run("5.0"), run("1000000.0"), run("4.97"));
    assert!(a.buckets.len() > 40 && b.buckets.len() == 1);
    assert_eq!(serde_json::to_string(&a.timeline).unwrap(), serde_json::to_string(&b.timeline).unwrap());
    assert_eq!(serde_json::to_string(&c.timeline).unwrap(), serde_json::to_string(&b.timeline).unwrap());
    assert!(a.ttft == b.ttft && a.tpot == b.tpot && c.ttft == b.ttft && c.tpot == b.tpot);
    assert_eq!(
        (a.requests_completed, a.output_tokens, a.scale_ups, a.scale_downs),
        (b.requests_completed, b.output_tokens, b.scale_ups, b.scale_downs)
    );
    assert!(
        (a.replica_seconds - b.replica_seconds).abs() < 1e-6
            && (a.busy_replica_seconds - b.busy_replica_seconds).abs() < 1e-6
    );
    assert_eq!(a.end_s, b.end_s);
}

/// The router counts its own sends at once and learns of completions at its looks: with looks far
/// apart it keeps sending to replicas whose requests have finished, spreading the load less evenly
/// (a higher TTFT tail), and with looks every millisecond it is the exact least-outstanding router
/// to within a step; either way every request is served and the run is the same at any thread count.
#[test]
fn the_routers_looks_decide_what_it_knows_and_nothing_else() {
    let p = const_profile("vllm", 0.01, "max_num_seqs = 16");
    let w = step_workload(100 + 40 * 200);
    let run = |refresh: f64| {
        let pol = capsim::autoscale::AutoscalePolicy { router_refresh_s: refresh, ..policy("") };
        simulate_autoscaled(&p, &w, 5, SimOptions::default(), &pol, &RequestSlo::default())
    };
    let (fine, default, coarse) = (run(0.001), run(0.05), run(2.0));
    for o in [&fine, &default, &coarse] {
        assert_eq!(o.requests_completed, o.requests_sent);
    }
    assert!(
        coarse.ttft.percentile_s(99.0) >= fine.ttft.percentile_s(99.0),
        "{} vs {}",
        coarse.ttft.percentile_s(99.0),
        fine.ttft.percentile_s(99.0)
    );
    // A fleet large enough that its replicas run on several threads.
    let wide = |threads: usize| {
        let pol = capsim::autoscale::AutoscalePolicy {
            min_replicas: 24,
            max_replicas: 40,
            initial_replicas: 24,
            target: 2.0,
            ..policy("")
        };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| simulate_autoscaled(&p, &w, 5, SimOptions::default(), &pol, &RequestSlo::default()))
    };
    let (one, three) = (wide(1), wide(3));
    assert!(one.replicas_max >= 24 && one.requests_completed == one.requests_sent);
    assert_eq!(serde_json::to_string(&one.buckets).unwrap(), serde_json::to_string(&three.buckets).unwrap());
    assert_eq!(serde_json::to_string(&one.timeline).unwrap(), serde_json::to_string(&three.timeline).unwrap());
    assert!(one.ttft == three.ttft && one.tpot == three.tpot && one.busy_replica_seconds == three.busy_replica_seconds);
}
