//! `--stack`: the user stacks the kernel took of recorded calls, unwound
//! (a copy, with the objects' `.eh_frame`) and named: function, file:line,
//! and the function inlined at the call, marked. A process's maps are read
//! at its first stack and kept, so stacks of a process that has exited
//! since are still named.

use std::collections::HashMap;

use crate::probe::KernelStack;
use crate::report::records::StackFrame;
use crate::symbols::unwind::{Stacks, UserStack};

/// Names of the outermost frame a stack shows: what runs before `main`
/// (libc's start, `_start`) is the same in every stack.
const ROOTS: &[&str] = &["main", "main.main"];

/// Where a goroutine's frame-pointer chain ends: the return address of
/// its first function is in `runtime.goexit`, which no Go code calls; a
/// stack shows its callers up to that first function.
fn goroutine_top(raw: &str) -> bool {
    raw == "runtime.goexit" || raw == "runtime.goexit.abi0"
}

/// Unwinds and names stacks, per process.
#[derive(Default)]
pub struct Symbolizer {
    procs: HashMap<u32, Stacks>,
}

impl Symbolizer {
    /// Reads the maps of processes `pids` (those seen so far too) again,
    /// while they run.
    pub fn watch(&mut self, pids: impl IntoIterator<Item = u32>) {
        for pid in pids {
            self.procs.entry(pid).or_insert_with(|| Stacks::new(pid));
        }
        for s in self.procs.values_mut() {
            s.refresh();
        }
    }

    /// The frames of a stack of process `pid`, the caller's first, up to
    /// `main`.
    pub fn frames(&mut self, pid: u32, stack: &KernelStack) -> Vec<StackFrame> {
        let stacks = self.procs.entry(pid).or_insert_with(|| Stacks::new(pid));
        let addrs = match stack {
            KernelStack::Frames(a) => a.clone(),
            KernelStack::Copy {
                ip,
                sp,
                bp,
                base,
                bytes,
            } => {
                if *ip == 0 {
                    Vec::new()
                } else {
                    stacks.unwind(&UserStack {
                        ip: *ip,
                        ret: true,
                        sp: *sp,
                        bp: *bp,
                        base: *base,
                        bytes,
                    })
                }
            }
        };
        let mut out = Vec::new();
        for addr in addrs {
            let f = stacks.name(addr, true);
            if goroutine_top(&f.raw) {
                break;
            }
            let loc = stacks.locate(addr, true);
            match loc {
                Some(l) => {
                    let outer = match l.inlined {
                        Some(g) => {
                            out.push(StackFrame {
                                function: g,
                                location: Some(l.file_line),
                                inlined: true,
                            });
                            l.inlined_at.first().cloned()
                        }
                        None => Some(l.file_line),
                    };
                    out.push(StackFrame {
                        function: f.name.clone(),
                        location: outer,
                        inlined: false,
                    });
                }
                None => out.push(StackFrame {
                    function: f.name.clone(),
                    location: None,
                    inlined: false,
                }),
            }
            if ROOTS.contains(&f.raw.as_str()) {
                break;
            }
        }
        out
    }
}
