//! One replica's event loop: requests reaching its serial front-end and engine, and the step loop
//! that asks the engine's policy what runs next and advances time by the step model. drive.rs runs
//! replicas behind a router.

use super::arrivals::{Content, Sent};
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
use std::collections::VecDeque;

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
    /// KV offload's tally (None without `--kv-offload-gb`).
    pub offload: Option<super::offload::OffloadStats>,
    /// A disaggregated run's pools and KV transfers (sim/disagg.rs); None for one engine or a fleet.
    pub disagg: Option<Box<super::disagg::DisaggReport>>,
}

impl SimOutput {
    /// Add another replica's output to this one, to read a pool or a fleet as one output: records
    /// appended, counts added, maxima kept, token gaps and offload tallies merged, the later end.
    /// Busy time is one replica's and is left as it is: the caller says how replicas combine.
    pub fn absorb(&mut self, o: SimOutput) {
        let mut records = o.records;
        self.records.append(&mut records);
        self.requests_rejected += o.requests_rejected;
        self.requests_unfinished += o.requests_unfinished;
        self.steps += o.steps;
        self.preemptions += o.preemptions;
        self.end = self.end.max(o.end);
        self.kv_util_max = self.kv_util_max.max(o.kv_util_max);
        self.max_waiting = self.max_waiting.max(o.max_waiting);
        self.prefill_tokens += o.prefill_tokens;
        self.decode_tokens += o.decode_tokens;
        self.itl_gaps.merge(&o.itl_gaps);
        self.prefix_evictions += o.prefix_evictions;
        if let Some(x) = &o.offload {
            self.offload.get_or_insert_with(Default::default).add(x);
        }
    }
}

/// A request on its way to a replica: sent, and when its engine will see it.
#[derive(Clone)]
pub(super) struct Arrived {
    id: u32,
    pub(super) send: u64,
    enqueued: u64,
    client: u32,
    input: u32,
    output: u32,
    class: u16,
    content: Content,
    /// What prefix-aware routing keys on (a conversation, a trace's first block).
    pub(super) route_key: Option<u64>,
    /// Prompt tokens whose KV arrives with the request (a disaggregated decode worker's hand-over,
    /// sim/disagg.rs): admitted with them computed. 0 otherwise.
    pub(super) kv_ready: u32,
}

impl Arrived {
    pub(super) fn new(id: u64, s: Sent) -> Arrived {
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
            kv_ready: 0,
        }
    }
    /// A prefilled request handed to a decode worker at `at` with the KV of `kv_ready` prompt tokens.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn handoff(
        id: u32,
        at: u64,
        client: u32,
        class: u16,
        input: u32,
        output: u32,
        kv_ready: u32,
    ) -> Arrived {
        Arrived { id, send: at, enqueued: 0, client, input, output, class, content: None, route_key: None, kv_ready }
    }
    /// The client this request answers to, and its output length.
    pub(super) fn client_output(&self) -> (u32, u32) {
        (self.client, self.output)
    }
    /// Make this a prefill-only request (one output token: a disaggregated prefill worker's share).
    pub(super) fn prefill_only(&mut self) {
        self.output = 1;
    }
}

/// One serving engine with its own front-end, clock and output: the event loop of a single replica,
/// advanced one step at a time by drive.rs.
pub(super) struct Replica<'a> {
    pub(super) eng: Engine<'a>,
    pub(super) out: SimOutput,
    pub(super) now: u64,
    inbox: VecDeque<Arrived>,
    frontend_free: u64,
    serial_ns: u64,
    overhead_ns: u64,
    /// The API server's time per streamed token (ns; 0: not modelled), and the latest step's
    /// sequences, duration and end: the tokens per second it streams when a request arrives.
    api_token_ns: f64,
    pub(super) last_step: (u32, u64, u64),
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
    /// SGLang's scheduler_recv_interval above 1 (None: arrivals are taken every iteration).
    recv: Option<RecvSkipper>,
}

/// SGLang's SchedulerRecvSkipper (srt/managers/scheduler_recv_skipper.py, read at 0.5.5): each
/// iteration adds its previous batch's weight to a counter, 1 for a decode (or target-verify) batch
/// and 1000 for any other, and the scheduler takes the requests waiting at the tokenizer only once
/// the counter reaches the interval, resetting it. Under decode a new request thus waits for the
/// next multiple of the interval, up to that many decode steps; after a prefill it is taken at once.
/// An idle engine spins through iterations of weight 1 in microseconds: it takes arrivals at once.
#[derive(Debug, Clone, Copy)]
pub(super) struct RecvSkipper {
    interval: u32,
    /// The weights counted since the last take.
    counter: u32,
}

impl RecvSkipper {
    /// At the start of an iteration: whether the scheduler takes what has arrived (the count resets
    /// whether or not anything has).
    fn poll(&mut self, idle: bool) -> bool {
        if idle || self.counter >= self.interval {
            self.counter = 0;
            return true;
        }
        false
    }

