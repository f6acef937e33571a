//! The ends of I/Os (completions) that went missing, and which I/O still in flight lost
//! one: what the correlators that pair by command id share (nvme, nvmet, nvme-tcp).
//!
//! A command id is reused as soon as its command completes. So an I/O whose end the
//! kernel counted and never wrote stays in flight under its id, and the events of the
//! next command with that id whose start went missing too would land on it: under
//! sustained overflow, one `ok` row of two or more commands. The counts say that ends
//! went missing, and when ([`Windows`]); the command time of the pairings that were
//! whole says how long a command takes ([`Yardstick`], per controller). An I/O that
//! started before an end went missing and is still in flight past [`SURELY`] of that
//! measure is the one that lost it: the correlator cuts it (`dropped`, never paired).

use super::windows::Windows;
use super::yardstick::{Yardstick, SURELY};
use super::{DevMap, Gap};

/// Between scans for I/Os that lost their end, in event time.
const SCAN_EVERY_NS: u64 = 1_000_000;

/// Ends that went missing and are not yet pinned on an I/O, and per controller how
/// long its I/Os take.
#[derive(Debug, Clone, Default)]
pub struct LostEnds {
    missing: Windows,
    /// The latest an end went missing by, pinned or not (0: none).
    horizon: u64,
    /// Event time of the next scan.
    next_scan: u64,
    yards: DevMap<Yardstick>,
}

impl LostEnds {
    /// `gap` is of an end event.
    pub fn add(&mut self, gap: &Gap<'_>) {
        self.missing.add(gap.n, gap.after, gap.before);
        self.horizon = self.horizon.max(gap.before);
    }

    /// An end went missing and no I/O has been found for it yet: the hot paths test this
    /// before anything else.
    #[inline]
    pub fn unaccounted(&self) -> bool {
        !self.missing.is_empty()
    }

    /// Whether an end went missing after `start`: an I/O started then and never ended
    /// may have lost it (else the run ended, or its end was never traced).
    pub fn since(&self, start: u64) -> bool {
        start <= self.horizon
    }

    /// An I/O of controller `ctrl` that took `took` ns ended whole.
    #[inline]
    pub fn served(&mut self, ctrl: u32, took: u64) {
        self.yards.entry(ctrl).or_default().add(took);
    }

    /// Whether an I/O of controller `ctrl` started at `start` is, at `t`, one that lost
    /// an end still unaccounted: started before one went missing, and in flight past
    /// [`SURELY`]. Never before the controller's first whole I/O.
    pub fn lost(&self, ctrl: u32, start: u64, t: u64) -> bool {
        start <= self.missing.horizon()
            && (self.yards.get(ctrl)).is_some_and(|y| t.saturating_sub(start) > SURELY(y.value()))
    }

    /// An I/O started at `start` lost its end: one missing since then is no longer
    /// unaccounted (if any still is).
    pub fn pin(&mut self, start: u64) {
        self.missing.take(|w| w.before >= start);
    }

    /// An I/O started at `start` is given up without its end: whether an end went
    /// missing since ([`since`](Self::since)); then it is taken to have lost it, and one
    /// is pinned on it.
    pub fn claim(&mut self, start: u64) -> bool {
        let lost = self.since(start);
        if lost {
            self.pin(start);
        }
        lost
    }

    /// Whether to look for the I/Os that lost their end now: every millisecond of event
    /// time while an end is unaccounted.
    #[inline]
    pub fn scan_due(&mut self, t: u64) -> bool {
        if self.missing.is_empty() || t < self.next_scan {
            return false;
        }
        self.next_scan = t + SCAN_EVERY_NS;
        true
    }

    /// The I/Os to cut out of `candidates` (start, key) that [`lost`](Self::lost) their
    /// end at `t`: oldest first, one per end missing since its start; each is pinned.
    /// Then the ends no I/O can still be found for (every I/O started before them is
    /// past [`SURELY`] of the slowest controller) are given up; none before an I/O has
    /// ended whole, since until then none can be found (a ring that overflows from the
    /// start loses ends before the first pairing).
    pub fn scan<K>(&mut self, t: u64, mut candidates: Vec<(u64, K)>) -> Vec<K> {
        candidates.sort_unstable_by_key(|c| c.0);
        let mut cut = Vec::new();
        for (start, key) in candidates {
            // None left that went missing after it started (nor after a later one).
            if self.missing.is_empty() || self.missing.horizon() < start {
                break;
            }
            self.pin(start);
            cut.push(key);
        }
        if let Some(longest) = self.yards.values().map(Yardstick::value).max() {
            self.missing.give_up(t.saturating_sub(SURELY(longest)));
        }
        cut
    }

    /// The run is over: nothing is unaccounted any more.
    pub fn clear(&mut self) {
        self.missing = Windows::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gap(n: u64, after: u64, before: u64) -> Gap<'static> {
        Gap {
            event: "x:y",
            n,
            after,
            before,
        }
    }

    #[test]
    fn an_io_is_lost_only_past_surely_and_started_before_an_end_went_missing() {
        let mut l = LostEnds::default();
        assert!(!l.unaccounted());
        l.add(&gap(1, 1_000_000, 2_000_000));
        assert!(l.unaccounted() && l.since(2_000_000) && !l.since(2_000_001));
        // No whole I/O yet: nothing is taken for lost.
        assert!(!l.lost(7, 0, 100_000_000));
        l.served(7, 100_000);
        // SURELY(100 µs) = 200 µs.
        assert!(!l.lost(7, 1_500_000, 1_700_000));
        assert!(l.lost(7, 1_500_000, 1_700_001));
        assert!(!l.lost(7, 2_000_001, 9_000_000), "started after the gap");
        assert!(!l.lost(8, 1_500_000, 9_000_000), "another controller");
        l.pin(1_500_000);
        assert!(!l.unaccounted() && l.since(2_000_000));
    }

    #[test]
    fn a_scan_cuts_the_oldest_one_per_end_then_gives_up_what_none_can_explain() {
        let mut l = LostEnds::default();
        l.served(1, 100_000);
        l.add(&gap(1, 0, 1_000_000));
        l.add(&gap(1, 1_000_000, 2_000_000));
        assert!(l.scan_due(2_100_000) && !l.scan_due(2_200_000));
        // Three in flight from before both gaps: two ends, so the two oldest.
        let cut = l.scan(
            2_100_000,
            vec![(500_000, 'b'), (100_000, 'a'), (900_000, 'c')],
        );
        assert_eq!(cut, ['a', 'b']);
        assert!(!l.unaccounted());
        // An end no I/O was found for is given up once 200 µs past its window; none
        // before the first pairing.
        let mut fresh = LostEnds::default();
        fresh.add(&gap(1, 0, 1_000));
        fresh.scan(9_000_000, Vec::<(u64, ())>::new());
        assert!(fresh.unaccounted());
        l.add(&gap(1, 3_000_000, 4_000_000));
        assert!(l.scan(4_100_000, Vec::<(u64, ())>::new()).is_empty());
        assert!(l.unaccounted());
        l.scan(4_200_001, Vec::<(u64, ())>::new());
        assert!(!l.unaccounted() && l.since(4_000_000));
    }
}
