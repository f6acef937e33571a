//! Stage 6: sinks. Records go out as CSV rows or into latency histograms.
//!
//! Sinks stream: nothing is kept per record beyond a histogram bucket, and `finish`
//! returns the flush error so nothing already recorded is lost silently.

pub mod csv;
pub mod input;
pub mod metrics;
pub mod parquet;
pub mod recorder;
pub mod stat;
pub mod time;

#[cfg(test)]
pub(crate) mod testrec;

use crate::correlate::Starts;
use crate::record::Counters;

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot open {}: {source}", path.display())]
    Open {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create output {}: {source}", path.display())]
    Create {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("writing {what}: {source}")]
    Write {
        what: String,
        source: std::io::Error,
    },
    #[error("reading {path}: {source}")]
    Csv {
        path: std::path::PathBuf,
        source: ::csv::Error,
    },
    #[error("{}: compressed with {tool}: decompress it first (`{undo} {}`), then read the result", path.display(), path.display())]
    Compressed {
        path: std::path::PathBuf,
        tool: &'static str,
        undo: &'static str,
    },
    #[error("{}: empty: not even a header line (a recording writes its header first; a perf.data starts with PERFILE2)", path.display())]
    Empty { path: std::path::PathBuf },
    #[error("{}: not a recording: no line ends in its {bytes} bytes (a CSV recording is lines of text, a Parquet one starts with PAR1, a perf.data with PERFILE2)", path.display())]
    NoLine {
        path: std::path::PathBuf,
        bytes: u64,
    },
    #[error("{}: {source}", path.display())]
    NotARecording {
        path: std::path::PathBuf,
        source: crate::profile::RecogniseError,
    },
    #[error("{what}: {source}")]
    Parquet {
        what: String,
        source: ::parquet::errors::ParquetError,
    },
    #[error("{path}: {reason}")]
    BadReport {
        path: std::path::PathBuf,
        reason: String,
    },
}

/// Per-CPU counts, serialised as `{"cpu": n}` with only the CPUs that have some.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PerCpu(pub Vec<(u32, u64)>);

impl PerCpu {
    pub fn total(&self) -> u64 {
        self.0.iter().map(|(_, n)| n).sum()
    }

    /// `cpu0:3 cpu1:5`, the CPUs with a count only.
    pub fn text(&self) -> String {
        let per: Vec<String> = self
            .0
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(c, n)| format!("cpu{c}:{n}"))
            .collect();
        per.join(" ")
    }
}

impl serde::Serialize for PerCpu {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (cpu, n) in self.0.iter().filter(|(_, n)| *n > 0) {
            m.serialize_entry(&cpu.to_string(), n)?;
        }
        m.end()
    }
}

