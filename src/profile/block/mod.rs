//! The block profile: block layer requests on any disk, queue (insert) → dispatch
//! (issue) → complete, with Q2D, D2C and Q2C per request.
//!
//! Also what other profiles take from the block layer: the event layouts
//! ([`events`]), `--device` ([`device_arg`], [`devices`]) and [`open_block`].

pub mod correlate;
pub mod events;
pub mod record;

use super::{sample, EventReq, Plan, PlanBuilder, PlanCtx, PlanError, Profile, BLOCK_HINT};
use crate::device::BlockDevice;
use crate::filter::Filter;
use crate::record::{Schema, Tabled};
use correlate::{BlockConfig, BlockCorrelator};
use events::{BlockEvent, BlockLayout};
use record::BlockRecord;

pub struct Block;

const EVENTS: &[EventReq] = &[
    EventReq {
        system: "block",
        event: "block_rq_insert",
        required: true,
        hint: "CONFIG_BLK_DEV_IO_TRACE / CONFIG_EVENT_TRACING (every distribution kernel has it)",
    },
    EventReq {
        system: "block",
        event: "block_rq_issue",
        required: true,
        hint: BLOCK_HINT,
    },
    EventReq {
        system: "block",
        event: "block_rq_complete",
        required: true,
        hint: BLOCK_HINT,
    },
    // Optional: tells a requeued request (driver busy) from a new one to the same sector.
    EventReq {
        system: "block",
        event: "block_rq_requeue",
        required: false,
        hint: BLOCK_HINT,
    },
    // Optional: a queued request the scheduler merged into another never issues, and
    // bios merged into a queued request have none of their own (a front merge moves
    // the request's start sector). With them, rows + merged = the bios submitted.
    EventReq {
        system: "block",
        event: "block_rq_merge",
        required: false,
        hint: BLOCK_HINT,
    },
    EventReq {
        system: "block",
        event: "block_bio_backmerge",
        required: false,
        hint: BLOCK_HINT,
    },
    EventReq {
        system: "block",
        event: "block_bio_frontmerge",
        required: false,
        hint: BLOCK_HINT,
    },
];

/// `--device`, for the profiles that select block devices.
pub fn device_arg() -> clap::Arg {
    clap::Arg::new("device")
        .short('d')
        .long("device")
        .value_name("DEV")
        .action(clap::ArgAction::Append)
        .help("block, bio: only this block device: a name (nvme0n1), a path (/dev/loop0) or major:minor. Repeat for several. Applied in the kernel with a tracepoint filter. Default: all")
}

/// The devices `--device` names, resolved through sysfs. A partition is traced as its
/// whole disk (request events name the disk), with a note saying so.
pub fn devices<K: 'static>(
    ctx: &PlanCtx<'_>,
    b: &mut PlanBuilder<'_, K>,
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

/// `--sample` on the start sector (`sector`; a remap's `old_sector`): the filter that
/// keeps 1 in `rate` I/Os of the `asked` devices, with the rate recorded in the plan.
pub fn sector_sample<K: 'static>(
    ctx: &PlanCtx<'_>,
    b: &mut PlanBuilder<'_, K>,
    rate: u32,
    asked: &[BlockDevice],
) -> Result<Option<Filter>, PlanError> {
    let names: Vec<String> = asked.iter().map(|d| d.name.clone()).collect();
    Ok(sector_sample_mask(ctx, b, rate, &names)?.and_then(|m| sample::filter("sector", m)))
}

/// The sector bits `--sample` tests (`None` without sampling); the default alignment
/// takes the logical block sizes of `disks` into account.
pub fn sector_sample_mask<K: 'static>(
    ctx: &PlanCtx<'_>,
    b: &mut PlanBuilder<'_, K>,
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
    wrap: fn(BlockEvent) -> K,
) -> Result<(), PlanError> {
    b.open("block", event, filter, |fmt| {
        let l = BlockLayout::for_event(fmt, event)?;
        Ok(move |raw: &[u8]| l.decode(raw).map(wrap))
    })
}

impl Profile for Block {
    fn name(&self) -> &'static str {
        "block"
    }

    fn about(&self) -> &'static str {
        "block layer requests on any disk: queue (insert) → dispatch (issue) → complete"
    }

    fn events(&self) -> &'static [EventReq] {
        EVENTS
    }

    fn schema(&self) -> &'static Schema {
        BlockRecord::table()
    }

    fn args(&self) -> Vec<clap::Arg> {
        vec![
            device_arg(),
            sample::sample_arg(),
            sample::sample_align_arg(),
        ]
    }

    fn plan(&self, ctx: &PlanCtx<'_>) -> Result<Plan, PlanError> {
        ctx.require(|_| true)?;
        let rate = sample::rate(ctx)?;
        let mut b = PlanBuilder::new(ctx.tfs);
        let asked = devices(ctx, &mut b)?;
        let devs: Vec<u32> = asked.iter().map(BlockDevice::kernel_dev).collect();
        let filter = Filter::and(dev_filter(&devs), sector_sample(ctx, &mut b, rate, &asked)?);
        for e in EVENTS.iter().filter(|e| ctx.has(e.system, e.event)) {
            open_block(&mut b, e.event, filter.clone(), |e| e)?;
        }
        Ok(b.build(BlockCorrelator::new(BlockConfig {
            devices: devs,
            names: ctx.sys.names(),
            ..Default::default()
        })))
    }
}
