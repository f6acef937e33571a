//! The nvme-tcp correlator: host and target halves of each I/O (see [`super::host`],
//! [`super::target`]) joined into one record, with the block events of the host's
//! request. Keys: host events by (ctrl_id, qid, cid); target events by
//! (cntlid, qid, cid); block events by (dev, sector), joined through
//! `nvme_tcp_queue_rq` which carries both. The host record of an I/O is joined with
//! the target record of the same (cntlid, qid, cid) whose command arrived after the
//! host queued it and whose last reply was sent before the host received it
//! ([`fits`]): cids are reused, but never while the host still holds the command.

use super::events::{
    HostEvent, HostKind, NvmeTcpEvent, TargetEvent, TargetKind, TcpEvent, C2H_SUCCESS,
};
use super::host::{add, diff, HostIo, HostKey};
use super::model::{fits, HostPart, Side, TargetPart, TcpConfig, TcpRecord, M_T_REPLY_SEND};
use super::target::{TgtIo, TgtKey};
use crate::correlate::biojoin::{BioJoin, StartKind};
use crate::correlate::gate::Gate;
use crate::correlate::inflight::{Inflight, Started};
use crate::correlate::{Correlator, Counters, FxMap, UnmatchedLog};
use crate::decode::Event;
use crate::profile::shared::block_events::{BlockEvent, BlockKind};

/// A host request in flight at a (dev, sector), until its block completion.
#[derive(Debug, Clone, Copy)]
pub(super) struct AtSector {
    t: u64,
    key: HostKey,
}

impl Started for AtSector {
    fn started(&self) -> u64 {
        self.t
    }
}

/// The nvme-tcp correlator; see [`super::model`] for what each stage spans.
pub struct TcpCorrelator {
    cfg: TcpConfig,
    pub(super) hosts: Inflight<HostKey, HostIo>,
    /// (dev, sector) → host key of the request, from queue_rq to block_rq_complete.
    pub(super) by_sector: Inflight<(u32, u64), AtSector>,
    /// block_bio_queue times not yet claimed by a queue_rq.
    pub(super) bios: BioJoin,
    pub(super) targets: Inflight<TgtKey, TgtIo>,
    /// Target parts whose reply went out, waiting for their host part (joint runs).
    pub(super) tgt_done: Inflight<TgtKey, TargetPart>,
    /// Commands in flight per host queue (ctrl_id, qid) and target queue (cntlid, qid).
    host_depth: FxMap<(u32, u16), u32>,
    tgt_depth: FxMap<(u16, u16), u32>,
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
}

fn mark(set: &mut [u64; 1024], cntlid: u16) {
    set[cntlid as usize / 64] |= 1 << (cntlid % 64);
}

fn seen(set: &[u64; 1024], cntlid: u16) -> bool {
    set[cntlid as usize / 64] & (1 << (cntlid % 64)) != 0
}

/// bio_queue entries kept at most: bios that never become a traced request (merged
/// into another, other disks, unsampled cids) are dropped beyond this.
pub(super) const MAX_BIOS: usize = 1 << 16;

impl TcpCorrelator {
    pub fn new(cfg: TcpConfig) -> TcpCorrelator {
        let max = cfg.max_in_flight;
        TcpCorrelator {
            cfg,
            hosts: Inflight::new(max),
            by_sector: Inflight::new(max),
            bios: BioJoin::new(MAX_BIOS),
            targets: Inflight::new(max),
            tgt_done: Inflight::new(max),
            host_depth: FxMap::default(),
            tgt_depth: FxMap::default(),
            host_ctrls: Box::new([0; 1024]),
            tgt_ctrls: Box::new([0; 1024]),
            counters: Counters::default(),
            unmatched_log: UnmatchedLog::default(),
            gate: Gate::default(),
        }
    }

    fn sampled(&self, cid: u16) -> bool {
        cid & self.cfg.sample_mask == 0
    }

    fn on_block(&mut self, t: u64, b: &BlockEvent, out: &mut dyn FnMut(TcpRecord)) {
        match b.kind {
            BlockKind::BioQueue => self.bios.start(t, b.dev, b.sector, StartKind::Bio),
            BlockKind::Complete => {
                // Several requests at one place (a hot block): the one whose command
                // completed first is the one the block layer completes.
                let at = (b.dev, b.sector);
                let hosts = &self.hosts;
                let done = |a: &AtSector| hosts.first(&a.key).is_some_and(|io| io.done.is_some());
                let held = |a: &AtSector| hosts.first(&a.key).is_some();
                let key = match self.by_sector.find_mut(&at, done) {
                    Some(a) => a.key,
                    None => match self.by_sector.find_mut(&at, held) {
                        Some(a) => a.key,
                        None => return,
                    },
                };
                self.by_sector.take_where(&at, |a| a.key == key);
                if let Some((io, _)) = self.hosts.take(&key) {
                    self.emit_host(io, Some(t), out);
                }
            }
            _ => {}
        }
    }

