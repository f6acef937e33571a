//! The nvme profile: host `nvme_setup_cmd` → `nvme_complete_rq`, keyed by
//! (controller instance, qid, cid), joined with the block events of the same request:
//! the bio/insert before the driver for the time spent there, and the block completion
//! after it to catch completions that carry a wrong command id (see `Held`).
//!
//! Also the machinery the nvmet profile shares (`CmdTracker`): command selection,
//! in-flight map with cid reuse and bounded memory, and the common record fields.

use super::{
    size_class, Cell, Correlator, Counters, EventReq, FxHasher, FxMap, IoRecord, ProfileInfo,
    Status,
};
use crate::decode::block::{BlockEvent, BlockKind};
use crate::decode::nvme::{DiskName, NvmeCmd, NvmeDone, NvmeEvent};
use crate::decode::{Event, EventKind};
use std::collections::HashMap;
use std::hash::Hasher;

/// LBA size assumed when the namespace's is unknown (no sysfs entry for its disk).
pub const DEFAULT_LBA_SIZE: u32 = 512;

pub static INFO: ProfileInfo = ProfileInfo {
    name: "nvme",
    about: "NVMe commands on the host (PCIe or fabrics): block layer → driver setup → completion",
    events: &[
        EventReq {
            system: "nvme",
            event: "nvme_setup_cmd",
            required: true,
            hint: "CONFIG_BLK_DEV_NVME or CONFIG_NVME_FABRICS host driver loaded (modprobe nvme / nvme-tcp)",
        },
        EventReq {
            system: "nvme",
            event: "nvme_complete_rq",
            required: true,
            hint: "CONFIG_BLK_DEV_NVME or CONFIG_NVME_FABRICS host driver loaded (modprobe nvme / nvme-tcp)",
        },
        // Optional: they only add blk_to_driver_ns and total_ns. block_rq_issue is not
        // opened: every nvme driver calls nvme_setup_cmd before blk_mq_start_request,
        // so the issue says nothing about the time before the driver.
        EventReq {
            system: "block",
            event: "block_bio_queue",
            required: false,
            hint: "CONFIG_EVENT_TRACING (every distribution kernel has it)",
        },
        EventReq {
            system: "block",
            event: "block_rq_insert",
            required: false,
            hint: "CONFIG_EVENT_TRACING (every distribution kernel has it)",
        },
        // Optional: checks which request a completion belongs to when the driver
        // reports a wrong command id (see `Held`).
        EventReq {
            system: "block",
            event: "block_rq_complete",
            required: false,
            hint: "CONFIG_EVENT_TRACING (every distribution kernel has it)",
        },
    ],
    columns: &[
        "start_time",
        "start_ns",
        "ctrl",
        "disk",
        "qid",
        "cid",
        "nsid",
        "opcode",
        "slba",
        "bytes",
        "lba_size",
        "size_class",
        "blk_to_driver_ns",
        "driver_ns",
        "total_ns",
        "nvme_status",
        "retries",
        "status",
    ],
    group_columns: &["ctrl", "nsid", "opcode", "size_class"],
    stages: &["blk_to_driver_ns", "driver_ns", "total_ns"],
};

/// Which commands a run keeps; the same rules are also put into the kernel filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CmdSelect {
    /// Host: controller instance (`nvme<N>`); target: cntlid.
    pub ctrl: Option<u32>,
    pub qid: Option<u32>,
    pub nsid: Option<u32>,
    /// Keep admin queue (qid 0) commands; they are skipped by default.
    pub admin: bool,
}

impl CmdSelect {
    /// The ftrace filter for a command event (`nvme_setup_cmd`, `nvmet_req_init`).
    pub fn cmd_filter(&self) -> Option<String> {
        self.filter(true)
    }

    /// The ftrace filter for a completion event: it has no nsid, so that part stays
    /// in user space (the correlator ignores completions of unselected namespaces).
    pub fn done_filter(&self) -> Option<String> {
        self.filter(false)
    }

    fn filter(&self, with_nsid: bool) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(c) = self.ctrl {
            parts.push(format!("ctrl_id == {c}"));
        }
        match self.qid {
            Some(q) => parts.push(format!("qid == {q}")),
            None if !self.admin => parts.push("qid != 0".to_string()),
            None => {}
        }
        if let (true, Some(n)) = (with_nsid, self.nsid) {
            parts.push(format!("nsid == {n}"));
        }
        (!parts.is_empty()).then(|| parts.join(" && "))
    }

    fn keeps_queue(&self, ctrl: u32, qid: u32) -> bool {
        (self.admin || qid != 0)
            && self.ctrl.is_none_or(|c| c == ctrl)
            && self.qid.is_none_or(|q| q == qid)
    }
}

/// Options shared by the nvme and nvmet correlators.
#[derive(Debug, Clone)]
pub struct NvmeConfig {
    pub select: CmdSelect,
    /// LBA size per disk (`nvme0n1`) or device path (`/dev/nullb0`), from sysfs.
    /// Missing disks use [`DEFAULT_LBA_SIZE`].
    pub lba_sizes: HashMap<String, u32>,
    /// Disk name → kernel dev_t, to find a command's block events (nvme profile only).
    pub disk_devs: HashMap<String, u32>,
    /// In-flight commands kept at most; beyond it the oldest are given up.
    pub max_in_flight: usize,
}

impl Default for NvmeConfig {
    fn default() -> Self {
        NvmeConfig {
            select: CmdSelect::default(),
            lba_sizes: HashMap::new(),
            disk_devs: HashMap::new(),
            max_in_flight: 1 << 20,
        }
    }
}

/// One command as both profiles report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdCore {
    /// When the command was submitted (setup / req_init), recording clock.
    pub submit_ns: u64,
    pub ctrl_id: u32,
    pub disk: DiskName,
    pub qid: u32,
    pub cid: u16,
    pub nsid: u32,
    pub opcode: u8,
    pub fctype: u8,
    pub slba: Option<u64>,
    /// Bytes transferred: (NLB + 1) × LBA size; 0 for flush; `None` when the command's
    /// dwords do not say (dsm, admin).
    pub bytes: Option<u64>,
    pub lba_size: u32,
    /// Submission → completion.
    pub cmd_ns: Option<u64>,
    /// `None` while incomplete.
    pub nvme_status: Option<u16>,
    pub retries: Option<u8>,
    pub status: Status,
}

