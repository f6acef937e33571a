//! Stage 5: correlate the time-ordered events of each I/O into one latency record.
//!
//! One file per profile. A correlator sees events in time order (rare disorder is
//! tolerated and counted), keeps in-flight I/Os in bounded maps, and emits a record when
//! an I/O completes or is given up. It does no I/O of its own.

pub mod block;
pub mod merge;
pub mod nvme;
pub mod nvme_tcp;
pub mod nvmet;

use crate::decode::Event;
use std::hash::{BuildHasherDefault, Hasher};

/// One CSV cell, borrowed from a record while it is written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    U64(u64),
    I64(i64),
    Str(&'a str),
    /// A stage that does not apply to this I/O: an empty cell, never a fake 0.
    Empty,
}

impl From<Option<u64>> for Cell<'_> {
    fn from(v: Option<u64>) -> Self {
        v.map_or(Cell::Empty, Cell::U64)
    }
}

/// What happened to an I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Completed with an error status (the record's error column says which).
    Error,
    /// Never completed while we watched: in flight at the end of the run, or evicted to
    /// bound memory. The stages it reached are filled in, the others are empty.
    Incomplete,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Incomplete => "incomplete",
        }
    }
}

/// An event a profile opens; optional ones refine the record when present.
#[derive(Debug, Clone, Copy)]
pub struct EventReq {
    pub system: &'static str,
    pub event: &'static str,
    pub required: bool,
    /// What to do when it is missing (which config option, module, or patch).
    pub hint: &'static str,
}

/// The static description of a profile: its events and its output columns.
#[derive(Debug)]
pub struct ProfileInfo {
    pub name: &'static str,
    pub about: &'static str,
    pub events: &'static [EventReq],
    /// Every CSV column, in order.
    pub columns: &'static [&'static str],
    /// The columns whose values form a stat group, in display order.
    pub group_columns: &'static [&'static str],
    /// The stage columns (all `_ns`), in display order.
    pub stages: &'static [&'static str],
}

/// A finished (or given-up) I/O.
pub trait IoRecord {
    /// Start of the I/O on the recording clock (ns).
    fn start_ns(&self) -> u64;
    /// Every cell after the two time columns, in `ProfileInfo::columns` order.
    fn cells(&self, out: &mut dyn FnMut(Cell<'_>));
    /// A cheap key of the stat group; equal keys must mean equal `group_labels`.
    fn group_key(&self) -> u64;
    fn group_labels(&self) -> Vec<String>;
    /// Stage `i` of `ProfileInfo::stages`, in ns.
    fn stage(&self, i: usize) -> Option<u64>;
    fn status(&self) -> Status;
}

/// Losses and oddities a correlator saw: shown in every output, never silent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Completions whose start was never seen (tracing began mid-I/O, or lost samples).
    pub unmatched: u64,
    /// I/Os given up: evicted to bound memory or still in flight at the end.
    pub incomplete: u64,
    /// I/Os currently in flight.
    pub in_flight: u64,
    /// Partial completions merged into one I/O.
    pub partial: u64,
    /// Requests seen issued or inserted again before completing (requeues).
    pub requeued: u64,
}

/// A profile's correlator.
pub trait Correlator {
    type Record: IoRecord;
    fn info(&self) -> &'static ProfileInfo;
    fn on_event(&mut self, ev: &Event, out: &mut dyn FnMut(Self::Record));
    /// Give up every I/O still in flight (end of run).
    fn finish(&mut self, out: &mut dyn FnMut(Self::Record));
    fn counters(&self) -> Counters;
}

/// FxHash: the in-flight maps are keyed by small integers from the kernel; SipHash's
/// flood resistance buys nothing here and costs a third of the correlator's time.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64)
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64)
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64)
    }
}

pub type FxBuild = BuildHasherDefault<FxHasher>;
pub type FxMap<K, V> = std::collections::HashMap<K, V, FxBuild>;

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
