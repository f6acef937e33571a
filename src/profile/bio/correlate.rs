//! The bio profile's correlator and record: `block_bio_queue` → `block_bio_complete`
//! on a bio-based device, with `block_bio_remap` naming the device below.
//!
//! A stacked driver (device-mapper, md) hands each bio, or a clone of it, to the
//! device below: the remap event says where (dev, sector) it went, and the clone's
//! own queue (and, on a bio-based device below, completion) events follow at that
//! place. Those are not I/Os of their own: they are followed as the *lower half* of
//! the bio above, so one row per bio submitted to the traced device, naming the
//! bottom device it reached (the last remap). Several bios at one (dev, sector) in
//! flight at once complete FIFO by queue time, counted as ambiguous as in the block
//! profile.
//!
//! # Missing samples
//! A bio whose completion the kernel counted and never wrote would stay in flight, and
//! FIFO would give it the completion of the next bio at its place: under sustained
//! overflow (a one-page ring on zram, three quarters of the samples lost) ≈ 1,350 `ok`
//! rows per run slower than fio's slowest I/O, and a depth that only grew (293 where
//! fio kept 96 in flight). The correlator hears of missing completions before what
//! follows them ([`Correlator::on_missing`]) and keeps them per window; a bio queued
//! before a window closed and in flight past [`SURELY`] of its device's [`Yardstick`]
//! (the q2c of pairings with one candidate) is the one that lost it: `dropped`, out
//! of the depth, never paired. It is looked for when a completion comes at its place
//! and, while a completion is unaccounted, among all bios every millisecond of event
//! time; a window is given up once every bio that could have lost its sample has been
//! in flight that long. `qd` is empty while a completion is unaccounted (a bio that lost
//! one is still in the depth), and at the end a bio in flight queued before a
//! completion went missing is `dropped`, not `incomplete`, and so is one at a place
//! where a completion was paired with one of several bios, queued before a completion
//! went missing ([`Shifted`]): had the first lost its own, each bio there took the next
//! one's completion, and the last is left with none, however late it was queued. A bio
//! that lost its queue leaves its completion `unmatched`.

use super::events::{BioEvent, BioKind};
use crate::correlate::gate::Gate;
use crate::correlate::inflight::{Inflight, Started, DEFAULT_MAX};
use crate::correlate::windows::{Shifted, Windows};
use crate::correlate::yardstick::{Yardstick, SURELY};
use crate::correlate::{Correlator, Counters, DevMap, FxMap, Gap, Status, UnmatchedLog};
use crate::decode::Event;
use crate::device::dev_text;
use crate::profile::shared::block_events::Op;
use crate::profile::shared::device_io::{head_columns, tail_columns, DeviceIo, HasDeviceIo};
use crate::record::{col, opt, Column, Kind, Role, Value};
use std::collections::HashMap;
use std::rc::Rc;

type Key = (u32, u64);

#[derive(Debug, Clone)]
struct BioIo {
    first: u64,
    op: Op,
    bytes: u64,
    /// First remap: the driver handed the bio down.
    remap: Option<u64>,
    /// Where the last remap sent it (the bottom of the stack).
    target: Option<Key>,
    /// The lower halves registered for it, dropped with it.
    lower: Vec<Key>,
    /// Bios in flight on the device when it was queued, itself included; `None` while a
    /// completion that went missing is not pinned on a bio.
    qd: Option<u32>,
}

impl Started for BioIo {
    fn started(&self) -> u64 {
        self.first
    }
}

/// A bio's clone below a traced device: which bio above it belongs to.
#[derive(Debug, Clone, Copy)]
struct Lower {
    t: u64,
    top: Key,
    top_first: u64,
    queued: bool,
}

impl Started for Lower {
    fn started(&self) -> u64 {
        self.t
    }
}

