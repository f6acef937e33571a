//! Tests of the nvme profile: records laid out by the formats captured from the 6.1
//! guest, decoded and correlated.

use super::correlate::NvmeCorrelator;
use super::record::NvmeRecord;
use crate::correlate::Status;
use crate::correlate::{Correlator, Counters};
use crate::decode::Decoder;
use crate::order::Sorter;
use crate::profile::shared::cmd::CmdSelect;
use crate::profile::shared::cmd::NvmeConfig;
use crate::profile::shared::nvme_events::layout;
use crate::profile::shared::nvme_events::HostEvent;
use crate::record::IoRecord;
use crate::synth::RecordBuilder;
use crate::testutil::{cells, labels};
use crate::tracefs::{EventFormat, Tracefs};

/// The formats captured from the 6.1 guest of the VM rig (tests/vm), checked in
/// under `tracefs/<uname -r>/`: samples are laid out exactly as that kernel does.
pub(crate) fn guest_tracefs() -> Tracefs {
    crate::testutil::captured_tracefs(
        &["nvme/nvme_setup_cmd", "nvmet/nvmet_req_init"],
        "nvme and nvmet events (tests/vm/run.sh tests/vm/guest/capture-formats.sh OUT)",
    )
}

pub(crate) const NVME_DEV: u32 = 259 << 20;

pub(crate) struct Formats {
    pub(crate) setup: EventFormat,
    pub(crate) done: EventFormat,
    pub(crate) bio: EventFormat,
    pub(crate) insert: EventFormat,
    pub(crate) complete: EventFormat,
    pub(crate) decoder: Decoder<HostEvent>,
}

pub(crate) fn formats() -> Formats {
    let tfs = guest_tracefs();
    let mut decoder = Decoder::new();
    for (s, e) in [
        ("nvme", "nvme_setup_cmd"),
        ("nvme", "nvme_complete_rq"),
        ("block", "block_bio_queue"),
        ("block", "block_rq_insert"),
        ("block", "block_rq_complete"),
    ] {
        decoder.add(&tfs, s, e, layout).unwrap();
    }
    Formats {
        setup: tfs.event("nvme", "nvme_setup_cmd").unwrap(),
        done: tfs.event("nvme", "nvme_complete_rq").unwrap(),
        bio: tfs.event("block", "block_bio_queue").unwrap(),
        insert: tfs.event("block", "block_rq_insert").unwrap(),
        complete: tfs.event("block", "block_rq_complete").unwrap(),
        decoder,
    }
}

/// cdw10..15 of a read/write: SLBA in dwords 10-11, 0-based NLB in dword 12.
pub(crate) fn rw_dwords(slba: u64, blocks: u32) -> [u8; 24] {
    let mut c = [0u8; 24];
    c[..8].copy_from_slice(&slba.to_le_bytes());
    c[8..10].copy_from_slice(&((blocks - 1) as u16).to_le_bytes());
    c[12..16].copy_from_slice(&0xdead_beefu32.to_le_bytes()); // cdw13: must be ignored
    c
}

pub(crate) fn cmd_raw(
    fmt: &EventFormat,
    (ctrl, qid, cid): (u64, u64, u64),
    opcode: u64,
    nsid: u64,
    cdw: &[u8; 24],
    disk: &[u8],
) -> Vec<u8> {
    RecordBuilder::new(fmt)
        .int("ctrl_id", ctrl)
        .int("qid", qid)
        .int("cid", cid)
        .int("opcode", opcode)
        .int("nsid", nsid)
        .int("flags", 0x40)
        .bytes("cdw10", cdw)
        .bytes("disk", disk)
        .build()
}

pub(crate) fn done_raw(
    fmt: &EventFormat,
    ctrl: u64,
    qid: u64,
    cid: u64,
    status: u64,
    disk: &[u8],
) -> Vec<u8> {
    RecordBuilder::new(fmt)
        .int("ctrl_id", ctrl)
        .int("qid", qid)
        .int("cid", cid)
        .int("status", status)
        .int("result", 0)
        .bytes("disk", disk)
        .build()
}

fn block_raw(fmt: &EventFormat, sector: u64, nr: u64, rwbs: &[u8]) -> Vec<u8> {
    RecordBuilder::new(fmt)
        .int("dev", NVME_DEV as u64)
        .int("sector", sector)
        .int("nr_sector", nr)
        .bytes("rwbs", rwbs)
        .build()
}

