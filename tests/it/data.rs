use capsim::catalog::Catalog;
use capsim::data::{self, flags, parse_points, Point};

fn norm_ws(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn points() -> Vec<Point> {
    data::load_points(None).unwrap()
}

/// The value, in the quote's units (s vs ms, millions, thousands), occurs in the quote.
fn value_in_quote(v: f64, quote: &str) -> bool {
    let q = quote.replace(',', "");
    [1.0, 1e3, 1e-3, 1e6, 1e-6].iter().any(|scale| {
        let x = ((v * scale) * 1e9).round() / 1e9;
        q.contains(&data::format_value(x))
    })
}

#[test]
fn every_quote_occurs_in_its_source_and_holds_the_value() {
    let pts = points();
    assert!(pts.len() >= 150);
    for p in &pts {
        let src =
            data::report_source(&p.report).unwrap_or_else(|| panic!("line {}: unknown report {}", p.line, p.report));
        // The committed copy under calibration/sources is the embedded one.
        assert!(norm_ws(src).contains(&norm_ws(&p.quote)), "line {}: quote not in {}: {:?}", p.line, p.report, p.quote);
        assert!(value_in_quote(p.value, &p.quote), "line {}: value {} not in quote {:?}", p.line, p.value, p.quote);
    }
}

#[test]
fn sources_are_the_shared_seed_files() {
    for (name, text) in data::REPORT_SOURCES {
        let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/seeds").join(name);
        if let Ok(orig) = std::fs::read_to_string(&shared) {
            assert_eq!(&orig, text, "{name} differs from ../shared/seeds");
        }
    }
}

#[test]
fn every_report_is_present_and_004_is_flagged_duplicate() {
    let pts = points();
    for (name, _) in data::REPORT_SOURCES {
        assert!(pts.iter().any(|p| &p.report == name), "no rows for {name}");
    }
    let dup: Vec<&Point> = pts.iter().filter(|p| p.report.starts_with("004")).collect();
    assert!(!dup.is_empty());
    assert!(dup.iter().all(|p| p.flags.iter().any(|f| f.starts_with("duplicate:"))));
    // Each 004 row has the same number in 002.
    for d in dup {
        assert!(pts.iter().any(|p| p.report.starts_with("002")
            && p.metric == d.metric
            && p.value == d.value
            && p.scenario == d.scenario));
    }
}

#[test]
fn key_numbers_of_each_report_are_recorded() {
    let pts = points();
    let has = |rep: &str, metric: &str, v: f64| {
        pts.iter().any(|p| p.report.starts_with(rep) && p.metric == metric && p.value == v)
    };
    assert!(has("000", "per_user_tok_s", 152.9));
    assert!(has("001", "ttft_s", 47.6));
    assert!(has("001", "per_user_tok_s", 79.9));
    assert!(has("001", "queue_wait_s", 67.4));
    assert!(has("002", "max_safe_queue_depth", 131.0));
    assert!(has("002", "max_safe_queue_depth", 8.0));
    assert!(has("003", "ttft_s", 41.8));
    assert!(has("003", "prefill_tok_s", 24221.0));
}

#[test]
fn computed_flags_in_the_file_are_up_to_date() {
    let catalog = Catalog::builtin();
    let metas = data::report_metas().unwrap();
    let pts = points();
    let mut fresh = pts.clone();
    flags::refresh_flags(&mut fresh, &catalog, &metas);
    for (a, b) in pts.iter().zip(&fresh) {
        assert_eq!(a.flags, b.flags, "line {}: run `capsim points --write calibration/points.csv`", a.line);
    }
    // The README's example: 125 requests of 8K at 4.0 s mean TTFT is flagged by code.
    let p =
        pts.iter().find(|p| p.report.starts_with("001") && p.metric == "ttft_s" && p.concurrency == Some(125)).unwrap();
    assert!(p.flags.iter().any(|f| f.starts_with("inconsistent:")), "{:?}", p.flags);
    // And the file round-trips through the writer unchanged.
    assert_eq!(data::write_points(&pts), data::POINTS_CSV);
}

#[test]
fn physics_check_flags_an_impossible_decode_speed() {
    let catalog = Catalog::builtin();
    let metas = data::report_metas().unwrap();
    let mut pts = points();
    let i = pts
        .iter()
        .position(|p| {
            p.report.starts_with("001")
                && p.metric == "per_user_tok_s"
                && p.scenario == "ctx_256k"
                && p.concurrency == Some(1)
        })
        .unwrap();
    assert!(flags::computed_flags(&pts, i, &catalog, &metas).is_empty());
    // 400 tok/s at 256K context would need 25.7 GB of KV every 2.5 ms: 10 TB/s > 4.8 TB/s.
    pts[i].value = 400.0;
    let f = flags::computed_flags(&pts, i, &catalog, &metas);
    assert!(f.iter().any(|x| x.starts_with("physics:") && x.contains("HBM peak")), "{f:?}");
    // A 256K prefill in 1 s would need over 50 PFLOP/s.
    let j = pts
        .iter()
        .position(|p| {
            p.report.starts_with("001") && p.metric == "ttft_s" && p.scenario == "ctx_256k" && p.concurrency == Some(1)
        })
        .unwrap();
    pts[j].value = 1.0;
    let f = flags::computed_flags(&pts, j, &catalog, &metas);
    assert!(f.iter().any(|x| x.starts_with("physics:") && x.contains("dense peak")), "{f:?}");
}

const HEADER: &str = "report,model,precision,gpu,engine,scenario,input_tokens,output_tokens,load,concurrency,metric,value,approx,aggregation,quote,flag\n";

fn err_of(row: &str) -> String {
    parse_points("bad.csv", &format!("{HEADER}{row}\n")).unwrap_err().to_string()
}

#[test]
fn malformed_points_name_file_line_and_field() {
    let ok = "r.txt,m,fp8,H200 SXM,vllm,s,1024,128,closed_loop,1,ttft_s,0.5,false,value,q,";
    assert!(parse_points("bad.csv", &format!("{HEADER}{ok}\n")).is_ok());
    let e = err_of(&ok.replace(",1024,", ",-1024,"));
    assert!(e.contains("bad.csv, line 2, field `input_tokens`") && e.contains("negative"), "{e}");
    let e = err_of(&ok.replace(",0.5,", ",NaN,"));
    assert!(e.contains("line 2") && e.contains("`value`") && e.contains("finite"), "{e}");
    let e = err_of(&ok.replace(",0.5,", ",fast,"));
    assert!(e.contains("`value`") && e.contains("not a number"), "{e}");
    let e = err_of(&ok.replace("ttft_s", "ttft_hours"));
    assert!(e.contains("`metric`"), "{e}");
    let e = err_of(&ok.replace("closed_loop", "open"));
    assert!(e.contains("`load`"), "{e}");
    let e = err_of("r.txt,m,fp8");
    assert!(e.contains("bad.csv") && e.contains("line 2"), "{e}");
    let e = parse_points("bad.csv", "report,model\n").unwrap_err().to_string();
    assert!(e.contains("line 1") && e.contains("header"), "{e}");
}

#[test]
fn report_metadata_parses_and_names_thresholds() {
    let metas = data::report_metas().unwrap();
    assert_eq!(metas.len(), 5);
    let m1 = metas.iter().find(|m| m.report.starts_with("001")).unwrap();
    assert_eq!(m1.threshold.len(), 5);
    assert!(metas.iter().find(|m| m.report.starts_with("004")).unwrap().duplicate_of.is_some());
}
