use super::{const_profile, default_profile};
use capsim::catalog::Catalog;
use capsim::data;
use capsim::metrics::{summarize, RequestSlo};
use capsim::profile::{Profile, ProfileFile};
use capsim::sim::{simulate, simulate_observed, SimOptions, SimOutput, StepView};
use capsim::sweep::run_sweep;
use capsim::workload::{Arrivals, LoadAxis, LoadTemplate, Process, RateSchedule, Workload};
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn burst(n: u32, input: u32, output: u32) -> Workload {
    Workload::fixed(Arrivals::Burst { n }, input, output, None).unwrap()
}

fn run(p: &Profile, w: &Workload) -> SimOutput {
    simulate(p, w, 7, SimOptions::default())
}

fn by_id(out: &SimOutput) -> Vec<capsim::sim::RequestRecord> {
    let mut r = out.records.clone();
    r.sort_by_key(|x| x.id);
    r
}

#[test]
fn one_request_constant_step_time_vllm() {
    // 20,000 prompt tokens in 8,192-token steps: 3 prefill steps; the third samples token 1; 4 decodes.
    let p = const_profile("vllm", 0.010, "");
    let out = run(&p, &burst(1, 20_000, 5));
    let r = out.records[0];
    assert_eq!(r.first_token.0, 30 * MS);
    assert_eq!(r.finish.0, 70 * MS);
    assert_eq!(out.steps, 7);
    assert_eq!(r.queue_wait_s(), 0.0);
}

#[test]
fn one_request_constant_step_time_sglang() {
    let p = const_profile("sglang", 0.010, "");
    let out = run(&p, &burst(1, 20_000, 5));
    let r = out.records[0];
    assert_eq!((r.first_token.0, r.finish.0), (30 * MS, 70 * MS));
}

#[test]
fn vllm_shares_the_token_budget_between_prefills() {
    // Step 1: A takes 6,000 and B the remaining 2,192; step 2: A decodes, B finishes its prompt.
    let p = const_profile("vllm", 0.010, "");
    let r = by_id(&run(&p, &burst(2, 6_000, 3)));
    assert_eq!((r[0].first_token.0, r[1].first_token.0), (10 * MS, 20 * MS));
    assert_eq!((r[0].finish.0, r[1].finish.0), (30 * MS, 40 * MS));
}

#[test]
fn sglang_alternates_prefill_and_decode() {
    // Step 1 prefills A (6,000) and chunks B (2,192); step 2 finishes B's prompt while A's decode waits;
    // steps 3 and 4 decode both.
    let p = const_profile("sglang", 0.010, "");
    let r = by_id(&run(&p, &burst(2, 6_000, 3)));
    assert_eq!((r[0].first_token.0, r[1].first_token.0), (10 * MS, 20 * MS));
    assert_eq!((r[0].finish.0, r[1].finish.0), (40 * MS, 40 * MS));
    // With mixed chunks A decodes during B's prefill.
    let p = const_profile("sglang", 0.010, "enable_mixed_chunk = true");
    let r = by_id(&run(&p, &burst(2, 6_000, 3)));
    assert_eq!(r[0].finish.0, 30 * MS);
}

#[test]
fn max_num_seqs_caps_the_batch() {
    let p = const_profile("vllm", 0.010, "max_num_seqs = 2");
    let r = by_id(&run(&p, &burst(3, 10, 2)));
    // Two run together (2 steps), the third starts when they finish.
    assert_eq!(r[2].first_scheduled.0, 20 * MS);
    assert_eq!(r[2].finish.0, 40 * MS);
}

fn check_invariants(p: &Profile, w: &Workload, seed: u64) -> SimOutput {
    let budget = p.engine.max_num_batched_tokens as u64;
    // vLLM, and TensorRT-LLM with chunked prefill, never exceed the token budget (SGLang's mixed
    // decodes ride beside a full chunk; TensorRT-LLM without chunking runs an oversized resumed
    // context alone).
    let is_vllm = p.engine.kind == capsim::profile::EngineKind::Vllm
        || (p.engine.kind == capsim::profile::EngineKind::Trtllm && p.engine.chunked_prefill);
    let mut last = 0u64;
    let out = simulate_observed(p, w, seed, SimOptions::default(), &mut |v: &StepView| {
        assert!(v.used_blocks() <= v.capacity_blocks(), "KV over-allocated");
        assert_eq!(v.held_blocks(), v.used_blocks(), "blocks leaked or double-counted");
        assert!(v.kv_covers_computed());
        assert!(v.running() as u32 <= p.engine.max_num_seqs + 1);
        if is_vllm {
            assert!(v.shape.n_tokens as u64 <= budget, "token budget exceeded");
        }
        assert!(v.step_ns > 0 && v.now_ns > last, "time must advance");
        last = v.now_ns;
    });
    // Conservation: every sent request completes exactly once (or was rejected), tokens add up.
    check_completions(&out);
    let outputs: u64 = out.records.iter().map(|r| r.output_tokens as u64).sum();
    let inputs: u64 = out.records.iter().map(|r| r.input_tokens as u64).sum();
    // Every output token but the first is one decode; re-prefills after preemption add prefill work.
    assert_eq!(
        out.decode_tokens + out.prefill_tokens,
        inputs + outputs - out.records.len() as u64 + recompute_tokens(&out)
    );
    out
}

