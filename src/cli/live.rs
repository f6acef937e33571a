//! `record` and `stat`: plan, open the rings, run the pipeline, report the end.
//!
//! Generic over profiles: the profile named by `--profile` turns its flags and this
//! host into a [`Plan`]; everything here only opens what the plan lists and drives
//! its pipeline into a sink.

use super::args::{
    profile_args, DeferSize, DutyFlag, Format, RecordArgs, Selection, ServeArgs, StatArgs,
    DEFER_DEFAULT, SERVE_DUTY, SERVE_MAX_RATE,
};
use super::seconds;
use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use nix::unistd::User;
use ntprof_perf::defer::{DeferStats, Deferred};
use ntprof_perf::device::SysBlock;
use ntprof_perf::perf::{online_cpus, EventSpec, GroupConfig, PerfGroup};
use ntprof_perf::pipeline::{run_live, LiveOptions, RecordSink, RunError, Stages, StopReason};
use ntprof_perf::profile::{self, Plan, PlanCtx, Profile};
use ntprof_perf::rate::Duty;
use ntprof_perf::serve::Server;
use ntprof_perf::sink::csv::CsvSink;
use ntprof_perf::sink::metrics::MetricsSink;
use ntprof_perf::sink::parquet::{FileInfo, ParquetSink};
use ntprof_perf::sink::recorder::{Recorder, RowWriter, StatusLine, Tee};
use ntprof_perf::sink::stat::StatSink;
use ntprof_perf::sink::time::WallClock;
use ntprof_perf::sink::Health;
use ntprof_perf::split::run_live_split;
use ntprof_perf::tracefs::Tracefs;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Everything checked and resolved before any event is opened.
struct Ready {
    profile: &'static dyn Profile,
    plan: Plan,
    cpus: Vec<u32>,
    mmap_pages: usize,
    realtime: Option<u8>,
    /// `--threads`: 2 reads and decodes on a thread of its own.
    threads: u8,
    duration: Option<Duration>,
    command: Vec<String>,
    max_rate: Option<u64>,
    duty: Option<Duty>,
    /// The rate the run starts at (`--sample`, 1 by default).
    start_sample: u32,
    /// `--defer`: the most memory to hold, bytes.
    defer: Option<usize>,
    /// `--defer SIZE`: the memory to fault in before tracing starts, bytes.
    defer_ready: usize,
}

fn plan(sel: &Selection, flags: &clap::ArgMatches) -> Result<Ready> {
    let p = profile::find(&sel.profile).with_context(|| {
        let names: Vec<&str> = profile::all().iter().map(|p| p.name()).collect();
        format!(
            "unknown profile `{}`; profiles: {} (see `ntprof-perf list`)",
            sel.profile,
            names.join(", ")
        )
    })?;
    refuse_foreign_flags(p, flags)?;
    if sel.threads > 1 && sel.max_rate.is_some() {
        bail!(
            "--threads {}: not with --max-rate (nor serve, which always has a budget): the rate controller changes the kernel filters and the correlator together, and with two threads they are on different ones; trace with one thread, or give a fixed --sample",
            sel.threads
        );
    }
    if sel.defer.is_some() {
        if sel.threads > 1 {
            bail!("--defer: not with --threads 2: a deferred run does its decoding after tracing, when one thread is all it needs");
        }
        if sel.max_rate.is_some() {
            bail!("--defer: not with --max-rate (nor serve): the rate controller steers the sampling by the I/Os it has correlated, which a deferred run correlates only at the end");
        }
    }
    let defer = sel.defer.map(defer_cap).transpose()?;
    let defer_ready = match sel.defer {
        Some(DeferSize::Bytes(b)) => defer_ready(b)?,
        _ => 0,
    };
    let cpus = online_cpus()?;
    let mmap_pages = sel
        .mmap_pages
        .unwrap_or_else(|| default_ring_pages(cpus.len()));
    if !mmap_pages.is_power_of_two() {
        bail!(
            "--mmap-pages {mmap_pages}: the ring size must be a power of two (e.g. 64, 256, 1024)"
        );
    }
    let duration = sel.duration.map(|d| seconds("duration", d)).transpose()?;
    if let Some(cmd) = sel.command.first() {
        check_command(cmd)?;
    }
    let tfs = Tracefs::find(sel.tracefs.as_deref())?;
    let ctx = PlanCtx {
        profile: p.name(),
        status: profile::check(p, &tfs),
        tfs: &tfs,
        args: flags,
        sys: SysBlock::default(),
        max_rate: sel.max_rate,
        capture: false,
    };
    ctx.check_stages()?;
    let mut plan = p.plan(&ctx)?;
    let start_sample = profile::sample::start_rate(&ctx)?;
    if sel.max_rate.is_some() {
        if plan.resample.is_none() || plan.stages.gate().is_none() {
            bail!(
                "--max-rate: the {} profile cannot change its sampling while running; give a fixed --sample",
                p.name()
            );
        }
        plan.sample = start_sample;
    }
    let duty = match sel.duty {
        Some(DutyFlag::Cycle(d)) => {
            if sel.max_rate.is_none() {
                bail!("--duty {d}: give --max-rate too (e.g. --max-rate 2000): the rate for each window is chosen under that budget");
            }
            Some(d)
        }
        Some(DutyFlag::Off) | None => None,
    };
    for n in &plan.notes {
        ntprof_perf::say!("ntprof-perf: {n}");
    }
    Ok(Ready {
        profile: p,
        plan,
        cpus,
        mmap_pages,
        realtime: sel.realtime,
        threads: sel.threads,
        duration,
        command: sel.command.clone(),
        max_rate: sel.max_rate,
        duty,
        start_sample,
        defer,
        defer_ready,
    })
}

