//! `record`'s sink: a per-I/O writer (CSV, Parquet) behind the `--min-latency` filter,
//! with the live status line on a terminal.
//!
//! The writers know formats only; what is written, what is counted and what the user
//! sees while a long run goes on are decided here once, for every format.

use super::{Health, SinkError};
use crate::record::{IoRecord, Status};
use std::io::Write;
use std::time::Instant;

/// A per-I/O output format: one row per record, in the order given.
pub trait RowWriter {
    /// One row, of an I/O traced at 1 in `sample`.
    fn write(&mut self, r: &dyn IoRecord, sample: u32) -> Result<(), SinkError>;
    /// Make every row written so far durable in the output (called every second by the
    /// live loop): what a crash can lose is bounded by the time between flushes.
    fn flush(&mut self) -> Result<(), SinkError>;
    /// Flush and close; the error is returned, never swallowed.
    fn finish(&mut self) -> Result<(), SinkError>;
    /// Per output, in the order given: the rows it holds now, whole and readable. Less
    /// than those written while some are buffered, and after a write that failed (a
    /// full disk), which is when it is asked: what the file has is what the user has.
    fn kept(&self) -> Vec<u64>;
    /// The run's counters so far, for a format that keeps them with the rows (Parquet
    /// metadata); the last call before `finish` has the final ones.
    fn health(&mut self, _health: &Health) {}
}

/// The same rows to several writers (`-o io.csv -o io.parquet`): one run, identical rows.
pub struct Tee(pub Vec<Box<dyn RowWriter>>);

impl RowWriter for Tee {
    fn write(&mut self, r: &dyn IoRecord, sample: u32) -> Result<(), SinkError> {
        self.0.iter_mut().try_for_each(|w| w.write(r, sample))
    }
    fn flush(&mut self) -> Result<(), SinkError> {
        self.0.iter_mut().try_for_each(|w| w.flush())
    }
    fn health(&mut self, health: &Health) {
        self.0.iter_mut().for_each(|w| w.health(health))
    }
    fn kept(&self) -> Vec<u64> {
        self.0.iter().flat_map(|w| w.kept()).collect()
    }
    /// Every writer is finished even when one fails; the first error is returned.
    fn finish(&mut self) -> Result<(), SinkError> {
        let mut first = Ok(());
        for w in &mut self.0 {
            let res = w.finish();
            if first.is_ok() {
                first = res;
            }
        }
        first
    }
}

/// The latency `--min-latency` compares with: the record's top total (the column table
/// declares it: `q2c_ns`, `total_ns`, `host_total_ns`…), or, for an I/O whose total is
/// unknown (incomplete, not joined), the longest stage known. `None` when no stage has
/// a value.
pub fn total_ns(r: &dyn IoRecord) -> Option<u64> {
    let schema = r.schema();
    let values: Vec<Option<u64>> = schema.stages.iter().map(|&i| r.value(i).as_ns()).collect();
    schema.whole(&values)
}

/// A `--min-latency` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: give a latency with its unit, e.g. 500us, 2ms, 1.5s (units ns, us, ms, s)")]
pub struct LatencyError(pub String);

/// `2ms`, `500us` (or `µs`), `1.5s`, `250000ns` to ns.
pub fn parse_latency(s: &str) -> Result<u64, LatencyError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| LatencyError(s.to_string()))?;
    let (num, unit) = t.split_at(split);
    let scale = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(LatencyError(s.to_string())),
    };
    match num.parse::<f64>() {
        // Below 2^63 ns (292 years): the f64 → u64 conversion is exact enough and in range.
        Ok(v) if v.is_finite() && v * scale < 9.2e18 => Ok((v * scale).round() as u64),
        _ => Err(LatencyError(s.to_string())),
    }
}

/// Back to the start of the line and erase it.
const ERASE: &str = "\r\x1b[K";

/// One line on a terminal, rewritten in place: rows written, I/Os per second, samples,
/// lost samples, I/Os in flight. Erased at the end, so the exit summary stands alone.
pub struct StatusLine {
    out: Box<dyn Write>,
    last: Option<(Instant, u64)>,
    shown: bool,
}

impl StatusLine {
    /// A status line on standard error when it is a terminal; `None` otherwise (a log
    /// file or a pipe must not fill with carriage returns).
    pub fn on_stderr() -> Option<StatusLine> {
        use std::io::IsTerminal;
        std::io::stderr()
            .is_terminal()
            .then(|| StatusLine::new(Box::new(std::io::stderr()), Instant::now()))
    }

