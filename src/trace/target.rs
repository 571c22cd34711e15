//! The traced target of `tachy latency` and `tachy nested`: one process,
//! several, a cgroup, a command to start, or files; where names are looked
//! up, whom the header names, and what is said of a command that ran.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};

use crate::cli::{TraceSettings, Traced};
use crate::plan::{self, Plan, PlanRequest, Settings, TreeRequest};
use crate::probe::ProcessGone;
use crate::resolve::{Objects, Scope};
use crate::scope;
use crate::scope::Scoping;
use crate::stop;
use crate::target::{self, Spawned};

/// What `tachy latency` and `tachy nested` trace: where names are looked
/// up, and the program to start, if any.
pub struct TraceTarget {
    pub scope: Scope,
    /// The command's executable (after `--`), found on PATH.
    pub exe: Option<PathBuf>,
    /// Several processes (`-p A,B`, `--comm`, `--pgrep`), counted each.
    pids: Vec<u32>,
    /// `--cgroup`: the cgroup, and the processes in it now whose maps
    /// names may be looked up in, until one has them.
    cgroup: Option<(scope::Cgroup, Vec<u32>)>,
}

impl TraceTarget {
    pub fn new(s: &TraceSettings) -> Result<TraceTarget> {
        let cmd = match &s.traced {
            Traced::Processes(sc) => return TraceTarget::scoped(s, sc),
            Traced::Process(pid) => {
                let pid = *pid;
                if let Some(tgid) = target::thread_group(pid).filter(|&t| t != pid) {
                    bail!("{pid} is a thread of process {tgid}: use -p {tgid} -t {pid}");
                }
                return Ok(TraceTarget {
                    scope: Scope::Process(target::process_maps(pid)?),
                    exe: None,
                    pids: Vec::new(),
                    cgroup: None,
                });
            }
            Traced::Files => {
                return Ok(TraceTarget {
                    scope: Scope::Files,
                    exe: None,
                    pids: Vec::new(),
                    cgroup: None,
                })
            }
            Traced::Command(command) => &command[0],
        };
        let exe = target::which(cmd)?;
        target::check_runnable(&exe)?;
        let image = target::program_image(&exe);
        let libs = target::needed_libraries(&image);
        Ok(TraceTarget {
            scope: Scope::Command { exe: image, libs },
            exe: Some(exe),
            pids: Vec::new(),
            cgroup: None,
        })
    }

    /// Several processes, or a cgroup: names are looked up in a process's
    /// maps (or the files named), and probes fire in every process that
    /// maps those files; the BPF side keeps the calls of the processes
    /// asked for.
    fn scoped(s: &TraceSettings, sc: &Scoping) -> Result<TraceTarget> {
        let pids = scope::pids(sc)?;
        if let Scoping::Cgroup(path) = sc {
            let cg = scope::cgroup(path)?;
            let files_only = s
                .specs
                .iter()
                .all(|x| x.object.as_deref().is_some_and(|o| o.contains('/')));
            if pids.is_empty() && !files_only {
                bail!(
                    "--cgroup {}: no process runs in it now to look names up in: name the program as PATH:FUNC, which also traces the processes started in it later",
                    path.display()
                );
            }
            return Ok(TraceTarget {
                scope: Scope::Files,
                exe: None,
                pids: Vec::new(),
                cgroup: Some((cg, if files_only { Vec::new() } else { pids })),
            });
        }
        // Processes of several programs: the functions are looked up in
        // every program (a name found in two is traced in both).
        let mut maps = Vec::new();
        for p in scope::one_per_program(&pids)? {
            maps.push(target::process_maps(p)?);
        }
        let maps =
            target::ProcessMaps::joined(maps).ok_or_else(|| anyhow!("no process to trace"))?;
        Ok(TraceTarget {
            scope: Scope::Process(maps),
            exe: None,
            pids,
            cgroup: None,
        })
    }