/// Options of the bio correlator.
#[derive(Debug, Clone)]
pub struct BioConfig {
    /// Names for dev_t values, for the `device` and `target` columns.
    pub names: HashMap<u32, String>,
    pub max_in_flight: usize,
    /// The devices whose bios are rows; empty: every device traced. The devices below
    /// them are traced too (to follow a bio down the stack), but their own bios are
    /// not rows.
    pub only: Vec<u32>,
}

impl Default for BioConfig {
    fn default() -> Self {
        BioConfig {
            names: HashMap::new(),
            max_in_flight: DEFAULT_MAX,
            only: Vec::new(),
        }
    }
}

pub struct BioCorrelator {
    ios: Inflight<Key, BioIo>,
    /// Bios in flight per device.
    depth: FxMap<u32, u32>,
    lower: Inflight<Key, Lower>,
    names: FxMap<u32, Rc<str>>,
    only: Vec<u32>,
    counters: Counters,
    /// When completions were unmatched (see `Correlator::unmatched_at`).
    unmatched_log: UnmatchedLog,
    gate: Gate,
    /// Completions counted missing, not yet pinned on a bio.
    missing: Windows,
    /// The latest a completion went missing by, pinned or not (0: none).
    complete_horizon: u64,
    /// Event time of the next scan for bios that lost their completion.
    next_scan: u64,
    /// Per device, the q2c of pairings with one candidate.
    certain: DevMap<Yardstick>,
    /// Places where a completion was paired with the first of several bios, one queued
    /// before a completion went missing.
    shifted: Shifted<Key>,
}

/// Between scans for bios that lost their completion, in event time.
const SCAN_EVERY_NS: u64 = 1_000_000;

/// One bio on a bio-based device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BioRecord {
    pub io: DeviceIo,
    /// The device (and sector there) the last remap sent the bio to.
    pub target: Option<(Rc<str>, u32, u64)>,
    pub q2r_ns: Option<u64>,
    pub r2c_ns: Option<u64>,
    pub q2c_ns: Option<u64>,
}

impl std::ops::Deref for BioRecord {
    type Target = DeviceIo;
    fn deref(&self) -> &DeviceIo {
        &self.io
    }
}

impl HasDeviceIo for BioRecord {
    fn io(&self) -> &DeviceIo {
        &self.io
    }
}

impl BioCorrelator {
    pub fn new(cfg: BioConfig) -> BioCorrelator {
        BioCorrelator {
            ios: Inflight::new(cfg.max_in_flight),
            depth: FxMap::default(),
            lower: Inflight::new(cfg.max_in_flight),
            names: cfg
                .names
                .iter()
                .map(|(d, n)| (*d, Rc::from(n.as_str())))
                .collect(),
            only: cfg.only,
            counters: Counters::default(),
            unmatched_log: UnmatchedLog::default(),
            gate: Gate::default(),
            missing: Windows::default(),
            complete_horizon: 0,
            next_scan: 0,
            certain: DevMap::default(),
            shifted: Shifted::default(),
        }
    }

    /// [`SURELY`] of the q2c of `dev`'s pairings with one candidate.
    fn surely(&self, dev: u32) -> u64 {
        SURELY(self.certain.get(dev).map_or(0, Yardstick::value))
    }

    /// Whether bio `io` of `dev`, at `t`, is one that lost a completion still
    /// unaccounted: queued before one went missing, and in flight past [`SURELY`].
    fn lost(&self, dev: u32, io: &BioIo, t: u64) -> bool {
        io.first <= self.missing.horizon() && t.saturating_sub(io.first) > self.surely(dev)
    }

    /// Bio `io`, taken out of flight, lost its completion (one missing since it was
    /// queued, if still unaccounted): its row, `dropped`.
    fn cut(&mut self, key: Key, io: BioIo, out: &mut dyn FnMut(BioRecord)) {
        self.missing.take(|w| w.before >= io.first);
        self.drop_lower(&io, key);
        self.counters.cut += 1;
        let mut r = self.record(key, &io, None, 0);
        r.io.status = Status::Dropped;
        out(r);
    }

