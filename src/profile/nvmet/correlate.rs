//! The nvmet profile's correlator and record: target `nvmet_req_init` →
//! `nvmet_req_complete`, keyed by (cntlid, qid, cid): how long each command stays in
//! the target.

use crate::correlate::{Correlator, Counters, Starts};
use crate::decode::Event;
use crate::profile::shared::cmd::{CmdCore, CmdTracker, Finished, NvmeConfig};
use crate::profile::shared::cmd_columns::{
    core_columns, nvme_status_column, qd_column, status_column, HasCore,
};
use crate::profile::shared::nvme_events::NvmeEvent;
use crate::record::{opt, Column, Kind, Role, Value};

/// One command as the target saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmetRecord {
    /// `disk` is the namespace's backing `device_path`; `cmd_ns` the residence time.
    pub core: CmdCore,
}

impl HasCore for NvmetRecord {
    fn core(&self) -> &CmdCore {
        &self.core
    }
}

const CORE: [Column<NvmetRecord>; 8] = core_columns::<NvmetRecord>();

static COLUMNS: &[Column<NvmetRecord>] = &[
    Column {
        name: "start_time",
        role: Role::StartTime,
        kind: Kind::Timestamp,
        get: |r| Value::Time(r.core.submit_ns),
    },
    Column {
        name: "start_ns",
        role: Role::Value,
        kind: Kind::U64,
        get: |r| Value::U64(r.core.submit_ns),
    },
    Column {
        name: "cntlid",
        role: Role::Label,
        kind: Kind::U64,
        get: |r| Value::U64(r.core.ctrl_id as u64),
    },
    Column {
        name: "device",
        role: Role::Place,
        kind: Kind::Text,
        get: |r| Value::Str(r.core.disk.as_str()),
    },
    CORE[0],
    CORE[1],
    CORE[2],
    CORE[3],
    CORE[4],
    CORE[5],
    CORE[6],
    CORE[7],
    Column {
        name: "target_ns",
        role: Role::Stage,
        kind: Kind::U64,
        get: |r| opt(r.core.cmd_ns),
    },
    nvme_status_column(),
    qd_column(),
    status_column(),
];

crate::tabled!(
    NvmetRecord,
    "nvmet",
    COLUMNS,
    |r| r.core.submit_ns,
    |r| r.core.status,
    |r, s| r.core.status = s
);

pub struct NvmetCorrelator {
    tracker: CmdTracker,
}

impl NvmetCorrelator {
    /// `cfg.disk_devs` is not used: the target's block I/O is not joined.
    pub fn new(cfg: NvmeConfig) -> NvmetCorrelator {
        let mut tracker = CmdTracker::new(cfg);
        tracker.ctrl0_fallback = true;
        NvmetCorrelator { tracker }
    }

    fn record((p, done): Finished) -> NvmetRecord {
        NvmetRecord {
            core: CmdTracker::core(&p, done),
        }
    }
}

impl Correlator for NvmetCorrelator {
    type Event = NvmeEvent;
    type Record = NvmetRecord;

    fn on_event(&mut self, ev: &Event<NvmeEvent>, out: &mut dyn FnMut(NvmetRecord)) {
        let e = &ev.kind;
        let tracker = &mut self.tracker;
        match e {
            NvmeEvent::Cmd(c) => {
                if tracker.selected(ev.time, c) {
                    tracker.submit(ev.time, c, None, &mut |f| out(Self::record(f)));
                }
            }
            NvmeEvent::Done(d) => tracker.complete(ev.time, d, &mut |f| out(Self::record(f))),
        }
    }

    fn finish(&mut self, out: &mut dyn FnMut(NvmetRecord)) {
        self.tracker.finish(&mut |f| out(Self::record(f)));
    }

    fn counters(&self) -> Counters {
        self.tracker.counters()
    }

    fn on_missing(&mut self, gap: &crate::correlate::Gap<'_>) -> bool {
        self.tracker.on_missing(gap, "nvmet_req_complete");
        true
    }

    fn unmatched_at(&self, t: u64) -> u64 {
        self.tracker.unmatched_log.at(t)
    }

