//! Stage 1: find tracefs and read event formats from it.
//!
//! Reads files only; knows nothing about perf or about any profile. A "tracefs root" is
//! any directory with an `events/<system>/<event>/format` tree: the live mount, or a
//! copy captured from another kernel (`tracefs/<kernel version>/` in this repository).
//! A tree can also live in memory: the format files a `perf.data` carries
//! ([`Tracefs::in_memory`]), so an import binds the same layouts a live run would.

pub mod format;

pub use format::{parse_format, EventFormat, Field, FieldShape, FormatError};

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Where tracefs is mounted on current kernels, then where older setups expose it.
pub const MOUNT_POINTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    #[error(
        "tracefs is not mounted (looked in {}); mount it with:\n    mount -t tracefs nodev /sys/kernel/tracing\nor point --tracefs at a captured copy",
        MOUNT_POINTS.join(" and ")
    )]
    NotMounted,
    #[error("{0} has no events/ directory: it is not a tracefs tree")]
    NotATracefs(PathBuf),
    #[error(
        "permission denied reading {0}: tracing needs root (run with sudo), or CAP_PERFMON \
         plus read access to tracefs"
    )]
    PermissionDenied(PathBuf),
    #[error("event {system}:{event} does not exist in {root} ({reason})")]
    MissingEvent {
        system: String,
        event: String,
        root: PathBuf,
        reason: MissingReason,
    },
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path}: {source}")]
    Format { path: PathBuf, source: FormatError },
}

/// Why an event is not there, as far as the tree can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingReason {
    /// No directory for the whole system: the subsystem is not built or its module is not
    /// loaded (or, for nvme_tcp/nvmet_tcp, the kernel lacks the kernel_change/ patch).
    NoSystem,
    /// The system exists but not this event: the kernel is older or newer than expected.
    NoEvent,
    /// The directory exists but the format is not readable (permissions).
    Unreadable,
}

impl std::fmt::Display for MissingReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MissingReason::NoSystem => "no such event system: not compiled in or module not loaded",
            MissingReason::NoEvent => "the system exists but this kernel has no such event",
            MissingReason::Unreadable => "its format file cannot be read",
        })
    }
}

/// A tracefs tree, live or captured.
#[derive(Debug, Clone)]
pub struct Tracefs {
    /// The directory, or for an in-memory tree the name of where its formats came from
    /// (shown in messages).
    root: PathBuf,
    /// `Some`: the formats are these texts by (system, event), not files under `root`.
    formats: Option<BTreeMap<(String, String), String>>,
}

