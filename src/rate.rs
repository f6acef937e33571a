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
//!
//! With `--duty ON/PERIOD` ([`Duty`]) the events are also off for most of the time:
//! even an event whose filter drops every hit costs the traced task its trace record
//! and filter test (the overhead example's filter floor), while a disabled one costs
//! a branch. Each PERIOD, I/Os that start in one window of ON seconds are admitted;
//! the events go on [`SETTLE`] before it (so that no I/O seen in it started while they
//! were off) and off [`SETTLE`] after it (so that those it admitted end under them),
//! all through the gate's pauses. The rate for the next window is chosen when one
//! closes, from the records of the window, and a record stands for N × PERIOD / ON
//! I/Os.

use crate::correlate::gate::SETTLE_NS;
use crate::perf::{PerfError, PerfGroup};
use crate::pipeline::Stages;
use crate::profile::sample::MAX_SAMPLE;
use crate::profile::Resample;
use std::time::{Duration, Instant};

/// How long a change waits for I/Os in flight across it (see `correlate::gate`).
pub const SETTLE: Duration = Duration::from_nanos(SETTLE_NS);
const SEC: u64 = 1_000_000_000;
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

/// `--duty ON/PERIOD`: trace the I/Os that start in ON seconds of every PERIOD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Duty {
    on: u64,
    period: u64,
}

impl Duty {
    /// The shortest period: the events are on for [`SETTLE`] on each side of a window,
    /// and off for at least a second.
    pub const fn min_period(on: u64) -> u64 {
        on + 2 * SETTLE_NS.div_ceil(SEC) + 1
    }

    /// `on` of every `period` seconds: `on` ≥ 1, `period` a whole multiple of `on` (so
    /// that a record stands for a whole number of I/Os) and at least
    /// [`Duty::min_period`].
    pub fn new(on: u64, period: u64) -> Result<Duty, String> {
        if on == 0 || period == 0 {
            return Err("ON and PERIOD are whole seconds from 1".into());
        }
        if period % on != 0 {
            return Err(format!(
                "PERIOD {period} must be a whole multiple of ON {on} (each traced I/O then stands for PERIOD/ON I/Os), e.g. {on}/{}",
                Duty::min_period(on).max(period).div_ceil(on) * on
            ));
        }
        if period < Duty::min_period(on) || u32::try_from(period / on).is_err() {
            return Err(format!(
                "PERIOD {period} is too short for ON {on}: the events are on {} s before and after each window, so PERIOD must be at least {} s",
                SETTLE.as_secs(),
                Duty::min_period(on)
            ));
        }
        Ok(Duty { on, period })
    }

    /// The I/Os each traced one stands for by time alone: PERIOD / ON.
    pub fn factor(&self) -> u32 {
        u32::try_from(self.period / self.on).unwrap_or(u32::MAX)
    }
}

impl std::fmt::Display for Duty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.on, self.period)
    }
}

impl std::str::FromStr for Duty {
    type Err = String;
    fn from_str(s: &str) -> Result<Duty, String> {
        let (on, period) = s
            .split_once('/')
            .ok_or_else(|| format!("`{s}`: give ON/PERIOD in seconds, e.g. 3/60"))?;
        let secs = |x: &str| {
            x.trim()
                .parse::<u64>()
                .map_err(|_| format!("`{s}`: ON and PERIOD are whole seconds, e.g. 3/60"))
        };
        Duty::new(secs(on)?, secs(period)?)
    }
}

/// Where a [`Duty`] cycle is (trace-clock nanoseconds).
enum Phase {
    /// Admitting I/Os that start before `until` (the gate pauses there).
    On { until: u64 },
    /// Admission is over; the events go off [`SETTLE`] later, when those admitted
    /// are done.
    Closing { until: u64 },
    /// Events off until [`SETTLE`] before the next window.
    Off,
}

struct Cycle {
    duty: Duty,
    /// Window k is due to start at `grid + k × period`.
    grid: u64,
    k: u64,
    phase: Phase,
    /// Start of the current window's admission.
    admit_from: u64,
    rows_at: u64,
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
    cycle: Option<Cycle>,
}

