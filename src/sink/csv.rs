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
    /// The output when it is a file: a write cut short (ENOSPC after a partial write)
    /// is cut back to its last whole line.
    file: Option<File>,
    /// Bytes the file holds, all whole lines.
    committed: u64,
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
        let create = |p: &Path| {
            let f = File::create(p)?;
            let again = f.try_clone()?;
            Ok::<_, std::io::Error>((f, again))
        };
        match path {
            Some(p) => {
                let (f, again) = create(p).map_err(|source| SinkError::Create {
                    path: p.to_path_buf(),
                    source,
                })?;
                let mut s = Self::new(Box::new(f), p.display().to_string(), clock);
                s.file = Some(again);
                s.header(schema)?;
                Ok(s)
            }
            None => Self::from_writer(
                Box::new(std::io::stdout()),
                "standard output".to_string(),
                schema,
                clock,
            ),
        }
    }

    fn new(out: Box<dyn Write>, what: String, clock: super::time::WallClock) -> CsvSink {
        CsvSink {
            out,
            file: None,
            committed: 0,
            buf: Vec::with_capacity(CHUNK + 4096),
            what,
            clock: WallCache::new(clock),
            rows: 0,
        }
    }

    pub fn from_writer(
        out: Box<dyn Write>,
        what: String,
        schema: &Schema,
        clock: super::time::WallClock,
    ) -> Result<CsvSink, SinkError> {
        let mut s = Self::new(out, what, clock);
        s.header(schema)?;
        Ok(s)
    }

    fn header(&mut self, schema: &Schema) -> Result<(), SinkError> {
        for (i, name) in schema.names().enumerate() {
            if i > 0 {
                self.buf.push(b',');
            }
            push_field(&mut self.buf, name);
        }
        self.buf.push(b'\n');
        // The header goes out at once: a reader sees the columns before any row.
        self.flush()
    }

    pub fn record(&mut self, r: &dyn IoRecord) -> Result<(), SinkError> {
        let clock = &mut self.clock;
        r.write_csv(&mut CsvRow {
            buf: &mut self.buf,
            time: &mut |t, buf| clock.push_bytes(t, buf),
        });
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
        let mut done = 0;
        let res = loop {
            if done == self.buf.len() {
                break Ok(());
            }
            match self.out.write(&self.buf[done..]) {
                Ok(0) => break Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        if res.is_err() {
            // Part of the buffer went out (the disk filled mid-write): keep only its
            // whole lines, so the file never ends in half a row.
            let whole = self.buf[..done]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            if let Some(f) = &self.file {
                if whole < done {
                    let _ = f.set_len(self.committed + whole as u64);
                }
            }
            done = whole;
        }
        self.committed += done as u64;
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

/// A row being rendered: where [`IoRecord::write_csv`] puts its cells.
pub struct CsvRow<'a> {
    buf: &'a mut Vec<u8>,
    /// A start time: wall-clock text from the sink's clock.
    time: &'a mut dyn FnMut(u64, &mut Vec<u8>),
}

impl CsvRow<'_> {
    /// One cell, after a separator unless it is the row's first. Inlined into each
    /// column of [`IoRecord::write_csv`]'s unrolled table, where the `Value`'s variant is
    /// known and the match folds away.
    #[inline(always)]
    pub fn cell(&mut self, first: bool, v: Value<'_>) {
        if !first {
            self.buf.push(b',');
        }
        match v {
            Value::Time(t) => (self.time)(t, self.buf),
            Value::U64(v) => crate::record::put_u64(self.buf, v),
            Value::Str(s) => push_field(self.buf, s),
            Value::String(s) => push_field(self.buf, &s),
            v => v.write_bytes(self.buf),
        }
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
    fn write(&mut self, r: &dyn IoRecord, _sample: u32) -> Result<(), SinkError> {
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

    /// A file that takes `room` bytes and then fails like a full disk.
    struct Full {
        file: File,
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = b.len().min(self.room);
            self.room -= n;
            self.file.write(&b[..n])
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_write_cut_by_a_full_disk_leaves_whole_lines() {
        let path = std::env::temp_dir().join(format!("ntprof-csv-full-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        let mut s = CsvSink::new(
            Box::new(Full {
                file: file.try_clone().unwrap(),
                room: 27,
            }),
            "full".into(),
            super::super::time::WallClock::now(),
        );
        s.file = Some(file);
        s.buf
            .extend_from_slice(b"a,b\n1,2\n3,4\n5,6\n7,8\n9,10\n11,12\n");
        assert!(s.flush().is_err());
        let text = std::fs::read_to_string(&path).unwrap();
        // 27 bytes went out: 6 whole lines (25 bytes) and two bytes of the next.
        assert_eq!(text, "a,b\n1,2\n3,4\n5,6\n7,8\n9,10\n");
        let _ = std::fs::remove_file(path);
    }

    /// A record of 40 columns, more than `write_csv` unrolls, in four kinds of cell.
    struct Wide(u64);

    macro_rules! wide_columns {
        ($($i:literal)*) => {
            &[$(crate::record::col(
                concat!("c", $i),
                crate::record::Role::Value,
                crate::record::Kind::U64,
                |r: &Wide| match $i % 4 {
                    0 => Value::U64(r.0 + $i),
                    1 => Value::Empty,
                    2 => Value::Str(if $i == 2 { "a,b" } else { "x" }),
                    _ => Value::Named("nvme", $i),
                },
            )),*]
        };
    }

    static WIDE: &[crate::record::Column<Wide>] = wide_columns!(
        0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29
        30 31 32 33 34 35 36 37 38 39
    );

    impl crate::record::Tabled for Wide {
        const PROFILE: &'static str = "wide";
        const COLUMNS: &'static [crate::record::Column<Wide>] = WIDE;
        fn table() -> &'static Schema {
            static S: std::sync::OnceLock<Schema> = std::sync::OnceLock::new();
            crate::record::schema_cell::<Self>(&S)
        }
        fn first_ns(&self) -> u64 {
            self.0
        }
        fn outcome(&self) -> crate::record::Status {
            crate::record::Status::Ok
        }
        fn set_outcome(&mut self, _: crate::record::Status) {}
    }

    /// `write_csv` unrolls the column table; each row must still be every column, in
    /// order, as the table's getters give it (tables wider than the unrolling too).
    fn by_the_table<R: crate::record::Tabled>(r: &R) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut row = CsvRow {
            buf: &mut buf,
            time: &mut |t, b| crate::record::put_u64(b, t),
        };
        for (i, c) in R::COLUMNS.iter().enumerate() {
            row.cell(i == 0, (c.get)(r));
        }
        buf
    }

    fn written<R: crate::record::Tabled>(r: &R) -> Vec<u8> {
        let mut buf = Vec::new();
        r.write_csv(&mut CsvRow {
            buf: &mut buf,
            time: &mut |t, b| crate::record::put_u64(b, t),
        });
        buf
    }

    #[test]
    fn the_unrolled_row_writer_writes_every_column_in_order() {
        let w = Wide(1000);
        let text = String::from_utf8(written(&w)).unwrap();
        assert_eq!(text, String::from_utf8(by_the_table(&w)).unwrap());
        let cells: Vec<&str> = text.split(',').collect();
        // 40 columns, "a,b" quoted (one extra split).
        assert_eq!(cells.len(), 41, "{text}");
        assert_eq!(
            (cells[0], cells[1], cells[2], cells[4], cells[40]),
            ("1000", "", "\"a", "nvme3", "nvme39"),
            "{text}"
        );
        for r in [
            crate::sink::testrec::T::new(5, "read", Some(7), None),
            crate::sink::testrec::T::new(9, "write,x", None, Some(-3)),
        ] {
            assert_eq!(written(&r), by_the_table(&r));
        }
    }

    #[test]
    fn fields_are_quoted_only_when_needed() {
        let mut b = Vec::new();
        push_field(&mut b, "loop0");
        b.push(b',');
        push_field(&mut b, "a,\"b\"");
        assert_eq!(b, b"loop0,\"a,\"\"b\"\"\"");
    }
}
