//! tachy: parse the arguments, run, print one error chain, exit.

use clap::{CommandFactory, Parser};
use tachy::cli::{self, docs};
use tachy::{diff, explore, merge, trace};

fn main() {
    let cli = cli::Cli::parse();
    let name = cli.cmd.name();
    let result = match cli.cmd {
        cli::Command::Latency(a) => a.validate().and_then(trace::latency),
        cli::Command::Nested(a) => a.validate().and_then(trace::latency),
        cli::Command::List(a) => a.validate().and_then(trace::list),
        cli::Command::Completions(a) => {
            docs::completions(a.shell, &mut std::io::stdout().lock()).map(|_| 0)
        }
        cli::Command::Explore(a) => explore::run(a),
        cli::Command::Merge(a) => merge::run_merge(a),
        cli::Command::Diff(a) => diff::run_diff(a),
        cli::Command::Man(a) => a.validate().and_then(|t| match t {
            cli::ManTarget::Dir(dir) => docs::man_pages(&dir).map(|_| 0),
            cli::ManTarget::Page(name) => {
                docs::man_page(&name, &mut std::io::stdout().lock()).map(|_| 0)
            }
        }),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // A closed pipe (`tachy list … | head`) is the reader's choice, not an error.
            let broken_pipe = e
                .chain()
                .filter_map(|c| c.downcast_ref::<std::io::Error>())
                .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe);
            if broken_pipe {
                std::process::exit(0);
            }
            if let Some(u) = e.downcast_ref::<cli::UsageError>() {
                // As clap reports its own usage errors: with the
                // subcommand's usage line, and exit status 2.
                let mut cmd = cli::Cli::command();
                cmd.build();
                let sub = cmd.find_subcommand_mut(name).cloned().unwrap_or(cmd);
                let mut sub = sub;
                sub.error(clap::error::ErrorKind::ArgumentConflict, u)
                    .exit();
            }
            eprintln!("tachy: {}", cli::error_text(&e));
            std::process::exit(1);
        }
    }
}
