//! Subcommands: validate flags into a plan (every check before tracing starts), then run.

pub mod args;
#[cfg(test)]
mod docs_check;
mod import;
mod live;
mod merge;
mod plot;
mod report;

use anyhow::{bail, Context, Result};
use args::{Cli, Cmd, ListArgs};
use ntprof_perf::profile;
use ntprof_perf::tracefs::Tracefs;

/// Standard output for a listing: a reader that closes the pipe early (`| head`) ends
/// the listing quietly instead of panicking in `println!`.
pub struct Out(std::io::StdoutLock<'static>);

impl Out {
    pub fn new() -> Out {
        Out(std::io::stdout().lock())
    }

    /// Write a line; `false` once the reader is gone.
    pub fn line(&mut self, s: &str) -> bool {
        use std::io::Write;
        writeln!(self.0, "{s}").is_ok()
    }

    pub fn text(&mut self, s: &str) -> bool {
        use std::io::Write;
        self.0
            .write_all(s.as_bytes())
            .and_then(|_| self.0.flush())
            .is_ok()
    }
}

/// Run a subcommand; the value is the process exit code. `sub` holds the
/// subcommand's raw flags, the profiles' own among them.
pub fn run(cli: Cli, sub: &clap::ArgMatches) -> Result<i32> {
    match cli.cmd {
        Cmd::List(a) => list(&a).map(|_| 0),
        Cmd::Record(a) => live::record(a, sub),
        Cmd::Stat(a) => live::stat(a, sub),
        Cmd::Serve(a) => live::serve(a, sub),
        Cmd::Report(a) => report::report(&a),
        Cmd::Merge(a) => merge::merge(&a),
        Cmd::Plot(a) => plot::plot(&a),
        Cmd::Import(a) => import::import(&a),
    }
}

/// `perf record` of the events a `record -p PROFILE [flags]` run opens, with its
/// filters, every CPU, and CLOCK_MONOTONIC (`-k mono`) as ntprof-perf stamps samples.
fn perf_record_line(words: &[String], tfs: &Tracefs) -> Result<String> {
    let name = &words[0];
    let p = profile::find(name).with_context(|| {
        let names: Vec<&str> = profile::all().iter().map(|p| p.name()).collect();
        format!(
            "--perf-record {name}: no such profile; profiles: {}",
            names.join(", ")
        )
    })?;
    let argv = ["ntprof-perf", "record", "-p"]
        .into_iter()
        .map(String::from)
        .chain(words.iter().cloned());
    let m = args::command().try_get_matches_from(argv).map_err(|e| {
        // `--perf-record P --help`: the selection flags are `record`'s, so its help.
        if e.kind() == clap::error::ErrorKind::DisplayHelp {
            e.exit();
        }
        anyhow::anyhow!("--perf-record {}: {e}", words.join(" "))
    })?;
    let Some((_, flags)) = m.subcommand() else {
        bail!("--perf-record {name}: no selection");
    };
    live::refuse_foreign_flags(p, flags)?;
    // `--perf-record P … --tracefs DIR`: the tree named among the selection flags.
    let own;
    let tfs = match flags.get_one::<std::path::PathBuf>("tracefs") {
        Some(dir) => {
            own = Tracefs::find(Some(dir))?;
            &own
        }
        None => tfs,
    };
    let ctx = profile::PlanCtx {
        profile: p.name(),
        status: profile::check(p, tfs),
        tfs,
        args: flags,
        sys: ntprof_perf::device::SysBlock::default(),
        max_rate: None,
        capture: false,
    };
    let plan = p.plan(&ctx)?;
    for n in &plan.notes {
        ntprof_perf::say!("ntprof-perf: {n}");
    }
    let mut line = String::from("perf record -a -k mono");
    for e in &plan.events {
        line.push_str(&format!(" -e {}", e.name));
        if let Some(f) = &e.filter {
            line.push_str(&format!(" --filter '{}'", f.render()));
        }
    }
    Ok(line)
}

fn list(a: &ListArgs) -> Result<()> {
    let tfs = match Tracefs::find(a.tracefs.as_deref()) {
        Ok(t) => t,
        Err(e) => bail!("{e}"),
    };
    if let Some(words) = &a.perf_record {
        let line = perf_record_line(words, &tfs)?;
        Out::new().line(&line);
        return Ok(());
    }
    let mut out = Out::new();
    // Every write below stops the listing when the reader is gone.
    macro_rules! println {
        ($($t:tt)*) => {
            if !out.line(&format!($($t)*)) {
                return Ok(());
            }
        };
    }
    println!("tracefs: {}", tfs.root().display());
    for &p in profile::all() {
        let st = profile::check(p, &tfs);
        let verdict = if profile::supported(&st) {
            "supported"
        } else {
            "NOT supported"
        };
        println!("\n{:<10} {verdict}: {}", p.name(), p.about());
        let mut shown_systems: Vec<&str> = Vec::new();
        for s in &st {
            let tag = if s.req.required { "" } else { " (optional)" };
            let sys = s.req.system;
            // A whole missing system gets one line: listing each of its events with the
            // same reason would bury the events that are there.
            let same: Vec<_> = st.iter().filter(|o| o.req.system == sys).collect();
            if same.len() > 1 && same.iter().all(|o| o.missing == s.missing) && s.missing.is_some()
            {
                if !shown_systems.contains(&sys) {
                    shown_systems.push(sys);
                    let req = if same.iter().any(|o| o.req.required) {
                        ""
                    } else {
                        " (optional)"
                    };
                    let why = s.missing.as_deref().unwrap_or_default();
                    println!("    missing  {sys}:* ({} events){req}: {why}", same.len());
                }
                continue;
            }
            match &s.missing {
                None => println!("    ok       {sys}:{}{tag}", s.req.event),
                Some(why) => println!("    missing  {sys}:{}{tag}: {why}", s.req.event),
            }
        }
        let stages: Vec<String> = p
            .schema()
            .stages
            .iter()
            .map(|&i| p.schema().columns[i].name.to_string())
            .collect();
        println!("    stages: {}", stages.join(", "));
    }
    Ok(())
}

/// A seconds flag as a Duration, refusing what cannot be one.
fn seconds(flag: &str, v: f64) -> Result<std::time::Duration> {
    match std::time::Duration::try_from_secs_f64(v) {
        Ok(d) if !d.is_zero() => Ok(d),
        Ok(_) if v > 0.0 => bail!("--{flag} {v}: shorter than a nanosecond"),
        // A Duration holds up to 2^64 s.
        Err(_) if v.is_finite() && v > 0.0 => bail!("--{flag} {v}: too long (at most 2^64 s)"),
        _ => bail!("--{flag} {v}: give a positive number of seconds"),
    }
}

/// An error and its causes on one line, each cause once: an io error wrapped with the
/// file it concerns says "No space left on device" once, not at every level.
pub fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_cause_is_said_once() {
        let io = std::io::Error::from_raw_os_error(28);
        let e = anyhow::Error::new(ntprof_perf::sink::SinkError::Write {
            what: "x.csv".into(),
            source: io,
        });
        let t = error_text(&e);
        assert_eq!(t.matches("No space left on device").count(), 1, "{t}");
        assert!(t.contains("x.csv"), "{t}");
    }

    #[test]
    fn seconds_say_what_is_wrong_with_them() {
        assert_eq!(seconds("d", 0.5).unwrap().as_millis(), 500);
        for (v, why) in [
            (0.0, "give a positive number"),
            (-1.0, "give a positive number"),
            (f64::NAN, "give a positive number"),
            (f64::INFINITY, "give a positive number"),
            (1e-12, "shorter than a nanosecond"),
            (1e30, "too long"),
        ] {
            let e = seconds("d", v).unwrap_err().to_string();
            assert!(e.starts_with("--d ") && e.contains(why), "{v}: {e}");
        }
    }
}
