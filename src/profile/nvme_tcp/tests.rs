//! Tests of the nvme-tcp profile: scenarios built from the real formats captured from
//! the patched 6.1 guest, fed through decode → order → correlate. Bounds, merge and
//! garbage input are in `tests_bounds.rs`.

use super::events::{NvmeTcpEvent, TcpSlot};
use super::join::TcpCorrelator;
use super::model::{Side, TcpConfig, TcpRecord};
use super::EVENTS;
use crate::correlate::Counters;
use crate::decode::Decoder;
use crate::pipeline::Pipeline;
use crate::record::IoRecord;
use crate::synth::RecordBuilder;
use crate::tracefs::{EventFormat, Tracefs};
use std::collections::HashMap;

/// The formats captured from the patched 6.1 guest of the VM rig
/// (`tests/vm/capture-tracefs.sh --patches`): records are laid out exactly as that
/// kernel writes them.
pub(super) fn patched_tracefs() -> Tracefs {
    crate::testutil::captured_tracefs(
        &[
            "nvme_tcp/nvme_tcp_queue_rq",
            "nvmet_tcp/nvmet_tcp_done_recv_pdu",
            "block/block_bio_queue",
        ],
        "nvme_tcp and nvmet_tcp events (tests/vm/capture-tracefs.sh --patches)",
    )
}

pub(super) const DEV: u32 = 259 << 20;
pub(super) const CTRL: u64 = 0;
pub(super) const CNTLID: u64 = 1;
pub(super) const QID: u64 = 1;

/// Raw records of one scenario, per CPU ring, fed through decode → order → correlate.
pub(super) struct Rig {
    pub(super) fmts: HashMap<String, EventFormat>,
    pub(super) decoder: Decoder<NvmeTcpEvent, TcpSlot>,
    /// (time, cpu, raw) in the order the rings hold them.
    pub(super) samples: Vec<(u64, u32, Vec<u8>)>,
    pub(super) cpu: u32,
    /// (slba, len) of each cid's latest queue_rq: the target's `done_recv_pdu` carries
    /// the same command (merge pairs on it), unless a scenario says otherwise.
    pub(super) cmds: HashMap<u64, (u64, u64)>,
}

pub(super) fn rig() -> Rig {
    let tfs = patched_tracefs();
    let mut decoder = Decoder::direct();
    let mut fmts = HashMap::new();
    for r in EVENTS {
        decoder
            .bind(&tfs, r.system, r.event, |f| {
                TcpSlot::bind(f, r.system, r.event)
            })
            .unwrap();
        fmts.insert(r.event.to_string(), tfs.event(r.system, r.event).unwrap());
    }
    Rig {
        fmts,
        decoder,
        samples: Vec::new(),
        cpu: 0,
        cmds: HashMap::new(),
    }
}

impl Rig {
    pub(super) fn on(&mut self, cpu: u32) -> &mut Self {
        self.cpu = cpu;
        self
    }

    pub(super) fn push(&mut self, t: u64, event: &str, fields: &[(&str, u64)]) -> &mut Self {
        let raw = self.raw(event, fields);
        self.samples.push((t, self.cpu, raw));
        self
    }

    /// A record of `event` with `fields` (the rest 0), laid out as the kernel writes it.
    pub(super) fn raw(&self, event: &str, fields: &[(&str, u64)]) -> Vec<u8> {
        let fmt = &self.fmts[event];
        let mut b = RecordBuilder::new(fmt);
        for (k, v) in fields {
            b = b.int(k, *v);
        }
        if event == "nvme_tcp_queue_rq" {
            b = b.bytes("disk", b"nvme0n1");
        }
        if event.starts_with("block_") {
            b = b.bytes("rwbs", b"R");
        }
        b.build()
    }

    /// A host event of command `cid`.
    pub(super) fn h(&mut self, t: u64, ev: &str, cid: u64, fields: &[(&str, u64)]) -> &mut Self {
        let mut f = vec![
            ("ctrl_id", CTRL),
            ("cntlid", CNTLID),
            ("qid", QID),
            ("cid", cid),
            ("tag", cid & 0xfff),
        ];
        f.extend_from_slice(fields);
        self.push(t, &format!("nvme_tcp_{ev}"), &f)
    }

