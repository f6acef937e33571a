//! The nvmet profile: every command in an NVMe target (nvmet, any transport),
//! `nvmet:nvmet_req_init` → `nvmet:nvmet_req_complete`, joined by (cntlid, qid, cid).

pub mod correlate;
pub mod events;

use super::{sample, EventReq, Plan, PlanBuilder, PlanCtx, PlanError, Profile};
use crate::filter::Filter;
use crate::profile::shared::cmd::NvmeConfig;
use crate::profile::shared::select::selection_args;
use crate::profile::Descriptor;
use crate::record::Tabled;
use correlate::{NvmetCorrelator, NvmetRecord};

pub struct Nvmet;

const HINT: &str = "CONFIG_NVME_TARGET with a transport (modprobe nvmet nvmet-tcp)";

const EVENTS: &[EventReq] = &[
    EventReq {
        system: "nvmet",
        event: "nvmet_req_init",
        required: true,
        hint: HINT,
    },
    EventReq {
        system: "nvmet",
        event: "nvmet_req_complete",
        required: true,
        hint: HINT,
    },
];

/// What this profile is, what it opens and what it writes.
static DESCRIPTOR: Descriptor = Descriptor {
    name: "nvmet",
    about: "NVMe target (nvmet, any transport): command received → completion posted",
    events: EVENTS,
    schema: NvmetRecord::table,
    args,
    needs: &[],
};

/// The flags this profile adds to `record` and `stat`.
fn args() -> Vec<clap::Arg> {
    let mut v = selection_args();
    v.push(sample::sample_arg());
    v
}

impl Profile for Nvmet {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn plan(&self, ctx: &PlanCtx<'_>) -> Result<Plan, PlanError> {
        ctx.require(|_| true)?;
        let rate = sample::rate(ctx)?;
        let cfg = NvmeConfig::from_ctx(ctx);
        let select = cfg.select.clone();
        let mut b = PlanBuilder::new(ctx.tfs);
        b.sample(rate);
        // The host's command ids: a Linux host's carry its generation bits.
        let sampled = sample::filter("cid", sample::cid_mask(rate).into());
        sample::cid_sampler(ctx, &mut b);
        for e in EVENTS {
            let filter = match e.event {
                "nvmet_req_init" => select.cmd_filter(),
                _ => select.done_filter(),
            };
            let filter = Filter::and(filter, sampled.clone());
            b.open_boxed(e.system, e.event, filter, |fmt| {
                events::layout(fmt, e.system, e.event)
            })?;
        }
        Ok(b.build(NvmetCorrelator::new(cfg)))
    }
}
