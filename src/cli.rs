//! Command-line arguments as clap parses them (raw strings and numbers), and
//! their one conversion into validated settings. Nothing downstream parses.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::report::Unit;

const LATENCY_EXAMPLES: &str = "\
Examples:
  tachy latency -p 4242 'db::Table::scan'          histogram of every overload and clone
  tachy latency -u -p 4242 'db::Table::scan(int)'  one overload, in microseconds
  tachy latency -p 4242 c:malloc libstdc++:'std::*::_M_create'
  tachy latency /usr/sbin/nginx:ngx_http_process_request   every process running nginx
  tachy latency -m -i 5 -T -p 4242 'ns::Class::*'  a report every 5 s, with times
  tachy latency --slower-than 1ms -p 4242 read_page        only calls over 1 ms
  tachy latency slow_sum -- ./app --flag            start ./app and trace it until it exits
  tachy latency -u -p 4242 syscall:read 'syscall:pread*'   system call latency, enter to exit
  tachy latency -u k:vfs_read                      a kernel function (fentry/fexit or kprobes)

Functions are matched by demangled name: `ns::Class::read` matches every
overload and compiler clone (.isra, .constprop, .part); add parameters to pick
one overload; `*` and `?` glob; a mangled name matches itself. Prefix LIB: or
PATH: to pick the object; with -p a bare name is looked up in the executable,
then in the libraries it maps, then among the kernel's functions (k:FUNC names
one outright; with -p only that process's calls count).

Exit status: 0 on success (or the traced command's own status with --),
1 on any error (one line on stderr), 2 on bad usage.";

const NESTED_EXAMPLES: &str = "\
Examples:
  tachy nested -p 4242 'db::Table::scan'                  its call sites, one level
  tachy nested -p 4242 'db::Table::scan' --depth 2        and the call sites of its callees
  tachy nested -p 4242 'db::Table::scan' --expand 'db::Page::load'
  tachy nested -p 4242 'db::Table::scan' --slower-than 1ms   only the slow calls
  tachy nested --folded -d 10 -p 4242 scan > scan.folded
  tachy nested --svg scan.svg -d 10 -p 4242 scan
  tachy nested 'kv::Store::read' -- ./kvdemo

Each call site (`call`, through the PLT, indirect, or a tail jump) is timed
from the call to its return while the function is the innermost traced frame
on that thread; self is the function's time outside them. With --slower-than
the breakdown covers only the calls of the function that were that slow.";

const LIST_EXAMPLES: &str = "\
Examples:
  tachy list -p 4242 'db::Table::*'
  tachy list ./build/server 'Conn::read'
  tachy list /usr/lib/x86_64-linux-gnu/libc.so.6:malloc
  tachy list -p 4242 c:pthread_mutex_lock
  tachy list --sites ./build/server 'Conn::read'   with every call site, at file:line
  tachy list 'k:vfs_*'                             kernel functions
  tachy list 'syscall:*read*'                      system calls";

#[derive(Parser, Debug)]
#[command(
    name = "tachy",
    version,
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
}

#[derive(Args, Debug)]
pub struct LatencyArgs {
    /// Functions to trace: FUNC, LIB:FUNC, PATH:FUNC, k:FUNC or syscall:NAME
    #[arg(required = true, value_name = "FUNC")]
    pub funcs: Vec<String>,

    /// Trace this process (its executable and the libraries it maps)
    #[arg(short, long, value_name = "PID")]
    pub pid: Option<u32>,

    /// Trace only this thread
    #[arg(short, long, value_name = "TID")]
    pub tid: Option<u32>,

    /// Print durations in microseconds
    #[arg(short = 'u', long = "microseconds", conflicts_with = "milliseconds")]
    pub microseconds: bool,

    /// Print durations in milliseconds
    #[arg(short = 'm', long = "milliseconds")]
    pub milliseconds: bool,

    /// Print a report every SECS seconds (each covers only its interval;
    /// 0.5 or 500ms too)
    #[arg(short, long, value_name = "SECS", value_parser = parse_seconds)]
    pub interval: Option<Duration>,

    /// Stop after SECS seconds (0.5 or 500ms too)
    #[arg(short, long, value_name = "SECS", value_parser = parse_seconds)]
    pub duration: Option<Duration>,

