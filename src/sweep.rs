//! Sweeps: the same workload at many load levels, run in parallel with rayon. Each point's seed is
//! derived from the run's seed and the point's index (never from a thread), and results are collected
//! in index order, so output is byte-identical at any thread count.

use crate::error::Result;
use crate::metrics::{summarize, RequestSlo, Summary};
use crate::profile::Profile;
use crate::sim::{simulate, SimOptions};
use crate::workload::{LoadAxis, LoadTemplate};
use rayon::prelude::*;
use serde::Serialize;

/// The seed of sweep point `index` (SplitMix64 of seed and index).
pub fn point_seed(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepPoint {
    pub axis: LoadAxis,
    pub load: f64,
    pub seed: u64,
    pub summary: Summary,
}

/// Run one load level: the building block of sweeps and capacity searches.
pub fn run_point(
    p: &Profile,
    t: &LoadTemplate,
    axis: LoadAxis,
    load: f64,
    seed: u64,
    slo: &RequestSlo,
) -> Result<SweepPoint> {
    let w = t.at(axis, load)?;
    crate::memory::check(&crate::sim::memory_estimate(p, &w, 1), 1, &format!("the sweep point at {load}"))?;
    let out = simulate(p, &w, seed, SimOptions::default());
    let summary = summarize(&out, w.spec.warmup_requests, w.spec.cooldown_requests, w.spec.warmup_s, slo);
    Ok(SweepPoint { axis, load, seed, summary })
}

/// Run the loads of `indices` in parallel (each seeded from its index in `loads`, so a slice of a
/// sweep gives the same points as the whole); results in the order of `indices`. `tick` is called as
/// each point finishes (a progress bar).
#[allow(clippy::too_many_arguments)]
pub fn run_sweep_at(
    p: &Profile,
    t: &LoadTemplate,
    axis: LoadAxis,
    loads: &[f64],
    indices: &[usize],
    seed: u64,
    slo: &RequestSlo,
    tick: &(dyn Fn() + Sync),
) -> Result<Vec<SweepPoint>> {
    indices
        .par_iter()
        .map(|&i| {
            let r = run_point(p, t, axis, loads[i], point_seed(seed, i as u64), slo);
            tick();
            r
        })
        .collect()
}

/// Run every load in parallel; results in the order of `loads`.
pub fn run_sweep(
    p: &Profile,
    t: &LoadTemplate,
    axis: LoadAxis,
    loads: &[f64],
    seed: u64,
    slo: &RequestSlo,
) -> Result<Vec<SweepPoint>> {
    loads
        .par_iter()
        .enumerate()
        .map(|(i, &load)| run_point(p, t, axis, load, point_seed(seed, i as u64), slo))
        .collect()
}
