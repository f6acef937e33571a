//! Bios waiting for their command: the join the nvme and nvme-tcp profiles use to give
//! a driver command the time its I/O entered the block layer.
//!
//! The block events carry no request identity, only (dev, sector). A bio queued at a
//! sector waits here until a command for the same (dev, sector) is submitted, which
//! takes the oldest waiting bio that is not later than itself. Several bios to one
//! sector (a hot block) queue in arrival order and are taken in that order, and the
//! taker is told how many were waiting, so a pairing that could have gone another way
//! is known. An entry that never meets a command (a bio merged into another request, a
//! split bio's tail, an unsampled command) is not an I/O of its own: it only means an
//! empty block stage, and it is dropped with the oldest quarter when the table is full.

use super::inflight::{Inflight, Started};

/// What started the wait: a bio entering the block layer, or a request inserted into
/// the scheduler when bios are not traced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartKind {
    Bio,
    Insert,
}

#[derive(Debug, Clone, Copy)]
struct Waiting {
    t: u64,
    kind: StartKind,
    /// An insert already matched this bio: it is the same I/O, not a second one.
    inserted: bool,
}

impl Started for Waiting {
    fn started(&self) -> u64 {
        self.t
    }
}

pub struct BioJoin {
    waiting: Inflight<(u32, u64), Waiting>,
}

/// A bio's start as a command claims it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claimed {
    pub t: u64,
    /// Bios that were waiting at that (dev, sector), this one included.
    pub candidates: usize,
}

impl BioJoin {
    pub fn new(max: usize) -> BioJoin {
        BioJoin {
            waiting: Inflight::new(max),
        }
    }

    /// A block event that may start an I/O of (dev, sector). Flushes carry no sector
    /// range (and NVMe flushes no SLBA to join on): callers pass only ranged events.
    pub fn start(&mut self, t: u64, dev: u32, sector: u64, kind: StartKind) {
        let key = (dev, sector);
        if kind == StartKind::Insert {
            // The request of a bio already waiting: the bio is the earlier start.
            if let Some(w) = self
                .waiting
                .find_mut(&key, |w| w.kind == StartKind::Bio && !w.inserted)
            {
                w.inserted = true;
                return;
            }
        }
        let w = Waiting {
            t,
            kind,
            inserted: false,
        };
        self.waiting.push(key, w, &mut |_, _| {});
    }

    /// The oldest start at (dev, sector) not later than `not_after` (the command).
    pub fn claim(&mut self, dev: u32, sector: u64, not_after: u64) -> Option<Claimed> {
        let (w, candidates) = self
            .waiting
            .take_where(&(dev, sector), |w| w.t <= not_after)?;
        Some(Claimed { t: w.t, candidates })
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn clear(&mut self) {
        self.waiting.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bio_and_its_request_are_one_start() {
        let mut j = BioJoin::new(64);
        j.start(10, 1, 80, StartKind::Bio);
        j.start(12, 1, 80, StartKind::Insert);
        assert_eq!(
            j.claim(1, 80, 20),
            Some(Claimed {
                t: 10,
                candidates: 1
            })
        );
        assert_eq!(j.claim(1, 80, 20), None);
    }

    #[test]
    fn hot_sectors_pair_in_arrival_order_and_say_so() {
        let mut j = BioJoin::new(64);
        j.start(10, 1, 80, StartKind::Bio);
        j.start(11, 1, 80, StartKind::Bio);
        let first = j.claim(1, 80, 30).unwrap();
        assert_eq!((first.t, first.candidates), (10, 2));
        let second = j.claim(1, 80, 30).unwrap();
        assert_eq!((second.t, second.candidates), (11, 1));
    }

    #[test]
    fn a_start_after_the_command_is_not_its_own() {
        let mut j = BioJoin::new(64);
        j.start(50, 1, 8, StartKind::Bio);
        assert_eq!(j.claim(1, 8, 40), None);
        assert_eq!(j.len(), 1);
    }

    #[test]
    fn inserts_without_bios_are_starts() {
        let mut j = BioJoin::new(64);
        j.start(5, 2, 8, StartKind::Insert);
        assert_eq!(j.claim(2, 8, 9).map(|c| c.t), Some(5));
    }

    #[test]
    fn bounded() {
        let mut j = BioJoin::new(16);
        for i in 0..1000u64 {
            j.start(i, 1, i * 8, StartKind::Bio);
        }
        assert!(j.len() <= 16);
        // The newest survive.
        assert_eq!(j.claim(1, 999 * 8, 1000).map(|c| c.t), Some(999));
    }
}
