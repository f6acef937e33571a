//! A map from 64-bit keys to 32-bit slot numbers, for the tables a correlator looks up
//! on nearly every event (nvme-tcp: about 18 lookups per I/O, 1.4 per event).
//!
//! The keys are command identities packed into a word ((controller, qid, cid)), so
//! one multiply spreads them well, and no key is chosen by an adversary who could
//! make them collide. The general map (SIMD groups of control bytes, a 7-bit tag, a
//! key compare through the tag's match) took a chain of dependent loads per lookup;
//! here a lookup is a multiply, a shift and usually one 16-byte entry read: open
//! addressing with linear probing, at most half full, and removal by shifting the
//! entries behind back (no tombstones, so a table that sees millions of inserts and
//! removals never needs a rebuild). Worth it only for small values: a removal moves
//! entries, and an in-flight table holding whole I/Os (the block profile's) ran slower
//! on this design than on the general map; here the values are slot numbers.

#[derive(Clone, Copy)]
struct Entry {
    key: u64,
    /// The slot number; [`EMPTY`] when the entry is free.
    val: u32,
}

const EMPTY: u32 = u32::MAX;
const FREE: Entry = Entry { key: 0, val: EMPTY };
/// Entries of a new table.
const FIRST: usize = 64;

/// Where [`SlotIndex::find`] found a key; good until the next insert or removal.
#[derive(Debug, Clone, Copy)]
pub struct Place(usize);

pub struct SlotIndex {
    entries: Vec<Entry>,
    /// `64 - log2(entries.len())`: the hash is the product's top bits.
    shift: u32,
    len: usize,
}

impl Default for SlotIndex {
    fn default() -> SlotIndex {
        SlotIndex {
            entries: vec![FREE; FIRST],
            shift: 64 - FIRST.trailing_zeros(),
            len: 0,
        }
    }
}

impl SlotIndex {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn mask(&self) -> usize {
        self.entries.len() - 1
    }

    /// Where `key`'s probe starts.
    #[inline]
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// Where `key` is, or the free entry its probe ends at.
    #[inline]
    fn probe(&self, key: u64) -> Result<usize, usize> {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            // In bounds: `i` is masked to the table, whose length is a power of two.
            let e = self.entries[i];
            if e.val == EMPTY {
                return Err(i);
            }
            if e.key == key {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The slot under `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        self.probe(key).ok().map(|i| self.entries[i].val)
    }

    /// Where `key` is, and its slot: to look at the slot's value before deciding to
    /// [`remove_at`](Self::remove_at), in one probe.
    #[inline]
    pub fn find(&self, key: u64) -> Option<(Place, u32)> {
        self.probe(key)
            .ok()
            .map(|i| (Place(i), self.entries[i].val))
    }

    /// Put `key` → `val`; returns the slot it replaced.
    pub fn insert(&mut self, key: u64, val: u32) -> Option<u32> {
        debug_assert!(val != EMPTY, "slot number {EMPTY} is the free mark");
        match self.probe(key) {
            Ok(i) => Some(std::mem::replace(&mut self.entries[i].val, val)),
            Err(i) => {
                self.entries[i] = Entry { key, val };
                self.len += 1;
                if 2 * self.len > self.entries.len() {
                    self.grow();
                }
                None
            }
        }
    }

    /// Take `key` out; its slot.
    #[inline]
    pub fn remove(&mut self, key: u64) -> Option<u32> {
        let i = self.probe(key).ok()?;
        let val = self.entries[i].val;
        self.vacate(i);
        Some(val)
    }

    /// Take out the key [`find`](Self::find) found at `at` (no insert or removal since).
    #[inline]
    pub fn remove_at(&mut self, at: Place) {
        if self.entries.get(at.0).is_some_and(|e| e.val != EMPTY) {
            self.vacate(at.0);
        }
    }

    /// Free entry `hole`, and move back each entry after it in its cluster that its
    /// probe would no longer reach across the hole.
    fn vacate(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let e = self.entries[j];
            if e.val == EMPTY {
                break;
            }
            // `e` stays when its home lies after the hole, up to `j` (cyclically).
            let from_home = j.wrapping_sub(self.home(e.key)) & mask;
            let from_hole = j.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                self.entries[hole] = e;
                hole = j;
            }
        }
        self.entries[hole] = FREE;
        self.len -= 1;
    }

    fn grow(&mut self) {
        let size = self.entries.len() * 2;
        let old = std::mem::replace(&mut self.entries, vec![FREE; size]);
        self.shift = 64 - size.trailing_zeros();
        for e in old.into_iter().filter(|e| e.val != EMPTY) {
            if let Err(i) = self.probe(e.key) {
                self.entries[i] = e;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Against the standard map, through growth and many removals, with keys that
    /// share their home (all multiples of a large power of two) as well as spread ones.
    #[test]
    fn holds_what_a_map_holds() {
        let mut ours = SlotIndex::default();
        let mut theirs: HashMap<u64, u32> = HashMap::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = if step % 3 == 0 {
                (x % 64) << 40
            } else {
                x % 5_000
            };
            match x % 5 {
                0 | 1 => assert_eq!(ours.insert(key, step), theirs.insert(key, step)),
                2 => assert_eq!(ours.remove(key), theirs.remove(&key)),
                3 => {
                    let found = ours.find(key);
                    assert_eq!(found.map(|f| f.1), theirs.remove(&key));
                    if let Some((at, _)) = found {
                        ours.remove_at(at);
                    }
                }
                _ => assert_eq!(ours.get(key), theirs.get(&key).copied()),
            }
            assert_eq!(ours.len(), theirs.len());
        }
        for (k, v) in &theirs {
            assert_eq!(ours.get(*k), Some(*v));
        }
        for k in theirs.keys() {
            assert!(ours.remove(*k).is_some());
        }
        assert!(ours.is_empty());
        assert!(ours.entries.iter().all(|e| e.val == EMPTY));
        assert_eq!(ours.get(0), None);
    }
}
