//! Command-line arguments as clap parses them (raw strings and numbers), and
//! their one conversion into validated settings. Nothing downstream parses.

use std::time::Duration;

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use crate::plan::by::ByKey;
use crate::plan::filter::Filter;
use crate::report::Unit;
use crate::resolve::FuncSpec;
use crate::scope::Scoping;
use crate::symbols::Pattern;

const LATENCY_EXAMPLES: &str = "\
Examples:
  tachy latency -p 4242 'db::Table::scan'          histogram of every overload and clone
  tachy latency -u -p 4242 'db::Table::scan(int)'  one overload, in microseconds
  tachy latency -p 4242 c:malloc libstdc++:'std::*::_M_create'
  tachy latency /usr/sbin/nginx:ngx_http_process_request   every process running nginx
  tachy latency -m -i 5 -T -p 4242 'ns::Class::*'  a report every 5 s, with times
  tachy latency --slower-than 1ms -p 4242 read_page        only calls over 1 ms
  tachy latency -u --cpu -p 4242 'db::Table::scan'  on-CPU, blocked and runnable time
  tachy latency -p 4242 'kv::Store::get' --filter 'key == 42'   only calls with key 42
  tachy latency -p 4242 'db::Table::scan' --filter 'arg1 > 1000 && tid != 4250'
  tachy latency -p 4242 syscall:read --filter 'fd == 5'        reads of fd 5
  tachy latency -u -p 4242 'db::Table::scan' --by caller   per call site, at file:line
  tachy latency -p 4242 'kv::Store::get' --by tid --top 5  the 5 threads with most time
  tachy latency /usr/sbin/nginx:ngx_http_process_request --by pid   per process
  tachy latency -p 4242 'db::Table::scan' --filter 'arg1 > 1000' --by arg1 --top 5
  tachy latency -p 4242 'kv::Store::get' --by key --by tid   per value of parameter key, per thread
  tachy latency --record-slower-than 5ms -p 4242 'db::Table::scan'   a line per call over 5 ms
  tachy latency slow_sum -- ./app --flag            start ./app and trace it until it exits
  tachy latency -p 4242,4250 'kv::Store::read'     two processes, each counted
  tachy latency --comm kvd 'kv::Store::read'       every process named kvd
  tachy latency --pgrep '^kv' 'kv::Store::read'    every process whose name matches, as pgrep
  tachy latency --cgroup /sys/fs/cgroup/system.slice/kvd.service /srv/kv/kvd:'kv::Store::read'
                                   one cgroup (a container, a unit), processes started later too
  tachy latency -u -p 4242 syscall:read 'syscall:pread*'   system call latency, enter to exit
  tachy latency -u k:vfs_read                      a kernel function (fentry/fexit or kprobes)
  tachy latency --prometheus 9464 --label service=kv -p 4242 'kv::Store::*'
                                   histograms at http://127.0.0.1:9464/metrics until Ctrl-C
  tachy latency --textfile /var/lib/node_exporter/textfile/tachy.prom -p 4242 read_page

--filter: argN counts from 0 (arg0 is rdi, `this` of a C++ method); a
compiler clone (.isra, .constprop) takes its own registers, so prefer the
parameter's name there, which is read where the clone's DWARF puts it.

Functions are matched by demangled name: `ns::Class::read` matches every
overload and compiler clone (.isra, .constprop, .part); add parameters to pick
one overload; `*` and `?` glob; a mangled name matches itself. Prefix LIB: or
PATH: to pick the object; with -p a bare name is looked up in the executable,
then in the libraries it maps, then among the kernel's functions (k:FUNC names
one outright; with -p only that process's calls count).

Ctrl-C (SIGINT) or SIGTERM stops tracing and prints the report; signals
within 1 s of the first are the same stop (timeout, make and a terminal
often send two or three). A later one ends tachy at once: before the
report is printed, saying that it was abandoned.

Exit status: 0 on success, also when stopped by SIGINT or SIGTERM once the
report is printed (with --, the traced command's own status); 1 on any
error (one line on stderr); 2 on bad usage; 130 (SIGINT) or 143 (SIGTERM)
when a signal ended tachy before tracing began or before its report was
printed, or while it waited for the command after --.";

const NESTED_EXAMPLES: &str = "\
Examples:
  tachy nested -p 4242 'db::Table::scan'                  its call sites, one level
  tachy nested -p 4242 'db::Table::scan' --depth 2        and the call sites of its callees
  tachy nested -p 4242 'db::Table::scan' --expand 'db::Page::load'
  tachy nested -p 4242 'db::Table::scan' --slower-than 1ms   only the slow calls
  tachy nested -p 4242 'db::Table::scan' --filter 'key == 42'   only calls with key 42
  tachy nested -p 4242 'db::Table::scan' --record-slower-than 5ms   each slow call's sites
  tachy nested --folded -d 10 -p 4242 scan > scan.folded
  tachy nested --svg scan.svg -d 10 -p 4242 scan
  tachy nested 'kv::Store::read' -- ./kvdemo
  tachy nested --prometheus 0.0.0.0:9464 -p 4242 'db::Table::scan'   each site as a metric
  tachy nested -p 5151 'main.(*Server).handle' --depth 2   a Go method, per goroutine

Each call site (`call`, through the PLT, indirect, or a tail jump) is timed
from the call to its return while the function is the innermost traced frame
on that thread; self is the function's time outside them. With --slower-than
the breakdown covers only the calls of the function that were that slow.
In Go code the frames are the goroutine's, wherever it runs and however
its stack grows; a site call left by a panic is counted, never timed
(--slower-than/--faster-than are not taken for Go functions yet).
Sites that never ran are left out of the text report (--all-sites shows
them). A tree may have up to 4096 nodes.

Signals and exit status: as for tachy latency (tachy latency --help).";

const LIST_EXAMPLES: &str = "\
Examples:
  tachy list -p 4242 'db::Table::*'
  tachy list ./build/server 'Conn::read'
  tachy list libstdc++.so.6 'std::terminate*' 'operator new'
  tachy list /usr/lib/x86_64-linux-gnu/libc.so.6:malloc
  tachy list -p 4242 c:pthread_mutex_lock
  tachy list --sites ./build/server 'Conn::read'   with every call site, at file:line
  tachy list 'k:vfs_*'                             kernel functions
  tachy list 'syscall:*read*'                      system calls";

pub use crate::version::VERSION;

#[derive(Parser, Debug)]
#[command(
    name = "tachy",
    version = VERSION,
    about = "Live latency histograms for functions of running programs, with probes that never hurt them",
    long_about = None,
    propagate_version = true,
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Time functions: a log2 histogram with count, average, total and percentiles
    #[command(after_help = LATENCY_EXAMPLES)]
    Latency(LatencyArgs),
    /// Time every call site inside a function, several levels deep, with self time
    #[command(after_help = NESTED_EXAMPLES)]
    Nested(NestedArgs),
    /// List the functions a pattern matches, with addresses and exit probes
    #[command(after_help = LIST_EXAMPLES)]
    List(ListArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell)
    #[command(after_help = COMPLETIONS_EXAMPLES)]
    Completions(CompletionsArgs),
    /// Add up reports of several runs or hosts (--json reports, --hlog logs) into one
    #[command(after_help = MERGE_EXAMPLES)]
    Merge(MergeArgs),
    /// Compare two reports: per function, the change of count, average and percentiles
    #[command(after_help = DIFF_EXAMPLES)]
    Diff(DiffArgs),
    /// Print a man page, or write the man pages of tachy and its subcommands to DIR
    #[command(after_help = MAN_EXAMPLES)]
    Man(ManArgs),
    /// Explore a process live: where its time goes, then any function's exact latency
    Explore(crate::explore::ExploreArgs),
}

