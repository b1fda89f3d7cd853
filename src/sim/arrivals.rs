//! The arrival stream: open-loop arrivals drawn one ahead, closed-loop, burst and conversation sends
//! in a heap, trace records in order; and what each request's tokens are made of, where requests
//! share content (a system prompt, a conversation's history, a trace's block ids) for the prefix cache.
//!
//! Content is made of segments (a run of tokens with one identity) and reaches the engine as the chain
//! hashes of its full blocks (sim/prefix.rs). A conversation and a trace session keep the hash state
//! of their history and extend it by each request's own tokens, so a turn costs its own length and a
//! copy of the history's hashes, never a pass over every earlier segment.

use super::prefix::ChainHasher;
use crate::units::SimTime;
use crate::workload::{Arrivals, Generator, Workload, HASH_ID_BLOCK_TOKENS};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A run of tokens with one identity: requests whose sequences start with the same segments share
/// that prefix. (id, tokens).
pub(super) type Segment = (u64, u32);

/// The chain hashes of the full blocks of a request's prompt and output (sim/prefix.rs), in order.
/// None when no prefix cache can hit: the workload shares no content (every request is unique), or
/// the engine keeps no cache.
pub(super) type Content = Option<Vec<u64>>;

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
    /// Tokens of the system prompt and every earlier user message and reply (the history).
    tokens: u64,
    /// With a prefix cache: the hash state after the history, and its full blocks' hashes.
    chain: ChainHasher,
    hashes: Vec<u64>,
    /// This turn's user message and reply, appended to the history when it completes.
    pending: [Segment; 2],
    active: bool,
}

impl Session {
    const IDLE: Session = Session {
        id: 0,
        class: 0,
        turn: 0,
        turns: 0,
        tokens: 0,
        chain: ChainHasher::new(1),
        hashes: Vec::new(),
        pending: [(0, 0); 2],
        active: false,
    };
}

/// A trace session: the content of its latest request (prompt and reply), which its next request
/// extends as far as its prompt reaches.
#[derive(Default)]
struct TraceSession {
    segments: Vec<Segment>,
    /// Where each segment starts in the sequence.
    starts: Vec<u64>,
    tokens: u64,
    /// The chain hashes of the sequence's full blocks.
    hashes: Vec<u64>,
}

impl TraceSession {
    /// The next request of the session: the previous request's prompt and reply cut to `input`
    /// tokens, then the rest of the prompt its own (request `id`), then its output. The session
    /// becomes it; returns its block hashes. Only the cut block and the new tokens are hashed.
    fn extend(&mut self, input: u32, output: u32, id: u64, block: u32) -> Vec<u64> {
        let kept = (input as u64).min(self.tokens);
        // The segments that start before the cut, the last one cut there (segments are never empty).
        let n = self.starts.partition_point(|&st| st < kept);
        self.segments.truncate(n);
        self.starts.truncate(n);
        if let (Some(last), Some(&st)) = (self.segments.last_mut(), self.starts.last()) {
            last.1 = last.1.min((kept - st) as u32);
        }
        // The full blocks before the cut keep their hashes; the block the cut falls in is hashed
        // again from its start.
        let full = kept / block as u64;
        self.hashes.truncate(full as usize);
        let mut chain = ChainHasher::at_boundary(block, &self.hashes);
        let from = full * block as u64;
        let first = self.starts.partition_point(|&st| st <= from).saturating_sub(1);
        for j in first..self.segments.len() {
            let ((seg, len), st) = (self.segments[j], self.starts[j]);
            if st + len as u64 > from {
                chain.feed(seg, (from.max(st) - st) as u32, len, &mut self.hashes);
            }
        }
        self.tokens = kept;
        let own = input as u64 - kept;
        for piece in [(segment_id(INPUT, id, 0), own as u32), (segment_id(OUTPUT, id, 0), output)] {
            if piece.1 > 0 {
                self.segments.push(piece);
                self.starts.push(self.tokens);
                self.tokens += piece.1 as u64;
                chain.feed(piece.0, 0, piece.1, &mut self.hashes);
            }
        }
        self.hashes.clone()
    }
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
    /// The engine's KV block size when requests carry their content's block hashes (some of it is
    /// shared and the engine keeps a prefix cache).
    hashing: Option<u32>,
    sessions: Vec<Session>,
    free_sessions: Vec<u32>,
    next_session: u64,
    /// A trace's sessions (with hashing): the content of each one's latest request.
    trace_sessions: std::collections::HashMap<u64, TraceSession>,
}

