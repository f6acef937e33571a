//! The outputs people load, on the real kernel: `stat --json`, `record --min-latency`,
//! the live status line, Parquet.

mod common;

use common::*;
use serde_json::Value as Json;
use std::process::Command;

/// The group whose labels are `labels` in a JSON line.
fn group<'a>(line: &'a Json, labels: &[(&str, &str)]) -> Option<&'a Json> {
    line["groups"]
        .as_array()?
        .iter()
        .find(|g| labels.iter().all(|(k, v)| g["labels"][*k] == *v))
}

/// The stage entry `stage` of the group whose labels are `labels` in a JSON line.
fn stage<'a>(line: &'a Json, labels: &[(&str, &str)], stage: &str) -> Option<&'a Json> {
    group(line, labels)?["stages"]
        .as_array()?
        .iter()
        .find(|s| s["stage"] == stage)
}

#[test]
fn stat_json_lines_count_what_was_issued() {
    if !kernel_ready("stat_json_lines_count_what_was_issued") {
        return;
    }
    stat_json_lines("json", &[]);
}

/// The same with the rings read on a thread of their own: the intervals come from
/// the reading thread's clock and the correlating thread's tables, and still add up.
#[test]
fn stat_json_lines_with_two_threads_count_what_was_issued() {
    if !kernel_ready("stat_json_lines_with_two_threads_count_what_was_issued") {
        return;
    }
    stat_json_lines("json2", &["--threads", "2"]);
}

