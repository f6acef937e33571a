//! The block profile's record: one block request, and its column table.

use crate::profile::shared::device_io::{head_columns, tail_columns, DeviceIo, HasDeviceIo};
use crate::record::{col, opt, Column, Kind, Role};

/// One block I/O (a request).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRecord {
    pub io: DeviceIo,
    pub q2d_ns: Option<u64>,
    pub d2c_ns: Option<u64>,
    pub q2c_ns: Option<u64>,
}

impl std::ops::Deref for BlockRecord {
    type Target = DeviceIo;
    fn deref(&self) -> &DeviceIo {
        &self.io
    }
}

impl HasDeviceIo for BlockRecord {
    fn io(&self) -> &DeviceIo {
        &self.io
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
    col(
        "q2c_ns",
        Role::Total(&["q2d_ns", "d2c_ns"]),
        Kind::U64,
        |r| opt(r.q2c_ns),
    ),
    TAIL[0],
    TAIL[1],
    TAIL[2],
    TAIL[3],
];

crate::tabled!(
    BlockRecord,
    "block",
    COLUMNS,
    |r| r.io.start_ns,
    |r| r.io.status,
    |r, s| r.io.status = s
);
