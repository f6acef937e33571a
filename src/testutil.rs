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

/// A captured tracefs tree under `tracefs/` that has every one of `events`
/// (`system/event` paths), preferring the first in name order.
pub(crate) fn captured_tracefs(events: &[&str], what: &str) -> Tracefs {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tracefs");
    let mut dirs: Vec<_> = std::fs::read_dir(&root)
        .map(|rd| rd.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    dirs.sort();
    let dir = dirs
        .into_iter()
        .find(|d| {
            events
                .iter()
                .all(|e| d.join("events").join(e).join("format").is_file())
        })
        .unwrap_or_else(|| panic!("no captured formats with {what} under {}", root.display()));
    Tracefs::at(&dir).unwrap()
}

/// The cells of a record after its two time columns, as the CSV writes them.
pub(crate) fn cells(r: &dyn crate::record::IoRecord) -> Vec<String> {
    let n = r.schema().columns.len();
    (2..n).map(|i| r.value(i).to_text()).collect()
}

/// The record's stat group labels.
pub(crate) fn labels(r: &dyn crate::record::IoRecord) -> Vec<String> {
    r.schema()
        .labels
        .iter()
        .map(|&i| r.value(i).to_text())
        .collect()
}
