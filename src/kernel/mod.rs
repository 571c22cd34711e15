//! Kernel-side targets: system calls by name, kernel functions by name.

pub mod syscalls;

use anyhow::{bail, Result};

use crate::symbols::names::glob_match;

/// The system calls a pattern (`read`, `p*64`) names, as (name, number).
pub fn match_syscalls(pattern: &str) -> Result<Vec<(&'static str, u32)>> {
    let hits: Vec<(&str, u32)> = syscalls::X86_64
        .iter()
        .filter(|(name, _)| glob_match(pattern, name))
        .copied()
        .collect();
    if hits.is_empty() {
        let mut near: Vec<&str> = syscalls::X86_64
            .iter()
            .map(|(n, _)| *n)
            .filter(|n| n.contains(pattern) || pattern.contains(n) && n.len() >= 3)
            .take(5)
            .collect();
        near.sort();
        if near.is_empty() {
            bail!("no system call is named {pattern:?}");
        }
        bail!(
            "no system call is named {pattern:?}; near names: {}",
            near.join(", ")
        );
    }
    Ok(hits)
}

/// Whether this kernel can attach kprobes.
pub fn kprobes_available() -> bool {
    std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists()
}

/// The kernel functions (text symbols of /proc/kallsyms) a pattern names,
/// sorted; empty if none.
pub fn kernel_functions(pattern: &str) -> Result<Vec<String>> {
    let text = std::fs::read_to_string("/proc/kallsyms")
        .map_err(|e| anyhow::anyhow!("cannot read /proc/kallsyms: {e}"))?;
    let mut hits: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, kind, name) = (f.next()?, f.next()?, f.next()?);
            (matches!(kind, "t" | "T") && f.next().is_none() && glob_match(pattern, name))
                .then(|| name.to_string())
        })
        .collect();
    hits.sort();
    hits.dedup();
    Ok(hits)
}

/// Most kernel functions one run times: each is a program instance of its
/// own with fentry, or a kprobe pair.
pub const MAX_KERNEL_FUNCTIONS: usize = 64;

/// The kernel functions a pattern names: at least one (tracing them
/// also takes `check_count`).
pub fn match_kernel_functions(pattern: &str) -> Result<Vec<String>> {
    let hits = kernel_functions(pattern)?;
    if hits.is_empty() {
        bail!("no kernel function is named {pattern:?}");
    }
    Ok(hits)
}

/// Whether `hits` are few enough to trace at once.
pub fn check_count(pattern: &str, hits: &[String]) -> Result<()> {
    if hits.len() > MAX_KERNEL_FUNCTIONS {
        bail!(
            "{pattern:?} names {} kernel functions; name at most {MAX_KERNEL_FUNCTIONS}",
            hits.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_globs() {
        assert_eq!(match_syscalls("read").unwrap(), vec![("read", 0)]);
        let p: Vec<&str> = match_syscalls("pread*")
            .unwrap()
            .iter()
            .map(|x| x.0)
            .collect();
        assert_eq!(p, vec!["pread64", "preadv", "preadv2"]);
        let e = match_syscalls("redd").unwrap_err().to_string();
        assert_eq!(e, "no system call is named \"redd\"");
        let e = match_syscalls("nanosleep_x").unwrap_err().to_string();
        assert!(e.ends_with("near names: nanosleep"), "{e}");
    }
}
