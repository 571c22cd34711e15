//! Whether anything can unwind through a traced frame: the proof that
//! allows a uretprobe (whose trampoline the unwinder cannot pass), and the
//! one list of functions tachy knows by name (those that never run user
//! code, those that never return, those that throw or unwind).

use std::collections::BTreeSet;

use anyhow::Result;
use object::Object;

use crate::disasm::{Decoded, Target};
use crate::symbols::elf::symbol_names;
use crate::symbols::ElfObject;

/// Never runs user code (no callbacks), never unwinds and is no
/// thread-cancellation point: while it runs, nothing can unwind through
/// its caller.
const QUIET: u8 = 1;
/// Never returns to its caller: it throws, unwinds or ends the process.
/// Code after a call to it is often a landing pad, reached by the
/// unwinder, not by a return.
const NO_RETURN: u8 = 2;
/// Throws, unwinds or cancels, or is unwinding machinery: an object that
/// defines or imports it may be unwound through.
const UNWINDS: u8 = 4;

/// Functions known by name, with what is known of them.
const KNOWN: &[(&str, u8)] = &[
    ("memcpy", QUIET),
    ("memmove", QUIET),
    ("memset", QUIET),
    ("memcmp", QUIET),
    ("memchr", QUIET),
    ("strlen", QUIET),
    ("strnlen", QUIET),
    ("strcmp", QUIET),
    ("strncmp", QUIET),
    ("strcpy", QUIET),
    ("strncpy", QUIET),
    ("strcat", QUIET),
    ("strncat", QUIET),
    ("strchr", QUIET),
    ("strrchr", QUIET),
    ("strstr", QUIET),
    ("strdup", QUIET),
    ("strndup", QUIET),
    ("malloc", QUIET),
    ("calloc", QUIET),
    ("realloc", QUIET),
    ("free", QUIET),
    ("aligned_alloc", QUIET),
    ("posix_memalign", QUIET),
    ("clock_gettime", QUIET),
    ("gettimeofday", QUIET),
    ("time", QUIET),
    ("getpid", QUIET),
    ("gettid", QUIET),
    ("__errno_location", QUIET),
    ("__stack_chk_fail", QUIET | NO_RETURN),
    ("abs", QUIET),
    ("labs", QUIET),
    ("atoi", QUIET),
    ("atol", QUIET),
    ("strtol", QUIET),
    ("strtoul", QUIET),
    ("strtoll", QUIET),
    ("strtoull", QUIET),
    ("strtod", QUIET),
    ("__memcpy_chk", QUIET),
    ("__memset_chk", QUIET),
    ("__memmove_chk", QUIET),
    ("__strcpy_chk", QUIET),
    ("__strcat_chk", QUIET),
    ("_Unwind_Resume", NO_RETURN | UNWINDS),
    ("_Unwind_RaiseException", UNWINDS),
    ("_Unwind_ForcedUnwind", UNWINDS),
    ("__cxa_throw", NO_RETURN | UNWINDS),
    ("__cxa_rethrow", NO_RETURN | UNWINDS),
    ("__gxx_personality_v0", UNWINDS),
    ("rust_eh_personality", UNWINDS),
    ("__rust_start_panic", UNWINDS),
    ("pthread_exit", NO_RETURN | UNWINDS),
    ("pthread_cancel", UNWINDS),
    ("__cxa_bad_cast", NO_RETURN),
    ("__cxa_bad_typeid", NO_RETURN),
    ("__cxa_throw_bad_array_new_length", NO_RETURN),
    ("__cxa_call_terminate", NO_RETURN),
    ("__cxa_call_unexpected", NO_RETURN),
    ("std::terminate()", NO_RETURN),
    ("abort", NO_RETURN),
    ("exit", NO_RETURN),
    ("_exit", NO_RETURN),
    ("_Exit", NO_RETURN),
    ("quick_exit", NO_RETURN),
    ("__assert_fail", NO_RETURN),
    ("__fortify_fail", NO_RETURN),
    ("__chk_fail", NO_RETURN),
    ("longjmp", NO_RETURN),
    ("siglongjmp", NO_RETURN),
    ("__longjmp_chk", NO_RETURN),
    ("__libc_fatal", NO_RETURN),
    ("err", NO_RETURN),
    ("errx", NO_RETURN),
    ("verr", NO_RETURN),
    ("verrx", NO_RETURN),
];

