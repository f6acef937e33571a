//! Side-by-side cost of tracing block I/O: ntprof-perf vs `perf record` vs bpftrace.
//!
//! The same workload (N direct 4 KiB writes with dd to a loop device on tmpfs) runs
//! with no tracer, then under each tracer tracing the same three block events of that
//! device. Printed per tracer: the workload's wall time and its ratio to the untraced
//! run, the tracer's own CPU time while tracing, and what each tracer saw (so a tracer
//! that missed events cannot look cheap). For perf, the CPU time of `perf script` to
//! decode its recording is shown too: ntprof-perf decodes and correlates online.
//!
//! Run as root: `cargo run --release --example overhead -- [IOS] [ROUNDS]`
//! (default 20000 I/Os, 3 rounds; the median round is shown).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

struct Loop {
    dev: String,
    dir: PathBuf,
}

impl Loop {
    fn new() -> Loop {
        let dir = std::env::temp_dir().join(format!("ntprof-overhead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        sh(Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=300m", "tmpfs"])
            .arg(&dir));
        let img = dir.join("img");
        std::fs::File::create(&img)
            .unwrap()
            .set_len(256 << 20)
            .unwrap();
        let dev = sh(Command::new("losetup").args(["-f", "--show"]).arg(&img))
            .trim()
            .to_string();
        let name = dev.trim_start_matches("/dev/");
        std::fs::write(format!("/sys/block/{name}/queue/scheduler"), "none").unwrap();
        Loop { dev, dir }
    }

    /// The kernel's dev_t encoding, as block tracepoints record it.
    fn kernel_dev(&self) -> u64 {
        let name = self.dev.trim_start_matches("/dev/");
        let mm = std::fs::read_to_string(format!("/sys/class/block/{name}/dev")).unwrap();
        let (ma, mi) = mm.trim().split_once(':').unwrap();
        (ma.parse::<u64>().unwrap() << 20) | mi.parse::<u64>().unwrap()
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = Command::new("umount").arg(&self.dir).status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn workload(dev: &str, ios: u64) -> Duration {
    let t = Instant::now();
    sh(Command::new("dd").args([
        "if=/dev/zero",
        &format!("of={dev}"),
        "bs=4k",
        &format!("count={ios}"),
        "oflag=direct",
        "status=none",
    ]));
    t.elapsed()
}

/// utime + stime of a process and its threads, from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / hz)
}

fn stop(child: Child) -> std::process::Output {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    child.wait_with_output().unwrap()
}

struct Run {
    wall: Duration,
    cpu: Duration,
    seen: String,
    post_cpu: Option<Duration>,
}

/// Start a tracer, give it time to attach, run the workload, measure, stop it.
fn traced(
    start: impl Fn() -> Child,
    dev: &str,
    ios: u64,
    seen: impl Fn(&str, &str) -> String,
) -> Run {
    let child = start();
    std::thread::sleep(Duration::from_millis(1500));
    let cpu0 = cpu_time(child.id());
    let wall = workload(dev, ios);
    // Let the tracer drain what the workload produced before its CPU is read.
    std::thread::sleep(Duration::from_millis(300));
    let cpu = cpu_time(child.id()).saturating_sub(cpu0);
    let out = stop(child);
    Run {
        wall,
        cpu,
        seen: seen(
            &String::from_utf8_lossy(&out.stdout),
            &String::from_utf8_lossy(&out.stderr),
        ),
        post_cpu: None,
    }
}

