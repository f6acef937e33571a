//! Replays a large synthetic stream of samples through decode → order → correlate on
//! one core, several times, and prints the fastest replay's events per second. The
//! samples are laid out by the real format files captured in `tracefs/`, so they are
//! byte-for-byte what that kernel writes.
//!
//! `cargo bench --bench pipeline [-- IOS] [csv | stat | cold | nvme-tcp]`
//! - block (default): 2,000,000 I/Os of insert, issue and complete = 6,000,000 events,
//!   decoded as the block profile's live plan does. With `csv`, the record path too:
//!   the same replay with every record rendered as a CSV row into a writer that
//!   discards (`record`'s sink, minus the file), and the rendering alone over records
//!   collected beforehand, in ns per row. With `stat`, `stat`'s table alone over the
//!   collected records (label key, group, histograms), in ns per row: once with every
//!   I/O a read, as a randread run gives it, and once with the block mode's mix of
//!   reads and writes, where consecutive records change group. With `cold`, the replay
//!   again with 2 MiB written between rounds (not timed), as a live reader finds its
//!   core's caches after the workload ran there while it slept.
//! - `nvme-tcp`: 4k reads traced on both sides of a loopback NVMe/TCP connection, the
//!   13 events per I/O of the nvme-tcp profile (block bio queue and completion, seven
//!   host and four target events), as issue 20's "2 M IOPS NVMe/TCP host" sees them;
//!   laid out by the newest captured formats that have them (the patched guest's; default
//!   500,000 I/Os).
//!
//! Both modes then replay on two threads, as `--threads 2` runs it: the pipeline's front
//! decodes each round into a batch on one thread, the other (the consumer) queues the
//! batch, orders and correlates; each thread's CPU per event, and the wall clock.
//! `nvme-tcp only` stops after the one-core replay, so that a profiler sees it alone.

use ntprof_perf::correlate::{Correlator, Counters};
use ntprof_perf::decode::{Decoder, Event, Layout};
use ntprof_perf::device::SysBlock;
use ntprof_perf::pipeline::Pipeline;
use ntprof_perf::profile;
use ntprof_perf::profile::block::correlate::{BlockConfig, BlockCorrelator};
use ntprof_perf::profile::block::record::BlockRecord;
use ntprof_perf::profile::nvme_tcp::events::{NvmeTcpEvent, TcpSlot};
use ntprof_perf::profile::nvme_tcp::join::TcpCorrelator;
use ntprof_perf::profile::nvme_tcp::model::{TcpConfig, TcpRecord};
use ntprof_perf::profile::shared::block_events::{BlockEvent, BlockLayout};
use ntprof_perf::record::{IoRecord, Status, Tabled};
use ntprof_perf::sink::csv::CsvSink;
use ntprof_perf::sink::time::WallClock;
use ntprof_perf::synth::{
    block_ios, newest_tree, nvme_tcp_ios, BLOCK_EVENTS, NVME_TCP_CPUS, NVME_TCP_EVENTS,
};
use ntprof_perf::tracefs::Tracefs;
use std::path::PathBuf;
use std::time::Instant;

/// Rings of every replay: the nvme-tcp stream's host and target CPUs.
const CPUS: usize = NVME_TCP_CPUS;

/// This thread's CPU time in s: on a loaded machine the wall clock counts the time
/// other tasks ran too, this does not (cache pollution by them still shows).
fn cpu_secs() -> f64 {
    use nix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).expect("thread CPU clock");
    t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9
}
/// Replays of the same stream; the fastest is reported.
const REPLAYS: usize = 5;
/// Samples drained per ring per round on average, as a live drain of a busy ring
/// would give.
const ROUND: usize = 2048;

/// The replay itself, apart so that a profiler can count it alone
/// (`valgrind --tool=callgrind --toggle-collect='*drive*'`).
///
/// A round is a stretch of time, as a live drain is: it reads every ring up to the
/// same moment. (Rounds of so many samples per ring let a ring with more events per
/// second fall behind the others in time, and the others' events piled up in the
/// sorter for the whole replay: the nvme-tcp mode's rings are uneven, and its sorter
/// held a growing backlog that no live run has.)
#[inline(never)]
fn drive<C: Correlator, L: Layout<C::Event> + ?Sized>(
    pipe: &mut Pipeline<C, L>,
    streams: &[Stream],
    out: &mut dyn FnMut(C::Record),
) {
    drive_with(pipe, streams, out, &mut || {});
}

