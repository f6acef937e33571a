//! `import`: a perf.data recorded by stock `perf record` with the line `list
//! --perf-record` prints gives the rows a live `record` of the same I/Os gives.
//!
//! Both recorders open their own perf events on the same tracepoints, and each stamps
//! its own copy of a sample when the kernel writes it (DESIGN §9), one after the other
//! on the same CPU: an event's two times differ by the cost of writing one copy, below a
//! microsecond usually, tens of µs when the vCPU stalls between the two. Every stage is
//! the difference of two such times, so it can differ by twice that. The comparison is
//! by identity (sector, op, bytes: fio's random map writes each block once) and counts;
//! times within [`STAMP_BOUND_NS`] per time (2× per stage), a few outliers allowed.
//!
//! Both recorders can miss samples the kernel counted but never wrote (DESIGN §10): the
//! I/O they cut is `dropped`/`incomplete`, or its completion unmatched, in one recording
//! and `ok` in the other. So only I/Os `ok` in both are compared, and nearly all of
//! fio's I/Os must be among them.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How far apart the two recorders' stamps of one event may be: one sample's copy,
/// stretched by a vCPU stall (tens of µs on this kind of machine, DESIGN §9).
const STAMP_BOUND_NS: i64 = 50_000;
/// Of the I/Os compared, the fraction whose times may lie outside the bound (stalls
/// longer than the bound between the two copies).
const OUTLIERS: f64 = 0.01;

/// What identifies an I/O across two recordings.
type Key = (u64, String, u64);

struct Io {
    status: String,
    start: i64,
    /// q2d, d2c, q2c; q2d and q2c are empty for an I/O whose insert the recording missed.
    stages: [Option<i64>; 3],
}

/// The rows of a recording: how many, its `ok` rows by I/O, and every row that is not
/// `ok` (what to look at when a count is off).
fn by_io(path: &Path) -> (usize, HashMap<Key, Io>, Vec<String>) {
    let rows = read_csv(path);
    let mut ok = HashMap::new();
    let mut other = Vec::new();
    for r in &rows {
        if r["status"] != "ok" {
            let mut cells: Vec<String> = r.iter().map(|(k, v)| format!("{k}={v}")).collect();
            cells.sort();
            other.push(cells.join(" "));
            continue;
        }
        let key = (num(r, "sector"), r["op"].clone(), num(r, "bytes"));
        let io = Io {
            status: r["status"].clone(),
            start: inum(r, "start_ns"),
            stages: ["q2d_ns", "d2c_ns", "q2c_ns"].map(|c| (!r[c].is_empty()).then(|| inum(r, c))),
        };
        assert!(
            ok.insert(key.clone(), io).is_none(),
            "{}: two ok rows for {key:?}",
            path.display()
        );
    }
    (rows.len(), ok, other)
}

fn perf_line(l: &LoopDev) -> String {
    let out = run_ok(Command::new(bin()).args(["list", "--perf-record", "block", "-d", &l.name]));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Wait until `path` exists (the recorder has started), then a moment for its events to
/// be enabled.
fn started(path: &Path, child: &mut Child) {
    let t = Instant::now();
    while !path.exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "{} exited before starting",
            path.display()
        );
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
}

fn stop(child: Child, what: &str) -> String {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    // perf ends on SIGINT as the signal's default would (status 130 or the signal).
    use std::os::unix::process::ExitStatusExt;
    let interrupted = out.status.code() == Some(130) || out.status.signal() == Some(2);
    assert!(
        out.status.success() || interrupted,
        "{what}: {:?} {err}",
        out.status
    );
    err
}

fn import(data: &Path, out: &Path) -> String {
    let o = run_ok(
        Command::new(bin())
            .arg("import")
            .arg(data)
            .arg("-o")
            .arg(out),
    );
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// The |difference| below which `share` of `v` lies.
fn quantile(v: &mut [i64], share: f64) -> i64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * share) as usize]
}

