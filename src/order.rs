//! Stage 4: merge the per-CPU event streams into one stream in time order.
//!
//! # The ordering rule
//! Each CPU's ring is in time order, but there is no order between rings: the completion
//! of an I/O can be read from CPU 1 before its issue is read from CPU 0. The sorter keeps
//! one FIFO per source (CPU) and releases events behind a *bound* that no unread sample
//! can undercut, taken from the clock rather than from what the rings happened to hold:
//!
//! * A drain round starts with [`Sorter::begin_round`]: the caller reads the recording
//!   clock (`T_N`, CLOCK_MONOTONIC, the clock the samples are stamped with) *before*
//!   reading any ring, then reads every ring up to its head.
//! * [`Sorter::end_round`] of round `N` releases, oldest first, exactly the events with
//!   time `< T_(N-1)`, the clock read at the start of the *previous* round (perf's
//!   one-round lag, `OE_FLUSH__ROUND` in `tools/perf/util/ordered-events.c`). The first
//!   round releases nothing.
//!
//! Why that bound holds: the kernel stamps a sample *before* it reserves ring space,
//! copies the record and publishes `data_head`. A sample stamped `t < T_(N-1)` sits in a
//! ring that was read twice after `T_(N-1)` (in rounds `N-1` and `N`). If it was still
//! not visible at the second read, its write lasted from before `T_(N-1)` until after
//! `T_N`: longer than a whole round (every ring read, decode, correlate, the sinks and the
//! poll wait in between). Tracepoint samples are written with preemption disabled, so
//! only interrupts, NMIs or a stalled vCPU can stretch a write that far.
//!
//! Why not `T_N` itself: a sample stamped just before `T_N` may still be mid-write when
//! its ring is read a few nanoseconds after `T_N`. At full rate some CPU is almost always
//! writing one, so that bound would be overtaken every few rounds. Why not the newest
//! time each ring held (the rule this replaced): a ring read empty says nothing about the
//! sample its CPU is writing at that moment, which then arrives after younger events from
//! other CPUs were released.
//!
//! The cost of the lag: events are held for one to two rounds; memory follows the event
//! rate times the round length, and the live loop keeps rounds short (a ring wakes the
//! reader when a fraction of it is full). Residual disorder (a write stretched past a
//! whole round, or a replay that feeds an older event after a newer bound) is still
//! delivered, in time order among what is held, and [`Sorter::late`] counts it so it is
//! visible. At the end, [`Sorter::flush`] releases everything.
//!
//! Release is a k-way merge over the sources' FIFOs, so an event is moved once in and
//! once out, however many events are held. Each FIFO is sorted, so what a release takes
//! from it is a prefix found by binary search; a source alone below the bound hands its
//! prefix over without any merging, and otherwise a tournament tree over the sources
//! with something to release picks the next event in log2(#sources) compares, with no
//! heap push or pop per event. Ties go to the lower source, and one source's events keep
//! their ring order.

/// What the sorter orders: a plain value that carries its own time, so that a queued
/// event is stored once, without a copy of its time beside it (a queue's bytes are
/// moved once in and once out per event).
pub trait Stamped: Copy {
    fn time(&self) -> u64;
}

/// One source's events in time order: a Vec read from `head`, so that taking an event
/// is an index bump (events are `Copy`, small and plain), with none of a ring buffer's
/// wrap arithmetic. Spent space is reclaimed after a release (see [`Queue::compact`]).
struct Queue<T> {
    items: Vec<T>,
    head: usize,
}

impl<T> Default for Queue<T> {
    fn default() -> Self {
        Queue {
            items: Vec::new(),
            head: 0,
        }
    }
}

impl<T: Stamped> Queue<T> {
    #[inline]
    fn live(&self) -> &[T] {
        &self.items[self.head..]
    }

    #[inline]
    fn last_time(&self) -> Option<u64> {
        self.live().last().map(T::time)
    }

