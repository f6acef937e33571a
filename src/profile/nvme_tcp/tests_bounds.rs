//! Tests of the nvme-tcp profile's bounds, of `merge` against the joint rows, and of
//! garbage input; the scenario rig is in `tests.rs`.

use super::events::{
    HostData, HostEvent, HostKind, NvmeTcpEvent, PduInfo, TargetEvent, TargetKind,
};
use super::join::TcpCorrelator;
use super::model::{Side, TcpConfig, TcpRecord};
use super::tests::{cells, r2t_write, read, rig, DEV};
use crate::correlate::Correlator;
use crate::decode::Event;
use crate::profile::shared::block_events::{BlockEvent, BlockKind};
use crate::record::{IoRecord, Row};
use std::collections::HashMap;

#[test]
fn memory_is_bounded() {
    let mut r = rig();
    for i in 0..200u64 {
        r.queue_rq(1000 + i, i, 2, 4096, i * 8);
        r.t(
            1000 + i,
            "done_recv_pdu",
            i + 0x1000,
            2,
            &[("recv_time", 999 + i)],
        );
    }
    let mut c = TcpCorrelator::new(TcpConfig {
        max_in_flight: 16,
        ..Default::default()
    });
    let mut n = 0;
    for (t, cpu, raw) in &r.samples {
        let ev = r.decoder.decode(raw, *t, *cpu).unwrap().unwrap();
        c.on_event(&ev, &mut |_| n += 1);
        assert!(c.hosts.len() <= 16 && c.targets.len() <= 16);
    }
    c.finish(&mut |_| n += 1);
    assert_eq!(n, 400);
    assert_eq!(c.counters().incomplete, 400);
}

/// The record's cells by column name (time columns from `start_ns`).
fn row_of(r: &TcpRecord) -> super::merge::Row {
    let s = r.schema();
    let text: Vec<String> = (0..s.columns.len()).map(|i| r.value(i).to_text()).collect();
    let cells: Vec<&str> = text.iter().map(String::as_str).collect();
    let rec = TcpRecord::from_row(&Row {
        schema: s,
        cells: &cells,
    })
    .unwrap();
    assert_eq!(&rec.host, &r.host, "host part must survive the CSV");
    assert_eq!(&rec.target, &r.target, "target part must survive the CSV");
    super::merge::Row {
        start_time: crate::sink::time::format_utc(r.start_ns() as i128 + WALL),
        start_ns: r.start_ns(),
        rec,
    }
}

const WALL: i128 = 1_795_000_000_000_000_000;

#[test]
fn merging_host_only_and_target_only_gives_the_joint_rows() {
    let mut r = rig();
    for (i, base) in [10_000u64, 20_000, 30_000].into_iter().enumerate() {
        read(&mut r, base, 0x1001, 800 + 8 * i as u64);
    }
    r2t_write(&mut r, 40_000, 0x1001, 4096);
    r2t_write(&mut r, 43_000, 0x2001, 4096 + 256);
    // One target I/O of a host we did not trace.
    r.t(60_000, "done_recv_pdu", 0x3333, 2, &[("recv_time", 59_990)])
        .t(60_010, "exec_read_req", 0x3333, 2, &[])
        .t(60_020, "queue_response", 0x3333, 2, &[])
        .t(60_030, "try_send_response", 0x3333, 2, &[]);
    let joint = r.run(TcpConfig::default(), 4).0;
    let host = r
        .run(
            TcpConfig {
                side: Side::Host,
                ..Default::default()
            },
            4,
        )
        .0;
    let tgt = r
        .run(
            TcpConfig {
                side: Side::Target,
                ..Default::default()
            },
            4,
        )
        .0;
    assert_eq!((joint.len(), host.len(), tgt.len()), (6, 5, 6));
    // The target machine's monotonic clock reads 5 s more; its wall clock agrees.
    const SKEW: u64 = 5_000_000_000;
    let mut rows: Vec<_> = host.iter().map(row_of).collect();
    for t in &tgt {
        let mut row = row_of(t);
        let p = row.rec.target.as_mut().unwrap();
        p.recv_ns += SKEW;
        p.send_ns = p.send_ns.map(|x| x + SKEW);
        p.last_send_ns = p.last_send_ns.map(|x| x + SKEW);
        row.start_ns += SKEW;
        rows.push(row);
    }
    let (merged, st) = super::merge::merge(rows, 50_000_000);
    assert_eq!((st.paired, st.host_rows, st.target_rows), (5, 5, 6));
    assert!(st.offset_ns.abs_diff(-(SKEW as i64)) < 1000, "{st:?}");
    let mut want: Vec<_> = joint.iter().map(cells).collect();
    let mut got: Vec<_> = merged
        .iter()
        .map(|m| {
            let mut c = cells(&m.rec);
            if m.rec.target.is_some() {
                // Target marks stay on the target's clock.
                for k in ["target_recv_ns", "target_send_ns", "target_last_send_ns"] {
                    let v: u64 = c[k].parse().unwrap();
                    c.insert(k, (v - SKEW).to_string());
                }
            }
            c
        })
        .collect();
    let key = |c: &HashMap<&str, String>| (c["cid"].clone(), c["host_start_ns"].clone());
    want.sort_by_key(key);
    got.sort_by_key(key);
    assert_eq!(got, want);
}

