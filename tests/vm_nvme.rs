//! The nvme and nvmet profiles on a real NVMe/TCP host and target: boots the VM rig
//! (tests/vm/run.sh, a 6.1 guest with an nvmet target on 127.0.0.1 backed by null_blk
//! and the host connected to it), runs tests/vm/guest/nvme-profiles.sh there, then
//! checks on the host that every I/O fio issued is exactly one CSV row with the right
//! opcode, length and place, and that `stat` and `report` count the same.
//!
//! Runs only with `NTPROF_VM=1` (CI sets it): a cold rig builds a kernel (minutes).

mod common;

use common::{assert_clean, fio_ios, num, read, read_csv, run_vm, vm_enabled, vm_paths, Row};
use std::path::Path;

/// I/Os per fio run; psync + O_DIRECT makes fio issue exactly this many.
const NIOS: u64 = 200;
/// fio's `--size`: every I/O must fall inside it.
const SIZE: u64 = 64 << 20;

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

fn check_rows(profile: &str, shape: &Shape, rows: &[Row], lba: u64) {
    let what = format!("{profile} {}", shape.name);
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
        assert_eq!(r["nsid"], "1", "{what}: {r:?}");
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
                    ("nvme0", "nvme0n1"),
                    "{r:?}"
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
fn check_selection(dir: &Path, lba: u64) {
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
    check_rows("nvme", read_shape, &rows("nvme-sel"), lba);
    err("nvmet-sel");
    check_rows("nvmet", read_shape, &rows("nvmet-sel"), lba);

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
    check_rows("nvme", read_shape, &io, lba);
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
    let lba: u64 = read(&dir.join("lba_size"))
        .trim()
        .parse()
        .expect("lba_size");
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
                lba,
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
    check_selection(&dir, lba);
}
