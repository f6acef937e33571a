//! Recordings written by an earlier release (`tests/fixtures/`, column tables version 1)
//! still load: `report`, `plot` and `merge` recognise their profile and read every row,
//! also after a column was added to the file, one was dropped from it, or the columns
//! were put in another order (what a newer or older release, or a spreadsheet, does).
//!
//! The fixtures: block (CSV and Parquet) and bio recorded on this kind of host (loop
//! device, zram); nvme, nvmet and nvme-tcp (joint, host and target) recorded in the VM
//! rig (patched 6.1 guest). No kernel is needed to read them.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// `report --json` of a file: (profile, I/Os summed over the groups).
fn report(path: &Path) -> (String, u64) {
    let out = run_ok(Command::new(bin()).arg("report").arg(path).arg("--json"));
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.lines().last().unwrap_or("")).unwrap();
    let ios = v["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["ios"].as_u64().unwrap())
        .sum();
    (v["profile"].as_str().unwrap().to_string(), ios)
}

/// A copy of a CSV fixture with its columns changed by `edit` (header and every row).
fn edited(name: &str, tag: &str, edit: impl Fn(&mut Vec<String>, bool)) -> PathBuf {
    let mut rd = csv::Reader::from_path(fixture(name)).unwrap();
    let out = tmp(&format!("fixture-{tag}-{name}"));
    let mut wr = csv::Writer::from_path(&out).unwrap();
    let mut header: Vec<String> = rd.headers().unwrap().iter().map(String::from).collect();
    edit(&mut header, true);
    wr.write_record(&header).unwrap();
    for r in rd.records() {
        let mut row: Vec<String> = r.unwrap().iter().map(String::from).collect();
        edit(&mut row, false);
        wr.write_record(&row).unwrap();
    }
    wr.flush().unwrap();
    out
}

fn data_rows(name: &str) -> u64 {
    read(&fixture(name)).lines().count() as u64 - 1
}

const CSVS: [(&str, &str, &str); 5] = [
    // (file, profile, a column that is not a label, stage or status)
    ("block-v1.csv", "block", "candidates"),
    ("bio-v1.csv", "bio", "target_sector"),
    ("nvme-tcp-v1.csv", "nvme-tcp", "tag"),
    ("nvme-v1.csv", "nvme", "retries"),
    ("nvmet-v1.csv", "nvmet", "lba_size"),
];

#[test]
fn recordings_of_the_first_column_tables_load() {
    for (name, profile, _) in CSVS {
        assert_eq!(
            report(&fixture(name)),
            (profile.to_string(), data_rows(name)),
            "{name}"
        );
    }
    // The Parquet file of the block run: the same I/Os as its CSV.
    assert_eq!(
        report(&fixture("block-v1.parquet")),
        ("block".to_string(), data_rows("block-v1.csv"))
    );
}

#[test]
fn a_column_added_dropped_or_moved_does_not_stop_a_file_loading() {
    for (name, profile, optional) in CSVS {
        let want = (profile.to_string(), data_rows(name));
        // A column a newer release added, in the middle.
        let added = edited(name, "added", |cells, header| {
            cells.insert(3, if header { "future_ns" } else { "7" }.to_string());
        });
        assert_eq!(report(&added), want, "{name} with a column added");
        // A column an older release did not have.
        let at = read(&fixture(name))
            .lines()
            .next()
            .unwrap()
            .split(',')
            .position(|c| c == optional)
            .unwrap();
        let dropped = edited(name, "dropped", |cells, _| {
            cells.remove(at);
        });
        assert_eq!(report(&dropped), want, "{name} without {optional}");
        // Columns in another order (a spreadsheet's export).
        let moved = edited(name, "moved", |cells, _| cells.reverse());
        assert_eq!(report(&moved), want, "{name} with its columns reversed");
        for p in [added, dropped, moved] {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[test]
fn a_file_without_what_makes_a_row_is_refused_by_name() {
    // Without the status column no profile fits: the error names the file and says
    // what a recording has.
    let at = read(&fixture("block-v1.csv"))
        .lines()
        .next()
        .unwrap()
        .split(',')
        .position(|c| c == "status")
        .unwrap();
    let cut = edited("block-v1.csv", "nostatus", |cells, _| {
        cells.remove(at);
    });
    let out = Command::new(bin())
        .arg("report")
        .arg(&cut)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(cut.to_str().unwrap()) && err.contains("label and status columns"),
        "{err}"
    );
    let _ = std::fs::remove_file(cut);
}

#[test]
fn old_recordings_plot_and_merge() {
    for name in [
        "block-v1.csv",
        "block-v1.parquet",
        "bio-v1.csv",
        "nvme-tcp-v1.csv",
    ] {
        let svg = tmp(&format!("fixture-{name}.svg"));
        run_ok(
            Command::new(bin())
                .arg("plot")
                .arg(fixture(name))
                .arg("-o")
                .arg(&svg),
        );
        assert!(read(&svg).contains("(total)"), "{name}: no total marked");
        let _ = std::fs::remove_file(svg);
    }
    let merged = tmp("fixture-merged.csv");
    run_ok(
        Command::new(bin())
            .arg("merge")
            .arg(fixture("nvme-tcp-host-v1.csv"))
            .arg(fixture("nvme-tcp-target-v1.csv"))
            .arg("-o")
            .arg(&merged),
    );
    let (profile, ios) = report(&merged);
    assert_eq!(profile, "nvme-tcp");
    assert_eq!(ios, data_rows("nvme-tcp-host-v1.csv"));
    let _ = std::fs::remove_file(merged);
}
