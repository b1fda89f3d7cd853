//! A fleet whose replica count an autoscaling policy (crate::autoscale) changes over simulated time
//! (issue 26): replicas behind a least-outstanding router, a policy evaluated every period on a
//! per-replica metric, new replicas serving only after their start-up delay (requests sent
//! meanwhile queue on the replicas already serving), surplus replicas drained (no new requests; gone
//! when their last request finishes).
//!
//! Records are not kept: each finished request is counted into its reporting bucket (by send time)
//! as it leaves its replica, TTFT and TPOT into log histograms (sim/gaps.rs, within 0.4%), so memory
//! does not grow with the request count. Replicas are billed from the decision that starts them
//! (the GPUs are held while the model loads) until they are drained or cancelled.
//!
//! Pure, as the rest of the simulator: the same (profile, workload, policy, seed) give the same
//! output.

use super::arrivals::{shares_content, Pending};
use super::engine::StepView;
use super::gaps::GapHistogram;
use super::helper::{serve, Helper, InFlight, Shared};
use super::run::{cache_block, Arrived, MeasureWindow, Replica, SimOptions};
use super::RequestRecord;
use crate::autoscale::{AutoscalePolicy, ScaleMetric};
use crate::metrics::RequestSlo;
use crate::profile::Profile;
use crate::units::SimTime;
use crate::workload::Workload;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Where a replica is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Requested; serves from `ready_ns`.
    Starting {
        ready_ns: u64,
    },
    Ready,
    /// Takes no new requests; gone when its last one finishes.
    Draining,
    Gone,
}

struct Slot<'a> {
    rep: Replica<'a>,
    state: State,
    /// Requests routed to it whose completion the router has not learned of.
    outstanding: u64,
    /// Which replica of this slot (slots are reused): completions of an earlier one are not its.
    generation: u32,
    /// The epoch's completions (time, client, rejected) and busy time, kept apart per replica while
    /// the replicas run in parallel.
    done: Vec<(u64, u32, bool)>,
    busy_ns: u64,
}

/// Replicas from which an epoch's runs are shared with a helper thread.
const PARALLEL_REPLICAS: usize = 16;

/// One reporting bucket of simulated time (the policy's `bucket_s`, an hour by default): the
/// requests sent in it and what became of them, and the replica time spent in it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AutoscaleBucket {
    pub start_s: f64,
    pub requests_sent: u64,
    pub requests_completed: u64,
    pub requests_rejected: u64,
    /// Completed requests meeting each part of the SLO, and all of it.
    pub slo_ttft_met: u64,
    pub slo_itl_met: u64,
    pub slo_e2e_met: u64,
    pub slo_met: u64,
    /// Replica-seconds held in the bucket (starting, serving or draining).
    pub replica_seconds: f64,
    /// Most replicas held at once (starting, serving or draining).
    pub replicas_max: u32,
    /// Replica-seconds spent stepping (an engine with work), the busy share of the power model
    /// (crate::plan): advances stop at bucket edges, so only a step that straddles an edge is
    /// counted wholly in the bucket where it starts.
    pub busy_replica_seconds: f64,
    /// Output tokens of the requests completed (sent in the bucket).
    pub output_tokens: u64,
    #[serde(skip)]
    pub ttft: GapHistogram,
    /// Each completed request's own mean token gap (ns per token after the first).
    #[serde(skip)]
    pub tpot: GapHistogram,
}

/// The policy's view at one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScaleSample {
    pub t_s: f64,
    pub ready: u32,
    pub starting: u32,
    pub draining: u32,
    /// The metric averaged over ready replicas.
    pub metric: f64,
    /// Replicas the policy asked for (after its limits and stabilization).
    pub desired: u32,
    /// Requests inside the fleet (routed, not finished).
    pub outstanding: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AutoscaleOutput {
    pub buckets: Vec<AutoscaleBucket>,
    pub timeline: Vec<ScaleSample>,
    pub requests_sent: u64,
    pub requests_completed: u64,
    pub requests_rejected: u64,
    /// Still queued or running when the run stopped (its horizon, or the end of its sends and work).
    pub requests_unfinished: u64,
    pub replica_seconds: f64,
    /// Replica-seconds spent stepping, over all buckets.
    pub busy_replica_seconds: f64,
    /// Output tokens of all completed requests.
    pub output_tokens: u64,
    /// Replicas started and replicas removed (drained or cancelled) by the policy.
    pub scale_ups: u64,
    pub scale_downs: u64,
    pub replicas_max: u32,
    /// The start-up delay of a new replica (s).
    pub startup_delay_s: f64,
    pub end_s: f64,
    #[serde(skip)]
    pub ttft: GapHistogram,
    #[serde(skip)]
    pub tpot: GapHistogram,
}

