//! The main loop: drain every ring, decode, order, correlate, hand records to sinks.
//!
//! [`Pipeline`] is the pure part (no I/O: used by the live loop, by tests and by the
//! benchmark); [`run_live`] adds the perf rings, the clock and the stop conditions.
//! [`Stages`] is a pipeline with its profile's types erased, so the live loop and the
//! sinks are the same code for every profile.

use crate::correlate::{Correlator, Gap};
use crate::decode::{Decoder, Event, Layout, Malformed};
use crate::order::Sorter;
use crate::perf::ledger::{Ledger, Missing};
use crate::perf::{PerfGroup, Record};
use crate::rate::RateControl;
use crate::record::IoRecord;
use crate::sink::{Health, SinkError};
use std::time::{Duration, Instant};

/// decode → order → correlate, fed one raw sample at a time. `L` is the decoder's
/// slot type (see [`Decoder`]).
pub struct Pipeline<C: Correlator, L: ?Sized = dyn Layout<<C as Correlator>::Event>> {
    decoder: Decoder<C::Event, L>,
    sorter: Sorter<Event<C::Event>>,
    corr: C,
    samples: u64,
    bad_records: u64,
    /// Missing samples the correlator did not claim (`Correlator::on_missing` said
    /// `false`): that many of the records it gives up as `incomplete` (a command that
    /// never completed, or whose id came back while it was held) were cut by them and
    /// are written `dropped`, oldest first.
    unclaimed: u64,
    relabeled: u64,
    /// The earliest time after which samples went missing (the least `after` of the
    /// gaps reported): completions unmatched from then on may have lost their start,
    /// those correlated before the gap was reported included
    /// ([`Correlator::unmatched_at`]).
    missing_from: Option<u64>,
    /// The sampling rate by the start time of an I/O (see [`Rates`]).
    rates: Rates,
    rows: u64,
}

/// 1 in N by time: from each entry's time on, I/Os that start are sampled 1 in its N.
/// A record's weight (how many I/Os it stands for) is the rate at its start.
#[derive(Debug, Clone)]
struct Rates(Vec<(u64, u32)>);

impl Rates {
    /// Changes kept: a record older than the oldest change kept gets its rate.
    const KEPT: usize = 64;

    #[inline]
    fn at(&self, t: u64) -> u32 {
        // A run without `--max-rate` has only the rate it started with.
        if let [(_, n)] = *self.0 {
            return n;
        }
        let i = self.0.partition_point(|&(from, _)| from <= t);
        self.0[i.saturating_sub(1)].1
    }

    fn set(&mut self, from: u64, n: u32) {
        self.0.retain(|&(f, _)| f < from);
        self.0.push((from, n));
        if self.0.len() > Self::KEPT {
            self.0.remove(0);
        }
    }
}

impl<C: Correlator, L: Layout<C::Event> + ?Sized> Pipeline<C, L> {
    pub fn new(decoder: Decoder<C::Event, L>, corr: C) -> Pipeline<C, L> {
        Pipeline {
            decoder,
            sorter: Sorter::new(),
            corr,
            samples: 0,
            bad_records: 0,
            unclaimed: 0,
            relabeled: 0,
            missing_from: None,
            rates: Rates(vec![(0, 1)]),
            rows: 0,
        }
    }

    /// I/Os starting at `from` or later are sampled 1 in `n`.
    pub fn rate_from(&mut self, from: u64, n: u32) {
        self.rates.set(from, n);
    }

    /// Samples the kernel counted never arrived.
    pub fn on_missing(&mut self, gap: &Gap<'_>) {
        self.missing_from = Some(self.missing_from.map_or(gap.after, |m| m.min(gap.after)));
        if !self.corr.on_missing(gap) {
            self.unclaimed += gap.n;
        }
    }

    /// Hold back events from `t` on (see `Sorter::hold_until`).
    pub fn hold_until(&mut self, t: Option<u64>) {
        self.sorter.hold_until(t);
    }