/// `--defer`'s cap in bytes: as given, or 1 GiB and at most a quarter of the memory
/// available now.
fn defer_cap(d: DeferSize) -> Result<usize> {
    let bytes = match d {
        DeferSize::Bytes(b) => b,
        DeferSize::Auto => DEFER_DEFAULT.min(mem_available()? / 4),
    };
    usize::try_from(bytes).context("--defer: larger than this machine can address")
}

/// What `--defer SIZE` faults in before tracing starts: all of SIZE, but no more than
/// half the memory available now (a SIZE past what the machine has would otherwise
/// end the run before it starts; the rest is faulted in as the samples need it).
fn defer_ready(size: u64) -> Result<usize> {
    Ok(usize::try_from(size.min(mem_available()? / 2)).unwrap_or(usize::MAX))
}

/// `MemAvailable` of /proc/meminfo, bytes.
fn mem_available() -> Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .context("--defer: reading /proc/meminfo for the memory available")?;
    let kib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .context("--defer: no MemAvailable in /proc/meminfo; give a size (e.g. --defer 512M)")?;
    Ok(kib.saturating_mul(1024))
}

/// Ring pages per CPU by default: 32 MiB over the CPUs, 1 to 8 MiB each. A few CPUs
/// then get rings that hold a second of a busy device's samples, a large host no more
/// than 1 MiB per CPU.
fn default_ring_pages(cpus: usize) -> usize {
    let page = 4096;
    ((32 << 20) / cpus.max(1) / page)
        .clamp(256, 2048)
        .next_power_of_two()
        .min(2048)
}

/// A profile flag given on the command line that the chosen profile does not take.
pub(super) fn refuse_foreign_flags(p: &dyn Profile, flags: &clap::ArgMatches) -> Result<()> {
    let own: Vec<clap::Id> = p.args().iter().map(|a| a.get_id().clone()).collect();
    for a in profile_args() {
        let id = a.get_id();
        if own.contains(id) || flags.value_source(id.as_str()) != Some(ValueSource::CommandLine) {
            continue;
        }
        let takers: Vec<&str> = profile::all()
            .iter()
            .filter(|q| q.args().iter().any(|x| x.get_id() == id))
            .map(|q| q.name())
            .collect();
        bail!(
            "--{} does not apply to the {} profile (it is a flag of: {})",
            a.get_long().unwrap_or(id.as_str()),
            p.name(),
            takers.join(", ")
        );
    }
    Ok(())
}

/// Fail before tracing when the command cannot be run at all.
fn check_command(cmd: &str) -> Result<()> {
    let found = if cmd.contains('/') {
        Path::new(cmd).is_file()
    } else {
        std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
            .unwrap_or(false)
    };
    if !found {
        bail!("command `{cmd}` not found (not a file, and not in PATH)");
    }
    Ok(())
}

/// Where records go.
enum Output {
    Rows(Recorder),
    Stat(Box<StatSink>, Option<Duration>),
    /// `serve`: the metrics, the bound listener (served once privileges are dropped)
    /// and the user to run as.
    Metrics(Box<MetricsSink>, Option<Server>, String),
}

