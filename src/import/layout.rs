//! Where perf.data keeps things: the file header's fields, and a walk of the record
//! headers (type and size) that every reader of a data section here shares.

use super::{le32, ReadSeek, RECORD_FINISHED_ROUND};
use std::io::{self, BufReader, Read, Seek, SeekFrom};

/// Where the file header holds the data section's offset and size.
pub(super) const DATA_SECTION: usize = 40;
/// Where the file header's feature bitmap starts (256 bits).
pub(super) const FEATURES: usize = 72;

/// What a walk of record headers found.
pub(super) struct Walk {
    /// Bytes of whole records from the start (as far as the walk went).
    pub whole: u64,
    /// A FINISHED_ROUND was met (the walk stops there when asked to).
    pub round: bool,
    /// Bytes from the start to the end of the last FINISHED_ROUND met.
    pub round_end: Option<u64>,
    /// The walk stopped at a header shorter than itself, at `whole`.
    pub bad: bool,
}

/// Walk the headers of `len` bytes of records from byte `off` of `r`, to the last whole
/// record or a header that cannot be one (shorter than itself), giving each record's
/// size to `each`; `stop`: stop at the first FINISHED_ROUND (not given to `each`).
pub(super) fn walk(
    r: &mut dyn ReadSeek,
    off: u64,
    len: u64,
    stop: bool,
    mut each: impl FnMut(u64),
) -> io::Result<Walk> {
    let mut b = BufReader::with_capacity(1 << 16, r);
    b.seek(SeekFrom::Start(off))?;
    let mut w = Walk {
        whole: 0,
        round: false,
        round_end: None,
        bad: false,
    };
    let mut head = [0u8; 8];
    while w.whole + 8 <= len {
        b.read_exact(&mut head)?;
        let size = u64::from(u16::from_le_bytes([head[6], head[7]]));
        if size < 8 {
            w.bad = true;
            break;
        }
        if w.whole + size > len {
            break;
        }
        if le32(&head, 0) == RECORD_FINISHED_ROUND {
            w.round = true;
            if stop {
                break;
            }
            w.round_end = Some(w.whole + size);
        }
        b.seek_relative(size as i64 - 8)?;
        w.whole += size;
        each(size);
    }
    Ok(w)
}

/// A record of `size` bytes of type `kind`, its body filled with `kind`: for the tests of
/// every reader of records here.
#[cfg(test)]
pub(super) fn record(kind: u8, size: u16) -> Vec<u8> {
    let mut r = vec![kind, 0, 0, 0, 0, 0];
    r.extend_from_slice(&size.to_le_bytes());
    r.resize(size as usize, kind);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_stops_at_the_last_whole_record_or_the_first_round() {
        let mut b = vec![0u8; 8];
        b.extend(record(9, 16));
        b.extend(record(68, 8));
        b.extend(record(9, 24));
        b.extend(&record(9, 32)[..20]);
        let n = b.len() as u64 - 8;
        let mut c = io::Cursor::new(b.clone());
        let mut sizes = Vec::new();
        let w = walk(&mut c, 8, n, false, |s| sizes.push(s)).unwrap();
        assert_eq!((w.whole, w.round, w.bad), (48, true, false));
        assert_eq!(w.round_end, Some(24));
        assert_eq!(sizes, [16, 8, 24]);
        let w = walk(&mut c, 8, n, true, |_| {}).unwrap();
        assert_eq!((w.whole, w.round), (16, true));
        // A header shorter than itself ends the walk.
        b[8 + 24 + 6] = 4;
        let w = walk(&mut io::Cursor::new(b), 8, n, false, |_| {}).unwrap();
        assert_eq!((w.whole, w.bad), (24, true));
    }
}
