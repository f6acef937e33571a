//! Selecting what to trace, for every profile that follows block devices or NVMe
//! commands: `--device` and the device filter, `--sample` on sectors, opening the block
//! events, and the NVMe selection flags.

use super::block_events::{BlockEvent, BlockLayout};
use crate::decode::{Layout, Mapped};
use crate::device::BlockDevice;
use crate::filter::Filter;
use crate::profile::{sample, PlanBuilder, PlanCtx, PlanError};
use std::ops::Range;

/// `--device`, for the profiles that select block devices.
pub fn device_arg() -> clap::Arg {
    clap::Arg::new("device")
        .short('d')
        .long("device")
        .value_name("DEV")
        .action(clap::ArgAction::Append)
        // `-d loop0,loop1` as iostat and perf take lists: a device name never has a comma.
        .value_delimiter(',')
        .help("block, bio: only this block device: a name (nvme0n1), a path (/dev/loop0) or major:minor. Several: repeat it or separate them with commas (-d loop0,loop1). A partition (nvme0n1p2): block keeps its disk's requests inside it, and the disk's flushes, which belong to no partition (as blktrace does); bio traces the whole disk. Applied in the kernel with a tracepoint filter. Default: all")
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
/// whole disk (request events name the disk), with a note saying so; `spans` says
/// whether the profile keeps only the requests inside it ([`disk_filter`]).
pub fn devices<K: 'static, L: Layout<K> + ?Sized + 'static>(
    ctx: &PlanCtx<'_>,
    b: &mut PlanBuilder<'_, K, L>,
    spans: bool,
) -> Result<Vec<BlockDevice>, PlanError> {
    let mut out = Vec::new();
    for d in ctx.flags::<String>("device") {
        let dev = ctx.sys.resolve(&d)?;
        let paths = ctx.sys.multipath_paths(&dev.name);
        if !paths.is_empty() {
            return Err(PlanError::Flag {
                flag: format!("--device {d}"),
                why: format!(
                    "{} is an NVMe multipath head: its bios become requests, and complete, on its hidden path disk(s) {}, whose device numbers sysfs does not give, so they cannot be selected; --profile block without --device traces the paths (rows named by number, 259:N), and --profile nvme-tcp or nvme follow each command to its path",
                    dev.name,
                    paths.join(", ")
                ),
            });
        }
        match (&dev.partition_of, &dev.span) {
            (Some(p), Some(s)) if spans => b.note(format!(
                "{p} is a partition of {}: tracing its requests at sectors {}..{} (and the disk's flushes, which carry no sector); rows name the disk",
                dev.name, s.start, s.end
            )),
            (Some(p), _) => b.note(format!(
                "{p} is a partition; block requests are reported against the whole disk, tracing {}",
                dev.name
            )),
            _ => {}
        }
        out.push(dev);
    }
    Ok(out)
}

/// The kernel filter keeping the block events of every nvme disk: nvme takes its
/// device numbers from the extended major (`BLOCK_EXT_MAJOR`, 259), and a multipath
/// path disk (`nvme1c1n1`, hidden) has one there that sysfs does not show, so the
/// disks are kept by major, not by a list of the numbers sysfs gives.
pub fn nvme_disks_filter() -> Filter {
    const EXT_MAJOR: u32 = 259;
    let first = crate::device::kernel_dev(EXT_MAJOR, 0);
    let next = crate::device::kernel_dev(EXT_MAJOR + 1, 0);
    Filter::within("dev", &(first.into()..next.into()))
}

/// The partitions among `devs`: (disk dev_t, its sectors), the partitions of a disk
/// also named whole left out (the disk takes all of its requests).
pub fn spans(devs: &[BlockDevice]) -> Vec<(u32, Range<u64>)> {
    let whole: Vec<u32> = (devs.iter().filter(|d| d.span.is_none()))
        .map(BlockDevice::kernel_dev)
        .collect();
    let mut v: Vec<(u32, Range<u64>)> = (devs.iter())
        .filter_map(|d| Some((d.kernel_dev(), d.span.clone()?)))
        .filter(|(dev, _)| !whole.contains(dev))
        .collect();
    v.sort_by_key(|(dev, s)| (*dev, s.start, s.end));
    v.dedup();
    v
}

/// Whether a request event at `sector` of disk `dev` is one of [`spans`]'s (`spans`
/// empty: every one is), as [`disk_filter`] decides in the kernel: the correlator
/// holds to it whatever feeds it.
pub fn in_spans(spans: &[(u32, Range<u64>)], dev: u32, sector: u64) -> bool {
    let mut of_dev = spans.iter().filter(|(d, _)| *d == dev).peekable();
    of_dev.peek().is_none() || no_sector(sector) || of_dev.any(|(_, s)| s.contains(&sector))
}

/// A request that carries no position (a flush: 0 when queued and issued, 2^64 - 1
/// when it completes) belongs to no partition and is kept with each.
fn no_sector(sector: u64) -> bool {
    sector == 0 || sector == u64::MAX
}

/// The kernel filter keeping the request events of `devs`: a disk's by its dev_t, a
/// partition's by its disk's and a sector inside it (or none, see [`no_sector`]), as
/// blktrace keeps a partition's LBA range.
pub fn disk_filter(devs: &[BlockDevice]) -> Option<Filter> {
    let spans = spans(devs);
    let mut disks: Vec<u32> = devs.iter().map(BlockDevice::kernel_dev).collect();
    disks.sort_unstable();
    disks.dedup();
    Filter::any(disks.into_iter().map(|dev| {
        let inside: Vec<Filter> = (spans.iter().filter(|(d, _)| *d == dev))
            .map(|(_, s)| Filter::within("sector", s))
            .collect();
        let at_dev = Filter::eq("dev", dev.into());
        if inside.is_empty() {
            return at_dev;
        }
        let placeless = [Filter::eq("sector", 0), Filter::eq("sector", u64::MAX)];
        Filter::All(vec![
            at_dev,
            Filter::Any(placeless.into_iter().chain(inside).collect()),
        ])
    }))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(minor: u32, span: Option<Range<u64>>) -> BlockDevice {
        BlockDevice {
            name: format!("loop{minor}"),
            major: 7,
            minor,
            partition_of: span.as_ref().map(|_| format!("loop{minor}p1")),
            span,
        }
    }

    #[test]
    fn a_partition_is_its_disk_at_its_sectors_and_a_whole_disk_takes_all() {
        let (d0, d1) = (
            crate::device::kernel_dev(7, 0),
            crate::device::kernel_dev(7, 1),
        );
        let p = [
            dev(0, Some(2048..4096)),
            dev(0, Some(8192..9000)),
            dev(1, None),
        ];
        assert_eq!(
            disk_filter(&p).unwrap().render(),
            format!(
                "(dev == {d0} && (sector == 0 || sector == {} || (sector >= 2048 && sector < 4096) || (sector >= 8192 && sector < 9000))) || dev == {d1}",
                u64::MAX
            )
        );
        let s = spans(&p);
        assert_eq!(s, [(d0, 2048..4096), (d0, 8192..9000)]);
        assert!(in_spans(&s, d0, 2048) && in_spans(&s, d0, 8999));
        assert!(!in_spans(&s, d0, 4096) && !in_spans(&s, d0, 2047));
        // Flushes carry no sector; another disk's events are not the spans' to judge.
        assert!(in_spans(&s, d0, 0) && in_spans(&s, d0, u64::MAX) && in_spans(&s, d1, 5));
        assert!(in_spans(&[], d0, 5));
        // The disk named whole as well: all of it.
        let both = [dev(0, Some(2048..4096)), dev(0, None)];
        assert!(spans(&both).is_empty());
        assert_eq!(disk_filter(&both).unwrap().render(), format!("dev == {d0}"));
        assert_eq!(disk_filter(&[]), None);
    }

    #[test]
    fn nvme_disks_are_the_extended_major() {
        let f = nvme_disks_filter().render();
        assert_eq!(
            f,
            format!("dev >= {} && dev < {}", 259u32 << 20, 260u32 << 20)
        );
    }
}
