//! What one written sample costs the traced task, by sample layout.
//!
//! A tight loop of `getppid()` (which does nothing else) fires
//! `syscalls:sys_enter_getppid`; the loop runs untraced, traced with a filter that
//! rejects every sample (the event is enabled, nothing is written), and traced with
//! every sample written in each layout:
//! - `lean`: `TIME | RAW`, what ntprof-perf opens;
//! - `id+cpu`: `IDENTIFIER | TIME | CPU | RAW`, what it opened before;
//! - `perf`: `IP | TID | TIME | CPU | PERIOD | RAW`, perf record's usual layout.
//!
//! And, for the other way of tracing, bpftrace programs on the same tracepoint (a BPF
//! program run per hit, no sample written): `count()` (a per-CPU counter) and
//! `@s[tid] = nsecs` (a hash map update: what a latency tracer does at each
//! submission). Each bpftrace batch starts bpftrace, waits until it says it attached,
//! runs the batch, and stops it. Skipped when bpftrace is not installed.
//!
//! Rounds are interleaved in a shuffled order, the ring is drained between batches
//! (outside the timed part), and the median ns per call is printed with the
//! difference to untraced: the cost of a sample, or of a BPF program run. The raw payload here is 16 bytes; a
//! block event's is 40–70, so block samples cost somewhat more in every layout.
//!
//! Run as root: `cargo run --release --example sample_cost -- [CALLS] [ROUNDS]`
//! (default 200000 calls per batch, 15 rounds).

use ntprof_perf::perf::{online_cpus, EventSpec, GroupConfig, PerfGroup, SampleFormat};
use perf_event_open_sys::bindings::{
    PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_RAW,
    PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
};
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// bpftrace programs on `syscalls:sys_enter_getppid`, by name.
const BPF: [(&str, &str); 2] = [
    ("bpftrace: @n = count()", "@n = count();"),
    ("bpftrace: @s[tid] = nsecs (map update)", "@s[tid] = nsecs;"),
];