    /// What `s` asks to trace, in this target.
    pub fn request(&self, s: &TraceSettings) -> PlanRequest {
        PlanRequest {
            specs: s.specs.clone(),
            settings: Settings {
                filter_tid: s.tid,
                min_ns: s.min_ns,
                max_ns: s.max_ns,
                outermost: s.outermost,
                uretprobe: s.uretprobe,
                follow: s.follow,
                unit_ns: s.unit.ns(),
                cpu: s.cpu,
                cpu_hist: s.cpu_hist,
                by: s.by.clone(),
                record_min_ns: s.record,
                stack: s.stack,
                cgroup: self.cgroup.as_ref().map(|(c, _)| (c.id, c.level)),
                count_procs: s.traced.scoping().is_some(),
                read_ret: s.filter.as_ref().is_some_and(|f| f.reads_ret())
                    || s.by.contains(&crate::plan::by::ByKey::Retval)
                    || s.record.is_some(),
            },
            pid: s.traced.pid(),
            pids: self.pids.clone(),
            force: s.force,
            filter: s.filter.clone(),
            tree: s.mode.nested().map(|n| TreeRequest {
                depth: n.depth,
                expand: n.expand.clone(),
            }),
            verbose: s.verbose,
        }
    }

    pub fn plan(&mut self, req: &PlanRequest, objects: &mut Objects) -> Result<Plan> {
        Ok(match self.cgroup.as_ref().map(|(_, pids)| pids.clone()) {
            // A cgroup holds several programs: the first process whose maps
            // have the functions names them.
            Some(pids) if !pids.is_empty() => {
                let mut first_err = None;
                let mut found = None;
                for pid in pids {
                    let Ok(maps) = target::process_maps(pid) else {
                        continue;
                    };
                    let scope = Scope::Process(maps);
                    match plan::build(req, &scope, objects) {
                        Ok(plan) => {
                            self.scope = scope;
                            found = Some(plan);
                            break;
                        }
                        Err(e) => {
                            first_err.get_or_insert(e);
                        }
                    }
                }
                match (found, first_err) {
                    (Some(plan), _) => plan,
                    (None, Some(e)) => return Err(e),
                    (None, None) => bail!("--cgroup: its processes have exited"),
                }
            }
            _ => self.plan_in_scope(req, objects)?,
        })
    }

    fn plan_in_scope(&self, req: &PlanRequest, objects: &mut Objects) -> Result<Plan> {
        plan::build(req, &self.scope, objects).map_err(|e| match (&self.scope, &self.exe) {
            (Scope::Command { exe: image, .. }, Some(exe)) if image != exe => anyhow::anyhow!(
                "{e} ({} is a script run by {}: name the program it starts as PATH:FUNC)",
                exe.display(),
                image.display()
            ),
            _ => e,
        })
    }

    /// Whom the header names.
    pub fn whom(&self, s: &TraceSettings, plan: &Plan, spawned: Option<&Spawned>) -> String {
        if let Some((cg, _)) = &self.cgroup {
            return format!("in cgroup {}", cg.path.display());
        }
        if !self.pids.is_empty() {
            let named: Vec<String> = self
                .pids
                .iter()
                .map(|&p| format!("{p} ({})", scope::comm(p).unwrap_or_default()))
                .collect();
            return format!("in pids {}", named.join(", "));
        }
        match (s.traced.pid(), spawned, &self.scope) {
            (Some(pid), _, Scope::Process(m)) => {
                format!("in pid {pid} ({})", m.exe.display.display())
            }
            (None, Some(sp), _) => format!("in pid {} ({})", sp.pid, s.traced.command().join(" ")),
            _ => {
                let objs: Vec<String> = plan
                    .objects
                    .iter()
                    .map(|o| o.display.display().to_string())
                    .collect();
                if objs.is_empty() {
                    "in every process".to_string()
                } else {
                    format!("in every process that maps {}", objs.join(", "))
                }
            }
        }
    }
}

