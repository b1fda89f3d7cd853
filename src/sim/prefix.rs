//! vLLM's automatic prefix caching (vllm/v1/core/block_pool.py, kv_cache_manager.py,
//! single_type_kv_cache_manager.py, read at 0.33.0; ENGINES.md).
//!
//! Every KV block has an id, a reference count and, once full, the hash of its content chained to its
//! parent's (`hash_block_tokens`). The free block queue is a doubly linked list: allocation takes from
//! its head and evicts the block's hash if it had one (`get_new_blocks`, `_maybe_evict_cached_block`); a
//! request's blocks are freed tail first (`free` frees `reversed(blocks)`), and a block whose count
//! drops to 0 goes to the queue's tail when it holds a cached hash (FIFO: least recently used first)
//! and to its head when it does not (reused first). A new request looks up the longest run of its
//! leading block hashes in the cache (`find_longest_cache_hit`), at most num_tokens - 1 tokens (the
//! last token is recomputed for its logits); the hit blocks are touched (count + 1, out of the free
//! queue) and their tokens count as computed. Blocks are cached as soon as they are allocated full
//! (`cache_full_blocks` in `allocate_slots`), decode blocks included.
//!
//! Free blocks holding cached content still count as free: with caching on, capacity is what it is
//! with caching off, and a workload that shares nothing runs exactly as without a cache.
//!
//! Two shortcuts keep a run's cost proportional to the blocks it uses rather than the pool or the
//! history, each with the queue, the counts and the map exactly as the plain operations leave them:
//! blocks are materialized when first allocated (the never-used ones wait in the queue as one
//! entry), and the blocks a finished request releases to the queue's tail are held there as one
//! segment while nothing else needs them one by one. A conversation's next turn takes them back
//! whole (its history is the previous turn's sequence), so a turn costs its own tokens, not its
//! history's blocks three times over (release, lookup, touch); any other use of the queue first
//! releases the segment block by block, as the plain path would have.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const NIL: u32 = u32::MAX;
/// The blocks never allocated yet, in the free queue as one entry (they stay in id order, where the
/// queue held them at the start, until the last is taken).
const UNUSED: u32 = u32::MAX - 1;

/// The keys are already uniformly mixed 64-bit hashes: hashing them again (SipHash, the default)
/// cost a third of a cached run's time.
#[derive(Default)]
pub(super) struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

pub(super) type BlockMap = HashMap<u64, u32, BuildHasherDefault<Identity>>;

/// One block: the content hash it is cached under (0: none), its neighbours in the free queue, its
/// reference count. One record per block, so the walks over a request's blocks read one cache line
/// each.
#[derive(Debug, Clone, Copy)]
struct Slot {
    hash: u64,
    prev: u32,
    next: u32,
    ref_cnt: u32,
}

/// Bytes the cache holds per block it has handed out: its slot, and its entry in the hash map (16
/// bytes and a control byte, at a load factor down to 7/16 after the map doubles).
pub const BYTES_PER_BLOCK: u64 = std::mem::size_of::<Slot>() as u64 + 40;

/// The block pool with its cache of full blocks by content hash. Blocks are materialized when first
/// allocated, so a pool of billions of blocks costs what a run uses of it.
pub(super) struct PrefixCache {
    /// Blocks 0..slots.len(), the ones allocated at least once.
    slots: Vec<Slot>,
    /// Blocks in the pool.
    capacity: u64,
    map: BlockMap,
    head: u32,
    tail: u32,
    /// The queue neighbours of the never-allocated blocks' entry (UNUSED).
    unused_links: (u32, u32),
    /// A finished request's cached blocks, released but not yet put in the queue one by one: they
    /// belong after the queue's tail, last block first (`lazy[0]` at the very end), each free (its
    /// slot still counts 1), cached under `lazy_hashes[i]`.
    lazy: Vec<u32>,
    lazy_hashes: Vec<u64>,
    /// Blocks with two references or more (a finished request whose blocks nobody else holds can
    /// leave them as a segment).
    shared: u64,
    pub(super) evictions: u64,
    /// KV offload's host tier, which takes the blocks evicted here (sim/offload.rs); None without.
    pub(super) host: Option<Box<super::offload::HostTier>>,
}

