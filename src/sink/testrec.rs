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

/// A record of 40 columns, more than the sinks' unrolled writers (`write_csv`,
/// `stat_cells`) unroll: four kinds of cell (one that CSV must quote) and every role
/// of a label, stage, total, value and place, cycling at different strides so that
/// each pair of the two turns up.
pub struct Wide(pub u64);

macro_rules! wide_columns {
    ($($i:literal)*) => {
        &[$(Column {
            name: concat!("c", $i),
            role: match $i % 5 {
                0 => Role::Label,
                1 => Role::Stage,
                2 => Role::Total(&[]),
                3 => Role::Value,
                _ => Role::Place,
            },
            kind: Kind::U64,
            get: |r: &Wide| match $i % 4 {
                0 => Value::U64(r.0 + $i),
                1 => Value::Empty,
                2 => Value::Str(if $i == 2 { "a,b" } else { "x" }),
                _ => Value::Named("nvme", $i),
            },
        }),*]
    };
}

static WIDE: &[Column<Wide>] = wide_columns!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29
    30 31 32 33 34 35 36 37 38 39
);

impl Tabled for Wide {
    const PROFILE: &'static str = "wide";
    const COLUMNS: &'static [Column<Wide>] = WIDE;
    fn table() -> &'static Schema {
        static S: OnceLock<Schema> = OnceLock::new();
        schema_cell::<Self>(&S)
    }
    fn first_ns(&self) -> u64 {
        self.0
    }
    fn outcome(&self) -> Status {
        Status::Ok
    }
    fn set_outcome(&mut self, _: Status) {}
}
