//! Side-by-side cost of tracing block I/O: no tracer, `perf record`, bpftrace,
//! `ntprof-perf stat`, `ntprof-perf record` (each also with `--threads 2`),
//! `stat --sample 8` / `--sample 64`, `serve` with its default budget
//! (`--max-rate 2000 --duty 3/60`), and the floor of any perf-ring tracer: the same
//! events and rings as `stat`, read by a loop that only frees the ring (no decode,
//! ordering or correlation; this example runs itself as that reader, `overhead
//! --drain-floor KDEV`).
//!
//! One more mode checks what `--max-rate` does to the percentiles rather than to the
//! cost: `stat --max-rate 2000` and a full `stat` watch the same fio run side by side,
//! and the p50 and p99 of d2c of the two are compared per round. Side by side, because
//! a full trace slows the device it watches (the loop device's worker shares the
//! cores with the tracer), so percentiles from different runs differ by more than
//! sampling does; its IOPS (two tracers at once) are not in the cost table.
//!
//! The workload is fio, 4 KiB random reads at queue depth 16 with libaio, on a loop
//! device backed by tmpfs (pure CPU: the tracers compete with it for the same cores).
//! Every tracer traces the block events of that device only, filtered in the kernel:
//! - `perf record -a` of `block_rq_insert`, `block_rq_issue`, `block_rq_complete`;
//! - bpftrace: issue → complete latency into an in-kernel `hist()`;
//! - ntprof-perf `stat` / `record` (block profile: the same three events plus requeue).
//!
//! A control mode, the filter floor, opens the floor's events with filters that reject
//! every hit: the kernel still fills and tests a trace record per hit but writes
//! nothing, which is the least any in-kernel sampling (`--sample`, `--max-rate`,
//! `serve`) can cost however few I/Os it keeps.
//!
//! Rounds are interleaved: each round runs every mode once, in a shuffled order, so
//! drift in the machine's load spreads over all modes. Printed per mode: the median
//! IOPS, its ratio to the untraced median and the median of its ratios to the untraced
//! run of the same round, the tracer's own CPU time per second of workload (user +
//! system of its process, from /proc; bpftrace's in-kernel work is paid inside the
//! workload instead), the share of the CPUs idle while fio ran steadily (from
//! `/proc/stat`; where fio leaves a tenth or more idle untraced, a note says that IOPS
//! then show only part of a tracer's CPU), for the tracers that say how many samples
//! they received, that many per second of their own CPU in rounds with none lost (what
//! one core of the reader takes in, syscalls and sinks included), and samples lost.
//! Then, for pairs of modes, the difference of their ratios within each round: its
//! median over the rounds, a distribution-free 95 % interval of that median (from the
//! rounds' order statistics), and whether the rounds decide the pair's mark at all: on
//! a shared 2-vCPU host twenty rounds left intervals 0.04-0.14 wide, wider than the
//! 0.03 margins they are asked about, and eighty about 0.03-0.05 (docs/performance.md).
//!
//! Run as root: `cargo run --release --example overhead -- [SECONDS] [ROUNDS] [MODES]`
//! (default 2 s per run, 20 rounds, every mode: on a shared host the IOPS drift by a
//! third within minutes, and short runs close together with many rounds gave the same
//! head-to-head medians twice where 5 s × 7 gave two that differed by 0.09,
//! docs/performance.md 2026-12-02; ≈ 9 minutes for `none,floor,perf,bpftrace,stat,
//! record`, the comparison of issue 20. MODES is a comma-separated list of
//! none, floor, reject, perf, bpftrace, stat, record, stat2, record2 (`--threads 2`),
//! statdefer, recorddefer (`--defer`: the CPU shown is the reader's while fio runs; the
//! correlating after it is in the exit line, not in the table), sample8, sample64, serve, maxrate, and two diagnostics: burn (the floor's reader
//! spinning `OVERHEAD_BURN_MS`, default 40, ms of CPU per s: what that much CPU costs
//! the workload when it does nothing with the samples) and statidle, recordidle (`stat`
//! and `record` under `chrt --idle`)), and statalt, recordalt: `stat` and `record` of the build
//! at `OVERHEAD_ALT_BIN`, to compare two builds head to head in one run, and statready,
//! recordready: `--defer SIZE` (`OVERHEAD_DEFER_SIZE`, default 256M, enough for a few
//! seconds at 600 k samples/s), whose memory is faulted in before tracing starts. Installs fio, bpftrace and perf with apt-get
//! when they are missing.
//!
//! `OVERHEAD_CPUS=LIST` (a `taskset` list, e.g. `0`) runs the whole experiment on those
//! CPUs: fio (`--cpus_allowed`), the loop device's worker (the unbound workqueues'
//! cpumask, put back at the end) and every tracer (`taskset`), and the idle column
//! counts those CPUs only. On a host where fio leaves CPU idle, a tracer's CPU comes
//! out of that idle time and hardly shows in IOPS; on one CPU that fio keeps busy,
//! every ms of it does, as on a host whose workload is CPU-bound.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn sh(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// fio, bpftrace and perf, installed with apt-get when missing.
fn install_tools() {
    let missing: Vec<&str> = [
        ("fio", "fio"),
        ("bpftrace", "bpftrace"),
        ("perf", "linux-perf"),
    ]
    .into_iter()
    .filter(|(tool, _)| !have(tool))
    .map(|(_, pkg)| pkg)
    .collect();
    if missing.is_empty() {
        return;
    }
    eprintln!("installing {}", missing.join(" "));
    let _ = Command::new("apt-get").arg("update").status();
    let st = Command::new("apt-get")
        .args(["install", "-y", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .expect("apt-get");
    assert!(st.success(), "apt-get install {missing:?} failed");
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
            // Room for the image and the largest output of one run (a `perf record` of
            // 5 s at 250k IOPS is ≈400 MB); tmpfs takes only what is written.
            .args(["-t", "tmpfs", "-o", "size=8g", "tmpfs"])
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

/// fio 4 KiB random reads, QD16, libaio, for `secs` (on `pin`'s CPUs when given); its
/// read IOPS.
fn fio(dev: &str, secs: u64, pin: Option<&Pin>) -> f64 {
    let mut cmd = Command::new("fio");
    cmd.args([
        "--name=overhead",
        &format!("--filename={dev}"),
        "--rw=randread",
        "--bs=4k",
        "--iodepth=16",
        "--ioengine=libaio",
        "--direct=1",
        "--time_based",
        &format!("--runtime={secs}"),
        "--output-format=json",
    ]);
    if let Some(p) = pin {
        cmd.arg(format!("--cpus_allowed={}", p.list));
    }
    let out = sh(&mut cmd);
    // "read" : { ... "iops" : 12345.678901, ...
    let read = out.find("\"read\"").expect("fio JSON has a read section");
    let at = read + out[read..].find("\"iops\"").expect("read iops");
    let rest = out[at + 6..].trim_start_matches([' ', ':']);
    let num: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    num.parse().expect("iops is a number")
}

/// utime + stime of a process (all its threads), from /proc.
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

/// Untraced, a share of idle CPUs from which the table warns that IOPS understate what
/// a tracer's CPU costs (a 2-vCPU host idle a tenth of the time has 200 ms/s to spare,
/// more than any tracer here takes).
const IDLE_NOTE: f64 = 0.10;

/// Idle and total CPU time so far, in ticks, of the machine or of some CPUs
/// (`/proc/stat`: idle and iowait of user, nice, system, idle, iowait, irq, softirq,
/// steal; guest time is in user already).
fn cpu_ticks(cpus: Option<&[u32]>) -> Option<(u64, u64)> {
    parse_cpu_ticks(&std::fs::read_to_string("/proc/stat").ok()?, cpus)
}

/// The idle share while a fio of `secs` started now runs steadily: from half a second
/// after its start to a quarter before its end (less for short runs). fio's own start
/// and exit leave the CPUs idle for a fixed time, which would read as idle a tracer
/// could use (13 % of 2 s runs on one CPU that fio otherwise kept busy).
fn idle_window(secs: u64, cpus: Option<Vec<u32>>) -> std::thread::JoinHandle<Option<f64>> {
    std::thread::spawn(move || {
        let run = Duration::from_secs(secs);
        let lead = (run / 4).min(Duration::from_millis(500));
        let tail = (run / 4).min(Duration::from_millis(250));
        std::thread::sleep(lead);
        let a = cpu_ticks(cpus.as_deref());
        std::thread::sleep(run - lead - tail);
        idle_between(a, cpu_ticks(cpus.as_deref()))
    })
}

/// The first line's ticks, or with `cpus` the sum of those CPUs' lines (all of them
/// present, else `None`).
fn parse_cpu_ticks(stat: &str, cpus: Option<&[u32]>) -> Option<(u64, u64)> {
    let ticks = |line: &str| -> Option<(u64, u64)> {
        let f: Vec<u64> = line
            .split_whitespace()
            .take(8)
            .map(|v| v.parse().ok())
            .collect::<Option<_>>()?;
        (f.len() >= 5).then(|| (f[3] + f[4], f.iter().sum()))
    };
    let Some(cpus) = cpus else {
        return ticks(stat.lines().next()?.strip_prefix("cpu ")?);
    };
    let (mut idle, mut total, mut seen) = (0, 0, 0);
    for line in stat.lines() {
        let Some((name, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some(n) = name.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if cpus.contains(&n) {
            let (i, t) = ticks(rest)?;
            (idle, total, seen) = (idle + i, total + t, seen + 1);
        }
    }
    (seen == cpus.len()).then_some((idle, total))
}

/// The share of the CPUs idle between two readings of [`cpu_ticks`].
fn idle_between(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<f64> {
    let ((i0, t0), (i1, t1)) = (a?, b?);
    let total = t1.checked_sub(t0).filter(|&t| t > 0)?;
    Some(i1.saturating_sub(i0) as f64 / total as f64)
}

/// `OVERHEAD_CPUS`: the experiment held to some CPUs (see the module's doc).
struct Pin {
    /// The `taskset` list as given.
    list: String,
    cpus: Vec<u32>,
    /// The unbound workqueues' cpumask before, put back on drop.
    wq_before: Option<String>,
}

const WQ_CPUMASK: &str = "/sys/devices/virtual/workqueue/cpumask";

impl Pin {
    fn from_env() -> Option<Pin> {
        let list = std::env::var("OVERHEAD_CPUS").ok()?;
        let cpus = ntprof_perf::perf::parse_cpu_list(&list).unwrap_or_else(|e| {
            eprintln!("OVERHEAD_CPUS: {e}; give CPUs as taskset does, e.g. 0 or 0-1,3");
            std::process::exit(2);
        });
        // The loop device's worker runs on an unbound workqueue: left free it takes
        // another CPU, and the experiment is no longer on `cpus` alone.
        let wq_before = std::fs::read_to_string(WQ_CPUMASK).ok();
        let mask = cpu_mask_hex(&cpus);
        if let Err(e) = std::fs::write(WQ_CPUMASK, &mask) {
            eprintln!("OVERHEAD_CPUS: cannot write {mask} to {WQ_CPUMASK}: {e}");
            std::process::exit(2);
        }
        Some(Pin {
            list,
            cpus,
            wq_before,
        })
    }

    /// `cmd`'s program and arguments, run under `taskset -c LIST`.
    fn wrap(&self, cmd: Command) -> Command {
        let mut c = Command::new("taskset");
        c.args(["-c", &self.list]).arg(cmd.get_program());
        c.args(cmd.get_args());
        c
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        if let Some(before) = &self.wq_before {
            let _ = std::fs::write(WQ_CPUMASK, before.trim());
        }
    }
}

/// The kernel's hex cpumask of `cpus` (32-bit words, comma-separated, most significant first).
fn cpu_mask_hex(cpus: &[u32]) -> String {
    let words = cpus.iter().max().map_or(1, |m| *m as usize / 32 + 1);
    let mut w = vec![0u32; words];
    for &c in cpus {
        w[c as usize / 32] |= 1 << (c % 32);
    }
    w.iter()
        .rev()
        .map(|x| format!("{x:08x}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The tracers, in table order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    None,
    Drain,
    Burn,
    Reject,
    Perf,
    Bpftrace,
    Stat,
    Record,
    Stat2,
    Record2,
    StatDefer,
    RecordDefer,
    StatIdle,
    RecordIdle,
    Sample8,
    Sample64,
    Serve,
    MaxRatePair,
    StatAlt,
    RecordAlt,
    StatReady,
    RecordReady,
}

const MODES: [Mode; 22] = [
    Mode::None,
    Mode::Drain,
    Mode::Burn,
    Mode::Reject,
    Mode::Perf,
    Mode::Bpftrace,
    Mode::Stat,
    Mode::Record,
    Mode::Stat2,
    Mode::Record2,
    Mode::StatDefer,
    Mode::RecordDefer,
    Mode::StatIdle,
    Mode::RecordIdle,
    Mode::Sample8,
    Mode::Sample64,
    Mode::Serve,
    Mode::MaxRatePair,
    Mode::StatAlt,
    Mode::RecordAlt,
    Mode::StatReady,
    Mode::RecordReady,
];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::None => "no tracer",
            Mode::Drain => "floor: rings drained, nothing decoded",
            Mode::Burn => "floor + CPU burnt (OVERHEAD_BURN_MS per s)",
            Mode::Reject => "filter floor: events on, every sample filtered out",
            Mode::Perf => "perf record -a",
            Mode::Bpftrace => "bpftrace issue→complete hist()",
            Mode::Stat => "ntprof-perf stat",
            Mode::Record => "ntprof-perf record (CSV)",
            Mode::Stat2 => "ntprof-perf stat --threads 2",
            Mode::Record2 => "ntprof-perf record --threads 2",
            Mode::StatDefer => "ntprof-perf stat --defer",
            Mode::RecordDefer => "ntprof-perf record --defer",
            Mode::StatIdle => "ntprof-perf stat, SCHED_IDLE",
            Mode::RecordIdle => "ntprof-perf record, SCHED_IDLE",
            Mode::Sample8 => "ntprof-perf stat --sample 8",
            Mode::Sample64 => "ntprof-perf stat --sample 64",
            Mode::Serve => "ntprof-perf serve (defaults: --max-rate 2000 --duty 3/60)",
            Mode::MaxRatePair => "stat --max-rate 2000 beside a full stat",
            Mode::StatAlt => "ntprof-perf stat, OVERHEAD_ALT_BIN's build",
            Mode::RecordAlt => "ntprof-perf record (CSV), OVERHEAD_ALT_BIN's build",
            Mode::StatReady => "ntprof-perf stat --defer SIZE (memory faulted in first)",
            Mode::RecordReady => "ntprof-perf record --defer SIZE (memory faulted in first)",
        }
    }

    /// One ntprof-perf reader (or the floor's), which says `samples N  lost M`.
    fn own_reader(self) -> bool {
        matches!(
            self,
            Mode::Drain
                | Mode::Burn
                | Mode::Reject
                | Mode::Stat
                | Mode::Record
                | Mode::Stat2
                | Mode::Record2
                | Mode::StatDefer
                | Mode::RecordDefer
                | Mode::StatIdle
                | Mode::RecordIdle
                | Mode::Sample8
                | Mode::Sample64
                | Mode::Serve
                | Mode::StatAlt
                | Mode::RecordAlt
                | Mode::StatReady
                | Mode::RecordReady
        )
    }

    /// The name that picks this mode on the command line.
    fn key(self) -> &'static str {
        match self {
            Mode::None => "none",
            Mode::Drain => "floor",
            Mode::Burn => "burn",
            Mode::Reject => "reject",
            Mode::Perf => "perf",
            Mode::Bpftrace => "bpftrace",
            Mode::Stat => "stat",
            Mode::Record => "record",
            Mode::Stat2 => "stat2",
            Mode::Record2 => "record2",
            Mode::StatDefer => "statdefer",
            Mode::RecordDefer => "recorddefer",
            Mode::StatIdle => "statidle",
            Mode::RecordIdle => "recordidle",
            Mode::Sample8 => "sample8",
            Mode::Sample64 => "sample64",
            Mode::Serve => "serve",
            Mode::MaxRatePair => "maxrate",
            Mode::StatAlt => "statalt",
            Mode::RecordAlt => "recordalt",
            Mode::StatReady => "statready",
            Mode::RecordReady => "recordready",
        }
    }
}

struct Ctx {
    bin: PathBuf,
    /// `OVERHEAD_ALT_BIN`: a second build, for the `*alt` modes.
    alt: Option<PathBuf>,
    /// `OVERHEAD_DEFER_SIZE` (default 256M): the `--defer SIZE` of the `*ready` modes.
    ready: String,
    dev: String,
    kdev: u64,
    scratch: PathBuf,
    pin: Option<Pin>,
}

impl Ctx {
    fn start(&self, m: Mode) -> Vec<Child> {
        let ntprof = |extra: &[&str]| {
            // SCHED_IDLE: the reader runs only on time no other task wants.
            let bin = match (m, &self.alt) {
                (Mode::StatAlt | Mode::RecordAlt, Some(alt)) => alt,
                (Mode::StatAlt | Mode::RecordAlt, None) => {
                    panic!("{}: set OVERHEAD_ALT_BIN to the other build", m.key())
                }
                _ => &self.bin,
            };
            let mut c = if matches!(m, Mode::StatIdle | Mode::RecordIdle) {
                let mut c = Command::new("chrt");
                c.args(["--idle", "0"]).arg(bin);
                c
            } else {
                Command::new(bin)
            };
            c.args(extra).args(["-p", "block", "-d", &self.dev]);
            if extra[0] == "record" {
                c.arg("-o").arg(self.scratch.join("io.csv"));
            }
            c
        };
        let spawn = |c: Command| {
            let mut c = match &self.pin {
                Some(p) => p.wrap(c),
                None => c,
            };
            c.stdout(Stdio::piped()).stderr(Stdio::piped());
            c.spawn().unwrap_or_else(|e| panic!("{}: {e}", m.name()))
        };
        let c = match m {
            Mode::None => return Vec::new(),
            Mode::MaxRatePair => {
                let full = spawn(ntprof(&["stat", "--interval", "0", "--json"]));
                let sampled = spawn(ntprof(&[
                    "stat",
                    "--interval",
                    "0",
                    "--json",
                    "--max-rate",
                    "2000",
                ]));
                std::thread::sleep(Duration::from_millis(1500));
                return vec![full, sampled];
            }
            Mode::Drain | Mode::Burn | Mode::Reject => {
                let mut c = Command::new(std::env::current_exe().expect("own path"));
                c.args(["--drain-floor", &self.kdev.to_string()]);
                if m == Mode::Reject {
                    c.arg("--reject");
                }
                if m == Mode::Burn {
                    let ms = std::env::var("OVERHEAD_BURN_MS").unwrap_or_else(|_| "40".into());
                    c.args(["--burn", &ms]);
                }
                c
            }
            Mode::Perf => {
                let filter = format!("dev == {}", self.kdev);
                let mut c = Command::new("perf");
                c.args(["record", "-a", "-o"])
                    .arg(self.scratch.join("perf.data"));
                for e in ["block_rq_insert", "block_rq_issue", "block_rq_complete"] {
                    c.args(["-e", &format!("block:{e}"), "--filter", &filter]);
                }
                c
            }
            Mode::Bpftrace => {
                let k = self.kdev;
                let prog = format!(
                    "tracepoint:block:block_rq_issue /args->dev == {k}/ {{ @d[args->sector] = nsecs; }}
                     tracepoint:block:block_rq_complete /args->dev == {k} && @d[args->sector]/ {{
                         @d2c = hist(nsecs - @d[args->sector]); @n = count();
                         delete(@d[args->sector]); }}"
                );
                let mut c = Command::new("bpftrace");
                c.args(["-e", &prog]);
                c
            }
            // The SCHED_IDLE modes are the same commands, under `chrt` (see `ntprof`).
            Mode::Stat | Mode::StatIdle | Mode::StatAlt => ntprof(&["stat", "--interval", "0"]),
            Mode::Record | Mode::RecordIdle | Mode::RecordAlt => ntprof(&["record"]),
            Mode::Stat2 => ntprof(&["stat", "--interval", "0", "--threads", "2"]),
            Mode::Record2 => ntprof(&["record", "--threads", "2"]),
            Mode::StatDefer => ntprof(&["stat", "--interval", "0", "--defer"]),
            Mode::RecordDefer => ntprof(&["record", "--defer"]),
            Mode::StatReady => ntprof(&["stat", "--interval", "0", "--defer", &self.ready]),
            Mode::RecordReady => ntprof(&["record", "--defer", &self.ready]),
            Mode::Sample8 => ntprof(&["stat", "--interval", "0", "--sample", "8"]),
            Mode::Sample64 => ntprof(&["stat", "--interval", "0", "--sample", "64"]),
            Mode::Serve => ntprof(&["serve", "--listen", "127.0.0.1:19857"]),
        };
        let child = spawn(c);
        // Time to open and enable the events (bpftrace compiles its program first, a
        // `--defer SIZE` faults its memory in: seconds on a VM whose fresh memory is slow).
        std::thread::sleep(Duration::from_millis(
            if matches!(m, Mode::Bpftrace | Mode::StatReady | Mode::RecordReady) {
                4000
            } else {
                1500
            },
        ));
        vec![child]
    }

    /// Samples the tracer says it lost (after it stopped).
    fn lost(&self, m: Mode, out: &str, err: &str) -> Option<u64> {
        let after = count_after;
        match m {
            Mode::None => Some(0),
            Mode::Perf => {
                // `perf report --stats` counts the LOST records' samples.
                let st = Command::new("perf")
                    .args(["report", "--stats", "-i"])
                    .arg(self.scratch.join("perf.data"))
                    .output()
                    .ok()?;
                let text = String::from_utf8_lossy(&st.stdout);
                Some(
                    text.lines()
                        .find(|l| l.trim_start().starts_with("LOST events"))
                        .and_then(|l| after(l, "LOST events:"))
                        .unwrap_or(0),
                )
            }
            // Its samples stay in kernel maps; only perf-buffer output can be lost.
            Mode::Bpftrace => Some(after(err, "Lost ").unwrap_or(0)),
            // Our own readers, and the --max-rate pair (two of them).
            _ => after(out, "lost ")
                .or_else(|| after(out, "\"lost\":"))
                .or_else(|| after(err, "lost ")),
        }
    }
}

struct Run {
    iops: f64,
    cpu_per_s: f64,
    lost: Option<u64>,
    /// Samples the tracer received per second of its own CPU, when it lost none.
    per_cpu_s: Option<f64>,
    /// `MaxRatePair`: d2c (p50, p99) in ns of the full and of the `--max-rate` stat.
    pair: Option<[(f64, f64); 2]>,
    /// The share of the CPUs idle while fio ran steadily (see [`idle_window`]).
    idle: Option<f64>,
}

/// The number after the first `key` in `text` (`lost 0`, `"lost":0`).
fn count_after(text: &str, key: &str) -> Option<u64> {
    let i = text.find(key)? + key.len();
    text[i..]
        .split_whitespace()
        .next()?
        .trim_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()
}

/// d2c p50 and p99 (ns) of the first group of a `stat --json` summary line.
fn d2c_percentiles(out: &str) -> Option<(f64, f64)> {
    let line = out.lines().rev().find(|l| l.contains("\"summary\""))?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let st = v["groups"][0]["stages"]
        .as_array()?
        .iter()
        .find(|s| s["stage"] == "d2c")?;
    let p = &st["percentiles_ns"];
    Some((p["50"].as_f64()?, p["99"].as_f64()?))
}

/// SIGINT, and the tracer's output once it exits. A SIGINT can go unseen (bpftrace
/// once sat in epoll_wait after one, and the whole run with it), so it is sent again
/// every 10 s, and after a minute the tracer is killed.
fn stop(mut c: Child, m: Mode) -> (String, String) {
    use nix::sys::signal::{kill, Signal};
    use std::io::Read;
    let pid = nix::unistd::Pid::from_raw(c.id() as i32);
    // Read the pipes on threads: a tracer that fills one must not block its exit.
    let reader = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = p {
                let mut b = Vec::new();
                let _ = p.read_to_end(&mut b);
                s = String::from_utf8_lossy(&b).into_owned();
            }
            s
        })
    };
    let out = reader(c.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = reader(c.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let t = std::time::Instant::now();
    let mut next = Duration::ZERO;
    loop {
        if let Ok(Some(_)) = c.try_wait() {
            break;
        }
        let waited = t.elapsed();
        if waited >= Duration::from_secs(60) {
            eprintln!(
                "    {}: still running a minute after SIGINT: killed",
                m.name()
            );
            let _ = kill(pid, Signal::SIGKILL);
            let _ = c.wait();
            break;
        }
        if waited >= next {
            if next > Duration::ZERO {
                eprintln!(
                    "    {}: still running {next:?} after SIGINT: sent again",
                    m.name()
                );
            }
            let _ = kill(pid, Signal::SIGINT);
            next += Duration::from_secs(10);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    )
}

fn run(ctx: &Ctx, m: Mode, secs: u64) -> Run {
    let children = ctx.start(m);
    let cpu0: Vec<Duration> = children.iter().map(|c| cpu_time(c.id())).collect();
    // The --max-rate pair compares percentiles, not cost: its p99 rests on the ≈1 %
    // of the I/Os the budget keeps (2000 a second) that lie above it, ≈80 in a 5 s run,
    // and p99 moved by up to 8 % between a full trace's I/Os and the 1 in 128 of them a
    // sample keeps (docs/always-on.md); 30 s puts ≈600 above it.
    let secs = if m == Mode::MaxRatePair {
        secs.max(30)
    } else {
        secs
    };
    let pin = ctx.pin.as_ref();
    let window = idle_window(secs, pin.map(|p| p.cpus.clone()));
    let iops = fio(&ctx.dev, secs, pin);
    let idle = window.join().ok().flatten();
    // What the workload produced is drained before the tracer's CPU is read.
    std::thread::sleep(Duration::from_millis(300));
    let cpu: Duration = children
        .iter()
        .zip(&cpu0)
        .map(|(c, c0)| cpu_time(c.id()).saturating_sub(*c0))
        .sum();
    let outs: Vec<(String, String)> = children.into_iter().map(|c| stop(c, m)).collect();
    let lost = if outs.is_empty() {
        ctx.lost(m, "", "")
    } else {
        outs.iter()
            .map(|(o, e)| {
                let l = ctx.lost(m, o, e);
                if l.is_none() {
                    eprintln!(
                        "    {}: no lost count in its output: {}",
                        m.name(),
                        e.trim()
                    );
                }
                l
            })
            .try_fold(0, |a, l| l.map(|l| a + l))
    };
    let samples: Option<u64> = if m.own_reader() {
        outs.iter()
            .map(|(o, e)| count_after(o, "samples ").or_else(|| count_after(e, "samples ")))
            .sum()
    } else {
        None
    };
    // Outputs are not kept (their lost counts are read): each run starts with the
    // scratch space as empty as the last.
    for f in ["io.csv", "perf.data", "perf.data.old"] {
        let _ = std::fs::remove_file(ctx.scratch.join(f));
    }
    let pair = match &outs[..] {
        [(full, _), (sampled, _)] if m == Mode::MaxRatePair => d2c_percentiles(full)
            .zip(d2c_percentiles(sampled))
            .map(|(a, b)| [a, b]),
        _ => None,
    };
    let per_cpu_s = match (samples, lost) {
        (Some(n), Some(0)) if n > 0 && cpu > Duration::ZERO => Some(n as f64 / cpu.as_secs_f64()),
        _ => None,
    };
    Run {
        iops,
        cpu_per_s: cpu.as_secs_f64() / secs as f64,
        lost,
        per_cpu_s,
        pair,
        idle,
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// A distribution-free interval for the median of `values`, at confidence at least
/// `1 - alpha`: `[x(k), x(n+1-k)]` of the sorted values (1-based) for the largest `k`
/// with P(B ≤ k-1) ≤ alpha/2, B ~ Binomial(n, 1/2): the true median is below `x(k)`
/// only when at most k-1 of the n values are. It assumes only that the rounds are
/// independent draws, not that their differences are normal (they are not: a round
/// with the host busy moves every mode at once). `None` when `n` is too small for any
/// such interval (fewer than 6 rounds at 95 %).
fn median_interval(values: &[f64], alpha: f64) -> Option<(f64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    // The binomial CDF term by term, P(B = i) = C(n, i) / 2^n, from its logarithm: for
    // thousands of rounds the first terms underflow to 0, a mass below 1e-300.
    let mut ln_p = n as f64 * 0.5f64.ln();
    let mut cdf = 0.0;
    let mut k = 0;
    for i in 0..n {
        cdf += ln_p.exp();
        if cdf > alpha / 2.0 {
            break;
        }
        k = i + 1;
        ln_p += ((n - i) as f64 / (i + 1) as f64).ln();
    }
    (k >= 1 && k <= n + 1 - k).then(|| (sorted[k - 1], sorted[n - k]))
}

/// What a run's rounds say about `median >= margin`: decided at 95 % either way, or not.
fn verdict(interval: Option<(f64, f64)>, margin: f64) -> &'static str {
    match interval {
        Some((lo, _)) if lo >= margin => "met",
        Some((_, hi)) if hi < margin => "NOT met",
        Some(_) => "not decided by these rounds",
        None => "too few rounds to decide",
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The floor: the block profile's four events on `kdev`, in the rings `stat` would
/// use (32 MiB over the CPUs), freed as fast as they fill and nothing else; prints
/// `lost N` when SIGINT ends it. With `reject`, each filter also asks for a sector no
/// I/O has: the events are on and every hit is filled and tested, but nothing is
/// written, which is all that in-kernel sampling (`--sample`, `--max-rate`) can save.
fn drain_floor(kdev: u64, reject: bool, burn_ms_per_s: u64) {
    use ntprof_perf::perf::group::{EventSpec, GroupConfig, PerfGroup};
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone()).expect("SIGINT");
    let events = [
        "block_rq_insert",
        "block_rq_issue",
        "block_rq_complete",
        "block_rq_requeue",
    ]
    .iter()
    .map(|e| {
        let id = std::fs::read_to_string(format!("/sys/kernel/tracing/events/block/{e}/id"))
            .expect("tracefs event id");
        EventSpec {
            name: format!("block:{e}"),
            tracefs_id: id.trim().parse().expect("numeric id"),
            filter: Some(if reject {
                format!("dev == {kdev} && sector == {}", u64::MAX)
            } else {
                format!("dev == {kdev}")
            }),
        }
    })
    .collect();
    let cpus = ntprof_perf::perf::host::online_cpus().expect("online CPUs");
    let mut cfg = GroupConfig::new(events, cpus.clone());
    cfg.mmap_pages = ((32usize << 20) / cpus.len().max(1) / 4096)
        .clamp(256, 2048)
        .next_power_of_two()
        .min(2048);
    let mut g = PerfGroup::open(&cfg).expect("open the events");
    g.enable().expect("enable");
    let mut samples = 0;
    let mut last = std::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let _ = g.wait(Duration::from_millis(20));
        for r in 0..g.ring_count() {
            samples += g.drain_ring(r, |_| {}).samples;
        }
        if burn_ms_per_s > 0 {
            // CPU spent on nothing, in proportion to the time since the last round, as a
            // reader's work on the samples of that time would be.
            // At most all of it: more than 1000 ms per s is not a rate.
            let spin = last.elapsed() * burn_ms_per_s.min(1000) as u32 / 1000;
            let start = std::time::Instant::now();
            while start.elapsed() < spin {
                std::hint::spin_loop();
            }
            last = std::time::Instant::now();
        }
    }
    let _ = g.disable();
    for r in 0..g.ring_count() {
        samples += g.drain_ring(r, |_| {}).samples;
    }
    let lost: u64 = g.lost().iter().map(|(_, n)| n).sum();
    println!("samples {samples}  lost {lost}");
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--drain-floor") {
        let burn = argv
            .iter()
            .position(|a| a == "--burn")
            .and_then(|i| argv.get(i + 1)?.parse().ok())
            .unwrap_or(0);
        drain_floor(
            argv.get(2)
                .and_then(|k| k.parse().ok())
                .expect("--drain-floor KDEV [--reject] [--burn MS_PER_S]"),
            argv.get(3).map(String::as_str) == Some("--reject"),
            burn,
        );
        return;
    }
    let args: Vec<u64> = argv.iter().skip(1).filter_map(|a| a.parse().ok()).collect();
    // A comma-separated list of mode keys runs only those (and the untraced baseline).
    let modes: Vec<Mode> = match argv.iter().skip(1).find(|a| a.parse::<u64>().is_err()) {
        None => MODES.to_vec(),
        Some(list) => {
            let keys: Vec<&str> = list.split(',').collect();
            if let Some(bad) = keys.iter().find(|k| !MODES.iter().any(|m| m.key() == **k)) {
                let all: Vec<&str> = MODES.iter().map(|m| m.key()).collect();
                eprintln!("unknown mode {bad:?}: give some of {}", all.join(","));
                std::process::exit(2);
            }
            MODES
                .iter()
                .copied()
                .filter(|m| *m == Mode::None || keys.contains(&m.key()))
                .collect()
        }
    };
    let secs = args.first().copied().unwrap_or(2).max(1);
    let rounds = args.get(1).copied().unwrap_or(20).max(1) as usize;
    if modes.contains(&Mode::Serve) && secs < 60 {
        eprintln!(
            "note: serve's events are on 7 s of every 60 (--duty 3/60, from its start): runs shorter than 60 s overstate its cost"
        );
    }
    let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/ntprof-perf");
    assert!(
        bin.is_file(),
        "build first: cargo build --release ({} missing)",
        bin.display()
    );
    install_tools();
    let l = Loop::new();
    let alt = std::env::var_os("OVERHEAD_ALT_BIN").map(PathBuf::from);
    if let Some(alt) = &alt {
        assert!(
            alt.is_file(),
            "OVERHEAD_ALT_BIN: {} is not a file",
            alt.display()
        );
    }
    let ctx = Ctx {
        bin,
        alt,
        ready: std::env::var("OVERHEAD_DEFER_SIZE").unwrap_or_else(|_| "256M".into()),
        dev: l.dev.clone(),
        kdev: l.kernel_dev(),
        scratch: l.dir.clone(),
        pin: Pin::from_env(),
    };
    // Fill the image so reads hit tmpfs pages, not holes.
    sh(Command::new("dd").args([
        "if=/dev/zero",
        &format!("of={}", l.dev),
        "bs=1M",
        "count=256",
        "oflag=direct",
        "status=none",
    ]));
    let load_before = loadavg();
    fio(&l.dev, 1, ctx.pin.as_ref()); // warm-up

    let mut iops: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    // Samples per second of the tracer's own CPU, with nothing lost: how many events
    // one core of the reader takes in, everything included (syscalls, wake-ups,
    // drain, decode, sinks), as opposed to the pipeline bench's replay.
    let mut per_cpu_s: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut idle: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut lost: Vec<Option<u64>> = vec![Some(0); modes.len()];
    // Per round: sampled / full, for d2c p50 and p99.
    let mut p50_ratio: Vec<f64> = Vec::new();
    let mut p99_ratio: Vec<f64> = Vec::new();
    let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d ^ std::process::id() as u64);
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..modes.len()).collect();
        rng.shuffle(&mut order);
        for &i in &order {
            let r = run(&ctx, modes[i], secs);
            eprintln!(
                "round {}/{rounds}: {:<32} {:>9.0} IOPS  tracer {:>4.0} ms CPU/s  lost {:?}",
                round + 1,
                modes[i].name(),
                r.iops,
                r.cpu_per_s * 1e3,
                r.lost
            );
            if let Some([(f50, f99), (s50, s99)]) = r.pair {
                eprintln!(
                    "    d2c p50 {:.1} µs full, {:.1} µs --max-rate; p99 {:.1} µs full, {:.1} µs --max-rate",
                    f50 / 1e3,
                    s50 / 1e3,
                    f99 / 1e3,
                    s99 / 1e3
                );
                p50_ratio.push(s50 / f50);
                p99_ratio.push(s99 / f99);
            }
            iops[i].push(r.iops);
            cpu[i].push(r.cpu_per_s);
            if let Some(x) = r.per_cpu_s {
                per_cpu_s[i].push(x);
            }
            if let Some(x) = r.idle {
                idle[i].push(x);
            }
            lost[i] = match (lost[i], r.lost) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
    }
    let base = median(&mut iops[0].clone());
    // Each mode against the untraced run of its own round: drift between rounds (the
    // host's other tenants) moves both alike, so this spreads less than medians do.
    let paired = |i: usize| {
        let mut r: Vec<f64> = iops[i].iter().zip(&iops[0]).map(|(m, n)| m / n).collect();
        median(&mut r)
    };
    let host = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let kernel = sh(Command::new("uname").arg("-r"));
    println!(
        "fio 4k randread QD16 libaio, {secs} s per run, {rounds} interleaved shuffled rounds, on {} (tmpfs loop)",
        l.dev
    );
    if let Some(p) = &ctx.pin {
        println!(
            "pinned (OVERHEAD_CPUS): fio, the loop device's worker and every tracer on CPUs {}; the idle column counts those only",
            p.list
        );
    }
    println!(
        "machine: {} CPUs, {host}, kernel {}; load average before {load_before}, after {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel.trim(),
        loadavg()
    );
    println!();
    println!("| tracer | median IOPS | ratio of medians | median of per-round ratios | tracer CPU (ms per s) | CPUs idle | samples per tracer CPU-s, none lost | lost samples |");
    println!("|---|---|---|---|---|---|---|---|");
    let idle: Vec<Option<f64>> = idle
        .iter_mut()
        .map(|v| (!v.is_empty()).then(|| median(v)))
        .collect();
    for (i, m) in modes.iter().enumerate() {
        if *m == Mode::MaxRatePair {
            continue;
        }
        let med = median(&mut iops[i].clone());
        let c = median(&mut cpu[i]);
        println!(
            "| {} | {:.0} | {:.3} | {:.3} | {} | {} | {} | {} |",
            m.name(),
            med,
            med / base,
            paired(i),
            if *m == Mode::None {
                "-".into()
            } else {
                format!("{:.0}", c * 1e3)
            },
            idle[i].map_or("?".into(), |x| format!("{:.0} %", x * 100.0)),
            if per_cpu_s[i].is_empty() {
                "-".into()
            } else {
                format!("{:.2} M", median(&mut per_cpu_s[i]) / 1e6)
            },
            lost[i].map_or("?".into(), |n| n.to_string())
        );
    }
    // A workload that leaves CPUs idle gives a tracer their idle time first: on a Xeon
    // VM fio left half of both idle, and 50 ms/s burnt beside it cost 0.005 of its IOPS
    // where the same costs ≈ 0.05 on hosts that fio keeps busy (docs/performance.md).
    let untraced = modes
        .iter()
        .position(|m| *m == Mode::None)
        .and_then(|i| idle[i]);
    if let Some(untraced) = untraced.filter(|&x| x >= IDLE_NOTE) {
        println!();
        println!(
            "note: untraced, fio left {:.0} % of {} idle: a tracer's CPU comes out of that idle time first, so IOPS show only part of its cost, and the margins below pass more easily than on a host that fio keeps busy; compare the tracer CPU column, see what CPU costs fio here with the burn mode, or hold the run to one CPU (OVERHEAD_CPUS=0)",
            untraced * 100.0,
            ctx.pin
                .as_ref()
                .map_or("the CPUs".to_string(), |p| format!("CPUs {}", p.list))
        );
    }
    // Head to head: the two modes of a pair ran in the same round, so the difference
    // of their ratios to that round's untraced run leaves out the drift between
    // rounds that the ratios of medians carry (on this 2-vCPU VM the floor alone moves
    // by ±0.04 between runs). In the targets' units: 0.03 is 3 % of untraced IOPS.
    let pairs = [
        (Mode::Stat, Mode::Drain, -0.03, true),
        (Mode::Record, Mode::Drain, -0.03, true),
        (Mode::Stat, Mode::Bpftrace, 0.0, true),
        (Mode::Record, Mode::Perf, 0.0, true),
        // Diagnostics, no target: is a reader's cost its CPU time alone (the floor
        // burning as much), and does giving way to the workload (SCHED_IDLE) help?
        (Mode::Stat, Mode::Burn, 0.0, false),
        (Mode::Burn, Mode::Drain, -0.03, false),
        (Mode::StatIdle, Mode::Stat, 0.0, false),
        (Mode::RecordIdle, Mode::Record, 0.0, false),
        // `--defer`: the reader copies, the rest waits for the end of the run.
        (Mode::StatDefer, Mode::Drain, -0.03, false),
        (Mode::RecordDefer, Mode::Drain, -0.03, false),
        (Mode::StatDefer, Mode::Stat, 0.0, false),
        (Mode::RecordDefer, Mode::Record, 0.0, false),
        (Mode::RecordDefer, Mode::Perf, 0.0, false),
        // Two builds in one shuffled run: what a change does, with the drift between
        // rounds left out as for the targets.
        (Mode::StatAlt, Mode::Stat, 0.0, false),
        (Mode::RecordAlt, Mode::Record, 0.0, false),
        // `--defer SIZE`: the memory faulted in before tracing starts.
        (Mode::StatReady, Mode::Drain, -0.03, false),
        (Mode::RecordReady, Mode::Drain, -0.03, false),
        (Mode::RecordReady, Mode::Perf, 0.0, false),
        (Mode::StatReady, Mode::StatDefer, 0.0, false),
        (Mode::RecordReady, Mode::RecordDefer, 0.0, false),
    ];
    let at = |m: Mode| modes.iter().position(|x| *x == m);
    let mut head_to_head = Vec::new();
    for (a, b, margin, is_target) in pairs {
        let (Some(i), Some(j)) = (at(a), at(b)) else {
            continue;
        };
        let mut r: Vec<f64> = (0..iops[0].len())
            .map(|k| (iops[i][k] - iops[j][k]) / iops[0][k])
            .collect();
        let won = r.iter().filter(|&&d| d >= margin).count();
        let med = median(&mut r);
        let ci = median_interval(&r, 0.05);
        head_to_head.push((a, b, margin, is_target, med, ci, won, r.len()));
    }
    if !head_to_head.is_empty() {
        println!();
        println!("Head to head, within each round (the first's ratio to that round's untraced IOPS, less the second's):");
        println!();
        println!("| pair | median | 95 % interval of the median | rounds at or above the mark | the mark, at 95 % |");
        println!("|---|---|---|---|---|");
        for (a, b, margin, is_target, med, ci, won, n) in &head_to_head {
            let what = if *is_target { "target" } else { "no target" };
            let ci_text = ci.map_or("-".to_string(), |(lo, hi)| format!("{lo:+.3} to {hi:+.3}"));
            println!(
                "| {} against {} | {med:+.3} | {ci_text} | {won} of {n} ({what} {margin:+.2}) | {} |",
                a.key(),
                b.key(),
                verdict(*ci, *margin)
            );
        }
        println!();
        println!("(the interval is distribution-free, from the rounds' order statistics: where it straddles the mark, the run cannot tell which side the median is on, and more rounds or a quieter host are needed)");
    }
    let ratio = |m: Mode| {
        modes
            .iter()
            .position(|x| *x == m)
            .map(|i| median(&mut iops[i].clone()) / base)
    };
    // A target over modes that were not run is left out.
    let mut targets: Vec<String> = Vec::new();
    let mut target = |what: &str, ok: Option<bool>| {
        if let Some(ok) = ok {
            targets.push(format!("{what}: {}", if ok { "met" } else { "NOT met" }));
        }
    };
    let all = |ms: &[Mode]| ms.iter().map(|m| ratio(*m)).collect::<Option<Vec<f64>>>();
    target(
        "stat and record within 0.03 of the floor",
        all(&[Mode::Stat, Mode::Record, Mode::Drain]).map(|r| r[0].min(r[1]) >= r[2] - 0.03),
    );
    target(
        "stat ≥ bpftrace",
        all(&[Mode::Stat, Mode::Bpftrace]).map(|r| r[0] >= r[1]),
    );
    target(
        "record ≥ perf record",
        all(&[Mode::Record, Mode::Perf]).map(|r| r[0] >= r[1]),
    );
    for (a, b, margin, _, med, ci, ..) in head_to_head.iter().filter(|h| h.3) {
        // The median's side of the mark, and whether the rounds decide it.
        let what = format!(
            "{} − {} ≥ {margin:+.2} head to head (at 95 %: {})",
            a.key(),
            b.key(),
            verdict(*ci, *margin)
        );
        target(&what, Some(*med >= *margin));
    }
    target("--sample 8 ≥ 0.93", ratio(Mode::Sample8).map(|r| r >= 0.93));
    target(
        "--sample 64 ≥ 0.97",
        ratio(Mode::Sample64).map(|r| r >= 0.97),
    );
    target("serve ≥ 0.97", ratio(Mode::Serve).map(|r| r >= 0.97));
    if !p50_ratio.is_empty() {
        let (p50, p99) = (median(&mut p50_ratio), median(&mut p99_ratio));
        println!();
        println!(
            "stat --max-rate 2000 beside a full stat of the same runs: d2c p50 {p50:.3} and p99 {p99:.3} of the full trace's (median of {} rounds)",
            p50_ratio.len()
        );
        target(
            "--max-rate p50 and p99 within 5 %",
            Some((p50 - 1.0).abs() <= 0.05 && (p99 - 1.0).abs() <= 0.05),
        );
    }
    let full: Vec<usize> = modes
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m, Mode::Stat | Mode::Record))
        .map(|(i, _)| i)
        .collect();
    if !full.is_empty() {
        target(
            "zero lost at full rate",
            Some(full.iter().all(|&i| lost[i] == Some(0))),
        );
    }
    println!();
    println!("targets: {}", targets.join("; "));
}

