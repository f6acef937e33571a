//! Replay a `perf.data` someone recorded with stock `perf record` through the same
//! decoders, ordering, correlators and sinks as a live run.
//!
//! Reading the file is mstange's `linux-perf-data`: it walks the records (sorted by time
//! with perf's FINISHED_ROUND records) and gives each sample's attribute and raw payload.
//! The formats come from the file's tracing-data section ([`tracing_data`]), parsed by our
//! own format parser through an in-memory [`Tracefs`], so the profile's layouts bind
//! exactly as on the recording kernel. A directory capture (`perf record --threads`) is
//! read file by file and merged by time ([`dir`]). This module does not choose a profile
//! or a sink and prints nothing: the command line does.
//!
//! A corrupted or truncated file is an [`ImportError`], never a panic: the sizes the
//! crate would allocate from (the file header's sections, the event descriptions) are
//! checked against the file before it reads them.

mod dir;
mod layout;
mod split;
pub mod tracing_data;
mod unfinished;
pub use unfinished::{Partial, PartialRead};

use crate::correlate::Gap;
use crate::pipeline::{RecordSink, Stages};
use crate::profile::{self, Profile};
use crate::sink::time::WallClock;
use crate::sink::{Health, SinkError};
use crate::tracefs::{parse_format, Tracefs};
use linux_perf_data::linux_perf_event_reader::{
    ClockId, EventRecord, PerfClock, PerfEventAttr, PerfEventType, SampleFormat, SamplingPolicy,
};
use linux_perf_data::{
    Feature, PerfFile, PerfFileReader, PerfFileRecord, PerfRecordIter, UserRecordType,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Why a perf.data cannot be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot open {}: {source}", path.display())]
    Open { path: PathBuf, source: io::Error },
    #[error("{}: not a perf.data file (no PERFILE2 magic at its start)", path.display())]
    NotPerfData { path: PathBuf },
    #[error("{}: compressed with {tool}: decompress it first ({how}), then import the result (`perf record -z` captures are read as they are)", path.display())]
    Compressed {
        path: PathBuf,
        tool: &'static str,
        how: String,
    },
    #[error("{}: empty: perf wrote nothing to it (perf record failed before its header, e.g. an event or clock the kernel refused: see perf's own message)", path.display())]
    Empty { path: PathBuf },
    #[error("{}: a big-endian capture (recorded on a big-endian machine); ntprof-perf reads little-endian captures only", path.display())]
    BigEndian { path: PathBuf },
    #[error("{}: the file is truncated or corrupted: {what}; record it again, or check the copy", path.display())]
    Corrupt { path: PathBuf, what: String },
    #[error("{}: {source}; the file is truncated or corrupted", path.display())]
    Parse {
        path: PathBuf,
        source: linux_perf_data::Error,
    },
    #[error("standard input holds a file-mode perf.data, which is read by seeking: give its name instead of `-` (a stream is what `perf record -o -` writes)")]
    NotAStream,
    #[error("{}: the header file of a directory capture (perf record --threads), which holds no sample: the samples are in the data.N files beside it; import the directory, {}", path.display(), path.parent().unwrap_or(Path::new(".")).display())]
    Directory { path: PathBuf },
    #[error("{}: one ring's samples of a directory capture (perf record --threads), without the header that says what they are: import the directory, {}", path.display(), path.parent().unwrap_or(Path::new(".")).display())]
    Ring { path: PathBuf },
    #[error("{}: perf record did not finish this file (it was killed, ran out of disk, or is still running): its records are there, but not the event formats perf writes when it stops; give --tracefs DIR with the recording kernel's tracefs (/sys/kernel/tracing if it was recorded here since the last boot)", path.display())]
    Unfinished { path: PathBuf },
    #[error("{}: perf record did not finish this file, and had written no whole record to it (it was killed before its first write, or is still starting): there is nothing to import yet", path.display())]
    NothingWritten { path: PathBuf },
    #[error("{}: cut short (a copy that stopped early?): it is {len} bytes, but its header names sections up to byte {said}; its records are there up to the cut, but not the event formats perf writes after them; copy it again, or give --tracefs DIR with the recording kernel's tracefs (/sys/kernel/tracing if it was recorded here since the last boot)", path.display())]
    Cut { path: PathBuf, len: u64, said: u64 },
    #[error("{}: cut short (a copy that stopped early?) at byte {len}, before its first whole record: there is nothing to import; copy it again", path.display())]
    CutBeforeRecords { path: PathBuf, len: u64 },
    #[error("{}: the capture has no tracing data (event formats); give --tracefs DIR with the recording kernel's tracefs (or a copy of it)", path.display())]
    NoTracingData { path: PathBuf },
    #[error("{}: its tracing data cannot be read: {source}; give --tracefs DIR with the recording kernel's tracefs (or a copy of it)", path.display())]
    TracingData {
        path: PathBuf,
        source: tracing_data::TracingDataError,
    },
    #[error("{}: event {event} does not record {what} (perf record -e … must sample it; use the line `ntprof-perf list --perf-record PROFILE` prints)", path.display())]
    SampleFormat {
        path: PathBuf,
        event: String,
        what: &'static str,
    },
    #[error("{}: perf sampled event {event} ({how}), so most I/Os lack events and the rest would pair wrongly; record every event: without -F or -c (the line `ntprof-perf list --perf-record PROFILE` prints)", path.display())]
    Sampled {
        path: PathBuf,
        event: String,
        how: String,
    },
    #[error("{}: the capture holds no tracepoint events", path.display())]
    NoTracepoints { path: PathBuf },
    #[error("{}: tracepoint id {id} is not in the formats ({origin}); the formats are from another kernel", path.display())]
    UnknownId {
        path: PathBuf,
        id: u64,
        origin: String,
    },
    #[error("{}: no profile has all its required events in the capture (events: {events}); record with the line `ntprof-perf list --perf-record PROFILE` prints", path.display())]
    NoProfile { path: PathBuf, events: String },
    #[error("{}: the capture lacks the {profile} profile's events {missing} (it holds {events}); record with the line `ntprof-perf list --perf-record {profile}` prints", path.display())]
    ProfileEvents {
        path: PathBuf,
        profile: &'static str,
        missing: String,
        events: String,
    },
    #[error("{}: the capture fits the profiles {candidates} alike; choose one with --profile", path.display())]
    AmbiguousProfile { path: PathBuf, candidates: String },
    #[error(transparent)]
    Sink(#[from] SinkError),
}

/// How perf sampled an event, when it wrote fewer samples than the event fired.
/// A tracepoint writes every firing when its period is 1, or with any fixed period when
/// each sample records its period (`perf_swevent_event`: `PERF_SAMPLE_PERIOD` and no
/// frequency make every firing an overflow); `-F` (a frequency) thins them.
fn sampled(attr: &PerfEventAttr) -> Option<String> {
    match attr.sampling_policy {
        SamplingPolicy::Period(n)
            if n.get() == 1 || attr.sample_format.contains(SampleFormat::PERIOD) =>
        {
            None
        }
        SamplingPolicy::Period(n) => Some(format!("1 in {n}, perf record -c {n}")),
        SamplingPolicy::Frequency(f) => Some(format!("at most {f} samples/s, perf record -F {f}")),
        SamplingPolicy::NoSampling => Some("counted, not sampled".into()),
    }
}

/// What the capture watched, from perf's THREAD_MAP and CPU_MAP records, when it was
/// less than the whole machine. A completion runs wherever the device's interrupt lands,
/// in whatever task is on that CPU, so a capture that follows tasks or some CPUs cuts
/// I/Os: their rows are `incomplete` and their completions unmatched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Narrowed {
    /// Per-task (`perf record -p`, `-t`, or a command without `-a`): these tids.
    Tasks(Vec<u64>),
    /// `perf record -C`: these CPUs of the `online` the recording host had.
    Cpus { recorded: Vec<u32>, online: u32 },
}

