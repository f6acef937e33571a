//! The shape of an output record: one column table per record type.
//!
//! A profile describes its record once, as a static table of [`Column`]s (name, role,
//! kind, and how to read the value out of a record). Everything else is derived from
//! that table: the CSV header and cells, the stat groups (the `Label` columns) and
//! stages (the `Stage` columns), and reading rows back for `report` and `merge`
//! ([`Row`]). A new output format needs no per-profile code: it walks the table.
//!
//! This module does no I/O; rendering a value into bytes is here so that every sink
//! writes the same text for the same value.

use crate::sink::csv::CsvRow;
use std::fmt::Write as _;
use std::sync::OnceLock;

/// What happened to an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    Ok,
    /// Completed with an error status (the record's error column says which).
    Error,
    /// Never completed while we watched: in flight at the end of the run, or evicted to
    /// bound memory. The stages it reached are filled in.
    Incomplete,
    /// One of its events was counted by the kernel but never arrived (lost to a full
    /// ring or dropped): the stages that event would have closed are empty, and none is
    /// filled from a guess.
    Dropped,
}

impl Status {
    /// Every status, in declaration order: `s as usize` is its index here.
    pub const ALL: [Status; 4] = [
        Status::Ok,
        Status::Error,
        Status::Incomplete,
        Status::Dropped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Incomplete => "incomplete",
            Status::Dropped => "dropped",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|st| st.as_str() == s)
    }
}

/// What a column is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Wall-clock start of the I/O (rendered from the monotonic start by the sink).
    StartTime,
    /// Part of the stat group key (device, op, size class…), in table order.
    Label,
    /// A latency in ns: a histogram per group in `stat`, a bar segment in a plot.
    Stage,
    /// A latency in ns that is the sum of the stages named (column names), listed in the
    /// order an I/O passes through them; a part may be a total itself. A stage like
    /// any other for `stat`; a mark over its stacked parts in a plot.
    Total(&'static [&'static str]),
    /// The row's [`Status`].
    Status,
    /// Where the I/O ran, from a small set (controller, queue): a value in rows and
    /// `stat` (tables per queue would drown the reader), and a label of `serve`'s
    /// metrics, which a fleet's dashboards slice by it. Never anything per I/O.
    Place,
    /// Anything else: identity, sizes, absolute marks.
    Value,
}

impl Role {
    /// A latency column: a [`Role::Stage`] or a [`Role::Total`].
    pub fn is_stage(self) -> bool {
        matches!(self, Role::Stage | Role::Total(_))
    }
}

/// The type of a column's values, for typed outputs and for reading rows back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Wall-clock date-time (see [`Role::StartTime`]).
    Timestamp,
    U64,
    I64,
    /// Text; what an output may dictionary-encode.
    Text,
}

