//! The tracing-data section of a `perf.data` (perf's `trace-event-info.c` layout): the
//! format text of every traced event, as the recording kernel's tracefs printed it.
//!
//! Pure byte parsing, no I/O: the texts go through the project's own format parser
//! (via [`crate::tracefs::Tracefs::in_memory`]). Every length is checked against what is
//! left, so a truncated or corrupted section is an error, never a panic.
//!
//! Layout, sizes in the recording machine's byte order (the byte after the version):
//! magic `17 08 44 "tracing"`, a NUL-ended version, endianness (1 = big), sizeof(long),
//! u32 page size; `header_page\0` u64 size + text; `header_event\0` u64 size + text;
//! u32 count of ftrace formats, each u64 size + text; u32 count of systems, each a
//! NUL-ended name, u32 count of events, each u64 size + format text; then kallsyms,
//! printk formats and (version 0.6) saved command lines, which are not needed here.

/// Why the tracing data cannot be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TracingDataError {
    #[error("it does not start with perf's tracing-data magic")]
    Magic,
    #[error("it ends inside {what} (byte {at} of {len})")]
    Truncated {
        what: &'static str,
        at: usize,
        len: usize,
    },
    #[error("expected `{want}` at byte {at}")]
    Tag { want: &'static str, at: usize },
    #[error("{what} is not text")]
    NotText { what: &'static str },
}

/// One event's format text, by system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventText {
    pub system: String,
    pub text: String,
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
    big: bool,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], TracingDataError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(TracingDataError::Truncated {
                what,
                at: self.at,
                len: self.b.len(),
            })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, TracingDataError> {
        let s: [u8; 4] = self.take(4, what)?.try_into().unwrap_or_default();
        Ok(if self.big {
            u32::from_be_bytes(s)
        } else {
            u32::from_le_bytes(s)
        })
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, TracingDataError> {
        let s: [u8; 8] = self.take(8, what)?.try_into().unwrap_or_default();
        Ok(if self.big {
            u64::from_be_bytes(s)
        } else {
            u64::from_le_bytes(s)
        })
    }

    /// A NUL-ended string, the NUL consumed.
    fn cstr(&mut self, what: &'static str) -> Result<&'a [u8], TracingDataError> {
        let rest = &self.b[self.at.min(self.b.len())..];
        let n = rest
            .iter()
            .position(|&c| c == 0)
            .ok_or(TracingDataError::Truncated {
                what,
                at: self.at,
                len: self.b.len(),
            })?;
        self.at += n + 1;
        Ok(&rest[..n])
    }

    /// A u64 length and that many bytes.
    fn sized(&mut self, what: &'static str) -> Result<&'a [u8], TracingDataError> {
        let at = self.at;
        let n = self.u64(what)?;
        let n = usize::try_from(n).map_err(|_| TracingDataError::Truncated {
            what,
            at,
            len: self.b.len(),
        })?;
        self.take(n, what)
    }

    fn tag(&mut self, want: &'static str) -> Result<(), TracingDataError> {
        let at = self.at;
        match self.cstr(want) {
            Ok(s) if s == want.as_bytes() => Ok(()),
            _ => Err(TracingDataError::Tag { want, at }),
        }
    }
}

const MAGIC: &[u8] = b"\x17\x08\x44tracing";

/// Every event format in `data`, in file order.
pub fn parse(data: &[u8]) -> Result<Vec<EventText>, TracingDataError> {
    if !data.starts_with(MAGIC) {
        return Err(TracingDataError::Magic);
    }
    let mut c = Cursor {
        b: data,
        at: MAGIC.len(),
        big: false,
    };
    c.cstr("the version")?;
    c.big = c.take(1, "the byte order")?[0] != 0;
    c.take(1, "the size of long")?;
    c.u32("the page size")?;
    c.tag("header_page")?;
    c.sized("header_page")?;
    c.tag("header_event")?;
    c.sized("header_event")?;
    for _ in 0..c.u32("the ftrace format count")? {
        c.sized("an ftrace format")?;
    }
    let mut out = Vec::new();
    for _ in 0..c.u32("the event system count")? {
        let system = text(c.cstr("an event system name")?, "an event system name")?;
        for _ in 0..c.u32("an event count")? {
            let format = text(c.sized("an event format")?, "an event format")?;
            out.push(EventText {
                system: system.clone(),
                text: format,
            });
        }
    }
    Ok(out)
}

/// `bytes` as owned text, or which part of the section was not text.
fn text(bytes: &[u8], what: &'static str) -> Result<String, TracingDataError> {
    std::str::from_utf8(bytes)
        .map(str::to_string)
        .map_err(|_| TracingDataError::NotText { what })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A tracing-data blob holding `events` as perf writes it (little-endian).
    pub(crate) fn blob(events: &[(&str, &str)]) -> Vec<u8> {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(b"0.6\0");
        b.push(0);
        b.push(8);
        b.extend_from_slice(&4096u32.to_le_bytes());
        for (tag, text) in [("header_page", "hp"), ("header_event", "he")] {
            b.extend_from_slice(tag.as_bytes());
            b.push(0);
            b.extend_from_slice(&(text.len() as u64).to_le_bytes());
            b.extend_from_slice(text.as_bytes());
        }
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&3u64.to_le_bytes());
        b.extend_from_slice(b"ftr");
        let mut systems: Vec<&str> = events.iter().map(|e| e.0).collect();
        systems.dedup();
        b.extend_from_slice(&(systems.len() as u32).to_le_bytes());
        for s in systems {
            b.extend_from_slice(s.as_bytes());
            b.push(0);
            let mine: Vec<&str> = events.iter().filter(|e| e.0 == s).map(|e| e.1).collect();
            b.extend_from_slice(&(mine.len() as u32).to_le_bytes());
            for t in mine {
                b.extend_from_slice(&(t.len() as u64).to_le_bytes());
                b.extend_from_slice(t.as_bytes());
            }
        }
        // kallsyms and printk, empty.
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b
    }

    #[test]
    fn reads_each_system_and_event() {
        let b = blob(&[
            ("block", "name: a\n"),
            ("block", "name: b\n"),
            ("nvme", "name: c\n"),
        ]);
        let got = parse(&b).unwrap();
        let names: Vec<(&str, &str)> = got
            .iter()
            .map(|e| (e.system.as_str(), e.text.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("block", "name: a\n"),
                ("block", "name: b\n"),
                ("nvme", "name: c\n")
            ]
        );
    }

    /// Every prefix and every single-byte change: an error or formats, never a panic.
    #[test]
    fn truncated_or_corrupted_is_an_error() {
        let b = blob(&[("block", "name: a\n"), ("nvme", "name: c\n")]);
        // The last 8 bytes (kallsyms, printk) are not read.
        for n in 0..b.len() - 8 {
            assert!(parse(&b[..n]).is_err(), "prefix {n} parsed");
        }
        for i in 0..b.len() {
            for v in [0u8, 0xff, b[i] ^ 0x80] {
                let mut c = b.clone();
                c[i] = v;
                let _ = parse(&c);
            }
        }
        assert_eq!(parse(b"nope"), Err(TracingDataError::Magic));
    }
}