fn config(lba: u32) -> NvmeConfig {
    NvmeConfig {
        lba_sizes: [("nvme0n1".to_string(), lba)].into(),
        disk_devs: [("nvme0n1".to_string(), NVME_DEV)].into(),
        ..Default::default()
    }
}

fn run_on(
    f: &Formats,
    cfg: NvmeConfig,
    samples: &[(u64, u32, Vec<u8>)],
) -> (Vec<NvmeRecord>, Counters) {
    let mut c = NvmeCorrelator::new(cfg);
    let mut out = Vec::new();
    for (t, cpu, raw) in samples {
        let ev = f
            .decoder
            .decode(raw, *t, *cpu)
            .unwrap()
            .expect("bound event");
        c.on_event(&ev, &mut |r| out.push(r));
    }
    c.finish(&mut |r| out.push(r));
    (out, c.counters())
}

fn rq_done_raw(fmt: &EventFormat, sector: u64, nr: u64) -> Vec<u8> {
    RecordBuilder::new(fmt)
        .int("dev", NVME_DEV as u64)
        .int("sector", sector)
        .int("nr_sector", nr)
        .int("error", 0)
        .bytes("rwbs", b"WS")
        .dynamic("cmd", b"\0")
        .build()
}

/// 6.1 NVMe/TCP: a write that needed an R2T completes with the target's transfer
/// tag where the cid should be. The block completion right after it on the same
/// CPU names the request.
#[test]
fn a_wrong_cid_is_corrected_by_the_block_completion() {
    let f = formats();
    let w = |slba| rw_dwords(slba, 256);
    let (r, c) = run_on(
        &f,
        config(512),
        &[
            (
                10,
                0,
                cmd_raw(&f.setup, (0, 1, 0x2029), 0x01, 1, &w(0), b"nvme0n1"),
            ),
            (
                20,
                1,
                cmd_raw(&f.setup, (0, 1, 0x0005), 0x01, 1, &w(4096), b"nvme0n1"),
            ),
            // cid 0x0003 (a ttag) names nothing: still 0x2029's completion.
            (100, 0, done_raw(&f.done, 0, 1, 0x0003, 0, b"nvme0n1")),
            (101, 0, rq_done_raw(&f.complete, 0, 256)),
            // cid 0x2029 is free again; a ttag of 5 names the *other* command in
            // flight, but the block completion says sector 8192... of the third one.
            (
                110,
                0,
                cmd_raw(&f.setup, (0, 1, 0x3029), 0x01, 1, &w(8192), b"nvme0n1"),
            ),
            (200, 1, done_raw(&f.done, 0, 1, 0x0005, 0, b"nvme0n1")),
            (201, 1, rq_done_raw(&f.complete, 8192, 256)),
            // Then 0x0005 completes with its right cid.
            (300, 0, done_raw(&f.done, 0, 1, 0x0005, 0, b"nvme0n1")),
            (301, 0, rq_done_raw(&f.complete, 4096, 256)),
        ],
    );
    assert_eq!(c, Counters::default(), "nothing unmatched or given up");
    let got: Vec<(u16, Option<u64>, u64)> = r
        .iter()
        .map(|r| (r.core.cid, r.core.slba, r.core.cmd_ns.unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            (0x2029, Some(0), 90),
            (0x3029, Some(8192), 90),
            (0x0005, Some(4096), 280)
        ]
    );
}

/// The multipath head `nvme1n1` (the one disk sysfs numbers) and its hidden path
/// `nvme1c1n1`'s number, which only block events carry.
const HEAD: u32 = NVME_DEV | 1;
const PATH: u32 = NVME_DEV | 5;

fn multipath_config() -> NvmeConfig {
    NvmeConfig {
        lba_sizes: [("nvme1c1n1".to_string(), 512)].into(),
        disk_devs: [("nvme1n1".to_string(), HEAD)].into(),
        ..Default::default()
    }
}

/// A 128 KiB write's bio, queued on the head.
fn head_bio(f: &Formats, sector: u64) -> Vec<u8> {
    RecordBuilder::new(&f.bio)
        .int("dev", HEAD as u64)
        .int("sector", sector)
        .int("nr_sector", 256)
        .bytes("rwbs", b"WS")
        .build()
}

/// A request's block completion on disk `dev`.
fn rq_done_on(f: &Formats, dev: u32, sector: u64, nr_sector: u64) -> Vec<u8> {
    RecordBuilder::new(&f.complete)
        .int("dev", dev as u64)
        .int("sector", sector)
        .int("nr_sector", nr_sector)
        .int("error", 0)
        .bytes("rwbs", b"WS")
        .dynamic("cmd", b"\0")
        .build()
}

