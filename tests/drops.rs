//! Samples the kernel counts and never writes, put into a real capture: does every I/O
//! still come out once, as `ok` with its own events or `dropped`, and never
//! `incomplete`?
//!
//! The kernel's perf path drops a few samples with no LOST record (docs/how-it-works.md):
//! which ones it decides, and a soak shows a few such runs a day. Here stock `perf
//! record` captures a workload that runs to its end on a loop disk under mq-deadline
//! (every I/O complete: random reads and writes of mixed sizes, 8 MiB reads the block
//! layer splits, discards, fsyncs of four jobs at once, O_SYNC writes), and the capture
//! is replayed through the block profile whole, then many times with samples taken out
//! at random, in bursts on one CPU, each reported to the pipeline as the live loop's
//! ledger does: before any later event, with a window that holds it.
//!
//! Every trial must end with no `incomplete` row: a request left in flight at the end
//! of a run whose every I/O completed lost a sample, and says so. Over all trials, the
//! `ok` rows the whole replay does not have (a completion given to another request at
//! the same place: swapped, never lost) and the completions left unmatched must stay
//! within bounds of the samples taken out (see the end of the test for what is
//! measured): one drop once made every flush row after it its successor's, and another
//! cut a thousand rows that had lost nothing.
//!
//! The bio profile, which pairs by place too, is searched the same way on a zram
//! capture of bios crowded onto few sectors.
//!
//! More trials, or a capture of your own, for a search:
//! `NTPROF_DROPS_TRIALS=5000 NTPROF_DROPS_CAPTURE=x.data cargo test --profile ci --test drops -- --nocapture`
//! (`NTPROF_DROPS_BIO_CAPTURE` for the bio profile's; the seed of each trial that broke
//! is printed; `NTPROF_DROPS_SEED` starts there, `NTPROF_DROPS_VERBOSE=all` shows
//! every wrong row and every sample taken out, `NTPROF_DROPS_P` sets the chance that a
//! sample starts a burst, e.g. `3e-6` for a few drops in a capture of a million samples).

mod common;

use common::{
    kernel_dev, kernel_ready, perf_ready, run_ok, tmp, zram, LoopDev, RemoveOnPass, Zram,
};
use ntprof_perf::correlate::Gap;
use ntprof_perf::device::SysBlock;
use ntprof_perf::import::Capture;
use ntprof_perf::pipeline::{Batch, Front, RecordSink, Stages};
use ntprof_perf::record::{IoRecord, Status, Value};
use ntprof_perf::sink::{Health, SinkError};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

/// A row as the whole replay must have it too: the columns a missing sample cannot
/// change on an `ok` row (not the depth, not the candidates).
type Key = Vec<String>;

#[derive(Default)]
struct Rows {
    ok: Vec<Key>,
    /// (start, sector) of the `dropped` rows.
    dropped: Vec<(String, String)>,
    statuses: HashMap<&'static str, u64>,
    /// The `incomplete` rows, as text.
    incomplete: Vec<String>,
}

const KEPT: &[&str] = &[
    "start_ns", "dev", "op", "sector", "bytes", "q2d_ns", "d2c_ns", "q2c_ns", "error",
];

fn text(v: Value<'_>) -> String {
    match v {
        Value::Empty => String::new(),
        Value::U64(n) | Value::Time(n) | Value::Hex(n) => n.to_string(),
        Value::I64(n) => n.to_string(),
        Value::Str(s) => s.to_string(),
        Value::String(s) => s,
        Value::Named(p, n) => format!("{p}{n}"),
        Value::Dev(d) => d.to_string(),
    }
}

