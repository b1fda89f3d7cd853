//! A mixed fleet (issue 26): pools of replicas of different deployments (GPU type, TP, engine)
//! behind one router that knows their speeds. Each request goes to the replica with the fewest
//! outstanding requests per unit of speed, (outstanding + 1) / speed, ties to the lowest index: the
//! weighted form of least-outstanding-requests routing (Envoy's weighted least-request balancer
//! divides active requests by the host's weight; llm-d's load-aware scorers rank endpoints by their
//! queue and running load), so a pool twice as fast holds twice the requests and takes about twice
//! the traffic.
//!
//! A pool's speed is its replicas' decode throughput at a reference batch: 32 sequences decoding at
//! a context of 2,048 tokens, 32 / step time from the step model. It is a proxy the router needs
//! before any request is served (routers learn weights from configuration or live metrics); the
//! output reports each pool's share of the traffic and latency so a user sees what it gave.

use super::arrivals::{shares_content, Pending};
use super::drive::Events;
use super::engine::StepView;
use super::run::{cache_block, Arrived, MeasureWindow, Replica, SimOptions, SimOutput};
use super::step::{BatchShape, StepModel};
use crate::profile::Profile;
use crate::units::SimTime;
use crate::workload::Workload;

/// The reference batch of a pool's speed.
pub const SPEED_BATCH: u32 = 32;
pub const SPEED_CONTEXT: u32 = 2048;

/// Decode tokens per second of one replica of `p` at the reference batch.
pub fn replica_speed(p: &Profile) -> f64 {
    let m = StepModel::new(p);
    let mut shape = BatchShape::default();
    for _ in 0..SPEED_BATCH {
        shape.add_chunk(SPEED_CONTEXT, 1);
    }
    SPEED_BATCH as f64 / m.parts(&shape).total_s.max(1e-12)
}

/// Simulate `w` on the pools `(profile, replicas)` behind the weighted router. Returns one output per
/// pool (its replicas' requests merged, records in completion order per replica, then by replica).
pub fn simulate_mixed(pools: &[(&Profile, u32)], w: &Workload, seed: u64, opts: SimOptions) -> Vec<SimOutput> {
    let window = MeasureWindow::of(w);
    let shares = shares_content(w);
    // Prefix caching hashes with one block size; pools of other block sizes see no shared content.
    let block = pools.first().and_then(|(p, _)| cache_block(p, shares));
    let mut arr = Pending::new(w, seed, block);
    let horizon_ns = SimTime::from_secs(opts.horizon_s).0;
    let mut reps: Vec<Replica> = Vec::new();
    let mut pool_of: Vec<usize> = Vec::new();
    let mut speed: Vec<f64> = Vec::new();
    for (k, (p, n)) in pools.iter().enumerate() {
        let s = replica_speed(p);
        let same_block = cache_block(p, shares) == block;
        for _ in 0..*n {
            reps.push(Replica::new(p, &opts, 1024, window, shares && same_block));
            pool_of.push(k);
            speed.push(s);
        }
    }
    let mut outstanding = vec![0u64; reps.len()];
    let mut events = Events::new(reps.len());
    let (mut sent, mut finished) = (0u64, Vec::new());
    loop {
        let next = events.peek();
        if let Some(send) = arr.peek_send() {
            if next.is_none_or(|(t, _)| send <= t) {
                let a = Arrived::new(sent, arr.pop());
                let k = (0..reps.len())
                    .min_by(|&x, &y| {
                        let (lx, ly) = ((outstanding[x] + 1) as f64 / speed[x], (outstanding[y] + 1) as f64 / speed[y]);
                        lx.total_cmp(&ly).then(x.cmp(&y))
                    })
                    .expect("at least one replica");
                outstanding[k] += 1;
                reps[k].accept(a);
                events.reschedule(&reps[k], k);
                sent += 1;
                continue;
            }
        }
        let Some((t, i)) = next else { break };
        if t >= horizon_ns {
            break;
        }
        events.take();
        finished.clear();
        let limit = Some(arr.peek_send().unwrap_or(u64::MAX).min(horizon_ns));
        let progressed =
            reps[i].advance(&mut |_: &StepView| {}, &mut |at, client, rej| finished.push((at, client, rej)), limit);
        for &(at, client, rejected) in &finished {
            arr.on_finish(at, client, rejected);
            outstanding[i] -= 1;
        }
        events.reschedule(&reps[i], i);
        if !progressed {
            break;
        }
    }
    let mut outs: Vec<SimOutput> = Vec::with_capacity(pools.len());
    for (r, k) in reps.into_iter().zip(pool_of) {
        let o = r.finish();
        if outs.len() <= k {
            outs.push(o);
            continue;
        }
        let busy_ns = o.busy_ns;
        outs[k].absorb(o);
        outs[k].busy_ns += busy_ns;
    }
    for (k, o) in outs.iter_mut().enumerate() {
        let n = pools[k].1.max(1) as u64;
        // Per replica, as one replica's output reads: the pool's mean busy time.
        o.busy_ns /= n;
        o.requests_sent = o.records.len() as u64 + o.requests_rejected + o.requests_unfinished;
    }
    outs
}