/// Every sent request completed exactly once or was rejected, none left, each record in time order.
fn check_completions(out: &SimOutput) {
    let mut ids: Vec<u32> = out.records.iter().map(|r| r.id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), out.records.len(), "a request completed twice");
    assert_eq!(out.records.len() as u64 + out.requests_rejected, out.requests_sent);
    assert_eq!(out.requests_unfinished, 0);
    for r in &out.records {
        assert!(r.arrival <= r.enqueued && r.enqueued <= r.first_scheduled);
        assert!(r.first_scheduled < r.first_token && r.first_token <= r.finish);
    }
}

/// Tokens recomputed after preemptions can only be bounded from the records; the accounting identity
/// is checked exactly when there were none.
fn recompute_tokens(out: &SimOutput) -> u64 {
    if out.preemptions == 0 {
        0
    } else {
        out.decode_tokens + out.prefill_tokens
            - (out.records.iter().map(|r| (r.input_tokens + r.output_tokens) as u64 - 1).sum::<u64>())
    }
}

#[test]
fn preemption_under_kv_pressure_keeps_invariants() {
    // 4 blocks of 16 tokens; two requests of 16 + 40 tokens cannot both grow to completion.
    let p = const_profile("vllm", 0.001, "kv_capacity_tokens = 64");
    let out = check_invariants(&p, &burst(2, 16, 40), 1);
    assert!(out.preemptions > 0);
    assert!(out.records.iter().any(|r| r.preemptions > 0));
    // SGLang's admission reserves 0.7 x the remaining output, which keeps B out here: no retraction.
    let p = const_profile("sglang", 0.001, "kv_capacity_tokens = 64");
    let out = check_invariants(&p, &burst(2, 16, 40), 1);
    assert_eq!(out.preemptions, 0);
    // With a small reservation ratio it over-admits and must retract.
    let p = const_profile(
        "sglang",
        0.001,
        "kv_capacity_tokens = 64\nnew_token_ratio_init = 0.1\nnew_token_ratio_min = 0.05",
    );
    let out = check_invariants(&p, &burst(2, 16, 40), 1);
    assert!(out.preemptions > 0);
}

#[test]
fn a_request_larger_than_the_cache_is_rejected_not_looped() {
    let p = const_profile("vllm", 0.001, "kv_capacity_tokens = 64");
    let out = check_invariants(&p, &burst(3, 100, 10), 1);
    assert_eq!(out.requests_rejected, 3);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 240, .. ProptestConfig::default() })]
    #[test]
    fn randomized_scenarios_keep_every_invariant(
        engine in 0usize..5,
        mixed in any::<bool>(),
        budget in 16u32..512,
        seqs in 1u32..12,
        kv_tokens in 256u64..4096,
        input_max in 1u32..300,
        output_max in 1u32..80,
        clients in 1u32..10,
        requests in 1u64..60,
        open in any::<bool>(),
        seed in any::<u64>(),
    ) {
        // vLLM as 0.19+ admits, vLLM before 0.19 (first chunk only), SGLang, TensorRT-LLM's two policies.
        let (kind, engine_extra) = [
            ("vllm", format!("enable_mixed_chunk = {mixed}")),
            ("vllm", "version = \"0.18.1\"".to_string()),
            ("sglang", format!("enable_mixed_chunk = {mixed}")),
            ("trtllm", format!("enable_chunked_prefill = {mixed}")),
            ("trtllm", format!("enable_chunked_prefill = {mixed}\ncapacity_scheduler_policy = \"max_utilization\"")),
        ][engine].clone();
        let extra = format!("max_num_batched_tokens = {budget}\nmax_num_seqs = {seqs}\nkv_capacity_tokens = {kv_tokens}\n{engine_extra}");
        let p = const_profile(kind, 0.002, &extra);
        let mut t = LoadTemplate::fixed(1, 1);
        t.classes[0].input = capsim::workload::LengthDist::Uniform { min: 1, max: input_max };
        t.classes[0].output = capsim::workload::LengthDist::Uniform { min: 1, max: output_max };
        t.requests = Some(requests);
        let w = if open { t.at(LoadAxis::Rate, 50.0).unwrap() } else { t.at(LoadAxis::Concurrency, clients as f64).unwrap() };
        check_invariants(&p, &w, seed);
    }
}

