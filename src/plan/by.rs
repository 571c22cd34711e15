//! `--by`: the keys a traced function's calls are grouped by, as the user
//! names them, checked against what is traced, and their numbers on the
//! BPF side (TACHY_BY_* in tachy.h).
//!
//! A new kind of key (say `goroutine`) is one variant here with its name in
//! `parse` and `name`, its number in `kind` (and tachy.h), what it means
//! for each kind of traced item in `check`, the BPF side's value for it
//! (`by_entry_value` when it is read at the function's entry,
//! `by_close_value` when it is known at the call's end), and how the
//! report names a value of it (`report::groups::KeyValue`, made in
//! `session::name_key`).

use std::fmt;

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
}

/// Keys at most, as the BPF side keeps them (TACHY_BY_KEYS).
pub const MAX_KEYS: usize = 2;

/// TACHY_BY_* of tachy.h.
pub const KIND_NONE: u32 = 0;
pub const KIND_CALLER: u32 = 1;
pub const KIND_TID: u32 = 2;
pub const KIND_PID: u32 = 3;

impl ByKey {
    /// Parses a key as `--by` takes it.
    pub fn parse(s: &str) -> Result<ByKey, String> {
        match s.trim() {
            "caller" => Ok(ByKey::Caller),
            "tid" | "thread" => Ok(ByKey::Tid),
            "pid" | "process" => Ok(ByKey::Pid),
            other => Err(format!(
                "{other:?} is not a key to group by: use caller, tid or pid"
            )),
        }
    }

    /// The key's number on the BPF side.
    pub fn kind(&self) -> u32 {
        match self {
            ByKey::Caller => KIND_CALLER,
            ByKey::Tid => KIND_TID,
            ByKey::Pid => KIND_PID,
        }
    }

    /// Whether the BPF side reads its value at the function's entry (and
    /// keeps it with the open frame).
    pub fn read_at_entry(&self) -> bool {
        matches!(self, ByKey::Caller)
    }

    /// The key as `--by` names it.
    pub fn name(&self) -> &'static str {
        match self {
            ByKey::Caller => "caller",
            ByKey::Tid => "tid",
            ByKey::Pid => "pid",
        }
    }
}

impl fmt::Display for ByKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
}

/// Refuses keys that do not go together or do not mean anything for what
/// is traced, in one line.
pub fn check(keys: &[ByKey], traced: Traced<'_>) -> Result<(), String> {
    for (i, k) in keys.iter().enumerate() {
        if keys[..i].contains(k) {
            return Err(format!("--by {k} is given twice"));
        }
    }
    if keys.len() > MAX_KEYS {
        return Err(format!(
            "--by takes at most {MAX_KEYS} keys (got {}: {})",
            keys.len(),
            keys.iter().map(ByKey::name).collect::<Vec<_>>().join(", ")
        ));
    }
    if keys.contains(&ByKey::Tid) && keys.contains(&ByKey::Pid) {
        return Err(
            "--by tid and --by pid do not go together: a thread belongs to one process, so group by tid alone (each thread's line names it)"
                .into(),
        );
    }
    if let Some(k) = traced.kernel {
        return Err(format!(
            "--by groups calls of user functions and system calls; kernel functions ({k}) are not grouped"
        ));
    }
    if let Some(g) = traced.go {
        return Err(format!(
            "--by does not group calls of Go functions yet ({g})"
        ));
    }
    if let (Some(sys), true) = (traced.syscall, keys.contains(&ByKey::Caller)) {
        return Err(format!(
            "--by caller: a system call ({sys}) has no caller that tachy reads; group it by tid or pid"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse() {
        assert_eq!(ByKey::parse("caller"), Ok(ByKey::Caller));
        assert_eq!(ByKey::parse("tid"), Ok(ByKey::Tid));
        assert_eq!(ByKey::parse("pid"), Ok(ByKey::Pid));
        assert!(ByKey::parse("colour").is_err());
    }

    #[test]
    fn nonsense_is_refused() {
        let none = Traced::default();
        assert!(check(&[ByKey::Caller, ByKey::Tid], none).is_ok());
        assert!(check(&[ByKey::Caller, ByKey::Pid], none).is_ok());
        assert_eq!(
            check(&[ByKey::Tid, ByKey::Tid], none).unwrap_err(),
            "--by tid is given twice"
        );
        assert!(check(&[ByKey::Tid, ByKey::Pid], none)
            .unwrap_err()
            .starts_with("--by tid and --by pid do not go together"));
        let sys = Traced {
            syscall: Some("syscall:read"),
            ..Traced::default()
        };
        assert!(check(&[ByKey::Tid], sys).is_ok());
        assert_eq!(
            check(&[ByKey::Caller], sys).unwrap_err(),
            "--by caller: a system call (syscall:read) has no caller that tachy reads; group it by tid or pid"
        );
        let go = Traced {
            go: Some("main.work"),
            ..Traced::default()
        };
        assert!(check(&[ByKey::Tid], go).is_err());
    }
}