    /// A target event of command `cid`.
    pub(super) fn t(
        &mut self,
        t: u64,
        ev: &str,
        cid: u64,
        op: u64,
        fields: &[(&str, u64)],
    ) -> &mut Self {
        let mut f = vec![
            ("cntlid", CNTLID),
            ("qid", QID),
            ("cid", cid),
            ("opcode", op),
        ];
        f.extend_from_slice(fields);
        if let (true, Some(&(slba, len))) = (ev == "done_recv_pdu", self.cmds.get(&cid)) {
            for (k, v) in [("slba", slba), ("len", len)] {
                if !f.iter().any(|(name, _)| *name == k) {
                    f.push((k, v));
                }
            }
        }
        self.push(t, &format!("nvmet_tcp_{ev}"), &f)
    }

    pub(super) fn bio(&mut self, t: u64, sector: u64) -> &mut Self {
        self.push(
            t,
            "block_bio_queue",
            &[("dev", DEV as u64), ("sector", sector), ("nr_sector", 8)],
        )
    }

    pub(super) fn blk_done(&mut self, t: u64, sector: u64) -> &mut Self {
        self.push(
            t,
            "block_rq_complete",
            &[("dev", DEV as u64), ("sector", sector), ("nr_sector", 8)],
        )
    }

    /// A 4k read at sector 0 seen on the host only (a stock target), up to its
    /// completion queue entry at `b + 150`; its block completion is the caller's (at
    /// `b + 160` for [`STOCK_READ_STAGES`]).
    pub(super) fn stock_read(&mut self, b: u64, cid: u64) -> &mut Self {
        self.bio(b, 0)
            .queue_rq(b + 10, cid, 2, 4096, 0)
            .h(b + 20, "try_send", cid, &[])
            .h(b + 30, "done_send_req", cid, &[])
            .h(b + 130, "handle_c2h_data", cid, &[("recv_time", b + 120)])
            .h(b + 150, "process_nvme_cqe", cid, &[("recv_time", b + 140)])
    }

    /// The block completion of a write without data that carried an fsync's flush.
    pub(super) fn carrier_done(&mut self, t: u64) -> &mut Self {
        let raw = RecordBuilder::new(&self.fmts["block_rq_complete"])
            .int("dev", DEV as u64)
            .bytes("rwbs", b"WS")
            .build();
        self.samples.push((t, self.cpu, raw));
        self
    }

    pub(super) fn queue_rq(
        &mut self,
        t: u64,
        cid: u64,
        op: u64,
        len: u64,
        sector: u64,
    ) -> &mut Self {
        let inline = (op == 1 && len <= 8192) as u64;
        self.cmds.insert(cid, (sector / 8, len));
        self.h(
            t,
            "queue_rq",
            cid,
            &[
                ("slba", sector / 8),
                ("sector", sector),
                ("nsid", 1),
                ("len", len),
                ("dev", DEV as u64),
                ("opcode", op),
                ("write", (op == 1) as u64),
                ("inline_data", inline),
            ],
        )
    }

    /// Run the rings through the pipeline: each CPU's samples form one ring,
    /// drained in CPU order in rounds of `round` samples per ring.
    pub(super) fn run(&self, cfg: TcpConfig, round: usize) -> (Vec<TcpRecord>, Counters, u64) {
        let mut pipe = Pipeline::new(self.decoder.clone(), TcpCorrelator::new(cfg));
        let mut rings: Vec<Vec<&(u64, u32, Vec<u8>)>> = Vec::new();
        for s in &self.samples {
            let c = s.1 as usize;
            if rings.len() <= c {
                rings.resize(c + 1, Vec::new());
            }
            rings[c].push(s);
        }
        for r in &mut rings {
            r.sort_by_key(|s| s.0);
        }
        let mut out = Vec::new();
        let mut pos = vec![0usize; rings.len()];
        // A replay's clock: no sample still to be fed is older than the oldest head.
        while let Some(now) = rings
            .iter()
            .zip(&pos)
            .filter_map(|(r, &p)| r.get(p).map(|s| s.0))
            .min()
        {
            pipe.begin_round(now);
            for (i, r) in rings.iter().enumerate() {
                let end = (pos[i] + round).min(r.len());
                for s in &r[pos[i]..end] {
                    pipe.sample(s.0, s.1, &s.2);
                }
                pos[i] = end;
            }
            pipe.end_round(&mut |r| out.push(r));
        }
        pipe.finish(&mut |r| out.push(r));
        let h = pipe.health();
        assert_eq!(h.bad_records, 0);
        (out, h.counters, h.late)
    }
}

