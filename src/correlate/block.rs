//! The block profile: `block_rq_insert` → `block_rq_issue` → `block_rq_complete`,
//! keyed by (device, sector).

use super::{Cell, Correlator, Counters, EventReq, FxMap, IoRecord, ProfileInfo, Status};
use crate::decode::block::{dev_major, dev_minor, BlockEvent, BlockKind, Op};
use crate::decode::{Event, EventKind};
use std::collections::HashMap;

pub static INFO: ProfileInfo = ProfileInfo {
    name: "block",
    about: "block layer requests on any disk: queue (insert) → dispatch (issue) → complete",
    events: &[
        EventReq {
            system: "block",
            event: "block_rq_insert",
            required: true,
            hint:
                "CONFIG_BLK_DEV_IO_TRACE / CONFIG_EVENT_TRACING (every distribution kernel has it)",
        },
        EventReq {
            system: "block",
            event: "block_rq_issue",
            required: true,
            hint: "CONFIG_EVENT_TRACING (every distribution kernel has it)",
        },
        EventReq {
            system: "block",
            event: "block_rq_complete",
            required: true,
            hint: "CONFIG_EVENT_TRACING (every distribution kernel has it)",
        },
    ],
    columns: &[
        "start_time",
        "start_ns",
        "device",
        "dev",
        "op",
        "sector",
        "bytes",
        "q2d_ns",
        "d2c_ns",
        "q2c_ns",
        "error",
        "status",
    ],
    group_columns: &["device", "op"],
    stages: &["q2d_ns", "d2c_ns", "q2c_ns"],
};

/// One block I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRecord {
    pub start_ns: u64,
    pub dev: u32,
    /// Device name (`loop0`), or `major:minor` when it could not be resolved.
    pub device: std::sync::Arc<str>,
    pub op: Op,
    pub sector: u64,
    pub bytes: u64,
    pub q2d_ns: Option<u64>,
    pub d2c_ns: Option<u64>,
    pub q2c_ns: Option<u64>,
    pub error: i32,
    pub status: Status,
}

impl IoRecord for BlockRecord {
    fn start_ns(&self) -> u64 {
        self.start_ns
    }

    fn cells(&self, out: &mut dyn FnMut(Cell<'_>)) {
        let dev = format!("{}:{}", dev_major(self.dev), dev_minor(self.dev));
        out(Cell::Str(&self.device));
        out(Cell::Str(&dev));
        out(Cell::Str(self.op.as_str()));
        out(Cell::U64(self.sector));
        out(Cell::U64(self.bytes));
        out(self.q2d_ns.into());
        out(self.d2c_ns.into());
        out(self.q2c_ns.into());
        out(Cell::I64(self.error as i64));
        out(Cell::Str(self.status.as_str()));
    }

    fn group_key(&self) -> u64 {
        ((self.dev as u64) << 8) | self.op as u64
    }

    fn group_labels(&self) -> Vec<String> {
        vec![self.device.to_string(), self.op.as_str().to_string()]
    }

    fn stage(&self, i: usize) -> Option<u64> {
        match i {
            0 => self.q2d_ns,
            1 => self.d2c_ns,
            2 => self.q2c_ns,
            _ => None,
        }
    }

    fn status(&self) -> Status {
        self.status
    }
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    /// Time of the first event seen for the request: the start of the I/O.
    first: u64,
    insert: Option<u64>,
    issue: Option<u64>,
    /// Sector where the request started (the key moves on partial completions).
    sector: u64,
    op: Op,
    bytes: u64,
    /// Sectors not completed yet.
    remaining: u32,
}

impl Pending {
    fn start(&self) -> u64 {
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
            max_in_flight: 1 << 20,
        }
    }
}

pub struct BlockCorrelator {
    cfg: BlockConfig,
    pending: FxMap<(u32, u64), Pending>,
    names: FxMap<u32, std::sync::Arc<str>>,
    counters: Counters,
}

impl BlockCorrelator {
    pub fn new(cfg: BlockConfig) -> BlockCorrelator {
        let names = cfg
            .names
            .iter()
            .map(|(d, n)| (*d, std::sync::Arc::from(n.as_str())))
            .collect();
        BlockCorrelator {
            cfg,
            pending: FxMap::default(),
            names,
            counters: Counters::default(),
        }
    }

    fn name(&mut self, dev: u32) -> std::sync::Arc<str> {
        self.names
            .entry(dev)
            .or_insert_with(|| format!("{}:{}", dev_major(dev), dev_minor(dev)).into())
            .clone()
    }