    /// An iteration that runs nothing (requests wait but none can start): it has weight 1 and takes
    /// microseconds, so SGLang spins through them and takes the held-back arrivals at the next poll.
    fn spin(&mut self) {
        self.counter = self.interval;
    }

    /// After `steps` decode steps, each preceded by a poll that found nothing to take (a decode
    /// stretch), or one prefill step.
    fn count(&mut self, steps: u64, prefill: bool) {
        let t = self.interval as u64;
        self.counter = match (prefill, steps) {
            (true, _) => self.interval,
            (false, 0) => self.counter,
            (false, n) => {
                let c = if self.counter as u64 >= t { 0 } else { self.counter as u64 };
                ((c + n - 1) % t + 1) as u32
            }
        };
    }
}

/// The requests whose token gaps count: the workload's warm-up and cool-down left out, as
/// [`crate::metrics::summarize`] leaves them out of the per-request metrics. Cool-down needs the
/// planned request count; a run bounded only by its duration counts its last requests' gaps too.
#[derive(Debug, Clone, Copy)]
pub(super) struct MeasureWindow {
    first_id: u64,
    end_id: u64,
    from_ns: u64,
}

impl MeasureWindow {
    pub(super) fn of(w: &Workload) -> MeasureWindow {
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

/// The KV block size when the engine keeps a prefix cache: vLLM's, and SGLang's radix cache
/// approximated by it, where it can matter (`shares`: the workload's requests share content). Blocks
/// held per sequence besides KV (hybrid models' state) are not in the cache's pool: those models run
/// without it here. TensorRT-LLM's block reuse is not simulated.
pub(super) fn cache_block(p: &Profile, shares: bool) -> Option<u32> {
    let e = &p.engine;
    (shares && e.prefix_caching && e.kind != EngineKind::Trtllm && e.per_seq_reserved_blocks == 0)
        .then_some(e.block_size_tokens)
}

impl<'a> Replica<'a> {
    /// `shares`: the workload's requests share content, so a prefix cache can hit.
    pub(super) fn new(
        p: &'a Profile,
        opts: &SimOptions,
        expected_requests: usize,
        window: MeasureWindow,
        shares: bool,
    ) -> Replica<'a> {
        let e = &p.engine;
        let capacity_blocks = e.kv_capacity_blocks();
        let mut cache = cache_block(p, shares).map(|_| PrefixCache::new(capacity_blocks));
        // KV offload: a host tier under the prefix cache (sim/offload.rs). A workload that shares no
        // content keeps no cache and cannot hit: the run reports an empty tier.
        let offload = e.kv_offload.as_ref().map(|k| {
            if let Some(c) = &mut cache {
                c.host = Some(Box::new(super::offload::HostTier::new(k.host_blocks)));
            }
            Box::new(super::offload::Offload::new(k))
        });
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
                    !opts.step_by_step
                        && e.kind == EngineKind::Vllm
                        && cache.is_none()
                        && p.speculative().is_none()
                        && e.stream_interval == 1,
                    e.block_size_tokens,
                ),
                cache,
                spec: p.speculative().map(super::spec::SpecState::new),
                offload,
                adp: Default::default(),
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
                offload: None,
                disagg: None,
            },
            now: 0,
            inbox: VecDeque::new(),
            frontend_free: 0,
            serial_ns: SimTime::from_secs(p.coefficients.frontend_serial_s).0,
            overhead_ns: SimTime::from_secs(p.coefficients.request_overhead_s).0,
            api_token_ns: p.api_per_streamed_token_s() * 1e9,
            last_step: (0, 0, 0),
            kv_area: 0.0,
            // 1 ms, doubled whenever the buffer fills.
            clock: SeriesClock { interval_ns: 1_000_000, next_ns: 0, points: opts.series_points.max(2) },
            window,
            crossings: Vec::new(),
            finished: Vec::new(),
            ff_blocker: None,
            keep_ttfts: opts.until_first_tokens,
            // Above 1 only for SGLang (the profile refuses it elsewhere).
            recv: (e.recv_interval > 1).then_some(RecvSkipper { interval: e.recv_interval, counter: 0 }),
        }
    }

    /// A request sent at `a.send` reaches this replica's serial front-end, then the engine at
    /// max(send, front-end free) + serial + overhead.
    pub(super) fn accept(&mut self, mut a: Arrived) {
        let overhead = self.overhead_under_streaming(a.send);
        a.enqueued = a.send.max(self.frontend_free).saturating_add(self.serial_ns).saturating_add(overhead);
        self.frontend_free = a.send.max(self.frontend_free) + self.serial_ns;
        self.inbox.push_back(a);
    }

    /// The request overhead at `send`: what streaming the running sequences' tokens leaves of the
    /// API server stretches it (1 / (1 - busy share), the share at most
    /// crate::profile::API_BUSY_MAX), from the latest step unless the engine has been
    /// idle since.
    fn overhead_under_streaming(&self, send: u64) -> u64 {
        let (seqs, dt, end) = self.last_step;
        if self.api_token_ns == 0.0 || seqs == 0 || dt == 0 || end.saturating_add(dt) < send {
            return self.overhead_ns;
        }
        let busy = crate::profile::api_busy_share(self.api_token_ns, seqs as f64, dt as f64);
        (self.overhead_ns as f64 / (1.0 - busy)).round() as u64
    }

    /// Requests sent to it that its engine has not seen yet (in the front-end).
    pub(super) fn inbox_len(&self) -> usize {
        self.inbox.len()
    }

    /// No front-end (a disaggregated decode worker: the request was tokenized and admitted by the
    /// router and the prefill worker before it).
    pub(super) fn without_frontend(mut self) -> Self {
        self.serial_ns = 0;
        self.overhead_ns = 0;
        self
    }

    fn busy(&self) -> bool {
        !self.eng.is_idle()
    }

    /// When this replica next acts: now if it has work, else when its next request reaches the engine.
    pub(super) fn next_event(&self) -> Option<u64> {
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
    pub(super) fn advance<F: FnMut(&StepView)>(
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
        let take = self.recv.as_mut().is_none_or(|r| r.poll(eng.is_idle()));
        while take && self.inbox.front().is_some_and(|a| a.enqueued <= now) {
            let mut a = self.inbox.pop_front().expect("front exists");
            if !eng.accepts(a.input, a.output, a.kv_ready) {
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
            r.computed = a.kv_ready;
            if eng.cache.is_some() {
                if let Some(hashes) = a.content.take() {
                    r.hashes = hashes;
                }
            }
            if let Some(b) = eng.p.engine.attention_dp_balance {
                eng.reqs[idx as usize].adp_rank = eng.adp.assign(b.ranks);
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
            let steps_before = self.out.steps;
            if if pooled { self.fast_forward_pool(limit) } else { self.fast_forward(limit) } {
                if let Some(r) = &mut self.recv {
                    // The stretch began with this call's poll: its first step follows it.
                    r.count(self.out.steps - steps_before, false);
                }
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
            if let Some(done) = eng.next_load_done() {
                // KV offload: nothing runs until a copy from host memory ends (or a request arrives).
                let next = self.inbox.front().map_or(u64::MAX, |a| a.enqueued);
                self.now = done.min(next).max(now);
                return true;
            }
            if let Some(r) =
                self.recv.as_mut().filter(|_| !take && self.inbox.front().is_some_and(|a| a.enqueued <= now))
            {
                r.spin();
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
        let dt = match eng.spec.is_some() {
            false => eng.model.step_ns(&shape),
            true => {
                eng.spec_verify(&mut shape);
                let draft = eng.spec.as_ref().map_or_else(Default::default, |s| s.draft);
                eng.model.step_ns_spec(&shape, &draft)
            }
        };
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
        let prefill_tokens_before = out.prefill_tokens;
        // Gaps of requests that also got a token from the previous step are this step's duration:
        // counted once per step, not per token.
        let mut gaps_of_one_step = 0u64;
        out.busy_ns += dt;
        out.steps += 1;
        self.last_step = (shape.n_seqs, dt, now);
        let mut finished_any = false;
        let mut chunk_done = false;
        if pooled {
            // The pool's members: one decode token each, their gaps this step's duration.
            out.decode_tokens += eng.pool.n as u64;
            gaps_of_one_step += eng.pool.measured;
        }
        let stream = eng.p.engine.stream_interval;
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
                    r.sent_ns = now;
                    if self.keep_ttfts {
                        out.ttfts_s.push((now - r.arrival_ns) as f64 * 1e-9);
                    }
                } else if stream > 1 {
                    // A chunk when the output reaches 1 + m x the interval, and the last token.
                    if (r.generated - 1).is_multiple_of(stream) || r.generated == r.output {
                        if r.measured {
                            out.itl_gaps.add(now - r.sent_ns);
                        }
                        r.sent_ns = now;
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
        if let Some(r) = &mut self.recv {
            r.count(1, out.prefill_tokens > prefill_tokens_before);
        }
        if eng.spec.is_some() {
            finished_any |= eng.spec_emit(&mut out.decode_tokens, &mut out.itl_gaps);
        }
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
                let client = eng.complete(idx, now, &mut out.records);
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
                    let client = eng.complete(idx, now, &mut out.records);
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

    pub(super) fn finish(mut self) -> SimOutput {
        let eng = &self.eng;
        self.out.requests_unfinished = eng.running.len() as u64
            + eng.waiting.len() as u64
            + eng.chunked.is_some() as u64
            + eng.loading().len() as u64
            + self.inbox.len() as u64;
        self.out.preemptions = eng.preemptions;
        self.out.end = SimTime(self.now);
        self.out.prefix_evictions = self.eng.cache.as_ref().map_or(0, |c| c.evictions);
        self.out.offload = self.eng.offload_stats();
        self.out.kv_util_time_weighted_mean =
            if self.out.busy_ns > 0 { self.kv_area / self.out.busy_ns as f64 } else { 0.0 };
        self.out
    }
}
