//! The nvme-tcp correlator: host and target halves of each I/O (see [`super::host`],
//! [`super::target`]) joined into one record, with the block events of the host's
//! request. Keys: host events by (ctrl_id, qid, cid); target events by
//! (cntlid, qid, cid); block events by (dev, sector), joined through
//! `nvme_tcp_queue_rq` which carries both. The host record of an I/O is joined with
//! the target record of the same (cntlid, qid, cid) whose command arrived after the
//! host queued it and whose last reply was sent before the host received it
//! ([`fits`]): cids are reused, but never while the host still holds the command.

use super::events::{HostEvent, HostKind, NvmeTcpEvent, TargetEvent, TargetKind, C2H_SUCCESS};
use super::host::{add, diff, host_key, HostIo};
use super::model::{fits, HostPart, Side, TargetPart, TcpConfig, TcpRecord, M_T_REPLY_SEND};
use super::target::{tgt_key, TgtIo};
use crate::correlate::biojoin::{BioJoin, StartKind};
use crate::correlate::gate::Gate;
use crate::correlate::index::SlotIndex;
use crate::correlate::inflight::{Inflight, Started};
use crate::correlate::keyed::Keyed;
use crate::correlate::lost::LostEnds;
use crate::correlate::{Correlator, Counters, Gap, Starts, UnmatchedLog};
use crate::decode::Event;
use crate::device::multipath_head;
use crate::profile::shared::block_events::{BlockEvent, BlockKind};
use crate::profile::shared::nvme_events::Disk;

/// A host request in flight at a (dev, sector), until its block completion: its key
/// and the slot its state is in (see [`Keyed::at`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct AtSector {
    t: u64,
    key: u64,
    slot: u32,
}

impl Started for AtSector {
    fn started(&self) -> u64 {
        self.t
    }
}

/// The nvme-tcp correlator; see [`super::model`] for what each stage spans.
///
/// Each side's I/Os are held in place under their command's key ([`host_key`],
/// [`tgt_key`]): an event is one lookup, and an I/O's state is moved only when it
/// leaves.
///
/// # Lost samples
/// A command id is reused once its command is over, with a generation in its top bits
/// on Linux hosts (the same cid every 16th use of a tag). An I/O whose end the kernel
/// counted and never wrote (the host's completion, the target's response send) stays
/// in flight under its id, and the events of the command that next has the id, whose
/// start went missing too, would land on it: one row of 16 commands, `ok` where the
/// chain looks whole. Each side keeps its missing ends ([`LostEnds`]) and how long its
/// I/Os take per controller. An event for an I/O in flight past `SURELY` of that, with
/// an end missing since it started, is not its own: the I/O is cut (`dropped`) and the
/// event is treated as one of an I/O whose start was not seen. While an end is
/// unaccounted the same is looked for among all I/Os every millisecond of event time,
/// and `qd` is empty (an I/O that lost its end still counts in the depth). An I/O given
/// up without its end (its id came back, its block completion came, the run ended)
/// with an end missing since it started is `dropped`, not `incomplete`. On the host the
/// blk-mq tag tells it without a yardstick: a command still waiting on a tag that a
/// command of another cid has taken (its `queue_rq`, or a reply PDU) is over.
pub struct TcpCorrelator {
    cfg: TcpConfig,
    pub(super) hosts: Keyed<HostIo>,
    /// (dev, sector) → host key of the request, from queue_rq to block_rq_complete.
    pub(super) by_sector: Inflight<(u32, u64), AtSector>,
    /// block_bio_queue times not yet claimed by a queue_rq.
    pub(super) bios: BioJoin,
    /// Target I/Os, open or (joint runs) closed: their reply went out and they wait,
    /// where they are, for their host part to claim them.
    pub(super) targets: Keyed<TgtIo>,
    /// Closed target I/Os in `targets`.
    tgt_waiting: usize,
    /// Commands in flight per host queue (ctrl_id, qid) and target queue (cntlid, qid):
    /// an I/O keeps its queue's number, so that leaving it takes no lookup.
    queues: SlotIndex,
    depth: Vec<u32>,
    /// Controllers (cntlid) seen on the host side and on the target side in this run.
    /// A part of the other side is expected only for a controller seen there: with
    /// `--side both` a host of a remote target (or a target of remote hosts) whose
    /// kernel also has the other side's events writes complete one-sided rows.
    host_ctrls: Box<[u64; 1024]>,
    tgt_ctrls: Box<[u64; 1024]>,
    counters: Counters,
    /// When completions were unmatched (see `Correlator::unmatched_at`).
    unmatched_log: UnmatchedLog,
    gate: Gate,
    /// Host completions that went missing (`process_nvme_cqe`; `recv_data` too once a
    /// C2H SUCCESS PDU ended an I/O), and per controller (ctrl_id) how long host I/Os
    /// take from `queue_rq`. See [`LostEnds`] and "Lost samples" in the type's doc.
    host_ends: LostEnds,
    /// Target reply sends (`try_send_response`) that went missing, and per cntlid how
    /// long target I/Os take from `done_recv_pdu`.
    tgt_ends: LostEnds,
    /// A C2H data PDU with the SUCCESS flag ended an I/O (no response capsule): a
    /// missing `recv_data` may be an I/O's end.
    c2h_ends: bool,
    /// Per host queue (by number, as `depth`) and blk-mq tag: the key of the latest
    /// command seen on it. A tag is not reused while its request is in flight, so a
    /// command of another cid on it means the one held there is over.
    tags: Vec<Vec<u64>>,
    /// Per disk a request was made on: the disk its bios were queued on ([`Self::bio_dev`]).
    bio_devs: Vec<(u32, u32)>,
}