/// The accumulators of a run.
struct Books<'s> {
    bucket_ns: u64,
    buckets: Vec<AutoscaleBucket>,
    slo: &'s RequestSlo,
    /// Replicas held (not gone) since `billed_ns`.
    held: u32,
    billed_ns: u64,
    replica_ns: u128,
}

impl Books<'_> {
    fn bucket(&mut self, t_ns: u64) -> &mut AutoscaleBucket {
        let b = (t_ns / self.bucket_ns) as usize;
        while self.buckets.len() <= b {
            let start_s = (self.buckets.len() as u64 * self.bucket_ns) as f64 * 1e-9;
            self.buckets.push(AutoscaleBucket { start_s, ..Default::default() });
        }
        &mut self.buckets[b]
    }

    /// Bill the replicas held from the last change to `t_ns`, split over the buckets it spans; then
    /// `held` changes by `delta`.
    fn bill(&mut self, t_ns: u64, delta: i64) {
        let mut from = self.billed_ns;
        while from < t_ns {
            let end = ((from / self.bucket_ns) + 1) * self.bucket_ns;
            let to = end.min(t_ns);
            let held = self.held;
            let b = self.bucket(from);
            b.replica_seconds += held as f64 * (to - from) as f64 * 1e-9;
            b.replicas_max = b.replicas_max.max(held);
            from = to;
        }
        self.replica_ns += self.held as u128 * (t_ns.saturating_sub(self.billed_ns)) as u128;
        self.billed_ns = self.billed_ns.max(t_ns);
        self.held = (self.held as i64 + delta) as u32;
        let held = self.held;
        let b = self.bucket(t_ns);
        b.replicas_max = b.replicas_max.max(held);
    }

    fn record(&mut self, r: &RequestRecord, ttft: &mut GapHistogram, tpot: &mut GapHistogram) {
        let slo = self.slo;
        let b = self.bucket(r.arrival.0);
        b.requests_completed += 1;
        b.output_tokens += r.output_tokens as u64;
        let ttft_ns = r.first_token.0 - r.arrival.0;
        b.ttft.add(ttft_ns);
        ttft.add(ttft_ns);
        let gap_ms = if r.output_tokens > 1 {
            let g = (r.finish.0 - r.first_token.0) / (r.output_tokens as u64 - 1);
            b.tpot.add(g);
            tpot.add(g);
            g as f64 * 1e-6
        } else {
            0.0
        };
        let t_ok = slo.ttft_s_max.is_none_or(|m| r.ttft_s() <= m);
        let i_ok = slo.itl_ms_max.is_none_or(|m| gap_ms <= m);
        let e_ok = slo.e2e_s_max.is_none_or(|m| r.e2e_s() <= m);
        b.slo_ttft_met += t_ok as u64;
        b.slo_itl_met += i_ok as u64;
        b.slo_e2e_met += e_ok as u64;
        b.slo_met += (t_ok && i_ok && e_ok) as u64;
    }
}

/// The ready replicas by (outstanding requests, index): least-outstanding routing in O(log K) per
/// request instead of a scan of every replica (a day at 1,000 requests/s on 100+ replicas routes 86
/// million requests). A tournament tree over slots of keys `outstanding << 32 | index` (`u64::MAX`:
/// not ready), whose root is the least: an update is a walk up of plain compares.
#[derive(Default)]
struct ReadySet {
    /// Leaves from `cap`; node k holds the least of 2k and 2k + 1.
    tree: Vec<u64>,
    cap: usize,
}

