//! Field binding: look a field up by name once, check it has the expected kind, and keep
//! only its offset and size so that reading a sample is a bounds-checked offset read.

use super::DecodeError;
use crate::tracefs::{EventFormat, FieldShape};

/// What a decoder expects a field to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// An integer of 1, 2, 4 or 8 bytes, read as unsigned (sign-extended when the format
    /// says signed).
    Int,
    /// A fixed `char[N]` array holding a NUL-terminated string.
    CharArray,
    /// A fixed byte array of at least this many bytes (`u8 cdw10[24]`).
    Bytes(u32),
    /// A `__data_loc` or `__rel_loc` dynamic array.
    Dynamic,
}

impl Want {
    fn describe(self) -> String {
        match self {
            Want::Int => "an integer of 1, 2, 4 or 8 bytes".into(),
            Want::CharArray => "a fixed char array".into(),
            Want::Bytes(n) => format!("a byte array of at least {n} bytes"),
            Want::Dynamic => "a __data_loc/__rel_loc array".into(),
        }
    }
}

/// A bound field: where it is and how to read it. Copy, so layouts are plain data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldReader {
    offset: usize,
    size: usize,
    signed: bool,
    shape: FieldShape,
    /// For integers of 1, 2, 4 or 8 bytes, how to cut the field out of an 8-byte
    /// little-endian load: the mask of its bytes, and its sign bit when signed (0
    /// otherwise), so that `((w & mask) ^ sign) - sign` keeps and sign-extends it with
    /// no branch. `None` otherwise.
    int: Option<(u64, u64)>,
}

impl FieldReader {
    /// Bind `field` of `fmt` (event called `event` in errors), checking it is a `want`.
    pub fn bind(
        fmt: &EventFormat,
        event: &str,
        field: &str,
        want: Want,
    ) -> Result<FieldReader, DecodeError> {
        let f = fmt.field(field).ok_or_else(|| DecodeError::MissingField {
            event: event.to_string(),
            field: field.to_string(),
        })?;
        let ok = match want {
            Want::Int => f.shape == FieldShape::Scalar && matches!(f.size, 1 | 2 | 4 | 8),
            Want::CharArray => matches!(f.shape, FieldShape::Array { .. }) && f.size > 0,
            Want::Bytes(n) => matches!(f.shape, FieldShape::Array { .. }) && f.size >= n,
            Want::Dynamic => matches!(f.shape, FieldShape::DataLoc | FieldShape::RelLoc),
        };
        if !ok {
            return Err(DecodeError::FieldKind {
                event: event.to_string(),
                field: field.to_string(),
                expected: want.describe(),
                found: format!(
                    "`{} {}` ({} bytes, {:?})",
                    f.type_name, f.name, f.size, f.shape
                ),
            });
        }
        let int = f.shape == FieldShape::Scalar && matches!(f.size, 1 | 2 | 4 | 8);
        Ok(FieldReader {
            offset: f.offset as usize,
            size: f.size as usize,
            signed: f.signed,
            shape: f.shape,
            int: int.then(|| {
                let bits = 8 * f.size;
                let mask = u64::MAX >> (64 - bits);
                let sign = if f.signed { 1u64 << (bits - 1) } else { 0 };
                (mask, sign)
            }),
        })
    }

    /// Bind when present; `None` when the kernel does not have the field.
    pub fn bind_opt(
        fmt: &EventFormat,
        event: &str,
        field: &str,
        want: Want,
    ) -> Result<Option<FieldReader>, DecodeError> {
        if fmt.field(field).is_none() {
            return Ok(None);
        }
        Self::bind(fmt, event, field, want).map(Some)
    }

    /// First byte past the field: a record shorter than this is truncated.
    pub fn end(&self) -> usize {
        self.offset + self.size
    }

