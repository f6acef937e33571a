//! Shared helpers for integration tests that drive the real kernel.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ntprof-perf")
}

/// Whether the kernel can be used (root, tracefs mounted or mountable). When it cannot
/// and `NTPROF_REQUIRE_KERNEL=1` (CI), this panics; otherwise it prints a loud skip.
pub fn kernel_ready(test: &str) -> bool {
    let why = if !nix::unistd::geteuid().is_root() {
        Some("not running as root".to_string())
    } else if !Path::new("/sys/kernel/tracing/events").is_dir()
        && !Path::new("/sys/kernel/debug/tracing/events").is_dir()
    {
        let _ = Command::new("mount")
            .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
            .status();
        (!Path::new("/sys/kernel/tracing/events").is_dir())
            .then(|| "tracefs is not mounted and could not be mounted".to_string())
    } else {
        None
    };
    match why {
        None => true,
        Some(why) => {
            if std::env::var("NTPROF_REQUIRE_KERNEL").as_deref() == Ok("1") {
                panic!("{test}: NTPROF_REQUIRE_KERNEL=1 but the kernel is not usable: {why}");
            }
            eprintln!("SKIPPED {test}: {why}");
            false
        }
    }
}

/// A loop device backed by a file on tmpfs; detached and removed on drop.
pub struct LoopDev {
    pub dev: String,
    pub name: String,
    dir: PathBuf,
}

impl LoopDev {
    pub fn new(tag: &str, mib: u32) -> LoopDev {
        LoopDev::at(tmp(&format!("loop-{tag}")), mib)
    }

    /// A loop device on an image in a tmpfs mounted at `dir`.
    pub fn at(dir: PathBuf, mib: u32) -> LoopDev {
        mount_tmpfs(&dir);
        let img = dir.join("img");
        let f = std::fs::File::create(&img).unwrap();
        f.set_len(mib as u64 * 1024 * 1024).unwrap();
        let out = run_ok(Command::new("losetup").args(["-f", "--show"]).arg(&img));
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let name = dev.trim_start_matches("/dev/").to_string();
        LoopDev { dev, name, dir }
    }

    /// A loop device whose image has an MBR with these partitions (start, sectors),
    /// scanned by the kernel on attach (`losetup -P`): `{dev}p1`, `{dev}p2`, …
    pub fn partitioned(tag: &str, mib: u32, parts: &[(u32, u32)]) -> LoopDev {
        let dir = tmp(&format!("loop-{tag}"));
        mount_tmpfs(&dir);
        let img = dir.join("img");
        let mut mbr = vec![0u8; 512];
        for (i, &(start, size)) in parts.iter().enumerate() {
            let e = &mut mbr[446 + 16 * i..462 + 16 * i];
            e[4] = 0x83;
            e[8..12].copy_from_slice(&start.to_le_bytes());
            e[12..16].copy_from_slice(&size.to_le_bytes());
        }
        mbr[510..].copy_from_slice(&[0x55, 0xaa]);
        std::fs::write(&img, &mbr).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.set_len(mib as u64 * 1024 * 1024).unwrap();
        let out = run_ok(
            Command::new("losetup")
                .args(["-P", "-f", "--show"])
                .arg(&img),
        );
        let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
        let name = dev.trim_start_matches("/dev/").to_string();
        let l = LoopDev { dev, name, dir };
        let last = format!("{}p{}", l.dev, parts.len());
        let appeared = || {
            (0..100).any(|_| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                Path::new(&last).exists()
            })
        };
        if !appeared() {
            // A kernel without the MBR parser (CONFIG_MSDOS_PARTITION unset, as on these
            // VMs) scans nothing: partx reads the table and adds them (BLKPG).
            run_ok(Command::new("partx").args(["-a", &l.dev]));
            assert!(
                appeared(),
                "{last} did not appear after `partx -a {}`",
                l.dev
            );
        }
        l
    }

    /// The image the device is attached to.
    pub fn image(&self) -> PathBuf {
        self.dir.join("img")
    }

    /// Choose the I/O scheduler (mq-deadline makes requests go through insert → Q2D).
    pub fn scheduler(&self, s: &str) {
        let p = format!("/sys/block/{}/queue/scheduler", self.name);
        std::fs::write(&p, s).unwrap_or_else(|e| panic!("{p}: {e}"));
    }
}

/// A tmpfs at `dir` for a loop device's image, so that the I/O is pure CPU work and no
/// other filesystem's I/O mixes in.
fn mount_tmpfs(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    run_ok(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256m", "tmpfs"])
            .arg(dir),
    );
}