    /// Before a completion at `key` is paired: the bios there that lost theirs, oldest
    /// first, are cut.
    fn cut_lost_at(&mut self, key: Key, t: u64, out: &mut dyn FnMut(BioRecord)) {
        while !self.missing.is_empty()
            && self
                .ios
                .first(&key)
                .is_some_and(|io| self.lost(key.0, io, t))
        {
            let Some((io, _)) = self.ios.take(&key) else {
                return;
            };
            self.cut(key, io, out);
        }
    }

    /// Every millisecond of event time while a completion is unaccounted: the bios that
    /// lost theirs (oldest first, one per completion missing since its queue), then the
    /// windows no bio can still be found for are given up.
    fn scan(&mut self, t: u64, out: &mut dyn FnMut(BioRecord)) {
        if self.missing.is_empty() || t < self.next_scan {
            return;
        }
        self.next_scan = t + SCAN_EVERY_NS;
        let mut lost = Vec::new();
        self.ios.for_each(|k, io| {
            if self.lost(k.0, io, t) {
                lost.push((io.first, *k));
            }
        });
        lost.sort_unstable();
        for (first, key) in lost {
            // None left that went missing after it was queued (nor after a later one).
            if self.missing.is_empty() || self.missing.horizon() < first {
                break;
            }
            if let Some((io, _)) = self.ios.take_where(&key, |io| io.first == first) {
                self.cut(key, io, out);
            }
        }
        let longest = self.certain.values().map(Yardstick::value).max();
        self.missing
            .give_up(t.saturating_sub(SURELY(longest.unwrap_or(0))));
    }

    /// Whether a bio queued on `dev` (not a clone of one above) is a row.
    fn wanted(&self, dev: u32) -> bool {
        self.only.is_empty() || self.only.contains(&dev)
    }

    fn name(&mut self, dev: u32) -> Rc<str> {
        self.names
            .entry(dev)
            .or_insert_with(|| dev_text(dev).into())
            .clone()
    }

    fn record(
        &mut self,
        key: Key,
        io: &BioIo,
        done: Option<(u64, i32)>,
        candidates: usize,
    ) -> BioRecord {
        if let Some(n) = self.depth.get_mut(&key.0) {
            *n = n.saturating_sub(1);
        }
        let (r2c, q2c, error, status) = match done {
            Some((t, err)) => (
                // A completion stamped before the bio's own events (out of order)
                // leaves the cell empty, never a 0.
                io.remap.and_then(|r| t.checked_sub(r)),
                t.checked_sub(io.first),
                err,
                if err == 0 { Status::Ok } else { Status::Error },
            ),
            None => (None, None, 0, Status::Incomplete),
        };
        let target = io.target.map(|(d, s)| (self.name(d), d, s));
        BioRecord {
            io: DeviceIo {
                start_ns: io.first,
                dev: key.0,
                device: self.name(key.0),
                op: io.op,
                sector: key.1,
                bytes: io.bytes,
                error,
                qd: io.qd,
                candidates: done.map(|_| candidates as u32),
                status,
            },
            target,
            q2r_ns: io.remap.and_then(|r| r.checked_sub(io.first)),
            r2c_ns: r2c,
            q2c_ns: q2c,
        }
    }

    /// Forget the lower halves of a bio that is over.
    fn drop_lower(&mut self, io: &BioIo, key: Key) {
        for l in &io.lower {
            self.lower
                .take_where(l, |x| x.top == key && x.top_first == io.first);
        }
    }

    fn emit(
        &mut self,
        key: Key,
        io: BioIo,
        done: Option<(u64, i32, usize)>,
        out: &mut dyn FnMut(BioRecord),
    ) {
        self.drop_lower(&io, key);
        if done.is_none() {
            self.counters.incomplete += 1;
        }
        let held = done.map_or(0, |d| d.2);
        let r = self.record(key, &io, done.map(|(t, e, _)| (t, e)), held);
        out(r);
    }