/// ns per call of `calls` getppid()s while bpftrace runs `action` on every call.
fn bpf_batch(action: &str, calls: u64) -> f64 {
    let mut child = Command::new("bpftrace")
        .args([
            "-e",
            &format!(
                "tracepoint:syscalls:sys_enter_getppid /pid == {}/ {{ {action} }}",
                std::process::id()
            ),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("bpftrace");
    // "Attaching 1 probe..." comes once the program is attached.
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().expect("piped"));
    let _ = out.read_line(&mut line);
    std::thread::sleep(Duration::from_millis(100));
    let ns = batch(calls);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
    let _ = std::io::Read::read_to_string(&mut out, &mut line);
    let _ = child.wait();
    ns
}

/// A traced mode: the sample layout and the kernel filter.
type Traced = (SampleFormat, Option<&'static str>);

fn event_id() -> u64 {
    for root in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        let p = format!("{root}/events/syscalls/sys_enter_getppid/id");
        if let Ok(s) = std::fs::read_to_string(&p) {
            return s.trim().parse().expect("event id");
        }
    }
    panic!("no syscalls:sys_enter_getppid under tracefs (CONFIG_FTRACE_SYSCALLS), or not root");
}

/// ns per call of `calls` getppid()s.
fn batch(calls: u64) -> f64 {
    let t = Instant::now();
    for _ in 0..calls {
        std::hint::black_box(std::os::unix::process::parent_id());
    }
    t.elapsed().as_nanos() as f64 / calls as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let calls: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(15);
    let id = event_id();
    // The loop stays on one CPU, so the ring it writes is that CPU's.
    let cpu = pin_to_last_cpu();
    let fmt = |bits: u32| SampleFormat::new(bits as u64).unwrap();
    let modes: Vec<(&str, Option<Traced>)> = vec![
        ("untraced", None),
        (
            "filtered out",
            Some((SampleFormat::LEAN, Some("__syscall_nr == -1"))),
        ),
        ("lean: TIME|RAW", Some((SampleFormat::LEAN, None))),
        (
            "id+cpu: IDENTIFIER|TIME|CPU|RAW",
            Some((
                fmt(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW),
                None,
            )),
        ),
        (
            "perf: IP|TID|TIME|CPU|PERIOD|RAW",
            Some((
                fmt(PERF_SAMPLE_IP
                    | PERF_SAMPLE_TID
                    | PERF_SAMPLE_TIME
                    | PERF_SAMPLE_CPU
                    | PERF_SAMPLE_PERIOD
                    | PERF_SAMPLE_RAW),
                None,
            )),
        ),
    ];
    // Each batch must fit in the ring: 200,000 samples of ≤ 64 bytes = 12.8 MB.
    let pages = (calls as usize * 64 / 4096).next_power_of_two().max(256);
    let groups: Vec<Option<PerfGroup>> = modes
        .iter()
        .map(|(_, m)| {
            m.map(|(format, filter)| {
                let mut cfg = GroupConfig::new(
                    vec![EventSpec {
                        name: "syscalls:sys_enter_getppid".into(),
                        tracefs_id: id,
                        filter: filter.map(str::to_string),
                    }],
                    vec![cpu],
                );
                cfg.format = format;
                cfg.mmap_pages = pages;
                PerfGroup::open(&cfg).unwrap_or_else(|e| panic!("{e}"))
            })
        })
        .collect();
    let mut groups = groups;
    let bpf = Command::new("bpftrace")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !bpf {
        eprintln!("bpftrace not installed: its modes are left out (apt-get install bpftrace)");
    }
    let bpf_modes: &[(&str, &str)] = if bpf { &BPF } else { &[] };
    let all = modes.len() + bpf_modes.len();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); all];
    let mut lost = vec![0u64; modes.len()];
    let mut samples = vec![0u64; modes.len()];
    let mut rng = fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15);
    batch(calls); // warm up
    for _ in 0..rounds {
        let mut order: Vec<usize> = (0..all).collect();
        rng.shuffle(&mut order);
        for m in order {
            if m >= modes.len() {
                times[m].push(bpf_batch(bpf_modes[m - modes.len()].1, calls));
                continue;
            }
            if let Some(g) = groups[m].as_mut() {
                g.enable().unwrap();
            }
            times[m].push(batch(calls));
            if let Some(g) = groups[m].as_mut() {
                g.disable().unwrap();
                for r in 0..g.ring_count() {
                    let st = g.drain_ring(r, |_| {});
                    lost[m] += st.lost;
                    samples[m] += st.samples;
                }
            }
        }
    }
    let base = median(&mut times[0].clone());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "getppid() loop on CPU {cpu}, {calls} calls × {rounds} rounds, load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!(
        "{:<40} {:>10} {:>12} {:>12} {:>8}",
        "mode", "ns/call", "+ns/hit", "samples", "lost"
    );
    for (i, (name, _)) in modes.iter().enumerate() {
        let med = median(&mut times[i]);
        println!(
            "{name:<40} {med:>10.0} {:>12.0} {:>12} {:>8}",
            med - base,
            samples[i],
            lost[i]
        );
    }
    for (k, (name, _)) in bpf_modes.iter().enumerate() {
        let med = median(&mut times[modes.len() + k]);
        println!(
            "{name:<40} {med:>10.0} {:>12.0} {:>12} {:>8}",
            med - base,
            "-",
            "-"
        );
    }
}

/// Pins this (single-threaded) process to the last online CPU with taskset; returns it.
fn pin_to_last_cpu() -> u32 {
    let cpu = *online_cpus().unwrap().last().unwrap();
    let st = std::process::Command::new("taskset")
        .args(["-pc", &cpu.to_string(), &std::process::id().to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("taskset (util-linux)");
    assert!(st.success(), "taskset failed");
    cpu
}
