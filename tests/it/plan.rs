//! Issue 26, the plan: the cheapest fleet is checked against its one-replica-smaller neighbour, prices
//! come from a file that must cover every GPU, and no plan within --max-gpus exits 3.

use std::process::{Command, Output};

fn capsim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).output().unwrap()
}

const Q: &[&str] = &[
    "plan",
    "--model",
    "Llama-3.1-8B-Instruct",
    "--input-len",
    "2000",
    "--output-len",
    "200",
    "--slo",
    "ttft_p95_s=1",
    "--slo",
    "tpot_p95_ms=30",
    "--requests-per-replica",
    "1500",
    "--seeds",
    "1",
];

/// [`Q`] without `--seeds`: a fleet plan at a target rate runs each candidate fleet at that rate,
/// and a load search's seeds are refused there (the day plans' rate searches take them).
fn fleet_q() -> &'static [&'static str] {
    assert_eq!(Q[Q.len() - 2..], ["--seeds", "1"]);
    &Q[..Q.len() - 2]
}

#[test]
fn the_cheapest_plan_meets_the_slo_and_one_replica_fewer_does_not() {
    let args: Vec<&str> = fleet_q()
        .iter()
        .copied()
        .chain(["--gpus", "H100 SXM,H200 SXM", "--tps", "1", "--target-rate", "40", "--json"])
        .collect();
    let o = capsim(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let plans = v["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 2, "{v}");
    let costs: Vec<f64> = plans.iter().map(|p| p["cost_per_hour"].as_f64().unwrap()).collect();
    assert!(costs[0] <= costs[1], "cheapest first: {costs:?}");
    for p in plans {
        let pool = &p["pools"][0];
        let k = pool["replicas"].as_u64().unwrap();
        assert_eq!(p["slo_met"], true);
        assert_eq!(pool["gpus"].as_u64().unwrap(), k * pool["tp"].as_u64().unwrap());
        if k > 1 {
            assert_eq!(p["one_replica_fewer"]["meets_slo"], false, "{p}");
        }
        for s in p["slo_values"].as_array().unwrap() {
            assert!(s["value"].as_f64().unwrap() <= s["limit"].as_f64().unwrap(), "{s}");
        }
        assert_band(&p["band"]["replicas"], k, p);
    }
    assert!(
        plans.iter().any(|p| p["pools"][0]["replicas"].as_u64().unwrap() > 1),
        "the rate needs more than one replica somewhere: {v}"
    );
    assert!(
        plans
            .iter()
            .any(|p| p["band"]["from_sigmas"] == true && p["band"]["replicas"]["low"] != p["band"]["replicas"]["high"]),
        "the profiles' sigmas give some plan a band wider than its answer: {v}"
    );
}

/// The band from the profile's uncertainty holds the answer: the fast profile's count at most it,
/// the slow one's at least it (or none within the limit), and the fitted sigmas widen it.
fn assert_band(band: &serde_json::Value, k: u64, plan: &serde_json::Value) {
    let low = band["low"].as_u64().unwrap();
    assert!(low <= k, "{plan}");
    if let Some(high) = band["high"].as_u64() {
        assert!(high >= k, "{plan}");
    }
}

#[test]
fn a_price_file_without_a_gpu_the_plan_needs_is_refused_by_name() {
    let dir = crate::Scratch::new("it-plan");
    let f = dir.join("prices.toml");
    std::fs::write(&f, "date = \"2026-11-25\"\ncurrency = \"EUR\"\n[[gpu]]\nname = \"H100 SXM\"\nprice_per_hour = 2.0\nidle_w = 70\nbusy_w = 700\n").unwrap();
    let args: Vec<&str> = Q
        .iter()
        .copied()
        .chain(["--gpus", "H100 SXM,B200", "--target-rate", "12", "--price-file", f.to_str().unwrap()])
        .collect();
    let o = capsim(&args);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("prices.toml") && e.contains("B200"), "{e}");
    std::fs::write(&f, "date = \"x\"\ncurrency = \"EUR\"\n[[gpu]]\nname = \"H100 SXM\"\nprice_per_hour = 2.0\nidle_w = 800\nbusy_w = 700\n").unwrap();
    let args: Vec<&str> = Q
        .iter()
        .copied()
        .chain(["--gpus", "H100 SXM", "--target-rate", "12", "--price-file", f.to_str().unwrap()])
        .collect();
    let e = String::from_utf8_lossy(&capsim(&args).stderr).to_string();
    assert!(e.contains("idle_w"), "{e}");
}

#[test]
fn no_plan_within_max_gpus_exits_3() {
    let args: Vec<&str> = fleet_q()
        .iter()
        .copied()
        .chain(["--gpus", "H100 SXM", "--tps", "1", "--target-rate", "200", "--max-gpus", "2"])
        .collect();
    let o = capsim(&args);
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("not a plan"));
}

