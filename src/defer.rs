//! `--defer`: read the rings during the run, and do everything else after it.
//!
//! Measured on a 2-vCPU machine, what a reader costs the traced workload is its CPU
//! time, whatever it spends it on (docs/performance.md: a reader that only frees the
//! rings and burns as much CPU as `stat` costs as much). [`Deferred`] sits between the
//! live loop and a pipeline: it copies each raw sample out of the rings into memory and
//! keeps every call the loop makes (a round's clock, its samples, the gaps the
//! kernel's counts found, the holds) in the order it was made. When tracing stops, it
//! makes them on the pipeline, so the rows, the gaps and their order against the events
//! are those of a live run; only when they are made changes. The reader's work during
//! the run is then what draining the rings costs plus a copy.
//!
//! Memory is the price: every sample's raw bytes and a 16-byte header (≈ 76 bytes a
//! block sample, measured: 52.2 MiB for 720,162), in huge pages that a thread at
//! SCHED_IDLE faults in ahead of need ([`Prefault`]). Past a cap, the oldest rounds are
//! handed on while tracing, as many as keep what is held under it: a long run becomes
//! a live one with a lag, never an unbounded process.

use crate::correlate::gate::Gate;
use crate::correlate::Gap;
use crate::perf::{HugeBuf, HUGE_PAGE};
use crate::pipeline::{Between, Stages};
use crate::record::IoRecord;
use crate::sink::Health;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// A sample as held: time, CPU, raw length, then the raw bytes.
const HEADER: usize = 16;

/// Memory comes in huge pages: one page fault per 2 MiB (see [`HugeBuf`]).
const CHUNK: usize = HUGE_PAGE;

/// Chunks read to the end and kept for reuse: memory faulted in once serves again
/// when the cap makes the spool a queue.
const SPARES: usize = 2;

/// The samples held, oldest first, packed in chunks ([`HEADER`] then the raw bytes; a
/// sample never spans two chunks).
#[derive(Default)]
struct Spool {
    chunks: VecDeque<Chunk>,
    /// Where the oldest sample starts in the first chunk.
    read: usize,
    spares: Vec<Chunk>,
    /// Chunks made (not reused).
    made: usize,
    prefault: Option<Prefault>,
    /// Chunks the idle-priority thread may fault in, until it starts with the first
    /// round (after [`Deferred::make_ready`], which takes its share first).
    to_prefault: usize,
}

/// Chunks kept ready ahead of the spool: 16 MiB, 1 s of samples at ≈ 200,000 a second.
const AHEAD: usize = 8;

/// Memory made ready for the spool by a thread that runs only on idle CPU time.
///
/// Measured on a 2-vCPU VM, the kernel zeroing the fresh pages the spool writes into
/// was half or more of a deferring reader's CPU (`clear_page`: 52 % of it with huge
/// pages, ≈ 37 % in faults with 4 KiB ones); with the memory faulted in before the run
/// it used 10-12 ms of CPU per s against 20-38. A thread at SCHED_IDLE takes that work
/// into the CPU time no task wants, ahead of need; when it falls behind, the spool
/// maps its own memory and pays for it as before.
struct Prefault {
    shared: Arc<Ready>,
}

#[derive(Default)]
struct Ready {
    state: Mutex<ReadyState>,
    wake: Condvar,
}

#[derive(Default)]
struct ReadyState {
    chunks: Vec<Mem>,
    /// Chunks still to make: no more than the cap can hold.
    budget: usize,
    stop: bool,
    /// Chunks faulted in, and the thread's CPU time doing it.
    faulted: usize,
    fault_cpu: Duration,
}

