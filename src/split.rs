//! The live loop on two threads (`--threads 2`): one reads, one correlates.
//!
//! The reading thread runs [`run_live`] itself: the rings, the kernel's counts and the
//! ledger, the stop conditions, and the decode of every sample. What that loop asks of
//! the pipeline it sends, in the same order, to the calling thread, which holds the
//! pipeline's sorter and correlator and the sinks: a drain round (its clock and the
//! events decoded from it), a gap the counts found, a hold, an interval's end, the
//! end of the run. The calling thread applies each step as the one-thread loop would
//! have at that point, so the records, the gaps and their order against the events
//! are the same; only the decode of round N runs while round N − 1 is correlated.
//!
//! Measured on a replay of this path (`benches/pipeline.rs`, nvme-tcp, Zen 4), this
//! takes the correlating core from ≈ 45 to ≈ 34–37 ns per event (decode ≈ 19–23 ns per
//! event on the reading core). It costs a second core, so it is for hosts whose event
//! rate one core cannot take.
//!
//! A rate controller (`--max-rate`) changes the kernel filters and the correlator's
//! gate in one step, which needs both halves at once: it is refused with this mode.

use crate::correlate::Gap;
use crate::perf::PerfGroup;
use crate::pipeline::{
    deliver, run_live, Batch, Between, Failed, Front, LiveOptions, RecordSink, RunError, Stages,
    StopReason,
};
use crate::record::IoRecord;
use crate::sink::{Health, SinkError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};

/// What the reading thread asks of the pipeline, in the order it asks it.
enum Step {
    /// A drain round: the clock read before its rings (if the round began), and the
    /// events decoded from them.
    Round { now: Option<u64>, batch: Batch },
    /// A gap the counts found, a hold, a rate change.
    Call(Between),
    /// The end of the run: what was decoded since the last round, then everything
    /// held is released and the I/Os in flight are given up.
    Finish(Batch),
    /// An interval ended: the reader's part of the health (see [`merge`]).
    Tick(Box<Health>),
}

/// Steps in flight at most (a round is one step, and a hold or a gap after it one
/// more): the overlap needs one round, and a round can hold what every ring held.
/// When the correlating thread falls this far behind, the reader waits on it and the
/// rings fill, where what they cannot hold is lost and counted as in any run.
const BACKLOG: usize = 4;

/// [`run_live`] on two threads (see the module doc). `should_stop` is called on the
/// reading thread.
pub fn run_live_split(
    group: &mut PerfGroup,
    pipe: &mut dyn Stages,
    opts: &LiveOptions,
    should_stop: &mut (dyn FnMut() -> Result<Option<StopReason>, RunError> + Send),
    sink: &mut dyn RecordSink,
) -> Result<(StopReason, Health), Failed> {
    // A run that fails reports the reader's counts with the correlator's.
    let failed_with = |error: RunError, reader: &Health, pipe: &dyn Stages| Failed {
        error,
        health: Box::new(merge(reader, pipe.health())),
    };
    let Some(front) = pipe.front() else {
        return Err(failed_with(RunError::NoFront, &Health::default(), pipe));
    };
    // The reader reads the counts: it must know which one says how many I/Os began.
    let starts = pipe.health().starts;
    let (tx, steps) = sync_channel(BACKLOG);
    // Set by the correlating thread when a sink fails: the reader then stops as on a
    // signal, and the sink's error is what the run returns.
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        let failed = &failed;
        let reader = std::thread::Builder::new()
            .name("ntprof-read".into())
            .spawn_scoped(s, move || {
                let mut reader = Reader {
                    front,
                    tx: tx.clone(),
                    failed,
                    now: None,
                    bad_records: 0,
                    starts,
                };
                let mut ticks = Ticks(tx, failed);
                let mut stop = || {
                    if failed.load(Ordering::Relaxed) {
                        return Ok(Some(StopReason::Signal));
                    }
                    should_stop()
                };
                run_live(group, &mut reader, opts, &mut stop, &mut ticks, None)
            })
            .map_err(|e| failed_with(RunError::Thread(e), &Health::default(), pipe))?;
        let mut sink_err: Option<SinkError> = None;
        // Until the reader is done and its sender dropped. After a sink error the
        // steps are still received, so that the reader is never left waiting.
        for step in steps {
            if sink_err.is_none() {
                apply(step, pipe, sink, &mut sink_err);
                if sink_err.is_some() {
                    failed.store(true, Ordering::Relaxed);
                }
            }
        }
        let read = match reader.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        let (reason, health) = match read {
            Ok(r) => r,
            Err(f) => return Err(failed_with(f.error, &f.health, pipe)),
        };
        if let Some(e) = sink_err {
            return Err(failed_with(e.into(), &health, pipe));
        }
        Ok((reason, merge(&health, pipe.health())))
    })
}

