//! `--max-rate`: keep a running trace under a budget of I/Os per second by changing
//! its in-kernel sampling rate (1 in N, a power of two) while it runs.
//!
//! Every second the controller counts the records of the last second. Over the
//! budget, it raises N at once by the factor that brings the count under it; with room
//! for twice as many for [`CALM_PERIODS`] seconds running (at most [`LOWER_AT`] of the
//! budget after halving N), it halves N. A change is done on the open events with
//! the open events, by enabling and disabling the parts of the sample each event is
//! opened as (see [`Resample`]: the kernel does not replace a perf event's filter),
//! through the correlator's gate (`correlate::gate`), so every row stays one whole
//! I/O:
//! - raising N: the gate stops taking in the I/Os the new rate leaves out at once;
//!   their parts are disabled [`SETTLE`] later, when those taken in before are done;
//! - lowering N: the parts are enabled at once; I/Os the old rate left out are taken
//!   in once they are enabled on every CPU and their old events are through.
//!
//! One change at a time: the next is considered [`SETTLE`] after the last filter of
//! the previous one was set.

use crate::correlate::gate::SETTLE_NS;
use crate::perf::{PerfError, PerfGroup};
use crate::pipeline::Stages;
use crate::profile::sample::MAX_SAMPLE;
use crate::profile::Resample;
use std::time::{Duration, Instant};

/// How long a change waits for I/Os in flight across it (see `correlate::gate`).
pub const SETTLE: Duration = Duration::from_nanos(SETTLE_NS);
/// How often the record rate is measured.
const PERIOD: Duration = Duration::from_secs(1);
/// Seconds in a row with room for twice the records before N is halved.
const CALM_PERIODS: u32 = 3;
/// Halve N only when the rate after halving would be at most this share of the
/// budget, so that a steady load does not flip between two rates.
const LOWER_AT: f64 = 0.7;

enum State {
    Steady,
    /// The gate already keeps 1 in `to`; the filters follow at `apply`.
    Narrowing {
        to: u32,
        apply: Instant,
    },
    /// The last change's filters are set; the next may come at `until`.
    Settling {
        until: Instant,
    },
}

/// The rate controller of one run.
pub struct RateControl {
    max: u64,
    resample: Resample,
    /// Per perf event of the group: the part of the sample it is, `None` if whole.
    levels: Vec<Option<u32>>,
    n: u32,
    state: State,
    period_start: Instant,
    rows_at_start: u64,
    calm: u32,
    changes: u64,
    /// Over budget even at the largest N: said once.
    capped: bool,
}

impl RateControl {
    /// Control a run whose group was opened from `resample`'s parts (`levels`, per
    /// event of the group), starting at 1 in `n`. Marks the parts of `n` on the open
    /// (not yet enabled) group.
    pub fn start(
        max: u64,
        resample: Resample,
        levels: Vec<Option<u32>>,
        n: u32,
        group: &mut PerfGroup,
        pipe: &mut dyn Stages,
    ) -> Result<RateControl, PerfError> {
        set_parts(group, &levels, n)?;
        pipe.rate_from(0, n);
        Ok(RateControl {
            max: max.max(1),
            resample,
            levels,
            n,
            state: State::Steady,
            period_start: Instant::now(),
            rows_at_start: pipe.rows(),
            calm: 0,
            changes: 0,
            capped: false,
        })
    }

    /// 1 in N I/Os traced now.
    pub fn sample(&self) -> u32 {
        self.n
    }

    /// Changes of rate so far.
    pub fn changes(&self) -> u64 {
        self.changes
    }

    /// Whether the budget was passed even at the largest N.
    pub fn capped(&self) -> bool {
        self.capped
    }

