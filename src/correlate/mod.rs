//! Stage 5: correlate the time-ordered events of each I/O into one latency record.
//!
//! What is shared by every profile's correlator lives here: the [`Correlator`]
//! contract, the bounded in-flight table ([`inflight`]) and the join of bios waiting
//! for their command ([`biojoin`]). The correlators themselves live with their
//! profile (`profile/<name>/`). A correlator sees events in time order (rare disorder
//! is tolerated and counted), and emits a record when an I/O completes or is given up.
//! It does no I/O of its own.

pub mod biojoin;
pub mod gate;
pub mod index;
pub mod inflight;
pub mod keyed;
pub mod lost;
pub mod windows;
pub mod yardstick;

pub use crate::record::{size_class, Counters, IoRecord, Status};

use crate::decode::Event;
use std::hash::{BuildHasherDefault, Hasher};

/// A profile's correlator.
///
/// Contract: every I/O whose first event was seen comes out exactly once, as a
/// completed record or as an `incomplete` one (in flight at [`Correlator::finish`], or
/// given up to bound memory); a record never invents a stage it did not see (an empty
/// value, never 0); completions it cannot place are counted in `unmatched`, never
/// dropped silently.
pub trait Correlator {
    /// The profile's decoded event type.
    /// `Copy`: events are small plain values, moved through the sorter by copy.
    type Event: Copy;
    type Record: IoRecord;
    fn on_event(&mut self, ev: &Event<Self::Event>, out: &mut dyn FnMut(Self::Record));
    /// Give up every I/O still in flight (end of run).
    fn finish(&mut self, out: &mut dyn FnMut(Self::Record));
    /// Samples the kernel counted that never arrived ([`Gap`]). A correlator that can
    /// name the I/Os they cut marks them `dropped` (counted in [`Counters::cut`]) and
    /// never pairs them with a later I/O's event, and returns `true`. The default
    /// returns `false`: the pipeline then marks as many given-up records `dropped`.
    fn on_missing(&mut self, _gap: &Gap<'_>) -> bool {
        false
    }
    fn counters(&self) -> Counters;
    /// Completions counted `unmatched` that were stamped at or before `t`. The pipeline
    /// counts those after a gap began among the I/Os it cost: a gap is reported once
    /// the tallies confirm it, by when a completion of an I/O whose start it cut may
    /// have been correlated already. The default, for a correlator that does not date
    /// them, is all so far.
    fn unmatched_at(&self, _t: u64) -> u64 {
        self.counters().unmatched
    }
    /// The gate a rate change works through (`--max-rate`); `None` when this
    /// correlator cannot take a change of rate while running.
    fn gate(&mut self) -> Option<&mut gate::Gate> {
        None
    }
    /// The event whose kernel count is the number of I/Os this correlator was given
    /// to make rows of (see [`Starts`]), or `None` when no count says that: the
    /// default, and a correlator that selects or samples I/Os in user space.
    fn starts(&self) -> Option<Starts> {
        None
    }
}

/// An event that fires once for each I/O a correlator makes one row of, on every
/// path: the kernel counts it whether or not its sample arrives, so its final count,
/// less the rows and the unmatched completions, is how many I/Os began while tracing
/// and left nothing that could be placed. The exit line reports that instead of an
/// estimate from sample counts, which overstates it for profiles with many samples per
/// I/O (an I/O seen in part lost more than one of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Starts {
    /// `system:name`, as the group names it.
    pub event: &'static str,
    /// Firings that began no new row (a block request issued again after a requeue).
    pub again: u64,
}

/// `n` samples of `event` (`system:name`) that the kernel counted and never wrote (or
/// lost to a full ring), all stamped after `after` and no later than `before`.
///
/// `event` is empty when which events they were is not known: a LOST record of a
/// capture says how many samples one ring lost, not of which events. Any of them can
/// then be any event of the run, and a correlator takes the gap for up to `n` of each
/// that it pairs by ([`Gap::may_be`]): taken for none, a request that lost its issue
/// and completion in a capture's LOST window was paired with the issue of a later I/O
/// at its sector, an `ok` row queued for seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap<'a> {
    pub event: &'a str,
    pub n: u64,
    pub after: u64,
    pub before: u64,
}

impl Gap<'_> {
    /// Whether the samples can be of event `name` (without its system): they are, or
    /// which they are is not known.
    pub fn may_be(&self, name: &str) -> bool {
        self.unknown() || self.is(name)
    }

    /// Whether the samples are of event `name` (without its system).
    pub fn is(&self, name: &str) -> bool {
        self.event.rsplit(':').next() == Some(name)
    }

    /// Which events the samples were is not known.
    pub fn unknown(&self) -> bool {
        self.event.is_empty()
    }
}

/// FxHash: the in-flight maps are keyed by small integers from the kernel; SipHash's
/// flood resistance buys nothing here and costs a third of the correlator's time.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    /// A word at a time: `stat` keys its groups by their labels' bytes.
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.write_u64(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
        }
        for &b in words.remainder() {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64)
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64)
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64)
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;
pub type FxMap<K, V> = std::collections::HashMap<K, V, FxBuild>;

/// A map keyed by device (`dev_t`), looked up once or twice per I/O. A run traces few
/// devices and usually one at a time is hot, so the last key found is remembered and
/// its lookup costs a compare, not a hash.
#[derive(Debug, Clone)]
pub struct DevMap<V> {
    index: FxMap<u32, usize>,
    values: Vec<V>,
    /// The key found last and where its value is (`values.len()` before any).
    last: (u32, usize),
}

impl<V> Default for DevMap<V> {
    fn default() -> Self {
        DevMap {
            index: FxMap::default(),
            values: Vec::new(),
            last: (0, 0),
        }
    }
}

