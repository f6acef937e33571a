//! The nvme-tcp profile: every NVMe/TCP I/O broken into host, network and target
//! stages, from the `nvme_tcp:*` / `nvmet_tcp:*` events of kernels patched with
//! `kernel_change/` plus `block:block_bio_queue` / `block:block_rq_complete`.
//!
//! By concern: [`model`] (the round-trip model, marks and stage definitions),
//! [`events`] (layouts), [`host`] and [`target`] (each side's marks and stages),
//! [`join`] (the correlator joining both sides and the block events), [`record`]
//! (the column table), [`merge`] (joining two machines' recordings).

pub mod events;
pub mod host;
pub mod join;
pub mod merge;
pub mod model;
pub mod record;
pub mod target;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_bounds;
#[cfg(test)]
mod tests_loss;

use super::{
    sample, EventReq, MergeError, Merged, Plan, PlanBuilder, PlanCtx, PlanError, Profile,
    Recording, BLOCK_HINT,
};
use crate::filter::Filter;
use crate::profile::shared::cmd::CmdSelect;
use crate::profile::shared::select::nvme_disks_filter;
use crate::profile::shared::select::selection_args;
use crate::profile::Descriptor;
use crate::record::{Row, Tabled};
use crate::sink::time::{parse_utc, WallClock};
use join::TcpCorrelator;
use model::{Side, TcpConfig, TcpRecord};
use std::collections::HashMap;

pub struct NvmeTcp;

const HOST_HINT: &str =
    "needs the kernel_change/ patch (nvme_tcp tracepoints) and the nvme-tcp host module loaded";
const TGT_HINT: &str =
    "needs the kernel_change/ patch (nvmet_tcp tracepoints) and the nvmet-tcp target module loaded";

const fn host(event: &'static str) -> EventReq {
    EventReq {
        system: "nvme_tcp",
        event,
        required: true,
        hint: HOST_HINT,
    }
}

const fn tgt(event: &'static str) -> EventReq {
    EventReq {
        system: "nvmet_tcp",
        event,
        required: false,
        hint: TGT_HINT,
    }
}

// Host events are required: a machine that is only a target runs with `--side
// target`, which needs only the nvmet_tcp ones. Events the stages do not use
// (queue_request, try_send_cmd_pdu, try_send_data_pdu, try_send_data, setup_*) are not
// opened: every sample costs the traced I/O time.
pub(crate) const EVENTS: &[EventReq] = &[
    host("nvme_tcp_queue_rq"),
    host("nvme_tcp_try_send"),
    host("nvme_tcp_done_send_req"),
    host("nvme_tcp_handle_r2t"),
    host("nvme_tcp_handle_c2h_data"),
    host("nvme_tcp_recv_data"),
    host("nvme_tcp_process_nvme_cqe"),
    tgt("nvmet_tcp_done_recv_pdu"),
    tgt("nvmet_tcp_exec_read_req"),
    tgt("nvmet_tcp_exec_write_req"),
    tgt("nvmet_tcp_queue_response"),
    tgt("nvmet_tcp_try_send_r2t"),
    tgt("nvmet_tcp_try_send_data_pdu"),
    tgt("nvmet_tcp_try_send_response"),
    tgt("nvmet_tcp_handle_h2c_data_pdu"),
    tgt("nvmet_tcp_try_recv_data"),
    EventReq {
        system: "block",
        event: "block_bio_queue",
        required: false,
        hint: BLOCK_HINT,
    },
    EventReq {
        system: "block",
        event: "block_rq_complete",
        required: false,
        hint: BLOCK_HINT,
    },
];

/// What this profile is, what it opens and what it writes.
static DESCRIPTOR: Descriptor = Descriptor {
    name: "nvme-tcp",
    about: "NVMe/TCP I/O split into host, network and target stages (kernel_change/ patch)",
    events: EVENTS,
    schema: TcpRecord::table,
    args,
    needs: &[],
};

/// The flags this profile adds to `record` and `stat`.
fn args() -> Vec<clap::Arg> {
    use clap::Arg;
    let mut v = selection_args();
    v.retain(|a| a.get_id() != "nsid");
    v.push(
        Arg::new("side")
            .long("side")
            .value_name("SIDE")
            .value_parser(["host", "target", "both"])
            .help("nvme-tcp: the side(s) of NVMe/TCP this machine traces: host, target, or both (default: loopback, or host and target of different connections). For two machines record --side host on one and --side target on the other, then join the CSVs with `ntprof-perf merge`"),
    );
    v.push(sample::sample_arg());
    v
}