impl RecordSink for Rows {
    fn record(&mut self, r: &dyn IoRecord, _sample: u32) -> Result<(), SinkError> {
        let s = r.schema();
        let status = match r.status() {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Incomplete => "incomplete",
            Status::Dropped => "dropped",
        };
        *self.statuses.entry(status).or_default() += 1;
        let cells = || {
            (0..s.columns.len())
                .filter(|&i| KEPT.contains(&s.columns[i].name))
                .map(|i| text(r.value(i)))
        };
        match r.status() {
            Status::Ok | Status::Error => self.ok.push(cells().collect()),
            Status::Incomplete => self.incomplete.push(
                (0..s.columns.len())
                    .map(|i| format!("{}={}", s.columns[i].name, text(r.value(i))))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            Status::Dropped => {
                let c: Key = cells().collect();
                self.dropped.push((c[0].clone(), c[3].clone()));
            }
        }
        Ok(())
    }
}

/// One sample taken out: when, on which CPU, which event.
#[derive(Debug, Clone)]
struct Taken {
    time: u64,
    cpu: u32,
    event: String,
}

/// The pipeline with samples taken out, and the ledger's reports of them.
struct Dropper {
    inner: Box<dyn Stages>,
    rng: fastrand::Rng,
    /// Chance a sample starts a burst of drops, and the longest burst.
    p: f64,
    burst: u32,
    /// Drops left in the current burst, and its CPU.
    left: (u32, u32),
    names: HashMap<u16, String>,
    /// The latest round's start.
    round: u64,
    /// The round's start before it: the pipeline has correlated nothing newer (see
    /// `order`).
    released: u64,
    taken: Vec<Taken>,
}

impl Dropper {
    fn drop_this(&mut self, cpu: u32) -> bool {
        if self.left.0 > 0 && self.left.1 == cpu {
            self.left.0 -= 1;
            return true;
        }
        if self.rng.f64() < self.p {
            self.left = (self.rng.u32(0..self.burst), cpu);
            return true;
        }
        false
    }
}

impl Stages for Dropper {
    fn sample(&mut self, time: u64, cpu: u32, raw: &[u8]) -> Option<u64> {
        let id = raw.get(..2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let event = id.and_then(|i| self.names.get(&i)).cloned();
        if let Some(event) = event.filter(|_| self.drop_this(cpu)) {
            // As the ledger reports it: after the last moment the counts were clean
            // and by the count read that showed it, tens of ms apart live (23-160 ms in
            // runs beside `serve`), and before any later event reaches the
            // correlator. Here: up to 40 ms either side, never before what the
            // pipeline may have correlated (the round before the latest: see
            // `order`). Drops dated only to the last sample of their CPU hid a
            // request only slow that took the missing issue of another I/O at a
            // place of its own (stop 65's soak, beside `serve`).
            let after = self
                .released
                .max(time.saturating_sub(self.rng.u64(0..40_000_000)));
            let before = time + self.rng.u64(0..40_000_000);
            self.inner.on_missing(&Gap {
                event: &event,
                n: 1,
                after: after.min(time.saturating_sub(1)),
                before,
            });
            self.taken.push(Taken { time, cpu, event });
            return None;
        }
        self.inner.sample(time, cpu, raw)
    }
    fn begin_round(&mut self, now: u64) {
        self.released = std::mem::replace(&mut self.round, now);
        self.inner.begin_round(now)
    }
    fn bad_records(&mut self, n: u64) {
        self.inner.bad_records(n)
    }
    fn end_round(&mut self, out: &mut dyn FnMut(&dyn IoRecord, u32)) {
        self.inner.end_round(out)
    }
    fn finish(&mut self, out: &mut dyn FnMut(&dyn IoRecord, u32)) {
        self.inner.finish(out)
    }
    fn health(&self) -> Health {
        self.inner.health()
    }
    fn on_missing(&mut self, gap: &Gap<'_>) {
        self.inner.on_missing(gap)
    }
    fn hold_until(&mut self, t: Option<u64>) {
        self.inner.hold_until(t)
    }
    fn rows(&self) -> u64 {
        self.inner.rows()
    }
    fn rate_from(&mut self, from: u64, n: u32) {
        self.inner.rate_from(from, n)
    }
    fn gate(&mut self) -> Option<&mut ntprof_perf::correlate::gate::Gate> {
        self.inner.gate()
    }
    fn front(&self) -> Option<Box<dyn Front>> {
        None
    }
    fn push_batch(&mut self, _batch: Batch) {}
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One replay of `file` through `profile`, `p` of the samples starting a burst of up to
/// `burst` taken out on one CPU (0: whole). With no sysfs, as on another host than the
/// capture's: only what the capture holds.
fn replay(file: &Path, profile: &str, seed: u64, p: f64, burst: u32) -> (Rows, Health, Vec<Taken>) {
    let cap = Capture::open(file, None).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let prof = cap.profile(Some(profile)).expect("the profile");
    let plan = cap.plan(prof, SysBlock::none()).expect("plan");
    let names = (plan.events.iter())
        .map(|e| (e.id as u16, e.name.clone()))
        .collect();
    let mut d = Dropper {
        inner: plan.stages,
        rng: fastrand::Rng::with_seed(seed),
        p,
        burst,
        left: (0, 0),
        names,
        round: 0,
        released: 0,
        taken: Vec::new(),
    };
    let mut rows = Rows::default();
    let replayed = cap.replay(&mut d, &mut rows).expect("replay");
    (rows, replayed.health, d.taken)
}

/// fio on `dev` with `args`, for a `sh -c` script.
fn fio(dev: &str, args: &str) -> String {
    format!("fio --name=d --filename={dev} --direct=1 --output=/dev/null {args}")
}

/// `script` under stock `perf record`, only the `block` `events` of device `dev`: a
/// capture every I/O of which completed, or `None` when the kernel dropped a sample of
/// it (perf record sees those drops too) three times over.
fn capture(profile: &str, dev: u64, events: &[&str], script: &str) -> Option<std::path::PathBuf> {
    let data = tmp(&format!("drops-{profile}.data"));
    for attempt in 1..=3 {
        let mut perf = Command::new("perf");
        perf.args(["record", "-q", "-a", "-m", "1024", "-o"])
            .arg(&data);
        for e in events {
            perf.args([
                "-e",
                &format!("block:{e}"),
                "--filter",
                &format!("dev == {dev}"),
            ]);
        }
        run_ok(perf.args(["--", "sh", "-c", script]));
        let (whole, h, _) = replay(&data, profile, 0, 0.0, 1);
        // A completion perf record never got is a `dropped` row (presumed lost while
        // a later I/O at its place completed), not an `incomplete` one.
        if whole.incomplete.is_empty()
            && whole.dropped.is_empty()
            && h.counters.unmatched == 0
            && h.lost == 0
        {
            return Some(data);
        }
        eprintln!(
            "drops: capture {attempt} is not whole (incomplete {}, dropped {}, unmatched {}, lost {}): the kernel dropped a sample of it; again",
            whole.incomplete.len(),
            whole.dropped.len(),
            h.counters.unmatched,
            h.lost
        );
    }
    None
}

/// The block profile's workload on a loop disk under mq-deadline (see the top).
fn block_capture() -> Option<std::path::PathBuf> {
    let l = LoopDev::new("drops", 160);
    l.scheduler("mq-deadline");
    let fio = |args: &str| fio(&l.dev, args);
    let script = [
        fio("--rw=randrw --rwmixread=70 --bsrange=4k-256k --ioengine=libaio --iodepth=32 --numjobs=2 --size=32m"),
        fio("--rw=read --bs=8m --ioengine=libaio --iodepth=4 --size=64m"),
        fio("--rw=randtrim --bs=64k --ioengine=libaio --iodepth=8 --size=16m --offset=64m"),
        fio("--rw=randwrite --bs=4k --ioengine=psync --fsync=2 --size=1m --offset=96m --numjobs=4"),
        fio("--rw=randwrite --bs=16k --ioengine=psync --sync=1 --size=1m --offset=112m --numjobs=2"),
    ]
    .join(" && ");
    let events = [
        "block_rq_insert",
        "block_rq_issue",
        "block_rq_complete",
        "block_rq_requeue",
        "block_rq_merge",
        "block_bio_backmerge",
        "block_bio_frontmerge",
    ];
    capture("block", kernel_dev(&l.dev), &events, &script)
}

/// What trials of one capture came to.
#[derive(Default)]
struct Trials {
    ios: u64,
    drops: u64,
    /// `ok` rows the whole replay does not have.
    wrong_rows: u64,
    unmatched: u64,
    /// Rows beyond the I/Os of the capture.
    extra: u64,
    /// The capture the test took, removed once its checks pass.
    _capture: RemoveOnPass,
}

/// The trials on `file` (a given capture, or `take` makes one; `None`: skipped, said
/// why): each must leave no row `incomplete`.
fn trials(test: &str, profile: &str, take: fn() -> Option<std::path::PathBuf>) -> Option<Trials> {
    let var = match profile {
        "block" => "NTPROF_DROPS_CAPTURE".to_string(),
        p => format!("NTPROF_DROPS_{}_CAPTURE", p.to_uppercase()),
    };
    let given = std::env::var_os(var).map(std::path::PathBuf::from);
    if given.is_none() && !(kernel_ready(test) && perf_ready(test)) {
        return None;
    }
    let taken = given.is_none();
    let Some(file) = given.or_else(take) else {
        // Three captures in a row each lost a sample: the property cannot be checked
        // against a whole one. Not a pass of the check, said loudly.
        eprintln!("SKIPPED {test}: no whole capture in three tries");
        return None;
    };
    let (whole, h, _) = replay(&file, profile, 0, 0.0, 1);
    let mut t = Trials {
        ios: whole.ok.len() as u64,
        _capture: RemoveOnPass(taken.then(|| file.clone()).into_iter().collect()),
        ..Trials::default()
    };
    assert!(
        whole.incomplete.is_empty() && whole.dropped.is_empty() && h.counters.unmatched == 0,
        "{}: not a whole capture ({} rows incomplete, {} dropped, {} completions unmatched): perf record missed a sample of it",
        file.display(),
        whole.incomplete.len(),
        whole.dropped.len(),
        h.counters.unmatched
    );
    assert!(t.ios > 1000, "{} I/Os in the capture", t.ios);
    let truth: BTreeSet<&Key> = whole.ok.iter().collect();
    let (n, seed0) = (
        env_u64("NTPROF_DROPS_TRIALS", 150),
        env_u64("NTPROF_DROPS_SEED", 1),
    );
    let verbose = std::env::var("NTPROF_DROPS_VERBOSE").ok();
    // A search for what a lone drop does in a long capture.
    let fixed_p: Option<f64> = (std::env::var("NTPROF_DROPS_P").ok())
        .map(|v| v.parse().expect("NTPROF_DROPS_P: a number"));
    let mut broke = Vec::new();
    for trial in 0..n {
        let seed = seed0.wrapping_add(trial);
        let mut rng = fastrand::Rng::with_seed(seed);
        // Mostly a few drops in a run, as the kernel makes them; now and then many.
        let p = [2e-5, 1e-4, 3e-4, 1e-3][rng.usize(0..4)];
        let p = fixed_p.unwrap_or(p);
        let burst = rng.u32(1..12);
        let (rows, h, taken) = replay(&file, profile, seed, p, burst);
        t.drops += taken.len() as u64;
        let wrong: Vec<&Key> = rows.ok.iter().filter(|k| !truth.contains(k)).collect();
        t.wrong_rows += wrong.len() as u64;
        let first: Vec<_> = (taken.iter().take(12))
            .map(|t| (t.time, t.cpu, &t.event))
            .collect();
        let rows_n = rows.ok.len() + rows.dropped.len() + rows.incomplete.len();
        let unmatched = h.counters.unmatched;
        if verbose.is_some() && (!wrong.is_empty() || rows_n as u64 > t.ios || unmatched > 0) {
            eprintln!(
                "seed {seed} (p {p}, bursts to {burst}): {} ok rows not the whole replay's, first {:?}; {} rows beyond the I/Os; {unmatched} completions unmatched; taken out: {first:?}",
                wrong.len(),
                wrong.first(),
                (rows_n as u64).saturating_sub(t.ios),
            );
            if verbose.as_deref() == Some("all") {
                for k in &wrong {
                    eprintln!("  wrong {k:?}");
                }
                for t in &taken {
                    eprintln!("  taken {} cpu {} {}", t.time, t.cpu, t.event);
                }
                for (start, sector) in &rows.dropped {
                    eprintln!("  dropped row: start {start} sector {sector}");
                }
            }
        }
        t.unmatched += unmatched;
        t.extra += (rows_n as u64).saturating_sub(t.ios);
        if !rows.incomplete.is_empty() {
            broke.push(format!(
                "seed {seed} (p {p}, bursts to {burst}): {} incomplete, first {}; taken out: {first:?}",
                rows.incomplete.len(),
                rows.incomplete[0],
            ));
        }
    }
    eprintln!(
        "drops ({profile}): {} I/Os, {n} trials, {} samples taken out: {} trials with a row incomplete, {} ok rows the whole replay does not have, {} completions unmatched, {} rows beyond the I/Os",
        t.ios,
        t.drops,
        broke.len(),
        t.wrong_rows,
        t.unmatched,
        t.extra
    );
    assert!(broke.is_empty(), "{}", broke.join("\n"));
    assert!(
        t.drops > 100,
        "{} samples taken out: too few trials to tell",
        t.drops
    );
    Some(t)
}

#[test]
fn samples_taken_out_of_a_whole_capture_leave_no_row_incomplete() {
    let test = "samples_taken_out_of_a_whole_capture_leave_no_row_incomplete";
    let Some(t) = trials(test, "block", block_capture) else {
        return;
    };
    // Measured on 24 fresh captures of this workload (150 trials each): 36 to 873
    // wrong rows per ~1,500 samples taken out (the flushes of the O_SYNC phase: while a
    // request elsewhere is in flight, a completion missing at sector 0 still shifts
    // those after it), 0 to 16 completions unmatched, 0 or 1 row too many. With each
    // drop dated to a window tens of ms wide, as the ledger does live (2026-11-30, 15
    // fresh captures): 28 to 1,472 wrong rows, 0 to 51 completions unmatched, 0 to 7
    // rows too many. Most of those unmatched were a completion whose missing issue a
    // suspect's own late completion had taken, or that had met the wrong suspect or a
    // smaller request at its place; since those were mended (stop 67), 1,000 trials on
    // each of four captures left none, against 0, 16, 36 and 162 before. The cascades
    // fixed were 5.5 wrong rows per sample; the bounds leave room for the spread of
    // captures.
    let Trials {
        drops,
        wrong_rows,
        unmatched,
        extra,
        ..
    } = t;
    assert!(
        wrong_rows <= 2 * drops,
        "{wrong_rows} ok rows not the whole replay's for {drops} samples taken out"
    );
    assert!(
        unmatched * 20 <= drops,
        "{unmatched} completions unmatched for {drops} samples taken out"
    );
    assert!(
        extra * 50 <= drops,
        "{extra} rows beyond the I/Os for {drops} samples taken out"
    );
}

/// The bio profile's workload on zram (bio-based): eight jobs at queue depth 16 over 16
/// places (zram ends each bio as it is submitted: only so do places hold several at
/// once, 1 pairing in 8), then mixed sizes over 16 MiB.
fn bio_capture() -> Option<std::path::PathBuf> {
    let z = Zram::new(64)?;
    let fio = |args: &str| fio(&z.dev, args);
    let script = [
        fio("--rw=randrw --bs=4k --ioengine=libaio --iodepth=16 --numjobs=8 --size=64k --io_size=4m"),
        fio("--rw=randrw --bsrange=4k-64k --ioengine=libaio --iodepth=32 --numjobs=2 --size=16m"),
    ]
    .join(" && ");
    let events = ["block_bio_queue", "block_bio_complete"];
    capture("bio", kernel_dev(&z.dev), &events, &script)
}

/// The same for the bio profile, which pairs by place too: a completion missing at a
/// busy place shifted the pairings there, and the last bio was left `incomplete` (34
/// of 300 trials). Replayed as on another host (no such device there: the capture
/// names it). A bio that lost its queue leaves its completion `unmatched`, by design.
#[test]
fn bio_samples_taken_out_of_a_whole_capture_leave_no_row_incomplete() {
    let test = "bio_samples_taken_out_of_a_whole_capture_leave_no_row_incomplete";
    if zram(test).is_none() {
        return;
    }
    let Some(t) = trials(test, "bio", bio_capture) else {
        return;
    };
    assert!(
        t.extra * 50 <= t.drops,
        "{} rows beyond the I/Os for {} samples taken out",
        t.extra,
        t.drops
    );
}
