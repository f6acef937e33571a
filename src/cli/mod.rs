//! Subcommands: validate flags into a plan (every check before tracing starts), then run.

pub mod args;
mod live;
mod merge;
mod report;

use anyhow::{bail, Context, Result};
use args::{Cli, Cmd, ListArgs};
use ntprof_perf::profile;
use ntprof_perf::tracefs::Tracefs;

/// Run a subcommand; the value is the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.cmd {
        Cmd::List(a) => list(&a).map(|_| 0),
        Cmd::Record(a) => live::record(a),
        Cmd::Stat(a) => live::stat(a),
        Cmd::Report(a) => report::report(&a),
        Cmd::Merge(a) => merge::merge(&a),
    }
}

fn list(a: &ListArgs) -> Result<()> {
    let tfs = match Tracefs::find(a.tracefs.as_deref()) {
        Ok(t) => t,
        Err(e) => bail!("{e}"),
    };
    println!("tracefs: {}", tfs.root().display());
    for info in profile::all() {
        let st = profile::check(info, &tfs);
        let verdict = if profile::supported(&st) {
            "supported"
        } else {
            "NOT supported"
        };
        println!("\n{:<10} {verdict}: {}", info.name, info.about);
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
        println!("    stages: {}", info.stages.join(", "));
    }
    Ok(())
}

/// A seconds flag as a Duration, refusing what cannot be one.
fn seconds(flag: &str, v: f64) -> Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .with_context(|| format!("--{flag} {v}: give a positive number of seconds"))
}