/// Tags a host queue can have in a Linux cid (12 bits).
const MAX_TAGS: usize = 1 << 12;
/// No command seen on a tag yet (not a [`host_key`]: its cid would be 0xffff, a tag
/// past [`MAX_TAGS`]).
const NO_KEY: u64 = u64::MAX;

/// When a scan is due at `t` ([`LostEnds::scan_due`]), the keys of the I/Os of `table`
/// that lost their end: among those `open` gives a controller for (still waiting for
/// their end), see [`LostEnds::scan`].
fn lost_in<V: Started>(
    ends: &mut LostEnds,
    table: &mut Keyed<V>,
    t: u64,
    open: impl Fn(&V) -> Option<u32>,
) -> Vec<u64> {
    if !ends.scan_due(t) {
        return Vec::new();
    }
    let mut lost = Vec::new();
    let seen = &*ends;
    table.for_each_mut(|key, io| {
        let start = io.started();
        if open(io).is_some_and(|ctrl| seen.lost(ctrl, start, t)) {
            lost.push((start, key));
        }
    });
    ends.scan(t, lost)
}

fn mark(set: &mut [u64; 1024], cntlid: u16) {
    set[cntlid as usize / 64] |= 1 << (cntlid % 64);
}

fn seen(set: &[u64; 1024], cntlid: u16) -> bool {
    set[cntlid as usize / 64] & (1 << (cntlid % 64)) != 0
}

/// Disks [`TcpCorrelator::bio_dev`] remembers.
const MAX_BIO_DEVS: usize = 256;

/// bio_queue entries kept at most: bios that never become a traced request (merged
/// into another, other disks, unsampled cids) are dropped beyond this.
pub(super) const MAX_BIOS: usize = 1 << 16;

impl TcpCorrelator {
    pub fn new(cfg: TcpConfig) -> TcpCorrelator {
        let max = cfg.max_in_flight;
        TcpCorrelator {
            cfg,
            hosts: Keyed::new(max),
            by_sector: Inflight::new(max),
            bios: BioJoin::new(MAX_BIOS),
            targets: Keyed::new(max),
            tgt_waiting: 0,
            queues: SlotIndex::default(),
            depth: Vec::new(),
            host_ctrls: Box::new([0; 1024]),
            tgt_ctrls: Box::new([0; 1024]),
            counters: Counters::default(),
            unmatched_log: UnmatchedLog::default(),
            gate: Gate::default(),
            host_ends: LostEnds::default(),
            tgt_ends: LostEnds::default(),
            c2h_ends: false,
            tags: Vec::new(),
            bio_devs: Vec::new(),
        }
    }

