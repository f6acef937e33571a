//! `record` and `stat`: plan, open the rings, run the pipeline, report the end.
//!
//! Generic over profiles: the profile named by `--profile` turns its flags and this
//! host into a [`Plan`]; everything here only opens what the plan lists and drives
//! its pipeline into a sink.

use super::args::{profile_args, RecordArgs, Selection, StatArgs};
use super::seconds;
use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use ntprof_perf::device::SysBlock;
use ntprof_perf::perf::{online_cpus, EventSpec, GroupConfig, PerfGroup};
use ntprof_perf::pipeline::{run_live, LiveOptions, RunError, StopReason};
use ntprof_perf::profile::{self, Plan, PlanCtx, Profile};
use ntprof_perf::sink::csv::CsvSink;
use ntprof_perf::sink::stat::StatSink;
use ntprof_perf::sink::time::WallClock;
use ntprof_perf::sink::Health;
use ntprof_perf::tracefs::Tracefs;
use std::path::{Path, PathBuf};
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
    duration: Option<Duration>,
    command: Vec<String>,
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
    if !sel.mmap_pages.is_power_of_two() {
        bail!(
            "--mmap-pages {}: the ring size must be a power of two (e.g. 64, 256, 1024)",
            sel.mmap_pages
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
    };
    let plan = p.plan(&ctx)?;
    for n in &plan.notes {
        eprintln!("ntprof-perf: {n}");
    }
    Ok(Ready {
        profile: p,
        plan,
        cpus: online_cpus()?,
        mmap_pages: sel.mmap_pages,
        duration,
        command: sel.command.clone(),
    })
}

/// A profile flag given on the command line that the chosen profile does not take.
fn refuse_foreign_flags(p: &dyn Profile, flags: &clap::ArgMatches) -> Result<()> {
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
    Csv(CsvSink),
    Stat(Box<StatSink>, Option<Duration>),
}

pub fn record(a: RecordArgs, flags: &clap::ArgMatches) -> Result<i32> {
    let r = plan(&a.sel, flags)?;
    let sink = CsvSink::create(a.output.as_deref(), r.profile.schema(), WallClock::now())?;
    run(r, Output::Csv(sink), a.output)
}

pub fn stat(a: StatArgs, flags: &clap::ArgMatches) -> Result<i32> {
    let interval = if a.interval == 0.0 {
        None
    } else {
        Some(seconds("interval", a.interval)?)
    };
    let r = plan(&a.sel, flags)?;
    let sink = StatSink::new(r.profile.schema(), Box::new(std::io::stdout()));
    run(r, Output::Stat(Box::new(sink), interval), None)
}

/// Open the plan's events, run until a stop condition, report.
fn run(mut r: Ready, mut out: Output, csv_path: Option<PathBuf>) -> Result<i32> {
    let specs: Vec<EventSpec> = r
        .plan
        .events
        .iter()
        .map(|e| EventSpec {
            name: e.name.clone(),
            tracefs_id: e.id,
            filter: e.filter.as_ref().map(|f| f.render()),
        })
        .collect();
    let mut cfg = GroupConfig::new(specs, r.cpus.clone());
    cfg.mmap_pages = r.mmap_pages;
    let mut group = PerfGroup::open(&cfg)?;

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    let pipe = r.plan.stages.as_mut();
    group.enable()?;
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
    let mut should_stop = || -> Result<Option<StopReason>, RunError> {
        if let Some(c) = child.as_mut() {
            if let Some(st) = c.try_wait().map_err(RunError::Command)? {
                return Ok(Some(StopReason::CommandExited(st.code())));
            }
        }
        Ok(stop.load(Ordering::Relaxed).then_some(StopReason::Signal))
    };
    let opts = LiveOptions {
        poll: Duration::from_millis(100),
        tick: match &out {
            Output::Stat(_, i) => *i,
            // Rows reach the file at least every second.
            Output::Csv(_) => Some(Duration::from_secs(1)),
        },
        deadline: r.duration.map(|d| started + d),
    };
    let t0 = Instant::now();
    let result = match &mut out {
        Output::Csv(sink) => run_live(&mut group, pipe, &opts, &mut should_stop, sink),
        Output::Stat(sink, _) => run_live(&mut group, pipe, &opts, &mut should_stop, sink.as_mut()),
    };
    // Whatever happened, the command must not outlive the run.
    let cmd_status = finish_child(child.as_mut());
    let (reason, health) = match result {
        Ok(v) => v,
        Err(e) => {
            // Rows already handed to the sink are flushed before reporting the error.
            let _ = finish_output(
                &mut out,
                &r.plan.stages.health(),
                t0,
                r.profile,
                r.plan.sample,
            );
            return Err(e.into());
        }
    };
    finish_output(&mut out, &health, t0, r.profile, r.plan.sample)?;
    let rows = match &out {
        Output::Csv(s) => format!(
            "{} I/Os written to {}",
            s.rows(),
            csv_path.map_or("standard output".to_string(), |p| p.display().to_string())
        ),
        Output::Stat(..) => "stat done".to_string(),
    };
    // Counts of a sampled run are 1/N of the traffic: say so where they are printed.
    let rows = match profile::sample::describe(r.plan.sample) {
        Some(s) => format!("{rows} ({s})"),
        None => rows,
    };
    eprintln!("ntprof-perf: {rows}; {}", health.line());
    if health.lost_total() > 0 {
        eprintln!(
            "ntprof-perf: warning: the kernel dropped {} samples because rings were full; rerun with a larger --mmap-pages (now {})",
            health.lost_total(),
            r.mmap_pages
        );
    }
    if reason == StopReason::Duration {
        eprintln!("ntprof-perf: --duration reached");
    }
    // The command's own status is the run's status, so scripts can wrap commands.
    let code = match cmd_status {
        None => 0,
        Some(Some(c)) => {
            eprintln!(
                "ntprof-perf: command `{}` exited with status {c}",
                r.command.join(" ")
            );
            c
        }
        Some(None) => {
            eprintln!(
                "ntprof-perf: command `{}` was killed by a signal",
                r.command.join(" ")
            );
            128
        }
    };
    Ok(code)
}

/// Reap the command (asking it to stop when tracing ended first). `None` when there was
/// no command; `Some(None)` when it died from a signal.
fn finish_child(child: Option<&mut Child>) -> Option<Option<i32>> {
    let c = child?;
    if let Ok(Some(st)) = c.try_wait() {
        return Some(st.code());
    }
    let pid = nix::unistd::Pid::from_raw(c.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    Some(c.wait().ok().and_then(|s| s.code()))
}

fn finish_output(
    out: &mut Output,
    health: &Health,
    t0: Instant,
    p: &dyn Profile,
    sample: u32,
) -> Result<()> {
    match out {
        Output::Csv(s) => s.finish()?,
        Output::Stat(s, _) => {
            let mut header = format!(
                "summary: profile {}, {:.1}s",
                p.name(),
                t0.elapsed().as_secs_f64()
            );
            if let Some(d) = profile::sample::describe(sample) {
                header.push_str(", ");
                header.push_str(&d);
            }
            s.finish(&header, health)?;
        }
    }
    Ok(())
}