    fn on_host(&mut self, t: u64, e: &HostEvent, out: &mut dyn FnMut(TcpRecord)) {
        if (e.qid == 0 && !self.cfg.admin) || !self.sampled(e.cid) {
            return;
        }
        let key = (e.ctrl_id, e.qid, e.cid);
        if e.kind == HostKind::QueueRq {
            if let Some((old, _)) = self.hosts.take(&key) {
                // The cid came back: the old command is over even if its end was not
                // seen (lost samples, or its block completion never came).
                if old.done.is_none() {
                    self.counters.incomplete += 1;
                }
                self.emit_host(old, None, out);
            }
            if !self.gate.admits(e.cid.into(), t) {
                return;
            }
            mark(&mut self.host_ctrls, e.cntlid);
            let mut io = HostIo::new(t, e);
            let depth = self.host_depth.entry((e.ctrl_id, e.qid)).or_insert(0);
            *depth += 1;
            io.part.qd = Some(*depth);
            io.queue_rq = Some(t);
            io.phase_start = Some(t);
            if let Some(rq) = &e.rq {
                io.part.disk = rq.disk;
                io.part.opcode = Some(rq.opcode);
                io.part.write = rq.write;
                io.part.inline_data = rq.inline_data;
                io.part.bytes = Some(e.len as u64);
                io.part.slba = matches!(rq.opcode, 0x01 | 0x02).then_some(rq.slba);
                if rq.dev != 0 {
                    io.blk = Some((rq.dev, rq.sector));
                    let claim = self.bios.claim(rq.dev, rq.sector, t);
                    io.blk_start = claim.map(|c| c.t);
                    io.part.candidates = claim.map(|c| c.candidates as u32);
                    let at = AtSector { t, key };
                    self.by_sector.push((rq.dev, rq.sector), at, &mut |_, _| {});
                }
            }
            let mut evicted = Vec::new();
            self.hosts.insert(key, io, &mut |_, io| evicted.push(io));
            for io in evicted {
                self.counters.incomplete += 1;
                self.emit_host(io, None, out);
            }
            self.counters.in_flight = (self.hosts.len() + self.targets.len()) as u64;
            return;
        }
        let Some(io) = self.hosts.first_mut(&key) else {
            if e.kind == HostKind::ProcessNvmeCqe && !self.gate.explains(e.cid.into(), t) {
                // A completion whose command we never saw start.
                self.counters.unmatched += 1;
                self.unmatched_log.note(t, self.counters.unmatched);
            }
            return;
        };
        if io.done.is_some() {
            // Completed, waiting for its block completion: late send events of the
            // finished command (done_send_req after the reply) change nothing.
            return;
        }
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
                io.reply(t, e.recv_time);
                io.after_r2t = true;
            }
            HostKind::HandleC2hData => {
                io.part.c2h_pdus += 1;
                io.reply(t, e.recv_time);
            }
            HostKind::RecvData => {
                if e.flags & C2H_SUCCESS != 0 {
                    io.done = Some(t);
                }
            }
            HostKind::ProcessNvmeCqe => {
                io.reply(t, e.recv_time);
                io.done = Some(t);
                io.part.nvme_status = Some(e.status);
            }
            HostKind::TrySendCmdPdu | HostKind::TrySendDataPdu | HostKind::TrySendData => {}
            HostKind::QueueRequest => {}
        }
        if io.done.is_some() {
            let wait_block = self.cfg.block && io.blk.is_some();
            if !wait_block {
                if let Some((io, _)) = self.hosts.take(&key) {
                    self.emit_host(io, None, out);
                }
            }
        }
        self.counters.in_flight = (self.hosts.len() + self.targets.len()) as u64;
    }

    fn emit_host(&mut self, io: HostIo, end: Option<u64>, out: &mut dyn FnMut(TcpRecord)) {
        if let Some(n) = self.host_depth.get_mut(&(io.part.ctrl_id, io.part.qid)) {
            *n = n.saturating_sub(1);
        }
        if let Some(b) = io.blk {
            // Only its own mapping: a newer request at the same place may own it now.
            let own = (io.part.ctrl_id, io.part.qid, io.part.cid);
            self.by_sector.take_where(&b, |a| a.key == own);
        }
        let h = io.finish(end, self.cfg.block);
        let cntlid = h.cntlid;
        let target = if self.cfg.side.target() {
            self.take_target(&h)
        } else {
            None
        };
        out(TcpRecord {
            host: Some(h),
            target,
            expect_host: self.cfg.side.host(),
            expect_target: self.cfg.side == Side::Both && seen(&self.tgt_ctrls, cntlid),
            dropped: false,
        });
    }

    /// The target part of host part `h` in a joint recording (same clock).
    fn take_target(&mut self, h: &HostPart) -> Option<TargetPart> {
        let key = (h.cntlid, h.qid, h.cid);
        if let Some((t, _)) = self.tgt_done.take_where(&key, |t| fits(h, t, 0)) {
            return Some(t);
        }
        // Its reply went out but the target record is still open (a read's data was
        // sent, the response capsule event not seen yet): take what it has.
        let (io, _) = self.targets.take_where(&key, |t| fits(h, &t.part, 0))?;
        Some(self.finish_target(io))
    }

    fn on_target(&mut self, t: u64, e: &TargetEvent, out: &mut dyn FnMut(TcpRecord)) {
        if (e.qid == 0 && !self.cfg.admin) || !self.sampled(e.cid) {
            return;
        }
        let key = (e.cntlid, e.qid, e.cid);
        if e.kind == TargetKind::DoneRecvPdu {
            if let Some((old, _)) = self.targets.take(&key) {
                self.close_target(key, old, out);
            }
            if !self.gate.admits(e.cid.into(), t) {
                return;
            }
            let mut io = TgtIo::new(t, e);
            let depth = self.tgt_depth.entry((e.cntlid, e.qid)).or_insert(0);
            *depth += 1;
            io.part.qd = Some(*depth);
            let mut evicted = Vec::new();
            self.targets.insert(key, io, &mut |_, io| evicted.push(io));
            for io in evicted {
                let p = self.finish_target(io);
                self.emit_target(p, out);
            }
            mark(&mut self.tgt_ctrls, e.cntlid);
            self.counters.in_flight = (self.hosts.len() + self.targets.len()) as u64;
            return;
        }
        let Some(io) = self.targets.first_mut(&key) else {
            // Resumed sends of a record already closed are expected; a completion
            // without a start is not.
            if e.kind == TargetKind::QueueResponse && !e.r2t && !self.gate.explains(e.cid.into(), t)
            {
                self.counters.unmatched += 1;
                self.unmatched_log.note(t, self.counters.unmatched);
            }
            return;
        };
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
            if let Some((io, _)) = self.targets.take(&key) {
                self.close_target(key, io, out);
            }
        }
        self.counters.in_flight = (self.hosts.len() + self.targets.len()) as u64;
    }

    /// A target record is over: wait for its host part (joint runs) or emit it.
    /// A target I/O leaves its queue: its stages from its marks.
    fn finish_target(&mut self, io: TgtIo) -> TargetPart {
        if let Some(n) = self.tgt_depth.get_mut(&(io.part.cntlid, io.part.qid)) {
            *n = n.saturating_sub(1);
        }
        io.finish()
    }

    fn close_target(&mut self, key: TgtKey, io: TgtIo, out: &mut dyn FnMut(TcpRecord)) {
        let part = self.finish_target(io);
        if self.cfg.side.host() {
            // The host part claims it when the host completes; an older unclaimed one
            // of the same key had no traced host (another machine's I/O): emit it.
            let mut unclaimed = Vec::new();
            let old = self
                .tgt_done
                .insert(key, part, &mut |_, p| unclaimed.push(p));
            unclaimed.extend(old);
            for p in unclaimed {
                self.emit_target(p, out);
            }
        } else {
            self.emit_target(part, out);
        }
    }

    fn emit_target(&mut self, t: TargetPart, out: &mut dyn FnMut(TcpRecord)) {
        if t.missing & M_T_REPLY_SEND != 0 {
            self.counters.incomplete += 1;
        }
        let expect_host = self.cfg.side == Side::Both && seen(&self.host_ctrls, t.cntlid);
        out(TcpRecord {
            host: None,
            target: Some(t),
            expect_host,
            expect_target: true,
            dropped: false,
        });
    }
}

