//! The `tachy list` listing: what a pattern matches and how each match
//! would be probed. Plain data in, text out; the parts can be written one
//! by one, so a long listing streams.

use std::io::{self, Write};
use std::path::PathBuf;

/// Everything one `tachy list` prints, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// System calls as (name, number).
    pub syscalls: Vec<(String, u32)>,
    /// Kernel functions.
    pub kernel: Vec<String>,
    pub objects: Vec<ObjectListing>,
}

/// The functions one object contributes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectListing {
    /// The object as users know it.
    pub path: PathBuf,
    /// Where its symbols came from, in words.
    pub symbols_from: String,
    pub funcs: Vec<ListedFunc>,
}

/// One matched function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedFunc {
    /// Demangled name as shown to users.
    pub name: String,
    /// Its language ("c++", "rust", "c").
    pub lang: String,
    pub addr: u64,
    pub size: u64,
    /// How it would be probed, or why it cannot be.
    pub probes: Result<Probing, String>,
    /// Its call sites, with `--sites`.
    pub sites: Option<Vec<ListedSite>>,
    /// For the implementation of an IFUNC symbol: how it was found, in
    /// words.
    pub ifunc: Option<String>,
}

/// How a function would be probed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probing {
    /// `.cold` and other split parts.
    pub fragments: usize,
    /// Split parts found without a symbol (stripped libraries).
    pub unnamed_fragments: usize,
    /// The entry probe's distance from the function's start.
    pub entry_offset: u64,
    /// The instruction under the entry probe.
    pub entry_insn: String,
    /// Whether the kernel emulates that instruction or single-steps it.
    pub entry_emulated: bool,
    /// How returns are timed, in words.
    pub returns: String,
    pub rets: usize,
    /// `ret`s timed at the emulated jumps into their epilogue, and those
    /// jumps.
    pub early_rets: usize,
    pub early_points: usize,
    pub early_stepped: usize,
    pub tail_callees: Vec<String>,
    pub unknown_tails: usize,
    /// Indirect jumps proven to stay inside the function (not probed).
    pub internal_jumps: usize,
    /// Indirect jumps whose target is checked at run time.
    pub checked_jumps: usize,
    /// Indexed jumps taken to stay inside, unchecked.
    pub unchecked_jumps: usize,
}

/// One call site of a listed function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedSite {
    pub addr: u64,
    /// "call", "plt", "indirect", "tail", ...
    pub kind: String,
    /// `file:line`, where the debug information says.
    pub location: Option<String>,
    pub name: String,
}

pub fn render(l: &Listing, w: &mut impl Write) -> io::Result<()> {
    render_syscalls(&l.syscalls, w)?;
    render_kernel(&l.kernel, w)?;
    for o in &l.objects {
        render_object(&o.path, &o.symbols_from, w)?;
        for f in &o.funcs {
            render_func(f, w)?;
        }
    }
    Ok(())
}

pub fn render_syscalls(calls: &[(String, u32)], w: &mut impl Write) -> io::Result<()> {
    if calls.is_empty() {
        return Ok(());
    }
    writeln!(w, "system calls (timed from sys_enter to sys_exit):")?;
    for (name, nr) in calls {
        writeln!(w, "  syscall:{name}  number {nr}")?;
    }
    Ok(())
}

pub fn render_kernel(names: &[String], w: &mut impl Write) -> io::Result<()> {
    if names.is_empty() {
        return Ok(());
    }
    writeln!(w, "kernel (functions from /proc/kallsyms):")?;
    for name in names {
        writeln!(
            w,
            "  k:{name}  timed by fentry/fexit where the kernel allows, else a kprobe and kretprobe"
        )?;
    }
    Ok(())
}

/// The line that starts an object's functions.
pub fn render_object(
    path: &std::path::Path,
    symbols_from: &str,
    w: &mut impl Write,
) -> io::Result<()> {
    writeln!(w, "{} (symbols from {symbols_from}):", path.display())
}