    fn record(&mut self, dev: u32, p: &Pending, done: Option<(u64, i32)>) -> BlockRecord {
        let start = p.start();
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
            status,
        }
    }

    fn on_block(&mut self, t: u64, e: &BlockEvent, out: &mut dyn FnMut(BlockRecord)) {
        if !self.cfg.devices.is_empty() && !self.cfg.devices.contains(&e.dev) {
            return;
        }
        let key = (e.dev, e.sector);
        match e.kind {
            // Bios are not requests; this profile does not open the event.
            BlockKind::BioQueue => return,
            BlockKind::Insert => {
                if let Some(p) = self.pending.get_mut(&key) {
                    // Inserted again: a requeue. Keep the first start, wait for a new issue.
                    if p.issue.take().is_some() {
                        self.counters.requeued += 1;
                    }
                    p.insert = Some(p.insert.map_or(t, |q| q.min(t)));
                } else {
                    self.add(
                        key,
                        Pending {
                            first: t,
                            insert: Some(t),
                            issue: None,
                            sector: e.sector,
                            op: e.op,
                            bytes: e.bytes as u64,
                            remaining: e.nr_sector,
                        },
                        t,
                        out,
                    );
                }
            }
            BlockKind::Issue => {
                if let Some(p) = self.pending.get_mut(&key) {
                    if p.issue.is_some() {
                        self.counters.requeued += 1;
                    }
                    p.issue = Some(t);
                    // The issue carries the final size (merges happen before dispatch).
                    p.bytes = e.bytes as u64;
                    p.remaining = e.nr_sector;
                    p.op = e.op;
                } else {
                    self.add(
                        key,
                        Pending {
                            first: t,
                            insert: None,
                            issue: Some(t),
                            sector: e.sector,
                            op: e.op,
                            bytes: e.bytes as u64,
                            remaining: e.nr_sector,
                        },
                        t,
                        out,
                    );
                }
            }
            BlockKind::Complete => {
                let Some(mut p) = self.pending.remove(&key) else {
                    self.counters.unmatched += 1;
                    return;
                };
                if e.nr_sector > 0 && e.nr_sector < p.remaining && e.error == 0 {
                    // Partial completion: the rest completes later at the next sector.
                    self.counters.partial += 1;
                    p.remaining -= e.nr_sector;
                    self.pending
                        .insert((e.dev, e.sector + e.nr_sector as u64), p);
                    return;
                }
                let r = self.record(e.dev, &p, Some((t, e.error)));
                out(r);
            }
        }
        self.counters.in_flight = self.pending.len() as u64;
    }

    fn add(&mut self, key: (u32, u64), p: Pending, now: u64, out: &mut dyn FnMut(BlockRecord)) {
        if self.pending.len() >= self.cfg.max_in_flight {
            self.evict(now, out);
        }
        self.pending.insert(key, p);
    }

    /// Give up the oldest quarter of the in-flight requests, so memory stays bounded
    /// and eviction is amortised over many inserts.
    fn evict(&mut self, _now: u64, out: &mut dyn FnMut(BlockRecord)) {
        let mut starts: Vec<u64> = self.pending.values().map(Pending::start).collect();
        let cut_idx = starts.len() / 4;
        let (_, cut, _) = starts.select_nth_unstable(cut_idx);
        let cut = *cut;
        let mut old: Vec<((u32, u64), Pending)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.start() <= cut)
            .map(|(k, p)| (*k, *p))
            .collect();
        old.sort_by_key(|(_, p)| p.start());
        for (k, p) in old {
            self.pending.remove(&k);
            self.counters.incomplete += 1;
            let r = self.record(k.0, &p, None);
            out(r);
        }
    }
}

impl Correlator for BlockCorrelator {
    type Record = BlockRecord;

    fn info(&self) -> &'static ProfileInfo {
        &INFO
    }

    fn on_event(&mut self, ev: &Event, out: &mut dyn FnMut(BlockRecord)) {
        if let EventKind::Block(b) = &ev.kind {
            self.on_block(ev.time, b, out);
        }
    }

    fn finish(&mut self, out: &mut dyn FnMut(BlockRecord)) {
        let mut left: Vec<((u32, u64), Pending)> = self.pending.drain().collect();
        left.sort_by_key(|(_, p)| p.start());
        for (k, p) in left {
            self.counters.incomplete += 1;
            let r = self.record(k.0, &p, None);
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
    use crate::decode::block::kernel_dev;

    fn ev(time: u64, kind: BlockKind, sector: u64, nr: u32, op: Op) -> Event {
        ev_err(time, kind, sector, nr, op, 0)
    }

    fn ev_err(time: u64, kind: BlockKind, sector: u64, nr: u32, op: Op, error: i32) -> Event {
        Event {
            time,
            cpu: 0,
            kind: EventKind::Block(BlockEvent {
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
            }),
        }
    }

    fn run(events: &[Event], max: usize) -> (Vec<BlockRecord>, Counters) {
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
        let mut cells = Vec::new();
        r[0].cells(&mut |c| cells.push(format!("{c:?}")));
        assert_eq!(cells[5], "Empty", "q2d must be an empty cell, not 0");
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
        let events: Vec<Event> = (0..100).map(|i| ev(i, Issue, i * 8, 8, Op::Read)).collect();
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
