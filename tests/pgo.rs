//! The profile-guided build (`scripts/build-pgo.sh`, what `scripts/demo.sh` installs)
//! is the same program laid out differently: it must write what the ordinary build
//! writes. `scripts/test.sh` builds it and names it in `NTPROF_PGO_BIN`; without that
//! variable these tests say they are skipped, or fail under `NTPROF_REQUIRE_PGO=1`
//! (test.sh sets it: CI always checks the build the README installs).

mod common;

use common::{
    bin, exit_count, fio_ios, kernel_ready, ok_rows, read_csv, run_ok, tmp, unseen_ios, LoopDev,
    RemoveOnPass,
};
use std::path::{Path, PathBuf};
use std::process::Command;

fn pgo_bin(test: &str) -> Option<PathBuf> {
    match std::env::var_os("NTPROF_PGO_BIN") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var("NTPROF_REQUIRE_PGO").as_deref() == Ok("1") => {
            panic!("{test}: NTPROF_REQUIRE_PGO=1 but NTPROF_PGO_BIN is not set (scripts/build-pgo.sh builds it)")
        }
        None => {
            eprintln!("SKIPPED {test}: NTPROF_PGO_BIN is not set");
            None
        }
    }
}

/// Captures of stock `perf record`, imported by both builds: byte for byte the same
/// rows and the same exit line.
#[test]
fn the_profile_guided_build_imports_a_capture_to_the_same_rows() {
    let test = "the_profile_guided_build_imports_a_capture_to_the_same_rows";
    let Some(pgo) = pgo_bin(test) else {
        return;
    };
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for name in [
        "block-4-writes.perf.data",
        "block-37-writes-twice.perf.data",
    ] {
        let mut outs = Vec::new();
        for (tag, b) in [("plain", Path::new(bin())), ("pgo", pgo.as_path())] {
            let csv = tmp(&format!("pgo-{tag}-{name}.csv"));
            let out = run_ok(
                Command::new(b)
                    .arg("import")
                    .arg(fixtures.join(name))
                    .arg("-o")
                    .arg(&csv),
            );
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            outs.push((
                std::fs::read(&csv).unwrap(),
                err.replace(&*csv.to_string_lossy(), ""),
            ));
            let _ = std::fs::remove_file(&csv);
        }
        assert!(
            !outs[0].0.is_empty(),
            "{name}: the plain build wrote nothing"
        );
        assert_eq!(outs[0].0, outs[1].0, "{name}: the rows differ");
        assert_eq!(outs[0].1, outs[1].1, "{name}: the exit lines differ");
    }
}

/// A live run: every I/O fio issued is one row, as with the ordinary build.
#[test]
fn the_profile_guided_build_records_every_io_of_a_live_run() {
    let test = "the_profile_guided_build_records_every_io_of_a_live_run";
    let Some(pgo) = pgo_bin(test) else {
        return;
    };
    if !kernel_ready(test) {
        return;
    }
    let l = LoopDev::new("pgo", 64);
    let (csv, json) = (tmp("pgo-live.csv"), tmp("pgo-live.json"));
    let _clean = RemoveOnPass(vec![csv.clone(), json.clone()]);
    let out = run_ok(
        Command::new(&pgo)
            .args(["record", "--device", &l.dev, "-o"])
            .arg(&csv)
            .args(["--", "fio", "--name=pgo", "--filename"])
            .arg(&l.dev)
            .args([
                "--direct=1",
                "--ioengine=libaio",
                "--iodepth=8",
                "--rw=randrw",
                "--bsrange=4k-64k",
                "--size=32m",
                "--output-format=json",
                "--output",
            ])
            .arg(&json),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let rows = read_csv(&csv);
    let ios = fio_ios(&json);
    assert!(ios > 1000, "fio issued {ios} I/Os");
    // Every row `ok`, or `dropped` as the exit line counts (a sample the kernel never
    // wrote: docs/how-it-works.md); with the requests merged into others, the
    // completions unmatched and the I/Os that left nothing, fio's count exactly.
    ok_rows(&rows, &err);
    let accounted = rows.len() as u64
        + exit_count(&err, "merged")
        + exit_count(&err, "unmatched")
        + unseen_ios(&err).unwrap_or(0);
    assert_eq!(accounted, ios, "one row per I/O fio issued: {err}");
}
