//! Stage 4: merge the per-CPU event streams into one stream in time order.
//!
//! # The ordering rule
//! Each CPU's ring is in time order, but there is no order between rings: the completion
//! of an I/O can be read from CPU 1 before its issue is read from CPU 0. The sorter keeps
//! one FIFO per source (CPU) and releases events behind a *watermark*: after a full drain
//! round (every ring read up to its head), every ring that produced data has told us the
//! newest time it holds; an event older than the smallest of those newest times can no
//! longer be overtaken by an event still unread in one of those rings, so it is released.
//! Rings that were empty in the round do not hold the watermark back (a quiet CPU must
//! not stall the output), which leaves a window of microseconds in which an event being
//! written while we drain can arrive late; such events are still released, in time
//! order among what is held, and [`Sorter::late`] counts them so the disorder is
//! visible. At the end, [`Sorter::flush`] releases everything.
//!
//! Release is a k-way merge over the sources' FIFOs (a heap of their head times), so an
//! event is moved once in and once out and the heap work is log(#sources) per event,
//! however many events are held. Ties go to the lower source, and one source's events
//! keep their ring order.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// Time-ordering buffer between the rings and the correlator.
pub struct Sorter<T> {
    /// Per source (CPU), events in time order.
    queues: Vec<VecDeque<(u64, T)>>,
    /// Newest time pushed in the current round, over the rings that had data.
    round_min_newest: Option<u64>,
    released_up_to: u64,
    late: u64,
    held: usize,
    max_held: usize,
}

impl<T> Default for Sorter<T> {
    fn default() -> Self {
        Sorter {
            queues: Vec::new(),
            round_min_newest: None,
            released_up_to: 0,
            late: 0,
            held: 0,
            max_held: 0,
        }
    }
}

/// Sources above this are folded onto it: a corrupt CPU number must not allocate
/// millions of queues.
const MAX_SOURCES: usize = 1 << 14;

impl<T> Sorter<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue an event of `source` (the CPU whose ring it came from).
    pub fn push(&mut self, source: u32, time: u64, item: T) {
        if time < self.released_up_to {
            self.late += 1;
        }
        let src = (source as usize).min(MAX_SOURCES - 1);
        if src >= self.queues.len() {
            self.queues.resize_with(src + 1, VecDeque::new);
        }
        let q = &mut self.queues[src];
        match q.back() {
            // Nested contexts (an interrupt tracing while a task traces) can put a
            // slightly older event after a newer one in the same ring: keep the FIFO
            // sorted, which costs a search only in that rare case.
            Some((last, _)) if *last > time => {
                let at = q.partition_point(|(t, _)| *t <= time);
                q.insert(at, (time, item));
            }
            _ => q.push_back((time, item)),
        }
        self.held += 1;
        self.max_held = self.max_held.max(self.held);
    }

    /// Tell the sorter that one ring was drained in this round and the newest event it
    /// produced had `newest` as time. Call only for rings that produced events.
    pub fn ring_drained(&mut self, newest: u64) {
        self.round_min_newest = Some(self.round_min_newest.map_or(newest, |m| m.min(newest)));
    }

    /// End a drain round: release every event older than the watermark, oldest first.
    pub fn end_round(&mut self, mut out: impl FnMut(u64, T)) {
        if let Some(mark) = self.round_min_newest.take() {
            self.release(Some(mark), &mut out);
            self.released_up_to = self.released_up_to.max(mark);
        }
    }

    /// Release everything (end of the run).
    pub fn flush(&mut self, mut out: impl FnMut(u64, T)) {
        self.release(None, &mut out);
    }

    /// k-way merge of the queue heads, up to (not including) `limit`.
    fn release(&mut self, limit: Option<u64>, out: &mut impl FnMut(u64, T)) {
        let below = |t: u64| limit.is_none_or(|m| t < m);
        let mut heads: BinaryHeap<Reverse<(u64, usize)>> = self
            .queues
            .iter()
            .enumerate()
            .filter_map(|(i, q)| q.front().map(|(t, _)| Reverse((*t, i))))
            .filter(|Reverse((t, _))| below(*t))
            .collect();
        while let Some(Reverse((_, i))) = heads.pop() {
            let q = &mut self.queues[i];
            if let Some((t, item)) = q.pop_front() {
                self.held -= 1;
                out(t, item);
            }
            if let Some((t, _)) = q.front() {
                if below(*t) {
                    heads.push(Reverse((*t, i)));
                }
            }
        }
    }

    /// Events that arrived older than something already released.
    pub fn late(&self) -> u64 {
        self.late
    }

    pub fn held(&self) -> usize {
        self.held
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
        s.push(1, 200, "complete@cpu1");
        s.ring_drained(200);
        s.push(0, 100, "issue@cpu0");
        s.push(0, 150, "other@cpu0");
        s.ring_drained(150);
        // Only what is older than min(200, 150) may go: the issue.
        assert_eq!(drain(&mut s), vec![(100, "issue@cpu0")]);
        // Round 2: CPU 0 produces t=300; now 150 and 200 are safe, in time order.
        s.push(0, 300, "next@cpu0");
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
        s.push(0, 5, "a");
        s.push(0, 5, "b");
        assert!(drain(&mut s).is_empty(), "no ring reported: no watermark");
        s.ring_drained(6);
        assert_eq!(drain(&mut s), vec![(5, "a"), (5, "b")]);
    }

    #[test]
    fn late_events_are_counted_and_still_delivered() {
        let mut s = Sorter::new();
        s.push(0, 100, "x");
        s.push(1, 150, "z");
        s.ring_drained(150);
        assert_eq!(drain(&mut s), vec![(100, "x")]);
        s.push(0, 50, "late");
        assert_eq!(s.late(), 1);
        let mut rest = Vec::new();
        s.flush(|t, x| rest.push((t, x)));
        assert_eq!(rest, vec![(50, "late"), (150, "z")]);
        assert_eq!(s.max_held(), 2);
    }

    #[test]
    fn out_of_order_within_one_ring_is_sorted_and_many_sources_merge() {
        let mut s = Sorter::new();
        s.push(3, 10, "a");
        s.push(3, 30, "c");
        s.push(3, 20, "b"); // nested context: older than the ring's last event
        s.push(0, 15, "x");
        s.push(9, 25, "y");
        let mut v = Vec::new();
        s.flush(|t, x| v.push((t, x)));
        assert_eq!(
            v,
            vec![(10, "a"), (15, "x"), (20, "b"), (25, "y"), (30, "c")]
        );
        assert_eq!(s.held(), 0);
    }

    #[test]
    fn a_corrupt_cpu_number_does_not_allocate_without_bound() {
        let mut s = Sorter::new();
        s.push(u32::MAX, 1, ());
        assert!(s.queues.len() <= MAX_SOURCES);
        let mut n = 0;
        s.flush(|_, _| n += 1);
        assert_eq!(n, 1);
    }
}
