//! NVMe host driver events: `nvme:nvme_setup_cmd` and `nvme:nvme_complete_rq`.
//!
//! Also the command-level vocabulary shared with the target events (`nvmet`): the
//! decoded command and completion, opcode names, and the slba/length read from the
//! command dwords. Pure decoding: no sysfs (the LBA size is the correlator's business).

use crate::correlate::FxMap;
use crate::decode::{unknown, DecodeError, FieldReader, Layout, Malformed, Mapped, Want};
use crate::profile::shared::block_events::{BlockEvent, BlockLayout};
use crate::tracefs::EventFormat;

/// `DISK_NAME_LEN`: the size of the `disk` char array of the nvme and nvmet events.
pub const DISK_LEN: usize = 32;

/// Bytes of command dwords 10..15 that the events copy (`u8 cdw10[24]`).
pub const CDW_LEN: usize = 24;

/// The NVMe-oF "fabrics command" opcode: its meaning is in `fctype`, not `opcode`.
pub const OPC_FABRICS: u8 = 0x7f;

/// A disk name held inline (the kernel's `char disk[32]`), so events stay plain data
/// and decoding a sample allocates nothing.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DiskName {
    bytes: [u8; DISK_LEN],
    len: u8,
}

impl DiskName {
    /// Up to the first NUL; longer input is cut to `DISK_LEN` bytes.
    pub fn new(raw: &[u8]) -> DiskName {
        let n = raw
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(raw.len())
            .min(DISK_LEN);
        let mut bytes = [0u8; DISK_LEN];
        bytes[..n].copy_from_slice(&raw[..n]);
        DiskName {
            bytes,
            len: n as u8,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The name as text; a non-UTF-8 name (never seen from the kernel) reads as empty.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::fmt::Debug for DiskName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// Distinct disk names a process interns at most; a name past that reads as
/// [`DiskName::OVERFLOW`]. Hosts have tens of disks, and reconnects bring the same names
/// back: only garbage input (a corrupt capture) could fill it, and it must not grow
/// memory without bound.
pub const MAX_DISKS: usize = 4096;

/// The interned names, each set once and never changed, so that reading one takes no
/// lock; [`intern_index`] picks the slot of a new name under its lock.
static DISKS: [std::sync::OnceLock<DiskName>; MAX_DISKS] =
    [const { std::sync::OnceLock::new() }; MAX_DISKS];

/// Slot of every interned name.
fn disk_index() -> std::sync::MutexGuard<'static, FxMap<DiskName, u32>> {
    use std::sync::{Mutex, OnceLock};
    static INDEX: OnceLock<Mutex<FxMap<DiskName, u32>>> = OnceLock::new();
    // A poisoned lock only means another thread panicked while inserting: the map is
    // whole (an insert is its only change), so go on with it.
    INDEX
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// `name`'s slot in [`DISKS`], interning it; `None` past [`MAX_DISKS`] names.
fn intern_index(name: &DiskName) -> Option<u32> {
    let mut index = disk_index();
    if let Some(&i) = index.get(name) {
        return Some(i);
    }
    let i = index.len();
    if i >= MAX_DISKS {
        return None;
    }
    // Under the index's lock, so the slot is free.
    let _ = DISKS[i].set(*name);
    index.insert(*name, i as u32);
    Some(i as u32)
}

fn interned(i: u32) -> &'static DiskName {
    DISKS
        .get(i as usize)
        .and_then(|s| s.get())
        .unwrap_or(&DiskName::OVERFLOW)
}

impl DiskName {
    /// What every name past [`MAX_DISKS`] distinct ones reads as.
    pub const OVERFLOW: DiskName = DiskName {
        bytes: {
            let mut b = [0u8; DISK_LEN];
            b[0] = b'?';
            b
        },
        len: 1,
    };
    pub const EMPTY: DiskName = DiskName {
        bytes: [0; DISK_LEN],
        len: 0,
    };
}

/// A disk name interned for the life of the process: events and records carry its
/// number in the interner (Copy, 4 bytes) instead of the 33 bytes of a [`DiskName`].
/// Events wait in the sorter by the thousand, so each byte here is moved per sample.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Disk(u32);

impl Disk {
    /// No name.
    const EMPTY: Disk = Disk(u32::MAX);
    /// A name past [`MAX_DISKS`] distinct ones.
    const OVERFLOW: Disk = Disk(u32::MAX - 1);

    /// `raw`'s name, up to its first NUL.
    pub fn intern(raw: &[u8]) -> Disk {
        let name = DiskName::new(raw);
        if name.is_empty() {
            return Disk::default();
        }
        intern_index(&name).map_or(Disk::OVERFLOW, Disk)
    }

    pub fn as_str(&self) -> &'static str {
        self.name().as_str()
    }

    pub fn name(&self) -> &'static DiskName {
        match *self {
            Disk::EMPTY => &DiskName::EMPTY,
            Disk(i) => interned(i),
        }
    }
}

