//! Disaggregated prefill/decode (crate::profile::disagg): a pool of prefill replicas and a pool of
//! decode replicas (run.rs), interleaved in time order as drive.rs interleaves a fleet.
//!
//! A request sent by the client goes to a prefill worker (round-robin, Dynamo's default router mode;
//! or least-outstanding, or prefix-aware: crate::profile::disagg::PdRouting) as a request of one
//! output token: its engine queues, chunks, preempts it with its own KV pool.
//! Its first token there ends its prefill; its KV then moves to a decode worker (round-robin over
//! the decode pool, or the least outstanding) over that worker's link, transfers to one decode worker taking turns on it
//! (first come, first served: one NIC's bandwidth shared); when the KV is in, the request joins the
//! decode worker's queue with its prompt's KV computed but for its last token (vLLM recomputes it to
//! get the first token's logits), so the decode engine admits it as its policy admits any request,
//! allocating KV for the whole prompt, and its first step there is one token: that token is the one
//! the client sees first. A preempted decode recomputes its prompt there, as vLLM does.
//!
//! What is not modelled: the prefill worker holding the request's blocks until the decode worker
//! has read them (vLLM's delayed free), and the decode worker holding its blocks while the read is
//! in flight (here the transfer precedes the decode admission; a decode pool with KV room to spare
//! sees no difference).

use super::arrivals::{shares_content, Pending};
use super::drive::Events;
use super::drive::{Router, Routing};
use super::engine::StepView;
use super::run::{cache_block, Arrived, MeasureWindow, Replica, Sample, SimOptions, SimOutput};
use super::RequestRecord;
use crate::profile::disagg::{Disaggregated, PdRouting};
use crate::units::SimTime;
use crate::workload::Workload;

/// One pool's raw figures over a run (crate::metrics::pool_summary summarizes them).
#[derive(Debug, Clone, Default)]
pub struct PoolOutput {
    pub workers: u32,
    /// Busy time summed over the pool's workers (ns).
    pub busy_ns: u64,
    /// Time-weighted mean KV use over the busy time of all workers, and the highest of any.
    pub kv_util_mean: f64,
    pub kv_util_max: f64,
    pub preemptions: u64,
    /// The longest waiting queue of any worker.
    pub max_waiting: u32,
    pub steps: u64,
    pub rejected: u64,
    /// Blocks the pool's prefix caches evicted, summed over its workers (the prefill pool's: decode
    /// workers keep no prefix cache).
    pub prefix_evictions: u64,
    /// Each request's wait in this pool's queue: from reaching the worker's engine to its first step
    /// there (s), in the order the pool finished them.
    pub queue_wait_s: Vec<f64>,
}

/// A disaggregated run's own figures, besides the requests' records.
#[derive(Debug, Clone, Default)]
pub struct DisaggReport {
    pub prefill: PoolOutput,
    pub decode: PoolOutput,
    /// Each handed-over request's KV transfer (s): from its first token on the prefill worker to its
    /// KV in the decode worker, the wait for the link included, in hand-over order.
    pub kv_transfer_s: Vec<f64>,
    /// The end of the run (ns), for the pools' busy shares.
    pub end_ns: u64,
}

/// One decode worker's link, as the times its transfers hold it: first come (by the time a KV is
/// ready), first served.
///
/// Why not a single "free from" time: a prefill worker hands its requests over when its step is
/// taken, and their first tokens lie at that step's end, so the hand-overs reach the link out of
/// time order: another prefill worker's step, taken later, can end earlier. With one "free from"
/// time, that earlier KV waited for the later one's transfer, its own step's end included: 131 ms
/// instead of 1.3 ms for an 8K prompt of DeepSeek-R1 over GB200's NVLink (2 prefill workers of 4
/// GPUs, SGLang, attention DP; the audit of 2026-11-28). A transfer now takes the first gap of the
/// link at or after its KV is ready.
#[derive(Debug, Default)]
struct Link {
    /// Reserved (start, end) intervals in ns, sorted, not overlapping.
    busy: Vec<(u64, u64)>,
}