impl<'w> Pending<'w> {
    /// `cache_block`: the engine's KV block size when it keeps a prefix cache.
    pub(super) fn new(w: &'w Workload, seed: u64, cache_block: Option<u32>) -> Self {
        let limit = w.planned_requests().unwrap_or(u64::MAX);
        let send_until_ns = w.spec.duration_s.map_or(u64::MAX, |d| SimTime::from_secs(d).0);
        let hashing = cache_block.filter(|_| shares_content(w));
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
            hashing,
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
                let content = self.hashing.map(|block| match r.session {
                    // A session's request extends its previous request, as far as its prompt reaches.
                    Some(s) if r.hash_ids.is_empty() => {
                        self.trace_sessions.entry(s).or_default().extend(r.input_tokens, r.output_tokens, id, block)
                    }
                    _ => trace_content(r.input_tokens, r.output_tokens, &r.hash_ids, id, block),
                });
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
        let content = self.hashing.map(|block| {
            let mut v = Vec::new();
            let mut chain = ChainHasher::new(block);
            if sys > 0 {
                chain.feed(segment_id(SYSTEM, class as u64, 0), 0, sys, &mut v);
            }
            chain.feed(segment_id(INPUT, id, 0), 0, input, &mut v);
            chain.feed(segment_id(OUTPUT, id, 0), 0, output, &mut v);
            v
        });
        Sent { send, client, input: sys + input, output, class, content, route_key: None }
    }
    fn start_session(&mut self, slot: u32) {
        let class = self.gen.class();
        let turns = self.gen.turns();
        let sys = self.w.spec.classes.get(class as usize).map_or(0, |c| c.system_prompt_tokens);
        while self.sessions.len() <= slot as usize {
            self.sessions.push(Session::IDLE);
        }
        let s = &mut self.sessions[slot as usize];
        (s.id, s.class, s.turn, s.turns, s.tokens) = (self.next_session, class, 0, turns, sys as u64);
        (s.pending, s.active) = ([(0, 0); 2], true);
        s.hashes.clear();
        if let Some(block) = self.hashing {
            s.chain = ChainHasher::new(block);
            if sys > 0 {
                s.chain.feed(segment_id(SYSTEM, class as u64, 0), 0, sys, &mut s.hashes);
            }
        }
        self.next_session += 1;
    }
    /// The session's next turn: its history, a new user message, and the reply to come.
    fn turn(&mut self, send: u64, slot: u32) -> Sent {
        let s = &self.sessions[slot as usize];
        let (user, reply) = self.gen.lengths_of(s.class);
        let s = &mut self.sessions[slot as usize];
        let u = (segment_id(USER, s.id, s.turn as u64), user);
        let r = (segment_id(REPLY, s.id, s.turn as u64), reply);
        s.pending = [u, r];
        // The history's hashes, then this turn's (the history itself is hashed once, as it grows).
        let content = self.hashing.map(|block| {
            let mut v = Vec::with_capacity(s.hashes.len() + ((user as usize + reply as usize) / block as usize) + 1);
            v.extend_from_slice(&s.hashes);
            let mut chain = s.chain;
            chain.feed(u.0, 0, u.1, &mut v);
            chain.feed(r.0, 0, r.1, &mut v);
            v
        });
        Sent {
            send,
            client: slot,
            input: (s.tokens + user as u64).min(u32::MAX as u64) as u32,
            output: reply,
            class: s.class,
            content,
            route_key: Some(segment_id(USER, s.id, u64::MAX)),
        }
    }
    /// A client's request finished (or was rejected) at `now`: its next request, as the workload says.
    pub(super) fn on_finish(&mut self, now: u64, client: u32, rejected: bool) {
        if let Some(conv) = &self.w.spec.conversation {
            let (think_s, exponential) = (conv.think_time_s, conv.think_exponential);
            let Some(s) = self.sessions.get_mut(client as usize) else { return };
            s.turn += 1;
            // A rejected turn (over the context or the cache) ends its conversation.
            let more = s.turn < s.turns && !rejected;
            if more {
                // The turn joins the history.
                let [u, r] = s.pending;
                s.tokens += u.1 as u64 + r.1 as u64;
                if self.hashing.is_some() {
                    s.chain.feed(u.0, 0, u.1, &mut s.hashes);
                    s.chain.feed(r.0, 0, r.1, &mut s.hashes);
                }
                if self.sent + (self.heap.len() as u64) < self.limit {
                    let think = SimTime::from_secs(self.gen.think_s(think_s, exponential)).0;
                    self.push_send(now + think, client);
                }
                return;
            }
            s.active = false;
            s.hashes = Vec::new();
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

/// A trace request's block hashes: Mooncake's block ids, 512 tokens each (the last block takes what
/// is left of the prompt), the rest of the prompt its own, then its output.
fn trace_content(input: u32, output: u32, hash_ids: &[u64], id: u64, block: u32) -> Vec<u64> {
    let mut v = Vec::new();
    let mut chain = ChainHasher::new(block);
    let mut left = input;
    for &h in hash_ids {
        if left == 0 {
            break;
        }
        let n = left.min(HASH_ID_BLOCK_TOKENS);
        chain.feed(segment_id(BLOCK, h, 0), 0, n, &mut v);
        left -= n;
    }
    if left > 0 {
        chain.feed(segment_id(INPUT, id, 0), 0, left, &mut v);
    }
    chain.feed(segment_id(OUTPUT, id, 0), 0, output, &mut v);
    v
}

#[cfg(test)]
mod tests {
    use super::super::prefix::block_hashes;
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The session's content as it was built before the history was hashed incrementally: the
    /// previous request's segments cut to this prompt, then its own input and output.
    fn cut_and_extend(prev: &[Segment], input: u32, output: u32, id: u64) -> Vec<Segment> {
        let mut v = Vec::new();
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
        v
    }

    #[test]
    fn a_trace_session_hashes_as_its_whole_content_would() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for block in [1u32, 3, 16, 64] {
            let mut session = TraceSession::default();
            let mut content: Vec<Segment> = Vec::new();
            for id in 0..300u64 {
                // Prompts that extend the previous request, cut into it, or start over.
                let total: u32 = content.iter().map(|s| s.1).sum();
                let input = match rng.gen_range(0..3) {
                    0 => total + rng.gen_range(1..50),
                    1 => rng.gen_range(1..=total.max(1)),
                    _ => rng.gen_range(1..400),
                };
                let output = rng.gen_range(1..40);
                content = cut_and_extend(&content, input, output, id);
                let mut want = Vec::new();
                block_hashes(&content, block, &mut want);
                assert_eq!(session.extend(input, output, id, block), want, "block {block}, request {id}");
            }
        }
    }

    #[test]
    fn a_conversation_turn_hashes_as_its_whole_history_would() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for block in [1u32, 7, 16] {
            let mut history: Vec<Segment> = vec![(segment_id(SYSTEM, 0, 0), 37)];
            let mut chain = ChainHasher::new(block);
            let mut hashes = Vec::new();
            chain.feed(history[0].0, 0, history[0].1, &mut hashes);
            for turn in 0..200u64 {
                let u = (segment_id(USER, 1, turn), rng.gen_range(1..60));
                let r = (segment_id(REPLY, 1, turn), rng.gen_range(1..60));
                history.extend([u, r]);
                for s in [u, r] {
                    chain.feed(s.0, 0, s.1, &mut hashes);
                }
                let mut want = Vec::new();
                block_hashes(&history, block, &mut want);
                assert_eq!(hashes, want, "block {block}, turn {turn}");
            }
        }
    }
}
