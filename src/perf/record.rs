//! Stage 2 (perf), record parsing: turns the bytes of one perf record into a [`Record`].
//! Pure: no I/O, no `unsafe`, no allocation, and no panic on any input. It does not
//! decode the tracepoint payload (that is `decode/`'s job); it only locates it.
//!
//! Layout assumed, fixed by how `group.rs` opens events
//! (`sample_type = IDENTIFIER | TIME | CPU | RAW`, `sample_id_all = 1`):
//!
//! ```text
//! header:         u32 type, u16 misc, u16 size          (size includes the header)
//! PERF_RECORD_SAMPLE: u64 id, u64 time, u32 cpu, u32 res, u32 raw_size, raw[raw_size], pad
//! PERF_RECORD_LOST:   u64 id, u64 lost, sample_id { u64 time, u32 cpu, u32 res, u64 id }
//! ```
//!
//! All fields are little-endian and read unaligned, because a record copied out of a wrapped
//! ring or carved from a byte buffer has no alignment guarantee.

use perf_event_open_sys::bindings::{PERF_RECORD_LOST, PERF_RECORD_SAMPLE};

/// Size of `perf_event_header`.
pub const HEADER_LEN: usize = 8;

/// One `PERF_RECORD_SAMPLE` of a tracepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// `PERF_SAMPLE_IDENTIFIER`: which opened event produced it (see `PerfGroup::event_index`).
    pub id: u64,
    /// `PERF_SAMPLE_TIME`, in the clock chosen with `use_clockid`.
    pub time: u64,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: u32,
    /// The tracepoint payload (`raw_size` bytes); starts with the u16 `common_type`. The
    /// kernel pads `raw_size` so the record stays 8-aligned, so a few trailing bytes may be
    /// padding: decoders read fields by offset and ignore the rest.
    pub raw: &'a [u8],
}

/// A parsed perf record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record<'a> {
    Sample(Sample<'a>),
    /// The kernel dropped `lost` records of event `id` because the ring was full.
    Lost {
        id: u64,
        lost: u64,
    },
    /// Any other record type (throttle, etc.); callers usually ignore it.
    Other {
        kind: u32,
    },
}

/// Why a record could not be parsed. Offsets and sizes are in bytes from the start of the
/// record (header included).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("perf record truncated: {what} needs {needed} bytes, only {present} present")]
    Truncated {
        what: &'static str,
        needed: usize,
        present: usize,
    },
    #[error("perf record header claims size {size}, smaller than the {HEADER_LEN}-byte header")]
    HeaderTooSmall { size: u16 },
}

/// Parses one whole record, header included. Bytes beyond the header's `size` are ignored.
pub fn parse_record(bytes: &[u8]) -> Result<Record<'_>, RecordError> {
    let mut head = Reader::new(bytes);
    let kind = head.u32("header type")?;
    let _misc = head.u16("header misc")?;
    let size = head.u16("header size")?;
    if usize::from(size) < HEADER_LEN {
        return Err(RecordError::HeaderTooSmall { size });
    }
    let record = bytes
        .get(..usize::from(size))
        .ok_or(RecordError::Truncated {
            what: "record (header size)",
            needed: usize::from(size),
            present: bytes.len(),
        })?;
    let mut r = Reader {
        buf: record,
        pos: HEADER_LEN,
    };
    match kind {
        PERF_RECORD_SAMPLE => {
            let id = r.u64("sample identifier")?;
            let time = r.u64("sample time")?;
            let cpu = r.u32("sample cpu")?;
            let _res = r.u32("sample cpu reserved")?;
            let raw_size = r.u32("sample raw size")?;
            let raw = r.bytes(raw_size as usize, "sample raw data")?;
            Ok(Record::Sample(Sample { id, time, cpu, raw }))
        }
        PERF_RECORD_LOST => {
            let id = r.u64("lost id")?;
            let lost = r.u64("lost count")?;
            Ok(Record::Lost { id, lost })
        }
        kind => Ok(Record::Other { kind }),
    }
}