/// One cell, borrowed from a record while it is written.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// Does not apply to this I/O: an empty cell, never a fake 0.
    Empty,
    U64(u64),
    I64(i64),
    Str(&'a str),
    /// A computed label (rare: unknown opcodes, chain gaps).
    String(String),
    /// `0x1f`: NVMe status fields.
    Hex(u64),
    /// A prefix and a number, `nvme3`: rendered without allocating.
    Named(&'static str, u64),
    /// A kernel `dev_t` (major << 20 | minor) as `major:minor`.
    Dev(u32),
    /// A monotonic time that the sink renders as wall-clock time.
    Time(u64),
}

/// A label that is usually a static name and sometimes computed (`0x1f`).
impl From<std::borrow::Cow<'static, str>> for Value<'static> {
    fn from(s: std::borrow::Cow<'static, str>) -> Self {
        match s {
            std::borrow::Cow::Borrowed(s) => Value::Str(s),
            std::borrow::Cow::Owned(s) => Value::String(s),
        }
    }
}

impl Value<'_> {
    /// The value as a latency, for histograms: `None` when empty, negative or text.
    pub fn as_ns(&self) -> Option<u64> {
        match *self {
            Value::U64(v) => Some(v),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Append the value's text (the CSV cell, the stat label). `Time` needs a clock
    /// and renders as its raw ns here; sinks render it themselves.
    pub fn write_text(&self, out: &mut String) {
        self.render(out)
    }

    /// [`write_text`](Value::write_text) into bytes: what the CSV sink renders with, as
    /// it needs no UTF-8 check per number.
    pub fn write_bytes(&self, out: &mut Vec<u8>) {
        self.render(out)
    }

    /// The one rendering of a value, into either kind of buffer.
    #[inline(always)]
    pub(crate) fn render<O: TextOut>(&self, out: &mut O) {
        match self {
            Value::Empty => {}
            Value::U64(v) | Value::Time(v) => out.u64(*v),
            Value::I64(v) => {
                if *v < 0 {
                    out.str("-");
                }
                out.u64(v.unsigned_abs());
            }
            Value::Str(s) => out.str(s),
            Value::String(s) => out.str(s),
            Value::Hex(v) => out.hex(*v),
            Value::Named(p, v) => {
                out.str(p);
                out.u64(*v);
            }
            Value::Dev(d) => {
                out.u64((*d >> 20) as u64);
                out.str(":");
                out.u64((*d & 0xfffff) as u64);
            }
        }
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        self.write_text(&mut s);
        s
    }
}

/// '0' in every byte: digit values (0–9) plus this are their ASCII.
const ASCII_ZEROS: u64 = 0x3030_3030_3030_3030;

/// `v` < 10^8 as its eight decimal digit values, the most significant in the lowest
/// byte (so the word's little-endian bytes read in order). All digits are computed at
/// once in lanes of one register: no loop, no table, no division instruction.
#[inline(always)]
fn digit_lanes(v: u32) -> u64 {
    let v = v as u64;
    // Two 4-digit halves in 32-bit lanes, the high half in the low lane.
    let x = (v / 10_000) | ((v % 10_000) << 32);
    // Per lane, / 100 by multiply and shift (exact below 43,699; lanes hold < 10^4, and
    // no product reaches the next lane): 2-digit values in 16-bit lanes.
    let q = ((x * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let y = q | ((x - q * 100) << 16);
    // Per lane, / 10 the same way (exact below 179; lanes hold < 100): one digit a byte.
    let t = ((y * 103) >> 10) & 0x000f_000f_000f_000f;
    t | ((y - t * 10) << 8)
}

/// `v` < 10^8 as exactly eight ASCII digits, in order in the word's little-endian bytes.
#[inline(always)]
pub(crate) fn eight_ascii(v: u32) -> u64 {
    digit_lanes(v) | ASCII_ZEROS
}

/// `v` < 10^4 as its four decimal digit values, as [`digit_lanes`] does eight.
#[inline(always)]
fn digit_lanes4(v: u32) -> u32 {
    // / 100 by multiply and shift, exact below 43,699.
    let q = (v * 5_243) >> 19;
    let y = q | ((v - q * 100) << 16);
    let t = ((y * 103) >> 10) & 0x000f_000f;
    t | ((y - t * 10) << 8)
}

/// `v` < 10^8 as ASCII in a word's low bytes, without leading zeros, and how many
/// bytes that is (1 for 0).
#[inline(always)]
fn short_word(v: u32) -> (u64, usize) {
    // The count by branches, not from the digits: a predicted branch lets the next
    // cell's store go ahead while these digits are still being computed. Short
    // numbers (errors, depths, sizes) take the shorter paths.
    if v < 10_000 {
        let n = if v < 100 {
            if v < 10 {
                return (v as u64 | 0x30, 1);
            }
            2
        } else if v < 1_000 {
            3
        } else {
            4
        };
        let d = (digit_lanes4(v) | 0x3030_3030) >> ((4 - n) * 8);
        return (d as u64, n);
    }
    let n = if v < 1_000_000 {
        if v < 100_000 {
            5
        } else {
            6
        }
    } else if v < 10_000_000 {
        7
    } else {
        8
    };
    ((digit_lanes(v) >> ((8 - n) * 8)) | ASCII_ZEROS, n)
}

/// `v`'s decimal digits as words: the first (1–8 digits) and up to two more of
/// exactly eight.
#[inline(always)]
pub(crate) fn u64_words(v: u64) -> ((u64, usize), [u64; 2], usize) {
    const E8: u64 = 100_000_000;
    if v < E8 {
        (short_word(v as u32), [0; 2], 0)
    } else if v < E8 * E8 {
        let lo = eight_ascii((v % E8) as u32);
        (short_word((v / E8) as u32), [lo, 0], 1)
    } else {
        let (hi, rest) = (v / (E8 * E8), v % (E8 * E8));
        let mid = eight_ascii((rest / E8) as u32);
        let lo = eight_ascii((rest % E8) as u32);
        (short_word(hi as u32), [mid, lo], 2)
    }
}

/// Decimal digits without `fmt`: stat labels and report cells.
pub fn push_u64(out: &mut String, v: u64) {
    let mut b = [0u8; 24];
    let ((first, n), full, k) = u64_words(v);
    b[..8].copy_from_slice(&first.to_le_bytes());
    for (i, w) in full[..k].iter().enumerate() {
        b[n + 8 * i..n + 8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    // The bytes are ASCII digits only.
    out.push_str(std::str::from_utf8(&b[..n + 8 * k]).unwrap_or("0"));
}

/// [`push_u64`] into bytes ([`Value::write_bytes`]; the CSV sink's rows store their
/// words themselves, see `CsvRow`).
#[inline]
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    let ((first, n), full, k) = u64_words(v);
    let len = out.len();
    out.extend_from_slice(&first.to_le_bytes());
    out.truncate(len + n);
    for w in &full[..k] {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// Where [`Value`]s render: text (stat labels), bytes, or a CSV row.
pub(crate) trait TextOut {
    fn str(&mut self, s: &str);
    fn u64(&mut self, v: u64);
    /// `0x1f`.
    fn hex(&mut self, v: u64);
}

impl TextOut for String {
    #[inline]
    fn str(&mut self, s: &str) {
        self.push_str(s)
    }
    #[inline]
    fn u64(&mut self, v: u64) {
        push_u64(self, v)
    }
    fn hex(&mut self, v: u64) {
        let _ = write!(self, "{v:#x}");
    }
}

impl TextOut for Vec<u8> {
    #[inline]
    fn str(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes())
    }
    #[inline]
    fn u64(&mut self, v: u64) {
        put_u64(self, v)
    }
    fn hex(&mut self, v: u64) {
        let _ = std::io::Write::write_fmt(self, format_args!("{v:#x}"));
    }
}

/// One column of a record type `R`.
pub struct Column<R> {
    pub name: &'static str,
    pub role: Role,
    pub kind: Kind,
    pub get: fn(&R) -> Value<'_>,
}

/// A column, for tables written as one line per column.
pub const fn col<R>(
    name: &'static str,
    role: Role,
    kind: Kind,
    get: fn(&R) -> Value<'_>,
) -> Column<R> {
    Column {
        name,
        role,
        kind,
        get,
    }
}

/// A number that may not apply: an empty cell, never a fake 0.
pub fn opt(v: Option<u64>) -> Value<'static> {
    v.map_or(Value::Empty, Value::U64)
}

/// Implement [`Tabled`] for a record type from its column table:
/// `tabled!(BlockRecord, "block", COLUMNS, |r| r.start_ns, |r| r.status, |r, s| r.status = s);`
/// (`tabled!(R, "name", version = 2, COLUMNS, …)` once the table's version is raised).
#[macro_export]
macro_rules! tabled {
    ($ty:ty, $profile:literal, $(version = $version:literal,)? $columns:expr,
     |$r:ident| $start:expr, |$s:ident| $status:expr, |$w:ident, $v:ident| $set:expr) => {
        impl $crate::record::Tabled for $ty {
            const PROFILE: &'static str = $profile;
            $(const VERSION: u32 = $version;)?
            const COLUMNS: &'static [$crate::record::Column<Self>] = $columns;
            fn table() -> &'static $crate::record::Schema {
                static S: std::sync::OnceLock<$crate::record::Schema> = std::sync::OnceLock::new();
                $crate::record::schema_cell::<Self>(&S)
            }
            fn first_ns(&self) -> u64 {
                let $r = self;
                $start
            }
            fn outcome(&self) -> $crate::record::Status {
                let $s = self;
                $status
            }
            fn set_outcome(&mut self, $v: $crate::record::Status) {
                let $w = self;
                $set;
            }
        }
    };
}

// Not derived: a derive would ask `R: Copy`, and only the fn pointer is copied.
impl<R> Clone for Column<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Column<R> {}

/// A column without its accessor: what outputs and readers need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnDef {
    pub name: &'static str,
    pub role: Role,
    pub kind: Kind,
}

/// The derived, type-erased view of a column table.
#[derive(Debug)]
pub struct Schema {
    /// The profile whose records these are.
    pub profile: &'static str,
    /// Raised when a column changes meaning or a column readers need is renamed or
    /// removed; adding a column keeps it (readers take files with more or fewer
    /// columns, see [`Schema::fit`]). Files carry it (`ntprof.schema_version`).
    pub version: u32,
    pub columns: Vec<ColumnDef>,
    /// Indexes of the `Label` columns, in table order.
    pub labels: Vec<usize>,
    /// Indexes of the `Label` and `Place` columns, in table order: the labels of
    /// metrics (bounded: never a column that differs per I/O).
    pub metric_labels: Vec<usize>,
    /// Indexes of the `Stage` and `Total` columns, in table order.
    pub stages: Vec<usize>,
    /// Per stage (indexed like `stages`): the stages it is the sum of, in the order an
    /// I/O passes through them; empty for a stage that is not a total.
    pub parts: Vec<Vec<usize>>,
    pub status: Option<usize>,
}

impl Schema {
    pub fn of<R>(profile: &'static str, version: u32, cols: &[Column<R>]) -> Schema {
        let columns: Vec<ColumnDef> = cols
            .iter()
            .map(|c| ColumnDef {
                name: c.name,
                role: c.role,
                kind: c.kind,
            })
            .collect();
        let with = |r: Role| -> Vec<usize> {
            columns
                .iter()
                .enumerate()
                .filter(|(_, c)| c.role == r)
                .map(|(i, _)| i)
                .collect()
        };
        let stages: Vec<usize> = columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.role.is_stage())
            .map(|(i, _)| i)
            .collect();
        // A static table's mistake: every profile's schema is built by its tests.
        let parts = stages
            .iter()
            .map(|&i| match columns[i].role {
                Role::Total(names) => names
                    .iter()
                    .map(|n| {
                        stages
                            .iter()
                            .position(|&j| columns[j].name == *n && j != i)
                            .unwrap_or_else(|| {
                                panic!(
                                    "{profile}: total {} names {n}, not another stage",
                                    columns[i].name
                                )
                            })
                    })
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        let s = Schema {
            profile,
            version,
            labels: with(Role::Label),
            metric_labels: columns
                .iter()
                .enumerate()
                .filter(|(_, c)| matches!(c.role, Role::Label | Role::Place))
                .map(|(i, _)| i)
                .collect(),
            stages,
            parts,
            status: with(Role::Status).first().copied(),
            columns,
        };
        for k in 0..s.stages.len() {
            // Also refuses a total that contains itself through another.
            let _ = s.leaves(k);
        }
        s
    }

    /// How well a file's header fits this table: the columns both have, or `None` when
    /// the file lacks a column that says what a row is (a label, the status) or has
    /// none of the stages. Columns added to the table since the file was written, or
    /// columns the file has that this table does not know, only lower the count.
    pub fn fit(&self, header: &[&str]) -> Option<usize> {
        let has = |i: usize| header.contains(&self.columns[i].name);
        if !self.labels.iter().chain(&self.status).all(|&i| has(i))
            || !self.stages.iter().any(|&i| has(i))
        {
            return None;
        }
        Some((0..self.columns.len()).filter(|&i| has(i)).count())
    }

    /// For each column of this table, where it is in `header` (`None`: not there).
    pub fn project(&self, header: &[&str]) -> Vec<Option<usize>> {
        self.columns
            .iter()
            .map(|c| header.iter().position(|h| *h == c.name))
            .collect()
    }

    /// Whether stage `k` (an index into `stages`) is a total of others.
    pub fn is_total(&self, k: usize) -> bool {
        !self.parts[k].is_empty()
    }

    /// The stages that add up to stage `k`, totals among its parts replaced by their
    /// own parts, in the order an I/O passes through them; `[k]` for a stage that is
    /// not a total.
    pub fn leaves(&self, k: usize) -> Vec<usize> {
        fn walk(s: &Schema, k: usize, depth: usize, out: &mut Vec<usize>) {
            assert!(
                depth <= s.stages.len(),
                "{}: a total that is a part of itself",
                s.profile
            );
            if s.parts[k].is_empty() {
                out.push(k);
            }
            for &p in &s.parts[k] {
                walk(s, p, depth + 1, out);
            }
        }
        let mut out = Vec::new();
        walk(self, k, 0, &mut out);
        out
    }

    /// The totals that are no other total's part: each spans everything its side of
    /// the I/O saw, in table order.
    pub fn top_totals(&self) -> Vec<usize> {
        (0..self.stages.len())
            .filter(|&k| self.is_total(k) && !self.parts.iter().any(|p| p.contains(&k)))
            .collect()
    }

    /// Every stage that is not a total, in the order an I/O passes through them: the
    /// leaves of each top total in turn, then any stage no total holds (table order).
    pub fn passage(&self) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for t in self.top_totals() {
            for k in self.leaves(t) {
                if !out.contains(&k) {
                    out.push(k);
                }
            }
        }
        for k in 0..self.stages.len() {
            if !self.is_total(k) && !out.contains(&k) {
                out.push(k);
            }
        }
        out
    }

    /// What an I/O took as a whole, as far as this record knows: the first top total
    /// with a value, else the largest stage known (`values` indexed like `stages`).
    pub fn whole(&self, values: &[Option<u64>]) -> Option<u64> {
        self.top_totals()
            .into_iter()
            .find_map(|k| values.get(k).copied().flatten())
            .or_else(|| values.iter().flatten().copied().max())
    }

    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.columns.iter().map(|c| c.name)
    }

    pub fn position(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }

    /// Stage names without the `_ns` unit, as tables and plots show them.
    pub fn stage_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.stages
            .iter()
            .map(|&i| self.columns[i].name.trim_end_matches("_ns"))
    }

    pub fn label_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.labels.iter().map(|&i| self.columns[i].name)
    }
}

