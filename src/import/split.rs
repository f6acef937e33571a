//! A file capture without FINISHED_ROUND, split back into its rings.
//!
//! `perf inject`'s merge of a `perf record --threads` directory copies each ring's
//! records in 2 MiB pieces, one ring after the other, and writes no round: the crate
//! would sort the whole file in memory (about twice its size). Each record's CPU is in
//! it (a sample's `PERF_SAMPLE_CPU`, another record's `sample_id_all` trailer), so the
//! file is walked once, each CPU's records are listed as runs of bytes, and each CPU is
//! read as a ring of a directory capture is ([`super::dir::ThreadFile`]), merged by
//! time with the others. This holds only when each CPU's samples are in time order in
//! the file, as a ring's are, but for what the crate's rounds reorder (a round after
//! each run: a sample may go back to the latest time of the run before the last). perf
//! sometimes writes a few samples of a ring twice, one after the other: those go back
//! that little and are read as the directory's are. The walk checks it, and a file
//! where it does not hold is sorted whole as before.

use super::dir::CHUNK;
use super::layout::{DATA_SECTION, FEATURES};
use super::{le32, le64, ReadSeek, FILE_HEADER, RECORD_FINISHED_ROUND};
use std::collections::HashMap;
use std::io::{self, BufReader, Read, Seek, SeekFrom};

const RECORD_SAMPLE: u32 = 9;
/// Record types from here on are perf's own (`PERF_RECORD_USER_TYPE_START`): no CPU.
const USER_TYPES: u32 = 64;
/// perf's records that hold other records (`COMPRESSED`) or are followed by bytes their
/// size does not count (`AUXTRACE`): a file with them is not split.
const COMPRESSED: u32 = 81;
const AUXTRACE: u32 = 71;

/// `perf_event_attr.sample_type` bits that place the CPU and the time.
const IP: u64 = 1 << 0;
const TID: u64 = 1 << 1;
const TIME: u64 = 1 << 2;
const ADDR: u64 = 1 << 3;
const ID: u64 = 1 << 6;
const CPU: u64 = 1 << 7;
const STREAM_ID: u64 = 1 << 9;
const IDENTIFIER: u64 = 1 << 16;
/// `perf_event_attr`'s flag word and its `sample_id_all` bit.
const ATTR_FLAGS: usize = 40;
const SAMPLE_ID_ALL: u64 = 1 << 18;

/// Runs of bytes of a file: offset and length.
pub(super) type Runs = Vec<(u64, u64)>;

/// A CPU's latest sample times, for the crate's rule of rounds: a record read after
/// round N may be no earlier than the latest before round N − 1. Each run is followed
/// by a round ([`super::dir::ThreadFile`]).
#[derive(Default)]
struct Times {
    /// The latest so far, at the end of the run before this one, and at the end of the
    /// run before that (the earliest time this run may hold).
    max: u64,
    ended: u64,
    floor: u64,
}

/// What the walk of [`split`] found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Split {
    /// Each CPU's runs, and first those of the records that name no CPU.
    Rings(Vec<Runs>),
    /// A FINISHED_ROUND: perf record's own file, which the crate reads round by round.
    Rounded,
    /// No round, but the file cannot be read ring by ring (see [`split`]).
    No,
}

/// Where a record's CPU and time are, by the events' one sample format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Format {
    /// A sample's CPU and time, from the record's start.
    cpu: usize,
    time: Option<usize>,
    /// Another kernel record's CPU, back from its end (`sample_id_all`).
    trailer_cpu: Option<usize>,
}

impl Format {
    /// `None` when the samples carry no CPU: nothing to split by.
    fn new(sample_type: u64, id_all: bool) -> Option<Format> {
        if sample_type & CPU == 0 {
            return None;
        }
        let words = |bits: &[u64]| bits.iter().filter(|&&b| sample_type & b != 0).count() * 8;
        Some(Format {
            cpu: 8 + words(&[IDENTIFIER, IP, TID, TIME, ADDR, ID, STREAM_ID]),
            time: (sample_type & TIME != 0).then(|| 8 + words(&[IDENTIFIER, IP, TID])),
            trailer_cpu: id_all.then(|| 8 + words(&[IDENTIFIER])),
        })
    }

