//! Shell completion scripts and man pages, generated from the clap
//! definitions in `args` so that they always name the options tachy has,
//! and which page `tachy man` prints. Nothing here traces or touches the
//! system beyond the files it is told to write.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::CommandFactory;

use super::{usage, Cli, ManArgs};

/// Writes the completion script for `shell` to `w`. Bash, zsh and fish
/// complete the ids of running processes after -p and of their threads
/// after -t, read from /proc as the user presses Tab; `--by` offers its
/// keys (from `cli`'s possible values) in every shell.
pub fn completions(shell: clap_complete::Shell, w: &mut dyn Write) -> Result<()> {
    let mut cmd = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "tachy", &mut script);
    let script = String::from_utf8_lossy(&script);
    let script = match shell {
        clap_complete::Shell::Bash => bash_ids(&script),
        clap_complete::Shell::Zsh => zsh_ids(&script),
        clap_complete::Shell::Fish => fish_ids(&script),
        _ => script.into_owned(),
    };
    w.write_all(script.as_bytes())
        .and_then(|_| w.flush())
        .context("cannot write the completion script")
}

/// clap_complete offers file names for the value of an option it knows
/// nothing about; for -p and -t the bash script is made to offer ids.
fn bash_ids(script: &str) -> String {
    // As clap_complete writes the case of an option that takes a value.
    const FILES: &str = "\n                    COMPREPLY=($(compgen -f \"${cur}\"))";
    let mut out = String::from(
        "# The ids of running processes (pid) or of their threads (tid).
_tachy_ids() {
    local d
    if [[ $1 == tid ]]; then
        for d in /proc/[0-9]*/task/[0-9]*; do echo \"${d##*/}\"; done
    else
        for d in /proc/[0-9]*; do echo \"${d##*/}\"; done
    fi
}

",
    );
    let mut body = script.to_string();
    for (opts, kind) in [(["--pid)", "-p)"], "pid"), (["--tid)", "-t)"], "tid")] {
        for opt in opts {
            body = body.replace(
                &format!("{opt}{FILES}"),
                &format!(
                    "{opt}\n                    COMPREPLY=($(compgen -W \"$(_tachy_ids {kind})\" -- \"${{cur}}\"))"
                ),
            );
        }
    }
    out.push_str(&body);
    out
}

/// zsh: process ids from zsh's own `_pids`, thread ids from /proc.
fn zsh_ids(script: &str) -> String {
    let body = script
        .replace("]:PID:_default'", "]:PID:_pids'")
        .replace("]:TID:_default'", "]:TID:_tachy_tids'");
    let tids = "(( $+functions[_tachy_tids] )) ||
_tachy_tids() {
    local expl
    local -a tids
    tids=(/proc/[0-9]*/task/[0-9]*(N:t))
    _wanted tids expl 'thread id' compadd -a tids
}

";
    match body.rfind("if [ \"$funcstack[1]\" = \"_tachy\" ]") {
        Some(at) => format!("{}{tids}{}", &body[..at], &body[at..]),
        None => body,
    }
}

/// fish: process ids from fish's own `__fish_complete_pids`, thread ids
/// from /proc (fish globs have no `[0-9]`: only processes have a `task`).
fn fish_ids(script: &str) -> String {
    script
        .lines()
        .map(|line| {
            if line.contains(" -s p -l pid ") && line.ends_with(" -r") {
                format!("{line} -f -a \"(__fish_complete_pids)\"")
            } else if line.contains(" -s t -l tid ") && line.ends_with(" -r") {
                format!("{line} -f -a \"(string replace -r '.*/' '' /proc/*/task/* | sort -un)\"")
            } else {
                line.to_string()
            }
        })
        .map(|l| l + "\n")
        .collect()
}

/// What every page says under EXIT STATUS: (status, meaning).
const EXIT_STATUS: [(&str, &str); 4] = [
    (
        "0",
        "Success, also when SIGINT (Ctrl\\-C) or SIGTERM stopped tracing and the report was printed. With a command after \\-\\- (latency, nested), the command's own exit status.",
    ),
    ("1", "An error, said in one line on standard error."),
    (
        "2",
        "Bad usage: an unknown option, a value that does not parse, or options that do not go together.",
    ),
    (
        "130, 143",
        "SIGINT (130) or SIGTERM (143) ended tachy before tracing began, before its report was printed (a second stop more than 1 s after the first; tachy says the report was abandoned), or while it waited for the command after \\-\\-. Signals within 1 s of the first are one stop.",
    ),
];