#[test]
fn littles_law_on_a_long_open_loop() {
    // Poisson arrivals see time averages (PASTA): the mean number of requests in the system found by
    // arrivals estimates L, which Little's law says equals lambda x W.
    let p = const_profile("vllm", 0.004, "max_num_seqs = 8");
    let mut t = LoadTemplate::fixed(64, 16);
    t.requests = Some(40_000);
    let w = t.at(LoadAxis::Rate, 60.0).unwrap();
    let out = simulate(&p, &w, 3, SimOptions::default());
    let mut recs = out.records.clone();
    recs.sort_by_key(|r| r.arrival);
    // Number in system at each arrival: arrived before it and not yet finished.
    let mut finishes: Vec<u64> = Vec::new();
    let mut found = 0u64;
    let mut heap = std::collections::BinaryHeap::new();
    for r in &recs {
        while heap.peek().is_some_and(|std::cmp::Reverse(f)| *f <= r.arrival.0) {
            heap.pop();
        }
        found += heap.len() as u64;
        heap.push(std::cmp::Reverse(r.finish.0));
        finishes.push(r.finish.0);
    }
    let l_seen = found as f64 / recs.len() as f64;
    let span = (recs.last().unwrap().arrival.0 - recs[0].arrival.0) as f64;
    let lambda = (recs.len() - 1) as f64 / span;
    let w_mean = recs.iter().map(|r| (r.finish.0 - r.arrival.0) as f64).sum::<f64>() / recs.len() as f64;
    let rel = (l_seen - lambda * w_mean).abs() / (lambda * w_mean);
    assert!(rel < 0.03, "L seen by arrivals = {l_seen}, lambda W = {}", lambda * w_mean);
    assert!(l_seen > 1.0, "the test needs a loaded system, got L = {l_seen}");
}

#[test]
fn md1_mean_wait_matches_the_closed_form() {
    // One request at a time (max_num_seqs = 1), one step each (1 prompt token, 1 output token), a fixed
    // 10 ms service: an M/D/1 queue. Mean wait = rho D / (2 (1 - rho)).
    let d = 0.010;
    let p = const_profile("vllm", d, "max_num_seqs = 1");
    for rho in [0.5, 0.8] {
        let mut t = LoadTemplate::fixed(1, 1);
        t.requests = Some(200_000);
        let w = t.at(LoadAxis::Rate, rho / d).unwrap();
        let out = simulate(&p, &w, 11, SimOptions::default());
        let s = summarize(&out, 1000, 0, 0.0, &RequestSlo::default());
        let expect = rho * d / (2.0 * (1.0 - rho));
        let rel = (s.queue_wait_s.mean - expect).abs() / expect;
        assert!(rel < 0.04, "rho {rho}: simulated {} vs M/D/1 {expect}", s.queue_wait_s.mean);
    }
}

#[test]
fn same_seed_same_result_and_seeds_matter() {
    let p = default_profile();
    let mut t = LoadTemplate::fixed(1, 1);
    t.classes[0].input = capsim::workload::LengthDist::Lognormal { mean: 2000.0, sd: 1500.0 };
    t.classes[0].output = capsim::workload::LengthDist::Uniform { min: 50, max: 400 };
    t.requests = Some(300);
    let w = t.at(LoadAxis::Rate, 8.0).unwrap();
    let a = simulate(&p, &w, 42, SimOptions::default());
    let b = simulate(&p, &w, 42, SimOptions::default());
    assert_eq!(a.records, b.records);
    let c = simulate(&p, &w, 43, SimOptions::default());
    assert_ne!(a.records, c.records);
}

#[test]
fn sweeps_are_identical_at_any_thread_count() {
    let p = default_profile();
    let mut t = LoadTemplate::fixed(2048, 128);
    t.requests = Some(60);
    t.process = Process::Gamma;
    t.burstiness = 0.5;
    let loads = [1.0, 2.0, 4.0, 8.0];
    let go = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| run_sweep(&p, &t, LoadAxis::Rate, &loads, 9, &RequestSlo::default()).unwrap())
    };
    let one = serde_json::to_string(&go(1)).unwrap();
    let four = serde_json::to_string(&go(4)).unwrap();
    assert_eq!(one, four);
}

#[test]
fn more_burst_load_never_lowers_mean_ttft() {
    let p = default_profile();
    let mut last = 0.0;
    for n in [1, 2, 4, 8, 16, 32, 64] {
        let out = run(&p, &burst(n, 4096, 128));
        let s = summarize(&out, 0, 0, 0.0, &RequestSlo::default());
        assert!(s.ttft_s.mean >= last, "burst {n}: {} < {last}", s.ttft_s.mean);
        last = s.ttft_s.mean;
    }
}

