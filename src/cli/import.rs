//! `import`, `stat --input`, and perf.data given to `report` and `plot`: a capture made
//! by stock `perf record`, replayed through the profile's plan as a live run would run
//! it (see `ntprof_perf::import`).

use super::args::{ImportArgs, Rows, StatArgs};
use super::live::{row_writer, RowsTo};
use anyhow::Result;
use clap::parser::ValueSource;
use ntprof_perf::device::{dev_text, SysBlock};
use ntprof_perf::import::{Capture, Partial, PartialRead, Replayed};
use ntprof_perf::pipeline::RecordSink;
use ntprof_perf::profile::{self, Plan, Profile};
use ntprof_perf::record::{IoRecord, Schema, Status, Value};
use ntprof_perf::sink::parquet::FileInfo;
use ntprof_perf::sink::recorder::{Recorder, StatusLine};
use ntprof_perf::sink::stat::StatSink;
use ntprof_perf::sink::{Health, SinkError};
use ntprof_perf::tracefs::Tracefs;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// What a capture that is not whole lacks, and what was read of it.
fn partial_warning(file: &Path, p: PartialRead) -> String {
    let read = format!("read its {} bytes of whole records", p.bytes);
    let read = match p.after_round {
        0 => read,
        n => format!(
            "{read}, to the end of perf's last pass over its rings ({n} bytes after it, of a pass perf had not finished, are left out: some rings' records without the others')"
        ),
    };
    let file = file.display();
    match p.how {
        Partial::Unfinished => format!(
            "perf record did not finish {file} (it was killed, ran out of disk, or is still running): {read}; what perf had not yet written (the rest of its rings, its LOST_SAMPLES counts, the host and the wall-clock offset) is not in it"
        ),
        Partial::Cut {
            len,
            said,
            in_records,
        } => format!(
            "{file} is cut short: it is {len} bytes, but its header names sections up to byte {said}; {read}; {}",
            if in_records {
                "what was after the cut (the rest of the records, the LOST_SAMPLES counts, the host and the wall-clock offset) is not in it"
            } else {
                "the records are all there, but not what perf writes after them (the host and the wall-clock offset)"
            }
        ),
    }
}

/// The capture, its profile and that profile's plan bound to the capture's formats.
struct Prepared {
    cap: Capture,
    profile: &'static dyn Profile,
    plan: Plan,
}

fn prepare(file: &Path, name: Option<&str>, tracefs: Option<&Path>) -> Result<Prepared> {
    let tfs = tracefs.map(|d| Tracefs::find(Some(d))).transpose()?;
    let cap = Capture::open(file, tfs.as_ref())?;
    if let Some(n) = name {
        if profile::find(n).is_none() {
            let names: Vec<&str> = profile::all().iter().map(|p| p.name()).collect();
            anyhow::bail!(
                "unknown profile `{n}`; profiles: {} (see `ntprof-perf list`)",
                names.join(", ")
            );
        }
    }
    let p = cap.profile(name)?;
    if let Some(p) = cap.partial {
        ntprof_perf::say!("ntprof-perf: warning: {}", partial_warning(file, p));
    }
    if let Some(cpus) = cap.split {
        ntprof_perf::say!(
            "ntprof-perf: note: {} has no FINISHED_ROUND records (perf inject writes none when it merges a `perf record --threads` directory): its {cpus} CPUs' records are read one ring per CPU and merged by time, as the directory's are",
            file.display()
        );
    }
    if let Some(bytes) = cap.unrounded {
        ntprof_perf::say!(
            "ntprof-perf: note: {} has no FINISHED_ROUND records (perf inject writes none when it merges a `perf record --threads` directory), and its records cannot be read one ring per CPU (a CPU's samples out of time order, or no CPU in them), so its {} MB of records are sorted in memory, about twice that; import the directory itself to read it ring by ring in a few MB",
            file.display(),
            bytes >> 20
        );
    }
    let here = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok();
    // Device numbers name this host's devices only when the capture was made here;
    // elsewhere the rows say MAJ:MIN rather than another disk's name.
    let sys = if cap.host.is_some() && cap.host == here {
        SysBlock::default()
    } else {
        ntprof_perf::say!(
            "ntprof-perf: {} was recorded on {}, not here: devices are shown as MAJ:MIN",
            file.display(),
            cap.host.as_deref().unwrap_or("an unnamed host")
        );
        SysBlock::none()
    };
    let plan = cap.plan(p, sys)?;
    for n in &plan.notes {
        ntprof_perf::say!("ntprof-perf: {n}");
    }
    Ok(Prepared {
        cap,
        profile: p,
        plan,
    })
}