impl RateControl {
    /// Control a run whose group was opened from `resample`'s parts (`levels`, per
    /// event of the group), starting at 1 in `n`. Marks the parts of `n` on the open
    /// (not yet enabled) group.
    /// With `duty`, window 0 admits from the start for ON seconds.
    pub fn start(
        max: u64,
        resample: Resample,
        levels: Vec<Option<u32>>,
        n: u32,
        duty: Option<Duty>,
        group: &mut PerfGroup,
        pipe: &mut dyn Stages,
    ) -> Result<RateControl, PerfError> {
        set_events(group, &levels, Some(n))?;
        if let Some(g) = pipe.gate() {
            g.set_mask(resample.mask(n));
        }
        let cycle = match duty {
            Some(duty) => {
                let grid = group.clock_now()?;
                let until = grid + duty.on * SEC;
                if let Some(g) = pipe.gate() {
                    g.pause(until);
                }
                Some(Cycle {
                    duty,
                    grid,
                    k: 0,
                    phase: Phase::On { until },
                    admit_from: grid,
                    rows_at: pipe.rows(),
                })
            }
            None => None,
        };
        pipe.rate_from(0, n.saturating_mul(duty.map_or(1, |d| d.factor())));
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
            cycle,
        })
    }

    /// 1 in N I/Os traced now: how many I/Os a record stands for (× PERIOD/ON with
    /// `--duty`).
    pub fn sample(&self) -> u32 {
        self.n
            .saturating_mul(self.cycle.as_ref().map_or(1, |c| c.duty.factor()))
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
        if self.cycle.is_some() {
            return self.step_cycle(group, pipe);
        }
        let now = Instant::now();
        match self.state {
            State::Narrowing { to, apply } if now >= apply => {
                set_events(group, &self.levels, Some(to))?;
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

    /// How long from `clock_now` (the group's clock) until [`step`](Self::step) has
    /// something to do: a `--duty` phase ends, a rate change applies or settles, or a
    /// measure is due. An idle run may sleep that long and no longer.
    pub fn due_in(&self, clock_now: u64) -> Duration {
        let on_clock = |t: u64| Duration::from_nanos(t.saturating_sub(clock_now));
        if let Some(c) = &self.cycle {
            return on_clock(match c.phase {
                Phase::On { until } => until,
                Phase::Closing { until } => until.saturating_add(SETTLE_NS),
                Phase::Off => (c.grid + c.k * c.duty.period * SEC).saturating_sub(SETTLE_NS),
            });
        }
        let due = match self.state {
            State::Narrowing { apply, .. } => apply,
            State::Settling { until } => until,
            State::Steady => self.period_start + PERIOD,
        };
        due.saturating_duration_since(Instant::now())
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
            let to = raised(self.n, rate, max);
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
        set_events(group, &self.levels, Some(to))?;
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

impl RateControl {
    /// A `--duty` run: carry the cycle on (see the module doc).
    fn step_cycle(
        &mut self,
        group: &mut PerfGroup,
        pipe: &mut dyn Stages,
    ) -> Result<(), PerfError> {
        let Some(c) = self.cycle.as_mut() else {
            return Ok(());
        };
        let now = group.clock_now()?;
        match c.phase {
            Phase::On { until } if now >= until => c.phase = Phase::Closing { until },
            Phase::Closing { until } if now >= until.saturating_add(SETTLE_NS) => {
                set_events(group, &self.levels, None)?;
                let secs = until.saturating_sub(c.admit_from) as f64 / SEC as f64;
                let rows = pipe.rows() - c.rows_at;
                c.phase = Phase::Off;
                c.k += 1;
                if rows > 0 && secs > 0.0 {
                    let to = self.next_rate(rows as f64 / secs);
                    if to != self.n {
                        self.n = to;
                        self.changes += 1;
                    }
                }
            }
            Phase::Off => {
                let (period, on_ns) = (c.duty.period * SEC, c.duty.on * SEC);
                let start = c.grid + c.k * period;
                if now.saturating_add(SETTLE_NS) < start {
                    return Ok(());
                }
                set_events(group, &self.levels, Some(self.n))?;
                let on = group.clock_now()?.saturating_add(SETTLE_NS);
                // Late (a stalled reader): the window starts later, as long as ever, and
                // the ones it would overlap are skipped.
                while c.grid + (c.k + 1) * period < on + on_ns {
                    c.k += 1;
                }
                let admit = on.max(c.grid + c.k * period);
                let until = admit + on_ns;
                if let Some(g) = pipe.gate() {
                    g.resume(admit);
                    g.pause(until);
                }
                pipe.rate_from(admit, self.n.saturating_mul(c.duty.factor()));
                c.admit_from = admit;
                c.rows_at = pipe.rows();
                c.phase = Phase::On { until };
            }
            _ => {}
        }
        Ok(())
    }

    /// The rate for the next window (see [`next_window_rate`]).
    fn next_rate(&mut self, rate: f64) -> u32 {
        let (to, capped) = next_window_rate(self.n, self.max, rate);
        self.capped |= capped;
        to
    }
}

/// The rate for the next `--duty` window from `rate`, records per second in the last
/// one at 1 in `n`: the budget `max` is kept at once, and N comes down (several
/// halvings at once: the events were off between, no change is in flight) only as far
/// as the rate stays under [`LOWER_AT`] of it. `true` when over budget even at
/// [`MAX_SAMPLE`].
fn next_window_rate(n: u32, max: u64, rate: f64) -> (u32, bool) {
    let max = max as f64;
    if rate > max {
        let to = raised(n, rate, max);
        return (to, to == n);
    }
    let mut to = n;
    while to > 1 && rate * f64::from(n) / f64::from(to / 2) <= max * LOWER_AT {
        to /= 2;
    }
    (to, false)
}

/// N raised from `n` by the power of two that brings `rate` (records per second at
/// 1 in `n`) under `max`, at most [`MAX_SAMPLE`].
fn raised(n: u32, rate: f64, max: f64) -> u32 {
    n.saturating_mul(((rate / max).ceil() as u32).next_power_of_two())
        .min(MAX_SAMPLE)
}

/// At 1 in `n`: enable the parts of the sample it traces and every event that is not
/// sampled, disable the other parts. `None` (a `--duty` run between windows): every
/// event off.
fn set_events(
    group: &mut PerfGroup,
    levels: &[Option<u32>],
    n: Option<u32>,
) -> Result<(), PerfError> {
    for (i, level) in levels.iter().enumerate() {
        let on = n.is_some_and(|n| level.is_none_or(|k| Resample::traced(k, n)));
        group.set_active(i, on)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duty_is_whole_seconds_a_whole_multiple_long_enough_to_be_off() {
        let d: Duty = "3/60".parse().unwrap();
        assert_eq!(d, Duty { on: 3, period: 60 });
        assert_eq!(d.factor(), 20);
        assert_eq!(d.to_string(), "3/60");
        assert_eq!("1/6".parse::<Duty>().unwrap().factor(), 6);
        for (bad, why) in [
            ("3/40", "whole multiple"),
            ("1/5", "too short"),
            ("0/10", "from 1"),
            ("3", "ON/PERIOD"),
            ("a/10", "whole seconds"),
            ("-1/10", "whole seconds"),
        ] {
            let e = bad.parse::<Duty>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // The example it suggests is valid.
        let e = "3/40".parse::<Duty>().unwrap_err();
        assert!(e.contains("e.g. 3/42"), "{e}");
        assert!("3/42".parse::<Duty>().is_ok());
    }

    #[test]
    fn a_window_rate_keeps_the_budget_at_once_and_comes_down_as_far_as_it_stays_under() {
        // 10 000 records/s at 1 in 1 with a budget of 2000: 1 in 8.
        assert_eq!(next_window_rate(1, 2000, 10_000.0), (8, false));
        // 703/s at 1 in 256 (180k IOPS): 1 in 128 would be 1406 > 0.7 × 2000.
        assert_eq!(next_window_rate(256, 2000, 703.0), (256, false));
        // The load fell 16-fold: five halvings at once, to 1400/s at 1 in 8, exactly
        // 0.7 of the budget; a sixth would pass it.
        assert_eq!(next_window_rate(256, 2000, 43.75), (8, false));
        assert_eq!(next_window_rate(256, 2000, 0.5), (1, false));
        // Over budget at the largest rate: said.
        assert_eq!(next_window_rate(256, 2000, 2500.0), (256, true));
        assert_eq!(next_window_rate(128, 2000, 100_000.0), (256, false));
    }
}