    /// Decode and queue one raw record; returns its time when it was one of ours.
    #[inline]
    pub fn sample(&mut self, time: u64, cpu: u32, raw: &[u8]) -> Option<u64> {
        self.samples += 1;
        let ours = match self.sorter.tail(cpu, time) {
            Some(q) => self.decoder.decode_into(raw, time, cpu, q),
            None => self
                .decoder
                .decode(raw, time, cpu)
                .map(|ev| ev.map(|ev| self.sorter.insert(cpu, ev)).is_some()),
        };
        let ours = ours_at(ours, time, &mut self.bad_records);
        if let Some(t) = ours {
            self.sorter.queued(t);
        }
        ours
    }

    /// Start of a drain round: `now` is the recording clock, read before any ring of the
    /// round is read. A replay passes a time no sample still to be fed is older than.
    pub fn begin_round(&mut self, now: u64) {
        self.sorter.begin_round(now);
    }

    /// End of a drain round: correlate what the sorter released (everything older than
    /// the start of the previous round, see `order`).
    pub fn end_round(&mut self, out: &mut dyn FnMut(C::Record)) {
        self.release(false, &mut |r, _| out(r));
    }

    /// End of the run: release and correlate everything, give up what is in flight.
    pub fn finish(&mut self, out: &mut dyn FnMut(C::Record)) {
        self.release(true, &mut |r, _| out(r));
    }

    /// Correlate what the sorter releases (everything at the end) and hand out each
    /// record with the sampling rate it was traced at.
    ///
    /// `out` is generic, not `dyn`: the callers' adapters inline into the one closure
    /// the correlator calls, so a record is not moved and called on once more per hop.
    #[inline]
    fn release(&mut self, end: bool, out: &mut impl FnMut(C::Record, u32)) {
        let corr = &mut self.corr;
        let mut relabel = Relabel {
            unclaimed: &mut self.unclaimed,
            relabeled: &mut self.relabeled,
        };
        let rates = &self.rates;
        let rows = &mut self.rows;
        let out = &mut |mut r: C::Record| {
            *rows += 1;
            let n = rates.at(r.start_ns());
            relabel.apply(&mut r);
            out(r, n)
        };
        if end {
            self.sorter.flush(|ev| corr.on_event(ev, out));
            corr.finish(out);
        } else {
            self.sorter.end_round(|ev| corr.on_event(ev, out));
        }
    }

    pub fn correlator(&self) -> &C {
        &self.corr
    }

    /// Counters so far; losses per CPU are filled in by the caller that owns the rings.
    pub fn health(&self) -> Health {
        let mut c = self.corr.counters();
        c.incomplete -= self.relabeled.min(c.incomplete);
        c.cut += self.relabeled;
        Health {
            samples: self.samples,
            bad_records: self.bad_records,
            late: self.sorter.late(),
            // I/Os seen in part: rows cut, and completions unmatched since samples
            // began to go missing.
            lost_ios: self.missing_from.map_or(0, |from| {
                c.cut + c.unmatched.saturating_sub(self.corr.unmatched_at(from))
            }),
            counters: c,
            starts: self.corr.starts(),
            records: self.rows,
            ..Health::default()
        }
    }
}

/// Writes `dropped` on as many given-up records as missing samples went unclaimed.
struct Relabel<'a> {
    unclaimed: &'a mut u64,
    relabeled: &'a mut u64,
}

impl Relabel<'_> {
    #[inline]
    fn apply<R: IoRecord>(&mut self, r: &mut R) {
        if *self.unclaimed > 0 && r.status() == crate::record::Status::Incomplete {
            r.set_status(crate::record::Status::Dropped);
            *self.unclaimed -= 1;
            *self.relabeled += 1;
        }
    }
}

