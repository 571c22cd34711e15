//! The plan as people read it (`--dry-run`, `--verbose`, and how `tachy
//! list` says a function would be probed).

use std::fmt::Write as _;

use super::{
    GoProbe, Hit, HitPrices, ItemKind, Plan, ProbeKind, TracedFunc, CHECKED_JUMP_US, TAIL_INDIRECT,
};
use crate::disasm::ProbeCost;
use crate::report::fmt::human;

/// What the indirect jumps checked at run time cost, in words: the kernel
/// single-steps an indirect `jmp` under a probe, on every pass.
fn checked_jumps_text(n: usize) -> String {
    format!(
        "{n} indirect jump(s) checked at run time (single-stepped, ~{CHECKED_JUMP_US} us per pass)"
    )
}

/// A price as the plan prints it: `~1.2 us`.
fn price(ns: u64) -> String {
    format!("~{}", human(ns as f64))
}

impl Plan {
    /// A human-readable listing of the plan: what is timed, then each probe
    /// with what the kernel does on its hits.
    pub fn describe(&self) -> String {
        self.describe_priced(None)
    }

    /// [`Plan::describe`], with what each hit and each call of a traced
    /// function costs on this machine where `prices` are known.
    pub fn describe_priced(&self, prices: Option<&HitPrices>) -> String {
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
        if let Some(how) = self.stack {
            let _ = writeln!(
                s,
                "  --stack: each record's user stack, by {}",
                match how {
                    super::stack::StackHow::FramePointers =>
                        "the frame-pointer chain, walked in the kernel",
                    super::stack::StackHow::Copy =>
                        "a copy of up to 12 KiB of it, unwound with .eh_frame",
                }
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
                ItemKind::Function(f) if f.inlined.is_some() => writeln!(
                    s,
                    "  [{i}] {} in {} at {:#x} (symbols from {}); {}{}",
                    item.name,
                    self.objects[f.object].display.display(),
                    f.addr,
                    f.source_text,
                    f.describe_probes(),
                    self.call_price(i as u32, prices)
                        .map_or(String::new(), |p| format!("; price per call: {p}"))
                ),
                ItemKind::Function(f) => writeln!(
                    s,
                    "  [{i}] {} in {} at {:#x} (symbols from {}); return: {}{}{}",
                    item.name,
                    self.objects[f.object].display.display(),
                    f.addr,
                    f.source_text,
                    f.exits.describe(),
                    match f.exits.checked_jumps {
                        0 => String::new(),
                        n => format!("; {}", checked_jumps_text(n)),
                    },
                    self.call_price(i as u32, prices)
                        .map_or(String::new(), |p| format!("; price per call: {p}"))
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
            let hit = p.hit();
            let _ = writeln!(
                s,
                "  {:<24} {} +{:#x} ({:#x})  {}{}",
                self.kind_text(p.kind),
                self.objects[p.object].display.display(),
                p.offset,
                p.vaddr,
                hit.describe(),
                prices.map_or(String::new(), |c| format!(" {}", price(c.of(hit))))
            );
        }
        s
    }

    /// What one call of traced function `id` costs in probe hits: its
    /// entry, and one of its ways out (the cheapest to the dearest), with
    /// their prices where known: "~11 us (entry emulated, exit
    /// single-stepped)". `None` for a function planned without a summary
    /// of its exits (Go's), and for kernel items.
    pub fn call_price(&self, id: u32, prices: Option<&HitPrices>) -> Option<String> {
        let ItemKind::Function(f) = &self.items.get(id as usize)?.kind else {
            return None;
        };
        let exits = self.exit_hits.get(&id).filter(|e| !e.is_empty())?;
        let entry = match f.entry_cost {
            ProbeCost::Emulated => Hit::Emulated,
            ProbeCost::SingleStepped => Hit::SingleStepped,
        };
        let words = format!(
            "entry {}, exit {}",
            entry.describe(),
            exits
                .iter()
                .map(|h| h.describe())
                .collect::<Vec<_>>()
                .join(" or ")
        );
        let Some(c) = prices else {
            return Some(words);
        };
        let of_exits = exits.iter().map(|&h| c.of(h));
        let (lo, hi) = (
            c.of(entry) + of_exits.clone().min().unwrap_or(0),
            c.of(entry) + of_exits.max().unwrap_or(0),
        );
        Some(if lo == hi {
            format!("{} ({words})", price(lo))
        } else {
            format!("{} to {} ({words})", price(lo), human(hi as f64))
        })
    }

    /// The nodes a site probe times, as `[node] in [parent]`, one for each
    /// parent its function is expanded under (`in [parent] to NAME` under
    /// an indirect call: only its calls to NAME).
    fn slot_nodes(&self, slot: u32) -> String {
        let first = self.items.len();
        self.sites
            .iter()
            .enumerate()
            .filter(|(_, n)| n.slot == slot)
            .map(|(i, n)| match &n.via {
                Some(v) => format!("[{}] in [{}] to {}", first + i, n.parent, v.name),
                None => format!("[{}] in [{}]", first + i, n.parent),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub(super) fn kind_text(&self, kind: ProbeKind) -> String {
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
            cond,
            go,
        } => format!(
            "{}site end <{slot}> sp{sp_adjust:+}{}",
            if go { "go " } else { "" },
            cond.map_or(String::new(), |c| format!(
                " if {}",
                COND_NAMES[usize::from(c & 15)]
            ))
        ),
        ProbeKind::Site {
            slot,
            tail,
            exit_first,
            ends_with_parent,
            go,
            sp_adjust,
            inlined,
            reads,
        } => format!(
            "{}site <{slot}> {}{}{}{}{}{}",
            if go { "go " } else { "" },
            nodes(slot),
            if inlined {
                format!(" inlined sp{sp_adjust:+}")
            } else {
                String::new()
            },
            reads.map_or(String::new(), |op| format!(" reads callee {op}")),
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
            "{}, sp{sp_adjust:+#x}{}",
            if sp_adjust % 8 == 0 {
                "exit ahead of ret"
            } else {
                "inlined exit"
            },
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
        if let Some(i) = &self.inlined {
            return self.describe_instance(i);
        }
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

impl TracedFunc {
    /// How an inlined instance is probed, as `tachy list` says it: where
    /// it was inlined, its entry and each of its exits, as offsets in the
    /// enclosing function.
    fn describe_instance(&self, i: &super::inlined::InlinedOf) -> String {
        let cost = |c: ProbeCost| match c {
            ProbeCost::Emulated => "emulated",
            ProbeCost::SingleStepped => "single-stepped",
        };
        let exits: Vec<String> = i
            .exits
            .iter()
            .map(|x| {
                format!(
                    "+{:#x}{}",
                    x.addr - i.enclosing_addr,
                    x.cond.map_or(String::new(), |c| format!(
                        " if {}",
                        COND_NAMES[usize::from(c & 15)]
                    ))
                )
            })
            .collect();
        format!(
            "inlined into {} at {}{}  entry at +{:#x} `{}` ({})  exits: {} where control leaves it ({})",
            i.enclosing,
            i.call,
            if i.depth > 1 {
                format!(" ({} deep)", i.depth)
            } else {
                String::new()
            },
            self.entry_addr - i.enclosing_addr,
            self.entry_insn,
            cost(self.entry_cost),
            i.exits.len(),
            exits.join(", ")
        )
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
                inlined: None,
                exits: ExitSummary {
                    why_rets: Some(
                        "calls std::__throw_out_of_range(char const*)@plt at +0x42".into(),
                    ),
                    unknown_tails: 1,
                    value_unknown: 3,
                    checked_jumps: 2,
                    ..ExitSummary::new(ExitMode::Rets, 2)
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
            via: None,
        });
        // What the kernel does at each: `push`, `call` and a direct `jmp`
        // are emulated; `ret`, indirect jumps and the site's end are not.
        let probe = |vaddr: u64, kind| Probe {
            object: 0,
            vaddr,
            offset: vaddr - 0x400000,
            kind,
            cost: match kind {
                ProbeKind::Entry { .. } | ProbeKind::Uret | ProbeKind::Site { .. } => {
                    ProbeCost::Emulated
                }
                ProbeKind::Tail { cookie } if cookie & TAIL_INDIRECT == 0 => ProbeCost::Emulated,
                _ => ProbeCost::SingleStepped,
            },
        };
        plan.exit_hits
            .insert(0, [Hit::SingleStepped, Hit::Emulated].into());
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
                    sp_adjust: 0,
                    inlined: false,
                    reads: None,
                },
            ),
            probe(
                0x401216,
                ProbeKind::SiteEnd {
                    slot: 0,
                    sp_adjust: -8,
                    cond: None,
                    go: false,
                },
            ),
        ];
        plan
    }

    #[test]
    fn prices_are_printed_where_known() {
        let prices = HitPrices {
            emulated_ns: 1_000,
            stepped_ns: 9_500,
            uret_ns: 600,
        };
        let text = sample(Some(1), false).describe_priced(Some(&prices));
        let line = text.lines().find(|l| l.starts_with("  [0]")).unwrap();
        assert!(
            line.ends_with(
                "; price per call: ~2.0 us to 10.5 us (entry emulated, exit emulated or single-stepped)"
            ),
            "{line}"
        );
        let ret = text.lines().find(|l| l.starts_with("  exit ")).unwrap();
        assert!(ret.ends_with(")  single-stepped ~9.5 us"), "{ret}");
        let uret = text.lines().find(|l| l.starts_with("  uretprobe")).unwrap();
        assert!(uret.ends_with(")  uretprobe ~600 ns"), "{uret}");
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
