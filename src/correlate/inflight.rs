//! The bounded table of I/Os in flight that every correlator keeps.
//!
//! One policy everywhere: at most `max` entries; when a new entry would pass that, the
//! oldest quarter (by start time) is given up at once, oldest first, so memory stays
//! bounded and the cost of finding the oldest is amortised over many inserts. Entries
//! given up are counted in [`Inflight::given_up`]; the caller turns each into an
//! `incomplete` record (or, for helper tables such as bios waiting for a command,
//! drops it).
//!
//! A key may hold several entries at once (two requests to the same sector, a hot
//! block under a database): [`Inflight::push`] queues them in arrival order and the
//! lookups say how many shared the key, so a pairing that could have gone another way
//! is known to the caller. [`Inflight::insert`] is for keys that are unique while in
//! flight (an NVMe command id): it replaces and returns the previous entry.

use super::FxMap;
use std::collections::hash_map::Entry;
use std::collections::VecDeque;
use std::hash::Hash;

/// An entry's start time, by which the oldest are found.
pub trait Started {
    fn started(&self) -> u64;
}

enum Slot<V> {
    One(V),
    Many(VecDeque<V>),
}

pub struct Inflight<K, V> {
    map: FxMap<K, Slot<V>>,
    len: usize,
    max: usize,
    given_up: u64,
}

/// Entries kept at most by default: about 100 MB of state in the largest correlator.
pub const DEFAULT_MAX: usize = 1 << 20;

impl<K: Hash + Eq + Copy, V: Started> Inflight<K, V> {
    pub fn new(max: usize) -> Inflight<K, V> {
        Inflight {
            map: FxMap::default(),
            len: 0,
            max: max.max(4),
            given_up: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries evicted to bound memory or given up at the end.
    pub fn given_up(&self) -> u64 {
        self.given_up
    }

    /// Entries held under `key`.
    pub fn count(&self, key: &K) -> usize {
        match self.map.get(key) {
            None => 0,
            Some(Slot::One(_)) => 1,
            Some(Slot::Many(q)) => q.len(),
        }
    }

    /// Add `v` under a key that is unique in flight; the entry it replaces is returned.
    pub fn insert(&mut self, key: K, v: V, evicted: &mut dyn FnMut(K, V)) -> Option<V> {
        let old = match self.map.remove(&key) {
            None => None,
            Some(Slot::One(o)) => {
                self.len -= 1;
                Some(o)
            }
            Some(Slot::Many(mut q)) => {
                // A unique key never holds several; keep the newest if it somehow did.
                self.len -= q.len();
                q.pop_back()
            }
        };
        self.bound(evicted);
        self.map.insert(key, Slot::One(v));
        self.len += 1;
        old
    }

    /// Queue `v` behind the entries already under `key`.
    pub fn push(&mut self, key: K, v: V, evicted: &mut dyn FnMut(K, V)) {
        self.bound(evicted);
        self.len += 1;
        // One lookup: the entry, vacant or not.
        match self.map.entry(key) {
            Entry::Vacant(e) => {
                e.insert(Slot::One(v));
            }
            Entry::Occupied(mut e) => {
                let slot = e.get_mut();
                match slot {
                    Slot::Many(q) => q.push_back(v),
                    Slot::One(_) => {
                        let Slot::One(first) = std::mem::replace(slot, Slot::Many(VecDeque::new()))
                        else {
                            unreachable!("matched One above")
                        };
                        *slot = Slot::Many(VecDeque::from([first, v]));
                    }
                }
            }
        }
    }

    /// The oldest entry under `key`.
    pub fn first(&self, key: &K) -> Option<&V> {
        match self.map.get(key)? {
            Slot::One(v) => Some(v),
            Slot::Many(q) => q.front(),
        }
    }

    /// The oldest entry under `key`, to change it.
    pub fn first_mut(&mut self, key: &K) -> Option<&mut V> {
        match self.map.get_mut(key)? {
            Slot::One(v) => Some(v),
            Slot::Many(q) => q.front_mut(),
        }
    }

    /// Whether an entry under `key` is one `pred` accepts.
    pub fn any(&self, key: &K, mut pred: impl FnMut(&V) -> bool) -> bool {
        match self.map.get(key) {
            None => false,
            Some(Slot::One(v)) => pred(v),
            Some(Slot::Many(q)) => q.iter().any(pred),
        }
    }

    /// The oldest entry under `key` that `pred` accepts.
    /// How many entries under `key` satisfy `pred`.
    pub fn count_where(&self, key: &K, mut pred: impl FnMut(&V) -> bool) -> usize {
        match self.map.get(key) {
            None => 0,
            Some(Slot::One(v)) => usize::from(pred(v)),
            Some(Slot::Many(q)) => q.iter().filter(|v| pred(v)).count(),
        }
    }

    pub fn find_mut(&mut self, key: &K, mut pred: impl FnMut(&V) -> bool) -> Option<&mut V> {
        match self.map.get_mut(key)? {
            Slot::One(v) => pred(v).then_some(v),
            Slot::Many(q) => q.iter_mut().find(|v| pred(v)),
        }
    }

    /// Visit every entry, each key's in arrival order.
    pub fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        for (k, slot) in &self.map {
            match slot {
                Slot::One(v) => f(k, v),
                Slot::Many(q) => q.iter().for_each(|v| f(k, v)),
            }
        }
    }

    /// Take the oldest entry under `key` that `pred` accepts; also says how many
    /// entries the key held before (more than one: the pairing was a choice).
    pub fn take_where(&mut self, key: &K, mut pred: impl FnMut(&V) -> bool) -> Option<(V, usize)> {
        // One lookup: the occupied entry is removed through itself.
        let Entry::Occupied(mut e) = self.map.entry(*key) else {
            return None;
        };
        let (v, held) = match e.get_mut() {
            Slot::One(v) => {
                if !pred(v) {
                    return None;
                }
                let Slot::One(v) = e.remove() else {
                    unreachable!("matched One above")
                };
                (v, 1)
            }
            Slot::Many(q) => {
                let held = q.len();
                let i = q.iter().position(&mut pred)?;
                let v = q.remove(i)?;
                if q.is_empty() {
                    e.remove();
                }
                (v, held)
            }
        };
        self.len -= 1;
        Some((v, held))
    }

    /// Take the entry under `key` that `rank` puts first (the least `Some`; among
    /// equals, the oldest), in one lookup; also says how many entries the key held.
    /// For a pairing that prefers one entry over another rather than taking the first
    /// that fits: a search, then a `take_where` for what it found, looked the key up
    /// twice on every completion.
    pub fn take_least<R: Ord>(
        &mut self,
        key: &K,
        mut rank: impl FnMut(&V) -> Option<R>,
    ) -> Option<(V, usize)> {
        let Entry::Occupied(mut e) = self.map.entry(*key) else {
            return None;
        };
        let (v, held) = match e.get_mut() {
            Slot::One(v) => {
                rank(v)?;
                let Slot::One(v) = e.remove() else {
                    unreachable!("matched One above")
                };
                (v, 1)
            }
            Slot::Many(q) => {
                let held = q.len();
                let mut best: Option<(R, usize)> = None;
                for (i, v) in q.iter().enumerate() {
                    if let Some(r) = rank(v) {
                        // Strictly less: a tie keeps the older entry.
                        if best.as_ref().is_none_or(|(b, _)| r < *b) {
                            best = Some((r, i));
                        }
                    }
                }
                let v = q.remove(best?.1)?;
                if q.is_empty() {
                    e.remove();
                }
                (v, held)
            }
        };
        self.len -= 1;
        Some((v, held))
    }

    /// Take the oldest entry under `key`.
    pub fn take(&mut self, key: &K) -> Option<(V, usize)> {
        self.take_where(key, |_| true)
    }

    /// Remove every entry `keep` refuses (no counting: for helper tables).
    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        let mut len = 0;
        self.map.retain(|_, slot| match slot {
            Slot::One(v) => {
                let k = keep(v);
                len += k as usize;
                k
            }
            Slot::Many(q) => {
                q.retain(|v| keep(v));
                len += q.len();
                !q.is_empty()
            }
        });
        self.len = len;
    }

