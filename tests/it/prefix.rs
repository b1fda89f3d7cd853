//! Issue 11: prefix caching as vLLM keeps it, and workloads that share prefixes.

use super::default_profile;
use capsim::metrics::{summarize, RequestSlo};
use capsim::profile::Profile;
use capsim::sim::{simulate, SimOptions, SimOutput};
use capsim::workload::{
    Arrivals, Conversation, LengthDist, LoadAxis, LoadTemplate, TraceRecord, Workload, WorkloadSpec,
};

fn caching(p: &Profile, on: bool) -> Profile {
    let mut f = p.file.clone();
    f.engine.prefix_caching = Some(on);
    f.resolve("test", &capsim::catalog::Catalog::builtin()).unwrap()
}

fn rec(t: f64, input: u32, output: u32, hash_ids: &[u64]) -> TraceRecord {
    TraceRecord { arrival_s: t, input_tokens: input, output_tokens: output, hash_ids: hash_ids.to_vec(), session: None }
}

fn run(p: &Profile, w: &Workload) -> SimOutput {
    simulate(p, w, 1, SimOptions::default())
}

fn cached(out: &SimOutput, id: u32) -> u32 {
    out.records.iter().find(|r| r.id == id).unwrap().cached_tokens
}

/// B's prompt extends A's: blocks 1 and 2 of 512 tokens in both. A is done before B arrives, so B
/// finds A's 64 full 16-token blocks. With A's second block 488 tokens long, the block that holds
/// tokens 992-1007 differs (A's output starts at 1000), so B finds 62.
#[test]
fn a_prompt_that_extends_another_hits_exactly_its_full_blocks() {
    let p = default_profile();
    assert_eq!(p.engine.block_size_tokens, 16);
    let w = Workload::trace(vec![rec(0.0, 1024, 8, &[1, 2]), rec(30.0, 1600, 8, &[1, 2, 3, 4])], 0, 0).unwrap();
    let out = run(&p, &w);
    assert_eq!((cached(&out, 0), cached(&out, 1)), (0, 64 * 16));
    let w = Workload::trace(vec![rec(0.0, 1000, 8, &[1, 2]), rec(30.0, 1600, 8, &[1, 2, 3, 4])], 0, 0).unwrap();
    assert_eq!(cached(&run(&p, &w), 1), 62 * 16);
    // The same prompt again: everything but the last token's block is found (num_tokens - 1 cap).
    let w = Workload::trace(vec![rec(0.0, 1024, 8, &[1, 2]), rec(30.0, 1024, 8, &[1, 2])], 0, 0).unwrap();
    assert_eq!(cached(&run(&p, &w), 1), 63 * 16);
    // Off: nothing is found.
    assert_eq!(cached(&run(&caching(&p, false), &w), 1), 0);
}

