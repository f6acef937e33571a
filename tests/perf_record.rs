//! `list --perf-record P`: the `perf record` command line that captures what profile P
//! needs. Run by stock perf on a loop device, it must capture exactly the events of the
//! I/Os issued, with the filters keeping everything else out.

mod common;

use common::*;
use std::process::Command;

#[test]
fn the_printed_perf_record_line_captures_the_profiles_events() {
    let test = "the_printed_perf_record_line_captures_the_profiles_events";
    if !perf_ready(test) {
        return;
    }
    let l = LoopDev::new("perfrec", 32);
    l.scheduler("mq-deadline");
    let other = LoopDev::new("perfrec-other", 32);
    let out = run_ok(Command::new(bin()).args(["list", "--perf-record", "block", "-d", &l.name]));
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        line.starts_with("perf record -a -k mono -e block:block_rq_insert --filter 'dev == "),
        "{line}"
    );
    let data = tmp("perf-record.data");
    // 20 direct writes on the traced device, 10 on another the filters must keep out.
    let script = format!(
        "{line} -q -o {data} -- sh -c 'dd if=/dev/zero of={d} bs=4k count=20 oflag=direct status=none; \
         dd if=/dev/zero of={o} bs=4k count=10 oflag=direct status=none'",
        data = data.display(),
        d = l.dev,
        o = other.dev
    );
    run_ok(Command::new("sh").args(["-c", &script]));
    let out = run_ok(
        Command::new("perf")
            .args(["script", "-F", "event", "-i"])
            .arg(&data),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let count = |e: &str| {
        text.lines()
            .filter(|l| l.trim().trim_end_matches(':') == e)
            .count()
    };
    for e in [
        "block:block_rq_insert",
        "block:block_rq_issue",
        "block:block_rq_complete",
    ] {
        assert_eq!(count(e), 20, "{e} in:\n{text}");
    }
    let _ = std::fs::remove_file(data);
}
