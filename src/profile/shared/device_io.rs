//! What a row of one block-layer I/O says whatever the layer (request or bio), and the
//! columns of it that the block and bio records share.

use super::block_events::Op;
use crate::record::{col, opt, Column, Kind, Role, Status, Value};
use std::rc::Rc;

/// What a row of one I/O on a block device says about it, whatever the layer
/// (request or bio): the block and bio records share it and its columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceIo {
    pub start_ns: u64,
    pub dev: u32,
    /// Device name (`loop0`), or `major:minor` when it could not be resolved. Shared
    /// by every record of the device; `Rc`, not `Arc`: records never leave the reader's
    /// thread, and an atomic count would be paid twice per record.
    pub device: Rc<str>,
    pub op: Op,
    pub sector: u64,
    pub bytes: u64,
    pub error: i32,
    /// I/Os issued and not completed on the device when this one was issued (queued,
    /// for bios), itself included; empty when its issue was not seen.
    pub qd: Option<u32>,
    /// In-flight I/Os of the same (device, sector) its completion was paired among
    /// (1: certain); empty when it did not complete.
    pub candidates: Option<u32>,
    pub status: Status,
}

/// A record built around a [`DeviceIo`].
pub trait HasDeviceIo {
    fn io(&self) -> &DeviceIo;
}

/// `start_time` to `bytes`.
pub const fn head_columns<R: HasDeviceIo>() -> [Column<R>; 7] {
    [
        col("start_time", Role::StartTime, Kind::Timestamp, |r| {
            Value::Time(r.io().start_ns)
        }),
        col("start_ns", Role::Value, Kind::U64, |r| {
            Value::U64(r.io().start_ns)
        }),
        col("device", Role::Label, Kind::Text, |r| {
            Value::Str(&r.io().device)
        }),
        col("dev", Role::Value, Kind::Text, |r| Value::Dev(r.io().dev)),
        col("op", Role::Label, Kind::Text, |r| {
            Value::Str(r.io().op.as_str())
        }),
        col("sector", Role::Value, Kind::U64, |r| {
            Value::U64(r.io().sector)
        }),
        col("bytes", Role::Value, Kind::U64, |r| {
            Value::U64(r.io().bytes)
        }),
    ]
}

/// `error`, `qd`, `candidates`, `status`.
pub const fn tail_columns<R: HasDeviceIo>() -> [Column<R>; 4] {
    [
        col("error", Role::Value, Kind::I64, |r| {
            Value::I64(r.io().error as i64)
        }),
        col("qd", Role::Value, Kind::U64, |r| {
            opt(r.io().qd.map(u64::from))
        }),
        col("candidates", Role::Value, Kind::U64, |r| {
            opt(r.io().candidates.map(u64::from))
        }),
        col("status", Role::Status, Kind::Text, |r| {
            Value::Str(r.io().status.as_str())
        }),
    ]
}
