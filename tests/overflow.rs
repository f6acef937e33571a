//! Rings far too small for the load, all through a run: a tenth of the samples lost,
//! many I/Os with no event at all, each sector read over and over. Its own test binary,
//! so that its load runs beside no other test's (binaries run one after another).

mod common;

use common::*;
use std::process::Command;

/// `record --mmap-pages 1` under 4k random reads at QD32 on a 64 MiB device: 1-12 %
/// of the samples lost here, ≈300,000 I/Os, each sector read ≈18 times. Before the
/// missing samples were kept per window (2026-11-27), 2,000-4,000 `ok` rows were a
/// request whose completion was lost paired with the completion of a later I/O at its
/// sector whose issue was lost (slower than fio's slowest I/O), and every row's `qd`
/// was 1. Now a handful at most are slower than fio's slowest, and the depth is
/// written only where it is known: never deeper than fio's iodepth, bar a handful.
/// Every row is `ok` or `dropped`: a request that lost its completion and was not
/// found in time was left `incomplete` at the end, 1 run in 3, until the end cut it too;
/// the last ones to lose theirs, too recent for the end's bound, 1 fresh CI run (the
/// end now cuts every request issued before a completion went missing).
///
/// Then the same through mq-deadline (three samples per I/O) under three jobs of reads
/// and writes, where ≈ 75 % of the samples are lost: an insert whose issue and
/// completion were lost, paired with the issue of a later I/O at its sector whose
/// insert was lost, made 130-180 `ok` rows per run queued longer than fio's slowest
/// I/O took whole (2026-11-29); 0-2 since such an insert is cut.
#[test]
fn under_sustained_overflow_ok_rows_stay_true_and_the_depth_is_known_or_empty() {
    if !kernel_ready("under_sustained_overflow_ok_rows_stay_true_and_the_depth_is_known_or_empty") {
        return;
    }
    // (scheduler, jobs, rw, the least share of fio's I/Os that are `ok` rows, and
    // whether the loss leaves time for depths to be known: with three quarters of the
    // samples lost a sample is nearly always unaccounted, 1 % of the depths known)
    overflow("none", 1, "randread", 2, true);
    overflow("mq-deadline", 3, "randrw", 10, false);
}

fn overflow(scheduler: &str, jobs: u64, rw: &str, ok_share: u64, depths: bool) {
    let l = LoopDev::new("overflow", 64);
    l.scheduler(scheduler);
    let csv = tmp("overflow.csv");
    let json = tmp("overflow.json");
    let out = run_ok(
        Command::new(bin())
            .args(["record", "--mmap-pages", "1", "-d", &l.dev, "-o"])
            .arg(&csv)
            .args(["--", "fio", "--name=overflow", "--direct=1"])
            .args(["--ioengine=libaio", "--iodepth=32"])
            .arg(format!("--numjobs={jobs}"))
            .arg(format!("--rw={rw}"))
            .args(["--bs=4k", "--size=64m", "--time_based", "--runtime=2"])
            .arg(format!("--filename={}", l.dev))
            .arg("--output-format=json")
            .arg(format!("--output={}", json.display())),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let err = format!("{scheduler}: {err}");
    let rows = read_csv(&csv);
    let samples = number_after(&err, "; samples ").unwrap_or(0);
    let lost = exit_count(&err, "lost");
    // The premise: the loss is sustained, not a burst. How much a one-page ring loses
    // is the reader's speed against the kernel's: 0.94-11.7 % in a 20-run soak here,
    // where 1 % failed 2 runs of 20 with ≈ 3,600-4,000 samples lost on both CPUs, still
    // a loss all through the run. A quarter of the least seen is the floor.
    assert!(
        lost * 400 > samples + lost,
        "{lost} of {samples} samples lost: the ring kept up: {err}"
    );
    let lat_max = fio_lat_max_ns(&json);
    let ok = ok_rows(&rows, &err);
    assert!(
        ok.len() as u64 * ok_share > fio_ios(&json),
        "{} ok rows: {err}",
        ok.len()
    );
    // Queue time included (mq-deadline): fio's latency runs from before the insert to
    // after the completion.
    let cell = |r: &Row, c: &str| if r[c].is_empty() { 0 } else { num(r, c) };
    let slower = ok
        .iter()
        .filter(|r| cell(r, "d2c_ns").max(cell(r, "q2c_ns")) > lat_max)
        .count();
    let depth = 32 * jobs;
    let deeper = ok
        .iter()
        .filter(|r| !r["qd"].is_empty() && num(r, "qd") > depth)
        .count();
    let known = ok.iter().filter(|r| !r["qd"].is_empty()).count();
    // A handful: 0-8 of each in runs here, against thousands before.
    let few = rows.len() / 5000;
    assert!(
        slower <= few,
        "{slower} ok rows slower than fio's slowest ({lat_max} ns): {err}"
    );
    assert!(
        deeper <= few,
        "{deeper} rows deeper than fio's {depth}: {err}"
    );
    // Not every depth given up: the windows close once nothing can be found for them.
    let ones = ok.iter().filter(|r| r["qd"] == "1").count();
    if depths {
        assert!(
            known * 20 > ok.len(),
            "{known} of {} with a depth",
            ok.len()
        );
        assert!(ones * 2 < known, "{ones} of {known} depths are 1");
    }
    eprintln!(
        "overflow: {} rows, {slower} slower than fio, {deeper} deeper, {known} with a depth: {err}",
        rows.len()
    );
    let _ = std::fs::remove_file(csv);
    let _ = std::fs::remove_file(json);
}
