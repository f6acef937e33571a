//! CSV sink: one row per I/O, header first, streamed through a buffered writer.

use super::time::WallClock;
use super::SinkError;
use crate::correlate::{Cell, IoRecord, ProfileInfo};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

pub struct CsvSink {
    w: csv::Writer<Box<dyn Write>>,
    what: String,
    clock: WallClock,
    rows: u64,
    // Reused per row so writing does not allocate per cell.
    buf: String,
}

impl CsvSink {
    /// Create the output now, so a bad path fails before any tracing starts.
    pub fn create(
        path: Option<&Path>,
        info: &ProfileInfo,
        clock: WallClock,
    ) -> Result<CsvSink, SinkError> {
        let (out, what): (Box<dyn Write>, String) = match path {
            Some(p) => {
                let f = File::create(p).map_err(|source| SinkError::Create {
                    path: p.to_path_buf(),
                    source,
                })?;
                (
                    Box::new(BufWriter::with_capacity(1 << 16, f)),
                    p.display().to_string(),
                )
            }
            None => (
                Box::new(BufWriter::with_capacity(1 << 16, std::io::stdout())),
                "standard output".to_string(),
            ),
        };
        Self::from_writer(out, what, info, clock)
    }

    pub fn from_writer(
        out: Box<dyn Write>,
        what: String,
        info: &ProfileInfo,
        clock: WallClock,
    ) -> Result<CsvSink, SinkError> {
        let mut w = csv::WriterBuilder::new().from_writer(out);
        w.write_record(info.columns)
            .map_err(|e| csv_err(&what, e))?;
        Ok(CsvSink {
            w,
            what,
            clock,
            rows: 0,
            buf: String::new(),
        })
    }

    pub fn record<R: IoRecord>(&mut self, r: &R) -> Result<(), SinkError> {
        use std::fmt::Write as _;
        let mut err = None;
        let start = r.start_ns();
        let wall = self.clock.format(start);
        let w = &mut self.w;
        let buf = &mut self.buf;
        let mut put = |c: Cell<'_>| {
            if err.is_some() {
                return;
            }
            buf.clear();
            let res = match c {
                Cell::U64(v) => {
                    let _ = write!(buf, "{v}");
                    w.write_field(buf.as_bytes())
                }
                Cell::I64(v) => {
                    let _ = write!(buf, "{v}");
                    w.write_field(buf.as_bytes())
                }
                Cell::Str(s) => w.write_field(s),
                Cell::Empty => w.write_field(b""),
            };
            if let Err(e) = res {
                err = Some(e);
            }
        };
        put(Cell::Str(&wall));
        put(Cell::U64(start));
        r.cells(&mut put);
        if let Some(e) = err {
            return Err(csv_err(&self.what, e));
        }
        self.w
            .write_record(None::<&[u8]>)
            .map_err(|e| csv_err(&self.what, e))?;
        self.rows += 1;
        Ok(())
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Flush everything; the error is returned, not swallowed.
    pub fn finish(&mut self) -> Result<(), SinkError> {
        self.w.flush().map_err(|source| SinkError::Write {
            what: self.what.clone(),
            source,
        })
    }
}

fn csv_err(what: &str, e: csv::Error) -> SinkError {
    let source = match e.into_kind() {
        csv::ErrorKind::Io(io) => io,
        other => std::io::Error::other(format!("{other:?}")),
    };
    SinkError::Write {
        what: what.to_string(),
        source,
    }
}

/// Read a recorded CSV back for `report`.
pub fn open_reader(path: &Path) -> Result<csv::Reader<File>, SinkError> {
    let f = File::open(path).map_err(|source| SinkError::Create {
        path: PathBuf::from(path),
        source,
    })?;
    Ok(csv::ReaderBuilder::new().has_headers(true).from_reader(f))
}

impl<R: IoRecord> crate::pipeline::RecordSink<R> for CsvSink {
    fn record(&mut self, r: &R) -> Result<(), SinkError> {
        CsvSink::record(self, r)
    }
}
