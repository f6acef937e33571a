//! The `ntprof-perf` binary: parse flags, validate them into a plan, run it.

mod cli;

use clap::Parser;

fn main() {
    let args = cli::args::Cli::parse();
    match cli::run(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("ntprof-perf: error: {e:#}");
            std::process::exit(1);
        }
    }
}