    fn bytes<'a>(&self, raw: &'a [u8]) -> &'a [u8] {
        raw.get(self.offset..self.offset + self.size).unwrap_or(&[])
    }

    /// The integer value; 0 when the record is too short (callers check `end()` first).
    /// The field as an integer (sign-extended when signed); 0 when the record is too
    /// short for it. One unaligned 8-byte load, a mask and a sign fix-up when 8 bytes fit
    /// from the field's offset, which is every field but those at a record's very end.
    #[inline]
    pub fn u64(&self, raw: &[u8]) -> u64 {
        if let (Some((mask, sign)), Some(b)) = (self.int, raw.get(self.offset..self.offset + 8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            return ((u64::from_le_bytes(w) & mask) ^ sign).wrapping_sub(sign);
        }
        self.u64_slow(raw)
    }

    fn u64_slow(&self, raw: &[u8]) -> u64 {
        let b = self.bytes(raw);
        match *b {
            [a] => {
                if self.signed {
                    a as i8 as i64 as u64
                } else {
                    a as u64
                }
            }
            [a, b2] => {
                let v = u16::from_le_bytes([a, b2]);
                if self.signed {
                    v as i16 as i64 as u64
                } else {
                    v as u64
                }
            }
            [a, b2, c, d] => {
                let v = u32::from_le_bytes([a, b2, c, d]);
                if self.signed {
                    v as i32 as i64 as u64
                } else {
                    v as u64
                }
            }
            [a, b2, c, d, e, f, g, h] => u64::from_le_bytes([a, b2, c, d, e, f, g, h]),
            _ => 0,
        }
    }

    #[inline]
    pub fn i64(&self, raw: &[u8]) -> i64 {
        self.u64(raw) as i64
    }

    #[inline]
    pub fn u32(&self, raw: &[u8]) -> u32 {
        self.u64(raw) as u32
    }

    /// A fixed array's bytes.
    pub fn array<'a>(&self, raw: &'a [u8]) -> &'a [u8] {
        self.bytes(raw)
    }

    /// A `char[N]` as text up to the first NUL (lossy on non-UTF-8).
    pub fn str<'a>(&self, raw: &'a [u8]) -> &'a [u8] {
        let b = self.bytes(raw);
        let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        &b[..n]
    }

    /// The payload of a `__data_loc`/`__rel_loc` field; empty when it points outside
    /// the record (never panics on a bad record).
    pub fn dynamic<'a>(&self, raw: &'a [u8]) -> &'a [u8] {
        let b = self.bytes(raw);
        let word = match *b {
            [a, b2, c, d] => u32::from_le_bytes([a, b2, c, d]),
            _ => return &[],
        };
        let off = (word & 0xffff) as usize;
        let len = (word >> 16) as usize;
        let start = match self.shape {
            FieldShape::RelLoc => self.end() + off,
            _ => off,
        };
        raw.get(start..start + len).unwrap_or(&[])
    }
}

/// A bound integer field in 16 bytes, for layouts that read many fields per sample.
/// [`IntField::ABSENT`] reads 0, so that a layout can read every slot of its event
/// type whether or not this event kind carries it, with no branch per field.
///
/// It reads the field's bits zero-extended: a signed field reads right when cast to
/// its own width or a narrower one (`int ctrl_id` as `i32` or `u32`), which is all a
/// compact event keeps; [`FieldReader`] sign-extends for callers that widen.
///
/// A layout first checks that a record holds all its fields, then places each field
/// within that length ([`IntField::within`]): every read is then one 8-byte load that
/// stays inside the record, a shift and a mask, even for a field at the record's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntField {
    /// Where the 8-byte load starts: the field's offset, or less when the field ends
    /// within 8 bytes of the checked length.
    base: u32,
    /// Bits from the load's start to the field's.
    shift: u32,
    /// The mask of the field's bits; 0 for [`IntField::ABSENT`].
    mask: u64,
    offset: u32,
    size: u32,
}

impl IntField {
    /// A field the event does not have: reads 0.
    pub const ABSENT: IntField = IntField {
        base: 0,
        shift: 0,
        mask: 0,
        offset: 0,
        size: 0,
    };

    /// Bind `field` of `fmt` as an integer of 1, 2, 4 or 8 bytes.
    pub fn bind(fmt: &EventFormat, event: &str, field: &str) -> Result<IntField, DecodeError> {
        FieldReader::bind(fmt, event, field, Want::Int).map(IntField::from)
    }

    /// First byte past the field (0 for [`IntField::ABSENT`]).
    pub fn end(&self) -> usize {
        self.offset as usize + self.size as usize
    }

    /// This field read from records of at least `len` bytes (`len` ≥ its end, checked
    /// before each read): its load moved back so that it ends by `len`.
    pub fn within(self, len: usize) -> IntField {
        if self.mask == 0 || len < 8 || self.offset as usize + 8 <= len {
            return self;
        }
        let base = (len - 8) as u32;
        IntField {
            base,
            shift: 8 * (self.offset - base),
            ..self
        }
    }