    /// Drop the events already taken once that is cheap: none left, or a quarter as
    /// many left as were taken. A live loop leaves about one round's events behind at
    /// every release (the bound lags a round), so moving them at each release would copy
    /// every event once more; this way the copies are at most a third of the events
    /// taken, for a buffer at most four times what is held.
    fn compact(&mut self) {
        if self.head == self.items.len() {
            self.items.clear();
            self.head = 0;
        } else if self.head > 3 * (self.items.len() - self.head) {
            self.items.drain(..self.head);
            self.head = 0;
        }
    }
}

/// Time-ordering buffer between the rings and the correlator.
pub struct Sorter<T> {
    /// Per source (CPU), events in time order.
    queues: Vec<Queue<T>>,
    /// Clock read at the start of the current round.
    round_start: Option<u64>,
    /// Clock read at the start of the previous round: what `end_round` releases below.
    bound: Option<u64>,
    released_up_to: u64,
    late: u64,
    held: usize,
    max_held: usize,
    /// Nothing at or after this is released by `end_round` (see [`Sorter::hold_until`]).
    hold: Option<u64>,
    /// Scratch for [`Sorter::release`], kept so a round allocates nothing.
    merge: Merge,
}

/// A tournament (winner) tree over the sources a release merges. Leaf `j` is the
/// `j`-th of them in source order, keyed by its head time (`u64::MAX` once it has
/// nothing more to give); node `n` holds the entry that wins below it, `1` is the
/// root, and nodes `p..2p` are the leaves themselves. An entry is the key and the leaf
/// in one number, `key << 32 | leaf`, so that a match is one comparison, and a tie on
/// the key goes to the lower leaf, the lower source.
#[derive(Default)]
struct Merge {
    /// Per leaf: its source, the index of its next event, and the end of what this
    /// release takes from it.
    leaves: Vec<(usize, usize, usize)>,
    /// The leaves' first keys, to build the tree from.
    keys: Vec<u64>,
    /// Per node: the entry that wins below it, so that a replay reads one node per
    /// level.
    tree: Vec<u128>,
}

#[inline]
fn entry(key: u64, leaf: usize) -> u128 {
    (u128::from(key) << 32) | leaf as u128
}

impl Merge {
    /// Build the tree over `keys` (padded to a power of two); returns the leaf count.
    fn build(&mut self) -> usize {
        let p = self.keys.len().next_power_of_two();
        self.tree.clear();
        self.tree.resize(2 * p, entry(u64::MAX, 0));
        for j in 0..p {
            self.tree[p + j] = entry(self.keys.get(j).copied().unwrap_or(u64::MAX), j);
        }
        for n in (1..p).rev() {
            self.tree[n] = self.tree[2 * n].min(self.tree[2 * n + 1]);
        }
        p
    }

    /// The leaf that wins.
    #[inline]
    fn winner(&self) -> usize {
        self.tree[1] as u32 as usize
    }

    /// Leaf `j`'s key changed to `key`: replay its path to the root against the
    /// siblings' winners.
    #[inline]
    fn replay(&mut self, j: usize, key: u64, p: usize) {
        let mut n = p + j;
        let mut win = entry(key, j);
        self.tree[n] = win;
        while n > 1 {
            win = win.min(self.tree[n ^ 1]);
            n /= 2;
            self.tree[n] = win;
        }
    }
}

impl<T> Default for Sorter<T> {
    fn default() -> Self {
        Sorter {
            queues: Vec::new(),
            round_start: None,
            bound: None,
            released_up_to: 0,
            late: 0,
            held: 0,
            max_held: 0,
            hold: None,
            merge: Merge::default(),
        }
    }
}

/// Sources above this are folded onto it: a corrupt CPU number must not allocate
/// millions of queues.
const MAX_SOURCES: usize = 1 << 14;

