//! Pooled token gaps: every gap between two successive streamed chunks of every measured request (a
//! token each unless the engine's stream interval or a speculative step batches them), as
//! `vllm bench serve` pools them into its ITL (FACTS.md, metric names). A run of a million requests
//! has hundreds of millions of gaps, so they go into a log-linear histogram rather than a list:
//! 128 sub-buckets per power of two of nanoseconds, so a value read back is within 0.4% of the exact
//! one (below 128 ns every nanosecond has its own bucket). Adding a gap is a shift and an increment,
//! cheap enough for the step loop. The mean is kept exactly.

/// Sub-bucket bits: 2^7 = 128 buckets per power of two.
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;

/// Buckets for every u64: 128 exact ones, then 128 per power of two from 2^7 to 2^63.
const N_BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) << SUB_BITS;

/// The histogram holds only the range of buckets its gaps fell in (a run's gaps span a few hundred
/// of the 7,424 buckets): a simulation allocates it, and calibration runs hundreds of thousands of
/// simulations, where allocating, zeroing and freeing 59 KB each cost more than the gaps (the
/// allocator hands such blocks back to the kernel, and the page faults and TLB shootdowns were a
/// fifth of a calibration's CPU time).
#[derive(Clone, Default)]
pub struct GapHistogram {
    /// Index of the bucket `counts[0]` counts.
    lo: usize,
    counts: Vec<u64>,
    n: u64,
    sum_ns: u128,
}

#[inline]
fn bucket(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros();
    let m = (v >> (e - SUB_BITS)) & (SUB - 1);
    (((e - SUB_BITS + 1) as u64) << SUB_BITS | m) as usize
}

/// The middle of a bucket's range, in ns.
fn bucket_mid_ns(b: usize) -> f64 {
    let b = b as u64;
    if b < SUB {
        return b as f64;
    }
    let e = (b >> SUB_BITS) + SUB_BITS as u64 - 1;
    let m = b & (SUB - 1);
    let width = 1u64 << (e - SUB_BITS as u64);
    ((SUB + m) * width) as f64 + (width as f64 - 1.0) / 2.0
}

impl GapHistogram {
    /// Count one gap of `ns` nanoseconds.
    #[inline]
    pub fn add(&mut self, ns: u64) {
        self.add_n(ns, 1);
    }

    /// Count `k` gaps of `ns` nanoseconds each (the decodes of one step).
    #[inline]
    pub fn add_n(&mut self, ns: u64, k: u64) {
        let b = bucket(ns);
        match self.counts.get_mut(b.wrapping_sub(self.lo)) {
            Some(c) => *c += k,
            None => {
                self.cover(b);
                self.counts[b - self.lo] += k;
            }
        }
        self.n += k;
        self.sum_ns += ns as u128 * k as u128;
    }

    /// Widen the held range to bucket `b`, with room for as many buckets again on that side.
    #[cold]
    fn cover(&mut self, b: usize) {
        if self.counts.is_empty() {
            self.lo = b.saturating_sub(32);
            self.counts = vec![0; (b + 32).min(N_BUCKETS - 1) + 1 - self.lo];
            return;
        }
        let hi = self.lo + self.counts.len();
        let slack = self.counts.len().max(32);
        let (lo, hi) =
            if b < self.lo { (b.saturating_sub(slack), hi) } else { (self.lo, (b + 1 + slack).min(N_BUCKETS)) };
        let mut counts = vec![0; hi - lo];
        counts[self.lo - lo..self.lo - lo + self.counts.len()].copy_from_slice(&self.counts);
        self.lo = lo;
        self.counts = counts;
    }

    /// (bucket, count) of every bucket that counted a gap, ascending.
    fn nonzero(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts.iter().enumerate().filter(|(_, &c)| c > 0).map(|(i, &c)| (self.lo + i, c))
    }

    /// Add every gap of `other`.
    pub fn merge(&mut self, other: &GapHistogram) {
        for (b, c) in other.nonzero() {
            if b.wrapping_sub(self.lo) >= self.counts.len() {
                self.cover(b);
            }
            self.counts[b - self.lo] += c;
        }
        self.n += other.n;
        self.sum_ns += other.sum_ns;
    }