/// NVMe native multipath: commands run on a hidden path disk (`nvme1c1n1`) whose
/// device number sysfs does not give, and their bios are queued on the namespace head
/// (`nvme1n1`). The bio is joined through the head; the path's number is learned from
/// its first block completion, after which a wrong cid is corrected as on any disk.
#[test]
fn multipath_paths_join_their_heads_bios_and_learn_their_number() {
    let f = formats();
    let cfg = multipath_config();
    let bio = |sector: u64| head_bio(&f, sector);
    let rq_done = |sector: u64| rq_done_on(&f, PATH, sector, 256);
    let w = |slba| rw_dwords(slba, 256);
    let d = b"nvme1c1n1";
    let (r, c) = run_on(
        &f,
        cfg,
        &[
            (5, 0, bio(0)),
            (10, 0, cmd_raw(&f.setup, (1, 1, 0x2029), 0x01, 1, &w(0), d)),
            // Held for its block completion (the path's number not known yet), which
            // teaches it.
            (100, 0, done_raw(&f.done, 1, 1, 0x2029, 0, d)),
            (101, 0, rq_done(0)),
            (105, 1, bio(4096)),
            (
                110,
                1,
                cmd_raw(&f.setup, (1, 1, 0x0005), 0x01, 1, &w(4096), d),
            ),
            (115, 0, bio(8192)),
            (
                120,
                0,
                cmd_raw(&f.setup, (1, 1, 0x3029), 0x01, 1, &w(8192), d),
            ),
            // A ttag of 5 names the other command in flight: the block completion at
            // 8192, on the learned number, says which one it is.
            (200, 1, done_raw(&f.done, 1, 1, 0x0005, 0, d)),
            (201, 1, rq_done(8192)),
            (300, 0, done_raw(&f.done, 1, 1, 0x0005, 0, d)),
            (301, 0, rq_done(4096)),
        ],
    );
    assert_eq!(c, Counters::default(), "nothing unmatched or given up");
    let got: Vec<(u16, Option<u64>, Option<u64>)> = r
        .iter()
        .map(|r| (r.core.cid, r.core.slba, r.block_ns))
        .collect();
    assert_eq!(
        got,
        [
            (0x2029, Some(0), Some(5)),
            (0x3029, Some(8192), Some(115)),
            (0x0005, Some(4096), Some(105))
        ],
        "each command with its bio's time on the head"
    );
}

