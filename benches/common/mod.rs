//! What the benchmarks share.

/// Peak resident memory of this process in MB (VmHWM; NaN where /proc is missing).
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Append one row of figures to benches/results/NAME.csv (header written when the file is new), with
/// the commit the benchmark was built from, so progress is visible over time.
pub fn record(name: &str, header: &str, row: &str) {
    use std::io::Write;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/results");
    if std::fs::create_dir_all(&dir).is_err() {
        return;
    }
    let path = dir.join(format!("{name}.csv"));
    let new = !path.exists();
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&path) {
        if new {
            let _ = writeln!(f, "commit,{header}");
        }
        let _ = writeln!(f, "{},{row}", env!("CAPSIM_GIT_COMMIT"));
        println!("recorded in {}", path.display());
    }
}
