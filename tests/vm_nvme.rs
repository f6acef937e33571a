//! The nvme and nvmet profiles on a real NVMe/TCP host and target and on a PCIe NVMe
//! controller: boots the VM rig (tests/vm/run.sh, a 6.1 guest with an nvmet target on
//! 127.0.0.1 backed by null_blk, the host connected to it, and a QEMU-emulated PCIe
//! controller), runs tests/vm/guest/nvme-profiles.sh there, then checks on the host
//! that every I/O fio issued (reads, writes, and the flushes of its fsyncs) is exactly
//! one CSV row with the right opcode, length and place, that `stat` and `report` count
//! the same, and that --ctrl and --nsid pick one controller while both are busy.
//!
//! Runs only with `NTPROF_VM=1` (CI sets it): a cold rig builds a kernel (minutes).

mod common;

use common::{
    assert_clean, exit_count, fio_ios, fio_lat_max_ns, num, ok_rows, read, read_csv, run_vm,
    vm_enabled, vm_paths, Row,
};
use std::path::Path;

/// I/Os per fio run; psync + O_DIRECT makes fio issue exactly this many.
const NIOS: u64 = 200;
/// fio's `--size`: every I/O must fall inside it.
const SIZE: u64 = 64 << 20;

/// The disk rows must be on, as the guest found it (controller numbers follow probe
/// order, so nothing here assumes nvme0).
struct Disk {
    ctrl: String,
    disk: String,
    nsid: String,
    lba: u64,
}

impl Disk {
    /// `ctrl` file: "<instance> <cntlid> <disk>"; the NVMe/TCP namespace is nsid 1.
    fn fabrics(dir: &Path) -> Disk {
        let text = read(&dir.join("ctrl"));
        let w: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(w.len(), 3, "ctrl file: `{text}`");
        let lba = read(&dir.join("lba_size"))
            .trim()
            .parse()
            .expect("lba_size");
        Disk {
            ctrl: format!("nvme{}", w[0]),
            disk: w[2].to_string(),
            nsid: "1".into(),
            lba,
        }
    }

    /// `pcie` file: "<instance> <disk> <nsid> <lba size>".
    fn pcie(dir: &Path) -> Disk {
        let text = read(&dir.join("pcie"));
        let w: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(w.len(), 4, "pcie file: `{text}`");
        Disk {
            ctrl: format!("nvme{}", w[0]),
            disk: w[1].to_string(),
            nsid: w[2].to_string(),
            lba: w[3].parse().expect("pcie lba size"),
        }
    }
}

struct Shape {
    name: &'static str,
    opcode: &'static str,
    bs: u64,
    size_class: &'static str,
    sequential: bool,
}

const SHAPES: [Shape; 3] = [
    Shape {
        name: "randread-4k",
        opcode: "read",
        bs: 4096,
        size_class: "<=4k",
        sequential: false,
    },
    Shape {
        name: "randwrite-4k",
        opcode: "write",
        bs: 4096,
        size_class: "<=4k",
        sequential: false,
    },
    Shape {
        name: "write-128k",
        opcode: "write",
        bs: 131072,
        size_class: "<=128k",
        sequential: true,
    },
];

/// A stat/report summary holds the group row of the shape with `NIOS I/Os`.
fn assert_summary_counts(what: &str, text: &str, opcode: &str, class: &str) {
    let summary = text
        .split("=== ")
        .last()
        .unwrap_or_else(|| panic!("{what}: no summary:\n{text}"));
    let row = summary
        .lines()
        .find(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.contains(&opcode) && w.contains(&class)
        })
        .unwrap_or_else(|| panic!("{what}: no {opcode} {class} group in:\n{text}"));
    assert!(
        row.ends_with(&format!("{NIOS} I/Os")),
        "{what}: group row does not count {NIOS} I/Os: `{row}`\n{text}"
    );
    let groups = summary
        .lines()
        .filter(|l| l.ends_with(" I/Os") || l.contains(" I/Os, "))
        .count();
    assert_eq!(groups, 1, "{what}: exactly one group expected:\n{text}");
}