impl CmdCore {
    pub(crate) fn opcode_label(&self) -> std::borrow::Cow<'static, str> {
        match crate::decode::nvme::opcode_name(self.qid, self.opcode, self.fctype) {
            Some(n) => n.into(),
            None => format!("0x{:02x}", self.opcode).into(),
        }
    }

    pub(crate) fn size_label(&self) -> &'static str {
        self.bytes.map_or("", size_class)
    }

    /// Cells from `qid` to `size_class` (shared by both profiles' column lists).
    pub(crate) fn command_cells(&self, out: &mut dyn FnMut(Cell<'_>)) {
        out(Cell::U64(self.qid as u64));
        out(Cell::U64(self.cid as u64));
        out(Cell::U64(self.nsid as u64));
        out(Cell::Str(&self.opcode_label()));
        out(self.slba.into());
        out(self.bytes.into());
        out(Cell::U64(self.lba_size as u64));
        out(Cell::Str(self.size_label()));
    }

    pub(crate) fn status_cell(&self, out: &mut dyn FnMut(Cell<'_>)) {
        match self.nvme_status {
            Some(s) => out(Cell::Str(&format!("{s:#x}"))),
            None => out(Cell::Empty),
        }
    }

    pub(crate) fn group_key(&self) -> u64 {
        let mut h = FxHasher::default();
        h.write_u32(self.ctrl_id);
        h.write_u32(self.nsid);
        h.write_u8(self.opcode);
        h.write_u8(self.fctype);
        h.write_u8((self.qid == 0) as u8);
        h.write(self.size_label().as_bytes());
        h.finish()
    }

    pub(crate) fn group_labels(&self, ctrl: String) -> Vec<String> {
        vec![
            ctrl,
            self.nsid.to_string(),
            self.opcode_label().into_owned(),
            self.size_label().to_string(),
        ]
    }
}

/// One host NVMe command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmeRecord {
    pub core: CmdCore,
    /// First block event of the request (bio queued or request inserted), when traced
    /// and found.
    pub block_ns: Option<u64>,
}

impl NvmeRecord {
    pub fn blk_to_driver_ns(&self) -> Option<u64> {
        self.block_ns.map(|b| self.core.submit_ns.saturating_sub(b))
    }

    pub fn total_ns(&self) -> Option<u64> {
        match (self.block_ns, self.core.cmd_ns) {
            (Some(b), Some(c)) => Some(self.core.submit_ns.saturating_add(c).saturating_sub(b)),
            _ => None,
        }
    }
}

impl IoRecord for NvmeRecord {
    /// The first block event when it was joined, else the driver's setup.
    fn start_ns(&self) -> u64 {
        self.block_ns.unwrap_or(self.core.submit_ns)
    }

    fn cells(&self, out: &mut dyn FnMut(Cell<'_>)) {
        let c = &self.core;
        out(Cell::Str(&format!("nvme{}", c.ctrl_id)));
        out(Cell::Str(c.disk.as_str()));
        c.command_cells(out);
        out(self.blk_to_driver_ns().into());
        out(c.cmd_ns.into());
        out(self.total_ns().into());
        c.status_cell(out);
        out(c.retries.map(u64::from).into());
        out(Cell::Str(c.status.as_str()));
    }

    fn group_key(&self) -> u64 {
        self.core.group_key()
    }

    fn group_labels(&self) -> Vec<String> {
        self.core.group_labels(format!("nvme{}", self.core.ctrl_id))
    }

    fn stage(&self, i: usize) -> Option<u64> {
        match i {
            0 => self.blk_to_driver_ns(),
            1 => self.core.cmd_ns,
            2 => self.total_ns(),
            _ => None,
        }
    }

    fn status(&self) -> Status {
        self.core.status
    }
}

/// A submitted command waiting for its completion.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) submit: u64,
    pub(crate) cmd: NvmeCmd,
    pub(crate) block: Option<u64>,
    pub(crate) lba_size: u32,
}

impl Pending {
    pub(crate) fn key(&self) -> Key {
        (self.cmd.ctrl_id, self.cmd.qid, self.cmd.cid)
    }
}

/// (controller, qid, cid): unique among the commands in flight.
pub(crate) type Key = (u32, u32, u16);

/// What a completion's key found.
pub(crate) enum Claim {
    /// Not selected (--ctrl, --qid, admin queue): not ours to count.
    Ignored,
    Found(Pending),
    Missing,
}

/// What the tracker hands back: a command that completed (with its completion) or was
/// given up (`None`).
pub(crate) type Finished = (Pending, Option<(u64, NvmeDone)>);

/// The command/completion matching both profiles use.
pub(crate) struct CmdTracker {
    pub(crate) cfg: NvmeConfig,
    pending: FxMap<Key, Pending>,
    /// Disks of selected commands: with `--nsid`, a completion on another disk belongs
    /// to an unselected namespace (completions carry no nsid) and is not "unmatched".
    nsid_disks: Vec<DiskName>,
    lba_cache: FxMap<DiskName, u32>,
    pub(crate) counters: Counters,
    /// Target only: match a completion to a command recorded with ctrl_id 0 (see
    /// `complete`). Never on the host, where controller instance 0 is `nvme0`.
    pub(crate) ctrl0_fallback: bool,
}

impl CmdTracker {
    pub(crate) fn new(cfg: NvmeConfig) -> CmdTracker {
        CmdTracker {
            cfg,
            pending: FxMap::default(),
            nsid_disks: Vec::new(),
            lba_cache: FxMap::default(),
            counters: Counters::default(),
            ctrl0_fallback: false,
        }
    }

    /// The LBA size of a disk or device path, from the config (sysfs), else the default.
    pub(crate) fn lba_size(&mut self, disk: &DiskName) -> u32 {
        if let Some(s) = self.lba_cache.get(disk) {
            return *s;
        }
        let name = disk.as_str();
        let sizes = &self.cfg.lba_sizes;
        let s = sizes
            .get(name)
            .or_else(|| name.strip_prefix("/dev/").and_then(|n| sizes.get(n)))
            .copied()
            .unwrap_or(DEFAULT_LBA_SIZE);
        self.lba_cache.insert(*disk, s);
        s
    }