    /// Print a timestamp before each report
    #[arg(short = 'T', long)]
    pub timestamp: bool,

    /// Print each report as one JSON object per line
    #[arg(long)]
    pub json: bool,

    /// Keep only calls that took at least DUR (250us, 1ms, 2s); count the others as filtered
    #[arg(long, value_name = "DUR")]
    pub slower_than: Option<String>,

    /// Keep only calls that took at most DUR; count the others as filtered
    #[arg(long, value_name = "DUR")]
    pub faster_than: Option<String>,

    /// With recursion, time only the outermost call of each function
    #[arg(long)]
    pub outermost: bool,

    /// Time returns with uretprobes: cheaper, but a C++ exception or Rust
    /// panic unwinding through a traced function then aborts the process
    #[arg(long)]
    pub uretprobe: bool,

    /// Also trace the processes the traced one forks (and theirs) after tachy attached
    #[arg(long)]
    pub follow: bool,

    /// Print the probes that would be attached, and exit (needs no privilege)
    #[arg(long)]
    pub dry_run: bool,

    /// Say which symbols and probes were chosen, and show libbpf's messages
    #[arg(short, long)]
    pub verbose: bool,

    /// Command to start and trace until it exits (after --)
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct NestedArgs {
    /// The function to break down: FUNC, LIB:FUNC or PATH:FUNC
    #[arg(value_name = "FUNC")]
    pub func: String,

    /// Levels of call sites to time: 1 is the function's own
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub depth: u32,

    /// Also break down callees matching PATTERN, at any level (repeatable)
    #[arg(long, value_name = "PATTERN")]
    pub expand: Vec<String>,

    /// Trace this process (its executable and the libraries it maps)
    #[arg(short, long, value_name = "PID")]
    pub pid: Option<u32>,

    /// Trace only this thread
    #[arg(short, long, value_name = "TID")]
    pub tid: Option<u32>,

    /// Print a report every SECS seconds (each covers only its interval;
    /// 0.5 or 500ms too)
    #[arg(short, long, value_name = "SECS", value_parser = parse_seconds)]
    pub interval: Option<Duration>,

    /// Stop after SECS seconds (0.5 or 500ms too)
    #[arg(short, long, value_name = "SECS", value_parser = parse_seconds)]
    pub duration: Option<Duration>,

    /// Print a timestamp before each report
    #[arg(short = 'T', long)]
    pub timestamp: bool,

    /// Keep only calls of the function that took at least DUR (250us, 1ms, 2s)
    #[arg(long, value_name = "DUR")]
    pub slower_than: Option<String>,

    /// Keep only calls of the function that took at most DUR
    #[arg(long, value_name = "DUR")]
    pub faster_than: Option<String>,

    /// Also print a log2 histogram of each call site (of the calls counted)
    #[arg(long)]
    pub hist: bool,

    /// Histogram unit: microseconds
    #[arg(short = 'u', long = "microseconds", conflicts_with = "milliseconds")]
    pub microseconds: bool,

    /// Histogram unit: milliseconds
    #[arg(short = 'm', long = "milliseconds")]
    pub milliseconds: bool,

    /// Print each report as one JSON object per line
    #[arg(long, conflicts_with_all = ["folded", "svg"])]
    pub json: bool,

    /// Print folded stacks weighted by self nanoseconds (for flame graph tools)
    #[arg(long, conflicts_with = "svg")]
    pub folded: bool,

    /// Write a flame graph of the final report to FILE (SVG)
    #[arg(long, value_name = "FILE")]
    pub svg: Option<std::path::PathBuf>,

    /// Also trace the processes the traced one forks (and theirs) after tachy attached
    #[arg(long)]
    pub follow: bool,

    /// Print the probes that would be attached, and exit (needs no privilege)
    #[arg(long)]
    pub dry_run: bool,

    /// Say which probes were chosen, and show libbpf's messages
    #[arg(short, long)]
    pub verbose: bool,

    /// Command to start and trace until it exits (after --)
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// How `tachy nested` prints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeFormat {
    Text,
    Json,
    Folded,
    Svg(std::path::PathBuf),
}

/// What `tachy nested` adds to the common settings.
#[derive(Clone, Debug)]
pub struct NestedOpts {
    pub depth: u32,
    pub expand: Vec<String>,
    pub hist: bool,
    pub format: TreeFormat,
}

impl NestedArgs {
    pub fn validate(self) -> Result<LatencySettings> {
        if self.depth == 0 || self.depth > 8 {
            bail!("--depth must be between 1 and 8");
        }
        for e in &self.expand {
            crate::symbols::Pattern::parse(e)
                .with_context(|| format!("bad --expand pattern {e:?}"))?;
        }
        let format = match (self.json, self.folded, self.svg) {
            (true, _, _) => TreeFormat::Json,
            (_, true, _) => TreeFormat::Folded,
            (_, _, Some(p)) => TreeFormat::Svg(p),
            _ => TreeFormat::Text,
        };
        let common = LatencyArgs {
            funcs: vec![self.func],
            pid: self.pid,
            tid: self.tid,
            microseconds: self.microseconds,
            milliseconds: self.milliseconds,
            interval: self.interval,
            duration: self.duration,
            timestamp: self.timestamp,
            json: format != TreeFormat::Text,
            slower_than: self.slower_than,
            faster_than: self.faster_than,
            outermost: false,
            uretprobe: false,
            follow: self.follow,
            dry_run: self.dry_run,
            verbose: self.verbose,
            command: self.command,
        };
        let mut s = common.validate()?;
        s.nested = Some(NestedOpts {
            depth: self.depth,
            expand: self.expand,
            hist: self.hist,
            format,
        });
        Ok(s)
    }
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// [PATH] PATTERN, or PATH:PATTERN, or LIB:PATTERN with -p
    #[arg(required = true, num_args = 1..=2, value_name = "PATTERN")]
    pub args: Vec<String>,

