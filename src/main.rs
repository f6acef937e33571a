//! The `ntprof-perf` binary: parse flags, validate them into a plan, run it.

mod cli;

fn main() {
    let (args, sub) = cli::args::parse();
    match cli::run(args, &sub) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("ntprof-perf: error: {}", cli::error_text(&e));
            std::process::exit(1);
        }
    }
}
