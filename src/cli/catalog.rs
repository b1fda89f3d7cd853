//! `capsim gpus`, `capsim models`, `capsim profiles`, `capsim points`: the catalogs and data as tables.

use capsim::catalog::Catalog;
use capsim::data::{self, flags};
use capsim::error::{Error, Result};
use capsim::profile::{ProfileFile, BUILTIN_PROFILES};
use capsim::report::{num, table};
use capsim::units::Dtype;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct GpusArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Extra GPU catalog file that adds to or overrides the built-in one.
    #[arg(long)]
    pub gpus_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ModelsArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also show a config.json that is not in the catalog.
    #[arg(long)]
    pub model: Option<String>,
}

#[derive(Args, Debug)]
pub struct ProfilesArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct PointsArgs {
    /// Points CSV to check (default: the embedded calibration/points.csv).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Recompute the physics and consistency flags and write the CSV to this path.
    #[arg(long)]
    pub write: Option<PathBuf>,
    /// Check the public corpus instead (calibration/corpus, embedded; or a folder laid out like it):
    /// how many points capsim replays, and the others counted by the reason it cannot yet.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["data", "write"])]
    #[allow(clippy::option_option)]
    pub corpus: Option<Option<PathBuf>>,
    /// With --corpus: list every refused point with its reason.
    #[arg(long, requires = "corpus")]
    pub list: bool,
    /// With --corpus: print JSON (counts by reason, by set and by client; with --list every refused point).
    #[arg(long, requires = "corpus")]
    pub json: bool,
}

pub fn gpus(a: GpusArgs) -> Result<()> {
    let mut c = Catalog::builtin();
    if let Some(f) = &a.gpus_file {
        c.add_gpu_file(f)?;
    }
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!(c
                .gpus
                .iter()
                .map(|g| json!({
            "name": g.name, "family": g.family, "memory_gb": g.memory_gb, "hbm_bandwidth_tb_s": g.hbm_bandwidth_tb_s,
            "bf16_tflops": g.bf16_tflops, "fp8_tflops": g.fp8_tflops, "fp4_tflops": g.fp4_tflops, "tdp_w": g.tdp_w, "source": g.source}))
                .collect::<Vec<_>>()))
            .expect("json")
        )?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = c
        .gpus
        .iter()
        .map(|g| {
            vec![
                g.name.clone(),
                num(g.memory_gb, 3),
                num(g.hbm_bandwidth_tb_s, 3),
                num(g.bf16_tflops, 4),
                g.fp8_tflops.map_or("-".into(), |v| num(v, 4)),
                g.fp4_tflops.map_or("-".into(), |v| num(v, 4)),
                num(g.tdp_w, 4),
                g.source.clone(),
            ]
        })
        .collect();
    out!(
        "{}",
        table(&["gpu", "memory_gb", "hbm_tb_s", "bf16_tflops", "fp8_tflops", "fp4_tflops", "tdp_w", "source"], &rows)
    )?;
    Ok(())
}

