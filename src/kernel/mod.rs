//! Kernel-side targets: system calls by name.

pub mod syscalls;

use anyhow::{bail, Result};

use crate::symbols::pattern::glob_match;

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