fn check_rows(profile: &str, shape: &Shape, rows: &[Row], disk: &Disk) {
    let what = format!("{profile} {} on {}", shape.name, disk.disk);
    let lba = disk.lba;
    let other: Vec<&Row> = rows
        .iter()
        .filter(|r| r["opcode"] != shape.opcode)
        .collect();
    assert!(
        other.is_empty(),
        "{what}: rows of other commands: {other:?}"
    );
    assert_eq!(rows.len() as u64, NIOS, "{what}: one row per fio I/O");
    let mut slbas = Vec::new();
    for r in rows {
        assert_eq!(r["status"], "ok", "{what}: {r:?}");
        assert_eq!(r["nvme_status"], "0x0", "{what}: {r:?}");
        assert_eq!(r["nsid"], disk.nsid, "{what}: {r:?}");
        assert_ne!(r["qid"], "0", "{what}: {r:?}");
        assert_eq!(num(r, "bytes"), shape.bs, "{what}: {r:?}");
        assert_eq!(num(r, "lba_size"), lba, "{what}: {r:?}");
        assert_eq!(r["size_class"], shape.size_class, "{what}: {r:?}");
        let slba = num(r, "slba");
        assert!(
            slba * lba + shape.bs <= SIZE,
            "{what}: outside fio's {SIZE} bytes: {r:?}"
        );
        assert_eq!(
            slba * lba % shape.bs,
            0,
            "{what}: fio aligns to the block size: {r:?}"
        );
        slbas.push(slba);
        match profile {
            "nvme" => {
                assert_eq!(
                    (r["ctrl"].as_str(), r["disk"].as_str()),
                    (disk.ctrl.as_str(), disk.disk.as_str()),
                    "{what}: {r:?}"
                );
                let driver = num(r, "driver_ns");
                assert!(driver > 0, "{what}: {r:?}");
                // Every I/O is a bio first: the block stage must be joined.
                let blk = num(r, "blk_to_driver_ns");
                assert_eq!(num(r, "total_ns"), blk + driver, "{what}: {r:?}");
            }
            _ => {
                assert_eq!(r["device"], "/dev/nullb0", "{what}: {r:?}");
                assert!(num(r, "target_ns") > 0, "{what}: {r:?}");
            }
        }
    }
    if shape.sequential {
        let step = shape.bs / lba;
        let want: Vec<u64> = (0..NIOS).map(|i| i * step).collect();
        assert_eq!(
            slbas, want,
            "{what}: sequential writes from LBA 0, in order"
        );
    }
}

/// The runs under --ctrl, --nsid, --qid and --admin (all random 4k reads).
fn check_selection(dir: &Path, fabrics: &Disk) {
    let read_shape = &SHAPES[0];
    let rows = |n: &str| read_csv(&dir.join(format!("{n}.csv")));
    let err = |n: &str| {
        let e = read(&dir.join(format!("{n}.err")));
        assert_clean(n, &e);
        assert_eq!(
            fio_ios(&dir.join(format!("fio-{n}.json"))),
            NIOS,
            "{n}: fio"
        );
        e
    };

    err("nvme-sel");
    check_rows("nvme", read_shape, &rows("nvme-sel"), fabrics);
    err("nvmet-sel");
    check_rows("nvmet", read_shape, &rows("nvmet-sel"), fabrics);

    let e = err("nvme-nsid2");
    assert!(e.contains("0 I/Os written"), "nvme-nsid2:\n{e}");
    assert!(rows("nvme-nsid2").is_empty());

    err("nvme-qid1");
    let q1 = rows("nvme-qid1");
    assert!(q1.len() as u64 <= NIOS);
    assert!(
        q1.iter()
            .all(|r| r["qid"] == "1" && r["opcode"] == "read" && r["status"] == "ok"),
        "{q1:?}"
    );

    err("nvme-admin");
    let (admin, io): (Vec<Row>, Vec<Row>) = rows("nvme-admin")
        .into_iter()
        .partition(|r| r["qid"] == "0");
    check_rows("nvme", read_shape, &io, fabrics);
    for r in &admin {
        assert_eq!(
            (r["disk"].as_str(), r["status"].as_str()),
            ("", "ok"),
            "{r:?}"
        );
        assert!(
            !r["opcode"].starts_with("0x"),
            "admin opcode without a name: {r:?}"
        );
    }
}