/// A pipeline of any profile, as the live loop drives it: records come out as
/// `&dyn IoRecord`, described by their column table.
pub trait Stages {
    fn sample(&mut self, time: u64, cpu: u32, raw: &[u8]) -> Option<u64>;
    /// A drain round starts: `now` was read from the sample clock before any ring.
    fn begin_round(&mut self, now: u64);
    /// Records that could not be parsed out of a ring (counted with the bad records).
    fn bad_records(&mut self, n: u64);
    /// Records come out with the sampling rate they were traced at (1 in N).
    fn end_round(&mut self, out: &mut dyn FnMut(&dyn IoRecord, u32));
    fn finish(&mut self, out: &mut dyn FnMut(&dyn IoRecord, u32));
    fn health(&self) -> Health;
    /// Samples the kernel counted never arrived.
    fn on_missing(&mut self, gap: &Gap<'_>);
    /// Hold back events from `t` on until the kernel's counts up to them are known.
    fn hold_until(&mut self, t: Option<u64>);
    /// Records handed out so far.
    fn rows(&self) -> u64;
    /// I/Os starting at `from` or later are sampled 1 in `n`.
    fn rate_from(&mut self, from: u64, n: u32);
    /// The correlator's gate for rate changes; `None` when it takes none.
    fn gate(&mut self) -> Option<&mut crate::correlate::gate::Gate>;
    /// The decode half of this pipeline, to run on a thread of its own
    /// ([`crate::split`]): it decodes samples into batches that [`push_batch`]
    /// (Self::push_batch) then queues here.
    fn front(&self) -> Option<Box<dyn Front>> {
        None
    }
    /// Queue a batch that this pipeline's [`front`](Self::front) decoded, as its
    /// samples would have been queued one by one.
    fn push_batch(&mut self, _batch: Batch) {}
}

/// A call of the live loop on a pipeline between rounds, kept to be made later or
/// elsewhere ([`crate::split`] sends it to the correlating thread, [`crate::defer`]
/// holds it until tracing stops) in the order it came among the rounds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Between {
    /// [`Stages::on_missing`], its event name owned.
    Missing {
        event: String,
        n: u64,
        after: u64,
        before: u64,
    },
    /// [`Stages::hold_until`].
    Hold(Option<u64>),
    /// [`Stages::rate_from`].
    Rate { from: u64, n: u32 },
}

impl Between {
    pub fn missing(gap: &Gap<'_>) -> Between {
        Between::Missing {
            event: gap.event.to_string(),
            n: gap.n,
            after: gap.after,
            before: gap.before,
        }
    }

    /// Make the call on `pipe`.
    pub fn apply(&self, pipe: &mut dyn Stages) {
        match self {
            Between::Missing {
                event,
                n,
                after,
                before,
            } => pipe.on_missing(&Gap {
                event,
                n: *n,
                after: *after,
                before: *before,
            }),
            Between::Hold(t) => pipe.hold_until(*t),
            Between::Rate { from, n } => pipe.rate_from(*from, *n),
        }
    }

    /// Memory it holds beyond its own size.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Between::Missing { event, .. } => event.len(),
            Between::Hold(_) | Between::Rate { .. } => 0,
        }
    }
}

/// What a sample's decode says to the ring walk: its time when it was one of ours
/// (`Ok(true)`), nothing for another event; a record that could not be decoded is
/// counted with the bad ones.
#[inline]
fn ours_at(decoded: Result<bool, Malformed>, time: u64, bad_records: &mut u64) -> Option<u64> {
    match decoded {
        Ok(ours) => ours.then_some(time),
        Err(_) => {
            *bad_records += 1;
            None
        }
    }
}

/// Events decoded by a [`Front`], in the order their samples were read; only the
/// pipeline that made the front knows their type.
pub struct Batch(Box<dyn std::any::Any + Send>);

/// A pipeline's decoder apart from it: what [`Pipeline::sample`] does up to the
/// queueing, into a batch.
pub trait Front: Send {
    /// Decode one raw sample into the batch; its time when it was one of ours.
    fn sample(&mut self, time: u64, cpu: u32, raw: &[u8]) -> Option<u64>;
    /// The events decoded since the last call.
    fn take(&mut self) -> Batch;
    /// Samples given, and those that could not be decoded, so far.
    fn counts(&self) -> (u64, u64);
}

struct DecodeHalf<K, L: ?Sized> {
    decoder: Decoder<K, L>,
    batch: Vec<Event<K>>,
    samples: u64,
    bad_records: u64,
}

impl<K: Copy + Send + 'static, L: Layout<K> + ?Sized + 'static> Front for DecodeHalf<K, L> {
    #[inline]
    fn sample(&mut self, time: u64, cpu: u32, raw: &[u8]) -> Option<u64> {
        self.samples += 1;
        let decoded = self.decoder.decode(raw, time, cpu);
        let ours = decoded.map(|ev| ev.map(|ev| self.batch.push(ev)).is_some());
        ours_at(ours, time, &mut self.bad_records)
    }