#[test]
fn default_handset_profile_matches_report_001_single_request() {
    // The hand-set profile of issue 3 (kept as a builtin after calibration replaced it as the default).
    let p = Profile::load(Some("qwen3-coder-30b-a3b-fp8_h200-sxm_vllm_handset"), &capsim::catalog::Catalog::builtin())
        .unwrap();
    let pts = data::load_points(None).unwrap();
    let mut checked = 0;
    for pt in pts.iter().filter(|q| {
        q.report.starts_with("001")
            && q.concurrency == Some(1)
            && !q.is_flagged()
            && q.output_tokens == Some(1024)
            && (q.metric == "ttft_s" || q.metric == "per_user_tok_s")
    }) {
        let w = Workload::fixed(Arrivals::Burst { n: 1 }, pt.input_tokens.unwrap() as u32, 1024, None).unwrap();
        let s = summarize(&run(&p, &w), 0, 0, 0.0, &RequestSlo::default());
        let pred = if pt.metric == "ttft_s" { s.ttft_s.mean } else { s.per_user_tok_s.mean };
        let err = (pred - pt.value) / pt.value;
        assert!(
            err.abs() <= 0.10,
            "{} {} at {}: predicted {pred}, measured {}",
            pt.scenario,
            pt.metric,
            pt.input_tokens.unwrap(),
            pt.value
        );
        checked += 1;
    }
    // 1K, 8K, 32K, 64K, 96K and 256K: TTFT and decode speed.
    assert!(checked >= 12, "checked {checked}");
}

#[test]
fn time_varying_rate_follows_the_schedule() {
    let p = const_profile("vllm", 0.001, "");
    let rate = RateSchedule { segments: vec![(0.0, 10.0), (100.0, 40.0), (200.0, 10.0)] };
    let w = capsim::workload::WorkloadSpec {
        arrivals: Arrivals::OpenLoop { process: Process::Poisson, rate, burstiness: 1.0 },
        classes: LoadTemplate::fixed(10, 2).classes,
        requests: None,
        duration_s: Some(300.0),
        warmup_requests: 0,
        cooldown_requests: 0,
        warmup_s: 0.0,
        conversation: None,
    }
    .validate()
    .unwrap();
    let out = run(&p, &w);
    let in_window =
        |a: f64, b: f64| out.records.iter().filter(|r| r.arrival.secs() >= a && r.arrival.secs() < b).count() as f64;
    let (lo, hi) = (in_window(0.0, 100.0), in_window(100.0, 200.0));
    assert!((lo - 1000.0).abs() < 120.0 && (hi - 4000.0).abs() < 250.0, "{lo} {hi}");
}

/// A: a 1-token prompt with 100 outputs from t = 0; B, a 1-token request, arrives at 25 ms.
fn decode_and_a_late_arrival() -> Workload {
    use capsim::workload::TraceRecord;
    let req = |arrival_s: f64, output_tokens: u32| TraceRecord {
        arrival_s,
        input_tokens: 1,
        output_tokens,
        hash_ids: vec![],
        session: None,
    };
    Workload::trace(vec![req(0.0, 100), req(0.025, 1)], 0, 0).unwrap()
}

#[test]
fn sglang_continuous_decode_steps_hold_new_requests_back() {
    // A: 1-token prompt, 100 outputs from t = 0; B arrives at 25 ms. 10 ms steps.
    // k = 1: after A's prefill (0-10) and decodes (10-20, 20-30), B is prefilled at 30-40: TTFT 15 ms.
    // k = 8: A's decode run must reach 8 steps first (until 90 ms): B is prefilled at 90-100, TTFT 75 ms.
    let w = decode_and_a_late_arrival();
    for (k, ttft_ms) in [(1, 15), (8, 75)] {
        let p = const_profile("sglang", 0.010, &format!("num_continuous_decode_steps = {k}"));
        let r = by_id(&run(&p, &w));
        assert_eq!(r[1].first_token.0 - r[1].arrival.0, ttft_ms * MS, "k = {k}");
    }
}

#[test]
fn sglang_recv_interval_takes_new_requests_every_n_decode_steps() {
    // A: 1-token prompt, 100 outputs from t = 0; B arrives at 25 ms. 10 ms steps. A's prefill (0-10)
    // leaves the count past any interval, so the poll at 10 ms takes (nothing) and restarts it; each
    // decode step then counts 1, and B is taken at the first poll after it arrives whose count has
    // reached the interval (scheduler_recv_skipper.py):
    // interval 1: poll at 30 -> prefill 30-40, TTFT 15 ms; 2: count 2 at 30 -> the same;
    // 3: count 2 at 30, 3 at 40 -> prefill 40-50, 25 ms; 5: count 5 at 60 -> prefill 60-70, 45 ms.
    let w = decode_and_a_late_arrival();
    for (n, ttft_ms) in [(1, 15), (2, 15), (3, 25), (5, 45)] {
        let p = const_profile("sglang", 0.010, &format!("scheduler_recv_interval = {n}"));
        let r = by_id(&run(&p, &w));
        assert_eq!(r[1].first_token.0 - r[1].arrival.0, ttft_ms * MS, "interval {n}");
    }
    // An idle engine takes an arrival at once, whatever the interval.
    use capsim::workload::TraceRecord;
    let alone = Workload::trace(
        vec![TraceRecord { arrival_s: 0.025, input_tokens: 1, output_tokens: 1, hash_ids: vec![], session: None }],
        0,
        0,
    )
    .unwrap();
    let p = const_profile("sglang", 0.010, "scheduler_recv_interval = 30");
    let r = by_id(&run(&p, &alone));
    assert_eq!(r[0].first_token.0 - r[0].arrival.0, 10 * MS);
}