/// One step, as the one-thread loop takes it.
fn apply(
    step: Step,
    pipe: &mut dyn Stages,
    sink: &mut dyn RecordSink,
    err: &mut Option<SinkError>,
) {
    let mut out = |r: &dyn IoRecord, n: u32| deliver(sink, r, n, err);
    match step {
        Step::Round { now, batch } => {
            if let Some(now) = now {
                pipe.begin_round(now);
            }
            pipe.push_batch(batch);
            pipe.end_round(&mut out);
        }
        Step::Call(c) => c.apply(pipe),
        Step::Finish(batch) => {
            pipe.push_batch(batch);
            pipe.finish(&mut out);
        }
        Step::Tick(h) => {
            let h = merge(&h, pipe.health());
            if let Err(e) = sink.tick(&h) {
                err.get_or_insert(e);
            }
        }
    }
}

/// The health of a split run: the reader's (samples, bad records, losses, record
/// kinds, the rate) with the correlating side's (its counters, events late, the I/Os
/// the losses cost).
fn merge(reader: &Health, pipe: Health) -> Health {
    Health {
        counters: pipe.counters,
        lost_ios: pipe.lost_ios,
        late: pipe.late,
        starts: pipe.starts,
        records: pipe.records,
        ..reader.clone()
    }
}

/// The pipeline as the reading thread sees it: its decode, and every other call sent
/// on as a [`Step`].
struct Reader<'a> {
    front: Box<dyn Front>,
    tx: SyncSender<Step>,
    /// Set when the correlating thread is gone or failed: the run stops.
    failed: &'a AtomicBool,
    /// The clock of the round being read.
    now: Option<u64>,
    /// Records the ring walks could not parse.
    bad_records: u64,
    /// The correlator's start event, as of the run's start (see [`merge`]).
    starts: Option<crate::correlate::Starts>,
}

/// Send `step`; if the correlating thread is gone (it panicked), stop the run.
fn send(tx: &SyncSender<Step>, failed: &AtomicBool, step: Step) {
    if tx.send(step).is_err() {
        failed.store(true, Ordering::Relaxed);
    }
}

impl Reader<'_> {
    fn send(&self, step: Step) {
        send(&self.tx, self.failed, step);
    }
}

impl Stages for Reader<'_> {
    #[inline]
    fn sample(&mut self, time: u64, cpu: u32, raw: &[u8]) -> Option<u64> {
        self.front.sample(time, cpu, raw)
    }
    fn begin_round(&mut self, now: u64) {
        self.now = Some(now);
    }
    fn bad_records(&mut self, n: u64) {
        self.bad_records += n;
    }
    fn end_round(&mut self, _: &mut dyn FnMut(&dyn IoRecord, u32)) {
        let batch = self.front.take();
        let now = self.now.take();
        self.send(Step::Round { now, batch });
    }
    fn finish(&mut self, _: &mut dyn FnMut(&dyn IoRecord, u32)) {
        let batch = self.front.take();
        self.send(Step::Finish(batch));
    }
    /// What the reader knows; [`merge`] adds the correlator's part.
    fn health(&self) -> Health {
        let (samples, bad) = self.front.counts();
        Health {
            samples,
            bad_records: bad + self.bad_records,
            starts: self.starts,
            ..Health::default()
        }
    }
    fn on_missing(&mut self, gap: &Gap<'_>) {
        self.send(Step::Call(Between::missing(gap)));
    }
    fn hold_until(&mut self, t: Option<u64>) {
        self.send(Step::Call(Between::Hold(t)));
    }
    /// Only a rate controller reads it, and this mode has none.
    fn rows(&self) -> u64 {
        0
    }
    fn rate_from(&mut self, from: u64, n: u32) {
        self.send(Step::Call(Between::Rate { from, n }));
    }
    fn gate(&mut self) -> Option<&mut crate::correlate::gate::Gate> {
        None
    }
}

/// The sinks as the reading thread sees them: records never reach it (they are made
/// on the correlating thread); an interval's end is sent on.
struct Ticks<'a>(SyncSender<Step>, &'a AtomicBool);

impl RecordSink for Ticks<'_> {
    fn record(&mut self, _: &dyn IoRecord, _: u32) -> Result<(), SinkError> {
        Ok(())
    }
    fn tick(&mut self, health: &Health) -> Result<(), SinkError> {
        send(&self.0, self.1, Step::Tick(Box::new(health.clone())));
        Ok(())
    }
}
