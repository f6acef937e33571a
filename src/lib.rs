//! ntprof-perf: a user-space latency profiler for NVMe over TCP, NVMe and block devices.
//!
//! The pipeline, one module per stage:
//!
//! ```text
//! tracefs (formats) ─► decode (layouts) ─┐
//! perf (per-CPU rings) ──────────────────┴─► order (merge CPUs by time)
//!     ─► correlate (one record per I/O, per profile) ─► sink (CSV rows, histograms)
//! ```
//!
//! [`pipeline`] drives the stages. A profile ([`profile`]) is a plug-in: one folder
//! with its events, filters, flags, correlator and record; its record's column table
//! ([`record`]) is all the sinks know of it.

// Messages go through `say!`, which cannot panic on a closed standard error.
#![warn(clippy::print_stderr, clippy::print_stdout)]

/// `eprintln!` that never panics: standard error closed (`2>&1 | head`, a log reader
/// that died) or full (its file on a full disk) loses the message, not the run. A panic
/// there would end a `record` before it closed its output, and rows it holds would be
/// lost for a diagnostic no one could read.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod correlate;
pub mod decode;
pub mod defer;
pub mod device;
pub mod filter;
pub mod import;
pub mod order;
pub mod perf;
pub mod pipeline;
pub mod plot;
pub mod profile;
pub mod rate;
pub mod record;
pub mod serve;
pub mod sink;
pub mod split;
pub mod synth;
pub mod tracefs;

#[cfg(test)]
pub(crate) mod testutil;
