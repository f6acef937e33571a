//! CSV sink: one row per I/O, header first, cells straight from the record's column
//! table.
//!
//! Rows are rendered into one buffer without `fmt` or allocation per row, and the
//! buffer is handed to the output only in whole rows: a run killed at any moment
//! (even SIGKILL, short of a write the kernel itself cuts) leaves a file of whole
//! lines. `flush` (called every second by the live loop) bounds what a crash loses.

use super::time::WallCache;
use super::SinkError;
use crate::record::{IoRecord, Schema, Value};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Rows are written out when this much is buffered.
const CHUNK: usize = 1 << 16;

pub struct CsvSink {
    out: Box<dyn Write>,
    /// Bytes, not a `String`: numbers are rendered without a UTF-8 check each.
    buf: Vec<u8>,
    what: String,
    clock: WallCache,
    rows: u64,
}

impl CsvSink {
    /// Create the output now, so a bad path fails before any tracing starts.
    pub fn create(
        path: Option<&Path>,
        schema: &Schema,
        clock: super::time::WallClock,
    ) -> Result<CsvSink, SinkError> {
        let (out, what): (Box<dyn Write>, String) = match path {
            Some(p) => {
                let f = File::create(p).map_err(|source| SinkError::Create {
                    path: p.to_path_buf(),
                    source,
                })?;
                (Box::new(f), p.display().to_string())
            }
            None => (Box::new(std::io::stdout()), "standard output".to_string()),
        };
        Self::from_writer(out, what, schema, clock)
    }

    pub fn from_writer(
        out: Box<dyn Write>,
        what: String,
        schema: &Schema,
        clock: super::time::WallClock,
    ) -> Result<CsvSink, SinkError> {
        let mut s = CsvSink {
            out,
            buf: Vec::with_capacity(CHUNK + 4096),
            what,
            clock: WallCache::new(clock),
            rows: 0,
        };
        for (i, name) in schema.names().enumerate() {
            if i > 0 {
                s.buf.push(b',');
            }
            push_field(&mut s.buf, name);
        }
        s.buf.push(b'\n');
        // The header goes out at once: a reader sees the columns before any row.
        s.flush()?;
        Ok(s)
    }

    pub fn record(&mut self, r: &dyn IoRecord) -> Result<(), SinkError> {
        let n = r.schema().columns.len();
        for i in 0..n {
            if i > 0 {
                self.buf.push(b',');
            }
            match r.value(i) {
                Value::Time(t) => self.clock.push_bytes(t, &mut self.buf),
                Value::U64(v) => crate::record::put_u64(&mut self.buf, v),
                Value::Str(s) => push_field(&mut self.buf, s),
                Value::String(s) => push_field(&mut self.buf, &s),
                v => v.write_bytes(&mut self.buf),
            }
        }
        self.buf.push(b'\n');
        self.rows += 1;
        if self.buf.len() >= CHUNK {
            self.write_buffered()?;
        }
        Ok(())
    }

    /// A record whose start is rendered with another recording's clock (`merge`).
    pub fn record_with_clock(
        &mut self,
        r: &dyn IoRecord,
        clock: super::time::WallClock,
    ) -> Result<(), SinkError> {
        let own = std::mem::replace(&mut self.clock, WallCache::new(clock));
        let res = self.record(r);
        self.clock = own;
        res
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    fn write_buffered(&mut self) -> Result<(), SinkError> {
        let res = self.out.write_all(&self.buf);
        self.buf.clear();
        res.map_err(|source| self.err(source))
    }

    fn err(&self, source: std::io::Error) -> SinkError {
        SinkError::Write {
            what: self.what.clone(),
            source,
        }
    }

    /// Hand every whole row written so far to the output.
    pub fn flush(&mut self) -> Result<(), SinkError> {
        self.write_buffered()?;
        self.out.flush().map_err(|source| self.err(source))
    }

    /// Flush everything; the error is returned, not swallowed.
    pub fn finish(&mut self) -> Result<(), SinkError> {
        self.flush()
    }
}

/// A cell, quoted when it holds a separator, a quote or a line break.
fn push_field(buf: &mut Vec<u8>, s: &str) {
    if s.bytes().any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r')) {
        buf.push(b'"');
        for &b in s.as_bytes() {
            if b == b'"' {
                buf.push(b'"');
            }
            buf.push(b);
        }
        buf.push(b'"');
    } else {
        buf.extend_from_slice(s.as_bytes());
    }
}

/// Read a recorded CSV back for `report` and `merge`.
pub fn open_reader(path: &Path) -> Result<csv::Reader<File>, SinkError> {
    let f = File::open(path).map_err(|source| SinkError::Open {
        path: PathBuf::from(path),
        source,
    })?;
    Ok(csv::ReaderBuilder::new().has_headers(true).from_reader(f))
}

impl super::recorder::RowWriter for CsvSink {
    fn write(&mut self, r: &dyn IoRecord) -> Result<(), SinkError> {
        CsvSink::record(self, r)
    }

    fn flush(&mut self) -> Result<(), SinkError> {
        CsvSink::flush(self)
    }

    fn finish(&mut self) -> Result<(), SinkError> {
        CsvSink::finish(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_only_when_needed() {
        let mut b = Vec::new();
        push_field(&mut b, "loop0");
        b.push(b',');
        push_field(&mut b, "a,\"b\"");
        assert_eq!(b, b"loop0,\"a,\"\"b\"\"\"");
    }
}