    fn on_bio(&mut self, t: u64, e: &BioEvent, out: &mut dyn FnMut(BioRecord)) {
        let at = (e.dev, e.sector);
        match e.kind {
            BioKind::Queue => {
                if let Some(l) = self.lower.find_mut(&at, |l| !l.queued) {
                    // The clone of a bio above, queued below: not a bio of its own.
                    l.queued = true;
                    return;
                }
                if !self.wanted(e.dev) || !self.gate.admits(e.sector, t) {
                    // A bio of its own on a device below the traced one, or one a
                    // change of the sampling rate leaves out.
                    return;
                }
                let depth = self.depth.entry(e.dev).or_insert(0);
                *depth += 1;
                let io = BioIo {
                    first: t,
                    op: e.op,
                    bytes: (e.nr_sector as u64) << 9,
                    remap: None,
                    target: None,
                    lower: Vec::new(),
                    qd: Some(*depth).filter(|_| self.missing.is_empty()),
                };
                let mut evicted = Vec::new();
                self.ios.push(at, io, &mut |k, io| evicted.push((k, io)));
                for (k, io) in evicted {
                    self.emit(k, io, None, out);
                }
            }
            BioKind::Remap => {
                let old = (e.old_dev, e.old_sector);
                // The bio above: a clone already below a traced bio, or a traced bio.
                let top = match self.lower.first(&old) {
                    Some(l) => Some((l.top, l.top_first)),
                    None => self
                        .ios
                        .find_mut(&old, |io| io.remap.is_none())
                        .map(|io| io.first)
                        .or_else(|| self.ios.first(&old).map(|io| io.first))
                        .map(|f| (old, f)),
                };
                let Some((top, first)) = top else {
                    return;
                };
                let Some(io) = self.ios.find_mut(&top, |io| io.first == first) else {
                    return;
                };
                io.remap.get_or_insert(t);
                io.target = Some(at);
                io.lower.push(at);
                let l = Lower {
                    t,
                    top,
                    top_first: first,
                    queued: false,
                };
                self.lower.push(at, l, &mut |_, _| {});
            }
            BioKind::Complete => {
                if self.lower.take_where(&at, |l| l.queued).is_some() {
                    // A clone below completed; the bio above completes on its own.
                    return;
                }
                if !self.wanted(e.dev) {
                    return;
                }
                if !self.missing.is_empty() {
                    self.scan(t, out);
                    self.cut_lost_at(at, t, out);
                }
                // Only a bio of its op: a bio's op never changes between its queue and
                // its completion, and at a busy place of reads and writes the oldest bio
                // of another op is another I/O (taken, each later pairing there shifted).
                let Some((io, held)) = self.ios.take_where(&at, |io| io.op == e.op) else {
                    if !self.gate.explains(e.sector, t) {
                        self.counters.unmatched += 1;
                        self.unmatched_log.note(t, self.counters.unmatched);
                    }
                    return;
                };
                // A choice only among bios of its op.
                let held = match held {
                    1 => 1,
                    _ => 1 + self.ios.count_where(&at, |x| x.op == e.op),
                };
                if held > 1 {
                    self.counters.ambiguous += 1;
                    // Its completion may have gone missing, this one the next's.
                    if io.first <= self.complete_horizon {
                        self.shifted.note(at);
                    }
                } else if e.error == 0 {
                    // A bio that lost its completion met by the completion of a later bio
                    // at its place that lost its queue is a pairing with one candidate
                    // too: a percentile that a few such do not move (see `Yardstick`).
                    let q2c = t.saturating_sub(io.first);
                    self.certain.entry(e.dev).or_default().add(q2c);
                }
                self.emit(at, io, Some((t, e.error, held)), out);
            }
        }
        self.counters.in_flight = self.ios.len() as u64;
    }
}

impl Correlator for BioCorrelator {
    type Event = BioEvent;
    type Record = BioRecord;

