//! Pictures of a recording: the drawing side (plotters, SVG backend only: no fonts or
//! image codecs to build; the viewer renders the text).
//!
//! Latencies are drawn in µs; every axis says its unit.

use super::{mean, percentile, Data, Kind, Options, PlotError};
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

/// Distinct, print-safe colours (Tableau 10), one per stage or group.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn us(ns: f64) -> f64 {
    ns / 1000.0
}

/// Render `data` as an SVG document.
pub fn svg(data: &Data, opts: &Options, path: &str) -> Result<String, PlotError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (opts.width, opts.height)).into_drawing_area();
        let res = match opts.kind {
            Kind::Breakdown => breakdown(data, opts, &root),
            Kind::Heatmap => heatmap(data, opts, &root),
            Kind::Histogram => histogram(data, opts, &root),
        };
        res.and_then(|_| root.present().map_err(|e| e.to_string()))
            .map_err(|reason| PlotError::Draw {
                path: path.to_string(),
                reason,
            })?;
    }
    Ok(out)
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn title(data: &Data, what: &str) -> String {
    let file = std::path::Path::new(&data.file)
        .file_name()
        .map_or(data.file.clone(), |f| f.to_string_lossy().into_owned());
    format!("{file} ({} profile): {what}", data.schema.profile)
}

/// One bar of the breakdown: its label, its parts `(stage, from, to)` stacked in the
/// order an I/O passes through them, and its totals' marks `(stage, at)` (µs).
pub(crate) type Bar = (String, Vec<(usize, f64, f64)>, Vec<(usize, f64)>);

/// The breakdown's bars (per group, per statistic) and the stage order of its legend:
/// the parts as the column table orders them, then the totals. A total's mark starts
/// where its first part starts, so it falls at the end of its parts when they add up.
pub(crate) fn layout(data: &Data, stats: &[(&str, Option<f64>)]) -> (Vec<usize>, Vec<Bar>) {
    let value = |v: &[u64], q: Option<f64>| match q {
        None => mean(v),
        Some(q) => percentile(v, q).map(|x| x as f64),
    };
    let schema = data.schema;
    let order: Vec<usize> = schema
        .passage()
        .into_iter()
        .chain((0..schema.stages.len()).filter(|&k| data.total[k]))
        .collect();
    let mut bars = Vec::new();
    for g in &data.groups {
        for (stat, q) in stats {
            let mut x = 0.0;
            let mut parts: Vec<(usize, f64, f64)> = Vec::new();
            let mut marks = Vec::new();
            for &k in &order {
                let Some(val) = value(&g.values[k], *q).map(us) else {
                    continue;
                };
                if data.total[k] {
                    let from = schema
                        .leaves(k)
                        .iter()
                        .find_map(|l| parts.iter().find(|p| p.0 == *l).map(|p| p.1))
                        .unwrap_or(0.0);
                    marks.push((k, from + val));
                } else {
                    parts.push((k, x, x + val));
                    x += val;
                }
            }
            bars.push((format!("{} · {stat}", g.name), parts, marks));
        }
    }
    (order, bars)
}

