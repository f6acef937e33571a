//! Stage 4: merge the per-CPU event streams into one stream in time order.
//!
//! # The ordering rule
//! Each CPU's ring is in time order, but there is no order between rings: the completion
//! of an I/O can be read from CPU 1 before its issue is read from CPU 0. The sorter
//! holds events in a min-heap and releases them behind a *watermark*: after a full drain
//! round (every ring read up to its head), every ring that produced data has told us the
//! newest time it holds; an event older than the smallest of those newest times can no
//! longer be overtaken by an event still unread in one of those rings, so it is released.
//! Rings that were empty in the round do not hold the watermark back (a quiet CPU must
//! not stall the output), which leaves a window of microseconds in which an event being
//! written while we drain can arrive late; such events are still released, in arrival
//! order, and [`Sorter::late`] counts them so the disorder is visible. At the end,
//! [`Sorter::flush`] releases everything.
//!
//! Ties are released in arrival order, so one CPU's events keep their ring order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<T> {
    time: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.seq) == (o.time, o.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Entry<T> {
    // Reversed: BinaryHeap is a max-heap and we want the oldest first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

/// Time-ordering buffer between the rings and the correlator.
pub struct Sorter<T> {
    heap: BinaryHeap<Entry<T>>,
    seq: u64,
    /// Newest time pushed in the current round, per ring that had data.
    round_min_newest: Option<u64>,
    released_up_to: u64,
    late: u64,
    max_held: usize,
}

impl<T> Default for Sorter<T> {
    fn default() -> Self {
        Sorter {
            heap: BinaryHeap::new(),
            seq: 0,
            round_min_newest: None,
            released_up_to: 0,
            late: 0,
            max_held: 0,
        }
    }
}

impl<T> Sorter<T> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, time: u64, item: T) {
        if time < self.released_up_to {
            self.late += 1;
        }
        self.seq += 1;
        self.heap.push(Entry {
            time,
            seq: self.seq,
            item,
        });
    }

    /// Tell the sorter that one ring was drained in this round and the newest event it
    /// produced had `newest` as time. Call only for rings that produced events.
    pub fn ring_drained(&mut self, newest: u64) {
        self.round_min_newest = Some(self.round_min_newest.map_or(newest, |m| m.min(newest)));
    }

    /// End a drain round: release every event older than the watermark, oldest first.
    pub fn end_round(&mut self, mut out: impl FnMut(u64, T)) {
        self.max_held = self.max_held.max(self.heap.len());
        if let Some(mark) = self.round_min_newest.take() {
            self.release_while(|t| t < mark, &mut out);
            self.released_up_to = self.released_up_to.max(mark);
        }
    }

    /// Release everything (end of the run).
    pub fn flush(&mut self, mut out: impl FnMut(u64, T)) {
        self.max_held = self.max_held.max(self.heap.len());
        self.release_while(|_| true, &mut out);
    }

    fn release_while(&mut self, keep_going: impl Fn(u64) -> bool, out: &mut impl FnMut(u64, T)) {
        while let Some(top) = self.heap.peek() {
            if !keep_going(top.time) {
                break;
            }
            if let Some(e) = self.heap.pop() {
                out(e.time, e.item);
            }
        }
    }

    /// Events that arrived older than something already released.
    pub fn late(&self) -> u64 {
        self.late
    }

    pub fn held(&self) -> usize {
        self.heap.len()
    }

    /// The largest number of events held at once (memory high-water mark).
    pub fn max_held(&self) -> usize {
        self.max_held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(s: &mut Sorter<&'static str>) -> Vec<(u64, &'static str)> {
        let mut v = Vec::new();
        s.end_round(|t, x| v.push((t, x)));
        v
    }

    #[test]
    fn completion_read_from_another_cpu_before_its_issue() {
        let mut s = Sorter::new();
        // Round 1: CPU 1 is drained first and holds the completion (t=200); CPU 0,
        // drained second, holds the issue (t=100) and a later event (t=150).
        s.push(200, "complete@cpu1");
        s.ring_drained(200);
        s.push(100, "issue@cpu0");
        s.push(150, "other@cpu0");
        s.ring_drained(150);
        // Only what is older than min(200, 150) may go: the issue.
        assert_eq!(drain(&mut s), vec![(100, "issue@cpu0")]);
        // Round 2: CPU 0 produces t=300; now 150 and 200 are safe, in time order.
        s.push(300, "next@cpu0");
        s.ring_drained(300);
        assert_eq!(
            drain(&mut s),
            vec![(150, "other@cpu0"), (200, "complete@cpu1")]
        );
        let mut rest = Vec::new();
        s.flush(|t, x| rest.push((t, x)));
        assert_eq!(rest, vec![(300, "next@cpu0")]);
        assert_eq!(s.late(), 0);
    }

    #[test]
    fn an_empty_round_releases_nothing_and_ties_keep_arrival_order() {
        let mut s = Sorter::new();
        s.push(5, "a");
        s.push(5, "b");
        assert!(drain(&mut s).is_empty(), "no ring reported: no watermark");
        s.ring_drained(6);
        assert_eq!(drain(&mut s), vec![(5, "a"), (5, "b")]);
    }

    #[test]
    fn late_events_are_counted_and_still_delivered() {
        let mut s = Sorter::new();
        s.push(100, "x");
        s.push(150, "z");
        s.ring_drained(150);
        assert_eq!(drain(&mut s), vec![(100, "x")]);
        s.push(50, "late");
        assert_eq!(s.late(), 1);
        let mut rest = Vec::new();
        s.flush(|t, x| rest.push((t, x)));
        assert_eq!(rest, vec![(50, "late"), (150, "z")]);
        assert_eq!(s.max_held(), 2);
    }
}