impl Default for Disk {
    fn default() -> Self {
        Disk::EMPTY
    }
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.name().fmt(f)
    }
}

/// The disk name a layout saw last, interned: a sample names the same disk as the one
/// before it almost always, and then decoding it takes a compare, not the interner's
/// lock.
#[derive(Debug, Default)]
pub struct DiskCache {
    /// 1 + the slot of the last name; 0 before any.
    last: std::sync::atomic::AtomicU32,
}

/// A clone starts with nothing remembered: the cache is only a shortcut to the
/// interner, and an atomic cannot be derived `Clone`.
impl Clone for DiskCache {
    fn clone(&self) -> Self {
        DiskCache::default()
    }
}

impl DiskCache {
    /// `raw`'s name (up to its first NUL), interned.
    #[inline]
    pub fn name(&self, raw: &[u8]) -> Disk {
        use std::sync::atomic::Ordering::Relaxed;
        let n = raw
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(raw.len())
            .min(DISK_LEN);
        let raw = &raw[..n];
        if n == 0 {
            return Disk::default();
        }
        let last = self.last.load(Relaxed);
        if last > 0 && interned(last - 1).as_bytes() == raw {
            return Disk(last - 1);
        }
        match intern_index(&DiskName::new(raw)) {
            Some(i) => {
                self.last.store(i + 1, Relaxed);
                Disk(i)
            }
            None => Disk::OVERFLOW,
        }
    }
}

/// A command as submitted: host `nvme_setup_cmd` or target `nvmet_req_init`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmeCmd {
    /// Host: the controller instance (`nvme<N>`). Target: the controller's cntlid.
    pub ctrl_id: u32,
    pub qid: u32,
    pub cid: u16,
    pub opcode: u8,
    pub fctype: u8,
    pub flags: u8,
    pub nsid: u32,
    /// Command dwords 10..15, little-endian as on the wire.
    pub cdw10: [u8; CDW_LEN],
    /// Host: the namespace's disk (`nvme0n1`). Target: the namespace's `device_path`.
    /// Empty for admin commands.
    pub disk: DiskName,
}

/// A completion: host `nvme_complete_rq` or target `nvmet_req_complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmeDone {
    pub ctrl_id: u32,
    pub qid: u32,
    /// The kernel records an `int` here but the value is the 16-bit command id.
    pub cid: u16,
    /// NVMe status field without the phase bit (SCT << 8 | SC, plus More/DNR); 0 = success.
    pub status: u16,
    pub result: u64,
    /// Host only: how often the driver retried the command.
    pub retries: u8,
    pub disk: DiskName,
}

/// One host or target command event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmeEvent {
    Cmd(NvmeCmd),
    Done(NvmeDone),
}

impl NvmeCmd {
    /// Where the command's data is, for the opcodes whose dwords 10..12 are
    /// SLBA (cdw10+cdw11, u64) and NLB (cdw12 bits 0..15, 0-based): `(slba, blocks)`.
    /// `None` for admin and fabrics commands and for I/O opcodes shaped otherwise
    /// (flush has no range, dsm carries its ranges in the data buffer).
    pub fn lba_range(&self) -> Option<(u64, u32)> {
        if self.qid == 0 || self.opcode == OPC_FABRICS || !has_lba_range(self.opcode) {
            return None;
        }
        let c = &self.cdw10;
        let slba = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        let nlb = u16::from_le_bytes([c[8], c[9]]);
        Some((slba, nlb as u32 + 1))
    }

