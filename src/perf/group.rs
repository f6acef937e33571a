//! Stage 2 (perf), all rings: every configured tracepoint opened on every CPU, one ring per
//! CPU, polled together. It hands parsed records to the caller ring by ring and counts
//! losses per CPU; it must not decode payloads or merge rings by time (that is `order`).
//!
//! # Counting what the kernel counted
//! The kernel's sampling path can give up a sample it has already counted, with no
//! `PERF_RECORD_LOST` (see [`Tally`]). So every sample received is counted per CPU and
//! per event (by the `common_type` its payload starts with: no id field is needed), and
//! [`PerfGroup::snapshot`] reads each event's own count (with the `PERF_FORMAT_LOST`
//! count where the kernel has it) to compare.
//!
//! # One read per CPU
//! A CPU's events are one perf group under a dummy software event that owns the ring,
//! so that a snapshot is one `read(2)` per CPU (`PERF_FORMAT_GROUP`) instead of one per
//! event and CPU. Reading an active event of another CPU costs an interrupt there (the
//! kernel reads it on its CPU): per event, that was a few µs of the traced CPU and of
//! the reader each, at every snapshot, and thousands per snapshot for nvme-tcp on a
//! large host. The leader is a dummy, not a tracepoint, because a group counts only
//! while its leader is on, and `--max-rate` turns tracepoints off one by one.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use perf_event_open_sys::bindings::{perf_event_attr, PERF_FLAG_FD_CLOEXEC, PERF_TYPE_TRACEPOINT};

use super::host::{fds_needed, raise_nofile};
use super::record::{Record, RecordError, SampleFormat};
use super::ring::{Ring, RingError};
use super::{sys, PerfError};
use perf_event_open_sys::bindings::{PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE};

/// Data pages per CPU ring unless configured otherwise (1 MiB with 4 KiB pages).
pub const DEFAULT_MMAP_PAGES: usize = 256;
/// Wake the reader when a ring is a quarter full.
pub const DEFAULT_WAKEUP_FRACTION: u32 = 4;

/// `PERF_FORMAT_LOST` (Linux 6.0): `read(2)` also returns how many of this event's samples
/// found its ring full. Not in every architecture's bindings, hence spelled out.
const PERF_FORMAT_LOST: u64 = 1 << 4;

/// One tracepoint to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// `system:name`, e.g. `block:block_rq_issue`; used in errors only.
    pub name: String,
    /// The event's `id` file under tracefs.
    pub tracefs_id: u64,
    /// An ftrace filter expression applied in the kernel, e.g. `qid != 0`.
    pub filter: Option<String>,
}

/// What to open, where, and how the rings behave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    pub events: Vec<EventSpec>,
    pub cpus: Vec<u32>,
    /// Data pages per CPU; a power of two.
    pub mmap_pages: usize,
    /// Wake the reader when a ring is 1/N full. Never per sample: that costs ~20x per event.
    pub wakeup_fraction: u32,
    /// Clock for sample times, e.g. `libc::CLOCK_MONOTONIC`.
    pub clockid: i32,
    /// What each sample carries ([`SampleFormat::LEAN`] unless measuring others).
    pub format: SampleFormat,
    /// Each CPU's events in one perf group, its counts read at once (see the module
    /// doc). `false` for a run that turns events on and off one by one while it runs
    /// (`--max-rate`): a member turned on while its group runs does not start (seen on
    /// 6.18), so those events are opened alone and read one by one.
    pub grouped: bool,
}

impl GroupConfig {
    /// `events` on `cpus` with default ring size, wake-up fraction and CLOCK_MONOTONIC.
    pub fn new(events: Vec<EventSpec>, cpus: Vec<u32>) -> Self {
        GroupConfig {
            events,
            cpus,
            mmap_pages: DEFAULT_MMAP_PAGES,
            wakeup_fraction: DEFAULT_WAKEUP_FRACTION,
            clockid: libc::CLOCK_MONOTONIC,
            format: SampleFormat::LEAN,
            grouped: true,
        }
    }
}

/// What one [`PerfGroup::drain_ring`] call saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainStats {
    /// Bytes released back to the kernel.
    pub bytes: u64,
    /// Well-formed records passed to the callback (samples + lost + other).
    pub records: u64,
    pub samples: u64,
    /// `PERF_RECORD_LOST` records, and the number of samples they report lost.
    pub lost_records: u64,
    pub lost: u64,
    pub other: u64,
    /// `PERF_RECORD_THROTTLE` records among `other`.
    pub throttled: u64,
    /// Records that failed to parse; not passed on.
    pub malformed: u64,
    pub first_malformed: Option<RecordError>,
    /// The ring's own bookkeeping was inconsistent; the rest of its pending data was skipped.
    pub ring_error: Option<RingError>,
}

/// Records other than samples and LOST, by kind: the kernel tells of sampling it
/// stopped (THROTTLE, when an event fires faster than `perf_event_max_sample_rate`
/// allows) and started again (UNTHROTTLE); no other kind is asked for, so any other is
/// counted as unexpected.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RecordKinds {
    pub throttled: u64,
    pub unthrottled: u64,
    pub other: u64,
}

/// The sample clock (`clockid`) now, in ns.
fn sample_clock(clockid: i32) -> Result<u64, PerfError> {
    let ts = nix::time::clock_gettime(nix::time::ClockId::from_raw(clockid)).map_err(|e| {
        PerfError::Clock {
            clockid,
            source: e.into(),
        }
    })?;
    // CLOCK_MONOTONIC and friends are never negative; clamp rather than wrap if one were.
    let secs = u64::try_from(ts.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec()).unwrap_or(0);
    Ok(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
}

/// The events of one CPU, feeding one ring.
#[derive(Debug)]
struct CpuRing {
    cpu: u32,
    /// A dummy event that owns the ring and is polled; the group leader, read for every
    /// count of the group at once, when the events are grouped.
    leader: OwnedFd,
    /// Indexed like `GroupConfig::events`; each writes into the leader's ring.
    fds: Vec<OwnedFd>,
    ring: Ring,
    /// Samples reported lost by `PERF_RECORD_LOST` records.
    lost: u64,
    /// Records that are neither samples nor LOST.
    kinds: RecordKinds,
    /// Samples received, per distinct tracepoint (`PerfGroup::types`).
    received: Vec<u64>,
    snap: Option<Snap>,
    /// The leader's group read, reused.
    buf: Vec<u8>,
    /// Events read one by one: per event, its count and lost count, read once it was
    /// off. An event that is off counts nothing, and `--max-rate` keeps most of the
    /// parts of its sample off: they are read once, not at every snapshot.
    frozen: Vec<Option<[u64; 2]>>,
    /// The CPU went offline: the kernel took its events out (a group is broken up)
    /// and never puts them back, so they count and sample nothing more. Their counts
    /// stay readable one by one; a CPU that comes back gets a new ring (see
    /// [`PerfGroup::follow_cpus`]).
    dead: bool,
}

/// The kernel's counts of one ring's events, and the samples received that were
/// stamped no later than the clock readings around them. Per distinct tracepoint.
#[derive(Debug, Clone)]
struct Snap {
    counts: Vec<Count>,
    /// `PERF_FORMAT_LOST` counts (`None` where the kernel has none).
    lost: Option<Vec<u64>>,
    /// Samples stamped no later than `read_by`, and no later than `at`.
    received: Vec<[u64; 2]>,
}

/// One tracepoint's count on one CPU, between two readings of the sample clock.
#[derive(Debug, Clone, Copy, Default)]
struct Count {
    at: u64,
    counted: u64,
    read_by: u64,
}

/// One event on one CPU: what the kernel counted against what arrived.
///
/// `counted` is the event's own count (`read(2)`), which the kernel bumps before it
/// tries to write the sample (`perf_swevent_event`); a sample it then gives up is in
/// `counted` but neither in a ring nor in a `PERF_RECORD_LOST`. So
/// `counted - received` is every sample that did not arrive, and of those, `lost`
/// (when the kernel says) found the ring full; the rest were dropped silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub cpu: u32,
    /// Index into [`PerfGroup::type_names`].
    pub event: usize,
    /// Sample clock read just before `counted`.
    pub at: u64,
    /// Sample clock read just after `counted`.
    pub read_by: u64,
    pub counted: u64,
    /// Samples received stamped no later than `read_by`.
    pub received: u64,
    /// Samples received stamped no later than `at`.
    pub received_at: u64,
    /// Samples the ring had no room for (`PERF_FORMAT_LOST`); `None` before Linux 6.0.
    pub lost: Option<u64>,
}

