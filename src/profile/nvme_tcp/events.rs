//! NVMe/TCP driver events of kernels patched with `kernel_change/`: host `nvme_tcp:*`
//! and target `nvmet_tcp:*` (see kernel_change/README.md for when each fires).
//!
//! Every event is flat integers plus, for `nvme_tcp_queue_rq`, the disk name, so one
//! layout type per side serves all of them: the fields an event kind fills are bound by
//! name once ([`HostLayout::bind`], [`TargetLayout::bind`]) and decoding reads one
//! offset per field of the compact event, a field the kind lacks reading 0. A kernel
//! whose entry lacks a field the correlator relies on fails at bind time, naming the
//! event and the field.

use crate::decode::{unknown, DecodeError, FieldReader, IntField, Layout, Malformed, Want};
use crate::profile::shared::block_events::{BlockEvent, BlockLayout};
use crate::profile::shared::nvme_events::{Disk, DiskCache};
use crate::tracefs::EventFormat;

/// Host (`nvme_tcp`) event kinds, in the order one I/O usually fires them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostKind {
    QueueRq,
    QueueRequest,
    TrySend,
    TrySendCmdPdu,
    TrySendDataPdu,
    TrySendData,
    DoneSendReq,
    HandleR2t,
    HandleC2hData,
    RecvData,
    ProcessNvmeCqe,
}

impl HostKind {
    /// Fired for a PDU the target sent for the command: it can only follow the
    /// command's `queue_rq`, and comes before its request completes (a send event of a
    /// command can come after its completion).
    pub fn is_reply(self) -> bool {
        matches!(
            self,
            HostKind::HandleR2t
                | HostKind::HandleC2hData
                | HostKind::RecvData
                | HostKind::ProcessNvmeCqe
        )
    }
}

/// Target (`nvmet_tcp`) event kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TargetKind {
    DoneRecvPdu,
    ExecReadReq,
    ExecWriteReq,
    QueueResponse,
    SetupC2hDataPdu,
    SetupR2tPdu,
    SetupResponsePdu,
    TrySendDataPdu,
    TrySendData,
    TrySendR2t,
    TrySendResponse,
    HandleH2cDataPdu,
    TryRecvData,
}

/// C2HData PDU flag: last PDU of the transfer.
pub const C2H_LAST_PDU: u8 = 0x04;
/// C2HData PDU flag: the command succeeded and no response capsule follows.
pub const C2H_SUCCESS: u8 = 0x08;

/// One host event: its command's identity plus what its kind carries. Only what the
/// correlator reads: events wait in the sorter's queues by the thousand, and each byte
/// here is moved once per sample. 48 bytes, so that with its time and CPU an event is
/// one 64-byte cache line in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostEvent {
    pub kind: HostKind,
    /// Controller id the target assigned (= the target events' `cntlid`).
    pub cntlid: u16,
    pub qid: u16,
    /// On-wire command id, generation bits included.
    pub cid: u16,
    pub tag: u16,
    /// `nvme_ctrl->instance` (N of nvmeN).
    pub ctrl_id: u32,
    /// queue_rq and the send events: `len`; rx events: `data_len`.
    pub len: u32,
    pub data: HostData,
}

/// What a host event carries beyond its command: the request (`nvme_tcp_queue_rq`) or
/// a PDU's fields (every other kind). One or the other, never both, so they share
/// their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostData {
    Rq(QueueRqInfo),
    Pdu(PduInfo),
}

/// What the host events other than `nvme_tcp_queue_rq` carry; 0 where a kind has no
/// value. Packed to 4-byte alignment, as [`QueueRqInfo`] is: with 8, each would be
/// padded to a multiple of 8 and the event would not fit its cache line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C, packed(4))]
pub struct PduInfo {
    /// CLOCK_MONOTONIC ns of the skb's receive timestamp; 0 = none (or not a receive
    /// event).
    pub recv_time: u64,
    /// process_nvme_cqe: NVMe status (CQE status >> 1).
    pub status: u16,
    /// rx events: PDU `flags`; try_send/done_send_req: `state`.
    pub flags: u8,
}

impl HostEvent {
    /// The request, for `nvme_tcp_queue_rq`.
    #[inline]
    pub fn rq(&self) -> Option<QueueRqInfo> {
        match self.data {
            HostData::Rq(rq) => Some(rq),
            HostData::Pdu(_) => None,
        }
    }

