//! Stage 2 (perf), one ring: the mmap'd perf buffer of one CPU. It yields whole records as
//! byte slices and advances `data_tail` once they are consumed. It must not parse records
//! (that is `record.rs`) nor know which events feed it (that is `group.rs`).
//!
//! Protocol (see `perf_event_open(2)`, "MMAP layout"): the kernel publishes `data_head`
//! after writing records; we load it with Acquire so the record bytes are visible, read
//! everything up to it, then store `data_tail` with Release so the kernel does not reuse
//! the space before our reads are done. Between our tail and its head the kernel never
//! writes, which is what makes handing out slices into the mapping sound.

use std::ops::Range;
use std::os::fd::BorrowedFd;
use std::ptr::addr_of_mut;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys::bindings::perf_event_mmap_page;

use super::record::HEADER_LEN;
use super::sys::{self, Mapping};
use super::PerfError;

/// The ring's bookkeeping does not add up: the data can no longer be walked safely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error(
        "perf ring record at byte {offset} of {pending} pending claims size {size} \
         (must be 8..={remaining}); skipped the rest of the pending data"
    )]
    BadRecordSize {
        offset: u64,
        size: u16,
        remaining: u64,
        pending: u64,
    },
    #[error("perf ring has {remaining} trailing bytes, too few for a record header; skipped")]
    TrailingBytes { remaining: u64 },
    #[error(
        "perf ring head {head} is more than the ring's {capacity} bytes ahead of tail {tail}; \
         skipped to head"
    )]
    HeadOutOfRange { head: u64, tail: u64, capacity: u64 },
}

/// What one walk over pending ring data did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// Bytes to advance the tail by. On an error this is everything pending, because a bad
    /// size leaves no way to find the next record boundary and leaving the bytes in place
    /// would stall the ring for good.
    pub consumed: u64,
    /// Records handed to the callback.
    pub records: u64,
    pub error: Option<RingError>,
}

/// The pending bytes `[tail, head)` of a ring with `capacity` data bytes, as at most two
/// ranges of the data area (the second is non-empty when the pending data wraps).
pub(crate) fn pending_ranges(
    capacity: u64,
    tail: u64,
    head: u64,
) -> Result<(Range<usize>, Range<usize>), RingError> {
    let pending = head.wrapping_sub(tail);
    if capacity == 0 || pending > capacity {
        return Err(RingError::HeadOutOfRange {
            head,
            tail,
            capacity,
        });
    }
    // Both values are < capacity, which fits in usize because it is the size of a mapping.
    let start = (tail % capacity) as usize;
    let pending = pending as usize;
    let cap = capacity as usize;
    if start + pending <= cap {
        Ok((start..start + pending, 0..0))
    } else {
        Ok((start..cap, 0..start + pending - cap))
    }
}

/// Walks the pending records `[tail, head)` of a ring whose whole data area is `data`
/// (its length is the capacity), exactly as [`Ring::drain`] walks the mapping: records
/// in order, wrapped ones copied into `scratch`, and on an impossible `head` everything
/// pending skipped. For tests and fuzzing from plain byte arrays; the live ring never
/// forms a slice over the whole area, because the kernel writes to the part outside
/// `[tail, head)` while we read.
#[doc(hidden)]
pub fn walk_ring_bytes(
    data: &[u8],
    tail: u64,
    head: u64,
    scratch: &mut Vec<u8>,
    f: impl FnMut(&[u8]),
) -> WalkStats {
    match pending_ranges(data.len() as u64, tail, head) {
        Ok((a, b)) => match (data.get(a), data.get(b)) {
            (Some(first), Some(second)) => walk_records(first, second, scratch, f),
            // pending_ranges keeps both ranges inside the capacity; never trust that
            // with a panic.
            _ => unwalkable(
                tail,
                head,
                RingError::HeadOutOfRange {
                    head,
                    tail,
                    capacity: data.len() as u64,
                },
            ),
        },
        Err(error) => unwalkable(tail, head, error),
    }
}

/// Nothing between tail and head can be trusted: skip it all, so the ring resynchronises
/// at head instead of stalling.
fn unwalkable(tail: u64, head: u64, error: RingError) -> WalkStats {
    WalkStats {
        consumed: head.wrapping_sub(tail),
        records: 0,
        error: Some(error),
    }
}