#[test]
fn a_path_is_learned_from_its_commands_when_the_first_completions_carry_wrong_cids() {
    // R2T writes only (6.1 NVMe/TCP): no completion names its own command before the
    // path's number is known, so the number is learned from the command in flight at
    // the block completion's sector, not from the cid.
    let f = formats();
    let cfg = multipath_config();
    let bio = |sector: u64| head_bio(&f, sector);
    let rq_done = |sector: u64| rq_done_on(&f, PATH, sector, 256);
    let w = |slba| rw_dwords(slba, 256);
    let d = b"nvme1c1n1";
    let (r, c) = run_on(
        &f,
        cfg,
        &[
            (5, 0, bio(0)),
            (10, 0, cmd_raw(&f.setup, (1, 1, 0x2029), 0x01, 1, &w(0), d)),
            (105, 1, bio(4096)),
            (
                110,
                1,
                cmd_raw(&f.setup, (1, 1, 0x0005), 0x01, 1, &w(4096), d),
            ),
            // Names the other command in flight; the block completion at 0 says whose
            // it is, and teaches the path's number.
            (200, 0, done_raw(&f.done, 1, 1, 0x0005, 0, d)),
            (201, 0, rq_done(0)),
            // Names no command at all.
            (300, 1, done_raw(&f.done, 1, 1, 0x7777, 0, d)),
            (301, 1, rq_done(4096)),
        ],
    );
    assert_eq!(c, Counters::default(), "nothing unmatched or given up");
    let got: Vec<(u16, Option<u64>, Option<u64>, u64)> = r
        .iter()
        .map(|r| {
            (
                r.core.cid,
                r.core.slba,
                r.block_ns,
                r.core.cmd_ns.unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (0x2029, Some(0), Some(5), 190),
            (0x0005, Some(4096), Some(105), 190)
        ],
        "each write with its own completion and its bio's time on the head"
    );
}

#[test]
fn a_path_that_cannot_be_learned_settles_by_cid() {
    // Two paths not learned yet with a command each at the same sector: a block
    // completion there cannot say whose number it carries. Nothing is learned, and what
    // the CPU holds goes out by its cid at the next completion, as after any batch.
    let f = formats();
    let cfg = NvmeConfig {
        lba_sizes: [
            ("nvme1c1n1".to_string(), 512),
            ("nvme2c2n1".to_string(), 512),
        ]
        .into(),
        disk_devs: [("nvme1n1".to_string(), NVME_DEV | 1)].into(),
        ..Default::default()
    };
    let rq_done = |dev: u32, sector: u64| rq_done_on(&f, dev, sector, 8);
    let rd = rw_dwords(64, 8);
    let (a, b) = (b"nvme1c1n1", b"nvme2c2n1");
    let (r, c) = run_on(
        &f,
        cfg,
        &[
            (10, 0, cmd_raw(&f.setup, (1, 1, 7), 0x02, 1, &rd, a)),
            (20, 0, cmd_raw(&f.setup, (2, 1, 9), 0x02, 1, &rd, b)),
            (100, 0, done_raw(&f.done, 1, 1, 7, 0, a)),
            (101, 0, rq_done(NVME_DEV | 5, 64)),
            (200, 0, done_raw(&f.done, 2, 1, 9, 0, b)),
            (201, 0, rq_done(NVME_DEV | 6, 64)),
        ],
    );
    assert_eq!(c, Counters::default(), "nothing unmatched or given up");
    let got: Vec<(u16, u64)> = r
        .iter()
        .map(|r| (r.core.cid, r.core.cmd_ns.unwrap_or(0)))
        .collect();
    assert_eq!(got, [(7, 90), (9, 180)], "each by its cid");
}

#[test]
fn without_a_block_completion_the_cid_is_trusted() {
    let f = formats();
    let (r, c) = run_on(
        &f,
        config(512),
        &[
            (
                10,
                0,
                cmd_raw(&f.setup, (0, 1, 7), 0x02, 1, &rw_dwords(0, 8), b"nvme0n1"),
            ),
            (
                20,
                0,
                cmd_raw(&f.setup, (0, 1, 8), 0x02, 1, &rw_dwords(8, 8), b"nvme0n1"),
            ),
            // A failed attempt the driver retries: no block completion follows.
            (30, 0, done_raw(&f.done, 0, 1, 7, 0x0370, b"nvme0n1")),
            (40, 0, done_raw(&f.done, 0, 1, 8, 0, b"nvme0n1")),
            (41, 0, rq_done_raw(&f.complete, 8, 8)),
        ],
    );
    assert_eq!(c, Counters::default());
    let cid = |n| r.iter().find(|r| r.core.cid == n).unwrap();
    assert_eq!(cid(7).status(), Status::Error);
    assert_eq!(cid(8).core.cmd_ns, Some(20));
}

/// Decode raw samples `(time, raw)` with the real layouts and correlate them.
fn run(f: &Formats, cfg: NvmeConfig, samples: &[(u64, Vec<u8>)]) -> (Vec<NvmeRecord>, Counters) {
    let mut c = NvmeCorrelator::new(cfg);
    let mut out = Vec::new();
    for (t, raw) in samples {
        let ev = f.decoder.decode(raw, *t, 0).unwrap().expect("bound event");
        c.on_event(&ev, &mut |r| out.push(r));
    }
    c.finish(&mut |r| out.push(r));
    (out, c.counters())
}

#[test]
fn real_6_1_layouts_have_the_expected_field_types() {
    let f = formats();
    let ty = |fmt: &EventFormat, n: &str| {
        let fl = fmt.field(n).unwrap();
        (fl.type_name.clone(), fl.size)
    };
    assert_eq!(ty(&f.setup, "cid"), ("u16".into(), 2));
    assert_eq!(ty(&f.done, "cid"), ("int".into(), 4));
    assert_eq!(ty(&f.setup, "cdw10"), ("u8".into(), 24));
    assert_eq!(ty(&f.setup, "disk"), ("char".into(), 32));
    assert_eq!(ty(&f.done, "status"), ("u16".into(), 2));
}

#[test]
fn read_joined_with_its_bio_gives_every_field_and_stage() {
    let f = formats();
    let cdw = rw_dwords(2048, 8);
    let (r, c) = run(
        &f,
        config(512),
        &[
            (1_000, block_raw(&f.bio, 2048, 8, b"R")),
            (
                1_700,
                cmd_raw(&f.setup, (0, 2, 0x1005), 0x02, 1, &cdw, b"nvme0n1"),
            ),
            (9_700, done_raw(&f.done, 0, 2, 0x1005, 0, b"nvme0n1")),
        ],
    );
    assert_eq!(c, Counters::default());
    assert_eq!(r.len(), 1);
    let r = &r[0];
    assert_eq!(r.start_ns(), 1_000);
    assert_eq!(
        (r.blk_to_driver_ns(), r.core.cmd_ns, r.total_ns()),
        (Some(700), Some(8_000), Some(8_700))
    );
    assert_eq!(r.status(), Status::Ok);
    assert_eq!(
        cells(r),
        [
            "nvme0", "nvme0n1", "2", "4101", "1", "read", "2048", "4096", "512", "<=4k", "700",
            "8000", "8700", "0x0", "0", "1", "1", "ok"
        ]
    );
    assert_eq!(cells(r).len() + 2, r.schema().columns.len());
    assert_eq!(labels(r), ["nvme0", "1", "read", "<=4k"]);
}

#[test]
fn write_on_4k_lba_scales_bytes_and_sector() {
    let f = formats();
    // 32 LBAs of 4 KiB at LBA 100 = 128 KiB at 512-byte sector 800; the request
    // was inserted (a scheduler), no bio event traced.
    let cdw = rw_dwords(100, 32);
    let (r, _) = run(
        &f,
        config(4096),
        &[
            (10, block_raw(&f.insert, 800, 256, b"WS")),
            (50, cmd_raw(&f.setup, (0, 1, 7), 0x01, 1, &cdw, b"nvme0n1")),
            (450, done_raw(&f.done, 0, 1, 7, 0, b"nvme0n1")),
        ],
    );
    let c = &r[0].core;
    assert_eq!(
        (c.slba, c.bytes, c.lba_size),
        (Some(100), Some(131_072), 4096)
    );
    assert_eq!(
        cells(&r[0])[5..10],
        ["write", "100", "131072", "4096", "<=128k"]
    );
    assert_eq!(r[0].blk_to_driver_ns(), Some(40));
}

#[test]
fn unknown_disk_assumes_512_and_has_no_block_stage() {
    let f = formats();
    let cdw = rw_dwords(8, 1);
    let (r, _) = run(
        &f,
        NvmeConfig::default(),
        &[
            (10, block_raw(&f.bio, 8, 1, b"R")),
            (50, cmd_raw(&f.setup, (1, 1, 7), 0x02, 1, &cdw, b"nvme1n1")),
            (90, done_raw(&f.done, 1, 1, 7, 0, b"nvme1n1")),
        ],
    );
    assert_eq!((r[0].core.bytes, r[0].core.lba_size), (Some(512), 512));
    assert_eq!((r[0].blk_to_driver_ns(), r[0].total_ns()), (None, None));
    let cl = cells(&r[0]);
    assert_eq!(
        (cl[10].as_str(), cl[12].as_str()),
        ("", ""),
        "no stage: empty cells"
    );
}

#[test]
fn flush_has_no_range_and_zero_bytes() {
    let f = formats();
    let (r, _) = run(
        &f,
        config(512),
        &[
            (
                10,
                cmd_raw(&f.setup, (0, 1, 3), 0x00, 1, &[0; 24], b"nvme0n1"),
            ),
            (20, done_raw(&f.done, 0, 1, 3, 0, b"nvme0n1")),
        ],
    );
    let cl = cells(&r[0]);
    assert_eq!(cl[5..10], ["flush", "", "0", "512", "0"]);
}

#[test]
fn error_status_is_reported_not_hidden() {
    let f = formats();
    let cdw = rw_dwords(0, 8);
    // 0x4002: DNR + Invalid Field in Command.
    let (r, c) = run(
        &f,
        config(512),
        &[
            (10, cmd_raw(&f.setup, (0, 1, 3), 0x02, 1, &cdw, b"nvme0n1")),
            (20, done_raw(&f.done, 0, 1, 3, 0x4002, b"nvme0n1")),
        ],
    );
    assert_eq!(r[0].status(), Status::Error);
    assert_eq!(r[0].core.nvme_status, Some(0x4002));
    let cl = cells(&r[0]);
    assert_eq!((cl[13].as_str(), cl[17].as_str()), ("0x4002", "error"));
    assert_eq!(c.unmatched, 0);
}

#[test]
fn a_reused_cid_replaces_the_command_in_flight_and_is_counted() {
    let f = formats();
    let cdw = rw_dwords(0, 8);
    let (r, c) = run(
        &f,
        config(512),
        &[
            (10, cmd_raw(&f.setup, (0, 1, 9), 0x02, 1, &cdw, b"nvme0n1")),
            // Its completion was lost; the cid comes back for a write.
            (50, cmd_raw(&f.setup, (0, 1, 9), 0x01, 1, &cdw, b"nvme0n1")),
            (80, done_raw(&f.done, 0, 1, 9, 0, b"nvme0n1")),
        ],
    );
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].status(), r[0].core.opcode),
        (Status::Incomplete, 0x02)
    );
    assert_eq!(r[0].core.cmd_ns, None);
    assert_eq!(
        cells(&r[0])[13],
        "",
        "no NVMe status for an incomplete command"
    );
    assert_eq!(
        (r[1].status(), r[1].core.opcode, r[1].core.cmd_ns),
        (Status::Ok, 0x01, Some(30))
    );
    assert_eq!(
        (c.requeued, c.incomplete, c.unmatched, c.in_flight),
        (1, 1, 0, 0)
    );
}