    fn on_event(&mut self, ev: &Event<BioEvent>, out: &mut dyn FnMut(BioRecord)) {
        self.on_bio(ev.time, &ev.kind, out);
    }

    fn finish(&mut self, out: &mut dyn FnMut(BioRecord)) {
        let mut left = Vec::new();
        self.ios.drain_all(&mut |k, io| left.push((k, io)));
        let shifted = std::mem::take(&mut self.shifted);
        for (k, io) in left {
            // Queued before a completion went missing, or at a place where one may
            // have shifted the pairings since: whether it lost it or the run ended
            // first is not known, which `incomplete` would say.
            if io.first <= self.complete_horizon || shifted.contains(&k) {
                self.cut(k, io, out);
            } else {
                self.emit(k, io, None, out);
            }
        }
        self.lower.clear();
        self.missing = Windows::default();
        self.counters.in_flight = 0;
    }

    fn on_missing(&mut self, gap: &Gap<'_>) -> bool {
        if gap.may_be("block_bio_complete") {
            self.missing.add(gap.n, gap.after, gap.before);
            self.complete_horizon = self.complete_horizon.max(gap.before);
        }
        // A missing queue leaves its completion unmatched; a missing remap, the bio
        // without a target and q2r.
        true
    }

    fn unmatched_at(&self, t: u64) -> u64 {
        self.unmatched_log.at(t)
    }

    fn counters(&self) -> Counters {
        Counters {
            resampled: self.gate.resampled(),
            ..self.counters
        }
    }

    fn gate(&mut self) -> Option<&mut Gate> {
        Some(&mut self.gate)
    }
}

const HEAD: [Column<BioRecord>; 7] = head_columns();
const TAIL: [Column<BioRecord>; 4] = tail_columns();

static COLUMNS: &[Column<BioRecord>] = &[
    HEAD[0],
    HEAD[1],
    HEAD[2],
    HEAD[3],
    HEAD[4],
    HEAD[5],
    HEAD[6],
    col("target", Role::Label, Kind::Text, |r| {
        r.target.as_ref().map_or(Value::Empty, |t| Value::Str(&t.0))
    }),
    col("target_dev", Role::Value, Kind::Text, |r| {
        r.target.as_ref().map_or(Value::Empty, |t| Value::Dev(t.1))
    }),
    col("target_sector", Role::Value, Kind::U64, |r| {
        opt(r.target.as_ref().map(|t| t.2))
    }),
    col("q2r_ns", Role::Stage, Kind::U64, |r| opt(r.q2r_ns)),
    col("r2c_ns", Role::Stage, Kind::U64, |r| opt(r.r2c_ns)),
    col(
        "q2c_ns",
        Role::Total(&["q2r_ns", "r2c_ns"]),
        Kind::U64,
        |r| opt(r.q2c_ns),
    ),
    TAIL[0],
    TAIL[1],
    TAIL[2],
    TAIL[3],
];

crate::tabled!(
    BioRecord,
    "bio",
    COLUMNS,
    |r| r.io.start_ns,
    |r| r.io.status,
    |r, s| r.io.status = s
);

#[cfg(test)]
mod tests {
    use super::*;

    const DM: u32 = 253 << 20;
    const LOOP: u32 = 7 << 20;

    fn ev(time: u64, kind: BioKind, dev: u32, sector: u64, old: (u32, u64)) -> Event<BioEvent> {
        Event {
            time,
            cpu: 0,
            kind: BioEvent {
                kind,
                dev,
                sector,
                nr_sector: 8,
                op: Op::Write,
                error: 0,
                old_dev: old.0,
                old_sector: old.1,
            },
        }
    }

    fn run(events: &[Event<BioEvent>]) -> (Vec<BioRecord>, Counters) {
        let mut names = HashMap::new();
        names.insert(DM, "dm-0".to_string());
        names.insert(LOOP, "loop0".to_string());
        let mut c = BioCorrelator::new(BioConfig {
            names,
            ..Default::default()
        });
        let mut out = Vec::new();
        for e in events {
            c.on_event(e, &mut |r| out.push(r));
        }
        c.finish(&mut |r| out.push(r));
        (out, c.counters())
    }