impl Link {
    /// Reserve `dur` ns from the first gap at or after `ready`; the transfer's end. `now` is the
    /// simulation's time: every later transfer is ready after it (a first token lies at the end of a
    /// step taken at `now` or later), so intervals that ended by then are dropped.
    fn reserve(&mut self, ready: u64, dur: u64, now: u64) -> u64 {
        self.busy.retain(|&(_, end)| end > now);
        let mut start = ready;
        let mut at = self.busy.len();
        for (j, &(s, e)) in self.busy.iter().enumerate() {
            if start + dur <= s {
                at = j;
                break;
            }
            start = start.max(e);
        }
        self.busy.insert(at, (start, start + dur));
        start + dur
    }
}

/// What the prefill side knew of a request when it handed it over.
#[derive(Clone, Copy)]
struct PrefillSide {
    send: u64,
    enqueued: u64,
    first_scheduled: u64,
    client: u32,
    output: u32,
    preemptions: u32,
    cached: u32,
}

/// Simulate a disaggregated deployment. Pure: the same (deployment, workload, seed, options) give the
/// same output. The output's records are the requests the decode pool finished, with their send
/// time, prefill-side queueing and both sides' preemptions; `disagg` holds each pool's figures.
pub fn simulate_disaggregated(d: &Disaggregated, w: &Workload, seed: u64, opts: SimOptions) -> SimOutput {
    let opts = SimOptions { until_first_tokens: false, ..opts };
    let fast = !opts.step_by_step;
    let (np, nd) = (d.prefill_workers.max(1) as usize, d.decode_workers.max(1) as usize);
    let planned = w.planned_requests().unwrap_or(1024).min(1 << 24);
    let window = MeasureWindow::of(w);
    let horizon_ns = SimTime::from_secs(opts.horizon_s).0;
    let shares = shares_content(w);
    // Sends that never wait for a completion (a closed loop's and a conversation's do).
    let sends_fixed =
        w.spec.conversation.is_none() && !matches!(w.spec.arrivals, crate::workload::Arrivals::ClosedLoop { .. });
    let mut reps: Vec<Replica> =
        (0..np)
            .map(|_| Replica::new(&d.prefill, &opts, (planned / np as u64) as usize, window, shares))
            .chain((0..nd).map(|_| {
                Replica::new(&d.decode, &opts, (planned / nd as u64) as usize, window, false).without_frontend()
            }))
            .collect();
    let mut arr = Pending::new(w, seed, cache_block(&d.prefill, shares));
    // The router (PdRouting): round-robin, or the pools' outstanding counts (a request is
    // outstanding on a prefill worker until its first token there, on a decode worker until it
    // finishes), and for prefix-aware a conversation's prefill worker.
    let (prefill_routing, decode_routing) = match d.routing {
        PdRouting::RoundRobin => (Routing::RoundRobin, Routing::RoundRobin),
        PdRouting::LeastOutstanding => (Routing::LeastOutstanding, Routing::LeastOutstanding),
        PdRouting::PrefixAware => (Routing::PrefixAware, Routing::LeastOutstanding),
    };
    let (mut to_prefill, mut to_decode) = (Router::new(prefill_routing, np), Router::new(decode_routing, nd));
    let mut events = Events::new(reps.len());
    let mut sides: Vec<PrefillSide> = Vec::with_capacity(planned as usize);
    let mut links: Vec<Link> = (0..nd).map(|_| Link::default()).collect();
    let handover_ns = SimTime::from_secs(d.handover_s).0;
    let mut report = DisaggReport::default();
    let (mut sent, mut completed, mut last_send, mut outstanding_at_last_send, mut handed) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut finished: Vec<(u64, u32, bool)> = Vec::new();
    let mut done: Vec<RequestRecord> = Vec::new();
    loop {
        let next = events.peek();
        if let Some(send) = arr.peek_send() {
            if next.is_none_or(|(t, _)| send <= t) {
                let mut a = Arrived::new(sent, arr.pop());
                let (client, output) = a.client_output();
                sides.push(PrefillSide {
                    send: a.send,
                    enqueued: 0,
                    first_scheduled: 0,
                    client,
                    output,
                    preemptions: 0,
                    cached: 0,
                });
                a.prefill_only();
                let k = to_prefill.route(sent, a.send, a.route_key);
                last_send = a.send;
                reps[k].accept(a);
                events.reschedule(&reps[k], k);
                sent += 1;
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
        // A fast-forward stops before the next send and the horizon; a decode worker's also before
        // the earliest a prefill worker can hand it a request (its next step's start). When sends
        // wait for completions (closed loops, conversations), a completion on any worker can send a
        // request that reaches this one: then before every other worker's next event.
        let limit = fast.then(|| {
            let l = arr.peek_send().unwrap_or(u64::MAX).min(horizon_ns);
            if !sends_fixed {
                events.keys().iter().copied().fold(l, u64::min)
            } else if i >= np {
                events.keys()[..np].iter().copied().fold(l, u64::min)
            } else {
                l
            }
        });
        let progressed = reps[i].advance(
            &mut |_: &StepView| {},
            &mut |at, client, rejected| finished.push((at, client, rejected)),
            limit,
        );
        events.reschedule(&reps[i], i);
        if i < np {
            for &(at, client, rejected) in &finished {
                to_prefill.finished(at, i);
                if rejected {
                    completed += 1;
                    arr.on_finish(at, client, true);
                }
            }
            // Each prefilled request to a decode worker, after its KV transfer.
            let mut recs = std::mem::take(&mut reps[i].out.records);
            for rec in recs.drain(..) {
                let side = &mut sides[rec.id as usize];
                (side.enqueued, side.first_scheduled) = (rec.enqueued.0, rec.first_scheduled.0);
                (side.preemptions, side.cached) = (rec.preemptions, rec.cached_tokens);
                report.prefill.queue_wait_s.push(rec.queue_wait_s());
                // The hand-over (Disaggregated::handover_s) precedes the transfer: the request
                // reaches its decode worker's link that long after its first token.
                let handed_at = rec.first_token.0 + handover_ns;
                let k = to_decode.route(handed, handed_at, None);
                handed += 1;
                let ready = handed_at + SimTime::from_secs(d.link.latency_s).0;
                let bytes_ns = SimTime::from_secs(d.transfer_s(rec.input_tokens) - d.link.latency_s).0;
                let at = links[k].reserve(ready, bytes_ns, t);
                report.kv_transfer_s.push((at - handed_at) as f64 * 1e-9);
                let kv_ready = rec.input_tokens - 1;
                let a = Arrived::handoff(rec.id, at, side.client, rec.class, rec.input_tokens, side.output, kv_ready);
                reps[np + k].accept(a);
                events.reschedule(&reps[np + k], np + k);
            }
            reps[i].out.records = recs;
        } else {
            completed += finished.len() as u64;
            for &(at, client, rejected) in &finished {
                arr.on_finish(at, client, rejected);
                to_decode.finished(at, i - np);
            }
            // The decode worker's records, with the request's life before it.
            for mut rec in reps[i].out.records.drain(..) {
                report.decode.queue_wait_s.push(rec.queue_wait_s());
                let side = &sides[rec.id as usize];
                rec.arrival = SimTime(side.send);
                rec.enqueued = SimTime(side.enqueued);
                rec.first_scheduled = SimTime(side.first_scheduled);
                rec.preemptions += side.preemptions;
                rec.cached_tokens = side.cached;
                done.push(rec);
            }
        }
        if !progressed {
            break;
        }
    }
    let outs: Vec<SimOutput> = reps.into_iter().map(Replica::finish).collect();
    let end_ns = outs.iter().map(|o| o.end.0).max().unwrap_or(0);
    let pool = |os: &[SimOutput]| {
        let busy: u64 = os.iter().map(|o| o.busy_ns).sum();
        PoolOutput {
            workers: os.len() as u32,
            busy_ns: busy,
            kv_util_mean: if busy > 0 {
                os.iter().map(|o| o.kv_util_time_weighted_mean * o.busy_ns as f64).sum::<f64>() / busy as f64
            } else {
                0.0
            },
            kv_util_max: os.iter().map(|o| o.kv_util_max).fold(0.0, f64::max),
            preemptions: os.iter().map(|o| o.preemptions).sum(),
            max_waiting: os.iter().map(|o| o.max_waiting).max().unwrap_or(0),
            steps: os.iter().map(|o| o.steps).sum(),
            rejected: os.iter().map(|o| o.requests_rejected).sum(),
            prefix_evictions: os.iter().map(|o| o.prefix_evictions).sum(),
            queue_wait_s: Vec::new(),
        }
    };
    let (pre, dec) = outs.split_at(np);
    report.prefill = PoolOutput { queue_wait_s: std::mem::take(&mut report.prefill.queue_wait_s), ..pool(pre) };
    report.decode = PoolOutput { queue_wait_s: std::mem::take(&mut report.decode.queue_wait_s), ..pool(dec) };
    report.end_ns = end_ns;
    // Counters over every worker of both pools; the prefix cache and its host tier are the prefill
    // pool's (decode workers keep none: their requests arrive with their KV), so their tallies are
    // that pool's. The time series is the decode pool's, as the KV use above.
    let prefix_evictions = report.prefill.prefix_evictions + report.decode.prefix_evictions;
    let offload = outs.iter().filter_map(|o| o.offload.as_ref()).fold(None, |acc, o| {
        let mut a: super::offload::OffloadStats = acc.unwrap_or_default();
        a.add(o);
        Some(a)
    });
    let series = pool_series(&outs[np..]);
    let mut outs = outs;
    let mut all = outs.swap_remove(np);
    for o in &outs[np..] {
        all.itl_gaps.merge(&o.itl_gaps);
    }
    all.prefix_evictions = prefix_evictions;
    all.offload = offload;
    all.series = series;
    all.records = done;
    all.requests_sent = sent;
    all.requests_rejected = report.prefill.rejected + report.decode.rejected;
    // Prefill and decode queues, transfers landing after the horizon (in a decode worker's inbox).
    all.requests_unfinished = outs.iter().chain(std::iter::once(&all)).map(|o| o.requests_unfinished).sum::<u64>();
    all.preemptions = report.prefill.preemptions + report.decode.preemptions;
    all.steps = report.prefill.steps + report.decode.steps;
    all.end = SimTime(end_ns);
    all.last_send = SimTime(last_send);
    all.outstanding_at_last_send = outstanding_at_last_send;
    // The busy share over all workers, the decode pool's KV (where requests live longest).
    let workers = (np + nd) as u64;
    all.busy_ns = (report.prefill.busy_ns + report.decode.busy_ns) / workers;
    all.kv_util_time_weighted_mean = report.decode.kv_util_mean;
    all.kv_util_max = report.decode.kv_util_max;
    all.max_waiting = report.prefill.max_waiting.max(report.decode.max_waiting);
    all.prefill_tokens += outs.iter().map(|o| o.prefill_tokens).sum::<u64>();
    all.decode_tokens += outs.iter().map(|o| o.decode_tokens).sum::<u64>();
    all.disagg = Some(Box::new(report));
    all
}

/// A pool's state over time as one series, from its workers' own: at each time any worker sampled,
/// every worker's latest sample (none before its first), the running and waiting requests summed
/// and the KV use the workers' mean; thinned by halves, as a replica's series is, to the length of
/// the longest worker's. One worker's series comes back as it was.
fn pool_series(os: &[SimOutput]) -> Vec<Sample> {
    let mut at: Vec<(f64, usize, Sample)> =
        os.iter().enumerate().flat_map(|(k, o)| o.series.iter().map(move |s| (s.t_s, k, *s))).collect();
    at.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut latest: Vec<Option<Sample>> = vec![None; os.len()];
    let mut out: Vec<Sample> = Vec::with_capacity(at.len());
    for (t_s, k, s) in at {
        latest[k] = Some(s);
        let now = latest.iter().flatten();
        let merged = Sample {
            t_s,
            kv_util: now.clone().map(|s| s.kv_util).sum::<f64>() / os.len() as f64,
            running: now.clone().map(|s| s.running).sum(),
            waiting: now.map(|s| s.waiting).sum(),
        };
        match out.last_mut() {
            Some(last) if last.t_s == t_s => *last = merged,
            _ => out.push(merged),
        }
    }
    let points = os.iter().map(|o| o.series.len()).max().unwrap_or(0).max(2);
    while out.len() > points {
        out = out.iter().step_by(2).copied().collect();
    }
    out
}