impl<T: Stamped> Sorter<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue an event of `source` (the CPU whose ring it came from).
    #[inline]
    pub fn push(&mut self, source: u32, item: T) {
        let time = item.time();
        match self.tail(source, time) {
            Some(q) => q.push(item),
            None => self.insert(source, item),
        }
        self.queued(time);
    }

    /// Queue `run`, events of `source` as its ring gave them: what [`push`](Self::push)
    /// of each would do. A run in time order that starts at or after its queue's last
    /// event (a drained ring almost always is one) is appended in one copy, with no
    /// per-event bookkeeping: decoded elsewhere (`--threads 2`), every event of a
    /// round passes through here once.
    pub fn push_run(&mut self, source: u32, run: &[T]) {
        let Some(first) = run.first() else {
            return;
        };
        let in_order = run.windows(2).all(|w| w[0].time() <= w[1].time());
        match self.tail(source, first.time()) {
            Some(q) if in_order => q.extend_from_slice(run),
            _ => return run.iter().for_each(|&item| self.push(source, item)),
        }
        self.held += run.len();
        if first.time() < self.released_up_to {
            let released = self.released_up_to;
            self.late += run.partition_point(|x| x.time() < released) as u64;
        }
    }

    /// The queue an event of `source` stamped `time` is appended to, for a caller that
    /// builds the event in place (see `Decoder::decode_into`); `None` when it must be
    /// placed with [`insert`](Self::insert) (a source not seen yet, or an event older
    /// than its ring's last). Either way the caller then reports the event with
    /// [`queued`](Self::queued).
    #[inline]
    pub fn tail(&mut self, source: u32, time: u64) -> Option<&mut Vec<T>> {
        let q = self.queues.get_mut(source as usize)?;
        if q.last_time().is_some_and(|last| last > time) {
            return None;
        }
        Some(&mut q.items)
    }

    /// An event stamped `time` was queued through [`tail`](Self::tail) or
    /// [`insert`](Self::insert).
    #[inline]
    pub fn queued(&mut self, time: u64) {
        if time < self.released_up_to {
            self.late += 1;
        }
        // `held` only falls in `release`: its high-water mark is taken there.
        self.held += 1;
    }

    /// Place an event that [`tail`](Self::tail) refused: a source not seen yet, or an
    /// event older than its ring's last (nested contexts, an interrupt tracing while a
    /// task traces, can put a slightly older event after a newer one in the same ring).
    /// The FIFO is kept sorted; out of line, so the common case stays small enough to
    /// inline into the drain loop.
    #[cold]
    #[inline(never)]
    pub fn insert(&mut self, source: u32, item: T) {
        let time = item.time();
        let src = (source as usize).min(MAX_SOURCES - 1);
        if src >= self.queues.len() {
            self.queues.resize_with(src + 1, Queue::default);
        }
        let q = &mut self.queues[src];
        let at = q.head + q.live().partition_point(|x| x.time() <= time);
        q.items.insert(at, item);
    }

    /// Start a drain round. `now` is the recording clock read before any ring of this
    /// round is read (see the module doc). A clock that goes back (a replay that feeds
    /// odd times) never lowers the bound.
    pub fn begin_round(&mut self, now: u64) {
        let now = self.round_start.map_or(now, |prev| prev.max(now));
        self.bound = self.round_start.replace(now);
    }

    /// End a drain round: release, oldest first, every event older than the clock read at
    /// the start of the previous round.
    pub fn end_round(&mut self, mut out: impl FnMut(&T)) {
        if let Some(bound) = self.bound {
            let bound = self.hold.map_or(bound, |h| h.min(bound));
            self.release(Some(bound), &mut out);
            self.released_up_to = self.released_up_to.max(bound);
        }
    }

    /// Hold back every event from `t` on, whatever the round bound says, until a later
    /// call moves or lifts (`None`) the hold. The live loop holds events until the
    /// kernel's counts up to their time are known, so that the correlator hears of a
    /// missing sample before it sees the events after it.
    pub fn hold_until(&mut self, t: Option<u64>) {
        self.hold = t;
    }

    /// Release everything (end of the run).
    pub fn flush(&mut self, mut out: impl FnMut(&T)) {
        self.release(None, &mut out);
    }

    /// k-way merge of the queue heads, up to (not including) `limit`, ordered by (time,
    /// source). Each queue is sorted, so its part of the release is a prefix, counted
    /// first; a queue alone with something to release hands it over in one go.
    fn release(&mut self, limit: Option<u64>, out: &mut impl FnMut(&T)) {
        self.max_held = self.max_held.max(self.held);
        let mut m = std::mem::take(&mut self.merge);
        m.leaves.clear();
        m.keys.clear();
        for (i, q) in self.queues.iter().enumerate() {
            let live = q.live();
            let n = match limit {
                None => live.len(),
                Some(lim) => live.partition_point(|x| x.time() < lim),
            };
            if n > 0 {
                m.leaves.push((i, q.head, q.head + n));
                m.keys.push(live[0].time());
            }
        }
        let mut left: usize = m.leaves.iter().map(|&(_, at, end)| end - at).sum();
        self.held -= left;
        if let [(i, at, end)] = *m.leaves {
            for item in &self.queues[i].items[at..end] {
                out(item);
            }
            left = 0;
        }
        let p = if left > 0 { m.build() } else { 0 };
        while left > 0 {
            let mut w = m.winner();
            if m.leaves[w].1 == m.leaves[w].2 {
                // Only events stamped u64::MAX are left, tied with the spent leaves'
                // keys: the lowest source that still has one goes first.
                w = m.leaves.iter().position(|l| l.1 < l.2).unwrap_or(w);
            }
            let (i, ref mut at, end) = m.leaves[w];
            let items = &self.queues[i].items;
            // Handed out where it waits: an event is not copied out of its queue.
            let item = &items[*at];
            *at += 1;
            out(item);
            left -= 1;
            let key = if *at < end {
                items[*at].time()
            } else {
                u64::MAX
            };
            m.replay(w, key, p);
        }
        for &(i, _, end) in &m.leaves {
            let q = &mut self.queues[i];
            q.head = end;
            q.compact();
        }
        self.merge = m;
    }

    /// Events that arrived older than a bound already released: the bound was undercut,
    /// so a younger event may have gone out before them.
    pub fn late(&self) -> u64 {
        self.late
    }

    pub fn held(&self) -> usize {
        self.held
    }

    /// The largest number of events held at once (memory high-water mark).
    pub fn max_held(&self) -> usize {
        self.max_held.max(self.held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A value and the time it is ordered by: the tests' events.
    impl<X: Copy> Stamped for (u64, X) {
        fn time(&self) -> u64 {
            self.0
        }
    }

    fn drain(s: &mut Sorter<(u64, &'static str)>) -> Vec<(u64, &'static str)> {
        let mut v = Vec::new();
        s.end_round(|x| v.push(*x));
        v
    }

    fn flush(s: &mut Sorter<(u64, &'static str)>) -> Vec<(u64, &'static str)> {
        let mut v = Vec::new();
        s.flush(|x| v.push(*x));
        v
    }

    #[test]
    fn completion_read_from_another_cpu_before_its_issue() {
        let mut s = Sorter::new();
        // Round 1 starts at 90. CPU 1 is read first and holds the completion (t=200);
        // CPU 0, read second, the issue (t=100) and a later event (t=150).
        s.begin_round(90);
        s.push(1, (200, "complete@cpu1"));
        s.push(0, (100, "issue@cpu0"));
        s.push(0, (150, "other@cpu0"));
        assert!(drain(&mut s).is_empty(), "the first round has no bound yet");
        // Round 2 starts at 160: only what is older than round 1's start (90) may go.
        s.begin_round(160);
        assert!(drain(&mut s).is_empty());
        // Round 3 starts at 400: everything older than 160, in time order.
        s.begin_round(400);
        s.push(0, (300, "next@cpu0"));
        assert_eq!(
            drain(&mut s),
            vec![(100, "issue@cpu0"), (150, "other@cpu0")]
        );
        s.begin_round(500);
        assert_eq!(
            drain(&mut s),
            vec![(200, "complete@cpu1"), (300, "next@cpu0")]
        );
        assert!(flush(&mut s).is_empty());
        assert_eq!(s.late(), 0);
    }

    /// A sample stamped before a round but written after it: CPU 0's ring is read
    /// empty in round N while CPU 0 is writing a sample stamped before the round began; it becomes visible in round N+1, after
    /// CPU 1's younger events were read in round N. It must still come out first.
    #[test]
    fn a_sample_still_being_written_when_its_ring_was_read_empty_is_not_overtaken() {
        let mut s = Sorter::new();
        s.begin_round(600);
        s.push(1, (500, "warm-up@cpu1"));
        assert!(drain(&mut s).is_empty());
        // Round N starts at 1000. CPU 0 stamped a sample at 990 and is still copying it:
        // its ring reads empty. CPU 1 holds 1003 and 1005.
        s.begin_round(1000);
        s.push(1, (1003, "complete@cpu1"));
        s.push(1, (1005, "next@cpu1"));
        // Under the old rule (newest time of the rings that had data) 1003 went out here.
        assert_eq!(drain(&mut s), vec![(500, "warm-up@cpu1")]);
        // Round N+1: CPU 0's sample is now visible.
        s.begin_round(2000);
        s.push(0, (990, "issue@cpu0"));
        s.push(1, (1500, "later@cpu1"));
        assert_eq!(drain(&mut s), vec![(990, "issue@cpu0")]);
        s.begin_round(3000);
        assert_eq!(
            drain(&mut s),
            vec![
                (1003, "complete@cpu1"),
                (1005, "next@cpu1"),
                (1500, "later@cpu1")
            ]
        );
        assert_eq!(s.late(), 0);
    }

    #[test]
    fn an_empty_round_releases_nothing_and_ties_keep_arrival_order() {
        let mut s = Sorter::new();
        s.push(0, (5, "a"));
        s.push(0, (5, "b"));
        assert!(drain(&mut s).is_empty(), "no round began: no bound");
        s.begin_round(6);
        assert!(drain(&mut s).is_empty(), "one round: still no bound");
        s.begin_round(7);
        assert_eq!(drain(&mut s), vec![(5, "a"), (5, "b")]);
    }

    #[test]
    fn the_bound_is_strict_and_never_goes_back() {
        let mut s = Sorter::new();
        s.begin_round(100);
        s.push(0, (99, "a"));
        s.push(0, (100, "b"));
        s.begin_round(50); // a clock that went back must not lower the bound
        assert_eq!(drain(&mut s), vec![(99, "a")], "100 is not older than 100");
        s.begin_round(40);
        assert!(drain(&mut s).is_empty(), "the bound stays at 100");
        s.push(0, (99, "late"));
        assert_eq!(s.late(), 1, "99 is below the bound 100 already released");
        s.begin_round(150);
        s.begin_round(160);
        assert_eq!(drain(&mut s), vec![(99, "late"), (100, "b")]);
    }

    #[test]
    fn a_write_longer_than_a_round_is_counted_late_and_still_delivered() {
        let mut s = Sorter::new();
        s.begin_round(100);
        s.push(0, (120, "x"));
        s.push(1, (150, "z"));
        s.begin_round(200);
        assert!(drain(&mut s).is_empty());
        s.begin_round(300);
        assert_eq!(drain(&mut s), vec![(120, "x"), (150, "z")]);
        // Stamped at 180 (before round 2 began at 200) but visible only now.
        s.push(0, (180, "late"));
        assert_eq!(s.late(), 1);
        s.push(1, (250, "fine"));
        assert_eq!(s.late(), 1, "250 is above the released bound 200");
        assert_eq!(flush(&mut s), vec![(180, "late"), (250, "fine")]);
        assert_eq!(s.max_held(), 2);
    }

    #[test]
    fn out_of_order_within_one_ring_is_sorted_and_many_sources_merge() {
        let mut s = Sorter::new();
        s.push(3, (10, "a"));
        s.push(3, (30, "c"));
        s.push(3, (20, "b")); // nested context: older than the ring's last event
        s.push(0, (15, "x"));
        s.push(9, (25, "y"));
        assert_eq!(
            flush(&mut s),
            vec![(10, "a"), (15, "x"), (20, "b"), (25, "y"), (30, "c")]
        );
        assert_eq!(s.held(), 0);
    }

    /// Runs of one source and ties across sources: the same order as a plain
    /// (time, source) sort that keeps ring order within a source.
    #[test]
    fn runs_and_ties_come_out_by_time_then_source() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n
        };
        for case in 0..300 {
            let sources = 1 + rnd(20) as u32;
            let mut s: Sorter<(u64, (u32, u32))> = Sorter::new();
            let mut times = vec![0u64; sources as usize];
            let mut all = Vec::new();
            for k in 0..200 {
                let src = rnd(sources as u64) as u32;
                // Few distinct times: many ties across sources, and runs.
                times[src as usize] += rnd(3);
                let t = times[src as usize];
                s.push(src, (t, (src, k)));
                all.push((t, (src, k)));
            }
            let limit = if case % 3 == 0 { None } else { Some(rnd(150)) };
            let mut got = Vec::new();
            s.release(limit, &mut |x| got.push(*x));
            let mut want: Vec<_> = all
                .into_iter()
                .filter(|(t, _)| limit.is_none_or(|m| *t < m))
                .collect();
            want.sort_by_key(|&(t, (src, k))| (t, src, k));
            assert_eq!(got, want, "case {case}, {sources} sources, limit {limit:?}");
        }
    }

    /// A spent source's key is `u64::MAX`: events stamped that late still come out,
    /// by source.
    #[test]
    fn events_at_the_last_time_merge_by_source() {
        let mut s = Sorter::new();
        s.push(2, (u64::MAX, "c"));
        s.push(0, (5, "a"));
        s.push(0, (u64::MAX, "b"));
        s.push(1, (7, "x"));
        assert_eq!(
            flush(&mut s),
            vec![(5, "a"), (7, "x"), (u64::MAX, "b"), (u64::MAX, "c")]
        );
    }

    #[test]
    fn a_corrupt_cpu_number_does_not_allocate_without_bound() {
        let mut s = Sorter::new();
        s.push(u32::MAX, (1, ()));
        assert!(s.queues.len() <= MAX_SOURCES);
        let mut n = 0;
        s.flush(|_| n += 1);
        assert_eq!(n, 1);
    }

    /// Appending in place (`tail` + `queued`, as the pipeline decodes into the queue)
    /// releases exactly what `push` does, late counts included, across rounds that
    /// release part of what is held (so the queues are compacted under held events).
    #[test]
    fn appending_in_place_releases_what_push_does() {
        let mut rng = fastrand::Rng::with_seed(0x2545_F491_4F6C_DD1D);
        let mut rnd = |n: u64| rng.u64(..n.max(1));
        let (mut by_push, mut in_place) = (Sorter::new(), Sorter::new());
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut last = [0u64; 3];
        let mut appended = 0;
        for round in 0..300u64 {
            by_push.begin_round(round * 100);
            in_place.begin_round(round * 100);
            for k in 0..40 {
                let src = rnd(3) as usize;
                // Mostly in ring order, sometimes older than the ring's last (nested
                // contexts), sometimes older than what was released (late).
                let t = match rnd(20) {
                    0 => last[src].saturating_sub(rnd(50)),
                    1 => (round * 100).saturating_sub(150 + rnd(100)),
                    _ => last[src] + rnd(10),
                };
                last[src] = last[src].max(t);
                let item = (round, k);
                by_push.push(src as u32, (t, item));
                match in_place.tail(src as u32, t) {
                    Some(q) => {
                        q.push((t, item));
                        in_place.queued(t);
                        appended += 1;
                    }
                    None => in_place.push(src as u32, (t, item)),
                }
            }
            by_push.end_round(|x| a.push(*x));
            in_place.end_round(|x| b.push(*x));
            assert_eq!(a, b, "round {round}");
            assert_eq!(by_push.held(), in_place.held());
        }
        by_push.flush(|x| a.push(*x));
        in_place.flush(|x| b.push(*x));
        assert_eq!(a, b);
        assert_eq!(a.len(), 300 * 40);
        assert_eq!(by_push.late(), in_place.late());
        assert!(by_push.late() > 0, "the case of late events was exercised");
        assert!(appended > 300 * 30, "most events went in place");
    }

    /// A model of the live loop: CPUs stamp samples at random times and publish each one
    /// up to `max_write` ns later (in ring order); the reader reads the clock, then the
    /// rings one after the other, each read seeing what was published by then, and waits
    /// between rounds. Whenever a write is shorter than a round, the output must be in
    /// global time order with nothing late, whatever the interleaving.
    #[test]
    fn simulated_rings_with_slow_writes_come_out_in_time_order() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % n.max(1)
        };
        let mut total_released = 0usize;
        for _case in 0..200 {
            let cpus = 2 + rnd(3) as usize;
            let max_write = 1 + rnd(2_000);
            // Per CPU: (stamp, publish) in ring order; publish is monotone per ring.
            let mut rings: Vec<Vec<(u64, u64)>> = Vec::new();
            for _ in 0..cpus {
                let (mut t, mut p) = (rnd(1_000), 0u64);
                let mut ring = Vec::new();
                for _ in 0..400 {
                    t += rnd(40);
                    p = p.max(t + rnd(max_write));
                    ring.push((t, p));
                }
                rings.push(ring);
            }
            let mut s = Sorter::new();
            let mut pos = vec![0usize; cpus];
            let mut now = 0u64;
            let mut out = Vec::new();
            while pos.iter().zip(&rings).any(|(&i, r)| i < r.len()) {
                s.begin_round(now);
                for (cpu, ring) in rings.iter().enumerate() {
                    now += 1 + rnd(50);
                    while let Some(&(t, p)) = ring.get(pos[cpu]) {
                        if p > now {
                            break;
                        }
                        s.push(cpu as u32, (t, (cpu, t)));
                        pos[cpu] += 1;
                        now += rnd(3); // decoding costs time too
                    }
                }
                s.end_round(|x| out.push(x.0));
                // The poll wait: at least one write's length, so a round outlasts a write.
                now += max_write + rnd(3 * max_write);
            }
            s.flush(|x| out.push(x.0));
            assert_eq!(out.len(), cpus * 400);
            assert!(
                out.windows(2).all(|w| w[0] <= w[1]),
                "released out of time order (cpus {cpus}, max_write {max_write})"
            );
            assert_eq!(s.late(), 0, "cpus {cpus}, max_write {max_write}");
            total_released += out.len();
        }
        assert!(total_released >= 200 * 2 * 400);
    }

    /// A run queued at once is released as the same events pushed one by one would be:
    /// in order and after the queue's last (appended whole), out of order, or older
    /// than what is queued or already released (placed one by one, counted late).
    #[test]
    fn a_run_is_queued_as_its_events_pushed_one_by_one() {
        let rounds: [&[(u32, &[u64])]; 4] = [
            &[(0, &[10, 20, 30]), (1, &[15, 25])],
            // In order but older than source 0's last; then one out of order.
            &[(0, &[25, 40]), (1, &[50, 45, 60])],
            // Older than the released bound: late, either way.
            &[(0, &[5, 70]), (2, &[])],
            &[(1, &[80, 80, 190])],
        ];
        let starts = [100, 200, 300, 400];
        let replay = |bulk: bool| {
            let mut s = Sorter::new();
            let mut out = Vec::new();
            for (round, &now) in rounds.iter().zip(&starts) {
                s.begin_round(now);
                for &(src, times) in *round {
                    let run: Vec<(u64, u32)> = times.iter().map(|&t| (t, src)).collect();
                    if bulk {
                        s.push_run(src, &run);
                    } else {
                        run.iter().for_each(|&e| s.push(src, e));
                    }
                }
                s.end_round(|x| out.push(*x));
            }
            s.flush(|x| out.push(*x));
            (out, s.late(), s.max_held())
        };
        let (one_by_one, bulk) = (replay(false), replay(true));
        assert_eq!(bulk, one_by_one);
        assert_eq!(bulk.0.len(), 15);
        // 5 and 70 queued after what was older than 100 went out; the last run, in
        // order and appended whole, after what was older than 200 went out.
        assert_eq!(bulk.1, 5);
    }
}