    use BioKind::*;

    #[test]
    fn a_bio_remapped_to_a_request_based_disk_is_one_row_naming_it() {
        let (r, c) = run(&[
            ev(100, Queue, DM, 0, (0, 0)),
            ev(110, Remap, LOOP, 2048, (DM, 0)),
            // The clone queued on loop0: request-based, its completion is not traced.
            ev(112, Queue, LOOP, 2048, (0, 0)),
            ev(400, Complete, DM, 0, (0, 0)),
        ]);
        assert_eq!(r.len(), 1, "{r:?}");
        let r = &r[0];
        assert_eq!((&*r.device, r.sector, r.bytes), ("dm-0", 0, 4096));
        let t = r.target.as_ref().unwrap();
        assert_eq!((&*t.0, t.2), ("loop0", 2048));
        assert_eq!(
            (r.q2r_ns, r.r2c_ns, r.q2c_ns),
            (Some(10), Some(290), Some(300))
        );
        assert_eq!(r.status, Status::Ok);
        assert_eq!(c.unmatched + c.incomplete, 0);
    }

    /// `-d dm-1` over dm-0 over a loop device: dm-0 is traced to follow the bio down,
    /// but dm-0's own bios (not clones of dm-1's) are not rows, and their completions
    /// are not unmatched.
    #[test]
    fn the_devices_below_the_traced_one_are_followed_not_reported() {
        let dm1 = (253 << 20) | 1;
        let evs = [
            ev(100, Queue, dm1, 8, (0, 0)),
            ev(105, Remap, DM, 16, (dm1, 8)),
            ev(106, Queue, DM, 16, (0, 0)),
            ev(110, Remap, LOOP, 2064, (DM, 16)),
            ev(120, Queue, DM, 4000, (0, 0)),
            ev(125, Remap, LOOP, 6048, (DM, 4000)),
            ev(300, Complete, DM, 16, (0, 0)),
            ev(310, Complete, dm1, 8, (0, 0)),
            ev(320, Complete, DM, 4000, (0, 0)),
        ];
        let mut c = BioCorrelator::new(BioConfig {
            only: vec![dm1],
            ..Default::default()
        });
        let mut rows = Vec::new();
        for e in &evs {
            c.on_event(e, &mut |r| rows.push(r));
        }
        c.finish(&mut |r| rows.push(r));
        assert_eq!(rows.len(), 1, "{rows:?}");
        let t = rows[0].target.as_ref().unwrap();
        assert_eq!((t.1, t.2), (LOOP, 2064));
        assert_eq!(c.counters().unmatched, 0);
    }