    /// What a message on standard error starts with while a status line may be drawn
    /// there: erase it, else the message runs on from the line's end.
    pub fn erase_on_stderr() -> &'static str {
        use std::io::IsTerminal;
        if std::io::stderr().is_terminal() {
            ERASE
        } else {
            ""
        }
    }

    /// A line whose first rate counts from `start`.
    pub fn new(out: Box<dyn Write>, start: Instant) -> StatusLine {
        StatusLine {
            out,
            last: Some((start, 0)),
            shown: false,
        }
    }

    /// Redraw with the counts now. The rate is over the time since the last update.
    pub fn update(&mut self, now: Instant, written: u64, seen: u64, health: &Health) {
        let rate = match self.last {
            Some((t, n)) if now > t => (seen - n.min(seen)) as f64 / (now - t).as_secs_f64(),
            _ => 0.0,
        };
        self.last = Some((now, seen));
        if health.held > 0 {
            // `--defer`: no row is made until tracing stops.
            let line = format!(
                "ntprof-perf: {} samples held for after tracing  lost {}  dropped {}",
                health.held, health.lost, health.dropped
            );
            self.draw(&line);
            return;
        }
        let rows = if written == seen {
            format!("{written} rows written")
        } else {
            format!("{written} rows written of {seen} I/Os")
        };
        let line = format!(
            "ntprof-perf: {rows}  {rate:.0} I/Os/s  samples {}  lost {}  dropped {}  in-flight {}",
            health.samples, health.lost, health.dropped, health.counters.in_flight
        );
        self.draw(&line);
    }

    /// Draw `line` over the one shown.
    fn draw(&mut self, line: &str) {
        // A status line that cannot be drawn is not worth stopping a recording for.
        let _ = self.out.write_all(ERASE.as_bytes());
        let _ = self.out.write_all(line.as_bytes());
        let _ = self.out.flush();
        self.shown = true;
    }

    /// Erase the line (when one was drawn).
    pub fn clear(&mut self) {
        if self.shown {
            let _ = self.out.write_all(ERASE.as_bytes());
            let _ = self.out.flush();
            self.shown = false;
        }
    }
}

/// Records to a [`RowWriter`], keeping those at or above `min_ns` when given.
pub struct Recorder {
    writer: Box<dyn RowWriter>,
    min_ns: Option<u64>,
    seen: u64,
    written: u64,
    /// Rows written per status, in [`Status::ALL`]'s order.
    statuses: [u64; Status::ALL.len()],
    status: Option<StatusLine>,
}

impl Recorder {
    pub fn new(
        writer: Box<dyn RowWriter>,
        min_ns: Option<u64>,
        status: Option<StatusLine>,
    ) -> Recorder {
        Recorder {
            writer,
            min_ns,
            seen: 0,
            written: 0,
            statuses: [0; Status::ALL.len()],
            status,
        }
    }

    /// Every I/O handed over, written or not.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// What the exit line says of the rows: how many went to `to` (of how many seen,
    /// with `--min-latency`), and by status when not all are `ok`.
    pub fn summary(&self, to: &impl std::fmt::Display) -> String {
        let rows = match self.min_ns {
            None => format!("{} I/Os written to {to}", self.written),
            Some(min) => format!(
                "{} I/Os seen, {} written to {to} (total latency >= {min} ns)",
                self.seen, self.written
            ),
        };
        match self.statuses() {
            Some(st) => format!("{rows} ({st})"),
            None => rows,
        }
    }

    /// The rows written by status (`ok 98, incomplete 2`) when not all are `ok`: the
    /// health line counts what the correlator gave up or lost, and a row can be
    /// `incomplete` or `error` for what its own events say, which only the rows show.
    pub fn statuses(&self) -> Option<String> {
        if self.statuses[Status::Ok as usize + 1..]
            .iter()
            .all(|&n| n == 0)
        {
            return None;
        }
        let parts: Vec<String> = (Status::ALL.iter().zip(self.statuses))
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| format!("{} {n}", s.as_str()))
            .collect();
        Some(parts.join(", "))
    }

    /// Per output, the rows it holds now (see [`RowWriter::kept`]).
    pub fn kept(&self) -> Vec<u64> {
        self.writer.kept()
    }

    /// The `--min-latency` threshold, when rows are filtered.
    pub fn min_ns(&self) -> Option<u64> {
        self.min_ns
    }

    /// Erase the status line and close the writer, with the run's final counters
    /// when known.
    pub fn finish(&mut self, health: Option<&Health>) -> Result<(), SinkError> {
        if let Some(s) = self.status.as_mut() {
            s.clear();
        }
        if let Some(h) = health {
            self.writer.health(h);
        }
        self.writer.finish()
    }
}

impl crate::pipeline::RecordSink for Recorder {
    fn record(&mut self, r: &dyn IoRecord, sample: u32) -> Result<(), SinkError> {
        self.seen += 1;
        if let Some(min) = self.min_ns {
            if total_ns(r).is_none_or(|t| t < min) {
                return Ok(());
            }
        }
        self.written += 1;
        self.statuses[r.status() as usize] += 1;
        self.writer.write(r, sample)
    }

