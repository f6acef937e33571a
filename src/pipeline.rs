//! The main loop: drain every ring, decode, order, correlate, hand records to sinks.
//!
//! [`Pipeline`] is the pure part (no I/O: used by the live loop, by tests and by the
//! benchmark); [`run_live`] adds the perf rings, the clock and the stop conditions.
//! [`Stages`] is a pipeline with its profile's types erased, so the live loop and the
//! sinks are the same code for every profile.

use crate::correlate::Correlator;
use crate::decode::{Decoder, Event};
use crate::order::Sorter;
use crate::perf::{PerfGroup, Record};
use crate::record::IoRecord;
use crate::sink::{Health, SinkError};
use std::time::{Duration, Instant};

/// decode → order → correlate, fed one raw sample at a time.
pub struct Pipeline<C: Correlator> {
    decoder: Decoder<C::Event>,
    sorter: Sorter<Event<C::Event>>,
    corr: C,
    samples: u64,
    bad_records: u64,
    /// Newest sample time decoded so far.
    newest: u64,
    loss: Option<Loss>,
}

/// What the kernel's dropped samples cost, attributed from the records: the rings say
/// *that* samples were lost (PERF_RECORD_LOST), not which. After a loss, a completion
/// whose start is missing (unmatched) lost its start, and an I/O that started before
/// the loss and never completed (an `incomplete` row) may have lost its end. Both are
/// counted as I/Os the loss cost; an I/O whose every event fell in the gap leaves no
/// trace and cannot be counted.
#[derive(Debug, Clone, Copy)]
struct Loss {
    /// The newest sample time when the latest loss was noticed.
    at: u64,
    /// `unmatched` when the first loss was noticed.
    unmatched_before: u64,
    cut: u64,
}

impl<C: Correlator> Pipeline<C> {
    pub fn new(decoder: Decoder<C::Event>, corr: C) -> Pipeline<C> {
        Pipeline {
            decoder,
            sorter: Sorter::new(),
            corr,
            samples: 0,
            bad_records: 0,
            newest: 0,
            loss: None,
        }
    }

    /// The rings reported lost samples (see [`Loss`]).
    pub fn note_loss(&mut self) {
        let unmatched = self.corr.counters().unmatched;
        let l = self.loss.get_or_insert(Loss {
            at: 0,
            unmatched_before: unmatched,
            cut: 0,
        });
        l.at = self.newest;
    }

    /// Decode and queue one raw record; returns its time when it was one of ours.
    #[inline]
    pub fn sample(&mut self, time: u64, cpu: u32, raw: &[u8]) -> Option<u64> {
        self.samples += 1;
        match self.decoder.decode(raw, time, cpu) {
            Ok(Some(ev)) => {
                self.newest = self.newest.max(time);
                self.sorter.push(cpu, time, ev);
                Some(time)
            }
            Ok(None) => None,
            Err(_) => {
                self.bad_records += 1;
                None
            }
        }
    }

    /// Start of a drain round: `now` is the recording clock, read before any ring of the
    /// round is read. A replay passes a time no sample still to be fed is older than.
    pub fn begin_round(&mut self, now: u64) {
        self.sorter.begin_round(now);
    }

    /// End of a drain round: correlate what the sorter released (everything older than
    /// the start of the previous round, see `order`).
    pub fn end_round(&mut self, out: &mut dyn FnMut(C::Record)) {
        let corr = &mut self.corr;
        let loss = &mut self.loss;
        let out = &mut |r: C::Record| {
            count_cut(loss, &r);
            out(r)
        };
        self.sorter.end_round(|_, ev| corr.on_event(&ev, out));
    }

    /// End of the run: release and correlate everything, give up what is in flight.
    pub fn finish(&mut self, out: &mut dyn FnMut(C::Record)) {
        let corr = &mut self.corr;
        let loss = &mut self.loss;
        let out = &mut |r: C::Record| {
            count_cut(loss, &r);
            out(r)
        };
        self.sorter.flush(|_, ev| corr.on_event(&ev, out));
        self.corr.finish(out);
    }

    pub fn correlator(&self) -> &C {
        &self.corr
    }

