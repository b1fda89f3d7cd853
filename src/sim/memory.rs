//! What a simulation holds in memory at its peak, estimated from its inputs before it runs, so that
//! a run too large for the machine is refused with the estimate ([`crate::memory::check`]) instead
//! of aborting when an allocation fails. Pure, like the rest of the simulator: the limit it is held
//! against is read outside it.
//!
//! The parts, each a count times the size of what is kept per unit:
//! - the records of completed requests (all of them: the summary and `--per-request` need every
//!   one), and the one vector of 8 bytes per request the summary sorts at a time;
//! - the requests in flight at once: a burst's every request, a closed loop's clients, and an open
//!   loop's or a trace's every request (when the load exceeds the engine, all of them wait at once;
//!   the estimate does not assume the load is sustainable);
//! - with a prefix cache, each block it hands out (a block is materialized when first allocated,
//!   sim/prefix.rs): at most the pool, at most the blocks of the distinct content the requests
//!   bring; and the block hashes and block tables of the requests in flight;
//! - for a fleet, the sends dealt to its replicas ahead of time and the records merged into one run.

use super::engine::Live;
use super::prefix::BYTES_PER_BLOCK;
use super::run::{cache_block, Arrived};
use super::step::{BatchShape, StepModel};
use super::RequestRecord;
use crate::profile::Profile;
use crate::workload::{Arrivals, Workload, MAX_REQUESTS};

/// A run's estimated peak memory, by part.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryEstimate {
    /// The load, as the message names it ("a burst of 100000000 requests").
    pub load: String,
    /// Requests the run sends (for a closed loop bounded only by its duration, the most its clients
    /// can send in it).
    pub requests: u64,
    /// Requests held at once (sent and not finished).
    pub in_flight: u64,
    /// (what, bytes), the largest first.
    pub parts: Vec<(&'static str, u64)>,
}

impl MemoryEstimate {
    pub fn bytes(&self) -> u64 {
        self.parts.iter().fold(0u64, |a, p| a.saturating_add(p.1))
    }
}

/// Bytes kept per request in flight besides its content: the engine's slot, the request on its way
/// (the front-end's queue, a fleet's router) and the queues' entries.
const PER_IN_FLIGHT: u64 = (std::mem::size_of::<Live>() + std::mem::size_of::<Arrived>() + 32) as u64;
/// Bytes kept per completed request: its record and the summary's vector.
const PER_RECORD: u64 = std::mem::size_of::<RequestRecord>() as u64 + 8;
/// Bytes per block of a request in flight with a prefix cache: its hash, its id in the block table
/// and in the lookup's guess.
const PER_REQUEST_BLOCK: u64 = 8 + 4 + 4;

fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// The estimate for `w` on `replicas` replicas of `p`.
pub fn memory_estimate(p: &Profile, w: &Workload, replicas: u32) -> MemoryEstimate {
    let spec = &w.spec;
    let turns = spec.conversation.as_ref().map_or(1.0, |c| c.turns.mean().max(1.0));
    let requests = match (w.planned_requests(), &spec.arrivals, spec.duration_s) {
        (Some(n), _, _) => n,
        (None, Arrivals::OpenLoop { rate, .. }, Some(d)) => (rate.mean_rate(d) * d * turns).ceil() as u64,
        (None, Arrivals::ClosedLoop { clients, think_time_s, .. }, Some(d)) => {
            // Each client sends at most one request per (fastest request + think time): its output
            // at the shortest step the engine takes.
            let mut one = BatchShape::default();
            one.add_chunk(0, 1);
            let step_s = StepModel::new(p).step_ns(&one) as f64 * 1e-9;
            let output_min = spec.classes.iter().map(|c| c.output.min()).min().unwrap_or(1).max(1);
            let per_client = d / (output_min as f64 * step_s + think_time_s) + 1.0;
            (per_client * *clients as f64).min(u64::MAX as f64) as u64
        }
        _ => MAX_REQUESTS,
    };
    let in_flight = match &spec.arrivals {
        Arrivals::Burst { n } => *n as u64,
        Arrivals::ClosedLoop { clients, .. } => (*clients as u64).min(requests),
        Arrivals::OpenLoop { .. } | Arrivals::Trace { .. } => requests,
    };
    let load = match &spec.arrivals {
        Arrivals::Burst { n } => format!("a burst of {n} requests"),
        Arrivals::ClosedLoop { clients, .. } => format!("{requests} requests from {clients} clients"),
        Arrivals::OpenLoop { .. } => {
            format!("{requests} requests at an open-loop rate, all waiting at once if it exceeds the engine")
        }
        Arrivals::Trace { .. } => {
            format!("a trace of {requests} requests, all waiting at once if they outpace the engine")
        }
    };
    let fleet = replicas > 1;
    let mut parts = vec![
        ("records of the completed requests", mul(requests, PER_RECORD)),
        ("requests in flight at once", mul(in_flight, PER_IN_FLIGHT)),
    ];
    if fleet {
        let per = std::mem::size_of::<Arrived>() + std::mem::size_of::<RequestRecord>();
        parts.push(("sends dealt to the replicas and records merged", mul(requests, per as u64)));
    }
    let shares = super::arrivals::shares_content(w);
    if let Some(block) = cache_block(p, shares) {
        let block = block as f64;
        let own = w.mean_input_tokens() + w.mean_output_tokens();
        // A request's whole sequence: a conversation turn re-sends its history (half the turns on
        // average, plus the system prompt counted in `own`).
        let sequence = own * (turns + 1.0) / 2.0;
        let distinct = mul(requests, (own / block).ceil() as u64 + 2);
        let pool = mul(p.engine.kv_capacity_blocks(), replicas as u64);
        parts.push(("prefix cache blocks", mul(distinct.min(pool), BYTES_PER_BLOCK)));
        if let Some(k) = &p.engine.kv_offload {
            // KV offload's host tier: a node (hash, links) and a map entry per block it holds.
            let host = mul(k.host_blocks, replicas as u64);
            parts
                .push(("host tier blocks (KV offload)", mul(distinct.min(host), super::offload::BYTES_PER_HOST_BLOCK)));
        }
        let blocks = (sequence / block).ceil() as u64 + 1;
        parts.push((
            "block hashes and tables of the requests in flight",
            mul(in_flight, mul(blocks, PER_REQUEST_BLOCK)),
        ));
        if fleet {
            parts.push(("block hashes of the sends dealt ahead", mul(requests, mul(blocks, 8))));
        }
    }
    parts.sort_by_key(|p| std::cmp::Reverse(p.1));
    MemoryEstimate { load, requests, in_flight, parts }
}