impl Ready {
    fn lock(&self) -> MutexGuard<'_, ReadyState> {
        // A panic elsewhere cannot leave the state half-changed (pushes and pops).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Prefault {
    fn start(budget: usize) -> Option<Prefault> {
        let shared = Arc::new(Ready::default());
        shared.lock().budget = budget;
        let ready = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("ntprof-prefault".into())
            .spawn(move || {
                // Not fatal: at normal priority it competes with the workload as the
                // reader's own faults would.
                let _ = crate::perf::set_idle_priority();
                loop {
                    let mut st = ready.lock();
                    while !st.stop && (st.chunks.len() >= AHEAD || st.budget == 0) {
                        st = ready.wake.wait(st).unwrap_or_else(PoisonError::into_inner);
                    }
                    if st.stop {
                        return;
                    }
                    st.budget -= 1;
                    drop(st);
                    // Out of memory: the spool maps its own, or falls back to the heap.
                    let Ok(mut b) = HugeBuf::new(CHUNK) else {
                        return;
                    };
                    let cpu0 = thread_cpu();
                    b.populate();
                    let cpu = thread_cpu().saturating_sub(cpu0);
                    let mut st = ready.lock();
                    st.chunks.push(Mem::Huge(b));
                    st.faulted += 1;
                    st.fault_cpu += cpu;
                }
            })
            .ok()?;
        Some(Prefault { shared })
    }

    /// Chunks faulted in so far, and the CPU time that took.
    fn cost(&self) -> (usize, Duration) {
        let st = self.shared.lock();
        (st.faulted, st.fault_cpu)
    }

    fn take(&self) -> Option<Mem> {
        let mem = self.shared.lock().chunks.pop();
        self.shared.wake.notify_one();
        mem
    }
}

/// This thread's CPU time; zero where the clock cannot be read (the cost is then not
/// reported, nothing else changes).
fn thread_cpu() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(Duration::from)
        .unwrap_or_default()
}

impl Drop for Prefault {
    /// Not joined: at SCHED_IDLE beside a busy workload the chunk the thread is
    /// faulting in can take it a second, and nothing waits on it. It stops after that
    /// chunk, which goes with the last reference to `Ready`.
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
    }
}

struct Chunk {
    mem: Mem,
    /// Bytes written.
    len: usize,
}

/// Huge-page memory, or the heap when the kernel will not map more (the process's
/// limits): the samples are kept either way.
enum Mem {
    Huge(HugeBuf),
    Heap(Box<[u8]>),
}

impl Mem {
    fn new(len: usize) -> Mem {
        match HugeBuf::new(len) {
            Ok(b) => Mem::Huge(b),
            Err(_) => Mem::Heap(vec![0; len].into_boxed_slice()),
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Mem::Huge(b) => b.as_slice(),
            Mem::Heap(b) => b,
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Mem::Huge(b) => b.as_mut_slice(),
            Mem::Heap(b) => b,
        }
    }
}

impl Spool {
    /// Keep a sample; its size in the spool.
    #[inline]
    fn push(&mut self, time: u64, cpu: u32, raw: &[u8]) -> usize {
        let need = HEADER + raw.len();
        let room = |c: &Chunk| c.mem.bytes().len() - c.len >= need;
        if !self.chunks.back().is_some_and(room) {
            let chunk = match self.spares.pop() {
                Some(c) if room(&c) => c,
                _ => {
                    self.made += 1;
                    let ready = self.prefault.as_ref().filter(|_| need <= CHUNK);
                    Chunk {
                        mem: match ready.and_then(Prefault::take) {
                            Some(mem) => mem,
                            None => Mem::new(need.max(CHUNK)),
                        },
                        len: 0,
                    }
                }
            };
            self.chunks.push_back(chunk);
        }
        let Some(c) = self.chunks.back_mut() else {
            return 0;
        };
        let at = c.len;
        let buf = &mut c.mem.bytes_mut()[at..at + need];
        buf[..8].copy_from_slice(&time.to_le_bytes());
        buf[8..12].copy_from_slice(&cpu.to_le_bytes());
        buf[12..16].copy_from_slice(&(raw.len() as u32).to_le_bytes());
        buf[HEADER..].copy_from_slice(raw);
        c.len += need;
        need
    }

