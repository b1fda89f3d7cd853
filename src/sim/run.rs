//! The event loop: arrivals, the serial front-end, replicas behind a router, and the step loop that
//! asks the engine's policy what runs next and advances time by the step model.

use super::arrivals::{Content, Pending, Sent};
use super::engine::{Engine, Live, StepView};
use super::gaps::GapHistogram;
use super::pool::DecodePool;
use super::prefix::PrefixCache;
use super::step::{BatchShape, StepModel};
use super::RequestRecord;
use crate::profile::{EngineKind, Profile};
use crate::units::SimTime;
use crate::workload::Workload;
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, VecDeque};

/// Options of one run that are not part of the workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SimOptions {
    /// Stop the run (unfinished requests are counted) at this simulated time: a guard for overloaded
    /// open loops.
    pub horizon_s: f64,
    /// Samples of KV utilization and queue length kept over time (the interval doubles as needed).
    pub series_points: usize,
    /// Visit every step (no decode fast-forward, sim/fastforward.rs): the reference the fast path is
    /// tested against, and what an observer of each step needs.
    pub step_by_step: bool,
    /// Stop once every request has been sent and has its first token or was rejected (workloads
    /// whose sends do not wait for completions: bursts, open loops, traces), and keep each first
    /// token's TTFT in [`SimOutput::ttfts_s`]: what a question about TTFT alone needs (the mean TTFT
    /// of a burst, searched over burst sizes for the max safe queue depth), without simulating the
    /// decodes that follow, which cannot change a first token that came before them.
    pub until_first_tokens: bool,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { horizon_s: 1e7, series_points: 256, step_by_step: false, until_first_tokens: false }
    }
}

/// When the next sample of the series is due, and how many samples are kept.
pub(super) struct SeriesClock {
    interval_ns: u64,
    next_ns: u64,
    points: usize,
}

impl SeriesClock {
    /// Record `s` if a sample is due at its time; when the buffer is full, keep every other sample
    /// and double the interval.
    pub(super) fn sample(&mut self, series: &mut Vec<Sample>, t_ns: u64, s: Sample) {
        if t_ns < self.next_ns {
            return;
        }
        if series.len() >= self.points {
            let kept: Vec<Sample> = series.iter().step_by(2).copied().collect();
            *series = kept;
            self.interval_ns *= 2;
        }
        series.push(s);
        self.next_ns = t_ns + self.interval_ns;
    }
}

/// One sample of the engine's state over time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    pub t_s: f64,
    pub kv_util: f64,
    pub running: u32,
    pub waiting: u32,
}

/// Everything a run produced; [`crate::metrics`] summarizes it.
#[derive(Debug, Clone)]
pub struct SimOutput {
    /// Completed requests, in completion order.
    pub records: Vec<RequestRecord>,
    pub requests_sent: u64,
    /// Requests that can never fit the KV cache, even alone.
    pub requests_rejected: u64,
    /// Requests still queued or running when the horizon stopped the run.
    pub requests_unfinished: u64,
    pub steps: u64,
    pub preemptions: u64,
    pub end: SimTime,
    /// When the last request was sent.
    pub last_send: SimTime,
    /// Requests outstanding (sent, not finished) when the last one was sent.
    pub outstanding_at_last_send: u64,
    pub busy_ns: u64,
    pub kv_util_time_weighted_mean: f64,
    pub kv_util_max: f64,
    pub max_waiting: u32,
    pub series: Vec<Sample>,
    pub prefill_tokens: u64,
    pub decode_tokens: u64,
    /// Every gap between successive tokens of the requests in the workload's measured window (vLLM's
    /// pooled ITL), finished or not.
    pub itl_gaps: GapHistogram,
    /// Cached blocks evicted from the prefix cache to make room.
    pub prefix_evictions: u64,
    /// With [`SimOptions::until_first_tokens`]: the TTFT (s) of every request that got its first
    /// token, in the order the tokens came (empty otherwise).
    pub ttfts_s: Vec<f64>,
}

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

/// A request on its way to a replica: sent, and when its engine will see it.
#[derive(Clone)]
struct Arrived {
    id: u32,
    send: u64,
    enqueued: u64,
    client: u32,
    input: u32,
    output: u32,
    class: u16,
    content: Content,
    /// What prefix-aware routing keys on (a conversation, a trace's first block).
    route_key: Option<u64>,
}

impl Arrived {
    fn new(id: u64, s: Sent) -> Arrived {
        Arrived {
            id: id as u32,
            send: s.send,
            enqueued: 0,
            client: s.client,
            input: s.input,
            output: s.output,
            class: s.class,
            content: s.content,
            route_key: s.route_key,
        }
    }
}