/// The environment tachy reads: (variable, meaning).
const ENVIRONMENT: [(&str, &str); 9] = [
    (
        "TACHY_CACHE_DIR",
        "The directory of the probe-time cache (see FILES), instead of the default; empty is as unset. Where it cannot be written, tachy says so in one line and measures the probe time (~0.4 s) at every start.",
    ),
    (
        "XDG_CACHE_HOME, HOME",
        "Without TACHY_CACHE_DIR, a user other than root caches the probe time in $XDG_CACHE_HOME/tachy, else in $HOME/.cache/tachy.",
    ),
    (
        "TACHY_BY_GROUPS",
        "How many groups the kernel keeps for \\-\\-by (1 to 1048576; 4096 if unset). A call of a new group while the map is full is counted in its function's \"not grouped\" line.",
    ),
    (
        "TACHY_RECORD_BUFFER",
        "The size in bytes of the ring buffer of \\-\\-record\\-slower\\-than: a power of two of at least a page (1 MiB if unset).",
    ),
    (
        "TACHY_STACK_METHOD",
        "fp or copy: how \\-\\-stack and \\-\\-by stack take user stacks, the rbp chain walked in the kernel or a copy of the stack unwound with .eh_frame, instead of tachy's choice (frame pointers only where every traced object keeps them).",
    ),
    (
        "TACHY_NO_UPROBE_MULTI",
        "If set, attach uprobes one at a time, as on kernels before 6.6, instead of with uprobe_multi links.",
    ),
    (
        "TACHY_NO_FENTRY",
        "If set, time kernel functions (k:FUNC) with kprobes instead of fentry/fexit.",
    ),
    (
        "PATH",
        "Where a command after \\-\\- is looked up when its name has no /.",
    ),
    (
        "LD_LIBRARY_PATH",
        "Also searched for the libraries of a program named by its path (PATH:FUNC).",
    ),
];

/// The files tachy reads and writes: (path, meaning).
const FILES: [(&str, &str); 2] = [
    (
        "/var/cache/tachy/probe\\-time",
        "The time of tachy's own probes, measured at start\\-up and subtracted from every duration; kept for one kernel, CPU model and tachy binary. Root's; TACHY_CACHE_DIR moves it.",
    ),
    (
        "$XDG_CACHE_HOME/tachy/probe\\-time",
        "The same for other users (~/.cache/tachy/probe\\-time without XDG_CACHE_HOME).",
    ),
];

/// What `tachy man` writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ManTarget {
    /// One page to standard output: `tachy` or a subcommand's name.
    Page(String),
    /// Every page, into this directory.
    Dir(PathBuf),
}

impl ManArgs {
    /// Tells a page from a directory: a directory has a `/` in it (or is
    /// `.` or `..`), so that no directory can shadow a page's name.
    pub fn validate(self) -> Result<ManTarget> {
        let Some(arg) = self.page else {
            return Ok(ManTarget::Page("tachy".into()));
        };
        if arg.contains('/') || arg == "." || arg == ".." {
            return Ok(ManTarget::Dir(PathBuf::from(arg)));
        }
        let names = page_names();
        let name = arg.strip_prefix("tachy-").unwrap_or(&arg);
        if names.iter().any(|n| n == name) {
            return Ok(ManTarget::Page(name.to_string()));
        }
        Err(usage(format!(
            "{arg:?} is not a page ({}); write a directory with a / in it (./{arg})",
            names.join(", ")
        )))
    }
}

/// The names `tachy man` prints a page for: tachy and its subcommands.
pub fn page_names() -> Vec<String> {
    let cmd = Cli::command();
    std::iter::once("tachy".to_string())
        .chain(cmd.get_subcommands().map(|c| c.get_name().to_string()))
        .filter(|n| n != "help")
        .collect()
}

/// tachy and its subcommands, each as its page renders it (built, so that
/// each knows its `tachy latency` name).
fn pages() -> Vec<clap::Command> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let subs: Vec<clap::Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    std::iter::once(cmd).chain(subs).collect()
}

/// Writes the page of `name` (`tachy`, or a subcommand's name) to `w`.
pub fn man_page(name: &str, w: &mut dyn Write) -> Result<()> {
    let page = pages()
        .into_iter()
        .find(|c| c.get_name() == name)
        .with_context(|| format!("no page named {name}"))?;
    render(page, w)
        .and_then(|_| w.flush())
        .context("cannot write the man page")
}