pub fn models(a: ModelsArgs) -> Result<()> {
    let c = Catalog::builtin();
    let mut archs: Vec<(capsim::catalog::ModelArch, String)> =
        c.models.iter().map(|m| (m.arch.clone(), m.entry.source.clone())).collect();
    if let Some(m) = &a.model {
        archs.push((c.model(m)?, m.clone()));
    }
    let mib = 1024.0 * 1024.0;
    if a.json {
        let v: Vec<_> = archs
            .iter()
            .map(|(m, src)| {
                json!({
                    "name": m.name, "model_type": m.model_type, "kind": m.kind(), "layers": m.n_layers,
                    "full_attention_layers": m.n_full_attn_layers, "linear_attention_layers": m.n_linear_layers,
                    "sliding_attention_layers": m.n_sliding_layers,
                    "params_total": m.params_total(), "params_active": m.params_active(),
                    "weight_bytes_bf16": m.weight_bytes(Dtype::Bf16), "weight_bytes_fp8": m.weight_bytes(Dtype::Fp8),
                    "kv_bytes_per_token_bf16": m.kv_bytes_per_token(Dtype::Bf16), "kv_bytes_per_token_fp8": m.kv_bytes_per_token(Dtype::Fp8),
                    "linear_state_bytes_bf16": m.linear_state_bytes(Dtype::Bf16), "linear_state_bytes_fp32": m.linear_state_bytes(Dtype::Fp32),
                    "prefill_flops_per_token_at_0": m.prefill_flops_per_token(0.0),
                    "attention_flops_per_token_pair": m.attn_flops_per_token_pair(),
                    "experts": m.moe.as_ref().map(|x| x.n_experts), "experts_per_token": m.moe.as_ref().map(|x| x.n_experts_per_token),
                    "experts_touched_b16": m.experts_touched(16.0), "experts_touched_b64": m.experts_touched(64.0),
                    "max_context": m.max_context, "source": src,
                    "attention": if m.mla.is_some() { "mla" } else { "gqa" },
                    "sliding_window": m.sliding_window, "moe_layers": m.n_moe_layers(),
                    "checkpoint_weight_dtype": m.weight_dtype_native, "checkpoint_kv_dtype": m.kv_dtype_native,
                    "expert_dtype": m.expert_dtype_native,
                })
            })
            .collect();
        outln!("{}", serde_json::to_string_pretty(&v).expect("json"))?;
        return Ok(());
    }
    let rows: Vec<Vec<String>> = archs
        .iter()
        .map(|(m, _)| {
            vec![
                m.name.clone(),
                m.kind().into(),
                format!("{}/{}/{}", m.n_full_attn_layers, m.n_linear_layers, m.n_sliding_layers),
                num(m.params_total() as f64 / 1e9, 3),
                num(m.params_active() as f64 / 1e9, 3),
                num(m.kv_bytes_per_token(Dtype::Bf16), 6),
                if m.linear.is_some() { format!("{:.1}", m.linear_state_bytes(Dtype::Bf16) / mib) } else { "-".into() },
                m.moe.as_ref().map_or("-".into(), |x| format!("{}/{}", x.n_experts_per_token, x.n_experts)),
                num(m.prefill_flops_per_token(0.0) / 1e9, 3),
                m.max_context.to_string(),
            ]
        })
        .collect();
    out!(
        "{}",
        table(
            &[
                "model",
                "kind",
                "full/linear/sliding",
                "params_b",
                "active_b",
                "kv_bytes_tok_bf16",
                "state_mib_bf16",
                "experts k/E",
                "gflop_tok",
                "max_ctx"
            ],
            &rows
        )
    )?;
    Ok(())
}

pub fn profiles(a: ProfilesArgs) -> Result<()> {
    let catalog = Catalog::builtin();
    let mut rows = Vec::new();
    let mut js = Vec::new();
    for (file, text) in BUILTIN_PROFILES {
        let f = ProfileFile::parse(file, text)?;
        let p = f.resolve(file, &catalog)?;
        let fit = f.fit.clone().unwrap_or_default();
        rows.push(vec![
            f.name.clone(),
            p.arch.name.clone(),
            p.gpu.name.clone(),
            p.engine.kind.as_str().into(),
            f.provenance.source_report.clone(),
            if f.fit.is_some() { format!("{:.1}%", fit.median_abs_error_pct) } else { "-".into() },
            if f.fit.is_some() { format!("{:.1}%", fit.p90_abs_error_pct) } else { "-".into() },
            if f.fit.is_some() { (if fit.physics_ok { "ok" } else { "VIOLATED" }).into() } else { "-".into() },
            f.provenance.method.chars().take(40).collect(),
        ]);
        js.push(json!({"file": file, "name": f.name, "model": p.arch.name, "gpu": p.gpu.name, "engine": p.engine.kind.as_str(),
            "source_report": f.provenance.source_report, "method": f.provenance.method, "fit": f.fit,
            "kv_capacity_tokens": p.engine.kv_capacity_tokens}));
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&js).expect("json"))?;
    } else {
        out!(
            "{}",
            table(
                &[
                    "profile",
                    "model",
                    "gpu",
                    "engine",
                    "source_report",
                    "fit_med_err",
                    "fit_p90_err",
                    "physics",
                    "method"
                ],
                &rows
            )
        )?;
    }
    Ok(())
}

pub fn points(a: PointsArgs) -> Result<()> {
    let catalog = Catalog::builtin();
    if let Some(dir) = &a.corpus {
        return corpus_points(&catalog, dir.as_deref(), a.list, a.json);
    }
    let metas = data::report_metas()?;
    let mut pts = data::load_points(a.data.as_deref())?;
    let before: Vec<Vec<String>> = pts.iter().map(|p| p.flags.clone()).collect();
    flags::refresh_flags(&mut pts, &catalog, &metas);
    let changed = pts.iter().zip(&before).filter(|(p, b)| &p.flags != *b).count();
    let flagged = pts.iter().filter(|p| p.is_flagged()).count();
    outln!("{} points, {} flagged, {} whose computed flags differ from the file", pts.len(), flagged, changed)?;
    for p in pts.iter().filter(|p| p.is_flagged()) {
        outln!(
            "line {:>3} {} {} c={} {}={}: {}",
            p.line,
            &p.report[..3],
            p.scenario,
            p.concurrency.map_or("-".into(), |c| c.to_string()),
            p.metric,
            data::format_value(p.value),
            p.flags.join(" | ")
        )?;
    }
    if let Some(path) = &a.write {
        let text = data::write_points(&pts);
        std::fs::write(path, text).map_err(|err| Error::Io { path: path.display().to_string(), err })?;
        outln!("wrote {}", path.display())?;
    }
    Ok(())
}

