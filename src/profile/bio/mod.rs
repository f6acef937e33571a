//! The bio profile: bio-level latency of stacked and bio-based devices
//! (device-mapper: LVM, dm-crypt; md RAID; zram), `block:block_bio_queue` →
//! `block:block_bio_complete`, with `block:block_bio_remap` naming the device each
//! bio went to, so a row on `dm-0` says which disk served it.
//!
//! Only bio-based devices complete bios in the trace (a request-based disk's bios
//! complete inside its requests: the block profile's rows), so this profile traces
//! the bio-based devices present at start, or those `--device` names.

pub mod correlate;
pub mod events;

use super::{sample, EventReq, Plan, PlanBuilder, PlanCtx, PlanError, Profile, BLOCK_HINT};
use crate::device::BlockDevice;
use crate::filter::Filter;
use crate::profile::shared::select::{device_args, devices, sector_sample_mask};
use crate::profile::Descriptor;
use crate::record::Tabled;
use correlate::{BioConfig, BioCorrelator, BioRecord};
use std::collections::HashMap;
use std::path::Path;

pub struct Bio;

const EVENTS: &[EventReq] = &[
    EventReq {
        system: "block",
        event: "block_bio_queue",
        required: true,
        hint: BLOCK_HINT,
    },
    EventReq {
        system: "block",
        event: "block_bio_complete",
        required: true,
        hint: BLOCK_HINT,
    },
    // Optional: names the device below; without it rows have no target.
    EventReq {
        system: "block",
        event: "block_bio_remap",
        required: false,
        hint: BLOCK_HINT,
    },
];

/// Whether a disk completes bios itself (no blk-mq request queue: no `mq` in sysfs).
fn bio_based(name: &str) -> bool {
    let dir = Path::new("/sys/class/block").join(name);
    dir.is_dir() && !dir.join("mq").exists()
}

/// What is said of the NVMe multipath heads left out.
fn mpath_heads(heads: &[&str]) -> String {
    format!(
        "the NVMe multipath heads {} (their bios complete on hidden path disks: --profile nvme-tcp or nvme follow their commands)",
        heads.join(", ")
    )
}

/// What this profile is, what it opens and what it writes.
static DESCRIPTOR: Descriptor = Descriptor {
    name: "bio",
    about:
        "bios of stacked and bio-based devices (dm, md, zram): queue → complete, and the disk below",
    events: EVENTS,
    schema: BioRecord::table,
    args: device_args,
    needs: &[],
};

impl Profile for Bio {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn plan(&self, ctx: &PlanCtx<'_>) -> Result<Plan, PlanError> {
        ctx.require(|_| true)?;
        let rate = sample::rate(ctx)?;
        let mut b = PlanBuilder::new(ctx.tfs);
        let names = ctx.sys.names();
        let asked = devices(ctx, &mut b, false)?;
        // An NVMe multipath head is bio-based, but its bios complete on its hidden path
        // disk, whose device number sysfs does not give: left out, and said so.
        let mut heads: Vec<&str> = Vec::new();
        let devs: Vec<u32> = if asked.is_empty() {
            let mut v: Vec<u32> = Vec::new();
            for (d, n) in names.iter().filter(|(_, n)| bio_based(n)) {
                if ctx.sys.multipath_paths(n).is_empty() {
                    v.push(*d);
                } else {
                    heads.push(n);
                }
            }
            v.sort_unstable();
            heads.sort_unstable();
            v
        } else {
            if let Some(d) = asked.iter().find(|d| !bio_based(&d.name)) {
                return Err(PlanError::Flag {
                    flag: format!("--device {}", d.name),
                    why: "a request-based disk: the kernel traces its completions per request, not per bio; use --profile block for it, or name the stacked device above it (dm-0, md0)".into(),
                });
            }
            asked.iter().map(BlockDevice::kernel_dev).collect()
        };
        if !heads.is_empty() && !devs.is_empty() {
            b.note(format!("not tracing {}", mpath_heads(&heads)));
        }
        // A capture's events are what perf recorded, of devices this host may not have
        // (another host's, or a device-mapper stack torn down since): every device in
        // it is a row's, and clones below a remap are followed as ever.
        if devs.is_empty() && !ctx.capture {
            return Err(PlanError::Flag {
                flag: "--profile bio".into(),
                why: format!(
                    "no bio-based block device (device-mapper, md, zram) on this host now{}; for disks use --profile block",
                    if heads.is_empty() { String::new() } else { format!(" but {}", mpath_heads(&heads)) }
                ),
            });
        }
        // With --device, the bio-based devices below the asked ones are traced too, so a
        // bio is followed down the whole stack to the disk at its bottom; their own bios
        // are not rows. Sampling tests the sector a bio had on the asked device.
        let lower: Vec<u32> = if asked.is_empty() {
            Vec::new()
        } else {
            let by_name: HashMap<&str, u32> = names.iter().map(|(d, n)| (n.as_str(), *d)).collect();
            let mut v: Vec<u32> = asked
                .iter()
                .flat_map(|d| ctx.sys.below(&d.name))
                .filter(|n| bio_based(n))
                .filter_map(|n| by_name.get(n.as_str()).copied())
                .filter(|d| !devs.contains(d))
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        if !lower.is_empty() {
            let below: Vec<&str> = lower
                .iter()
                .filter_map(|d| names.get(d).map(String::as_str))
                .collect();
            b.note(format!(
                "following bios down through {} to the disk below (their own bios are not rows)",
                below.join(", ")
            ));
        }
        let v: Vec<u64> = devs.iter().map(|&d| d as u64).collect();
        let w: Vec<u64> = lower.iter().map(|&d| d as u64).collect();
        let traced: Vec<String> = devs.iter().filter_map(|d| names.get(d).cloned()).collect();
        let mask = sector_sample_mask(ctx, &mut b, rate, &traced)?;
        for e in EVENTS.iter().filter(|e| ctx.has(e.system, e.event)) {
            // A remap leaves the traced device: it is selected by where it came from,
            // and sampled by the sector it had there.
            let (field, sector) = if e.event == "block_bio_remap" {
                ("old_dev", "old_sector")
            } else {
                ("dev", "sector")
            };
            let asked_part = Filter::and(
                Filter::one_of(field, &v),
                mask.and_then(|m| sample::filter(sector, m)),
            );
            let filter = match (asked_part, Filter::one_of(field, &w)) {
                (a, None) => a,
                (Some(a), Some(l)) => Some(Filter::Any(vec![a, l])),
                (None, Some(_)) => None,
            };
            b.open_boxed(e.system, e.event, filter, |fmt| {
                events::layout(fmt, e.system, e.event)
            })?;
        }
        Ok(b.build(BioCorrelator::new(BioConfig {
            names,
            only: if lower.is_empty() { Vec::new() } else { devs },
            ..Default::default()
        })))
    }
}
