//! How long a device's I/Os take when the pairing is certain: the measure a request
//! still in flight is held against when a sample went missing and one of them lost its
//! completion (see the block profile's correlator).
//!
//! The largest certain pairing was that measure until sustained ring overflow showed
//! why it cannot stay so: a request that lost its completion and the next I/O at its
//! place that lost its issue make one pairing with one candidate, as certain as any,
//! hundreds of ms long. One raised the largest to that, which let longer ones through,
//! each raising it again: a few thousand `ok` rows longer than any the device served.
//! A percentile does not move for a few such pairings. It is the largest while there
//! are fewer than [`EXACT`] pairings (a short trace, a test), so nothing a device
//! served is ever taken for lost only because it is rare.

/// How far past the yardstick `l` of its device an I/O in flight has surely lost a
/// completion reported missing: by half again, plus 50 µs.
pub const SURELY: fn(u64) -> u64 = |l| l + l / 2 + 50_000;

/// Pairings up to which the yardstick is the largest of them.
pub const EXACT: u64 = 1024;
/// Then it is the d2c that all but one in this many pairings stay within.
const ONE_IN: u64 = 1000;
/// Sub-buckets per power of two, as bits: a bucket is at most 1/4 of its values wide.
const SUB: u32 = 2;
const BUCKETS: usize = 64 << SUB;
/// Past this many pairings the counts are halved: the yardstick follows what the
/// device does now (a load that grows makes I/Os slower), not its whole history.
const RECENT: u64 = 1 << 16;

/// The d2c of certain pairings on one device.
#[derive(Debug, Clone)]
pub struct Yardstick {
    counts: Box<[u32; BUCKETS]>,
    /// Pairings in `counts`.
    n: u64,
    /// Pairings ever.
    seen: u64,
    value: u64,
    largest: u64,
}

impl Default for Yardstick {
    fn default() -> Self {
        Yardstick {
            counts: Box::new([0; BUCKETS]),
            n: 0,
            seen: 0,
            value: 0,
            largest: 0,
        }
    }
}

impl Yardstick {
    /// 0 before any pairing.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// The largest pairing ever, for a guess that must not take a request only slow.
    pub fn largest(&self) -> u64 {
        self.largest
    }

    #[inline]
    pub fn add(&mut self, d2c: u64) {
        self.largest = self.largest.max(d2c);
        let b = &mut self.counts[bucket(d2c)];
        *b = b.saturating_add(1);
        self.n += 1;
        self.seen += 1;
        if self.seen <= EXACT {
            self.value = self.value.max(d2c);
        } else if self.seen % EXACT == 0 {
            self.refresh();
        }
    }

    fn refresh(&mut self) {
        if self.n >= RECENT {
            self.n = 0;
            for c in self.counts.iter_mut() {
                *c /= 2;
                self.n += u64::from(*c);
            }
        }
        // The pairing of rank n - n/ONE_IN, counted from 1.
        let rank = self.n - self.n / ONE_IN;
        let mut below = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            below += u64::from(c);
            if below >= rank {
                self.value = last(b);
                return;
            }
        }
    }
}

/// The bucket of `v`: values below 2^SUB each have their own, then 2^SUB per power of 2.
fn bucket(v: u64) -> usize {
    if v < 1 << SUB {
        return v as usize;
    }
    let log = 63 - v.leading_zeros();
    let sub = (v >> (log - SUB)) & ((1 << SUB) - 1);
    (((log - SUB + 1) << SUB) as u64 + sub) as usize
}

/// The largest value of bucket `b`.
fn last(b: usize) -> u64 {
    if b < 1 << SUB {
        return b as u64;
    }
    let log = (b >> SUB) as u32 + SUB - 1;
    let sub = (b & ((1 << SUB) - 1)) as u128;
    let end = ((1u128 << SUB) + sub + 1) << (log - SUB);
    u64::try_from(end - 1).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order_and_a_quarter_wide_at_most() {
        for v in (0..5000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let b = bucket(v);
            assert!(last(b) >= v, "{v} in bucket {b} ending {}", last(b));
            assert!(b == 0 || last(b - 1) < v, "{v}: bucket {b} starts too late");
            assert!(last(b) - v <= v / 4, "{v}: bucket {b} ends at {}", last(b));
        }
        assert!(bucket(u64::MAX) < BUCKETS);
        assert_eq!(last(bucket(u64::MAX)), u64::MAX);
    }

    #[test]
    fn few_pairings_give_their_largest() {
        let mut y = Yardstick::default();
        assert_eq!(y.value(), 0);
        for d in [100, 5_000, 300] {
            y.add(d);
        }
        assert_eq!(y.value(), 5_000);
    }

    /// What sustained overflow did: among 100,000 pairings of 100-200 µs, a few dozen
    /// wrong ones of 50-400 ms. The largest would be 400 ms; the yardstick stays near
    /// the device's own.
    #[test]
    fn a_few_wrong_pairings_do_not_move_it() {
        let mut y = Yardstick::default();
        for i in 0..100_000u64 {
            y.add(if i % 3000 == 7 {
                50_000_000 + i * 3000
            } else {
                100_000 + (i * 7919) % 100_000
            });
        }
        assert!((190_000..=250_000).contains(&y.value()), "{}", y.value());
        assert_eq!(y.largest(), 50_000_000 + 99_007 * 3000);
    }

    /// It follows the device: after a long slow spell, a faster one brings it down.
    #[test]
    fn it_follows_what_the_device_does_now() {
        let mut y = Yardstick::default();
        for _ in 0..200_000 {
            y.add(1_000_000);
        }
        assert!(y.value() >= 1_000_000);
        for _ in 0..400_000 {
            y.add(100_000);
        }
        assert!(y.value() < 130_000, "{}", y.value());
    }
}
