//! The settings of `tachy latency` and `tachy nested`, validated: options
//! that must or must not go together are checked once here, and what to
//! trace, how and where the reports go come out as typed values (modes and
//! whom to trace as enums). Nothing downstream parses or checks again.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::args::{LatencyArgs, NestedArgs, TraceArgs};
use super::usage;
use crate::plan::by::ByKey;
use crate::plan::filter::Filter;
use crate::plan::Expand;
use crate::report::Unit;
use crate::resolve::FuncSpec;
use crate::scope::Scoping;

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
    pub expand: Vec<Expand>,
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
    /// `--stack`: each record carries its call's user stack.
    pub stack: bool,
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
    /// `--max-overhead`: the probes' overhead budget, in percent of the
    /// traced threads' time (None: no budget).
    pub max_overhead: Option<f64>,
}

/// `tachy nested`'s overhead budget unless `--max-overhead` says otherwise.
pub const NESTED_MAX_OVERHEAD: f64 = 10.0;

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

/// Fails on a machine whose user stacks tachy cannot take yet: the
/// stack copy and its unwinding read x86-64 registers.
fn stacks_here(option: &str) -> Result<()> {
    match cfg!(target_arch = "x86_64") {
        true => Ok(()),
        false => Err(usage(format!(
            "{option} takes x86-64 user stacks only: not yet on {}",
            std::env::consts::ARCH
        ))),
    }
}

/// How often `--textfile` is rewritten without `-i`.
pub const TEXTFILE_EVERY: Duration = Duration::from_secs(15);

impl LatencyArgs {
    pub fn validate(self) -> Result<TraceSettings> {
        let format = if self.json {
            Format::Json
        } else if self.folded {
            Format::Folded
        } else {
            Format::Text
        };
        if self.by.contains(&crate::plan::by::ByKey::Stack) {
            stacks_here("--by stack")?;
        }
        if self.folded && !self.by.contains(&crate::plan::by::ByKey::Stack) {
            return Err(usage(
                "--folded draws the chains of callers of --by stack: give --by stack",
            ));
        }
        if self.folded && self.trace.record_slower_than.is_some() {
            return Err(usage(
                "--record-slower-than and --folded do not go together: records are lines of text or JSON",
            ));
        }
        let mut s = self.trace.validate(self.funcs, format, None)?;
        s.outermost = self.outermost;
        s.uretprobe = self.uretprobe;
        s.force = self.force;
        s.hlog = self.hlog;
        s.cpu_hist = self.hist;
        crate::plan::by::check(&self.by, Default::default())?;
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
        s.max_overhead = s.max_overhead.filter(|&p| p > 0.0);
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
        if self.by.contains(&crate::plan::by::ByKey::Stack) {
            return Err(usage(
                "--by stack groups the calls of tachy latency: nested breaks calls down by their call sites",
            ));
        }
        if !self.by.is_empty() && matches!(format, Format::Folded | Format::Svg) {
            return Err(usage(
                "--by goes with the text and JSON reports of nested, not with --folded or --svg",
            ));
        }
        crate::plan::by::check(&self.by, Default::default())?;
        let mut s = self.trace.validate(vec![self.func], format, svg)?;
        s.hlog = self.hlog;
        s.cpu_hist = s.cpu && self.hist;
        s.by = self.by;
        s.top = self.top.map(|n| n as usize);
        s.mode = Mode::Nested(NestedOpts {
            depth: self.depth,
            expand: self.expand,
            hist: self.hist,
            all_sites: self.all_sites,
        });
        s.max_overhead = Some(s.max_overhead.unwrap_or(NESTED_MAX_OVERHEAD)).filter(|&p| p > 0.0);
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
        if self.stack {
            stacks_here("--stack")?;
        }
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
            stack: self.stack,
            dry_run: self.dry_run,
            verbose: self.verbose,
            hlog: None,
            mode: Mode::Latency,
            filter: self.filter,
            export,
            by: Vec::new(),
            top: None,
            all: false,
            // As given: each command says what none means, and 0 is off.
            max_overhead: self.max_overhead,
        })
    }
}