#[cfg(test)]
mod tests {
    use super::{cpu_mask_hex, idle_between, median_interval, parse_cpu_ticks, verdict};

    #[test]
    fn idle_is_idle_and_iowait_of_the_first_line_without_guest_time() {
        // user nice system idle iowait irq softirq steal guest guest_nice: guest time
        // is counted in user already, so it is not added again.
        let a = "cpu  100 0 50 800 20 0 30 0 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(parse_cpu_ticks(a, None), Some((820, 1000)));
        let b = "cpu  150 0 100 1000 20 0 30 0 60 0\n";
        let idle = idle_between(parse_cpu_ticks(a, None), parse_cpu_ticks(b, None)).unwrap();
        assert!((idle - 200.0 / 300.0).abs() < 1e-12, "{idle}");
        // A kernel of four fields, a per-CPU line first, or no time between readings:
        // nothing, not a wrong share.
        assert_eq!(parse_cpu_ticks("cpu  1 2 3 4\n", None), None);
        assert_eq!(parse_cpu_ticks("cpu0 1 2 3 4 5 6 7 8\n", None), None);
        let (pa, pb) = (parse_cpu_ticks(a, None), parse_cpu_ticks(b, None));
        assert_eq!(idle_between(pa, pa), None);
        assert_eq!(idle_between(pb, pa), None);
    }

