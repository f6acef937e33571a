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
//!
//! `--duty` pauses the sample: from [`Gate::pause`] no I/O is admitted, so the events
//! can go off once those admitted before are done, and every event it cannot place
//! until [`Gate::resume`]'s time is explained; I/Os are admitted again from that time,
//! set [`SETTLE_NS`] after the events are back on, so that none seen then started
//! while they were off.

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
    /// A pause: nothing is admitted and every event is explained (a sample value
    /// of 0 passes every mask, so masks cannot say this).
    paused: bool,
}

#[derive(Debug, Default, Clone)]
pub struct Gate {
    windows: Vec<Window>,
    resampled: u64,
    /// The bits the kernel filter tests, as of the last change (0: every I/O).
    mask: u64,
    /// A change or a pause was ever made: the I/Os the kernel filter passed are no
    /// longer all admitted.
    changed: bool,
}

impl Gate {
    /// A change from `old` to `new` (sample masks) begins at `from`; it stays open
    /// until [`Gate::close`].
    pub fn open(&mut self, from: u64, old: u64, new: u64) {
        self.mask = new;
        self.changed = true;
        self.windows.push(Window {
            from,
            until: u64::MAX,
            strict: old | new,
            diff: old ^ new,
            paused: false,
        });
    }

    /// Admit nothing that starts at `from` or later, until [`Gate::resume`].
    pub fn pause(&mut self, from: u64) {
        self.changed = true;
        self.windows.push(Window {
            from,
            until: u64::MAX,
            strict: u64::MAX,
            diff: u64::MAX,
            paused: true,
        });
    }

    /// End the open pause: I/Os are admitted again from `admit`.
    pub fn resume(&mut self, admit: u64) {
        if let Some(w) = self.open_window(true) {
            w.until = admit.saturating_sub(1).max(w.from);
        }
    }

    /// The last filter of the open change was set at `at`.
    pub fn close(&mut self, at: u64) {
        if let Some(w) = self.open_window(false) {
            w.until = at.saturating_add(SETTLE_NS);
        }
    }

    /// The last window not yet given its end: a pause or a change.
    fn open_window(&mut self, paused: bool) -> Option<&mut Window> {
        self.windows
            .iter_mut()
            .rev()
            .find(|w| w.paused == paused && w.until == u64::MAX)
    }

    /// Whether an I/O whose first event is at `t` with sample value `v` is in the
    /// sample. Called in time order.
    #[inline]
    pub fn admits(&mut self, v: u64, t: u64) -> bool {
        self.windows.is_empty() || self.admits_in_window(v, t)
    }

    fn admits_in_window(&mut self, v: u64, t: u64) -> bool {
        self.windows
            .retain(|w| w.until.saturating_add(SETTLE_NS) >= t);
        self.windows
            .iter()
            .all(|w| t < w.from || t > w.until || (!w.paused && v & w.strict == 0))
    }

    /// Whether `t` is within [`SETTLE_NS`] after a window: an I/O seen then may have
    /// started in it, left out, before its first event the correlator can see (a
    /// request inserted in the window and issued after it). A correlator whose I/Os
    /// can start at more than one event leaves out one that seems to start at its
    /// later event then.
    pub fn settling(&self, t: u64) -> bool {
        self.windows
            .iter()
            .any(|w| t > w.until && t <= w.until.saturating_add(SETTLE_NS))
    }

    /// Whether an event at `t` with value `v` that belongs to no I/O in flight is one
    /// a rate change left out (counted in [`Gate::resampled`]).
    pub fn explains(&mut self, v: u64, t: u64) -> bool {
        let hit = self.windows.iter().any(|w| {
            // Events of the I/Os left out come until they end, up to SETTLE_NS
            // after the last of them could start.
            (w.from..=w.until.saturating_add(SETTLE_NS)).contains(&t)
                && (w.paused || v & w.diff != 0)
        });
        self.resampled += u64::from(hit);
        hit
    }

    /// Whether every I/O the kernel filter passed was admitted: no change of rate
    /// or pause was ever made.
    pub fn steady(&self) -> bool {
        !self.changed
    }

    /// Events a rate change left out of the sample (see the module doc), and I/Os
    /// [`Gate::left_out`].
    pub fn resampled(&self) -> u64 {
        self.resampled
    }

    /// The kernel filter tests `mask` (a fixed rate, or where a varying one starts).
    pub fn set_mask(&mut self, mask: u64) {
        self.mask = mask;
    }

    /// Whether the kernel filter keeps the events of an I/O whose sample value became
    /// `v` after it began (a block request whose start a bio merged in front of moved).
    /// While a change is in progress, only if the stricter mask keeps it.
    pub fn keeps(&self, v: u64) -> bool {
        v & self.mask == 0 && self.windows.iter().all(|w| w.paused || v & w.strict == 0)
    }

    /// An I/O begun in the sample whose later events the filter leaves out, or begun
    /// out of it whose later events it keeps, is left out: counted with
    /// [`Gate::resampled`].
    pub fn left_out(&mut self) {
        self.resampled += 1;
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
        // After the window the kernel filter alone decides; the events of I/Os left
        // out just before its end are still explained.
        assert!(g.admits(0b10, 201 + SETTLE_NS));
        assert!(g.settling(201 + SETTLE_NS));
        assert!(g.explains(0b10, 200 + 2 * SETTLE_NS));
        assert!(!g.explains(0b10, 201 + 2 * SETTLE_NS));
        assert!(!g.settling(201 + 2 * SETTLE_NS));
        assert_eq!(g.resampled(), 3);
        assert!(g.admits(0b10, 201 + 2 * SETTLE_NS));
        assert!(g.windows.is_empty());
    }

    #[test]
    fn a_pause_admits_nothing_not_even_value_zero_and_explains_everything() {
        let mut g = Gate::default();
        g.pause(100);
        assert!(g.admits(0, 99));
        assert!(!g.admits(0, 100), "value 0 passes every mask, not a pause");
        assert!(!g.admits(0b1010, 5_000));
        assert!(g.explains(0, 5_000));
        let admit = 10 * SETTLE_NS;
        g.resume(admit);
        // The next pause is known when a window opens.
        g.pause(admit + SETTLE_NS / 2);
        assert!(g.explains(0b1, admit - 1));
        assert!(!g.admits(0, admit - 1));
        assert!(g.admits(0, admit), "admitted again from resume's time");
        assert!(g.settling(admit + 1));
        assert!(g.explains(0b111, admit + 1), "may be an I/O started before");
        assert!(!g.admits(0b111, admit + SETTLE_NS / 2));
        g.resume(admit + 4 * SETTLE_NS);
        assert!(g.admits(0b111, admit + 4 * SETTLE_NS));
        assert!(!g.settling(admit + 5 * SETTLE_NS));
        assert!(
            !g.explains(0b111, admit + 5 * SETTLE_NS),
            "a real unmatched event"
        );
        assert_eq!(g.resampled(), 3);
    }
}
