//! Merging a host-only and a target-only nvme-tcp recording made on two machines whose
//! clocks disagree: a constant offset between the monotonic clocks (seconds, or days
//! when the machines booted at different times), wall clocks that disagree by less
//! than `--max-skew-ms`, and a drifting offset (the target's clock runs fast or slow).
//! Kernel-free: the rows are synthetic but shaped like the VM's (two I/O queues at
//! QD 8, blk-mq tags reused with the 4-bit generation of the command id, one or two
//! round trips, network and target times of tens to hundreds of µs), and go through
//! the public `ntprof_perf::correlate::merge::merge`. Every I/O carries its number in
//! `slba` on both sides, so a pairing can be checked, not just counted.

use ntprof_perf::profile::nvme_tcp::merge::{merge, MergeStats, Row};
use ntprof_perf::profile::nvme_tcp::model::{HostPart, TargetPart, TcpRecord};
use ntprof_perf::sink::time::format_utc;

/// xorshift64*: deterministic, so a failure is reproducible from the seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in lo..=hi.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// One I/O with every mark on the host's clock (the target's are converted later).
struct Io {
    qid: u16,
    cid: u16,
    id: u64,
    /// B, Q, S1, R1, R_last (host); A1, Z1, Z_last (target, on the host clock).
    b: u64,
    q: u64,
    s1: u64,
    r1: u64,
    r_last: u64,
    a1: u64,
    z1: u64,
    z_last: u64,
    rounds: u32,
}

const US: u64 = 1_000;
/// Host monotonic clock at the first I/O: the machine has been up ~17 minutes.
const T0: u64 = 1_000_000_000_000;
/// Wall clock − monotonic clock of the host.
const HOST_WALL: i128 = 1_795_000_000_000_000_000;

/// I/Os on 2 queues × 8 tags for about `span_ns`: each tag issues one I/O at a time
/// (as blk-mq does), back to back or after an idle gap, so a command id comes back
/// every 16 uses of its tag.
fn traffic(seed: u64, span_ns: u64) -> Vec<Io> {
    let mut rng = Rng(seed);
    let mut ios = Vec::new();
    for qid in 1..=2u16 {
        for tag in 0..8u16 {
            let mut t = T0 + rng.range(0, 50 * US);
            let mut gen = 0u16;
            while t < T0 + span_ns {
                let b = t;
                let q = b + rng.range(5 * US, 20 * US);
                let s1 = q + rng.range(5 * US, 50 * US);
                let a1 = s1 + rng.range(20 * US, 150 * US);
                let z1 = a1 + rng.range(20 * US, 200 * US);
                let r1 = z1 + rng.range(20 * US, 150 * US);
                // A quarter are R2T writes: a second round trip for the data.
                let (rounds, z_last, r_last) = if rng.range(0, 3) == 0 {
                    let s2 = r1 + rng.range(10 * US, 30 * US);
                    let a2 = s2 + rng.range(20 * US, 150 * US);
                    let z2 = a2 + rng.range(20 * US, 200 * US);
                    (2, z2, z2 + rng.range(20 * US, 150 * US))
                } else {
                    (1, z1, r1)
                };
                let e = r_last + rng.range(10 * US, 50 * US);
                ios.push(Io {
                    qid,
                    cid: (gen & 0xf) << 12 | tag,
                    id: ios.len() as u64,
                    b,
                    q,
                    s1,
                    r1,
                    r_last,
                    a1,
                    z1,
                    z_last,
                    rounds,
                });
                gen += 1;
                // Bursts (the next command right away) and idle stretches.
                t = e + if rng.range(0, 1) == 0 {
                    rng.range(0, 20 * US)
                } else {
                    rng.range(100 * US, 4_000 * US)
                };
            }
        }
    }
    ios
}

/// How the target's clocks relate to the host's.
#[derive(Debug, Clone, Copy)]
struct Clocks {
    /// Target monotonic − host monotonic at T0.
    offset_ns: i64,
    /// Target clock rate − host clock rate, in parts per million.
    drift_ppm: f64,
    /// Target wall clock − host wall clock (what NTP left).
    wall_err_ns: i64,
}

impl Clocks {
    fn target(&self, host_ns: u64) -> u64 {
        let since = host_ns as f64 - T0 as f64;
        (host_ns as i128 + self.offset_ns as i128 + (since * self.drift_ppm / 1e6) as i128) as u64
    }
    /// Host − target clock (merge's convention) at a host time.
    fn host_minus_target(&self, host_ns: u64) -> i64 {
        host_ns as i64 - self.target(host_ns) as i64
    }
}