    #[test]
    fn pinned_idle_counts_the_chosen_cpus_only() {
        let stat = "cpu  9 9 9 9 9 9 9 9\ncpu0 10 0 10 70 10 0 0 0 5 0\ncpu1 1 0 1 90 0 0 0 8\ncpu10 0 0 0 100 0 0 0 0\nintr 5\n";
        assert_eq!(parse_cpu_ticks(stat, Some(&[0])), Some((80, 100)));
        assert_eq!(parse_cpu_ticks(stat, Some(&[0, 1])), Some((170, 200)));
        // cpu10 is not cpu1 (no prefix match); a CPU with no line gives nothing.
        assert_eq!(parse_cpu_ticks(stat, Some(&[10])), Some((100, 100)));
        assert_eq!(parse_cpu_ticks(stat, Some(&[0, 2])), None);
    }

    #[test]
    fn cpu_lists_and_masks_read_and_write_as_the_kernel_does() {
        // OVERHEAD_CPUS is read by the library's parser of the kernel's CPU lists.
        let parse = |l: &str| ntprof_perf::perf::parse_cpu_list(l).ok();
        assert_eq!(parse("0"), Some(vec![0]));
        assert_eq!(parse("3,0-1,1"), Some(vec![0, 1, 3]));
        for bad in ["", "a", "2-1", "0,,1", "-1"] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
        assert_eq!(cpu_mask_hex(&[0]), "00000001");
        assert_eq!(cpu_mask_hex(&[0, 1, 3]), "0000000b");
        assert_eq!(cpu_mask_hex(&[1, 33]), "00000002,00000002");
    }

