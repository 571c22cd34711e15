//! The command line: clap's definitions (`args`, holding raw strings and
//! numbers, with the value parsers of `values`), their one conversion into
//! validated settings (`settings`, `list`), and what is generated from the
//! definitions (`docs`: man pages and completion scripts). Nothing
//! downstream parses.

mod args;
pub mod docs;
mod list;
mod settings;
mod values;

pub use args::{
    Cli, Command, CompletionsArgs, DiffArgs, LatencyArgs, ListArgs, ManArgs, MergeArgs, NestedArgs,
    TraceArgs,
};
pub use docs::{page_names, ManTarget};
pub use list::ListSettings;
pub use settings::{
    ExportSettings, Format, Mode, NestedOpts, Output, TraceSettings, Traced, TEXTFILE_EVERY,
};
pub use values::{Quoted, BY_KEYS};

pub use crate::usage::UsageError;

/// An error and its causes as one message, `outer: inner: …`, worded as
/// tachy's own: no `(os error N)` tails, the system's messages lowercase
/// (`no space left on device`), `libbpf: ` said once.
pub fn error_text(e: &anyhow::Error) -> String {
    let parts: Vec<String> = e
        .chain()
        .map(|c| {
            let mut t = without_os_error(&c.to_string());
            if c.downcast_ref::<std::io::Error>().is_some() {
                t = lowercase_first(&t);
            }
            t
        })
        .collect();
    let mut text = parts.join(": ");
    while text.contains("libbpf: libbpf: ") {
        text = text.replace("libbpf: libbpf: ", "libbpf: ");
    }
    text
}

/// `s` without the ` (os error N)` that Rust adds to system errors.
fn without_os_error(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(" (os error ") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + " (os error ".len()..];
        let digits = tail.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 && tail[digits..].starts_with(')') {
            rest = &tail[digits + 1..];
        } else {
            out.push_str(" (os error ");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// `No space left on device` as `no space left on device`; an acronym
/// (`ENOSPC`) stays.
fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(a), Some(b)) if a.is_ascii_uppercase() && b.is_ascii_lowercase() => {
            format!("{}{}", a.to_ascii_lowercase(), &s[1..])
        }
        _ => s.to_string(),
    }
}

fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Errors read as tachy's own: no `(os error N)`, system messages in
    /// lowercase, `libbpf: ` once.
    #[test]
    fn error_text_is_cleaned() {
        let io = std::io::Error::from_raw_os_error(28);
        let e = anyhow::Error::new(io).context("cannot write the report to standard output");
        assert_eq!(
            error_text(&e),
            "cannot write the report to standard output: no space left on device"
        );
        let e = anyhow::anyhow!("libbpf: libbpf: failed to attach: Invalid argument (os error 22)")
            .context("cannot attach probes");
        assert_eq!(
            error_text(&e),
            "cannot attach probes: libbpf: failed to attach: Invalid argument"
        );
        assert_eq!(without_os_error("a (os error x) b"), "a (os error x) b");
        assert_eq!(lowercase_first("ENOSPC"), "ENOSPC");
    }
}