#[test]
fn a_perf_capture_imports_to_the_rows_a_live_record_writes() {
    let test = "a_perf_capture_imports_to_the_rows_a_live_record_writes";
    if !perf_ready(test) {
        return;
    }
    if !tool_ready(test, "fio", &["--version"]) {
        return;
    }
    let l = LoopDev::new("import", 64);
    l.scheduler("mq-deadline");
    let line = perf_line(&l);
    let (data, live, imp, json) = (
        tmp("import.data"),
        tmp("import-live.csv"),
        tmp("import-imp.csv"),
        tmp("import-fio.json"),
    );
    let mut perf = Command::new("sh")
        .arg("-c")
        // 8 MiB of ring per CPU holds the whole run's samples (≈2.4 MB), so a perf
        // starved of CPU (the other tests of this file run beside it) loses none: this
        // test compares the two recordings, not perf's reading speed.
        .arg(format!("exec {line} -q -m 2048 -o {}", data.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    started(&data, &mut perf);
    let mut rec = Command::new(bin())
        .args(["record", "-d", &l.dev, "-o"])
        .arg(&live)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    started(&live, &mut rec);
    // Every 4 KiB block of the first 32 MiB once (fio's random map), reads and writes
    // mixed, 8 in flight: 8192 I/Os.
    run_ok(Command::new("fio").args([
        "--name=import",
        &format!("--filename={}", l.dev),
        "--direct=1",
        "--ioengine=libaio",
        "--iodepth=8",
        "--rw=randrw",
        "--bs=4k",
        "--size=32M",
        "--output-format=json",
        &format!("--output={}", json.display()),
    ]));
    std::thread::sleep(Duration::from_millis(300));
    let live_err = stop(rec, "record");
    stop(perf, "perf record");
    let err = import(&data, &imp);
    let ios = fio_ios(&json);
    assert_eq!(ios, 8192, "fio's own count");

    // The exit line: the capture's counters and its clock.
    assert!(
        err.contains("I/Os written to") && err.contains("  lost "),
        "{err}"
    );
    assert!(
        err.contains("clock: CLOCK_MONOTONIC (perf record -k mono), start times are wall-clock"),
        "{err}"
    );

    let (live_rows, live_ok, live_other) = by_io(&live);
    let (imp_rows, imp_ok, imp_other) = by_io(&imp);
    let n = ios as usize;
    // The ok I/Os of one recording the other has no ok row for.
    let unpaired = |a: &HashMap<Key, Io>, b: &HashMap<Key, Io>| -> Vec<String> {
        let mut v: Vec<String> = a
            .iter()
            .filter(|(k, _)| !b.contains_key(*k))
            .map(|(k, i)| format!("{k:?} start {} stages {:?}", i.start, i.stages))
            .collect();
        v.sort();
        v
    };
    let lone = format!(
        "ok in live only: {:?}\nok in import only: {:?}",
        unpaired(&live_ok, &imp_ok),
        unpaired(&imp_ok, &live_ok)
    );
    // Samples in perf's capture that the tracepoints never fired: more than the live
    // recorder's kernel counts say there were. Seen once in 20 soak runs: a
    // block_rq_issue again 20 µs after the first, byte for byte but its time, the live
    // recorder's counts and samples agreeing on one. Each can add an `incomplete` row.
    let samples = |err: &str| number_after(err, "; samples ").expect("samples on the exit line");
    let phantoms = samples(&err).saturating_sub(
        samples(&live_err) + exit_count(&live_err, "dropped") + exit_count(&live_err, "lost"),
    ) as usize;
    for (what, rows, ok, other, extra) in [
        ("live", live_rows, &live_ok, &live_other, 0),
        ("import", imp_rows, &imp_ok, &imp_other, phantoms),
    ] {
        assert!(
            rows <= n + extra,
            "{what}: {rows} rows for {n} I/Os ({extra} samples more than the kernel fired); rows not ok:\n{}\n{lone}\nlive: {live_err}\nimport: {err}\nfiles kept: {} {} {}",
            other.join("\n"),
            data.display(),
            live.display(),
            imp.display()
        );
        assert!(
            ok.len() * 100 >= n * 99,
            "{what}: only {} of {n} I/Os ok\nlive: {live_err}\nimport: {err}",
            ok.len()
        );
        for (sector, op, bytes) in ok.keys() {
            assert!(
                *sector < 32 * 2048 && *bytes == 4096,
                "{what}: {sector} {op} {bytes}"
            );
            assert!(op == "read" || op == "write", "{what}: {op}");
        }
    }
    // An `ok` row without q2d on this scheduled device is an I/O whose insert sample
    // that recording never got, and was not told it missed (else the row would be
    // `dropped`). Seen once in 20 soak runs (stop 42): the live recording lacked the
    // insert that perf's capture beside it held. Rare, so bounded: one I/O in a
    // thousand, with both exit lines to tell whether the kernel counted it.
    for (what, ok) in [("live", &live_ok), ("import", &imp_ok)] {
        let bare = ok.values().filter(|i| i.stages[0].is_none()).count();
        eprintln!("{what}: {bare} ok rows without q2d");
        assert!(
            bare * 1000 <= n,
            "{what}: {bare} ok rows without q2d\nlive: {live_err}\nimport: {err}"
        );
    }
    let common: Vec<(&Io, &Io)> = imp_ok
        .iter()
        .filter_map(|(k, i)| live_ok.get(k).map(|l| (i, l)))
        .collect();
    assert!(
        common.len() * 100 >= n * 98,
        "only {} of {n} I/Os ok in both",
        common.len()
    );
    // Reads and writes both, as fio issued them.
    for op in ["read", "write"] {
        let count = imp_ok.keys().filter(|k| k.1 == op).count();
        assert!(count * 4 > n, "{count} {op}s of {n}");
    }
    let mut start: Vec<i64> = common
        .iter()
        .map(|(i, l)| (i.start - l.start).abs())
        .collect();
    let mut stage: Vec<i64> = common
        .iter()
        .flat_map(|(i, l)| (0..3).filter_map(move |k| Some((i.stages[k]? - l.stages[k]?).abs())))
        .collect();
    assert!(common.iter().all(|(i, l)| i.status == l.status));
    let (s50, s_out) = (
        quantile(&mut start, 0.5),
        quantile(&mut start, 1.0 - OUTLIERS),
    );
    let (g50, g_out) = (
        quantile(&mut stage, 0.5),
        quantile(&mut stage, 1.0 - OUTLIERS),
    );
    eprintln!(
        "{} I/Os ok in both of {n}; |start difference| median {s50} ns, {:.0}% below {s_out} ns, max {}; |stage difference| median {g50} ns, {:.0}% below {g_out} ns, max {}",
        common.len(),
        100.0 * (1.0 - OUTLIERS),
        start.last().unwrap(),
        100.0 * (1.0 - OUTLIERS),
        stage.last().unwrap()
    );
    assert!(
        s_out <= STAMP_BOUND_NS,
        "start times differ by up to {s_out} ns"
    );
    assert!(
        g_out <= 2 * STAMP_BOUND_NS,
        "stages differ by up to {g_out} ns"
    );
    // Not the same clock read twice: two stamps of one event are apart by the cost of a
    // copy, which is never 0 for every event.
    assert!(
        stage.iter().any(|&d| d > 0),
        "every stage identical: not two recorders"
    );
    for p in [&data, &live, &imp, &json] {
        let _ = std::fs::remove_file(p);
    }
}

/// A pipe-mode capture (`perf record -o -`), from a file and from standard input; and
/// `stat --input`, `report` and `plot` of a capture; and a capture on perf's default
/// clock, whose start times are said to be relative.
#[test]
fn pipe_mode_and_the_other_readers_of_a_capture() {
    let test = "pipe_mode_and_the_other_readers_of_a_capture";
    if !perf_ready(test) {
        return;
    }
    let l = LoopDev::new("import-pipe", 32);
    l.scheduler("mq-deadline");
    let line = perf_line(&l);
    let data = tmp("import-pipe.data");
    let dd = format!(
        "dd if=/dev/zero of={} bs=4k count=37 oflag=direct status=none",
        l.dev
    );
    run_ok(
        Command::new("sh")
            .arg("-c")
            .arg(format!("{line} -q -o - -- {dd} > {}", data.display())),
    );
    let csv = tmp("import-pipe.csv");
    let err = import(&data, &csv);
    assert_eq!(read_csv(&csv).len(), 37, "{err}");
    assert!(err.contains("a pipe-mode capture"), "{err}");
    let out = run_ok(Command::new("sh").arg("-c").arg(format!(
        "{} import - < {}",
        bin(),
        data.display()
    )));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.lines().count(), 38, "{text}");
    assert!(text.lines().skip(1).all(|r| r.ends_with(",ok")), "{text}");

    // stat --input and report: the same counts, from the same capture.
    let out = run_ok(Command::new(bin()).args(["stat", "--input"]).arg(&data));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        table_count(&text, &[&l.name, "write"], "q2c"),
        Some(37),
        "{text}"
    );
    let out = run_ok(Command::new(bin()).arg("report").arg(&data));
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        table_count(&text, &[&l.name, "write"], "q2c"),
        Some(37),
        "{text}"
    );
    let svg = tmp("import-pipe.svg");
    run_ok(
        Command::new(bin())
            .arg("plot")
            .arg(&data)
            .arg("-o")
            .arg(&svg),
    );
    assert!(read(&svg).contains("<svg"));

    // Without -k: perf's default clock, said so; the rows are still the I/Os.
    let plain = line.replace(" -k mono", "");
    assert_ne!(plain, line);
    run_ok(
        Command::new("sh")
            .arg("-c")
            .arg(format!("{plain} -q -o {} -- {dd}", data.display())),
    );
    let err = import(&data, &csv);
    assert_eq!(read_csv(&csv).len(), 37, "{err}");
    assert!(
        err.contains("perf's default clock (no -k): start times are relative"),
        "{err}"
    );
    drop(RemoveOnPass(vec![data, csv, svg]));
}