/// Demangled name prefixes of functions that never return (C++ throw
/// helpers, Rust panics).
const NO_RETURN_PREFIXES: &[&str] = &[
    "std::__throw_",
    "core::panicking::",
    "std::panicking::begin_panic",
    "core::result::unwrap_failed",
    "core::option::expect_failed",
    "core::option::unwrap_failed",
];

fn known(name: &str, what: u8) -> bool {
    KNOWN.iter().any(|&(n, k)| n == name && k & what != 0)
}

/// Whether a call site's callee, as shown (`name`, `name@plt`,
/// `name@got`), is known never to return.
pub fn never_returns(shown: &str) -> bool {
    let name = shown.trim_end_matches("@plt").trim_end_matches("@got");
    known(name, NO_RETURN) || NO_RETURN_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Whether an imported function never runs user code nor unwinds.
fn is_quiet(name: &str) -> bool {
    known(name, QUIET)
}

/// Whether exceptions, panics or thread cancellation may unwind through
/// this object's code: it has an exception table (`.gcc_except_table`),
/// or defines or imports a function that throws, unwinds or cancels.
pub fn object_unwinds(obj: &ElfObject) -> Result<bool> {
    let file = obj.parse()?;
    if file.section_by_name(".gcc_except_table").is_some() {
        return Ok(true);
    }
    let named = |n: &&str| known(n.split('@').next().unwrap_or(n), UNWINDS);
    Ok(symbol_names(&file, false).iter().any(named) || symbol_names(&file, true).iter().any(named))
}

/// Whether everything a function can run while on the stack is code of its
/// own object (which has no unwinding machinery) or a quiet library
/// function: no call through a pointer, no other import. An exception
/// thrown by a callback (a C library function calling back into C++)
/// would otherwise unwind through it.
pub(super) fn runs_only_quiet_code(obj: &ElfObject, d: &Decoded) -> bool {
    const MAX_FUNCS: usize = 64;
    let Ok(index) = obj.symbols() else {
        return false;
    };
    let imports = obj.imports();
    let mut seen: BTreeSet<u64> = BTreeSet::new();
    let mut work: Vec<Decoded> = vec![d.clone()];
    while let Some(d) = work.pop() {
        let targets = d
            .calls
            .iter()
            .map(|c| c.target)
            .chain(d.tails.iter().map(|t| t.target));
        for t in targets {
            let addr = match t {
                Target::Indirect => return false,
                Target::Slot(slot) => match imports.slot_name(slot) {
                    Some(n) if is_quiet(n) => continue,
                    _ => return false,
                },
                Target::Direct(a) => a,
            };
            if let Some(n) = imports.plt_name(addr) {
                if is_quiet(n) {
                    continue;
                }
                return false;
            }
            if !seen.insert(addr) {
                continue;
            }
            if seen.len() > MAX_FUNCS {
                return false;
            }
            let Some(g) = index.function_starting_at(addr) else {
                return false;
            };
            match super::decode_function(obj, &g) {
                Ok(gd) => work.push(gd),
                Err(_) => return false,
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_list_answers_each_question() {
        assert!(never_returns("__cxa_throw@plt"));
        assert!(never_returns("std::__throw_out_of_range(char const*)@plt"));
        assert!(never_returns("std::terminate()"));
        assert!(!never_returns("memcpy@plt"));
        assert!(is_quiet("memcpy") && is_quiet("__stack_chk_fail"));
        assert!(!is_quiet("qsort") && !is_quiet("__cxa_throw"));
        assert!(known("_Unwind_RaiseException", UNWINDS));
        assert!(!known("abort", UNWINDS));
    }
}