/// Rows per device, and how many of them `incomplete`: a capture holds every device
/// perf's filters let through, some of which may never complete an I/O of the profile
/// (a request-based disk under the bio profile).
struct ByDevice<'a> {
    inner: &'a mut dyn RecordSink,
    dev: Option<usize>,
    name: Option<usize>,
    /// dev_t → (its name, rows, rows incomplete).
    seen: BTreeMap<u32, (String, u64, u64)>,
}

impl<'a> ByDevice<'a> {
    fn new(inner: &'a mut dyn RecordSink, schema: &Schema) -> ByDevice<'a> {
        ByDevice {
            inner,
            dev: schema.position("dev"),
            name: schema.position("device"),
            seen: BTreeMap::new(),
        }
    }

    /// The devices some of whose rows completed while none of this one's did, as
    /// `name (major:minor, N rows)`; empty when every device completed some, or none did
    /// (the exit warning for a whole capture says that).
    fn never_completed(&self) -> Vec<String> {
        let done = |(_, rows, inc): &(String, u64, u64)| rows > inc;
        if !self.seen.values().any(done) {
            return Vec::new();
        }
        self.seen
            .iter()
            .filter(|(_, e)| !done(e))
            .map(|(&d, (name, rows, _))| {
                let dev = dev_text(d);
                match name.as_str() {
                    "" => format!("{dev} ({rows} rows)"),
                    n => format!("{n} ({dev}, {rows} rows)"),
                }
            })
            .collect()
    }
}

impl RecordSink for ByDevice<'_> {
    fn record(&mut self, r: &dyn IoRecord, sample: u32) -> Result<(), SinkError> {
        if let Some(Value::Dev(d)) = self.dev.map(|i| r.value(i)) {
            let e = self.seen.entry(d).or_insert_with(|| {
                let name = match self.name.map(|i| r.value(i)) {
                    Some(Value::Str(s)) => s.to_string(),
                    Some(Value::String(s)) => s,
                    _ => String::new(),
                };
                (name, 0, 0)
            });
            e.1 += 1;
            e.2 += u64::from(r.status() == Status::Incomplete);
        }
        self.inner.record(r, sample)
    }

    fn tick(&mut self, health: &Health) -> Result<(), SinkError> {
        self.inner.tick(health)
    }
}

/// Why I/Os did not complete in a capture of some tasks or CPUs (`perf record` without
/// `-a`, or with `-C`): said of a disk none of whose I/Os completed, and of a capture
/// where none did; the warning of the narrowing itself follows.
const WATCHED_LESS: &str = ", which watched less than the whole machine (below)";