impl Correlator for TcpCorrelator {
    type Event = NvmeTcpEvent;
    type Record = TcpRecord;

    fn on_event(&mut self, ev: &Event<NvmeTcpEvent>, out: &mut dyn FnMut(TcpRecord)) {
        match &ev.kind {
            NvmeTcpEvent::Tcp(TcpEvent::Host(e)) if self.cfg.side.host() => {
                self.on_host(ev.time, e, out)
            }
            NvmeTcpEvent::Tcp(TcpEvent::Target(e)) if self.cfg.side.target() => {
                self.on_target(ev.time, e, out)
            }
            NvmeTcpEvent::Block(b) if self.cfg.side.host() && self.cfg.block => {
                self.on_block(ev.time, b, out)
            }
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut dyn FnMut(TcpRecord)) {
        // Targets first: a host part still waiting for its block completion may
        // claim its target part.
        let mut tgts = Vec::new();
        self.targets.drain_all(&mut |k, io| tgts.push((k, io)));
        for (k, io) in tgts {
            self.close_target(k, io, out);
        }
        let mut hosts = Vec::new();
        self.hosts.drain_all(&mut |_, io| hosts.push(io));
        for io in hosts {
            if io.done.is_none() {
                self.counters.incomplete += 1;
            }
            self.emit_host(io, None, out);
        }
        let mut rest = Vec::new();
        self.tgt_done.drain_all(&mut |_, p| rest.push(p));
        for p in rest {
            self.emit_target(p, out);
        }
        self.by_sector.clear();
        self.bios.clear();
        self.counters.in_flight = 0;
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
        // Joined, a target start belongs to a host command whose admission it cannot
        // see; a rate change would cut the target part off rows (see `plan`).
        (self.cfg.side != Side::Both).then_some(&mut self.gate)
    }
}
