//! Every `ntprof-perf …` command line the README and `docs/` show parses against the
//! flags of this build (and takes only flags of the profile it names), so the
//! documentation cannot drift from `--help`.

use super::args::{command, Cli, Cmd};
use clap::FromArgMatches;
use std::path::Path;

/// Words of a shell command line (quotes removed), up to what is not ntprof-perf's:
/// the command after ` -- `, a pipe, a redirection, a comment or a second command.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    let end = out
        .iter()
        .position(|w| ["|", ">", "2>", "&&", ";", "#", "||", "<"].contains(&w.as_str()))
        .unwrap_or(out.len());
    out.truncate(end);
    if let Some(dd) = out.iter().position(|w| w == "--") {
        // The traced command is not ours; one word of it keeps `--` meaningful.
        out.truncate(dd + 1);
        out.push("true".into());
    }
    out
}

/// `(file:line, command line)` of every example in a Markdown text: lines in code
/// blocks, after an optional `$ ` or `# ` prompt, and inline code spans, that start
/// with `ntprof-perf `; continuation lines (`\`) joined. Synopses (`[--flag]`,
/// `a|b`, `...`) and placeholders for the command (`ntprof-perf COMMAND`) are not
/// examples.
fn examples(file: &str, text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut fence = false;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let at = format!("{file}:{}", i + 1);
        let line = lines[i];
        i += 1;
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        let mut found: Vec<String> = Vec::new();
        if fence {
            let t = line.trim_start();
            let t = t
                .strip_prefix("$ ")
                .or_else(|| t.strip_prefix("# "))
                .unwrap_or(t);
            if t.starts_with("ntprof-perf ") {
                let mut cmd = t.to_string();
                while cmd.ends_with('\\') && i < lines.len() {
                    cmd.pop();
                    cmd.push(' ');
                    cmd.push_str(lines[i].trim());
                    i += 1;
                }
                found.push(cmd);
            }
        } else {
            for (k, span) in line.split('`').enumerate() {
                // `ntprof-perf plot` in prose names a command; an example has flags.
                if k % 2 == 1
                    && span.starts_with("ntprof-perf ")
                    && span.split_whitespace().count() > 2
                {
                    found.push(span.to_string());
                }
            }
        }
        for cmd in found {
            let ours = cmd.split(" -- ").next().unwrap_or("");
            let synopsis = ours.contains('[')
                || ours.contains("...")
                || ours.contains('…')
                || ours
                    .split_whitespace()
                    .any(|w| w.contains('|') && w.len() > 1);
            let sub = cmd.split_whitespace().nth(1).unwrap_or("");
            let placeholder = sub.chars().all(|c| c.is_ascii_uppercase());
            if !synopsis && !placeholder {
                out.push((at.clone(), cmd));
            }
        }
    }
    out
}

#[test]
fn every_command_line_in_the_docs_parses() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    let mut checked = 0;
    let mut bad = Vec::new();
    for f in &files {
        let name = f.strip_prefix(root).unwrap_or(f).display().to_string();
        let text = std::fs::read_to_string(f).unwrap();
        for (at, cmd) in examples(&name, &text) {
            checked += 1;
            let w = words(&cmd);
            let m = match command().try_get_matches_from(&w) {
                Ok(m) => m,
                Err(e)
                    if matches!(
                        e.kind(),
                        clap::error::ErrorKind::DisplayHelp
                            | clap::error::ErrorKind::DisplayVersion
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    bad.push(format!("{at}: `{cmd}`: {}", e.render()));
                    continue;
                }
            };
            // The profile flags a record or stat takes are checked as a run checks them.
            let cli = Cli::from_arg_matches(&m).unwrap();
            let sel = match &cli.cmd {
                Cmd::Record(r) => Some(&r.sel),
                Cmd::Stat(s) => Some(&s.sel),
                _ => None,
            };
            if let (Some(sel), Some((_, sub))) = (sel, m.subcommand()) {
                let checked = ntprof_perf::profile::find(&sel.profile)
                    .ok_or_else(|| anyhow::anyhow!("no profile {}", sel.profile))
                    .and_then(|p| super::live::refuse_foreign_flags(p, sub));
                if let Err(e) = checked {
                    bad.push(format!("{at}: `{cmd}`: {e}"));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {checked} command lines do not parse:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // The README alone shows one per command.
    assert!(checked >= 20, "only {checked} command lines found");
}

#[test]
fn the_extractor_finds_what_a_reader_sees() {
    let md = "Run `ntprof-perf stat -d sda` now.\n```\n$ ntprof-perf record -d loop0 \\\n    -o x.csv -- dd if=/dev/zero | head\nntprof-perf record [--profile P]\n```\n";
    let ex = examples("t.md", md);
    let cmds: Vec<&str> = ex.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(
        cmds,
        [
            "ntprof-perf stat -d sda",
            "ntprof-perf record -d loop0  -o x.csv -- dd if=/dev/zero | head"
        ]
    );
    assert_eq!(
        words(cmds[1]),
        [
            "ntprof-perf",
            "record",
            "-d",
            "loop0",
            "-o",
            "x.csv",
            "--",
            "true"
        ]
    );
    assert_eq!(
        words("ntprof-perf plot 'a b.csv' -o x.svg # c"),
        ["ntprof-perf", "plot", "a b.csv", "-o", "x.svg"]
    );
}
