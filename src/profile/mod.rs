//! Profiles as plug-ins: what to trace, how to join it into I/Os, and what a row says.
//!
//! A profile is one folder, `profile/<name>/`, holding everything it knows:
//! - `mod.rs`: its [`Descriptor`] (name, one line about it, its events with the hints
//!   `list` prints, its column table, its flags) and its [`Profile`] implementation,
//!   whose `plan` validates the flags into a run: the events with their kernel filters
//!   ([`crate::filter::Filter`]), the decoder and the correlator;
//! - its event layouts when no other profile reads the same events;
//! - its correlator ([`crate::correlate::Correlator`]) and its record type with the
//!   record's column table ([`crate::record::Tabled`]): name, role (label, stage,
//!   total of named stages, status, value), kind, accessor.
//!
//! What several profiles read or select alike lives in [`shared`]: the block and NVMe
//! event layouts, the NVMe command tracker and its columns, the block I/O columns, and
//! the selection flags. The pipeline, the sinks and the command line are generic: they
//! see a profile only through this trait, its records only through their column table.
//!
//! # Adding a profile
//! See `docs/adding-a-profile.md`: a folder, and one line in [`all`].

pub mod bio;
pub mod block;
pub mod nvme;
pub mod nvme_tcp;
pub mod nvmet;
pub mod sample;
pub mod shared;

use crate::correlate::Correlator;
use crate::decode::{DecodeError, Decoder, IntoSlot, Layout};
use crate::device::{DeviceError, SysBlock};
use crate::filter::Filter;
use crate::pipeline::{Pipeline, Stages};
use crate::record::Schema;
use crate::tracefs::{EventFormat, Tracefs, TracefsError};
use std::path::PathBuf;

/// Every profile, in the order `list` shows them. The registry: one line per profile.
pub fn all() -> &'static [&'static dyn Profile] {
    &[
        &block::Block,
        &bio::Bio,
        &nvme::Nvme,
        &nvmet::Nvmet,
        &nvme_tcp::NvmeTcp,
    ]
}

/// The profile `record` and `stat` use without `--profile`: every disk has it.
pub const DEFAULT: &str = "block";

pub fn find(name: &str) -> Option<&'static dyn Profile> {
    all().iter().copied().find(|p| p.name() == name)
}

/// A recording's profile, and where each column of its table is in the file.
pub struct Recognised {
    pub profile: &'static dyn Profile,
    /// Indexed like the profile's schema columns: the file's column, or `None` when
    /// the file does not have it (its cells read as empty).
    pub columns: Vec<Option<usize>>,
}

/// Why a file is not a recording this build can read.
#[derive(Debug, thiserror::Error)]
pub enum RecogniseError {
    #[error("written by profile `{0}`, which this ntprof-perf does not have; a newer one may")]
    UnknownProfile(String),
    #[error("written with the {profile} column table version {found}; this ntprof-perf reads up to version {known}: read it with a newer ntprof-perf")]
    Newer {
        profile: &'static str,
        found: u32,
        known: u32,
    },
    #[error("the header `{header}` is not that of a recording of any profile: a recording has its profile's label and status columns and some of its stages; profiles: {known}")]
    NoMatch { header: String, known: String },
    #[error("the header fits the {a} and {b} profiles equally well: write it with `ntprof-perf record`, or keep more of its columns")]
    Ambiguous { a: &'static str, b: &'static str },
}

