//! The block profile's correlator: `block_rq_insert` → `block_rq_issue` →
//! `block_rq_complete` (plus `block_rq_requeue` when present), keyed by
//! (device, sector).
//!
//! # Pairing rule
//! The block tracepoints carry no request identity, so two requests to the same
//! (device, sector) in flight at once (a hot block: journals, metadata, a database
//! page) cannot be told apart by their events. Every request is kept, in arrival
//! order per key:
//! - an insert starts a new request, unless a request of that key was requeued and
//!   waits for its re-insert;
//! - an issue goes to the oldest request of the key not yet issued (inserted, or
//!   requeued), else starts a new one (issued directly, no scheduler);
//! - a requeue sends the oldest issued request of the key back to "not issued";
//! - a merge (`block_rq_merge`: the scheduler folded a queued request into another)
//!   drops the oldest not-issued request of the key: its sectors complete with the
//!   request it joined; a bio merged into a queued request (`block_bio_backmerge`,
//!   `block_bio_frontmerge`) has no request of its own, and a front merge moves the
//!   request it joined to the bio's sector. Both are counted in
//!   [`Counters::merged`], so rows + merged = the I/Os submitted;
//! - a completion goes to the request of the key issued first (FIFO by issue) among
//!   those of its size (else among all): the device may complete them in another
//!   order, and then the two latencies are swapped, never lost or invented. How many requests shared the key at that moment
//!   is the row's `candidates` (1: the pairing was certain), and pairings that were
//!   a choice are counted ([`Counters::ambiguous`]).
//!
//! `qd` is the device's queue depth as the request was issued: the requests issued and
//! not yet completed on that device, itself included.
//!
//! A partial completion (fewer sectors than issued) moves the request on to the next
//! sector, where the rest completes.

use super::events::{dev_major, dev_minor, BlockEvent, BlockKind, Op};
use super::record::BlockRecord;
use crate::correlate::inflight::{Inflight, Started, DEFAULT_MAX};
use crate::correlate::{Correlator, Counters, FxMap, Status};
use crate::decode::Event;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Clone, Copy)]
struct Pending {
    /// Time of the first event seen for the request: the start of the I/O.
    first: u64,
    insert: Option<u64>,
    issue: Option<u64>,
    /// Given back by the driver; its next insert is not a new request.
    requeued: bool,
    /// Sector where the request started (the key moves on partial completions).
    sector: u64,
    op: Op,
    bytes: u64,
    /// Sectors not completed yet.
    remaining: u32,
    /// Device queue depth at the (last) issue, itself included.
    qd: Option<u32>,
}

impl Started for Pending {
    fn started(&self) -> u64 {
        self.first
    }
}

/// Options of the block correlator.
#[derive(Debug, Clone)]
pub struct BlockConfig {
    /// Only these devices (kernel dev_t); empty = all.
    pub devices: Vec<u32>,
    /// Names for dev_t values, for the `device` column.
    pub names: HashMap<u32, String>,
    /// In-flight requests kept at most; beyond it the oldest are given up.
    pub max_in_flight: usize,
}

impl Default for BlockConfig {
    fn default() -> Self {
        BlockConfig {
            devices: Vec::new(),
            names: HashMap::new(),
            max_in_flight: DEFAULT_MAX,
        }
    }
}

type Key = (u32, u64);

pub struct BlockCorrelator {
    cfg: BlockConfig,
    pending: Inflight<Key, Pending>,
    /// Issued, not completed requests per device.
    issued: FxMap<u32, u32>,
    names: FxMap<u32, Arc<str>>,
    counters: Counters,
}

impl BlockCorrelator {
    pub fn new(cfg: BlockConfig) -> BlockCorrelator {
        let names = cfg
            .names
            .iter()
            .map(|(d, n)| (*d, Arc::from(n.as_str())))
            .collect();
        BlockCorrelator {
            pending: Inflight::new(cfg.max_in_flight),
            issued: FxMap::default(),
            cfg,
            names,
            counters: Counters::default(),
        }
    }

    fn name(&mut self, dev: u32) -> Arc<str> {
        self.names
            .entry(dev)
            .or_insert_with(|| format!("{}:{}", dev_major(dev), dev_minor(dev)).into())
            .clone()
    }

