use capsim::workload::trace::{parse_csv, parse_jsonl};
use capsim::workload::{
    stream_rng, Arrivals, Generator, LengthDist, LoadAxis, LoadTemplate, Process, RateSchedule, WorkloadSpec,
};

#[test]
fn reads_azure_burstgpt_mooncake_and_capsim_traces() {
    let az = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:45.1805900+00:00,100,10\n";
    let t = parse_csv("az.csv", az).unwrap();
    assert_eq!(t.format, "azure");
    assert_eq!(t.records[0].input_tokens, 100, "sorted by time");
    assert!((t.records[1].arrival_s - 1.5).abs() < 1e-6);
    let bg = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n7,GPT-4,100,0,100,Conversation log\n";
    let t = parse_csv("bg.csv", bg).unwrap();
    assert_eq!((t.records.len(), t.skipped_failures), (1, 1));
    let mc = "{\"timestamp\": 0, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": [0]}\n{\"timestamp\": 2500, \"input_length\": 10, \"output_length\": 5}\n";
    let t = parse_jsonl("mc.jsonl", mc).unwrap();
    assert_eq!(t.records[1].arrival_s, 2.5);
    let own = "arrival_s,input_tokens,output_tokens\n0.5,10,20\n";
    assert_eq!(parse_csv("own.csv", own).unwrap().records[0].output_tokens, 20);
}

#[test]
fn bad_traces_name_file_line_and_field() {
    let e = parse_csv("t.csv", "arrival_s,input_tokens,output_tokens\n0.5,-3,20\n").unwrap_err().to_string();
    assert!(e.contains("t.csv, line 2, field `input_tokens`"), "{e}");
    let e = parse_csv("t.csv", "arrival_s,input_tokens,output_tokens\nsoon,3,20\n").unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("arrival_s"), "{e}");
    // A short row names its line once, with both widths (the csv crate's own record and line not
    // repeated).
    let e = parse_csv("t.csv", "arrival_s,input_tokens,output_tokens\n0.5,3,20\n1.0,4\n").unwrap_err().to_string();
    assert!(e.contains("line 3: malformed row: 2 fields where the header has 3") && !e.contains("record"), "{e}");
    let e = parse_csv("t.csv", "when,input_tokens,output_tokens\n1,3,20\n").unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("arrival"), "{e}");
    let e = parse_jsonl("t.jsonl", "{\"timestamp\": 1, \"input_length\": 5}\n").unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("output_length"), "{e}");
    let e = parse_jsonl("t.jsonl", "{oops\n").unwrap_err().to_string();
    assert!(e.contains("t.jsonl, line 1") && e.contains("JSON"), "{e}");
}

#[test]
fn gamma_burstiness_keeps_the_mean_rate_and_changes_the_spread() {
    let cv = |process: Process, b: f64| {
        let mut t = LoadTemplate::fixed(1, 1);
        t.process = process;
        t.burstiness = b;
        t.requests = Some(50_000);
        let w = t.at(LoadAxis::Rate, 10.0).unwrap();
        let mut g = Generator::new(&w, 5);
        let Arrivals::OpenLoop { rate, .. } = &w.spec.arrivals else { unreachable!() };
        let mut last = 0.0;
        let gaps: Vec<f64> = (0..50_000)
            .map(|_| {
                let t = g.next_open_arrival_s(process, rate);
                let d = t - last;
                last = t;
                d
            })
            .collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        (mean, var.sqrt() / mean)
    };
    let (m, c) = cv(Process::Poisson, 1.0);
    assert!((m - 0.1).abs() < 0.003 && (c - 1.0).abs() < 0.03, "{m} {c}");
    // Gamma with shape b: coefficient of variation 1/sqrt(b).
    let (m, c) = cv(Process::Gamma, 0.25);
    assert!((m - 0.1).abs() < 0.005 && (c - 2.0).abs() < 0.1, "{m} {c}");
    let (m, c) = cv(Process::Constant, 1.0);
    assert!((m - 0.1).abs() < 1e-9 && c < 1e-6);
}