/// One serving engine with its own front-end, clock and output: the event loop of a single replica,
/// advanced one step at a time by [`drive`].
pub(super) struct Replica<'a> {
    pub(super) eng: Engine<'a>,
    pub(super) out: SimOutput,
    pub(super) now: u64,
    inbox: VecDeque<Arrived>,
    frontend_free: u64,
    serial_ns: u64,
    overhead_ns: u64,
    pub(super) kv_area: f64,
    pub(super) clock: SeriesClock,
    window: MeasureWindow,
    /// The fast-forward's per-phase block counts, kept between calls (the step loop allocates
    /// nothing).
    pub(super) crossings: Vec<u64>,
    /// The requests a pooled step finished, kept between steps.
    finished: Vec<u32>,
    /// A running request (index, admission) that finishes within two steps: no decode stretch is
    /// possible until it is done, so the fast-forward does not scan the batch to find that again.
    pub(super) ff_blocker: Option<(u32, u64)>,
    /// Record each first token's TTFT (SimOptions::until_first_tokens).
    keep_ttfts: bool,
}

/// The requests whose token gaps count: the workload's warm-up and cool-down left out, as
/// [`crate::metrics::summarize`] leaves them out of the per-request metrics. Cool-down needs the
/// planned request count; a run bounded only by its duration counts its last requests' gaps too.
#[derive(Debug, Clone, Copy)]
struct MeasureWindow {
    first_id: u64,
    end_id: u64,
    from_ns: u64,
}

impl MeasureWindow {
    fn of(w: &Workload) -> MeasureWindow {
        MeasureWindow {
            first_id: w.spec.warmup_requests,
            end_id: w.planned_requests().map_or(u64::MAX, |n| n.saturating_sub(w.spec.cooldown_requests)),
            from_ns: SimTime::from_secs(w.spec.warmup_s.max(0.0)).0,
        }
    }
    fn contains(&self, id: u32, send_ns: u64) -> bool {
        (id as u64) >= self.first_id && (id as u64) < self.end_id && send_ns >= self.from_ns
    }
}

