//! `--sample N` on the real kernel: the block profile on a loop device and the bio
//! profile on a zram device keep 1 in N I/Os, chosen in the kernel by start-sector bits,
//! with every event of a kept I/O (whole rows, nothing unmatched), and say the rate.
//! The nvme and nvmet profiles sample by command id: their chains are checked in the
//! VM (`tests/vm_nvme.rs`), their filters by the unit tests of `profile::sample`.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// The sector bits `--sample n` tests with the default 4 KiB alignment: bits 3.. .
fn mask(n: u64) -> u64 {
    (n - 1) << 3
}

/// Every kept sector with the sampled bits clear, every row whole (or `dropped`, and
/// counted so: [`ok_rows`]); returns the rows.
fn check_rows(csv: &Path, n: u64, stage: &str, err: &str) -> Vec<Row> {
    let rows = read_csv(csv);
    for r in &rows {
        let s = num(r, "sector");
        assert_eq!(s & mask(n), 0, "sector {s} has a sampled-away bit: {r:?}");
    }
    for r in ok_rows(&rows, err) {
        assert!(num(r, stage) > 0, "{r:?}");
    }
    rows
}

/// Kept within ±25 % of 1/n.
fn assert_near(kept: usize, total: usize, n: usize, what: &str) {
    let want = total / n;
    let (lo, hi) = (want * 3 / 4, want * 5 / 4);
    assert!(
        (lo..=hi).contains(&kept),
        "{what}: kept {kept} of {total}, want 1/{n} = {want} ± 25 %"
    );
}

/// The exit line's counters as the checks above read them, from a real line of a run
/// the kernel dropped a sample in.
#[test]
fn exit_counts_are_read_off_the_health_line() {
    let err = "ntprof-perf: 438506 I/Os written to x.csv; samples 877011  lost 0  \
               dropped 1 (cpu0:1), costing 1 I/Os  unmatched 0  incomplete 0  in-flight 0  \
               cut 1  ambiguous 31\n";
    assert_eq!(exit_count(err, "dropped"), 1);
    assert_eq!(exit_count(err, "cut"), 1);
    assert_eq!(exit_count(err, "ambiguous"), 31);
    assert_eq!(exit_count(err, "lost"), 0);
    assert_eq!(exit_count("samples 9  lost 0  dropped 0", "cut"), 0);
}