#[test]
fn nvme_and_nvmet_profiles_in_the_vm() {
    if !vm_enabled("nvme_and_nvmet_profiles_in_the_vm") {
        return;
    }
    let (repo, out, bin) = vm_paths("vm-nvme");
    // NTPROF_VM_PATCHED=1 boots the kernel_change/ kernel instead: its stock nvme/nvmet
    // events are the same, and CI then builds one guest kernel instead of two.
    let patched = std::env::var("NTPROF_VM_PATCHED").as_deref() == Ok("1");
    let rig: &[&str] = if patched { &["--patches"] } else { &[] };
    run_vm(
        &repo,
        rig,
        "tests/vm/guest/nvme-profiles.sh",
        &out,
        &bin,
        NIOS as usize,
    );

    let dir = out.join("nvme-profiles");
    let fabrics = Disk::fabrics(&dir);
    let list = read(&dir.join("list.txt"));
    for p in ["nvme ", "nvmet "] {
        assert!(
            list.lines()
                .any(|l| l.starts_with(p) && l.contains(" supported:") && !l.contains("NOT ")),
            "`list` does not show {p}as supported:\n{list}"
        );
    }
    for shape in &SHAPES {
        for profile in ["nvme", "nvmet"] {
            let base = format!("{profile}-{}", shape.name);
            let fio = fio_ios(&dir.join(format!("fio-{base}.json")));
            assert_eq!(fio, NIOS, "{base}: fio did not issue exactly {NIOS} I/Os");
            let err = read(&dir.join(format!("{base}.err")));
            assert!(
                err.contains(&format!("{NIOS} I/Os written")),
                "{base}:\n{err}"
            );
            assert_clean(&base, &err);
            check_rows(
                profile,
                shape,
                &read_csv(&dir.join(format!("{base}.csv"))),
                &fabrics,
            );
            let report = read(&dir.join(format!("{base}.report")));
            assert!(
                report.contains(&format!("profile {profile}, {NIOS} rows")),
                "{base}:\n{report}"
            );
            assert_summary_counts(
                &format!("report {base}"),
                &report,
                shape.opcode,
                shape.size_class,
            );

            let stat = read(&dir.join(format!("stat-{base}.txt")));
            assert_eq!(fio_ios(&dir.join(format!("fio-stat-{base}.json"))), NIOS);
            assert_clean(&format!("stat {base}"), &stat);
            assert_summary_counts(
                &format!("stat {base}"),
                &stat,
                shape.opcode,
                shape.size_class,
            );
        }
    }
    check_selection(&dir, &fabrics);
    check_overflow(&dir);
    check_pcie(&dir, &fabrics);
}

