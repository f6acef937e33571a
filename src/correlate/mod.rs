//! Stage 5: correlate the time-ordered events of each I/O into one latency record.
//!
//! What is shared by every profile's correlator lives here: the [`Correlator`]
//! contract, the bounded in-flight table ([`inflight`]) and the join of bios waiting
//! for their command ([`biojoin`]). The correlators themselves live with their
//! profile (`profile/<name>/`). A correlator sees events in time order (rare disorder
//! is tolerated and counted), and emits a record when an I/O completes or is given up.
//! It does no I/O of its own.

pub mod biojoin;
pub mod gate;
pub mod inflight;

pub use crate::record::{size_class, Counters, IoRecord, Status};

use crate::decode::Event;
use std::hash::{BuildHasherDefault, Hasher};

/// A profile's correlator.
///
/// Contract: every I/O whose first event was seen comes out exactly once, as a
/// completed record or as an `incomplete` one (in flight at [`Correlator::finish`], or
/// given up to bound memory); a record never invents a stage it did not see (an empty
/// value, never 0); completions it cannot place are counted in `unmatched`, never
/// dropped silently.
pub trait Correlator {
    /// The profile's decoded event type.
    type Event;
    type Record: IoRecord;
    fn on_event(&mut self, ev: &Event<Self::Event>, out: &mut dyn FnMut(Self::Record));
    /// Give up every I/O still in flight (end of run).
    fn finish(&mut self, out: &mut dyn FnMut(Self::Record));
    /// Samples the kernel counted that never arrived ([`Gap`]). A correlator that can
    /// name the I/Os they cut marks them `dropped` (counted in [`Counters::cut`]) and
    /// never pairs them with a later I/O's event, and returns `true`. The default
    /// returns `false`: the pipeline then marks as many given-up records `dropped`.
    fn on_missing(&mut self, _gap: &Gap<'_>) -> bool {
        false
    }
    fn counters(&self) -> Counters;
    /// The gate a rate change works through (`--max-rate`); `None` when this
    /// correlator cannot take a change of rate while running.
    fn gate(&mut self) -> Option<&mut gate::Gate> {
        None
    }
}

/// `n` samples of `event` (`system:name`) that the kernel counted and never wrote (or
/// lost to a full ring), all stamped after `after` and no later than `before`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap<'a> {
    pub event: &'a str,
    pub n: u64,
    pub after: u64,
    pub before: u64,
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