#[test]
fn recv_and_stream_intervals_are_checked_where_they_are_set() {
    let bad = |engine: &str, extra: &str| {
        let text = super::const_profile_text(engine, 0.01, extra);
        let e = ProfileFile::parse("p.toml", &text).unwrap().resolve("p.toml", &Catalog::builtin()).unwrap_err();
        e.to_string()
    };
    let e = bad("vllm", "scheduler_recv_interval = 10");
    assert!(e.contains("engine.scheduler_recv_interval") && e.contains("sglang setting"), "{e}");
    let e = bad("sglang", "scheduler_recv_interval = 0");
    assert!(e.contains("engine.scheduler_recv_interval") && e.contains("at least 1"), "{e}");
    let e = bad("trtllm", "stream_interval = 0");
    assert!(e.contains("engine.stream_interval") && e.contains("at least 1"), "{e}");
}

/// One scenario of the swarm, drawn from `seed`: an engine policy and its settings, request lengths,
/// a load; every invariant of [`check_invariants`] is checked at every step.
fn swarm_case(seed: u64) {
    use rand::{Rng, SeedableRng};
    let mut g = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let engines = [
        ("vllm", String::new()),
        ("vllm", "version = \"0.18.1\"".to_string()),
        ("sglang", format!("enable_mixed_chunk = {}", g.gen_bool(0.5))),
        ("trtllm", format!("enable_chunked_prefill = {}", g.gen_bool(0.5))),
        ("trtllm", "capacity_scheduler_policy = \"max_utilization\"\nenable_chunked_prefill = true".to_string()),
    ];
    let (kind, engine_extra) = engines[g.gen_range(0..engines.len())].clone();
    let extra = format!(
        "max_num_batched_tokens = {}\nmax_num_seqs = {}\nkv_capacity_tokens = {}\n{engine_extra}",
        g.gen_range(16..4096),
        g.gen_range(1..64),
        g.gen_range(256..65536),
    );
    let p = const_profile(kind, g.gen_range(0.0005..0.02), &extra);
    let mut t = LoadTemplate::fixed(1, 1);
    let length = |g: &mut rand_chacha::ChaCha8Rng, hi: u32| {
        if g.gen_bool(0.5) {
            capsim::workload::LengthDist::Uniform { min: 1, max: g.gen_range(1..hi) }
        } else {
            capsim::workload::LengthDist::Lognormal {
                mean: g.gen_range(10.0..hi as f64),
                sd: g.gen_range(0.0..hi as f64),
            }
        }
    };
    t.classes[0].input = length(&mut g, 3000);
    t.classes[0].output = length(&mut g, 300);
    t.requests = Some(g.gen_range(1..200));
    let w = match g.gen_range(0..3) {
        0 => t.at(LoadAxis::Concurrency, g.gen_range(1..40) as f64),
        1 => t.at(LoadAxis::Burst, g.gen_range(1..60) as f64),
        _ => t.at(LoadAxis::Rate, g.gen_range(0.5..200.0)),
    }
    .unwrap();
    check_invariants(&p, &w, seed);
}

/// A seeded swarm of random scenarios over every engine policy. A failure names its seed;
/// CAPSIM_SWARM_SEEDS=10000 cargo test --release swarm for the long run.
#[test]
fn swarm_of_random_scenarios_keeps_every_invariant() {
    let seeds: u64 = std::env::var("CAPSIM_SWARM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    for seed in 0..seeds {
        if std::panic::catch_unwind(|| swarm_case(seed)).is_err() {
            panic!("swarm: reproduce with seed={seed} (swarm_case({seed}) in tests/it/sim.rs)");
        }
    }
}