fn rows(ios: &[Io], c: Clocks) -> Vec<Row> {
    let mut out = Vec::with_capacity(ios.len() * 2);
    // The target's wall clock follows its own monotonic clock (same clocksource).
    let target_wall = HOST_WALL + c.wall_err_ns as i128 - (c.target(T0) as i128 - T0 as i128);
    for io in ios {
        let host = HostPart {
            cntlid: 1,
            qid: io.qid,
            cid: io.cid,
            tag: io.cid & 0xfff,
            opcode: Some(if io.rounds == 2 { 1 } else { 2 }),
            write: io.rounds == 2,
            slba: Some(io.id),
            bytes: Some(4096),
            rounds: io.rounds,
            send_calls: io.rounds,
            start_ns: io.b,
            queue_ns: Some(io.q),
            send_ns: Some(io.s1),
            recv_ns: Some(io.r1),
            last_recv_ns: Some(io.r_last),
            waiting: Some(io.r1 - io.s1),
            total: Some(io.r_last - io.b),
            nvme_status: Some(0),
            ..Default::default()
        };
        out.push(Row {
            start_time: format_utc(io.b as i128 + HOST_WALL),
            start_ns: io.b,
            rec: TcpRecord {
                host: Some(host),
                target: None,
                expect_host: true,
                expect_target: false,
                dropped: false,
            },
        });
        let a1 = c.target(io.a1);
        let target = TargetPart {
            cntlid: 1,
            qid: io.qid,
            cid: io.cid,
            opcode: if io.rounds == 2 { 1 } else { 2 },
            slba: io.id,
            len: 4096,
            rounds: io.rounds,
            r2t: io.rounds == 2,
            recv_ns: a1,
            send_ns: Some(c.target(io.z1)),
            last_send_ns: Some(c.target(io.z_last)),
            total: Some(io.z_last - io.a1),
            nvme_status: Some(0),
            ..Default::default()
        };
        out.push(Row {
            start_time: format_utc(a1 as i128 + target_wall),
            start_ns: a1,
            rec: TcpRecord {
                host: None,
                target: Some(target),
                expect_host: false,
                expect_target: true,
                dropped: false,
            },
        });
    }
    out
}

struct Outcome {
    st: MergeStats,
    /// Pairs whose two parts are different I/Os.
    wrong: u64,
    /// The true host − target offset over the run (first I/O, last I/O).
    truth: (i64, i64),
}

fn run(ios: &[Io], c: Clocks, max_skew_ns: u64) -> Outcome {
    let (merged, st) = merge(rows(ios, c), max_skew_ns);
    let wrong = merged
        .iter()
        .filter_map(|r| Some((r.rec.host.as_ref()?, r.rec.target.as_ref()?)))
        .filter(|(h, t)| h.slba != Some(t.slba))
        .count() as u64;
    let last = ios.iter().map(|io| io.b).max().unwrap_or(T0);
    Outcome {
        st,
        wrong,
        truth: (c.host_minus_target(T0), c.host_minus_target(last)),
    }
}

/// The narrowest window a true pair leaves for the offset ([S1 − A1, R1 − Z1]): no
/// estimate from these rows can be better than that.
fn narrowest(ios: &[Io]) -> i64 {
    ios.iter()
        .map(|io| ((io.r1 - io.z1) + (io.a1 - io.s1)) as i64)
        .min()
        .unwrap()
}

const SPAN: u64 = 5_000_000_000;
const SKEW: u64 = 50_000_000; // merge's default --max-skew-ms 50

#[test]
fn constant_offsets_pair_every_row_and_are_recovered() {
    let ios = traffic(0x5eed, SPAN);
    assert!(ios.len() > 20_000, "{} I/Os", ios.len());
    // Command ids do come back while the run lasts (that is what pairing must survive).
    let mut seen = std::collections::HashMap::new();
    for io in &ios {
        *seen.entry((io.qid, io.cid)).or_insert(0u32) += 1;
    }
    assert!(seen.values().all(|&n| n > 10));
    let width = narrowest(&ios);
    for (what, c) in [
        (
            "target clock 3.7 s ahead",
            Clocks {
                offset_ns: 3_700_000_000,
                drift_ppm: 0.0,
                wall_err_ns: 0,
            },
        ),
        (
            "target clock 3.7 s behind",
            Clocks {
                offset_ns: -3_700_000_000,
                drift_ppm: 0.0,
                wall_err_ns: 0,
            },
        ),
        (
            "target booted a day earlier, wall clocks 30 ms apart",
            Clocks {
                offset_ns: 86_400_000_000_000 + 123_456_789,
                drift_ppm: 0.0,
                wall_err_ns: 30_000_000,
            },
        ),
        (
            "3.7 s ahead, wall clocks 45 ms apart the other way",
            Clocks {
                offset_ns: 3_700_000_000,
                drift_ppm: 0.0,
                wall_err_ns: -45_000_000,
            },
        ),
    ] {
        let o = run(&ios, c, SKEW);
        let err = o.st.offset_ns - o.truth.0;
        eprintln!(
            "{what}: {} I/Os, paired {}, wrong {}, offset {} ns (true {}; off by {err} ns, \
             narrowest window {width} ns), {} of {} round trips agree",
            ios.len(),
            o.st.paired,
            o.wrong,
            o.st.offset_ns,
            o.truth.0,
            o.st.agreeing,
            o.st.considered
        );
        assert_eq!(
            o.wrong, 0,
            "{what}: a host row got another I/O's target part"
        );
        assert_eq!(o.st.paired, ios.len() as u64, "{what}: every row paired");
        assert_eq!(
            (o.st.host_rows, o.st.target_rows),
            (ios.len() as u64, ios.len() as u64)
        );
        // The true offset lies in every pair's window, so the estimate (inside the
        // intersection of the most windows) is off by less than the narrowest one.
        assert!(err.abs() <= width, "{what}: offset off by {err} ns");
    }
}