/// The types of the records in a file-mode perf.data's data section.
fn record_types(data: &Path) -> Vec<u32> {
    records(&std::fs::read(data).unwrap())
        .into_iter()
        .map(|(_, ty)| ty)
        .collect()
}

/// Where each record of a file-mode perf.data's data section starts, and its type, up
/// to a record of size 0 (which no perf writes).
fn records(d: &[u8]) -> Vec<(usize, u32)> {
    let (mut at, end) = data_section(d);
    let end = end.min(d.len());
    let mut found = Vec::new();
    while at + 8 <= end {
        found.push((at, u32::from_le_bytes(d[at..at + 4].try_into().unwrap())));
        let size = u16::from_le_bytes(d[at + 6..at + 8].try_into().unwrap()) as usize;
        if size == 0 {
            break;
        }
        at += size;
    }
    found
}

/// The data section of a file-mode perf.data: its start and its end.
fn data_section(d: &[u8]) -> (usize, usize) {
    let le64 = |at: usize| u64::from_le_bytes(d[at..at + 8].try_into().unwrap()) as usize;
    // perf_file_header: magic, size, attr_size, attrs section, data section (offset, size).
    (le64(40), le64(40) + le64(48))
}

/// `perf record -z` (zstd-compressed records, one stream through the whole file, an
/// event split between two records at times): every I/O is a row, in file and pipe
/// mode, but for the few the kernel's drops cut.
/// The rows of `n` 4 KiB writes covering the device's first `n` blocks, once each. A
/// sample the kernel counted and never wrote makes its I/O `incomplete` (a perf.data
/// cannot say), one lost to a full ring `dropped` (perf's LOST record says so), and perf
/// has written a sample the tracepoint never fired (see the first test): a few rows in
/// thousands may be off, no more. Samples perf lost to a full ring (the exit line's
/// `lost`, from its LOST records; perf's reader starved of CPU by a busy host) each take
/// at most one I/O with them, its row gone or `dropped`.
fn every_write(rows: &[Row], n: u64, why: &str) {
    const SLACK: u64 = 16;
    let lost = common::exit_count(why, "lost");
    let (ok, off): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r["status"] == "ok");
    let what = format!("{} rows, {} not ok: {off:?}\n{why}", rows.len(), off.len());
    assert!(
        ok.len() as u64 + lost + SLACK >= n && off.len() as u64 <= lost + SLACK,
        "{what}"
    );
    let mut sectors: Vec<u64> = ok.iter().map(|r| num(r, "sector")).collect();
    sectors.sort_unstable();
    sectors.dedup();
    assert_eq!(sectors.len(), ok.len(), "a block twice: {what}");
    for r in &ok {
        assert!(
            num(r, "sector") % 8 == 0 && num(r, "sector") < n * 8,
            "{r:?}"
        );
        assert_eq!(
            (r["op"].as_str(), r["bytes"].as_str()),
            ("write", "4096"),
            "{r:?}"
        );
        assert!(
            inum(r, "d2c_ns") > 0 && inum(r, "q2c_ns") >= inum(r, "d2c_ns"),
            "{r:?}"
        );
    }
    // A sample missing without a word is `incomplete`; one perf's LOST record counts
    // (its ring was full) makes its I/O `dropped`.
    for r in &off {
        assert!(
            ["incomplete", "dropped"].contains(&r["status"].as_str()),
            "{what}"
        );
    }
}