    fn gate(&mut self) -> Option<&mut crate::correlate::gate::Gate> {
        Some(&mut self.tracker.gate)
    }

    /// Each command selected is initialised once; the kernel filters the same
    /// selection.
    fn starts(&self) -> Option<Starts> {
        self.tracker.gate.steady().then_some(Starts {
            event: "nvmet:nvmet_req_init",
            again: 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Decoder;
    use crate::profile::nvme::tests::{guest_tracefs, rw_dwords};
    use crate::profile::nvmet::events::layout;
    use crate::profile::shared::cmd::CmdSelect;
    use crate::record::{IoRecord, Status};
    use crate::synth::RecordBuilder;
    use crate::testutil::{cells, labels};
    use crate::tracefs::EventFormat;

    struct F {
        init: EventFormat,
        done: EventFormat,
        decoder: Decoder<NvmeEvent>,
    }

    fn formats() -> F {
        let tfs = guest_tracefs();
        let mut decoder = Decoder::new();
        decoder
            .add(&tfs, "nvmet", "nvmet_req_init", layout)
            .unwrap();
        decoder
            .add(&tfs, "nvmet", "nvmet_req_complete", layout)
            .unwrap();
        F {
            init: tfs.event("nvmet", "nvmet_req_init").unwrap(),
            done: tfs.event("nvmet", "nvmet_req_complete").unwrap(),
            decoder,
        }
    }

    fn init(f: &F, ctrl: u64, qid: u64, cid: u64, opcode: u64, cdw: &[u8; 24]) -> Vec<u8> {
        RecordBuilder::new(&f.init)
            .int("cmd", 0xffff_8880_1234_5678)
            .int("ctrl_id", ctrl)
            .bytes("disk", b"/dev/nullb0")
            .int("qid", qid)
            .int("cid", cid)
            .int("opcode", opcode)
            // The only fabrics command the tests send is connect (fctype 1).
            .int("fctype", if opcode == 0x7f { 0x01 } else { 0 })
            .int("nsid", 1)
            .int("metadata", 0)
            .bytes("cdw10", cdw)
            .build()
    }

    fn done(f: &F, ctrl: u64, qid: u64, cid: u64, status: u64) -> Vec<u8> {
        RecordBuilder::new(&f.done)
            .int("ctrl_id", ctrl)
            .bytes("disk", b"/dev/nullb0")
            .int("qid", qid)
            .int("cid", cid)
            .int("result", 0)
            .int("status", status)
            .build()
    }

    fn run(f: &F, cfg: NvmeConfig, samples: &[(u64, Vec<u8>)]) -> (Vec<NvmetRecord>, Counters) {
        let mut c = NvmetCorrelator::new(cfg);
        let mut out = Vec::new();
        for (t, raw) in samples {
            let ev = f.decoder.decode(raw, *t, 0).unwrap().expect("bound event");
            c.on_event(&ev, &mut |r| out.push(r));
        }
        c.finish(&mut |r| out.push(r));
        (out, c.counters())
    }

    fn cfg() -> NvmeConfig {
        NvmeConfig {
            // The target's namespace is keyed by its device path's last component.
            lba_sizes: [("nullb0".to_string(), 512)].into(),
            ..Default::default()
        }
    }

    #[test]
    fn real_6_1_layout_field_types() {
        let f = formats();
        let ty = |fmt: &EventFormat, n: &str| {
            let fl = fmt.field(n).unwrap();
            (fl.type_name.clone(), fl.size)
        };
        assert_eq!(ty(&f.init, "ctrl_id"), ("u16".into(), 2));
        assert_eq!(ty(&f.init, "cid"), ("u16".into(), 2));
        assert_eq!(ty(&f.done, "cid"), ("int".into(), 4));
        assert_eq!(ty(&f.init, "cdw10"), ("u8".into(), 24));
    }

    #[test]
    fn read_write_and_error_on_the_target() {
        let f = formats();
        let (r, c) = run(
            &f,
            cfg(),
            &[
                (100, init(&f, 1, 2, 0x2001, 0x02, &rw_dwords(4096, 8))),
                (150, init(&f, 1, 1, 0x3001, 0x01, &rw_dwords(0, 256))),
                (400, done(&f, 1, 2, 0x2001, 0)),
                (900, done(&f, 1, 1, 0x3001, 0x0280)),
            ],
        );
        assert_eq!(c, Counters::default());
        assert_eq!(r.len(), 2);
        assert_eq!(
            cells(&r[0]),
            [
                "1",
                "/dev/nullb0",
                "2",
                "8193",
                "1",
                "read",
                "4096",
                "4096",
                "512",
                "<=4k",
                "300",
                "0x0",
                // Queue depth is per queue: the write in flight is on another one.
                "1",
                "ok"
            ]
        );
        assert_eq!(cells(&r[0]).len() + 2, r[0].schema().columns.len());
        assert_eq!(r[0].start_ns(), 100);
        assert_eq!(
            cells(&r[1])[5..],
            ["write", "0", "131072", "512", "<=128k", "750", "0x280", "1", "error"]
        );
        assert_eq!(r[1].status(), Status::Error);
        assert_eq!(labels(&r[1]), ["1", "1", "write", "<=128k"]);
    }

    #[test]
    fn connect_is_matched_across_the_cntlid_it_creates() {
        let f = formats();
        let mut c = cfg();
        c.select = CmdSelect {
            admin: true,
            ..Default::default()
        };
        let (r, n) = run(
            &f,
            c,
            &[
                (10, init(&f, 0, 0, 1, 0x7f, &[0; 24])),
                (30, done(&f, 3, 0, 1, 0)),
            ],
        );
        assert_eq!(n.unmatched, 0);
        assert_eq!(
            (r[0].core.cmd_ns, r[0].core.opcode_label().as_ref()),
            (Some(20), "connect")
        );
    }

    #[test]
    fn reuse_admin_and_unmatched() {
        let f = formats();
        let (r, c) = run(
            &f,
            cfg(),
            &[
                (1, init(&f, 1, 0, 5, 0x18, &[0; 24])), // keep-alive: skipped
                (2, done(&f, 1, 0, 5, 0)),
                (3, init(&f, 1, 1, 6, 0x02, &rw_dwords(0, 8))),
                (4, init(&f, 1, 1, 6, 0x02, &rw_dwords(8, 8))),
                (5, done(&f, 1, 1, 6, 0)),
                (6, done(&f, 1, 1, 99, 0)),
            ],
        );
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].status(), r[0].core.slba),
            (Status::Incomplete, Some(0))
        );
        assert_eq!((r[1].status(), r[1].core.slba), (Status::Ok, Some(8)));
        assert_eq!((c.requeued, c.incomplete, c.unmatched), (1, 1, 1));
    }