    /// Give up every entry, oldest first (end of run).
    pub fn drain_all(&mut self, out: &mut dyn FnMut(K, V)) {
        let all = self.take_all();
        give_up(all, &mut self.given_up, out);
    }

    /// Forget everything without counting (helper tables at the end of a run).
    pub fn clear(&mut self) {
        self.map.clear();
        self.len = 0;
    }

    fn take_all(&mut self) -> Vec<(K, V)> {
        let mut all = Vec::with_capacity(self.len);
        for (k, slot) in self.map.drain() {
            match slot {
                Slot::One(v) => all.push((k, v)),
                Slot::Many(q) => all.extend(q.into_iter().map(|v| (k, v))),
            }
        }
        self.len = 0;
        all
    }

    /// Before adding: when full, give up the oldest quarter.
    fn bound(&mut self, evicted: &mut dyn FnMut(K, V)) {
        if self.len < self.max {
            return;
        }
        let mut starts: Vec<u64> = Vec::with_capacity(self.len);
        for slot in self.map.values() {
            match slot {
                Slot::One(v) => starts.push(v.started()),
                Slot::Many(q) => starts.extend(q.iter().map(Started::started)),
            }
        }
        let cut = quarter_cut(starts);
        let mut all = self.take_all();
        let mut old: Vec<(K, V)> = Vec::new();
        for (k, v) in all.drain(..) {
            if v.started() <= cut {
                old.push((k, v));
            } else {
                // Re-queued in the order they had: take_all keeps each key's order.
                self.len += 1;
                match self.map.get_mut(&k) {
                    None => {
                        self.map.insert(k, Slot::One(v));
                    }
                    Some(Slot::Many(q)) => q.push_back(v),
                    Some(slot) => {
                        let Slot::One(first) = std::mem::replace(slot, Slot::Many(VecDeque::new()))
                        else {
                            unreachable!("the None and Many arms are above")
                        };
                        *slot = Slot::Many(VecDeque::from([first, v]));
                    }
                }
            }
        }
        give_up(old, &mut self.given_up, evicted);
    }
}