    /// The CPU of `rec` (header included), and a sample's time.
    fn of(&self, rec: &[u8]) -> (Option<u32>, Option<u64>) {
        let kind = le32(rec, 0);
        let at = |off: usize| rec.get(off..off + 4).map(|_| le32(rec, off));
        if kind == RECORD_SAMPLE {
            let time = self
                .time
                .filter(|&t| rec.len() >= t + 8)
                .map(|t| le64(rec, t));
            return (at(self.cpu), time);
        }
        if kind < USER_TYPES {
            if let Some(back) = self.trailer_cpu {
                return (rec.len().checked_sub(back).and_then(at), None);
            }
        }
        (None, None)
    }
}

/// The one sample format of the events whose attributes (`attr_size` bytes each, the
/// last 16 their ids section) are `attrs`; `None` when they differ.
fn format(attrs: &[u8], attr_size: usize) -> Option<Format> {
    if attr_size < ATTR_FLAGS + 8 + 16 || attrs.is_empty() || attrs.len() % attr_size != 0 {
        return None;
    }
    let mut one = None;
    for a in attrs.chunks(attr_size) {
        let f = Format::new(le64(a, 24), le64(a, ATTR_FLAGS) & SAMPLE_ID_ALL != 0)?;
        if one.is_some_and(|o| o != f) {
            return None;
        }
        one = Some(f);
    }
    one
}

/// The runs of bytes (offset, length: about [`CHUNK`] each) of each CPU's records in the
/// `size` bytes of records at `off` of `r`, and first those of the records that name no
/// CPU. The walk stops at the first FINISHED_ROUND, so a file perf record wrote costs
/// only its first round. [`Split::No`] when the file cannot be read so: its samples
/// carry no CPU, the events differ in format, a CPU's samples go back in time further
/// than the rounds reorder, the CPUs' records interleave so finely that the runs would
/// be many, or records are compressed.
pub(super) fn split(r: &mut dyn ReadSeek, off: u64, size: u64) -> io::Result<Split> {
    let mut head = [0u8; FILE_HEADER];
    r.seek(SeekFrom::Start(0))?;
    r.read_exact(&mut head)?;
    let (attrs_off, attrs_size) = (le64(&head, 24), le64(&head, 32));
    let Ok(attr_size) = usize::try_from(le64(&head, 16)) else {
        return Ok(Split::No);
    };
    let mut attrs = vec![0u8; attrs_size.min(1 << 20) as usize];
    r.seek(SeekFrom::Start(attrs_off))?;
    r.read_exact(&mut attrs)?;
    let Some(fmt) = format(&attrs, attr_size) else {
        return Ok(Split::No);
    };
    let mut b = BufReader::with_capacity(1 << 20, r);
    b.seek(SeekFrom::Start(off))?;
    let mut streams: Vec<Runs> = vec![Vec::new()];
    let mut times: Vec<Times> = vec![Times::default()];
    let mut by_cpu: HashMap<u32, usize> = HashMap::new();
    let (mut at, mut runs) = (0u64, 0u64);
    // Runs average at least 4 KiB (perf inject's pieces are 2 MiB), or this is no merge
    // of rings and its index would approach its size.
    let most_runs = (size / 4096).max(64);
    let mut rec = vec![0u8; 8];
    while at < size {
        rec.resize(8, 0);
        b.read_exact(&mut rec)?;
        let len = u64::from(u16::from_le_bytes([rec[6], rec[7]]));
        if len < 8 || at + len > size {
            return Ok(Split::No);
        }
        match le32(&rec, 0) {
            RECORD_FINISHED_ROUND => return Ok(Split::Rounded),
            COMPRESSED | AUXTRACE => return Ok(Split::No),
            _ => {}
        }
        rec.resize(len as usize, 0);
        b.read_exact(&mut rec[8..])?;
        let (cpu, time) = fmt.of(&rec);
        let s = match cpu {
            None => 0,
            Some(c) => *by_cpu.entry(c).or_insert_with(|| {
                streams.push(Vec::new());
                times.push(Times::default());
                streams.len() - 1
            }),
        };
        let from = off + at;
        let tm = &mut times[s];
        match streams[s].last_mut() {
            Some(run) if run.0 + run.1 == from && run.1 < CHUNK => run.1 += len,
            _ => {
                streams[s].push((from, len));
                (tm.floor, tm.ended) = (tm.ended, tm.max);
                runs += 1;
                if runs > most_runs {
                    return Ok(Split::No);
                }
            }
        }
        if let Some(t) = time {
            if t < tm.floor {
                return Ok(Split::No);
            }
            tm.max = tm.max.max(t);
        }
        at += len;
    }
    Ok(Split::Rings(streams))
}