/// [`drive`], with `between` run after each round.
fn drive_with<C: Correlator, L: Layout<C::Event> + ?Sized>(
    pipe: &mut Pipeline<C, L>,
    streams: &[Stream],
    out: &mut dyn FnMut(C::Record),
    between: &mut dyn FnMut(),
) {
    for (now, read) in Rounds::new(streams) {
        pipe.begin_round(now);
        for (cpu, s) in streams.iter().enumerate() {
            for &(t, at, len) in &s.index[read[cpu].clone()] {
                pipe.sample(t, cpu as u32, &s.bytes[at..at + len]);
            }
        }
        pipe.end_round(&mut *out);
        between();
    }
    pipe.finish(&mut *out);
}

/// What a live reader finds between two rounds: the workload ran on its core while it
/// slept, so its caches hold the workload's lines, not its own. Writes `buf` whole (its
/// time not counted: returned to be subtracted).
fn evict(buf: &mut [u64], pass: u64) -> f64 {
    let cpu0 = cpu_secs();
    for (i, w) in buf.iter_mut().enumerate() {
        *w = w.wrapping_add(pass ^ i as u64);
    }
    std::hint::black_box(&buf);
    cpu_secs() - cpu0
}

/// The rounds of a replay, as a live drain reads them: each round's clock, and per
/// ring the samples read in it (a range of its index).
struct Rounds<'a> {
    streams: &'a [Stream],
    window: u64,
    pos: [usize; CPUS],
}

impl<'a> Rounds<'a> {
    fn new(streams: &'a [Stream]) -> Self {
        Rounds {
            streams,
            window: round_window(streams),
            pos: [0; CPUS],
        }
    }
}

impl Iterator for Rounds<'_> {
    type Item = (u64, [std::ops::Range<usize>; CPUS]);

    fn next(&mut self) -> Option<Self::Item> {
        let oldest = (self.streams.iter().zip(&self.pos))
            .filter_map(|(s, &p)| s.index.get(p).map(|x| x.0))
            .min()?;
        // The clock of this round: every sample stamped before it is read now.
        let now = oldest + self.window;
        let read = std::array::from_fn(|cpu| {
            let from = self.pos[cpu];
            let end = self
                .streams
                .get(cpu)
                .map_or(from, |s| from + before(&s.index[from..], now));
            self.pos[cpu] = end;
            from..end
        });
        Some((now, read))
    }
}

/// A round's stretch of time: so long that a round holds `ROUND` samples per ring on
/// average.
fn round_window(streams: &[Stream]) -> u64 {
    let events: usize = streams.iter().map(|s| s.index.len()).sum();
    let first = streams
        .iter()
        .filter_map(|s| s.index.first().map(|x| x.0))
        .min();
    let last = streams
        .iter()
        .filter_map(|s| s.index.last().map(|x| x.0))
        .max();
    match (first, last) {
        (Some(first), Some(last)) if events > 0 => {
            ((last - first) as u128 * (ROUND * streams.len()) as u128 / events as u128).max(1)
                as u64
        }
        _ => 1,
    }
}

/// How many of `index`'s first samples are stamped before `now`: a galloping search
/// from the start, as the answer is about a round's samples in. (A binary search over
/// the whole rest of the stream took ≈ 20 cache misses per ring per round, a cost
/// of the harness that no live drain has.)
fn before(index: &[(u64, usize, usize)], now: u64) -> usize {
    let mut hi = 1;
    while hi < index.len() && index[hi - 1].0 < now {
        hi *= 2;
    }
    let lo = hi / 2;
    let hi = hi.min(index.len());
    lo + index[lo..hi].partition_point(|x| x.0 < now)
}

/// One CPU's samples in time order, their payloads back to back in one buffer as a
/// ring holds them (each in its own allocation, the first touch of every sample was a
/// cache miss that a ring read in order does not have): (time, offset, length).
#[derive(Default)]
struct Stream {
    index: Vec<(u64, usize, usize)>,
    bytes: Vec<u8>,
}

