//! Stat sink: latency histograms per group and stage, printed as tables.
//!
//! hdrhistogram (3 significant digits) rather than sorting: memory per histogram is fixed
//! whatever the I/O count, and percentiles are read in constant time.
//!
//! Two renderings of the same tables: text for people (µs) and JSON lines for machines
//! (ns, one object per interval and one for the summary, as `biolatpcts -j` feeds
//! dashboards). Both show the percentiles of one [`Percentiles`] list.

use super::{Health, SinkError};
use crate::correlate::FxMap;
use crate::record::{label_key, IoRecord, Row, RowError, Schema, Status, Value};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value as Json};
use std::fmt::Write as _;

/// Latencies above this (100 s) are clamped into the top bucket.
const MAX_NS: u64 = 100_000_000_000;

/// Which percentiles the tables and JSON show, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub struct Percentiles(Vec<f64>);

/// A `--percentiles` list that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PercentileError {
    #[error("`{0}`: a percentile is a number above 0 and at most 100")]
    Bad(String),
    #[error("no percentile given")]
    Empty,
}

impl Percentiles {
    /// `50,90,99,99.9`: each above 0 and at most 100.
    pub fn parse(s: &str) -> Result<Percentiles, PercentileError> {
        let mut v = Vec::new();
        for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match p.parse::<f64>() {
                Ok(q) if q > 0.0 && q <= 100.0 => v.push(q),
                _ => return Err(PercentileError::Bad(p.to_string())),
            }
        }
        if v.is_empty() {
            return Err(PercentileError::Empty);
        }
        Ok(Percentiles(v))
    }

    pub fn values(&self) -> &[f64] {
        &self.0
    }

    /// `50`, `99.9`: how a percentile is named in headers and JSON keys (the shortest
    /// text that reads back as the same number).
    pub fn name(p: f64) -> String {
        p.to_string()
    }
}

impl Default for Percentiles {
    /// p50, p90, p99, p99.9.
    fn default() -> Self {
        Percentiles(vec![50.0, 90.0, 99.0, 99.9])
    }
}

struct Group {
    labels: Vec<String>,
    /// The labels as the table's index keys them.
    key: Vec<u8>,
    /// Per stage, each traced I/O counted for the I/Os its sampling rate stands for:
    /// when `--max-rate` changes the rate mid-run, an I/O traced at 1 in 64 weighs 64
    /// times one traced at 1 in 1, or the percentiles would be those of the busy
    /// second before the change, not of the run.
    stages: Vec<Histogram<u32>>,
    /// Per stage, the traced I/Os that have it (the COUNT column).
    counts: Vec<u64>,
    ios: u64,
    /// I/Os the sampled ones stand for: the sum of their sampling rates (1 in N), and
    /// the sum of N(N-1), the variance of that estimate (each I/O in the sample with
    /// probability 1/N, independently).
    estimated: u64,
    variance: u64,
    incomplete: u64,
    dropped: u64,
    errors: u64,
}

impl Group {
    /// Two standard deviations of `estimated`: the 95% bound of a count scaled from a
    /// sample whose I/Os were each kept with probability 1/N. In-kernel sampling keeps
    /// by sector or command-id bits: a workload whose offsets or ids are not spread
    /// evenly over those bits is off by more (see `--sample`).
    fn error(&self) -> u64 {
        (2.0 * (self.variance as f64).sqrt()).round() as u64
    }
}

/// `a == b` for label keys, word by word: they are a few dozen bytes, and the slice
/// comparison's call into libc's `memcmp` was most of the cost of finding a record's
/// group.
#[inline]
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut wa, mut wb) = (a.chunks_exact(8), b.chunks_exact(8));
    let word = |w: &[u8]| u64::from_ne_bytes(w.try_into().unwrap_or([0; 8]));
    if !(&mut wa).zip(&mut wb).all(|(x, y)| word(x) == word(y)) {
        return false;
    }
    let (ra, rb) = (wa.remainder(), wb.remainder());
    ra.iter().zip(rb).all(|(x, y)| x == y)
}

