//! KV offload to host memory: the host tier under vLLM's prefix cache (profile/offload.rs has the
//! sizes and the link, ENGINES.md the sources).
//!
//! - Store: a cached block the GPU pool evicts (`PrefixCache::allocate` reusing a free block that
//!   held a hash) is kept in the host tier under its chain hash, most recently used last; when the
//!   tier is full its least recently used block is dropped. The copy to host is taken to overlap
//!   compute and to cost the step nothing (the connector stores on its own stream,
//!   vllm-ascend kv_cache_cpu_offload.md "Asynchronous Transfer": "overlapping with computation");
//!   the tier is exclusive of the GPU's cache until a block is loaded back (the block stays in host
//!   memory then, touched, as the connector's host pool keeps it).
//! - Load: a waiting request whose prefix ends on the GPU at block k and continues in the host tier
//!   from block k on (the longest run of consecutive hashes there, at most num_tokens - 1 tokens in
//!   all) is admitted as vLLM admits a connector's asynchronous hit (vllm/v1/core/sched/scheduler.py
//!   `schedule`, read in vllm-project/vllm-ascend vllm_ascend/core/recompute_scheduler.py, "Adapted
//!   from vllm-project/vllm/vllm/v1/core/sched/scheduler.py"): `get_num_new_matched_tokens` returns
//!   the host tokens with `load_kv_async`; blocks for the GPU and host hits are allocated at once,
//!   no token of the request is scheduled (`num_new_tokens = 0`), and it waits in
//!   WAITING_FOR_REMOTE_KVS, skipped by later steps, until the worker reports the copy done; then it
//!   runs with those tokens computed. The scheduler goes on to the next waiting request meanwhile,
//!   and no step waits for the copy. Here the copy takes blocks x bytes per block per GPU / the host
//!   link's effective bandwidth (each GPU copies its own shard over its own link at once), from the
//!   start of the step that admitted it; the request runs in the first step that starts after it
//!   ends. Simplifications: a loaded request joins the running batch directly (vLLM re-queues it at
//!   the front of the waiting queue, where it is the next admitted: the same unless the token budget
//!   is spent), within max_num_seqs; copies do not share the link's bandwidth with each other or
//!   with the stores.
//!
//! Runs without `--kv-offload-gb` build none of this: `Engine::offload` and `PrefixCache::host` stay
//! None, and the only cost to them is a None check per step.

use super::engine::{Engine, NONE};
use super::prefix::BlockMap;
use crate::profile::offload::KvOffload;

const NIL: u32 = u32::MAX;

/// One block in host memory: its hash and its neighbours in the LRU list.
#[derive(Debug, Clone, Copy)]
struct Node {
    hash: u64,
    prev: u32,
    next: u32,
}

/// Bytes the host tier holds per block: its node and its map entry (16 bytes and a control byte, at
/// a load factor down to 7/16 after the map doubles).
pub const BYTES_PER_HOST_BLOCK: u64 = std::mem::size_of::<Node>() as u64 + 40;

/// The host pool: block hashes, least recently used at the head. Nodes are made as blocks arrive,
/// so a tier of a terabyte costs what a run stores in it.
pub(super) struct HostTier {
    capacity: u64,
    map: BlockMap,
    nodes: Vec<Node>,
    head: u32,
    tail: u32,
    /// Blocks copied in from the GPU.
    pub(super) stored: u64,
    /// Blocks dropped to make room.
    pub(super) evicted: u64,
}