    /// A request of `dev` left the device (completed, requeued, given up).
    fn left_device(&mut self, dev: u32, p: &Pending) {
        if p.issue.is_some() {
            if let Some(n) = self.issued.get_mut(&dev) {
                *n = n.saturating_sub(1);
            }
        }
    }

    fn record(
        &mut self,
        dev: u32,
        p: &Pending,
        done: Option<(u64, i32)>,
        candidates: usize,
    ) -> BlockRecord {
        self.left_device(dev, p);
        let start = p.first;
        let (d2c, q2c, error, status) = match done {
            Some((t, err)) => (
                p.issue.map(|i| t.saturating_sub(i)),
                Some(t.saturating_sub(start)),
                err,
                if err == 0 { Status::Ok } else { Status::Error },
            ),
            None => (None, None, 0, Status::Incomplete),
        };
        BlockRecord {
            start_ns: start,
            dev,
            device: self.name(dev),
            op: p.op,
            sector: p.sector,
            bytes: p.bytes,
            q2d_ns: match (p.insert, p.issue) {
                (Some(q), Some(d)) => Some(d.saturating_sub(q)),
                _ => None,
            },
            d2c_ns: d2c,
            q2c_ns: q2c,
            error,
            qd: p.qd,
            candidates: done.map(|_| candidates as u32),
            status,
        }
    }

    fn on_block(&mut self, t: u64, e: &BlockEvent, out: &mut dyn FnMut(BlockRecord)) {
        if !self.cfg.devices.is_empty() && !self.cfg.devices.contains(&e.dev) {
            return;
        }
        let key = (e.dev, e.sector);
        let fresh = |insert: Option<u64>, issue: Option<u64>| Pending {
            first: t,
            insert,
            issue,
            requeued: false,
            sector: e.sector,
            op: e.op,
            bytes: e.bytes as u64,
            remaining: e.nr_sector,
            qd: None,
        };
        match e.kind {
            // Bios are not requests; this profile does not open the event.
            BlockKind::BioQueue => return,
            BlockKind::Insert => {
                if let Some(p) = self
                    .pending
                    .find_mut(&key, |p| p.requeued && p.issue.is_none())
                {
                    // The re-insert of a requeued request: keep its first start.
                    p.insert = Some(p.insert.map_or(t, |q| q.min(t)));
                } else {
                    self.add(key, fresh(Some(t), None), out);
                }
            }
            BlockKind::Issue => {
                let depth = self.issued.entry(e.dev).or_insert(0);
                *depth += 1;
                let qd = Some(*depth);
                if let Some(p) = self.pending.find_mut(&key, |p| p.issue.is_none()) {
                    p.issue = Some(t);
                    p.qd = qd;
                    // The issue carries the final size (merges happen before dispatch).
                    p.bytes = e.bytes as u64;
                    p.remaining = e.nr_sector;
                    p.op = e.op;
                } else {
                    let mut p = fresh(None, Some(t));
                    p.qd = qd;
                    self.add(key, p, out);
                }
            }
            BlockKind::Requeue => {
                if let Some(p) = self.pending.find_mut(&key, |p| p.issue.is_some()) {
                    p.issue = None;
                    p.requeued = true;
                    self.counters.requeued += 1;
                    if let Some(n) = self.issued.get_mut(&e.dev) {
                        *n = n.saturating_sub(1);
                    }
                }
            }
            BlockKind::Merge => {
                // A request merged at insert time was never inserted: nothing to drop.
                self.pending.take_where(&key, |p| p.issue.is_none());
                self.counters.merged += 1;
            }
            BlockKind::BioBackMerge => self.counters.merged += 1,
            BlockKind::BioFrontMerge => {
                self.counters.merged += 1;
                let old = (e.dev, e.sector + e.nr_sector as u64);
                if let Some((mut p, _)) = self.pending.take_where(&old, |p| p.issue.is_none()) {
                    p.sector = e.sector;
                    p.bytes += (e.nr_sector as u64) << 9;
                    p.remaining += e.nr_sector;
                    self.add(key, p, out);
                }
            }
            BlockKind::Complete => {
                let first_issue = self.first_issued(&key, e.nr_sector);
                let taken = match first_issue {
                    Some(i) => self.pending.take_where(&key, |p| p.issue == Some(i)),
                    // Completed without a traced issue (tracing began mid-way).
                    None => self.pending.take(&key),
                };
                let Some((mut p, held)) = taken else {
                    self.counters.unmatched += 1;
                    return;
                };
                if held > 1 {
                    self.counters.ambiguous += 1;
                }
                if e.nr_sector > 0 && e.nr_sector < p.remaining && e.error == 0 {
                    // Partial completion: the rest completes later at the next sector.
                    self.counters.partial += 1;
                    p.remaining -= e.nr_sector;
                    self.add((e.dev, e.sector + e.nr_sector as u64), p, out);
                    return;
                }
                let r = self.record(e.dev, &p, Some((t, e.error)), held);
                out(r);
            }
        }
        self.counters.in_flight = self.pending.len() as u64;
    }