/// Histograms for one period (an interval, or the whole run), one group per distinct
/// set of label values (the schema's `Label` columns).
pub struct StatTable {
    schema: &'static Schema,
    groups: Vec<Group>,
    /// The labels themselves are the key (no hash stands in for them; see
    /// [`label_key`]). A lookup borrows the rendered key and only a new group
    /// allocates.
    index: FxMap<Vec<u8>, usize>,
    key: Vec<u8>,
    /// The record's stage latencies, in stage order (scratch for [`StatTable::add`]).
    ns: Vec<Option<u64>>,
    /// The group the previous record went to, and its key: consecutive records are
    /// mostly of one group, found without hashing.
    last: Option<usize>,
}

impl StatTable {
    pub fn new(schema: &'static Schema) -> StatTable {
        StatTable {
            schema,
            groups: Vec::new(),
            index: FxMap::default(),
            key: Vec::new(),
            ns: Vec::new(),
            last: None,
        }
    }

    pub fn add(&mut self, r: &dyn IoRecord, sample: u32) {
        self.key.clear();
        self.ns.clear();
        r.stat_cells(&mut self.key, &mut self.ns);
        let g = self.group(|| {
            r.schema()
                .labels
                .iter()
                .map(|&i| r.value(i).to_text())
                .collect()
        });
        let g = &mut self.groups[g];
        Self::count(g, r.status());
        let n = u64::from(sample.max(1));
        g.estimated += n - 1;
        g.variance += n * (n - 1);
        let weight = u32::try_from(n).unwrap_or(u32::MAX);
        for ((h, c), &v) in g.stages.iter_mut().zip(&mut g.counts).zip(&self.ns) {
            if let Some(v) = v {
                h.saturating_record_n(v.min(MAX_NS), weight);
                *c += 1;
            }
        }
    }

