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
                Kind::Setup => host(
                    &r,
                    "queue_rq",
                    m,
                    &[
                        ("slba", sector / 8),
                        ("sector", sector),
                        ("nsid", 1),
                        ("len", 4096),
                        ("dev", DEV as u64),
                        ("opcode", 0x02),
                    ],
                ),
                Kind::Mid(0) => host(&r, "try_send", m, &[]),
                Kind::Mid(1) => host(&r, "done_send_req", m, &[]),
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
