//! The `ntprof-perf` binary: parse flags, validate them into a plan, run it.

// Messages go through `ntprof_perf::say!`, which cannot panic on a closed standard
// error; listings through `cli::Out`, which stops when the reader is gone.
#![warn(clippy::print_stderr, clippy::print_stdout)]

mod cli;

fn main() {
    let (args, sub) = cli::args::parse();
    match cli::run(args, &sub) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            ntprof_perf::say!("ntprof-perf: error: {}", cli::error_text(&e));
            std::process::exit(1);
        }
    }
}
