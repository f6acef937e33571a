//! The command vocabulary the nvme and nvmet profiles share: which commands a run
//! keeps ([`CmdSelect`], also rendered as kernel filters), the command/completion
//! matching with cid reuse, missing samples and bounded memory ([`CmdTracker`]), and the
//! fields both records report ([`CmdCore`]).

use super::nvme_events::{opcode_name, DiskName, NvmeCmd, NvmeDone};
use crate::correlate::gate::Gate;
use crate::correlate::inflight::{Inflight, Started, DEFAULT_MAX};
use crate::correlate::lost::LostEnds;
use crate::correlate::{Counters, FxMap, Gap, Status};
use crate::filter::Filter;
use crate::profile::PlanCtx;
use crate::record::size_class;
use std::collections::HashMap;

/// LBA size assumed when the namespace's is unknown (no sysfs entry for its disk).
pub const DEFAULT_LBA_SIZE: u32 = 512;

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
    pub fn cmd_filter(&self) -> Option<Filter> {
        Filter::and(
            self.queue_filter(),
            self.nsid.map(|n| Filter::eq("nsid", n as u64)),
        )
    }

    /// The ftrace filter for a completion event: it has no nsid, so that part stays
    /// in user space (the correlator ignores completions of unselected namespaces).
    pub fn done_filter(&self) -> Option<Filter> {
        self.queue_filter()
    }

    /// Controller and queue: `ctrl_id == 1 && qid != 0`. The nvme-tcp events carry
    /// the same fields.
    pub fn queue_filter(&self) -> Option<Filter> {
        Filter::all(
            self.ctrl
                .map(|c| Filter::eq("ctrl_id", c as u64))
                .into_iter()
                .chain(self.qid_filter()),
        )
    }

    /// The queue part alone: `qid == N`, or `qid != 0` unless admin commands are kept.
    pub fn qid_filter(&self) -> Option<Filter> {
        match self.qid {
            Some(q) => Some(Filter::eq("qid", q as u64)),
            None if !self.admin => Some(Filter::ne("qid", 0)),
            None => None,
        }
    }

    /// `--ctrl`, `--qid`, `--nsid`, `--admin` (`--qid 0` implies `--admin`).
    pub fn from_flags(ctx: &PlanCtx<'_>) -> CmdSelect {
        let qid = ctx.flag::<u32>("qid");
        CmdSelect {
            ctrl: ctx.flag::<u32>("ctrl"),
            qid,
            nsid: ctx.flag::<u32>("nsid"),
            admin: ctx.switch("admin") || qid == Some(0),
        }
    }

    pub(crate) fn keeps_queue(&self, ctrl: u32, qid: u32) -> bool {
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

impl NvmeConfig {
    /// The command selection flags, and the LBA size of every disk of this host (a
    /// host namespace's disk, or the device a target namespace exports).
    pub fn from_ctx(ctx: &PlanCtx<'_>) -> NvmeConfig {
        // The hidden multipath path disks too: commands name the path they run on.
        let mut disks: Vec<String> = ctx.sys.names().into_values().collect();
        disks.extend(ctx.sys.all_multipath_paths());
        NvmeConfig {
            select: CmdSelect::from_flags(ctx),
            lba_sizes: ctx.sys.logical_block_sizes(&disks),
            ..Default::default()
        }
    }
}

impl Default for NvmeConfig {
    fn default() -> Self {
        NvmeConfig {
            select: CmdSelect::default(),
            lba_sizes: HashMap::new(),
            disk_devs: HashMap::new(),
            max_in_flight: DEFAULT_MAX,
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
    /// Commands in flight on the queue at submission, itself included; `None` while a
    /// completion that went missing is not pinned on a command (one that lost it is
    /// still in the depth).
    pub qd: Option<u32>,
    /// `None` while incomplete.
    pub nvme_status: Option<u16>,
    pub retries: Option<u8>,
    pub status: Status,
}

impl CmdCore {
    pub(crate) fn opcode_label(&self) -> std::borrow::Cow<'static, str> {
        match opcode_name(self.qid, self.opcode, self.fctype) {
            Some(n) => n.into(),
            None => format!("0x{:02x}", self.opcode).into(),
        }
    }

    pub(crate) fn size_label(&self) -> &'static str {
        self.bytes.map_or("", size_class)
    }
}

/// A submitted command waiting for its completion.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) submit: u64,
    pub(crate) cmd: NvmeCmd,
    pub(crate) block: Option<u64>,
    /// Bios that were waiting at the command's place when `block` was joined.
    pub(crate) candidates: Option<u32>,
    pub(crate) lba_size: u32,
    /// Commands in flight on its queue when it was submitted, itself included.
    pub(crate) qd: Option<u32>,
    /// Given up because it lost its completion to a missing sample: `dropped`.
    pub(crate) lost: bool,
}