/// `-t TID` must name a thread that exists (of the process, with `-p`).
pub fn check_thread(s: &TraceSettings) -> Result<()> {
    let Some(tid) = s.tid else { return Ok(()) };
    match s.traced.pid() {
        Some(pid) if !std::path::Path::new(&format!("/proc/{pid}/task/{tid}")).exists() => {
            bail!("-t {tid}: process {pid} has no thread {tid}")
        }
        None if !std::path::Path::new(&format!("/proc/{tid}")).exists() => {
            bail!("-t {tid}: no thread {tid} is running")
        }
        _ => Ok(()),
    }
}

/// An error of planning for `-p PID`, said as what caused it when the
/// process has exited since tracing began. No kind of error says so (its
/// files in /proc vanish as any missing file would): the process is looked
/// at.
pub fn exited_while_planning(s: &TraceSettings, e: anyhow::Error) -> anyhow::Error {
    match s.traced.pid() {
        Some(pid) if !target::process_alive(pid) => gone(pid),
        _ => e,
    }
}

/// An error of attaching for `-p PID`, said as what caused it when the
/// kernel refused a probe because the process had exited
/// ([`ProcessGone`]), or when the process is gone now: a process exiting
/// while a multi-uprobe link is made fails it with another errno, or with
/// none libbpf leaves readable.
pub fn exited_while_attaching(s: &TraceSettings, e: anyhow::Error) -> anyhow::Error {
    match s.traced.pid() {
        Some(pid) if e.downcast_ref::<ProcessGone>().is_some() || !target::process_alive(pid) => {
            gone(pid)
        }
        _ => e,
    }
}

/// The process of `-p PID` exited before tracing could begin.
pub fn gone(pid: u32) -> anyhow::Error {
    anyhow!("process {pid} exited before its probes were attached")
}

/// After Ctrl-C the command runs on until it exits (it usually got the
/// same Ctrl-C): say that tachy waits for it, then wait. Said once the
/// signals of the same stop are over, so that the next Ctrl-C is one the
/// user typed after reading it.
pub fn wait_for_command(sp: &mut Spawned, command: &[String]) -> i32 {
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(200)
        || stop::since_first().is_some_and(|t| t < stop::WINDOW)
    {
        if let Some(code) = sp.try_wait() {
            return code;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "tachy: waiting for {} (pid {}) to exit; Ctrl-C again to stop waiting",
        command.join(" "),
        sp.pid
    );
    sp.wait()
}

/// Programs that run another program rather than being it.
const WRAPPERS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "fish", "busybox", "env", "nice", "nohup", "timeout",
    "time", "sudo", "su", "setsid", "stdbuf", "taskset", "chrt", "ionice", "xargs", "make",
    "strace", "valgrind",
];

/// The command ran, the functions are in another program, and nothing was
/// counted: the command most likely started that program as a new
/// process (or exec'd it), which the probes do not follow by default.
pub fn suggest_follow(s: &TraceSettings, plan: &Plan, target: &TraceTarget) {
    let Scope::Command { exe: image, libs } = &target.scope else {
        return;
    };
    let Some(first) = plan.objects.first().map(|o| &o.display) else {
        return;
    };
    let name = |p: &std::path::Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let wrapper = WRAPPERS.contains(&name(image).as_str())
        || target
            .exe
            .as_deref()
            .is_some_and(|e| WRAPPERS.contains(&name(e).as_str()));
    // The command's program and its libraries, as files.
    let own: Vec<PathBuf> = std::iter::once(image)
        .chain(libs)
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .collect();
    let elsewhere = plan.objects.iter().all(|o| {
        let p = std::fs::canonicalize(&o.display).unwrap_or_else(|_| o.display.clone());
        !own.contains(&p)
    });
    if elsewhere {
        eprintln!(
            "tachy: nothing was counted: {} is {}; if it starts {} as a new process or by exec, \
             trace with --follow",
            s.traced.command()[0],
            if wrapper {
                "a shell or wrapper".to_string()
            } else {
                format!("not {}", first.display())
            },
            first.display()
        );
    }
}