/// Walks the records in the logical byte stream `first ++ second` (the pending data, split
/// where it wraps the ring end). Records that lie wholly in one part are passed as slices of
/// it; a record that straddles the split (including one whose header straddles it) is copied
/// into `scratch` first, so `f` always sees one contiguous record, header included.
///
/// Stops at the first impossible record size (< 8 or beyond the pending data) or at trailing
/// bytes too short for a header, and reports it; never panics and always terminates, since
/// every step advances by at least `HEADER_LEN` bytes.
pub(crate) fn walk_records(
    first: &[u8],
    second: &[u8],
    scratch: &mut Vec<u8>,
    mut f: impl FnMut(&[u8]),
) -> WalkStats {
    let total = first.len() + second.len();
    let mut pos = 0usize;
    let mut stats = WalkStats::default();
    let fail = |stats: &mut WalkStats, error| {
        stats.consumed = total as u64;
        stats.error = Some(error);
    };
    while pos < total {
        let remaining = total - pos;
        let Some(size) = record_size(first, second, pos) else {
            fail(
                &mut stats,
                RingError::TrailingBytes {
                    remaining: remaining as u64,
                },
            );
            return stats;
        };
        let len = usize::from(size);
        let bad_size = RingError::BadRecordSize {
            offset: pos as u64,
            size,
            remaining: remaining as u64,
            pending: total as u64,
        };
        if len < HEADER_LEN || len > remaining {
            fail(&mut stats, bad_size);
            return stats;
        }
        let end = pos + len;
        let piece = if end <= first.len() {
            first.get(pos..end)
        } else if pos >= first.len() {
            second.get(pos - first.len()..end - first.len())
        } else {
            scratch.clear();
            scratch.resize(len, 0);
            if copy_out(first, second, pos, scratch) {
                Some(&scratch[..])
            } else {
                None
            }
        };
        // `None` cannot happen given the checks above; treat it as corruption rather than
        // trusting that reasoning with a panic.
        let Some(piece) = piece else {
            fail(&mut stats, bad_size);
            return stats;
        };
        f(piece);
        stats.records += 1;
        pos = end;
    }
    stats.consumed = total as u64;
    stats
}

/// The size field of the record header at logical offset `pos` of `first ++ second`;
/// `None` when fewer than a header's bytes are left. Read in place when the header lies
/// in one part, as all but one per wrap do: copying it out first was a `memcpy` call of
/// a length the compiler cannot see, on every record.
#[inline]
fn record_size(first: &[u8], second: &[u8], pos: usize) -> Option<u16> {
    let (part, p) = match pos.checked_sub(first.len()) {
        Some(p) => (second, p),
        None => (first, pos),
    };
    let mut copy = [0u8; HEADER_LEN];
    let header = match part.get(p..p.checked_add(HEADER_LEN)?) {
        Some(h) => h,
        // Straddling the split: the one header per wrap that is copied.
        None if copy_out(first, second, pos, &mut copy) => &copy[..],
        None => return None,
    };
    Some(u16::from_le_bytes([header[6], header[7]]))
}

/// Copies `out.len()` bytes starting at logical offset `pos` of `first ++ second` into
/// `out`. Returns false if they are not all there.
fn copy_out(first: &[u8], second: &[u8], pos: usize, out: &mut [u8]) -> bool {
    let mut filled = 0;
    if pos < first.len() {
        let take = (first.len() - pos).min(out.len());
        out[..take].copy_from_slice(&first[pos..pos + take]);
        filled = take;
    }
    let rest = out.len() - filled;
    let start = (pos + filled).saturating_sub(first.len());
    match second.get(start..start + rest) {
        Some(src) => {
            out[filled..].copy_from_slice(src);
            true
        }
        None => false,
    }
}

/// One CPU's mmap'd perf ring: a control page followed by `pages` data pages.
#[derive(Debug)]
pub struct Ring {
    map: Mapping,
    data_offset: usize,
    data_size: usize,
    /// Reused for records that wrap, so the hot path does not allocate after warm-up.
    scratch: Vec<u8>,
}

