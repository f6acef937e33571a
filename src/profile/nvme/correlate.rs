//! The nvme profile's correlator: host `nvme_setup_cmd` → `nvme_complete_rq`, keyed by
//! (controller instance, qid, cid), joined with the block events of the same request:
//! the bio/insert before the driver for the time spent there ([`BioJoin`]), and the
//! block completion after it to catch completions that carry a wrong command id (see
//! `Held`).

use super::record::NvmeRecord;
use crate::correlate::biojoin::{BioJoin, StartKind};
use crate::correlate::inflight::{Inflight, Started, DEFAULT_MAX};
use crate::correlate::{Correlator, Counters, FxMap, Gap, Starts};
use crate::decode::Event;
use crate::device::{is_multipath_path, multipath_head};
use crate::profile::shared::block_events::{BlockEvent, BlockKind};
use crate::profile::shared::cmd::{Claim, CmdTracker, Finished, Key, NvmeConfig, Pending};
use crate::profile::shared::nvme_events::{DiskName, HostEvent, NvmeCmd, NvmeDone, NvmeEvent};

/// A command in flight at a (dev, sector).
#[derive(Debug, Clone, Copy)]
struct AtSector {
    t: u64,
    key: Key,
}

impl Started for AtSector {
    fn started(&self) -> u64 {
        self.t
    }
}

/// A host completion waiting for the `block_rq_complete` that the driver emits after it
/// on the same CPU. With batched completions (`nvme_complete_batch`) the driver emits
/// every `nvme_complete_rq` of the batch first and then every `block_rq_complete`, so
/// each CPU holds a queue of them, and a block completion goes to the held completion
/// whose command is at its place (else to the oldest held). The first host completion
/// after a block completion on that CPU starts a new batch: what the last one left
/// unconfirmed is settled by its cid.
///
/// Why: on NVMe/TCP (6.1) a write that needs an R2T has its command PDU buffer reused
/// for the H2C data PDU header, so `nvme_complete_rq` reads the command id from bytes
/// that now hold the target's transfer tag. Its cid is then wrong: it matches nothing,
/// or worse, another command in flight. The request's (disk, sector) in the block
/// completion tells which command really completed.
#[derive(Debug, Clone, Copy)]
struct Held {
    t: u64,
    done: NvmeDone,
    /// The command the cid named, if any; confirmed or refuted by the block event.
    by_cid: Option<Pending>,
}

/// Completions held per CPU at most (a batch is at most a queue's depth).
const MAX_HELD: usize = 4096;

/// Multipath path disks learned at most (a corrupt capture could name any number).
const MAX_PATHS: usize = 1024;

/// A command's first block in 512-byte sectors, as block events count whatever the
/// LBA size; wrapping: a garbage SLBA must not panic, it then just joins nothing.
fn sector(cmd: &NvmeCmd, lba_size: u32) -> Option<u64> {
    let (slba, _) = cmd.lba_range()?;
    Some(slba.wrapping_mul((lba_size as u64 / 512).max(1)))
}

pub struct NvmeCorrelator {
    pub(super) tracker: CmdTracker,
    blocks: BioJoin,
    /// dev_t of the disks whose block events are joined.
    devs: Vec<u32>,
    /// Per disk name, the dev_t its requests' block events carry: sysfs gives it, but
    /// not a multipath path disk's (learned from its block completions, see
    /// [`Self::learn_path`]).
    dev_cache: FxMap<DiskName, Option<u32>>,
    /// Per disk name, the dev_t its bios are queued on: its own, or a multipath path's
    /// namespace head's.
    bio_cache: FxMap<DiskName, Option<u32>>,
    /// The path disks' dev_t learned so far.
    path_devs: Vec<u32>,
    /// (dev, sector) of the commands in flight that have one, for `Held`; several
    /// commands may share one (a hot block).
    by_sector: Inflight<(u32, u64), AtSector>,
    /// Per CPU: the completions waiting for their block completion, oldest first, and
    /// whether a block completion came since the last host completion.
    held: Vec<(Vec<Held>, bool)>,
    /// Reused between events so that handing records out allocates nothing.
    fin: Vec<Finished>,
}

impl NvmeCorrelator {
    pub fn new(cfg: NvmeConfig) -> NvmeCorrelator {
        let devs = cfg.disk_devs.values().copied().collect();
        let max = cfg.max_in_flight.clamp(1024, DEFAULT_MAX);
        NvmeCorrelator {
            tracker: CmdTracker::new(cfg),
            blocks: BioJoin::new(max),
            devs,
            dev_cache: FxMap::default(),
            bio_cache: FxMap::default(),
            path_devs: Vec::new(),
            by_sector: Inflight::new(max),
            held: Vec::new(),
            fin: Vec::new(),
        }
    }

