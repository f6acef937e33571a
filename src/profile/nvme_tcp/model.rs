//! The nvme-tcp model: every NVMe/TCP I/O broken into host, network and target
//! stages, from the `nvme_tcp:*` / `nvmet_tcp:*` events of kernels patched with
//! `kernel_change/` plus `block:block_bio_queue` / `block:block_rq_complete`.
//!
//! # Model
//! An NVMe/TCP I/O is one or more *round trips*: the host sends a message (command
//! capsule, with in-capsule data for small writes; or the H2CData PDUs answering an
//! R2T) and waits for the target's reply (C2HData, R2T or response capsule). A read
//! and an in-capsule write have one round trip, an R2T write two (command → R2T,
//! H2C data → response), more if the target asks for data several times.
//!
//! Keys: host events by (ctrl_id, qid, cid); target events by (cntlid, qid, cid);
//! block events by (dev, sector), joined through `nvme_tcp_queue_rq` which carries
//! both. The host record of an I/O is joined with the target record of the same
//! (cntlid, qid, cid) whose command arrived after the host queued it and whose last
//! reply was sent before the host received it ([`fits`]): cids are reused, but never
//! while the host still holds the command.
//!
//! # Host marks (host clock)
//! - `B`  blk start: `block_bio_queue` of (dev, sector) before `queue_rq`.
//! - `Q`  `nvme_tcp_queue_rq`.
//! - `S_k` send point of round k: the entry (`nvme_tcp_try_send`) of the send call
//!   that completed the message, i.e. the last `try_send` of the request before the
//!   round's `done_send_req` (or before the reply, if the reply is seen first). The
//!   *entry* and not `done_send_req`: the socket may deliver the message (loopback:
//!   inside that very call) before the call returns, and the target's receive
//!   timestamp must not precede the host's send point. The host's TCP/IP transmit
//!   work in that call is therefore part of the network time.
//! - `R_k` receive time of the first reply PDU of round k: `recv_time` of
//!   `handle_r2t` / the first `handle_c2h_data` / `process_nvme_cqe`.
//! - `F_k` the event of that PDU (its handler ran).
//! - `C`  completion: `process_nvme_cqe`, or the `recv_data` of a C2H PDU with the
//!   SUCCESS flag (no response capsule then).
//! - `E`  `block_rq_complete` of (dev, sector).
//!
//! # Target marks (target clock)
//! - `A_k` arrival of round k's message: round 1 the `recv_time` of
//!   `done_recv_pdu` (the capsule's first bytes); round k ≥ 2 the `recv_time` of the
//!   last `try_recv_data` (the last H2C byte) before execution or the next reply.
//! - `P_k` the handler: `done_recv_pdu` (round 1), that last `try_recv_data` (k ≥ 2).
//! - `X`  `exec_read_req` / `exec_write_req`; `Y` `queue_response` with r2t=0.
//! - `Z_k` the first reply send of round k: the first `try_send_r2t`,
//!   `try_send_data_pdu` (C2H) or `try_send_response` of the round (events fire
//!   before the PDU is handed to the socket, so `Z_k` precedes the host's `R_k`).
//!
//! # Stages (ns)
//! Host, summed over round trips where several apply:
//! - `blk_submission`      = Q − B
//! - `nvme_tcp_submission` = (S_1 − Q) + Σ_{k≥2} (S_k − F_{k−1}): send queueing and
//!   the command PDU send calls before the last one; for R2T writes also the R2T
//!   handling and H2C data sending up to the last send call.
//! - `waiting`             = Σ_k (R_k − S_k)
//! - `nstack_completion`   = Σ_k (F_k − R_k): host network stack, skb stamp → handler
//! - `nvme_tcp_completion` = C − F_last: for a read all C2H data copies and the CQE;
//!   0 for writes (the CQE is the reply).
//! - `blk_completion`      = E − C
//! - `host_total`          = E − B (from Q when B is missing, to C when E is missing)
//!
//! Target, summed over round trips:
//! - `nstack_submission`   = Σ_k (P_k − A_k)
//! - `nvmet_tcp_submission`= Σ_k (end of transport work before the core − P_k): up to X
//!   in the round that executes, up to Z_k in an R2T round.
//! - `target_subsystem`    = Y − X
//! - `nvmet_tcp_completion`= Z_last − Y
//! - `target_total`        = Σ_k (Z_k − A_k), the sum of the four above.
//!
//! Both: `network_transmission` = waiting − target_total, when both sides have the
//! same number of round trips. With one clock per difference, the host/target clock
//! offset cancels; it is the host's last send call (TCP/IP transmit), the wire, and
//! the receive paths up to the skb timestamps, in both directions, for every round
//! trip — R2T writes included. It can only be negative when a message was handed to
//! the socket in several send calls and the target read its first bytes before the
//! last call began (then the CSV shows the negative value and stat skips it).
//!
//! So, per I/O: host_total = blk_submission + nvme_tcp_submission + waiting +
//! nstack_completion + nvme_tcp_completion + blk_completion, and waiting =
//! network_transmission + the four target stages.
//!
//! A stage whose marks are missing (event not traced, receive timestamp 0, chain
//! cut) is empty, never 0; the `chain` column names what is missing and the row's
//! status is `incomplete` (the I/O is kept with the stages it has). A missing
//! *part* (no target record for a host I/O, or the reverse) is a gap only when this
//! run saw the other side serve the same controller (cntlid): a host of a remote or
//! stock target writes complete host-only rows even if its kernel has nvmet_tcp.

