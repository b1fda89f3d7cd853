//! The arrival stream: open-loop arrivals drawn one ahead, closed-loop, burst and conversation sends
//! in a heap, trace records in order; and what each request's tokens are made of, where requests
//! share content (a system prompt, a conversation's history, a trace's block ids) for the prefix cache.

use crate::units::SimTime;
use crate::workload::{Arrivals, Generator, Workload, HASH_ID_BLOCK_TOKENS};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A run of tokens with one identity: requests whose sequences start with the same segments share
/// that prefix. (id, tokens).
pub(super) type Segment = (u64, u32);

/// What a request's prompt and output are made of, in order (prompt segments, then the output's).
/// None when the workload shares no content: every request is unique and no cache can hit.
pub(super) type Content = Option<Box<[Segment]>>;

/// Whether some requests share content (a system prompt, a conversation, a trace's block ids): only
/// then can a prefix cache hit.
pub(super) fn shares_content(w: &Workload) -> bool {
    w.spec.conversation.is_some()
        || w.spec.classes.iter().any(|c| c.system_prompt_tokens > 0)
        || matches!(&w.spec.arrivals, Arrivals::Trace { records }
            if records.iter().any(|r| !r.hash_ids.is_empty() || r.session.is_some()))
}

/// One request leaving a client.
pub(super) struct Sent {
    pub send: u64,
    pub client: u32,
    pub input: u32,
    pub output: u32,
    pub class: u16,
    pub content: Content,
    /// What prefix-aware routing keys on: the conversation, or a trace's first block id.
    pub route_key: Option<u64>,
}

/// Segment ids of each kind: a system prompt per class, a request's own input and output, a
/// conversation turn's user message and reply, a trace's block id.
fn segment_id(kind: u64, a: u64, b: u64) -> u64 {
    let mut z = kind.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ a.wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ b.rotate_left(29);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
const SYSTEM: u64 = 1;
const INPUT: u64 = 2;
const OUTPUT: u64 = 3;
const USER: u64 = 4;
const REPLY: u64 = 5;
const BLOCK: u64 = 6;

/// A conversation in progress on a client (closed loop, burst) or a session slot (open loop).
struct Session {
    id: u64,
    class: u16,
    turn: u32,
    turns: u32,
    /// The system prompt and every earlier user message and reply.
    history: Vec<Segment>,
    /// This turn's user message and reply, appended to the history when it completes.
    pending: [Segment; 2],
    active: bool,
}

/// Pending arrivals: open-loop arrivals drawn one ahead, the other sends in a heap. Both keyed by send
/// time; ties leave in insertion order.
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
    /// Whether requests carry their content (some of it is shared).
    shares: bool,
    sessions: Vec<Session>,
    free_sessions: Vec<u32>,
    next_session: u64,
    /// A trace's sessions: the content of each one's latest request.
    trace_sessions: std::collections::HashMap<u64, Box<[Segment]>>,
}