/// One-page rings under reads at depth 32 from two jobs (the guest's overflow runs):
/// a command that lost its completion must never take a later command's. Every row is
/// `ok` or `dropped` (no more than the I/Os cut), no `ok` row is slower than fio's
/// slowest I/O nor deeper than its two jobs' 64, and the rows and the I/Os none of
/// whose events arrived come to fio's count.
fn check_overflow(dir: &Path) {
    for (profile, stage) in [("nvme", "driver_ns"), ("nvmet", "target_ns")] {
        let what = format!("overflow, {profile}");
        let err = read(&dir.join(format!("overflow-{profile}.err")));
        let fio_json = dir.join(format!("fio-overflow-{profile}.json"));
        let (ios, slowest) = (fio_ios(&fio_json), fio_lat_max_ns(&fio_json));
        let rows = read_csv(&dir.join(format!("overflow-{profile}.csv")));
        let ok = ok_rows(&rows, &err);
        let slow: Vec<_> = ok.iter().filter(|r| num(r, stage) > slowest).collect();
        assert!(
            slow.is_empty(),
            "{what}: {} ok rows slower than fio's slowest I/O ({slowest} ns), first {:?}\n{err}",
            slow.len(),
            slow.first()
        );
        let deep = (ok.iter()).filter(|r| !r["qd"].is_empty() && num(r, "qd") > 64);
        assert_eq!(deep.count(), 0, "{what}: rows deeper than 64\n{err}");
        assert!(
            rows.len() as u64 <= ios,
            "{what}: {} rows, fio {ios}",
            rows.len()
        );
        let missing = exit_count(&err, "lost") + exit_count(&err, "dropped");
        eprintln!(
            "{what}: fio {ios} I/Os, slowest {slowest} ns; {} rows, {} ok, {} cut; {missing} samples missing",
            rows.len(),
            ok.len(),
            exit_count(&err, "cut")
        );
        if missing == 0 {
            assert_eq!(
                ok.len() as u64,
                ios,
                "{what}: nothing lost, every I/O ok\n{err}"
            );
            continue;
        }
        // By the kernel's count of commands set up (received, on the target).
        common::check_unseen(&what, &err, ios, rows.len() as u64);
    }
}

/// fio's count of one kind of I/O (`"read"`, `"write"`, `"sync"`) in its JSON: the
/// `total_ios` of the first section of that name.
fn fio_section_ios(path: &Path, section: &str) -> u64 {
    let text = read(path);
    let key = format!("\"{section}\"");
    let start = text
        .match_indices(&key)
        .map(|(i, _)| i + key.len())
        .find(|&i| {
            let rest = text[i..].trim_start();
            rest.starts_with(':') && rest[1..].trim_start().starts_with('{')
        })
        .unwrap_or_else(|| panic!("{}: no {section} section", path.display()));
    let sub = &text[start..];
    let at = sub.find("\"total_ios\"").expect("total_ios") + 11;
    let digits: String = sub[at..]
        .trim_start_matches([' ', ':'])
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().expect("total_ios is a number")
}

