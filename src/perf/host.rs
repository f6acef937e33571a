//! What the host offers a run: its online CPUs (one ring each) and the descriptor limit
//! (one descriptor per event per CPU, and one per CPU for its ring). Reads sysfs and
//! rlimits; opens nothing.

use super::PerfError;

/// Descriptors a run holds besides its perf events: stdio, the output file, the tracefs
/// and sysfs reads, the command's pipes, signal handling, with room to spare.
pub const FD_MARGIN: u64 = 64;

/// Descriptors a group of `events` events on `cpus` CPUs needs: one per event per CPU
/// and one per CPU for the dummy event that owns its ring and leads its group (the
/// rings are mappings and need none), plus [`FD_MARGIN`]. nvme-tcp (20+ events) on 64
/// CPUs is past the usual soft limit of 1,024.
pub fn fds_needed(events: usize, cpus: usize) -> u64 {
    (events as u64)
        .saturating_add(1)
        .saturating_mul(cpus as u64)
        .saturating_add(FD_MARGIN)
}

/// The soft RLIMIT_NOFILE to set so that `needed` descriptors fit, or `None` when `soft`
/// already covers them or the hard limit leaves no room to raise it. Never above `hard`
/// (only root may raise that), and never more than needed: the command run after `--`
/// inherits the limit, and programs using `select` break on descriptors above 1,024.
pub fn nofile_target(needed: u64, soft: u64, hard: u64) -> Option<u64> {
    let target = needed.min(hard);
    (target > soft).then_some(target)
}

/// RLIMIT_NOFILE as it is after [`raise_nofile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub soft: u64,
    pub hard: u64,
}

/// Raises the soft RLIMIT_NOFILE (up to the hard limit) when `needed` descriptors do not
/// fit under it. Best effort: when the limit cannot be read or set, the opens go ahead and
/// an EMFILE is reported as [`PerfError::TooManyOpenFiles`], which names the limit.
pub fn raise_nofile(needed: u64) -> Option<NofileLimit> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if let Some(target) = nofile_target(needed, soft, hard) {
        if setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_ok() {
            return Some(NofileLimit { soft: target, hard });
        }
    }
    Some(NofileLimit { soft, hard })
}

const ONLINE_CPUS: &str = "/sys/devices/system/cpu/online";

/// The online CPUs, from `/sys/devices/system/cpu/online`.
pub fn online_cpus() -> Result<Vec<u32>, PerfError> {
    let text = std::fs::read_to_string(ONLINE_CPUS).map_err(|source| PerfError::CpuListRead {
        path: ONLINE_CPUS,
        source,
    })?;
    parse_cpu_list(&text)
}

/// Watches the online CPUs for hotplug during a run: one `pread(2)` of the kernel's list
/// per call, kept open.
pub struct OnlineWatch {
    file: Option<std::fs::File>,
    last: Vec<u8>,
    buf: Vec<u8>,
}

impl Default for OnlineWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl OnlineWatch {
    pub fn new() -> OnlineWatch {
        OnlineWatch {
            file: std::fs::File::open(ONLINE_CPUS).ok(),
            last: Vec::new(),
            buf: vec![0; 4096],
        }
    }

    /// The online CPUs when the list differs from the last call's (the first call
    /// always gives it); `None` when unchanged or unreadable.
    pub fn changed(&mut self) -> Option<Vec<u32>> {
        self.read(false)
    }

    /// The online CPUs, changed or not; `None` when unreadable.
    pub fn now(&mut self) -> Option<Vec<u32>> {
        self.read(true)
    }

    fn read(&mut self, always: bool) -> Option<Vec<u32>> {
        use std::os::unix::fs::FileExt;
        let n = self.file.as_ref()?.read_at(&mut self.buf, 0).ok()?;
        let text = &self.buf[..n];
        if text == self.last.as_slice() && !always {
            return None;
        }
        let cpus = parse_cpu_list(std::str::from_utf8(text).ok()?).ok()?;
        self.last = text.to_vec();
        Some(cpus)
    }
}

