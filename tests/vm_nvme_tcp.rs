//! The nvme-tcp profile on a real NVMe/TCP host and target: boots the VM rig with the
//! kernel_change/ patches (tests/vm/run.sh --patches: a 6.1 guest whose nvmet target on
//! 127.0.0.1 is backed by null_blk, the host connected to it), runs
//! tests/vm/guest/nvme-tcp.sh there, then checks on the host that every fio I/O is
//! exactly one row with every stage of its shape, that the stages add up to the
//! end-to-end time, and that merging the host-only and target-only recordings of the
//! same run gives the joint recording's rows.
//!
//! Runs only with `NTPROF_VM=1` (CI sets it): a cold rig builds a kernel (minutes).

mod common;

use common::{
    assert_clean, fio_ios, inum as num, read, read_csv, run_vm, vm_enabled, vm_paths, Row,
};
use std::path::{Path, PathBuf};
use std::process::Command;

/// I/Os per fio run; psync + O_DIRECT makes fio issue exactly this many.
const NIOS: usize = 200;

struct Shape {
    name: &'static str,
    op: &'static str,
    shape: &'static str,
    bytes: u64,
    size_class: &'static str,
    round_trips: u64,
}

const SHAPES: [Shape; 3] = [
    Shape {
        name: "randread-4k",
        op: "read",
        shape: "read",
        bytes: 4096,
        size_class: "<=4k",
        round_trips: 1,
    },
    Shape {
        name: "randwrite-4k",
        op: "write",
        shape: "write-inline",
        bytes: 4096,
        size_class: "<=4k",
        round_trips: 1,
    },
    Shape {
        name: "write-128k",
        op: "write",
        shape: "write-r2t",
        bytes: 131072,
        size_class: "<=128k",
        round_trips: 2,
    },
];

const HOST_STAGES: [&str; 6] = [
    "blk_submission_ns",
    "nvme_tcp_submission_ns",
    "waiting_ns",
    "nstack_completion_ns",
    "nvme_tcp_completion_ns",
    "blk_completion_ns",
];
const TARGET_STAGES: [&str; 4] = [
    "nstack_submission_ns",
    "nvmet_tcp_submission_ns",
    "target_subsystem_ns",
    "nvmet_tcp_completion_ns",
];

/// Every joint row: one I/O of the shape, every stage there, stages adding up.
fn check_joint(s: &Shape, rows: &[Row]) -> (i64, i64) {
    assert_eq!(rows.len(), NIOS, "{}: one row per fio I/O", s.name);
    let (mut worst, mut net_sum) = (0i64, 0i64);
    for r in rows {
        let what = format!("{} {r:?}", s.name);
        assert_eq!(r["side"], "both", "{what}");
        assert_eq!(r["chain"], "complete", "{what}");
        assert_eq!(r["status"], "ok", "{what}");
        assert_eq!(r["nvme_status"], "0x0", "{what}");
        assert_eq!(
            (r["op"].as_str(), r["shape"].as_str()),
            (s.op, s.shape),
            "{what}"
        );
        assert_eq!(num(r, "bytes") as u64, s.bytes, "{what}");
        assert_eq!(r["size_class"], s.size_class, "{what}");
        assert_eq!(num(r, "round_trips") as u64, s.round_trips, "{what}");
        assert_eq!(num(r, "target_rounds") as u64, s.round_trips, "{what}");
        assert_ne!(r["qid"], "0", "{what}");
        for c in HOST_STAGES.iter().chain(&TARGET_STAGES).chain(&[
            "network_transmission_ns",
            "host_total_ns",
            "target_total_ns",
        ]) {
            assert!(!r[*c].is_empty(), "{what}: no {c}");
        }
        let host: i64 = HOST_STAGES.iter().map(|c| num(r, c)).sum();
        let total = num(r, "host_total_ns");
        assert_eq!(host, total, "{what}: host stages must sum to host_total");
        let tgt: i64 = TARGET_STAGES.iter().map(|c| num(r, c)).sum();
        assert_eq!(tgt, num(r, "target_total_ns"), "{what}");
        let net = num(r, "network_transmission_ns");
        assert_eq!(net + tgt, num(r, "waiting_ns"), "{what}");
        // The full breakdown (waiting replaced by network + target) is end-to-end.
        let full = host - num(r, "waiting_ns") + net + tgt;
        let off = (full - total).abs();
        assert!(
            off * 100 <= total,
            "{what}: stages sum to {full}, end-to-end {total}"
        );
        worst = worst.max(off);
        assert!(net >= 0, "{what}: negative network time");
        net_sum += net;
        match s.shape {
            "read" => assert!(num(r, "c2h_pdus") >= 1, "{what}"),
            "write-r2t" => {
                assert!(num(r, "r2ts") >= 1 && num(r, "h2c_pdus") >= 1, "{what}")
            }
            _ => assert_eq!(num(r, "r2ts"), 0, "{what}"),
        }
    }
    (worst, net_sum / rows.len() as i64)
}