impl HostTier {
    pub(super) fn new(capacity: u64) -> HostTier {
        HostTier { capacity, map: BlockMap::default(), nodes: Vec::new(), head: NIL, tail: NIL, stored: 0, evicted: 0 }
    }
    fn unlink(&mut self, n: u32) {
        let Node { prev, next, .. } = self.nodes[n as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.nodes[next as usize].prev = prev;
        }
    }
    fn push_back(&mut self, n: u32) {
        let tail = self.tail;
        self.nodes[n as usize].prev = tail;
        self.nodes[n as usize].next = NIL;
        if tail == NIL {
            self.head = n;
        } else {
            self.nodes[tail as usize].next = n;
        }
        self.tail = n;
    }
    /// A block the GPU evicted: in, most recently used (already here: touched).
    pub(super) fn store(&mut self, hash: u64) {
        if let Some(&n) = self.map.get(&hash) {
            self.unlink(n);
            self.push_back(n);
            return;
        }
        self.stored += 1;
        let n = if (self.nodes.len() as u64) < self.capacity {
            self.nodes.push(Node { hash, prev: NIL, next: NIL });
            (self.nodes.len() - 1) as u32
        } else {
            // Full: the least recently used block goes.
            let n = self.head;
            self.unlink(n);
            let old = self.nodes[n as usize].hash;
            self.map.remove(&old);
            self.evicted += 1;
            self.nodes[n as usize].hash = hash;
            n
        };
        self.map.insert(hash, n);
        self.push_back(n);
    }
    /// How many of `hashes`, from the first, are here in a row.
    pub(super) fn run_len(&self, hashes: &[u64]) -> usize {
        hashes.iter().take_while(|h| self.map.contains_key(h)).count()
    }
    /// Mark blocks used now (a load reads them).
    pub(super) fn touch(&mut self, hashes: &[u64]) {
        for h in hashes {
            if let Some(&n) = self.map.get(h) {
                self.unlink(n);
                self.push_back(n);
            }
        }
    }
    /// Blocks held (tests).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

/// What a run's host tier did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OffloadStats {
    /// Blocks copied from the GPU to host memory, and dropped from it to make room.
    pub blocks_stored: u64,
    pub host_evictions: u64,
    /// Copies back to the GPU (one per admitted request that hit the host tier), their blocks and
    /// bytes (over all the replica's GPUs).
    pub loads: u64,
    pub blocks_loaded: u64,
    pub bytes_loaded: f64,
    /// Total time of those copies (s).
    pub load_s: f64,
    /// (request id, prompt tokens loaded from host memory) of the requests whose admission hit the
    /// host tier (a later entry for the same id replaces an earlier one: a request preempted before
    /// it ran is admitted again).
    pub host_hits: Vec<(u32, u32)>,
}

impl OffloadStats {
    /// Another run's tally added (its host hits under the same request ids).
    pub fn add(&mut self, o: &OffloadStats) {
        self.blocks_stored += o.blocks_stored;
        self.host_evictions += o.host_evictions;
        self.loads += o.loads;
        self.blocks_loaded += o.blocks_loaded;
        self.bytes_loaded += o.bytes_loaded;
        self.load_s += o.load_s;
        self.host_hits.extend_from_slice(&o.host_hits);
    }
}

/// The engine's side of the tier: the requests whose blocks are being copied back, and the tally.
pub(super) struct Offload {
    cfg: KvOffload,
    /// (copy done at, request), in admission order.
    loading: Vec<(u64, u32)>,
    stats: OffloadStats,
}

impl Offload {
    pub(super) fn new(cfg: &KvOffload) -> Offload {
        Offload { cfg: cfg.clone(), loading: Vec::new(), stats: OffloadStats::default() }
    }
}

/// What a waiting request's admission found in the host tier.
pub(super) enum HostAdmit {
    /// Nothing beyond the GPU's prefix: admit it as usual.
    Miss,
    /// It hit and its copy started: it left the waiting queue.
    Loading,
    /// It hit but its blocks do not fit now: it stays at the head (vLLM's head-of-line stop).
    NoRoom,
}