    /// Called after every drain round: measure, decide, and carry a change on.
    pub fn step(&mut self, group: &mut PerfGroup, pipe: &mut dyn Stages) -> Result<(), PerfError> {
        let now = Instant::now();
        match self.state {
            State::Narrowing { to, apply } if now >= apply => {
                set_parts(group, &self.levels, to)?;
                let at = group.clock_now()?;
                if let Some(g) = pipe.gate() {
                    g.close(at);
                }
                self.settle(pipe);
            }
            State::Settling { until } if now >= until => {
                self.state = State::Steady;
                self.restart(pipe);
            }
            // A period starts with its first record: time the device was idle before
            // the workload began would thin the first measure, and the first raise
            // would be too small (the next can come only SETTLE × 2 later).
            State::Steady if pipe.rows() == self.rows_at_start => self.restart(pipe),
            State::Steady if now.duration_since(self.period_start) >= PERIOD => {
                let secs = now.duration_since(self.period_start).as_secs_f64();
                let rate = (pipe.rows() - self.rows_at_start) as f64 / secs;
                self.restart(pipe);
                self.decide(rate, group, pipe)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn restart(&mut self, pipe: &dyn Stages) {
        self.period_start = Instant::now();
        self.rows_at_start = pipe.rows();
    }

    fn settle(&mut self, pipe: &dyn Stages) {
        self.state = State::Settling {
            until: Instant::now() + SETTLE,
        };
        self.calm = 0;
        self.restart(pipe);
    }

    /// `rate`: records per second traced over the last period, at 1 in `self.n`.
    fn decide(
        &mut self,
        rate: f64,
        group: &mut PerfGroup,
        pipe: &mut dyn Stages,
    ) -> Result<(), PerfError> {
        let max = self.max as f64;
        if rate > max {
            self.calm = 0;
            let factor = (rate / max).ceil() as u32;
            let to = self
                .n
                .saturating_mul(factor.next_power_of_two())
                .min(MAX_SAMPLE);
            if to == self.n {
                self.capped = true;
                return Ok(());
            }
            self.raise(to, group, pipe)
        } else if self.n > 1 && rate * 2.0 <= max * LOWER_AT {
            self.calm += 1;
            if self.calm < CALM_PERIODS {
                return Ok(());
            }
            self.lower(self.n / 2, group, pipe)
        } else {
            self.calm = 0;
            Ok(())
        }
    }

    /// Fewer I/Os: the gate narrows now, the kernel after [`SETTLE`].
    fn raise(
        &mut self,
        to: u32,
        group: &mut PerfGroup,
        pipe: &mut dyn Stages,
    ) -> Result<(), PerfError> {
        let at = group.clock_now()?;
        let Some(gate) = pipe.gate() else {
            return Ok(());
        };
        gate.open(at, self.resample.mask(self.n), self.resample.mask(to));
        pipe.rate_from(at, to);
        self.n = to;
        self.changes += 1;
        self.state = State::Narrowing {
            to,
            apply: Instant::now() + SETTLE,
        };
        Ok(())
    }

    /// More I/Os: the kernel widens now; the gate takes the new ones in once the
    /// filters are set everywhere and the old events are through.
    fn lower(
        &mut self,
        to: u32,
        group: &mut PerfGroup,
        pipe: &mut dyn Stages,
    ) -> Result<(), PerfError> {
        let from = group.clock_now()?;
        let (old, new) = (self.resample.mask(self.n), self.resample.mask(to));
        let Some(gate) = pipe.gate() else {
            return Ok(());
        };
        gate.open(from, old, new);
        set_parts(group, &self.levels, to)?;
        let at = group.clock_now()?;
        if let Some(g) = pipe.gate() {
            g.close(at);
        }
        pipe.rate_from(at.saturating_add(SETTLE_NS), to);
        self.n = to;
        self.changes += 1;
        self.settle(pipe);
        Ok(())
    }
}

/// Enable the parts of the sample 1 in `n` traces, disable the others.
fn set_parts(group: &mut PerfGroup, levels: &[Option<u32>], n: u32) -> Result<(), PerfError> {
    for (i, level) in levels.iter().enumerate() {
        if let Some(k) = level {
            group.set_active(i, Resample::traced(*k, n))?;
        }
    }
    Ok(())
}