#[test]
fn a_compressed_capture_imports_every_io() {
    let test = "a_compressed_capture_imports_every_io";
    if !perf_ready(test) {
        return;
    }
    let l = LoopDev::new("import-zstd", 32);
    l.scheduler("mq-deadline");
    // perf's default rings: a busy host can starve perf, compressing as it reads, into
    // LOST records (3,403 samples of 24,000 once in a soak), which `every_write` allows
    // for. Larger rings (-m 2048) made it worse: perf -z then left samples out of its
    // file without a LOST record (951 of 24,000 in CI, `perf script` agreeing).
    let line = perf_line(&l).replacen("perf record", "perf record -z", 1);
    let data = tmp("import-zstd.data");
    let csv = tmp("import-zstd.csv");
    // 8,000 writes of 4 KiB, one after the other over the whole device: 24,000 samples
    // in a few dozen compressed records.
    let n = 8000u64;
    let dd = format!(
        "dd if=/dev/zero of={} bs=4k count={n} oflag=direct status=none",
        l.dev
    );
    for pipe in [false, true] {
        let to = if pipe {
            format!("-o - -- {dd} > {}", data.display())
        } else {
            format!("-o {} -- {dd}", data.display())
        };
        run_ok(Command::new("sh").arg("-c").arg(format!("{line} -q {to}")));
        if !pipe {
            let types = record_types(&data);
            // PERF_RECORD_COMPRESSED (81) or, from perf 6.16, COMPRESSED2 (83).
            let compressed = types.iter().filter(|&&t| t == 81 || t == 83).count();
            assert!(
                compressed > 1,
                "perf -z wrote {compressed} compressed records"
            );
            assert!(
                !types.contains(&9),
                "a sample outside the compressed records"
            );
        }
        let err = import(&data, &csv);
        every_write(&read_csv(&csv), n, &format!("pipe {pipe}: {err}"));
    }
    for p in [&data, &csv] {
        let _ = std::fs::remove_file(p);
    }
}

/// `perf record --threads` writes a directory: a header file `data` and the samples in
/// `data.N`, one file per CPU's ring with no FINISHED_ROUND. The directory imports to
/// exactly the rows of what `perf inject` merges of it into one file (the same samples,
/// each ring's in 2 MiB pieces one after the other, sorted whole by the crate), and with
/// `-z` (which `perf inject` cannot merge: it puts several compressed streams into one)
/// to every I/O; `stat --input` and `report` read it too. The header file alone and a
/// ring's file alone are refused, naming the directory.
#[test]
fn a_directory_capture_imports_as_its_merge_does() {
    let test = "a_directory_capture_imports_as_its_merge_does";
    if !perf_ready(test) {
        return;
    }
    let l = LoopDev::new("import-dir", 32);
    l.scheduler("mq-deadline");
    let dir = tmp("import-dir.data");
    let merged = tmp("import-dir-merged.data");
    let (csv, merged_csv) = (tmp("import-dir.csv"), tmp("import-dir-merged.csv"));
    // perf writes both as directories; a file of either name is a leftover too.
    let clean = || {
        for p in [&dir, &merged] {
            let _ = std::fs::remove_dir_all(p);
            let _ = std::fs::remove_file(p);
        }
        for p in [&csv, &merged_csv] {
            let _ = std::fs::remove_file(p);
        }
    };
    // Two writers at once, on whichever CPUs the scheduler gives them, each over its
    // half of the first `n` blocks: the files' samples interleave in time.
    let n = 8000u64;
    let dd = |skip: u64| {
        format!(
            "dd if=/dev/zero of={} bs=4k count={} seek={skip} oflag=direct status=none",
            l.dev,
            n / 2
        )
    };
    let work = format!("sh -c '{} & {}; wait'", dd(0), dd(n / 2));
    for z in ["", " -z"] {
        clean();
        // perf's default rings, as in `a_compressed_capture_imports_every_io`: with -m
        // 2048, `--threads -z` left samples out of its files now and then without a
        // LOST record (3 runs of 7 in the test; by hand, 835 of 24,000 samples once in
        // 6 runs, `perf script` counting the same as import).
        let line = perf_line(&l).replacen("perf record", &format!("perf record --threads{z}"), 1);
        run_ok(
            Command::new("sh")
                .arg("-c")
                .arg(format!("{line} -q -o {} -- {work}", dir.display())),
        );
        let threads = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_str().unwrap().starts_with("data.")
            })
            .count();
        assert!(threads >= 1, "perf --threads wrote no data.N");
        let err = import(&dir, &csv);
        let rows = read_csv(&csv);
        every_write(&rows, n, &format!("--threads{z}: {err}"));
        // stat --input and report read the directory as import does.
        let q2c = rows.iter().filter(|r| !r["q2c_ns"].is_empty()).count();
        for args in [&["stat", "--input"][..], &["report"]] {
            let out = run_ok(Command::new(bin()).args(args).arg(&dir));
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(
                table_count(&text, &[&l.name, "write"], "q2c"),
                Some(q2c as u64),
                "{args:?}: {text}"
            );
        }
        if z.is_empty() {
            // perf inject prints a warning about kcore it could not copy: not a failure.
            let st = Command::new("perf")
                .args(["inject", "-i"])
                .arg(&dir)
                .arg("-o")
                .arg(&merged)
                .stderr(std::process::Stdio::null())
                .status()
                .unwrap();
            assert!(st.success(), "perf inject: {st:?}");
            let merged_err = import(&merged, &merged_csv);
            // Read one ring per CPU, not sorted whole in memory.
            assert!(
                merged_err.contains("records are read one ring per CPU and merged by time"),
                "{merged_err}"
            );
            assert_eq!(
                std::fs::read(&csv).unwrap(),
                std::fs::read(&merged_csv).unwrap(),
                "the directory's rows differ from its merge's:\n{err}\n{merged_err}"
            );
        }
    }
    // The header file alone, and one ring's file (`data.0`: no header of its own) by
    // import and by report, are refused, naming the directory.
    assert!(
        dir.join("data.0").is_file(),
        "perf --threads wrote no data.0"
    );
    for (args, file, what) in [
        (
            "import",
            "data",
            "the header file of a directory capture (perf record --threads)",
        ),
        (
            "import",
            "data.0",
            "one ring's samples of a directory capture (perf record --threads)",
        ),
        (
            "report",
            "data.0",
            "one ring's samples of a directory capture (perf record --threads)",
        ),
    ] {
        let out = Command::new(bin())
            .arg(args)
            .arg(dir.join(file))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args} {file}: {err}");
        assert!(
            err.contains(what) && err.contains(&format!("import the directory, {}", dir.display())),
            "{args} {file}: {err}"
        );
    }
    clean();
}

