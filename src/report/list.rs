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
    /// How it would be probed, in the plan's words, or why it cannot be.
    pub probes: Result<String, String>,
    /// Its call sites, with `--sites`.
    pub sites: Option<Vec<ListedSite>>,
    /// For the implementation of an IFUNC symbol: how it was found, in
    /// words.
    pub ifunc: Option<String>,
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
        Ok(probes) => writeln!(w, "  {probes}")?,
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
        let probing = "fragments 1  1 part(s) without a symbol  entry at +0x4 `push rbp` (emulated)  \
                       return: probes on each ret: indirect call at +0x1c in db::Index::seek(long)  \
                       exits: 2 ret, tail call to db::Page::release(), \
                       1 tail jump(s) to unknown code (timed up to the jump); \
                       2 indirect jump(s) stay inside (not probed); \
                       3 indirect jump(s) checked at run time (single-stepped, ~5 us per pass); \
                       1 indexed jump(s) taken to stay inside without a check (operand too wide to check)";
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
                        probes: Ok(probing.into()),
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
                        probes: Ok("entry `endbr64` (single-stepped)  \
                                    return: uretprobe (a leaf: nothing can unwind through it)  \
                                    exits: 1 ret"
                            .into()),
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
