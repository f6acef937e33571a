//! Command-line flags (clap). Validation into a run plan happens in `plan.rs`.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// Where does I/O latency go? A user-space latency profiler for NVMe over TCP, NVMe and
/// block devices, built on kernel tracepoints read through perf rings (no eBPF, no
/// kernel module).
///
/// Typical use:
///   ntprof-perf list                                   # what this kernel supports
///   ntprof-perf stat --device nvme0n1 --interval 2     # live percentiles per stage
///   ntprof-perf record --device nvme0n1 -o io.csv -- fio job.fio
///   ntprof-perf report io.csv                          # the same tables, offline
///
/// Needs root (or CAP_PERFMON + tracefs access) and a mounted tracefs.
#[derive(Debug, Parser)]
#[command(name = "ntprof-perf", version, verbatim_doc_comment)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Show every profile, whether this kernel supports it, and the events it needs.
    List(ListArgs),
    /// Trace I/O and write one CSV row per I/O (stdout when no -o).
    ///
    /// Rows are written as I/Os complete. With a command after `--`, tracing starts
    /// before the command, stops when it exits, and ntprof-perf exits with the command's
    /// status. Without one, it runs until Ctrl-C, SIGTERM or --duration.
    #[command(verbatim_doc_comment)]
    Record(RecordArgs),
    /// Trace I/O and print latency percentiles per device, operation and stage.
    ///
    /// Every --interval a table for that interval; at the end a summary of the whole
    /// run. Latencies are in microseconds; counts of lost samples, unmatched and
    /// incomplete I/Os are on every table's header line.
    #[command(verbatim_doc_comment)]
    Stat(StatArgs),
    /// Print the summary tables of a CSV written by `record` (offline profiling).
    Report(ReportArgs),
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Read event formats from this tracefs tree instead of the mounted one.
    #[arg(long, value_name = "DIR")]
    pub tracefs: Option<PathBuf>,
}

/// What to trace and how: shared by record and stat.
#[derive(Debug, Args)]
pub struct Selection {
    /// Profile: which events are traced and how they are joined into I/Os (see `list`).
    #[arg(short, long, default_value = "block")]
    pub profile: String,
    /// Only this block device: a name (nvme0n1), a path (/dev/loop0) or major:minor.
    /// Repeat for several. Applied in the kernel with a tracepoint filter. Default: all.
    #[arg(short, long = "device", value_name = "DEV")]
    pub devices: Vec<String>,
    /// Stop after this many seconds (fractions allowed).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Per-CPU ring size in pages (a power of two). Raise it when samples are lost.
    #[arg(long, default_value_t = 256, value_name = "PAGES")]
    pub mmap_pages: usize,
    /// tracefs mount to use (default: /sys/kernel/tracing, then /sys/kernel/debug/tracing).
    #[arg(long, value_name = "DIR")]
    pub tracefs: Option<PathBuf>,
    /// Command to run while tracing; tracing stops when it exits.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct RecordArgs {
    #[command(flatten)]
    pub sel: Selection,
    /// Write the CSV here instead of standard output. Created before tracing starts.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatArgs {
    #[command(flatten)]
    pub sel: Selection,
    /// Seconds between interval tables (fractions allowed); 0 prints only the summary.
    #[arg(short, long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A CSV written by `ntprof-perf record`.
    pub file: PathBuf,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn command_after_double_dash() {
        let c = Cli::try_parse_from([
            "ntprof-perf",
            "record",
            "-d",
            "loop0",
            "-o",
            "x.csv",
            "--",
            "dd",
            "if=/dev/zero",
            "-x",
        ])
        .unwrap();
        let Cmd::Record(r) = c.cmd else { panic!() };
        assert_eq!(r.sel.devices, ["loop0"]);
        assert_eq!(r.sel.command, ["dd", "if=/dev/zero", "-x"]);
        assert_eq!(r.sel.profile, "block");
    }
}
