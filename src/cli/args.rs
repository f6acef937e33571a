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
    /// Join an nvme-tcp recording made on the host (`record --side host`) with one made
    /// on the target (`record --side target`) into the full breakdown: host, network
    /// and target stages per I/O, the rows a joint (loopback) recording would have.
    ///
    /// Host and target I/Os are paired by (cntlid, qid, cid) and time; the offset
    /// between the two machines' clocks is estimated from the rows (the wall-clock
    /// times must agree within --max-skew-ms). Stage values never mix the two clocks.
    #[command(verbatim_doc_comment)]
    Merge(MergeArgs),
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
    /// nvme/nvmet profiles: only this controller (host: N of nvmeN; target: cntlid).
    /// Applied in the kernel with a tracepoint filter.
    #[arg(long, value_name = "N")]
    pub ctrl: Option<u32>,
    /// nvme/nvmet profiles: only this namespace id.
    #[arg(long, value_name = "N")]
    pub nsid: Option<u32>,
    /// nvme/nvmet profiles: only this queue id (0 is the admin queue).
    #[arg(long, value_name = "N")]
    pub qid: Option<u32>,
    /// nvme/nvmet profiles: also trace admin queue (qid 0) commands, skipped by default.
    #[arg(long)]
    pub admin: bool,
    /// nvme-tcp profile: the side(s) of NVMe/TCP this machine traces: `host`, `target`,
    /// or `both` (loopback, or host and target of different connections). For two
    /// machines record `--side host` on one and `--side target` on the other, then
    /// join the CSVs with `ntprof-perf merge`.
    #[arg(long, value_name = "SIDE", default_value = "both")]
    pub side: String,
    /// nvme-tcp profile: trace 1 in N I/Os (N = 1, 2, 4, 8 or 16), keeping every event
    /// of a sampled I/O. Chosen in the kernel by the command id's generation bits.
    #[arg(long, value_name = "N")]
    pub sample: Option<u32>,
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
pub struct MergeArgs {
    /// CSV of `ntprof-perf record --profile nvme-tcp --side host`.
    pub host: PathBuf,
    /// CSV of `ntprof-perf record --profile nvme-tcp --side target`.
    pub target: PathBuf,
    /// Write the joined CSV here instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// How far apart the two machines' wall clocks may be (milliseconds).
    #[arg(long, default_value_t = 50, value_name = "MS")]
    pub max_skew_ms: u64,
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
