//! `report`: the stat summary of a recorded CSV, for any profile (recognised by its
//! header, read through its column table).

use super::args::ReportArgs;
use anyhow::{Context, Result};
use ntprof_perf::profile;
use ntprof_perf::record::Row;
use ntprof_perf::sink::csv::open_reader;
use ntprof_perf::sink::stat::{json_line, summary, StatTable};
use ntprof_perf::sink::Health;

pub fn report(a: &ReportArgs) -> Result<i32> {
    let mut rd = open_reader(&a.file)?;
    let path = a.file.display().to_string();
    let header = rd
        .headers()
        .with_context(|| format!("{path}: cannot read the header row"))?
        .clone();
    let cols: Vec<&str> = header.iter().collect();
    let p = profile::by_columns(&cols).with_context(|| {
        format!(
            "{path}: the header `{}` is not that of any ntprof-perf profile; report reads CSVs written by `ntprof-perf record`",
            cols.join(",")
        )
    })?;
    let schema = p.schema();
    let mut table = StatTable::new(schema);
    let mut rows = 0u64;
    for rec in rd.records() {
        let rec = rec.with_context(|| format!("{path}: malformed CSV"))?;
        let line = rec.position().map_or(0, |p| p.line());
        let cells: Vec<&str> = rec.iter().collect();
        let row = Row {
            schema,
            cells: &cells,
        };
        table
            .add_row(&row)
            .with_context(|| format!("{path} line {line}"))?;
        rows += 1;
    }
    let pcts = &a.show.percentiles;
    if a.show.json {
        print!(
            "{}",
            json_line("summary", 0.0, p.name(), &table, None, pcts)
        );
        return Ok(0);
    }
    let head = format!("report: {path}, profile {}, {rows} rows", p.name());
    // A CSV cannot know what the kernel dropped while recording: only row counts here.
    print!(
        "{}",
        summary(&table, &head, &Health::default(), pcts).replacen(
            "samples 0  lost 0  unmatched 0  incomplete 0  in-flight 0",
            "(lost samples are reported by record at exit)",
            1,
        )
    );
    Ok(0)
}