/// A capture without the queue insert: the line `list --perf-record --stages d2c`
/// prints, and the classic two events (issue, complete) with no filter. Every I/O is a
/// row with d2c and empty q2d/q2c, and the exit says why they are empty. A capture of
/// one task or one CPU is imported with a warning; one perf itself sampled (`-F`) is
/// refused.
#[test]
fn a_capture_of_issue_and_complete_only_gives_d2c_rows() {
    let test = "a_capture_of_issue_and_complete_only_gives_d2c_rows";
    if !perf_ready(test) {
        return;
    }
    let l = LoopDev::new("import-d2c", 32);
    l.scheduler("mq-deadline");
    let out = run_ok(Command::new(bin()).args([
        "list",
        "--perf-record",
        "block",
        "-d",
        &l.name,
        "--stages",
        "d2c",
    ]));
    let listed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!listed.contains("block_rq_insert"), "{listed}");
    let classic = "perf record -a -e block:block_rq_issue -e block:block_rq_complete".to_string();
    let data = tmp("import-d2c.data");
    let csv = tmp("import-d2c.csv");
    let dd = format!(
        "dd if=/dev/zero of={} bs=4k count=37 oflag=direct status=none",
        l.dev
    );
    for line in [listed, classic] {
        run_ok(
            Command::new("sh")
                .arg("-c")
                .arg(format!("{line} -q -o {} -- {dd}", data.display())),
        );
        let err = import(&data, &csv);
        let rows: Vec<_> = read_csv(&csv)
            .into_iter()
            .filter(|r| r["device"] == l.name)
            .collect();
        // Stock perf too can miss a sample the kernel never wrote (no LOST record; seen
        // once with a 180 k IOPS fio on the other loop device): a row may lack its end
        // only for a completion the capture itself is short of, and a row may be missing
        // only for an issue it is short of (its completion is then unmatched).
        let (issues, completes) = disk_samples(&data, &l);
        let no_issue = 37usize.saturating_sub(issues);
        let short = 37usize.saturating_sub(completes);
        assert_eq!(rows.len(), 37 - no_issue, "{line}\n{err}");
        let mut cut = 0;
        for r in &rows {
            if r["status"] == "incomplete" && r["d2c_ns"].is_empty() {
                cut += 1;
                continue;
            }
            assert_eq!(r["status"], "ok", "{line}\n{r:?}\n{err}");
            assert!(inum(r, "d2c_ns") > 0, "{r:?}");
            assert_eq!(
                (r["q2d_ns"].as_str(), r["q2c_ns"].as_str()),
                ("", ""),
                "{r:?}"
            );
        }
        assert!(
            cut <= short,
            "{cut} rows without their end, the capture short of {short} completions\n{line}\n{err}"
        );
        assert!(
            err.contains("block_rq_insert is not in the capture: rows have d2c only"),
            "{err}"
        );
        // No warning but the one for a sample perf wrote twice (perf 6.1 does now and
        // then; seen in a soak run: `duplicates 1`, the 37 rows right), and, from the
        // unfiltered line, one for another disk whose I/O perf stopped before it
        // completed (seen in a soak run: vda's). Nothing may be said of this disk.
        for w in err.lines().filter(|l| l.contains("warning:")) {
            let twice =
                w.contains("warning: the capture holds ") && w.contains(" twice, byte for byte");
            let others = w
                .split_once("warning: none of the I/Os of ")
                .and_then(|(_, rest)| rest.split_once(" completed in the capture"))
                .is_some_and(|(devs, _)| devs.split(", ").all(|d| d != l.name));
            assert!(twice || others, "{line}\n{err}");
        }
        let out = run_ok(Command::new(bin()).args(["stat", "--input"]).arg(&data));
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            table_count(&text, &[&l.name, "write"], "d2c"),
            Some((37 - no_issue - cut) as u64),
            "{text}"
        );
    }
    // A capture of one task (no -a) or of some CPUs (-C) is imported with a warning
    // that says why I/Os are cut.
    for (scope, want) in [
        ("", "the capture followed one task (tid "),
        ("-C 0", "the capture covers only CPU 0 (1 of the host's "),
    ] {
        run_ok(Command::new("sh").arg("-c").arg(format!(
            "perf record {scope} -e block:block_rq_issue -e block:block_rq_complete -q -o {}.scope -- {dd}",
            data.display()
        )));
        let err = import(Path::new(&format!("{}.scope", data.display())), &csv);
        let online = std::thread::available_parallelism().map_or(1, |n| n.get());
        if scope.is_empty() || online > 1 {
            assert!(
                err.contains(want) && err.contains("record with -a"),
                "{err}"
            );
        }
        // When no completion ran in the task (a loop device completes in its worker),
        // that is said with the reason.
        if err.contains("none of the ") {
            assert!(
                err.contains("which watched less than the whole machine (below)"),
                "{err}"
            );
        }
    }
    drop(RemoveOnPass(vec![
        format!("{}.scope", data.display()).into()
    ]));
    // perf's own sampling (-F: a frequency) keeps some firings of each event: refused,
    // with what to do, rather than rows that pair one I/O's issue with another's end.
    run_ok(Command::new("sh").arg("-c").arg(format!(
        "perf record -a -F 100 -e block:block_rq_issue -e block:block_rq_complete -q -o {}.F -- {dd}",
        data.display()
    )));
    let out = Command::new(bin())
        .arg("import")
        .arg(format!("{}.F", data.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "perf sampled event block:block_rq_issue (at most 100 samples/s, perf record -F 100)"
        ) && err.contains("without -F or -c"),
        "{err}"
    );
    let _ = std::fs::remove_file(format!("{}.F", data.display()));
    // Named, the profile takes the capture too; a profile an event every row needs
    // is missing from is still refused.
    let out = run_ok(
        Command::new(bin())
            .args(["import", "-p", "block"])
            .arg(&data),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().count() > 37, "{text}");
    let out = Command::new(bin())
        .args(["import", "-p", "bio"])
        .arg(&data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lacks the bio profile's events block:block_bio_queue"),
        "{err}"
    );
    drop(RemoveOnPass(vec![data, csv]));
}