impl<'w> Pending<'w> {
    pub(super) fn new(w: &'w Workload, seed: u64) -> Self {
        let limit = w.planned_requests().unwrap_or(u64::MAX);
        let send_until_ns = w.spec.duration_s.map_or(u64::MAX, |d| SimTime::from_secs(d).0);
        let shares = shares_content(w);
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
            shares,
            sessions: Vec::new(),
            free_sessions: Vec::new(),
            next_session: 0,
            trace_sessions: std::collections::HashMap::new(),
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
        let queued = self.heap.peek().map(|Reverse((t, _, _))| *t);
        match &self.w.spec.arrivals {
            // An open loop of conversations: new sessions, and the later turns of running ones.
            Arrivals::OpenLoop { .. } => match (self.next_open, queued) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            Arrivals::Trace { records } => records.get(self.trace_pos).map(|r| SimTime::from_secs(r.arrival_s).0),
            _ => queued,
        }
    }
    /// Pop the next arrival.
    pub(super) fn pop(&mut self) -> Sent {
        self.sent += 1;
        let id = self.sent - 1;
        match &self.w.spec.arrivals {
            Arrivals::OpenLoop { .. } => {
                let queued = self.heap.peek().map(|Reverse((t, _, _))| *t);
                if let Some(t) = queued.filter(|&t| self.next_open.is_none_or(|o| t < o)) {
                    // The next turn of a conversation already running.
                    let Reverse((_, _, slot)) = self.heap.pop().expect("peeked");
                    return self.turn(t, slot);
                }
                let t = self.next_open.take().expect("peeked");
                self.draw_open();
                if self.w.spec.conversation.is_some() {
                    let slot = self.free_sessions.pop().unwrap_or(self.sessions.len() as u32);
                    self.start_session(slot);
                    return self.turn(t, slot);
                }
                let (i, o, c) = self.gen.lengths();
                self.plain(t, 0, i, o, c, id)
            }
            Arrivals::Trace { records } => {
                let r = &records[self.trace_pos];
                self.trace_pos += 1;
                let send = SimTime::from_secs(r.arrival_s).0;
                let content = match r.session {
                    // A session's request extends its previous request, as far as its prompt reaches.
                    Some(s) if r.hash_ids.is_empty() => {
                        let prev = self.trace_sessions.get(&s).map_or(&[][..], |c| &c[..]);
                        let c = session_content(prev, r.input_tokens, r.output_tokens, id);
                        self.trace_sessions.insert(s, c.clone());
                        Some(c)
                    }
                    _ => self.shares.then(|| trace_content(r.input_tokens, r.output_tokens, &r.hash_ids, id)),
                };
                let route_key = match r.session {
                    Some(s) => Some(segment_id(USER, s, u64::MAX - 1)),
                    None => r.hash_ids.first().map(|&h| segment_id(BLOCK, h, 0)),
                };
                Sent { send, client: 0, input: r.input_tokens, output: r.output_tokens, class: 0, content, route_key }
            }
            _ => {
                let Reverse((t, _, client)) = self.heap.pop().expect("peeked");
                if self.w.spec.conversation.is_some() {
                    let slot = client;
                    if self.sessions.get(slot as usize).is_none_or(|s| !s.active) {
                        self.start_session(slot);
                    }
                    return self.turn(t, slot);
                }
                let (i, o, c) = self.gen.lengths();
                self.plain(t, client, i, o, c, id)
            }
        }
    }
    /// A request of its own: the class's system prompt (shared), then its input, then its output.
    fn plain(&mut self, send: u64, client: u32, input: u32, output: u32, class: u16, id: u64) -> Sent {
        let sys = self.w.spec.classes.get(class as usize).map_or(0, |c| c.system_prompt_tokens);
        let content = self.shares.then(|| {
            let mut v = Vec::with_capacity(3);
            if sys > 0 {
                v.push((segment_id(SYSTEM, class as u64, 0), sys));
            }
            v.push((segment_id(INPUT, id, 0), input));
            v.push((segment_id(OUTPUT, id, 0), output));
            v.into_boxed_slice()
        });
        Sent { send, client, input: sys + input, output, class, content, route_key: None }
    }
    fn start_session(&mut self, slot: u32) {
        let class = self.gen.class();
        let turns = self.gen.turns();
        let sys = self.w.spec.classes.get(class as usize).map_or(0, |c| c.system_prompt_tokens);
        let mut history = Vec::new();
        if sys > 0 {
            history.push((segment_id(SYSTEM, class as u64, 0), sys));
        }
        let s = Session { id: self.next_session, class, turn: 0, turns, history, pending: [(0, 0); 2], active: true };
        self.next_session += 1;
        while self.sessions.len() <= slot as usize {
            self.sessions.push(Session {
                id: 0,
                class: 0,
                turn: 0,
                turns: 0,
                history: Vec::new(),
                pending: [(0, 0); 2],
                active: false,
            });
        }
        self.sessions[slot as usize] = s;
    }
    /// The session's next turn: its history, a new user message, and the reply to come.
    fn turn(&mut self, send: u64, slot: u32) -> Sent {
        let s = &self.sessions[slot as usize];
        let (user, reply) = self.gen.lengths_of(s.class);
        let s = &mut self.sessions[slot as usize];
        let u = (segment_id(USER, s.id, s.turn as u64), user);
        let r = (segment_id(REPLY, s.id, s.turn as u64), reply);
        s.pending = [u, r];
        let history: u32 = s.history.iter().map(|x| x.1).sum();
        let mut content = Vec::with_capacity(s.history.len() + 2);
        content.extend_from_slice(&s.history);
        content.push(u);
        content.push(r);
        Sent {
            send,
            client: slot,
            input: history.saturating_add(user),
            output: reply,
            class: s.class,
            content: Some(content.into_boxed_slice()),
            route_key: Some(segment_id(USER, s.id, u64::MAX)),
        }
    }
    /// A client's request finished (or was rejected) at `now`: its next request, as the workload says.
    pub(super) fn on_finish(&mut self, now: u64, client: u32, rejected: bool) {
        if let Some(conv) = &self.w.spec.conversation {
            let (think_s, exponential) = (conv.think_time_s, conv.think_exponential);
            let Some(s) = self.sessions.get_mut(client as usize) else { return };
            s.turn += 1;
            let [u, r] = s.pending;
            s.history.push(u);
            s.history.push(r);
            // A rejected turn (over the context or the cache) ends its conversation.
            let more = s.turn < s.turns && !rejected;
            if more {
                if self.sent + (self.heap.len() as u64) < self.limit {
                    let think = SimTime::from_secs(self.gen.think_s(think_s, exponential)).0;
                    self.push_send(now + think, client);
                }
                return;
            }
            s.active = false;
            s.history = Vec::new();
            match self.w.spec.arrivals {
                Arrivals::ClosedLoop { think_time_s, think_exponential, .. }
                    if self.sent + (self.heap.len() as u64) < self.limit =>
                {
                    let think = SimTime::from_secs(self.gen.think_s(think_time_s, think_exponential)).0;
                    self.push_send(now + think, client);
                }
                Arrivals::OpenLoop { .. } => self.free_sessions.push(client),
                _ => {}
            }
            return;
        }
        if let Arrivals::ClosedLoop { think_time_s, think_exponential, .. } = self.w.spec.arrivals {
            if self.sent + (self.heap.len() as u64) < self.limit {
                let think = SimTime::from_secs(self.gen.think_s(think_time_s, think_exponential)).0;
                self.push_send(now + think, client);
            }
        }
    }
}

