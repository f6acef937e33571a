//! Command-line flags (clap). The generic flags are declared here; each profile brings
//! its own ([`ntprof_perf::profile::Profile::args`]), added to `record` and `stat` by
//! [`command`]. Validation into a run plan happens in `live.rs` and the profile.

use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};
use ntprof_perf::profile;
use ntprof_perf::rate::Duty;
use ntprof_perf::sink::stat::{Percentiles, StatFormat};
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
    /// Trace I/O and write one row per I/O: CSV (stdout when no -o), or Parquet.
    ///
    /// Rows are written as I/Os complete. With a command after `--`, tracing starts
    /// before the command, stops when it exits, and ntprof-perf exits with the command's
    /// status. Without one, it runs until Ctrl-C, SIGTERM or --duration.
    #[command(verbatim_doc_comment)]
    Record(RecordArgs),
    /// Trace I/O and serve latency histograms and counters to Prometheus, to stay on.
    ///
    /// Answers GET /metrics in the Prometheus text format (OpenMetrics when the
    /// scraper asks for it): per device, operation and stage, histograms of latency in
    /// seconds (buckets 1 µs × 2^k, as ebpf_exporter's exp2), I/O counters, the run's
    /// sample/lost/dropped/unmatched counters, the sampling rate in effect. Traces at
    /// most --max-rate I/Os per second (default 2000), counting each for the I/Os its
    /// rate stands for, and only in 3 s of every minute (--duty 3/60; `--duty off`
    /// traces all the time), with the events off in between so that a busy host pays
    /// nothing then. Opens its events as root, then runs as --user with no
    /// capabilities. Listens on 127.0.0.1 unless told otherwise.
    ///
    /// Runs until SIGINT or SIGTERM (or --duration, or the command after `--`).
    // Always under a budget, which --threads 2 and --defer cannot keep: not offered
    // here (given anyway, they are refused with the reason).
    #[command(
        verbatim_doc_comment,
        mut_arg("threads", |a| a.hide(true)),
        mut_arg("defer", |a| a.hide(true))
    )]
    Serve(ServeArgs),
    /// Trace I/O and print latency percentiles per device, operation and stage.
    ///
    /// Every --interval a table for that interval; at the end a summary of the whole
    /// run. Latencies are in microseconds; counts of lost samples, unmatched and
    /// incomplete I/Os are on every table's header line.
    #[command(verbatim_doc_comment)]
    Stat(StatArgs),
    /// Print the summary tables of a CSV or Parquet file written by `record` (or of a
    /// perf.data, imported first).
    Report(ReportArgs),
    /// Turn a perf.data recorded by stock `perf record` into the rows `record` writes.
    ///
    /// For hosts where only perf may run: record there with the line
    /// `ntprof-perf list --perf-record PROFILE …` prints, bring the perf.data here, and
    /// import it. The samples go through the same decoders, ordering, correlators and
    /// sinks as a live run; the event formats come from the file's own tracing data
    /// (--tracefs DIR stands in when it has none). The exit line counts the file's LOST
    /// and THROTTLE records as a live run counts its own, and says which clock the
    /// capture used: with `-k mono` and perf's clock data, start times are wall-clock;
    /// with perf's default clock they are relative. Pipe-mode captures
    /// (`perf record -o -`) are read too, from a file or from standard input (`-`), as
    /// are compressed ones (`perf record -z`) and directories (`perf record --threads`:
    /// give the directory; its data.N files are merged by time). A capture perf record
    /// has not finished (killed, out of disk, or still running), or a copy cut short, is
    /// read to perf's last pass over its rings, with --tracefs for the event formats
    /// perf writes only when it stops.
    ///
    /// Device names are those of this host's sysfs when the capture was made here (same
    /// host name), else MAJ:MIN. A perf.data cannot say which samples the kernel counted
    /// but never wrote: I/Os they cut are `incomplete` rows or unmatched completions.
    #[command(verbatim_doc_comment)]
    Import(ImportArgs),
    /// Join a recording made on the host (`record --side host`) with one made on the
    /// target (`record --side target`) into the full breakdown, the rows a joint
    /// (loopback) recording would have. For profiles whose I/O spans two machines
    /// (nvme-tcp: host, network and target stages per I/O).
    ///
    /// Host and target I/Os are paired by (cntlid, qid, cid) and time; the offset
    /// between the two machines' clocks is estimated from the rows (the wall-clock
    /// times must agree within --max-skew-ms). Stage values never mix the two clocks.
    #[command(verbatim_doc_comment)]
    Merge(MergeArgs),
    /// Draw a recording (CSV or Parquet) as an SVG picture.
    ///
    ///   breakdown  one bar per group (device, op…) and statistic, stacked by stage:
    ///              mean and p50 of each stage (--p99 adds p99); totals are black marks
    ///   heatmap    time × latency (log), colour = I/O count; one panel per group
    ///   histogram  latency distribution per group (--cdf: cumulative)
    #[command(verbatim_doc_comment)]
    Plot(PlotArgs),
}