const MERGE_EXAMPLES: &str = "\
Examples:
  tachy merge host1.json host2.json host3.json          one report of all three
  tachy merge --json -o all.json host*.json             the same, as JSON
  tachy merge --hlog all.hlog run1.hlog run2.json       as an HdrHistogram log
  tachy merge --per-input monday.json tuesday.json      with each input's calls

Inputs are files of `tachy latency --json` (every report in a file is
added) and `tachy latency --hlog` or `tachy nested --hlog` logs (a call site
is named by its path). Functions are matched by demangled name and the base
name of their object. The sums are exact: every input holds the kernel's
own buckets. Inputs in different units (-u, -m) are added in the coarsest:
a bucket goes whole into the bucket of that unit its durations fall in,
and where one straddles two (1000 is no power of two) the merge is
refused, naming it. The --cpu parts of a function are added where every
input has them, and left out otherwise.";

const DIFF_EXAMPLES: &str = "\
Examples:
  tachy diff before.json after.json       count, avg, p50, p90, p99, p99.9, max
  tachy diff --json before.hlog after.hlog
  tachy diff base.json pr.json --fail-on 'p99 > +10%' --fail-on 'avg > +5%'
  tachy diff base.hlog pr.hlog --fail-on 'max > 50ms' --fail-on 'rate < -20%'

A and B are files as `tachy merge` reads them (every report in a file is
added up first). Reports of --cpu runs also compare each part's average per
call (on-CPU, blocked, runnable).

Exit status: 0; 1 when a --fail-on bound was crossed (the lines after the
comparison name each function and bound); 2 when an input cannot be read.
A bound is judged on the functions present in both reports; one that a side
cannot answer (a rate where a report does not say how long it covered, a
percent change from 0) is named as not judged and does not fail.";

#[derive(Args, Debug)]
pub struct MergeArgs {
    /// Reports of `tachy latency --json` and logs of `--hlog`
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Print the merged report as one JSON object
    #[arg(long)]
    pub json: bool,

    /// Write the merged histograms to FILE as an HdrHistogram interval log
    /// (instead of printing a report)
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    pub hlog: Option<PathBuf>,

    /// Also show each function's calls in each input
    #[arg(long)]
    pub per_input: bool,

    /// Write the report to FILE instead of standard output
    #[arg(short, long, value_name = "FILE", conflicts_with = "hlog")]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The report before
    #[arg(value_name = "A")]
    pub a: PathBuf,

    /// The report after
    #[arg(value_name = "B")]
    pub b: PathBuf,

    /// Print the comparison as one JSON object
    #[arg(long)]
    pub json: bool,

    /// Exit with status 1 when a function present in both reports crosses
    /// BOUND, `FIGURE OP LIMIT`: FIGURE is count, rate (calls/s), avg,
    /// p50, p90, p99, p99.9, max, or a --cpu part (oncpu, blocked,
    /// runnable); OP is >, >=, < or <=; LIMIT a change in percent (+10%,
    /// -20%), a change in the figure's terms (+2ms, -100), or without a
    /// sign a value B must not cross (50ms). Repeat for several bounds.
    #[arg(long, value_name = "BOUND", value_parser = crate::gate::parse_arg)]
    pub fail_on: Vec<crate::gate::Bound>,
}

const COMPLETIONS_EXAMPLES: &str = "\
Examples:
  source <(tachy completions bash)                      in the current bash
  tachy completions bash > /usr/share/bash-completion/completions/tachy
  tachy completions zsh > /usr/local/share/zsh/site-functions/_tachy
  tachy completions fish > ~/.config/fish/completions/tachy.fish";

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete in
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

const MAN_EXAMPLES: &str = "\
Examples:
  tachy man | man -l -                  tachy(1)
  tachy man latency | man -l -          tachy-latency(1)
  tachy man ./pages                     every page, written into ./pages
  tachy man /usr/local/share/man/man1";

#[derive(Args, Debug)]
pub struct ManArgs {
    /// A page to print: tachy, or a subcommand (latency, nested, list,
    /// merge, diff, completions, man; tachy-latency too). An argument with a
    /// `/` in it, or `.` or `..`, is a directory instead (./latency is the
    /// directory latency): tachy.1 and a page per subcommand
    /// (tachy-latency.1, ...) are written into it, creating it if missing
    #[arg(value_name = "PAGE|DIR")]
    pub page: Option<String>,
}

/// What `tachy man` writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManTarget {
    /// One page to standard output: `tachy` or a subcommand's name.
    Page(String),
    /// Every page, into this directory.
    Dir(PathBuf),
}