    /// The disk whose `block_bio_queue` a request of disk `dev`, named `disk`, follows:
    /// its own, or with native multipath the namespace head's above the path disk it
    /// was made on ([`multipath_head`]; the head by this host's sysfs). Once per disk.
    fn bio_dev(&mut self, dev: u32, disk: Disk) -> u32 {
        if let Some(&(_, d)) = self.bio_devs.iter().find(|(p, _)| *p == dev) {
            return d;
        }
        let head = multipath_head(disk.as_str()).and_then(|h| self.cfg.disks.get(&h).copied());
        let d = head.unwrap_or(dev);
        // Bounded: a corrupt capture could name any number of disks.
        if self.bio_devs.len() < MAX_BIO_DEVS {
            self.bio_devs.push((dev, d));
        }
        d
    }

    fn sampled(&self, cid: u16) -> bool {
        cid & self.cfg.sample_mask == 0
    }

    /// The number of queue (`target`, controller, qid).
    fn queue(&mut self, target: bool, ctrl: u32, qid: u16) -> u32 {
        let key = u64::from(target) << 63 | u64::from(ctrl) << 16 | u64::from(qid);
        if let Some(q) = self.queues.get(key) {
            return q;
        }
        let q = self.depth.len() as u32;
        self.queues.insert(key, q);
        self.depth.push(0);
        self.tags.push(Vec::new());
        q
    }

    /// A command joins queue number `q`: the depth with it counted.
    fn enqueue(&mut self, q: u32) -> u32 {
        let d = &mut self.depth[q as usize];
        *d += 1;
        *d
    }

    /// A command leaves queue number `q`.
    fn dequeue(&mut self, q: u32) {
        if let Some(d) = self.depth.get_mut(q as usize) {
            *d = d.saturating_sub(1);
        }
    }

    /// I/Os in flight: held on either side, less the closed target parts that only
    /// wait for their host part. Counted when asked, not kept up to date per event.
    fn in_flight(&self) -> u64 {
        (self.hosts.len() + self.targets.len()).saturating_sub(self.tgt_waiting) as u64
    }

    fn on_block(&mut self, t: u64, b: &BlockEvent, out: &mut dyn FnMut(TcpRecord)) {
        match b.kind {
            BlockKind::BioQueue => self.bios.start(t, b.dev, b.sector, StartKind::Bio),
            // Not a command's: it ends a write in the flush sequence.
            BlockKind::Complete if b.ends_flush() => {}
            BlockKind::Complete => self.block_complete(t, b, out),
            _ => {}
        }
    }

    /// A request's block completion ends its host I/O. Once per I/O, so out of line:
    /// the per-event path stays small (see [`Correlator::on_event`]).
    #[inline(never)]
    fn block_complete(&mut self, t: u64, b: &BlockEvent, out: &mut dyn FnMut(TcpRecord)) {
        // Several requests at one place (a hot block): the one whose command completed
        // first is the one the block layer completes; else the oldest still held.
        let hosts = &self.hosts;
        let rank = |a: &AtSector| {
            let io = hosts.at(a.slot, a.key)?;
            Some(io.done.is_none())
        };
        if let Some((a, _)) = self.by_sector.take_least(&(b.dev, b.sector), rank) {
            self.close_host(a.key, Some(t), out);
        }
    }

