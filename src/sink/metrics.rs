//! The Prometheus sink of `serve`: per-stage latency histograms and the run's counters,
//! kept in a `prometheus-client` registry that the HTTP threads encode.
//!
//! Labels are the profile's label and place columns (device and operation for block;
//! controller and queue where the profile's table has them, [`crate::record::Role::Place`]), the
//! stage and the profile: bounded, nothing per I/O. Buckets are powers of two of microseconds from
//! 1 µs to 2^24 µs (≈17 s) and +Inf, as ebpf_exporter's exp2 histograms in seconds.
//!
//! A record traced at 1 in N stands for N I/Os: it adds N to its bucket and to
//! `_count`, and N times its latency to `_sum`, so counts and rates read as the whole
//! traffic's while quantiles come from the sampled I/Os.

use crate::record::{IoRecord, Schema};
use crate::sink::{Health, SinkError};
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Bucket upper bounds: 2^0 … 2^24 µs, in seconds.
const BUCKETS: usize = 25;

type Labels = Vec<(String, String)>;

#[derive(Debug, Default)]
struct Buckets {
    counts: [u64; BUCKETS + 1],
    sum: f64,
    count: u64,
}

/// A histogram whose observations carry a weight (the I/Os a sampled record stands
/// for); `prometheus-client`'s own counts one per observation.
#[derive(Debug, Default, Clone)]
pub struct Weighted(Arc<Mutex<Buckets>>);

impl Weighted {
    pub fn observe(&self, ns: u64, weight: u64) {
        let us = ns.div_ceil(1000).max(1);
        // The bucket whose bound 2^k µs is the first at or above the value.
        let k = (64 - (us - 1).leading_zeros()) as usize;
        let mut b = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        b.counts[k.min(BUCKETS)] += weight;
        b.sum += ns as f64 * 1e-9 * weight as f64;
        b.count += weight;
    }
}

impl TypedMetric for Weighted {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Weighted {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, counts) = {
            let b = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            (b.sum, b.count, b.counts)
        };
        let buckets: Vec<(f64, u64)> = counts
            .iter()
            .enumerate()
            .map(|(k, &c)| {
                let le = if k < BUCKETS {
                    (1u64 << k) as f64 * 1e-6
                } else {
                    f64::MAX
                };
                (le, c)
            })
            .collect();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// The run's counters as Prometheus counters, advanced by what changed since the last
/// tick (the run's own counts only grow).
struct Counts {
    family: Family<Labels, Counter>,
    last: HashMap<&'static str, u64>,
}

/// Per label group: a histogram per stage and the I/O counters.
struct Group {
    stages: Vec<Weighted>,
    sampled: Counter,
    estimated: Counter,
}

/// The registry `serve` answers scrapes from, and the sink that fills it.
pub struct MetricsSink {
    schema: &'static Schema,
    latency: Family<Labels, Weighted>,
    ios: Family<Labels, Counter>,
    ios_estimated: Family<Labels, Counter>,
    counts: Counts,
    sample: Gauge,
    groups: HashMap<String, Group>,
    key: String,
    registry: Arc<Registry>,
}

impl MetricsSink {
    pub fn new(schema: &'static Schema) -> MetricsSink {
        let mut r = Registry::with_prefix("ntprof");
        let latency = Family::<Labels, Weighted>::default();
        r.register(
            "latency_seconds",
            "I/O latency per stage, of the I/Os traced, each counted for the I/Os its sampling rate stands for",
            latency.clone(),
        );
        let ios = Family::<Labels, Counter>::default();
        r.register("traced_ios", "I/Os traced (one per record)", ios.clone());
        let ios_estimated = Family::<Labels, Counter>::default();
        r.register(
            "ios_estimated",
            "I/Os estimated from the traced ones and their sampling rates (1 in N each)",
            ios_estimated.clone(),
        );
        let counts = Family::<Labels, Counter>::default();
        r.register(
            "events",
            "the run's counters (kind: samples, lost, dropped, unmatched, incomplete, cut, resampled, bad_records, rate_changes, cpus_offlined, cpus_onlined, cpus_untraced, uncounted); see docs/how-it-works.md",
            counts.clone(),
        );
        let sample = Gauge::default();
        r.register(
            "sample_rate",
            "1 in N I/Os traced now (--max-rate changes it)",
            sample.clone(),
        );
        r.register(
            "build",
            "ntprof-perf's version and profile",
            Info::new(vec![
                ("version".to_string(), env!("CARGO_PKG_VERSION").to_string()),
                ("profile".to_string(), schema.profile.to_string()),
            ]),
        );
        MetricsSink {
            schema,
            latency,
            ios,
            ios_estimated,
            counts: Counts {
                family: counts,
                last: HashMap::new(),
            },
            sample,
            groups: HashMap::new(),
            key: String::new(),
            registry: Arc::new(r),
        }
    }

    /// The registry to encode on scrapes (shared with the HTTP threads).
    pub fn registry(&self) -> Arc<Registry> {
        Arc::clone(&self.registry)
    }