impl ReadySet {
    fn key(s: &Slot, i: usize) -> u64 {
        (s.outstanding.min(u32::MAX as u64 - 1) << 32) | i as u64
    }
    fn set(&mut self, i: usize, key: u64) {
        if i >= self.cap {
            let cap = (i + 1).next_power_of_two().max(16);
            let mut tree = vec![u64::MAX; 2 * cap];
            tree[cap..cap + self.cap].copy_from_slice(&self.tree[self.cap..]);
            for k in (1..cap).rev() {
                tree[k] = tree[2 * k].min(tree[2 * k + 1]);
            }
            self.tree = tree;
            self.cap = cap;
        }
        let mut k = self.cap + i;
        self.tree[k] = key;
        while k > 1 {
            k /= 2;
            let m = self.tree[2 * k].min(self.tree[2 * k + 1]);
            if self.tree[k] == m {
                break;
            }
            self.tree[k] = m;
        }
    }
    fn insert(&mut self, s: &Slot, i: usize) {
        self.set(i, Self::key(s, i));
    }
    fn remove(&mut self, i: usize) {
        self.set(i, u64::MAX);
    }
    /// The ready replica with the fewest requests inside (ties: the lowest index).
    fn least(&self) -> Option<usize> {
        self.tree.get(1).filter(|&&k| k != u64::MAX).map(|&k| (k & 0xffff_ffff) as usize)
    }
    /// Replica `i` gains or loses one request inside (its key moves if it is ready).
    fn bump(&mut self, slots: &mut [Slot], i: usize, up: bool) {
        if up {
            slots[i].outstanding += 1;
        } else {
            slots[i].outstanding -= 1;
        }
        if slots[i].state == State::Ready {
            self.insert(&slots[i], i);
        }
    }
}

/// The ready replica with the fewest requests inside (ties: the highest index): the one to drain.
fn to_drain(slots: &[Slot]) -> Option<usize> {
    (0..slots.len()).filter(|&i| slots[i].state == State::Ready).min_by_key(|&i| (slots[i].outstanding, Reverse(i)))
}

/// Run a replica to `end` (no step starting at or after it): its completions and busy time kept in
/// its slot for [`keep_books`].
fn run_epoch(s: &mut Slot, end: u64) {
    if s.state == State::Gone {
        return;
    }
    let Slot { rep, done, busy_ns, .. } = s;
    let before = rep.out.busy_ns;
    while rep.next_event().is_some_and(|t| t < end) {
        if !rep.advance(&mut |_: &StepView| {}, &mut |at, client, rej| done.push((at, client, rej)), Some(end)) {
            break;
        }
    }
    *busy_ns += rep.out.busy_ns - before;
}

/// After replica `i` ran to `end`: its busy time, completions and records into the books (the
/// router learns of the completions at its next look), and a drained replica is let go. Whether it
/// still has something to do.
#[allow(clippy::too_many_arguments)]
fn keep_books(
    slots: &mut [Slot],
    i: usize,
    end: u64,
    books: &mut Books,
    out: &mut AutoscaleOutput,
    unseen: &mut BinaryHeap<Reverse<(u64, u32, u32)>>,
    arr: &mut Pending,
    free: &mut Vec<usize>,
) -> bool {
    let slot = &mut slots[i];
    if slot.state == State::Gone {
        return false;
    }
    let busy_s = std::mem::take(&mut slot.busy_ns) as f64 * 1e-9;
    if busy_s > 0.0 {
        books.bucket(end - 1).busy_replica_seconds += busy_s;
        out.busy_replica_seconds += busy_s;
    }
    for &(at, client, rejected) in &slot.done {
        arr.on_finish(at, client, rejected);
        unseen.push(Reverse((at, i as u32, slot.generation)));
        if rejected {
            out.requests_rejected += 1;
            books.bucket(at).requests_rejected += 1;
        }
    }
    slot.done.clear();
    for r in slot.rep.out.records.drain(..) {
        out.requests_completed += 1;
        out.output_tokens += r.output_tokens as u64;
        books.record(&r, &mut out.ttft, &mut out.tpot);
    }
    let has_work = slot.rep.next_event().is_some();
    if slot.state == State::Draining && !has_work {
        slot.state = State::Gone;
        free.push(i);
        books.bill(slot.rep.now.max(end), -1);
    }
    has_work
}

/// Requests waiting inside a replica (not yet running).
fn waiting(r: &Replica) -> u64 {
    r.eng.waiting.len() as u64 + r.inbox_len() as u64
}