/// Writes tachy.1 and a page per subcommand (tachy-latency.1, ...) into
/// `dir`, creating it (and its parents) if missing.
pub fn man_pages(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the directory {}", dir.display()))?;
    for page in pages() {
        let man = clap_mangen::Man::new(page.clone());
        let path = dir.join(man.get_filename());
        let write = || -> std::io::Result<()> {
            let mut f = std::io::BufWriter::new(std::fs::File::create(&path)?);
            render(page, &mut f)?;
            f.flush()
        };
        write().with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// One page: clap_mangen's sections, then EXIT STATUS, ENVIRONMENT and
/// FILES, then the after-help text as EXAMPLES (the lines as written) and
/// NOTES (its paragraphs of prose).
fn render(cmd: clap::Command, w: &mut dyn Write) -> std::io::Result<()> {
    let after = cmd.get_after_help().map(|s| s.to_string());
    let has_args = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subs = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let version = cmd.get_version().is_some();
    let man = clap_mangen::Man::new(cmd);
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if has_args {
        man.render_options_section(w)?;
    }
    if has_subs {
        man.render_subcommands_section(w)?;
    }
    let mut roff = String::new();
    let mut list = |title: &str, items: &[(&str, &str)]| {
        roff.push_str(&format!(".SH \"{title}\"\n"));
        for (term, text) in items {
            roff.push_str(&format!(".TP\n\\fB{term}\\fR\n{text}\n"));
        }
    };
    list("EXIT STATUS", &EXIT_STATUS);
    list("ENVIRONMENT", &ENVIRONMENT);
    list("FILES", &FILES);
    let (examples, notes) = split_after_help(after.as_deref().unwrap_or(""));
    if !notes.is_empty() {
        roff.push_str(".SH NOTES\n");
        for (i, para) in notes.iter().enumerate() {
            if i > 0 {
                roff.push_str(".PP\n");
            }
            for line in para.lines() {
                roff.push_str(&text_line(line));
            }
        }
    }
    if !examples.is_empty() {
        // As written: one example a line, aligned by spaces.
        roff.push_str(".SH EXAMPLES\n.nf\n");
        for line in examples.lines() {
            roff.push_str(&text_line(line));
        }
        roff.push_str(".fi\n");
    }
    w.write_all(roff.as_bytes())?;
    if version {
        man.render_version_section(w)?;
    }
    Ok(())
}

/// Splits a subcommand's after-help text into its examples (the lines
/// after "Examples:", up to the first blank line) and its paragraphs of
/// prose; the paragraph "Exit status: ..." is left out, EXIT STATUS says it.
fn split_after_help(text: &str) -> (String, Vec<String>) {
    let mut examples = String::new();
    let mut notes = Vec::new();
    for para in text.split("\n\n") {
        let para = para.trim_matches('\n');
        if let Some(rest) = para.strip_prefix("Examples:") {
            // Without the indentation --help gives them under "Examples:".
            let lines: Vec<&str> = rest.trim_start_matches('\n').lines().collect();
            let indent = lines
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.len() - l.trim_start().len())
                .min()
                .unwrap_or(0);
            for line in lines {
                examples.push_str(line.get(indent..).unwrap_or(""));
                examples.push('\n');
            }
        } else if !para.trim().is_empty() && !para.starts_with("Exit status:") {
            notes.push(para.to_string());
        }
    }
    (examples, notes)
}

/// One line of text, escaped for roff: backslashes and hyphens, and a
/// leading `.` or `'` that would make it a request.
fn text_line(line: &str) -> String {
    let mut s = line.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        s.insert_str(0, "\\&");
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_gets_a_script_naming_the_subcommands() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            completions(shell, &mut out).unwrap();
            let text = String::from_utf8(out).unwrap();
            for word in ["latency", "nested", "list", "slower-than", "completions"] {
                assert!(text.contains(word), "{shell}: no {word}");
            }
        }
    }

    #[test]
    fn the_man_page_has_the_version_and_subcommands() {
        let mut out = Vec::new();
        man_page("tachy", &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(".ie \\n(.g .ds Aq"), "{}", &text[..40]);
        assert!(text.contains(".TH tachy 1"));
        assert!(text.contains(crate::version::VERSION));
        assert!(text.contains("tachy\\-latency(1)"));
        assert!(!text.contains("tachy\\-help(1)"));
    }
}