    fn on_host(&mut self, t: u64, e: &HostEvent, out: &mut dyn FnMut(TcpRecord)) {
        if (e.qid == 0 && !self.cfg.admin) || !self.sampled(e.cid) {
            return;
        }
        if self.host_ends.unaccounted() {
            self.scan_hosts(t, out);
        }
        let key = host_key(e.ctrl_id, e.qid, e.cid);
        if e.kind == HostKind::QueueRq {
            return self.start_host(t, key, e, out);
        }
        let Some(io) = self.hosts.get_mut(key) else {
            if e.kind.is_reply() {
                // The reply of a command whose start went missing: its tag's last holder
                // is over.
                let q = self.queue(false, e.ctrl_id, e.qid);
                self.tag_taken(q, e, key, out);
            }
            return self.stray_host(t, e);
        };
        if io.done.is_some() {
            // Completed, waiting for its block completion: late send events of the
            // finished command (done_send_req after the reply) change nothing.
            return;
        }
        if self.host_ends.unaccounted() && self.host_ends.lost(io.part.ctrl_id, io.first, t) {
            // It lost its end; this event is of the command its id serves now, whose
            // start went missing too.
            let first = io.first;
            self.host_ends.pin(first);
            self.cut_host(key, out);
            return self.stray_host(t, e);
        }
        let pdu = e.pdu();
        match e.kind {
            HostKind::QueueRq => {}
            HostKind::TrySend => {
                io.part.send_calls += 1;
                if io.sent.is_none() {
                    io.call_entry = Some(t);
                }
            }
            HostKind::DoneSendReq => {
                if io.sent.is_none() && (io.part.rounds == 0 || io.after_r2t) {
                    io.sent = Some(io.call_entry.unwrap_or(t));
                }
            }
            HostKind::HandleR2t => {
                io.part.r2ts += 1;
                io.reply(t, pdu.recv_time);
                io.after_r2t = true;
            }
            HostKind::HandleC2hData => {
                io.part.c2h_pdus += 1;
                io.reply(t, pdu.recv_time);
            }
            HostKind::RecvData => {
                if pdu.flags & C2H_SUCCESS != 0 {
                    io.done = Some(t);
                    self.c2h_ends = true;
                }
            }
            HostKind::ProcessNvmeCqe => {
                io.reply(t, pdu.recv_time);
                io.done = Some(t);
                io.part.nvme_status = Some(pdu.status);
            }
            HostKind::TrySendCmdPdu | HostKind::TrySendDataPdu | HostKind::TrySendData => {}
            HostKind::QueueRequest => {}
        }
        if let Some(done) = io.done {
            if io.part.nvme_status.unwrap_or(0) == 0 {
                self.host_ends
                    .served(io.part.ctrl_id, done.saturating_sub(io.first));
            }
            let wait_block = self.cfg.block && io.blk.is_some();
            if !wait_block {
                self.close_host(key, None, out);
            }
        }
    }

    /// `nvme_tcp_queue_rq`: a host command starts. Once per I/O, out of line.
    #[inline(never)]
    fn start_host(&mut self, t: u64, key: u64, e: &HostEvent, out: &mut dyn FnMut(TcpRecord)) {
        if let Some(old) = self.hosts.remove(key) {
            // The cid came back: the old command is over even if its end was not
            // seen (lost samples, or its block completion never came).
            self.give_up_host(old, out);
        }
        let queue = self.queue(false, e.ctrl_id, e.qid);
        self.tag_taken(queue, e, key, out);
        if !self.gate.admits(e.cid.into(), t) {
            return;
        }
        mark(&mut self.host_ctrls, e.cntlid);
        let mut io = HostIo::new(t, e);
        let depth = self.enqueue(queue);
        io.queue = queue;
        io.part.qd = Some(depth).filter(|_| !self.host_ends.unaccounted());
        io.queue_rq = Some(t);
        io.phase_start = Some(t);
        let mut blk = None;
        if let Some(rq) = e.rq() {
            io.part.disk = rq.disk;
            io.part.opcode = Some(rq.opcode);
            io.part.write = rq.write;
            io.part.inline_data = rq.inline_data;
            io.part.bytes = Some(e.len as u64);
            io.part.slba = matches!(rq.opcode, 0x01 | 0x02).then_some(rq.slba);
            if rq.dev != 0 {
                blk = Some((rq.dev, rq.sector));
                io.blk = blk;
                let bio_dev = self.bio_dev(rq.dev, rq.disk);
                let claim = self.bios.claim(bio_dev, rq.sector, t);
                io.blk_start = claim.map(|c| c.t);
                io.part.candidates = claim.map(|c| c.candidates as u32);
            }
        }
        let mut evicted = Vec::new();
        let (slot, _) = self.hosts.insert(key, io, &mut |_, io| evicted.push(io));
        if let Some(at) = blk {
            let a = AtSector { t, key, slot };
            self.by_sector.push(at, a, &mut |_, _| {});
        }
        for io in evicted {
            if !self.emit_io(io, false, out) {
                self.counters.incomplete += 1;
            }
        }
    }

    /// Host I/O `key` is over: finished where it is held, and emitted. `end` is its
    /// block completion, when that is what ended it (its place's mapping already taken
    /// then). Once per I/O.
    fn close_host(&mut self, key: u64, end: Option<u64>, out: &mut dyn FnMut(TcpRecord)) {
        self.end_host(key, end, false, out)
    }