    /// A submitted command; `block` is its first block event when the caller found one.
    pub(crate) fn submit(
        &mut self,
        t: u64,
        cmd: &NvmeCmd,
        block: Option<u64>,
        out: &mut dyn FnMut(Finished),
    ) {
        let key = (cmd.ctrl_id, cmd.qid, cmd.cid);
        let p = Pending {
            submit: t,
            cmd: *cmd,
            block,
            lba_size: self.lba_size(&cmd.disk),
        };
        if let Some(old) = self.pending.insert(key, p) {
            // The same command id started again while we still held the previous
            // command: its completion was lost (or never traced). Give the old one up
            // so each row stays one command, and count why.
            self.counters.requeued += 1;
            self.counters.incomplete += 1;
            out((old, None));
        } else if self.pending.len() > self.cfg.max_in_flight {
            self.evict(out);
        }
        self.counters.in_flight = self.pending.len() as u64;
    }

    /// Whether a command passes the selection (and learn its disk for completions).
    pub(crate) fn selected(&mut self, cmd: &NvmeCmd) -> bool {
        if !self.cfg.select.keeps_queue(cmd.ctrl_id, cmd.qid) {
            return false;
        }
        if let Some(n) = self.cfg.select.nsid {
            if cmd.nsid != n {
                return false;
            }
            if !self.nsid_disks.contains(&cmd.disk) {
                self.nsid_disks.push(cmd.disk);
            }
        }
        true
    }

    pub(crate) fn complete(&mut self, t: u64, done: &NvmeDone, out: &mut dyn FnMut(Finished)) {
        match self.claim(done) {
            Claim::Found(p) => out((p, Some((t, *done)))),
            Claim::Missing => self.unmatched(done),
            Claim::Ignored => {}
        }
    }

    /// Take the command a completion belongs to, by its key.
    pub(crate) fn claim(&mut self, done: &NvmeDone) -> Claim {
        if !self.cfg.select.keeps_queue(done.ctrl_id, done.qid) {
            return Claim::Ignored;
        }
        let key = (done.ctrl_id, done.qid, done.cid);
        let mut found = self.pending.remove(&key);
        if found.is_none() && self.ctrl0_fallback && done.ctrl_id != 0 {
            // The target records ctrl_id 0 at req_init for commands that arrive before
            // the association exists (connect) and the new cntlid at completion.
            found = self.pending.remove(&(0, done.qid, done.cid));
        }
        self.counters.in_flight = self.pending.len() as u64;
        found.map_or(Claim::Missing, Claim::Found)
    }

    /// Take a command by its key (a completion matched another way).
    pub(crate) fn take(&mut self, key: Key) -> Option<Pending> {
        let p = self.pending.remove(&key);
        self.counters.in_flight = self.pending.len() as u64;
        p
    }

    /// Put back a command taken by a completion that turned out not to be its own.
    pub(crate) fn restore(&mut self, p: Pending) {
        self.pending.insert(p.key(), p);
        self.counters.in_flight = self.pending.len() as u64;
    }

    /// A completion no command was found for.
    pub(crate) fn unmatched(&mut self, done: &NvmeDone) {
        // With --nsid, a completion on another disk belongs to an unselected namespace.
        let other_ns = self.cfg.select.nsid.is_some() && !self.nsid_disks.contains(&done.disk);
        if !other_ns {
            self.counters.unmatched += 1;
        }
    }

    /// Give up the oldest quarter of the commands in flight, so memory stays bounded
    /// and eviction is amortised over many submissions.
    fn evict(&mut self, out: &mut dyn FnMut(Finished)) {
        let mut starts: Vec<u64> = self.pending.values().map(|p| p.submit).collect();
        let idx = starts.len() / 4;
        let (_, cut, _) = starts.select_nth_unstable(idx);
        let cut = *cut;
        let mut old: Vec<(Key, Pending)> = self
            .pending
            .iter()
            .filter(|(_, p)| p.submit <= cut)
            .map(|(k, p)| (*k, *p))
            .collect();
        old.sort_by_key(|(_, p)| p.submit);
        for (k, p) in old {
            self.pending.remove(&k);
            self.counters.incomplete += 1;
            out((p, None));
        }
    }

    /// Give up everything in flight (end of run), oldest first.
    pub(crate) fn finish(&mut self, out: &mut dyn FnMut(Finished)) {
        let mut left: Vec<Pending> = self.pending.drain().map(|(_, p)| p).collect();
        left.sort_by_key(|p| p.submit);
        for p in left {
            self.counters.incomplete += 1;
            out((p, None));
        }
        self.counters.in_flight = 0;
    }

    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// The record fields both profiles share.
    pub(crate) fn core(p: &Pending, done: Option<(u64, NvmeDone)>) -> CmdCore {
        let c = &p.cmd;
        let lba_size = p.lba_size;
        let (slba, bytes) = match c.lba_range() {
            Some((slba, blocks)) => (Some(slba), Some(blocks as u64 * lba_size as u64)),
            // Flush moves no data; other commands' sizes are not in their dwords.
            None if c.qid != 0 && c.opcode == 0x00 => (None, Some(0)),
            None => (None, None),
        };
        let (cmd_ns, nvme_status, retries, status) = match done {
            Some((t, d)) => (
                Some(t.saturating_sub(p.submit)),
                Some(d.status),
                Some(d.retries),
                if d.status == 0 {
                    Status::Ok
                } else {
                    Status::Error
                },
            ),
            None => (None, None, None, Status::Incomplete),
        };
        CmdCore {
            submit_ns: p.submit,
            ctrl_id: c.ctrl_id,
            disk: c.disk,
            qid: c.qid,
            cid: c.cid,
            nsid: c.nsid,
            opcode: c.opcode,
            fctype: c.fctype,
            slba,
            bytes,
            lba_size,
            cmd_ns,
            nvme_status,
            retries,
            status,
        }
    }
}

/// Block events waiting for their command, by (dev, sector). Not I/Os of their own:
/// an entry that never meets a command (a bio merged into another request, a split
/// bio's tail, another disk's I/O) only means an empty `blk_to_driver_ns`.
struct BlockStarts {
    map: FxMap<(u32, u64), (u64, BlockKind)>,
    max: usize,
}