/// The profile a file was written by: the one its metadata names (Parquet:
/// `ntprof.profile`, `ntprof.schema_version`), else the one whose column table fits its
/// header best ([`Schema::fit`]): columns added since the file was written, or dropped
/// from it, do not stop it loading.
pub fn recognise(header: &[&str], meta: &[(String, String)]) -> Result<Recognised, RecogniseError> {
    let named = meta.iter().find(|(k, _)| k == "ntprof.profile");
    let profile = if let Some((_, name)) = named {
        let p = find(name).ok_or_else(|| RecogniseError::UnknownProfile(name.clone()))?;
        let found = meta
            .iter()
            .find(|(k, _)| k == "ntprof.schema_version")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(1);
        let known = p.schema().version;
        if found > known {
            return Err(RecogniseError::Newer {
                profile: p.name(),
                found,
                known,
            });
        }
        p.schema().fit(header).map(|_| p)
    } else {
        let mut fits: Vec<(usize, &'static dyn Profile)> = all()
            .iter()
            .filter_map(|p| p.schema().fit(header).map(|n| (n, *p)))
            .collect();
        fits.sort_by_key(|f| std::cmp::Reverse(f.0));
        match fits[..] {
            [(n, a), (m, b), ..] if n == m => {
                return Err(RecogniseError::Ambiguous {
                    a: a.name(),
                    b: b.name(),
                })
            }
            _ => fits.first().map(|f| f.1),
        }
    };
    let profile = profile.ok_or_else(|| RecogniseError::NoMatch {
        header: header.join(","),
        known: all()
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", "),
    })?;
    Ok(Recognised {
        profile,
        columns: profile.schema().project(header),
    })
}

/// An event a profile opens; optional ones refine the record when present.
#[derive(Debug, Clone, Copy)]
pub struct EventReq {
    pub system: &'static str,
    pub event: &'static str,
    pub required: bool,
    /// What to do when it is missing (which config option, module, or patch).
    pub hint: &'static str,
}

/// Hint for the block events every distribution kernel has.
pub const BLOCK_HINT: &str = "CONFIG_EVENT_TRACING (every distribution kernel has it)";

/// A profile's static facts, one value in its folder.
pub struct Descriptor {
    pub name: &'static str,
    /// One line for `list` and `--help`.
    pub about: &'static str,
    pub events: &'static [EventReq],
    /// The record's column table (CSV header, stat groups and stages, totals).
    pub schema: fn() -> &'static Schema,
    /// The profile's own flags for `record` and `stat`. Profiles that share a flag
    /// (same id) must give it the same definition: the command line shows it once.
    pub args: fn() -> Vec<clap::Arg>,
    /// Per stage (column name without `_ns`), the events it cannot be measured
    /// without. With `--stages`, an event some stage needs is opened only when a stage
    /// asked for needs it; an event no stage lists (requeues, merges: rare, and what
    /// keeps the counts right) is always opened. Empty: every stage needs every event,
    /// and `--stages` is refused.
    pub needs: &'static [Need],
}

impl Descriptor {
    /// Whether only some stages need `event` (see [`Descriptor::needs`]): a capture
    /// without it still gives every row, those stages empty.
    pub fn stage_only(&self, event: &str) -> bool {
        self.needs.iter().any(|n| n.events.contains(&event))
    }

    /// Whether every row needs `system:event`: required, and not only for some stages.
    pub fn every_row_needs(&self, req: &EventReq) -> bool {
        req.required && !self.stage_only(req.event)
    }
}

/// The events one stage is measured from (see [`Descriptor::needs`]).
#[derive(Debug, Clone, Copy)]
pub struct Need {
    pub stage: &'static str,
    pub events: &'static [&'static str],
}

/// A profile: see the module doc for the contract.
pub trait Profile: Sync {
    fn descriptor(&self) -> &'static Descriptor;
    fn name(&self) -> &'static str {
        self.descriptor().name
    }
    fn about(&self) -> &'static str {
        self.descriptor().about
    }
    fn events(&self) -> &'static [EventReq] {
        self.descriptor().events
    }
    fn schema(&self) -> &'static Schema {
        (self.descriptor().schema)()
    }
    fn args(&self) -> Vec<clap::Arg> {
        (self.descriptor().args)()
    }
    /// Validate the flags and this host into a run: the events to open with their
    /// filters, the decoder and the correlator. May refuse (missing events, bad
    /// flag values); must not open anything.
    fn plan(&self, ctx: &PlanCtx<'_>) -> Result<Plan, PlanError>;

    /// Join recordings of the same I/Os made on two machines (each side records its
    /// part) into the rows one joint recording has. `None`: this profile's I/O lives
    /// on one machine.
    fn merge(
        &self,
        _inputs: &[Recording],
        _max_skew_ns: u64,
    ) -> Option<Result<Merged, MergeError>> {
        None
    }
}

/// Rows of one recording read back: each row's cells in schema order, with the line
/// it came from.
pub struct Recording {
    pub name: String,
    pub rows: Vec<(u64, Vec<String>)>,
}