    fn take(&mut self) -> Batch {
        let room = self.batch.len();
        Batch(Box::new(std::mem::replace(
            &mut self.batch,
            Vec::with_capacity(room),
        )))
    }

    fn counts(&self) -> (u64, u64) {
        (self.samples, self.bad_records)
    }
}

impl<C, L> Stages for Pipeline<C, L>
where
    C: Correlator,
    C::Event: Send + 'static,
    L: Layout<C::Event> + ?Sized + 'static,
{
    #[inline]
    fn sample(&mut self, time: u64, cpu: u32, raw: &[u8]) -> Option<u64> {
        Pipeline::sample(self, time, cpu, raw)
    }
    fn begin_round(&mut self, now: u64) {
        Pipeline::begin_round(self, now)
    }
    fn bad_records(&mut self, n: u64) {
        self.bad_records += n;
    }
    fn end_round(&mut self, out: &mut dyn FnMut(&dyn IoRecord, u32)) {
        self.release(false, &mut |r, n| out(&r, n))
    }
    fn finish(&mut self, out: &mut dyn FnMut(&dyn IoRecord, u32)) {
        self.release(true, &mut |r, n| out(&r, n))
    }
    fn health(&self) -> Health {
        Pipeline::health(self)
    }
    fn on_missing(&mut self, gap: &Gap<'_>) {
        Pipeline::on_missing(self, gap)
    }
    fn hold_until(&mut self, t: Option<u64>) {
        Pipeline::hold_until(self, t)
    }
    fn rows(&self) -> u64 {
        self.rows
    }
    fn rate_from(&mut self, from: u64, n: u32) {
        Pipeline::rate_from(self, from, n)
    }
    fn gate(&mut self) -> Option<&mut crate::correlate::gate::Gate> {
        self.corr.gate()
    }
    fn front(&self) -> Option<Box<dyn Front>> {
        Some(Box::new(DecodeHalf {
            decoder: self.decoder.clone(),
            batch: Vec::new(),
            samples: 0,
            bad_records: 0,
        }))
    }
    fn push_batch(&mut self, batch: Batch) {
        // Only this pipeline's front makes its batches: another type is a batch of
        // another pipeline, which has no events for this one.
        let Ok(events) = batch.0.downcast::<Vec<Event<C::Event>>>() else {
            debug_assert!(false, "a batch from another pipeline's front");
            return;
        };
        // Queued as `sample` queues the event it decodes; the reader drains one ring
        // after another, so the batch is a run per ring.
        for run in events.chunk_by(|a, b| a.cpu == b.cpu) {
            self.sorter.push_run(run[0].cpu, run);
        }
    }
}

/// Why a live run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    Signal,
    Duration,
    /// The command given after `--` exited; its status (`None` when killed by a signal).
    CommandExited(Option<i32>),
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Perf(#[from] crate::perf::PerfError),
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("waiting for the command: {0}")]
    Command(std::io::Error),
    #[error("starting the thread that reads the rings (--threads 2): {0}")]
    Thread(std::io::Error),
    #[error("--threads 2: this profile's pipeline cannot decode on a thread of its own")]
    NoFront,
}

/// A live run that ended in an error, with what it had counted by then: the samples,
/// and the losses the kernel's counts had shown so far, so that the rows already
/// written are reported with them and not as a loss-free run.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct Failed {
    pub error: RunError,
    pub health: Box<Health>,
}

/// Where a live run's records go, and what it is told at every interval.
pub trait RecordSink {
    /// One I/O's record, traced at 1 in `sample` (it stands for that many I/Os).
    fn record(&mut self, r: &dyn IoRecord, sample: u32) -> Result<(), SinkError>;
    /// Called every `LiveOptions::tick`.
    fn tick(&mut self, _health: &Health) -> Result<(), SinkError> {
        Ok(())
    }
}