    /// Look in this process's executable and libraries
    #[arg(short, long, value_name = "PID")]
    pub pid: Option<u32>,

    /// Also list each function's call sites (what `tachy nested` times)
    #[arg(long)]
    pub sites: bool,
}

/// A function spec: `FUNC`, `LIB:FUNC`, `PATH:FUNC`, `k:FUNC`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncSpec {
    pub object: Option<String>,
    pub pattern: String,
}

impl FuncSpec {
    /// `syscall:NAME` (or `sys:NAME`): a system call, timed enter to exit.
    pub fn is_syscall(&self) -> bool {
        matches!(self.object.as_deref(), Some("syscall" | "sys"))
    }

    /// `k:FUNC` (or `kernel:FUNC`): a kernel function, timed with fentry/fexit
    /// or kprobes.
    pub fn is_kernel(&self) -> bool {
        matches!(self.object.as_deref(), Some("k" | "kernel" | "kprobe"))
    }

    /// Splits at the first `:` that is not part of a C++ `::`.
    pub fn parse(s: &str) -> Result<FuncSpec> {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            if b[i] == b':' {
                if b.get(i + 1) == Some(&b':') {
                    i += 2;
                    continue;
                }
                let (obj, pat) = (&s[..i], &s[i + 1..]);
                if obj.is_empty() {
                    bail!("{s:?}: nothing before ':' (expected LIB:FUNC or PATH:FUNC)");
                }
                if pat.is_empty() {
                    bail!("{s:?}: no function after ':'");
                }
                return Ok(FuncSpec {
                    object: Some(obj.to_string()),
                    pattern: pat.to_string(),
                });
            }
            i += 1;
        }
        if s.trim().is_empty() {
            bail!("empty function name");
        }
        Ok(FuncSpec {
            object: None,
            pattern: s.to_string(),
        })
    }
}

/// Parses a positive time: seconds (`5`, `0.5`) or a duration with its
/// unit (`500ms`, `2m`).
pub fn parse_seconds(s: &str) -> std::result::Result<Duration, String> {
    let ns = match s.trim().parse::<f64>() {
        Ok(secs) if (0.0..1e9).contains(&secs) => (secs * 1e9).round() as u64,
        Ok(_) => return Err(format!("{s:?} is not a number of seconds")),
        Err(_) => parse_duration(s).map_err(|e| e.to_string())?,
    };
    if ns == 0 {
        return Err("needs a positive time (e.g. 5, 0.5, 500ms)".into());
    }
    Ok(Duration::from_nanos(ns))
}

