//! Helpers for tests that need the running kernel.

use crate::tracefs::Tracefs;

/// The live tracefs, or `None` after a loud skip (a failure under
/// `NTPROF_REQUIRE_KERNEL=1`, which CI sets).
pub(crate) fn live_tracefs(test: &str) -> Option<Tracefs> {
    let events = crate::perf::test_kernel_ready()?;
    match events.parent().map(Tracefs::at) {
        Some(Ok(t)) => Some(t),
        _ => {
            crate::perf::kernel_unavailable(&format!("{test}: no tracefs at {}", events.display()));
            None
        }
    }
}
