//! `record` and `stat`: plan, open the rings, run the pipeline, report the end.

use super::args::{RecordArgs, Selection, StatArgs};
use super::seconds;
use anyhow::{bail, Context, Result};
use ntprof_perf::correlate::block::{BlockConfig, BlockCorrelator};
use ntprof_perf::correlate::nvme::{CmdSelect, NvmeConfig, NvmeCorrelator, DEFAULT_LBA_SIZE};
use ntprof_perf::correlate::nvme_tcp::{Side, TcpConfig, TcpCorrelator};
use ntprof_perf::correlate::nvmet::NvmetCorrelator;
use ntprof_perf::correlate::{Correlator, ProfileInfo};
use ntprof_perf::decode::Decoder;
use ntprof_perf::device::{dev_filter, BlockDevice, SysBlock};
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
    /// nvme/nvmet command selection (--ctrl, --nsid, --qid, --admin).
    select: CmdSelect,
    /// nvme-tcp: --side and --sample.
    side: Side,
    sample_mask: u16,
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
        // A machine that is only an NVMe/TCP target has no host events.
        .filter(|s| {
            !(info.name == "nvme-tcp" && sel.side == "target" && s.req.system == "nvme_tcp")
        })
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
    if info.name != "nvme-tcp" && (sel.sample.is_some() || sel.side != "both") {
        bail!("--side and --sample apply to the nvme-tcp profile only");
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
        select: CmdSelect {
            ctrl: sel.ctrl,
            qid: sel.qid,
            nsid: sel.nsid,
            admin: sel.admin || sel.qid == Some(0),
        },
        side: Side::parse(&sel.side)
            .with_context(|| format!("--side {}: give host, target or both", sel.side))?,
        sample_mask: sample_mask(sel.sample)?,
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
            if p.select != CmdSelect::default() {
                bail!("--ctrl, --nsid, --qid and --admin select NVMe commands (profiles nvme, nvmet); the block profile selects with --device");
            }
            let devs: Vec<u32> = p.devices.iter().map(BlockDevice::kernel_dev).collect();
            let filter = dev_filter(&devs);
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
        "nvme" | "nvmet" => {
            if !p.devices.is_empty() {
                bail!(
                    "--device selects block devices for the block profile; the {} profile selects with --ctrl, --nsid and --qid",
                    p.info.name
                );
            }
            let names = SysBlock::default().names();
            let cfg = NvmeConfig {
                select: p.select.clone(),
                lba_sizes: SysBlock::default().logical_block_sizes(names.values()),
                // Host disks only: their block events give the time before the driver.
                disk_devs: names
                    .iter()
                    .filter(|(_, n)| n.starts_with("nvme"))
                    .map(|(d, n)| (n.clone(), *d))
                    .collect(),
                ..Default::default()
            };
            if p.info.name == "nvme" && cfg.disk_devs.is_empty() {
                eprintln!(
                    "ntprof-perf: no nvme disks in /sys/class/block yet: LBA size assumed {DEFAULT_LBA_SIZE} (see the lba_size column), no block-layer stages"
                );
            }
            // Block events only for the nvme disks known now: unfiltered they would
            // carry every disk's I/O through the rings for nothing.
            let disk_devs: Vec<u32> = cfg.disk_devs.values().copied().collect();
            let block_filter = dev_filter(&disk_devs);
            let status = profile::check(p.info, &p.tfs);
            let events: Vec<(&str, &str, Option<String>)> = status
                .iter()
                .filter(|s| s.missing.is_none())
                .filter_map(|s| {
                    let filter = match s.req.event {
                        "nvme_setup_cmd" | "nvmet_req_init" => p.select.cmd_filter(),
                        "nvme_complete_rq" | "nvmet_req_complete" => p.select.done_filter(),
                        _ => Some(block_filter.clone()?),
                    };
                    Some((s.req.system, s.req.event, filter))
                })
                .collect();
            if p.info.name == "nvme" {
                drive(&p, &events, NvmeCorrelator::new(cfg), out, csv_path)
            } else {
                drive(&p, &events, NvmetCorrelator::new(cfg), out, csv_path)
            }
        }
        "nvme-tcp" => run_nvme_tcp(&p, out, csv_path),
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

/// `--sample N` as the mask of command id bits that must be 0: the generation counter
/// (cid bits 12..15, bumped each time a tag is reused) changes with every command even
/// at queue depth 1, where the tag bits stay the same.
fn sample_mask(sample: Option<u32>) -> Result<u16> {
    match sample {
        None | Some(1) => Ok(0),
        Some(n @ (2 | 4 | 8 | 16)) => Ok(((n - 1) as u16) << 12),
        Some(n) => bail!(
            "--sample {n}: give 1, 2, 4, 8 or 16 (the command id has 4 generation bits to sample on)"
        ),
    }
}

/// The ftrace filter keeping 1 in N commands: `!(cid & 4096) && !(cid & 8192)` for
/// N = 4. One test per bit because the kernel's filter rejects `(cid & 12288) == 0`.
fn sample_filter(mask: u16) -> Option<String> {
    let parts: Vec<String> = (0..16)
        .filter(|b| mask & (1 << b) != 0)
        .map(|b| format!("!(cid & {})", 1u32 << b))
        .collect();
    (!parts.is_empty()).then(|| parts.join(" && "))
}

/// The nvme-tcp profile: events of the chosen side(s), filtered in the kernel by
/// queue, controller and sample bits; block events only for nvme disks.
fn run_nvme_tcp(p: &Plan, out: Output, csv_path: Option<PathBuf>) -> Result<i32> {
    if !p.devices.is_empty() {
        bail!("--device selects block devices for the block profile; the nvme-tcp profile selects with --ctrl and --qid");
    }
    let status = profile::check(p.info, &p.tfs);
    let have = |system: &str| {
        status
            .iter()
            .any(|s| s.req.system == system && s.missing.is_none())
    };
    let missing_of = |system: &str| -> Vec<String> {
        status
            .iter()
            .filter(|s| s.req.system == system)
            .filter_map(|s| {
                s.missing
                    .as_ref()
                    .map(|m| format!("  {}:{}: {m}", s.req.system, s.req.event))
            })
            .collect()
    };
    for (on, system) in [(p.side.host(), "nvme_tcp"), (p.side.target(), "nvmet_tcp")] {
        let m = missing_of(system);
        if on && !m.is_empty() && (p.side != Side::Both || system == "nvme_tcp" || have(system)) {
            bail!(
                "--side {}: this kernel lacks events the nvme-tcp profile needs:\n{}",
                p.side.as_str(),
                m.join("\n")
            );
        }
    }
    let target_on = p.side.target() && have("nvmet_tcp");
    if p.side == Side::Both && !target_on {
        eprintln!("ntprof-perf: no nvmet_tcp events on this kernel: host-side stages only (the target is elsewhere or unpatched)");
    }
    let mut ids: Vec<String> = Vec::new();
    match p.select.qid {
        Some(q) => ids.push(format!("qid == {q}")),
        None if !p.select.admin => ids.push("qid != 0".into()),
        None => {}
    }
    ids.extend(sample_filter(p.sample_mask));
    let target_filter = (!ids.is_empty()).then(|| ids.join(" && "));
    if let Some(c) = p.select.ctrl {
        ids.push(format!("ctrl_id == {c}"));
    }
    let host_filter = (!ids.is_empty()).then(|| ids.join(" && "));
    let names = SysBlock::default().names();
    let mut nvme_devs: Vec<u32> = names
        .iter()
        .filter(|(_, n)| n.starts_with("nvme"))
        .map(|(d, _)| *d)
        .collect();
    nvme_devs.sort_unstable();
    // Block events only when both ends are there and nvme disks exist now: unfiltered
    // they would carry every disk's I/O through the rings for nothing.
    let block = p.side.host()
        && have("block")
        && status
            .iter()
            .filter(|s| s.req.system == "block")
            .all(|s| s.missing.is_none())
        && !nvme_devs.is_empty();
    let block_filter = dev_filter(&nvme_devs);
    let events: Vec<(&str, &str, Option<String>)> = status
        .iter()
        .filter(|s| s.missing.is_none())
        .filter_map(|s| {
            let filter = match s.req.system {
                "nvme_tcp" if p.side.host() => host_filter.clone(),
                "nvmet_tcp" if target_on => target_filter.clone(),
                "block" if block => block_filter.clone(),
                _ => return None,
            };
            Some((s.req.system, s.req.event, filter))
        })
        .collect();
    let corr = TcpCorrelator::new(TcpConfig {
        side: if target_on { p.side } else { Side::Host },
        block,
        admin: p.select.admin,
        sample_mask: p.sample_mask,
        ..Default::default()
    });
    drive(p, &events, corr, out, csv_path)
}

#[cfg(test)]
mod tcp_tests {
    use super::*;

    #[test]
    fn sample_filters_test_one_generation_bit_each() {
        assert_eq!(sample_mask(None).unwrap(), 0);
        assert_eq!(sample_mask(Some(1)).unwrap(), 0);
        assert_eq!(sample_filter(0), None);
        assert_eq!(sample_mask(Some(2)).unwrap(), 0x1000);
        assert_eq!(sample_filter(0x1000).as_deref(), Some("!(cid & 4096)"));
        assert_eq!(sample_mask(Some(16)).unwrap(), 0xf000);
        assert_eq!(
            sample_filter(sample_mask(Some(4)).unwrap()).as_deref(),
            Some("!(cid & 4096) && !(cid & 8192)")
        );
        for bad in [0, 3, 32, 1000] {
            let e = sample_mask(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("--sample"), "{e}");
        }
    }
}