/// A random scenario whose requests share prefixes (conversations, system prompts) under vLLM or
/// SGLang with a small KV cache and caching on: the cache's blocks never exceed the pool, shared
/// blocks are counted once (requests together hold at least as many as are used), every request
/// completes once or is rejected, the tokens computed add up once the cached ones are counted, and
/// the run is deterministic.
fn swarm_prefix_case(seed: u64) {
    use capsim::workload::{Conversation, LengthDist};
    use rand::{Rng, SeedableRng};
    let mut g = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let kind = if g.gen_bool(0.5) { "vllm" } else { "sglang" };
    let extra = format!(
        "max_num_batched_tokens = {}\nmax_num_seqs = {}\nkv_capacity_tokens = {}",
        g.gen_range(64..4096),
        g.gen_range(1..48),
        g.gen_range(4096..65536),
    );
    let p = const_profile(kind, g.gen_range(0.0005..0.02), &extra);
    let mut t = LoadTemplate::fixed(1, 1);
    t.classes[0].input = LengthDist::Uniform { min: 1, max: g.gen_range(2..1500) };
    t.classes[0].output = LengthDist::Uniform { min: 1, max: g.gen_range(2..300) };
    t.classes[0].system_prompt_tokens = if g.gen_bool(0.5) { g.gen_range(1..2000) } else { 0 };
    if g.gen_bool(0.8) || t.classes[0].system_prompt_tokens == 0 {
        t.conversation = Some(Conversation {
            turns: LengthDist::Uniform { min: 1, max: g.gen_range(1..10) },
            think_time_s: g.gen_range(0.0..3.0),
            think_exponential: g.gen_bool(0.5),
        });
    }
    t.requests = Some(g.gen_range(1..250));
    let w = match g.gen_range(0..3) {
        0 => t.at(LoadAxis::Concurrency, g.gen_range(1..30) as f64),
        1 => t.at(LoadAxis::Burst, g.gen_range(1..40) as f64),
        _ => t.at(LoadAxis::Rate, g.gen_range(0.5..50.0)),
    }
    .unwrap();
    let mut last = 0u64;
    let out = simulate_observed(&p, &w, seed, SimOptions::default(), &mut |v: &StepView| {
        assert!(v.used_blocks() <= v.capacity_blocks(), "KV over-allocated");
        assert!(v.held_blocks() >= v.used_blocks(), "a used block no request holds");
        assert!(v.kv_covers_computed());
        assert!(v.step_ns > 0 && v.now_ns > last, "time must advance");
        last = v.now_ns;
    });
    check_completions(&out);
    let outputs: u64 = out.records.iter().map(|r| r.output_tokens as u64).sum();
    let inputs: u64 = out.records.iter().map(|r| r.input_tokens as u64).sum();
    let cached: u64 = out.records.iter().map(|r| r.cached_tokens as u64).sum();
    let computed = out.decode_tokens + out.prefill_tokens + cached;
    let work = inputs + outputs - out.records.len() as u64;
    // Without preemptions every prompt token is computed or found cached once. (A preempted request
    // looks its prefix up again when it comes back, and those later hits are not recorded.)
    if out.preemptions == 0 {
        assert_eq!(computed, work, "tokens computed and cached add up to the work");
    }
    for r in &out.records {
        assert!(r.cached_tokens < r.input_tokens.max(1), "at most the prompt minus one token is cached");
    }
    let again = simulate(&p, &w, seed, SimOptions::default());
    assert_eq!(again.records, out.records);
}

#[test]
fn swarm_of_random_prefix_sharing_scenarios_keeps_every_invariant() {
    let seeds: u64 = std::env::var("CAPSIM_SWARM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    for seed in 0..seeds {
        if std::panic::catch_unwind(|| swarm_prefix_case(seed)).is_err() {
            panic!("prefix swarm: reproduce with seed={seed} (swarm_prefix_case({seed}) in tests/it/sim.rs)");
        }
    }
}

