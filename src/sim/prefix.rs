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

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const NIL: u32 = u32::MAX;

/// The keys are already uniformly mixed 64-bit hashes: hashing them again (SipHash, the default)
/// cost a third of a cached run's time.
#[derive(Default)]
struct Identity(u64);

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

type BlockMap = HashMap<u64, u32, BuildHasherDefault<Identity>>;

/// The block pool with its cache of full blocks by content hash.
pub(super) struct PrefixCache {
    ref_cnt: Vec<u32>,
    /// The content hash a block is cached under (0: none).
    hash: Vec<u64>,
    map: BlockMap,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    pub(super) evictions: u64,
}

impl PrefixCache {
    pub(super) fn new(blocks: u64) -> PrefixCache {
        let n = blocks as usize;
        let prev = (0..n as u32).map(|i| if i == 0 { NIL } else { i - 1 }).collect();
        let next = (0..n as u32).map(|i| if i + 1 == n as u32 { NIL } else { i + 1 }).collect();
        PrefixCache {
            ref_cnt: vec![0; n],
            hash: vec![0; n],
            map: BlockMap::default(),
            prev,
            next,
            head: if n == 0 { NIL } else { 0 },
            tail: if n == 0 { NIL } else { n as u32 - 1 },
            evictions: 0,
        }
    }
    fn unlink(&mut self, b: u32) {
        let (p, n) = (self.prev[b as usize], self.next[b as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[b as usize] = NIL;
        self.next[b as usize] = NIL;
    }
    fn push_back(&mut self, b: u32) {
        self.prev[b as usize] = self.tail;
        self.next[b as usize] = NIL;
        if self.tail == NIL {
            self.head = b;
        } else {
            self.next[self.tail as usize] = b;
        }
        self.tail = b;
    }
    fn push_front(&mut self, b: u32) {
        self.next[b as usize] = self.head;
        self.prev[b as usize] = NIL;
        if self.head == NIL {
            self.tail = b;
        } else {
            self.prev[self.head as usize] = b;
        }
        self.head = b;
    }
    /// A new block from the head of the free queue, its cached content evicted.
    pub(super) fn allocate(&mut self) -> u32 {
        let b = self.head;
        assert!(b != NIL, "KV over-allocation");
        self.unlink(b);
        let h = self.hash[b as usize];
        if h != 0 {
            if self.map.get(&h) == Some(&b) {
                self.map.remove(&h);
            }
            self.hash[b as usize] = 0;
            self.evictions += 1;
        }
        self.ref_cnt[b as usize] = 1;
        b
    }
    /// One reference fewer; true when the block went back to the free queue.
    pub(super) fn release(&mut self, b: u32) -> bool {
        let c = &mut self.ref_cnt[b as usize];
        *c -= 1;
        if *c > 0 {
            return false;
        }
        if self.hash[b as usize] != 0 {
            self.push_back(b);
        } else {
            self.push_front(b);
        }
        true
    }
    /// Take a cached block for another request; true when it left the free queue.
    pub(super) fn touch(&mut self, b: u32) -> bool {
        let was_free = self.ref_cnt[b as usize] == 0;
        if was_free {
            self.unlink(b);
        }
        self.ref_cnt[b as usize] += 1;
        was_free
    }
    /// Cache a full block under its content hash (a hash already cached keeps its first block).
    pub(super) fn register(&mut self, b: u32, h: u64) {
        if self.hash[b as usize] == 0 && !self.map.contains_key(&h) {
            self.map.insert(h, b);
            self.hash[b as usize] = h;
        }
    }
    /// The longest run of `hashes` (at most `max_blocks`) cached, into `out`, and how many of those
    /// blocks are free (they leave the free queue when touched). `out` may hold this request's
    /// previous result: the blocks that still hold their hash are kept without a map lookup (a
    /// request waiting at the head of the queue is looked up every step, its history thousands of
    /// blocks long).
    pub(super) fn lookup(&self, hashes: &[u64], max_blocks: usize, out: &mut Vec<u32>) -> u64 {
        let max = max_blocks.min(hashes.len());
        let still = out.iter().zip(hashes).take(max).take_while(|(&b, &h)| self.hash[b as usize] == h).count();
        out.truncate(still);
        for h in &hashes[still..max] {
            match self.map.get(h) {
                Some(&b) => out.push(b),
                None => break,
            }
        }
        out.iter().filter(|&&b| self.ref_cnt[b as usize] == 0).count() as u64
    }
    /// Blocks in the free queue from head to tail (tests).
    #[cfg(test)]
    pub(super) fn queue(&self) -> Vec<u32> {
        let mut v = Vec::new();
        let mut b = self.head;
        while b != NIL {
            v.push(b);
            b = self.next[b as usize];
        }
        v
    }
}

/// The chain hashes of a sequence's full blocks, from its segments: block k's hash mixes block k-1's
/// with the (segment, offset, length) pieces that fill it, so equal prefixes give equal hashes and
/// nothing else does. Never 0.
pub(super) fn block_hashes(segments: &[(u64, u32)], block: u32, out: &mut Vec<u64>) {
    out.clear();
    let mut parent: u64 = 0x243F_6A88_85A3_08D3;
    let mut acc = parent;
    let mut filled = 0u32;
    for &(id, len) in segments {
        let mut off = 0u32;
        while off < len {
            let take = (len - off).min(block - filled);
            acc = mix(acc ^ mix(id ^ ((off as u64) << 32 | take as u64)));
            filled += take;
            off += take;
            if filled == block {
                let h = mix(parent ^ acc) | 1;
                out.push(h);
                parent = h;
                acc = h;
                filled = 0;
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