pub fn record(a: RecordArgs, flags: &clap::ArgMatches) -> Result<i32> {
    let r = plan(&a.sel, flags)?;
    let clock = WallClock::now();
    let schema = r.profile.schema();
    let info = || FileInfo::this_host(r.profile.schema(), r.plan.sample, clock);
    let (writer, to) = row_writer(&a.rows.output, a.rows.format, schema, clock, &info)?;
    let rec = Recorder::new(writer, a.rows.min_latency, StatusLine::on_stderr());
    run(r, Output::Rows(rec), to)
}

/// The sinks of `-o FILE…` (CSV, or Parquet by name or `--format`; standard output
/// without any), one writer for all, and where the rows go for the exit line.
pub(super) fn row_writer(
    output: &[std::path::PathBuf],
    format: Option<Format>,
    schema: &'static ntprof_perf::record::Schema,
    clock: WallClock,
    info: &dyn Fn() -> FileInfo,
) -> Result<(Box<dyn RowWriter>, RowsTo)> {
    let mut writers: Vec<Box<dyn RowWriter>> = Vec::new();
    for path in output {
        let f = match path.extension() {
            Some(e) if e.eq_ignore_ascii_case("parquet") => Format::Parquet,
            Some(e) if e.eq_ignore_ascii_case("csv") => Format::Csv,
            _ => format.unwrap_or(Format::Csv),
        };
        writers.push(match f {
            Format::Csv => Box::new(CsvSink::create(Some(path), schema, clock)?),
            Format::Parquet => Box::new(ParquetSink::create(path, schema, clock, &info())?),
        });
    }
    if writers.is_empty() {
        if format == Some(Format::Parquet) {
            bail!("--format parquet needs -o FILE (Parquet is not written to a pipe)");
        }
        writers.push(Box::new(CsvSink::create(None, schema, clock)?));
    }
    let to = if output.is_empty() {
        RowsTo(vec!["standard output".to_string()])
    } else {
        RowsTo(output.iter().map(|p| p.display().to_string()).collect())
    };
    let writer: Box<dyn RowWriter> = if writers.len() == 1 {
        writers.remove(0)
    } else {
        Box::new(Tee(writers))
    };
    Ok((writer, to))
}

/// Where `record`'s rows go, for the exit line: the outputs' names, in the order given
/// (joined by commas when shown).
#[derive(Debug, Clone, Default)]
pub(super) struct RowsTo(pub(super) Vec<String>);

impl std::fmt::Display for RowsTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

impl RowsTo {
    /// What the outputs hold of the `written` rows handed to them (`kept`, per output),
    /// said when one holds fewer: after a write that failed, the count handed over is
    /// not what the user has.
    pub(super) fn held(&self, kept: &[u64], written: u64) -> String {
        if kept.len() != self.0.len() || kept.iter().all(|&k| k == written) {
            return String::new();
        }
        if let [k] = kept {
            return format!(
                "; {k} of them are in it (the rest were lost with the write that failed)"
            );
        }
        let each: Vec<String> = (self.0.iter().zip(kept))
            .map(|(name, k)| format!("{name} {k}"))
            .collect();
        format!("; of them, the outputs hold: {}", each.join(", "))
    }
}

pub fn serve(mut a: ServeArgs, flags: &clap::ArgMatches) -> Result<i32> {
    a.sel.max_rate.get_or_insert(SERVE_MAX_RATE);
    a.sel.duty.get_or_insert_with(|| {
        let (on, period) = SERVE_DUTY;
        DutyFlag::Cycle(Duty::new(on, period).expect("the default duty is valid"))
    });
    let mut r = plan(&a.sel, flags)?;
    // Left on, it must never cost a busy host more than its budget, even in its first
    // second: it starts at the lowest rate and comes down to what the budget allows.
    if flags.value_source("sample") != Some(ValueSource::CommandLine) {
        r.start_sample = profile::sample::MAX_SAMPLE;
        r.plan.sample = r.start_sample;
    }
    // The user is checked before anything is opened.
    User::from_name(&a.user)
        .with_context(|| format!("--user {}", a.user))?
        .with_context(|| format!("--user {}: no such user", a.user))?;
    let server = Server::bind(&a.listen)?;
    let sink = MetricsSink::new(r.profile.schema());
    run(
        r,
        Output::Metrics(Box::new(sink), Some(server), a.user),
        RowsTo::default(),
    )
}