/// The kernel bumps an event's count before it stamps the sample, and the count is read
/// between two clock readings: a sample stamped by `at` was counted, a sample stamped
/// after `read_by` was not (but for an interrupt or a vCPU stall between its count and
/// its stamp: see `ledger`), and one stamped in between may have been either. So
/// [`missing`](Tally::missing) is at most what went missing among the samples counted,
/// [`missing_at_most`](Tally::missing_at_most) at least: the two agree when no sample
/// was stamped while the count was read.
impl Tally {
    /// Another ring's tally of the same CPU and event: the sums, the read window
    /// spanning both.
    fn add(&mut self, o: &Tally) {
        self.at = self.at.min(o.at);
        self.read_by = self.read_by.max(o.read_by);
        self.counted += o.counted;
        self.received += o.received;
        self.received_at += o.received_at;
        self.lost = match (self.lost, o.lost) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
    }

    /// Samples counted that did not arrive, lost or dropped: those stamped during the
    /// read taken as counted (they may hide as many that went missing).
    pub fn missing(&self) -> u64 {
        self.counted.saturating_sub(self.received)
    }

    /// As [`missing`](Tally::missing), those stamped during the read taken as not
    /// counted: never less than what went missing by the read.
    pub fn missing_at_most(&self) -> u64 {
        self.counted.saturating_sub(self.received_at)
    }
}

/// Every configured event on every configured CPU. Dropping it unmaps the rings and closes
/// the events.
#[derive(Debug)]
pub struct PerfGroup {
    /// Per event: whether `enable` turns it on (see [`PerfGroup::set_active`]).
    active: Vec<bool>,
    enabled: bool,
    names: Vec<String>,
    rings: Vec<CpuRing>,
    /// (perf id, event index), sorted by id, for a binary search per sample and per
    /// value of a group read.
    ids: Vec<(u64, usize)>,
    /// The clock samples are stamped with (`GroupConfig::clockid`).
    clockid: i32,
    format: SampleFormat,
    /// The distinct tracefs ids opened (a payload's `common_type`), and a name for each.
    types: Vec<u16>,
    type_names: Vec<String>,
    /// Per event (like `GroupConfig::events`): its index in `types`.
    type_of: Vec<usize>,
    /// Whether the events were opened with `PERF_FORMAT_LOST`.
    lost_format: bool,
    /// Whether each CPU's events are one group ([`GroupConfig::grouped`]).
    grouped: bool,
    /// What a CPU that comes online is opened with.
    specs: Vec<EventSpec>,
    filters: Vec<Option<CString>>,
    mmap_pages: usize,
    watermark: u32,
    /// Descriptors the run needs, for the advice when they run out.
    needed: u64,
    /// CPUs that went offline, and CPUs that came online, while the run went on.
    hotplug: Hotplug,
    /// CPUs that came online and were refused: not tried again.
    refused: Vec<u32>,
    /// A ring was found dead by its counts: its CPU may be back already, with an
    /// online list that reads as before (see [`PerfGroup::follow_cpus`]).
    recheck: bool,
}

/// CPUs that changed state during a run (see [`PerfGroup::follow_cpus`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hotplug {
    /// CPUs that went offline: nothing runs there, so nothing is missed.
    pub offlined: u64,
    /// CPUs that came online and were opened: their events from the moment they came
    /// online to the moment their ring was opened (one drain round) were not traced
    /// and are in no count.
    pub onlined: u64,
    /// CPUs that came online and could not be opened (no right to any more: `serve`
    /// gives up root once its events are open): not traced, in no count.
    pub untraced: u64,
}

impl PerfGroup {
    /// Opens every event on every CPU, disabled, so nothing is recorded until [`enable`]
    /// and all rings start together.
    ///
    /// [`enable`]: PerfGroup::enable
    pub fn open(cfg: &GroupConfig) -> Result<PerfGroup, PerfError> {
        if cfg.events.is_empty() {
            return Err(PerfError::NoEvents);
        }
        if cfg.cpus.is_empty() {
            return Err(PerfError::NoCpus);
        }
        if cfg.mmap_pages == 0 || !cfg.mmap_pages.is_power_of_two() {
            return Err(PerfError::BadPageCount {
                pages: cfg.mmap_pages,
            });
        }
        if cfg.wakeup_fraction == 0 {
            return Err(PerfError::BadWakeupFraction(cfg.wakeup_fraction));
        }
        let filters = cfg
            .events
            .iter()
            .map(|e| {
                e.filter
                    .as_ref()
                    .map(|f| {
                        CString::new(f.as_str()).map_err(|_| PerfError::FilterNul {
                            event: e.name.clone(),
                            filter: f.clone(),
                        })
                    })
                    .transpose()
            })
            .collect::<Result<Vec<_>, _>>()?;

        let needed = fds_needed(cfg.events.len(), cfg.cpus.len());
        raise_nofile(needed);

        let data_bytes = cfg.mmap_pages.saturating_mul(sys::page_size());
        let watermark = u32::try_from(data_bytes / cfg.wakeup_fraction as usize)
            .unwrap_or(u32::MAX)
            .max(1);

        let mut types: Vec<u16> = Vec::new();
        let mut type_names = Vec::new();
        let mut type_of = Vec::with_capacity(cfg.events.len());
        for e in &cfg.events {
            // `common_type` is 16 bits; a larger id never appears in a payload.
            let t = e.tracefs_id as u16;
            let i = types.iter().position(|&x| x == t).unwrap_or_else(|| {
                types.push(t);
                type_names.push(e.name.clone());
                types.len() - 1
            });
            type_of.push(i);
        }
        let mut group = PerfGroup {
            active: vec![true; cfg.events.len()],
            enabled: false,
            names: cfg.events.iter().map(|e| e.name.clone()).collect(),
            rings: Vec::with_capacity(cfg.cpus.len()),
            ids: Vec::with_capacity(cfg.cpus.len() * cfg.events.len()),
            clockid: cfg.clockid,
            format: cfg.format,
            types,
            type_names,
            type_of,
            lost_format: true,
            grouped: cfg.grouped,
            specs: cfg.events.clone(),
            filters,
            mmap_pages: cfg.mmap_pages,
            watermark,
            needed,
            hotplug: Hotplug::default(),
            refused: Vec::new(),
            recheck: false,
        };
        for &cpu in &cfg.cpus {
            group.open_cpu(cpu)?;
        }
        Ok(group)
    }

