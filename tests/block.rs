//! The block profile on the real kernel: loop devices on tmpfs, known direct I/O, and
//! what `record`, `stat` and `report` say about it.

mod common;

use common::*;
use std::process::Command;

fn dd(args: &[&str]) -> Vec<String> {
    let mut v = vec!["dd".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    v.push("status=none".into());
    v
}

fn record(dev: &str, out: &std::path::Path, cmd: &[String]) -> std::process::Output {
    run_ok(
        Command::new(bin())
            .args(["record", "--profile", "block", "--device", dev, "-o"])
            .arg(out)
            .arg("--")
            .args(cmd),
    )
}

#[test]
fn record_direct_4k_writes_exactly() {
    if !kernel_ready("record_direct_4k_writes_exactly") {
        return;
    }
    let l = LoopDev::new("w4k", 64);
    l.scheduler("none");
    let csv = tmp("w4k.csv");
    let of = format!("of={}", l.dev);
    let out = record(
        &l.dev,
        &csv,
        &dd(&["if=/dev/zero", &of, "bs=4k", "count=100", "oflag=direct"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("100 I/Os written"), "{err}");
    assert!(err.contains("lost 0"), "{err}");
    let rows = read_csv(&csv);
    assert_eq!(rows.len(), 100, "one row per dd write");
    let mut sectors: Vec<u64> = Vec::new();
    for r in &rows {
        assert_eq!(r["device"], l.name);
        assert_eq!(r["op"], "write");
        assert_eq!(r["bytes"], "4096");
        assert_eq!(r["q2d_ns"], "", "scheduler none issues directly: no Q2D");
        sectors.push(r["sector"].parse().unwrap());
    }
    for r in ok_rows(&rows, &err) {
        let d2c: u64 = r["d2c_ns"].parse().unwrap();
        let q2c: u64 = r["q2c_ns"].parse().unwrap();
        assert!(d2c > 0 && q2c >= d2c, "{r:?}");
    }
    sectors.sort();
    let want: Vec<u64> = (0..100).map(|i| i * 8).collect();
    assert_eq!(
        sectors, want,
        "dd writes 4k blocks back to back from sector 0"
    );
    let _ = std::fs::remove_file(csv);
}

/// `--device` naming a partition keeps the requests inside it, as blktrace keeps a
/// partition's LBA range: the other partition's and the disk's own are not rows.
#[test]
fn a_partition_is_its_own_requests() {
    if !kernel_ready("a_partition_is_its_own_requests") {
        return;
    }
    // p1 at sectors 2048..6144, p2 at 6144..10240.
    let l = LoopDev::partitioned("part", 8, &[(2048, 4096), (6144, 4096)]);
    l.scheduler("none");
    let (p1, p2) = (format!("{}p1", l.dev), format!("{}p2", l.dev));
    let script = format!(
        "dd if=/dev/zero of={p1} bs=4k count=60 oflag=direct status=none && \
         dd if=/dev/zero of={p2} bs=8k count=40 oflag=direct status=none && \
         dd if=/dev/zero of={} bs=4k seek=1 count=30 oflag=direct status=none",
        l.dev
    );
    let cmd = ["sh".to_string(), "-c".into(), script];
    let run = |dev: &str, name: &str| {
        let csv = tmp(name);
        let out = record(dev, &csv, &cmd);
        let rows = read_csv(&csv);
        let _ = std::fs::remove_file(csv);
        (rows, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (rows, err) = run(&p1, "part1.csv");
    assert!(
        err.contains("is a partition of") && err.contains("2048..6144"),
        "{err}"
    );
    assert_clean("a partition", &err);
    assert_eq!(
        rows.len(),
        60,
        "p1's 60 writes, not p2's 40 nor the disk's 30: {err}"
    );
    for r in &rows {
        let sector = num(r, "sector");
        assert!((2048..6144).contains(&sector), "{r:?}");
        assert_eq!((&*r["device"], &*r["bytes"]), (&*l.name, "4096"), "{r:?}");
    }
    let (rows, err) = run(&format!("{},{}", p2, p1), "part12.csv");
    assert_eq!(rows.len(), 100, "{err}");
    assert_eq!(rows.iter().filter(|r| num(r, "bytes") == 8192).count(), 40);
    // The disk named as well: all of it.
    let (rows, err) = run(&format!("{},{}", p1, l.dev), "partdisk.csv");
    assert_eq!(rows.len(), 130, "{err}");
}

#[test]
fn record_reads_through_a_scheduler_have_q2d() {
    if !kernel_ready("record_reads_through_a_scheduler_have_q2d") {
        return;
    }
    let l = LoopDev::new("r64k", 64);
    l.scheduler("mq-deadline");
    let csv = tmp("r64k.csv");
    let inf = format!("if={}", l.dev);
    // Skip the first MiB so the sectors are not the default 0.. range.
    let out = record(
        &l.dev,
        &csv,
        &dd(&[
            &inf,
            "of=/dev/null",
            "bs=64k",
            "count=50",
            "skip=16",
            "iflag=direct",
        ]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let rows = read_csv(&csv);
    assert_eq!(rows.len(), 50);
    let mut sectors: Vec<u64> = Vec::new();
    for r in &rows {
        assert_eq!((r["op"].as_str(), r["bytes"].as_str()), ("read", "65536"));
        sectors.push(r["sector"].parse().unwrap());
    }
    for r in ok_rows(&rows, &err) {
        let q2d: u64 = r["q2d_ns"]
            .parse()
            .expect("mq-deadline inserts: Q2D present");
        let d2c: u64 = r["d2c_ns"].parse().unwrap();
        let q2c: u64 = r["q2c_ns"].parse().unwrap();
        assert!(d2c > 0);
        assert_eq!(q2c, q2d + d2c, "stages share their timestamps");
    }
    sectors.sort();
    assert_eq!(
        sectors,
        (0..50).map(|i| 2048 + i * 128).collect::<Vec<u64>>()
    );
    let _ = std::fs::remove_file(csv);
}

#[test]
fn stat_and_report_count_what_was_issued() {
    if !kernel_ready("stat_and_report_count_what_was_issued") {
        return;
    }
    let l = LoopDev::new("stat", 64);
    l.scheduler("mq-deadline");
    let script = format!(
        "dd if=/dev/zero of={d} bs=8k count=120 oflag=direct status=none && \
         dd if={d} of=/dev/null bs=4k count=70 iflag=direct status=none",
        d = l.dev
    );
    let out = run_ok(Command::new(bin()).args([
        "stat",
        "-d",
        &l.name,
        "--interval",
        "0.2",
        "--",
        "sh",
        "-c",
        &script,
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let summary = &text[text.find("=== summary").expect("a final summary")..];
    // Every I/O issued is in a stage's count, or cut by a sample the kernel counted and
    // never wrote (a `dropped` I/O has no stage times), as the header line says.
    let cut = exit_count(summary, "cut");
    counted_or_cut(
        summary,
        &l.name,
        &[
            ("write", "d2c", 120),
            ("write", "q2c", 120),
            ("read", "d2c", 70),
        ],
        cut,
    );
    assert!(summary.contains("lost 0"), "{summary}");

    let csv = tmp("report.csv");
    let out = record(&l.dev, &csv, &["sh".into(), "-c".into(), script.clone()]);
    let cut = exit_count(&String::from_utf8_lossy(&out.stderr), "cut");
    let rep = run_ok(Command::new(bin()).arg("report").arg(&csv));
    let rep = String::from_utf8_lossy(&rep.stdout);
    assert!(rep.contains("190 rows"), "{rep}");
    counted_or_cut(
        &rep,
        &l.name,
        &[("write", "q2c", 120), ("read", "q2d", 70)],
        cut,
    );
    let _ = std::fs::remove_file(csv);
}

/// Each `(op, stage, issued)` of `dev` in the table `text` counts the I/Os issued,
/// less at most `cut`, and the stages of one kind (a write stage and a read stage)
/// miss no more than `cut` together.
fn counted_or_cut(text: &str, dev: &str, want: &[(&str, &str, u64)], cut: u64) {
    let mut short = std::collections::HashMap::new();
    for &(op, stage, issued) in want {
        let n = table_count(text, &[dev, op], stage).unwrap_or(0);
        assert!(
            n <= issued && n + cut >= issued,
            "{op} {stage}: {n} of {issued}, cut {cut}: {text}"
        );
        *short.entry(stage).or_insert(0) += issued - n;
    }
    for (stage, missing) in short {
        assert!(
            missing <= cut,
            "{stage}: {missing} missing, cut {cut}: {text}"
        );
    }
}

#[test]
fn sigint_and_duration_stop_cleanly_and_keep_rows() {
    if !kernel_ready("sigint_and_duration_stop_cleanly_and_keep_rows") {
        return;
    }
    let l = LoopDev::new("sig", 64);
    l.scheduler("none");
    let csv = tmp("sig.csv");
    let child = record_bg(&l, &csv);
    let of = format!("of={}", l.dev);
    run_ok(Command::new("dd").args([
        "if=/dev/zero",
        &of,
        "bs=4k",
        "count=37",
        "oflag=direct",
        "status=none",
    ]));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.output();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read_csv(&csv).len(), 37, "rows flushed on SIGINT");

    let t = std::time::Instant::now();
    let out = run_ok(
        Command::new(bin())
            .args(["record", "-d", &l.dev, "--duration", "0.3", "-o"])
            .arg(&csv),
    );
    assert!(t.elapsed().as_secs_f64() < 5.0);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--duration reached"));
    assert_eq!(read_csv(&csv).len(), 0, "no I/O during that run");
    let _ = std::fs::remove_file(csv);
}

#[test]
fn command_exit_status_is_reported_and_returned() {
    if !kernel_ready("command_exit_status_is_reported_and_returned") {
        return;
    }
    let l = LoopDev::new("exit", 16);
    let out = Command::new(bin())
        .args([
            "record",
            "-d",
            &l.dev,
            "-o",
            "/dev/null",
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exited with status 3"));
}

fn fails_with(args: &[&str], needle: &str) {
    let out = Command::new(bin()).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert!(
        err.contains(needle),
        "{args:?}: expected `{needle}` in: {err}"
    );
}

#[test]
fn bad_input_is_refused_before_tracing_with_what_to_do() {
    fails_with(
        &["record", "-d", "nosuchdisk0"],
        "unknown block device `nosuchdisk0`",
    );
    fails_with(
        &["record", "-o", "/nonexistent-dir/x.csv", "--duration", "1"],
        "cannot create output /nonexistent-dir/x.csv",
    );
    fails_with(
        &["record", "--tracefs", "/nonexistent"],
        "not a tracefs tree",
    );
    fails_with(&["record", "--profile", "bogus"], "unknown profile `bogus`");
    fails_with(&["record", "--mmap-pages", "3"], "power of two");
    fails_with(&["stat", "--interval=-1"], "--interval -1");
    fails_with(
        &["record", "--", "no-such-command-xyz"],
        "command `no-such-command-xyz` not found",
    );
    // A tracefs tree without the block events: the missing events are named with why.
    let dir = tmp("fake-tracefs");
    std::fs::create_dir_all(dir.join("events/sched")).unwrap();
    fails_with(
        &["record", "--tracefs", dir.to_str().unwrap()],
        "block:block_rq_issue",
    );
    fails_with(&["report", "/nonexistent.csv"], "/nonexistent.csv");
    let bad = tmp("bad.csv");
    std::fs::write(&bad, "a,b\n1,2\n").unwrap();
    fails_with(
        &["report", bad.to_str().unwrap()],
        "is not that of a recording of any profile",
    );
    std::fs::write(&bad, "").unwrap();
    fails_with(
        &["report", bad.to_str().unwrap()],
        "bad.csv: empty: not even a header line",
    );
    // A binary with no newline at all (read only up to its last one, it would look
    // empty): said not to be a recording, not empty.
    std::fs::write(&bad, b"\x7fELF\x02\x01\x01\0binary without a line end").unwrap();
    fails_with(
        &["report", bad.to_str().unwrap()],
        "bad.csv: not a recording: no line ends in its 33 bytes",
    );
    // A recording zstd-compressed to be moved: not read as text, and not said cut.
    std::fs::write(&bad, b"\x28\xb5\x2f\xfd\x24\x00binary").unwrap();
    fails_with(
        &["report", bad.to_str().unwrap()],
        "bad.csv: compressed with zstd: decompress it first (`zstd -d ",
    );
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_file(bad);
}

#[test]
fn list_shows_block_supported() {
    if !kernel_ready("list_shows_block_supported") {
        return;
    }
    let out = run_ok(Command::new(bin()).arg("list"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("block      supported"), "{text}");
    assert!(text.contains("ok       block:block_rq_complete"), "{text}");
}

#[test]
fn not_root_is_told_what_to_do() {
    if !kernel_ready("not_root_is_told_what_to_do") {
        return;
    }
    // As nobody, tracefs (mode 0700) cannot be read: the error must say why and what to do.
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            bin(),
            "record",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("permission denied") && err.contains("root"),
        "{err}"
    );
}

/// fio's I/O count and the health line's `merged`, for a hot-region run.
fn hot_run(l: &LoopDev, scheduler: &str, name: &str) -> (Vec<Row>, u64, String) {
    l.scheduler(scheduler);
    let csv = tmp(&format!("{name}.csv"));
    let json = tmp(&format!("{name}.json"));
    // Large rings: this test is about pairing, and parallel tests compete for the CPU
    // that drains them (loss is tested on its own).
    let out = run_ok(
        Command::new(bin())
            .args(["record", "--mmap-pages", "4096", "--device", &l.dev, "-o"])
            .arg(&csv)
            .arg("--")
            .args([
                "fio".to_string(),
                format!("--name={name}"),
                format!("--filename={}", l.dev),
                "--direct=1".into(),
                "--ioengine=libaio".into(),
                "--iodepth=32".into(),
                "--numjobs=2".into(),
                "--rw=randread".into(),
                "--bs=4k".into(),
                // 16 blocks, 64 requests in flight: the same sector is in flight many times.
                "--size=64k".into(),
                "--io_size=40m".into(),
                "--norandommap".into(),
                "--randrepeat=0".into(),
                "--output-format=json".into(),
                format!("--output={}", json.display()),
            ]),
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let rows = read_csv(&csv);
    let fio = fio_ios(&json);
    let _ = std::fs::remove_file(csv);
    let _ = std::fs::remove_file(json);
    (rows, fio, err)
}

fn health_count(err: &str, what: &str) -> u64 {
    err.split("  ")
        .find_map(|w| {
            w.strip_prefix(what)?
                .split_whitespace()
                .next()?
                .trim_end_matches(',')
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[test]
fn hot_sectors_every_request_is_its_own_row() {
    if !kernel_ready("hot_sectors_every_request_is_its_own_row") {
        return;
    }
    let l = LoopDev::new("hot", 64);
    for sched in ["none", "mq-deadline"] {
        let (rows, fio, err) = hot_run(&l, sched, &format!("hot-{sched}"));
        assert_eq!(fio, 20480, "{sched}: fio's own count");
        assert_clean(sched, &err);
        // A bio the scheduler merged into another request has no row of its own; the
        // health line counts it, so every I/O fio issued is accounted for. An I/O a
        // missing sample cut is a `dropped` row, counted as `cut`.
        let merged = health_count(&err, "merged ");
        assert_eq!(rows.len() as u64 + merged, fio, "{sched}: {err}");
        if sched == "none" {
            assert_eq!(merged, 0, "no scheduler, no merges: {err}");
        }
        let dropped = rows.iter().filter(|r| r["status"] == "dropped").count() as u64;
        assert_eq!(dropped, health_count(&err, "cut "), "{sched}: {err}");
        let ok: Vec<&Row> = rows.iter().filter(|r| r["status"] == "ok").collect();
        assert_eq!(ok.len() as u64 + dropped, rows.len() as u64, "{sched}");
        let shared = ok.iter().filter(|r| num(r, "candidates") > 1).count();
        assert!(
            shared > 100,
            "{sched}: hot sectors must share keys ({shared})"
        );
        assert_eq!(
            health_count(&err, "ambiguous "),
            shared as u64,
            "{sched}: {err}"
        );
        // Empty only while a sample the kernel dropped is unaccounted (see
        // `under_load_every_io_is_accounted_and_no_ok_row_is_another_ios`).
        let known = ok.iter().filter(|r| !r["qd"].is_empty());
        let qd_max = known.map(|r| num(r, "qd")).max().unwrap();
        assert!((2..=64).contains(&qd_max), "{sched}: qd {qd_max}");
        for r in &ok {
            assert!(num(r, "d2c_ns") > 0 && num(r, "q2c_ns") >= num(r, "d2c_ns"));
        }
    }
}

fn signal(child: &Running, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}

#[test]
fn sigterm_and_sighup_flush_every_row() {
    if !kernel_ready("sigterm_and_sighup_flush_every_row") {
        return;
    }
    use nix::sys::signal::Signal;
    let l = LoopDev::new("sighup", 64);
    l.scheduler("none");
    for (sig, n) in [(Signal::SIGTERM, 23), (Signal::SIGHUP, 41)] {
        let csv = tmp(&format!("{sig}.csv"));
        let child = record_bg(&l, &csv);
        let of = format!("of={}", l.dev);
        let count = format!("count={n}");
        run_ok(Command::new("dd").args([
            "if=/dev/zero",
            &of,
            "bs=4k",
            &count,
            "oflag=direct",
            "status=none",
        ]));
        signal(&child, sig);
        let out = child.output();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{sig}: {err}");
        assert_eq!(read_csv(&csv).len(), n, "{sig}: rows flushed");
        let _ = std::fs::remove_file(csv);
    }
}

#[test]
fn after_sigkill_the_csv_holds_only_whole_lines() {
    if !kernel_ready("after_sigkill_the_csv_holds_only_whole_lines") {
        return;
    }
    let l = LoopDev::new("kill", 64);
    l.scheduler("none");
    let csv = tmp("kill.csv");
    let mut child = record_bg(&l, &csv);
    let of = format!("of={}", l.dev);
    let mut dd = Command::new("dd")
        .args(["if=/dev/zero", &of, "bs=4k", "count=200000", "oflag=direct"])
        .args(["status=none"])
        .spawn()
        .unwrap();
    // Past the first one-second flush, in the middle of writing rows.
    std::thread::sleep(std::time::Duration::from_millis(2300));
    child.kill();
    let _ = dd.kill();
    let _ = dd.wait();
    let text = read(&csv);
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    assert!(
        lines.len() > 100,
        "rows reached the file before the kill: {}",
        lines.len()
    );
    let fields = lines[0].split(',').count();
    for (i, line) in lines.iter().enumerate() {
        assert!(line.ends_with('\n'), "line {i} is cut: {line:?}");
        assert_eq!(line.split(',').count(), fields, "line {i}: {line:?}");
    }
    // Cut inside its last row, as a full disk or a copy cut short leaves it: `report`
    // reads the whole rows before, and says so.
    std::fs::write(&csv, &text[..text.len() - 5]).unwrap();
    let out = run_ok(Command::new(bin()).arg("report").arg(&csv));
    let (rep, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let whole = lines.len() - 2;
    assert!(rep.contains(&format!(" {whole} rows")), "{rep}");
    assert!(
        err.contains("ends inside a row")
            && err.contains(&format!(
                "read its first {} bytes",
                text.len() - lines[lines.len() - 1].len()
            )),
        "{err}"
    );
    // Rows are summarised by `report`; `stat --input` reads a perf.data, and says so.
    fails_with(
        &["stat", "--input", csv.to_str().unwrap()],
        "a recording's rows (CSV or Parquet), not a perf.data; `ntprof-perf report",
    );
    let _ = std::fs::remove_file(csv);
}

#[test]
fn piped_into_head_ends_cleanly() {
    if !kernel_ready("piped_into_head_ends_cleanly") {
        return;
    }
    let l = LoopDev::new("head", 64);
    l.scheduler("none");
    let script = format!(
        "set -o pipefail; {} record -d {dev} -- dd if=/dev/zero of={dev} bs=4k count=3000 \
         oflag=direct status=none | head -3",
        bin(),
        dev = l.dev
    );
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("output closed by its reader"), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 3);
    // list and report stop quietly too.
    let out = Command::new("bash")
        .args(["-c", &format!("set -o pipefail; {} list | head -1", bin())])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// Standard error closed before the run starts (a log reader that died, `2>&1 | head`
/// that has exited): the messages are lost, the run is not. `record` must not panic in
/// its first message (exit 101), and its rows must all be written, whole: the CSV and the
/// Parquet, one reader thread and two, `--max-rate`, and `--defer`, whose first message
/// ("correlating the N samples held") comes before any row is written: a panic there
/// wrote none.
#[test]
fn a_closed_standard_error_loses_the_messages_not_the_run() {
    if !kernel_ready("a_closed_standard_error_loses_the_messages_not_the_run") {
        return;
    }
    let l = LoopDev::new("closed-stderr", 64);
    l.scheduler("none");
    let dir = tmp("closed-stderr");
    std::fs::create_dir_all(&dir).unwrap();
    let writes = 2000;
    for (file, extra) in [
        ("rows.csv", &["--threads", "1"][..]),
        ("rows.csv", &["--threads", "2"]),
        ("rows.parquet", &["--max-rate", "100000"]),
        ("rows.csv", &["--defer"]),
        ("rows.parquet", &["--defer"]),
    ] {
        let what = format!("{file} {extra:?}");
        let out_file = dir.join(file);
        let (read_end, write_end) = nix::unistd::pipe().unwrap();
        drop(read_end);
        let status = Command::new(bin())
            .args(["record", "-d", &l.dev, "-o"])
            .arg(&out_file)
            .args(extra)
            .args(["--", "dd", "if=/dev/zero", &format!("of={}", l.dev)])
            .args([
                "bs=4k",
                &format!("count={writes}"),
                "oflag=direct",
                "status=none",
            ])
            .stderr(std::process::Stdio::from(write_end))
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(0), "{what}: exit status {status}");
        // The file is whole: every reader takes it without a word of a cut row. Its
        // rows are dd's writes, less any the kernel dropped (the exit line that would
        // count those went to the closed pipe).
        let report = run_ok(Command::new(bin()).arg("report").arg(&out_file));
        let err = String::from_utf8_lossy(&report.stderr);
        assert!(!err.contains("ends inside"), "{what}: {err}");
        let text = String::from_utf8_lossy(&report.stdout);
        let name = l.dev.trim_start_matches("/dev/");
        let rows = table_count(&text, &[name, "write"], "d2c")
            .unwrap_or_else(|| panic!("{what}: no write rows in the report:\n{text}"));
        assert!(
            rows > 0 && rows <= writes,
            "{what}: {rows} rows of {writes}:\n{text}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run whose output fails (the disk fills) stops with the error and still says what
/// it saw: the rows written and the samples and losses counted by then, from the
/// reading thread when there are two, and for Parquet also when the last commit fails.
#[test]
fn a_full_disk_stops_the_run_and_says_what_it_saw() {
    if !kernel_ready("a_full_disk_stops_the_run_and_says_what_it_saw") {
        return;
    }
    let l = LoopDev::new("full", 64);
    l.scheduler("none");
    let dir = tmp("full-disk");
    std::fs::create_dir_all(&dir).unwrap();
    run_ok(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
            .arg(&dir),
    );
    /// Unmounted however the test ends.
    struct Mounted(std::path::PathBuf);
    impl Drop for Mounted {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let dir = Mounted(dir);
    // CSV fails at a write during the run; Parquet (a row group committed every 2 s)
    // during the run or at its last commit, after the workload: either way the exit line
    // comes before the error.
    for (file, threads) in [("rows.csv", "1"), ("rows.csv", "2"), ("rows.parquet", "1")] {
        let out_file = dir.0.join(file);
        // About 100 bytes a row: 20,000 I/Os fill 64 KiB many times over.
        let out = Command::new(bin())
            .args(["record", "-d", &l.dev, "--threads", threads, "-o"])
            .arg(&out_file)
            .args(["--", "dd", "if=/dev/zero", &format!("of={}", l.dev)])
            .args(["bs=4k", "count=20000", "oflag=direct", "status=none"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let what = format!("{file}, threads {threads}");
        assert!(!out.status.success(), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(err.contains("No space left on device"), "{what}: {err}");
        let line = err
            .lines()
            .find(|l| l.contains("stopped by an error "))
            .unwrap_or_else(|| panic!("{what}: no exit line: {err}"));
        let after = |key: &str| -> u64 {
            number_after(line, key).unwrap_or_else(|| panic!("{key}: {line}"))
        };
        let closing = format!("closing {}, ", out_file.display());
        let written = match number_after(line, "error after ") {
            Some(n) => n,
            None => after(&closing),
        };
        let samples = after("; samples ");
        assert!(written > 0, "{what}: {line}");
        // What the file holds, whole, is what the line says: all that was written, or
        // the count it gives when a write that failed took some (a full disk keeps the
        // whole rows of what it took; Parquet, the row groups committed before).
        let held = number_after(line, "; ").unwrap_or(written);
        assert!(held <= written, "{what}: {line}");
        let report = run_ok(Command::new(bin()).arg("report").arg(&out_file));
        let head = String::from_utf8_lossy(&report.stdout);
        assert_eq!(
            number_after(&head, "profile block, "),
            Some(held),
            "{what}: the file against the exit line: {line}\n{head}"
        );
        // Each block I/O is at least its issue and its completion, but for the samples
        // the counts say were lost or dropped (the kernel drops one now and then), and
        // for the I/Os the error left in flight (`incomplete`: the run stopped before
        // their completion was read).
        let incomplete = number_after(line, "  incomplete ").unwrap_or(0);
        let missing = after("  lost ") + after("  dropped ") + incomplete;
        assert!(samples + missing >= 2 * written, "{what}: {line}");
        assert!(
            line.contains("  lost ") && line.contains("  dropped "),
            "{line}"
        );
        let _ = std::fs::remove_file(&out_file);
    }
}

#[test]
fn lost_samples_are_attributed_to_the_ios_they_cost() {
    if !kernel_ready("lost_samples_are_attributed_to_the_ios_they_cost") {
        return;
    }
    let l = LoopDev::new("loss", 64);
    l.scheduler("none");
    let csv = tmp("loss.csv");
    let json = tmp("loss.json");
    // A one-page ring at full rate: the kernel must drop samples. It keeps up now and
    // then when fio shares its CPU with another test's load (3 runs in 300 beside a
    // CPU hog): up to three tries.
    let record = || {
        let out = run_ok(
            Command::new(bin())
                .args(["record", "--mmap-pages", "1", "-d", &l.dev, "-o"])
                .arg(&csv)
                .args([
                    "--",
                    "fio",
                    "--name=loss",
                    "--direct=1",
                    "--ioengine=libaio",
                ])
                .args(["--iodepth=32", "--rw=randread", "--bs=4k", "--size=64m"])
                .arg(format!("--filename={}", l.dev))
                .arg("--output-format=json")
                .arg(format!("--output={}", json.display())),
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = (0..3)
        .map(|_| record())
        .find(|err| health_count(err, "lost ") > 0)
        .unwrap_or_else(|| panic!("a one-page ring must overflow: no samples lost in 3 runs"));
    let fio = fio_ios(&json);
    let rows = read_csv(&csv);
    let lost = health_count(&err, "lost ");
    // `lost N (cpu0:… cpu1:…)  dropped D, costing C I/Os`
    let cost: u64 = err
        .split("costing ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no `costing` on the exit line: {err}"));
    let dropped_rows = rows.iter().filter(|r| r["status"] == "dropped").count() as u64;
    let unmatched = health_count(&err, "unmatched ");
    // Every I/O a missing sample cut is a `dropped` row (or an unmatched completion),
    // never `incomplete` (nothing was in flight when fio ended) and never `ok`.
    assert_eq!(health_count(&err, "incomplete "), 0, "{err}");
    assert!(cost > 0 && cost == dropped_rows + unmatched, "{err}");
    let unseen = unseen_ios(&err)
        .unwrap_or_else(|| panic!("no count of the I/Os none of whose events arrived: {err}"));
    // Two samples per I/O, no merges: the samples missing are one per I/O seen in part
    // and two per I/O none of whose events arrived.
    let missing = lost + health_count(&err, "dropped ");
    let whole = (missing - cost) / 2;
    assert_eq!(missing, cost + 2 * whole, "{err}");
    // Rows + completions unmatched + I/Os lost whole = what fio issued, exactly.
    assert_eq!(rows.len() as u64 + unmatched + whole, fio, "{err}");
    // From the kernel's count of issues: exact, but for a completion that came after
    // its request was given up as having lost it (a row and an unmatched completion).
    assert!(
        unseen.abs_diff(whole) * 100 <= whole.max(100),
        "{unseen} unseen vs {whole}: {err}"
    );
    // No `ok` row carries another I/O's completion: none is slower than fio saw.
    let lat_max = fio_lat_max_ns(&json);
    for r in rows.iter().filter(|r| r["status"] == "ok") {
        assert!(
            num(r, "d2c_ns") <= lat_max,
            "{r:?} slower than fio's {lat_max} ns"
        );
    }
    let _ = std::fs::remove_file(csv);
    let _ = std::fs::remove_file(json);
}

/// The load where the kernel's sampling path was seen to drop completions without a
/// LOST record (4k random reads at QD16 for 3 s, ≈1 M I/Os here): every I/O fio issued
/// is a row, the default rings lose nothing, and no `ok` row is paired with another
/// I/O's completion, which would make it slower than fio ever saw or its qd deeper
/// than fio's iodepth. Whether the kernel dropped a sample in this run or not, the
/// accounting must come out exact.
#[test]
fn under_load_every_io_is_accounted_and_no_ok_row_is_another_ios() {
    if !kernel_ready("under_load_every_io_is_accounted_and_no_ok_row_is_another_ios") {
        return;
    }
    every_io_accounted_under_load("load", &[]);
}

/// The same with the rings read and decoded on a thread of their own (`--threads 2`):
/// the correlating thread gets every round, gap and hold in the order one thread
/// takes them, so the rows and their accounting are as exact.
#[test]
fn under_load_with_two_threads_every_io_is_accounted_the_same() {
    if !kernel_ready("under_load_with_two_threads_every_io_is_accounted_the_same") {
        return;
    }
    every_io_accounted_under_load("load2", &["--threads", "2"]);
}

/// `--defer`: every sample is held and correlated after fio ends, and the rows and
/// their accounting are those of a live run; with a cap smaller than the run's
/// samples, the oldest are correlated while tracing, and still nothing changes.
#[test]
fn deferred_every_io_is_accounted_the_same_held_or_past_the_cap() {
    if !kernel_ready("deferred_every_io_is_accounted_the_same_held_or_past_the_cap") {
        return;
    }
    // A SIZE of 2 MiB or more is faulted in before tracing; 1M holds less than the
    // 2 MiB pages the memory comes in, and the default is faulted in as needed.
    for (name, extra, capped, ready) in [
        ("loaddefer", &["--defer"][..], false, None),
        ("loaddefer1m", &["--defer", "1M"][..], true, None),
        (
            "loaddefer256m",
            &["--defer", "256M"][..],
            false,
            Some("256.0 MiB"),
        ),
    ] {
        let err = every_io_accounted_under_load(name, extra);
        // `--defer: held X MiB at most; N samples correlated after tracing, in S s[;
        // M while tracing, past the cap of C MiB …][; R MiB faulted in before tracing,
        // in T ms …]`
        let line = err
            .lines()
            .find(|l| l.contains("--defer: held "))
            .unwrap_or_else(|| panic!("{name}: no --defer line: {err}"));
        let after = number_after(line, "at most; ").unwrap();
        let early = line
            .split("; ")
            .find(|part| part.contains(" while tracing, past the cap"))
            .map_or(0, |part| number_after(part, "").unwrap());
        let samples = number_after(&err, "; samples ").unwrap();
        assert_eq!(after + early, samples, "{name}: {line}\n{err}");
        // 3 s of fio at QD16 here is ≈ 1 M samples, ≈ 80 MB held: past 1 MiB at once.
        assert_eq!(early > 0, capped, "{name}: {line}");
        let made = line
            .split("; ")
            .find_map(|part| Some(&part[..part.find(" faulted in before tracing, in ")?]));
        assert_eq!(made, ready, "{name}: {line}");
        // Said before tracing starts, as it takes seconds on some VMs.
        assert_eq!(
            err.contains("--defer: faulting in "),
            ready.is_some(),
            "{name}: {err}"
        );
    }
}

fn every_io_accounted_under_load(name: &str, extra: &[&str]) -> String {
    let l = LoopDev::new(name, 200);
    l.scheduler("none");
    let csv = tmp(&format!("{name}.csv"));
    let json = tmp(&format!("{name}.json"));
    let out = run_ok(
        Command::new(bin())
            .args(["record", "-d", &l.dev, "-o"])
            .arg(&csv)
            .args(extra)
            .args([
                "--",
                "fio",
                "--name=load",
                "--direct=1",
                "--ioengine=libaio",
            ])
            .args(["--iodepth=16", "--rw=randread", "--bs=4k", "--norandommap"])
            .args(["--time_based", "--runtime=3", "--randrepeat=0"])
            .arg(format!("--filename={}", l.dev))
            .arg("--output-format=json")
            .arg(format!("--output={}", json.display())),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let fio = fio_ios(&json);
    let lat_max = fio_lat_max_ns(&json);
    let rows = read_csv(&csv);
    assert_clean(name, &err);
    assert_eq!(rows.len() as u64, fio, "{err}");
    let dropped = rows.iter().filter(|r| r["status"] == "dropped").count() as u64;
    assert_eq!(dropped, health_count(&err, "cut "), "{err}");
    // A completion the kernel dropped stays in the device's depth until the counts
    // confirm it missing; a confirmation that comes after the 50 ms doubt bound (see
    // docs/how-it-works.md) leaves the I/Os issued meanwhile one deeper per such
    // completion. Without a drop the depth is exact.
    let max_qd = 16 + exit_count(&err, "dropped");
    // While a dropped sample is unaccounted the depth is not known: empty, never a
    // guess. Without a drop every row has it.
    let drops = exit_count(&err, "dropped") + exit_count(&err, "lost");
    let mut unknown = 0;
    for r in rows.iter().filter(|r| r["status"] == "ok") {
        assert!(
            num(r, "d2c_ns") <= lat_max,
            "{r:?}: slower than fio's slowest ({lat_max} ns): {err}"
        );
        if r["qd"].is_empty() {
            unknown += 1;
            continue;
        }
        assert!(
            num(r, "qd") <= max_qd,
            "{r:?}: deeper than fio's iodepth and the drops: {err}"
        );
    }
    assert!(
        drops > 0 || unknown == 0,
        "{unknown} rows without qd: {err}"
    );
    // The samples counted on the exit line (by the reading thread, with two) hold an
    // issue and a completion of every `ok` row.
    let samples = number_after(&err, "; samples ").unwrap_or(0);
    let ok = rows.iter().filter(|r| r["status"] == "ok").count() as u64;
    assert!(samples >= 2 * ok && ok > 0, "{ok} ok rows: {err}");
    eprintln!("{name}: {fio} I/Os, {dropped} dropped rows: {err}");
    let _ = std::fs::remove_file(csv);
    let _ = std::fs::remove_file(json);
    err.into_owned()
}

/// `--stages d2c` through a scheduler: the insert (one of the three samples each I/O
/// costs there) is not opened, so two samples per I/O arrive, every row has its d2c
/// and neither q2d nor a q2c that would only be d2c again.
#[test]
fn stages_d2c_leaves_the_insert_out_and_its_stages_empty() {
    if !kernel_ready("stages_d2c_leaves_the_insert_out_and_its_stages_empty") {
        return;
    }
    let l = LoopDev::new("stages", 64);
    l.scheduler("mq-deadline");
    let of = format!("of={}", l.dev);
    let run = |stages: Option<&str>, csv: &std::path::Path| {
        let mut c = Command::new(bin());
        c.args(["record", "-d", &l.name, "-o"]).arg(csv);
        if let Some(s) = stages {
            c.args(["--stages", s]);
        }
        c.arg("--").args(dd(&[
            "if=/dev/zero",
            &of,
            "bs=4k",
            "count=80",
            "oflag=direct",
        ]));
        String::from_utf8_lossy(&run_ok(&mut c).stderr).into_owned()
    };
    let samples =
        |err: &str| -> u64 { number_after(err, "samples ").expect("samples on the exit line") };
    let all = tmp("stages-all.csv");
    let d2c = tmp("stages-d2c.csv");
    let err_all = run(None, &all);
    let err_d2c = run(Some("d2c"), &d2c);
    // What arrived and what the kernel counted but never wrote (`dropped`).
    let events = |err: &str| samples(err) + exit_count(err, "dropped");
    assert_eq!(events(&err_all), 240, "insert, issue, complete: {err_all}");
    assert_eq!(events(&err_d2c), 160, "issue, complete: {err_d2c}");
    assert!(
        err_d2c.contains("block_rq_insert is not traced"),
        "{err_d2c}"
    );
    let rows = read_csv(&d2c);
    assert_eq!(rows.len(), 80);
    for r in ok_rows(&rows, &err_d2c) {
        assert!(num(r, "d2c_ns") > 0, "{r:?}");
        assert_eq!(
            (r["q2d_ns"].as_str(), r["q2c_ns"].as_str()),
            ("", ""),
            "{r:?}"
        );
    }
    let rows = read_csv(&all);
    assert!(ok_rows(&rows, &err_all)
        .iter()
        .all(|r| !r["q2c_ns"].is_empty()));
    for (flag, want) in [
        ("q2x", "has no stage `q2x`; its stages: q2d, d2c, q2c"),
        ("d2c,bogus", "has no stage `bogus`"),
    ] {
        let out = Command::new(bin())
            .args(["stat", "-d", &l.name, "--stages", flag, "--duration", "0.1"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(want), "{flag}: {err}");
    }
    let _ = std::fs::remove_file(all);
    let _ = std::fs::remove_file(d2c);
}

/// The kernel's own per-device counters (`/sys/block/<dev>/stat`, read inside the
/// traced command, before and after its I/O), against the rows: one row per request
/// the kernel completed, op by op, and the bytes of each op to the sector. fio's
/// counts cannot say this where the block layer splits (8 MiB reads become requests of
/// the device's largest size), merges (mq-deadline), discards or adds flushes.
#[test]
fn every_request_the_kernel_counts_is_one_row() {
    if !kernel_ready("every_request_the_kernel_counts_is_one_row") {
        return;
    }
    let l = LoopDev::new("kstat", 160);
    l.scheduler("mq-deadline");
    let (before, after) = (tmp("kstat.before"), tmp("kstat.after"));
    let fio = |args: &str| {
        format!(
            "fio --name=k --filename={} --direct=1 --output=/dev/null {args}",
            l.dev
        )
    };
    let script = [
        format!("cat /sys/block/{}/stat > {}", l.name, before.display()),
        fio("--rw=randrw --rwmixread=70 --bsrange=4k-256k --ioengine=libaio --iodepth=32 --numjobs=2 --size=32m"),
        fio("--rw=read --bs=8m --ioengine=libaio --iodepth=4 --size=64m"),
        fio("--rw=randtrim --bs=64k --ioengine=libaio --iodepth=8 --size=16m --offset=64m"),
        // Each fsync is a write without data that carries a cache flush: the kernel
        // counts it as a write and ends it without issuing it (`preflushes` on the exit
        // line), and issues a flush request (a `flush` row) that it counts as a flush;
        // fsyncs of four jobs at once can share one.
        fio("--rw=randwrite --bs=4k --ioengine=psync --fsync=2 --size=1m --offset=96m --numjobs=4"),
        // O_SYNC: writes with FUA, each followed by a flush of the whole disk. Without
        // FUA in the disk the kernel completes a write's data (its row), issues a flush
        // (a `flush` row), then ends the write with a completion without data
        // (`postflushes`).
        fio("--rw=randwrite --bs=16k --ioengine=psync --sync=1 --size=1m --offset=112m --numjobs=2"),
        format!("cat /sys/block/{}/stat > {}", l.name, after.display()),
    ]
    .join(" && ");
    let csv = tmp("kstat.csv");
    let out = record(&l.dev, &csv, &["sh".into(), "-c".into(), script]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_clean("kstat", &err);
    let stat = |p: &std::path::Path| -> Vec<u64> {
        read(p)
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect()
    };
    let (b, a) = (stat(&before), stat(&after));
    assert!(a.len() >= 17, "a kernel with flush counters (4.19+): {a:?}");
    let delta = |i: usize| a[i] - b[i];
    let rows = read_csv(&csv);
    ok_rows(&rows, &err);
    let (mut n, mut bytes) = (
        std::collections::HashMap::<&str, u64>::new(),
        std::collections::HashMap::<&str, u64>::new(),
    );
    for r in &rows {
        *n.entry(r["op"].as_str()).or_default() += 1;
        *bytes.entry(r["op"].as_str()).or_default() += num(r, "bytes");
    }
    let got = |m: &std::collections::HashMap<&str, u64>, op| m.get(op).copied().unwrap_or(0);
    let what = format!("kernel {b:?} -> {a:?}, rows {n:?}, bytes {bytes:?}: {err}");
    // A sample the kernel counted and never wrote (`dropped` on the exit line, rare)
    // can take a completion without data, which then is not counted, or every event of
    // an I/O, which then has no row: each count may fall short by that many, never
    // exceed. Without one, every count is exact.
    let missing = exit_count(&err, "dropped");
    let within = |got: u64, want: u64, what: &str| {
        assert!(
            got <= want && got + missing >= want,
            "{got} against the kernel's {want}, {missing} samples missing: {what}"
        )
    };
    let preflushes = exit_count(&err, "preflushes");
    let postflushes = exit_count(&err, "postflushes");
    // Fields: reads 0, read sectors 2, writes 4, write sectors 6, discards 11, discard
    // sectors 13, flushes 15.
    within(got(&n, "read"), delta(0), &format!("reads: {what}"));
    within(got(&n, "discard"), delta(11), &format!("discards: {what}"));
    within(got(&n, "flush"), delta(15), &format!("flushes: {what}"));
    within(
        got(&n, "write") + preflushes,
        delta(4),
        &format!("writes: {what}"),
    );
    if missing == 0 {
        assert_eq!(got(&bytes, "read"), delta(2) * 512, "{what}");
        assert_eq!(got(&bytes, "write"), delta(6) * 512, "{what}");
        assert_eq!(got(&bytes, "discard"), delta(13) * 512, "{what}");
    }
    assert_eq!(n.len(), 4, "only these ops: {what}");
    // The 8 MiB reads were split: more read requests than fio's reads of 8 MiB and
    // of at most 256 KiB could make whole.
    assert!(delta(0) > 8 + 32 * 1024 / 256, "{what}");
    // fio skips the fsync after a job's last write: 4 × 127 of them, and O_SYNC writes
    // sync the disk too.
    assert!(preflushes + missing >= 4 * 127 && delta(15) > 0, "{what}");
    let fua = read(std::path::Path::new(&format!(
        "/sys/block/{}/queue/fua",
        l.name
    )));
    if fua.trim() == "0" {
        within(
            postflushes,
            2 * 64,
            &format!("one per O_SYNC write: {what}"),
        );
    } else {
        assert_eq!(postflushes, 0, "a disk with FUA: {what}");
    }
    for f in [csv, before, after] {
        let _ = std::fs::remove_file(f);
    }
}

/// Sampled by sector bits (`--sample`), a flush request has no sector to be kept by:
/// issued at 0, which every mask keeps, completed at 2^64 - 1, which none keeps. It is
/// left out whole, not written `incomplete` at the end.
#[test]
fn a_sampled_trace_leaves_flushes_out_whole() {
    if !kernel_ready("a_sampled_trace_leaves_flushes_out_whole") {
        return;
    }
    let l = LoopDev::new("sflush", 16);
    l.scheduler("mq-deadline");
    let csv = tmp("sflush.csv");
    let out = run_ok(
        Command::new(bin())
            .args(["record", "--sample", "8", "-d", &l.dev, "-o"])
            .arg(&csv)
            .args(["--", "fio", "--name=s", "--direct=1", "--output=/dev/null"])
            .args(["--rw=randwrite", "--bs=4k", "--ioengine=psync", "--fsync=2"])
            .args(["--size=2m", "--numjobs=2"])
            .arg(format!("--filename={}", l.dev)),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_clean("sflush", &err);
    let rows = read_csv(&csv);
    ok_rows(&rows, &err);
    assert!(rows.iter().all(|r| r["op"] == "write"), "{err}");
    // Each job writes every 4 KiB block of 2 MiB once (fio's random map): 1 in 8 of
    // the 2 × 512 is kept by the sector bits. Fewer only if a sample the kernel
    // dropped was all of an I/O, or if the scheduler merged a kept write behind the
    // other job's write of the block before it, into a request that starts where the
    // sampling keeps nothing (its bio's merge is counted, `merged`; 1 soak run in 20).
    let n = rows.len() as u64;
    let (dropped, merged) = (exit_count(&err, "dropped"), exit_count(&err, "merged"));
    assert!(n <= 128 && n + dropped + merged >= 128, "{err}");
    assert!(exit_count(&err, "preflushes") > 0, "{err}");
    let _ = std::fs::remove_file(csv);
}