use crate::correlate::inflight::DEFAULT_MAX;
use crate::profile::shared::nvme_events::{opcode_name, Disk};
use crate::record::{size_class, Status};

/// Which side(s) of the connection a run traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Side {
    Host,
    Target,
    /// Loopback, or a machine that is host and target of different connections.
    #[default]
    Both,
}

impl Side {
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Host => "host",
            Side::Target => "target",
            Side::Both => "both",
        }
    }

    pub fn parse(s: &str) -> Option<Side> {
        [Side::Host, Side::Target, Side::Both]
            .into_iter()
            .find(|x| x.as_str() == s)
    }

    pub fn host(self) -> bool {
        self != Side::Target
    }

    pub fn target(self) -> bool {
        self != Side::Host
    }
}

/// Options of the nvme-tcp correlator.
#[derive(Debug, Clone)]
pub struct TcpConfig {
    pub side: Side,
    /// Block events are traced: a host record waits for `block_rq_complete`.
    pub block: bool,
    /// Keep admin queue (qid 0) commands.
    pub admin: bool,
    /// In-flight I/Os kept at most per side; beyond it the oldest are given up.
    pub max_in_flight: usize,
    /// `--sample N`: only cids with `cid & mask == 0` are traced (the kernel filter
    /// does it; the correlator uses it to tell unsampled block events from lost ones).
    pub sample_mask: u16,
    /// This host's nvme disks by name (sysfs): where a request is made on a multipath
    /// path disk, its bio was queued on the namespace head, found here by name (see
    /// [`multipath_head`](crate::device::multipath_head)).
    pub disks: std::collections::HashMap<String, u32>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            side: Side::Both,
            block: true,
            admin: false,
            max_in_flight: DEFAULT_MAX / 4,
            sample_mask: 0,
            disks: Default::default(),
        }
    }
}

// Chain marks: what a part is missing. Rendered in the `chain` column.
pub(crate) const M_BLK_START: u16 = 1 << 0;
pub(crate) const M_QUEUE_RQ: u16 = 1 << 1;
pub(crate) const M_SEND: u16 = 1 << 2;
pub(crate) const M_REPLY: u16 = 1 << 3;
pub(crate) const M_RECV_TIME: u16 = 1 << 4;
pub(crate) const M_COMPLETION: u16 = 1 << 5;
pub(crate) const M_BLK_COMPLETE: u16 = 1 << 6;
pub(crate) const M_TARGET: u16 = 1 << 7;
pub(crate) const M_T_RECV_TIME: u16 = 1 << 8;
pub(crate) const M_T_EXEC: u16 = 1 << 9;
pub(crate) const M_T_RESPONSE: u16 = 1 << 10;
pub(crate) const M_T_REPLY_SEND: u16 = 1 << 11;
pub(crate) const M_HOST: u16 = 1 << 12;
pub(crate) const M_T_START: u16 = 1 << 13;

/// The marks a host part / a target part can miss (the others come from the record).
pub(crate) const HOST_MARKS: u16 =
    M_BLK_START | M_QUEUE_RQ | M_SEND | M_REPLY | M_RECV_TIME | M_COMPLETION | M_BLK_COMPLETE;
pub(crate) const TARGET_MARKS: u16 =
    M_T_START | M_T_RECV_TIME | M_T_EXEC | M_T_RESPONSE | M_T_REPLY_SEND;

