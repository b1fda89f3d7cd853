//! Driving replicas: the entry points ([`simulate`], [`simulate_observed`], [`simulate_fleet`]) and
//! the loop that interleaves one or many replicas (run.rs) in time order with the arrival stream and
//! a routing policy, so a single engine is a fleet of one.

use super::arrivals::Pending;
use super::engine::StepView;
use super::run::{Arrived, MeasureWindow, Replica, SimOptions, SimOutput};
use crate::profile::Profile;
use crate::units::SimTime;
use crate::workload::Workload;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

/// How a fleet spreads requests over its replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Routing {
    /// Request i goes to replica i mod K.
    RoundRobin,
    /// Each request goes to the replica with the fewest requests sent to it and not yet finished when
    /// it is sent (ties: the lowest index), as a least-outstanding-requests load balancer does.
    LeastOutstanding,
    /// A conversation's later turns go to the replica that served its previous turn, and a trace
    /// request to the replica that last served a request starting with the same block id (where its
    /// prefix is cached); anything else least-outstanding.
    PrefixAware,
}

/// Run one simulation. Pure: the same (profile, workload, seed, options) give the same output.
/// Decode-only stretches are advanced in one call (sim/fastforward.rs), with the same result as
/// [`simulate_observed`], which visits every step.
pub fn simulate(p: &Profile, w: &Workload, seed: u64, opts: SimOptions) -> SimOutput {
    let mut outs = drive(p, w, seed, opts, 1, Routing::RoundRobin, &mut |_: &StepView| {});
    outs.pop().expect("one replica")
}

/// [`simulate`] with an observer called after every step (so every step is simulated one by one).
pub fn simulate_observed<F: FnMut(&StepView)>(
    p: &Profile,
    w: &Workload,
    seed: u64,
    opts: SimOptions,
    observer: &mut F,
) -> SimOutput {
    let opts = SimOptions { step_by_step: true, ..opts };
    let mut outs = drive(p, w, seed, opts, 1, Routing::RoundRobin, observer);
    outs.pop().expect("one replica")
}

/// A fleet of `replicas` identical engines behind a router, simulated jointly in time order: the
/// router sees each replica's outstanding requests as of the moment a request is sent. Returns one
/// output per replica; request ids are global send order.
pub fn simulate_fleet(
    p: &Profile,
    w: &Workload,
    seed: u64,
    opts: SimOptions,
    replicas: u32,
    routing: Routing,
) -> Vec<SimOutput> {
    drive(p, w, seed, opts, replicas.max(1), routing, &mut |_: &StepView| {})
}

/// Round-robin routing of arrivals that do not depend on completions (open loops, bursts, traces):
/// request i goes to replica i mod K whatever the replicas' state, so the replicas do not interact
/// and each is simulated alone over its own arrivals, in parallel, with the same events in the same
/// order as the joint loop of [`drive`] (a replica acts at t before a send at s when t < s). Its
/// data stays in cache instead of K replicas taking turns step by step. None when a replica reaches
/// the horizon or stalls: the joint loop then decides what was sent and what was left.
fn drive_independent<'a>(
    new: &(dyn Fn() -> Replica<'a> + Sync),
    k: usize,
    arr: &mut Pending,
    horizon_ns: u64,
    fast: bool,
) -> Option<Vec<SimOutput>> {
    use rayon::prelude::*;
    let mut sends: Vec<Vec<Arrived>> = vec![Vec::new(); k];
    let mut sent = 0u64;
    while arr.peek_send().is_some() {
        sends[(sent % k as u64) as usize].push(Arrived::new(sent, arr.pop()));
        sent += 1;
    }
    let last_send = sends.iter().filter_map(|v| v.last()).map(|a| a.send).max().unwrap_or(0);
    let runs: Vec<Option<(SimOutput, u64)>> = sends
        .into_par_iter()
        .map(|mine| {
            let mut r = new();
            // Completions in steps that started before the last send (the joint loop's count then).
            let mut done_before_last = 0u64;
            // A fast-forward stops before this replica's next send and the horizon.
            let mut step = |r: &mut Replica, t: u64, limit: u64| -> Option<()> {
                if t >= horizon_ns {
                    return None;
                }
                let mut n = 0u64;
                let progressed = r.advance(&mut |_: &StepView| {}, &mut |_, _, _| n += 1, fast.then_some(limit));
                if t < last_send {
                    done_before_last += n;
                }
                progressed.then_some(())
            };
            for a in mine {
                while let Some(t) = r.next_event().filter(|&t| t < a.send) {
                    step(&mut r, t, a.send.min(horizon_ns))?;
                }
                r.accept(a);
            }
            while let Some(t) = r.next_event() {
                step(&mut r, t, horizon_ns)?;
            }
            Some((r.finish(), done_before_last))
        })
        .collect();
    let runs: Vec<(SimOutput, u64)> = runs.into_iter().collect::<Option<_>>()?;
    let completed: u64 = runs.iter().map(|(_, d)| d).sum();
    let mut outs: Vec<SimOutput> = runs.into_iter().map(|(o, _)| o).collect();
    for o in &mut outs {
        o.last_send = SimTime(last_send);
        o.outstanding_at_last_send = sent - completed;
        o.requests_sent = o.records.len() as u64 + o.requests_rejected + o.requests_unfinished;
    }
    Some(outs)
}

