//! A recorded CSV opened the way a new user opens it: LibreOffice Calc's own CSV import
//! (headless, converted to a flat ODS file), on rows from the real kernel. Each cell's
//! type must follow the column table: `start_time` a date-time, every number a number,
//! every text column text, an empty cell empty.

mod common;

use common::*;
use ntprof_perf::record::Kind;
use std::path::Path;
use std::process::Command;

/// One cell of the converted sheet: its ODF value type (`""` when empty), the value
/// attribute for that type, and its shown text.
#[derive(Debug, Clone)]
struct Cell {
    ty: String,
    value: String,
    text: String,
}

fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&tag[at..at + tag[at..].find('"')?])
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The rows of the first table of a flat ODS file. Calc writes runs of equal cells once
/// with `table:number-columns-repeated`: they are expanded here.
fn sheet(fods: &str) -> Vec<Vec<Cell>> {
    let mut rows = Vec::new();
    for row in fods.split("<table:table-row ").skip(1) {
        let row = row.split("</table:table-row>").next().unwrap_or("");
        let mut cells = Vec::new();
        for cell in row.split("<table:table-cell").skip(1) {
            let Some(end) = cell.find('>') else { continue };
            let tag = &cell[..end];
            let ty = attr(tag, "office:value-type").unwrap_or("").to_string();
            let value = match ty.as_str() {
                "float" => attr(tag, "office:value"),
                "date" => attr(tag, "office:date-value"),
                _ => None,
            }
            .unwrap_or("")
            .to_string();
            let text = cell
                .split_once("<text:p>")
                .and_then(|(_, t)| t.split_once("</text:p>"))
                .map_or(String::new(), |(t, _)| unescape(t));
            let n: usize = attr(tag, "table:number-columns-repeated")
                .map_or(1, |n| n.parse().expect("a repeat count"));
            for _ in 0..n {
                cells.push(Cell {
                    ty: ty.clone(),
                    value: value.clone(),
                    text: text.clone(),
                });
            }
        }
        rows.push(cells);
    }
    rows
}

/// Convert with Calc's CSV import, in a private user profile so that a Calc already
/// running for this user cannot take the job (it would, and exit 0 with no file).
fn to_fods(csv: &Path, dir: &Path) -> String {
    let profile = dir.join("lo-profile");
    run_ok(
        Command::new("soffice")
            .arg(format!(
                "-env:UserInstallation=file://{}",
                profile.display()
            ))
            .args(["--headless", "--convert-to", "fods", "--outdir"])
            .arg(dir)
            .arg(csv),
    );
    let out = dir.join(csv.file_stem().unwrap()).with_extension("fods");
    read(&out)
}

#[test]
fn calc_reads_start_time_as_date_and_numbers_as_numbers() {
    let test = "calc_reads_start_time_as_date_and_numbers_as_numbers";
    if !kernel_ready(test) || !tool_ready(test, "soffice", &["--version"]) {
        return;
    }
    let l = LoopDev::new("calc", 64);
    // mq-deadline: every stage column is filled, so each is checked as a number.
    l.scheduler("mq-deadline");
    let dir = tmp("calc");
    std::fs::create_dir_all(&dir).unwrap();
    let csv = dir.join("io.csv");
    let script = format!(
        "dd if=/dev/zero of={d} bs=4k count=20 oflag=direct status=none && \
         dd if={d} of=/dev/null bs=8k count=10 iflag=direct status=none",
        d = l.dev
    );
    run_ok(
        Command::new(bin())
            .args(["record", "-d", &l.dev, "-o"])
            .arg(&csv)
            .args(["--", "sh", "-c", &script]),
    );
    let rows = read_csv(&csv);
    assert_eq!(rows.len(), 30, "one row per dd I/O");

    let schema = ntprof_perf::profile::find("block").unwrap().schema();
    let sheet = sheet(&to_fods(&csv, &dir));
    assert_eq!(sheet.len(), rows.len() + 1, "header and one line per row");
    let header: Vec<&str> = sheet[0].iter().map(|c| c.text.as_str()).collect();
    assert_eq!(
        header[..schema.columns.len()],
        schema.names().collect::<Vec<_>>()[..]
    );
    let mut typed = [0usize; 3];
    for (line, (cells, row)) in sheet[1..].iter().zip(&rows).enumerate() {
        for (i, col) in schema.columns.iter().enumerate() {
            let (cell, csv_text) = (&cells[i], &row[col.name]);
            let at = format!("line {} column {}: {cell:?}", line + 2, col.name);
            if csv_text.is_empty() {
                assert_eq!(cell.ty, "", "{at}");
                continue;
            }
            match col.kind {
                Kind::Timestamp => {
                    assert_eq!(cell.ty, "date", "{at}");
                    // Calc keeps milliseconds; the second must be the CSV's.
                    assert_eq!(cell.value[..19], csv_text[..19], "{at}");
                    typed[0] += 1;
                }
                Kind::U64 | Kind::I64 => {
                    assert_eq!(cell.ty, "float", "{at}");
                    assert_eq!(&cell.value, csv_text, "{at}");
                    typed[1] += 1;
                }
                Kind::Text => {
                    assert_eq!(cell.ty, "string", "{at}");
                    assert_eq!(&cell.text, csv_text, "{at}");
                    typed[2] += 1;
                }
            }
        }
    }
    // Every `_ns` column is a number column of the table, and was seen filled.
    for c in schema.columns.iter().filter(|c| c.name.ends_with("_ns")) {
        assert!(matches!(c.kind, Kind::U64 | Kind::I64), "{}", c.name);
        assert!(rows.iter().any(|r| !r[c.name].is_empty()), "{}", c.name);
    }
    assert_eq!(typed[0], 30, "a date-time cell per row");
    assert!(typed[1] >= 30 * 5 && typed[2] >= 30 * 4, "{typed:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_fods_reader_expands_repeated_cells() {
    let fods = r#"<table:table-row table:style-name="ro1"><table:table-cell office:value-type="float" office:value="3" table:number-columns-repeated="2"><text:p>3</text:p></table:table-cell><table:table-cell table:number-columns-repeated="2"/><table:table-cell office:value-type="string"><text:p>&lt;=4k</text:p></table:table-cell></table:table-row>"#;
    let s = sheet(fods);
    assert_eq!(s.len(), 1);
    let types: Vec<&str> = s[0].iter().map(|c| c.ty.as_str()).collect();
    assert_eq!(types, ["float", "float", "", "", "string"]);
    assert_eq!(s[0][1].value, "3");
    assert_eq!(s[0][4].text, "<=4k");
}