/// One horizontal bar per group and statistic, stacked by the stages that are parts;
/// totals are black marks, so the sum of the parts can be compared with them.
fn breakdown(data: &Data, opts: &Options, root: &Area) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let names = data.stage_names();
    let mut stats: Vec<(&str, Option<f64>)> = vec![("mean", None), ("p50", Some(50.0))];
    if opts.p99 {
        stats.push(("p99", Some(99.0)));
    }
    let (order, bars) = layout(data, &stats);
    let xmax = bars
        .iter()
        .flat_map(|(_, p, m)| p.iter().map(|s| s.2).chain(m.iter().map(|s| s.1)))
        .fold(0.0f64, f64::max)
        .max(0.001)
        // Room on the right for the legend, whichever bar is longest.
        * 1.3;
    let n = bars.len() as i32;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    let label_w = labels.iter().map(|l| l.chars().count()).max().unwrap_or(8) as u32 * 8 + 20;
    let stat_note = if opts.p99 {
        "mean, p50, p99"
    } else {
        "mean and p50"
    };
    let mut chart = ChartBuilder::on(root)
        .caption(
            title(
                data,
                &format!("latency by stage ({stat_note} of each stage)"),
            ),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(label_w.min(opts.width / 2))
        // A segmented 0..k has k + 1 segments (both ends): one per bar.
        .build_cartesian_2d(0f64..xmax, (0..n - 1).into_segmented())
        .map_err(|e| e.to_string())?;
    // Bar 0 at the top: row i is drawn at y = n - 1 - i.
    let y = |i: usize| n - 1 - i as i32;
    chart
        .configure_mesh()
        .disable_y_mesh()
        // A few round values, not the default's ten labels with ten light lines each,
        // most of them over the legend's room past the data.
        .x_labels(6)
        .max_light_lines(1)
        .y_labels(bars.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(r) if (0..n).contains(r) => labels[(n - 1 - r) as usize].clone(),
            _ => String::new(),
        })
        .x_desc("latency (µs)")
        .draw()
        .map_err(|e| e.to_string())?;
    // Colours by place in the stack, so the parts next to each other differ however many
    // stages the table has; each total's mark its own shade.
    const MARKS: [RGBColor; 3] = [BLACK, RGBColor(110, 110, 110), RGBColor(140, 0, 70)];
    let mut totals_seen = 0;
    for (place, &k) in order.iter().enumerate() {
        let name = names[k];
        let c = colour(place);
        if data.total[k] {
            let m = MARKS[totals_seen % MARKS.len()];
            totals_seen += 1;
            let marks: Vec<_> = bars
                .iter()
                .enumerate()
                .flat_map(|(i, b)| b.2.iter().filter(|m| m.0 == k).map(move |m| (i, m.1)))
                .collect();
            if marks.is_empty() {
                continue;
            }
            chart
                .draw_series(marks.into_iter().map(|(i, at)| {
                    PathElement::new(
                        vec![
                            (at, SegmentValue::Exact(y(i))),
                            (at, SegmentValue::Exact(y(i) + 1)),
                        ],
                        m.stroke_width(3),
                    )
                }))
                .map_err(|e| e.to_string())?
                .label(format!("{name} (total)"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x + 5, y - 6), (x + 5, y + 6)], m.stroke_width(3))
                });
            continue;
        }
        let rects: Vec<_> = bars
            .iter()
            .enumerate()
            .flat_map(|(i, b)| b.1.iter().filter(|p| p.0 == k).map(move |p| (i, p.1, p.2)))
            .collect();
        if rects.is_empty() {
            continue;
        }
        chart
            .draw_series(rects.into_iter().map(|(i, from, to)| {
                let mut r = Rectangle::new(
                    [
                        (from, SegmentValue::Exact(y(i))),
                        (to, SegmentValue::Exact(y(i) + 1)),
                    ],
                    c.filled(),
                );
                r.set_margin(3, 3, 0, 0);
                r
            }))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())
}

/// Log-spaced bin edges from `lo` to `hi` (> 0).
fn log_edges(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let (a, b) = (lo.ln(), hi.ln());
    (0..=n)
        .map(|i| (a + (b - a) * i as f64 / n as f64).exp())
        .collect()
}

fn bin(edges: &[f64], v: f64) -> usize {
    edges[1..].partition_point(|&e| e <= v).min(edges.len() - 2)
}

/// The latency range (µs) of a stage over every group, widened when it is one value.
fn range_us(data: &Data, s: usize) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::MAX, 0.0f64);
    for g in &data.groups {
        if let (Some(&a), Some(&b)) = (g.values[s].first(), g.values[s].last()) {
            lo = lo.min(us(a as f64));
            hi = hi.max(us(b as f64));
        }
    }
    let lo = lo.max(0.01);
    let hi = hi.max(lo);
    if hi / lo < 1.5 {
        (lo / 1.5, hi * 1.5)
    } else {
        (lo, hi * 1.01)
    }
}