pub(crate) const MARK_NAMES: [(u16, &str); 14] = [
    (M_BLK_START, "blk_start"),
    (M_QUEUE_RQ, "queue_rq"),
    (M_SEND, "send"),
    (M_REPLY, "reply"),
    (M_RECV_TIME, "recv_time"),
    (M_COMPLETION, "completion"),
    (M_BLK_COMPLETE, "blk_complete"),
    (M_HOST, "host"),
    (M_TARGET, "target"),
    (M_T_START, "tgt_recv_pdu"),
    (M_T_RECV_TIME, "tgt_recv_time"),
    (M_T_EXEC, "tgt_exec"),
    (M_T_RESPONSE, "tgt_queue_response"),
    (M_T_REPLY_SEND, "tgt_reply_send"),
];

/// The host's view of one I/O: identity, stage values and the absolute marks merge
/// needs to pair it with a target record of another recording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostPart {
    pub ctrl_id: u32,
    pub disk: Disk,
    pub cntlid: u16,
    pub qid: u16,
    pub cid: u16,
    pub tag: u16,
    pub opcode: Option<u8>,
    pub write: bool,
    pub inline_data: bool,
    pub slba: Option<u64>,
    pub bytes: Option<u64>,
    pub rounds: u32,
    pub send_calls: u32,
    pub c2h_pdus: u32,
    pub r2ts: u32,
    pub blk_submission: Option<u64>,
    pub nvme_tcp_submission: Option<u64>,
    pub waiting: Option<u64>,
    pub nstack_completion: Option<u64>,
    pub nvme_tcp_completion: Option<u64>,
    pub blk_completion: Option<u64>,
    pub total: Option<u64>,
    /// First mark of the I/O (B, else Q, else the first event seen).
    pub start_ns: u64,
    pub queue_ns: Option<u64>,
    /// S_1 and R_1 (R_1 falls back to F_1's event time when the stamp is missing).
    pub send_ns: Option<u64>,
    pub recv_ns: Option<u64>,
    /// R of the last round (same fallback).
    pub last_recv_ns: Option<u64>,
    pub nvme_status: Option<u16>,
    /// Commands in flight on the host queue when it was queued, itself included.
    pub qd: Option<u32>,
    /// Bios that were waiting at its place when its block start was joined.
    pub candidates: Option<u32>,
    pub missing: u16,
}

/// The target's view of one I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TargetPart {
    pub cntlid: u16,
    pub qid: u16,
    pub cid: u16,
    pub opcode: u8,
    pub slba: u64,
    pub len: u32,
    pub rounds: u32,
    pub h2c_pdus: u32,
    pub r2t: bool,
    pub nstack_submission: Option<u64>,
    pub nvmet_tcp_submission: Option<u64>,
    pub target_subsystem: Option<u64>,
    pub nvmet_tcp_completion: Option<u64>,
    pub total: Option<u64>,
    /// A_1 (done_recv_pdu's event time when the stamp is missing).
    pub recv_ns: u64,
    /// Z_1 and Z_last.
    pub send_ns: Option<u64>,
    pub last_send_ns: Option<u64>,
    pub nvme_status: Option<u16>,
    /// Commands in flight on the target queue when it arrived, itself included.
    pub qd: Option<u32>,
    pub missing: u16,
}

/// One NVMe/TCP I/O: host part, target part, or both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpRecord {
    pub host: Option<HostPart>,
    pub target: Option<TargetPart>,
    /// The run traced the other side too, so a missing part is a gap in the chain.
    pub expect_host: bool,
    pub expect_target: bool,
    /// A sample of its chain was counted by the kernel but never arrived.
    pub dropped: bool,
}

/// Whether target part `t` can belong to host part `h`, when the target clock reads
/// `off` ns less than the host's: the command reached the target after the host
/// queued it, and the target's last reply left before the host received it. A cid
/// is not reused while the host holds the command, so at most one target I/O of the
/// same (cntlid, qid, cid) fits one host I/O.
pub fn fits(h: &HostPart, t: &TargetPart, off: i64) -> bool {
    if (h.cntlid, h.qid, h.cid) != (t.cntlid, t.qid, t.cid) {
        return false;
    }
    // The command itself must agree where both sides recorded it: a cid is reused,
    // and with a wrong clock offset an earlier command of the same cid can fit the
    // times; its opcode, place or length tells it apart.
    if h.opcode.is_some_and(|o| o != t.opcode) {
        return false;
    }
    let rw = matches!(t.opcode, 0x01 | 0x02);
    if rw && (h.slba.is_some_and(|s| s != t.slba) || h.bytes.is_some_and(|b| b != t.len as u64)) {
        return false;
    }
    let start = h.queue_ns.unwrap_or(h.start_ns) as i128;
    let arrive = t.recv_ns as i128 + off as i128;
    let ok_start = arrive >= start;
    let ok_end = match (t.last_send_ns, h.last_recv_ns) {
        (Some(z), Some(r)) => z as i128 + off as i128 <= r as i128,
        // Without both ends, the start alone decides (the host holds the cid).
        _ => true,
    };
    ok_start && ok_end
}