impl Stream {
    /// Per CPU, samples in any order: each CPU's sorted by time and laid out as a ring.
    fn rings(per_cpu: Vec<Vec<(u64, Vec<u8>)>>) -> Vec<Stream> {
        per_cpu
            .into_iter()
            .map(|mut s| {
                s.sort_by_key(|(t, _)| *t);
                let mut out = Stream::default();
                for (t, raw) in s {
                    // Ring records are 8-byte aligned.
                    let at = out.bytes.len();
                    out.index.push((t, at, raw.len()));
                    out.bytes.extend_from_slice(&raw);
                    out.bytes.resize(out.bytes.len().next_multiple_of(8), 0);
                }
                out
            })
            .collect()
    }
}

/// The newest captured tree that has `event` (`system/name`).
fn captured_tree(event: &str) -> PathBuf {
    newest_tree(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tracefs"),
        event,
    )
    .expect("a captured tree with the events")
}

/// Replays until `REPLAYS` are done, each returning (this thread's CPU s, wall s, late,
/// a checksum every replay must agree on); prints the figures of the fastest.
fn report(
    what: &str,
    tree: &std::path::Path,
    streams: &[Stream],
    ios: u64,
    mut replay: impl FnMut() -> (f64, f64, u64, u64),
) -> (f64, u64) {
    let events: usize = streams.iter().map(|s| s.index.len()).sum();
    let bytes: usize = streams.iter().map(|s| s.bytes.len()).sum();
    // Several replays, the fastest reported: on a shared VM the slower ones measure
    // the neighbours.
    let mut runs = Vec::new();
    for _ in 0..REPLAYS {
        let run = replay();
        assert!(
            runs.iter().all(|r: &(f64, f64, u64, u64)| r.3 == run.3),
            "replays differ"
        );
        runs.push(run);
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let all: Vec<String> = runs
        .iter()
        .map(|r| format!("{:.0}", r.0 * 1e9 / events as f64))
        .collect();
    let (secs, wall, late, sum) = runs[0];
    println!("format files: {}", tree.display());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "load average {}; times are this thread's CPU time",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{what}: {events} events ({} MB of raw samples), {ios} I/Os in {secs:.3} s CPU ({wall:.3} s wall)",
        bytes / 1_000_000
    );
    println!(
        "  ns/event of {REPLAYS} replays, fastest first: {}",
        all.join(" ")
    );
    println!(
        "  {:.2} M events/s, {:.0} ns/event, {:.2} M I/Os/s on one core (late {late})",
        events as f64 / secs / 1e6,
        secs * 1e9 / events as f64,
        ios as f64 / secs / 1e6,
    );
    (secs, sum)
}

/// The same replay through the profile's own plan, as `record` and `stat` build and
/// drive it (`plan_offline`, then `dyn Stages`: a dynamic call per sample and per
/// record, and the instances of the library's code that the product runs, which a
/// profile-guided build (`scripts/build-pgo.sh`) was trained on; the replays above are
/// this bench's own instances).
fn via_plan(name: &str, tfs: &Tracefs, streams: &[Stream], ios: u64) {
    let p = profile::find(name).expect("a profile of that name");
    let events: usize = streams.iter().map(|s| s.index.len()).sum();
    let mut best = f64::MAX;
    for _ in 0..REPLAYS {
        let sys = SysBlock::none();
        let mut stages = profile::plan_offline(p, tfs, sys).unwrap().stages;
        let mut ok = 0u64;
        let mut out = |r: &dyn IoRecord, _: u32| ok += u64::from(r.status() == Status::Ok);
        let cpu0 = cpu_secs();
        for (now, read) in Rounds::new(streams) {
            stages.begin_round(now);
            for (cpu, s) in streams.iter().enumerate() {
                for &(t, at, len) in &s.index[read[cpu].clone()] {
                    stages.sample(t, cpu as u32, &s.bytes[at..at + len]);
                }
            }
            stages.end_round(&mut out);
        }
        stages.finish(&mut out);
        best = best.min(cpu_secs() - cpu0);
        assert_eq!(ok, ios, "every I/O must come out as one ok record");
    }
    println!(
        "  through the profile's plan (dyn Stages, as record and stat run it): {:.0} ns/event",
        best * 1e9 / events as f64
    );
}

