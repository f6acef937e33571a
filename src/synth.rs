//! Build raw tracepoint records from a format file, for tests and benchmarks of the
//! stages that this host cannot feed for real (nvme, nvme_tcp) and for replaying large
//! synthetic streams. Records are laid out by the same format files the decoder reads,
//! so a synthetic record is byte-for-byte what that kernel would write.

use crate::tracefs::{EventFormat, FieldShape, Tracefs, TracefsError};
use std::path::{Path, PathBuf};

/// One record under construction.
#[derive(Debug, Clone)]
pub struct RecordBuilder<'f> {
    fmt: &'f EventFormat,
    buf: Vec<u8>,
}

impl<'f> RecordBuilder<'f> {
    /// A zeroed record of the event's fixed size with `common_type` set.
    pub fn new(fmt: &'f EventFormat) -> RecordBuilder<'f> {
        let mut buf = vec![0u8; fmt.fixed_size() as usize];
        let id = (fmt.id as u16).to_le_bytes();
        buf[..2].copy_from_slice(&id);
        RecordBuilder { fmt, buf }
    }

    fn field(&self, name: &str) -> &crate::tracefs::Field {
        self.fmt
            .field(name)
            .unwrap_or_else(|| panic!("event {} has no field {name}", self.fmt.name))
    }

    /// Set an integer field (truncated to the field's size, little-endian).
    pub fn int(mut self, name: &str, v: u64) -> Self {
        let f = self.field(name).clone();
        assert_eq!(f.shape, FieldShape::Scalar, "{name} is not a scalar");
        let bytes = v.to_le_bytes();
        let (o, n) = (f.offset as usize, f.size as usize);
        self.buf[o..o + n].copy_from_slice(&bytes[..n]);
        self
    }

    /// [`int`](Self::int) where the event has the field; nothing where it has not (one
    /// set of values for the events of an I/O that each carry some of them).
    pub fn int_if(self, name: &str, v: u64) -> Self {
        if self.fmt.field(name).is_some() {
            self.int(name, v)
        } else {
            self
        }
    }

    /// [`bytes`](Self::bytes) where the event has the field.
    pub fn bytes_if(self, name: &str, v: &[u8]) -> Self {
        if self.fmt.field(name).is_some() {
            self.bytes(name, v)
        } else {
            self
        }
    }

    /// Set a fixed array field from bytes (NUL-padded, cut to the field's size).
    pub fn bytes(mut self, name: &str, v: &[u8]) -> Self {
        let f = self.field(name).clone();
        let (o, n) = (f.offset as usize, f.size as usize);
        self.buf[o..o + n].fill(0);
        let k = v.len().min(n);
        self.buf[o..o + k].copy_from_slice(&v[..k]);
        self
    }

    /// Append a `__data_loc` payload and point the field at it.
    pub fn dynamic(mut self, name: &str, v: &[u8]) -> Self {
        let f = self.field(name).clone();
        let start = self.buf.len();
        self.buf.extend_from_slice(v);
        let o = f.offset as usize;
        let word = match f.shape {
            FieldShape::RelLoc => ((v.len() as u32) << 16) | (start - (o + 4)) as u32,
            _ => ((v.len() as u32) << 16) | start as u32,
        };
        self.buf[o..o + 4].copy_from_slice(&word.to_le_bytes());
        self
    }

    pub fn build(self) -> Vec<u8> {
        self.buf
    }
}

/// Samples per CPU, each CPU's in time order: (time, raw record).
pub type PerCpu = Vec<Vec<(u64, Vec<u8>)>>;

/// The newest tree under `root` (a folder of captured tracefs trees, as `tracefs/` in
/// the source) that has `event` (`system/name`).
pub fn newest_tree(root: &Path, event: &str) -> Option<PathBuf> {
    let mut trees: Vec<PathBuf> = std::fs::read_dir(root)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("events").join(event).join("format").is_file())
        .collect();
    trees.sort();
    trees.pop()
}

/// The block profile's events of [`block_ios`].
pub const BLOCK_EVENTS: [&str; 3] = ["block_rq_insert", "block_rq_issue", "block_rq_complete"];

/// `ios` whole block I/Os on `cpus` CPUs, 1 µs apart, 64 in flight: insert and issue on
/// one CPU, the completion on the next, so that a merge across rings has to reorder.
/// Every third a write. 4 KiB each, at sectors that repeat every 65,536 I/Os.
pub fn block_ios(tfs: &Tracefs, ios: u64, cpus: usize) -> Result<PerCpu, TracefsError> {
    let [ins, iss, cpl] = BLOCK_EVENTS.map(|e| tfs.event("block", e));
    let (ins, iss, cpl) = (ins?, iss?, cpl?);
    let cpus = cpus.max(1);
    let mk = |f, sector: u64, rwbs: &[u8]| {
        RecordBuilder::new(f)
            .int("dev", (259u64 << 20) | 1)
            .int("sector", sector)
            .int("nr_sector", 8)
            .bytes("rwbs", rwbs)
            .int_if("bytes", 4096)
            .build()
    };
    let mut per_cpu: PerCpu = vec![Vec::new(); cpus];
    for i in 0..ios {
        let t = i * 1_000;
        let sector = (i % 65_536) * 8;
        let rwbs: &[u8] = if i % 3 == 0 { b"W" } else { b"R" };
        let sub = (i as usize) % cpus;
        per_cpu[sub].push((t, mk(&ins, sector, rwbs)));
        per_cpu[sub].push((t + 300, mk(&iss, sector, rwbs)));
        per_cpu[(sub + 1) % cpus].push((t + 64_000, mk(&cpl, sector, rwbs)));
    }
    Ok(per_cpu)
}

