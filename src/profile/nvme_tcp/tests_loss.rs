//! The nvme-tcp correlator under sustained ring overflow (see `overflow_sim`): no I/O
//! that lost its end takes the events of the command its id serves 16 uses later.

use super::join::TcpCorrelator;
use super::model::{Side, TcpConfig, TcpRecord};
use super::tests::{rig, CNTLID, CTRL, DEV};
use crate::profile::shared::overflow_sim::{closed_loop, overflow_of, At, Cmd, Kind, Sample};
use crate::record::IoRecord;

/// A host event of command `m`.
fn host(r: &super::tests::Rig, ev: &str, m: &Cmd, fields: &[(&str, u64)]) -> Vec<u8> {
    let mut f = vec![
        ("ctrl_id", CTRL),
        ("cntlid", CNTLID),
        ("qid", m.qid),
        ("cid", m.cid),
        ("tag", m.cid & 0xfff),
    ];
    f.extend_from_slice(fields);
    r.raw(&format!("nvme_tcp_{ev}"), &f)
}

/// The host's start of 4k read `m`: `queue_rq` (`Setup`), `try_send` (`Mid(0)`), then
/// `done_send_req`.
fn host_send(r: &super::tests::Rig, kind: Kind, m: &Cmd) -> Vec<u8> {
    match kind {
        Kind::Setup => {
            let f = [
                ("slba", m.slba / 8),
                ("sector", m.slba),
                ("nsid", 1),
                ("len", 4096),
                ("dev", DEV as u64),
                ("opcode", 0x02),
            ];
            host(r, "queue_rq", m, &f)
        }
        Kind::Mid(0) => host(r, "try_send", m, &[]),
        _ => host(r, "done_send_req", m, &[]),
    }
}

/// A target event of command `m`, a 4k write.
fn target(r: &super::tests::Rig, ev: &str, m: &Cmd, fields: &[(&str, u64)]) -> Vec<u8> {
    let mut f = vec![
        ("cntlid", CNTLID),
        ("qid", m.qid),
        ("cid", m.cid),
        ("opcode", 0x01),
        ("len", 4096),
    ];
    f.extend_from_slice(fields);
    r.raw(&format!("nvmet_tcp_{ev}"), &f)
}

/// 4k reads seen from the host, block completions traced or not. Before the host side
/// kept its missing completions, a read that lost its completion queue entry took the
/// sends, data and completion of the read 16 uses of its tag later whose `queue_rq`
/// went missing too.
#[test]
fn under_sustained_loss_no_host_io_takes_a_later_ones_events() {
    let r = rig();
    let cmds = closed_loop(400);
    for block in [false, true] {
        let mut marks = vec![
            (Kind::Setup, At::Start(500)),
            (Kind::Mid(0), At::Start(2_000)),
            (Kind::Mid(1), At::Start(3_000)),
            (Kind::Mid(2), At::End(-5_000)),
            (Kind::Done, At::End(0)),
        ];
        if block {
            // A whole row has its bio and its block completion too.
            marks.push((Kind::Mid(3), At::End(200)));
            marks.push((Kind::Mid(4), At::Start(0)));
        }
        let names = [
            (Kind::Setup, "nvme_tcp:nvme_tcp_queue_rq"),
            (Kind::Mid(0), "nvme_tcp:nvme_tcp_try_send"),
            (Kind::Mid(1), "nvme_tcp:nvme_tcp_done_send_req"),
            (Kind::Mid(2), "nvme_tcp:nvme_tcp_handle_c2h_data"),
            (Kind::Done, "nvme_tcp:nvme_tcp_process_nvme_cqe"),
            (Kind::Mid(3), "block:block_rq_complete"),
            (Kind::Mid(4), "block:block_bio_queue"),
        ];
        let raw = |s: &Sample| {
            let m = &cmds[s.cmd];
            let sector = m.slba;
            let block_fields = [("dev", DEV as u64), ("sector", sector), ("nr_sector", 8)];
            match s.kind {
                Kind::Setup | Kind::Mid(0) | Kind::Mid(1) => host_send(&r, s.kind, m),
                Kind::Mid(2) => {
                    let f = [("recv_time", s.t - 1_000), ("data_len", 4096), ("flags", 4)];
                    host(&r, "handle_c2h_data", m, &f)
                }
                Kind::Done => host(&r, "process_nvme_cqe", m, &[("recv_time", s.t - 1_000)]),
                Kind::Mid(3) => r.raw("block_rq_complete", &block_fields),
                _ => r.raw("block_bio_queue", &block_fields),
            }
        };
        let sim = overflow_of(&cmds, &marks);
        // Told per event, and as a capture's LOST records tell them.
        for sim in [&sim, &sim.as_lost_records()] {
            let mut c = TcpCorrelator::new(TcpConfig {
                side: Side::Host,
                block,
                ..Default::default()
            });
            let rows = sim.replay(&mut c, &names, &r.decoder, raw, |rec: &TcpRecord| {
                let h = rec.host.expect("a host part");
                // To the completion queue entry: from the bio (block) or queue_rq.
                let took = h.total.map(|t| t - h.blk_completion.unwrap_or(0));
                let took = took.map(|t| t + if block { 0 } else { 500 });
                (h.start_ns - if block { 0 } else { 500 }, rec.status(), took)
            });
            let counters = crate::correlate::Correlator::counters(&c);
            sim.check(&cmds, &rows, counters.cut);
            assert_eq!(counters.incomplete, 0, "block completions: {block}");
        }
    }
}