    fn ranks(n: usize) -> Vec<f64> {
        (1..=n).map(|i| i as f64).collect()
    }

    #[test]
    fn the_interval_is_the_order_statistics_the_binomial_gives() {
        // n = 20: P(B ≤ 5) = 0.0207 ≤ 0.025 < P(B ≤ 6) = 0.0577.
        assert_eq!(median_interval(&ranks(20), 0.05), Some((6.0, 15.0)));
        // n = 9: P(B ≤ 1) = 10/512 ≤ 0.025 < P(B ≤ 2) = 46/512.
        assert_eq!(median_interval(&ranks(9), 0.05), Some((2.0, 8.0)));
        // n = 6: only the extremes (1/64 each side); n = 5: not even those (1/32).
        assert_eq!(median_interval(&ranks(6), 0.05), Some((1.0, 6.0)));
        assert_eq!(median_interval(&ranks(5), 0.05), None);
        assert_eq!(median_interval(&[], 0.05), None);
        // Unsorted input is sorted first.
        let mut shuffled = ranks(20);
        shuffled.reverse();
        shuffled.swap(3, 17);
        assert_eq!(median_interval(&shuffled, 0.05), Some((6.0, 15.0)));
        // Past the 1,074 rounds where 2^-n underflows: about n/2 ± 1.96 √n / 2.
        let (lo, hi) = median_interval(&ranks(4000), 0.05).unwrap();
        assert!(
            (1937.0..=1939.0).contains(&lo) && hi == 4001.0 - lo,
            "{lo} {hi}"
        );
    }

    #[test]
    fn the_interval_holds_the_median_at_least_as_often_as_it_says() {
        // Skewed draws (a square of a uniform) whose median is 0.25: over many runs of
        // 20 rounds, the interval holds it in ≥ 95 % of them (0.9586 exactly), and an
        // interval one rank narrower each side would not (0.885).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            u * u
        };
        let (runs, mut held) = (20_000, 0);
        for _ in 0..runs {
            let v: Vec<f64> = (0..20).map(|_| next()).collect();
            let (lo, hi) = median_interval(&v, 0.05).unwrap();
            held += usize::from(lo <= 0.25 && 0.25 <= hi);
        }
        let coverage = held as f64 / runs as f64;
        assert!((0.95..0.97).contains(&coverage), "coverage {coverage}");
    }

    #[test]
    fn the_verdict_says_when_the_rounds_cannot_tell() {
        assert_eq!(verdict(Some((-0.02, 0.01)), -0.03), "met");
        assert_eq!(verdict(Some((-0.09, -0.04)), -0.03), "NOT met");
        assert_eq!(
            verdict(Some((-0.074, -0.020)), -0.03),
            "not decided by these rounds"
        );
        assert_eq!(verdict(None, -0.03), "too few rounds to decide");
    }
}
