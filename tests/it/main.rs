//! capsim's integration tests: one crate, one module per area.

mod autoscale;
mod calibrate;
mod capacity;
mod catalog;
mod cli;
mod corpus;
mod data;
mod disagg_cli_audit;
mod embed;
mod engines;
mod fuzz;
mod gpus_market;
mod hardening;
mod hardening3_calibrate;
mod hardening3_cli;
mod hardening3_readers;
mod hardening3_sim;
mod large_dp;
mod large_offload;
mod large_pd;
mod large_pd_handover;
mod large_pp;
mod large_spec;
mod learned_structure;
mod measured;
mod models_corpus;
mod physics;
mod plan;
mod prefix;
mod readers_audit;
mod report;
mod reproduce;
mod scaleout;
mod scratch;
mod sim;
mod validate;
mod validate_runs;
mod validate_runs_pd;
mod workload;

pub use scratch::Scratch;

use capsim::catalog::Catalog;
use capsim::profile::{Profile, ProfileFile};

/// [`const_profile`]'s TOML, for tests that resolve it themselves.
pub fn const_profile_text(engine: &str, overhead_s: f64, engine_extra: &str) -> String {
    format!(
        r#"
name = "const"
[model]
name = "Qwen3-Coder-30B-A3B-Instruct"
weight_dtype = "fp8"
kv_dtype = "bf16"
[gpu]
name = "H200 SXM"
[engine]
kind = "{engine}"
{engine_extra}
[coefficients]
step_overhead_s = {overhead_s}
per_seq_overhead_s = 0.0
bandwidth_eff_bytes_s = 1e30
matmul_flops_eff_s = 1e30
attention_flops_eff_s = 1e30
request_overhead_s = 0.0
[provenance]
method = "test"
"#
    )
}

/// A profile whose steps take exactly `overhead_s` (bandwidth and FLOP/s so large that the variable
/// terms round to 0 ns): the scenarios of hand-computable tests. `engine_extra` adds `[engine]` keys.
pub fn const_profile(engine: &str, overhead_s: f64, engine_extra: &str) -> Profile {
    let text = const_profile_text(engine, overhead_s, engine_extra);
    ProfileFile::parse("test", &text).unwrap().resolve("test", &Catalog::builtin()).unwrap()
}

pub fn default_profile() -> Profile {
    Profile::load(None, &Catalog::builtin()).unwrap()
}
