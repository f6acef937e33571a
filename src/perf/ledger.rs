//! Stage 2 (perf), accounting: the kernel's own counts against the samples that arrived.
//! Pure (no I/O): it is fed [`Tally`] values by the live loop and says which samples
//! are missing, per event and CPU, and since when. It must not read rings or decode.
//!
//! # Why a confirmation
//! A tally made while tracing runs compares a count, read between the clock readings
//! `at` and `read_by`, with the samples stamped by then. Samples stamped during the
//! read blur it (see [`Tally`]): [`Tally::missing`] may fall short of what went
//! missing by as many, [`Tally::missing_at_most`] may exceed it. A sample counted just
//! before the read but stamped after it (an interrupt between the two, a vCPU stall)
//! also looks missing for that one tally. Samples truly missing never come back, so
//! what is reported is `min(k, k+1)` of the short estimates of tallies k and k+1,
//! dated from the last clean moment to `read_by` of tally k: never a sample that
//! arrived.
//!
//! # Clean up to when
//! The live loop holds events back until every sample missing before them has been
//! reported: a correlator told of a drop after it saw what followed puts that I/O's
//! events together wrong (a block device's queue depth a dozen too deep on a hundred
//! rows, when a short estimate hid a drop for a tally). So a (CPU, event) is clean up
//! to a tally's `at` only when that tally's long estimate is no more than what was
//! reported: then nothing missing by then is unreported. While the reads keep
//! catching samples in flight, it stays unclean for at most [`DOUBT_NS`] of sample
//! time, then is taken as clean up to the previous tally; but not while the latest
//! short estimate is above what was reported. That is a drop the previous tally's
//! blur hid (or a sample counted before the read and stamped after it, which the next
//! tally clears): taken as clean then, the drop would be reported a tally later,
//! dated after events that followed it and had gone out (a block device's depth one
//! too deep for tens of ms, seen once in a 20-run soak). So the fallback waits a tally
//! more, and the next one confirms the drop from the old clean moment or clears it.
//!
//! At the end of a run, after the events are disabled and the rings drained, the
//! counts are final and the estimates exact.

use super::Tally;

/// How long a (CPU, event) can stay unclean while the count reads keep catching samples
/// in flight, in sample-clock ns: events are held back that long at most.
pub const DOUBT_NS: u64 = 50_000_000;

/// Samples of one event that did not arrive, all after `after` (when the counts last
/// showed none unreported) and counted no later than `before`.
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

/// One tally's short estimate of the samples missing, and its clock readings.
#[derive(Debug, Clone, Copy)]
struct Estimate {
    missing: u64,
    at: u64,
    read_by: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Cell {
    /// The previous tally's.
    prev: Option<Estimate>,
    /// Missing samples reported so far.
    reported: u64,
    /// The first tally's `at`: a cell never clean has been in doubt since then.
    first: u64,
    /// The latest time up to which nothing more than `reported` went missing.
    clean: u64,
    /// The latest `PERF_FORMAT_LOST` count.
    lost: Option<u64>,
    /// The latest count of the event: final once the events are disabled.
    counted: u64,
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
    /// the time up to which every CPU's missing samples are now reported (see "Clean
    /// up to when"). `exact`: the events are disabled and every sample written has been
    /// drained.
    pub fn update(&mut self, tallies: &[Tally], exact: bool) -> (Vec<Missing>, Option<u64>) {
        let mut out = Vec::new();
        // The earliest over every CPU and event.
        let mut known = (!tallies.is_empty()).then_some(u64::MAX);
        for t in tallies {
            let c = self.cells.entry((t.cpu, t.event)).or_default();
            if c.prev.is_none() {
                c.first = t.at;
            }
            let now = t.missing();
            c.lost = t.lost;
            c.counted = t.counted;
            let (confirmed, before) = match (exact, c.prev) {
                (true, _) => (now, t.read_by),
                (false, Some(p)) => (p.missing.min(now), p.read_by),
                (false, None) => (0, t.read_by),
            };
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
            if exact || t.missing_at_most() <= c.reported {
                c.clean = c.clean.max(t.at);
            } else if let Some(p) = c.prev.filter(|p| {
                // Not past a drop this tally shows and the previous one hid: the next
                // tally confirms it (dated from the old clean moment) or clears it.
                now <= c.reported && p.at > c.clean.max(c.first).saturating_add(DOUBT_NS)
            }) {
                c.clean = p.at;
            }
            c.prev = Some(Estimate {
                missing: now,
                at: t.at,
                read_by: t.read_by,
            });
            known = known.map(|k| k.min(c.clean));
        }
        (out, known)
    }

    /// Samples reported missing so far, over every CPU and event.
    pub fn missing(&self) -> u64 {
        self.cells.values().map(|c| c.reported).sum()
    }

    /// The kernel's latest count of `event` (an index into `PerfGroup::type_names`)
    /// over every CPU, whether its samples arrived or not.
    pub fn counted(&self, event: usize) -> u64 {
        self.cells
            .iter()
            .filter(|((_, e), _)| *e == event)
            .map(|(_, c)| c.counted)
            .sum()
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
            read_by: at + 1,
            counted,
            received,
            received_at: received,
            lost: Some(0),
        }
    }