/// Leave root for `user` for good: no supplementary groups, its group and user ids,
/// no capabilities (a set-uid from root to another user clears them), and no way back
/// (`PR_SET_NO_NEW_PRIVS`). Checked in /proc afterwards.
fn drop_privileges(user: &str) -> Result<()> {
    use nix::unistd::{setgid, setgroups, setuid};
    let u = User::from_name(user)?.with_context(|| format!("--user {user}: no such user"))?;
    setgroups(&[u.gid]).context("setgroups")?;
    setgid(u.gid).context("setgid")?;
    setuid(u.uid).context("setuid")?;
    nix::sys::prctl::set_no_new_privs().context("PR_SET_NO_NEW_PRIVS")?;
    let status = std::fs::read_to_string("/proc/self/status")?;
    for cap in ["CapPrm:", "CapEff:", "CapAmb:"] {
        let v = status
            .lines()
            .find_map(|l| l.strip_prefix(cap))
            .map(str::trim)
            .unwrap_or("?");
        if !v.trim_start_matches('0').is_empty() {
            bail!(
                "after becoming {user}, {cap} is {v}, not 0: refusing to serve with capabilities"
            );
        }
    }
    Ok(())
}

pub fn stat(a: StatArgs, flags: &clap::ArgMatches) -> Result<i32> {
    if let Some(input) = &a.input {
        return super::import::stat(&a, input, flags);
    }
    let interval = if a.interval == 0.0 {
        None
    } else if a.sel.defer.is_some() {
        // A deferred run has no table until tracing stops: the summary is all it prints.
        if flags.value_source("interval") == Some(ValueSource::CommandLine) {
            bail!("--defer: no --interval tables (everything is correlated after tracing stops); stat --defer prints the summary only");
        }
        None
    } else {
        Some(seconds("interval", a.interval)?)
    };
    let r = plan(&a.sel, flags)?;
    let mut format = a.show.format();
    format.intervals = interval.is_some();
    let sink = StatSink::new(r.profile.schema(), Box::new(std::io::stdout()), format);
    run(r, Output::Stat(Box::new(sink), interval), RowsTo::default())
}

