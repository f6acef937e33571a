//! The block profile's record: one block request, and its column table.

use super::events::Op;
use crate::record::{col, opt, Column, Kind, Role, Status, Value};
use std::sync::Arc;

/// One block I/O.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRecord {
    pub start_ns: u64,
    pub dev: u32,
    /// Device name (`loop0`), or `major:minor` when it could not be resolved.
    pub device: Arc<str>,
    pub op: Op,
    pub sector: u64,
    pub bytes: u64,
    pub q2d_ns: Option<u64>,
    pub d2c_ns: Option<u64>,
    pub q2c_ns: Option<u64>,
    pub error: i32,
    /// Requests issued and not completed on the device when this one was issued,
    /// itself included; empty when its issue was not seen.
    pub qd: Option<u32>,
    /// In-flight requests of the same (device, sector) its completion was paired
    /// among (1: certain); empty when it did not complete.
    pub candidates: Option<u32>,
    pub status: Status,
}

/// A record of one I/O on a block device: the columns block and bio rows share.
pub trait BlockIo {
    fn start(&self) -> u64;
    fn device(&self) -> &str;
    fn dev(&self) -> u32;
    fn op(&self) -> Op;
    fn sector(&self) -> u64;
    fn bytes(&self) -> u64;
    fn error(&self) -> i32;
    fn qd(&self) -> Option<u32>;
    fn candidates(&self) -> Option<u32>;
    fn status(&self) -> Status;
}

/// `start_time` to `bytes`.
pub const fn head_columns<R: BlockIo>() -> [Column<R>; 7] {
    [
        col("start_time", Role::StartTime, Kind::Timestamp, |r| {
            Value::Time(r.start())
        }),
        col("start_ns", Role::Value, Kind::U64, |r| {
            Value::U64(r.start())
        }),
        col("device", Role::Label, Kind::Text, |r| {
            Value::Str(r.device())
        }),
        col("dev", Role::Value, Kind::Text, |r| Value::Dev(r.dev())),
        col("op", Role::Label, Kind::Text, |r| {
            Value::Str(r.op().as_str())
        }),
        col("sector", Role::Value, Kind::U64, |r| Value::U64(r.sector())),
        col("bytes", Role::Value, Kind::U64, |r| Value::U64(r.bytes())),
    ]
}

/// `error`, `qd`, `candidates`, `status`.
pub const fn tail_columns<R: BlockIo>() -> [Column<R>; 4] {
    [
        col("error", Role::Value, Kind::I64, |r| {
            Value::I64(r.error() as i64)
        }),
        col("qd", Role::Value, Kind::U64, |r| opt(r.qd().map(u64::from))),
        col("candidates", Role::Value, Kind::U64, |r| {
            opt(r.candidates().map(u64::from))
        }),
        col("status", Role::Status, Kind::Text, |r| {
            Value::Str(r.status().as_str())
        }),
    ]
}

impl BlockIo for BlockRecord {
    fn start(&self) -> u64 {
        self.start_ns
    }
    fn device(&self) -> &str {
        &self.device
    }
    fn dev(&self) -> u32 {
        self.dev
    }
    fn op(&self) -> Op {
        self.op
    }
    fn sector(&self) -> u64 {
        self.sector
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
    fn error(&self) -> i32 {
        self.error
    }
    fn qd(&self) -> Option<u32> {
        self.qd
    }
    fn candidates(&self) -> Option<u32> {
        self.candidates
    }
    fn status(&self) -> Status {
        self.status
    }
}

const HEAD: [Column<BlockRecord>; 7] = head_columns();
const TAIL: [Column<BlockRecord>; 4] = tail_columns();

static COLUMNS: &[Column<BlockRecord>] = &[
    HEAD[0],
    HEAD[1],
    HEAD[2],
    HEAD[3],
    HEAD[4],
    HEAD[5],
    HEAD[6],
    col("q2d_ns", Role::Stage, Kind::U64, |r| opt(r.q2d_ns)),
    col("d2c_ns", Role::Stage, Kind::U64, |r| opt(r.d2c_ns)),
    col("q2c_ns", Role::Stage, Kind::U64, |r| opt(r.q2c_ns)),
    TAIL[0],
    TAIL[1],
    TAIL[2],
    TAIL[3],
];

crate::tabled!(BlockRecord, "block", COLUMNS, |r| r.start_ns, |r| r.status);
