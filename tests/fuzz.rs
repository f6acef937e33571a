//! Garbage input never panics: seeded random and mutated inputs for every parser that
//! reads bytes it does not control (format files, tracepoint samples, perf rings and
//! records, perf.data captures), through the public API.
//!
//! Each target is one function `fn(&mut Rng) -> bool` that builds an input, feeds it,
//! checks what must hold whatever the input, and says whether the input was accepted.
//! Add a target by writing that function and one line in [`targets!`]. The driver
//! feeds every target its number of inputs (each from its own generator, so one input
//! can be replayed), turns a panic into a failure that names the target, the input and
//! the seed, and fails when fewer than 1 % of a target's inputs are accepted or rejected
//! (its generator then misses one side of the parser). The budget over all targets is
//! checked at compile time to be at least a million inputs.
//!
//! `NTPROF_FUZZ_SEED=N` picks another seed (the default is fixed, so CI is reproducible);
//! `NTPROF_FUZZ_SCALE=K` feeds K times as many inputs, for a longer run by hand.

use ntprof_perf::decode::{DecodeError, Decoder, FieldReader, LayoutFn, Want};
use ntprof_perf::perf::{walk_ring_bytes, Record, RecordError, RingError, SampleFormat};
use ntprof_perf::profile;
use ntprof_perf::tracefs::{parse_format, EventFormat, FieldShape, Tracefs};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

macro_rules! targets {
    ($($name:ident: $inputs:expr => $body:path;)*) => {
        $(
            #[test]
            fn $name() {
                fuzz(stringify!($name), $inputs, $body);
            }
        )*

        /// Inputs over all targets at scale 1: at least a million are wanted, and
        /// a budget below that does not compile.
        const TOTAL_INPUTS: u64 = 0 $(+ $inputs)*;
        const _: () = assert!(TOTAL_INPUTS >= 1_000_000, "fewer than 1 M fuzz inputs");
    };
}

targets! {
    format_parser: 200_000 => format_parser_input;
    field_reader: 250_000 => field_reader_input;
    sample_decoder: 300_000 => sample_decoder_input;
    ring_walker: 200_000 => ring_walker_input;
    perf_record: 300_000 => perf_record_input;
    recorded_rows: 150_000 => recorded_rows_input;
    perf_data: 20_000 => perf_data_input;
}

// ---------------------------------------------------------------------------------------
// Driver