    fn dev_of(&mut self, disk: &DiskName) -> Option<u32> {
        if let Some(d) = self.dev_cache.get(disk) {
            return *d;
        }
        let d = self.tracker.cfg.disk_devs.get(disk.as_str()).copied();
        self.dev_cache.insert(*disk, d);
        d
    }

    /// The disk a command's bio was queued on: the command's own, or with NVMe native
    /// multipath the namespace head above the path disk it runs on.
    fn bio_dev_of(&mut self, disk: &DiskName) -> Option<u32> {
        if let Some(d) = self.bio_cache.get(disk) {
            return *d;
        }
        let d = match multipath_head(disk.as_str()) {
            Some(head) => self.tracker.cfg.disk_devs.get(&head).copied(),
            None => self.dev_of(disk),
        };
        self.bio_cache.insert(*disk, d);
        d
    }

    /// The (dev, sector) of a command's first block, when it has one on a known disk.
    fn place(&mut self, cmd: &NvmeCmd, lba_size: u32) -> Option<(u32, u64)> {
        let dev = self.dev_of(&cmd.disk)?;
        Some((dev, sector(cmd, lba_size)?))
    }

    /// Where a command's bio was queued: [`place`](Self::place) on the bio's disk.
    fn bio_place(&mut self, cmd: &NvmeCmd, lba_size: u32) -> Option<(u32, u64)> {
        let dev = self.bio_dev_of(&cmd.disk)?;
        Some((dev, sector(cmd, lba_size)?))
    }

    /// A command whose completion can be checked once its multipath path disk's number
    /// is learned ([`Self::learn_path`]): it has a sector, on a path not learned yet.
    fn learnable(&mut self, cmd: &NvmeCmd, lba_size: u32) -> bool {
        self.path_devs.len() < MAX_PATHS
            && sector(cmd, lba_size).is_some()
            && is_multipath_path(cmd.disk.as_str())
            && self.dev_of(&cmd.disk).is_none()
    }

    /// A block completion on a disk sysfs gives no number for (a multipath path's),
    /// with completions held on this CPU. If the commands held here and those in flight
    /// put exactly one path disk of unknown number at its sector, the number is that
    /// disk's: from then on the disk's completions are checked as any disk's, and its
    /// commands not yet written get their place. Learned from the command, not from the
    /// cid of the completion, which may be wrong (R2T writes, see `Held`). Bounded by
    /// the disks; returns whether it learned.
    fn learn_path(&mut self, cpu: u32, b: &BlockEvent) -> bool {
        let Some((queue, _)) = self.held.get(cpu as usize) else {
            return false;
        };
        if queue.is_empty() || self.path_devs.len() >= MAX_PATHS {
            return false;
        }
        let mut at: Vec<DiskName> = Vec::new();
        let mut note = |p: &Pending| {
            if sector(&p.cmd, p.lba_size) == Some(b.sector) && !at.contains(&p.cmd.disk) {
                at.push(p.cmd.disk);
            }
        };
        queue
            .iter()
            .filter_map(|h| h.by_cid.as_ref())
            .for_each(&mut note);
        self.tracker.for_each_pending(&mut note);
        // A disk whose number is known is not the one this completion's number is of.
        let mut disk = None;
        for d in at {
            if is_multipath_path(d.as_str()) && self.dev_of(&d).is_none() {
                if disk.is_some() {
                    return false;
                }
                disk = Some(d);
            }
        }
        let Some(disk) = disk else {
            return false;
        };
        self.dev_cache.insert(disk, Some(b.dev));
        self.path_devs.push(b.dev);
        let mut places = Vec::new();
        let mut place = |p: &Pending| {
            if let (true, Some(s)) = (p.cmd.disk == disk, sector(&p.cmd, p.lba_size)) {
                let at = AtSector {
                    t: p.submit,
                    key: p.key(),
                };
                places.push(((b.dev, s), at));
            }
        };
        self.tracker.for_each_pending(&mut place);
        (self.held.iter())
            .flat_map(|(q, _)| q.iter().filter_map(|h| h.by_cid.as_ref()))
            .for_each(&mut place);
        for (pl, at) in places {
            self.by_sector.push(pl, at, &mut |_, _| {});
        }
        true
    }