    /// The PDU's fields; all 0 for `nvme_tcp_queue_rq`.
    #[inline]
    pub fn pdu(&self) -> PduInfo {
        match self.data {
            HostData::Pdu(p) => p,
            HostData::Rq(_) => PduInfo::default(),
        }
    }
}

/// What `nvme_tcp_queue_rq` says about the command (packed: see [`PduInfo`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(4))]
pub struct QueueRqInfo {
    pub slba: u64,
    /// `blk_rq_pos()`, 512-byte units, = the block events' sector.
    pub sector: u64,
    /// Kernel dev_t of the (path) disk, = the block events' `dev`; 0 without a disk.
    pub dev: u32,
    pub disk: Disk,
    pub opcode: u8,
    pub write: bool,
    /// Data goes inside the command capsule (no R2T).
    pub inline_data: bool,
}

/// One target event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetEvent {
    pub kind: TargetKind,
    pub opcode: u8,
    /// queue_response: `r2t`.
    pub r2t: bool,
    /// `sq->ctrl->cntlid` (0 before Connect).
    pub cntlid: u16,
    /// The NVMe SQ id.
    pub qid: u16,
    pub cid: u16,
    /// queue_response / setup_response_pdu: NVMe status.
    pub status: u16,
    /// `len` (done_recv_pdu, exec, queue_response, try_send*) or `data_len`.
    pub len: u32,
    /// CLOCK_MONOTONIC ns; 0 = none (or not a receive event).
    pub recv_time: u64,
    /// done_recv_pdu: slba.
    pub slba: u64,
}

impl HostKind {
    pub fn from_event(name: &str) -> Option<HostKind> {
        use HostKind::*;
        Some(match name {
            "nvme_tcp_queue_rq" => QueueRq,
            "nvme_tcp_queue_request" => QueueRequest,
            "nvme_tcp_try_send" => TrySend,
            "nvme_tcp_try_send_cmd_pdu" => TrySendCmdPdu,
            "nvme_tcp_try_send_data_pdu" => TrySendDataPdu,
            "nvme_tcp_try_send_data" => TrySendData,
            "nvme_tcp_done_send_req" => DoneSendReq,
            "nvme_tcp_handle_r2t" => HandleR2t,
            "nvme_tcp_handle_c2h_data" => HandleC2hData,
            "nvme_tcp_recv_data" => RecvData,
            "nvme_tcp_process_nvme_cqe" => ProcessNvmeCqe,
            _ => return None,
        })
    }

    pub fn event_name(self) -> &'static str {
        use HostKind::*;
        match self {
            QueueRq => "nvme_tcp:nvme_tcp_queue_rq",
            QueueRequest => "nvme_tcp:nvme_tcp_queue_request",
            TrySend => "nvme_tcp:nvme_tcp_try_send",
            TrySendCmdPdu => "nvme_tcp:nvme_tcp_try_send_cmd_pdu",
            TrySendDataPdu => "nvme_tcp:nvme_tcp_try_send_data_pdu",
            TrySendData => "nvme_tcp:nvme_tcp_try_send_data",
            DoneSendReq => "nvme_tcp:nvme_tcp_done_send_req",
            HandleR2t => "nvme_tcp:nvme_tcp_handle_r2t",
            HandleC2hData => "nvme_tcp:nvme_tcp_handle_c2h_data",
            RecvData => "nvme_tcp:nvme_tcp_recv_data",
            ProcessNvmeCqe => "nvme_tcp:nvme_tcp_process_nvme_cqe",
        }
    }

    /// The fields of this kind's entry that fill [`HostEvent`]'s `len`, `flags`,
    /// `status` and `recv_time` (`None`: the kind has no value there).
    fn fields(self) -> [Option<&'static str>; 4] {
        use HostKind::*;
        match self {
            QueueRq | TrySendCmdPdu | TrySendDataPdu | TrySendData => {
                [Some("len"), None, None, None]
            }
            QueueRequest | TrySend | DoneSendReq => [None, Some("state"), None, None],
            HandleR2t | HandleC2hData | RecvData => {
                [Some("data_len"), Some("flags"), None, Some("recv_time")]
            }
            ProcessNvmeCqe => [None, None, Some("status"), Some("recv_time")],
        }
    }
}