/// No next event (an idle replica with an empty inbox).
pub(super) const NO_EVENT: u64 = u64::MAX;

/// The replicas' next events, earliest first and the lowest index among equals (as a linear scan
/// would choose), in O(log K): `key[i]` is replica i's current next event, and heap entries that no
/// longer match it are skipped. A replica's next event never moves back in time. Shared by every
/// loop over several replicas (this file, sim/disagg.rs, sim/mixed.rs, sim/autoscale.rs).
pub(super) struct Events {
    key: Vec<u64>,
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

impl Events {
    pub(super) fn new(replicas: usize) -> Events {
        Events { key: vec![NO_EVENT; replicas], heap: BinaryHeap::with_capacity(replicas * 2) }
    }

    /// Replica `i`'s next event into the heap, unless the heap already holds it.
    pub(super) fn reschedule(&mut self, r: &Replica, i: usize) {
        let t = r.next_event().unwrap_or(NO_EVENT);
        if t != self.key[i] {
            self.key[i] = t;
            if t != NO_EVENT {
                self.heap.push(Reverse((t, i as u32)));
            }
        }
    }

    /// The earliest (time, replica), stale entries dropped.
    pub(super) fn peek(&mut self) -> Option<(u64, usize)> {
        while let Some(&Reverse((t, i))) = self.heap.peek() {
            if self.key[i as usize] == t {
                return Some((t, i as usize));
            }
            self.heap.pop();
        }
        None
    }

    /// Take the earliest event (its replica is about to act): the replica returned by [`Events::peek`].
    pub(super) fn take(&mut self) -> Option<usize> {
        self.peek()?;
        let Reverse((_, i)) = self.heap.pop().expect("peeked");
        self.key[i as usize] = NO_EVENT;
        Some(i as usize)
    }

