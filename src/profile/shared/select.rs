//! Selecting what to trace, for every profile that follows block devices or NVMe
//! commands: `--device` and the device filter, `--sample` on sectors, opening the block
//! events, and the NVMe selection flags.

use super::block_events::{BlockEvent, BlockLayout};
use crate::decode::{Layout, Mapped};
use crate::device::BlockDevice;
use crate::filter::Filter;
use crate::profile::{sample, PlanBuilder, PlanCtx, PlanError};

/// `--device`, for the profiles that select block devices.
pub fn device_arg() -> clap::Arg {
    clap::Arg::new("device")
        .short('d')
        .long("device")
        .value_name("DEV")
        .action(clap::ArgAction::Append)
        // `-d loop0,loop1` as iostat and perf take lists: a device name never has a comma.
        .value_delimiter(',')
        .help("block, bio: only this block device: a name (nvme0n1), a path (/dev/loop0) or major:minor. Several: repeat it or separate them with commas (-d loop0,loop1). Applied in the kernel with a tracepoint filter. Default: all")
}

/// The flags of the profiles that follow block devices (block, bio): `--device` and
/// in-kernel sampling.
pub fn device_args() -> Vec<clap::Arg> {
    vec![
        device_arg(),
        sample::sample_arg(),
        sample::sample_align_arg(),
    ]
}

/// The devices `--device` names, resolved through sysfs. A partition is traced as its
/// whole disk (request events name the disk), with a note saying so.
pub fn devices<K: 'static, L: Layout<K> + ?Sized + 'static>(
    ctx: &PlanCtx<'_>,
    b: &mut PlanBuilder<'_, K, L>,
) -> Result<Vec<BlockDevice>, PlanError> {
    let mut out = Vec::new();
    for d in ctx.flags::<String>("device") {
        let dev = ctx.sys.resolve(&d)?;
        if let Some(p) = &dev.partition_of {
            b.note(format!(
                "{p} is a partition; block requests are reported against the whole disk, tracing {}",
                dev.name
            ));
        }
        out.push(dev);
    }
    Ok(out)
}

/// The kernel filter keeping the block events of these devices (kernel dev_t values).
pub fn dev_filter(devs: &[u32]) -> Option<Filter> {
    let v: Vec<u64> = devs.iter().map(|&d| d as u64).collect();
    Filter::one_of("dev", &v)
}

/// The sector bits `--sample` tests (`None` without sampling); the default alignment
/// takes the logical block sizes of `disks` into account.
pub fn sector_sample_mask<K: 'static, L: Layout<K> + ?Sized + 'static>(
    ctx: &PlanCtx<'_>,
    b: &mut PlanBuilder<'_, K, L>,
    rate: u32,
    disks: &[String],
) -> Result<Option<u64>, PlanError> {
    let lbs = ctx.sys.logical_block_sizes(disks);
    let align = sample::align(ctx, lbs.into_values())?;
    b.sample(rate);
    if rate == 1 {
        return Ok(None);
    }
    let mask = sample::sector_mask(rate, align);
    if sample::dynamic(ctx) {
        b.sampler(&["sector", "old_sector"], move |n| {
            sample::sector_mask(n, align)
        });
        return Ok(Some(mask));
    }
    b.note(format!(
        "--sample {rate}: keeping I/Os whose start sector has bits {:#x} clear ({align}-byte alignment; see --sample-align)",
        mask
    ));
    Ok(Some(mask))
}

/// Open `block:<event>`, decoding it into the profile's event type through `wrap`.
pub fn open_block<K: 'static>(
    b: &mut PlanBuilder<'_, K>,
    event: &str,
    filter: Option<Filter>,
    // A type, not a `fn` pointer: the wrapping is inlined into the sample's one call.
    wrap: impl Fn(BlockEvent) -> K + Copy + Send + Sync + 'static,
) -> Result<(), PlanError> {
    b.open("block", event, filter, |fmt| {
        Ok(Mapped::new(BlockLayout::for_event(fmt, event)?, wrap))
    })
}

/// `--ctrl`, `--nsid`, `--qid`, `--admin`: the flags that select NVMe commands, for
/// every profile that follows them (the same definition in each).
pub fn selection_args() -> Vec<clap::Arg> {
    use clap::{value_parser, Arg, ArgAction};
    vec![
        Arg::new("ctrl")
            .long("ctrl")
            .value_name("N")
            .value_parser(value_parser!(u32))
            .help("nvme, nvmet, nvme-tcp: only this controller (host: N of nvmeN; target: cntlid). Applied in the kernel with a tracepoint filter"),
        Arg::new("nsid")
            .long("nsid")
            .value_name("N")
            .value_parser(value_parser!(u32))
            .help("nvme, nvmet: only this namespace id"),
        Arg::new("qid")
            .long("qid")
            .value_name("N")
            .value_parser(value_parser!(u32))
            .help("nvme, nvmet, nvme-tcp: only this queue id (0 is the admin queue)"),
        Arg::new("admin")
            .long("admin")
            .action(ArgAction::SetTrue)
            .help("nvme, nvmet, nvme-tcp: also trace admin queue (qid 0) commands, skipped by default"),
    ]
}