impl Started for Pending {
    fn started(&self) -> u64 {
        self.submit
    }
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
///
/// # Missing samples
/// A command id is reused as soon as its command completes, so a command whose
/// completion the kernel counted and never wrote would take the completion of the next
/// command with its id whose setup went missing too: under sustained overflow a run of
/// lost samples on one CPU makes one `ok` row of two or more commands. The tracker
/// hears of missing completions before what follows them (the caller's
/// `Correlator::on_missing`) and keeps them per window ([`LostEnds`]). A command
/// submitted before a window closed and in flight past `SURELY` of its controller's
/// yardstick (the command time of its successful pairings) is the one that lost it:
/// `dropped`, out of the depth, never paired; the completion that found it belongs to
/// a command whose setup went missing (`unmatched`). It is looked for when a completion
/// comes for its id and, while a completion is unaccounted, among all commands every
/// millisecond of event time. A command whose id starts again while it is in flight
/// lost its completion for certain: `dropped` when one went missing since it was
/// submitted. At the end, a command in flight submitted before a completion went
/// missing is `dropped`, not `incomplete`.
pub(crate) struct CmdTracker {
    pub(crate) cfg: NvmeConfig,
    pending: Inflight<Key, Pending>,
    /// Commands in flight per (controller, queue).
    depth: FxMap<(u32, u32), u32>,
    /// Disks of selected commands: with `--nsid`, a completion on another disk belongs
    /// to an unselected namespace (completions carry no nsid) and is not "unmatched".
    nsid_disks: Vec<DiskName>,
    lba_cache: FxMap<DiskName, u32>,
    pub(crate) counters: Counters,
    /// When completions were unmatched (see `Correlator::unmatched_at`).
    pub(crate) unmatched_log: crate::correlate::UnmatchedLog,
    /// Target only: match a completion to a command recorded with ctrl_id 0 (see
    /// `complete`). Never on the host, where controller instance 0 is `nvme0`.
    pub(crate) ctrl0_fallback: bool,
    pub(crate) gate: Gate,
    /// Completions that went missing, and per controller the command time of
    /// successful pairings.
    ends: LostEnds,
}

impl CmdTracker {
    pub(crate) fn new(cfg: NvmeConfig) -> CmdTracker {
        CmdTracker {
            pending: Inflight::new(cfg.max_in_flight),
            depth: FxMap::default(),
            cfg,
            nsid_disks: Vec::new(),
            lba_cache: FxMap::default(),
            counters: Counters::default(),
            unmatched_log: Default::default(),
            ctrl0_fallback: false,
            gate: Gate::default(),
            ends: LostEnds::default(),
        }
    }

    /// Samples that went missing; `done` is the completion event's name (`nvme_complete_rq`,
    /// `nvmet_req_complete`). Only completions are kept: a missing setup leaves its
    /// completion `unmatched`.
    pub(crate) fn on_missing(&mut self, gap: &Gap<'_>, done: &str) {
        if gap.may_be(done) {
            self.ends.add(gap);
        }
    }

    /// Whether command `p`, at `t`, is one that lost a completion still unaccounted.
    fn lost(&self, p: &Pending, t: u64) -> bool {
        self.ends.lost(p.cmd.ctrl_id, p.submit, t)
    }