/// A truncated capture, a corrupted one and a file that is not one: a clear error
/// naming the file, no panic.
#[test]
fn broken_captures_are_refused_with_what_to_do() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/block-4-writes.perf.data");
    let bytes = std::fs::read(&fixture).unwrap();
    let bad = tmp("import-bad.data");
    let data_off = u64::from_le_bytes(bytes[40..48].try_into().unwrap()) as usize;
    // perf killed before its first write: data size 0, the file ends after the header.
    let mut nothing = bytes[..data_off + 4].to_vec();
    nothing[48..56].fill(0);
    let cases: [(&[u8], &str); 8] = [
        // A capture gzipped to be moved.
        (
            b"\x1f\x8b\x08\0\0\0\0\0",
            "compressed with gzip: decompress it first (`gunzip -k ",
        ),
        // Half of this small capture: its records, and the cut in the features after.
        (
            &bytes[..bytes.len() / 2],
            "cut short (a copy that stopped early?): it is 12437 bytes, but its header names sections up to byte",
        ),
        (
            &bytes[..data_off + 4],
            "before its first whole record: there is nothing to import",
        ),
        (&nothing, "had written no whole record to it"),
        (&bytes[..60], "the file is truncated or corrupted"),
        (b"PERFILE2\x10\0\0\0", "the file is truncated or corrupted"),
        (b"col1,col2\n1,2\n", "not a perf.data file"),
        // What perf leaves when the kernel refuses its events or clock (`-k boot`).
        (b"", "empty: perf wrote nothing to it"),
    ];
    for (content, want) in cases {
        std::fs::write(&bad, content).unwrap();
        let out = Command::new(bin())
            .arg("import")
            .arg(&bad)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(want) && err.contains("import-bad.data"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
    // A profile whose events the capture lacks is named with them.
    let out = Command::new(bin())
        .args(["import", "-p", "nvme"])
        .arg(&fixture)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("lacks the nvme profile's events nvme:nvme_setup_cmd"),
        "{err}"
    );
    let _ = std::fs::remove_file(bad);
}

/// A capture whose records turn bad part way (a record header with a size smaller than
/// itself, as a disk error or a bad copy leaves): the import fails with the error, and
/// the rows made before it are in the file, whole, and the exit line says how many.
/// They are the first rows the whole capture gives, line for line. (The rows of the last
/// chunk before the error were never written before: the file ended up to 64 KiB short.)
#[test]
fn a_capture_that_turns_bad_part_way_keeps_the_rows_made_before_it() {
    let test = "a_capture_that_turns_bad_part_way_keeps_the_rows_made_before_it";
    if !perf_ready(test) {
        return;
    }
    let l = LoopDev::new("import-bad-mid", 128);
    l.scheduler("none");
    let data = tmp("import-bad-mid.data");
    let full = tmp("import-bad-mid-full.csv");
    let part = tmp("import-bad-mid-part.csv");
    run_ok(Command::new("sh").arg("-c").arg(format!(
        "{} -q -o {} -- dd if=/dev/zero of={} bs=4k count=20000 oflag=direct status=none",
        perf_line(&l),
        data.display(),
        l.dev
    )));
    import(&data, &full);
    let whole = std::fs::read_to_string(&full).unwrap();
    let mut bytes = std::fs::read(&data).unwrap();
    // The first record at or past the middle of the data section.
    let (start, end) = data_section(&bytes);
    let (rec, _) = records(&bytes)
        .into_iter()
        .find(|&(at, _)| at >= start + (end - start) / 2)
        .expect("a record past the data section's middle");
    bytes[rec + 6..rec + 8].copy_from_slice(&4u16.to_le_bytes());
    std::fs::write(&data, &bytes).unwrap();
    let out = Command::new(bin())
        .arg("import")
        .arg(&data)
        .arg("-o")
        .arg(&part)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("import-bad-mid.data"), "{err}");
    let said = number_after(&err, "import stopped by an error after ")
        .unwrap_or_else(|| panic!("no exit line: {err}")) as usize;
    let got = std::fs::read_to_string(&part).unwrap();
    let lines: Vec<&str> = got.lines().collect();
    let all: Vec<&str> = whole.lines().collect();
    // About half of the 20,000 writes came before the bad record, and an import hands
    // rows over a round (4,096 samples) behind its reading.
    assert!(
        said > 1000 && said + 1000 < all.len(),
        "{said} rows of {}: {err}",
        all.len() - 1
    );
    assert!(got.ends_with('\n'), "the file ends inside a row");
    assert_eq!(
        lines.len(),
        said + 1,
        "rows in the file against the exit line: {err}"
    );
    assert_eq!(
        lines[..],
        all[..said + 1],
        "not the whole capture's first rows"
    );
    drop(RemoveOnPass(vec![data, full, part]));
}

