//! Pictures of a recording (`ntprof-perf plot`): the data side. A recording (CSV or
//! Parquet) is read through its column table into groups (the `Label` columns) of I/Os
//! with their stage latencies and start times; [`draw`] turns that into SVG.
//!
//! Nothing here knows a profile: groups, stages and which stages are totals come from
//! the column table and the data.

pub mod draw;

use crate::profile;
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
    /// the total (the stage with the largest mean).
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
    #[error("{file}: the header `{header}` is not that of any ntprof-perf profile")]
    NotARecording { file: String, header: String },
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
        let cols: Vec<&str> = input.header().iter().map(String::as_str).collect();
        let p = profile::by_columns(&cols).ok_or_else(|| PlotError::NotARecording {
            file: file.clone(),
            header: cols.join(","),
        })?;
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

    /// Which stages are totals, drawn as a mark over the stacked parts rather than as a
    /// part: a stage named `*total*`, or one that equals the sum of the other non-total
    /// stages of the same I/O (within 1 % + 1 µs) in at least 90 % of the I/Os where
    /// both are known (block's q2c = q2d + d2c), or exactly the sum of some two or more
    /// of them (nvme-tcp's waiting = network + the four target stages: stacking it as
    /// well would count that time twice). Checked on the data, so no profile has to
    /// declare it.
    pub fn totals(&self) -> Vec<bool> {
        let names = self.stage_names();
        let n = names.len();
        let mut total: Vec<bool> = names.iter().map(|n| n.contains("total")).collect();
        // A sample of the I/Os is enough to tell a sum from a coincidence.
        let points: Vec<&Vec<Option<u64>>> = self
            .groups
            .iter()
            .flat_map(|g| g.points.iter().map(|(_, v)| v))
            .take(4000)
            .collect();
        let sums_to = |s: usize, parts: &[usize]| -> bool {
            let (mut seen, mut equal) = (0u64, 0u64);
            for vals in &points {
                let Some(v) = vals[s] else { continue };
                let known: Vec<u64> = parts.iter().filter_map(|&k| vals[k]).collect();
                if known.len() != parts.len() {
                    continue;
                }
                seen += 1;
                // Exactly (stages are differences of the same marks): with a
                // tolerance, small stages would match sums of other small ones.
                let sum: u64 = known.iter().sum();
                if v.abs_diff(sum) <= parts.len() as u64 {
                    equal += 1;
                }
            }
            seen > 0 && equal * 10 >= seen * 9
        };
        for s in 0..n {
            if total[s] {
                continue;
            }
            // Every other part (with the ones that are unknown for an I/O left out).
            let (mut seen, mut equal) = (0u64, 0u64);
            for vals in &points {
                let Some(v) = vals[s] else { continue };
                let parts: Vec<u64> = (0..n)
                    .filter(|&k| k != s && !total[k])
                    .filter_map(|k| vals[k])
                    .collect();
                if parts.is_empty() {
                    continue;
                }
                let sum: u64 = parts.iter().sum();
                seen += 1;
                if v.abs_diff(sum) <= 1000 + v / 100 {
                    equal += 1;
                }
            }
            if seen > 0 && equal * 10 >= seen * 9 {
                total[s] = true;
                continue;
            }
            // Some of them: every subset of two or more (stages are few).
            let others: Vec<usize> = (0..n).filter(|&k| k != s && !total[k]).collect();
            if others.len() > 16 {
                continue;
            }
            for mask in 1u32..(1 << others.len()) {
                if mask.count_ones() < 2 || mask.count_ones() as usize == others.len() {
                    continue;
                }
                let parts: Vec<usize> = (0..others.len())
                    .filter(|b| mask & (1 << b) != 0)
                    .map(|b| others[b])
                    .collect();
                if sums_to(s, &parts) {
                    total[s] = true;
                    break;
                }
            }
        }
        // Everything a total would leave nothing to stack: draw them as parts.
        if total.iter().all(|&t| t) {
            total.iter_mut().for_each(|t| *t = false);
        }
        total
    }

    /// The stage index for `--stage` (with or without `_ns`), or the one with the
    /// largest mean over every I/O (the total, for every profile).
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

    /// nvme-tcp's stages: host_total and target_total by name, waiting because it is the
    /// sum of network and the four target stages; the others are the parts.
    #[test]
    fn sums_of_some_stages_are_totals_not_parts() {
        use crate::profile::nvme_tcp::model::TcpRecord;
        use crate::record::Tabled;
        let schema = TcpRecord::table();
        let names: Vec<&str> = schema.stage_names().collect();
        let at = |n: &str| names.iter().position(|x| *x == n).unwrap();
        let points = (0..50u64)
            .map(|i| {
                let mut v = vec![Some(0u64); names.len()];
                let parts = [
                    ("blk_submission", 1000 + i),
                    ("nvme_tcp_submission", 2000),
                    ("nstack_completion", 3000 + 7 * i),
                    ("nvme_tcp_completion", 400),
                    ("blk_completion", 5000),
                    ("nstack_submission", 6000 + i * i),
                    ("nvmet_tcp_submission", 700),
                    ("target_subsystem", 80_000 + 13 * i),
                    ("nvmet_tcp_completion", 9000),
                    ("network_transmission", 10_000 + 3 * i),
                ];
                for (n, x) in parts {
                    v[at(n)] = Some(x);
                }
                let target: u64 = parts[5..9].iter().map(|p| p.1).sum();
                let waiting = target + parts[9].1;
                v[at("waiting")] = Some(waiting);
                v[at("target_total")] = Some(target);
                let host: u64 = parts[..5].iter().map(|p| p.1).sum::<u64>() + waiting;
                v[at("host_total")] = Some(host);
                (i as f64, v)
            })
            .collect();
        let d = Data {
            schema,
            file: "t".into(),
            groups: vec![Group {
                name: "read".into(),
                values: Vec::new(),
                points,
            }],
            total: Vec::new(),
        };
        let totals: Vec<&str> = d
            .totals()
            .iter()
            .zip(&names)
            .filter(|(t, _)| **t)
            .map(|(_, n)| *n)
            .collect();
        assert_eq!(totals, ["waiting", "host_total", "target_total"]);
    }
}