    /// Opens every event on `cpu` (disabled) with its ring, and adds them.
    fn open_cpu(&mut self, cpu: u32) -> Result<(), PerfError> {
        let needed = self.needed;
        let open = |attr: &perf_event_attr, group: Option<std::os::fd::BorrowedFd<'_>>| {
            sys::perf_event_open(attr, -1, cpu as i32, group, u64::from(PERF_FLAG_FD_CLOEXEC))
        };
        // Refused for want of rights or descriptors: the same advice as for an event.
        let leader_error = |source: io::Error| match source.raw_os_error() {
            Some(libc::EACCES | libc::EPERM | libc::EMFILE | libc::ENFILE) => {
                let dummy = EventSpec {
                    name: LEADER_NAME.into(),
                    tracefs_id: 0,
                    filter: None,
                };
                open_error(&dummy, cpu, needed, source)
            }
            _ => PerfError::Leader { cpu, source },
        };
        let mut attr = leader_attr(self.clockid, self.watermark);
        if !self.lost_format {
            attr.read_format &= !PERF_FORMAT_LOST;
        }
        let leader = match open(&attr, None) {
            // A kernel before 6.0 refuses the read_format bit it does not know:
            // the counts then come without the per-event lost count.
            Err(e) if self.lost_format && e.raw_os_error() == Some(libc::EINVAL) => {
                attr.read_format &= !PERF_FORMAT_LOST;
                self.lost_format = false;
                open(&attr, None).map_err(leader_error)?
            }
            r => r.map_err(leader_error)?,
        };
        let ring = Ring::new(leader.as_fd(), self.mmap_pages, cpu)?;
        let mut fds: Vec<OwnedFd> = Vec::with_capacity(self.specs.len());
        let mut ids = Vec::with_capacity(self.specs.len());
        for (index, (event, filter)) in self.specs.iter().zip(&self.filters).enumerate() {
            let mut attr =
                tracepoint_attr(event.tracefs_id, self.clockid, self.watermark, self.format);
            if !self.lost_format {
                attr.read_format &= !PERF_FORMAT_LOST;
            }
            let group = self.grouped.then(|| leader.as_fd());
            let fd = open(&attr, group).map_err(|e| open_error(event, cpu, needed, e))?;
            let ioctl_err = |op: &'static str| {
                let name = event.name.clone();
                move |source| PerfError::Ioctl {
                    op,
                    event: name,
                    cpu,
                    source,
                }
            };
            sys::set_output(fd.as_fd(), leader.as_fd())
                .map_err(ioctl_err("PERF_EVENT_IOC_SET_OUTPUT"))?;
            if let (Some(filter), Some(text)) = (filter, &event.filter) {
                sys::set_filter(fd.as_fd(), filter).map_err(|source| {
                    if source.raw_os_error() == Some(libc::EINVAL) {
                        PerfError::FilterRejected {
                            event: event.name.clone(),
                            filter: text.clone(),
                            cpu,
                            source,
                        }
                    } else {
                        ioctl_err("PERF_EVENT_IOC_SET_FILTER")(source)
                    }
                })?;
            }
            let id = sys::event_id(fd.as_fd()).map_err(ioctl_err("PERF_EVENT_IOC_ID"))?;
            ids.push((id, index));
            fds.push(fd);
        }
        self.ids.extend(ids);
        self.ids.sort_unstable();
        self.rings.push(CpuRing {
            cpu,
            leader,
            fds,
            ring,
            lost: 0,
            kinds: RecordKinds::default(),
            received: vec![0; self.types.len()],
            snap: None,
            buf: Vec::new(),
            frozen: vec![None; self.specs.len()],
            dead: false,
        });
        Ok(())
    }

    /// Follows CPU hotplug, given the CPUs online now. A CPU that went offline has had
    /// its events taken out by the kernel: its ring is kept for its counts (see
    /// [`CpuRing::dead`]). A CPU online without a live ring (it came online, or came
    /// back) gets one, enabled as the others are: its events before this call were not
    /// traced. A CPU the kernel's perf side does not have online yet (`ENODEV`) is
    /// tried again at the next call. Returns whether anything changed.
    pub fn follow_cpus(&mut self, online: &[u32]) -> Result<bool, PerfError> {
        let mut changed = false;
        for r in &mut self.rings {
            if !r.dead && online.binary_search(&r.cpu).is_err() {
                r.dead = true;
                self.hotplug.offlined += 1;
                changed = true;
            }
        }
        for &cpu in online {
            if self.rings.iter().any(|r| r.cpu == cpu && !r.dead) || self.refused.contains(&cpu) {
                continue;
            }
            self.needed = fds_needed(self.specs.len(), self.rings.len() + 1);
            raise_nofile(self.needed);
            match self.open_cpu(cpu) {
                Ok(()) => {}
                Err(
                    PerfError::Leader { source, .. } | PerfError::EventUnavailable { source, .. },
                ) if source.raw_os_error() == Some(libc::ENODEV) => continue,
                // The run goes on without it, and says so.
                Err(PerfError::PermissionDenied { .. }) => {
                    self.refused.push(cpu);
                    self.hotplug.untraced += 1;
                    changed = true;
                    continue;
                }
                Err(e) => return Err(e),
            }
            self.hotplug.onlined += 1;
            changed = true;
            if self.enabled {
                let r = self.rings.len() - 1;
                self.enable_ring(r)?;
            }
        }
        Ok(changed)
    }

    /// CPUs that went offline or came online so far.
    pub fn hotplug(&self) -> Hotplug {
        self.hotplug
    }

    /// Whether a ring was found dead since the last call: the CPUs online must then be
    /// followed even if their list reads as before (the CPU went and came back between
    /// two reads of it).
    pub fn take_recheck(&mut self) -> bool {
        std::mem::take(&mut self.recheck)
    }

    /// Names of the distinct tracepoints opened, indexed like [`Tally::event`].
    pub fn type_names(&self) -> &[String] {
        &self.type_names
    }

    /// Whether the kernel reports lost samples per event (`PERF_FORMAT_LOST`, Linux 6.0).
    pub fn has_lost_format(&self) -> bool {
        self.lost_format
    }

    /// Reads every event's own count, ring by ring, each between two readings of the
    /// sample clock. From then on the drains count the samples stamped no later than
    /// each reading, until [`settle`](PerfGroup::settle) compares them (see [`Tally`]).
    /// Replaces a snapshot not yet settled.
    pub fn snapshot(&mut self) -> Result<(), PerfError> {
        for r in 0..self.rings.len() {
            let (counts, lost) = self.read_counts(r)?;
            let ring = &mut self.rings[r];
            ring.snap = Some(Snap {
                counts,
                lost,
                // Everything received so far was stamped before the counts were read.
                received: ring.received.iter().map(|&n| [n, n]).collect(),
            });
        }
        Ok(())
    }

    /// Compares the pending snapshot with the samples received since: one [`Tally`] per
    /// CPU and tracepoint. Call it after a drain that began when every sample stamped
    /// before the snapshot was surely written (a few ms later); `None` without a
    /// snapshot.
    pub fn settle(&mut self) -> Option<Vec<Tally>> {
        let mut out = Vec::new();
        for r in &mut self.rings {
            let s = r.snap.take()?;
            for (event, (c, &[received, received_at])) in
                s.counts.iter().zip(&s.received).enumerate()
            {
                out.push(Tally {
                    cpu: r.cpu,
                    event,
                    at: c.at,
                    read_by: c.read_by,
                    counted: c.counted,
                    received,
                    received_at,
                    lost: s.lost.as_ref().map(|l| l[event]),
                });
            }
        }
        // A CPU that came back has a ring from before it went offline and a new one:
        // one tally of both, its counts as if one ring had run on.
        if self.hotplug.onlined > 0 {
            out.sort_by_key(|t| (t.cpu, t.event));
            out.dedup_by(|later, first| {
                let same = (later.cpu, later.event) == (first.cpu, first.event);
                if same {
                    first.add(later);
                }
                same
            });
        }
        Some(out)
    }

    /// Every event's count per distinct tracepoint of ring `r`, and its lost count.
    fn read_counts(&mut self, r: usize) -> Result<(Vec<Count>, Option<Vec<u64>>), PerfError> {
        if !self.grouped || self.rings[r].dead {
            return self.read_each(r);
        }
        match self.read_group(r) {
            // The group holds its leader alone: the CPU went offline and the kernel
            // broke the group up (`perf_event_exit_cpu`). The events keep their counts.
            Err(PerfError::ShortGroupRead {
                members: Some(1), ..
            }) if !self.rings[r].fds.is_empty() => {
                self.rings[r].dead = true;
                self.hotplug.offlined += 1;
                self.recheck = true;
                self.read_each(r)
            }
            other => other,
        }
    }

    /// [`read_counts`](Self::read_counts) of grouped events: one group read of the
    /// CPU's leader, between two readings of the sample clock (the window is that one
    /// syscall, for every event alike).
    fn read_group(&mut self, r: usize) -> Result<(Vec<Count>, Option<Vec<u64>>), PerfError> {
        let clockid = self.clockid;
        // Per value: the count, its id, and the lost count when asked for.
        let words = if self.lost_format { 3 } else { 2 };
        let ring = &mut self.rings[r];
        let members = 1 + ring.fds.len();
        let want = 8 * (1 + words * members);
        ring.buf.resize(want, 0);
        let at = sample_clock(clockid)?;
        let n = sys::read_counter(ring.leader.as_fd(), &mut ring.buf).map_err(|source| {
            PerfError::Leader {
                cpu: ring.cpu,
                source,
            }
        })?;
        let read_by = sample_clock(clockid)?;
        let buf = &ring.buf[..n.min(want)];
        let word = |i: usize| {
            buf.get(i * 8..i * 8 + 8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_le_bytes)
        };
        let short = || PerfError::ShortGroupRead {
            cpu: ring.cpu,
            read: n,
            want,
            members: word(0),
        };
        if n < want || word(0) != Some(members as u64) {
            return Err(short());
        }
        let mut counted = vec![
            Count {
                at,
                counted: 0,
                read_by,
            };
            self.types.len()
        ];
        let mut lost = self.lost_format.then(|| vec![0u64; self.types.len()]);
        let mut seen = 0;
        for m in 0..members {
            let base = 1 + m * words;
            let (Some(value), Some(id)) = (word(base), word(base + 1)) else {
                continue;
            };
            // The leader's own value (a dummy counts nothing) has no event index.
            let Some(index) = index_of(&self.ids, id) else {
                continue;
            };
            seen += 1;
            let t = self.type_of[index];
            counted[t].counted = counted[t].counted.saturating_add(value);
            if let (Some(v), Some(l)) = (lost.as_mut(), word(base + 2)) {
                v[t] = v[t].saturating_add(l);
            }
        }
        if seen != ring.fds.len() {
            return Err(short());
        }
        Ok((counted, lost))
    }

    /// [`read_counts`](Self::read_counts) of events opened alone: one `read(2)` per
    /// event, each between two readings of the sample clock; a tracepoint's window runs
    /// from before its first to after its last.
    fn read_each(&mut self, r: usize) -> Result<(Vec<Count>, Option<Vec<u64>>), PerfError> {
        let clockid = self.clockid;
        let first = sample_clock(clockid)?;
        let mut counted = vec![
            Count {
                at: first,
                counted: 0,
                read_by: first,
            };
            self.types.len()
        ];
        let mut bracketed = vec![false; self.types.len()];
        let mut lost = self.lost_format.then(|| vec![0u64; self.types.len()]);
        let ring = &mut self.rings[r];
        for (index, fd) in ring.fds.iter().enumerate() {
            let t = self.type_of[index];
            let off = !self.enabled || !self.active.get(index).copied().unwrap_or(true);
            if let Some([c, l]) = ring.frozen[index].filter(|_| off) {
                // Off: it counts nothing more, whenever it is read.
                counted[t].counted = counted[t].counted.saturating_add(c);
                if let Some(v) = lost.as_mut() {
                    v[t] = v[t].saturating_add(l);
                }
                continue;
            }
            let mut buf = [0u8; 16];
            let want = if self.lost_format { 16 } else { 8 };
            let at = sample_clock(clockid)?;
            let n = sys::read_counter(fd.as_fd(), &mut buf[..want]).map_err(|source| {
                PerfError::Ioctl {
                    op: "read of the event count",
                    event: self.names[index].clone(),
                    cpu: ring.cpu,
                    source,
                }
            })?;
            let read_by = sample_clock(clockid)?;
            let c = &mut counted[t];
            if !bracketed[t] {
                bracketed[t] = true;
                c.at = at;
            }
            c.read_by = read_by;
            if n < want {
                return Err(PerfError::ShortCount {
                    event: self.names[index].clone(),
                    cpu: ring.cpu,
                    read: n,
                    want,
                });
            }
            let word =
                |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]));
            let (c, l) = (word(0), if self.lost_format { word(1) } else { 0 });
            counted[t].counted = counted[t].counted.saturating_add(c);
            if let Some(v) = lost.as_mut() {
                v[t] = v[t].saturating_add(l);
            }
            if off {
                ring.frozen[index] = Some([c, l]);
            }
        }
        Ok((counted, lost))
    }

    /// The records of every ring that were neither samples nor LOST, by kind.
    pub fn record_kinds(&self) -> RecordKinds {
        let mut k = RecordKinds::default();
        for r in &self.rings {
            k.throttled += r.kinds.throttled;
            k.unthrottled += r.kinds.unthrottled;
            k.other += r.kinds.other;
        }
        k
    }

    /// Now, in ns on the clock the samples are stamped with, so it can be compared with
    /// sample times (the sorter's release bound is such a reading).
    pub fn clock_now(&self) -> Result<u64, PerfError> {
        sample_clock(self.clockid)
    }

    /// Turn event `index` (as given to [`PerfGroup::open`]) on or off on every CPU.
    /// Before [`PerfGroup::enable`], only marks it: `enable` leaves it off. While
    /// enabled, only for events opened alone ([`GroupConfig::grouped`] false).
    pub fn set_active(&mut self, index: usize, on: bool) -> Result<(), PerfError> {
        let Some(a) = self.active.get(index) else {
            return Ok(());
        };
        if *a == on {
            return Ok(());
        }
        if self.grouped && self.enabled {
            return Err(PerfError::GroupedToggle {
                event: self.names.get(index).cloned().unwrap_or_default(),
            });
        }
        self.active[index] = on;
        for r in &mut self.rings {
            r.frozen[index] = None;
        }
        if !self.enabled {
            return Ok(());
        }
        let (op, call): (
            &'static str,
            fn(std::os::fd::BorrowedFd<'_>) -> io::Result<()>,
        ) = if on {
            ("PERF_EVENT_IOC_ENABLE", sys::enable)
        } else {
            ("PERF_EVENT_IOC_DISABLE", sys::disable)
        };
        for r in self.rings.iter().filter(|r| !r.dead) {
            if let Some(fd) = r.fds.get(index) {
                call(fd.as_fd()).map_err(|source| PerfError::Ioctl {
                    op,
                    event: self.names.get(index).cloned().unwrap_or_default(),
                    cpu: r.cpu,
                    source,
                })?;
            }
        }
        Ok(())
    }

    /// Starts recording on every event and CPU: the events first, then each CPU's
    /// leader, which starts its group at once.
    pub fn enable(&mut self) -> Result<(), PerfError> {
        self.enabled = true;
        self.thaw();
        let active = self.active.clone();
        self.for_each_fd("PERF_EVENT_IOC_ENABLE", |i, fd| {
            if active.get(i).copied().unwrap_or(true) {
                sys::enable(fd)
            } else {
                Ok(())
            }
        })?;
        self.for_each_leader("PERF_EVENT_IOC_ENABLE", sys::enable)
    }

    /// Starts ring `r`'s events as [`enable`](Self::enable) starts every ring's.
    fn enable_ring(&mut self, r: usize) -> Result<(), PerfError> {
        let ring = &self.rings[r];
        let err = |op: &'static str, event: String| {
            let cpu = ring.cpu;
            move |source| PerfError::Ioctl {
                op,
                event,
                cpu,
                source,
            }
        };
        for (index, fd) in ring.fds.iter().enumerate() {
            if self.active.get(index).copied().unwrap_or(true) {
                let name = self.names.get(index).cloned().unwrap_or_default();
                sys::enable(fd.as_fd()).map_err(err("PERF_EVENT_IOC_ENABLE", name))?;
            }
        }
        sys::enable(ring.leader.as_fd()).map_err(err("PERF_EVENT_IOC_ENABLE", LEADER_NAME.into()))
    }

    /// Stops recording; what is already in the rings can still be drained. Each CPU's
    /// leader first, which stops its whole group at once.
    pub fn disable(&mut self) -> Result<(), PerfError> {
        self.enabled = false;
        let leaders = self.for_each_leader("PERF_EVENT_IOC_DISABLE", sys::disable);
        let events = self.for_each_fd("PERF_EVENT_IOC_DISABLE", |_, fd| sys::disable(fd));
        // Counts read before the ioctls are not final.
        self.thaw();
        leaders.and(events)
    }

    /// Forget the counts read while off: the events' state changed.
    fn thaw(&mut self) {
        for r in &mut self.rings {
            r.frozen.iter_mut().for_each(|f| *f = None);
        }
    }

    fn for_each_leader(
        &self,
        op: &'static str,
        call: fn(std::os::fd::BorrowedFd<'_>) -> io::Result<()>,
    ) -> Result<(), PerfError> {
        for r in self.rings.iter().filter(|r| !r.dead) {
            call(r.leader.as_fd()).map_err(|source| PerfError::Ioctl {
                op,
                event: LEADER_NAME.into(),
                cpu: r.cpu,
                source,
            })?;
        }
        Ok(())
    }

    fn for_each_fd(
        &self,
        op: &'static str,
        call: impl Fn(usize, std::os::fd::BorrowedFd<'_>) -> io::Result<()>,
    ) -> Result<(), PerfError> {
        for r in self.rings.iter().filter(|r| !r.dead) {
            for (index, fd) in r.fds.iter().enumerate() {
                call(index, fd.as_fd()).map_err(|source| PerfError::Ioctl {
                    op,
                    event: self.names.get(index).cloned().unwrap_or_default(),
                    cpu: r.cpu,
                    source,
                })?;
            }
        }
        Ok(())
    }

    /// Sleeps until some ring passes its watermark or `timeout` elapses. The caller drains
    /// every ring after either, so quiet rings are not left behind. A signal (EINTR)
    /// returns `Ok` so the caller can check its stop flag.
    pub fn wait(&self, timeout: Duration) -> Result<(), PerfError> {
        let mut fds: Vec<libc::pollfd> = self
            .rings
            .iter()
            .map(|r| libc::pollfd {
                fd: std::os::fd::AsRawFd::as_raw_fd(&r.leader),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        match sys::poll(&mut fds, timeout) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(PerfError::Poll(e)),
        }
    }

    /// Number of events opened on each CPU.
    pub fn event_count(&self) -> usize {
        self.names.len()
    }

    /// `read(2)` calls a [`snapshot`](PerfGroup::snapshot) makes: one per CPU when
    /// grouped, else one per event and CPU.
    pub fn reads_per_snapshot(&self) -> usize {
        if self.grouped {
            self.rings.len()
        } else {
            self.rings.len() * self.names.len()
        }
    }

    /// Number of rings (one per configured CPU).
    pub fn ring_count(&self) -> usize {
        self.rings.len()
    }

    /// The CPU of ring `ring`. Panics if `ring >= ring_count()`.
    pub fn ring_cpu(&self, ring: usize) -> u32 {
        self.rings[ring].cpu
    }

    /// Index into `GroupConfig::events` of the event with this `PERF_SAMPLE_IDENTIFIER`.
    pub fn event_index(&self, perf_id: u64) -> Option<usize> {
        index_of(&self.ids, perf_id)
    }

    /// Passes every pending record of ring `ring` to `f`, then frees the space. Malformed
    /// records are counted, not passed on. `Lost` records are passed on and also added to
    /// the CPU's loss total (see [`lost`](PerfGroup::lost)). Panics if
    /// `ring >= ring_count()`.
    pub fn drain_ring(&mut self, ring: usize, mut f: impl FnMut(Record<'_>)) -> DrainStats {
        let format = self.format;
        let types = &self.types;
        let r = &mut self.rings[ring];
        let lost_total = &mut r.lost;
        let kinds = &mut r.kinds;
        let received = &mut r.received;
        let mut snap = r.snap.as_mut();
        let mut stats = DrainStats::default();
        let walk = r.ring.drain(|bytes| match format.parse(bytes) {
            Ok(record) => {
                stats.records += 1;
                match record {
                    Record::Sample(s) => {
                        stats.samples += 1;
                        if let [a, b, ..] = *s.raw {
                            let ty = u16::from_le_bytes([a, b]);
                            if let Some(t) = types.iter().position(|&x| x == ty) {
                                received[t] += 1;
                                if let Some(sn) = snap.as_deref_mut() {
                                    let c = sn.counts[t];
                                    if s.time <= c.read_by {
                                        sn.received[t][0] += 1;
                                        sn.received[t][1] += u64::from(s.time <= c.at);
                                    }
                                }
                            }
                        }
                    }
                    Record::Lost { lost, .. } => {
                        stats.lost_records += 1;
                        stats.lost = stats.lost.saturating_add(lost);
                        *lost_total = lost_total.saturating_add(lost);
                    }
                    Record::Other { kind } => {
                        stats.other += 1;
                        match kind {
                            PERF_RECORD_THROTTLE => {
                                stats.throttled += 1;
                                kinds.throttled += 1;
                            }
                            PERF_RECORD_UNTHROTTLE => kinds.unthrottled += 1,
                            _ => kinds.other += 1,
                        }
                    }
                }
                f(record);
            }
            Err(e) => {
                stats.malformed += 1;
                stats.first_malformed.get_or_insert(e);
            }
        });
        stats.bytes = walk.consumed;
        stats.ring_error = walk.error;
        stats
    }

    /// `(cpu, samples reported lost)` for every ring, from the `PERF_RECORD_LOST` records
    /// drained so far.
    pub fn lost(&self) -> Vec<(u32, u64)> {
        let mut v: Vec<(u32, u64)> = Vec::with_capacity(self.rings.len());
        for r in &self.rings {
            match v.iter_mut().find(|(c, _)| *c == r.cpu) {
                Some((_, n)) => *n += r.lost,
                None => v.push((r.cpu, r.lost)),
            }
        }
        v
    }
}

/// The attributes every tracepoint is opened with. Each sample field costs kernel time per
/// event, so only what later stages use is requested (see `record` for why that is
/// `TIME | RAW`).
fn tracepoint_attr(
    tracefs_id: u64,
    clockid: i32,
    watermark: u32,
    format: SampleFormat,
) -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_: PERF_TYPE_TRACEPOINT,
        // The kernel checks `size` to know which fields this binary knows about.
        size: std::mem::size_of::<perf_event_attr>() as u32,
        config: tracefs_id,
        sample_type: format.sample_type(),
        clockid,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.__bindgen_anon_2.wakeup_watermark = watermark;
    attr.read_format = PERF_FORMAT_LOST;
    attr.set_disabled(1);
    // No `sample_id_all`: a LOST record is counted against its ring, and its body has
    // the event id; the trailer would be parsed by nobody.
    attr.set_sample_id_all(0);
    attr.set_use_clockid(1);
    attr.set_watermark(1);
    attr
}

/// How errors name a CPU's group leader.
const LEADER_NAME: &str = "the dummy event that owns the ring";

/// Each CPU's group leader: a dummy software event (it counts and samples nothing) that
/// owns the ring, with the tracepoints' clock (a ring takes one) and wake-up
/// watermark, read for the whole group's counts (see the module doc).
fn leader_attr(clockid: i32, watermark: u32) -> perf_event_attr {
    let mut attr = perf_event_attr {
        type_: perf_event_open_sys::bindings::PERF_TYPE_SOFTWARE,
        size: std::mem::size_of::<perf_event_attr>() as u32,
        config: u64::from(perf_event_open_sys::bindings::PERF_COUNT_SW_DUMMY),
        clockid,
        read_format: u64::from(perf_event_open_sys::bindings::PERF_FORMAT_GROUP)
            | u64::from(perf_event_open_sys::bindings::PERF_FORMAT_ID)
            | PERF_FORMAT_LOST,
        ..Default::default()
    };
    attr.__bindgen_anon_2.wakeup_watermark = watermark;
    attr.set_disabled(1);
    attr.set_sample_id_all(0);
    attr.set_use_clockid(1);
    attr.set_watermark(1);
    attr
}

/// The event index under `perf_id` in `ids` (sorted by id).
fn index_of(ids: &[(u64, usize)], perf_id: u64) -> Option<usize> {
    ids.binary_search_by_key(&perf_id, |&(id, _)| id)
        .ok()
        .and_then(|i| ids.get(i))
        .map(|&(_, index)| index)
}

fn open_error(event: &EventSpec, cpu: u32, needed: u64, source: io::Error) -> PerfError {
    match source.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => PerfError::PermissionDenied {
            event: event.name.clone(),
            cpu,
            source,
        },
        Some(libc::ENOENT | libc::ENODEV | libc::EINVAL) => PerfError::EventUnavailable {
            event: event.name.clone(),
            tracefs_id: event.tracefs_id,
            cpu,
            source,
        },
        Some(libc::EMFILE) => {
            // The limit as it is now, after any raise, is what the user has to change.
            let (soft, hard) =
                nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
                    .unwrap_or((0, 0));
            PerfError::TooManyOpenFiles {
                event: event.name.clone(),
                cpu,
                needed,
                soft,
                hard,
                source,
            }
        }
        Some(libc::ENFILE) => PerfError::SystemFileTableFull {
            event: event.name.clone(),
            cpu,
            needed,
            source,
        },
        _ => PerfError::Open {
            event: event.name.clone(),
            cpu,
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::{kernel_unavailable, online_cpus, test_kernel_ready};

    #[test]
    fn a_cpu_that_came_back_is_one_tally_of_both_its_rings() {
        let t = |at, read_by, counted, received, lost| Tally {
            cpu: 1,
            event: 0,
            at,
            read_by,
            counted,
            received,
            received_at: received,
            lost,
        };
        let mut old = t(10, 12, 100, 98, Some(2));
        old.add(&t(11, 15, 7, 7, Some(0)));
        assert_eq!(old, t(10, 15, 107, 105, Some(2)));
        assert_eq!(old.missing(), 2);
        let mut no_lost = t(10, 12, 5, 5, None);
        no_lost.add(&t(11, 15, 3, 3, Some(1)));
        assert_eq!(no_lost.lost, Some(1));
    }

    #[test]
    fn attr_matches_design() {
        let attr = tracepoint_attr(305, libc::CLOCK_MONOTONIC, 1024, SampleFormat::LEAN);
        assert_eq!(attr.type_, PERF_TYPE_TRACEPOINT);
        assert_eq!(attr.config, 305);
        assert_eq!(attr.size as usize, std::mem::size_of::<perf_event_attr>());
        // SAFETY: both unions hold plain integers, and these are the members we wrote.
        let (period, watermark) = unsafe {
            (
                attr.__bindgen_anon_1.sample_period,
                attr.__bindgen_anon_2.wakeup_watermark,
            )
        };
        assert_eq!((period, watermark), (1, 1024));
        assert_eq!(attr.disabled(), 1);
        assert_eq!(attr.sample_id_all(), 0);
        assert_eq!(
            attr.sample_type,
            u64::from(
                perf_event_open_sys::bindings::PERF_SAMPLE_TIME
                    | perf_event_open_sys::bindings::PERF_SAMPLE_RAW
            )
        );
        assert_eq!(attr.use_clockid(), 1);
        assert_eq!(attr.watermark(), 1);
        assert_eq!(attr.clockid, libc::CLOCK_MONOTONIC);
        assert_eq!(attr.inherit(), 0);
    }

    #[test]
    fn group_can_move_to_a_reader_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<PerfGroup>();
    }

    #[test]
    fn config_validation() {
        let event = EventSpec {
            name: "x:y".into(),
            tracefs_id: 1,
            filter: None,
        };
        let mut cfg = GroupConfig::new(vec![event.clone()], vec![0]);
        cfg.mmap_pages = 3;
        assert!(matches!(
            PerfGroup::open(&cfg),
            Err(PerfError::BadPageCount { pages: 3 })
        ));
        cfg.mmap_pages = 0;
        assert!(matches!(
            PerfGroup::open(&cfg),
            Err(PerfError::BadPageCount { pages: 0 })
        ));
        cfg.mmap_pages = 1;
        cfg.wakeup_fraction = 0;
        assert!(matches!(
            PerfGroup::open(&cfg),
            Err(PerfError::BadWakeupFraction(0))
        ));
        let cfg = GroupConfig::new(vec![], vec![0]);
        assert!(matches!(PerfGroup::open(&cfg), Err(PerfError::NoEvents)));
        let cfg = GroupConfig::new(vec![event.clone()], vec![]);
        assert!(matches!(PerfGroup::open(&cfg), Err(PerfError::NoCpus)));
        let mut with_nul = event;
        with_nul.filter = Some("a\0b".into());
        let cfg = GroupConfig::new(vec![with_nul], vec![0]);
        assert!(matches!(
            PerfGroup::open(&cfg),
            Err(PerfError::FilterNul { .. })
        ));
    }

    #[test]
    fn error_messages_say_what_to_do() {
        let e = open_error(
            &EventSpec {
                name: "block:block_rq_issue".into(),
                tracefs_id: 1,
                filter: None,
            },
            3,
            70,
            io::Error::from_raw_os_error(libc::EACCES),
        );
        let msg = e.to_string();
        assert!(
            msg.contains("block:block_rq_issue") && msg.contains("CPU 3"),
            "{msg}"
        );
        assert!(
            msg.contains("perf_event_paranoid") && msg.contains("CAP_PERFMON"),
            "{msg}"
        );
        let e = open_error(
            &EventSpec {
                name: "nvme:nvme_setup_cmd".into(),
                tracefs_id: 999_999,
                filter: None,
            },
            0,
            70,
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert!(matches!(e, PerfError::EventUnavailable { .. }));
        assert!(e.to_string().contains("nvme:nvme_setup_cmd"));
    }

    #[test]
    fn out_of_descriptors_names_the_limit_and_what_to_do() {
        let ev = EventSpec {
            name: "nvme_tcp:nvme_tcp_queue_rq".into(),
            tracefs_id: 1,
            filter: None,
        };
        let e = open_error(&ev, 63, 1_600, io::Error::from_raw_os_error(libc::EMFILE));
        let (soft, hard) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        match &e {
            PerfError::TooManyOpenFiles {
                needed,
                soft: s,
                hard: h,
                ..
            } => assert_eq!((*needed, *s, *h), (1_600, soft, hard)),
            other => panic!("expected TooManyOpenFiles, got {other:?}"),
        }
        let msg = e.to_string();
        for want in [
            "nvme_tcp:nvme_tcp_queue_rq",
            "CPU 63",
            "1600",
            &format!("RLIMIT_NOFILE is {soft} (hard limit {hard})"),
            "ulimit -Hn 1600",
            "fewer events",
        ] {
            assert!(msg.contains(want), "no `{want}` in: {msg}");
        }
        let e = open_error(&ev, 0, 1_600, io::Error::from_raw_os_error(libc::ENFILE));
        assert!(matches!(e, PerfError::SystemFileTableFull { .. }));
        assert!(e.to_string().contains("fs.file-max"), "{e}");
    }

    /// A tracepoint the test can fire at will: `getppid` (via `parent_id`) does nothing else.
    const EVENT: &str = "syscalls/sys_enter_getppid";

    fn fire(n: usize) {
        for _ in 0..n {
            std::hint::black_box(std::os::unix::process::parent_id());
        }
    }

    /// The tracefs id of [`EVENT`], or `None` after reporting why the test cannot run.
    fn event_id() -> Option<u64> {
        let events = test_kernel_ready()?;
        let path = events.join(EVENT).join("id");
        match std::fs::read_to_string(&path) {
            Ok(text) => match text.trim().parse() {
                Ok(id) => Some(id),
                Err(e) => {
                    kernel_unavailable(&format!("{}: {e}", path.display()));
                    None
                }
            },
            Err(e) => {
                kernel_unavailable(&format!("{}: {e}", path.display()));
                None
            }
        }
    }

    /// Opens the group, or `None` after reporting why perf cannot be used here.
    fn open_or_skip(cfg: &GroupConfig) -> Option<PerfGroup> {
        match PerfGroup::open(cfg) {
            Ok(g) => Some(g),
            Err(e @ PerfError::PermissionDenied { .. }) => {
                kernel_unavailable(&e.to_string());
                None
            }
            Err(e) => panic!("opening {EVENT}: {e}"),
        }
    }

    /// A snapshot settled after a drain: every sample counted arrived, `want` in all.
    fn check_counts(group: &mut PerfGroup, want: u64) {
        group.snapshot().unwrap();
        for ring in 0..group.ring_count() {
            group.drain_ring(ring, |_| {});
        }
        let tallies = group.settle().unwrap();
        let counted: u64 = tallies.iter().map(|t| t.counted).sum();
        let received: u64 = tallies.iter().map(|t| t.received).sum();
        assert_eq!(received, want, "{tallies:?}");
        assert_eq!(counted, received, "{tallies:?}");
    }

    /// This thread on one CPU until dropped, then back on the CPUs it had.
    struct PinnedTo(nix::sched::CpuSet);

    impl PinnedTo {
        fn cpu(cpu: u32) -> Self {
            use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
            use nix::unistd::Pid;
            let before = sched_getaffinity(Pid::from_raw(0)).unwrap();
            let mut one = CpuSet::new();
            one.set(cpu as usize).unwrap();
            sched_setaffinity(Pid::from_raw(0), &one).unwrap();
            PinnedTo(before)
        }
    }

    impl Drop for PinnedTo {
        fn drop(&mut self) {
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &self.0);
        }
    }

    fn spec(id: u64, filter: Option<&str>) -> EventSpec {
        EventSpec {
            name: EVENT.replace('/', ":"),
            tracefs_id: id,
            filter: filter.map(str::to_string),
        }
    }

    #[test]
    fn kernel_samples_arrive_in_order() {
        use perf_event_open_sys::bindings::{
            PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD,
            PERF_SAMPLE_RAW, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
        };
        let Some(id) = event_id() else { return };
        // The layout the parser derives from the bits must be the kernel's, for the lean
        // format ntprof-perf opens, the one with an id and CPU, and perf's usual one.
        let formats = [
            SampleFormat::LEAN,
            SampleFormat::new(
                (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW)
                    as u64,
            )
            .unwrap(),
            SampleFormat::new(
                (PERF_SAMPLE_IP
                    | PERF_SAMPLE_TID
                    | PERF_SAMPLE_TIME
                    | PERF_SAMPLE_CPU
                    | PERF_SAMPLE_PERIOD
                    | PERF_SAMPLE_RAW) as u64,
            )
            .unwrap(),
        ];
        for format in formats {
            samples_arrive_in_order(id, format);
        }
    }

    fn samples_arrive_in_order(id: u64, format: SampleFormat) {
        let cpus = online_cpus().unwrap();
        // A second event on the same ring exercises SET_OUTPUT and id lookup; its filter
        // (no syscall has nr -1) keeps it silent, so every sample must map to index 0.
        let mut cfg = GroupConfig::new(
            vec![spec(id, None), spec(id, Some("__syscall_nr == -1"))],
            cpus,
        );
        cfg.format = format;
        let Some(mut group) = open_or_skip(&cfg) else {
            return;
        };
        assert_eq!(group.ring_count(), cfg.cpus.len());
        group.enable().unwrap();
        const N: u64 = 500;
        fire(N as usize);
        group.disable().unwrap();

        let mut ours = 0u64;
        let mut malformed = 0;
        for ring in 0..group.ring_count() {
            let cpu = group.ring_cpu(ring);
            let mut last_time = 0u64;
            let mut samples = Vec::new();
            let stats = group.drain_ring(ring, |rec| {
                if let Record::Sample(s) = rec {
                    samples.push((s.id, s.time, s.cpu, s.raw.get(..2).map(<[u8]>::to_vec)));
                }
            });
            malformed += stats.malformed;
            assert_eq!(stats.ring_error, None);
            for (perf_id, time, sample_cpu, common_type) in samples {
                if let Some(perf_id) = perf_id {
                    assert_eq!(
                        group.event_index(perf_id),
                        Some(0),
                        "unknown or filtered id"
                    );
                }
                assert!(time >= last_time, "time went back on CPU {cpu}");
                last_time = time;
                if let Some(c) = sample_cpu {
                    assert_eq!(c, cpu, "{format:?}");
                }
                assert_eq!(
                    common_type,
                    Some((id as u16).to_le_bytes().to_vec()),
                    "{format:?}"
                );
                ours += 1;
            }
        }
        assert_eq!(malformed, 0);
        assert!(ours >= N, "{format:?}: saw {ours} samples, fired {N}");
        assert!(group.event_index(u64::MAX).is_none());
    }

    #[test]
    fn kernel_full_ring_reports_lost() {
        let Some(id) = event_id() else { return };
        let cpus = online_cpus().unwrap();
        let first = cpus[0];
        let mut cfg = GroupConfig::new(vec![spec(id, None)], cpus);
        cfg.mmap_pages = 1;
        let Some(mut group) = open_or_skip(&cfg) else {
            return;
        };
        // The kernel writes a ring's LOST record at the next sample written to that ring,
        // so the events that overfill it and the ones after must run on the same CPU: a
        // thread the scheduler moves in between (seen once in CI) leaves the count unsaid.
        let _pinned = PinnedTo::cpu(first);
        group.enable().unwrap();
        fire(20_000);
        // The kernel writes the LOST record only once there is room again, so drain, then
        // fire a few more events into the freed space.
        let mut lost_seen = 0u64;
        let mut drain_all = |group: &mut PerfGroup| {
            for ring in 0..group.ring_count() {
                group.drain_ring(ring, |rec| {
                    if let Record::Lost { lost, .. } = rec {
                        lost_seen += lost;
                    }
                });
            }
        };
        drain_all(&mut group);
        fire(10);
        group.disable().unwrap();
        drain_all(&mut group);
        let total: u64 = group.lost().iter().map(|&(_, n)| n).sum();
        assert!(
            lost_seen > 0,
            "no PERF_RECORD_LOST after overfilling a 1-page ring"
        );
        assert_eq!(total, lost_seen);
        group.wait(Duration::from_millis(1)).unwrap();
    }

    /// The kernel's counts against the samples that arrived, while an event is turned
    /// off and on (as `--max-rate` does with the parts of a sample): the count of an
    /// event that is off is read once and kept, and must still be its count after the
    /// ioctl, or the ledger would see samples the kernel never counted.
    #[test]
    fn kernel_counts_match_what_arrived_as_events_turn_off_and_on() {
        let Some(id) = event_id() else { return };
        // This thread's calls only: other tests fire the same tracepoint, and one of
        // theirs between a count's reading and the clock's would be received uncounted.
        let mine = format!("common_pid == {}", nix::unistd::gettid());
        let mut cfg = GroupConfig::new(
            vec![spec(id, Some(&mine)), spec(id, Some(&mine))],
            online_cpus().unwrap(),
        );
        // Turned on and off one by one while enabled, as --max-rate does.
        cfg.grouped = false;
        let Some(mut group) = open_or_skip(&cfg) else {
            return;
        };
        group.set_active(1, false).unwrap();
        group.enable().unwrap();
        fire(100);
        check_counts(&mut group, 100);
        check_counts(&mut group, 100);
        group.set_active(1, true).unwrap();
        fire(50);
        check_counts(&mut group, 200);
        group.set_active(1, false).unwrap();
        fire(30);
        check_counts(&mut group, 230);
        check_counts(&mut group, 230);
        group.disable().unwrap();
        check_counts(&mut group, 230);
    }

    /// Grouped (the default): one group read per CPU gives every event's count, the
    /// same as what arrived, before and after the group is stopped; an event marked off
    /// before the start stays off, and turning one on while the group runs is refused
    /// rather than left silently off.
    #[test]
    fn one_group_read_per_cpu_counts_every_event() {
        let Some(id) = event_id() else { return };
        let mine = format!("common_pid == {}", nix::unistd::gettid());
        let cfg = GroupConfig::new(
            vec![
                spec(id, Some(&mine)),
                spec(id, Some(&mine)),
                spec(id, Some(&mine)),
            ],
            online_cpus().unwrap(),
        );
        assert!(cfg.grouped);
        let Some(mut group) = open_or_skip(&cfg) else {
            return;
        };
        group.set_active(2, false).unwrap();
        group.enable().unwrap();
        fire(100);
        check_counts(&mut group, 200);
        match group.set_active(2, true) {
            Err(PerfError::GroupedToggle { .. }) => {}
            other => panic!("turning a member on while the group runs: {other:?}"),
        }
        fire(40);
        check_counts(&mut group, 280);
        group.disable().unwrap();
        fire(10);
        check_counts(&mut group, 280);
    }

    #[test]
    fn kernel_rejects_bad_filter() {
        let Some(id) = event_id() else { return };
        let cfg = GroupConfig::new(vec![spec(id, Some("no_such_field == 1"))], vec![0]);
        match PerfGroup::open(&cfg) {
            Err(PerfError::FilterRejected { filter, .. }) => {
                assert_eq!(filter, "no_such_field == 1")
            }
            Err(e @ PerfError::PermissionDenied { .. }) => kernel_unavailable(&e.to_string()),
            other => panic!("expected FilterRejected, got {other:?}"),
        }
    }
}