/// A 4k read, host and target in one recording, every mark present.
pub(super) fn read(r: &mut Rig, base: u64, cid: u64, sector: u64) {
    let b = base;
    r.bio(b, sector)
        .queue_rq(b + 500, cid, 2, 4096, sector)
        .h(b + 600, "try_send", cid, &[])
        .h(b + 700, "done_send_req", cid, &[])
        .t(
            b + 800,
            "done_recv_pdu",
            cid,
            2,
            &[("recv_time", b + 750), ("len", 4096), ("slba", sector / 8)],
        )
        .t(b + 900, "exec_read_req", cid, 2, &[("len", 4096)])
        .t(b + 1400, "queue_response", cid, 2, &[("len", 4096)])
        .t(b + 1500, "try_send_data_pdu", cid, 2, &[("len", 24)])
        .t(b + 1600, "try_send_response", cid, 2, &[("len", 24)])
        .h(
            b + 1700,
            "handle_c2h_data",
            cid,
            &[("recv_time", b + 1650), ("data_len", 4096), ("flags", 4)],
        )
        .h(
            b + 1800,
            "recv_data",
            cid,
            &[("recv_time", b + 1650), ("data_len", 4096), ("flags", 4)],
        )
        .h(
            b + 1900,
            "process_nvme_cqe",
            cid,
            &[("recv_time", b + 1850)],
        )
        .blk_done(b + 2000, sector);
}

/// The host stages of [`Rig::stock_read`] with its block completion 10 ns after the
/// completion queue entry.
const STOCK_READ_STAGES: [u64; 6] = [10, 10, 100, 10, 20, 10];

/// The six host stages, each present.
fn host_stages(r: &TcpRecord) -> Vec<u64> {
    stages(r)[..6].iter().map(|v| v.unwrap()).collect()
}

pub(super) fn stages(r: &TcpRecord) -> Vec<Option<u64>> {
    let s = r.schema();
    s.stages.iter().map(|&i| r.value(i).as_ns()).collect()
}

/// Host stages tile host_total; target stages + network tile waiting.
pub(super) fn assert_tiles(r: &TcpRecord) {
    let s = stages(r);
    let host: u64 = s[0..=5].iter().map(|v| v.unwrap()).sum::<u64>();
    let host_wo_wait = host - s[2].unwrap();
    assert_eq!(
        host,
        s[11].unwrap(),
        "host stages must sum to host_total: {r:?}"
    );
    let tgt: u64 = s[6..=9].iter().map(|v| v.unwrap()).sum();
    assert_eq!(tgt, s[12].unwrap(), "{r:?}");
    assert_eq!(tgt + s[10].unwrap(), s[2].unwrap(), "{r:?}");
    assert_eq!(host_wo_wait + tgt + s[10].unwrap(), s[11].unwrap());
}

pub(super) fn cells(r: &TcpRecord) -> HashMap<&'static str, String> {
    let s = r.schema();
    s.names()
        .enumerate()
        .skip(2)
        .map(|(i, n)| (n, r.value(i).to_text()))
        .collect()
}

#[test]
fn read_every_stage() {
    let mut r = rig();
    read(&mut r, 10_000, 0x1003, 800);
    let (out, c, _) = r.run(TcpConfig::default(), 100);
    assert_eq!(out.len(), 1, "{out:#?}");
    let rec = &out[0];
    assert_eq!(
        stages(rec),
        [500, 100, 1050, 50, 200, 100, 50, 100, 500, 100, 300, 2000, 750]
            .map(Some)
            .to_vec()
    );
    assert_tiles(rec);
    let cl = cells(rec);
    assert_eq!(cl["side"], "both");
    assert_eq!(cl["chain"], "complete");
    assert_eq!(cl["status"], "ok");
    assert_eq!(cl["op"], "read");
    assert_eq!(cl["shape"], "read");
    assert_eq!(cl["size_class"], "<=4k");
    assert_eq!(cl["disk"], "nvme0n1");
    assert_eq!(cl["ctrl"], "nvme0");
    assert_eq!(cl["slba"], "100");
    assert_eq!(
        (cl["round_trips"].as_str(), cl["c2h_pdus"].as_str()),
        ("1", "1")
    );
    assert_eq!(cl["host_send_ns"], "10600");
    assert_eq!(cl["target_recv_ns"], "10750");
    assert_eq!(rec.start_ns(), 10_000);
    assert_eq!(c, Counters::default());
}