/// Issue 13: decode-only stretches advanced in one call give the same run as step-by-step
/// simulation, to the nanosecond and the counter, on random scenarios of every load kind under vLLM
/// and SGLang (TensorRT-LLM never fast-forwards), single engines and fleets.
#[test]
fn fast_forward_equals_step_by_step_simulation() {
    use capsim::sim::{simulate_fleet, simulate_observed, Routing};
    use rand::{Rng, SeedableRng};
    let seeds: u64 = std::env::var("CAPSIM_SWARM_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let same = |a: &SimOutput, b: &SimOutput, seed: u64| {
        assert_eq!(a.records, b.records, "seed {seed}");
        assert_eq!(
            (a.steps, a.end, a.busy_ns, a.decode_tokens, a.prefill_tokens, a.preemptions, a.max_waiting),
            (b.steps, b.end, b.busy_ns, b.decode_tokens, b.prefill_tokens, b.preemptions, b.max_waiting),
            "seed {seed}"
        );
        assert_eq!(
            (a.kv_util_time_weighted_mean, a.kv_util_max),
            (b.kv_util_time_weighted_mean, b.kv_util_max),
            "seed {seed}"
        );
        assert_eq!(a.series, b.series, "seed {seed}");
        assert_eq!(format!("{:?}", a.itl_gaps), format!("{:?}", b.itl_gaps), "seed {seed}");
        assert_eq!(
            (a.requests_rejected, a.requests_unfinished, a.outstanding_at_last_send),
            (b.requests_rejected, b.requests_unfinished, b.outstanding_at_last_send),
            "seed {seed}"
        );
    };
    for seed in 0..seeds {
        let mut g = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0xfa57);
        let extra = format!(
            "max_num_batched_tokens = {}\nmax_num_seqs = {}\nkv_capacity_tokens = {}",
            g.gen_range(16..4096),
            g.gen_range(1..64),
            g.gen_range(256..200_000),
        );
        let engine = ["vllm", "sglang"][g.gen_range(0..2)];
        let extra = if engine == "sglang" {
            format!(
                "{extra}\nenable_mixed_chunk = {}\nnum_continuous_decode_steps = {}\nscheduler_recv_interval = {}",
                g.gen_bool(0.5),
                g.gen_range(1..4),
                [1, 1, 3, 10][g.gen_range(0..4)]
            )
        } else {
            extra
        };
        let p = const_profile(engine, g.gen_range(0.0005..0.02), &extra);
        let p = if g.gen_bool(0.3) { default_profile() } else { p };
        let mut t = LoadTemplate::fixed(1, 1);
        t.classes[0].input = capsim::workload::LengthDist::Uniform { min: 1, max: g.gen_range(2..3000) };
        t.classes[0].output = capsim::workload::LengthDist::Uniform { min: 1, max: g.gen_range(2..600) };
        t.requests = Some(g.gen_range(1..300));
        t.think_time_s = if g.gen_bool(0.3) { g.gen_range(0.0..2.0) } else { 0.0 };
        let w = match g.gen_range(0..3) {
            0 => t.at(LoadAxis::Concurrency, g.gen_range(1..40) as f64),
            1 => t.at(LoadAxis::Burst, g.gen_range(1..60) as f64),
            _ => t.at(LoadAxis::Rate, g.gen_range(0.5..100.0)),
        }
        .unwrap();
        let opts =
            SimOptions { horizon_s: if g.gen_bool(0.1) { g.gen_range(1.0..30.0) } else { 1e7 }, ..Default::default() };
        let fast = simulate(&p, &w, seed, opts);
        let slow = simulate_observed(&p, &w, seed, opts, &mut |_: &StepView| {});
        same(&fast, &slow, seed);
        if seed % 10 == 0 {
            let k = g.gen_range(2..5);
            let routing = if g.gen_bool(0.5) { Routing::RoundRobin } else { Routing::LeastOutstanding };
            let a = simulate_fleet(&p, &w, seed, opts, k, routing);
            // The fleet's step-by-step reference: each replica's records against a single engine are
            // not comparable, so compare the fleet with itself at one thread and at several.
            let b = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .unwrap()
                .install(|| simulate_fleet(&p, &w, seed, opts, k, routing));
            for (x, y) in a.iter().zip(&b) {
                same(x, y, seed);
            }
        }
    }
}

/// Issue 13: vLLM's pooled decodes (sim/pool.rs) against step-by-step simulation where the pool is
/// dissolved and re-formed often: open loops near and past saturation with a cache small enough to
/// preempt, prompts longer than the token budget (chunked over several steps), and outputs of one
/// token (finishing in their prefill step beside pooled decodes).
#[test]
fn pooled_decodes_equal_step_by_step_under_memory_pressure() {
    use capsim::sim::simulate_observed;
    let mut preempted = 0;
    for (i, (kv_tokens, budget, input_max, output_max, rate)) in [
        (6_000u64, 512u32, 1_500u32, 400u32, 6.0f64),
        (20_000, 256, 3_000, 300, 3.0),
        (200_000, 2_048, 900, 1, 40.0),
        (200_000, 8_192, 2_000, 500, 30.0),
        (3_000, 128, 600, 200, 20.0),
    ]
    .into_iter()
    .enumerate()
    {
        // Step times that depend on the batch's shape (a constant one would hide a wrong shape).
        let text = format!(
            "name = \"physics\"\n[model]\nname = \"Qwen3-Coder-30B-A3B-Instruct\"\nweight_dtype = \"fp8\"\n\
             kv_dtype = \"bf16\"\n[gpu]\nname = \"H200 SXM\"\n[engine]\nkind = \"vllm\"\n\
             max_num_batched_tokens = {budget}\nmax_num_seqs = 96\nkv_capacity_tokens = {kv_tokens}\n\
             [coefficients]\nstep_overhead_s = 0.002\nper_seq_overhead_s = 1e-5\nbandwidth_eff_bytes_s = 3e12\n\
             matmul_flops_eff_s = 4e14\nattention_flops_eff_s = 2e14\nrequest_overhead_s = 0.0\n\
             [provenance]\nmethod = \"test\"\n"
        );
        let p = capsim::profile::ProfileFile::parse("test", &text)
            .unwrap()
            .resolve("test", &capsim::catalog::Catalog::builtin())
            .unwrap();
        let mut t = LoadTemplate::fixed(1, 1);
        t.classes[0].input = capsim::workload::LengthDist::Uniform { min: 1, max: input_max };
        t.classes[0].output = capsim::workload::LengthDist::Uniform { min: 1, max: output_max };
        t.requests = Some(1_500);
        let w = t.at(LoadAxis::Rate, rate).unwrap();
        let fast = simulate(&p, &w, i as u64, SimOptions::default());
        let slow = simulate_observed(&p, &w, i as u64, SimOptions::default(), &mut |_: &StepView| {});
        assert_eq!(fast.records, slow.records, "case {i}");
        assert_eq!(
            (fast.steps, fast.end, fast.busy_ns, fast.decode_tokens, fast.prefill_tokens, fast.preemptions),
            (slow.steps, slow.end, slow.busy_ns, slow.decode_tokens, slow.prefill_tokens, slow.preemptions),
            "case {i}"
        );
        assert_eq!(fast.kv_util_time_weighted_mean, slow.kv_util_time_weighted_mean, "case {i}");
        assert_eq!(fast.series, slow.series, "case {i}");
        assert_eq!(format!("{:?}", fast.itl_gaps), format!("{:?}", slow.itl_gaps), "case {i}");
        preempted += (fast.preemptions > 0) as u32;
    }
    assert!(preempted >= 2, "the scenarios must reach memory pressure ({preempted} preempted)");
}

