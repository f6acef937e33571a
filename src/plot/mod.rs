//! Pictures of a recording (`ntprof-perf plot`): the data side. A recording (CSV or
//! Parquet) is read through its column table into groups (the `Label` columns) of I/Os
//! with their stage latencies and start times; [`draw`] turns that into SVG.
//!
//! Nothing here knows a profile: groups, stages and which stages are totals come from
//! the column table.

pub mod draw;

use crate::record::{Role, Row, RowError, Schema};
use crate::sink::input::Input;
use crate::sink::time::parse_utc;
use crate::sink::SinkError;

/// The picture to draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// One bar per group, stacked by stage: mean and p50 (and p99 on request).
    Breakdown,
    /// Time on x, latency on a log y axis, colour by count; one panel per group.
    Heatmap,
    /// Latency distribution per group (or its CDF), log latency axis.
    Histogram,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub kind: Kind,
    /// The stage shown by heatmap and histogram (name with or without `_ns`); default:
    /// the top total the column table declares (the slowest stage when it has none).
    pub stage: Option<String>,
    /// Breakdown: add p99 bars.
    pub p99: bool,
    /// Histogram: cumulative distribution instead.
    pub cdf: bool,
    pub width: u32,
    pub height: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error(transparent)]
    Input(#[from] SinkError),
    #[error("{file} {at}: {source}")]
    Row {
        file: String,
        at: String,
        source: RowError,
    },
    #[error("{file}: no I/O with a latency to draw")]
    Empty { file: String },
    #[error("no stage `{stage}`; stages: {known}")]
    UnknownStage { stage: String, known: String },
    #[error("drawing {path}: {reason}")]
    Draw { path: String, reason: String },
}

/// The I/Os of one group.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// The label values joined with spaces (`loop0 write`).
    pub name: String,
    /// Per stage, every non-negative value seen (unsorted until [`Data::load`] ends,
    /// sorted after).
    pub values: Vec<Vec<u64>>,
    /// (start, value of each stage) per I/O: seconds since the first I/O of the file.
    pub points: Vec<(f64, Vec<Option<u64>>)>,
}

/// A recording read for plotting.
pub struct Data {
    pub schema: &'static Schema,
    pub file: String,
    pub groups: Vec<Group>,
    /// Per stage: true when it is a total of the others (see [`Data::totals`]).
    pub total: Vec<bool>,
}

impl Data {
    pub fn load(path: &std::path::Path) -> Result<Data, PlotError> {
        let file = path.display().to_string();
        let mut input = Input::open(path)?;
        let p = input.recognise()?;
        let schema = p.schema();
        let start_col = schema
            .columns
            .iter()
            .position(|c| c.role == Role::StartTime);
        let n = schema.stages.len();
        let mut groups: Vec<Group> = Vec::new();
        let mut index = std::collections::HashMap::new();
        let mut starts: Vec<(usize, Option<i128>)> = Vec::new();
        let mut cells = Vec::new();
        while let Some(at) = input.next_row(&mut cells)? {
            let refs: Vec<&str> = cells.iter().map(String::as_str).collect();
            let row = Row {
                schema,
                cells: &refs,
            };
            let err = |source| PlotError::Row {
                file: file.clone(),
                at: format!("{} {at}", input.unit()),
                source,
            };
            row.status().map_err(err)?;
            let mut vals = Vec::with_capacity(n);
            for k in 0..n {
                vals.push(row.stage(k).map_err(err)?);
            }
            let name: Vec<&str> = schema
                .labels
                .iter()
                .map(|&i| {
                    refs.get(i)
                        .copied()
                        .filter(|s| !s.is_empty())
                        .unwrap_or("-")
                })
                .collect();
            let name = name.join(" ");
            let g = *index.entry(name.clone()).or_insert_with(|| {
                groups.push(Group {
                    name,
                    values: vec![Vec::new(); n],
                    points: Vec::new(),
                });
                groups.len() - 1
            });
            for (k, v) in vals.iter().enumerate() {
                if let Some(v) = v {
                    groups[g].values[k].push(*v);
                }
            }
            let start = start_col
                .and_then(|i| refs.get(i))
                .and_then(|s| parse_utc(s));
            starts.push((g, start));
            groups[g].points.push((0.0, vals));
        }
        // Times relative to the first I/O of the file (rows are in completion order).
        let t0 = starts.iter().filter_map(|s| s.1).min().unwrap_or(0);
        let mut next = vec![0usize; groups.len()];
        for (g, s) in starts {
            let t = s.map_or(0.0, |s| (s - t0) as f64 / 1e9);
            groups[g].points[next[g]].0 = t;
            next[g] += 1;
        }
        groups.retain(|g| g.values.iter().any(|v| !v.is_empty()));
        if groups.is_empty() {
            return Err(PlotError::Empty { file });
        }
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        for g in &mut groups {
            for v in &mut g.values {
                v.sort_unstable();
            }
        }
        let mut d = Data {
            schema,
            file,
            groups,
            total: Vec::new(),
        };
        d.total = d.totals();
        Ok(d)
    }