/// Where a replay's time goes: the same samples decoded alone, then decoded and
/// ordered (a correlator that does nothing), fastest of `REPLAYS` each, in ns per
/// event; the rest of the full replay's time is the correlator's.
fn split<C: Correlator, L: Layout<C::Event> + ?Sized>(
    streams: &[Stream],
    decoder: impl Fn() -> Decoder<C::Event, L>,
    full_ns: f64,
) {
    let events: usize = streams.iter().map(|s| s.index.len()).sum();
    let fastest = |run: &mut dyn FnMut() -> f64| {
        (0..REPLAYS).map(|_| run()).fold(f64::MAX, f64::min) * 1e9 / events as f64
    };
    let d = decoder();
    let decode = fastest(&mut || {
        let cpu0 = cpu_secs();
        std::hint::black_box(decode_all(&d, streams));
        cpu_secs() - cpu0
    });
    let order = fastest(&mut || {
        let mut pipe = Pipeline::new(decoder(), Counting::<C>(0, std::marker::PhantomData));
        let cpu0 = cpu_secs();
        order_only(&mut pipe, streams);
        let cpu = cpu_secs() - cpu0;
        assert_eq!(pipe.correlator().0, events as u64);
        cpu
    });
    println!(
        "  of which decode {decode:.0}, order {:.0}, correlate {:.0} ns/event",
        order - decode,
        full_ns - order
    );
}

/// Every sample decoded and dropped, apart so that a profiler can count it alone
/// (`--toggle-collect='*decode_all*'`).
#[inline(never)]
fn decode_all<T, L: Layout<T> + ?Sized>(d: &Decoder<T, L>, streams: &[Stream]) -> u64 {
    let mut n = 0u64;
    for (cpu, s) in streams.iter().enumerate() {
        for &(t, at, len) in &s.index {
            // Kept whole: with only its time used, the fields' reads would go.
            if let Ok(Some(ev)) = d.decode(&s.bytes[at..at + len], t, cpu as u32) {
                std::hint::black_box(&ev);
                n += 1;
            }
        }
    }
    n
}

/// The replay through a correlator that only counts, apart so that a profiler can
/// count it alone (`--toggle-collect='*order_only*'`).
#[inline(never)]
fn order_only<C: Correlator, L: Layout<C::Event> + ?Sized>(
    pipe: &mut Pipeline<Counting<C>, L>,
    streams: &[Stream],
) {
    drive(pipe, streams, &mut |_| {});
}

/// A correlator that only counts the events it is given (for [`split`]).
struct Counting<C>(u64, std::marker::PhantomData<C>);

impl<C: Correlator> Correlator for Counting<C> {
    type Event = C::Event;
    type Record = C::Record;
    fn on_event(&mut self, _: &Event<C::Event>, _: &mut dyn FnMut(C::Record)) {
        self.0 += 1;
    }
    fn finish(&mut self, _: &mut dyn FnMut(C::Record)) {}
    fn counters(&self) -> Counters {
        Counters::default()
    }
}

fn main() {
    let ios: Option<u64> = std::env::args().skip(1).find_map(|a| a.parse().ok());
    if std::env::args().any(|a| a == "nvme-tcp") {
        return nvme_tcp(ios.unwrap_or(500_000));
    }
    let arg = |name: &str| std::env::args().any(|a| a == name);
    block(
        ios.unwrap_or(2_000_000),
        arg("csv"),
        arg("stat"),
        arg("cold"),
    );
}