/// In-capsule 4k writes seen from the target: one whose response send went missing took
/// the response send of the write 16 uses of its id later, whose command capsule went
/// missing too: a target time of ≈ 16 writes, `ok`.
#[test]
fn under_sustained_loss_no_target_io_takes_a_later_ones_events() {
    let r = rig();
    let cmds = closed_loop(400);
    let marks = [
        (Kind::Setup, At::Start(0)),
        (Kind::Mid(0), At::Start(5_000)),
        (Kind::Mid(1), At::End(-3_000)),
        (Kind::Done, At::End(0)),
    ];
    let names = [
        (Kind::Setup, "nvmet_tcp:nvmet_tcp_done_recv_pdu"),
        (Kind::Mid(0), "nvmet_tcp:nvmet_tcp_exec_write_req"),
        (Kind::Mid(1), "nvmet_tcp:nvmet_tcp_queue_response"),
        (Kind::Done, "nvmet_tcp:nvmet_tcp_try_send_response"),
    ];
    let raw = |s: &Sample| {
        let m = &cmds[s.cmd];
        match s.kind {
            Kind::Setup => {
                let f = [("recv_time", s.t), ("slba", m.slba / 8)];
                target(&r, "done_recv_pdu", m, &f)
            }
            Kind::Mid(0) => target(&r, "exec_write_req", m, &[]),
            Kind::Mid(1) => target(&r, "queue_response", m, &[]),
            _ => target(&r, "try_send_response", m, &[]),
        }
    };
    let sim = overflow_of(&cmds, &marks);
    // Told per event, and as a capture's LOST records tell them.
    for sim in [&sim, &sim.as_lost_records()] {
        let mut c = TcpCorrelator::new(TcpConfig {
            side: Side::Target,
            block: false,
            ..Default::default()
        });
        let rows = sim.replay(&mut c, &names, &r.decoder, raw, |rec: &TcpRecord| {
            let t = rec.target.expect("a target part");
            (t.recv_ns, rec.status(), t.total)
        });
        let counters = crate::correlate::Correlator::counters(&c);
        sim.check(&cmds, &rows, counters.cut);
    }
}

/// A host command whose completion went missing is over once its blk-mq tag serves a
/// command of another cid: when that command's `queue_rq` comes, or the reply of one
/// whose `queue_rq` went missing too. A send event of an older cid (a send call can
/// return after its command completed) ends nothing.
#[test]
fn a_tag_serving_another_cid_ends_the_command_held_there() {
    let mut r = rig();
    let read = |r: &mut super::tests::Rig, b: u64, cid: u64, queued: bool, done: bool| {
        if queued {
            r.queue_rq(b, cid, 2, 4096, cid * 8);
            r.h(b + 10, "try_send", cid, &[]);
            r.h(b + 20, "done_send_req", cid, &[]);
        }
        if done {
            let f = [("recv_time", b + 90), ("data_len", 4096), ("flags", 4)];
            r.h(b + 100, "handle_c2h_data", cid, &f);
            r.h(b + 150, "process_nvme_cqe", cid, &[("recv_time", b + 140)]);
        }
    };
    // Tag 3: lost its completion; the next command on the tag lost its queue_rq.
    read(&mut r, 1_000, 0x0003, true, false);
    read(&mut r, 5_000, 0x1003, false, true);
    // Tag 5: a late done_send_req of the finished command after the next one started.
    read(&mut r, 6_000, 0x0005, true, true);
    read(&mut r, 7_000, 0x1005, true, false);
    r.h(7_050, "done_send_req", 0x0005, &[]);
    r.h(
        7_100,
        "handle_c2h_data",
        0x1005,
        &[("recv_time", 7_090), ("flags", 4)],
    );
    r.h(7_150, "process_nvme_cqe", 0x1005, &[("recv_time", 7_140)]);
    // Tag 6: lost its completion; the next command on the tag is seen whole.
    read(&mut r, 8_000, 0x0006, true, false);
    read(&mut r, 9_000, 0x1006, true, true);
    let cfg = TcpConfig {
        side: Side::Host,
        block: false,
        ..Default::default()
    };
    let (out, c, _) = r.run(cfg, 100);
    // In the order they went out: 0x0003 and 0x0006 when their tag was taken, not at
    // the end of the run.
    let got: Vec<_> = (out.iter())
        .map(|rec| {
            let h = rec.host.unwrap();
            (h.cid, rec.status().as_str(), h.total)
        })
        .collect();
    assert_eq!(
        got,
        [
            (0x0003, "incomplete", None),
            (0x0005, "ok", Some(150)),
            (0x1005, "ok", Some(150)),
            (0x0006, "incomplete", None),
            (0x1006, "ok", Some(150)),
        ]
    );
    assert_eq!((c.unmatched, c.incomplete), (1, 2));
}