/// A finished (or given-up) I/O, as every sink sees it.
pub trait IoRecord {
    fn schema(&self) -> &'static Schema;
    /// Column `i` of the schema.
    fn value(&self, i: usize) -> Value<'_>;
    /// Start of the I/O on the recording clock (ns).
    fn start_ns(&self) -> u64;
    fn status(&self) -> Status;
    /// Relabel the record (the pipeline marks an I/O a missing sample cut `dropped`).
    fn set_status(&mut self, s: Status);
    /// Every cell of the row into `row`, in column order: one call per row, where
    /// [`value`](IoRecord::value) is one dynamic call per column.
    fn write_csv(&self, row: &mut CsvRow<'_>) {
        for i in 0..self.schema().columns.len() {
            row.cell(i == 0, self.value(i));
        }
    }
    /// What the stat table takes from the row, in one call: the labels as its group key
    /// (see [`label_key`]) into `key`, and every stage's latency (as
    /// [`Value::as_ns`], in the schema's stage order) into `ns`.
    fn stat_cells(&self, key: &mut Vec<u8>, ns: &mut Vec<Option<u64>>) {
        let s = self.schema();
        for &i in &s.labels {
            label_key(key, &self.value(i));
        }
        ns.extend(s.stages.iter().map(|&i| self.value(i).as_ns()));
    }
}

