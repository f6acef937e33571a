//! I/Os in flight under keys that are unique while in flight (an NVMe command id), held
//! in place: the value lives in a slab slot from its insert to its removal, and the map
//! holds only the slot's number.
//!
//! [`Inflight`](super::inflight::Inflight) keeps its values in the hash map itself,
//! which suits small values. A correlator whose per-I/O state is hundreds of bytes
//! (nvme-tcp: each side's marks and stages) paid for that with the state moved on
//! every insert, removal and table growth; here an update through [`Keyed::get_mut`]
//! is one lookup of a 4-byte slot number, and the state is moved only when it leaves.
//!
//! The bound is [`Inflight`](super::inflight::Inflight)'s: at most `max` entries, and
//! when a new key would pass that, the oldest quarter (by start time) is given up at
//! once, oldest first.

use super::index::SlotIndex;
use super::inflight::{give_up, quarter_cut, Started};

pub struct Keyed<V> {
    index: SlotIndex,
    /// Per slot: its key and value; `None` when free.
    slots: Vec<(u64, Option<V>)>,
    free: Vec<u32>,
    max: usize,
    given_up: u64,
}

impl<V: Started> Keyed<V> {
    pub fn new(max: usize) -> Keyed<V> {
        Keyed {
            index: SlotIndex::default(),
            slots: Vec::new(),
            free: Vec::new(),
            max: max.max(4),
            given_up: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Entries evicted to bound memory or given up at the end.
    pub fn given_up(&self) -> u64 {
        self.given_up
    }

    /// The value under `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<&V> {
        let i = self.index.get(key)?;
        self.slots[i as usize].1.as_ref()
    }

    /// The value under `key`, to change it in place.
    #[inline]
    pub fn get_mut(&mut self, key: u64) -> Option<&mut V> {
        let i = self.index.get(key)?;
        self.slots[i as usize].1.as_mut()
    }

    /// The value in slot `slot` if it is still `key`'s: a slot number kept elsewhere
    /// (a second index) is checked against the key it was taken for, so that a slot
    /// freed and reused by another key is never mistaken for it.
    #[inline]
    pub fn at(&self, slot: u32, key: u64) -> Option<&V> {
        match self.slots.get(slot as usize)? {
            (k, Some(v)) if *k == key => Some(v),
            _ => None,
        }
    }

    /// Add `v` under `key`; returns its slot and the entry it replaced. When full, the
    /// oldest quarter is given up first (to `evicted`).
    pub fn insert(&mut self, key: u64, v: V, evicted: &mut dyn FnMut(u64, V)) -> (u32, Option<V>) {
        if let Some(i) = self.index.get(key) {
            let old = self.slots[i as usize].1.replace(v);
            return (i, old);
        }
        self.bound(evicted);
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = (key, Some(v));
                i
            }
            None => {
                self.slots.push((key, Some(v)));
                (self.slots.len() - 1) as u32
            }
        };
        self.index.insert(key, slot);
        (slot, None)
    }

    /// Take the value under `key` out.
    #[inline]
    pub fn remove(&mut self, key: u64) -> Option<V> {
        let i = self.index.remove(key)?;
        self.free_slot(i)
    }

    /// What `f` makes of the value under `key`, which then leaves: read where it is
    /// held, never moved out (a correlator builds its record from it).
    #[inline]
    pub fn remove_with<R>(&mut self, key: u64, f: impl FnOnce(&V) -> R) -> Option<R> {
        let i = self.index.remove(key)?;
        let r = self.slots[i as usize].1.as_ref().map(f);
        self.vacate(i);
        r
    }

    /// [`remove_with`](Self::remove_with) if `pred` accepts the value, in one lookup.
    #[inline]
    pub fn remove_with_if<R>(
        &mut self,
        key: u64,
        pred: impl FnOnce(&V) -> bool,
        f: impl FnOnce(&V) -> R,
    ) -> Option<R> {
        let (at, i) = self.index.find(key)?;
        let v = self.slots[i as usize].1.as_ref().filter(|v| pred(v))?;
        let r = f(v);
        self.index.remove_at(at);
        self.vacate(i);
        Some(r)
    }

    fn free_slot(&mut self, i: u32) -> Option<V> {
        let v = self.slots[i as usize].1.take();
        self.free.push(i);
        v
    }

    /// Free slot `i`, its value dropped where it is (not moved out first).
    fn vacate(&mut self, i: u32) {
        self.slots[i as usize].1 = None;
        self.free.push(i);
    }

    /// Visit every entry, to change it in place (in slot order).
    pub fn for_each_mut(&mut self, mut f: impl FnMut(u64, &mut V)) {
        for (k, slot) in &mut self.slots {
            if let Some(v) = slot {
                f(*k, v);
            }
        }
    }

    /// Give up every entry, oldest first (end of run).
    pub fn drain_all(&mut self, out: &mut dyn FnMut(u64, V)) {
        let all = self.take_where(|_| true);
        give_up(all, &mut self.given_up, out);
    }

    /// Take out every entry `pred` accepts, in slot order.
    fn take_where(&mut self, mut pred: impl FnMut(&V) -> bool) -> Vec<(u64, V)> {
        let mut out = Vec::new();
        for (i, (k, slot)) in self.slots.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(&mut pred) {
                if let Some(v) = slot.take() {
                    self.index.remove(*k);
                    self.free.push(i as u32);
                    out.push((*k, v));
                }
            }
        }
        out
    }

    /// Before adding a key: when full, give up the oldest quarter.
    fn bound(&mut self, evicted: &mut dyn FnMut(u64, V)) {
        if self.index.len() < self.max {
            return;
        }
        let starts = self
            .slots
            .iter()
            .filter_map(|(_, v)| v.as_ref().map(Started::started))
            .collect();
        let cut = quarter_cut(starts);
        let old = self.take_where(|v| v.started() <= cut);
        give_up(old, &mut self.given_up, evicted);
    }
}

