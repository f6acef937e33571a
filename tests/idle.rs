//! A reader left on: `record` with no command while the device is idle, then busy. Its
//! own test binary, so that its record and fio run beside no other test's (binaries run
//! one after another): the one-page ring of tests/block.rs's loss test kept up with fio
//! in 2 of 4 runs with them alongside.

mod common;

use common::*;
use std::process::Command;

/// A reader left on while the device is idle wakes about 5 times a second, not 50;
/// the first round with samples brings back the short rounds (which keep a missing
/// sample's window narrow), and what arrived during a long wait is all recorded.
#[test]
fn an_idle_reader_wakes_seldom_and_busy_rounds_come_back() {
    if !kernel_ready("an_idle_reader_wakes_seldom_and_busy_rounds_come_back") {
        return;
    }
    let l = LoopDev::new("idle", 64);
    l.scheduler("none");
    let csv = tmp("idle.csv");
    let json = tmp("idle.json");
    let child = record_bg(&l, &csv);
    let pid = child.id();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let before = wakeups(pid);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let idle = wakeups(pid) - before;
    // 20 ms rounds would be ≈ 100; 200 ms ones ≈ 10, plus the second's flush.
    assert!(idle <= 30, "{idle} wake-ups in 2 s with no I/O");
    let before = wakeups(pid);
    run_ok(
        Command::new("fio")
            .args([
                "--name=idle",
                "--direct=1",
                "--ioengine=libaio",
                "--iodepth=4",
            ])
            .args(["--rw=randread", "--bs=4k", "--time_based", "--runtime=2"])
            .arg(format!("--filename={}", l.dev))
            .arg("--output-format=json")
            .arg(format!("--output={}", json.display())),
    );
    let busy = wakeups(pid) - before;
    // ≈ 50 a second while samples arrive; stuck at the idle pace it would be ≈ 10.
    assert!(busy >= 50, "{busy} wake-ups in 2 s of I/O");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.output();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_clean("idle then busy", &err);
    let rows = read_csv(&csv);
    assert_eq!(rows.len() as u64, fio_ios(&json), "{err}");
    ok_rows(&rows, &err);
    let _ = std::fs::remove_file(csv);
    let _ = std::fs::remove_file(json);
}