/// Both sides in one recording (loopback), 4k reads: no `ok` row with another read's
/// host or target time, and one `cut` per `dropped` row whichever part lost its end.
#[test]
fn under_sustained_loss_no_joint_row_takes_a_later_ones_events() {
    let r = rig();
    let cmds = closed_loop(400);
    let marks = [
        (Kind::Setup, At::Start(0)),
        (Kind::Mid(0), At::Start(2_000)),
        (Kind::Mid(1), At::Start(3_000)),
        (Kind::Mid(2), At::Start(10_000)),
        (Kind::Mid(3), At::Start(12_000)),
        (Kind::Mid(4), At::End(-20_000)),
        (Kind::Mid(5), At::End(-15_000)),
        (Kind::Mid(6), At::End(-12_000)),
        (Kind::Mid(7), At::End(-5_000)),
        (Kind::Done, At::End(0)),
    ];
    let names = [
        (Kind::Setup, "nvme_tcp:nvme_tcp_queue_rq"),
        (Kind::Mid(0), "nvme_tcp:nvme_tcp_try_send"),
        (Kind::Mid(1), "nvme_tcp:nvme_tcp_done_send_req"),
        (Kind::Mid(2), "nvmet_tcp:nvmet_tcp_done_recv_pdu"),
        (Kind::Mid(3), "nvmet_tcp:nvmet_tcp_exec_read_req"),
        (Kind::Mid(4), "nvmet_tcp:nvmet_tcp_queue_response"),
        (Kind::Mid(5), "nvmet_tcp:nvmet_tcp_try_send_data_pdu"),
        (Kind::Mid(6), "nvmet_tcp:nvmet_tcp_try_send_response"),
        (Kind::Mid(7), "nvme_tcp:nvme_tcp_handle_c2h_data"),
        (Kind::Done, "nvme_tcp:nvme_tcp_process_nvme_cqe"),
    ];
    let raw = |s: &Sample| {
        let m = &cmds[s.cmd];
        let read = |ev: &str, f: &[(&str, u64)]| {
            let mut f = f.to_vec();
            f.push(("opcode", 0x02));
            target(&r, ev, m, &f)
        };
        match s.kind {
            Kind::Setup | Kind::Mid(0) | Kind::Mid(1) => host_send(&r, s.kind, m),
            Kind::Mid(2) => read(
                "done_recv_pdu",
                &[("recv_time", s.t - 1_000), ("slba", m.slba / 8)],
            ),
            Kind::Mid(3) => read("exec_read_req", &[]),
            Kind::Mid(4) => read("queue_response", &[]),
            Kind::Mid(5) => read("try_send_data_pdu", &[]),
            Kind::Mid(6) => read("try_send_response", &[]),
            Kind::Mid(7) => {
                let f = [("recv_time", s.t - 1_000), ("data_len", 4096), ("flags", 4)];
                host(&r, "handle_c2h_data", m, &f)
            }
            _ => host(&r, "process_nvme_cqe", m, &[("recv_time", s.t - 1_000)]),
        }
    };
    let sim = overflow_of(&cmds, &marks);
    let took: std::collections::HashMap<u64, u64> =
        cmds.iter().map(|c| (c.submit, c.took)).collect();
    // Told per event, and as a capture's LOST records tell them.
    for sim in [&sim, &sim.as_lost_records()] {
        let mut c = TcpCorrelator::new(TcpConfig {
            side: Side::Both,
            block: false,
            ..Default::default()
        });
        let recs = std::cell::RefCell::new(Vec::new());
        sim.replay(&mut c, &names, &r.decoder, raw, |rec: &TcpRecord| {
            recs.borrow_mut().push(rec.clone());
            (0, rec.status(), None)
        });
        let recs = recs.into_inner();
        let ok: Vec<_> = recs
            .iter()
            .filter(|r| r.status().as_str() == "ok")
            .collect();
        // Host: queue_rq to the completion. Target: the command's arrival (9 µs in, 1 µs
        // before done_recv_pdu) to the first reply send (try_send_data_pdu, 15 µs before
        // the end).
        let wrong = (ok.iter())
            .filter(|r| {
                let h = r.host.expect("joint rows have a host part");
                let t = r.target.expect("and a target part");
                let m = took[&h.start_ns];
                h.total != Some(m) || t.total != Some(m - 9_000 - 15_000)
            })
            .count();
        let dropped = recs
            .iter()
            .filter(|r| r.status().as_str() == "dropped")
            .count();
        let cut = crate::correlate::Correlator::counters(&c).cut;
        // Before the ends were kept: 524 of 2,104 ok rows wrong.
        assert_eq!(wrong, 0, "of {} ok rows", ok.len());
        assert_eq!(dropped as u64, cut);
        assert!(ok.len() > 100, "{} ok rows", ok.len());
    }
}