fn median(mut v: Vec<Run>) -> Run {
    v.sort_by_key(|r| r.wall);
    let mid = v.len() / 2;
    v.swap_remove(mid)
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let ios = args.first().copied().unwrap_or(20_000);
    let rounds = args.get(1).copied().unwrap_or(3).max(1);
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/ntprof-perf");
    assert!(
        bin.is_file(),
        "build first: cargo build --release ({} missing)",
        bin.display()
    );
    let l = Loop::new();
    let kdev = l.kernel_dev();
    let events = [
        "block:block_rq_insert",
        "block:block_rq_issue",
        "block:block_rq_complete",
    ];
    let perf_data = std::env::temp_dir().join("ntprof-overhead-perf.data");
    let csv = std::env::temp_dir().join("ntprof-overhead.csv");
    workload(&l.dev, ios / 4); // warm-up

    let mut table: Vec<(&str, Run)> = Vec::new();
    let base = median(
        (0..rounds)
            .map(|_| Run {
                wall: workload(&l.dev, ios),
                cpu: Duration::ZERO,
                seen: "-".into(),
                post_cpu: None,
            })
            .collect(),
    );
    table.push(("no tracing", base));

    let dev = l.dev.clone();
    let runs = (0..rounds)
        .map(|_| {
            traced(
                || {
                    Command::new(&bin)
                        .args(["record", "-d", &dev, "-o"])
                        .arg(&csv)
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                },
                &dev,
                ios,
                |_, err| {
                    err.lines()
                        .find(|l| l.contains("I/Os written"))
                        .map(|l| l.replace("ntprof-perf: ", ""))
                        .unwrap_or_default()
                },
            )
        })
        .collect();
    table.push(("ntprof-perf record", median(runs)));

    let filter = format!("dev == {kdev}");
    let runs = (0..rounds)
        .map(|_| {
            let mut r = traced(
                || {
                    let mut c = Command::new("perf");
                    c.args(["record", "-q", "-a", "-o"]).arg(&perf_data);
                    for e in events {
                        c.args(["-e", e, "--filter", &filter]);
                    }
                    c.stdout(Stdio::null())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                },
                &dev,
                ios,
                |_, _| String::new(),
            );
            let out = Command::new("perf")
                .args(["script", "-F", "event", "-i"])
                .arg(&perf_data)
                .output()
                .unwrap();
            let n = String::from_utf8_lossy(&out.stdout).lines().count();
            r.seen = format!("{n} samples decoded by perf script");
            r.post_cpu = Some(script_cpu(&perf_data));
            r
        })
        .collect();
    table.push(("perf record -a (+ perf script)", median(runs)));

    let prog = format!(
        "tracepoint:block:block_rq_insert /args->dev == {kdev}/ {{ @q[args->sector] = nsecs; }}
         tracepoint:block:block_rq_issue /args->dev == {kdev}/ {{ @d[args->sector] = nsecs; }}
         tracepoint:block:block_rq_complete /args->dev == {kdev} && @d[args->sector]/ {{
             @d2c = hist(nsecs - @d[args->sector]); @n = count();
             delete(@d[args->sector]); delete(@q[args->sector]); }}"
    );
    let runs = (0..rounds)
        .map(|_| {
            traced(
                || {
                    Command::new("bpftrace")
                        .args(["-e", &prog])
                        .stdout(Stdio::piped())
                        .stderr(Stdio::piped())
                        .spawn()
                        .unwrap()
                },
                &dev,
                ios,
                |out, _| {
                    out.lines()
                        .find(|l| l.starts_with("@n:"))
                        .map(|l| {
                            format!(
                                "{} I/Os in its histogram",
                                l.trim_start_matches("@n:").trim()
                            )
                        })
                        .unwrap_or_default()
                },
            )
        })
        .collect();
    table.push(("bpftrace (D2C histogram)", median(runs)));

    let base = table[0].1.wall.as_secs_f64();
    println!(
        "workload: {ios} direct 4 KiB writes with dd on {} (tmpfs), median of {rounds}",
        l.dev
    );
    println!(
        "{:<32} {:>10} {:>8} {:>10} {:>11}  seen",
        "tracer", "wall ms", "ratio", "cpu ms", "cpu ns/I/O"
    );
    for (name, r) in &table {
        let cpu = r.cpu + r.post_cpu.unwrap_or_default();
        println!(
            "{:<32} {:>10.1} {:>8.3} {:>10.1} {:>11.0}  {}",
            name,
            r.wall.as_secs_f64() * 1e3,
            r.wall.as_secs_f64() / base,
            cpu.as_secs_f64() * 1e3,
            cpu.as_nanos() as f64 / ios as f64,
            r.seen
        );
    }
    let _ = std::fs::remove_file(&perf_data);
    let _ = std::fs::remove_file(&csv);
}

/// CPU time of decoding a perf recording with `perf script`: the growth of the
/// waited-for children's rusage across that one child.
fn script_cpu(data: &Path) -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    let used = || {
        getrusage(UsageWho::RUSAGE_CHILDREN)
            .map(|u| {
                let tv = |t: nix::sys::time::TimeVal| {
                    Duration::new(t.tv_sec() as u64, t.tv_usec() as u32 * 1000)
                };
                tv(u.user_time()) + tv(u.system_time())
            })
            .unwrap_or_default()
    };
    let before = used();
    let _ = Command::new("perf")
        .args(["script", "-i"])
        .arg(data)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    used().saturating_sub(before)
}
