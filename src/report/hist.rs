//! The kernel's histogram layout, its log2 view, and percentiles.
//!
//! Values below 16 have a bucket each; every power of two above is split
//! into 16 linear sub-buckets, so a bucket is at most 1/16 of its value wide.

use hdrhistogram::Histogram;

pub const SUB_BITS: u32 = 4;
pub const SUB: u64 = 1 << SUB_BITS;
/// Number of buckets: 16 exact ones, then 16 for each power of two 2^4..2^63.
pub const NBUCKETS: usize = ((64 - SUB_BITS + 1) as usize) * SUB as usize;

/// Bucket counts, indexed as the kernel indexes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hist {
    pub buckets: Vec<u64>,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            buckets: vec![0; NBUCKETS],
        }
    }
}

/// The bucket of a value, as the BPF program computes it.
pub fn bucket_of(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let lg = 63 - v.leading_zeros();
    ((lg - SUB_BITS + 1) as u64 * SUB + ((v >> (lg - SUB_BITS)) & (SUB - 1))) as usize
}

/// The inclusive range of values in bucket `b`.
pub fn bucket_range(b: usize) -> (u64, u64) {
    let b = b as u64;
    if b < SUB {
        return (b, b);
    }
    let lg = b / SUB + SUB_BITS as u64 - 1;
    let sub = b % SUB;
    let width = 1u64 << (lg - SUB_BITS as u64);
    let lo = (1u64 << lg) + sub * width;
    (lo, lo + (width - 1))
}

impl Hist {
    pub fn from_buckets(buckets: &[u64]) -> Hist {
        let mut h = Hist::default();
        for (d, s) in h.buckets.iter_mut().zip(buckets) {
            *d = *s;
        }
        h
    }

    pub fn merge(&mut self, o: &Hist) {
        for (d, s) in self.buckets.iter_mut().zip(&o.buckets) {
            *d += *s;
        }
    }

    /// The log2 slots of funclatency: slot i counts values in [2^i, 2^(i+1)),
    /// slot 0 also counts 0. Exact: a sub-bucket never straddles a power of two.
    pub fn log2_slots(&self) -> Vec<u64> {
        let mut slots = vec![0u64; 64];
        for (b, &n) in self.buckets.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let (lo, _) = bucket_range(b);
            let slot = if lo == 0 { 0 } else { 63 - lo.leading_zeros() } as usize;
            slots[slot] += n;
        }
        let used = slots.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
        slots.truncate(used);
        slots
    }

    /// Percentiles (0..=100) as bucket ranges: the bucket holding that rank.
    pub fn percentiles(&self, qs: &[f64]) -> Vec<Option<(u64, u64)>> {
        // hdrhistogram does the rank arithmetic over buckets recorded at their
        // lower bounds.
        let Ok(mut h) = Histogram::<u64>::new(3) else {
            return qs.iter().map(|_| None).collect();
        };
        for (b, &n) in self.buckets.iter().enumerate() {
            if n > 0 {
                let (lo, _) = bucket_range(b);
                if h.record_n(lo, n).is_err() {
                    return qs.iter().map(|_| None).collect();
                }
            }
        }
        if h.is_empty() {
            return qs.iter().map(|_| None).collect();
        }
        // A recorded lower bound comes back as a value at most 0.1% above it
        // (3 significant digits), still inside its bucket, which is at least
        // 1/32 of its value wide, or exact below 16.
        qs.iter()
            .map(|&q| Some(bucket_range(bucket_of(h.value_at_quantile(q / 100.0)))))
            .collect()
    }
}

/// A value known to lie in [lo, hi], printed with no more digits than that
/// range supports: the midpoint, rounded to the power of ten below the width.
pub fn round_to_precision(lo: u64, hi: u64) -> u64 {
    let (lo, hi) = (lo.min(hi), lo.max(hi));
    let mid = lo + (hi - lo) / 2;
    let width = (hi - lo).saturating_add(1);
    let mut step = 1u64;
    while let Some(next) = step.checked_mul(10).filter(|&n| n <= width) {
        step = next;
    }
    if step == 1 {
        return mid;
    }
    (mid.saturating_add(step / 2) / step).saturating_mul(step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_and_tile_the_line() {
        let mut expect_lo = 0u64;
        for b in 0..NBUCKETS {
            let (lo, hi) = bucket_range(b);
            assert_eq!(lo, expect_lo, "bucket {b}");
            assert_eq!(bucket_of(lo), b);
            assert_eq!(bucket_of(hi), b);
            expect_lo = hi.wrapping_add(1);
        }
        assert_eq!(expect_lo, 0, "the last bucket ends at u64::MAX");
        assert_eq!(bucket_of(u64::MAX), NBUCKETS - 1);
    }

    #[test]
    fn sub_buckets_are_at_most_a_sixteenth_wide() {
        for b in SUB as usize..NBUCKETS {
            let (lo, hi) = bucket_range(b);
            assert!((hi - lo + 1) * 16 <= lo, "bucket {b}");
        }
    }

    #[test]
    fn log2_slots_match_funclatency() {
        let mut h = Hist::default();
        for v in [0u64, 1, 2, 3, 4, 1000, 1023, 1024, 5000] {
            h.buckets[bucket_of(v)] += 1;
        }
        let s = h.log2_slots();
        assert_eq!(s.len(), 13);
        assert_eq!(&s[..3], &[2, 2, 1]);
        assert_eq!(s[9], 2);
        assert_eq!(s[10], 1);
        assert_eq!(s[12], 1);
    }

    #[test]
    fn percentiles_pick_the_bucket_of_that_rank() {
        let mut h = Hist::default();
        for v in 1..=1000u64 {
            h.buckets[bucket_of(v * 1000)] += 1;
        }
        let p = h.percentiles(&[50.0, 99.0, 100.0]);
        let (lo, hi) = p[0].unwrap();
        assert!(lo <= 500_000 && 500_000 <= hi, "{lo}..{hi}");
        let (lo, hi) = p[1].unwrap();
        assert!(lo <= 990_000 && 990_000 <= hi, "{lo}..{hi}");
        let (lo, hi) = p[2].unwrap();
        assert!(lo <= 1_000_000 && 1_000_000 <= hi, "{lo}..{hi}");
        assert_eq!(Hist::default().percentiles(&[50.0]), vec![None]);
    }

    #[test]
    fn rounding_keeps_only_supported_digits() {
        assert_eq!(round_to_precision(7, 7), 7);
        assert_eq!(round_to_precision(360_448, 376_831), 370_000);
        assert_eq!(round_to_precision(1024, 1087), 1060);
        // Found by fuzzing: the whole range, and a reversed one.
        assert!(round_to_precision(0, u64::MAX) > 0);
        assert_eq!(round_to_precision(9, 7), 8);
    }
}