/// Simulate `w` on a fleet of `p` replicas scaled by `policy`; `slo` decides what counts as met.
/// The workload's sends must not wait for completions (an open loop or a trace: the CLI refuses
/// closed loops, whose load a fleet's size would change).
pub fn simulate_autoscaled(
    p: &Profile,
    w: &Workload,
    seed: u64,
    opts: SimOptions,
    policy: &AutoscalePolicy,
    slo: &RequestSlo,
) -> AutoscaleOutput {
    if rayon::current_num_threads() < 2 {
        return run(p, w, seed, &opts, policy, slo, None);
    }
    let shared = Shared::default();
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| serve(&shared, run_epoch));
        let helper = Helper { shared: &shared, thread: thread.thread().clone() };
        run(p, w, seed, &opts, policy, slo, Some(&helper))
    })
}

/// [`simulate_autoscaled`], with a helper thread for half of each epoch's replicas when given.
fn run<'a>(
    p: &'a Profile,
    w: &Workload,
    seed: u64,
    opts: &'a SimOptions,
    policy: &AutoscalePolicy,
    slo: &RequestSlo,
    helper: Option<&Helper<'_, Slot<'a>>>,
) -> AutoscaleOutput {
    let window = MeasureWindow::of(w);
    let shares = shares_content(w);
    let mut arr = Pending::new(w, seed, cache_block(p, shares));
    let horizon_ns = SimTime::from_secs(opts.horizon_s).0;
    let ns = |s: f64| SimTime::from_secs(s).0;
    let startup_delay_s = policy.startup_delay_s(p.arch.weight_bytes(p.file.model.weight_dtype));
    let (delay_ns, interval_ns) = (ns(startup_delay_s), ns(policy.interval_s).max(1));
    let stabilization_ns = ns(policy.scale_down_stabilization_s);
    let new_replica = || Replica::new(p, opts, 1024, window, shares);
    let mut books =
        Books { bucket_ns: ns(policy.bucket_s).max(1), buckets: Vec::new(), slo, held: 0, billed_ns: 0, replica_ns: 0 };
    let mut slots: Vec<Slot> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut ready = ReadySet::default();
    // Declared after the replicas, so an unwinding run waits for the helper's job before they go.
    let _in_flight = helper.map(InFlight);
    for i in 0..policy.initial_replicas as usize {
        slots.push(Slot {
            rep: new_replica(),
            state: State::Ready,
            outstanding: 0,
            generation: 0,
            done: Vec::new(),
            busy_ns: 0,
        });
        ready.insert(&slots[i], i);
    }
    books.bill(0, policy.initial_replicas as i64);
    let mut starting: VecDeque<usize> = VecDeque::new();
    // (time, desired) of recent evaluations, for scale-down stabilization.
    let mut recent: VecDeque<(u64, u32)> = VecDeque::new();
    let mut out = AutoscaleOutput {
        buckets: Vec::new(),
        timeline: Vec::new(),
        requests_sent: 0,
        requests_completed: 0,
        requests_rejected: 0,
        requests_unfinished: 0,
        replica_seconds: 0.0,
        busy_replica_seconds: 0.0,
        output_tokens: 0,
        scale_ups: 0,
        scale_downs: 0,
        replicas_max: policy.initial_replicas,
        startup_delay_s,
        end_s: 0.0,
        ttft: GapHistogram::default(),
        tpot: GapHistogram::default(),
    };
    let refresh_ns = ns(policy.router_refresh_s).max(1);
    let mut next_eval = interval_ns;
    // Completions the router has not learned of yet: (time, replica).
    let mut unseen: BinaryHeap<Reverse<(u64, u32, u32)>> = BinaryHeap::new();
    let mut now = 0u64;
    // Whether a replica had something left to do after the last epoch.
    let mut work = true;
    loop {
        // The router learns of the completions up to its latest look (every refresh_ns; the other
        // ends of an epoch, a policy's evaluation, a replica's readiness or a bucket's edge, are
        // not looks, so the reporting buckets change no result).
        let look = now / refresh_ns * refresh_ns;
        while let Some(&Reverse((at, i, generation))) = unseen.peek() {
            if at > look {
                break;
            }
            unseen.pop();
            if slots[i as usize].generation == generation {
                ready.bump(&mut slots, i as usize, false);
            }
        }
        while let Some(&i) = starting.front() {
            match slots[i].state {
                State::Starting { ready_ns } if ready_ns <= now => {
                    starting.pop_front();
                    slots[i].state = State::Ready;
                    ready.insert(&slots[i], i);
                }
                _ => break,
            }
        }
        if next_eval <= now {
            let sample = evaluate(policy, &slots, &starting, &mut recent, stabilization_ns, now);
            let (desired, current) = (sample.desired, sample.ready + sample.starting);
            if desired > current {
                for _ in current..desired {
                    let state = State::Starting { ready_ns: now.saturating_add(delay_ns) };
                    let mut slot =
                        Slot { rep: new_replica(), state, outstanding: 0, generation: 0, done: Vec::new(), busy_ns: 0 };
                    let i = match free.pop() {
                        Some(i) => {
                            slot.generation = slots[i].generation.wrapping_add(1);
                            slots[i] = slot;
                            i
                        }
                        None => {
                            slots.push(slot);
                            slots.len() - 1
                        }
                    };
                    starting.push_back(i);
                    books.bill(now, 1);
                    out.scale_ups += 1;
                }
            } else if desired < current {
                out.scale_downs += (current - desired) as u64;
                shrink(&mut slots, &mut ready, &mut starting, &mut free, &mut books, current - desired, now);
            }
            out.replicas_max = out.replicas_max.max(books.held);
            out.timeline.push(sample);
            next_eval += interval_ns;
        }
        if arr.peek_send().is_none() && !work {
            break;
        }
        if now >= horizon_ns {
            break;
        }
        // The epoch: until the router's next look, the policy's next one, a replica's readiness or
        // the bucket's end (a replica's busy time lands in the bucket it was spent in, but for the
        // one step that straddles the edge).
        let t_ready = starting.front().map(|&i| match slots[i].state {
            State::Starting { ready_ns } => ready_ns,
            _ => unreachable!("only starting replicas are queued"),
        });
        let bucket_end = (now / books.bucket_ns).saturating_add(1).saturating_mul(books.bucket_ns);
        let refresh = (now / refresh_ns).saturating_add(1).saturating_mul(refresh_ns);
        let end = [Some(refresh), Some(next_eval), t_ready, Some(bucket_end), Some(horizon_ns)]
            .into_iter()
            .flatten()
            .min()
            .expect("an end")
            .max(now + 1);
        // Route the epoch's sends: least outstanding among the ready replicas (ties: the lowest
        // index), as counted by the router: its own sends at once, completions at its looks.
        while let Some(t) = arr.peek_send() {
            if t >= end {
                break;
            }
            let a = Arrived::new(out.requests_sent, arr.pop());
            books.bucket(a.send).requests_sent += 1;
            out.requests_sent += 1;
            let k = ready.least().expect("min_replicas >= 1 keeps a replica ready");
            ready.bump(&mut slots, k, true);
            slots[k].rep.accept(a);
        }
        // Every replica runs to the epoch's end on its own (in parallel: nothing of one depends on
        // another within an epoch), and the books are kept in replica order, so the output is the
        // same at any thread count.
        work = false;
        if let Some(h) = helper.filter(|_| slots.len() >= PARALLEL_REPLICAS) {
            // The helper takes the upper part; this thread runs the lower one and keeps its books
            // meanwhile, so it takes less.
            let split = slots.len() * 2 / 5;
            {
                let (lower, upper) = slots.split_at_mut(split);
                h.post(upper, end);
                for i in 0..lower.len() {
                    run_epoch(&mut lower[i], end);
                    work |= keep_books(lower, i, end, &mut books, &mut out, &mut unseen, &mut arr, &mut free);
                }
                h.wait();
            }
            for i in split..slots.len() {
                work |= keep_books(&mut slots, i, end, &mut books, &mut out, &mut unseen, &mut arr, &mut free);
            }
        } else {
            for i in 0..slots.len() {
                run_epoch(&mut slots[i], end);
                work |= keep_books(&mut slots, i, end, &mut books, &mut out, &mut unseen, &mut arr, &mut free);
            }
        }
        now = end;
    }
    for s in slots {
        if s.state != State::Gone {
            let o = s.rep.finish();
            out.requests_unfinished += o.requests_unfinished;
            now = now.max(o.end.0);
        }
    }
    let end = now.min(horizon_ns);
    books.bill(end, 0);
    out.end_s = end as f64 * 1e-9;
    out.replica_seconds = books.replica_ns as f64 * 1e-9;
    out.buckets = books.buckets;
    out
}

