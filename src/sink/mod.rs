//! Stage 6: sinks. Records go out as CSV rows or into latency histograms.
//!
//! Sinks stream: nothing is kept per record beyond a histogram bucket, and `finish`
//! returns the flush error so nothing already recorded is lost silently.

pub mod csv;
pub mod input;
pub mod parquet;
pub mod recorder;
pub mod stat;
pub mod time;

#[cfg(test)]
pub(crate) mod testrec;

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

/// What the run lost or found odd so far; printed with every stat table and at exit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Health {
    /// Samples the kernel dropped because a ring was full, per CPU.
    pub lost: Vec<(u32, u64)>,
    pub samples: u64,
    /// Records that could not be parsed or decoded (truncated, unknown layout).
    pub bad_records: u64,
    /// Events that arrived after newer ones had been released (see `order`).
    pub late: u64,
    pub counters: Counters,
    /// I/Os the lost samples cost, as far as the records show (see `pipeline::Loss`).
    pub lost_ios: u64,
}

impl Health {
    pub fn lost_total(&self) -> u64 {
        self.lost.iter().map(|(_, n)| n).sum()
    }

    /// One line: `samples 10 lost 0 unmatched 0 incomplete 0 ...`.
    pub fn line(&self) -> String {
        let mut s = format!("samples {}  lost {}", self.samples, self.lost_total());
        if self.lost_total() > 0 {
            let per: Vec<String> = self
                .lost
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(c, n)| format!("cpu{c}:{n}"))
                .collect();
            s.push_str(&format!(
                " ({}), costing {} I/Os",
                per.join(" "),
                self.lost_ios
            ));
        }
        let c = &self.counters;
        s.push_str(&format!(
            "  unmatched {}  incomplete {}  in-flight {}",
            c.unmatched, c.incomplete, c.in_flight
        ));
        if c.partial > 0 || c.requeued > 0 {
            s.push_str(&format!("  partial {}  requeued {}", c.partial, c.requeued));
        }
        if c.ambiguous > 0 {
            s.push_str(&format!("  ambiguous {}", c.ambiguous));
        }
        if c.merged > 0 {
            s.push_str(&format!("  merged {}", c.merged));
        }
        if self.bad_records > 0 {
            s.push_str(&format!("  bad-records {}", self.bad_records));
        }
        if self.late > 0 {
            s.push_str(&format!("  late {}", self.late));
        }
        s
    }
}