    /// Command `p`, out of flight, lost its completion (one missing since it was
    /// submitted, if still unaccounted): `dropped`.
    fn cut(&mut self, p: Pending) -> Finished {
        self.ends.pin(p.submit);
        self.dropped(p)
    }

    /// Command `p`, its missing completion pinned on it, is `dropped`.
    fn dropped(&mut self, mut p: Pending) -> Finished {
        self.counters.cut += 1;
        p.lost = true;
        (p, None)
    }

    /// Every millisecond of event time while a completion is unaccounted: the commands
    /// that lost theirs are cut (see [`LostEnds::scan`]).
    fn scan(&mut self, t: u64, out: &mut dyn FnMut(Finished)) {
        if !self.ends.scan_due(t) {
            return;
        }
        let mut lost = Vec::new();
        self.pending.for_each(|k, p| {
            if self.lost(p, t) {
                lost.push((p.submit, (*k, p.submit)));
            }
        });
        for (key, submit) in self.ends.scan(t, lost) {
            if let Some((p, _)) = self.pending.take_where(&key, |p| p.submit == submit) {
                self.left(&p);
                out(self.dropped(p));
            }
        }
        self.counters.in_flight = self.pending.len() as u64;
    }

    /// The counters, with the events a rate change left out.
    pub(crate) fn counters(&self) -> Counters {
        Counters {
            resampled: self.gate.resampled(),
            ..self.counters
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

    /// A command left its queue (completed, given up or taken by a completion).
    fn left(&mut self, p: &Pending) {
        if let Some(n) = self.depth.get_mut(&(p.cmd.ctrl_id, p.cmd.qid)) {
            *n = n.saturating_sub(1);
        }
    }

    /// A submitted command; `block` is its first block event (and how many bios were
    /// waiting there) when the caller joined one.
    pub(crate) fn submit(
        &mut self,
        t: u64,
        cmd: &NvmeCmd,
        block: Option<(u64, u32)>,
        out: &mut dyn FnMut(Finished),
    ) {
        let key = (cmd.ctrl_id, cmd.qid, cmd.cid);
        let depth = self.depth.entry((cmd.ctrl_id, cmd.qid)).or_insert(0);
        *depth += 1;
        let qd = Some(*depth).filter(|_| !self.ends.unaccounted());
        let p = Pending {
            submit: t,
            cmd: *cmd,
            block: block.map(|b| b.0),
            candidates: block.map(|b| b.1),
            lba_size: self.lba_size(&cmd.disk),
            qd,
            lost: false,
        };
        let mut gone = Vec::new();
        let old = self.pending.insert(key, p, &mut |_, p| gone.push(p));
        self.counters.incomplete += gone.len() as u64;
        for p in gone {
            self.left(&p);
            out((p, None));
        }
        if let Some(old) = old {
            self.left(&old);
            // The same command id started again while we still held the previous
            // command: its completion was lost (or never traced). Give the old one up
            // so each row stays one command, and count why.
            if self.ends.claim(old.submit) {
                out(self.dropped(old));
            } else {
                self.counters.requeued += 1;
                self.counters.incomplete += 1;
                out((old, None));
            }
        }
        self.counters.in_flight = self.pending.len() as u64;
    }

    /// Whether a command starting at `t` passes the selection and is in the sample
    /// (and learn its disk for completions).
    pub(crate) fn selected(&mut self, t: u64, cmd: &NvmeCmd) -> bool {
        if !self.gate.admits(cmd.cid.into(), t) {
            return false;
        }
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
        match self.claim(t, done, out) {
            Claim::Found(p) => out((p, Some((t, *done)))),
            Claim::Missing => self.unmatched(t, done),
            Claim::Ignored => {}
        }
    }

    /// Take the command a completion stamped `t` belongs to, by its key. Commands that
    /// lost their completion to a missing sample go to `out`, `dropped`.
    pub(crate) fn claim(
        &mut self,
        t: u64,
        done: &NvmeDone,
        out: &mut dyn FnMut(Finished),
    ) -> Claim {
        if !self.cfg.select.keeps_queue(done.ctrl_id, done.qid) {
            return Claim::Ignored;
        }
        if self.ends.unaccounted() {
            self.scan(t, out);
        }
        let key = (done.ctrl_id, done.qid, done.cid);
        let mut found = self.pending.take(&key).map(|(p, _)| p);
        if found.is_none() && self.ctrl0_fallback && done.ctrl_id != 0 {
            // The target records ctrl_id 0 at req_init for commands that arrive before
            // the association exists (connect) and the new cntlid at completion.
            found = self.pending.take(&(0, done.qid, done.cid)).map(|(p, _)| p);
        }
        if let Some(p) = &found {
            self.left(p);
        }
        if let Some(p) = found.take_if(|p| self.ends.unaccounted() && self.lost(p, t)) {
            // Its id's next command, whose setup went missing too, completed.
            out(self.cut(p));
        }
        if let Some(p) = found.as_ref().filter(|_| done.status == 0) {
            let took = t.saturating_sub(p.submit);
            self.ends.served(p.cmd.ctrl_id, took);
        }
        self.counters.in_flight = self.pending.len() as u64;
        found.map_or(Claim::Missing, Claim::Found)
    }

    /// Take a command by its key (a completion matched another way).
    pub(crate) fn take(&mut self, key: Key) -> Option<Pending> {
        let p = self.pending.take(&key).map(|(p, _)| p);
        if let Some(p) = &p {
            self.left(p);
        }
        self.counters.in_flight = self.pending.len() as u64;
        p
    }

    /// Visit every command in flight.
    pub(crate) fn for_each_pending(&self, mut f: impl FnMut(&Pending)) {
        self.pending.for_each(|_, p| f(p));
    }

    /// Put back a command taken by a completion that turned out not to be its own.
    /// Returns the commands given up to make room (to bound memory), counted
    /// `incomplete`, for the caller to write.
    pub(crate) fn restore(&mut self, p: Pending) -> Vec<Pending> {
        *self.depth.entry((p.cmd.ctrl_id, p.cmd.qid)).or_insert(0) += 1;
        let mut gone = Vec::new();
        self.pending.insert(p.key(), p, &mut |_, p| gone.push(p));
        self.counters.incomplete += gone.len() as u64;
        for p in &gone {
            self.left(p);
        }
        self.counters.in_flight = self.pending.len() as u64;
        gone
    }

    /// A completion no command was found for.
    pub(crate) fn unmatched(&mut self, t: u64, done: &NvmeDone) {
        if self.gate.explains(done.cid.into(), t) {
            return;
        }
        // With --nsid, a completion on another disk belongs to an unselected namespace.
        let other_ns = self.cfg.select.nsid.is_some() && !self.nsid_disks.contains(&done.disk);
        if !other_ns {
            self.counters.unmatched += 1;
            self.unmatched_log.note(t, self.counters.unmatched);
        }
    }

    /// Give up everything in flight (end of run), oldest first.
    pub(crate) fn finish(&mut self, out: &mut dyn FnMut(Finished)) {
        let mut left = Vec::new();
        self.pending.drain_all(&mut |_, p| left.push(p));
        for p in left {
            // Submitted before a completion went missing: whether it lost it or the
            // run ended first is not known, which `incomplete` would say.
            if self.ends.claim(p.submit) {
                out(self.dropped(p));
            } else {
                self.counters.incomplete += 1;
                out((p, None));
            }
        }
        self.ends.clear();
        self.depth.clear();
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
                t.checked_sub(p.submit),
                Some(d.status),
                Some(d.retries),
                if d.status == 0 {
                    Status::Ok
                } else {
                    Status::Error
                },
            ),
            None if p.lost => (None, None, None, Status::Dropped),
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
            qd: p.qd,
            nvme_status,
            retries,
            status,
        }
    }
}