impl Drop for LoopDev {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn run_ok(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One CSV row: column → value.
pub type Row = std::collections::HashMap<String, String>;

/// Rows of a CSV as maps of column → value.
pub fn read_csv(path: &Path) -> Vec<Row> {
    let mut rd = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let heads: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
    rd.records()
        .map(|r| {
            let r = r.unwrap();
            heads
                .iter()
                .cloned()
                .zip(r.iter().map(String::from))
                .collect()
        })
        .collect()
}

/// A path for a test's scratch file or directory, in this test process's own directory
/// (see [`scratch`]).
pub fn tmp(name: &str) -> PathBuf {
    scratch().join(name)
}

/// Files a test removes when it ends without failing, each with the `.old` that
/// `perf record` makes of a file it writes over. A failed test's files stay, to be
/// looked at (see [`scratch`]).
#[derive(Default)]
pub struct RemoveOnPass(pub Vec<PathBuf>);

impl Drop for RemoveOnPass {
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        for p in &self.0 {
            let _ = std::fs::remove_file(p);
            let mut old = p.clone().into_os_string();
            old.push(".old");
            let _ = std::fs::remove_file(old);
        }
    }
}

/// `$TMPDIR/ntprof-test-PID`: what this test process writes (its files, its loop
/// devices' images on their tmpfs mounts). Tests remove what they make, but not when
/// they fail or are killed: the first call clears what test processes that are gone
/// left (at once when nothing; otherwise after an hour: their files, and the loop
/// devices and mounts of a run stopped by Ctrl-C), so that a failed run's files stay to
/// be looked at for a while and runs do not fill `/tmp`.
pub fn scratch() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        sweep(&tmp, std::time::Duration::from_secs(3600));
        let dir = tmp.join(format!("ntprof-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        dir
    })
}

/// Clear the scratch directories in `tmp` of test processes that are gone: an empty one
/// at once, one unchanged for `age` with its loop devices detached, its mounts unmounted,
/// then its files.
pub fn sweep(tmp: &Path, age: std::time::Duration) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = (name.to_str())
            .and_then(|n| n.strip_prefix("ntprof-test-"))
            .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if Path::new("/proc").join(pid).exists() {
            continue;
        }
        let dir = e.path();
        // An empty one (every test of the run passed and cleaned up) has nothing to show.
        if std::fs::remove_dir(&dir).is_ok() {
            continue;
        }
        let old = (e.metadata().and_then(|m| m.modified()).ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|d| d >= age);
        if !old {
            continue;
        }
        for (dev, backing) in loop_backings() {
            if backing.starts_with(&dir) {
                let _ = Command::new("losetup").args(["-d", &dev]).status();
            }
        }
        // Deepest first: a mount inside another.
        let mut mounts: Vec<PathBuf> = (std::fs::read_to_string("/proc/self/mounts").ok())
            .into_iter()
            .flat_map(|m| {
                m.lines()
                    .filter_map(|l| l.split(' ').nth(1).map(PathBuf::from))
                    .collect::<Vec<_>>()
            })
            .filter(|m| m.starts_with(&dir))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        for m in mounts {
            let _ = Command::new("umount").arg(&m).status();
        }
        remove_on_one_fs(&dir);
    }
}

/// Each attached loop device (`/dev/loopN`) with its backing file.
fn loop_backings() -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let file = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            // A deleted backing file reads back with " (deleted)" after its path.
            let file = file.trim_end().trim_end_matches(" (deleted)");
            Some((format!("/dev/{name}"), PathBuf::from(file)))
        })
        .collect()
}

/// Remove `dir` and what is in it, never into another filesystem: a mount that would
/// not unmount keeps its files, and the directories above it stay.
fn remove_on_one_fs(dir: &Path) {
    use std::os::unix::fs::MetadataExt;
    fn go(path: &Path, dev: u64) {
        let Ok(m) = std::fs::symlink_metadata(path) else {
            return;
        };
        if !m.is_dir() {
            let _ = std::fs::remove_file(path);
            return;
        }
        if m.dev() != dev {
            return;
        }
        for e in std::fs::read_dir(path).into_iter().flatten().flatten() {
            go(&e.path(), dev);
        }
        let _ = std::fs::remove_dir(path);
    }
    if let Ok(m) = std::fs::symlink_metadata(dir) {
        go(dir, m.dev());
    }
}