/// What a merge produced: records with the wall clock of the recording each start
/// belongs to, and a line saying how it went.
pub struct Merged {
    pub rows: Vec<(
        crate::sink::time::WallClock,
        Box<dyn crate::record::IoRecord>,
    )>,
    pub summary: String,
    pub warning: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("{file} line {line}: {source}")]
    Row {
        file: String,
        line: u64,
        source: crate::record::RowError,
    },
}

/// Why a profile cannot run as asked.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("profile `{profile}` cannot run on this kernel ({}); missing events:\n{}", root.display(), missing.join("\n"))]
    MissingEvents {
        profile: &'static str,
        root: PathBuf,
        missing: Vec<String>,
    },
    #[error("{flag}: {why}")]
    Flag { flag: String, why: String },
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Whether one event is available, and if not, why.
#[derive(Debug, Clone)]
pub struct EventStatus {
    pub req: EventReq,
    pub missing: Option<String>,
}

/// The per-event availability of a profile on `tfs`.
pub fn check(p: &dyn Profile, tfs: &Tracefs) -> Vec<EventStatus> {
    p.events()
        .iter()
        .map(|req| {
            let missing = match tfs.event(req.system, req.event) {
                Ok(_) => None,
                Err(TracefsError::MissingEvent { reason, .. }) => {
                    Some(format!("{reason}; {}", req.hint))
                }
                Err(e) => Some(e.to_string()),
            };
            EventStatus { req: *req, missing }
        })
        .collect()
}

/// True when every required event is there.
pub fn supported(status: &[EventStatus]) -> bool {
    status
        .iter()
        .all(|s| !s.req.required || s.missing.is_none())
}

/// The plan of profile `p` for samples that were not traced here (a capture, a
/// replay): bound to the formats of `tfs`, every event they have, the profile's flags
/// at their defaults. `sys` names the devices (see `SysBlock`).
pub fn plan_offline(
    p: &'static dyn Profile,
    tfs: &Tracefs,
    sys: SysBlock,
) -> Result<Plan, PlanError> {
    let flags = clap::Command::new(p.name())
        .args(p.args())
        .try_get_matches_from([p.name()])
        .map_err(|e| PlanError::Flag {
            flag: p.name().to_string(),
            why: e.to_string(),
        })?;
    let ctx = PlanCtx {
        profile: p.name(),
        status: check(p, tfs),
        tfs,
        args: &flags,
        sys,
        max_rate: None,
        capture: true,
    };
    p.plan(&ctx)
}

/// What a profile plans with.
pub struct PlanCtx<'a> {
    pub profile: &'static str,
    pub tfs: &'a Tracefs,
    /// The `record`/`stat` flags, the profile's own among them.
    pub args: &'a clap::ArgMatches,
    pub sys: SysBlock,
    pub status: Vec<EventStatus>,
    /// `--max-rate`: the run changes its sampling while running (see [`Resample`]).
    pub max_rate: Option<u64>,
    /// The events come from a capture (`import`), not from this host: its own filters
    /// chose them, so a profile binds every event it has instead of deciding from this
    /// host's devices which to open.
    pub capture: bool,
}