/// Open the plan's events, run until a stop condition, report.
/// `to` names where rows go, for the exit line.
fn run(mut r: Ready, mut out: Output, to: RowsTo) -> Result<i32> {
    // A --max-rate run opens each sampled event once per part of its sample.
    let parts = r
        .plan
        .resample
        .as_ref()
        .filter(|_| r.max_rate.is_some())
        .map(|s| s.parts());
    let (specs, levels): (Vec<EventSpec>, Vec<Option<u32>>) = match &parts {
        Some(parts) => parts
            .iter()
            .map(|p| {
                let e = &r.plan.events[p.event];
                let spec = EventSpec {
                    name: e.name.clone(),
                    tracefs_id: e.id,
                    filter: p.filter.as_ref().map(|f| f.render()),
                };
                (spec, p.level)
            })
            .unzip(),
        None => r
            .plan
            .events
            .iter()
            .map(|e| {
                let spec = EventSpec {
                    name: e.name.clone(),
                    tracefs_id: e.id,
                    filter: e.filter.as_ref().map(|f| f.render()),
                };
                (spec, None)
            })
            .unzip(),
    };
    let mut cfg = GroupConfig::new(specs, r.cpus.clone());
    cfg.mmap_pages = r.mmap_pages;
    // --max-rate turns the parts of its sample on and off while the run goes on.
    cfg.grouped = parts.is_none();
    let mut group = PerfGroup::open(&cfg)?;

    let stop = Arc::new(AtomicBool::new(false));
    // SIGHUP too: a closed terminal or a session end must flush every row like Ctrl-C.
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    if let Some(prio) = r.realtime {
        ntprof_perf::perf::set_realtime(prio).with_context(|| {
            format!(
                "--realtime {prio}: setting SCHED_FIFO for the reader (needs root or CAP_SYS_NICE)"
            )
        })?;
    }
    let pipe = r.plan.stages.as_mut();
    let mut rate = match (r.max_rate, r.plan.resample.take()) {
        (Some(max), Some(resample)) => Some(ntprof_perf::rate::RateControl::start(
            max,
            resample,
            levels,
            r.start_sample,
            r.duty,
            &mut group,
            pipe,
        )?),
        _ => {
            pipe.rate_from(0, r.plan.sample);
            None
        }
    };
    let mut deferred: Option<Deferred> = None;
    let pipe: &mut dyn Stages = match r.defer {
        Some(cap) => {
            let d = deferred.insert(Deferred::new(pipe, cap).on_finish(|n, bytes| {
                if n > 0 {
                    ntprof_perf::say!(
                        "{}ntprof-perf: tracing stopped; correlating the {n} samples held ({}, --defer)",
                        StatusLine::erase_on_stderr(),
                        mib(bytes)
                    );
                }
            }));
            let ready = d.ready_limit(r.defer_ready);
            if ready > 0 {
                // Said first: on a VM whose fresh memory is slow this takes seconds.
                ntprof_perf::say!(
                    "ntprof-perf: --defer: faulting in {} before tracing starts",
                    mib(ready)
                );
                d.make_ready(ready, &|| stop.load(Ordering::Relaxed));
            }
            d
        }
        None => pipe,
    };
    group.enable()?;
    if let Output::Metrics(sink, server, user) = &mut out {
        drop_privileges(user)?;
        if let Some(s) = server.take() {
            let addr = s.local_addr().map(|a| a.to_string()).unwrap_or_default();
            s.spawn(sink.registry())
                .context("starting the HTTP thread")?;
            // Said once it serves, as `user`: scripts wait for this line.
            ntprof_perf::say!("ntprof-perf: serving http://{addr}/metrics as {user}");
        }
    }
    let started = Instant::now();
    let mut child: Option<Child> = match r.command.split_first() {
        Some((prog, args)) => Some(
            Command::new(prog)
                .args(args)
                .spawn()
                .with_context(|| format!("starting `{prog}`"))?,
        ),
        None => None,
    };
    let has_command = child.is_some();
    let mut should_stop = || -> Result<Option<StopReason>, RunError> {
        if let Some(c) = child.as_mut() {
            if let Some(st) = c.try_wait().map_err(RunError::Command)? {
                return Ok(Some(StopReason::CommandExited(st.code())));
            }
        }
        Ok(stop.load(Ordering::Relaxed).then_some(StopReason::Signal))
    };
    let opts = LiveOptions {
        // Short rounds keep the windows in which a missing sample is known narrow.
        poll: Duration::from_millis(20),
        // A command's exit is seen at the next round, so with one the rounds keep
        // their pace; a reader left on (`serve`, `stat`, `record` until Ctrl-C) wakes
        // 5 times a second, not 50, while nothing happens.
        idle: match has_command {
            true => Duration::from_millis(20),
            false => Duration::from_millis(200),
        },
        tick: match &out {
            Output::Stat(_, i) => *i,
            Output::Metrics(..) => Some(Duration::from_secs(1)),
            // Rows reach the file at least every second.
            Output::Rows(_) => Some(Duration::from_secs(1)),
        },
        deadline: r.duration.map(|d| started + d),
        sample: r.plan.sample,
    };
    let t0 = Instant::now();
    let sink: &mut dyn RecordSink = match &mut out {
        Output::Rows(sink) => sink,
        Output::Stat(sink, _) => sink.as_mut(),
        Output::Metrics(sink, ..) => sink.as_mut(),
    };
    let result = match r.threads {
        1 => run_live(
            &mut group,
            pipe,
            &opts,
            &mut should_stop,
            sink,
            rate.as_mut(),
        ),
        _ => run_live_split(&mut group, pipe, &opts, &mut should_stop, sink),
    };
    let held = deferred.as_ref().map(|d| d.stats().clone());
    // The summary covers the time traced, not the correlating after it.
    let traced = t0
        .elapsed()
        .saturating_sub(held.as_ref().map_or(Duration::ZERO, |h| h.after_time));
    // The rate every I/O was sampled at, for the summary and the exit line; with
    // --max-rate it changed (from the rate it started at), and the counts' own line says
    // the rate in effect and how often it changed.
    let fixed_rate = match r.max_rate {
        Some(_) => 1,
        None => r.plan.sample,
    };
    // The output is finished before the command is waited for (below), so a command
    // that ignores SIGTERM cannot hold back a single row.
    let (reason, health) = match result {
        Ok(v) => v,
        Err(f) if broken_pipe(&f.error) => {
            // The reader went away (`record | head`): a normal end, not an error.
            let rows = match &mut out {
                Output::Rows(s) => {
                    // Erases the status line; the flush error (the pipe) is known.
                    let _ = s.finish(None);
                    s.written()
                }
                Output::Stat(..) | Output::Metrics(..) => 0,
            };
            ntprof_perf::say!(
                "ntprof-perf: output closed by its reader after {rows} rows; stopped"
            );
            finish_child(child.as_mut(), &stop);
            return Ok(0);
        }
        Err(f) => {
            // Rows already handed to the sink are flushed, with the counts as of the
            // error, before reporting it: a failed run still says what it saw and lost.
            let _ = finish_output(&mut out, &f.health, traced, r.profile, fixed_rate);
            let what = stopped(&out, &to, |n| format!("after {n} I/Os written to {to}"));
            ntprof_perf::say!("ntprof-perf: {what}; {}", f.health.line());
            finish_child(child.as_mut(), &stop);
            return Err(f.error.into());
        }
    };
    if let Err(e) = finish_output(&mut out, &health, traced, r.profile, fixed_rate) {
        // The last rows did not reach the file (a full disk at the last flush or
        // Parquet commit): the run's counts are still said, with the error after them.
        let what = stopped(&out, &to, |n| {
            format!("closing {to}, {n} I/Os handed to it")
        });
        ntprof_perf::say!("ntprof-perf: {what}; {}", health.line());
        finish_child(child.as_mut(), &stop);
        return Err(e);
    }
    // Whatever happened, the command must not outlive the run.
    let cmd_status = finish_child(child.as_mut(), &stop);
    let rows = match &out {
        Output::Rows(s) => s.summary(&to),
        Output::Stat(..) => "stat done".to_string(),
        Output::Metrics(..) => "serve done".to_string(),
    };
    // Counts of a sampled run are 1/N of the traffic: say so where they are printed.
    let rows = match profile::sample::describe(fixed_rate) {
        Some(s) => format!("{rows} ({s})"),
        None => rows,
    };
    if let (Some(h), Some(cap)) = (&held, r.defer) {
        ntprof_perf::say!("ntprof-perf: {}", deferred_line(h, cap));
    }
    ntprof_perf::say!("ntprof-perf: {rows}; {}", health.line());
    if health.lost > 0 {
        ntprof_perf::say!(
            "ntprof-perf: warning: {} samples were lost because rings were full; rerun with a larger --mmap-pages (now {}) or --realtime",
            health.lost, r.mmap_pages
        );
    }
    if health.dropped > 0 {
        ntprof_perf::say!(
            "ntprof-perf: warning: the kernel counted {} samples it never wrote, with no ring full and no LOST record ({}); the I/Os they cut are `dropped` rows; where several requests were in flight at one sector (flushes, a hot block), a completion can still go to its neighbour's request, swapped, never lost (docs/how-it-works.md)",
            health.dropped,
            health.dropped_per_cpu.text()
        );
    }
    if health.cpus_onlined > 0 {
        ntprof_perf::say!(
            "ntprof-perf: warning: {} CPUs came online while tracing and were traced from the next drain round on; their events before that were in no ring and no count, and the I/Os they cut are `incomplete` rows or unmatched completions",
            health.cpus_onlined
        );
    }
    if health.cpus_untraced > 0 {
        ntprof_perf::say!(
            "ntprof-perf: warning: {} CPUs came online while tracing and could not be opened (no right to any more: serve gives up root once its events are open): the I/O that ran there is not traced; restart to trace them",
            health.cpus_untraced
        );
    }
    if health.missing() > 0 {
        // What `stat` and `serve` summed up is as short as the rows would be.
        let unseen = match (health.ios_unseen(), health.starts) {
            (Some(n), Some(st)) => format!(
                "{n} I/Os that left nothing to place: the kernel counted them beginning ({}), and they are in no record and no unmatched completion",
                st.event
            ),
            _ => format!(
                "≈{} I/Os whose every event was missing",
                health.whole_ios_lost()
            ),
        };
        ntprof_perf::say!(
            "ntprof-perf: the missing samples cost {} I/Os seen in part (records `dropped`, or a completion unmatched) and {unseen}",
            health.lost_ios
        );
    }
    if reason == StopReason::Duration {
        ntprof_perf::say!("ntprof-perf: --duration reached");
    }
    // The command's own status is the run's status, so scripts can wrap commands.
    let cmd = r.command.join(" ");
    let code = match cmd_status {
        None => 0,
        Some(ChildEnd::Exited(c)) => {
            ntprof_perf::say!("ntprof-perf: command `{cmd}` exited with status {c}");
            c
        }
        // As a shell reports it: 128 + the signal's number.
        Some(ChildEnd::Killed(sig)) => {
            ntprof_perf::say!("ntprof-perf: command `{cmd}` was killed by signal {sig}");
            128 + sig
        }
        Some(ChildEnd::Abandoned) => {
            ntprof_perf::say!(
                "ntprof-perf: command `{cmd}` did not end after SIGTERM; killed it (SIGKILL)"
            );
            128 + libc::SIGKILL
        }
    };
    Ok(code)
}