/// One client's conversations, one after another, with a cache that never fills: turn t finds the
/// full blocks of turn t-1's sequence (its prompt and every generated token but the last, which is
/// never fed back), at most its own prompt - 1 tokens; the hit rate is that over all prompt tokens.
#[test]
fn a_conversations_hit_rate_is_the_closed_form_share_of_repeated_tokens() {
    let p = default_profile();
    let (user, reply, turns, sys) = (300u32, 150u32, 6u32, 200u32);
    let w = WorkloadSpec {
        arrivals: Arrivals::ClosedLoop { clients: 1, think_time_s: 1.0, think_exponential: false },
        classes: vec![capsim::workload::RequestClass {
            weight: 1.0,
            name: String::new(),
            input: LengthDist::fixed(user),
            output: LengthDist::fixed(reply),
            system_prompt_tokens: sys,
        }],
        requests: Some(turns as u64 * 10),
        duration_s: None,
        warmup_requests: 0,
        cooldown_requests: 0,
        warmup_s: 0.0,
        conversation: Some(Conversation {
            turns: LengthDist::fixed(turns),
            think_time_s: 5.0,
            think_exponential: false,
        }),
    }
    .validate()
    .unwrap();
    let out = run(&p, &w);
    assert_eq!(out.prefix_evictions, 0, "the cache never fills");
    let b = 16u64;
    let floor = |x: u64| x / b * b;
    let (mut cached_sum, mut prompt_sum) = (0u64, 0u64);
    for session in 0..10 {
        for t in 0..turns as u64 {
            let prompt = sys as u64 + t * (user + reply) as u64 + user as u64;
            let hit = if t == 0 {
                // The system prompt's full blocks, cached by the previous session.
                if session == 0 {
                    0
                } else {
                    floor(sys as u64).min(floor(prompt - 1))
                }
            } else {
                let prev = prompt - (user + reply) as u64;
                floor(prev + reply as u64 - 1).min(floor(prompt - 1))
            };
            cached_sum += hit;
            prompt_sum += prompt;
        }
    }
    let s = summarize(&out, 0, 0, 0.0, &RequestSlo::default());
    let expect = cached_sum as f64 / prompt_sum as f64;
    assert!((s.prefix_hit_rate - expect).abs() < 1e-12, "{} against {expect}", s.prefix_hit_rate);
    assert!(s.prefix_hit_rate > 0.7);
    // Cached turns start sooner.
    assert!(s.ttft_s_hit.mean < s.ttft_s_miss.mean * 1.5 && s.ttft_s_hit.mean.is_finite());
}

/// Caching off gives the run of the same lengths with nothing shared; and a workload that shares
/// nothing runs the same with caching on or off (no cache is built).
#[test]
fn caching_off_runs_as_if_nothing_were_shared() {
    let p = default_profile();
    let mut t = LoadTemplate::fixed(1, 1);
    t.classes[0].input = LengthDist::Lognormal { mean: 1500.0, sd: 500.0 };
    t.classes[0].output = LengthDist::Uniform { min: 50, max: 300 };
    t.requests = Some(400);
    let plain = t.at(LoadAxis::Rate, 6.0).unwrap();
    let shared = {
        let mut t = t.clone();
        t.classes[0].system_prompt_tokens = 2000;
        t.at(LoadAxis::Rate, 6.0).unwrap()
    };
    let longer = {
        // The same requests with the 2,000 tokens as their own.
        let mut t = t.clone();
        t.classes[0].input = LengthDist::Lognormal { mean: 1500.0, sd: 500.0 };
        t.at(LoadAxis::Rate, 6.0).unwrap()
    };
    let off = run(&caching(&p, false), &shared);
    let on = run(&p, &shared);
    assert!(on.records.iter().filter(|r| r.cached_tokens > 0).count() > 300);
    assert!(off.records.iter().all(|r| r.cached_tokens == 0));
    assert_eq!(off.records.len(), 400);
    // Prompts are 2,000 longer with the system prompt, caching off or not.
    let lens =
        |o: &SimOutput| o.records.iter().map(|r| (r.id, r.input_tokens)).collect::<std::collections::BTreeMap<_, _>>();
    let base = lens(&run(&p, &longer));
    assert!(lens(&off).iter().all(|(id, n)| *n == base[id] + 2000));
    // Nothing shared: on and off are the same run, record for record.
    let a = run(&p, &plain);
    let b = run(&caching(&p, false), &plain);
    assert_eq!(a.records, b.records);
    assert_eq!((a.steps, a.end, a.prefix_evictions), (b.steps, b.end, 0));
}