impl PlanCtx<'_> {
    /// Whether `system:event` is available.
    pub fn has(&self, system: &str, event: &str) -> bool {
        self.status
            .iter()
            .any(|s| s.req.system == system && s.req.event == event && s.missing.is_none())
    }

    /// Whether the stages asked for (`--stages`, all by default) need `event`
    /// (see [`Descriptor::needs`]).
    pub fn wants(&self, event: &str) -> bool {
        let Some(asked) = self.stages() else {
            return true;
        };
        let needs = find(self.profile).map_or(&[][..], |p| p.descriptor().needs);
        let listed = needs.iter().any(|n| n.events.contains(&event));
        !listed
            || needs
                .iter()
                .any(|n| n.events.contains(&event) && asked.iter().any(|a| a == n.stage))
    }

    /// Whether to open `system:event`: available, and wanted by the stages asked for.
    pub fn opens(&self, system: &str, event: &str) -> bool {
        self.has(system, event) && self.wants(event)
    }

    /// `--stages`, when given.
    pub fn stages(&self) -> Option<Vec<String>> {
        self.args
            .try_get_many::<String>("stages")
            .ok()
            .flatten()
            .map(|v| v.cloned().collect())
    }

    /// Refuse `--stages` naming a stage the profile does not have, or given to a
    /// profile whose stages all need every event.
    pub fn check_stages(&self) -> Result<(), PlanError> {
        let Some(asked) = self.stages() else {
            return Ok(());
        };
        let Some(p) = find(self.profile) else {
            return Ok(());
        };
        let names: Vec<&str> = p.schema().stage_names().collect();
        if p.descriptor().needs.is_empty() {
            return Err(PlanError::Flag {
                flag: "--stages".into(),
                why: format!(
                    "every stage of the {} profile is measured from all its events, so there is nothing to leave out; --stages applies to {}",
                    p.name(),
                    all()
                        .iter()
                        .filter(|q| !q.descriptor().needs.is_empty())
                        .map(|q| q.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        if let Some(bad) = asked.iter().find(|a| !names.contains(&a.as_str())) {
            return Err(PlanError::Flag {
                flag: "--stages".into(),
                why: format!(
                    "the {} profile has no stage `{bad}`; its stages: {}",
                    p.name(),
                    names.join(", ")
                ),
            });
        }
        Ok(())
    }

    /// Whether every event of `system` the profile lists is available.
    pub fn has_system(&self, system: &str) -> bool {
        let mut any = false;
        for s in self.status.iter().filter(|s| s.req.system == system) {
            if s.missing.is_some() {
                return false;
            }
            any = true;
        }
        any
    }

    /// Refuse to run when a required event that `applies` is missing, naming each
    /// with why.
    pub fn require(&self, applies: impl Fn(&EventReq) -> bool) -> Result<(), PlanError> {
        self.require_where(|e| e.required && applies(e))
    }

    fn require_where(&self, applies: impl Fn(&EventReq) -> bool) -> Result<(), PlanError> {
        // A capture's events are what perf recorded: one only some stages need may be
        // absent, and those stages are then empty (the profile says so in a note).
        let optional_here = |e: &EventReq| {
            self.capture && find(self.profile).is_some_and(|p| p.descriptor().stage_only(e.event))
        };
        let missing: Vec<String> = self
            .status
            .iter()
            .filter(|s| applies(&s.req) && self.wants(s.req.event) && !optional_here(&s.req))
            .filter_map(|s| {
                s.missing
                    .as_ref()
                    .map(|why| format!("  {}:{}: {why}", s.req.system, s.req.event))
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(PlanError::MissingEvents {
            profile: self.profile,
            root: self.tfs.root().to_path_buf(),
            missing,
        })
    }

    /// Refuse to run when any event of `system` the profile lists is missing,
    /// optional or not.
    pub fn require_all_of(&self, system: &str) -> Result<(), PlanError> {
        self.require_where(|e| e.system == system)
    }

    /// A flag's value (`None` when not given and without default).
    pub fn flag<T: Clone + Send + Sync + 'static>(&self, id: &str) -> Option<T> {
        self.args.try_get_one::<T>(id).ok().flatten().cloned()
    }

    /// Every value of a repeatable flag.
    pub fn flags<T: Clone + Send + Sync + 'static>(&self, id: &str) -> Vec<T> {
        self.args
            .try_get_many::<T>(id)
            .ok()
            .flatten()
            .map(|v| v.cloned().collect())
            .unwrap_or_default()
    }

    pub fn switch(&self, id: &str) -> bool {
        self.args.try_get_one::<bool>(id).ok().flatten() == Some(&true)
    }
}

/// A perf event to open, with its kernel filter.
#[derive(Debug, Clone)]
pub struct OpenEvent {
    pub name: String,
    pub id: u64,
    pub filter: Option<Filter>,
}

/// A profile's run, ready to open: events, and the pipeline that decodes and
/// correlates them.
pub struct Plan {
    pub events: Vec<OpenEvent>,
    pub stages: Box<dyn Stages>,
    /// Things the user should know about this run (printed before tracing).
    pub notes: Vec<String>,
    /// 1 in N I/Os traced (in-kernel sampling); 1 = all. With `--max-rate`, the rate
    /// the run starts at.
    pub sample: u32,
    /// With `--max-rate`: how to change the rate while running.
    pub resample: Option<Resample>,
}

/// How a plan's events are opened to change the sampling rate while running
/// (`--max-rate`).
///
/// The kernel takes one filter per perf event and refuses to replace it (`EEXIST` from
/// `ftrace_profile_set_filter`), so the rate cannot change by a new filter. Instead
/// each sampled event is opened once per part of the sample, the parts disjoint:
/// part k holds the I/Os whose sample bits below level k are clear and whose bit k is
/// set; the last part, those whose bits are all clear. 1 in 2^k is then parts k and
/// up, enabled, the others disabled (`PERF_EVENT_IOC_ENABLE`/`DISABLE`); no I/O is
/// ever in two enabled parts, so no event comes twice. The plan is made at 1 in 2, so
/// each sampled filter holds one `!(field & bit)` test, which [`Filter::remask`]
/// replaces by a part's test.
pub struct Resample {
    fields: &'static [&'static str],
    mask: MaskFn,
    planned: Vec<Option<Filter>>,
}

/// The sample bits that must be clear to keep 1 in N.
type MaskFn = Box<dyn Fn(u32) -> u64 + Send>;

/// One perf event of a `--max-rate` run: plan event `event`, whole (`level` `None`:
/// it is not sampled) or part `level` of its sample.
pub struct Part {
    pub event: usize,
    pub level: Option<u32>,
    pub filter: Option<Filter>,
}

impl Resample {
    /// Parts per sampled event: levels 0 to log2([`sample::MAX_SAMPLE`]).
    pub const LEVELS: u32 = sample::MAX_SAMPLE.trailing_zeros() + 1;

    /// The sample bits that must be clear at 1 in `n`.
    pub fn mask(&self, n: u32) -> u64 {
        (self.mask)(n)
    }

    /// Every perf event to open, in plan order, each sampled event's parts together.
    pub fn parts(&self) -> Vec<Part> {
        let mut out = Vec::new();
        for (event, f) in self.planned.iter().enumerate() {
            let sampled: Vec<&str> = self
                .fields
                .iter()
                .copied()
                .filter(|field| f.as_ref().is_some_and(|f| f.tests(field)))
                .collect();
            if sampled.is_empty() {
                out.push(Part {
                    event,
                    level: None,
                    filter: f.clone(),
                });
                continue;
            }
            for level in 0..Self::LEVELS {
                let clear = self.mask(1 << level);
                let set = if level + 1 < Self::LEVELS {
                    self.mask(2 << level) & !clear
                } else {
                    0
                };
                let mut filter = f.clone();
                for field in &sampled {
                    filter = filter.and_then(|f| f.remask(field, clear, set));
                }
                out.push(Part {
                    event,
                    level: Some(level),
                    filter,
                });
            }
        }
        out
    }

    /// Whether part `level` is enabled at 1 in `n`.
    pub fn traced(level: u32, n: u32) -> bool {
        level >= n.trailing_zeros()
    }
}

/// Collects the events a plan opens, binding each one's layout as it goes. `L` is its
/// decoder's slot type (see [`Decoder`]): any layout by default ([`PlanBuilder::new`]),
/// or the one layout type of a profile whose events all share it
/// ([`PlanBuilder::direct`]).
pub struct PlanBuilder<'t, K, L: ?Sized = dyn Layout<K>> {
    tfs: &'t Tracefs,
    decoder: Decoder<K, L>,
    events: Vec<OpenEvent>,
    notes: Vec<String>,
    sample: u32,
    sampler: Option<(&'static [&'static str], MaskFn)>,
}

impl<'t, K: 'static> PlanBuilder<'t, K> {
    pub fn new(tfs: &'t Tracefs) -> Self {
        Self::with(tfs, Decoder::new())
    }

    /// [`open`](Self::open) with a profile's boxed layout (`events::layout`), which
    /// becomes the decoder's slot itself (see [`Decoder::bind_boxed`]).
    pub fn open_boxed(
        &mut self,
        system: &str,
        event: &str,
        filter: Option<Filter>,
        bind: impl FnOnce(&EventFormat) -> Result<Box<dyn Layout<K>>, DecodeError>,
    ) -> Result<(), PlanError> {
        let b = self.decoder.bind_boxed(self.tfs, system, event, bind)?;
        self.opened(b, filter);
        Ok(())
    }
}