    /// A tally whose read caught `blurred` samples stamped while the count was read
    /// (counted or not, `received` has them, `received_at` not).
    fn blurred(at: u64, counted: u64, received: u64, blurred: u64) -> Tally {
        Tally {
            received_at: received - blurred,
            ..tally(0, at, counted, received)
        }
    }

    #[test]
    fn a_transient_shortfall_is_not_reported_and_a_real_one_is_once() {
        let mut l = Ledger::new();
        // First tally: nothing to confirm against yet, and one sample unaccounted.
        assert_eq!(l.update(&[tally(0, 10, 100, 99)], false), (vec![], Some(0)));
        // The sample counted before the read arrived stamped after it: 0 missing now.
        assert_eq!(
            l.update(&[tally(0, 20, 200, 200)], false),
            (vec![], Some(20))
        );
        // Two samples vanish and stay missing: held from the first tally that shows them.
        assert_eq!(
            l.update(&[tally(0, 30, 300, 298)], false),
            (vec![], Some(20))
        );
        let (m, known) = l.update(&[tally(0, 40, 400, 398)], false);
        assert_eq!(known, Some(40));
        assert_eq!(
            m,
            vec![Missing {
                event: 1,
                cpu: 0,
                n: 2,
                after: 20,
                before: 31
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

    /// The flake this ordering fixes: a sample counted after the read but stamped during
    /// it made the short estimate hide a drop, and the events after the drop went out
    /// before the correlator heard of it. The drop must be dated from before that tally,
    /// and nothing after it released until it is reported.
    #[test]
    fn a_drop_hidden_by_a_sample_stamped_during_the_read_holds_the_events_after_it() {
        let mut l = Ledger::new();
        assert_eq!(
            l.update(&[tally(0, 10, 100, 100)], false),
            (vec![], Some(10))
        );
        // One dropped (counted, never arrives); one counted after the read, stamped in it.
        assert_eq!(
            l.update(&[blurred(20, 200, 200, 1)], false),
            (vec![], Some(10))
        );
        assert_eq!(
            l.update(&[tally(0, 30, 300, 299)], false),
            (vec![], Some(10))
        );
        let (m, known) = l.update(&[tally(0, 40, 400, 399)], false);
        assert_eq!(
            m,
            vec![Missing {
                event: 1,
                cpu: 0,
                n: 1,
                after: 10,
                before: 31
            }]
        );
        assert_eq!(known, Some(40));
    }

    /// A sample stamped during the read that the count had: never reported missing,
    /// and the events are held only until a tally is clear of it.
    #[test]
    fn a_sample_stamped_during_the_read_is_no_drop() {
        let mut l = Ledger::new();
        l.update(&[tally(0, 10, 100, 100)], false);
        assert_eq!(
            l.update(&[blurred(20, 201, 201, 1)], false),
            (vec![], Some(10))
        );
        assert_eq!(
            l.update(&[tally(0, 30, 300, 300)], false),
            (vec![], Some(30))
        );
        assert_eq!(l.missing(), 0);
    }

    /// Reads that catch a sample in flight every time (a fast event) hold the events
    /// back no longer than DOUBT_NS, and never make a drop of it.
    #[test]
    fn a_count_blurred_at_every_read_holds_events_back_for_a_bounded_time() {
        let mut l = Ledger::new();
        l.update(&[tally(0, 10, 100, 100)], false);
        let step = DOUBT_NS / 4;
        let mut known = Some(10);
        for k in 1..=6u64 {
            let at = 10 + k * step;
            let (m, now) = l.update(&[blurred(at, 100 * k + 101, 100 * k + 101, 1)], false);
            assert!(m.is_empty());
            known = now;
            if k <= 5 {
                assert_eq!(known, Some(10), "tally {k}");
            }
        }
        // Past DOUBT_NS: clean up to the tally before.
        assert_eq!(known, Some(10 + 5 * step));
        assert_eq!(l.missing(), 0);
        // From the first tally on, never clean yet: in doubt since that tally, not
        // since the clock's zero.
        let mut l = Ledger::new();
        let at = 5_000_000_000;
        l.update(&[blurred(at, 101, 101, 1)], false);
        let (_, known) = l.update(&[blurred(at + step, 202, 202, 1)], false);
        assert_eq!(known, Some(0));
    }

    /// The soak's qd flake, as the ledger sees it: a cell in doubt for DOUBT_NS when a
    /// burst of drops comes, and the previous tally's blur hid one of them. The fallback
    /// must not take the cell as clean past that drop: it waits a tally, and the drop is
    /// reported dated from the last clean moment before anything after it goes out.
    #[test]
    fn the_doubt_bound_does_not_pass_a_drop_the_previous_tally_hid() {
        let mut l = Ledger::new();
        l.update(&[tally(0, 10, 100, 100)], false);
        let step = DOUBT_NS / 4;
        let at = |k: u64| 10 + k * step;
        // Blurred reads of a fast event: in doubt, nothing missing.
        for k in 1..=4u64 {
            let (m, known) = l.update(&[blurred(at(k), 100 * k + 101, 100 * k + 101, 1)], false);
            assert!(m.is_empty());
            assert_eq!(known, Some(10), "tally {k}");
        }
        // 16 dropped: the blur of tally 5 hides one of them (15 short), tally 6 shows 16.
        // 15 are confirmed at tally 6 (min of the two).
        assert!(l.update(&[blurred(at(5), 616, 601, 1)], false).0.is_empty());
        let (m, known) = l.update(&[blurred(at(6), 717, 701, 1)], false);
        assert_eq!(
            m.iter().map(|m| (m.n, m.after)).collect::<Vec<_>>(),
            [(15, 10)]
        );
        // Past DOUBT_NS, but tally 6 shows one more than reported: still held at 10.
        assert_eq!(known, Some(10));
        // Tally 7 confirms the 16th, dated from 10: the events after it are still held.
        let (m, known) = l.update(&[blurred(at(7), 818, 802, 1)], false);
        assert_eq!(
            m.iter().map(|m| (m.n, m.after)).collect::<Vec<_>>(),
            [(1, 10)]
        );
        assert_eq!(l.missing(), 16);
        // Then the bound applies again: clean up to the tally before.
        assert_eq!(known, Some(at(6)));
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

    /// An event's count is its latest over every CPU, samples arrived or not; other
    /// events' are not in it.
    #[test]
    fn an_events_count_is_its_latest_summed_over_cpus() {
        let mut l = Ledger::new();
        let other = Tally {
            event: 2,
            ..tally(0, 10, 1_000, 1_000)
        };
        l.update(&[tally(0, 10, 100, 90), tally(1, 10, 50, 50), other], false);
        assert_eq!(l.counted(1), 150);
        l.update(&[tally(0, 20, 130, 100), tally(1, 20, 70, 70)], true);
        assert_eq!((l.counted(1), l.counted(2), l.counted(3)), (200, 1_000, 0));
    }
}
