//! The bio profile on a real device-mapper stack, and hot sectors on real NVMe/TCP:
//! boots the VM rig, runs tests/vm/guest/stacked.sh there, then checks on the host
//! that every I/O fio issued is exactly one row.
//!
//! - bio: a dm-linear target over a loop device: each bio submitted to `dm-N` is one
//!   row naming the loop device it was remapped to, at the linear table's offset; and a
//!   second dm-linear over the first, traced alone: rows name the loop device at the
//!   bottom, at both offsets.
//! - hot sectors: two fio jobs at QD 32 reading a 64 KiB region (16 blocks), so many
//!   requests to one sector are in flight at once: rows still equal fio's count and
//!   nothing is unmatched (nvme; nvme-tcp with complete chains on the patched kernel).
//!
//! Runs only with `NTPROF_VM=1` (CI sets it).

mod common;

use common::{assert_clean, fio_ios, num, read, read_csv, run_vm, vm_enabled, vm_paths};

const NIOS: u64 = 200;

#[test]
fn bio_on_dm_linear_and_hot_sectors_in_the_vm() {
    if !vm_enabled("bio_on_dm_linear_and_hot_sectors_in_the_vm") {
        return;
    }
    let (repo, out, bin) = vm_paths("vm-stacked");
    let patched = std::env::var("NTPROF_VM_PATCHED").as_deref() == Ok("1");
    // A device delay keeps many commands in flight: on loopback without one, the
    // NVMe/TCP host and target finish each command before fio submits the next.
    let rig: &[&str] = if patched {
        &["--patches", "--nullb-delay-us", "1000"]
    } else {
        &["--nullb-delay-us", "1000"]
    };
    run_vm(
        &repo,
        rig,
        "tests/vm/guest/stacked.sh",
        &out,
        &bin,
        NIOS as usize,
    );
    let o = out.join("stacked");
    let stack = read(&o.join("stack"));
    let s: Vec<&str> = stack.split_whitespace().collect();
    let (dm, lo, offset) = (s[0], s[1], s[2].parse::<u64>().unwrap());
    // Two levels traced at the top: every bio names the loop device at the bottom and its
    // sector there; the bios of the dm-linear between are followed, not rows.
    let stack2 = read(&o.join("stack2"));
    let s2: Vec<&str> = stack2.split_whitespace().collect();
    let (top, lo2, offset2) = (s2[0], s2[2], s2[3].parse::<u64>().unwrap());

    for (name, op, bs, dm, lo, offset) in [
        ("bio-randwrite-4k", "write", 4096, dm, lo, offset),
        ("bio-read-64k", "read", 65536, dm, lo, offset),
        ("bio-two-levels", "write", 4096, top, lo2, offset2),
    ] {
        let err = read(&o.join(format!("{name}.err")));
        assert_clean(name, &err);
        let rows = read_csv(&o.join(format!("{name}.csv")));
        let fio = fio_ios(&o.join(format!("fio-{name}.json")));
        assert_eq!(fio, NIOS, "{name}: fio's own count");
        assert_eq!(rows.len() as u64, fio, "{name}: one row per bio fio issued");
        for r in &rows {
            assert_eq!((r["device"].as_str(), r["op"].as_str()), (dm, op), "{r:?}");
            assert_eq!(num(r, "bytes"), bs, "{r:?}");
            assert_eq!(r["target"], lo, "remapped to the loop device: {r:?}");
            assert_eq!(num(r, "target_sector"), num(r, "sector") + offset, "{r:?}");
            assert_eq!(r["status"], "ok");
            let (q2r, r2c, q2c) = (num(r, "q2r_ns"), num(r, "r2c_ns"), num(r, "q2c_ns"));
            assert!(r2c > 0 && q2c == q2r + r2c, "{r:?}");
        }
        let report = read(&o.join(format!("{name}.report")));
        assert!(
            report.contains(&format!("profile bio, {fio} rows")),
            "{report}"
        );
    }

    let mut hot = vec!["hot-nvme"];
    if patched {
        hot.push("hot-nvme-tcp");
    }
    for name in hot {
        let err = read(&o.join(format!("{name}.err")));
        assert_clean(name, &err);
        let rows = read_csv(&o.join(format!("{name}.csv")));
        let fio = fio_ios(&o.join(format!("fio-{name}.json")));
        assert_eq!(fio, 2 * NIOS, "{name}: two jobs");
        assert_eq!(rows.len() as u64, fio, "{name}: one row per I/O fio issued");
        assert!(rows.iter().all(|r| r["status"] == "ok"), "{name}");
        // 16 blocks, 64 requests in flight: the same sector is in flight many times.
        let mut per: std::collections::HashMap<&str, u64> = Default::default();
        for r in &rows {
            *per.entry(r["slba"].as_str()).or_default() += 1;
        }
        assert!(per.len() <= 16, "{name}: {per:?}");
        // Many commands were in flight at once on those 16 blocks.
        let qd = rows.iter().map(|r| num(r, "qd")).max().unwrap_or(0);
        assert!(
            qd >= 8,
            "{name}: at most {qd} in flight: no hot sectors were exercised"
        );
        if name == "hot-nvme-tcp" {
            assert!(rows.iter().all(|r| r["chain"] == "complete"), "{name}");
        }
    }

    // --sample 4 keeps 1 in 4 commands in the kernel (cid generation bits), every kept
    // one whole: submitted and completed, nothing unmatched.
    for p in ["nvme", "nvmet"] {
        let name = format!("sample-{p}");
        let err = read(&o.join(format!("{name}.err")));
        assert_clean(&name, &err);
        assert!(err.contains("sampled 1 in 4"), "{name}: {err}");
        let rows = read_csv(&o.join(format!("{name}.csv")));
        let fio = fio_ios(&o.join(format!("fio-{name}.json")));
        assert_eq!(fio, 2 * NIOS, "{name}");
        let kept = rows.len() as u64;
        assert!(
            (fio / 4 * 3 / 4..=fio / 4 * 5 / 4).contains(&kept),
            "{name}: kept {kept} of {fio}, not about 1 in 4"
        );
        let stage = if p == "nvme" {
            "driver_ns"
        } else {
            "target_ns"
        };
        for r in &rows {
            assert_eq!(r["status"], "ok", "{name}: {r:?}");
            assert!(num(r, stage) > 0, "{name}: {r:?}");
            assert_eq!(
                num(r, "cid") & 0x3000,
                0,
                "{name}: cid bits 12-13 clear: {r:?}"
            );
        }
    }
}