impl ManArgs {
    /// Tells a page from a directory: a directory has a `/` in it (or is
    /// `.` or `..`), so that no directory can shadow a page's name.
    pub fn validate(self) -> Result<ManTarget> {
        let Some(arg) = self.page else {
            return Ok(ManTarget::Page("tachy".into()));
        };
        if arg.contains('/') || arg == "." || arg == ".." {
            return Ok(ManTarget::Dir(PathBuf::from(arg)));
        }
        let names = page_names();
        let name = arg.strip_prefix("tachy-").unwrap_or(&arg);
        if names.iter().any(|n| n == name) {
            return Ok(ManTarget::Page(name.to_string()));
        }
        Err(usage(format!(
            "{arg:?} is not a page ({}); write a directory with a / in it (./{arg})",
            names.join(", ")
        )))
    }
}

/// The names `tachy man` prints a page for: tachy and its subcommands.
pub fn page_names() -> Vec<String> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    std::iter::once("tachy".to_string())
        .chain(cmd.get_subcommands().map(|c| c.get_name().to_string()))
        .filter(|n| n != "help")
        .collect()
}

impl Command {
    /// The subcommand's name, as typed.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Latency(_) => "latency",
            Command::Nested(_) => "nested",
            Command::List(_) => "list",
            Command::Completions(_) => "completions",
            Command::Merge(_) => "merge",
            Command::Diff(_) => "diff",
            Command::Man(_) => "man",
            Command::Explore(_) => "explore",
        }
    }
}

/// What `tachy latency` and `tachy nested` share: the target, the units,
/// the intervals, the filters and where the reports go.
#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Trace this process (its executable and the libraries it maps); with
    /// several (-p 1,2 or -p 1 -p 2), each counted, names looked up in
    /// each of their programs
    #[arg(short, long, value_name = "PID", value_parser = parse_id, allow_negative_numbers = true,
          value_delimiter = ',', action = clap::ArgAction::Append)]
    pub pid: Vec<u32>,

    /// Trace every process of this cgroup v2 directory and the cgroups below
    /// it (a container, a pod, a systemd unit), including processes started
    /// later; with PATH:FUNC, whatever runs that binary there
    #[arg(long, value_name = "PATH", conflicts_with_all = ["pid", "comm", "pgrep"])]
    pub cgroup: Option<PathBuf>,

    /// Trace every running process whose command name (/proc/PID/comm, 15
    /// characters at most) is NAME
    #[arg(long, value_name = "NAME", conflicts_with_all = ["pid", "pgrep"])]
    pub comm: Option<String>,

    /// Trace every running process whose command name matches PATTERN, an
    /// extended regular expression, as pgrep matches
    #[arg(long, value_name = "PATTERN", conflicts_with = "pid")]
    pub pgrep: Option<String>,

    /// Count only this thread (a thread of the process given with -p)
    #[arg(short, long, value_name = "TID", value_parser = parse_id, allow_negative_numbers = true)]
    pub tid: Option<u32>,

    /// Print durations in microseconds
    #[arg(short = 'u', long = "microseconds", conflicts_with = "milliseconds")]
    pub microseconds: bool,

    /// Report durations as the probes measure them: do not subtract the
    /// probes' own time (measured at start-up on this machine)
    #[arg(long)]
    pub raw: bool,

    /// Print durations in milliseconds
    #[arg(short = 'm', long = "milliseconds")]
    pub milliseconds: bool,

    /// Print a report every SECS seconds (each covers only its interval;
    /// 0.5 or 500ms too; at least 10ms)
    #[arg(short, long, value_name = "SECS", value_parser = parse_interval, allow_negative_numbers = true)]
    pub interval: Option<Duration>,

    /// Stop after SECS seconds (0.5 or 500ms too); a command started after
    /// -- keeps running
    #[arg(short, long, value_name = "SECS", value_parser = parse_seconds, allow_negative_numbers = true)]
    pub duration: Option<Duration>,

    /// Print a timestamp before each report
    #[arg(short = 'T', long)]
    pub timestamp: bool,

    /// Keep only calls that took at least DUR (250us, 1ms, 2s); count the
    /// others as filtered
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub slower_than: Option<u64>,

    /// Keep only calls that took at most DUR; count the others as filtered
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub faster_than: Option<u64>,

    /// Write the reports to FILE instead of standard output (created or
    /// truncated before any probe is attached)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Also trace the processes the traced one forks (and theirs) after tachy attached
    #[arg(long)]
    pub follow: bool,

    /// Split each call's time into on-CPU, blocked (asleep: locks, I/O,
    /// sleeps) and runnable (waiting for a CPU), from the scheduler's
    /// tracepoints
    #[arg(long)]
    pub cpu: bool,

    /// Time only calls whose arguments match EXPR, decided in the kernel at
    /// each call's entry; the others are counted as filtered out. EXPR
    /// compares argN (from 0: arg0..arg5 are rdi, rsi, rdx, rcx, r8, r9; a
    /// C++ method's `this` is arg0; of a system call: rdi, rsi, rdx, r10,
    /// r8, r9), a parameter's DWARF name, tid or pid with an integer
    /// (decimal, 0x hex, negative) by == != < <= > >=, joined by && and
    /// ||, with parentheses. Names are read where each function (each
    /// compiler clone) has them at its entry
    #[arg(long, value_name = "EXPR", value_parser = parse_filter)]
    pub filter: Option<Filter>,

    /// Serve cumulative histograms at http://ADDR:PORT/metrics for
    /// Prometheus (OpenMetrics), tracing until stopped; a port alone listens
    /// on 127.0.0.1; -u and -m do not apply (metrics are in seconds)
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub prometheus: Option<SocketAddr>,

    /// Write the same metrics to FILE for node_exporter's textfile
    /// collector, replaced atomically every interval (-i, 15 s if not
    /// given) and when tracing ends; created before any probe is attached
    #[arg(long, value_name = "FILE")]
    pub textfile: Option<PathBuf>,

    /// Add the label NAME=VALUE to every metric of --prometheus and
    /// --textfile (repeatable)
    #[arg(long = "label", value_name = "NAME=VALUE", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,

    /// Print one line (with --json, one JSON object) per call that took at
    /// least DUR (250us, 1ms, 2s; 0ns for every call) as it ends: the time of
    /// its end, pid, tid, thread name, function, duration, the --cpu split,
    /// its first integer arguments by their DWARF parameter names (else the
    /// registers arg0-arg2) and, with `tachy nested`, what each call site
    /// took in it. An argument whose register the function overwrites
    /// before tachy's cheaper entry probe moves that probe to the first
    /// instruction (as --filter does); one that cannot be read prints as
    /// NAME=?. The report still prints at the end
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub record_slower_than: Option<u64>,

    /// Print the probes that would be attached on standard output, and exit
    /// (needs no privilege)
    #[arg(long)]
    pub dry_run: bool,

    /// Say which symbols and probes were chosen, and show libbpf's messages
    #[arg(short, long)]
    pub verbose: bool,

    /// Command to start and trace until it exits (after --). While JSON or
    /// folded stacks go to standard output, the command's standard output
    /// goes to tachy's standard error, so the two never mix
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// Functions to trace: FUNC, LIB:FUNC, PATH:FUNC, k:FUNC or syscall:NAME
    #[arg(required = true, value_name = "FUNC", value_parser = Quoted(parse_func_spec))]
    pub funcs: Vec<FuncSpec>,

    /// Print each report as one JSON object per line
    #[arg(long)]
    pub json: bool,

    /// With recursion, time only the outermost call of each function (for
    /// Go functions, on each goroutine)
    #[arg(long)]
    pub outermost: bool,

    /// Time returns with uretprobes: cheaper, but a C++ exception or Rust
    /// panic unwinding through a traced function then aborts the process
    /// (never used for Go functions, whose stacks the Go runtime walks)
    #[arg(long)]
    pub uretprobe: bool,

    /// With --uretprobe: use one even on a function that calls code that
    /// throws (refused without it)
    #[arg(long, requires = "uretprobe")]
    pub force: bool,

    /// Also write each interval's histogram of every function to FILE, as an
    /// HdrHistogram interval log (V2 compressed, nanoseconds, tagged
    /// OBJECT/FUNCTION); created before any probe is attached
    #[arg(long, value_name = "FILE")]
    pub hlog: Option<PathBuf>,

    /// With --cpu: also print a log2 histogram of each part (on-CPU,
    /// blocked, runnable) per call
    #[arg(long, requires = "cpu")]
    pub hist: bool,

    /// Break each function's calls down by KEY: caller (the call site it
    /// was called from, as function at file:line), tid (thread, with its
    /// name), pid (process, with its command), argN (the integer value of
    /// argument N at entry, as --filter reads it), a DWARF parameter name
    /// (its value: decimal as its type reads, pointers in hex) or
    /// goroutine (Go functions: the goroutine's id); repeat for two keys
    /// (--by caller --by tid, --by key --by tid). Counted in the kernel
    #[arg(long = "by", value_name = "KEY", value_parser = ByKeyParser, hide_possible_values = true)]
    pub by: Vec<ByKey>,

    /// With several functions, also show those never called (the text
    /// report leaves them out and says how many; JSON always has them)
    #[arg(long)]
    pub all: bool,

    /// With --by: show the N groups with the most total time, the others
    /// as one "other" line. With --prometheus or --textfile, also the
    /// groups per function with a series of their own (20 if not given):
    /// the first N seen, by total time; later ones add to one series whose
    /// key labels are "other"
    #[arg(long, value_name = "N", requires = "by",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub top: Option<u32>,

    #[command(flatten)]
    pub trace: TraceArgs,
}