/// The `fastrand` generator, seeded, with the biased draws parsers deserve.
pub struct Rng(fastrand::Rng);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(fastrand::Rng::with_seed(seed))
    }

    fn u64(&mut self) -> u64 {
        self.0.u64(..)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.0.u64(..n)
        }
    }

    fn usize(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.usize(items.len())]
    }

    /// A byte, biased towards the values parsers treat specially.
    fn byte(&mut self) -> u8 {
        match self.below(4) {
            0 => 0,
            1 => 0xff,
            2 => self.below(16) as u8,
            _ => self.u64() as u8,
        }
    }

    /// Random bytes, eight at a time, each run of eight biased like [`Rng::byte`].
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let word = match self.below(4) {
                0 => 0,
                1 => u64::MAX,
                2 => self.u64() & 0x0f0f_0f0f_0f0f_0f0f,
                _ => self.u64(),
            };
            chunk.copy_from_slice(&word.to_le_bytes()[..chunk.len()]);
        }
    }

    /// An integer near the edges where off-by-one and overflow bugs live.
    fn edgy(&mut self) -> u64 {
        match self.below(6) {
            0 => self.below(64),
            1 => u64::MAX - self.below(64),
            2 => u64::from(u32::MAX) - self.below(8) + self.below(16),
            3 => u64::from(u16::MAX) - self.below(8) + self.below(16),
            4 => 1 << self.below(64),
            _ => self.u64(),
        }
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// Feeds `inputs` generated inputs to `target`; see the module doc.
fn fuzz(name: &str, inputs: u64, target: fn(&mut Rng) -> bool) {
    let seed = env_u64("NTPROF_FUZZ_SEED").unwrap_or(0x6e74_7072_6f66);
    let inputs = inputs * env_u64("NTPROF_FUZZ_SCALE").unwrap_or(1).max(1);
    let start = Instant::now();
    let (mut fed, mut accepted) = (0u64, 0u64);
    for i in 0..inputs {
        let mut rng = Rng::new(seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        match catch_unwind(AssertUnwindSafe(|| target(&mut rng))) {
            Ok(ok) => accepted += u64::from(ok),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("(non-string panic)");
                panic!(
                    "{name}: input {i} of seed {seed} (NTPROF_FUZZ_SEED={seed}) panicked: {msg}"
                );
            }
        }
        fed += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!("{name}: {fed} inputs, {accepted} accepted, {secs:.2} s (seed {seed})");
    assert_eq!(fed, inputs);
    let rejected = fed - accepted;
    assert!(
        accepted * 100 >= fed && rejected * 100 >= fed,
        "{name}: {accepted} of {fed} inputs accepted: the generator misses one side"
    );
}

// ---------------------------------------------------------------------------------------
// Corpus: the captured tracefs trees of the repository.

fn trees() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tracefs");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("events").is_dir())
        .collect();
    v.sort();
    assert!(
        v.len() >= 3,
        "expected the captured trees in {}",
        root.display()
    );
    v
}

/// The text of every format file of every tree, and its parse.
fn corpus() -> &'static [(String, EventFormat)] {
    static CORPUS: OnceLock<Vec<(String, EventFormat)>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let mut v = Vec::new();
        for tree in trees() {
            let tfs = Tracefs::at(&tree).unwrap();
            for path in tfs.all_format_paths().unwrap() {
                let text = std::fs::read_to_string(&path).unwrap();
                let fmt = parse_format(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                v.push((text, fmt));
            }
        }
        assert!(v.len() >= 50, "only {} format files", v.len());
        v
    })
}

/// Pieces of format syntax, spliced into texts by the mutator.
const TOKENS: &[&str] = &[
    "field:",
    "\tfield:",
    "offset:",
    "size:",
    "signed:",
    "name:",
    "ID:",
    "format:",
    "print fmt:",
    ";",
    ":",
    " ",
    "\t",
    "\n",
    "[",
    "]",
    "[]",
    "[0]",
    "[32]",
    "[TASK_COMM_LEN]",
    "__data_loc ",
    "__rel_loc ",
    "char[]",
    "unsigned int",
    "*",
    "0",
    "1",
    "-1",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "é",
    "€",
    "\u{0}",
    "_",
];

