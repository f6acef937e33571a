//! The columns of one NVMe command that the nvme (host) and nvmet (target) records
//! share, for any record built around a [`CmdCore`].

use super::cmd::CmdCore;
use crate::record::{opt, Column, Kind, Role, Value};

/// A record built around a [`CmdCore`].
pub trait HasCore {
    fn core(&self) -> &CmdCore;
}

/// The columns from `qid` to `size_class`, in that order, for any record with a core.
pub const fn core_columns<R: HasCore>() -> [Column<R>; 8] {
    [
        Column {
            name: "qid",
            role: Role::Place,
            kind: Kind::U64,
            get: |r| Value::U64(r.core().qid as u64),
        },
        Column {
            name: "cid",
            role: Role::Value,
            kind: Kind::U64,
            get: |r| Value::U64(r.core().cid as u64),
        },
        Column {
            name: "nsid",
            role: Role::Label,
            kind: Kind::U64,
            get: |r| Value::U64(r.core().nsid as u64),
        },
        Column {
            name: "opcode",
            role: Role::Label,
            kind: Kind::Text,
            get: |r| Value::from(r.core().opcode_label()),
        },
        Column {
            name: "slba",
            role: Role::Value,
            kind: Kind::U64,
            get: |r| opt(r.core().slba),
        },
        Column {
            name: "bytes",
            role: Role::Value,
            kind: Kind::U64,
            get: |r| opt(r.core().bytes),
        },
        Column {
            name: "lba_size",
            role: Role::Value,
            kind: Kind::U64,
            get: |r| Value::U64(r.core().lba_size as u64),
        },
        Column {
            name: "size_class",
            role: Role::Label,
            kind: Kind::Text,
            get: |r| Value::Str(r.core().size_label()),
        },
    ]
}

/// `qd`: commands in flight on the queue at submission, itself included (empty while not
/// known).
pub const fn qd_column<R: HasCore>() -> Column<R> {
    Column {
        name: "qd",
        role: Role::Value,
        kind: Kind::U64,
        get: |r| crate::record::opt(r.core().qd.map(u64::from)),
    }
}

/// `nvme_status` (hex, empty while incomplete).
pub const fn nvme_status_column<R: HasCore>() -> Column<R> {
    Column {
        name: "nvme_status",
        role: Role::Value,
        kind: Kind::Text,
        get: |r| {
            r.core()
                .nvme_status
                .map_or(Value::Empty, |s| Value::Hex(s as u64))
        },
    }
}

pub const fn status_column<R: HasCore>() -> Column<R> {
    Column {
        name: "status",
        role: Role::Status,
        kind: Kind::Text,
        get: |r| Value::Str(r.core().status.as_str()),
    }
}