impl<'a> Replica<'a> {
    /// `shares`: the workload's requests share content, so a prefix cache can hit.
    fn new(
        p: &'a Profile,
        opts: &SimOptions,
        expected_requests: usize,
        window: MeasureWindow,
        shares: bool,
    ) -> Replica<'a> {
        let e = &p.engine;
        let capacity_blocks = e.kv_capacity_blocks();
        // The prefix cache (vLLM's, and SGLang's radix cache approximated by it), where it can
        // matter. Blocks held per sequence besides KV (hybrid models' state) are not in the cache's
        // pool: those models run without it here. TensorRT-LLM's block reuse is not simulated.
        let cache = (shares && e.prefix_caching && e.kind != EngineKind::Trtllm && e.per_seq_reserved_blocks == 0)
            .then(|| PrefixCache::new(capacity_blocks));
        Replica {
            eng: Engine {
                p,
                model: StepModel::new(p),
                reqs: Vec::new(),
                free_slots: Vec::new(),
                running: Vec::new(),
                waiting: VecDeque::new(),
                chunked: None,
                free_blocks: capacity_blocks,
                capacity_blocks,
                block: e.block_size_tokens,
                reserved_blocks: e.per_seq_reserved_blocks,
                scheduled: Vec::with_capacity(e.max_num_seqs.min(4096) as usize + 1),
                admit_seq: 0,
                new_token_ratio: e.new_token_ratio_init,
                last_was_prefill: false,
                decode_streak: 0,
                ratio_decay: (e.new_token_ratio_init - e.new_token_ratio_min) / e.new_token_ratio_decay_steps as f64,
                preemptions: 0,
                pool: DecodePool::new(
                    !opts.step_by_step && e.kind == EngineKind::Vllm && cache.is_none(),
                    e.block_size_tokens,
                ),
                cache,
            },
            out: SimOutput {
                records: Vec::with_capacity(expected_requests),
                requests_sent: 0,
                requests_rejected: 0,
                requests_unfinished: 0,
                steps: 0,
                preemptions: 0,
                end: SimTime::ZERO,
                last_send: SimTime::ZERO,
                outstanding_at_last_send: 0,
                busy_ns: 0,
                kv_util_time_weighted_mean: 0.0,
                kv_util_max: 0.0,
                max_waiting: 0,
                series: Vec::new(),
                prefill_tokens: 0,
                decode_tokens: 0,
                itl_gaps: GapHistogram::default(),
                prefix_evictions: 0,
                ttfts_s: Vec::new(),
            },
            now: 0,
            inbox: VecDeque::new(),
            frontend_free: 0,
            serial_ns: SimTime::from_secs(p.coefficients.frontend_serial_s).0,
            overhead_ns: SimTime::from_secs(p.coefficients.request_overhead_s).0,
            kv_area: 0.0,
            // 1 ms, doubled whenever the buffer fills.
            clock: SeriesClock { interval_ns: 1_000_000, next_ns: 0, points: opts.series_points.max(2) },
            window,
            crossings: Vec::new(),
            finished: Vec::new(),
            ff_blocker: None,
            keep_ttfts: opts.until_first_tokens,
        }
    }

    /// A request sent at `a.send` reaches this replica's serial front-end, then the engine at
    /// max(send, front-end free) + serial + overhead.
    fn accept(&mut self, mut a: Arrived) {
        a.enqueued = a.send.max(self.frontend_free).saturating_add(self.serial_ns).saturating_add(self.overhead_ns);
        self.frontend_free = a.send.max(self.frontend_free) + self.serial_ns;
        self.inbox.push_back(a);
    }

    fn busy(&self) -> bool {
        !self.eng.is_idle()
    }

    /// When this replica next acts: now if it has work, else when its next request reaches the engine.
    fn next_event(&self) -> Option<u64> {
        if self.busy() {
            Some(self.now)
        } else {
            self.inbox.front().map(|a| a.enqueued.max(self.now))
        }
    }

    /// Admit what has reached the engine, then run one step, or a decode-only stretch of steps none
    /// of which starts at or after `ff_limit` (the next send, the horizon; None: one step only).
    /// `on_finish(time, client, rejected)` is told of every request that completes or is rejected.
    /// Returns false when the replica cannot make progress.
    fn advance<F: FnMut(&StepView)>(
        &mut self,
        observer: &mut F,
        on_finish: &mut dyn FnMut(u64, u32, bool),
        ff_limit: Option<u64>,
    ) -> bool {
        let eng = &mut self.eng;
        let out = &mut self.out;
        let now = self.now;
        // A request rejected here makes its client send again (closed loops) at `now`, which the
        // caller learns only when this call returns: no fast-forward past it then.
        let mut rejected_now = false;
        while self.inbox.front().is_some_and(|a| a.enqueued <= now) {
            let a = self.inbox.pop_front().expect("front exists");
            if !eng.accepts(a.input, a.output) {
                out.requests_rejected += 1;
                rejected_now = true;
                on_finish(now, a.client, true);
                continue;
            }
            let idx = eng.free_slots.pop().unwrap_or_else(|| {
                eng.reqs.push(Live::EMPTY);
                (eng.reqs.len() - 1) as u32
            });
            let r = &mut eng.reqs[idx as usize];
            let measured = self.window.contains(a.id, a.send);
            r.start(a.id, a.client, a.class, a.send, a.enqueued, a.input, a.output, measured);
            if let (Some(_), Some(content)) = (&eng.cache, &a.content) {
                super::prefix::block_hashes(content, eng.block, &mut r.hashes);
            }
            eng.waiting.push_back(idx);
        }
        out.max_waiting = out.max_waiting.max(eng.waiting.len() as u32);
        if eng.is_idle() {
            // Idle: wait for the next request to reach the engine.
            if let Some(a) = self.inbox.front() {
                self.now = self.now.max(a.enqueued);
            }
            return true;
        }
        // vLLM's decodes as one aggregate (sim/pool.rs), unless this step runs request by request.
        let pooled = self.eng.pool_prepare(now);
        if let Some(limit) = ff_limit.filter(|_| !rejected_now) {
            let next_enqueue = self.inbox.front().map_or(u64::MAX, |a| a.enqueued);
            let limit = limit.min(next_enqueue);
            if if pooled { self.fast_forward_pool(limit) } else { self.fast_forward(limit) } {
                return true;
            }
        }
        let eng = &mut self.eng;
        let out = &mut self.out;
        let mut shape = BatchShape::default();
        eng.scheduled.clear();
        let preempted_before = eng.preemptions;
        let pooled = pooled && eng.schedule_vllm_pooled(now, &mut shape);
        if !pooled {
            match eng.p.engine.kind {
                EngineKind::Vllm => eng.schedule_vllm(now, &mut shape),
                EngineKind::Sglang => eng.schedule_sglang(now, &mut shape),
                EngineKind::Trtllm => eng.schedule_trtllm(now, &mut shape),
            }
        }
        if shape.n_seqs == 0 {
            if eng.preemptions > preempted_before {
                // Only preemptions this round: the freed requests are scheduled next round.
                return true;
            }
            // Queued work that cannot start until something arrives (fits_ever() guarantees the head
            // runs once the engine is empty).
            return match self.inbox.front() {
                Some(a) if a.enqueued > now => {
                    self.now = a.enqueued;
                    true
                }
                _ => false,
            };
        }
        let capacity_blocks = eng.capacity_blocks;
        let dt = eng.model.step_ns(&shape);
        let used = (capacity_blocks - eng.free_blocks) as f64 / capacity_blocks as f64;
        self.kv_area += used * dt as f64;
        out.kv_util_max = out.kv_util_max.max(used);
        let sample = Sample {
            t_s: now as f64 * 1e-9,
            kv_util: used,
            running: eng.running.len() as u32 + eng.chunked.is_some() as u32,
            waiting: eng.waiting.len() as u32,
        };
        self.clock.sample(&mut out.series, now, sample);
        let step_start = now;
        let now = now + dt;
        self.now = now;
        // Gaps of requests that also got a token from the previous step are this step's duration:
        // counted once per step, not per token.
        let mut gaps_of_one_step = 0u64;
        out.busy_ns += dt;
        out.steps += 1;
        let mut finished_any = false;
        let mut chunk_done = false;
        if pooled {
            // The pool's members: one decode token each, their gaps this step's duration.
            out.decode_tokens += eng.pool.n as u64;
            gaps_of_one_step += eng.pool.measured;
        }
        for k in 0..eng.scheduled.len() {
            let (idx, n) = eng.scheduled[k];
            let r = &mut eng.reqs[idx as usize];
            if n == 1 && r.generated > 0 && r.computed + 1 == r.num_tokens {
                out.decode_tokens += 1;
            } else {
                out.prefill_tokens += n as u64;
            }
            r.computed += n;
            if r.computed == r.num_tokens {
                if eng.chunked == Some(idx) {
                    // The chunked prompt is complete: it joins the decode batch.
                    chunk_done = true;
                }
                let r = &mut eng.reqs[idx as usize];
                r.generated += 1;
                if r.generated == 1 {
                    r.first_token_ns = now;
                    if self.keep_ttfts {
                        out.ttfts_s.push((now - r.arrival_ns) as f64 * 1e-9);
                    }
                } else if r.measured {
                    if r.last_token_ns == step_start {
                        gaps_of_one_step += 1;
                    } else {
                        out.itl_gaps.add(now - r.last_token_ns);
                    }
                }
                r.last_token_ns = now;
                if r.generated == r.output {
                    finished_any = true;
                } else {
                    r.num_tokens += 1;
                }
            }
        }
        out.itl_gaps.add_n(dt, gaps_of_one_step);
        if chunk_done {
            let c = eng.chunked.take().expect("chunk_done implies a chunked request");
            eng.running.push(c);
        }
        if pooled {
            // Finished: the pool's members due this step and the explicit requests whose last token
            // it was, recorded in the running batch's (admission) order.
            let mut done = std::mem::take(&mut self.finished);
            done.clear();
            eng.pool_after_step(now, &mut done);
            let from_pool = done.len();
            for &(idx, _) in &eng.scheduled {
                let r = &eng.reqs[idx as usize];
                if r.generated == r.output {
                    done.push(idx);
                }
            }
            if done.len() > from_pool {
                eng.drop_finished_explicit();
            }
            if from_pool > 0 && done.len() > from_pool {
                done.sort_unstable_by_key(|&i| eng.reqs[i as usize].admitted_seq);
            }
            for &idx in &done {
                eng.remove_running(idx);
                let r = &eng.reqs[idx as usize];
                out.records.push(r.record(now));
                let client = r.client;
                eng.free(idx);
                eng.free_slots.push(idx);
                on_finish(now, client, false);
            }
            self.finished = done;
        } else if finished_any {
            // Compact `running` in place, keeping admission order.
            let mut kept = 0;
            for k in 0..eng.running.len() {
                let idx = eng.running[k];
                let r = &eng.reqs[idx as usize];
                if r.generated == r.output {
                    out.records.push(r.record(now));
                    let client = r.client;
                    eng.free(idx);
                    eng.free_slots.push(idx);
                    on_finish(now, client, false);
                } else {
                    eng.running[kept] = idx;
                    kept += 1;
                }
            }
            eng.running.truncate(kept);
        }
        debug_assert!(eng.used_blocks() <= eng.capacity_blocks);
        observer(&StepView { eng, now_ns: now, step_ns: dt, shape });
        true
    }

    fn finish(mut self) -> SimOutput {
        let eng = &self.eng;
        self.out.requests_unfinished = eng.running.len() as u64
            + eng.waiting.len() as u64
            + eng.chunked.is_some() as u64
            + self.inbox.len() as u64;
        self.out.preemptions = eng.preemptions;
        self.out.end = SimTime(self.now);
        self.out.prefix_evictions = self.eng.cache.as_ref().map_or(0, |c| c.evictions);
        self.out.kv_util_time_weighted_mean =
            if self.out.busy_ns > 0 { self.kv_area / self.out.busy_ns as f64 } else { 0.0 };
        self.out
    }
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
const NO_EVENT: u64 = u64::MAX;