#[derive(Args, Debug)]
pub struct NestedArgs {
    /// The function to break down: FUNC, LIB:FUNC or PATH:FUNC
    #[arg(value_name = "FUNC", value_parser = Quoted(parse_func_spec))]
    pub func: FuncSpec,

    /// Levels of call sites to time: 1 is the function's own
    #[arg(long, default_value_t = 1, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=8))]
    pub depth: u32,

    /// Also break down callees matching PATTERN, at any level (repeatable)
    #[arg(long, value_name = "PATTERN", value_parser = Quoted(parse_pattern))]
    pub expand: Vec<Pattern>,

    /// Also print a log2 histogram of each call site (of the calls counted);
    /// with --cpu, one of each part (on-CPU, blocked, runnable) per call too
    #[arg(long)]
    pub hist: bool,

    /// Also show the call sites that never ran (the text report hides them and
    /// says how many; JSON always has them)
    #[arg(long)]
    pub all_sites: bool,

    /// Print each report as one JSON object per line
    #[arg(long, conflicts_with_all = ["folded", "svg"])]
    pub json: bool,

    /// Print folded stacks weighted by self nanoseconds (for flame graph tools)
    #[arg(long, conflicts_with = "svg")]
    pub folded: bool,

    /// Write a flame graph of the whole run (all intervals) to FILE (SVG);
    /// FILE is created before any probe is attached
    #[arg(long, value_name = "FILE", conflicts_with = "output")]
    pub svg: Option<PathBuf>,

    /// Also write each interval's histogram of the function and of each
    /// call site to FILE, as an HdrHistogram interval log (V2 compressed,
    /// nanoseconds); a site is tagged with its path,
    /// OBJECT/FUNCTION;SITE [FILE:LINE];...; created before any probe is
    /// attached
    #[arg(long, value_name = "FILE")]
    pub hlog: Option<PathBuf>,

    #[command(flatten)]
    pub trace: TraceArgs,
}

/// How reports are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// funclatency's table, or the nested tree.
    Text,
    /// One JSON object per report, one per line.
    Json,
    /// Folded stacks weighted by self time (`tachy nested`).
    Folded,
    /// A flame graph of the whole run (`tachy nested`).
    Svg,
}

/// Where and how reports go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    pub format: Format,
    /// A file instead of standard output (always one for SVG).
    pub path: Option<PathBuf>,
}

impl Output {
    /// Machine-read output on standard output: nothing else may go there.
    pub fn machine_on_stdout(&self) -> bool {
        self.format != Format::Text && self.path.is_none()
    }
}

/// What `tachy nested` adds to the common settings.
#[derive(Clone, Debug)]
pub struct NestedOpts {
    pub depth: u32,
    pub expand: Vec<Pattern>,
    pub hist: bool,
    /// Show the call sites that never ran in the text report too.
    pub all_sites: bool,
}