    pub fn count(&self) -> u64 {
        self.n
    }

    /// Exact mean in seconds (NaN when empty).
    pub fn mean_s(&self) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        self.sum_ns as f64 / self.n as f64 * 1e-9
    }

    /// The value of the gap of rank `k` (0-based, ascending), in ns, to the bucket's middle.
    fn at_rank(&self, k: u64) -> f64 {
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > k {
                return bucket_mid_ns(self.lo + i);
            }
        }
        bucket_mid_ns((self.lo + self.counts.len()).saturating_sub(1))
    }

    /// numpy.percentile's default (linear interpolation between the ranks around q/100 x (n - 1)),
    /// in seconds; NaN when empty.
    pub fn percentile_s(&self, q: f64) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        let pos = q / 100.0 * (self.n - 1) as f64;
        let lo = pos.floor() as u64;
        let hi = pos.ceil() as u64;
        let (a, b) = (self.at_rank(lo), self.at_rank(hi));
        (a + (b - a) * (pos - lo as f64)) * 1e-9
    }
}

/// Equal when they hold the same gaps, whatever range each allocated.
impl PartialEq for GapHistogram {
    fn eq(&self, other: &Self) -> bool {
        self.n == other.n && self.sum_ns == other.sum_ns && self.nonzero().eq(other.nonzero())
    }
}

/// The count, the sum and the counted buckets (not the allocated range, which depends on the order
/// the gaps came in).
impl std::fmt::Debug for GapHistogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GapHistogram")
            .field("n", &self.n)
            .field("sum_ns", &self.sum_ns)
            .field("buckets", &self.nonzero().collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut last = 0;
        for v in [0u64, 1, 127, 128, 129, 255, 256, 1_000, 65_535, 1_000_000, 37_123_456, u64::MAX / 2] {
            let b = bucket(v);
            assert!(b >= last);
            last = b;
            let mid = bucket_mid_ns(b);
            assert!((mid - v as f64).abs() <= 0.004 * v as f64 + 0.5, "v {v} mid {mid}");
        }
        // Every bucket's first value maps back to it.
        for b in 0..3000usize {
            let mid = bucket_mid_ns(b) as u64;
            assert_eq!(bucket(mid), b);
        }
    }

    #[test]
    fn percentiles_match_numpy_within_resolution() {
        let mut h = GapHistogram::default();
        let vals: Vec<u64> = (1..=1000u64).map(|i| i * 1_000_000).collect();
        for &v in &vals {
            h.add(v);
        }
        // numpy.percentile(1..=1000 ms, 90) = 900.1 ms
        assert!((h.percentile_s(90.0) - 0.9001).abs() < 0.9001 * 0.005);
        assert!((h.mean_s() - 0.5005).abs() < 1e-12);
        let mut other = GapHistogram::default();
        other.add(5);
        h.merge(&other);
        assert_eq!(h.count(), 1001);
    }

    #[test]
    fn the_held_range_grows_both_ways_and_does_not_change_equality() {
        let vals = [40_000_000u64, 3, 41_000_000, 900_000, u64::MAX, 0, 40_000_001, 128, 1 << 40];
        let (mut up, mut down) = (GapHistogram::default(), GapHistogram::default());
        for &v in &vals {
            up.add(v);
        }
        for &v in vals.iter().rev() {
            down.add_n(v, 1);
        }
        assert_eq!(up, down);
        assert_eq!(format!("{up:?}"), format!("{down:?}"));
        assert_eq!(up.count(), vals.len() as u64);
        // Ranks in ascending order whatever the order of the adds.
        assert_eq!(up.at_rank(0), 0.0);
        assert_eq!(up.at_rank(1), 3.0);
        assert_eq!(bucket(up.at_rank(8) as u64), bucket(u64::MAX));
        let mut merged = GapHistogram::default();
        merged.merge(&up);
        merged.merge(&GapHistogram::default());
        assert_eq!(merged, up);
        let mut one = GapHistogram::default();
        one.add(7);
        assert_ne!(one, up);
    }
}