/// A drifting offset: the target's clock runs `ppm` fast or slow over a 10 s run, so
/// the true offset moves by ppm × 5 µs. merge estimates one offset for the whole run;
/// pairing tolerates an error up to the slack of each I/O (queue-to-arrival before,
/// reply-to-receive after, ≥ 20 µs here). Within that, every row must pair and the
/// estimate must fall inside the range the offset went through.
#[test]
fn drifting_offset_within_the_slack_pairs_every_row() {
    let ios = traffic(0xd21f7, SPAN);
    let width = narrowest(&ios);
    for ppm in [0.5, -1.0, 2.0] {
        let c = Clocks {
            offset_ns: 3_700_000_000,
            drift_ppm: ppm,
            wall_err_ns: 5_000_000,
        };
        let o = run(&ios, c, SKEW);
        let (lo, hi) = (o.truth.0.min(o.truth.1), o.truth.0.max(o.truth.1));
        eprintln!(
            "drift {ppm} ppm: {} I/Os, paired {}, wrong {}, offset {} ns, true offset went \
             {} → {} ns",
            ios.len(),
            o.st.paired,
            o.wrong,
            o.st.offset_ns,
            o.truth.0,
            o.truth.1
        );
        assert_eq!(o.wrong, 0, "drift {ppm} ppm: wrong pairs");
        assert_eq!(
            o.st.paired,
            ios.len() as u64,
            "drift {ppm} ppm: unpaired rows"
        );
        assert!(
            (lo - width..=hi + width).contains(&o.st.offset_ns),
            "drift {ppm} ppm: offset {} outside [{lo}, {hi}] ± {width}",
            o.st.offset_ns
        );
    }
}

/// Beyond the slack (tens of ppm over seconds, e.g. while NTP slews the clock after a
/// step), one offset cannot fit the whole run: rows go unpaired. They must stay
/// unpaired rather than be paired with another I/O of the same command id.
#[test]
fn drifting_offset_beyond_the_slack_never_pairs_wrongly() {
    let ios = traffic(0xbadc10c, SPAN);
    for ppm in [10.0, -50.0, 500.0] {
        let c = Clocks {
            offset_ns: -3_700_000_000,
            drift_ppm: ppm,
            wall_err_ns: 0,
        };
        let o = run(&ios, c, SKEW);
        eprintln!(
            "drift {ppm} ppm: {} I/Os, paired {} ({:.1} %), wrong {}, offset {} ns, true \
             offset went {} → {} ns",
            ios.len(),
            o.st.paired,
            o.st.paired as f64 * 100.0 / ios.len() as f64,
            o.wrong,
            o.st.offset_ns,
            o.truth.0,
            o.truth.1
        );
        assert_eq!(o.wrong, 0, "drift {ppm} ppm: a row paired with another I/O");
    }
}

/// Wall clocks further apart than `max_skew` than the default: a wider `max_skew`
/// finds every pair.
#[test]
fn wall_clocks_apart_need_a_wider_max_skew() {
    let ios = traffic(0x3a11, 2_000_000_000);
    let wide = run(&ios, WALL_80MS, 200_000_000);
    eprintln!(
        "wall clocks 80 ms apart, max skew 200 ms: paired {} of {} (wrong {}), offset {} (true {})",
        wide.st.paired,
        ios.len(),
        wide.wrong,
        wide.st.offset_ns,
        wide.truth.0
    );
    assert_eq!((wide.wrong, wide.st.paired), (0, ios.len() as u64));
    assert!((wide.st.offset_ns - wide.truth.0).abs() <= narrowest(&ios));
}

const WALL_80MS: Clocks = Clocks {
    offset_ns: 3_700_000_000,
    drift_ppm: 0.0,
    wall_err_ns: 80_000_000,
};

/// With the default 50 ms the true offset is outside the search window; rows may then
/// stay unpaired, but none may be paired with another I/O. Before `fits` compared the
/// opcode, slba and length both sides record, merge paired host rows with the target
/// row of another generation of the same command id (282 of 22,162 here).
#[test]
fn wall_clocks_beyond_max_skew_never_pair_wrongly() {
    let ios = traffic(0x3a11, 2_000_000_000);
    let narrow = run(&ios, WALL_80MS, SKEW);
    eprintln!(
        "wall clocks 80 ms apart, max skew 50 ms: paired {} of {}, wrong {}, offset {} (true {})",
        narrow.st.paired,
        ios.len(),
        narrow.wrong,
        narrow.st.offset_ns,
        narrow.truth.0
    );
    assert_eq!(
        narrow.wrong, 0,
        "rows paired with another I/O's target part"
    );
}
