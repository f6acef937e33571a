//! Which I/Os stay in the sample while `--max-rate` changes the sampling rate of a
//! running trace.
//!
//! The kernel filter keeps I/Os whose sample value (start sector or command id) has
//! the mask's bits clear. Masks are nested: 1 in 2N keeps a subset of what 1 in N
//! keeps. The filter of every event cannot change at one instant, so an I/O whose
//! value is in the difference of the two masks and whose events straddle the change
//! would come out cut: its start without its end, or its end without its start.
//!
//! The gate makes every row whole. A change opens a window, from before the first
//! filter is changed until [`SETTLE_NS`] after the last: in it, a correlator starts a
//! new I/O only when its value passes the stricter mask ([`Gate::admits`]), and an
//! event it cannot place whose value is in the difference is one of those left out
//! ([`Gate::explains`], counted `resampled`, not `unmatched`). Lowering the rate, the
//! kernel filter is narrowed only [`SETTLE_NS`] after the window opens, so the I/Os
//! admitted before it complete under the wide filter. I/Os slower than that across a
//! change are cut, and counted where any cut I/O is.
//!
//! Outside windows the gate admits everything (the kernel filter decides) and costs
//! one branch per I/O.

/// How long after a filter change events of I/Os started before it may still come:
/// the longest I/O a change keeps whole.
pub const SETTLE_NS: u64 = 2_000_000_000;

#[derive(Debug, Clone, Copy)]
struct Window {
    from: u64,
    until: u64,
    /// The stricter of the two masks: new I/Os in the window must pass it.
    strict: u64,
    /// Bits set in one mask and not the other: values with any of them are the ones
    /// the change takes in or leaves out.
    diff: u64,
}

#[derive(Debug, Default, Clone)]
pub struct Gate {
    windows: Vec<Window>,
    resampled: u64,
}

impl Gate {
    /// A change from `old` to `new` (sample masks) begins at `from`; it stays open
    /// until [`Gate::close`].
    pub fn open(&mut self, from: u64, old: u64, new: u64) {
        self.windows.push(Window {
            from,
            until: u64::MAX,
            strict: old | new,
            diff: old ^ new,
        });
    }

    /// The last filter of the open change was set at `at`.
    pub fn close(&mut self, at: u64) {
        if let Some(w) = self.windows.iter_mut().rev().find(|w| w.until == u64::MAX) {
            w.until = at.saturating_add(SETTLE_NS);
        }
    }

    /// Whether an I/O whose first event is at `t` with sample value `v` is in the
    /// sample. Called in time order.
    #[inline]
    pub fn admits(&mut self, v: u64, t: u64) -> bool {
        self.windows.is_empty() || self.admits_in_window(v, t)
    }

    fn admits_in_window(&mut self, v: u64, t: u64) -> bool {
        self.windows.retain(|w| w.until >= t);
        self.windows.iter().all(|w| t < w.from || v & w.strict == 0)
    }

    /// Whether an event at `t` with value `v` that belongs to no I/O in flight is one
    /// a rate change left out (counted in [`Gate::resampled`]).
    pub fn explains(&mut self, v: u64, t: u64) -> bool {
        let hit = self
            .windows
            .iter()
            .any(|w| (w.from..=w.until).contains(&t) && v & w.diff != 0);
        self.resampled += u64::from(hit);
        hit
    }

    /// Events a rate change left out of the sample (see the module doc).
    pub fn resampled(&self) -> u64 {
        self.resampled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_admits_only_the_stricter_mask_and_explains_the_difference() {
        let mut g = Gate::default();
        assert!(g.admits(0b1, 5));
        // 1 in 2 (bit 0) → 1 in 4 (bits 0, 1) from t = 100.
        g.open(100, 0b01, 0b11);
        assert!(
            g.admits(0b10, 99),
            "started before the change: the old mask"
        );
        assert!(
            !g.admits(0b10, 100),
            "the difference is not taken in the window"
        );
        assert!(g.admits(0b100, 150));
        assert!(g.explains(0b10, 150));
        assert!(
            !g.explains(0b100, 150),
            "in both samples: a real unmatched event"
        );
        g.close(200);
        assert!(g.explains(0b10, 200 + SETTLE_NS));
        assert!(!g.explains(0b10, 201 + SETTLE_NS));
        assert_eq!(g.resampled(), 2);
        // After the window the kernel filter alone decides.
        assert!(g.admits(0b10, 201 + SETTLE_NS));
        assert!(g.windows.is_empty());
    }
}
