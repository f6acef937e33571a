//! The nvme-tcp record's column table, and reading a row back for `merge`.

use super::model::{
    HostPart, TargetPart, TcpRecord, HOST_MARKS, MARK_NAMES, M_HOST, M_TARGET, TARGET_MARKS,
};
use crate::profile::shared::nvme_events::{opcode_name, Disk};
use crate::record::{bad, col, opt, Column, Kind, Role, Row, RowError, Value};

/// A host part's number, empty without one.
macro_rules! host {
    ($name:literal, $role:expr, |$h:ident| $e:expr) => {
        col($name, $role, Kind::U64, |r| {
            opt(r.host.as_ref().and_then(|$h: &HostPart| $e))
        })
    };
}

/// A target part's number, empty without one.
macro_rules! target {
    ($name:literal, $role:expr, |$t:ident| $e:expr) => {
        col($name, $role, Kind::U64, |r| {
            opt(r.target.as_ref().and_then(|$t: &TargetPart| $e))
        })
    };
}

fn ident(r: &TcpRecord) -> (u16, u16, u16) {
    match (&r.host, &r.target) {
        (Some(h), _) => (h.cntlid, h.qid, h.cid),
        (None, Some(t)) => (t.cntlid, t.qid, t.cid),
        _ => (0, 0, 0),
    }
}

use Role::{Stage, Value as V};

static COLUMNS: &[Column<TcpRecord>] = &[
    col("start_time", Role::StartTime, Kind::Timestamp, |r| {
        Value::Time(r.start())
    }),
    col("start_ns", V, Kind::U64, |r| Value::U64(r.start())),
    col("side", V, Kind::Text, |r| Value::Str(r.side())),
    col("ctrl", Role::Place, Kind::Text, |r| {
        r.host
            .as_ref()
            .map_or(Value::Empty, |h| Value::Named("nvme", h.ctrl_id as u64))
    }),
    col("disk", Role::Place, Kind::Text, |r| {
        r.host
            .as_ref()
            .map_or(Value::Empty, |h| Value::Str(h.disk.as_str()))
    }),
    col("cntlid", Role::Place, Kind::U64, |r| {
        Value::U64(ident(r).0 as u64)
    }),
    col("qid", Role::Place, Kind::U64, |r| {
        Value::U64(ident(r).1 as u64)
    }),
    col("cid", V, Kind::U64, |r| Value::U64(ident(r).2 as u64)),
    host!("tag", V, |h| Some(h.tag as u64)),
    col("op", Role::Label, Kind::Text, |r| Value::from(r.op_label())),
    col("slba", V, Kind::U64, |r| {
        let h = r.host.as_ref();
        opt(h.and_then(|h| h.slba).or(r.target.as_ref().map(|t| t.slba)))
    }),
    col("bytes", V, Kind::U64, |r| opt(r.bytes())),
    col("size_class", Role::Label, Kind::Text, |r| {
        Value::Str(r.size_label())
    }),
    col("shape", V, Kind::Text, |r| Value::Str(r.shape())),
    host!("round_trips", V, |h| Some(h.rounds as u64)),
    host!("send_calls", V, |h| Some(h.send_calls as u64)),
    host!("c2h_pdus", V, |h| Some(h.c2h_pdus as u64)),
    host!("r2ts", V, |h| Some(h.r2ts as u64)),
    target!("h2c_pdus", V, |t| Some(t.h2c_pdus as u64)),
    host!("blk_submission_ns", Stage, |h| h.blk_submission),
    host!("nvme_tcp_submission_ns", Stage, |h| h.nvme_tcp_submission),
    // What the host waited for: the network both ways and the target's stages.
    host!(
        "waiting_ns",
        Role::Total(&[
            "network_transmission_ns",
            "nstack_submission_ns",
            "nvmet_tcp_submission_ns",
            "target_subsystem_ns",
            "nvmet_tcp_completion_ns",
        ]),
        |h| h.waiting
    ),
    host!("nstack_completion_ns", Stage, |h| h.nstack_completion),
    host!("nvme_tcp_completion_ns", Stage, |h| h.nvme_tcp_completion),
    host!("blk_completion_ns", Stage, |h| h.blk_completion),
    target!("nstack_submission_ns", Stage, |t| t.nstack_submission),
    target!("nvmet_tcp_submission_ns", Stage, |t| t.nvmet_tcp_submission),
    target!("target_subsystem_ns", Stage, |t| t.target_subsystem),
    target!("nvmet_tcp_completion_ns", Stage, |t| t.nvmet_tcp_completion),
    // Signed: see the module doc of `model` for when it can be negative.
    col("network_transmission_ns", Stage, Kind::I64, |r| {
        r.network_ns().map_or(Value::Empty, Value::I64)
    }),
    host!(
        "host_total_ns",
        Role::Total(&[
            "blk_submission_ns",
            "nvme_tcp_submission_ns",
            "waiting_ns",
            "nstack_completion_ns",
            "nvme_tcp_completion_ns",
            "blk_completion_ns",
        ]),
        |h| h.total
    ),
    target!(
        "target_total_ns",
        Role::Total(&[
            "nstack_submission_ns",
            "nvmet_tcp_submission_ns",
            "target_subsystem_ns",
            "nvmet_tcp_completion_ns",
        ]),
        |t| t.total
    ),
    host!("host_start_ns", V, |h| Some(h.start_ns)),
    host!("host_queue_ns", V, |h| h.queue_ns),
    host!("host_send_ns", V, |h| h.send_ns),
    host!("host_recv_ns", V, |h| h.recv_ns),
    host!("host_last_recv_ns", V, |h| h.last_recv_ns),
    target!("target_rounds", V, |t| Some(t.rounds as u64)),
    target!("target_recv_ns", V, |t| Some(t.recv_ns)),
    target!("target_send_ns", V, |t| t.send_ns),
    target!("target_last_send_ns", V, |t| t.last_send_ns),
    col("nvme_status", V, Kind::Text, |r| {
        r.nvme_status()
            .map_or(Value::Empty, |s| Value::Hex(s as u64))
    }),
    col("qd", V, Kind::U64, |r| opt(r.qd().map(u64::from))),
    target!("target_qd", V, |t| t.qd.map(u64::from)),
    host!("candidates", V, |h| h.candidates.map(u64::from)),
    col("chain", V, Kind::Text, |r| {
        if r.missing() == 0 {
            Value::Str("complete")
        } else {
            Value::String(r.chain())
        }
    }),
    col("status", Role::Status, Kind::Text, |r| {
        Value::Str(r.own_status().as_str())
    }),
];

