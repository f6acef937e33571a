//! Block layer request events: `block_rq_insert`, `block_rq_issue`, `block_rq_requeue`,
//! `block_rq_complete`, and `block_bio_queue`. The nvme and nvme-tcp profiles decode
//! them too, through [`BlockLayout`].

use crate::decode::{DecodeError, FieldReader, Layout, Malformed, Want};
use crate::tracefs::EventFormat;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockKind {
    /// `block_bio_queue`: a bio entered the block layer (before any request exists).
    /// Opened by the nvme profiles (not block), for the time spent before the driver.
    BioQueue,
    Insert,
    Issue,
    /// The driver gave a dispatched request back (busy): it will be issued again.
    Requeue,
    /// The scheduler merged a queued request into another one: it is not an I/O of its
    /// own any more.
    Merge,
    /// A bio joined the back of a queued request (no request of its own).
    BioBackMerge,
    /// A bio joined the front of a queued request, which now starts at the bio's sector.
    BioFrontMerge,
    Complete,
}

impl BlockKind {
    pub fn from_event(name: &str) -> Option<BlockKind> {
        match name {
            "block_bio_queue" => Some(BlockKind::BioQueue),
            "block_rq_insert" => Some(BlockKind::Insert),
            "block_rq_issue" => Some(BlockKind::Issue),
            "block_rq_requeue" => Some(BlockKind::Requeue),
            "block_rq_merge" => Some(BlockKind::Merge),
            "block_bio_backmerge" => Some(BlockKind::BioBackMerge),
            "block_bio_frontmerge" => Some(BlockKind::BioFrontMerge),
            "block_rq_complete" => Some(BlockKind::Complete),
            _ => None,
        }
    }

    fn event_name(self) -> &'static str {
        match self {
            BlockKind::BioQueue => "block:block_bio_queue",
            BlockKind::Insert => "block:block_rq_insert",
            BlockKind::Issue => "block:block_rq_issue",
            BlockKind::Requeue => "block:block_rq_requeue",
            BlockKind::Merge => "block:block_rq_merge",
            BlockKind::BioBackMerge => "block:block_bio_backmerge",
            BlockKind::BioFrontMerge => "block:block_bio_frontmerge",
            BlockKind::Complete => "block:block_rq_complete",
        }
    }
}

/// The operation of a request, from the first letters of `rwbs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Read,
    Write,
    Flush,
    Discard,
    Other,
}

impl Op {
    /// `rwbs` is built by `blk_fill_rwbs`: an optional leading `F` (preflush), then the
    /// op letter (`W`, `R`, `D`, `DE`, `F`, `N`), then flag letters (`F`ua, `A`head,
    /// `S`ync, `M`eta).
    #[inline]
    pub fn from_rwbs(rwbs: &[u8]) -> Op {
        let (preflush, rest) = match rwbs {
            [b'F', b'W' | b'R' | b'D' | b'N' | b'F', ..] => (true, &rwbs[1..]),
            _ => (false, rwbs),
        };
        match rest.first() {
            Some(b'R') => Op::Read,
            Some(b'W') => Op::Write,
            Some(b'D') => Op::Discard,
            Some(b'F') => Op::Flush,
            Some(b'N') if preflush => Op::Flush,
            _ => Op::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "discard",
            Op::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Op> {
        [Op::Read, Op::Write, Op::Flush, Op::Discard, Op::Other]
            .into_iter()
            .find(|o| o.as_str() == s)
    }
}

/// One block request event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEvent {
    pub kind: BlockKind,
    /// Kernel `dev_t` encoding: major << 20 | minor.
    pub dev: u32,
    pub sector: u64,
    pub nr_sector: u32,
    /// Bytes of the request; completions carry none (`nr_sector` << 9 there).
    pub bytes: u32,
    pub op: Op,
    /// Completion status (negative errno); 0 for other kinds.
    pub error: i32,
}

impl BlockEvent {
    /// A write's completion without data: the end of a flush sequence on a disk with
    /// a write cache, after the flush request the kernel issued for it. Either a write
    /// without data that only carried a flush (`fsync`), which the kernel ends without
    /// issuing it, or a write with FUA on a disk without FUA, which completed its data
    /// already and ends after its post-flush. Neither is the completion of a request
    /// or driver command still in flight, not even one at its sector.
    #[inline]
    pub fn ends_flush(&self) -> bool {
        self.kind == BlockKind::Complete
            && self.op == Op::Write
            && self.nr_sector == 0
            && self.error == 0
    }
}

#[derive(Debug, Clone, Copy)]
pub struct BlockLayout {
    kind: BlockKind,
    dev: FieldReader,
    sector: FieldReader,
    nr_sector: FieldReader,
    bytes: Option<FieldReader>,
    error: Option<FieldReader>,
    rwbs: FieldReader,
    need: usize,
}

impl BlockLayout {
    pub fn bind(fmt: &EventFormat, kind: BlockKind) -> Result<BlockLayout, DecodeError> {
        let ev = kind.event_name();
        let dev = FieldReader::bind(fmt, ev, "dev", Want::Int)?;
        let sector = FieldReader::bind(fmt, ev, "sector", Want::Int)?;
        let nr_sector = FieldReader::bind(fmt, ev, "nr_sector", Want::Int)?;
        let rwbs = FieldReader::bind(fmt, ev, "rwbs", Want::CharArray)?;
        let bytes = FieldReader::bind_opt(fmt, ev, "bytes", Want::Int)?;
        let error = FieldReader::bind_opt(fmt, ev, "error", Want::Int)?;
        let need = [
            Some(dev),
            Some(sector),
            Some(nr_sector),
            Some(rwbs),
            bytes,
            error,
        ]
        .into_iter()
        .flatten()
        .map(|f| f.end())
        .max()
        .unwrap_or(0);
        Ok(BlockLayout {
            kind,
            dev,
            sector,
            nr_sector,
            bytes,
            error,
            rwbs,
            need,
        })
    }