#[test]
fn admin_queue_is_skipped_unless_asked() {
    let f = formats();
    let ka = [
        (10, cmd_raw(&f.setup, (0, 0, 1), 0x18, 0, &[0; 24], b"")),
        (20, done_raw(&f.done, 0, 0, 1, 0, b"")),
    ];
    let (r, c) = run(&f, config(512), &ka);
    assert!(r.is_empty());
    assert_eq!(c, Counters::default(), "skipped, not unmatched");
    let mut cfg = config(512);
    cfg.select.admin = true;
    let (r, _) = run(&f, cfg, &ka);
    let cl = cells(&r[0]);
    assert_eq!(
        (cl[1].as_str(), cl[2].as_str(), cl[5].as_str()),
        ("", "0", "keep_alive")
    );
    assert_eq!(
        (cl[6].as_str(), cl[7].as_str(), cl[9].as_str()),
        ("", "", "")
    );
}

#[test]
fn completion_read_before_setup_across_cpus_is_ordered_by_the_sorter() {
    let f = formats();
    let cdw = rw_dwords(64, 8);
    let setup = cmd_raw(&f.setup, (0, 1, 5), 0x02, 1, &cdw, b"nvme0n1");
    let done = done_raw(&f.done, 0, 1, 5, 0, b"nvme0n1");
    let mut sorter = Sorter::new();
    // CPU 1's ring is drained first and holds the completion; CPU 0 the setup.
    sorter.begin_round(50);
    sorter.push(1, f.decoder.decode(&done, 300, 1).unwrap().unwrap());
    sorter.push(0, f.decoder.decode(&setup, 100, 0).unwrap().unwrap());
    let mut c = NvmeCorrelator::new(config(512));
    let mut out = Vec::new();
    sorter.end_round(|ev| c.on_event(ev, &mut |r| out.push(r)));
    sorter.begin_round(200);
    sorter.end_round(|ev| c.on_event(ev, &mut |r| out.push(r)));
    assert!(out.is_empty(), "only the setup is released yet");
    sorter.flush(|ev| c.on_event(ev, &mut |r| out.push(r)));
    c.finish(&mut |r| out.push(r));
    assert_eq!(out.len(), 1);
    assert_eq!(
        (out[0].core.cmd_ns, out[0].status()),
        (Some(200), Status::Ok)
    );
    assert_eq!(c.counters(), Counters::default());
}

