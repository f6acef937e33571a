//! CSV sink: one row per I/O, header first, cells straight from the record's column
//! table.
//!
//! Rows are rendered into one buffer without `fmt` or allocation per row, and the
//! buffer is handed to the output only in whole rows: a run killed at any moment
//! (even SIGKILL, short of a write the kernel itself cuts) leaves a file of whole
//! lines. `flush` (called every second by the live loop) bounds what a crash loses.

use super::time::{Wall, WallCache};
use super::SinkError;
use crate::record::{IoRecord, Schema, Value};
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

/// Rows are written out when this much is buffered.
const CHUNK: usize = 1 << 16;
/// Room past `CHUNK` for the row that crosses it; a longer row grows the buffer.
const ROOM: usize = 4096;

pub struct CsvSink {
    out: Box<dyn Write>,
    /// The output when it is a file: a write cut short (ENOSPC after a partial write)
    /// is cut back to its last whole line.
    file: Option<File>,
    /// Bytes the file holds, all whole lines.
    committed: u64,
    /// Rows rendered and not yet written: `buf[..filled]`. The rest is room, zeroed
    /// once, that rows are stored into in whole words (see [`CsvRow`]).
    buf: Vec<u8>,
    filled: usize,
    what: String,
    clock: WallCache,
    rows: u64,
    /// Rows the output holds: handed to it whole (see [`CsvSink::kept`]).
    kept: u64,
    /// Of what is buffered, the rows, and the other lines (the header) ahead of them.
    pending_rows: u64,
    pending_other: u64,
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
            buf: vec![0; CHUNK + ROOM],
            filled: 0,
            what,
            clock: WallCache::new(clock),
            rows: 0,
            kept: 0,
            pending_rows: 0,
            pending_other: 0,
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
        let mut line = Vec::new();
        for (i, name) in schema.names().enumerate() {
            if i > 0 {
                line.push(b',');
            }
            push_field(&mut line, name);
        }
        line.push(b'\n');
        self.put(&line);
        // The header goes out at once: a reader sees the columns before any row.
        self.flush()
    }

    pub fn record(&mut self, r: &dyn IoRecord) -> Result<(), SinkError> {
        loop {
            let mut row = CsvRow {
                out: &mut self.buf[self.filled..],
                pos: 0,
                short: false,
                clock: &mut self.clock,
            };
            r.write_csv(&mut row);
            row.byte(b'\n');
            let (len, short) = (row.pos, row.short);
            if !short {
                self.filled += len;
                break;
            }
            // Longer than the room left: now its length is known, make room and
            // render it again.
            self.buf.resize(self.filled + len + ROOM, 0);
        }
        self.rows += 1;
        self.pending_rows += 1;
        if self.filled >= CHUNK {
            self.write_buffered()?;
        }
        Ok(())
    }

    /// Append whole lines to what is buffered.
    fn put(&mut self, bytes: &[u8]) {
        let end = self.filled + bytes.len();
        if end + ROOM > self.buf.len() {
            self.buf.resize(end + ROOM, 0);
        }
        self.buf[self.filled..end].copy_from_slice(bytes);
        self.filled = end;
        self.pending_other += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
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

    /// Rows the output holds now, whole: those rendered less those still buffered and
    /// those that went with a write that failed (a full disk keeps the whole lines of
    /// what it took, see `write_buffered`).
    pub fn kept(&self) -> u64 {
        self.kept
    }

    fn write_buffered(&mut self) -> Result<(), SinkError> {
        let mut done = 0;
        let res = loop {
            if done == self.filled {
                break Ok(());
            }
            match self.out.write(&self.buf[done..self.filled]) {
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
            // Rare (the run stops here), so the lines that went out are counted now
            // rather than on every write.
            let lines = self.buf[..done].iter().filter(|&&b| b == b'\n').count() as u64;
            self.pending_rows = lines.saturating_sub(self.pending_other);
        }
        self.kept += self.pending_rows;
        self.pending_rows = 0;
        self.pending_other = 0;
        self.committed += done as u64;
        self.filled = 0;
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
///
/// Cells are stored into a slice of zeroed room at a position held here, not pushed
/// onto a `Vec`: a push reads the length back from memory after every byte stored
/// (the byte might be the length), which chains each cell behind the last. Numbers
/// are stored as whole 8-byte words and the position moved by their digits.
pub struct CsvRow<'a> {
    out: &'a mut [u8],
    pos: usize,
    /// A store did not fit: `pos` still counts on, so the row's length is known and
    /// the sink renders it again with room for it.
    short: bool,
    /// Start times: wall-clock text from the sink's clock.
    clock: &'a mut WallCache,
}

impl CsvRow<'_> {
    /// A copy of the row to render cells through, held in locals; [`resume`] moves
    /// this row on to where the copy ended. Through `&mut CsvRow` the position stays in
    /// memory: every byte stored through `out` might be it, so it is read back after
    /// each store, and each cell waits for the last.
    ///
    /// [`resume`]: CsvRow::resume
    #[inline(always)]
    pub fn split(&mut self) -> CsvRow<'_> {
        CsvRow {
            out: &mut *self.out,
            pos: self.pos,
            short: self.short,
            clock: &mut *self.clock,
        }
    }

    /// Where a copy from [`split`](CsvRow::split) ended.
    #[inline(always)]
    pub fn end(self) -> (usize, bool) {
        (self.pos, self.short)
    }

    #[inline(always)]
    pub fn resume(&mut self, (pos, short): (usize, bool)) {
        self.pos = pos;
        self.short = short;
    }

    /// One cell, after a separator unless it is the row's first. Inlined into each
    /// column of [`IoRecord::write_csv`]'s unrolled table, where the `Value`'s variant is
    /// known and the match folds away.
    #[inline(always)]
    pub fn cell(&mut self, first: bool, v: Value<'_>) {
        if !first {
            self.byte(b',');
        }
        match v {
            Value::Time(t) => self.time(t),
            Value::U64(v) => crate::record::TextOut::u64(self, v),
            Value::Str(s) => self.field(s),
            Value::String(s) => self.field(&s),
            v => v.render(self),
        }
    }

    #[inline(always)]
    fn byte(&mut self, b: u8) {
        match self.out.get_mut(self.pos) {
            Some(d) => *d = b,
            None => self.short = true,
        }
        self.pos += 1;
    }

    /// `n` ≤ 8 bytes: all eight are stored (the rest is overwritten by what follows).
    #[inline(always)]
    fn word(&mut self, w: u64, n: usize) {
        match self.out.get_mut(self.pos..self.pos + 8) {
            Some(d) => d.copy_from_slice(&w.to_le_bytes()),
            None => self.short = true,
        }
        self.pos += n;
    }

    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        match self.out.get_mut(self.pos..self.pos + b.len()) {
            Some(d) => d.copy_from_slice(b),
            None => self.short = true,
        }
        self.pos += b.len();
    }

    #[inline(always)]
    fn time(&mut self, t: u64) {
        match self.clock.wall(t) {
            Wall::Cached { prefix, len, nanos } => {
                // The whole block, then the position moved by the prefix's length.
                match self.out.get_mut(self.pos..self.pos + prefix.len()) {
                    Some(d) => d.copy_from_slice(prefix),
                    None => self.short = true,
                }
                self.pos += len;
                let (first, rest) = super::time::nine_digits(nanos);
                self.byte(first);
                self.word(rest, 8);
            }
            Wall::Full(s) => self.bytes(s.as_bytes()),
        }
    }

    /// A text cell, quoted when it holds a separator, a quote or a line break.
    #[inline(always)]
    fn field(&mut self, s: &str) {
        // Copied and checked in one pass, byte by byte: cells are short labels, where
        // a `memcpy` call costs more than the copy.
        if let Some(d) = self.out.get_mut(self.pos..self.pos + s.len()) {
            let mut special = false;
            for (d, &b) in d.iter_mut().zip(s.as_bytes()) {
                *d = b;
                special |= SPECIAL[b as usize];
            }
            if !special {
                self.pos += s.len();
                return;
            }
        }
        let mut b = Vec::with_capacity(s.len() + 2);
        push_field(&mut b, s);
        self.bytes(&b);
    }
}