impl std::fmt::Display for Narrowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Narrowed::Tasks(t) => {
                let shown: Vec<String> = t.iter().take(4).map(u64::to_string).collect();
                write!(
                    f,
                    "the capture followed {} (tid {}{}), not the whole machine (perf record without -a): a completion runs in whatever task the device interrupts, so I/Os whose events ran in other tasks are cut (incomplete rows, unmatched completions); record with -a (the line `ntprof-perf list --perf-record PROFILE` prints)",
                    if t.len() == 1 { "one task".to_string() } else { format!("{} tasks", t.len()) },
                    shown.join(", "),
                    if t.len() > 4 { ", …" } else { "" }
                )
            }
            Narrowed::Cpus { recorded, online } => {
                let shown: Vec<String> = recorded.iter().map(u32::to_string).collect();
                write!(
                    f,
                    "the capture covers only CPU {} ({} of the host's {online}; perf record -C): I/Os whose events ran on other CPUs are cut (incomplete rows, unmatched completions); record with -a",
                    shown.join(","),
                    recorded.len()
                )
            }
        }
    }
}

/// What a replay gives besides the rows.
#[derive(Debug)]
pub struct Replayed {
    pub health: Health,
    /// Set when the capture watched less than the whole machine.
    pub narrowed: Option<Narrowed>,
}

/// The CPUs of a `PERF_RECORD_CPU_MAP` payload (perf's three encodings: a list, a
/// bitmask of 32- or 64-bit words, a range); `None` when it cannot be read.
fn cpu_map(d: &[u8]) -> Option<Vec<u32>> {
    let u16_at = |at: usize| -> Option<u16> {
        d.get(at..at + 2)
            .and_then(|b| b.try_into().ok())
            .map(u16::from_le_bytes)
    };
    match u16_at(0)? {
        0 => {
            let nr = usize::from(u16_at(2)?);
            // −1 (any CPU): the events were opened on every CPU.
            (0..nr)
                .map(|i| u16_at(4 + 2 * i).filter(|&c| c != u16::MAX).map(u32::from))
                .collect()
        }
        1 => {
            let (nr, word) = (usize::from(u16_at(2)?), usize::from(u16_at(4)?));
            // Words start after the 16-bit fields; a 64-bit word after 4 bytes of
            // padding that keeps the old layout.
            let first = match word {
                4 => 6,
                8 => 10,
                _ => return None,
            };
            let mut cpus = Vec::new();
            for w in 0..nr {
                let at = first + w * word;
                let bytes = d.get(at..at + word)?;
                for (i, byte) in bytes.iter().enumerate() {
                    for bit in 0..8 {
                        if byte & (1 << bit) != 0 {
                            cpus.push(((w * word + i) * 8 + bit) as u32);
                        }
                    }
                }
            }
            Some(cpus)
        }
        2 if *d.get(2)? == 0 => Some((u32::from(u16_at(4)?)..=u32::from(u16_at(6)?)).collect()),
        _ => None,
    }
}

/// The tids of a `PERF_RECORD_THREAD_MAP` payload: a count, then per task its tid and
/// 16 bytes of name. A system-wide capture's map is one entry, −1.
fn thread_map(d: &[u8]) -> Option<Vec<u64>> {
    let nr = usize::try_from(le64(d, 0)).ok()?;
    (0..nr)
        .map(|i| {
            let at = 8 + i.checked_mul(24)?;
            d.get(at..at + 8).map(|_| le64(d, at))
        })
        .collect()
}

/// The clock a capture's samples are stamped with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureClock {
    /// perf's default clock (`local_clock`, no `-k`): not the wall clock, not
    /// CLOCK_MONOTONIC; rows can only be placed relative to each other.
    PerfDefault,
    /// `perf record -k ID`; `wall_offset_ns` (realtime − this clock) when the file has a
    /// CLOCK_DATA section (perf ≥ 5.13 writes it with `-k`).
    Id {
        id: i32,
        wall_offset_ns: Option<i128>,
    },
}

impl CaptureClock {
    /// The offset that turns sample times into wall-clock times; 0 when the file does not
    /// give it (start times are then relative: the epoch plus the sample clock).
    pub fn wall(&self) -> WallClock {
        match self {
            CaptureClock::Id {
                wall_offset_ns: Some(o),
                ..
            } => WallClock::with_offset(*o),
            _ => WallClock::with_offset(0),
        }
    }

    pub fn is_wall(&self) -> bool {
        matches!(
            self,
            CaptureClock::Id {
                wall_offset_ns: Some(_),
                ..
            }
        )
    }

    /// For the exit line: which clock, and whether start times are wall-clock.
    pub fn describe(&self) -> String {
        let name = |id: i32| match id {
            libc::CLOCK_MONOTONIC => "CLOCK_MONOTONIC (perf record -k mono)".to_string(),
            libc::CLOCK_MONOTONIC_RAW => "CLOCK_MONOTONIC_RAW (-k monotonic_raw)".to_string(),
            libc::CLOCK_REALTIME => "CLOCK_REALTIME (-k realtime)".to_string(),
            libc::CLOCK_BOOTTIME => "CLOCK_BOOTTIME (-k boottime)".to_string(),
            libc::CLOCK_TAI => "CLOCK_TAI (-k tai)".to_string(),
            other => format!("clock id {other}"),
        };
        match self {
            CaptureClock::PerfDefault => "perf's default clock (no -k): start times are relative (seconds since boot shown from the epoch), latencies are exact".to_string(),
            CaptureClock::Id { id, wall_offset_ns: Some(_) } => {
                format!("{}, start times are wall-clock (from the file's clock data)", name(*id))
            }
            CaptureClock::Id { id, wall_offset_ns: None } => format!(
                "{}, but the file has no clock data: start times are relative (clock shown from the epoch)",
                name(*id)
            ),
        }
    }
}

/// Whether `path` is named as one ring's file of a directory capture, `data.N`.
pub fn is_ring_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str()?.strip_prefix("data."))
        .is_some_and(|n| n.parse::<u64>().is_ok())
}

/// The records of a capture, file or stream.
enum Records {
    File(PerfRecordIter<Box<dyn ReadSeek>>),
    Pipe(PerfRecordIter<Splice<Box<dyn Read>>>),
    /// A directory capture: the header file's records, then each `data.N`'s.
    Dir(Vec<PerfRecordIter<Box<dyn ReadSeek>>>),
}

/// A file, or bytes in memory.
trait ReadSeek: Read + Seek {}

/// One ring's records (the runs of `file` that `scan` found), read as a file whose
/// header, attributes and features are those of the header file `header`.
fn ring(
    header: &Rc<Vec<u8>>,
    file: &Path,
    scan: dir::Scan,
) -> Result<PerfRecordIter<Box<dyn ReadSeek>>, ImportError> {
    let f = dir::ThreadFile::new(header, file, scan).map_err(|source| ImportError::Open {
        path: file.to_path_buf(),
        source,
    })?;
    let reader = PerfFileReader::parse_file(Box::new(f) as Box<dyn ReadSeek>)
        .map_err(|e| parse_error(file, e))?;
    Ok(reader.record_iter)
}
impl<T: Read + Seek> ReadSeek for T {}

/// The first 16 bytes (magic and header size), and how many there were.
fn header(r: &mut dyn Read) -> io::Result<([u8; 16], usize)> {
    let mut head = [0u8; 16];
    let got = read_full(r, &mut head)?;
    Ok((head, got))
}

/// A stream's header is 16 bytes (magic and its own size); a file's is larger.
fn pipe_mode(head: &[u8; 16]) -> bool {
    le64(head, 8) == PIPE_HEADER
}

/// The crate's error, said as what to do.
fn parse_error(path: &Path, source: linux_perf_data::Error) -> ImportError {
    ImportError::Parse {
        path: path.to_path_buf(),
        source,
    }
}

/// An opened capture: its formats, events and clock, its records not yet read.
pub struct Capture {
    pub path: PathBuf,
    /// A pipe-mode capture (`perf record -o -`).
    pub pipe: bool,
    /// The formats to bind layouts with: the file's own, or `--tracefs DIR`.
    pub formats: Tracefs,
    /// `system:event` of every tracepoint the capture samples, in attribute order.
    pub events: Vec<String>,
    pub clock: CaptureClock,
    /// Where it was recorded (perf's HOSTNAME and OSRELEASE sections), when said.
    pub host: Option<String>,
    pub kernel: Option<String>,
    /// The recording host's online CPUs (perf's NRCPUS section), when said.
    online_cpus: Option<u32>,
    file: PerfFile,
    records: Records,
    /// Files of a directory capture that end inside a record (perf stopped mid-write).
    torn: u64,
    /// Bytes of records in a file without perf's rounds that could not be split by CPU,
    /// sorted whole in memory (see [`unrounded`]), when that is many.
    pub unrounded: Option<u64>,
    /// A file without rounds read CPU by CPU (see [`split`]): how many CPUs.
    pub split: Option<usize>,
    /// A file perf record never finished, or cut short, and what was read of it (see
    /// [`unfinished`]).
    pub partial: Option<PartialRead>,
}