    /// Every replica's current next event (NO_EVENT: none), by index.
    pub(super) fn keys(&self) -> &[u64] {
        &self.key
    }
}

/// Least-outstanding routing in O(log K) per request: each replica's count of requests routed to it
/// and not finished by the send time, in an ordered set (fewest first, then the lowest index, as a
/// scan would pick). Finish times are known ahead of the sends they precede (a replica's step that
/// ends before a send is simulated before the send is routed) and applied when a send passes them.
struct LeastOutstanding {
    enabled: bool,
    count: Vec<u64>,
    by_count: BTreeSet<(u64, u32)>,
    finishes: BinaryHeap<Reverse<(u64, u32)>>,
}

impl LeastOutstanding {
    fn new(replicas: usize, enabled: bool) -> Self {
        let by_count = if enabled { (0..replicas as u32).map(|i| (0, i)).collect() } else { BTreeSet::new() };
        LeastOutstanding { enabled, count: vec![0; replicas], by_count, finishes: BinaryHeap::new() }
    }
    fn finished(&mut self, at: u64, replica: usize) {
        if self.enabled {
            self.finishes.push(Reverse((at, replica as u32)));
        }
    }
    /// Route to replica `k` (prefix-aware routing's choice), keeping the counts.
    fn route_to(&mut self, send: u64, k: usize) -> usize {
        self.apply_finishes(send);
        let c = &mut self.count[k];
        self.by_count.remove(&(*c, k as u32));
        *c += 1;
        self.by_count.insert((*c, k as u32));
        k
    }
    fn apply_finishes(&mut self, send: u64) {
        while let Some(&Reverse((at, i))) = self.finishes.peek() {
            if at > send {
                break;
            }
            self.finishes.pop();
            let c = &mut self.count[i as usize];
            self.by_count.remove(&(*c, i));
            *c -= 1;
            self.by_count.insert((*c, i));
        }
    }
    fn route(&mut self, send: u64) -> usize {
        self.apply_finishes(send);
        let (c, i) = self.by_count.pop_first().expect("at least one replica");
        self.count[i as usize] = c + 1;
        self.by_count.insert((c + 1, i));
        i as usize
    }
}

/// A router over `replicas` workers by [`Routing`]: the fleet's (drive) and each pool's of a
/// disaggregated deployment (sim/disagg.rs). Prefix-aware routing keeps the worker each route key
/// (a conversation, a trace's first block) was first sent to.
pub(super) struct Router {
    routing: Routing,
    replicas: u64,
    least: LeastOutstanding,
    sticky: std::collections::HashMap<u64, usize>,
}

impl Router {
    pub(super) fn new(routing: Routing, replicas: usize) -> Router {
        Router {
            routing,
            replicas: replicas as u64,
            least: LeastOutstanding::new(replicas, routing != Routing::RoundRobin),
            sticky: std::collections::HashMap::new(),
        }
    }
    /// The worker of the `seq`-th request routed, sent at `send` with route key `key`.
    #[inline]
    pub(super) fn route(&mut self, seq: u64, send: u64, key: Option<u64>) -> usize {
        match self.routing {
            Routing::RoundRobin => (seq % self.replicas) as usize,
            Routing::LeastOutstanding => self.least.route(send),
            Routing::PrefixAware => match key.and_then(|key| self.sticky.get(&key).copied()) {
                Some(k) => self.least.route_to(send, k),
                None => {
                    let k = self.least.route(send);
                    if let Some(key) = key {
                        self.sticky.insert(key, k);
                    }
                    k
                }
            },
        }
    }
    /// A request routed to worker `k` finished there at `at` (ns).
    #[inline]
    pub(super) fn finished(&mut self, at: u64, k: usize) {
        self.least.finished(at, k);
    }
}

fn drive<F: FnMut(&StepView)>(
    p: &Profile,
    w: &Workload,
    seed: u64,
    opts: SimOptions,
    replicas: u32,
    routing: Routing,
    observer: &mut F,
) -> Vec<SimOutput> {
    let fast = !opts.step_by_step;
    let per = (w.planned_requests().unwrap_or(1024) / replicas as u64).min(1 << 24) as usize;
    let window = MeasureWindow::of(w);
    let horizon_ns = SimTime::from_secs(opts.horizon_s).0;
    let shares = super::arrivals::shares_content(w);
    let cache_block = super::run::cache_block(p, shares);
    // Sends that never wait for a completion (a closed loop's and a conversation's do).
    let sends_fixed =
        w.spec.conversation.is_none() && !matches!(w.spec.arrivals, crate::workload::Arrivals::ClosedLoop { .. });
    let until_first_tokens = opts.until_first_tokens && sends_fixed;
    let independent = replicas > 1 && !until_first_tokens && routing == Routing::RoundRobin && sends_fixed;
    if independent {
        let new = || Replica::new(p, &opts, per, window, shares);
        if let Some(outs) =
            drive_independent(&new, replicas as usize, &mut Pending::new(w, seed, cache_block), horizon_ns, fast)
        {
            return outs;
        }
    }
    let mut reps: Vec<Replica> = (0..replicas).map(|_| Replica::new(p, &opts, per, window, shares)).collect();
    let mut arr = Pending::new(w, seed, cache_block);
    let (mut sent, mut completed, mut last_send, mut outstanding_at_last_send) = (0u64, 0u64, 0u64, 0u64);
    let mut finished: Vec<(u64, u32, bool)> = Vec::new();
    // The replica that acts next (Events: earliest, then lowest index).
    let mut events = Events::new(reps.len());
    let mut router = Router::new(routing, reps.len());
    loop {
        let next = events.peek();
        // Requests sent no later than that are routed first.
        if let Some(send) = arr.peek_send() {
            if next.is_none_or(|(t, _)| send <= t) {
                let a = Arrived::new(sent, arr.pop());
                let send = a.send;
                let k = router.route(sent, send, a.route_key);
                reps[k].accept(a);
                events.reschedule(&reps[k], k);
                sent += 1;
                last_send = send;
                outstanding_at_last_send = sent - completed;
                continue;
            }
        }
        let Some((t, i)) = next else { break };
        if t >= horizon_ns {
            break;
        }
        events.take();
        finished.clear();
        // A fast-forward stops before the next send (it may be routed here) and the horizon.
        let limit = fast.then(|| arr.peek_send().unwrap_or(u64::MAX).min(horizon_ns));
        let progressed =
            reps[i].advance(observer, &mut |at, client, rejected| finished.push((at, client, rejected)), limit);
        events.reschedule(&reps[i], i);
        completed += finished.len() as u64;
        for &(at, client, rejected) in &finished {
            arr.on_finish(at, client, rejected);
            router.finished(at, i);
        }
        if !progressed {
            break;
        }
        if until_first_tokens
            && arr.peek_send().is_none()
            && reps.iter().map(|r| r.out.ttfts_s.len() as u64 + r.out.requests_rejected).sum::<u64>() == sent
        {
            break;
        }
    }
    let mut outs: Vec<SimOutput> = reps.into_iter().map(Replica::finish).collect();
    for o in &mut outs {
        o.requests_sent = sent;
        o.last_send = SimTime(last_send);
        o.outstanding_at_last_send = outstanding_at_last_send;
    }
    if replicas > 1 {
        // Per-replica outputs carry only their own requests; the fleet-level counts are in the first.
        let mine: Vec<u64> =
            outs.iter().map(|o| o.records.len() as u64 + o.requests_rejected + o.requests_unfinished).collect();
        for (o, m) in outs.iter_mut().zip(mine) {
            o.requests_sent = m;
        }
    }
    outs
}