/// One evaluation of the policy at `t_ns`: the metric over ready replicas, the HPA's desired count
/// (ceil(ready x metric / target) outside the tolerance; on the way up with replicas still
/// starting, the ratio over all of them with theirs taken as 0), limited to [min, max] and to the
/// scale-up rate, and held up on the way down by the highest recommendation of the stabilization
/// window.
fn evaluate(
    policy: &AutoscalePolicy,
    slots: &[Slot],
    starting: &VecDeque<usize>,
    recent: &mut VecDeque<(u64, u32)>,
    stabilization_ns: u64,
    t_ns: u64,
) -> ScaleSample {
    let (mut ready, mut draining, mut total, mut outstanding) = (0u32, 0u32, 0u64, 0u64);
    for s in slots.iter() {
        match s.state {
            State::Ready => {
                ready += 1;
                total += match policy.metric {
                    ScaleMetric::Outstanding => s.outstanding,
                    ScaleMetric::Waiting => waiting(&s.rep),
                };
            }
            State::Draining => draining += 1,
            _ => {}
        }
        outstanding += s.outstanding;
    }
    let starting_n = starting.len() as u32;
    let current = ready + starting_n;
    let metric = total as f64 / ready.max(1) as f64;
    let ratio = metric / policy.target;
    let ceil = |x: f64| (x.ceil() as u64).min(u32::MAX as u64) as u32;
    let mut desired = if (ratio - 1.0).abs() <= policy.tolerance {
        current
    } else if ratio > 1.0 && starting_n > 0 {
        // The HPA's damping: replicas not yet ready count as carrying none of the metric, the ratio
        // is recomputed over all of them, and no action is taken when it falls within the tolerance
        // or reverses the direction.
        let r = total as f64 / (current as f64 * policy.target);
        if r <= 1.0 + policy.tolerance {
            current
        } else {
            ceil(current as f64 * r)
        }
    } else {
        ceil(ready as f64 * ratio)
    };
    if desired < current && starting_n > 0 {
        // Replicas on their way were asked for by a higher load: keep them until they serve.
        desired = current;
    }
    let up_limit = current.saturating_add(
        policy.scale_up_max_replicas.max((current as f64 * policy.scale_up_max_percent / 100.0).ceil() as u32),
    );
    desired = desired.min(up_limit).clamp(policy.min_replicas, policy.max_replicas);
    recent.push_back((t_ns, desired));
    while recent.front().is_some_and(|&(t, _)| t + stabilization_ns < t_ns) {
        recent.pop_front();
    }
    if desired < current {
        let held = recent.iter().map(|&(_, d)| d).max().unwrap_or(desired);
        desired = held.min(current).max(desired);
    }
    ScaleSample { t_s: t_ns as f64 * 1e-9, ready, starting: starting_n, draining, metric, desired, outstanding }
}

/// Remove `n` replicas at `t_ns`: those still starting first (the latest asked for), then ready
/// ones with the fewest requests inside (the highest index among equals), which drain.
fn shrink(
    slots: &mut [Slot],
    ready: &mut ReadySet,
    starting: &mut VecDeque<usize>,
    free: &mut Vec<usize>,
    books: &mut Books,
    n: u32,
    t_ns: u64,
) {
    let mut n = n;
    while n > 0 {
        let Some(i) = starting.pop_back() else { break };
        slots[i].state = State::Gone;
        free.push(i);
        books.bill(t_ns, -1);
        n -= 1;
    }
    while n > 0 {
        let Some(i) = to_drain(slots) else {
            break;
        };
        ready.remove(i);
        if slots[i].outstanding == 0 && slots[i].rep.next_event().is_none() {
            slots[i].state = State::Gone;
            free.push(i);
            books.bill(t_ns, -1);
        } else {
            slots[i].state = State::Draining;
        }
        n -= 1;
    }
}