#[test]
fn lognormal_lengths_have_the_requested_moments() {
    let mut t = LoadTemplate::fixed(1, 1);
    t.classes[0].input = LengthDist::Lognormal { mean: 2000.0, sd: 1000.0 };
    t.requests = Some(1);
    let w = t.at(LoadAxis::Burst, 1.0).unwrap();
    let mut g = Generator::new(&w, 1);
    let xs: Vec<f64> = (0..40_000).map(|_| g.lengths().0 as f64).collect();
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
    assert!((mean - 2000.0).abs() < 30.0 && (sd - 1000.0).abs() < 40.0, "{mean} {sd}");
    let _ = stream_rng(1, 2);
}

#[test]
fn bad_workloads_are_refused_with_the_field() {
    let mut t = LoadTemplate::fixed(1, 1);
    t.classes[0].input = LengthDist::Uniform { min: 10, max: 5 };
    let e = t.at(LoadAxis::Burst, 3.0).unwrap_err().to_string();
    assert!(e.contains("classes[0].input"), "{e}");
    let e = LoadTemplate::fixed(1, 1).at(LoadAxis::Rate, f64::NAN).unwrap_err().to_string();
    assert!(e.contains("rate"), "{e}");
    let spec = WorkloadSpec {
        arrivals: Arrivals::OpenLoop {
            process: Process::Poisson,
            rate: RateSchedule { segments: vec![(5.0, 1.0)] },
            burstiness: 1.0,
        },
        classes: LoadTemplate::fixed(1, 1).classes,
        requests: Some(10),
        duration_s: None,
        warmup_requests: 0,
        cooldown_requests: 0,
        warmup_s: 0.0,
        conversation: None,
    };
    assert!(spec.validate().unwrap_err().to_string().contains("time 0"));
}

#[test]
fn a_daily_curve_integrates_to_its_mean_rate() {
    // Quiet nights, a lunch peak: 24 hourly multipliers compressed into a 2,400 s "day".
    let mut m = [0.2; 24];
    for (h, x) in m.iter_mut().enumerate().take(18).skip(8) {
        *x = if h == 12 || h == 13 { 1.0 } else { 0.6 };
    }
    let r = RateSchedule::daily(10.0, &m, 2400.0);
    let expect = 10.0 * m.iter().sum::<f64>() / 24.0;
    assert!((r.mean_rate(2400.0) - expect).abs() < 1e-9);
    let mut t = LoadTemplate::fixed(1, 1);
    t.requests = Some(1);
    let spec = WorkloadSpec {
        arrivals: Arrivals::OpenLoop { process: Process::Poisson, rate: r.clone(), burstiness: 1.0 },
        classes: t.classes.clone(),
        requests: None,
        duration_s: Some(2400.0),
        warmup_requests: 0,
        cooldown_requests: 0,
        warmup_s: 0.0,
        conversation: None,
    };
    let w = spec.validate().unwrap();
    let mut g = Generator::new(&w, 3);
    let (mut lunch, mut night) = (0, 0);
    loop {
        let at = g.next_open_arrival_s(Process::Poisson, &r);
        if at >= 2400.0 {
            break;
        }
        match (at / 100.0) as usize {
            12 | 13 => lunch += 1,
            0..=5 => night += 1,
            _ => {}
        }
    }
    // Expected 2 x 100 s x 10/s = 2000 at lunch, 6 x 100 s x 2/s = 1200 at night.
    assert!((lunch as f64 - 2000.0).abs() < 150.0 && (night as f64 - 1200.0).abs() < 120.0, "{lunch} {night}");
}

