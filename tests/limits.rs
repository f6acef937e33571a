//! RLIMIT_NOFILE on the real kernel: a run raises its own soft limit when its events need
//! more descriptors, and says which limit to change when the hard limit is too low. And
//! the test runs' own leftovers: what a killed run leaves is cleared by a later one.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

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

/// What a test run stopped by Ctrl-C leaves behind (its scratch directory, a loop device
/// attached to an image on a tmpfs mounted in it, its files) is cleared by a later run
/// once it is an hour old; the directory of a live run, or of a run that ended moments
/// ago (its files are there to be looked at), is not.
#[test]
fn a_killed_runs_loop_devices_mounts_and_files_are_cleared_by_a_later_run() {
    if !kernel_ready("a_killed_runs_loop_devices_mounts_and_files_are_cleared_by_a_later_run") {
        return;
    }
    let root = tmp("sweep");
    let _ = std::fs::remove_dir_all(&root);
    let gone = || {
        let mut c = Command::new("true").spawn().unwrap();
        c.wait().unwrap();
        c.id()
    };
    let dir = |pid: u32| root.join(format!("ntprof-test-{pid}"));
    let (killed, recent, live) = (dir(gone()), dir(gone()), dir(std::process::id()));
    for d in [&killed, &recent, &live] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("io.csv"), "a,b\n").unwrap();
    }
    // Left as Ctrl-C leaves one: no Drop ran.
    let mnt = killed.join("loop-x");
    let l = std::mem::ManuallyDrop::new(LoopDev::at(mnt.clone(), 1));
    let (dev, img) = (l.dev.clone(), l.image());
    let attached = || {
        let f = format!(
            "/sys/block/{}/loop/backing_file",
            dev.trim_start_matches("/dev/")
        );
        std::fs::read_to_string(f).is_ok_and(|b| b.trim().starts_with(img.to_str().unwrap()))
    };
    let mounted = || read(Path::new("/proc/self/mounts")).contains(mnt.to_str().unwrap());
    assert!(attached() && mounted());
    for d in [&killed, &live] {
        run_ok(Command::new("touch").args(["-d", "2 hours ago"]).arg(d));
    }

    sweep(&root, Duration::from_secs(3600));
    let (was_attached, was_mounted) = (attached(), mounted());
    if was_attached {
        let _ = Command::new("losetup").args(["-d", &dev]).status();
    }
    if was_mounted {
        let _ = Command::new("umount").arg(&mnt).status();
    }
    let kept = |d: &PathBuf| d.join("io.csv").exists();
    let (killed_kept, recent_kept, live_kept) = (kept(&killed), kept(&recent), kept(&live));
    let _ = std::fs::remove_dir_all(&root);
    assert!(!was_attached, "{dev} still attached to {}", img.display());
    assert!(!was_mounted, "{} still mounted", mnt.display());
    assert!(
        !killed_kept && !killed.exists(),
        "{} kept",
        killed.display()
    );
    assert!(
        recent_kept,
        "{} cleared though changed moments ago",
        recent.display()
    );
    assert!(
        live_kept,
        "{} cleared though its process runs",
        live.display()
    );
}
