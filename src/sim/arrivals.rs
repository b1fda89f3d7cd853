//! The arrival stream: open-loop arrivals drawn one ahead, closed-loop and burst sends in a heap,
//! trace records in order.

use crate::units::SimTime;
use crate::workload::{Arrivals, Generator, Workload};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Pending arrivals: open-loop arrivals drawn one ahead, closed-loop sends in a heap. Both keyed by
/// engine arrival time; ties leave in insertion order.
pub(super) struct Pending<'w> {
    w: &'w Workload,
    gen: Generator,
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    seq: u64,
    sent: u64,
    limit: u64,
    send_until_ns: u64,
    next_open: Option<u64>,
    trace_pos: usize,
}

impl<'w> Pending<'w> {
    pub(super) fn new(w: &'w Workload, seed: u64) -> Self {
        let limit = w.planned_requests().unwrap_or(u64::MAX);
        let send_until_ns = w.spec.duration_s.map_or(u64::MAX, |d| SimTime::from_secs(d).0);
        let mut a = Pending {
            w,
            gen: Generator::new(w, seed),
            heap: BinaryHeap::new(),
            seq: 0,
            sent: 0,
            limit,
            send_until_ns,
            next_open: None,
            trace_pos: 0,
        };
        match &w.spec.arrivals {
            Arrivals::ClosedLoop { clients, .. } => {
                for c in 0..(*clients as u64).min(limit) {
                    a.push_send(0, c as u32);
                }
            }
            Arrivals::Burst { n } => {
                for c in 0..*n {
                    a.push_send(0, c);
                }
            }
            Arrivals::OpenLoop { .. } => a.draw_open(),
            Arrivals::Trace { .. } => {}
        }
        a
    }
    pub(super) fn push_send(&mut self, send_ns: u64, client: u32) {
        if send_ns > self.send_until_ns {
            return;
        }
        self.heap.push(Reverse((send_ns, self.seq, client)));
        self.seq += 1;
    }
    pub(super) fn draw_open(&mut self) {
        if let Arrivals::OpenLoop { process, rate, .. } = &self.w.spec.arrivals {
            let t = self.gen.next_open_arrival_s(*process, rate);
            let ns = if t.is_finite() && t < 1e12 { SimTime::from_secs(t).0 } else { u64::MAX };
            self.next_open = if ns <= self.send_until_ns { Some(ns) } else { None };
        }
    }
    /// Send time of the next arrival, if any remains.
    pub(super) fn peek_send(&self) -> Option<u64> {
        if self.sent >= self.limit {
            return None;
        }
        match &self.w.spec.arrivals {
            Arrivals::OpenLoop { .. } => self.next_open,
            Arrivals::Trace { records } => records.get(self.trace_pos).map(|r| SimTime::from_secs(r.arrival_s).0),
            _ => self.heap.peek().map(|Reverse((t, _, _))| *t),
        }
    }
    /// Pop the next arrival: (send ns, client, input, output, class).
    pub(super) fn pop(&mut self) -> (u64, u32, u32, u32, u16) {
        self.sent += 1;
        match &self.w.spec.arrivals {
            Arrivals::OpenLoop { .. } => {
                let t = self.next_open.take().expect("peeked");
                let (i, o, c) = self.gen.lengths();
                self.draw_open();
                (t, 0, i, o, c)
            }
            Arrivals::Trace { records } => {
                let r = records[self.trace_pos];
                self.trace_pos += 1;
                (SimTime::from_secs(r.arrival_s).0, 0, r.input_tokens, r.output_tokens, 0)
            }
            _ => {
                let Reverse((t, _, client)) = self.heap.pop().expect("peeked");
                let (i, o, c) = self.gen.lengths();
                (t, client, i, o, c)
            }
        }
    }
    /// A closed-loop client's request finished at `now`.
    pub(super) fn on_finish(&mut self, now: u64, client: u32) {
        if let Arrivals::ClosedLoop { think_time_s, think_exponential, .. } = self.w.spec.arrivals {
            if self.sent + (self.heap.len() as u64) < self.limit {
                let think = SimTime::from_secs(self.gen.think_s(think_time_s, think_exponential)).0;
                self.push_send(now + think, client);
            }
        }
    }
}
