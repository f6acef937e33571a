//! A file capture that is not whole, read as far as its records go.
//!
//! - **Unfinished**: perf record was killed (`kill -9`, the OOM killer, a `timeout -s
//!   KILL`), ran out of disk, or is still running. perf writes the header, the
//!   attributes and the records as it goes, but the data section's size (0 until then),
//!   the feature sections and their table only when it stops; perf itself then refuses
//!   the file.
//! - **Cut**: shorter than its header says, as a copy that stopped early is. The file
//!   ends inside the records, or inside the features after them.
//!
//! The records up to the end are there: [`Unfinished`] gives the crate the file with the
//! data section's size set to its whole records and no features. What only the features
//! say (the event formats, the host, the wall-clock offset) is then not known: the event
//! formats come from `--tracefs`.

use super::layout::{DATA_SECTION, FEATURES};
use super::{ReadSeek, FILE_HEADER};
use std::io::{self, Read, Seek, SeekFrom};

/// How a file is not whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partial {
    /// perf record never finished it.
    Unfinished,
    /// It is `len` bytes; its header names a section that runs to byte `said`. The cut
    /// is `in_records`, or in the features after them.
    Cut {
        len: u64,
        said: u64,
        in_records: bool,
    },
}

/// What was read of a file that is not whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartialRead {
    pub how: Partial,
    /// Bytes of whole records read.
    pub bytes: u64,
    /// Bytes of whole records after perf's last FINISHED_ROUND, left out.
    pub after_round: u64,
}

/// Set an unfinished file's header (its first [`FILE_HEADER`] bytes) as perf would have
/// at its end: a data section of `whole` bytes, and no features.
pub(super) fn finish_header(head: &mut [u8], whole: u64) {
    head[DATA_SECTION + 8..DATA_SECTION + 16].copy_from_slice(&whole.to_le_bytes());
    head[FEATURES..FEATURES + 32].fill(0);
}

/// The unfinished file `inner` with its header as perf would have finished it: the data
/// section `whole` bytes from `data_off`, no features. It ends with the records.
pub(super) struct Unfinished {
    inner: Box<dyn ReadSeek>,
    head: [u8; FILE_HEADER],
    len: u64,
    pos: u64,
    /// Where `inner` stands, so that it is sought only when the reader jumps.
    at: Option<u64>,
}

impl Unfinished {
    pub(super) fn new(
        mut inner: Box<dyn ReadSeek>,
        data_off: u64,
        whole: u64,
    ) -> io::Result<Unfinished> {
        let mut head = [0u8; FILE_HEADER];
        inner.seek(SeekFrom::Start(0))?;
        inner.read_exact(&mut head)?;
        finish_header(&mut head, whole);
        Ok(Unfinished {
            inner,
            head,
            len: data_off + whole,
            pos: 0,
            at: None,
        })
    }
}

impl Read for Unfinished {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = if self.pos < FILE_HEADER as u64 {
            let from = &self.head[self.pos as usize..];
            let n = out.len().min(from.len());
            out[..n].copy_from_slice(&from[..n]);
            n
        } else {
            let k = out.len().min(self.len.saturating_sub(self.pos) as usize);
            if k == 0 {
                return Ok(0);
            }
            if self.at != Some(self.pos) {
                self.inner.seek(SeekFrom::Start(self.pos))?;
            }
            let n = self.inner.read(&mut out[..k])?;
            self.at = Some(self.pos + n as u64);
            n
        };
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Unfinished {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        self.pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        }
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::record;
    use super::*;

    #[test]
    fn an_unfinished_file_reads_with_its_records_and_no_features() {
        let mut f = vec![0u8; FILE_HEADER];
        f[..8].copy_from_slice(b"PERFILE2");
        f[DATA_SECTION..DATA_SECTION + 8].copy_from_slice(&(FILE_HEADER as u64).to_le_bytes());
        f[FEATURES] = 0b101;
        f.extend(record(9, 16));
        f.extend(record(9, 16));
        f.extend(&record(9, 16)[..5]);
        let mut u = Unfinished::new(Box::new(io::Cursor::new(f.clone())), 104, 32).unwrap();
        let mut all = Vec::new();
        u.read_to_end(&mut all).unwrap();
        let mut want = f[..FILE_HEADER + 32].to_vec();
        want[DATA_SECTION + 8..DATA_SECTION + 16].copy_from_slice(&32u64.to_le_bytes());
        want[FEATURES] = 0;
        assert_eq!(all, want);
        u.seek(SeekFrom::Start(110)).unwrap();
        let mut two = [0u8; 2];
        u.read_exact(&mut two).unwrap();
        assert_eq!(two, [16, 0]);
        assert_eq!(u.seek(SeekFrom::End(0)).unwrap(), 136);
    }
}