    /// The earliest issue time among the issued requests of `key`.
    /// Prefers a request of the completion's size: requests at one sector can differ
    /// in size (one grew by merges), and a completion of the wrong size would split a
    /// request that is whole.
    fn first_issued(&mut self, key: &Key, nr_sector: u32) -> Option<u64> {
        let (mut first, mut first_sized): (Option<u64>, Option<u64>) = (None, None);
        self.pending.find_mut(key, |p| {
            if let Some(i) = p.issue {
                first = Some(first.map_or(i, |f| f.min(i)));
                if p.remaining == nr_sector {
                    first_sized = Some(first_sized.map_or(i, |f| f.min(i)));
                }
            }
            false
        });
        first_sized.or(first)
    }

    fn add(&mut self, key: Key, p: Pending, out: &mut dyn FnMut(BlockRecord)) {
        let mut old = Vec::new();
        self.pending.push(key, p, &mut |k, p| old.push((k, p)));
        for (k, p) in old {
            self.counters.incomplete += 1;
            let r = self.record(k.0, &p, None, 0);
            out(r);
        }
    }
}

impl Correlator for BlockCorrelator {
    type Event = BlockEvent;
    type Record = BlockRecord;

    fn on_event(&mut self, ev: &Event<BlockEvent>, out: &mut dyn FnMut(BlockRecord)) {
        self.on_block(ev.time, &ev.kind, out);
    }

