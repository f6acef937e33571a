//! `report`: the stat summary of a recording (CSV or Parquet), for any profile
//! (recognised by its header, read through its column table).

use super::args::ReportArgs;
use anyhow::{Context, Result};
use ntprof_perf::record::Row;
use ntprof_perf::sink::input::Input;
use ntprof_perf::sink::stat::{json_line, StatTable};

pub fn report(a: &ReportArgs) -> Result<i32> {
    let imported = super::import::rows_of(&a.file)?;
    let mut input = Input::open(imported.as_ref().map_or(a.file.as_path(), |i| i.path()))?;
    let path = a.file.display().to_string();
    let p = input.recognise()?;
    let schema = p.schema();
    let mut table = StatTable::new(schema);
    let mut rows = 0u64;
    let mut cells = Vec::new();
    while let Some(at) = input.next_row(&mut cells)? {
        let refs: Vec<&str> = cells.iter().map(String::as_str).collect();
        let row = Row {
            schema,
            cells: &refs,
        };
        table
            .add_row(&row)
            .with_context(|| format!("{path} {} {at}", input.unit()))?;
        rows += 1;
    }
    let pcts = &a.show.percentiles;
    if a.show.json {
        super::Out::new().text(&json_line("summary", 0.0, p.name(), &table, None, pcts));
        return Ok(0);
    }
    let mut head = format!("report: {path}, profile {}, {rows} rows", p.name());
    // Parquet files say where they were recorded.
    for (k, v) in input.meta() {
        if let Some(k @ ("host" | "kernel")) = k.strip_prefix("ntprof.") {
            head.push_str(&format!(", {k} {v}"));
        }
    }
    // A file holds rows, not the run's counters: those are on record's exit line (and,
    // for Parquet, in its `ntprof.health` metadata), not zeros here.
    let mut text = format!("=== {head}  (lost and dropped samples: see record's exit line)\n");
    if table.is_empty() {
        text.push_str("(no I/O recorded)\n");
    } else {
        text.push_str(&table.render(pcts));
    }
    super::Out::new().text(&text);
    Ok(0)
}
