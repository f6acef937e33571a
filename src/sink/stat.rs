//! Stat sink: latency histograms per group and stage, printed as tables.
//!
//! hdrhistogram (3 significant digits) rather than sorting: memory per histogram is fixed
//! whatever the I/O count, and percentiles are read in constant time.

use super::{Health, SinkError};
use crate::record::{IoRecord, Row, RowError, Schema, Status};
use hdrhistogram::Histogram;
use std::collections::HashMap;
use std::fmt::Write as _;

/// Latencies above this (100 s) are clamped into the top bucket.
const MAX_NS: u64 = 100_000_000_000;

struct Group {
    labels: Vec<String>,
    stages: Vec<Histogram<u32>>,
    ios: u64,
    incomplete: u64,
    errors: u64,
}

/// Histograms for one period (an interval, or the whole run), one group per distinct
/// set of label values (the schema's `Label` columns).
pub struct StatTable {
    schema: &'static Schema,
    groups: Vec<Group>,
    /// The labels themselves are the key (no hash stands in for them), each as
    /// `<length>:<text>` so no two label lists share a key; a lookup borrows the
    /// rendered key and only a new group allocates.
    index: HashMap<String, usize>,
    key: String,
    label: String,
}

impl StatTable {
    pub fn new(schema: &'static Schema) -> StatTable {
        StatTable {
            schema,
            groups: Vec::new(),
            index: HashMap::new(),
            key: String::new(),
            label: String::new(),
        }
    }

    fn push_label(&mut self, text: &str) {
        crate::record::push_u64(&mut self.key, text.len() as u64);
        self.key.push(':');
        self.key.push_str(text);
    }

    pub fn add(&mut self, r: &dyn IoRecord) {
        self.key.clear();
        for &i in &self.schema.labels {
            let mut label = std::mem::take(&mut self.label);
            label.clear();
            r.value(i).write_text(&mut label);
            self.push_label(&label);
            self.label = label;
        }
        let g = self.group(|| {
            r.schema()
                .labels
                .iter()
                .map(|&i| r.value(i).to_text())
                .collect()
        });
        let g = &mut self.groups[g];
        Self::count(g, r.status());
        for (h, &i) in g.stages.iter_mut().zip(&self.schema.stages) {
            if let Some(v) = r.value(i).as_ns() {
                h.saturating_record(v.min(MAX_NS));
            }
        }
    }

    /// Add a row read back from a file.
    pub fn add_row(&mut self, row: &Row<'_>) -> Result<(), RowError> {
        let status = row.status()?;
        let mut stages = Vec::with_capacity(self.schema.stages.len());
        for k in 0..self.schema.stages.len() {
            stages.push(row.stage(k)?);
        }
        self.key.clear();
        for &i in &self.schema.labels {
            self.push_label(row.cells.get(i).copied().unwrap_or(""));
        }
        let g = self.group(|| {
            row.schema
                .labels
                .iter()
                .map(|&i| row.cells.get(i).copied().unwrap_or("").to_string())
                .collect()
        });
        let g = &mut self.groups[g];
        Self::count(g, status);
        for (h, v) in g.stages.iter_mut().zip(stages) {
            if let Some(v) = v {
                h.saturating_record(v.min(MAX_NS));
            }
        }
        Ok(())
    }

    fn count(g: &mut Group, status: Status) {
        g.ios += 1;
        match status {
            Status::Ok => {}
            Status::Error => g.errors += 1,
            Status::Incomplete => g.incomplete += 1,
        }
    }

