//! Stage 2 (perf), accounting: the kernel's own counts against the samples that arrived.
//! Pure (no I/O): it is fed [`Tally`] values by the live loop and says which samples
//! are missing, per event and CPU, and since when. It must not read rings or decode.
//!
//! # Why a confirmation
//! A tally made while tracing runs compares a count read at `at` with the samples
//! stamped no later than `at`. A sample the kernel counted just before the read but
//! stamped just after it (an interrupt between the two, a vCPU stall) looks missing
//! for that one tally. Samples truly missing never come back, so the true number
//! missing up to `at` of tally k is at most both estimate k and estimate k+1: only
//! `min(k, k+1)` is reported, dated `at` of tally k. At the end of a run, after the
//! events are disabled and the rings drained, the counts are final and the estimate
//! exact.

use super::Tally;

/// Samples of one event that did not arrive, all stamped after `after` (when the
/// counts last showed none newly missing) and no later than `before`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Missing {
    /// Index into `PerfGroup::type_names`.
    pub event: usize,
    pub cpu: u32,
    pub n: u64,
    pub after: u64,
    pub before: u64,
}

impl Missing {
    /// As the correlator is told it, the event named.
    pub fn gap<'a>(&self, names: &'a [String]) -> crate::correlate::Gap<'a> {
        crate::correlate::Gap {
            event: names.get(self.event).map_or("", String::as_str),
            n: self.n,
            after: self.after,
            before: self.before,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    /// The previous estimate and when it was made.
    prev: Option<(u64, u64)>,
    /// Missing samples reported so far.
    reported: u64,
    /// The latest time up to which nothing more than `reported` went missing.
    clean: u64,
    /// The latest `PERF_FORMAT_LOST` count.
    lost: Option<u64>,
}

/// Missing samples per CPU and event, reported once each.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// By (CPU, event): a large host has thousands, looked up at every tally.
    cells: std::collections::BTreeMap<(u32, usize), Cell>,
}

/// Per CPU: samples lost to a full ring, and samples dropped with no trace in the ring.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Losses {
    pub lost: Vec<(u32, u64)>,
    pub dropped: Vec<(u32, u64)>,
}

impl Ledger {
    pub fn new() -> Ledger {
        Ledger::default()
    }

    /// Takes the tallies of one settled snapshot; returns what newly went missing, and
    /// the time up to which every CPU's missing samples are now known (`None` before a
    /// second tally confirms the first). `exact`: the events are disabled and every
    /// sample written has been drained.
    pub fn update(&mut self, tallies: &[Tally], exact: bool) -> (Vec<Missing>, Option<u64>) {
        let mut out = Vec::new();
        // The earliest over every CPU and event; unknown while any is unconfirmed.
        let mut known = (!tallies.is_empty()).then_some(u64::MAX);
        for t in tallies {
            let c = self.cells.entry((t.cpu, t.event)).or_default();
            let now = t.missing();
            c.lost = t.lost;
            let (confirmed, before) = match (exact, c.prev) {
                (true, _) => (now, t.at),
                (false, Some((prev, at))) => (prev.min(now), at),
                (false, None) => (0, t.at),
            };
            let upto = if exact {
                Some(t.at)
            } else {
                c.prev.map(|(_, at)| at)
            };
            known = known.zip(upto).map(|(k, u)| k.min(u));
            c.prev = Some((now, t.at));
            if confirmed > c.reported {
                out.push(Missing {
                    event: t.event,
                    cpu: t.cpu,
                    n: confirmed - c.reported,
                    after: c.clean,
                    before,
                });
                c.reported = confirmed;
            }
            if upto.is_some() {
                c.clean = before;
            }
        }
        (out, known)
    }

    /// Samples reported missing so far, over every CPU and event.
    pub fn missing(&self) -> u64 {
        self.cells.values().map(|c| c.reported).sum()
    }

    /// Lost and dropped per CPU. `lost_records` are the `PERF_RECORD_LOST` totals per
    /// CPU; with `PERF_FORMAT_LOST` the kernel's own lost count is used when larger (a
    /// ring that overflowed at the very end never gets its LOST record). What is
    /// missing beyond the lost samples was dropped.
    pub fn losses(&self, lost_records: &[(u32, u64)]) -> Losses {
        let mut l = Losses::default();
        for &(cpu, records) in lost_records {
            let mine = self
                .cells
                .range((cpu, 0)..=(cpu, usize::MAX))
                .map(|(_, c)| c);
            let missing: u64 = mine.clone().map(|c| c.reported).sum();
            let counted_lost: u64 = mine.map(|c| c.lost.unwrap_or(0)).sum();
            let lost = records.max(counted_lost);
            l.lost.push((cpu, lost));
            l.dropped.push((cpu, missing.saturating_sub(lost)));
        }
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(cpu: u32, at: u64, counted: u64, received: u64) -> Tally {
        Tally {
            cpu,
            event: 1,
            at,
            counted,
            received,
            lost: Some(0),
        }
    }

    #[test]
    fn a_transient_shortfall_is_not_reported_and_a_real_one_is_once() {
        let mut l = Ledger::new();
        // First tally: nothing to confirm against yet.
        assert_eq!(l.update(&[tally(0, 10, 100, 99)], false), (vec![], None));
        // The sample counted before the read arrived stamped after it: 0 missing now.
        assert_eq!(
            l.update(&[tally(0, 20, 200, 200)], false),
            (vec![], Some(10))
        );
        // Two samples vanish and stay missing.
        assert!(l.update(&[tally(0, 30, 300, 298)], false).0.is_empty());
        let (m, known) = l.update(&[tally(0, 40, 400, 398)], false);
        assert_eq!(known, Some(30));
        assert_eq!(
            m,
            vec![Missing {
                event: 1,
                cpu: 0,
                n: 2,
                after: 20,
                before: 30
            }]
        );
        // Reported once, not again.
        assert!(l.update(&[tally(0, 50, 500, 498)], false).0.is_empty());
        assert_eq!(l.missing(), 2);
        // The final, exact tally adds what the last interval lost.
        let (m, known) = l.update(&[tally(0, 60, 600, 597)], true);
        assert_eq!(known, Some(60));
        assert_eq!(m[0].n, 1);
        assert_eq!(l.missing(), 3);
    }

    #[test]
    fn lost_and_dropped_are_told_apart_per_cpu() {
        let mut l = Ledger::new();
        let mut t = tally(1, 10, 100, 90);
        t.lost = Some(4);
        l.update(&[t, tally(0, 10, 50, 50)], true);
        let losses = l.losses(&[(0, 0), (1, 3)]);
        // The kernel's count (4) beats the LOST records (3: one never came).
        assert_eq!(losses.lost, vec![(0, 0), (1, 4)]);
        assert_eq!(losses.dropped, vec![(0, 0), (1, 6)]);
        // Without PERF_FORMAT_LOST the LOST records are all there is.
        let mut l = Ledger::new();
        let mut t = tally(1, 10, 100, 90);
        t.lost = None;
        l.update(&[t], true);
        assert_eq!(l.losses(&[(1, 3)]).dropped, vec![(1, 7)]);
    }
}