#[test]
fn small_write_in_capsule() {
    let mut r = rig();
    let (b, cid) = (50_000, 0x2001);
    r.bio(b, 64)
        .queue_rq(b + 100, cid, 1, 4096, 64)
        .h(b + 150, "try_send", cid, &[])
        .h(b + 300, "done_send_req", cid, &[("state", 2)])
        .t(
            b + 400,
            "done_recv_pdu",
            cid,
            1,
            &[("recv_time", b + 250), ("len", 4096)],
        )
        .t(
            b + 450,
            "try_recv_data",
            cid,
            1,
            &[("recv_time", b + 260), ("data_len", 4096)],
        )
        .t(b + 500, "exec_write_req", cid, 1, &[("len", 4096)])
        .t(b + 800, "queue_response", cid, 1, &[("len", 4096)])
        .t(b + 850, "try_send_response", cid, 1, &[("len", 24)])
        .h(b + 1000, "process_nvme_cqe", cid, &[("recv_time", b + 950)])
        .blk_done(b + 1100, 64);
    let (out, c, _) = r.run(TcpConfig::default(), 100);
    assert_eq!(out.len(), 1);
    let rec = &out[0];
    // blk 100, sub 50 (Q→S), wait 800 (S=150 → R=950), nstack 50, comp 0, blk 100.
    // Target: nstack 150, sub 100, subsys 300, comp 50 = 600; network 200.
    assert_eq!(
        stages(rec),
        [100, 50, 800, 50, 0, 100, 150, 100, 300, 50, 200, 1100, 600]
            .map(Some)
            .to_vec()
    );
    assert_tiles(rec);
    assert_eq!(cells(rec)["shape"], "write-inline");
    assert_eq!(cells(rec)["chain"], "complete");
    assert_eq!(c, Counters::default());
}

/// A 128k R2T write: two round trips, both in the network time; the H2C data in
/// two PDUs and the host's H2C send resumed in a second call.
pub(super) fn r2t_write(r: &mut Rig, b: u64, cid: u64, sector: u64) {
    r.bio(b, sector)
        .queue_rq(b + 100, cid, 1, 131072, sector)
        .h(b + 200, "try_send", cid, &[])
        .h(b + 250, "done_send_req", cid, &[])
        .t(
            b + 400,
            "done_recv_pdu",
            cid,
            1,
            &[("recv_time", b + 300), ("len", 131072)],
        )
        .t(
            b + 450,
            "queue_response",
            cid,
            1,
            &[("r2t", 1), ("len", 131072)],
        )
        .t(b + 500, "try_send_r2t", cid, 1, &[("len", 24)])
        .h(
            b + 700,
            "handle_r2t",
            cid,
            &[("recv_time", b + 600), ("data_len", 131072)],
        )
        .h(b + 750, "try_send", cid, &[("state", 1)])
        .h(b + 900, "try_send", cid, &[("state", 2)])
        .h(b + 1000, "done_send_req", cid, &[("state", 2)])
        .t(
            b + 1050,
            "handle_h2c_data_pdu",
            cid,
            1,
            &[("recv_time", b + 950), ("data_len", 65536)],
        )
        .t(
            b + 1100,
            "try_recv_data",
            cid,
            1,
            &[("recv_time", b + 960), ("data_len", 65536)],
        )
        .t(
            b + 1150,
            "handle_h2c_data_pdu",
            cid,
            1,
            &[("recv_time", b + 1060), ("data_len", 65536)],
        )
        .t(
            b + 1200,
            "try_recv_data",
            cid,
            1,
            &[("recv_time", b + 1120), ("data_len", 65536)],
        )
        .t(b + 1300, "exec_write_req", cid, 1, &[("len", 131072)])
        .t(b + 2300, "queue_response", cid, 1, &[("len", 131072)])
        .t(b + 2400, "try_send_response", cid, 1, &[("len", 24)])
        .t(b + 2410, "try_send_response", cid, 1, &[("len", 10)])
        .h(
            b + 2600,
            "process_nvme_cqe",
            cid,
            &[("recv_time", b + 2500)],
        )
        .blk_done(b + 2700, sector);
}