/// The COUNT of a stage row of a stat/report table for a group, e.g.
/// (["loop3", "write"], "d2c").
pub fn table_count(text: &str, group: &[&str], stage: &str) -> Option<u64> {
    let mut in_group = false;
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() >= group.len() && cols[..group.len()] == *group {
            in_group = true;
            if cols.get(group.len()) == Some(&stage) {
                return cols.get(group.len() + 1)?.parse().ok();
            }
            continue;
        }
        if in_group {
            if cols.first() == Some(&stage) {
                return cols.get(1)?.parse().ok();
            }
            // A new group starts with a label in the first column, a stage row does not.
            if line.starts_with(|c: char| !c.is_whitespace()) {
                in_group = false;
            }
        }
    }
    None
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// fio's own count of the I/Os it issued: the sum of every `"total_ios"` in its JSON
/// (read, write, trim, sync sections).
pub fn fio_ios(path: &Path) -> u64 {
    let text = read(path);
    text.match_indices("\"total_ios\"")
        .map(|(i, _)| {
            let rest = text[i + 11..].trim_start_matches([' ', ':']);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u64>().unwrap_or(0)
        })
        .sum()
}

/// The kernel's own count of the requests block device `name` completed so far
/// (`/sys/block/NAME/stat`: reads, writes, discards and flushes), for the I/Os a test
/// drove: a reference beside fio's count that no tracer is in.
pub fn disk_ios(name: &str) -> u64 {
    let text = read(&Path::new("/sys/block").join(name).join("stat"));
    let f: Vec<u64> = text
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    [0, 4, 11, 15].iter().filter_map(|&i| f.get(i)).sum()
}

/// fio's slowest total latency (`lat_ns.max`: from the start of submission to the
/// completion) over every job and direction, ns. The bound of a row's d2c: the issue
/// tracepoint fires inside `io_submit`, so d2c can pass `clat_ns`, which fio starts
/// when the submission returns (a vCPU stall between the two made a 15.17 ms d2c
/// against a 14.95 ms `clat_ns.max`).
pub fn fio_lat_max_ns(path: &Path) -> u64 {
    let text = read(path);
    text.match_indices("\"lat_ns\"")
        .filter_map(|(i, _)| {
            let rest = &text[i..];
            let at = rest.find("\"max\"")?;
            let digits: String = rest[at + 5..]
                .trim_start_matches([' ', ':'])
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<u64>().ok()
        })
        .max()
        .unwrap_or(0)
}

/// A numeric cell; the panic names the column and the row.
pub fn num(r: &Row, col: &str) -> u64 {
    r[col]
        .parse()
        .unwrap_or_else(|_| panic!("column {col} = `{}` is not a number: {r:?}", r[col]))
}

/// A signed numeric cell (network time can be negative).
pub fn inum(r: &Row, col: &str) -> i64 {
    r[col]
        .parse()
        .unwrap_or_else(|_| panic!("column {col} = `{}` is not a number: {r:?}", r[col]))
}

/// The health line at the end of a run must show nothing lost or left over, and that
/// the kernel's counts were compared (`dropped`): a sample the kernel counted but never
/// wrote may cut at most one I/O, which is then a `dropped` row (`cut`), never a
/// wrong one.
pub fn assert_clean(what: &str, err: &str) {
    for want in ["lost 0", "unmatched 0", "incomplete 0", "  dropped "] {
        assert!(err.contains(want), "{what}: no `{want}` in:\n{err}");
    }
    let count = |name| exit_count(err, name);
    assert!(count("cut") <= count("dropped"), "{what}: {err}");
    if count("dropped") > 0 {
        assert!(err.contains("costing"), "{what}: {err}");
    }
}

/// The rows of a run that are `ok`; every other row must be `dropped`, and no more of
/// them than the exit line (`err`) counts I/Os cut: the kernel counted a sample of
/// theirs and never wrote it (rare, at any rate, on these machines: see
/// docs/how-it-works.md), which ntprof-perf must report, never hide or mispair.
pub fn ok_rows<'a>(rows: &'a [Row], err: &str) -> Vec<&'a Row> {
    let mut dropped = 0;
    for r in rows {
        match r["status"].as_str() {
            "ok" => {}
            "dropped" => dropped += 1,
            other => panic!("status {other}: {r:?}\n{err}"),
        }
    }
    assert!(
        dropped <= exit_count(err, "cut"),
        "{dropped} dropped rows, more than the exit line's I/Os cut: {err}"
    );
    rows.iter().filter(|r| r["status"] == "ok").collect()
}