    /// The command's name (see [`opcode_name`]).
    pub fn opcode_name(&self) -> Option<&'static str> {
        opcode_name(self.qid, self.opcode, self.fctype)
    }
}

/// NVM command set opcodes whose cdw10..12 hold SLBA and NLB.
fn has_lba_range(opcode: u8) -> bool {
    matches!(
        opcode,
        0x01 // write
            | 0x02 // read
            | 0x04 // write uncorrectable
            | 0x05 // compare
            | 0x08 // write zeroes
            | 0x0c // verify
            | 0x7d // zone append (slba = the zone)
    )
}

/// The name of a command the way nvme_bpf and the kernel's `show_opcode_name` group
/// them: admin opcodes on queue 0, NVM opcodes on I/O queues, fabrics commands by
/// `fctype`. `None` for an opcode this table does not know (shown in hex by callers).
pub fn opcode_name(qid: u32, opcode: u8, fctype: u8) -> Option<&'static str> {
    if opcode == OPC_FABRICS {
        return Some(match fctype {
            0x00 => "property_set",
            0x01 => "connect",
            0x04 => "property_get",
            0x05 => "auth_send",
            0x06 => "auth_receive",
            _ => "fabrics",
        });
    }
    if qid == 0 {
        return Some(match opcode {
            0x00 => "delete_sq",
            0x01 => "create_sq",
            0x02 => "get_log_page",
            0x04 => "delete_cq",
            0x05 => "create_cq",
            0x06 => "identify",
            0x08 => "abort",
            0x09 => "set_features",
            0x0a => "get_features",
            0x0c => "async_event",
            0x0d => "ns_mgmt",
            0x10 => "fw_commit",
            0x11 => "fw_download",
            0x14 => "device_self_test",
            0x15 => "ns_attach",
            0x18 => "keep_alive",
            0x19 => "directive_send",
            0x1a => "directive_recv",
            0x1c => "virt_mgmt",
            0x1d => "nvme_mi_send",
            0x1e => "nvme_mi_recv",
            0x7c => "dbbuf",
            0x80 => "format_nvm",
            0x81 => "security_send",
            0x82 => "security_recv",
            0x84 => "sanitize",
            0x86 => "get_lba_status",
            _ => return None,
        });
    }
    Some(match opcode {
        0x00 => "flush",
        0x01 => "write",
        0x02 => "read",
        0x04 => "write_uncor",
        0x05 => "compare",
        0x08 => "write_zeroes",
        0x09 => "dsm",
        0x0c => "verify",
        0x0d => "resv_register",
        0x0e => "resv_report",
        0x11 => "resv_acquire",
        0x15 => "resv_release",
        0x19 => "copy",
        0x79 => "zone_mgmt_send",
        0x7a => "zone_mgmt_recv",
        0x7d => "zone_append",
        _ => return None,
    })
}

/// The layout of a command event (`nvme_setup_cmd`, `nvmet_req_init`): the same field
/// names in both, at different offsets and with different integer sizes.
#[derive(Debug, Clone, Copy)]
pub struct CmdLayout {
    event: &'static str,
    ctrl_id: FieldReader,
    qid: FieldReader,
    cid: FieldReader,
    opcode: FieldReader,
    fctype: FieldReader,
    flags: FieldReader,
    nsid: FieldReader,
    cdw10: FieldReader,
    disk: FieldReader,
    need: usize,
}

impl CmdLayout {
    pub fn bind(fmt: &EventFormat, event: &'static str) -> Result<CmdLayout, DecodeError> {
        let int = |name| FieldReader::bind(fmt, event, name, Want::Int);
        let ctrl_id = int("ctrl_id")?;
        let qid = int("qid")?;
        let cid = int("cid")?;
        let opcode = int("opcode")?;
        let fctype = int("fctype")?;
        let flags = int("flags")?;
        let nsid = int("nsid")?;
        let cdw10 = FieldReader::bind(fmt, event, "cdw10", Want::Bytes(CDW_LEN as u32))?;
        let disk = FieldReader::bind(fmt, event, "disk", Want::CharArray)?;
        let need = [ctrl_id, qid, cid, opcode, fctype, flags, nsid, cdw10, disk]
            .iter()
            .map(FieldReader::end)
            .max()
            .unwrap_or(0);
        Ok(CmdLayout {
            event,
            ctrl_id,
            qid,
            cid,
            opcode,
            fctype,
            flags,
            nsid,
            cdw10,
            disk,
            need,
        })
    }