/// Garbage in any order (random kinds, ids, stamps up to u64::MAX, time going
/// backwards) must neither panic nor grow memory past the bounds.
#[test]
fn random_event_streams_do_not_panic() {
    let mut rng = fastrand::Rng::with_seed(0x9e37_79b9_7f4a_7c15);
    let mut rnd = move || rng.u64(..);
    let hosts = [
        HostKind::QueueRq,
        HostKind::TrySend,
        HostKind::DoneSendReq,
        HostKind::HandleR2t,
        HostKind::HandleC2hData,
        HostKind::RecvData,
        HostKind::ProcessNvmeCqe,
    ];
    let tgts = [
        TargetKind::DoneRecvPdu,
        TargetKind::ExecReadReq,
        TargetKind::ExecWriteReq,
        TargetKind::QueueResponse,
        TargetKind::TrySendR2t,
        TargetKind::TrySendDataPdu,
        TargetKind::TrySendResponse,
        TargetKind::HandleH2cDataPdu,
        TargetKind::TryRecvData,
    ];
    let mut c = TcpCorrelator::new(TcpConfig {
        max_in_flight: 64,
        ..Default::default()
    });
    let mut rows = 0u64;
    for _ in 0..50_000 {
        let r = rnd();
        let big = if r % 7 == 0 {
            u64::MAX - rnd() % 1000
        } else {
            rnd() % 1_000_000
        };
        let time = rnd() % 10_000_000;
        let cid = (rnd() % 40) as u16;
        let kind = match r % 3 {
            0 => {
                let kind = hosts[(r >> 8) as usize % hosts.len()];
                let data = if kind == HostKind::QueueRq {
                    HostData::Rq(super::events::QueueRqInfo {
                        slba: big,
                        sector: rnd() % 64,
                        dev: if (r >> 40) & 1 == 0 { DEV } else { 0 },
                        opcode: (r >> 33) as u8 % 3,
                        write: r & 1 == 0,
                        inline_data: r & 2 == 0,
                        disk: crate::profile::shared::nvme_events::Disk::intern(b"nvme0n1"),
                    })
                } else {
                    HostData::Pdu(PduInfo {
                        recv_time: big,
                        flags: (r >> 30) as u8,
                        status: 0,
                    })
                };
                NvmeTcpEvent::Host(HostEvent {
                    kind,
                    ctrl_id: (r >> 20) as u32 % 2,
                    cntlid: 1,
                    qid: 1 + (r >> 24) as u16 % 2,
                    cid,
                    tag: cid,
                    len: 4096,
                    data,
                })
            }
            1 => NvmeTcpEvent::Target(TargetEvent {
                kind: tgts[(r >> 8) as usize % tgts.len()],
                cntlid: 1,
                qid: 1 + (r >> 24) as u16 % 2,
                cid,
                opcode: (r >> 33) as u8 % 3,
                recv_time: big,
                slba: 0,
                len: 4096,
                r2t: r & 4 == 0,
                status: (r >> 50) as u16 % 2,
            }),
            _ => NvmeTcpEvent::Block(BlockEvent {
                kind: if r & 8 == 0 {
                    BlockKind::BioQueue
                } else {
                    BlockKind::Complete
                },
                dev: DEV,
                sector: rnd() % 64,
                nr_sector: 8,
                bytes: 4096,
                op: crate::profile::shared::block_events::Op::Read,
                error: 0,
            }),
        };
        c.on_event(&Event { time, cpu: 0, kind }, &mut |rec| {
            let _ = cells(&rec);
            rows += 1;
        });
        assert!(c.hosts.len() <= 64 && c.targets.len() <= 64);
        assert!(c.bios.len() <= super::join::MAX_BIOS && c.by_sector.len() <= 64);
    }
    c.finish(&mut |_| rows += 1);
    assert!(rows > 0);
}

/// A merged row is `dropped` when either recording's part was, as the joint row is.
#[test]
fn a_merged_row_is_dropped_when_either_part_was() {
    let mut r = rig();
    read(&mut r, 10_000, 0x1001, 800);
    read(&mut r, 20_000, 0x1002, 808);
    let side = |side| TcpConfig {
        side,
        ..Default::default()
    };
    let (host, tgt) = (r.run(side(Side::Host), 4).0, r.run(side(Side::Target), 4).0);
    let mut rows: Vec<_> = host.iter().map(row_of).collect();
    for t in &tgt {
        let mut row = row_of(t);
        // The target recording cut 0x1002: it lost its response send there.
        row.rec.dropped = t.target.unwrap().cid == 0x1002;
        rows.push(row);
    }
    let (merged, st) = super::merge::merge(rows, 50_000_000);
    assert_eq!(st.paired, 2);
    let got: Vec<_> = (merged.iter())
        .map(|m| (m.rec.host.unwrap().cid, m.rec.status().as_str()))
        .collect();
    assert_eq!(got, [(0x1001, "ok"), (0x1002, "dropped")]);
}