#[test]
fn large_write_with_r2t_gets_network_time_for_both_round_trips() {
    let mut r = rig();
    r2t_write(&mut r, 100_000, 0x3002, 4096);
    let (out, c, _) = r.run(TcpConfig::default(), 100);
    assert_eq!(out.len(), 1, "{out:#?}");
    let rec = &out[0];
    // Host: Q=100 S1=200 R1=600 F1=700 S2=900 (last call) R2=2500 F2=C=2600 E=2700.
    // sub = (200-100) + (900-700) = 300; wait = 400 + 1600 = 2000; nstack = 100+100.
    // Target: A1=300 P1=400 Z1=500; A2=1120 P2=1200 X=1300 Y=2300 Z2=2400.
    // nstack = 100 + 80; sub = (500-400) + (1300-1200) = 200; subsys 1000; comp 100;
    // total = 200 + 1280 = 1480; network = 2000 - 1480 = 520.
    assert_eq!(
        stages(rec),
        [100, 300, 2000, 200, 0, 100, 180, 200, 1000, 100, 520, 2700, 1480]
            .map(Some)
            .to_vec()
    );
    assert_tiles(rec);
    let cl = cells(rec);
    assert_eq!(cl["shape"], "write-r2t");
    assert_eq!(cl["size_class"], "<=128k");
    assert_eq!(
        (cl["round_trips"].as_str(), cl["target_rounds"].as_str()),
        ("2", "2")
    );
    assert_eq!(
        (
            cl["r2ts"].as_str(),
            cl["h2c_pdus"].as_str(),
            cl["send_calls"].as_str()
        ),
        ("1", "2", "3")
    );
    assert_eq!(cl["chain"], "complete");
    assert_eq!(c, Counters::default());
}

#[test]
fn read_in_several_c2h_pdus_and_send_calls() {
    let mut r = rig();
    let (b, cid) = (7_000, 0x0005);
    r.bio(b, 8)
        .queue_rq(b + 10, cid, 2, 65536, 8)
        .h(b + 20, "try_send", cid, &[])
        .h(b + 40, "try_send", cid, &[]) // the socket took part of the PDU
        .h(b + 50, "done_send_req", cid, &[])
        .t(
            b + 100,
            "done_recv_pdu",
            cid,
            2,
            &[("recv_time", b + 60), ("len", 65536)],
        )
        .t(b + 110, "exec_read_req", cid, 2, &[("len", 65536)])
        .t(b + 200, "queue_response", cid, 2, &[("len", 65536)])
        .t(b + 210, "try_send_data_pdu", cid, 2, &[("len", 24)])
        .t(b + 250, "try_send_data_pdu", cid, 2, &[("len", 24)])
        .t(b + 260, "try_send_response", cid, 2, &[("len", 24)])
        .h(
            b + 300,
            "handle_c2h_data",
            cid,
            &[("recv_time", b + 280), ("data_len", 32768)],
        )
        .h(
            b + 320,
            "recv_data",
            cid,
            &[("recv_time", b + 280), ("data_len", 32768)],
        )
        .h(
            b + 340,
            "handle_c2h_data",
            cid,
            &[
                ("recv_time", b + 330),
                ("data_len", 32768),
                ("data_offset", 32768),
            ],
        )
        .h(
            b + 360,
            "recv_data",
            cid,
            &[("recv_time", b + 330), ("data_len", 32768), ("flags", 4)],
        )
        .h(b + 380, "process_nvme_cqe", cid, &[("recv_time", b + 370)])
        .blk_done(b + 400, 8);
    let (out, _, _) = r.run(TcpConfig::default(), 100);
    assert_eq!(out.len(), 1);
    let rec = &out[0];
    // S1 = 40 (entry of the call that finished), R1 = 280, F1 = 300.
    assert_eq!(
        stages(rec),
        [10, 30, 240, 20, 80, 20, 40, 10, 90, 10, 90, 400, 150]
            .map(Some)
            .to_vec()
    );
    assert_tiles(rec);
    let cl = cells(rec);
    assert_eq!(
        (cl["c2h_pdus"].as_str(), cl["send_calls"].as_str()),
        ("2", "2")
    );
}