/// A Mooncake sample: the third request repeats the first one's blocks, the second shares none.
#[test]
fn a_mooncake_trace_with_repeated_hash_ids_hits() {
    let text = concat!(
        "{\"timestamp\": 0, \"input_length\": 2048, \"output_length\": 16, \"hash_ids\": [11, 12, 13, 14]}\n",
        "{\"timestamp\": 1000, \"input_length\": 1024, \"output_length\": 16, \"hash_ids\": [21, 22]}\n",
        "{\"timestamp\": 20000, \"input_length\": 2100, \"output_length\": 16, \"hash_ids\": [11, 12, 13, 14, 15]}\n",
    );
    let t = capsim::workload::trace::parse_jsonl("mooncake.jsonl", text).unwrap();
    assert_eq!(t.records[2].hash_ids, vec![11, 12, 13, 14, 15]);
    let w = Workload::trace(t.records, 0, 0).unwrap();
    let out = run(&default_profile(), &w);
    assert_eq!((cached(&out, 0), cached(&out, 1), cached(&out, 2)), (0, 0, 2048));
    let s = summarize(&out, 0, 0, 0.0, &RequestSlo::default());
    assert!((s.prefix_hit_rate - 2048.0 / (2048.0 + 1024.0 + 2100.0)).abs() < 1e-12);
    // Bad hash_ids are refused naming the line and the field.
    let e = capsim::workload::trace::parse_jsonl(
        "m.jsonl",
        "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 5, \"hash_ids\": [1, -2]}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("line 1") && e.contains("hash_ids"), "{e}");
}

/// Under memory pressure the cache evicts, and a conversation workload still completes every turn.
#[test]
fn a_small_cache_evicts_and_every_turn_completes() {
    let mut f = default_profile().file.clone();
    f.engine.kv_capacity_tokens = Some(40_000);
    let p = f.resolve("test", &capsim::catalog::Catalog::builtin()).unwrap();
    let mut t = LoadTemplate::fixed(800, 200);
    t.requests = Some(600);
    t.conversation = Some(Conversation {
        turns: LengthDist::Uniform { min: 2, max: 8 },
        think_time_s: 3.0,
        think_exponential: true,
    });
    let w = t.at(LoadAxis::Concurrency, 12.0).unwrap();
    let out = run(&p, &w);
    assert_eq!(
        out.records.len() as u64 + out.requests_rejected,
        600,
        "{} {} {} {}",
        out.records.len(),
        out.requests_rejected,
        out.requests_unfinished,
        out.requests_sent
    );
    assert!(out.prefix_evictions > 0);
    let s = summarize(&out, 0, 0, 0.0, &RequestSlo::default());
    assert!(s.prefix_hit_rate > 0.1 && s.prefix_hit_rate < 1.0, "{}", s.prefix_hit_rate);
    // Deterministic.
    assert_eq!(run(&p, &w).records, out.records);
}

/// Prefix-aware routing keeps a conversation on the replica that holds its history: more of its
/// prompt tokens are found cached than under round-robin or least-outstanding routing, and its TTFT
/// is lower.
#[test]
fn prefix_aware_routing_finds_more_of_each_conversation_cached() {
    use capsim::sim::{simulate_fleet, Routing};
    let p = default_profile();
    let mut t = LoadTemplate::fixed(1500, 250);
    t.requests = Some(1500);
    t.conversation = Some(Conversation { turns: LengthDist::fixed(5), think_time_s: 4.0, think_exponential: true });
    let w = t.at(LoadAxis::Rate, 2.0).unwrap();
    let hit_rate = |routing| {
        let outs = simulate_fleet(&p, &w, 3, SimOptions::default(), 4, routing);
        let (c, n): (u64, u64) = outs
            .iter()
            .flat_map(|o| o.records.iter())
            .fold((0, 0), |(c, n), r| (c + r.cached_tokens as u64, n + r.input_tokens as u64));
        c as f64 / n as f64
    };
    let (rr, lo, pa) =
        (hit_rate(Routing::RoundRobin), hit_rate(Routing::LeastOutstanding), hit_rate(Routing::PrefixAware));
    // Five turns: the first finds nothing, the others about their whole history.
    assert!(pa > 0.6, "prefix-aware {pa}");
    assert!(pa > rr + 0.3 && pa > lo + 0.3, "prefix-aware {pa}, round-robin {rr}, least-outstanding {lo}");
}

/// The command line: --turns and --system-prompt-tokens on simulate, and a preset's conversation
/// ends at the preset's context.
#[test]
fn conversations_and_system_prompts_from_the_command_line() {
    let run = |args: &[&str]| -> serde_json::Value {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_capsim")).args(args).output().unwrap();
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let v = run(&[
        "simulate",
        "--concurrency",
        "4",
        "--turns",
        "4",
        "--input-len",
        "400",
        "--output-len",
        "100",
        "--requests",
        "64",
        "--json",
    ]);
    assert!(v["prefix_hit_rate"].as_f64().unwrap() > 0.4, "{}", v["prefix_hit_rate"]);
    let off = run(&[
        "simulate",
        "--concurrency",
        "4",
        "--turns",
        "4",
        "--input-len",
        "400",
        "--output-len",
        "100",
        "--requests",
        "64",
        "--prefix-caching",
        "off",
        "--json",
    ]);
    assert_eq!(off["prefix_hit_rate"].as_f64(), Some(0.0));
    assert!(off["ttft_s"]["mean"].as_f64().unwrap() > v["ttft_s"]["mean"].as_f64().unwrap());
    let v = run(&["simulate", "--rate", "2", "--system-prompt-tokens", "4000", "--requests", "100", "--json"]);
    assert!(v["cached_tokens_per_request"].as_f64().unwrap() > 3900.0 * 0.95);
    // general-chat in 5 turns: each user message (32768 - 4 x 1024) / 5 tokens, the last turn 32K.
    let c = run(&["capacity", "--preset", "general-chat", "--turns", "5", "--max-load", "16", "--json"]);
    assert!(c["capacity"].as_f64().unwrap() >= 1.0);
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(["capacity", "--preset", "general-chat", "--turns", "40"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--turns"));
}

/// SGLang's radix cache matches token by token (page size 1): where vLLM finds 62 full blocks (992
/// tokens) of a 1,000-token shared prefix, SGLang finds all 1,000; the same prompt again, all but the
/// last token.
#[test]
fn sglang_matches_prefixes_token_by_token() {
    let mut f = default_profile().file.clone();
    f.engine =
        capsim::profile::EngineSettings { kind: Some(capsim::profile::EngineKind::Sglang), ..Default::default() };
    let p = f.resolve("test", &capsim::catalog::Catalog::builtin()).unwrap();
    assert_eq!(p.engine.block_size_tokens, 1);
    let w = Workload::trace(vec![rec(0.0, 1000, 8, &[1, 2]), rec(30.0, 1600, 8, &[1, 2, 3, 4])], 0, 0).unwrap();
    assert_eq!(cached(&run(&p, &w), 1), 1000);
    let w = Workload::trace(vec![rec(0.0, 1024, 8, &[1, 2]), rec(30.0, 1024, 8, &[1, 2])], 0, 0).unwrap();
    assert_eq!(cached(&run(&p, &w), 1), 1023);
    assert_eq!(cached(&run(&caching(&p, false), &w), 1), 0);
}

/// A plain trace with session ids: a session's request extends its previous one (prompt and reply),
/// so it finds the full blocks of what the previous one computed (1,000 + 199 tokens: 74 blocks);
/// another session's request finds nothing.
#[test]
fn a_trace_with_session_ids_hits_the_previous_turn() {
    let t = capsim::workload::trace::parse_csv(
        "s.csv",
        "arrival_s,input_tokens,output_tokens,session_id\n0,1000,200,alice\n15,1000,50,bob\n30,1500,100,alice\n",
    )
    .unwrap();
    assert!(t.records[0].session.is_some() && t.records[0].session == t.records[2].session);
    let out = run(&default_profile(), &Workload::trace(t.records, 0, 0).unwrap());
    assert_eq!((cached(&out, 0), cached(&out, 1), cached(&out, 2)), (0, 0, 74 * 16));
}