/// What the exit line adds to the counters for a capture: `rows` I/Os of `profile`;
/// `never` the devices none of whose I/Os completed ([`ByDevice::never_completed`]).
fn report_end(
    what: &str,
    cap_clock: &str,
    replayed: &Replayed,
    profile: &str,
    rows: u64,
    never: &[String],
) {
    let health = &replayed.health;
    ntprof_perf::say!("ntprof-perf: {what}; {}", health.line());
    ntprof_perf::say!("ntprof-perf: clock: {cap_clock}");
    if !never.is_empty() {
        ntprof_perf::say!(
            "ntprof-perf: warning: none of the I/Os of {} completed in the capture (their rows are `incomplete`){}",
            never.join(", "),
            if profile == "bio" {
                ": the kernel traces bio completions for bio-based devices only (dm, md, zram); a request-based disk's bios complete inside its requests (--profile block), so leave those disks out of the capture (perf record --filter) or out of the analysis"
            } else if replayed.narrowed.is_some() {
                // A disk whose completions all ran elsewhere (a loop device's worker on
                // another CPU): the same reason as for a capture with none at all.
                WATCHED_LESS
            } else {
                ""
            }
        );
    }
    if rows > 0 && health.counters.incomplete == rows {
        // A capture takes every device perf's filters let through; live, the bio
        // profile refuses a request-based disk before tracing.
        ntprof_perf::say!(
            "ntprof-perf: warning: none of the {rows} I/Os completed in the capture{}",
            if profile == "bio" {
                ": the kernel traces bio completions (block_bio_complete) for bio-based devices only (dm, md, zram); a request-based disk's bios never complete in the trace: import with --profile block"
            } else if replayed.narrowed.is_some() {
                WATCHED_LESS
            } else {
                ": the capture ended before any completion, or perf's filters left the completions out"
            }
        );
    }
    if health.lost > 0 {
        ntprof_perf::say!(
            "ntprof-perf: warning: the capture lost {} samples because perf's rings were full (LOST records); record again with a larger `perf record -m` (pages per CPU) or `-r` (real-time priority)",
            health.lost
        );
        // A LOST record does not say of which events: the I/Os seen in part are each
        // `dropped` or a completion unmatched; those it took whole are only estimated.
        ntprof_perf::say!(
            "ntprof-perf: the lost samples cost {} I/Os seen in part (rows `dropped`, or a completion unmatched) and ≈{} I/Os whose every event was lost",
            health.lost_ios,
            health.whole_ios_lost()
        );
    }
    if health.duplicates > 0 {
        ntprof_perf::say!(
            "ntprof-perf: warning: the capture holds {} twice, byte for byte (perf wrote part of a ring again); each was used once",
            match health.duplicates {
                1 => "1 sample".to_string(),
                n => format!("{n} samples"),
            }
        );
    }
    if let Some(n) = &replayed.narrowed {
        ntprof_perf::say!("ntprof-perf: warning: {n}");
    }
    if health.throttled > 0 {
        ntprof_perf::say!(
            "ntprof-perf: warning: the kernel throttled sampling {} times (THROTTLE records): the samples not taken are in no count",
            health.throttled
        );
    }
}

pub fn import(a: &ImportArgs) -> Result<i32> {
    import_as(a, None)
}

/// `import`, the exit line naming where rows went as `to` when given (a temporary file
/// means nothing to the user).
fn import_as(a: &ImportArgs, to: Option<&str>) -> Result<i32> {
    let Prepared {
        cap,
        profile: p,
        mut plan,
    } = prepare(&a.file, a.profile.as_deref(), a.tracefs.as_deref())?;
    let schema = p.schema();
    let clock = cap.clock.wall();
    let info = || FileInfo {
        host: cap.host.clone().unwrap_or_default(),
        kernel: cap.kernel.clone().unwrap_or_default(),
        // The capture's own in-kernel sampling (a `--sample` filter) is not known here.
        ..FileInfo::this_host(schema, 1, clock)
    };
    let (writer, written_to) = row_writer(&a.rows.output, a.rows.format, schema, clock, &info)?;
    let to = to.map_or(written_to, |name| RowsTo(vec![name.to_string()]));
    let mut rec = Recorder::new(writer, a.rows.min_latency, StatusLine::on_stderr());
    let described = format!(
        "{}{}",
        cap.clock.describe(),
        if cap.pipe {
            "; a pipe-mode capture"
        } else {
            ""
        }
    );
    let mut by_dev = ByDevice::new(&mut rec, schema);
    let replayed = cap.replay(plan.stages.as_mut(), &mut by_dev);
    let never = by_dev.never_completed();
    // The rows handed over before an error (a capture that turns bad part way, a full
    // disk) are kept: the outputs are finished once either way (a second finish would
    // write Parquet's footer again, over nothing), and the exit line says what they hold.
    let done = match replayed {
        Ok(r) => rec
            .finish(Some(&r.health))
            .map(|()| r)
            .map_err(anyhow::Error::from),
        Err(e) => {
            let _ = rec.finish(None);
            Err(e.into())
        }
    };
    let replayed = match done {
        Ok(r) => r,
        Err(e) => {
            let n = rec.written();
            ntprof_perf::say!(
                "ntprof-perf: import stopped by an error after {n} I/Os written to {to}{}",
                to.held(&rec.kept(), n)
            );
            return Err(e);
        }
    };
    let rows = rec.summary(&to);
    report_end(
        &rows,
        &described,
        &replayed,
        p.name(),
        plan.stages.rows(),
        &never,
    );
    Ok(0)
}