/// What `tachy latency` and `tachy nested` time.
#[derive(Clone, Debug)]
pub enum Mode {
    /// Each traced function.
    Latency,
    /// Each traced function and the tree of its call sites.
    Nested(NestedOpts),
}

impl Mode {
    /// The tree of `tachy nested`, if that is the mode.
    pub fn nested(&self) -> Option<&NestedOpts> {
        match self {
            Mode::Nested(n) => Some(n),
            Mode::Latency => None,
        }
    }

    pub fn is_nested(&self) -> bool {
        matches!(self, Mode::Nested(_))
    }
}

/// Whom `tachy latency` and `tachy nested` trace.
#[derive(Clone, Debug)]
pub enum Traced {
    /// Every process that maps the files named (`PATH:FUNC`), or the
    /// kernel.
    Files,
    /// One running process (`-p PID`).
    Process(u32),
    /// Several processes, a cgroup, or processes by name.
    Processes(Scoping),
    /// A command tachy starts (after `--`), never empty.
    Command(Vec<String>),
}

impl Traced {
    /// The one process of `-p PID`.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Traced::Process(pid) => Some(*pid),
            _ => None,
        }
    }

    /// The processes other than one `-p PID`.
    pub fn scoping(&self) -> Option<&Scoping> {
        match self {
            Traced::Processes(sc) => Some(sc),
            _ => None,
        }
    }

    /// The command to start; empty for none.
    pub fn command(&self) -> &[String] {
        match self {
            Traced::Command(c) => c,
            _ => &[],
        }
    }
}

/// Validated settings of `tachy latency` and `tachy nested`.
#[derive(Clone, Debug)]
pub struct TraceSettings {
    pub specs: Vec<FuncSpec>,
    /// Whom to trace.
    pub traced: Traced,
    pub tid: Option<u32>,
    pub unit: Unit,
    pub interval: Option<Duration>,
    pub duration: Option<Duration>,
    pub timestamp: bool,
    pub output: Output,
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub outermost: bool,
    pub uretprobe: bool,
    /// `--force`: a uretprobe even on a function that may throw.
    pub force: bool,
    pub follow: bool,
    /// `--cpu`: split each call into on-CPU, blocked and runnable time.
    pub cpu: bool,
    /// `--cpu --hist` of `tachy latency`: a histogram of each part.
    pub cpu_hist: bool,
    /// Durations as measured, the probes' own time left in.
    pub raw: bool,
    /// `--record-slower-than`: record each call at least this long (ns).
    pub record: Option<u64>,
    pub dry_run: bool,
    pub verbose: bool,
    /// `--hlog`: the HdrHistogram interval log to write.
    pub hlog: Option<PathBuf>,
    /// What is timed: the functions, or the tree of their call sites.
    pub mode: Mode,
    /// `--filter`: which calls to time, by their arguments.
    pub filter: Option<Filter>,
    /// `--prometheus`, `--textfile`: metrics for Prometheus.
    pub export: Option<ExportSettings>,
    /// `--by`: the keys calls are grouped by (none: no groups).
    pub by: Vec<ByKey>,
    /// `--top`: groups shown per function; the rest are one "other" line.
    pub top: Option<usize>,
    /// `--all`: the text report shows functions never called too.
    pub all: bool,
}

/// Where metrics for Prometheus go, and their user labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportSettings {
    /// `--prometheus`: the address `/metrics` is served on.
    pub listen: Option<SocketAddr>,
    /// `--textfile`: the file rewritten every `every`.
    pub textfile: Option<PathBuf>,
    pub every: Duration,
    /// `--label NAME=VALUE`, in order, names checked and distinct.
    pub labels: Vec<(String, String)>,
}

/// How often `--textfile` is rewritten without `-i`.
pub const TEXTFILE_EVERY: Duration = Duration::from_secs(15);

pub use crate::usage::UsageError;

/// An error and its causes as one message, `outer: inner: …`, worded as
/// tachy's own: no `(os error N)` tails, the system's messages lowercase
/// (`no space left on device`), `libbpf: ` said once.
pub fn error_text(e: &anyhow::Error) -> String {
    let parts: Vec<String> = e
        .chain()
        .map(|c| {
            let mut t = without_os_error(&c.to_string());
            if c.downcast_ref::<std::io::Error>().is_some() {
                t = lowercase_first(&t);
            }
            t
        })
        .collect();
    let mut text = parts.join(": ");
    while text.contains("libbpf: libbpf: ") {
        text = text.replace("libbpf: libbpf: ", "libbpf: ");
    }
    text
}

/// `s` without the ` (os error N)` that Rust adds to system errors.
fn without_os_error(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(" (os error ") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + " (os error ".len()..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && tail[digits..].starts_with(')') {
            rest = &tail[digits + 1..];
        } else {
            out.push_str(" (os error ");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// `No space left on device` as `no space left on device`; an acronym
/// (`ENOSPC`) stays.
fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(a), Some(b)) if a.is_ascii_uppercase() && b.is_ascii_lowercase() => {
            format!("{}{}", a.to_ascii_lowercase(), &s[1..])
        }
        _ => s.to_string(),
    }
}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

impl LatencyArgs {
    pub fn validate(self) -> Result<TraceSettings> {
        let format = if self.json {
            Format::Json
        } else {
            Format::Text
        };
        let mut s = self.trace.validate(self.funcs, format, None)?;
        s.outermost = self.outermost;
        s.uretprobe = self.uretprobe;
        s.force = self.force;
        s.hlog = self.hlog;
        s.cpu_hist = self.hist;
        if let Err(e) = crate::plan::by::check(&self.by, Default::default()) {
            return Err(usage(e));
        }
        if let Some(e) = &s.export {
            // The group series' own labels.
            let mut names: Vec<String> = self
                .by
                .iter()
                .map(|k| crate::report::prom::group_label_name(&k.name()))
                .collect();
            if !self.by.is_empty() {
                names.push("comm".into());
            }
            if let Some((n, _)) = e.labels.iter().find(|(n, _)| names.contains(n)) {
                return Err(usage(format!(
                    "--label {n}: with --by, {n} is a label tachy sets itself on the groups' metrics"
                )));
            }
        }
        s.by = self.by;
        s.top = self.top.map(|n| n as usize);
        s.all = self.all;
        Ok(s)
    }
}

