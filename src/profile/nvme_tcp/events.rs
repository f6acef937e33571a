//! NVMe/TCP driver events of kernels patched with `kernel_change/`: host `nvme_tcp:*`
//! and target `nvmet_tcp:*` (see kernel_change/README.md for when each fires).
//!
//! Every event is flat integers plus, for `nvme_tcp_queue_rq`, the disk name, so one
//! layout type serves all of them: the fields an event kind needs are bound by name
//! once ([`TcpLayout::bind`]) and decoding reads them into a small fixed array. A
//! kernel whose entry lacks a field the correlator relies on fails at bind time,
//! naming the event and the field.

use crate::decode::{unknown, DecodeError, FieldReader, Layout, Malformed, Mapped, Want};
use crate::profile::shared::block_events::{BlockEvent, BlockLayout};
use crate::profile::shared::nvme_events::DiskName;
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

/// One host event: identity plus the per-kind values (unused ones are 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostEvent {
    pub kind: HostKind,
    /// `nvme_ctrl->instance` (N of nvmeN).
    pub ctrl_id: u32,
    /// Controller id the target assigned (= the target events' `cntlid`).
    pub cntlid: u16,
    pub qid: u16,
    /// On-wire command id, generation bits included.
    pub cid: u16,
    pub tag: u16,
    /// CLOCK_MONOTONIC ns of the skb's receive timestamp; 0 = none (or not a receive event).
    pub recv_time: u64,
    /// queue_rq: `len`; send events: `len`; rx events: `data_len`.
    pub len: u32,
    /// send PDU events: `offset`; rx events: `data_offset`.
    pub offset: u32,
    /// send PDU events: `data_offset`.
    pub data_offset: u32,
    /// send PDU events: `data_len`.
    pub data_len: u32,
    /// rx events: PDU `flags`; queue_request/try_send/done_send_req: `state`.
    pub flags: u8,
    /// queue_request: `last`.
    pub last: bool,
    /// Only for `QueueRq`.
    pub rq: Option<QueueRqInfo>,
    /// process_nvme_cqe: NVMe status (CQE status >> 1).
    pub status: u16,
}

/// What `nvme_tcp_queue_rq` says about the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueRqInfo {
    pub slba: u64,
    /// `blk_rq_pos()`, 512-byte units, = the block events' sector.
    pub sector: u64,
    pub nsid: u32,
    /// Kernel dev_t of the (path) disk, = the block events' `dev`; 0 without a disk.
    pub dev: u32,
    pub opcode: u8,
    pub write: bool,
    /// Data goes inside the command capsule (no R2T).
    pub inline_data: bool,
    pub disk: DiskName,
}

/// One target event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetEvent {
    pub kind: TargetKind,
    /// `sq->ctrl->cntlid` (0 before Connect).
    pub cntlid: u16,
    /// The NVMe SQ id.
    pub qid: u16,
    pub cid: u16,
    pub opcode: u8,
    /// CLOCK_MONOTONIC ns; 0 = none (or not a receive event).
    pub recv_time: u64,
    /// done_recv_pdu: slba.
    pub slba: u64,
    pub nsid: u32,
    /// `len` (done_recv_pdu, exec, queue_response, try_send*) or `data_len`.
    pub len: u32,
    pub data_offset: u32,
    /// queue_response: `r2t`.
    pub r2t: bool,
    /// queue_response / setup_response_pdu: NVMe status.
    pub status: u16,
}

// Indices into the value array a layout fills.
const RECV_TIME: usize = 0;
const CTRL_ID: usize = 1;
const CNTLID: usize = 2;
const QID: usize = 3;
const CID: usize = 4;
const TAG: usize = 5;
const LEN: usize = 6;
const OFFSET: usize = 7;
const DATA_OFFSET: usize = 8;
const DATA_LEN: usize = 9;
const FLAGS: usize = 10;
const LAST: usize = 11;
const STATUS: usize = 12;
const SLBA: usize = 13;
const SECTOR: usize = 14;
const NSID: usize = 15;
const DEV: usize = 16;
const OPCODE: usize = 17;
const WRITE: usize = 18;
const INLINE: usize = 19;
const R2T: usize = 20;
const STATE: usize = 21;
const NV: usize = 22;

const NAMES: [&str; NV] = [
    "recv_time",
    "ctrl_id",
    "cntlid",
    "qid",
    "cid",
    "tag",
    "len",
    "offset",
    "data_offset",
    "data_len",
    "flags",
    "last",
    "status",
    "slba",
    "sector",
    "nsid",
    "dev",
    "opcode",
    "write",
    "inline_data",
    "r2t",
    "state",
];