/// The file's header, attributes and features with no records: the header file of a
/// directory capture, which each CPU's [`super::dir::ThreadFile`] is read with. The
/// feature sections move back by the records' size; `None` if one lies before them.
pub(super) fn header_file(
    r: &mut dyn ReadSeek,
    off: u64,
    size: u64,
    len: u64,
) -> io::Result<Option<Vec<u8>>> {
    let end = off + size;
    let mut head = vec![0u8; off as usize];
    r.seek(SeekFrom::Start(0))?;
    r.read_exact(&mut head)?;
    let mut features = vec![0u8; (len - end) as usize];
    r.seek(SeekFrom::Start(end))?;
    r.read_exact(&mut features)?;
    head[DATA_SECTION + 8..DATA_SECTION + 16].fill(0);
    let n: u32 = (0..4)
        .map(|i| le64(&head, FEATURES + 8 * i).count_ones())
        .sum();
    for i in 0..n as usize {
        let Some(entry) = features.get_mut(16 * i..16 * i + 8) else {
            return Ok(None);
        };
        let at = u64::from_le_bytes(entry.try_into().unwrap_or_default());
        let Some(moved) = at.checked_sub(size).filter(|_| at >= end) else {
            return Ok(None);
        };
        entry.copy_from_slice(&moved.to_le_bytes());
    }
    head.extend_from_slice(&features);
    Ok(Some(head))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample of CPU `cpu` at `time` in the format IDENTIFIER, TID, TIME, CPU.
    fn sample(cpu: u32, time: u64) -> Vec<u8> {
        let mut r = vec![0u8; 40];
        r[..4].copy_from_slice(&RECORD_SAMPLE.to_le_bytes());
        r[6..8].copy_from_slice(&40u16.to_le_bytes());
        r[24..32].copy_from_slice(&time.to_le_bytes());
        r[32..36].copy_from_slice(&cpu.to_le_bytes());
        r
    }

    /// A file of one event (sample format IDENTIFIER, TID, TIME, CPU, with
    /// `sample_id_all`), the records `records`, then one feature section, "ABCD".
    fn capture(records: &[Vec<u8>]) -> (Vec<u8>, u64, u64) {
        let mut f = vec![0u8; FILE_HEADER];
        f[..8].copy_from_slice(b"PERFILE2");
        f[8..16].copy_from_slice(&(FILE_HEADER as u64).to_le_bytes());
        f[16..24].copy_from_slice(&80u64.to_le_bytes());
        f[24..32].copy_from_slice(&(FILE_HEADER as u64).to_le_bytes());
        f[32..40].copy_from_slice(&80u64.to_le_bytes());
        let mut attr = vec![0u8; 80];
        attr[24..32].copy_from_slice(&(IDENTIFIER | TID | TIME | CPU).to_le_bytes());
        attr[ATTR_FLAGS..ATTR_FLAGS + 8].copy_from_slice(&SAMPLE_ID_ALL.to_le_bytes());
        f.extend(attr);
        let off = f.len() as u64;
        for r in records {
            f.extend(r);
        }
        let size = f.len() as u64 - off;
        f[DATA_SECTION..DATA_SECTION + 8].copy_from_slice(&off.to_le_bytes());
        f[DATA_SECTION + 8..DATA_SECTION + 16].copy_from_slice(&size.to_le_bytes());
        f[FEATURES] = 1;
        let section = f.len() as u64 + 16;
        f.extend(section.to_le_bytes());
        f.extend(4u64.to_le_bytes());
        f.extend(b"ABCD");
        (f, off, size)
    }

    #[test]
    fn a_merge_splits_into_its_cpus_runs() {
        let mut thread_map = vec![0u8; 16];
        thread_map[..4].copy_from_slice(&73u32.to_le_bytes());
        thread_map[6..8].copy_from_slice(&16u16.to_le_bytes());
        let records = [
            thread_map,
            sample(0, 1),
            sample(0, 2),
            sample(1, 1),
            sample(1, 3),
            sample(0, 5),
        ];
        let (f, off, size) = capture(&records);
        let mut c = io::Cursor::new(f.clone());
        let Split::Rings(got) = split(&mut c, off, size).unwrap() else {
            panic!("not split")
        };
        assert_eq!(
            got,
            [
                vec![(off, 16)],
                vec![(off + 16, 80), (off + 176, 40)],
                vec![(off + 96, 80)],
            ]
        );
        // The header file: no records, the feature section moved back by their size.
        let h = header_file(&mut c, off, size, f.len() as u64)
            .unwrap()
            .unwrap();
        assert_eq!(h.len() as u64, off + 16 + 4);
        assert_eq!(le64(&h, DATA_SECTION + 8), 0);
        assert_eq!(le64(&h, off as usize), off + 16);
        assert_eq!(&h[h.len() - 4..], b"ABCD");
        // Compressed records: not split.
        let mut z = records.to_vec();
        z[0][..4].copy_from_slice(&COMPRESSED.to_le_bytes());
        let (f, off, size) = capture(&z);
        assert_eq!(
            split(&mut io::Cursor::new(f), off, size).unwrap(),
            Split::No
        );
        // A round: perf record's own file, walked no further. After it, a compressed
        // record, which would refuse the split were the walk to go on.
        let mut round = vec![0u8; 8];
        round[..4].copy_from_slice(&RECORD_FINISHED_ROUND.to_le_bytes());
        round[6..8].copy_from_slice(&8u16.to_le_bytes());
        let mut rounded = records.to_vec();
        rounded.insert(2, round);
        rounded[3][..4].copy_from_slice(&COMPRESSED.to_le_bytes());
        let (f, off, size) = capture(&rounded);
        assert_eq!(
            split(&mut io::Cursor::new(f), off, size).unwrap(),
            Split::Rounded
        );
        // A CPU's samples a little back in time (perf wrote two of them twice): the
        // rounds after its runs reorder them, as a directory's ring is read.
        let twice = [sample(0, 1), sample(0, 2), sample(0, 1), sample(0, 2)];
        let (f, off, size) = capture(&twice);
        let Split::Rings(got) = split(&mut io::Cursor::new(f), off, size).unwrap() else {
            panic!("not split")
        };
        assert_eq!(got[1], [(off, 160)]);
        // Further back than that: CPU 1's third run goes back to before the end of its
        // first, which was released at the round after its second.
        let back = |t| {
            let (f, off, size) = capture(&[
                sample(1, 5),
                sample(0, 1),
                sample(1, 6),
                sample(0, 2),
                sample(1, t),
            ]);
            split(&mut io::Cursor::new(f), off, size).unwrap()
        };
        assert!(matches!(back(5), Split::Rings(_)));
        assert_eq!(back(4), Split::No);
    }

    #[test]
    fn the_cpu_and_time_are_found_by_the_sample_format() {
        // perf record -a of tracepoints: IDENTIFIER, IP, TID, TIME, CPU, PERIOD, RAW.
        let st = IDENTIFIER | IP | TID | TIME | CPU | (1 << 8) | (1 << 10);
        let f = Format::new(st, true).unwrap();
        assert_eq!((f.cpu, f.time, f.trailer_cpu), (40, Some(32), Some(16)));
        let mut sample = vec![0u8; 64];
        sample[..4].copy_from_slice(&RECORD_SAMPLE.to_le_bytes());
        sample[32..40].copy_from_slice(&77u64.to_le_bytes());
        sample[40..44].copy_from_slice(&3u32.to_le_bytes());
        assert_eq!(f.of(&sample), (Some(3), Some(77)));
        // A LOST record (2): the CPU is in its trailer, before the identifier.
        let mut lost = vec![0u8; 48];
        lost[..4].copy_from_slice(&2u32.to_le_bytes());
        lost[32..36].copy_from_slice(&5u32.to_le_bytes());
        assert_eq!(f.of(&lost), (Some(5), None));
        // perf's own records name no CPU; a record too short for its fields neither.
        let mut round = vec![0u8; 8];
        round[..4].copy_from_slice(&68u32.to_le_bytes());
        assert_eq!(f.of(&round), (None, None));
        assert_eq!(f.of(&sample[..20]), (None, None));
        assert!(Format::new(st & !CPU, true).is_none());
        assert_eq!(Format::new(st, false).unwrap().trailer_cpu, None);
    }
}