/// A closed loop of one fixed output length L is simulated with outputs drawn from [floor(0.98 L), L]
/// (workload::TIMING_NOISE_LENGTH_SPREAD); other loads and other distributions keep their lengths, and
/// `uniform:L:L` keeps exactly L.
#[test]
fn a_closed_loop_of_one_output_length_drifts() {
    use capsim::workload::{LengthDist, LoadAxis, LoadTemplate};
    let t = LoadTemplate::fixed(1024, 1024);
    let closed = t.at(LoadAxis::Concurrency, 64.0).unwrap();
    assert_eq!(closed.spec.classes[0].output, LengthDist::Uniform { min: 1003, max: 1024 });
    assert_eq!(closed.spec.classes[0].input, LengthDist::fixed(1024), "inputs are as given");
    for (axis, load) in [(LoadAxis::Rate, 2.0), (LoadAxis::Burst, 8.0)] {
        assert_eq!(t.at(axis, load).unwrap().spec.classes[0].output, LengthDist::fixed(1024), "{axis:?}");
    }
    let mut exact = t.clone();
    exact.classes[0].output = LengthDist::Uniform { min: 1024, max: 1024 };
    let w = exact.at(LoadAxis::Concurrency, 64.0).unwrap();
    assert_eq!(w.spec.classes[0].output, LengthDist::Uniform { min: 1024, max: 1024 });
    // Never past the stated length (a request at the model's context limit stays within it), at least
    // a token short; one token stays one.
    assert_eq!(LengthDist::fixed(10).with_timing_noise(), LengthDist::Uniform { min: 9, max: 10 });
    assert_eq!(LengthDist::fixed(1).with_timing_noise(), LengthDist::fixed(1));
}

/// `capsim ARGS` run from the temporary directory: its standard output, after checking it succeeded.
fn capsim_stdout(args: &[&str]) -> String {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_capsim"))
        .args(args)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// On a measured point (the corpus's NVIDIA row: Llama-3.1-70B FP8 on 4 x H200 under vLLM, 64 clients
/// of 1,024 / 1,024 tokens, mean TTFT 0.265 s) `capsim simulate` with its plain flags drifts, and the
/// lockstep of exactly equal outputs is what it avoids (0.65 s, +144%). A closed-loop workload file
/// replayed at its own load drifts the same way.
#[test]
fn simulate_of_a_measured_closed_loop_is_not_in_lockstep() {
    let ttft = |output: &str| {
        let out = capsim_stdout(&[
            "simulate",
            "--model",
            "Llama-3.1-70B",
            "--gpu",
            "H200 SXM",
            "--tp",
            "4",
            "--engine",
            "vllm",
            "--precision",
            "fp8",
            "--concurrency",
            "64",
            "--input-len",
            "1024",
            "--output-len",
            output,
            "--requests",
            "768",
            "--json",
        ]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["ttft_s"]["mean"].as_f64().unwrap()
    };
    let measured = 0.2645;
    let (drifting, lockstep) = (ttft("1024"), ttft("uniform:1024:1024"));
    // The table says how the outputs were drawn.
    let text =
        |output: &str| capsim_stdout(&["simulate", "--concurrency", "4", "--requests", "8", "--output-len", output]);
    assert!(
        text("1024").contains("closed loop: outputs drawn up to 2% short of the fixed length (1024 -> 1003..=1024)")
    );
    assert!(!text("uniform:1024:1024").contains("closed loop: outputs drawn"));
    assert!((drifting / measured - 1.0).abs() < 0.3, "mean TTFT {drifting} s against {measured} s measured");
    assert!(lockstep > 2.0 * measured, "lockstep mean TTFT {lockstep} s");
    // A workload file's closed loop at its own load (no --concurrency) draws as the flags' does.
    let dir = crate::Scratch::new("closed-loop");
    let file = dir.join("closed-loop.toml");
    std::fs::write(
        &file,
        "requests = 40\n[arrivals]\nkind = \"closed_loop\"\nclients = 4\n[[classes]]\nweight = 1.0\n\
         input = { dist = \"fixed\", value = 1000 }\noutput = { dist = \"fixed\", value = 300 }\n",
    )
    .unwrap();
    let out = capsim_stdout(&["simulate", "--workload", file.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["scenario"]["workload"]["classes"][0]["output"],
        serde_json::json!({"dist": "uniform", "min": 294, "max": 300})
    );
}
