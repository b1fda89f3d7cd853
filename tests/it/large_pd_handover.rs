//! Issue 25: the hand-over of a disaggregated request from its prefill to its decode worker
//! (profile::disagg::Disaggregated::handover_s), learned per engine on the corpus's low-load
//! disaggregated TTFTs (calibrate/handover.rs): by hand in the simulator, and carried to every
//! deployment the flags build.

use super::const_profile;
use capsim::catalog::Catalog;
use capsim::profile::disagg::{Disaggregated, KV_TRANSFER_LATENCY_S};
use capsim::sim::{simulate_disaggregated, SimOptions};
use capsim::units::SimTime;
use capsim::workload::{Arrivals, Workload};
use std::process::Command;

/// large_pd.rs `one_request_by_hand` with a 50 ms hand-over: the first token comes 50 ms later
/// (prefill step + hand-over + transfer + first decode step), the transfer itself is as long as
/// it was, and every later token keeps its step.
#[test]
fn the_hand_over_delays_the_transfer_by_its_time() {
    let step_s = 0.01;
    let p = const_profile("vllm", step_s, "");
    let mut d = Disaggregated::new(p.clone(), p, 1, 1);
    assert_eq!(d.handover_s, 0.0, "none unless learned");
    d.handover_s = 0.05;
    let w = Workload::fixed(Arrivals::Burst { n: 1 }, 1000, 10, None).unwrap();
    let out = simulate_disaggregated(&d, &w, 0, SimOptions::default());
    let r = out.records[0];
    let t = SimTime::from_secs(step_s).0;
    let xfer_ns = SimTime::from_secs(KV_TRANSFER_LATENCY_S).0 + SimTime::from_secs(1000.0 * 98_304.0 / 450e9).0;
    let h = SimTime::from_secs(0.05).0;
    assert_eq!(r.first_token.0, 2 * t + h + xfer_ns, "TTFT = prefill step + hand-over + transfer + decode step");
    assert_eq!(r.finish.0, 11 * t + h + xfer_ns);
    let rep = out.disagg.as_ref().unwrap();
    assert!((rep.kv_transfer_s[0] - xfer_ns as f64 * 1e-9).abs() < 1e-12, "{}", rep.kv_transfer_s[0]);
}

/// A deployment the flags build takes its engine's learned hand-over (models/learned.toml
/// `[[handover]]`), and explain names it beside the KV transfer.
#[test]
fn the_flags_deployment_takes_its_engines_learned_hand_over() {
    let learned = Catalog::builtin().learned.expect("a learned model ships");
    for engine in ["vllm", "sglang", "trtllm"] {
        let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
            .args(["explain", "--engine", engine, "--prefill-workers", "1", "--decode-workers", "1", "--json"])
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let want = learned.handover_s(engine).unwrap_or(0.0);
        assert_eq!(v["kv_transfer"]["handover_s"].as_f64(), Some(want), "{engine}");
    }
    assert!(learned.handover_s("sglang").is_some_and(|h| h > 0.0), "{:?}", learned.handover);
    let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["explain", "--engine", "sglang", "--prefill-workers", "1", "--decode-workers", "1"])
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("hand-over before it"));
}

/// capacity --disaggregated searches splits of the deployment the flags build, hand-over included:
/// its 1:1 candidate at 1 request/s reports the TTFT simulate gives that split at that load, and
/// simulate's JSON states the hand-over it ran with (SGLang's, about 32 ms, is a third of it).
#[test]
fn capacity_searches_splits_with_the_hand_over() {
    let learned = Catalog::builtin().learned.expect("a learned model ships");
    let run = |args: &[&str]| -> serde_json::Value {
        let o = Command::new(env!("CARGO_BIN_EXE_capsim"))
            .args(args)
            .args(["--engine", "sglang", "--input-len", "200", "--output-len", "20", "--json"])
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)))
    };
    let cap =
        run(&["capacity", "--disaggregated", "--target-rate", "1", "--slo", "ttft_p95_s=0.03", "--max-replicas", "1"]);
    let tried = &cap["disaggregated"]["tried"][0];
    assert_eq!((tried["prefill_workers"].as_u64(), tried["decode_workers"].as_u64()), (Some(1), Some(1)));
    let n = tried["run_requests"].as_u64().unwrap().to_string();
    let sim = run(&["simulate", "--prefill-workers", "1", "--decode-workers", "1", "--rate", "1", "--requests", &n]);
    let h = learned.handover_s("sglang").unwrap();
    assert!(h > 0.0);
    assert_eq!(sim["disaggregated"]["handover_s"].as_f64(), Some(h));
    assert_eq!(tried["ttft_s_mean"], sim["ttft_s"]["mean"], "capacity's candidate against simulate");
    assert!(sim["ttft_s"]["mean"].as_f64().unwrap() > h);
}
