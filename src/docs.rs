//! Shell completion scripts and man pages, generated from the clap
//! definitions in `cli`, so they always name the options tachy has.
//! Nothing here traces or touches the system beyond the files it is told
//! to write.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use clap::CommandFactory;

use crate::cli::Cli;

/// Writes the completion script for `shell` to `w`.
pub fn completions(shell: clap_complete::Shell, w: &mut dyn Write) -> Result<()> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "tachy", w);
    w.flush().context("cannot write the completion script")
}

/// Writes tachy(1) to `w`.
pub fn man_page(w: &mut dyn Write) -> Result<()> {
    // As `man_pages` writes it: `help` has no page of its own to list.
    clap_mangen::Man::new(Cli::command().disable_help_subcommand(true))
        .render(w)
        .and_then(|_| w.flush())
        .context("cannot write the man page")
}

/// Writes tachy.1 and a page per subcommand (tachy-latency.1, ...) into
/// `dir`, which must exist.
pub fn man_pages(dir: &Path) -> Result<()> {
    if !dir.is_dir() {
        anyhow::bail!("{} is not a directory", dir.display());
    }
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("cannot write the man pages into {}", dir.display()))
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
        man_page(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(".ie \\n(.g .ds Aq"), "{}", &text[..40]);
        assert!(text.contains(".TH tachy 1"));
        assert!(text.contains(crate::cli::VERSION));
        assert!(text.contains("tachy\\-latency(1)"));
        assert!(!text.contains("tachy\\-help(1)"));
    }
}
