//! The offline half of what a profile-guided build is trained on (`scripts/build-pgo.sh`;
//! the live half is `record` and `stat` on a loop device). It runs the product's own
//! code, as `record` and `stat` build it: each profile's plan, bound to formats captured
//! from a kernel (`tracefs/`), driven through `Stages` in drain rounds, its records
//! written as CSV (discarded), as Parquet (a scratch file) and into `stat`'s table.
//! The streams are the synthetic I/Os of `ntprof_perf::synth`: block, and nvme-tcp's 13
//! events per I/O (the profile that needs a patched kernel, so no host here traces it
//! live). The profiles it does not run (bio, nvme, nvmet) get no profile data, and the
//! build compiles them as an ordinary release build does (`llvm-profdata merge
//! --sparse`).
//!
//! `cargo run --release --example pgo_train [-- IOS]` (default 400,000 I/Os a profile:
//! ≈ 0.5 GB of memory at its peak, the nvme-tcp stream's 5.2 M samples, ≈ 7 s).
//! Prints the rows per profile; it fails if a stream does not come out as one `ok` row
//! per I/O, so a training run that trained on error paths does not pass unseen.

use ntprof_perf::device::SysBlock;
use ntprof_perf::profile::{self, Profile};
use ntprof_perf::record::{IoRecord, Status};
use ntprof_perf::sink::csv::CsvSink;
use ntprof_perf::sink::parquet::{FileInfo, ParquetSink};
use ntprof_perf::sink::recorder::RowWriter;
use ntprof_perf::sink::stat::StatTable;
use ntprof_perf::sink::time::WallClock;
use ntprof_perf::synth::{self, PerCpu};
use ntprof_perf::tracefs::{Tracefs, TracefsError};
use std::path::{Path, PathBuf};

/// A profile's synthetic I/Os, laid out by a captured tree's formats.
type Stream<'a> = &'a dyn Fn(&Tracefs) -> Result<PerCpu, TracefsError>;

/// Event time per drain round: 2,000 I/Os at the streams' 1 µs apart, as a busy
/// host's 20 ms round holds.
const ROUND_NS: u64 = 2_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ios: u64 = match std::env::args().nth(1) {
        Some(a) => a
            .parse()
            .map_err(|_| format!("IOS: a count of I/Os, not {a:?}"))?,
        None => 400_000,
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tracefs");
    let scratch = std::env::temp_dir().join(format!("ntprof-pgo-train-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let runs: [(&str, &str, Stream); 2] = [
        ("block", "block/block_rq_issue", &|t| {
            synth::block_ios(t, ios, 4)
        }),
        ("nvme-tcp", "nvme_tcp/nvme_tcp_queue_rq", &|t| {
            synth::nvme_tcp_ios(t, ios)
        }),
    ];
    let result = runs.iter().try_for_each(|(name, event, make)| {
        let tree = synth::newest_tree(&root, event)
            .ok_or_else(|| format!("no captured tree under {} has {event}", root.display()))?;
        let tfs = Tracefs::at(&tree)?;
        let p = profile::find(name).ok_or_else(|| format!("no profile {name}"))?;
        let rows = replay(p, &tfs, &make(&tfs)?, &scratch.join("rows.parquet"))?;
        if rows != ios {
            return Err(format!("{name}: {rows} ok rows for {ios} I/Os").into());
        }
        println!("{name}: {rows} rows (CSV, Parquet, stat's table)");
        Ok::<_, Box<dyn std::error::Error>>(())
    });
    std::fs::remove_dir_all(&scratch)?;
    result
}

/// The `ok` rows of one replay of `streams` through `p`'s plan.
fn replay(
    p: &'static dyn Profile,
    tfs: &Tracefs,
    streams: &PerCpu,
    parquet: &Path,
) -> Result<u64, Box<dyn std::error::Error>> {
    // As `import` plans: every event the formats have, the profile's flags at their
    // defaults, no device of this host named.
    let sys = SysBlock::none();
    let mut stages = profile::plan_offline(p, tfs, sys)?.stages;
    let clock = WallClock::now();
    let schema = p.schema();
    let mut csv = CsvSink::from_writer(Box::new(std::io::sink()), "nowhere".into(), schema, clock)?;
    let info = FileInfo::this_host(schema, 1, clock);
    let mut pq = ParquetSink::create(parquet, schema, clock, &info)?;
    let mut table = StatTable::new(schema);
    let mut ok = 0u64;
    let mut failed = None;
    let mut out = |r: &dyn IoRecord, n: u32| {
        ok += u64::from(r.status() == Status::Ok);
        table.add(r, n);
        if let Err(e) = csv.write(r, n).and_then(|_| pq.write(r, n)) {
            failed.get_or_insert(e);
        }
    };
    // Rounds as the live loop drains them: the clock read first, then every ring's
    // samples stamped before it, then a release held back to the round before.
    let mut pos = vec![0usize; streams.len()];
    let end = streams.iter().filter_map(|s| s.last()).map(|x| x.0).max();
    let mut now = 0;
    while end.is_some_and(|end| now <= end) {
        now += ROUND_NS;
        stages.begin_round(now);
        for (cpu, (s, at)) in streams.iter().zip(&mut pos).enumerate() {
            while let Some((t, raw)) = s.get(*at).filter(|x| x.0 < now) {
                stages.sample(*t, cpu as u32, raw);
                *at += 1;
            }
        }
        stages.hold_until(Some(now - ROUND_NS));
        stages.end_round(&mut out);
    }
    stages.hold_until(None);
    stages.finish(&mut out);
    if let Some(e) = failed {
        return Err(e.into());
    }
    csv.finish()?;
    pq.finish()?;
    Ok(ok)
}