fn block(ios: u64, csv: bool, stat: bool, cold: bool) {
    let tree = captured_tree("block/block_rq_issue");
    let tfs = Tracefs::at(&tree).unwrap();
    // Per CPU, a time-ordered stream. An I/O is submitted on one CPU and completed on the
    // next one, so the merge really has to reorder across rings. 64 I/Os in flight.
    let per_cpu = block_ios(&tfs, ios, CPUS).unwrap();
    let streams = Stream::rings(per_cpu);
    let events: usize = streams.iter().map(|s| s.index.len()).sum();

    // As the block profile's live plan binds them: one layout type, called directly.
    let decoder = || {
        let mut decoder = Decoder::<BlockEvent, BlockLayout>::direct();
        for e in BLOCK_EVENTS {
            decoder
                .bind(&tfs, "block", e, |fmt| BlockLayout::for_event(fmt, e))
                .unwrap();
        }
        decoder
    };
    let replay_with = |out: &mut dyn FnMut(BlockRecord), between: &mut dyn FnMut()| {
        let mut pipe = Pipeline::new(decoder(), BlockCorrelator::new(BlockConfig::default()));
        let start = Instant::now();
        let cpu0 = cpu_secs();
        drive_with(&mut pipe, &streams, out, between);
        let cpu = cpu_secs() - cpu0;
        let wall = start.elapsed().as_secs_f64();
        let h = pipe.health();
        assert_eq!(h.counters.unmatched + h.counters.incomplete, 0, "{h:?}");
        (cpu, wall, h.late)
    };
    let replay = |out: &mut dyn FnMut(BlockRecord)| replay_with(out, &mut || {});
    // Each replay's records and their d2c must be the same.
    let (secs, checksum) = report("decode+order+correlate", &tree, &streams, ios, || {
        let (mut records, mut d2c) = (0u64, 0u64);
        let (cpu, wall, late) = replay(&mut |r| {
            records += 1;
            d2c += r.d2c_ns.unwrap_or(0);
        });
        assert_eq!(records, ios, "every I/O must come out as one record");
        (cpu, wall, late, d2c)
    });
    via_plan("block", &tfs, &streams, ios);
    split::<BlockCorrelator, _>(&streams, decoder, secs * 1e9 / events as f64);
    let corr = || BlockCorrelator::new(BlockConfig::default());
    let d2c = |r: &BlockRecord| r.d2c_ns.unwrap_or(0);
    report_two_threads(&streams, &decoder(), corr, d2c, (ios, checksum));
    if cold {
        // 2 MiB: four times this machine's L2, as a fio and loop worker sharing the
        // reader's core leave it between two of its rounds.
        let mut buf = vec![0u64; 2 << 17];
        let mut best = f64::MAX;
        for _ in 0..REPLAYS {
            let (mut evicting, mut pass) = (0.0, 0);
            let (cpu, ..) = replay_with(&mut |_| {}, &mut || {
                pass += 1;
                evicting += evict(&mut buf, pass);
            });
            best = best.min(cpu - evicting);
        }
        println!(
            "cold rounds (2 MiB written between rounds, not counted): {:.0} ns/event",
            best * 1e9 / events as f64
        );
    }
    if stat {
        let mut rows: Vec<BlockRecord> = Vec::with_capacity(ios as usize);
        replay(&mut |r| rows.push(r));
        stat_table(&mut rows);
    }
    if !csv {
        return;
    }
    let sink = || {
        CsvSink::from_writer(
            Box::new(std::io::sink()),
            "nowhere".into(),
            BlockRecord::table(),
            WallClock::now(),
        )
        .unwrap()
    };
    // The record path: every record becomes a CSV row as it comes out.
    let mut out = sink();
    let (with_csv, _, _) = replay(&mut |r| out.record(&r).unwrap());
    assert_eq!(out.rows(), ios);
    println!(
        "replay → CSV (discarded): {:.0} ns/event, {:.0} ns/row ({:.0} of them CSV), {:.2} M rows/s",
        with_csv * 1e9 / events as f64,
        with_csv * 1e9 / ios as f64,
        (with_csv - secs) * 1e9 / ios as f64,
        ios as f64 / with_csv / 1e6
    );
    // The rendering alone, over the records collected first.
    let mut rows: Vec<BlockRecord> = Vec::with_capacity(ios as usize);
    replay(&mut |r| rows.push(r));
    let mut out = sink();
    let start = cpu_secs();
    for r in &rows {
        out.record(r).unwrap();
    }
    out.flush().unwrap();
    let render = cpu_secs() - start;
    println!(
        "CSV rendering alone: {:.0} ns/row ({} rows)",
        render * 1e9 / rows.len() as f64,
        rows.len()
    );
}