    /// Hand the oldest `n` samples to `f`, oldest first.
    fn pop(&mut self, mut n: u64, f: &mut dyn FnMut(u64, u32, &[u8])) {
        while n > 0 {
            let Some(c) = self.chunks.front() else {
                debug_assert!(false, "fewer samples held than counted");
                return;
            };
            if self.read >= c.len {
                self.retire();
                continue;
            }
            let rest = &c.mem.bytes()[self.read..c.len];
            let Some((head, tail)) = rest.split_first_chunk::<HEADER>() else {
                debug_assert!(false, "a held sample cut short");
                self.retire();
                continue;
            };
            let time = u64::from_le_bytes(head[..8].try_into().unwrap_or_default());
            let cpu = u32::from_le_bytes(head[8..12].try_into().unwrap_or_default());
            let len = u32::from_le_bytes(head[12..].try_into().unwrap_or_default()) as usize;
            let Some(raw) = tail.get(..len) else {
                debug_assert!(false, "a held sample cut short");
                self.retire();
                continue;
            };
            f(time, cpu, raw);
            self.read += HEADER + len;
            n -= 1;
        }
    }

    /// The first chunk is read: keep it as a spare, or let it go.
    fn retire(&mut self) {
        if let Some(mut c) = self.chunks.pop_front() {
            if self.spares.len() < SPARES {
                c.len = 0;
                self.spares.push(c);
            }
        }
        self.read = 0;
    }
}

/// What the live loop asked, kept in its order.
enum Step {
    /// A round's samples (in the [`Spool`]) and the calls around them: `now` when the
    /// round began (`begin_round`), `ended` when it ended (`end_round`); samples given
    /// outside a round are kept as one with neither.
    Round(Round),
    /// A gap the counts found, a hold, a rate change.
    Call(Between),
}

#[derive(Default)]
struct Round {
    now: Option<u64>,
    ended: bool,
    samples: u64,
    /// The samples' bytes in the spool.
    bytes: usize,
    bad_records: u64,
}

impl Step {
    /// What the step holds, counted against the cap; at least its own size, so that a
    /// cap of 0 holds nothing.
    fn bytes(&self) -> usize {
        std::mem::size_of::<Step>()
            + match self {
                Step::Round(r) => r.bytes,
                Step::Call(c) => c.heap_bytes(),
            }
    }
}

/// What a deferred run held and when its samples were handed on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeferStats {
    /// The most held at once, bytes (the samples and their headers).
    pub peak: usize,
    /// Samples handed on while tracing, because the cap was reached.
    pub early: u64,
    /// Samples handed on after tracing stopped.
    pub after: u64,
    /// How long handing those on took.
    pub after_time: Duration,
    /// Memory faulted in ahead of need by the idle-priority thread: chunks of
    /// [`HUGE_PAGE`], and that thread's CPU time doing it. On a VM whose host takes
    /// freed memory back (free page reporting), a fresh 2 MiB measured 3-4.5 ms
    /// against 0.14 for memory the guest still held, which made `--defer` cost the
    /// workload more than a live run (docs/performance.md, 2026-12-02).
    pub prefaulted: usize,
    pub prefault_cpu: Duration,
    /// Memory made ready before tracing started ([`Deferred::make_ready`]): chunks of
    /// [`HUGE_PAGE`], and how long that took.
    pub ready_before: usize,
    pub ready_time: Duration,
}

/// A [`Stages`] that holds every call until [`Stages::finish`] (or until what it holds
/// passes its cap), then makes it on `inner` (see the module doc).
pub struct Deferred<'a> {
    inner: &'a mut dyn Stages,
    steps: VecDeque<Step>,
    spool: Spool,
    /// The round being read.
    round: Option<Round>,
    held: usize,
    cap: usize,
    /// Samples and bad records in `steps` and `round`, not yet handed on.
    samples: u64,
    bad_records: u64,
    stats: DeferStats,
    /// Called when tracing has stopped and the held samples are about to be handed on:
    /// how many, and the bytes they take.
    notice: Option<Box<dyn FnMut(u64, usize) + 'a>>,
}