/// Bounds-checked little-endian cursor; every read names what it was reading so a
/// truncation error says which field was cut.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn bytes(&mut self, len: usize, what: &'static str) -> Result<&'a [u8], RecordError> {
        let end = self.pos.checked_add(len);
        let slice = end.and_then(|end| self.buf.get(self.pos..end));
        match slice {
            Some(s) => {
                self.pos += len;
                Ok(s)
            }
            None => Err(RecordError::Truncated {
                what,
                needed: end.unwrap_or(usize::MAX),
                present: self.buf.len(),
            }),
        }
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], RecordError> {
        let s = self.bytes(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, RecordError> {
        self.array(what).map(u16::from_le_bytes)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, RecordError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, RecordError> {
        self.array(what).map(u64::from_le_bytes)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn header(kind: u32, size: usize) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(&0u16.to_le_bytes());
        v.extend_from_slice(&(size as u16).to_le_bytes());
        v
    }

    /// Builds a SAMPLE record the way the kernel lays it out, padded to 8 bytes.
    pub(crate) fn sample_bytes(id: u64, time: u64, cpu: u32, raw: &[u8]) -> Vec<u8> {
        let body = 8 + 8 + 4 + 4 + 4 + raw.len();
        let size = (HEADER_LEN + body).div_ceil(8) * 8;
        let mut v = header(PERF_RECORD_SAMPLE, size);
        v.extend_from_slice(&id.to_le_bytes());
        v.extend_from_slice(&time.to_le_bytes());
        v.extend_from_slice(&cpu.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        v.extend_from_slice(raw);
        v.resize(size, 0);
        v
    }

    pub(crate) fn lost_bytes(id: u64, lost: u64) -> Vec<u8> {
        let size = HEADER_LEN + 16 + 24;
        let mut v = header(PERF_RECORD_LOST, size);
        v.extend_from_slice(&id.to_le_bytes());
        v.extend_from_slice(&lost.to_le_bytes());
        v.extend_from_slice(&123u64.to_le_bytes()); // sample_id time
        v.extend_from_slice(&1u32.to_le_bytes()); // cpu
        v.extend_from_slice(&0u32.to_le_bytes()); // res
        v.extend_from_slice(&id.to_le_bytes()); // identifier
        v
    }

    #[test]
    fn parses_sample() {
        let raw = [0x31, 0x01, 0, 0, 9, 9, 9, 9, 42, 0, 0, 0];
        let bytes = sample_bytes(7, 1_000, 3, &raw);
        assert_eq!(bytes.len() % 8, 0);
        let rec = parse_record(&bytes).unwrap();
        assert_eq!(
            rec,
            Record::Sample(Sample {
                id: 7,
                time: 1_000,
                cpu: 3,
                raw: &raw
            })
        );
    }

    #[test]
    fn parses_sample_at_odd_address() {
        // Unaligned reads: shift the record by one byte inside a buffer.
        let bytes = sample_bytes(u64::MAX, 5, 1, &[1, 2, 3]);
        let mut shifted = vec![0xAA];
        shifted.extend_from_slice(&bytes);
        match parse_record(&shifted[1..]).unwrap() {
            Record::Sample(s) => {
                assert_eq!(s.id, u64::MAX);
                assert_eq!(s.raw, &[1, 2, 3]);
            }
            other => panic!("expected sample, got {other:?}"),
        }
    }

    #[test]
    fn parses_lost() {
        let bytes = lost_bytes(11, 4242);
        assert_eq!(
            parse_record(&bytes).unwrap(),
            Record::Lost { id: 11, lost: 4242 }
        );
    }

    #[test]
    fn unknown_kind_is_other() {
        let mut bytes = header(5, 16);
        bytes.resize(16, 0);
        assert_eq!(parse_record(&bytes).unwrap(), Record::Other { kind: 5 });
    }

    #[test]
    fn ignores_bytes_after_record() {
        let mut bytes = lost_bytes(1, 2);
        bytes.extend_from_slice(&[0xFF; 13]);
        assert_eq!(
            parse_record(&bytes).unwrap(),
            Record::Lost { id: 1, lost: 2 }
        );
    }

    #[test]
    fn short_header_is_truncated() {
        for n in 0..HEADER_LEN {
            let bytes = vec![0u8; n];
            assert!(matches!(
                parse_record(&bytes),
                Err(RecordError::Truncated { present, .. }) if present == n
            ));
        }
    }

    #[test]
    fn header_size_below_header_len() {
        for size in 0..HEADER_LEN {
            let mut bytes = header(PERF_RECORD_SAMPLE, size);
            bytes.resize(64, 0);
            assert_eq!(
                parse_record(&bytes),
                Err(RecordError::HeaderTooSmall { size: size as u16 })
            );
        }
    }

    #[test]
    fn header_size_beyond_buffer() {
        let bytes = sample_bytes(1, 2, 3, &[4; 8]);
        let cut = &bytes[..bytes.len() - 1];
        assert_eq!(
            parse_record(cut),
            Err(RecordError::Truncated {
                what: "record (header size)",
                needed: bytes.len(),
                present: bytes.len() - 1,
            })
        );
    }

    #[test]
    fn raw_size_beyond_record() {
        let mut bytes = sample_bytes(1, 2, 3, &[4; 8]);
        let size = bytes.len();
        bytes[32..36].copy_from_slice(&1000u32.to_le_bytes());
        assert_eq!(
            parse_record(&bytes),
            Err(RecordError::Truncated {
                what: "sample raw data",
                needed: 36 + 1000,
                present: size,
            })
        );
        bytes[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            parse_record(&bytes),
            Err(RecordError::Truncated {
                what: "sample raw data",
                ..
            })
        ));
    }

    #[test]
    fn every_sample_field_truncation_is_named() {
        // Shrinking the header size field cuts the record at each field in turn.
        let full = sample_bytes(1, 2, 3, &[4; 4]);
        let expect = [
            (8, "sample identifier"),
            (16, "sample time"),
            (24, "sample cpu"),
            (28, "sample cpu reserved"),
            (32, "sample raw size"),
            (36, "sample raw data"),
        ];
        for (size, what) in expect {
            let mut bytes = full.clone();
            bytes[6..8].copy_from_slice(&(size as u16).to_le_bytes());
            match parse_record(&bytes) {
                Err(RecordError::Truncated {
                    what: w, present, ..
                }) => {
                    assert_eq!((w, present), (what, size), "cut at {size}")
                }
                other => panic!("cut at {size}: expected truncation, got {other:?}"),
            }
        }
    }

    #[test]
    fn lost_truncation_is_named() {
        let full = lost_bytes(1, 2);
        for (size, what) in [(8, "lost id"), (16, "lost count"), (20, "lost count")] {
            assert!(matches!(
                parse_record(&full[..size]),
                Err(RecordError::Truncated { .. })
            ));
            let mut bytes = full.clone();
            bytes[6..8].copy_from_slice(&(size as u16).to_le_bytes());
            assert!(matches!(
                parse_record(&bytes),
                Err(RecordError::Truncated { what: w, .. }) if w == what
            ));
        }
    }

    #[test]
    fn garbage_never_panics() {
        // Deterministic xorshift so the test is reproducible without a rand dependency.
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut buf = vec![0u8; 300];
        for round in 0..20_000 {
            let len = (next() % 300) as usize;
            for b in buf.iter_mut().take(len) {
                *b = next() as u8;
            }
            // Bias half the rounds towards the interesting types.
            if round % 2 == 0 && len >= 4 {
                let kind = if round % 4 == 0 {
                    PERF_RECORD_SAMPLE
                } else {
                    PERF_RECORD_LOST
                };
                buf[..4].copy_from_slice(&kind.to_le_bytes());
            }
            let _ = parse_record(&buf[..len]);
        }
        // And every prefix of valid records.
        for rec in [sample_bytes(1, 2, 3, &[9; 21]), lost_bytes(4, 5)] {
            for n in 0..=rec.len() {
                let _ = parse_record(&rec[..n]);
            }
        }
    }
}