    /// Host I/O `key` lost its end (see "Lost samples"): `dropped`.
    fn cut_host(&mut self, key: u64, out: &mut dyn FnMut(TcpRecord)) {
        self.end_host(key, None, true, out)
    }

    /// [`close_host`](Self::close_host), or [`cut_host`](Self::cut_host) when `cut`. One
    /// body, so that the host part is finished in place and not copied once more.
    #[inline(never)]
    fn end_host(&mut self, key: u64, end: Option<u64>, cut: bool, out: &mut dyn FnMut(TcpRecord)) {
        let block = self.cfg.block;
        let left = self.hosts.remove_with(key, |io| {
            let no_end = io.done.is_none().then_some(io.first);
            (io.finish(end, block), io.queue, io.blk, no_end)
        });
        if let Some((h, queue, blk, no_end)) = left {
            let lost = cut || no_end.is_some_and(|first| self.host_ends.claim(first));
            self.emit_host(h, queue, blk, end, lost, out);
        }
    }

    /// A host I/O out of the table, given up without its block completion: emitted, and
    /// counted `incomplete` when it has no completion and its row is not `dropped`.
    fn give_up_host(&mut self, io: HostIo, out: &mut dyn FnMut(TcpRecord)) {
        let no_end = io.done.is_none();
        let lost = no_end && self.host_ends.claim(io.first);
        if !self.emit_io(io, lost, out) && no_end {
            self.counters.incomplete += 1;
        }
    }

    /// [`close_host`](Self::close_host) of an I/O already out of the table; whether its
    /// row is `dropped`.
    fn emit_io(&mut self, io: HostIo, lost: bool, out: &mut dyn FnMut(TcpRecord)) -> bool {
        let h = io.finish(None, self.cfg.block);
        self.emit_host(h, io.queue, io.blk, None, lost, out)
    }

    /// Every millisecond of event time while a host end is unaccounted: the host I/Os
    /// that lost theirs are cut.
    #[inline(never)]
    fn scan_hosts(&mut self, t: u64, out: &mut dyn FnMut(TcpRecord)) {
        let open = |io: &HostIo| io.done.is_none().then_some(io.part.ctrl_id);
        for key in lost_in(&mut self.host_ends, &mut self.hosts, t, open) {
            self.cut_host(key, out);
        }
    }

    /// Command `key` holds its blk-mq tag now: the command held there before, if still
    /// waiting for its completion, lost it (or it was requeued): it is given up. One
    /// that completed and waits for its block completion is left to it.
    fn tag_taken(&mut self, q: u32, e: &HostEvent, key: u64, out: &mut dyn FnMut(TcpRecord)) {
        // A Linux cid has 12 bits for the tag: a larger one is not a blk-mq tag (the
        // async event request's is 0xffff), or the input is garbage.
        let tag = usize::from(e.tag);
        if tag >= MAX_TAGS {
            return;
        }
        let tags = &mut self.tags[q as usize];
        if tags.len() <= tag {
            tags.resize(tag + 1, NO_KEY);
        }
        let prev = std::mem::replace(&mut tags[tag], key);
        if prev == key || prev == NO_KEY {
            return;
        }
        if self.hosts.get(prev).is_some_and(|io| io.done.is_none()) {
            if let Some(old) = self.hosts.remove(prev) {
                self.give_up_host(old, out);
            }
        }
    }

    /// A host event of no I/O in flight (its start went missing, or was before the run).
    fn stray_host(&mut self, t: u64, e: &HostEvent) {
        if e.kind == HostKind::ProcessNvmeCqe && !self.gate.explains(e.cid.into(), t) {
            // A completion whose command we never saw start.
            self.counters.unmatched += 1;
            self.unmatched_log.note(t, self.counters.unmatched);
        }
    }

