//! The target half of an NVMe/TCP I/O: its marks (A_k, P_k, X, Y, Z_k; see
//! [`super::model`]) as the target's events arrive, and the target stages from them.

use super::events::TargetEvent;
use super::host::{add, diff};
use super::model::{TargetPart, M_T_EXEC, M_T_RECV_TIME, M_T_REPLY_SEND, M_T_RESPONSE};
use crate::correlate::inflight::Started;

/// A target command's key: (cntlid, qid, cid) in one number.
#[inline]
pub(crate) fn tgt_key(cntlid: u16, qid: u16, cid: u16) -> u64 {
    (cntlid as u64) << 32 | (qid as u64) << 16 | cid as u64
}

#[derive(Debug, Clone, Default)]
pub(crate) struct TgtIo {
    pub(crate) first: u64,
    /// Number of its queue (cntlid, qid) in the correlator, for the queue's depth.
    pub(crate) queue: u32,
    pub(crate) part: TargetPart,
    /// P of the current round (its handler), where the current transport interval starts.
    pub(crate) mark: Option<u64>,
    /// A of the current round.
    pub(crate) arrive: Option<u64>,
    pub(crate) round_open: bool,
    /// An R2T was sent and its data not yet all in: H2C data belongs to a new round.
    pub(crate) awaiting_data: bool,
    /// Last try_recv_data of the current H2C message: (recv_time, event time).
    pub(crate) last_h2c: Option<(u64, u64)>,
    pub(crate) exec: Option<u64>,
    pub(crate) qresp: Option<u64>,
    pub(crate) nstack: Option<u64>,
    pub(crate) sub: Option<u64>,
    pub(crate) total: Option<u64>,
    pub(crate) response_sent: bool,
    /// Its reply went out and it waits for its host part (joint runs): no event of
    /// the target changes it any more.
    pub(crate) closed: bool,
    /// Open at the end of the run after a reply send went missing: `dropped`.
    pub(crate) lost: bool,
}

impl TgtIo {
    pub(crate) fn new(t: u64, e: &TargetEvent) -> TgtIo {
        let stamp = (e.recv_time != 0).then_some(e.recv_time);
        let mut io = TgtIo {
            first: t,
            part: TargetPart {
                cntlid: e.cntlid,
                qid: e.qid,
                cid: e.cid,
                opcode: e.opcode,
                slba: e.slba,
                len: e.len,
                recv_ns: stamp.unwrap_or(t),
                ..Default::default()
            },
            mark: Some(t),
            arrive: stamp,
            round_open: true,
            nstack: Some(0),
            sub: Some(0),
            total: Some(0),
            ..Default::default()
        };
        if stamp.is_none() {
            io.part.missing |= M_T_RECV_TIME;
        }
        add(&mut io.nstack, diff(Some(t), stamp));
        io
    }

    /// The H2C data of an R2T is all in and the target acts on it: round k ≥ 2 starts
    /// at the last data byte's arrival.
    pub(crate) fn open_data_round(&mut self) {
        if !self.awaiting_data {
            return;
        }
        self.awaiting_data = false;
        self.round_open = true;
        let (stamp, ev) = match self.last_h2c {
            Some((s, e)) => ((s != 0).then_some(s), Some(e)),
            None => (None, None),
        };
        if stamp.is_none() {
            self.part.missing |= M_T_RECV_TIME;
        }
        add(&mut self.nstack, diff(ev, stamp));
        self.arrive = stamp;
        self.mark = ev;
    }

    pub(crate) fn end_round(&mut self, t: u64) {
        if !self.round_open {
            return;
        }
        self.round_open = false;
        self.part.rounds += 1;
        add(&mut self.total, diff(Some(t), self.arrive));
        if self.part.rounds == 1 {
            self.part.send_ns = Some(t);
        }
        self.part.last_send_ns = Some(t);
    }

    /// Its part with the stages filled in (from `&self`, as [`HostIo::finish`]).
    ///
    /// [`HostIo::finish`]: super::host::HostIo::finish
    pub(crate) fn finish(&self) -> TargetPart {
        let mut part = self.part;
        let p = &mut part;
        if p.rounds == 0 {
            p.missing |= M_T_REPLY_SEND;
        }
        if self.exec.is_none() && p.opcode <= 0x02 {
            p.missing |= M_T_EXEC;
        }
        if self.qresp.is_none() {
            p.missing |= M_T_RESPONSE;
        }
        let done = p.rounds > 0 && !self.round_open && !self.awaiting_data;
        p.nstack_submission = if done { self.nstack } else { None };
        p.nvmet_tcp_submission = if done && self.exec.is_some() {
            self.sub
        } else {
            None
        };
        p.target_subsystem = diff(self.qresp, self.exec);
        p.nvmet_tcp_completion = if done {
            diff(p.last_send_ns, self.qresp)
        } else {
            None
        };
        p.total = if done { self.total } else { None };
        if !done {
            p.missing |= M_T_REPLY_SEND;
        }
        part
    }
}

impl Started for TgtIo {
    fn started(&self) -> u64 {
        self.first
    }
}

impl Started for TargetPart {
    fn started(&self) -> u64 {
        self.recv_ns
    }
}
