//! `merge`: join a host-only and a target-only nvme-tcp CSV (see
//! `ntprof_perf::correlate::merge` for how rows are paired).

use super::args::MergeArgs;
use anyhow::{bail, Context, Result};
use ntprof_perf::correlate::merge::{merge as join, Row};
use ntprof_perf::correlate::nvme_tcp::{TcpRecord, INFO};
use ntprof_perf::correlate::{Cell, IoRecord};
use ntprof_perf::sink::csv::open_reader;
use std::io::Write;
use std::path::Path;

pub fn merge(a: &MergeArgs) -> Result<i32> {
    // Open the output first: a bad path fails before any reading.
    let out: Box<dyn Write> = match &a.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    let mut rows = read_rows(&a.host)?;
    rows.extend(read_rows(&a.target)?);
    let (rows, st) = join(rows, a.max_skew_ms.saturating_mul(1_000_000));
    let mut w = csv::Writer::from_writer(out);
    w.write_record(INFO.columns)?;
    let mut cells: Vec<String> = Vec::with_capacity(INFO.columns.len());
    for r in &rows {
        cells.clear();
        cells.push(r.start_time.clone());
        cells.push(r.start_ns.to_string());
        r.rec.cells(&mut |c| {
            cells.push(match c {
                Cell::U64(v) => v.to_string(),
                Cell::I64(v) => v.to_string(),
                Cell::Str(s) => s.to_string(),
                Cell::Empty => String::new(),
            })
        });
        w.write_record(&cells)?;
    }
    w.flush().context("writing the merged CSV")?;
    eprintln!(
        "ntprof-perf: merge: {} host rows, {} target rows, {} paired; {} rows written; host clock − target clock ≈ {} ns ({} of {} round trips agree)",
        st.host_rows,
        st.target_rows,
        st.paired,
        rows.len(),
        st.offset_ns,
        st.agreeing,
        st.considered
    );
    if st.host_rows > 0 && st.target_rows > 0 && st.paired == 0 {
        eprintln!("ntprof-perf: warning: no host row found its target row: were both recorded at the same time, against the same controller (cntlid)?");
    }
    Ok(0)
}

fn read_rows(path: &Path) -> Result<Vec<Row>> {
    let name = path.display().to_string();
    let mut rd = open_reader(path)?;
    let header: Vec<String> = rd
        .headers()
        .with_context(|| format!("{name}: cannot read the header row"))?
        .iter()
        .map(str::to_string)
        .collect();
    if header
        .iter()
        .map(String::as_str)
        .ne(INFO.columns.iter().copied())
    {
        bail!("{name}: not a CSV of `ntprof-perf record --profile nvme-tcp` (header differs)");
    }
    let mut rows = Vec::new();
    for rec in rd.records() {
        let rec = rec.with_context(|| format!("{name}: malformed CSV"))?;
        let line = rec.position().map_or(0, |p| p.line());
        let get = |c: &'static str| {
            INFO.columns
                .iter()
                .position(|x| *x == c)
                .and_then(|i| rec.get(i))
                .unwrap_or("")
                .to_string()
        };
        let start_ns = get("start_ns")
            .parse()
            .with_context(|| format!("{name} line {line}: start_ns is not a number"))?;
        let r = TcpRecord::from_row(&get).with_context(|| format!("{name} line {line}"))?;
        rows.push(Row {
            start_time: get("start_time"),
            start_ns,
            rec: r,
        });
    }
    Ok(rows)
}