/// `stat`'s table over `rows`, the fastest of `REPLAYS` passes, in ns per row: as
/// they are, then all reads.
fn stat_table(rows: &mut [BlockRecord]) {
    use ntprof_perf::profile::shared::block_events::Op;
    use ntprof_perf::sink::stat::StatTable;
    let pass = |rows: &[BlockRecord]| {
        (0..REPLAYS)
            .map(|_| {
                let mut t = StatTable::new(BlockRecord::table());
                let start = cpu_secs();
                for r in rows {
                    t.add(r, 1);
                }
                let secs = cpu_secs() - start;
                std::hint::black_box(&t);
                secs
            })
            .fold(f64::MAX, f64::min)
    };
    let mixed = pass(rows);
    for r in rows.iter_mut() {
        r.io.op = Op::Read;
    }
    let reads = pass(rows);
    println!(
        "stat table alone: {:.1} ns/row all reads, {:.1} ns/row reads and writes mixed ({} rows)",
        reads * 1e9 / rows.len() as f64,
        mixed * 1e9 / rows.len() as f64,
        rows.len()
    );
}

/// 4k reads on a loopback NVMe/TCP connection, host and target traced in one run: the
/// 13 events of each (`tests.rs`'s `read` scenario of the nvme-tcp profile, stretched
/// so that 64 I/Os are in flight). The host submits on CPU 0 or 1 and completes on the
/// other; the target works on CPU 2 or 3.
fn nvme_tcp(ios: u64) {
    let tree = captured_tree("nvme_tcp/nvme_tcp_queue_rq");
    let tfs = Tracefs::at(&tree).unwrap();
    let events = NVME_TCP_EVENTS;
    let per_cpu = nvme_tcp_ios(&tfs, ios).unwrap();
    let streams = Stream::rings(per_cpu);
    // As the nvme-tcp profile's live plan binds them: one slot type, called directly.
    let decoder = || {
        let mut decoder = Decoder::<NvmeTcpEvent, TcpSlot>::direct();
        for (sys, ev) in events {
            decoder
                .bind(&tfs, sys, ev, |f| TcpSlot::bind(f, sys, ev))
                .unwrap();
        }
        decoder
    };
    let (secs, checksum) = report(
        "nvme-tcp, decode+order+correlate",
        &tree,
        &streams,
        ios,
        || {
            let mut pipe = Pipeline::new(decoder(), TcpCorrelator::new(TcpConfig::default()));
            let (mut records, mut sum) = (0u64, 0u64);
            let start = Instant::now();
            let cpu0 = cpu_secs();
            // Every stage of both parts in the checksum, read from the record itself
            // (as the block mode's sink does): the column table's dynamic reads would
            // cost more than a correlated event, and are the sinks' cost, not this one.
            drive(&mut pipe, &streams, &mut |r| {
                records += 1;
                assert_eq!(r.status(), Status::Ok, "{r:?}");
                sum += stage_sum(&r);
            });
            let cpu = cpu_secs() - cpu0;
            let wall = start.elapsed().as_secs_f64();
            let h = pipe.health();
            assert_eq!(records, ios, "every I/O must come out as one record: {h:?}");
            (cpu, wall, h.late, sum)
        },
    );
    let events: usize = streams.iter().map(|s| s.index.len()).sum();
    if std::env::args().any(|a| a == "only") {
        return;
    }
    via_plan("nvme-tcp", &tfs, &streams, ios);
    split::<TcpCorrelator, _>(&streams, decoder, secs * 1e9 / events as f64);
    let sum = |r: &TcpRecord| {
        assert_eq!(r.status(), Status::Ok, "{r:?}");
        stage_sum(r)
    };
    let corr = || TcpCorrelator::new(TcpConfig::default());
    report_two_threads(&streams, &decoder(), corr, sum, (ios, checksum));
}