/// The start time at or below which the oldest quarter of `starts` lies (ties at the
/// cut included): what a full table gives up.
pub(super) fn quarter_cut(mut starts: Vec<u64>) -> u64 {
    let idx = starts.len() / 4;
    let (_, cut, _) = starts.select_nth_unstable(idx);
    *cut
}

/// Hand entries taken out of a table to `evicted`, oldest first, counting them.
pub(super) fn give_up<K, V: Started>(
    mut old: Vec<(K, V)>,
    given_up: &mut u64,
    evicted: &mut dyn FnMut(K, V),
) {
    old.sort_by_key(|(_, v)| v.started());
    *given_up += old.len() as u64;
    for (k, v) in old {
        evicted(k, v);
    }
}

/// An entry for the tables' tests: its start time and a tag.
#[cfg(test)]
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(super) struct E(pub u64, pub u32);

#[cfg(test)]
impl Started for E {
    fn started(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_of_one_key_queue_in_order_and_report_the_choice() {
        let mut t: Inflight<u32, E> = Inflight::new(16);
        let mut none = |_, _| panic!("nothing to evict");
        t.push(1, E(10, 0), &mut none);
        t.push(1, E(20, 1), &mut none);
        t.push(2, E(15, 2), &mut none);
        assert_eq!((t.len(), t.count(&1)), (3, 2));
        assert_eq!(t.first_mut(&1).map(|e| e.1), Some(0));
        assert_eq!(t.take_where(&1, |e| e.1 == 1), Some((E(20, 1), 2)));
        assert_eq!(t.take(&1), Some((E(10, 0), 1)));
        assert_eq!(t.take(&1), None);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn the_least_ranked_entry_is_taken_and_a_tie_keeps_the_older() {
        let mut t: Inflight<u32, E> = Inflight::new(16);
        let mut none = |_, _| panic!("nothing to evict");
        for (start, tag) in [(30, 0), (10, 1), (10, 2), (5, 3)] {
            t.push(1, E(start, tag), &mut none);
        }
        t.push(2, E(1, 9), &mut none);
        // Rank by start, leaving out tag 3: the two 10s tie, the older (tag 1) goes.
        let rank = |e: &E| (e.1 != 3).then_some(e.0);
        assert_eq!(t.take_least(&1, rank), Some((E(10, 1), 4)));
        assert_eq!(t.take_least(&1, rank), Some((E(10, 2), 3)));
        assert_eq!(t.take_least(&1, rank), Some((E(30, 0), 2)));
        // Only tag 3 is left under key 1, and the rank refuses it: it stays.
        assert_eq!(t.take_least(&1, rank), None);
        assert_eq!(t.count(&1), 1);
        // A key of one entry: taken when ranked, kept when not.
        assert_eq!(t.take_least(&2, |_| None::<u64>), None);
        assert_eq!(t.take_least(&2, rank), Some((E(1, 9), 1)));
        assert_eq!(t.take_least(&7, rank), None);
        assert_eq!((t.len(), t.count(&2)), (1, 0));
    }

    #[test]
    fn unique_keys_replace_and_return_the_old_entry() {
        let mut t: Inflight<u32, E> = Inflight::new(16);
        let mut none = |_, _| panic!("nothing to evict");
        assert_eq!(t.insert(7, E(1, 0), &mut none), None);
        assert_eq!(t.insert(7, E(2, 1), &mut none), Some(E(1, 0)));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn the_oldest_quarter_is_given_up_when_full() {
        let mut t: Inflight<u32, E> = Inflight::new(8);
        let mut out = Vec::new();
        for i in 0..9u32 {
            // Two entries share key 0, in arrival order.
            let key = if i == 5 { 0 } else { i };
            t.push(key, E(100 - i as u64, i), &mut |_, v| out.push(v));
        }
        // The 9th push found 8 held: the oldest quarter (starts 93..=95, i = 5..=7, the
        // quarter cut includes ties at the cut) went, oldest first.
        assert_eq!(out.first().map(|e| e.0), Some(93));
        assert!(out.windows(2).all(|w| w[0].0 <= w[1].0));
        assert_eq!(t.given_up(), out.len() as u64);
        assert_eq!(t.len() + out.len(), 9);
        // What stayed of key 0 kept its order.
        assert_eq!(t.first_mut(&0).map(|e| e.1), Some(0));
        let mut rest = Vec::new();
        t.drain_all(&mut |_, v| rest.push(v.0));
        assert!(rest.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(t.given_up(), 9);
        assert!(t.is_empty());
    }
}