impl TargetKind {
    pub fn from_event(name: &str) -> Option<TargetKind> {
        use TargetKind::*;
        Some(match name {
            "nvmet_tcp_done_recv_pdu" => DoneRecvPdu,
            "nvmet_tcp_exec_read_req" => ExecReadReq,
            "nvmet_tcp_exec_write_req" => ExecWriteReq,
            "nvmet_tcp_queue_response" => QueueResponse,
            "nvmet_tcp_setup_c2h_data_pdu" => SetupC2hDataPdu,
            "nvmet_tcp_setup_r2t_pdu" => SetupR2tPdu,
            "nvmet_tcp_setup_response_pdu" => SetupResponsePdu,
            "nvmet_tcp_try_send_data_pdu" => TrySendDataPdu,
            "nvmet_tcp_try_send_data" => TrySendData,
            "nvmet_tcp_try_send_r2t" => TrySendR2t,
            "nvmet_tcp_try_send_response" => TrySendResponse,
            "nvmet_tcp_handle_h2c_data_pdu" => HandleH2cDataPdu,
            "nvmet_tcp_try_recv_data" => TryRecvData,
            _ => return None,
        })
    }

    pub fn event_name(self) -> &'static str {
        use TargetKind::*;
        match self {
            DoneRecvPdu => "nvmet_tcp:nvmet_tcp_done_recv_pdu",
            ExecReadReq => "nvmet_tcp:nvmet_tcp_exec_read_req",
            ExecWriteReq => "nvmet_tcp:nvmet_tcp_exec_write_req",
            QueueResponse => "nvmet_tcp:nvmet_tcp_queue_response",
            SetupC2hDataPdu => "nvmet_tcp:nvmet_tcp_setup_c2h_data_pdu",
            SetupR2tPdu => "nvmet_tcp:nvmet_tcp_setup_r2t_pdu",
            SetupResponsePdu => "nvmet_tcp:nvmet_tcp_setup_response_pdu",
            TrySendDataPdu => "nvmet_tcp:nvmet_tcp_try_send_data_pdu",
            TrySendData => "nvmet_tcp:nvmet_tcp_try_send_data",
            TrySendR2t => "nvmet_tcp:nvmet_tcp_try_send_r2t",
            TrySendResponse => "nvmet_tcp:nvmet_tcp_try_send_response",
            HandleH2cDataPdu => "nvmet_tcp:nvmet_tcp_handle_h2c_data_pdu",
            TryRecvData => "nvmet_tcp:nvmet_tcp_try_recv_data",
        }
    }

    /// The fields that fill [`TargetEvent`]'s `len`, `status`, `recv_time`, `slba`
    /// and `r2t`.
    fn fields(self) -> [Option<&'static str>; 5] {
        use TargetKind::*;
        match self {
            DoneRecvPdu => [Some("len"), None, Some("recv_time"), Some("slba"), None],
            ExecReadReq | ExecWriteReq | TrySendDataPdu | TrySendData | TrySendR2t
            | TrySendResponse => [Some("len"), None, None, None, None],
            QueueResponse => [Some("len"), Some("status"), None, None, Some("r2t")],
            SetupC2hDataPdu | SetupR2tPdu => [Some("data_len"), None, None, None, None],
            SetupResponsePdu => [None, Some("status"), None, None, None],
            HandleH2cDataPdu | TryRecvData => {
                [Some("data_len"), None, Some("recv_time"), None, None]
            }
        }
    }
}

/// `field` of `fmt`, or [`IntField::ABSENT`] for a slot the event kind has no value for.
fn bind_int(fmt: &EventFormat, event: &str, field: Option<&str>) -> Result<IntField, DecodeError> {
    field.map_or(Ok(IntField::ABSENT), |f| IntField::bind(fmt, event, f))
}

/// First byte past the last of `fields`: a record shorter than this is truncated.
fn end_of(fields: &[IntField]) -> usize {
    fields.iter().map(IntField::end).max().unwrap_or(0)
}

/// Each of `fields` read from records of at least `need` bytes.
fn place(fields: &mut [IntField], need: usize) {
    for f in fields {
        *f = f.within(need);
    }
}

/// The bound layout of one `nvme_tcp` event: an offset read per [`HostEvent`] field
/// (a field the kind has no value for reads 0), so that decoding is the same few
/// loads for every kind.
#[derive(Debug, Clone)]
pub struct HostLayout {
    kind: HostKind,
    /// ctrl_id, cntlid, qid, cid, tag, len, flags, status, recv_time.
    ints: [IntField; 9],
    rq: Option<RqLayout>,
    need: usize,
}