impl Tracefs {
    /// Use `dir` when given, else the first mounted standard location.
    pub fn find(dir: Option<&Path>) -> Result<Tracefs, TracefsError> {
        if let Some(d) = dir {
            return Tracefs::at(d);
        }
        let mut denied = None;
        for p in MOUNT_POINTS.iter().map(Path::new) {
            match fs::metadata(p.join("events")) {
                Ok(m) if m.is_dir() => {
                    return Ok(Tracefs {
                        root: p.to_path_buf(),
                        formats: None,
                    })
                }
                // Mounted but not ours to read: saying "not mounted" would send the
                // user to mount it again.
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    denied.get_or_insert(p.to_path_buf());
                }
                _ => {}
            }
        }
        Err(denied.map_or(TracefsError::NotMounted, TracefsError::PermissionDenied))
    }

    pub fn at(dir: &Path) -> Result<Tracefs, TracefsError> {
        if dir.join("events").is_dir() {
            Ok(Tracefs {
                root: dir.to_path_buf(),
                formats: None,
            })
        } else {
            Err(TracefsError::NotATracefs(dir.to_path_buf()))
        }
    }

    /// A tree of format texts by (system, event), named `origin` in messages (the file
    /// they were read from). Texts are parsed when asked for, as files are.
    pub fn in_memory(
        origin: &Path,
        formats: impl IntoIterator<Item = ((String, String), String)>,
    ) -> Tracefs {
        Tracefs {
            root: origin.to_path_buf(),
            formats: Some(formats.into_iter().collect()),
        }
    }

    /// Every (system, event) of an in-memory tree; empty for a directory.
    pub fn in_memory_events(&self) -> Vec<(String, String)> {
        self.formats
            .as_ref()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn event_dir(&self, system: &str, event: &str) -> PathBuf {
        self.root.join("events").join(system).join(event)
    }

    /// Parse `events/<system>/<event>/format`.
    pub fn event(&self, system: &str, event: &str) -> Result<EventFormat, TracefsError> {
        if let Some(m) = &self.formats {
            let path = self.root.join(format!("{system}:{event}"));
            let Some(text) = m.get(&(system.to_string(), event.to_string())) else {
                let reason = if m.keys().any(|(s, _)| s == system) {
                    MissingReason::NoEvent
                } else {
                    MissingReason::NoSystem
                };
                return Err(self.missing(system, event, reason));
            };
            return parse_format(text).map_err(|source| TracefsError::Format { path, source });
        }
        let dir = self.event_dir(system, event);
        let path = dir.join("format");
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let reason = if !self.root.join("events").join(system).is_dir() {
                    MissingReason::NoSystem
                } else if !dir.is_dir() {
                    MissingReason::NoEvent
                } else {
                    MissingReason::Unreadable
                };
                return Err(self.missing(system, event, reason));
            }
            Err(source) => return Err(TracefsError::Read { path, source }),
        };
        parse_format(&text).map_err(|source| TracefsError::Format { path, source })
    }

    fn missing(&self, system: &str, event: &str, reason: MissingReason) -> TracefsError {
        TracefsError::MissingEvent {
            system: system.to_string(),
            event: event.to_string(),
            root: self.root.clone(),
            reason,
        }
    }

    /// Every `format` file below `events/`, sorted, for whole-tree checks.
    pub fn all_format_paths(&self) -> Result<Vec<PathBuf>, TracefsError> {
        let events = self.root.join("events");
        let mut out = Vec::new();
        for sys in read_dir_sorted(&events)? {
            if !sys.is_dir() {
                continue;
            }
            for ev in read_dir_sorted(&sys)? {
                let f = ev.join("format");
                if f.is_file() {
                    out.push(f);
                }
            }
        }
        Ok(out)
    }
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, TracefsError> {
    let rd = fs::read_dir(dir).map_err(|source| TracefsError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
    v.sort();
    Ok(v)
}

/// `system:event` split, as written on command lines and in profile tables.
pub fn split_event_name(full: &str) -> Option<(&str, &str)> {
    full.split_once(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo_tracefs_roots() -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tracefs");
        let mut v: Vec<PathBuf> = fs::read_dir(&dir)
            .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        v.retain(|p| p.join("events").is_dir());
        v.sort();
        v
    }

    fn parse_all(t: &Tracefs) -> usize {
        let paths = t.all_format_paths().unwrap();
        let mut failures = Vec::new();
        for p in &paths {
            let text = fs::read_to_string(p).unwrap();
            match parse_format(&text) {
                Ok(f) => {
                    // Every event starts with the common header.
                    assert_eq!(f.fields[0].name, "common_type", "{}", p.display());
                    for fld in &f.fields {
                        assert!(!fld.name.is_empty(), "{}", p.display());
                    }
                }
                Err(e) => failures.push(format!("{}: {e}", p.display())),
            }
        }
        assert!(
            failures.is_empty(),
            "unparsed formats:\n{}",
            failures.join("\n")
        );
        paths.len()
    }

    #[test]
    fn every_captured_format_parses() {
        let roots = repo_tracefs_roots();
        assert!(!roots.is_empty(), "no captured trees under tracefs/");
        for r in roots {
            let n = parse_all(&Tracefs::at(&r).unwrap());
            assert!(n > 0, "{} holds no format files", r.display());
        }
    }

    #[test]
    fn every_live_format_parses() {
        let Some(t) = crate::testutil::live_tracefs("every_live_format_parses") else {
            return;
        };
        let n = parse_all(&t);
        // A real kernel has hundreds to thousands of events; a handful means a broken walk.
        assert!(
            n > 100,
            "only {n} format files under {}",
            t.root().display()
        );
        #[allow(clippy::print_stderr)]
        {
            eprintln!("parsed {n} live format files");
        }
    }

    /// An in-memory tree answers as the directory it was taken from.
    #[test]
    fn in_memory_formats_read_as_the_tree() {
        let root = repo_tracefs_roots().into_iter().next().unwrap();
        let dir = Tracefs::at(&root).unwrap();
        let text = fs::read_to_string(root.join("events/block/block_rq_issue/format")).unwrap();
        let key = ("block".to_string(), "block_rq_issue".to_string());
        let mem = Tracefs::in_memory(Path::new("x.data"), [(key.clone(), text)]);
        assert_eq!(
            mem.event("block", "block_rq_issue").unwrap(),
            dir.event("block", "block_rq_issue").unwrap()
        );
        assert_eq!(mem.in_memory_events(), [key]);
        assert!(dir.in_memory_events().is_empty());
        for (sys, ev, want) in [
            ("block", "block_rq_complete", MissingReason::NoEvent),
            ("nvme", "nvme_setup_cmd", MissingReason::NoSystem),
        ] {
            match mem.event(sys, ev) {
                Err(TracefsError::MissingEvent { reason, root, .. }) => {
                    assert_eq!((reason, root.as_path()), (want, Path::new("x.data")))
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn missing_events_say_why() {
        let root = repo_tracefs_roots().into_iter().next().unwrap();
        let t = Tracefs::at(&root).unwrap();
        match t.event("nosuchsystem", "x") {
            Err(TracefsError::MissingEvent { reason, .. }) => {
                assert_eq!(reason, MissingReason::NoSystem)
            }
            other => panic!("{other:?}"),
        }
        match t.event("block", "nosuchevent") {
            Err(TracefsError::MissingEvent { reason, .. }) => {
                assert_eq!(reason, MissingReason::NoEvent)
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Tracefs::at(Path::new("/nonexistent")),
            Err(TracefsError::NotATracefs(_))
        ));
    }
}