impl Profile for NvmeTcp {
    fn descriptor(&self) -> &'static Descriptor {
        &DESCRIPTOR
    }

    fn plan(&self, ctx: &PlanCtx<'_>) -> Result<Plan, PlanError> {
        let side = ctx
            .flag::<String>("side")
            .and_then(|s| Side::parse(&s))
            .unwrap_or_default();
        let sample = sample::rate(ctx)?;
        let mask = sample::cid_mask(sample);
        let select = CmdSelect::from_flags(ctx);
        // A machine that is only an NVMe/TCP target has no host events.
        ctx.require(|e| !(side == Side::Target && e.system == "nvme_tcp"))?;
        let have = |system: &str| {
            ctx.status
                .iter()
                .any(|s| s.req.system == system && s.missing.is_none())
        };
        for (on, system) in [(side.host(), "nvme_tcp"), (side.target(), "nvmet_tcp")] {
            // With --side both, a target system wholly absent only narrows the run to
            // the host (below); one present in part is a broken patch: refuse.
            if on && (side != Side::Both || system == "nvme_tcp" || have(system)) {
                ctx.require_all_of(system)?;
            }
        }
        let mut b = PlanBuilder::<events::NvmeTcpEvent, events::TcpSlot>::direct(ctx.tfs);
        b.sample(sample);
        sample::cid_sampler(ctx, &mut b);
        let target_on = side.target() && have("nvmet_tcp");
        if sample::dynamic(ctx) && side == Side::Both && target_on {
            return Err(PlanError::Flag {
                flag: "--max-rate".into(),
                why: "with host and target joined (--side both), a change of rate could cut the target part off a row: give --side host or --side target (join the two recordings with `merge`), or a fixed --sample".into(),
            });
        }
        if side == Side::Both && !target_on {
            b.note("no nvmet_tcp events on this kernel: host-side stages only (the target is elsewhere or unpatched)");
        }
        let sampled = Filter::bits_clear("cid", mask as u64);
        let target_filter = Filter::and(select.qid_filter(), sampled.clone());
        let host_filter = Filter::and(select.queue_filter(), sampled);
        let disks: HashMap<String, u32> = (ctx.sys.names().into_iter())
            .filter(|(_, n)| n.starts_with("nvme"))
            .map(|(d, n)| (n, d))
            .collect();
        // Block events only when both ends are there and nvme disks exist now:
        // unfiltered they would carry every disk's I/O through the rings for nothing.
        // A capture's block events were kept by its own filter, whatever disks this
        // host has.
        let block = side.host() && ctx.has_system("block") && (ctx.capture || !disks.is_empty());
        let block_filter = Some(nvme_disks_filter());
        for s in ctx.status.iter().filter(|s| s.missing.is_none()) {
            let filter = match s.req.system {
                "nvme_tcp" if side.host() => host_filter.clone(),
                "nvmet_tcp" if target_on => target_filter.clone(),
                "block" if block => block_filter.clone(),
                _ => continue,
            };
            b.open(s.req.system, s.req.event, filter, |fmt| {
                events::TcpSlot::bind(fmt, s.req.system, s.req.event)
            })?;
        }
        Ok(b.build(TcpCorrelator::new(TcpConfig {
            side: if target_on { side } else { Side::Host },
            block,
            admin: select.admin,
            // With --max-rate the kernel filters and the gate sample: no fixed mask.
            sample_mask: if sample::dynamic(ctx) { 0 } else { mask },
            disks,
            ..Default::default()
        })))
    }

    fn merge(&self, inputs: &[Recording], max_skew_ns: u64) -> Option<Result<Merged, MergeError>> {
        Some(merge_recordings(inputs, max_skew_ns))
    }
}

/// Read both recordings' rows back and pair them (see [`merge::merge`]).
fn merge_recordings(inputs: &[Recording], max_skew_ns: u64) -> Result<Merged, MergeError> {
    let schema = TcpRecord::table();
    let mut rows = Vec::new();
    for input in inputs {
        for (line, cells) in &input.rows {
            let cells: Vec<&str> = cells.iter().map(String::as_str).collect();
            let row = Row {
                schema,
                cells: &cells,
            };
            let at = |source| MergeError::Row {
                file: input.name.clone(),
                line: *line,
                source,
            };
            let start_ns = row.req::<u64>("start_ns").map_err(at)?;
            let start_time = row.text("start_time").map_err(at)?.to_string();
            let rec = TcpRecord::from_row(&row).map_err(at)?;
            rows.push(merge::Row {
                start_time,
                start_ns,
                rec,
            });
        }
    }
    let (rows, st) = merge::merge(rows, max_skew_ns);
    let summary = format!(
        "{} host rows, {} target rows, {} paired; {} rows written; host clock − target clock ≈ {} ns ({} of {} round trips agree)",
        st.host_rows,
        st.target_rows,
        st.paired,
        rows.len(),
        st.offset_ns,
        st.agreeing,
        st.considered
    );
    let warning = (st.host_rows > 0 && st.target_rows > 0 && st.paired == 0).then(|| {
        "no host row found its target row: were both recorded at the same time, against the same controller (cntlid)?".to_string()
    });
    let rows = rows
        .into_iter()
        .map(|r| {
            // Each row keeps the wall clock of the recording its start came from.
            let off = parse_utc(&r.start_time).map_or(0, |w| w - r.start_ns as i128);
            let rec: Box<dyn crate::record::IoRecord> = Box::new(r.rec);
            (WallClock::with_offset(off), rec)
        })
        .collect();
    Ok(Merged {
        rows,
        summary,
        warning,
    })
}