/// Whether a run stopped because its output's reader closed the pipe.
fn broken_pipe(e: &RunError) -> bool {
    matches!(e, RunError::Sink(ntprof_perf::sink::SinkError::Write { source, .. })
        if source.kind() == std::io::ErrorKind::BrokenPipe)
}

/// How the command given after `--` ended.
enum ChildEnd {
    Exited(i32),
    Killed(i32),
    /// It outlived SIGTERM by [`CHILD_GRACE`], or a second signal came: SIGKILLed.
    Abandoned,
}

/// How long a command may take to exit after SIGTERM before it is killed.
const CHILD_GRACE: Duration = Duration::from_secs(5);

/// Reap the command, asking it to stop (SIGTERM) when tracing ended first. One that
/// ignores SIGTERM is killed after [`CHILD_GRACE`], or at once when another signal
/// reaches ntprof-perf (`stop` is set again). `None` when there was no command.
fn finish_child(child: Option<&mut Child>, stop: &AtomicBool) -> Option<ChildEnd> {
    use std::os::unix::process::ExitStatusExt;
    let c = child?;
    let end = |st: std::process::ExitStatus| match (st.code(), st.signal()) {
        (Some(code), _) => ChildEnd::Exited(code),
        (None, Some(sig)) => ChildEnd::Killed(sig),
        (None, None) => ChildEnd::Exited(128),
    };
    if let Ok(Some(st)) = c.try_wait() {
        return Some(end(st));
    }
    let pid = nix::unistd::Pid::from_raw(c.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    // The signal that ended the run has been seen; the next one is a second.
    stop.store(false, Ordering::Relaxed);
    let deadline = Instant::now() + CHILD_GRACE;
    loop {
        match c.try_wait() {
            Ok(Some(st)) => return Some(end(st)),
            Ok(None) if Instant::now() < deadline && !stop.load(Ordering::Relaxed) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = c.kill();
                let _ = c.wait();
                return Some(ChildEnd::Abandoned);
            }
        }
    }
}