    pub fn stage_names(&self) -> Vec<&'static str> {
        self.schema.stage_names().collect()
    }

    /// Which stages are totals (the column table's [`Role::Total`]), drawn as a mark
    /// over their stacked parts rather than as a part.
    pub fn totals(&self) -> Vec<bool> {
        (0..self.schema.stages.len())
            .map(|k| self.schema.is_total(k))
            .collect()
    }

    /// The stage index for `--stage` (with or without `_ns`), or the first top total
    /// with data (see [`Schema::top_totals`]).
    pub fn pick_stage(&self, want: Option<&str>) -> Result<usize, PlotError> {
        let names = self.stage_names();
        if let Some(w) = want {
            let w = w.trim_end_matches("_ns");
            return names
                .iter()
                .position(|n| *n == w)
                .ok_or_else(|| PlotError::UnknownStage {
                    stage: w.to_string(),
                    known: names.join(", "),
                });
        }
        let mean = |k: usize| {
            let (s, n) = self.groups.iter().fold((0f64, 0usize), |(s, n), g| {
                (
                    s + g.values[k].iter().map(|&v| v as f64).sum::<f64>(),
                    n + g.values[k].len(),
                )
            });
            if n == 0 {
                0.0
            } else {
                s / n as f64
            }
        };
        // The whole I/O: the first declared top total with data, else the slowest stage.
        let has_data = |k: usize| self.groups.iter().any(|g| !g.values[k].is_empty());
        if let Some(k) = self.schema.top_totals().into_iter().find(|&k| has_data(k)) {
            return Ok(k);
        }
        Ok((0..names.len())
            .max_by(|&a, &b| mean(a).total_cmp(&mean(b)))
            .unwrap_or(0))
    }
}

/// Mean of sorted values (`None` when empty).
pub fn mean(v: &[u64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64)
}

/// The `q`-th percentile (0–100) of sorted values, nearest rank.
pub fn percentile(v: &[u64], q: f64) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((q / 100.0) * v.len() as f64).ceil() as usize;
    v.get(rank.clamp(1, v.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(mean(&[1, 2]), Some(1.5));
    }

    /// For every profile, on I/Os whose stages add up: the parts are stacked in the
    /// order the column table gives, each declared total is a mark (and nothing else
    /// is), and each mark falls where its own parts end.
    #[test]
    fn every_profile_marks_its_declared_totals_at_the_end_of_their_parts() {
        for p in crate::profile::all() {
            let schema = p.schema();
            let n = schema.stages.len();
            let mut values = vec![Vec::new(); n];
            for i in 0..20u64 {
                let mut v = vec![0u64; n];
                for k in schema.passage() {
                    v[k] = 1000 * (k as u64 + 1) + 37 * i;
                }
                for k in (0..n).filter(|&k| schema.is_total(k)) {
                    v[k] = schema.leaves(k).iter().map(|&l| v[l]).sum();
                }
                for k in 0..n {
                    values[k].push(v[k]);
                }
            }
            let mut d = Data {
                schema,
                file: "t".into(),
                groups: vec![Group {
                    name: "g".into(),
                    values,
                    points: Vec::new(),
                }],
                total: Vec::new(),
            };
            d.total = d.totals();
            let (order, bars) = draw::layout(&d, &[("mean", None), ("p50", Some(50.0))]);
            let passage = schema.passage();
            assert_eq!(order[..passage.len()], passage[..], "{}", p.name());
            for (label, parts, marks) in &bars {
                let stacked: Vec<usize> = parts.iter().map(|x| x.0).collect();
                assert_eq!(stacked, passage, "{}: {label}", p.name());
                let marked: Vec<usize> = marks.iter().map(|m| m.0).collect();
                let declared: Vec<usize> = (0..n).filter(|&k| schema.is_total(k)).collect();
                assert_eq!(marked, declared, "{}: {label}", p.name());
                for &(k, at) in marks {
                    let last = *schema.leaves(k).last().unwrap();
                    let end = parts.iter().find(|x| x.0 == last).unwrap().2;
                    assert!(
                        (end - at).abs() < 1e-6,
                        "{}: {label}: {} marked at {at}, its parts end at {end}",
                        p.name(),
                        d.stage_names()[k]
                    );
                }
            }
        }
        // The order an nvme-tcp I/O passes through: the target and the network come
        // between the host's submission and its completion.
        let tcp = crate::profile::all()
            .iter()
            .find(|p| p.name() == "nvme-tcp")
            .unwrap();
        let s = tcp.schema();
        let names: Vec<&str> = s
            .passage()
            .iter()
            .map(|&k| s.stage_names().nth(k).unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "blk_submission",
                "nvme_tcp_submission",
                "network_transmission",
                "nstack_submission",
                "nvmet_tcp_submission",
                "target_subsystem",
                "nvmet_tcp_completion",
                "nstack_completion",
                "nvme_tcp_completion",
                "blk_completion"
            ]
        );
    }
}