/// A session's next request: the previous request's prompt and reply, cut to this prompt's length,
/// then the rest of the prompt its own, then its output.
fn session_content(prev: &[Segment], input: u32, output: u32, id: u64) -> Box<[Segment]> {
    let mut v = Vec::with_capacity(prev.len() + 2);
    let mut left = input;
    for &(seg, len) in prev {
        if left == 0 {
            break;
        }
        let n = len.min(left);
        v.push((seg, n));
        left -= n;
    }
    if left > 0 {
        v.push((segment_id(INPUT, id, 0), left));
    }
    v.push((segment_id(OUTPUT, id, 0), output));
    v.into_boxed_slice()
}

/// A trace request's content: Mooncake's block ids, 512 tokens each (the last block takes what is
/// left of the prompt), the rest of the prompt its own, then its output.
fn trace_content(input: u32, output: u32, hash_ids: &[u64], id: u64) -> Box<[Segment]> {
    let mut v = Vec::with_capacity(hash_ids.len() + 2);
    let mut left = input;
    for &h in hash_ids {
        if left == 0 {
            break;
        }
        let n = left.min(HASH_ID_BLOCK_TOKENS);
        v.push((segment_id(BLOCK, h, 0), n));
        left -= n;
    }
    if left > 0 {
        v.push((segment_id(INPUT, id, 0), left));
    }
    v.push((segment_id(OUTPUT, id, 0), output));
    v.into_boxed_slice()
}