    #[inline]
    pub fn decode(&self, raw: &[u8]) -> Result<NvmeCmd, Malformed> {
        Malformed::check_len(raw, self.need, || self.event)?;
        let mut cdw10 = [0u8; CDW_LEN];
        // `bind` checked the array holds at least CDW_LEN bytes and `need` that the
        // record holds the array, so this copies exactly CDW_LEN bytes.
        let src = self.cdw10.array(raw);
        let n = src.len().min(CDW_LEN);
        cdw10[..n].copy_from_slice(&src[..n]);
        Ok(NvmeCmd {
            ctrl_id: self.ctrl_id.u32(raw),
            qid: self.qid.u32(raw),
            cid: self.cid.u64(raw) as u16,
            opcode: self.opcode.u64(raw) as u8,
            fctype: self.fctype.u64(raw) as u8,
            flags: self.flags.u64(raw) as u8,
            nsid: self.nsid.u32(raw),
            cdw10,
            disk: DiskName::new(self.disk.str(raw)),
        })
    }
}

/// The layout of a completion event (`nvme_complete_rq`, `nvmet_req_complete`).
#[derive(Debug, Clone, Copy)]
pub struct DoneLayout {
    event: &'static str,
    ctrl_id: FieldReader,
    qid: FieldReader,
    cid: FieldReader,
    status: FieldReader,
    result: FieldReader,
    retries: Option<FieldReader>,
    disk: FieldReader,
    need: usize,
}

impl DoneLayout {
    pub fn bind(fmt: &EventFormat, event: &'static str) -> Result<DoneLayout, DecodeError> {
        let int = |name| FieldReader::bind(fmt, event, name, Want::Int);
        let ctrl_id = int("ctrl_id")?;
        let qid = int("qid")?;
        let cid = int("cid")?;
        let status = int("status")?;
        let result = int("result")?;
        // The target's completion has no retry count.
        let retries = FieldReader::bind_opt(fmt, event, "retries", Want::Int)?;
        let disk = FieldReader::bind(fmt, event, "disk", Want::CharArray)?;
        let need = [
            Some(ctrl_id),
            Some(qid),
            Some(cid),
            Some(status),
            Some(result),
            retries,
            Some(disk),
        ]
        .into_iter()
        .flatten()
        .map(|f| f.end())
        .max()
        .unwrap_or(0);
        Ok(DoneLayout {
            event,
            ctrl_id,
            qid,
            cid,
            status,
            result,
            retries,
            disk,
            need,
        })
    }

    #[inline]
    pub fn decode(&self, raw: &[u8]) -> Result<NvmeDone, Malformed> {
        Malformed::check_len(raw, self.need, || self.event)?;
        Ok(NvmeDone {
            ctrl_id: self.ctrl_id.u32(raw),
            qid: self.qid.u32(raw),
            cid: self.cid.u64(raw) as u16,
            status: self.status.u64(raw) as u16,
            result: self.result.u64(raw),
            retries: self.retries.map_or(0, |f| f.u64(raw) as u8),
            disk: DiskName::new(self.disk.str(raw)),
        })
    }
}

/// What the nvme profile decodes: the host driver's events and the block events of
/// the same requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostEvent {
    Nvme(NvmeEvent),
    Block(BlockEvent),
}

crate::decode::layout_by_decode!(CmdLayout => NvmeCmd);
crate::decode::layout_by_decode!(DoneLayout => NvmeDone);