pub fn stat(a: &StatArgs, input: &Path, flags: &clap::ArgMatches) -> Result<i32> {
    // What selects or paces a live run has no meaning for a capture: refused, not ignored.
    let live_only = [
        "duration",
        "mmap_pages",
        "realtime",
        "threads",
        "max_rate",
        "duty",
        "stages",
        "command",
    ];
    let given = |id: &str| flags.value_source(id) == Some(ValueSource::CommandLine);
    for id in live_only.iter().map(|s| s.to_string()).chain(
        super::args::profile_args()
            .iter()
            .map(|a| a.get_id().to_string()),
    ) {
        if given(&id) {
            anyhow::bail!(
                "--input: --{} applies to tracing, not to a capture (perf's own filters chose its events)",
                id.replace('_', "-")
            );
        }
    }
    // Rows already recorded are summarised by `report`, as stat would have at the end.
    if input != Path::new("-") && !is_perf_data(input) {
        let recording = ntprof_perf::sink::input::Input::open(input)
            .and_then(|mut i| i.recognise().map(|_| ()))
            .is_ok();
        if recording {
            anyhow::bail!(
                "--input {0}: a recording's rows (CSV or Parquet), not a perf.data; `ntprof-perf report {0}` prints their summary",
                input.display()
            );
        }
    }
    let name = (flags.value_source("profile") == Some(ValueSource::CommandLine))
        .then_some(a.sel.profile.as_str());
    let Prepared {
        cap,
        profile: p,
        mut plan,
    } = prepare(input, name, a.sel.tracefs.as_deref())?;
    let mut sink = StatSink::new(p.schema(), Box::new(std::io::stdout()), a.show.format());
    let described = cap.clock.describe();
    let mut by_dev = ByDevice::new(&mut sink, p.schema());
    let replayed = cap.replay(plan.stages.as_mut(), &mut by_dev)?;
    let never = by_dev.never_completed();
    let header = format!(
        "summary: profile {}, imported from {}",
        p.name(),
        input.display()
    );
    sink.finish(&header, &replayed.health)?;
    report_end(
        "stat done",
        &described,
        &replayed,
        p.name(),
        plan.stages.rows(),
        &never,
    );
    Ok(0)
}

/// Whether `path` is a perf.data (its magic), to import before reading it as rows: a
/// file, or a directory capture (`perf record --threads`) or one of its `data.N` by the
/// header file (which `import` then names).
pub fn is_perf_data(path: &Path) -> bool {
    use std::io::Read;
    let mut m = [0u8; 8];
    let file = if path.is_dir() {
        path.join("data")
    } else if ntprof_perf::import::is_ring_file(path) {
        path.with_file_name("data")
    } else {
        path.to_path_buf()
    };
    std::fs::File::open(file)
        .and_then(|mut f| f.read_exact(&mut m))
        .is_ok()
        && &m == b"PERFILE2"
}

/// A CSV of the rows of a perf.data, removed when dropped: `report` and `plot` read it
/// as they read a recording.
pub struct Imported(PathBuf);

impl Imported {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Imported {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `path` as rows: itself, or for a perf.data the rows imported into a temporary CSV.
pub fn rows_of(path: &Path) -> Result<Option<Imported>> {
    if !is_perf_data(path) {
        return Ok(None);
    }
    let out = std::env::temp_dir().join(format!("ntprof-import-{}.csv", std::process::id()));
    let out = Imported(out);
    let a = ImportArgs {
        file: path.to_path_buf(),
        profile: None,
        rows: Rows {
            output: vec![out.path().to_path_buf()],
            format: None,
            min_latency: None,
        },
        tracefs: None,
    };
    import_as(&a, Some("a temporary CSV, removed after"))?;
    Ok(Some(out))
}
