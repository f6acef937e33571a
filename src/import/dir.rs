//! perf's directory captures (`perf record --threads`): a header file `data` and the
//! samples in `data.N`. perf 6.1 writes one `data.N` per ring (per CPU), whichever of
//! its threads drains it, with no header and no FINISHED_ROUND: each file is one ring,
//! in time order, so a merge by time across files puts every sample in order.
//!
//! The crate reads one perf file, so each `data.N` is presented to it as one
//! ([`ThreadFile`]): the header file's bytes with the data section pointed at the ring's
//! records. Without rounds the crate's sorter would hold a whole file until its end, so a
//! FINISHED_ROUND is put after every run of about [`CHUNK`] bytes of records: it then
//! holds two runs at most. The files are merged by time in `super::feed_merged`; were a
//! file to hold several rings, the sorter's rounds would still order what is close, and
//! count the rest `late`.

use super::layout::{DATA_SECTION, FEATURES};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Bytes of records between two synthetic rounds.
pub(super) const CHUNK: u64 = 64 * 1024;
/// `PERF_RECORD_FINISHED_ROUND`: type 68, misc 0, size 8, no body.
const ROUND: [u8; 8] = [68, 0, 0, 0, 0, 0, 8, 0];

/// The `data.N` files of directory `dir`, in order of N.
pub(super) fn thread_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<(u64, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let n = e
                .file_name()
                .to_str()?
                .strip_prefix("data.")?
                .parse()
                .ok()?;
            Some((n, e.path()))
        })
        .collect();
    files.sort();
    files.into_iter().map(|f| f.1).collect()
}

/// What a scan of a `data.N` found: the record runs between synthetic rounds (offset
/// and length in the file), and the bytes at its end that are no whole record (perf
/// stopped mid-write).
pub(super) struct Scan {
    pub(super) runs: Vec<(u64, u64)>,
    pub torn: u64,
}

/// Walk the record headers of a `data.N`. The records fill it to its end, but for the
/// last one when perf stopped mid-write: fewer bytes than a record can hold (64 KiB).
/// Anything else is corruption, said as `Err(offset)` rather than losing the rest of
/// the file.
pub(super) fn scan(path: &Path) -> io::Result<Result<Scan, u64>> {
    let mut f = File::open(path)?;
    let len = f.metadata()?.len();
    let (mut at, mut runs) = (0u64, Vec::new());
    let mut run = (0u64, 0u64);
    let w = super::layout::walk(&mut f, 0, len, false, |size| {
        at += size;
        run.1 += size;
        if run.1 >= CHUNK {
            runs.push(run);
            run = (at, 0);
        }
    })?;
    if run.1 > 0 {
        runs.push(run);
    }
    if w.bad || len - w.whole > u64::from(u16::MAX) {
        return Ok(Err(w.whole));
    }
    Ok(Ok(Scan {
        runs,
        torn: len - w.whole,
    }))
}

impl Scan {
    /// Bytes of the whole records.
    pub(super) fn bytes(&self) -> u64 {
        self.runs.iter().map(|r| r.1).sum()
    }
}

/// One `data.N` as a whole perf file: `head` (the header file, its data section pointed
/// past its end), then the ring's records with a FINISHED_ROUND after each run, then
/// the header file's feature table (read from the end of the data section; the feature
/// sections it points to are in `head`, where they were).
pub(super) struct ThreadFile {
    /// The header file, shared by every thread file; `patch` replaces its data section.
    head: Rc<Vec<u8>>,
    patch: [u8; 16],
    table: Vec<u8>,
    records: BufReader<File>,
    /// Where `records` stands in its file.
    at_file: u64,
    runs: Vec<(u64, u64)>,
    /// Length of the records with their rounds.
    size: u64,
    pos: u64,
    /// Where the records part is read: the run, and what of it (with its round) is
    /// buffered in `buf` from `at`.
    run: usize,
    buf: Vec<u8>,
    at: usize,
}

