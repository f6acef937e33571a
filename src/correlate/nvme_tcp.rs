//! The nvme-tcp profile: every NVMe/TCP I/O broken into host, network and target
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

use super::{
    size_class, Cell, Correlator, Counters, EventReq, FxHasher, FxMap, IoRecord, ProfileInfo,
    Status,
};
use crate::decode::block::{BlockEvent, BlockKind};
use crate::decode::nvme::{opcode_name, DiskName};
use crate::decode::nvme_tcp::{
    HostEvent, HostKind, TargetEvent, TargetKind, TcpEvent, C2H_SUCCESS,
};
use crate::decode::{Event, EventKind};
use std::hash::Hasher;

const HOST_HINT: &str =
    "needs the kernel_change/ patch (nvme_tcp tracepoints) and the nvme-tcp host module loaded";
const TGT_HINT: &str =
    "needs the kernel_change/ patch (nvmet_tcp tracepoints) and the nvmet-tcp target module loaded";
const BLK_HINT: &str = "CONFIG_EVENT_TRACING (every distribution kernel has it)";

const fn host(event: &'static str) -> EventReq {
    EventReq {
        system: "nvme_tcp",
        event,
        required: true,
        hint: HOST_HINT,
    }
}

const fn tgt(event: &'static str) -> EventReq {
    EventReq {
        system: "nvmet_tcp",
        event,
        required: false,
        hint: TGT_HINT,
    }
}

/// Stage columns, in [`IoRecord::stage`] order.
pub const STAGES: &[&str] = &[
    "blk_submission_ns",
    "nvme_tcp_submission_ns",
    "waiting_ns",
    "nstack_completion_ns",
    "nvme_tcp_completion_ns",
    "blk_completion_ns",
    "nstack_submission_ns",
    "nvmet_tcp_submission_ns",
    "target_subsystem_ns",
    "nvmet_tcp_completion_ns",
    "network_transmission_ns",
    "host_total_ns",
    "target_total_ns",
];

pub static INFO: ProfileInfo = ProfileInfo {
    name: "nvme-tcp",
    about: "NVMe/TCP I/O split into host, network and target stages (kernel_change/ patch)",
    // Host events are required: a machine that is only a target runs with
    // `--side target`, which needs only the nvmet_tcp ones. Events the stages do not
    // use (queue_request, try_send_cmd_pdu, try_send_data_pdu, try_send_data,
    // setup_*) are not opened: every sample costs the traced I/O time.
    events: &[
        host("nvme_tcp_queue_rq"),
        host("nvme_tcp_try_send"),
        host("nvme_tcp_done_send_req"),
        host("nvme_tcp_handle_r2t"),
        host("nvme_tcp_handle_c2h_data"),
        host("nvme_tcp_recv_data"),
        host("nvme_tcp_process_nvme_cqe"),
        tgt("nvmet_tcp_done_recv_pdu"),
        tgt("nvmet_tcp_exec_read_req"),
        tgt("nvmet_tcp_exec_write_req"),
        tgt("nvmet_tcp_queue_response"),
        tgt("nvmet_tcp_try_send_r2t"),
        tgt("nvmet_tcp_try_send_data_pdu"),
        tgt("nvmet_tcp_try_send_response"),
        tgt("nvmet_tcp_handle_h2c_data_pdu"),
        tgt("nvmet_tcp_try_recv_data"),
        EventReq {
            system: "block",
            event: "block_bio_queue",
            required: false,
            hint: BLK_HINT,
        },
        EventReq {
            system: "block",
            event: "block_rq_complete",
            required: false,
            hint: BLK_HINT,
        },
    ],
    columns: &[
        "start_time",
        "start_ns",
        "side",
        "ctrl",
        "disk",
        "cntlid",
        "qid",
        "cid",
        "tag",
        "op",
        "slba",
        "bytes",
        "size_class",
        "shape",
        "round_trips",
        "send_calls",
        "c2h_pdus",
        "r2ts",
        "h2c_pdus",
        "blk_submission_ns",
        "nvme_tcp_submission_ns",
        "waiting_ns",
        "nstack_completion_ns",
        "nvme_tcp_completion_ns",
        "blk_completion_ns",
        "nstack_submission_ns",
        "nvmet_tcp_submission_ns",
        "target_subsystem_ns",
        "nvmet_tcp_completion_ns",
        "network_transmission_ns",
        "host_total_ns",
        "target_total_ns",
        "host_start_ns",
        "host_queue_ns",
        "host_send_ns",
        "host_recv_ns",
        "host_last_recv_ns",
        "target_rounds",
        "target_recv_ns",
        "target_send_ns",
        "target_last_send_ns",
        "nvme_status",
        "chain",
        "status",
    ],
    group_columns: &["op", "size_class"],
    stages: STAGES,
};

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
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            side: Side::Both,
            block: true,
            admin: false,
            max_in_flight: 1 << 18,
            sample_mask: 0,
        }
    }
}

// Chain marks: what a part is missing. Rendered in the `chain` column.
const M_BLK_START: u16 = 1 << 0;
const M_QUEUE_RQ: u16 = 1 << 1;
const M_SEND: u16 = 1 << 2;
const M_REPLY: u16 = 1 << 3;
const M_RECV_TIME: u16 = 1 << 4;
const M_COMPLETION: u16 = 1 << 5;
const M_BLK_COMPLETE: u16 = 1 << 6;
const M_TARGET: u16 = 1 << 7;
const M_T_RECV_TIME: u16 = 1 << 8;
const M_T_EXEC: u16 = 1 << 9;
const M_T_RESPONSE: u16 = 1 << 10;
const M_T_REPLY_SEND: u16 = 1 << 11;
const M_HOST: u16 = 1 << 12;
const M_T_START: u16 = 1 << 13;

/// The marks a host part / a target part can miss (the others come from the record).
const HOST_MARKS: u16 =
    M_BLK_START | M_QUEUE_RQ | M_SEND | M_REPLY | M_RECV_TIME | M_COMPLETION | M_BLK_COMPLETE;
const TARGET_MARKS: u16 = M_T_START | M_T_RECV_TIME | M_T_EXEC | M_T_RESPONSE | M_T_REPLY_SEND;

