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
/// written only where it is known: never deeper than fio's iodepth, and never below
/// the rows in flight at its issue, bar a handful.
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
///
/// Then the bio profile on zram (bio-based: queue and completion, two samples per I/O)
/// under the same three jobs: a bio that lost its completion took the next one's at its
/// place, ≈ 1,350 `ok` rows per run slower than fio's slowest, and its depth never left
/// (`qd` 293 where fio kept 96 in flight); 0 since such a bio is cut.
#[test]
fn under_sustained_overflow_ok_rows_stay_true_and_the_depth_is_known_or_empty() {
    let test = "under_sustained_overflow_ok_rows_stay_true_and_the_depth_is_known_or_empty";
    if !kernel_ready(test) {
        return;
    }
    // Whether the loss leaves time for depths to be known: with three quarters of the
    // samples lost a sample is nearly always unaccounted, 1 % of the depths known.
    let l = LoopDev::new("overflow", 64);
    l.scheduler("none");
    let one = Load {
        profile: "block",
        jobs: 1,
        rw: "randread",
        per_io: 2,
        depths: true,
    };
    overflow(&l.dev, "none", &one);
    l.scheduler("mq-deadline");
    let three = Load {
        jobs: 3,
        rw: "randrw",
        per_io: 3,
        depths: false,
        ..one
    };
    overflow(&l.dev, "mq-deadline", &three);
    if let Some(z) = zram(test) {
        let bio = Load {
            profile: "bio",
            per_io: 2,
            ..three
        };
        overflow(&z.dev, "bio on zram", &bio);
    }
}

/// One overflowed run: the profile, fio's jobs (each at QD32) and pattern, the samples
/// one whole I/O gives, and whether most depths must be known.
#[derive(Clone, Copy)]
struct Load {
    profile: &'static str,
    jobs: u64,
    rw: &'static str,
    per_io: u64,
    depths: bool,
}

fn overflow(dev: &str, what: &str, load: &Load) {
    let csv = tmp("overflow.csv");
    let json = tmp("overflow.json");
    let out = run_ok(
        Command::new(bin())
            .args(["record", "-p", load.profile, "--mmap-pages", "1", "-d", dev])
            .arg("-o")
            .arg(&csv)
            .args(["--", "fio", "--name=overflow", "--direct=1"])
            .args(["--ioengine=libaio", "--iodepth=32"])
            .arg(format!("--numjobs={}", load.jobs))
            .arg(format!("--rw={}", load.rw))
            .args(["--bs=4k", "--size=64m", "--time_based", "--runtime=2"])
            .arg(format!("--filename={dev}"))
            .arg("--output-format=json")
            .arg(format!("--output={}", json.display())),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let err = format!("{what}: {err}");
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
    // Not everything cut: most samples the kernel did deliver end in `ok` rows (88-100 %
    // here; 68 % through mq-deadline with a busy loop on one of the two CPUs, 83 % of the
    // samples lost). Measured against the samples, not fio's I/Os: how many a one-page
    // ring loses depends on how busy the host is (a compile beside the block phase took
    // it from 10 % to 55 %, and half fio's I/Os could no longer be whole).
    assert!(
        ok.len() as u64 * load.per_io * 3 > samples,
        "{} ok rows ({} samples each) of {samples} samples delivered: {err}",
        ok.len(),
        load.per_io
    );
    // Every stage, queue time included: fio's latency runs from before the first
    // event to after the completion.
    let stages = ["d2c_ns", "q2c_ns", "q2r_ns", "r2c_ns"];
    let cell = |r: &Row, c: &str| r.get(c).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let slower = ok
        .iter()
        .filter(|r| stages.iter().any(|c| cell(r, c) > lat_max))
        .count();
    let depth = 32 * load.jobs;
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
    // Only while the loss leaves time between the windows: with a fifth of the samples
    // lost or more (a busy host's one-page ring: 55 % beside a compile, 2026-11-29) a
    // sample is nearly always unaccounted, as in the runs below, and 3 % are known.
    if load.depths && lost * 5 < samples + lost {
        assert!(
            known * 20 > ok.len(),
            "{known} of {} with a depth: {err}",
            ok.len()
        );
    }
    if load.profile == "block" {
        let (below, deep) = depths_below_rows_in_flight(&rows, &ok);
        assert!(
            below <= few,
            "{below} of {known} depths are below the rows in flight at their issue: {err}"
        );
        eprintln!("overflow: {deep} of {known} depths known with other rows in flight");
    }
    eprintln!(
        "overflow: {} rows, {} ok, {slower} slower than fio, {deeper} deeper, {known} with a depth: {err}",
        rows.len(),
        ok.len()
    );
    let _ = std::fs::remove_file(csv);
    let _ = std::fs::remove_file(json);
}

/// Of the `ok` rows with a depth, how many have one below the I/Os the rows themselves
/// show in flight at their issue (issued at or before it, completed after it), and how
/// many have any other row in flight then. The rows are a part of the I/Os, so theirs
/// is a floor of the true depth. A depth is not checked against fio's iodepth: on a
/// loop device the block layer's depth is fio's only while the loop worker lags, and
/// on a loaded host it often keeps up (depth 1 for most I/Os of a run with nothing
/// wrong, in four soak runs beside a compile); the floor does not depend on that, and
/// the lost depths this test was written for (every `qd` 1) fall below it.
fn depths_below_rows_in_flight(rows: &[Row], ok: &[&Row]) -> (usize, usize) {
    let on_device = |r: &Row| -> Option<(u64, u64)> {
        let d2c = r.get("d2c_ns")?.parse::<u64>().ok()?;
        let q2d = r.get("q2d_ns").and_then(|v| v.parse::<u64>().ok());
        let issue = num(r, "start_ns") + q2d.unwrap_or(0);
        Some((issue, issue + d2c))
    };
    let (mut issues, mut ends): (Vec<u64>, Vec<u64>) = rows.iter().filter_map(on_device).unzip();
    issues.sort_unstable();
    ends.sort_unstable();
    let (mut below, mut deep) = (0, 0);
    for r in ok.iter().filter(|r| !r["qd"].is_empty()) {
        let Some((issue, _)) = on_device(r) else {
            continue;
        };
        let floor = issues.partition_point(|&t| t <= issue) - ends.partition_point(|&t| t <= issue);
        below += usize::from(num(r, "qd") < floor as u64);
        deep += usize::from(floor > 1);
    }
    (below, deep)
}
