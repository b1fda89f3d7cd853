//! Issue 25: pipeline stages that do not divide the layers (profile/parallel.rs
//! `stage_imbalance`). Every engine splits them unevenly (vLLM and SGLang `get_pp_indices`), so
//! DeepSeek-R1's 61 layers run on 2 stages as 31 and 30; capsim refused them until the third
//! audit of issue 25. The largest stage sets a full pipeline's period and the KV capacity.

use super::large_dp::{capsim, decodes, profile};
use capsim::sim::StepModel;

/// 48 layers over 5 stages: 10, 10, 10, 9, 9; the largest holds 10 = 50 / 48 of the mean 9.6.
#[test]
fn the_largest_stage_sets_a_full_pipelines_period() {
    let five = profile("tensor_parallel = 1\npipeline_parallel = 5", "", 0.01, 1e-3, 1e12);
    assert!((five.parallel.stage_imbalance(&five.arch) - 50.0 / 48.0).abs() < 1e-15);
    let m = StepModel::new(&five);
    // 10 sequences fill 5 micro-batches of 2: the period is 5 x the largest stage's time for one,
    // 5 x 10 / 48 of a micro-batch's time through all 48 layers.
    let full = m.parts(&decodes(10, 1000));
    let s = 50.0 / 48.0;
    assert!((full.weights_s - s * m.weight_bytes(2) / 1e12).abs() < 1e-15, "{}", full.weights_s);
    let kv = five.arch.kv_bytes_per_token(capsim::units::Dtype::Bf16);
    assert!((full.kv_s - s * 2.0 * 1001.0 * kv / 1e12).abs() < 1e-12, "{}", full.kv_s);
    // Two micro-batches: the largest stage's 2 x 10 layers are fewer than one traversal's 48, so
    // the period is the traversal (the bubble), as with even stages.
    let two = m.parts(&decodes(2, 1000));
    assert!((two.weights_s - m.weight_bytes(1) / 1e12).abs() < 1e-15, "{}", two.weights_s);
    // Even stages are unchanged: 48 over 4.
    let four = profile("tensor_parallel = 1\npipeline_parallel = 4", "", 0.01, 1e-3, 1e12);
    assert_eq!(four.parallel.stage_imbalance(&four.arch), 1.0);
    let parts = StepModel::new(&four).parts(&decodes(8, 1000));
    assert!((parts.weights_s - StepModel::new(&four).weight_bytes(2) / 1e12).abs() < 1e-15);
}

/// The largest stage holds 10 / 48 of the weights and of each token's KV beside 1 / 5 of the
/// rest: vLLM's pool over the replica is (budget - s x weights - activations - non-torch -
/// graphs) / s in bytes of all stages' KV, by hand from the memory it reports.
#[test]
fn the_largest_stage_sets_the_kv_capacity() {
    let five = profile("tensor_parallel = 1\npipeline_parallel = 5", "", 0.01, 1e-3, 1e12);
    let mem = five.engine.memory.as_ref().unwrap();
    let s = 50.0 / 48.0;
    let by_hand =
        (mem.budget_bytes - s * mem.weights_bytes - mem.activation_bytes - mem.non_torch_bytes - mem.cuda_graph_bytes)
            / s;
    assert!((mem.kv_bytes - by_hand).abs() < 1e-6 * by_hand, "{} vs {by_hand}", mem.kv_bytes);
    assert!(mem.formula.contains("10 of 48 layers"), "{}", mem.formula);
    let even = mem.budget_bytes - mem.weights_bytes - mem.activation_bytes - mem.non_torch_bytes - mem.cuda_graph_bytes;
    assert!(mem.kv_bytes < even, "{} against the even split's {even}", mem.kv_bytes);
}

/// DeepSeek-R1 (61 layers) on two nodes of 8 x H100 with 2 stages: refused before, now explained,
/// naming the 31-layer stage; more stages than layers are refused naming --pp.
#[test]
fn deepseek_r1_runs_on_two_stages() {
    let args = ["explain", "--model", "DeepSeek-R1", "--gpu", "H100 SXM", "--tp", "8", "--precision", "fp8"];
    let o = capsim(&[&args[..], &["--pp", "2", "--json"]].concat());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["pipeline"]["largest_stage_layers"], 31, "{out}");
    assert!((v["pipeline"]["stage_imbalance"].as_f64().unwrap() - 62.0 / 61.0).abs() < 1e-12, "{out}");
    let o = capsim(&[&args[..], &["--pp", "2"]].concat());
    assert!(String::from_utf8_lossy(&o.stdout).contains("the largest holds 31"));
    let o = capsim(&[&args[..], &["--pp", "62"]].concat());
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("--pp") && e.contains("61 layers"), "{e}");
}