fn mutate_text(rng: &mut Rng, text: &str) -> String {
    let mut b = text.as_bytes().to_vec();
    for _ in 0..1 + rng.below(6) {
        let at = rng.usize(b.len() + 1);
        match rng.below(6) {
            0 => {
                if at < b.len() {
                    b[at] = rng.byte();
                }
            }
            1 => {
                let end = (at + rng.usize(64)).min(b.len());
                b.drain(at..end);
            }
            2 => {
                let tok = rng.pick(TOKENS).as_bytes();
                b.splice(at..at, tok.iter().copied());
            }
            3 => {
                // Replace a number-looking run with an edge value.
                let end = (at + 1 + rng.usize(4)).min(b.len());
                let v = rng.edgy().to_string();
                b.splice(at..end, v.bytes());
            }
            4 => b.truncate(at),
            _ => {
                let end = (at + rng.usize(128)).min(b.len());
                let piece = b[at..end].to_vec();
                let to = rng.usize(b.len() + 1);
                b.splice(to..to, piece);
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

// ---------------------------------------------------------------------------------------
// Targets

/// `tracefs::parse_format` on mutated real format files and on token soup.
fn format_parser_input(rng: &mut Rng) -> bool {
    let text = if rng.chance(85) {
        let (text, _) = rng_pick_corpus(rng);
        mutate_text(rng, text)
    } else {
        let mut s = String::new();
        for _ in 0..rng.below(40) {
            let tok: &&str = rng.pick(TOKENS);
            s.push_str(tok);
        }
        s
    };
    match parse_format(&text) {
        Ok(f) => {
            assert!(!f.fields.is_empty());
            for fld in &f.fields {
                assert!(!fld.name.is_empty() && !fld.type_name.is_empty(), "{fld:?}");
                assert!(f.field(&fld.name).is_some());
            }
            let _ = f.fixed_size();
            true
        }
        Err(e) => {
            assert!(e.line >= 1 && e.line <= text.lines().count().max(1), "{e}");
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

fn rng_pick_corpus(rng: &mut Rng) -> &'static (String, EventFormat) {
    rng.pick(corpus())
}

/// `decode::FieldReader` bound to a field of a real or mutated format, reading a record
/// of random bytes and length. Accepted: the field bound.
fn field_reader_input(rng: &mut Rng) -> bool {
    let (text, fmt) = rng_pick_corpus(rng);
    let mutated;
    let fmt = if rng.chance(10) {
        match parse_format(&mutate_text(rng, text)) {
            Ok(f) => {
                mutated = f;
                &mutated
            }
            Err(_) => fmt,
        }
    } else {
        fmt
    };
    let field = rng.pick(&fmt.fields);
    let want = match (rng.below(5), field.shape) {
        (0, _) => Want::Int,
        (1, _) => Want::CharArray,
        (2, _) => Want::Bytes(rng.below(40) as u32),
        (3, _) => Want::Dynamic,
        (_, FieldShape::Scalar) => Want::Int,
        (_, FieldShape::DataLoc | FieldShape::RelLoc) => Want::Dynamic,
        (_, _) => Want::CharArray,
    };
    let Ok(reader) = FieldReader::bind(fmt, "fuzz:fuzz", &field.name, want) else {
        return false;
    };
    let len = match rng.below(3) {
        0 => rng.usize(reader.end() + 16),
        1 => reader.end() + rng.usize(64),
        // A __data_loc may point anywhere in 64 KiB.
        _ if rng.chance(5) => rng.usize(1 << 16),
        _ => rng.usize(1 << 10),
    };
    let mut raw = vec![0u8; len];
    rng.fill(&mut raw);
    let _ = (reader.u64(&raw), reader.i64(&raw), reader.u32(&raw));
    assert!(reader.array(&raw).len() <= raw.len());
    assert!(reader.str(&raw).len() <= raw.len());
    assert!(reader.dynamic(&raw).len() <= raw.len());
    true
}

/// A decoder with every event one profile knows bound from one captured tree.
struct TreeDecoder {
    tree: PathBuf,
    /// Events decode into their debug text: one type for every profile's events.
    decoder: Decoder<String>,
    /// (common_type, fixed size of the record) of every bound event.
    events: Vec<(u16, usize)>,
}

/// Bind `system:event` with a profile's layout function, erasing its event type.
fn bind<K: std::fmt::Debug + 'static>(
    d: &mut Decoder<String>,
    tfs: &Tracefs,
    system: &str,
    event: &str,
    layout: LayoutFn<K>,
) -> Result<(), DecodeError> {
    d.bind(tfs, system, event, |f| {
        let l = layout(f, system, event)?;
        Ok(move |raw: &[u8]| l.decode(raw).map(|k| format!("{k:?}")))
    })
    .map(|_| ())
}

/// Every event of every profile, with the layout function of its profile.
fn bind_profile(
    name: &str,
    d: &mut Decoder<String>,
    tfs: &Tracefs,
    system: &str,
    event: &str,
) -> Result<(), DecodeError> {
    use ntprof_perf::profile::*;
    match name {
        "block" => bind(d, tfs, system, event, shared::block_events::layout),
        "bio" => bind(d, tfs, system, event, bio::events::layout),
        "nvme" => bind(d, tfs, system, event, shared::nvme_events::layout),
        "nvmet" => bind(d, tfs, system, event, nvmet::events::layout),
        "nvme-tcp" => bind(d, tfs, system, event, nvme_tcp::events::layout),
        // A new profile must say here how its events are laid out, or be fuzzed with
        // another's layouts without anyone noticing.
        other => panic!("profile {other}: add its layout function to bind_profile"),
    }
}

fn decoders() -> &'static [TreeDecoder] {
    static DECODERS: OnceLock<Vec<TreeDecoder>> = OnceLock::new();
    DECODERS.get_or_init(|| {
        let mut out = Vec::new();
        for tree in trees() {
            let tfs = Tracefs::at(&tree).unwrap();
            for p in profile::all() {
                let mut decoder = Decoder::new();
                let mut events = Vec::new();
                for e in p.events() {
                    if !tree.join("events").join(e.system).join(e.event).is_dir() {
                        continue;
                    }
                    bind_profile(p.name(), &mut decoder, &tfs, e.system, e.event).unwrap_or_else(
                        |err| {
                            panic!(
                                "{}: {}:{} must bind: {err}",
                                tree.display(),
                                e.system,
                                e.event
                            )
                        },
                    );
                    let fmt = tfs.event(e.system, e.event).unwrap();
                    events.push((fmt.id as u16, fmt.fixed_size() as usize));
                }
                if !events.is_empty() {
                    out.push(TreeDecoder {
                        tree: tree.clone(),
                        decoder,
                        events,
                    });
                }
            }
        }
        let total: usize = out.iter().map(|d| d.events.len()).sum();
        // Every profile's events in three trees; nvme_tcp/nvmet_tcp only in the patched.
        assert!(total >= 40, "only {total} event layouts across the trees");
        out
    })
}

/// `Decoder::decode` for every event layout of every tree: random bytes behind a valid
/// or random `common_type`, of random length around and beyond each layout's size.
/// Accepted: the record decoded into an event.
fn sample_decoder_input(rng: &mut Rng) -> bool {
    let td = rng.pick(decoders());
    let (id, size) = if rng.chance(90) {
        *rng.pick(&td.events)
    } else {
        (rng.u64() as u16, rng.usize(256))
    };
    let len = match rng.below(4) {
        0 => rng.usize(size + 1),
        1 => size.saturating_sub(8) + rng.usize(17),
        2 => size + rng.usize(256),
        _ => rng.usize(4096),
    };
    let mut raw = vec![0u8; len];
    rng.fill(&mut raw);
    if len >= 2 && rng.chance(95) {
        raw[..2].copy_from_slice(&id.to_le_bytes());
    }
    let (time, cpu) = (rng.edgy(), rng.u64() as u32);
    let known = raw.len() >= 2
        && td
            .events
            .iter()
            .any(|(i, _)| i.to_le_bytes() == [raw[0], raw[1]]);
    match td.decoder.decode(&raw, time, cpu) {
        Ok(Some(ev)) => {
            assert!(
                known,
                "{}: decoded an id it was not built for",
                td.tree.display()
            );
            assert_eq!((ev.time, ev.cpu), (time, cpu));
            true
        }
        Ok(None) => {
            assert!(!known, "{}: a bound id was ignored", td.tree.display());
            false
        }
        Err(e) => {
            assert!(known || raw.len() < 2, "{}: {e}", td.tree.display());
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

const RECORD_SAMPLE: u32 = 9;
const RECORD_LOST: u32 = 2;

/// `IDENTIFIER | TIME | CPU | RAW`, the layout `record_bytes` writes samples in.
fn with_id_cpu() -> SampleFormat {
    use perf_event_open_sys::bindings::{
        PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_RAW, PERF_SAMPLE_TIME,
    };
    SampleFormat::new(
        (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW) as u64,
    )
    .unwrap()
}

/// A well-formed perf record of a random kind and size (a multiple of 8, as the kernel
/// writes them).
fn record_bytes(rng: &mut Rng) -> Vec<u8> {
    let mut body = Vec::new();
    let kind = match rng.below(8) {
        0 => {
            body.extend_from_slice(&rng.u64().to_le_bytes());
            body.extend_from_slice(&rng.below(1 << 20).to_le_bytes());
            RECORD_LOST
        }
        1 => 1 + rng.below(20) as u32,
        _ => {
            let raw_len = rng.usize(200);
            body.extend_from_slice(&rng.u64().to_le_bytes());
            body.extend_from_slice(&rng.u64().to_le_bytes());
            body.extend_from_slice(&(rng.below(8) as u32).to_le_bytes());
            body.extend_from_slice(&0u32.to_le_bytes());
            body.extend_from_slice(&(raw_len as u32).to_le_bytes());
            let mut raw = vec![0u8; raw_len];
            rng.fill(&mut raw);
            body.extend_from_slice(&raw);
            RECORD_SAMPLE
        }
    };
    let size = (8 + body.len()).div_ceil(8) * 8;
    let mut rec = Vec::with_capacity(size);
    rec.extend_from_slice(&kind.to_le_bytes());
    rec.extend_from_slice(&0u16.to_le_bytes());
    rec.extend_from_slice(&(size as u16).to_le_bytes());
    rec.extend_from_slice(&body);
    rec.resize(size, 0);
    rec
}

/// `perf::walk_ring_bytes` (and `parse_record` on what it yields) over rings of records
/// written from a random tail, wrapping at the end and near `u64::MAX`, then sometimes
/// corrupted: flipped bytes, impossible sizes, a head beyond the capacity or behind the
/// tail, a partial header at the end. Uncorrupted rings must come back record for
/// record. Accepted: the walk found no corruption.
fn ring_walker_input(rng: &mut Rng) -> bool {
    let cap = 64usize << rng.below(7);
    let mut data = vec![0u8; cap];
    rng.fill(&mut data);
    let tail = if rng.chance(20) {
        u64::MAX - rng.below(2 * cap as u64)
    } else {
        rng.u64()
    };
    let mut written = Vec::new();
    let mut pos = tail;
    loop {
        let rec = record_bytes(rng);
        if pos.wrapping_sub(tail) + rec.len() as u64 > cap as u64 || rng.chance(3) {
            break;
        }
        for (i, b) in rec.iter().enumerate() {
            data[(pos.wrapping_add(i as u64) % cap as u64) as usize] = *b;
        }
        pos = pos.wrapping_add(rec.len() as u64);
        written.push(rec);
    }
    let mut head = pos;
    let corrupt = rng.chance(50);
    if corrupt {
        match rng.below(5) {
            0 => {
                for _ in 0..1 + rng.below(8) {
                    let i = rng.usize(cap);
                    data[i] = rng.byte();
                }
            }
            1 if !written.is_empty() => {
                // A header size field somewhere in the pending data.
                let at = tail
                    .wrapping_add(rng.below(pos.wrapping_sub(tail)) & !7)
                    .wrapping_add(6);
                let size = rng.edgy() as u16;
                for (i, b) in size.to_le_bytes().iter().enumerate() {
                    data[(at.wrapping_add(i as u64) % cap as u64) as usize] = *b;
                }
            }
            2 => head = tail.wrapping_add(cap as u64 + 1 + rng.below(1 << 20)),
            3 => head = tail.wrapping_sub(1 + rng.below(1 << 20)),
            _ => {
                let extra = 1 + rng.below(7);
                if pos.wrapping_sub(tail) + extra <= cap as u64 {
                    head = pos.wrapping_add(extra);
                }
            }
        }
    }
    let pending = head.wrapping_sub(tail);
    let mut got: Vec<Vec<u8>> = Vec::new();
    let stats = walk_ring_bytes(&data, tail, head, &mut Vec::new(), |r| {
        assert!(r.len() >= 8, "a record shorter than its header");
        assert_eq!(usize::from(u16::from_le_bytes([r[6], r[7]])), r.len());
        if let Ok(Record::Sample(s)) = with_id_cpu().parse(r) {
            assert!(s.raw.len() <= r.len());
        }
        got.push(r.to_vec());
    });
    assert_eq!(
        stats.consumed, pending,
        "the tail must always reach the head"
    );
    assert_eq!(stats.records, got.len() as u64);
    assert!(got.len() as u64 <= pending / 8);
    if let Some(RingError::HeadOutOfRange { .. }) = stats.error {
        assert!(got.is_empty());
    }
    if head == pos && !corrupt {
        assert_eq!(stats.error, None);
        assert_eq!(
            got, written,
            "an intact ring must come back record for record"
        );
    }
    stats.error.is_none()
}

/// `perf::parse_record` on random bytes with a likely or random type and size.
/// Accepted: the record parsed.
fn perf_record_input(rng: &mut Rng) -> bool {
    let mut rec = if rng.chance(70) {
        record_bytes(rng)
    } else {
        let mut v = vec![0u8; rng.usize(300)];
        rng.fill(&mut v);
        v
    };
    if rec.len() >= 8 && rng.chance(60) {
        match rng.below(4) {
            0 => {
                let size = rng.edgy() as u16;
                rec[6..8].copy_from_slice(&size.to_le_bytes());
            }
            1 if rec.len() >= 36 => {
                let raw = rng.edgy() as u32;
                rec[32..36].copy_from_slice(&raw.to_le_bytes());
            }
            2 => rec.truncate(rng.usize(rec.len())),
            _ => {
                let i = rng.usize(rec.len());
                rec[i] = rng.byte();
            }
        }
    }
    // The records are laid out with an id and a CPU; the lean layout (what ntprof-perf
    // opens) reads the same bytes at other places and must be as robust.
    let _ = SampleFormat::LEAN.parse(&rec);
    match with_id_cpu().parse(&rec) {
        Ok(Record::Sample(s)) => {
            assert!(s.raw.len() + 36 <= rec.len());
            true
        }
        Ok(_) => true,
        Err(RecordError::Truncated {
            needed, present, ..
        }) => {
            assert!(
                needed > present,
                "truncated with enough bytes: {needed} <= {present}"
            );
            assert!(present <= rec.len());
            false
        }
        Err(RecordError::HeaderTooSmall { size }) => {
            assert!(usize::from(size) < 8);
            false
        }
    }
}

/// A cell as a recording could hold it, or garbage.
fn cell(rng: &mut Rng) -> String {
    match rng.below(12) {
        0 => String::new(),
        1 => rng.edgy().to_string(),
        2 => format!("-{}", rng.below(1 << 40)),
        3 => format!("{:#x}", rng.below(1 << 20)),
        4 => [
            "ok",
            "error",
            "incomplete",
            "both",
            "host",
            "target",
            "read",
            "write",
        ][rng.usize(8)]
        .to_string(),
        5 => [
            "complete",
            "missing:host+tgt_exec",
            "missing:nope",
            "nvme3",
            "nvmeX",
        ][rng.usize(5)]
        .to_string(),
        6 => "2026-11-23 01:48:11.164035423".to_string(),
        7 => {
            let mut v = vec![0u8; rng.usize(12)];
            rng.fill(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        }
        _ => rng.below(100_000).to_string(),
    }
}

/// What `report` and `merge` do with a recorded file: CSV text with a profile's header
/// (and sometimes broken quoting or row lengths) read by the csv crate, each row through
/// the stat table, and nvme-tcp rows back into records and through merge. Accepted:
/// the row was usable.
fn recorded_rows_input(rng: &mut Rng) -> bool {
    use ntprof_perf::profile::nvme_tcp::{merge, model::TcpRecord};
    use ntprof_perf::record::Row;
    use ntprof_perf::sink::stat::StatTable;
    let p = *rng.pick(profile::all());
    let schema = p.schema();
    let mut text: String = schema.names().collect::<Vec<_>>().join(",");
    text.push('\n');
    let rows = 1 + rng.usize(3);
    for _ in 0..rows {
        let n = if rng.chance(90) {
            schema.columns.len()
        } else {
            rng.usize(schema.columns.len() + 3)
        };
        let cells: Vec<String> = (0..n).map(|_| cell(rng)).collect();
        text.push_str(&cells.join(if rng.chance(97) { "," } else { ";\"" }));
        text.push('\n');
    }
    let mut rd = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let mut table = StatTable::new(schema);
    let mut accepted = false;
    let mut merged = Vec::new();
    for rec in rd.records() {
        let Ok(rec) = rec else {
            continue;
        };
        let cells: Vec<&str> = rec.iter().collect();
        let row = Row {
            schema,
            cells: &cells,
        };
        accepted |= table.add_row(&row).is_ok();
        if p.name() == "nvme-tcp" {
            if let (Ok(rec), Ok(start_ns)) = (TcpRecord::from_row(&row), row.req::<u64>("start_ns"))
            {
                merged.push(merge::Row {
                    start_time: row.text("start_time").unwrap_or("").to_string(),
                    start_ns,
                    rec,
                });
            }
        }
    }
    let _ = table.render(&ntprof_perf::sink::stat::Percentiles::default());
    if !merged.is_empty() {
        let n = merged.len();
        let (out, st) = merge::merge(merged, rng.edgy());
        assert!(out.len() <= n && st.paired as usize <= n);
    }
    accepted
}

// ---------------------------------------------------------------------------------------
// perf.data captures (`import`)

/// The two real captures of `tests/fixtures/` (4 direct 4 KiB writes, block profile):
/// file mode and pipe mode.
fn captures() -> &'static [Vec<u8>] {
    static CAPTURES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CAPTURES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        // File mode, pipe mode, and file mode compressed (`perf record -z`).
        [
            "block-4-writes.perf.data",
            "block-4-writes.pipe.perf.data",
            "block-4-writes.zstd.perf.data",
        ]
        .iter()
        .map(|n| std::fs::read(dir.join(n)).unwrap())
        .collect()
    })
}

/// Counts rows; what `import` would write.
struct Rows(u64);

impl ntprof_perf::pipeline::RecordSink for Rows {
    fn record(
        &mut self,
        _: &dyn ntprof_perf::record::IoRecord,
        _: u32,
    ) -> Result<(), ntprof_perf::sink::SinkError> {
        self.0 += 1;
        Ok(())
    }
}

/// A capture opened, its profile guessed, planned and replayed: the rows, or `None`
/// when any step refused it.
fn import_bytes(bytes: Vec<u8>) -> Option<u64> {
    use ntprof_perf::import::Capture;
    let cap = Capture::from_bytes(Path::new("fuzz.data"), bytes, None).ok()?;
    let p = cap.profile(None).ok()?;
    let sys = ntprof_perf::device::SysBlock::none();
    let mut plan = cap.plan(p, sys).ok()?;
    let mut rows = Rows(0);
    cap.replay(plan.stages.as_mut(), &mut rows).ok()?;
    Some(rows.0)
}

/// `import` of a real capture cut short or with bytes changed (anywhere, or in its
/// first 2 KiB where the header, attributes and first records are). Accepted: rows
/// came out. An intact capture gives its 4 rows.
fn perf_data_input(rng: &mut Rng) -> bool {
    let mut b = rng.pick(captures()).clone();
    let intact = rng.chance(2);
    if !intact {
        if rng.chance(35) {
            b.truncate(rng.usize(b.len()));
        } else {
            for _ in 0..=rng.below(8) {
                let span = if rng.chance(50) {
                    b.len().min(2048)
                } else {
                    b.len()
                };
                let i = rng.usize(span);
                b[i] = if rng.chance(50) {
                    rng.byte()
                } else {
                    rng.edgy() as u8
                };
            }
        }
    }
    let rows = import_bytes(b);
    if intact {
        assert_eq!(rows, Some(4), "an intact capture");
    }
    rows.is_some()
}

/// Every prefix of both captures: an error or rows, never a panic; a prefix that stops
/// before the end of a file-mode capture's feature sections is always an error.
#[test]
fn perf_data_every_prefix() {
    for (k, c) in captures().iter().enumerate() {
        let mut accepted = 0;
        for n in 0..c.len() {
            let got = catch_unwind(AssertUnwindSafe(|| import_bytes(c[..n].to_vec())))
                .unwrap_or_else(|_| panic!("capture {k}: prefix {n} panicked"));
            accepted += u64::from(got.is_some());
            if k != 1 {
                assert!(got.is_none(), "file-mode capture: prefix {n} imported");
            }
        }
        assert_eq!(import_bytes(c.clone()), Some(4), "capture {k} whole");
        eprintln!("capture {k}: {accepted} of {} prefixes imported", c.len());
    }
}