    fn group(&mut self, r: &dyn IoRecord) -> &Group {
        self.key.clear();
        for &i in &self.schema.metric_labels {
            r.value(i).write_text(&mut self.key);
            self.key.push('\0');
        }
        if !self.groups.contains_key(&self.key) {
            let mut labels: Labels = self
                .schema
                .metric_labels
                .iter()
                .map(|&i| {
                    (
                        self.schema.columns[i].name.to_string(),
                        r.value(i).to_text(),
                    )
                })
                .collect();
            labels.push(("profile".into(), self.schema.profile.into()));
            let stages = self
                .schema
                .stage_names()
                .map(|s| {
                    let mut l = labels.clone();
                    l.push(("stage".into(), s.into()));
                    self.latency.get_or_create(&l).clone()
                })
                .collect();
            let g = Group {
                stages,
                sampled: self.ios.get_or_create(&labels).clone(),
                estimated: self.ios_estimated.get_or_create(&labels).clone(),
            };
            self.groups.insert(self.key.clone(), g);
        }
        &self.groups[&self.key]
    }

    pub fn observe(&mut self, r: &dyn IoRecord, sample: u32) {
        let n = u64::from(sample.max(1));
        let schema = self.schema;
        let g = self.group(r);
        g.sampled.inc();
        g.estimated.inc_by(n);
        for (h, &i) in g.stages.iter().zip(&schema.stages) {
            if let Some(v) = r.value(i).as_ns() {
                h.observe(v, n);
            }
        }
    }

    pub fn health(&mut self, h: &Health) {
        self.sample.set(i64::from(h.sample.max(1)));
        let c = &h.counters;
        for (kind, v) in [
            ("samples", h.samples),
            ("lost", h.lost),
            ("dropped", h.dropped),
            ("unmatched", c.unmatched),
            ("incomplete", c.incomplete),
            ("cut", c.cut),
            ("resampled", c.resampled),
            ("bad_records", h.bad_records),
            ("rate_changes", h.rate_changes),
            ("cpus_offlined", h.cpus_offlined),
            ("cpus_onlined", h.cpus_onlined),
            ("cpus_untraced", h.cpus_untraced),
            ("uncounted", h.uncounted),
        ] {
            let last = self.counts.last.entry(kind).or_insert(0);
            let counter = self
                .counts
                .family
                .get_or_create(&vec![("kind".to_string(), kind.to_string())])
                .clone();
            counter.inc_by(v.saturating_sub(*last));
            *last = (*last).max(v);
        }
    }
}

impl crate::pipeline::RecordSink for MetricsSink {
    fn record(&mut self, r: &dyn IoRecord, sample: u32) -> Result<(), SinkError> {
        self.observe(r, sample);
        Ok(())
    }

    fn tick(&mut self, health: &Health) -> Result<(), SinkError> {
        self.health(health);
        Ok(())
    }
}

/// The registry in the OpenMetrics text format.
pub fn openmetrics(registry: &Registry) -> String {
    let mut s = String::new();
    // Writing to a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut s, registry);
    s
}

/// The registry in the Prometheus text format 0.0.4, for scrapers that do not ask
/// for OpenMetrics: the same samples, with counters named by their `_total` series,
/// info metrics as gauges, and no `# UNIT`/`# EOF` lines.
pub fn prometheus_text(registry: &Registry) -> String {
    let om = openmetrics(registry);
    let mut out = String::with_capacity(om.len());
    for line in om.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            match rest.rsplit_once(' ') {
                Some((name, "counter")) => {
                    out.push_str(&format!("# TYPE {name}_total counter\n"));
                }
                Some((name, "info")) => out.push_str(&format!("# TYPE {name}_info gauge\n")),
                _ => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            let suffix = if om.contains(&format!("# TYPE {name} counter")) {
                "_total"
            } else if om.contains(&format!("# TYPE {name} info")) {
                "_info"
            } else {
                ""
            };
            out.push_str(&format!("# HELP {name}{suffix} {help}\n"));
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Tabled;
    use crate::sink::testrec::T;

    #[test]
    fn weighted_records_fill_cumulative_exp2_buckets_in_seconds() {
        let mut m = MetricsSink::new(T::table());
        // 1.5 µs traced 1 in 4, 3 ms traced 1 in 1.
        m.observe(&T::new(0, "read", Some(1500), None), 4);
        m.observe(&T::new(0, "read", Some(3_000_000), None), 1);
        let text = prometheus_text(&m.registry());
        // The value of the one series whose line holds every one of `parts`.
        let value = |parts: &[&str]| {
            let found: Vec<&str> = text
                .lines()
                .filter(|l| parts.iter().all(|p| l.contains(p)))
                .collect();
            assert_eq!(found.len(), 1, "{parts:?} in\n{text}");
            found[0].rsplit_once(' ').unwrap().1.to_string()
        };
        assert!(
            text.contains("# TYPE ntprof_latency_seconds histogram"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE ntprof_traced_ios_total counter"),
            "{text}"
        );
        assert!(!text.contains("# EOF"));
        let bucket = |le: &str| {
            let le = format!("le=\"{le}\"");
            value(&["ntprof_latency_seconds_bucket{", &le, "stage=\"a\""])
        };
        // 1.5 µs is in the 2 µs bucket, 4 times; 3 ms in the 4.096 ms one.
        assert_eq!(bucket("0.000001"), "0");
        assert_eq!(bucket("0.000002"), "4");
        assert_eq!(bucket("0.002048"), "4");
        assert_eq!(bucket("0.004096"), "5");
        assert_eq!(bucket("+Inf"), "5");
        assert_eq!(
            value(&["ntprof_latency_seconds_count{", "stage=\"a\""]),
            "5"
        );
        assert_eq!(value(&["ntprof_ios_estimated_total{"]), "5");
        assert_eq!(value(&["ntprof_traced_ios_total{"]), "2");
        let om = openmetrics(&m.registry());
        assert!(om.ends_with("# EOF\n"), "{om}");
    }
}