    fn finish(&mut self, out: &mut dyn FnMut(BlockRecord)) {
        let mut left = Vec::new();
        self.pending.drain_all(&mut |k, p| left.push((k, p)));
        for (k, p) in left {
            self.counters.incomplete += 1;
            let r = self.record(k.0, &p, None, 0);
            out(r);
        }
        self.counters.in_flight = 0;
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::block::events::kernel_dev;
    use crate::record::{IoRecord, Value};

    type Ev = Event<BlockEvent>;

    fn ev(time: u64, kind: BlockKind, sector: u64, nr: u32, op: Op) -> Ev {
        ev_err(time, kind, sector, nr, op, 0)
    }

    fn ev_err(time: u64, kind: BlockKind, sector: u64, nr: u32, op: Op, error: i32) -> Ev {
        Event {
            time,
            cpu: 0,
            kind: BlockEvent {
                kind,
                dev: kernel_dev(7, 0),
                sector,
                nr_sector: nr,
                bytes: if kind == BlockKind::Complete {
                    0
                } else {
                    nr << 9
                },
                op,
                error,
            },
        }
    }

    fn run(events: &[Ev], max: usize) -> (Vec<BlockRecord>, Counters) {
        let mut c = BlockCorrelator::new(BlockConfig {
            max_in_flight: max,
            ..Default::default()
        });
        let mut out = Vec::new();
        for e in events {
            c.on_event(e, &mut |r| out.push(r));
        }
        c.finish(&mut |r| out.push(r));
        (out, c.counters())
    }

    #[test]
    fn insert_issue_complete_gives_all_stages() {
        use BlockKind::*;
        let (r, c) = run(
            &[
                ev(100, Insert, 8, 8, Op::Write),
                ev(150, Issue, 8, 8, Op::Write),
                ev(400, Complete, 8, 8, Op::Write),
            ],
            16,
        );
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert_eq!(
            (r.start_ns, r.sector, r.bytes, r.op),
            (100, 8, 4096, Op::Write)
        );
        assert_eq!(
            (r.q2d_ns, r.d2c_ns, r.q2c_ns),
            (Some(50), Some(250), Some(300))
        );
        assert_eq!(r.status, Status::Ok);
        assert_eq!(&*r.device, "7:0");
        assert_eq!(c, Counters::default());
    }

    #[test]
    fn direct_issue_has_no_q2d() {
        use BlockKind::*;
        let (r, _) = run(
            &[
                ev(10, Issue, 0, 1, Op::Read),
                ev(30, Complete, 0, 1, Op::Read),
            ],
            16,
        );
        assert_eq!(
            (r[0].q2d_ns, r[0].d2c_ns, r[0].q2c_ns),
            (None, Some(20), Some(20))
        );
        let q2d = r[0].schema().position("q2d_ns").unwrap();
        assert_eq!(
            r[0].value(q2d),
            Value::Empty,
            "q2d must be an empty cell, not 0"
        );
    }

    #[test]
    fn unmatched_partial_requeue_and_in_flight_are_counted() {
        use BlockKind::*;
        let (r, c) = run(
            &[
                ev(5, Complete, 999, 8, Op::Read), // start never seen
                ev(10, Issue, 100, 16, Op::Read),
                ev(20, Complete, 100, 8, Op::Read), // first half
                ev(30, Complete, 108, 8, Op::Read), // second half
                ev(40, Issue, 200, 8, Op::Write),
                ev(44, Requeue, 200, 8, Op::Write),
                ev(45, Insert, 200, 8, Op::Write), // requeued
                ev(50, Issue, 200, 8, Op::Write),
                ev(70, Complete, 200, 8, Op::Write),
                ev(80, Issue, 300, 8, Op::Write), // never completes
            ],
            16,
        );
        assert_eq!(c.unmatched, 1);
        assert_eq!(c.partial, 1);
        assert_eq!(c.requeued, 1);
        assert_eq!(c.incomplete, 1);
        assert_eq!(r.len(), 3);
        assert_eq!(
            (r[0].sector, r[0].bytes, r[0].d2c_ns),
            (100, 8192, Some(20))
        );
        assert_eq!(
            (r[1].start_ns, r[1].d2c_ns, r[1].q2c_ns),
            (40, Some(20), Some(30))
        );
        assert_eq!(
            (r[2].status, r[2].d2c_ns, r[2].sector),
            (Status::Incomplete, None, 300)
        );
    }

    #[test]
    fn memory_is_bounded_by_evicting_the_oldest() {
        use BlockKind::*;
        let events: Vec<Ev> = (0..100).map(|i| ev(i, Issue, i * 8, 8, Op::Read)).collect();
        let mut c = BlockCorrelator::new(BlockConfig {
            max_in_flight: 10,
            ..Default::default()
        });
        let mut given_up = Vec::new();
        for e in &events {
            c.on_event(e, &mut |r| given_up.push(r));
            assert!(c.pending.len() <= 10);
        }
        assert!(!given_up.is_empty());
        assert!(given_up.iter().all(|r| r.status == Status::Incomplete));
        // The oldest go first.
        assert_eq!(given_up[0].start_ns, 0);
        assert_eq!(c.counters().incomplete as usize, given_up.len());
    }

    #[test]
    fn errors_are_reported_not_hidden() {
        use BlockKind::*;
        let done = ev_err(30, Complete, 0, 8, Op::Read, -5);
        let (r, _) = run(&[ev(10, Issue, 0, 8, Op::Read), done], 16);
        assert_eq!((r[0].status, r[0].error), (Status::Error, -5));
    }

    #[test]
    fn other_devices_are_filtered() {
        use BlockKind::*;
        let mut c = BlockCorrelator::new(BlockConfig {
            devices: vec![kernel_dev(8, 0)],
            ..Default::default()
        });
        let mut out = Vec::new();
        for e in [
            ev(10, Issue, 0, 8, Op::Read),
            ev(30, Complete, 0, 8, Op::Read),
        ] {
            c.on_event(&e, &mut |r| out.push(r));
        }
        assert!(out.is_empty());
        assert_eq!(c.counters(), Counters::default());
    }
}
