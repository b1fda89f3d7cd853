//! The corpus protocols in closed form: every held-out GPU, model and engine predicted by the closed
//! form of a model learned on the other points (no simulation pass), in a minute or two instead of
//! the replays' half hour. A development aid for changes to the learned step model: the closed form
//! is what the fit minimizes, so a structural change that does not move these numbers will not move
//! the replayed protocols either. `cargo run --release --example corpus_lab [-- --csv DIR]`.

use capsim::calibrate::corpus::{closed_form, fit_with, median};
use capsim::corpus::Experiment;
use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let csv_dir = args.iter().position(|a| a == "--csv").and_then(|i| args.get(i + 1)).cloned();
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    let catalog = capsim::catalog::Catalog::builtin();
    let ex = capsim::corpus::load(&catalog, None)?;
    let plain = ex.plain();
    type Key = fn(&Experiment) -> String;
    let protocols: [(&str, Option<Key>); 5] = [
        ("in-sample", None),
        // Every point fitted, none given its deployment's own residual: what the shared levels alone
        // explain, the floor of every held-out protocol.
        ("in-sample-shared", None),
        ("leave-one-gpu-out", Some(|e| e.gpu.clone())),
        ("leave-one-model-out", Some(|e| e.model.clone())),
        ("leave-one-engine-out", Some(|e| e.engine.as_str().to_string())),
    ];
    for (name, key) in protocols {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        let mut rows: Vec<(String, &Experiment, f64, f64)> = Vec::new();
        match key {
            None => {
                let m = fit_with(&catalog, &plain, name, 0)?.model;
                for e in &plain {
                    let (t, p) = closed_form(&catalog, &m, e, name == "in-sample")?;
                    rows.push(("all".into(), e, t, p));
                }
            }
            Some(k) => {
                let mut members: Vec<String> = plain.iter().map(|e| k(e)).collect();
                members.sort();
                members.dedup();
                for mem in &members {
                    let train: Vec<&Experiment> = plain.iter().filter(|e| &k(e) != mem).copied().collect();
                    let m = fit_with(&catalog, &train, name, 0)?.model;
                    for e in plain.iter().filter(|e| &k(e) == mem) {
                        let (t, p) = closed_form(&catalog, &m, e, false)?;
                        rows.push((mem.clone(), e, t, p));
                    }
                }
            }
        }
        let mut members: Vec<String> = rows.iter().map(|r| r.0.clone()).collect();
        members.sort();
        members.dedup();
        members.push("ALL".into());
        println!("== {name}");
        for mem in &members {
            let sel = rows.iter().filter(|r| mem == "ALL" || &r.0 == mem);
            let (mut at, mut st, mut ap, mut sp) = (vec![], vec![], vec![], vec![]);
            for (_, e, t, p) in sel {
                if let Some((_, m)) = e.point.ttft_ms {
                    at.push((t / (m * 1e-3) - 1.0).abs() * 100.0);
                    st.push((t / (m * 1e-3) - 1.0) * 100.0);
                }
                if let Some((_, m)) = e.point.tpot_ms {
                    ap.push((p / (m * 1e-3) - 1.0).abs() * 100.0);
                    sp.push((p / (m * 1e-3) - 1.0) * 100.0);
                }
            }
            println!(
                "  {mem:<24} n {:>5}  TTFT |e| {:>6.1}% (bias {:>+6.1}%)   TPOT |e| {:>6.1}% (bias {:>+6.1}%)",
                at.len().max(ap.len()),
                median(&mut at),
                median(&mut st),
                median(&mut ap),
                median(&mut sp)
            );
        }
        if let Some(dir) = &csv_dir {
            let mut f = std::fs::File::create(format!("{dir}/{name}.csv"))?;
            writeln!(f, "member,id,client,gpu,model,engine,version,dtype,tp,ep,isl,osl,conc,ttft_meas,ttft_pred,tpot_meas,tpot_pred")?;
            for (mem, e, t, p) in &rows {
                let pt = &e.point;
                writeln!(
                    f,
                    "{mem},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    pt.id.replace(',', ";"),
                    pt.client.as_str(),
                    e.gpu,
                    e.model,
                    e.engine.as_str(),
                    pt.engine_version.replace(',', ";"),
                    e.deployment.weight_dtype,
                    e.deployment.tensor_parallel,
                    e.deployment.expert_parallel,
                    pt.isl,
                    pt.osl,
                    pt.concurrency,
                    pt.ttft_ms.map_or(f64::NAN, |x| x.1 * 1e-3),
                    t,
                    pt.tpot_ms.map_or(f64::NAN, |x| x.1 * 1e-3),
                    p
                )?;
            }
        }
    }
    Ok(())
}