const HOST_ID: &[usize] = &[CTRL_ID, CNTLID, QID, CID, TAG];
const TGT_ID: &[usize] = &[CNTLID, QID, CID, OPCODE];

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

    /// The fields this kind's entry must have besides the identity.
    fn fields(self) -> &'static [usize] {
        use HostKind::*;
        match self {
            QueueRq => &[SLBA, SECTOR, NSID, LEN, DEV, OPCODE, WRITE, INLINE],
            QueueRequest => &[STATE, LAST],
            TrySend | DoneSendReq => &[STATE],
            TrySendCmdPdu | TrySendDataPdu => &[LEN, OFFSET, DATA_OFFSET, DATA_LEN],
            TrySendData => &[LEN],
            HandleR2t | HandleC2hData | RecvData => &[RECV_TIME, DATA_OFFSET, DATA_LEN, FLAGS],
            ProcessNvmeCqe => &[RECV_TIME, STATUS],
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

    fn fields(self) -> &'static [usize] {
        use TargetKind::*;
        match self {
            DoneRecvPdu => &[RECV_TIME, SLBA, NSID, LEN],
            ExecReadReq | ExecWriteReq | TrySendDataPdu | TrySendData | TrySendR2t
            | TrySendResponse => &[LEN],
            QueueResponse => &[R2T, STATUS, LEN],
            SetupC2hDataPdu | SetupR2tPdu => &[DATA_OFFSET, DATA_LEN],
            SetupResponsePdu => &[STATUS],
            HandleH2cDataPdu | TryRecvData => &[RECV_TIME, DATA_OFFSET, DATA_LEN],
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Which {
    Host(HostKind),
    Target(TargetKind),
}

/// The bound layout of one `nvme_tcp` or `nvmet_tcp` event.
#[derive(Debug, Clone)]
pub struct TcpLayout {
    which: Which,
    /// (value index, field) of each bound field: boxed so a decoder slot stays small.
    fields: Box<[(u8, FieldReader)]>,
    disk: Option<FieldReader>,
    need: usize,
}

impl TcpLayout {
    /// `None` for an event of these systems that ntprof-perf does not decode.
    pub fn bind(
        fmt: &EventFormat,
        system: &str,
        event: &str,
    ) -> Option<Result<TcpLayout, DecodeError>> {
        let which = match system {
            "nvme_tcp" => Which::Host(HostKind::from_event(event)?),
            "nvmet_tcp" => Which::Target(TargetKind::from_event(event)?),
            _ => return None,
        };
        Some(Self::bind_which(fmt, which))
    }

    fn bind_which(fmt: &EventFormat, which: Which) -> Result<TcpLayout, DecodeError> {
        let (name, id, own) = match which {
            Which::Host(k) => (k.event_name(), HOST_ID, k.fields()),
            Which::Target(k) => (k.event_name(), TGT_ID, k.fields()),
        };
        let fields = id
            .iter()
            .chain(own)
            .map(|&i| Ok((i as u8, FieldReader::bind(fmt, name, NAMES[i], Want::Int)?)))
            .collect::<Result<Box<[_]>, DecodeError>>()?;
        let disk = match which {
            Which::Host(HostKind::QueueRq) => {
                Some(FieldReader::bind(fmt, name, "disk", Want::CharArray)?)
            }
            _ => None,
        };
        let need = fields
            .iter()
            .map(|(_, f)| f)
            .chain(disk.as_ref())
            .map(FieldReader::end)
            .max()
            .unwrap_or(0);
        Ok(TcpLayout {
            which,
            fields,
            disk,
            need,
        })
    }

    #[inline(always)]
    pub fn decode(&self, raw: &[u8]) -> Result<TcpEvent, Malformed> {
        let name = match self.which {
            Which::Host(k) => k.event_name(),
            Which::Target(k) => k.event_name(),
        };
        if raw.len() < self.need {
            return Err(Malformed::Truncated {
                event: name,
                need: self.need,
                have: raw.len(),
            });
        }
        let mut v = [0u64; NV];
        for (i, f) in self.fields.iter() {
            v[*i as usize] = f.u64(raw);
        }
        Ok(match self.which {
            Which::Host(kind) => TcpEvent::Host(HostEvent {
                kind,
                ctrl_id: v[CTRL_ID] as u32,
                cntlid: v[CNTLID] as u16,
                qid: v[QID] as u16,
                cid: v[CID] as u16,
                tag: v[TAG] as u16,
                recv_time: v[RECV_TIME],
                len: match kind {
                    HostKind::HandleR2t | HostKind::HandleC2hData | HostKind::RecvData => {
                        v[DATA_LEN] as u32
                    }
                    _ => v[LEN] as u32,
                },
                offset: match kind {
                    HostKind::HandleR2t | HostKind::HandleC2hData | HostKind::RecvData => {
                        v[DATA_OFFSET] as u32
                    }
                    _ => v[OFFSET] as u32,
                },
                data_offset: v[DATA_OFFSET] as u32,
                data_len: v[DATA_LEN] as u32,
                flags: (v[FLAGS] | v[STATE]) as u8,
                last: v[LAST] != 0,
                status: v[STATUS] as u16,
                rq: match kind {
                    HostKind::QueueRq => Some(QueueRqInfo {
                        slba: v[SLBA],
                        sector: v[SECTOR],
                        nsid: v[NSID] as u32,
                        dev: v[DEV] as u32,
                        opcode: v[OPCODE] as u8,
                        write: v[WRITE] != 0,
                        inline_data: v[INLINE] != 0,
                        disk: self
                            .disk
                            .map_or_else(DiskName::default, |d| DiskName::new(d.str(raw))),
                    }),
                    _ => None,
                },
            }),
            Which::Target(kind) => TcpEvent::Target(TargetEvent {
                kind,
                cntlid: v[CNTLID] as u16,
                qid: v[QID] as u16,
                cid: v[CID] as u16,
                opcode: v[OPCODE] as u8,
                recv_time: v[RECV_TIME],
                slba: v[SLBA],
                nsid: v[NSID] as u32,
                len: match kind {
                    TargetKind::SetupC2hDataPdu
                    | TargetKind::SetupR2tPdu
                    | TargetKind::HandleH2cDataPdu
                    | TargetKind::TryRecvData => v[DATA_LEN] as u32,
                    _ => v[LEN] as u32,
                },
                data_offset: v[DATA_OFFSET] as u32,
                r2t: v[R2T] != 0,
                status: v[STATUS] as u16,
            }),
        })
    }
}

/// A decoded NVMe/TCP event of either side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpEvent {
    Host(HostEvent),
    Target(TargetEvent),
}

/// What the nvme-tcp profile decodes: both sides' events and the host's block events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmeTcpEvent {
    Tcp(TcpEvent),
    Block(BlockEvent),
}