/// `PERF_RECORD_LOST_SAMPLES`: perf writes them at the end with the kernel's lost count
/// of each event (`PERF_FORMAT_LOST`); perf 6.1 sums an event's CPUs into one, stamped
/// with CPU 0.
const RECORD_LOST_SAMPLES: u32 = 13;
/// `PERF_RECORD_FINISHED_ROUND`: every sample of the rounds before the last is out.
const RECORD_FINISHED_ROUND: u32 = 68;
/// `PERF_RECORD_HEADER_TRACING_DATA`: in a stream, the tracing data follows the record.
const RECORD_TRACING_DATA: u32 = 66;
/// `PERF_RECORD_AUXTRACE`: its data follows the record too.
const RECORD_AUXTRACE: u32 = 71;
/// `PERF_RECORD_HEADER_FEATURE`.
const RECORD_FEATURE: u32 = 80;
/// perf's `HEADER_EVENT_DESC` feature bit.
const FEATURE_EVENT_DESC: u64 = 12;

/// The file header: magic, size, attr_size, then (offset, size) of the attrs, data and
/// (unused) event types sections, then the feature bitmap.
const FILE_HEADER: usize = 104;
const PIPE_HEADER: u64 = 16;

impl Capture {
    /// Open `path` (`-` is standard input, a stream). `tracefs`: formats to use instead
    /// of the file's own (`--tracefs DIR`; also the fallback when it has none).
    pub fn open(path: &Path, tracefs: Option<&Tracefs>) -> Result<Capture, ImportError> {
        let open_err = |source| ImportError::Open {
            path: path.to_path_buf(),
            source,
        };
        if path == Path::new("-") {
            let mut input: Box<dyn Read> = Box::new(io::stdin());
            let (head, got) = header(&mut *input).map_err(open_err)?;
            Capture::check_magic(path, &head, got)?;
            if pipe_mode(&head) {
                return Capture::stream(path, input, head, tracefs);
            }
            return Err(ImportError::NotAStream);
        }
        if path.is_dir() {
            return Capture::directory(path, tracefs);
        }
        // The header file of a directory capture holds what perf synthesized at the
        // start and no sample: zero rows, if it were read alone.
        if path.file_name() == Some("data".as_ref())
            && path
                .parent()
                .is_some_and(|d| !dir::thread_files(d).is_empty())
        {
            return Err(ImportError::Directory {
                path: path.to_path_buf(),
            });
        }
        if is_ring_file(path) && path.with_file_name("data").is_file() {
            return Err(ImportError::Ring {
                path: path.to_path_buf(),
            });
        }
        let f = File::open(path).map_err(open_err)?;
        Capture::seekable(path, Some(path), Box::new(BufReader::new(f)), tracefs)
    }

    /// perf's directory format: a header file `data` and, from `perf record --threads`,
    /// the samples in `data.N` (one per ring), merged by time here (see [`dir`]). A
    /// directory with `data` alone (`perf inject`'s output of one) is that file.
    fn directory(path: &Path, tracefs: Option<&Tracefs>) -> Result<Capture, ImportError> {
        let data = path.join("data");
        let threads = dir::thread_files(path);
        if threads.is_empty() {
            let f = File::open(&data).map_err(|source| ImportError::Open {
                path: data.clone(),
                source,
            })?;
            return Capture::seekable(path, Some(&data), Box::new(BufReader::new(f)), tracefs);
        }
        let header = std::fs::read(&data).map_err(|source| ImportError::Open {
            path: data.clone(),
            source,
        })?;
        let (mut cap, main) = Capture::read_header_file(path, &header, tracefs)?;
        let mut header = header;
        if let Some(PartialRead { bytes: whole, .. }) = cap.partial {
            // Each ring's file is read with the header file's header: as finished.
            unfinished::finish_header(&mut header, whole);
        }
        let header = Rc::new(header);
        let mut iters = vec![main];
        for t in threads {
            let open_err = |source| ImportError::Open {
                path: t.clone(),
                source,
            };
            let scan = dir::scan(&t)
                .map_err(open_err)?
                .map_err(|at| ImportError::Corrupt {
                    path: t.clone(),
                    what: format!("no whole record at byte {at}"),
                })?;
            cap.torn += u64::from(scan.torn > 0);
            if let Some(PartialRead { bytes, .. }) = cap.partial.as_mut() {
                // The records said to be read are the ring's too.
                *bytes += scan.bytes();
            }
            iters.push(ring(&header, &t, scan)?);
        }
        cap.records = Records::Dir(iters);
        Ok(cap)
    }

    /// A capture held in memory (file or pipe mode); `name` names it in messages.
    pub fn from_bytes(
        name: &Path,
        bytes: Vec<u8>,
        tracefs: Option<&Tracefs>,
    ) -> Result<Capture, ImportError> {
        Capture::seekable(name, None, Box::new(io::Cursor::new(bytes)), tracefs)
    }

    fn check_magic(path: &Path, head: &[u8; 16], got: usize) -> Result<(), ImportError> {
        if got >= 8 && &head[..8] == b"2ELIFREP" {
            return Err(ImportError::BigEndian {
                path: path.to_path_buf(),
            });
        }
        if got == 0 {
            return Err(ImportError::Empty {
                path: path.to_path_buf(),
            });
        }
        if let Some(c) = crate::sink::input::compression(&head[..got]) {
            let how = if path == Path::new("-") {
                format!("`{} -dc FILE | ntprof-perf import -`", c.tool)
            } else {
                format!("`{} {}`", c.undo, path.display())
            };
            return Err(ImportError::Compressed {
                path: path.to_path_buf(),
                tool: c.tool,
                how,
            });
        }
        if got < 8 || &head[..8] != b"PERFILE2" {
            return Err(ImportError::NotPerfData {
                path: path.to_path_buf(),
            });
        }
        if got < 16 {
            return Err(ImportError::Corrupt {
                path: path.to_path_buf(),
                what: format!("it ends at byte {got}, inside the header"),
            });
        }
        Ok(())
    }

    /// A file capture read from `r`.
    /// A file capture read from `r`; `file`: the file it is, when it can be opened
    /// again (to read a capture without rounds ring by ring, see [`split`]).
    fn seekable(
        path: &Path,
        file: Option<&Path>,
        mut r: Box<dyn ReadSeek>,
        tracefs: Option<&Tracefs>,
    ) -> Result<Capture, ImportError> {
        let open_err = |source| ImportError::Open {
            path: path.to_path_buf(),
            source,
        };
        let corrupt = |what: String| ImportError::Corrupt {
            path: path.to_path_buf(),
            what,
        };
        let (head, got) = header(&mut *r).map_err(open_err)?;
        Capture::check_magic(path, &head, got)?;
        if pipe_mode(&head) {
            return Capture::stream(path, Box::new(r), head, tracefs);
        }
        let header_size = le64(&head, 8);
        if header_size != FILE_HEADER as u64 {
            return Err(corrupt(format!(
                "its header says it is {header_size} bytes, perf writes {FILE_HEADER}"
            )));
        }
        let mut data = check_file_layout(&mut *r).map_err(corrupt)?;
        let mut partial = None;
        if let Some(how) = data.partial {
            let w = layout::walk(&mut *r, data.off, data.size, false, |_| {}).map_err(open_err)?;
            // perf writes a FINISHED_ROUND after each pass over its rings. After the
            // last, a pass it did not finish: some rings' records and not the others',
            // whose I/Os would look still in flight, and deepen the queue of the rest.
            let keep = match how {
                Partial::Cut {
                    in_records: false, ..
                } => w.whole,
                _ => w.round_end.unwrap_or(w.whole),
            };
            if keep == 0 {
                let path = path.to_path_buf();
                return Err(match how {
                    Partial::Unfinished => ImportError::NothingWritten { path },
                    Partial::Cut { len, .. } => ImportError::CutBeforeRecords { path, len },
                });
            }
            r = Box::new(unfinished::Unfinished::new(r, data.off, keep).map_err(open_err)?);
            data.size = keep;
            partial = Some(PartialRead {
                how,
                bytes: keep,
                after_round: w.whole - keep,
            });
        }
        // A split stops at the first round, and tells of one: a file walked to its end
        // for the split is not walked again to learn it has none.
        let mut rounded = false;
        if let (Some(file), None, 1..) = (file, partial, data.size) {
            match split::split(&mut *r, data.off, data.size).map_err(open_err)? {
                split::Split::Rings(rings) => {
                    if let Some(cap) =
                        Capture::rings_of(path, file, &mut *r, &data, rings, tracefs)?
                    {
                        return Ok(cap);
                    }
                }
                split::Split::Rounded => rounded = true,
                split::Split::No => {}
            }
        }
        let unrounded = if rounded {
            None
        } else {
            unrounded(&mut *r, (data.off, data.size), 1).map_err(open_err)?
        };
        r.seek(SeekFrom::Start(0)).map_err(open_err)?;
        let reader = PerfFileReader::parse_file(r).map_err(|e| parse_error(path, e))?;
        let mut cap = Capture::from_reader(
            path,
            reader.perf_file,
            Records::File(reader.record_iter),
            None,
            tracefs,
            partial.map(|p| p.how),
        )?;
        cap.unrounded = unrounded.filter(|&size| size >= UNROUNDED_NOTE);
        cap.partial = partial;
        Ok(cap)
    }