    /// Host part `h` is over: it leaves its queue (number `queue`) and its place
    /// (`blk`), is joined with its target part, and goes out; `dropped` (and counted
    /// `cut`, once) when it or its target part lost its end, which it returns.
    fn emit_host(
        &mut self,
        h: HostPart,
        queue: u32,
        blk: Option<(u32, u64)>,
        end: Option<u64>,
        lost: bool,
        out: &mut dyn FnMut(TcpRecord),
    ) -> bool {
        self.dequeue(queue);
        if let (Some(b), None) = (blk, end) {
            // Only its own mapping: a newer request at the same place may own it now.
            let own = host_key(h.ctrl_id, h.qid, h.cid);
            self.by_sector.take_where(&b, |a| a.key == own);
        }
        let cntlid = h.cntlid;
        let mut dropped = lost;
        let target = if self.cfg.side.target() {
            self.take_target(&h, &mut dropped)
        } else {
            None
        };
        self.counters.cut += u64::from(dropped);
        out(TcpRecord {
            host: Some(h),
            target,
            expect_host: self.cfg.side.host(),
            expect_target: self.cfg.side == Side::Both && seen(&self.tgt_ctrls, cntlid),
            dropped,
        });
        dropped
    }

    /// The target part of host part `h` in a joint recording (same clock): closed, or
    /// still open (a read's data was sent, the response capsule event not seen yet),
    /// it is taken with what it has. `dropped` is set when it lost its end.
    fn take_target(&mut self, h: &HostPart, dropped: &mut bool) -> Option<TargetPart> {
        let key = tgt_key(h.cntlid, h.qid, h.cid);
        let (part, queue, closed, lost, sent, first) = self.targets.remove_with_if(
            key,
            |t| fits(h, &t.part, 0),
            |io| {
                (
                    io.finish(),
                    io.queue,
                    io.closed,
                    io.lost,
                    io.response_sent,
                    io.first,
                )
            },
        )?;
        self.left_target(queue, closed);
        // Taken without its reply: the reply send went missing, if one did.
        let no_end = !sent && part.missing & M_T_REPLY_SEND != 0;
        if lost || (no_end && self.tgt_ends.claim(first)) {
            *dropped = true;
        }
        Some(part)
    }

    fn on_target(&mut self, t: u64, e: &TargetEvent, out: &mut dyn FnMut(TcpRecord)) {
        if (e.qid == 0 && !self.cfg.admin) || !self.sampled(e.cid) {
            return;
        }
        if self.tgt_ends.unaccounted() {
            self.scan_targets(t, out);
        }
        let key = tgt_key(e.cntlid, e.qid, e.cid);
        if e.kind == TargetKind::DoneRecvPdu {
            return self.start_target(t, key, e, out);
        }
        let Some(io) = self.targets.get_mut(key).filter(|io| !io.closed) else {
            return self.stray_target(t, e);
        };
        if self.tgt_ends.unaccounted() && self.tgt_ends.lost(e.cntlid.into(), io.first, t) {
            // As on the host: it lost its reply send, and this event is another's.
            let first = io.first;
            self.tgt_ends.pin(first);
            self.cut_target(key, out);
            return self.stray_target(t, e);
        }
        match e.kind {
            TargetKind::DoneRecvPdu => {}
            TargetKind::ExecReadReq | TargetKind::ExecWriteReq => {
                io.open_data_round();
                if io.exec.is_none() {
                    io.exec = Some(t);
                    add(&mut io.sub, diff(Some(t), io.mark));
                }
            }
            TargetKind::QueueResponse => {
                if !e.r2t && io.qresp.is_none() {
                    io.qresp = Some(t);
                    io.part.nvme_status = Some(e.status);
                }
            }
            TargetKind::TrySendR2t => {
                if io.round_open {
                    io.part.r2t = true;
                    add(&mut io.sub, diff(Some(t), io.mark));
                    io.end_round(t);
                    io.awaiting_data = true;
                    io.last_h2c = None;
                }
            }
            TargetKind::HandleH2cDataPdu => io.part.h2c_pdus += 1,
            TargetKind::TryRecvData => {
                if io.awaiting_data {
                    io.last_h2c = Some((e.recv_time, t));
                }
            }
            TargetKind::TrySendDataPdu | TargetKind::TrySendResponse => {
                if io.round_open && io.qresp.is_some() {
                    io.end_round(t);
                }
                if e.kind == TargetKind::TrySendResponse {
                    io.response_sent = true;
                }
            }
            TargetKind::SetupC2hDataPdu
            | TargetKind::SetupR2tPdu
            | TargetKind::SetupResponsePdu
            | TargetKind::TrySendData => {}
        }
        if io.response_sent {
            if io.part.nvme_status.unwrap_or(0) == 0 {
                let took = t.saturating_sub(io.first);
                self.tgt_ends.served(e.cntlid.into(), took);
            }
            if self.cfg.side.host() {
                // Its host part claims it when the host completes (joint runs): it
                // waits where it is, out of its queue.
                io.closed = true;
                let queue = io.queue;
                self.dequeue(queue);
                self.tgt_waiting += 1;
            } else {
                self.close_target(key, out);
            }
        }
    }