/// `stat --defer`: nothing is correlated until the command ends, so there are no
/// interval tables, only the summary, and it counts every I/O. Asking for intervals
/// (or a second thread) with it is an error that says why.
#[test]
fn stat_deferred_prints_one_summary_of_every_io() {
    if !kernel_ready("stat_deferred_prints_one_summary_of_every_io") {
        return;
    }
    let l = LoopDev::new("statdefer", 64);
    l.scheduler("mq-deadline");
    for (bad, why) in [
        (&["--interval", "1"][..], "--interval"),
        (&["--threads", "2"][..], "--threads 2"),
        (&["--max-rate", "100"][..], "--max-rate"),
    ] {
        let out = Command::new(bin())
            .args(["stat", "--defer", "-d", &l.name])
            .args(bad)
            .args(["--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad:?}: {err}");
        assert!(
            err.contains("--defer") && err.contains(why),
            "{bad:?}: {err}"
        );
    }
    let script = format!(
        "dd if=/dev/zero of={d} bs=8k count=120 oflag=direct status=none && \
         dd if={d} of=/dev/null bs=4k count=70 iflag=direct status=none",
        d = l.dev
    );
    let out = run_ok(Command::new(bin()).args([
        "stat", "--defer", "-d", &l.name, "--json", "--", "sh", "-c", &script,
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<Json> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 1, "the summary alone: {text}");
    let summary = &lines[0];
    assert_eq!(summary["type"], "summary", "{text}");
    for (op, n) in [("write", 120), ("read", 70)] {
        let labels = [("device", l.name.as_str()), ("op", op)];
        let group = group(summary, &labels).unwrap_or_else(|| panic!("{labels:?}: {summary}"));
        assert_eq!(group["ios"], n, "every I/O one row: {group}\n{err}");
    }
    assert!(err.contains("correlated after tracing"), "{err}");
}

fn stat_json_lines(name: &str, extra: &[&str]) {
    let l = LoopDev::new(name, 64);
    l.scheduler("mq-deadline");
    let script = format!(
        "dd if=/dev/zero of={d} bs=8k count=120 oflag=direct status=none && sleep 0.3 && \
         dd if={d} of=/dev/null bs=4k count=70 iflag=direct status=none",
        d = l.dev
    );
    let out = run_ok(Command::new(bin()).arg("stat").args(extra).args([
        "-d",
        &l.name,
        "--json",
        "--percentiles",
        "50,99.99",
        "--interval",
        "0.1",
        "--",
        "sh",
        "-c",
        &script,
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Json> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let (summary, intervals) = lines.split_last().expect("at least the summary");
    assert_eq!(summary["type"], "summary", "{text}");
    assert!(intervals.len() >= 3, "an interval line every 0.1 s: {text}");
    assert!(intervals.iter().all(|l| l["type"] == "interval"));
    // The kernel can drop a sample without a trace (see `perf::ledger`): the I/O it
    // belonged to is still one row, written `dropped`, without the stages that needed
    // it. Only a drop the kernel's counts showed may take a value away.
    let samples_dropped = summary["dropped"].as_u64().unwrap();
    let mut rows_dropped = 0;
    for (labels, n) in [
        ([("device", l.name.as_str()), ("op", "write")], 120),
        ([("device", l.name.as_str()), ("op", "read")], 70),
    ] {
        let group = group(summary, &labels).unwrap_or_else(|| panic!("{labels:?}: {summary}"));
        assert_eq!(group["ios"], n, "every I/O one row: {group}");
        let dropped = group["dropped"].as_u64().unwrap();
        rows_dropped += dropped;
        for st in ["q2d", "d2c", "q2c"] {
            let s =
                stage(summary, &labels, st).unwrap_or_else(|| panic!("{labels:?} {st}: {summary}"));
            let count = s["count"].as_u64().unwrap();
            assert!(
                count <= n && count + dropped >= n,
                "{labels:?} {st}: {count} of {n} I/Os with the stage, {dropped} dropped: {summary}"
            );
            let ps = s["percentiles_ns"].as_object().unwrap();
            assert_eq!(ps.keys().collect::<Vec<_>>(), ["50", "99.99"], "{s}");
            let (p50, p9999, max) = (
                ps["50"].as_u64().unwrap(),
                ps["99.99"].as_u64().unwrap(),
                s["max_ns"].as_u64().unwrap(),
            );
            assert!(p50 > 0 && p50 <= p9999 && p9999 <= max, "{s}");
            // The intervals add up to the summary: every I/O is in exactly one.
            let sum: u64 = intervals
                .iter()
                .filter_map(|i| stage(i, &labels, st))
                .map(|s| s["count"].as_u64().unwrap())
                .sum();
            assert_eq!(sum, count, "{labels:?} {st}");
        }
    }
    assert!(
        rows_dropped <= samples_dropped,
        "no more rows dropped than samples the counts showed missing: {summary}"
    );
    for k in ["lost", "unmatched", "incomplete"] {
        assert_eq!(summary[k], 0, "{k}: {summary}");
    }
    assert!(
        summary["samples"].as_u64().unwrap() + samples_dropped >= 190 * 3,
        "{summary}"
    );

    // The table shows the same percentiles.
    let out = run_ok(Command::new(bin()).args([
        "stat",
        "-d",
        &l.name,
        "--interval",
        "0",
        "--percentiles",
        "50,99.99",
        "--",
        "dd",
        &format!("if={}", l.dev),
        "of=/dev/null",
        "bs=4k",
        "count=5",
        "iflag=direct",
        "status=none",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("P50_us  P99.99_us  MAX_us"), "{text}");
    let exit = String::from_utf8_lossy(&out.stderr);
    let dropped = exit_count(&exit, "dropped");
    let count = table_count(&text, &[&l.name, "read"], "d2c").unwrap_or(0);
    assert!(
        count <= 5 && count + dropped >= 5,
        "5 reads, {dropped} samples dropped: {text}{exit}"
    );
}

#[test]
fn percentile_lists_are_checked() {
    for bad in ["0", "50,101", "p99", ""] {
        let out = Command::new(bin())
            .args(["stat", "--percentiles", bad])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--percentiles"), "{bad}: {err}");
    }
}

fn write_script(dev: &str, count: u32) -> String {
    format!("dd if=/dev/zero of={dev} bs=4k count={count} oflag=direct status=none")
}

#[test]
fn min_latency_writes_the_slow_ios_and_counts_every_io() {
    if !kernel_ready("min_latency_writes_the_slow_ios_and_counts_every_io") {
        return;
    }
    let l = LoopDev::new("minlat", 64);
    l.scheduler("none");
    let csv = tmp("minlat.csv");
    let run = |min: &str| {
        let out = run_ok(
            Command::new(bin())
                .args(["record", "-d", &l.dev, "--min-latency", min, "-o"])
                .arg(&csv)
                .args(["--", "sh", "-c", &write_script(&l.dev, 100)]),
        );
        (
            String::from_utf8_lossy(&out.stderr).to_string(),
            read_csv(&csv),
        )
    };
    let (err, rows) = run("1s");
    assert!(err.contains("100 I/Os seen, 0 written to"), "{err}");
    assert!(rows.is_empty());
    let (err, rows) = run("0ns");
    assert!(err.contains("100 I/Os seen, 100 written to"), "{err}");
    assert_eq!(rows.len(), 100);
    // The total is the largest stage: q2c for the block profile.
    let (err, rows) = run("15us");
    let written = rows.len();
    assert!(
        err.contains(&format!("100 I/Os seen, {written} written to")),
        "{err}"
    );
    for r in &rows {
        assert!(num(r, "q2c_ns") >= 15_000, "{r:?}");
    }
    let _ = std::fs::remove_file(csv);
}

#[test]
fn record_shows_a_status_line_on_a_terminal_only() {
    if !kernel_ready("record_shows_a_status_line_on_a_terminal_only") {
        return;
    }
    let l = LoopDev::new("status", 64);
    l.scheduler("none");
    let csv = tmp("status.csv");
    // Two ticks (1 s apart) while the command runs, then the end.
    let work = format!("{} && sleep 2.3", write_script(&l.dev, 50));
    // What `record FLAGS` shows on a terminal: `script` gives it a pseudo-terminal and
    // copies what it shows to stdout.
    let on_tty = |flags: &str| {
        let cmd = format!(
            "{} record {flags}-d {} -o {} -- sh -c '{work}'",
            bin(),
            l.dev,
            csv.display()
        );
        let out = run_ok(Command::new("script").args(["-qec", &cmd, "/dev/null"]));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let tty = on_tty("");
    let draws = tty.matches("\r\x1b[Kntprof-perf: ").count();
    assert!(draws >= 2, "a redraw every second: {tty:?}");
    assert!(
        tty.contains("\r\x1b[Kntprof-perf: 50 rows written  "),
        "{tty:?}"
    );
    assert!(
        tty.contains("samples 100  lost 0  dropped 0  in-flight 0"),
        "{tty:?}"
    );
    // Erased before the exit line, which then starts a clean line.
    assert!(
        tty.contains("\r\x1b[Kntprof-perf: 50 I/Os written to"),
        "{tty:?}"
    );
    assert_eq!(read_csv(&csv).len(), 50);

    let out = run_ok(
        Command::new(bin())
            .args(["record", "-d", &l.dev, "-o"])
            .arg(&csv)
            .args(["--", "sh", "-c", &work]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains('\r') && !err.contains("\x1b["), "{err:?}");
    assert!(err.contains("50 I/Os written to"), "{err}");

    // `--defer`: no row until tracing stops; the line counts the samples held.
    let tty = on_tty("--defer ");
    assert!(
        tty.contains("\r\x1b[Kntprof-perf: 100 samples held for after tracing  lost 0  dropped 0"),
        "{tty:?}"
    );
    assert!(!tty.contains("rows written"), "{tty:?}");
    assert!(
        tty.contains("\r\x1b[Kntprof-perf: tracing stopped; correlating the 100 samples held"),
        "{tty:?}"
    );
    assert_eq!(read_csv(&csv).len(), 50);
    let _ = std::fs::remove_file(csv);
}