#[test]
fn c2h_success_flag_completes_without_a_response_capsule() {
    let mut r = rig();
    let (b, cid) = (9_000, 0x0007);
    r.bio(b, 16)
        .queue_rq(b + 10, cid, 2, 4096, 16)
        .h(b + 20, "try_send", cid, &[])
        .h(b + 30, "done_send_req", cid, &[])
        .t(b + 60, "done_recv_pdu", cid, 2, &[("recv_time", b + 50)])
        .t(b + 70, "exec_read_req", cid, 2, &[])
        .t(b + 100, "queue_response", cid, 2, &[])
        .t(b + 110, "try_send_data_pdu", cid, 2, &[])
        .h(
            b + 150,
            "handle_c2h_data",
            cid,
            &[("recv_time", b + 140), ("flags", 0x0c)],
        )
        .h(
            b + 170,
            "recv_data",
            cid,
            &[("recv_time", b + 140), ("flags", 0x0c)],
        )
        .blk_done(b + 200, 16);
    let (out, c, _) = r.run(TcpConfig::default(), 100);
    assert_eq!(out.len(), 1, "{out:#?}");
    let rec = &out[0];
    assert_eq!(
        stages(rec),
        [10, 10, 120, 10, 20, 30, 10, 10, 30, 10, 60, 200, 60]
            .map(Some)
            .to_vec()
    );
    assert_eq!(cells(rec)["chain"], "complete");
    assert_eq!(c, Counters::default());
}

#[test]
fn reused_cids_pair_host_and_target_by_time() {
    let mut r = rig();
    // The same (cntlid, qid, cid) three times in a row, at other sectors.
    for (i, base) in [10_000u64, 20_000, 30_000].into_iter().enumerate() {
        read(&mut r, base, 0x1001, 800 + 8 * i as u64);
    }
    r2t_write(&mut r, 40_000, 0x1001, 4096);
    let (out, c, _) = r.run(TcpConfig::default(), 3);
    assert_eq!(out.len(), 4, "{out:#?}");
    for (rec, base) in out.iter().zip([10_000u64, 20_000, 30_000, 40_000]) {
        assert_eq!(rec.start_ns(), base);
        let cl = cells(rec);
        assert_eq!(cl["chain"], "complete", "{rec:?}");
        assert_eq!(cl["side"], "both");
        let tr: u64 = cl["target_recv_ns"].parse().unwrap();
        assert!(tr > base && tr < base + 2000, "{rec:?}");
        assert_tiles(rec);
    }
    assert_eq!(c, Counters::default());
}

#[test]
fn out_of_order_across_cpus() {
    let mut r = rig();
    let (b, cid) = (1_000_000, 0x4004);
    // Submission on CPU 0, target on CPU 1, host receive on CPU 1; the send call's
    // done_send_req on CPU 0 is written after the reply was handled on CPU 1.
    r.on(0)
        .bio(b, 24)
        .queue_rq(b + 500, cid, 2, 4096, 24)
        .h(b + 600, "try_send", cid, &[])
        .h(b + 1750, "done_send_req", cid, &[]);
    r.on(1)
        .t(b + 800, "done_recv_pdu", cid, 2, &[("recv_time", b + 750)])
        .t(b + 900, "exec_read_req", cid, 2, &[])
        .t(b + 1400, "queue_response", cid, 2, &[])
        .t(b + 1500, "try_send_data_pdu", cid, 2, &[])
        .t(b + 1600, "try_send_response", cid, 2, &[])
        .h(b + 1700, "handle_c2h_data", cid, &[("recv_time", b + 1650)])
        .h(b + 1800, "recv_data", cid, &[("recv_time", b + 1650)])
        .h(
            b + 1900,
            "process_nvme_cqe",
            cid,
            &[("recv_time", b + 1850)],
        );
    r.on(0).blk_done(b + 2000, 24);
    // One sample per ring per round: CPU 1's completion side is read long before
    // CPU 0's block completion.
    let (out, c, late) = r.run(TcpConfig::default(), 1);
    assert_eq!(late, 0);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!(
        stages(&out[0]),
        [500, 100, 1050, 50, 200, 100, 50, 100, 500, 100, 300, 2000, 750]
            .map(Some)
            .to_vec()
    );
    assert_eq!(c, Counters::default());
}

