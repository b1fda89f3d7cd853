//! `capsim report`: a benchmark report for a deployment (or several side by side) as one
//! self-contained HTML file, or Markdown with its charts beside it.

use super::ProfileArgs;
use capsim::datasheet::{self, Datasheet};
use capsim::error::{Error, Result};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Html,
    Md,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    #[command(flatten)]
    pub profile: ProfileArgs,
    /// Put these GPUs side by side (comma-separated catalog names); each is the profile moved there
    /// (an extrapolation where it was not measured).
    #[arg(long, value_delimiter = ',', help_heading = "Report")]
    pub gpus: Option<Vec<String>>,
    /// Context lengths of the curves, comma-separated [default: the profile's measured ones, else
    /// 1024,8192,32768]
    #[arg(long, value_delimiter = ',', help_heading = "Report")]
    pub contexts: Option<Vec<u32>>,
    /// Output tokens of the curves [default: the measured ones, else 256]
    #[arg(long, help_heading = "Report")]
    pub output_len: Option<u32>,
    /// Concurrencies of the curves, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64,128", help_heading = "Report")]
    pub concurrency: Vec<u32>,
    /// The mean TTFT (s) that bounds the max safe queue depth (bursts of 1024 in / 256 out).
    #[arg(long, default_value_t = 3.0, help_heading = "Report")]
    pub burst_ttft_s: f64,
    /// Seed of every simulation in the report.
    #[arg(long, default_value_t = 0, help_heading = "Report")]
    pub seed: u64,
    /// The file to write (report.html, or report.md with its charts in report_charts/).
    #[arg(long, help_heading = "Output")]
    pub out: PathBuf,
    /// html (one self-contained file) or md (Markdown and SVG files).
    #[arg(long, value_enum, default_value = "html", help_heading = "Output")]
    pub format: Format,
}

pub fn run(a: ReportArgs) -> Result<()> {
    super::check_output_file("--out", &a.out)?;
    if a.concurrency.is_empty() || a.concurrency.iter().any(|&c| c == 0 || c > 4096) {
        return Err(Error::flag("--concurrency", "each concurrency must be in 1..=4096"));
    }
    if let Some(c) = &a.contexts {
        if c.is_empty() || c.iter().any(|&x| x == 0 || x > capsim::workload::MAX_REQUEST_TOKENS) {
            return Err(Error::flag("--contexts", "each context must be a positive token count"));
        }
    }
    if a.output_len == Some(0) {
        return Err(Error::flag("--output-len", "must be at least 1"));
    }
    if !(a.burst_ttft_s.is_finite() && a.burst_ttft_s > 0.0) {
        return Err(Error::flag("--burst-ttft-s", "must be a positive number of seconds"));
    }
    let catalog = a.profile.catalog()?;
    let gpus: Vec<Option<String>> = match &a.gpus {
        Some(g) => g.iter().map(|x| Some(x.trim().to_string())).collect(),
        None => vec![None],
    };
    let profiles = gpus
        .iter()
        .map(|g| {
            let mut pa = a.profile.clone();
            pa.gpu = g.clone().or(pa.gpu);
            pa.resolve(&catalog)
        })
        .collect::<Result<Vec<_>>>()?;
    let points = capsim::data::load_points(None)?;
    let o = datasheet::Options {
        contexts: a.contexts.clone(),
        output_tokens: a.output_len,
        concurrencies: a.concurrency.clone(),
        burst_ttft_s: a.burst_ttft_s,
        seed: a.seed,
        ..Default::default()
    };
    let pb = super::progress_bar(profiles.len() as u64, "deployments");
    // Side by side, every deployment on the same contexts: those of the first one that was measured
    // (its points are on the charts), else the first's.
    let first = profiles.iter().position(|p| p.retargeted_from.is_none()).unwrap_or(0);
    let order: Vec<usize> = std::iter::once(first).chain((0..profiles.len()).filter(|&i| i != first)).collect();
    let mut built: Vec<Option<Datasheet>> = vec![None; profiles.len()];
    let mut o = o;
    for i in order {
        let p = &profiles[i];
        pb.set_message(p.gpu.name.clone());
        let d = datasheet::build(p, &o, &points)?;
        if o.contexts.is_none() && !d.curves.is_empty() {
            o.contexts = Some(d.curves.iter().map(|c| c.input_tokens).collect());
            o.output_tokens = Some(d.curves[0].output_tokens);
        }
        built[i] = Some(d);
        pb.inc(1);
    }
    let sheets: Vec<Datasheet> = built.into_iter().map(|d| d.expect("every deployment built")).collect();
    pb.finish_and_clear();
    let command = super::command_line();
    let version = super::version();
    let write = |path: &std::path::Path, text: &str| {
        std::fs::write(path, text).map_err(|err| Error::Io { path: path.display().to_string(), err })
    };
    match a.format {
        Format::Html => write(&a.out, &capsim::report::html::html(&sheets, &command, &version))?,
        Format::Md => {
            let stem = a.out.file_stem().map_or("report".into(), |s| s.to_string_lossy().to_string());
            let dir_name = format!("{stem}_charts");
            let dir = a.out.with_file_name(&dir_name);
            std::fs::create_dir_all(&dir).map_err(|err| Error::Io { path: dir.display().to_string(), err })?;
            let (doc, files) = capsim::report::html::markdown(&sheets, &command, &version, &dir_name);
            for (name, svg) in files {
                write(&dir.join(name), &svg)?;
            }
            write(&a.out, &doc)?;
        }
    }
    eprintln!("wrote {}", a.out.display());
    Ok(())
}