/// What only `nvme_tcp_queue_rq` carries.
#[derive(Debug, Clone)]
struct RqLayout {
    /// slba, sector, dev, opcode, write, inline_data.
    ints: [IntField; 6],
    disk: FieldReader,
    disks: DiskCache,
}

impl HostLayout {
    pub fn bind(fmt: &EventFormat, kind: HostKind) -> Result<HostLayout, DecodeError> {
        let name = kind.event_name();
        let ids = ["ctrl_id", "cntlid", "qid", "cid", "tag"].map(Some);
        let [a, b, c, d, e] = ids;
        let [f, g, h, i] = kind.fields();
        let mut ints = [IntField::ABSENT; 9];
        for (slot, field) in ints.iter_mut().zip([a, b, c, d, e, f, g, h, i]) {
            *slot = bind_int(fmt, name, field)?;
        }
        let rq = match kind {
            HostKind::QueueRq => {
                let mut rq = [IntField::ABSENT; 6];
                let fields = ["slba", "sector", "dev", "opcode", "write", "inline_data"];
                for (slot, field) in rq.iter_mut().zip(fields) {
                    *slot = IntField::bind(fmt, name, field)?;
                }
                Some(RqLayout {
                    ints: rq,
                    disk: FieldReader::bind(fmt, name, "disk", Want::CharArray)?,
                    disks: DiskCache::default(),
                })
            }
            _ => None,
        };
        let need = rq
            .as_ref()
            .map_or(0, |r| end_of(&r.ints).max(r.disk.end()))
            .max(end_of(&ints));
        place(&mut ints, need);
        let rq = rq.map(|mut r| {
            place(&mut r.ints, need);
            r
        });
        Ok(HostLayout {
            kind,
            ints,
            rq,
            need,
        })
    }

    #[inline(always)]
    pub fn decode(&self, raw: &[u8]) -> Result<HostEvent, Malformed> {
        Malformed::check_len(raw, self.need, || self.kind.event_name())?;
        // By index, not `ints.map(..)`: the map copied the whole array first.
        let v = |i: usize| self.ints[i].get(raw);
        let data = match &self.rq {
            Some(r) => {
                let v = |i: usize| r.ints[i].get(raw);
                HostData::Rq(QueueRqInfo {
                    slba: v(0),
                    sector: v(1),
                    dev: v(2) as u32,
                    opcode: v(3) as u8,
                    write: v(4) != 0,
                    inline_data: v(5) != 0,
                    disk: r.disks.name(r.disk.array(raw)),
                })
            }
            None => HostData::Pdu(PduInfo {
                flags: v(6) as u8,
                status: v(7) as u16,
                recv_time: v(8),
            }),
        };
        Ok(HostEvent {
            kind: self.kind,
            ctrl_id: v(0) as u32,
            cntlid: v(1) as u16,
            qid: v(2) as u16,
            cid: v(3) as u16,
            tag: v(4) as u16,
            len: v(5) as u32,
            data,
        })
    }
}

/// The bound layout of one `nvmet_tcp` event (see [`HostLayout`]).
#[derive(Debug, Clone)]
pub struct TargetLayout {
    kind: TargetKind,
    /// cntlid, qid, cid, opcode, len, status, recv_time, slba, r2t.
    ints: [IntField; 9],
    need: usize,
}

impl TargetLayout {
    pub fn bind(fmt: &EventFormat, kind: TargetKind) -> Result<TargetLayout, DecodeError> {
        let name = kind.event_name();
        let [a, b, c, d] = ["cntlid", "qid", "cid", "opcode"].map(Some);
        let [e, f, g, h, i] = kind.fields();
        let mut ints = [IntField::ABSENT; 9];
        for (slot, field) in ints.iter_mut().zip([a, b, c, d, e, f, g, h, i]) {
            *slot = bind_int(fmt, name, field)?;
        }
        let need = end_of(&ints);
        place(&mut ints, need);
        Ok(TargetLayout { kind, ints, need })
    }