/// How the live loop paces itself.
#[derive(Debug, Clone)]
pub struct LiveOptions {
    /// Longest wait for a ring wake-up before quiet rings are drained anyway.
    pub poll: Duration,
    /// The same after a round that read nothing. Each round costs the reader a wake-up
    /// and the count reads interrupt every CPU, so a reader left on while the devices
    /// are idle (or its events off between `--duty` windows) should wake seldom; the
    /// first round with samples brings back `poll`. Never past the next tick, the
    /// deadline, or the rate controller's next step.
    pub idle: Duration,
    /// Call `RecordSink::tick` this often (stat intervals).
    pub tick: Option<Duration>,
    pub deadline: Option<Instant>,
    /// 1 in N I/Os traced (fixed `--sample`; `--max-rate` runs pass a controller).
    pub sample: u32,
}

/// How long after a count snapshot every sample stamped before it has surely been
/// written: a tracepoint writes its sample within microseconds of counting it.
const SETTLE: Duration = Duration::from_millis(3);
/// After disabling, how long the final drain may wait for samples the counts say were
/// written but have not arrived.
const FINAL_WAIT: Duration = Duration::from_millis(500);

/// The kernel's counts against what arrived, through a run: a snapshot of the counts
/// at the start of a round, settled after a drain that began [`SETTLE`] later, and
/// the [`Ledger`] that turns the tallies into missing samples.
struct Counting {
    sample: u32,
    ledger: Ledger,
    names: Vec<String>,
    pending: Option<Instant>,
    next: Instant,
    every: Duration,
    /// Samples received beyond the final counts (see `Health::uncounted`).
    uncounted: u64,
    /// Where each drop is written as it is reported (`NTPROF_GAP_LOG`), with the hold in
    /// force until then: a drop dated before it was reported after events that
    /// followed it went out. For searching a flake; the run's totals are in its exit line.
    gap_log: Option<std::fs::File>,
    /// Events from this time on were held back when the last drop was reported.
    held: Option<u64>,
}

impl Counting {
    fn new(group: &PerfGroup, sample: u32) -> Counting {
        let reads = group.reads_per_snapshot();
        Counting {
            sample,
            ledger: Ledger::new(),
            uncounted: 0,
            names: group.type_names().to_vec(),
            pending: None,
            next: Instant::now(),
            // Each read of another CPU's counts interrupts it: on a large host, or with
            // events read one by one (--max-rate), the snapshots are spaced out.
            every: Duration::from_millis(5).max(Duration::from_micros(50) * reads as u32),
            gap_log: std::env::var_os("NTPROF_GAP_LOG").and_then(|p| std::fs::File::create(p).ok()),
            held: None,
        }
    }

    /// Tell the pipeline of samples that went missing (and the log, if one is kept).
    fn report(&mut self, missing: &[Missing], exact: bool, pipe: &mut dyn Stages) {
        for m in missing {
            if let Some(log) = &mut self.gap_log {
                use std::io::Write;
                let held = self.held.map_or("none".to_string(), |h| h.to_string());
                let _ = writeln!(
                    log,
                    "{} cpu {} n {} after {} before {} held_from {held}{}",
                    self.names.get(m.event).map_or("?", String::as_str),
                    m.cpu,
                    m.n,
                    m.after,
                    m.before,
                    if exact { " final" } else { "" }
                );
            }
            pipe.on_missing(&m.gap(&self.names));
        }
    }

    /// At the start of a round: take a snapshot when one is due; returns whether the
    /// pending one settles after this round's drain.
    fn before_drain(&mut self, group: &mut PerfGroup) -> Result<bool, RunError> {
        let now = Instant::now();
        match self.pending {
            Some(t) => Ok(now.duration_since(t) >= SETTLE),
            None if now >= self.next => {
                group.snapshot()?;
                self.pending = Some(now);
                Ok(false)
            }
            None => Ok(false),
        }
    }

    fn after_drain(&mut self, group: &mut PerfGroup, pipe: &mut dyn Stages) {
        if let Some(tallies) = group.settle() {
            let (missing, confirmed) = self.ledger.update(&tallies, false);
            self.report(&missing, false, pipe);
            if let Some(t) = confirmed {
                pipe.hold_until(Some(t));
                self.held = Some(t);
            }
        }
        self.pending = None;
        self.next = Instant::now() + self.every;
    }