impl Ring {
    /// Maps the ring of `fd` with `pages` data pages. `pages` must be a power of two, since
    /// the kernel indexes the ring with a mask. `cpu` only names the ring in errors.
    pub fn new(fd: BorrowedFd<'_>, pages: usize, cpu: u32) -> Result<Ring, PerfError> {
        if pages == 0 || !pages.is_power_of_two() {
            return Err(PerfError::BadPageCount { pages });
        }
        let page = sys::page_size();
        let bytes = pages
            .checked_add(1)
            .and_then(|n| n.checked_mul(page))
            .ok_or(PerfError::BadPageCount { pages })?;
        let map =
            Mapping::new(fd, bytes).map_err(|source| PerfError::Mmap { cpu, bytes, source })?;
        let control = map.as_ptr().cast::<perf_event_mmap_page>();
        // SAFETY: the mapping is at least one page, page-aligned and larger than
        // perf_event_mmap_page; the kernel fills data_offset/data_size at mmap time and never
        // changes them, so a plain volatile read sees their final values.
        let (data_offset, data_size) = unsafe {
            (
                std::ptr::read_volatile(addr_of_mut!((*control).data_offset)),
                std::ptr::read_volatile(addr_of_mut!((*control).data_size)),
            )
        };
        let expected = (pages * page) as u64;
        // Kernels before 4.1 leave both at 0; the layout is then the classic one.
        let (data_offset, data_size) = if data_size == 0 {
            (page as u64, expected)
        } else {
            (data_offset, data_size)
        };
        let fits = data_offset
            .checked_add(data_size)
            .is_some_and(|end| end <= map.len() as u64);
        if !fits || data_size != expected || !data_size.is_power_of_two() {
            return Err(PerfError::BadRingLayout {
                cpu,
                data_offset,
                data_size,
                mapped: bytes,
            });
        }
        Ok(Ring {
            map,
            data_offset: data_offset as usize,
            data_size: data_size as usize,
            scratch: Vec::new(),
        })
    }

    /// Bytes in the data area.
    pub fn capacity(&self) -> usize {
        self.data_size
    }

    fn control(&self) -> *mut perf_event_mmap_page {
        self.map.as_ptr().cast()
    }

    fn data_head(&self) -> &AtomicU64 {
        // SAFETY: `data_head` lies inside the live mapping (which `&self` keeps alive for the
        // returned borrow) and is 8-aligned because the mapping is page-aligned and the field
        // is at offset 1024. The kernel updates it only with atomic 64-bit stores
        // (smp_store_release), so every access to it is atomic.
        unsafe { AtomicU64::from_ptr(addr_of_mut!((*self.control()).data_head)) }
    }

    fn data_tail(&self) -> &AtomicU64 {
        // SAFETY: as for `data_head`; the kernel only reads `data_tail` (READ_ONCE) and we
        // are its only writer.
        unsafe { AtomicU64::from_ptr(addr_of_mut!((*self.control()).data_tail)) }
    }