    #[inline(always)]
    pub fn decode(&self, raw: &[u8]) -> Result<TargetEvent, Malformed> {
        Malformed::check_len(raw, self.need, || self.kind.event_name())?;
        let v = |i: usize| self.ints[i].get(raw);
        Ok(TargetEvent {
            kind: self.kind,
            cntlid: v(0) as u16,
            qid: v(1) as u16,
            cid: v(2) as u16,
            opcode: v(3) as u8,
            len: v(4) as u32,
            status: v(5) as u16,
            recv_time: v(6),
            slba: v(7),
            r2t: v(8) != 0,
        })
    }
}

/// What the nvme-tcp profile decodes: both sides' events and the host's block events,
/// flat, so that matching one is a single tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmeTcpEvent {
    Host(HostEvent),
    Target(TargetEvent),
    Block(BlockEvent),
}

/// The layout of any event the nvme-tcp profile opens: one type, so that its decoder
/// calls it directly (`Decoder::direct`), with no dynamic call per sample.
#[derive(Debug, Clone)]
pub enum TcpSlot {
    Host(HostLayout),
    Target(TargetLayout),
    Block(BlockLayout),
}

impl TcpSlot {
    /// Bind `system:event`; an event of these systems that ntprof-perf does not decode
    /// is an error naming it.
    pub fn bind(fmt: &EventFormat, system: &str, event: &str) -> Result<TcpSlot, DecodeError> {
        match system {
            "block" => BlockLayout::for_event(fmt, event).map(TcpSlot::Block),
            "nvme_tcp" => match HostKind::from_event(event) {
                Some(k) => HostLayout::bind(fmt, k).map(TcpSlot::Host),
                None => Err(unknown(system, event)),
            },
            "nvmet_tcp" => match TargetKind::from_event(event) {
                Some(k) => TargetLayout::bind(fmt, k).map(TcpSlot::Target),
                None => Err(unknown(system, event)),
            },
            _ => Err(unknown(system, event)),
        }
    }

    #[inline(always)]
    pub fn decode(&self, raw: &[u8]) -> Result<NvmeTcpEvent, Malformed> {
        match self {
            TcpSlot::Host(l) => l.decode(raw).map(NvmeTcpEvent::Host),
            TcpSlot::Target(l) => l.decode(raw).map(NvmeTcpEvent::Target),
            TcpSlot::Block(l) => l.decode(raw).map(NvmeTcpEvent::Block),
        }
    }
}

crate::decode::layout_by_decode!(TcpSlot => NvmeTcpEvent);

