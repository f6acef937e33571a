//! Build raw tracepoint records from a format file, for tests and benchmarks of the
//! stages that this host cannot feed for real (nvme, nvme_tcp) and for replaying large
//! synthetic streams. Records are laid out by the same format files the decoder reads,
//! so a synthetic record is byte-for-byte what that kernel would write.

use crate::tracefs::{EventFormat, FieldShape};

/// One record under construction.
#[derive(Debug, Clone)]
pub struct RecordBuilder<'f> {
    fmt: &'f EventFormat,
    buf: Vec<u8>,
}

impl<'f> RecordBuilder<'f> {
    /// A zeroed record of the event's fixed size with `common_type` set.
    pub fn new(fmt: &'f EventFormat) -> RecordBuilder<'f> {
        let mut buf = vec![0u8; fmt.fixed_size() as usize];
        let id = (fmt.id as u16).to_le_bytes();
        buf[..2].copy_from_slice(&id);
        RecordBuilder { fmt, buf }
    }

    fn field(&self, name: &str) -> &crate::tracefs::Field {
        self.fmt
            .field(name)
            .unwrap_or_else(|| panic!("event {} has no field {name}", self.fmt.name))
    }

    /// Set an integer field (truncated to the field's size, little-endian).
    pub fn int(mut self, name: &str, v: u64) -> Self {
        let f = self.field(name).clone();
        assert_eq!(f.shape, FieldShape::Scalar, "{name} is not a scalar");
        let bytes = v.to_le_bytes();
        let (o, n) = (f.offset as usize, f.size as usize);
        self.buf[o..o + n].copy_from_slice(&bytes[..n]);
        self
    }

    /// Set a fixed array field from bytes (NUL-padded, cut to the field's size).
    pub fn bytes(mut self, name: &str, v: &[u8]) -> Self {
        let f = self.field(name).clone();
        let (o, n) = (f.offset as usize, f.size as usize);
        self.buf[o..o + n].fill(0);
        let k = v.len().min(n);
        self.buf[o..o + k].copy_from_slice(&v[..k]);
        self
    }

    /// Append a `__data_loc` payload and point the field at it.
    pub fn dynamic(mut self, name: &str, v: &[u8]) -> Self {
        let f = self.field(name).clone();
        let start = self.buf.len();
        self.buf.extend_from_slice(v);
        let o = f.offset as usize;
        let word = match f.shape {
            FieldShape::RelLoc => ((v.len() as u32) << 16) | (start - (o + 4)) as u32,
            _ => ((v.len() as u32) << 16) | start as u32,
        };
        self.buf[o..o + 4].copy_from_slice(&word.to_le_bytes());
        self
    }

    pub fn build(self) -> Vec<u8> {
        self.buf
    }
}