/// Parses `250us`, `1.5ms`, `2s`, `100ns`, `1m` into nanoseconds.
pub fn parse_duration(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let per: f64 = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        "m" | "min" => 60e9,
        "" => bail!("duration {s:?} needs a unit: ns, us, ms, s or m (e.g. 250us)"),
        u => bail!("duration {s:?} has an unknown unit {u:?}: use ns, us, ms, s or m"),
    };
    let n: f64 = num
        .parse()
        .with_context(|| format!("{s:?} is not a duration (e.g. 250us, 1ms, 2s)"))?;
    let ns = n * per;
    if !ns.is_finite() || ns > u64::MAX as f64 / 2.0 {
        bail!("duration {s:?} is too large");
    }
    Ok(ns.round() as u64)
}

/// Validated settings of `tachy latency`.
#[derive(Clone, Debug)]
pub struct LatencySettings {
    pub specs: Vec<FuncSpec>,
    pub pid: Option<u32>,
    pub command: Vec<String>,
    pub tid: Option<u32>,
    pub unit: Unit,
    pub interval: Option<Duration>,
    pub duration: Option<Duration>,
    pub timestamp: bool,
    pub json: bool,
    pub min_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub outermost: bool,
    pub uretprobe: bool,
    pub follow: bool,
    pub dry_run: bool,
    pub verbose: bool,
    /// `tachy nested`: the tree to time.
    pub nested: Option<NestedOpts>,
}

impl LatencyArgs {
    pub fn validate(self) -> Result<LatencySettings> {
        let specs = self
            .funcs
            .iter()
            .map(|f| FuncSpec::parse(f))
            .collect::<Result<Vec<_>>>()?;
        if self.pid.is_some() && !self.command.is_empty() {
            bail!("-p and a command after -- are exclusive: trace a running process or start one");
        }
        if self.pid == Some(0) {
            bail!("-p 0 is not a process");
        }
        if self.follow && self.pid.is_none() && self.command.is_empty() {
            bail!("--follow needs a process to follow: -p PID or a command after --");
        }
        let min_ns = self
            .slower_than
            .as_deref()
            .map(parse_duration)
            .transpose()?;
        let max_ns = self
            .faster_than
            .as_deref()
            .map(parse_duration)
            .transpose()?;
        if matches!((min_ns, max_ns), (Some(lo), Some(hi)) if lo > hi) {
            bail!("--slower-than is above --faster-than: no call can match");
        }
        Ok(LatencySettings {
            specs,
            pid: self.pid,
            command: self.command,
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
            json: self.json,
            min_ns,
            max_ns,
            outermost: self.outermost,
            uretprobe: self.uretprobe,
            follow: self.follow,
            dry_run: self.dry_run,
            verbose: self.verbose,
            nested: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_split_on_a_lone_colon() {
        assert_eq!(
            FuncSpec::parse("ns::Class::read").unwrap(),
            FuncSpec {
                object: None,
                pattern: "ns::Class::read".into()
            }
        );
        assert_eq!(
            FuncSpec::parse("c:malloc").unwrap(),
            FuncSpec {
                object: Some("c".into()),
                pattern: "malloc".into()
            }
        );
        assert_eq!(
            FuncSpec::parse("/usr/bin/x:ns::f(int)").unwrap(),
            FuncSpec {
                object: Some("/usr/bin/x".into()),
                pattern: "ns::f(int)".into()
            }
        );
        assert_eq!(
            FuncSpec::parse("libstdc++:std::foo").unwrap(),
            FuncSpec {
                object: Some("libstdc++".into()),
                pattern: "std::foo".into()
            }
        );
        assert!(FuncSpec::parse(":x").is_err());
        assert!(FuncSpec::parse("lib:").is_err());
    }

    #[test]
    fn seconds() {
        let ms = |n| Ok(Duration::from_millis(n));
        assert_eq!(parse_seconds("5"), ms(5000));
        assert_eq!(parse_seconds("0.5"), ms(500));
        assert_eq!(parse_seconds("250ms"), ms(250));
        assert_eq!(parse_seconds("2m"), ms(120_000));
        for bad in ["0", "0s", "-1", "soon", "1e99", "inf"] {
            assert!(parse_seconds(bad).is_err(), "{bad}");
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