/// The exit line's start when an error stopped the run; `rows` says where rows went
/// from the count of those written, and what the outputs hold of them follows.
fn stopped(out: &Output, to: &RowsTo, rows: impl Fn(u64) -> String) -> String {
    match out {
        Output::Rows(s) => format!(
            "stopped by an error {}{}",
            rows(s.written()),
            to.held(&s.kept(), s.written())
        ),
        Output::Stat(..) => "stat stopped by an error".to_string(),
        Output::Metrics(..) => "serve stopped by an error".to_string(),
    }
}

/// A size as the exit lines give it: MiB, or KiB and bytes where a tiny `--defer SIZE`
/// would otherwise read as "0.0 MiB".
fn mib(bytes: usize) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else if bytes >= 1 << 10 {
        format!("{:.1} KiB", bytes as f64 / f64::from(1 << 10))
    } else {
        format!("{bytes} bytes")
    }
}

/// What a `--defer` run held, and when its samples were correlated.
fn deferred_line(h: &DeferStats, cap: usize) -> String {
    let mut line = format!(
        "--defer: held {} at most; {} samples correlated after tracing, in {:.2} s",
        mib(h.peak),
        h.after,
        h.after_time.as_secs_f64()
    );
    if h.early > 0 {
        line.push_str(&format!(
            "; {} while tracing, past the cap of {} (a larger --defer SIZE holds more)",
            h.early,
            mib(cap)
        ));
    }
    if h.ready_before > 0 {
        let ms = h.ready_time.as_secs_f64() * 1e3;
        line.push_str(&format!(
            "; {} faulted in before tracing, in {ms:.0} ms ({:.2} ms per 2 MiB)",
            mib(h.ready_before * ntprof_perf::perf::HUGE_PAGE),
            ms / h.ready_before as f64
        ));
    }
    if h.prefaulted > 0 {
        let ms = h.prefault_cpu.as_secs_f64() * 1e3;
        let per = ms / h.prefaulted as f64;
        line.push_str(&format!(
            "; faulting in {} ahead took {ms:.0} ms of CPU at idle priority ({per:.2} ms per 2 MiB)",
            mib(h.prefaulted * ntprof_perf::perf::HUGE_PAGE),
        ));
        if per > SLOW_FRESH_MEMORY_MS {
            line.push_str(
                ": fresh memory is slow on this machine (a VM whose host takes freed memory \
                 back?), and that CPU is taken from the workload; ",
            );
            line.push_str(if h.ready_before > 0 {
                "a larger --defer SIZE faults more of it in before tracing starts"
            } else {
                "give --defer a SIZE, which is faulted in before tracing starts, or a live \
                 run may cost it less (docs/performance.md)"
            });
        }
    }
    line
}

