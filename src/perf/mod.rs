//! Stage 2 of the pipeline (tracefs → **perf** → decode → order → correlate → sink): opens
//! tracepoint events with `perf_event_open`, one mmap'd ring per CPU, and hands out parsed
//! perf records ([`Record`]) whose `raw` bytes are the tracepoint payload. It must not decode
//! tracepoint fields, order records across CPUs, or read tracefs beyond the online CPU list:
//! event ids and filters come in through [`GroupConfig`].
//!
//! Layout: `sys.rs` holds every syscall (and almost all `unsafe`), `ring.rs` one ring,
//! `record.rs` pure record parsing, `group.rs` all events on all CPUs.

pub mod group;
pub mod host;
pub mod ledger;
pub mod record;
pub mod ring;
mod sys;

use std::io;

pub use group::{
    DrainStats, EventSpec, GroupConfig, Hotplug, PerfGroup, Tally, DEFAULT_MMAP_PAGES,
    DEFAULT_WAKEUP_FRACTION,
};
pub use host::{
    fds_needed, nofile_target, online_cpus, parse_cpu_list, raise_nofile, NofileLimit, OnlineWatch,
    FD_MARGIN,
};
pub use record::{parse_record, Record, RecordError, Sample, SampleFormat, UnsupportedSampleType};
pub use ring::{walk_ring_bytes, Ring, RingError, WalkStats};
pub use sys::{HugeBuf, HUGE_PAGE};

/// Errors of the perf stage. Each names the event and CPU it concerns and, where the fix is
/// known, says what to do.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error(
        "perf_event_open of {event} on CPU {cpu} was refused ({source}): run as root, or \
         `sysctl kernel.perf_event_paranoid=-1`, or give the binary CAP_PERFMON \
         (tracepoints may also need read access to tracefs)"
    )]
    PermissionDenied {
        event: String,
        cpu: u32,
        source: io::Error,
    },
    #[error(
        "perf_event_open of {event} (tracefs id {tracefs_id}) on CPU {cpu} failed ({source}): \
         the kernel does not know this event id or rejected its attributes; check \
         events/<system>/<name>/id under tracefs on this kernel and that CPU {cpu} is online"
    )]
    EventUnavailable {
        event: String,
        tracefs_id: u64,
        cpu: u32,
        source: io::Error,
    },
    #[error(
        "perf_event_open of {event} on CPU {cpu} failed: out of file descriptors (EMFILE). \
         This run holds one per event per CPU and one per CPU for its ring, about {needed} \
         with the margin, and RLIMIT_NOFILE is {soft} (hard limit {hard}); ntprof-perf raises the soft limit up to \
         the hard one by itself, so raise the hard limit (`ulimit -Hn {needed}` as root, or \
         LimitNOFILE= for a service) or trace fewer events (another profile, or for \
         nvme-tcp one --side)"
    )]
    TooManyOpenFiles {
        event: String,
        cpu: u32,
        /// Descriptors the whole group needs ([`group::fds_needed`]).
        needed: u64,
        /// RLIMIT_NOFILE when the open failed.
        soft: u64,
        hard: u64,
        source: io::Error,
    },
    #[error(
        "perf_event_open of {event} on CPU {cpu} failed: the system-wide file table is full \
         (ENFILE); this run needs about {needed} descriptors: raise `sysctl fs.file-max` \
         or close other programs' files, or trace fewer events"
    )]
    SystemFileTableFull {
        event: String,
        cpu: u32,
        needed: u64,
        source: io::Error,
    },
    #[error("perf_event_open of {event} on CPU {cpu} failed: {source}")]
    Open {
        event: String,
        cpu: u32,
        source: io::Error,
    },
    #[error(
        "the kernel rejected filter {filter:?} for {event} (CPU {cpu}): check the field names \
         against the event's format file and the ftrace filter syntax \
         (e.g. `(x & 24) == 0` is rejected, `!(x & 8)` is accepted)"
    )]
    FilterRejected {
        event: String,
        filter: String,
        cpu: u32,
        source: io::Error,
    },
    #[error("filter {filter:?} for {event} contains a NUL byte")]
    FilterNul { event: String, filter: String },
    #[error("{op} of {event} on CPU {cpu} failed: {source}")]
    Ioctl {
        op: &'static str,
        event: String,
        cpu: u32,
        source: io::Error,
    },
    #[error(
        "mmap of the {bytes}-byte perf ring of CPU {cpu} failed ({source}); use fewer ring \
         pages or raise `kernel.perf_event_mlock_kb`"
    )]
    Mmap {
        cpu: u32,
        bytes: usize,
        source: io::Error,
    },
    #[error(
        "perf ring of CPU {cpu} has an unexpected layout: data at {data_offset}, \
         {data_size} bytes, in a {mapped}-byte mapping"
    )]
    BadRingLayout {
        cpu: u32,
        data_offset: u64,
        data_size: u64,
        mapped: usize,
    },
    #[error("perf ring size must be a power of two of pages (1, 2, 4, …), got {pages}")]
    BadPageCount { pages: usize },
    #[error("wakeup fraction must be at least 1 (wake when the ring is 1/N full), got {0}")]
    BadWakeupFraction(u32),
    #[error("the group read of CPU {cpu}'s event counts returned {read} bytes for {members:?} members, expected {want} bytes with one value per event opened and the leader")]
    ShortGroupRead {
        cpu: u32,
        read: usize,
        want: usize,
        /// The member count the kernel gave, if it gave one.
        members: Option<u64>,
    },
    #[error("read of the count of {event} on CPU {cpu} returned {read} bytes, expected {want}")]
    ShortCount {
        event: String,
        cpu: u32,
        read: usize,
        want: usize,
    },
    #[error("{event} is one of a perf group, which cannot turn its events on and off one by one while it runs (a member turned on does not start): open the events with `GroupConfig::grouped` false")]
    GroupedToggle { event: String },
    #[error("the group leader of CPU {cpu} (a dummy software event that owns the ring and is read for the counts) failed: {source}")]
    Leader { cpu: u32, source: io::Error },
    #[error("no events to open")]
    NoEvents,
    #[error("no CPUs to open events on")]
    NoCpus,
    #[error("reading clock {clockid} (the clock samples are stamped with) failed: {source}")]
    Clock { clockid: i32, source: io::Error },
    #[error("poll on the perf rings failed: {0}")]
    Poll(io::Error),
    #[error("reading the online CPU list {path}: {source}")]
    CpuListRead {
        path: &'static str,
        source: io::Error,
    },
    #[error("cannot parse CPU list {text:?}: {reason}")]
    BadCpuList { text: String, reason: &'static str },
}