pub fn render_func(f: &ListedFunc, w: &mut impl Write) -> io::Result<()> {
    writeln!(w, "  {}  ({})", f.name, f.lang)?;
    if let Some(i) = &f.ifunc {
        writeln!(w, "    {i}")?;
    }
    write!(w, "    address {:#x}  size {}", f.addr, f.size)?;
    match &f.probes {
        Err(why) => writeln!(w, "  cannot be traced: {why}")?,
        Ok(p) => {
            if p.fragments > 0 {
                write!(w, "  fragments {}", p.fragments)?;
            }
            if p.unnamed_fragments > 0 {
                write!(w, "  {} part(s) without a symbol", p.unnamed_fragments)?;
            }
            write!(w, "  entry")?;
            if p.entry_offset != 0 {
                write!(w, " at +{:#x}", p.entry_offset)?;
            }
            let cost = if p.entry_emulated {
                "emulated"
            } else {
                "single-stepped"
            };
            write!(
                w,
                " `{}` ({cost})  return: {}  exits: {} ret",
                p.entry_insn, p.returns, p.rets
            )?;
            if p.early_rets > 0 {
                write!(
                    w,
                    " ({} timed at {} emulated jump(s) into the epilogue",
                    p.early_rets, p.early_points
                )?;
                if p.early_stepped > 0 {
                    write!(
                        w,
                        " and {} single-stepped instruction(s) of it",
                        p.early_stepped
                    )?;
                }
                write!(w, ")")?;
            }
            for c in &p.tail_callees {
                write!(w, ", tail call to {c}")?;
            }
            if p.unknown_tails > 0 {
                write!(
                    w,
                    ", {} tail jump(s) to unknown code (timed up to the jump)",
                    p.unknown_tails
                )?;
            }
            if p.internal_jumps > 0 {
                write!(
                    w,
                    "; {} indirect jump(s) stay inside (not probed)",
                    p.internal_jumps
                )?;
            }
            if p.checked_jumps > 0 {
                write!(w, "; {}", crate::plan::checked_jumps_text(p.checked_jumps))?;
            }
            if p.unchecked_jumps > 0 {
                write!(
                    w,
                    "; {} indexed jump(s) taken to stay inside without a check (operand too wide to check)",
                    p.unchecked_jumps
                )?;
            }
            writeln!(w)?;
        }
    }
    if let Some(sites) = &f.sites {
        writeln!(
            w,
            "    {} call site{}:",
            sites.len(),
            if sites.len() == 1 { "" } else { "s" }
        )?;
        for s in sites {
            writeln!(
                w,
                "      {:#x}  {:<8}  {}  {}",
                s.addr,
                s.kind,
                s.location.as_deref().unwrap_or("?"),
                s.name
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Listing {
        let probing = Probing {
            fragments: 1,
            entry_offset: 4,
            entry_insn: "push rbp".into(),
            entry_emulated: true,
            returns: "probes on each ret: indirect call at +0x1c in db::Index::seek(long)".into(),
            rets: 2,
            tail_callees: vec!["db::Page::release()".into()],
            unknown_tails: 1,
            internal_jumps: 2,
            checked_jumps: 3,
            unchecked_jumps: 1,
            early_rets: 0,
            early_points: 0,
            early_stepped: 0,
            unnamed_fragments: 1,
        };
        Listing {
            syscalls: vec![("read".into(), 0), ("pread64".into(), 17)],
            kernel: vec!["vfs_read".into()],
            objects: vec![ObjectListing {
                path: "/srv/db/bin/dbd".into(),
                symbols_from: ".symtab".into(),
                funcs: vec![
                    ListedFunc {
                        ifunc: None,
                        name: "db::Table::scan(db::Range const&)".into(),
                        lang: "c++".into(),
                        addr: 0x4010,
                        size: 312,
                        probes: Ok(probing.clone()),
                        sites: Some(vec![
                            ListedSite {
                                addr: 0x4030,
                                kind: "call".into(),
                                location: Some("table.cc:88".into()),
                                name: "db::Index::seek(long)".into(),
                            },
                            ListedSite {
                                addr: 0x4090,
                                kind: "plt".into(),
                                location: None,
                                name: "pread64@plt".into(),
                            },
                        ]),
                    },
                    ListedFunc {
                        ifunc: None,
                        name: "leaf".into(),
                        lang: "c".into(),
                        addr: 0x5000,
                        size: 16,
                        probes: Ok(Probing {
                            fragments: 0,
                            entry_offset: 0,
                            entry_insn: "endbr64".into(),
                            entry_emulated: false,
                            returns: "uretprobe (a leaf: nothing can unwind through it)".into(),
                            rets: 1,
                            tail_callees: vec![],
                            unknown_tails: 0,
                            internal_jumps: 0,
                            checked_jumps: 0,
                            unchecked_jumps: 0,
                            early_rets: 0,
                            early_points: 0,
                            early_stepped: 0,
                            unnamed_fragments: 0,
                        }),
                        sites: None,
                    },
                    ListedFunc {
                        ifunc: None,
                        name: "odd".into(),
                        lang: "c".into(),
                        addr: 0x6000,
                        size: 0,
                        probes: Err("its size is 0".into()),
                        sites: None,
                    },
                ],
            }],
        }
    }

    #[test]
    fn golden() {
        let mut out = Vec::new();
        render(&sample(), &mut out).unwrap();
        crate::report::golden::check("list.txt", &out);
    }
}