    /// Add every group of `other` (a table of the same schema) into this one.
    pub fn absorb(&mut self, other: &StatTable) {
        for og in &other.groups {
            self.key.clear();
            self.key.extend_from_slice(&og.key);
            let g = self.group(|| og.labels.clone());
            let g = &mut self.groups[g];
            for (h, oh) in g.stages.iter_mut().zip(&og.stages) {
                // Same bounds on both sides, so no value is out of range; counts
                // saturate.
                let _ = h.add(oh);
            }
            for (c, oc) in g.counts.iter_mut().zip(&og.counts) {
                *c += oc;
            }
            g.ios += og.ios;
            g.estimated += og.estimated;
            g.variance += og.variance;
            g.incomplete += og.incomplete;
            g.dropped += og.dropped;
            g.errors += og.errors;
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
            let cell = row.cells.get(i).copied().unwrap_or("");
            label_key(&mut self.key, &Value::Str(cell));
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
        for ((h, c), v) in g.stages.iter_mut().zip(&mut g.counts).zip(stages) {
            if let Some(v) = v {
                h.saturating_record(v.min(MAX_NS));
                *c += 1;
            }
        }
        Ok(())
    }

    fn count(g: &mut Group, status: Status) {
        g.ios += 1;
        g.estimated += 1;
        match status {
            Status::Ok => {}
            Status::Error => g.errors += 1,
            Status::Incomplete => g.incomplete += 1,
            Status::Dropped => g.dropped += 1,
        }
    }

    /// The group of `self.key`, made on first sight with `labels()`.
    fn group(&mut self, labels: impl FnOnce() -> Vec<String>) -> usize {
        if let Some(g) = self.last.filter(|&g| same(&self.groups[g].key, &self.key)) {
            return g;
        }
        if let Some(&g) = self.index.get(&self.key) {
            self.last = Some(g);
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
            key: self.key.clone(),
            counts: vec![0; self.schema.stages.len()],
            stages,
            ios: 0,
            estimated: 0,
            variance: 0,
            incomplete: 0,
            dropped: 0,
            errors: 0,
        });
        let g = self.groups.len() - 1;
        self.index.insert(self.key.clone(), g);
        self.last = Some(g);
        g
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    pub fn clear(&mut self) {
        self.groups.clear();
        self.index.clear();
        self.last = None;
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

    /// Groups in label order: the same order in every rendering.
    fn sorted(&self) -> Vec<&Group> {
        let mut order: Vec<&Group> = self.groups.iter().collect();
        order.sort_by(|a, b| a.labels.cmp(&b.labels));
        order
    }

    /// The table: one row per group and stage, latencies in microseconds.
    pub fn render(&self, pcts: &Percentiles) -> String {
        let order = self.sorted();
        let mut heads: Vec<String> = self
            .schema
            .label_names()
            .map(|c| c.to_uppercase())
            .collect();
        // Everything up to STAGE is text (left-aligned), the rest numbers.
        let left = heads.len() + 1;
        heads.extend(["STAGE", "COUNT", "MEAN_us"].iter().map(|s| s.to_string()));
        heads.extend(
            pcts.values()
                .iter()
                .map(|&p| format!("P{}_us", Percentiles::name(p))),
        );
        heads.push("MAX_us".to_string());
        let stage_names: Vec<&str> = self.schema.stage_names().collect();
        let mut rows: Vec<Vec<String>> = Vec::new();
        for g in order {
            let mut note = format!("{} I/Os", g.ios);
            if g.estimated != g.ios {
                let _ = write!(
                    note,
                    " sampled, ≈{} in all (±{}, 95%)",
                    g.estimated,
                    g.error()
                );
            }
            if g.errors > 0 {
                let _ = write!(note, ", {} errors", g.errors);
            }
            if g.incomplete > 0 {
                let _ = write!(note, ", {} incomplete", g.incomplete);
            }
            if g.dropped > 0 {
                let _ = write!(note, ", {} dropped", g.dropped);
            }
            for (i, h) in g.stages.iter().enumerate() {
                let mut row = if i == 0 {
                    g.labels.clone()
                } else {
                    vec![String::new(); g.labels.len()]
                };
                row.push(stage_names[i].to_string());
                row.push(g.counts[i].to_string());
                if h.is_empty() {
                    row.extend(std::iter::repeat_n(
                        "-".to_string(),
                        pcts.values().len() + 2,
                    ));
                } else {
                    row.push(us(h.mean()));
                    for &q in pcts.values() {
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
        table(&heads, left, &rows)
    }

    /// The groups as JSON (latencies in ns): `[{"labels": {"device": "loop0", …},
    /// "ios": 3, "errors": 0, "incomplete": 0, "stages": [{"stage": "d2c", "count": 3,
    /// "mean_ns": …, "percentiles_ns": {"50": …, …}, "max_ns": …}, …]}, …]`.
    /// A stage with no value in the period has count 0 and null latencies.
    pub fn json(&self, pcts: &Percentiles) -> Json {
        let stage_names: Vec<&str> = self.schema.stage_names().collect();
        let label_names: Vec<&str> = self.schema.label_names().collect();
        let groups = self.sorted().into_iter().map(|g| {
            let labels: Map<String, Json> = label_names
                .iter()
                .zip(&g.labels)
                .map(|(k, v)| (k.to_string(), Json::from(v.as_str())))
                .collect();
            let stages = g.stages.iter().zip(&g.counts).zip(&stage_names).map(|((h, count), name)| {
                let (mean, max, ps) = if h.is_empty() {
                    (Json::Null, Json::Null, Json::Null)
                } else {
                    let ps: Map<String, Json> = pcts
                        .values()
                        .iter()
                        .map(|&q| (Percentiles::name(q), h.value_at_percentile(q).into()))
                        .collect();
                    // 0.1 ns is finer than the histogram's 3 digits already.
                    let mean = (h.mean() * 10.0).round() / 10.0;
                    (mean.into(), h.max().into(), ps.into())
                };
                json!({"stage": name, "count": count, "mean_ns": mean,
                       "percentiles_ns": ps, "max_ns": max})
            });
            json!({"labels": labels, "ios": g.ios, "ios_estimated": g.estimated,
                   "ios_estimated_error": g.error(), "errors": g.errors,
                   "incomplete": g.incomplete, "dropped": g.dropped, "stages": stages.collect::<Vec<_>>()})
        });
        Json::Array(groups.collect())
    }
}

/// One JSON line: what the run counted so far (`health`) and the groups of `table`.
/// Without `health` (a report of a file, which cannot know what the kernel dropped)
/// the counters are null, never a made-up 0.
pub fn json_line(
    kind: &str,
    elapsed_s: f64,
    profile: &str,
    table: &StatTable,
    health: Option<&Health>,
    pcts: &Percentiles,
) -> String {
    let mut m = Map::new();
    m.insert("type".into(), kind.into());
    m.insert(
        "elapsed_s".into(),
        ((elapsed_s * 1000.0).round() / 1000.0).into(),
    );
    m.insert("profile".into(), profile.into());
    // A file cannot know what the kernel dropped: the same keys, each null.
    let counters = health.map_or_else(
        || {
            let mut m = Health::default().json();
            m.values_mut().for_each(|v| *v = Json::Null);
            m
        },
        Health::json,
    );
    m.extend(counters);
    m.insert("groups".into(), table.json(pcts));
    let v = Json::Object(m);
    let mut s = v.to_string();
    s.push('\n');
    s
}

fn us(ns: f64) -> String {
    format!("{:.1}", ns / 1000.0)
}

/// Columns before `left` are left-aligned, the others right-aligned; cells past the
/// headers (the group's note) follow as they are.
fn table(heads: &[String], left: usize, rows: &[Vec<String>]) -> String {
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
            } else if i < left {
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

/// How `stat` prints.
#[derive(Debug, Clone, Default)]
pub struct StatFormat {
    /// JSON lines instead of text tables.
    pub json: bool,
    pub percentiles: Percentiles,
    /// Interval tables are printed (`tick` is called): the end of the run then prints
    /// the last, partial interval before the summary, so every I/O is in one interval.
    pub intervals: bool,
}

/// The stat sink: an interval table and a whole-run table. Records go to the interval
/// table only; the whole-run table takes its groups in at the end of each interval
/// and of the run, so each record is rendered into a key and histograms once.
pub struct StatSink {
    interval: StatTable,
    total: StatTable,
    out: Box<dyn std::io::Write>,
    started: std::time::Instant,
    format: StatFormat,
}

impl StatSink {
    pub fn new(
        schema: &'static Schema,
        out: Box<dyn std::io::Write>,
        format: StatFormat,
    ) -> StatSink {
        StatSink {
            interval: StatTable::new(schema),
            total: StatTable::new(schema),
            out,
            started: std::time::Instant::now(),
            format,
        }
    }

    pub fn record(&mut self, r: &dyn IoRecord, sample: u32) {
        self.interval.add(r, sample);
    }

    /// Print and reset the interval table.
    pub fn tick(&mut self, health: &Health) -> Result<(), SinkError> {
        let elapsed = self.started.elapsed().as_secs_f64();
        let pcts = &self.format.percentiles;
        let s = if self.format.json {
            let profile = self.interval.schema.profile;
            json_line(
                "interval",
                elapsed,
                profile,
                &self.interval,
                Some(health),
                pcts,
            )
        } else {
            let mut s = format!("--- {elapsed:.1}s  {}\n", health.line());
            if self.interval.is_empty() {
                s.push_str("(no I/O completed in this interval)\n");
            } else {
                s.push_str(&self.interval.render(pcts));
            }
            s.push('\n');
            s
        };
        self.total.absorb(&self.interval);
        self.interval.clear();
        self.write(&s)
    }

    pub fn finish(&mut self, header: &str, health: &Health) -> Result<(), SinkError> {
        if self.format.intervals && !self.interval.is_empty() {
            self.tick(health)?;
        }
        self.total.absorb(&self.interval);
        self.interval.clear();
        let pcts = &self.format.percentiles;
        let s = if self.format.json {
            let elapsed = self.started.elapsed().as_secs_f64();
            let profile = self.total.schema.profile;
            json_line("summary", elapsed, profile, &self.total, Some(health), pcts)
        } else {
            summary(&self.total, header, health, pcts)
        };
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
}

/// The final summary block shared by `stat` and `report`.
pub fn summary(table: &StatTable, header: &str, health: &Health, pcts: &Percentiles) -> String {
    let mut s = format!("=== {header}  {}\n", health.line());
    if table.is_empty() {
        s.push_str("(no I/O recorded)\n");
    } else {
        s.push_str(&table.render(pcts));
    }
    s
}

impl crate::pipeline::RecordSink for StatSink {
    fn record(&mut self, r: &dyn IoRecord, sample: u32) -> Result<(), SinkError> {
        StatSink::record(self, r, sample);
        Ok(())
    }

    fn tick(&mut self, health: &Health) -> Result<(), SinkError> {
        StatSink::tick(self, health)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Tabled;
    use crate::sink::testrec::{Wide, T};

    fn table() -> StatTable {
        let mut t = StatTable::new(T::table());
        for i in 1..=100u64 {
            t.add(&T::new(i, "write", Some(i * 1000), Some(-1)), 1);
        }
        t.add(&T::new(0, "read\"x", Some(5000), None), 1);
        t
    }

    /// `stat_cells` unrolls the column table: what it gives must be what the schema's
    /// label and stage lists give through `value(i)`, column by column, for tables
    /// wider than the unrolling too.
    #[test]
    fn stat_cells_are_the_schemas_labels_and_stages() {
        fn by_schema(r: &dyn IoRecord) -> (Vec<u8>, Vec<Option<u64>>) {
            let s = r.schema();
            let mut key = Vec::new();
            for &i in &s.labels {
                let start = key.len();
                r.value(i).write_bytes(&mut key);
                let len = (key.len() - start) as u32;
                key.extend_from_slice(&len.to_le_bytes());
            }
            let ns = s.stages.iter().map(|&i| r.value(i).as_ns()).collect();
            (key, ns)
        }
        fn unrolled(r: &dyn IoRecord) -> (Vec<u8>, Vec<Option<u64>>) {
            let (mut key, mut ns) = (Vec::new(), Vec::new());
            r.stat_cells(&mut key, &mut ns);
            (key, ns)
        }
        assert_eq!(Wide::table().labels.len(), 8);
        assert_eq!(Wide::table().stages.len(), 16);
        let r = Wide(1000);
        assert_eq!(unrolled(&r), by_schema(&r));
        let rows = [
            T::new(1, "read", Some(5), Some(-1)),
            T::new(2, "write", None, Some(9)),
            T::new(3, "", Some(0), None),
        ];
        for r in &rows {
            assert_eq!(unrolled(r), by_schema(r), "{r:?}");
        }
    }

    #[test]
    fn label_keys_compare_by_every_byte() {
        let key: Vec<u8> = (0u8..23).collect();
        for len in 0..key.len() {
            assert!(same(&key[..len], &key[..len]));
            assert!(!same(&key[..len], &key[..len + 1]), "length {len}");
            for at in 0..len {
                let mut other = key[..len].to_vec();
                other[at] ^= 0x40;
                assert!(!same(&key[..len], &other), "byte {at} of {len}");
            }
        }
    }

    #[test]
    fn percentiles_parse_and_refuse() {
        let p = Percentiles::parse("50, 99.99,100").unwrap();
        assert_eq!(p.values(), [50.0, 99.99, 100.0]);
        assert_eq!(Percentiles::name(99.9), "99.9");
        assert_eq!(Percentiles::name(50.0), "50");
        for bad in ["0", "101", "x", "-5", "NaN", "50,,inf"] {
            assert!(Percentiles::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Percentiles::parse(" , "), Err(PercentileError::Empty));
    }

    #[test]
    fn the_table_shows_the_chosen_percentiles() {
        let p = Percentiles::parse("50,99.99").unwrap();
        let text = table().render(&p);
        let head = text.lines().next().unwrap();
        assert_eq!(
            head.split_whitespace().collect::<Vec<_>>(),
            [
                "DEVICE",
                "OP",
                "STAGE",
                "COUNT",
                "MEAN_us",
                "P50_us",
                "P99.99_us",
                "MAX_us"
            ]
        );
        // write: a = 1..100 µs; p50 = 50 µs, max = 100 µs; b is always negative.
        let a = text.lines().find(|l| l.contains("write")).unwrap();
        let cols: Vec<&str> = a.split_whitespace().collect();
        assert_eq!(
            &cols[..8],
            ["loop9", "write", "a", "100", "50.5", "50.0", "100.0", "100.0"]
        );
        let b = text.lines().nth(2).unwrap();
        assert_eq!(
            b.split_whitespace().collect::<Vec<_>>(),
            ["b", "0", "-", "-", "-", "-"]
        );
    }

    /// A run whose rate changed: 900 I/Os of 10 µs traced 1 in 1 before the change,
    /// 100 of 100 µs traced 1 in 64 after it. The run had 900 + 6400 I/Os, most of
    /// them 100 µs: p50 is 100 µs, though most traced I/Os were 10 µs.
    #[test]
    fn percentiles_weigh_each_io_by_the_ios_its_rate_stands_for() {
        let mut t = StatTable::new(T::table());
        for i in 0..1000 {
            let (lat, n) = if i < 900 { (10_000, 1) } else { (100_000, 64) };
            t.add(&T::new(i, "read", Some(lat), None), n);
        }
        let v = t.json(&Percentiles::default());
        let a = &v[0]["stages"][0];
        assert_eq!(a["count"], 1000, "{a}");
        let p50 = a["percentiles_ns"]["50"].as_u64().unwrap();
        assert!((99_000..=101_000).contains(&p50), "{a}");
        assert_eq!(v[0]["ios_estimated"], 900 + 6400, "{v}");
    }

    /// Records go to the interval table only; the summary takes every interval in,
    /// the partial last one included, with or without interval tables printed.
    #[test]
    fn the_summary_holds_every_interval() {
        #[derive(Clone, Default)]
        struct Buf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        for intervals in [true, false] {
            let buf = Buf::default();
            let format = StatFormat {
                json: true,
                percentiles: Percentiles::default(),
                intervals,
            };
            let mut sink = StatSink::new(T::table(), Box::new(buf.clone()), format);
            let h = Health::default();
            for i in 0..10 {
                sink.record(&T::new(i, "read", Some(1000), None), 1);
            }
            sink.tick(&h).unwrap();
            for i in 0..5 {
                sink.record(&T::new(i, "read", Some(3000), None), 2);
            }
            for i in 0..3 {
                sink.record(&T::new(i, "write", Some(7000), Some(-1)), 1);
            }
            sink.finish("x", &h).unwrap();
            let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
            let summary: Json = serde_json::from_str(text.lines().last().unwrap()).unwrap();
            assert_eq!(summary["type"], "summary", "{text}");
            let group = |op: &str| {
                summary["groups"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|g| g["labels"]["op"] == op)
                    .unwrap_or_else(|| panic!("{op}: {text}"))
                    .clone()
            };
            let read = group("read");
            assert_eq!(
                (read["ios"].as_u64(), read["ios_estimated"].as_u64()),
                (Some(15), Some(20))
            );
            assert_eq!(read["stages"][0]["count"], 15);
            // 10 of 1 µs, and 5 of 3 µs weighing 2 each: p50 is 1 µs, p90 3 µs.
            let p50 = read["stages"][0]["percentiles_ns"]["50"].as_u64().unwrap();
            assert!((990..=1010).contains(&p50), "{read}");
            let p90 = read["stages"][0]["percentiles_ns"]["90"].as_u64().unwrap();
            assert!((2990..=3010).contains(&p90), "{read}");
            assert_eq!(group("write")["ios"], 3);
            let lines = text.lines().count();
            assert_eq!(lines, if intervals { 3 } else { 2 }, "{text}");
        }
    }

    /// Label texts are keyed with their lengths: ("ab", "c") and ("a", "bc") are two
    /// groups.
    #[test]
    fn label_keys_do_not_run_together() {
        let mut t = StatTable::new(T::table());
        let mut a = T::new(0, "c", Some(1), None);
        a.dev = "ab";
        let mut b = T::new(0, "bc", Some(1), None);
        b.dev = "a";
        t.add(&a, 1);
        t.add(&b, 1);
        t.add(&a, 1);
        assert_eq!(t.ios(&["ab", "c"]), 2);
        assert_eq!(t.ios(&["a", "bc"]), 1);
    }

    #[test]
    fn json_lines_carry_groups_stages_and_counters() {
        let p = Percentiles::default();
        let mut h = Health {
            samples: 7,
            ..Health::default()
        };
        h.set_losses(vec![(0, 0), (1, 3)], vec![(0, 5), (1, 0)]);
        h.counters.unmatched = 2;
        let line = json_line("summary", 1.23456, "sinktest", &table(), Some(&h), &p);
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
        let v: Json = serde_json::from_str(&line).unwrap();
        assert_eq!(v["type"], "summary");
        assert_eq!(v["elapsed_s"], 1.235);
        assert_eq!(
            (v["lost"].clone(), v["lost_per_cpu"]["1"].clone()),
            (3.into(), 3.into())
        );
        assert_eq!(
            (v["dropped"].clone(), v["dropped_per_cpu"].clone()),
            (5.into(), serde_json::json!({"0": 5}))
        );
        // Every counter the exit line prints is in the JSON too.
        for key in [
            "merged",
            "preflushes",
            "postflushes",
            "lost_ios",
            "cut",
            "throttled",
            "unthrottled",
            "other_records",
            "duplicates",
            "uncounted",
            "late",
            "bad_records",
        ] {
            assert!(v.get(key).is_some(), "no {key} in {v}");
        }
        assert_eq!(v["unmatched"], 2);
        assert_eq!(v["incomplete"], 0);
        let groups = v["groups"].as_array().unwrap();
        assert_eq!(groups.len(), 2);
        // Sorted by labels; the quote in a label is escaped and read back.
        assert_eq!(groups[0]["labels"]["op"], "read\"x");
        let w = &groups[1];
        assert_eq!(w["labels"]["device"], "loop9");
        assert_eq!(w["ios"], 100);
        let a = &w["stages"][0];
        assert_eq!(
            (a["stage"].as_str(), a["count"].as_u64()),
            (Some("a"), Some(100))
        );
        assert_eq!(a["percentiles_ns"]["50"], 50_015);
        assert_eq!(a["percentiles_ns"]["99.9"], 100_031);
        assert_eq!(a["max_ns"], 100_031);
        let b = &w["stages"][1];
        assert_eq!(b["count"], 0);
        let file = json_line("summary", 0.0, "sinktest", &table(), None, &p);
        let v: Json = serde_json::from_str(&file).unwrap();
        assert!(
            v["lost"].is_null() && v["unmatched"].is_null() && v["dropped"].is_null(),
            "{v}"
        );
        assert!(b["mean_ns"].is_null() && b["percentiles_ns"].is_null());
    }
}
