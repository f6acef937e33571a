//! The bio events: `block_bio_queue`, `block_bio_complete` and `block_bio_remap`.
//!
//! The kernel traces a bio's completion only where no request carries it: on
//! bio-based devices (device-mapper, md, zram, …). A request-based disk's bios
//! complete inside `block_rq_complete` (the block profile's event).

use crate::decode::{unknown, DecodeError, FieldReader, Layout, Malformed, Want};
use crate::profile::shared::block_events::Op;
use crate::tracefs::EventFormat;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BioKind {
    Queue,
    Complete,
    /// A stacked driver handed the bio (or its clone) to the device below.
    Remap,
}

impl BioKind {
    fn event_name(self) -> &'static str {
        match self {
            BioKind::Queue => "block:block_bio_queue",
            BioKind::Complete => "block:block_bio_complete",
            BioKind::Remap => "block:block_bio_remap",
        }
    }
}

/// One bio event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BioEvent {
    pub kind: BioKind,
    /// Kernel `dev_t` encoding. For a remap, the device below.
    pub dev: u32,
    pub sector: u64,
    pub nr_sector: u32,
    pub op: Op,
    /// Completion status (negative errno); 0 for other kinds.
    pub error: i32,
    /// Remap only: where the bio was before (the device above).
    pub old_dev: u32,
    pub old_sector: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct BioLayout {
    kind: BioKind,
    dev: FieldReader,
    sector: FieldReader,
    nr_sector: FieldReader,
    rwbs: FieldReader,
    error: Option<FieldReader>,
    old: Option<(FieldReader, FieldReader)>,
    need: usize,
}

impl BioLayout {
    pub fn bind(fmt: &EventFormat, kind: BioKind) -> Result<BioLayout, DecodeError> {
        let ev = kind.event_name();
        let dev = FieldReader::bind(fmt, ev, "dev", Want::Int)?;
        let sector = FieldReader::bind(fmt, ev, "sector", Want::Int)?;
        let nr_sector = FieldReader::bind(fmt, ev, "nr_sector", Want::Int)?;
        let rwbs = FieldReader::bind(fmt, ev, "rwbs", Want::CharArray)?;
        let error = match kind {
            BioKind::Complete => Some(FieldReader::bind(fmt, ev, "error", Want::Int)?),
            _ => None,
        };
        let old = match kind {
            BioKind::Remap => Some((
                FieldReader::bind(fmt, ev, "old_dev", Want::Int)?,
                FieldReader::bind(fmt, ev, "old_sector", Want::Int)?,
            )),
            _ => None,
        };
        let need = [Some(dev), Some(sector), Some(nr_sector), Some(rwbs), error]
            .into_iter()
            .flatten()
            .chain(old.iter().flat_map(|(a, b)| [*a, *b]))
            .map(|f| f.end())
            .max()
            .unwrap_or(0);
        Ok(BioLayout {
            kind,
            dev,
            sector,
            nr_sector,
            rwbs,
            error,
            old,
            need,
        })
    }

    #[inline]
    pub fn decode(&self, raw: &[u8]) -> Result<BioEvent, Malformed> {
        Malformed::check_len(raw, self.need, || self.kind.event_name())?;
        let (old_dev, old_sector) = self.old.map_or((0, 0), |(d, s)| (d.u32(raw), s.u64(raw)));
        Ok(BioEvent {
            kind: self.kind,
            dev: self.dev.u32(raw),
            sector: self.sector.u64(raw),
            nr_sector: self.nr_sector.u32(raw),
            op: Op::from_rwbs(self.rwbs.str(raw)),
            error: self.error.map_or(0, |f| f.i64(raw) as i32),
            old_dev,
            old_sector,
        })
    }
}

crate::decode::layout_by_decode!(BioLayout => BioEvent);

/// The layout of one event the bio profile opens.
pub fn layout(
    fmt: &EventFormat,
    system: &str,
    event: &str,
) -> Result<Box<dyn Layout<BioEvent>>, DecodeError> {
    let kind = match (system, event) {
        ("block", "block_bio_queue") => BioKind::Queue,
        ("block", "block_bio_complete") => BioKind::Complete,
        ("block", "block_bio_remap") => BioKind::Remap,
        _ => return Err(unknown(system, event)),
    };
    Ok(Box::new(BioLayout::bind(fmt, kind)?))
}
