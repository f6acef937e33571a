//! Stage 2 (perf), record parsing: turns the bytes of one perf record into a [`Record`].
//! Pure: no I/O, no `unsafe`, no allocation, and no panic on any input. It does not
//! decode the tracepoint payload (that is `decode/`'s job); it only locates it.
//!
//! The layout of a sample follows the event's `sample_type` bits; [`SampleFormat`] is the
//! one place that turns those bits into the positions the parser reads. ntprof-perf opens
//! its events with [`SampleFormat::LEAN`] (`TIME | RAW`, `sample_id_all = 0`):
//!
//! ```text
//! header:             u32 type, u16 misc, u16 size          (size includes the header)
//! PERF_RECORD_SAMPLE: u64 time, u32 raw_size, raw[raw_size] (raw ends 8-aligned)
//! PERF_RECORD_LOST:   u64 id, u64 lost                      (no sample_id trailer)
//! ```
//!
//! Why so little (each field costs the traced task time per event, DESIGN §3): the ring
//! is per CPU, so `PERF_SAMPLE_CPU` repeats what the reader knows; the raw payload starts
//! with `common_type`, which names the event, so `PERF_SAMPLE_IDENTIFIER` is not needed
//! to dispatch; a `PERF_RECORD_LOST` is counted against its ring, and its own body (not
//! the `sample_id_all` trailer) carries the event id anyway.
//!
//! All fields are little-endian and read unaligned, because a record copied out of a wrapped
//! ring or carved from a byte buffer has no alignment guarantee.

use perf_event_open_sys::bindings::{
    PERF_SAMPLE_CPU, PERF_SAMPLE_ID, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD,
    PERF_SAMPLE_RAW, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};

/// Size of `perf_event_header`.
pub const HEADER_LEN: usize = 8;

use perf_event_open_sys::bindings::{PERF_RECORD_LOST, PERF_RECORD_SAMPLE};

/// Where the fields of a sample are, derived from `sample_type`.
///
/// The kernel writes the fixed-size fields in this order (`perf_output_sample`):
/// IDENTIFIER, IP, TID (pid, tid), TIME, ID, STREAM_ID, CPU (cpu, reserved), PERIOD, and
/// RAW last. Only these may be set: anything else (callchains, registers, …) is refused
/// by [`SampleFormat::new`], so the parser never guesses at a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleFormat {
    sample_type: u64,
    /// Offsets from the start of the record (header included).
    identifier: Option<u8>,
    time: Option<u8>,
    cpu: Option<u8>,
    /// Where `raw_size` is, when RAW is set; the raw bytes follow it.
    raw: Option<u8>,
    /// Bytes of fixed fields after the header (what a sample needs at least).
    fixed: u8,
}

/// A `sample_type` bit the parser has no layout for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sample_type {bits:#x} has bits ntprof-perf cannot parse: {unsupported:#x}")]
pub struct UnsupportedSampleType {
    pub bits: u64,
    pub unsupported: u64,
}

impl SampleFormat {
    /// `TIME | RAW`: what ntprof-perf opens its tracepoints with.
    pub const LEAN: SampleFormat =
        match SampleFormat::new((PERF_SAMPLE_TIME | PERF_SAMPLE_RAW) as u64) {
            Ok(f) => f,
            Err(_) => panic!("TIME | RAW has a layout"),
        };

    /// The layout of samples of this `sample_type`.
    pub const fn new(sample_type: u64) -> Result<SampleFormat, UnsupportedSampleType> {
        let known = (PERF_SAMPLE_IDENTIFIER
            | PERF_SAMPLE_IP
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_ID
            | PERF_SAMPLE_STREAM_ID
            | PERF_SAMPLE_CPU
            | PERF_SAMPLE_PERIOD
            | PERF_SAMPLE_RAW) as u64;
        if sample_type & !known != 0 {
            return Err(UnsupportedSampleType {
                bits: sample_type,
                unsupported: sample_type & !known,
            });
        }
        let mut at = HEADER_LEN as u8;
        let mut f = SampleFormat {
            sample_type,
            identifier: None,
            time: None,
            cpu: None,
            raw: None,
            fixed: 0,
        };
        if has(sample_type, PERF_SAMPLE_IDENTIFIER) {
            f.identifier = Some(at);
            at += 8;
        }
        if has(sample_type, PERF_SAMPLE_IP) {
            at += 8;
        }
        if has(sample_type, PERF_SAMPLE_TID) {
            at += 8;
        }
        if has(sample_type, PERF_SAMPLE_TIME) {
            f.time = Some(at);
            at += 8;
        }
        if has(sample_type, PERF_SAMPLE_ID) {
            at += 8;
        }
        if has(sample_type, PERF_SAMPLE_STREAM_ID) {
            at += 8;
        }
        if has(sample_type, PERF_SAMPLE_CPU) {
            f.cpu = Some(at);
            at += 8;
        }
        if has(sample_type, PERF_SAMPLE_PERIOD) {
            at += 8;
        }
        if has(sample_type, PERF_SAMPLE_RAW) {
            f.raw = Some(at);
            at += 4;
        }
        f.fixed = at - HEADER_LEN as u8;
        Ok(f)
    }