#[test]
fn block_sample_keeps_whole_chains_of_one_in_n() {
    if !kernel_ready("block_sample_keeps_whole_chains_of_one_in_n") {
        return;
    }
    let l = LoopDev::new("sample", 64);
    // A scheduler: every request goes insert → issue → complete, three events to keep.
    l.scheduler("mq-deadline");
    const IOS: usize = 4000;

    // Sequential 4 KiB writes: sector 8·i is kept when i is a multiple of 8.
    let csv = tmp("sample8.csv");
    let of = format!("of={}", l.dev);
    let count = format!("count={IOS}");
    let out = run_ok(
        Command::new(bin())
            .args(["record", "-p", "block", "-d", &l.dev, "--sample", "8", "-o"])
            .arg(&csv)
            .args(["--", "dd", "if=/dev/zero", &of, "bs=4k", &count])
            .args(["oflag=direct", "status=none"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_clean("block --sample 8", &err);
    assert!(err.contains("(sampled 1 in 8 I/Os)"), "{err}");
    let rows = check_rows(&csv, 8, "q2c_ns", &err);
    for r in rows.iter().filter(|r| r["status"] == "ok") {
        assert!(num(r, "d2c_ns") > 0 && !r["q2d_ns"].is_empty(), "{r:?}");
    }
    assert_near(rows.len(), IOS, 8, "sequential writes");
    let mut sectors: Vec<u64> = rows.iter().map(|r| num(r, "sector")).collect();
    sectors.sort();
    let want: Vec<u64> = (0..IOS as u64 / 8).map(|i| i * 64).collect();
    assert_eq!(
        sectors, want,
        "exactly the I/Os whose sector has bits 3..5 clear"
    );

    // Random 4 KiB reads at known offsets (one dd per read): the kept ones are exactly
    // those whose offset has the bits clear, about 1 in 4.
    let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
    let blocks: Vec<u64> = (0..600).map(|_| rng.u64(..64 * 256)).collect();
    let script: String = blocks
        .iter()
        .map(|b| {
            format!(
                "dd if={} of=/dev/null bs=4k count=1 skip={b} iflag=direct status=none\n",
                l.dev
            )
        })
        .collect();
    let sh = tmp("sample-reads.sh");
    std::fs::write(&sh, script).unwrap();
    let csv4 = tmp("sample4.csv");
    let out = run_ok(
        Command::new(bin())
            .args(["record", "-p", "block", "-d", &l.dev, "--sample", "4", "-o"])
            .arg(&csv4)
            .args(["--", "sh"])
            .arg(&sh),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_clean("block --sample 4", &err);
    let rows = check_rows(&csv4, 4, "q2c_ns", &err);
    let want = blocks.iter().filter(|b| (*b * 8) & mask(4) == 0).count();
    assert_eq!(rows.len(), want, "one row per kept read");
    assert_near(rows.len(), blocks.len(), 4, "random reads");

    // stat says the rate in its summary.
    let inf = format!("if={}", l.dev);
    let st = run_ok(
        Command::new(bin())
            .args(["stat", "-p", "block", "-d", &l.dev, "--sample", "8"])
            .args(["--interval", "0", "--", "dd", &inf, "of=/dev/null", "bs=4k"])
            .args(["count=800", "iflag=direct", "status=none"]),
    );
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(text.contains("sampled 1 in 8 I/Os"), "{text}");
    // 800 reads, 1 in 8 kept; an I/O a kernel-dropped sample cut has no q2c.
    let err = String::from_utf8_lossy(&st.stderr);
    let cut = exit_count(&err, "cut");
    assert_eq!(
        table_count(&text, &[&l.name, "read"], "q2c"),
        Some(100u64.saturating_sub(cut)),
        "{text}\n{err}"
    );

    // Not a power of two, or past 256: refused before tracing, saying what to give.
    for bad in ["3", "512"] {
        let out = Command::new(bin())
            .args(["record", "-p", "block", "-d", &l.dev, "--sample", bad])
            .args(["--duration", "1"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains("power of two"),
            "{bad}: {err}"
        );
    }
    for f in [csv, csv4, sh] {
        let _ = std::fs::remove_file(f);
    }
}

#[test]
fn bio_sample_keeps_whole_chains_of_one_in_n() {
    if !kernel_ready("bio_sample_keeps_whole_chains_of_one_in_n") {
        return;
    }
    let ctl = Path::new("/sys/class/zram-control/hot_add");
    if !ctl.exists() {
        let _ = Command::new("modprobe").arg("zram").status();
    }
    let Some(id) = std::fs::read_to_string(ctl)
        .ok()
        .map(|s| s.trim().to_string())
    else {
        let msg = "no zram (CONFIG_ZRAM) on this kernel: cannot make a bio-based device";
        if std::env::var("NTPROF_REQUIRE_KERNEL").as_deref() == Ok("1") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED bio_sample_keeps_whole_chains_of_one_in_n: {msg}");
        return;
    };
    struct Drop0(String);
    impl Drop for Drop0 {
        fn drop(&mut self) {
            let _ = std::fs::write("/sys/class/zram-control/hot_remove", &self.0);
        }
    }
    let _z = Drop0(id.clone());
    let name = format!("zram{id}");
    std::fs::write(format!("/sys/block/{name}/disksize"), "64M").unwrap();
    let dev = format!("/dev/{name}");
    const IOS: usize = 4000;
    let csv = tmp("bio-sample8.csv");
    let of = format!("of={dev}");
    let count = format!("count={IOS}");
    let out = run_ok(
        Command::new(bin())
            .args(["record", "-p", "bio", "-d", &name, "--sample", "8", "-o"])
            .arg(&csv)
            .args(["--", "dd", "if=/dev/zero", &of, "bs=4k", &count])
            .args(["oflag=direct", "status=none"]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_clean("bio --sample 8", &err);
    assert!(err.contains("(sampled 1 in 8 I/Os)"), "{err}");
    let rows = check_rows(&csv, 8, "q2c_ns", &err);
    assert_near(rows.len(), IOS, 8, "bio sequential writes");
    assert_eq!(rows.len(), IOS / 8);
    let _ = std::fs::remove_file(csv);
}