/// The bytes that make a cell quoted.
static SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    t[b',' as usize] = true;
    t[b'"' as usize] = true;
    t[b'\n' as usize] = true;
    t[b'\r' as usize] = true;
    t
};

impl crate::record::TextOut for CsvRow<'_> {
    #[inline(always)]
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes())
    }

    #[inline(always)]
    fn u64(&mut self, v: u64) {
        let ((first, n), full, k) = crate::record::u64_words(v);
        self.word(first, n);
        for &w in &full[..k] {
            self.word(w, 8);
        }
    }

    /// `0x1f`, without `fmt`: NVMe status cells are in every row of some profiles.
    #[inline(always)]
    fn hex(&mut self, v: u64) {
        self.bytes(b"0x");
        let n = (67 - (v | 1).leading_zeros() as usize) / 4;
        for i in (0..n).rev() {
            self.byte(b"0123456789abcdef"[(v >> (4 * i)) as usize & 0xf]);
        }
    }
}

fn needs_quotes(s: &str) -> bool {
    s.bytes().any(|b| SPECIAL[b as usize])
}

/// A cell, quoted when it holds a separator, a quote or a line break.
fn push_field(buf: &mut Vec<u8>, s: &str) {
    if needs_quotes(s) {
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

/// Read a recorded CSV back for `report` and `merge`: its rows up to its last newline.
/// Every row is written with its newline, so a file that does not end with one was cut
/// inside a row (the recorder killed, the disk full, or still being written): the
/// second value is then the bytes read, before the cut row.
pub fn open_reader(path: &Path) -> Result<OpenCsv, SinkError> {
    let open = |source| SinkError::Open {
        path: PathBuf::from(path),
        source,
    };
    let mut f = File::open(path).map_err(open)?;
    let whole = last_newline(&mut f).map_err(open)?;
    f.seek(io::SeekFrom::Start(0)).map_err(open)?;
    let crlf = header_ends_crlf(&mut f).map_err(open)?;
    f.seek(io::SeekFrom::Start(0)).map_err(open)?;
    let reader = csv::ReaderBuilder::new()
        .has_headers(true)
        .from_reader(f.take(whole.unwrap_or(u64::MAX)));
    Ok(OpenCsv {
        reader,
        cut: whole,
        crlf,
    })
}

/// A CSV file opened for reading rows.
pub struct OpenCsv {
    pub reader: csv::Reader<io::Take<File>>,
    /// Cut inside a row: its length up to its last newline.
    pub cut: Option<u64>,
    /// Lines end in CRLF (a spreadsheet saved it so): the csv crate then places each
    /// record on the line before its own (it stops at the `\r` and starts the next
    /// record at the `\n`), so a line number it gives is one short.
    pub crlf: bool,
}

/// Whether the first line of `f` ends in `\r\n`, looked for in its first 64 KiB.
fn header_ends_crlf(f: &mut File) -> io::Result<bool> {
    let mut buf = Vec::with_capacity(64 * 1024);
    f.take(64 * 1024).read_to_end(&mut buf)?;
    Ok(buf
        .iter()
        .position(|&b| b == b'\n')
        .is_some_and(|i| i > 0 && buf[i - 1] == b'\r'))
}

/// The length of `f` up to and with its last newline, when it does not end with one
/// (and is not empty).
fn last_newline(f: &mut File) -> io::Result<Option<u64>> {
    let len = f.seek(io::SeekFrom::End(0))?;
    let mut end = len;
    let mut buf = vec![0u8; 64 * 1024];
    while end > 0 {
        let n = end.min(buf.len() as u64);
        f.seek(io::SeekFrom::Start(end - n))?;
        let chunk = &mut buf[..n as usize];
        f.read_exact(chunk)?;
        if end == len && chunk.last() == Some(&b'\n') {
            return Ok(None);
        }
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(Some(end - n + i as u64 + 1));
        }
        end -= n;
    }
    Ok((len > 0).then_some(0))
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

    fn kept(&self) -> Vec<u64> {
        vec![CsvSink::kept(self)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_cut_inside_a_row_is_read_to_its_last_newline() {
        let path = std::env::temp_dir().join(format!("ntprof-lastnl-{}", std::process::id()));
        let at = |content: &[u8]| {
            std::fs::write(&path, content).unwrap();
            last_newline(&mut File::open(&path).unwrap()).unwrap()
        };
        assert_eq!(at(b""), None);
        assert_eq!(at(b"a,b\n1,2\n"), None);
        assert_eq!(at(b"a,b\n1,2\n3,"), Some(8));
        assert_eq!(at(b"a,b"), Some(0));
        // A last row longer than one read back from the end.
        let mut long = b"a\n".to_vec();
        long.resize(200_000, b'x');
        assert_eq!(at(&long), Some(2));
        let _ = std::fs::remove_file(&path);
    }

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
        s.put(b"a,b\n1,2\n3,4\n5,6\n7,8\n9,10\n11,12\n");
        assert!(s.flush().is_err());
        let text = std::fs::read_to_string(&path).unwrap();
        // 27 bytes went out: 6 whole lines (25 bytes) and two bytes of the next.
        assert_eq!(text, "a,b\n1,2\n3,4\n5,6\n7,8\n9,10\n");
        // Lines put whole are not rows: none is counted kept.
        assert_eq!(s.kept(), 0);
        let _ = std::fs::remove_file(path);
    }

    const CLOCK: i128 = 1_795_219_200_000_000_000;

    /// The cells `render` stores, as bytes.
    fn rendered(render: impl FnOnce(&mut CsvRow<'_>)) -> Vec<u8> {
        let mut out = vec![0; 1 << 16];
        let mut clock = WallCache::new(super::super::time::WallClock::with_offset(CLOCK));
        let mut row = CsvRow {
            out: &mut out,
            pos: 0,
            short: false,
            clock: &mut clock,
        };
        render(&mut row);
        assert!(!row.short);
        let n = row.pos;
        out.truncate(n);
        out
    }

    /// `write_csv` unrolls the column table; each row must still be every column, in
    /// order, as the table's getters give it (tables wider than the unrolling too).
    fn by_the_table<R: crate::record::Tabled>(r: &R) -> Vec<u8> {
        rendered(|row| {
            for (i, c) in R::COLUMNS.iter().enumerate() {
                row.cell(i == 0, (c.get)(r));
            }
        })
    }

    fn written<R: crate::record::Tabled>(r: &R) -> Vec<u8> {
        rendered(|row| r.write_csv(row))
    }

    /// A row as the plain renderings give it: `Value::write_bytes`, `WallClock::format`
    /// and `push_field`, none of the row writer's stores.
    fn plainly<R: crate::record::Tabled>(r: &R) -> Vec<u8> {
        let clock = super::super::time::WallClock::with_offset(CLOCK);
        let mut b = Vec::new();
        for (i, c) in R::COLUMNS.iter().enumerate() {
            if i > 0 {
                b.push(b',');
            }
            match (c.get)(r) {
                Value::Time(t) => b.extend_from_slice(clock.format(t).as_bytes()),
                Value::Str(s) => push_field(&mut b, s),
                Value::String(s) => push_field(&mut b, &s),
                v => v.write_bytes(&mut b),
            }
        }
        b.push(b'\n');
        b
    }

    #[test]
    fn every_kind_of_cell_is_stored_as_plainly_rendered() {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut vals = vec![
            Value::Empty,
            Value::Hex(0),
            Value::Hex(0xf),
            Value::Hex(0x10),
            Value::Hex(0x4002),
            Value::Hex(u64::MAX),
            Value::I64(i64::MIN),
            Value::I64(-1),
            Value::Dev((259 << 20) | 7),
            Value::Dev(u32::MAX),
            Value::Named("nvme", 12),
            Value::U64(u64::MAX),
        ];
        for _ in 0..2_000 {
            let x = rng.u64(..) >> rng.u32(0..64);
            vals.extend([Value::U64(x), Value::Hex(x), Value::I64(-(x as i64))]);
        }
        for v in vals {
            let got = rendered(|row| row.cell(true, v.clone()));
            let mut want = Vec::new();
            v.write_bytes(&mut want);
            assert_eq!(got, want, "{v:?}");
        }
    }

    #[test]
    fn rows_come_out_as_plainly_rendered_across_chunks_and_past_the_room() {
        use crate::sink::testrec::T;
        let path = std::env::temp_dir().join(format!("ntprof-csv-rows-{}", std::process::id()));
        let long: &'static str = "y".repeat(3 * ROOM).leak();
        let ops = ["read", "write,x", long, "", "a\"b"];
        let mut rng = fastrand::Rng::with_seed(7);
        let rows: Vec<T> = (0..5_000u64)
            .map(|i| {
                let big = rng.u64(..) >> rng.u32(0..64);
                T::new(
                    i * 7_777_777 + rng.u64(..1_000),
                    ops[(i % 5) as usize],
                    (i % 3 != 0).then_some(big),
                    (i % 4 != 0).then(|| -(big as i64 >> 1)),
                )
            })
            .collect();
        let clock = super::super::time::WallClock::with_offset(CLOCK);
        let mut s =
            CsvSink::create(Some(&path), <T as crate::record::Tabled>::table(), clock).unwrap();
        let mut want = std::fs::read(&path).unwrap();
        for r in &rows {
            s.record(r).unwrap();
            want.extend(plainly(r));
        }
        s.finish().unwrap();
        let got = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(s.rows(), 5_000);
        assert!(
            got.len() > 4 * CHUNK,
            "{} bytes: not across chunks",
            got.len()
        );
        assert!(
            got == want,
            "the sink's rows differ from the plain rendering"
        );
    }

    #[test]
    fn the_unrolled_row_writer_writes_every_column_in_order() {
        let w = crate::sink::testrec::Wide(1000);
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
