//! A record type of the sinks' own tests: every role and kind, independent of the
//! profiles' records (which change with their profiles).

use crate::record::{schema_cell, Column, Kind, Role, Schema, Status, Tabled, Value};
use std::sync::OnceLock;

#[derive(Debug, Clone)]
pub struct T {
    pub start: u64,
    pub dev: &'static str,
    pub op: &'static str,
    pub a: Option<u64>,
    pub b: Option<i64>,
    pub status: Status,
}

impl T {
    pub fn new(start: u64, op: &'static str, a: Option<u64>, b: Option<i64>) -> T {
        T {
            start,
            dev: "loop9",
            op,
            a,
            b,
            status: Status::Ok,
        }
    }
}

static COLS: &[Column<T>] = &[
    Column {
        name: "start_time",
        role: Role::StartTime,
        kind: Kind::Timestamp,
        get: |r| Value::Time(r.start),
    },
    Column {
        name: "start_ns",
        role: Role::Value,
        kind: Kind::U64,
        get: |r| Value::U64(r.start),
    },
    Column {
        name: "device",
        role: Role::Label,
        kind: Kind::Text,
        get: |r| Value::Str(r.dev),
    },
    Column {
        name: "op",
        role: Role::Label,
        kind: Kind::Text,
        get: |r| Value::Str(r.op),
    },
    Column {
        name: "a_ns",
        role: Role::Stage,
        kind: Kind::U64,
        get: |r| r.a.map_or(Value::Empty, Value::U64),
    },
    Column {
        name: "b_ns",
        role: Role::Stage,
        kind: Kind::I64,
        get: |r| r.b.map_or(Value::Empty, Value::I64),
    },
    Column {
        name: "status",
        role: Role::Status,
        kind: Kind::Text,
        get: |r| Value::Str(r.status.as_str()),
    },
];

impl Tabled for T {
    const PROFILE: &'static str = "sinktest";
    const COLUMNS: &'static [Column<T>] = COLS;
    fn table() -> &'static Schema {
        static S: OnceLock<Schema> = OnceLock::new();
        schema_cell::<Self>(&S)
    }
    fn first_ns(&self) -> u64 {
        self.start
    }
    fn outcome(&self) -> Status {
        self.status
    }
    fn set_outcome(&mut self, s: Status) {
        self.status = s;
    }
}