/// The nvme-tcp profile's events of [`nvme_tcp_ios`], in the order an I/O has them.
pub const NVME_TCP_EVENTS: [(&str, &str); 13] = [
    ("block", "block_bio_queue"),
    ("nvme_tcp", "nvme_tcp_queue_rq"),
    ("nvme_tcp", "nvme_tcp_try_send"),
    ("nvme_tcp", "nvme_tcp_done_send_req"),
    ("nvmet_tcp", "nvmet_tcp_done_recv_pdu"),
    ("nvmet_tcp", "nvmet_tcp_exec_read_req"),
    ("nvmet_tcp", "nvmet_tcp_queue_response"),
    ("nvmet_tcp", "nvmet_tcp_try_send_data_pdu"),
    ("nvmet_tcp", "nvmet_tcp_try_send_response"),
    ("nvme_tcp", "nvme_tcp_handle_c2h_data"),
    ("nvme_tcp", "nvme_tcp_recv_data"),
    ("nvme_tcp", "nvme_tcp_process_nvme_cqe"),
    ("block", "block_rq_complete"),
];

/// CPUs of [`nvme_tcp_ios`]: the host's two, the target's two.
pub const NVME_TCP_CPUS: usize = 4;

/// `ios` 4 KiB reads over a loopback NVMe/TCP connection, traced on both sides: the 13
/// events of [`NVME_TCP_EVENTS`] each (the patched kernel's, `kernel_change/`), 1 µs
/// apart, 64 µs from bio to completion. Two queues, each on a host CPU; an I/O is
/// submitted on one host CPU and completed on the other, its target events on a CPU of
/// the target's.
pub fn nvme_tcp_ios(tfs: &Tracefs, ios: u64) -> Result<PerCpu, TracefsError> {
    let fmts = NVME_TCP_EVENTS
        .iter()
        .map(|(sys, ev)| tfs.event(sys, ev))
        .collect::<Result<Vec<_>, _>>()?;
    let mut per_cpu: PerCpu = vec![Vec::new(); NVME_TCP_CPUS];
    for i in 0..ios {
        let t = i * 1_000;
        let (sub, done, tgt) = (
            (i % 2) as usize,
            ((i + 1) % 2) as usize,
            2 + (i % 2) as usize,
        );
        let (qid, cid, sector) = (1 + i % 2, (i / 2) % 1024, (i % 65_536) * 8);
        // (event, time offset, CPU, receive time offset): the `read` scenario of the
        // profile's tests, ×32.
        let marks = [
            (0, 0, sub, None),
            (1, 500, sub, None),
            (2, 600, sub, None),
            (3, 700, sub, None),
            (4, 800, tgt, Some(750)),
            (5, 900, tgt, None),
            (6, 1400, tgt, None),
            (7, 1500, tgt, None),
            (8, 1600, tgt, None),
            (9, 1700, done, Some(1650)),
            (10, 1800, done, Some(1650)),
            (11, 1900, done, Some(1850)),
            (12, 2000, done, None),
        ];
        for (k, off, cpu, recv) in marks {
            // Lengths: the command's 4 KiB, a response or data PDU header's 24 bytes.
            let len = if (7..=8).contains(&k) { 24 } else { 4096 };
            let mut b = RecordBuilder::new(&fmts[k]);
            for (name, v) in [
                ("ctrl_id", 0),
                ("cntlid", 1),
                ("qid", qid),
                ("cid", cid),
                ("tag", cid & 0xfff),
                ("opcode", 2),
                ("dev", 259u64 << 20),
                ("sector", sector),
                ("nr_sector", 8),
                ("slba", sector / 8),
                ("nsid", 1),
                ("write", 0),
                ("inline_data", 0),
                ("flags", 4),
                ("len", len),
                ("data_len", 4096),
            ] {
                b = b.int_if(name, v);
            }
            if let Some(r) = recv {
                b = b.int_if("recv_time", t + r * 32);
            }
            let raw = b
                .bytes_if("disk", b"nvme0n1")
                .bytes_if("rwbs", b"R")
                .build();
            per_cpu[cpu].push((t + off * 32, raw));
        }
    }
    Ok(per_cpu)
}