/// The exit line's I/Os that the kernel counted beginning and that left no row and no
/// unmatched completion (`... and N I/Os that left nothing to place: ...`); `None`
/// when the run printed none.
pub fn unseen_ios(err: &str) -> Option<u64> {
    let (before, _) = err.split_once(" I/Os that left nothing to place")?;
    before.rsplit(' ').next()?.parse().ok()
}

/// A VM overflow run's I/Os that left nothing to place (`err`, its stderr) against fio's
/// `ios` less the `rows` and the unmatched completions. The figure is the kernel's count
/// of the profile's start event less the same two: read right, that count is fio's, all
/// other commands being admin ones (not counted). Slack for a stray command of the
/// guest's own.
pub fn check_unseen(what: &str, err: &str, ios: u64, rows: u64) {
    let unseen = unseen_ios(err)
        .unwrap_or_else(|| panic!("{what}: no count of the I/Os that left nothing\n{err}"));
    let rest = ios.saturating_sub(rows + exit_count(err, "unmatched"));
    eprintln!("{what}: {unseen} I/Os left nothing to place, fio's rest {rest}");
    assert!(
        unseen.abs_diff(rest) * 50 <= rest.max(250),
        "{what}: {unseen} I/Os left nothing by the kernel's count, fio's I/Os less the rows and unmatched completions {rest}\n{err}"
    );
}

/// A counter of the health line in a run's stderr (`cut`, `dropped`, …); 0 when the
/// line leaves it out, as it does a zero `cut`. The last counter of the line ends at
/// its newline.
pub fn exit_count(err: &str, name: &str) -> u64 {
    err.split("  ")
        .find_map(|w| {
            w.strip_prefix(name)?
                .strip_prefix(' ')?
                .split(|c: char| c.is_whitespace() || c == ',')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The number right after the first `key` in `text`, such as the exit line's
/// `; samples N`; `None` without one.
pub fn number_after(text: &str, key: &str) -> Option<u64> {
    let rest = &text[text.find(key)? + key.len()..];
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Whether the VM tests run (`NTPROF_VM=1`, set by scripts/test.sh and CI). Otherwise
/// a loud skip, written straight to fd 2 so the harness's capture cannot hide it.
pub fn vm_enabled(test: &str) -> bool {
    use std::io::Write as _;
    if std::env::var("NTPROF_VM").as_deref() == Ok("1") {
        return true;
    }
    let bar = "!".repeat(80);
    let _ = writeln!(
        std::io::stderr(),
        "\n{bar}\nSKIPPED: set NTPROF_VM=1 to boot the VM rig ({test})\n{bar}\n"
    );
    false
}

/// Where a VM test runs from: the repo, its output directory (shared with the guest),
/// and the ntprof-perf binary the guest runs (`NTPROF_VM_BIN` overrides the one cargo
/// built for this test).
pub fn vm_paths(out_name: &str) -> (PathBuf, PathBuf, String) {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(out_name);
    let bin = std::env::var("NTPROF_VM_BIN").unwrap_or_else(|_| bin().to_string());
    (repo, out, bin)
}

/// Boot the VM rig (`tests/vm/run.sh RIG_ARGS... SCRIPT OUT BIN IOS`) and fail the test,
/// pointing at the console log, unless the guest script ran and succeeded.
pub fn run_vm(repo: &Path, rig_args: &[&str], script: &str, out: &Path, bin: &str, ios: usize) {
    run_vm_with(repo, rig_args, script, out, &[bin, &ios.to_string()]);
}

/// The same with any arguments for the guest script.
pub fn run_vm_with(repo: &Path, rig_args: &[&str], script: &str, out: &Path, args: &[&str]) {
    let status = Command::new(repo.join("tests/vm/run.sh"))
        .args(rig_args)
        .arg(repo.join(script))
        .arg(out)
        .args(args)
        .status()
        .expect("running tests/vm/run.sh");
    assert!(
        status.success(),
        "the VM run failed ({status}); see {}/console.log",
        out.display()
    );
}

/// The kernel (tracefs, perf_event_open) and stock `perf`: what the tests of captures
/// need.
pub fn perf_ready(test: &str) -> bool {
    kernel_ready(test) && tool_ready(test, "perf", &["--version"])
}

/// Whether an external program the test needs is installed (`scripts/deps.sh` installs
/// it). When it is not and `NTPROF_REQUIRE_KERNEL=1` (CI), this panics, so CI cannot
/// pass by skipping; otherwise a loud skip.
pub fn tool_ready(test: &str, tool: &str, probe: &[&str]) -> bool {
    use std::io::Write as _;
    let ok = Command::new(tool)
        .args(probe)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        return true;
    }
    if std::env::var("NTPROF_REQUIRE_KERNEL").as_deref() == Ok("1") {
        panic!("{test}: NTPROF_REQUIRE_KERNEL=1 but `{tool}` is not usable; run scripts/deps.sh");
    }
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: `{tool}` is not installed (scripts/deps.sh installs it)"
    );
    false
}

/// The address `serve` listens on, from the line it prints on stderr (`--listen
/// 127.0.0.1:0` picks a port); `err` is left after that line.
pub fn serve_address(err: &mut impl std::io::BufRead) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "serve ended: {line}");
        if let Some(rest) = line.trim().strip_prefix("ntprof-perf: serving http://") {
            return rest.split("/metrics").next().unwrap().to_string();
        }
    }
}

