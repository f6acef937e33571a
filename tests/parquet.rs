//! Parquet on the real kernel: DuckDB reads what `record` wrote, the same rows as the
//! CSV of the same run, and a run killed with SIGKILL leaves a readable file.

mod common;

use common::*;
use ntprof_perf::record::Kind;
use serde_json::Value as Json;
use std::path::Path;
use std::process::{Command, Stdio};

/// Run a DuckDB query from Python; the rows come back as JSON.
fn duckdb(sql: &str) -> Vec<Vec<Json>> {
    let py = "import duckdb, json, sys\n\
              rows = duckdb.sql(sys.argv[1]).fetchall()\n\
              print(json.dumps([[c if isinstance(c, (int, float, str, type(None))) else str(c) for c in r] for r in rows]))";
    let out = run_ok(Command::new("python3").args(["-c", py, sql]));
    serde_json::from_slice::<Vec<Vec<Json>>>(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// One row of figures over a whole file, built from the column table: the row count,
/// the sum of every number column, the distinct values of every text column, and the
/// sum of the start times in µs (the CSV's timestamps are µs in DuckDB, Parquet's ns).
fn figures(from: &str, parquet: bool) -> Vec<Json> {
    let schema = ntprof_perf::profile::find("block").unwrap().schema();
    let mut exprs = vec!["count(*)".to_string()];
    for c in &schema.columns {
        exprs.push(match c.kind {
            Kind::U64 | Kind::I64 => format!("sum({})::HUGEINT", c.name),
            Kind::Text => format!("string_agg(distinct {}, '|' order by {})", c.name, c.name),
            Kind::Timestamp if parquet => format!("sum(epoch_ns({}) // 1000)::HUGEINT", c.name),
            Kind::Timestamp => format!("sum(epoch_us({}))::HUGEINT", c.name),
        });
    }
    let rows = duckdb(&format!("select {} from {from}", exprs.join(", ")));
    rows.into_iter().next().expect("one row")
}

fn py_duckdb_ready(test: &str) -> bool {
    tool_ready(test, "python3", &["-c", "import duckdb"])
}

#[test]
fn duckdb_reads_the_same_rows_as_the_csv_of_the_same_run() {
    let test = "duckdb_reads_the_same_rows_as_the_csv_of_the_same_run";
    if !kernel_ready(test) || !py_duckdb_ready(test) {
        return;
    }
    let l = LoopDev::new("pq", 64);
    l.scheduler("mq-deadline");
    let (csv, pq) = (tmp("same.csv"), tmp("same.parquet"));
    let script = format!(
        "dd if=/dev/zero of={d} bs=4k count=300 oflag=direct status=none && \
         dd if={d} of=/dev/null bs=16k count=200 iflag=direct status=none",
        d = l.dev
    );
    let out = run_ok(
        Command::new(bin())
            .args(["record", "-d", &l.dev, "-o"])
            .arg(&csv)
            .arg("-o")
            .arg(&pq)
            .args(["--", "sh", "-c", &script]),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("500 I/Os written to"), "{err}");
    let (p, c) = (pq.display(), csv.display());
    let fp = figures(&format!("read_parquet('{p}')"), true);
    let fc = figures(&format!("read_csv_auto('{c}')"), false);
    assert_eq!(fp[0], 500, "{fp:?}");
    assert_eq!(fp, fc, "Parquet and CSV of one run");

    // Typed columns, as the column table says.
    let types: Vec<(String, String)> = duckdb(&format!("describe select * from '{p}'"))
        .into_iter()
        .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
        .collect();
    let ty = |n: &str| types.iter().find(|(c, _)| c == n).map(|(_, t)| t.as_str());
    assert_eq!(ty("q2c_ns"), Some("UBIGINT"), "{types:?}");
    assert_eq!(ty("error"), Some("BIGINT"), "{types:?}");
    assert_eq!(ty("device"), Some("VARCHAR"), "{types:?}");
    assert!(
        ty("start_time").unwrap().starts_with("TIMESTAMP"),
        "{types:?}"
    );
    // Dictionary-encoded text, and the recording's metadata.
    let enc = duckdb(&format!(
        "select encodings from parquet_metadata('{p}') where path_in_schema = 'op' limit 1"
    ));
    assert!(
        enc[0][0].as_str().unwrap().contains("DICTIONARY"),
        "{enc:?}"
    );
    let kv = duckdb(&format!(
        "select decode(key), decode(value) from parquet_kv_metadata('{p}') where decode(key) like 'ntprof.%'"
    ));
    let get = |k: &str| {
        kv.iter()
            .find(|r| r[0] == k)
            .and_then(|r| r[1].as_str().map(str::to_string))
            .unwrap_or_else(|| panic!("no {k} in {kv:?}"))
    };
    assert_eq!(get("ntprof.profile"), "block");
    assert_eq!(get("ntprof.sample_rate"), "1");
    assert_eq!(
        get("ntprof.kernel"),
        read(Path::new("/proc/sys/kernel/osrelease")).trim()
    );
    assert!(!get("ntprof.host").is_empty());
    let off: i128 = get("ntprof.wall_offset_ns").parse().unwrap();
    assert!(
        off > 1_500_000_000_000_000_000,
        "realtime − monotonic in 2017 or later: {off}"
    );

    // report reads both through the same rows.
    let rep = |f: &Path| {
        let out = run_ok(Command::new(bin()).arg("report").arg(f));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines().skip(1).collect::<Vec<_>>().join("\n")
    };
    let (rp, rc) = (rep(&pq), rep(&csv));
    assert_eq!(rp, rc, "report of the Parquet and of the CSV");
    // A fleet's files rewritten by DuckDB: the CSV as DuckDB types it (timestamps in
    // µs, signed integers), and the Parquet with narrower and floating columns and two
    // of its own (one of a type no recording has).
    let again = tmp("rewritten.parquet");
    let a = again.display();
    for select in [
        format!("select * from read_csv_auto('{c}')"),
        format!(
            "select * replace (bytes::INTEGER as bytes, qd::SMALLINT as qd, \
             d2c_ns::DOUBLE as d2c_ns, start_time::TIMESTAMP_MS as start_time), \
             true as flag, 'host1' as host from read_parquet('{p}')"
        ),
    ] {
        duckdb(&format!("copy ({select}) to '{a}' (format parquet)"));
        assert_eq!(rep(&again), rc, "report of DuckDB's `{select}`");
    }
    // 200 reads, less the I/Os a sample the kernel dropped without a LOST record cut
    // (their rows are `dropped`, without d2c: it happens, rarely, on these machines).
    let cut = exit_count(&err, "cut");
    let n = table_count(&rp, &[&l.name, "read"], "d2c").unwrap_or(0);
    assert!(
        n <= 200 && n + cut >= 200,
        "{n} reads of 200, cut {cut}: {rp}\n{err}"
    );
    let _ = (std::fs::remove_file(csv), std::fs::remove_file(pq));
    let _ = std::fs::remove_file(again);
}

#[test]
fn a_killed_recording_leaves_a_readable_parquet() {
    let test = "a_killed_recording_leaves_a_readable_parquet";
    if !kernel_ready(test) || !py_duckdb_ready(test) {
        return;
    }
    let l = LoopDev::new("pqkill", 64);
    l.scheduler("none");
    let pq = tmp("killed.parquet");
    let mut child = Command::new(bin())
        .args(["record", "-d", &l.dev, "-o"])
        .arg(&pq)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    run_ok(Command::new("dd").args([
        "if=/dev/zero",
        &format!("of={}", l.dev),
        "bs=4k",
        "count=40",
        "oflag=direct",
        "status=none",
    ]));
    // A row group closes at the first 1 s tick that finds 2 s passed since the last.
    std::thread::sleep(std::time::Duration::from_millis(3500));
    child.kill().unwrap();
    child.wait().unwrap();
    let p = pq.display();
    let n = duckdb(&format!(
        "select count(*), sum(q2c_ns) > 0 from read_parquet('{p}')"
    ));
    assert_eq!(
        n[0],
        [Json::from(40), Json::from(true)],
        "rows of the closed row group"
    );
    let out = run_ok(Command::new(bin()).arg("report").arg(&pq));
    assert!(String::from_utf8_lossy(&out.stdout).contains("40 rows"));
    let _ = std::fs::remove_file(pq);
}