/// The layout of one event the nvme-tcp profile opens, boxed (for code that decodes
/// every profile's events through one decoder type, as the fuzz test does).
pub fn layout(
    fmt: &EventFormat,
    system: &str,
    event: &str,
) -> Result<Box<dyn Layout<NvmeTcpEvent>>, DecodeError> {
    Ok(Box::new(TcpSlot::bind(fmt, system, event)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Decoder;
    use crate::synth::RecordBuilder;
    use crate::tracefs::{parse_format, Tracefs};

    fn tfs() -> Tracefs {
        let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tracefs/6.1.192-ntprof");
        Tracefs::at(&d).expect("captured formats: tests/vm/capture-tracefs.sh --patches")
    }

    #[test]
    fn every_captured_event_binds_and_decodes() {
        let t = tfs();
        let mut d = Decoder::new();
        for (sys, names) in [("nvme_tcp", 11), ("nvmet_tcp", 13)] {
            let dir = t.root().join("events").join(sys);
            let mut n = 0;
            for e in std::fs::read_dir(dir).unwrap().flatten() {
                let ev = e.file_name().to_string_lossy().into_owned();
                d.add(&t, sys, &ev, layout)
                    .unwrap_or_else(|e| panic!("{sys}:{ev}: {e}"));
                n += 1;
            }
            assert_eq!(n, names, "{sys}");
        }
        let fmt = t.event("nvme_tcp", "nvme_tcp_queue_rq").unwrap();
        let raw = RecordBuilder::new(&fmt)
            .int("ctrl_id", 3)
            .int("cntlid", 7)
            .int("qid", 2)
            .int("cid", 0x3005)
            .int("tag", 5)
            .int("slba", 1 << 40)
            .int("sector", 1 << 43)
            .int("len", 131072)
            .int("dev", 259 << 20)
            .int("opcode", 1)
            .int("write", 1)
            .int("inline_data", 0)
            .int("nsid", 1)
            .bytes("disk", b"nvme3n1")
            .build();
        let ev = d.decode(&raw, 99, 1).unwrap().unwrap();
        let NvmeTcpEvent::Host(h) = ev.kind else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (h.kind, h.ctrl_id, h.cntlid, h.qid, h.cid, h.tag, h.len),
            (HostKind::QueueRq, 3, 7, 2, 0x3005, 5, 131072)
        );
        let rq = h.rq().unwrap();
        assert_eq!(
            (rq.slba, rq.sector, rq.dev, rq.opcode),
            (1 << 40, 1 << 43, 259 << 20, 1)
        );
        assert!(rq.write && !rq.inline_data);
        assert_eq!(rq.disk.as_str(), "nvme3n1");
        // The same name again is the same interned disk; another name is not.
        let again = d.decode(&raw, 100, 1).unwrap().unwrap().kind;
        assert_eq!(again, ev.kind);
        let other = RecordBuilder::new(&fmt).bytes("disk", b"nvme3n2").build();
        let NvmeTcpEvent::Host(o) = d.decode(&other, 1, 0).unwrap().unwrap().kind else {
            panic!()
        };
        assert_eq!(o.rq().map(|r| r.disk.as_str()), Some("nvme3n2"));
        assert_eq!(d.decode(&raw, 101, 1).unwrap().unwrap().kind, ev.kind);

        let fmt = t.event("nvmet_tcp", "nvmet_tcp_queue_response").unwrap();
        let raw = RecordBuilder::new(&fmt)
            .int("cntlid", 7)
            .int("qid", 2)
            .int("cid", 0x3005)
            .int("opcode", 1)
            .int("r2t", 1)
            .int("status", 0x4002)
            .int("len", 131072)
            .build();
        let NvmeTcpEvent::Target(e) = d.decode(&raw, 1, 0).unwrap().unwrap().kind else {
            panic!()
        };
        assert_eq!(
            (e.kind, e.cntlid, e.qid, e.cid, e.opcode, e.r2t, e.status, e.len),
            (
                TargetKind::QueueResponse,
                7,
                2,
                0x3005,
                1,
                true,
                0x4002,
                131072
            )
        );

        let fmt = t.event("nvme_tcp", "nvme_tcp_handle_c2h_data").unwrap();
        let raw = RecordBuilder::new(&fmt)
            .int("recv_time", 123_456_789_012)
            .int("data_offset", 4096)
            .int("data_len", 8192)
            .int("flags", 0x0c)
            .build();
        let NvmeTcpEvent::Host(h) = d.decode(&raw, 1, 0).unwrap().unwrap().kind else {
            panic!()
        };
        assert_eq!(
            (
                h.pdu().recv_time,
                h.len,
                h.pdu().flags,
                h.pdu().status,
                h.rq()
            ),
            (123_456_789_012, 8192, 0x0c, 0, None)
        );
        // Truncated records are errors, not panics.
        let e = d.decode(&raw[..raw.len() - 4], 1, 0).unwrap_err();
        assert!(e.to_string().contains("nvme_tcp_handle_c2h_data"), "{e}");
    }

    /// Events wait in the sorter by the thousand: each byte of one is a byte moved per
    /// sample, so the compact layout must stay compact.
    #[test]
    fn events_stay_small() {
        assert!(std::mem::size_of::<crate::decode::Event<NvmeTcpEvent>>() <= 64);
        assert!(std::mem::size_of::<TargetEvent>() <= 32);
    }

    #[test]
    fn a_layout_without_a_needed_field_names_event_and_field() {
        let fmt = parse_format(
            "name: nvmet_tcp_done_recv_pdu\nID: 9\nformat:\n\
             \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:u64 recv_time;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:u16 cntlid;\toffset:16;\tsize:2;\tsigned:0;\n\
             \tfield:u16 qid;\toffset:18;\tsize:2;\tsigned:0;\n",
        )
        .unwrap();
        let e = TcpSlot::bind(&fmt, "nvmet_tcp", "nvmet_tcp_done_recv_pdu")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nvmet_tcp:nvmet_tcp_done_recv_pdu") && e.contains("`cid`"),
            "{e}"
        );
        let e = TcpSlot::bind(&fmt, "nvmet_tcp", "nvmet_tcp_unknown")
            .unwrap_err()
            .to_string();
        assert!(e.contains("nvmet_tcp:nvmet_tcp_unknown"), "{e}");
    }
}