    fn tick(&mut self, health: &Health) -> Result<(), SinkError> {
        self.writer.health(health);
        self.writer.flush()?;
        if let Some(s) = self.status.as_mut() {
            s.update(Instant::now(), self.written, self.seen, health);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::RecordSink;
    use crate::sink::testrec::T;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[test]
    fn latencies_have_units() {
        assert_eq!(parse_latency("2ms"), Ok(2_000_000));
        assert_eq!(parse_latency("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_latency("500us"), Ok(500_000));
        assert_eq!(parse_latency("500µs"), Ok(500_000));
        assert_eq!(parse_latency("7ns"), Ok(7));
        assert_eq!(parse_latency(" 0ms "), Ok(0));
        for bad in [
            "2",
            "ms",
            "2 parsecs",
            "-1ms",
            "1e3ms",
            "1.2.3ms",
            "99999999999s",
            "",
        ] {
            assert!(parse_latency(bad).is_err(), "{bad}");
        }
    }

    /// A writer that keeps the start times of what it was given.
    struct Keep(Arc<Mutex<Vec<u64>>>);
    impl RowWriter for Keep {
        fn write(&mut self, r: &dyn IoRecord, _sample: u32) -> Result<(), SinkError> {
            self.0.lock().unwrap().push(r.start_ns());
            Ok(())
        }
        fn flush(&mut self) -> Result<(), SinkError> {
            Ok(())
        }
        fn finish(&mut self) -> Result<(), SinkError> {
            Ok(())
        }
        fn kept(&self) -> Vec<u64> {
            vec![self.0.lock().unwrap().len() as u64]
        }
    }

    #[test]
    fn min_latency_keeps_the_slow_ios_and_counts_all() {
        let kept = Arc::new(Mutex::new(Vec::new()));
        let mut rec = Recorder::new(Box::new(Keep(kept.clone())), Some(2000), None);
        let ios = [
            T::new(1, "w", Some(1999), Some(5)),
            T::new(2, "w", Some(2000), None),
            T::new(3, "w", Some(10), Some(3000)),
            T::new(4, "w", None, Some(-5000)),
            T::new(5, "w", None, None),
        ];
        for r in &ios {
            rec.record(r, 1).unwrap();
        }
        assert_eq!(*kept.lock().unwrap(), [2, 3]);
        assert_eq!((rec.seen(), rec.written()), (5, 2));
        let mut all = Recorder::new(Box::new(Keep(kept.clone())), None, None);
        for r in &ios {
            all.record(r, 1).unwrap();
        }
        assert_eq!((all.seen(), all.written()), (5, 5));
        // All ok: nothing to add to the row count. Else every status written, in order.
        assert_eq!(all.statuses(), None);
        let mut odd = T::new(6, "w", None, None);
        odd.status = Status::Incomplete;
        all.record(&odd, 1).unwrap();
        odd.status = Status::Dropped;
        all.record(&odd, 1).unwrap();
        all.record(&odd, 1).unwrap();
        assert_eq!(
            all.statuses().as_deref(),
            Some("ok 5, incomplete 1, dropped 2")
        );
        // Rows left out by --min-latency are not counted.
        odd.status = Status::Error;
        rec.record(&odd, 1).unwrap();
        assert_eq!(rec.statuses(), None);
    }

    /// Bytes written to a shared buffer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_status_line_redraws_in_place_and_is_erased() {
        let buf = Buf::default();
        let t0 = Instant::now();
        let mut s = StatusLine::new(Box::new(buf.clone()), t0);
        s.clear();
        assert!(
            buf.0.lock().unwrap().is_empty(),
            "nothing drawn, nothing erased"
        );
        let mut h = Health {
            samples: 300,
            ..Health::default()
        };
        h.counters.in_flight = 2;
        s.update(t0 + Duration::from_secs(1), 100, 100, &h);
        s.update(t0 + Duration::from_secs(3), 150, 300, &h);
        s.clear();
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        let draws: Vec<&str> = text.split("\r\x1b[K").collect();
        assert_eq!(draws.len(), 4, "{text:?}");
        assert_eq!(draws[0], "");
        assert!(
            draws[1].contains("100 rows written  100 I/Os/s"),
            "{text:?}"
        );
        assert!(
            draws[2].contains(
                "150 rows written of 300 I/Os  100 I/Os/s  samples 300  lost 0  dropped 0  in-flight 2"
            ),
            "{text:?}"
        );
        assert_eq!(draws[3], "", "erased at the end, nothing after");
        assert!(!text.contains('\n'));
    }

    /// `--defer`: rows come only after tracing, so the line counts what is held.
    #[test]
    fn the_status_line_of_a_deferred_run_counts_the_samples_held() {
        let buf = Buf::default();
        let t0 = Instant::now();
        let mut s = StatusLine::new(Box::new(buf.clone()), t0);
        let h = Health {
            samples: 500,
            held: 480,
            lost: 3,
            ..Health::default()
        };
        s.update(t0 + Duration::from_secs(1), 0, 0, &h);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "\r\x1b[Kntprof-perf: 480 samples held for after tracing  lost 3  dropped 0"
        );
    }
}