    /// The group of `self.key`, made on first sight with `labels()`.
    fn group(&mut self, labels: impl FnOnce() -> Vec<String>) -> usize {
        if let Some(&g) = self.index.get(self.key.as_str()) {
            return g;
        }
        let stages = (0..self.schema.stages.len())
            .map(|_| {
                // The bounds are constants that hdrhistogram accepts; a failure here
                // would be a programming error caught by every test.
                Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid histogram bounds")
            })
            .collect();
        self.groups.push(Group {
            labels: labels(),
            stages,
            ios: 0,
            incomplete: 0,
            errors: 0,
        });
        let g = self.groups.len() - 1;
        self.index.insert(self.key.clone(), g);
        g
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn clear(&mut self) {
        self.groups.clear();
        self.index.clear();
    }

    /// I/Os counted in the group whose labels are `labels`.
    pub fn ios(&self, labels: &[&str]) -> u64 {
        self.groups
            .iter()
            .filter(|g| {
                g.labels
                    .iter()
                    .map(String::as_str)
                    .eq(labels.iter().copied())
            })
            .map(|g| g.ios)
            .sum()
    }

    /// The table: one row per group and stage, latencies in microseconds.
    pub fn render(&self) -> String {
        let mut order: Vec<&Group> = self.groups.iter().collect();
        order.sort_by(|a, b| a.labels.cmp(&b.labels));
        let mut heads: Vec<String> = self
            .schema
            .label_names()
            .map(|c| c.to_uppercase())
            .collect();
        heads.extend(
            [
                "STAGE", "COUNT", "MEAN_us", "P50_us", "P90_us", "P99_us", "P99.9_us", "MAX_us",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        let stage_names: Vec<&str> = self.schema.stage_names().collect();
        let mut rows: Vec<Vec<String>> = Vec::new();
        for g in order {
            let mut note = format!("{} I/Os", g.ios);
            if g.errors > 0 {
                let _ = write!(note, ", {} errors", g.errors);
            }
            if g.incomplete > 0 {
                let _ = write!(note, ", {} incomplete", g.incomplete);
            }
            for (i, h) in g.stages.iter().enumerate() {
                let mut row = if i == 0 {
                    g.labels.clone()
                } else {
                    vec![String::new(); g.labels.len()]
                };
                row.push(stage_names[i].to_string());
                row.push(h.len().to_string());
                if h.is_empty() {
                    row.extend(std::iter::repeat_n("-".to_string(), 6));
                } else {
                    row.push(us(h.mean()));
                    for q in [50.0, 90.0, 99.0, 99.9] {
                        row.push(us(h.value_at_percentile(q) as f64));
                    }
                    row.push(us(h.max() as f64));
                }
                if i == 0 {
                    row.push(note.clone());
                }
                rows.push(row);
            }
        }
        table(&heads, &rows)
    }
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

fn table(heads: &[String], rows: &[Vec<String>]) -> String {
    let cols = heads.len();
    let mut w: Vec<usize> = heads.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(cols) {
            w[i] = w[i].max(c.len());
        }
    }
    let mut s = String::new();
    let line = |s: &mut String, cells: &[String]| {
        for (i, c) in cells.iter().enumerate() {
            if i >= cols {
                let _ = write!(s, "  {c}");
            } else if i < heads.len() - 7 {
                let _ = write!(s, "{c:<width$}  ", width = w[i]);
            } else {
                let _ = write!(s, "{c:>width$}  ", width = w[i]);
            }
        }
        while s.ends_with(' ') {
            s.pop();
        }
        s.push('\n');
    };
    line(&mut s, heads);
    for r in rows {
        line(&mut s, r);
    }
    s
}

/// The stat sink: an interval table and a whole-run table.
pub struct StatSink {
    interval: StatTable,
    total: StatTable,
    out: Box<dyn std::io::Write>,
    started: std::time::Instant,
}

impl StatSink {
    pub fn new(schema: &'static Schema, out: Box<dyn std::io::Write>) -> StatSink {
        StatSink {
            interval: StatTable::new(schema),
            total: StatTable::new(schema),
            out,
            started: std::time::Instant::now(),
        }
    }

    pub fn record(&mut self, r: &dyn IoRecord) {
        self.interval.add(r);
        self.total.add(r);
    }

    /// Print and reset the interval table.
    pub fn tick(&mut self, health: &Health) -> Result<(), SinkError> {
        let mut s = format!(
            "--- {:.1}s  {}\n",
            self.started.elapsed().as_secs_f64(),
            health.line()
        );
        if self.interval.is_empty() {
            s.push_str("(no I/O completed in this interval)\n");
        } else {
            s.push_str(&self.interval.render());
        }
        s.push('\n');
        self.interval.clear();
        self.write(&s)
    }

    pub fn finish(&mut self, header: &str, health: &Health) -> Result<(), SinkError> {
        let s = summary(&self.total, header, health);
        self.write(&s)
    }

    fn write(&mut self, s: &str) -> Result<(), SinkError> {
        let map = |source| SinkError::Write {
            what: "the stat table".into(),
            source,
        };
        self.out.write_all(s.as_bytes()).map_err(map)?;
        self.out.flush().map_err(map)
    }

    pub fn total(&self) -> &StatTable {
        &self.total
    }
}

/// The final summary block shared by `stat` and `report`.
pub fn summary(table: &StatTable, header: &str, health: &Health) -> String {
    let mut s = format!("=== {header}  {}\n", health.line());
    if table.is_empty() {
        s.push_str("(no I/O recorded)\n");
    } else {
        s.push_str(&table.render());
    }
    s
}

impl crate::pipeline::RecordSink for StatSink {
    fn record(&mut self, r: &dyn IoRecord) -> Result<(), SinkError> {
        StatSink::record(self, r);
        Ok(())
    }

    fn tick(&mut self, health: &Health) -> Result<(), SinkError> {
        StatSink::tick(self, health)
    }
}