crate::decode::layout_by_decode!(TcpLayout => TcpEvent);

/// The layout of one event the nvme-tcp profile opens.
pub fn layout(
    fmt: &EventFormat,
    system: &str,
    event: &str,
) -> Result<Box<dyn Layout<NvmeTcpEvent>>, DecodeError> {
    if system == "block" {
        let l = BlockLayout::for_event(fmt, event)?;
        return Ok(Box::new(Mapped::new(l, NvmeTcpEvent::Block)));
    }
    match TcpLayout::bind(fmt, system, event) {
        Some(l) => Ok(Box::new(Mapped::new(l?, NvmeTcpEvent::Tcp))),
        None => Err(unknown(system, event)),
    }
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
        let NvmeTcpEvent::Tcp(TcpEvent::Host(h)) = ev.kind else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (h.kind, h.ctrl_id, h.cntlid, h.qid, h.cid, h.tag, h.len),
            (HostKind::QueueRq, 3, 7, 2, 0x3005, 5, 131072)
        );
        let rq = h.rq.unwrap();
        assert_eq!(
            (rq.slba, rq.sector, rq.dev, rq.opcode),
            (1 << 40, 1 << 43, 259 << 20, 1)
        );
        assert!(rq.write && !rq.inline_data);
        assert_eq!(rq.disk.as_str(), "nvme3n1");

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
        let NvmeTcpEvent::Tcp(TcpEvent::Target(e)) = d.decode(&raw, 1, 0).unwrap().unwrap().kind
        else {
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
        let NvmeTcpEvent::Tcp(TcpEvent::Host(h)) = d.decode(&raw, 1, 0).unwrap().unwrap().kind
        else {
            panic!()
        };
        assert_eq!(
            (h.recv_time, h.offset, h.len, h.flags),
            (123_456_789_012, 4096, 8192, 0x0c)
        );
        // Truncated records are errors, not panics.
        let e = d.decode(&raw[..raw.len() - 4], 1, 0).unwrap_err();
        assert!(e.to_string().contains("nvme_tcp_handle_c2h_data"), "{e}");
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
        let e = TcpLayout::bind(&fmt, "nvmet_tcp", "nvmet_tcp_done_recv_pdu")
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nvmet_tcp:nvmet_tcp_done_recv_pdu") && e.contains("`cid`"),
            "{e}"
        );
        assert!(TcpLayout::bind(&fmt, "nvmet_tcp", "nvmet_tcp_unknown").is_none());
    }
}