impl<V> DevMap<V> {
    #[inline]
    fn find(&mut self, dev: u32) -> Option<usize> {
        if self.last.0 == dev && self.last.1 < self.values.len() {
            return Some(self.last.1);
        }
        let i = *self.index.get(&dev)?;
        self.last = (dev, i);
        Some(i)
    }

    /// A lookup that leaves the remembered key as it is (for `&self` callers).
    pub fn get(&self, dev: u32) -> Option<&V> {
        let i = match self.last {
            (d, i) if d == dev && i < self.values.len() => i,
            _ => *self.index.get(&dev)?,
        };
        self.values.get(i)
    }

    /// Every value, in the order the keys were first seen.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.values.iter()
    }

    #[inline]
    pub fn get_mut(&mut self, dev: &u32) -> Option<&mut V> {
        let i = self.find(*dev)?;
        Some(&mut self.values[i])
    }

    /// The value of `dev`, made by `make` when there is none (an entry is never removed).
    #[inline]
    pub fn get_or_insert_with(&mut self, dev: u32, make: impl FnOnce() -> V) -> &mut V {
        let i = match self.find(dev) {
            Some(i) => i,
            None => {
                let i = self.values.len();
                self.values.push(make());
                self.index.insert(dev, i);
                self.last = (dev, i);
                i
            }
        };
        &mut self.values[i]
    }

    /// Like `HashMap::entry`, for the call sites written against a map.
    #[inline]
    pub fn entry(&mut self, dev: u32) -> DevEntry<'_, V> {
        DevEntry { map: self, dev }
    }
}

impl<V> FromIterator<(u32, V)> for DevMap<V> {
    fn from_iter<I: IntoIterator<Item = (u32, V)>>(iter: I) -> Self {
        let mut m = DevMap::default();
        for (dev, v) in iter {
            match m.find(dev) {
                Some(i) => m.values[i] = v,
                None => {
                    m.get_or_insert_with(dev, || v);
                }
            }
        }
        m
    }
}

/// A [`DevMap`] entry, vacant or not.
pub struct DevEntry<'a, V> {
    map: &'a mut DevMap<V>,
    dev: u32,
}

impl<'a, V> DevEntry<'a, V> {
    #[inline]
    pub fn or_insert_with(self, make: impl FnOnce() -> V) -> &'a mut V {
        self.map.get_or_insert_with(self.dev, make)
    }

    #[inline]
    pub fn or_insert(self, v: V) -> &'a mut V {
        self.or_insert_with(|| v)
    }

    #[inline]
    pub fn or_default(self) -> &'a mut V
    where
        V: Default,
    {
        self.or_insert_with(V::default)
    }
}

/// Unmatched completions by the time they were stamped, for
/// [`Correlator::unmatched_at`]: `(t, n)` is the count once the completion stamped `t`
/// was counted. Noted only when a completion is unmatched; the newest
/// [`UnmatchedLog::KEPT`] are kept.
#[derive(Debug, Clone)]
pub struct UnmatchedLog(std::collections::VecDeque<(u64, u64)>);

impl Default for UnmatchedLog {
    fn default() -> Self {
        // Before any completion, none.
        UnmatchedLog([(0, 0)].into())
    }
}

impl UnmatchedLog {
    pub const KEPT: usize = 4096;

    /// A completion stamped `t` was unmatched, `n` with it.
    pub fn note(&mut self, t: u64, n: u64) {
        // Completions come in time order; a late one is dated with the newest.
        let t = self.0.back().map_or(t, |&(last, _)| last.max(t));
        if self.0.len() == Self::KEPT {
            self.0.pop_front();
        }
        self.0.push_back((t, n));
    }

    /// Unmatched completions stamped at or before `t`. Older than every entry kept
    /// (more than `KEPT` since), the oldest kept: none after `t` is counted in.
    pub fn at(&self, t: u64) -> u64 {
        let i = self.0.partition_point(|&(at, _)| at <= t);
        self.0.get(i.saturating_sub(1)).map_or(0, |&(_, n)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unmatched_log_counts_completions_up_to_a_time() {
        let mut u = UnmatchedLog::default();
        assert_eq!(u.at(5), 0);
        u.note(200, 1);
        u.note(200, 2);
        // A late completion is dated with the newest.
        u.note(150, 3);
        u.note(400, 4);
        assert_eq!([u.at(199), u.at(200), u.at(399), u.at(400)], [0, 3, 3, 4]);
        for t in 0..(UnmatchedLog::KEPT as u64 + 10) {
            u.note(1_000 + t, 5 + t);
        }
        assert_eq!(u.0.len(), UnmatchedLog::KEPT);
        // Older than every entry kept: the oldest kept, none after it counted in.
        assert_eq!(u.at(0), u.0[0].1);
        assert_eq!(u.at(u64::MAX), 5 + UnmatchedLog::KEPT as u64 + 9);
    }

    /// The remembered key never answers for another: the same values as a HashMap.
    #[test]
    fn dev_map_reads_like_a_map() {
        let mut m: DevMap<u32> = [(7, 70), (0, 1), (7, 71)].into_iter().collect();
        let mut want: std::collections::HashMap<u32, u32> = [(7, 71), (0, 1)].into_iter().collect();
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let dev = (state % 5) as u32;
            if state & 64 == 0 {
                *m.entry(dev).or_default() += 1;
                *want.entry(dev).or_default() += 1;
            }
            assert_eq!(m.get(dev).copied(), want.get(&dev).copied(), "{dev}");
            assert_eq!(m.get_mut(&dev).copied(), want.get(&dev).copied(), "{dev}");
        }
        assert_eq!(*m.entry(0).or_insert(9), want[&0]);
    }
}
