//! `record` and `stat`: plan, open the rings, run the pipeline, report the end.

use super::args::{RecordArgs, Selection, StatArgs};
use super::seconds;
use anyhow::{bail, Context, Result};
use ntprof_perf::correlate::block::{BlockConfig, BlockCorrelator};
use ntprof_perf::correlate::{Correlator, ProfileInfo};
use ntprof_perf::decode::Decoder;
use ntprof_perf::device::{BlockDevice, SysBlock};
use ntprof_perf::perf::{online_cpus, EventSpec, GroupConfig, PerfGroup};
use ntprof_perf::pipeline::{run_live, LiveOptions, Pipeline, RunError, StopReason};
use ntprof_perf::profile;
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
struct Plan {
    info: &'static ProfileInfo,
    tfs: Tracefs,
    devices: Vec<BlockDevice>,
    cpus: Vec<u32>,
    mmap_pages: usize,
    duration: Option<Duration>,
    command: Vec<String>,
}

fn plan(sel: &Selection) -> Result<Plan> {
    let info = profile::find(&sel.profile).with_context(|| {
        let names: Vec<&str> = profile::all().iter().map(|p| p.name).collect();
        format!(
            "unknown profile `{}`; profiles: {} (see `ntprof-perf list`)",
            sel.profile,
            names.join(", ")
        )
    })?;
    let tfs = Tracefs::find(sel.tracefs.as_deref())?;
    let status = profile::check(info, &tfs);
    let missing: Vec<String> = status
        .iter()
        .filter(|s| s.req.required)
        .filter_map(|s| {
            s.missing
                .as_ref()
                .map(|why| format!("  {}:{}: {why}", s.req.system, s.req.event))
        })
        .collect();
    if !missing.is_empty() {
        bail!(
            "profile `{}` cannot run on this kernel ({}); missing events:\n{}",
            info.name,
            tfs.root().display(),
            missing.join("\n")
        );
    }
    let sys = SysBlock::default();
    let mut devices = Vec::new();
    for d in &sel.devices {
        let dev = sys.resolve(d)?;
        if let Some(p) = &dev.partition_of {
            eprintln!(
                "ntprof-perf: {p} is a partition; block requests are reported against the whole disk, tracing {}",
                dev.name
            );
        }
        devices.push(dev);
    }
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
    Ok(Plan {
        info,
        tfs,
        devices,
        cpus: online_cpus()?,
        mmap_pages: sel.mmap_pages,
        duration,
        command: sel.command.clone(),
    })
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
    Csv(Box<CsvSink>),
    Stat(StatSink, Option<Duration>),
}

pub fn record(a: RecordArgs) -> Result<i32> {
    let p = plan(&a.sel)?;
    let sink = CsvSink::create(a.output.as_deref(), p.info, WallClock::now())?;
    run(p, Output::Csv(Box::new(sink)), a.output)
}

pub fn stat(a: StatArgs) -> Result<i32> {
    let p = plan(&a.sel)?;
    let interval = if a.interval == 0.0 {
        None
    } else {
        Some(seconds("interval", a.interval)?)
    };
    let sink = StatSink::new(p.info, Box::new(std::io::stdout()));
    run(p, Output::Stat(sink, interval), None)
}

fn run(p: Plan, out: Output, csv_path: Option<PathBuf>) -> Result<i32> {
    match p.info.name {
        "block" => {
            let devs: Vec<u32> = p.devices.iter().map(BlockDevice::kernel_dev).collect();
            let filter = (!devs.is_empty()).then(|| {
                devs.iter()
                    .map(|d| format!("dev == {d}"))
                    .collect::<Vec<_>>()
                    .join(" || ")
            });
            let corr = BlockCorrelator::new(BlockConfig {
                devices: devs,
                names: SysBlock::default().names(),
                ..Default::default()
            });
            let events: Vec<(&str, &str, Option<String>)> = p
                .info
                .events
                .iter()
                .map(|e| (e.system, e.event, filter.clone()))
                .collect();
            drive(&p, &events, corr, out, csv_path)
        }
        other => bail!("profile `{other}` has no live driver"),
    }
}

/// Bind layouts, open rings, run until a stop condition, report.
fn drive<C: Correlator>(
    p: &Plan,
    events: &[(&str, &str, Option<String>)],
    corr: C,
    mut out: Output,
    csv_path: Option<PathBuf>,
) -> Result<i32> {
    let mut decoder = Decoder::new();
    let mut specs = Vec::new();
    for (system, event, filter) in events {
        let bound = decoder.add(&p.tfs, system, event)?;
        specs.push(EventSpec {
            name: bound.name,
            tracefs_id: bound.id,
            filter: filter.clone(),
        });
    }
    let mut cfg = GroupConfig::new(specs, p.cpus.clone());
    cfg.mmap_pages = p.mmap_pages;
    let mut group = PerfGroup::open(&cfg)?;

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .context("installing signal handlers")?;
    }
    let mut pipe = Pipeline::new(decoder, corr);
    group.enable()?;
    let started = Instant::now();
    let mut child: Option<Child> = match p.command.split_first() {
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
            Output::Csv(_) => None,
        },
        deadline: p.duration.map(|d| started + d),
    };
    let t0 = Instant::now();
    let result = match &mut out {
        Output::Csv(sink) => run_live(
            &mut group,
            &mut pipe,
            &opts,
            &mut should_stop,
            sink.as_mut(),
        ),
        Output::Stat(sink, _) => run_live(&mut group, &mut pipe, &opts, &mut should_stop, sink),
    };
    // Whatever happened, the command must not outlive the run.
    let cmd_status = finish_child(child.as_mut());
    let (reason, health) = match result {
        Ok(v) => v,
        Err(e) => {
            // Rows already handed to the sink are flushed before reporting the error.
            let _ = finish_output(&mut out, &pipe.health(), t0, p);
            return Err(e.into());
        }
    };
    finish_output(&mut out, &health, t0, p)?;
    let rows = match &out {
        Output::Csv(s) => format!(
            "{} I/Os written to {}",
            s.rows(),
            csv_path.map_or("standard output".to_string(), |p| p.display().to_string())
        ),
        Output::Stat(..) => "stat done".to_string(),
    };
    eprintln!("ntprof-perf: {rows}; {}", health.line());
    if health.lost_total() > 0 {
        eprintln!(
            "ntprof-perf: warning: the kernel dropped {} samples because rings were full; rerun with a larger --mmap-pages (now {})",
            health.lost_total(),
            p.mmap_pages
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
                p.command.join(" ")
            );
            c
        }
        Some(None) => {
            eprintln!(
                "ntprof-perf: command `{}` was killed by a signal",
                p.command.join(" ")
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

fn finish_output(out: &mut Output, health: &Health, t0: Instant, p: &Plan) -> Result<()> {
    match out {
        Output::Csv(s) => s.finish()?,
        Output::Stat(s, _) => {
            let header = format!(
                "summary: profile {}, {:.1}s",
                p.info.name,
                t0.elapsed().as_secs_f64()
            );
            s.finish(&header, health)?;
        }
    }
    Ok(())
}