impl NestedArgs {
    pub fn validate(self) -> Result<TraceSettings> {
        if self.folded && self.trace.record_slower_than.is_some() {
            return Err(usage(
                "--record-slower-than and --folded do not go together: records are lines of text or JSON",
            ));
        }
        let (format, svg) = match (self.json, self.folded, self.svg) {
            (true, _, _) => (Format::Json, None),
            (_, true, _) => (Format::Folded, None),
            (_, _, Some(p)) => (Format::Svg, Some(p)),
            _ => (Format::Text, None),
        };
        let mut s = self.trace.validate(vec![self.func], format, svg)?;
        s.hlog = self.hlog;
        s.cpu_hist = s.cpu && self.hist;
        s.mode = Mode::Nested(NestedOpts {
            depth: self.depth,
            expand: self.expand,
            hist: self.hist,
            all_sites: self.all_sites,
        });
        Ok(s)
    }
}

impl TraceArgs {
    /// Checks the arguments that must go together; `svg` is the file of
    /// `--svg`, which takes the place of `-o`.
    fn validate(
        self,
        specs: Vec<FuncSpec>,
        format: Format,
        svg: Option<PathBuf>,
    ) -> Result<TraceSettings> {
        let mut pids = self.pid.clone();
        pids.sort_unstable();
        pids.dedup();
        let pid = match pids.as_slice() {
            [one] => Some(*one),
            _ => None,
        };
        let scoping = match (self.cgroup, self.comm, self.pgrep) {
            (Some(path), _, _) => Some(Scoping::Cgroup(path)),
            (_, Some(name), _) => Some(Scoping::Comm(name)),
            (_, _, Some(pattern)) => Some(Scoping::Pgrep(pattern)),
            _ if pids.len() > 1 => Some(Scoping::Pids(pids)),
            _ => None,
        };
        if let Some(sc) = &scoping {
            if !self.command.is_empty() {
                return Err(usage(format!(
                    "{} and a command after -- are exclusive: trace running processes or start one",
                    sc.flag()
                )));
            }
            if self.tid.is_some() {
                return Err(usage(format!(
                    "-t counts one thread of one process: it does not go with {}",
                    sc.flag()
                )));
            }
            if self.follow && matches!(sc, Scoping::Cgroup(_)) {
                return Err(usage(
                    "--follow does not go with --cgroup, which counts the processes started in the cgroup anyway",
                ));
            }
        }
        if pid.is_some() && !self.command.is_empty() {
            return Err(usage(
                "-p and a command after -- are exclusive: trace a running process or start one",
            ));
        }
        if self.follow && pid.is_none() && scoping.is_none() && self.command.is_empty() {
            return Err(usage(
                "--follow needs a process to follow: -p PID or a command after --",
            ));
        }
        if self.tid.is_some() && !self.command.is_empty() {
            return Err(usage(
                "-t and a command after -- do not go together: the command's threads have no ids before it starts (trace it with -p PID)",
            ));
        }
        let export = match (self.prometheus, self.textfile) {
            (None, None) if !self.labels.is_empty() => {
                return Err(usage(
                    "--label labels metrics: give --prometheus or --textfile",
                ))
            }
            (None, None) => None,
            (listen, textfile) => {
                if self.microseconds || self.milliseconds {
                    return Err(usage(
                        "-u and -m do not go with --prometheus or --textfile: metrics are in seconds, from nanosecond buckets that every host shares",
                    ));
                }
                for (i, (name, _)) in self.labels.iter().enumerate() {
                    if self.labels[..i].iter().any(|(n, _)| n == name) {
                        return Err(usage(format!("--label {name} is given twice")));
                    }
                }
                Some(ExportSettings {
                    listen,
                    textfile,
                    every: self.interval.unwrap_or(TEXTFILE_EVERY),
                    labels: self.labels,
                })
            }
        };
        if self.faster_than == Some(0) {
            return Err(usage(
                "--faster-than 0ns keeps no call: give a positive duration (e.g. 250us)",
            ));
        }
        if let Some(Scoping::Pgrep(p)) = &scoping {
            if p.is_empty() {
                return Err(usage(
                    "--pgrep: an empty pattern matches every process: give a pattern",
                ));
            }
            crate::scope::check_pattern(p).map_err(usage)?;
        }
        if matches!((self.slower_than, self.faster_than), (Some(lo), Some(hi)) if lo > hi) {
            return Err(usage(
                "--slower-than is above --faster-than: no call can match",
            ));
        }
        Ok(TraceSettings {
            specs,
            traced: match (pid, scoping) {
                (Some(pid), _) => Traced::Process(pid),
                (None, Some(sc)) => Traced::Processes(sc),
                (None, None) if !self.command.is_empty() => Traced::Command(self.command),
                (None, None) => Traced::Files,
            },
            tid: self.tid,
            unit: if self.microseconds {
                Unit::Usec
            } else if self.milliseconds {
                Unit::Msec
            } else {
                Unit::Nsec
            },
            interval: self.interval,
            duration: self.duration,
            timestamp: self.timestamp,
            output: Output {
                format,
                path: svg.or(self.output),
            },
            min_ns: self.slower_than,
            max_ns: self.faster_than,
            outermost: false,
            uretprobe: false,
            force: false,
            follow: self.follow,
            cpu: self.cpu,
            cpu_hist: false,
            raw: self.raw,
            record: self.record_slower_than,
            dry_run: self.dry_run,
            verbose: self.verbose,
            hlog: None,
            mode: Mode::Latency,
            filter: self.filter,
            export,
            by: Vec::new(),
            top: None,
            all: false,
        })
    }
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// [PATH|LIB] PATTERN..., or PATH:PATTERN..., or LIB:PATTERN... with -p
    #[arg(required = true, num_args = 1.., value_name = "PATTERN")]
    pub args: Vec<String>,

    /// Look in this process's executable and libraries
    #[arg(short, long, value_name = "PID", value_parser = parse_id, allow_negative_numbers = true)]
    pub pid: Option<u32>,

    /// Also list each function's call sites (what `tachy nested` times)
    #[arg(long)]
    pub sites: bool,
}