crate::tabled!(
    TcpRecord,
    "nvme-tcp",
    COLUMNS,
    |r| r.start(),
    |r| r.own_status(),
    |r, s| r.dropped = s == crate::record::Status::Dropped
);

impl TcpRecord {
    /// Read a row written by [`IoRecord::cells`] back (`get` gives a column's cell by
    /// name, "" when absent), so `merge` can join a host-only and a target-only row
    /// and write exactly the row a joint recording writes.
    /// Read a row written from the column table back (CSV or any other format read
    /// into a [`Row`]), so `merge` can join a host-only and a target-only row and
    /// write exactly the row a joint recording writes.
    pub fn from_row(row: &Row<'_>) -> Result<TcpRecord, RowError> {
        let side = row.text("side")?;
        let (has_h, has_t) = match side {
            "host" => (true, false),
            "target" => (false, true),
            "both" => (true, true),
            _ => return Err(bad("side", side, "host, target or both")),
        };
        let (cntlid, qid, cid): (u16, u16, u16) =
            (row.req("cntlid")?, row.req("qid")?, row.req("cid")?);
        let op = row.text("op")?;
        let opcode = if op.is_empty() {
            None
        } else {
            let parsed = op
                .strip_prefix("0x")
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .or_else(|| (0..=255u8).find(|o| opcode_name(qid as u32, *o, 0) == Some(op)));
            Some(parsed.ok_or_else(|| bad("op", op, "an NVMe opcode name or 0xNN"))?)
        };
        let shape = row.text("shape")?;
        let chain = row.text("chain")?;
        let mut missing = 0u16;
        if let Some(list) = chain.strip_prefix("missing:") {
            for name in list.split('+') {
                let bit = MARK_NAMES
                    .iter()
                    .find(|(_, n)| *n == name)
                    .ok_or_else(|| bad("chain", chain, "complete or missing:<marks>"))?;
                missing |= bit.0;
            }
        } else if chain != "complete" {
            return Err(bad("chain", chain, "complete or missing:<marks>"));
        }
        let nvme_status = match row.hex("nvme_status")? {
            None => None,
            Some(s) => Some(u16::try_from(s).map_err(|_| {
                bad(
                    "nvme_status",
                    row.text("nvme_status").unwrap_or(""),
                    "a 16-bit 0xNN",
                )
            })?),
        };
        let host = if has_h {
            let ctrl = row.text("ctrl")?;
            Some(HostPart {
                ctrl_id: ctrl
                    .strip_prefix("nvme")
                    .and_then(|n| n.parse().ok())
                    .ok_or_else(|| bad("ctrl", ctrl, "nvmeN"))?,
                disk: Disk::intern(row.text("disk")?.as_bytes()),
                cntlid,
                qid,
                cid,
                tag: row.req("tag")?,
                opcode,
                write: opcode == Some(0x01),
                inline_data: shape == "write-inline",
                slba: row.num("slba")?,
                bytes: row.num("bytes")?,
                rounds: row.req("round_trips")?,
                send_calls: row.req("send_calls")?,
                c2h_pdus: row.req("c2h_pdus")?,
                r2ts: row.req("r2ts")?,
                blk_submission: row.num("blk_submission_ns")?,
                nvme_tcp_submission: row.num("nvme_tcp_submission_ns")?,
                waiting: row.num("waiting_ns")?,
                nstack_completion: row.num("nstack_completion_ns")?,
                nvme_tcp_completion: row.num("nvme_tcp_completion_ns")?,
                blk_completion: row.num("blk_completion_ns")?,
                total: row.num("host_total_ns")?,
                start_ns: row.req("host_start_ns")?,
                queue_ns: row.num("host_queue_ns")?,
                send_ns: row.num("host_send_ns")?,
                recv_ns: row.num("host_recv_ns")?,
                last_recv_ns: row.num("host_last_recv_ns")?,
                nvme_status,
                qd: row.num("qd")?,
                candidates: row.num("candidates")?,
                missing: missing & HOST_MARKS,
            })
        } else {
            None
        };
        let target = if has_t {
            Some(TargetPart {
                cntlid,
                qid,
                cid,
                opcode: opcode.unwrap_or(0),
                slba: row.num("slba")?.unwrap_or(0),
                len: row.num("bytes")?.unwrap_or(0),
                rounds: row.req("target_rounds")?,
                h2c_pdus: row.req("h2c_pdus")?,
                r2t: shape == "write-r2t",
                nstack_submission: row.num("nstack_submission_ns")?,
                nvmet_tcp_submission: row.num("nvmet_tcp_submission_ns")?,
                target_subsystem: row.num("target_subsystem_ns")?,
                nvmet_tcp_completion: row.num("nvmet_tcp_completion_ns")?,
                total: row.num("target_total_ns")?,
                recv_ns: row.req("target_recv_ns")?,
                send_ns: row.num("target_send_ns")?,
                last_send_ns: row.num("target_last_send_ns")?,
                nvme_status,
                qd: row.num("target_qd")?,
                missing: missing & TARGET_MARKS,
            })
        } else {
            None
        };
        Ok(TcpRecord {
            host,
            target,
            expect_host: has_h || missing & M_HOST != 0,
            expect_target: has_t || missing & M_TARGET != 0,
            dropped: row.status()? == crate::record::Status::Dropped,
        })
    }
}