    /// The field's bits, zero-extended; 0 when absent. On a record shorter than the
    /// length it was placed [`within`](Self::within), 0 or a partial value, never a
    /// panic: callers check the length first.
    #[inline(always)]
    pub fn get(&self, raw: &[u8]) -> u64 {
        let at = self.base as usize;
        let Some(b) = raw.get(at..at + 8) else {
            return self.get_short(raw);
        };
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        (u64::from_le_bytes(w) >> self.shift) & self.mask
    }

    /// A record too short for the 8-byte load: byte by byte.
    #[cold]
    fn get_short(&self, raw: &[u8]) -> u64 {
        let at = self.offset as usize;
        let Some(b) = raw.get(at..at + self.size as usize) else {
            return 0;
        };
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        u64::from_le_bytes(w)
    }
}

impl From<FieldReader> for IntField {
    /// Only for a reader bound with [`Want::Int`] (1, 2, 4 or 8 bytes).
    fn from(f: FieldReader) -> IntField {
        let (mask, _) = f.int.unwrap_or((0, 0));
        IntField {
            base: f.offset as u32,
            shift: 0,
            mask,
            offset: f.offset as u32,
            size: if mask == 0 { 0 } else { f.size as u32 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracefs::parse_format;

    fn fmt() -> EventFormat {
        parse_format(
            "name: t\nID: 7\nformat:\n\
             \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:s8 a;\toffset:2;\tsize:1;\tsigned:1;\n\
             \tfield:u8 b;\toffset:3;\tsize:1;\tsigned:0;\n\
             \tfield:short c;\toffset:4;\tsize:2;\tsigned:1;\n\
             \tfield:int d;\toffset:8;\tsize:4;\tsigned:1;\n\
             \tfield:u32 e;\toffset:12;\tsize:4;\tsigned:0;\n\
             \tfield:u64 f;\toffset:16;\tsize:8;\tsigned:0;\n\
             \tfield:char disk[8];\toffset:24;\tsize:8;\tsigned:0;\n\
             \tfield:__data_loc char[] name;\toffset:32;\tsize:4;\tsigned:0;\n\
             \tfield:__rel_loc char[] rel;\toffset:36;\tsize:4;\tsigned:0;\n\
             \tfield:bool flag;\toffset:40;\tsize:1;\tsigned:0;\n\
             \tfield:u8 cdw10[4];\toffset:41;\tsize:4;\tsigned:0;\n",
        )
        .unwrap()
    }

    fn record() -> Vec<u8> {
        let mut r = vec![0u8; 56];
        r[0..2].copy_from_slice(&7u16.to_le_bytes());
        r[2] = 0xff; // a = -1
        r[3] = 0xff; // b = 255
        r[4..6].copy_from_slice(&(-2i16).to_le_bytes());
        r[8..12].copy_from_slice(&(-3i32).to_le_bytes());
        r[12..16].copy_from_slice(&0xdead_beefu32.to_le_bytes());
        r[16..24].copy_from_slice(&0x0123_4567_89ab_cdefu64.to_le_bytes());
        r[24..29].copy_from_slice(b"nvme\0");
        // __data_loc: "hi" at offset 46 (from record start), length 3 incl. NUL.
        r[32..36].copy_from_slice(&((3u32 << 16) | 46).to_le_bytes());
        r[46..49].copy_from_slice(b"hi\0");
        // __rel_loc: "yo" at 40 (end of field) + 10 = 50.
        r[36..40].copy_from_slice(&((2u32 << 16) | 10).to_le_bytes());
        r[50..52].copy_from_slice(b"yo");
        r[40] = 1;
        r[41..45].copy_from_slice(&[1, 2, 3, 4]);
        r
    }

    fn b(name: &str, want: Want) -> FieldReader {
        FieldReader::bind(&fmt(), "t:t", name, want).unwrap()
    }

    #[test]
    fn reads_every_shape() {
        let r = record();
        assert_eq!(b("common_type", Want::Int).u64(&r), 7);
        assert_eq!(b("a", Want::Int).i64(&r), -1);
        assert_eq!(b("b", Want::Int).u64(&r), 255);
        assert_eq!(b("c", Want::Int).i64(&r), -2);
        assert_eq!(b("d", Want::Int).i64(&r), -3);
        assert_eq!(b("e", Want::Int).u64(&r), 0xdead_beef);
        assert_eq!(b("f", Want::Int).u64(&r), 0x0123_4567_89ab_cdef);
        assert_eq!(b("disk", Want::CharArray).str(&r), b"nvme");
        assert_eq!(b("name", Want::Dynamic).dynamic(&r), b"hi\0");
        assert_eq!(b("rel", Want::Dynamic).dynamic(&r), b"yo");
        assert_eq!(b("flag", Want::Int).u64(&r), 1);
        assert_eq!(b("cdw10", Want::Bytes(4)).array(&r), &[1, 2, 3, 4]);
    }

    /// A field whose 8-byte load would run past the record reads the same through the
    /// slow path, signed or not.
    #[test]
    fn fields_at_the_end_of_a_record_read_the_same() {
        let r = record();
        for (name, end) in [
            ("a", 3),
            ("b", 4),
            ("c", 6),
            ("d", 12),
            ("e", 16),
            ("f", 24),
        ] {
            let f = b(name, Want::Int);
            assert_eq!(f.u64(&r[..end]), f.u64(&r), "{name}");
            assert_eq!(f.u64(&r[..end - 1]), 0, "{name} cut short");
        }
        assert_eq!(b("a", Want::Int).i64(&r[..3]), -1);
        assert_eq!(b("d", Want::Int).i64(&r[..12]), -3);
    }

    /// The compact reader reads every integer shape as the full one does, at the end
    /// of a record too (a signed field's bits, right at its own width), and an absent
    /// field reads 0.
    #[test]
    fn int_fields_read_as_field_readers_do() {
        let r = record();
        for (name, bits) in [
            ("common_type", 16),
            ("a", 8),
            ("b", 8),
            ("c", 16),
            ("d", 32),
            ("e", 32),
            ("f", 64),
            ("flag", 8),
        ] {
            let f = b(name, Want::Int);
            let i = IntField::from(f);
            let own = |v: u64| v & (u64::MAX >> (64 - bits));
            assert_eq!(i.get(&r), own(f.u64(&r)), "{name}");
            assert_eq!(i.end(), f.end(), "{name}");
            for end in 0..=r.len() {
                let want = own(f.u64(&r[..end]));
                assert_eq!(i.get(&r[..end]), want, "{name} in {end} bytes");
                // Placed within a record of exactly its end or more: the same value
                // with the load inside the record.
                if end >= f.end() {
                    let w = i.within(end);
                    assert_eq!(w.get(&r[..end]), own(f.u64(&r)), "{name} within {end}");
                    assert_eq!(w.get(&r), own(f.u64(&r)), "{name} within {end}, longer");
                    // A record of 8 bytes or more holds the load (a shorter one reads
                    // byte by byte).
                    assert!(end < 8 || w.base as usize + 8 <= end, "{name} within {end}");
                }
            }
        }
        assert_eq!(IntField::ABSENT.get(&r), 0);
        assert_eq!(IntField::ABSENT.get(&r[..3]), 0);
        assert_eq!(IntField::ABSENT.within(3).get(&r[..3]), 0);
        assert_eq!(IntField::ABSENT.end(), 0);
        // Signed, at its own width: `a` is -1, `d` -3.
        assert_eq!(IntField::from(b("a", Want::Int)).get(&r) as i8, -1);
        assert_eq!(IntField::from(b("d", Want::Int)).get(&r) as i32, -3);
        assert!(IntField::bind(&fmt(), "t:t", "disk").is_err());
    }

    #[test]
    fn short_or_corrupt_records_read_as_empty_not_panic() {
        let r = record();
        let short = &r[..20];
        assert_eq!(b("f", Want::Int).u64(short), 0);
        assert_eq!(b("disk", Want::CharArray).str(short), b"");
        let mut bad = r.clone();
        bad[32..36].copy_from_slice(&((200u32 << 16) | 50).to_le_bytes());
        assert_eq!(b("name", Want::Dynamic).dynamic(&bad), b"");
        bad[36..40].copy_from_slice(&0xffff_ffffu32.to_le_bytes());
        assert_eq!(b("rel", Want::Dynamic).dynamic(&bad), b"");
    }

    #[test]
    fn binding_checks_name_and_kind() {
        let f = fmt();
        let e = FieldReader::bind(&f, "t:t", "nope", Want::Int).unwrap_err();
        assert!(
            e.to_string().contains("nope") && e.to_string().contains("t:t"),
            "{e}"
        );
        let e = FieldReader::bind(&f, "t:t", "disk", Want::Int).unwrap_err();
        assert!(e.to_string().contains("integer"), "{e}");
        assert!(FieldReader::bind(&f, "t:t", "cdw10", Want::Bytes(24)).is_err());
        assert!(FieldReader::bind(&f, "t:t", "f", Want::Dynamic).is_err());
        assert_eq!(
            FieldReader::bind_opt(&f, "t:t", "nope", Want::Int).unwrap(),
            None
        );
    }
}
