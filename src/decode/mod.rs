//! Stage 3: turn raw tracepoint records into typed events, through layouts bound from
//! the format files at start-up.
//!
//! No I/O and no allocation per sample: a [`Decoder`] is built once from a tracefs tree
//! for the events a profile needs, then `decode` is a dispatch on `common_type` plus
//! offset reads. It must not know about perf rings or about correlation.

pub mod block;
pub mod field;
pub mod nvme;
pub mod nvme_tcp;
pub mod nvmet;

pub use block::{BlockEvent, BlockKind, Op};
pub use field::{FieldReader, Want};

use crate::tracefs::{Tracefs, TracefsError};

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("event {event} has no field `{field}`: this kernel's layout differs from what ntprof-perf knows")]
    MissingField { event: String, field: String },
    #[error("event {event} field `{field}`: expected {expected}, found {found}")]
    FieldKind {
        event: String,
        field: String,
        expected: String,
        found: String,
    },
    #[error("event {event}: record of {have} bytes is shorter than its layout ({need} bytes)")]
    Truncated {
        event: &'static str,
        need: usize,
        have: usize,
    },
    #[error("record of {have} bytes is too short to hold common_type")]
    NoHeader { have: usize },
    #[error(transparent)]
    Tracefs(#[from] TracefsError),
}

/// A decoded event with the sample's time (ns on the recording clock) and CPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub time: u64,
    pub cpu: u32,
    pub kind: EventKind,
}

/// Every event kind any profile understands.
#[derive(Debug, Clone, PartialEq)]
pub enum EventKind {
    Block(BlockEvent),
    /// Host NVMe driver (`nvme:*`).
    Nvme(nvme::NvmeEvent),
    /// NVMe target (`nvmet:*`).
    Nvmet(nvme::NvmeEvent),
    /// NVMe/TCP host (`nvme_tcp:*`) or target (`nvmet_tcp:*`), kernel_change/ patch.
    NvmeTcp(nvme_tcp::TcpEvent),
}

/// What a tracepoint id decodes into.
#[derive(Debug, Clone)]
enum Slot {
    Block(block::BlockLayout),
    Nvme(nvme::NvmeLayout),
    Nvmet(nvmet::NvmetLayout),
    NvmeTcp(nvme_tcp::TcpLayout),
}

/// The layouts of every event a run decodes, dispatched by `common_type`.
#[derive(Debug, Clone, Default)]
pub struct Decoder {
    // Few events per run: a linear scan over a short Vec beats hashing.
    slots: Vec<(u16, Slot)>,
}

/// The events a decoder knows, by name, for opening perf events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundEvent {
    pub name: String,
    pub id: u64,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Bind `system:event` from `tfs`. Unknown names are a programming error in a
    /// profile table and reported as a missing event.
    pub fn add(
        &mut self,
        tfs: &Tracefs,
        system: &str,
        event: &str,
    ) -> Result<BoundEvent, DecodeError> {
        let fmt = tfs.event(system, event)?;
        let full = format!("{system}:{event}");
        let slot = match (system, event) {
            ("block", e) => match BlockKind::from_event(e) {
                Some(kind) => Slot::Block(block::BlockLayout::bind(&fmt, kind)?),
                None => return Err(unknown(system, event)),
            },
            ("nvme", e) => match nvme::NvmeLayout::bind(&fmt, e) {
                Some(l) => Slot::Nvme(l?),
                None => return Err(unknown(system, event)),
            },
            ("nvmet", e) => match nvmet::NvmetLayout::bind(&fmt, e) {
                Some(l) => Slot::Nvmet(l?),
                None => return Err(unknown(system, event)),
            },
            ("nvme_tcp" | "nvmet_tcp", e) => match nvme_tcp::TcpLayout::bind(&fmt, system, e) {
                Some(l) => Slot::NvmeTcp(l?),
                None => return Err(unknown(system, event)),
            },
            _ => return Err(unknown(system, event)),
        };
        // `common_type` is a u16 in every record; ids above that cannot be dispatched.
        let id = u16::try_from(fmt.id).map_err(|_| DecodeError::FieldKind {
            event: full.clone(),
            field: "common_type".into(),
            expected: "an event id below 65536".into(),
            found: fmt.id.to_string(),
        })?;
        self.slots.retain(|(i, _)| *i != id);
        self.slots.push((id, slot));
        Ok(BoundEvent {
            name: full,
            id: fmt.id,
        })
    }

    /// Decode one raw record. `Ok(None)` for an event this decoder was not built for.
    #[inline]
    pub fn decode(&self, raw: &[u8], time: u64, cpu: u32) -> Result<Option<Event>, DecodeError> {
        let id = match raw {
            [a, b, ..] => u16::from_le_bytes([*a, *b]),
            _ => return Err(DecodeError::NoHeader { have: raw.len() }),
        };
        let Some((_, slot)) = self.slots.iter().find(|(i, _)| *i == id) else {
            return Ok(None);
        };
        let kind = match slot {
            Slot::Block(l) => EventKind::Block(l.decode(raw)?),
            Slot::Nvme(l) => EventKind::Nvme(l.decode(raw)?),
            Slot::Nvmet(l) => EventKind::Nvmet(l.decode(raw)?),
            Slot::NvmeTcp(l) => EventKind::NvmeTcp(l.decode(raw)?),
        };
        Ok(Some(Event { time, cpu, kind }))
    }
}

fn unknown(system: &str, event: &str) -> DecodeError {
    DecodeError::MissingField {
        event: format!("{system}:{event}"),
        field: "(no decoder for this event in ntprof-perf)".into(),
    }
}