    /// Hands every pending record to `f` (header included, contiguous), then releases the
    /// space to the kernel.
    pub fn drain(&mut self, f: impl FnMut(&[u8])) -> WalkStats {
        let head = self.data_head().load(Ordering::Acquire);
        // We are the only writer of data_tail, so no ordering is needed to read it back.
        let tail = self.data_tail().load(Ordering::Relaxed);
        let (a, b) = match pending_ranges(self.data_size as u64, tail, head) {
            Ok(ranges) => ranges,
            Err(error) => {
                self.data_tail().store(head, Ordering::Release);
                return unwalkable(tail, head, error);
            }
        };
        if a.is_empty() {
            return WalkStats::default();
        }
        let data = self.map.as_ptr().wrapping_add(self.data_offset);
        // SAFETY: `pending_ranges` keeps both ranges inside [0, data_size), and
        // data_offset + data_size <= mapping length was checked in `new`, so the slices lie
        // in the live mapping. They cover only [tail, head): after the Acquire load of head
        // the kernel's writes there are visible, and it will not write there again until
        // we store a new data_tail below, after the last use of these slices.
        let (first, second) = unsafe {
            (
                std::slice::from_raw_parts(data.add(a.start), a.len()),
                std::slice::from_raw_parts(data.add(b.start), b.len()),
            )
        };
        let stats = walk_records(first, second, &mut self.scratch, f);
        self.data_tail()
            .store(tail.wrapping_add(stats.consumed), Ordering::Release);
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::record::tests::{full, sample_bytes};
    use crate::perf::record::{parse_record, Record};

    /// Writes `bytes` into `ring` starting at logical position `pos`, wrapping at the end.
    fn put(ring: &mut [u8], pos: u64, bytes: &[u8]) {
        let cap = ring.len() as u64;
        for (i, b) in bytes.iter().enumerate() {
            ring[((pos + i as u64) % cap) as usize] = *b;
        }
    }

    /// The walk as the ring does it, over a plain array.
    fn walk(data: &[u8], tail: u64, head: u64) -> (WalkStats, Vec<Vec<u8>>) {
        let mut out = Vec::new();
        let stats = walk_ring_bytes(data, tail, head, &mut Vec::new(), |r| out.push(r.to_vec()));
        (stats, out)
    }

    fn ids(records: &[Vec<u8>]) -> Vec<u64> {
        records
            .iter()
            .map(|r| match full().parse(r) {
                Ok(Record::Sample(s)) => s.id.unwrap(),
                other => panic!("not a sample: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn empty_ring() {
        let data = [0u8; 256];
        for pos in [0, 17 * 256, u64::MAX] {
            let (stats, recs) = walk(&data, pos, pos);
            assert_eq!(stats, WalkStats::default());
            assert!(recs.is_empty());
        }
    }

    #[test]
    fn many_records_no_wrap() {
        let mut data = vec![0u8; 4096];
        let mut pos = 0;
        for id in 0..50u64 {
            let r = sample_bytes(id, id * 10, 0, &[id as u8; 12]);
            put(&mut data, pos, &r);
            pos += r.len() as u64;
        }
        let (stats, recs) = walk(&data, 0, pos);
        assert_eq!(stats.records, 50);
        assert_eq!(stats.consumed, pos);
        assert_eq!(stats.error, None);
        assert_eq!(ids(&recs), (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn record_body_wraps() {
        let mut data = vec![0u8; 256];
        let r = sample_bytes(77, 5, 1, &[0xAB; 40]);
        // Header fits before the end, the body does not.
        let tail = 256 * 3 + 256 - 16;
        put(&mut data, tail, &r);
        let (stats, recs) = walk(&data, tail, tail + r.len() as u64);
        assert_eq!(stats.error, None);
        assert_eq!(recs, vec![r]);
    }

    #[test]
    fn header_wraps() {
        let r = sample_bytes(9, 1, 0, &[1, 2, 3, 4]);
        for split in 1..HEADER_LEN as u64 {
            let mut data = vec![0u8; 128];
            let tail = 128 - split;
            put(&mut data, tail, &r);
            let (stats, recs) = walk(&data, tail, tail + r.len() as u64);
            assert_eq!(stats.error, None, "split {split}");
            assert_eq!(recs, vec![r.clone()], "split {split}");
        }
    }

    #[test]
    fn record_ending_exactly_at_ring_end_and_next_at_start() {
        let mut data = vec![0u8; 128];
        let a = sample_bytes(1, 1, 0, &[7; 12]); // 48 bytes
        let b = sample_bytes(2, 2, 0, &[8; 12]);
        let tail = 128 - a.len() as u64;
        put(&mut data, tail, &a);
        put(&mut data, tail + a.len() as u64, &b);
        let head = tail + (a.len() + b.len()) as u64;
        let (stats, recs) = walk(&data, tail, head);
        assert_eq!(stats.error, None);
        assert_eq!(ids(&recs), vec![1, 2]);
        assert_eq!(stats.consumed, head - tail);
    }

    #[test]
    fn many_records_across_many_wraps() {
        let mut data = vec![0u8; 512];
        let mut tail = 0u64;
        let mut next_id = 0u64;
        let mut scratch = Vec::new();
        // Simulate a producer that refills the ring each round, with varying record sizes,
        // so records wrap at every possible offset.
        for round in 0..200 {
            let mut head = tail;
            let mut want = Vec::new();
            loop {
                let r = sample_bytes(next_id, 0, 0, &vec![0; (next_id % 37) as usize]);
                if head + r.len() as u64 - tail > data.len() as u64 {
                    break;
                }
                put(&mut data, head, &r);
                head += r.len() as u64;
                want.push(next_id);
                next_id += 1;
            }
            let (a, b) = pending_ranges(data.len() as u64, tail, head).unwrap();
            let mut got = Vec::new();
            let stats = walk_records(&data[a], &data[b], &mut scratch, |r| got.push(r.to_vec()));
            assert_eq!(stats.error, None, "round {round}");
            assert_eq!(ids(&got), want, "round {round}");
            tail += stats.consumed;
            assert_eq!(tail, head);
        }
    }

    #[test]
    fn zero_size_stops_and_skips() {
        let mut data = vec![0u8; 256];
        let r = sample_bytes(1, 1, 0, &[1; 4]);
        put(&mut data, 0, &r);
        // The next "record" has size 0: would loop forever if trusted.
        let head = r.len() as u64 + 64;
        let (stats, recs) = walk(&data, 0, head);
        assert_eq!(ids(&recs), vec![1]);
        assert_eq!(stats.records, 1);
        assert_eq!(stats.consumed, head);
        assert!(matches!(
            stats.error,
            Some(RingError::BadRecordSize { size: 0, .. })
        ));
    }

    #[test]
    fn size_beyond_pending_or_ring_stops() {
        let mut data = vec![0u8; 256];
        let mut r = sample_bytes(1, 1, 0, &[1; 4]);
        for bad in [7u16, 300, u16::MAX, r.len() as u16 + 8] {
            r[6..8].copy_from_slice(&bad.to_le_bytes());
            put(&mut data, 100, &r);
            let (stats, recs) = walk(&data, 100, 100 + r.len() as u64);
            assert!(recs.is_empty(), "size {bad}");
            assert_eq!(stats.consumed, r.len() as u64);
            assert!(
                matches!(stats.error, Some(RingError::BadRecordSize { size, .. }) if size == bad)
            );
        }
    }

    #[test]
    fn trailing_partial_header_stops() {
        let mut data = vec![0u8; 256];
        let r = sample_bytes(1, 1, 0, &[1; 4]);
        put(&mut data, 250, &r);
        let head = 250 + r.len() as u64 + 5;
        let (stats, recs) = walk(&data, 250, head);
        assert_eq!(recs.len(), 1);
        assert_eq!(stats.consumed, head - 250);
        assert_eq!(stats.error, Some(RingError::TrailingBytes { remaining: 5 }));
    }

    #[test]
    fn head_beyond_capacity_is_error() {
        let data = vec![0u8; 256];
        let (stats, recs) = walk(&data, 10, 10 + 257);
        assert!(recs.is_empty());
        assert!(matches!(
            stats.error,
            Some(RingError::HeadOutOfRange { .. })
        ));
        // Head behind tail (wrapping difference is huge) is the same error.
        let (stats, _) = walk(&data, 10, 5);
        assert!(matches!(
            stats.error,
            Some(RingError::HeadOutOfRange { .. })
        ));
    }

    #[test]
    fn positions_near_u64_max_wrap() {
        let mut data = vec![0u8; 128];
        let r = sample_bytes(5, 0, 0, &[3; 20]);
        let tail = u64::MAX - 10;
        put(&mut data, tail, &r[..11]);
        // The logical position wraps u64 too: 2^64 is a multiple of the ring size.
        put(&mut data, 0, &r[11..]);
        let head = tail.wrapping_add(r.len() as u64);
        let (stats, recs) = walk(&data, tail, head);
        assert_eq!(stats.error, None);
        assert_eq!(recs, vec![r]);
    }

    #[test]
    fn garbage_never_panics_or_loops() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut data = vec![0u8; 256];
        let mut scratch = Vec::new();
        for _ in 0..5_000 {
            for b in data.iter_mut() {
                // Small sizes are the interesting ones; keep bytes small half the time.
                *b = if next() % 2 == 0 {
                    (next() % 64) as u8
                } else {
                    next() as u8
                };
            }
            let tail = next();
            let head = tail.wrapping_add(next() % 300);
            if let Ok((a, b)) = pending_ranges(256, tail, head) {
                let stats = walk_records(&data[a], &data[b], &mut scratch, |r| {
                    assert!(r.len() >= HEADER_LEN);
                    let _ = parse_record(r);
                });
                assert_eq!(stats.consumed, head.wrapping_sub(tail));
            }
        }
    }
}
