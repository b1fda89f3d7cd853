//! Pooled token gaps: every gap between two successive tokens of every measured request, as
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

#[derive(Debug, Clone, PartialEq)]
pub struct GapHistogram {
    /// Allocated once (59 KB) so that adding a gap never branches on the size.
    counts: Box<[u64]>,
    n: u64,
    sum_ns: u128,
}

impl Default for GapHistogram {
    fn default() -> Self {
        GapHistogram { counts: vec![0; N_BUCKETS].into_boxed_slice(), n: 0, sum_ns: 0 }
    }
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
        self.counts[bucket(ns)] += k;
        self.n += k;
        self.sum_ns += ns as u128 * k as u128;
    }

    /// Add every gap of `other`.
    pub fn merge(&mut self, other: &GapHistogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
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
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > k {
                return bucket_mid_ns(b);
            }
        }
        bucket_mid_ns(self.counts.len().saturating_sub(1))
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
}