/// One label of a stat group's key: its text, then its length in 4 bytes, so that no
/// two label lists make the same key (read from the end, the lengths split it back).
#[inline(always)]
pub fn label_key(key: &mut Vec<u8>, v: &Value<'_>) {
    let start = key.len();
    // Labels are text, nearly always `Str`: copied here directly. Through `render` alone
    // a live `stat` took ≈ 29 more instructions per record (callgrind, 2 labels).
    match v {
        Value::Str(s) => key.extend_from_slice(s.as_bytes()),
        v => v.write_bytes(key),
    }
    let len = u32::try_from(key.len() - start).unwrap_or(u32::MAX);
    key.extend_from_slice(&len.to_le_bytes());
}

/// A record type with a static column table: implement this and get [`IoRecord`].
pub trait Tabled: Sized + 'static {
    const PROFILE: &'static str;
    /// [`Schema::version`].
    const VERSION: u32 = 1;
    const COLUMNS: &'static [Column<Self>];
    /// The schema, built once from `COLUMNS` (see [`schema_cell`]).
    fn table() -> &'static Schema;
    /// [`IoRecord::start_ns`].
    fn first_ns(&self) -> u64;
    /// [`IoRecord::status`].
    fn outcome(&self) -> Status;
    /// [`IoRecord::set_status`].
    fn set_outcome(&mut self, s: Status);
}