#[cfg(test)]
mod tests {
    use super::super::inflight::E;
    use super::*;

    #[test]
    fn a_key_holds_one_value_updated_in_place() {
        let mut t: Keyed<E> = Keyed::new(16);
        let mut none = |_, _| panic!("nothing to evict");
        let (s, old) = t.insert(7, E(1, 0), &mut none);
        assert_eq!(old, None);
        t.get_mut(7).unwrap().1 = 5;
        assert_eq!(t.get(7), Some(&E(1, 5)));
        assert_eq!(t.at(s, 7), Some(&E(1, 5)));
        assert_eq!(t.at(s, 8), None);
        // The same key again replaces, in the same slot.
        assert_eq!(t.insert(7, E(2, 1), &mut none), (s, Some(E(1, 5))));
        assert_eq!(t.len(), 1);
        assert_eq!(t.remove_with_if(7, |e| e.1 == 0, |e| *e), None);
        assert_eq!(t.remove_with_if(7, |e| e.1 == 1, |e| *e), Some(E(2, 1)));
        assert_eq!((t.len(), t.get(7), t.at(s, 7)), (0, None, None));
        // A freed slot is reused, and a number kept for the old key no longer reads.
        let (s2, _) = t.insert(9, E(3, 2), &mut none);
        assert_eq!(s2, s);
        assert_eq!(t.at(s, 7), None);
        assert_eq!(t.remove_with(9, |e| e.1), Some(2));
        assert_eq!(t.remove(9), None);
        let mut seen = Vec::new();
        t.insert(4, E(5, 6), &mut none);
        t.for_each_mut(|k, e| {
            e.1 += 1;
            seen.push(k);
        });
        assert_eq!((seen, t.get(4)), (vec![4], Some(&E(5, 7))));
    }

    #[test]
    fn the_oldest_quarter_is_given_up_when_full() {
        let mut t: Keyed<E> = Keyed::new(8);
        let mut out = Vec::new();
        for i in 0..9u32 {
            t.insert(i as u64, E(100 - i as u64, i), &mut |k, v| out.push((k, v)));
        }
        // The 9th insert found 8 held: the oldest quarter (starts 93..=95, the cut
        // included) went, oldest first, each with its key.
        assert_eq!(out.first().map(|(_, e)| e.0), Some(93));
        assert!(out.windows(2).all(|w| w[0].1 .0 <= w[1].1 .0));
        assert!(out.iter().all(|(k, e)| *k == e.1 as u64));
        assert_eq!(t.given_up(), out.len() as u64);
        assert_eq!(t.len() + out.len(), 9);
        assert!(out.iter().all(|(k, _)| t.get(*k).is_none()));
        let mut rest = Vec::new();
        t.drain_all(&mut |_, v| rest.push(v.0));
        assert!(rest.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(t.given_up(), 9);
        assert!(t.is_empty());
    }
}