impl BlockStarts {
    fn on_block(&mut self, t: u64, e: &BlockEvent) {
        // Flushes carry no sector range, and nvme flush commands no SLBA to join on.
        if e.nr_sector == 0 || !matches!(e.kind, BlockKind::BioQueue | BlockKind::Insert) {
            return;
        }
        let key = (e.dev, e.sector);
        match self.map.get(&key) {
            // The request of a bio already queued: the bio is the earlier start.
            Some((_, BlockKind::BioQueue)) if e.kind == BlockKind::Insert => return,
            _ => {}
        }
        if self.map.len() >= self.max {
            self.trim();
        }
        self.map.insert(key, (t, e.kind));
    }

    /// Drop the older half: stale entries are the ones that never met a command.
    fn trim(&mut self) {
        let mut times: Vec<u64> = self.map.values().map(|(t, _)| *t).collect();
        let idx = times.len() / 2;
        let (_, cut, _) = times.select_nth_unstable(idx);
        let cut = *cut;
        self.map.retain(|_, (t, _)| *t > cut);
    }

    fn take(&mut self, dev: u32, sector: u64, not_after: u64) -> Option<u64> {
        let (t, _) = self.map.remove(&(dev, sector))?;
        (t <= not_after).then_some(t)
    }
}

/// A host completion waiting for the `block_rq_complete` that the driver emits right
/// after it on the same CPU.
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

pub struct NvmeCorrelator {
    tracker: CmdTracker,
    blocks: BlockStarts,
    /// dev_t of the disks whose block events are joined.
    devs: Vec<u32>,
    dev_cache: FxMap<DiskName, Option<u32>>,
    /// (dev, sector) of the commands in flight that have one, for `Held`.
    by_sector: FxMap<(u32, u64), Key>,
    /// Per CPU: the completion waiting for its block completion.
    held: Vec<Option<Held>>,
    /// Reused between events so that handing records out allocates nothing.
    fin: Vec<Finished>,
}

