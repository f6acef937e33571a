//! The nvme profile: every NVMe command on the host (PCIe or fabrics driver),
//! `nvme:nvme_setup_cmd` → `nvme:nvme_complete_rq`, joined with the block events of
//! the same request for the time before the driver.
//!
//! Also what the nvmet and nvme-tcp profiles share with it: the command vocabulary
//! ([`cmd`], [`events`]) and the command-selection flags ([`selection_args`]).

pub mod correlate;
pub mod record;
#[cfg(test)]
pub(crate) mod tests;

use super::{sample, EventReq, Need, Plan, PlanBuilder, PlanCtx, PlanError, Profile, BLOCK_HINT};
use crate::filter::Filter;
use crate::profile::shared::cmd::{NvmeConfig, DEFAULT_LBA_SIZE};
use crate::profile::shared::nvme_events as events;
use crate::profile::shared::select::nvme_disks_filter;
use crate::profile::shared::select::selection_args;
use crate::profile::Descriptor;
use crate::record::Tabled;
use correlate::NvmeCorrelator;
use record::NvmeRecord;

pub struct Nvme;

const HOST_HINT: &str =
    "CONFIG_BLK_DEV_NVME or CONFIG_NVME_FABRICS host driver loaded (modprobe nvme / nvme-tcp)";

const EVENTS: &[EventReq] = &[
    EventReq {
        system: "nvme",
        event: "nvme_setup_cmd",
        required: true,
        hint: HOST_HINT,
    },
    EventReq {
        system: "nvme",
        event: "nvme_complete_rq",
        required: true,
        hint: HOST_HINT,
    },
    // Optional: they only add blk_to_driver_ns and total_ns. block_rq_issue is not
    // opened: every nvme driver calls nvme_setup_cmd before blk_mq_start_request,
    // so the issue says nothing about the time before the driver.
    EventReq {
        system: "block",
        event: "block_bio_queue",
        required: false,
        hint: BLOCK_HINT,
    },
    EventReq {
        system: "block",
        event: "block_rq_insert",
        required: false,
        hint: BLOCK_HINT,
    },
    // Optional: checks which request a completion belongs to when the driver
    // reports a wrong command id (see `correlate::Held`).
    EventReq {
        system: "block",
        event: "block_rq_complete",
        required: false,
        hint: BLOCK_HINT,
    },
];

/// The time before the driver needs the block events; `--stages driver` leaves them out.
const NEEDS: &[Need] = &[
    Need {
        stage: "blk_to_driver",
        events: &["block_bio_queue", "block_rq_insert", "block_rq_complete"],
    },
    Need {
        stage: "total",
        events: &["block_bio_queue", "block_rq_insert", "block_rq_complete"],
    },
];

/// What this profile is, what it opens and what it writes.
static DESCRIPTOR: Descriptor = Descriptor {
    name: "nvme",
    about: "NVMe commands on the host (PCIe or fabrics): block layer → driver setup → completion",
    events: EVENTS,
    schema: NvmeRecord::table,
    args,
    needs: NEEDS,
};

/// The flags this profile adds to `record` and `stat`.
fn args() -> Vec<clap::Arg> {
    let mut v = selection_args();
    v.push(sample::sample_arg());
    v
}

impl Profile for Nvme {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn plan(&self, ctx: &PlanCtx<'_>) -> Result<Plan, PlanError> {
        ctx.require(|_| true)?;
        let rate = sample::rate(ctx)?;
        let mut cfg = NvmeConfig::from_ctx(ctx);
        let select = cfg.select.clone();
        // Host disks only: their block events give the time before the driver.
        cfg.disk_devs = ctx
            .sys
            .names()
            .into_iter()
            .filter(|(_, n)| n.starts_with("nvme"))
            .map(|(d, n)| (n, d))
            .collect();
        let mut b = PlanBuilder::new(ctx.tfs);
        b.sample(rate);
        if cfg.disk_devs.is_empty() {
            b.note(format!(
                "no nvme disks in /sys/class/block yet: LBA size assumed {DEFAULT_LBA_SIZE} (see the lba_size column), no block-layer stages"
            ));
        } else if rate > 1 {
            // Block events carry no command id: sampled by it, they would all still
            // be written (the cost sampling removes) and mostly join nothing.
            b.note(format!(
                "{}: block events are not traced (they carry no command id to sample by): no blk_to_driver_ns, total_ns",
                sample::flag_name(ctx, rate)
            ));
            cfg.disk_devs.clear();
        } else if !ctx.wants("block_rq_insert") {
            b.note("--stages: block events are not traced: no blk_to_driver_ns, total_ns");
            cfg.disk_devs.clear();
        }
        let sampled = sample::filter("cid", sample::cid_mask(rate).into());
        sample::cid_sampler(ctx, &mut b);
        // Block events only when nvme disks are known now, and only theirs: unfiltered
        // they would carry every disk's I/O through the rings for nothing. By major, so
        // that the multipath path disks, which sysfs gives no number for, are in.
        let block_filter = (!cfg.disk_devs.is_empty()).then(nvme_disks_filter);
        for e in EVENTS.iter().filter(|e| ctx.has(e.system, e.event)) {
            let filter = match e.event {
                "nvme_setup_cmd" => Filter::and(select.cmd_filter(), sampled.clone()),
                "nvme_complete_rq" => Filter::and(select.done_filter(), sampled.clone()),
                // No known disk: no block events at all.
                _ => match &block_filter {
                    Some(f) => Some(f.clone()),
                    None => continue,
                },
            };
            b.open_boxed(e.system, e.event, filter, |fmt| {
                events::layout(fmt, e.system, e.event)
            })?;
        }
        Ok(b.build(NvmeCorrelator::new(cfg)))
    }
}