/// A white → yellow → red → dark ramp for `f` in 0..=1.
fn heat(f: f64) -> RGBColor {
    let f = f.clamp(0.0, 1.0);
    let stops = [
        (255.0, 255.0, 204.0),
        (254.0, 178.0, 76.0),
        (240.0, 59.0, 32.0),
        (128.0, 0.0, 38.0),
    ];
    let x = f * (stops.len() - 1) as f64;
    let i = (x.floor() as usize).min(stops.len() - 2);
    let t = x - i as f64;
    let mix = |a: f64, b: f64| (a + (b - a) * t).round() as u8;
    let (a, b) = (stops[i], stops[i + 1]);
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

/// One panel per group: time bins × log latency bins, coloured by I/O count.
fn heatmap(data: &Data, opts: &Options, root: &Area) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let s = data
        .pick_stage(opts.stage.as_deref())
        .map_err(|e| e.to_string())?;
    let stage = data.stage_names()[s];
    let (lo, hi) = range_us(data, s);
    let tmax = data
        .groups
        .iter()
        .flat_map(|g| g.points.iter().map(|p| p.0))
        .fold(0.0f64, f64::max)
        .max(0.001);
    let (tb, lb) = (80usize, 40usize);
    let ledges = log_edges(lo, hi, lb);
    let (head, body) = root.split_vertically(40);
    head.titled(
        &title(
            data,
            &format!("{stage} latency over time (darker = more I/Os)"),
        ),
        ("sans-serif", 18),
    )
    .map_err(|e| e.to_string())?;
    let panels = body.split_evenly((data.groups.len(), 1));
    for (g, area) in data.groups.iter().zip(&panels) {
        let mut counts = vec![vec![0u32; lb]; tb];
        for (t, vals) in &g.points {
            let Some(v) = vals[s] else { continue };
            let ti = ((t / tmax) * tb as f64).floor() as usize;
            counts[ti.min(tb - 1)][bin(&ledges, us(v as f64).max(lo))] += 1;
        }
        let cmax = counts.iter().flatten().copied().max().unwrap_or(0).max(1);
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "{} ({} I/Os, up to {cmax} per cell)",
                    g.name,
                    g.values[s].len()
                ),
                ("sans-serif", 14),
            )
            .margin(8)
            .x_label_area_size(35)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..tmax, (lo..hi).log_scale())
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .max_light_lines(1)
            .disable_mesh()
            .x_desc("time since the first I/O (s)")
            .y_desc(format!("{stage} (µs)"))
            .draw()
            .map_err(|e| e.to_string())?;
        let w = tmax / tb as f64;
        let cells = counts.iter().enumerate().flat_map(|(ti, col)| {
            let ledges = &ledges;
            col.iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(move |(li, &c)| {
                    let f = (1.0 + c as f64).ln() / (1.0 + cmax as f64).ln();
                    Rectangle::new(
                        [
                            (ti as f64 * w, ledges[li]),
                            ((ti + 1) as f64 * w, ledges[li + 1]),
                        ],
                        heat(0.15 + 0.85 * f).filled(),
                    )
                })
        });
        chart.draw_series(cells).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The distribution (or CDF) of one stage, one line per group, log latency axis.
fn histogram(data: &Data, opts: &Options, root: &Area) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let s = data
        .pick_stage(opts.stage.as_deref())
        .map_err(|e| e.to_string())?;
    let stage = data.stage_names()[s];
    let (lo, hi) = range_us(data, s);
    let nb = 60;
    let edges = log_edges(lo, hi, nb);
    let mut lines = Vec::new();
    for g in &data.groups {
        let v = &g.values[s];
        if v.is_empty() {
            continue;
        }
        let mut counts = vec![0u64; nb];
        for &x in v {
            counts[bin(&edges, us(x as f64).max(lo))] += 1;
        }
        let total = v.len() as f64;
        let mut acc = 0u64;
        let pts: Vec<(f64, f64)> = counts
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                acc += c;
                if opts.cdf {
                    (edges[i + 1], acc as f64 / total)
                } else {
                    ((edges[i] * edges[i + 1]).sqrt(), c as f64 / total)
                }
            })
            .collect();
        lines.push((format!("{} ({} I/Os)", g.name, v.len()), pts));
    }
    let ymax = if opts.cdf {
        1.0
    } else {
        lines
            .iter()
            .flat_map(|l| l.1.iter().map(|p| p.1))
            .fold(0.0f64, f64::max)
            * 1.1
    };
    let what = if opts.cdf {
        "cumulative distribution"
    } else {
        "distribution"
    };
    let mut chart = ChartBuilder::on(root)
        .caption(
            title(data, &format!("{stage} latency {what} per group")),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(60)
        .build_cartesian_2d((lo..hi).log_scale(), 0f64..ymax.max(0.01))
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .max_light_lines(1)
        .x_desc(format!("{stage} latency (µs, log scale)"))
        .y_desc(if opts.cdf {
            "fraction of I/Os at or below"
        } else {
            "fraction of I/Os per bin"
        })
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, pts)) in lines.into_iter().enumerate() {
        let c = colour(i);
        chart
            .draw_series(LineSeries::new(pts, c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(if opts.cdf {
            SeriesLabelPosition::LowerRight
        } else {
            SeriesLabelPosition::UpperRight
        })
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_cover_the_range() {
        let e = log_edges(1.0, 1000.0, 3);
        assert!((e[1] - 10.0).abs() < 1e-9 && (e[3] - 1000.0).abs() < 1e-6);
        assert_eq!(bin(&e, 1.0), 0);
        assert_eq!(bin(&e, 10.5), 1);
        assert_eq!(bin(&e, 1000.0), 2, "the top edge belongs to the last bin");
        assert_eq!(bin(&e, 5000.0), 2);
        assert_eq!(heat(0.0), RGBColor(255, 255, 204));
        assert_eq!(heat(1.0), RGBColor(128, 0, 38));
    }
}
