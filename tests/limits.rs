//! RLIMIT_NOFILE on the real kernel: a run raises its own soft limit when its events need
//! more descriptors, and says which limit to change when the hard limit is too low.

mod common;

use common::*;
use std::process::Command;

/// `ntprof-perf record` for a moment under `prlimit --nofile=SOFT:HARD`.
fn record_with_nofile(soft: u64, hard: u64) -> std::process::Output {
    Command::new("prlimit")
        .arg(format!("--nofile={soft}:{hard}"))
        .args([bin(), "record", "--duration", "0.1", "-o", "/dev/null"])
        .output()
        .expect("running prlimit")
}

#[test]
fn a_low_soft_limit_is_raised_and_a_low_hard_limit_is_named() {
    if !kernel_ready("a_low_soft_limit_is_raised_and_a_low_hard_limit_is_named") {
        return;
    }
    let cpus = ntprof_perf::perf::online_cpus().unwrap().len() as u64;
    // 6 descriptors: stdio, the output and one tracefs read at a time fit, the block
    // profile's events on even one CPU do not.
    let out = record_with_nofile(6, 4096);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "soft limit 6 with hard 4096 must be raised: {err}"
    );
    assert!(err.contains("I/Os written"), "{err}");

    let out = record_with_nofile(6, 6);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let events = ntprof_perf::profile::find("block").unwrap().events().len();
    let needed = ntprof_perf::perf::fds_needed(events, cpus as usize);
    for want in [
        "out of file descriptors".to_string(),
        "RLIMIT_NOFILE is 6 (hard limit 6)".to_string(),
        format!("ulimit -Hn {needed}"),
        "fewer events".to_string(),
    ] {
        assert!(err.contains(&want), "no `{want}` in: {err}");
    }
    assert_eq!(
        err.matches("Too many open files").count(),
        1,
        "the OS error is printed once: {err}"
    );
}