/// The layout of one event the nvme profile opens.
pub fn layout(
    fmt: &EventFormat,
    system: &str,
    event: &str,
) -> Result<Box<dyn Layout<HostEvent>>, DecodeError> {
    Ok(match (system, event) {
        ("nvme", "nvme_setup_cmd") => {
            let l = CmdLayout::bind(fmt, "nvme:nvme_setup_cmd")?;
            Box::new(Mapped::new(l, |c| HostEvent::Nvme(NvmeEvent::Cmd(c))))
        }
        ("nvme", "nvme_complete_rq") => {
            let l = DoneLayout::bind(fmt, "nvme:nvme_complete_rq")?;
            Box::new(Mapped::new(l, |d| HostEvent::Nvme(NvmeEvent::Done(d))))
        }
        ("block", e) => Box::new(Mapped::new(
            BlockLayout::for_event(fmt, e)?,
            HostEvent::Block,
        )),
        _ => return Err(unknown(system, event)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(qid: u32, opcode: u8, cdw: &[u8]) -> NvmeCmd {
        let mut cdw10 = [0u8; CDW_LEN];
        cdw10[..cdw.len()].copy_from_slice(cdw);
        NvmeCmd {
            ctrl_id: 0,
            qid,
            cid: 1,
            opcode,
            fctype: 0,
            flags: 0,
            nsid: 1,
            cdw10,
            disk: DiskName::new(b"nvme0n1"),
        }
    }

    /// One name is one interned disk, whether it comes through the interner or a
    /// layout's cache, with or without its NUL padding; another name is another disk.
    #[test]
    fn disk_names_are_interned_once() {
        let a = Disk::intern(b"nvme7n1\0\0\0");
        assert_eq!(a.as_str(), "nvme7n1");
        assert!(std::ptr::eq(a.name(), Disk::intern(b"nvme7n1").name()));
        let b = Disk::intern(b"nvme7n2");
        assert!(!std::ptr::eq(a.name(), b.name()));
        assert_ne!(a, b);
        let cache = DiskCache::default();
        for _ in 0..3 {
            for (raw, want) in [(&b"nvme7n1\0x"[..], a), (b"nvme7n2", b)] {
                let d = cache.name(raw);
                assert!(std::ptr::eq(d.name(), want.name()), "{raw:?}");
            }
        }
        assert_eq!(cache.name(b"\0nvme").as_str(), "");
        assert_eq!(Disk::intern(b"").as_str(), "");
        assert_eq!(Disk::default().as_str(), "");
        // A name longer than the kernel's array is cut to it, as `DiskName::new` does.
        let long = [b'x'; DISK_LEN + 4];
        assert_eq!(cache.name(&long).as_str().len(), DISK_LEN);
        assert_eq!(DiskName::OVERFLOW.as_str(), "?");
    }

    #[test]
    fn lba_range_from_cdw10_to_12() {
        // slba 0x0102030405060708, nlb 7 (0-based) = 8 blocks.
        let c = cmd(1, 0x02, &[8, 7, 6, 5, 4, 3, 2, 1, 7, 0, 0xff, 0xff]);
        assert_eq!(c.lba_range(), Some((0x0102_0304_0506_0708, 8)));
        // nlb 0xffff = 65536 blocks: the 0-based count does not overflow.
        let c = cmd(1, 0x01, &[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
        assert_eq!(c.lba_range(), Some((0, 65536)));
        assert_eq!(cmd(1, 0x00, &[1]).lba_range(), None, "flush has no range");
        assert_eq!(
            cmd(1, 0x09, &[1]).lba_range(),
            None,
            "dsm ranges are in the data"
        );
        assert_eq!(
            cmd(0, 0x02, &[1]).lba_range(),
            None,
            "admin 0x02 is get_log_page"
        );
        assert_eq!(cmd(1, OPC_FABRICS, &[1]).lba_range(), None);
    }

    #[test]
    fn opcode_names_depend_on_the_queue() {
        assert_eq!(opcode_name(1, 0x02, 0), Some("read"));
        assert_eq!(opcode_name(0, 0x02, 0), Some("get_log_page"));
        assert_eq!(opcode_name(3, 0x01, 0), Some("write"));
        assert_eq!(opcode_name(0, 0x18, 0), Some("keep_alive"));
        assert_eq!(opcode_name(0, OPC_FABRICS, 0x01), Some("connect"));
        assert_eq!(opcode_name(2, OPC_FABRICS, 0x01), Some("connect"));
        assert_eq!(opcode_name(1, 0xee, 0), None);
    }

    #[test]
    fn disk_names() {
        assert_eq!(DiskName::new(b"nvme0n1\0junk").as_str(), "nvme0n1");
        assert!(DiskName::new(b"\0nvme").is_empty());
        assert_eq!(DiskName::new(&[b'a'; 40]).as_bytes().len(), DISK_LEN);
    }
}