/// What the run lost or found odd so far: printed with every stat table, at exit, in
/// `stat --json` and in the Parquet metadata, all from this one structure.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Health {
    pub samples: u64,
    /// Samples the kernel could not write because a ring was full (`PERF_RECORD_LOST`,
    /// or the event's own lost count), and per CPU.
    pub lost: u64,
    pub lost_per_cpu: PerCpu,
    /// Samples the kernel counted but never wrote, with no LOST record (see
    /// `perf::group`), and per CPU.
    pub dropped: u64,
    pub dropped_per_cpu: PerCpu,
    /// `PERF_RECORD_THROTTLE` records: the kernel stopped sampling for a while (the
    /// samples it did not take are in no count), and `PERF_RECORD_UNTHROTTLE`: it started
    /// again.
    pub throttled: u64,
    pub unthrottled: u64,
    /// Records of a kind ntprof-perf did not ask for.
    pub other_records: u64,
    /// Samples a perf.data holds twice, byte for byte (stock `perf record` can write
    /// part of a ring again): each is decoded once, the copies only counted.
    pub duplicates: u64,
    /// Samples that arrived beyond the kernel's final count of their event and CPU
    /// (live runs): a sample delivered twice, or an event fired that its count missed.
    /// The counts are compared both ways; this side has been 0 in every run checked.
    pub uncounted: u64,
    #[serde(flatten)]
    pub counters: Counters,
    /// I/Os the lost or dropped samples cost, as far as the records show.
    pub lost_ios: u64,
    /// The event whose count says how many I/Os began (see [`Starts`]); `None` when
    /// the profile has none.
    #[serde(skip)]
    pub starts: Option<Starts>,
    /// That event's final count (live runs): with [`Starts::again`] taken off, the
    /// I/Os that began while tracing, whether any of their samples arrived or not.
    #[serde(skip)]
    pub started: Option<u64>,
    /// Records the correlator handed out, whatever became of them in the sinks
    /// (`--min-latency`).
    #[serde(skip)]
    pub records: u64,
    /// Records that could not be parsed or decoded (truncated, unknown layout).
    pub bad_records: u64,
    /// Events that arrived after newer ones had been released (see `order`).
    pub late: u64,
    /// 1 in N I/Os traced now (in-kernel sampling; `--max-rate` changes it while
    /// running); 0 when not known (a file).
    pub sample: u32,
    /// Times `--max-rate` changed the sampling rate.
    pub rate_changes: u64,
    /// CPUs that went offline while tracing (nothing runs there: nothing missed), and
    /// CPUs that came online and were opened then: their events before that (one drain
    /// round at most) were not traced and are in no count.
    pub cpus_offlined: u64,
    pub cpus_onlined: u64,
    /// CPUs that came online and could not be opened (`serve` no longer has the right
    /// to): their I/O is not traced.
    pub cpus_untraced: u64,
    /// Samples held to be correlated after tracing (`--defer`), in `samples` and in no
    /// row yet: the status line says so, not "0 rows written". None are left at the
    /// end, so no output but the status line shows it.
    #[serde(skip_serializing_if = "is_zero")]
    pub held: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Health {
    pub fn set_losses(&mut self, lost: Vec<(u32, u64)>, dropped: Vec<(u32, u64)>) {
        self.lost_per_cpu = PerCpu(lost);
        self.lost = self.lost_per_cpu.total();
        self.dropped_per_cpu = PerCpu(dropped);
        self.dropped = self.dropped_per_cpu.total();
    }

    /// Samples that did not arrive, for whatever reason.
    pub fn missing(&self) -> u64 {
        self.lost + self.dropped
    }

    /// I/Os none of whose events reached the rings, estimated from the lost samples left
    /// after those of the I/Os seen in part, at the samples per I/O of the I/Os seen:
    /// for a profile with no count of the I/Os begun ([`Health::ios_unseen`]), and a
    /// capture. It takes each I/O seen in part to have lost one sample, so the samples
    /// per I/O are those that arrived plus one per I/O seen in part, over the complete
    /// I/Os and those. (Taking the samples less one per I/O seen in part, over the
    /// complete ones alone, counted an I/O seen in part as one sample where it has all
    /// but one: with three per I/O and a third of the I/Os seen in part, 1,404 where
    /// fio's count left 1,628.) An I/O seen in part that lost more than one sample leaves
    /// more to the rest, so with more than two samples per I/O it overstates.
    pub fn whole_ios_lost(&self) -> u64 {
        let complete = (self.records).saturating_sub(self.counters.incomplete + self.counters.cut);
        let ios = complete + self.lost_ios;
        let samples_of_seen = self.samples + self.lost_ios;
        if complete == 0 || self.samples == 0 {
            return 0;
        }
        let rest = self.missing().saturating_sub(self.lost_ios);
        (rest as f64 * ios as f64 / samples_of_seen as f64).round() as u64
    }

    /// I/Os that began while tracing by the kernel's count ([`Starts`]) and are in
    /// no record nor among the unmatched completions: none of their samples arrived,
    /// or only some between their first and their last. `None` when the profile has
    /// no such count, or the run read no counts (a file). Final only once the run has
    /// ended: until then the I/Os in flight are in it.
    pub fn ios_unseen(&self) -> Option<u64> {
        let began = self.started?.saturating_sub(self.starts?.again);
        Some(began.saturating_sub(self.records + self.counters.unmatched))
    }

    /// The counters as JSON object members, in declaration order.
    pub fn json(&self) -> serde_json::Map<String, serde_json::Value> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        }
    }

    /// One line: `samples 10  lost 0  dropped 0  unmatched 0 ...`.
    pub fn line(&self) -> String {
        let mut s = format!("samples {}  lost {}", self.samples, self.lost);
        if self.lost > 0 {
            s.push_str(&format!(" ({})", self.lost_per_cpu.text()));
        }
        s.push_str(&format!("  dropped {}", self.dropped));
        if self.dropped > 0 {
            s.push_str(&format!(" ({})", self.dropped_per_cpu.text()));
        }
        if self.missing() > 0 {
            s.push_str(&format!(", costing {} I/Os", self.lost_ios));
        }
        if self.throttled > 0 || self.unthrottled > 0 {
            s.push_str(&format!(
                "  throttled {}  unthrottled {}",
                self.throttled, self.unthrottled
            ));
        }
        if self.other_records > 0 {
            s.push_str(&format!("  other-records {}", self.other_records));
        }
        if self.duplicates > 0 {
            s.push_str(&format!("  duplicates {}", self.duplicates));
        }
        if self.uncounted > 0 {
            s.push_str(&format!("  uncounted {}", self.uncounted));
        }
        let c = &self.counters;
        s.push_str(&format!(
            "  unmatched {}  incomplete {}  in-flight {}",
            c.unmatched, c.incomplete, c.in_flight
        ));
        if c.cut > 0 {
            s.push_str(&format!("  cut {}", c.cut));
        }
        if c.partial > 0 || c.requeued > 0 {
            s.push_str(&format!("  partial {}  requeued {}", c.partial, c.requeued));
        }
        if c.ambiguous > 0 {
            s.push_str(&format!("  ambiguous {}", c.ambiguous));
        }
        if c.merged > 0 {
            s.push_str(&format!("  merged {}", c.merged));
        }
        if c.preflushes > 0 {
            s.push_str(&format!("  preflushes {}", c.preflushes));
        }
        if c.postflushes > 0 {
            s.push_str(&format!("  postflushes {}", c.postflushes));
        }
        if self.bad_records > 0 {
            s.push_str(&format!("  bad-records {}", self.bad_records));
        }
        if self.cpus_offlined > 0 || self.cpus_onlined > 0 || self.cpus_untraced > 0 {
            s.push_str(&format!(
                "  cpus-offlined {}  cpus-onlined {}",
                self.cpus_offlined, self.cpus_onlined
            ));
        }
        if self.cpus_untraced > 0 {
            s.push_str(&format!("  cpus-untraced {}", self.cpus_untraced));
        }
        if self.late > 0 {
            s.push_str(&format!("  late {}", self.late));
        }
        if self.sample > 1 {
            s.push_str(&format!("  sampled 1 in {}", self.sample));
        }
        if self.rate_changes > 0 {
            s.push_str(&format!("  rate-changes {}", self.rate_changes));
        }
        if c.resampled > 0 {
            s.push_str(&format!("  resampled {}", c.resampled));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The I/Os begun by the kernel's count, less its firings that began no row, the
    /// rows and the unmatched completions; nothing without a count.
    #[test]
    fn ios_unseen_is_the_count_less_what_was_placed() {
        let mut h = Health {
            started: Some(1_000),
            records: 900,
            ..Health::default()
        };
        assert_eq!(h.ios_unseen(), None, "no start event: no count");
        h.starts = Some(Starts {
            event: "block:block_rq_issue",
            again: 4,
        });
        h.counters.unmatched = 6;
        assert_eq!(h.ios_unseen(), Some(90));
        h.records = 2_000;
        assert_eq!(h.ios_unseen(), Some(0), "never below 0");
        h.started = None;
        assert_eq!(h.ios_unseen(), None, "a file: no counts read");
    }

    /// Three samples per I/O: 600 complete (1,800 samples), 300 seen in part with one
    /// lost each (600 samples, 300 lost), 100 lost whole (300 lost). The estimate is
    /// exact when each I/O seen in part lost one sample, and the same at two per I/O
    /// as before (1,404 for 1,628 in a capture whose I/Os a third were seen in part).
    #[test]
    fn whole_ios_lost_counts_the_samples_the_ios_seen_in_part_still_have() {
        let mut h = Health {
            samples: 2_400,
            lost: 600,
            lost_ios: 300,
            records: 900,
            ..Health::default()
        };
        h.counters.cut = 300;
        assert_eq!(h.whole_ios_lost(), 100);
        // Two per I/O: 600 complete (1,200), 300 in part (300, 300 lost), 100 whole (200).
        h.samples = 1_500;
        h.lost = 500;
        assert_eq!(h.whole_ios_lost(), 100);
        // The failing capture's counts: samples 16669, lost 7938, 6564 rows, 2782 cut.
        let h = Health {
            samples: 16_669,
            lost: 7_938,
            lost_ios: 2_782,
            records: 6_564,
            counters: Counters {
                cut: 2_782,
                ..Counters::default()
            },
            ..Health::default()
        };
        let whole = h.whole_ios_lost();
        assert!((1_628..1_800).contains(&whole), "{whole} for fio's 1,628");
        assert_eq!(Health::default().whole_ios_lost(), 0);
    }
}