    /// Bind a `block:<event>` by name (`None` for an event this module does not know).
    pub fn for_event(fmt: &EventFormat, event: &str) -> Result<BlockLayout, DecodeError> {
        match BlockKind::from_event(event) {
            Some(kind) => BlockLayout::bind(fmt, kind),
            None => Err(crate::decode::unknown("block", event)),
        }
    }

    #[inline(always)]
    pub fn decode(&self, raw: &[u8]) -> Result<BlockEvent, Malformed> {
        Malformed::check_len(raw, self.need, || self.kind.event_name())?;
        let nr_sector = self.nr_sector.u32(raw);
        Ok(BlockEvent {
            kind: self.kind,
            dev: self.dev.u32(raw),
            sector: self.sector.u64(raw),
            nr_sector,
            bytes: self.bytes.map_or(nr_sector << 9, |f| f.u32(raw)),
            // `from_rwbs` reads two letters at most, and a NUL matches none of them:
            // no need to look for the end of the string.
            op: Op::from_rwbs(rwbs_head(self.rwbs.array(raw))),
            error: self.error.map_or(0, |f| f.i64(raw) as i32),
        })
    }
}

/// The first two bytes of `rwbs` (fewer when the field is shorter).
#[inline]
fn rwbs_head(rwbs: &[u8]) -> &[u8] {
    &rwbs[..rwbs.len().min(2)]
}

pub use crate::device::{dev_major, dev_minor, kernel_dev};

/// The layout of one event the block profile opens.
pub fn layout(
    fmt: &EventFormat,
    system: &str,
    event: &str,
) -> Result<Box<dyn Layout<BlockEvent>>, DecodeError> {
    if system != "block" {
        return Err(crate::decode::unknown(system, event));
    }
    Ok(Box::new(BlockLayout::for_event(fmt, event)?))
}

crate::decode::layout_by_decode!(BlockLayout => BlockEvent);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rwbs_to_op() {
        assert_eq!(Op::from_rwbs(b"R"), Op::Read);
        assert_eq!(Op::from_rwbs(b"RA"), Op::Read);
        assert_eq!(Op::from_rwbs(b"WS"), Op::Write);
        assert_eq!(Op::from_rwbs(b"WFS"), Op::Write);
        assert_eq!(Op::from_rwbs(b"FWS"), Op::Write);
        assert_eq!(Op::from_rwbs(b"FN"), Op::Flush);
        assert_eq!(Op::from_rwbs(b"F"), Op::Flush);
        assert_eq!(Op::from_rwbs(b"FF"), Op::Flush);
        assert_eq!(Op::from_rwbs(b"D"), Op::Discard);
        assert_eq!(Op::from_rwbs(b"DE"), Op::Discard);
        assert_eq!(Op::from_rwbs(b"N"), Op::Other);
        assert_eq!(Op::from_rwbs(b""), Op::Other);
        // What decode reads, two bytes of the field with the NUL padding: the same op.
        for rwbs in [
            &b"R"[..],
            b"RA",
            b"WS",
            b"WFS",
            b"FWS",
            b"FN",
            b"F",
            b"FF",
            b"D",
            b"DE",
            b"N",
            b"",
        ] {
            let mut field = [0u8; 8];
            field[..rwbs.len()].copy_from_slice(rwbs);
            for size in 1..=8 {
                assert_eq!(
                    Op::from_rwbs(rwbs_head(&field[..size])),
                    Op::from_rwbs(&rwbs[..rwbs.len().min(size)]),
                    "{rwbs:?} in {size} bytes"
                );
            }
        }
        for o in [Op::Read, Op::Write, Op::Flush, Op::Discard, Op::Other] {
            assert_eq!(Op::parse(o.as_str()), Some(o));
        }
    }
}