/// A merged row against the joint row of the same I/O, both recorded at once.
/// Identity, shape, counts, chain, status and the receive-timestamp columns must be
/// equal. Event times may differ: each perf session reads the clock for its own copy
/// of a sample (kernel/events/core.c, `__perf_event_header__init_id`), so the
/// recorders see one tracepoint hit a sample-write apart, or much more when an
/// interrupt lands between the two writes (milliseconds under TCG). Pushes the
/// difference of every other time cell to `diffs`.
fn compare(what: &str, joint: &Row, merged: &Row, diffs: &mut Vec<i64>) {
    for (k, j) in joint {
        let m = &merged[k];
        let from_recv_time = matches!(
            k.as_str(),
            "host_recv_ns" | "host_last_recv_ns" | "target_recv_ns"
        );
        if k == "start_time" {
            continue;
        }
        if k.ends_with("_ns") && !from_recv_time && !j.is_empty() && !m.is_empty() {
            diffs.push((num(joint, k) - num(merged, k)).abs());
        } else {
            assert_eq!(
                j, m,
                "{what}: column {k}\njoint  {joint:?}\nmerged {merged:?}"
            );
        }
    }
}

/// Columns only a target part fills, and only a host part fills.
const TARGET_COLS: [&str; 11] = [
    "h2c_pdus",
    "nstack_submission_ns",
    "nvmet_tcp_submission_ns",
    "target_subsystem_ns",
    "nvmet_tcp_completion_ns",
    "network_transmission_ns",
    "target_total_ns",
    "target_rounds",
    "target_recv_ns",
    "target_send_ns",
    "target_last_send_ns",
];
const HOST_COLS: [&str; 20] = [
    "ctrl",
    "disk",
    "tag",
    "round_trips",
    "send_calls",
    "c2h_pdus",
    "r2ts",
    "blk_submission_ns",
    "nvme_tcp_submission_ns",
    "waiting_ns",
    "nstack_completion_ns",
    "nvme_tcp_completion_ns",
    "blk_completion_ns",
    "network_transmission_ns",
    "host_total_ns",
    "host_start_ns",
    "host_queue_ns",
    "host_send_ns",
    "host_recv_ns",
    "host_last_recv_ns",
];

fn write_csv(path: &Path, head: &[String], rows: &[Row]) {
    let mut w = csv::Writer::from_path(path).unwrap();
    w.write_record(head).unwrap();
    for r in rows {
        w.write_record(head.iter().map(|h| r[h].as_str())).unwrap();
    }
    w.flush().unwrap();
}

/// Split joint rows into the host-only and target-only rows a recording of the same
/// samples per side would have written, merge them with the binary, and require the
/// joint rows back exactly: merge on real data, without the kernel's per-session
/// clock reads in the way.
fn split_and_merge(dir: &Path, name: &str, joint_csv: &Path, joint: &[Row]) {
    let head: Vec<String> = csv::Reader::from_path(joint_csv)
        .unwrap()
        .headers()
        .unwrap()
        .iter()
        .map(str::to_string)
        .collect();
    let blank = |r: &Row, cols: &[&str], side: &str| {
        let mut r = r.clone();
        for c in cols {
            r.insert(c.to_string(), String::new());
        }
        r.insert("side".into(), side.into());
        r
    };
    let host: Vec<Row> = joint
        .iter()
        .map(|r| blank(r, &TARGET_COLS, "host"))
        .collect();
    let target: Vec<Row> = joint
        .iter()
        .map(|r| {
            let mut t = blank(r, &HOST_COLS, "target");
            t.insert("start_ns".into(), r["target_recv_ns"].clone());
            t
        })
        .collect();
    let (hp, tp, mp) = (
        dir.join(format!("{name}-split-host.csv")),
        dir.join(format!("{name}-split-target.csv")),
        dir.join(format!("{name}-split-merged.csv")),
    );
    write_csv(&hp, &head, &host);
    write_csv(&tp, &head, &target);
    let st = Command::new(env!("CARGO_BIN_EXE_ntprof-perf"))
        .arg("merge")
        .args([&hp, &tp])
        .arg("-o")
        .arg(&mp)
        .status()
        .unwrap();
    assert!(st.success());
    let key = |r: &Row| (num(r, "host_start_ns"), r["cid"].clone());
    let mut a: Vec<Row> = joint.to_vec();
    let mut b = read_csv(&mp);
    a.sort_by_key(key);
    b.sort_by_key(key);
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(
            x, y,
            "{name}: merging the joint rows' two halves must give them back"
        );
    }
}

