//! The plan as people read it (`--dry-run`, `--verbose`, and how `tachy
//! list` says a function would be probed).

use std::fmt::Write as _;

use super::{GoProbe, ItemKind, Plan, ProbeKind, TracedFunc, CHECKED_JUMP_US, TAIL_INDIRECT};
use crate::disasm::ProbeCost;

/// What the indirect jumps checked at run time cost, in words: the kernel
/// single-steps an indirect `jmp` under a probe, on every pass.
fn checked_jumps_text(n: usize) -> String {
    format!(
        "{n} indirect jump(s) checked at run time (single-stepped, ~{CHECKED_JUMP_US} us per pass)"
    )
}

impl Plan {
    /// A human-readable listing of the plan: what is timed, then each probe.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        let whom = match (self.pid, self.settings.follow) {
            _ if self.settings.cgroup.is_some() => {
                "counted in the processes of one cgroup".to_string()
            }
            (None, _) if !self.pids.is_empty() => format!(
                "counted in pids {}{}",
                self.pids
                    .iter()
                    .map(|p| p.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                if self.settings.follow {
                    " and their forks"
                } else {
                    ""
                }
            ),
            (None, _) => "counted in every process".to_string(),
            (Some(pid), false) => format!("counted in pid {pid}"),
            (Some(pid), true) => format!("counted in pid {pid} and its forks"),
        };
        let _ = writeln!(
            s,
            "{} function(s), {} probe(s), {whom}",
            self.items.len(),
            self.probes.len(),
        );
        if self.settings.cpu {
            let _ = writeln!(
                s,
                "  --cpu: on-CPU, blocked and runnable time from the sched_switch and sched_wakeup tracepoints (tp_btf){}",
                if self.settings.cpu_hist { ", with a histogram of each" } else { "" }
            );
        }
        if let Some(ns) = self.settings.record_min_ns {
            let _ = writeln!(
                s,
                "  --record-slower-than: a record of each call of at least {} through a BPF ring buffer",
                crate::report::fmt::human(ns as f64)
            );
        }
        for (i, item) in self.items.iter().enumerate() {
            let _ = match &item.kind {
                ItemKind::Syscall { nr } => writeln!(
                    s,
                    "  [{i}] {}: system call {nr}, timed by the sys_enter and sys_exit tracepoints",
                    item.name
                ),
                ItemKind::KernelFunction => writeln!(
                    s,
                    "  [{i}] {}: kernel function, timed by fentry/fexit, else a kprobe and kretprobe",
                    item.name
                ),
                ItemKind::Function(f) => writeln!(
                    s,
                    "  [{i}] {} in {} at {:#x} (symbols from {}); return: {}{}",
                    item.name,
                    self.objects[f.object].display.display(),
                    f.addr,
                    f.source_text,
                    f.exits.describe(),
                    match f.exits.checked_jumps {
                        0 => String::new(),
                        n => format!("; {}", checked_jumps_text(n)),
                    }
                ),
            };
        }
        for (id, callee) in &self.ifunc_callees {
            let _ = writeln!(s, "  [{id}] calls IFUNC {callee}");
        }
        for (id, f) in &self.arg_filters {
            let _ = writeln!(s, "  [{id}] --filter, at entry: {}", f.describe());
        }
        for (id, ops) in &self.by_args {
            let keys: Vec<&str> = ops.iter().flatten().map(|o| o.what.as_str()).collect();
            let _ = writeln!(s, "  [{id}] --by, at entry: {}", keys.join(", "));
        }
        for (id, args) in &self.record_args {
            let syscall = matches!(
                self.items.get(*id as usize).map(|i| &i.kind),
                Some(ItemKind::Syscall { .. })
            );
            let list: Vec<String> = args.iter().map(|a| a.describe(syscall)).collect();
            let _ = writeln!(
                s,
                "  [{id}] records print: {}",
                if list.is_empty() {
                    "no integer argument".to_string()
                } else {
                    list.join(", ")
                }
            );
        }
        for p in &self.probes {
            let _ = writeln!(
                s,
                "  {:<24} {} +{:#x} ({:#x})",
                self.kind_text(p.kind),
                self.objects[p.object].display.display(),
                p.offset,
                p.vaddr
            );
        }
        s
    }

    /// The nodes a site probe times, as `[node] in [parent]`, one for each
    /// parent its function is expanded under.
    fn slot_nodes(&self, slot: u32) -> String {
        let first = self.items.len();
        self.sites
            .iter()
            .enumerate()
            .filter(|(_, n)| n.slot == slot)
            .map(|(i, n)| format!("[{}] in [{}]", first + i, n.parent))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn kind_text(&self, kind: ProbeKind) -> String {
        kind_text(kind, &|slot| self.slot_nodes(slot))
    }
}