/// A short day: 5 requests/s for 10 minutes, 30/s for 10 minutes, then 10/s, each bucket 10 minutes.
const CURVE: &str = "requests = 30000\n[arrivals]\nkind = \"open_loop\"\nprocess = \"poisson\"\nrate = { segments = [[0.0, 5.0], [600.0, 30.0], [1200.0, 10.0]] }\n[[classes]]\nweight = 1.0\nname = \"chat\"\ninput = { dist = \"fixed\", value = 2000 }\noutput = { dist = \"fixed\", value = 200 }\n";

/// A fresh folder for one test, removed when the guard is dropped.
fn temp_dir(name: &str) -> crate::Scratch {
    crate::Scratch::new(&format!("it-plan-{name}"))
}

fn day_args<'a>(curve: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    // The plan's flags less the lengths, which the curve's file gives.
    let mut args: Vec<&str> =
        Q.iter().copied().filter(|a| !["--input-len", "2000", "--output-len", "200"].contains(a)).collect();
    args.extend(["--gpus", "H100 SXM", "--tps", "1", "--workload", curve, "--bucket-s", "600"]);
    args.extend(extra);
    args
}

/// Each bucket's TTFT p95 and TPOT p95 of `capsim simulate --autoscale` with a policy pinned at
/// `replicas`: the plan's answer checked through another command than the plan's own search.
fn simulate_pinned(dir: &std::path::Path, curve: &str, replicas: u64) -> Vec<(f64, f64)> {
    let pol = dir.join(format!("pinned-{replicas}.toml"));
    std::fs::write(
        &pol,
        format!("min_replicas = {replicas}\nmax_replicas = {replicas}\nmetric = \"outstanding\"\ntarget = 1.0\ninterval_s = 600.0\nprovisioning_s = 0.0\nstorage_gb_s = 1.0\nengine_start_s = 0.0\ncuda_graph_capture_s = 0.0\nbucket_s = 600.0\n"),
    )
    .unwrap();
    let o = capsim(&[
        "simulate",
        "--model",
        "Llama-3.1-8B-Instruct",
        "--gpu",
        "H100 SXM",
        "--workload",
        curve,
        "--autoscale",
        pol.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["requests_lost"], 0, "{v}");
    v["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["ttft_s"]["p95"].as_f64().unwrap(), b["tpot_ms"]["p95"].as_f64().unwrap()))
        .collect()
}

#[test]
fn a_plan_over_a_daily_curve_meets_the_slo_every_bucket_and_one_replica_fewer_misses_one() {
    let dir = temp_dir("day");
    let curve = dir.join("day.toml");
    std::fs::write(&curve, CURVE).unwrap();
    let c = curve.to_str().unwrap();
    let o = capsim(&day_args(c, &["--json"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["peak_rate"], 30.0, "the schedule's highest segment");
    let plan = &v["plans"][0];
    assert_eq!(plan["kind"], "fixed");
    assert_eq!(plan["slo_met"], true, "{plan}");
    let k = plan["pools"][0]["replicas"].as_u64().unwrap();
    assert!(k > 1, "30 requests/s of 2,000 in / 200 out needs more than one H100: {plan}");
    assert_eq!(plan["one_replica_fewer"]["slo_met"], false, "{plan}");
    assert_band(&plan["band"]["replicas"], k, plan);
    // Cost: replicas x price x hours of the span; per million output tokens over the 30,000 x 200.
    let price = 2.99;
    let hours = plan["span_s"].as_f64().unwrap() / 3600.0;
    let cost = plan["cost"].as_f64().unwrap();
    assert!((cost - k as f64 * price * hours).abs() < 1e-6 * cost, "{plan}");
    let per_m = plan["cost_per_million_output_tokens"].as_f64().unwrap();
    assert!((per_m - cost / 6.0).abs() < 1e-9 * per_m, "{per_m} vs {cost} / 6M tokens");
    // Energy between all idle and all busy (70 W and 700 W an H100 in models/prices.toml).
    let gpu_h = plan["gpu_hours"].as_f64().unwrap();
    let e = plan["energy_kwh"].as_f64().unwrap();
    assert!(e >= gpu_h * 0.07 - 1e-9 && e <= gpu_h * 0.7 + 1e-9, "{e} kWh over {gpu_h} GPU-hours");
    // The same answer through simulate: k replicas meet both limits in every bucket, k - 1 miss one.
    let limits = (1.0, 30.0);
    let meets = |b: &[(f64, f64)]| b.iter().all(|&(t, p)| t <= limits.0 && p <= limits.1);
    let at_k = simulate_pinned(dir.path(), c, k);
    assert_eq!(at_k.len(), plan["buckets"].as_array().unwrap().len());
    assert!(meets(&at_k), "{k} replicas: {at_k:?}");
    let fewer = simulate_pinned(dir.path(), c, k - 1);
    assert!(!meets(&fewer), "{} replicas: {fewer:?}", k - 1);
}

#[test]
fn a_daily_plan_refuses_bad_curves_policies_prices_and_slos_by_name() {
    let dir = temp_dir("bad");
    let curve = dir.join("negative.toml");
    std::fs::write(&curve, CURVE.replace("[600.0, 30.0]", "[600.0, -30.0]")).unwrap();
    let c = curve.to_str().unwrap();
    let o = capsim(&day_args(c, &[]));
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("negative.toml") && e.contains("rate") && e.contains("-30"), "{e}");
    // The daily form: 24 multiples of a peak, one of them negative.
    let hourly = dir.join("hourly.toml");
    let mut m = vec!["0.5"; 24];
    m[13] = "-0.2";
    std::fs::write(
        &hourly,
        CURVE.replace(
            "segments = [[0.0, 5.0], [600.0, 30.0], [1200.0, 10.0]]",
            &format!("peak = 30.0, hourly = [{}]", m.join(", ")),
        ),
    )
    .unwrap();
    let o = capsim(&day_args(hourly.to_str().unwrap(), &[]));
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("hourly.toml") && e.contains("rate.hourly[13]") && e.contains("-0.2"), "{e}");
    let good = dir.join("day.toml");
    std::fs::write(&good, CURVE).unwrap();
    let g = good.to_str().unwrap();
    let pol = dir.join("policy.toml");
    std::fs::write(&pol, "min_replicas = 5\nmax_replicas = 2\nmetric = \"outstanding\"\ntarget = 8.0\nprovisioning_s = 1.0\nstorage_gb_s = 1.0\nengine_start_s = 0.0\ncuda_graph_capture_s = 0.0\n").unwrap();
    let o = capsim(&day_args(g, &["--autoscale", pol.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("policy.toml") && e.contains("min_replicas") && e.contains("max_replicas"), "{e}");
    let prices = dir.join("prices.toml");
    std::fs::write(&prices, "date = \"2026-11-26\"\ncurrency = \"EUR\"\n[[gpu]]\nname = \"B200\"\nprice_per_hour = 5.0\nidle_w = 100\nbusy_w = 1000\n").unwrap();
    let o = capsim(&day_args(g, &["--price-file", prices.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("prices.toml") && e.contains("H100 SXM"), "{e}");
    let mut args = day_args(g, &[]);
    args.extend(["--slo", "e2e_p95_s=20"]);
    let e = String::from_utf8_lossy(&capsim(&args).stderr).to_string();
    assert!(e.contains("--slo") && e.contains("e2e_p95_s"), "{e}");
}

#[test]
fn a_daily_plan_beyond_max_gpus_exits_3_and_an_autoscaled_plan_is_judged_per_bucket() {
    let dir = temp_dir("max");
    let curve = dir.join("day.toml");
    std::fs::write(&curve, CURVE).unwrap();
    let c = curve.to_str().unwrap();
    let o = capsim(&day_args(c, &["--max-gpus", "1"]));
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("not a plan"));
    // A policy that scales from 1 to 8 replicas, a minute and a half to start one: the peak's first
    // bucket waits for the new replicas, so it is listed with slo_met false and its buckets say which.
    let pol = dir.join("policy.toml");
    std::fs::write(&pol, "min_replicas = 1\nmax_replicas = 8\nmetric = \"outstanding\"\ntarget = 24.0\nprovisioning_s = 60.0\nstorage_gb_s = 2.0\nengine_start_s = 20.0\ncuda_graph_capture_s = 10.0\n").unwrap();
    let o = capsim(&day_args(c, &["--autoscale", pol.to_str().unwrap(), "--json"]));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let plans = v["plans"].as_array().unwrap();
    let auto = plans.iter().find(|p| p["kind"] == "autoscaled").expect("an autoscaled plan");
    let fixed = plans.iter().find(|p| p["kind"] == "fixed").expect("a fixed plan");
    let buckets = auto["buckets"].as_array().unwrap();
    let failed = buckets.iter().filter(|b| b["slo_met"] == false).count();
    assert_eq!(auto["buckets_failed"].as_u64().unwrap() as usize, failed);
    assert_eq!(auto["slo_met"], failed == 0);
    assert!(auto["replicas_max"].as_u64().unwrap() <= 8 && auto["scale_ups"].as_u64().unwrap() > 0, "{auto}");
    // Plans meeting the SLO come first, each group cheapest first.
    let key: Vec<(u8, f64)> =
        plans.iter().map(|p| (u8::from(p["slo_met"] == false), p["cost_per_hour"].as_f64().unwrap())).collect();
    assert!(key.windows(2).all(|w| w[0].0 < w[1].0 || (w[0].0 == w[1].0 && w[0].1 <= w[1].1)), "{key:?}");
    assert_eq!(fixed["slo_met"], true);
}

/// The fleet's TTFT p95 and TPOT p95 from `capsim simulate --pool` (its own path, same seed).
fn simulate_pools(pools: &[String], requests: u64) -> (f64, f64) {
    let mut args: Vec<String> = ["simulate", "--model", "Llama-3.1-8B-Instruct", "--rate", "60", "--input-len", "2000"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for p in pools {
        args.extend(["--pool".to_string(), p.clone()]);
    }
    args.extend(["--output-len", "200", "--requests", &requests.to_string(), "--json"].map(String::from));
    let o = Command::new(env!("CARGO_BIN_EXE_capsim")).args(&args).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    (v["fleet"]["ttft_s"]["p95"].as_f64().unwrap(), v["fleet"]["tpot_ms"]["p95"].as_f64().unwrap())
}

#[test]
fn a_mixed_plan_adds_the_fewest_new_replicas_to_an_owned_pool_cheapest_first() {
    let args: Vec<&str> = Q
        .iter()
        .copied()
        .chain([
            "--existing",
            "H100 SXM:replicas=2",
            "--gpus",
            "B200,H100 SXM",
            "--tps",
            "1",
            "--target-rate",
            "60",
            "--json",
        ])
        .collect();
    let o = capsim(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let plans = v["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 2, "{v}");
    let costs: Vec<f64> = plans.iter().map(|p| p["cost_per_hour"].as_f64().unwrap()).collect();
    assert!(costs[0] <= costs[1], "cheapest first: {costs:?}");
    let price = |gpu: &str| if gpu == "B200" { 5.49 } else { 2.99 };
    for p in plans {
        let pools = p["pools"].as_array().unwrap();
        assert_eq!(
            (pools[0]["gpu"].as_str(), pools[0]["replicas"].as_u64(), &pools[0]["existing"]),
            (Some("H100 SXM"), Some(2), &serde_json::json!(true))
        );
        let n = p["new_replicas"].as_u64().unwrap();
        assert!(n >= 1, "two H100s alone do not serve 60 requests/s: {p}");
        let new = &pools[1];
        let gpu = new["gpu"].as_str().unwrap();
        assert_eq!(new["replicas"].as_u64().unwrap(), n);
        assert!((p["cost_per_hour"].as_f64().unwrap() - (2.0 * 2.99 + n as f64 * price(gpu))).abs() < 1e-9, "{p}");
        assert_eq!(p["slo_met"], true);
        assert_eq!(p["one_replica_fewer"]["meets_slo"], false, "{p}");
        assert_band(&p["band"]["new_replicas"], n, p);
        // Checked through simulate --pool: the same fleet, the same run, the same figures.
        let requests = 1500 * (2 + n);
        let (ttft, tpot) = simulate_pools(&["H100 SXM:replicas=2".into(), format!("{gpu}:replicas={n}")], requests);
        assert!(ttft <= 1.0 && tpot <= 30.0, "{gpu} + {n}: {ttft} s, {tpot} ms");
        assert_eq!(p["slo_values"][0]["limit"].as_f64().unwrap(), 1.0);
        assert_eq!(p["slo_values"][0]["value"].as_f64().unwrap(), ttft);
        assert_eq!(p["slo_values"][1]["value"].as_f64().unwrap(), tpot);
        if n > 1 && p["one_replica_fewer"]["stability"] == "stable" {
            let (t, q) =
                simulate_pools(&["H100 SXM:replicas=2".into(), format!("{gpu}:replicas={}", n - 1)], requests - 1500);
            assert!(t > 1.0 || q > 30.0, "{gpu} + {}: {t} s, {q} ms", n - 1);
        }
    }
    let bad: Vec<&str> = Q
        .iter()
        .copied()
        .chain(["--existing", "H100 SXM:replicas=0", "--gpus", "B200", "--target-rate", "60"])
        .collect();
    let o = capsim(&bad);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--existing"), "{}", String::from_utf8_lossy(&o.stderr));
    // One owned H100 and room for one more GPU: nothing serves 60 requests/s, exit 3.
    let none: Vec<&str> = Q
        .iter()
        .copied()
        .chain(["--existing", "H100 SXM:replicas=1", "--gpus", "B200", "--target-rate", "60", "--max-gpus", "2"])
        .collect();
    let o = capsim(&none);
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("not a plan"));
}

#[test]
fn a_curves_peak_is_its_highest_segment_or_a_traces_busiest_window() {
    use capsim::plan::day::peak_rate;
    use capsim::workload::{Arrivals, Process, RateSchedule, TraceRecord, Workload};
    // A schedule: the 30/s segment is the peak while it is sent; cut before it, 5/s is.
    let sched = || Arrivals::OpenLoop {
        process: Process::Poisson,
        rate: RateSchedule { segments: vec![(0.0, 5.0), (600.0, 30.0), (1200.0, 10.0)] },
        burstiness: 1.0,
    };
    let w = Workload::fixed(sched(), 10, 10, Some(100_000)).unwrap();
    assert_eq!(peak_rate(&w, 300.0).unwrap(), 30.0);
    // 2,000 requests at 5/s take 400 s: the 30/s segment is never reached.
    let w = Workload::fixed(sched(), 10, 10, Some(2000)).unwrap();
    assert_eq!(peak_rate(&w, 300.0).unwrap(), 5.0);
    // A daily curve as a file writes it: 24 multiples of the peak over a day of `day_s` seconds.
    let mut hourly = [0.25; 24];
    hourly[15] = 1.0;
    let text = format!("peak = 40.0\nhourly = {hourly:?}\nday_s = 2400.0\n");
    let r: RateSchedule = toml::from_str(&text).unwrap();
    assert_eq!(r, RateSchedule::daily(40.0, &hourly, 2400.0));
    assert_eq!((r.segments[15], r.segments[16].0), ((1500.0, 40.0), 1600.0));
    let w = Workload::fixed(
        Arrivals::OpenLoop { process: Process::Poisson, rate: r, burstiness: 1.0 },
        10,
        10,
        Some(100_000),
    )
    .unwrap();
    assert_eq!(peak_rate(&w, 300.0).unwrap(), 40.0);
    let short: Result<RateSchedule, _> = toml::from_str("peak = 40.0\nhourly = [1.0, 0.5]\n");
    assert!(short.unwrap_err().to_string().contains("24"));
    // A trace: 2/s for 100 s, 10/s for 50 s, 2/s for 100 s, evenly spaced. The busiest 20 s holds
    // 200 arrivals (10/s); the busiest 100 s holds the 500 of the burst and 100 of its sides.
    let mut t = Vec::new();
    let mut at = 0.0;
    for (rate, n) in [(2.0, 200), (10.0, 500), (2.0, 200)] {
        for _ in 0..n {
            t.push(TraceRecord { arrival_s: at, input_tokens: 10, output_tokens: 10, hash_ids: vec![], session: None });
            at += 1.0 / rate;
        }
    }
    let w = Workload::trace(t, 0, 0).unwrap();
    assert!((peak_rate(&w, 20.0).unwrap() - 10.0).abs() < 0.06, "{}", peak_rate(&w, 20.0).unwrap());
    assert!((peak_rate(&w, 100.0).unwrap() - 6.0).abs() < 0.03, "{}", peak_rate(&w, 100.0).unwrap());
}

#[test]
fn a_daily_plan_is_the_same_at_any_thread_count() {
    let dir = temp_dir("threads");
    let curve = dir.join("day.toml");
    std::fs::write(&curve, CURVE).unwrap();
    let c = curve.to_str().unwrap();
    let run = |threads: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
            .args(day_args(c, &["--json"]))
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o.stdout
    };
    assert!(run("1") == run("3"), "the plan's JSON differs between 1 and 3 threads");
}

#[test]
fn mixes_of_two_new_gpu_types_are_listed_cheapest_first_and_checked_through_simulate() {
    let args: Vec<&str> = Q
        .iter()
        .copied()
        .chain(["--mix", "--gpus", "H100 SXM,B200", "--tps", "1", "--target-rate", "60", "--json"])
        .collect();
    let o = capsim(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let plans = v["plans"].as_array().unwrap();
    assert!(!plans.is_empty(), "{v}");
    let costs: Vec<f64> = plans.iter().map(|p| p["cost_per_hour"].as_f64().unwrap()).collect();
    assert!(costs.windows(2).all(|w| w[0] <= w[1]), "cheapest first: {costs:?}");
    for p in plans {
        let pools = p["pools"].as_array().unwrap();
        assert_eq!(pools.len(), 2, "{p}");
        assert!(pools.iter().all(|x| x["existing"] == false && x["replicas"].as_u64().unwrap() >= 1), "{p}");
        let (k, n) = (pools[0]["replicas"].as_u64().unwrap(), pools[1]["replicas"].as_u64().unwrap());
        assert_eq!((pools[0]["gpu"].as_str(), pools[1]["gpu"].as_str()), (Some("H100 SXM"), Some("B200")));
        assert!((p["cost_per_hour"].as_f64().unwrap() - (k as f64 * 2.99 + n as f64 * 5.49)).abs() < 1e-9, "{p}");
        assert_eq!(p["slo_met"], true);
        assert_eq!(p["one_replica_fewer"]["meets_slo"], false, "{p}");
        assert_band(&p["band"]["new_replicas"], n, p);
    }
    // The cheapest mix through simulate --pool: the same fleet and run, the same figures.
    let best = &plans[0];
    let (k, n) = (best["pools"][0]["replicas"].as_u64().unwrap(), best["pools"][1]["replicas"].as_u64().unwrap());
    let (ttft, tpot) =
        simulate_pools(&[format!("H100 SXM:replicas={k}"), format!("B200:replicas={n}")], 1500 * (k + n));
    assert!(ttft <= 1.0 && tpot <= 30.0, "{k} + {n}: {ttft} s, {tpot} ms");
    assert_eq!(best["slo_values"][1]["value"].as_f64().unwrap(), tpot);
    let one: Vec<&str> = Q.iter().copied().chain(["--mix", "--gpus", "B200", "--target-rate", "60"]).collect();
    let e = String::from_utf8_lossy(&capsim(&one).stderr).to_string();
    assert!(e.contains("--mix") && e.contains("two"), "{e}");
    // At a rate one replica serves, no mix is a plan: the warning says why, not that the SLO is out
    // of reach.
    let low: Vec<&str> =
        Q.iter().copied().chain(["--mix", "--gpus", "H100 SXM,B200", "--tps", "1", "--target-rate", "0.5"]).collect();
    let o = capsim(&low);
    assert_eq!(o.status.code(), Some(3));
    let e = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(e.contains("1 replica of H100 SXM alone serves the rate") && e.contains("without --mix"), "{e}");
}

/// A deployment that does not fit one GPU of --gpus is a refusal of that candidate, judged on that
/// GPU (not on the profile's own): the plan goes on with the GPUs where it fits.
#[test]
fn a_deployment_that_does_not_fit_one_gpu_is_refused_on_that_gpu_and_the_plan_goes_on() {
    let o = capsim(&[
        "plan",
        "--model",
        "Qwen3-235B-A22B",
        "--precision",
        "fp8",
        "--gpus",
        "H100 SXM,H200 SXM",
        "--tps",
        "2",
        "--target-rate",
        "0.2",
        "--input-len",
        "512",
        "--output-len",
        "64",
        "--slo",
        "ttft_p95_s=10",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let plans = v["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 1, "{v}");
    assert_eq!(plans[0]["pools"][0]["gpu"], "H200 SXM");
    let refused = v["refused"].as_array().unwrap();
    assert!(
        refused
            .iter()
            .any(|r| r["gpu"] == "H100 SXM" && r["reason"].as_str().unwrap().contains("does not fit 2 x H100 SXM")),
        "{v}"
    );
}