/// A real capture in which stock perf (6.1, on a 6.18 kernel) wrote every sample twice,
/// a second copy of the ring's data after the workload's exit (`perf script` shows 222
/// samples for 37 writes): each I/O once, the copies counted and warned of.
#[test]
fn samples_a_capture_holds_twice_are_used_once() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/block-37-writes-twice.perf.data");
    let csv = tmp("import-twice.csv");
    let err = import(&fixture, &csv);
    let rows = read_csv(&csv);
    assert_eq!(rows.len(), 37, "{err}");
    assert!(rows.iter().all(|r| r["status"] == "ok"), "{err}");
    let sectors: std::collections::BTreeSet<u64> = rows.iter().map(|r| num(r, "sector")).collect();
    assert_eq!(sectors, (0..37).map(|i| i * 8).collect(), "{err}");
    assert!(
        err.contains("samples 111 ")
            && err.contains("duplicates 111")
            && !err.contains("ambiguous"),
        "{err}"
    );
    assert!(err.contains("holds 111 samples twice"), "{err}");
    let _ = std::fs::remove_file(csv);
}

/// The issues and completions of `l` a capture holds, each once (stock perf may write a
/// sample twice, see `samples_a_capture_holds_twice_are_used_once`): the distinct
/// `perf script` lines of each event with its `major,minor`.
fn disk_samples(data: &Path, l: &LoopDev) -> (usize, usize) {
    let (major, minor) = major_minor(&l.dev);
    let mm = format!(": {major},{minor} ");
    let out = run_ok(Command::new("perf").args(["script", "-i"]).arg(data));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: std::collections::HashSet<&str> = text.lines().filter(|s| s.contains(&mm)).collect();
    let of = |event: &str| lines.iter().filter(|s| s.contains(event)).count();
    (of("block:block_rq_issue:"), of("block:block_rq_complete:"))
}

/// A count in `perf script -D`'s dump: the sum of `field:N` over the lines of `record`.
fn dumped(dump: &str, record: &str, field: &str) -> u64 {
    dump.lines()
        .filter(|l| l.contains(record))
        .filter_map(|l| l.rsplit(field).next()?.trim().parse::<u64>().ok())
        .sum()
}

