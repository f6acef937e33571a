//! `merge`: join a host-side and a target-side recording of a profile whose I/O spans
//! two machines (the profile does the pairing, see `Profile::merge`).

use super::args::MergeArgs;
use anyhow::{bail, Context, Result};
use ntprof_perf::profile::{self, Profile, Recording};
use ntprof_perf::sink::csv::CsvSink;
use ntprof_perf::sink::input::Input;
use ntprof_perf::sink::time::WallClock;
use std::path::Path;

pub fn merge(a: &MergeArgs) -> Result<i32> {
    let (p, host) = read(&a.host, None)?;
    let (_, target) = read(&a.target, Some(p))?;
    let Some(merged) = p.merge(&[host, target], a.max_skew_ms.saturating_mul(1_000_000)) else {
        bail!(
            "the {} profile records I/O of one machine: there is nothing to merge",
            p.name()
        );
    };
    let merged = merged?;
    let mut out = CsvSink::create(a.output.as_deref(), p.schema(), WallClock::default())?;
    for (clock, rec) in &merged.rows {
        out.record_with_clock(rec.as_ref(), *clock)?;
    }
    out.finish()?;
    ntprof_perf::say!("ntprof-perf: merge: {}", merged.summary);
    if let Some(w) = merged.warning {
        ntprof_perf::say!("ntprof-perf: warning: {w}");
    }
    Ok(0)
}

/// Every row of a recording; its profile is recognised by the header (and must be
/// `same` when given).
fn read(
    path: &Path,
    same: Option<&'static dyn Profile>,
) -> Result<(&'static dyn Profile, Recording)> {
    let name = path.display().to_string();
    let mut input = Input::open(path)?;
    let p = Some(input.recognise()?)
        .filter(|p| p.merge(&[], 0).is_some())
        .with_context(|| {
            let two: Vec<&str> = profile::all()
                .iter()
                .filter(|p| p.merge(&[], 0).is_some())
                .map(|p| p.name())
                .collect();
            format!(
                "{name}: not a recording of a profile that merges two machines ({})",
                two.join(", ")
            )
        })?;
    if let Some(s) = same {
        if s.name() != p.name() {
            bail!(
                "{name}: a {} recording, the other is {}",
                p.name(),
                s.name()
            );
        }
    }
    let mut rows = Vec::new();
    let mut cells = Vec::new();
    while let Some(at) = input.next_row(&mut cells)? {
        rows.push((at, std::mem::take(&mut cells)));
    }
    Ok((p, Recording { name, rows }))
}