impl<'t, K: 'static, L: Layout<K> + 'static> PlanBuilder<'t, K, L> {
    /// Every event decoded by an `L`, with no dynamic call per sample.
    pub fn direct(tfs: &'t Tracefs) -> Self {
        Self::with(tfs, Decoder::direct())
    }
}

impl<'t, K: 'static, L: Layout<K> + ?Sized + 'static> PlanBuilder<'t, K, L> {
    fn with(tfs: &'t Tracefs, decoder: Decoder<K, L>) -> Self {
        PlanBuilder {
            tfs,
            decoder,
            events: Vec::new(),
            notes: Vec::new(),
            sample: 1,
            sampler: None,
        }
    }

    /// Open `system:event` with `filter`, decoding it with the layout `bind` builds.
    pub fn open<M: IntoSlot<L>>(
        &mut self,
        system: &str,
        event: &str,
        filter: Option<Filter>,
        bind: impl FnOnce(&EventFormat) -> Result<M, DecodeError>,
    ) -> Result<(), PlanError> {
        let b = self.decoder.bind(self.tfs, system, event, bind)?;
        self.opened(b, filter);
        Ok(())
    }

    fn opened(&mut self, b: crate::decode::BoundEvent, filter: Option<Filter>) {
        self.events.push(OpenEvent {
            name: b.name,
            id: b.id,
            filter,
        });
    }