/// Runs the calling thread (the reader) at real-time priority `prio` (1-99), as
/// `perf record -r` does, so a busy CPU cannot starve the reader while rings fill.
pub fn set_realtime(prio: u8) -> io::Result<()> {
    sys::set_fifo(i32::from(prio))
}

/// Runs the calling thread only on CPU time no other task wants (SCHED_IDLE): for work
/// done ahead of need, such as the memory `--defer` fills.
pub fn set_idle_priority() -> io::Result<()> {
    sys::set_idle()
}

/// For kernel tests: reports that the kernel cannot be used. With `NTPROF_REQUIRE_KERNEL=1`
/// (set by CI) that is a failure, so CI cannot pass by skipping; otherwise it is a loud skip.
#[cfg(test)]
pub(crate) fn kernel_unavailable(why: &str) {
    if std::env::var("NTPROF_REQUIRE_KERNEL").as_deref() == Ok("1") {
        panic!("NTPROF_REQUIRE_KERNEL=1 but the kernel is not usable: {why}");
    }
    // The test harness captures `eprintln!`, not `say!`.
    #[allow(clippy::print_stderr)]
    {
        eprintln!("SKIPPED: {why}");
    }
}

/// For kernel tests: the tracefs `events` directory, mounting tracefs if needed. `None`
/// (after [`kernel_unavailable`]) when there is none.
#[cfg(test)]
pub(crate) fn test_kernel_ready() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let candidates = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];
    let find = || {
        candidates
            .iter()
            .map(|root| PathBuf::from(root).join("events"))
            .find(|p| p.is_dir())
    };
    if let Some(events) = find() {
        return Some(events);
    }
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    if let Some(events) = find() {
        return Some(events);
    }
    let how = match mounted {
        Ok(status) => format!("`mount -t tracefs` {status}"),
        Err(e) => format!("cannot run mount: {e}"),
    };
    kernel_unavailable(&format!(
        "no readable tracefs events directory under {candidates:?}, and mounting failed ({how})"
    ));
    None
}