/// Validated arguments of `tachy list`.
#[derive(Clone, Debug)]
pub struct ListSettings {
    pub specs: Vec<FuncSpec>,
    pub pid: Option<u32>,
    pub sites: bool,
}

impl ListArgs {
    pub fn validate(self) -> Result<ListSettings> {
        let spec_of = |a: &String| FuncSpec::parse(a).map_err(|e| usage(format!("{e:#}")));
        let pattern_of = |a: &String| Pattern::parse(a).map_err(|e| usage(format!("{e:#}")));
        let (first, rest) = match self.args.split_first() {
            Some(split) => split,
            None => return Err(usage("expected [PATH] PATTERN...")),
        };
        let specs: Vec<FuncSpec> = if rest.is_empty() {
            if self.pid.is_none() && !first.contains(':') && std::path::Path::new(first).is_file() {
                return Err(usage(format!(
                    "no pattern: give one after {} (e.g. '*' for every function)",
                    crate::symbols::quoted(first)
                )));
            }
            vec![spec_of(first)?]
        } else if self.pid.is_some() {
            if first.contains('/') && !first.contains(':') {
                return Err(usage("give either -p PID or a PATH, not both"));
            }
            self.args.iter().map(spec_of).collect::<Result<_>>()?
        } else if spec_of(first)?.object.is_some() {
            // PATH:PATTERN or LIB:PATTERN, each.
            self.args.iter().map(spec_of).collect::<Result<_>>()?
        } else {
            // PATH PATTERN... or LIB PATTERN...; a LIB:PATTERN among them
            // names its own library.
            rest.iter()
                .map(|p| {
                    let spec = spec_of(p)?;
                    if spec.object.is_some() {
                        return Ok(spec);
                    }
                    Ok(FuncSpec {
                        object: Some(first.clone()),
                        pattern: pattern_of(p)?,
                    })
                })
                .collect::<Result<_>>()?
        };
        // A file in the current directory named without `./` is that
        // file, not a library to look up by name.
        let specs = specs
            .into_iter()
            .map(|spec| match &spec.object {
                Some(o)
                    if self.pid.is_none()
                        && !o.contains('/')
                        && std::path::Path::new(o).is_file() =>
                {
                    FuncSpec {
                        object: Some(format!("./{o}")),
                        ..spec
                    }
                }
                _ => spec,
            })
            .collect();
        Ok(ListSettings {
            specs,
            pid: self.pid,
            sites: self.sites,
        })
    }
}

/// [`FuncSpec::parse`] as a clap value parser.
fn parse_func_spec(s: &str) -> std::result::Result<FuncSpec, String> {
    FuncSpec::parse(s).map_err(|e| format!("{e:#}"))
}

/// `--by KEY` as clap parses it: with [`ByKey::parse`], naming the keys
/// that are not a parameter's name as possible values, which the
/// completion scripts offer (no value is refused for not being one of them).
#[derive(Clone)]
struct ByKeyParser;

/// The keys `--by` takes besides a parameter's name.
pub const BY_KEYS: [&str; 10] = [
    "caller",
    "tid",
    "pid",
    "goroutine",
    "arg0",
    "arg1",
    "arg2",
    "arg3",
    "arg4",
    "arg5",
];

impl clap::builder::TypedValueParser for ByKeyParser {
    type Value = ByKey;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<ByKey, clap::Error> {
        clap::builder::TypedValueParser::parse_ref(&ByKey::parse, cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            BY_KEYS
                .iter()
                .map(|k| clap::builder::PossibleValue::new(*k)),
        ))
    }
}

/// A function pattern, as a clap value parser.
fn parse_pattern(s: &str) -> std::result::Result<Pattern, String> {
    Pattern::parse(s).map_err(|e| format!("{e:#}"))
}

/// A clap value parser whose error quotes a long value shortened (clap
/// quotes it whole: a 100 KB pattern, 100 KB of error).
#[derive(Clone)]
pub struct Quoted<F>(pub F);

impl<T, F> clap::builder::TypedValueParser for Quoted<F>
where
    F: Fn(&str) -> std::result::Result<T, String> + Clone + Send + Sync + 'static,
    T: Clone + Send + Sync + 'static,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<T, clap::Error> {
        let Some(s) = value.to_str() else {
            return Err(clap::Error::new(clap::error::ErrorKind::InvalidUtf8).with_cmd(cmd));
        };
        (self.0)(s).map_err(|e| {
            let arg = arg.map(|a| a.to_string()).unwrap_or_default();
            let value = crate::symbols::quoted(s);
            // As clap words it, with the hint it gives.
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!(
                    "invalid value {value} for '{arg}': {e}\n\nFor more information, try '--help'.\n"
                ),
            )
            .with_cmd(cmd)
        })
    }
}

/// A `--filter` expression, as a clap value parser.
fn parse_filter(s: &str) -> std::result::Result<Filter, String> {
    Filter::parse(s).map_err(|e| format!("{e:#}"))
}

/// A process or thread id: a positive number.
fn parse_id(s: &str) -> std::result::Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(0) => Err("0 is not a process or thread id".into()),
        Ok(n) if n <= i32::MAX as u32 => Ok(n),
        _ => Err(format!("{s:?} is not a process or thread id")),
    }
}

/// The address of `--prometheus`: `ADDR:PORT`, `[V6ADDR]:PORT`,
/// `HOST:PORT`, or a port alone (on 127.0.0.1).
fn parse_listen(s: &str) -> std::result::Result<SocketAddr, String> {
    use std::net::{Ipv4Addr, ToSocketAddrs};
    let t = s.trim();
    if let Ok(port) = t.trim_start_matches(':').parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
    }
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if !t.contains(':') {
        return Err(format!(
            "{s:?} is not ADDR:PORT or a port (e.g. 127.0.0.1:9464)"
        ));
    }
    match t.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(addr)) => Ok(addr),
        _ => Err(format!(
            "{s:?} is not ADDR:PORT or a port (e.g. 127.0.0.1:9464)"
        )),
    }
}