    /// Counters so far; `lost` is filled in by the caller that owns the rings.
    pub fn health(&self) -> Health {
        Health {
            lost: Vec::new(),
            samples: self.samples,
            bad_records: self.bad_records,
            late: self.sorter.late(),
            counters: self.corr.counters(),
            lost_ios: self.loss.map_or(0, |l| {
                l.cut
                    + self
                        .corr
                        .counters()
                        .unmatched
                        .saturating_sub(l.unmatched_before)
            }),
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
    fn end_round(&mut self, out: &mut dyn FnMut(&dyn IoRecord));
    fn finish(&mut self, out: &mut dyn FnMut(&dyn IoRecord));
    fn health(&self) -> Health;
    /// The rings reported lost samples since the last drain.
    fn note_loss(&mut self);
}

impl<C: Correlator> Stages for Pipeline<C> {
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
    fn end_round(&mut self, out: &mut dyn FnMut(&dyn IoRecord)) {
        Pipeline::end_round(self, &mut |r| out(&r))
    }
    fn finish(&mut self, out: &mut dyn FnMut(&dyn IoRecord)) {
        Pipeline::finish(self, &mut |r| out(&r))
    }
    fn health(&self) -> Health {
        Pipeline::health(self)
    }
    fn note_loss(&mut self) {
        Pipeline::note_loss(self)
    }
}

/// An `incomplete` record that started before a loss may have lost its end.
fn count_cut<R: IoRecord>(loss: &mut Option<Loss>, r: &R) {
    if let Some(l) = loss {
        if r.status() == crate::record::Status::Incomplete && r.start_ns() <= l.at {
            l.cut += 1;
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
}

/// Where a live run's records go, and what it is told at every interval.
pub trait RecordSink {
    fn record(&mut self, r: &dyn IoRecord) -> Result<(), SinkError>;
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
    /// Call `RecordSink::tick` this often (stat intervals).
    pub tick: Option<Duration>,
    pub deadline: Option<Instant>,
}

/// Run until a stop condition, then drain once more, flush and give up what is in
/// flight. A sink error stops the run (after the rings are disabled) and is returned.
pub fn run_live(
    group: &mut PerfGroup,
    pipe: &mut dyn Stages,
    opts: &LiveOptions,
    should_stop: &mut dyn FnMut() -> Result<Option<StopReason>, RunError>,
    sink: &mut dyn RecordSink,
) -> Result<(StopReason, Health), RunError> {
    let mut next_tick = opts.tick.map(|t| Instant::now() + t);
    let reason = loop {
        let mut stop = should_stop()?;
        if stop.is_none() && opts.deadline.is_some_and(|d| Instant::now() >= d) {
            stop = Some(StopReason::Duration);
        }
        if let Some(r) = stop {
            break r;
        }
        let mut wait = opts.poll;
        if let Some(d) = opts.deadline {
            wait = wait.min(d.saturating_duration_since(Instant::now()));
        }
        group.wait(wait)?;
        if let Err(e) = drain_round(group, pipe, sink) {
            let _ = group.disable();
            return Err(e);
        }
        if let (Some(t), Some(next)) = (opts.tick, next_tick) {
            if Instant::now() >= next {
                sink.tick(&health(group, pipe))?;
                next_tick = Some(next + t);
            }
        }
    };
    group.disable()?;
    // Samples written before the disable are still in the rings. A sample a CPU was
    // writing when the disable reached it is published a moment later: drain until a
    // short wait brings nothing new.
    drain_round(group, pipe, sink)?;
    for _ in 0..5 {
        let before = pipe.health().samples;
        std::thread::sleep(Duration::from_millis(2));
        drain_round(group, pipe, sink)?;
        if pipe.health().samples == before {
            break;
        }
    }
    let mut first_err = None;
    pipe.finish(&mut |r| deliver(sink, r, &mut first_err));
    if let Some(e) = first_err {
        return Err(e.into());
    }
    Ok((reason, health(group, pipe)))
}

/// Hand one record to the sink, keeping only the first error (later records of the
/// same round are dropped: the run is stopping anyway).
fn deliver(sink: &mut dyn RecordSink, r: &dyn IoRecord, first_err: &mut Option<SinkError>) {
    if first_err.is_none() {
        if let Err(e) = sink.record(r) {
            *first_err = Some(e);
        }
    }
}

fn health(group: &PerfGroup, pipe: &dyn Stages) -> Health {
    let mut h = pipe.health();
    h.lost = group.lost();
    h
}

fn drain_round(
    group: &mut PerfGroup,
    pipe: &mut dyn Stages,
    sink: &mut dyn RecordSink,
) -> Result<(), RunError> {
    // Before any ring is read: every sample stamped earlier is either visible in this
    // round's reads or still being written (the sorter's bound lags one round for those).
    pipe.begin_round(group.clock_now()?);
    let lost_before: u64 = group.lost().iter().map(|(_, n)| n).sum();
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
    }
    if group.lost().iter().map(|(_, n)| n).sum::<u64>() > lost_before {
        pipe.note_loss();
    }
    let mut first_err = None;
    pipe.end_round(&mut |r| deliver(sink, r, &mut first_err));
    first_err.map_or(Ok(()), |e| Err(e.into()))
}
