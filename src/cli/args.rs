//! The command line as clap defines it: the subcommands, their options and
//! help texts, holding raw values only (strings, numbers, and what the
//! value parsers in `values` make of one argument). Checking options
//! against each other is `settings`' and `list`'s job, not this file's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use super::values::{
    parse_duration_arg, parse_expand, parse_filter, parse_func_spec, parse_id, parse_interval,
    parse_label, parse_listen, parse_pct, ByKeyParser, Quoted,
};
use crate::duration::parse_seconds;
use crate::plan::by::ByKey;
use crate::plan::filter::Filter;
use crate::plan::Expand;
use crate::resolve::FuncSpec;
use crate::version::VERSION;

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
  tachy latency -p 4242 'kv::Store::get' --filter 'ret < 0'    only calls that return an error
  tachy latency -p 4242 'kv::Store::get' --by retval   per value returned: is the slow path the error path?
  tachy latency -u -p 4242 'db::Table::scan' --by caller   per call site, at file:line
  tachy latency -p 4242 'kv::Store::get' --by tid --top 5  the 5 threads with most time
  tachy latency /usr/sbin/nginx:ngx_http_process_request --by pid   per process
  tachy latency -p 4242 'db::Table::scan' --filter 'arg1 > 1000' --by arg1 --top 5
  tachy latency -p 4242 'kv::Store::get' --by key --by tid   per value of parameter key, per thread
  tachy latency --record-slower-than 5ms -p 4242 'db::Table::scan'   a line per call over 5 ms
  tachy latency -p 5151 main.fetch --record-slower-than 5ms --stack   Go: ret= and its callers
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
  tachy nested -p 4242 dispatch --expand 'dispatch->handle_get'   a callee of its indirect call
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
Under an indirect call site (`call *%rax`, `call *0x18(%rbx)`, `blr x8`) a
line lists the functions it called and how often (`-> callees: foo 80,
bar 20`; in JSON `callees`): the probe on the call reads where it goes,
16 callees apart per site, the rest as `other`; counted as the calls were
made, so under --slower-than/--faster-than (or a --filter on ret) they
count the calls the filter drops too, and say so (`-> callees (all calls,
before --slower-than): ...`).
--expand 'CALLER->CALLEE' breaks such a callee down under the indirect calls
of CALLER: its sites there (headed `in CALLEE:`, in JSON `via`) count only
the calls made through that call to it, not those it gets another way, and
their calls are per call of it.
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

    /// Keep what the probes add to the traced threads' time under PCT
    /// percent: each second, the calls counted times each probe's price
    /// on this machine (its calibration), against the CPU time the traced
    /// processes used (the wall time of one thread when no process is
    /// named). Over it, call sites are detached, the deepest first, then
    /// the dearest (calls x price); the report says which, when and why.
    /// A plan of more than 300 call sites starts with none attached and
    /// attaches them, a few at a time, as the estimates show room (the
    /// report says from when each counts). A traced function's own probes
    /// are never detached. Default 10 for
    /// `nested`, none for `latency`; 0 turns the budget off
    #[arg(long, value_name = "PCT", value_parser = parse_pct, allow_negative_numbers = true)]
    pub max_overhead: Option<f64>,

    /// Time only calls whose arguments match EXPR, decided in the kernel at
    /// each call's entry; the others are counted as filtered out. EXPR
    /// compares argN (from 0: arg0..arg5 are rdi, rsi, rdx, rcx, r8, r9; a
    /// C++ method's `this` is arg0; of a system call: rdi, rsi, rdx, r10,
    /// r8, r9), a parameter's DWARF name, tid or pid with an integer
    /// (decimal, 0x hex, negative) by == != < <= > >=, joined by && and
    /// ||, with parentheses. Names are read where each function (each
    /// compiler clone) has them at its entry. `ret` (or `retval`) is the
    /// value the call returns, as its return type reads (-1 of an int is
    /// -1; a system call's -errno; a Go function's first integer result
    /// register, as its first result's type reads), decided at its exit: a
    /// call rejected there is counted as filtered out too. A Go function's
    /// arguments are not read: its filter reads only ret
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
    /// registers arg0-arg2; none for a Go function), the value it returned
    /// (ret=) and, with `tachy nested`, what each call site
    /// took in it. An argument whose register the function overwrites
    /// before tachy's cheaper entry probe moves that probe to the first
    /// instruction (as --filter does); one that cannot be read prints as
    /// NAME=?. The report still prints at the end
    #[arg(long, value_name = "DUR", value_parser = parse_duration_arg)]
    pub record_slower_than: Option<u64>,

    /// With --record-slower-than: each record also prints its call's user
    /// stack, the callers from the nearest out to main (function, file:line,
    /// inlined functions marked), walked by frame pointers where every
    /// traced object keeps them, else copied (up to 12 KiB) and unwound
    /// with .eh_frame; the header says which (x86-64)
    #[arg(long, requires = "record_slower_than")]
    pub stack: bool,

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
    #[arg(long, conflicts_with = "folded")]
    pub json: bool,

    /// With --by stack: print each function's chains of callers as folded
    /// stacks weighted by calls (`main;route_b;step_b;slow 24`), for flame
    /// graph tools (inferno, flamegraph.pl)
    #[arg(long)]
    pub folded: bool,

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
    /// (its value: decimal as its type reads, pointers in hex), retval
    /// (the value returned, as the return type reads: enums by name, a
    /// system call's errno named; a Go function's first integer result
    /// register), goroutine (Go functions: the
    /// goroutine's id) or stack (the chain of callers out to main, as
    /// --stack takes it; alone, and grouped by tachy from a record of each
    /// call); repeat for two keys
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

    /// Also break down callees matching PATTERN, at any level (repeatable).
    /// CALLER->CALLEE: the callees an indirect call in CALLER reaches that
    /// CALLEE names, under that call (counting only the calls through it
    /// to them; the `-> callees:` line under the call names them)
    #[arg(long, value_name = "PATTERN", value_parser = Quoted(parse_expand))]
    pub expand: Vec<Expand>,

    /// Also print a log2 histogram of each call site (of the calls counted);
    /// with --cpu, one of each part (on-CPU, blocked, runnable) per call too
    #[arg(long)]
    pub hist: bool,

    /// Also show the call sites that never ran (the text report hides them and
    /// says how many; JSON always has them). With the budget off
    /// (--max-overhead 0), also what times a plan of more than 512 call
    /// sites: without it, such a plan is a usage error
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

    /// Break the traced function's calls down by KEY, as tachy latency
    /// --by does (caller, tid, pid, argN, a parameter's name, retval,
    /// goroutine; not stack); repeat for two keys. Counted in the kernel,
    /// for the function itself (its call sites are not broken down)
    #[arg(long = "by", value_name = "KEY", value_parser = ByKeyParser, hide_possible_values = true)]
    pub by: Vec<ByKey>,

    /// With --by: show the N groups with the most total time, the others
    /// as one "other" line
    #[arg(long, value_name = "N", requires = "by",
          value_parser = clap::value_parser!(u32).range(1..))]
    pub top: Option<u32>,

    #[command(flatten)]
    pub trace: TraceArgs,
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