#[test]
fn nvme_tcp_profile_in_the_vm() {
    if !vm_enabled("nvme_tcp_profile_in_the_vm") {
        return;
    }
    let (repo, out, bin) = vm_paths("vm-nvme-tcp");
    // NTPROF_VM_REUSE=1: check the output of an earlier boot again (debugging).
    if std::env::var("NTPROF_VM_REUSE").as_deref() != Ok("1") {
        let rig = ["--patches", "--timeout", "1200"];
        run_vm(&repo, &rig, "tests/vm/guest/nvme-tcp.sh", &out, &bin, NIOS);
    }
    let dir = out.join("nvme-tcp");
    let list = read(&dir.join("list.txt"));
    assert!(
        list.lines()
            .any(|l| l.starts_with("nvme-tcp ") && l.contains(" supported:")),
        "`list` does not show nvme-tcp as supported:\n{list}"
    );
    for s in &SHAPES {
        let f = |x: &str| dir.join(format!("{}-{x}", s.name));
        assert_eq!(
            fio_ios(&dir.join(format!("fio-{}-joint.json", s.name))) as usize,
            NIOS
        );
        let err = read(&f("joint.err"));
        assert!(
            err.contains(&format!("{NIOS} I/Os written")),
            "{}:\n{err}",
            s.name
        );
        assert_clean(s.name, &err);
        let joint = read_csv(&f("joint.csv"));
        let (worst, net) = check_joint(s, &joint);
        eprintln!(
            "{}: {NIOS} rows, every stage present; stages vs end-to-end off by at most {worst} ns; mean network {net} ns",
            s.name
        );

        // Host-only and target-only recordings of the same run, merged.
        let host = read_csv(&f("host.csv"));
        let target = read_csv(&f("target.csv"));
        assert_eq!(host.len(), NIOS, "{}: host-only rows", s.name);
        assert_eq!(target.len(), NIOS, "{}: target-only rows", s.name);
        assert!(host
            .iter()
            .all(|r| r["side"] == "host" && r["chain"] == "complete"));
        assert!(target
            .iter()
            .all(|r| r["side"] == "target" && r["chain"] == "complete"));
        let merged = read_csv(&f("merged.csv"));
        let merr = read(&f("merged.err"));
        assert!(
            merr.contains(&format!("{NIOS} paired")),
            "{}: {merr}",
            s.name
        );
        // The same I/O in both: same cid and place, in host-start order.
        let key = |r: &&Row| (r["cid"].clone(), r["slba"].clone(), num(r, "host_start_ns"));
        let mut a: Vec<&Row> = joint.iter().collect();
        let mut b: Vec<&Row> = merged.iter().collect();
        a.sort_by_key(key);
        b.sort_by_key(key);
        assert_eq!(a.len(), b.len());
        let mut diffs = Vec::new();
        for (x, y) in a.iter().zip(&b) {
            compare(s.name, x, y, &mut diffs);
        }
        diffs.sort_unstable();
        let median = diffs.get(diffs.len() / 2).copied().unwrap_or(0);
        let p90 = diffs.get(diffs.len() * 9 / 10).copied().unwrap_or(0);
        eprintln!(
            "{}: merge(host-only, target-only) vs joint: same I/Os, identity, shape, chain, \
             status, receive stamps; other times differ by median {median} ns, p90 {p90} ns, \
             max {} ns (per-session clock reads)",
            s.name,
            diffs.last().copied().unwrap_or(0)
        );
        assert!(
            median <= 20_000,
            "{}: recordings disagree beyond clock-read jitter",
            s.name
        );
        split_and_merge(&dir, s.name, &f("joint.csv"), &joint);

        let report = read(&f("report.txt"));
        assert!(report.contains(&format!("{NIOS} rows")), "{report}");
        let stat = read(&f("stat.txt"));
        assert_clean(&format!("stat {}", s.name), &stat);
        let summary = stat.split("=== ").last().unwrap_or("");
        assert!(
            summary.lines().any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.first() == Some(&s.op)
                    && w.contains(&s.size_class)
                    && l.ends_with(&format!("{NIOS} I/Os"))
            }),
            "stat {}: no `{} {}` group of {NIOS} I/Os:\n{stat}",
            s.name,
            s.op,
            s.size_class
        );

        // --sample 4: about a quarter of the I/Os, whole chains, cid generation bits 0.
        let sampled = read_csv(&f("sample4.csv"));
        assert!(
            (NIOS / 8..=NIOS / 2).contains(&sampled.len()),
            "{}: {} rows with --sample 4",
            s.name,
            sampled.len()
        );
        for r in &sampled {
            assert_eq!(num(r, "cid") & 0x3000, 0, "{r:?}");
            assert_eq!(r["chain"], "complete", "{r:?}");
        }
        eprintln!("{}: --sample 4 kept {} of {NIOS}", s.name, sampled.len());
    }
}

/// Kernel-free: merge refuses CSVs of other profiles, naming the file, and writes
/// nothing for them.
#[test]
fn merge_refuses_other_csvs() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("merge-refuses");
    std::fs::create_dir_all(&dir).unwrap();
    let block = dir.join("block.csv");
    std::fs::write(
        &block,
        "start_time,start_ns,device,dev,op,sector,bytes,q2d_ns,d2c_ns,q2c_ns,error,status\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ntprof-perf"))
        .arg("merge")
        .args([&block, &block])
        .arg("-o")
        .arg(dir.join("out.csv"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("block.csv") && err.contains("nvme-tcp"),
        "{err}"
    );
    let missing = Command::new(env!("CARGO_BIN_EXE_ntprof-perf"))
        .arg("merge")
        .arg(dir.join("nope.csv"))
        .arg(&block)
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope.csv"));
}
