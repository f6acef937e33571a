//! The block profile: block layer requests on any disk, queue (insert) → dispatch
//! (issue) → complete, with Q2D, D2C and Q2C per request.
//!
//! Also what other profiles take from the block layer: the event layouts
//! ([`events`]), `--device` ([`device_arg`], [`devices`]) and [`open_block`].

pub mod correlate;
pub mod record;

use super::{sample, EventReq, Need, Plan, PlanBuilder, PlanCtx, PlanError, Profile, BLOCK_HINT};
use crate::device::BlockDevice;
use crate::filter::Filter;
use crate::profile::shared::block_events::{BlockEvent, BlockLayout};
use crate::profile::shared::select::{
    device_args, devices, disk_filter, sector_sample_mask, spans,
};
use crate::profile::Descriptor;
use crate::record::Tabled;
use correlate::{BlockConfig, BlockCorrelator};
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

/// The queue time needs the insert; d2c only the issue and completion every row has.
/// On a device with a scheduler, or one the block layer cannot issue to directly, the
/// insert is one of three samples per I/O: `--stages d2c` leaves it out.
const NEEDS: &[Need] = &[
    Need {
        stage: "q2d",
        events: &["block_rq_insert"],
    },
    Need {
        stage: "q2c",
        events: &["block_rq_insert"],
    },
];

/// What this profile is, what it opens and what it writes.
static DESCRIPTOR: Descriptor = Descriptor {
    name: "block",
    about: "block layer requests on any disk: queue (insert) → dispatch (issue) → complete",
    events: EVENTS,
    schema: BlockRecord::table,
    args: device_args,
    needs: NEEDS,
};

impl Profile for Block {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn plan(&self, ctx: &PlanCtx<'_>) -> Result<Plan, PlanError> {
        ctx.require(|_| true)?;
        let rate = sample::rate(ctx)?;
        // Every event the block profile opens is a `BlockLayout`: decoded with no
        // dynamic call per sample.
        let mut b = PlanBuilder::<BlockEvent, BlockLayout>::direct(ctx.tfs);
        let asked = devices(ctx, &mut b, true)?;
        let devs: Vec<u32> = asked.iter().map(BlockDevice::kernel_dev).collect();
        let disks = disk_filter(&asked);
        let names: Vec<String> = asked.iter().map(|d| d.name.clone()).collect();
        let mask = sector_sample_mask(ctx, &mut b, rate, &names)?;
        let sampled = Filter::and(
            disks.clone(),
            mask.and_then(|m| sample::filter("sector", m)),
        );
        for e in EVENTS.iter().filter(|e| ctx.opens(e.system, e.event)) {
            // A front merge moves a request's start: seen whole, it tells the
            // correlator when that takes a request in or out of the sample.
            let filter = match e.event {
                "block_bio_frontmerge" => disks.clone(),
                _ => sampled.clone(),
            };
            b.open("block", e.event, filter, |fmt| {
                BlockLayout::for_event(fmt, e.event)
            })?;
        }
        let inserts = ctx.opens("block", "block_rq_insert");
        if !inserts {
            let why = if ctx.has("block", "block_rq_insert") {
                "is not traced (--stages)"
            } else {
                "is not in the capture"
            };
            b.note(format!(
                "block_rq_insert {why}: rows have d2c only, q2d and q2c are empty"
            ));
        }
        // Through a scheduler, a queued request merged into another is inserted and
        // never issued: without the merge it waits at its sector, the next I/O's issue
        // there takes its insert, and so on, the last one `incomplete` (a `perf record`
        // of insert, issue and complete only, through mq-deadline). Inferring the merge
        // from an issue that grew over it was measured and not kept: in a hot region
        // bios merged into that request overlap requests still queued on their own.
        if inserts && !ctx.opens("block", "block_rq_merge") {
            b.note(
                "block_rq_merge is not in the capture: where the scheduler merged a queued \
                 request into another, the later requests at its sector have q2d from the \
                 one before and the last is `incomplete` (`perf record -e \
                 block:block_rq_merge` traces the merges; `ntprof-perf list --perf-record \
                 block` prints the whole line)",
            );
        }
        Ok(b.build(BlockCorrelator::new(BlockConfig {
            devices: devs,
            spans: spans(&asked),
            names: ctx.sys.names(),
            inserts,
            sampled: rate > 1 || sample::dynamic(ctx),
            mask: mask.unwrap_or(0),
            ..Default::default()
        })))
    }
}