#[derive(Debug, Args)]
pub struct PlotArgs {
    /// A CSV or Parquet file written by `ntprof-perf record`, or a perf.data (imported
    /// first, as `import` does).
    pub file: PathBuf,
    /// The SVG to write.
    #[arg(short, long, value_name = "FILE.svg")]
    pub output: PathBuf,
    #[arg(long, value_enum, default_value = "breakdown")]
    pub kind: PlotKind,
    /// The stage of heatmap and histogram (default: the total, the largest stage).
    #[arg(long, value_name = "STAGE")]
    pub stage: Option<String>,
    /// breakdown: also p99 bars.
    #[arg(long)]
    pub p99: bool,
    /// histogram: cumulative distribution.
    #[arg(long)]
    pub cdf: bool,
    /// Picture size in pixels.
    #[arg(long, default_value_t = 1000)]
    pub width: u32,
    #[arg(long, default_value_t = 600)]
    pub height: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlotKind {
    Breakdown,
    Heatmap,
    Histogram,
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Read event formats from this tracefs tree instead of the mounted one.
    #[arg(long, value_name = "DIR")]
    pub tracefs: Option<PathBuf>,
    /// Print the `perf record` command line that captures what PROFILE needs (its
    /// events, with the kernel filters and clock it would use), for hosts where only perf
    /// may run. The flags after PROFILE are that profile's selection, as for `record`
    /// (e.g. `--perf-record block -d loop0`). Add `-o FILE` and `-- COMMAND` or stop it
    /// with Ctrl-C; `-z` (compressed), `-m PAGES` (larger rings) and `--threads` (a
    /// directory) are read by `import` too; `-F` (perf keeping a few firings a second)
    /// is not.
    #[arg(long, value_name = "PROFILE", num_args = 1.., allow_hyphen_values = true)]
    pub perf_record: Option<Vec<String>>,
}

/// What to trace and how: shared by record and stat. Each profile adds its own flags
/// (see `profile_args`): `--device` for block and bio, `--ctrl`/`--qid`/… for the NVMe
/// profiles.
#[derive(Debug, Args)]
pub struct Selection {
    /// Profile: which events are traced and how they are joined into I/Os (see `list`).
    #[arg(short, long, default_value = profile::DEFAULT)]
    pub profile: String,
    /// Stop after this many seconds (fractions allowed).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Per-CPU ring size in pages (a power of two). Default: 32 MiB spread over the
    /// online CPUs, at least 256 and at most 2048 pages per CPU (1 to 8 MiB). Raise it
    /// when samples are lost.
    #[arg(long, value_name = "PAGES")]
    pub mmap_pages: Option<usize>,
    /// Run the reader at real-time priority (SCHED_FIFO, like `perf record -r`), so a
    /// busy CPU cannot starve it while the rings fill. Takes a priority, 1-99 (default
    /// 10 when given without one).
    #[arg(long, value_name = "PRIO", num_args = 0..=1, default_missing_value = "10",
          value_parser = clap::value_parser!(u8).range(1..=99))]
    pub realtime: Option<u8>,
    /// Threads of the reader. 1: one thread reads the rings, decodes, orders and
    /// correlates. 2: one thread reads the rings and decodes while a second orders,
    /// correlates and writes, so that round N is decoded while round N-1 is
    /// correlated; for a host whose event rate one core cannot take without loss
    /// (a replay's correlating core goes from ≈45 to ≈34-37 ns per event), at the price
    /// of a second core. The records are the same. Not with --max-rate (nor serve).
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..=2))]
    pub threads: u8,
    /// Correlate after tracing, not during it. The reader only copies each sample
    /// out of the rings into memory; decoding, ordering, correlating and writing wait
    /// until tracing stops (the command exits, Ctrl-C, --duration), and the rows and
    /// tables are then those a live run makes, exactly. What a reader costs the traced
    /// workload is the CPU it takes from it, and this takes the least (measured side by
    /// side: 2-5 % more of the untraced IOPS than the same command live;
    /// docs/performance.md), except where fresh memory is slow: on a VM whose host
    /// takes freed memory back, faulting in the memory that holds the samples cost
    /// more than correlating them (2-7 % fewer IOPS than live, the more the busier the
    /// CPUs) unless it is faulted in before tracing starts, which a SIZE does (below);
    /// the exit line says what it cost. For a measured run whose result is read
    /// afterwards (`record -o io.csv --defer 512M -- fio job.fio`). SIZE caps the memory
    /// held (K, M, G: powers of 1024; default 1G, and at most a quarter of the memory
    /// available when the run starts); past it the oldest samples are correlated while
    /// tracing, as without --defer. ≈80 bytes per block sample: 1 GiB holds ≈13 M.
    /// Given a SIZE, that much memory (at most half of what is available) is faulted in
    /// before tracing starts, so that until it is full the workload pays for nothing but
    /// the copy of each sample; that takes ≈0.1-0.3 s per GiB, seconds on such a VM.
    /// Without one, a thread at idle priority faults memory in ahead of need, which
    /// busy CPUs leave it little time for. Not with --threads 2, --max-rate or serve;
    /// with stat, only the summary is printed (no --interval).
    #[arg(long, value_name = "SIZE", num_args = 0..=1, default_missing_value = "auto",
          value_parser = parse_defer)]
    pub defer: Option<DeferSize>,
    /// Trace at most about this many I/Os per second: ntprof-perf measures the rate
    /// every second and picks the sampling itself (1 in N, a power of two up to 256,
    /// as --sample; --sample then sets where it starts). It changes the kernel filters
    /// of the running trace, keeping every row one whole I/O; it raises N at once when
    /// over the budget and halves it after 3 s with room for twice as many. Counts are
    /// then estimates: stat scales them and states the error; the exit line, every stat
    /// table and JSON line, and the Parquet metadata say the rate in effect.
    #[arg(long, value_name = "IOPS", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rate: Option<u64>,
    /// With --max-rate: trace the I/Os that start in ON seconds of every PERIOD (whole
    /// seconds, e.g. 3/60), with the events off the rest of the time. An enabled
    /// event costs the traced task its trace record and filter test at every hit even
    /// when its filter drops the I/O (≈0.2–0.35 µs, two hits per block I/O); a
    /// disabled one costs nothing, so this is what takes a busy host below that
    /// floor. The events are on 2 s before and after each window, so that every I/O
    /// in it is whole: PERIOD ≥ ON + 5 and a whole multiple of ON. Each record then
    /// stands for N × PERIOD/ON I/Os (the rate in effect says so), and counts assume
    /// the load in a window is that of its period. The rate for a window is chosen
    /// from the one before. `off`: trace all the time. Default: off; serve: 3/60.
    #[arg(long, value_name = "ON/PERIOD|off", value_parser = parse_duty)]
    pub duty: Option<DutyFlag>,
    /// Measure only these stages (comma-separated, e.g. `d2c`) and open only the
    /// events they need, so the kernel writes fewer samples (each costs the traced
    /// task ≈0.4 µs). block: `d2c` leaves out block_rq_insert, one of three samples
    /// per I/O wherever requests are queued before dispatch; q2d and q2c are then
    /// empty. nvme: `driver` leaves out the block events. The other profiles need
    /// every event for any stage. The columns stay; stages not measured are empty.
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub stages: Option<Vec<String>>,
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
    #[command(flatten)]
    pub rows: Rows,
}

