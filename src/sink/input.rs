//! Reading a recording back (`report`, `merge`, `plot`): CSV or Parquet, recognised by
//! content, as rows of text cells in the column order of the file's header, the form
//! [`crate::record::Row`] parses.

use super::parquet::{is_parquet, ParquetRows};
use super::SinkError;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

enum Source {
    /// The reader, the record read into, and what its line numbers are short by.
    Csv(csv::Reader<io::Take<File>>, csv::StringRecord, u64),
    Parquet(Box<ParquetRows>),
}

/// An open recording.
pub struct Input {
    path: PathBuf,
    src: Source,
    header: Vec<String>,
    /// Set by [`Input::recognise`]: rows come in the profile's column order.
    project: Option<Vec<Option<usize>>>,
    raw: Vec<String>,
    /// A CSV cut inside a row: the bytes read, up to its last newline. Said once it is
    /// known to be a recording: any file that is not ends without a newline too.
    cut: Option<u64>,
}

/// A compressor's name, and the command that undoes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compression {
    pub tool: &'static str,
    pub undo: &'static str,
}

/// The compressor whose magic `path` starts with: captures and recordings are often
/// compressed to be moved, and read as they are they are only bytes.
pub fn compression_of(path: &Path) -> Option<Compression> {
    use std::io::Read;
    let mut head = [0u8; 6];
    let n = File::open(path)
        .and_then(|f| f.take(6).read(&mut head))
        .ok()?;
    compression(&head[..n])
}

/// See [`compression_of`]; `head`: the first bytes of a file (six tell them all).
pub fn compression(head: &[u8]) -> Option<Compression> {
    const KNOWN: [(&[u8], &str, &str); 5] = [
        (&[0x1f, 0x8b], "gzip", "gunzip -k"),
        (&[0x28, 0xb5, 0x2f, 0xfd], "zstd", "zstd -d"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0], "xz", "xz -dk"),
        (b"BZh", "bzip2", "bunzip2 -k"),
        (&[0x04, 0x22, 0x4d, 0x18], "lz4", "lz4 -d"),
    ];
    KNOWN
        .iter()
        .find(|(magic, ..)| head.starts_with(magic))
        .map(|&(_, tool, undo)| Compression { tool, undo })
}