impl NvmeCorrelator {
    pub fn new(cfg: NvmeConfig) -> NvmeCorrelator {
        let devs = cfg.disk_devs.values().copied().collect();
        let max = cfg.max_in_flight.clamp(1024, 1 << 20);
        NvmeCorrelator {
            tracker: CmdTracker::new(cfg),
            blocks: BlockStarts {
                map: FxMap::default(),
                max,
            },
            devs,
            dev_cache: FxMap::default(),
            by_sector: FxMap::default(),
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

    /// The (dev, sector) of a command's first block, when it has one on a known disk.
    fn place(&mut self, cmd: &NvmeCmd, lba_size: u32) -> Option<(u32, u64)> {
        let (slba, _) = cmd.lba_range()?;
        let dev = self.dev_of(&cmd.disk)?;
        // Block events count 512-byte sectors whatever the LBA size.
        // Wrapping: a garbage SLBA must not panic; it then just joins nothing.
        Some((dev, slba.wrapping_mul((lba_size as u64 / 512).max(1))))
    }

    fn on_cmd(&mut self, t: u64, cmd: &NvmeCmd, out: &mut dyn FnMut(NvmeRecord)) {
        if !self.tracker.selected(cmd) {
            return;
        }
        let lba_size = self.tracker.lba_size(&cmd.disk);
        let place = self.place(cmd, lba_size);
        let block = place.and_then(|(dev, sector)| self.blocks.take(dev, sector, t));
        if let Some(pl) = place {
            self.by_sector.insert(pl, (cmd.ctrl_id, cmd.qid, cmd.cid));
        }
        let mut fin = std::mem::take(&mut self.fin);
        self.tracker.submit(t, cmd, block, &mut |f| fin.push(f));
        self.emit(&mut fin, out);
        self.fin = fin;
    }

    fn on_done(&mut self, t: u64, cpu: u32, done: &NvmeDone, out: &mut dyn FnMut(NvmeRecord)) {
        self.release(cpu, out);
        let by_cid = match self.tracker.claim(done) {
            Claim::Ignored => return,
            Claim::Found(p) => Some(p),
            Claim::Missing => None,
        };
        let verifiable = match &by_cid {
            Some(p) => self.place(&p.cmd, p.lba_size).is_some(),
            None => true,
        };
        if self.devs.is_empty() || !verifiable {
            // No block completion will come to check against (no known disk, or a
            // command without a sector range): the cid is all there is.
            match by_cid {
                Some(p) => out(self.finish_one((p, Some((t, *done))))),
                None => self.tracker.unmatched(done),
            }
            return;
        }
        let slot = cpu as usize;
        if self.held.len() <= slot {
            self.held.resize(slot + 1, None);
        }
        self.held[slot] = Some(Held {
            t,
            done: *done,
            by_cid,
        });
    }

    /// The block completion of the request a held completion belongs to.
    fn on_block_complete(&mut self, cpu: u32, e: &BlockEvent, out: &mut dyn FnMut(NvmeRecord)) {
        let Some(h) = self.held.get_mut(cpu as usize).and_then(Option::take) else {
            return;
        };
        let here = (e.dev, e.sector);
        if let Some(p) = &h.by_cid {
            if self.place(&p.cmd, p.lba_size) == Some(here) {
                out(self.finish_one((*p, Some((h.t, h.done)))));
                return;
            }
        }
        let real = self
            .by_sector
            .get(&here)
            .copied()
            .filter(|k| (k.0, k.1) == (h.done.ctrl_id, h.done.qid))
            .and_then(|k| self.tracker.take(k));
        match real {
            Some(p) => {
                // The cid was wrong: the command it named is still in flight.
                if let Some(wrong) = h.by_cid {
                    self.tracker.restore(wrong);
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
        if let Some(h) = self.held.get_mut(cpu as usize).and_then(Option::take) {
            self.settle(h, out);
        }
    }

    fn settle(&mut self, h: Held, out: &mut dyn FnMut(NvmeRecord)) {
        match h.by_cid {
            Some(p) => out(self.finish_one((p, Some((h.t, h.done))))),
            None => self.tracker.unmatched(&h.done),
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
            if self.by_sector.get(&pl) == Some(&p.key()) {
                self.by_sector.remove(&pl);
            }
        }
        NvmeRecord {
            core: CmdTracker::core(&p, done),
            block_ns: p.block,
        }
    }
}

impl Correlator for NvmeCorrelator {
    type Record = NvmeRecord;

    fn info(&self) -> &'static ProfileInfo {
        &INFO
    }

    fn on_event(&mut self, ev: &Event, out: &mut dyn FnMut(NvmeRecord)) {
        match &ev.kind {
            EventKind::Nvme(NvmeEvent::Cmd(c)) => self.on_cmd(ev.time, c, out),
            EventKind::Nvme(NvmeEvent::Done(d)) => self.on_done(ev.time, ev.cpu, d, out),
            EventKind::Block(b) if self.devs.contains(&b.dev) => match b.kind {
                BlockKind::Complete => self.on_block_complete(ev.cpu, b, out),
                _ => self.blocks.on_block(ev.time, b),
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
        self.tracker.counters
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::decode::Decoder;
    use crate::order::Sorter;
    use crate::synth::RecordBuilder;
    use crate::tracefs::{EventFormat, Tracefs};

    /// The formats captured from the 6.1 guest of the VM rig (tests/vm), checked in
    /// under `tracefs/<uname -r>/`: samples are laid out exactly as that kernel does.
    pub(crate) fn guest_tracefs() -> Tracefs {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tracefs");
        let mut dirs: Vec<_> = std::fs::read_dir(&root)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        dirs.sort();
        let dir = dirs
            .into_iter()
            .find(|d| {
                d.file_name().is_some_and(|n| n.to_string_lossy().starts_with("6.1."))
                    && d.join("events/nvme/nvme_setup_cmd/format").is_file()
                    && d.join("events/nvmet/nvmet_req_init/format").is_file()
            })
            .unwrap_or_else(|| {
                panic!(
                    "no 6.1 guest formats with nvme and nvmet events under {}: capture them with \
                     tests/vm/run.sh tests/vm/guest/capture-formats.sh OUT and copy OUT/tracefs/* there",
                    root.display()
                )
            });
        Tracefs::at(&dir).unwrap()
    }

    pub(crate) const NVME_DEV: u32 = 259 << 20;

    pub(crate) struct Formats {
        pub(crate) setup: EventFormat,
        pub(crate) done: EventFormat,
        pub(crate) bio: EventFormat,
        pub(crate) insert: EventFormat,
        pub(crate) complete: EventFormat,
        pub(crate) decoder: Decoder,
    }

    pub(crate) fn formats() -> Formats {
        let tfs = guest_tracefs();
        let mut decoder = Decoder::new();
        for (s, e) in [
            ("nvme", "nvme_setup_cmd"),
            ("nvme", "nvme_complete_rq"),
            ("block", "block_bio_queue"),
            ("block", "block_rq_insert"),
            ("block", "block_rq_complete"),
        ] {
            decoder.add(&tfs, s, e).unwrap();
        }
        Formats {
            setup: tfs.event("nvme", "nvme_setup_cmd").unwrap(),
            done: tfs.event("nvme", "nvme_complete_rq").unwrap(),
            bio: tfs.event("block", "block_bio_queue").unwrap(),
            insert: tfs.event("block", "block_rq_insert").unwrap(),
            complete: tfs.event("block", "block_rq_complete").unwrap(),
            decoder,
        }
    }

    /// cdw10..15 of a read/write: SLBA in dwords 10-11, 0-based NLB in dword 12.
    pub(crate) fn rw_dwords(slba: u64, blocks: u32) -> [u8; 24] {
        let mut c = [0u8; 24];
        c[..8].copy_from_slice(&slba.to_le_bytes());
        c[8..10].copy_from_slice(&((blocks - 1) as u16).to_le_bytes());
        c[12..16].copy_from_slice(&0xdead_beefu32.to_le_bytes()); // cdw13: must be ignored
        c
    }

    pub(crate) fn cmd_raw(
        fmt: &EventFormat,
        (ctrl, qid, cid): (u64, u64, u64),
        opcode: u64,
        nsid: u64,
        cdw: &[u8; 24],
        disk: &[u8],
    ) -> Vec<u8> {
        RecordBuilder::new(fmt)
            .int("ctrl_id", ctrl)
            .int("qid", qid)
            .int("cid", cid)
            .int("opcode", opcode)
            .int("nsid", nsid)
            .int("flags", 0x40)
            .bytes("cdw10", cdw)
            .bytes("disk", disk)
            .build()
    }

    pub(crate) fn done_raw(
        fmt: &EventFormat,
        ctrl: u64,
        qid: u64,
        cid: u64,
        status: u64,
        disk: &[u8],
    ) -> Vec<u8> {
        RecordBuilder::new(fmt)
            .int("ctrl_id", ctrl)
            .int("qid", qid)
            .int("cid", cid)
            .int("status", status)
            .int("result", 0)
            .bytes("disk", disk)
            .build()
    }

    fn block_raw(fmt: &EventFormat, sector: u64, nr: u64, rwbs: &[u8]) -> Vec<u8> {
        RecordBuilder::new(fmt)
            .int("dev", NVME_DEV as u64)
            .int("sector", sector)
            .int("nr_sector", nr)
            .bytes("rwbs", rwbs)
            .build()
    }

    fn config(lba: u32) -> NvmeConfig {
        NvmeConfig {
            lba_sizes: [("nvme0n1".to_string(), lba)].into(),
            disk_devs: [("nvme0n1".to_string(), NVME_DEV)].into(),
            ..Default::default()
        }
    }

    fn run_on(
        f: &Formats,
        cfg: NvmeConfig,
        samples: &[(u64, u32, Vec<u8>)],
    ) -> (Vec<NvmeRecord>, Counters) {
        let mut c = NvmeCorrelator::new(cfg);
        let mut out = Vec::new();
        for (t, cpu, raw) in samples {
            let ev = f
                .decoder
                .decode(raw, *t, *cpu)
                .unwrap()
                .expect("bound event");
            c.on_event(&ev, &mut |r| out.push(r));
        }
        c.finish(&mut |r| out.push(r));
        (out, c.counters())
    }

    fn rq_done_raw(fmt: &EventFormat, sector: u64, nr: u64) -> Vec<u8> {
        RecordBuilder::new(fmt)
            .int("dev", NVME_DEV as u64)
            .int("sector", sector)
            .int("nr_sector", nr)
            .int("error", 0)
            .bytes("rwbs", b"WS")
            .dynamic("cmd", b"\0")
            .build()
    }

    /// 6.1 NVMe/TCP: a write that needed an R2T completes with the target's transfer
    /// tag where the cid should be. The block completion right after it on the same
    /// CPU names the request.
    #[test]
    fn a_wrong_cid_is_corrected_by_the_block_completion() {
        let f = formats();
        let w = |slba| rw_dwords(slba, 256);
        let (r, c) = run_on(
            &f,
            config(512),
            &[
                (
                    10,
                    0,
                    cmd_raw(&f.setup, (0, 1, 0x2029), 0x01, 1, &w(0), b"nvme0n1"),
                ),
                (
                    20,
                    1,
                    cmd_raw(&f.setup, (0, 1, 0x0005), 0x01, 1, &w(4096), b"nvme0n1"),
                ),
                // cid 0x0003 (a ttag) names nothing: still 0x2029's completion.
                (100, 0, done_raw(&f.done, 0, 1, 0x0003, 0, b"nvme0n1")),
                (101, 0, rq_done_raw(&f.complete, 0, 256)),
                // cid 0x2029 is free again; a ttag of 5 names the *other* command in
                // flight, but the block completion says sector 8192... of the third one.
                (
                    110,
                    0,
                    cmd_raw(&f.setup, (0, 1, 0x3029), 0x01, 1, &w(8192), b"nvme0n1"),
                ),
                (200, 1, done_raw(&f.done, 0, 1, 0x0005, 0, b"nvme0n1")),
                (201, 1, rq_done_raw(&f.complete, 8192, 256)),
                // Then 0x0005 completes with its right cid.
                (300, 0, done_raw(&f.done, 0, 1, 0x0005, 0, b"nvme0n1")),
                (301, 0, rq_done_raw(&f.complete, 4096, 256)),
            ],
        );
        assert_eq!(c, Counters::default(), "nothing unmatched or given up");
        let got: Vec<(u16, Option<u64>, u64)> = r
            .iter()
            .map(|r| (r.core.cid, r.core.slba, r.core.cmd_ns.unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                (0x2029, Some(0), 90),
                (0x3029, Some(8192), 90),
                (0x0005, Some(4096), 280)
            ]
        );
    }

    #[test]
    fn without_a_block_completion_the_cid_is_trusted() {
        let f = formats();
        let (r, c) = run_on(
            &f,
            config(512),
            &[
                (
                    10,
                    0,
                    cmd_raw(&f.setup, (0, 1, 7), 0x02, 1, &rw_dwords(0, 8), b"nvme0n1"),
                ),
                (
                    20,
                    0,
                    cmd_raw(&f.setup, (0, 1, 8), 0x02, 1, &rw_dwords(8, 8), b"nvme0n1"),
                ),
                // A failed attempt the driver retries: no block completion follows.
                (30, 0, done_raw(&f.done, 0, 1, 7, 0x0370, b"nvme0n1")),
                (40, 0, done_raw(&f.done, 0, 1, 8, 0, b"nvme0n1")),
                (41, 0, rq_done_raw(&f.complete, 8, 8)),
            ],
        );
        assert_eq!(c, Counters::default());
        assert_eq!((r[0].core.cid, r[0].status()), (7, Status::Error));
        assert_eq!((r[1].core.cid, r[1].core.cmd_ns), (8, Some(20)));
    }

    /// Decode raw samples `(time, raw)` with the real layouts and correlate them.
    fn run(
        f: &Formats,
        cfg: NvmeConfig,
        samples: &[(u64, Vec<u8>)],
    ) -> (Vec<NvmeRecord>, Counters) {
        let mut c = NvmeCorrelator::new(cfg);
        let mut out = Vec::new();
        for (t, raw) in samples {
            let ev = f.decoder.decode(raw, *t, 0).unwrap().expect("bound event");
            c.on_event(&ev, &mut |r| out.push(r));
        }
        c.finish(&mut |r| out.push(r));
        (out, c.counters())
    }

    fn cells(r: &dyn IoRecord) -> Vec<String> {
        let mut v = Vec::new();
        r.cells(&mut |c| {
            v.push(match c {
                Cell::U64(x) => x.to_string(),
                Cell::I64(x) => x.to_string(),
                Cell::Str(s) => s.to_string(),
                Cell::Empty => String::new(),
            })
        });
        v
    }

    #[test]
    fn real_6_1_layouts_have_the_expected_field_types() {
        let f = formats();
        let ty = |fmt: &EventFormat, n: &str| {
            let fl = fmt.field(n).unwrap();
            (fl.type_name.clone(), fl.size)
        };
        assert_eq!(ty(&f.setup, "cid"), ("u16".into(), 2));
        assert_eq!(ty(&f.done, "cid"), ("int".into(), 4));
        assert_eq!(ty(&f.setup, "cdw10"), ("u8".into(), 24));
        assert_eq!(ty(&f.setup, "disk"), ("char".into(), 32));
        assert_eq!(ty(&f.done, "status"), ("u16".into(), 2));
    }

    #[test]
    fn read_joined_with_its_bio_gives_every_field_and_stage() {
        let f = formats();
        let cdw = rw_dwords(2048, 8);
        let (r, c) = run(
            &f,
            config(512),
            &[
                (1_000, block_raw(&f.bio, 2048, 8, b"R")),
                (
                    1_700,
                    cmd_raw(&f.setup, (0, 2, 0x1005), 0x02, 1, &cdw, b"nvme0n1"),
                ),
                (9_700, done_raw(&f.done, 0, 2, 0x1005, 0, b"nvme0n1")),
            ],
        );
        assert_eq!(c, Counters::default());
        assert_eq!(r.len(), 1);
        let r = &r[0];
        assert_eq!(r.start_ns(), 1_000);
        assert_eq!(
            (r.blk_to_driver_ns(), r.core.cmd_ns, r.total_ns()),
            (Some(700), Some(8_000), Some(8_700))
        );
        assert_eq!(r.status(), Status::Ok);
        assert_eq!(
            cells(r),
            [
                "nvme0", "nvme0n1", "2", "4101", "1", "read", "2048", "4096", "512", "<=4k", "700",
                "8000", "8700", "0x0", "0", "ok"
            ]
        );
        assert_eq!(cells(r).len() + 2, INFO.columns.len());
        assert_eq!(r.group_labels(), ["nvme0", "1", "read", "<=4k"]);
    }

    #[test]
    fn write_on_4k_lba_scales_bytes_and_sector() {
        let f = formats();
        // 32 LBAs of 4 KiB at LBA 100 = 128 KiB at 512-byte sector 800; the request
        // was inserted (a scheduler), no bio event traced.
        let cdw = rw_dwords(100, 32);
        let (r, _) = run(
            &f,
            config(4096),
            &[
                (10, block_raw(&f.insert, 800, 256, b"WS")),
                (50, cmd_raw(&f.setup, (0, 1, 7), 0x01, 1, &cdw, b"nvme0n1")),
                (450, done_raw(&f.done, 0, 1, 7, 0, b"nvme0n1")),
            ],
        );
        let c = &r[0].core;
        assert_eq!(
            (c.slba, c.bytes, c.lba_size),
            (Some(100), Some(131_072), 4096)
        );
        assert_eq!(
            cells(&r[0])[5..10],
            ["write", "100", "131072", "4096", "<=128k"]
        );
        assert_eq!(r[0].blk_to_driver_ns(), Some(40));
    }

    #[test]
    fn unknown_disk_assumes_512_and_has_no_block_stage() {
        let f = formats();
        let cdw = rw_dwords(8, 1);
        let (r, _) = run(
            &f,
            NvmeConfig::default(),
            &[
                (10, block_raw(&f.bio, 8, 1, b"R")),
                (50, cmd_raw(&f.setup, (1, 1, 7), 0x02, 1, &cdw, b"nvme1n1")),
                (90, done_raw(&f.done, 1, 1, 7, 0, b"nvme1n1")),
            ],
        );
        assert_eq!((r[0].core.bytes, r[0].core.lba_size), (Some(512), 512));
        assert_eq!((r[0].blk_to_driver_ns(), r[0].total_ns()), (None, None));
        let cl = cells(&r[0]);
        assert_eq!(
            (cl[10].as_str(), cl[12].as_str()),
            ("", ""),
            "no stage: empty cells"
        );
    }

    #[test]
    fn flush_has_no_range_and_zero_bytes() {
        let f = formats();
        let (r, _) = run(
            &f,
            config(512),
            &[
                (
                    10,
                    cmd_raw(&f.setup, (0, 1, 3), 0x00, 1, &[0; 24], b"nvme0n1"),
                ),
                (20, done_raw(&f.done, 0, 1, 3, 0, b"nvme0n1")),
            ],
        );
        let cl = cells(&r[0]);
        assert_eq!(cl[5..10], ["flush", "", "0", "512", "0"]);
    }

    #[test]
    fn error_status_is_reported_not_hidden() {
        let f = formats();
        let cdw = rw_dwords(0, 8);
        // 0x4002: DNR + Invalid Field in Command.
        let (r, c) = run(
            &f,
            config(512),
            &[
                (10, cmd_raw(&f.setup, (0, 1, 3), 0x02, 1, &cdw, b"nvme0n1")),
                (20, done_raw(&f.done, 0, 1, 3, 0x4002, b"nvme0n1")),
            ],
        );
        assert_eq!(r[0].status(), Status::Error);
        assert_eq!(r[0].core.nvme_status, Some(0x4002));
        let cl = cells(&r[0]);
        assert_eq!((cl[13].as_str(), cl[15].as_str()), ("0x4002", "error"));
        assert_eq!(c.unmatched, 0);
    }

    #[test]
    fn a_reused_cid_replaces_the_command_in_flight_and_is_counted() {
        let f = formats();
        let cdw = rw_dwords(0, 8);
        let (r, c) = run(
            &f,
            config(512),
            &[
                (10, cmd_raw(&f.setup, (0, 1, 9), 0x02, 1, &cdw, b"nvme0n1")),
                // Its completion was lost; the cid comes back for a write.
                (50, cmd_raw(&f.setup, (0, 1, 9), 0x01, 1, &cdw, b"nvme0n1")),
                (80, done_raw(&f.done, 0, 1, 9, 0, b"nvme0n1")),
            ],
        );
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].status(), r[0].core.opcode),
            (Status::Incomplete, 0x02)
        );
        assert_eq!(r[0].core.cmd_ns, None);
        assert_eq!(
            cells(&r[0])[13],
            "",
            "no NVMe status for an incomplete command"
        );
        assert_eq!(
            (r[1].status(), r[1].core.opcode, r[1].core.cmd_ns),
            (Status::Ok, 0x01, Some(30))
        );
        assert_eq!(
            (c.requeued, c.incomplete, c.unmatched, c.in_flight),
            (1, 1, 0, 0)
        );
    }

    #[test]
    fn admin_queue_is_skipped_unless_asked() {
        let f = formats();
        let ka = [
            (10, cmd_raw(&f.setup, (0, 0, 1), 0x18, 0, &[0; 24], b"")),
            (20, done_raw(&f.done, 0, 0, 1, 0, b"")),
        ];
        let (r, c) = run(&f, config(512), &ka);
        assert!(r.is_empty());
        assert_eq!(c, Counters::default(), "skipped, not unmatched");
        let mut cfg = config(512);
        cfg.select.admin = true;
        let (r, _) = run(&f, cfg, &ka);
        let cl = cells(&r[0]);
        assert_eq!(
            (cl[1].as_str(), cl[2].as_str(), cl[5].as_str()),
            ("", "0", "keep_alive")
        );
        assert_eq!(
            (cl[6].as_str(), cl[7].as_str(), cl[9].as_str()),
            ("", "", "")
        );
    }

    #[test]
    fn completion_read_before_setup_across_cpus_is_ordered_by_the_sorter() {
        let f = formats();
        let cdw = rw_dwords(64, 8);
        let setup = cmd_raw(&f.setup, (0, 1, 5), 0x02, 1, &cdw, b"nvme0n1");
        let done = done_raw(&f.done, 0, 1, 5, 0, b"nvme0n1");
        let mut sorter = Sorter::new();
        // CPU 1's ring is drained first and holds the completion; CPU 0 the setup.
        sorter.begin_round(50);
        sorter.push(1, 300, f.decoder.decode(&done, 300, 1).unwrap().unwrap());
        sorter.push(0, 100, f.decoder.decode(&setup, 100, 0).unwrap().unwrap());
        let mut c = NvmeCorrelator::new(config(512));
        let mut out = Vec::new();
        sorter.end_round(|_, ev| c.on_event(&ev, &mut |r| out.push(r)));
        sorter.begin_round(200);
        sorter.end_round(|_, ev| c.on_event(&ev, &mut |r| out.push(r)));
        assert!(out.is_empty(), "only the setup is released yet");
        sorter.flush(|_, ev| c.on_event(&ev, &mut |r| out.push(r)));
        c.finish(&mut |r| out.push(r));
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].core.cmd_ns, out[0].status()),
            (Some(200), Status::Ok)
        );
        assert_eq!(c.counters(), Counters::default());
    }

    #[test]
    fn unmatched_completion_is_counted() {
        let f = formats();
        let (r, c) = run(
            &f,
            config(512),
            &[
                (5, done_raw(&f.done, 0, 1, 77, 0, b"nvme0n1")),
                (
                    6,
                    cmd_raw(&f.setup, (0, 1, 78), 0x02, 1, &rw_dwords(0, 1), b"nvme0n1"),
                ),
                // Same qid and cid on controller nvme1: not nvme0's command.
                (7, done_raw(&f.done, 1, 1, 78, 0, b"nvme1n1")),
            ],
        );
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].status(), r[0].core.ctrl_id), (Status::Incomplete, 0));
        assert_eq!((c.unmatched, c.incomplete), (2, 1));
    }

    #[test]
    fn selection_by_ctrl_qid_nsid() {
        let f = formats();
        let cdw = rw_dwords(0, 1);
        let samples = [
            (1, cmd_raw(&f.setup, (0, 1, 1), 0x02, 1, &cdw, b"nvme0n1")),
            (2, cmd_raw(&f.setup, (0, 1, 2), 0x02, 2, &cdw, b"nvme0n2")),
            (3, cmd_raw(&f.setup, (1, 2, 3), 0x02, 1, &cdw, b"nvme1n1")),
            (4, done_raw(&f.done, 0, 1, 1, 0, b"nvme0n1")),
            (5, done_raw(&f.done, 0, 1, 2, 0, b"nvme0n2")),
            (6, done_raw(&f.done, 1, 2, 3, 0, b"nvme1n1")),
        ];
        let pick = |s: CmdSelect| {
            let mut cfg = config(512);
            cfg.select = s;
            let (r, c) = run(&f, cfg, &samples);
            (
                r.iter().map(|r| r.core.cid).collect::<Vec<_>>(),
                c.unmatched,
            )
        };
        assert_eq!(pick(CmdSelect::default()), (vec![1, 2, 3], 0));
        let nsid2 = CmdSelect {
            nsid: Some(2),
            ..Default::default()
        };
        assert_eq!(
            pick(nsid2),
            (vec![2], 0),
            "other namespaces' completions are not unmatched"
        );
        assert_eq!(
            pick(CmdSelect {
                ctrl: Some(1),
                ..Default::default()
            }),
            (vec![3], 0)
        );
        assert_eq!(
            pick(CmdSelect {
                qid: Some(1),
                ..Default::default()
            }),
            (vec![1, 2], 0)
        );
    }

    #[test]
    fn kernel_filters() {
        assert_eq!(
            CmdSelect::default().cmd_filter().as_deref(),
            Some("qid != 0")
        );
        let all = CmdSelect {
            admin: true,
            ..Default::default()
        };
        assert_eq!(all.cmd_filter(), None);
        let s = CmdSelect {
            ctrl: Some(0),
            nsid: Some(1),
            ..Default::default()
        };
        assert_eq!(
            s.cmd_filter().as_deref(),
            Some("ctrl_id == 0 && qid != 0 && nsid == 1")
        );
        assert_eq!(s.done_filter().as_deref(), Some("ctrl_id == 0 && qid != 0"));
        let q = CmdSelect {
            qid: Some(3),
            ..Default::default()
        };
        assert_eq!(q.cmd_filter().as_deref(), Some("qid == 3"));
    }

    #[test]
    fn memory_is_bounded_by_giving_up_the_oldest() {
        let f = formats();
        let cdw = rw_dwords(0, 1);
        let mut cfg = config(512);
        cfg.max_in_flight = 10;
        let mut c = NvmeCorrelator::new(cfg);
        let mut out = Vec::new();
        for i in 0..100u64 {
            let raw = cmd_raw(&f.setup, (0, 1, i), 0x02, 1, &cdw, b"nvme0n1");
            let ev = f.decoder.decode(&raw, i, 0).unwrap().unwrap();
            c.on_event(&ev, &mut |r| out.push(r));
            assert!(c.tracker.in_flight() <= 10);
        }
        assert!(!out.is_empty());
        assert!(out.iter().all(|r| r.status() == Status::Incomplete));
        assert_eq!(out[0].core.submit_ns, 0, "oldest first");
        assert_eq!(c.counters().incomplete as usize, out.len());
    }

    #[test]
    fn garbage_values_do_not_panic() {
        let f = formats();
        let max = u64::MAX;
        let (r, _) = run(
            &f,
            config(4096),
            &[
                (
                    max,
                    cmd_raw(
                        &f.setup,
                        (max, max, max),
                        0x02,
                        max,
                        &[0xff; 24],
                        &[0xff; 40],
                    ),
                ),
                (0, block_raw(&f.bio, max, max, b"\xff\xff")),
                (1, done_raw(&f.done, max, max, max, max, &[0xff; 40])),
                (2, rq_done_raw(&f.complete, max, max)),
            ],
        );
        assert_eq!(r.len(), 1);
        let mut n = 0;
        r[0].cells(&mut |_| n += 1);
        assert_eq!(n + 2, INFO.columns.len());
    }

    #[test]
    fn truncated_records_are_errors_not_panics() {
        let f = formats();
        let raw = cmd_raw(&f.setup, (0, 1, 1), 0x02, 1, &[0; 24], b"nvme0n1");
        let cdw = f.setup.field("cdw10").unwrap();
        for n in 2..(cdw.offset + cdw.size) as usize {
            assert!(f.decoder.decode(&raw[..n], 0, 0).is_err(), "{n} bytes");
        }
    }
}