/// `capsim points --corpus`: the corpus's points expressed, the rest counted by reason.
fn corpus_points(catalog: &Catalog, dir: Option<&std::path::Path>, list: bool, as_json: bool) -> Result<()> {
    let e = capsim::corpus::load(catalog, dir)?;
    let total = e.total();
    let counts = e.counts();
    let by = |f: &dyn Fn(&capsim::measured::corpus::CorpusPoint) -> String| {
        let mut m: std::collections::BTreeMap<String, (usize, usize)> = Default::default();
        for x in &e.experiments {
            m.entry(f(&x.point)).or_default().0 += 1;
        }
        for (p, _) in &e.refused {
            m.entry(f(p)).or_default().1 += 1;
        }
        m
    };
    let sets = by(&|p| p.set.to_string());
    // By the catalog's GPU: the sets name one GPU several ways (`b200`, `b200_sxm`).
    let gpus = by(&|p| capsim::corpus::catalog_gpu_name(catalog, &p.gpu));
    let clients = by(&|p| p.client.as_str().to_string());
    let with_recipes = e.experiments.iter().filter(|x| x.point.pd_launch.is_some()).count();
    if as_json {
        let refused: Vec<_> = if list {
            e.refused
                .iter()
                .map(|(p, r)| {
                    // A file that is one point has no line: null, not 0.
                    let line = (p.line > 0).then_some(p.line);
                    let mut v = json!({"id": p.id, "file": p.file, "line": line, "reason": r.label()});
                    if let capsim::corpus::Refusal::Duplicate(d) = r {
                        v["copy_of"] = json!(d.of);
                    }
                    v
                })
                .collect()
        } else {
            vec![]
        };
        let table = |m: &std::collections::BTreeMap<String, (usize, usize)>| {
            m.iter().map(|(k, (a, b))| json!({"name": k, "replayed": a, "refused": b})).collect::<Vec<_>>()
        };
        outln!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "points": total,
                "replayed": e.experiments.len(),
                "refused": e.refused.len(),
                "refused_by_reason": counts.iter().map(|(r, n)| json!({"reason": r, "points": n})).collect::<Vec<_>>(),
                "by_set": table(&sets),
                "by_gpu": table(&gpus),
                "by_client": table(&clients),
                "refused_points": refused,
                "replayed_with_pd_recipes": with_recipes,
            }))
            .expect("json")
        )?;
        return Ok(());
    }
    outln!("{total} corpus points: {} replayed, {} not expressible yet", e.experiments.len(), e.refused.len())?;
    outln!(
        "{with_recipes} replayed disaggregated points run the pools their recipes launched (calibration/corpus/inferencex-dsr1/pd_recipes.json)"
    )?;
    outln!()?;
    outln!("not expressible, by reason:")?;
    for (r, n) in &counts {
        outln!("  {n:>5}  {r}")?;
    }
    outln!()?;
    outln!("by set (replayed / refused):")?;
    for (k, (a, b)) in &sets {
        outln!("  {k:<18} {a:>5} / {b}")?;
    }
    outln!("by GPU (replayed / refused):")?;
    for (k, (a, b)) in &gpus {
        outln!("  {k:<18} {a:>5} / {b}")?;
    }
    outln!("by client (replayed / refused):")?;
    for (k, (a, b)) in &clients {
        outln!("  {k:<18} {a:>5} / {b}")?;
    }
    if list {
        outln!()?;
        for (p, r) in &e.refused {
            // A point of its own file (InferenceX's) is named by the file; a CSV row by file:line and id.
            let at = match (p.line > 0, p.id == p.file) {
                (true, _) => format!("{}:{}  {}", p.file, p.line, p.id),
                (false, true) => p.file.clone(),
                (false, false) => format!("{}  {}", p.file, p.id),
            };
            match r {
                capsim::corpus::Refusal::Duplicate(d) => outln!("{at}  {}: {}", r.label(), d.of)?,
                _ => outln!("{at}  {}", r.label())?,
            }
        }
    }
    Ok(())
}