/// Build a `Tabled::table` once: `fn table() -> &'static Schema { static S:
/// OnceLock<Schema> = OnceLock::new(); schema_cell::<Self>(&S) }`.
pub fn schema_cell<R: Tabled>(cell: &'static OnceLock<Schema>) -> &'static Schema {
    cell.get_or_init(|| Schema::of(R::PROFILE, R::VERSION, R::COLUMNS))
}

impl<R: Tabled> IoRecord for R {
    fn schema(&self) -> &'static Schema {
        R::table()
    }
    #[inline]
    fn value(&self, i: usize) -> Value<'_> {
        match R::COLUMNS.get(i) {
            Some(c) => (c.get)(self),
            None => Value::Empty,
        }
    }
    fn start_ns(&self) -> u64 {
        self.first_ns()
    }
    fn status(&self) -> Status {
        self.outcome()
    }
    fn set_status(&mut self, s: Status) {
        self.set_outcome(s)
    }
    /// The column table unrolled: `R::COLUMNS[i]` at a constant `i` is a known function,
    /// so each getter is inlined and its `Value` goes straight into the cell's rendering
    /// (a loop over the table calls each getter through its pointer, and the 32-byte
    /// `Value` comes back through memory, read at once: a store-forwarding stall per
    /// cell).
    fn write_csv(&self, row: &mut CsvRow<'_>) {
        macro_rules! cells {
            ($row:ident: $($i:literal)*) => {$(
                if $i < R::COLUMNS.len() {
                    $row.cell($i == 0, (R::COLUMNS[$i].get)(self));
                }
            )*};
        }
        let mut w = row.split();
        cells!(w: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
        for c in R::COLUMNS.iter().skip(32) {
            w.cell(false, (c.get)(self));
        }
        let end = w.end();
        row.resume(end);
    }
    /// The column table unrolled, as in `write_csv`: each column's role is a constant,
    /// so only the labels' and stages' getters remain, inlined, with no dynamic
    /// `value(i)` per cell (a fifth of the table's instructions per record).
    fn stat_cells(&self, key: &mut Vec<u8>, ns: &mut Vec<Option<u64>>) {
        macro_rules! cells {
            ($($i:literal)*) => {$(
                if $i < R::COLUMNS.len() {
                    cell(&R::COLUMNS[$i], self, key, ns);
                }
            )*};
        }
        #[inline(always)]
        fn cell<R>(c: &Column<R>, r: &R, key: &mut Vec<u8>, ns: &mut Vec<Option<u64>>) {
            match c.role {
                Role::Label => label_key(key, &(c.get)(r)),
                Role::Stage | Role::Total(_) => ns.push((c.get)(r).as_ns()),
                _ => {}
            }
        }
        cells!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31);
        for c in R::COLUMNS.iter().skip(32) {
            cell(c, self, key, ns);
        }
    }
}