#[test]
fn unmatched_completion_is_counted() {
    let f = formats();
    let (r, c) = run(
        &f,
        config(512),
        &[
            (5, done_raw(&f.done, 0, 1, 77, 0, b"nvme0n1")),
            (
                6,
                cmd_raw(&f.setup, (0, 1, 78), 0x02, 1, &rw_dwords(0, 1), b"nvme0n1"),
            ),
            // Same qid and cid on controller nvme1: not nvme0's command.
            (7, done_raw(&f.done, 1, 1, 78, 0, b"nvme1n1")),
        ],
    );
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].status(), r[0].core.ctrl_id), (Status::Incomplete, 0));
    assert_eq!((c.unmatched, c.incomplete), (2, 1));
}

#[test]
fn selection_by_ctrl_qid_nsid() {
    let f = formats();
    let cdw = rw_dwords(0, 1);
    let samples = [
        (1, cmd_raw(&f.setup, (0, 1, 1), 0x02, 1, &cdw, b"nvme0n1")),
        (2, cmd_raw(&f.setup, (0, 1, 2), 0x02, 2, &cdw, b"nvme0n2")),
        (3, cmd_raw(&f.setup, (1, 2, 3), 0x02, 1, &cdw, b"nvme1n1")),
        (4, done_raw(&f.done, 0, 1, 1, 0, b"nvme0n1")),
        (5, done_raw(&f.done, 0, 1, 2, 0, b"nvme0n2")),
        (6, done_raw(&f.done, 1, 2, 3, 0, b"nvme1n1")),
    ];
    let pick = |s: CmdSelect| {
        let mut cfg = config(512);
        cfg.select = s;
        let (r, c) = run(&f, cfg, &samples);
        let mut cids: Vec<u16> = r.iter().map(|r| r.core.cid).collect();
        cids.sort_unstable();
        (cids, c.unmatched)
    };
    assert_eq!(pick(CmdSelect::default()), (vec![1, 2, 3], 0));
    let nsid2 = CmdSelect {
        nsid: Some(2),
        ..Default::default()
    };
    assert_eq!(
        pick(nsid2),
        (vec![2], 0),
        "other namespaces' completions are not unmatched"
    );
    assert_eq!(
        pick(CmdSelect {
            ctrl: Some(1),
            ..Default::default()
        }),
        (vec![3], 0)
    );
    assert_eq!(
        pick(CmdSelect {
            qid: Some(1),
            ..Default::default()
        }),
        (vec![1, 2], 0)
    );
}