    /// After the events are disabled: drain until the counts say every sample written
    /// has arrived (or nothing more comes and a bounded wait ends), then report the
    /// exact shortfall.
    fn finish(
        &mut self,
        group: &mut PerfGroup,
        pipe: &mut dyn Stages,
        sink: &mut dyn RecordSink,
    ) -> Result<(), RunError> {
        // A snapshot taken while enabled is superseded by the final counts.
        let _ = group.settle();
        let start = Instant::now();
        let mut quiet = 0;
        loop {
            group.snapshot()?;
            let before = pipe.health().samples;
            drain_round(group, pipe, sink)?;
            let tallies = group.settle().unwrap_or_default();
            let arrived = pipe.health().samples > before;
            // Without PERF_FORMAT_LOST a ring's LOST total stands for its events'.
            let lost_records: u64 = group.lost().iter().map(|(_, n)| n).sum();
            let unexplained: u64 = match group.has_lost_format() {
                true => tallies
                    .iter()
                    .map(|t| t.missing().saturating_sub(t.lost.unwrap_or(0)))
                    .sum(),
                false => tallies
                    .iter()
                    .map(|t| t.missing())
                    .sum::<u64>()
                    .saturating_sub(lost_records),
            };
            quiet = if arrived { 0 } else { quiet + 1 };
            let waited = start.elapsed();
            if unexplained == 0
                || waited >= FINAL_WAIT
                || (quiet >= 3 && waited >= Duration::from_millis(20))
            {
                let missing = self.ledger.update(&tallies, true).0;
                self.report(&missing, true, pipe);
                // The counts are final: more arrived than counted is as much a fault
                // of the stream as fewer, and is said.
                self.uncounted = tallies
                    .iter()
                    .map(|t| t.received.saturating_sub(t.counted))
                    .sum();
                pipe.hold_until(None);
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn health(&self, group: &PerfGroup, pipe: &dyn Stages) -> Health {
        let mut h = pipe.health();
        let losses = self.ledger.losses(&group.lost());
        h.set_losses(losses.lost, losses.dropped);
        let kinds = group.record_kinds();
        h.throttled = kinds.throttled;
        h.unthrottled = kinds.unthrottled;
        h.other_records = kinds.other;
        h.sample = self.sample;
        let hp = group.hotplug();
        h.cpus_offlined = hp.offlined;
        h.cpus_onlined = hp.onlined;
        h.cpus_untraced = hp.untraced;
        h.uncounted = self.uncounted;
        h.started = h.starts.and_then(|s| {
            let i = self.names.iter().position(|n| n == s.event)?;
            Some(self.ledger.counted(i))
        });
        h
    }
}

/// Run until a stop condition, then drain until the kernel's counts say every sample
/// has arrived, flush, and give up what is in flight. A sink error stops the run
/// (after the rings are disabled) and is returned, with the health as of then.
pub fn run_live(
    group: &mut PerfGroup,
    pipe: &mut dyn Stages,
    opts: &LiveOptions,
    should_stop: &mut dyn FnMut() -> Result<Option<StopReason>, RunError>,
    sink: &mut dyn RecordSink,
    mut rate: Option<&mut RateControl>,
) -> Result<(StopReason, Health), Failed> {
    let mut counting = Counting::new(group, opts.sample);
    // Nothing reaches the correlator before the first counts are confirmed.
    pipe.hold_until(Some(0));
    let result = run_rounds(
        group,
        pipe,
        opts,
        should_stop,
        sink,
        &mut counting,
        &mut rate,
    );
    // Whatever ended the run, the events stop before anything else is reported.
    let disabled = group.disable();
    let ended = result.and_then(|reason| {
        disabled?;
        counting.finish(group, pipe, sink)?;
        Ok(reason)
    });
    let ended = match ended {
        // A sink that failed takes no more records.
        Err(e @ RunError::Sink(_)) => Err(e),
        // Whatever else ended the run, what was read is correlated and handed on: a
        // failed ring read must not cost the rows of the samples read before it (with
        // `--defer`, every sample of the run).
        ended => {
            let mut first_err = None;
            pipe.finish(&mut |r, n| deliver(sink, r, n, &mut first_err));
            match (ended, first_err) {
                (Ok(reason), None) => Ok(reason),
                (Ok(_), Some(e)) => Err(e.into()),
                (Err(e), _) => Err(e),
            }
        }
    };
    let mut h = counting.health(group, pipe);
    sampled(&mut h, rate.as_deref());
    match ended {
        Ok(reason) => Ok((reason, h)),
        Err(error) => Err(Failed {
            error,
            health: Box::new(h),
        }),
    }
}

/// The rate in effect and its changes, when a controller sets them.
fn sampled(h: &mut Health, rate: Option<&RateControl>) {
    if let Some(r) = rate {
        h.sample = r.sample();
        h.rate_changes = r.changes();
    }
}

fn run_rounds(
    group: &mut PerfGroup,
    pipe: &mut dyn Stages,
    opts: &LiveOptions,
    should_stop: &mut dyn FnMut() -> Result<Option<StopReason>, RunError>,
    sink: &mut dyn RecordSink,
    counting: &mut Counting,
    rate: &mut Option<&mut RateControl>,
) -> Result<StopReason, RunError> {
    let mut next_tick = opts.tick.map(|t| Instant::now() + t);
    let mut online = crate::perf::OnlineWatch::new();
    let mut idle = false;
    loop {
        let mut stop = should_stop()?;
        let now = Instant::now();
        if stop.is_none() && opts.deadline.is_some_and(|d| now >= d) {
            stop = Some(StopReason::Duration);
        }
        if let Some(r) = stop {
            return Ok(r);
        }
        let mut wait = opts.poll;
        if idle {
            let mut longest = opts.idle;
            if let Some(r) = rate.as_deref() {
                longest = longest.min(r.due_in(group.clock_now()?));
            }
            wait = wait.max(longest);
        }
        for due in [opts.deadline, next_tick].into_iter().flatten() {
            wait = wait.min(due.saturating_duration_since(now));
        }
        group.wait(wait)?;
        let settles = counting.before_drain(group)?;
        idle = drain_round(group, pipe, sink)? == 0;
        if settles {
            counting.after_drain(group, pipe);
        }
        // A CPU that came online is traced from the next round; one that went offline
        // keeps its ring for its counts (see `PerfGroup::follow_cpus`). A snapshot
        // pending across the change is dropped: its rings are not those of the next.
        let cpus = if group.take_recheck() {
            online.now()
        } else {
            online.changed()
        };
        if let Some(cpus) = cpus {
            if group.follow_cpus(&cpus)? {
                let _ = group.settle();
                counting.pending = None;
            }
        }
        if let Some(r) = rate.as_deref_mut() {
            r.step(group, pipe)?;
        }
        if let (Some(t), Some(next)) = (opts.tick, next_tick) {
            if Instant::now() >= next {
                let mut h = counting.health(group, pipe);
                sampled(&mut h, rate.as_deref());
                sink.tick(&h)?;
                next_tick = Some(next + t);
            }
        }
    }
}

/// Hand one record to the sink, keeping only the first error (later records of the
/// same round are dropped: the run is stopping anyway).
pub(crate) fn deliver(
    sink: &mut dyn RecordSink,
    r: &dyn IoRecord,
    sample: u32,
    first_err: &mut Option<SinkError>,
) {
    if first_err.is_none() {
        if let Err(e) = sink.record(r, sample) {
            *first_err = Some(e);
        }
    }
}

/// Returns the records read (samples, and the kernel's own records).
fn drain_round(
    group: &mut PerfGroup,
    pipe: &mut dyn Stages,
    sink: &mut dyn RecordSink,
) -> Result<u64, RunError> {
    // Before any ring is read: every sample stamped earlier is either visible in this
    // round's reads or still being written (the sorter's bound lags one round for those).
    pipe.begin_round(group.clock_now()?);
    let mut read = 0;
    for ring in 0..group.ring_count() {
        // Rings are per CPU: samples do not repeat it (see `perf::record`).
        let cpu = group.ring_cpu(ring);
        let stats = group.drain_ring(ring, |rec| {
            if let Record::Sample(s) = rec {
                pipe.sample(s.time, s.cpu.unwrap_or(cpu), s.raw);
            }
        });
        // A ring walk that hit a corrupt size resynchronised at the head and skipped
        // what it could not parse: count it with the bad records, never silently.
        pipe.bad_records(stats.malformed + u64::from(stats.ring_error.is_some()));
        read += stats.records;
    }
    let mut first_err = None;
    pipe.end_round(&mut |r, n| deliver(sink, r, n, &mut first_err));
    first_err.map_or(Ok(read), |e| Err(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Status;
    use crate::sink::testrec::T;

    /// The tallies confirm a gap some rounds after it: the completion of an I/O whose
    /// issue it cut may have been correlated, `unmatched`, before the gap was reported.
    /// It is one of the I/Os the gap cost; a completion unmatched before the gap began
    /// is not.
    #[test]
    fn a_completion_unmatched_before_its_lost_issue_was_reported_is_in_the_cost() {
        use crate::profile::block::correlate::{BlockConfig, BlockCorrelator};
        use crate::profile::shared::block_events::{BlockEvent, BlockLayout};
        use crate::synth::RecordBuilder;
        let tfs = crate::testutil::captured_tracefs(
            &["block/block_rq_issue", "block/block_rq_complete"],
            "block events",
        );
        let mut decoder = Decoder::<BlockEvent, BlockLayout>::direct();
        let mut fmts = Vec::new();
        for e in ["block_rq_issue", "block_rq_complete"] {
            decoder
                .bind(&tfs, "block", e, |f| BlockLayout::for_event(f, e))
                .unwrap();
            fmts.push(tfs.event("block", e).unwrap());
        }
        let raw = |k: usize, sector: u64| {
            RecordBuilder::new(&fmts[k])
                .int("dev", 7 << 20)
                .int("sector", sector)
                .int("nr_sector", 8)
                .bytes("rwbs", b"R")
                .build()
        };
        let mut pipe = Pipeline::new(decoder, BlockCorrelator::new(BlockConfig::default()));
        let mut rows = Vec::new();
        pipe.begin_round(0);
        // Sector 24 was issued before tracing began: unmatched, and no loss of ours.
        pipe.sample(100, 0, &raw(1, 24));
        // Sector 8: its issue (≈1,000) went missing; sector 16 is whole.
        pipe.sample(1_200, 0, &raw(0, 16));
        pipe.sample(2_000, 0, &raw(1, 16));
        pipe.sample(3_000, 0, &raw(1, 8));
        pipe.end_round(&mut |r| rows.push(r));
        pipe.begin_round(10_000);
        pipe.end_round(&mut |r| rows.push(r));
        pipe.begin_round(20_000);
        pipe.end_round(&mut |r| rows.push(r));
        assert_eq!(pipe.health().counters.unmatched, 2, "both correlated");
        pipe.on_missing(&Gap {
            event: "block:block_rq_issue",
            n: 1,
            after: 500,
            before: 2_500,
        });
        pipe.finish(&mut |r| rows.push(r));
        let h = pipe.health();
        assert_eq!(rows.len(), 1);
        assert_eq!(h.lost_ios, 1, "{h:?}");
    }

    #[test]
    fn unclaimed_missing_samples_relabel_as_many_given_up_records() {
        let (mut unclaimed, mut relabeled) = (2, 0);
        let mut r = Relabel {
            unclaimed: &mut unclaimed,
            relabeled: &mut relabeled,
        };
        let incomplete = |start| T {
            status: Status::Incomplete,
            ..T::new(start, "read", None, None)
        };
        let out: Vec<Status> = [
            T::new(1, "read", Some(5), None),
            incomplete(2),
            incomplete(3),
            incomplete(4),
        ]
        .into_iter()
        .map(|mut t| {
            r.apply(&mut t);
            t.status
        })
        .collect();
        // Completed rows are never relabeled; two missing samples cut two I/Os.
        assert_eq!(
            out,
            [
                Status::Ok,
                Status::Dropped,
                Status::Dropped,
                Status::Incomplete
            ]
        );
        assert_eq!((unclaimed, relabeled), (0, 2));
    }
}