    /// The header file of a directory capture (`header`: its bytes), and its own
    /// records; the capture's records are then set to those of its rings.
    fn read_header_file(
        path: &Path,
        header: &[u8],
        tracefs: Option<&Tracefs>,
    ) -> Result<(Capture, PerfRecordIter<Box<dyn ReadSeek>>), ImportError> {
        let mut cap = Capture::seekable(
            path,
            None,
            Box::new(io::Cursor::new(header.to_vec())),
            tracefs,
        )?;
        match std::mem::replace(&mut cap.records, Records::Dir(Vec::new())) {
            Records::File(main) => Ok((cap, main)),
            _ => Err(ImportError::Corrupt {
                path: path.to_path_buf(),
                what: "the header file of a directory capture is a stream".to_string(),
            }),
        }
    }

    /// A file capture without rounds read as the directory capture it was merged from,
    /// one ring per CPU (`rings`: their runs, see [`split`]); `None` when its header
    /// file cannot be made.
    fn rings_of(
        path: &Path,
        file: &Path,
        r: &mut dyn ReadSeek,
        data: &Data,
        rings: Vec<split::Runs>,
        tracefs: Option<&Tracefs>,
    ) -> Result<Option<Capture>, ImportError> {
        let open_err = |source| ImportError::Open {
            path: path.to_path_buf(),
            source,
        };
        let len = r.seek(SeekFrom::End(0)).map_err(open_err)?;
        let Some(header) = split::header_file(r, data.off, data.size, len).map_err(open_err)?
        else {
            return Ok(None);
        };
        let (mut cap, main) = Capture::read_header_file(path, &header, tracefs)?;
        let header = Rc::new(header);
        let mut iters = vec![main];
        // The first list is of the records that name no CPU.
        cap.split = Some(rings.len() - 1);
        for runs in rings {
            iters.push(ring(&header, file, dir::Scan { runs, torn: 0 })?);
        }
        cap.records = Records::Dir(iters);
        Ok(Some(cap))
    }

    /// A pipe-mode capture whose 16-byte header `head` has been read from `input`.
    fn stream(
        path: &Path,
        input: Box<dyn Read>,
        head: [u8; 16],
        tracefs: Option<&Tracefs>,
    ) -> Result<Capture, ImportError> {
        let tracing = Rc::new(RefCell::new(None));
        let splice = Splice {
            inner: input,
            pending: head.to_vec(),
            pos: 0,
            tracing: Rc::clone(&tracing),
        };
        let reader = PerfFileReader::parse_pipe(splice).map_err(|e| parse_error(path, e))?;
        let data = tracing.borrow_mut().take();
        Capture::from_reader(
            path,
            reader.perf_file,
            Records::Pipe(reader.record_iter),
            data,
            tracefs,
            None,
        )
    }

    /// The plan of profile `p` bound to the capture's formats, with the profile's flags
    /// at their defaults: perf's own filters already chose what the capture holds.
    /// `sys` names the devices (see `SysBlock`).
    pub fn plan(
        &self,
        p: &'static dyn Profile,
        sys: crate::device::SysBlock,
    ) -> Result<profile::Plan, profile::PlanError> {
        profile::plan_offline(p, &self.formats, sys)
    }

    fn from_reader(
        path: &Path,
        file: PerfFile,
        records: Records,
        stream_tracing: Option<Result<Vec<u8>, String>>,
        tracefs: Option<&Tracefs>,
        partial: Option<Partial>,
    ) -> Result<Capture, ImportError> {
        let pipe = matches!(records, Records::Pipe(_));
        let p = || path.to_path_buf();
        let blob = match stream_tracing {
            Some(Err(what)) => {
                return Err(ImportError::Corrupt { path: p(), what });
            }
            Some(Ok(b)) => Some(b),
            None => file
                .feature_section_data(Feature::TRACING_DATA)
                .map(<[u8]>::to_vec),
        };
        // The file's own formats; --tracefs takes precedence and stands in when the
        // file has none.
        let formats = match (tracefs, blob) {
            (Some(t), _) => t.clone(),
            (None, None) => match partial {
                Some(Partial::Unfinished) => return Err(ImportError::Unfinished { path: p() }),
                Some(Partial::Cut { len, said, .. }) => {
                    return Err(ImportError::Cut {
                        path: p(),
                        len,
                        said,
                    })
                }
                None => return Err(ImportError::NoTracingData { path: p() }),
            },
            (None, Some(b)) => {
                let texts = tracing_data::parse(&b)
                    .map_err(|source| ImportError::TracingData { path: p(), source })?;
                let mut m = BTreeMap::new();
                for t in texts {
                    // An unparsable format is reported when a profile asks for it.
                    let name = parse_format(&t.text).map(|f| f.name).unwrap_or_default();
                    if !name.is_empty() {
                        m.insert((t.system, name), t.text);
                    }
                }
                Tracefs::in_memory(path, m)
            }
        };
        let by_id = ids(&formats);
        let mut events = Vec::new();
        let mut clock = CaptureClock::PerfDefault;
        for a in file.event_attributes() {
            let PerfEventType::Tracepoint(id) = a.attr.type_ else {
                continue;
            };
            let name = match by_id.get(&id) {
                Some(n) => n.clone(),
                None => {
                    return Err(ImportError::UnknownId {
                        path: p(),
                        id,
                        origin: formats.root().display().to_string(),
                    })
                }
            };
            for (flag, what) in [
                (
                    SampleFormat::RAW,
                    "the raw record (-e with a tracepoint records it)",
                ),
                (SampleFormat::TIME, "the time (PERF_SAMPLE_TIME)"),
            ] {
                if !a.attr.sample_format.contains(flag) {
                    return Err(ImportError::SampleFormat {
                        path: p(),
                        event: name,
                        what,
                    });
                }
            }
            if let Some(how) = sampled(&a.attr) {
                return Err(ImportError::Sampled {
                    path: p(),
                    event: name,
                    how,
                });
            }
            if let PerfClock::ClockId(c) = a.attr.clock {
                clock = CaptureClock::Id {
                    id: clock_id(c),
                    wall_offset_ns: None,
                };
            }
            if !events.contains(&name) {
                events.push(name);
            }
        }
        if events.is_empty() {
            return Err(ImportError::NoTracepoints { path: p() });
        }
        if let CaptureClock::Id { id, .. } = clock {
            if let Ok(Some(cd)) = file.clock_data() {
                if cd.clockid as i32 == id {
                    clock = CaptureClock::Id {
                        id,
                        wall_offset_ns: Some(cd.wall_clock_ns as i128 - cd.clockid_time_ns as i128),
                    };
                }
            }
        }
        let host = file.hostname().ok().flatten().map(str::to_string);
        let kernel = file.os_release().ok().flatten().map(str::to_string);
        let online_cpus = file.nr_cpus().ok().flatten().map(|n| n.nr_cpus_online);
        Ok(Capture {
            path: p(),
            pipe,
            formats,
            events,
            clock,
            host,
            kernel,
            online_cpus,
            file,
            records,
            torn: 0,
            unrounded: None,
            split: None,
            partial: None,
        })
    }