impl ThreadFile {
    /// `header`: the header file's bytes, already checked (`check_file_layout`).
    pub(super) fn new(header: &Rc<Vec<u8>>, path: &Path, scan: Scan) -> io::Result<ThreadFile> {
        let le64 = |at: usize| super::le64(header, at);
        let (data_off, data_size) = (le64(DATA_SECTION), le64(DATA_SECTION + 8));
        let features: u32 = (0..4).map(|i| le64(FEATURES + 8 * i).count_ones()).sum();
        let from = (data_off + data_size) as usize;
        let table = header
            .get(from..from + 16 * features as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "feature table"))?;
        let size: u64 = scan.runs.iter().map(|r| r.1 + ROUND.len() as u64).sum();
        let mut patch = [0u8; 16];
        patch[..8].copy_from_slice(&(header.len() as u64).to_le_bytes());
        patch[8..].copy_from_slice(&size.to_le_bytes());
        Ok(ThreadFile {
            head: Rc::clone(header),
            patch,
            table: table.to_vec(),
            records: BufReader::with_capacity(1 << 16, File::open(path)?),
            at_file: 0,
            runs: scan.runs,
            size,
            pos: 0,
            run: 0,
            buf: Vec::new(),
            at: 0,
        })
    }

    fn len(&self) -> u64 {
        self.head.len() as u64 + self.size + self.table.len() as u64
    }

    /// Read from the records part, which the crate reads from its start to its end.
    fn read_records(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.at == self.buf.len() {
            let Some(&(from, len)) = self.runs.get(self.run) else {
                return Ok(0);
            };
            if from != self.at_file {
                self.records.seek(SeekFrom::Start(from))?;
            }
            self.buf.resize(len as usize, 0);
            self.records.read_exact(&mut self.buf)?;
            self.at_file = from + len;
            self.buf.extend_from_slice(&ROUND);
            self.at = 0;
            self.run += 1;
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Read for ThreadFile {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let head = self.head.len() as u64;
        let n = if self.pos < head {
            let at = self.pos as usize;
            let n = out.len().min(self.head.len() - at);
            out[..n].copy_from_slice(&self.head[at..at + n]);
            // The part of the data section's offset and size this read covers.
            let (lo, hi) = (at.max(DATA_SECTION), (at + n).min(DATA_SECTION + 16));
            if lo < hi {
                out[lo - at..hi - at]
                    .copy_from_slice(&self.patch[lo - DATA_SECTION..hi - DATA_SECTION]);
            }
            n
        } else if self.pos < head + self.size {
            let max = (head + self.size - self.pos) as usize;
            let k = out.len().min(max);
            self.read_records(&mut out[..k])?
        } else {
            let at = (self.pos - head - self.size) as usize;
            let from = self.table.get(at..).unwrap_or_default();
            let n = out.len().min(from.len());
            out[..n].copy_from_slice(&from[..n]);
            n
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for ThreadFile {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len().checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        }
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        let head = self.head.len() as u64;
        let inside = pos > head && pos < head + self.size;
        // The records part is a stream: it is entered at its start only.
        if inside && pos != self.pos {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "seek into a thread file's records",
            ));
        }
        if pos == head && self.pos != head {
            self.records.seek(SeekFrom::Start(0))?;
            (self.run, self.at, self.at_file) = (0, 0, 0);
            self.buf.clear();
        }
        self.pos = pos;
        Ok(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::record;
    use super::*;

    fn file(name: &str, bytes: &[u8]) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ntprof-dir-{name}-{}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn a_thread_file_reads_as_the_header_file_around_its_records() {
        // The header: 104 bytes, an empty data section at 104, one feature (bit 0), its
        // table entry at 104 pointing to 8 bytes of section at 120.
        let mut header = vec![0u8; 128];
        header[..8].copy_from_slice(b"PERFILE2");
        header[40..48].copy_from_slice(&104u64.to_le_bytes());
        header[72] = 1;
        header[104..112].copy_from_slice(&120u64.to_le_bytes());
        header[112..120].copy_from_slice(&8u64.to_le_bytes());
        header[120..].copy_from_slice(b"FEATURE!");
        let mut records = record(9, 16);
        records.extend(record(9, 24));
        let mut torn = records.clone();
        torn.extend_from_slice(&record(9, 40)[..13]);
        let p = file("thread", &torn);
        let scan = scan(&p).unwrap().unwrap();
        assert_eq!((scan.torn, scan.runs.clone()), (13, vec![(0, 40)]));
        let mut f = ThreadFile::new(&Rc::new(header.clone()), &p, scan).unwrap();
        let mut all = Vec::new();
        f.read_to_end(&mut all).unwrap();
        let mut want = header.clone();
        want[40..48].copy_from_slice(&128u64.to_le_bytes());
        want[48..56].copy_from_slice(&48u64.to_le_bytes());
        want.extend_from_slice(&records);
        want.extend_from_slice(&ROUND);
        want.extend_from_slice(&header[104..120]);
        assert_eq!(all, want);
        // The crate's order: the feature table, a section, then the records from their
        // start, as many times as it asks.
        for _ in 0..2 {
            f.seek(SeekFrom::Start(128 + 48)).unwrap();
            let mut t = [0u8; 16];
            f.read_exact(&mut t).unwrap();
            assert_eq!(t[..], header[104..120]);
            f.seek(SeekFrom::Start(128)).unwrap();
            let mut r = vec![0u8; 48];
            f.read_exact(&mut r).unwrap();
            assert_eq!(r[..40], records[..]);
        }
        assert!(f.seek(SeekFrom::Start(140)).is_err(), "into the records");
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_record_shorter_than_its_header_is_corruption() {
        let mut bytes = record(9, 16);
        bytes.extend(record(9, 8));
        bytes[22..24].copy_from_slice(&4u16.to_le_bytes());
        let p = file("short", &bytes);
        assert_eq!(scan(&p).unwrap().err(), Some(16));
        std::fs::remove_file(p).unwrap();
    }
}
