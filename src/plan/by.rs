//! `--by`: the keys a traced function's calls are grouped by, as the user
//! names them, checked against what is traced. Their numbers on the BPF
//! side are tachy.h's `enum tachy_by_kind`, which `probe` reads from the
//! skeleton.
//!
//! A new kind of key (say the CPU) is one variant here with its name in
//! `parse` and `name`, its number in tachy.h (and `probe::by_kind`), what
//! it means for each kind of traced item in `check`, the BPF side's value for it
//! (`by_entry_values` when it is read at the function's entry,
//! `by_close_value` when it is known at the call's end), and how the
//! report names a value of it (`report::groups::KeyValue`, made in
//! `naming::Namer::name`).
//!
//! `argN` and parameter names are the operands of `--filter`: each traced
//! function resolves them where its own DWARF (or the ABI) puts them
//! (`Plan::by_args`), and the BPF entry program reads them as the filter
//! does. A goroutine's id is read from Go's `g` (R14) at the offset of
//! `goid` that `Plan::go_layout` gives.

use std::fmt;

use anyhow::{anyhow, Result};

use super::args::ArgRef;
use crate::usage::UsageError;

/// One key of `--by`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ByKey {
    /// The return address at entry: the call site the function was called
    /// from.
    Caller,
    /// The thread that made the call.
    Tid,
    /// The process that made the call.
    Pid,
    /// An integer argument's value at entry: `argN` or a DWARF parameter
    /// name (never `ArgRef::Tid` or `ArgRef::Pid`, which are the keys
    /// above), read where each function has it (`plan::args`).
    Arg(ArgRef),
    /// A Go function's goroutine (`g.goid`).
    Goroutine,
    /// The value the call returned (`retval`, `ret`), as the function's
    /// return type reads it.
    Retval,
    /// The chain of callers (`--stack`'s user stack): grouped by tachy
    /// from a record of each call, not by the kernel.
    Stack,
}

/// Keys at most, as the BPF side keeps them (TACHY_BY_KEYS).
pub const MAX_KEYS: usize = 2;

impl ByKey {
    /// Parses a key as `--by` takes it.
    pub fn parse(s: &str) -> Result<ByKey> {
        match s.trim() {
            "caller" => Ok(ByKey::Caller),
            "tid" | "thread" => Ok(ByKey::Tid),
            "pid" | "process" => Ok(ByKey::Pid),
            "goroutine" => Ok(ByKey::Goroutine),
            "stack" => Ok(ByKey::Stack),
            other => match ArgRef::parse(other) {
                Ok(ArgRef::Tid) => Ok(ByKey::Tid),
                Ok(ArgRef::Pid) => Ok(ByKey::Pid),
                Ok(ArgRef::Ret) => Ok(ByKey::Retval),
                Ok(a) => Ok(ByKey::Arg(a)),
                Err(e) if other.starts_with("arg") => Err(e),
                Err(_) => Err(anyhow!(
                    "{other:?} is not a key to group by: use caller, stack, tid, pid, goroutine, retval, argN or a parameter name"
                )),
            },
        }
    }

    /// Whether the BPF side reads its value at the function's entry (and
    /// keeps it with the open frame). A goroutine's id is read from `g` at
    /// the call's `ret`: the call ends on the goroutine it began on. The
    /// caller is read at the return too, from the return-address slot (or
    /// a uretprobe's registers), which holds the same address as at entry.
    pub fn read_at_entry(&self) -> bool {
        matches!(self, ByKey::Arg(_))
    }

    /// The key as `--by` names it.
    pub fn name(&self) -> String {
        match self {
            ByKey::Caller => "caller".into(),
            ByKey::Tid => "tid".into(),
            ByKey::Pid => "pid".into(),
            ByKey::Arg(a) => a.to_string(),
            ByKey::Goroutine => "goroutine".into(),
            ByKey::Retval => "retval".into(),
            ByKey::Stack => "stack".into(),
        }
    }
}

impl fmt::Display for ByKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// What is traced, as far as `--by` cares.
#[derive(Clone, Copy, Debug, Default)]
pub struct Traced<'a> {
    /// A system call's name (`syscall:read`), if any is traced.
    pub syscall: Option<&'a str>,
    /// A kernel function's name, if any is traced.
    pub kernel: Option<&'a str>,
    /// A Go function's name, if any is traced.
    pub go: Option<&'a str>,
    /// A user function's name that is not Go, if any is traced.
    pub native: Option<&'a str>,
    /// Go only: whether the offset of `goid` in `runtime.g` is known.
    pub goid_known: bool,
}