impl TcpRecord {
    /// The host's queue depth, else the target's.
    pub fn qd(&self) -> Option<u32> {
        self.host
            .as_ref()
            .and_then(|h| h.qd)
            .or_else(|| self.target.as_ref().and_then(|t| t.qd))
    }

    /// B (else Q) of the host part; a target-only row starts at its arrival (A₁),
    /// on the target's clock.
    pub fn start(&self) -> u64 {
        match (&self.host, &self.target) {
            (Some(h), _) => h.start_ns,
            (None, Some(t)) => t.recv_ns,
            _ => 0,
        }
    }

    pub(crate) fn op_label(&self) -> std::borrow::Cow<'static, str> {
        let (qid, opcode) = match (&self.host, &self.target) {
            (Some(h), _) if h.opcode.is_some() => (h.qid, h.opcode.unwrap_or(0)),
            (_, Some(t)) => (t.qid, t.opcode),
            _ => return "".into(),
        };
        match opcode_name(qid as u32, opcode, 0) {
            Some(n) => n.into(),
            None => format!("0x{opcode:02x}").into(),
        }
    }

    pub(crate) fn bytes(&self) -> Option<u64> {
        match (&self.host, &self.target) {
            (Some(h), _) if h.bytes.is_some() => h.bytes,
            (_, Some(t)) => Some(t.len as u64),
            _ => None,
        }
    }

    pub(crate) fn size_label(&self) -> &'static str {
        self.bytes().map_or("", size_class)
    }

    pub(crate) fn shape(&self) -> &'static str {
        let (opcode, r2t, inline) = match (&self.host, &self.target) {
            (Some(h), t) if h.opcode.is_some() => (
                h.opcode.unwrap_or(0),
                h.r2ts > 0 || t.as_ref().is_some_and(|t| t.r2t),
                h.inline_data,
            ),
            (_, Some(t)) => (t.opcode, t.r2t, !t.r2t),
            _ => return "",
        };
        match opcode {
            0x02 => "read",
            0x01 if r2t || !inline => "write-r2t",
            0x01 => "write-inline",
            _ => "other",
        }
    }

    /// waiting − target_total, both sides with the same number of round trips.
    pub fn network_ns(&self) -> Option<i64> {
        let (h, t) = (self.host.as_ref()?, self.target.as_ref()?);
        if h.rounds != t.rounds {
            return None;
        }
        let d = h.waiting? as i128 - t.total? as i128;
        Some(d.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
    }

    pub(crate) fn side(&self) -> &'static str {
        match (&self.host, &self.target) {
            (Some(_), Some(_)) => "both",
            (Some(_), None) => "host",
            _ => "target",
        }
    }

    pub(crate) fn missing(&self) -> u16 {
        let mut m = 0;
        match &self.host {
            Some(h) => m |= h.missing,
            None if self.expect_host => m |= M_HOST,
            None => {}
        }
        match &self.target {
            Some(t) => m |= t.missing,
            None if self.expect_target => m |= M_TARGET,
            None => {}
        }
        m
    }

    pub(crate) fn chain(&self) -> String {
        let m = self.missing();
        if m == 0 {
            return "complete".into();
        }
        let names: Vec<&str> = MARK_NAMES
            .iter()
            .filter(|(b, _)| m & b != 0)
            .map(|(_, n)| *n)
            .collect();
        format!("missing:{}", names.join("+"))
    }

    pub(crate) fn nvme_status(&self) -> Option<u16> {
        self.host
            .as_ref()
            .and_then(|h| h.nvme_status)
            .or_else(|| self.target.as_ref().and_then(|t| t.nvme_status))
    }

    /// The record's own status: its part(s) completed, with which NVMe status.
    /// `incomplete` whenever the chain has a gap (an event of the traced side(s) is
    /// missing, see `chain`), so stat and report count incomplete chains per group;
    /// else `error` for a non-zero NVMe status, else `ok`.
    pub(crate) fn own_status(&self) -> Status {
        if self.dropped {
            return Status::Dropped;
        }
        match (self.missing() == 0, self.nvme_status()) {
            (false, _) => Status::Incomplete,
            (true, Some(s)) if s != 0 => Status::Error,
            _ => Status::Ok,
        }
    }
}