/// `--label NAME=VALUE`: a Prometheus label name tachy does not set itself.
fn parse_label(s: &str) -> std::result::Result<(String, String), String> {
    use crate::report::prom::{valid_label_name, RESERVED_LABELS};
    let Some((name, value)) = s.split_once('=') else {
        return Err(format!("{s:?} is not NAME=VALUE"));
    };
    if !valid_label_name(name) {
        return Err(format!(
            "{name:?} is not a label name: letters, digits and _, not first a digit, not starting with __"
        ));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!(
            "{name:?} is a label tachy sets itself ({})",
            RESERVED_LABELS.join(", ")
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

/// A duration with its unit, as a clap value parser.
fn parse_duration_arg(s: &str) -> std::result::Result<u64, String> {
    parse_duration(s).map_err(|e| format!("{e:#}"))
}

/// The shortest interval of `-i`: reading and printing every function's
/// counters more often would be most of what tachy does.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The time of `-i`: as [`parse_seconds`], at least [`MIN_INTERVAL`].
fn parse_interval(s: &str) -> std::result::Result<Duration, String> {
    let d = parse_seconds(s)?;
    if d < MIN_INTERVAL {
        return Err(format!("{s:?} is shorter than 10ms, the shortest interval"));
    }
    Ok(d)
}

#[cfg(test)]
use crate::duration::POSITIVE;
pub use crate::duration::{parse_duration, parse_seconds};

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors read as tachy's own: no `(os error N)`, system messages in
    /// lowercase, `libbpf: ` once.
    #[test]
    fn error_text_is_cleaned() {
        let io = std::io::Error::from_raw_os_error(28);
        let e = anyhow::Error::new(io).context("cannot write the report to standard output");
        assert_eq!(
            error_text(&e),
            "cannot write the report to standard output: no space left on device"
        );
        let e = anyhow::anyhow!("libbpf: libbpf: failed to attach: Invalid argument (os error 22)")
            .context("cannot attach probes");
        assert_eq!(
            error_text(&e),
            "cannot attach probes: libbpf: failed to attach: Invalid argument"
        );
        assert_eq!(without_os_error("a (os error x) b"), "a (os error x) b");
        assert_eq!(lowercase_first("ENOSPC"), "ENOSPC");
    }

    #[test]
    fn specs_split_on_a_lone_colon() {
        assert_eq!(
            FuncSpec::parse("ns::Class::read").unwrap(),
            FuncSpec {
                object: None,
                pattern: Pattern::parse("ns::Class::read").unwrap()
            }
        );
        assert_eq!(
            FuncSpec::parse("c:malloc").unwrap(),
            FuncSpec {
                object: Some("c".into()),
                pattern: Pattern::parse("malloc").unwrap()
            }
        );
        assert_eq!(
            FuncSpec::parse("/usr/bin/x:ns::f(int)").unwrap(),
            FuncSpec {
                object: Some("/usr/bin/x".into()),
                pattern: Pattern::parse("ns::f(int)").unwrap()
            }
        );
        assert_eq!(
            FuncSpec::parse("libstdc++:std::foo").unwrap(),
            FuncSpec {
                object: Some("libstdc++".into()),
                pattern: Pattern::parse("std::foo").unwrap()
            }
        );
        assert!(FuncSpec::parse(":x").is_err());
        assert!(FuncSpec::parse("lib:").is_err());
        assert!(FuncSpec::parse("lib: ").is_err());
        assert!(FuncSpec::parse("").is_err());
        assert!(FuncSpec::parse(" ").is_err());
    }

    #[test]
    fn seconds() {
        let ms = |n| Ok(Duration::from_millis(n));
        assert_eq!(parse_seconds("5"), ms(5000));
        assert_eq!(parse_seconds("0.5"), ms(500));
        assert_eq!(parse_seconds("250ms"), ms(250));
        assert_eq!(parse_seconds("2m"), ms(120_000));
        for bad in ["0", "0s", "-1", "soon", "1e99", "inf", "nan"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_seconds("999999999"), ms(999_999_999_000));
        for long in ["1000000000", "1e99", "inf", "20000000m"] {
            assert_eq!(
                parse_seconds(long).unwrap_err(),
                format!("{long:?} is longer than 999999999 seconds (31 years), the most")
            );
        }
        assert_eq!(parse_interval("10ms"), ms(10));
        assert_eq!(
            parse_interval("1ns").unwrap_err(),
            "\"1ns\" is shorter than 10ms, the shortest interval"
        );
        for negative in ["-1", "-0.5", "-2s"] {
            assert_eq!(parse_seconds(negative).unwrap_err(), POSITIVE, "{negative}");
        }
    }

    #[test]
    fn ids() {
        assert_eq!(parse_id("4242"), Ok(4242));
        for bad in ["0", "-1", "x", "4294967295", ""] {
            assert!(parse_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn listen_addresses() {
        let a = |s: &str| parse_listen(s).map(|a| a.to_string());
        assert_eq!(a("9464"), Ok("127.0.0.1:9464".into()));
        assert_eq!(a(":9464"), Ok("127.0.0.1:9464".into()));
        assert_eq!(a("0.0.0.0:9464"), Ok("0.0.0.0:9464".into()));
        assert_eq!(a("[::1]:9464"), Ok("[::1]:9464".into()));
        for bad in ["", "x", "70000", "1.2.3.4", "1.2.3.4:x"] {
            assert!(parse_listen(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn labels() {
        assert_eq!(
            parse_label("env=prod=1"),
            Ok(("env".into(), "prod=1".into()))
        );
        assert_eq!(parse_label("dc="), Ok(("dc".into(), String::new())));
        for bad in ["env", "=x", "1x=y", "a-b=c", "__x=y", "function=f", "le=1"] {
            assert!(parse_label(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("250us").unwrap(), 250_000);
        assert_eq!(parse_duration("1ms").unwrap(), 1_000_000);
        assert_eq!(parse_duration("1.5ms").unwrap(), 1_500_000);
        assert_eq!(parse_duration("2s").unwrap(), 2_000_000_000);
        assert_eq!(parse_duration("100ns").unwrap(), 100);
        assert!(parse_duration("100")
            .unwrap_err()
            .to_string()
            .contains("needs a unit"));
        assert!(parse_duration("1h").is_err());
        assert!(parse_duration("ms").is_err());
        assert!(parse_duration("1e400s").is_err());
    }
}