impl<'a> Deferred<'a> {
    /// Hold at most about `cap` bytes; 0 hands every round on as it ends (a live run).
    pub fn new(inner: &'a mut dyn Stages, cap: usize) -> Deferred<'a> {
        let spool = Spool {
            // Memory beyond the cap is never needed; below a chunk the spool is a queue.
            to_prefault: if cap >= CHUNK { cap / CHUNK + 1 } else { 0 },
            ..Spool::default()
        };
        Deferred {
            spool,
            inner,
            steps: VecDeque::new(),
            round: None,
            held: 0,
            cap,
            samples: 0,
            bad_records: 0,
            stats: DeferStats::default(),
            notice: None,
        }
    }

    /// What [`make_ready`](Deferred::make_ready) of `bytes` would make: whole chunks,
    /// within the cap (which bounds the memory made, before the run or ahead of need
    /// alike; under a chunk, none).
    pub fn ready_limit(&self, bytes: usize) -> usize {
        bytes
            .min(self.cap)
            .div_ceil(CHUNK)
            .min(self.spool.to_prefault)
            * CHUNK
    }

    /// Fault in `bytes` of the memory the samples will take (at most the cap) now, on
    /// this thread, before tracing starts: where the CPUs are busy, the idle-priority
    /// thread gets little time to do it while tracing runs, and the reader then pays
    /// for each fresh page itself, in the traced workload's time (on a busy CPU of a VM
    /// whose fresh memory is slow, that made `--defer` cost more than a live run:
    /// docs/performance.md, 2026-12-02). Stops early when `stop` says so (Ctrl-C while
    /// it works); returns the bytes made ready.
    pub fn make_ready(&mut self, bytes: usize, stop: &dyn Fn() -> bool) -> usize {
        let start = Instant::now();
        let chunks = self.ready_limit(bytes) / CHUNK;
        let mut made = 0;
        while made < chunks && !stop() {
            // Out of memory: what is made is kept; the rest comes as before.
            let Ok(mut b) = HugeBuf::new(CHUNK) else {
                break;
            };
            b.populate();
            self.spool.spares.push(Chunk {
                mem: Mem::Huge(b),
                len: 0,
            });
            made += 1;
        }
        self.spool.to_prefault -= made;
        if made == chunks && bytes >= self.cap {
            // The whole cap is ready but for the chunk its bytes may spill into: no
            // thread is started for that one.
            self.spool.to_prefault = 0;
        }
        self.stats.ready_before += made;
        self.stats.ready_time += start.elapsed();
        made * CHUNK
    }

    /// Say when the held samples start being handed on (they can take seconds).
    pub fn on_finish(mut self, f: impl FnMut(u64, usize) + 'a) -> Deferred<'a> {
        self.notice = Some(Box::new(f));
        self
    }

    pub fn stats(&self) -> &DeferStats {
        &self.stats
    }

    fn push(&mut self, step: Step) {
        self.held += step.bytes();
        self.steps.push_back(step);
    }

    /// A call with no samples: made at once when nothing is held before it, since then
    /// it would be the next one made anyway.
    fn call(&mut self, step: Step) {
        if self.steps.is_empty() && self.round.is_none() {
            self.apply(step, &mut |_, _| {});
        } else {
            self.push(step);
        }
    }

    /// Hand on the oldest steps until what is held is within the cap (all, with
    /// `all`); the samples handed on.
    fn release(&mut self, all: bool, out: &mut dyn FnMut(&dyn IoRecord, u32)) -> u64 {
        let mut handed = 0;
        while all || self.held > self.cap {
            let Some(step) = self.steps.pop_front() else {
                break;
            };
            self.held -= step.bytes();
            if let Step::Round(r) = &step {
                self.samples -= r.samples;
                self.bad_records -= r.bad_records;
                handed += r.samples;
            }
            self.apply(step, out);
        }
        handed
    }

    /// Make one held call on the pipeline, as the live loop would have.
    fn apply(&mut self, step: Step, out: &mut dyn FnMut(&dyn IoRecord, u32)) {
        let inner = &mut *self.inner;
        match step {
            Step::Round(r) => {
                if let Some(now) = r.now {
                    inner.begin_round(now);
                }
                self.spool.pop(r.samples, &mut |time, cpu, raw| {
                    inner.sample(time, cpu, raw);
                });
                if r.bad_records > 0 {
                    inner.bad_records(r.bad_records);
                }
                if r.ended {
                    inner.end_round(out);
                }
            }
            Step::Call(c) => c.apply(inner),
        }
    }
}

impl Stages for Deferred<'_> {
    /// The time, whether or not the sample is one of the pipeline's: that is known only
    /// once it is decoded (nothing in the live loop reads it).
    #[inline]
    fn sample(&mut self, time: u64, cpu: u32, raw: &[u8]) -> Option<u64> {
        let bytes = self.spool.push(time, cpu, raw);
        let r = self.round.get_or_insert_with(Round::default);
        r.samples += 1;
        r.bytes += bytes;
        self.samples += 1;
        Some(time)
    }

    fn begin_round(&mut self, now: u64) {
        if self.spool.to_prefault > 0 {
            self.spool.prefault = Prefault::start(std::mem::take(&mut self.spool.to_prefault));
        }
        // Samples given outside a round stay before it, as they were given.
        if let Some(r) = self.round.take() {
            self.push(Step::Round(r));
        }
        self.round = Some(Round {
            now: Some(now),
            ..Round::default()
        });
    }

    fn bad_records(&mut self, n: u64) {
        self.round.get_or_insert_with(Round::default).bad_records += n;
        self.bad_records += n;
    }

    fn end_round(&mut self, out: &mut dyn FnMut(&dyn IoRecord, u32)) {
        let mut r = self.round.take().unwrap_or_default();
        r.ended = true;
        self.push(Step::Round(r));
        self.stats.peak = self.stats.peak.max(self.held);
        self.stats.early += self.release(false, out);
    }

    fn finish(&mut self, out: &mut dyn FnMut(&dyn IoRecord, u32)) {
        if let Some(p) = &self.spool.prefault {
            (self.stats.prefaulted, self.stats.prefault_cpu) = p.cost();
        }
        // Nothing more will be written: the memory made ready and not taken is let go.
        self.spool.prefault = None;
        if let Some(r) = self.round.take() {
            self.push(Step::Round(r));
        }
        self.stats.peak = self.stats.peak.max(self.held);
        if let Some(f) = self.notice.as_mut() {
            f(self.samples, self.held);
        }
        let start = Instant::now();
        self.stats.after += self.release(true, out);
        self.inner.finish(out);
        self.stats.after_time += start.elapsed();
    }

    /// The pipeline's, with the samples held counted as arrived: the live loop's final
    /// drain waits until the counts' samples have (see `Counting::finish`).
    fn health(&self) -> Health {
        let mut h = self.inner.health();
        h.samples += self.samples;
        h.held = self.samples;
        h.bad_records += self.bad_records;
        h
    }

    fn on_missing(&mut self, gap: &Gap<'_>) {
        self.call(Step::Call(Between::missing(gap)));
    }

    fn hold_until(&mut self, t: Option<u64>) {
        self.call(Step::Call(Between::Hold(t)));
    }

    fn rows(&self) -> u64 {
        self.inner.rows()
    }

    fn rate_from(&mut self, from: u64, n: u32) {
        self.call(Step::Call(Between::Rate { from, n }));
    }

    /// None: a rate controller changes the kernel's filters and the correlator's gate
    /// in one step, which a deferred run cannot (the CLI refuses `--max-rate` with it).
    fn gate(&mut self) -> Option<&mut Gate> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Decoder;
    use crate::pipeline::Pipeline;
    use crate::profile::block::correlate::{BlockConfig, BlockCorrelator};
    use crate::profile::shared::block_events::{BlockEvent, BlockLayout};
    use crate::synth::RecordBuilder;

    /// One call of the live loop, as a test stream lists them.
    enum Call {
        Begin(u64),
        Sample(u64, u32, Vec<u8>),
        Bad(u64),
        End,
        Missing(u64, u64, u64),
        Hold(u64),
    }

    /// A block stream as the live loop would make it of two CPUs' rings: 3,000 reads
    /// at depth ≈ 20 with latencies from 5 to 400 µs, in 2 ms rounds (each CPU's ring
    /// read in turn), a hold after each round, one issue and one completion the kernel
    /// never wrote (each reported two rounds later), and a bad record.
    fn stream() -> Vec<Call> {
        let tfs = crate::testutil::captured_tracefs(
            &["block/block_rq_issue", "block/block_rq_complete"],
            "block events",
        );
        let fmt = |e| tfs.event("block", e).unwrap();
        let (issue, complete) = (fmt("block_rq_issue"), fmt("block_rq_complete"));
        let raw = |f, sector: u64| {
            RecordBuilder::new(f)
                .int("dev", 7 << 20)
                .int("sector", sector)
                .int("nr_sector", 8)
                .bytes("rwbs", b"R")
                .build()
        };
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rand = move |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        // (time, cpu, raw); the two the kernel never wrote are left out.
        let mut events = Vec::new();
        for i in 0..3_000u64 {
            let t = 10_000 + i * 10_000 + rand(5_000);
            let done = t + 5_000 + rand(395_000);
            let sector = i * 8;
            if i != 700 {
                events.push((t, rand(2) as u32, raw(&issue, sector)));
            }
            if i != 1_900 {
                events.push((done, rand(2) as u32, raw(&complete, sector)));
            }
        }
        events.sort_by_key(|e| e.0);
        let gaps = [(7_010_000u64, "issue"), (19_010_000 + 400_000, "complete")];
        let mut calls = Vec::new();
        let mut next = 0;
        let mut end = 0;
        for round in 1.. {
            end = round * 2_000_000;
            calls.push(Call::Begin(end));
            let upto = events[next..].partition_point(|e| e.0 < end) + next;
            for cpu in 0..2 {
                for (t, c, raw) in &events[next..upto] {
                    if *c == cpu {
                        calls.push(Call::Sample(*t, cpu, raw.clone()));
                    }
                }
            }
            if round == 5 {
                calls.push(Call::Bad(1));
            }
            calls.push(Call::End);
            // Reported two rounds after the round that would have read it.
            for (k, &(t, _)) in gaps.iter().enumerate() {
                if end >= t + 4_000_000 && end < t + 6_000_000 {
                    calls.push(Call::Missing(k as u64, t - 20_000, t + 20_000));
                }
            }
            calls.push(Call::Hold(end.saturating_sub(1_000_000)));
            next = upto;
            if next == events.len() {
                break;
            }
        }
        calls.push(Call::Begin(end + 2_000_000));
        calls.push(Call::End);
        calls
    }

    fn pipeline() -> Pipeline<BlockCorrelator, BlockLayout> {
        let tfs = crate::testutil::captured_tracefs(
            &["block/block_rq_issue", "block/block_rq_complete"],
            "block events",
        );
        let mut decoder = Decoder::<BlockEvent, BlockLayout>::direct();
        for e in ["block_rq_issue", "block_rq_complete"] {
            decoder
                .bind(&tfs, "block", e, |f| BlockLayout::for_event(f, e))
                .unwrap();
        }
        Pipeline::new(decoder, BlockCorrelator::new(BlockConfig::default()))
    }

    /// Every row (all its cells, and its weight) in the order handed out, and the
    /// health at the end.
    type Out = (Vec<String>, String);

    /// Run the stream through `pipe`; `check` sees the stages after each round and
    /// whether a row came out in it.
    fn drive(pipe: &mut dyn Stages, check: &mut dyn FnMut(&dyn Stages, bool)) -> Out {
        let row = |r: &dyn IoRecord, n: u32| {
            let cells: Vec<String> = (0..r.schema().columns.len())
                .map(|i| r.value(i).to_text())
                .collect();
            format!("{} x{n}", cells.join(","))
        };
        let mut rows = Vec::new();
        pipe.hold_until(Some(0));
        pipe.rate_from(0, 1);
        for call in stream() {
            match call {
                Call::Begin(now) => pipe.begin_round(now),
                Call::Sample(t, cpu, raw) => {
                    pipe.sample(t, cpu, &raw);
                }
                Call::Bad(n) => pipe.bad_records(n),
                Call::End => {
                    let before = rows.len();
                    pipe.end_round(&mut |r, n| rows.push(row(r, n)));
                    check(pipe, rows.len() > before);
                }
                Call::Missing(k, after, before) => pipe.on_missing(&Gap {
                    event: ["block:block_rq_issue", "block:block_rq_complete"][k as usize],
                    n: 1,
                    after,
                    before,
                }),
                Call::Hold(t) => pipe.hold_until(Some(t)),
            }
        }
        pipe.hold_until(None);
        pipe.finish(&mut |r, n| rows.push(row(r, n)));
        (rows, format!("{:?}", pipe.health()))
    }

    fn live() -> Out {
        drive(&mut pipeline(), &mut |_, _| {})
    }

    /// Samples of every size from 0 to 1,000 bytes across several chunks, taken out in
    /// batches while more are put in: each comes out whole, in order, and read chunks
    /// are kept for reuse, no more than `SPARES`.
    #[test]
    fn the_spool_gives_back_every_sample_whole_in_order_across_chunks() {
        let mut spool = Spool::default();
        let sample = |i: u64| -> Vec<u8> { (0..i % 1_001).map(|k| (i + k) as u8).collect() };
        let (mut next_in, mut next_out) = (0u64, 0u64);
        let mut bytes = 0;
        for round in 0..40u64 {
            for _ in 0..1_500 {
                let raw = sample(next_in);
                bytes += spool.push(next_in * 3, (next_in % 7) as u32, &raw);
                next_in += 1;
            }
            // Fall behind, then catch up: the spool is a queue of up to several chunks.
            let take = if round % 4 == 3 {
                next_in - next_out
            } else {
                700
            };
            spool.pop(take, &mut |time, cpu, raw| {
                assert_eq!((time, cpu), (next_out * 3, (next_out % 7) as u32));
                assert_eq!(raw, sample(next_out), "sample {next_out}");
                next_out += 1;
            });
            assert!(spool.spares.len() <= SPARES);
        }
        assert_eq!(next_out, next_in);
        assert!(bytes > 10 * CHUNK, "{bytes} bytes: too few to span chunks");
        assert!(
            spool.chunks.len() <= 1,
            "{} chunks left",
            spool.chunks.len()
        );
        // At most 4 rounds (≈ 3 MB) are held at once: 2 or 3 chunks, the rest reused.
        assert!(
            spool.made <= 5,
            "{} chunks made for {bytes} bytes",
            spool.made
        );
    }

    /// Memory made ready before the run holds the first samples: no chunk is made
    /// while they fit, the cap bounds what is made ready, and Ctrl-C stops it.
    #[test]
    fn memory_made_ready_before_the_run_takes_the_first_samples() {
        let mut inner = pipeline();
        let mut d = Deferred::new(&mut inner, 3 * CHUNK);
        assert_eq!(d.make_ready(2 * CHUNK - 1, &|| false), 2 * CHUNK);
        assert_eq!(d.stats().ready_before, 2);
        assert_eq!(d.spool.to_prefault, 2, "the idle thread's share");
        // The rest of the cap (a chunk's worth, and the one its bytes may spill into):
        // no thread is left anything to fault in.
        assert_eq!(
            d.make_ready(usize::MAX, &|| false),
            2 * CHUNK,
            "past the cap"
        );
        assert_eq!(d.spool.to_prefault, 0);
        assert_eq!(d.stats().ready_before, 4);
        let raw = [7u8; 100];
        let mut bytes = 0;
        while bytes < 3 * CHUNK - 4096 {
            bytes += d.spool.push(1, 0, &raw);
        }
        assert_eq!(d.spool.made, 0, "a chunk made while ready ones were left");
        assert_eq!(d.spool.chunks.len(), 3);
        while d.spool.chunks.len() < 5 {
            d.spool.push(1, 0, &raw);
        }
        assert_eq!(d.spool.made, 1, "past what was made ready");

        let mut inner = pipeline();
        let mut d = Deferred::new(&mut inner, usize::MAX);
        assert_eq!(d.make_ready(10 * CHUNK, &|| true), 0, "stopped before any");
        let calls = std::cell::Cell::new(0);
        let stop_after_two = || {
            calls.set(calls.get() + 1);
            calls.get() > 2
        };
        assert_eq!(d.make_ready(10 * CHUNK, &stop_after_two), 2 * CHUNK);
        assert_eq!(d.stats().ready_before, 2);
    }

    #[test]
    fn held_to_the_end_the_rows_and_health_are_a_live_runs() {
        let want = live();
        assert!(want.0.len() > 2_900, "{}", want.0.len());
        assert!(want.1.contains("bad_records: 1"), "{}", want.1);
        let mut inner = pipeline();
        let mut d = Deferred::new(&mut inner, usize::MAX);
        let mut samples = 0;
        let got = drive(&mut d, &mut |p, rows| {
            assert!(!rows, "a row before the run ended");
            // The live loop's final drain counts arrivals through this.
            let h = p.health();
            assert!(
                h.samples > samples || h.samples == 5_998,
                "{} after {samples}",
                h.samples
            );
            // Every one is held: the status line says so.
            assert_eq!(h.held, h.samples);
            samples = h.samples;
        });
        assert_eq!(got, want);
        assert_eq!(d.health().held, 0, "none left held once finished");
        let s = d.stats();
        assert_eq!((s.early, s.after), (0, 5_998), "{s:?}");
        assert!(s.peak > 5_998 * 60, "{s:?}");
    }

    #[test]
    fn past_the_cap_the_oldest_rounds_are_handed_on_and_nothing_changes() {
        let want = live();
        for cap in [0, 20_000, 200_000] {
            let mut inner = pipeline();
            let mut d = Deferred::new(&mut inner, cap);
            let mut rows_seen = false;
            let got = drive(&mut d, &mut |_, rows| rows_seen |= rows);
            assert_eq!(got, want, "cap {cap}");
            assert!(rows_seen, "cap {cap}: no row while tracing");
            let s = d.stats();
            assert_eq!(s.early + s.after, 5_998, "cap {cap}: {s:?}");
            assert!(s.early > 0, "cap {cap}: {s:?}");
            // A round past the cap is handed on as soon as it is held: the cap is
            // exceeded by one round at most (≈ 400 samples, ≈ 33 KB here).
            assert!(s.peak <= cap + 48_000, "cap {cap}: {s:?}");
            if cap == 0 {
                assert_eq!(s.after, 0, "{s:?}");
            }
        }
    }
}