/// The PCIe controller: the same shapes through the PCIe driver, writes each followed by
/// an fsync (one flush command each), and --ctrl/--nsid while both controllers work.
fn check_pcie(dir: &Path, fabrics: &Disk) {
    if !dir.join("pcie").exists() {
        // The rig runs with the emulated controller unless NTPROF_VM_PCIE=0.
        assert_eq!(
            std::env::var("NTPROF_VM_PCIE").as_deref(),
            Ok("0"),
            "the guest found no PCIe NVMe disk"
        );
        eprintln!("PCIe NVMe controller left out (NTPROF_VM_PCIE=0)");
        return;
    }
    let pcie = Disk::pcie(dir);
    assert_ne!(pcie.ctrl, fabrics.ctrl, "two controllers expected");
    assert_ne!(
        pcie.nsid, fabrics.nsid,
        "the rig gives the PCIe namespace nsid 2"
    );
    let err = |n: &str| {
        let e = read(&dir.join(format!("{n}.err")));
        assert_clean(n, &e);
        e
    };
    for shape in &SHAPES {
        let base = format!("pcie-{}", shape.name);
        assert_eq!(
            fio_ios(&dir.join(format!("fio-{base}.json"))),
            NIOS,
            "{base}"
        );
        let e = err(&base);
        assert!(e.contains(&format!("{NIOS} I/Os written")), "{base}:\n{e}");
        check_rows(
            "nvme",
            shape,
            &read_csv(&dir.join(format!("{base}.csv"))),
            &pcie,
        );
        let report = read(&dir.join(format!("{base}.report")));
        assert!(
            report.contains(&format!("profile nvme, {NIOS} rows")),
            "{base}:\n{report}"
        );
        eprintln!("{base}: {NIOS} rows = fio's {NIOS} I/Os on {}", pcie.disk);
    }

    // Sequential 4k writes, each but the last followed by fsync: fio counts the fsyncs
    // in its "sync" section, and each must be one flush command between two writes.
    let base = "pcie-write-4k-fsync";
    let json = dir.join(format!("fio-{base}.json"));
    let (writes, syncs) = (
        fio_section_ios(&json, "write"),
        fio_section_ios(&json, "sync"),
    );
    assert_eq!(writes, NIOS, "{base}: fio writes");
    assert!(syncs > 0, "{base}: fio issued no fsync");
    assert_eq!(fio_ios(&json), writes + syncs, "{base}: fio's sections");
    let e = err(base);
    assert!(
        e.contains(&format!("{} I/Os written", writes + syncs)),
        "{base}:\n{e}"
    );
    let mut rows = read_csv(&dir.join(format!("{base}.csv")));
    rows.sort_by_key(|r| num(r, "start_ns"));
    let (flushes, w): (Vec<Row>, Vec<Row>) =
        rows.iter().cloned().partition(|r| r["opcode"] == "flush");
    let write_4k = Shape {
        name: "write-4k (fsync)",
        opcode: "write",
        bs: 4096,
        size_class: "<=4k",
        sequential: true,
    };
    check_rows("nvme", &write_4k, &w, &pcie);
    assert_eq!(flushes.len() as u64, syncs, "{base}: one flush per fsync");
    for r in &flushes {
        let what = format!("{base}: {r:?}");
        assert_eq!(
            (r["ctrl"].as_str(), r["disk"].as_str(), r["nsid"].as_str()),
            (pcie.ctrl.as_str(), pcie.disk.as_str(), pcie.nsid.as_str()),
            "{what}"
        );
        assert_eq!(
            (r["status"].as_str(), r["nvme_status"].as_str()),
            ("ok", "0x0"),
            "{what}"
        );
        assert_ne!(r["qid"], "0", "{what}");
        // A flush names no blocks, and its block request has no sector to join on.
        assert_eq!(
            (r["slba"].as_str(), r["bytes"].as_str()),
            ("", "0"),
            "{what}"
        );
        assert_eq!(r["blk_to_driver_ns"], "", "{what}");
        assert!(num(r, "driver_ns") > 0, "{what}");
    }
    // psync: write, flush, write, flush, ..., write — nothing else in between.
    let ops: Vec<&str> = rows.iter().map(|r| r["opcode"].as_str()).collect();
    for (i, op) in ops.iter().enumerate() {
        let want = if i % 2 == 0 { "write" } else { "flush" };
        assert_eq!(*op, want, "{base}: row {i} in time order: {ops:?}");
    }
    eprintln!(
        "{base}: {} write rows + {} flush rows = fio's {writes} writes + {syncs} fsyncs",
        w.len(),
        flushes.len()
    );

    // Random reads on both disks at once, seen by five recorders.
    let fio_f = fio_ios(&dir.join("fio-both-fabrics.json"));
    let fio_p = fio_ios(&dir.join("fio-both-pcie.json"));
    assert_eq!((fio_f, fio_p), (NIOS, NIOS), "both: fio");
    let read_shape = &SHAPES[0];
    let both = |n: &str| {
        err(&format!("both-{n}"));
        read_csv(&dir.join(format!("both-{n}.csv")))
    };
    let (on_p, on_f): (Vec<Row>, Vec<Row>) = both("all")
        .into_iter()
        .partition(|r| r["ctrl"] == pcie.ctrl);
    check_rows("nvme", read_shape, &on_f, fabrics);
    check_rows("nvme", read_shape, &on_p, &pcie);
    for (n, disk) in [
        ("ctrl-pcie", &pcie),
        ("nsid-pcie", &pcie),
        ("ctrl-fabrics", fabrics),
        ("nsid-fabrics", fabrics),
    ] {
        // check_rows wants exactly fio's reads, all on that one disk.
        check_rows("nvme", read_shape, &both(n), disk);
        eprintln!("both busy, {n}: {NIOS} rows, all on {}", disk.disk);
    }
}