impl PrefixCache {
    pub(super) fn new(blocks: u64) -> PrefixCache {
        let first = if blocks == 0 { NIL } else { UNUSED };
        PrefixCache {
            slots: Vec::new(),
            capacity: blocks,
            map: BlockMap::default(),
            head: first,
            tail: first,
            unused_links: (NIL, NIL),
            lazy: Vec::new(),
            lazy_hashes: Vec::new(),
            shared: 0,
            evictions: 0,
            host: None,
        }
    }
    #[inline]
    fn prev_mut(&mut self, b: u32) -> &mut u32 {
        if b == UNUSED {
            &mut self.unused_links.0
        } else {
            &mut self.slots[b as usize].prev
        }
    }
    #[inline]
    fn next_mut(&mut self, b: u32) -> &mut u32 {
        if b == UNUSED {
            &mut self.unused_links.1
        } else {
            &mut self.slots[b as usize].next
        }
    }
    fn unlink(&mut self, b: u32) {
        let (p, n) = (*self.prev_mut(b), *self.next_mut(b));
        if p == NIL {
            self.head = n;
        } else {
            *self.next_mut(p) = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            *self.prev_mut(n) = p;
        }
        *self.prev_mut(b) = NIL;
        *self.next_mut(b) = NIL;
    }
    fn push_back(&mut self, b: u32) {
        let tail = self.tail;
        let s = &mut self.slots[b as usize];
        (s.prev, s.next) = (tail, NIL);
        if tail == NIL {
            self.head = b;
        } else {
            *self.next_mut(tail) = b;
        }
        self.tail = b;
    }
    fn push_front(&mut self, b: u32) {
        let head = self.head;
        let s = &mut self.slots[b as usize];
        (s.prev, s.next) = (NIL, head);
        if head == NIL {
            self.tail = b;
        } else {
            *self.prev_mut(head) = b;
        }
        self.head = b;
    }
    /// A new block from the head of the free queue, its cached content evicted.
    pub(super) fn allocate(&mut self) -> u32 {
        if self.head == NIL {
            self.flush();
        }
        let b = self.head;
        assert!(b != NIL, "KV over-allocation");
        if b == UNUSED {
            // The first block never allocated; the entry leaves the queue with the last of them.
            let id = self.slots.len() as u32;
            assert!(id < UNUSED, "prefix cache block ids exhausted");
            self.slots.push(Slot { hash: 0, prev: NIL, next: NIL, ref_cnt: 1 });
            if self.slots.len() as u64 == self.capacity {
                self.unlink(UNUSED);
            }
            return id;
        }
        self.unlink(b);
        let h = self.slots[b as usize].hash;
        if h != 0 {
            if self.map.get(&h) == Some(&b) {
                self.map.remove(&h);
            }
            self.slots[b as usize].hash = 0;
            self.evictions += 1;
            if let Some(host) = &mut self.host {
                host.store(h);
            }
        }
        self.slots[b as usize].ref_cnt = 1;
        b
    }
    /// The held segment into the queue, block by block, as its release would have put it.
    fn flush(&mut self) {
        let lazy = std::mem::take(&mut self.lazy);
        for &b in lazy.iter().rev() {
            self.slots[b as usize].ref_cnt = 0;
            self.push_back(b);
        }
        self.lazy = lazy;
        self.lazy.clear();
        self.lazy_hashes.clear();
    }
    /// One reference fewer; true when the block went back to the free queue.
    #[cfg(test)]
    pub(super) fn release(&mut self, b: u32) -> bool {
        self.flush();
        self.release_one(b)
    }
    #[inline]
    fn release_one(&mut self, b: u32) -> bool {
        let s = &mut self.slots[b as usize];
        s.ref_cnt -= 1;
        if s.ref_cnt > 0 {
            self.shared -= (s.ref_cnt == 1) as u64;
            return false;
        }
        if s.hash != 0 {
            self.push_back(b);
        } else {
            self.push_front(b);
        }
        true
    }
    /// Release a request's blocks, tail first (vLLM's `free`); returns how many went back to the
    /// free queue. `finished`: the request is done, its blocks `table[..cached]` are cached under
    /// `hashes[..cached]` and the rest are not. When nobody else holds any block, those cached
    /// blocks are kept as the held segment (its table and hashes move into the cache, and `table`
    /// and `hashes` come back empty). Returns (freed, held).
    pub(super) fn release_table(
        &mut self,
        table: &mut Vec<u32>,
        hashes: &mut Vec<u64>,
        cached: usize,
        finished: bool,
    ) -> (u64, bool) {
        self.flush();
        if !(finished && self.shared == 0 && cached > 0) {
            let mut freed = 0;
            for &b in table.iter().rev() {
                freed += self.release_one(b) as u64;
            }
            return (freed, false);
        }
        // Every block has one reference, this request's: all go back. The uncached ones to the
        // queue's head now (the last block first, as the loop above), the cached ones held.
        let freed = table.len() as u64;
        for &b in table[cached..].iter().rev() {
            debug_assert!(self.slots[b as usize].ref_cnt == 1 && self.slots[b as usize].hash == 0);
            self.slots[b as usize].ref_cnt = 0;
            self.push_front(b);
        }
        table.truncate(cached);
        std::mem::swap(table, &mut self.lazy);
        std::mem::swap(hashes, &mut self.lazy_hashes);
        debug_assert!(self.lazy.iter().zip(&self.lazy_hashes).all(|(&b, &h)| self.slots[b as usize].hash == h));
        (freed, true)
    }
    /// Take a cached block for another request; true when it left the free queue.
    #[cfg(test)]
    pub(super) fn touch(&mut self, b: u32) -> bool {
        self.flush();
        self.touch_one(b)
    }
    #[inline]
    fn touch_one(&mut self, b: u32) -> bool {
        let was_free = self.slots[b as usize].ref_cnt == 0;
        if was_free {
            self.unlink(b);
        }
        let s = &mut self.slots[b as usize];
        s.ref_cnt += 1;
        self.shared += (s.ref_cnt == 2) as u64;
        was_free
    }
    /// Touch a request's cached prefix (its lookup's `out`), in order; returns how many blocks
    /// left the free queue. The held segment's leading blocks are taken whole.
    pub(super) fn take(&mut self, blocks: &[u32]) -> u64 {
        let k = blocks.len();
        if !self.lazy.is_empty() && k <= self.lazy.len() && blocks == &self.lazy[..k] {
            // The segment's last k blocks in the queue: out of it with their one reference; the
            // rest where they are, at the tail.
            let lazy = std::mem::take(&mut self.lazy);
            for &b in lazy[k..].iter().rev() {
                self.slots[b as usize].ref_cnt = 0;
                self.push_back(b);
            }
            self.lazy = lazy;
            self.lazy.clear();
            self.lazy_hashes.clear();
            return k as u64;
        }
        self.flush();
        blocks.iter().map(|&b| self.touch_one(b) as u64).sum()
    }
    /// Cache a full block under its content hash (a hash already cached keeps its first block).
    /// Returns whether the block is cached under `h` now.
    pub(super) fn register(&mut self, b: u32, h: u64) -> bool {
        if self.slots[b as usize].hash == 0 && !self.map.contains_key(&h) {
            self.map.insert(h, b);
            self.slots[b as usize].hash = h;
        }
        self.slots[b as usize].hash == h
    }
    /// The longest run of `hashes` (at most `max_blocks`) cached, into `out`, and how many of those
    /// blocks are free (they leave the free queue when touched). `out` may hold a guess: this
    /// request's previous result, or the blocks of the request its slot held before (a
    /// conversation's previous turn, whose blocks start this one). The leading blocks that hold the
    /// hash they are guessed for are kept without a map lookup (a block holds a hash only while the
    /// map points the hash at it, so this is the map's answer): a request waiting at the head of the
    /// queue is looked up every step, and a conversation's turn starts with its whole history.
    pub(super) fn lookup(&mut self, hashes: &[u64], max_blocks: usize, out: &mut Vec<u32>) -> u64 {
        let max = max_blocks.min(hashes.len());
        if !self.lazy.is_empty() {
            if out.is_empty() {
                // The held segment as the guess: a conversation's next turn starts with it.
                let n = max.min(self.lazy.len());
                let k = if hashes[..n] == self.lazy_hashes[..n] {
                    n
                } else {
                    hashes[..n].iter().zip(&self.lazy_hashes).take_while(|(a, b)| a == b).count()
                };
                out.extend_from_slice(&self.lazy[..k]);
                match hashes[k..max].first().and_then(|h| self.map.get(h)) {
                    // The prefix ends in the segment: every block of it is free.
                    None => return k as u64,
                    // More blocks from the map, which may lie in the segment: counted one by one.
                    Some(_) => self.flush(),
                }
            } else {
                self.flush();
            }
        }
        let still = out
            .iter()
            .zip(hashes)
            .take(max)
            .take_while(|(&b, &h)| self.slots.get(b as usize).is_some_and(|s| s.hash == h))
            .count();
        out.truncate(still);
        for h in &hashes[still..max] {
            match self.map.get(h) {
                Some(&b) => out.push(b),
                None => break,
            }
        }
        out.iter().filter(|&&b| self.slots[b as usize].ref_cnt == 0).count() as u64
    }
    /// Blocks allocated at least once (what the cache holds memory for).
    #[cfg(test)]
    pub(super) fn materialized(&self) -> usize {
        self.slots.len()
    }
    /// Blocks in the free queue from head to tail (tests).
    #[cfg(test)]
    pub(super) fn queue(&self) -> Vec<u32> {
        let mut v = Vec::new();
        let mut b = self.head;
        while b != NIL {
            if b == UNUSED {
                v.extend(self.slots.len() as u32..self.capacity as u32);
                b = self.unused_links.1;
            } else {
                v.push(b);
                b = self.slots[b as usize].next;
            }
        }
        v.extend(self.lazy.iter().rev());
        v
    }
}