    pub fn sample_type(&self) -> u64 {
        self.sample_type
    }

    /// Bytes a sample with `raw_len` bytes of payload takes in the ring (header and
    /// padding included), before the kernel pads RAW to keep the record 8-aligned.
    pub fn sample_len(&self, raw_len: usize) -> usize {
        (HEADER_LEN + self.fixed as usize + raw_len).div_ceil(8) * 8
    }

    /// Parses one whole record, header included. Bytes beyond the header's `size` are
    /// ignored. Always inlined: called once per sample from the ring walk, where a
    /// record returned through the stack cost a store-forwarding stall per sample.
    #[inline(always)]
    pub fn parse<'a>(&self, bytes: &'a [u8]) -> Result<Record<'a>, RecordError> {
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
        match kind {
            PERF_RECORD_SAMPLE => {
                let at = |pos: u8| Reader {
                    buf: record,
                    pos: pos as usize,
                };
                let id = match self.identifier {
                    Some(p) => Some(at(p).u64("sample identifier")?),
                    None => None,
                };
                let time = match self.time {
                    Some(p) => at(p).u64("sample time")?,
                    None => 0,
                };
                let cpu = match self.cpu {
                    Some(p) => Some(at(p).u32("sample cpu")?),
                    None => None,
                };
                let raw: &[u8] = match self.raw {
                    Some(p) => {
                        let mut r = at(p);
                        let raw_size = r.u32("sample raw size")?;
                        r.bytes(raw_size as usize, "sample raw data")?
                    }
                    None => &[],
                };
                Ok(Record::Sample(Sample { id, time, cpu, raw }))
            }
            PERF_RECORD_LOST => {
                let mut r = Reader {
                    buf: record,
                    pos: HEADER_LEN,
                };
                let id = r.u64("lost id")?;
                let lost = r.u64("lost count")?;
                Ok(Record::Lost { id, lost })
            }
            kind => Ok(Record::Other { kind }),
        }
    }
}

const fn has(sample_type: u64, bit: u32) -> bool {
    sample_type & bit as u64 != 0
}

/// One `PERF_RECORD_SAMPLE` of a tracepoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample<'a> {
    /// `PERF_SAMPLE_IDENTIFIER` when requested: which opened event produced it (see
    /// `PerfGroup::event_index`). The raw payload's `common_type` says it too.
    pub id: Option<u64>,
    /// `PERF_SAMPLE_TIME`, in the clock chosen with `use_clockid` (0 when not requested).
    pub time: u64,
    /// `PERF_SAMPLE_CPU` when requested; the ring a sample came from says it too.
    pub cpu: Option<u32>,
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