fn kind_text(kind: ProbeKind, nodes: &dyn Fn(u32) -> String) -> String {
    match kind {
        ProbeKind::Entry { id, sp_adjust, .. } => format!("entry [{id}] sp{sp_adjust:+}"),
        ProbeKind::Uret => "uretprobe".to_string(),
        ProbeKind::SiteEnd {
            slot,
            sp_adjust,
            go,
        } => format!(
            "{}site end <{slot}> sp{sp_adjust:+}",
            if go { "go " } else { "" }
        ),
        ProbeKind::Site {
            slot,
            tail,
            exit_first,
            ends_with_parent,
            go,
        } => format!(
            "{}site <{slot}> {}{}{}{}",
            if go { "go " } else { "" },
            nodes(slot),
            if tail { " tail" } else { "" },
            if exit_first { " +exit" } else { "" },
            if ends_with_parent {
                " ends with parent"
            } else {
                ""
            }
        ),
        ProbeKind::Exit {
            sp_adjust: 0,
            cond: None,
        } => "exit".to_string(),
        ProbeKind::Exit { sp_adjust, cond } => format!(
            "exit ahead of ret, sp{sp_adjust:+#x}{}",
            cond.map_or(String::new(), |c| format!(
                " if {}",
                COND_NAMES[usize::from(c & 15)]
            ))
        ),
        ProbeKind::Tail { cookie } if cookie & TAIL_INDIRECT != 0 => {
            "tail (unknown callee)".to_string()
        }
        ProbeKind::Tail { .. } => "tail".to_string(),
        ProbeKind::Jump { .. } => "indirect jump checked".to_string(),
        ProbeKind::Go {
            id,
            kind,
            sp_adjust,
        } => match kind {
            GoProbe::Entry => format!("go entry [{id}] sp{sp_adjust:+}"),
            GoProbe::Ret => format!("go ret [{id}]"),
            GoProbe::Morestack => format!("go morestack [{id}]"),
            GoProbe::Goexit => "go goroutine end".to_string(),
        },
    }
}

impl TracedFunc {
    /// How the function is probed, as `tachy list` says it: its split
    /// parts, the entry probe and the instruction under it, how the return
    /// is timed, and every way out of the function.
    pub fn describe_probes(&self) -> String {
        let x = &self.exits;
        let mut s = String::new();
        if self.fragments > 0 {
            let _ = write!(s, "fragments {}  ", self.fragments);
        }
        if x.unnamed_fragments > 0 {
            let _ = write!(s, "{} part(s) without a symbol  ", x.unnamed_fragments);
        }
        s.push_str("entry");
        if self.entry_addr != self.addr {
            let _ = write!(s, " at +{:#x}", self.entry_addr - self.addr);
        }
        let cost = match self.entry_cost {
            ProbeCost::Emulated => "emulated",
            ProbeCost::SingleStepped => "single-stepped",
        };
        let _ = write!(
            s,
            " `{}` ({cost})  return: {}  exits: {} ret",
            self.entry_insn,
            x.describe(),
            x.rets
        );
        if x.early_rets > 0 {
            let _ = write!(
                s,
                " ({} timed at {} emulated jump(s) into the epilogue",
                x.early_rets, x.early_points
            );
            if x.early_stepped > 0 {
                let _ = write!(
                    s,
                    " and {} single-stepped instruction(s) of it",
                    x.early_stepped
                );
            }
            s.push(')');
        }
        for c in &x.tail_callees {
            let _ = write!(s, ", tail call to {c}");
        }
        if x.unknown_tails > 0 {
            let _ = write!(
                s,
                ", {} tail jump(s) to unknown code (timed up to the jump)",
                x.unknown_tails
            );
        }
        if x.internal_jumps > 0 {
            let _ = write!(
                s,
                "; {} indirect jump(s) stay inside (not probed)",
                x.internal_jumps
            );
        }
        if x.checked_jumps > 0 {
            let _ = write!(s, "; {}", checked_jumps_text(x.checked_jumps));
        }
        if x.unchecked_jumps > 0 {
            let _ = write!(
                s,
                "; {} indexed jump(s) taken to stay inside without a check (operand too wide to check)",
                x.unchecked_jumps
            );
        }
        s
    }
}

/// x86 condition codes by number, as `jcc` mnemonics name them.
const COND_NAMES: [&str; 16] = [
    "o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le", "g",
];

#[cfg(test)]
mod tests {
    use super::super::*;
    use crate::callsites::{Site, SiteKind};
    use crate::golden;