/// The chain hashes of a sequence's full blocks, from its segments: block k's hash mixes block k-1's
/// with the (segment, offset, length) pieces that fill it, so equal prefixes give equal hashes and
/// nothing else does. Never 0.
#[cfg(test)]
pub(super) fn block_hashes(segments: &[(u64, u32)], block: u32, out: &mut Vec<u64>) {
    out.clear();
    let mut h = ChainHasher::new(block);
    for &(id, len) in segments {
        h.feed(id, 0, len, out);
    }
}

/// [`block_hashes`] one piece at a time: the state after a sequence's tokens, which the same
/// sequence extended continues from, so a conversation's history is hashed once and each turn adds
/// only its own tokens (hashing the whole history again made every turn cost the conversation's
/// length).
#[derive(Debug, Clone, Copy)]
pub(super) struct ChainHasher {
    block: u32,
    parent: u64,
    acc: u64,
    /// Tokens in the block being filled.
    filled: u32,
}

const CHAIN_SEED: u64 = 0x243F_6A88_85A3_08D3;

impl ChainHasher {
    pub(super) const fn new(block: u32) -> ChainHasher {
        ChainHasher { block, parent: CHAIN_SEED, acc: CHAIN_SEED, filled: 0 }
    }
    /// The state at a block boundary, after the full blocks `hashes` (restarting a sequence cut
    /// there).
    pub(super) fn at_boundary(block: u32, hashes: &[u64]) -> ChainHasher {
        let parent = hashes.last().copied().unwrap_or(CHAIN_SEED);
        ChainHasher { block, parent, acc: parent, filled: 0 }
    }
    /// Tokens `from..to` of segment `id` (whose pieces before `from` came earlier), each block that
    /// fills appended to `out`.
    pub(super) fn feed(&mut self, id: u64, from: u32, to: u32, out: &mut Vec<u64>) {
        let mut off = from;
        while off < to {
            let take = (to - off).min(self.block - self.filled);
            self.acc = mix(self.acc ^ mix(id ^ ((off as u64) << 32 | take as u64)));
            self.filled += take;
            off += take;
            if self.filled == self.block {
                let h = mix(self.parent ^ self.acc) | 1;
                out.push(h);
                self.parent = h;
                self.acc = h;
                self.filled = 0;
            }
        }
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LRU order against a hand-made sequence: request A holds blocks 0-2 (cached), B holds 3-4 (4
    /// not cached). Freed tail first, A's go to the tail in the order 2, 1, 0; B's uncached block 4 to
    /// the head, its cached block 3 after A's. New allocations take 4 first (nothing evicted), then 5
    /// (never used), then evict 2, 1, 0, 3 in that order.
    #[test]
    fn eviction_follows_vllm_free_queue_order() {
        let mut c = PrefixCache::new(6);
        let a: Vec<u32> = (0..3).map(|_| c.allocate()).collect();
        let b: Vec<u32> = (0..2).map(|_| c.allocate()).collect();
        assert_eq!((a.clone(), b.clone()), (vec![0, 1, 2], vec![3, 4]));
        for (i, &blk) in a.iter().enumerate() {
            c.register(blk, 100 + i as u64);
        }
        c.register(3, 200);
        for &blk in a.iter().rev() {
            c.release(blk);
        }
        for &blk in b.iter().rev() {
            c.release(blk);
        }
        assert_eq!(c.queue(), vec![4, 5, 2, 1, 0, 3]);
        let order: Vec<u32> = (0..6).map(|_| c.allocate()).collect();
        assert_eq!(order, vec![4, 5, 2, 1, 0, 3]);
        assert_eq!(c.evictions, 4);
    }

    #[test]
    fn a_touched_block_leaves_the_queue_and_returns_to_its_tail() {
        let mut c = PrefixCache::new(3);
        let x = c.allocate();
        c.register(x, 7);
        c.release(x);
        assert_eq!(c.queue(), vec![1, 2, 0]);
        let mut hit = vec![2];
        assert_eq!(c.lookup(&[7, 8], 2, &mut hit), 1, "a stale previous result is dropped");
        assert_eq!(hit, vec![0]);
        assert!(c.touch(0));
        assert_eq!(c.queue(), vec![1, 2]);
        assert!(c.release(0));
        assert_eq!(c.queue(), vec![1, 2, 0]);
    }

    /// The held segment against the plain path: two caches driven through the same random requests
    /// (sessions whose sequences extend each other, admissions, finishes and preemptions in random
    /// order), one releasing finished requests' blocks as a segment where it may, the other block by
    /// block; every answer, the queue and the evictions stay equal.
    #[test]
    fn a_held_segment_behaves_as_its_blocks_released_one_by_one() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        struct Req {
            tables: [Vec<u32>; 2],
            hashes: [Vec<u64>; 2],
            registered: usize,
            uncached: bool,
        }
        let mut held = 0;
        for _ in 0..300 {
            let cap = rng.gen_range(4..48u64);
            let mut c = [PrefixCache::new(cap), PrefixCache::new(cap)];
            let mut running: Vec<Req> = Vec::new();
            let mut last_table: Vec<u32> = Vec::new();
            let mut free = cap;
            for _ in 0..200 {
                if !running.is_empty() && rng.gen_bool(0.45) {
                    let mut r = running.swap_remove(rng.gen_range(0..running.len()));
                    let finished = rng.gen_bool(0.8);
                    let [t0, t1] = &mut r.tables;
                    let [h0, h1] = &mut r.hashes;
                    last_table = t1.clone();
                    let a = c[0].release_table(t0, h0, r.registered, finished && !r.uncached);
                    let b = c[1].release_table(t1, h1, r.registered, false);
                    assert_eq!(a.0, b.0);
                    held += a.1 as u32;
                    free += a.0;
                } else {
                    // Session s's sequence of `len` blocks: a prefix of its longer ones.
                    let s = rng.gen_range(0..3u64);
                    let len = rng.gen_range(1..10usize);
                    let hashes: Vec<u64> = (0..len).map(|j| s * 1000 + j as u64 + 1).collect();
                    let max = rng.gen_range(0..=len);
                    let guess: Vec<u32> = if rng.gen_bool(0.3) { last_table.clone() } else { Vec::new() };
                    let mut outs = [guess.clone(), guess];
                    let f0 = c[0].lookup(&hashes, max, &mut outs[0]);
                    let f1 = c[1].lookup(&hashes, max, &mut outs[1]);
                    assert_eq!((f0, &outs[0]), (f1, &outs[1]));
                    let hits = outs[0].len();
                    if rng.gen_bool(0.2) || (len - hits) as u64 + f0 > free {
                        continue; // not admitted (yet)
                    }
                    let t = [c[0].take(&outs[0]), c[1].take(&outs[1])];
                    assert_eq!(t[0], t[1]);
                    free -= t[0];
                    for _ in hits..len {
                        let (x, y) = (c[0].allocate(), c[1].allocate());
                        assert_eq!(x, y);
                        outs[0].push(x);
                        outs[1].push(y);
                        free -= 1;
                    }
                    let full = if rng.gen_bool(0.5) { len } else { len - 1 }.max(hits);
                    let mut uncached = false;
                    for k in hits..full {
                        let (x, y) = (c[0].register(outs[0][k], hashes[k]), c[1].register(outs[1][k], hashes[k]));
                        assert_eq!(x, y);
                        uncached |= !x;
                    }
                    let [t0, t1] = outs;
                    running.push(Req {
                        tables: [t0, t1],
                        hashes: [hashes.clone(), hashes],
                        registered: full,
                        uncached,
                    });
                }
                assert_eq!(c[0].queue(), c[1].queue());
                assert_eq!(c[0].evictions, c[1].evictions);
            }
        }
        assert!(held > 1000, "the segment path ran {held} times");
    }

    #[test]
    fn a_pool_of_billions_of_blocks_costs_the_blocks_used() {
        let mut c = PrefixCache::new(u64::MAX / 2);
        let b: Vec<u32> = (0..3).map(|_| c.allocate()).collect();
        assert_eq!(b, vec![0, 1, 2]);
        c.register(1, 9);
        for &x in b.iter().rev() {
            c.release(x);
        }
        // 2 and 0 (uncached) at the head before the never-used blocks, 1 (cached) after them.
        assert_eq!((c.allocate(), c.allocate(), c.allocate()), (0, 2, 3));
        assert_eq!(c.materialized(), 4);
    }

    #[test]
    fn equal_prefixes_hash_equal_and_a_different_piece_changes_every_later_block() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        block_hashes(&[(1, 40), (2, 30)], 16, &mut a);
        block_hashes(&[(1, 40), (3, 30)], 16, &mut b);
        assert_eq!(a.len(), 4);
        assert_eq!(a[..2], b[..2], "the first 32 tokens are segment 1 in both");
        assert!(a[2..].iter().zip(&b[2..]).all(|(x, y)| x != y));
        let mut c = Vec::new();
        block_hashes(&[(1, 20), (1, 20)], 16, &mut c);
        assert_ne!(a[1], c[1], "segment 1 twice is not segment 1 once");
    }
}
