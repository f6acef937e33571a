//! The nvme profile's record (one host command); the columns it shares with the nvmet
//! profile's record are in [`crate::profile::shared::cmd_columns`].

use crate::profile::shared::cmd::CmdCore;
use crate::profile::shared::cmd_columns::{
    core_columns, nvme_status_column, qd_column, status_column, HasCore,
};
use crate::record::{opt, Column, Kind, Role, Value};

/// One host NVMe command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmeRecord {
    pub core: CmdCore,
    /// First block event of the request (bio queued or request inserted), when traced
    /// and found.
    pub block_ns: Option<u64>,
    /// Bios that were waiting at the command's place when its block event was joined
    /// (1: certain; more: a hot sector, the oldest was taken).
    pub candidates: Option<u32>,
}

impl NvmeRecord {
    pub fn blk_to_driver_ns(&self) -> Option<u64> {
        // A block event after the command's submission is not its own: no cell.
        self.block_ns
            .and_then(|b| self.core.submit_ns.checked_sub(b))
    }

    pub fn total_ns(&self) -> Option<u64> {
        match (self.block_ns, self.core.cmd_ns) {
            (Some(b), Some(c)) => self.core.submit_ns.saturating_add(c).checked_sub(b),
            _ => None,
        }
    }

    /// The first block event when it was joined, else the driver's setup.
    pub fn start(&self) -> u64 {
        self.block_ns.unwrap_or(self.core.submit_ns)
    }
}

impl HasCore for NvmeRecord {
    fn core(&self) -> &CmdCore {
        &self.core
    }
}

const CORE: [Column<NvmeRecord>; 8] = core_columns::<NvmeRecord>();

static COLUMNS: &[Column<NvmeRecord>] = &[
    Column {
        name: "start_time",
        role: Role::StartTime,
        kind: Kind::Timestamp,
        get: |r| Value::Time(r.start()),
    },
    Column {
        name: "start_ns",
        role: Role::Value,
        kind: Kind::U64,
        get: |r| Value::U64(r.start()),
    },
    Column {
        name: "ctrl",
        role: Role::Label,
        kind: Kind::Text,
        get: |r| Value::Named("nvme", r.core.ctrl_id as u64),
    },
    Column {
        name: "disk",
        role: Role::Place,
        kind: Kind::Text,
        get: |r| Value::Str(r.core.disk.as_str()),
    },
    CORE[0],
    CORE[1],
    CORE[2],
    CORE[3],
    CORE[4],
    CORE[5],
    CORE[6],
    CORE[7],
    Column {
        name: "blk_to_driver_ns",
        role: Role::Stage,
        kind: Kind::U64,
        get: |r| opt(r.blk_to_driver_ns()),
    },
    Column {
        name: "driver_ns",
        role: Role::Stage,
        kind: Kind::U64,
        get: |r| opt(r.core.cmd_ns),
    },
    Column {
        name: "total_ns",
        role: Role::Total(&["blk_to_driver_ns", "driver_ns"]),
        kind: Kind::U64,
        get: |r| opt(r.total_ns()),
    },
    nvme_status_column(),
    Column {
        name: "retries",
        role: Role::Value,
        kind: Kind::U64,
        get: |r| opt(r.core.retries.map(u64::from)),
    },
    qd_column(),
    Column {
        name: "candidates",
        role: Role::Value,
        kind: Kind::U64,
        get: |r| opt(r.candidates.map(u64::from)),
    },
    status_column(),
];

crate::tabled!(
    NvmeRecord,
    "nvme",
    COLUMNS,
    |r| r.start(),
    |r| r.core.status,
    |r, s| r.core.status = s
);