#[test]
fn lost_events_keep_the_io_and_name_the_gap() {
    let mut r = rig();
    let (b, cid) = (5_000, 0x0009);
    // No try_send/done_send_req (lost), no target exec, no block events.
    r.queue_rq(b, cid, 2, 4096, 32)
        .t(b + 100, "done_recv_pdu", cid, 2, &[("recv_time", b + 90)])
        .t(b + 200, "queue_response", cid, 2, &[])
        .t(b + 210, "try_send_data_pdu", cid, 2, &[])
        .t(b + 220, "try_send_response", cid, 2, &[])
        .h(b + 300, "handle_c2h_data", cid, &[("recv_time", b + 290)])
        .h(b + 320, "process_nvme_cqe", cid, &[("recv_time", 0)]);
    // A completion whose command was never seen.
    r.h(
        b + 400,
        "process_nvme_cqe",
        0x0777,
        &[("recv_time", b + 390)],
    );
    // A command that never completes.
    r.queue_rq(b + 500, 0x000a, 2, 4096, 40)
        .h(b + 510, "try_send", 0x000a, &[]);
    let (out, c, _) = r.run(TcpConfig::default(), 100);
    assert_eq!(out.len(), 2, "{out:#?}");
    let a = cells(&out[0]);
    assert_eq!(a["status"], "incomplete");
    assert_eq!(a["chain"], "missing:blk_start+send+blk_complete+tgt_exec");
    assert_eq!(a["waiting_ns"], "");
    assert_eq!(a["nvme_tcp_submission_ns"], "");
    assert_eq!(a["nstack_completion_ns"], "10");
    assert_eq!(a["nvme_tcp_completion_ns"], "20");
    assert_eq!(a["nstack_submission_ns"], "10");
    assert_eq!(a["target_subsystem_ns"], "");
    assert_eq!(a["nvmet_tcp_completion_ns"], "10");
    assert_eq!(a["network_transmission_ns"], "");
    let b2 = cells(&out[1]);
    assert_eq!(b2["status"], "incomplete");
    assert!(
        b2["chain"].contains("reply") && b2["chain"].contains("completion"),
        "{b2:?}"
    );
    assert_eq!(b2["waiting_ns"], "");
    assert_eq!(c.unmatched, 1);
    assert_eq!(c.incomplete, 1);
}

#[test]
fn host_only_and_target_only_sides() {
    let mut r = rig();
    read(&mut r, 10_000, 0x1003, 800);
    let host = r.run(
        TcpConfig {
            side: Side::Host,
            ..Default::default()
        },
        100,
    );
    let tgt = r.run(
        TcpConfig {
            side: Side::Target,
            ..Default::default()
        },
        100,
    );
    assert_eq!((host.0.len(), tgt.0.len()), (1, 1));
    let h = cells(&host.0[0]);
    assert_eq!(
        (h["side"].as_str(), h["chain"].as_str()),
        ("host", "complete")
    );
    assert_eq!(h["waiting_ns"], "1050");
    assert_eq!(h["target_total_ns"], "");
    assert_eq!(h["network_transmission_ns"], "");
    let t = cells(&tgt.0[0]);
    assert_eq!(
        (t["side"].as_str(), t["chain"].as_str()),
        ("target", "complete")
    );
    assert_eq!(t["target_total_ns"], "750");
    assert_eq!(t["op"], "read");
    assert_eq!(t["waiting_ns"], "");
    assert_eq!(tgt.0[0].start_ns(), 10_750);
}