    /// A plan with one of everything: a function with each probe kind, a
    /// call site, a system call and a kernel function.
    #[test]
    fn cpu_split_is_described() {
        let mut plan = sample(Some(42), false);
        assert!(!plan.describe().contains("--cpu"));
        plan.settings.cpu = true;
        let text = plan.describe();
        let line = text.lines().nth(1).unwrap();
        assert_eq!(
            line,
            "  --cpu: on-CPU, blocked and runnable time from the sched_switch and sched_wakeup tracepoints (tp_btf)"
        );
    }

    #[test]
    fn records_are_described() {
        let mut plan = sample(Some(42), false);
        assert!(!plan.describe().contains("--record"));
        plan.settings.record_min_ns = Some(5_000_000);
        let text = plan.describe();
        assert_eq!(
            text.lines().nth(1).unwrap(),
            "  --record-slower-than: a record of each call of at least 5.00 ms through a BPF ring buffer"
        );
    }

    fn sample(pid: Option<u32>, follow: bool) -> Plan {
        let mut plan = Plan::new(Settings {
            follow,
            ..Settings::default()
        });
        plan.pid = pid;
        plan.objects.push(ObjectRef {
            display: "/srv/db/bin/dbd".into(),
            open_path: "/proc/42/root/srv/db/bin/dbd".into(),
        });
        plan.items.push(Item {
            name: "db::Table::scan(db::Range const&)".into(),
            raw_name: "_ZN2db5Table4scanERKNS_5RangeE".into(),
            kind: ItemKind::Function(TracedFunc {
                object: 0,
                addr: 0x401200,
                size: 0x80,
                fragments: 1,
                source: SymSource::Symtab,
                source_text: ".symtab".into(),
                entry_addr: 0x401204,
                entry_insn: "push rbp".into(),
                entry_cost: ProbeCost::Emulated,
                exits: ExitSummary {
                    mode: ExitMode::Rets,
                    why_rets: Some(
                        "calls std::__throw_out_of_range(char const*)@plt at +0x42".into(),
                    ),
                    rets: 2,
                    tail_callees: Vec::new(),
                    unknown_tails: 1,
                    internal_jumps: 0,
                    checked_jumps: 2,
                    unchecked_jumps: 0,
                    early_rets: 0,
                    early_points: 0,
                    early_stepped: 0,
                    unnamed_fragments: 0,
                },
            }),
        });
        plan.add_syscall("read", 0);
        plan.add_kernel_function("vfs_read");
        plan.sites.push(SiteNode {
            parent: 0,
            slot: 0,
            site: Site {
                addr: 0x401210,
                ret: Some(0x401215),
                kind: SiteKind::Plt,
                callee: None,
                callee_raw: Some("memcpy".into()),
                name: "memcpy@plt".into(),
                location: None,
            },
            level: 1,
            expanded: false,
        });
        let probe = |vaddr: u64, kind| Probe {
            object: 0,
            vaddr,
            offset: vaddr - 0x400000,
            kind,
        };
        plan.probes = vec![
            probe(
                0x401204,
                ProbeKind::Entry {
                    id: 0,
                    sp_adjust: 8,
                    tailing: false,
                },
            ),
            probe(0x401240, RET_EXIT),
            probe(0x401250, ProbeKind::Tail { cookie: 0 }),
            probe(
                0x401260,
                ProbeKind::Tail {
                    cookie: TAIL_CONDITIONAL | TAIL_INDIRECT | 5,
                },
            ),
            probe(0x401270, ProbeKind::Jump { cookie: 0x10 << 32 }),
            probe(0x401204, ProbeKind::Uret),
            probe(
                0x401210,
                ProbeKind::Site {
                    slot: 0,
                    tail: false,
                    exit_first: true,
                    ends_with_parent: true,
                    go: false,
                },
            ),
            probe(
                0x401216,
                ProbeKind::SiteEnd {
                    slot: 0,
                    sp_adjust: -8,
                    go: false,
                },
            ),
        ];
        plan
    }

    #[test]
    fn dry_run_listing() {
        let out = sample(Some(1234), false).describe();
        golden::check("src/plan/golden", "describe.txt", out.as_bytes());
    }

    #[test]
    fn no_pid_reads_as_every_process() {
        let first = |p: Plan| p.describe().lines().next().unwrap_or("").to_string();
        assert_eq!(
            first(sample(None, false)),
            "3 function(s), 8 probe(s), counted in every process"
        );
        assert_eq!(
            first(sample(Some(77), false)),
            "3 function(s), 8 probe(s), counted in pid 77"
        );
        assert_eq!(
            first(sample(Some(77), true)),
            "3 function(s), 8 probe(s), counted in pid 77 and its forks"
        );
    }
}