    pub fn note(&mut self, s: impl Into<String>) {
        self.notes.push(s.into());
    }

    pub fn sample(&mut self, n: u32) {
        self.sample = n;
    }

    /// With `--max-rate`: the filters test the sample bits of `fields`, and `mask`
    /// gives those bits for a rate (see [`Resample`]).
    pub fn sampler(
        &mut self,
        fields: &'static [&'static str],
        mask: impl Fn(u32) -> u64 + Send + 'static,
    ) {
        self.sampler = Some((fields, Box::new(mask)));
    }

    pub fn build<C: Correlator<Event = K> + 'static>(self, corr: C) -> Plan
    where
        K: Send,
    {
        let resample = self.sampler.map(|(fields, mask)| Resample {
            fields,
            mask,
            planned: self.events.iter().map(|e| e.filter.clone()).collect(),
        });
        Plan {
            events: self.events,
            stages: Box::new(Pipeline::new(self.decoder, corr)),
            notes: self.notes,
            sample: self.sample,
            resample,
        }
    }

    /// The decoder alone (tests and replays drive a [`Pipeline`] themselves).
    pub fn into_decoder(self) -> Decoder<K, L> {
        self.decoder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(kv: &[(&str, &str)]) -> Vec<(String, String)> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Every profile's own header is recognised as its own, and only as its own.
    #[test]
    fn each_profile_recognises_its_own_header() {
        for p in all() {
            let header: Vec<&str> = p.schema().names().collect();
            let r = recognise(&header, &[]).unwrap_or_else(|e| panic!("{}: {e}", p.name()));
            assert_eq!(r.profile.name(), p.name());
            assert!(r.columns.iter().enumerate().all(|(i, c)| *c == Some(i)));
        }
    }

    /// `serve`'s labels: device, operation, stage, and the controller and queue where a
    /// profile's table has them, never a column that differs per I/O; places do not
    /// split `stat`'s tables.
    #[test]
    fn metric_labels_are_the_labels_plus_controller_and_queue_and_nothing_per_io() {
        let per_io = ["cid", "tag", "sector", "slba", "start_ns", "bytes", "qd"];
        let places = ["qid", "ctrl", "cntlid", "disk"];
        for p in all() {
            let sc = p.schema();
            let names =
                |ix: &[usize]| -> Vec<&str> { ix.iter().map(|&i| sc.columns[i].name).collect() };
            let metric = names(&sc.metric_labels);
            let labels = names(&sc.labels);
            assert!(
                labels.iter().all(|l| metric.contains(l)),
                "{}: {metric:?}",
                p.name()
            );
            for c in sc.names() {
                if per_io.contains(&c) {
                    assert!(!metric.contains(&c), "{}: {c} is per I/O", p.name());
                }
                if places.contains(&c) {
                    assert!(
                        metric.contains(&c),
                        "{}: {c} is not a metric label",
                        p.name()
                    );
                }
                if c == "qid" {
                    assert!(!labels.contains(&c), "{}: a stat table per queue", p.name());
                }
            }
        }
        let nvme = find("nvme").unwrap().schema();
        let m: Vec<&str> = nvme
            .metric_labels
            .iter()
            .map(|&i| nvme.columns[i].name)
            .collect();
        assert!(
            m.contains(&"ctrl") && m.contains(&"qid") && m.contains(&"opcode"),
            "{m:?}"
        );
    }

    #[test]
    fn metadata_names_the_profile_and_a_newer_table_is_refused() {
        let header: Vec<&str> = block::Block.schema().names().collect();
        let named = meta(&[("ntprof.profile", "block"), ("ntprof.schema_version", "1")]);
        assert_eq!(recognise(&header, &named).unwrap().profile.name(), "block");
        let newer = meta(&[("ntprof.profile", "block"), ("ntprof.schema_version", "99")]);
        assert!(matches!(
            recognise(&header, &newer),
            Err(RecogniseError::Newer {
                found: 99,
                known: 1,
                ..
            })
        ));
        let unknown = meta(&[("ntprof.profile", "scsi")]);
        assert!(matches!(
            recognise(&header, &unknown),
            Err(RecogniseError::UnknownProfile(_))
        ));
    }
}

