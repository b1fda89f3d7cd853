//! The memory bound: as the work bounds refuse a run that would not end (workload::MAX_REQUESTS and
//! the others), a run whose estimated peak memory ([`crate::sim::memory_estimate`]) exceeds what the
//! machine has is refused before it starts, with the estimate and the limit in the message, instead
//! of aborting when an allocation fails halfway.
//!
//! The limit is `CAPSIM_MEMORY_GB` when set (gigabytes, 1e9 bytes), else the memory available to
//! new allocations without swapping (`MemAvailable` in /proc/meminfo, Linux), else 8 GB. It is read
//! once per process. Runs that fit print the same results whatever the limit.

use crate::error::{Error, Result};
use crate::sim::MemoryEstimate;
use std::sync::OnceLock;

/// Where the limit comes from, when neither the variable nor /proc/meminfo gives one.
const FALLBACK_BYTES: u64 = 8_000_000_000;

/// The bytes a run may hold, and where the figure comes from.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    pub bytes: u64,
    pub source: String,
}

/// The limit of this process (read once).
pub fn limit() -> Result<Limit> {
    static LIMIT: OnceLock<std::result::Result<Limit, String>> = OnceLock::new();
    LIMIT
        .get_or_init(read_limit)
        .clone()
        .map_err(|msg| Error::input("environment", None, Some("CAPSIM_MEMORY_GB"), msg))
}

fn read_limit() -> std::result::Result<Limit, String> {
    if let Ok(v) = std::env::var("CAPSIM_MEMORY_GB") {
        let gb: f64 = v.trim().parse().map_err(|_| format!("must be a number of gigabytes, got `{v}`"))?;
        if !(gb.is_finite() && gb > 0.0 && gb <= 1e9) {
            return Err(format!("must be a positive number of gigabytes up to 1e9, got `{v}`"));
        }
        return Ok(Limit { bytes: (gb * 1e9) as u64, source: "CAPSIM_MEMORY_GB".into() });
    }
    let available = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| {
        let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb.saturating_mul(1024))
    });
    Ok(match available {
        Some(bytes) => Limit { bytes, source: "MemAvailable in /proc/meminfo; CAPSIM_MEMORY_GB sets another".into() },
        None => Limit {
            bytes: FALLBACK_BYTES,
            source: "capsim's default where /proc/meminfo cannot be read; CAPSIM_MEMORY_GB sets another".into(),
        },
    })
}

/// Bytes as a reader takes them: "35.1 GB", "820 MB".
pub fn fmt_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e12 {
        format!("{:.1} TB", b / 1e12)
    } else if b >= 1e9 {
        format!("{:.1} GB", b / 1e9)
    } else {
        format!("{:.0} MB", b / 1e6)
    }
}

/// Refuse a run of `copies` simulations held at once (the seeds of a capacity point, which run side
/// by side) whose estimate exceeds the limit. `what` names the run in the message.
pub fn check(est: &MemoryEstimate, copies: u64, what: &str) -> Result<()> {
    let limit = limit()?;
    let need = est.bytes().saturating_mul(copies.max(1));
    if need <= limit.bytes {
        return Ok(());
    }
    let total = est.bytes();
    let parts: Vec<String> = est
        .parts
        .iter()
        .filter(|p| p.1 > 0 && p.1 >= total / 100)
        .map(|(k, b)| format!("{k} {}", fmt_bytes(*b)))
        .collect();
    let copies = if copies > 1 { format!("; {copies} such runs side by side") } else { String::new() };
    Err(Error::Infeasible(format!(
        "{what} needs about {} of memory at its peak, more than the limit of {} ({}): {} ({}{copies}); send fewer requests (--requests, --burst, --duration, a lower --target-rate or --max-replicas) or split the run",
        fmt_bytes(need),
        fmt_bytes(limit.bytes),
        limit.source,
        est.load,
        parts.join(", "),
    )))
}