    /// Sustained ring overflow (see `overflow_sim`). Before the tracker kept missing
    /// completions, a command that lost its completion took the completion of the
    /// command 16 uses of its tag later whose setup went missing too: 851 `ok` rows of
    /// ≈ 1.7 ms among commands of 80-400 µs.
    #[test]
    fn under_sustained_loss_no_command_takes_a_later_ones_completion() {
        use crate::profile::shared::overflow_sim::{closed_loop, overflow, Kind};
        let f = formats();
        let cmds = closed_loop(400);
        let sim = overflow(&cmds, false);
        let names = [
            (Kind::Setup, "nvmet:nvmet_req_init"),
            (Kind::Done, "nvmet:nvmet_req_complete"),
        ];
        let raw = |s: &crate::profile::shared::overflow_sim::Sample| {
            let m = &cmds[s.cmd];
            match s.kind {
                Kind::Setup => init(&f, 1, m.qid, m.cid, 0x02, &rw_dwords(m.slba, 8)),
                _ => done(&f, 1, m.qid, m.cid, 0),
            }
        };
        // Told per event, and as a capture's LOST records tell them.
        for sim in [&sim, &sim.as_lost_records()] {
            let mut c = NvmetCorrelator::new(cfg());
            let rows = sim.replay(&mut c, &names, &f.decoder, raw, |r: &NvmetRecord| {
                (r.core.submit_ns, r.status(), r.core.cmd_ns)
            });
            sim.check(&cmds, &rows, c.counters().cut);
            assert_eq!(c.counters().incomplete, 0);
        }
    }
}
