//! The bio profile on the real kernel: a zram device (bio-based: the kernel traces
//! its bios' completions) driven by direct dd I/O, and what `record`, `stat` and
//! `report` say about it. The device-mapper stack (dm-linear over a loop device, with
//! remaps) is proven in the VM (`tests/vm_nvme.rs`), since a host kernel may lack
//! device-mapper.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn bio_rows_equal_the_bios_dd_issued() {
    let Some(z) = zram("bio_rows_equal_the_bios_dd_issued") else {
        return;
    };
    let csv = tmp("bio-zram.csv");
    let of = format!("of={}", z.dev);
    let out = run_ok(
        Command::new(bin())
            .args(["record", "--profile", "bio", "--device", &z.name(), "-o"])
            .arg(&csv)
            .args(["--", "dd", "if=/dev/zero", &of, "bs=4k", "count=150"])
            .args(["oflag=direct", "status=none"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("150 I/Os written"), "{err}");
    assert_clean("bio record", &err);
    let rows = read_csv(&csv);
    assert_eq!(rows.len(), 150, "one row per bio dd wrote");
    let mut sectors: Vec<u64> = rows.iter().map(|r| num(r, "sector")).collect();
    sectors.sort();
    assert_eq!(sectors, (0..150).map(|i| i * 8).collect::<Vec<u64>>());
    for r in &rows {
        assert_eq!(r["device"], z.name());
        assert_eq!((r["op"].as_str(), r["bytes"].as_str()), ("write", "4096"));
        assert_eq!(r["target"], "", "zram remaps nothing: no target");
    }
    for r in ok_rows(&rows, &err) {
        assert!(num(r, "q2c_ns") > 0, "{r:?}");
    }

    // stat and report count the same bios, grouped by device, target and op.
    let sin = format!("if={}", z.dev);
    let st = run_ok(
        Command::new(bin())
            .args([
                "stat",
                "--profile",
                "bio",
                "-d",
                &z.name(),
                "--interval",
                "0",
            ])
            .args(["--", "dd", &sin, "of=/dev/null", "bs=64k", "count=40"])
            .args(["iflag=direct", "status=none"]),
    );
    let text = String::from_utf8_lossy(&st.stdout);
    // 40 reads, less the I/Os a sample the kernel dropped without a LOST record cut.
    let st_err = String::from_utf8_lossy(&st.stderr);
    let cut = exit_count(&st_err, "cut");
    let n = table_count(&text, &[&z.name(), "read"], "q2c").unwrap_or(0);
    assert!(
        n <= 40 && n + cut >= 40,
        "{n} of 40, cut {cut}: {text}\n{st_err}"
    );
    let rep = run_ok(Command::new(bin()).arg("report").arg(&csv));
    let rep = String::from_utf8_lossy(&rep.stdout);
    assert!(rep.contains("profile bio, 150 rows"), "{rep}");
    // The record's 150 writes, less those its dropped rows hold (no q2c).
    let cut = exit_count(&err, "cut");
    let n = table_count(&rep, &[&z.name(), "write"], "q2c").unwrap_or(0);
    assert!(n <= 150 && n + cut >= 150, "{n} of 150, cut {cut}: {rep}");
    let _ = std::fs::remove_file(csv);
}

#[test]
fn request_based_disks_are_refused_with_what_to_use() {
    if !kernel_ready("request_based_disks_are_refused_with_what_to_use") {
        return;
    }
    let l = LoopDev::new("bio-refuse", 16);
    let out = Command::new(bin())
        .args([
            "record",
            "--profile",
            "bio",
            "-d",
            &l.name,
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("request-based") && err.contains("--profile block"),
        "{err}"
    );
    // A flag of another profile is refused, naming who takes it.
    let out = Command::new(bin())
        .args([
            "record",
            "--profile",
            "bio",
            "--qid",
            "1",
            "--duration",
            "1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--qid does not apply to the bio profile"),
        "{err}"
    );
    // A capture cannot be refused before it was made: imported with the bio profile,
    // its bios of a request-based disk never complete, and the exit says why.
    if !perf_ready("request_based_disks_are_refused_with_what_to_use") {
        return;
    }
    let data = tmp("bio-refuse.data");
    let kdev = kernel_dev(&l.dev);
    let filter = format!("dev == {kdev}");
    run_ok(
        Command::new("perf")
            .args(["record", "-q", "-a", "-o"])
            .arg(&data)
            .args(["-e", "block:block_bio_queue", "--filter", &filter])
            .args(["-e", "block:block_bio_complete", "--filter", &filter])
            .args([
                "--",
                "dd",
                "if=/dev/zero",
                "bs=4k",
                "count=20",
                "oflag=direct",
            ])
            .arg(format!("of={}", l.dev)),
    );
    let out = run_ok(
        Command::new(bin())
            .args(["import", "-p", "bio", "-o", "/dev/null"])
            .arg(&data),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("incomplete 20 ")
            && err.contains("none of the 20 I/Os completed in the capture")
            && err.contains("--profile block"),
        "{err}"
    );
    let _ = std::fs::remove_file(data);
}

/// A capture of every device (`perf record -a`) holds the bios of request-based disks
/// too, which never complete as bios: `import --profile bio` names them (and only
/// them) instead of leaving a count of `incomplete` rows unexplained.
#[test]
fn an_import_names_the_disks_whose_bios_never_complete() {
    let test = "an_import_names_the_disks_whose_bios_never_complete";
    let Some(z) = zram(test) else {
        return;
    };
    if !perf_ready(test) {
        return;
    }
    let l = LoopDev::new("bio-import", 16);
    let (data, csv) = (tmp("bio-all.data"), tmp("bio-all.csv"));
    let _clean = RemoveOnPass(vec![data.clone(), csv.clone()]);
    let dd = |dev: &str, n: u32| {
        format!("dd if=/dev/zero of={dev} bs=4k count={n} oflag=direct status=none")
    };
    run_ok(
        Command::new("perf")
            .args(["record", "-q", "-a", "-o"])
            .arg(&data)
            .args([
                "-e",
                "block:block_bio_queue",
                "-e",
                "block:block_bio_complete",
            ])
            .args(["--", "sh", "-c"])
            .arg(format!("{}; {}", dd(&z.dev, 120), dd(&l.dev, 80))),
    );
    let out = run_ok(
        Command::new(bin())
            .args(["import", "--profile", "bio", "-o"])
            .arg(&csv)
            .arg(&data),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let warning = err
        .lines()
        .find(|l| l.contains("completed in the capture"))
        .unwrap_or_else(|| panic!("no warning naming the disks: {err}"));
    assert!(warning.contains(&format!("{} (", l.name)), "{warning}");
    assert!(
        !warning.contains(&z.name()),
        "zram's bios completed: {warning}"
    );
    let rows = read_csv(&csv);
    let of = |name: &str| -> Vec<&Row> { rows.iter().filter(|r| r["device"] == name).collect() };
    // The loop disk's every row `incomplete`, as many as the warning says (80, less
    // any sample the kernel dropped: counted, compared, never assumed).
    let on_loop = of(&l.name).len();
    assert!(
        on_loop > 60,
        "{on_loop} rows of the loop disk's 80 bios: {err}"
    );
    assert!(
        of(&l.name).iter().all(|r| r["status"] == "incomplete"),
        "{err}"
    );
    let dev = read(Path::new(&format!("/sys/block/{}/dev", l.name)));
    assert!(
        warning.contains(&format!("{} ({}, {on_loop} rows)", l.name, dev.trim())),
        "{warning}"
    );
    // zram's completed: `ok`, or `dropped` as the exit line counts.
    let on_zram: Vec<Row> = of(&z.name()).into_iter().cloned().collect();
    assert!(ok_rows(&on_zram, &err).len() > 100, "{err}");
}
