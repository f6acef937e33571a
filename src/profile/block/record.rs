//! The block profile's record: one block request, and its column table.

use super::events::Op;
use crate::record::{schema_cell, Column, Kind, Role, Schema, Status, Tabled, Value};
use std::sync::{Arc, OnceLock};

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

fn opt(v: Option<u64>) -> Value<'static> {
    v.map_or(Value::Empty, Value::U64)
}

const fn col(
    name: &'static str,
    role: Role,
    kind: Kind,
    get: fn(&BlockRecord) -> Value<'_>,
) -> Column<BlockRecord> {
    Column {
        name,
        role,
        kind,
        get,
    }
}

static COLUMNS: &[Column<BlockRecord>] = &[
    col("start_time", Role::StartTime, Kind::Timestamp, |r| {
        Value::Time(r.start_ns)
    }),
    col("start_ns", Role::Value, Kind::U64, |r| {
        Value::U64(r.start_ns)
    }),
    col("device", Role::Label, Kind::Text, |r| Value::Str(&r.device)),
    col("dev", Role::Value, Kind::Text, |r| Value::Dev(r.dev)),
    col("op", Role::Label, Kind::Text, |r| Value::Str(r.op.as_str())),
    col("sector", Role::Value, Kind::U64, |r| Value::U64(r.sector)),
    col("bytes", Role::Value, Kind::U64, |r| Value::U64(r.bytes)),
    col("q2d_ns", Role::Stage, Kind::U64, |r| opt(r.q2d_ns)),
    col("d2c_ns", Role::Stage, Kind::U64, |r| opt(r.d2c_ns)),
    col("q2c_ns", Role::Stage, Kind::U64, |r| opt(r.q2c_ns)),
    col("error", Role::Value, Kind::I64, |r| {
        Value::I64(r.error as i64)
    }),
    col("qd", Role::Value, Kind::U64, |r| opt(r.qd.map(u64::from))),
    col("candidates", Role::Value, Kind::U64, |r| {
        opt(r.candidates.map(u64::from))
    }),
    col("status", Role::Status, Kind::Text, |r| {
        Value::Str(r.status.as_str())
    }),
];

impl Tabled for BlockRecord {
    const PROFILE: &'static str = "block";
    const COLUMNS: &'static [Column<Self>] = COLUMNS;
    fn table() -> &'static Schema {
        static S: OnceLock<Schema> = OnceLock::new();
        schema_cell::<Self>(&S)
    }
    fn first_ns(&self) -> u64 {
        self.start_ns
    }
    fn outcome(&self) -> Status {
        self.status
    }
}