/// Issue 13: a burst's mean TTFT simulated only until the last first token equals the mean of the
/// full run's records, to the bit, for every engine, with and without preemption; and a closed loop
/// (whose sends wait for completions) is not cut short by the option.
#[test]
fn burst_mean_ttft_until_first_tokens_equals_the_full_run() {
    use capsim::experiment::burst_mean_ttft_s;
    let small_kv = "kv_capacity_tokens = 20000\nmax_num_batched_tokens = 512";
    let profiles = [
        default_profile(),
        const_profile("vllm", 0.004, small_kv),
        const_profile("sglang", 0.004, small_kv),
        const_profile("trtllm", 0.004, "max_num_batched_tokens = 4096"),
    ];
    for p in &profiles {
        for (n, input, output) in [(1u32, 1024u32, 256u32), (7, 3000, 40), (64, 1024, 1024), (300, 200, 300)] {
            let w = Workload::fixed(Arrivals::Burst { n }, input, output, Some(n as u64)).unwrap();
            let full = simulate(p, &w, 1, SimOptions { horizon_s: 1e6, series_points: 2, ..Default::default() });
            let mean = summarize(&full, 0, 0, 0.0, &RequestSlo::default()).ttft_s.mean;
            let fast = burst_mean_ttft_s(p, n, input, output);
            assert_eq!(fast.to_bits(), mean.to_bits(), "{} burst {n} of {input}/{output}", p.name());
        }
    }
    let p = default_profile();
    let w = Workload::fixed(
        Arrivals::ClosedLoop { clients: 4, think_time_s: 0.0, think_exponential: false },
        500,
        50,
        Some(40),
    )
    .unwrap();
    let out = simulate(&p, &w, 1, SimOptions { until_first_tokens: true, ..Default::default() });
    assert_eq!(out.records.len(), 40, "a closed loop runs to its last request");
    assert_eq!(out.ttfts_s.len(), 40);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, failure_persistence: None, .. ProptestConfig::default() })]
    /// The fast-forward against step-by-step simulation, as a property over drawn scenarios (shrunk
    /// to the smallest failing one): vLLM and SGLang, closed loops, bursts and open loops.
    #[test]
    fn fast_forward_equals_step_by_step_as_a_property(
        sglang in any::<bool>(),
        budget in 16u32..4096,
        seqs in 1u32..64,
        kv_tokens in 256u64..100_000,
        block in prop::sample::select(vec![1u32, 16, 32, 256]),
        input_max in 2u32..3000,
        output_max in 2u32..600,
        load in 0usize..3,
        level in 1u32..40,
        requests in 1u64..200,
        seed in any::<u64>(),
    ) {
        use capsim::sim::simulate_observed;
        let extra = format!(
            "max_num_batched_tokens = {budget}\nmax_num_seqs = {seqs}\nkv_capacity_tokens = {kv_tokens}\nblock_size_tokens = {block}"
        );
        let p = const_profile(if sglang { "sglang" } else { "vllm" }, 0.004, &extra);
        let mut t = LoadTemplate::fixed(1, 1);
        t.classes[0].input = capsim::workload::LengthDist::Uniform { min: 1, max: input_max };
        t.classes[0].output = capsim::workload::LengthDist::Uniform { min: 1, max: output_max };
        t.requests = Some(requests);
        let w = match load {
            0 => t.at(LoadAxis::Concurrency, level as f64),
            1 => t.at(LoadAxis::Burst, level as f64),
            _ => t.at(LoadAxis::Rate, level as f64 / 4.0),
        }
        .unwrap();
        let fast = simulate(&p, &w, seed, SimOptions::default());
        let slow = simulate_observed(&p, &w, seed, SimOptions::default(), &mut |_: &StepView| {});
        prop_assert_eq!(&fast.records, &slow.records);
        prop_assert_eq!((fast.steps, fast.end, fast.busy_ns, fast.decode_tokens), (slow.steps, slow.end, slow.busy_ns, slow.decode_tokens));
        prop_assert_eq!(fast.kv_util_time_weighted_mean, slow.kv_util_time_weighted_mean);
        prop_assert_eq!(&fast.series, &slow.series);
        prop_assert_eq!(format!("{:?}", fast.itl_gaps), format!("{:?}", slow.itl_gaps));
    }
}