/// Parses one whole record laid out as ntprof-perf opens its events
/// ([`SampleFormat::LEAN`]).
pub fn parse_record(bytes: &[u8]) -> Result<Record<'_>, RecordError> {
    SampleFormat::LEAN.parse(bytes)
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

    /// `IDENTIFIER | TIME | CPU | RAW`: the layout ntprof-perf used to open events with,
    /// kept for tests that need an id in each sample.
    pub(crate) fn full() -> SampleFormat {
        SampleFormat::new(
            (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW) as u64,
        )
        .unwrap()
    }

    /// Builds a [`full`] SAMPLE record the way the kernel lays it out, padded to 8 bytes.
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

    /// A [`SampleFormat::LEAN`] SAMPLE record, padded to 8 bytes.
    pub(crate) fn lean_bytes(time: u64, raw: &[u8]) -> Vec<u8> {
        let size = (HEADER_LEN + 8 + 4 + raw.len()).div_ceil(8) * 8;
        let mut v = header(PERF_RECORD_SAMPLE, size);
        v.extend_from_slice(&time.to_le_bytes());
        v.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        v.extend_from_slice(raw);
        v.resize(size, 0);
        assert_eq!(SampleFormat::LEAN.sample_len(raw.len()), size);
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
        assert_eq!(full().sample_len(raw.len()), bytes.len());
        let rec = full().parse(&bytes).unwrap();
        assert_eq!(
            rec,
            Record::Sample(Sample {
                id: Some(7),
                time: 1_000,
                cpu: Some(3),
                raw: &raw
            })
        );
    }

    #[test]
    fn parses_lean_sample_16_bytes_smaller() {
        let raw = [0x31, 0x01, 0, 0, 9, 9, 9, 9, 42, 0, 0, 0];
        let bytes = lean_bytes(1_000, &raw);
        assert_eq!(bytes.len() + 16, sample_bytes(7, 1_000, 3, &raw).len());
        assert_eq!(
            parse_record(&bytes).unwrap(),
            Record::Sample(Sample {
                id: None,
                time: 1_000,
                cpu: None,
                raw: &raw
            })
        );
    }

    #[test]
    fn layout_follows_the_sample_type_bits() {
        // perf record's usual tracepoint layout: IP, TID, TIME, CPU, PERIOD, RAW.
        let st = (PERF_SAMPLE_IP
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_CPU
            | PERF_SAMPLE_PERIOD
            | PERF_SAMPLE_RAW) as u64;
        let f = SampleFormat::new(st).unwrap();
        let raw = [1u8, 2, 3, 4, 5];
        let size = f.sample_len(raw.len());
        let mut v = header(PERF_RECORD_SAMPLE, size);
        for x in [
            0xdead_u64,
            0x0000_0007_0000_0006,
            99,
            0x0000_0000_0000_0002,
            1,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&(raw.len() as u32).to_le_bytes());
        v.extend_from_slice(&raw);
        v.resize(size, 0);
        assert_eq!(
            f.parse(&v).unwrap(),
            Record::Sample(Sample {
                id: None,
                time: 99,
                cpu: Some(2),
                raw: &raw
            })
        );
        assert_eq!(f.sample_type(), st);
        let e = SampleFormat::new(st | perf_event_open_sys::bindings::PERF_SAMPLE_CALLCHAIN as u64)
            .unwrap_err();
        assert_eq!(
            e.unsupported,
            perf_event_open_sys::bindings::PERF_SAMPLE_CALLCHAIN as u64
        );
        // No RAW: an empty payload, never a read past the fixed fields.
        let f = SampleFormat::new(PERF_SAMPLE_TIME as u64).unwrap();
        let mut v = header(PERF_RECORD_SAMPLE, 16);
        v.extend_from_slice(&5u64.to_le_bytes());
        assert!(matches!(
            f.parse(&v),
            Ok(Record::Sample(Sample {
                time: 5,
                raw: &[],
                ..
            }))
        ));
    }

    #[test]
    fn parses_sample_at_odd_address() {
        // Unaligned reads: shift the record by one byte inside a buffer.
        let bytes = sample_bytes(u64::MAX, 5, 1, &[1, 2, 3]);
        let mut shifted = vec![0xAA];
        shifted.extend_from_slice(&bytes);
        match full().parse(&shifted[1..]).unwrap() {
            Record::Sample(s) => {
                assert_eq!(s.id, Some(u64::MAX));
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
            full().parse(&bytes),
            Err(RecordError::Truncated {
                what: "sample raw data",
                needed: 36 + 1000,
                present: size,
            })
        );
        bytes[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            full().parse(&bytes),
            Err(RecordError::Truncated {
                what: "sample raw data",
                ..
            })
        ));
    }

    #[test]
    fn every_sample_field_truncation_is_named() {
        // Shrinking the header size field cuts the record at each field in turn.
        let cases = [
            (
                full(),
                sample_bytes(1, 2, 3, &[4; 4]),
                vec![
                    (8, "sample identifier"),
                    (16, "sample time"),
                    (24, "sample cpu"),
                    (28, "sample raw size"),
                    (32, "sample raw size"),
                    (36, "sample raw data"),
                ],
            ),
            (
                SampleFormat::LEAN,
                lean_bytes(2, &[4; 4]),
                vec![
                    (8, "sample time"),
                    (16, "sample raw size"),
                    (20, "sample raw data"),
                ],
            ),
        ];
        for (format, whole, expect) in cases {
            for (size, what) in expect {
                let mut bytes = whole.clone();
                bytes[6..8].copy_from_slice(&(size as u16).to_le_bytes());
                match format.parse(&bytes) {
                    Err(RecordError::Truncated {
                        what: w, present, ..
                    }) => {
                        assert_eq!((w, present), (what, size), "cut at {size}")
                    }
                    other => panic!("cut at {size}: expected truncation, got {other:?}"),
                }
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
            let _ = full().parse(&buf[..len]);
        }
        // And every prefix of valid records.
        for rec in [
            sample_bytes(1, 2, 3, &[9; 21]),
            lean_bytes(2, &[9; 21]),
            lost_bytes(4, 5),
        ] {
            for n in 0..=rec.len() {
                let _ = parse_record(&rec[..n]);
                let _ = full().parse(&rec[..n]);
            }
        }
    }
}