/// Parses the kernel's CPU list format (`0-3,5,7-8`, trailing newline allowed) into a
/// sorted list without duplicates.
pub fn parse_cpu_list(text: &str) -> Result<Vec<u32>, PerfError> {
    let bad = |reason| PerfError::BadCpuList {
        text: text.to_string(),
        reason,
    };
    // A range like 0-4294967295 must not allocate billions of entries.
    const MAX_CPUS: u64 = 1 << 16;
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(bad("empty"));
    }
    let mut cpus = Vec::new();
    for part in trimmed.split(',') {
        let part = part.trim();
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (lo, hi),
            None => (part, part),
        };
        let number = |s: &str| {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad("expected a CPU number or a range like 0-3"));
            }
            s.parse::<u32>().map_err(|_| bad("CPU number out of range"))
        };
        let (lo, hi) = (number(lo)?, number(hi)?);
        if lo > hi {
            return Err(bad("range start is greater than its end"));
        }
        if u64::from(hi - lo) + cpus.len() as u64 >= MAX_CPUS {
            return Err(bad("too many CPUs"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first call gives the list, later ones only a change.
    #[test]
    fn the_online_watch_reports_changes_only() {
        let mut w = OnlineWatch::new();
        let Some(first) = w.changed() else {
            return; // no sysfs here
        };
        assert_eq!(first, online_cpus().unwrap());
        assert_eq!(w.changed(), None);
        assert_eq!(w.now().as_ref(), Some(&first));
        w.last.clear();
        assert_eq!(w.changed(), Some(first));
    }
    use std::path::Path;

    #[test]
    fn cpu_list_forms() {
        assert_eq!(parse_cpu_list("0").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("0-1\n").unwrap(), vec![0, 1]);
        assert_eq!(
            parse_cpu_list("0-3,5,7-8").unwrap(),
            vec![0, 1, 2, 3, 5, 7, 8]
        );
        assert_eq!(parse_cpu_list("5,0-2,1").unwrap(), vec![0, 1, 2, 5]);
        assert_eq!(parse_cpu_list(" 2 , 4-4 ").unwrap(), vec![2, 4]);
    }

    #[test]
    fn cpu_list_rejects_garbage() {
        for bad in [
            "",
            "\n",
            ",",
            "0,",
            "-1",
            "1-",
            "3-1",
            "a",
            "0-b",
            "1--2",
            "0-1-2",
            "+1",
            "99999999999",
            "0-4294967295",
        ] {
            match parse_cpu_list(bad) {
                Err(PerfError::BadCpuList { text, .. }) => assert_eq!(text, bad),
                other => panic!("{bad:?}: expected BadCpuList, got {other:?}"),
            }
        }
    }

    #[test]
    fn online_cpus_reads_sysfs() {
        if Path::new(ONLINE_CPUS).exists() {
            let cpus = online_cpus().unwrap();
            assert!(!cpus.is_empty());
        }
    }

    #[test]
    fn fds_needed_counts_every_event_on_every_cpu() {
        assert_eq!(fds_needed(3, 2), 8 + FD_MARGIN);
        // nvme-tcp host and target (24 events) on 64 CPUs is past the common 1,024.
        assert_eq!(fds_needed(24, 64), 1_600 + FD_MARGIN);
        assert!(fds_needed(24, 64) > 1_024);
        assert_eq!(fds_needed(usize::MAX, usize::MAX), u64::MAX);
    }

    #[test]
    fn nofile_is_raised_only_when_needed_and_never_past_hard() {
        // Already enough: leave it alone.
        assert_eq!(nofile_target(70, 1_024, 4_096), None);
        assert_eq!(nofile_target(1_024, 1_024, 4_096), None);
        // Raise to what is needed, not to the hard limit.
        assert_eq!(nofile_target(1_600, 1_024, 524_288), Some(1_600));
        // Capped at hard; nothing to do when hard is no higher than soft.
        assert_eq!(nofile_target(1_600, 1_024, 1_200), Some(1_200));
        assert_eq!(nofile_target(1_600, 1_024, 1_024), None);
        // RLIM_INFINITY hard limit.
        assert_eq!(nofile_target(5_000, 1_024, u64::MAX), Some(5_000));
    }

    #[test]
    fn raise_nofile_leaves_a_sufficient_limit_alone() {
        // Only the no-op path: raising the limit of the test process would leak into
        // the other tests running in it (the raise is tested through the binary).
        let before =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        let after = raise_nofile(1).unwrap();
        assert_eq!((after.soft, after.hard), before);
    }
}