/// Replica `i`'s next event into the heap, unless the heap already holds it.
fn reschedule(r: &Replica, i: usize, key: &mut [u64], events: &mut BinaryHeap<Reverse<(u64, u32)>>) {
    let t = r.next_event().unwrap_or(NO_EVENT);
    if t != key[i] {
        key[i] = t;
        if t != NO_EVENT {
            events.push(Reverse((t, i as u32)));
        }
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
    // Sends that never wait for a completion (a closed loop's and a conversation's do).
    let sends_fixed =
        w.spec.conversation.is_none() && !matches!(w.spec.arrivals, crate::workload::Arrivals::ClosedLoop { .. });
    let until_first_tokens = opts.until_first_tokens && sends_fixed;
    let independent = replicas > 1 && !until_first_tokens && routing == Routing::RoundRobin && sends_fixed;
    if independent {
        let new = || Replica::new(p, &opts, per, window, shares);
        if let Some(outs) = drive_independent(&new, replicas as usize, &mut Pending::new(w, seed), horizon_ns, fast) {
            return outs;
        }
    }
    let mut reps: Vec<Replica> = (0..replicas).map(|_| Replica::new(p, &opts, per, window, shares)).collect();
    let mut arr = Pending::new(w, seed);
    let (mut sent, mut completed, mut last_send, mut outstanding_at_last_send) = (0u64, 0u64, 0u64, 0u64);
    let mut finished: Vec<(u64, u32, bool)> = Vec::new();
    // The replica that acts next, from a heap of (next event, index) keyed as a linear scan would
    // choose (earliest, then lowest index): `key[i]` is replica i's current next event and entries
    // that no longer match it are skipped. A replica's next event never moves back in time.
    let mut key: Vec<u64> = vec![NO_EVENT; reps.len()];
    let mut events: BinaryHeap<Reverse<(u64, u32)>> = BinaryHeap::with_capacity(reps.len() * 2);
    let mut least = LeastOutstanding::new(reps.len(), routing != Routing::RoundRobin);
    let mut sticky: std::collections::HashMap<u64, usize> = std::collections::HashMap::new();
    loop {
        while let Some(&Reverse((t, i))) = events.peek() {
            if key[i as usize] == t {
                break;
            }
            events.pop();
        }
        let next = events.peek().map(|&Reverse((t, i))| (t, i as usize));
        // Requests sent no later than that are routed first.
        if let Some(send) = arr.peek_send() {
            if next.is_none_or(|(t, _)| send <= t) {
                let a = Arrived::new(sent, arr.pop());
                let send = a.send;
                let k = match routing {
                    Routing::RoundRobin => (sent % replicas as u64) as usize,
                    Routing::LeastOutstanding => least.route(send),
                    Routing::PrefixAware => match a.route_key.and_then(|key| sticky.get(&key).copied()) {
                        Some(k) => least.route_to(send, k),
                        None => {
                            let k = least.route(send);
                            if let Some(key) = a.route_key {
                                sticky.insert(key, k);
                            }
                            k
                        }
                    },
                };
                reps[k].accept(a);
                reschedule(&reps[k], k, &mut key, &mut events);
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
        events.pop();
        key[i] = NO_EVENT;
        finished.clear();
        // A fast-forward stops before the next send (it may be routed here) and the horizon.
        let limit = fast.then(|| arr.peek_send().unwrap_or(u64::MAX).min(horizon_ns));
        let progressed =
            reps[i].advance(observer, &mut |at, client, rejected| finished.push((at, client, rejected)), limit);
        reschedule(&reps[i], i, &mut key, &mut events);
        completed += finished.len() as u64;
        for &(at, client, rejected) in &finished {
            arr.on_finish(at, client, rejected);
            least.finished(at, i);
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