/// The wake-ups of process `pid`, counted by the kernel: its main thread's voluntary
/// context switches (a one-thread reader reads the rings there; each round is a poll).
pub fn wakeups(pid: u32) -> u64 {
    let status = read(Path::new(&format!("/proc/{pid}/task/{pid}/status")));
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no voluntary_ctxt_switches in {status}"))
}

/// A child killed when dropped. A test that fails while it runs must not leave it
/// running: a `record` or `stat` with no command never ends, and one that inherited
/// the harness's stdout holds it open, so a piped `cargo test` would wait for ever.
pub struct Running(Option<std::process::Child>);

impl Running {
    pub fn spawn(cmd: &mut Command) -> Running {
        Running(Some(cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))))
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().map_or(0, |c| c.id())
    }

    /// SIGKILL, and wait for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.0.take() {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Waits for it to end; what it wrote to piped stdout and stderr.
    pub fn output(mut self) -> Output {
        let c = self.0.take().expect("a running child");
        c.wait_with_output().unwrap()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `record` in the background on `l`, its rows going to `csv`.
pub fn record_bg(l: &LoopDev, csv: &std::path::Path) -> Running {
    let child = Running::spawn(
        Command::new(bin())
            .args(["record", "-d", &l.dev, "-o"])
            .arg(csv)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped()),
    );
    // Tracing is on once the header is written and events are enabled; give it a moment.
    std::thread::sleep(std::time::Duration::from_millis(500));
    child
}

/// A zram device made for one test (`hot_add`), removed when dropped.
pub struct Zram {
    pub id: String,
    pub dev: String,
}

impl Zram {
    pub fn new(mib: u32) -> Option<Zram> {
        let ctl = Path::new("/sys/class/zram-control/hot_add");
        if !ctl.exists() {
            let _ = Command::new("modprobe").arg("zram").status();
        }
        let id = std::fs::read_to_string(ctl).ok()?.trim().to_string();
        let size = Path::new("/sys/block").join(format!("zram{id}/disksize"));
        std::fs::write(&size, format!("{mib}M")).ok()?;
        Some(Zram {
            dev: format!("/dev/zram{id}"),
            id,
        })
    }

    pub fn name(&self) -> String {
        format!("zram{}", self.id)
    }
}

impl Drop for Zram {
    fn drop(&mut self) {
        let _ = std::fs::write("/sys/class/zram-control/hot_remove", &self.id);
    }
}

/// A zram device (bio-based) for `test`, or a loud skip (a panic under
/// `NTPROF_REQUIRE_KERNEL=1`) when the kernel has none.
pub fn zram(test: &str) -> Option<Zram> {
    if !kernel_ready(test) {
        return None;
    }
    let z = Zram::new(64);
    if z.is_none() {
        let msg =
            format!("{test}: no zram (CONFIG_ZRAM) on this kernel: cannot make a bio-based device");
        if std::env::var("NTPROF_REQUIRE_KERNEL").as_deref() == Ok("1") {
            panic!("{msg}");
        }
        eprintln!("SKIPPED {msg}");
    }
    z
}

/// The major and minor number of a block device node.
pub fn major_minor(node: &str) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(node).unwrap().rdev();
    (nix::sys::stat::major(rdev), nix::sys::stat::minor(rdev))
}

/// The kernel's `dev_t` of a block device node (major << 20 | minor), as the
/// tracepoints give it and `perf record --filter "dev == N"` takes it.
pub fn kernel_dev(node: &str) -> u64 {
    let (major, minor) = major_minor(node);
    (major << 20) | minor
}