    /// The profile `name`, or the one whose required events are all in the capture (of
    /// several, the one that uses most of the capture's events).
    pub fn profile(&self, name: Option<&str>) -> Result<&'static dyn Profile, ImportError> {
        let has = |s: &str, e: &str| self.events.iter().any(|x| *x == format!("{s}:{e}"));
        if let Some(n) = name {
            // An unknown name: the caller's own message lists the profiles.
            let p = profile::find(n).ok_or_else(|| ImportError::NoProfile {
                path: self.path.clone(),
                events: self.events.join(", "),
            })?;
            let missing: Vec<String> = p
                .events()
                .iter()
                .filter(|r| p.descriptor().every_row_needs(r) && !has(r.system, r.event))
                .map(|r| format!("{}:{}", r.system, r.event))
                .collect();
            if !missing.is_empty() {
                return Err(ImportError::ProfileEvents {
                    path: self.path.clone(),
                    profile: p.name(),
                    missing: missing.join(", "),
                    events: self.events.join(", "),
                });
            }
            return Ok(p);
        }
        let mut fits: Vec<(usize, &'static dyn Profile)> = profile::all()
            .iter()
            .filter(|p| {
                p.events()
                    .iter()
                    .all(|r| !p.descriptor().every_row_needs(r) || has(r.system, r.event))
            })
            .map(|p| {
                let used = p.events().iter().filter(|r| has(r.system, r.event)).count();
                (used, *p)
            })
            .collect();
        fits.sort_by_key(|f| std::cmp::Reverse(f.0));
        match fits[..] {
            [] => Err(ImportError::NoProfile {
                path: self.path.clone(),
                events: self.events.join(", "),
            }),
            [(n, _), (m, _), ..] if n == m => Err(ImportError::AmbiguousProfile {
                path: self.path.clone(),
                candidates: fits
                    .iter()
                    .filter(|f| f.0 == n)
                    .map(|f| f.1.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            }),
            [(_, p), ..] => Ok(p),
        }
    }

    /// Feed every sample through `pipe` into `sink`, then finish; the run's counters with
    /// the capture's LOST and THROTTLE records counted as a live run counts them.
    pub fn replay(
        mut self,
        pipe: &mut dyn Stages,
        sink: &mut dyn RecordSink,
    ) -> Result<Replayed, ImportError> {
        let mut tally = Tally::default();
        let mut first_err = None;
        let path = self.path.clone();
        let mut out = Out {
            pipe: &mut *pipe,
            sink: &mut *sink,
            tally: &mut tally,
            first_err: &mut first_err,
            since_round: 0,
            last: 0,
        };
        let res = match &mut self.records {
            Records::File(it) => feed(it, &mut self.file, &mut out),
            Records::Pipe(it) => feed(it, &mut self.file, &mut out),
            Records::Dir(its) => feed_merged(its, &mut self.file, &mut out),
        };
        if let Err(source) = res {
            return Err(parse_error(&path, source));
        }
        if let Some(e) = first_err {
            return Err(e.into());
        }
        pipe.finish(&mut |r, n| deliver(sink, r, n, &mut first_err));
        if let Some(e) = first_err {
            return Err(e.into());
        }
        let mut h = pipe.health();
        h.bad_records += tally.bad + self.torn;
        // A ring's LOST records and the events' own lost counts (LOST_SAMPLES, which perf
        // writes per event at the end, summed over CPUs) count the same losses. The
        // LOST records give the split per CPU; what LOST_SAMPLES counts beyond them (a
        // ring that overflowed at the end never gets a LOST record) goes to the CPU
        // perf wrote it with.
        let mut lost = tally.lost;
        let (by_ring, by_event) = (
            lost.values().sum::<u64>(),
            tally.lost_samples.values().sum::<u64>(),
        );
        if by_event > by_ring {
            let cpu = tally.lost_samples.keys().next().copied().unwrap_or(0);
            *lost.entry(cpu).or_insert(0) += by_event - by_ring;
        }
        h.set_losses(lost.into_iter().collect(), Vec::new());
        h.throttled = tally.throttled;
        h.unthrottled = tally.unthrottled;
        h.duplicates = tally.duplicates;
        let narrowed = match (tally.tasks, tally.cpus, self.online_cpus) {
            (Some(t), _, _) if !t.is_empty() && t != [u64::MAX] => Some(Narrowed::Tasks(t)),
            (_, Some(c), Some(online)) if !c.is_empty() && (c.len() as u32) < online => {
                Some(Narrowed::Cpus {
                    recorded: c,
                    online,
                })
            }
            _ => None,
        };
        Ok(Replayed {
            health: h,
            narrowed,
        })
    }
}

/// The kernel's number for a clock the crate names.
fn clock_id(c: ClockId) -> i32 {
    match c {
        ClockId::Realtime => libc::CLOCK_REALTIME,
        ClockId::Monotonic => libc::CLOCK_MONOTONIC,
        ClockId::ProcessCputimeId => libc::CLOCK_PROCESS_CPUTIME_ID,
        ClockId::ThreadCputimeId => libc::CLOCK_THREAD_CPUTIME_ID,
        ClockId::MonotonicRaw => libc::CLOCK_MONOTONIC_RAW,
        ClockId::RealtimeCoarse => libc::CLOCK_REALTIME_COARSE,
        ClockId::MonotonicCoarse => libc::CLOCK_MONOTONIC_COARSE,
        ClockId::Boottime => libc::CLOCK_BOOTTIME,
        ClockId::RealtimeAlarm => libc::CLOCK_REALTIME_ALARM,
        ClockId::BoottimeAlarm => libc::CLOCK_BOOTTIME_ALARM,
        _ => -1,
    }
}

/// `system:event` by tracepoint id, for every format the tree holds. For a directory
/// tree, every format under it.
fn ids(t: &Tracefs) -> HashMap<u64, String> {
    let mut m = HashMap::new();
    let mut add = |sys: &str, ev: &str| {
        if let Ok(f) = t.event(sys, ev) {
            m.insert(f.id, format!("{sys}:{ev}"));
        }
    };
    let mem = t.in_memory_events();
    if mem.is_empty() {
        for p in t.all_format_paths().unwrap_or_default() {
            let ev = p.parent();
            let sys = ev.and_then(Path::parent);
            if let (Some(e), Some(s)) = (
                ev.and_then(Path::file_name).and_then(|x| x.to_str()),
                sys.and_then(Path::file_name).and_then(|x| x.to_str()),
            ) {
                add(s, e);
            }
        }
    } else {
        for (s, e) in mem {
            add(&s, &e);
        }
    }
    m
}

#[derive(Default)]
struct Tally {
    lost: BTreeMap<u32, u64>,
    /// The time of the last sample from each CPU.
    last_on: HashMap<u32, u64>,
    lost_samples: BTreeMap<u32, u64>,
    throttled: u64,
    unthrottled: u64,
    bad: u64,
    same_time: SameTime,
    duplicates: u64,
    /// The tids of perf's THREAD_MAP, and the CPUs of its CPU_MAP.
    tasks: Option<Vec<u64>>,
    cpus: Option<Vec<u32>>,
}

/// The samples of the latest timestamp, to tell a copy from an event. Stock `perf
/// record` can write part of a ring twice (seen with perf 6.1: a ring's last samples
/// again after the workload's exit, each once more, byte for byte), and the reader's sort
/// puts a copy next to its original: the same time. Two firings of one event on one
/// CPU do not share a nanosecond stamp and every byte of their payload (the common
/// fields hold the pid), so such a sample is a copy; correlating it would make each
/// I/O of the copied stretch twice.
#[derive(Default)]
struct SameTime {
    time: u64,
    /// (cpu, sample id, payload's range in `bytes`).
    seen: Vec<(u32, Option<u64>, std::ops::Range<usize>)>,
    bytes: Vec<u8>,
}

impl SameTime {
    /// Whether this sample was seen already at its time; remembered if not.
    fn repeated(&mut self, time: u64, cpu: u32, id: Option<u64>, raw: &[u8]) -> bool {
        if time != self.time {
            self.time = time;
            self.seen.clear();
            self.bytes.clear();
        }
        let bytes = &self.bytes;
        if self
            .seen
            .iter()
            .any(|(c, i, r)| *c == cpu && *i == id && bytes[r.clone()] == *raw)
        {
            return true;
        }
        let start = self.bytes.len();
        self.bytes.extend_from_slice(raw);
        self.seen.push((cpu, id, start..self.bytes.len()));
        false
    }
}

/// SAMPLE, LOST, THROTTLE, UNTHROTTLE and LOST_SAMPLES: the records an import reads.
const WANTED: [u32; 5] = [9, 2, 5, 6, RECORD_LOST_SAMPLES];

/// Samples between two rounds of the sorter.
const ROUND: u32 = 4096;

/// A sample as the crate read it: time, CPU, sample id, raw payload.
type Sample<'a> = (u64, u32, Option<u64>, std::borrow::Cow<'a, [u8]>);