/// Refuses keys that do not go together or do not mean anything for what
/// is traced, in one line: bad usage.
pub fn check(keys: &[ByKey], traced: Traced<'_>) -> Result<(), UsageError> {
    let refuse = |why: String| Err(UsageError(why));
    for (i, k) in keys.iter().enumerate() {
        if keys[..i].contains(k) {
            return refuse(format!("--by {k} is given twice"));
        }
    }
    if keys.len() > MAX_KEYS {
        return refuse(format!(
            "--by takes at most {MAX_KEYS} keys (got {}: {})",
            keys.len(),
            keys.iter().map(ByKey::name).collect::<Vec<_>>().join(", ")
        ));
    }
    if keys.contains(&ByKey::Stack) && keys.len() > 1 {
        return refuse(
            "--by stack goes alone: a chain of callers is grouped by tachy from each call's record, the other keys by the kernel"
                .into(),
        );
    }
    if keys.contains(&ByKey::Tid) && keys.contains(&ByKey::Pid) {
        return refuse(
            "--by tid and --by pid do not go together: a thread belongs to one process, so group by tid alone (each thread's line names it)"
                .into(),
        );
    }
    if let Some(k) = traced.kernel {
        return refuse(format!(
            "--by groups calls of user functions and system calls; kernel functions ({k}) are not grouped"
        ));
    }
    if keys.contains(&ByKey::Goroutine) {
        if let Some(other) = traced.native.or(traced.syscall) {
            return refuse(format!(
                "--by goroutine groups calls of Go functions; {other} is not Go code"
            ));
        }
        if traced.go.is_some() && !traced.goid_known {
            return refuse(format!(
                "--by goroutine: where runtime.g keeps goid is not known for this Go binary ({}): it has no DWARF for runtime.g and its Go version's layout is not known to tachy",
                traced.go.unwrap_or_default()
            ));
        }
    }
    if let Some(g) = traced.go {
        if let Some(k) = keys.iter().find(|k| {
            !matches!(
                k,
                ByKey::Goroutine | ByKey::Pid | ByKey::Retval | ByKey::Stack
            )
        }) {
            return refuse(format!(
                "--by {k} does not group calls of Go functions ({g}): group them by goroutine, pid, retval or stack"
            ));
        }
    }
    if let (Some(sys), true) = (traced.syscall, keys.contains(&ByKey::Caller)) {
        return refuse(format!(
            "--by caller: a system call ({sys}) has no caller that tachy reads; group it by tid or pid"
        ));
    }
    if let (Some(sys), true) = (traced.syscall, keys.contains(&ByKey::Stack)) {
        return refuse(format!(
            "--by stack groups calls of user functions; a system call ({sys}) has no stack that tachy reads"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse() {
        assert_eq!(ByKey::parse("caller").unwrap(), ByKey::Caller);
        assert_eq!(ByKey::parse("tid").unwrap(), ByKey::Tid);
        assert_eq!(ByKey::parse("pid").unwrap(), ByKey::Pid);
        assert_eq!(ByKey::parse("goroutine").unwrap(), ByKey::Goroutine);
        assert_eq!(ByKey::parse("arg1").unwrap(), ByKey::Arg(ArgRef::Index(1)));
        assert_eq!(
            ByKey::parse("key").unwrap(),
            ByKey::Arg(ArgRef::Name("key".into()))
        );
        assert!(ByKey::parse("arg7")
            .unwrap_err()
            .to_string()
            .starts_with("arg7: only arg0 to arg5"));
        assert!(ByKey::parse("col-our")
            .unwrap_err()
            .to_string()
            .contains("is not a key to group by"));
    }

    #[test]
    fn nonsense_is_refused() {
        let none = Traced::default();
        assert!(check(&[ByKey::Caller, ByKey::Tid], none).is_ok());
        assert!(check(&[ByKey::Caller, ByKey::Pid], none).is_ok());
        assert_eq!(
            check(&[ByKey::Tid, ByKey::Tid], none).unwrap_err().0,
            "--by tid is given twice"
        );
        assert!(check(&[ByKey::Tid, ByKey::Pid], none)
            .unwrap_err()
            .0
            .starts_with("--by tid and --by pid do not go together"));
        let sys = Traced {
            syscall: Some("syscall:read"),
            ..Traced::default()
        };
        assert!(check(&[ByKey::Tid], sys).is_ok());
        assert_eq!(
            check(&[ByKey::Caller], sys).unwrap_err().0,
            "--by caller: a system call (syscall:read) has no caller that tachy reads; group it by tid or pid"
        );
        let go = Traced {
            go: Some("main.work"),
            ..Traced::default()
        };
        assert!(check(&[ByKey::Tid], go).is_err());
        assert_eq!(
            check(&[ByKey::Goroutine], go).unwrap_err().0,
            "--by goroutine: where runtime.g keeps goid is not known for this Go binary (main.work): it has no DWARF for runtime.g and its Go version's layout is not known to tachy"
        );
        let known = Traced {
            goid_known: true,
            ..go
        };
        assert!(check(&[ByKey::Goroutine, ByKey::Pid], known).is_ok());
        assert!(check(&[ByKey::Retval, ByKey::Goroutine], known).is_ok());
        assert!(check(&[ByKey::Stack], known).is_ok());
        assert_eq!(
            check(&[ByKey::Goroutine, ByKey::Arg(ArgRef::Index(0))], known).unwrap_err().0,
            "--by arg0 does not group calls of Go functions (main.work): group them by goroutine, pid, retval or stack"
        );
        let c = Traced {
            native: Some("work"),
            ..Traced::default()
        };
        assert_eq!(
            check(&[ByKey::Goroutine], c).unwrap_err().0,
            "--by goroutine groups calls of Go functions; work is not Go code"
        );
        assert!(check(&[ByKey::Arg(ArgRef::Index(1)), ByKey::Tid], c).is_ok());
        assert!(check(&[ByKey::Arg(ArgRef::Index(0))], sys).is_ok());
    }
}