/// [`two_threads`], fastest of `REPLAYS`: each must give `expect`, the records and the
/// checksum (the sum of `sum` over them) of the one-thread replay.
fn report_two_threads<C, L>(
    streams: &[Stream],
    decoder: &Decoder<C::Event, L>,
    corr: impl Fn() -> C,
    mut sum: impl FnMut(&C::Record) -> u64,
    expect: (u64, u64),
) where
    C: Correlator,
    C::Event: Send + 'static,
    L: Layout<C::Event> + ?Sized + 'static,
{
    let events: usize = streams.iter().map(|s| s.index.len()).sum();
    let runs: Vec<_> = (0..REPLAYS)
        .map(|_| {
            let (mut records, mut total) = (0u64, 0u64);
            let t = two_threads(streams, decoder, corr(), &mut |r| {
                records += 1;
                total += sum(&r);
            });
            assert_eq!((records, total), expect, "the two-thread replay differs");
            t
        })
        .collect();
    let best = |f: fn(&Threads) -> f64| runs.iter().map(f).fold(f64::MAX, f64::min);
    let per = |s: f64| s * 1e9 / events as f64;
    println!(
        "  two threads, decode apart: the consumer (order + correlate) {:.0} ns/event of its CPU, \
         the decoder {:.0}, wall {:.0} ({:.2} M events/s)",
        per(best(|t| t.consumer)),
        per(best(|t| t.decoder)),
        per(best(|t| t.wall)),
        events as f64 / best(|t| t.wall) / 1e6,
    );
}

/// Seconds a two-thread replay took: each thread's CPU, and the wall clock.
struct Threads {
    consumer: f64,
    decoder: f64,
    wall: f64,
}

/// The replay split over two threads as `--threads 2` runs it (`src/split.rs`): the
/// pipeline's own front decodes each round's samples into a batch on one thread; the
/// other queues the batch in the pipeline (`push_batch`), orders and correlates. Measures
/// what taking the decode off the consumer's core leaves it.
fn two_threads<C, L>(
    streams: &[Stream],
    decoder: &Decoder<C::Event, L>,
    corr: C,
    out: &mut dyn FnMut(C::Record),
) -> Threads
where
    C: Correlator,
    C::Event: Send + 'static,
    L: Layout<C::Event> + ?Sized + 'static,
{
    use ntprof_perf::pipeline::{Batch, Stages};
    use std::sync::mpsc::sync_channel;
    let mut pipe = Pipeline::new(decoder.clone(), corr);
    let mut front = pipe.front().expect("every pipeline has a front");
    let (full, rounds) = sync_channel::<(u64, Batch)>(4);
    std::thread::scope(|s| {
        let decode = s.spawn(move || {
            let cpu0 = cpu_secs();
            for (now, read) in Rounds::new(streams) {
                for (cpu, s) in streams.iter().enumerate() {
                    for &(t, at, len) in &s.index[read[cpu].clone()] {
                        front.sample(t, cpu as u32, &s.bytes[at..at + len]);
                    }
                }
                if full.send((now, front.take())).is_err() {
                    break;
                }
            }
            cpu_secs() - cpu0
        });
        let start = Instant::now();
        let cpu0 = cpu_secs();
        for (now, batch) in rounds {
            pipe.begin_round(now);
            pipe.push_batch(batch);
            pipe.end_round(&mut *out);
        }
        pipe.finish(&mut *out);
        let consumer = cpu_secs() - cpu0;
        let wall = start.elapsed().as_secs_f64();
        Threads {
            consumer,
            decoder: decode.join().expect("decode thread"),
            wall,
        }
    })
}

/// The sum of every stage of an nvme-tcp record (network time included).
fn stage_sum(r: &TcpRecord) -> u64 {
    let h = r.host.as_ref().map_or(0, |h| {
        [
            h.blk_submission,
            h.nvme_tcp_submission,
            h.waiting,
            h.nstack_completion,
            h.nvme_tcp_completion,
            h.blk_completion,
            h.total,
        ]
        .map(|v| v.unwrap_or(0))
        .iter()
        .sum()
    });
    let t = r.target.as_ref().map_or(0, |t| {
        [
            t.nstack_submission,
            t.nvmet_tcp_submission,
            t.target_subsystem,
            t.nvmet_tcp_completion,
            t.total,
        ]
        .map(|v| v.unwrap_or(0))
        .iter()
        .sum()
    });
    h + t + r.network_ns().unwrap_or(0) as u64
}