    fn on_cmd(&mut self, t: u64, cmd: &NvmeCmd, out: &mut dyn FnMut(NvmeRecord)) {
        if !self.tracker.selected(t, cmd) {
            return;
        }
        let lba_size = self.tracker.lba_size(&cmd.disk);
        let place = self.place(cmd, lba_size);
        let block = (self.bio_place(cmd, lba_size))
            .and_then(|(dev, sector)| self.blocks.claim(dev, sector, t))
            .map(|c| (c.t, c.candidates as u32));
        if let Some(pl) = place {
            let at = AtSector {
                t,
                key: (cmd.ctrl_id, cmd.qid, cmd.cid),
            };
            self.by_sector.push(pl, at, &mut |_, _| {});
        }
        let mut fin = std::mem::take(&mut self.fin);
        self.tracker.submit(t, cmd, block, &mut |f| fin.push(f));
        self.emit(&mut fin, out);
        self.fin = fin;
    }

    fn on_done(&mut self, t: u64, cpu: u32, done: &NvmeDone, out: &mut dyn FnMut(NvmeRecord)) {
        if self.held.get(cpu as usize).is_some_and(|h| h.1) {
            self.release(cpu, out);
        }
        let mut fin = std::mem::take(&mut self.fin);
        let claim = self.tracker.claim(t, done, &mut |f| fin.push(f));
        self.emit(&mut fin, out);
        self.fin = fin;
        let by_cid = match claim {
            Claim::Ignored => return,
            Claim::Found(p) => Some(p),
            Claim::Missing => None,
        };
        // With no known disk no block completion will come to check against (and none
        // to learn a path's number from); nor for a command without a sector range.
        let verifiable = !self.devs.is_empty()
            && match &by_cid {
                Some(p) => {
                    self.place(&p.cmd, p.lba_size).is_some() || self.learnable(&p.cmd, p.lba_size)
                }
                None => true,
            };
        if !verifiable {
            // The cid is all there is.
            match by_cid {
                Some(p) => out(self.finish_one((p, Some((t, *done))))),
                None => self.tracker.unmatched(t, done),
            }
            return;
        }
        let slot = cpu as usize;
        if self.held.len() <= slot {
            self.held.resize_with(slot + 1, Default::default);
        }
        let (queue, _) = &mut self.held[slot];
        // A batch is bounded by the queue depth; a queue this long means the block
        // completions are not coming (not traced): settle the oldest by its cid.
        if queue.len() >= MAX_HELD {
            let h = queue.remove(0);
            self.settle(h, out);
        }
        self.held[slot].0.push(Held {
            t,
            done: *done,
            by_cid,
        });
    }

    /// The block completion of the request a held completion belongs to.
    fn on_block_complete(&mut self, cpu: u32, e: &BlockEvent, out: &mut dyn FnMut(NvmeRecord)) {
        let here = (e.dev, e.sector);
        let Some(n) = self.held.get(cpu as usize).map(|h| h.0.len()) else {
            return;
        };
        // The held completion whose command is at this place, else the oldest.
        let mut at = None;
        for i in 0..n {
            let named = self.held[cpu as usize].0[i]
                .by_cid
                .map(|p| (p.cmd, p.lba_size));
            if let Some((cmd, lba_size)) = named {
                if self.place(&cmd, lba_size) == Some(here) {
                    at = Some(i);
                    break;
                }
            }
        }
        let (queue, batch_seen) = &mut self.held[cpu as usize];
        *batch_seen = true;
        if queue.is_empty() {
            return;
        }
        let h = queue.remove(at.unwrap_or(0));
        if let (Some(p), Some(_)) = (&h.by_cid, at) {
            out(self.finish_one((*p, Some((h.t, h.done)))));
            return;
        }
        let queue = (h.done.ctrl_id, h.done.qid);
        let real = self
            .by_sector
            .find_mut(&here, |a| (a.key.0, a.key.1) == queue)
            .map(|a| a.key)
            .and_then(|k| self.tracker.take(k));
        match real {
            Some(p) => {
                // The cid was wrong: the command it named is still in flight.
                if let Some(wrong) = h.by_cid {
                    for p in self.tracker.restore(wrong) {
                        out(self.finish_one((p, None)));
                    }
                }
                out(self.finish_one((p, Some((h.t, h.done)))));
            }
            // Not a request we know: keep what the cid said.
            None => self.settle(h, out),
        }
    }