    /// `nvmet_tcp_done_recv_pdu`: a command reached the target. Once per I/O, out of
    /// line.
    #[inline(never)]
    fn start_target(&mut self, t: u64, key: u64, e: &TargetEvent, out: &mut dyn FnMut(TcpRecord)) {
        // The command id came back: the I/O held under it is over. Open, its reply was
        // never seen sent (lost events); closed, no host part claimed it (another
        // machine's I/O): either way no host part of this run can any more, as a host
        // reuses a command id only after its own part of the old one has gone out.
        self.close_target(key, out);
        if !self.gate.admits(e.cid.into(), t) {
            return;
        }
        let mut io = TgtIo::new(t, e);
        let queue = self.queue(true, e.cntlid.into(), e.qid);
        let depth = self.enqueue(queue);
        io.queue = queue;
        io.part.qd = Some(depth).filter(|_| !self.tgt_ends.unaccounted());
        let mut evicted = Vec::new();
        self.targets.insert(key, io, &mut |_, io| evicted.push(io));
        for io in evicted {
            self.left_target(io.queue, io.closed);
            self.emit_target(io.finish(), false, out);
        }
        mark(&mut self.tgt_ctrls, e.cntlid);
    }

    /// A target I/O left the table: an open one leaves its queue too (a closed one
    /// left it when it closed).
    fn left_target(&mut self, queue: u32, closed: bool) {
        if closed {
            self.tgt_waiting -= 1;
        } else {
            self.dequeue(queue);
        }
    }

    /// Target I/O `key`, if there is one, is over and goes out alone (no host part
    /// will claim it). Once per I/O, out of line.
    #[inline(never)]
    fn close_target(&mut self, key: u64, out: &mut dyn FnMut(TcpRecord)) {
        let left = (self.targets).remove_with(key, |io| {
            let no_end = (!io.response_sent).then_some(io.first);
            (io.finish(), io.queue, io.closed, io.lost, no_end)
        });
        if let Some((part, queue, closed, lost, no_end)) = left {
            self.left_target(queue, closed);
            // Its id came back and its reply send was never seen.
            let dropped = lost || no_end.is_some_and(|first| self.tgt_ends.claim(first));
            self.emit_target(part, dropped, out);
        }
    }

    /// Target I/O `key` lost its reply send (see "Lost samples"): `dropped`.
    #[inline(never)]
    fn cut_target(&mut self, key: u64, out: &mut dyn FnMut(TcpRecord)) {
        let left = (self.targets).remove_with(key, |io| (io.finish(), io.queue, io.closed));
        if let Some((part, queue, closed)) = left {
            self.left_target(queue, closed);
            self.emit_target(part, true, out);
        }
    }

    /// As [`scan_hosts`](Self::scan_hosts), for the open target I/Os.
    #[inline(never)]
    fn scan_targets(&mut self, t: u64, out: &mut dyn FnMut(TcpRecord)) {
        let open = |io: &TgtIo| (!io.closed).then(|| io.part.cntlid.into());
        for key in lost_in(&mut self.tgt_ends, &mut self.targets, t, open) {
            self.cut_target(key, out);
        }
    }

    /// A target event of no open I/O: resumed sends of a record already closed are
    /// expected; a completion without a start is not.
    fn stray_target(&mut self, t: u64, e: &TargetEvent) {
        if e.kind == TargetKind::QueueResponse && !e.r2t && !self.gate.explains(e.cid.into(), t) {
            self.counters.unmatched += 1;
            self.unmatched_log.note(t, self.counters.unmatched);
        }
    }

    /// Target part `t` goes out alone; `dropped` (counted `cut`) when it lost its end.
    fn emit_target(&mut self, t: TargetPart, dropped: bool, out: &mut dyn FnMut(TcpRecord)) {
        if dropped {
            self.counters.cut += 1;
        } else if t.missing & M_T_REPLY_SEND != 0 {
            self.counters.incomplete += 1;
        }
        let expect_host = self.cfg.side == Side::Both && seen(&self.host_ctrls, t.cntlid);
        out(TcpRecord {
            host: None,
            target: Some(t),
            expect_host,
            expect_target: true,
            dropped,
        });
    }
}