/// Above this, faulting in 2 MiB of fresh memory is costlier than correlating the
/// samples it holds: measured 0.14 ms where the guest still held the memory, 3-4.5 ms
/// on a VM whose host took freed memory back (docs/performance.md, 2026-12-02).
const SLOW_FRESH_MEMORY_MS: f64 = 1.0;

fn finish_output(
    out: &mut Output,
    health: &Health,
    traced: Duration,
    p: &dyn Profile,
    sample: u32,
) -> Result<()> {
    match out {
        Output::Rows(s) => s.finish(Some(health))?,
        Output::Stat(s, _) => {
            let mut header = format!(
                "summary: profile {}, {:.1}s",
                p.name(),
                traced.as_secs_f64()
            );
            if let Some(d) = profile::sample::describe(sample) {
                header.push_str(", ");
                header.push_str(&d);
            }
            s.finish(&header, health)?;
        }
        Output::Metrics(s, ..) => s.health(health),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deferred_line_says_what_faulting_memory_in_cost_and_when_it_is_slow() {
        let stats = |prefaulted, ms| DeferStats {
            peak: 3 << 20,
            after: 1000,
            prefaulted,
            prefault_cpu: Duration::from_micros(ms),
            ..DeferStats::default()
        };
        // As measured where the guest still held the memory, and on a VM whose host
        // took it back (docs/performance.md, 2026-12-02).
        let quick = deferred_line(&stats(70, 70 * 140), 1 << 30);
        assert!(
            quick.contains("faulting in 140.0 MiB ahead took 10 ms of CPU at idle priority (0.14 ms per 2 MiB)")
                && !quick.contains("slow"),
            "{quick}"
        );
        let slow = deferred_line(&stats(70, 70 * 3990), 1 << 30);
        assert!(
            slow.contains("(3.99 ms per 2 MiB): fresh memory is slow on this machine"),
            "{slow}"
        );
        assert!(slow.contains("give --defer a SIZE"), "{slow}");
        // Nothing faulted ahead (a cap under 2 MiB, or the thread never ran): no cost.
        let none = deferred_line(&stats(0, 0), 1 << 20);
        assert!(
            !none.contains("faulting") && !none.contains("faulted"),
            "{none}"
        );
        // `--defer SIZE`: what was made ready before tracing, and in how long.
        let ready = DeferStats {
            ready_before: 128,
            ready_time: Duration::from_millis(737),
            ..stats(0, 0)
        };
        let ready = deferred_line(&ready, 256 << 20);
        assert!(
            ready.contains("256.0 MiB faulted in before tracing, in 737 ms (5.76 ms per 2 MiB)"),
            "{ready}"
        );
        // A tiny cap (a round or so held at a time) in a unit that reads, not "0.0 MiB".
        let early = |cap| {
            let h = DeferStats {
                peak: 0,
                early: 300,
                ..DeferStats::default()
            };
            deferred_line(&h, cap)
        };
        let tiny = early(4096);
        assert!(
            tiny.contains("held 0 bytes at most")
                && tiny.contains("300 while tracing, past the cap of 4.0 KiB (a larger"),
            "{tiny}"
        );
        let small = early(64 << 20);
        assert!(
            small.contains("past the cap of 64.0 MiB (a larger --defer SIZE holds more)"),
            "{small}"
        );
    }
}