/// Every record of one capture file, in the crate's (time) order.
fn feed<R: Read>(
    it: &mut PerfRecordIter<R>,
    file: &mut PerfFile,
    out: &mut Out<'_>,
) -> Result<(), linux_perf_data::Error> {
    while let Some(rec) = it.next_record(file)? {
        if let Some((t, c, id, raw)) = out.take(rec) {
            out.sample(t, c, id, &raw);
        }
        if out.first_err.is_some() {
            break;
        }
    }
    Ok(())
}

/// The records of several files, each in time order, merged by time: the next sample is
/// the oldest of the files' next ones (ties to the lower file). Other records are taken
/// as their file reaches them.
fn feed_merged<R: Read>(
    its: &mut [PerfRecordIter<R>],
    file: &mut PerfFile,
    out: &mut Out<'_>,
) -> Result<(), linux_perf_data::Error> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    // Per file, its next sample (time, CPU, id, payload); the payload's buffer is kept.
    let mut heads: Vec<(u64, u32, Option<u64>, Vec<u8>)> = vec![Default::default(); its.len()];
    let mut next = BinaryHeap::new();
    let mut advance = |i: usize,
                       its: &mut [PerfRecordIter<R>],
                       out: &mut Out<'_>,
                       heads: &mut [(u64, u32, Option<u64>, Vec<u8>)]|
     -> Result<Option<Reverse<(u64, usize)>>, linux_perf_data::Error> {
        while let Some(rec) = its[i].next_record(file)? {
            if let Some((t, c, id, raw)) = out.take(rec) {
                let h = &mut heads[i];
                (h.0, h.1, h.2) = (t, c, id);
                h.3.clear();
                h.3.extend_from_slice(&raw);
                return Ok(Some(Reverse((t, i))));
            }
        }
        Ok(None)
    };
    for i in 0..its.len() {
        next.extend(advance(i, its, out, &mut heads)?);
    }
    while let Some(Reverse((_, i))) = next.pop() {
        let (t, c, id, ref raw) = heads[i];
        out.sample(t, c, id, raw);
        if out.first_err.is_some() {
            break;
        }
        next.extend(advance(i, its, out, &mut heads)?);
    }
    Ok(())
}

/// Where an import's records go, and what it counts on the way.
struct Out<'a> {
    pipe: &'a mut dyn Stages,
    sink: &'a mut dyn RecordSink,
    tally: &'a mut Tally,
    first_err: &'a mut Option<SinkError>,
    since_round: u32,
    /// The time of the last sample.
    last: u64,
}

impl Out<'_> {
    /// A sample record's fields, or `None` for any other record, taken here.
    fn take<'r>(&mut self, rec: PerfFileRecord<'r>) -> Option<Sample<'r>> {
        let record = match rec {
            PerfFileRecord::EventRecord { record, .. } => record,
            PerfFileRecord::UserRecord(u) => {
                if u.record_type == UserRecordType::PERF_THREAD_MAP {
                    self.tally.tasks = thread_map(&u.data.as_slice());
                } else if u.record_type == UserRecordType::PERF_CPU_MAP {
                    self.tally.cpus = cpu_map(&u.data.as_slice());
                }
                return None;
            }
        };
        // Only the kinds read here are parsed: the crate's parsers of others (MMAP2)
        // assert on what a corrupted file can hold.
        if !WANTED.contains(&record.record_type.0) {
            return None;
        }
        let tally = &mut *self.tally;
        let cpu = || record.common_data().ok().and_then(|c| c.cpu).unwrap_or(0);
        match record.parse() {
            Ok(EventRecord::Sample(s)) => {
                let (Some(raw), Some(t)) = (s.raw, s.timestamp) else {
                    return None;
                };
                return Some((t, s.cpu.unwrap_or(0), s.id, raw.as_slice()));
            }
            Ok(EventRecord::Lost(l)) => {
                let c = cpu();
                *tally.lost.entry(c).or_insert(0) += l.count;
                // The samples were lost on that CPU's ring after the last one that
                // arrived from it and before this record was written; which events
                // they were, the record does not say. As live, the correlator hears
                // of them before it sees later events.
                let before = record.timestamp().unwrap_or(self.last);
                let after = tally.last_on.get(&c).copied().unwrap_or(0);
                self.pipe.on_missing(&Gap {
                    event: "",
                    n: l.count,
                    after,
                    before: before.max(after),
                });
            }
            Ok(EventRecord::Throttle(_)) => tally.throttled += 1,
            Ok(EventRecord::Unthrottle(_)) => tally.unthrottled += 1,
            Ok(EventRecord::Raw(r)) if r.record_type.0 == RECORD_LOST_SAMPLES => {
                let d = r.data.as_slice();
                match d.len() >= 8 {
                    true => *tally.lost_samples.entry(cpu()).or_insert(0) += le64(&d, 0),
                    false => tally.bad += 1,
                }
            }
            Ok(_) => {}
            Err(_) => tally.bad += 1,
        }
        None
    }

    /// Queue one sample; a sorter round every [`ROUND`] samples.
    fn sample(&mut self, t: u64, c: u32, id: Option<u64>, raw: &[u8]) {
        // Samples come in time order (perf's rounds, or the merge of files each in
        // order), so the time of this one bounds every later one: a round may start here.
        if self.since_round >= ROUND {
            self.pipe.begin_round(t);
            let (sink, first_err) = (&mut *self.sink, &mut *self.first_err);
            self.pipe
                .end_round(&mut |r, n| deliver(sink, r, n, first_err));
            self.since_round = 0;
        }
        if self.tally.same_time.repeated(t, c, id, raw) {
            self.tally.duplicates += 1;
            return;
        }
        self.pipe.sample(t, c, raw);
        self.tally.last_on.insert(c, t);
        self.last = t;
        self.since_round += 1;
    }
}

fn deliver(
    sink: &mut dyn RecordSink,
    r: &dyn crate::record::IoRecord,
    sample: u32,
    first_err: &mut Option<SinkError>,
) {
    if first_err.is_none() {
        if let Err(e) = sink.record(r, sample) {
            *first_err = Some(e);
        }
    }
}

/// Fill `buf` as far as the input goes; the count read.
fn read_full(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

fn le64(b: &[u8], at: usize) -> u64 {
    b.get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn le32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes)
}

/// Records from which a file without a FINISHED_ROUND is said to be held in memory.
const UNROUNDED_NOTE: u64 = 64 << 20;

/// The bytes of records (`data`: the data section's offset and size) when there are at
/// least `min` of them and no FINISHED_ROUND: the crate's sorter releases
/// records only at a round, so it holds such a file whole, about twice its size.
/// `perf inject`'s merge of a `--threads` directory is one: each ring's records in
/// 2 MiB pieces, one ring after the other, so only a sort of the whole puts them in
/// order, or a split back into its rings ([`split`]), which is tried first. perf
/// record writes a round after every pass over its rings: the walk stops at the first.
fn unrounded(r: &mut dyn ReadSeek, (off, size): (u64, u64), min: u64) -> io::Result<Option<u64>> {
    if size < min {
        return Ok(None);
    }
    let w = layout::walk(r, off, size, true, |_| {})?;
    // Rounds, or records that go wrong (the crate says what): not said.
    Ok((!w.round && w.whole == size).then_some(size))
}

/// Section `what` (`size` bytes from `off`) lies inside a file of `len` bytes.
fn inside(what: &str, off: u64, size: u64, len: u64) -> Result<(), Beyond> {
    match off.checked_add(size) {
        Some(end) if end <= len => Ok(()),
        end => Err(Beyond {
            end: end.unwrap_or(u64::MAX),
            what: format!(
                "its {what} section (bytes {off}..+{size}) is beyond its end ({len} bytes)"
            ),
        }),
    }
}

/// A section the header names ends at `end`, past the end of the file.
struct Beyond {
    end: u64,
    what: String,
}

impl From<Beyond> for String {
    fn from(b: Beyond) -> String {
        b.what
    }
}

/// Where a file's records are.
struct Data {
    off: u64,
    size: u64,
    /// The file is not whole (see [`unfinished`]): `size` is the rest of it.
    partial: Option<Partial>,
}