impl Engine<'_> {
    /// vLLM's admission of the waiting head `idx` when its prefix continues in host memory after the
    /// `hits` blocks found on the GPU (`free_hits` of them free). `watermark`: blocks kept free.
    pub(super) fn admit_host_hit(
        &mut self,
        now: u64,
        idx: u32,
        hits: u32,
        free_hits: u64,
        watermark: u64,
    ) -> HostAdmit {
        let block = self.block;
        let reserve_full = self.p.engine.reserve_full_prompt;
        let (Some(cache), Some(o)) = (&mut self.cache, &mut self.offload) else { return HostAdmit::Miss };
        let r = &self.reqs[idx as usize];
        if !r.table.is_empty() || r.computed > 0 || r.hashes.is_empty() {
            return HostAdmit::Miss;
        }
        let Some(host) = &mut cache.host else { return HostAdmit::Miss };
        let max = ((r.num_tokens - 1) / block) as usize;
        let from = hits as usize;
        let m = if from < max { host.run_len(&r.hashes[from..max]) } else { 0 };
        if m == 0 {
            return HostAdmit::Miss;
        }
        // kv_cache_manager.allocate_slots: blocks for the local and external hits at once (and, from
        // 0.19, room for the whole prompt).
        let loaded_tokens = (from + m) as u32 * block;
        let admit_tokens = if reserve_full { r.num_tokens } else { loaded_tokens };
        let need = (admit_tokens.div_ceil(block) - hits) as u64 + free_hits;
        if need + watermark > self.free_blocks {
            return HostAdmit::NoRoom;
        }
        host.touch(&r.hashes[from..from + m]);
        let load_ns = o.cfg.load_ns(m as u64);
        o.loading.push((now.saturating_add(load_ns), idx));
        let s = &mut o.stats;
        s.loads += 1;
        s.blocks_loaded += m as u64;
        s.bytes_loaded += m as f64 * o.cfg.block_bytes;
        s.load_s += load_ns as f64 * 1e-9;
        if r.first_sched_ns == NONE {
            s.host_hits.push((r.id, m as u32 * block));
        }
        self.waiting.pop_front();
        self.take_prefix(idx);
        self.reqs[idx as usize].computed = loaded_tokens;
        // The copied blocks are allocated and cached under their hashes (what they will hold).
        self.alloc(idx, loaded_tokens);
        HostAdmit::Loading
    }

    /// Requests whose copy is done by `now` join the running batch (as newly admitted), while
    /// max_num_seqs allows. Called at the start of each vLLM step when offload is on.
    pub(super) fn finish_loads(&mut self, now: u64) {
        let Some(o) = &mut self.offload else { return };
        let cap = self.p.engine.max_num_seqs as usize;
        let mut k = 0;
        while k < o.loading.len() {
            let (done, idx) = o.loading[k];
            if done <= now && self.running.len() < cap {
                o.loading.remove(k);
                self.admit_seq += 1;
                self.reqs[idx as usize].admitted_seq = self.admit_seq;
                self.running.push(idx);
            } else {
                k += 1;
            }
        }
    }

    /// When the next copy ends, if one is under way.
    pub(super) fn next_load_done(&self) -> Option<u64> {
        self.offload.as_ref().and_then(|o| o.loading.iter().map(|&(t, _)| t).min())
    }

    /// Requests waiting for their copy.
    pub(super) fn loading(&self) -> &[(u64, u32)] {
        self.offload.as_ref().map_or(&[], |o| &o.loading)
    }

    /// The tally, at the end of the run.
    pub(super) fn offload_stats(&mut self) -> Option<OffloadStats> {
        let o = self.offload.as_mut()?;
        let mut s = std::mem::take(&mut o.stats);
        if let Some(host) = self.cache.as_ref().and_then(|c| c.host.as_ref()) {
            s.blocks_stored = host.stored;
            s.host_evictions = host.evicted;
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_tier_drops_its_least_recently_used_block() {
        let mut t = HostTier::new(3);
        for h in [1, 2, 3] {
            t.store(h);
        }
        t.touch(&[1]);
        t.store(4);
        assert_eq!(t.run_len(&[1, 2]), 1, "2 was the least recently used");
        assert_eq!(t.run_len(&[3, 4, 1]), 3);
        assert_eq!((t.stored, t.evicted, t.len()), (4, 1, 3));
        t.store(3);
        assert_eq!(t.stored, 4, "a block already held is touched, not stored again");
    }
}