    #[test]
    fn two_levels_name_the_bottom_and_clones_that_complete_are_not_rows() {
        let dm1 = (253 << 20) | 1;
        let (r, c) = run(&[
            ev(100, Queue, dm1, 8, (0, 0)),
            ev(105, Remap, DM, 16, (dm1, 8)),
            ev(106, Queue, DM, 16, (0, 0)),
            ev(110, Remap, LOOP, 2064, (DM, 16)),
            ev(111, Queue, LOOP, 2064, (0, 0)),
            ev(300, Complete, DM, 16, (0, 0)),
            ev(310, Complete, dm1, 8, (0, 0)),
        ]);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].target.as_ref().map(|t| t.1), Some(LOOP));
        assert_eq!(r[0].q2c_ns, Some(210));
        assert_eq!(c, Counters::default());
    }

    #[test]
    fn a_bio_based_device_without_remap_has_no_target() {
        let (r, _) = run(&[
            ev(10, Queue, DM, 0, (0, 0)),
            ev(20, Queue, DM, 0, (0, 0)),
            ev(30, Complete, DM, 0, (0, 0)),
            ev(45, Complete, DM, 0, (0, 0)),
            ev(50, Complete, DM, 64, (0, 0)),
        ]);
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|r| r.target.is_none() && r.q2r_ns.is_none()));
        assert_eq!((r[0].q2c_ns, r[1].q2c_ns), (Some(20), Some(25)));
        let cells = crate::testutil::cells(&r[0]);
        assert_eq!(cells[5], "", "no target: an empty cell");
    }

    #[test]
    fn counts_unmatched_ambiguous_and_incomplete() {
        let (r, c) = run(&[
            ev(5, Complete, DM, 99, (0, 0)),
            ev(10, Queue, DM, 0, (0, 0)),
            ev(11, Queue, DM, 0, (0, 0)),
            ev(20, Complete, DM, 0, (0, 0)),
        ]);
        assert_eq!((c.unmatched, c.ambiguous, c.incomplete), (1, 1, 1));
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].status, Status::Incomplete);
    }

    /// Feeds `events`; a completion gap `(after, before)` is told just before event
    /// `at`, as the live loop's hold makes it.
    fn run_missing(
        events: &[Event<BioEvent>],
        at: usize,
        gap: (u64, u64),
    ) -> (Vec<BioRecord>, Counters) {
        run_gap(events, at, gap, "block:block_bio_complete")
    }

    /// [`run_missing`] with the gap's event named (empty: not known).
    fn run_gap(
        events: &[Event<BioEvent>],
        at: usize,
        gap: (u64, u64),
        event: &str,
    ) -> (Vec<BioRecord>, Counters) {
        let mut c = BioCorrelator::new(BioConfig::default());
        let mut out = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if i == at {
                let gap = Gap {
                    event,
                    n: 1,
                    after: gap.0,
                    before: gap.1,
                };
                assert!(c.on_missing(&gap));
            }
            c.on_event(e, &mut |r| out.push(r));
        }
        c.finish(&mut |r| out.push(r));
        (out, c.counters())
    }

    /// Five bios of 10 µs, one candidate each, by 0.41 ms: the device's yardstick.
    fn bios_of_10us() -> Vec<Event<BioEvent>> {
        (0..5u64)
            .flat_map(|i| {
                let sector = 100 + i * 8;
                [
                    ev(i * 100_000, Queue, DM, sector, (0, 0)),
                    ev(i * 100_000 + 10_000, Complete, DM, sector, (0, 0)),
                ]
            })
            .collect()
    }

    /// A (sector 8) loses its completion; 19 ms later B, at sector 8 too, whose queue
    /// was lost, completes. Paired, they were an `ok` row 19 ms long on a device whose
    /// bios take 10 µs (≈ 1,350 rows per run slower than fio's slowest under sustained
    /// overflow on zram), and A stayed in the depth for ever. A is `dropped`, B's
    /// completion `unmatched`; the depth is unknown until A is found, then known again.
    #[test]
    fn a_bio_that_lost_its_completion_is_cut_not_paired_with_the_next_at_its_place() {
        let mut evs = bios_of_10us();
        evs.extend([
            ev(1_000_000, Queue, DM, 8, (0, 0)),
            ev(1_050_000, Queue, DM, 200, (0, 0)),
            ev(1_060_000, Complete, DM, 200, (0, 0)),
            ev(20_000_000, Complete, DM, 8, (0, 0)),
            ev(21_000_000, Queue, DM, 300, (0, 0)),
            ev(21_010_000, Complete, DM, 300, (0, 0)),
        ]);
        let (r, c) = run_missing(&evs, 11, (1_000_000, 1_100_000));
        let at = |s: u64| r.iter().find(|r| r.sector == s).unwrap();
        assert_eq!(
            (at(8).status, at(8).q2c_ns),
            (Status::Dropped, None),
            "{r:?}"
        );
        // Still in flight within the yardstick: only slow, not the one that lost it.
        assert_eq!((at(200).status, at(200).q2c_ns), (Status::Ok, Some(10_000)));
        assert_eq!((at(200).qd, at(300).qd), (None, Some(1)));
        assert_eq!((c.cut, c.unmatched, c.incomplete), (1, 1, 0));
        assert_eq!(r.iter().filter(|r| r.status == Status::Ok).count(), 7);
        // A capture's LOST record, which does not say of which event its sample was,
        // makes the same rows.
        assert_eq!(run_gap(&evs, 11, (1_000_000, 1_100_000), ""), (r, c));
    }

    /// Two bios at sector 8, the first's completion missing, the second's paired with
    /// it (FIFO: neither has been in flight long). A third queued there after the gap
    /// is left with no completion at the end, however late it was queued: `dropped`,
    /// not `incomplete` (29 replays in 150 of a zram capture with samples taken out).
    #[test]
    fn the_last_bio_at_a_place_a_missing_completion_shifted_is_dropped() {
        let mut evs = bios_of_10us();
        evs.extend([
            ev(1_000_000, Queue, DM, 8, (0, 0)),
            ev(1_005_000, Queue, DM, 8, (0, 0)),
            ev(1_020_000, Complete, DM, 8, (0, 0)),
            ev(1_050_000, Queue, DM, 8, (0, 0)),
        ]);
        let (r, c) = run_missing(&evs, 12, (1_008_000, 1_012_000));
        let mut at8: Vec<_> = (r.iter().filter(|r| r.sector == 8))
            .map(|r| (r.start_ns, r.status))
            .collect();
        at8.sort_unstable_by_key(|x| x.0);
        assert_eq!(
            at8,
            vec![
                (1_000_000, Status::Ok),
                (1_005_000, Status::Dropped),
                (1_050_000, Status::Dropped)
            ]
        );
        assert_eq!((c.incomplete, c.cut), (0, 2));
    }

    /// A read and then a write queued at one place, the write completing first: its
    /// completion is the write's, not the older read's (a bio's op never changes).
    /// Taken for the read's, each row had the other's time, and under dropped samples
    /// each later pairing at a busy place of reads and writes shifted: half the wrong
    /// rows of the drops replay.
    #[test]
    fn a_completion_goes_to_a_bio_of_its_op() {
        let with = |mut e: Event<BioEvent>, op| {
            e.kind.op = op;
            e
        };
        let evs = [
            with(ev(1_000, Queue, DM, 8, (0, 0)), Op::Read),
            with(ev(2_000, Queue, DM, 8, (0, 0)), Op::Write),
            with(ev(3_000, Complete, DM, 8, (0, 0)), Op::Write),
            with(ev(9_000, Complete, DM, 8, (0, 0)), Op::Read),
        ];
        let (r, c) = run(&evs);
        let mut rows: Vec<_> = (r.iter())
            .map(|r| (r.io.op, r.io.start_ns, r.q2c_ns, r.io.status))
            .collect();
        rows.sort_unstable_by_key(|x| x.1);
        assert_eq!(
            rows,
            vec![
                (Op::Read, 1_000, Some(8_000), Status::Ok),
                (Op::Write, 2_000, Some(1_000), Status::Ok)
            ]
        );
        assert_eq!((c.ambiguous, c.unmatched), (0, 0));
    }

    /// At the end, a bio queued before a completion went missing may have lost it:
    /// `dropped`; one queued after is `incomplete` (the run ended first).
    #[test]
    fn at_the_end_a_bio_queued_before_a_missing_completion_is_dropped() {
        let mut evs = bios_of_10us();
        evs.extend([
            ev(500_000, Queue, DM, 400, (0, 0)),
            ev(800_000, Queue, DM, 500, (0, 0)),
        ]);
        let (r, c) = run_missing(&evs, 11, (600_000, 700_000));
        let at = |s: u64| r.iter().find(|r| r.sector == s).unwrap();
        assert_eq!(
            (at(400).status, at(500).status),
            (Status::Dropped, Status::Incomplete)
        );
        assert_eq!((c.cut, c.incomplete), (1, 1));
    }
}