/// Every section the file header names lies inside the file, and the event
/// descriptions' counts fit their section: the crate allocates from these sizes. A file
/// perf never finished, or cut short, is told apart (see [`unfinished`]).
fn check_file_layout(f: &mut dyn ReadSeek) -> Result<Data, String> {
    let len = f.seek(SeekFrom::End(0)).map_err(|e| e.to_string())?;
    f.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
    let mut h = [0u8; FILE_HEADER];
    if read_full(f, &mut h).map_err(|e| e.to_string())? < FILE_HEADER {
        return Err(format!("it is {len} bytes, shorter than perf's header"));
    }
    let inside = |what: &str, off: u64, size: u64| inside(what, off, size, len);
    inside("attributes", le64(&h, 24), le64(&h, 32))?;
    inside("event types", le64(&h, 56), le64(&h, 64))?;
    let (off, size) = (
        le64(&h, layout::DATA_SECTION),
        le64(&h, layout::DATA_SECTION + 8),
    );
    let cut = |said, in_records| {
        Some(Partial::Cut {
            len,
            said,
            in_records,
        })
    };
    if let Err(b) = inside("data", off, size) {
        // perf wrote a size, and the file ends inside the records it names.
        if size > 0 && off <= len {
            return Ok(Data {
                off,
                size: len - off,
                partial: cut(b.end, true),
            });
        }
        return Err(b.what);
    }
    match check_features(f, &h, len, off + size) {
        Ok(()) => Ok(Data {
            off,
            size,
            partial: None,
        }),
        // perf writes the data section's size, and the features after the records, when
        // it stops: until then the size is 0, and what follows the header is records.
        Err(_) if size == 0 => Ok(Data {
            off,
            size: len - off,
            partial: Some(Partial::Unfinished),
        }),
        // The records are whole; the file ends inside the features after them.
        Err(Bad::Beyond(b)) => Ok(Data {
            off,
            size,
            partial: cut(b.end, false),
        }),
        Err(Bad::Other(e)) => Err(e),
    }
}

/// Why the feature table does not hold.
enum Bad {
    Beyond(Beyond),
    Other(String),
}

impl From<Beyond> for Bad {
    fn from(b: Beyond) -> Bad {
        Bad::Beyond(b)
    }
}

/// The feature table at `table` and the sections it names lie inside the file (`len`
/// bytes), and the event descriptions fit theirs. `h`: the file header.
fn check_features(f: &mut dyn ReadSeek, h: &[u8], len: u64, table: u64) -> Result<(), Bad> {
    let inside = |what: &str, off: u64, size: u64| inside(what, off, size, len);
    let io = |e: io::Error| Bad::Other(e.to_string());
    let bits: Vec<u64> = (0..4).map(|i| le64(h, layout::FEATURES + 8 * i)).collect();
    let features: Vec<u64> = (0..256u64)
        .filter(|b| bits[(b / 64) as usize] & (1 << (b % 64)) != 0)
        .collect();
    inside("feature table", table, 16 * features.len() as u64)?;
    f.seek(SeekFrom::Start(table)).map_err(io)?;
    let mut t = vec![0u8; 16 * features.len()];
    f.read_exact(&mut t).map_err(io)?;
    for (i, feat) in features.iter().enumerate() {
        let (off, size) = (le64(&t, 16 * i), le64(&t, 16 * i + 8));
        inside(&format!("feature {feat}"), off, size)?;
        if *feat == FEATURE_EVENT_DESC {
            let mut d = vec![0u8; size as usize];
            f.seek(SeekFrom::Start(off)).map_err(io)?;
            f.read_exact(&mut d).map_err(io)?;
            check_event_desc(&d).map_err(Bad::Other)?;
        }
    }
    Ok(())
}

/// The event descriptions (`HEADER_EVENT_DESC`: count, attr size, then per event the
/// attr, a u32 id count, a u32-sized name and the ids) fit in `d`.
fn check_event_desc(d: &[u8]) -> Result<(), String> {
    let bad = || "its event descriptions do not fit their section".to_string();
    let nr = le32(d, 0) as usize;
    let attr_size = le32(d, 4) as usize;
    let mut at = 8usize;
    for _ in 0..nr {
        at = at.checked_add(attr_size).ok_or_else(bad)?;
        let ids = le32(d, at) as usize;
        let name = le32(d, at + 4) as usize;
        at = at
            .checked_add(8)
            .and_then(|a| a.checked_add(name))
            .and_then(|a| a.checked_add(ids.checked_mul(8)?))
            .ok_or_else(bad)?;
        if at > d.len() {
            return Err(bad());
        }
    }
    Ok(())
}

/// A stream (`perf record -o -`) as the crate can read it: perf writes the tracing data
/// *after* its PERF_RECORD_HEADER_TRACING_DATA record, outside the record's size, which
/// the crate would read as records. This takes the data out of the stream, whole
/// records at a time, and keeps it for [`Capture`]; it also checks the event
/// descriptions a stream's feature records carry, as [`check_file_layout`] does.
struct Splice<R> {
    inner: R,
    pending: Vec<u8>,
    pos: usize,
    /// The tracing data once seen, or why it could not be read whole.
    tracing: TracingSlot,
}

/// Where [`Splice`] leaves the tracing data for [`Capture`]: the bytes, or why they could
/// not be read whole; `None` until seen.
type TracingSlot = Rc<RefCell<Option<Result<Vec<u8>, String>>>>;

impl<R: Read> Splice<R> {
    /// Load the next record (header, body, and for AUXTRACE its trailing data) into
    /// `pending`; an empty `pending` is the end of the stream. A record cut short is
    /// passed on as far as it goes: the crate reports it.
    fn refill(&mut self) -> io::Result<()> {
        self.pending.clear();
        self.pos = 0;
        let mut h = [0u8; 8];
        let got = read_full(&mut self.inner, &mut h)?;
        self.pending.extend_from_slice(&h[..got]);
        if got < 8 {
            return Ok(());
        }
        let kind = le32(&h, 0);
        let size = u16::from_le_bytes([h[6], h[7]]) as usize;
        let mut body = vec![0u8; size.saturating_sub(8)];
        let got = read_full(&mut self.inner, &mut body)?;
        body.truncate(got);
        if kind == RECORD_FEATURE && le64(&body, 0) == FEATURE_EVENT_DESC {
            if let Err(what) = check_event_desc(&body[8.min(body.len())..]) {
                return Err(io::Error::new(io::ErrorKind::InvalidData, what));
            }
        }
        self.pending.extend_from_slice(&body);
        if kind == RECORD_TRACING_DATA && body.len() >= 4 {
            let n = (le32(&body, 0) as u64).next_multiple_of(8);
            let mut data = Vec::new();
            (&mut self.inner).take(n).read_to_end(&mut data)?;
            let r = if data.len() as u64 == n {
                Ok(data)
            } else {
                Err(format!(
                    "the stream ends inside its tracing data ({} of {n} bytes)",
                    data.len()
                ))
            };
            *self.tracing.borrow_mut() = Some(r);
        } else if kind == RECORD_AUXTRACE && body.len() >= 8 {
            (&mut self.inner)
                .take(le64(&body, 0))
                .read_to_end(&mut self.pending)?;
        }
        Ok(())
    }
}