impl Input {
    /// Open a CSV or Parquet file written by `record` (Parquet by its magic bytes).
    pub fn open(path: &Path) -> Result<Input, SinkError> {
        if is_parquet(path) {
            let rows = ParquetRows::open(path)?;
            if let Some(n) = rows.cut {
                // Said here, once for every reader (report, merge, plot): the rows
                // that follow are all the file holds that can be trusted.
                crate::say!(
                    "ntprof-perf: warning: {} ends inside a row-group write (the recorder was killed or the disk filled); read its first {n} bytes, up to the last whole footer; `truncate -s {n} {0}` makes it whole for other readers",
                    path.display()
                );
            }
            let header = rows.header.clone();
            return Ok(Input {
                path: path.to_path_buf(),
                src: Source::Parquet(Box::new(rows)),
                header,
                project: None,
                raw: Vec::new(),
                cut: None,
            });
        }
        if let Some(c) = compression_of(path) {
            return Err(SinkError::Compressed {
                path: path.to_path_buf(),
                tool: c.tool,
                undo: c.undo,
            });
        }
        let super::csv::OpenCsv {
            reader: mut rd,
            cut,
            crlf,
        } = super::csv::open_reader(path)?;
        let header = rd
            .headers()
            .map_err(|source| SinkError::Csv {
                path: path.to_path_buf(),
                source,
            })?
            .iter()
            .map(str::to_string)
            .collect();
        Ok(Input {
            path: path.to_path_buf(),
            src: Source::Csv(rd, csv::StringRecord::new(), u64::from(crlf)),
            header,
            project: None,
            raw: Vec::new(),
            cut,
        })
    }

    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// `Parquet` or `CSV`, for messages.
    pub fn format(&self) -> &'static str {
        match self.src {
            Source::Csv(..) => "CSV",
            Source::Parquet(_) => "Parquet",
        }
    }

    /// Recording metadata (`ntprof.host`, …): Parquet files have it, CSVs do not.
    pub fn meta(&self) -> &[(String, String)] {
        match &self.src {
            Source::Csv(..) => &[],
            Source::Parquet(p) => &p.meta,
        }
    }

    /// Which profile wrote this file (see [`crate::profile::recognise`]); from then on
    /// [`next_row`](Input::next_row) gives cells in that profile's column order, empty
    /// for a column the file lacks.
    pub fn recognise(&mut self) -> Result<&'static dyn crate::profile::Profile, SinkError> {
        if self.header.is_empty() {
            // Read only up to its last newline, a file with none reads as empty: say
            // what it is instead (a binary file, or one line cut before its end).
            if self.cut == Some(0) {
                return Err(SinkError::NoLine {
                    path: self.path.clone(),
                    bytes: std::fs::metadata(&self.path).map_or(0, |m| m.len()),
                });
            }
            return Err(SinkError::Empty {
                path: self.path.clone(),
            });
        }
        let header: Vec<&str> = self.header.iter().map(String::as_str).collect();
        let r = crate::profile::recognise(&header, self.meta()).map_err(|source| {
            SinkError::NotARecording {
                path: self.path.clone(),
                source,
            }
        })?;
        if let Source::Parquet(p) = &mut self.src {
            let mut used = vec![false; self.header.len()];
            for &i in r.columns.iter().flatten() {
                if let Some(u) = used.get_mut(i) {
                    *u = true;
                }
            }
            p.only(used);
        }
        self.project = Some(r.columns);
        if let Some(n) = self.cut.take() {
            // Said here, once for every reader (report, merge, plot).
            crate::say!(
                "ntprof-perf: warning: {} ends inside a row (the recorder was killed, the disk filled, or it is still being written); read its first {n} bytes, up to its last whole row",
                self.path.display()
            );
        }
        Ok(r.profile)
    }

    /// The next row's cells into `cells` (reused between rows); where it is (the CSV
    /// line, or the Parquet row number), or `None` at the end.
    pub fn next_row(&mut self, cells: &mut Vec<String>) -> Result<Option<u64>, SinkError> {
        let Some(project) = self.project.take() else {
            return self.next_raw(cells);
        };
        let mut raw = std::mem::take(&mut self.raw);
        let at = self.next_raw(&mut raw);
        if let Ok(Some(_)) = at {
            cells.resize(project.len(), String::new());
            for (c, from) in cells.iter_mut().zip(&project) {
                c.clear();
                if let Some(v) = from.and_then(|i| raw.get(i)) {
                    c.push_str(v);
                }
            }
        }
        self.raw = raw;
        self.project = Some(project);
        at
    }

    fn next_raw(&mut self, cells: &mut Vec<String>) -> Result<Option<u64>, SinkError> {
        match &mut self.src {
            Source::Parquet(p) => p.next_row(cells),
            Source::Csv(rd, rec, short) => {
                let more = rd.read_record(rec).map_err(|source| SinkError::Csv {
                    path: self.path.clone(),
                    source,
                })?;
                if !more {
                    return Ok(None);
                }
                cells.resize(rec.len(), String::new());
                for (c, v) in cells.iter_mut().zip(rec.iter()) {
                    c.clear();
                    c.push_str(v);
                }
                cells.truncate(rec.len());
                Ok(Some(rec.position().map_or(0, |p| p.line() + *short)))
            }
        }
    }

    /// "line" or "row", for messages about a position.
    pub fn unit(&self) -> &'static str {
        match self.src {
            Source::Csv(..) => "line",
            Source::Parquet(_) => "row",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spreadsheet saves CSV with CRLF line ends: a row's line is still its own.
    #[test]
    fn rows_are_placed_on_their_own_line_whatever_ends_the_lines() {
        let dir = std::env::temp_dir().join(format!("ntprof-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, end) in [("lf.csv", "\n"), ("crlf.csv", "\r\n")] {
            let path = dir.join(name);
            std::fs::write(&path, ["a,b", "1,2", "3,4"].join(end) + end).unwrap();
            let mut input = Input::open(&path).unwrap();
            let mut cells = Vec::new();
            let mut lines = Vec::new();
            while let Some(line) = input.next_row(&mut cells).unwrap() {
                lines.push((line, cells.clone()));
            }
            assert_eq!(
                lines,
                [
                    (2, vec!["1".to_string(), "2".into()]),
                    (3, vec!["3".into(), "4".into()])
                ],
                "{name}"
            );
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn compressors_are_told_by_their_magic() {
        let tool = |b: &[u8]| compression(b).map(|c| c.tool);
        assert_eq!(tool(b"\x1f\x8b\x08\0"), Some("gzip"));
        assert_eq!(tool(b"\x28\xb5\x2f\xfd\x24"), Some("zstd"));
        assert_eq!(tool(b"\xfd7zXZ\0"), Some("xz"));
        assert_eq!(tool(b"\xfd7zXZ"), None, "cut before the magic ends");
        assert_eq!(tool(b"BZh91AY"), Some("bzip2"));
        assert_eq!(tool(b"\x04\x22\x4d\x18"), Some("lz4"));
        for plain in [&b"PERFILE2"[..], b"start_time,", b"PAR1", b""] {
            assert_eq!(tool(plain), None);
        }
    }
}
