//! `report`: the stat summary of a recorded CSV.

use super::args::ReportArgs;
use anyhow::{bail, Context, Result};
use ntprof_perf::correlate::{ProfileInfo, Status};
use ntprof_perf::profile;
use ntprof_perf::sink::csv::open_reader;
use ntprof_perf::sink::stat::{summary, StatTable};
use ntprof_perf::sink::Health;
use std::hash::{Hash, Hasher};

pub fn report(a: &ReportArgs) -> Result<i32> {
    let mut rd = open_reader(&a.file)?;
    let path = a.file.display().to_string();
    let header = rd
        .headers()
        .with_context(|| format!("{path}: cannot read the header row"))?
        .clone();
    let cols: Vec<&str> = header.iter().collect();
    let info = detect(&cols).with_context(|| {
        format!(
            "{path}: the header `{}` is not that of any ntprof-perf profile; report reads CSVs written by `ntprof-perf record`",
            cols.join(",")
        )
    })?;
    let pos = |name: &str| cols.iter().position(|c| *c == name);
    let groups: Vec<usize> = info.group_columns.iter().filter_map(|c| pos(c)).collect();
    let stages: Vec<usize> = info.stages.iter().filter_map(|c| pos(c)).collect();
    let status_col = pos("status");
    let mut table = StatTable::new(info);
    let mut rows = 0u64;
    let mut labels = Vec::new();
    let mut values = Vec::new();
    for rec in rd.records() {
        let rec = rec.with_context(|| format!("{path}: malformed CSV"))?;
        let line = rec.position().map_or(0, |p| p.line());
        labels.clear();
        labels.extend(groups.iter().map(|&i| rec.get(i).unwrap_or("").to_string()));
        values.clear();
        for (&i, name) in stages.iter().zip(info.stages) {
            let cell = rec.get(i).unwrap_or("");
            // nvme-tcp's network time can be negative (see its module doc); stat skips
            // such values, and so does report.
            values.push(
                if cell.is_empty() || (cell.starts_with('-') && cell[1..].parse::<u64>().is_ok()) {
                    None
                } else {
                    Some(cell.parse::<u64>().with_context(|| {
                        format!(
                            "{path} line {line}: column {name} holds `{cell}`, not a number of ns"
                        )
                    })?)
                },
            );
        }
        let status = match status_col.and_then(|i| rec.get(i)) {
            Some("error") => Status::Error,
            Some("incomplete") => Status::Incomplete,
            Some("ok") | None => Status::Ok,
            Some(other) => bail!("{path} line {line}: unknown status `{other}`"),
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        labels.hash(&mut h);
        table.add_row(h.finish(), &labels, &values, status);
        rows += 1;
    }
    let head = format!("report: {path}, profile {}, {rows} rows", info.name);
    // A CSV cannot know what the kernel dropped while recording: only row counts here.
    print!(
        "{}",
        summary(&table, &head, &Health::default()).replacen(
            "samples 0  lost 0  unmatched 0  incomplete 0  in-flight 0",
            "(lost samples are reported by record at exit)",
            1,
        )
    );
    Ok(0)
}

/// The profile whose columns the header has, exactly.
fn detect(cols: &[&str]) -> Option<&'static ProfileInfo> {
    profile::all()
        .into_iter()
        .find(|p| p.columns.len() == cols.len() && p.columns.iter().zip(cols).all(|(a, b)| a == b))
}