#[test]
fn kernel_filters() {
    assert_eq!(
        CmdSelect::default()
            .cmd_filter()
            .map(|f| f.render())
            .as_deref(),
        Some("qid != 0")
    );
    let all = CmdSelect {
        admin: true,
        ..Default::default()
    };
    assert_eq!(all.cmd_filter(), None);
    let s = CmdSelect {
        ctrl: Some(0),
        nsid: Some(1),
        ..Default::default()
    };
    assert_eq!(
        s.cmd_filter().map(|f| f.render()).as_deref(),
        Some("ctrl_id == 0 && qid != 0 && nsid == 1")
    );
    assert_eq!(
        s.done_filter().map(|f| f.render()).as_deref(),
        Some("ctrl_id == 0 && qid != 0")
    );
    let q = CmdSelect {
        qid: Some(3),
        ..Default::default()
    };
    assert_eq!(
        q.cmd_filter().map(|f| f.render()).as_deref(),
        Some("qid == 3")
    );
}

#[test]
fn memory_is_bounded_by_giving_up_the_oldest() {
    let f = formats();
    let cdw = rw_dwords(0, 1);
    let mut cfg = config(512);
    cfg.max_in_flight = 10;
    let mut c = NvmeCorrelator::new(cfg);
    let mut out = Vec::new();
    for i in 0..100u64 {
        let raw = cmd_raw(&f.setup, (0, 1, i), 0x02, 1, &cdw, b"nvme0n1");
        let ev = f.decoder.decode(&raw, i, 0).unwrap().unwrap();
        c.on_event(&ev, &mut |r| out.push(r));
        assert!(c.tracker.in_flight() <= 10);
    }
    assert!(!out.is_empty());
    assert!(out.iter().all(|r| r.status() == Status::Incomplete));
    assert_eq!(out[0].core.submit_ns, 0, "oldest first");
    assert_eq!(c.counters().incomplete as usize, out.len());
}

#[test]
fn garbage_values_do_not_panic() {
    let f = formats();
    let max = u64::MAX;
    let (r, _) = run(
        &f,
        config(4096),
        &[
            (
                max,
                cmd_raw(
                    &f.setup,
                    (max, max, max),
                    0x02,
                    max,
                    &[0xff; 24],
                    &[0xff; 40],
                ),
            ),
            (0, block_raw(&f.bio, max, max, b"\xff\xff")),
            (1, done_raw(&f.done, max, max, max, max, &[0xff; 40])),
            (2, rq_done_raw(&f.complete, max, max)),
        ],
    );
    assert_eq!(r.len(), 1);
    let n = cells(&r[0]).len();
    assert_eq!(n + 2, r[0].schema().columns.len());
}

#[test]
fn truncated_records_are_errors_not_panics() {
    let f = formats();
    let raw = cmd_raw(&f.setup, (0, 1, 1), 0x02, 1, &[0; 24], b"nvme0n1");
    let cdw = f.setup.field("cdw10").unwrap();
    for n in 2..(cdw.offset + cdw.size) as usize {
        assert!(f.decoder.decode(&raw[..n], 0, 0).is_err(), "{n} bytes");
    }
}