impl<R: Read> Read for Splice<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos >= self.pending.len() {
            self.refill()?;
        }
        let n = buf.len().min(self.pending.len() - self.pos);
        buf[..n].copy_from_slice(&self.pending[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_a_copy_only_with_its_time_cpu_id_and_bytes() {
        let mut s = SameTime::default();
        assert!(!s.repeated(100, 0, Some(7), b"insert 8"));
        assert!(
            !s.repeated(100, 0, Some(7), b"insert 16"),
            "another payload"
        );
        assert!(!s.repeated(100, 1, Some(7), b"insert 8"), "another CPU");
        assert!(!s.repeated(100, 0, Some(8), b"insert 8"), "another event");
        assert!(s.repeated(100, 0, Some(7), b"insert 8"));
        assert!(s.repeated(100, 0, Some(7), b"insert 16"));
        assert!(!s.repeated(101, 0, Some(7), b"insert 8"), "another time");
        assert!(s.repeated(101, 0, Some(7), b"insert 8"));
    }

    /// A header of perf's size: data `(off, size)`, one feature (bit 0) whose table
    /// entry says `feature` (offset, size), then `len` bytes in all.
    fn file(data: (u64, u64), feature: (u64, u64), len: usize) -> io::Cursor<Vec<u8>> {
        file_with(0, data, feature, len)
    }

    fn file_with(
        bit: u64,
        data: (u64, u64),
        feature: (u64, u64),
        len: usize,
    ) -> io::Cursor<Vec<u8>> {
        let mut f = vec![0u8; len.max(FILE_HEADER)];
        f[..8].copy_from_slice(b"PERFILE2");
        f[layout::DATA_SECTION..][..8].copy_from_slice(&data.0.to_le_bytes());
        f[layout::DATA_SECTION + 8..][..8].copy_from_slice(&data.1.to_le_bytes());
        f[layout::FEATURES + bit as usize / 8] = 1 << (bit % 8);
        let table = (data.0 + data.1) as usize;
        for (i, v) in [feature.0, feature.1].into_iter().enumerate() {
            if let Some(b) = f.get_mut(table + 8 * i..table + 8 * i + 8) {
                b.copy_from_slice(&v.to_le_bytes());
            }
        }
        f.truncate(len);
        io::Cursor::new(f)
    }

    #[test]
    fn a_file_that_is_not_whole_is_told_unfinished_or_cut() {
        let how =
            |f: &mut io::Cursor<Vec<u8>>| check_file_layout(f).map(|d| (d.off, d.size, d.partial));
        // Whole: 100 bytes of records, a 16-byte table, a 10-byte feature after it.
        let whole = || file((104, 100), (220, 10), 230);
        assert_eq!(how(&mut whole()), Ok((104, 100, None)));
        // Cut in the features: every record; the table says up to 230.
        let cut = |len, said, in_records| {
            Some(Partial::Cut {
                len,
                said,
                in_records,
            })
        };
        let mut f = whole();
        f.get_mut().truncate(225);
        assert_eq!(how(&mut f), Ok((104, 100, cut(225, 230, false))));
        f.get_mut().truncate(210);
        assert_eq!(how(&mut f), Ok((104, 100, cut(210, 220, false))));
        // Cut in the records: the rest of the file.
        f.get_mut().truncate(150);
        assert_eq!(how(&mut f), Ok((104, 46, cut(150, 204, true))));
        f.get_mut().truncate(104);
        assert_eq!(how(&mut f), Ok((104, 0, cut(104, 204, true))));
        // Unfinished: data size 0, the features unwritten (records where the table
        // would be): the rest is records.
        let unfinished = Some(Partial::Unfinished);
        let unwritten = (1 << 60, 16);
        assert_eq!(
            how(&mut file((104, 0), unwritten, 300)),
            Ok((104, 196, unfinished))
        );
        assert_eq!(
            how(&mut file((104, 0), unwritten, 104)),
            Ok((104, 0, unfinished))
        );
        // Finished with no records: the table right after the header.
        assert_eq!(how(&mut file((104, 0), (120, 4), 124)), Ok((104, 0, None)));
        // Records said to start past the end: no record can be there.
        assert!(how(&mut file((400, 10), (0, 0), 300)).is_err());
        // A feature whose section holds in the file, but an event description that does
        // not fit it: corrupt, not cut.
        let mut f = file_with(FEATURE_EVENT_DESC, (104, 16), (140, 8), 200);
        f.get_mut()[140..144].copy_from_slice(&1000u32.to_le_bytes());
        f.get_mut()[144..148].copy_from_slice(&1000u32.to_le_bytes());
        assert!(how(&mut f).is_err());
        f.get_mut()[140..148].fill(0);
        assert_eq!(how(&mut f), Ok((104, 16, None)));
    }

    #[test]
    fn a_file_without_rounds_is_told_from_one_with_them() {
        // Records of type 9 (16 bytes) after 8 bytes of something else, one of them a
        // FINISHED_ROUND (8 bytes) when asked.
        let file = |round: bool| {
            let mut b = vec![0u8; 8];
            for i in 0..4u8 {
                b.extend_from_slice(&[9, 0, 0, 0, 0, 0, 16, 0, i, i, i, i, i, i, i, i]);
                if round && i == 2 {
                    b.extend_from_slice(&[68, 0, 0, 0, 0, 0, 8, 0]);
                }
            }
            let n = b.len() as u64 - 8;
            (io::Cursor::new(b), n)
        };
        let (mut f, n) = file(false);
        assert_eq!(unrounded(&mut f, (8, n), 0).unwrap(), Some(64));
        assert_eq!(
            unrounded(&mut f, (8, n), 65).unwrap(),
            None,
            "too few to say"
        );
        let (mut f, n) = file(true);
        assert_eq!(unrounded(&mut f, (8, n), 0).unwrap(), None);
    }

    #[test]
    fn event_desc_counts_must_fit() {
        let mut d = Vec::new();
        d.extend_from_slice(&1u32.to_le_bytes());
        d.extend_from_slice(&8u32.to_le_bytes());
        d.extend_from_slice(&[0; 8]);
        d.extend_from_slice(&1u32.to_le_bytes());
        d.extend_from_slice(&4u32.to_le_bytes());
        d.extend_from_slice(b"abc\0");
        d.extend_from_slice(&7u64.to_le_bytes());
        assert!(check_event_desc(&d).is_ok());
        let mut huge = d.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(check_event_desc(&huge).is_err());
        let mut ids = d.clone();
        ids[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(check_event_desc(&ids).is_err());
    }

    #[test]
    fn the_clock_says_whether_start_times_are_wall_clock() {
        let mono = CaptureClock::Id {
            id: libc::CLOCK_MONOTONIC,
            wall_offset_ns: Some(5),
        };
        assert!(mono.is_wall() && mono.describe().contains("-k mono"));
        assert_eq!(mono.wall().wall_ns(1), 6);
        assert!(!CaptureClock::PerfDefault.is_wall());
        assert!(CaptureClock::PerfDefault.describe().contains("relative"));
    }

    /// perf's CPU_MAP encodings (tools/lib/perf `perf_record_cpu_map_data`), as perf
    /// writes them: a list, a bitmask in 32- or 64-bit words, a range; −1 (any CPU)
    /// and what cannot be read say nothing.
    #[test]
    fn cpu_maps_in_each_encoding() {
        let w16 = |v: &[u16]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        assert_eq!(cpu_map(&w16(&[0, 3, 0, 2, 5])), Some(vec![0, 2, 5]));
        assert_eq!(cpu_map(&w16(&[0, 2, 0, u16::MAX])), None);
        assert_eq!(cpu_map(&w16(&[0, 3, 0])), None, "list cut short");
        let mut m32 = w16(&[1, 2, 4]);
        m32.extend_from_slice(&0b1001u32.to_le_bytes());
        m32.extend_from_slice(&1u32.to_le_bytes());
        assert_eq!(cpu_map(&m32), Some(vec![0, 3, 32]));
        let mut m64 = w16(&[1, 1, 8]);
        m64.extend_from_slice(&[0; 4]);
        m64.extend_from_slice(&(1u64 << 40 | 2).to_le_bytes());
        assert_eq!(cpu_map(&m64), Some(vec![1, 40]));
        assert_eq!(cpu_map(&m64[..12]), None, "mask cut short");
        let range = |any: u8, a: u16, b: u16| {
            let mut d = w16(&[2]);
            d.extend_from_slice(&[any, 0]);
            d.extend_from_slice(&w16(&[a, b]));
            d
        };
        assert_eq!(cpu_map(&range(0, 2, 4)), Some(vec![2, 3, 4]));
        assert_eq!(cpu_map(&range(1, 0, 1)), None);
        assert_eq!(cpu_map(&w16(&[7, 1])), None, "unknown encoding");
        assert_eq!(cpu_map(&[]), None);
    }

    #[test]
    fn thread_maps_say_which_tasks() {
        let map = |tids: &[u64]| {
            let mut d = (tids.len() as u64).to_le_bytes().to_vec();
            for t in tids {
                d.extend_from_slice(&t.to_le_bytes());
                d.extend_from_slice(&[0; 16]);
            }
            d
        };
        assert_eq!(thread_map(&map(&[u64::MAX])), Some(vec![u64::MAX]));
        assert_eq!(thread_map(&map(&[17, 18])), Some(vec![17, 18]));
        let mut cut = map(&[17, 18]);
        cut.truncate(8 + 24 + 4);
        assert_eq!(thread_map(&cut), None);
        let mut huge = map(&[17]);
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(thread_map(&huge), None);
    }
}