/// With both sides traced, a target whose host is another machine (a controller no
/// host event of this run names): each of its I/Os waits for a host part that never
/// comes, and goes out alone, complete, when its command id comes back or at the end;
/// it is never counted in flight while it only waits. The local host's I/O still
/// takes its own target part.
#[test]
fn a_remote_hosts_target_parts_go_out_alone() {
    let mut r = rig();
    read(&mut r, 1_000, 0x0002, 16);
    for (b, cid) in [(10_000, 0x0005), (20_000, 0x0005), (30_000, 0x0006)] {
        let remote = [("cntlid", 9)];
        let with = |f: &[(&'static str, u64)]| [f, &remote[..]].concat();
        r.t(
            b,
            "done_recv_pdu",
            cid,
            2,
            &with(&[("recv_time", b - 50), ("len", 4096), ("slba", 7)]),
        )
        .t(b + 100, "exec_read_req", cid, 2, &with(&[("len", 4096)]))
        .t(b + 600, "queue_response", cid, 2, &with(&[("len", 4096)]))
        .t(b + 700, "try_send_data_pdu", cid, 2, &with(&[("len", 24)]))
        .t(b + 800, "try_send_response", cid, 2, &with(&[("len", 24)]));
    }
    let mut pipe = Pipeline::new(r.decoder.clone(), TcpCorrelator::new(TcpConfig::default()));
    let mut out = Vec::new();
    let mut samples = r.samples.clone();
    samples.sort_by_key(|s| s.0);
    for s in &samples {
        pipe.begin_round(s.0);
        pipe.sample(s.0, s.1, &s.2);
        pipe.end_round(&mut |r| out.push(r));
        if s.0 == 30_100 {
            // Released up to 30,000 (a round's lag): the first remote I/O went out
            // when its cid came back, the second only waits.
            assert_eq!(out.len(), 2);
            assert_eq!(pipe.health().counters.in_flight, 0);
        }
    }
    pipe.finish(&mut |r| out.push(r));
    let rows: Vec<_> = out.iter().map(cells).collect();
    let sides: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|c| {
            (
                c["side"].as_str(),
                c["cntlid"].as_str(),
                c["chain"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        sides,
        [
            ("both", "1", "complete"),
            ("target", "9", "complete"),
            ("target", "9", "complete"),
            ("target", "9", "complete"),
        ]
    );
    // From the command's arrival (b − 50) to the first reply sent (b + 700).
    assert_eq!(rows[1]["target_total_ns"], "750");
    assert_eq!(out[1].start_ns(), 9_950);
    let c = pipe.health().counters;
    assert_eq!((c.incomplete, c.unmatched, c.in_flight), (0, 0, 0));
}

#[test]
fn a_stock_target_still_gives_the_host_stages() {
    let mut r = rig();
    let (b, cid) = (3_000, 0x0011);
    let stock = |r: &mut Rig, b: u64| {
        r.stock_read(b, cid).blk_done(b + 160, 0);
    };
    stock(&mut r, b);
    // No target traffic for this controller on this machine (a remote or stock
    // target): complete host-only rows, even though the kernel has nvmet_tcp.
    let (out, _, _) = r.run(TcpConfig::default(), 100);
    let cl = cells(&out[0]);
    assert_eq!(cl["side"], "host");
    assert_eq!(
        (cl["chain"].as_str(), cl["status"].as_str()),
        ("complete", "ok")
    );
    assert_eq!(host_stages(&out[0]), STOCK_READ_STAGES);
    // Once the target side has served this controller, a host I/O without its
    // target part is a gap in the chain.
    read(&mut r, 10_000, 0x1003, 800);
    stock(&mut r, 20_000);
    let (out, _, _) = r.run(TcpConfig::default(), 100);
    assert_eq!(out.len(), 3);
    let cl = cells(&out[2]);
    assert_eq!(
        (cl["side"].as_str(), cl["chain"].as_str()),
        ("host", "missing:target")
    );
    assert_eq!(cl["status"], "incomplete");
}

#[test]
fn sampling_drops_unsampled_block_events_quietly() {
    let mut r = rig();
    // cid 0x1003 has bit 12 set: not sampled with --sample 2 (mask 0x1000).
    read(&mut r, 10_000, 0x1003, 800);
    read(&mut r, 20_000, 0x2003, 808);
    let (out, c, _) = r.run(
        TcpConfig {
            sample_mask: 0x1000,
            ..Default::default()
        },
        100,
    );
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].start_ns(), 20_000);
    assert_eq!(c, Counters::default());
}

#[test]
fn the_completion_of_a_flush_carrier_ends_no_io_at_its_sector() {
    let mut r = rig();
    let (b, cid) = (3_000, 0x0011);
    r.stock_read(b, cid)
        .carrier_done(b + 155)
        .blk_done(b + 160, 0);
    let (out, c, _) = r.run(TcpConfig::default(), 100);
    assert_eq!(out.len(), 1, "{out:#?}");
    assert_eq!((c.unmatched, c.incomplete), (0, 0));
    assert_eq!(host_stages(&out[0]), STOCK_READ_STAGES);
}