#[test]
fn a_batch_of_completions_pairs_each_block_completion_by_its_place() {
    // nvme_complete_batch: every nvme_complete_rq of the batch, then every
    // block_rq_complete, on one CPU. Commands 1 and 3 share a hot sector; 3 is still in
    // flight after the batch and must not take 1's block completion.
    let f = formats();
    let (r, c) = run_on(
        &f,
        config(512),
        &[
            (
                10,
                0,
                cmd_raw(&f.setup, (0, 1, 1), 0x02, 1, &rw_dwords(0, 8), b"nvme0n1"),
            ),
            (
                11,
                0,
                cmd_raw(&f.setup, (0, 1, 2), 0x02, 1, &rw_dwords(8, 8), b"nvme0n1"),
            ),
            (
                12,
                0,
                cmd_raw(&f.setup, (0, 1, 3), 0x02, 1, &rw_dwords(0, 8), b"nvme0n1"),
            ),
            (30, 0, done_raw(&f.done, 0, 1, 1, 0, b"nvme0n1")),
            (31, 0, done_raw(&f.done, 0, 1, 2, 0, b"nvme0n1")),
            (33, 0, rq_done_raw(&f.complete, 0, 8)),
            (34, 0, rq_done_raw(&f.complete, 8, 8)),
        ],
    );
    let cid = |n| r.iter().find(|r| r.core.cid == n).unwrap();
    assert_eq!(
        (cid(1).status(), cid(1).core.cmd_ns),
        (Status::Ok, Some(20))
    );
    assert_eq!(
        (cid(2).status(), cid(2).core.cmd_ns),
        (Status::Ok, Some(20))
    );
    assert_eq!(cid(3).status(), Status::Incomplete);
    assert_eq!((c.unmatched, c.incomplete), (0, 1));
}

/// An fsync's write without data completes in the block layer right after its flush
/// command, with no command of its own: it must not take a held completion that waits
/// for its own block completion (here one whose cid is wrong, as after an R2T).
#[test]
fn the_completion_of_a_flush_carrier_pairs_with_no_command() {
    let f = formats();
    let (r, c) = run_on(
        &f,
        config(512),
        &[
            (
                10,
                0,
                cmd_raw(
                    &f.setup,
                    (0, 1, 0x2029),
                    0x01,
                    1,
                    &rw_dwords(4096, 256),
                    b"nvme0n1",
                ),
            ),
            (100, 0, done_raw(&f.done, 0, 1, 0x0003, 0, b"nvme0n1")),
            (101, 0, rq_done_raw(&f.complete, 0, 0)),
            (102, 0, rq_done_raw(&f.complete, 4096, 256)),
        ],
    );
    assert_eq!(c, Counters::default());
    let got: Vec<_> = r.iter().map(|r| (r.core.cid, r.core.cmd_ns)).collect();
    assert_eq!(got, [(0x2029, Some(90))]);
}

/// Sustained ring overflow (see `overflow_sim`), with and without the block completions
/// that check a completion's cid: no command takes a later one's completion. Also with
/// the losses told as a capture's LOST records tell them, of events not known.
#[test]
fn under_sustained_loss_no_command_takes_a_later_ones_completion() {
    use crate::profile::shared::overflow_sim::{closed_loop, overflow, Kind, Sample};
    let f = formats();
    let cmds = closed_loop(400);
    let names = [
        (Kind::Setup, "nvme:nvme_setup_cmd"),
        (Kind::Done, "nvme:nvme_complete_rq"),
        (Kind::BlockDone, "block:block_rq_complete"),
    ];
    let raw = |s: &Sample| {
        let m = &cmds[s.cmd];
        match s.kind {
            Kind::Setup => cmd_raw(
                &f.setup,
                (0, m.qid, m.cid),
                0x02,
                1,
                &rw_dwords(m.slba, 8),
                b"nvme0n1",
            ),
            Kind::Done => done_raw(&f.done, 0, m.qid, m.cid, 0, b"nvme0n1"),
            Kind::BlockDone => rq_done_raw(&f.complete, m.slba, 8),
            Kind::Mid(_) | Kind::Any => unreachable!("no such sample here"),
        }
    };
    for block in [false, true] {
        let sim = overflow(&cmds, block);
        // Told per event, and as a capture's LOST records tell them.
        for sim in [&sim, &sim.as_lost_records()] {
            let mut cfg = config(512);
            if !block {
                cfg.disk_devs.clear();
            }
            let mut c = NvmeCorrelator::new(cfg);
            let rows = sim.replay(&mut c, &names, &f.decoder, raw, |r: &NvmeRecord| {
                (r.core.submit_ns, r.status(), r.core.cmd_ns)
            });
            sim.check(&cmds, &rows, c.counters().cut);
            assert_eq!(c.counters().incomplete, 0, "block completions: {block}");
        }
    }
}