/// Why a row read back from a file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    #[error("column {column} holds `{value}`: expected {expected}")]
    Bad {
        column: &'static str,
        value: String,
        expected: &'static str,
    },
    #[error("no column {column}")]
    Missing { column: &'static str },
}

/// A row read back from a file (CSV, Parquet), addressed by the schema's column names,
/// with the parsing every reader shares.
pub struct Row<'a> {
    pub schema: &'static Schema,
    pub cells: &'a [&'a str],
}

impl<'a> Row<'a> {
    /// The cell of a column, `""` when empty.
    pub fn text(&self, column: &'static str) -> Result<&'a str, RowError> {
        self.schema
            .position(column)
            .and_then(|i| self.cells.get(i).copied())
            .ok_or(RowError::Missing { column })
    }

    /// A number, `None` when the cell is empty.
    pub fn num<T: std::str::FromStr>(&self, column: &'static str) -> Result<Option<T>, RowError> {
        let v = self.text(column)?;
        if v.is_empty() {
            return Ok(None);
        }
        v.parse().map(Some).map_err(|_| bad(column, v, "a number"))
    }

    /// A number that must be there.
    pub fn req<T: std::str::FromStr>(&self, column: &'static str) -> Result<T, RowError> {
        let v = self.text(column)?;
        v.parse().map_err(|_| bad(column, v, "a number"))
    }

    /// A `0x…` hex number, `None` when empty.
    pub fn hex(&self, column: &'static str) -> Result<Option<u64>, RowError> {
        let v = self.text(column)?;
        if v.is_empty() {
            return Ok(None);
        }
        v.strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .map(Some)
            .ok_or_else(|| bad(column, v, "0xNN"))
    }

    pub fn status(&self) -> Result<Status, RowError> {
        let Some(i) = self.schema.status else {
            return Ok(Status::Ok);
        };
        let column = self.schema.columns[i].name;
        let v = self.cells.get(i).copied().unwrap_or("");
        Status::parse(v).ok_or_else(|| bad(column, v, "ok, error or incomplete"))
    }

    /// Stage `k` of the schema as ns: `None` when empty or negative (a signed stage
    /// such as network time can be; histograms skip it).
    pub fn stage(&self, k: usize) -> Result<Option<u64>, RowError> {
        let i = self.schema.stages[k];
        let column = self.schema.columns[i].name;
        let v = self.cells.get(i).copied().unwrap_or("");
        if v.is_empty() {
            return Ok(None);
        }
        if let Some(neg) = v.strip_prefix('-') {
            return match neg.parse::<u64>() {
                Ok(_) => Ok(None),
                Err(_) => Err(bad(column, v, "a number of ns")),
            };
        }
        v.parse()
            .map(Some)
            .map_err(|_| bad(column, v, "a number of ns"))
    }
}

pub fn bad(column: &'static str, value: &str, expected: &'static str) -> RowError {
    RowError::Bad {
        column,
        value: value.to_string(),
        expected,
    }
}

/// Losses and oddities a correlator saw: shown in every output, never silent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counters {
    /// Completions whose start was never seen (tracing began mid-I/O, or lost samples).
    pub unmatched: u64,
    /// I/Os given up: evicted to bound memory or still in flight at the end.
    pub incomplete: u64,
    /// I/Os a missing sample cut (status `dropped`): one of their events was counted by
    /// the kernel but never arrived.
    pub cut: u64,
    /// I/Os currently in flight.
    pub in_flight: u64,
    /// Partial completions merged into one I/O.
    pub partial: u64,
    /// Requests seen issued or inserted again before completing (requeues).
    pub requeued: u64,
    /// Completions paired with one of several in-flight requests that shared their
    /// key (the tracepoints carry no request id): the pairing rule chose.
    pub ambiguous: u64,
    /// Queued requests the scheduler merged into another request (no row of their own).
    pub merged: u64,
    /// Data-less writes that only carried a cache flush (what `fsync` sends a disk with
    /// a write cache): the kernel completes them without issuing them, once the flush
    /// request it issues in their place (a `flush` row) is done. No row of their own;
    /// the kernel's disk statistics count them as writes.
    pub preflushes: u64,
    /// Writes with FUA on a disk with a write cache and no FUA: after their data (their
    /// row) and a flush request (a `flush` row), the kernel ends them with a second
    /// completion, without data, that is not an I/O of its own.
    pub postflushes: u64,
    /// Events of I/Os a change of the sampling rate (`--max-rate`) left out of the
    /// sample: parts of I/Os whose other events the kernel filter had already dropped.
    pub resampled: u64,
}