impl Correlator for TcpCorrelator {
    type Event = NvmeTcpEvent;
    type Record = TcpRecord;

    /// Most events update one I/O in place: one lookup and a few stores. What happens
    /// once per I/O (a start, an end) is out of line, so that this path saves few
    /// registers and keeps a small frame.
    fn on_event(&mut self, ev: &Event<NvmeTcpEvent>, out: &mut dyn FnMut(TcpRecord)) {
        match &ev.kind {
            NvmeTcpEvent::Host(e) if self.cfg.side.host() => self.on_host(ev.time, e, out),
            NvmeTcpEvent::Target(e) if self.cfg.side.target() => self.on_target(ev.time, e, out),
            NvmeTcpEvent::Block(b) if self.cfg.side.host() && self.cfg.block => {
                self.on_block(ev.time, b, out)
            }
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut dyn FnMut(TcpRecord)) {
        // Targets first: every one still open is over, and a host part still waiting
        // for its block completion may claim it.
        let mut open = Vec::new();
        self.targets.for_each_mut(|key, io| {
            if !io.closed {
                io.closed = true;
                open.push((key, io.queue, (!io.response_sent).then_some(io.first)));
            }
        });
        for (key, queue, no_end) in open {
            self.dequeue(queue);
            self.tgt_waiting += 1;
            // Still open at the end, after a reply send went missing: whether it lost it
            // or the run ended first is not known, which `incomplete` would say.
            if no_end.is_some_and(|first| self.tgt_ends.claim(first)) {
                if let Some(io) = self.targets.get_mut(key) {
                    io.lost = true;
                }
            }
        }
        let mut hosts = Vec::new();
        self.hosts.drain_all(&mut |_, io| hosts.push(io));
        for io in hosts {
            self.give_up_host(io, out);
        }
        let mut rest = Vec::new();
        self.targets.drain_all(&mut |_, io| rest.push(io));
        for io in rest {
            self.left_target(io.queue, io.closed);
            self.emit_target(io.finish(), io.lost, out);
        }
        self.host_ends.clear();
        self.tgt_ends.clear();
        self.by_sector.clear();
        self.bios.clear();
    }

    /// The ends of I/Os are kept (see "Lost samples"); other missing samples are left
    /// to the pipeline, which marks as many given-up rows `dropped`. Samples of events
    /// not known ([`Gap::unknown`]) can be ends of either side and others too: kept as
    /// ends and left to the pipeline as well.
    fn on_missing(&mut self, gap: &Gap<'_>) -> bool {
        let host_end = gap.may_be("nvme_tcp_process_nvme_cqe")
            || (self.c2h_ends && gap.may_be("nvme_tcp_recv_data"));
        let mut kept = false;
        if host_end && self.cfg.side.host() {
            self.host_ends.add(gap);
            kept = true;
        }
        if gap.may_be("nvmet_tcp_try_send_response") && self.cfg.side.target() {
            self.tgt_ends.add(gap);
            kept = true;
        }
        kept && !gap.unknown()
    }

    fn unmatched_at(&self, t: u64) -> u64 {
        self.unmatched_log.at(t)
    }

    fn counters(&self) -> Counters {
        Counters {
            resampled: self.gate.resampled(),
            in_flight: self.in_flight(),
            ..self.counters
        }
    }

    fn gate(&mut self) -> Option<&mut Gate> {
        // Joined, a target start belongs to a host command whose admission it cannot
        // see; a rate change would cut the target part off rows (see `plan`).
        (self.cfg.side != Side::Both).then_some(&mut self.gate)
    }

    /// A host queues each command once; a target receives each command capsule once.
    /// Joined, a row is a host command, with its target part: the host's count (a
    /// target part of another machine's command, alone in its row, makes this short).
    fn starts(&self) -> Option<Starts> {
        let event = match self.cfg.side {
            Side::Target => "nvmet_tcp:nvmet_tcp_done_recv_pdu",
            Side::Host | Side::Both => "nvme_tcp:nvme_tcp_queue_rq",
        };
        self.gate.steady().then_some(Starts { event, again: 0 })
    }
}