    /// A held completion whose block completion did not come (a retried command, or
    /// block_rq_complete not traced): trust the cid.
    fn release(&mut self, cpu: u32, out: &mut dyn FnMut(NvmeRecord)) {
        if let Some((queue, batch_seen)) = self.held.get_mut(cpu as usize) {
            *batch_seen = false;
            for h in std::mem::take(queue) {
                self.settle(h, out);
            }
        }
    }

    fn settle(&mut self, h: Held, out: &mut dyn FnMut(NvmeRecord)) {
        match h.by_cid {
            Some(p) => out(self.finish_one((p, Some((h.t, h.done))))),
            None => self.tracker.unmatched(h.t, &h.done),
        }
    }

    fn emit(&mut self, fin: &mut Vec<Finished>, out: &mut dyn FnMut(NvmeRecord)) {
        for f in fin.drain(..) {
            out(self.finish_one(f));
        }
    }

    /// The record of a command that left the in-flight map.
    fn finish_one(&mut self, (p, done): Finished) -> NvmeRecord {
        if let Some(pl) = self.place(&p.cmd, p.lba_size) {
            let key = p.key();
            self.by_sector.take_where(&pl, |a| a.key == key);
        }
        NvmeRecord {
            core: CmdTracker::core(&p, done),
            block_ns: p.block,
            candidates: p.candidates,
        }
    }
}

impl Correlator for NvmeCorrelator {
    type Event = HostEvent;
    type Record = NvmeRecord;

    fn on_event(&mut self, ev: &Event<HostEvent>, out: &mut dyn FnMut(NvmeRecord)) {
        match &ev.kind {
            HostEvent::Nvme(NvmeEvent::Cmd(c)) => self.on_cmd(ev.time, c, out),
            HostEvent::Nvme(NvmeEvent::Done(d)) => self.on_done(ev.time, ev.cpu, d, out),
            // A multipath path's completions, once its number is known; until then
            // they teach it. A path not learned yet still ends what this CPU holds, as
            // a known disk's completion does: it settles by its cid at the next one.
            HostEvent::Block(b) if b.kind == BlockKind::Complete && !self.devs.contains(&b.dev) => {
                if b.ends_flush() {
                } else if self.path_devs.contains(&b.dev) || self.learn_path(ev.cpu, b) {
                    self.on_block_complete(ev.cpu, b, out);
                } else if let Some((queue, batch_seen)) = self.held.get_mut(ev.cpu as usize) {
                    *batch_seen |= !queue.is_empty();
                }
            }
            HostEvent::Block(b) if self.devs.contains(&b.dev) => match b.kind {
                // Not a command's: it ends a write in the flush sequence.
                BlockKind::Complete if b.ends_flush() => {}
                BlockKind::Complete => self.on_block_complete(ev.cpu, b, out),
                // Flushes carry no sector range, and nvme flush commands no SLBA.
                BlockKind::BioQueue if b.nr_sector > 0 => {
                    self.blocks.start(ev.time, b.dev, b.sector, StartKind::Bio)
                }
                BlockKind::Insert if b.nr_sector > 0 => {
                    self.blocks
                        .start(ev.time, b.dev, b.sector, StartKind::Insert)
                }
                _ => {}
            },
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut dyn FnMut(NvmeRecord)) {
        for cpu in 0..self.held.len() {
            self.release(cpu as u32, out);
        }
        let mut fin = std::mem::take(&mut self.fin);
        self.tracker.finish(&mut |f| fin.push(f));
        self.emit(&mut fin, out);
        self.fin = fin;
    }

    fn counters(&self) -> Counters {
        self.tracker.counters()
    }

    /// A missing setup leaves its completion `unmatched`; a missing block event, the
    /// command without its block stage (or its completion trusted by cid).
    fn on_missing(&mut self, gap: &Gap<'_>) -> bool {
        self.tracker.on_missing(gap, "nvme_complete_rq");
        true
    }

    fn unmatched_at(&self, t: u64) -> u64 {
        self.tracker.unmatched_log.at(t)
    }

    fn gate(&mut self) -> Option<&mut crate::correlate::gate::Gate> {
        Some(&mut self.tracker.gate)
    }

    /// Each command selected is set up once; the kernel filters the same selection.
    fn starts(&self) -> Option<Starts> {
        self.tracker.gate.steady().then_some(Starts {
            event: "nvme:nvme_setup_cmd",
            again: 0,
        })
    }
}
