//! The host half of an NVMe/TCP I/O: its marks (B, Q, S_k, R_k, F_k, C, E; see
//! [`super::model`]) as the host's events arrive, and the host stages from them.

use super::events::HostEvent;
use super::model::{
    HostPart, M_BLK_COMPLETE, M_BLK_START, M_COMPLETION, M_QUEUE_RQ, M_RECV_TIME, M_REPLY, M_SEND,
};
use crate::correlate::inflight::Started;

/// A host command's key: (ctrl_id, qid, cid) in one number.
#[inline]
pub(crate) fn host_key(ctrl_id: u32, qid: u16, cid: u16) -> u64 {
    (ctrl_id as u64) << 32 | (qid as u64) << 16 | cid as u64
}

#[derive(Debug, Clone, Default)]
pub(crate) struct HostIo {
    pub(crate) first: u64,
    /// Number of its queue (ctrl_id, qid) in the correlator, for the queue's depth.
    pub(crate) queue: u32,
    pub(crate) part: HostPart,
    /// dev, sector of the request, for block_rq_complete.
    pub(crate) blk: Option<(u32, u64)>,
    pub(crate) blk_start: Option<u64>,
    pub(crate) queue_rq: Option<u64>,
    /// Entry of the latest send call of the current message.
    pub(crate) call_entry: Option<u64>,
    /// S of the current message, fixed at its done_send_req.
    pub(crate) sent: Option<u64>,
    /// The previous reply was an R2T: the next reply closes a new round.
    pub(crate) after_r2t: bool,
    /// Where the next host-submission interval starts (Q, then F of an R2T).
    pub(crate) phase_start: Option<u64>,
    /// F and R of the latest round.
    pub(crate) last_f: Option<u64>,
    pub(crate) sub: Option<u64>,
    pub(crate) waiting: Option<u64>,
    pub(crate) nstack: Option<u64>,
    pub(crate) done: Option<u64>,
}

pub(crate) fn add(acc: &mut Option<u64>, v: Option<u64>) {
    *acc = match (*acc, v) {
        // Saturating: a corrupt or stepped receive stamp must not panic the run.
        (Some(a), Some(v)) => Some(a.saturating_add(v)),
        _ => None,
    };
}

pub(crate) fn diff(later: Option<u64>, earlier: Option<u64>) -> Option<u64> {
    // A later event stamped before the earlier one is a mispairing: no cell, never a 0.
    later?.checked_sub(earlier?)
}

impl HostIo {
    pub(crate) fn new(t: u64, e: &HostEvent) -> HostIo {
        HostIo {
            first: t,
            part: HostPart {
                ctrl_id: e.ctrl_id,
                cntlid: e.cntlid,
                qid: e.qid,
                cid: e.cid,
                tag: e.tag,
                start_ns: t,
                ..Default::default()
            },
            sub: Some(0),
            waiting: Some(0),
            nstack: Some(0),
            ..Default::default()
        }
    }

    /// A reply PDU's handler ran (R2T, first C2H of a reply, or CQE).
    pub(crate) fn reply(&mut self, t: u64, recv_time: u64) {
        let new_round = self.part.rounds == 0 || self.after_r2t;
        if !new_round {
            return;
        }
        self.part.rounds += 1;
        let s = self.sent.or(self.call_entry);
        if s.is_none() {
            self.part.missing |= M_SEND;
        }
        let r = (recv_time != 0).then_some(recv_time);
        if r.is_none() {
            self.part.missing |= M_RECV_TIME;
        }
        add(&mut self.sub, diff(s, self.phase_start));
        add(&mut self.waiting, diff(r, s));
        add(&mut self.nstack, diff(Some(t), r));
        let anchor = r.unwrap_or(t);
        if self.part.rounds == 1 {
            self.part.send_ns = s;
            self.part.recv_ns = Some(anchor);
        }
        self.part.last_recv_ns = Some(anchor);
        self.last_f = Some(t);
        self.phase_start = Some(t);
        self.sent = None;
        self.call_entry = None;
        self.after_r2t = false;
    }

    /// Its part with the stages filled in; `end` = block completion when it was seen.
    /// From `&self`: the I/O is finished where it is held, not moved out first.
    #[inline(always)]
    pub(crate) fn finish(&self, end: Option<u64>, expect_block: bool) -> HostPart {
        let mut part = self.part;
        let p = &mut part;
        if self.queue_rq.is_none() {
            p.missing |= M_QUEUE_RQ;
        }
        if p.rounds == 0 {
            p.missing |= M_REPLY;
        }
        if self.done.is_none() {
            p.missing |= M_COMPLETION;
        }
        if expect_block && p.opcode.is_some() && self.blk.is_some() {
            if self.blk_start.is_none() {
                p.missing |= M_BLK_START;
            }
            if end.is_none() {
                p.missing |= M_BLK_COMPLETE;
            }
        }
        let complete = p.rounds > 0 && self.done.is_some() && self.queue_rq.is_some();
        p.queue_ns = self.queue_rq;
        p.blk_submission = diff(self.queue_rq, self.blk_start);
        p.nvme_tcp_submission = if self.queue_rq.is_some() && p.rounds > 0 {
            self.sub
        } else {
            None
        };
        p.waiting = if p.rounds > 0 { self.waiting } else { None };
        p.nstack_completion = if p.rounds > 0 { self.nstack } else { None };
        p.nvme_tcp_completion = diff(self.done, self.last_f);
        p.blk_completion = diff(end, self.done);
        let start = self.blk_start.or(self.queue_rq);
        p.start_ns = start.unwrap_or(self.first);
        p.total = if complete {
            diff(end.or(self.done), start)
        } else {
            None
        };
        part
    }
}

impl Started for HostIo {
    fn started(&self) -> u64 {
        self.first
    }
}