/// Size classes as nvme_bpf and the original ntprof group them.
pub fn size_class(bytes: u64) -> &'static str {
    match bytes {
        0 => "0",
        1..=4096 => "<=4k",
        4097..=8192 => "<=8k",
        8193..=16384 => "<=16k",
        16385..=32768 => "<=32k",
        32769..=65536 => "<=64k",
        65537..=131072 => "<=128k",
        131073..=262144 => "<=256k",
        262145..=1048576 => "<=1m",
        _ => ">1m",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct R {
        a: u64,
        b: Option<i64>,
    }
    static COLS: &[Column<R>] = &[
        Column {
            name: "start_time",
            role: Role::StartTime,
            kind: Kind::Timestamp,
            get: |r| Value::Time(r.a),
        },
        Column {
            name: "dev",
            role: Role::Label,
            kind: Kind::Text,
            get: |_| Value::Dev((259 << 20) | 3),
        },
        Column {
            name: "x_ns",
            role: Role::Stage,
            kind: Kind::I64,
            get: |r| r.b.map_or(Value::Empty, Value::I64),
        },
        Column {
            name: "status",
            role: Role::Status,
            kind: Kind::Text,
            get: |_| Value::Str("ok"),
        },
    ];
    impl Tabled for R {
        const PROFILE: &'static str = "test";
        const COLUMNS: &'static [Column<R>] = COLS;
        fn table() -> &'static Schema {
            static S: OnceLock<Schema> = OnceLock::new();
            schema_cell::<Self>(&S)
        }
        fn first_ns(&self) -> u64 {
            self.a
        }
        fn outcome(&self) -> Status {
            Status::Ok
        }
        fn set_outcome(&mut self, _: Status) {}
    }

    #[test]
    fn schema_is_derived_from_the_table() {
        let r = R { a: 5, b: Some(-3) };
        let s = r.schema();
        assert_eq!(s.labels, [1]);
        assert_eq!(s.stages, [2]);
        assert_eq!(s.status, Some(3));
        assert_eq!(s.stage_names().collect::<Vec<_>>(), ["x"]);
        assert_eq!(r.value(1).to_text(), "259:3");
        assert_eq!(r.value(2).to_text(), "-3");
        assert_eq!(r.value(2).as_ns(), None);
        assert_eq!(r.value(9), Value::Empty);
    }

    #[test]
    fn bytes_render_integers_as_fmt_does() {
        // Every value of the short paths (below 10^4, and past it into the 8-digit one).
        let mut vals: Vec<u64> = (0..=100_000).collect();
        vals.extend([u64::MAX, u64::MAX - 1]);
        for p in 1..20 {
            let t = 10u64.pow(p);
            vals.extend([t - 1, t, t + 1, t + t / 3]);
        }
        let mut out = b"x".to_vec();
        let mut want = "x".to_string();
        for v in vals {
            put_u64(&mut out, v);
            out.push(b',');
            want.push_str(&format!("{v},"));
        }
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn values_render_without_fmt_as_with_it() {
        let mut rng = fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15);
        let mut nums = vec![0u64, 7, 9, 10, 99, 100, 101, 999, 1000, 12345, u64::MAX];
        nums.extend((1..20).map(|p| 10u64.pow(p)));
        nums.extend((1..20).map(|p| 10u64.pow(p) - 1));
        nums.extend((0..2000).map(|_| {
            let x = rng.u64(..);
            x >> (x % 64)
        }));
        for v in nums {
            assert_eq!(Value::U64(v).to_text(), v.to_string());
            let mut b = Vec::new();
            put_u64(&mut b, v);
            assert_eq!(b, v.to_string().as_bytes());
        }
        assert_eq!(Value::I64(i64::MIN).to_text(), i64::MIN.to_string());
        assert_eq!(Value::Hex(0x4002).to_text(), "0x4002");
        assert_eq!(Value::Hex(0).to_text(), "0x0");
        assert_eq!(Value::Named("nvme", 12).to_text(), "nvme12");
        assert_eq!(Value::Empty.to_text(), "");
        // Bytes and text are the same rendering.
        for v in [
            Value::Empty,
            Value::U64(1234567),
            Value::I64(-42),
            Value::I64(i64::MIN),
            Value::Str("loop0"),
            Value::String("x,y".into()),
            Value::Hex(0x1f),
            Value::Named("nvme", 3),
            Value::Dev((259 << 20) | 7),
            Value::Time(5),
        ] {
            let mut b = Vec::new();
            v.write_bytes(&mut b);
            assert_eq!(b, v.to_text().as_bytes(), "{v:?}");
        }
    }

    #[test]
    fn rows_parse_by_column_name() {
        let s = R::table();
        let cells = ["2026-01-01", "7:0", "-12", "ok"];
        let row = Row {
            schema: s,
            cells: &cells,
        };
        assert_eq!(row.stage(0), Ok(None));
        assert_eq!(row.status(), Ok(Status::Ok));
        assert_eq!(row.text("dev"), Ok("7:0"));
        assert!(row.num::<u64>("dev").is_err());
        assert_eq!(row.text("nope"), Err(RowError::Missing { column: "nope" }));
        let cells = ["", "", "x", "maybe"];
        let row = Row {
            schema: s,
            cells: &cells,
        };
        assert!(row.stage(0).unwrap_err().to_string().contains("x_ns"));
        assert!(row.status().is_err());
    }
}