/// Where rows go and which: shared by `record` and `import`.
#[derive(Debug, Args)]
pub struct Rows {
    /// Write the rows here instead of standard output; created before any event is
    /// read. A name ending in `.parquet` is written as Parquet. Repeatable: the same
    /// rows go to every file (`-o io.csv -o io.parquet`).
    #[arg(short, long, value_name = "FILE")]
    pub output: Vec<PathBuf>,
    /// Format of the -o files whose name does not say (default csv). Parquet needs a
    /// file: it is written with positional writes, its footer kept valid at every flush.
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Write only I/Os whose total latency is at least this (units ns, us, ms, s:
    /// `500us`, `2ms`). The total is the largest stage value of the I/O (the stage that
    /// spans it: q2c, total, host_total…). The exit line still counts every I/O seen.
    #[arg(long, value_name = "LATENCY", value_parser = min_latency)]
    pub min_latency: Option<u64>,
}

/// `record`'s row formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Csv,
    Parquet,
}

fn min_latency(s: &str) -> Result<u64, String> {
    ntprof_perf::sink::recorder::parse_latency(s).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub sel: Selection,
    /// Where to listen, ADDR:PORT. The port is not on the Prometheus exporter port
    /// list (9100-9999 is all taken); pick another with this.
    #[arg(long, value_name = "ADDR:PORT", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// The user to run as once the events are open (no capabilities, no groups but
    /// the user's own).
    #[arg(long, value_name = "USER", default_value = "nobody")]
    pub user: String,
}

