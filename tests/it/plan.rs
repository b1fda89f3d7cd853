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

#[test]
fn the_cheapest_plan_meets_the_slo_and_one_replica_fewer_does_not() {
    let args: Vec<&str> = Q
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
    }
    assert!(
        plans.iter().any(|p| p["pools"][0]["replicas"].as_u64().unwrap() > 1),
        "the rate needs more than one replica somewhere: {v}"
    );
}

#[test]
fn a_price_file_without_a_gpu_the_plan_needs_is_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("capsim-it-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
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
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn no_plan_within_max_gpus_exits_3() {
    let args: Vec<&str> = Q
        .iter()
        .copied()
        .chain(["--gpus", "H100 SXM", "--tps", "1", "--target-rate", "200", "--max-gpus", "2"])
        .collect();
    let o = capsim(&args);
    assert_eq!(o.status.code(), Some(3), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("not a plan"));
}