/// A capture whose one-page rings overflowed: the exit line's `lost` is perf's own count
/// of the samples its LOST records (and its per-event LOST_SAMPLES) say were lost, and a
/// warning says what to do and what they cost. Every place is read eight times, so a
/// request that lost its issue and completion to a LOST record (which does not say of
/// which events its samples were) has a later I/O at its place to be wrongly paired
/// with: taken for samples of no event it pairs by, 27 and 39 `ok` rows per run with a
/// q2c longer than fio's slowest I/O took, and 22 and 70 completions `unmatched`.
#[test]
fn lost_records_of_a_capture_are_reported_as_a_live_run_reports_them() {
    let test = "lost_records_of_a_capture_are_reported_as_a_live_run_reports_them";
    if !kernel_ready(test)
        || !tool_ready(test, "perf", &["--version"])
        || !tool_ready(test, "fio", &["--version"])
    {
        return;
    }
    let l = LoopDev::new("import-lost", 64);
    l.scheduler("mq-deadline");
    let line = perf_line(&l);
    let (data, json) = (tmp("import-lost.data"), tmp("import-lost.json"));
    run_ok(Command::new("sh").arg("-c").arg(format!(
        "{line} -q -m 1 -o {} -- fio --name=lost --filename={} --direct=1 --ioengine=libaio \
         --iodepth=16 --rw=randread --bs=4k --size=4M --io_size=32M --output-format=json \
         --output={}",
        data.display(),
        l.dev,
        json.display()
    )));
    let dump = run_ok(Command::new("perf").args(["script", "-D", "-i"]).arg(&data));
    let dump = String::from_utf8_lossy(&dump.stdout);
    let by_ring = dumped(&dump, "PERF_RECORD_LOST:", "lost:");
    let by_event = dumped(&dump, "PERF_RECORD_LOST_SAMPLES:", "lost samples :");
    let want = by_ring.max(by_event);
    // One data page per CPU under 8192 I/Os of 3 samples each: perf must have lost some,
    // or this run checks nothing.
    assert!(want > 0, "perf lost nothing with one-page rings");
    let csv = tmp("import-lost.csv");
    let err = import(&data, &csv);
    assert!(
        err.contains(&format!("  lost {want} (")),
        "perf counts {by_ring} by LOST records, {by_event} by LOST_SAMPLES:\n{err}"
    );
    assert!(err.contains("warning: the capture lost"), "{err}");
    // As live: the I/Os the losses cut are `dropped` rows, never paired with another
    // I/O's event, so no `ok` row is slower than fio's slowest I/O.
    assert!(
        err.contains("incomplete 0") && err.contains(", costing "),
        "{err}"
    );
    let lat_max = fio_lat_max_ns(&json);
    let rows = read_csv(&csv);
    for r in &rows {
        assert!(r["status"] == "ok" || r["status"] == "dropped", "{r:?}");
        if r["status"] == "ok" {
            assert!(
                num(r, "d2c_ns") <= lat_max && num(r, "q2c_ns") <= lat_max,
                "{r:?} slower than fio's {lat_max} ns"
            );
        }
    }
    // What the I/Os that left no sample come to is an estimate, at the samples per I/O
    // of the whole ones, that takes each I/O seen in part to have lost one sample. One
    // that lost two of its three leaves one more sample to it, and so does a lost sample
    // of no I/O (beyond three per read: a merge, a requeue): it can be a third of the
    // I/Os seen in part above the reads with no row, and a third of the samples beyond
    // three per read more (184 for 144 with 156 seen in part; 1,765 for 1,690 with 209,
    // 39 samples beyond three per read; 99 for 46 with 105 seen in part, 70 beyond, of
    // which at least 53 lost: 263 lost by the 105 seen in part, who have two to lose
    // each). Below them only by what the I/Os seen in part shift the samples per I/O (a
    // few in a hundred). Not a count: the check is that it is of the right size, a tenth
    // either way beyond that.
    let number = |after: &str| -> f64 {
        (err.split(after).nth(1))
            .and_then(|s| s.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no `{after}` in the exit lines:\n{err}"))
    };
    let (whole, in_part) = (number("and ≈"), number("the lost samples cost "));
    // fio's reads: --io_size=32M in 4k blocks.
    let reads = 8192.0;
    let (samples, lost) = (number("; samples "), number("  lost "));
    let beyond = (samples + lost - 3.0 * reads).max(0.0);
    let unseen = reads - rows.len() as f64;
    assert!(
        whole >= 0.9 * unseen - 2.0 && whole <= 1.1 * unseen + in_part / 3.0 + beyond / 3.0 + 2.0,
        "≈{whole} I/Os lost whole, {unseen} of fio's reads have no row, {in_part} seen in part, \
         {beyond} samples beyond three per read:\n{err}"
    );
    for p in [&data, &csv, &json] {
        let _ = std::fs::remove_file(p);
    }
}

/// A capture perf record has not finished (still running here; killed, the file is the
/// same: perf writes the data section's size and its features only when it stops, and
/// refuses such a file itself). What perf has written imports, with `--tracefs` for the
/// event formats it writes at the end (refused without, saying so), and each row is the
/// finished capture's row of that I/O.
#[test]
fn an_unfinished_capture_imports_what_perf_has_written() {
    let test = "an_unfinished_capture_imports_what_perf_has_written";
    if !perf_ready(test) {
        return;
    }
    let l = LoopDev::new("import-unfinished", 64);
    l.scheduler("mq-deadline");
    let data = tmp("import-unfinished.data");
    let (snap, done) = (
        tmp("import-unfinished-snap.csv"),
        tmp("import-unfinished-done.csv"),
    );
    let _ = std::fs::remove_file(&data);
    // Small rings (128 pages a CPU): perf writes to the file as they fill (16 pages lost
    // samples on a loaded machine).
    let mut perf = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec {} -m 128 -q -o {}",
            perf_line(&l),
            data.display()
        ))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    started(&data, &mut perf);
    let n = 8000u64;
    run_ok(Command::new("dd").args([
        "if=/dev/zero",
        &format!("of={}", l.dev),
        "bs=4k",
        &format!("count={n}"),
        "oflag=direct",
        "status=none",
    ]));
    // perf writes a ring when it wakes: wait for a good part of the run's samples.
    let t = Instant::now();
    while std::fs::metadata(&data).unwrap().len() < 512 * 1024 {
        assert!(t.elapsed() < Duration::from_secs(20), "perf wrote nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = Command::new(bin())
        .arg("import")
        .arg(&data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("perf record did not finish this file") && err.contains("--tracefs"),
        "{err}"
    );
    let out = run_ok(
        Command::new(bin())
            .arg("import")
            .arg(&data)
            .args(["--tracefs", "/sys/kernel/tracing", "-o"])
            .arg(&snap),
    );
    let snap_err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        snap_err.contains("warning: perf record did not finish"),
        "{snap_err}"
    );
    stop(perf, "perf record");
    let done_err = import(&data, &done);
    let done_rows = read_csv(&done);
    every_write(&done_rows, n, &done_err);
    let by: HashMap<(String, String), &Row> = done_rows
        .iter()
        .map(|r| ((r["start_ns"].clone(), r["sector"].clone()), r))
        .collect();
    // 512 KiB of records: about 5,000 samples, three to an I/O.
    let ok = rows_of(&by, &read_csv(&snap), &snap_err);
    assert!(ok >= 1000, "{ok} ok rows: {snap_err}");

    // The finished capture copied short: cut in its records, then in the features
    // after them (perf's own header says where each is).
    let bytes = std::fs::read(&data).unwrap();
    let at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    let data_end = at(40) + at(48);
    let cut = tmp("import-unfinished-cut.data");
    for (len, records) in [(at(40) + at(48) * 3 / 5, false), (data_end + 8, true)] {
        std::fs::write(&cut, &bytes[..len]).unwrap();
        let out = Command::new(bin())
            .arg("import")
            .arg(&cut)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "cut short (a copy that stopped early?): it is {len} bytes"
            )) && err.contains("--tracefs"),
            "{err}"
        );
        let out = run_ok(
            Command::new(bin())
                .arg("import")
                .arg(&cut)
                .args(["--tracefs", "/sys/kernel/tracing", "-o"])
                .arg(&snap),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is cut short"), "{err}");
        let rows = read_csv(&snap);
        if records {
            assert!(err.contains("the records are all there"), "{err}");
            every_write(&rows, n, &err);
        }
        let ok = rows_of(&by, &rows, &err);
        assert!(ok >= 1000, "{ok} ok rows of {n}: {err}");
    }
    for p in [&data, &snap, &done, &cut] {
        let _ = std::fs::remove_file(p);
    }
}

/// Each `ok` row of `rows` is the row of that I/O in `by` (the rows of a whole
/// capture, by start and sector), column for column; returns how many there are.
fn rows_of(by: &HashMap<(String, String), &Row>, rows: &[Row], err: &str) -> usize {
    let ok: Vec<&Row> = rows.iter().filter(|r| r["status"] == "ok").collect();
    for r in &ok {
        let key = (r["start_ns"].clone(), r["sector"].clone());
        let whole = by
            .get(&key)
            .unwrap_or_else(|| panic!("{r:?} is no row of the finished capture: {err}"));
        for c in ["op", "bytes", "q2d_ns", "d2c_ns", "q2c_ns", "qd"] {
            assert_eq!(r[c], whole[c], "{c}: {r:?}\nfinished: {whole:?}");
        }
    }
    ok.len()
}