/// `docs/columns.md` between its markers: every profile's column table as the code has
/// it. A test holds the page to it (`NTPROF_BLESS=1` rewrites the page).
#[cfg(test)]
mod columns_page {
    use super::all;
    use crate::record::{Kind, Role};

    const BEGIN: &str = "<!-- generated from the column tables: begin -->\n";
    const END: &str = "<!-- generated from the column tables: end -->\n";

    fn render() -> String {
        let mut s = String::new();
        for p in all() {
            let sc = p.schema();
            s.push_str(&format!(
                "\n## {} (column table version {})\n\n{}.\n\n| column | role | type |\n|---|---|---|\n",
                sc.profile,
                sc.version,
                p.about()
            ));
            for c in &sc.columns {
                let role = match c.role {
                    Role::StartTime => "start time (wall clock)".to_string(),
                    Role::Label => "label (stat groups)".to_string(),
                    Role::Stage => "stage (ns)".to_string(),
                    Role::Total(parts) => format!(
                        "total (ns) = {}",
                        parts
                            .iter()
                            .map(|p| format!("`{p}`"))
                            .collect::<Vec<_>>()
                            .join(" + ")
                    ),
                    Role::Status => "status".to_string(),
                    Role::Place => "place (a label of `serve`'s metrics)".to_string(),
                    Role::Value => "value".to_string(),
                };
                let kind = match c.kind {
                    Kind::Timestamp => "timestamp (ns, UTC)",
                    Kind::U64 => "unsigned integer",
                    Kind::I64 => "signed integer",
                    Kind::Text => "text",
                };
                s.push_str(&format!("| `{}` | {role} | {kind} |\n", c.name));
            }
            let names: Vec<&str> = sc.stage_names().collect();
            let order: Vec<&str> = sc.passage().iter().map(|&k| names[k]).collect();
            s.push_str(&format!(
                "\nStages in the order an I/O passes through them: {}.\n",
                order.join(" → ")
            ));
        }
        s
    }

    #[test]
    fn the_columns_page_is_the_column_tables() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/columns.md");
        let page = std::fs::read_to_string(&path).unwrap();
        let (Some(b), Some(e)) = (page.find(BEGIN), page.find(END)) else {
            panic!("docs/columns.md has no generated section markers");
        };
        let want = render();
        let have = &page[b + BEGIN.len()..e];
        if have != want {
            if std::env::var("NTPROF_BLESS").as_deref() == Ok("1") {
                let new = format!("{}{BEGIN}{want}{}", &page[..b], &page[e..]);
                std::fs::write(&path, new).unwrap();
            } else {
                panic!("docs/columns.md differs from the column tables: run the test with NTPROF_BLESS=1 and read the change");
            }
        }
    }
}