const MARK_NAMES: [(u16, &str); 14] = [
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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HostPart {
    pub ctrl_id: u32,
    pub disk: DiskName,
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
    pub missing: u16,
}

/// The target's view of one I/O.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
    fn op_label(&self) -> std::borrow::Cow<'static, str> {
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

    fn bytes(&self) -> Option<u64> {
        match (&self.host, &self.target) {
            (Some(h), _) if h.bytes.is_some() => h.bytes,
            (_, Some(t)) => Some(t.len as u64),
            _ => None,
        }
    }

    fn size_label(&self) -> &'static str {
        self.bytes().map_or("", size_class)
    }

    fn shape(&self) -> &'static str {
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

    fn side(&self) -> &'static str {
        match (&self.host, &self.target) {
            (Some(_), Some(_)) => "both",
            (Some(_), None) => "host",
            _ => "target",
        }
    }

    fn missing(&self) -> u16 {
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

    fn chain(&self) -> String {
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

    fn nvme_status(&self) -> Option<u16> {
        self.host
            .as_ref()
            .and_then(|h| h.nvme_status)
            .or_else(|| self.target.as_ref().and_then(|t| t.nvme_status))
    }

    /// The record's own status: its part(s) completed, with which NVMe status.
    /// `incomplete` whenever the chain has a gap (an event of the traced side(s) is
    /// missing, see `chain`), so stat and report count incomplete chains per group;
    /// else `error` for a non-zero NVMe status, else `ok`.
    fn own_status(&self) -> Status {
        match (self.missing() == 0, self.nvme_status()) {
            (false, _) => Status::Incomplete,
            (true, Some(s)) if s != 0 => Status::Error,
            _ => Status::Ok,
        }
    }
}

impl IoRecord for TcpRecord {
    fn start_ns(&self) -> u64 {
        match (&self.host, &self.target) {
            (Some(h), _) => h.start_ns,
            (None, Some(t)) => t.recv_ns,
            _ => 0,
        }
    }

    fn cells(&self, out: &mut dyn FnMut(Cell<'_>)) {
        let h = self.host.as_ref();
        let t = self.target.as_ref();
        out(Cell::Str(self.side()));
        match h {
            Some(h) => {
                out(Cell::Str(&format!("nvme{}", h.ctrl_id)));
                out(Cell::Str(h.disk.as_str()));
            }
            None => {
                out(Cell::Empty);
                out(Cell::Empty);
            }
        }
        let (cntlid, qid, cid) = match (h, t) {
            (Some(h), _) => (h.cntlid, h.qid, h.cid),
            (None, Some(t)) => (t.cntlid, t.qid, t.cid),
            _ => (0, 0, 0),
        };
        out(Cell::U64(cntlid as u64));
        out(Cell::U64(qid as u64));
        out(Cell::U64(cid as u64));
        out(h.map(|h| h.tag as u64).into());
        out(Cell::Str(&self.op_label()));
        let slba = h.and_then(|h| h.slba).or(t.map(|t| t.slba));
        out(slba.into());
        out(self.bytes().into());
        out(Cell::Str(self.size_label()));
        out(Cell::Str(self.shape()));
        out(h.map(|h| h.rounds as u64).into());
        out(h.map(|h| h.send_calls as u64).into());
        out(h.map(|h| h.c2h_pdus as u64).into());
        out(h.map(|h| h.r2ts as u64).into());
        out(t.map(|t| t.h2c_pdus as u64).into());
        for i in 0..STAGES.len() {
            if i == 10 {
                out(self.network_ns().map_or(Cell::Empty, Cell::I64));
            } else {
                out(self.stage(i).into());
            }
        }
        out(h.map(|h| h.start_ns).into());
        out(h.and_then(|h| h.queue_ns).into());
        out(h.and_then(|h| h.send_ns).into());
        out(h.and_then(|h| h.recv_ns).into());
        out(h.and_then(|h| h.last_recv_ns).into());
        out(t.map(|t| t.rounds as u64).into());
        out(t.map(|t| t.recv_ns).into());
        out(t.and_then(|t| t.send_ns).into());
        out(t.and_then(|t| t.last_send_ns).into());
        match self.nvme_status() {
            Some(s) => out(Cell::Str(&format!("{s:#x}"))),
            None => out(Cell::Empty),
        }
        out(Cell::Str(&self.chain()));
        out(Cell::Str(self.own_status().as_str()));
    }

    fn group_key(&self) -> u64 {
        let mut h = FxHasher::default();
        h.write(self.op_label().as_bytes());
        h.write_u8(0xff);
        h.write(self.size_label().as_bytes());
        h.finish()
    }

    fn group_labels(&self) -> Vec<String> {
        vec![self.op_label().into_owned(), self.size_label().to_string()]
    }

    fn stage(&self, i: usize) -> Option<u64> {
        let h = self.host.as_ref();
        let t = self.target.as_ref();
        match i {
            0 => h?.blk_submission,
            1 => h?.nvme_tcp_submission,
            2 => h?.waiting,
            3 => h?.nstack_completion,
            4 => h?.nvme_tcp_completion,
            5 => h?.blk_completion,
            6 => t?.nstack_submission,
            7 => t?.nvmet_tcp_submission,
            8 => t?.target_subsystem,
            9 => t?.nvmet_tcp_completion,
            10 => u64::try_from(self.network_ns()?).ok(),
            11 => h?.total,
            12 => t?.total,
            _ => None,
        }
    }

    fn status(&self) -> Status {
        self.own_status()
    }
}

/// Why a CSV row cannot be read back into a record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    #[error("column {column} holds `{value}`: {expected}")]
    Bad {
        column: &'static str,
        value: String,
        expected: &'static str,
    },
}

fn bad(column: &'static str, value: &str, expected: &'static str) -> RowError {
    RowError::Bad {
        column,
        value: value.to_string(),
        expected,
    }
}

impl TcpRecord {
    /// Read a row written by [`IoRecord::cells`] back (`get` gives a column's cell by
    /// name, "" when absent), so `merge` can join a host-only and a target-only row
    /// and write exactly the row a joint recording writes.
    pub fn from_row(get: &dyn Fn(&'static str) -> String) -> Result<TcpRecord, RowError> {
        fn num<T: std::str::FromStr>(
            get: &dyn Fn(&'static str) -> String,
            c: &'static str,
        ) -> Result<Option<T>, RowError> {
            let v = get(c);
            if v.is_empty() {
                return Ok(None);
            }
            v.parse().map(Some).map_err(|_| bad(c, &v, "a number"))
        }
        fn req<T: std::str::FromStr>(
            get: &dyn Fn(&'static str) -> String,
            c: &'static str,
        ) -> Result<T, RowError> {
            num(get, c)?.ok_or_else(|| bad(c, "", "a number"))
        }
        let side = get("side");
        let (has_h, has_t) = match side.as_str() {
            "host" => (true, false),
            "target" => (false, true),
            "both" => (true, true),
            _ => return Err(bad("side", &side, "host, target or both")),
        };
        let (cntlid, qid, cid) = (req(get, "cntlid")?, req(get, "qid")?, req(get, "cid")?);
        let op = get("op");
        let opcode = if op.is_empty() {
            None
        } else {
            let parsed = op
                .strip_prefix("0x")
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .or_else(|| {
                    (0..=255u8).find(|o| opcode_name(qid as u32, *o, 0) == Some(op.as_str()))
                });
            Some(parsed.ok_or_else(|| bad("op", &op, "an NVMe opcode name or 0xNN"))?)
        };
        let shape = get("shape");
        let chain = get("chain");
        let mut missing = 0u16;
        if let Some(list) = chain.strip_prefix("missing:") {
            for name in list.split('+') {
                let bit = MARK_NAMES
                    .iter()
                    .find(|(_, n)| *n == name)
                    .ok_or_else(|| bad("chain", &chain, "complete or missing:<marks>"))?;
                missing |= bit.0;
            }
        } else if chain != "complete" {
            return Err(bad("chain", &chain, "complete or missing:<marks>"));
        }
        let status = get("nvme_status");
        let nvme_status = if status.is_empty() {
            None
        } else {
            Some(
                status
                    .strip_prefix("0x")
                    .and_then(|h| u16::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad("nvme_status", &status, "0xNN"))?,
            )
        };
        let host = if has_h {
            let ctrl = get("ctrl");
            Some(HostPart {
                ctrl_id: ctrl
                    .strip_prefix("nvme")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| bad("ctrl", &ctrl, "nvmeN"))?,
                disk: DiskName::new(get("disk").as_bytes()),
                cntlid,
                qid,
                cid,
                tag: req(get, "tag")?,
                opcode,
                write: opcode == Some(0x01),
                inline_data: shape == "write-inline",
                slba: num(get, "slba")?,
                bytes: num(get, "bytes")?,
                rounds: req(get, "round_trips")?,
                send_calls: req(get, "send_calls")?,
                c2h_pdus: req(get, "c2h_pdus")?,
                r2ts: req(get, "r2ts")?,
                blk_submission: num(get, "blk_submission_ns")?,
                nvme_tcp_submission: num(get, "nvme_tcp_submission_ns")?,
                waiting: num(get, "waiting_ns")?,
                nstack_completion: num(get, "nstack_completion_ns")?,
                nvme_tcp_completion: num(get, "nvme_tcp_completion_ns")?,
                blk_completion: num(get, "blk_completion_ns")?,
                total: num(get, "host_total_ns")?,
                start_ns: req(get, "host_start_ns")?,
                queue_ns: num(get, "host_queue_ns")?,
                send_ns: num(get, "host_send_ns")?,
                recv_ns: num(get, "host_recv_ns")?,
                last_recv_ns: num(get, "host_last_recv_ns")?,
                nvme_status,
                missing: missing & HOST_MARKS,
            })
        } else {
            None
        };
        let target = if has_t {
            Some(TargetPart {
                cntlid,
                qid,
                cid,
                opcode: opcode.unwrap_or(0),
                slba: num(get, "slba")?.unwrap_or(0),
                len: num(get, "bytes")?.unwrap_or(0),
                rounds: req(get, "target_rounds")?,
                h2c_pdus: req(get, "h2c_pdus")?,
                r2t: shape == "write-r2t",
                nstack_submission: num(get, "nstack_submission_ns")?,
                nvmet_tcp_submission: num(get, "nvmet_tcp_submission_ns")?,
                target_subsystem: num(get, "target_subsystem_ns")?,
                nvmet_tcp_completion: num(get, "nvmet_tcp_completion_ns")?,
                total: num(get, "target_total_ns")?,
                recv_ns: req(get, "target_recv_ns")?,
                send_ns: num(get, "target_send_ns")?,
                last_send_ns: num(get, "target_last_send_ns")?,
                nvme_status,
                missing: missing & TARGET_MARKS,
            })
        } else {
            None
        };
        Ok(TcpRecord {
            host,
            target,
            expect_host: has_h || missing & M_HOST != 0,
            expect_target: has_t || missing & M_TARGET != 0,
        })
    }
}

// ---------------------------------------------------------------------------------
// Host side.

type HostKey = (u32, u16, u16);
type TgtKey = (u16, u16, u16);

#[derive(Debug, Clone, Default)]
struct HostIo {
    first: u64,
    part: HostPart,
    /// dev, sector of the request, for block_rq_complete.
    blk: Option<(u32, u64)>,
    blk_start: Option<u64>,
    queue_rq: Option<u64>,
    /// Entry of the latest send call of the current message.
    call_entry: Option<u64>,
    /// S of the current message, fixed at its done_send_req.
    sent: Option<u64>,
    /// The previous reply was an R2T: the next reply closes a new round.
    after_r2t: bool,
    /// Where the next host-submission interval starts (Q, then F of an R2T).
    phase_start: Option<u64>,
    /// F and R of the latest round.
    last_f: Option<u64>,
    sub: Option<u64>,
    waiting: Option<u64>,
    nstack: Option<u64>,
    done: Option<u64>,
}

fn add(acc: &mut Option<u64>, v: Option<u64>) {
    *acc = match (*acc, v) {
        // Saturating: a corrupt or stepped receive stamp must not panic the run.
        (Some(a), Some(v)) => Some(a.saturating_add(v)),
        _ => None,
    };
}

fn diff(later: Option<u64>, earlier: Option<u64>) -> Option<u64> {
    Some(later?.saturating_sub(earlier?))
}

impl HostIo {
    fn new(t: u64, e: &HostEvent) -> HostIo {
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
    fn reply(&mut self, t: u64, recv_time: u64) {
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

    /// Fill in the stages; `end` = block completion when it was seen.
    fn finish(mut self, end: Option<u64>, expect_block: bool) -> HostPart {
        let p = &mut self.part;
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
        self.part
    }
}

// ---------------------------------------------------------------------------------
// Target side.

#[derive(Debug, Clone, Default)]
struct TgtIo {
    first: u64,
    part: TargetPart,
    /// P of the current round (its handler), where the current transport interval starts.
    mark: Option<u64>,
    /// A of the current round.
    arrive: Option<u64>,
    round_open: bool,
    /// An R2T was sent and its data not yet all in: H2C data belongs to a new round.
    awaiting_data: bool,
    /// Last try_recv_data of the current H2C message: (recv_time, event time).
    last_h2c: Option<(u64, u64)>,
    exec: Option<u64>,
    qresp: Option<u64>,
    nstack: Option<u64>,
    sub: Option<u64>,
    total: Option<u64>,
    response_sent: bool,
}

impl TgtIo {
    fn new(t: u64, e: &TargetEvent) -> TgtIo {
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
    fn open_data_round(&mut self) {
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

    fn end_round(&mut self, t: u64) {
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

    fn finish(mut self) -> TargetPart {
        let p = &mut self.part;
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
        self.part
    }
}

// ---------------------------------------------------------------------------------

/// The nvme-tcp correlator; see the module doc for what each stage spans.
pub struct TcpCorrelator {
    cfg: TcpConfig,
    hosts: FxMap<HostKey, HostIo>,
    /// (dev, sector) → host key of the request, from queue_rq to block_rq_complete.
    by_sector: FxMap<(u32, u64), HostKey>,
    /// block_bio_queue times not yet claimed by a queue_rq.
    bios: FxMap<(u32, u64), u64>,
    targets: FxMap<TgtKey, TgtIo>,
    /// Target parts whose reply went out, waiting for their host part (joint runs).
    tgt_done: FxMap<TgtKey, TargetPart>,
    /// Controllers (cntlid) seen on the host side and on the target side in this run.
    /// A part of the other side is expected only for a controller seen there: with
    /// `--side both` a host of a remote target (or a target of remote hosts) whose
    /// kernel also has the other side's events writes complete one-sided rows.
    host_ctrls: Box<[u64; 1024]>,
    tgt_ctrls: Box<[u64; 1024]>,
    counters: Counters,
}

fn mark(set: &mut [u64; 1024], cntlid: u16) {
    set[cntlid as usize / 64] |= 1 << (cntlid % 64);
}

fn seen(set: &[u64; 1024], cntlid: u16) -> bool {
    set[cntlid as usize / 64] & (1 << (cntlid % 64)) != 0
}

/// bio_queue entries kept at most: bios that never become a traced request (merged
/// into another, other disks, unsampled cids) are dropped beyond this.
const MAX_BIOS: usize = 4096;
/// bios older than this (ns) when the map is full are stale.
const BIO_STALE_NS: u64 = 1_000_000_000;

impl TcpCorrelator {
    pub fn new(cfg: TcpConfig) -> TcpCorrelator {
        TcpCorrelator {
            cfg,
            hosts: FxMap::default(),
            by_sector: FxMap::default(),
            bios: FxMap::default(),
            targets: FxMap::default(),
            tgt_done: FxMap::default(),
            host_ctrls: Box::new([0; 1024]),
            tgt_ctrls: Box::new([0; 1024]),
            counters: Counters::default(),
        }
    }

    fn sampled(&self, cid: u16) -> bool {
        cid & self.cfg.sample_mask == 0
    }

    fn on_block(&mut self, t: u64, b: &BlockEvent, out: &mut dyn FnMut(TcpRecord)) {
        match b.kind {
            BlockKind::BioQueue => {
                if self.bios.len() >= MAX_BIOS {
                    let cut = t.saturating_sub(BIO_STALE_NS);
                    self.bios.retain(|_, v| *v >= cut);
                    if self.bios.len() >= MAX_BIOS {
                        // Still full of fresh bios: keep the newest half.
                        let mut times: Vec<u64> = self.bios.values().copied().collect();
                        let mid = times.len() / 2;
                        let (_, m, _) = times.select_nth_unstable(mid);
                        let m = *m;
                        self.bios.retain(|_, v| *v > m);
                    }
                }
                // A bio split or resubmitted at the same sector keeps the first time.
                self.bios.entry((b.dev, b.sector)).or_insert(t);
            }
            BlockKind::Complete => {
                let Some(key) = self.by_sector.remove(&(b.dev, b.sector)) else {
                    return;
                };
                if let Some(io) = self.hosts.remove(&key) {
                    self.emit_host(io, Some(t), out);
                }
            }
            BlockKind::Insert | BlockKind::Issue => {}
        }
    }

    fn on_host(&mut self, t: u64, e: &HostEvent, out: &mut dyn FnMut(TcpRecord)) {
        if (e.qid == 0 && !self.cfg.admin) || !self.sampled(e.cid) {
            return;
        }
        let key = (e.ctrl_id, e.qid, e.cid);
        if e.kind == HostKind::QueueRq {
            if let Some(old) = self.hosts.remove(&key) {
                // The cid came back: the old command is over even if its end was not
                // seen (lost samples, or its block completion never came).
                if old.done.is_none() {
                    self.counters.incomplete += 1;
                }
                self.emit_host(old, None, out);
            }
            mark(&mut self.host_ctrls, e.cntlid);
            let mut io = HostIo::new(t, e);
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
                    io.blk_start = self.bios.remove(&(rq.dev, rq.sector)).filter(|b| *b <= t);
                    self.by_sector.insert((rq.dev, rq.sector), key);
                }
            }
            if self.hosts.len() >= self.cfg.max_in_flight {
                self.evict_hosts(out);
            }
            self.hosts.insert(key, io);
            self.counters.in_flight = (self.hosts.len() + self.targets.len()) as u64;
            return;
        }
        let Some(io) = self.hosts.get_mut(&key) else {
            if e.kind == HostKind::ProcessNvmeCqe {
                // A completion whose command we never saw start.
                self.counters.unmatched += 1;
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
                if let Some(io) = self.hosts.remove(&key) {
                    self.emit_host(io, None, out);
                }
            }
        }
        self.counters.in_flight = (self.hosts.len() + self.targets.len()) as u64;
    }

    fn emit_host(&mut self, io: HostIo, end: Option<u64>, out: &mut dyn FnMut(TcpRecord)) {
        if let Some(b) = io.blk {
            // Only its own mapping: a newer request at the same place may own it now.
            let own = (io.part.ctrl_id, io.part.qid, io.part.cid);
            if self.by_sector.get(&b) == Some(&own) {
                self.by_sector.remove(&b);
            }
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
        });
    }

    /// The target part of host part `h` in a joint recording (same clock).
    fn take_target(&mut self, h: &HostPart) -> Option<TargetPart> {
        let key = (h.cntlid, h.qid, h.cid);
        if self.tgt_done.get(&key).is_some_and(|t| fits(h, t, 0)) {
            return self.tgt_done.remove(&key);
        }
        // Its reply went out but the target record is still open (a read's data was
        // sent, the response capsule event not seen yet): take what it has.
        if self.targets.get(&key).is_some_and(|t| fits(h, &t.part, 0)) {
            let io = self.targets.remove(&key)?;
            return Some(io.finish());
        }
        None
    }

    fn on_target(&mut self, t: u64, e: &TargetEvent, out: &mut dyn FnMut(TcpRecord)) {
        if (e.qid == 0 && !self.cfg.admin) || !self.sampled(e.cid) {
            return;
        }
        let key = (e.cntlid, e.qid, e.cid);
        if e.kind == TargetKind::DoneRecvPdu {
            if let Some(old) = self.targets.remove(&key) {
                self.close_target(key, old, out);
            }
            if self.targets.len() >= self.cfg.max_in_flight {
                self.evict_targets(out);
            }
            self.targets.insert(key, TgtIo::new(t, e));
            mark(&mut self.tgt_ctrls, e.cntlid);
            self.counters.in_flight = (self.hosts.len() + self.targets.len()) as u64;
            return;
        }
        let Some(io) = self.targets.get_mut(&key) else {
            // Resumed sends of a record already closed are expected; a completion
            // without a start is not.
            if e.kind == TargetKind::QueueResponse && !e.r2t {
                self.counters.unmatched += 1;
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
            if let Some(io) = self.targets.remove(&key) {
                self.close_target(key, io, out);
            }
        }
        self.counters.in_flight = (self.hosts.len() + self.targets.len()) as u64;
    }

    /// A target record is over: wait for its host part (joint runs) or emit it.
    fn close_target(&mut self, key: TgtKey, io: TgtIo, out: &mut dyn FnMut(TcpRecord)) {
        let part = io.finish();
        if self.cfg.side.host() {
            // The host part claims it when the host completes; an older unclaimed one
            // of the same key had no traced host (another machine's I/O): emit it.
            if let Some(old) = self.tgt_done.insert(key, part) {
                self.emit_target(old, out);
            }
            if self.tgt_done.len() > self.cfg.max_in_flight {
                let keys: Vec<TgtKey> = self.tgt_done.keys().copied().collect();
                for k in keys.iter().take(keys.len() / 4) {
                    if let Some(p) = self.tgt_done.remove(k) {
                        self.emit_target(p, out);
                    }
                }
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
        });
    }

    fn evict_hosts(&mut self, out: &mut dyn FnMut(TcpRecord)) {
        let mut v: Vec<(HostKey, u64)> = self.hosts.iter().map(|(k, io)| (*k, io.first)).collect();
        v.sort_by_key(|(_, f)| *f);
        for (k, _) in v.iter().take(v.len() / 4 + 1) {
            if let Some(io) = self.hosts.remove(k) {
                self.counters.incomplete += 1;
                self.emit_host(io, None, out);
            }
        }
    }

    fn evict_targets(&mut self, out: &mut dyn FnMut(TcpRecord)) {
        let mut v: Vec<(TgtKey, u64)> = self.targets.iter().map(|(k, io)| (*k, io.first)).collect();
        v.sort_by_key(|(_, f)| *f);
        for (k, _) in v.iter().take(v.len() / 4 + 1) {
            if let Some(io) = self.targets.remove(k) {
                let p = io.finish();
                self.emit_target(p, out);
            }
        }
    }
}

impl Correlator for TcpCorrelator {
    type Record = TcpRecord;

    fn info(&self) -> &'static ProfileInfo {
        &INFO
    }

    fn on_event(&mut self, ev: &Event, out: &mut dyn FnMut(TcpRecord)) {
        match &ev.kind {
            EventKind::NvmeTcp(TcpEvent::Host(e)) if self.cfg.side.host() => {
                self.on_host(ev.time, e, out)
            }
            EventKind::NvmeTcp(TcpEvent::Target(e)) if self.cfg.side.target() => {
                self.on_target(ev.time, e, out)
            }
            EventKind::Block(b) if self.cfg.side.host() && self.cfg.block => {
                self.on_block(ev.time, b, out)
            }
            _ => {}
        }
    }

    fn finish(&mut self, out: &mut dyn FnMut(TcpRecord)) {
        // Targets first: a host part still waiting for its block completion may
        // claim its target part.
        let mut tgts: Vec<(TgtKey, TgtIo)> = self.targets.drain().collect();
        tgts.sort_by_key(|(_, io)| io.first);
        for (k, io) in tgts {
            self.close_target(k, io, out);
        }
        let mut hosts: Vec<(HostKey, HostIo)> = self.hosts.drain().collect();
        hosts.sort_by_key(|(_, io)| io.first);
        for (_, io) in hosts {
            if io.done.is_none() {
                self.counters.incomplete += 1;
            }
            self.emit_host(io, None, out);
        }
        let mut rest: Vec<TargetPart> = self.tgt_done.drain().map(|(_, p)| p).collect();
        rest.sort_by_key(|p| p.recv_ns);
        for p in rest {
            self.emit_target(p, out);
        }
        self.by_sector.clear();
        self.bios.clear();
        self.counters.in_flight = 0;
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Decoder;
    use crate::pipeline::Pipeline;
    use crate::synth::RecordBuilder;
    use crate::tracefs::{EventFormat, Tracefs};
    use std::collections::HashMap;

    /// The formats captured from the patched 6.1 guest of the VM rig
    /// (`tests/vm/capture-tracefs.sh --patches`): records are laid out exactly as
    /// that kernel writes them.
    fn patched_tracefs() -> Tracefs {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tracefs");
        let mut dirs: Vec<_> = std::fs::read_dir(&root)
            .map(|rd| rd.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        dirs.sort();
        let dir = dirs
            .into_iter()
            .find(|d| {
                d.join("events/nvme_tcp/nvme_tcp_queue_rq/format").is_file()
                    && d.join("events/nvmet_tcp/nvmet_tcp_done_recv_pdu/format")
                        .is_file()
                    && d.join("events/block/block_bio_queue/format").is_file()
            })
            .unwrap_or_else(|| {
                panic!(
                    "no captured formats with nvme_tcp and nvmet_tcp events under {}: run \
                     tests/vm/capture-tracefs.sh --patches",
                    root.display()
                )
            });
        Tracefs::at(&dir).unwrap()
    }

    const DEV: u32 = 259 << 20;
    const CTRL: u64 = 0;
    const CNTLID: u64 = 1;
    const QID: u64 = 1;

    /// Raw records of one scenario, per CPU ring, fed through decode → order → correlate.
    struct Rig {
        fmts: HashMap<String, EventFormat>,
        decoder: Decoder,
        /// (time, cpu, raw) in the order the rings hold them.
        samples: Vec<(u64, u32, Vec<u8>)>,
        cpu: u32,
    }

    fn rig() -> Rig {
        let tfs = patched_tracefs();
        let mut decoder = Decoder::new();
        let mut fmts = HashMap::new();
        for r in INFO.events {
            decoder.add(&tfs, r.system, r.event).unwrap();
            fmts.insert(r.event.to_string(), tfs.event(r.system, r.event).unwrap());
        }
        Rig {
            fmts,
            decoder,
            samples: Vec::new(),
            cpu: 0,
        }
    }

    impl Rig {
        fn on(&mut self, cpu: u32) -> &mut Self {
            self.cpu = cpu;
            self
        }

        fn push(&mut self, t: u64, event: &str, fields: &[(&str, u64)]) -> &mut Self {
            let fmt = &self.fmts[event];
            let mut b = RecordBuilder::new(fmt);
            for (k, v) in fields {
                b = b.int(k, *v);
            }
            if event == "nvme_tcp_queue_rq" {
                b = b.bytes("disk", b"nvme0n1");
            }
            if event.starts_with("block_") {
                b = b.bytes("rwbs", b"R");
            }
            let raw = b.build();
            self.samples.push((t, self.cpu, raw));
            self
        }

        /// A host event of command `cid`.
        fn h(&mut self, t: u64, ev: &str, cid: u64, fields: &[(&str, u64)]) -> &mut Self {
            let mut f = vec![
                ("ctrl_id", CTRL),
                ("cntlid", CNTLID),
                ("qid", QID),
                ("cid", cid),
                ("tag", cid & 0xfff),
            ];
            f.extend_from_slice(fields);
            self.push(t, &format!("nvme_tcp_{ev}"), &f)
        }

        /// A target event of command `cid`.
        fn t(&mut self, t: u64, ev: &str, cid: u64, op: u64, fields: &[(&str, u64)]) -> &mut Self {
            let mut f = vec![
                ("cntlid", CNTLID),
                ("qid", QID),
                ("cid", cid),
                ("opcode", op),
            ];
            f.extend_from_slice(fields);
            self.push(t, &format!("nvmet_tcp_{ev}"), &f)
        }

        fn bio(&mut self, t: u64, sector: u64) -> &mut Self {
            self.push(
                t,
                "block_bio_queue",
                &[("dev", DEV as u64), ("sector", sector), ("nr_sector", 8)],
            )
        }

        fn blk_done(&mut self, t: u64, sector: u64) -> &mut Self {
            self.push(
                t,
                "block_rq_complete",
                &[("dev", DEV as u64), ("sector", sector), ("nr_sector", 8)],
            )
        }

        fn queue_rq(&mut self, t: u64, cid: u64, op: u64, len: u64, sector: u64) -> &mut Self {
            let inline = (op == 1 && len <= 8192) as u64;
            self.h(
                t,
                "queue_rq",
                cid,
                &[
                    ("slba", sector / 8),
                    ("sector", sector),
                    ("nsid", 1),
                    ("len", len),
                    ("dev", DEV as u64),
                    ("opcode", op),
                    ("write", (op == 1) as u64),
                    ("inline_data", inline),
                ],
            )
        }

        /// Run the rings through the pipeline: each CPU's samples form one ring,
        /// drained in CPU order in rounds of `round` samples per ring.
        fn run(&self, cfg: TcpConfig, round: usize) -> (Vec<TcpRecord>, Counters, u64) {
            let mut pipe = Pipeline::new(self.decoder.clone(), TcpCorrelator::new(cfg));
            let mut rings: Vec<Vec<&(u64, u32, Vec<u8>)>> = Vec::new();
            for s in &self.samples {
                let c = s.1 as usize;
                if rings.len() <= c {
                    rings.resize(c + 1, Vec::new());
                }
                rings[c].push(s);
            }
            for r in &mut rings {
                r.sort_by_key(|s| s.0);
            }
            let mut out = Vec::new();
            let mut pos = vec![0usize; rings.len()];
            // A replay's clock: no sample still to be fed is older than the oldest head.
            while let Some(now) = rings
                .iter()
                .zip(&pos)
                .filter_map(|(r, &p)| r.get(p).map(|s| s.0))
                .min()
            {
                pipe.begin_round(now);
                for (i, r) in rings.iter().enumerate() {
                    let end = (pos[i] + round).min(r.len());
                    for s in &r[pos[i]..end] {
                        pipe.sample(s.0, s.1, &s.2);
                    }
                    pos[i] = end;
                }
                pipe.end_round(&mut |r| out.push(r));
            }
            pipe.finish(&mut |r| out.push(r));
            let h = pipe.health();
            assert_eq!(h.bad_records, 0);
            (out, h.counters, h.late)
        }
    }

    /// A 4k read, host and target in one recording, every mark present.
    fn read(r: &mut Rig, base: u64, cid: u64, sector: u64) {
        let b = base;
        r.bio(b, sector)
            .queue_rq(b + 500, cid, 2, 4096, sector)
            .h(b + 600, "try_send", cid, &[])
            .h(b + 700, "done_send_req", cid, &[])
            .t(
                b + 800,
                "done_recv_pdu",
                cid,
                2,
                &[("recv_time", b + 750), ("len", 4096), ("slba", sector / 8)],
            )
            .t(b + 900, "exec_read_req", cid, 2, &[("len", 4096)])
            .t(b + 1400, "queue_response", cid, 2, &[("len", 4096)])
            .t(b + 1500, "try_send_data_pdu", cid, 2, &[("len", 24)])
            .t(b + 1600, "try_send_response", cid, 2, &[("len", 24)])
            .h(
                b + 1700,
                "handle_c2h_data",
                cid,
                &[("recv_time", b + 1650), ("data_len", 4096), ("flags", 4)],
            )
            .h(
                b + 1800,
                "recv_data",
                cid,
                &[("recv_time", b + 1650), ("data_len", 4096), ("flags", 4)],
            )
            .h(
                b + 1900,
                "process_nvme_cqe",
                cid,
                &[("recv_time", b + 1850)],
            )
            .blk_done(b + 2000, sector);
    }

    fn stages(r: &TcpRecord) -> Vec<Option<u64>> {
        (0..STAGES.len()).map(|i| r.stage(i)).collect()
    }

    /// Host stages tile host_total; target stages + network tile waiting.
    fn assert_tiles(r: &TcpRecord) {
        let s = stages(r);
        let host: u64 = s[0..=5].iter().map(|v| v.unwrap()).sum::<u64>();
        let host_wo_wait = host - s[2].unwrap();
        assert_eq!(
            host,
            s[11].unwrap(),
            "host stages must sum to host_total: {r:?}"
        );
        let tgt: u64 = s[6..=9].iter().map(|v| v.unwrap()).sum();
        assert_eq!(tgt, s[12].unwrap(), "{r:?}");
        assert_eq!(tgt + s[10].unwrap(), s[2].unwrap(), "{r:?}");
        assert_eq!(host_wo_wait + tgt + s[10].unwrap(), s[11].unwrap());
    }

    fn cells(r: &TcpRecord) -> HashMap<&'static str, String> {
        let mut v = Vec::new();
        r.cells(&mut |c| {
            v.push(match c {
                Cell::U64(x) => x.to_string(),
                Cell::I64(x) => x.to_string(),
                Cell::Str(s) => s.to_string(),
                Cell::Empty => String::new(),
            })
        });
        INFO.columns[2..].iter().copied().zip(v).collect()
    }

    #[test]
    fn read_every_stage() {
        let mut r = rig();
        read(&mut r, 10_000, 0x1003, 800);
        let (out, c, _) = r.run(TcpConfig::default(), 100);
        assert_eq!(out.len(), 1, "{out:#?}");
        let rec = &out[0];
        assert_eq!(
            stages(rec),
            [500, 100, 1050, 50, 200, 100, 50, 100, 500, 100, 300, 2000, 750]
                .map(Some)
                .to_vec()
        );
        assert_tiles(rec);
        let cl = cells(rec);
        assert_eq!(cl["side"], "both");
        assert_eq!(cl["chain"], "complete");
        assert_eq!(cl["status"], "ok");
        assert_eq!(cl["op"], "read");
        assert_eq!(cl["shape"], "read");
        assert_eq!(cl["size_class"], "<=4k");
        assert_eq!(cl["disk"], "nvme0n1");
        assert_eq!(cl["ctrl"], "nvme0");
        assert_eq!(cl["slba"], "100");
        assert_eq!(
            (cl["round_trips"].as_str(), cl["c2h_pdus"].as_str()),
            ("1", "1")
        );
        assert_eq!(cl["host_send_ns"], "10600");
        assert_eq!(cl["target_recv_ns"], "10750");
        assert_eq!(rec.start_ns(), 10_000);
        assert_eq!(c, Counters::default());
    }

    #[test]
    fn small_write_in_capsule() {
        let mut r = rig();
        let (b, cid) = (50_000, 0x2001);
        r.bio(b, 64)
            .queue_rq(b + 100, cid, 1, 4096, 64)
            .h(b + 150, "try_send", cid, &[])
            .h(b + 300, "done_send_req", cid, &[("state", 2)])
            .t(
                b + 400,
                "done_recv_pdu",
                cid,
                1,
                &[("recv_time", b + 250), ("len", 4096)],
            )
            .t(
                b + 450,
                "try_recv_data",
                cid,
                1,
                &[("recv_time", b + 260), ("data_len", 4096)],
            )
            .t(b + 500, "exec_write_req", cid, 1, &[("len", 4096)])
            .t(b + 800, "queue_response", cid, 1, &[("len", 4096)])
            .t(b + 850, "try_send_response", cid, 1, &[("len", 24)])
            .h(b + 1000, "process_nvme_cqe", cid, &[("recv_time", b + 950)])
            .blk_done(b + 1100, 64);
        let (out, c, _) = r.run(TcpConfig::default(), 100);
        assert_eq!(out.len(), 1);
        let rec = &out[0];
        // blk 100, sub 50 (Q→S), wait 800 (S=150 → R=950), nstack 50, comp 0, blk 100.
        // Target: nstack 150, sub 100, subsys 300, comp 50 = 600; network 200.
        assert_eq!(
            stages(rec),
            [100, 50, 800, 50, 0, 100, 150, 100, 300, 50, 200, 1100, 600]
                .map(Some)
                .to_vec()
        );
        assert_tiles(rec);
        assert_eq!(cells(rec)["shape"], "write-inline");
        assert_eq!(cells(rec)["chain"], "complete");
        assert_eq!(c, Counters::default());
    }

    /// A 128k R2T write: two round trips, both in the network time; the H2C data in
    /// two PDUs and the host's H2C send resumed in a second call.
    fn r2t_write(r: &mut Rig, b: u64, cid: u64, sector: u64) {
        r.bio(b, sector)
            .queue_rq(b + 100, cid, 1, 131072, sector)
            .h(b + 200, "try_send", cid, &[])
            .h(b + 250, "done_send_req", cid, &[])
            .t(
                b + 400,
                "done_recv_pdu",
                cid,
                1,
                &[("recv_time", b + 300), ("len", 131072)],
            )
            .t(
                b + 450,
                "queue_response",
                cid,
                1,
                &[("r2t", 1), ("len", 131072)],
            )
            .t(b + 500, "try_send_r2t", cid, 1, &[("len", 24)])
            .h(
                b + 700,
                "handle_r2t",
                cid,
                &[("recv_time", b + 600), ("data_len", 131072)],
            )
            .h(b + 750, "try_send", cid, &[("state", 1)])
            .h(b + 900, "try_send", cid, &[("state", 2)])
            .h(b + 1000, "done_send_req", cid, &[("state", 2)])
            .t(
                b + 1050,
                "handle_h2c_data_pdu",
                cid,
                1,
                &[("recv_time", b + 950), ("data_len", 65536)],
            )
            .t(
                b + 1100,
                "try_recv_data",
                cid,
                1,
                &[("recv_time", b + 960), ("data_len", 65536)],
            )
            .t(
                b + 1150,
                "handle_h2c_data_pdu",
                cid,
                1,
                &[("recv_time", b + 1060), ("data_len", 65536)],
            )
            .t(
                b + 1200,
                "try_recv_data",
                cid,
                1,
                &[("recv_time", b + 1120), ("data_len", 65536)],
            )
            .t(b + 1300, "exec_write_req", cid, 1, &[("len", 131072)])
            .t(b + 2300, "queue_response", cid, 1, &[("len", 131072)])
            .t(b + 2400, "try_send_response", cid, 1, &[("len", 24)])
            .t(b + 2410, "try_send_response", cid, 1, &[("len", 10)])
            .h(
                b + 2600,
                "process_nvme_cqe",
                cid,
                &[("recv_time", b + 2500)],
            )
            .blk_done(b + 2700, sector);
    }

    #[test]
    fn large_write_with_r2t_gets_network_time_for_both_round_trips() {
        let mut r = rig();
        r2t_write(&mut r, 100_000, 0x3002, 4096);
        let (out, c, _) = r.run(TcpConfig::default(), 100);
        assert_eq!(out.len(), 1, "{out:#?}");
        let rec = &out[0];
        // Host: Q=100 S1=200 R1=600 F1=700 S2=900 (last call) R2=2500 F2=C=2600 E=2700.
        // sub = (200-100) + (900-700) = 300; wait = 400 + 1600 = 2000; nstack = 100+100.
        // Target: A1=300 P1=400 Z1=500; A2=1120 P2=1200 X=1300 Y=2300 Z2=2400.
        // nstack = 100 + 80; sub = (500-400) + (1300-1200) = 200; subsys 1000; comp 100;
        // total = 200 + 1280 = 1480; network = 2000 - 1480 = 520.
        assert_eq!(
            stages(rec),
            [100, 300, 2000, 200, 0, 100, 180, 200, 1000, 100, 520, 2700, 1480]
                .map(Some)
                .to_vec()
        );
        assert_tiles(rec);
        let cl = cells(rec);
        assert_eq!(cl["shape"], "write-r2t");
        assert_eq!(cl["size_class"], "<=128k");
        assert_eq!(
            (cl["round_trips"].as_str(), cl["target_rounds"].as_str()),
            ("2", "2")
        );
        assert_eq!(
            (
                cl["r2ts"].as_str(),
                cl["h2c_pdus"].as_str(),
                cl["send_calls"].as_str()
            ),
            ("1", "2", "3")
        );
        assert_eq!(cl["chain"], "complete");
        assert_eq!(c, Counters::default());
    }

    #[test]
    fn read_in_several_c2h_pdus_and_send_calls() {
        let mut r = rig();
        let (b, cid) = (7_000, 0x0005);
        r.bio(b, 8)
            .queue_rq(b + 10, cid, 2, 65536, 8)
            .h(b + 20, "try_send", cid, &[])
            .h(b + 40, "try_send", cid, &[]) // the socket took part of the PDU
            .h(b + 50, "done_send_req", cid, &[])
            .t(
                b + 100,
                "done_recv_pdu",
                cid,
                2,
                &[("recv_time", b + 60), ("len", 65536)],
            )
            .t(b + 110, "exec_read_req", cid, 2, &[("len", 65536)])
            .t(b + 200, "queue_response", cid, 2, &[("len", 65536)])
            .t(b + 210, "try_send_data_pdu", cid, 2, &[("len", 24)])
            .t(b + 250, "try_send_data_pdu", cid, 2, &[("len", 24)])
            .t(b + 260, "try_send_response", cid, 2, &[("len", 24)])
            .h(
                b + 300,
                "handle_c2h_data",
                cid,
                &[("recv_time", b + 280), ("data_len", 32768)],
            )
            .h(
                b + 320,
                "recv_data",
                cid,
                &[("recv_time", b + 280), ("data_len", 32768)],
            )
            .h(
                b + 340,
                "handle_c2h_data",
                cid,
                &[
                    ("recv_time", b + 330),
                    ("data_len", 32768),
                    ("data_offset", 32768),
                ],
            )
            .h(
                b + 360,
                "recv_data",
                cid,
                &[("recv_time", b + 330), ("data_len", 32768), ("flags", 4)],
            )
            .h(b + 380, "process_nvme_cqe", cid, &[("recv_time", b + 370)])
            .blk_done(b + 400, 8);
        let (out, _, _) = r.run(TcpConfig::default(), 100);
        assert_eq!(out.len(), 1);
        let rec = &out[0];
        // S1 = 40 (entry of the call that finished), R1 = 280, F1 = 300.
        assert_eq!(
            stages(rec),
            [10, 30, 240, 20, 80, 20, 40, 10, 90, 10, 90, 400, 150]
                .map(Some)
                .to_vec()
        );
        assert_tiles(rec);
        let cl = cells(rec);
        assert_eq!(
            (cl["c2h_pdus"].as_str(), cl["send_calls"].as_str()),
            ("2", "2")
        );
    }

    #[test]
    fn c2h_success_flag_completes_without_a_response_capsule() {
        let mut r = rig();
        let (b, cid) = (9_000, 0x0007);
        r.bio(b, 16)
            .queue_rq(b + 10, cid, 2, 4096, 16)
            .h(b + 20, "try_send", cid, &[])
            .h(b + 30, "done_send_req", cid, &[])
            .t(b + 60, "done_recv_pdu", cid, 2, &[("recv_time", b + 50)])
            .t(b + 70, "exec_read_req", cid, 2, &[])
            .t(b + 100, "queue_response", cid, 2, &[])
            .t(b + 110, "try_send_data_pdu", cid, 2, &[])
            .h(
                b + 150,
                "handle_c2h_data",
                cid,
                &[("recv_time", b + 140), ("flags", 0x0c)],
            )
            .h(
                b + 170,
                "recv_data",
                cid,
                &[("recv_time", b + 140), ("flags", 0x0c)],
            )
            .blk_done(b + 200, 16);
        let (out, c, _) = r.run(TcpConfig::default(), 100);
        assert_eq!(out.len(), 1, "{out:#?}");
        let rec = &out[0];
        assert_eq!(
            stages(rec),
            [10, 10, 120, 10, 20, 30, 10, 10, 30, 10, 60, 200, 60]
                .map(Some)
                .to_vec()
        );
        assert_eq!(cells(rec)["chain"], "complete");
        assert_eq!(c, Counters::default());
    }

    #[test]
    fn reused_cids_pair_host_and_target_by_time() {
        let mut r = rig();
        // The same (cntlid, qid, cid) three times in a row, at other sectors.
        for (i, base) in [10_000u64, 20_000, 30_000].into_iter().enumerate() {
            read(&mut r, base, 0x1001, 800 + 8 * i as u64);
        }
        r2t_write(&mut r, 40_000, 0x1001, 4096);
        let (out, c, _) = r.run(TcpConfig::default(), 3);
        assert_eq!(out.len(), 4, "{out:#?}");
        for (rec, base) in out.iter().zip([10_000u64, 20_000, 30_000, 40_000]) {
            assert_eq!(rec.start_ns(), base);
            let cl = cells(rec);
            assert_eq!(cl["chain"], "complete", "{rec:?}");
            assert_eq!(cl["side"], "both");
            let tr: u64 = cl["target_recv_ns"].parse().unwrap();
            assert!(tr > base && tr < base + 2000, "{rec:?}");
            assert_tiles(rec);
        }
        assert_eq!(c, Counters::default());
    }

    #[test]
    fn out_of_order_across_cpus() {
        let mut r = rig();
        let (b, cid) = (1_000_000, 0x4004);
        // Submission on CPU 0, target on CPU 1, host receive on CPU 1; the send call's
        // done_send_req on CPU 0 is written after the reply was handled on CPU 1.
        r.on(0)
            .bio(b, 24)
            .queue_rq(b + 500, cid, 2, 4096, 24)
            .h(b + 600, "try_send", cid, &[])
            .h(b + 1750, "done_send_req", cid, &[]);
        r.on(1)
            .t(b + 800, "done_recv_pdu", cid, 2, &[("recv_time", b + 750)])
            .t(b + 900, "exec_read_req", cid, 2, &[])
            .t(b + 1400, "queue_response", cid, 2, &[])
            .t(b + 1500, "try_send_data_pdu", cid, 2, &[])
            .t(b + 1600, "try_send_response", cid, 2, &[])
            .h(b + 1700, "handle_c2h_data", cid, &[("recv_time", b + 1650)])
            .h(b + 1800, "recv_data", cid, &[("recv_time", b + 1650)])
            .h(
                b + 1900,
                "process_nvme_cqe",
                cid,
                &[("recv_time", b + 1850)],
            );
        r.on(0).blk_done(b + 2000, 24);
        // One sample per ring per round: CPU 1's completion side is read long before
        // CPU 0's block completion.
        let (out, c, late) = r.run(TcpConfig::default(), 1);
        assert_eq!(late, 0);
        assert_eq!(out.len(), 1, "{out:#?}");
        assert_eq!(
            stages(&out[0]),
            [500, 100, 1050, 50, 200, 100, 50, 100, 500, 100, 300, 2000, 750]
                .map(Some)
                .to_vec()
        );
        assert_eq!(c, Counters::default());
    }

    #[test]
    fn lost_events_keep_the_io_and_name_the_gap() {
        let mut r = rig();
        let (b, cid) = (5_000, 0x0009);
        // No try_send/done_send_req (lost), no target exec, no block events.
        r.queue_rq(b, cid, 2, 4096, 32)
            .t(b + 100, "done_recv_pdu", cid, 2, &[("recv_time", b + 90)])
            .t(b + 200, "queue_response", cid, 2, &[])
            .t(b + 210, "try_send_data_pdu", cid, 2, &[])
            .t(b + 220, "try_send_response", cid, 2, &[])
            .h(b + 300, "handle_c2h_data", cid, &[("recv_time", b + 290)])
            .h(b + 320, "process_nvme_cqe", cid, &[("recv_time", 0)]);
        // A completion whose command was never seen.
        r.h(
            b + 400,
            "process_nvme_cqe",
            0x0777,
            &[("recv_time", b + 390)],
        );
        // A command that never completes.
        r.queue_rq(b + 500, 0x000a, 2, 4096, 40)
            .h(b + 510, "try_send", 0x000a, &[]);
        let (out, c, _) = r.run(TcpConfig::default(), 100);
        assert_eq!(out.len(), 2, "{out:#?}");
        let a = cells(&out[0]);
        assert_eq!(a["status"], "incomplete");
        assert_eq!(a["chain"], "missing:blk_start+send+blk_complete+tgt_exec");
        assert_eq!(a["waiting_ns"], "");
        assert_eq!(a["nvme_tcp_submission_ns"], "");
        assert_eq!(a["nstack_completion_ns"], "10");
        assert_eq!(a["nvme_tcp_completion_ns"], "20");
        assert_eq!(a["nstack_submission_ns"], "10");
        assert_eq!(a["target_subsystem_ns"], "");
        assert_eq!(a["nvmet_tcp_completion_ns"], "10");
        assert_eq!(a["network_transmission_ns"], "");
        let b2 = cells(&out[1]);
        assert_eq!(b2["status"], "incomplete");
        assert!(
            b2["chain"].contains("reply") && b2["chain"].contains("completion"),
            "{b2:?}"
        );
        assert_eq!(b2["waiting_ns"], "");
        assert_eq!(c.unmatched, 1);
        assert_eq!(c.incomplete, 1);
    }

    #[test]
    fn host_only_and_target_only_sides() {
        let mut r = rig();
        read(&mut r, 10_000, 0x1003, 800);
        let host = r.run(
            TcpConfig {
                side: Side::Host,
                ..Default::default()
            },
            100,
        );
        let tgt = r.run(
            TcpConfig {
                side: Side::Target,
                ..Default::default()
            },
            100,
        );
        assert_eq!((host.0.len(), tgt.0.len()), (1, 1));
        let h = cells(&host.0[0]);
        assert_eq!(
            (h["side"].as_str(), h["chain"].as_str()),
            ("host", "complete")
        );
        assert_eq!(h["waiting_ns"], "1050");
        assert_eq!(h["target_total_ns"], "");
        assert_eq!(h["network_transmission_ns"], "");
        let t = cells(&tgt.0[0]);
        assert_eq!(
            (t["side"].as_str(), t["chain"].as_str()),
            ("target", "complete")
        );
        assert_eq!(t["target_total_ns"], "750");
        assert_eq!(t["op"], "read");
        assert_eq!(t["waiting_ns"], "");
        assert_eq!(tgt.0[0].start_ns(), 10_750);
    }

    #[test]
    fn a_stock_target_still_gives_the_host_stages() {
        let mut r = rig();
        let (b, cid) = (3_000, 0x0011);
        let stock = |r: &mut Rig, b: u64| {
            r.bio(b, 0)
                .queue_rq(b + 10, cid, 2, 4096, 0)
                .h(b + 20, "try_send", cid, &[])
                .h(b + 30, "done_send_req", cid, &[])
                .h(b + 130, "handle_c2h_data", cid, &[("recv_time", b + 120)])
                .h(b + 150, "process_nvme_cqe", cid, &[("recv_time", b + 140)])
                .blk_done(b + 160, 0);
        };
        stock(&mut r, b);
        // No target traffic for this controller on this machine (a remote or stock
        // target): complete host-only rows, even though the kernel has nvmet_tcp.
        let (out, _, _) = r.run(TcpConfig::default(), 100);
        let cl = cells(&out[0]);
        assert_eq!(cl["side"], "host");
        assert_eq!(
            (cl["chain"].as_str(), cl["status"].as_str()),
            ("complete", "ok")
        );
        assert_eq!(
            (0..6).map(|i| out[0].stage(i).unwrap()).collect::<Vec<_>>(),
            [10, 10, 100, 10, 20, 10]
        );
        // Once the target side has served this controller, a host I/O without its
        // target part is a gap in the chain.
        read(&mut r, 10_000, 0x1003, 800);
        stock(&mut r, 20_000);
        let (out, _, _) = r.run(TcpConfig::default(), 100);
        assert_eq!(out.len(), 3);
        let cl = cells(&out[2]);
        assert_eq!(
            (cl["side"].as_str(), cl["chain"].as_str()),
            ("host", "missing:target")
        );
        assert_eq!(cl["status"], "incomplete");
    }

    #[test]
    fn sampling_drops_unsampled_block_events_quietly() {
        let mut r = rig();
        // cid 0x1003 has bit 12 set: not sampled with --sample 2 (mask 0x1000).
        read(&mut r, 10_000, 0x1003, 800);
        read(&mut r, 20_000, 0x2003, 808);
        let (out, c, _) = r.run(
            TcpConfig {
                sample_mask: 0x1000,
                ..Default::default()
            },
            100,
        );
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].start_ns(), 20_000);
        assert_eq!(c, Counters::default());
    }

    #[test]
    fn memory_is_bounded() {
        let mut r = rig();
        for i in 0..200u64 {
            r.queue_rq(1000 + i, i, 2, 4096, i * 8);
            r.t(
                1000 + i,
                "done_recv_pdu",
                i + 0x1000,
                2,
                &[("recv_time", 999 + i)],
            );
        }
        let mut c = TcpCorrelator::new(TcpConfig {
            max_in_flight: 16,
            ..Default::default()
        });
        let mut n = 0;
        for (t, cpu, raw) in &r.samples {
            let ev = r.decoder.decode(raw, *t, *cpu).unwrap().unwrap();
            c.on_event(&ev, &mut |_| n += 1);
            assert!(c.hosts.len() <= 16 && c.targets.len() <= 16);
        }
        c.finish(&mut |_| n += 1);
        assert_eq!(n, 400);
        assert_eq!(c.counters().incomplete, 400);
    }

    /// The record's cells by column name (time columns from `start_ns`).
    fn row_of(r: &TcpRecord) -> crate::correlate::merge::Row {
        let c = cells(r);
        let get = |k: &'static str| c.get(k).cloned().unwrap_or_default();
        let rec = TcpRecord::from_row(&get).unwrap();
        assert_eq!(&rec.host, &r.host, "host part must survive the CSV");
        assert_eq!(&rec.target, &r.target, "target part must survive the CSV");
        crate::correlate::merge::Row {
            start_time: crate::sink::time::format_utc(r.start_ns() as i128 + WALL),
            start_ns: r.start_ns(),
            rec,
        }
    }

    const WALL: i128 = 1_795_000_000_000_000_000;

    #[test]
    fn merging_host_only_and_target_only_gives_the_joint_rows() {
        let mut r = rig();
        for (i, base) in [10_000u64, 20_000, 30_000].into_iter().enumerate() {
            read(&mut r, base, 0x1001, 800 + 8 * i as u64);
        }
        r2t_write(&mut r, 40_000, 0x1001, 4096);
        r2t_write(&mut r, 43_000, 0x2001, 4096 + 256);
        // One target I/O of a host we did not trace.
        r.t(60_000, "done_recv_pdu", 0x3333, 2, &[("recv_time", 59_990)])
            .t(60_010, "exec_read_req", 0x3333, 2, &[])
            .t(60_020, "queue_response", 0x3333, 2, &[])
            .t(60_030, "try_send_response", 0x3333, 2, &[]);
        let joint = r.run(TcpConfig::default(), 4).0;
        let host = r
            .run(
                TcpConfig {
                    side: Side::Host,
                    ..Default::default()
                },
                4,
            )
            .0;
        let tgt = r
            .run(
                TcpConfig {
                    side: Side::Target,
                    ..Default::default()
                },
                4,
            )
            .0;
        assert_eq!((joint.len(), host.len(), tgt.len()), (6, 5, 6));
        // The target machine's monotonic clock reads 5 s more; its wall clock agrees.
        const SKEW: u64 = 5_000_000_000;
        let mut rows: Vec<_> = host.iter().map(row_of).collect();
        for t in &tgt {
            let mut row = row_of(t);
            let p = row.rec.target.as_mut().unwrap();
            p.recv_ns += SKEW;
            p.send_ns = p.send_ns.map(|x| x + SKEW);
            p.last_send_ns = p.last_send_ns.map(|x| x + SKEW);
            row.start_ns += SKEW;
            rows.push(row);
        }
        let (merged, st) = crate::correlate::merge::merge(rows, 50_000_000);
        assert_eq!((st.paired, st.host_rows, st.target_rows), (5, 5, 6));
        assert!(st.offset_ns.abs_diff(-(SKEW as i64)) < 1000, "{st:?}");
        let mut want: Vec<_> = joint.iter().map(cells).collect();
        let mut got: Vec<_> = merged
            .iter()
            .map(|m| {
                let mut c = cells(&m.rec);
                if m.rec.target.is_some() {
                    // Target marks stay on the target's clock.
                    for k in ["target_recv_ns", "target_send_ns", "target_last_send_ns"] {
                        let v: u64 = c[k].parse().unwrap();
                        c.insert(k, (v - SKEW).to_string());
                    }
                }
                c
            })
            .collect();
        let key = |c: &HashMap<&str, String>| (c["cid"].clone(), c["host_start_ns"].clone());
        want.sort_by_key(key);
        got.sort_by_key(key);
        assert_eq!(got, want);
    }

    /// Garbage in any order (random kinds, ids, stamps up to u64::MAX, time going
    /// backwards) must neither panic nor grow memory past the bounds.
    #[test]
    fn random_event_streams_do_not_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let hosts = [
            HostKind::QueueRq,
            HostKind::TrySend,
            HostKind::DoneSendReq,
            HostKind::HandleR2t,
            HostKind::HandleC2hData,
            HostKind::RecvData,
            HostKind::ProcessNvmeCqe,
        ];
        let tgts = [
            TargetKind::DoneRecvPdu,
            TargetKind::ExecReadReq,
            TargetKind::ExecWriteReq,
            TargetKind::QueueResponse,
            TargetKind::TrySendR2t,
            TargetKind::TrySendDataPdu,
            TargetKind::TrySendResponse,
            TargetKind::HandleH2cDataPdu,
            TargetKind::TryRecvData,
        ];
        let mut c = TcpCorrelator::new(TcpConfig {
            max_in_flight: 64,
            ..Default::default()
        });
        let mut rows = 0u64;
        for _ in 0..50_000 {
            let r = rnd();
            let big = if r % 7 == 0 {
                u64::MAX - rnd() % 1000
            } else {
                rnd() % 1_000_000
            };
            let time = rnd() % 10_000_000;
            let cid = (rnd() % 40) as u16;
            let kind = match r % 3 {
                0 => EventKind::NvmeTcp(TcpEvent::Host(HostEvent {
                    kind: hosts[(r >> 8) as usize % hosts.len()],
                    ctrl_id: (r >> 20) as u32 % 2,
                    cntlid: 1,
                    qid: 1 + (r >> 24) as u16 % 2,
                    cid,
                    tag: cid,
                    recv_time: big,
                    len: 4096,
                    offset: 0,
                    data_offset: 0,
                    data_len: 4096,
                    flags: (r >> 30) as u8,
                    last: true,
                    rq: Some(crate::decode::nvme_tcp::QueueRqInfo {
                        slba: big,
                        sector: rnd() % 64,
                        nsid: 1,
                        dev: if (r >> 40) & 1 == 0 { DEV } else { 0 },
                        opcode: (r >> 33) as u8 % 3,
                        write: r & 1 == 0,
                        inline_data: r & 2 == 0,
                        disk: DiskName::new(b"nvme0n1"),
                    }),
                    status: 0,
                })),
                1 => EventKind::NvmeTcp(TcpEvent::Target(TargetEvent {
                    kind: tgts[(r >> 8) as usize % tgts.len()],
                    cntlid: 1,
                    qid: 1 + (r >> 24) as u16 % 2,
                    cid,
                    opcode: (r >> 33) as u8 % 3,
                    recv_time: big,
                    slba: 0,
                    nsid: 1,
                    len: 4096,
                    data_offset: 0,
                    r2t: r & 4 == 0,
                    status: (r >> 50) as u16 % 2,
                })),
                _ => EventKind::Block(BlockEvent {
                    kind: if r & 8 == 0 {
                        BlockKind::BioQueue
                    } else {
                        BlockKind::Complete
                    },
                    dev: DEV,
                    sector: rnd() % 64,
                    nr_sector: 8,
                    bytes: 4096,
                    op: crate::decode::Op::Read,
                    error: 0,
                }),
            };
            c.on_event(&Event { time, cpu: 0, kind }, &mut |rec| {
                let _ = cells(&rec);
                rows += 1;
            });
            assert!(c.hosts.len() <= 64 && c.targets.len() <= 64 && c.tgt_done.len() <= 65);
            assert!(c.bios.len() <= MAX_BIOS && c.by_sector.len() <= 64);
        }
        c.finish(&mut |_| rows += 1);
        assert!(rows > 0);
    }
}