/// `serve --listen` by default: this host only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9857";
/// `--duty`: a cycle, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DutyFlag {
    Off,
    Cycle(Duty),
}

fn parse_duty(s: &str) -> Result<DutyFlag, String> {
    if s == "off" {
        return Ok(DutyFlag::Off);
    }
    s.parse().map(DutyFlag::Cycle)
}

/// `--defer`'s cap on the memory held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeferSize {
    /// 1 GiB, or a quarter of the memory available if that is less.
    Auto,
    Bytes(u64),
}

/// `--defer` without a size holds at most this much.
pub const DEFER_DEFAULT: u64 = 1 << 30;

fn parse_defer(s: &str) -> Result<DeferSize, String> {
    if s == "auto" {
        return Ok(DeferSize::Auto);
    }
    let bad =
        || format!("`{s}`: give a size in bytes, with K, M or G for KiB, MiB, GiB (e.g. 512M, 2G)");
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let n: u64 = t[..digits].parse().map_err(|_| bad())?;
    let shift = match t[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    n.checked_mul(1 << shift)
        .map(DeferSize::Bytes)
        .ok_or_else(|| format!("`{s}`: too large"))
}

/// `serve --duty` by default: 3 s of every minute, the events on ≈ 12 % of the time.
pub const SERVE_DUTY: (u64, u64) = (3, 60);

/// `serve --max-rate` by default: about 2000 I/Os per second traced.
pub const SERVE_MAX_RATE: u64 = 2000;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The perf.data (file or pipe mode; `-` reads a pipe-mode stream from standard input).
    pub file: PathBuf,
    /// The profile to join the events with (default: the one whose required events are
    /// all in the capture). An event only some stages need may be missing (block:
    /// issue and complete alone give d2c): those stages are then empty.
    #[arg(short, long)]
    pub profile: Option<String>,
    #[command(flatten)]
    pub rows: Rows,
    /// Event formats from this tracefs tree (the recording kernel's, or a copy) instead
    /// of the file's own tracing data.
    #[arg(long, value_name = "DIR")]
    pub tracefs: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatArgs {
    #[command(flatten)]
    pub sel: Selection,
    /// Read the events from this perf.data instead of tracing (see `import`): prints the
    /// summary of the whole capture. The profile is guessed from the capture unless -p
    /// is given.
    #[arg(long, value_name = "PERF.DATA")]
    pub input: Option<PathBuf>,
    /// Seconds between interval tables (fractions allowed); 0 prints only the summary.
    #[arg(short, long, default_value_t = 1.0, value_name = "SECONDS")]
    pub interval: f64,
    #[command(flatten)]
    pub show: Show,
}

/// How latency tables are shown (stat and report).
#[derive(Debug, Args)]
pub struct Show {
    /// JSON lines instead of tables: one object per interval and one summary, with the
    /// groups' labels, each stage's count, mean, percentiles and max (ns), and the lost,
    /// unmatched and incomplete counters.
    #[arg(long)]
    pub json: bool,
    /// Percentiles to show, comma-separated (each above 0, at most 100).
    #[arg(long, value_name = "LIST", default_value = "50,90,99,99.9", value_parser = percentiles)]
    pub percentiles: Percentiles,
}

impl Show {
    pub fn format(&self) -> StatFormat {
        StatFormat {
            json: self.json,
            percentiles: self.percentiles.clone(),
            intervals: false,
        }
    }
}

fn percentiles(s: &str) -> Result<Percentiles, String> {
    Percentiles::parse(s).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// CSV recorded on the host (`record --side host`).
    pub host: PathBuf,
    /// CSV recorded on the target (`record --side target`).
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
    /// A CSV or Parquet file written by `ntprof-perf record`, or a perf.data (imported
    /// first, as `import` does).
    pub file: PathBuf,
    #[command(flatten)]
    pub show: Show,
}

/// Every profile's own flags, once per id (profiles sharing a flag define it alike).
pub fn profile_args() -> Vec<clap::Arg> {
    let mut all: Vec<clap::Arg> = Vec::new();
    for p in profile::all() {
        for a in p.args() {
            if !all.iter().any(|x| x.get_id() == a.get_id()) {
                all.push(a);
            }
        }
    }
    all
}

/// The command line: the derived flags plus the profiles' own on `record` and `stat`.
pub fn command() -> clap::Command {
    let extra = profile_args();
    let mut c = Cli::command();
    for sub in ["record", "stat", "serve"] {
        let extra = extra.clone();
        c = c.mut_subcommand(sub, move |s| {
            s.next_help_heading("Profile flags (see `ntprof-perf list`)")
                .args(extra)
        });
    }
    c
}

/// Parse the process arguments: the typed flags and the raw matches of the
/// subcommand, from which profiles read their own.
pub fn parse() -> (Cli, clap::ArgMatches) {
    let m = command().get_matches();
    let cli = Cli::from_arg_matches(&m).unwrap_or_else(|e| e.exit());
    let sub = m.subcommand().map(|(_, s)| s.clone()).unwrap_or_default();
    (cli, sub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defer_sizes_have_units_and_bad_ones_say_what_to_give() {
        assert_eq!(parse_defer("auto"), Ok(DeferSize::Auto));
        assert_eq!(parse_defer("4096"), Ok(DeferSize::Bytes(4096)));
        assert_eq!(parse_defer("64K"), Ok(DeferSize::Bytes(64 << 10)));
        assert_eq!(parse_defer("512MiB"), Ok(DeferSize::Bytes(512 << 20)));
        assert_eq!(parse_defer("2g"), Ok(DeferSize::Bytes(2 << 30)));
        assert_eq!(parse_defer("0"), Ok(DeferSize::Bytes(0)));
        for bad in ["", "G", "1.5G", "-1", "12Q", "99999999999T"] {
            let e = parse_defer(bad).unwrap_err();
            assert!(e.contains(&format!("`{bad}`")), "{bad}: {e}");
        }
        let m = command()
            .try_get_matches_from(["ntprof-perf", "record", "--defer", "-o", "x.csv"])
            .unwrap();
        let (_, sub) = m.subcommand().unwrap();
        assert_eq!(sub.get_one::<DeferSize>("defer"), Some(&DeferSize::Auto));
    }

    /// `serve` always has a budget, which two threads or a deferred run cannot keep:
    /// its --help does not offer them, the commands that take them do.
    #[test]
    fn serve_does_not_offer_what_it_refuses() {
        let mut cli = command();
        let mut help = |sub: &str| {
            let c = cli.find_subcommand_mut(sub).unwrap();
            c.render_long_help().to_string()
        };
        let serve = help("serve");
        assert!(serve.contains("--max-rate"), "{serve}");
        assert!(
            !serve.contains("--threads") && !serve.contains("--defer"),
            "{serve}"
        );
        for sub in ["record", "stat"] {
            let h = help(sub);
            assert!(
                h.contains("--threads") && h.contains("--defer"),
                "{sub}: {h}"
            );
        }
    }

    #[test]
    fn cli_is_well_formed() {
        command().debug_assert();
    }

    #[test]
    fn command_after_double_dash() {
        let c = Cli::try_parse_from([
            "ntprof-perf",
            "record",
            "-o",
            "x.csv",
            "--",
            "dd",
            "if=/dev/zero",
            "-x",
        ])
        .unwrap();
        let Cmd::Record(r) = c.cmd else { panic!() };
        assert_eq!(r.sel.command, ["dd", "if=/dev/zero", "-x"]);
        assert_eq!(r.sel.profile, "block");
        let m = command()
            .try_get_matches_from(["ntprof-perf", "record", "-d", "loop0", "--", "dd"])
            .unwrap();
        let (_, sub) = m.subcommand().unwrap();
        let devs: Vec<&String> = sub.get_many::<String>("device").unwrap().collect();
        assert_eq!(devs, ["loop0"]);
    }

    /// `-d a,b` and `-d a -d b` name the same devices.
    #[test]
    fn devices_by_list_or_repeated() {
        let devs = |args: &[&str]| -> Vec<String> {
            let m = command().try_get_matches_from(args).unwrap();
            let (_, sub) = m.subcommand().unwrap();
            sub.get_many::<String>("device").unwrap().cloned().collect()
        };
        let listed = devs(&["ntprof-perf", "stat", "-d", "loop0,/dev/loop1", "-d", "7:2"]);
        assert_eq!(listed, ["loop0", "/dev/loop1", "7:2"]);
        let repeated = devs(&[
            "ntprof-perf",
            "stat",
            "-d",
            "loop0",
            "-d",
            "/dev/loop1",
            "-d",
            "7:2",
        ]);
        assert_eq!(listed, repeated);
    }
}
