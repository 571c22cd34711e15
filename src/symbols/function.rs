//! What a pattern finds in an object: functions, with their raw and
//! demangled names, their split parts, and the IFUNC symbol each
//! implements where it was named through one.

use super::names::Names;

/// A `.cold`/`.warm` part of a function: its code, never an entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fragment {
    pub raw: String,
    pub addr: u64,
    pub size: u64,
}

/// A function a pattern matched in one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    pub raw: String,
    pub names: Names,
    pub addr: u64,
    pub size: u64,
    pub fragments: Vec<Fragment>,
    /// The IFUNC symbol this function implements, when it was named
    /// through one (see [`ifunc`]).
    pub ifunc: Option<IfuncOf>,
}

/// The IFUNC symbol a function implements, and how tachy knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfuncOf {
    /// The IFUNC symbol's name (`memset`) and address (its resolver's).
    pub name: String,
    pub resolver: u64,
    /// How many functions its resolver can return.
    pub candidates: usize,
    /// Read from the process (the one it uses), or one of the functions
    /// its resolver can return.
    pub resolved: bool,
}

impl IfuncOf {
    /// What `tachy list` says of an implementation of the IFUNC symbol.
    pub fn describe(&self) -> String {
        let what = format!(
            "{} is an IFUNC symbol: {:#x} is its resolver, which the loader runs to pick what callers reach",
            self.name, self.resolver
        );
        if self.resolved {
            format!("{what}; the process uses this function")
        } else {
            format!(
                "{what}; this is one of the {} functions it can return",
                self.candidates
            )
        }
    }
}

impl Function {
    /// The name shown to users: demangled with parameters, plus any clone
    /// suffix; for the implementation of an IFUNC symbol, that symbol's
    /// name first (`memset (resolved to __memset_avx2_unaligned_erms)`).
    pub fn display_name(&self) -> String {
        let own = if self.names.suffix.is_empty() {
            self.names.full.clone()
        } else {
            format!("{} [clone {}]", self.names.full, self.names.suffix)
        };
        match &self.ifunc {
            Some(i) => format!("{} {}", i.name, ifunc_note(i.resolved, &own)),
            None => own,
        }
    }
}

/// How a name reached through an IFUNC symbol is followed by the
/// implementation it stands for: `(resolved to IMPL)` where the process's
/// own choice is known, else `(may resolve to IMPL)`.
pub fn ifunc_note(resolved: bool, implementation: &str) -> String {
    if resolved {
        format!("(resolved to {implementation})")
    } else {
        format!("(may resolve to {implementation})")
    }
}
